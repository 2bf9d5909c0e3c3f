"""The library's aggregation rules as Flower strategies: `RuleStrategy` is Flower's `FedAvg` (its node
sampling, messages and metrics) whose `aggregate_train` applies one of fedjax_rl's registered rules
(`mean`, `median`, `trimmed_mean`, `krum` or a plugin's, `fedjax_rl.core.aggregation.AGGREGATORS`) to
the replies' arrays, after refusing every upload that holds a NaN or an infinity. A Flower user takes
it alone, with any ClientApp that replies with an ArrayRecord:

    from fedjax_rl.flower.strategy import RuleStrategy
    strategy = RuleStrategy(aggregation="krum", krum_byzantine=1, min_train_nodes=5)
    result = strategy.start(grid, initial_arrays, num_rounds=10)

The library's own federations (`fedjax_rl.flower.apps`) aggregate every round with the same class
(`aggregate_uploads`, uploads in agent order with the round's participation weights), so a rule
computes in Flower exactly what it computes in the compiled program: `federation.Aggregation`, the
rule inside the program's named vmap over the agent axis.
"""

from __future__ import annotations

from collections.abc import Iterable
from logging import INFO, WARNING

import numpy as np
from flwr.app import Array, ArrayRecord, Message, MetricRecord
from flwr.serverapp.strategy import FedAvg
from flwr.supercore import log

from fedjax_rl.core import federated
from fedjax_rl.core.aggregation import AGGREGATION, KRUM_BYZANTINE, KRUM_KEEP, TRIM
from fedjax_rl.flower import federation


class RuleStrategy(FedAvg):
    """Flower's FedAvg with fedjax_rl's aggregation rule `aggregation` and its settings (`trim` for
    the trimmed mean, `krum_byzantine` and `krum_keep` for Krum: as `--aggregation`, `--trim`,
    `--krum-byzantine` and `--krum-keep` set them). Every valid reply's ArrayRecord counts once; an
    upload with a non-finite value is left out of the round, as a failed reply is, and logged
    (`refused`: {round: [the refused replies' source nodes]}). The other arguments are FedAvg's."""

    def __init__(self, aggregation: str = "mean", trim: float = TRIM.default,
                 krum_byzantine: int = KRUM_BYZANTINE.default,
                 krum_keep: int = KRUM_KEEP.default, **fedavg):
        super().__init__(**fedavg)
        AGGREGATION.validate(aggregation)
        self.aggregation, self.trim = aggregation, trim
        self.krum_byzantine, self.krum_keep = krum_byzantine, krum_keep
        self.refused: dict[int, list[int]] = {}
        self._aggregations: dict[int, federation.Aggregation] = {}

    @classmethod
    def for_server(cls, server: federated.Server, **fedavg) -> "RuleStrategy":
        """The strategy of a library federation's `server` (its rule, settings and participation,
        already checked against its K agents)."""
        strategy = cls(server.aggregation, server.trim, server.krum_byzantine, server.krum_keep, **fedavg)
        strategy._aggregations[server.num_agents] = federation.Aggregation(server)
        return strategy

    def summary(self) -> None:
        super().summary()
        log(INFO, "\t└──> Aggregation: fedjax_rl's %r", self.aggregation)

    def _aggregation(self, num_uploads: int) -> federation.Aggregation:
        # One compiled rule per number of uploads: a round's valid replies may be fewer than the
        # nodes asked. Krum's settings are checked against that number (a ValueError naming them).
        if num_uploads not in self._aggregations:
            self._aggregations[num_uploads] = federation.Aggregation(federated.Server(
                num_uploads, 1.0, self.aggregation, self.trim, self.krum_byzantine, self.krum_keep))
        return self._aggregations[num_uploads]

    def aggregate_uploads(self, uploads: list[dict | None], weights: np.ndarray | None = None, like=None):
        """(the rule's aggregate of `uploads`, {index: its refused leaves}): `uploads` are named arrays
        in agent order, None where an agent does not upload this round; `weights` the round's [K] 0/1
        participation (None: everyone). A non-finite upload is refused (`federation.screened`); the
        aggregate is None where none is left. With `like` (a tree of arrays or shapes) the uploads are
        `federation.to_arrays` of such a tree and the aggregate is one; without, they are aggregated
        as the dicts they are."""
        uploads, weights, refused = federation.screened(uploads, weights)
        if all(upload is None for upload in uploads):
            return None, refused
        filler = next(upload for upload in uploads if upload is not None)  # a weight-0 place's stand-in
        trees = [filler if upload is None else upload for upload in uploads]
        if like is not None:
            trees = [federation.from_arrays(tree, like) for tree in trees]
        return self._aggregation(len(uploads))(trees, weights), refused

    def aggregate_train(self, server_round: int, replies: Iterable[Message]
                        ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        valid, _ = self._check_and_log_replies(replies, is_train=True)
        if not valid:
            return None, None
        key = self.arrayrecord_key
        uploads = [{name: array.numpy() for name, array in reply.content[key].items()} for reply in valid]
        try:
            aggregate, refused = self.aggregate_uploads(uploads)
        except ValueError as error:  # a rule that cannot take this many uploads (Krum's n >= 2f + 3)
            log(WARNING, "aggregate_train: round %d: %s", server_round, error)
            return None, None
        if refused:
            self.refused[server_round] = [valid[k].metadata.src_node_id for k in refused]
            log(WARNING, "aggregate_train: refused the non-finite upload(s) of node(s) %s", self.refused[server_round])
        if aggregate is None:
            return None, None
        kept = [reply.content for k, reply in enumerate(valid) if k not in refused]
        arrays = ArrayRecord({name: Array(np.asarray(value)) for name, value in aggregate.items()})
        return arrays, self.train_metrics_aggr_fn(kept, self.weighted_by_key)
