"""Seed plans for the verdict rule (`fedjax_rl.analysis.stats`): how likely the rule is to decide at n seeds
(`rule_power`, exact with ties), and about how many seeds would decide an undecided comparison with
probability POWER (`seeds_for_power`), averaged over the effects the tables see so that what a plan
expects is what it delivers (`expected_power`, `planned_power`; the coverage study checks it).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import scipy.stats

from fedjax_rl.analysis import stats
from fedjax_rl.analysis.stats import CONFIDENCE, MIN_SEEDS

POWER = 0.8  # seeds_for_power's target
PLAN_LIMIT = 2000  # the most seeds a plan considers
# The effects a seed plan assumes (`expected_power`), and on whose grid the coverage study measures
# what it delivers (`planned_power`, exact) from pilots of PLAN_PILOTS seeds: over the grid, weighted by
# how often a pilot gets a figure, the mean power at the planned count, and the smallest such mean for
# one pilot count (benchmarks/studies/verdict_coverage.py; tests/test_stats.py checks these against its results).
PLAN_PILOTS = (4, 5, 8, 12, 20)
PLAN_HIGHER = (0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9)
PLAN_TIES = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6)
# Averaged over effects the plan delivers its POWER; per effect (P(higher), averaged over the tie rates) it
# delivers less where the effect is weak and more where it is strong, which the legends say beside the mean.
PLAN_DELIVERY = dict(mean=0.803, smallest=0.802, by_higher={0.6: 0.331, 0.65: 0.570, 0.7: 0.744, 0.75: 0.855,
                                                            0.8: 0.924, 0.85: 0.964, 0.9: 0.986})


def seeds_for_power(x, y, paired: bool = True, power: float = POWER, confidence: float = CONFIDENCE,
                    limit: int = PLAN_LIMIT) -> int | None:
    """`planned_seeds` for the pilot seeds x and y (one dataset: values on the last axis, the same count
    paired). Unpaired values plan from P(X > Y) over the pairs of seeds, counted as if from min(m, n)
    independent untied signs (an approximation, not measured)."""
    x, y = stats.one_dataset(x, "x"), stats.one_dataset(y, "y")
    if paired:
        if x.shape != y.shape:
            raise ValueError(f"paired values need one per seed on both sides, got {x.size} and {y.size}")
        d = x - y
        return planned_seeds(int((d > 0).sum()), int((d < 0).sum()), int((d == 0).sum()), power, confidence, limit)
    n = min(x.size, y.size)
    share = float(stats.pairwise_improvement(x, y))
    return _plan(share * n, (1 - share) * n, 0.0, power, confidence, limit)


@functools.lru_cache(maxsize=4096)
def planned_seeds(wins: int, losses: int, ties: int, power: float = POWER, confidence: float = CONFIDENCE,
                  limit: int = PLAN_LIMIT) -> int | None:
    """About how many seeds would decide a comparison whose pilot seeds went `wins` / `losses` / `ties`
    with probability `power` (`expected_power`); None where the pilot shows no direction (as many losses
    as wins) or is too unsure of it for any count up to `limit` to get there."""
    return _plan(wins, losses, ties, power, confidence, limit)


def expected_power(n: int, wins: float, losses: float, ties: float, confidence: float = CONFIDENCE) -> float:
    """The rule's power at n seeds in the direction most of a pilot's untied seeds point, averaged over
    what the pilot says of the effect: the plan's prior (`_plan_prior`: P(higher) 0.6-0.9 either way, ties
    0-60%, on PLAN_HIGHER x PLAN_TIES) weighted by the pilot's likelihood, P(higher)^majority (1 - P(higher))^minority (1 - tie)^untied
    tie^ties. The part of the prior where the pilot's direction is wrong adds almost no power, so a pilot
    that cannot tell the direction expects little, whatever the count."""
    major, minor = max(wins, losses), min(wins, losses)
    higher, tie = _plan_prior()
    with np.errstate(divide="ignore"):  # no ties possible (a tie rate of 0) where the pilot has some: weight 0
        log_weight = (major * np.log(higher) + minor * np.log(1 - higher))[None, :] + (
            (major + minor) * np.log(1 - tie) + (ties * np.log(tie) if ties > 0 else 0.0))[:, None]
    weight = np.exp(log_weight - log_weight.max())
    return float(np.sum(weight * rule_power(n, higher, tie, confidence)) / weight.sum())


# What a seed plan assumes before it sees the pilot's seeds (`expected_power`): P(higher) among untied seeds
# one of PLAN_HIGHER, in either direction, and the tie rate one of PLAN_TIES, all alike. Over effects drawn
# so, the power the plan expects is the power it delivers on average, for every pilot it plans for (the
# law of total expectation); the coverage study checks it (`PLAN_DELIVERY`).
def _plan_prior() -> tuple[np.ndarray, np.ndarray]:
    """(P(higher) of the pilot's majority: winning in the first half, losing in the second; tie rates)."""
    higher = np.asarray(PLAN_HIGHER, float)
    return np.r_[higher, 1 - higher], np.asarray(PLAN_TIES, float)


def _plan(wins: float, losses: float, ties: float, target: float, confidence: float, limit: int) -> int | None:
    """The fewest seeds (from MIN_SEEDS) whose expected power reaches `target`: an exponential search for
    a bracket, then bisection (the expected power is an average over the prior, so it rises with n but for
    the binomial's small steps: the figure is "about"); None where even `limit` seeds do not."""
    if wins == losses or expected_power(limit, wins, losses, ties, confidence) < target:
        return None
    low, high = MIN_SEEDS - 1, MIN_SEEDS
    while expected_power(high, wins, losses, ties, confidence) < target:
        low, high = high, min(limit, 2 * high)
    while high - low > 1:
        middle = (low + high) // 2
        if expected_power(middle, wins, losses, ties, confidence) >= target:
            high = middle
        else:
            low = middle
    return high


def rule_power(n: int, higher, tie=0.0, confidence: float = CONFIDENCE):
    """The probability that the rule says ahead over n paired seeds when a seed ties with probability
    `tie` and an untied one is a win with probability `higher`: over m untied seeds ~ Binomial(n, 1 -
    tie), the chance of at least `critical_wins(m)` wins ~ Binomial(m, higher). Exact for every
    distribution of the differences. Scalars give a float; arrays the grid [tie, higher]."""
    scalar = np.ndim(higher) == 0 and np.ndim(tie) == 0
    higher, tie = np.atleast_1d(np.asarray(higher, float)), np.atleast_1d(np.asarray(tie, float))
    m = np.arange(n + 1)
    untied = scipy.stats.binom.pmf(m[None, :], n, 1 - tie[:, None])  # [tie, m]
    decides = scipy.stats.binom.sf(stats.critical_wins_upto(n, confidence)[:, None] - 1, m[:, None], higher[None, :])
    grid = untied @ decides  # [tie, higher]
    return float(grid[0, 0]) if scalar else grid


def sign_power(n: int, higher: float, confidence: float = CONFIDENCE) -> float:
    """The probability that the rule says ahead over n paired seeds without ties when each seed's
    difference is positive with probability `higher`: `rule_power` with no ties, a binomial tail."""
    return rule_power(n, higher, 0.0, confidence)


def t_test_power(n: int, effect: float, confidence: float = CONFIDENCE, paired: bool = True) -> float:
    """The probability that the two-sided t test at level 1 - `confidence` rejects a zero difference
    when the true one is `effect` standard deviations, with n seeds (per algorithm): noncentral t with
    n - 1 degrees of freedom and noncentrality sqrt(n) effect (paired), or 2 n - 2 and sqrt(n / 2)
    effect (unpaired, equal spreads). For comparison with the rule's own power (`sign_power`)."""
    dof, noncentral = (n - 1, math.sqrt(n) * effect) if paired else (2 * n - 2, math.sqrt(n / 2) * effect)
    critical = scipy.stats.t.ppf((1 + confidence) / 2, dof)
    return float(scipy.stats.nct.sf(critical, dof, noncentral) + scipy.stats.nct.cdf(-critical, dof, noncentral))


def planned_power(pilot_seeds: int, higher: float, tie: float = 0.0, power: float = POWER,
                  confidence: float = CONFIDENCE) -> dict:
    """What `planned_seeds` delivers, exactly: over every outcome (wins, losses, ties) of `pilot_seeds`
    pilot seeds drawn with P(tie) = `tie` and P(higher | untied) = `higher`, the share of pilots that get
    a figure, and the mean power the rule then has at that figure with the true `higher` and `tie` (0
    where the pilot points the wrong way)."""
    planned, delivered = 0.0, 0.0
    for ties in range(pilot_seeds + 1):
        for wins in range(pilot_seeds - ties + 1):
            losses = pilot_seeds - ties - wins
            chance = scipy.stats.multinomial.pmf([wins, losses, ties], pilot_seeds,
                                                 [(1 - tie) * higher, (1 - tie) * (1 - higher), tie])
            count = planned_seeds(wins, losses, ties, power, confidence)
            if count is not None and chance > 0:
                planned += chance
                delivered += chance * (rule_power(count, higher, tie, confidence) if wins > losses else 0.0)
    return dict(planned=planned, power=delivered / planned if planned else 0.0)
