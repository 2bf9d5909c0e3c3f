"""The algorithms as Flower apps (fedjax_rl.flower): a federation of processes computes what the
compiled program computes.

Known answers: an agent as a process (`federation.Member`) and the server's rule on the stacked
uploads (`federation.Aggregation`) reproduce the program's own round, `program.agent_round` mapped
over the agent axis, bit for bit, round after round, under full and partial participation and a
robust rule. Against `loop.run` (the seed-vmapped block program) they agree to float rounding: that
program is another shape, and XLA's CPU code for it rounds a few products differently (from round 5
of this run, measured: at most 1.7e-7 in the global model after 8 rounds), as a grid's points and
`train` as one fused program do (docs/reproducibility.md). Flower's simulation engine, with the
server's and clients' messages, gives the in-process federation's global model bit for bit.

Most tests drive the ServerApp through `LocalGrid`, which delivers messages to ClientApp calls in
this process; one runs Flower's simulation engine (Ray workers) as a user would, marked `deployment`
with the other tests of real processes, in a network of its own (tests/loopback.py).
"""

from __future__ import annotations

import functools
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

# Flower reports usage to its servers unless told not to (read when flwr is first imported); tests do not.
os.environ["FLWR_TELEMETRY_ENABLED"] = "0"
pytest.importorskip("flwr")

from flwr.app import Context, Error, Message, RecordDict  # noqa: E402
from flwr.common.constant import ErrorCode  # noqa: E402
from flwr.supercore.task_identity import TaskIdentity  # noqa: E402

from fedjax_rl.analysis import plots  # noqa: E402
from fedjax_rl.cli import commands  # noqa: E402
from fedjax_rl.core import agent_axis, attacks, federated  # noqa: E402
from fedjax_rl.flower import apps, federation  # noqa: E402
from fedjax_rl.training import configs, loop, program  # noqa: E402
from loopback import private_network  # noqa: E402

SEED = 7
# Measured on this file's configs (AVX2): at most 1.7e-7 (the mean) and 2.5e-6 (the median under partial
# participation) after 8 rounds; the bound leaves room for another CPU's rounding and stays far below
# a change of algorithm (one Adam step moves a parameter by about the learning rate, 1e-3).
ROUNDING_BOUND = 1e-4


def small_config(**overrides):
    settings = dict(num_agents=2, steps_per_agent=400, sync_every=50, eval_every_rounds=4, eval_episodes=2,
                    sweep_points=2, tensorboard=False)
    settings.update(overrides)
    return configs.train_config("fedrdqn", "CartPole-v1",
                                agent_overrides=dict(hidden_sizes=(32, 32), learning_starts=50, buffer_size=500,
                                                     batch_size=16), **settings)


class LocalGrid:
    """What `apps.run_federation` needs of a Flower Grid, delivering each message to a ClientApp call
    in this process (one Context per node, kept across rounds, as a SuperNode keeps it)."""

    def __init__(self, node_configs: list[dict], client=None, fail_at: tuple[int, str, int] | None = None,
                 unavailable: int = 0, late: tuple[int, ...] = ()):
        """`fail_at` (agent index, message type, round): that agent's client raises when asked for that.
        `unavailable`: so many more nodes listed that the SuperLink reports unavailable (machines that went
        down, listed until their heartbeats are missed); `late`: agent indices whose nodes are listed
        from the second listing on (SuperNodes restarting)."""
        # Who is sending, as Flower's runtime records it for the ServerApp's process.
        TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1
        self.client = client or apps.client_app()
        self.contexts = {100 + i: Context(run_id=1, node_id=100 + i, node_config=dict(node), state=RecordDict(),
                                          run_config={})
                         for i, node in enumerate(node_configs)}
        self.sent = []  # message types, in order
        self.uploads = []  # (round, agent index) of each train reply that carried shared leaves
        self.fail_at = fail_at
        self.replies = {}
        self.unavailable = [900 + i for i in range(unavailable)]
        self.late, self.listings = late, 0

    def get_node_ids(self):
        self.listings += 1
        listed = [n for n, c in self.contexts.items() if self.listings > 1 or c.node_config[federation.AGENT_INDEX]
                  not in self.late]
        return self.unavailable + listed

    def push_messages(self, messages):
        """Delivers each message at once; its reply waits to be pulled."""
        ids = []
        for message in messages:
            message.metadata.__dict__["_message_id"] = message_id = f"m{len(self.sent)}"
            self.sent.append(message.metadata.message_type)
            if message.metadata.dst_node_id in self.unavailable:
                self.replies[message_id] = Message(Error(code=ErrorCode.NODE_UNAVAILABLE, reason="Node Unavailable"),
                                                   reply_to=message)
                ids.append(message_id)
                continue
            context = self.contexts[message.metadata.dst_node_id]
            try:
                if self.fail_at == (context.node_config[federation.AGENT_INDEX], message.metadata.message_type,
                                    message.content[apps.RUN].get("round")):
                    raise RuntimeError("the client's machine went down")
                reply = self.client(message, context)
                if message.metadata.message_type == "train" and apps.SHARED in reply.content:
                    self.uploads.append((message.content[apps.RUN]["round"], context.node_config[federation.AGENT_INDEX]))
            except Exception as error:  # as a SuperNode reports a ClientApp's exception
                reply = Message(Error(code=1, reason=f"{type(error).__name__}: {error}"), reply_to=message)
            self.replies[message_id] = reply
            ids.append(message_id)
        return ids

    def pull_messages(self, message_ids):
        return [self.replies.pop(i) for i in message_ids if i in self.replies]


