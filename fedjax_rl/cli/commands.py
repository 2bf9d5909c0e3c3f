"""`fedjax-rl` command line: train, plot, compare, render, demo, reproduce.

    fedjax-rl train --algo fedrdqn --env CartPole-v1 --param length --omega 0.1 --seeds 5 --steps 20000 --out runs/x
    fedjax-rl train --algo fedrddpg --env Pendulum-v1 --param m --steps 3000 --seeds 2 --out runs/p
    fedjax-rl plot runs/x runs/y --out runs/figs
    fedjax-rl compare runs/x runs/y                # paired differences, 95% intervals, verdicts, seeds to decide
    fedjax-rl render runs/x runs/y --scale 1.9     # both final policies side by side: runs/x/render_1.9.gif
    fedjax-rl demo --out runs/demo

Every setting is checked before anything compiles; a bad one stops with a message naming it. A
training flag is spelled as its config name (`--sync-every` for `sync_every`); agent settings are
`--set NAME=VALUE` (`--omega` and `--tau` have flags too). Defaults are resolved exactly as
`fedjax_rl.training.configs.train_config` resolves them.

Building the parser imports neither JAX nor the settings' modules (which do), so `--help` and a
mistyped flag answer at once: the flags' help, defaults and choices that come from the settings
declarations are read from `fedjax_rl/cli/flags.py`, a table generated from them by
`fedjax_rl/cli/flag_table.py` (`make cli-flags`; tests/test_cli.py fails when it is out of date).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

from fedjax_rl.cli import flag_table, flags

RUN_BATCH_HELP = ("runs (seeds x grid points) vmapped at a time; batches run one after another in the same "
                  "program ('all': one vmap). On a CPU, batches of 10-20 runs train a 40-run grid 1.6-2x faster "
                  "(benchmarks/run_batch.py); the numbers change by float rounding")
# The Python types a flag's entry may name: its setting's declared kind (`--omega` is a float).
# The other flags stay text and are parsed by their setting (`Setting.parse`: "ints", bools).
FLAG_TYPES = {"str": str, "float": float}


def _add_flag(p: argparse.ArgumentParser, entry: dict) -> None:
    """One flag of the table; a switch stores its setting's text ("false"), parsed like any other."""
    if "const" in entry:
        p.add_argument(*entry["flags"], dest=entry["dest"], default=None, action="store_const", const=entry["const"],
                       help=entry["help"].replace("%", "%%"))
        return
    extra = {k: entry[k] for k in ("choices", "metavar") if k in entry}
    p.add_argument(*entry["flags"], dest=entry["dest"], default=None, type=FLAG_TYPES[entry.get("type", "str")],
                   help=entry["help"].replace("%", "%%"), **extra)


