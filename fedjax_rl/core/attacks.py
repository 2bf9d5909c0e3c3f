"""Faulty or hostile parties as a setting: `attackers` of the K agents replace their shared upload, every
round, by a named attack on it, so that any algorithm, rule and table can be run against them in the
compiled program (and a Flower client through its node configuration, `fedjax_rl.flower.apps`).

  * `sign_flip`: the upload negated (-x), a party pushing the model the other way;
  * `scale`: the upload times `attack_scale` (x c), a party shouting;
  * `noise`: the upload plus Gaussian noise of standard deviation `attack_scale` on every coordinate,
    a party whose training is garbage;
  * `stale`: the party's own initial model, frozen, every round (a party that never learns, or replays
    an old model): the program keeps each agent's initial shared leaves for it (`AgentCarry.frozen`);
  * `alie` ("a little is enough", Baruch et al. 2019): the honest parties' coordinate-wise mean minus z
    times their standard deviation, z the largest that still hides among the honest majority for K agents
    and f attackers (`alie_z`): an upload built to pass the median, trimmed mean and Krum while it pulls;
  * `ipm` (inner product manipulation, Xie et al. 2020): −`attack_scale` times the honest parties' mean.

The last two are omniscient: colluding attackers who see every honest party's model, as the literature
that breaks the robust rules assumes. In the compiled program they read it over the agent axis; a Flower
client sees no other party's model, so they are the compiled program's alone (`OMNISCIENT`).

Who attacks is drawn once per run from the server's key (`attacker_mask`: `attackers` agents uniformly,
different per seed), and the noise of each round and agent from the same stream, so a seed gives one
result and vmapped seeds differ. An attacker trains as any agent and receives the global model; only
what it uploads is replaced. With 0 attackers (the default) nothing of this enters the program: it is
the run without the setting, bit for bit. What the attacks do to each rule is for the rules to show
(`federated`: the mean moves, the median, trimmed mean and Krum are built to bound a minority)."""

from __future__ import annotations

import math
import numbers
from typing import Any

import jax
import jax.numpy as jnp
import jax.scipy.special

from fedjax_rl.core.settings import Setting, at_least, one_of, positive

KINDS = ("sign_flip", "scale", "noise", "stale", "alie", "ipm")
OMNISCIENT = ("alie", "ipm")  # attacks built from every honest party's upload
ON_ITS_OWN = tuple(kind for kind in KINDS if kind not in OMNISCIENT)  # what one party (a Flower client) can mount
# The server key's stream for attacks: `fold_in` data no round index reaches (rounds fold in their index
# for the participation draw, `federated.Server.weights`).
STREAM = 2**31 - 1

def count_or_fraction(text: str) -> int | float:
    """`--attackers`' spelling: a count of agents (an integer), or a fraction of them (a decimal in (0, 1)),
    which `resolve_attackers` turns into a count once the number of agents is known."""
    value = float(text)
    if value.is_integer():
        return int(value)
    if 0 < value < 1:
        return value
    raise ValueError(text)


count_or_fraction.expects = "a count of agents (an integer >= 0) or a fraction of them in (0, 1)"

ATTACKERS = Setting("attackers", 0, at_least(0), kind=count_or_fraction,
                    help="agents whose shared upload each round is replaced by `attack` (drawn once per run from the "
                         "run's keys): a count, or a fraction of the K agents in (0, 1), rounded down (0.2 of K = 10: "
                         "2 agents), which the run records as its count; 0: none, the run without attacks bit for bit")
ATTACK = Setting("attack", "sign_flip", one_of(*KINDS), kind=str,
                 help="what an attacker uploads: sign_flip (-x), scale (x attack_scale), noise (x plus Gaussian "
                      "noise of standard deviation attack_scale), stale (its own initial model, frozen), or, "
                      "colluding with sight of every honest model: alie (their mean minus z times their standard "
                      "deviation, Baruch et al. 2019's z for K and attackers) or ipm (-attack_scale times their mean, "
                      "Xie et al. 2020)")
ATTACK_SCALE = Setting("attack_scale", 10.0, positive, kind=float,
                       help="scale: the factor; noise: the standard deviation; ipm: the honest mean's factor epsilon; "
                            "sign_flip, stale and alie ignore it")


def resolve_attackers(attackers: int | float, num_agents: int) -> int:
    """The count of attackers `attackers` asks for among `num_agents` agents: a count as it is, a fraction in
    (0, 1) of the agents rounded down. A ValueError, naming the setting and what is allowed, for a fraction
    that leaves no agent attacking (ask for a count of 0 to have none) or a value that is neither."""
    if isinstance(attackers, bool) or not isinstance(attackers, numbers.Real):
        raise ValueError(f"attackers must be {count_or_fraction.expects}, got {attackers!r}")
    if float(attackers).is_integer():
        return int(attackers)
    if not 0 < attackers < 1:
        raise ValueError(f"attackers must be {count_or_fraction.expects}, got {attackers}")
    count = math.floor(attackers * num_agents + 1e-9)  # 0.29 x 100 is 28.999999999999996 in floats
    if count < 1:
        raise ValueError(f"attackers={attackers:g} of num_agents={num_agents} is no agent (rounded down); a fraction "
                         f"must be in [{1 / num_agents:g}, 1) with num_agents={num_agents}, or give a count")
    return count


