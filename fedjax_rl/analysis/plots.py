"""Figures and tables from run directories written by `fedjax-rl train` (metrics.json).

A run stopped by non-finite values has the evaluations it made and a "stopped" record: tables say
where and why it stopped, learning curves show it so far (labelled stopped), sweeps leave it out.
Every figure's text is kept inside the figure (titles wrapped to its width; tests check the bounding
boxes at the saved size)."""

from __future__ import annotations

import math
import os
import textwrap

import matplotlib.pyplot as plt
import numpy as np

from fedjax_rl.training import records
from fedjax_rl.training.checkpoint import DamagedFile
from fedjax_rl.training.run_directory import RunDirectory


def load_run(run_dir: str) -> dict:
    """A run directory's metrics.json and config.json, with its label and `source` (the directory).
    A missing file raises FileNotFoundError, a damaged one `DamagedFile` (a ValueError), each naming
    the file and what to do."""
    rerun = (f"rerun the `fedjax-rl train` command that wrote {run_dir} (same --out) to write it again from the "
             "run's checkpoint")
    try:
        metrics = RunDirectory.read_metrics(run_dir)
        metrics["config"] = RunDirectory.read_config(run_dir)
    except DamagedFile as error:
        raise DamagedFile(error.path, f"{error.reason}; {rerun}") from None
    metrics["label"] = label(metrics["config"])
    metrics["source"] = run_dir
    return metrics


def stopped_note(run: dict) -> str | None:
    """'stopped at block 1 of 3 (non-finite Q loss ...)' for a run that stopped early, else None."""
    stopped = run.get("stopped")
    if not stopped:
        return None
    return f"stopped at block {stopped['blocks_done']} of {stopped['num_blocks']}"


def _wrapped(text: str, fig, fontsize: float, share: float = 1.0) -> str:
    """`text` wrapped line by line to `share` of the figure's width: DejaVu Sans averages about
    0.6 em per character, so a line holds width / (0.62 x fontsize) characters."""
    chars = max(20, int(share * fig.get_figwidth() * 72 / (0.62 * fontsize)))
    return "\n".join(textwrap.fill(line, chars) for line in text.split("\n"))


def label(config: dict) -> str:
    """The registry's name for the run's algorithm, with omega for the robust ones: 'FedRDQN (ω=0.2)'."""
    from fedjax_rl import agents

    try:
        return agents.get(config["algo"]).describe(config["agent"])
    except ValueError:  # not registered here (a plugin not installed, or failing to load): its name
        return config["algo"]


def moving_average(values: np.ndarray, window: int) -> np.ndarray:
    """Trailing moving average along the last axis; the first points average what exists so far."""
    values = np.asarray(values, dtype=float)
    if window <= 1:
        return values
    cumsum = np.cumsum(values, axis=-1)
    lagged = np.zeros_like(cumsum)  # lagged[..., i] = cumsum[..., i - window], 0 before the window fills
    lagged[..., window:] = cumsum[..., :-window]
    counts = np.minimum(np.arange(1, values.shape[-1] + 1), window)
    return (cumsum - lagged) / counts


def _band(ax, x, values, name, smooth: int = 1):
    """The paper's style: the mean with a half-standard-deviation band, after smoothing each curve
    with a `smooth`-point moving average. values: [seeds, points, episodes] (the band spans every
    evaluation episode of every seed, the paper's) or [seeds, points] (per-seed means: the band spans
    seeds). The mean line is the same either way (every seed has as many episodes)."""
    values = np.asarray(values, dtype=float)
    if values.ndim == 3:
        values = np.moveaxis(values, -1, 1).reshape(-1, values.shape[1])  # [seeds * episodes, points]
    values = moving_average(values, smooth)
    mean, half_std = values.mean(0), 0.5 * values.std(0)
    ax.plot(x, mean, label=name)
    ax.fill_between(x, mean - half_std, mean + half_std, alpha=0.2)


# Per-seed means and, where the run recorded them, the returns of every evaluation episode.
EPISODE_RETURNS = {("curve", "nominal_return"): "nominal_episode_returns",
                   ("final", "sweep_returns"): "sweep_episode_returns"}


