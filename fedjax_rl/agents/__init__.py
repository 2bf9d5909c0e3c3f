"""The algorithm registry: name -> agent class, settings, per-task defaults, validation.

The command line (`--algo` choices, `--set`), `configs.train_config` (which builds an algorithm's
settings from its entry: `configs.agent_config`), the trainer's validation, and the plots' labels
all read the registry. An algorithm is one agent module (the protocol in `agents/base.py`) and one
`Algorithm`, registered with `register`: the built-in ones below, and a user's from outside the
library, by `register` in their own code or by an entry point in the group `fedjax_rl.algorithms`
(`fedjax_rl.plugins`; docs/own_algorithm.md walks through one), loaded when its name is asked for.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from fedjax_rl import plugins
from fedjax_rl.agents import ddpg, dqn, sac, td3


@dataclasses.dataclass(frozen=True)
class Algorithm:
    """name: the `--algo` name. label: how tables and figures name it. agent: the agent class (the
    protocol `agents.base.Agent`). config: its settings dataclass (`settings.config_class`).
    fixed: settings the name decides (not overridable: `robust`). defaults: the algorithm's own
    defaults over the settings' declared ones. task_defaults: env name -> per-task defaults
    (RL-Zoo3), including the training budget "steps". family: how an unknown setting is reported
    ("unknown DQN settings ...")."""

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
        return f"{self.label} (ω={get('omega'):g})" if self.has_omega else self.label

    @property
    def has_omega(self) -> bool:
        """Whether the algorithm composes the robust term (a FedR*): its omega is tuned by a table's rule."""
        return bool(self.fixed.get("robust"))


# The agent protocol's methods (`agents.base.Agent`), checked when an algorithm is registered.
AGENT_METHODS = ("init", "act", "env_action", "check_env", "greedy_action", "observe", "learn", "hparams",
                 "loss_names", "loss_descriptions", "CPU_DOTS")


def check_algorithm(algorithm: Algorithm, origin: str) -> None:
    """A ValueError naming `origin` for an agent class without a method of the protocol, or a config
    that is not a settings dataclass."""
    lacking = [method for method in AGENT_METHODS if not hasattr(algorithm.agent, method)]
    if lacking:
        raise ValueError(f"{origin}: algorithm {algorithm.name!r}: its agent class {algorithm.agent.__name__} lacks "
                         f"{', '.join(lacking)} of the agent protocol (fedjax_rl.agents.base.Agent)")
    if not getattr(algorithm.config, "SETTINGS", None) or not hasattr(algorithm.config, "validate"):
        raise ValueError(f"{origin}: algorithm {algorithm.name!r}: its config is not a settings dataclass "
                         "(fedjax_rl.core.settings.config_class)")


REGISTRY = plugins.Registry("algorithm", plugins.ALGORITHMS, Algorithm, "algo", check_algorithm)
ALGORITHMS = REGISTRY.entries  # name -> Algorithm: the registered ones (a plugin once asked for)
register, get, names, known = REGISTRY.register, REGISTRY.get, REGISTRY.names, REGISTRY.known
built_in, load_plugins = REGISTRY.built_in, REGISTRY.load_plugins

for _algorithm in (
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
):
    register(_algorithm, plugins.BUILT_IN)
