"""`fedjax-rl reproduce`: the harness end to end on a tiny budget (2 CartPole rows, 1 tuning + 2
reported seeds, 300 steps per agent, an 8-unit network), interrupted inside its second row and
resumed; the written tables against the per-run metrics files; settings checked before compiling."""

import copy
import csv
import io
import json
import os
import shutil

import numpy as np
import pytest

from fedjax_rl import envs
from fedjax_rl.analysis import aggregate, judge, power, stats
from fedjax_rl.cli import commands, reproduce_command
from fedjax_rl.reproduce import costs, harness, legends, paper, plan, report, row_records, seed_pieces, status, tables
from fedjax_rl.training import loop, machine
from fedjax_rl.training.run_directory import RunDirectory

ROWS = ["CartPole-v1/length", "CartPole-v1/masscart"]
TINY = dict(rows=ROWS, num_seeds=2, tuning_seeds=1, omegas=[0.05, 0.2], budget="0.006", progress=False,
            agent_overrides=dict(hidden_sizes=(8,), learning_starts=50, train_freq=4, gradient_steps=1),
            train_overrides=dict(sweep_points=3, eval_episodes=2), run_batch=3)  # 9 runs: 3 batches of 3

# The same request, plus a row never started.
STATUS_REQUEST = {**{k: v for k, v in TINY.items() if k != "progress"}, "rows": [*ROWS, "Acrobot-v1/gravity"]}


class Interrupted(RuntimeError):
    pass


@pytest.fixture(scope="module")
def reproduced(tmp_path_factory):
    """Run 1 stops after the second row's first block; run 2 resumes; run 3 finds everything done."""
    out = str(tmp_path_factory.mktemp("reproduce"))
    real_run = loop.run
    calls = []

    def interrupting_run(config, *args, **kwargs):
        calls.append(("run1", config.physics))
        on_block = kwargs["on_block"]
        if config.physics == ("masscart",):
            def stop_after_first(done, total):
                on_block(done, total)
                if done == 1:
                    raise Interrupted("simulated interruption after block 1")
            kwargs["on_block"] = stop_after_first
        return real_run(config, *args, **kwargs)

    def counting_run(tag):
        def run(config, *args, **kwargs):
            calls.append((tag, config.physics))
            return real_run(config, *args, **kwargs)
        return run

    mp = pytest.MonkeyPatch()
    try:
        mp.setattr(loop, "run", interrupting_run)
        with pytest.raises(Interrupted):
            harness.reproduce("table1", out, **TINY)
        first_row_done = os.path.exists(os.path.join(out, "table1", "CartPole-v1__length", "row.json"))
        second_row_done = os.path.exists(os.path.join(out, "table1", "CartPole-v1__masscart", "row.json"))
        # Read from the files alone: a status that ran anything would show up in `calls`.
        status_interrupted = status.rows("table1", out, **STATUS_REQUEST)
        mp.setattr(loop, "run", counting_run("run2"))
        result = harness.reproduce("table1", out, **TINY)
        mp.setattr(loop, "run", counting_run("run3"))
        again = harness.reproduce("table1", out, **TINY)
        status_done = status.rows("table1", out, **STATUS_REQUEST)
    finally:
        mp.undo()
    return dict(out=out, calls=calls, result=result, again=again, first_row_done=first_row_done,
                second_row_done=second_row_done, status_interrupted=status_interrupted, status_done=status_done)


def test_interrupted_reproduce_resumes_without_recomputing(reproduced):
    assert reproduced["first_row_done"] and not reproduced["second_row_done"]
    # Run 2 trains only the unfinished row, run 3 nothing.
    assert reproduced["calls"] == [("run1", ("length",)), ("run1", ("masscart",)), ("run2", ("masscart",))]
    rows = reproduced["result"]["rows"]
    assert rows["CartPole-v1/length"]["resumed_blocks"] == 0
    # The interrupted row continued from its checkpoint (1 of its 3 blocks), not from the start.
    assert rows["CartPole-v1/masscart"]["resumed_blocks"] == 1
    # Its wall time counts the interrupted process too (carried in the checkpoint).
    assert rows["CartPole-v1/masscart"]["wall_s"] > rows["CartPole-v1/masscart"]["wall_s_this_process"] > 0
    assert rows["CartPole-v1/masscart"]["configs"]["fedrdqn"]["config"]["steps_per_agent"] == 300
    assert rows["CartPole-v1/masscart"]["run_batch"] == {"fedrdqn": 3}
    assert reproduced["again"]["rows"] == rows
    for key in ROWS:  # finished rows keep their metrics, not their (large) checkpoints
        env, param = key.split("/")
        assert not os.path.exists(os.path.join(reproduced["out"], "table1", f"{env}__{param}", "fedrdqn", "checkpoint.npz"))


def test_status_reads_where_each_row_stands(reproduced, capsys):
    interrupted = {r["row"]: r for r in reproduced["status_interrupted"]}
    assert interrupted["CartPole-v1/length"]["state"] == "finished"
    assert interrupted["CartPole-v1/length"]["wall_s"] == reproduced["result"]["rows"]["CartPole-v1/length"]["wall_s"]
    masscart = interrupted["CartPole-v1/masscart"]
    assert masscart["state"] == "in progress"
    [program_status] = masscart["programs"]  # stopped after its first of 3 blocks, as the fixture interrupts it
    assert (program_status["program"], program_status["state"], program_status["blocks_done"], program_status["num_blocks"]) == (
        "FedRDQN", "partial", 1, 3)
    assert program_status["wall_s"] > 0
    assert interrupted["Acrobot-v1/gravity"]["state"] == "not started"
    assert {r["row"]: r["state"] for r in reproduced["status_done"]} == {
        "Acrobot-v1/gravity": "not started", "CartPole-v1/length": "finished", "CartPole-v1/masscart": "finished"}

    lines = status.lines("table1", "OUT", reproduced["status_interrupted"])
    assert lines[0] == "table1 in OUT: 1 finished, 1 in progress, 1 not started (of 3 requested rows)"
    [masscart_line] = [line for line in lines if "CartPole-v1/masscart" in line]
    assert masscart_line.startswith("  CartPole-v1/masscart: in progress: FedRDQN 1/3 blocks (")
    assert masscart_line.endswith("h of training left)")

    # The command line's request is the paper's settings, not the tiny ones these rows were computed with.
    assert commands.main(["reproduce", "table1", "--rows", "CartPole-v1/length", "--out", reproduced["out"], "--status"]) == 0
    out = capsys.readouterr().out
    # The number of reported seeds is not among them: a row grows by new seeds.
    assert "CartPole-v1/length: finished with other settings ['agent_overrides', 'budget', 'omegas', " in out
    assert "wrote" not in out  # nothing rebuilt


def test_a_program_run_alone_is_the_one_reproduce_runs_and_is_read_back(reproduced, tmp_path):
    # One row's program in its own call (as `reproduce --program` runs it, in its own process):
    # the same numbers as the program the fixture's reproduce ran, and a reproduce of that row after
    # it trains nothing (every block read back from the finished program).
    request = {k: v for k, v in TINY.items() if k not in ("rows", "progress")}
    with pytest.raises(ValueError, match=r"program must be one of \['fedrdqn'\] for table1, got 'ddpgavg2'"):
        harness.run_program("table1", str(tmp_path), ROWS[0], "ddpgavg2", **request)
    [alone] = harness.run_program("table1", str(tmp_path), ROWS[0], "fedrdqn", progress=False, **request)
    together = RunDirectory.read_metrics(os.path.join(reproduced["out"], "table1", "CartPole-v1__length", "fedrdqn", "omega=0.2"))
    np.testing.assert_array_equal(alone["final"]["local_returns"][2], np.asarray(together["final"]["local_returns"]))
    row = harness.reproduce("table1", str(tmp_path), **{**TINY, "rows": ROWS[:1]})["rows"][ROWS[0]]
    assert row["resumed_blocks"] == 3 and row["wall_s"] == alone["timing"]["wall_s"]
    assert row["algorithms"] == reproduced["result"]["rows"][ROWS[0]]["algorithms"]


def test_status_line_names_a_pending_final_evaluation():
    # Every block trained, the final evaluation not yet written: no "time left" estimate of 0.0 h.
    def program_state(label, name, blocks_done, wall_s):
        piece = {"seeds": [0, 6], "state": "partial", "blocks_done": blocks_done, "wall_s": wall_s}
        return {"program": label, "name": name, "state": "partial", "num_blocks": 25, "seeds_held": 0,
                "blocks_done": blocks_done, "wall_s": wall_s, "pieces": [piece]}

    row_states = [{"row": "Ant-v4/front_right_leg", "state": "in progress",
               "programs": [program_state("FedRDDPG", "fedrddpg", 25, 9000.0), program_state("DDPGAvg(2)", "ddpgavg2", 5, 1000.0)]}]
    [_, line, *pieces] = status.lines("table2", "OUT", row_states)
    assert line == ("  Ant-v4/front_right_leg: in progress: FedRDDPG 25/25 blocks (9,000 s of training), "
                    "final evaluation pending; DDPGAvg(2) 5/25 blocks (1,000 s so far, about 1.1 h of training left)")
    assert pieces == ["    fedrddpg seeds 0-5: 25/25 blocks (9,000 s of training), final evaluation pending",
                      "    ddpgavg2 seeds 0-5: 5/25 blocks (1,000 s so far, about 1.1 h of training left)"]


def test_status_says_a_run_of_like_pieces_to_run_once():
    """One-seed pieces to run with one estimate are one line; a partial piece, a piece of another size
    or estimate, and a gap (a finished piece between) each break the run. The last line sums them."""
    cpu = (420.0, "AMD EPYC (1 of 2 cores): 2 runs x 30,000 steps in 420 s")

    def piece(first, stop, state="to run", estimate=cpu):
        return {"seeds": [first, stop], "state": state, "estimate": {"cpu": estimate, "gpu": None},
                "blocks_done": 0, "wall_s": None}

    pieces = [piece(0, 1, "partial"), piece(1, 2), piece(2, 3), piece(3, 4), piece(4, 5, "finished"), piece(5, 6),
              piece(6, 7), piece(7, 9), piece(9, 10, estimate=(3000.0, "another basis"))]
    program = {"program": "FedRDQN", "name": "fedrdqn", "state": "partial", "num_blocks": 20, "seeds_held": 0,
               "blocks_done": 0, "wall_s": None, "pieces": pieces}
    [_, _, *lines] = status.lines("attacks", "OUT", [{"row": "Acrobot-v1/x", "state": "in progress",
                                                       "programs": [program]}])
    each = f"about 7 min on a CPU ({cpu[1]}); no measurement on a GPU"
    assert lines == ["    fedrdqn seed 0: 0/20 blocks",
                     f"    fedrdqn seeds 1-3, 3 pieces of 1 seed: to run, each {each}",
                     f"    fedrdqn seeds 5-6, 2 pieces of 1 seed: to run, each {each}",
                     f"    fedrdqn seeds 7-8: to run: {each}",
                     "    fedrdqn seed 9: to run: about 50 min on a CPU (another basis); no measurement on a GPU",
                     # The pieces to run (the partial one aside) in all: 6 x 420 s + 3,000 s.
                     "  in all: 7 piece(s) to run: about 1.5 h on a CPU one after another; no measurement on a GPU"]