def band_values(run: dict, part: str, name: str) -> tuple[np.ndarray, str]:
    """(values for `_band`, what its band spans: "episodes" or "seeds"). A run that did not
    record per-episode returns has only the per-seed means."""
    episodes = run[part].get(EPISODE_RETURNS[(part, name)])
    if episodes is not None:
        return np.asarray(episodes, dtype=float), "episodes"
    return np.asarray(run[part][name], dtype=float), "seeds"


def band_description(spans: set[str], seeds: str = "seeds") -> str:
    """'mean ± ½ std over evaluation episodes (all seeds)', naming `seeds` ('reported seeds')."""
    if spans == {"seeds"}:
        return f"mean ± ½ std over {seeds}"
    text = f"mean ± ½ std over the evaluation episodes of all {seeds}"
    if "seeds" in spans:
        text += f"; runs without per-episode returns: over {seeds}"
    return text


def from_metrics(config, metrics: dict, name: str | None = None) -> dict:
    """A run record for `plot_results`/`results_table` from in-memory `train` output (seed-vmapped)
    and its `TrainConfig` (or config dict)."""
    import dataclasses

    config = dataclasses.asdict(config) if dataclasses.is_dataclass(config) else dict(config)
    run = {k: {n: np.asarray(v) for n, v in metrics[k].items()} for k in ("curve", "final")}
    run["config"] = config
    run["label"] = name or label(config)
    if "communication" in metrics:
        run["communication"] = metrics["communication"]
    return run


PAPER_SMOOTHING = 5  # evaluations in the learning curve's moving average


def plot_runs(run_dirs: list[str], out_prefix: str, smooth: int = PAPER_SMOOTHING) -> list[str]:
    """Learning curves (nominal env) and robustness sweeps, the mean with a ½-std band over the
    evaluation episodes of every seed (the paper's), curves smoothed by a `smooth`-evaluation moving
    average; returns PNG paths."""
    return plot_results([load_run(d) for d in run_dirs], out_prefix, smooth)


def plot_results(runs: list[dict], out_prefix: str, smooth: int = PAPER_SMOOTHING) -> list[str]:
    """As `plot_runs`, for run records from `load_run` or `from_metrics`. A stopped run's curve shows
    the evaluations it made; it has no sweep (no figure is written when no run has one)."""
    if smooth < 1:
        raise ValueError(f"smooth (moving-average window) must be >= 1, got {smooth}")
    env = runs[0]["config"]["env_name"]
    physics = ", ".join(runs[0]["config"]["physics"])
    os.makedirs(os.path.dirname(os.path.abspath(out_prefix)), exist_ok=True)

    fig, ax = plt.subplots(figsize=(6, 4))
    spans = set()
    for run in runs:
        if not np.size(run["curve"].get("env_steps", [])):
            continue  # stopped before its first evaluation
        values, span = band_values(run, "curve", "nominal_return")
        spans.add(span)
        note = stopped_note(run)
        _band(ax, run["curve"]["env_steps"][0], values, run["label"] + (f" ({note})" if note else ""), smooth)
    ax.set(xlabel="environment steps per agent", ylabel="return (nominal env, greedy)")
    _title(ax, f"{env}: learning curve",
           f"({band_description(spans or {'episodes'})}, {smooth}-evaluation moving average)")
    ax.legend(fontsize=8)
    paths = [_save(fig, f"{out_prefix}_curve.png")]

    finished = [run for run in runs if run["final"]]
    if not finished:
        return paths
    fig, ax = plt.subplots(figsize=(6, 4))
    spans = set()
    for run in finished:
        values, span = band_values(run, "final", "sweep_returns")
        spans.add(span)
        _band(ax, run["final"]["sweep_scales"][0], values, run["label"])
    ax.axvspan(1 - runs[0]["config"]["max_rate"], 1 + runs[0]["config"]["max_rate"], color="grey", alpha=0.1,
               label="training range")
    ax.set(xlabel=f"scale c of nominal {physics}", ylabel="return (greedy)")
    stopped = [run["label"] for run in runs if not run["final"]]
    _title(ax, f"{env}: robustness sweep",
           f"({band_description(spans)}{'; stopped, not shown: ' + ', '.join(stopped) if stopped else ''})")
    ax.legend(fontsize=8)
    paths.append(_save(fig, f"{out_prefix}_sweep.png"))
    return paths


