"""`fedjax-rl` command line: train, plot, compare, render, demo, reproduce, plugins.

    fedjax-rl train --algo fedrdqn --env CartPole-v1 --param length --omega 0.1 --seeds 5 --steps 20000 --out runs/x
    fedjax-rl train --algo fedrddpg --env Pendulum-v1 --param m --steps 3000 --seeds 2 --out runs/p
    fedjax-rl plot runs/x runs/y --out runs/figs
    fedjax-rl compare runs/x runs/y                # paired differences, 95% intervals, verdicts, seeds to decide
    fedjax-rl render runs/x runs/y --scale 1.9     # both final policies side by side: runs/x/render_1.9.gif
    fedjax-rl demo --out runs/demo
    fedjax-rl plugins                              # installed algorithm and aggregation-rule plugins, checked

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

from fedjax_rl.cli import flag_table, flags, reproduce_command
from fedjax_rl.cli.arguments import RUN_BATCH_HELP, PluginHelpFormatter, add_flag, usage_error, with_plugins

def add_train_arguments(p: argparse.ArgumentParser) -> None:
    """Add the `train` command's flags to `p`: the generated flags of the settings (`flags.TABLE`), then
    seeds, `--set`, `--out` and the run's options."""
    for entry in flags.TABLE["train"]:
        add_flag(p, with_plugins(entry))
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
    # loop.NONFINITE_POLICIES, spelled out: building the parser imports no JAX (tests/test_cli.py checks them equal)
    p.add_argument("--on-nonfinite", choices=("stop", "record"), default="stop",
                   help="at a non-finite loss or parameter: stop the run, keeping the blocks before it, or "
                        "record it (a warning naming it) and train on to the final evaluation, to measure a "
                        "federation that breaks, e.g. under --attackers (default: stop)")
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


def cmd_train(args) -> None:
    """`fedjax-rl train`: build and validate the config from the flags, then train (and save, with `--out`)
    through `loop.run`."""
    from fedjax_rl.training import configs, distributed, loop

    try:
        config = config_from_args(args)  # validated, before anything compiles
        if args.seeds < 1:
            raise ValueError(f"--seeds must be >= 1, got {args.seeds}")
        run_batch = configs.parse_run_batch(args.run_batch)
    except (ValueError, RuntimeError) as err:
        raise usage_error(err) from None
    if args.out is None and distributed.is_writer():
        print("no --out: results are printed only, nothing is saved (no checkpoint: an interrupted run cannot resume)")
    try:
        result = loop.run(config, num_seeds=args.seeds, seed=args.seed, out_dir=args.out,
                                progress=not args.no_progress, run_batch=run_batch, new_run=args.new_run,
                                on_nonfinite=args.on_nonfinite)
    except (loop.LayoutMismatch, loop.RunExists, loop.OutDirError, loop.NotEnoughMemory,
            loop.NonFiniteError) as err:
        raise usage_error(err) from None
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
        raise usage_error(err) from None
    for path in paths:
        print(f"wrote {path}")


def cmd_compare(args) -> None:
    """`fedjax-rl compare`: print the comparison table of the given run directories."""
    from fedjax_rl.analysis import plots

    try:
        print(plots.comparison_table(args.runs))
    except ValueError as err:  # a damaged file
        raise usage_error(err) from None


def cmd_status(args) -> None:
    """`fedjax-rl status`: where each run directory stands, one line each; exit 0 when every run finished,
    1 when one failed or stopped, 2 when one is unfinished (or not there yet) after `--wait` seconds."""
    import time

    from fedjax_rl.training import run_status

    deadline = time.monotonic() + args.wait
    while True:
        states = [_standing(path) for path in args.runs]
        if all(word != run_status.UNFINISHED for word, _ in states) or time.monotonic() >= deadline:
            break
        time.sleep(min(args.poll, max(0.0, deadline - time.monotonic())))
    for _, line in states:
        print(line)
    words = {word for word, _ in states}
    if words & {run_status.FAILURE, run_status.STOPPED}:
        raise SystemExit(1)
    if run_status.UNFINISHED in words:
        raise SystemExit(2)


