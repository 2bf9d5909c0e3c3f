"""The `attacks` reproduction table (beyond the paper, issue 87): each aggregation rule under 0-3 attackers
of K = 10, DQNAvg and FedRDQN, judged against the same rule without attackers on the honest agents'
Minimum, and each rule against the mean when nobody attacks.

Cheap: the rows' configs are resolved without compiling; one tiny program's initial state and final
evaluation (K = 4, an 8-unit network, no training) compile for the recorded attackers; the report reads
small synthetic finished rows written here, with one verdict worked by hand."""

import csv
import dataclasses
import functools
import json
import os

import jax
import numpy as np
import pytest

from fedjax_rl.analysis import stats
from fedjax_rl.cli import commands
from fedjax_rl.core import aggregation
from fedjax_rl.core import attacks as core_attacks
from fedjax_rl.reproduce import attacks, harness, plan, report
from fedjax_rl.reproduce.tables import ATTACK_KRUM_BYZANTINE, AttackRow, DQN, get_table, row_dir, with_rules
from fedjax_rl.training import configs, loop, program

TASKS = ("CartPole-v1/length", "Acrobot-v1/length")


def _configs(key: str) -> list:
    table = get_table("attacks")
    [row] = plan.select_rows(table, [key])
    return plan.row_programs(table, row, 1.0, (0.05,))


def test_rows_are_every_rule_attack_and_count_with_readable_unique_keys():
    table = get_table("attacks")
    keys = [row.key for row in table.rows]
    assert len(keys) == len(set(keys)) == 104 and len({row.dir_name for row in table.rows}) == 104
    for task in TASKS:
        mine = [row for row in table.rows if row.key.startswith(task + "/K=10/")]
        assert len(mine) == 4 * (1 + 4 * 3) == 52
        assert {(r.aggregation, r.attack, r.attackers) for r in mine} == (
            {(rule, "none", 0) for rule in ("mean", "median", "trimmed_mean", "krum")}
            | {(rule, attack, n) for rule in ("mean", "median", "trimmed_mean", "krum")
               for attack in ("sign_flip", "scale", "noise", "stale") for n in (1, 2, 3)})
    [row] = plan.select_rows(table, ["CartPole-v1/length/K=10/median/sign_flip/2"])
    assert row_dir("OUT", table, row) == os.path.join("OUT", "attacks", "CartPole-v1__length__K10__median__sign_flip__2")
    assert row.no_attack.key == "CartPole-v1/length/K=10/median/none/0"
    assert {"num_seeds": 10, "tuning_seeds": 1, "omegas": (0.05,)}.items() <= plan.table_defaults(table).items()


def test_a_rows_settings_enter_its_program_and_nothing_else_differs():
    [krum] = _configs("Acrobot-v1/length/K=10/krum/scale/3")
    config = krum.config
    assert (config.aggregation, config.krum_byzantine, config.attackers, config.attack, config.num_agents) == (
        "krum", ATTACK_KRUM_BYZANTINE, 3, "scale", 10)
    assert krum.grid == {"omega": [0.0, 0.05]}  # DQNAvg is the omega 0 point of the same program
    [trimmed] = _configs("CartPole-v1/length/K=10/trimmed_mean/none/0")
    assert (trimmed.config.aggregation, trimmed.config.trim, trimmed.config.attackers) == ("trimmed_mean", 0.25, 0)
    # Without attackers and under the mean a row is the heterogeneity map's K = 10 row at the paper's p.
    [mean] = _configs("CartPole-v1/length/K=10/mean/none/0")
    heterogeneity = get_table("heterogeneity")
    [row] = plan.select_rows(heterogeneity, ["CartPole-v1/length/K=10"])
    [theirs] = plan.row_programs(heterogeneity, row, 1.0, (0.05,))
    assert mean.config == theirs.config
    [flipped] = _configs("CartPole-v1/length/K=10/mean/sign_flip/1")
    assert flipped.config == dataclasses.replace(mean.config, attackers=1, attack="sign_flip")


