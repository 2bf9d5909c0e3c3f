"""The algorithm registry: name -> `Algorithm` (agent class, settings, per-task defaults), and the
check an algorithm passes to be registered.

The command line (`--algo` choices, `--set`), `configs.train_config` (which builds an algorithm's
settings from its entry: `configs.agent_config`), the trainer's validation, and the plots' labels
all read the registry. An algorithm is one agent module (the protocol in `agents/base.py`) and one
`Algorithm`, registered with `register`: the built-in ones below, and a user's from outside the
library, by `register` in their own code or by an entry point in the group `fedjax_rl.algorithms`
(`fedjax_rl.plugins`; docs/own_algorithm.md walks through one), loaded when its name is asked for.
The built-in agents' modules are imported when an algorithm's agent, settings or defaults are first
read, not when the registry is.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Callable

from fedjax_rl import plugins


class _Imported:
    """A dataclass field holding an object or the "module:attribute" path of one, imported when the
    field is first read (and kept)."""

    def __set_name__(self, owner, name):
        self.slot = f"_{name}_value"

    def __get__(self, obj, owner=None):
        if obj is None:
            raise AttributeError("no default")  # the dataclass field is required
        value = obj.__dict__[self.slot]
        if isinstance(value, str):
            module, _, attribute = value.partition(":")
            value = getattr(importlib.import_module(module), attribute)
            obj.__dict__[self.slot] = value
        return value

    def __set__(self, obj, value):
        obj.__dict__[self.slot] = value

    @staticmethod
    def resolved(obj, name: str) -> bool:
        """Whether field `name` of `obj` holds its object already (not a path still to import)."""
        return not isinstance(obj.__dict__[f"_{name}_value"], str)


@dataclasses.dataclass(frozen=True)
class Algorithm:
    """name: the `--algo` name. label: how tables and figures name it. agent: the agent class (the
    protocol `agents.base.Agent`). config: its settings dataclass (`settings.config_class`).
    fixed: settings the name decides (not overridable: `robust`). defaults: the algorithm's own
    defaults over the settings' declared ones. task_defaults: env name -> per-task defaults
    (RL-Zoo3), including the training budget "steps". family: how an unknown setting is reported
    ("unknown DQN settings ...").

    `agent`, `config` and `task_defaults` may be given as "module:attribute" paths, imported when
    first read: the built-in algorithms are, so that a module wanting a label imports no agent."""

    name: str
    label: str
    agent: type = _Imported()
    config: type = _Imported()
    fixed: dict
    defaults: dict
    task_defaults: Callable[[str], dict] = _Imported()
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
    that is not a settings dataclass. An algorithm given by paths is checked when they are imported
    (the built-in ones: tests/test_registry.py)."""
    if not _Imported.resolved(algorithm, "agent") or not _Imported.resolved(algorithm, "config"):
        return
    lacking = [method for method in AGENT_METHODS if not hasattr(algorithm.agent, method)]
    if lacking:
        raise ValueError(f"{origin}: algorithm {algorithm.name!r}: its agent class {algorithm.agent.__name__} lacks "
                         f"{', '.join(lacking)} of the agent protocol (fedjax_rl.agents.base.Agent)")
    if not getattr(algorithm.config, "SETTINGS", None) or not hasattr(algorithm.config, "validate"):
        raise ValueError(f"{origin}: algorithm {algorithm.name!r}: its config is not a settings dataclass "
                         "(fedjax_rl.core.settings.config_class)")


REGISTRY = plugins.Registry("algorithm", plugins.ALGORITHM_GROUP, Algorithm, "algo", check_algorithm)
ALGORITHMS = REGISTRY.entries  # name -> Algorithm: the registered ones (a plugin once asked for)
register, get, names, known = REGISTRY.register, REGISTRY.get, REGISTRY.names, REGISTRY.known
built_in, load_plugins = REGISTRY.built_in, REGISTRY.load_plugins

_AGENTS = "fedjax_rl.agents."  # the built-in agents' package

for _algorithm in (
    Algorithm("fedrdqn", "FedRDQN", f"{_AGENTS}dqn:DQNAgent", f"{_AGENTS}dqn:DQNConfig", fixed=dict(robust=True), defaults={},
              task_defaults=f"{_AGENTS}dqn:task_defaults", family="DQN"),
    Algorithm("dqnavg", "DQNAvg", f"{_AGENTS}dqn:DQNAgent", f"{_AGENTS}dqn:DQNConfig", fixed=dict(robust=False),
              defaults=dict(omega=0.0), task_defaults=f"{_AGENTS}dqn:task_defaults", family="DQN"),
    Algorithm("fedrddpg", "FedRDDPG", f"{_AGENTS}ddpg:DDPGAgent", f"{_AGENTS}ddpg:DDPGConfig", fixed=dict(robust=True),
              defaults=dict(num_critics=1), task_defaults=f"{_AGENTS}ddpg:task_defaults", family="DDPG"),
    Algorithm("ddpgavg1", "DDPGAvg(1)", f"{_AGENTS}ddpg:DDPGAgent", f"{_AGENTS}ddpg:DDPGConfig", fixed=dict(robust=False),
              defaults=dict(omega=0.0, num_critics=1), task_defaults=f"{_AGENTS}ddpg:task_defaults", family="DDPG"),
    Algorithm("ddpgavg2", "DDPGAvg(2)", f"{_AGENTS}ddpg:DDPGAgent", f"{_AGENTS}ddpg:DDPGConfig", fixed=dict(robust=False),
              defaults=dict(omega=0.0, num_critics=2), task_defaults=f"{_AGENTS}ddpg:task_defaults", family="DDPG"),
    Algorithm("fedrtd3", "FedRTD3", f"{_AGENTS}td3:TD3Agent", f"{_AGENTS}td3:TD3Config", fixed=dict(robust=True), defaults={},
              task_defaults=f"{_AGENTS}td3:task_defaults", family="TD3"),
    Algorithm("td3avg", "TD3Avg", f"{_AGENTS}td3:TD3Agent", f"{_AGENTS}td3:TD3Config", fixed=dict(robust=False),
              defaults=dict(omega=0.0), task_defaults=f"{_AGENTS}td3:task_defaults", family="TD3"),
    Algorithm("fedrsac", "FedRSAC", f"{_AGENTS}sac:SACAgent", f"{_AGENTS}sac:SACConfig", fixed=dict(robust=True), defaults={},
              task_defaults=f"{_AGENTS}sac:task_defaults", family="SAC"),
    Algorithm("sacavg", "SACAvg", f"{_AGENTS}sac:SACAgent", f"{_AGENTS}sac:SACConfig", fixed=dict(robust=False),
              defaults=dict(omega=0.0), task_defaults=f"{_AGENTS}sac:task_defaults", family="SAC"),
):
    register(_algorithm, plugins.BUILT_IN)
