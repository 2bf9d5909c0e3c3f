"""The command line: bad settings stop before compiling; a tiny train -> compare -> plot round trip."""

import csv
import json

import numpy as np
import pytest

from fedjax_rl.cli import commands, reproduce_command
from fedjax_rl.training import records, run_directory
from fedjax_rl.agents import base

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
        (["--set", "colour=3"], r"unknown DQN settings \['colour'\] for --set; allowed: \[.*'omega'"),
        (["--set", "omega"], r"--set expects NAME=VALUE, got 'omega'"),
        (["--seeds", "0"], r"--seeds must be >= 1"),
        (["--aggregation", "mode"], r"aggregation must be one of \['krum', 'mean', 'median', 'trimmed_mean'\], got 'mode'"),
        (["--aggregation", "trimmed_mean", "--trim", "0.1"], r"trim must be in \[0.2, 0.5\) for aggregation"),
    ],
)
def test_bad_settings_exit_with_a_clear_message(argv, message, capsys, monkeypatch):
    from fedjax_rl.training import loop

    def must_not_run(*args, **kwargs):
        raise AssertionError("training started despite a bad setting")

    monkeypatch.setattr(loop, "run", must_not_run)
    with pytest.raises(SystemExit) as exit_info:
        commands.main(["train", *argv])
    assert exit_info.value.code != 0
    import re

    assert re.search(message, str(exit_info.value)), str(exit_info.value)


def test_aggregation_flags_come_from_their_declaration_and_reach_config_json():

    args = commands.build_parser().parse_args(["train", "--aggregation", "trimmed_mean", "--trim", "0.25"])
    config = commands.config_from_args(args)
    assert (config.aggregation, config.trim) == ("trimmed_mean", 0.25)
    recorded, _ = records.recorded_config(config, num_seeds=1, seed=0)  # what config.json holds
    assert (recorded["aggregation"], recorded["trim"]) == ("trimmed_mean", 0.25)


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """One `fedjax-rl train` run (compiles are the expensive part; the algorithms' equivalence and
    differences are tested in test_dqn.py), with the TrainConfig it trained and its printed summary."""
    import contextlib
    import io

    from fedjax_rl.training import loop

    out = tmp_path_factory.mktemp("runs") / "fedrdqn"
    seen = {}
    real_run = loop.run

    def recording_run(config, **kwargs):
        seen["config"] = config
        return real_run(config, **kwargs)

    loop.run = recording_run
    stdout = io.StringIO()
    try:
        with contextlib.redirect_stdout(stdout):
            assert commands.main(["train", "--algo", "fedrdqn", "--omega", "0.2", "--seeds", "2", "--out", str(out), *TINY]) == 0
    finally:
        loop.run = real_run
    return out, seen["config"], stdout.getvalue()


def _f32(values):
    return np.asarray(values, np.float32)


def test_written_files_hold_the_run(trained_run):
    out, config, stdout = trained_run
    # config.json: the run's TrainConfig, plus the seeds.
    written = json.loads((out / "config.json").read_text())
    assert records.config_from_record(written) == config  # read back through the one reader of records
    assert (written.pop("num_seeds"), written.pop("seed"), written.pop("first_seed")) == (2, 0, 0)
    assert written.pop("agent_revision") == base.REVISION  # how the agents act where no other setting says
    assert "revision" not in written["agent"]  # recorded once, as agent_revision
    assert (written.pop("run_batch"), written.pop("schema")) == (None, records.RUN_SCHEMA)  # one vmap
    assert (config.algo, config.agent.omega, config.num_agents, config.sync_every, config.agent.hidden_sizes) == (
        "fedrdqn", 0.2, 2, 10, (8,))

    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["cpu_dots"] == "ynnpack"  # DQN's matrix-product library on a CPU
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

    # TensorBoard's scalars: one point per evaluation block, the curve's mean over seeds in the run
    # directory and each seed's own under by_seed/seed_<n> (tests/test_tensorboard.py: every tag, grids,
    # a resumed run).
    from references import tensorboard_scalars as scalars

    for run_dir, values in [(out, np.mean(np.asarray(curve["nominal_return"], np.float64), axis=0)),
                            *[(out / "by_seed" / f"seed_{s}", curve["nominal_return"][s]) for s in range(2)]]:
        shown = scalars(str(run_dir))
        assert [step for step, _ in shown["eval/nominal_return"]] == [20, 40]
        np.testing.assert_array_equal([v for _, v in shown["eval/nominal_return"]], _f32(values))

    # The printed summary: seed means of the same numbers.
    average, minimum = np.mean(final["local_average"]), np.mean(final["local_minimum"])
    assert f"local-env average {average:.1f}, minimum {minimum:.1f} (mean over 2 seeds)" in stdout


