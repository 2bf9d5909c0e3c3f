"""What the command line's compilation cache saves (`fedjax_rl.training.machine.use_compilation_cache`): the same
`fedjax-rl train` command three times, each as its own process, with a fresh cache (everything compiles),
with the cache the first run left (nothing that took a second to compile compiles again), and with the
cache turned off; wall and CPU time of each whole process, the time its log says it compiled for, and
whether the three runs' numbers are identical.

    nice .venv/bin/python -m benchmarks.startup.compile_cache     # about 3 minutes on a 2-core CPU

The three runs depend on their order (the second reads the first's cache), so they run once each, in
order, each timed by benchmarks/harness.py's `time_call` (the child's CPU in `children_cpu_s`). Writes
benchmarks/results/startup/compile_cache.json (a row per run) and the table beside it as compile_cache.md.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

from benchmarks import common, harness
from fedjax_rl.training.machine import CACHE_ENV

BENCHMARK = "startup.compile_cache"
# FedRDQN on CartPole-v1 length with the paper's K, E and p, 5 seeds, 10,000 steps per agent: a short run
# whose compile is a large share, as a resumed run or a seed piece's is.
COMMAND = ["train", "--algo", "fedrdqn", "--env", "CartPole-v1", "--param", "length", "--omega", "0.1",
           "--seeds", "5", "--steps", "10000", "--no-progress", "--no-tensorboard"]


def run(out: str, cache: str) -> dict:
    env = {**os.environ, CACHE_ENV: cache, "JAX_LOG_COMPILES": "1"}

    def call():
        done = subprocess.run([sys.executable, "-m", "fedjax_rl.cli", *COMMAND, "--out", out], env=env,
                              capture_output=True, text=True, check=True)
        compiles = [float(s) for s in re.findall(r"Finished XLA compilation of .* in ([0-9.]+) sec", done.stderr)]
        with open(os.path.join(out, "metrics.json")) as f:
            final = json.load(f)["final"]
        return dict(xla_compile_s=sum(compiles), compiles=len(compiles),
                    cache_hits=done.stderr.count("Persistent compilation cache hit"), final=final)

    return harness.time_call(call)


def main() -> None:
    args = harness.parser(BENCHMARK, __doc__).parse_args()
    info = common.machine()
    work = tempfile.mkdtemp(prefix="compile_cache_")
    try:
        cache = os.path.join(work, "cache")
        cases = {"fresh cache": run(os.path.join(work, "fresh"), cache),
                 "the first run's cache": run(os.path.join(work, "warm"), cache),
                 "cache off": run(os.path.join(work, "off"), "off")}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    identical = all(c["final"] == cases["fresh cache"]["final"] for c in cases.values())
    for c in cases.values():
        del c["final"]
    lines = ["# The command line's compilation cache", "", common.machine_line(info), "",
             f"`fedjax-rl {' '.join(COMMAND)}`, each run its own process; numbers identical across the three: "
             f"{'yes' if identical else 'NO'}.", "",
             "| cache | wall (s) | CPU (s) | XLA compiles | their time (s) | cache hits |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    lines += [f"| {name} | {c['wall_s']:.1f} | {c['children_cpu_s']:.1f} | {c['compiles']} | {c['xla_compile_s']:.1f} | "
              f"{c['cache_hits']} |" for name, c in cases.items()]
    warm, fresh = cases["the first run's cache"], cases["fresh cache"]
    lines += ["", f"The second identical run: {warm['wall_s'] / fresh['wall_s']:.2f} of the first's wall time, "
              f"{warm['children_cpu_s'] / fresh['children_cpu_s']:.2f} of its CPU time."]
    text = "\n".join(lines) + "\n"
    print(text)
    harness.write(args.out, BENCHMARK, dict(command=COMMAND, identical=identical),
                  [dict(case=name, **c) for name, c in cases.items()], machine=info)
    with open(os.path.splitext(args.out)[0] + ".md", "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
