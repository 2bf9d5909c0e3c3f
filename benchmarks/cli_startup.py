"""How long `fedjax-rl --help` and `fedjax-rl train --help` take as whole processes: this checkout,
with no plugin and with the example plugin (examples/own_algorithm) installed, against another
checkout (`--baseline DIR`, e.g. a `git worktree` of the revision before plugins), interleaved run by
run so that the ratios hold on a shared machine. The help must stay fast: it imports no JAX, and lists
installed plugins from their packages' metadata without importing them.

    python benchmarks/cli_startup.py --baseline /tmp/before --runs 40

Prints a table of median wall times and ratios to the baseline; writes
benchmarks/results/cli_startup.json with the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
COMMANDS = {"fedjax-rl --help": ["--help"], "fedjax-rl train --help": ["train", "--help"]}


def one_run(checkout: str, argv: list[str], extra_path: str | None) -> float:
    path = os.pathsep.join(p for p in (checkout, extra_path) if p)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "fedjax_rl.cli", *argv], env={**os.environ, "PYTHONPATH": path},
                   check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def install_example(target: str) -> None:
    source = os.path.join(target, "src")
    shutil.copytree(os.path.join(ROOT, "examples", "own_algorithm"), source,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target",
                    os.path.join(target, "site"), source], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", default=None, help="another checkout's root to compare with (default: none)")
    parser.add_argument("--runs", type=int, default=30, help="timed runs of each case (default: 30)")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "cli_startup.json"))
    args = parser.parse_args()
    sys.path.insert(0, ROOT)
    from common import machine, machine_line

    info = machine()
    with tempfile.TemporaryDirectory() as tmp:
        install_example(tmp)
        cases = {"this checkout": (ROOT, None), "this checkout, example plugin installed": (ROOT, os.path.join(tmp, "site"))}
        if args.baseline:
            cases["baseline"] = (os.path.abspath(args.baseline), None)
        times = {(name, command): [] for name in cases for command in COMMANDS}
        for command, argv in COMMANDS.items():
            for name, (checkout, extra) in cases.items():
                one_run(checkout, argv, extra)  # warm-up: bytecode caches
            for _ in range(args.runs):
                for name, (checkout, extra) in cases.items():
                    times[(name, command)].append(one_run(checkout, argv, extra))
    info["load_average_1_5_15min_at_end"] = list(os.getloadavg())
    rows = []
    for (name, command), values in times.items():
        median = statistics.median(values)
        row = dict(command=command, case=name, runs=len(values), median_s=median, min_s=min(values))
        if args.baseline:
            base = times[("baseline", command)]
            row["median_ratio_to_baseline"] = statistics.median(v / b for v, b in zip(values, base))
        rows.append(row)
    print(machine_line(info))
    print(f"{'command':<24} {'case':<42} {'median ms':>10} {'min ms':>8}" + ("  ratio to baseline" if args.baseline else ""))
    for row in rows:
        ratio = f"  {row['median_ratio_to_baseline']:.3f}" if args.baseline else ""
        print(f"{row['command']:<24} {row['case']:<42} {row['median_s'] * 1e3:>10.1f} {row['min_s'] * 1e3:>8.1f}{ratio}")
    baseline = None
    if args.baseline:  # recorded by its commit, not by where it was checked out
        baseline = subprocess.run(["git", "-C", args.baseline, "rev-parse", "--short", "HEAD"], capture_output=True,
                                  text=True).stdout.strip() or "a checkout outside git"
        print(f"baseline: commit {baseline}")
    with open(args.out, "w") as f:
        json.dump(dict(machine=info, baseline_commit=baseline, rows=rows), f, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