def test_train_compare_plot_round_trip(trained_run, tmp_path, capsys):
    import matplotlib.image

    out, _, _ = trained_run
    runs = [str(out)]
    capsys.readouterr()
    assert commands.main(["compare", *runs]) == 0
    table = capsys.readouterr().out
    assert "FedRDQN (ω=0.2)" in table and "Average" in table and "Minimum" in table
    assert commands.main(["plot", *runs, "--out", str(tmp_path / "fig")]) == 0
    # Each figure shows the run's line: pixels in matplotlib's first line colour (C0, #1f77b4).
    # Measured: 926 (curve) and 1190 (sweep); the legend's line sample alone has 35.
    c0 = np.array([0x1F, 0x77, 0xB4]) / 255
    for name in ("fig_curve.png", "fig_sweep.png"):
        image = matplotlib.image.imread(tmp_path / name)[..., :3]
        line_pixels = np.sum(np.all(np.abs(image - c0) < 0.02, axis=-1))
        assert line_pixels > 300, (name, line_pixels)


def _fake_run(directory, algo, omega, minimum, average, seed=0, first_seed=None):
    """A run directory as `fedjax-rl train` writes it, holding only what `compare` reads (no first seed
    recorded unless `first_seed` is given, as a record older than pieces)."""
    directory.mkdir(parents=True)
    config = dict(algo=algo, env_name="CartPole-v1", physics=["length"], num_agents=5, max_rate=0.5,
                  agent=dict(robust=algo == "fedrdqn", omega=omega), num_seeds=len(minimum), seed=seed)
    if first_seed is not None:
        config["first_seed"] = first_seed
    (directory / "config.json").write_text(json.dumps(config))
    metrics = dict(curve=dict(nominal_return=[[0.0]] * len(minimum)),
                   final=dict(local_minimum=list(minimum), local_average=list(average)))
    (directory / "metrics.json").write_text(json.dumps(metrics))
    return str(directory)


def test_compare_prints_paired_differences_with_intervals(tmp_path, capsys):
    # Per-seed Minimum differences (-3, 0, 6): median 0. Three seeds are fewer than any verdict needs:
    # no order-statistic interval of 3 values covers a median 95% of the time (2 (1/2)^3 = 25%), so the
    # interval is unbounded, and cut to the +-500 that CartPole's returns in [0, 500] allow
    # (envs.return_range). One seed higher, one lower: the signs show no direction to plan seeds for.
    # Average differences (2, 2, 2): median 2, the interval unbounded too.
    robust = _fake_run(tmp_path / "robust", "fedrdqn", 0.1, [97.0, 100.0, 116.0], [152.0, 162.0, 172.0])
    base = _fake_run(tmp_path / "base", "dqnavg", 0.0, [100.0, 100.0, 110.0], [150.0, 160.0, 170.0])
    other_seeds = _fake_run(tmp_path / "other", "dqnavg", 0.0, [100.0, 100.0, 110.0], [150.0, 160.0, 170.0], seed=1)
    # A run that records its first seed (0) pairs with one that records none: both started at index 0.
    config = json.loads((tmp_path / "robust" / "config.json").read_text())
    (tmp_path / "robust" / "config.json").write_text(json.dumps({**config, "first_seed": 0}))
    capsys.readouterr()
    assert commands.main(["compare", robust, base, other_seeds]) == 0
    out = capsys.readouterr().out
    [paired, unpaired] = [line for line in out.splitlines() if "FedRDQN (ω=0.1) − DQNAvg" in line]
    cells = [c.strip() for c in paired.split("|")]
    # P(robust > baseline) on Minimum over all 9 seed pairs: 97 beats none, 100 ties two (1/2 each),
    # 116 beats all three: 4 / 9. On Average: 152 > 150, 162 > 150, 160, 172 > all: 6 / 9.
    assert cells[2:] == ["3 (paired)", "+0.0 [-500.0, +500.0]", "+2.0 [-500.0, +500.0]", "0.44 / 0.67", "too few seeds",
                         "no direction seen"]
    # Other seed keys: the Hodges-Lehmann shift, the median of the 9 differences x_i - y_j. 3 against 3
    # seeds have no 95% Mann-Whitney interval (P(U = 0) = 1/20 > 2.5%) but a 90% one (1/20 <= 5%), from
    # the smallest to the largest difference, [-13, +16]: inside CartPole's margin of +-22.6, equivalent.
    assert "3 vs 3 (unpaired)" in unpaired and "| equivalent " in unpaired
    assert "too few seeds below 6 seeds" in out and "seeds for 80% power" in out
    # The two DQNAvg runs differ in their seed keys alone: labelled by it, and judged too (the later
    # listed minus the earlier), unpaired.
    assert "DQNAvg [seed=1] − DQNAvg [seed=0] | 3 vs 3 (unpaired)" in out
    # One run alone prints no differences.
    assert commands.main(["compare", base]) == 0
    assert "−" not in capsys.readouterr().out


