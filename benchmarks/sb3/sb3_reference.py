"""Reference implementation of the federated DQN loop with Stable-Baselines3.

This is the baseline that the fedjax_rl throughput benchmark compares against:
K independent SB3 ``DQN`` agents, each in its own gymnasium ``CartPole-v1``
whose pole length is perturbed to ``nominal * (1 + n_k)``, ``n_k ~ U(-r, r)``.
Every ``sync_every`` environment steps the server averages the Q-network and
target-network parameters over the agents and loads the mean back into every
agent (optimizer states and replay buffers stay private).

Hyperparameters follow RL-Zoo3's ``dqn.yml`` entry for CartPole-v1
(lr 2.3e-3, gamma 0.99, target_update_interval 10, net_arch [256, 256],
exploration_fraction 0.16, exploration_final_eps 0.04) with the federated
setting's batch size 16 and buffer size 1000, and -- so that every agent-step
costs exactly one environment step plus one gradient update, like the JAX
implementation -- ``train_freq=1, gradient_steps=1`` instead of Zoo's 256/128.

This module needs torch / stable-baselines3 / gymnasium, which are NOT project
dependencies; run it from the separate benchmark venv::

    python3 -m venv .venv-bench
    .venv-bench/bin/pip install torch==2.13.0 "stable-baselines3>=2.3,<3" \
        "gymnasium[classic-control]>=1.0,<1.4"
    .venv-bench/bin/python -m benchmarks.sb3.sb3_reference --steps 2000

It prints its throughput as JSON on stdout for `benchmarks.throughput.dqn_throughput`, which runs it as
a subprocess and writes the result through the harness (this interpreter has no JAX).

Two drive modes are offered (``mode=``):

* ``"loop"`` (default): ``_setup_learn`` is called once per agent with the full
  step budget, then each round runs exactly the body of
  ``OffPolicyAlgorithm.learn`` (``collect_rollouts`` + ``train``) until the
  agent has taken ``sync_every`` more steps.  Same per-step work as ``learn()``
  but without its per-call setup (logger re-configuration, callback init), and
  the exploration/lr schedules see the true total budget.
* ``"learn"``: every agent calls ``model.learn(sync_every,
  reset_num_timesteps=False)`` each round, the most literal use of the public
  API.  Caveat: SB3 then believes each call is a whole training run, so the
  epsilon schedule restarts its decay every round (irrelevant for throughput).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from typing import Any

import numpy as np

# Zoo CartPole-v1 DQN hyperparameters, with the federated overrides noted above.
ZOO_CARTPOLE_DQN: dict[str, Any] = dict(
    learning_rate=2.3e-3,
    gamma=0.99,
    target_update_interval=10,
    exploration_fraction=0.16,
    exploration_final_eps=0.04,
    policy_kwargs=dict(net_arch=[256, 256]),
)

NOMINAL_POLE_HALF_LENGTH = 0.5  # gymnasium CartPoleEnv.length


def make_perturbed_cartpole(n_k: float):
    """gymnasium CartPole-v1 with pole length nominal*(1+n_k), derived quantities recomputed."""
    import gymnasium as gym

    env = gym.make("CartPole-v1")
    base = env.unwrapped
    base.length = NOMINAL_POLE_HALF_LENGTH * (1.0 + float(n_k))
    base.total_mass = base.masspole + base.masscart
    base.polemass_length = base.masspole * base.length
    return env


def _average_into(models, attrs=("q_net", "q_net_target")) -> None:
    """Server step: FedAvg of the policy modules `attrs` (DQN: q_net and q_net_target), loaded into
    every agent."""
    import torch

    for attr in attrs:
        sds = [getattr(m.policy, attr).state_dict() for m in models]
        with torch.no_grad():
            avg = {
                k: torch.stack([sd[k].float() for sd in sds]).mean(0).to(sds[0][k].dtype)
                for k in sds[0]
            }
        for m in models:
            getattr(m.policy, attr).load_state_dict(avg)


def time_federated_rounds(step_fns, average, sync_every: int, warmup_rounds: int, rounds: int):
    """Untimed warm-up rounds, then `rounds` timed rounds; a round = every agent's step_fn for
    `sync_every` steps, then `average()`. Returns (wall seconds, CPU seconds) of the timed rounds."""

    def fed_round():
        for f in step_fns:
            f(sync_every)
        average()

    for _ in range(warmup_rounds):
        fed_round()
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(rounds):
        fed_round()
    return time.perf_counter() - t0, time.process_time() - c0


class _LoopDriver:
    """Runs OffPolicyAlgorithm.learn's loop body in chunks of `sync_every` steps."""

    def __init__(self, model, total_timesteps: int):
        self.model = model
        total, self.callback = model._setup_learn(
            total_timesteps, None, reset_num_timesteps=True, tb_log_name="fed", progress_bar=False
        )
        self.callback.on_training_start(locals(), globals())

    def advance(self, steps: int) -> None:
        m = self.model
        target = m.num_timesteps + steps
        while m.num_timesteps < target:
            rollout = m.collect_rollouts(
                m.env,
                train_freq=m.train_freq,
                action_noise=m.action_noise,
                callback=self.callback,
                learning_starts=m.learning_starts,
                replay_buffer=m.replay_buffer,
                log_interval=None,
            )
            if not rollout.continue_training:
                break
            if m.num_timesteps > 0 and m.num_timesteps > m.learning_starts:
                gs = m.gradient_steps if m.gradient_steps >= 0 else rollout.episode_timesteps
                if gs > 0:
                    m.train(batch_size=m.batch_size, gradient_steps=gs)


