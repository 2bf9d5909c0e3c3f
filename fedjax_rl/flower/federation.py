"""A federation whose agents are processes of their own: one agent's side and the server's, in plain
JAX, with nothing from Flower (`fedjax_rl.flower.apps` carries them over Flower's messages).

The compiled program (`training/program.py`) maps one agent's round over the agent axis and
aggregates the shared leaves inside the same program. Here the same parts run apart:

  * `Member` is agent k of a seed's run: its initial carry is the one `program.init` gives agent k
    (the same keys and, unless its node sets its own physics, the same perturbation draw), and a
    round is `program.agent_local_round` for one agent, jitted: the E local steps the compiled
    program maps over the agents.
  * `Aggregation` is the server's rule (`federated.Server.rule`: mean, median, trimmed mean or a
    plugin's) applied to the K uploads stacked on an agent axis, under the same named vmap
    (`agent_axis.for_each_agent`), so that the rule runs the code that it runs in the program.
  * `to_arrays` / `from_arrays` turn a pytree into named numpy arrays and back (keys as their
    key data): what crosses the network and what a client keeps between rounds.

Only `learner.shared` ever leaves a member; its replay buffer, optimiser state, environment and keys
stay in its process.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_rl.core import agent_axis, attacks, evaluate, federated, perturb
from fedjax_rl.training import checkpoint, program, records
from fedjax_rl.training.configs import TrainConfig

# Node-configuration keys that are not physics: Flower's own (simulation sets them) and ours.
AGENT_INDEX = "partition-id"
NUM_AGENTS = "num-partitions"
STATE_DIR = "state-dir"  # where a client keeps its carry between rounds (`Member.save_carry`)
# A party that attacks (`fedjax_rl.core.attacks`): its upload replaced by ATTACK's kind, ATTACK_SCALE its
# factor or noise (for testing a federation against bad parties, as `attackers` does in the compiled run).
ATTACK, ATTACK_SCALE = "attack", "attack-scale"
NODE_KEYS = (AGENT_INDEX, NUM_AGENTS, STATE_DIR, ATTACK, ATTACK_SCALE)
KEPT_CARRIES = 2  # the carries a client keeps on disk: before the last round and before the one after it


def config_message(config: TrainConfig, seed: int) -> str:
    """The run's settings as the server sends them to every client (config.json's record)."""
    return json.dumps(records.recorded_config(config, 1, seed)[0])


def config_from_message(text: str) -> tuple[TrainConfig, int]:
    """`config_message` read back: (config, seed)."""
    recorded = json.loads(text)
    return records.config_from_record(recorded), int(recorded["seed"])


# -- pytrees as named arrays -----------------------------------------------------------------------


def to_arrays(tree: Any) -> dict[str, np.ndarray]:
    """Every leaf of `tree` as a numpy array under its pytree path (a key as its key data), as a
    checkpoint stores it."""
    return checkpoint.stored_arrays(tree)


def from_arrays(arrays: dict[str, np.ndarray], like: Any) -> Any:
    """`to_arrays` read back into the structure, dtypes and key types of `like` (arrays or shapes).
    A ValueError names the first leaf that is missing or shaped otherwise."""
    names, leaves, treedef = checkpoint.named_leaves(like)
    restored = []
    for name, ref in zip(names, leaves):
        if name not in arrays:
            raise ValueError(f"the message lacks the leaf {name}")
        value = np.asarray(arrays[name])
        key_like = jnp.issubdtype(ref.dtype, jax.dtypes.prng_key)
        shape, dtype = ((jax.eval_shape(jax.random.key_data, ref).shape, jnp.uint32) if key_like
                        else (ref.shape, ref.dtype))
        if value.shape != tuple(shape) or value.dtype != dtype:
            raise ValueError(f"leaf {name} is {value.dtype}{list(value.shape)} in the message, "
                             f"{jnp.dtype(dtype)}{list(shape)} here")
        # A key's implementation is part of its dtype (abstract leaves have no key_impl to ask).
        restored.append(jax.random.wrap_key_data(jnp.asarray(value), impl=ref.dtype._impl)
                        if key_like else jnp.asarray(value))
    return jax.tree_util.tree_unflatten(treedef, restored)


# -- one agent -------------------------------------------------------------------------------------


def physics_scales(node_config: dict, env, nominal_params) -> dict[str, float]:
    """The physics a node's configuration sets, {name: scale of the nominal value}: every key but
    Flower's own. A ValueError, before anything compiles, for a name the environment does not have
    or a scale that is not positive."""
    names = env.physics_names(nominal_params)
    scales = {}
    for name, value in node_config.items():
        if name in NODE_KEYS:
            continue
        if name not in names:
            raise ValueError(f"node configuration sets '{name}', which this environment does not have; "
                             f"its physics: {', '.join(names)} (a value is a scale of the nominal value, "
                             f"e.g. length=1.3)")
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
            raise ValueError(f"node configuration {name}={value!r}: a physics value is a scale of the nominal "
                             "value and must be a number > 0")
        scales[name] = float(value)
    return scales


@functools.lru_cache(maxsize=4)
def _programs(config: TrainConfig):
    """(setup, round, evaluation) of `config`, jitted once per process: the agents of one run that a
    process serves (a simulation's worker serves several) share them, their index being data."""
    setup = program.make_setup(config)

    def local_returns(shared, env_params, key):
        policy = lambda obs: setup.agent.greedy_action(shared, obs)  # noqa: E731
        batched = jax.tree.map(lambda x: x[None], env_params)
        return evaluate.returns_over_params(setup.env, batched, policy, key, config.eval_episodes,
                                            setup.max_steps)[0]

    return setup, jax.jit(functools.partial(program.agent_local_round, setup)), jax.jit(local_returns)


class Member:
    """Agent `index` of seed `seed`'s run of `config` (K = `config.num_agents`), as one process.

    Its physics: the compiled program's draw for agent `index` (the run's `physics` and `max_rate`),
    unless `scales` sets them ({name: c}: each named parameter c times its nominal value; the others
    nominal). Its carry and rounds are those of agent `index` in `loop.run(config, seed=seed)`."""

    def __init__(self, config: TrainConfig, seed: int, index: int, scales: dict[str, float] | None = None):
        if not 0 <= index < config.num_agents:
            raise ValueError(f"agent index (node configuration '{AGENT_INDEX}') must be in "
                             f"[0, {config.num_agents}), got {index}")
        self.setup, self._round, self._evaluate = _programs(config)
        self.config, self.seed, self.index = config, seed, index
        self.scales = physics_scales(scales or {}, self.setup.env, self.setup.nominal_params)
        self.hparams = self.setup.agent.hparams()

    def _keys(self) -> program.RunKeys:
        return run_keys(self.seed)

    def env_params(self):
        """This agent's physics (unbatched env params)."""
        setup = self.setup
        if self.scales:
            names = tuple(self.scales)
            rates = jnp.asarray([[c - 1.0 for c in self.scales.values()]], jnp.float32)
            batched = perturb.agent_env_params(setup.env, setup.nominal_params, names, rates)
            return jax.tree.map(lambda x: x[0], batched)
        rates = program.sample_agent_rates(self.config, self._keys().physics, self.config.max_rate)
        batched = perturb.agent_env_params(setup.env, setup.nominal_params, self.config.physics, rates)
        return jax.tree.map(lambda x: x[self.index], batched)

    def init(self) -> program.AgentCarry:
        """The carry `program.init` gives this agent."""
        agent_key = jax.random.split(self._keys().agents, self.config.num_agents)[self.index]
        return program.strongly_typed(program.init_agent(self.setup, agent_key, self.env_params()))

    @functools.cached_property
    def _shapes(self):
        return jax.eval_shape(self.init)  # traces init: once per member, not per message

    def carry_shapes(self):
        """The carry's structure and shapes, to read a stored one back (`from_arrays`)."""
        return self._shapes

    def local_round(self, carry: program.AgentCarry, round_index: int):
        """Round `round_index`'s E local steps: (carry, (per-step metrics summed, first non-finite
        step of each watched quantity))."""
        return self._round(program.strongly_typed(carry), jnp.int32(round_index), self.hparams)

    def save_carry(self, carry: program.AgentCarry, state_dir: str, settings: str, next_round: int) -> str:
        """Keep the carry before round `next_round` in `state_dir` (atomically), and drop older ones
        but the one before it: a server that fails between a client's round and its own checkpoint
        asks for that round again."""
        path = carry_path(state_dir, settings, self.index, next_round)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        checkpoint.save(path, carry, next_round=next_round)
        for older in range(max(0, next_round - 2 * KEPT_CARRIES), next_round - KEPT_CARRIES + 1):
            stale = carry_path(state_dir, settings, self.index, older)
            if os.path.exists(stale):
                os.remove(stale)
        return path

    def load_carry(self, path: str) -> program.AgentCarry:
        carry, _ = checkpoint.load(path, self.init())
        return carry

    def with_shared(self, carry: program.AgentCarry, shared) -> program.AgentCarry:
        """The carry after the server's aggregate: the global model in place of its shared leaves."""
        return carry.replace(learner=carry.learner.replace(shared=shared))

    def evaluate(self, shared, rounds_done: int, final: bool = False) -> np.ndarray:
        """The returns of the global model `shared` (its greedy policy) in this agent's environment,
        [eval_episodes], from the episode keys the compiled program uses after `rounds_done` rounds,
        or in its final evaluation (common random numbers: every agent's episodes start from the
        same keys)."""
        return np.asarray(self._evaluate(shared, self.env_params(),
                                         evaluation_key(self.seed, rounds_done, self.config.num_rounds, final)))


def carry_path(state_dir: str, settings: str, index: int, next_round: int) -> str:
    """Where a client keeps agent `index`'s carry before round `next_round` of the run `settings`
    describes (a directory per run: its settings' hash)."""
    run = hashlib.sha256(settings.encode()).hexdigest()[:16]
    return os.path.join(state_dir, f"run_{run}", f"agent_{index}", f"before_round_{next_round}.npz")


def evaluation_key(seed: int, rounds_done: int, num_rounds: int, final: bool = False) -> jax.Array:
    """The compiled program's evaluation key after `rounds_done` rounds (`program.run_block`), or
    of its final evaluation's local episodes (`program.finalize`)."""
    eval_key = run_keys(seed).evaluation
    if final:
        return program.final_evaluation_keys(eval_key, num_rounds)[0]
    return jax.random.fold_in(eval_key, rounds_done)


def sweep_key(seed: int, num_rounds: int) -> jax.Array:
    """The key of the compiled program's robustness sweep (`program.finalize`)."""
    return program.final_evaluation_keys(run_keys(seed).evaluation, num_rounds)[1]


def run_keys(seed: int) -> program.RunKeys:
    """The key streams of `loop.run(config, seed=seed)`'s run (its seed index 0), which every client
    and the server derive their parts from (`program.run_keys`)."""
    return program.run_keys(program.seed_keys(seed, 1)[0])


# -- the server ------------------------------------------------------------------------------------


class Aggregation:
    """The server's rule over K uploads of one agent's shared leaves, run as in the compiled program:
    the rule of `federated.Server(K, participation, aggregation, trim)` inside `for_each_agent`."""

    def __init__(self, server: federated.Server):
        self.server = server
        K = server.num_agents

        def aggregate(stacked, weights):
            # Every agent receives the same result; agent 0's is the global model.
            mapped = agent_axis.for_each_agent(lambda tree, w: server.rule(tree, w), K,
                                              in_axes=(0, None if weights is None else 0))
            return jax.tree.map(lambda x: x[0], mapped(stacked, weights))

        self._aggregate = jax.jit(aggregate)

    def __call__(self, uploads: list, weights: np.ndarray | None = None):
        """The global model from `uploads` (K trees, in agent order; under partial participation a
        non-participant's entry may be any tree of the same shapes: its weight is 0)."""
        stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *uploads)
        return self._aggregate(stacked, None if weights is None else jnp.asarray(weights, jnp.float32))