def test_bad_settings_are_refused_before_compiling(tmp_path, monkeypatch):
    monkeypatch.setattr(loop, "run", lambda *a, **k: pytest.fail("nothing may train"))
    table = get_table("attacks")
    with pytest.raises(ValueError, match=r"attackers must be in \[0, 9\]"):
        plan.row_programs(table, AttackRow("CartPole-v1", "length", "length", num_agents=10, family=DQN,
                                           attack="noise", attackers=10), 1.0, (0.05,))
    with pytest.raises(ValueError, match=r"krum_byzantine must be in \[0, 1\]"):  # K = 5 < 2 x 3 + 3
        plan.row_programs(table, AttackRow("CartPole-v1", "length", "length", num_agents=5, family=DQN,
                                           aggregation="krum"), 1.0, (0.05,))
    with pytest.raises(ValueError, match="exactly when it has 0 attackers"):
        AttackRow("CartPole-v1", "length", "length", attack="none", attackers=1)
    with pytest.raises(ValueError, match=r"decides \['aggregation'\] itself"):
        harness.reproduce("attacks", str(tmp_path), rows=["CartPole-v1/length/K=10/mean/none/0"],
                          train_overrides=dict(aggregation="median"), progress=False)
    assert not os.listdir(tmp_path)


def test_the_final_record_names_the_attackers_as_the_keys_draw_them():
    tiny = dict(hidden_sizes=(8,), learning_starts=10, buffer_size=64)
    seeds = program.seed_keys(0, 3)[1:]  # seed indices 1 and 2

    def final(attackers):
        config = configs.train_config("fedrdqn", "CartPole-v1", tiny, num_agents=4, steps_per_agent=20, sync_every=10,
                                      eval_every_rounds=1, eval_episodes=1, sweep_points=2, aggregation="median",
                                      attackers=attackers, attack="sign_flip")
        trainer = program.make_trainer(config)
        return jax.jit(jax.vmap(lambda key: trainer.finalize(trainer.init(key), trainer.hparams)))(seeds)

    recorded = np.asarray(final(2)["attackers"])
    assert recorded.shape == (2, 4) and (recorded.sum(axis=1) == 2).all()
    np.testing.assert_array_equal(recorded, attacks.attacker_masks(0, [1, 2], 4, 2))
    assert np.asarray(final(1)["attackers"]).sum(axis=1).tolist() == [1, 1]  # one attacker is recorded too
    assert "attackers" not in final(0)  # a run without attackers records what it always did


def test_a_federation_an_attack_breaks_is_recorded_and_measured_not_stopped(tmp_path):
    """One party of 3 scaling its upload by 1e30 makes the mean's global model overflow within a round or
    two. By default that stops the run; the attacks table records it and trains on to the final
    evaluation, which measures the broken global policy's returns (finite: a policy of non-finite Q values
    still acts)."""
    tiny = dict(hidden_sizes=(8,), learning_starts=10, buffer_size=64, batch_size=8, train_freq=1, gradient_steps=1)
    config = configs.train_config("fedrdqn", "CartPole-v1", tiny, num_agents=3, steps_per_agent=40, sync_every=10,
                                  eval_every_rounds=1, eval_episodes=1, sweep_points=2, attackers=1, attack="scale",
                                  attack_scale=1e30)
    with pytest.raises(ValueError, match="on_nonfinite must be one of"):
        loop.run(config, num_seeds=2, out_dir=str(tmp_path / "bad"), progress=False, on_nonfinite="ignore")
    assert not (tmp_path / "bad").exists()  # refused before anything was written or compiled
    with pytest.raises(loop.NonFiniteError, match="stopped before checkpointing"):
        loop.run(config, num_seeds=2, out_dir=str(tmp_path / "stop"), progress=False)
    with pytest.warns(loop.NonFiniteWarning, match="recorded, and training goes on"):
        result = loop.run(config, num_seeds=2, out_dir=str(tmp_path / "record"), progress=False,
                          on_nonfinite="record")
    went_nonfinite = np.any([np.asarray(v) > 0 for k, v in result["curve"].items()  # [seeds, blocks]
                             if k.startswith("nonfinite_step/")], axis=0)
    assert went_nonfinite.any(axis=1).all() and not went_nonfinite[:, 0].any()  # after the first sync
    assert np.isfinite(np.asarray(result["final"]["local_returns"])).all()
    on_disk = json.loads((tmp_path / "record" / "metrics.json").read_text())
    assert on_disk["on_nonfinite"] == "record" and "stopped" not in on_disk
    assert get_table("attacks").on_nonfinite == "record" and get_table("table1").on_nonfinite == "stop"


