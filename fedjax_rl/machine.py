"""What a measurement records about the machine it ran on (the machines are shared and noisy, so the
load average is part of the result). Used by `fedjax-rl reproduce` rows and by benchmarks/."""

from __future__ import annotations

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

    info = dict(cpu=cpu_model(), cpu_isa=cpu_isa(), cores=os.cpu_count(), platform=platform.platform(),
                python=platform.python_version(), jax=jax.__version__, backend=jax.default_backend(),
                devices=[str(d) for d in jax.devices()], xla_flags=os.environ.get("XLA_FLAGS", ""),
                load_average_1_5_15min_at_start=list(os.getloadavg()))
    if jax.default_backend() == "gpu":
        info["gpu"] = [getattr(d, "device_kind", str(d)) for d in jax.devices()]
    return info


def summary(machine: dict) -> str:
    """A `describe()` record in words: the accelerator first where there was one (the host CPU then
    only feeds it), else the CPU with the widest vector extension XLA could use."""
    cores = f"{machine.get('cores')} cores{_widest_isa(machine)}"
    if machine.get("gpu"):
        return f"{' + '.join(machine['gpu'])}, host {machine.get('cpu')} ({cores})"
    return f"{machine.get('cpu')} ({cores}, {machine.get('backend')})"


def _widest_isa(machine: dict) -> str:
    """', AVX-512' / ', AVX2' (records written before `cpu_isa` existed: nothing)."""
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
