"""Every registered algorithm as a Flower ClientApp and ServerApp (flwr's Message API).

A client is one agent (`federation.Member`) in its own environment: its node configuration's
`partition-id` is its agent index k, and its other keys set its physics as scales of the nominal
values (`length=1.3`); without them it takes the compiled program's draw for agent k. Its carry
(replay buffer, optimiser state, environment, keys) persists between rounds in the node's
`context.state`; only the shared leaves are sent.

The server (`run_federation`) drives the rounds: a setup query that every client answers before
anything trains (its agent index and physics, or the error that stops the run), then each round a
train message to every client, carrying the global model (none in round 0: every agent starts from
its own initialisation, as in the compiled program), and the aggregate of the uploads by the
library's rule (`federation.Aggregation`). Under partial participation every client trains and
only the round's participants, drawn as the compiled program draws them, upload. After every
`eval_every_rounds` rounds the clients evaluate the global model in their own environments (the
Average and Minimum over clients are the tables' metrics) and the server evaluates it in the nominal
environment; at the end, the clients' environments and the robustness sweep. The run directory is
the one `fedjax-rl train --out` writes, so `compare`, `plot` and TensorBoard read it as any run.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from flwr.app import (Array, ArrayRecord, ConfigRecord, Context, Message, MessageType, MetricRecord,
                      RecordDict)
from flwr.clientapp import ClientApp
from flwr.common.constant import ErrorCode
from flwr.serverapp import Grid, ServerApp

from fedjax_rl.core import evaluate
from fedjax_rl.flower import federation
from fedjax_rl.flower.strategy import RuleStrategy
from fedjax_rl.training import configs, machine, program, records, run_directory, tensorboard_log
from fedjax_rl.training.configs import TrainConfig

# Record names in messages and in a client's context.state.
RUN = "run"  # ConfigRecord: "settings" (the run's config.json record), "round", "upload", "final"
GLOBAL = "global"  # ArrayRecord: the global model's shared leaves
SHARED = "shared"  # ArrayRecord: a client's upload
METRICS = "metrics"  # MetricRecord
CARRY = "fedjax_rl.carry"  # ArrayRecord in context.state: the agent's carry after its last round
PROGRESS = "fedjax_rl.progress"  # ConfigRecord in context.state: "next_round"
# Node-configuration key: a directory where the client keeps its carry after every round, so that a
# restarted client (or a resumed run, whose context is new) continues where it stopped.
STATE_DIR = federation.STATE_DIR


# config.json's provenance runtime of a federation run by these apps (on Flower's simulation engine or
# SuperLink and SuperNodes alike: the ServerApp is handed the same grid in both).
RUNTIME = "flower"


class FederationError(RuntimeError):
    """A client failed or went missing, or the clients cannot form this federation."""


def _arrays(record: ArrayRecord) -> dict[str, np.ndarray]:
    return {name: array.numpy() for name, array in record.items()}


def _record(tree) -> ArrayRecord:
    return ArrayRecord({name: Array(value) for name, value in federation.to_arrays(tree).items()})


# -- the client ------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=8)
def _cached_member(settings: str, index: int, scales: tuple) -> federation.Member:
    # One per run and node in a process (a simulation's worker serves several nodes): its jitted
    # round compiles once.
    config, seed = federation.config_from_message(settings)
    return federation.Member(config, seed, index, dict(scales))


def member_for(message: Message, context: Context) -> federation.Member:
    """The agent this node runs for the message's run: index and physics from its node configuration."""
    node = dict(context.node_config)
    if federation.AGENT_INDEX not in node:
        raise ValueError(f"node configuration lacks '{federation.AGENT_INDEX}' (this client's agent index)")
    scales = {k: v for k, v in node.items() if k not in federation.NODE_KEYS}
    try:
        return _cached_member(str(message.content[RUN]["settings"]), int(node[federation.AGENT_INDEX]),
                              tuple(sorted(scales.items())))
    except ValueError as error:  # the server knows a node's agent only from its answer: name it here
        raise ValueError(f"agent {node[federation.AGENT_INDEX]}: {error}") from None


