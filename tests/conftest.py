"""Shared test set-up. Four fake CPU devices let the sharding tests run on any machine; the flag
must be set before jax is first imported, which is why it lives here."""

import os

os.environ.setdefault("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in os.environ["XLA_FLAGS"]:
    os.environ["XLA_FLAGS"] += " --xla_force_host_platform_device_count=4"

import jax  # noqa: E402

# Compiled programs are cached on disk so repeated local runs skip most compilation.
jax.config.update("jax_compilation_cache_dir", os.path.join(os.path.dirname(__file__), "..", ".jax_cache"))
jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
