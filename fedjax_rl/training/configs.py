"""A federated run's settings, its config class `TrainConfig`, and resolved configurations.

`TRAIN_SETTINGS` declares the run's settings (the loop's, beside the agents' own) and `TrainConfig`
is their frozen config class: here, away from the compiled loop (`fedjax_rl.training.program`, which names no
algorithm), so the command line builds its flags without importing the loop. A config is validated
once (`TrainConfig.validate` remembers the configs it accepted): every entry point calls it before
anything compiles, and later calls cost nothing.

`train_config(algo, env_name, ...)` is the one place defaults are
resolved, for the Python API and the command line alike (`fedjax-rl train` builds its config with
it): the settings' declared defaults, the algorithm's, the task's (RL-Zoo3, see each agent module's
table and the algorithm's registry entry, `fedjax_rl.agents`), then what the caller gives. `agent_config` does this for
the algorithm's own settings, building its declared config class here (docs/design.md, "How omega reaches
the loss").

Training-loop defaults resolved per task::

  physics            the task's first perturbed parameter (the paper's order, `envs.get`).
  engine             the task's default physics engine: "c" (MuJoCo's C engine) for the MuJoCo
                     tasks; None for the others, which are written in JAX and have no choice.
  steps_per_agent    RL-Zoo3's training budget for the task (n_timesteps).
  eval_every_rounds  20 evaluation points over the run: max(1, num_rounds // 20).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Sequence

import jax

from fedjax_rl import agents, envs
from fedjax_rl.core import agent_axis, aggregation, attacks, perturb, settings
from fedjax_rl.training import machine
from fedjax_rl.core.settings import Setting, at_least, interval, one_of

DEFAULT_ALGO = "fedrdqn"
DEFAULT_ENV = "CartPole-v1"


def agent_config(algo: str, env_name: str, **overrides):
    """The settings of `algo` (its declared config class) for `env_name`: the declared defaults,
    then the algorithm's, then the task's, then `overrides` (which may not change a setting the
    algorithm's name fixes, such as `robust`). Raises a ValueError naming an unknown setting."""
    algorithm = agents.get(algo)
    fields = [s.name for s in algorithm.config.SETTINGS]
    unknown = sorted(set(overrides) - set(fields))
    if unknown:
        raise ValueError(f"unknown {algorithm.family} settings {unknown}; allowed: {sorted(fields)}")
    for name, value in algorithm.fixed.items():
        if name in overrides and overrides[name] != value:
            raise ValueError(f"{name} is fixed to {value} by algo={algo!r}, got {overrides[name]}")
    task = {k: v for k, v in algorithm.task_defaults(env_name).items() if k != "steps"}
    return algorithm.config(**{**algorithm.defaults, **task, **overrides, **algorithm.fixed})


TRAIN_SETTINGS = (
    Setting("algo", DEFAULT_ALGO, lambda v: None if agents.known(v) else f"must be one of {list(agents.names())}",
            kind=str, help="algorithm (fedjax_rl.agents: the built-in ones and installed plugins)"),
    Setting("env_name", DEFAULT_ENV, kind=str,
            help="registered environment (fedjax_rl.envs), brax:<name> for one of Brax's own, or gym:<id> for "
                 "a gymnasium environment stepped on the host"),
    Setting("physics", ("length",), kind="strs", help="physical parameter(s) to perturb, comma-separated"),
    Setting("engine", None, kind=str,
            help="physics engine of a MuJoCo task: c (MuJoCo's C engine, gymnasium's physics exactly; the "
                 "default), mjx (JAX, any device, differentiable) or warp (NVIDIA GPUs); of Brax's "
                 "environments (brax:<name>): Brax's pipeline, generalized (the default) or mjx; the other "
                 "tasks are written in JAX and have no engine setting"),
    Setting("cpu_dots", None, lambda v: None if v is None else one_of(*machine.CPU_DOTS)(v), kind=str,
            help="library for the matrix products on a CPU: eigen or ynnpack (XLA's default); unset: the "
                 "algorithm's, the one measured faster for its networks (benchmarks/README.md). Changes float "
                 "rounding only, like another CPU; not part of a run's identity (a run resumes with either); "
                 "no effect on a GPU or TPU", identity=False),
    Setting("num_agents", perturb.PAPER_NUM_AGENTS, at_least(1), kind=int, label="num_agents (K)",
            help="K, the number of agents", source="(paper)"),
    Setting("sync_every", perturb.PAPER_SYNC_EVERY, at_least(1), kind=int, label="sync_every (E)",
            help="local steps between federated averages", source="(paper)"),
    # A leaf of the loop's settings is data of the program, not its shape: a grid over it is one
    # program (`loop.run(grid={"max_rate": [...]})`; p enters only `program.init`'s draw).
    Setting("max_rate", perturb.PAPER_MAX_RATE, interval(0, 1, high_open=True), leaf=True, kind=float,
            label="max perturbation rate p", help="p: m_k = m (1 + n_k), n_k ~ U(-p, p)", source="(paper)"),
    Setting("steps_per_agent", 50_000, at_least(1), kind=int,
            help="environment steps per agent (configs.train_config resolves RL-Zoo3's budget per task)",
            source="(RL-Zoo3, CartPole-v1)"),
    Setting("eval_every_rounds", 25, at_least(1), kind=int,
            help="rounds between evaluations (configs.train_config resolves 20 points per run)"),
    Setting("eval_episodes", 5, at_least(1), kind=int, help="episodes per evaluation", source="(paper)"),
    Setting("sweep_points", perturb.SWEEP_NUM, at_least(2), kind=int,
            help="scales c in m' = c m for the robustness sweep"),
    Setting("participation", 1.0, interval(0, 1, low_open=True), kind=float,
            help="fraction of agents whose parameters enter each average (ceil(participation x K) drawn "
                 "per round; every agent receives the new model)"),
    aggregation.AGGREGATION,
    aggregation.TRIM,
    aggregation.KRUM_BYZANTINE,
    aggregation.KRUM_KEEP,
    attacks.ATTACKERS,
    attacks.ATTACK,
    attacks.ATTACK_SCALE,
    Setting("num_devices", None, lambda v: None if v is None or v >= 1 else "must be >= 1", kind=int,
            help="shard the agent axis over this many devices"),
    Setting("tensorboard", True, kind=bool, identity=False,
            help="TensorBoard event files in the run directory as it trains, one point per evaluation block "
                 "(`tensorboard --logdir DIR`; the tags: fedjax_rl/training/tensorboard_log.py). They change no number and "
                 "are not part of a run's identity (a run resumes with or without them)"),
    Setting("agent", agent_config(DEFAULT_ALGO, DEFAULT_ENV), kind=None,
            help="the algorithm's settings (its own declarations)"),
)

# Settings that change no number and so are not part of what a run directory records.
NOT_IDENTITY = tuple(s.name for s in TRAIN_SETTINGS if not s.identity)
# The loop's settings a grid may vary inside one program (`configs.grid_configs`): data, not shape.
TRAIN_LEAVES = tuple(s.name for s in TRAIN_SETTINGS if s.leaf)


def identity_fields(fields: dict) -> dict:
    """`fields` (TrainConfig fields by name) without the settings that are not part of a run's
    identity (`Setting.identity`): what config.json and a reproduction's request record."""
    return {name: value for name, value in fields.items() if name not in NOT_IDENTITY}


class _TrainConfigMethods(settings.SettingsConfig):
    """Static description of one federated run (hashable; the agent's numeric hyperparameters are
    also exposed as traced leaves through `agent.hparams()`)."""

    SYNC_EVERY_DEFAULT = perturb.PAPER_SYNC_EVERY

    @property
    def num_rounds(self) -> int:
        return self.steps_per_agent // self.sync_every

    @property
    def num_evals(self) -> int:
        return self.num_rounds // self.eval_every_rounds

    @property
    def algorithm(self) -> agents.Algorithm:
        return agents.get(self.algo)

    @property
    def dots(self) -> str:
        """The CPU matrix-product library this run uses: `cpu_dots`, else the algorithm's."""
        return self.cpu_dots or self.algorithm.agent.CPU_DOTS

    @property
    def compiler_options(self) -> dict:
        """`jax.jit(..., compiler_options=config.compiler_options)`: what `loop.run` compiles
        its programs with (the matrix-product library); give it to a program made from
        `program.make_train(config)` to compute as a run does."""
        return machine.compiler_options(self.dots)

    def validate(self) -> None:
        """Every declared range and the cross-setting checks, once per config (a ValueError naming
        the setting and its allowed range; builds the env, compiles nothing)."""
        try:
            hash(self)
        except TypeError:  # a list among the fields: validate every time, remember nothing
            super().validate()
            return
        _validate_once(self)

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
        agent_axis.check_num_devices(self.num_agents, self.num_devices)
        aggregation.check_aggregation(self.aggregation, self.trim, self.num_agents, self.participation,
                                    self.krum_byzantine, self.krum_keep)
        attacks.check_attackers(self.attackers, self.num_agents)
        if self.num_devices is not None and self.num_devices > jax.device_count():
            raise ValueError(
                f"num_devices={self.num_devices} but only {jax.device_count()} devices are visible "
                f"(on CPU, set XLA_FLAGS=--xla_force_host_platform_device_count={self.num_devices})"
            )
        self.agent.validate()


TrainConfig = settings.config_class("TrainConfig", TRAIN_SETTINGS, base=_TrainConfigMethods,
                                    doc=_TrainConfigMethods.__doc__)


@functools.lru_cache(maxsize=256)
def _validate_once(config: TrainConfig) -> None:
    """`TrainConfig.validate`'s work, remembered for the configs that passed (a config is frozen, so
    once is enough; one that fails raises, and an exception is not cached)."""
    settings.SettingsConfig.validate(config)


PAPER_FEDERATED = dict(batch_size=16, buffer_size=1000)  # the paper's DQN replay settings
EVAL_POINTS = 20  # default number of evaluations over a run


def zoo_steps(env_name: str, algo: str = "fedrdqn") -> int:
    """RL-Zoo3's training budget (environment steps) for `env_name` under `algo`'s family."""
    return agents.get(algo).steps(env_name)


def default_eval_every(steps_per_agent: int, sync_every: int) -> int:
    """Rounds per evaluation block: about EVAL_POINTS evaluations over the run, at least one round."""
    return max(1, (steps_per_agent // max(1, sync_every)) // EVAL_POINTS)


def train_config(algo: str, env_name: str, agent_overrides: dict | None = None, **overrides):
    """A consistent `TrainConfig`: declared, algorithm and task defaults, then `overrides`
    (TrainConfig fields) and `agent_overrides` (the algorithm's settings). Raises a ValueError
    naming a bad or unknown setting; compiles nothing."""
    algorithm = agents.get(algo)
    envs.get(env_name)  # an unknown name raises with the allowed names
    engine = envs.check_engine(env_name, overrides.get("engine"))
    env, params = envs.make(env_name, None, engine)
    algorithm.agent.check_env(env_name, env.action_space(params))
    fields = {s.name for s in TrainConfig.SETTINGS} - {"algo", "env_name", "agent"}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise ValueError(f"unknown settings {unknown}; allowed: {sorted(fields)}")
    agent = agent_config(algo, env_name, **(agent_overrides or {}))
    resolved = dict(overrides)
    if resolved.get("physics") is None:
        resolved["physics"] = envs.get(env_name).perturbed[:1]
    resolved["engine"] = None if envs.get(env_name).engines == ("jax",) else engine
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
    if "attackers" in resolved:  # a fraction of the agents becomes the count the run records
        resolved["attackers"] = attacks.resolve_attackers(resolved["attackers"],
                                                          resolved.get("num_agents", perturb.PAPER_NUM_AGENTS))
    config = TrainConfig(algo=algo, env_name=env_name, agent=agent, **resolved)
    config.validate()
    return config


# The demo's and the learning tests' small-budget CartPole settings: one gradient step per
# environment step from step 500 and a hard target copy every 100 steps learn CartPole within
# 10k steps per agent, where RL-Zoo3's (train_freq 256, learning_starts 1000) needs far more.
# Not the paper's settings (the demo says so in its output).
DEMO_DQN = dict(train_freq=1, gradient_steps=1, learning_starts=500, target_update_interval=100,
                hidden_sizes=(64, 64))


def grid_configs(config: TrainConfig, grid: dict[str, Sequence[float]]) -> list[TrainConfig]:
    """One validated config per point of the Cartesian grid over vmappable agent hyperparameters
    and the loop's vmappable settings (`configs.TRAIN_LEAVES`: the heterogeneity level max_rate),
    e.g. {"max_rate": [0, 0.5], "omega": [0.01, 0.1]}, in that order (the first name varies slowest);
    raises before anything compiles."""
    agent_leaves = set(config.agent.hparams().names())
    for name, values in grid.items():
        if name not in agent_leaves | set(TRAIN_LEAVES):
            raise ValueError(f"grid setting {name!r} is not a vmappable hyperparameter of {config.algo}; "
                             f"allowed: {', '.join(sorted(agent_leaves))}, and the run's {', '.join(TRAIN_LEAVES)}")
        if len(values) < 1:
            raise ValueError(f"grid setting {name!r} needs at least one value")
    points = [dict(zip(grid, values)) for values in itertools.product(*grid.values())]
    configs = [dataclasses.replace(config, agent=dataclasses.replace(config.agent, **{
                   k: v for k, v in p.items() if k not in TRAIN_LEAVES}),
                   **{k: v for k, v in p.items() if k in TRAIN_LEAVES}) for p in points]
    for c in configs:
        c.validate()
    return configs


def check_run_batch(run_batch: int | None) -> None:
    """Refuse a `run_batch` that is neither an integer >= 1 nor None (ValueError naming the setting)."""
    if run_batch is not None and (isinstance(run_batch, bool) or not isinstance(run_batch, int) or run_batch < 1):
        raise ValueError(f"run_batch must be an integer >= 1 (runs vmapped at a time) or None (all at once), "
                         f"got {run_batch!r}")


def parse_run_batch(text: str) -> int | None:
    """The command line's spelling: 'all' (None) or a positive integer."""
    if text.strip().lower() == "all":
        return None
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"--run-batch must be 'all' or an integer >= 1 (runs vmapped at a time), got {text!r}") from None
    check_run_batch(value)
    return value