def test_status_sums_the_gpu_as_a_bound_and_counts_pieces_without_a_measurement():
    def piece(first, gpu):
        return {"seeds": [first, first + 1], "state": "to run", "blocks_done": 0, "wall_s": None,
                "estimate": {"cpu": None, "gpu": gpu}}

    program = {"program": "FedRDQN", "name": "fedrdqn", "state": "not started", "num_blocks": 20, "seeds_held": 0,
               "blocks_done": 0, "wall_s": None, "pieces": [piece(0, (600.0, "H200")), piece(1, None)]}
    lines = status.lines("attacks", "OUT", [{"row": "r", "state": "not started", "programs": [program]}])
    assert lines[-1] == ("  in all: 2 piece(s) to run: no measurement on a CPU; about 10 min on a GPU one after "
                         "another, far less side by side (1 without a measurement)")
    done = dict(program, state="finished", pieces=[])
    assert not status.lines("attacks", "OUT", [{"row": "r", "state": "in progress", "programs": [done]}])[-1].startswith(
        "  in all")


def test_an_estimate_reads_in_minutes_then_hours_and_never_as_zero():
    assert [costs.duration(s) for s in (0.0, 30.0, 59.9, 60.0, 600.0, 5399.0, 5400.0, 36000.0)] == [
        "under 1 min", "under 1 min", "under 1 min", "1 min", "10 min", "90 min", "1.5 h", "10.0 h"]
    # "about" qualifies a point estimate; "under 1 min" is a bound and takes none.
    assert [costs.about(s) for s in (59.9, 60.0, 5400.0)] == ["under 1 min", "about 1 min", "about 1.5 h"]


def test_tables_equal_the_metrics_files(reproduced):
    out = reproduced["out"]
    with open(os.path.join(out, "table1.csv")) as f:
        table = list(csv.DictReader(f))
    with open(os.path.join(out, "table1.md")) as f:
        markdown = f.read()
    assert "REDUCED BUDGET" in markdown and "Settings overridden" in markdown
    # The header states the steps each row ran (0.006 of CartPole's 50,000), not only the fraction.
    assert ("**REDUCED BUDGET**: 300 steps per agent (paper 50,000) in every row (requested fraction(s) 0.006 of "
            "the paper's RL-Zoo3 steps, rounded to whole evaluation blocks)") in markdown
    assert markdown.count("3 runs per vmap") == len(ROWS)
    assert {r["row"] for r in table} == set(ROWS)
    tuning = TINY["tuning_seeds"]
    for key in ROWS:
        env, param = key.split("/")
        directory = os.path.join(out, "table1", f"{env}__{param}")
        lines = {r["algorithm"]: r for r in table if r["row"] == key}
        assert set(lines) == {"DQNAvg", "FedRDQN (ω=0.05)", "FedRDQN (ω=0.2)"}
        tuning_minimum = {}
        for omega in (0.0, 0.05, 0.2):
            with open(os.path.join(directory, "fedrdqn", f"omega={omega:g}", "metrics.json")) as f:
                final = json.load(f)["final"]
            with open(os.path.join(directory, "fedrdqn", f"omega={omega:g}", "config.json")) as f:
                assert json.load(f)["agent"]["omega"] == omega
            average = np.asarray(final["local_average"], float)
            minimum = np.asarray(final["local_minimum"], float)
            assert len(average) == tuning + TINY["num_seeds"]
            line = lines["DQNAvg" if omega == 0 else f"FedRDQN (ω={omega:g})"]
            assert int(line["seeds"]) == TINY["num_seeds"]
            for name, values in (("average", average), ("minimum", minimum)):
                reported = values[tuning:]
                assert float(line[f"{name}_mean"]) == pytest.approx(reported.mean(), rel=1e-12, abs=1e-12)
                assert float(line[f"{name}_std"]) == pytest.approx(reported.std(), rel=1e-12, abs=1e-12)
                assert f"{reported.mean():.1f} ± {reported.std():.1f}" in markdown
            if omega:
                tuning_minimum[omega] = minimum[:tuning].mean()
        # The headline omega follows the rule on the tuning seeds only.
        best = max(tuning_minimum.values())
        chosen = min(w for w, v in tuning_minimum.items() if v == best)
        headline = [r for r in lines.values() if r["role"] == "headline"]
        assert len(headline) == 1 and float(headline[0]["omega"]) == chosen
        assert lines["DQNAvg"]["role"] == "baseline"
        [paper_row] = [r for r in paper.TABLE1 if r.key == key]
        assert float(lines["DQNAvg"]["paper_minimum"]) == paper_row.reported["DQNAvg"][1]
        record = reproduced["result"]["rows"][key]
        assert record["chosen_omega"] == chosen
        assert {"jax", "flax", "numpy"} <= set(record["versions"]) and record["machine"]["cores"] >= 1
        assert record["wall_s"] > 0
        # The budget as the command line spells it ("0.006", "paper") is recorded as the fraction it means.
        assert record["budget"]["fraction"] == record["request"]["budget"] == 0.006
    for name in ("table1_curves.png", "table1_sweeps.png"):
        assert os.path.getsize(os.path.join(out, name)) > 10_000


# --------------------------------------------------------------------------------------------------
# Reporting from the committed rows (results/): nothing trains.

RESULTS = os.path.join(os.path.dirname(__file__), "..", "results")


def _committed(table_name, directory):
    table = tables.get_table(table_name)
    return table, row_records.finished_rows(table, os.path.join(RESULTS, directory))


def test_paper_tables_are_transcribed():
    # Spot checks against shared/paper_tables.md, and the paper's one row against its own claim.
    rows = {r.key: r for r in paper.TABLE1 + paper.TABLE2}
    assert rows["Acrobot-v1/gravity"].reported == {"DQNAvg": (-90.2, -110.9), "FedRDQN": (-84.7, -95.2)}
    assert rows["Acrobot-v1/gravity"].spread == {"DQNAvg": (28.7, 47.5), "FedRDQN": (26.7, 30.7)}
    assert rows["Walker2d-v4/left_foot"].reported == {"DDPGAvg(2)": (3223.1, 3067.7), "FedRDDPG": (4279.0, 4210.2)}
    robust = {**{r.key: "FedRDQN" for r in paper.TABLE1}, **{r.key: "FedRDDPG" for r in paper.TABLE2}}
    against = [key for key, r in rows.items()
               if r.reported[robust[key]][1] < min(v[1] for label, v in r.reported.items() if label != robust[key])]
    assert against == ["MountainCar-v0/force"]  # FedRDQN -166.4 below DQNAvg -161.7
    assert rows["Ant-v4/back_left_leg"].paper_numbers("DDPGAvg(1)") == (None, None)  # not in the paper's table


def test_comparisons_are_the_paired_statistics_of_the_rows():
    table, records = _committed("table1", "table1_paper")
    every = report.comparisons(table, records)
    # One line per row, and for a row with confirmatory seeds (CartPole-v1 length: 8-27) a second on
    # its exploratory ones, which the dict below keeps.
    lines = {line["row"]: line for line in every}
    assert list(lines) == [r.key for r in paper.TABLE1]
    for line in every:
        rec = records[line["row"]]
        positions = [rec["seeds"]["reported"].index(i) for i in line["seed_indices"]]
        algs = rec["algorithms"]
        robust, base = ({metric: np.asarray(values)[positions] for metric, values in algs[name]["reported"].items()}
                        for name in (rec["headline"], "DQNAvg"))
        bounds = envs.return_range(rec["env_name"])  # cut to what the task allows, where it has one
        assert line["minimum"] == stats.difference(robust["minimum"], base["minimum"], paired=True, value_range=bounds)
        assert line["average"] == stats.difference(robust["average"], base["average"], paired=True, value_range=bounds)
        assert line["minimum_improvement"] == stats.probability_of_improvement(robust["minimum"], base["minimum"])
        assert line["margin"] == judge.equivalence_margin(rec["env_name"])
        # Five seeds decide nothing. Twenty can: on masscart's fresh seeds 15 of 20 tie at the cap, which
        # leaves 5 untied (3 higher, 2 lower), too few for the direction test and so for equivalence too:
        # inconclusive, as the whole table reads the same signs (counted as differences of 0, the ties put
        # the median's interval at [0, 0] and read it equivalent). LunarLander-v3's rows split 10 to 10
        # (gravity) and 9 to 11 (wind); MountainCar-v0 force's split 7 to 8 with 5 ties, and its 15 untied
        # differences' 90% interval [-3.0, +4.6] reaches past the task's margin of 4.5; gravity's split 8
        # to 12. Acrobot-v1's split 12 to 8 (length) and 10 to 10 (gravity), each untied median difference
        # within a few points of 0, inside the task's margin of 19.9.
        decided = {"Acrobot-v1/gravity": stats.EQUIVALENT, "Acrobot-v1/length": stats.EQUIVALENT,
                   "CartPole-v1/length": stats.INCONCLUSIVE, "CartPole-v1/masscart": stats.INCONCLUSIVE,
                   "LunarLander-v3/gravity": stats.INCONCLUSIVE, "LunarLander-v3/wind": stats.INCONCLUSIVE,
                   "MountainCar-v0/force": stats.INCONCLUSIVE, "MountainCar-v0/gravity": stats.INCONCLUSIVE}
        assert line["verdict"] == (stats.TOO_FEW if len(positions) < stats.MIN_SEEDS else decided[line["row"]])
    for key in decided:
        assert [line["seed_set"] for line in every if line["row"] == key] == ["confirmatory", "exploratory"]
    [masscart] = [line for line in every if (line["row"], line["seed_set"]) == ("CartPole-v1/masscart", "confirmatory")]
    assert (masscart["higher"], masscart["lower"], masscart["equal"]) == (3, 2, 15)
    assert (masscart["equivalence"].low, masscart["equivalence"].high) == (-500.0, 500.0)  # unbounded, cut to the range
    assert masscart["verdict"] == stats.pooled_signs([masscart["differences"]])["verdict"] == stats.INCONCLUSIVE
    [force_20] = [line for line in every if (line["row"], line["seed_set"]) == ("MountainCar-v0/force", "confirmatory")]
    assert force_20["equivalence"].low > -force_20["margin"] and force_20["equivalence"].high > force_20["margin"]
    # The paper's own sign, not its claim: in MountainCar force the paper has FedRDQN below DQNAvg
    # (-166.4 vs -161.7), and so do we on the CPU (mean -10.0), which therefore agrees.
    force = lines["MountainCar-v0/force"]
    assert force["paper_minimum_difference"] == pytest.approx(-4.7)
    assert force["minimum_mean"] == pytest.approx(-10.0, abs=0.05) and force["sign_agrees"] is True
    assert (force["higher"], force["lower"], force["equal"]) == (1, 3, 1)
    assert lines["Acrobot-v1/length"]["sign_agrees"] is False  # ours -18.7, the paper's +3.3
    # Acrobot's returns lie in [-500, 0]: the unbounded interval of 5 seeds is cut to +-500; LunarLander
    # has no range and keeps its own ends.
    assert (lines["Acrobot-v1/length"]["minimum"].low, lines["Acrobot-v1/length"]["minimum"].high) == (-500.0, 500.0)
    assert envs.return_range("LunarLander-v3") is None
    assert lines["LunarLander-v3/gravity"]["minimum"].low == -np.inf


