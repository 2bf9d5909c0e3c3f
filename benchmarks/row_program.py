"""One program of one reproduction row, alone in its own process, into the row's own directory.

A row's programs (Table 2: FedRDDPG's omega grid and DDPGAvg(2)) are independent; `reproduce` runs
them one after another. On a GPU machine, where each program's loop waits on the host's physics
callback and the GPU between steps, running every program of every row as its own process keeps
the GPU and the host's cores busier. Each program here is exactly the one `reproduce` would run
(`reproduce._plan`: the same config, omega grid, seeds and run batch, into the same directory), so
a later `fedjax-rl reproduce` with the same request reads every finished program back and writes
the row, computing nothing again:

    python benchmarks/row_program.py table2 Hopper-v4/torso ddpgavg2 --budget 0.05 --seeds 4 \
        --tuning-seeds 2 --omegas 0.05,0.1 --out /tmp/t2
"""

from __future__ import annotations

import argparse
import os

from fedjax_rl import experiment, reproduce, reproduce_tables


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("table")
    p.add_argument("row", help='a row key, e.g. "Hopper-v4/torso"')
    p.add_argument("program", help="a program name of that table, e.g. fedrddpg or ddpgavg2")
    p.add_argument("--budget", default="paper")
    p.add_argument("--seeds", type=int, default=reproduce.DEFAULT_SEEDS)
    p.add_argument("--tuning-seeds", type=int, default=reproduce.DEFAULT_TUNING_SEEDS)
    p.add_argument("--omegas", default=",".join(f"{w:g}" for w in reproduce.DEFAULT_OMEGAS))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    omegas = [float(w) for w in args.omegas.split(",")]
    table, selected, _, plans, run_batch = reproduce._plan(args.table, [args.row], args.seeds, args.tuning_seeds,
                                                           omegas, args.budget, args.seed, None, None, "auto")
    row = selected[0]
    names = [program.name for program, _, _ in plans[row.key]]
    if args.program not in names:
        raise SystemExit(f"program must be one of {names} for {args.table}, got {args.program!r}")
    program, config, grid = next(plan for plan in plans[row.key] if plan[0].name == args.program)
    out_dir = os.path.join(reproduce_tables.row_dir(args.out, table, row), program.name)
    result = experiment.run(config, num_seeds=args.tuning_seeds + args.seeds, seed=args.seed, out_dir=out_dir,
                            progress=True, grid=grid, run_batch=run_batch, new_run=True)
    print(f"{args.row} {program.label}: {result['timing']}")


if __name__ == "__main__":
    main()
