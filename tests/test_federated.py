"""The federated core: named agent axis, pmean averaging, vmap and shard_map agree."""

import dataclasses
import os

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_rl.core import agent_axis, aggregation, federated
from references import users_codegen


def _client_step(state: federated.FederatedState, scale):
    # A local update that makes agents diverge (depends on the agent index), then an average.
    i = agent_axis.agent_index().astype(jnp.float32)
    shared = jax.tree.map(lambda x: x * scale + i, state.shared)
    private = state.private + i
    state = state.replace(shared=shared, private=private)
    return federated.federated_average(state)


def _state(num_agents):
    shared = {"w": jnp.arange(num_agents * 3.0).reshape(num_agents, 3), "b": jnp.ones(num_agents)}
    return federated.FederatedState(shared=shared, private=jnp.zeros(num_agents))


def test_average_touches_shared_only_and_equals_mean():
    state = _state(4)
    out = agent_axis.for_each_agent(_client_step, 4, in_axes=(0, None))(state, 2.0)
    w = np.arange(12.0).reshape(4, 3) * 2 + np.arange(4)[:, None]
    for k in range(4):
        np.testing.assert_allclose(out.shared["w"][k], w.mean(0), rtol=1e-6)
    np.testing.assert_array_equal(out.private, np.arange(4.0))  # private leaves stay per agent


@pytest.mark.parametrize("num_agents,num_devices", [(4, 4), (8, 4), (8, 2), (6, 3)])
def test_shard_map_matches_vmap(num_agents, num_devices):
    assert jax.device_count() >= 4, "tests/conftest.py sets 4 fake CPU devices"
    state = _state(num_agents)
    expected = jax.jit(agent_axis.for_each_agent(_client_step, num_agents, in_axes=(0, None)))(state, 1.5)
    sharded = jax.jit(agent_axis.for_each_agent(_client_step, num_agents, num_devices, in_axes=(0, None)))(state, 1.5)
    chex.assert_trees_all_close(sharded, expected, rtol=0, atol=0)


def test_shard_map_under_seed_vmap():
    states = jax.tree.map(lambda x: jnp.stack([x, x + 1.0]), _state(8))
    fn = lambda s: agent_axis.for_each_agent(_client_step, 8, 4, in_axes=(0, None))(s, 1.5)  # noqa: E731
    ref = lambda s: agent_axis.for_each_agent(_client_step, 8, in_axes=(0, None))(s, 1.5)  # noqa: E731
    chex.assert_trees_all_close(jax.jit(jax.vmap(fn))(states), jax.vmap(ref)(states), rtol=0, atol=0)


def test_agent_index_is_global_under_sharding():
    idx = jax.jit(agent_axis.for_each_agent(lambda x: agent_axis.agent_index() + 0 * x, 8, 4))(jnp.zeros(8, jnp.int32))
    np.testing.assert_array_equal(idx, np.arange(8))


def test_sync_schedule():
    steps = jnp.arange(1, 301)
    assert [int(s) for s in steps[federated.is_sync_step(steps, 100)]] == [100, 200, 300]
    state = _state(2)

    def client(state, step):
        state = state.replace(shared=jax.tree.map(lambda x: x + agent_axis.agent_index(), state.shared))
        return federated.maybe_federated_average(state, step, 3)

    run = agent_axis.for_each_agent(client, 2, in_axes=(0, None))
    not_synced = run(state, jnp.int32(2))
    synced = run(state, jnp.int32(3))
    assert not np.allclose(not_synced.shared["b"][0], not_synced.shared["b"][1])
    np.testing.assert_array_equal(synced.shared["b"][0], synced.shared["b"][1])


def test_bad_device_counts_raise_before_tracing():
    with pytest.raises(ValueError, match="multiple of num_devices"):
        agent_axis.for_each_agent(_client_step, 5, 2)
    with pytest.raises(ValueError, match="num_devices must be >= 1"):
        agent_axis.for_each_agent(_client_step, 5, 0)
    with pytest.raises(ValueError, match="devices are visible"):
        agent_axis.for_each_agent(_client_step, 64, 64)


def test_device_count_bounds():
    """One device is a valid mesh; zero is not. In a run of several processes the agent axis must
    span every process's devices (checked here with a faked process count)."""
    agent_axis.check_num_devices(5, 1)
    agent_axis.check_num_devices(4, None)
    with pytest.raises(ValueError, match="num_devices must be >= 1"):
        agent_axis.check_num_devices(4, 0)


