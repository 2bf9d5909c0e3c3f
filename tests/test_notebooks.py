"""The reproduction notebook reads the committed rows: its code must keep up with row.json, and
what it prints must be the committed table's numbers, intervals and verdicts."""

import csv
import json
import os

import matplotlib
import numpy as np

ROOT = os.path.join(os.path.dirname(__file__), "..")


def test_reproduction_notebook_runs_and_agrees_with_the_committed_table(monkeypatch, capsys):
    matplotlib.use("Agg")
    monkeypatch.chdir(ROOT)
    with open(os.path.join(ROOT, "notebooks", "reproduction_results.ipynb")) as f:
        cells = [cell for cell in json.load(f)["cells"] if cell["cell_type"] == "code"]
    namespace = {}
    for cell in cells:
        exec("".join(cell["source"]), namespace)  # noqa: S102 (our own notebook)
    namespace["plt"].close("all")
    assert "Table 1, H100: 8 of 8 rows at budget 1 of the paper's" in capsys.readouterr().out

    with open(os.path.join(ROOT, "results", "table1_paper_h100", "table1.csv")) as f:
        table = {(r["row"], r["algorithm"]): r for r in csv.DictReader(f)}
    reported, runs = namespace["reported"], namespace["runs"]
    for key, record in runs["H100"].items():
        for name in ("DQNAvg", record["headline"]):
            minimum = reported(record, name)
            np.testing.assert_allclose(minimum.mean(), float(table[key, name]["minimum_mean"]), rtol=1e-6)
            np.testing.assert_allclose(minimum.std(), float(table[key, name]["minimum_std"]), rtol=1e-6, atol=1e-9)
        paired = namespace["paired"](record, "DQNAvg")
        assert paired.shape == (len(record["seeds"]["reported"]),)
        np.testing.assert_allclose(paired.mean(), float(table[key, record["headline"]]["minimum_mean"])
                                   - float(table[key, "DQNAvg"]["minimum_mean"]), atol=1e-3)
    assert runs["CPU"], "no CPU rows under results/table1_paper"

    # Its intervals and verdicts are the table's (the same fedjax_rl.analysis.stats calls, the same seed).
    for name, directory in (("H100", "table1_paper_h100"), ("CPU", "table1_paper")):
        with open(os.path.join(ROOT, "results", directory, "table1_comparisons.csv")) as f:
            # The verdict's line of each row (a row with confirmatory seeds also has an exploratory one).
            comparisons = {r["row"]: r for r in csv.DictReader(f) if r["seed_set"] != "exploratory"}
        for key, record in runs[name].items():
            interval = namespace["interval"](record, "DQNAvg")
            row = comparisons[key]
            np.testing.assert_allclose([interval.estimate, interval.low, interval.high],
                                       [float(row[k]) for k in ("minimum_median_difference", "minimum_low", "minimum_high")],
                                       rtol=1e-12, atol=1e-12)
            seeds = len(namespace["verdict_seeds"](record))
            assert seeds == int(row["seeds"])
            assert namespace["verdict"](record, "DQNAvg") == row["verdict"], key
        with open(os.path.join(ROOT, "results", directory, "table1.md")) as f:
            table_md = f.read()
        aggregate = namespace["aggregate"][name, "minimum"]
        assert f"| {aggregate.difference.format(2)} |" in table_md

    # Table 2 at 5%: the notebook's paired intervals against both baselines are the committed table's.
    with open(os.path.join(ROOT, "results", "table2_5pct", "table2_comparisons.csv")) as f:
        comparisons = {(r["row"], r["baseline"]): r for r in csv.DictReader(f)}
    assert set(namespace["fifth2"]) == {row for row, _ in comparisons}  # every finished row, no other
    for key, record in namespace["fifth2"].items():
        for baseline in ("DDPGAvg(1)", "DDPGAvg(2)"):
            interval, row = namespace["interval"](record, baseline), comparisons[key, baseline]
            np.testing.assert_allclose([interval.estimate, interval.low, interval.high],
                                       [float(row[k]) for k in ("minimum_median_difference", "minimum_low", "minimum_high")],
                                       rtol=1e-12, atol=1e-12)
            assert namespace["judged"](record, baseline)["verdict"] == row["verdict"]

    # The heterogeneity table: the notebook's per-seed differences, paired by seed at each level, average to
    # the committed table's mean difference and have its median, and every level of every finished row is there.
    with open(os.path.join(ROOT, "results", "heterogeneity", "heterogeneity_comparisons.csv")) as f:
        comparisons = {(r["row"], float(r["max_rate"])): r for r in csv.DictReader(f) if r["baseline"] == "DQNAvg"}
    assert set(namespace["het_paired"]) == set(comparisons)
    for point, (difference, _) in namespace["het_paired"].items():
        assert difference.shape == (int(comparisons[point]["seeds"]),)
        np.testing.assert_allclose(difference.mean(), float(comparisons[point]["minimum_mean_difference"]), rtol=1e-9)
        np.testing.assert_allclose(np.median(difference), float(comparisons[point]["minimum_median_difference"]), rtol=1e-9)

    # The attacks table: the notebook's per-seed honest Minimum differences, paired by seed with the same rule
    # without attackers, average to the committed table's mean difference and have its median, for every
    # attacked row and algorithm the committed table judged.
    with open(os.path.join(ROOT, "results", "attacks_10pct", "attacks_comparisons.csv")) as f:
        comparisons = {(r["row"], r["algorithm"]): r for r in csv.DictReader(f)
                       if r["kind"] == "attack" and r["verdict"] != "no baseline yet"}
    assert set(namespace["att_paired"]) == set(comparisons)
    for point, difference in namespace["att_paired"].items():
        assert difference.shape == (int(comparisons[point]["seeds"]),)
        np.testing.assert_allclose(difference.mean(), float(comparisons[point]["minimum_mean_difference"]), rtol=1e-9)
        np.testing.assert_allclose(np.median(difference), float(comparisons[point]["minimum_median_difference"]),
                                   rtol=1e-9)
