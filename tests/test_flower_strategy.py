"""The library's aggregation rules as Flower strategies (`fedjax_rl.flower.strategy.RuleStrategy`), taken
alone as a Flower user takes them: against Flower's own strategies on the same replies where both
apply, with a non-finite upload refused, and with a rule that cannot take the round's uploads."""

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict  # noqa: E402
from flwr.serverapp.strategy import FedAvg, FedMedian, FedTrimmedAvg  # noqa: E402

from fedjax_rl.flower.strategy import RuleStrategy  # noqa: E402


@pytest.fixture(autouse=True)
def _a_run(monkeypatch):
    """A message is made inside a run (Flower reads its run id from the process's task identity)."""
    from flwr.supercore.task_identity import TaskIdentity

    for name in ("_run_id", "_node_id", "_task_id"):
        monkeypatch.setattr(TaskIdentity, name, 1)


def _replies(uploads: list[dict], node_ids=None) -> list[Message]:
    """Training replies as a ClientApp sends them: an ArrayRecord "arrays", a MetricRecord with the
    weight FedAvg reads (equal: the library counts every party once)."""
    replies = []
    for i, upload in enumerate(uploads):
        content = RecordDict({"arrays": ArrayRecord({k: Array(np.asarray(v)) for k, v in upload.items()}),
                              "metrics": MetricRecord({"num-examples": 1, "loss": float(i)}),
                              "config": ConfigRecord({})})
        message = Message(content, dst_node_id=0, message_type="train")
        message.metadata.__dict__["_src_node_id"] = (node_ids or list(range(100, 100 + len(uploads))))[i]
        replies.append(message)
    return replies


def _uploads(num: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{"w": rng.normal(size=(3, 4)).astype(np.float32), "b": rng.normal(size=(5,)).astype(np.float32)}
            for _ in range(num)]


def _arrays(record: ArrayRecord) -> dict:
    return {name: array.numpy() for name, array in record.items()}


@pytest.mark.parametrize("ours, theirs", [
    (dict(aggregation="mean"), FedAvg()),
    (dict(aggregation="median"), FedMedian()),
    # Flower's beta is the fraction cut from each end, as trim is
    (dict(aggregation="trimmed_mean", trim=0.2), FedTrimmedAvg(beta=0.2)),
])
def test_a_rule_aggregates_what_flowers_own_strategy_aggregates(ours, theirs):
    uploads = _uploads(5)
    mine, my_metrics = RuleStrategy(**ours).aggregate_train(1, _replies(uploads))
    flowers, their_metrics = theirs.aggregate_train(1, _replies(uploads))
    for name in ("w", "b"):
        np.testing.assert_allclose(_arrays(mine)[name], _arrays(flowers)[name], rtol=1e-6, atol=1e-6)
    assert dict(my_metrics) == dict(their_metrics)


def test_a_non_finite_upload_is_refused_and_the_others_aggregated_as_without_it():
    """One party's NaN would make FedAvg's global model NaN; the strategy leaves it out, names its
    node, and aggregates the other four exactly as it aggregates them alone."""
    uploads = _uploads(5, seed=1)
    poisoned = [dict(u) for u in uploads]
    poisoned[2] = {"w": np.full((3, 4), np.nan, np.float32), "b": uploads[2]["b"]}
    strategy = RuleStrategy(aggregation="mean")
    refused_round, _ = strategy.aggregate_train(3, _replies(poisoned))
    honest = [u for k, u in enumerate(uploads) if k != 2]
    alone, _ = RuleStrategy(aggregation="mean").aggregate_train(3, _replies(honest))
    assert strategy.refused == {3: [102]}
    for name in ("w", "b"):
        assert np.all(np.isfinite(_arrays(refused_round)[name]))
        np.testing.assert_array_equal(_arrays(refused_round)[name], _arrays(alone)[name])
    assert np.isnan(_arrays(FedAvg().aggregate_train(3, _replies(poisoned))[0])["w"]).all()


def test_every_upload_refused_or_too_few_for_krum_gives_no_model():
    nan = {"w": np.full((3, 4), np.nan, np.float32), "b": np.zeros(5, np.float32)}
    assert RuleStrategy(aggregation="median").aggregate_train(1, _replies([nan, nan])) == (None, None)
    # Krum with f = 1 needs n >= 2f + 3 = 5 uploads; 4 came
    assert RuleStrategy(aggregation="krum", krum_byzantine=1).aggregate_train(1, _replies(_uploads(4))) == (None, None)
    chosen, _ = RuleStrategy(aggregation="krum", krum_byzantine=1).aggregate_train(1, _replies(_uploads(5)))
    assert any(np.array_equal(_arrays(chosen)["w"], u["w"]) for u in _uploads(5))


def test_an_unknown_rule_is_refused_naming_the_allowed_ones():
    with pytest.raises(ValueError, match=r"aggregation must be one of \['krum', 'mean', 'median', 'trimmed_mean'\]"):
        RuleStrategy(aggregation="mode")