def test_several_processes_need_every_device(monkeypatch):
    monkeypatch.setattr(federated.jax, "process_count", lambda: 2)
    monkeypatch.setattr(federated.jax, "device_count", lambda: 4)
    agent_axis.check_num_devices(8, 4)
    for num_devices in (None, 2):
        with pytest.raises(ValueError, match="2 processes: set num_devices to 4"):
            agent_axis.check_num_devices(8, num_devices)


def test_federated_mean_outside_agent_axis_is_an_error():
    with pytest.raises(RuntimeError, match="for_each_agent"):
        aggregation.federated_mean(jnp.ones(3))


# -- aggregation rules: the server's seam -----------------------------------------------------------

# Six agents, three coordinates worked by hand. Coordinate 0: 4, 1, 3, 2, 6, 5 -> sorted 1..6, median
# 3.5, trimmed mean (trim 0.2: floor(1.2) = 1 dropped at each end) mean(2, 3, 4, 5) = 3.5. Coordinate
# 1: one agent uploads 1e6: sorted -1, 0, 0, 2, 3, 1e6 -> median 1, trimmed mean 5/4. Coordinate 2:
# one agent uploads NaN, which counts as +inf: sorted 1, 1, 2, 8, 9, NaN -> median 5, trimmed mean
# 20/4.
HAND = np.array([[4.0, 0.0, 8.0], [1.0, 2.0, 1.0], [3.0, 1e6, 2.0], [2.0, -1.0, np.nan], [6.0, 3.0, 1.0],
                 [5.0, 0.0, 9.0]], np.float32)
HAND_EXPECTED = {"median": [3.5, 1.0, 5.0], "trimmed_mean": [3.5, 1.25, 5.0]}
# Agents 0, 2, 3 and 5 take part; sorted, coordinate 0: 2, 3, 4, 5; coordinate 1: -1, 0, 0, 1e6;
# coordinate 2: 2, 8, 9, NaN. The median is the mean of the middle two, and so is the trimmed mean
# with trim 0.25 (floor(0.25 x 4) = 1 dropped at each end).
HAND_MASK = np.array([1.0, 0.0, 1.0, 1.0, 0.0, 1.0], np.float32)
HAND_MASKED_EXPECTED = [3.5, 0.0, 8.5]


def _rule(name, trim=0.2):
    return federated.Server(6, aggregation=name, trim=trim).rule


@pytest.mark.parametrize("num_devices", [None, 2, 3])
@pytest.mark.parametrize("name", ["median", "trimmed_mean"])
def test_robust_rules_by_hand_under_vmap_and_shard_map(name, num_devices):
    rule = _rule(name)
    out = jax.jit(agent_axis.for_each_agent(rule, 6, num_devices))(jnp.asarray(HAND))
    for k in range(6):  # every agent receives the aggregate
        np.testing.assert_allclose(out[k], HAND_EXPECTED[name], rtol=1e-6)
    # Under partial participation only the participating agents count.
    masked = jax.jit(agent_axis.for_each_agent(_rule(name, trim=0.25), 6, num_devices))(jnp.asarray(HAND),
                                                                                       jnp.asarray(HAND_MASK))
    for k in range(6):
        np.testing.assert_allclose(masked[k], HAND_MASKED_EXPECTED, rtol=1e-6)


def test_the_sorting_network_sorts_every_input():
    """Zero-one principle: a compare-exchange network sorts every input iff it sorts every 0/1
    input; checked exhaustively up to 16 agents, and on random inputs with ties up to 32."""
    rng = np.random.default_rng(2)
    for n in range(1, 33):
        if n <= 16:
            rows = (np.arange(2**n)[:, None] >> np.arange(n)) & 1
        else:
            rows = rng.integers(0, 3, (20_000, n))
        rows = rows.copy()
        for i, j in aggregation.sorting_network(n):
            low, high = np.minimum(rows[:, i], rows[:, j]), np.maximum(rows[:, i], rows[:, j])
            rows[:, i], rows[:, j] = low, high
        assert np.all(np.diff(rows, axis=1) >= 0), n
    assert len(aggregation.sorting_network(5)) == 9  # the optimal 9 comparators for 5 inputs


