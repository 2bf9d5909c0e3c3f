"""What every benchmark records about the machine it ran on (these machines are shared and noisy,
so the load average is part of the result): `fedjax_rl.training.machine.describe`, shared with reproduce.
And the one way the throughput benchmarks summarise their timed calls."""

from __future__ import annotations

import statistics

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