def test_a_run_went_nonfinite_where_any_block_of_any_quantity_says_so():
    curve = {"nonfinite_step/td_loss": [[0, 0, 5], [0, 0, 0], [0, 0, 0]],  # [seeds, blocks]
             "nonfinite_step/parameters": [[0, 0, 0], [0, 3, 0], [0, 0, 0]], "local_minimum": [[9, 9, 9]] * 3}
    assert attacks.went_nonfinite(curve, 3).tolist() == [True, True, False]
    assert attacks.went_nonfinite({}, 2).tolist() == [False, False]  # a record without curves


def test_a_seeds_attackers_are_nested_over_the_counts():
    """The legend's claim: 1 attacker's agent attacks in the rows of 2 and 3 as well (one permutation per seed)."""
    one, two, three = (attacks.attacker_masks(0, range(1, 7), 10, n) for n in (1, 2, 3))
    assert (one <= two).all() and (two <= three).all() and (three.sum(axis=1) == 3).all()


def test_the_honest_minimum_leaves_the_attackers_out():
    returns = np.array([[5.0, 1.0, 3.0], [2.0, 4.0, 6.0]])
    np.testing.assert_array_equal(attacks.honest_minimum(returns, [[False, True, False], [True, False, False]]), [3, 4])
    np.testing.assert_array_equal(attacks.honest_minimum(returns), [1, 2])
    with pytest.raises(ValueError, match="without an honest agent"):
        attacks.honest_minimum(returns, [[True, True, True], [False, False, False]])


# -- the report on synthetic finished rows ------------------------------------------------------------

K, TUNING, REPORTED = 10, 1, 10
SEEDS = TUNING + REPORTED
BASE = 400.0 + 10.0 * np.arange(K)[None, :] + np.arange(SEEDS)[:, None]  # [seed, agent]; agent 0 lowest
ATTACKER = np.zeros((SEEDS, K), bool)
ATTACKER[:, 0] = True  # agent 0 attacks on every seed


def _write_row(out: str, key: str, returns: dict, attackers=None) -> None:
    """A finished attacks row as the harness writes it, with the fields the report reads: {label: [seeds, K]}."""
    table = with_rules(get_table("attacks"), [key.split("/")[3]], check=False)  # a user's rule's row too
    [row] = plan.select_rows(table, [key])
    path = row_dir(out, table, row)
    algorithms = {}
    for label, values in returns.items():
        omega = 0.0 if label == "DQNAvg" else 0.05
        point = f"omega={omega:g}"
        os.makedirs(os.path.join(path, "fedrdqn", point))
        final = dict(local_returns=values.tolist(), rates=np.tile(np.linspace(-0.5, 0.5, K), (SEEDS, 1)).tolist(),
                     **({} if attackers is None else {"attackers": attackers.tolist()}))
        with open(os.path.join(path, "fedrdqn", point, "metrics.json"), "w") as f:
            json.dump(dict(curve={}, final=final), f)
        minimum = values.min(axis=1)
        algorithms[label] = dict(dir=f"fedrdqn/{point}", omega=omega,
                                 reported=dict(minimum=minimum[TUNING:].tolist(), average=values.mean(1)[TUNING:].tolist()))
    request = dict(budget=0.01, num_seeds=REPORTED, tuning_seeds=TUNING, omegas=[0.05], seed=0, agent_overrides={},
                   train_overrides={})
    record = dict(schema=2, table="attacks", row=key, env_name="CartPole-v1", param="length", request=request,
                  seeds=dict(seed=0, tuning=list(range(TUNING)), reported=list(range(TUNING, SEEDS))),
                  budget=dict(fraction=0.01, steps_per_agent={"fedrdqn": 500}, paper_steps_per_agent={"fedrdqn": 50_000}),
                  configs={"fedrdqn": dict(config=dict(num_agents=K, env_name="CartPole-v1"), grid={"omega": [0.0, 0.05]})},
                  run_batch={"fedrdqn": None}, pieces={"fedrdqn": [dict(dir="", seeds=[0, SEEDS], machine="a test CPU")]},
                  versions={"jax": "test"}, machine={}, wall_s=12.0, algorithms=algorithms, headline="FedRDQN (ω=0.05)")
    with open(os.path.join(path, "row.json"), "w") as f:
        json.dump(record, f)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("attacks"))
    prefix = "CartPole-v1/length/K=10"
    _write_row(out, f"{prefix}/mean/none/0", {"DQNAvg": BASE, "FedRDQN (ω=0.05)": BASE})
    # DQNAvg: the honest agents lose 50 on 9 of the 10 reported seeds and gain 5 on the last; the attacker's
    # own environment falls to 0, which its honest Minimum must not see. FedRDQN: every honest agent gains 1.
    attacked = BASE - 50.0
    attacked[-1] = BASE[-1] + 5.0
    attacked[:, 0] = 0.0
    robust = BASE + 1.0
    robust[:, 0] = 0.0
    _write_row(out, f"{prefix}/mean/sign_flip/1", {"DQNAvg": attacked, "FedRDQN (ω=0.05)": robust}, ATTACKER)
    _write_row(out, f"{prefix}/median/none/0", {"DQNAvg": BASE, "FedRDQN (ω=0.05)": BASE - 30.0})
    _write_row(out, f"{prefix}/krum/scale/1", {"DQNAvg": BASE, "FedRDQN (ω=0.05)": BASE}, ATTACKER)  # no krum/none/0
    paths = report.write_outputs(get_table("attacks"), out)["paths"]
    with open(os.path.join(out, "attacks_comparisons.csv")) as f:
        lines = {(line["row"], line["robust"]): line for line in csv.DictReader(f)}
    return dict(out=out, paths=paths, lines=lines, text=open(os.path.join(out, "attacks.md")).read())