def _setup(message: Message, context: Context) -> Message:
    member = member_for(message, context)
    try:
        federation.node_attack(dict(context.node_config))  # refused at setup, before anything trains
    except ValueError as error:
        raise ValueError(f"agent {member.index}: {error}") from None
    env, params = member.setup.env, member.env_params()
    physics = {name: float(env.get_physics(params, name)) for name in member.config.physics}
    return Message(RecordDict({RUN: ConfigRecord({"index": member.index, "physics": json.dumps(physics),
                                                  "scales": json.dumps(member.scales)})}),
                   reply_to=message)


def _stored_carry(member: federation.Member, context: Context, settings: str, round_index: int):
    """The carry this client holds before round `round_index`: from its context (the same run), else
    from its state directory (a restarted client, a resumed run). A ValueError when it has neither."""
    if PROGRESS in context.state and int(context.state[PROGRESS]["next_round"]) == round_index:
        return federation.from_arrays(_arrays(context.state[CARRY]), member.carry_shapes())
    state_dir = context.node_config.get(STATE_DIR)
    if state_dir:
        path = federation.carry_path(str(state_dir), settings, member.index, round_index)
        if os.path.exists(path):
            return member.load_carry(path)
    where = f"in its {STATE_DIR} {state_dir}" if state_dir else f"(no '{STATE_DIR}' in its node configuration)"
    raise ValueError(f"asked for round {round_index + 1}, but this client holds no state from before it {where}")


def _train(message: Message, context: Context) -> Message:
    member = member_for(message, context)
    run = message.content[RUN]
    settings, round_index = str(run["settings"]), int(run["round"])
    carry = member.init() if round_index == 0 else _stored_carry(member, context, settings, round_index)
    if GLOBAL in message.content:
        shared = federation.from_arrays(_arrays(message.content[GLOBAL]), member.carry_shapes().learner.shared)
        carry = member.with_shared(carry, shared)
    carry, (sums, first_bad) = member.local_round(carry, round_index)
    context.state[CARRY] = _record(carry)
    context.state[PROGRESS] = ConfigRecord({"next_round": round_index + 1})
    if context.node_config.get(STATE_DIR):
        member.save_carry(carry, str(context.node_config[STATE_DIR]), settings, round_index + 1)
    content = RecordDict({METRICS: MetricRecord(
        {**{k: float(v) for k, v in sums.items()}, **{f"first_bad/{k}": int(v) for k, v in first_bad.items()}})})
    if bool(run["upload"]):
        attack = federation.node_attack(dict(context.node_config))
        content[SHARED] = _record(carry.learner.shared if attack is None else
                                  federation.attacked_upload(member, carry.learner.shared, round_index, attack))
    return Message(content, reply_to=message)


def _evaluate(message: Message, context: Context) -> Message:
    member = member_for(message, context)
    run = message.content[RUN]
    shared = federation.from_arrays(_arrays(message.content[GLOBAL]), member.carry_shapes().learner.shared)
    returns = member.evaluate(shared, int(run["round"]), bool(run["final"]))
    return Message(RecordDict({METRICS: MetricRecord({"episode_returns": [float(x) for x in returns]})}),
                   reply_to=message)


def client_app() -> ClientApp:
    """The ClientApp: one agent of any registered algorithm (the run's settings come from the server).
    A SuperNode may start a process per message: compiled programs are kept on disk
    (`machine.use_compilation_cache`), so that only the first round of a run compiles."""
    machine.use_compilation_cache()
    app = ClientApp()
    app.query()(_setup)
    app.train()(_train)
    app.evaluate()(_evaluate)
    return app


# -- the server ------------------------------------------------------------------------------------


