"""The matrix products of a gradient step on a CPU, per library: YNNPACK (XLA's default) and Eigen.

Why this exists: each algorithm compiles its programs with the CPU matrix-product library measured
faster for its networks (`TrainConfig.cpu_dots`, an agent's `CPU_DOTS`), and this is where the
difference comes from. For every network shape below, one batched product of each kind a dense
layer's gradient step makes, over `copies` independent networks (seeds x agents, each its own
weights, as in a federated run):

  forward   x @ W        [copies, batch, n_in] x [copies, n_in, n_out]
  input     dy @ W^T     the gradient with respect to the layer's input
  weight    x^T @ dy     the gradient with respect to the weights

each jitted alone with `machine.compiler_options(library)`, timed as the best of 5 x 20 calls.
GFLOP/s counts 2 m n k per product. The whole-program effect is `ddpg_throughput.py --cpu-dots
eigen,ynnpack` and `dqn_throughput.py` under each library (benchmarks/README.md).

Usage: python benchmarks/cpu_dots.py [--copies 25] [--out benchmarks/results/cpu_dots.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

from fedjax_rl.training import machine  # noqa: E402

# (name, batch, n_in, n_out): the hidden layer that dominates each algorithm's gradient step.
SHAPES = (("DDPG/TD3 400-300, batch 64", 64, 400, 300), ("SAC 256-256, batch 64", 64, 256, 256),
          ("DQN 256-256, batch 16 (the paper's)", 16, 256, 256))
PRODUCTS = {"forward": ("cbi,cio->cbo", "x", "w"), "input": ("cbo,cio->cbi", "dy", "w"),
            "weight": ("cbi,cbo->cio", "x", "dy")}


def rate(equation, a, b, flop, library) -> float:
    """GFLOP/s of one jitted batched product of `flop` FLOP under `library`."""
    product = jax.jit(lambda a, b: jnp.einsum(equation, a, b), compiler_options=machine.compiler_options(library))
    jax.block_until_ready(product(a, b))
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(20):
            jax.block_until_ready(product(a, b))
        best = min(best, (time.perf_counter() - start) / 20)
    return flop / best / 1e9


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--copies", type=int, default=25, help="independent networks (seeds x agents)")
    p.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "cpu_dots.json"))
    a = p.parse_args()
    info = common.machine()
    print(common.machine_line(info), flush=True)
    keys = iter(jax.random.split(jax.random.key(0), 3 * len(SHAPES)))
    rows = []
    print(f"{'network':<38}{'product':<9}" + "".join(f"{lib + ' GFLOP/s':>17}" for lib in machine.CPU_DOTS)
          + f"{'eigen/ynnpack':>15}")
    for name, batch, n_in, n_out in SHAPES:
        arrays = dict(x=jax.random.normal(next(keys), (a.copies, batch, n_in)),
                      w=jax.random.normal(next(keys), (a.copies, n_in, n_out)),
                      dy=jax.random.normal(next(keys), (a.copies, batch, n_out)))
        flop = 2 * a.copies * batch * n_in * n_out  # the same for the three products
        for product, (equation, left, right) in PRODUCTS.items():
            rates = {lib: rate(equation, arrays[left], arrays[right], flop, lib) for lib in machine.CPU_DOTS}
            rows.append(dict(network=name, batch=batch, n_in=n_in, n_out=n_out, product=product,
                             gflop_per_sec=rates))
            print(f"{name:<38}{product:<9}" + "".join(f"{rates[lib]:>17.1f}" for lib in machine.CPU_DOTS)
                  + f"{rates['eigen'] / rates['ynnpack']:>15.2f}", flush=True)
    info["load_average_1_5_15min_at_end"] = list(os.getloadavg())
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(dict(description=__doc__.split("\n\n")[0], machine=info, copies=a.copies, rows=rows), f, indent=1)
    print("wrote", a.out)


if __name__ == "__main__":
    main()