def nodes(num_agents: int, **physics) -> list[dict]:
    return [{federation.AGENT_INDEX: k, federation.NUM_AGENTS: num_agents, **physics} for k in range(num_agents)]


def leaves(tree) -> dict:
    return federation.to_arrays(tree)


def max_difference(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float(np.max(np.abs(a[k].astype(np.float64) - b[k].astype(np.float64)))) for k in a)


def program_rounds(config, seed: int):
    """The compiled program's own rounds, one jitted call each (`program.agent_round` over the agent
    axis, the server's participants drawn as `run_block` draws them): the global model after each."""
    trainer = program.make_trainer(config)
    setup = trainer.setup
    partial = setup.server.partial
    state = jax.jit(trainer.init)(program.seed_keys(seed, 1)[0])
    mapped = jax.jit(agent_axis.for_each_agent(functools.partial(program.agent_round, setup), config.num_agents,
                                              in_axes=(0, None, None, 0 if partial else None)))
    agents, models = state.agents, []
    for r in range(config.num_rounds):
        agents, _ = mapped(agents, jnp.int32(r), trainer.hparams, setup.server.weights(state.server_key, r))
        models.append(leaves(jax.tree.map(lambda x: x[0], agents.learner.shared)))
    return models


def member_rounds(config, seed: int, left_out: dict[int, int] | None = None):
    """The same federation with every agent a `federation.Member` and the server's rule applied to
    their uploads: the global model after each round. `left_out` {round: agent}: that agent's upload
    does not enter that round (weight 0)."""
    members = [federation.Member(config, seed, k) for k in range(config.num_agents)]
    aggregate = federation.Aggregation(federated.Server(config.num_agents, config.participation,
                                                        config.aggregation, config.trim))
    carries, models = [m.init() for m in members], []
    for r in range(config.num_rounds):
        carries = [m.local_round(c, r)[0] for m, c in zip(members, carries)]
        weights = federation.participants(aggregate.server, seed, r)
        if left_out and r in left_out:
            weights = np.ones(config.num_agents, np.float32) if weights is None else np.array(weights)
            weights[left_out[r]] = 0.0
        model = aggregate([c.learner.shared for c in carries], weights)
        carries = [m.with_shared(c, model) for m, c in zip(members, carries)]
        models.append(leaves(model))
    return models


@pytest.fixture(scope="module")
def compiled_run(tmp_path_factory):
    """`loop.run` of the small config (one seed), written to a run directory."""
    out = str(tmp_path_factory.mktemp("compiled"))
    result = loop.run(small_config(), seed=SEED, out_dir=out, progress=False)
    return out, result


def global_params(run_dir: str) -> dict:
    with np.load(os.path.join(run_dir, "global_params.npz")) as data:
        return {k[len("leaf:"):]: data[k][0] for k in data.files if k.startswith("leaf:")}


# Partial participation that leaves an agent out: ceil(0.5 x 3) = 2 of 3 agents each round.
PARTIAL = dict(num_agents=3, participation=0.5, aggregation="median")


def program_participants(config, seed: int) -> list[set[int]]:
    """The compiled program's participants, round by round: `Server.weights` on the server key that
    `trainer.init` draws from the seed (as `run_block` reads it)."""
    trainer = program.make_trainer(config)
    state = jax.jit(trainer.init)(program.seed_keys(seed, 1)[0])
    return [set(np.flatnonzero(np.asarray(trainer.setup.server.weights(state.server_key, r))).tolist())
            for r in range(config.num_rounds)]


@pytest.mark.parametrize("settings", [dict(), PARTIAL], ids=["mean", "median-partial"])
def test_members_are_the_programs_agents(settings):
    config = small_config(**settings)
    differences = [max_difference(ours, its)
                   for ours, its in zip(member_rounds(config, SEED), program_rounds(config, SEED))]
    print("largest difference from the program's rounds, round by round:", differences)
    assert max(differences) <= ROUNDING_BOUND


def test_a_round_compiles_once_whether_its_carry_came_from_init_or_the_network():
    # A client holds round 0's carry from init and every later one from arrays (a message, its
    # context, its disk), which have no weakly typed leaves: one program serves both.
    member = federation.Member(small_config(), SEED, 0)
    carry, _ = member.local_round(member.init(), 0)
    member.local_round(federation.from_arrays(federation.to_arrays(carry), member.carry_shapes()), 1)
    assert member._round._cache_size() == 1  # the jitted round's compiled programs