def config_from_run_config(run_config: dict) -> tuple[TrainConfig, int, str | None, dict]:
    """(config, seed, out_dir, server options) from a Flower app's run config (`[tool.flwr.app.config]`,
    `--run-config`): `algo`, `env`, `seed`, `out-dir`, the server's `round-timeout` (seconds a round
    waits for its clients' replies; 0: no limit) and `wait-for-clients` (seconds), any run setting by
    name (`num-agents`, `steps-per-agent`, ...) and any agent setting as `agent.NAME`; values as the
    command line spells them. Flower accepts only the keys an app's pyproject.toml declares, so
    `options` holds any others, "NAME=VALUE NAME=VALUE" (`agent.batch-size=64 eval-episodes=10`). A
    ValueError names an unknown key with the allowed ones."""
    given = dict(run_config)
    for pair in str(given.pop("options", "")).split():
        if "=" not in pair:
            raise ValueError(f"run config options expects NAME=VALUE pairs separated by spaces, got {pair!r}")
        name, value = pair.split("=", 1)
        given[name] = value
    given = {str(k).replace("-", "_"): v for k, v in given.items()}
    algo, env_name = given.pop("algo", configs.DEFAULT_ALGO), given.pop("env", configs.DEFAULT_ENV)
    seed, out_dir = int(given.pop("seed", 0)), given.pop("out_dir", None)
    options = {"timeout_s": float(given.pop("round_timeout", 0)) or None,
               "wait_s": float(given.pop("wait_for_clients", 120))}
    run_settings = [s for s in TrainConfig.SETTINGS if s.name not in ("algo", "env_name", "agent")]
    agent_pairs = [f"{k[len('agent.'):]}={_text(v)}" for k, v in given.items() if k.startswith("agent.")]
    run_pairs = [f"{k}={_text(v)}" for k, v in given.items() if not k.startswith("agent.")]
    from fedjax_rl import agents

    overrides = configs.settings.parse_pairs(tuple(run_settings), run_pairs, "run settings", "run config")
    agent_overrides = configs.settings.parse_pairs(agents.get(algo).config.SETTINGS, agent_pairs,
                                                   f"{algo} settings", "run config agent.NAME")
    config = configs.train_config(algo, env_name, agent_overrides=agent_overrides, **overrides)
    return config, seed, out_dir or None, options


def _text(value) -> str:
    return "true" if value is True else "false" if value is False else str(value)


def _join(grid: Grid, count: int, settings: str, wait_s: float, timeout_s: float | None,
          say: Callable[[str], None] = print, every_s: float = 10.0) -> dict[int, Message]:
    """Every client's answer to the setup query, by node, once `count` clients answered: each node the
    SuperLink lists is asked once. A node it reports unavailable is no client, and the wait for the
    others goes on: the SuperLink lists a node that went down until two of its heartbeats are missed,
    so a run resumed right after a machine came back finds the old node listed and the restarted one
    not yet. Any other failed answer stops the run (`_exchange`). Every `every_s` seconds of waiting
    it says how many have joined."""
    started = time.monotonic()
    deadline, next_word = started + wait_s, started + every_s
    answers: dict[int, Message] = {}
    unavailable: set[int] = set()
    while True:
        new = [n for n in sorted(grid.get_node_ids()) if n not in answers and n not in unavailable]
        if new:
            replies = _exchange(grid, {n: _message(n, MessageType.QUERY, {"settings": settings}) for n in new},
                                "setup", timeout_s, {}, unavailable_ok=True)
            unavailable.update(n for n, reply in replies.items() if reply.has_error())
            answers.update((n, reply) for n, reply in replies.items() if not reply.has_error())
        if len(answers) >= count or time.monotonic() > deadline:
            break
        if time.monotonic() >= next_word:
            say(f"waiting for clients: {len(answers)} of {count} joined, {deadline - time.monotonic():.0f} s left "
                f"(wait-for-clients={wait_s:g})")
            next_word += every_s
        time.sleep(0.2)
    if len(answers) < count:
        raise FederationError(f"num_agents={count} clients are needed, {len(answers)} connected within {wait_s:g} s; "
                              f"start {count - len(answers)} more SuperNode(s) or lower num_agents")
    return dict(sorted(answers.items()))


