"""Exact FedRQ local steps per second: the compiled JAX run against plain numpy.

One *step* is one exact local update of every agent, Q_k <- (1 - lambda_t) Q_k + lambda_t T_k Q_k
over all (s, a), with the federated average every E = 10 steps (the cost of averaging is included).
Problems: random kernels with S states, A = 4 actions, K agents, a shared support of m = 10 next
states per (s, a) (Assumption 1 holds) and per-agent probabilities; neighbour sets N^s are the union
of the supports over actions (up to A m states). All implementations read the same support lists,
in float32:

  jax         fedjax_rl.tabular.make_fedrq (record=False), one jitted lax.scan over rounds
  numpy loop  Python loops over agents, states and actions; each (k, s, a) backup is a numpy dot
              over its m next states (the "plain numpy loop implementation" of the issue)
  numpy vec   numpy vectorised over agents and (s, a) (fancy indexing + einsum), Python loop over steps

Usage: python -m benchmarks.throughput.tabular [--quick]. Prints a table and writes
benchmarks/results/throughput/tabular.json (benchmarks/harness.py's format: a row per (S, K)).
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import common, harness
from fedjax_rl.tabular import FedRQConfig, TabularArrays, make_fedrq

BENCHMARK = "throughput.tabular"

A = 4
SUPPORT = 10
SYNC_EVERY = 10
GAMMA = 0.9
OMEGA = 0.3


def make_problem(seed: int, K: int, S: int):
    """Support lists of a random heterogeneous problem (numpy, float32)."""
    rng = np.random.default_rng(seed)
    next_states = np.argsort(rng.random((S, A, S)), axis=-1)[..., :SUPPORT].astype(np.int32)
    base = rng.uniform(0.1, 1.0, (S, A, SUPPORT))
    probs = base[None] * (1.0 + 0.5 * rng.uniform(-1, 1, (K, S, A, SUPPORT)))
    probs = (probs / probs.sum(-1, keepdims=True)).astype(np.float32)
    neighbours = [np.unique(next_states[s]) for s in range(S)]
    width = max(len(n) for n in neighbours)
    neighbours = np.stack([np.pad(n, (0, width - len(n)), mode="edge") for n in neighbours]).astype(np.int32)
    reward = rng.uniform(0, 1, (S, A)).astype(np.float32)
    return next_states, probs, neighbours, reward


def lam(t: int) -> float:
    return 2.0 / ((1.0 - GAMMA) * (t + SYNC_EVERY))


def numpy_loop(Q, next_states, probs, neighbours, reward, steps: int, t0: int = 0):
    K, S, _ = Q.shape
    Q = Q.copy()
    g, w = np.float32(GAMMA), np.float32(OMEGA)
    for t in range(t0, t0 + steps):
        step = np.float32(lam(t))
        new = np.empty_like(Q)
        for k in range(K):
            V = Q[k].max(axis=1)
            for s in range(S):
                worst = V[neighbours[s]].min()
                for a in range(A):
                    expectation = np.dot(probs[k, s, a], V[next_states[s, a]])
                    target = reward[s, a] + g * ((1 - w) * expectation + w * worst)
                    new[k, s, a] = (1 - step) * Q[k, s, a] + step * target
        Q = new
        if (t + 1) % SYNC_EVERY == 0:
            Q[:] = Q.mean(axis=0)
    return Q


def numpy_vectorised(Q, next_states, probs, neighbours, reward, steps: int, t0: int = 0):
    Q = Q.copy()
    g, w = np.float32(GAMMA), np.float32(OMEGA)
    for t in range(t0, t0 + steps):
        step = np.float32(lam(t))
        V = Q.max(axis=-1)  # [K, S]
        expectation = np.einsum("ksam,ksam->ksa", probs, V[:, next_states])
        worst = V[:, neighbours].min(axis=-1)  # [K, S]
        target = reward + g * ((1 - w) * expectation + w * worst[..., None])
        Q = (1 - step) * Q + step * target
        if (t + 1) % SYNC_EVERY == 0:
            Q[:] = Q.mean(axis=0)
    return Q


def time_call(fn, min_seconds: float, max_calls: int = 1000):
    """Seconds per call: repeat `fn` until `min_seconds` have passed (at least once)."""
    calls, start = 0, time.perf_counter()
    while True:
        fn()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds or calls >= max_calls:
            return elapsed / calls


def bench_case(K: int, S: int, quick: bool) -> dict:
    next_states, probs, neighbours, reward = make_problem(0, K, S)
    problem = TabularArrays(
        next_states=jnp.asarray(next_states),
        probs=jnp.asarray(probs),
        probs_bar=jnp.asarray(probs.mean(0)),
        neighbours=jnp.asarray(np.broadcast_to(neighbours, (K,) + neighbours.shape)),
        neighbours_bar=jnp.asarray(neighbours),
        reward=jnp.asarray(reward),
        gamma=jnp.asarray(GAMMA, jnp.float32),
    )

    # JAX: enough rounds that a run takes a good fraction of a second.
    rounds = 20
    while True:
        run = jax.jit(make_fedrq(FedRQConfig(num_rounds=rounds, sync_every=SYNC_EVERY, record=False)))
        key = jax.random.key(0)
        compile_start = time.perf_counter()
        jax.block_until_ready(run(key, problem, OMEGA))
        compile_s = time.perf_counter() - compile_start
        per_run = time_call(lambda: jax.block_until_ready(run(key, problem, OMEGA)), 0.5 if quick else 2.0)
        if per_run > 0.2 or rounds >= 20_000:
            break
        rounds *= 10
    jax_steps_per_s = rounds * SYNC_EVERY / per_run

    # Correctness: JAX and the numpy loop agree after one round.
    q0 = np.zeros((K, S, A), np.float32)
    check_run = jax.jit(make_fedrq(FedRQConfig(num_rounds=1, sync_every=SYNC_EVERY, record=False)))
    q_jax = np.asarray(check_run(key, problem, OMEGA).q_agents)
    q_vec = numpy_vectorised(q0, next_states, probs, neighbours, reward, SYNC_EVERY)
    np.testing.assert_allclose(q_jax, q_vec, rtol=1e-4, atol=1e-4)
    loop_steps = 2 if K * S <= 5000 else 1
    q_loop = numpy_loop(q0, next_states, probs, neighbours, reward, loop_steps)
    np.testing.assert_allclose(q_loop, numpy_vectorised(q0, next_states, probs, neighbours, reward, loop_steps), rtol=1e-4, atol=1e-5)

    loop_s = time_call(lambda: numpy_loop(q0, next_states, probs, neighbours, reward, 1), 0.5 if quick else 2.0, 20)
    vec_s = time_call(lambda: numpy_vectorised(q0, next_states, probs, neighbours, reward, SYNC_EVERY), 0.5 if quick else 2.0)
    loop_steps_per_s = 1.0 / loop_s
    vec_steps_per_s = SYNC_EVERY / vec_s
    return dict(
        S=S, A=A, K=K, support=SUPPORT, neighbour_width=int(neighbours.shape[1]), sync_every=SYNC_EVERY,
        jax_steps_per_s=jax_steps_per_s,
        jax_backups_per_s=jax_steps_per_s * K * S * A,
        jax_compile_s=compile_s,
        jax_steps_timed=rounds * SYNC_EVERY,
        numpy_loop_steps_per_s=loop_steps_per_s,
        numpy_vectorised_steps_per_s=vec_steps_per_s,
        speedup_vs_numpy_loop=jax_steps_per_s / loop_steps_per_s,
        speedup_vs_numpy_vectorised=jax_steps_per_s / vec_steps_per_s,
    )


def machine() -> dict:
    # The machine is shared: a load average above the core count means the timings are noisy.
    return dict(common.machine(), numpy=np.__version__, dtype="float32")


def main() -> None:
    parser = harness.parser(BENCHMARK, __doc__)
    parser.add_argument("--quick", action="store_true", help="shorter timing windows")
    args = parser.parse_args()
    info = machine()
    print(common.machine_line(info))
    print(f"exact FedRQ local steps/s (all K agents, every (s, a); A={A}, support m={SUPPORT}, E={SYNC_EVERY}, float32; numpy {info['numpy']})")
    header = f"{'S':>5} {'K':>3} {'jax':>12} {'numpy loop':>11} {'numpy vec':>11} {'x loop':>8} {'x vec':>7} {'jax backups/s':>14}"
    print(header)
    cases = []
    for S in (100, 1000):
        for K in (1, 5, 64):
            c = bench_case(K, S, args.quick)
            cases.append(c)
            print(
                f"{S:>5} {K:>3} {c['jax_steps_per_s']:>12.1f} {c['numpy_loop_steps_per_s']:>11.2f} "
                f"{c['numpy_vectorised_steps_per_s']:>11.1f} {c['speedup_vs_numpy_loop']:>8.0f} "
                f"{c['speedup_vs_numpy_vectorised']:>7.1f} {c['jax_backups_per_s']:>14.3g}",
                flush=True,
            )
    target = next(c for c in cases if c["S"] == 1000 and c["K"] == 5)
    verdict = target["speedup_vs_numpy_loop"] >= 20
    print(f"target (>= 20x the numpy loop at S=1000, K=5): {target['speedup_vs_numpy_loop']:.0f}x -> {'met' if verdict else 'NOT met'}")
    settings = dict(
        description=__doc__.strip().splitlines()[0], quick=args.quick, dtype="float32", numpy=info["numpy"],
        definitions=dict(
            step="one exact local update of all K agents over all (s, a); federated average every E steps",
            numpy_loop="Python loops over agents, states and actions; numpy dot over the m next states",
            numpy_vectorised="numpy vectorised over agents and (s, a); Python loop over steps",
            jax="make_fedrq(FedRQConfig(record=False)) under jax.jit, agents a named vmap axis",
        ),
        target=dict(case="S=1000, K=5", speedup_vs_numpy_loop=target["speedup_vs_numpy_loop"], met=verdict),
    )
    harness.write(args.out, BENCHMARK, settings, cases, machine=info)


if __name__ == "__main__":
    main()