def _numpy_rule(name, values, mask, trim):
    """float64 reference: numpy's median, or scipy-style trimmed mean, over the participating rows
    (NaN replaced by +inf, the order the rules give it)."""
    rows = np.where(np.isnan(values), np.inf, values.astype(np.float64))[mask > 0]
    if name == "median":
        return np.median(rows, axis=0)
    cut = int(np.floor(trim * len(rows) + 1e-9))
    return np.sort(rows, axis=0)[cut:len(rows) - cut].mean(axis=0)


@pytest.mark.parametrize("name,trim", [("median", 0.2), ("trimmed_mean", 0.2), ("trimmed_mean", 0.3)])
def test_robust_rules_match_numpy_on_pytrees_under_seed_vmap_and_shard_map(name, trim):
    """Eight agents, a two-leaf tree, random values with ties, 2 seeds vmapped around the agent
    axis; all agents and a 5-agent participation mask, one vmapped program and one sharded one."""
    rng = np.random.default_rng(0)
    tree = {"w": rng.integers(-3, 4, (2, 8, 3, 2)).astype(np.float32), "b": rng.normal(size=(2, 8)).astype(np.float32)}
    masks = np.stack([np.ones(8), np.array([1, 0, 1, 1, 0, 1, 0, 1])]).astype(np.float32)  # per seed
    rule = federated.Server(8, aggregation=name, trim=trim).rule
    for num_devices in (None, 4):
        mapped = agent_axis.for_each_agent(rule, 8, num_devices)
        out = jax.jit(jax.vmap(mapped))(jax.tree.map(jnp.asarray, tree), jnp.asarray(masks))
        for seed in range(2):
            for leaf, values in tree.items():
                expected = _numpy_rule(name, values[seed], masks[seed], trim)
                for k in range(8):
                    np.testing.assert_allclose(out[leaf][seed, k], expected, rtol=1e-6, atol=1e-6)
    # Beyond 32 agents the rules sort with XLA's sort instead of a network.
    many = rng.normal(size=(40, 3)).astype(np.float32)
    many[[3, 17], 1] = [np.nan, 1e6]
    mask = (rng.random(40) < 0.7).astype(np.float32)
    out = jax.jit(agent_axis.for_each_agent(federated.Server(40, aggregation=name, trim=trim).rule, 40))(
        jnp.asarray(many), jnp.asarray(mask))
    np.testing.assert_allclose(out[0], _numpy_rule(name, many, mask, trim), rtol=1e-6)


def test_a_faulty_agent_moves_the_mean_but_not_the_robust_rules():
    """Four honest agents hold nearly the same model; agent 2 uploads NaN, then 1e6. The mean is NaN,
    then about 2e5 away; the median and the trimmed mean stay within the honest agents' spread of
    their mean."""
    honest = 1.0 + 1e-3 * np.random.default_rng(1).normal(size=(5, 4, 3)).astype(np.float32)
    honest_rows = np.delete(honest, 2, axis=0).astype(np.float64)
    spread = honest_rows.max(axis=0) - honest_rows.min(axis=0)
    for fault in (np.nan, 1e6):
        shared = honest.copy()
        shared[2] = fault
        state = federated.FederatedState(shared=jnp.asarray(shared), private=jnp.zeros(5))
        mean = np.asarray(agent_axis.for_each_agent(federated.federated_average, 5)(state).shared[0])
        if np.isnan(fault):
            assert np.all(np.isnan(mean))
        else:
            assert np.all(np.abs(mean - honest_rows.mean(axis=0)) > 1e5)
        for name in ("median", "trimmed_mean"):
            rule = federated.Server(5, aggregation=name).rule
            out = agent_axis.for_each_agent(lambda s: federated.federated_average(s, rule=rule), 5)(state)
            assert np.all(np.isfinite(out.shared)), name
            assert np.all(np.abs(np.asarray(out.shared[0]) - honest_rows.mean(axis=0)) <= spread), name
            np.testing.assert_array_equal(out.private, state.private)  # private leaves stay per agent


