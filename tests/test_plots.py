"""The paper's plotting conventions: moving-average smoothing and a half-standard-deviation band."""

import matplotlib

matplotlib.use("Agg")

import os  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from fedjax_rl.analysis import plots  # noqa: E402


def test_moving_average_by_hand():
    x = np.array([[1.0, 2, 3, 4, 5, 6], [6.0, 0, 6, 0, 6, 0]])
    np.testing.assert_allclose(plots.moving_average(x, 3), [[1, 1.5, 2, 3, 4, 5], [6, 3, 4, 2, 4, 2]])
    np.testing.assert_array_equal(plots.moving_average(x, 1), x)
    np.testing.assert_allclose(plots.moving_average(x[:1], 10), [[1, 1.5, 2, 2.5, 3, 3.5]])


def test_band_is_mean_plus_minus_half_std_of_smoothed_seeds():
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    values = np.array([[0.0, 2.0, 4.0], [2.0, 6.0, 10.0]])  # two seeds
    plots._band(ax, np.arange(3), values, "run", smooth=2)
    smoothed = np.array([[0.0, 1.0, 3.0], [2.0, 4.0, 8.0]])
    np.testing.assert_allclose(ax.lines[0].get_ydata(), smoothed.mean(0))
    band = ax.collections[0].get_paths()[0].vertices[:, 1]
    half_std = 0.5 * smoothed.std(0)  # [0.5, 1.5, 2.5]
    for lo, hi in zip(smoothed.mean(0) - half_std, smoothed.mean(0) + half_std):
        assert np.any(np.isclose(band, lo)) and np.any(np.isclose(band, hi))
    plt.close(fig)


