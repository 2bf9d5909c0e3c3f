"""`fedjax-rl` command line: train, plot, compare, demo.

    fedjax-rl train --algo fedrdqn --env CartPole-v1 --param length --omega 0.1 --seeds 5 --steps 20000 --out runs/x
    fedjax-rl plot runs/x runs/y --out runs/figs
    fedjax-rl compare runs/x runs/y
    fedjax-rl demo --out runs/demo

Every setting is checked before anything compiles; a bad one stops with a message naming it.
"""

from __future__ import annotations

import argparse
import os
import sys

import matplotlib

matplotlib.use("Agg")  # files only: the command line never opens a window

from fedjax_rl import configs, envs, heterogeneity
from fedjax_rl.train import ALGOS


def _parse_value(text: str):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    if "," in text:
        return tuple(_parse_value(t) for t in text.split(",") if t)
    return text


def _overrides(pairs: list[str]) -> dict:
    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise ValueError(f"--set expects KEY=VALUE, got {pair!r}")
        key, value = pair.split("=", 1)
        value = _parse_value(value)
        if key == "hidden_sizes" and not isinstance(value, tuple):
            value = (value,)  # "--set hidden_sizes=64" means one hidden layer
        out[key] = value
    return out


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--algo", default="fedrdqn", choices=sorted(ALGOS))
    p.add_argument("--env", default="CartPole-v1", help=f"one of {', '.join(envs.list_envs())}")
    p.add_argument("--param", default="length", help="physical parameter(s) to perturb, comma-separated")
    p.add_argument("--omega", type=float, default=None, help="robustness level in [0, 1) (FedRDQN)")
    p.add_argument("--tau", type=float, default=None, help="expectile level in (0, 0.5)")
    p.add_argument("--agents", type=int, default=heterogeneity.PAPER_NUM_AGENTS, help="K")
    p.add_argument("--sync-every", type=int, default=heterogeneity.PAPER_SYNC_EVERY, help="E")
    p.add_argument("--max-rate", type=float, default=heterogeneity.PAPER_MAX_RATE, help="p in [0, 1)")
    p.add_argument("--steps", type=int, default=None, help="environment steps per agent (default: RL-Zoo3's)")
    p.add_argument("--eval-every", type=int, default=None, help="rounds between evaluations (default: 20 points)")
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--seeds", type=int, default=1, help="number of seeds, vmapped in one program")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--devices", type=int, default=None, help="shard the agent axis over this many devices")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a DQN setting, e.g. --set learning_rate=1e-3 --set hidden_sizes=64,64")
    p.add_argument("--out", default=None, help="run directory (config, checkpoints, metrics, parameters)")
    p.add_argument("--no-progress", action="store_true")


def config_from_args(args):
    agent = _overrides(args.set)
    if args.omega is not None:
        agent["omega"] = args.omega
    if args.tau is not None:
        agent["tau"] = args.tau
    if args.algo == "dqnavg":
        agent.setdefault("omega", 0.0)
    envs.get_spec(args.env)  # an unknown name raises with the allowed names
    steps = args.steps if args.steps is not None else configs.zoo_steps(args.env)
    if args.sync_every < 1:
        raise ValueError(f"--sync-every (E) must be >= 1, got {args.sync_every}")
    rounds = max(1, steps // args.sync_every)
    eval_every = args.eval_every if args.eval_every is not None else max(1, rounds // 20)
    return configs.train_config(
        args.algo,
        args.env,
        agent_overrides=agent,
        physics=tuple(p for p in args.param.split(",") if p),
        num_agents=args.agents,
        sync_every=args.sync_every,
        max_rate=args.max_rate,
        steps_per_agent=steps,
        eval_every_rounds=eval_every,
        eval_episodes=args.eval_episodes,
        num_devices=args.devices,
    )


def cmd_train(args) -> None:
    from fedjax_rl import experiment

    try:
        config = config_from_args(args)
        config.validate()
        if args.seeds < 1:
            raise ValueError(f"--seeds must be >= 1, got {args.seeds}")
    except ValueError as err:
        raise SystemExit(f"fedjax-rl: error: {err}") from None
    result = experiment.run(config, num_seeds=args.seeds, seed=args.seed, out_dir=args.out,
                            progress=not args.no_progress)
    final = result["final"]
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


def main(argv: list[str] | None = None) -> int:
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

    args = parser.parse_args(argv)
    try:
        args.func(args)
    except FileNotFoundError as err:
        raise SystemExit(f"fedjax-rl: error: {err}") from None
    return 0


if __name__ == "__main__":
    sys.exit(main())