def test_the_mean_rule_is_the_plain_pmean_bit_for_bit():
    state = _state(4)
    server = federated.Server(4)
    assert server.rule is aggregation.federated_mean and not server.robust and not server.partial
    assert server.weights(jax.random.key(0), 3) is None
    plain = jax.jit(agent_axis.for_each_agent(federated.federated_average, 4), compiler_options=users_codegen())(state)
    seam = jax.jit(agent_axis.for_each_agent(lambda s: server.aggregate(s), 4), compiler_options=users_codegen())(state)
    chex.assert_trees_all_equal(plain, seam)
    partial = federated.Server(5, participation=0.6)
    mask = partial.weights(jax.random.key(0), 3)
    chex.assert_trees_all_equal(mask, federated.sample_participants(jax.random.fold_in(jax.random.key(0), 3), 5, 0.6))


def test_users_codegen_reaches_every_worker():
    """The bit-for-bit tests compile at users' settings in every pytest-xdist worker too, whose environment
    the controller has already given the suite's own flags (tests/conftest.py): unless the user named the
    settings themselves, `users_codegen` asks for XLA's defaults."""
    user_flags = os.environ["FEDJAX_RL_TESTS_USER_XLA_FLAGS"]
    if "xla_backend_optimization_level" not in user_flags:
        assert users_codegen()["xla_backend_optimization_level"] == 3
        assert "--xla_backend_optimization_level=1" in os.environ["XLA_FLAGS"]


def test_server_is_a_hashable_immutable_static_argument():
    """Compiled code takes the server as a static argument: equal settings hash equally, and it
    cannot change under a cached program."""
    server, same = federated.Server(5, aggregation="median"), federated.Server(5, aggregation="median")
    assert server == same and hash(server) == hash(same)
    with pytest.raises(dataclasses.FrozenInstanceError):
        server.num_agents = 4


@pytest.mark.parametrize(
    "fields,message",
    [
        (dict(aggregation="mode"), r"aggregation must be one of \['krum', 'mean', 'median', 'trimmed_mean'\], got 'mode'"),
        (dict(aggregation="trimmed_mean", trim=0.5), r"trim must be in \[0, 0.5\), got 0.5"),
        (dict(aggregation="trimmed_mean", trim=0.1), r"trim must be in \[0.2, 0.5\) .* 5 participating agents .* got 0.1"),
        (dict(aggregation="trimmed_mean", participation=0.4),
         r"'trimmed_mean' needs at least 3 participating agents .* got 2"),
        # Three participants are enough for a trimmed mean: only the trim is wrong.
        (dict(aggregation="trimmed_mean", trim=0.1, participation=0.6),
         r"trim must be in \[0.3334, 0.5\) .* 3 participating agents .* got 0.1"),
    ],
)
def test_bad_aggregation_settings_name_themselves(fields, message):
    with pytest.raises(ValueError, match=message):
        federated.Server(5, **fields)



def _robust_rules(num_agents, trim, masked):
    """Every agent's (median, trimmed mean), over the participating agents when `masked`, else over
    all (the static count of full participation); cases vmapped, so one K is one program."""

    def rules(x, weight):
        weight = weight if masked else None
        return aggregation.federated_median(x, weight), aggregation.federated_trimmed_mean(x, weight, trim=trim)

    return jax.jit(jax.vmap(agent_axis.for_each_agent(rules, num_agents)))


@pytest.mark.parametrize("family,programs", [
    ("network", ((1, False), (2, False), (2, True), (3, False), (32, True))),
    ("xla_sort", ((33, False), (33, True), (40, True))),
])
def test_robust_rules_match_float64_numpy_for_every_participant_count(family, programs):
    """Against numpy's median and a float64 trimmed mean (trim 0.25): integer values with many ties,
    +-inf and NaN among them. Masked programs take one case per participant count m = 1..K, the
    non-participants holding +-1000, which must not count: K = 32 runs every m through the largest
    sorting network (the smaller networks sort by `test_the_sorting_network_sorts_every_input`), K =
    33 and 40 through XLA's sort. Unmasked programs check the static count of full participation."""
    rng = np.random.default_rng(5)
    trim = 0.25
    for num_agents, masked in programs:
        cases = num_agents if masked else 2
        values = rng.integers(-2, 3, (cases, num_agents, 7)).astype(np.float32)
        for column, special in ((4, np.inf), (5, -np.inf), (6, np.nan)):
            values[np.arange(cases), rng.integers(num_agents, size=cases), column] = special
        masks = np.ones((cases, num_agents), np.float32)
        if masked:
            masks[:] = 0.0
            for m in range(1, cases + 1):
                masks[m - 1, rng.permutation(num_agents)[:m]] = 1.0
            values[masks == 0, 0] = 1000 * rng.choice([-1, 1], int((masks == 0).sum()))
        outs = _robust_rules(num_agents, trim, masked)(jnp.asarray(values), jnp.asarray(masks))
        for rule, out in zip(("median", "trimmed_mean"), outs):
            for case in range(cases):
                expected = _numpy_rule(rule, values[case], masks[case], trim)
                for k in (0, num_agents - 1):  # every agent receives the aggregate
                    np.testing.assert_allclose(out[case, k], expected, rtol=1e-6,
                                               err_msg=f"{rule} K={num_agents} case={case} masked={masked}")


