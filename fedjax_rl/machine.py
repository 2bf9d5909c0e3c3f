"""What a measurement records about the machine it ran on (the machines are shared and noisy, so the
load average is part of the result). Used by `fedjax-rl reproduce` rows and by benchmarks/."""

from __future__ import annotations

import os
import platform
import subprocess


def cpu_model() -> str:
    cpu = platform.processor() or ""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        cpu = next((line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name")), cpu)
    except OSError:
        pass
    return cpu


def describe() -> dict:
    import jax

    info = dict(cpu=cpu_model(), cores=os.cpu_count(), platform=platform.platform(),
                python=platform.python_version(), jax=jax.__version__, backend=jax.default_backend(),
                devices=[str(d) for d in jax.devices()], xla_flags=os.environ.get("XLA_FLAGS", ""),
                load_average_1_5_15min_at_start=list(os.getloadavg()))
    if jax.default_backend() == "gpu":
        info["gpu"] = [getattr(d, "device_kind", str(d)) for d in jax.devices()]
    return info
