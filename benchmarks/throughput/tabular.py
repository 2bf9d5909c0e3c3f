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

The three are cases of `harness.measure` for each (S, K), interleaved over `--repeats` (one with
`--quick`) after a warm-up call each; a JAX call runs enough rounds to take a good fraction of a second
(chosen in its setup), a numpy loop call one step, a vectorised numpy call E steps.

Usage: python -m benchmarks.throughput.tabular [--quick] [--repeats 3] [--states 100,1000] [--agents 1,5,64].
Prints a table and writes benchmarks/results/throughput/tabular.json (benchmarks/harness.py's format: a
row per (S, K), implementation and repeat (`kind` "timed"), and per (S, K) the medians' rates and
speed-ups (`kind` "summary")).
"""

from __future__ import annotations

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


def bench_cases(K: int, S: int) -> list[harness.Case]:
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
    key = jax.random.key(0)
    q0 = np.zeros((K, S, A), np.float32)

    def jax_setup():
        # Correctness: JAX and the numpy loop agree after one round.
        check_run = jax.jit(make_fedrq(FedRQConfig(num_rounds=1, sync_every=SYNC_EVERY, record=False)))
        q_jax = np.asarray(check_run(key, problem, OMEGA).q_agents)
        q_vec = numpy_vectorised(q0, next_states, probs, neighbours, reward, SYNC_EVERY)
        np.testing.assert_allclose(q_jax, q_vec, rtol=1e-4, atol=1e-4)
        loop_steps = 2 if K * S <= 5000 else 1
        q_loop = numpy_loop(q0, next_states, probs, neighbours, reward, loop_steps)
        np.testing.assert_allclose(q_loop, numpy_vectorised(q0, next_states, probs, neighbours, reward, loop_steps),
                                   rtol=1e-4, atol=1e-5)
        # Enough rounds that a call takes a good fraction of a second.
        rounds = 20
        while True:
            run = jax.jit(make_fedrq(FedRQConfig(num_rounds=rounds, sync_every=SYNC_EVERY, record=False)))
            compile_s = harness.time_call(lambda: jax.block_until_ready(run(key, problem, OMEGA)))["wall_s"]
            per_run = harness.time_call(lambda: jax.block_until_ready(run(key, problem, OMEGA)))["wall_s"]
            if per_run > 0.2 or rounds >= 20_000:
                break
            rounds *= 10

        def call():
            jax.block_until_ready(run(key, problem, OMEGA))
            return dict(steps=rounds * SYNC_EVERY, jax_compile_s=compile_s)

        return call

    def numpy_setup(fn, steps):
        def call():
            fn(q0, next_states, probs, neighbours, reward, steps)
            return dict(steps=steps)

        return lambda: call

    settings = dict(S=S, A=A, K=K, support=SUPPORT, neighbour_width=int(neighbours.shape[1]), sync_every=SYNC_EVERY)
    return [harness.Case("jax", jax_setup, settings),
            harness.Case("numpy_loop", numpy_setup(numpy_loop, 1), settings),
            harness.Case("numpy_vectorised", numpy_setup(numpy_vectorised, SYNC_EVERY), settings)]


def summary(rows: list[dict]) -> dict:
    """The medians' rates and speed-ups of one (S, K), named as the rows before the harness named them."""
    rate = {case: harness.median(rows, "steps_per_s", case=case) for case in ("jax", "numpy_loop", "numpy_vectorised")}
    first = rows[0]
    return dict(
        kind="summary", **{k: first[k] for k in ("S", "A", "K", "support", "neighbour_width", "sync_every")},
        jax_steps_per_s=rate["jax"],
        jax_backups_per_s=rate["jax"] * first["K"] * first["S"] * A,
        jax_compile_s=next(r["jax_compile_s"] for r in rows if r["case"] == "jax"),
        jax_steps_timed=next(r["steps"] for r in rows if r["case"] == "jax"),
        numpy_loop_steps_per_s=rate["numpy_loop"],
        numpy_vectorised_steps_per_s=rate["numpy_vectorised"],
        speedup_vs_numpy_loop=rate["jax"] / rate["numpy_loop"],
        speedup_vs_numpy_vectorised=rate["jax"] / rate["numpy_vectorised"],
    )


def machine() -> dict:
    # The machine is shared: a load average above the core count means the timings are noisy.
    return dict(common.machine(), numpy=np.__version__, dtype="float32")


def main() -> None:
    parser = harness.parser(BENCHMARK, __doc__, repeats=3)
    parser.add_argument("--quick", action="store_true", help="one timed call of each case (--repeats 1)")
    parser.add_argument("--states", default="100,1000", help="numbers of states S, comma-separated")
    parser.add_argument("--agents", default="1,5,64", help="numbers of agents K, comma-separated")
    args = parser.parse_args()
    repeats = 1 if args.quick else args.repeats
    info = machine()
    print(common.machine_line(info))
    print(f"exact FedRQ local steps/s (all K agents, every (s, a); A={A}, support m={SUPPORT}, E={SYNC_EVERY}, float32; numpy {info['numpy']})")
    header = f"{'S':>5} {'K':>3} {'jax':>12} {'numpy loop':>11} {'numpy vec':>11} {'x loop':>8} {'x vec':>7} {'jax backups/s':>14}"
    print(header)
    cases, rows = [], []
    for S in map(int, args.states.split(",")):
        for K in map(int, args.agents.split(",")):
            timed = harness.measure(bench_cases(K, S), repeats)
            for row in timed:
                row.update(kind="timed", steps_per_s=row["steps"] / row["wall_s"])
            c = summary(timed)
            cases.append(c)
            rows += timed + [c]
            print(
                f"{S:>5} {K:>3} {c['jax_steps_per_s']:>12.1f} {c['numpy_loop_steps_per_s']:>11.2f} "
                f"{c['numpy_vectorised_steps_per_s']:>11.1f} {c['speedup_vs_numpy_loop']:>8.0f} "
                f"{c['speedup_vs_numpy_vectorised']:>7.1f} {c['jax_backups_per_s']:>14.3g}",
                flush=True,
            )
    target = next((c for c in cases if c["S"] == 1000 and c["K"] == 5), None)
    verdict = None if target is None else target["speedup_vs_numpy_loop"] >= 20
    if target is not None:
        print(f"target (>= 20x the numpy loop at S=1000, K=5): {target['speedup_vs_numpy_loop']:.0f}x -> "
              f"{'met' if verdict else 'NOT met'}")
    settings = dict(
        description=__doc__.strip().splitlines()[0], quick=args.quick, states=args.states, agents=args.agents,
        dtype="float32", numpy=info["numpy"],
        definitions=dict(
            step="one exact local update of all K agents over all (s, a); federated average every E steps",
            numpy_loop="Python loops over agents, states and actions; numpy dot over the m next states",
            numpy_vectorised="numpy vectorised over agents and (s, a); Python loop over steps",
            jax="make_fedrq(FedRQConfig(record=False)) under jax.jit, agents a named vmap axis",
        ),
        target=dict(case="S=1000, K=5", speedup_vs_numpy_loop=target and target["speedup_vs_numpy_loop"], met=verdict),
        repeats=repeats,
    )
    harness.write(args.out, BENCHMARK, settings, rows, machine=info)


if __name__ == "__main__":
    main()