def test_a_federation_on_the_local_grid_is_the_compiled_run(compiled_run, tmp_path):
    compiled_dir, compiled = compiled_run
    config = small_config(tensorboard=True)  # not part of a run's identity: the same run
    grid = LocalGrid(nodes(2))
    result = apps.run_federation(grid, config, SEED, str(tmp_path), say=lambda _: None)
    ours = global_params(str(tmp_path))
    assert max_difference(ours, member_rounds(config, SEED)[-1]) == 0.0
    assert max_difference(ours, global_params(compiled_dir)) <= ROUNDING_BOUND
    # The same evaluations: common episode keys, so equal returns from (nearly) equal policies.
    for part, names in (("curve", ("local_returns", "nominal_return")), ("final", ("local_returns", "sweep_returns"))):
        for name in names:
            np.testing.assert_array_equal(result[part][name], compiled[part][name], err_msg=f"{part}/{name}")
    np.testing.assert_allclose(result["final"]["physics_values"], compiled["final"]["physics_values"], rtol=1e-6)
    # Only what the protocol says crossed: a setup query, then train messages, evaluations per block.
    assert grid.sent[:2] == ["query", "query"] and grid.sent.count("train") == 2 * config.num_rounds
    # The run directory reads as any run's: compare's table (beside the compiled run: the same
    # numbers), the figures, TensorBoard's events (one point per block, equal to the curve).
    from fedjax_rl.analysis import plots
    from references import tensorboard_scalars

    table = plots.comparison_table([str(tmp_path), compiled_dir]).splitlines()
    rows = [line.split("|")[1:] for line in table if line.startswith((str(tmp_path), compiled_dir))]
    # The same numbers; the labels say where each ran, and the two are compared, paired by seed.
    assert len(rows) == 2 and rows[0][:1] + rows[0][2:] == rows[1][:1] + rows[1][2:], table
    assert [row[1].strip() for row in rows] == ["FedRDQN (ω=0.1) [runtime=flower]", "FedRDQN (ω=0.1) [runtime=compiled]"]
    assert any("[runtime=flower]" in line and "(paired)" in line for line in table), table
    figures = plots.plot_results([plots.load_run(str(tmp_path))], str(tmp_path / "figure"))
    assert figures and all(os.path.getsize(path) > 0 for path in figures)
    shown = tensorboard_scalars(str(tmp_path))
    assert [v for _, v in shown["eval/local_minimum"]] == list(np.float32(result["curve"]["local_minimum"][0]))
    # The CSVs name the run's seed, as its command gave it (seed=7) and TensorBoard names it, not its index 0.
    for run_dir in (str(tmp_path), compiled_dir):
        for name in ("final.csv", "metrics.csv"):
            with open(os.path.join(run_dir, name)) as f:
                assert {line.split(",")[0] for line in f.read().splitlines()[1:]} == {str(SEED)}, (run_dir, name)
    assert [s for s, _ in shown["eval/local_average"]] == [200, 400]


def test_partial_participation_and_a_robust_rule_are_the_librarys(tmp_path):
    """Every client trains each round; the round's participants, and they alone, upload: drawn from the
    server's key stream exactly as the compiled program draws them (2 of 3 agents a round, so a wrong
    key or a wrong draw leaves a different agent out), and the global model is the compiled program's."""
    config = small_config(**PARTIAL, steps_per_agent=300, eval_every_rounds=3)
    grid = LocalGrid(nodes(3))
    apps.run_federation(grid, config, SEED, str(tmp_path), say=lambda _: None)
    drawn = program_participants(config, SEED)
    uploaded = [{k for r, k in grid.uploads if r == round_index} for round_index in range(config.num_rounds)]
    assert uploaded == drawn
    assert all(len(who) == 2 for who in drawn) and len({frozenset(who) for who in drawn}) > 1, drawn
    assert grid.sent.count("train") == 3 * config.num_rounds
    ours = global_params(str(tmp_path))
    assert max_difference(ours, member_rounds(config, SEED)[-1]) == 0.0
    assert max_difference(ours, program_rounds(config, SEED)[-1]) <= ROUNDING_BOUND


def poisoning(agents: tuple[int, ...], round_index: int):
    """A ClientApp whose `agents` upload NaN in round `round_index` (a diverged or hostile party): their
    own training is untouched, only the upload the server receives."""
    real = apps.client_app()

    def client(message, context):
        reply = real(message, context)
        if (message.metadata.message_type == "train" and context.node_config[federation.AGENT_INDEX] in agents
                and message.content[apps.RUN]["round"] == round_index and apps.SHARED in reply.content):
            arrays = {name: np.full_like(value, np.nan) for name, value in apps._arrays(reply.content[apps.SHARED]).items()}
            reply.content[apps.SHARED] = apps.ArrayRecord({name: apps.Array(value) for name, value in arrays.items()})
        return reply

    return client