def _exchange(grid: Grid, messages: dict[int, Message], what: str, timeout_s: float | None,
              agent_of: dict[int, int], saved: str = "", unavailable_ok: bool = False) -> dict[int, Message]:
    """Send `messages` {node: message}; every reply by node, or, as soon as one client fails (its
    error reply: a ClientApp's exception, a node the SuperLink lost) or `timeout_s` passes without
    every reply, a FederationError naming the clients, with `saved` (what is kept, how to resume).
    `unavailable_ok`: a node the SuperLink reports unavailable is no failure; its error is its reply.
    On the grid's push and pull rather than its `send_and_receive`, which sleeps 3 s between pulls
    (flwr 1.42) and waits for every reply after one has failed: a round whose replies come in 0.2 s
    would take 3 s, and a killed node would be noticed only after the others' rounds."""
    ids = list(grid.push_messages(list(messages.values())))
    node_of_message = dict(zip(ids, messages))
    replies: dict[int, Message] = {}
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    pause = 0.01  # a pull is one request, cheap next to a round; waiting grows to 0.2 s
    while len(replies) < len(messages):
        waiting = [i for i in ids if node_of_message[i] not in replies]
        for reply in grid.pull_messages(waiting):
            replies[node_of_message[reply.metadata.reply_to_message_id]] = reply
        if any(_failed(reply, unavailable_ok) for reply in replies.values()):
            break
        if deadline is not None and time.monotonic() > deadline:
            break
        time.sleep(pause)
        pause = min(2 * pause, 0.2)
    failed = {node: reply.error.reason for node, reply in replies.items() if _failed(reply, unavailable_ok)}
    missing = [node for node in messages if node not in replies]
    if failed or missing:
        lines = [f"{_who(n, agent_of)}: {reason}" for n, reason in failed.items()]
        if not failed:  # after a failure the others are not waited for
            lines += [f"{_who(n, agent_of)}: no reply within {timeout_s:g} s" for n in missing]
        raise FederationError(f"{what} failed on {len(lines)} client(s): " + "; ".join(lines)
                              + (f". {saved}" if saved else ""))
    return replies


def _who(node: int, agent_of: dict[int, int]) -> str:
    """A client as messages name it: its agent and node, or its node alone before it has answered (a
    failed setup names its agent in its own error)."""
    return f"agent {agent_of[node]} (node {node})" if node in agent_of else f"node {node}"


def _failed(reply: Message, unavailable_ok: bool) -> bool:
    return reply.has_error() and not (unavailable_ok and reply.error.code == ErrorCode.NODE_UNAVAILABLE)


def _message(node: int, kind: str, run: dict, global_model=None) -> Message:
    content = RecordDict({RUN: ConfigRecord(run)})
    if global_model is not None:
        content[GLOBAL] = _record(global_model)
    return Message(content, dst_node_id=node, message_type=kind)


