"""The `heterogeneity` reproduction table (beyond the paper): FedR* − *Avg over the heterogeneity
level p, one compiled program per row and program with p a grid axis like omega.

Cheap: the resolved configs are compared without compiling; one tiny CartPole row (1 tuning + 2
reported seeds, 300 steps per agent, an 8-unit network, 3 levels x 2 omegas in one program) is run
once for the module, beside the same request of Table 1, and every test reads those files."""

import csv
import dataclasses
import os

import numpy as np
import pytest

from fedjax_rl import envs
from fedjax_rl.analysis import stats
from fedjax_rl.cli import commands
from fedjax_rl.reproduce import harness, heterogeneity, paper, plan, status
from fedjax_rl.training import configs, loop
from fedjax_rl.reproduce.tables import MapRow, get_table, row_dir
from fedjax_rl.training.run_directory import RunDirectory

ROW = "CartPole-v1/length"
LEVELS = [0.0, 0.5, 0.9]
COMMON = dict(rows=[ROW], num_seeds=2, tuning_seeds=1, omegas=[0.2], budget=0.006, progress=False,
              agent_overrides=dict(hidden_sizes=(8,), learning_starts=50, train_freq=4, gradient_steps=1),
              train_overrides=dict(sweep_points=3, eval_episodes=2))
TINY = dict(COMMON, max_rates=LEVELS)


@pytest.fixture(scope="module")
def mapped(tmp_path_factory):
    """The tiny heterogeneity row and Table 1's same row with the same request, in one DIR."""
    out = str(tmp_path_factory.mktemp("heterogeneity"))
    result = harness.reproduce("heterogeneity", out, **TINY)
    table1 = harness.reproduce("table1", out, **COMMON)
    return dict(out=out, result=result, table1=table1)


def _point_configs(table_name: str, row_key: str, budget=1.0, omegas=(0.05, 0.1), max_rates=None) -> dict:
    """{(max_rate, omega): the resolved config} of every grid point of the row's programs, by program."""
    table = get_table(table_name)
    [row] = plan.select_rows(table, [row_key])
    out = {}
    for planned in plan.row_programs(table, row, budget, omegas, max_rates=max_rates):
        points = configs.grid_configs(planned.config, planned.grid) if planned.grid else [planned.config]
        out[planned.program.name] = {(p.max_rate, p.agent.omega): p for p in points}
    return out


@pytest.mark.parametrize("row_key", ["CartPole-v1/length", "CartPole-v1/masscart", "LunarLander-v3/gravity"])
def test_the_point_p_half_with_five_agents_has_table1s_settings(row_key):
    table = get_table("heterogeneity")
    mapped = _point_configs("heterogeneity", row_key, max_rates=table.max_rates)
    table1 = _point_configs("table1", row_key)
    assert mapped.keys() == table1.keys() == {"fedrdqn"}
    at_half = {omega: c for (p, omega), c in mapped["fedrdqn"].items() if p == paper.MAX_RATE}
    assert at_half.keys() == {omega for _, omega in table1["fedrdqn"]} == {0.0, 0.05, 0.1}
    for (p, omega), config in table1["fedrdqn"].items():
        assert p == paper.MAX_RATE
        # Every field, the agent's hyperparameters included, and the budget RL-Zoo3 gives the task.
        assert dataclasses.asdict(at_half[omega]) == dataclasses.asdict(config)
    # The row lives where Table 1's does, in its own table's directory.
    [row] = plan.select_rows(table, [row_key])
    assert row_dir("OUT", table, row) == os.path.join("OUT", "heterogeneity", row_key.replace("/", "__"))


def test_a_hopper_point_p_half_has_table2s_settings():
    if not envs.known("Hopper-v4"):
        pytest.skip("the MuJoCo robots are not registered here")
    mapped = _point_configs("heterogeneity", "Hopper-v4/torso", budget=0.05, max_rates=(0.0, 0.5))
    table2 = _point_configs("table2", "Hopper-v4/torso", budget=0.05)
    assert mapped.keys() == table2.keys() == {"fedrddpg", "ddpgavg2"}
    for program, points in table2.items():
        for key, config in points.items():
            assert dataclasses.asdict(mapped[program][key]) == dataclasses.asdict(config)


