"""How the tables and `fedjax-rl compare` judge robust against baseline: the verdict rule
(`fedjax_rl.analysis.stats`) read on one pair of per-seed samples, with the size of the difference on each
metric and, for an undecided comparison, a seed plan (`fedjax_rl.analysis.power`); and each task's
equivalence margin (`equivalence_margin`), the size of difference the verdict calls no difference."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedjax_rl import envs
from fedjax_rl.analysis import power, stats

# "Equivalent" in the comparisons: a median difference within this fraction of the way from a random
# policy to a solved task. Declared before any comparison was read under it, from gymnasium's thresholds
# and the measured random returns, so no result can move it: 5% of the way to solving a task is a
# difference no user would pick an algorithm by.
EQUIVALENCE_FRACTION = 0.05


def equivalence_margin(env_name: str) -> float | None:
    """EQUIVALENCE_FRACTION x (solved return - random-policy return) of a registered task, in its own
    return units: CartPole-v1 22.6, Acrobot-v1 19.9, MountainCar-v0 4.5; None where gymnasium sets no
    solved return (then no comparison of that task is called equivalent)."""
    spec = envs.get(env_name)
    if spec.solved_return is None:
        return None
    return EQUIVALENCE_FRACTION * (spec.solved_return - spec.random_return)


def comparison(robust: dict, baseline: dict, metrics: Sequence[str], paired: bool = True, decide_on: str = "minimum",
               value_range: tuple[float, float] | None = None, margin: float | None = None) -> dict:
    """How the tables and `fedjax-rl compare` judge robust against baseline from their seeds' values
    ({metric: per-seed values, one dataset}, paired by seed or not). Per metric: the median difference
    with its interval (`stats.difference`, within what the task's `value_range` of returns allows), the
    difference of the means (a description, and what the paper's numbers are) and P(robust >
    baseline). On `decide_on`: paired, the per-seed differences, the seeds where robust is higher,
    lower and equal, and the share of wins among the untied ones with its interval ("win_share"); the
    verdict (`stats.verdict`: the direction by `stats.sign_test`, paired, or by the shift's interval, unpaired;
    'equivalent' against the task's `margin`, where it has one, read on the same untied seeds as the
    direction (`equivalence`); "within_margin" where a direction was
    found whose size lies inside it); for an undecided comparison, about how many seeds would decide it
    (`power.seeds_for_power`)."""
    for side, values in (("robust", robust), ("baseline", baseline)):
        missing = [metric for metric in dict.fromkeys((decide_on, *metrics)) if metric not in values]
        if missing:
            raise ValueError(f"{side} has no per-seed values for metric(s) {missing}: it holds {sorted(values)}")
    x = stats.one_dataset(robust[decide_on], f"robust {decide_on}")
    y = stats.one_dataset(baseline[decide_on], f"baseline {decide_on}")
    if paired and x.size != y.size:
        raise ValueError(f"paired values need one per seed on both sides, got {x.size} and {y.size}")
    if margin is not None and not (np.isfinite(margin) and margin > 0):
        raise ValueError(f"margin must be a finite number > 0 (or None: no equivalence), got {margin}")
    line = dict(seeds=min(x.size, y.size), margin=margin)
    for metric in metrics:
        line[metric] = stats.difference(robust[metric], baseline[metric], paired=paired, value_range=value_range)
        line[f"{metric}_mean"] = float(np.mean(robust[metric]) - np.mean(baseline[metric]))
        line[f"{metric}_improvement"] = stats.probability_of_improvement(robust[metric], baseline[metric])
    if paired:
        d = x - y
        line.update(differences=d, higher=int((d > 0).sum()), lower=int((d < 0).sum()), equal=int((d == 0).sum()))
        line["win_share"] = stats.win_share(line["higher"], line["lower"])
        ahead, behind = stats.sign_test(line["higher"], line["lower"])
    else:
        shift = line[decide_on] if decide_on in metrics else stats.difference(x, y, paired=False, value_range=value_range)
        ahead, behind = shift.low > 0, shift.high < 0
    line["equivalence"] = None if margin is None else equivalence(x, y, paired, value_range)
    line["verdict"] = stats.verdict(ahead, behind, stats.decidable(x.size, None if paired else y.size), line["equivalence"], margin)
    line["within_margin"] = bool(line["equivalence"] is not None and stats.inside_margin(line["equivalence"], margin))
    line["seeds_for_power"] = (None if line["verdict"] in (stats.AHEAD, stats.BEHIND, stats.EQUIVALENT)
                               else power.seeds_for_power(x, y, paired=paired))
    line["direction_seen"] = (line["higher"] != line["lower"] if paired
                              else line[f"{decide_on}_improvement"] != 0.5 if decide_on in metrics
                              else stats.probability_of_improvement(x, y) != 0.5)
    return line


def equivalence(x: np.ndarray, y: np.ndarray, paired: bool, value_range: tuple[float, float] | None) -> stats.Interval:
    """The interval 'equivalent' reads: paired, the untied differences' median at 90%
    (`stats.equivalence_interval`: the direction test's seeds, ties apart); unpaired, the Hodges-Lehmann
    shift at 90%; cut to the differences `value_range` allows."""
    if not paired:
        return stats.difference(x, y, paired=False, confidence=stats.EQUIVALENCE_CONFIDENCE, value_range=value_range)
    interval = stats.equivalence_interval(x - y)
    return interval if value_range is None else stats.within_range(interval, value_range)
