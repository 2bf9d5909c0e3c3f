"""What the commands share to build their arguments: a generated flag's argument (`add_flag`), the
installed plugins added to a flag's choices (`with_plugins`), and the error a command exits with."""

from __future__ import annotations

import argparse

from fedjax_rl import plugins
from fedjax_rl.cli import flags

RUN_BATCH_HELP = ("runs (seeds x grid points) vmapped at a time; batches run one after another in the same "
                  "program ('all': one vmap). On a CPU, batches of 10-20 runs train a 40-run grid 1.6-2x faster "
                  "(benchmarks/run_batch.py); the numbers change by float rounding")
# The Python types a flag's entry may name: its setting's declared kind (`--omega` is a float).
# The other flags stay text and are parsed by their setting (`Setting.parse`: "ints", bools).
FLAG_TYPES = {"str": str, "float": float}


def add_flag(p: argparse.ArgumentParser, entry: dict) -> None:
    """One flag of the table; a switch stores its setting's text ("false"), parsed like any other."""
    if "const" in entry:
        p.add_argument(*entry["flags"], dest=entry["dest"], default=None, action="store_const", const=entry["const"],
                       help=entry["help"].replace("%", "%%"))
        return
    extra = {k: entry[k] for k in ("choices", "metavar") if k in entry}
    p.add_argument(*entry["flags"], dest=entry["dest"], default=None, type=FLAG_TYPES[entry.get("type", "str")],
                   help=entry["help"].replace("%", "%%"), **extra)


# The flags whose values an installed plugin adds to (`fedjax_rl.plugins`): listed, not imported.
PLUGIN_FLAGS = {"algo": plugins.ALGORITHMS, "aggregation": plugins.AGGREGATORS}


def with_plugins(entry: dict) -> dict:
    """A flag's table entry with the installed plugins' names among its choices and in its help."""
    group = PLUGIN_FLAGS.get(entry["dest"])
    if group is None:
        return entry
    names = sorted(plugins.installed(group))
    if not names:
        return entry
    entry = dict(entry, help=entry["help"] + f"; installed plugins: {', '.join(names)}")
    if "choices" in entry:
        entry["choices"] = sorted({*entry["choices"], *names})
    return entry


def table_entry(dest: str) -> dict:
    """The generated flag table's entry of the training flag `dest`."""
    return next(entry for entry in flags.TABLE["train"] if entry["dest"] == dest)


def usage_error(err) -> SystemExit:
    """The exit of a command refused with `err`: its message on stderr, exit status 1."""
    return SystemExit(f"fedjax-rl: error: {err}")