def test_rows_at_other_agent_counts_say_so_and_differ_only_in_k():
    table = get_table("heterogeneity")
    keys = [row.key for row in table.rows]
    assert {"CartPole-v1/length", "CartPole-v1/length/K=10", "CartPole-v1/length/K=20",
            "CartPole-v1/masscart", "Pendulum-v1/m", "LunarLander-v3/gravity", "Hopper-v4/torso"} <= set(keys)
    assert all(isinstance(row, MapRow) for row in table.rows)
    five = _point_configs("heterogeneity", "CartPole-v1/length", max_rates=(0.3,))["fedrdqn"]
    ten = _point_configs("heterogeneity", "CartPole-v1/length/K=10", max_rates=(0.3,))["fedrdqn"]
    for key, config in five.items():
        assert dataclasses.replace(ten[key], num_agents=5) == config and ten[key].num_agents == 10
    [row] = plan.select_rows(table, ["CartPole-v1/length/K=20"])
    assert row_dir("OUT", table, row).endswith("CartPole-v1__length__K20")


def test_levels_are_checked_before_compiling(tmp_path, monkeypatch):
    def no_run(*args, **kwargs):
        raise AssertionError("nothing may train")

    monkeypatch.setattr(loop, "run", no_run)
    with pytest.raises(ValueError, match=r"max_rates must be distinct heterogeneity levels p in \[0, 1\), got \[0.3, 1.0\]"):
        harness.reproduce("heterogeneity", str(tmp_path), max_rates=[0.3, 1.0])
    with pytest.raises(ValueError, match="table1 has no heterogeneity grid"):
        harness.reproduce("table1", str(tmp_path), max_rates=[0.3])
    with pytest.raises(SystemExit, match="--set applies to one algorithm family"):
        commands.main(["reproduce", "heterogeneity", "--set", "learning_starts=100", "--out", str(tmp_path)])
    assert not os.listdir(tmp_path)


def test_the_table_defaults_are_its_own():
    defaults = plan.table_defaults(get_table("heterogeneity"))
    assert defaults["num_seeds"] >= 10 and {0.0, 0.3, 0.6, 0.9} <= set(defaults["max_rates"])
    assert plan.table_defaults(get_table("table1"))["max_rates"] is None


def _final(out: str, table: str, point: str) -> dict:
    return RunDirectory.read_metrics(os.path.join(out, table, "CartPole-v1__length", "fedrdqn", point))["final"]


def test_p_zero_is_the_homogeneous_federation(mapped):
    final = _final(mapped["out"], "heterogeneity", "max_rate=0,omega=0.2")
    assert np.all(np.asarray(final["rates"]) == 0.0)
    nominal = envs.make("CartPole-v1", ("length",))[1]
    nominal_length = float(envs.make("CartPole-v1", ("length",))[0].get_physics(nominal, "length"))
    assert np.all(np.asarray(final["physics_values"]) == np.float32(nominal_length))
    # A seed draws the same u_k at every level: n_k = p u_k, so the levels are paired by seed.
    half = np.asarray(_final(mapped["out"], "heterogeneity", "max_rate=0.5,omega=0")["rates"])
    most = np.asarray(_final(mapped["out"], "heterogeneity", "max_rate=0.9,omega=0")["rates"])
    assert np.all(half != 0)
    np.testing.assert_allclose(most / 0.9, half / 0.5, rtol=1e-6)


def test_the_vmapped_level_gives_table1s_numbers_at_p_half(mapped):
    """Table 1's row is a program without a p axis; the same seeds at p = 0.5 inside the grid over p
    are the same computation in a differently shaped program."""
    for omega in ("0", "0.2"):
        ours = _final(mapped["out"], "heterogeneity", f"max_rate=0.5,omega={omega}")
        theirs = _final(mapped["out"], "table1", f"omega={omega}")
        np.testing.assert_array_equal(ours["rates"], theirs["rates"])
        for name in ("local_minimum", "local_average", "sweep_returns"):
            np.testing.assert_allclose(ours[name], theirs[name], rtol=1e-5, err_msg=f"{name} at omega {omega}")
        # The losses differ in the last bits here (2e-7 relative on this CPU): another program shape.
        curves = [RunDirectory.read_metrics(os.path.join(mapped["out"], *where))["curve"] for where in (
            ("heterogeneity", "CartPole-v1__length", "fedrdqn", f"max_rate=0.5,omega={omega}"),
            ("table1", "CartPole-v1__length", "fedrdqn", f"omega={omega}"))]
        np.testing.assert_allclose(curves[0]["td_loss"], curves[1]["td_loss"], rtol=1e-5)


