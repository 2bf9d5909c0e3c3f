"""A federated run's settings and its config class, `TrainConfig`: what `configs.train_config`
resolves, the command line builds its flags from, and the compiled loop (`fedjax_rl.train`) reads.

They live here, beside `configs.py` and away from the loop, so that the command line and the
configs read them without importing the loop, and the loop names no algorithm. A config is
validated once (`TrainConfig.validate` remembers the configs it has accepted): every entry point
calls it before anything compiles, and the second call costs nothing.
"""

from __future__ import annotations

import collections

import jax

from fedjax_rl import agents, envs, federated, heterogeneity, settings
from fedjax_rl.settings import Setting, at_least, interval

DEFAULT_ALGO = "fedrdqn"
DEFAULT_ENV = "CartPole-v1"

TRAIN_SETTINGS = (
    Setting("algo", DEFAULT_ALGO, lambda v: None if v in agents.ALGORITHMS else f"must be one of {agents.names()}",
            kind=str, help="algorithm (fedjax_rl.agents.ALGORITHMS)"),
    Setting("env_name", DEFAULT_ENV, kind=str, help="registered environment (fedjax_rl.envs)"),
    Setting("physics", ("length",), kind="strs", help="physical parameter(s) to perturb, comma-separated"),
    Setting("engine", None, kind=str,
            help="physics engine of a MuJoCo task: c (MuJoCo's C engine, gymnasium's physics exactly; the "
                 "default), mjx (JAX, any device, differentiable) or warp (NVIDIA GPUs); the other tasks "
                 "are written in JAX and have no engine setting"),
    Setting("num_agents", heterogeneity.PAPER_NUM_AGENTS, at_least(1), kind=int, label="num_agents (K)",
            help="K, the number of agents", source="(paper)"),
    Setting("sync_every", heterogeneity.PAPER_SYNC_EVERY, at_least(1), kind=int, label="sync_every (E)",
            help="local steps between federated averages", source="(paper)"),
    Setting("max_rate", heterogeneity.PAPER_MAX_RATE, interval(0, 1, high_open=True), kind=float,
            label="max perturbation rate p", help="p: m_k = m (1 + n_k), n_k ~ U(-p, p)", source="(paper)"),
    Setting("steps_per_agent", 50_000, at_least(1), kind=int,
            help="environment steps per agent (configs.train_config resolves RL-Zoo3's budget per task)",
            source="(RL-Zoo3, CartPole-v1)"),
    Setting("eval_every_rounds", 25, at_least(1), kind=int,
            help="rounds between evaluations (configs.train_config resolves 20 points per run)"),
    Setting("eval_episodes", 5, at_least(1), kind=int, help="episodes per evaluation", source="(paper)"),
    Setting("sweep_points", heterogeneity.SWEEP_NUM, at_least(2), kind=int,
            help="scales c in m' = c m for the robustness sweep"),
    Setting("participation", 1.0, interval(0, 1, low_open=True), kind=float,
            help="fraction of agents whose parameters enter each average (ceil(participation x K) drawn "
                 "per round; every agent receives the new model)"),
    federated.AGGREGATION,
    federated.TRIM,
    Setting("num_devices", None, lambda v: None if v is None or v >= 1 else "must be >= 1", kind=int,
            help="shard the agent axis over this many devices"),
    Setting("agent", agents.get(DEFAULT_ALGO).agent_config(DEFAULT_ENV), kind=None,
            help="the algorithm's settings (its own declarations)"),
)

# Configs that passed validation (most recent last, bounded): a config is frozen, so once is enough.
_VALIDATED: collections.OrderedDict = collections.OrderedDict()
_VALIDATED_KEPT = 256


class _TrainConfigMethods(settings.SettingsConfig):
    """Static description of one federated run (hashable; the agent's numeric hyperparameters are
    also exposed as traced leaves through `agent.hparams()`)."""

    SYNC_EVERY_DEFAULT = heterogeneity.PAPER_SYNC_EVERY

    @property
    def num_rounds(self) -> int:
        return self.steps_per_agent // self.sync_every

    @property
    def num_evals(self) -> int:
        return self.num_rounds // self.eval_every_rounds

    @property
    def algorithm(self) -> agents.Algorithm:
        return agents.get(self.algo)

    def validate(self) -> None:
        """Every declared range and the cross-setting checks, once per config (a ValueError naming
        the setting and its allowed range; builds the env, compiles nothing)."""
        try:
            hash(self)
        except TypeError:  # a list among the fields: validate every time, remember nothing
            super().validate()
            return
        if self in _VALIDATED:
            return
        super().validate()
        _VALIDATED[self] = None
        if len(_VALIDATED) > _VALIDATED_KEPT:
            _VALIDATED.popitem(last=False)

    def check_together(self) -> None:
        algorithm = self.algorithm
        if not isinstance(self.agent, algorithm.config):
            raise ValueError(f"algo={self.algo!r} needs agent settings of type {algorithm.config.__name__}, "
                             f"got {type(self.agent).__name__}")
        for name, value in algorithm.fixed.items():
            if getattr(self.agent, name) != value:
                raise ValueError(f"algo={self.algo!r} needs agent.{name}={value}")
        if not self.physics or len(set(self.physics)) != len(self.physics):
            raise ValueError(f"physics must name one or more distinct parameters, got {self.physics}")
        # Checks the engine and every perturbed parameter's name, building the env once.
        env, params = envs.make(self.env_name, self.physics, self.engine)
        algorithm.agent.check_env(self.env_name, env.action_space(params))
        block = self.sync_every * self.eval_every_rounds
        if self.steps_per_agent < block or self.steps_per_agent % block:
            raise ValueError(
                f"steps_per_agent ({self.steps_per_agent}) must be a positive multiple of "
                f"sync_every * eval_every_rounds = {block}; "
                f"nearest valid: {max(block, round(self.steps_per_agent / block) * block)}"
            )
        federated.check_num_devices(self.num_agents, self.num_devices)
        federated.check_aggregation(self.aggregation, self.trim, self.num_agents, self.participation)
        if self.num_devices is not None and self.num_devices > jax.device_count():
            raise ValueError(
                f"num_devices={self.num_devices} but only {jax.device_count()} devices are visible "
                f"(on CPU, set XLA_FLAGS=--xla_force_host_platform_device_count={self.num_devices})"
            )
        self.agent.validate()


TrainConfig = settings.config_class("TrainConfig", TRAIN_SETTINGS, base=_TrainConfigMethods,
                                    doc=_TrainConfigMethods.__doc__)