def _standing(path: str) -> tuple[str, str]:
    """`run_status.status`, with a directory that holds no run yet read as unfinished (a federation's
    ServerApp writes its directory only once Flower starts it)."""
    from fedjax_rl.training import run_status

    try:
        return run_status.status(path)
    except FileNotFoundError as err:
        return run_status.UNFINISHED, str(err)


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
        raise usage_error(err) from None
    returns = ", ".join(f"{e.label} {e.total:.1f}" for e in episodes)
    print(f"wrote {path}: {episodes[0].description}, episode seed {args.episode_seed}; returns {returns}")


# The demo's seeds: the fewest at which the comparison's verdict can decide (stats.MIN_SEEDS), so that
# the first verdict a user sees is one the rule could have given.
DEMO_SEEDS = 6


def cmd_demo(args) -> None:
    """FedRDQN vs DQNAvg on CartPole with perturbed pole length: a budget for 2 CPU cores."""
    if args.steps < 1000 or args.steps % 1000:
        raise usage_error(f"--steps must be a positive multiple of 1000, got {args.steps}")
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
            raise usage_error(err) from None
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


def build_parser() -> argparse.ArgumentParser:
    """The whole command line; imports nothing heavy (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="fedjax-rl", description=__doc__.split("\n")[0],
                                     epilog="`fedjax-rl COMMAND --help` describes each command's flags.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("train", help="run a federated training (seeds vmapped, one compiled program)",
                       formatter_class=PluginHelpFormatter,
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

    p = sub.add_parser("status", help="whether runs finished, failed or stopped; the exit code says it for scripts",
                       description="Where each run directory stands: finished (exit 0), failed or stopped (exit 1: "
                                   "a federation's failure it named, or non-finite values), unfinished (exit 2: still "
                                   "running, interrupted, or not started). `flwr run` exits 0 whatever happened to "
                                   "the federation; `fedjax-rl status --wait` after it tells a script how it ended.")
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories (`fedjax-rl train --out`, a "
                                                             "federation's out-dir)")
    p.add_argument("--wait", type=float, default=0.0, metavar="SECONDS",
                   help="wait up to this long for unfinished runs to finish or fail (default: 0, answer at once)")
    p.add_argument("--poll", type=float, default=5.0, metavar="SECONDS",
                   help="while waiting, look again this often (default: 5)")
    p.set_defaults(func=cmd_status)

    _add_render_parser(sub)

    p = sub.add_parser("demo", help="FedRDQN vs DQNAvg on CartPole (pole length), then tabular FedRQ vs QAvg")
    p.add_argument("--out", default="runs/demo", help="output directory (default: runs/demo)")
    p.add_argument("--steps", type=int, default=10_000,
                   help="environment steps per agent (multiple of 1000) (default: 10000)")
    p.add_argument("--seeds", type=int, default=DEMO_SEEDS,
                   help=f"seeds per algorithm, vmapped; 6 is the fewest a verdict can read (default: {DEMO_SEEDS})")
    p.add_argument("--skip-tabular", action="store_true", help="skip the tabular FedRQ vs QAvg part")
    p.add_argument("--no-progress", action="store_true", help="no progress bar or status lines")
    p.set_defaults(func=cmd_demo)

    reproduce_command.add_parser(sub)

    p = sub.add_parser("plugins", help="the installed plugins (algorithms, aggregation rules), each loaded and checked",
                       description="Every installed fedjax_rl plugin (Python entry points in the groups "
                                   "fedjax_rl.algorithms, fedjax_rl.aggregators and fedjax_rl.environments), loaded and registered one by "
                                   "one: ok, or the error that keeps it out (a failed import, a name already taken).")
    p.set_defaults(func=cmd_plugins)
    return parser


def cmd_plugins(args) -> None:
    """`fedjax-rl plugins`: each installed plugin, its origin and whether it loads; exit 1 if one fails."""
    from fedjax_rl import agents, envs, plugins
    from fedjax_rl.core import aggregation  # noqa: F401 (registers the aggregation rules)

    failed = 0
    for registry in plugins.registries():
        group = registry.group
        installed = plugins.installed(group)
        print(f"{group}: " + ("none installed" if not installed else f"{len(installed)} installed"))
        for name, status in registry.load_plugins().items():
            entry_point = installed[name]
            print(f"  {name} = {entry_point.value} ({entry_point.distribution}): {status}")
            failed += status != "ok"
            if status == "ok" and group == plugins.ALGORITHM_GROUP:
                print(_own_settings(agents.get(name)))
            if status == "ok" and group == plugins.ENVIRONMENT_GROUP:
                print(f"    perturbable: {', '.join(envs.physics_names(name))} (the default: "
                      f"{', '.join(envs.get(name).perturbed)}); --env {name} --param NAME")
    if failed:
        raise SystemExit(f"fedjax-rl: {failed} plugin(s) failed to load (above)")


def _own_settings(algorithm) -> str:
    """'    settings beyond the built-in algorithms': a plugin algorithm's own `--set` names, defaults and help."""
    from fedjax_rl import agents

    built_in = {s.name for name in agents.built_in() for s in agents.get(name).config.SETTINGS}
    own = [s for s in algorithm.config.SETTINGS if s.name not in built_in]
    if not own:
        return "    settings: those of the built-in algorithms (--set NAME=VALUE)"
    return "    its own settings (--set NAME=VALUE): " + "; ".join(
        f"{s.name} (default {s.default!r}{', ' + s.help if s.help else ''})" for s in own)


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
                   help="which of each run's seeds acts, by its position in the run (0: its first seed, final.csv's "
                        "first row) (default: 0)")
    p.add_argument("--every", type=int, default=1, help="draw every N-th step; the last state always (default: 1)")
    p.add_argument("--max-frames", type=int, default=None,
                   help="at most this many frames (default: the whole episode, up to its time limit)")
    p.add_argument("--width", type=int, default=None,
                   help="each panel's width in pixels (default: gymnasium's, 600 for classic control; 480 for MuJoCo)")
    p.set_defaults(func=cmd_render)