def _title(ax, head: str, detail: str) -> None:
    """A title and a smaller subtitle, wrapped to the axes' figure width."""
    fig = ax.get_figure()
    ax.set_title(f"{head}\n{_wrapped(detail, fig, 9, share=0.9)}", fontsize=9.5)


def _save(fig, path: str, dpi: int = 120) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def comparison_table(run_dirs: list[str]) -> str:
    """Table-1 style: mean ± std over seeds of the Average and Minimum local-environment returns,
    one row per run directory (named in the first column), then every pair of runs on the same task
    and budget judged against each other (`differences_table`)."""
    runs = distinguish([load_run(d) for d in run_dirs])
    differences = differences_table(runs)
    return results_table(runs) + (f"\n\n{differences}" if differences else "")


def results_table(runs: list[dict]) -> str:
    """As `comparison_table`, for run records from `load_run` or `from_metrics`. Records with a
    `source` (the directory `load_run` read) are named by it in a first column."""
    def spread(values):
        values = np.asarray(values, float)
        return f"{values.mean():.1f} ± {values.std():.1f}"

    rows = []
    for run in runs:
        cfg = run["config"]
        comm = run.get("communication")
        traffic = "n/a" if comm is None else f"{comm['rounds']} x {comm['participants_per_round']}/{cfg['num_agents']}: " \
                                             f"{comm['bytes_total'] / 2**20:.1f}"
        nominal = np.asarray(run["curve"].get("nominal_return", []), float)
        last = spread(nominal[:, -1]) if nominal.size else "none"
        note = stopped_note(run)
        if note:
            average = minimum = note
            seeds = cfg.get("num_seeds", "?")
        else:
            average, minimum = spread(run["final"]["local_average"]), spread(run["final"]["local_minimum"])
            seeds = len(run["final"]["local_average"])
        rows.append((run.get("source", ""), f"{cfg['env_name']} ({', '.join(cfg['physics'])})", run["label"], seeds,
                     average, minimum, last, traffic))
    header = ("run", "task", "algorithm", "seeds", "Average", "Minimum", "nominal (final)",
              "rounds x uploaders/K: traffic (MiB)")
    if not any(r[0] for r in rows):
        header, rows = header[1:], [r[1:] for r in rows]
    table = _text_table(header, rows)
    reasons = [f"{run.get('source') or run['label']}: {run['stopped']['reason']}" for run in runs if stopped_note(run)]
    if reasons:
        table += "\n\nstopped runs (their evaluations so far are in the curves):\n" + "\n".join(reasons)
    return table


# What a run records that says nothing about the algorithm it ran: not shown where labels differ.
# A federation's per-agent physics (provenance's "agents" and "scales") are not shown: runs whose physics
# differ are not compared (`why_not_comparable`), and the reason names them.
_NOT_DISTINGUISHING = {"num_seeds", "first_seed", "tensorboard", "cpu_dots", "run_batch", "agents", "scales"}