def _numpy_krum(tree: dict, mask, byzantine: int, keep: int) -> dict:
    """float64 reference Krum / multi-Krum (Blanchard et al., 2017) over the participating agents' whole
    uploads (every leaf flattened and joined): score = the sum of the squared distances to the
    max(1, n - f - 2) nearest other uploads; a non-finite upload is never chosen."""
    flat = np.concatenate([np.asarray(v, np.float64).reshape(len(mask), -1) for v in tree.values()], axis=1)
    agents = [k for k in range(len(mask)) if mask[k] > 0]
    finite = [k for k in agents if np.all(np.isfinite(flat[k]))]
    closest = max(1, len(agents) - byzantine - 2)
    scores = {}
    for i in finite:
        distances = sorted(np.sum((flat[i] - flat[j]) ** 2) for j in finite if j != i)
        scores[i] = sum(distances[:closest]) if len(distances) >= closest else np.inf
    chosen = sorted(finite, key=lambda k: (scores[k], k))[:keep]
    return {name: np.mean(np.asarray(v, np.float64)[chosen], axis=0) for name, v in tree.items()}, chosen


@pytest.mark.parametrize("byzantine,keep", [(1, 1), (2, 1), (1, 2), (1, 3), (2, 4)])
def test_krum_matches_a_float64_reference_on_pytrees_with_a_faulty_agent(byzantine, keep):
    """Nine agents, a two-leaf tree: honest uploads near one model, one far off (a scaled model) and one
    NaN, all agents and a 7-agent participation mask. Krum returns the reference's chosen upload bit for
    bit; multi-Krum the mean of the reference's chosen ones, to float32 rounding."""
    rng = np.random.default_rng(7)
    tree = {"w": (1.0 + 0.1 * rng.normal(size=(9, 3, 2))).astype(np.float32),
            "b": (0.5 + 0.1 * rng.normal(size=(9, 4))).astype(np.float32)}
    tree["w"][4] *= 50.0  # a scaled upload
    tree["b"][6, 2] = np.nan  # a non-finite one
    rule = federated.Server(9, aggregation="krum", krum_byzantine=byzantine, krum_keep=keep).rule
    for mask in (np.ones(9, np.float32), np.array([1, 1, 0, 1, 1, 1, 1, 0, 1], np.float32)):
        out = jax.jit(agent_axis.for_each_agent(rule, 9))(jax.tree.map(jnp.asarray, tree), jnp.asarray(mask))
        expected, chosen = _numpy_krum(tree, mask, byzantine, keep)
        assert 4 not in chosen and 6 not in chosen
        for name in tree:
            for k in range(9):
                if keep == 1:
                    np.testing.assert_array_equal(out[name][k], tree[name][chosen[0]])
                else:
                    np.testing.assert_allclose(out[name][k], expected[name], rtol=1e-6)


def test_krum_chooses_what_flowers_krum_chooses():
    """Flower's own Krum (`flwr.server.strategy.aggregate.aggregate_krum`, equal example counts) on the
    same finite uploads, every agent taking part: the same upload for Krum, the same mean for multi-Krum."""
    aggregate = pytest.importorskip("flwr.server.strategy.aggregate")
    rng = np.random.default_rng(11)
    uploads = [[(0.2 * rng.normal(size=(3, 2)) + (20.0 if k == 5 else 0.0)).astype(np.float32),
                rng.normal(size=4).astype(np.float32)] for k in range(8)]
    tree = {"a": np.stack([u[0] for u in uploads]), "b": np.stack([u[1] for u in uploads])}
    # The defaults (None) are plain Krum, built for one faulty agent.
    for byzantine, keep in ((None, None), (1, 1), (2, 1), (1, 3)):
        settings = {} if byzantine is None else dict(krum_byzantine=byzantine, krum_keep=keep)
        rule = federated.Server(8, aggregation="krum", **settings).rule
        out = jax.jit(agent_axis.for_each_agent(rule, 8))(jax.tree.map(jnp.asarray, tree))
        byzantine, keep = byzantine or 1, keep or 1
        theirs = aggregate.aggregate_krum([(u, 10) for u in uploads], byzantine, keep if keep > 1 else 0)
        np.testing.assert_allclose(np.asarray(out["a"][0]), theirs[0], rtol=1e-6)
        np.testing.assert_allclose(np.asarray(out["b"][0]), theirs[1], rtol=1e-6)