def run_federation(grid: Grid, config: TrainConfig, seed: int = 0, out_dir: str | None = None,
                   wait_s: float = 120.0, timeout_s: float | None = None,
                   say: Callable[[str], None] = print) -> dict:
    """The server's side of a federated run of `config` over the grid's clients (`config.num_agents`
    of them, agent indices 0..K-1); returns `loop.run`'s result layout for one seed, and with `out_dir`
    writes its run directory, with a checkpoint after every round: the same call resumes after the
    last finished round (its clients restore theirs from their `state-dir`), and a finished run is
    read back. `timeout_s`: how long a round waits for its replies (None: as long as it takes).
    Raises `FederationError` when clients are missing or fail, naming them."""
    setup = program.make_setup(config)  # validates before any client is asked anything
    K = config.num_agents
    config_dict, _ = records.recorded_config(config, 1, seed, provenance=dict(records.COMPILED, runtime=RUNTIME))
    directory = run_directory.for_run(out_dir, config_dict, None, None, 1, seed)
    directory.prepare(False)
    finished = directory.read_finished()
    if finished is not None:
        say(f"{out_dir} holds this finished run: its results are read back, nothing is computed again")
        return finished
    shared_shapes = jax.eval_shape(setup.agent.init, jax.random.key(0)).shared
    state, blocks_done, curve, wall_before = directory.open(_server_state(setup, shared_shapes))
    rounds_done = int(state["rounds_done"])
    if rounds_done:
        say(f"resuming after round {rounds_done} of {config.num_rounds} ({directory.checkpoint_path})")
    settings = federation.config_message(config, seed)
    started = time.perf_counter()

    directory.clear_failed()
    try:
        answers = _join(grid, K, settings, wait_s, timeout_s, say)
        agent_of, node_of = _agents(answers, K)
        physics = _record_physics(answers, node_of, setup, config_dict, directory, rounds_done, say)

        comm = program.communication(program.make_trainer(config))
        board = tensorboard_log.board_for(config, out_dir, [seed], blocks_done, setup.agent.loss_names, comm)
        strategy = RuleStrategy.for_server(setup.server, arrayrecord_key=SHARED)
        policy_returns = jax.jit(functools.partial(_nominal_returns, setup))
        global_model = state["global"] if rounds_done else None
        wall = lambda: wall_before + time.perf_counter() - started  # noqa: E731
        for round_index in range(rounds_done, config.num_rounds):
            weights = federation.participants(setup.server, seed, round_index)
            messages = {node_of[k]: _message(node_of[k], MessageType.TRAIN,
                                             {"settings": settings, "round": round_index,
                                              "upload": weights is None or bool(weights[k])}, global_model)
                        for k in range(K)}
            replies = _exchange(grid, messages, f"round {round_index + 1}", timeout_s, agent_of,
                                saved=_saved(directory, round_index))
            uploads = [_arrays(replies[node_of[k]].content[SHARED]) if SHARED in replies[node_of[k]].content else None
                       for k in range(K)]
            aggregated, refused = strategy.aggregate_uploads(uploads, weights, shared_shapes)
            if refused:
                _refuse(refused, round_index, aggregated is None, state, say, directory)
            global_model = aggregated
            totals = {name: np.float32(total + sum(float(replies[node_of[k]].content[METRICS][name]) for k in range(K)))
                      for name, total in state["totals"].items()}
            state = {**state, "global": global_model, "rounds_done": np.int32(round_index + 1), "totals": totals}
            if (round_index + 1) % config.eval_every_rounds == 0:
                record = _block_record(grid, setup, seed, global_model, round_index + 1, totals, settings, node_of,
                                       agent_of, timeout_s, policy_returns, saved=_saved(directory, round_index))
                curve.append(records.to_lists(record))
                board.write(curve[-1], wall_s=wall())
                blocks_done += 1
                state["totals"] = {name: np.float32(0.0) for name in totals}
                say(f"round {round_index + 1}/{config.num_rounds}: local average {record['local_average'][0]:.1f}, "
                    f"minimum {record['local_minimum'][0]:.1f}, nominal {record['nominal_return'][0]:.1f}")
            directory.save_block(state, blocks_done, curve, wall_s=wall())
        board.close()
        final = _final(grid, setup, seed, global_model, settings, node_of, agent_of, timeout_s, physics,
                       saved=_saved(directory, config.num_rounds))
        result = {"curve": {k: np.stack([np.asarray(c[k]) for c in curve], axis=1) for k in curve[0]} if curve else {},
                  "final": final, "communication": comm, "run_batch": None, "seed_indices": [0],
                  "timing": {"wall_s": wall(), "wall_s_this_process": time.perf_counter() - started,
                             "resumed_at_block": blocks_done if rounds_done else 0},
                  "machine": machine.describe(),
                  "federation": {"runtime": RUNTIME, "resumed_after_round": rounds_done,
                                 "refused_uploads": [{"round": int(r) + 1, "agent": int(k)}
                                                     for r, k in np.argwhere(np.asarray(state["refused"]))]}}
        directory.finish_with(result, jax.tree.map(lambda x: np.asarray(x)[None, None], global_model))
        return result
    except FederationError as error:
        directory.write_failed(str(error))  # `fedjax-rl status` reads it: a script learns the run failed
        raise


def _provenance(physics: list[dict], scales: list[dict]) -> dict:
    """config.json's provenance of a federation (`records.COMPILED`'s layout): its clients' physics drawn
    as the compiled program draws them, or, where any node sets some, each agent's values and scales."""
    if not any(scales):
        return dict(records.COMPILED, runtime=RUNTIME)
    return {"runtime": RUNTIME, "physics": "set by the nodes", "agents": physics, "scales": scales}