def test_compare_pairs_seeds_only_where_the_runs_start_at_the_same_seed_index(tmp_path, capsys):
    """Runs pair seed by seed only where they drew the same seed keys: one `seed` and `num_seeds`, but
    seed indices 3-5 (first_seed 3) against 0-2 are other keys, so `compare` judges them unpaired; a
    record without a first seed started at index 0, so it is unpaired with indices 3-5 too. Two runs
    of indices 3-5 pair."""
    minimum, average = [100.0, 104.0, 108.0, 112.0, 116.0, 120.0], [150.0, 151.0, 152.0, 153.0, 154.0, 155.0]
    later = _fake_run(tmp_path / "robust_3", "fedrdqn", 0.1, minimum, average, first_seed=3)
    runs = {first: _fake_run(tmp_path / f"base_{first}", "dqnavg", 0.0, [m - 5.0 for m in minimum], average,
                             first_seed=first) for first in (0, 3, None)}
    for first, paired in ((0, False), (None, False), (3, True)):
        capsys.readouterr()
        assert commands.main(["compare", later, runs[first]]) == 0
        [line] = [line for line in capsys.readouterr().out.splitlines() if "FedRDQN (ω=0.1) − DQNAvg" in line]
        seeds = [c.strip() for c in line.split("|")][2]
        assert seeds == ("6 (paired)" if paired else "6 vs 6 (unpaired)"), (first, line)


def test_compare_judges_any_two_runs_and_says_why_it_does_not(tmp_path, capsys):
    """Two robust runs that differ in one setting are told apart by it and judged, the later listed
    minus the earlier; runs of another task or budget are not compared, and the table says why."""
    median = _fake_run(tmp_path / "median", "fedrdqn", 0.1, [100.0 + s for s in range(6)], [0.0] * 6)
    mean = _fake_run(tmp_path / "mean", "fedrdqn", 0.1, [90.0 + s for s in range(6)], [0.0] * 6)
    for directory, aggregation in ((median, "median"), (mean, "mean")):
        config = json.loads((tmp_path / directory / "config.json").read_text())
        (tmp_path / directory / "config.json").write_text(json.dumps({**config, "aggregation": aggregation}))
    shorter = _fake_run(tmp_path / "shorter", "dqnavg", 0.0, [100.0] * 6, [0.0] * 6)
    config = json.loads((tmp_path / "shorter" / "config.json").read_text())
    (tmp_path / "shorter" / "config.json").write_text(json.dumps({**config, "physics": ["masscart"]}))
    capsys.readouterr()
    assert commands.main(["compare", median, mean, shorter]) == 0
    out = capsys.readouterr().out
    # Lower on all 6 paired seeds by 10: the sign test's one-sided p = (1/2)^6 = 0.016 <= 2.5% says
    # behind, by less than CartPole's margin of +-22.6.
    [line] = [line for line in out.splitlines() if line.startswith("CartPole-v1 (length) |")]
    assert "FedRDQN (ω=0.1) [aggregation=mean] − FedRDQN (ω=0.1) [aggregation=median] | 6 (paired)" in line
    assert "| -10.0 [-10.0, -10.0] " in line and "| behind, within the margin " in line, line
    assert "not compared (a comparison needs one task, one budget and one kind of physics):" in out
    assert ("DQNAvg and FedRDQN (ω=0.1) [aggregation=median]: other perturbed parameters: masscart vs length" in out
            or "FedRDQN (ω=0.1) [aggregation=median] and DQNAvg: other perturbed parameters: length vs masscart" in out)


def test_compare_pairs_only_runs_that_both_record_their_seed_keys(tmp_path):
    """Runs pair by seed only where both record their seed keys (in-memory runs, `plots.from_metrics`,
    record none: unpaired, whichever side lacks them); a run whose agent records no omega is a baseline,
    so it is B; the runs not compared follow the table after a blank line, or stand alone."""
    from fedjax_rl.analysis import plots

    minimum = [100.0 + s for s in range(6)]

    def run(label, agent, **recorded):
        config = dict(algo=label, env_name="CartPole-v1", physics=["length"], num_agents=5, max_rate=0.5,
                      agent=agent, **recorded)
        return dict(label=label, config=config, final=dict(local_minimum=minimum, local_average=minimum))

    keys = dict(seed=0, num_seeds=6)
    for a, b in ((keys, keys), ({}, {}), (keys, {}), ({}, keys), (dict(seed=0), keys)):
        table = plots.differences_table([run("A", dict(omega=0.1), **a), run("B", dict(omega=0.0), **b)])
        [line] = [line for line in table.splitlines() if line.startswith("CartPole-v1 (length) | A − B")]
        assert ("| 6 (paired) |" if a == b == keys else "| 6 vs 6 (unpaired) |") in line, (a, b, line)
    # Listed after the robust run, a run whose agent has no omega is its baseline: A − B, not the later minus the earlier.
    table = plots.differences_table([run("A", dict(omega=0.1), **keys), run("B", {}, **keys)])
    assert [line.split(" | ")[1].strip() for line in table.splitlines() if line.startswith("CartPole-v1")] == ["A − B"]

    other = run("C", dict(omega=0.0), **keys)
    other["config"]["physics"] = ["masscart"]
    both = plots.differences_table([run("A", dict(omega=0.1), **keys), run("B", dict(omega=0.0), **keys), other])
    assert "fedjax_rl/analysis/stats.py.\n\nnot compared (a comparison needs" in both
    alone = plots.differences_table([run("A", dict(omega=0.1), **keys), other])
    assert alone.startswith("not compared (a comparison needs") and "A and C: other perturbed parameters" in alone


