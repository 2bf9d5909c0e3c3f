"""What every benchmark records about the machine it ran on (these machines are shared and noisy,
so the load average is part of the result): `fedjax_rl.training.machine.describe`, shared with reproduce.
And what the throughput benchmarks share: `Block`, a config's compiled `run_block` over vmapped seeds
as a timed call; `sb3_case`, an SB3 reference run as a case; `add_rates`, `median_rates` and
`sb3_rates`, the one way they turn timed calls into agent-steps per second and ratios to SB3."""

from __future__ import annotations

import statistics

from benchmarks import harness

from fedjax_rl.training.machine import describe as machine  # noqa: F401 (what the scripts call)
from fedjax_rl.training.machine import summary


def machine_line(info: dict) -> str:
    """The "machine:" line every benchmark prints for a `machine()` record: the accelerator or CPU
    (`fedjax_rl.training.machine.summary`, as reproduce's tables name it), jax, and the load average at start
    (and at end where recorded), since the machines are shared."""
    start = info["load_average_1_5_15min_at_start"]
    end = info.get("load_average_1_5_15min_at_end")
    load = f"{start[0]:.1f} at start, {end[0]:.1f} at end" if end else f"{start[0]:.1f}"
    return f"machine: {summary(info)}, jax {info['jax']}; load average {load} (shared machine)"


def add_cpu_dots_argument(parser) -> None:
    """`--cpu-dots eigen,ynnpack`: every case once per CPU matrix-product library, side by side."""
    parser.add_argument("--cpu-dots", default="", type=lambda text: text.split(",") if text else [None],
                        help="CPU matrix-product libraries, comma-separated (eigen,ynnpack: each algorithm once "
                             "per library, side by side); default: the algorithm's (TrainConfig.cpu_dots)")


def median_rates(calls: list[dict], sb3: dict | None = None) -> dict:
    """Median agent-steps/s and agent-steps per CPU-second over timed calls (dicts with those two
    keys), with the ratios to an SB3 summary of the same two keys when one is given."""
    out = {key: statistics.median(c[key] for c in calls) for key in ("agent_steps_per_sec", "agent_steps_per_cpu_sec")}
    if sb3:
        out["ratio_vs_sb3"] = out["agent_steps_per_sec"] / sb3["agent_steps_per_sec"]
        out["ratio_vs_sb3_per_cpu_sec"] = out["agent_steps_per_cpu_sec"] / sb3["agent_steps_per_cpu_sec"]
    return out


def current_rss() -> int | None:
    """This process's resident memory in bytes (None where /proc is not there)."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
    except OSError:
        return None


class Block:
    """A training config's `run_block` over `num_seeds` seeds, built and compiled the way `loop.run`
    maps seeds (`program.over_runs`: all in one vmap, or `run_batch` at a time), with the config's CPU
    matrix-product library. Calling it runs the next block to completion: the timed call of the
    throughput benchmarks (block 0 crosses `learning_starts`: the harness's warm-up call).

    `info` is what every call's row carries besides its timing: the compile seconds (lower +
    compile, apart from the harness's setup time, which includes building the state), the agent-steps
    of a call, the resident memory by stage; a benchmark adds its own (a FLOP count)."""

    def __init__(self, config, num_seeds: int, run_batch: int | None = None, donate: bool = False):
        import jax

        from fedjax_rl.training import program

        self.trainer = program.make_trainer(config)
        options = config.compiler_options
        self.state = jax.jit(jax.vmap(self.trainer.init), compiler_options=options)(
            program.seed_keys(0, num_seeds))
        jax.block_until_ready(self.state)
        self.rss = dict(after_init=current_rss())
        mapped = jax.jit(program.over_runs(self.trainer.run_block, (num_seeds,), run_batch),
                         donate_argnums=0 if donate else (), compiler_options=options)
        built = harness.time_call(lambda: {"compiled": mapped.lower(self.state, self.trainer.hparams, 0).compile()})
        self.compiled = built.pop("compiled")
        self.rss["after_compile"] = current_rss()
        self.block = 0
        self.info = dict(compile_s=built["wall_s"], compile_cpu_s=built["cpu_s"], rss_bytes=self.rss,
                         agent_steps=num_seeds * config.num_agents * config.eval_every_rounds * config.sync_every)

    def __call__(self) -> dict:
        import os

        import jax
        import numpy as np

        self.state, metrics = self.compiled(self.state, self.trainer.hparams, self.block)
        jax.block_until_ready((self.state, metrics))
        self.block += 1
        if self.block == 1:
            self.rss["after_first_block"] = current_rss()
        return dict(self.info, load_avg_1min=os.getloadavg()[0],
                    train_return=float(np.mean(metrics["train_return"])))


def finished(fn, out: dict | None = None):
    """A timed call: `fn()` run to completion (`jax.block_until_ready`), returning `out` for its row."""

    def call():
        import jax

        jax.block_until_ready(fn())
        return out

    return call


def add_rates(rows: list[dict]) -> list[dict]:
    """Agent-steps per second and per CPU-second of each timed call that ran `agent_steps` and has
    no rates of its own (an SB3 reference reports those of the rounds it timed); returns the rows."""
    for row in rows:
        if "agent_steps" in row and "agent_steps_per_sec" not in row:
            row["agent_steps_per_sec"] = row["agent_steps"] / row["wall_s"]
            row["agent_steps_per_cpu_sec"] = row["agent_steps"] / row["cpu_s"]
    return rows


def measure_rates(cases: list[harness.Case], repeats: int) -> list[dict]:
    """`harness.measure` of `Block` and `sb3_case` cases, one warm-up call of each `Block` (block 0
    crosses `learning_starts`; an SB3 reference warms itself up), with `add_rates`; prints each call."""
    rows = add_rates(harness.measure(cases, repeats))
    for row in rows:
        load = row.get("load_avg_1min", row.get("load_avg_1min_at_end", float("nan")))
        print(f"  rep {row['repeat']}: {row.get('kind', '')} {row['case']}: {row['agent_steps_per_sec']:.1f} "
              f"agent-steps/s (load {load:.1f})", flush=True)
    return rows


def sb3_case(name: str, module: str, args: list[str], python: str, settings: dict) -> harness.Case:
    """An SB3 reference (`benchmarks.sb3.*`) as a case: each call runs `python -m module *args` (the
    .venv-bench interpreter: torch and SB3, no JAX) and returns the JSON it prints, less the items the
    case's settings name. The harness cannot time the SB3 loop inside that process: the reference
    times its own rounds after its own warm-up rounds (`sb3_reference.federated_seeds`), and those
    rates are the row's; the row's `wall_s` and `children_cpu_s` are the whole subprocess's (start,
    torch's import, warm-up). No untimed call first: the process warms itself up."""
    import json
    import subprocess

    command = [python, "-m", module, *args]

    def call() -> dict:
        out = subprocess.run(command, capture_output=True, text=True, check=True, cwd=harness.ROOT).stdout
        return {k: v for k, v in json.loads(out[out.index("{"):]).items() if k not in settings}

    return harness.Case(name, lambda: call, settings, warmup=0)


def sb3_rates(result: dict, **match) -> dict | None:
    """The SB3 reference's median rates in a result (`median_rates`' keys): over its rows per repeat,
    or its one summary row in a result written before the harness (`algo` "sb3"); None if it has none."""
    rows = [r for r in result["rows"] if r.get("kind", "sb3") == "sb3" and str(r.get("algo", "")).startswith("sb3")
            and all(r.get(k) == v for k, v in match.items())]
    return median_rates(rows) if rows else None
