"""Tabular federated problems: K kernels P_k, one reward, one discount (DESIGN.md section 1).

`TabularMDP` is a validated numpy container. Every check runs in numpy when the container is built,
so a bad problem fails with a clear message before anything is traced or compiled. Algorithms take
its compiled form, `TabularArrays` (a pytree of jax arrays, see `to_arrays`), in which every kernel
row is stored as a *support list*: the indices of the next states that the average kernel reaches
from (s, a), padded to a common length, with each agent's probabilities on them. Neighbour sets are
stored the same way. This keeps a sweep over (s, a) at O(S A m) instead of O(S^2 A) for kernels with
small supports (gridworlds, the generators below) and is exact for any kernel (m <= S).

Generators: `random_mdp` (K kernels sharing one support per (s, a), so Assumption 1 holds, with a
heterogeneity knob) and `windy_cliff` (the heterogeneous windy-cliff gridworld).

Covering (DESIGN.md): kappa(s, a) = max_k max_{s' in N^s} (P_bar - P_k) / P_bar, omega_min = max kappa,
and every P_k lies in P_omega iff omega >= omega_min.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

ROW_SUM_ATOL = 1e-6


# ----------------------------------------------------------------------------------------------
# The validated container.


@dataclasses.dataclass(frozen=True, eq=False)
class TabularMDP:
    """K MDPs <S, A, P_k, r, gamma> that differ only in P_k.

    Attributes:
      P: transition kernels, shape [K, S, A, S]; P[k, s, a, s'] = P_k(s' | s, a).
      r: shared reward, shape [S, A], entries in [0, 1].
      gamma: discount in [0, 1).
      start_state: the state whose values reports quote.
      check_assumption1: verify N_1^s = ... = N_K^s (Assumption 1, needed by FedRQ's theorem and by
        T_bar = mean_k T_k). Set False for algorithms that do not need it (QAvg).
      names: optional state names (for messages and plots).

    Build with the constructor (arrays are copied to float64 and validated) or a generator.
    """

    P: np.ndarray
    r: np.ndarray
    gamma: float
    start_state: int = 0
    check_assumption1: bool = True
    names: tuple[str, ...] | None = None

    def __post_init__(self):
        if isinstance(self.P, (list, tuple)):  # K kernels given one by one: name the odd one out
            shapes = [np.shape(p) for p in self.P]
            for k, shape in enumerate(shapes):
                if shape != shapes[0]:
                    raise ValueError(
                        f"every agent's kernel must have the same shape [S, A, S]: agent 0 has "
                        f"{shapes[0]}, agent {k} has {shape}"
                    )
        P = np.array(self.P, dtype=np.float64, copy=True)
        r = np.array(self.r, dtype=np.float64, copy=True)
        _validate(P, r, self.gamma, self.start_state, self.check_assumption1, self.names)
        P.setflags(write=False)
        r.setflags(write=False)
        object.__setattr__(self, "P", P)
        object.__setattr__(self, "r", r)
        object.__setattr__(self, "gamma", float(self.gamma))
        object.__setattr__(self, "start_state", int(self.start_state))

    @property
    def num_agents(self) -> int:
        return self.P.shape[0]

    @property
    def num_states(self) -> int:
        return self.P.shape[1]

    @property
    def num_actions(self) -> int:
        return self.P.shape[2]

    @property
    def P_bar(self) -> np.ndarray:
        """The average kernel (1/K) sum_k P_k, shape [S, A, S]."""
        return self.P.mean(axis=0)

    def neighbours(self) -> np.ndarray:
        """N_k^s as a boolean mask [K, S, S]: s' with `sum_a P_k(s'|s, a) != 0`."""
        return self.P.sum(axis=2) > 0

    def neighbours_bar(self) -> np.ndarray:
        """N^s as a boolean mask [S, S]: s' with `sum_a P_bar(s'|s, a) != 0`."""
        return self.P_bar.sum(axis=1) > 0

    def state_name(self, s: int) -> str:
        return self.names[s] if self.names is not None else str(s)


def _validate(P, r, gamma, start_state, check_assumption1, names) -> None:
    if P.ndim != 4:
        raise ValueError(f"P must have shape [K, S, A, S], got shape {P.shape}")
    K, S, A, S2 = P.shape
    if S2 != S:
        raise ValueError(f"P must have shape [K, S, A, S]; got S={S} states but {S2} next states")
    if K < 1 or S < 1 or A < 1:
        raise ValueError(f"P must have K, S, A >= 1, got shape {P.shape}")
    if r.shape != (S, A):
        raise ValueError(f"r must have shape [S, A] = {(S, A)} to match P {P.shape}, got {r.shape}")
    if not np.all(np.isfinite(P)):
        raise ValueError("P contains non-finite entries")
    if not np.all(np.isfinite(r)):
        raise ValueError("r contains non-finite entries")
    if np.any(P < 0):
        k, s, a, s2 = np.argwhere(P < 0)[0]
        raise ValueError(f"P has a negative entry: P_{k}({s2} | s={s}, a={a}) = {P[k, s, a, s2]}")
    sums = P.sum(axis=-1)
    bad = np.abs(sums - 1.0) > ROW_SUM_ATOL
    if np.any(bad):
        k, s, a = np.argwhere(bad)[0]
        raise ValueError(
            f"rows of P must sum to 1 (tolerance {ROW_SUM_ATOL}): agent {k}, state {s}, "
            f"action {a} sums to {sums[k, s, a]!r}"
        )
    if np.any((r < 0) | (r > 1)):
        s, a = np.argwhere((r < 0) | (r > 1))[0]
        raise ValueError(f"rewards must lie in [0, 1]: r(s={s}, a={a}) = {r[s, a]}")
    if not isinstance(gamma, (int, float, np.floating, np.integer)) or not 0.0 <= float(gamma) < 1.0:
        raise ValueError(f"gamma must be a number in [0, 1), got {gamma!r}")
    if not 0 <= int(start_state) < S:
        raise ValueError(f"start_state must be in [0, {S}), got {start_state}")
    if names is not None and len(names) != S:
        raise ValueError(f"names must name all {S} states, got {len(names)}")
    if check_assumption1:
        require_assumption1(P, names)


def require_assumption1(P: np.ndarray, names) -> None:
    """Assumption 1: N_1^s = ... = N_K^s for every s. Names the first violation."""
    reach = P.sum(axis=2) > 0  # [K, S, S]
    differs = np.any(reach != reach[:1], axis=0)  # [S, S']
    if not np.any(differs):
        return
    s, s2 = np.argwhere(differs)[0]
    have = [int(k) for k in np.flatnonzero(reach[:, s, s2])]
    lack = [int(k) for k in np.flatnonzero(~reach[:, s, s2])]
    k = have[0]
    a = int(np.flatnonzero(P[k, s, :, s2] > 0)[0])
    name = (lambda i: names[i]) if names is not None else str
    raise ValueError(
        f"Assumption 1 violated at state {name(s)}: the neighbour sets N_k^s differ between agents; "
        f"next state {name(s2)} is reached (e.g. by action {a}) under agents {have} but not under "
        f"agents {lack}. Pass check_assumption1=False for algorithms that do not need it (QAvg)."
    )


# ----------------------------------------------------------------------------------------------
# Covering: kappa, omega_min, P_k in P_omega.


def kappa(mdp: TabularMDP) -> np.ndarray:
    """`kappa(s, a) = max_k max_{s'} (P_bar(s'|s,a) - P_k(s'|s,a)) / P_bar(s'|s,a)`, shape [S, A].

    The max runs over s' in N^s with `P_bar(s'|s, a) > 0`; where `P_bar(s'|s, a) = 0` every P_k is 0 too
    and the term imposes nothing.
    """
    P_bar = mdp.P_bar
    pos = P_bar > 0
    ratio = np.where(pos, (P_bar - mdp.P) / np.where(pos, P_bar, 1.0), -np.inf)
    return np.maximum(ratio.max(axis=(0, 3)), 0.0)


def omega_min(mdp: TabularMDP) -> float:
    """The smallest omega for which every P_k lies in P_omega: max_(s,a) kappa(s, a)."""
    return float(kappa(mdp).max())


def covers(mdp: TabularMDP, omega: float, atol: float = 1e-12) -> np.ndarray:
    """Whether P_k lies in P_omega, per agent, shape [K] (bool).

    P_k(.|s,a) = (1 - omega) P_bar(.|s,a) + omega q with q a distribution on N^s iff
    P_k >= (1 - omega) P_bar entrywise (q then sums to 1 and lives on supp P_bar(.|s,a) within N^s).
    """
    if not 0.0 <= omega <= 1.0:
        raise ValueError(f"omega must be in [0, 1], got {omega}")
    slack = mdp.P - (1.0 - omega) * mdp.P_bar[None]
    return np.all(slack >= -atol, axis=(1, 2, 3))


# ----------------------------------------------------------------------------------------------
# The compiled form: support lists.


class TabularArrays(NamedTuple):
    """A `TabularMDP` as jax arrays (a pytree: vmap over it to sweep problems of equal shapes).

    next_states[s, a, j]: the j-th state of supp P_bar(.|s, a), padded by repeating a valid index.
    probs[k, s, a, j]: P_k(next_states[s, a, j] | s, a) (0 on padding).
    probs_bar[s, a, j]: P_bar on the same list.
    neighbours[k, s, i]: the states of N_k^s, padded by repeating a member (so a min is unchanged).
    neighbours_bar[s, i]: N^s, likewise.
    reward[s, a], gamma: scalar array.
    """

    next_states: jax.Array
    probs: jax.Array
    probs_bar: jax.Array
    neighbours: jax.Array
    neighbours_bar: jax.Array
    reward: jax.Array
    gamma: jax.Array

    @property
    def num_agents(self) -> int:
        return self.probs.shape[-4]


def _padded_lists(mask: np.ndarray, width: int | None) -> np.ndarray:
    """Rows of a boolean mask [..., S] as index lists [..., width], padded with the first member."""
    counts = mask.sum(axis=-1)
    if np.any(counts == 0):
        raise ValueError("internal: an empty support list")
    need = int(counts.max())
    width = need if width is None else width
    if width < need:
        raise ValueError(f"padding width {width} is smaller than the largest list ({need})")
    # Stable argsort puts members (key 0) first, in index order.
    order = np.argsort(~mask, axis=-1, kind="stable")[..., :width]
    pos = np.arange(width)
    first = order[..., :1]
    return np.where(pos < counts[..., None], order, first).astype(np.int32)


def support_sizes(mdp: TabularMDP) -> tuple[int, int]:
    """(largest `|supp P_bar(.|s,a)|`, largest neighbour set): the padding `to_arrays` needs."""
    return int((mdp.P_bar > 0).sum(-1).max()), int(
        max(mdp.neighbours().sum(-1).max(), mdp.neighbours_bar().sum(-1).max())
    )


def to_arrays(
    mdp: TabularMDP,
    support_width: int | None = None,
    neighbour_width: int | None = None,
    dtype=None,
) -> TabularArrays:
    """Compile a `TabularMDP` into support lists. Widths default to the largest list; pass larger
    widths to give several problems equal shapes (`stack_arrays` does this)."""
    dtype = dtype or jax.dtypes.canonicalize_dtype(jnp.float64)  # float64 under x64, else float32
    P_bar = mdp.P_bar
    next_states = _padded_lists(P_bar > 0, support_width)  # [S, A, m]
    gather = lambda p: np.take_along_axis(p, np.broadcast_to(next_states, p.shape[:-1] + next_states.shape[-1:]), -1)
    valid = np.arange(next_states.shape[-1]) < (P_bar > 0).sum(-1, keepdims=True)
    probs = np.where(valid, gather(mdp.P), 0.0)
    probs_bar = np.where(valid, gather(P_bar), 0.0)
    nb_width = neighbour_width or support_sizes(mdp)[1]
    neighbours = _padded_lists(mdp.neighbours(), nb_width)
    neighbours_bar = _padded_lists(mdp.neighbours_bar(), nb_width)
    return TabularArrays(
        next_states=jnp.asarray(next_states),
        probs=jnp.asarray(probs, dtype),
        probs_bar=jnp.asarray(probs_bar, dtype),
        neighbours=jnp.asarray(neighbours),
        neighbours_bar=jnp.asarray(neighbours_bar),
        reward=jnp.asarray(mdp.r, dtype),
        gamma=jnp.asarray(mdp.gamma, dtype),
    )


def stack_arrays(mdps: Sequence[TabularMDP], dtype=None) -> TabularArrays:
    """Several problems of equal (K, S, A) as one `TabularArrays` with a leading problem axis."""
    shapes = {m.P.shape for m in mdps}
    if len(shapes) != 1:
        raise ValueError(f"stack_arrays needs problems of equal shape [K, S, A, S], got {sorted(shapes)}")
    widths = np.array([support_sizes(m) for m in mdps]).max(axis=0)
    arrays = [to_arrays(m, int(widths[0]), int(widths[1]), dtype) for m in mdps]
    return jax.tree.map(lambda *xs: jnp.stack(xs), *arrays)


# ----------------------------------------------------------------------------------------------
# Generators.


def random_mdp(
    seed: int,
    num_agents: int = 5,
    num_states: int = 10,
    num_actions: int = 3,
    gamma: float = 0.9,
    heterogeneity: float = 0.5,
    support_size: int | None = 3,
) -> TabularMDP:
    """A random problem whose K kernels share one support per (s, a) (Assumption 1 holds).

    For each (s, a): a support of `support_size` next states drawn without replacement (None: all
    states), base weights b ~ Uniform(0.1, 1) on it, and P_k(.|s,a) = normalise(b * (1 + h n_k))
    with n_k ~ Uniform(-1, 1) i.i.d. per entry and h = `heterogeneity` in [0, 1) (h = 0: identical
    agents). Rewards r(s, a) ~ Uniform(0, 1). Deterministic in `seed` (numpy generator).
    """
    if not 0.0 <= heterogeneity < 1.0:
        raise ValueError(f"heterogeneity must be in [0, 1), got {heterogeneity}")
    m = num_states if support_size is None else support_size
    if not 1 <= m <= num_states:
        raise ValueError(f"support_size must be in [1, num_states={num_states}], got {support_size}")
    rng = np.random.default_rng(seed)
    S, A, K = num_states, num_actions, num_agents
    keys = rng.random((S, A, S))
    support = np.argsort(keys, axis=-1)[..., :m]  # m distinct states per (s, a)
    base = np.zeros((S, A, S))
    np.put_along_axis(base, support, rng.uniform(0.1, 1.0, (S, A, m)), axis=-1)
    noise = rng.uniform(-1.0, 1.0, (K, S, A, S))
    P = base[None] * (1.0 + heterogeneity * noise)
    P /= P.sum(-1, keepdims=True)
    r = rng.uniform(0.0, 1.0, (S, A))
    return TabularMDP(P=P, r=r, gamma=gamma)


# Windy-cliff actions.
UP, RIGHT, DOWN, LEFT = 0, 1, 2, 3
ACTION_NAMES = ("up", "right", "down", "left")
_MOVES = ((-1, 0), (0, 1), (1, 0), (0, -1))

DEFAULT_WIND = (0.1, 0.15, 0.2, 0.25, 0.3)


def windy_cliff(
    wind: Sequence[float] = DEFAULT_WIND,
    height: int = 4,
    width: int = 6,
    gamma: float = 0.9,
    step_reward: float = 0.1,
) -> TabularMDP:
    """The heterogeneous windy-cliff gridworld, in the spirit of Jin et al. (2022).

    Layout (height 4, width 6 shown; row 0 is the top, the cliff is the bottom row)::

        . . . . . .
        . . . . . .
        . . . . . .
        S C C C C G

    S = start (bottom-left), G = goal (bottom-right), C = cliff cells between them. States are
    cells, numbered row-major: s = row * width + col. Actions: 0 up, 1 right, 2 down, 3 left.

    Dynamics of agent k (one wind probability theta_k per agent, 0 < theta_k < 1):

      * from an ordinary cell, with probability 1 - theta_k the intended move happens; with
        probability theta_k the wind blows the agent one cell *down*, towards the cliff, instead.
        Moves into the outer wall leave the agent where it is.
      * the cliff cells and the goal are absorbing (every action stays).

    Rewards (in [0, 1], shared by all agents): r = 1 for every action taken in the goal,
    r = `step_reward` (default 0.1) in every ordinary cell (start included) and r = 0 in a cliff
    cell. Falling thus ends all reward (a cliff cell earns 0 forever), the goal earns
    1 / (1 - gamma), and staying alive away from both earns a little.

    Because every theta_k is in (0, 1), all agents share the same supports (Assumption 1 holds).
    The short path along the cliff edge is best under weak wind; under strong wind, and in the
    worst case over P_omega, the detour through the upper rows is.
    """
    wind = np.asarray(wind, dtype=np.float64)
    if wind.ndim != 1 or wind.size < 1:
        raise ValueError(f"wind must be a non-empty 1-D sequence of probabilities, got {wind!r}")
    if np.any((wind <= 0) | (wind >= 1)):
        raise ValueError(f"every wind probability must lie in (0, 1) (Assumption 1), got {wind.tolist()}")
    if not 0.0 <= step_reward <= 1.0:
        raise ValueError(f"step_reward must be in [0, 1], got {step_reward}")
    if height < 2 or width < 3:
        raise ValueError(f"windy_cliff needs height >= 2 and width >= 3, got {height}x{width}")
    H, W, K = height, width, wind.size
    S, A = H * W, 4
    cell = lambda row, col: row * W + col
    start, goal = cell(H - 1, 0), cell(H - 1, W - 1)
    cliff = {cell(H - 1, c) for c in range(1, W - 1)}

    def move(s, d):
        row, col = divmod(s, W)
        nr, nc = row + d[0], col + d[1]
        return cell(nr, nc) if 0 <= nr < H and 0 <= nc < W else s

    P = np.zeros((K, S, A, S))
    for s in range(S):
        for a in range(A):
            if s in cliff or s == goal:
                P[:, s, a, s] = 1.0
                continue
            intended, blown = move(s, _MOVES[a]), move(s, _MOVES[DOWN])
            P[:, s, a, intended] += 1.0 - wind
            P[:, s, a, blown] += wind
    r = np.full((S, A), float(step_reward))
    r[sorted(cliff)] = 0.0
    r[goal] = 1.0
    names = []
    for s in range(S):
        row, col = divmod(s, W)
        tag = "S" if s == start else "G" if s == goal else "C" if s in cliff else ""
        names.append(f"({row},{col}){tag}")
    return TabularMDP(P=P, r=r, gamma=gamma, start_state=start, names=tuple(names))