def test_a_report_of_the_first_row_alone_has_no_comparison_yet(tmp_path):
    """The first finished row of a table (a rule without attackers) compares with nothing yet: the report
    says so, and its comparisons file is empty rather than missing or stale."""
    out = str(tmp_path)
    with open(os.path.join(out, "attacks_comparisons.csv"), "w") as f:
        f.write("row,verdict\nan earlier report's row,behind\n")
    _write_row(out, "CartPole-v1/length/K=10/mean/none/0", {"DQNAvg": BASE, "FedRDQN (ω=0.05)": BASE})
    report.write_outputs(get_table("attacks"), out)
    assert os.path.getsize(os.path.join(out, "attacks_comparisons.csv")) == 0
    text = open(os.path.join(out, "attacks.md")).read()
    assert text.count("No such row has finished yet.") == 2
    with open(os.path.join(out, "attacks.csv")) as f:
        assert {r["row"] for r in csv.DictReader(f)} == {"CartPole-v1/length/K=10/mean/none/0"}


def test_a_verdict_worked_by_hand(written):
    line = written["lines"][("CartPole-v1/length/K=10/mean/sign_flip/1", "DQNAvg")]
    # Paired by seed over the honest agents 1-9, in both rows: agent 1 is their lowest, 411 + s without
    # attackers (not agent 0's 401 + s), 361 + s attacked on 9 seeds and 416 + s on the last.
    seeds = np.arange(TUNING, SEEDS)
    assert float(line["baseline_minimum"]) == pytest.approx(np.mean(410.0 + seeds))
    assert float(line["compared_minimum"]) == pytest.approx(np.mean(np.where(seeds == SEEDS - 1, 415.0, 360.0) + seeds))
    # 1 seed higher, 9 lower: P(at least 9 of 10 one way | a fair coin) = 11/1024 < 2.5%: behind. Median -50,
    # and the order-statistic interval [d_(2), d_(9)] of 10 sorted differences is [-50, -50].
    assert (line["higher"], line["lower"], line["equal"], line["verdict"]) == ("1", "9", "0", stats.BEHIND)
    assert (float(line["minimum_median_difference"]), float(line["minimum_low"]), float(line["minimum_high"])) == (
        -50.0, -50.0, -50.0)
    assert line["kind"] == attacks.ATTACK and line["baseline"] == "CartPole-v1/length/K=10/mean/none/0"
    robust = written["lines"][("CartPole-v1/length/K=10/mean/sign_flip/1", "FedRDQN (ω=0.05)")]
    # 10 of 10 higher by 1, inside CartPole's margin of 22.6: ahead, within the margin.
    assert (robust["higher"], robust["verdict"], robust["within_margin"]) == ("10", stats.AHEAD, "True")


