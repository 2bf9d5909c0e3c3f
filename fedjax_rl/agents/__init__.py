"""The algorithm registry: name -> agent class, settings, per-task defaults, validation.

The command line (`--algo` choices, `--set`), `configs.train_config` (which builds an algorithm's
settings from its entry: `configs.agent_config`), the trainer's validation, and the plots' labels
all read `ALGORITHMS`. Adding an algorithm means one new agent module (the
protocol in `agents/base.py`) and one entry here.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from fedjax_rl.agents import ddpg, dqn, sac, td3


@dataclasses.dataclass(frozen=True)
class Algorithm:
    """name: the `--algo` name. label: how tables and figures name it. agent: the agent class.
    config: its settings dataclass. fixed: settings the name decides (not overridable: `robust`).
    defaults: the algorithm's own defaults over the settings' declared ones.
    task_defaults: env name -> per-task defaults (RL-Zoo3), including the training budget "steps".
    family: how an unknown setting is reported ("unknown DQN settings ...")."""

    name: str
    label: str
    agent: type
    config: type
    fixed: dict
    defaults: dict
    task_defaults: Callable[[str], dict]
    family: str

    def steps(self, env_name: str) -> int:
        """The default training budget (environment steps per agent) for `env_name`."""
        return self.task_defaults(env_name)["steps"]

    def describe(self, agent_config) -> str:
        """Label for tables and figures: 'FedRDQN (ω=0.2)'."""
        get = agent_config.get if isinstance(agent_config, dict) else lambda k: getattr(agent_config, k)
        return f"{self.label} (ω={get('omega'):g})" if self.fixed.get("robust") else self.label


ALGORITHMS: dict[str, Algorithm] = {
    a.name: a
    for a in (
        Algorithm("fedrdqn", "FedRDQN", dqn.DQNAgent, dqn.DQNConfig, fixed=dict(robust=True), defaults={},
                  task_defaults=dqn.task_defaults, family="DQN"),
        Algorithm("dqnavg", "DQNAvg", dqn.DQNAgent, dqn.DQNConfig, fixed=dict(robust=False),
                  defaults=dict(omega=0.0), task_defaults=dqn.task_defaults, family="DQN"),
        Algorithm("fedrddpg", "FedRDDPG", ddpg.DDPGAgent, ddpg.DDPGConfig, fixed=dict(robust=True),
                  defaults=dict(num_critics=1), task_defaults=ddpg.task_defaults, family="DDPG"),
        Algorithm("ddpgavg1", "DDPGAvg(1)", ddpg.DDPGAgent, ddpg.DDPGConfig, fixed=dict(robust=False),
                  defaults=dict(omega=0.0, num_critics=1), task_defaults=ddpg.task_defaults, family="DDPG"),
        Algorithm("ddpgavg2", "DDPGAvg(2)", ddpg.DDPGAgent, ddpg.DDPGConfig, fixed=dict(robust=False),
                  defaults=dict(omega=0.0, num_critics=2), task_defaults=ddpg.task_defaults, family="DDPG"),
        Algorithm("fedrtd3", "FedRTD3", td3.TD3Agent, td3.TD3Config, fixed=dict(robust=True), defaults={},
                  task_defaults=td3.task_defaults, family="TD3"),
        Algorithm("td3avg", "TD3Avg", td3.TD3Agent, td3.TD3Config, fixed=dict(robust=False),
                  defaults=dict(omega=0.0), task_defaults=td3.task_defaults, family="TD3"),
        Algorithm("fedrsac", "FedRSAC", sac.SACAgent, sac.SACConfig, fixed=dict(robust=True), defaults={},
                  task_defaults=sac.task_defaults, family="SAC"),
        Algorithm("sacavg", "SACAvg", sac.SACAgent, sac.SACConfig, fixed=dict(robust=False),
                  defaults=dict(omega=0.0), task_defaults=sac.task_defaults, family="SAC"),
    )
}


def names() -> tuple[str, ...]:
    """The registered algorithm names (the `--algo` choices), sorted."""
    return tuple(sorted(ALGORITHMS))


def get(name: str) -> Algorithm:
    """The registered algorithm `name`; a ValueError listing the names if there is none."""
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise ValueError(f"algo must be one of {sorted(ALGORITHMS)}, got {name!r}") from None
