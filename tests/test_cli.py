"""The command line: bad settings stop before compiling; a tiny train -> compare -> plot round trip."""

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


def test_train_compare_plot_round_trip(tmp_path, capsys):
    # One training run (compiles are the expensive part); the algorithms' equivalence and
    # differences are tested in test_dqn.py.
    out = tmp_path / "fedrdqn"
    assert cli.main(["train", "--algo", "fedrdqn", "--omega", "0.2", "--seeds", "2", "--out", str(out), *TINY]) == 0
    runs = [str(out)]
    config = json.loads((out / "config.json").read_text())
    assert config["algo"] == "fedrdqn" and config["num_seeds"] == 2 and config["agent"]["hidden_sizes"] == [8]
    assert config["agent"]["omega"] == 0.2 and config["num_agents"] == 2 and config["sync_every"] == 10
    metrics = json.loads((out / "metrics.json").read_text())
    assert np.asarray(metrics["curve"]["nominal_return"]).shape == (2, 2)
    assert np.asarray(metrics["final"]["sweep_returns"]).shape == (2, 19)
    assert (out / "metrics.csv").read_text().count("\n") == 1 + 2 * 2  # header + seeds x evaluations
    capsys.readouterr()
    assert cli.main(["compare", *runs]) == 0
    table = capsys.readouterr().out
    assert "FedRDQN (ω=0.2)" in table and "Average" in table and "Minimum" in table
    assert cli.main(["plot", *runs, "--out", str(tmp_path / "fig")]) == 0
    for name in ("fig_curve.png", "fig_sweep.png"):
        assert (tmp_path / name).stat().st_size > 1000