def test_table2_reports_the_baseline_the_paper_does_not():
    table, records = _committed("table2", "table2_reduced")
    md, csv_rows, comparison_rows = report.table_lines(table, records)
    text = "\n".join(md)
    assert "The paper's table does not report DDPGAvg(1) (its figures do)." in text
    assert "| Hopper-v4/torso | DDPGAvg(1) | 2 | 181.2 ± 1.5 | 174.4 ± 5.8 | not in the paper's table | not in the paper's table |" in text
    assert "| Hopper-v4/torso | DDPGAvg(2) | 2 | 178.8 ± 2.3 | 173.4 ± 3.9 | 1946.3 ± 407.8 | 1387.3 ± 341.2 |" in text
    ddpg1 = [r for r in comparison_rows if r["baseline"] == "DDPGAvg(1)"]
    assert len(ddpg1) == 8 and all(r["paper_minimum_difference"] is None and r["sign_agrees"] is None for r in ddpg1)
    # Two reported seeds: no row gets a verdict; no distribution-free interval of two seeds is bounded.
    assert {r["verdict"] for r in comparison_rows} == {stats.TOO_FEW}
    front = [r for r in comparison_rows if r["row"] == "Ant-v4/front_right_leg" and r["baseline"] == "DDPGAvg(1)"][0]
    assert (front["minimum_low"], front["minimum_high"]) == (-np.inf, np.inf)
    assert front["minimum_median_difference"] == pytest.approx((369.4 + 744.7) / 2, abs=0.05)
    assert front["coverage_at_least"] == 1.0 and front["confidence"] == 0.95
    # What to run next: both seeds higher, none tied: the fewest seeds whose power, averaged over the
    # effects these two signs leave likely, reaches 80% (power.expected_power).
    planned = power.planned_seeds(2, 0, 0)
    assert front["seeds_for_power"] == power.seeds_for_power([744.7, 369.4], [0.0, 0.0]) == planned
    assert power.expected_power(planned, 2, 0, 0) >= power.POWER > power.expected_power(planned - 1, 2, 0, 0)
    assert f"**too few seeds** (2 < 6) | about {planned} |" in text
    assert "FedRDDPG is ahead in 0, behind in 0, inconclusive in 0, too few seeds in 8 of 8 rows" in text


def test_a_table_beyond_the_paper_has_no_paper_columns_and_its_own_reference():
    """beyond_sac's report, on a row relabelled from the committed reduced Table 2 (DDPGAvg(1) as
    SACAvg, the FedRDDPG headline as FedRSAC's): no paper columns or paper wording, and the IQM
    across rows normalised by our own baseline's mean (the paper has no SAC numbers)."""
    _, reduced = _committed("table2", "table2_reduced")
    rec = copy.deepcopy(reduced["Hopper-v4/torso"])
    algs = rec["algorithms"]
    headline = rec["headline"].replace("FedRDDPG", "FedRSAC")
    rec["algorithms"] = {"SACAvg": algs["DDPGAvg(1)"], headline: algs[rec["headline"]]}
    rec.update(table="beyond_sac", headline=headline)
    table = tables.get_table("beyond_sac")
    records = {"Hopper-v4/torso": rec}
    md, csv_rows, comparison_rows = report.table_lines(table, records)
    text = "\n".join(md)
    assert "**Beyond the paper**" in text and "Source of the paper's numbers" not in text
    assert "paper Average" not in text and "sign agrees" not in text and paper.NOT_REPORTED not in text
    assert "The paper's claim carried to FedRSAC" in text and "(RL-Zoo3 1,000,000)" in text and "(paper " not in text
    sac = np.asarray(algs["DDPGAvg(1)"]["reported"]["minimum"])
    random_return = envs.random_return("Hopper-v4", ("torso",))
    scores = report.normalised_scores(table, records, "SACAvg", "minimum")
    np.testing.assert_allclose(scores["Hopper-v4/torso"], (sac - random_return) / (sac.mean() - random_return))
    [minimum, average] = report.aggregates(table, records)
    assert minimum["rows"] == average["rows"] == ["Hopper-v4/torso"]  # the cross-row summary is not empty
    assert "| Minimum | SACAvg | 1 x 2 |" in text and "our SACAvg's mean return" in text


def test_normalised_scores_run_from_random_to_the_papers_baseline():
    table, records = _committed("table1", "table1_paper")
    scores = report.normalised_scores(table, records, "DQNAvg", "minimum")
    cartpole = records["CartPole-v1/length"]["algorithms"]["DQNAvg"]["reported"]["minimum"]
    np.testing.assert_allclose(scores["CartPole-v1/length"], (np.asarray(cartpole) - 22.502) / (266.5 - 22.502))
    # LunarLander's gravity row runs without wind, so its random policy is the windless one.
    assert envs.random_return("LunarLander-v3", ("gravity",)) == -186.210
    assert envs.random_return("LunarLander-v3", ("wind",)) == envs.get("LunarLander-v3").random_return
    lander = records["LunarLander-v3/gravity"]["algorithms"]["DQNAvg"]["reported"]["average"]
    np.testing.assert_allclose(report.normalised_scores(table, records, "DQNAvg", "average")["LunarLander-v3/gravity"],
                               (np.asarray(lander) + 186.210) / (152.9 + 186.210))
    # The paper's own FedRDQN on the same scale, e.g. MountainCar force (-166.4 + 200) / (-161.7 + 200).
    paper_minimum = [(r.reported["FedRDQN"][1] - envs.random_return(r.env_name, (r.param,)))
                     / (r.reported["DQNAvg"][1] - envs.random_return(r.env_name, (r.param,))) for r in paper.TABLE1]
    assert paper_minimum[-1] == pytest.approx(33.6 / 38.3)
    assert report.paper_robust_iqm(table, list(records), "minimum") == pytest.approx(np.mean(sorted(paper_minimum)[2:6]))
    [minimum_vs_dqnavg, _] = report.aggregates(table, records)
    assert minimum_vs_dqnavg["metric"] == "minimum" and minimum_vs_dqnavg["rows"] == [r.key for r in paper.TABLE1]
    robust = report.normalised_scores(table, records, "headline", "minimum")
    assert minimum_vs_dqnavg["aggregate"] == aggregate.stratified_iqm([scores[k] for k in robust], list(robust.values()))


def test_report_only_rebuilds_the_committed_tables_without_training(tmp_path, monkeypatch, capsys):
    def no_run(*args, **kwargs):
        raise AssertionError("nothing may train")

    monkeypatch.setattr(loop, "run", no_run)
    out = tmp_path / "t1"
    shutil.copytree(os.path.join(RESULTS, "table1_reduced"), out)
    for name in ("table1.md", "table1.csv", "table1_comparisons.csv"):
        (out / name).unlink()
    assert commands.main(["reproduce", "table1", "--out", str(out), "--report-only"]) == 0
    assert "wrote" in capsys.readouterr().out
    for name in ("table1.md", "table1.csv", "table1_comparisons.csv"):  # the committed files are what it writes
        with open(os.path.join(RESULTS, "table1_reduced", name)) as f:
            assert (out / name).read_text() == f.read(), name
    with pytest.raises(SystemExit, match="no finished table2 rows"):
        commands.main(["reproduce", "table2", "--out", str(out), "--report-only"])


def test_finished_rows_with_other_settings_are_refused(reproduced):
    with pytest.raises(ValueError, match=r"different settings \['budget'\]"):
        harness.reproduce("table1", reproduced["out"], **{**TINY, "budget": 0.01})
    # One program of such a row, too: it would replace a program the row's record was computed from.
    request = {k: v for k, v in TINY.items() if k not in ("rows", "progress")}
    with pytest.raises(ValueError, match=r"different settings \['budget'\]"):
        harness.run_program("table1", reproduced["out"], ROWS[0], "fedrdqn", **{**request, "budget": 0.01})


def test_budget_rounds_to_whole_evaluation_blocks():
    assert plan.budget_steps("fedrdqn", "CartPole-v1", 1.0) == (50_000, 25)  # RL-Zoo3, 20 evaluations
    assert plan.budget_steps("fedrdqn", "CartPole-v1", 0.1) == (5_000, 2)
    assert plan.budget_steps("fedrdqn", "MountainCar-v0", 0.05) == (6_000, 3)
    assert plan.budget_steps("fedrdqn", "CartPole-v1", 1e-6) == (100, 1)
    assert plan.parse_budget("paper") == 1.0
    for bad in ("0", "1.5", "half", "-0.1"):
        with pytest.raises(ValueError, match="budget must be 'paper' or a fraction in \\(0, 1\\]"):
            plan.parse_budget(bad)
    # Whole rounds of the full budget first: 50,000 // 384 = 130 rounds, 5% of them 6.5, rounded to 6.
    assert plan.budget_steps("fedrdqn", "CartPole-v1", 0.05, sync_every=384) == (2304, 1)