def test_each_level_has_its_own_omega_chosen_on_the_tuning_seeds(mapped):
    record = mapped["result"]["rows"][ROW]
    assert [point["max_rate"] for point in record["points"]] == LEVELS
    for point in record["points"]:
        finals = {w: _final(mapped["out"], "heterogeneity", f"max_rate={point['max_rate']:g},omega={w:g}")
                  for w in (0.0, 0.2)}
        [(omega, mean)] = point["tuning_minimum_mean"].items()
        assert float(omega) == 0.2 and mean == pytest.approx(float(finals[0.2]["local_minimum"][0]))
        assert point["chosen_omega"] == 0.2 and point["headline"] == "FedRDQN (ω=0.2)"
        assert point["algorithms"]["DQNAvg"]["reported"]["minimum"] == pytest.approx(
            np.asarray(finals[0.0]["local_minimum"][1:3], float).tolist())


def test_the_report_is_the_paired_statistics_of_the_files(mapped):
    out = mapped["out"]
    with open(os.path.join(out, "heterogeneity_comparisons.csv")) as f:
        lines = list(csv.DictReader(f))
    assert [(float(line["max_rate"]), line["baseline"], line["verdict"]) for line in lines] == [
        (p, "DQNAvg", stats.TOO_FEW) for p in LEVELS]
    for line in lines:
        p = float(line["max_rate"])
        robust = _final(out, "heterogeneity", f"max_rate={p:g},omega=0.2")
        base = _final(out, "heterogeneity", f"max_rate={p:g},omega=0")
        for metric, values in (("minimum", lambda f: np.asarray(f["local_minimum"], float)[1:]),
                               ("sweep", lambda f: np.asarray(f["sweep_returns"], float)[1:].mean(axis=-1))):
            expected = stats.difference(values(robust), values(base), paired=True)
            assert float(line[f"{metric}_median_difference"]) == pytest.approx(expected.estimate)
    text = open(os.path.join(out, "heterogeneity.md")).read()
    assert "**REDUCED BUDGET**" in text and "Where FedR* pays" in text and "CartPole-v1/length" in text
    assert "\n**Whole row** CartPole-v1/length against DQNAvg, across p = {0, 0.5, 0.9}" in text
    assert "\n**Whole table** against DQNAvg, over 1 rows and 3 (row, level) points" in text
    assert os.path.getsize(os.path.join(out, "heterogeneity_map.png")) > 10_000
    assert os.path.exists(os.path.join(out, "heterogeneity.csv"))


def test_status_and_report_only_read_the_finished_row(mapped, capsys, monkeypatch):
    def no_run(*args, **kwargs):
        raise AssertionError("nothing may train")

    monkeypatch.setattr(loop, "run", no_run)
    [line] = status.rows("heterogeneity", mapped["out"], **{k: v for k, v in TINY.items() if k != "progress"})
    assert line["row"] == ROW and line["state"] == "finished" and line["seeds"] == 3
    os.remove(os.path.join(mapped["out"], "heterogeneity.md"))
    commands.main(["reproduce", "heterogeneity", "--out", mapped["out"], "--report-only"])
    assert os.path.exists(os.path.join(mapped["out"], "heterogeneity.md"))
    assert "heterogeneity.md" in capsys.readouterr().out


def test_the_figure_draws_one_line_per_agent_count(tmp_path):
    # One decided point, one undecided, one with an unbounded end (drawn to the edge, an arrowhead).
    intervals = [stats.Interval(1.0, -2.0, 3.0), stats.Interval(4.0, 1.0, 7.0), stats.Interval(0.5, -np.inf, 2.0)]
    verdicts = [stats.INCONCLUSIVE, stats.AHEAD, stats.INCONCLUSIVE]
    lines = [dict(row=f"CartPole-v1/length{k}", panel="CartPole-v1/length", num_agents=n, max_rate=p,
                  baseline="DQNAvg", seeds=10, minimum=interval, verdict=verdict)
             for k, n in (("", 5), ("/K=10", 10)) for p, interval, verdict in zip(LEVELS, intervals, verdicts)]
    records = {"x": {"request": {"budget": 1.0}}}
    path = heterogeneity.write_figure(get_table("heterogeneity"), str(tmp_path), lines, records)
    assert os.path.getsize(path) > 10_000