def node_attack(node_config: dict) -> tuple[str, float] | None:
    """(kind, scale) of the attack a node's configuration sets (`attack=sign_flip attack-scale=10`), or None.
    A ValueError names a kind or scale out of range."""
    if ATTACK not in node_config:
        return None
    kind, scale = str(node_config[ATTACK]), node_config.get(ATTACK_SCALE, attacks.ATTACK_SCALE.default)
    attacks.ATTACK.validate(kind)
    if kind in attacks.OMNISCIENT:
        raise ValueError(f"node configuration {ATTACK}={kind}: an attack built from every honest party's model, "
                         "which a Flower client does not see; it runs in the compiled program (fedjax-rl train "
                         f"--attack {kind}); a client's attacks: {list(attacks.ON_ITS_OWN)}")
    if not isinstance(scale, (int, float)) or isinstance(scale, bool) or not scale > 0:
        raise ValueError(f"node configuration {ATTACK_SCALE}={scale!r}: must be a number > 0")
    return kind, float(scale)


def attacked_upload(member: "Member", shared, round_index: int, attack: tuple[str, float]):
    """What an attacking client uploads in round `round_index`: the compiled program's attack of its
    agent (`attacks.attacked`, the noise from the same key stream)."""
    key = attacks.round_key(run_keys(member.seed).server, round_index)
    frozen = member.init().learner.shared if attack[0] == "stale" else None  # its initial model, as the program keeps
    return attacks.attacked(shared, attack[0], attack[1], jax.random.fold_in(key, member.index), frozen)


