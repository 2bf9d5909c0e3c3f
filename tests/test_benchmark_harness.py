"""benchmarks/harness.py: cases interleaved over repeats, timed by the clock it is given, and the one
result format every benchmark writes. No JAX: a fake clock and a given machine record."""

import itertools
import json
import os

import pytest

from benchmarks import harness


def fake_clock(log):
    ticks = itertools.count()
    return harness.Clock(wall=lambda: float(next(ticks)), cpu=lambda: 0.5 * len(log), children_cpu=lambda: 0.0)


def test_measure_sets_up_warms_and_interleaves_the_cases():
    log = []

    def case(name):
        def setup():
            log.append(("setup", name))
            return lambda: log.append(("call", name)) or {"work": 10}

        return harness.Case(name, setup, {"size": len(name)})

    rows = harness.measure([case("a"), case("bb")], repeats=3, warmup=2, clock=fake_clock(log))
    assert log[:6] == [("setup", "a"), ("call", "a"), ("call", "a"), ("setup", "bb"), ("call", "bb"), ("call", "bb")]
    assert log[6:] == [("call", "a"), ("call", "bb")] * 3
    assert [(r["case"], r["repeat"]) for r in rows] == [("a", 0), ("bb", 0), ("a", 1), ("bb", 1), ("a", 2), ("bb", 2)]
    for row in rows:
        # the fake wall clock ticks once per reading: a call reads it twice; the CPU clock counts calls
        assert row["wall_s"] == 1.0 and row["cpu_s"] == 0.5 and row["children_cpu_s"] == 0.0
        assert row["work"] == 10 and row["size"] == len(row["case"])
        assert row["setup_wall_s"] == 1.0
    assert harness.median(rows, "wall_s", case="a") == 1.0
    with pytest.raises(KeyError):
        harness.median(rows, "wall_s", case="c")


def test_a_case_may_set_its_own_warmup():
    # e.g. a subprocess that times its own steady state (the SB3 references): no untimed call first
    log = []

    def case(name, warmup=None):
        return harness.Case(name, lambda: (lambda: log.append(name)), warmup=warmup)

    rows = harness.measure([case("jax"), case("sb3", warmup=0)], repeats=2, warmup=1, clock=fake_clock(log))
    assert log == ["jax", "jax", "sb3", "jax", "sb3"]
    by_case = {row["case"]: row for row in rows}
    assert by_case["jax"]["warmup_wall_s"] == 1.0 and by_case["sb3"]["warmup_wall_s"] == 1.0  # one tick each


def test_write_writes_the_one_format(tmp_path):
    machine = {"cpu": "test", "load_average_1_5_15min_at_start": [1.0, 1.0, 1.0]}
    path = harness.write(str(tmp_path / "group" / "name.json"), "benchmarks.group.name", {"steps": 3},
                         [{"case": "a", "wall_s": 1.0}], machine=machine)
    result = harness.read(path)
    assert list(result) == list(harness.FIELDS)
    assert result["benchmark"] == "group.name"
    assert result["machine"]["cpu"] == "test" and "load_average_1_5_15min_at_end" in result["machine"]
    assert set(result["commit"]) == {"sha", "dirty"}
    assert result["argv"][:3] == ["python", "-m", "benchmarks.group.name"]
    assert result["settings"] == {"steps": 3} and result["rows"] == [{"case": "a", "wall_s": 1.0}]
    assert harness.rows_by(result, "case") == {"a": {"case": "a", "wall_s": 1.0}}
    with open(path, "w") as f:
        json.dump({"machine": {}}, f)
    with pytest.raises(ValueError):
        harness.read(path)


def test_results_go_by_group_and_the_parser_has_the_common_flags():
    assert harness.default_out("benchmarks.throughput.dqn_throughput") == os.path.join(
        harness.RESULTS, "throughput", "dqn_throughput.json")
    args = harness.parser("benchmarks.envs.x", "What it measures.\n\nMore.", repeats=4).parse_args([])
    assert args.repeats == 4 and args.out.endswith(os.path.join("results", "envs", "x.json"))
    assert not hasattr(harness.parser("benchmarks.envs.x", None).parse_args([]), "repeats")


def test_every_committed_result_is_in_the_format():
    # benchmarks/results/historical/ keeps the records that predate the format, as they were written
    found = 0
    for folder, dirs, files in os.walk(harness.RESULTS):
        dirs[:] = [d for d in dirs if d != "historical"]
        for name in files:
            if name.endswith(".json"):
                found += 1
                result = harness.read(os.path.join(folder, name))
                assert isinstance(result["rows"], list) and isinstance(result["settings"], dict), name
    assert found
