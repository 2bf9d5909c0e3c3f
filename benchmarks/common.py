"""What every benchmark records about the machine it ran on (these machines are shared and noisy,
so the load average is part of the result): `fedjax_rl.machine.describe`, shared with reproduce.
And the one way the throughput benchmarks summarise their timed calls."""

from __future__ import annotations

import statistics

from fedjax_rl.machine import describe as machine  # noqa: F401 (what the scripts call)


def median_rates(calls: list[dict], sb3: dict | None = None) -> dict:
    """Median agent-steps/s and agent-steps per CPU-second over timed calls (dicts with those two
    keys), with the ratios to an SB3 summary of the same two keys when one is given."""
    out = {key: statistics.median(c[key] for c in calls) for key in ("agent_steps_per_sec", "agent_steps_per_cpu_sec")}
    if sb3:
        out["ratio_vs_sb3"] = out["agent_steps_per_sec"] / sb3["agent_steps_per_sec"]
        out["ratio_vs_sb3_per_cpu_sec"] = out["agent_steps_per_cpu_sec"] / sb3["agent_steps_per_cpu_sec"]
    return out