def test_band_over_evaluation_episodes_by_hand():
    """[seeds, points, episodes]: the band spans every episode of every seed (the paper's); the mean
    line is the mean of the per-seed means."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    # seed 0: episodes (0, 4) at point 0 and (2, 2) at point 1; seed 1: (1, 1) and (6, 10).
    values = np.array([[[0.0, 4.0], [2.0, 2.0]], [[1.0, 1.0], [6.0, 10.0]]])
    plots._band(ax, np.arange(2), values, "run")
    np.testing.assert_allclose(ax.lines[0].get_ydata(), [1.5, 5.0])  # = mean over seeds of (2, 1), (2, 8)
    band = ax.collections[0].get_paths()[0].vertices[:, 1]
    # population std of {0, 4, 1, 1} = 1.5, of {2, 2, 6, 10} = sqrt(11) (seed means alone: 0.5 and 3).
    for lo, hi in ((1.5 - 0.75, 1.5 + 0.75), (5 - 0.5 * np.sqrt(11), 5 + 0.5 * np.sqrt(11))):
        assert np.any(np.isclose(band, lo)) and np.any(np.isclose(band, hi))
    plt.close(fig)

    run = {"curve": {"nominal_return": values.mean(-1), "nominal_episode_returns": values}}
    chosen, span = plots.band_values(run, "curve", "nominal_return")
    assert span == "episodes" and chosen.shape == (2, 2, 2)
    del run["curve"]["nominal_episode_returns"]  # a run written before episodes were recorded
    assert plots.band_values(run, "curve", "nominal_return")[1] == "seeds"
    assert plots.band_description({"seeds"}) == "mean ± ½ std over seeds"
    assert "runs without per-episode returns: over seeds" in plots.band_description({"seeds", "episodes"})


def test_bad_smoothing_window_is_rejected():
    with pytest.raises(ValueError, match=r"smooth \(moving-average window\) must be >= 1, got 0"):
        plots.plot_results([], "unused", smooth=0)


def _text_outside(fig, dpi) -> list[str]:
    """The texts drawn at least partly outside `fig` when it is rendered at `dpi` (the saved size).
    Only texts the renderer draws count: a tick label beyond the axis limits exists but is not drawn."""
    from matplotlib.text import Text

    drawn, real_draw = [], Text.draw

    def recording_draw(text, renderer):
        drawn.append(text)
        return real_draw(text, renderer)

    fig.set_dpi(dpi)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Text, "draw", recording_draw)
        fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    width, height = fig.bbox.width, fig.bbox.height
    outside = []
    for text in drawn:
        if not (text.get_visible() and text.get_text().strip()):
            continue
        box = text.get_window_extent(renderer)
        if box.x0 < -0.5 or box.y0 < -0.5 or box.x1 > width + 0.5 or box.y1 > height + 0.5:
            outside.append(f"{text.get_text()!r}: x {box.x0:.0f}..{box.x1:.0f} of {width:.0f}, "
                           f"y {box.y0:.0f}..{box.y1:.0f} of {height:.0f}")
    assert len(drawn) > 10  # titles, labels, ticks and legends were all seen
    return outside


@pytest.fixture
def saved_figures(monkeypatch):
    """Every figure saved during the test, checked for text outside it at the dpi it is saved with."""
    from matplotlib.figure import Figure

    checked, real_savefig = [], Figure.savefig

    def savefig(fig, fname, *args, dpi=None, **kwargs):
        checked.append((os.path.basename(str(fname)), _text_outside(fig, dpi or fig.get_dpi())))
        return real_savefig(fig, fname, *args, dpi=dpi, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    return checked


def _run(label, env="HalfCheetah-v4", episodes=True, stopped=False, seeds=3, points=40):
    rng = np.random.default_rng(0)
    curve = {"env_steps": np.tile(np.arange(1, points + 1) * 50_000, (seeds, 1)),
             "nominal_return": rng.normal(size=(seeds, points)) * 1000}
    final = {"sweep_scales": np.tile(np.linspace(0.1, 1.9, 19), (seeds, 1)),
             "sweep_returns": rng.normal(size=(seeds, 19)) * 1000,
             "local_average": rng.normal(size=seeds), "local_minimum": rng.normal(size=seeds)}
    if episodes:
        curve["nominal_episode_returns"] = rng.normal(size=(seeds, points, 5)) * 1000
        final["sweep_episode_returns"] = rng.normal(size=(seeds, 19, 5)) * 1000
    run = {"curve": curve, "final": {} if stopped else final, "label": label,
           "config": {"env_name": env, "physics": ["front_foot", "front_shin"], "max_rate": 0.5, "num_agents": 5}}
    if stopped:
        run["stopped"] = {"reason": "non-finite Q loss", "blocks_done": points, "num_blocks": 3 * points}
    return run


def test_every_figures_text_lies_inside_it_at_the_saved_size(tmp_path, saved_figures):
    """The learning curve's subtitle once ran off both edges ('an ± ½ std ... moving'): the longest
    band description, long labels, a stopped run, two parameters, and the reproduce grids' titles."""
    from fedjax_rl.reproduce import tables

    runs = [_run("FedRDDPG (ω=0.05)"), _run("DDPGAvg(2)", episodes=False), _run("DDPGAvg(1)", stopped=True)]
    paths = plots.plot_results(runs, str(tmp_path / "fig"))
    assert [os.path.basename(p) for p in paths] == ["fig_curve.png", "fig_sweep.png"]
    band = plots.band_description({"episodes", "seeds"}, seeds="reported seeds")
    for table in tables.TABLES.values():
        panels = [(f"{env} ({param})", [(name, np.arange(20), np.ones((3, 20))) for name in ("A", "B (ω=0.1)")])
                  for env, param in [("HalfCheetah-v4", "front_foot")] * 7] + [("Ant-v4 (back_left_leg)", [])]
        plots.grid_figure(panels, str(tmp_path / f"{table.name}.png"), xlabel="environment steps per agent",
                          ylabel="return (nominal env)", smooth=5,
                          title=f"{table.title}: learning curves — REDUCED BUDGET\n({band}, 5-evaluation moving average)")
    # The tabular demo's figure (`fedjax-rl demo`), from made-up numbers of the real shapes.
    from types import SimpleNamespace

    from fedjax_rl.tabular import demo
    from fedjax_rl.tabular.mdp import DEFAULT_WIND

    gaps = SimpleNamespace(gaps=np.geomspace(10, 1e-3, 4000))
    rows = {name: {"omega": omega, "worst_case": 3.0, "per_agent": [4.0] * len(DEFAULT_WIND)}
            for name, omega in (("FedRQ", 0.35), ("QAvg", 0.0))}
    demo._plot(str(tmp_path / "tabular_demo.png"), {"FedRQ": gaps, "QAvg": gaps}, rows, 0.35, 0.9, 10, DEFAULT_WIND)
    assert len(saved_figures) == 3 + len(tables.TABLES)
    assert [(name, outside) for name, outside in saved_figures if outside] == []


def test_a_stopped_run_is_drawn_so_far_and_left_out_of_the_sweep(tmp_path):
    import matplotlib.pyplot as plt

    figures = []
    real_close = plt.close
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(plt, "close", lambda fig: figures.append(fig))
        paths = plots.plot_results([_run("FedRDQN", stopped=True, points=4)], str(tmp_path / "only_stopped"))
        assert [os.path.basename(p) for p in paths] == ["only_stopped_curve.png"]  # no run has a sweep
        plots.plot_results([_run("FedRDQN", points=4), _run("DQNAvg", stopped=True, points=4)], str(tmp_path / "f"))
    curve, _, sweep = figures
    assert [t.get_text() for t in curve.axes[0].get_legend().get_texts()] == ["FedRDQN (stopped at block 4 of 12)"]
    assert [t.get_text() for t in sweep.axes[0].get_legend().get_texts()] == ["FedRDQN", "training range"]
    assert "stopped, not shown: DQNAvg" in " ".join(sweep.axes[0].get_title().split())
    for fig in figures:
        real_close(fig)
