"""The command line keeps compiled programs on disk (`machine.use_compilation_cache`): a second
identical `fedjax-rl train` compiles nothing it had compiled, with the same numbers, and a damaged
cache entry costs a compile, never a number. Each run is its own process, as a user's is; the
benchmark (benchmarks/startup/compile_cache.py) measures the time it saves."""

import json
import os
import subprocess
import sys

from fedjax_rl.training import machine

TINY = ["train", "--algo", "fedrdqn", "--omega", "0.2", "--seeds", "2", "--agents", "2", "--sync-every", "10",
        "--steps", "40", "--eval-every", "2", "--eval-episodes", "1", "--set", "hidden_sizes=8",
        "--set", "learning_starts=10", "--set", "train_freq=1", "--set", "batch_size=4", "--set", "buffer_size=20",
        "--no-progress", "--no-tensorboard"]


def _train(out, cache) -> tuple[dict, str]:
    # Every program kept, whatever it took to compile: with the default second, a program compiling near
    # it was kept by one process and not by the next under another load, and read as compiled anew.
    env = {**os.environ, machine.CACHE_ENV: str(cache), machine.CACHE_MIN_COMPILE_ENV: "0", "JAX_LOG_COMPILES": "1"}
    done = subprocess.run([sys.executable, "-m", "fedjax_rl.cli", *TINY, "--out", str(out)], env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    with open(os.path.join(out, "metrics.json")) as f:
        return json.load(f)["final"], done.stderr


def _entries(cache) -> dict[str, bytes]:
    return {name: (cache / name).read_bytes() for name in os.listdir(cache)}


def test_a_second_train_compiles_nothing_and_a_damaged_entry_changes_no_number(tmp_path):
    """Two processes: the first fills the cache; before the second, one entry is damaged. The second
    reads the others (hits; they stay as they were), compiles the damaged one again with a warning,
    and gives the first's numbers."""
    cache = tmp_path / "cache"
    first, _ = _train(tmp_path / "first", cache)
    entries = _entries(cache)
    assert len(entries) >= 2, f"the first run kept {len(entries)} compiled program(s)"
    damaged = sorted(entries)[0]
    (cache / damaged).write_bytes(b"not a compiled program")
    again, log = _train(tmp_path / "again", cache)
    assert again == first
    assert "Persistent compilation cache hit" in log
    assert "Error reading persistent compilation cache entry" in log
    after = _entries(cache)
    assert {name: after[name] for name in entries if name != damaged} == {
        name: value for name, value in entries.items() if name != damaged}  # read, not compiled again
    assert set(after) == set(entries)  # nothing new compiled that was kept


def test_the_cache_is_the_users_unless_moved_or_turned_off(monkeypatch, tmp_path):
    monkeypatch.delenv(machine.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert machine.compilation_cache_dir() == os.path.join(str(tmp_path), "fedjax_rl", "jax")
    monkeypatch.setenv(machine.CACHE_ENV, str(tmp_path / "elsewhere"))
    assert machine.compilation_cache_dir() == str(tmp_path / "elsewhere")
    for off in ("off", "OFF", "0"):
        monkeypatch.setenv(machine.CACHE_ENV, off)
        assert machine.compilation_cache_dir() is None and machine.use_compilation_cache() is None