def test_each_rule_is_judged_against_the_mean_without_attackers(written):
    dqn = written["lines"][("CartPole-v1/length/K=10/median/none/0", "DQNAvg")]
    assert dqn["kind"] == attacks.COST and dqn["baseline"] == "CartPole-v1/length/K=10/mean/none/0"
    assert (dqn["equal"], dqn["verdict"]) == ("10", stats.INCONCLUSIVE)  # every seed tied
    fed = written["lines"][("CartPole-v1/length/K=10/median/none/0", "FedRDQN (ω=0.05)")]
    assert (fed["lower"], fed["verdict"], float(fed["minimum_median_difference"])) == ("10", stats.BEHIND, -30.0)
    # The Minimum over every agent when nobody attacks: agent 0's 400 + s.
    assert float(fed["baseline_minimum"]) == pytest.approx(np.mean(400.0 + np.arange(TUNING, SEEDS)))


def test_a_row_without_its_reference_says_so(written):
    line = written["lines"][("CartPole-v1/length/K=10/krum/scale/1", "DQNAvg")]
    assert line["verdict"] == attacks.NO_BASELINE and line["baseline"] == "CartPole-v1/length/K=10/krum/none/0"
    assert f"*{attacks.NO_BASELINE}* (CartPole-v1/length/K=10/krum/none/0)" in written["text"]


def test_the_report_writes_its_files(written):
    out, text = written["out"], written["text"]
    assert sorted(os.path.basename(p) for p in written["paths"]) == [
        "attacks.csv", "attacks.md", "attacks.png", "attacks_comparisons.csv"]
    assert os.path.getsize(os.path.join(out, "attacks.png")) > 10_000
    assert "**REDUCED BUDGET**" in text and "## What each rule costs when nobody attacks" in text
    assert "## Federations the attack broke" in text and "None so far." in text
    assert "| CartPole-v1/length | mean | sign_flip | 1 | DQNAvg | 10 |" in text and "**behind**" in text
    with open(os.path.join(out, "attacks.csv")) as f:
        rows = {(r["row"], r["algorithm"]): r for r in csv.DictReader(f)}
    flipped = rows[("CartPole-v1/length/K=10/mean/sign_flip/1", "DQNAvg")]
    assert float(flipped["minimum_mean"]) == 0.0  # the attacker's own environment
    assert flipped["nonfinite_seeds"] == "0"
    assert float(flipped["honest_minimum_mean"]) == pytest.approx(float(
        written["lines"][("CartPole-v1/length/K=10/mean/sign_flip/1", "DQNAvg")]["compared_minimum"]))


def test_status_says_the_cost_and_trains_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(loop, "run", lambda *a, **k: pytest.fail("nothing may train"))
    rows = "CartPole-v1/length/K=10/mean/none/0,CartPole-v1/length/K=10/mean/sign_flip/1"
    commands.main(["reproduce", "attacks", "--rows", rows, "--status", "--out", str(tmp_path)])
    printed = capsys.readouterr().out
    assert "attacks in" in printed and "2 not started (of 2 requested rows)" in printed
    assert printed.count("fedrdqn seeds 0-10: to run:") == 2 and "on a CPU" in printed and "on a GPU" in printed
    assert not os.listdir(tmp_path)


def test_a_wildcard_names_a_slice_of_the_tables_rows_in_its_order():
    table = get_table("attacks")
    acrobot = plan.select_rows(table, ["Acrobot-v1/*"])
    assert len(acrobot) == 52 and all(row.env_name == "Acrobot-v1" for row in acrobot)
    two = plan.select_rows(table, ["*/K=10/*/*/2", "CartPole-v1/length/K=10/mean/none/0"])
    assert [row.key for row in two] == [row.key for row in table.rows if row.key.endswith("/2")
                                        or row.key == "CartPole-v1/length/K=10/mean/none/0"]
    assert len(two) == 1 + 2 * 4 * 4  # the two tasks' 4 rules x 4 attacks at 2 attackers, and one named row
    with pytest.raises(ValueError, match=r"unknown attacks rows \['LunarLander-v3/\*'\]"):
        plan.select_rows(table, ["LunarLander-v3/*", "Acrobot-v1/*"])


# -- a user's own rule beside the library's ---------------------------------------------------------------

@pytest.fixture
def middle_60(monkeypatch):
    """The trimmed mean of the middle 60% as a user registers it (docs/own_algorithm.md), for this test only."""
    rule = aggregation.Aggregator(
        "middle_60", lambda server: functools.partial(aggregation.federated_trimmed_mean, trim=0.2), robust=True)
    monkeypatch.setitem(aggregation.AGGREGATORS.entries, rule.name, rule)
    monkeypatch.setitem(aggregation.AGGREGATORS.origins, rule.name, "a test")
    return rule.name