def test_a_nan_upload_is_refused_and_the_round_goes_on_without_it(tmp_path):
    """Agent 1 uploads NaN in round 6 of 8 (the round where CartPole's DQN trains, train_freq 256): the server leaves its upload out of that round as a dropped
    client's, says so, records the party and the round, and the global model is finite and equals the
    federation without that upload; with every upload NaN there is nothing to aggregate and the run
    stops, resumable, naming the round."""
    config = small_config()
    out, said = str(tmp_path / "run"), []
    result = apps.run_federation(LocalGrid(nodes(2), client=poisoning((1,), 5)), config, SEED, out, say=said.append)
    assert [line for line in said if "refused" in line] == [
        "round 6: refused agent 1's upload (non-finite values in " + ", ".join(
            list(leaves(federation.Member(config, SEED, 0).carry_shapes().learner.shared))[:3])
        + f" and {len(leaves(federation.Member(config, SEED, 0).carry_shapes().learner.shared)) - 3} more); the "
          "round aggregates the others"]
    assert result["federation"]["refused_uploads"] == [{"round": 6, "agent": 1}]
    written = json.loads(open(os.path.join(out, "metrics.json")).read())
    assert written["federation"]["refused_uploads"] == [{"round": 6, "agent": 1}]
    ours = global_params(out)
    assert all(np.all(np.isfinite(v)) for v in ours.values())
    assert max_difference(ours, member_rounds(config, SEED, left_out={5: 1})[-1]) == 0.0
    assert max_difference(ours, member_rounds(config, SEED)[-1]) > 0.0  # the upload would have counted
    with pytest.raises(apps.FederationError, match="round 1: every upload was refused .* agents \\[0, 1\\]"):
        apps.run_federation(LocalGrid(nodes(2), client=poisoning((0, 1), 0)), config, SEED, str(tmp_path / "all"),
                            say=lambda _: None)


def test_a_stale_node_uploads_the_initial_model_the_compiled_program_freezes():
    """`attack=stale`: a node uploads its agent's initial shared leaves, whatever it trained, as the
    compiled program's stale attacker uploads the model it froze at init (`AgentCarry.frozen`)."""
    config = small_config(attackers=1, attack="stale")
    trainer = program.make_trainer(config)
    frozen = jax.jit(trainer.init)(program.seed_keys(SEED, 1)[0]).agents.frozen  # [K, ...]
    for k in range(config.num_agents):
        member = federation.Member(config, SEED, k)
        trained = jax.tree.map(lambda x: x + 1.0, member.init().learner.shared)
        upload = federation.attacked_upload(member, trained, 3, ("stale", 1.0))
        assert max_difference(leaves(upload), leaves(jax.tree.map(lambda x, k=k: x[k], frozen))) == 0.0
        assert max_difference(leaves(upload), leaves(trained)) > 0.0


def test_a_node_configured_to_attack_uploads_the_programs_attack(tmp_path):
    """A node whose configuration says `attack=scale attack-scale=3` uploads its agent's model times 3
    (`core.attacks`, as `attackers` does in the compiled run); the others are honest. The global model is
    the members' federation with that agent's upload replaced so, bit for bit; a bad attack is refused
    at setup, naming the agent."""
    config = small_config()
    attack = {federation.ATTACK: "scale", federation.ATTACK_SCALE: 3.0}
    grid = LocalGrid([nodes(2)[0], {**nodes(2)[1], **attack}])
    apps.run_federation(grid, config, SEED, str(tmp_path / "run"), say=lambda _: None)
    members = [federation.Member(config, SEED, k) for k in range(2)]
    aggregate = federation.Aggregation(federated.Server(2))
    carries = [m.init() for m in members]
    for r in range(config.num_rounds):
        carries = [m.local_round(c, r)[0] for m, c in zip(members, carries)]
        uploads = [carries[0].learner.shared,
                   federation.attacked_upload(members[1], carries[1].learner.shared, r, ("scale", 3.0))]
        model = aggregate(uploads)
        carries = [m.with_shared(c, model) for m, c in zip(members, carries)]
    assert max_difference(global_params(str(tmp_path / "run")), leaves(model)) == 0.0
    assert max_difference(leaves(model), member_rounds(config, SEED)[-1]) > 0.0
    bad = LocalGrid([nodes(2)[0], {**nodes(2)[1], federation.ATTACK: "lie"}])
    with pytest.raises(apps.FederationError, match=r"agent 1: attack must be one of \['sign_flip', 'scale', 'noise', 'stale', 'alie', 'ipm'\]"):
        apps.run_federation(bad, config, SEED, None, say=lambda _: None)
    assert "train" not in bad.sent


@pytest.mark.parametrize("fail_at, failed, saved", [
    ((1, "train", 5), "round 6", 5),
    # After its round 4 a client is asked for its evaluation before the server saves round 4.
    ((1, "evaluate", 4), "evaluation after round 4", 3),
], ids=["training", "evaluation"])
def test_a_failed_client_stops_the_run_and_it_resumes_from_the_rounds_it_finished(compiled_run, tmp_path, fail_at,
                                                                                   failed, saved):
    config = small_config()
    out, state_dir = str(tmp_path / "run"), str(tmp_path / "client_state")
    node_configs = nodes(2, **{apps.STATE_DIR: state_dir})
    with pytest.raises(apps.FederationError) as raised:
        apps.run_federation(LocalGrid(node_configs, fail_at=fail_at), config, SEED, out, say=lambda _: None)
    message = str(raised.value)
    assert f"{failed} failed on 1 client(s): agent 1" in message and "the client's machine went down" in message
    # A script learns it from the run directory (Flower's `flwr run` exits 0 whatever happened).
    assert _status(out) == (1, "failed")
    assert f"the {saved} finished round(s) are saved in {out}" in message
    assert "run the same command to resume" in message
    # Restarted clients (new contexts: only their state directories remain) and the same call, made while
    # the SuperLink still lists the lost node and before agent 1's restarted one is listed (met on a
    # deployment of processes: the killed node was asked and its unavailability stopped the resumed run).
    said = []
    grid = LocalGrid(node_configs, unavailable=1, late=(1,))
    result = apps.run_federation(grid, config, SEED, out, say=said.append)
    assert f"resuming after round {saved} of 8" in said[0]
    assert _status(out) == (0, "finished")
    assert grid.sent.count("train") == 2 * (8 - saved)
    assert max_difference(global_params(out), member_rounds(config, SEED)[-1]) == 0.0
    _, uninterrupted = compiled_run
    np.testing.assert_array_equal(result["curve"]["local_returns"], uninterrupted["curve"]["local_returns"])
    # Each client keeps its last two carries.
    kept = sorted(os.listdir(os.path.dirname(federation.carry_path(state_dir, federation.config_message(config, SEED),
                                                                   1, 8))))
    assert kept == ["before_round_7.npz", "before_round_8.npz"]


