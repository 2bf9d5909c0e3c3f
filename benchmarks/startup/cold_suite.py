"""What `make test` costs a fresh machine: the suite's own command, run in a fresh clone of a commit with an
empty compilation cache (as CI and a new user pay it), timed as a whole (wall and CPU of every process it
starts), with each module's share from pytest's per-test durations.

The budget is 15 minutes of that wall time, but the same suite's time moves with the host (this 2-core
VM's kind measured 22 minutes on one host and 8.5 on another, a commit apart, with no test changed). So a
row records which host it was (CPU family and model, clock, caches) and a probe beside the suite: one small
`fedjax-rl train` command compiled from nothing at the suite's code generation, its own process, before
and after. The suite's wall over the probe's is the figure meant to compare commits across hosts.

    .venv/bin/python -m benchmarks.startup.cold_suite [--commit HEAD] [--note "two reniced pieces beside it"]

About the suite's time plus a minute. Appends a row to benchmarks/results/startup/cold_suite.json
(benchmarks/harness.py's format; each row keeps the machine it ran on, since the rows' hosts differ).
"""

from __future__ import annotations

import collections
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

from benchmarks import common, harness
from fedjax_rl.training.machine import CACHE_ENV

BENCHMARK = "startup.cold_suite"
ROOT = harness.ROOT
# The suite's code generation (tests/conftest.py): the probe compiles as the suite's programs do.
SUITE_FLAGS = "--xla_backend_optimization_level=1 --xla_cpu_use_fusion_emitters=false"
# tests/test_reproducibility.py's tiny run: 2 seeds, 2 agents, 60 steps; three programs to compile.
PROBE = ["train", "--algo", "fedrdqn", "--env", "CartPole-v1", "--param", "length", "--agents", "2",
         "--sync-every", "10", "--steps", "60", "--eval-every", "3", "--eval-episodes", "2", "--omega", "0.2",
         "--seeds", "2", "--set", "hidden_sizes=16,16", "--set", "learning_starts=15", "--set", "batch_size=8",
         "--set", "buffer_size=50", "--no-progress", "--no-tensorboard"]


def timed(command: list[str], **kwargs) -> tuple[subprocess.CompletedProcess, float, float]:
    """Run to the end; wall seconds and CPU seconds of it and every process it started."""
    row = harness.time_call(lambda: dict(done=subprocess.run(command, capture_output=True, text=True, **kwargs)))
    return row["done"], row["wall_s"], row["children_cpu_s"]


def host() -> dict:
    """What tells two hosts of one VM kind apart: /proc/cpuinfo's family, model and clock, lscpu's caches."""
    with open("/proc/cpuinfo") as f:
        first = f.read().split("\n\n")[0]
    fields = dict(line.split(":", 1) for line in first.splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    out = {k: fields.get(k) for k in ("cpu family", "model", "stepping", "cpu MHz")}
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    out.update(re.findall(r"^(L[23] cache):\s+(.+)$", lscpu, re.M))
    return out


def suite_command(repo: str) -> list[str]:
    """`make test`'s command as the Makefile says it, without bootstrapping (the clone uses this venv)."""
    text = subprocess.run(["make", "-s", "-n", "-o", ".venv/.installed", "test"], cwd=repo, capture_output=True,
                          text=True, check=True).stdout
    command = shlex.split(text.replace("\\\n", " "))
    command[0] = sys.executable
    return [c for c in command if not c.startswith("--durations")] + ["--durations=0"]


def probe(work: str, name: str) -> dict:
    env = {**os.environ, CACHE_ENV: os.path.join(work, f"probe_cache_{name}"), "XLA_FLAGS": SUITE_FLAGS}
    done, wall, cpu = timed([sys.executable, "-m", "fedjax_rl.cli", *PROBE, "--out", os.path.join(work, name)],
                            env=env, check=True)
    return dict(wall_s=round(wall, 1), cpu_s=round(cpu, 1))


def per_module(log: str) -> dict:
    seconds = collections.Counter()
    for phase_seconds, module in re.findall(r"^\s*([0-9.]+)s (?:call|setup|teardown)\s+tests/(\w+)\.py::", log, re.M):
        seconds[module] += float(phase_seconds)
    return {module: round(s, 1) for module, s in seconds.most_common()}


def main() -> None:
    parser = harness.parser(BENCHMARK, __doc__)
    parser.add_argument("--commit", default="HEAD", help="the commit to clone and test (default: HEAD)")
    parser.add_argument("--note", default="", help="what else ran on the machine meanwhile")
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", args.commit], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.strip()
    info = common.machine()
    work = tempfile.mkdtemp(prefix="cold_suite_")
    repo = os.path.join(work, "repo")
    subprocess.run(["git", "clone", "-q", ROOT, repo], check=True)
    subprocess.run(["git", "checkout", "-q", commit], cwd=repo, check=True)
    os.symlink(os.path.dirname(os.path.dirname(sys.executable)), os.path.join(repo, ".venv"))
    command = suite_command(repo)
    probe_before = probe(work, "before")
    env = {key: value for key, value in os.environ.items() if key != "XLA_FLAGS"}
    env[CACHE_ENV] = os.path.join(work, "suite_cache")
    done, wall, cpu = timed(command, cwd=repo, env=env)
    probe_after = probe(work, "after")
    counts = {kind: int(n) for n, kind in re.findall(r"(\d+) (passed|failed|skipped|xfailed|errors?)\b",
                                                      done.stdout.splitlines()[-1] if done.stdout else "")}
    modules = per_module(done.stdout)
    probe_wall = (probe_before["wall_s"] + probe_after["wall_s"]) / 2
    row = dict(date=time.strftime("%Y-%m-%d"), commit=commit, command=" ".join(shlex.quote(c) for c in command[1:]),
               returncode=done.returncode, wall_s=round(wall, 1), cpu_s=round(cpu, 1), tests=counts,
               probe_before=probe_before, probe_after=probe_after, wall_over_probe=round(wall / probe_wall, 1),
               modules=modules, machine=dict(info, host=host(), load_average_1_5_15min_at_end=list(os.getloadavg())),
               note=args.note)
    rows = harness.read(args.out)["rows"] if os.path.exists(args.out) else []
    harness.write(args.out, BENCHMARK, dict(suite_flags=SUITE_FLAGS, probe=PROBE), rows + [row], machine=info)

    print(common.machine_line(row["machine"]), "|", ", ".join(f"{k} {v}" for k, v in row["machine"]["host"].items()))
    print(f"commit {commit}: suite {wall / 60:.1f} min wall ({wall:.0f} s), {cpu:.0f} CPU-s, {counts}, "
          f"exit {done.returncode}; probe {probe_before['wall_s']} s before, {probe_after['wall_s']} s after; "
          f"suite / probe {row['wall_over_probe']}")
    total = sum(modules.values())
    for module, seconds in list(modules.items())[:10]:
        print(f"  {module:32s} {seconds:7.1f} s  {100 * seconds / total:4.1f}% of the workers' test time")
    if done.returncode:
        print(done.stdout[-3000:], done.stderr[-3000:], sep="\n")


if __name__ == "__main__":
    main()