def test_a_new_tables_pieces_are_estimated_from_the_same_row_of_another_table_scaled_by_k():
    from fedjax_rl.reproduce.costs import Measurement, estimate

    def measured(row, wall, kind="cpu", table="table1"):
        return Measurement(table, row, row.split("/")[0], "fedrdqn", None, kind, kind.upper(), 40, 50_000, wall, row)

    found = [measured("CartPole-v1/length", 1000.0), measured("CartPole-v1/masscart", 3000.0),
             measured("CartPole-v1/length", 400.0, "gpu")]
    # 180 runs at K = 10: 4.5 times the runs, twice the agents, on a CPU; the row's own measurement.
    cost = estimate(found, "heterogeneity", "CartPole-v1/length", "fedrdqn", None, 180, 50_000, agents=10)
    assert cost["cpu"][0] == pytest.approx(1000.0 * 4.5 * 2)
    assert cost["cpu"][1] == "from table1 CartPole-v1/length, CPU: 40 runs of 5 agents x 50,000 steps in 1,000 s"
    assert cost["gpu"][0] == pytest.approx(400.0 * 4.5 * 2)  # beyond the measured width: linear, an upper bound
    # At K = 5 the basis names no K; a row no table has measured takes its task's measurement.
    same_k = estimate(found, "heterogeneity", "CartPole-v1/masscart", "fedrdqn", None, 40, 50_000)
    assert same_k["cpu"] == (3000.0, "from table1 CartPole-v1/masscart, CPU: 40 runs x 50,000 steps in 3,000 s")
    assert estimate(found, "heterogeneity", "Acrobot-v1/length", "fedrdqn", None, 40, 50_000)["cpu"] is None


def test_of_a_rows_equal_pieces_the_median_sets_the_estimate_not_one_slowed_beside_other_work():
    from fedjax_rl.reproduce.costs import Measurement, estimate

    def piece(seed, wall, runs=2):
        return Measurement("attacks", "Acrobot-v1/length/K=10/mean/none/0", "Acrobot-v1", "fedrdqn", None, "cpu",
                           "AMD EPYC (1 of 2 cores)", runs, 15_000, wall, f"seeds_{seed}-{seed + 1}", agents=10)

    # Seed 0 ran beside a cold test suite (the first by name, which the estimate once took).
    found = [piece(0, 1274.0), piece(1, 655.0), piece(2, 424.0), piece(3, 367.0), piece(4, 449.0)]
    seconds, basis = estimate(found, "attacks", "Acrobot-v1/length/K=10/mean/none/0", "fedrdqn", None, 2, 15_000,
                              agents=10)["cpu"]
    assert seconds == 449.0
    assert basis == "AMD EPYC (1 of 2 cores): 2 runs x 15,000 steps in 449 s, the median of 5 such"
    # Of an even number, the lower middle one; a measurement of another size is not among them.
    seconds, _ = estimate(found[:4] + [piece(9, 100.0, runs=20)], "attacks", "Acrobot-v1/length/K=10/mean/none/0",
                          "fedrdqn", None, 2, 15_000, agents=10)["cpu"]
    assert seconds == 424.0


def test_a_challenger_maps_over_the_levels_beside_the_rows_own(mapped, example_algorithm, tmp_path, monkeypatch):
    import json
    import shutil

    out = str(tmp_path / "out")
    shutil.copytree(mapped["out"], out)
    path = os.path.join(out, "heterogeneity", "CartPole-v1__length", "row.json")
    before = json.load(open(path))
    real_run, trained = loop.run, []
    monkeypatch.setattr(loop, "run", lambda config, *a, **k: trained.append(config.algo) or real_run(config, *a, **k))
    harness.reproduce("heterogeneity", out, challengers=["fedrdqn_min"], **TINY)
    assert trained == ["fedrdqn_min"]  # one program over every level, the row's own read back
    after = json.load(open(path))
    for old, new in zip(before["points"], after["points"]):
        mine = new["challengers"]["fedrdqn_min"]
        assert mine["headline"] in new["algorithms"] and sorted(mine["tuning_minimum_mean"]) == ["0.2"]
        assert {k: v for k, v in new["algorithms"].items() if k not in mine["labels"]} == old["algorithms"]
        assert (new["headline"], new["chosen_omega"]) == (old["headline"], old["chosen_omega"])
    text = open(os.path.join(out, "heterogeneity.md")).read()
    section = text[text.index("## Challenger: FedRDQN-min"):text.index("## Per row")]
    # Against DQNAvg and against the row's own FedRDQN at each level's headline omega.
    verdicts = [line for line in section.splitlines() if line.startswith("| CartPole-v1/length | 5 |")]
    assert len(verdicts) == 2 * len(LEVELS) and all(any(w in line for w in stats.VERDICTS) for line in verdicts)
    assert sum("| FedR* (headline ω) |" in line for line in verdicts) == len(LEVELS)
    for reference in ("DQNAvg", "FedR* (headline ω)"):
        assert f"**Whole table** against {reference}" in section
    assert "**Whole row** CartPole-v1/length" in section
    # The table without challengers is the same text before the challenger's section.
    assert open(os.path.join(mapped["out"], "heterogeneity.md")).read().split("## Per row")[0] in text
