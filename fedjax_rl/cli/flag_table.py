"""The table of flags whose help, defaults and choices come from the settings declarations
(`flag_table`), and the generator of `fedjax_rl/cli/flags.py` from it (`write_flag_table`, `make
cli-flags`): the parser reads the generated table, so `--help` imports no JAX."""

from __future__ import annotations

import os

# Every training setting's flag is its config name (`--sync-every` for `sync_every`); these shorter
# spellings are aliases of it.
ALIASES = {
    "env_name": ("--env",),
    "physics": ("--param",),
    "num_agents": ("--agents",),
    "steps_per_agent": ("--steps",),
    "eval_every_rounds": ("--eval-every",),
    "num_devices": ("--devices",),
}
AGENT_FLAGS = ("omega", "tau")  # agent settings that also have a flag of their own (any has --set)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _defaults_by_value(default_of: dict[str, str]) -> list[str]:
    """{"Hopper-v4": "c", "Ant-v4": "c"} -> ["c for Hopper-v4, Ant-v4"], in first-seen order."""
    names_of = {}
    for name, value in default_of.items():
        names_of.setdefault(value, []).append(name)
    return [f"{value} for {', '.join(names)}" for value, names in names_of.items()]


def flag_table() -> dict:
    """The help, defaults and choices of the flags that come from the settings declarations
    (`TRAIN_SETTINGS`, the algorithms' settings, the environment registry, the reproduce tables):
    what `fedjax_rl/cli/flags.py` holds. Imports JAX and every settings module."""
    from fedjax_rl import agents, envs
    from fedjax_rl.reproduce import plan, tables
    from fedjax_rl.training import configs, machine
    from fedjax_rl.training.configs import TRAIN_SETTINGS

    built_in = {name: agents.get(name) for name in agents.built_in()}  # plugins are added when a parser is built
    resolved = {
        "env_name": repr(configs.DEFAULT_ENV),
        "physics": "the task's first perturbed parameter",
        "steps_per_agent": "RL-Zoo3's budget for the task",
        "eval_every_rounds": f"{configs.EVAL_POINTS} evaluations per run",
        "num_devices": "none: every agent on one device",
    }
    if "engine" in {s.name for s in TRAIN_SETTINGS}:
        by_engine = _defaults_by_value({name: envs.get(name).engines[0] for name in envs.built_in()})
        resolved["engine"] = "; ".join(part for part in by_engine if not part.startswith("jax ")) + \
            "; none for the tasks written in JAX"
    resolved["cpu_dots"] = "; ".join(_defaults_by_value(
        {name: algorithm.agent.CPU_DOTS for name, algorithm in built_in.items()}))
    train = []
    for setting in TRAIN_SETTINGS:
        if setting.name == "agent":
            continue
        default = resolved.get(setting.name, f"{setting.default!r}{' ' + setting.source if setting.source else ''}")
        entry = {"dest": setting.name, "flags": [_flag(setting.name), *ALIASES.get(setting.name, ())],
                 "help": f"{setting.help} (default: {default})"}
        if setting.name == "algo":
            entry["choices"] = sorted(agents.built_in())  # the command line adds the installed plugins
        elif setting.name == "cpu_dots":
            entry["choices"] = list(machine.CPU_DOTS)
        elif setting.name == "env_name":
            entry["help"] = f"{setting.help}: {', '.join(envs.built_in())} (default: {default})"
            entry["metavar"] = "ENV"
        elif setting.kind is bool:  # a switch: --no-NAME for a setting on by default, --NAME otherwise
            entry["flags"] = [_flag(("no_" if setting.default else "") + setting.name)]
            entry["const"] = "false" if setting.default else "true"
            entry["help"] = (f"without {setting.help} (default: with)" if setting.default
                             else f"with {setting.help} (default: without)")
        elif setting.name == "physics":
            per_env = []
            for name in envs.built_in():
                paper, every = envs.get(name).perturbed, envs.physics_names(name)
                others = [n for n in every if n not in paper]
                also = ("any body by its XML name or float model field" if len(every) > 20
                        else ", ".join(others))
                per_env.append(f"{name}: {', '.join(paper)} (the paper's){'; also ' + also if also else ''}")
            entry["help"] = f"{setting.help}. Per task: {'. '.join(per_env)} (default: {default})"
            entry["metavar"] = "NAME[,NAME]"
        train.append(entry)
    family_settings = {}
    for algorithm in built_in.values():
        names = sorted(s.name for s in algorithm.config.SETTINGS if s.name not in algorithm.fixed)
        family_settings.setdefault(algorithm.family, names)
    for name in AGENT_FLAGS:
        defaults = {}
        for algorithm in built_in.values():
            value = getattr(configs.agent_config(algorithm.name, configs.DEFAULT_ENV), name)
            defaults.setdefault(value, []).append(algorithm.name)
        declared = next(s for s in built_in["fedrdqn"].config.SETTINGS if s.name == name)
        shown = "; ".join(f"{v:g} for {', '.join(algos)}" for v, algos in defaults.items()) if len(defaults) > 1 \
            else f"{next(iter(defaults)):g}"
        fixed = " (fixed: the *Avg baselines have no robust term)" if name == "omega" else ""
        train.append({"dest": name, "flags": [_flag(name)], "type": declared.kind.__name__,
                      "help": f"{declared.help}, as --set {name}=... (default: {shown}{fixed})"})
    set_help = ("override a setting of the algorithm, repeatable: --set learning_rate=1e-3 --set hidden_sizes=64,64. "
                + " ".join(f"{family}: {', '.join(names)}." for family, names in family_settings.items())
                + " (default: none; each setting's default depends on the algorithm and the task, see "
                  "fedjax_rl/training/configs.py)")
    return {
        "train": train,
        "set_help": set_help,
        "reproduce": {"tables": sorted(tables.TABLES), "seeds": plan.DEFAULT_SEEDS,
                      "tuning_seeds": plan.DEFAULT_TUNING_SEEDS,
                      "omegas": ",".join(f"{w:g}" for w in plan.DEFAULT_OMEGAS),
                      "cpu_run_batch": plan.CPU_RUN_BATCH, "new_seeds_at": list(plan.NEW_SEEDS_AT),
                      # The tables whose defaults are their own (`plan.table_defaults`).
                      "table_defaults": {name: _shown_defaults(plan.table_defaults(table))
                                         for name, table in sorted(tables.TABLES.items())
                                         if table.defaults or table.max_rates}},
    }


def _shown_defaults(defaults: dict) -> dict:
    """A table's request defaults as the command line spells them (`--seeds`, `--omegas` ...)."""
    listed = {name: ",".join(f"{v:g}" for v in defaults[name]) for name in ("omegas", "max_rates")
              if defaults.get(name) is not None}
    return {"seeds": defaults["num_seeds"], "tuning_seeds": defaults["tuning_seeds"], **listed}


def write_flag_table(path: str | None = None) -> str:
    """Regenerate fedjax_rl/cli/flags.py from the settings declarations."""
    import pprint

    path = path or os.path.join(os.path.dirname(__file__), "flags.py")
    text = ('"""The flags whose help, defaults and choices come from the settings declarations, as a table,\n'
            "so that building the command line's parser imports no JAX. GENERATED by\n"
            "`fedjax_rl.cli.flag_table.write_flag_table()` (`make cli-flags`) from `flag_table()`: do not edit;\n"
            'tests/test_cli.py checks that it is current."""\n\n'
            f"TABLE = {pprint.pformat(flag_table(), width=110, sort_dicts=False)}\n")
    with open(path, "w") as f:
        f.write(text)
    return path