def _format_warning(message, category, filename, lineno, line=None) -> str:
    """Warnings as the command line's own lines, without the source location."""
    return f"fedjax-rl: warning: {message}\n"


# The commands that compile programs: they keep them on disk (`machine.use_compilation_cache`), so a
# second run of the same shape, a resume or another seed piece compiles nothing.
COMPILING = ("train", "reproduce", "demo", "render")


def _stdout_is_open() -> bool:
    """Whether stdout still has a reader: False once the reader of its pipe has closed it (the write end
    then polls as an error). Where it cannot be asked (no poll), True, so that the error is reported."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return not any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):
        return True


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
                raise usage_error(err) from None
        if args.command in COMPILING:
            from fedjax_rl.training import machine

            machine.use_compilation_cache()
        import matplotlib

        matplotlib.use("Agg")  # files only: the command line never opens a window
        args.func(args)
        sys.stdout.flush()  # here, so that a reader gone away (below) is met here, not at interpreter exit
    except FileNotFoundError as err:
        raise usage_error(err) from None
    except BrokenPipeError:
        if _stdout_is_open():
            raise  # another pipe or socket broke: a failure to report
        # The reader of stdout went away (`fedjax-rl reproduce ... --status | head`): say nothing more, as
        # a command a closed pipe stops does, instead of a traceback. stdout goes to /dev/null so that the
        # interpreter's own flush at exit finds nothing left to fail on.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for such a command
    except KeyboardInterrupt as err:
        # loop.Interrupted says how far the run got and how to resume; elsewhere, say it stopped.
        print(f"\nfedjax-rl: {err or 'interrupted'}", file=sys.stderr, flush=True)
        return 130
    finally:
        warnings.formatwarning = previous
    return 0


if __name__ == "__main__":
    sys.exit(main())
