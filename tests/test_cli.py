"""The command line: bad settings stop before compiling; a tiny train -> compare -> plot round trip."""

import csv
import dataclasses
import json

import numpy as np
import pytest

from fedjax_rl import cli

TINY = ["--agents", "2", "--sync-every", "10", "--steps", "40", "--eval-every", "2", "--eval-episodes", "1",
        "--set", "hidden_sizes=8", "--set", "learning_starts=10", "--set", "train_freq=1",
        "--set", "gradient_steps=1", "--set", "batch_size=4", "--set", "buffer_size=20", "--no-progress"]


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--omega", "1.5"], r"omega must be in \[0, 1\), got 1.5"),
        (["--tau", "0.7"], r"tau must be in \(0, 0.5\), got 0.7"),
        (["--max-rate", "1"], r"p must be in \[0, 1\), got 1"),
        (["--env", "Pong-v0"], r"unknown environment 'Pong-v0'; allowed: CartPole-v1, Acrobot-v1"),
        (["--env", "Pendulum-v1", "--param", "m"], r"DQN needs discrete actions; Pendulum-v1 has Box actions"),
        (["--param", "colour"], r"unknown physical parameter 'colour' for CartPole-v1; allowed:"),
        (["--agents", "0"], r"num_agents \(K\) must be >= 1, got 0"),
        (["--sync-every", "0"], r"E\) must be >= 1, got 0"),
        (["--set", "batch_size=64", "--set", "buffer_size=32"], r"batch_size \(64\) must be <= buffer_size \(32\)"),
        (["--set", "colour=3"], r"unknown DQN settings \['colour'\]"),
        (["--seeds", "0"], r"--seeds must be >= 1"),
        (["--aggregation", "mode"], r"aggregation must be one of \['mean', 'median', 'trimmed_mean'\], got 'mode'"),
        (["--aggregation", "trimmed_mean", "--trim", "0.1"], r"trim must be in \[0.2, 0.5\) for aggregation"),
    ],
)
def test_bad_settings_exit_with_a_clear_message(argv, message, capsys, monkeypatch):
    import fedjax_rl.experiment as experiment

    def must_not_run(*args, **kwargs):
        raise AssertionError("training started despite a bad setting")

    monkeypatch.setattr(experiment, "run", must_not_run)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["train", *argv])
    assert exit_info.value.code != 0
    import re

    assert re.search(message, str(exit_info.value)), str(exit_info.value)


def test_aggregation_flags_come_from_their_declaration_and_reach_config_json():
    from fedjax_rl import experiment

    args = cli.build_parser().parse_args(["train", "--aggregation", "trimmed_mean", "--trim", "0.25"])
    config = cli.config_from_args(args)
    assert (config.aggregation, config.trim) == ("trimmed_mean", 0.25)
    recorded = experiment.config_to_dict(config)  # what config.json holds
    assert (recorded["aggregation"], recorded["trim"]) == ("trimmed_mean", 0.25)


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """One `fedjax-rl train` run (compiles are the expensive part; the algorithms' equivalence and
    differences are tested in test_dqn.py), with the TrainConfig it trained and its printed summary."""
    import contextlib
    import io

    import fedjax_rl.experiment as experiment

    out = tmp_path_factory.mktemp("runs") / "fedrdqn"
    seen = {}
    real_run = experiment.run

    def recording_run(config, **kwargs):
        seen["config"] = config
        return real_run(config, **kwargs)

    experiment.run = recording_run
    stdout = io.StringIO()
    try:
        with contextlib.redirect_stdout(stdout):
            assert cli.main(["train", "--algo", "fedrdqn", "--omega", "0.2", "--seeds", "2", "--out", str(out), *TINY]) == 0
    finally:
        experiment.run = real_run
    return out, seen["config"], stdout.getvalue()


def _config_from_json(data: dict, like):
    """Rebuild a TrainConfig (and its agent config) from config.json: JSON has lists where the
    dataclasses hold tuples. fedjax_rl has no such reader (resume compares the JSON dicts)."""
    def build(cls, values):
        fields = {f.name: f for f in dataclasses.fields(cls)}
        assert set(values) == set(fields), set(values) ^ set(fields)
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})

    data = dict(data)
    agent = build(type(like.agent), data.pop("agent"))
    return build(type(like), {**data, "agent": agent})


def _f32(values):
    return np.asarray(values, np.float32)