def test_a_requests_grids_are_checked_at_their_bounds_and_recorded_only_where_set():
    """omega in (0, 1] and p in [0, 1), distinct, sorted; the row's record of a request names challengers
    and `new_seeds_at` only where the request has them, so a row run without them reads as the same."""
    assert plan.check_omegas([1.0, 0.1]) == (0.1, 1.0)
    for bad in ([], [0.0], [1.5], [0.1, 0.1]):
        with pytest.raises(ValueError, match="omega"):
            plan.check_omegas(bad)
    levels = tables.get_table("heterogeneity")
    assert plan.check_max_rates(levels, None) is None
    assert plan.check_max_rates(levels, [0.5, 0.0, 0.25]) == (0.0, 0.25, 0.5)
    for bad in ([], [1.0], [-0.1], [0.2, 0.2]):
        with pytest.raises(ValueError, match=r"max_rates must be distinct heterogeneity levels p in \[0, 1\)"):
            plan.check_max_rates(levels, bad)
    request = dict(budget=1.0, num_seeds=5, tuning_seeds=3, omegas=[0.1], seed=0, agent_overrides=None,
                   train_overrides=None)
    assert set(plan.request_record(**request)) == {"budget", "num_seeds", "tuning_seeds", "omegas", "seed",
                                                   "agent_overrides", "train_overrides"}
    record = plan.request_record(**request, challengers=["td3avg", "fedrdqn_min"], new_seeds_at="chosen")
    assert record["challengers"] == ["fedrdqn_min", "td3avg"] and record["new_seeds_at"] == "chosen"


def test_reproduce_set_is_parsed_by_the_tables_declarations():
    assert reproduce_command.agent_overrides("table2", ["learning_starts=1000", "hidden_sizes=64,64"]) == dict(
        learning_starts=1000, hidden_sizes=(64, 64))
    assert reproduce_command.agent_overrides("table1", ["batch_size=32"]) == dict(batch_size=32)


def test_bad_requests_fail_before_compiling(tmp_path, monkeypatch):
    def no_run(*args, **kwargs):
        raise AssertionError("nothing may train")

    monkeypatch.setattr(loop, "run", no_run)
    with pytest.raises(ValueError, match="unknown table1 rows \\['CartPole-v1/gravity'\\]; allowed: Acrobot-v1/gravity"):
        harness.reproduce("table1", str(tmp_path), rows=["CartPole-v1/gravity"])
    with pytest.raises(ValueError, match="omegas must be distinct values in \\(0, 1\\]"):
        harness.reproduce("table1", str(tmp_path), omegas=[0.0, 0.1])
    with pytest.raises(ValueError, match="tuning_seeds must be >= 1"):
        harness.reproduce("table1", str(tmp_path), tuning_seeds=0)
    with pytest.raises(ValueError, match="table must be one of"):
        harness.reproduce("table3", str(tmp_path))
    # Table 2's robots are resolved lazily: until they are registered the error names what is missing.
    with pytest.raises(SystemExit, match="unknown table1 agent settings \\['epsilon'\\] for --set; allowed: .*learning_starts"):
        commands.main(["reproduce", "table1", "--set", "epsilon=0.1", "--out", str(tmp_path), "--no-progress"])
    with pytest.raises(SystemExit, match="learning_starts"):
        commands.main(["reproduce", "table2", "--set", "learning_starts=-5", "--out", str(tmp_path), "--no-progress"])
    with pytest.raises(SystemExit, match="--program runs one program of one row: give exactly one --rows"):
        commands.main(["reproduce", "table1", "--program", "fedrdqn", "--out", str(tmp_path), "--no-progress"])
    with pytest.raises(SystemExit, match="program must be one of \\['fedrdqn'\\] for table1, got 'ddpgavg2'"):
        commands.main(["reproduce", "table1", "--rows", "CartPole-v1/length", "--program", "ddpgavg2", "--out", str(tmp_path)])
    if not envs.known("Ant-v4"):
        with pytest.raises(SystemExit, match="table2 row Ant-v4/back_left_leg cannot run .*Ant-v4.*MuJoCo"):
            commands.main(["reproduce", "table2", "--out", str(tmp_path), "--no-progress"])
    assert not os.listdir(tmp_path)


