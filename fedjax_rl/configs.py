"""Default hyperparameters per task.

DQN: RL-Zoo3's tuned DQN hyperparameters (hyperparams/dqn.yml) for each task, except where the
paper's federated setting overrides them: batch 16 and buffer 1000 for every task, K = 5 agents,
E = 100 steps between averages, perturbation rate p = 0.5. RL-Zoo3's `gradient_steps: -1` means
"as many gradient steps as environment steps collected" (= train_freq). LunarLander-v3 uses
RL-Zoo3's LunarLander-v2 entry (the task is unchanged apart from the version bump).
"""

from __future__ import annotations

import dataclasses

from fedjax_rl.agents.dqn import DQNConfig
from fedjax_rl.train import ALGOS, TrainConfig

PAPER_FEDERATED = dict(batch_size=16, buffer_size=1000)

ZOO_DQN: dict[str, dict] = {
    "CartPole-v1": dict(
        learning_rate=2.3e-3, gamma=0.99, learning_starts=1000, target_update_interval=10,
        train_freq=256, gradient_steps=128, exploration_fraction=0.16, exploration_final_eps=0.04,
        hidden_sizes=(256, 256), steps=50_000,
    ),
    "Acrobot-v1": dict(
        learning_rate=6.3e-4, gamma=0.99, learning_starts=0, target_update_interval=250,
        train_freq=4, gradient_steps=-1, exploration_fraction=0.12, exploration_final_eps=0.1,
        hidden_sizes=(256, 256), steps=100_000,
    ),
    "MountainCar-v0": dict(
        learning_rate=4e-3, gamma=0.98, learning_starts=1000, target_update_interval=600,
        train_freq=16, gradient_steps=8, exploration_fraction=0.2, exploration_final_eps=0.07,
        hidden_sizes=(256, 256), steps=120_000,
    ),
    "LunarLander-v3": dict(
        learning_rate=6.3e-4, gamma=0.99, learning_starts=0, target_update_interval=250,
        train_freq=4, gradient_steps=-1, exploration_fraction=0.12, exploration_final_eps=0.1,
        hidden_sizes=(256, 256), steps=100_000,
    ),
}


def zoo_steps(env_name: str) -> int:
    """RL-Zoo3's training budget (environment steps) for `env_name`."""
    return ZOO_DQN[env_name]["steps"]


def dqn_config(algo: str, env_name: str, **overrides) -> DQNConfig:
    """RL-Zoo3 DQN defaults for `env_name` with the paper's federated replay settings."""
    if algo not in ALGOS:
        raise ValueError(f"algo must be one of {sorted(ALGOS)}, got {algo!r}")
    if env_name not in ZOO_DQN:
        raise ValueError(f"no DQN defaults for {env_name!r}; allowed: {', '.join(ZOO_DQN)}")
    zoo = {k: v for k, v in ZOO_DQN[env_name].items() if k != "steps"}
    fields = {f.name for f in dataclasses.fields(DQNConfig)}
    unknown = set(overrides) - fields
    if unknown:
        raise ValueError(f"unknown DQN settings {sorted(unknown)}; allowed: {sorted(fields)}")
    return DQNConfig(robust=ALGOS[algo], **{**zoo, **PAPER_FEDERATED, **overrides})


def train_config(algo: str, env_name: str, agent_overrides: dict | None = None, **overrides) -> TrainConfig:
    """A consistent `TrainConfig`: RL-Zoo3/paper defaults, then `overrides` (TrainConfig fields)
    and `agent_overrides` (DQNConfig fields)."""
    agent = dqn_config(algo, env_name, **(agent_overrides or {}))
    return TrainConfig(algo=algo, env_name=env_name, agent=agent, **overrides)

# The demo's and the learning tests' small-budget CartPole settings: one gradient step per
# environment step from step 500 and a hard target copy every 100 steps learn CartPole within
# 10k steps per agent, where RL-Zoo3's (train_freq 256, learning_starts 1000) needs far more.
DEMO_DQN = dict(train_freq=1, gradient_steps=1, learning_starts=500, target_update_interval=100,
                hidden_sizes=(64, 64))