def test_a_node_sets_its_own_physics_and_the_run_records_it(compiled_run, tmp_path):
    """Each node's physics (scales of the nominal value) reach its agent; config.json records them and the
    runtime, so that `compare` does not judge a federation in the nodes' environments against a run in
    drawn ones, and says why; a resumed run whose nodes now have other physics is refused."""
    config = small_config()  # the compiled run's settings: only the physics differ
    out = str(tmp_path / "nodes")
    node_configs = [{federation.AGENT_INDEX: 0, "length": 1.3}, {federation.AGENT_INDEX: 1, "length": 0.7}]
    said = []
    result = apps.run_federation(LocalGrid(node_configs), config, SEED, out, say=said.append)
    np.testing.assert_allclose(result["final"]["physics_values"][0, :, 0], [0.5 * 1.3, 0.5 * 0.7], rtol=1e-6)
    assert "agent 0 length=0.65 (x1.3, its node); agent 1 length=0.35 (x0.7, its node)" in said[0]
    recorded = json.loads(open(os.path.join(out, "config.json")).read())["provenance"]
    assert (recorded["runtime"], recorded["physics"], recorded["scales"]) == (
        "flower", "set by the nodes", [{"length": 1.3}, {"length": 0.7}])
    assert recorded["agents"] == [{"length": pytest.approx(0.65)}, {"length": pytest.approx(0.35)}]
    compiled_dir, _ = compiled_run
    table = plots.comparison_table([out, compiled_dir])
    assert "(paired)" not in table and "(unpaired)" not in table, table
    [reason] = [line for line in table.splitlines() if "other physics" in line]
    assert ": other physics: " in reason and "set by the nodes (agent 0 length=0.65 (x1.3); agent 1 length=0.35 (x0.7))" \
        in reason and "drawn (max_rate 0.5)" in reason and "budget" not in reason, table
    # The same directory, resumed by nodes of other physics: refused, and recorded as failed.
    os.remove(os.path.join(out, "finished.json"))
    other = [dict(node_configs[0], length=1.2), node_configs[1]]
    with pytest.raises(apps.FederationError, match="the clients' physics are not those of the 8 round"):
        apps.run_federation(LocalGrid(other), config, SEED, out, say=lambda _: None)
    assert _status(out) == (1, "failed")


def _status(out: str, printed: list | None = None) -> tuple[int, str]:
    """`fedjax-rl status OUT`'s exit code and the word its line says; the line itself goes to `printed`."""
    import contextlib
    import io

    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        try:
            code = commands.main(["status", out])
        except SystemExit as exit_:
            code = exit_.code
    line = text.getvalue()
    if printed is not None:
        printed.append(line)
    return code, line.split(": ")[1].split()[0]


@pytest.mark.parametrize("node_configs, expected", [
    ([{federation.AGENT_INDEX: 0, "lenght": 1.3}, {federation.AGENT_INDEX: 1}], "'lenght', which this environment"),
    ([{federation.AGENT_INDEX: 0, "length": -1.0}, {federation.AGENT_INDEX: 1}], "length=-1.0"),
    ([{federation.AGENT_INDEX: 0}, {federation.AGENT_INDEX: 0}], "both run agent 0"),
    ([{federation.AGENT_INDEX: 0}, {federation.AGENT_INDEX: 2}], "must be in [0, 2)"),
    ([{federation.AGENT_INDEX: 0}], "num_agents=2 clients are needed, 1 connected"),
], ids=["unknown-physics", "bad-scale", "duplicate-index", "index-out-of-range", "too-few-clients"])
def test_bad_federations_stop_before_anything_trains(node_configs, expected, tmp_path):
    grid = LocalGrid(node_configs)
    out = str(tmp_path / "run")
    with pytest.raises(apps.FederationError) as raised:
        apps.run_federation(grid, small_config(), SEED, out, wait_s=0.5, say=lambda _: None)
    assert expected in str(raised.value)
    assert "train" not in grid.sent
    # The script's view: exit 1 and the library's one line, naming the agent where a node's setting is bad.
    printed = []
    assert _status(out, printed) == (1, "failed")
    line = printed[0].strip()
    assert "\n" not in line and expected in line and "agent ?" not in line, line
    if "physics" in expected or "length" in expected:
        assert "node 100: ValueError: agent 0: node configuration" in line, line


