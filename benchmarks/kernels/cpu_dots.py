"""The matrix products of a gradient step on a CPU, per library: YNNPACK (XLA's default) and Eigen.

Why this exists: each algorithm compiles its programs with the CPU matrix-product library measured
faster for its networks (`TrainConfig.cpu_dots`, an agent's `CPU_DOTS`), and this is where the
difference comes from. For every network shape below, one batched product of each kind a dense
layer's gradient step makes, over `copies` independent networks (seeds x agents, each its own
weights, as in a federated run):

  forward   x @ W        [copies, batch, n_in] x [copies, n_in, n_out]
  input     dy @ W^T     the gradient with respect to the layer's input
  weight    x^T @ dy     the gradient with respect to the weights

each jitted alone with `machine.compiler_options(library)`, timed (benchmarks/harness.py) as 20 calls per
timed call, every product and library interleaved over 5 repeats; a row per case and repeat, the table
printing the best. GFLOP/s counts 2 m n k per product. The whole-program effect is
`benchmarks.throughput.ddpg_throughput --cpu-dots eigen,ynnpack` and `benchmarks.throughput.dqn_throughput`
under each library (benchmarks/README.md).

Usage: python -m benchmarks.kernels.cpu_dots [--copies 25] [--repeats 5]
Writes benchmarks/results/kernels/cpu_dots.json.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from benchmarks import common, harness
from fedjax_rl.training import machine

BENCHMARK = "kernels.cpu_dots"
CALLS = 20  # product calls per timed call
# (name, batch, n_in, n_out): the hidden layer that dominates each algorithm's gradient step.
SHAPES = (("DDPG/TD3 400-300, batch 64", 64, 400, 300), ("SAC 256-256, batch 64", 64, 256, 256),
          ("DQN 256-256, batch 16 (the paper's)", 16, 256, 256))
PRODUCTS = {"forward": ("cbi,cio->cbo", "x", "w"), "input": ("cbo,cio->cbi", "dy", "w"),
            "weight": ("cbi,cbo->cio", "x", "dy")}


def case(name, batch, n_in, n_out, product, library, arrays, copies) -> harness.Case:
    """`CALLS` calls of one jitted batched product under `library`."""
    equation, left, right = PRODUCTS[product]
    a, b = arrays[left], arrays[right]

    def setup():
        jitted = jax.jit(lambda a, b: jnp.einsum(equation, a, b), compiler_options=machine.compiler_options(library))
        jax.block_until_ready(jitted(a, b))

        def call():
            for _ in range(CALLS):
                jax.block_until_ready(jitted(a, b))

        return call

    return harness.Case(f"{name} {product} {library}", setup, dict(
        network=name, batch=batch, n_in=n_in, n_out=n_out, product=product, library=library,
        flop_per_call=CALLS * 2 * copies * batch * n_in * n_out))  # 2 m n k, the same for the three products


def main() -> None:
    p = harness.parser(BENCHMARK, __doc__, repeats=5)
    p.add_argument("--copies", type=int, default=25, help="independent networks (seeds x agents)")
    a = p.parse_args()
    info = common.machine()
    print(common.machine_line(info), flush=True)
    keys = iter(jax.random.split(jax.random.key(0), 3 * len(SHAPES)))
    cases = []
    for name, batch, n_in, n_out in SHAPES:
        arrays = dict(x=jax.random.normal(next(keys), (a.copies, batch, n_in)),
                      w=jax.random.normal(next(keys), (a.copies, n_in, n_out)),
                      dy=jax.random.normal(next(keys), (a.copies, batch, n_out)))
        cases += [case(name, batch, n_in, n_out, product, library, arrays, a.copies)
                  for product in PRODUCTS for library in machine.CPU_DOTS]
    rows = harness.measure(cases, a.repeats)
    for row in rows:
        row["gflop_per_sec"] = row["flop_per_call"] / row["wall_s"] / 1e9
    print(f"{'network':<38}{'product':<9}" + "".join(f"{lib + ' GFLOP/s':>17}" for lib in machine.CPU_DOTS)
          + f"{'eigen/ynnpack':>15}")
    for name, *_ in SHAPES:
        for product in PRODUCTS:
            best = {lib: max(r["gflop_per_sec"] for r in rows
                             if (r["network"], r["product"], r["library"]) == (name, product, lib))
                    for lib in machine.CPU_DOTS}
            print(f"{name:<38}{product:<9}" + "".join(f"{best[lib]:>17.1f}" for lib in machine.CPU_DOTS)
                  + f"{best['eigen'] / best['ynnpack']:>15.2f}")
    harness.write(a.out, BENCHMARK, dict(description=__doc__.split("\n\n")[0], copies=a.copies, calls_per_row=CALLS),
                  rows, machine=info)


if __name__ == "__main__":
    main()
