"""What a run directory keeps instead of deleting (`fedjax_rl.training.run_directory`'s helpers, used
by it alone): another configuration's run moved to DIR/set_aside/<n>/, and a damaged or incompatible
file moved beside itself as NAME.<why>.<n>.EXT. Numbers only grow, so nothing kept is overwritten."""

from __future__ import annotations

import os
import warnings

from fedjax_rl.training.checkpoint import DamagedFile

# DIR/set_aside/<n>/: runs of other configurations moved out of DIR (`new_run=True`), one per number.
SET_ASIDE = "set_aside"
# Directories of other runs nested in a run directory, never moved with its run: a reproduction
# program's seed pieces (`fedjax_rl.reproduce.seed_pieces`), PROGRAM/seeds_A-B/, beside the piece that
# PROGRAM/ itself holds.
NESTED_RUN_PREFIX = "seeds_"


def slots(out_dir: str) -> list[str]:
    """The set-aside runs of `out_dir`, oldest first."""
    root = os.path.join(out_dir, SET_ASIDE)
    if not os.path.isdir(root):
        return []
    return [os.path.join(root, n) for n in sorted((n for n in os.listdir(root) if n.isdigit()), key=int)]


def move_run(source: str, target: str) -> None:
    """Every entry of `source` except the set-aside folder and nested runs, into `target` (created)."""
    os.makedirs(target, exist_ok=True)
    for name in os.listdir(source):
        if name != SET_ASIDE and not name.startswith(NESTED_RUN_PREFIX):
            os.replace(os.path.join(source, name), os.path.join(target, name))


def set_aside_run(out_dir: str) -> str:
    """Move `out_dir`'s run to the next free DIR/set_aside/<n>/; returns that slot."""
    root = os.path.join(out_dir, SET_ASIDE)
    numbers = [int(os.path.basename(p)) for p in slots(out_dir)]
    slot = os.path.join(root, str(max(numbers, default=0) + 1))
    move_run(out_dir, slot)
    return slot


def set_aside_file(path: str, why: str) -> str:
    """Move `path` to NAME.<why>.<n>.EXT beside it (n = 1, 2, ...: never over an earlier one)."""
    stem, ext = os.path.splitext(path)
    n = 1
    while os.path.exists(f"{stem}.{why}.{n}{ext}"):
        n += 1
    kept = f"{stem}.{why}.{n}{ext}"
    os.replace(path, kept)
    return kept


def damaged(error: DamagedFile, consequence: str) -> str:
    """Set the damaged file aside and warn, naming it, where it went, and what happens next."""
    kept = set_aside_file(error.path, "damaged")
    warnings.warn(f"{error}: set aside as {kept}; {consequence}. Delete {kept} once you have looked at it.",
                  UserWarning, stacklevel=4)
    return kept