class FakeClock:
    """tqdm's clock, advanced by hand: the rate tests then know their answer exactly."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += seconds


@pytest.fixture
def clock(monkeypatch):
    import tqdm.std

    fake = FakeClock()
    monkeypatch.setattr(tqdm.std, "time", fake)  # tqdm.std does `from time import time`
    return fake


@pytest.mark.parametrize("smoothing", [0.3, 0.0])  # tqdm's default EMA rate, and the plain average
def test_resumed_blocks_do_not_count_as_speed(smoothing, clock):
    from tqdm import tqdm

    bar = tqdm(total=20, file=io.StringIO(), mininterval=0.0, smoothing=smoothing)
    harness.begin_program(bar, 10)  # a checkpoint held 10 blocks
    clock.advance(2.0)
    bar.update(1)  # one block really computed, in 2 s
    rate = bar.format_dict["rate"] or (bar.n - bar.format_dict["initial"]) / bar.format_dict["elapsed"]
    assert bar.n == 11
    assert rate == pytest.approx(0.5)  # counting the 10 resumed blocks would give 11 / 2 s


def test_a_final_evaluation_does_not_count_as_the_next_programs_speed(clock):
    from tqdm import tqdm

    bar = tqdm(total=4, file=io.StringIO(), mininterval=0.0)  # tqdm's default smoothed rate, as reproduce's bar
    harness.begin_program(bar, 0)  # program 1 starts
    clock.advance(1.0)
    bar.update(1)  # its only block
    clock.advance(100.0)  # its final evaluation
    harness.begin_program(bar, 0)  # program 2 starts
    clock.advance(1.0)
    bar.update(1)
    # Two 1 s blocks: 1 block/s. Counting the evaluation would give about 0.02 (the EMA of 1/1 and 1/101).
    assert bar.format_dict["rate"] == pytest.approx(1.0)
    assert bar.format_dict["elapsed"] == pytest.approx(102.0)  # the display's elapsed time is still wall time


def test_progress_bar_names_row_program_steps_and_final_evaluation(tmp_path, monkeypatch):
    import tqdm.auto

    postfixes = []

    class RecordingBar(tqdm.auto.tqdm):
        def set_postfix_str(self, s="", refresh=True):
            postfixes.append(s)
            super().set_postfix_str(s, refresh)

    def blocks_without_training(config, *args, on_block, **kwargs):
        for done in range(config.num_evals + 1):  # 0: what a checkpoint holds, then every block
            on_block(done, config.num_evals)
        raise Interrupted("stop where the final evaluation would run")

    monkeypatch.setattr(tqdm.auto, "tqdm", RecordingBar)
    monkeypatch.setattr(loop, "run", blocks_without_training)
    with pytest.raises(Interrupted):
        harness.reproduce("table1", str(tmp_path), **{**TINY, "rows": ROWS[:1], "progress": True})
    runs = "3 seeds (1 tuning) x 3 omega(s)"  # omega 0 (DQNAvg) and the two requested
    assert postfixes == [f"{runs}, step 0/300 per agent", f"{runs}, step 100/300 per agent",
                         f"{runs}, step 200/300 per agent", f"{runs}, step 300/300 per agent, final evaluation"]


def test_a_pieces_progress_names_its_own_seeds_not_the_rows():
    # A piece counts its own seeds, not the row's: reported seed 5 alone holds no tuning seed.
    piece = lambda first, stop: seed_pieces.Piece("fedrdqn", first, stop)
    assert harness.seeds_trained(piece(0, 11), 1) == "11 seeds (1 tuning)"
    assert harness.seeds_trained(piece(5, 6), 1) == "1 seed (reported)"
    assert harness.seeds_trained(piece(0, 1), 1) == "1 seed (tuning)"
    assert harness.seeds_trained(piece(1, 4), 3) == "3 seeds (2 tuning)"
    assert harness.seeds_trained(piece(0, 2), 3) == "2 seeds (tuning)"


def test_row_machine_names_the_accelerator_before_its_host():
    cpu = dict(cpu="AMD EPYC 7B13", cores=2, cpu_isa=["sse4_2", "avx", "avx2", "fma"], backend="cpu")
    assert machine.summary(cpu) == "AMD EPYC 7B13 (2 cores, AVX2, cpu)"
    gpu = dict(cpu="Intel(R) Xeon(R) Processor", cores=16, cpu_isa=["avx2", "avx512f"], backend="gpu",
               gpu=["NVIDIA H100 80GB HBM3"])
    assert machine.summary(gpu) == "NVIDIA H100 80GB HBM3, host Intel(R) Xeon(R) Processor (16 cores, AVX-512)"
    # A piece pinned to one core of two (`reproduce --jobs 2`) ran on one: its speed says so.
    assert machine.summary(dict(cpu, cores=1, host_cores=2)) == "AMD EPYC 7B13 (1 of 2 cores, AVX2, cpu)"
    assert machine.summary(dict(cpu, host_cores=2)) == "AMD EPYC 7B13 (2 cores, AVX2, cpu)"


def test_a_row_names_every_machine_and_jax_its_pieces_ran_on():
    writer = dict(cpu="AMD EPYC 7B13", cores=2, cpu_isa=["avx2"], backend="cpu")
    versions = {"jax": "0.10.2"}
    assert legends.ran_on({"machine": writer, "versions": versions, "pieces": {}}) == \
        "AMD EPYC 7B13 (2 cores, AVX2, cpu), jax 0.10.2"  # no pieces
    cpu, gpu = "AMD EPYC 7B13 (1 of 2 cores, AVX2, cpu)", "NVIDIA H100 80GB HBM3, host Xeon (16 cores, AVX-512)"
    one = {"machine": writer, "versions": versions,
           "pieces": {"fedrdqn": [dict(seeds=[0, 2], machine=cpu), dict(seeds=[2, 3], machine=cpu)]}}
    assert legends.ran_on(one) == f"{cpu}, jax 0.10.2"  # where the pieces trained, not the row's writer
    several = {"machine": writer, "versions": versions, "pieces": {
        "fedrddpg": [dict(seeds=[0, 2], machine=gpu), dict(seeds=[2, 3], machine=cpu), dict(seeds=[3, 4], machine=cpu),
                     dict(seeds=[5, 6], machine=cpu)],
        "ddpgavg2": [dict(seeds=[0, 6], machine=None)]}}
    assert legends.ran_on(several) == (f"{gpu} (fedrddpg seeds 0-1), {cpu} (fedrddpg seeds 2-3, 5), "
                                       "a machine it did not record (ddpgavg2 seeds 0-5), jax 0.10.2")
    # Pieces run with different jax versions say which ran with which (a piece's own record first).
    several["pieces"]["fedrddpg"][0]["jax"] = "0.11.2"
    assert legends.ran_on(several) == (f"{gpu}, jax 0.11.2 (fedrddpg seeds 0-1), {cpu}, jax 0.10.2 (fedrddpg "
                                       "seeds 2-3, 5), a machine it did not record, jax 0.10.2 (ddpgavg2 seeds 0-5)")
    unrecorded = {"machine": writer, "versions": versions, "pieces": {"fedrdqn": [dict(seeds=[0, 4], machine=None)]}}
    assert legends.ran_on(unrecorded) == "AMD EPYC 7B13 (2 cores, AVX2, cpu), jax 0.10.2"


def test_a_rewritten_row_keeps_where_its_older_program_ran():
    """An older whole program's metrics record no machine; the row.json its own process wrote does.
    Writing the row again with new pieces beside it (on another machine) keeps that record."""
    trainer = dict(cpu="AMD EPYC", cores=2, cpu_isa=["avx2"], backend="cpu", jax="0.10.2")
    earlier = {"machine": trainer, "versions": {"jax": "0.10.2"},
               "pieces": {"fedrdqn": [dict(dir="", seeds=[0, 8], machine=None, wall_s=1.0)]}}
    inherited = harness._earlier_pieces(earlier, "fedrdqn")
    assert inherited == [dict(dir="", seeds=[0, 8], machine="AMD EPYC (2 cores, AVX2, cpu)", jax="0.10.2",
                              wall_s=1.0)]
    # Once written with pieces, a later write reads the piece's own entry back, not the new writer's machine.
    later = {"machine": dict(trainer, cpu="Other"), "versions": {"jax": "0.11.2"},
             "pieces": {"fedrdqn": inherited + [dict(dir="seeds_8-28", seeds=[8, 28], machine="GPU", jax="0.11.2")]}}
    assert harness._earlier_pieces(later, "fedrdqn")[0]["machine"] == "AMD EPYC (2 cores, AVX2, cpu)"
    assert harness._earlier_pieces(None, "fedrdqn") == []


# -- seed pieces -------------------------------------------------------------------------------------


def test_seed_keys_do_not_depend_on_the_runs_width():
    """What pieces rest on: seed index i gets the same key in a run of 3 seeds as in one of 40, and a
    run of seeds [a, b) gets exactly those keys (JAX's partitionable threefry, the default)."""
    import jax

    from fedjax_rl.training import program

    wide = jax.random.key_data(program.seed_keys(7, 40))
    np.testing.assert_array_equal(jax.random.key_data(program.seed_keys(7, 3)), wide[:3])
    np.testing.assert_array_equal(jax.random.key_data(program.seed_keys(7, 5, first=11)), wide[11:16])


def test_merged_runs_are_the_seed_axis_concatenated():
    a = {"curve": {"r": [[1, 2]], "x": [[0, 1]]}, "final": {"local_average": [5.0]}, "timing": {"wall_s": 2.0},
         "seed_indices": [0]}
    b = {"curve": {"r": [[3, 4], [5, 6]], "x": [[0, 1], [0, 1]]}, "final": {"local_average": [6.0, 7.0]},
         "timing": {"wall_s": 3.0}}
    merged = row_records.merge_runs([a, b])
    assert merged["curve"]["r"] == [[1, 2], [3, 4], [5, 6]] and merged["final"]["local_average"] == [5.0, 6.0, 7.0]
    assert merged["timing"]["wall_s"] == 5.0 and merged["seed_indices"] == [0, 0, 1]  # b predates seed_indices


@pytest.fixture(scope="module")
def in_pieces(reproduced, tmp_path_factory):
    """The fixture's first row again, its program as two pieces (seed 0, the tuning seed; then seeds
    1-2) run alone, then written as a row by `reproduce`, which trains nothing more."""
    out = str(tmp_path_factory.mktemp("pieces"))
    request = {k: v for k, v in TINY.items() if k not in ("rows", "progress")}
    first = harness.run_program("table1", out, ROWS[0], "fedrdqn", progress=False, piece=(0, 1), **request)
    second = harness.run_program("table1", out, ROWS[0], "fedrdqn", progress=False, piece=(1, 3), **request)
    calls = []
    mp = pytest.MonkeyPatch()
    real_run = loop.run
    mp.setattr(loop, "run", lambda *a, **k: calls.append(k.get("first_seed")) or real_run(*a, **k))
    try:
        row = harness.reproduce("table1", out, **{**TINY, "rows": ROWS[:1]})["rows"][ROWS[0]]
    finally:
        mp.undo()
    return dict(out=out, request=request, pieces=first + second, row=row, calls=calls)


def test_a_program_in_pieces_gives_the_whole_programs_numbers(reproduced, in_pieces):
    """Seeds 0 and 1-2 as two pieces (vmapped widths 3 and 6 runs, in batches of 3) against the whole
    program (9 runs, batches of 3): every per-seed number of the row equal. Measured bit-identical on
    the AMD EPYC development machine (default ISA and AVX2); the bound allowed is float32 rounding of
    returns in the hundreds, which another CPU's code generation could reach."""
    whole = reproduced["result"]["rows"][ROWS[0]]
    merged = in_pieces["row"]
    assert in_pieces["calls"] == []  # the row was written from the finished pieces alone
    assert merged["seeds"] == whole["seeds"]
    assert [p["seeds"] for p in merged["pieces"]["fedrdqn"]] == [[0, 1], [1, 3]]
    assert merged["pieces"]["fedrdqn"][0]["machine"] == machine.summary(machine.describe())
    for label, numbers in whole["algorithms"].items():
        for part in ("tuning", "reported"):
            for metric in ("average", "minimum"):
                np.testing.assert_allclose(merged["algorithms"][label][part][metric], numbers[part][metric],
                                           rtol=1e-5, err_msg=f"{label} {part} {metric}")
    assert merged["headline"] == whole["headline"]


def test_pieces_are_refused_before_compiling_when_they_overlap_or_differ(in_pieces, monkeypatch, tmp_path):
    def no_run(*args, **kwargs):
        raise AssertionError("nothing may compile")

    monkeypatch.setattr(loop, "run", no_run)
    out, request = in_pieces["out"], in_pieces["request"]
    with pytest.raises(ValueError, match=r"fedrdqn seeds 1-3 overlaps the finished fedrdqn seeds 1-2 in .*seeds_1-3; "
                                         r"no piece computes again"):
        harness.run_program("table1", out, ROWS[0], "fedrdqn", piece=(1, 4), **{**request, "num_seeds": 3})
    # At the boundary: a piece that shares only the finished piece's last seed (2) is refused too.
    with pytest.raises(ValueError, match=r"fedrdqn seeds 2-3 overlaps the finished fedrdqn seeds 1-2 in .*seeds_1-3; "):
        harness.run_program("table1", out, ROWS[0], "fedrdqn", piece=(2, 4), **{**request, "num_seeds": 3})
    # Other settings: the finished row refuses them first; without its row.json, its pieces do.
    other = {**request, "agent_overrides": dict(request["agent_overrides"], gradient_steps=2), "num_seeds": 3}
    with pytest.raises(ValueError, match=r"different settings \['agent_overrides'\]"):
        harness.run_program("table1", out, ROWS[0], "fedrdqn", piece=(3, 4), **other)
    unwritten = tmp_path / "unwritten"
    shutil.copytree(out, unwritten)
    (unwritten / "table1" / "CartPole-v1__length" / "row.json").unlink()
    with pytest.raises(ValueError, match=r"fedrdqn seed 3 would train with other settings than the finished fedrdqn "
                                         r"seed 0 in .*seeds_0-1 \(agent\.gradient_steps: 1 -> 2\)"):
        harness.run_program("table1", str(unwritten), ROWS[0], "fedrdqn", piece=(3, 4), **other)
    # --status says so, with what differs, and lists no piece "to run" that would be refused.
    row_states = status.rows("table1", str(unwritten), **{k: v for k, v in other.items() if k != "progress"},
                              rows=ROWS[:1])
    lines = status.lines("table1", str(unwritten), row_states)
    assert lines[1] == (f"  {ROWS[0]}: in progress: FedRDQN holds a finished run with other settings "
                        "(agent.gradient_steps: 1 -> 2): this request is refused before compiling; run it with those "
                        "settings (and the code that made them) or another --out")
    assert len(lines) == 2
    with pytest.raises(SystemExit, match="--piece FIRST:STOP is a piece of one program: give --program too"):
        commands.main(["reproduce", "table1", "--rows", ROWS[0], "--piece", "3:4", "--out", out])
    with pytest.raises(SystemExit, match=r"piece must be FIRST:STOP with 0 <= FIRST < STOP, got '4:3'"):
        commands.main(["reproduce", "table1", "--rows", ROWS[0], "--program", "fedrdqn", "--piece", "4:3", "--out", out])


def test_a_row_grows_by_new_seeds_without_recomputing_its_pieces(in_pieces, tmp_path, monkeypatch):
    """One more reported seed: status lists the one piece to run, with its estimated time from the
    row's own measured pieces; reproduce trains that piece alone (seed 3); the row keeps every number
    it had and adds the new seed's."""
    out = str(tmp_path / "grown")
    shutil.copytree(in_pieces["out"], out)
    request = {**TINY, "rows": ROWS[:1], "num_seeds": 3}
    [row_status] = status.rows("table1", out, **{k: v for k, v in request.items() if k != "progress"})
    [program_status] = row_status["programs"]
    assert (row_status["state"], program_status["seeds_held"]) == ("in progress", 3)
    [todo] = [p for p in program_status["pieces"] if p["state"] == "to run"]
    assert todo["seeds"] == [3, 4]
    # The closest measurement in size is the row's own first piece: 1 seed x 3 omegas, as the new one.
    first = in_pieces["row"]["pieces"]["fedrdqn"][0]
    seconds, basis = todo["estimate"][machine.describe()["backend"]]
    assert seconds == pytest.approx(first["wall_s"]) and basis.endswith(f"3 runs x 300 steps in {first['wall_s']:,.0f} s")

    calls = []
    real_run = loop.run
    monkeypatch.setattr(loop, "run", lambda *a, **k: calls.append((k["first_seed"], k["num_seeds"])) or real_run(*a, **k))
    grown = harness.reproduce("table1", out, **request)["rows"][ROWS[0]]
    assert calls == [(3, 1)]
    before = in_pieces["row"]["algorithms"]
    for label, numbers in grown["algorithms"].items():
        assert numbers["tuning"] == before[label]["tuning"]
        assert numbers["reported"]["minimum"][:2] == before[label]["reported"]["minimum"]
        assert len(numbers["reported"]["minimum"]) == 3
    assert [p["seeds"] for p in grown["pieces"]["fedrdqn"]] == [[0, 1], [1, 3], [3, 4]]
    assert grown["request"]["num_seeds"] == 3


def test_a_row_still_in_pieces_is_measured_by_its_finished_pieces(in_pieces, tmp_path):
    """Before a row is written (no row.json: pieces still to run), its finished pieces already time
    the pieces left, named by the cores they ran on."""
    out = tmp_path / "unwritten"
    shutil.copytree(in_pieces["out"], out)
    (out / "table1" / "CartPole-v1__length" / "row.json").unlink()
    request = {k: v for k, v in TINY.items() if k not in ("rows", "progress")}
    [row_status] = status.rows("table1", str(out), **{**request, "rows": ROWS[:1], "num_seeds": 3})
    [todo] = [p for p in row_status["programs"][0]["pieces"] if p["state"] == "to run"]
    first = in_pieces["row"]["pieces"]["fedrdqn"][0]
    here = machine.describe()
    seconds, basis = todo["estimate"][here["backend"]]
    assert seconds == pytest.approx(first["wall_s"])
    assert basis == f"{costs.machine_name(here)}: 3 runs x 300 steps in {first['wall_s']:,.0f} s"
    assert here["cores"] == len(os.sched_getaffinity(0))


def test_a_program_is_measured_on_the_machine_its_row_records_for_it(tmp_path):
    """A row written from pieces that trained elsewhere: a program whose metrics record no machine is
    timed on the machine the row.json records for it (a GPU's here, not the CPU that wrote the row),
    and left out where the row.json records none; a row.json without pieces (its one process trained
    every program) lends its own machine."""
    cpu = {"cpu": "AMD EPYC", "cores": 2, "backend": "cpu", "devices": ["cpu:0"]}
    # As a row.json records a piece's machine: machine.summary of the piece's own record.
    gpu_summary = machine.summary({"gpu": ["NVIDIA H200"], "cpu": "Intel(R) Xeon(R) Processor", "cores": 16,
                                   "backend": "gpu", "cpu_isa": ["avx2", "avx512f"]})
    config = {"env_name": "Hopper-v4", "engine": "c", "steps_per_agent": 50_000, "num_agents": 5}

    def write_row(name, pieces):
        row = tmp_path / "table2" / name
        for program, wall in (("fedrddpg", 788.0), ("ddpgavg2", 583.0)):
            (row / program).mkdir(parents=True)
            (row / program / "metrics.json").write_text(json.dumps(
                {"timing": {"wall_s": wall}, "final": {"local_average": [[0.0]] * 6}}))
        record = {"schema": row_records.ROW_SCHEMA, "table": "table2", "row": name.replace("__", "/"),
                  "machine": cpu, "wall_s": 0.0, "pieces": pieces,
                  "configs": {program: {"config": {**config, "algo": program}} for program in ("fedrddpg", "ddpgavg2")}}
        (row / "row.json").write_text(json.dumps(record))

    write_row("Hopper-v4__torso", {"fedrddpg": [{"dir": "", "seeds": [0, 6], "machine": gpu_summary, "wall_s": 788.0}],
                                    "ddpgavg2": [{"dir": "", "seeds": [0, 6], "machine": None, "wall_s": 583.0}]})
    write_row("Hopper-v4__thigh", {})
    found = {(m.row, m.program): (m.kind, m.machine, m.runs, m.wall_s) for m in costs.measurements([str(tmp_path)])}
    assert found == {
        ("Hopper-v4/torso", "fedrddpg"): ("gpu", gpu_summary, 6, 788.0),
        ("Hopper-v4/thigh", "fedrddpg"): ("cpu", "AMD EPYC (2 cores) (the row's machine)", 6, 788.0),
        ("Hopper-v4/thigh", "ddpgavg2"): ("cpu", "AMD EPYC (2 cores) (the row's machine)", 6, 583.0),
    }


def test_a_row_written_before_pieces_grows_by_new_seeds(reproduced, tmp_path, monkeypatch):
    """The committed Table 1 rows predate pieces: row.json lists no pieces and their program
    directories keep only the grid points' files, no finished.json. Such a row still counts its
    program as finished and grows by a new seed, training that seed alone."""
    out = tmp_path / "old"
    shutil.copytree(os.path.join(reproduced["out"], "table1", "CartPole-v1__length"),
                    out / "table1" / "CartPole-v1__length")
    row_path = out / "table1" / "CartPole-v1__length" / "row.json"
    old = json.loads(row_path.read_text())
    del old["pieces"], old["schema"]  # as a row written before either was recorded
    row_path.write_text(json.dumps(old))
    for name in ("finished.json", "checkpoint.npz"):
        (out / "table1" / "CartPole-v1__length" / "fedrdqn" / name).unlink(missing_ok=True)
    request = {**TINY, "rows": ROWS[:1], "num_seeds": old["request"]["num_seeds"] + 1}
    [row_status] = status.rows("table1", str(out), **{k: v for k, v in request.items() if k != "progress"})
    [program_status] = row_status["programs"]
    held = len(old["seeds"]["tuning"]) + len(old["seeds"]["reported"])
    assert program_status["seeds_held"] == held
    assert [p["seeds"] for p in program_status["pieces"] if p["state"] == "to run"] == [[held, held + 1]]

    calls = []
    real_run = loop.run
    monkeypatch.setattr(loop, "run", lambda *a, **k: calls.append((k["first_seed"], k["num_seeds"])) or real_run(*a, **k))
    grown = harness.reproduce("table1", str(out), **request)["rows"][ROWS[0]]
    assert calls == [(held, 1)]
    for label, numbers in grown["algorithms"].items():
        assert numbers["tuning"] == old["algorithms"][label]["tuning"]
        assert numbers["reported"]["minimum"][:-1] == old["algorithms"][label]["reported"]["minimum"]


def test_a_program_recording_no_first_seed_is_read_as_the_whole_program_from_seed_0(reproduced, tmp_path,
                                                                                   monkeypatch):
    """A program directory written before pieces records no first seed (its config.json, finished.json
    and grid points' config.json; metrics without seed indices): it is read as a run from seed index 0,
    a whole program (`records.UNRECORDED_BEFORE`). --status counts its seeds 0 to n-1 as finished and
    has seed n alone to run; a row written from it holds it as the piece of seeds 0 to n-1, with the
    numbers it had, and trains nothing."""
    row_path = tmp_path / "old" / "table1" / "CartPole-v1__length"
    shutil.copytree(os.path.join(reproduced["out"], "table1", "CartPole-v1__length"), row_path)
    (row_path / "row.json").unlink()  # the row is read from its program's directory alone
    program_dir = row_path / "fedrdqn"
    (program_dir / "checkpoint.npz").unlink(missing_ok=True)
    old = 0
    for path in program_dir.rglob("*.json"):
        record = json.loads(path.read_text())
        old += "first_seed" in record or "seed_indices" in record
        path.write_text(json.dumps({k: v for k, v in record.items() if k not in ("first_seed", "seed_indices")}))
    assert old >= 5  # config.json, finished.json and three grid points' files recorded them
    whole = reproduced["result"]["rows"][ROWS[0]]
    held = len(whole["seeds"]["tuning"]) + len(whole["seeds"]["reported"])
    request = {**TINY, "rows": ROWS[:1]}

    grown = {k: v for k, v in request.items() if k != "progress"}
    [row_status] = status.rows("table1", str(tmp_path / "old"), **{**grown, "num_seeds": TINY["num_seeds"] + 1})
    [program_status] = row_status["programs"]
    assert program_status["seeds_held"] == held
    assert [(p["seeds"], p["state"]) for p in program_status["pieces"]] == [([0, held], "finished"),
                                                                            ([held, held + 1], "to run")]

    def no_run(*args, **kwargs):
        raise AssertionError("the program's seeds are finished: nothing may train")

    monkeypatch.setattr(loop, "run", no_run)
    row = harness.reproduce("table1", str(tmp_path / "old"), **request)["rows"][ROWS[0]]
    assert [(p["dir"], p["seeds"]) for p in row["pieces"]["fedrdqn"]] == [("", [0, held])]
    assert row["seeds"] == whole["seeds"] and row["algorithms"] == whole["algorithms"]


def test_confirmatory_seeds_decide_and_the_exploratory_ones_are_reported_apart():
    """A Table 1 row grown by 20 fresh seeds (indices 8-27) beyond its 5 reported ones (3-7): the
    verdict, the counts and the whole-table line read the fresh seeds alone; the first five keep the
    line they had, marked exploratory."""
    table, records = _committed("table1", "table1_paper")
    key, other = "CartPole-v1/length", "CartPole-v1/masscart"

    def first_five(record):  # a row as its first program left it: reported seeds 3-7
        record = copy.deepcopy(record)
        record["seeds"]["reported"] = record["seeds"]["reported"][:5]
        for algorithm in record["algorithms"].values():
            algorithm["reported"] = {metric: values[:5] for metric, values in algorithm["reported"].items()}
        return record

    first = first_five(records[key])
    before = {line["baseline"]: line for line in report.comparisons(table, {key: first})}
    grown = copy.deepcopy(first)
    grown["seeds"]["reported"] = list(range(3, 28))
    rng = np.random.default_rng(0)
    fresh = rng.integers(300, 450, size=20).astype(float)  # +40 stays inside CartPole's [0, 500]
    for label, algorithm in grown["algorithms"].items():
        for metric in ("minimum", "average"):
            lift = 40.0 if label == grown["headline"] else 0.0  # the robust one higher on every fresh seed
            algorithm["reported"][metric] = list(algorithm["reported"][metric]) + list(fresh + lift)
    lines = report.comparisons(table, {key: grown})
    [confirmatory] = [line for line in lines if line["seed_set"] == row_records.CONFIRMATORY]
    [exploratory] = [line for line in lines if line["seed_set"] == row_records.EXPLORATORY]
    assert confirmatory["seed_indices"] == list(range(8, 28)) and confirmatory["seeds"] == 20
    assert (confirmatory["higher"], confirmatory["verdict"]) == (20, stats.AHEAD)
    assert exploratory["seed_indices"] == list(range(3, 8))
    assert exploratory["minimum"] == before["DQNAvg"]["minimum"] and exploratory["verdict"] == before["DQNAvg"]["verdict"]
    md, _, comparison_rows = report.table_lines(table, {key: grown})
    text = "\n".join(md)
    assert "| CartPole-v1/length | DQNAvg | 20 confirmatory (8-27) | 20 / 0 / 0 |" in text
    assert "| CartPole-v1/length | DQNAvg | 5 exploratory (3-7) |" in text
    assert "FedRDQN is ahead in 1, behind in 0, inconclusive in 0 of 1 rows" in text  # the confirmatory line alone
    assert "**Whole table** against DQNAvg: over 20 (task, seed) units" in text
    assert "**Whole table, confirmatory seeds alone** against DQNAvg: over 20 (task, seed) units" in text
    assert [row["seed_set"] for row in comparison_rows] == ["confirmatory", "exploratory"]
    # The task's other row without fresh seeds: its seeds 3-7 join the whole table as units of their own.
    md, _, _ = report.table_lines(table, {key: grown, other: first_five(records[other])})
    text = "\n".join(md)
    assert "**Whole table** against DQNAvg: over 25 (task, seed) units (2 rows of 1 tasks)" in text
    # ... and the confirmatory line reads only the grown row's fresh seeds: 20 units, 20 wins.
    assert ("**Whole table, confirmatory seeds alone** against DQNAvg: over 20 (task, seed) units (1 rows of 1 tasks), "
            "FedRDQN wins 20, loses 0, even 0") in text


def test_pieces_overlap_exactly_where_they_share_a_seed():
    # A finished piece of seeds 1-2 against pieces that end at its first seed, start at its last, hold
    # it, or only touch it; both ways round, as `ProgramOnDisk.check` asks it one way.
    from fedjax_rl.reproduce.seed_pieces import Piece

    finished = Piece("fedrdqn", 1, 3)
    for (first, stop), shares in (((0, 1), False), ((0, 2), True), ((2, 4), True), ((3, 5), False), ((1, 3), True),
                                  ((0, 5), True), ((2, 3), True)):
        piece = Piece("fedrdqn", first, stop)
        assert finished.overlaps(piece) == shares == piece.overlaps(finished), (first, stop)


def test_which_pieces_cover_a_program_and_which_are_left_by_hand():
    """A program's pieces held in memory, no directory read (the tests above get there by training pieces):
    `covered` tiles seed indices from 0 with finished pieces of the request's settings and grid point,
    `missing` resumes the unfinished ones first and splits every gap up to the total; ranges and grids
    are read and spelled as the rules say."""
    from fedjax_rl.reproduce import seed_pieces
    from fedjax_rl.reproduce.seed_pieces import Found, Piece, ProgramOnDisk

    whole = {"omega": [0.0, 0.1, 0.2]}

    def at(first, stop, finished=True, grid=whole, settings="mine"):
        return Found(Piece("fedrdqn", first, stop), f"p/{first}", {"grid": grid}, finished, {"settings": settings})

    pieces = (at(0, 2), at(2, 4, finished=False), at(5, 7), at(7, 8, settings="other"), at(10, 11, finished=False),
              at(12, 14))  # past the total of 10: not this request's to resume
    on_disk = ProgramOnDisk("p", "fedrdqn", 10, {"grid": whole}, {"settings": "mine"}, pieces)
    assert [f.piece for f in on_disk.covered()] == [Piece("fedrdqn", 0, 2)]
    assert [(p.first, p.stop) for p in on_disk.missing()] == [(2, 4), (4, 5), (7, 10)]
    assert [(p.first, p.stop) for p in on_disk.missing(2)] == [(2, 4), (4, 5), (7, 9), (9, 10)]
    assert ProgramOnDisk("p", "fedrdqn", 3, {}, {}, ()).missing() == [Piece("fedrdqn", 0, 3)]
    assert ProgramOnDisk("p", "fedrdqn", 4, {}, {}, ()).missing(3) == [Piece("fedrdqn", 0, 3), Piece("fedrdqn", 3, 4)]

    # Seeds 0-1 of the whole grid, 2-3 of the baseline and omega 0.2 alone (a confirmatory piece), 4-5 of
    # the whole grid: omega 0.2 is covered to 6 seeds, omega 0.1 to 2, the program as a whole to 6.
    parts = (at(0, 2), at(2, 4, grid={"omega": [0.0, 0.2]}), at(4, 6))
    on_disk = ProgramOnDisk("p", "fedrdqn", 6, {"grid": whole}, {"settings": "mine"}, parts)
    assert [f.piece.stop for f in on_disk.covered({"omega": 0.2})] == [2, 4, 6]
    assert [f.piece.stop for f in on_disk.covered({"omega": 0.1})] == [2]
    assert [f.piece.stop for f in on_disk.covered()] == [2, 4, 6] and on_disk.missing() == []
    assert not on_disk.is_mine(at(6, 8, grid={"omega": [0.3]}))

    assert seed_pieces.grid_fits(None, None) and seed_pieces.grid_fits({"omega": [0]}, {"omega": [0.0, 0.1]})
    assert not seed_pieces.grid_fits({"omega": [0.3]}, {"omega": [0.0, 0.1]})
    assert not seed_pieces.grid_fits(None, {"omega": [0.0]}) and not seed_pieces.grid_fits({"omega": [0.0]}, None)
    assert not seed_pieces.grid_fits({"max_rate": [0.5], "omega": [0.1]}, {"omega": [0.1], "max_rate": [0.5]})
    assert seed_pieces.holds(None, None) and seed_pieces.holds({"omega": [0.0, 0.2]}, {"omega": 0.2})
    assert not seed_pieces.holds({"omega": [0.0]}, {"omega": 0.2}) and not seed_pieces.holds(None, {"omega": 0.2})

    assert seed_pieces.parse_range("6:8") == (6, 8) and seed_pieces.parse_range("0:1") == (0, 1)
    for bad in ("8:6", "3:3", "-1:2"):
        with pytest.raises(ValueError, match="0 <= FIRST < STOP"):
            seed_pieces.parse_range(bad)
    for bad in ("6", "a:b", "1:2:3"):
        with pytest.raises(ValueError, match="piece must be FIRST:STOP, seed indices"):
            seed_pieces.parse_range(bad)
    assert seed_pieces.seed_span(3, 4) == "seed 3" and seed_pieces.seed_span(0, 2) == "seeds 0-1"
    assert Piece("fedrdqn", 6, 8).num_seeds == 2 and Piece("fedrdqn", 6, 8).describe() == "fedrdqn seeds 6-7"


def test_old_row_records_are_upgraded_on_read_in_one_place():
    """row.json without a schema number reads in today's layout (`row_records.upgrade_row`), what it lacked
    filled and, for the engine, said; a record of today's layout reads as written."""
    old = {"wall_s": 12.0, "resumed_blocks": 3, "configs": {
        "fedrddpg": {"config": {"env_name": "Hopper-v4"}, "grid": None},
        "ddpgavg2": {"config": {"env_name": "Hopper-v4", "engine": "c"}, "grid": None}}}
    new = row_records.upgrade_row(old)
    assert (new["schema"], new["pieces"], new["run_batch"]) == (row_records.ROW_SCHEMA, {}, {})
    assert (new["wall_s"], new["wall_s_this_process"]) == (None, 12.0)  # one process's time, after a resume
    assert new["configs"]["fedrddpg"]["config"]["engine"] == "mjx" and new["unrecorded"] == ["engine"]
    assert new["configs"]["ddpgavg2"]["config"]["engine"] == "c"
    assert "schema" not in old and "engine" not in old["configs"]["fedrddpg"]["config"]  # the input is not changed
    assert row_records.upgrade_row(new) is new
    classic = row_records.upgrade_row({"wall_s": 5.0, "configs": {"fedrdqn": {"config": {"env_name": "CartPole-v1"}}}})
    assert (classic["wall_s"], classic["configs"]["fedrdqn"]["config"]["engine"], classic["unrecorded"]) == (5.0, None, [])
    # The committed rows read so: the reduced Table 2's MJX rows say what they did not record.
    table, records = _committed("table2", "table2_reduced")
    assert all(rec["schema"] == row_records.ROW_SCHEMA for rec in records.values())
    assert "engine" in records["Hopper-v4/torso"]["unrecorded"]


def test_a_challenger_joins_a_finished_row_which_keeps_its_numbers(reproduced, example_algorithm, tmp_path,
                                                                   monkeypatch):
    out = str(tmp_path / "out")
    shutil.copytree(reproduced["out"], out)
    before = row_records.read_row(os.path.join(out, "table1", "CartPole-v1__length", "row.json"))
    request = {**TINY, "rows": ["CartPole-v1/length"]}
    for taken in ("fedrdqn", "dqnavg"):  # DQNAvg is the row's omega = 0 point: its numbers would be overwritten
        with pytest.raises(ValueError, match=rf"challenger '{taken}' is already a program of these table1 rows"):
            harness.reproduce("table1", out, challengers=[taken], **request)
    real_run, trained = loop.run, []
    monkeypatch.setattr(loop, "run", lambda config, *a, **k: trained.append(config.algo) or real_run(config, *a, **k))
    result = harness.reproduce("table1", out, challengers=["fedrdqn_min"], **request)
    assert trained == ["fedrdqn_min"]  # the row's own program was read back
    row = result["rows"]["CartPole-v1/length"]
    for label, numbers in before["algorithms"].items():  # bit for bit
        assert row["algorithms"][label] == numbers, label
    assert (row["headline"], row["chosen_omega"]) == (before["headline"], before["chosen_omega"])
    challenger = row["challengers"]["fedrdqn_min"]
    assert sorted(challenger["tuning_minimum_mean"]) == ["0.05", "0.2"]  # the row's omegas, not omega = 0
    assert challenger["headline"] == f"FedRDQN-min (ω={challenger['chosen_omega']:g})"
    assert row["request"]["challengers"] == ["fedrdqn_min"]
    # The table reports the challenger against the row's baseline and its FedRDQN, with verdicts, the
    # whole-table lines and the IQM, beside the rows without it; the title names it.
    text = open(os.path.join(out, "table1.md")).read()
    assert text.startswith("# Table 1: DQNAvg vs FedRDQN, with challenger FedRDQN-min\n")
    section = text[text.index("## Challenger: FedRDQN-min"):text.index("## Across rows")]
    assert section.startswith("## Challenger: FedRDQN-min (headline ω) − DQNAvg and FedRDQN (headline ω), paired")
    assert f"| CartPole-v1/length | **{challenger['headline']}** (challenger) |" in text
    for reference in ("DQNAvg", "FedRDQN (headline ω)"):
        verdict_line = next(line for line in section.splitlines()
                            if line.startswith(f"| CartPole-v1/length | {reference} |"))
        assert any(word in verdict_line for word in stats.VERDICTS)
        assert f"- Against {reference}: FedRDQN-min is" in section and f"**Whole table** against {reference}" in section
    iqm = section[section.index("FedRDQN-min: IQM across rows"):]
    assert "| Minimum | FedRDQN (headline ω) | 1 x 2 |" in iqm and "| Average | DQNAvg | 1 x 2 |" in iqm
    # Its paired differences against FedRDQN are its numbers minus the row's headline's, seed by seed.
    csv_rows = list(csv.DictReader(open(os.path.join(out, "table1_comparisons.csv"))))
    against_fedrdqn = [r for r in csv_rows if r["robust"] == challenger["headline"] and r["baseline"] == "FedRDQN (headline ω)"]
    mine = np.asarray(row["algorithms"][challenger["headline"]]["reported"]["minimum"])
    theirs = np.asarray(row["algorithms"][row["headline"]]["reported"]["minimum"])
    assert len(against_fedrdqn) == 1 and int(against_fedrdqn[0]["higher"]) == int((mine > theirs).sum())
    assert "CartPole-v1/masscart" not in section  # a row that did not run it
    assert "FedRDQN-min: tuning-seed mean Minimum {ω=0.05: " in text  # its omega choice, per row
    # The same request again trains nothing; a request without the challenger finds the row finished too.
    trained.clear()
    harness.reproduce("table1", out, challengers=["fedrdqn_min"], **request)
    harness.reproduce("table1", out, **request)
    assert trained == []
    # The challenger with another setting of its own is another computation: refused, not read back.
    with pytest.raises(ValueError, match=r"computed with different settings \['challenger_overrides'\] "
                                         r"\(\{'challenger_overrides': None\} vs requested "
                                         r"\{'challenger_overrides': \{'pessimism': 0.5\}\}\)"):
        harness.reproduce("table1", out, challengers=["fedrdqn_min"], challenger_overrides={"pessimism": 0.5},
                          **request)
    assert trained == []


def test_a_row_grows_at_its_chosen_omega_alone_where_asked(in_pieces, tmp_path, monkeypatch):
    """`new_seeds_at="chosen"`: the seed a finished row gains trains the baseline and the headline omega
    alone (2 runs, not the grid's 3), read from its row.json; the row writes those two with 3 reported
    seeds and keeps its other omega at the 2 it has; --status estimates the narrowed piece as 2 runs.
    A row with no headline omega yet, and a table that chooses one per level p, are refused."""
    out = str(tmp_path / "grown")
    shutil.copytree(in_pieces["out"], out)
    request = {**TINY, "rows": ROWS[:1], "num_seeds": 3, "new_seeds_at": "chosen"}
    before = in_pieces["row"]
    chosen, headline = before["chosen_omega"], before["headline"]
    [other] = [label for label in before["algorithms"] if label not in ("DQNAvg", headline)]
    [row_status] = status.rows("table1", out, **{k: v for k, v in request.items() if k != "progress"})
    [todo] = [p for p in row_status["programs"][0]["pieces"] if p["state"] == "to run"]
    seconds, _ = todo["estimate"][machine.describe()["backend"]]  # scaled from the first piece's 3 runs to 2
    assert todo["seeds"] == [3, 4] and seconds == pytest.approx(before["pieces"]["fedrdqn"][0]["wall_s"] * 2 / 3)

    grids = []
    real_run = loop.run
    monkeypatch.setattr(loop, "run", lambda *a, **k: grids.append((k["first_seed"], k["grid"])) or real_run(*a, **k))
    harness.run_program("table1", out, ROWS[0], "fedrdqn", piece=(3, 4),
                        **{k: v for k, v in request.items() if k not in ("rows", "progress")})
    assert grids == [(3, {"omega": [0.0, chosen]})]
    # On disk and not yet in the row's row.json, the new piece times the next one: 2 runs, as that one.
    [row_status] = status.rows("table1", out, **{**{k: v for k, v in request.items() if k != "progress"}, "num_seeds": 4})
    [todo] = [p for p in row_status["programs"][0]["pieces"] if p["state"] == "to run"]
    assert todo["seeds"] == [4, 5] and " 2 runs x 300 steps" in todo["estimate"][machine.describe()["backend"]][1]
    grown = harness.reproduce("table1", out, **request)["rows"][ROWS[0]]
    assert grids == [(3, {"omega": [0.0, chosen]})]  # the row is written from the piece, not trained again
    for label in ("DQNAvg", headline):
        assert grown["algorithms"][label]["reported"]["minimum"][:2] == before["algorithms"][label]["reported"]["minimum"]
        assert len(grown["algorithms"][label]["reported"]["minimum"]) == 3
    assert grown["algorithms"][other] == before["algorithms"][other]
    assert grown["pieces"]["fedrdqn"][-1] == {**grown["pieces"]["fedrdqn"][-1], "seeds": [3, 4],
                                              "grid": {"omega": [0.0, chosen]}}
    assert grown["request"]["new_seeds_at"] == "chosen" and grown["seeds"]["reported"] == [1, 2, 3]
    text = open(os.path.join(out, "table1.md")).read()
    assert f"| {ROWS[0]} | {other} | 2 |" in text and f"| {ROWS[0]} | **{headline}** (headline) | 3 |" in text
    # Read back as written; the whole grid again would find the seed held (its other omega keeps 2 seeds).
    grids.clear()
    assert harness.reproduce("table1", out, **{**request, "new_seeds_at": "grid"})["rows"][ROWS[0]] == grown
    assert grids == []
    assert row_records.load_algorithm(os.path.join(out, "table1", "CartPole-v1__length"), grown, other)["seed_indices"] == [0, 1, 2]

    with pytest.raises(ValueError, match=r"row CartPole-v1/masscart has no headline omega yet .*--new-seeds-at grid"):
        harness.run_program("table1", out, "CartPole-v1/masscart", "fedrdqn", piece=(0, 1),
                            **{k: v for k, v in request.items() if k not in ("rows", "progress")})
    with pytest.raises(ValueError, match=r"new_seeds_at='chosen' needs one headline omega per row; heterogeneity"):
        plan.Request.of("heterogeneity", new_seeds_at="chosen").plan()
    with pytest.raises(ValueError, match=r"new_seeds_at must be one of \['grid', 'chosen'\], got 'all'"):
        plan.Request.of("table1", new_seeds_at="all").plan()
    args = plan.Request.of("table1", new_seeds_at="chosen").args()
    assert args[args.index("--new-seeds-at") + 1] == "chosen"
    assert "--new-seeds-at" not in plan.Request.of("table1").args()


def test_a_challengers_new_seeds_train_its_own_chosen_omega_where_asked(reproduced, example_algorithm, tmp_path,
                                                                        monkeypatch):
    """`new_seeds_at="chosen"` on a row with a challenger: the challenger's new seed trains the omega the
    challenger chose on its own tuning seeds (row.json's "challengers"), not the row's headline omega,
    which the row's own program trains beside its baseline. Read from the files; nothing trains."""
    out = tmp_path / "challenged"
    row_path = out / "table1" / "CartPole-v1__length"
    shutil.copytree(os.path.join(reproduced["out"], "table1", "CartPole-v1__length"), row_path)
    record = json.loads((row_path / "row.json").read_text())
    headline = record["chosen_omega"]
    [theirs] = [w for w in TINY["omegas"] if w != headline]  # the challenger chose the other omega
    record["request"]["challengers"] = ["fedrdqn_min"]
    record["challengers"] = {"fedrdqn_min": dict(label="FedRDQN-min", labels=[], tuning_minimum_mean={},
                                                 chosen_omega=theirs, headline=f"FedRDQN-min (ω={theirs:g})")}
    (row_path / "row.json").write_text(json.dumps(record))
    grids = []
    monkeypatch.setattr(loop, "run", lambda config, *a, **k: grids.append((config.algo, k["first_seed"], k["grid"])))
    request = {k: v for k, v in TINY.items() if k not in ("rows", "progress")}
    request.update(num_seeds=TINY["num_seeds"] + 1, new_seeds_at="chosen", challengers=["fedrdqn_min"])
    new = TINY["tuning_seeds"] + TINY["num_seeds"]
    for program in ("fedrdqn_min", "fedrdqn"):
        harness.run_program("table1", str(out), ROWS[0], program, piece=(new, new + 1), **request)
    assert grids == [("fedrdqn_min", new, {"omega": [theirs]}), ("fedrdqn", new, {"omega": [0.0, headline]})]


def test_a_row_grows_by_the_agent_revision_its_pieces_ran(in_pieces, tmp_path, monkeypatch):
    """A row whose pieces ran revision 1 (records without `agent_revision`, as every committed Table 1
    row): its new seed trains revision 1, recorded as such, unless the request sets `revision` itself,
    which the finished pieces then refuse before compiling."""
    out = tmp_path / "rev1"
    shutil.copytree(in_pieces["out"], out)
    program_dir = out / "table1" / "CartPole-v1__length" / "fedrdqn"
    for path in program_dir.glob("seeds_*/*.json"):
        record = json.loads(path.read_text())
        if "agent_revision" in record:
            path.write_text(json.dumps({k: v for k, v in record.items() if k != "agent_revision"}))
    request = {**TINY, "rows": ROWS[:1], "num_seeds": 3}
    revisions = []
    real_run = loop.run
    monkeypatch.setattr(loop, "run", lambda config, *a, **k: revisions.append(config.agent.revision)
                        or real_run(config, *a, **k))
    harness.reproduce("table1", str(out), **request)
    assert revisions == [1]
    assert json.loads((program_dir / "seeds_3-4" / "config.json").read_text())["agent_revision"] == 1
    assert "revision" not in json.loads((program_dir / "seeds_3-4" / "config.json").read_text())["agent"]
    explicit = {**request, "num_seeds": 4, "agent_overrides": {**TINY["agent_overrides"], "revision": 2}}
    (out / "table1" / "CartPole-v1__length" / "row.json").unlink()
    with pytest.raises(ValueError, match=r"\(agent_revision: 1 -> 2\)"):
        harness.run_program("table1", str(out), ROWS[0], "fedrdqn", piece=(4, 5),
                            **{k: v for k, v in explicit.items() if k not in ("rows", "progress")})
