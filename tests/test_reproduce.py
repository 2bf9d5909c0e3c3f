"""`fedjax-rl reproduce`: the harness end to end on a tiny budget (2 CartPole rows, 1 tuning + 2
reported seeds, 300 steps per agent, an 8-unit network), interrupted inside its second row and
resumed; the written tables against the per-run metrics files; settings checked before compiling."""

import csv
import io
import json
import os

import numpy as np
import pytest

from fedjax_rl import cli, envs, experiment, machine, reproduce

ROWS = ["CartPole-v1/length", "CartPole-v1/masscart"]
TINY = dict(rows=ROWS, num_seeds=2, tuning_seeds=1, omegas=[0.05, 0.2], budget=0.006, progress=False,
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
    real_run = experiment.run
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
        mp.setattr(experiment, "run", interrupting_run)
        with pytest.raises(Interrupted):
            reproduce.reproduce("table1", out, **TINY)
        first_row_done = os.path.exists(os.path.join(out, "table1", "CartPole-v1__length", "row.json"))
        second_row_done = os.path.exists(os.path.join(out, "table1", "CartPole-v1__masscart", "row.json"))
        # Read from the files alone: a status that ran anything would show up in `calls`.
        status_interrupted = reproduce.status("table1", out, **STATUS_REQUEST)
        mp.setattr(experiment, "run", counting_run("run2"))
        result = reproduce.reproduce("table1", out, **TINY)
        mp.setattr(experiment, "run", counting_run("run3"))
        again = reproduce.reproduce("table1", out, **TINY)
        status_done = reproduce.status("table1", out, **STATUS_REQUEST)
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
    [program] = masscart["programs"]  # stopped after its first of 3 blocks, as the fixture interrupts it
    assert (program["program"], program["state"], program["blocks_done"], program["num_blocks"]) == (
        "FedRDQN", "partial", 1, 3)
    assert program["wall_s"] > 0
    assert interrupted["Acrobot-v1/gravity"]["state"] == "not started"
    assert {r["row"]: r["state"] for r in reproduced["status_done"]} == {
        "Acrobot-v1/gravity": "not started", "CartPole-v1/length": "finished", "CartPole-v1/masscart": "finished"}

    lines = reproduce.status_lines("table1", "OUT", reproduced["status_interrupted"])
    assert lines[0] == "table1 in OUT: 1 finished, 1 in progress, 1 not started (of 3 requested rows)"
    [masscart_line] = [line for line in lines if "CartPole-v1/masscart" in line]
    assert masscart_line.startswith("  CartPole-v1/masscart: in progress: FedRDQN 1/3 blocks (")
    assert masscart_line.endswith("h of training left)")

    # The command line's request is the paper's settings, not the tiny ones these rows were computed with.
    assert cli.main(["reproduce", "table1", "--rows", "CartPole-v1/length", "--out", reproduced["out"], "--status"]) == 0
    out = capsys.readouterr().out
    assert "CartPole-v1/length: finished with other settings ['agent_overrides', 'budget', 'num_seeds', 'omegas', " in out
    assert "wrote" not in out  # nothing rebuilt


def test_status_line_names_a_pending_final_evaluation():
    # Every block trained, the final evaluation not yet written: no "time left" estimate of 0.0 h.
    program = {"program": "FedRDDPG", "state": "partial", "blocks_done": 25, "num_blocks": 25, "wall_s": 9000.0}
    halfway = dict(program, program="DDPGAvg(2)", blocks_done=5, wall_s=1000.0)
    report = [{"row": "Ant-v4/front_right_leg", "state": "in progress", "programs": [program, halfway]}]
    [_, line] = reproduce.status_lines("table2", "OUT", report)
    assert line == ("  Ant-v4/front_right_leg: in progress: FedRDDPG 25/25 blocks (9,000 s of training), "
                    "final evaluation pending; DDPGAvg(2) 5/25 blocks (1,000 s so far, about 1.1 h of training left)")


def test_tables_equal_the_metrics_files(reproduced):
    out = reproduced["out"]
    with open(os.path.join(out, "table1.csv")) as f:
        table = list(csv.DictReader(f))
    with open(os.path.join(out, "table1.md")) as f:
        markdown = f.read()
    assert "REDUCED BUDGET" in markdown and "Settings overridden" in markdown
    # The header states the steps each row ran (0.006 of CartPole's 50,000), not only the fraction.
    assert ("**REDUCED BUDGET**: CartPole-v1/length: 300 steps per agent (paper 50,000); CartPole-v1/masscart: "
            "300 steps per agent (paper 50,000) (requested fraction(s) 0.006 of") in markdown
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
        assert lines["DQNAvg"]["role"] == "baseline" and lines["DQNAvg"]["paper_minimum"] == ""
        record = reproduced["result"]["rows"][key]
        assert record["chosen_omega"] == chosen
        assert {"jax", "flax", "numpy"} <= set(record["versions"]) and record["machine"]["cores"] >= 1
        assert record["wall_s"] > 0 and record["request"]["budget"] == TINY["budget"]
    for name in ("table1_curves.png", "table1_sweeps.png"):
        assert os.path.getsize(os.path.join(out, name)) > 10_000


def test_finished_rows_with_other_settings_are_refused(reproduced):
    with pytest.raises(ValueError, match=r"different settings \['budget'\]"):
        reproduce.reproduce("table1", reproduced["out"], **{**TINY, "budget": 0.01})


def test_budget_rounds_to_whole_evaluation_blocks():
    assert reproduce.budget_steps("fedrdqn", "CartPole-v1", 1.0) == (50_000, 25)  # RL-Zoo3, 20 evaluations
    assert reproduce.budget_steps("fedrdqn", "CartPole-v1", 0.1) == (5_000, 2)
    assert reproduce.budget_steps("fedrdqn", "MountainCar-v0", 0.05) == (6_000, 3)
    assert reproduce.budget_steps("fedrdqn", "CartPole-v1", 1e-6) == (100, 1)
    assert reproduce.parse_budget("paper") == 1.0
    for bad in ("0", "1.5", "half", "-0.1"):
        with pytest.raises(ValueError, match="budget must be 'paper' or a fraction in \\(0, 1\\]"):
            reproduce.parse_budget(bad)


def test_reproduce_set_is_parsed_by_the_tables_declarations():
    assert cli._reproduce_overrides("table2", ["learning_starts=1000", "hidden_sizes=64,64"]) == dict(
        learning_starts=1000, hidden_sizes=(64, 64))
    assert cli._reproduce_overrides("table1", ["batch_size=32"]) == dict(batch_size=32)


def test_bad_requests_fail_before_compiling(tmp_path, monkeypatch):
    def no_run(*args, **kwargs):
        raise AssertionError("nothing may train")

    monkeypatch.setattr(experiment, "run", no_run)
    with pytest.raises(ValueError, match="unknown table1 rows \\['CartPole-v1/gravity'\\]; allowed: Acrobot-v1/gravity"):
        reproduce.reproduce("table1", str(tmp_path), rows=["CartPole-v1/gravity"])
    with pytest.raises(ValueError, match="omegas must be distinct values in \\(0, 1\\]"):
        reproduce.reproduce("table1", str(tmp_path), omegas=[0.0, 0.1])
    with pytest.raises(ValueError, match="tuning_seeds must be >= 1"):
        reproduce.reproduce("table1", str(tmp_path), tuning_seeds=0)
    with pytest.raises(ValueError, match="table must be one of"):
        reproduce.reproduce("table3", str(tmp_path))
    # Table 2's robots are resolved lazily: until they are registered the error names what is missing.
    with pytest.raises(SystemExit, match="unknown table1 agent settings \\['epsilon'\\]; allowed: .*learning_starts"):
        cli.main(["reproduce", "table1", "--set", "epsilon=0.1", "--out", str(tmp_path), "--no-progress"])
    with pytest.raises(SystemExit, match="learning_starts"):
        cli.main(["reproduce", "table2", "--set", "learning_starts=-5", "--out", str(tmp_path), "--no-progress"])
    if "Ant-v4" not in envs.list_envs():
        with pytest.raises(SystemExit, match="table2 row Ant-v4/back_left_leg cannot run .*Ant-v4.*MuJoCo"):
            cli.main(["reproduce", "table2", "--out", str(tmp_path), "--no-progress"])
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
    reproduce.begin_program(bar, 10)  # a checkpoint held 10 blocks
    clock.advance(2.0)
    bar.update(1)  # one block really computed, in 2 s
    rate = bar.format_dict["rate"] or (bar.n - bar.format_dict["initial"]) / bar.format_dict["elapsed"]
    assert bar.n == 11
    assert rate == pytest.approx(0.5)  # counting the 10 resumed blocks would give 11 / 2 s


def test_a_final_evaluation_does_not_count_as_the_next_programs_speed(clock):
    from tqdm import tqdm

    bar = tqdm(total=4, file=io.StringIO(), mininterval=0.0)  # tqdm's default smoothed rate, as reproduce's bar
    reproduce.begin_program(bar, 0)  # program 1 starts
    clock.advance(1.0)
    bar.update(1)  # its only block
    clock.advance(100.0)  # its final evaluation
    reproduce.begin_program(bar, 0)  # program 2 starts
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
    monkeypatch.setattr(experiment, "run", blocks_without_training)
    with pytest.raises(Interrupted):
        reproduce.reproduce("table1", str(tmp_path), **{**TINY, "rows": ROWS[:1], "progress": True})
    runs = "3 seeds (1 tuning) x 3 omega(s)"  # omega 0 (DQNAvg) and the two requested
    assert postfixes == [f"{runs}, step 0/300 per agent", f"{runs}, step 100/300 per agent",
                         f"{runs}, step 200/300 per agent", f"{runs}, step 300/300 per agent, final evaluation"]


def test_row_machine_names_the_accelerator_before_its_host():
    cpu = dict(cpu="AMD EPYC 7B13", cores=2, cpu_isa=["sse4_2", "avx", "avx2", "fma"], backend="cpu")
    assert machine.summary(cpu) == "AMD EPYC 7B13 (2 cores, AVX2, cpu)"
    gpu = dict(cpu="Intel(R) Xeon(R) Processor", cores=16, cpu_isa=["avx2", "avx512f"], backend="gpu",
               gpu=["NVIDIA H100 80GB HBM3"])
    assert machine.summary(gpu) == "NVIDIA H100 80GB HBM3, host Intel(R) Xeon(R) Processor (16 cores, AVX-512)"