def check_attackers(attackers: int, num_agents: int) -> None:
    """A ValueError, before anything compiles, unless `attackers` is a count that leaves some agent honest
    (a fraction is resolved to a count first: `resolve_attackers`, as `configs.train_config` does)."""
    if isinstance(attackers, bool) or not isinstance(attackers, numbers.Integral):
        raise ValueError(f"attackers in a run's config is a count of agents (an integer >= 0), got {attackers!r}; "
                         f"a fraction of them is resolved to one by configs.train_config (or --attackers)")
    ATTACKERS.validate(attackers)
    if attackers > num_agents - 1:
        raise ValueError(f"attackers must be in [0, {num_agents - 1}] with num_agents={num_agents} (at least one "
                         f"agent honest), got {attackers}")


def attacker_mask(server_key: jax.Array, num_agents: int, attackers: int) -> jax.Array:
    """[K] bool: the run's attackers, `attackers` agents drawn uniformly from the server's attack stream."""
    chosen = jax.random.permutation(jax.random.fold_in(server_key, STREAM), num_agents)[:attackers]
    return jnp.zeros(num_agents, bool).at[chosen].set(True)


def round_key(server_key: jax.Array, round_index) -> jax.Array:
    """The attacks' key of round `round_index` (each agent folds in its index)."""
    return jax.random.fold_in(jax.random.fold_in(server_key, STREAM), round_index)


def alie_z(num_agents, attackers) -> jax.Array:
    """Baruch et al. (2019)'s z for `alie`: with s = floor(K / 2 + 1) - f honest parties needed on the
    attackers' side of a coordinate for a majority, the largest z with Phi(z) <= (K - s) / K, Phi the
    standard normal CDF (0 where that share is at most a half: K = 10 and f = 1 leaves nothing to hide in;
    attackers who are a majority alone still count one supporter, so that z stays finite). Numbers or
    traced counts: the program computes it from the agent axis itself."""
    supporters = jnp.maximum(1.0, jnp.floor(num_agents / 2 + 1) - attackers)
    return jnp.maximum(0.0, jax.scipy.special.ndtri((num_agents - supporters) / num_agents))


def attacked(tree: Any, kind: str, scale: float, key: jax.Array, frozen: Any = None, attacker=None) -> Any:
    """What an attacker uploads in place of `tree` (one agent's shared leaves); `frozen`: its initial
    shared leaves, which `stale` uploads. The omniscient attacks (OMNISCIENT) run inside the agent map and
    read the honest agents' leaves with collectives over it: `attacker` is this agent's bool; `ipm`'s
    epsilon is `scale`, `alie`'s z comes from the axis's counts of agents and attackers (`alie_z`)."""
    if kind not in KINDS:
        raise ValueError(f"attack must be one of {list(KINDS)}, got {kind!r}")
    if kind == "stale":
        if frozen is None:
            raise ValueError("attack 'stale' uploads the agent's initial model: pass it as `frozen`")
        return frozen
    if kind in OMNISCIENT:
        if attacker is None:
            raise ValueError(f"attack {kind!r} reads the honest agents' models: pass this agent's `attacker` bool")
        return _omniscient(tree, kind, scale, attacker)
    leaves, treedef = jax.tree.flatten(tree)
    if kind == "sign_flip":
        out = [-x for x in leaves]
    elif kind == "scale":
        out = [x * jnp.asarray(scale, x.dtype) for x in leaves]
    else:
        keys = jax.random.split(key, len(leaves))
        out = [x + jnp.asarray(scale, x.dtype) * jax.random.normal(k, x.shape, x.dtype) for x, k in zip(leaves, keys)]
    return jax.tree.unflatten(treedef, out)


def _omniscient(tree: Any, kind: str, scale: float, attacker) -> Any:
    """`alie` or `ipm` of the honest agents' leaves, computed on every agent (collectives over the agent axis)."""
    from fedjax_rl.core import agent_axis

    axes = agent_axis.agent_axes()
    honest = 1.0 - jnp.asarray(attacker, jnp.float32)
    count = jax.lax.psum(honest, axes)
    if kind == "alie":
        num_agents = jax.lax.psum(jnp.float32(1.0), axes)
        z = alie_z(num_agents, num_agents - count)

    def one(x):
        mean = jax.lax.psum(honest.astype(x.dtype) * x, axes) / count.astype(x.dtype)
        if kind == "ipm":
            return -jnp.asarray(scale, x.dtype) * mean
        variance = jax.lax.psum(honest.astype(x.dtype) * jnp.square(x - mean), axes) / count.astype(x.dtype)
        return mean - z.astype(x.dtype) * jnp.sqrt(variance)

    return jax.tree.map(one, tree)