def test_a_node_the_superlink_reports_unavailable_is_no_client():
    grid = LocalGrid(nodes(2)[:1], unavailable=1)
    with pytest.raises(apps.FederationError, match=r"num_agents=2 clients are needed, 1 connected within 0.5 s"):
        apps.run_federation(grid, small_config(), SEED, None, wait_s=0.5, say=lambda _: None)
    assert "train" not in grid.sent


def test_an_algorithm_a_client_lacks_is_named(monkeypatch):
    # The server's settings name an algorithm the clients' installation does not have.
    real = federation.config_message

    def foreign(config, seed):
        recorded = json.loads(real(config, seed))
        return json.dumps({**recorded, "algo": "not_installed_here"})

    monkeypatch.setattr(federation, "config_message", foreign)
    grid = LocalGrid(nodes(2))
    with pytest.raises(apps.FederationError, match="setup failed on 2 client.*not_installed_here"):
        apps.run_federation(grid, small_config(), SEED, None, say=lambda _: None)
    assert "train" not in grid.sent


class _TwoPhysics:
    """What `federation.physics_scales` asks of an environment: its physics' names."""

    @staticmethod
    def physics_names(params):
        return ("length", "masscart")


def test_a_nodes_settings_and_the_servers_screening_by_hand():
    """The server's plain Python without a round (the federation tests above reach it through training):
    a node's physics and attack settings read from its configuration, non-finite uploads left out as a
    dropped client's, and the path of a client's kept carry."""
    node = {federation.AGENT_INDEX: 0, federation.NUM_AGENTS: 2, federation.STATE_DIR: "/tmp/x",
            federation.ATTACK: "scale", federation.ATTACK_SCALE: 3}
    assert federation.physics_scales(node, _TwoPhysics, None) == {}
    scales = federation.physics_scales({**node, "length": 0.8, "masscart": 2}, _TwoPhysics, None)
    assert scales == {"length": 0.8, "masscart": 2.0} and isinstance(scales["masscart"], float)
    with pytest.raises(ValueError, match="sets 'lenght', which this environment does not have; its physics: "
                                         "length, masscart"):
        federation.physics_scales({"lenght": 1.3}, _TwoPhysics, None)
    for bad in (0.0, -1.0, True, "1.3"):
        with pytest.raises(ValueError, match="must be a number > 0"):
            federation.physics_scales({"length": bad}, _TwoPhysics, None)

    assert federation.node_attack({federation.AGENT_INDEX: 1}) is None
    assert federation.node_attack(node) == ("scale", 3.0)
    assert federation.node_attack({federation.ATTACK: "noise", federation.ATTACK_SCALE: 0.5}) == ("noise", 0.5)
    assert federation.node_attack({federation.ATTACK: "sign_flip"}) == ("sign_flip", attacks.ATTACK_SCALE.default)
    with pytest.raises(ValueError, match="attack must be one of"):
        federation.node_attack({federation.ATTACK: "lie"})
    for omniscient in attacks.OMNISCIENT:  # a client sees no other party's model to build them from
        with pytest.raises(ValueError, match=rf"attack={omniscient}: .* a Flower client does not see"):
            federation.node_attack({federation.ATTACK: omniscient})
    for bad in (0.0, -2.0, True, "3"):
        with pytest.raises(ValueError, match=r"attack-scale=.*must be a number > 0"):
            federation.node_attack({federation.ATTACK: "noise", federation.ATTACK_SCALE: bad})

    finite = {"q": np.ones(2, np.float32), "key": np.arange(2, dtype=np.uint32)}
    uploads = [finite, {"q": np.array([1.0, np.nan], np.float32), "b": np.ones(1, np.float32)}, None,
               {"q": np.ones(2, np.float32), "b": np.array([-np.inf], np.float32)}]
    assert federation.nonfinite_leaves(uploads) == {1: ["q"], 3: ["b"]}
    kept, weights, refused = federation.screened(uploads, None)
    assert kept == [finite, None, None, None] and refused == {1: ["q"], 3: ["b"]}
    np.testing.assert_array_equal(weights, [1.0, 0.0, 1.0, 0.0])
    assert weights.dtype == np.float32
    drawn = np.array([0.0, 1.0, 1.0, 1.0], np.float32)  # partial participation's draw, agent 0 left out
    _, weights, _ = federation.screened(uploads, drawn)
    np.testing.assert_array_equal(weights, [0.0, 0.0, 1.0, 0.0])
    np.testing.assert_array_equal(drawn, [0.0, 1.0, 1.0, 1.0])  # the draw itself is not changed
    all_finite = [finite, finite]
    assert federation.screened(all_finite, None) == (all_finite, None, {})

    import hashlib

    run = hashlib.sha256(b"settings").hexdigest()[:16]
    assert federation.carry_path("state", "settings", 1, 5) == os.path.join(
        "state", f"run_{run}", "agent_1", "before_round_5.npz")