# -- a finished run is never lost; damaged files; messages instead of tracebacks (issue 29) ---------


def _hashes(directory) -> dict:
    """sha256 of every file under `directory`, by relative path."""
    import hashlib
    from pathlib import Path

    root = Path(directory)
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def run_copy(trained_run, tmp_path):
    """A copy of the module's finished run (omega 0.2, 2 seeds), free to damage."""
    import shutil

    out, _, _ = trained_run
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    return copy


def _forbid_compiling(monkeypatch) -> None:
    from fedjax_rl.training import loop

    def no_program(*args, **kwargs):
        raise AssertionError("a program was built for a run that should not compute anything")

    monkeypatch.setattr(loop, "over_runs", no_program)


@pytest.fixture
def nothing_compiles(monkeypatch):
    _forbid_compiling(monkeypatch)


SAME = ["--omega", "0.2", "--seeds", "2", *TINY]  # the fixture's command, without --out


@pytest.mark.parametrize(
    "argv,message",
    [
        # Another setting on a finished run: refused, every difference by its full name with both values.
        (lambda run: ["train", "--out", run, *SAME, "--omega", "0.1"],
         r"fedjax-rl: error: \S+/run holds a run of other settings:\n  agent\.omega: 0\.2 -> 0\.1\n"
         r"Nothing was changed\. To keep both, choose another directory \(e\.g\. --out \S+/run-2\), or pass "
         r"--new-run"),
        (lambda run: ["train", "--out", run, *SAME, "--seeds", "3", "--steps", "60", "--set", "hidden_sizes=8,8"],
         r"  agent\.hidden_sizes: \[8\] -> \[8, 8\]\n  num_seeds: 2 -> 3\n  steps_per_agent: 40 -> 60\n"),
        # --out that is a file, or that cannot be created.
        (lambda run: ["train", "--out", f"{run}/final.csv", *SAME],
         r"fedjax-rl: error: out_dir \S+/final\.csv is an existing file, not a directory"),
        (lambda run: ["train", "--out", f"{run}/final.csv/sub", *SAME],
         r"fedjax-rl: error: out_dir \S+/sub cannot be created: \S+/final\.csv is a file"),
        # A run that cannot fit in memory, with the numbers, before anything compiles.
        (lambda run: ["train", "--out", f"{run}-big", *SAME, "--agents", "10000000"],
         r"fedjax-rl: error: this run needs about [\d.]+ GiB but only [\d.]+ GiB are available \(available RAM\)\. "
         r"Counted: the training state of 2 run\(s\) x 10000000 agents = [\d.]+ GiB \(replay buffers [\d.]+, "
         r"networks [\d.]+, optimizer states [\d.]+, environments and keys [\d.]+ GiB\), 2 copies"),
        # Damaged outputs: compare and plot name the file and say what to do.
        (lambda run: ["compare", run, "--damage", "metrics.json"],
         r"fedjax-rl: error: \S+/run/metrics\.json is damaged \(JSONDecodeError: .*\); rerun the `fedjax-rl "
         r"train` command that wrote \S+/run \(same --out\) to write it again"),
        (lambda run: ["plot", run, "--out", f"{run}/fig", "--damage", "config.json"],
         r"fedjax-rl: error: \S+/run/config\.json is damaged \(empty file; rerun the `fedjax-rl train`"),
    ],
    ids=["other omega", "three other settings", "out is a file", "out under a file", "memory", "compare damaged",
         "plot damaged"],
)
def test_bad_inputs_stop_with_a_message_and_change_no_finished_file(run_copy, nothing_compiles, argv, message):
    import re

    argv = argv(str(run_copy))
    if "--damage" in argv:  # truncate metrics.json to half; empty config.json
        name = argv.pop(argv.index("--damage") + 1)
        argv.remove("--damage")
        path = run_copy / name
        path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2] if name == "metrics.json" else b"")
    before = _hashes(run_copy)
    with pytest.raises(SystemExit) as exit_info:
        commands.main(argv)
    assert re.search(message, str(exit_info.value)), str(exit_info.value)
    assert _hashes(run_copy) == before
    assert not (run_copy.parent / "run-big").exists()


