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


def federated_seeds(build, num_agents: int, num_seeds: int, steps: int, sync_every: int, learning_starts: int,
                    num_threads: int | None = 1, warmup_rounds: int = 1, mode: str = "loop") -> dict:
    """The federated loop both SB3 references run, and its rates: for each seed in turn, `build(s)`
    gives the K models and the server's `average()`; untimed warm-up rounds (past `learning_starts`,
    so that every timed round trains), then ceil(steps / sync_every) timed rounds, a round being every
    agent's `sync_every` steps (`mode`: "loop", `_LoopDriver`; "learn", `model.learn`) and one
    `average()`. The timed rounds of a seed are one `harness.time_call` (this process's wall and CPU
    seconds, every torch thread); the harness cannot interleave them with JAX's cases, since this
    interpreter (.venv-bench) has no JAX: the parent benchmark interleaves whole runs of it instead."""
    import torch

    from benchmarks import harness  # the standard library only: importable without JAX

    if mode not in ("loop", "learn"):
        raise ValueError(f"mode must be 'loop' or 'learn', got {mode!r}")
    if num_threads:
        torch.set_num_threads(int(num_threads))
    rounds = -(-int(steps) // int(sync_every))
    warmup_rounds = max(int(warmup_rounds), -(-(learning_starts + 1) // sync_every))
    budget = (warmup_rounds + rounds) * sync_every
    seconds = cpu = 0.0
    per_seed = []
    for s in range(num_seeds):
        models, average = build(s)
        if mode == "loop":
            step_fns = [_LoopDriver(m, budget).advance for m in models]
        else:
            step_fns = [lambda n, m=m: m.learn(total_timesteps=n, reset_num_timesteps=False) for m in models]

        def fed_round():
            for step in step_fns:
                step(sync_every)
            average()

        for _ in range(warmup_rounds):
            fed_round()
        timed = harness.time_call(lambda: [fed_round() for _ in range(rounds)])
        seconds, cpu = seconds + timed["wall_s"], cpu + timed["cpu_s"]
        per_seed.append(num_agents * rounds * sync_every / timed["wall_s"])
        for m in models:
            m.env.close()
    agent_steps = num_agents * num_seeds * rounds * sync_every
    # cpu_seconds: CPU seconds of this process over the timed rounds (all torch threads). With one
    # thread on an idle machine this ~= seconds; on a shared machine agent_steps_per_cpu_sec is the
    # less contention-sensitive figure.
    return dict(agent_steps_per_sec=agent_steps / seconds, agent_steps=agent_steps, seconds=seconds,
                cpu_seconds=cpu, agent_steps_per_cpu_sec=agent_steps / cpu, load_avg_1min_at_end=os.getloadavg()[0],
                per_seed_agent_steps_per_sec=per_seed, torch_num_threads=torch.get_num_threads(),
                rounds=rounds, warmup_rounds=warmup_rounds, versions=_versions(),
                machine=dict(platform=platform.platform(), processor=platform.processor() or platform.machine(),
                             cpu_count=os.cpu_count()))


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
    lengths = []

    def build(s):
        rng = np.random.default_rng([seed, s])
        models, n = _build_agents(num_agents, length_rate, batch_size, buffer_size, learning_starts,
                                  seed * 100_003 + s * num_agents, rng)
        lengths.append((NOMINAL_POLE_HALF_LENGTH * (1 + n)).tolist())
        return models, lambda: _average_into(models)

    out = federated_seeds(build, num_agents, num_seeds, total_steps_per_agent, sync_every, learning_starts,
                          num_threads, warmup_rounds, mode)
    rounds, warmup_rounds = out.pop("rounds"), out.pop("warmup_rounds")
    config = dict(num_agents=num_agents, num_seeds=num_seeds, total_steps_per_agent=rounds * sync_every, rounds=rounds,
                  warmup_rounds=warmup_rounds, sync_every=sync_every, length_rate=length_rate, pole_lengths=lengths,
                  batch_size=batch_size, buffer_size=buffer_size, learning_starts=learning_starts, train_freq=1,
                  gradient_steps=1, seed=seed, **ZOO_CARTPOLE_DQN)
    return dict(impl="stable-baselines3", mode=mode, **out, config=config)


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


def parser(doc: str, steps: int, learning_starts: int) -> argparse.ArgumentParser:
    """The flags both references take: the loop's size, its seed and torch's threads."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--steps", type=int, default=steps, help="timed env steps per agent")
    p.add_argument("--agents", type=int, default=5)
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--sync-every", type=int, default=100)
    p.add_argument("--learning-starts", type=int, default=learning_starts)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (0: leave torch's default)")
    return p


def main(argv=None) -> None:
    p = parser(__doc__, steps=2000, learning_starts=100)
    p.add_argument("--length-rate", type=float, default=0.5)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--buffer-size", type=int, default=1000)
    p.add_argument("--mode", choices=("loop", "learn"), default="loop")
    a = p.parse_args(argv)
    res = run_sb3_federated(a.agents, a.seeds, a.steps, a.sync_every, a.length_rate, a.batch_size, a.buffer_size,
                            a.learning_starts, a.seed, a.mode, num_threads=a.threads or None)
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