def test_a_private_network_has_loopback_alone_and_keeps_what_listens_in_it():
    """What the Ray tests stand on (tests/loopback.py): inside, loopback is the one interface and it is
    up; a server bound to every interface there cannot be reached from the machine's own network."""
    import socket

    def namespace():
        return os.stat("/proc/thread-self/ns/net").st_ino

    machines = namespace()
    with private_network():
        assert namespace() != machines
        assert [name for _, name in socket.if_nameindex()] == ["lo"]
        server = socket.create_server(("0.0.0.0", 0))
        port = server.getsockname()[1]
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    assert namespace() == machines
    with server, pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5)


@pytest.mark.deployment  # Ray's processes (tests/loopback.py)
def test_flowers_simulation_engine_runs_the_same_federation(compiled_run, tmp_path):
    from flwr.simulation import run_simulation

    compiled_dir, _ = compiled_run
    config = small_config()
    with private_network():
        run_simulation(apps.server_app(config, SEED, str(tmp_path), say=lambda _: None), apps.client_app(),
                       num_supernodes=config.num_agents,
                       # One worker serves both nodes: the round compiles once. No Ray dashboard: its processes
                       # start with the cluster and nothing here reads them. Ray starts its workers at nice 15,
                       # where, beside the suite's other pytest worker, this one's actor waited for a core.
                       backend_config={"client_resources": {"num_cpus": 2},
                                       "init_args": {"include_dashboard": False,
                                                     "_system_config": {"worker_niceness": 0}}})
    ours = global_params(str(tmp_path))
    assert max_difference(ours, member_rounds(config, SEED)[-1]) == 0.0
    assert max_difference(ours, global_params(compiled_dir)) <= ROUNDING_BOUND
    assert os.path.exists(tmp_path / "finished.json")


