"""One program of one reproduction row, alone in its own process, into the row's own directory.

A row's programs (Table 2: FedRDDPG's omega grid and DDPGAvg(2)) are independent; `reproduce` runs
them one after another. On a GPU machine, where each program's loop waits on the host's physics
callback and the GPU between steps, running every program of every row as its own process keeps
the GPU and the host's cores busier. `reproduce.run_program` runs exactly the program `reproduce`
would (the same config, omega grid, seeds and run batch, into the same directory), so a later
`fedjax-rl reproduce` with the same request reads every finished program back and writes the row,
computing nothing again:

    python benchmarks/row_program.py table2 Hopper-v4/torso ddpgavg2 --budget 0.05 --seeds 4 \
        --tuning-seeds 2 --omegas 0.05,0.1 --out /tmp/t2
"""

from __future__ import annotations

import argparse

from fedjax_rl import reproduce


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
    result = reproduce.run_program(args.table, args.out, args.row, args.program, budget=args.budget,
                                   num_seeds=args.seeds, tuning_seeds=args.tuning_seeds,
                                   omegas=[float(w) for w in args.omegas.split(",")], seed=args.seed)
    print(f"{args.row} {args.program}: {result['timing']}")


if __name__ == "__main__":
    main()
