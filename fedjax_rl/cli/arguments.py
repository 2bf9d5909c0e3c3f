"""What the commands share to build their arguments: a generated flag's argument (`add_flag`), the
installed plugins added to a flag's choices (`with_plugins`), and the error a command exits with."""

from __future__ import annotations

import argparse

from fedjax_rl.cli import flags

RUN_BATCH_HELP = ("runs (seeds x grid points) vmapped at a time; batches run one after another in the same "
                  "program ('all': one vmap). On a CPU, batches of 10-20 runs train a 40-run grid 1.6-2x faster "
                  "(benchmarks/throughput/run_batch.py); the numbers change by float rounding")
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


# The flags whose choices installed plugins add to (`fedjax_rl.plugins`): listed, not imported.
PLUGIN_FLAGS = {"algo": "fedjax_rl.algorithms"}  # plugins.ALGORITHM_GROUP, without importing it here


class PluginChoices:
    """A flag's choices: the built-in names and those of the installed plugins of `group`, read from
    the packages' metadata the first time the choices are looked at (checking a value, printing this
    command's help), so that a command or a help that never looks reads no metadata."""

    def __init__(self, built_in, group: str):
        self.built_in, self.group, self.names = tuple(built_in), group, None

    def _all(self) -> list[str]:
        if self.names is None:
            from fedjax_rl import plugins

            self.names = sorted({*self.built_in, *plugins.installed(self.group)})
        return self.names

    def __iter__(self):
        return iter(self._all())

    def __contains__(self, name) -> bool:
        return name in self.built_in or name in self._all()

    def __len__(self) -> int:
        return len(self._all())


# Flags whose help names the installed plugins of a group (read from metadata when the help is
# printed, nothing imported): the sentence, with {names}.
PLUGIN_HELP = {
    "aggregation": ("fedjax_rl.aggregators", "Installed plugin rules: {names}."),
    "env_name": ("fedjax_rl.environments", "Installed plugin environments: {names}."),
    "set": ("fedjax_rl.algorithms", "Plugin algorithms ({names}) declare settings of their own: `fedjax-rl plugins` "
                                    "lists them."),
}


class PluginHelpFormatter(argparse.HelpFormatter):
    """A command's help with the installed plugins named after the flags they add to (`PLUGIN_HELP`)."""

    def _expand_help(self, action):
        text = super()._expand_help(action)
        if action.dest not in PLUGIN_HELP:
            return text
        from fedjax_rl import plugins

        group, sentence = PLUGIN_HELP[action.dest]
        names = sorted(plugins.installed(group))
        return f"{text}. {sentence.format(names=', '.join(names))}" if names else text


def with_plugins(entry: dict) -> dict:
    """A flag's table entry whose choices include the installed plugins' names (`PluginChoices`)."""
    group = PLUGIN_FLAGS.get(entry["dest"])
    if group is None or "choices" not in entry:
        return entry
    return dict(entry, choices=PluginChoices(entry["choices"], group))


def table_entry(dest: str) -> dict:
    """The generated flag table's entry of the training flag `dest`."""
    return next(entry for entry in flags.TABLE["train"] if entry["dest"] == dest)


def usage_error(err) -> SystemExit:
    """The exit of a command refused with `err`: its message on stderr, exit status 1."""
    return SystemExit(f"fedjax-rl: error: {err}")