def _table_entry(dest: str) -> dict:
    return next(entry for entry in flags.TABLE["train"] if entry["dest"] == dest)


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    """Add the `train` command's flags to `p`: the generated flags of the settings (`flags.TABLE`), then
    seeds, `--set`, `--out` and the run's options."""
    for entry in flags.TABLE["train"]:
        _add_flag(p, entry)
    p.add_argument("--seeds", type=int, default=1, help="number of seeds, vmapped in one program (default: 1)")
    p.add_argument("--seed", type=int, default=0,
                   help="the first seed: runs use seeds seed, seed+1, ... (default: 0)")
    p.add_argument("--run-batch", default="all", help=RUN_BATCH_HELP + " (default: all)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help=flags.TABLE["set_help"])
    p.add_argument("--out", default=None,
                   help="run directory: config, a checkpoint after every evaluation, metrics, final parameters. "
                        "Rerunning the same command resumes or reads back the run; other settings on a directory "
                        "that holds a run are refused (see --new-run). (default: none: nothing is saved)")
    p.add_argument("--new-run", action="store_true",
                   help="if --out holds a run of other settings, move it to OUT/set_aside/<n>/ and start this one "
                        "(default: refuse, listing the differences). A set-aside run of these settings is always "
                        "moved back and resumed")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bar or status lines (default: show them)")
    add_distributed_arguments(p)


def add_distributed_arguments(p: argparse.ArgumentParser) -> None:
    """One command per host: every process runs the same `train` command with its own --process-id;
    `--devices` then counts the devices of all processes together."""
    g = p.add_argument_group("multi-process (jax.distributed; unset flags come from a detected cluster "
                             "such as SLURM, the coordinator also from JAX_COORDINATOR_ADDRESS)")
    g.add_argument("--coordinator", default=None, metavar="HOST:PORT",
                   help="address of process 0's coordinator (default: from the environment or the cluster)")
    g.add_argument("--num-processes", type=int, default=None,
                   help="number of processes in the run (default: from the cluster; 1 without one)")
    g.add_argument("--process-id", type=int, default=None,
                   help="this process's index in [0, num-processes) (default: from the cluster)")
    g.add_argument("--distributed", action="store_true",
                   help="join a process group configured entirely by the environment or the cluster (e.g. under srun)")


def maybe_initialize_distributed(args) -> None:
    """Join the process group when a multi-process flag is given. `main` does this before any command
    imports gymnax, which starts JAX's backend at import (after that, jax.distributed cannot start)."""
    given = (args.coordinator, args.num_processes, args.process_id)
    if not (args.distributed or any(v is not None for v in given)):
        return
    from fedjax_rl.training import distributed

    if not distributed.initialized():
        distributed.initialize(*given)


def config_from_args(args):
    """The run's TrainConfig, resolved by `configs.train_config` like the Python API's."""
    from fedjax_rl import agents
    from fedjax_rl.core import settings
    from fedjax_rl.training import configs
    from fedjax_rl.training.configs import TRAIN_SETTINGS

    algo = args.algo or TRAIN_SETTINGS[0].default
    algorithm = agents.get(algo)
    env_name = args.env_name or configs.DEFAULT_ENV
    fields = {}
    for setting in TRAIN_SETTINGS:
        text = getattr(args, setting.name, None)
        if setting.name in ("algo", "env_name", "agent") or text is None:
            continue
        fields[setting.name] = setting.parse(text)
    agent = settings.parse_pairs(algorithm.config.SETTINGS, args.set, f"{algorithm.family} settings")
    # --omega and --tau arrive as floats (argparse, by their declared kind); a flag wins over --set.
    agent.update({name: getattr(args, name) for name in flag_table.AGENT_FLAGS if getattr(args, name) is not None})
    return configs.train_config(algo, env_name, agent_overrides=agent, **fields)


def _error(err) -> SystemExit:
    return SystemExit(f"fedjax-rl: error: {err}")


def cmd_train(args) -> None:
    """`fedjax-rl train`: build and validate the config from the flags, then train (and save, with `--out`)
    through `loop.run`."""
    from fedjax_rl.training import distributed, loop

    try:
        config = config_from_args(args)  # validated, before anything compiles
        if args.seeds < 1:
            raise ValueError(f"--seeds must be >= 1, got {args.seeds}")
        run_batch = loop.parse_run_batch(args.run_batch)
    except (ValueError, RuntimeError) as err:
        raise _error(err) from None
    if args.out is None and distributed.is_writer():
        print("no --out: results are printed only, nothing is saved (no checkpoint: an interrupted run cannot resume)")
    try:
        result = loop.run(config, num_seeds=args.seeds, seed=args.seed, out_dir=args.out,
                                progress=not args.no_progress, run_batch=run_batch, new_run=args.new_run)
    except (loop.LayoutMismatch, loop.RunExists, loop.OutDirError, loop.NotEnoughMemory,
            loop.NonFiniteError) as err:
        raise _error(err) from None
    final = result["final"]

    if not distributed.is_writer():  # every process holds the same gathered result; process 0 reports it
        return
    print(f"local-env average {final['local_average'].mean():.1f}, minimum {final['local_minimum'].mean():.1f} "
          f"(mean over {args.seeds} seeds)")
    if args.out:
        print(f"wrote {args.out}")


def cmd_plot(args) -> None:
    """`fedjax-rl plot`: learning-curve and robustness-sweep figures of the given run directories."""
    from fedjax_rl.analysis import plots

    out = args.out or os.path.join(args.runs[0], "plot")
    try:
        paths = plots.plot_runs(args.runs, out, smooth=args.smooth)
    except ValueError as err:  # a damaged file, a bad --smooth
        raise _error(err) from None
    for path in paths:
        print(f"wrote {path}")


def cmd_compare(args) -> None:
    """`fedjax-rl compare`: print the comparison table of the given run directories."""
    from fedjax_rl.analysis import plots

    try:
        print(plots.comparison_table(args.runs))
    except ValueError as err:  # a damaged file
        raise _error(err) from None


def cmd_render(args) -> None:
    """`fedjax-rl render`: a GIF or MP4 of the runs' final global policies under `--scale` x nominal physics."""
    from fedjax_rl.analysis import render
    from fedjax_rl.training.checkpoint import DamagedFile

    out = args.out or os.path.join(args.runs[0], f"render_{args.scale:g}.gif")
    try:
        path, episodes = render.render(args.runs, out, scale=args.scale, episode_seed=args.episode_seed,
                                       seed_index=args.seed_index, every=args.every, max_frames=args.max_frames,
                                       width=args.width)
    except (render.RenderError, DamagedFile) as err:
        raise _error(err) from None
    returns = ", ".join(f"{e.label} {e.total:.1f}" for e in episodes)
    print(f"wrote {path}: {episodes[0].description}, episode seed {args.episode_seed}; returns {returns}")


def cmd_demo(args) -> None:
    """FedRDQN vs DQNAvg on CartPole with perturbed pole length: a budget for 2 CPU cores."""
    if args.steps < 1000 or args.steps % 1000:
        raise _error(f"--steps must be a positive multiple of 1000, got {args.steps}")
    from fedjax_rl.analysis import plots
    from fedjax_rl.training import configs, loop

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
        try:
            loop.run(config, num_seeds=args.seeds, seed=0, out_dir=out, progress=not args.no_progress)
        except (loop.RunExists, loop.OutDirError, loop.NotEnoughMemory) as err:
            raise _error(err) from None
        run_dirs.append(out)
    print()
    print(plots.comparison_table(run_dirs))
    for path in plots.plot_runs(run_dirs, os.path.join(args.out, "cartpole_length")):
        print(f"wrote {path}")
    from fedjax_rl.analysis import render

    # The sweep's longest pole, both final policies from one initial state: a short, small GIF
    # (every other step at 25 frames per second is real time: CartPole steps 50 times a second).
    started = time.perf_counter()
    path, episodes = render.render(run_dirs, os.path.join(args.out, "cartpole_length_1.9.gif"), scale=1.9, every=2,
                                   max_frames=100, width=300)
    returns = ", ".join(f"{e.label} {e.total:.0f}" for e in episodes)
    print(f"wrote {path} (pole 1.9x longer; returns {returns}; {time.perf_counter() - started:.0f} s)")
    if not args.skip_tabular:
        from fedjax_rl.tabular import demo as tabular_demo

        print()
        tabular_demo.run_demo(os.path.join(args.out, "tabular"))


def _reproduce_overrides(table_name: str, pairs: list[str], rows: list[str] | None = None) -> dict:
    """--set pairs parsed by the declarations of the requested rows' algorithms: one family per row
    (a table's, or a `heterogeneity` row's own); rows of two families take no --set together."""
    from fedjax_rl import agents
    from fedjax_rl.core import settings
    from fedjax_rl.reproduce import plan

    table = plan.get_table(table_name)
    if not pairs:
        return {}
    families = {agents.get(table.family(row).programs[0].algo).family: table.family(row)
                for row in plan.select_rows(table, rows)}
    if len(families) > 1:
        raise ValueError(f"--set applies to one algorithm family, and these {table_name} rows run "
                         f"{', '.join(sorted(families))}: request rows of one family (--rows) per command")
    [family] = families.values()
    return settings.parse_pairs(agents.get(family.programs[0].algo).config.SETTINGS, pairs,
                                f"{table_name} agent settings")


def _switches(args, names: tuple[str, ...]) -> dict:
    """The run settings among `names` whose switch was given, parsed by their declarations."""
    from fedjax_rl.core import settings
    from fedjax_rl.training.configs import TRAIN_SETTINGS

    declared = settings.by_name(TRAIN_SETTINGS)
    return {name: declared[name].parse(getattr(args, name)) for name in names if getattr(args, name) is not None}


def _piece_seeds(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"--piece-seeds must be an integer >= 1 (seeds per piece), got {text!r}")
    return value


def _reproduce_run_settings(pairs: list[str]) -> dict:
    """--set-run pairs parsed by the run settings' declarations (`plan.parse_run_settings`)."""
    if not pairs:
        return {}
    from fedjax_rl.reproduce import plan

    return plan.parse_run_settings(pairs)


def _reproduce_with_executor(args, piece_seeds: int | None, request: dict) -> None:
    """`reproduce --jobs N` / `--executor ray`: the pieces as separate processes (`fedjax_rl.reproduce.executor`)."""
    from fedjax_rl.reproduce import executor

    if args.program is not None or args.status or args.report_only:
        raise ValueError("--jobs, --executor and --max-pieces run the missing pieces of the requested rows: give "
                         "no --program, --status or --report-only with them")
    try:
        result = executor.run(args.table, args.out, jobs=args.jobs, executor=args.executor or "local",
                                        address=args.address, cpus_per_piece=args.cpus_per_piece,
                                        gpus_per_piece=args.gpus_per_piece, progress=not args.no_progress,
                                        piece_seeds=piece_seeds, max_pieces=args.max_pieces, **request)
    except executor.PiecesFailed as failed:
        for path in (failed.result or {}).get("paths", []):
            print(f"wrote {path}")
        raise _error(failed) from None
    for path in result["paths"]:
        print(f"wrote {path}")


def cmd_reproduce(args) -> None:
    """The paper's Table 1 or 2, row by row (resumable), with figures: see fedjax_rl/reproduce/harness.py."""
    from fedjax_rl.reproduce import harness, report, seed_pieces, status, tables
    from fedjax_rl.training import loop

    if args.report_only:
        if args.status:
            raise SystemExit("fedjax-rl: error: --report-only and --status exclude each other (--status writes nothing)")
        result = report.write_outputs(tables.get_table(args.table), args.out)
        if not result["rows"]:
            raise SystemExit(f"fedjax-rl: error: no finished {args.table} rows (row.json) under {args.out}")
        for path in result["paths"]:
            print(f"wrote {path}")
        return
    try:
        omegas = None if args.omegas is None else [float(w) for w in args.omegas.split(",") if w.strip()]
        max_rates = None if args.max_rates is None else [float(p) for p in args.max_rates.split(",") if p.strip()]
        run_batch = "auto" if args.run_batch == "auto" else loop.parse_run_batch(args.run_batch)
        rows = [r.strip() for r in args.rows.split(",") if r.strip()] if args.rows else None
        request = dict(rows=rows, num_seeds=args.seeds, tuning_seeds=args.tuning_seeds, omegas=omegas,
                       max_rates=max_rates, budget=args.budget, seed=args.seed, run_batch=run_batch,
                       agent_overrides=_reproduce_overrides(args.table, args.set, rows) or None,
                       train_overrides={**_switches(args, ("tensorboard",)), **_reproduce_run_settings(args.set_run)}
                       or None)
        piece_seeds = _piece_seeds(args.piece_seeds)
        if args.jobs is not None or args.executor is not None or args.max_pieces is not None:
            return _reproduce_with_executor(args, piece_seeds, request)
        if args.piece is not None and args.program is None:
            raise ValueError("--piece FIRST:STOP is a piece of one program: give --program too")
        if args.program is not None:
            if args.status or not rows or len(rows) != 1:
                raise ValueError(f"--program runs one program of one row: give exactly one --rows and no --status "
                                 f"(got --rows {args.rows!r}{' --status' if args.status else ''})")
            piece = seed_pieces.parse_range(args.piece) if args.piece is not None else None
            harness.run_program(args.table, args.out, rows[0], args.program, progress=not args.no_progress,
                                  piece=piece, piece_seeds=piece_seeds,
                                  **{k: v for k, v in request.items() if k != "rows"})
            what = seed_pieces.Piece(args.program, *piece).describe() if piece else args.program
            print(f"{rows[0]} {what}: finished in {args.out}; the same command without --program writes the row "
                  "when every program holds its seeds, reading the finished pieces back")
            return
        if args.status:
            row_states = status.rows(args.table, args.out, piece_seeds=piece_seeds, **request)
            for line in status.lines(args.table, args.out, row_states):
                print(line)
            return
        result = harness.reproduce(args.table, args.out, progress=not args.no_progress, piece_seeds=piece_seeds,
                                     **request)
    except ValueError as err:
        raise _error(err) from None
    for path in result["paths"]:
        print(f"wrote {path}")


def build_parser() -> argparse.ArgumentParser:
    """The whole command line; imports nothing heavy (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="fedjax-rl", description=__doc__.split("\n")[0],
                                     epilog="`fedjax-rl COMMAND --help` describes each command's flags.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("train", help="run a federated training (seeds vmapped, one compiled program)",
                       description="Train one algorithm on one task; every setting is checked before anything "
                                   "compiles. Rerunning the same command on the same --out resumes it.")
    add_train_arguments(p)
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("plot", help="learning-curve and robustness-sweep figures from run directories")
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="directories written by `fedjax-rl train --out`")
    p.add_argument("--out", default=None, help="output path prefix: OUT_curve.png, OUT_sweep.png "
                                               "(default: FIRST_RUN_DIR/plot)")
    p.add_argument("--smooth", type=int, default=5,
                   help="moving-average window over evaluations for learning curves (the paper smooths; 1: raw) "
                        "(default: 5)")
    p.set_defaults(func=cmd_plot)

    p = sub.add_parser("compare", help="Table-1 style table of local-environment returns")
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="directories written by `fedjax-rl train --out`")
    p.set_defaults(func=cmd_compare)

    _add_render_parser(sub)

    p = sub.add_parser("demo", help="FedRDQN vs DQNAvg on CartPole (pole length), then tabular FedRQ vs QAvg")
    p.add_argument("--out", default="runs/demo", help="output directory (default: runs/demo)")
    p.add_argument("--steps", type=int, default=10_000,
                   help="environment steps per agent (multiple of 1000) (default: 10000)")
    p.add_argument("--seeds", type=int, default=3, help="seeds per algorithm, vmapped (default: 3)")
    p.add_argument("--skip-tabular", action="store_true", help="skip the tabular FedRQ vs QAvg part")
    p.add_argument("--no-progress", action="store_true", help="no progress bar or status lines")
    p.set_defaults(func=cmd_demo)

    _add_reproduce_parser(sub)
    return parser


def _add_render_parser(sub) -> None:
    """`fedjax-rl render`."""
    p = sub.add_parser("render", help="a run's final global policy acting in a perturbed environment, as a GIF or "
                                      "MP4; two runs side by side",
                       description="The final global policy of one run, or of two side by side, for one episode in "
                                   "the run's task with every parameter it perturbed at --scale x nominal, as the "
                                   "robustness sweep builds it; each panel prints the run's return. Classic control "
                                   "is drawn by gymnasium's renderer, MuJoCo robots by MuJoCo's offscreen renderer "
                                   "(EGL or OSMesa: see fedjax_rl/analysis/render.py). LunarLander and Brax are not drawn.")
    p.add_argument("runs", nargs="+", metavar="RUN_DIR",
                   help="one or two directories written by `fedjax-rl train --out` (of a grid: one point's directory)")
    p.add_argument("--scale", type=float, default=1.9,
                   help="c in m' = c m for every parameter the run perturbed (default: 1.9, the sweep's largest)")
    p.add_argument("--out", default=None,
                   help="the video: .gif, or .mp4 with imageio-ffmpeg installed (default: FIRST_RUN_DIR/render_SCALE.gif)")
    p.add_argument("--episode-seed", type=int, default=0,
                   help="the episode's seed (its initial state), the same for every run (default: 0)")
    p.add_argument("--seed-index", type=int, default=0,
                   help="which of each run's seeds acts, by its index (as in metrics.csv) (default: 0)")
    p.add_argument("--every", type=int, default=1, help="draw every N-th step; the last state always (default: 1)")
    p.add_argument("--max-frames", type=int, default=None,
                   help="at most this many frames (default: the whole episode, up to its time limit)")
    p.add_argument("--width", type=int, default=None,
                   help="each panel's width in pixels (default: gymnasium's, 600 for classic control; 480 for MuJoCo)")
    p.set_defaults(func=cmd_render)


def _add_reproduce_parser(sub) -> None:
    """`fedjax-rl reproduce`: its choices and defaults from the generated flag table."""
    table = flags.TABLE["reproduce"]
    p = sub.add_parser("reproduce", help="the paper's Table 1 or 2 and its figures, resumable row by row")
    own = table["table_defaults"]

    def default(name: str, paper: str) -> str:
        """The paper tables' default of a request setting and each other table's own."""
        others = "; ".join(f"{t}: {d[name]}" for t, d in own.items() if name in d)
        return f"(default: {paper}" + (f"; {others}" if others else "") + ")"

    p.add_argument("table", choices=table["tables"],
                   help="which table: the paper's table1 and table2, or one beyond the paper (beyond_sac, heterogeneity)")
    p.add_argument("--rows", default=None,
                   help="comma-separated rows, e.g. CartPole-v1/length,CartPole-v1/masscart; a heterogeneity row "
                        "at another K than the paper's 5 says so, e.g. CartPole-v1/length/K=10 (default: all)")
    papers = f"{table['seeds']}, the paper's"
    p.add_argument("--seeds", type=int, default=None, help=f"reported seeds per row {default('seeds', papers)}")
    p.add_argument("--tuning-seeds", type=int, default=None,
                   help=f"separate seeds on which the headline omega is chosen {default('tuning_seeds', table['tuning_seeds'])}")
    p.add_argument("--omegas", default=None,
                   help=f"omega grid of the robust algorithm (omega 0 = the baseline, always run) "
                        f"{default('omegas', table['omegas'])}")
    p.add_argument("--max-rates", default=None, metavar="P[,P]",
                   help="heterogeneity levels p of a table that maps them, each in [0, 1), all in one program "
                        f"(only such a table takes it) {default('max_rates', 'none')}")
    p.add_argument("--budget", default="paper",
                   help="'paper' (RL-Zoo3 steps) or a fraction in (0, 1] of it (default: paper)")
    p.add_argument("--seed", type=int, default=0, help="the first seed (default: 0)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="replace a paper setting of the table's algorithms (recorded in every row and printed "
                        "with the table), e.g. --set learning_starts=1000 for a reduced budget (default: none, the "
                        "paper's settings)")
    p.add_argument("--run-batch", default="auto",
                   help=RUN_BATCH_HELP + f" (default: auto = {table['cpu_run_batch']} on a CPU, all on an accelerator)")
    p.add_argument("--out", default="results/reproduce",
                   help="output directory (rows resume from it) (default: results/reproduce)")
    p.add_argument("--status", action="store_true",
                   help="only print where each requested row stands in --out (finished, blocks done, training "
                        "time left); computes and writes nothing")
    p.add_argument("--report-only", action="store_true",
                   help="only rebuild the tables and figures from the finished rows (row.json) in --out; trains "
                        "nothing and ignores the run settings")
    p.add_argument("--program", default=None, metavar="NAME",
                   help="run only this program of the one row in --rows (e.g. ddpgavg2 of a Table 2 row), exactly "
                        "as the whole row runs it, so a row's programs can run in separate processes or machines; "
                        "the command without --program then reads it back (default: every program of each row)")
    p.add_argument("--piece", default=None, metavar="FIRST:STOP",
                   help="with --program: run only seed indices FIRST..STOP-1 of it, a piece that lands as its own "
                        "finished directory (tuning seeds come first: with --tuning-seeds 2, reported seed 0 is "
                        "index 2); refused before compiling if it overlaps a finished piece or its settings differ "
                        "(default: every seed the program lacks)")
    p.add_argument("--piece-seeds", default=None, metavar="N",
                   help="run the seeds a program lacks as pieces of N seeds each, and list them so in --status "
                        "(default: one piece per missing range)")
    p.add_argument("--set-run", action="append", default=[], metavar="KEY=VALUE",
                   help="replace a run setting of every program (recorded in every row), e.g. --set-run "
                        "eval_episodes=2 or --set-run engine=mjx; not those a row decides (algo, env_name, physics) "
                        "(default: none, the paper's settings)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (with --jobs: plain lines)")
    _add_flag(p, _table_entry("tensorboard"))  # not part of a row's recorded settings
    _add_executor_flags(p)
    p.set_defaults(func=cmd_reproduce)


def _add_executor_flags(p) -> None:
    """`reproduce --jobs N` and `--executor ray` (`fedjax_rl.reproduce.executor`)."""
    p.add_argument("--jobs", type=int, default=None, metavar="N",
                   help="run every piece the command would run (each missing piece of each requested row, sized by "
                        "--piece-seeds) as its own `reproduce --program P --piece A:B` process, N at a time, each "
                        "with its log in OUT/logs/; the cores this process may use are split into N contiguous "
                        "groups and each process is pinned to one (as taskset -c; more processes than cores: one "
                        "core each, shared round robin); the rows are then written from the pieces as without "
                        "--jobs (default: the pieces one after another in this process)")
    p.add_argument("--max-pieces", type=int, default=None, metavar="N",
                   help="run only the first N missing pieces (in --status's order; alone: one process, as --jobs "
                        "1), then stop: for a machine lent for a while, so that it starts no piece it cannot "
                        "finish; rows with pieces left are not written, and the same command runs the rest "
                        "(default: every missing piece)")
    p.add_argument("--executor", choices=("local", "ray"), default=None,
                   help="who runs the pieces: local (--jobs processes on this machine) or ray (Ray tasks on the "
                        "cluster at --address, or a local Ray instance; every machine must see --out at the same "
                        "path; needs pip install \"fedjax-rl[ray]\") (default: local with --jobs)")
    p.add_argument("--address", default=None,
                   help="with --executor ray: the Ray cluster's address, e.g. HEAD_IP:6379 or auto (default: a new "
                        "local Ray instance)")
    p.add_argument("--cpus-per-piece", type=float, default=1.0,
                   help="with --executor ray: CPUs each piece declares to Ray (default: 1)")
    p.add_argument("--gpus-per-piece", type=float, default=0.0,
                   help="with --executor ray: the fraction of a GPU each piece declares, e.g. 0.25 to run four "
                        "latency-bound programs on one GPU (default: 0, CPU only)")


def _format_warning(message, category, filename, lineno, line=None) -> str:
    """Warnings as the command line's own lines, without the source location."""
    return f"fedjax-rl: warning: {message}\n"


def main(argv: list[str] | None = None) -> int:
    """The `fedjax-rl` entry point: parse `argv` and run the command; returns the exit code (130 after
    Ctrl-C)."""
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    previous = warnings.formatwarning
    warnings.formatwarning = _format_warning
    try:
        if args.command == "train":
            try:
                maybe_initialize_distributed(args)  # warns before connecting to a public coordinator
            except ValueError as err:
                raise _error(err) from None
        import matplotlib

        matplotlib.use("Agg")  # files only: the command line never opens a window
        args.func(args)
    except FileNotFoundError as err:
        raise _error(err) from None
    except KeyboardInterrupt as err:
        # loop.Interrupted says how far the run got and how to resume; elsewhere, say it stopped.
        print(f"\nfedjax-rl: {err or 'interrupted'}", file=sys.stderr, flush=True)
        return 130
    finally:
        warnings.formatwarning = previous
    return 0


if __name__ == "__main__":
    sys.exit(main())
