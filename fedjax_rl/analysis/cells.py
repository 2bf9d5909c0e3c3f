"""How the tables (`fedjax_rl.reproduce`) and `fedjax-rl compare` (`fedjax_rl.analysis.plots`) print a
comparison's cells: its verdict, its seed plan and its share of wins. Here, below both, so that both
print them alike.
"""

from __future__ import annotations

import math

import numpy as np

from fedjax_rl.analysis.power import PLAN_LIMIT
from fedjax_rl.analysis.stats import AHEAD, BEHIND, EQUIVALENT, MIN_SEEDS, TOO_FEW, Interval


def verdict_cell(word: str, num_seeds: int, within_margin: bool = False) -> str:
    """A verdict as the tables print it: bold, with the seed count where too few decide anything, and
    'within the margin' where a direction was found but its size lies inside the margin (`margin_words`)."""
    return (f"**{word}**" + (f" ({num_seeds} < {MIN_SEEDS})" if word == TOO_FEW and num_seeds < MIN_SEEDS else "")
            + margin_words(word, within_margin))


def margin_words(word: str, within_margin: bool) -> str:
    """', within the margin' after a direction found whose size lies inside the margin; else nothing."""
    return ", within the margin" if within_margin and word in (AHEAD, BEHIND) else ""


def seeds_cell(line: dict) -> str:
    """About how many seeds an undecided comparison (a `comparison` line) needs (`seeds_for_power`), as
    the tables print it; '—' for a decided one."""
    if line["verdict"] in (AHEAD, BEHIND, EQUIVALENT):
        return "—"
    if line["seeds_for_power"] is not None:
        return f"about {line['seeds_for_power']}"
    return f"more than {PLAN_LIMIT:,}" if line["direction_seen"] else "no direction seen"


def share_cell(interval: Interval) -> str:
    """The share of wins among the untied seeds with its interval, as the tables print it; '—' where every
    seed tied."""
    if not np.isfinite(interval.estimate):
        return "—"
    return f"{interval.estimate:.2f} [{interval.low:.2f}, {interval.high:.2f}]"


def at_most(rate: float, digits: int = 1) -> str:
    """An upper bound as a percentage, rounded up at `digits` decimals (3.125% -> '3.2%', 4.904% ->
    '5.0%'): a figure quoted as "at most" must not print below the value it bounds. A hair of float
    noise above an exact figure (3.0000000001%) does not round it up."""
    scale = 10 ** digits
    return f"{math.ceil(round(100 * rate * scale, 6)) / scale:.{digits}f}%"


def plan_by_effect(by_higher: dict) -> str:
    """The seed plan's delivery per effect (`power.PLAN_DELIVERY["by_higher"]`) in words."""
    items = list(by_higher.items())
    return ", ".join(f"{v:.0%} at P(higher) {h:g}" if i == 0 else f"{v:.0%} at {h:g}" for i, (h, v) in enumerate(items))