def _agents(answers: dict[int, Message], K: int) -> tuple[dict[int, int], dict[int, int]]:
    """({node: agent index}, {agent index: node}) from the setup answers: one node per agent 0..K-1."""
    agent_of = {n: int(m.content[RUN]["index"]) for n, m in answers.items()}
    node_of = {}
    for node, index in sorted(agent_of.items()):
        if index in node_of:
            raise FederationError(f"nodes {node_of[index]} and {node} both run agent {index}; give each node its "
                                  f"own '{federation.AGENT_INDEX}' in [0, {K})")
        node_of[index] = node
    if sorted(node_of) != list(range(K)):
        raise FederationError(f"agents {sorted(set(range(K)) - set(node_of))} have no client (indices held: "
                              f"{sorted(node_of)})")
    return agent_of, node_of


def _record_physics(answers, node_of, setup, config_dict, directory, rounds_done: int, say) -> list[dict]:
    """Each agent's physics ({name: value}), recorded in config.json's provenance and said; a resumed run
    whose clients now have other physics than its rounds so far ran with stops (`FederationError`)."""
    K = len(node_of)
    physics = [json.loads(answers[node_of[k]].content[RUN]["physics"]) for k in range(K)]
    scales = [json.loads(answers[node_of[k]].content[RUN].get("scales", "{}")) for k in range(K)]
    provenance = _provenance(physics, scales)
    before = directory.record_provenance(provenance)
    if rounds_done and not records.same_physics(before, provenance):
        raise FederationError(
            f"the clients' physics are not those of the {rounds_done} round(s) already run in {directory.path}: "
            f"they ran with physics {records.physics_words({**config_dict, 'provenance': before})}, the clients "
            f"now have {records.physics_words({**config_dict, 'provenance': provenance})}; give the nodes their "
            "earlier configuration, or start this federation in another out-dir")
    say(f"{K} clients joined: " + "; ".join(_physics_line(setup, k, physics[k], scales[k]) for k in range(K)))
    return physics


def _physics_line(setup, index: int, physics: dict, scales: dict) -> str:
    """'agent 1 length=0.65 (x1.3, its node's)': each value with its scale of the nominal value, and
    whether the node set it or the compiled program's draw did."""
    nominal = {name: float(setup.env.get_physics(setup.nominal_params, name)) for name in physics}
    return f"agent {index} " + ", ".join(
        f"{name}={value:.4g} (x{value / nominal[name]:.3g}, {'its node' if name in scales else 'drawn'})"
        for name, value in physics.items())


def _server_state(setup, shared_shapes) -> dict:
    """What the server checkpoints after every round: the global model, the rounds done and the
    block's training sums so far (of `program.local_step`'s metrics, summed by the clients)."""
    names = ("episodes", "episode_return_sum", "trained", *setup.agent.loss_names)
    return {"global": jax.tree.map(lambda x: np.zeros(x.shape, x.dtype), shared_shapes), "rounds_done": np.int32(0),
            "totals": {name: np.float32(0.0) for name in names},
            # [round, agent] 1 where the server refused that agent's upload (`_refuse`)
            "refused": np.zeros((setup.config.num_rounds, setup.config.num_agents), np.int8)}


def _refuse(refused: dict[int, list[str]], round_index: int, nothing_left: bool, state: dict, say, directory) -> None:
    """Uploads with non-finite leaves (`federation.screened`) are out of this round, as dropped clients'
    would be: said, and recorded in the server's state (metrics.json's "federation", "refused_uploads").
    With no finite upload left there is nothing to aggregate: the run stops, resumable."""
    for agent, leaves in refused.items():
        shown = ", ".join(leaves[:3]) + (f" and {len(leaves) - 3} more" if len(leaves) > 3 else "")
        say(f"round {round_index + 1}: refused agent {agent}'s upload (non-finite values in {shown}); the round "
            "aggregates the others")
    state["refused"] = np.array(state["refused"])
    state["refused"][round_index, list(refused)] = 1
    if nothing_left:
        raise FederationError(f"round {round_index + 1}: every upload was refused (non-finite values from agents "
                              f"{sorted(refused)}); nothing is left to aggregate. {_saved(directory, round_index)}")