def test_the_library_without_the_apps_imports_no_flower():
    import subprocess
    import sys

    script = ("import sys, fedjax_rl, fedjax_rl.training.loop, fedjax_rl.reproduce.harness, fedjax_rl.analysis.plots, "
              "fedjax_rl.cli.commands\nprint(sorted(m for m in sys.modules if m.split('.')[0] in ('flwr', 'ray')))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout


# -- a deployment: a SuperLink and SuperNodes as processes of their own, on the loopback interface --

EXAMPLE_APP = os.path.join(os.path.dirname(__file__), os.pardir, "examples", "flower_app")
DEPLOYMENT_TIMEOUT_S = 600  # the whole federation, start to finish
# The SuperLink's entry in the Flower home's config.toml, named as docs/flower.md names it (tests/test_flower_docs.py
# checks that the page's loopback commands are the ones `Deployment` runs).
CONNECTION = "my-superlink"


def free_ports(count: int) -> list[int]:
    import socket

    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def stop_processes(processes) -> None:
    """Terminate each psutil process, wait 10 s, kill those still alive and wait for them."""
    import psutil

    for process in processes:
        try:
            process.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(processes, timeout=10)
    for process in alive:
        process.kill()
    psutil.wait_procs(alive, timeout=10)


class Deployment:
    """A SuperLink and `num_nodes` SuperNodes started as local processes bound to 127.0.0.1, with a
    Flower home of their own; on exit every process they started (and their children) is stopped.
    `node_configs`: each SuperNode's `--node-config` text (default: its partition only)."""

    def __init__(self, home, num_nodes: int, node_configs=None):
        import shutil
        import sys

        self.home, self.processes = str(home), []
        bin_dir = os.path.dirname(sys.executable)
        self.env = {**os.environ, "FLWR_HOME": self.home, "FLWR_DISABLE_UPDATE_CHECK": "1",
                    "FLWR_TELEMETRY_ENABLED": "0", "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}
        self.link_port, *self.node_ports = free_ports(1 + num_nodes)
        with open(os.path.join(self.home, "config.toml"), "w") as f:
            f.write(f'[superlink]\ndefault = "{CONNECTION}"\n\n[superlink.{CONNECTION}]\n'
                    f'address = "127.0.0.1:{self.link_port}"\ninsecure = true\n')
        self.node_configs = node_configs or [f"partition-id={k} num-partitions={num_nodes}" for k in range(num_nodes)]
        self.which = lambda name: shutil.which(name, path=self.env["PATH"])

    def start(self, name: str, *args: str, log: str):
        import subprocess

        out = open(os.path.join(self.home, log), "w")
        process = subprocess.Popen([self.which(name), *args], env=self.env, cwd=self.home, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        self.processes.append(process)
        return process

    def __enter__(self):
        self.start("flower-superlink", "--insecure", "--disable-runtime-dependency-installation", "--host",
                   "127.0.0.1", "--port", str(self.link_port), "--database", os.path.join(self.home, "link.db"),
                   log="superlink.log")
        self.wait_for_port(self.link_port, self.processes[0], "superlink.log")
        self.nodes = [self.start_node(k) for k in range(len(self.node_configs))]
        return self

    def wait_for_port(self, port: int, process, log: str, timeout_s: float = 60.0) -> None:
        import socket
        import time

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert process.poll() is None, open(os.path.join(self.home, log)).read()[-3000:]
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.2)
        raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout_s} s; see {log}")

    def start_node(self, index: int):
        return self.start("flower-supernode", "--insecure", "--superlink", f"127.0.0.1:{self.link_port}", "--host",
                          "127.0.0.1", "--port", str(self.node_ports[index]), "--node-config",
                          self.node_configs[index], log=f"node_{index}.log")

    def stop_node(self, process) -> None:
        """Kill a SuperNode and every process under it, as a machine going down would."""
        import psutil

        parent = psutil.Process(process.pid)
        every = [parent, *parent.children(recursive=True)]
        for p in every:
            p.kill()
        psutil.wait_procs(every, timeout=10)

    def run(self, app: str, run_config: str, timeout_s: float):
        import subprocess

        return subprocess.run([self.which("flwr"), "run", app, CONNECTION, "--stream", "--run-config", run_config],
                              env=self.env, cwd=self.home, capture_output=True, text=True, timeout=timeout_s)

    def __exit__(self, *exc):
        import psutil

        started = [psutil.Process(p.pid) for p in self.processes if p.poll() is None]
        every = started + [child for p in started for child in p.children(recursive=True)]
        # The SuperLink detaches its executor into a session of its own: found by this home's ports.
        every += [p for p in psutil.process_iter(["cmdline"])
                  if any(f"127.0.0.1:{port}" in " ".join(p.info["cmdline"] or ())
                         for port in (self.link_port, *self.node_ports)) and p not in every]
        stop_processes(every)


def run_config_text(config, seed: int, out_dir: str) -> str:
    agent = config.agent
    return " ".join([
        'algo="fedrdqn"', 'env="CartPole-v1"', f"seed={seed}", f'out-dir="{out_dir}"',
        f"num-agents={config.num_agents}", f"steps-per-agent={config.steps_per_agent}",
        f"sync-every={config.sync_every}", f"eval-every-rounds={config.eval_every_rounds}",
        f"agent.omega={agent.omega}", f"agent.learning-starts={agent.learning_starts}",
        f'options="eval-episodes={config.eval_episodes} sweep-points={config.sweep_points} agent.hidden-sizes=32,32 '
        f'agent.buffer-size={agent.buffer_size} agent.batch-size={agent.batch_size}"',
    ])


@pytest.mark.deployment
def test_a_deployment_of_processes_on_the_loopback_runs_the_same_federation(tmp_path):
    # Four rounds, two evaluations: a SuperNode starts a client process per message.
    config = small_config(steps_per_agent=200, eval_every_rounds=2)
    home = tmp_path / "flower_home"
    home.mkdir()
    out = tmp_path / "run"
    with Deployment(home, config.num_agents) as deployment:
        done = deployment.run(EXAMPLE_APP, run_config_text(config, SEED, str(out)), DEPLOYMENT_TIMEOUT_S)
    assert os.path.exists(out / "finished.json"), done.stdout[-4000:] + done.stderr[-4000:]
    assert max_difference(global_params(str(out)), member_rounds(config, SEED)[-1]) == 0.0
    # Its run directory reads as any run's.
    from fedjax_rl.analysis import plots

    assert plots.load_run(str(out))["config"]["num_agents"] == config.num_agents


@pytest.mark.deployment
def test_a_killed_supernode_stops_the_run_which_resumes_when_it_returns(tmp_path):
    import subprocess
    import time

    config = small_config(steps_per_agent=300, eval_every_rounds=2)
    home, out, state_dir = tmp_path / "flower_home", tmp_path / "run", tmp_path / "client_state"
    home.mkdir()
    node_configs = [f'partition-id={k} num-partitions=2 state-dir="{state_dir}"' for k in range(2)]
    run_config = run_config_text(config, SEED, str(out)) + " round-timeout=60"
    settings = federation.config_message(config, SEED)
    with Deployment(home, 2, node_configs) as deployment:
        flwr = subprocess.Popen([deployment.which("flwr"), "run", EXAMPLE_APP, CONNECTION, "--stream", "--run-config",
                                 run_config], env=deployment.env, cwd=deployment.home, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        try:
            # Agent 1 finishes two rounds, then its machine goes down.
            deadline = time.monotonic() + DEPLOYMENT_TIMEOUT_S
            while not os.path.exists(federation.carry_path(str(state_dir), settings, 1, 2)):
                assert time.monotonic() < deadline and flwr.poll() is None, "the federation never reached round 2"
                time.sleep(0.5)
            deployment.stop_node(deployment.nodes[1])
            stream, _ = flwr.communicate(timeout=DEPLOYMENT_TIMEOUT_S)
        finally:
            if flwr.poll() is None:
                flwr.kill()
        assert "failed on 1 client(s): agent 1" in stream and "run the same command to resume" in stream, stream[-4000:]
        assert not os.path.exists(out / "finished.json")
        # The machine comes back; the same command resumes after the rounds the server saved.
        deployment.nodes[1] = deployment.start_node(1)
        done = deployment.run(EXAMPLE_APP, run_config, DEPLOYMENT_TIMEOUT_S)
    assert os.path.exists(out / "finished.json"), done.stdout[-4000:] + done.stderr[-4000:]
    assert "resuming after round" in done.stdout, done.stdout[-4000:]
    assert max_difference(global_params(str(out)), member_rounds(config, SEED)[-1]) == 0.0
