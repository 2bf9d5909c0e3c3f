"""Throughput of FedRDQN CartPole (K = 8) on three process layouts of this machine, and the time its
federated average (the cross-device, cross-process pmean) takes.

    python -m benchmarks.throughput.multiprocess          # writes benchmarks/results/throughput/multiprocess.json
    python -m benchmarks.throughput.multiprocess 2x2      # re-measures one layout, keeps the others' rows

Layouts: 1 process x 1 device (agents a vmap axis), 1 process x 4 fake CPU devices (shard_map), 2
processes x 2 fake CPU devices (jax.distributed, gloo over loopback). Agent-steps/s counts
environment steps of all agents, timed over evaluation blocks after the first (compilation excluded).
The average is timed alone: the same pmean over the real shared leaves, jitted, called repeatedly
(dispatch included, so an upper bound on its time inside the compiled run); its share is
rounds-per-block x that time / block time. All layouts share the 2 cores of this machine, so they
measure overhead, not speed-up. In each layout's processes a block and 200 averages are the two cases
of `harness.measure`, interleaved over the 5 blocks after the first (every process runs the same
sequence: the collectives pair up); process 0 writes its rows through the harness to a file the parent
reads. The result (benchmarks/harness.py's format) has those rows per layout (`kind` "block" and
"average", a row per repeat) and a summary per layout (`kind` "summary": medians).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from benchmarks import harness

BENCHMARK = "throughput.multiprocess"
LAYOUTS = [(1, 1), (2, 2), (1, 4)]  # (processes, devices per process)
NUM_AGENTS = 8
STEPS_PER_AGENT = 3000
SYNC_EVERY = 100
EVAL_EVERY_ROUNDS = 5  # 6 blocks of 500 steps per agent; the first one is warm-up
AVERAGE_CALLS = 200


def config(num_devices):
    from fedjax_rl.training import configs

    return configs.train_config("fedrdqn", "CartPole-v1", physics=("length",), num_agents=NUM_AGENTS,
                                steps_per_agent=STEPS_PER_AGENT, sync_every=SYNC_EVERY,
                                eval_every_rounds=EVAL_EVERY_ROUNDS, eval_episodes=1, sweep_points=2,
                                num_devices=num_devices, agent_overrides=dict(omega=0.1, **configs.DEMO_DQN))


def measure(out_json: str) -> None:
    """One process of one layout (every process runs it; process 0 writes)."""
    import jax

    from fedjax_rl.core import agent_axis, federated
    from fedjax_rl.training import distributed, program

    num_devices = jax.device_count() if jax.device_count() > 1 else None
    trainer = program.make_trainer(config(num_devices))
    steps_per_block = NUM_AGENTS * SYNC_EVERY * EVAL_EVERY_ROUNDS
    carry = {}

    def block_setup():
        init = jax.jit(jax.vmap(trainer.init))
        run_block = jax.jit(jax.vmap(trainer.run_block, in_axes=(0, None, None)))
        carry.update(state=init(program.seed_keys(0, 1)), block=0)

        def call():  # the next block, its metrics to the host as the host loop does every block
            carry["state"], metrics = run_block(carry["state"], trainer.hparams, carry["block"])
            distributed.to_host(metrics)
            jax.block_until_ready(carry["state"])
            carry["block"] += 1
            return dict(agent_steps=steps_per_block)

        return call

    def average_setup():
        average = jax.jit(jax.vmap(agent_axis.for_each_agent(federated.federated_mean, NUM_AGENTS, num_devices)))
        carry["shared"] = carry["state"].agents.learner.shared

        def call():
            for _ in range(AVERAGE_CALLS):
                # One call at a time, as in the run (a block ends with its metrics on the host): 200 calls
                # dispatched asynchronously deadlocked both 2x2 processes (gloo) and the 1x4 process (its
                # 4 device threads on 2 cores hit the 40 s rendezvous timeout); blocking fixed both.
                carry["shared"] = jax.block_until_ready(average(carry["shared"]))
            return dict(calls=AVERAGE_CALLS)

        return call

    # the block's warm-up call is block 0 (compilation); the timed calls are the blocks after it
    rows = harness.measure([harness.Case("block", block_setup, dict(kind="block")),
                            harness.Case("average", average_setup, dict(kind="average"))],
                           repeats=trainer.config.num_evals - 1)
    if distributed.is_writer():
        layout = dict(processes=jax.process_count(), devices_per_process=jax.local_device_count())
        harness.write(out_json, BENCHMARK, dict(worker=True), [dict(row, **layout) for row in rows] + [dict(
            layout, kind="communication", communication=program.communication(trainer))])


def summary(rows: list[dict]) -> dict:
    """A layout's medians, under the names of the rows before the harness."""
    block_s = harness.median(rows, "wall_s", kind="block")
    average_s = harness.median(rows, "wall_s", kind="average") / AVERAGE_CALLS
    first = rows[0]
    return dict(kind="summary", processes=first["processes"], devices_per_process=first["devices_per_process"],
                agent_steps_per_s=NUM_AGENTS * SYNC_EVERY * EVAL_EVERY_ROUNDS / block_s, block_s=block_s,
                average_s=average_s, average_share=EVAL_EVERY_ROUNDS * average_s / block_s,
                communication=next(r["communication"] for r in rows if r["kind"] == "communication"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_layout(processes: int, devices: int, tmp: str) -> dict:
    out = os.path.join(tmp, f"layout_{processes}x{devices}.json")
    env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}", "JAX_PLATFORMS": "cpu",
           "PYTHONPATH": os.pathsep.join([harness.ROOT, os.environ.get("PYTHONPATH", "")])}
    port = _free_port()
    procs = []
    try:
        for pid in range(processes):
            argv = [sys.executable, "-m", f"benchmarks.{BENCHMARK}", "--worker", out]
            if processes > 1:
                argv += [f"127.0.0.1:{port}", str(processes), str(pid)]
            procs.append(subprocess.Popen(argv, env=env))
        for proc in procs:
            proc.wait(timeout=900)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    if any(p.returncode for p in procs):
        raise RuntimeError(f"layout {processes}x{devices} failed (exit codes {[p.returncode for p in procs]})")
    rows = [r for r in harness.read(out)["rows"] if r["kind"] != "communication"]
    return rows + [summary(harness.read(out)["rows"])]