def nonfinite_leaves(uploads: list[dict | None]) -> dict[int, list[str]]:
    """{agent: the names of its upload's leaves holding a NaN or an infinity} over `uploads` (named
    arrays in agent order; None: no upload). Such an upload cannot be averaged: one NaN in a mean makes
    every party's global model NaN. The server leaves it out of the round as a dropped client's
    (`screened`)."""
    refused = {}
    for agent, upload in enumerate(uploads):
        if upload is None:
            continue
        bad = [name for name, value in upload.items()
               if np.issubdtype(np.asarray(value).dtype, np.floating) and not np.all(np.isfinite(value))]
        if bad:
            refused[agent] = bad
    return refused


def screened(uploads: list[dict | None], weights: np.ndarray | None) -> tuple[list, np.ndarray | None, dict]:
    """(uploads, weights, refused): the uploads `nonfinite_leaves` refuses left out, as a
    non-participant's (None, weight 0; with full participation the weights become a 0/1 mask), and
    {agent: its non-finite leaves}. Unchanged where every upload is finite."""
    refused = nonfinite_leaves(uploads)
    if not refused:
        return uploads, weights, refused
    mask = np.ones(len(uploads), np.float32) if weights is None else np.array(weights, np.float32)
    mask[list(refused)] = 0.0
    return [None if k in refused else u for k, u in enumerate(uploads)], mask, refused


def participants(server: federated.Server, seed: int, round_index: int) -> np.ndarray | None:
    """The compiled program's draw of round `round_index`'s participants ([K] 0/1; None: all)."""
    weights = server.weights(run_keys(seed).server, jnp.int32(round_index))
    return None if weights is None else np.asarray(weights)
