"""How long `fedjax-rl --help` and `fedjax-rl train --help` take as whole processes: this checkout,
with no plugin and with the example plugin (examples/own_algorithm) installed, against another
checkout (`--baseline DIR`, e.g. a `git worktree` of the revision before plugins), interleaved run by
run so that the ratios hold on a shared machine. The help must stay fast: it imports no JAX, and lists
installed plugins from their packages' metadata without importing them.

    python -m benchmarks.startup.cli_startup --baseline /tmp/before --repeats 40

Timed by benchmarks/harness.py (each case a process: wall seconds, and the child's CPU). Prints a table of
median wall times and ratios to the baseline; writes benchmarks/results/startup/cli_startup.json, a row per
command, case and run, each with its ratio to the baseline's run of the same repeat.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from benchmarks import common, harness

BENCHMARK = "startup.cli_startup"
ROOT = harness.ROOT
COMMANDS = {"fedjax-rl --help": ["--help"], "fedjax-rl train --help": ["train", "--help"]}


def case(command: str, name: str, checkout: str, extra_path: str | None) -> harness.Case:
    path = os.pathsep.join(p for p in (checkout, extra_path) if p)

    def run():
        subprocess.run([sys.executable, "-m", "fedjax_rl.cli", *COMMANDS[command]],
                       env={**os.environ, "PYTHONPATH": path}, check=True, stdout=subprocess.DEVNULL)

    return harness.Case(f"{command} | {name}", lambda: run, dict(command=command, checkout=name))


def install_example(target: str) -> None:
    source = os.path.join(target, "src")
    shutil.copytree(os.path.join(ROOT, "examples", "own_algorithm"), source,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target",
                    os.path.join(target, "site"), source], check=True)


def main() -> None:
    parser = harness.parser(BENCHMARK, __doc__, repeats=30)
    parser.add_argument("--baseline", default=None, help="another checkout's root to compare with (default: none)")
    args = parser.parse_args()
    info = common.machine()
    with tempfile.TemporaryDirectory() as tmp:
        install_example(tmp)
        checkouts = {"this checkout": (ROOT, None),
                     "this checkout, example plugin installed": (ROOT, os.path.join(tmp, "site"))}
        if args.baseline:
            checkouts["baseline"] = (os.path.abspath(args.baseline), None)
        rows = []
        for command in COMMANDS:  # warm-up (bytecode caches), then the checkouts interleaved run by run
            rows += harness.measure([case(command, name, *where) for name, where in checkouts.items()], args.repeats)
    if args.baseline:
        base = {(r["command"], r["repeat"]): r["wall_s"] for r in rows if r["checkout"] == "baseline"}
        for row in rows:
            row["ratio_to_baseline"] = row["wall_s"] / base[(row["command"], row["repeat"])]
    print(common.machine_line(info))
    print(f"{'command':<24} {'case':<42} {'median ms':>10} {'min ms':>8}" + ("  ratio to baseline" if args.baseline else ""))
    for command in COMMANDS:
        for name in checkouts:
            mine = [r for r in rows if (r["command"], r["checkout"]) == (command, name)]
            ratio = f"  {statistics.median(r['ratio_to_baseline'] for r in mine):.3f}" if args.baseline else ""
            print(f"{command:<24} {name:<42} {statistics.median(r['wall_s'] for r in mine) * 1e3:>10.1f} "
                  f"{min(r['wall_s'] for r in mine) * 1e3:>8.1f}{ratio}")
    baseline = None
    if args.baseline:  # recorded by its commit, not by where it was checked out
        baseline = subprocess.run(["git", "-C", args.baseline, "rev-parse", "--short", "HEAD"], capture_output=True,
                                  text=True).stdout.strip() or "a checkout outside git"
        print(f"baseline: commit {baseline}")
    harness.write(args.out, BENCHMARK, dict(baseline_commit=baseline, runs=args.repeats), rows, machine=info)


if __name__ == "__main__":
    main()