def test_no_tensorboard_reads_back_the_finished_run(run_copy, nothing_compiles):
    """`--no-tensorboard` is not part of a run's identity: the same command with it reads the finished
    run back (nothing compiles) and changes no file."""
    before = _hashes(run_copy)
    assert commands.main(["train", "--out", str(run_copy), *SAME, "--no-tensorboard"]) == 0
    assert _hashes(run_copy) == before
    args = commands.build_parser().parse_args(["train", "--no-tensorboard"])
    assert commands.config_from_args(args).tensorboard is False


def test_a_finished_run_is_set_aside_on_request_and_comes_back(run_copy, trained_run, capsys):
    """`--new-run` moves the finished omega 0.2 run, whole and unchanged, to set_aside/1 and trains
    omega 0.1 (a vmapped leaf: the same compiled program). The original command then moves it back
    and reads it back without computing, and the 0.1 run goes to set_aside/2: nothing overwritten."""
    original = _hashes(run_copy)
    with pytest.warns(UserWarning, match=r"held a run of other settings \(agent\.omega: 0\.2 -> 0\.1\): moved to "
                                         r"\S+/set_aside/1"):
        assert commands.main(["train", "--out", str(run_copy), *SAME, "--omega", "0.1", "--new-run"]) == 0
    assert _hashes(run_copy / "set_aside" / "1") == original
    assert json.loads((run_copy / "config.json").read_text())["agent"]["omega"] == 0.1
    omega_01 = _hashes(run_copy)

    with pytest.warns(UserWarning) as warned:
        assert commands.main(["train", "--out", str(run_copy), *SAME]) == 0
    assert [str(w.message).replace(str(run_copy), "RUN") for w in warned] == [
        "RUN held a run of other settings (agent.omega: 0.1 -> 0.2): moved to RUN/set_aside/2",
        "RUN/set_aside/1 held a run of these settings: moved back into RUN to resume it"]
    assert _hashes(run_copy / "set_aside" / "2") == {k: v for k, v in omega_01.items() if not k.startswith("set_aside")}
    assert {k: v for k, v in _hashes(run_copy).items() if not k.startswith("set_aside")} == original
    assert not (run_copy / "set_aside" / "1").exists()
    _, _, printed = trained_run
    assert printed.splitlines()[0] in capsys.readouterr().out  # the same summary, read back


