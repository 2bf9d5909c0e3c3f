"""What a measurement records about the machine it ran on (the machines are shared and noisy, so the
load average is part of the result), and what a run may ask of this machine: the CPU matrix-product
library, whether a run's training state fits in its memory (`check_memory`), and a disk cache of
compiled programs (`use_compilation_cache`). Used by `fedjax-rl reproduce` rows, `loop.run`, the
command line and benchmarks/."""

from __future__ import annotations

import math
import os
import platform
import subprocess


def cpu_model() -> str:
    """The CPU's model name (lscpu's, else `platform.processor()`)."""
    cpu = platform.processor() or ""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        cpu = next((line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name")), cpu)
    except OSError:
        pass
    return cpu


# The vector extensions that change XLA's CPU code (and so the last bits of a chaotic run).
ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_bf16", "amx_tile")


def cpu_isa() -> list[str]:
    """Which of ISA_FLAGS this CPU exposes (Linux /proc/cpuinfo; empty elsewhere). A VM may hide
    some: the same EPYC model shows AVX-512 on one host and not on another."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return []
    return [name for name in ISA_FLAGS if name in flags]


def describe() -> dict:
    """The machine a run ran on, as recorded with results: CPU, instruction sets, cores, platform, Python,
    JAX, devices, XLA_FLAGS and the load average."""
    import jax

    info = dict(cpu=cpu_model(), cpu_isa=cpu_isa(), cores=usable_cores(), host_cores=os.cpu_count(),
                platform=platform.platform(),
                python=platform.python_version(), jax=jax.__version__, backend=jax.default_backend(),
                devices=[str(d) for d in jax.devices()], xla_flags=os.environ.get("XLA_FLAGS", ""),
                load_average_1_5_15min_at_start=list(os.getloadavg()))
    if jax.default_backend() == "gpu":
        info["gpu"] = [getattr(d, "device_kind", str(d)) for d in jax.devices()]
    return info


def usable_cores() -> int:
    """The cores this process may run on: fewer than the host's when it is pinned (`taskset`, a
    `reproduce --jobs` piece), and those are what its speed was measured on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def machine_cores(machine: dict) -> str:
    """A `describe()` record's cores in words: "2 cores", or "1 of 2 cores" for a pinned run (a record
    without `host_cores` ran on all of the host's `cores`)."""
    cores, host = machine.get("cores", "?"), machine.get("host_cores")
    return f"{cores} of {host} cores" if host not in (None, cores) else f"{cores} cores"


def summary(machine: dict) -> str:
    """A `describe()` record in words: the accelerator first where there was one (the host CPU then
    only feeds it), else the CPU with the widest vector extension XLA could use."""
    cores = f"{machine_cores(machine)}{_widest_isa(machine)}"
    if machine.get("gpu"):
        return f"{' + '.join(machine['gpu'])}, host {machine.get('cpu')} ({cores})"
    return f"{machine.get('cpu')} ({cores}, {machine.get('backend')})"


def summary_kind(text: str) -> str:
    """"gpu" for a `summary` that names an accelerator (it names its host after it), else "cpu"."""
    return "gpu" if ", host " in text else "cpu"


def _widest_isa(machine: dict) -> str:
    """', AVX-512' / ', AVX2' (nothing for a record without `cpu_isa`)."""
    isa = machine.get("cpu_isa") or []
    return ", AVX-512" if "avx512f" in isa else ", AVX2" if "avx2" in isa else ""


# XLA's CPU backend computes a matrix product with one of two libraries: YNNPACK (its default for
# single products in jaxlib 0.10.2, the version we pin) or Eigen. Neither wins everywhere on the
# machines we measured (benchmarks/README.md, "Matrix products on a CPU"), so the library is a
# setting (`cpu_dots`) and each agent declares the one measured faster for its networks
# (`CPU_DOTS`). The choice changes float rounding only, as another CPU's instruction set does.
CPU_DOTS = ("ynnpack", "eigen")


def dots_in_effect(cpu_dots: str | None) -> str | None:
    """The library that computes the products of a program compiled now: `cpu_dots` on a CPU,
    None on other backends, which have no such choice."""
    import jax

    return cpu_dots if jax.default_backend() == "cpu" else None


def compiler_options(cpu_dots: str | None) -> dict:
    """`jax.jit`'s compiler_options that give XLA's CPU matrix products to `cpu_dots`: {} for
    YNNPACK (XLA's default) and off a CPU."""
    if dots_in_effect(cpu_dots) == "eigen":
        return {"xla_cpu_experimental_ynn_fusion_type": ""}  # no YNNPACK fusions: Eigen's dots
    return {}


def available_memory() -> int | None:
    """Bytes of RAM this process can still take: Linux's MemAvailable, capped by the cgroup's
    limit (a container's) when there is one; None where neither can be read."""
    available = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    try:  # cgroup v2
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        with open("/sys/fs/cgroup/memory.current") as f:
            used = int(f.read())
        if limit != "max":
            room = int(limit) - used
            available = room if available is None else min(available, room)
    except (OSError, ValueError):
        pass
    return available


# The training state's copies at the peak of a block, per the state's size (`check_memory`): the
# block's input and output, and with checkpoints one more on the host while it is written.
# Measured peak RSS on CartPole (K = 1000, 1.8 GiB of state): 1.8x the state, 2.7x with checkpoints.
STATE_COPIES, CHECKPOINT_COPIES = 2, 1


class NotEnoughMemory(ValueError):
    """The run's estimated memory exceeds what the machine has available."""


# -- memory --------------------------------------------------------------------------------------


def state_bytes(trainer) -> dict[str, int]:
    """Bytes of one run's training state (all K agents), by part, from its shapes (nothing is
    computed): replay buffers, networks (parameters and target networks), optimizer states, and the
    rest (environment states and physics, keys)."""
    import jax

    shapes = jax.eval_shape(trainer.init, jax.random.key(0))
    parts = {"replay buffers": 0, "networks": 0, "optimizer states": 0, "environments and keys": 0}
    for path, leaf in jax.tree_util.tree_flatten_with_path(shapes)[0]:
        name = jax.tree_util.keystr(path)
        part = ("replay buffers" if ".buffer" in name else "networks" if ".learner.shared" in name
                else "optimizer states" if ".learner.private" in name else "environments and keys")
        parts[part] += math.prod(leaf.shape) * leaf.dtype.itemsize
    return parts


def check_memory(trainer, num_runs: int, checkpoints: bool) -> None:
    """Raise `NotEnoughMemory`, with the numbers, if the training state of `num_runs` runs cannot fit.

    What is counted: the state's arrays (replay buffers, networks, optimizer states, environments) of
    every agent of every run, STATE_COPIES times (a block's input and output) plus CHECKPOINT_COPIES
    with checkpoints (the host copy being written). Not counted: XLA's temporaries inside a block
    (gradients, a batch of transitions: small next to the buffers) and the program itself. Against
    the RAM available (CPU) or the device's free memory (accelerators), per process."""
    import jax

    per_run = state_bytes(trainer)
    state = sum(per_run.values()) * num_runs / jax.process_count()
    device = jax.local_devices()[0]
    stats = device.memory_stats() if device.platform != "cpu" else None
    if stats and "bytes_limit" in stats:
        where, available = f"free memory of {device.device_kind}", stats["bytes_limit"] - stats.get("bytes_in_use", 0)
        needed = STATE_COPIES * state  # the host's checkpoint copy lives in RAM, not on the device
    else:
        where, available = "available RAM", available_memory()
        needed = (STATE_COPIES + CHECKPOINT_COPIES * checkpoints) * state
    if available is None or needed <= available:
        return
    gib = 2**30
    parts = ", ".join(f"{name} {size * num_runs / gib:.2f}" for name, size in per_run.items())
    copies = f"{STATE_COPIES} copies (a block's input and output)" + (
        f" + {CHECKPOINT_COPIES} while a checkpoint is written" if checkpoints and not stats else "")
    config = trainer.config
    raise NotEnoughMemory(
        f"this run needs about {needed / gib:.1f} GiB but only {available / gib:.1f} GiB are available ({where}). "
        f"Counted: the training state of {num_runs} run(s) x {config.num_agents} agents = {state / gib:.2f} GiB "
        f"({parts} GiB), {copies}; XLA's temporaries come on top. Use fewer agents (--agents), seeds (--seeds) "
        f"or a smaller replay buffer (--set buffer_size=N); --run-batch does not lower it (every run's state "
        f"stays in memory).")


# The environment variable that moves the compilation cache (a directory) or turns it off ("off").
CACHE_ENV = "FEDJAX_RL_COMPILATION_CACHE"
# The shortest compile (seconds) whose program is kept; a program that compiles near it is kept by one
# process and not by the next, as the machine's load moves its compile time. Set it (to 0: every
# program) where which programs are kept must not depend on the load.
CACHE_MIN_COMPILE_ENV = "FEDJAX_RL_CACHE_MIN_COMPILE_S"


def check_warp_worlds(config, num_runs: int) -> None:
    """MuJoCo Warp's contact buffers hold a fixed number of worlds (envs.mujoco_engines.WARP_MAX_WORLDS):
    more environments stepped at once would lose contacts. The widest batch of a program is its final
    evaluation's: every run's (environment, episode) pairs in one vmap (`evaluate.returns_over_params`),
    the agents' own environments or the sweep's points, each `eval_episodes` times; training steps
    `num_agents` per run and the curve's evaluations `eval_episodes`, both no wider."""
    if config.engine != "warp":
        return
    from fedjax_rl.envs import mujoco_engines  # the MuJoCo tasks only

    environments = max(config.num_agents, config.sweep_points)
    worlds = num_runs * environments * config.eval_episodes
    if worlds > mujoco_engines.WARP_MAX_WORLDS:
        raise ValueError(
            f"engine 'warp' steps at most {mujoco_engines.WARP_MAX_WORLDS} environments at once (its contact "
            f"buffers), but this run's final evaluation steps {num_runs} runs x max({config.num_agents} agents, "
            f"{config.sweep_points} sweep points) x {config.eval_episodes} episodes = {worlds}; use a smaller "
            f"run_batch, fewer seeds, grid points, sweep points or evaluation episodes, or engine 'c'")


def compilation_cache_dir() -> str | None:
    """Where compiled programs are kept: CACHE_ENV's directory, None where it says "off", else
    fedjax_rl/jax under the user's cache directory ($XDG_CACHE_HOME, or ~/.cache)."""
    value = os.environ.get(CACHE_ENV)
    if value is not None:
        return None if value.strip().lower() in ("off", "0", "false", "") else os.path.expanduser(value)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "fedjax_rl", "jax")


def use_compilation_cache() -> str | None:
    """Keep compiled programs on disk (JAX's persistent compilation cache, in `compilation_cache_dir`),
    so that a second run, a resume or a seed piece of a program already compiled on this machine
    compiles nothing. Call it before the first compilation; returns the directory (None: off).

    What it keeps: one file per compiled program that took a second or more to compile
    (CACHE_MIN_COMPILE_ENV sets another threshold), named by a
    hash of the program, the compiler options, the jax and XLA versions and the device. A program
    that differs in any of these gets its own entry, so a cached entry yields the same executable,
    and the same numbers, as compiling again. An entry that cannot be read (damaged, or from a build
    that cannot load it) is compiled again with a warning: it costs a compile, never a number. To
    clear it, delete the directory; to move it or turn it off, set FEDJAX_RL_COMPILATION_CACHE to a
    directory or to "off"."""
    path = compilation_cache_dir()
    if path is None:
        return None
    import jax

    os.makedirs(path, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(os.environ.get(CACHE_MIN_COMPILE_ENV, 1.0)))
    return path
