"""Resolved configurations: `train_config(algo, env_name, ...)` is the one place defaults are
resolved, for the Python API and the command line alike (`fedjax-rl train` builds its config with
it): the settings' declared defaults, the algorithm's, the task's (RL-Zoo3, see each agent module's
table and `fedjax_rl.agents.ALGORITHMS`), then what the caller gives.

Training-loop defaults resolved per task:
  physics            the task's first perturbed parameter (the paper's order, `envs.get_spec`).
  engine             the task's default physics engine: "c" (MuJoCo's C engine) for the MuJoCo
                     tasks; None for the others, which are written in JAX and have no choice.
  steps_per_agent    RL-Zoo3's training budget for the task (n_timesteps).
  eval_every_rounds  20 evaluation points over the run: max(1, num_rounds // 20).
"""

from __future__ import annotations

from fedjax_rl import agents, envs
from fedjax_rl.run_config import TrainConfig
from fedjax_rl.agents.dqn import ZOO_DQN  # noqa: F401  (the DQN per-task table, kept under its old name)

PAPER_FEDERATED = dict(batch_size=16, buffer_size=1000)  # the paper's DQN replay settings
EVAL_POINTS = 20  # default number of evaluations over a run


def zoo_steps(env_name: str, algo: str = "fedrdqn") -> int:
    """RL-Zoo3's training budget (environment steps) for `env_name` under `algo`'s family."""
    return agents.get(algo).steps(env_name)


def default_eval_every(steps_per_agent: int, sync_every: int) -> int:
    return max(1, (steps_per_agent // max(1, sync_every)) // EVAL_POINTS)


def dqn_config(algo: str, env_name: str, **overrides):
    """RL-Zoo3 DQN defaults for `env_name` with the paper's federated replay settings."""
    return agents.get(algo).agent_config(env_name, **overrides)


def train_config(algo: str, env_name: str, agent_overrides: dict | None = None, **overrides):
    """A consistent `TrainConfig`: declared, algorithm and task defaults, then `overrides`
    (TrainConfig fields) and `agent_overrides` (the algorithm's settings). Raises a ValueError
    naming a bad or unknown setting; compiles nothing."""
    algorithm = agents.get(algo)
    envs.get_spec(env_name)  # an unknown name raises with the allowed names
    engine = envs.check_engine(env_name, overrides.get("engine"))
    env, params = envs.make(env_name, None, engine)
    algorithm.agent.check_env(env_name, env.action_space(params))
    fields = {s.name for s in TrainConfig.SETTINGS} - {"algo", "env_name", "agent"}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise ValueError(f"unknown settings {unknown}; allowed: {sorted(fields)}")
    agent = algorithm.agent_config(env_name, **(agent_overrides or {}))
    resolved = dict(overrides)
    if resolved.get("physics") is None:
        resolved["physics"] = envs.get_spec(env_name).perturbed[:1]
    resolved["engine"] = None if envs.get_spec(env_name).engines == ("jax",) else engine
    if resolved.get("steps_per_agent") is None:
        resolved["steps_per_agent"] = algorithm.steps(env_name)
    if resolved.get("sync_every") is None:
        resolved.pop("sync_every", None)
    sync_every = resolved.get("sync_every", TrainConfig.SYNC_EVERY_DEFAULT)
    if sync_every < 1:
        raise ValueError(f"sync_every (E) must be >= 1, got {sync_every}")
    if resolved.get("eval_every_rounds") is None:
        resolved["eval_every_rounds"] = default_eval_every(resolved["steps_per_agent"], sync_every)
    resolved = {k: v for k, v in resolved.items() if v is not None or k == "num_devices"}
    config = TrainConfig(algo=algo, env_name=env_name, agent=agent, **resolved)
    config.validate()
    return config


# The demo's and the learning tests' small-budget CartPole settings: one gradient step per
# environment step from step 500 and a hard target copy every 100 steps learn CartPole within
# 10k steps per agent, where RL-Zoo3's (train_freq 256, learning_starts 1000) needs far more.
# Not the paper's settings (the demo says so in its output).
DEMO_DQN = dict(train_freq=1, gradient_steps=1, learning_starts=500, target_update_interval=100,
                hidden_sizes=(64, 64))