def _flat(config: dict, prefix: str = "") -> dict:
    """A config record as {name: value}, the agent's settings and the provenance (`records.provenance`:
    runtime, physics) by their own names."""
    out = {}
    if "env_name" in config:
        config = {**config, "provenance": records.provenance(config)}
    for key, value in config.items():
        if isinstance(value, dict):
            out.update(_flat(value, "" if key in ("agent", "provenance") else f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = tuple(value) if isinstance(value, list) else value
    return out


def distinguish(runs: list[dict]) -> list[dict]:
    """The runs, each that shares its label with another labelled also by the settings that tell them
    apart: 'FedRDQN (ω=0.1) [aggregation=median]', 'DQNAvg [seed=1]'."""
    by_label: dict[str, list[dict]] = {}
    for run in runs:
        by_label.setdefault(run["label"], []).append(run)
    for same in (group for group in by_label.values() if len(group) > 1):
        flats = [_flat(run["config"]) for run in same]
        names = sorted({name for flat in flats for name in flat} - _NOT_DISTINGUISHING)
        differing = [n for n in names if len({repr(flat.get(n)) for flat in flats}) > 1]
        for run, flat in zip(same, flats):
            if differing:
                shown = ", ".join(f"{n}={_shown(flat.get(n))}" for n in differing)
                run["label"] = f"{run['label']} [{shown}]"
    return runs


def _shown(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _task(run: dict) -> tuple:
    return run["config"]["env_name"], tuple(run["config"]["physics"])


# What two runs must share to be compared: one task, one heterogeneity, one federation size and one
# training budget (their Average and Minimum are then over the same kind of environments).
COMPARABLE = {"env_name": "task", "physics": "perturbed parameters", "max_rate": "heterogeneity (max_rate)",
              "num_agents": "number of agents", "steps_per_agent": "budget (steps per agent)"}


def why_not_comparable(a: dict, b: dict) -> str | None:
    """Why runs `a` and `b` cannot be judged against each other ('budget (steps per agent): 50000 vs
    20000'), or None when they can."""
    reasons = []
    for key, what in COMPARABLE.items():
        x, y = a["config"].get(key), b["config"].get(key)
        if x is not None and y is not None and x != y:
            shown = [", ".join(v) if isinstance(v, list) else _shown(v) for v in (x, y)]
            reasons.append(f"{what}: {shown[0]} vs {shown[1]}")
    # Drawn physics are drawn alike (the seed's draw at max_rate, above); physics a federation's nodes set
    # are the same environments only where every agent's are the same.
    if not records.same_physics(records.provenance(a["config"]), records.provenance(b["config"])):
        reasons.append(f"physics: {records.physics_words(a['config'])} vs {records.physics_words(b['config'])}")
    return "; ".join(reasons) or None


def _seeds_paired(a: dict, b: dict) -> bool:
    """Runs pair by seed index when they drew the same seed keys: `loop.run`'s seed, first seed and
    number of seeds (recorded in config.json) are equal. In-memory runs record none: unpaired."""
    keys = ("seed", "num_seeds")
    if not all(k in a["config"] and k in b["config"] for k in keys):
        return False
    # A run that records no first seed started at seed index 0 (records.UNRECORDED_BEFORE).
    return all(a["config"][k] == b["config"][k] for k in keys) and (
        a["config"].get("first_seed", 0) == b["config"].get("first_seed", 0))


def _is_baseline(run: dict) -> bool:
    return run["config"]["agent"].get("omega", 0.0) == 0


def _pairs(runs: list[dict]) -> list[tuple[dict, dict]]:
    """(A, B) for every two runs, judged as A - B: a robust run (omega > 0) minus a baseline
    (omega = 0), otherwise the later run listed minus the earlier (the first is the reference)."""
    out = []
    for i, first in enumerate(runs):
        for later in runs[i + 1:]:
            flip = _is_baseline(later) and not _is_baseline(first)
            out.append((first, later) if flip else (later, first))
    return out


def differences_table(runs: list[dict]) -> str:
    """Every two runs of the same task and budget, A minus B (`_pairs`): the median difference on
    Minimum and Average with a 95% interval, paired by seed where the runs share their seed keys,
    P(A > B), the verdict on Minimum, and for an undecided one about how many seeds would decide it
    (`fedjax_rl.analysis.judge`, the tables' rule). Pairs that cannot be compared are listed with
    the reason. Empty when there are fewer than two finished runs; stopped runs are left out."""
    from fedjax_rl import envs
    from fedjax_rl.analysis import cells, judge, power, stats

    finished = [r for r in runs if r["final"]]  # a stopped run has no final evaluation
    rows, counts, refused = [], [], []
    for a, b in _pairs(finished):
        reason = why_not_comparable(a, b)
        if reason:
            refused.append(f"{a['label']} and {b['label']}: other {reason}")
            continue
        paired = _seeds_paired(a, b)
        x = {name: np.asarray(a["final"][f"local_{name}"], float) for name in ("minimum", "average")}
        y = {name: np.asarray(b["final"][f"local_{name}"], float) for name in ("minimum", "average")}
        env, physics = _task(a)
        listed = envs.known(env)  # Brax's tasks are not registered
        line = judge.comparison(x, y, ("minimum", "average"), paired=paired,
                                value_range=envs.return_range(env) if listed else None,
                                margin=judge.equivalence_margin(env) if listed else None)
        m, n = len(x["minimum"]), len(y["minimum"])
        counts.append(min(m, n))
        improvement = f"{line['minimum_improvement']:.2f} / {line['average_improvement']:.2f}"
        rows.append((f"{env} ({', '.join(physics)})", f"{a['label']} − {b['label']}",
                     f"{m} (paired)" if paired else f"{m} vs {n} (unpaired)", line["minimum"].format(),
                     line["average"].format(), improvement,
                     line["verdict"] + cells.margin_words(line["verdict"], line["within_margin"]),
                     cells.seeds_cell(line)))
    text = ""
    if rows:
        header = ("task", "difference A − B", "seeds", "Minimum: median [95% CI]", "Average: median [95% CI]",
                  "P(A > B) Min / Avg", "verdict", f"seeds for {power.POWER:.0%} power")
        text = _text_table(header, rows) + "\n" + DIFFERENCES_NOTE.format(
            min_seeds=stats.MIN_SEEDS, power=power.POWER, equivalence_level=stats.EQUIVALENCE_CONFIDENCE,
            rule_level=cells.at_most(max(stats.sign_level(n) for n in counts)),
            equivalence_rate=cells.at_most(max(stats.equivalence_level(n) for n in counts)),
            counts=", ".join(map(str, sorted(set(counts)))))
    if refused:
        text += ("\n\n" if text else "") + "not compared (a comparison needs one task, one budget and one kind of " \
                                            "physics):\n" + "\n".join(
            refused)
    return text


DIFFERENCES_NOTE = (
    "A − B: a robust run (omega > 0) minus a baseline (omega = 0), otherwise the later run listed minus the earlier. "
    "The median of the per-seed differences with its 95% order-statistic interval "
    "(unpaired: the Hodges-Lehmann shift with its Mann-Whitney interval), distribution-free, and P(A > B) over all "
    "seed pairs (ties 1/2). The verdict asks whether A does better on more seeds than it does worse, on Minimum: "
    "paired, ahead / behind when, of the seeds that are not equal, A is higher (lower) on "
    "more than a fair coin gives with probability 2.5% (the sign test with ties set aside; unpaired, when the "
    "shift's interval excludes 0); otherwise equivalent when, ties set aside as for the direction, the untied "
    "seeds' median difference has its {equivalence_level:.0%} interval strictly inside the task's margin "
    "(fedjax_rl.analysis.judge.equivalence_margin) with at least {min_seeds} seeds untied (unpaired: the shift's interval); "
    "too few seeds below {min_seeds} seeds; else inconclusive. Where winning and losing are equally likely it says "
    "ahead or behind in at most {rule_level} of cases at these seed counts ({counts}), whatever the ties "
    "(computed: stats.sign_level), and equivalent of a typical untied difference on the margin in at most "
    "{equivalence_rate} (stats.equivalence_level). "
    "Seeds for {power:.0%} power: for an undecided Minimum, about how many seeds would decide it that often. See "
    "fedjax_rl/analysis/stats.py.")


def _text_table(header: tuple, rows: list[tuple]) -> str:
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    fmt = " | ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*header), "-+-".join("-" * w for w in widths)]
    lines += [fmt.format(*map(str, r)) for r in rows]
    return "\n".join(lines)


def _interval_limits(estimates: np.ndarray, lows: np.ndarray, highs: np.ndarray) -> tuple[float, float]:
    """A panel's y range for estimates with intervals: 0, every estimate and every finite interval
    end, except that it reaches at most 3 times the estimates' spread (0 included) beyond them (the
    narrowest finite interval's width that is not 0 where the estimates are all 0, as medians of tied
    seeds are): few seeds give intervals hundreds of times wider than the differences, and the estimates
    must stay readable; padded by 8%."""
    core_low, core_high = min(0.0, np.min(estimates)), max(0.0, np.max(estimates))
    widths = (highs - lows)[np.isfinite(highs - lows) & (highs - lows > 0)]
    reach = 3.0 * ((core_high - core_low) or (float(np.min(widths)) if len(widths) else 1.0) or 1.0)
    ends = np.concatenate([lows, highs])
    ends = ends[np.isfinite(ends)]
    low = max(min(core_low, ends.min(initial=core_low)), core_low - reach)
    high = min(max(core_high, ends.max(initial=core_high)), core_high + reach)
    pad = 0.08 * (high - low or 1.0)
    return low - pad, high + pad


def interval_lines_figure(panels: list, out_path: str, xlabel: str, ylabel: str, title: str,
                          beyond_note: str = "") -> str:
    """Estimates with their intervals against x, one panel per (panel title, [(label, x, estimate,
    low, high, decided)]) (arrays over x), a dashed line at 0. The lines of a panel are dodged
    sideways a little so that their intervals do not hide each other. A decided point (its interval
    excludes 0) is filled, an undecided one hollow. The panel spans the estimates, 0 and the interval
    ends, but no further than `_interval_limits` allows; an interval end beyond it (at +-infinity with
    too few seeds, or far out on the side of one odd seed) is drawn to the panel's edge and marked
    with an arrowhead there, so that one wide interval does not flatten every estimate to a line.
    `beyond_note` (what the arrowheads mean) ends the title where the figure draws one."""
    beyond = False
    ncols = min(3, max(1, len(panels)))
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(max(8.0, 5.2 * ncols), 4.2 * nrows + 0.8), squeeze=False)
    for ax, (panel_title, lines) in zip(axes.flat, panels):
        ax.set_title(panel_title, fontsize=11)
        low, high = _interval_limits(*(np.concatenate([np.ravel(np.asarray(line[j], float)) for line in lines]
                                                      or [np.zeros(1)]) for j in (2, 3, 4)))
        xs = np.unique(np.concatenate([np.asarray(line[1], float) for line in lines])) if lines else np.zeros(1)
        step = np.min(np.diff(xs)) if len(xs) > 1 else 1.0
        for i, (name, x, estimate, lo, hi, decided) in enumerate(lines):
            x = np.asarray(x, float) + (i - (len(lines) - 1) / 2) * 0.12 * step
            lo, hi = np.clip(np.asarray(lo, float), low, high), np.clip(np.asarray(hi, float), low, high)
            color = f"C{i}"
            ax.plot(x, estimate, "-", color=color, lw=1.4, label=name)
            ax.vlines(x, lo, hi, color=color, lw=1.4)
            decided = np.asarray(decided, bool)
            ax.plot(x[decided], np.asarray(estimate)[decided], "o", color=color, ms=6)
            ax.plot(x[~decided], np.asarray(estimate)[~decided], "o", mfc="white", color=color, ms=6)
            ax.plot(x[lo <= low], lo[lo <= low], "v", color=color, ms=6)
            ax.plot(x[hi >= high], hi[hi >= high], "^", color=color, ms=6)
            beyond |= bool((lo <= low).any() or (hi >= high).any())
        ax.axhline(0.0, color="grey", ls="--", lw=1)
        ax.set(xlabel=xlabel, ylabel=ylabel, ylim=(low, high), xticks=xs)
        ax.tick_params(labelsize=9)
        # Below the panel: inside it, no corner is free of intervals that run to its edges.
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(_wrapped(title + (beyond_note if beyond else ""), fig, 11), fontsize=11)
    return _save(fig, out_path, dpi=110)


def grid_figure(panels: list, out_path: str, xlabel: str, ylabel: str, title: str, smooth: int = 1,
                shade: tuple[float, float] | None = None, ncols: int = 4) -> str:
    """The paper's multi-panel figures: one subplot per (panel title, [(label, x, values)]), values as
    `_band` takes them, each line the mean with a ½-std band after a `smooth`-point moving average; `shade`
    marks an x-range (the training range 1 ± p on robustness sweeps). An empty panel says "not run"."""
    nrows = max(1, math.ceil(len(panels) / ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(4 * ncols, 3.2 * nrows), squeeze=False)
    for ax, (panel_title, lines) in zip(axes.flat, panels):
        ax.set_title(panel_title, fontsize=10)
        if not lines:
            ax.text(0.5, 0.5, "not run", ha="center", va="center", transform=ax.transAxes, color="grey")
            ax.set(xticks=[], yticks=[])
            continue
        for name, x, values in lines:
            _band(ax, x, values, name, smooth)
        if shade is not None:
            ax.axvspan(*shade, color="grey", alpha=0.1, label="training range")
        ax.set(xlabel=xlabel, ylabel=ylabel)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(_wrapped(title, fig, 11), fontsize=11)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    fig.savefig(out_path, dpi=110)
    plt.close(fig)
    return out_path