def test_written_files_hold_the_run(trained_run):
    out, config, stdout = trained_run
    # config.json: the run's TrainConfig, plus the seeds.
    written = json.loads((out / "config.json").read_text())
    assert (written.pop("num_seeds"), written.pop("seed")) == (2, 0)
    assert _config_from_json(written, config) == config
    assert (config.algo, config.agent.omega, config.num_agents, config.sync_every, config.agent.hidden_sizes) == (
        "fedrdqn", 0.2, 2, 10, (8,))

    metrics = json.loads((out / "metrics.json").read_text())
    curve, final = metrics["curve"], metrics["final"]
    assert _f32(curve["nominal_return"]).shape == (2, 2)  # seeds x evaluations
    np.testing.assert_array_equal(curve["env_steps"], [[20, 40], [20, 40]])
    np.testing.assert_array_equal(_f32(final["local_average"]), _f32(final["local_returns"]).mean(axis=1))
    np.testing.assert_array_equal(_f32(final["local_minimum"]), _f32(final["local_returns"]).min(axis=1))
    # Every evaluation episode's return, whose mean is the recorded return (the figures' band).
    episodes = config.eval_episodes
    assert _f32(curve["nominal_episode_returns"]).shape == (2, 2, episodes)
    np.testing.assert_array_equal(_f32(curve["nominal_episode_returns"]).mean(-1), _f32(curve["nominal_return"]))
    assert _f32(final["local_episode_returns"]).shape == (2, config.num_agents, episodes)
    np.testing.assert_array_equal(_f32(final["local_episode_returns"]).mean(-1), _f32(final["local_returns"]))
    assert _f32(final["sweep_episode_returns"]).shape == (2, config.sweep_points, episodes)
    np.testing.assert_array_equal(_f32(final["sweep_episode_returns"]).mean(-1), _f32(final["sweep_returns"]))

    # metrics.csv: one row per seed and evaluation, the [seeds, evaluations] curves (float32 round
    # trip); per-episode returns stay in metrics.json.
    with open(out / "metrics.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["seed", *sorted(k for k in curve if np.ndim(curve[k]) == 2)]
    assert [(int(r[0])) for r in rows[1:]] == [0, 0, 1, 1]
    for i, row in enumerate(rows[1:]):
        seed, block = divmod(i, 2)
        for name, text in zip(rows[0][1:], row[1:]):
            assert np.float32(float(text)) == np.float32(curve[name][seed][block]), (name, seed, block)

    # final.csv: one row per seed: local-env average, minimum, and the robustness sweep.
    with open(out / "final.csv", newline="") as f:
        rows = list(csv.reader(f))
    scales = final["sweep_scales"][0]
    assert rows[0] == ["seed", "local_average", "local_minimum", *[f"sweep_{c:.1f}" for c in scales]]
    assert len(rows) == 1 + 2
    for seed, row in enumerate(rows[1:]):
        expected = [final["local_average"][seed], final["local_minimum"][seed], *final["sweep_returns"][seed]]
        assert int(row[0]) == seed
        np.testing.assert_array_equal(_f32([float(x) for x in row[1:]]), _f32(expected))

    # The printed summary: seed means of the same numbers.
    average, minimum = np.mean(final["local_average"]), np.mean(final["local_minimum"])
    assert f"local-env average {average:.1f}, minimum {minimum:.1f} (mean over 2 seeds)" in stdout


def test_train_compare_plot_round_trip(trained_run, tmp_path, capsys):
    import matplotlib.image

    out, _, _ = trained_run
    runs = [str(out)]
    capsys.readouterr()
    assert cli.main(["compare", *runs]) == 0
    table = capsys.readouterr().out
    assert "FedRDQN (ω=0.2)" in table and "Average" in table and "Minimum" in table
    assert cli.main(["plot", *runs, "--out", str(tmp_path / "fig")]) == 0
    # Each figure shows the run's line: pixels in matplotlib's first line colour (C0, #1f77b4).
    # Measured: 926 (curve) and 1190 (sweep); the legend's line sample alone has 35.
    c0 = np.array([0x1F, 0x77, 0xB4]) / 255
    for name in ("fig_curve.png", "fig_sweep.png"):
        image = matplotlib.image.imread(tmp_path / name)[..., :3]
        line_pixels = np.sum(np.all(np.abs(image - c0) < 0.02, axis=-1))
        assert line_pixels > 300, (name, line_pixels)


def _fake_run(directory, algo, omega, minimum, average, seed=0):
    """A run directory as `fedjax-rl train` writes it, holding only what `compare` reads."""
    directory.mkdir(parents=True)
    config = dict(algo=algo, env_name="CartPole-v1", physics=["length"], num_agents=5, max_rate=0.5,
                  agent=dict(robust=algo == "fedrdqn", omega=omega), num_seeds=len(minimum), seed=seed)
    (directory / "config.json").write_text(json.dumps(config))
    metrics = dict(curve=dict(nominal_return=[[0.0]] * len(minimum)),
                   final=dict(local_minimum=list(minimum), local_average=list(average)))
    (directory / "metrics.json").write_text(json.dumps(metrics))
    return str(directory)


def test_compare_prints_paired_differences_with_intervals(tmp_path, capsys):
    # Per-seed Minimum differences (-3, 0, 6): mean +1, and at 95% the 27 resamples give the
    # whole range [-3, 6] (tests/test_stats.py works it out). Average differences (2, 2, 2): no spread.
    robust = _fake_run(tmp_path / "robust", "fedrdqn", 0.1, [97.0, 100.0, 116.0], [152.0, 162.0, 172.0])
    base = _fake_run(tmp_path / "base", "dqnavg", 0.0, [100.0, 100.0, 110.0], [150.0, 160.0, 170.0])
    other_seeds = _fake_run(tmp_path / "other", "dqnavg", 0.0, [100.0, 100.0, 110.0], [150.0, 160.0, 170.0], seed=1)
    capsys.readouterr()
    assert cli.main(["compare", robust, base, other_seeds]) == 0
    out = capsys.readouterr().out
    [paired, unpaired] = [line for line in out.splitlines() if "FedRDQN (ω=0.1) − DQNAvg" in line]
    cells = [c.strip() for c in paired.split("|")]
    # P(robust > baseline) on Minimum over all 9 seed pairs: 97 beats none, 100 ties two (1/2 each),
    # 116 beats all three: 4 / 9. On Average: 152 > 150, 162 > 150, 160, 172 > all: 6 / 9.
    assert cells[2:] == ["3 (paired)", "+1.0 [-3.0, +6.0]", "+2.0 [+2.0, +2.0]", "0.44 / 0.67", "inconclusive"]
    assert "3 vs 3 (unpaired)" in unpaired  # other seed keys: resampled independently, not paired
    # Only a run with omega > 0 is compared against a baseline: one run alone prints no differences.
    assert cli.main(["compare", base]) == 0
    assert "−" not in capsys.readouterr().out
