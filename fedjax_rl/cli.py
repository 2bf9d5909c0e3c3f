"""`fedjax-rl` command line: train, plot, compare, demo, reproduce.

    fedjax-rl train --algo fedrdqn --env CartPole-v1 --param length --omega 0.1 --seeds 5 --steps 20000 --out runs/x
    fedjax-rl train --algo fedrddpg --env Pendulum-v1 --param m --steps 3000 --seeds 2 --out runs/p
    fedjax-rl plot runs/x runs/y --out runs/figs
    fedjax-rl compare runs/x runs/y                # with paired differences and bootstrap intervals
    fedjax-rl demo --out runs/demo

Every setting is checked before anything compiles; a bad one stops with a message naming it. A
training flag is spelled as its config name (`--sync-every` for `sync_every`); agent settings are
`--set NAME=VALUE` (`--omega` and `--tau` have flags too). Defaults are resolved exactly as
`fedjax_rl.configs.train_config` resolves them.
"""

from __future__ import annotations

import argparse
import os
import sys

import matplotlib

matplotlib.use("Agg")  # files only: the command line never opens a window

from fedjax_rl import distributed  # noqa: E402

if __name__ == "__main__" or os.path.basename(sys.argv[0]) == "fedjax-rl":
    # jax.distributed must start before the backend does, and importing gymnax (through envs)
    # already starts it with import-time arrays: join the process group from the flags first.
    distributed.initialize_from_argv(sys.argv[1:])

from fedjax_rl import agents, configs, reproduce  # noqa: E402
from fedjax_rl.train import TRAIN_SETTINGS

# Every training setting's flag is its config name (`--sync-every` for `sync_every`); these older,
# shorter spellings are kept as aliases.
ALIASES = {
    "env_name": ("--env",),
    "physics": ("--param",),
    "num_agents": ("--agents",),
    "steps_per_agent": ("--steps",),
    "eval_every_rounds": ("--eval-every",),
    "num_devices": ("--devices",),
}
AGENT_FLAGS = ("omega", "tau")  # agent settings that also have a flag of their own (any has --set)
_RESOLVED = {
    "env_name": "'CartPole-v1'",
    "physics": "the task's first perturbed parameter",
    "steps_per_agent": "RL-Zoo3's budget for the task",
    "eval_every_rounds": f"{configs.EVAL_POINTS} evaluations per run",
}


