"""Figures and tables from run directories written by `fedjax-rl train` (metrics.json)."""

from __future__ import annotations

import json
import math
import os

import matplotlib.pyplot as plt
import numpy as np


def load_run(run_dir: str) -> dict:
    path = os.path.join(run_dir, "metrics.json")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{run_dir} has no metrics.json (is it a finished `fedjax-rl train` run?)")
    with open(path) as f:
        metrics = json.load(f)
    with open(os.path.join(run_dir, "config.json")) as f:
        metrics["config"] = json.load(f)
    metrics["label"] = label(metrics["config"])
    return metrics


def label(config: dict) -> str:
    """The registry's name for the run's algorithm, with omega for the robust ones: 'FedRDQN (ω=0.2)'."""
    from fedjax_rl import agents

    if config["algo"] not in agents.ALGORITHMS:
        return config["algo"]
    return agents.get(config["algo"]).describe(config["agent"])


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
    """(values for `_band`, what its band spans: "episodes" or "seeds"). Runs written before
    per-episode returns were recorded have only the per-seed means."""
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
    """As `plot_runs`, for run records from `load_run` or `from_metrics`."""
    if smooth < 1:
        raise ValueError(f"smooth (moving-average window) must be >= 1, got {smooth}")
    env = runs[0]["config"]["env_name"]
    physics = ", ".join(runs[0]["config"]["physics"])
    os.makedirs(os.path.dirname(os.path.abspath(out_prefix)), exist_ok=True)

    fig, ax = plt.subplots(figsize=(6, 4))
    spans = set()
    for run in runs:
        values, span = band_values(run, "curve", "nominal_return")
        spans.add(span)
        _band(ax, run["curve"]["env_steps"][0], values, run["label"], smooth)
    ax.set(xlabel="environment steps per agent", ylabel="return (nominal env, greedy)",
           title=f"{env}: learning curve\n({band_description(spans)}, {smooth}-evaluation moving average)")
    ax.legend()
    fig.tight_layout()
    curve_path = f"{out_prefix}_curve.png"
    fig.savefig(curve_path, dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    spans = set()
    for run in runs:
        values, span = band_values(run, "final", "sweep_returns")
        spans.add(span)
        _band(ax, run["final"]["sweep_scales"][0], values, run["label"])
    ax.axvspan(1 - runs[0]["config"]["max_rate"], 1 + runs[0]["config"]["max_rate"], color="grey", alpha=0.1,
               label="training range")
    ax.set(xlabel=f"scale c of nominal {physics}", ylabel="return (greedy)",
           title=f"{env}: robustness sweep\n({band_description(spans)})")
    ax.legend()
    fig.tight_layout()
    sweep_path = f"{out_prefix}_sweep.png"
    fig.savefig(sweep_path, dpi=120)
    plt.close(fig)
    return [curve_path, sweep_path]


def comparison_table(run_dirs: list[str]) -> str:
    """Table-1 style: mean ± std over seeds of the Average and Minimum local-environment returns,
    then every robust run against every baseline run of the same task (`differences_table`)."""
    runs = [load_run(d) for d in run_dirs]
    differences = differences_table(runs)
    return results_table(runs) + (f"\n\n{differences}" if differences else "")


def results_table(runs: list[dict]) -> str:
    """As `comparison_table`, for run records from `load_run` or `from_metrics`."""
    rows = []
    for run in runs:
        avg = np.asarray(run["final"]["local_average"], float)
        mn = np.asarray(run["final"]["local_minimum"], float)
        nominal = np.asarray(run["curve"]["nominal_return"], float)[:, -1]
        cfg = run["config"]
        comm = run.get("communication")
        traffic = "n/a" if comm is None else f"{comm['rounds']} x {comm['participants_per_round']}/{cfg['num_agents']}: " \
                                             f"{comm['bytes_total'] / 2**20:.1f}"
        rows.append((
            f"{cfg['env_name']} ({', '.join(cfg['physics'])})", run["label"], len(avg),
            f"{avg.mean():.1f} ± {avg.std():.1f}", f"{mn.mean():.1f} ± {mn.std():.1f}",
            f"{nominal.mean():.1f} ± {nominal.std():.1f}", traffic,
        ))
    header = ("task", "algorithm", "seeds", "Average", "Minimum", "nominal (final)",
              "rounds x uploaders/K: traffic (MiB)")
    return _text_table(header, rows)


def _task(run: dict) -> tuple:
    return run["config"]["env_name"], tuple(run["config"]["physics"])


def _seeds_paired(a: dict, b: dict) -> bool:
    """Runs pair by seed index when they drew the same seed keys: `experiment.run`'s seed and
    number of seeds (recorded in config.json) are equal. In-memory runs record neither: unpaired."""
    keys = ("seed", "num_seeds")
    return all(k in a["config"] and k in b["config"] for k in keys) and all(
        a["config"][k] == b["config"][k] for k in keys)


def differences_table(runs: list[dict]) -> str:
    """Each robust run (omega > 0) minus each baseline run (omega = 0) of the same task: mean
    difference on Minimum and Average with a 95% bootstrap interval, paired by seed where the runs
    share their seed keys, P(robust > baseline), and the verdict on Minimum (`fedjax_rl.stats`).
    Empty when there is no such pair."""
    from fedjax_rl import stats

    robust = [r for r in runs if r["config"]["agent"].get("omega", 0.0) > 0]
    baselines = [r for r in runs if r["config"]["agent"].get("omega", 0.0) == 0]
    rows = []
    for rob in robust:
        for base in (b for b in baselines if _task(b) == _task(rob)):
            paired = _seeds_paired(rob, base)
            x = {name: np.asarray(rob["final"][f"local_{name}"], float) for name in ("minimum", "average")}
            y = {name: np.asarray(base["final"][f"local_{name}"], float) for name in ("minimum", "average")}
            minimum, average = (stats.difference(x[n], y[n], paired=paired) for n in ("minimum", "average"))
            p_min, p_avg = (stats.probability_of_improvement(x[n], y[n]) for n in ("minimum", "average"))
            m, n = len(x["minimum"]), len(y["minimum"])
            env, physics = _task(rob)
            rows.append((f"{env} ({', '.join(physics)})", f"{rob['label']} − {base['label']}",
                         f"{m} (paired)" if paired else f"{m} vs {n} (unpaired)", minimum.format(), average.format(),
                         f"{p_min:.2f} / {p_avg:.2f}", stats.verdict(minimum, min(m, n))))
    if not rows:
        return ""
    header = ("task", "difference", "seeds", "Minimum: mean [95% CI]", "Average: mean [95% CI]",
              "P(robust > baseline) Min / Avg", "verdict")
    note = (f"Robust minus baseline: the mean difference over seeds with a 95% percentile bootstrap interval "
            f"({stats.REPS:,} resamples, seed {stats.SEED}), P(robust > baseline) over all seed pairs (ties 1/2), and "
            f"the verdict on Minimum: ahead / behind when the interval excludes 0, else inconclusive (always with "
            f"fewer than {stats.MIN_SEEDS} seeds). See fedjax_rl/stats.py.")
    return _text_table(header, rows) + "\n" + note


def _text_table(header: tuple, rows: list[tuple]) -> str:
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    fmt = " | ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*header), "-+-".join("-" * w for w in widths)]
    lines += [fmt.format(*map(str, r)) for r in rows]
    return "\n".join(lines)


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
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    fig.savefig(out_path, dpi=110)
    plt.close(fig)
    return out_path