@pytest.mark.parametrize(
    "name,damage,consequence,recomputes",
    [
        ("metrics.json", lambda b: b[: len(b) // 2], "evaluating the run again from its checkpoint", "final"),
        ("finished.json", lambda b: b"", "the run's outputs are written again", "final"),
        ("config.json", lambda b: b"{\x00\x00", "the run's settings are read from its other files", None),
        ("checkpoint.npz", lambda b: b[: len(b) // 3], "training starts again from block 0", "everything"),
    ],
    ids=["metrics truncated", "finished empty", "config garbage", "checkpoint truncated"],
)
def test_a_damaged_file_is_named_set_aside_and_the_run_goes_on(run_copy, trained_run, monkeypatch, name, damage,
                                                                consequence, recomputes):
    """Each damaged file is named, kept byte for byte as NAME.damaged.1.EXT, and the rerun ends with
    the same results as the undamaged run: read back (config.json), evaluated again from the
    checkpoint (metrics.json, finished.json), or trained again from block 0 (a damaged checkpoint of
    a run that has not finished: its outputs removed first)."""
    if name == "checkpoint.npz":  # an unfinished run: its outputs are not written yet
        for output in ("finished.json", "metrics.json", "metrics.csv", "final.csv", "global_params.npz"):
            (run_copy / output).unlink()
    path = run_copy / name
    damaged = damage(path.read_bytes())
    path.write_bytes(damaged)
    others = {k: v for k, v in _hashes(run_copy).items() if k != name}
    if recomputes is None:
        _forbid_compiling(monkeypatch)
    expected = json.loads((trained_run[0] / "metrics.json").read_text())
    stem, ext = name.rsplit(".", 1)
    with pytest.warns(UserWarning, match=rf"{path} is damaged \(.*\): set aside as {run_copy}/{stem}\.damaged\.1\."
                                         rf"{ext}; {consequence}\. Delete .* once you have looked at it"):
        assert commands.main(["train", "--out", str(run_copy), *SAME]) == 0
    assert (run_copy / f"{stem}.damaged.1.{ext}").read_bytes() == damaged
    written = json.loads((run_copy / "metrics.json").read_text())
    for part in ("curve", "final"):
        assert written[part] == expected[part]
    if recomputes is None:  # read back: every other file as it was, config.json written again
        assert {k: v for k, v in _hashes(run_copy).items() if k not in (name, f"{stem}.damaged.1.{ext}")} == others
    else:
        assert written["timing"]["resumed_at_block"] == {"final": 2, "everything": 0}[recomputes]
    if recomputes == "everything":  # trained again: TensorBoard shows the new points only, once each
        from references import tensorboard_raw_steps as raw_steps
        from references import tensorboard_scalars as scalars

        assert [step for step, _ in scalars(str(run_copy))["eval/nominal_return"]] == [20, 40]
        assert raw_steps(str(run_copy), "eval/nominal_return") == [20, 40, 20, 40]
    assert run_directory.RunDirectory(str(run_copy), json.loads((run_copy / "config.json").read_text())).progress(2)[
        "state"] == "finished"


def test_ctrl_c_says_how_to_resume_and_the_rerun_resumes(trained_run, tmp_path, monkeypatch, capsys):
    """Ctrl-C right after block 1's checkpoint: "stopped at block 1 of 2", a readable checkpoint, and the
    same command resumes ("resuming from block 1 of 2") to the fixture's numbers, bit for bit."""
    from fedjax_rl.training import checkpoint

    out = tmp_path / "interrupted"
    real_save = checkpoint.save

    def save_then_ctrl_c(path, tree, **extra):
        real_save(path, tree, **extra)
        raise KeyboardInterrupt

    monkeypatch.setattr(checkpoint, "save", save_then_ctrl_c)
    assert commands.main(["train", "--out", str(out), *SAME]) == 130
    stderr = capsys.readouterr().err
    assert f"fedjax-rl: stopped at block 1 of 2: 1 block(s) saved in {out}; rerun the same command to resume" in stderr
    assert "Traceback" not in stderr
    monkeypatch.setattr(checkpoint, "save", real_save)
    assert int(checkpoint.read_extras(str(out / "checkpoint.npz"), ("blocks_done",))["blocks_done"]) == 1

    assert commands.main(["train", "--out", str(out), *[a for a in SAME if a != "--no-progress"]]) == 0
    printed = capsys.readouterr().out
    assert f"resuming from block 1 of 2 ({out}/checkpoint.npz)" in printed
    assert "compiling the training program" in printed and "final evaluation: " in printed
    expected = json.loads((trained_run[0] / "metrics.json").read_text())
    written = json.loads((out / "metrics.json").read_text())
    assert all(written[part] == expected[part] for part in ("curve", "final"))


def test_train_without_out_says_nothing_is_saved(monkeypatch, capsys):
    from fedjax_rl.training import loop

    monkeypatch.setattr(loop, "run", lambda *a, **k: {"final": {"local_average": np.zeros(1),
                                                                      "local_minimum": np.zeros(1)}})
    assert commands.main(["train", *SAME]) == 0
    assert "no --out: results are printed only, nothing is saved" in capsys.readouterr().out


HELP_COMMANDS = [[], ["train"], ["plot"], ["compare"], ["render"], ["demo"], ["reproduce"], ["plugins"]]


def test_help_imports_no_jax_and_answers_at_once():
    """`--help` of every command in a fresh interpreter: no JAX, numpy, matplotlib or environment import
    (those took the help to 3-6 s). The time is printed, not asserted: the machine is shared."""
    import subprocess
    import sys

    heavy = ("jax", "numpy", "matplotlib", "gymnax", "flax", "mujoco", "flwr")
    script = ("import sys, time; t = time.perf_counter(); from fedjax_rl.cli import commands\n"
              "try:\n    commands.main(sys.argv[1:] + ['--help'])\nexcept SystemExit:\n    pass\n"
              f"print('HEAVY', sorted(m for m in {heavy!r} if m in sys.modules), time.perf_counter() - t)")
    for command in HELP_COMMANDS:
        done = subprocess.run([sys.executable, "-c", script, *command], capture_output=True, text=True, check=True)
        last = done.stdout.strip().splitlines()[-1]
        print(command, last)
        assert last.startswith("HEAVY [] "), (command, last, done.stderr[-2000:])
        assert "usage: fedjax-rl" in done.stdout


def test_every_flag_has_help_with_its_default_and_choices():
    from fedjax_rl import agents, envs

    parser = commands.build_parser()
    subcommands = {name: sub for action in parser._actions if isinstance(action, type(parser._subparsers._actions[-1]))
                for name, sub in action.choices.items()}
    assert sorted(subcommands) == ["compare", "demo", "plot", "plugins", "render", "reproduce", "status", "train"]
    for name, sub in subcommands.items():
        for action in sub._actions:
            if action.dest == "help":
                continue
            assert action.help, (name, action.option_strings or action.dest)
            is_switch = action.nargs == 0
            if action.option_strings and not is_switch:
                assert "(default" in action.help or action.choices, (name, action.option_strings, action.help)
    train = {a.dest: a for a in subcommands["train"]._actions}
    assert list(train["algo"].choices) == list(agents.names())
    for env in envs.built_in():
        assert env in train["env_name"].help
        assert f"{env}: {', '.join(envs.get(env).perturbed)} (the paper's)" in train["physics"].help
    assert "0.1 for fedrdqn, fedrddpg" in train["omega"].help
    for flag in ("seeds", "seed", "out", "no_progress", "new_run", "set"):
        assert train[flag].help


def test_the_flag_table_is_current():
    """fedjax_rl/cli/flags.py holds what the settings declarations say (regenerate: `make cli-flags`)."""
    from fedjax_rl.cli import flag_table, flags

    assert flags.TABLE == flag_table.flag_table(), "fedjax_rl/cli/flags.py is out of date: run `make cli-flags`"


def test_a_run_that_never_trains_is_warned_about_before_compiling():
    from fedjax_rl.training import loop
    from fedjax_rl.training import configs

    def config(steps, learning_starts, train_freq=1):
        return configs.train_config("fedrdqn", "CartPole-v1", steps_per_agent=steps, sync_every=10, eval_every_rounds=1,
                                    agent_overrides=dict(learning_starts=learning_starts, train_freq=train_freq))

    with pytest.warns(UserWarning, match=r"no agent will take a gradient step: the first training phase would be "
                                         r"at environment step 10,001 \(learning_starts 10,000, train_freq 1\), "
                                         r"after the run's 1,000 steps per agent"):
        loop._warn_if_never_trains(config(1000, 10_000))
    with pytest.warns(UserWarning, match=r"at environment step 1,024 \(learning_starts 1,000, train_freq 256\)"):
        loop._warn_if_never_trains(config(1020, 1000, train_freq=256))  # RL-Zoo3's CartPole train_freq
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loop._warn_if_never_trains(config(1010, 1000))  # trains from step 1001 (SB3: > learning_starts)
        loop._warn_if_never_trains(config(1030, 1000, train_freq=256))  # at step 1024
    with pytest.warns(UserWarning, match=r"at environment step 1,001 \(learning_starts 1,000, train_freq 1\)"):
        loop._warn_if_never_trains(config(1000, 1000))


def test_a_config_is_validated_once_before_anything_compiles(monkeypatch):
    """The command line resolves and validates a config; the trainer's setup then reuses that
    validation instead of running it (and building the env for it) again."""
    from fedjax_rl.training import configs, program

    checks = []
    real_check = configs.TrainConfig.check_together
    monkeypatch.setattr(configs.TrainConfig, "check_together", lambda self: (checks.append(self), real_check(self))[1])
    args = commands.build_parser().parse_args(["train", "--algo", "dqnavg", "--agents", "7", "--sync-every", "3",
                                          "--steps", "30", "--eval-every", "2"])
    config = commands.config_from_args(args)
    setup = program.make_setup(config)
    config.validate()
    assert len(checks) == 1 and setup.config is config
    with pytest.raises(ValueError, match="num_agents"):  # a bad config is refused every time, not remembered
        config.replace(num_agents=0).validate()
    with pytest.raises(ValueError, match="num_agents"):
        program.make_setup(config.replace(num_agents=0))


@pytest.mark.parametrize("address,public", [
    ("8.8.8.8:12345", True), ("[2001:4860:4860::8888]:12345", True), ("1.1.1.1", True),
    ("127.0.0.1:12345", False), ("10.0.0.1:12345", False), ("172.16.5.4:1", False), ("192.168.1.2:1", False),
    ("[::1]:12345", False), ("[fd00::1]:1", False), ("100.64.0.1:1", False), ("localhost:12345", False),
])
def test_a_coordinator_outside_private_networks_is_a_risk(address, public):
    from fedjax_rl.training import distributed

    risk = distributed.coordinator_risk(address)
    assert (risk is not None) == public, risk
    if public:
        assert "authenticates nobody" in risk and "--aggregation median or trimmed_mean" in risk


@pytest.mark.parametrize("address,process_id,bind", [
    ("127.0.0.1:12345", 0, "127.0.0.1:12345"), ("[::1]:12345", 0, "[::1]:12345"),
    ("127.0.0.1:12345", 1, None),  # only process 0 starts the coordinator
    ("198.51.100.7:12345", 0, None),  # not this machine's (documentation's TEST-NET-2): JAX's every interface
    ("localhost:7", 0, "127.0.0.1:7"),
    # Another host name may name loopback here (Debian's 127.0.1.1 line for the host's own name) and the
    # machine's network address on the other hosts: JAX's every interface.
    ("no-such-host.invalid:1", 0, None), ("coordinator.example.org:12345", 0, None),
    ("127.0.0.1", 0, None), ("x:y", 0, None),  # malformed: JAX says so
])
def test_the_coordinator_listens_on_the_address_it_is_named_by(address, process_id, bind):
    import socket

    from fedjax_rl.training import distributed

    if address.startswith("[::1]") and not socket.has_ipv6:
        pytest.skip("no IPv6 on this machine")
    assert distributed.coordinator_bind_address(address, process_id) == bind


def test_a_chosen_bind_address_is_left_to_jax(monkeypatch):
    from fedjax_rl.training import distributed

    monkeypatch.setenv("JAX_COORDINATOR_BIND_ADDRESS", "0.0.0.0:12345")
    assert distributed.coordinator_bind_address("127.0.0.1:12345", 0) is None


@pytest.mark.parametrize("address,bind,warnings_expected", [
    ("127.0.0.1:12345", "127.0.0.1:12345", []),
    ("8.8.8.8:12345", None, ["authenticates nobody", "listens on every interface"]),
])
def test_process_zero_binds_its_coordinator_where_it_is_named(monkeypatch, address, bind, warnings_expected):
    import warnings

    import jax

    from fedjax_rl.training import distributed

    calls = []
    monkeypatch.setattr(jax.config, "update", lambda *args: None)  # gloo stays unset in this process
    monkeypatch.setattr(jax.distributed, "initialize", lambda **kwargs: calls.append(kwargs))
    with warnings.catch_warnings(record=True) as recorded:
        warnings.simplefilter("always")
        distributed.initialize(address, 2, 0)
    expected = dict(coordinator_address=address, num_processes=2, process_id=0)
    assert calls == [{**expected, **({"coordinator_bind_address": bind} if bind else {})}]
    said = [str(w.message) for w in recorded]
    assert len(said) == len(warnings_expected) and all(p in m for p, m in zip(warnings_expected, said)), said


@pytest.mark.parametrize("address,warns", [("8.8.8.8:12345", True), ("127.0.0.1:12345", False),
                                           ("10.0.0.1:12345", False)])
def test_train_warns_before_connecting_to_a_public_coordinator(monkeypatch, capsys, address, warns):
    """The warning comes before jax.distributed connects (here: a stand-in that stops the command), as
    the command line's own warning line; loopback and private addresses connect without one."""
    import warnings

    import jax

    calls, seen = [], []
    monkeypatch.setattr(jax.config, "update", lambda *args: None)  # gloo stays unset in this process

    def connect(**kwargs):
        calls.append((kwargs, len(seen)))  # how many warnings came before connecting
        raise RuntimeError("no coordinator in a test")

    monkeypatch.setattr(jax.distributed, "initialize", connect)
    argv = ["train", "--coordinator", address, "--num-processes", "2", "--process-id", "1"]
    with warnings.catch_warnings(record=True) as recorded, pytest.raises(RuntimeError, match="no coordinator"):
        warnings.simplefilter("always")
        seen = recorded
        commands.main(argv)
    risks = [w for w in seen if "authenticates nobody" in str(w.message)]
    assert calls == [(dict(coordinator_address=address, num_processes=2, process_id=1), len(risks))]
    assert len(risks) == warns
    if warns:
        text = commands._format_warning(risks[0].message, risks[0].category, "", 0)
        assert text.startswith(f"fedjax-rl: warning: the coordinator {address} is at a public address")


def test_the_demo_compares_at_a_seed_count_a_verdict_can_read():
    """`make demo`'s comparison is the first verdict a new user sees: at fewer than stats.MIN_SEEDS seeds
    it could only ever say "too few seeds"."""
    from fedjax_rl.analysis import stats

    args = commands.build_parser().parse_args(["demo"])
    assert args.seeds == commands.DEMO_SEEDS >= stats.MIN_SEEDS


def test_on_nonfinite_offers_the_loops_policies():
    """The train parser spells out `loop.NONFINITE_POLICIES` (building it imports no JAX): the two agree."""
    from fedjax_rl.training import loop

    parser = commands.build_parser()
    subcommands = {name: sub for action in parser._actions if isinstance(action, type(parser._subparsers._actions[-1]))
                   for name, sub in action.choices.items()}
    [action] = [a for a in subcommands["train"]._actions if a.dest == "on_nonfinite"]
    assert tuple(action.choices) == loop.NONFINITE_POLICIES and action.default == "stop"


def test_a_reader_that_goes_away_stops_the_output_without_a_traceback(tmp_path):
    """`fedjax-rl reproduce attacks --status | head -1`: the reader closes the pipe before the 104 rows' lines
    are written. The command stops quietly with the shell's code for it (141), as `ls | head` would."""
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-m", "fedjax_rl.cli", "reproduce", "attacks", "--status", "--out",
                              str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    child.stdout.close()  # before the child has written anything: every write meets a closed pipe
    try:
        _, stderr = child.communicate(timeout=120)
    finally:
        child.kill()
    assert child.returncode == 141, stderr.decode()[-2000:]
    assert b"Traceback" not in stderr and b"Exception ignored" not in stderr, stderr.decode()[-2000:]


def test_a_broken_pipe_that_is_not_stdouts_is_reported(monkeypatch, tmp_path):
    """Only a closed stdout is met quietly: a pipe or socket of the run's own that breaks is its failure."""
    def breaks(args):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(reproduce_command, "run", breaks)
    with pytest.raises(BrokenPipeError):
        commands.main(["reproduce", "attacks", "--status", "--out", str(tmp_path)])