def test_a_registered_rule_is_requested_as_the_librarys_rules_are(middle_60, tmp_path, capsys, monkeypatch):
    built_in = plan.select_rows(get_table("attacks"), ["CartPole-v1/*/median/*"])
    request = plan.Request.of("attacks", rows=["CartPole-v1/*/middle_60/*"]).plan()
    assert [row.key for row in request.rows] == [row.key.replace("/median/", "/middle_60/") for row in built_in]
    for row in request.rows:
        [(_, config, grid, _)] = request.programs[row.key]
        assert (config.aggregation, config.attackers) == ("middle_60", row.attackers)
        assert config.attack == (row.attack if row.attackers else core_attacks.ATTACK.default)
        assert grid == {"omega": [0.0, 0.05]}
    assert len(get_table("attacks").rows) == 104  # the declared table stays as it is
    # A whole key names it too, on the command line; --status plans it and trains nothing.
    monkeypatch.setattr(loop, "run", lambda *a, **k: pytest.fail("nothing may train"))
    commands.main(["reproduce", "attacks", "--rows", "Acrobot-v1/length/K=10/middle_60/noise/2", "--status",
                   "--out", str(tmp_path)])
    assert "1 not started (of 1 requested rows)" in capsys.readouterr().out
    # A rule nobody registered is refused before anything compiles, naming the registered ones.
    with pytest.raises(ValueError, match=r"unknown aggregation rule\(s\) \['middle_70'\].*'middle_60'"):
        plan.Request.of("attacks", rows=["CartPole-v1/length/K=10/middle_70/none/0"]).plan()
    with pytest.raises(ValueError, match="attacks table only"):
        with_rules(get_table("table1"), ["middle_60"])


def test_a_users_rule_is_reported_beside_the_librarys_where_it_is_not_registered(tmp_path):
    """The report reads every rule's rows under its directory, so that `--report-only` anywhere rebuilds the
    table a user's rule ran in: judged as the library's rules are, against its own row without attackers and
    against the mean."""
    out, prefix = str(tmp_path), "CartPole-v1/length/K=10"
    _write_row(out, f"{prefix}/mean/none/0", {"DQNAvg": BASE, "FedRDQN (ω=0.05)": BASE})
    _write_row(out, f"{prefix}/middle_60/none/0", {"DQNAvg": BASE + 2.0, "FedRDQN (ω=0.05)": BASE})
    attacked = BASE - 50.0
    attacked[:, 0] = 0.0
    _write_row(out, f"{prefix}/middle_60/sign_flip/1", {"DQNAvg": attacked, "FedRDQN (ω=0.05)": BASE + 2.0},
               ATTACKER)
    paths = report.write_outputs(get_table("attacks"), out)["paths"]
    with open(os.path.join(out, "attacks_comparisons.csv")) as f:
        lines = {(line["row"], line["robust"]): line for line in csv.DictReader(f)}
    cost = lines[(f"{prefix}/middle_60/none/0", "DQNAvg")]
    assert (cost["kind"], cost["baseline"], cost["higher"], cost["verdict"]) == (
        attacks.COST, f"{prefix}/mean/none/0", "10", stats.AHEAD)
    hit = lines[(f"{prefix}/middle_60/sign_flip/1", "DQNAvg")]
    assert (hit["kind"], hit["baseline"], hit["lower"], hit["verdict"]) == (
        attacks.ATTACK, f"{prefix}/middle_60/none/0", "10", stats.BEHIND)
    # Against its own row without attackers (BASE + 2), over the honest agents 1-9, as for a built-in rule.
    assert float(hit["minimum_median_difference"]) == -52.0
    assert lines[(f"{prefix}/middle_60/sign_flip/1", "FedRDQN (ω=0.05)")]["verdict"] == stats.AHEAD
    text = open(os.path.join(out, "attacks.md")).read()
    assert "| CartPole-v1/length | middle_60 | sign_flip | 1 | DQNAvg | 10 |" in text
    assert "Beyond the library's rules: middle_60" in text
    assert os.path.getsize(os.path.join(out, "attacks.png")) > 10_000 and len(paths) == 4