RUN_BATCH_HELP = ("runs (seeds x grid points) vmapped at a time; batches run one after another in the same "
                  "program ('all': one vmap). On a CPU, batches of 10-20 runs train a 40-run grid 1.6-2x faster "
                  "(benchmarks/run_batch.py); the numbers change by float rounding")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _set_pairs(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise ValueError(f"--set expects KEY=VALUE, got {pair!r}")
        key, value = pair.split("=", 1)
        out[key] = value
    return out


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    for setting in TRAIN_SETTINGS:
        if setting.name == "agent":
            continue
        if setting.name in _RESOLVED:
            default = _RESOLVED[setting.name]
        else:
            default = f"{setting.default!r}{' ' + setting.source if setting.source else ''}"
        help_text = f"{setting.help} (default: {default})"
        kwargs = dict(choices=agents.names()) if setting.name == "algo" else {}
        p.add_argument(_flag(setting.name), *ALIASES.get(setting.name, ()), dest=setting.name, default=None,
                       type=str, help=help_text.replace("%", "%%"), **kwargs)
    for name in AGENT_FLAGS:
        p.add_argument(_flag(name), dest=name, default=None, type=str, help=f"the agent setting {name} (as --set {name}=...)")
    p.add_argument("--seeds", type=int, default=1, help="number of seeds, vmapped in one program")
    p.add_argument("--run-batch", default="all", help=RUN_BATCH_HELP + " (default: all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override an agent setting of the algorithm, e.g. --set learning_rate=1e-3 --set hidden_sizes=64,64")
    p.add_argument("--out", default=None, help="run directory (config, checkpoints, metrics, parameters)")
    p.add_argument("--no-progress", action="store_true")
    add_distributed_arguments(p)


def add_distributed_arguments(p: argparse.ArgumentParser) -> None:
    """One command per host: every process runs the same `train` command with its own --process-id;
    `--devices` then counts the devices of all processes together."""
    g = p.add_argument_group("multi-process (jax.distributed; unset flags come from a detected cluster "
                             "such as SLURM, the coordinator also from JAX_COORDINATOR_ADDRESS)")
    g.add_argument("--coordinator", default=None, metavar="HOST:PORT", help="address of process 0's coordinator")
    g.add_argument("--num-processes", type=int, default=None, help="number of processes in the run")
    g.add_argument("--process-id", type=int, default=None, help="this process's index in [0, num-processes)")
    g.add_argument("--distributed", action="store_true",
                   help="join a process group configured entirely by the environment or the cluster (e.g. under srun)")


def maybe_initialize_distributed(args) -> None:
    """Join the process group when a multi-process flag is given (the command line has joined it
    already at import; `main(argv)` called from Python joins it here, if the backend has not started)."""
    given = (args.coordinator, args.num_processes, args.process_id)
    if (args.distributed or any(v is not None for v in given)) and not distributed.initialized():
        distributed.initialize(*given)


def _parse_agent_settings(algorithm, given: dict[str, str], what: str) -> dict:
    """NAME -> text pairs parsed by `algorithm`'s setting declarations; an unknown name raises,
    naming `what` and the allowed names."""
    declared = {s.name: s for s in algorithm.config.SETTINGS}
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise ValueError(f"unknown {what} {unknown}; allowed: {sorted(declared)}")
    return {name: declared[name].parse(text) for name, text in given.items()}


def config_from_args(args):
    """The run's TrainConfig, resolved by `configs.train_config` like the Python API's."""
    algo = args.algo or TRAIN_SETTINGS[0].default
    algorithm = agents.get(algo)
    env_name = args.env_name or "CartPole-v1"
    fields = {}
    for setting in TRAIN_SETTINGS:
        text = getattr(args, setting.name, None)
        if setting.name in ("algo", "env_name", "agent") or text is None:
            continue
        fields[setting.name] = setting.parse(text)
    given = _set_pairs(args.set)
    given.update({name: getattr(args, name) for name in AGENT_FLAGS if getattr(args, name) is not None})
    agent = _parse_agent_settings(algorithm, given, f"{algorithm.family} settings")
    return configs.train_config(algo, env_name, agent_overrides=agent, **fields)


def cmd_train(args) -> None:
    from fedjax_rl import experiment

    try:
        maybe_initialize_distributed(args)
        config = config_from_args(args)
        config.validate()
        if args.seeds < 1:
            raise ValueError(f"--seeds must be >= 1, got {args.seeds}")
        run_batch = experiment.parse_run_batch(args.run_batch)
    except (ValueError, RuntimeError) as err:
        raise SystemExit(f"fedjax-rl: error: {err}") from None
    try:
        result = experiment.run(config, num_seeds=args.seeds, seed=args.seed, out_dir=args.out,
                                progress=not args.no_progress, run_batch=run_batch)
    except experiment.LayoutMismatch as err:
        raise SystemExit(f"fedjax-rl: error: {err}") from None
    final = result["final"]

    if not distributed.is_writer():  # every process holds the same gathered result; process 0 reports it
        return
    print(f"local-env average {final['local_average'].mean():.1f}, minimum {final['local_minimum'].mean():.1f} "
          f"(mean over {args.seeds} seeds)")
    if args.out:
        print(f"wrote {args.out}")


def cmd_plot(args) -> None:
    from fedjax_rl import plots

    out = args.out or os.path.join(args.runs[0], "plot")
    for path in plots.plot_runs(args.runs, out, smooth=args.smooth):
        print(f"wrote {path}")


def cmd_compare(args) -> None:
    from fedjax_rl import plots

    print(plots.comparison_table(args.runs))


def cmd_demo(args) -> None:
    """FedRDQN vs DQNAvg on CartPole with perturbed pole length: a budget for 2 CPU cores."""
    from fedjax_rl import experiment, plots

    if args.steps < 1000 or args.steps % 1000:
        raise SystemExit(f"fedjax-rl: error: --steps must be a positive multiple of 1000, got {args.steps}")

    run_dirs = []
    print(f"demo: small-budget CartPole DQN settings, not the paper's (configs.DEMO_DQN: {configs.DEMO_DQN}); "
          "batch 16, buffer 1000, K = 5, E = 100, p = 0.5 as in the paper")
    for algo in ("fedrdqn", "dqnavg"):
        config = configs.train_config(
            algo,
            "CartPole-v1",
            physics=("length",),
            steps_per_agent=args.steps,
            eval_every_rounds=args.steps // 100 // 10,
            eval_episodes=5,
            agent_overrides=dict(omega=0.1 if algo == "fedrdqn" else 0.0, **configs.DEMO_DQN),
        )
        out = os.path.join(args.out, algo)
        experiment.run(config, num_seeds=args.seeds, seed=0, out_dir=out, progress=not args.no_progress)
        run_dirs.append(out)
    print()
    print(plots.comparison_table(run_dirs))
    for path in plots.plot_runs(run_dirs, os.path.join(args.out, "cartpole_length")):
        print(f"wrote {path}")
    if not args.skip_tabular:
        from fedjax_rl.tabular import demo as tabular_demo

        print()
        tabular_demo.run_demo(os.path.join(args.out, "tabular"))


def _reproduce_overrides(table_name: str, pairs: list[str]) -> dict:
    """--set pairs parsed by the declarations of the table's algorithms (one family per table)."""
    table = reproduce.get_table(table_name)
    return _parse_agent_settings(agents.get(table.programs[0].algo), _set_pairs(pairs), f"{table_name} agent settings")


def cmd_reproduce(args) -> None:
    """The paper's Table 1 or 2, row by row (resumable), with figures: see fedjax_rl/reproduce.py."""
    from fedjax_rl import experiment

    if args.report_only:
        if args.status:
            raise SystemExit("fedjax-rl: error: --report-only and --status exclude each other (--status writes nothing)")
        result = reproduce.write_outputs(reproduce.get_table(args.table), args.out)
        if not result["rows"]:
            raise SystemExit(f"fedjax-rl: error: no finished {args.table} rows (row.json) under {args.out}")
        for path in result["paths"]:
            print(f"wrote {path}")
        return
    try:
        omegas = [float(w) for w in args.omegas.split(",") if w.strip()]
        run_batch = "auto" if args.run_batch == "auto" else experiment.parse_run_batch(args.run_batch)
        rows = [r.strip() for r in args.rows.split(",") if r.strip()] if args.rows else None
        request = dict(rows=rows, num_seeds=args.seeds, tuning_seeds=args.tuning_seeds, omegas=omegas,
                       budget=args.budget, seed=args.seed, run_batch=run_batch,
                       agent_overrides=_reproduce_overrides(args.table, args.set) or None)
        if args.status:
            for line in reproduce.status_lines(args.table, args.out, reproduce.status(args.table, args.out, **request)):
                print(line)
            return
        result = reproduce.reproduce(args.table, args.out, progress=not args.no_progress, **request)
    except ValueError as err:
        raise SystemExit(f"fedjax-rl: error: {err}") from None
    for path in result["paths"]:
        print(f"wrote {path}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fedjax-rl", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("train", help="run a federated training (seeds vmapped, one compiled program)")
    add_train_arguments(p)
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("plot", help="learning-curve and robustness-sweep figures from run directories")
    p.add_argument("runs", nargs="+")
    p.add_argument("--out", default=None, help="output path prefix (default: RUN/plot)")
    p.add_argument("--smooth", type=int, default=5,
                   help="moving-average window over evaluations for learning curves (the paper smooths; 1: raw)")
    p.set_defaults(func=cmd_plot)

    p = sub.add_parser("compare", help="Table-1 style table of local-environment returns")
    p.add_argument("runs", nargs="+")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("demo", help="FedRDQN vs DQNAvg on CartPole (pole length), then tabular FedRQ vs QAvg")
    p.add_argument("--out", default="runs/demo")
    p.add_argument("--steps", type=int, default=10_000, help="environment steps per agent (multiple of 1000)")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--skip-tabular", action="store_true")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("reproduce", help="the paper's Table 1 or 2 and its figures, resumable row by row")
    p.add_argument("table", choices=("table1", "table2"))
    p.add_argument("--rows", default=None, help="comma-separated rows, e.g. CartPole-v1/length,CartPole-v1/masscart (default: all)")
    p.add_argument("--seeds", type=int, default=reproduce.DEFAULT_SEEDS,
                   help=f"reported seeds per row (the paper's {reproduce.DEFAULT_SEEDS})")
    p.add_argument("--tuning-seeds", type=int, default=reproduce.DEFAULT_TUNING_SEEDS,
                   help="separate seeds on which the headline omega is chosen")
    p.add_argument("--omegas", default=",".join(f"{w:g}" for w in reproduce.DEFAULT_OMEGAS),
                   help="omega grid of the robust algorithm (omega 0 = the baseline, always run)")
    p.add_argument("--budget", default="paper", help="'paper' (RL-Zoo3 steps) or a fraction in (0, 1] of it")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="replace a paper setting of the table's algorithms (recorded in every row and printed "
                        "with the table), e.g. --set learning_starts=1000 for a reduced budget")
    p.add_argument("--run-batch", default="auto",
                   help=RUN_BATCH_HELP + f" (default: auto = {reproduce.CPU_RUN_BATCH} on a CPU, all on an accelerator)")
    p.add_argument("--out", default="results/reproduce", help="output directory (rows resume from it)")
    p.add_argument("--status", action="store_true",
                   help="only print where each requested row stands in --out (finished, blocks done, training "
                        "time left); computes and writes nothing")
    p.add_argument("--report-only", action="store_true",
                   help="only rebuild the tables and figures from the finished rows (row.json) in --out; trains "
                        "nothing and ignores the run settings")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_reproduce)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except FileNotFoundError as err:
        raise SystemExit(f"fedjax-rl: error: {err}") from None
    return 0


if __name__ == "__main__":
    sys.exit(main())