def _saved(directory, round_index: int) -> str:
    """What a failure message says about the rounds already saved."""
    if not directory.saves:
        return f"the {round_index} finished round(s) were not saved (no out_dir)"
    return (f"the {round_index} finished round(s) are saved in {directory.path}; restart the client with the same "
            f"node configuration (its '{STATE_DIR}' holds its state) and run the same command to resume")


def _nominal_returns(setup, shared, key):
    policy = lambda obs: setup.agent.greedy_action(shared, obs)  # noqa: E731
    return evaluate.episode_returns(setup.env, setup.nominal_params, policy, key, setup.config.eval_episodes,
                                    setup.max_steps)


def _local_returns(grid, setup, global_model, settings, rounds_done, final, node_of, agent_of, timeout_s, saved):
    K = setup.config.num_agents
    messages = {node_of[k]: _message(node_of[k], MessageType.EVALUATE,
                                     {"settings": settings, "round": rounds_done, "final": final}, global_model)
                for k in range(K)}
    replies = _exchange(grid, messages, f"evaluation after round {rounds_done}", timeout_s, agent_of, saved)
    return np.asarray([replies[node_of[k]].content[METRICS]["episode_returns"] for k in range(K)], np.float32)


def _block_record(grid, setup, seed, global_model, rounds_done, totals, settings, node_of, agent_of, timeout_s,
                  policy_returns, saved: str) -> dict:
    """One evaluation block's curve record, for one seed ([1] leading axis), as `program.run_block` makes it.
    The round it follows is saved with its record, so a failed evaluation resumes before that round."""
    local = _local_returns(grid, setup, global_model, settings, rounds_done, False, node_of, agent_of, timeout_s,
                           saved)
    nominal = policy_returns(global_model, federation.evaluation_key(seed, rounds_done, setup.config.num_rounds))
    totals = {name: jnp.asarray(value, jnp.float32) for name, value in totals.items()}
    record = program.block_record(setup, rounds_done, jnp.asarray(nominal), jnp.asarray(local), totals)
    return {k: np.asarray(v)[None] for k, v in record.items()}


def _final(grid, setup, seed, global_model, settings, node_of, agent_of, timeout_s, physics, saved: str) -> dict:
    """The final evaluation, for one seed ([1] leading axis), as `program.finalize` makes it."""
    config, env = setup.config, setup.env
    local = _local_returns(grid, setup, global_model, settings, config.num_rounds, True, node_of, agent_of, timeout_s,
                           saved)
    policy = lambda obs: setup.agent.greedy_action(global_model, obs)  # noqa: E731
    nominal = {name: float(env.get_physics(setup.nominal_params, name)) for name in config.physics}
    values = np.asarray([[p[name] for name in config.physics] for p in physics], np.float32)
    rates = values / np.asarray([nominal[n] for n in config.physics], np.float32) - 1.0
    final = jax.jit(lambda: program.final_record(setup, policy, federation.sweep_key(seed, config.num_rounds),
                                                 jnp.asarray(rates), jnp.asarray(values), jnp.asarray(local)))()
    return {k: np.asarray(v)[None] for k, v in final.items()}


def server_app(config: TrainConfig | None = None, seed: int = 0, out_dir: str | None = None,
               **federation_options) -> ServerApp:
    """The ServerApp. With `config`, it runs that configuration; without, it reads the run config
    (`config_from_run_config`: what `flwr run` passes from the app's pyproject.toml)."""
    machine.use_compilation_cache()
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        if config is None:
            run_config, run_seed, run_out, options = config_from_run_config(dict(context.run_config))
        else:
            run_config, run_seed, run_out, options = config, seed, out_dir, {}
        try:
            run_federation(grid, run_config, run_seed, run_out, **{**options, **federation_options})
        except FederationError as error:
            # The library's one line first; Flower logs the exception it is handed with its traceback,
            # which is this frame's alone unless FEDJAX_RL_TRACEBACK asks for the whole.
            print(f"fedjax-rl: {error}", file=sys.stderr, flush=True)
            if os.environ.get("FEDJAX_RL_TRACEBACK"):
                raise
            raise FederationError(str(error)) from None

    return app