def test_krum_with_three_agents_and_no_faulty_one_scores_by_the_one_nearest_upload():
    """n = 3, f = 0, worked by hand: max(1, n - f - 2) = 1 nearest upload per score. Uploads 0, 1 and 10
    score 1, 1 and 81; the tie goes to the lower agent index, so every agent receives agent 0's upload.
    (Scored by their two nearest, agent 1 would win: 101, 82, 181.)"""
    rule = federated.Server(3, aggregation="krum", krum_byzantine=0, krum_keep=1).rule
    out = jax.jit(agent_axis.for_each_agent(rule, 3))(jnp.asarray([[0.0], [1.0], [10.0]]))
    np.testing.assert_array_equal(out, [[0.0], [0.0], [0.0]])


def test_krum_breaks_ties_by_the_lower_agent_index():
    """17 one-hot uploads: every pair is at squared distance 2, so every score ties. Krum takes agent 0's
    upload and multi-Krum (keep 3) the mean of agents 0-2's. 17 agents, because XLA's CPU sort keeps
    ties in order below that size even where it is not asked to."""
    uploads = jnp.eye(17)
    for keep, expected in ((1, np.eye(17)[0]), (3, np.eye(17)[:3].mean(axis=0))):
        rule = federated.Server(17, aggregation="krum", krum_byzantine=1, krum_keep=keep).rule
        out = jax.jit(agent_axis.for_each_agent(rule, 17))(uploads)
        np.testing.assert_allclose(out, np.broadcast_to(expected, (17, 17)), rtol=1e-6)


@pytest.mark.parametrize("name", ["median", "trimmed_mean", "krum"])
def test_robust_rules_refuse_integer_leaves(name):
    rule = federated.Server(6, aggregation=name, trim=0.2).rule
    with pytest.raises(TypeError, match="robust aggregation needs floating-point shared leaves, got int32"):
        agent_axis.for_each_agent(rule, 6)({"w": jnp.ones((6, 2)), "steps": jnp.ones((6,), jnp.int32)})


def test_krum_accepts_its_bounds_at_equality():
    # n >= 2 f + 3 and keep <= n - f, both met with equality: 7 agents, f = 2, keep = 5.
    federated.Server(7, 1.0, "krum", krum_byzantine=2, krum_keep=5)


@pytest.mark.parametrize("agents, participation, byzantine, keep, expected", [
    (4, 1.0, 1, 1, r"krum_byzantine must be in \[0, 0\] .* with 4 participating agents .*got 1"),
    (9, 0.5, 2, 1, r"krum_byzantine must be in \[0, 1\] .* with 5 participating agents .*got 2"),
    (2, 1.0, 0, 1, "aggregation 'krum' needs at least 3 participating agents, got 2"),
    (7, 1.0, 1, 7, r"krum_keep must be in \[1, 6\] .*got 7"),
    (7, 1.0, -1, 1, "krum_byzantine must be >= 0"),
], ids=["f-too-large", "f-too-large-partial", "too-few-agents", "keep-too-large", "negative-f"])
def test_krum_refuses_what_it_cannot_do_before_compiling(agents, participation, byzantine, keep, expected):
    with pytest.raises(ValueError, match=expected):
        federated.Server(agents, participation, "krum", krum_byzantine=byzantine, krum_keep=keep)
    from fedjax_rl.training import configs

    with pytest.raises(ValueError, match=expected):
        configs.train_config("fedrdqn", "CartPole-v1", num_agents=agents, participation=participation,
                             aggregation="krum", krum_byzantine=byzantine, krum_keep=keep)
