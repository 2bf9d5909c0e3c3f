"""One process of tests/test_multiprocess.py's runs (not a test module): joins a jax.distributed
process group on loopback, runs the federations named on the command line with the agent axis
sharded over every process's devices, and saves what it gathered to an .npz (one per process).

    python tests/multiprocess_worker.py PORT NUM_PROCESSES PROCESS_ID OUT_NPZ RUN_DIR {dqn,tabular}
"""

import sys

import jax

from fedjax_rl.training import distributed


def dqn_config(num_agents: int, num_devices: int | None):
    from fedjax_rl.training import configs

    agent = dict(hidden_sizes=(16, 16), learning_starts=15, train_freq=1, gradient_steps=1, target_update_interval=5,
                 batch_size=8, buffer_size=50, omega=0.2)
    return configs.train_config("fedrdqn", "CartPole-v1", agent_overrides=agent, physics=("length",),
                                num_agents=num_agents, sync_every=10, steps_per_agent=60, eval_every_rounds=3,
                                eval_episodes=2, sweep_points=3, num_devices=num_devices)


DQN_AGENTS = (8,)  # 2 agents per device (one per device is the tabular test's K = 4); each K costs ~50 s of CPU per process
TABULAR_AGENTS = (4, 8)
NUM_SEEDS = 2


def run_dqn(num_agents: int, num_devices: int | None, out_dir: str | None = None) -> dict:
    """Flat {name: array}: every curve and final metric of a 2-seed tiny FedRDQN run."""
    from fedjax_rl.training import loop

    result = loop.run(dqn_config(num_agents, num_devices), num_seeds=NUM_SEEDS, seed=0, out_dir=out_dir,
                            progress=False)
    return {f"dqn{num_agents}/{part}/{k}": v for part in ("curve", "final") for k, v in result[part].items()}


def run_tabular(num_agents: int, num_devices: int | None) -> dict:
    """Flat {name: array}: a sampled FedRQ run on a random MDP, every recorded field."""
    from fedjax_rl import tabular

    problem = tabular.random_mdp(1, num_agents=num_agents, num_states=6, num_actions=2)
    result = tabular.fedrq(problem, 0.3, num_rounds=5, sync_every=4, sampled=True, key=jax.random.key(3),
                         num_devices=num_devices)
    host = distributed.to_host(result._asdict())
    return {f"tabular{num_agents}/{k}": v for k, v in host.items() if v is not None}


def listening_on(port: int) -> list[str]:
    """The addresses this process listens on at `port` (process 0's coordinator: 127.0.0.1 alone), an
    IPv6 socket's IPv4-mapped address (gRPC's "::ffff:127.0.0.1") as the IPv4 address it is."""
    import ipaddress

    import psutil

    def plain(ip: str) -> str:
        address = ipaddress.ip_address(ip.split("%")[0])
        return str(getattr(address, "ipv4_mapped", None) or address)

    return sorted({plain(c.laddr.ip) for c in psutil.Process().net_connections(kind="tcp")
                   if c.status == psutil.CONN_LISTEN and c.laddr.port == port})


def main() -> None:
    port, num_processes, process_id, out_npz, run_dir, what = sys.argv[1:]
    distributed.initialize(f"127.0.0.1:{port}", int(num_processes), int(process_id))
    import numpy as np

    num_devices = jax.device_count()
    arrays = {}
    if what == "tabular":
        arrays["coordinator/listens_on"] = np.array(listening_on(int(port)), dtype=str)
        for k in TABULAR_AGENTS:
            arrays.update(run_tabular(k, num_devices))
        try:  # a mesh on process 0's devices only: refused before compiling
            run_tabular(4, num_devices // 2)
            refused = ""
        except ValueError as err:
            refused = str(err)
        arrays["refused/num_devices"] = np.array(refused)
    else:
        for k in DQN_AGENTS:
            arrays.update(run_dqn(k, num_devices, out_dir=f"{run_dir}/dqn{k}"))
            # Again in the same directory: resumes from the last checkpoint (restored into global
            # arrays on every process) and only finalizes, with programs already compiled.
            resumed = run_dqn(k, num_devices, out_dir=f"{run_dir}/dqn{k}")
            arrays.update({"resumed/" + name: v for name, v in resumed.items()})
    np.savez(out_npz, **arrays)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