def main(only: list[str], path: str) -> None:
    """`only`: layouts such as "2x2" to (re)measure, merged into the existing results file."""
    import tempfile

    from benchmarks.common import machine, machine_line

    layouts = [(p, d) for p, d in LAYOUTS if not only or f"{p}x{d}" in only]
    previous = harness.read(path)["rows"] if only and os.path.exists(path) else []
    with tempfile.TemporaryDirectory() as tmp:
        rows = []
        for p, d in LAYOUTS:
            if (p, d) not in layouts:  # kept as measured before (a result from before the harness: its one row)
                rows += [r for r in previous if (r["processes"], r["devices_per_process"]) == (p, d)]
                continue
            try:
                rows += run_layout(p, d, tmp)
            except RuntimeError as err:  # recorded, not hidden: see the README's note on fake devices
                rows.append(dict(kind="summary", processes=p, devices_per_process=d, error=str(err)))
    comm = next(r for r in rows if "communication" in r)["communication"]
    host = machine()
    print(machine_line(host))
    print(f"FedRDQN CartPole, K = {NUM_AGENTS}, E = {SYNC_EVERY}, {comm['shared_params']:,} shared parameters "
          f"({comm['model_bytes'] / 2**10:.1f} KiB) per agent")
    print(f"{'layout':>18} {'agent-steps/s':>14} {'block s':>8} {'average ms':>11} {'average share':>14}")
    for r in rows:
        if r.get("kind", "summary") != "summary":  # rows per repeat; one row per layout before the harness
            continue
        if "error" in r:
            print(f"{r['processes']} proc x {r['devices_per_process']} dev".rjust(18) + f" failed: {r['error']}")
            continue
        print(f"{r['processes']} proc x {r['devices_per_process']} dev".rjust(18)
              + f" {r['agent_steps_per_s']:>14,.0f} {r['block_s']:>8.2f} {1e3 * r['average_s']:>11.3f}"
              f" {100 * r['average_share']:>13.2f}%")
    k = 1000
    per_round = {"bytes_up_per_round": k * comm["model_bytes"], "bytes_down_per_round": k * comm["model_bytes"]}
    print(f"K = {k}: {per_round['bytes_up_per_round'] / 2**20:.1f} MiB up and as much down per round "
          f"({comm['model_bytes']} B per agent)")
    harness.write(path, BENCHMARK, dict(num_agents=NUM_AGENTS, steps_per_agent=STEPS_PER_AGENT, sync_every=SYNC_EVERY,
                                        k1000=per_round), rows, machine=host)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        if len(sys.argv) > 3:
            from fedjax_rl.training import distributed

            distributed.initialize(sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
        measure(sys.argv[2])
    else:
        parser = harness.parser(BENCHMARK, __doc__)
        parser.add_argument("layouts", nargs="*", help="layouts such as 2x2 to (re)measure, merged into --out's rows")
        args = parser.parse_args()
        main(args.layouts, args.out)