def _build_agents(num_agents, length_rate, batch_size, buffer_size, learning_starts, seed, rng):
    from stable_baselines3 import DQN

    n = rng.uniform(-length_rate, length_rate, size=num_agents)
    models = []
    for k in range(num_agents):
        env = make_perturbed_cartpole(n[k])
        models.append(
            DQN(
                "MlpPolicy",
                env,
                batch_size=batch_size,
                buffer_size=buffer_size,
                learning_starts=learning_starts,
                train_freq=1,
                gradient_steps=1,
                seed=seed + k,
                device="cpu",
                verbose=0,
                **ZOO_CARTPOLE_DQN,
            )
        )
    # Start from a common initialisation, as the federated algorithm does.
    sd_q = models[0].policy.q_net.state_dict()
    sd_t = models[0].policy.q_net_target.state_dict()
    for m in models[1:]:
        m.policy.q_net.load_state_dict(sd_q)
        m.policy.q_net_target.load_state_dict(sd_t)
    return models, n


def run_sb3_federated(
    num_agents: int = 5,
    num_seeds: int = 1,
    total_steps_per_agent: int = 2000,
    sync_every: int = 100,
    length_rate: float = 0.5,
    batch_size: int = 16,
    buffer_size: int = 1000,
    learning_starts: int = 100,
    seed: int = 0,
    mode: str = "loop",
    warmup_rounds: int = 1,
    num_threads: int | None = 1,
) -> dict:
    """Federated SB3 DQN on perturbed CartPoles; returns throughput and config.

    ``total_steps_per_agent`` environment steps (rounded up to a multiple of
    ``sync_every``) are timed per agent, after ``warmup_rounds`` untimed rounds
    that are run past ``learning_starts`` so that the timed rounds all train.
    Seeds are run one after another (num_seeds=5, num_agents=5 -> 25 agents).
    """
    import torch

    if mode not in ("loop", "learn"):
        raise ValueError(f"mode must be 'loop' or 'learn', got {mode!r}")
    if num_threads is not None:
        torch.set_num_threads(int(num_threads))
    rounds = -(-int(total_steps_per_agent) // int(sync_every))
    timed_steps = rounds * sync_every
    # Warm-up must get past learning_starts so the timed part always trains.
    warmup_rounds = max(int(warmup_rounds), -(-(learning_starts + 1) // sync_every))
    budget = (warmup_rounds + rounds) * sync_every

    seconds_total = 0.0
    cpu_total = 0.0
    per_seed = []
    lengths = []
    for s in range(num_seeds):
        rng = np.random.default_rng([seed, s])
        models, n = _build_agents(
            num_agents, length_rate, batch_size, buffer_size, learning_starts,
            seed * 100_003 + s * num_agents, rng,
        )
        lengths.append((NOMINAL_POLE_HALF_LENGTH * (1 + n)).tolist())
        if mode == "loop":
            drivers = [_LoopDriver(m, budget) for m in models]
            step_fns = [d.advance for d in drivers]
        else:
            step_fns = [
                (lambda steps, m=m: m.learn(total_timesteps=steps, reset_num_timesteps=False))
                for m in models
            ]

        dt, cpu = time_federated_rounds(step_fns, lambda: _average_into(models), sync_every, warmup_rounds, rounds)
        cpu_total += cpu
        seconds_total += dt
        per_seed.append(num_agents * timed_steps / dt)
        for m in models:
            m.env.close()

    agent_steps = num_agents * num_seeds * timed_steps
    return dict(
        impl="stable-baselines3",
        mode=mode,
        agent_steps_per_sec=agent_steps / seconds_total,
        agent_steps=agent_steps,
        seconds=seconds_total,
        # CPU seconds of this process over the timed part (all torch threads).
        # With num_threads=1 on an idle machine this ~= seconds; on a shared
        # machine agent_steps_per_cpu_sec is the less contention-sensitive figure.
        cpu_seconds=cpu_total,
        agent_steps_per_cpu_sec=agent_steps / cpu_total,
        load_avg_1min_at_end=os.getloadavg()[0],
        per_seed_agent_steps_per_sec=per_seed,
        config=dict(
            num_agents=num_agents,
            num_seeds=num_seeds,
            total_steps_per_agent=timed_steps,
            rounds=rounds,
            warmup_rounds=warmup_rounds,
            sync_every=sync_every,
            length_rate=length_rate,
            pole_lengths=lengths,
            batch_size=batch_size,
            buffer_size=buffer_size,
            learning_starts=learning_starts,
            train_freq=1,
            gradient_steps=1,
            seed=seed,
            **{k: v for k, v in ZOO_CARTPOLE_DQN.items()},
        ),
        torch_num_threads=torch.get_num_threads(),
        versions=_versions(),
        machine=dict(
            platform=platform.platform(),
            processor=platform.processor() or platform.machine(),
            cpu_count=os.cpu_count(),
        ),
    )


def _versions() -> dict:
    import gymnasium
    import stable_baselines3
    import torch

    return dict(
        torch=torch.__version__,
        stable_baselines3=stable_baselines3.__version__,
        gymnasium=gymnasium.__version__,
        numpy=np.__version__,
        python=platform.python_version(),
    )


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=2000, help="timed env steps per agent")
    p.add_argument("--agents", type=int, default=5)
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--sync-every", type=int, default=100)
    p.add_argument("--length-rate", type=float, default=0.5)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--buffer-size", type=int, default=1000)
    p.add_argument("--learning-starts", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--mode", choices=("loop", "learn"), default="loop")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (0: leave default)")
    a = p.parse_args(argv)
    res = run_sb3_federated(
        num_agents=a.agents,
        num_seeds=a.seeds,
        total_steps_per_agent=a.steps,
        sync_every=a.sync_every,
        length_rate=a.length_rate,
        batch_size=a.batch_size,
        buffer_size=a.buffer_size,
        learning_starts=a.learning_starts,
        seed=a.seed,
        mode=a.mode,
        num_threads=a.threads or None,
    )
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
