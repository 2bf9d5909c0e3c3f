"""`fedjax-rl reproduce`: its flags (choices and defaults from the generated flag table) and how a
request is read from them and run: in this process, one program or piece, `--status`, `--report-only`,
or the pieces as separate processes (`--jobs`, `--executor`)."""

from __future__ import annotations

from fedjax_rl.cli import flags
from fedjax_rl.cli.arguments import RUN_BATCH_HELP, add_flag, table_entry, usage_error


def agent_overrides(table_name: str, pairs: list[str], rows: list[str] | None = None) -> dict:
    """--set pairs parsed by the declarations of the requested rows' algorithms: one family per row
    (a table's, or a `heterogeneity` row's own); rows of two families take no --set together."""
    from fedjax_rl import agents
    from fedjax_rl.core import settings
    from fedjax_rl.reproduce import plan

    table = plan.table_for(table_name, rows)
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


def challenger_overrides(challengers: list[str], pairs: list[str]) -> dict:
    """--challenger-set pairs parsed by the declarations of the challengers' algorithms (the first
    challenger that declares a name parses it); the plan checks the rest (`plan.check_challenger_overrides`)."""
    if not pairs:
        return {}
    from fedjax_rl.core import settings
    from fedjax_rl.reproduce import plan

    if not challengers:
        raise ValueError("--challenger-set sets a challenger's settings: add --challenger ALGO")
    return settings.parse_pairs(tuple(plan.challenger_settings(challengers).values()), pairs, "challenger settings",
                                flag="--challenger-set")


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


def run_settings(pairs: list[str]) -> dict:
    """--set-run pairs parsed by the run settings' declarations (`plan.parse_run_settings`)."""
    if not pairs:
        return {}
    from fedjax_rl.reproduce import plan

    return plan.parse_run_settings(pairs)


def _with_executor(args, piece_seeds: int | None, request: dict) -> None:
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
        raise usage_error(failed) from None
    for path in result["paths"]:
        print(f"wrote {path}")


def run(args) -> None:
    """The paper's Table 1 or 2, row by row (resumable), with figures: see fedjax_rl/reproduce/harness.py."""
    from fedjax_rl.reproduce import harness, report, seed_pieces, status, tables
    from fedjax_rl.training import configs

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
        run_batch = "auto" if args.run_batch == "auto" else configs.parse_run_batch(args.run_batch)
        rows = [r.strip() for r in args.rows.split(",") if r.strip()] if args.rows else None
        request = dict(rows=rows, num_seeds=args.seeds, tuning_seeds=args.tuning_seeds, omegas=omegas,
                       max_rates=max_rates, budget=args.budget, seed=args.seed, run_batch=run_batch,
                       challengers=tuple(args.challenger), new_seeds_at=args.new_seeds_at,
                       agent_overrides=agent_overrides(args.table, args.set, rows) or None,
                       challenger_overrides=challenger_overrides(args.challenger, args.challenger_set) or None,
                       train_overrides={**_switches(args, ("tensorboard",)), **run_settings(args.set_run)}
                       or None)
        piece_seeds = _piece_seeds(args.piece_seeds)
        if args.jobs is not None or args.executor is not None or args.max_pieces is not None:
            return _with_executor(args, piece_seeds, request)
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
        raise usage_error(err) from None
    for path in result["paths"]:
        print(f"wrote {path}")


def add_parser(sub) -> None:
    """`fedjax-rl reproduce`: its choices and defaults from the generated flag table."""
    table = flags.TABLE["reproduce"]
    p = sub.add_parser("reproduce", help="the paper's Table 1 or 2 and its figures, resumable row by row")
    own = table["table_defaults"]

    def default(name: str, paper: str) -> str:
        """The paper tables' default of a request setting and each other table's own."""
        others = "; ".join(f"{t}: {d[name]}" for t, d in own.items() if name in d)
        return f"(default: {paper}" + (f"; {others}" if others else "") + ")"

    p.add_argument("table", choices=table["tables"],
                   help="which table: the paper's table1 and table2, or one beyond the paper (beyond_sac, heterogeneity, "
                        "attacks)")
    p.add_argument("--rows", default=None,
                   help="comma-separated rows, e.g. CartPole-v1/length,CartPole-v1/masscart; a heterogeneity row "
                        "at another K than the paper's 5 says so, e.g. CartPole-v1/length/K=10; an attacks row names its K, "
                        "rule, attack and attackers, e.g. CartPole-v1/length/K=10/median/sign_flip/2, and any registered rule "
                        "(a plugin's) in the rule's place gets the rows the library's rules have; a shell wildcard, quoted, "
                        "names every row it matches, e.g. 'Acrobot-v1/*' or '*/K=10/*/*/2' (default: all)")
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
    p.add_argument("--challenger", action="append", default=[], metavar="ALGO",
                   help="add a registered algorithm (an installed plugin's, e.g. fedrdqn_min) to each requested row "
                        "beside its own programs, on the same seeds, budget and settings, tuned by the same omega "
                        "rule if it has omega, and judged against the row's baselines and its robust algorithm; "
                        "a finished row's programs are read back, not run again; repeatable (default: none)")
    p.add_argument("--challenger-set", action="append", default=[], metavar="KEY=VALUE",
                   help="set a challenger's own setting, for every challenger that declares it, e.g. "
                        "--challenger-set pessimism=0.5; validated like --set and recorded in the row "
                        "(default: none, the challenger's defaults)")
    p.add_argument("--new-seeds-at", choices=table["new_seeds_at"], default="grid",
                   help="what the seeds a finished row gains train: its whole omega grid, or only the baseline and "
                        "the headline omega the row chose on its tuning seeds (read from its row.json), which is "
                        "all a confirmatory verdict reads; the row's other omegas keep the seeds they have "
                        "(default: grid)")
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
    add_flag(p, table_entry("tensorboard"))  # not part of a row's recorded settings
    _add_executor_flags(p)
    p.set_defaults(func=run)


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
