"""Shared test set-up. Four fake CPU devices let the sharding tests run on any machine; the flag
must be set before jax is first imported, which is why it lives here."""

import json
import os
import sys
from importlib.metadata import version

# The flags as the user set them: pytest-xdist's workers inherit the controller's environment, where this
# file has already added its own, so each worker reads the user's from here.
os.environ.setdefault("FEDJAX_RL_TESTS_USER_XLA_FLAGS", os.environ.get("XLA_FLAGS", ""))
_flags = os.environ["FEDJAX_RL_TESTS_USER_XLA_FLAGS"]
os.environ["XLA_FLAGS"] = _flags
if "xla_force_host_platform_device_count" not in _flags:
    os.environ["XLA_FLAGS"] += " --xla_force_host_platform_device_count=4"
# Most of the suite's time is XLA compiling small programs that then run for seconds. Two code-generation
# settings cut that: LLVM at -O1 instead of XLA's default -O3, and XLA's elemental emitters for CPU fusions
# instead of its newer fusion emitters. The cold suite (fresh clone, no compilation cache, 2-core AMD EPYC)
# took 40 min with neither, 27 with -O1 and 22.5 with both. The learning tests' programs run a little
# slower and compile faster, and pass with their margins; the tests of exact numbers (losses, one env step,
# the golden runs recorded by revision 1's code) pass unchanged: these settings change how XLA emits code,
# not the arithmetic it is asked for, as an instruction set does. The claims that two different programs
# agree bit for bit (omega = 0 against the plain algorithm, the mean rule against pmean) rest on code
# generation: at -O0 FedRTD3's omega = 0 step parts from TD3Avg's in the last bit. Those tests compile at
# users' settings (`references.users_codegen`). Name either flag in XLA_FLAGS to choose it yourself for
# every program. The emitters flag is added only for the jaxlib releases the suite was measured on.
_users_codegen = {}
if "xla_backend_optimization_level" not in _flags:
    os.environ["XLA_FLAGS"] += " --xla_backend_optimization_level=1"
    _users_codegen["xla_backend_optimization_level"] = 3
if "xla_cpu_use_fusion_emitters" not in _flags and tuple(map(int, version("jaxlib").split(".")[:2])) >= (0, 10):
    os.environ["XLA_FLAGS"] += " --xla_cpu_use_fusion_emitters=false"
    _users_codegen["xla_cpu_use_fusion_emitters"] = True
os.environ["FEDJAX_RL_TESTS_USERS_CODEGEN"] = json.dumps(_users_codegen)

import jax  # noqa: E402
import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

# Property tests (test_properties.py): few derandomized examples in CI, so its runs are
# reproducible and short; many under `make mutation`, which sets HYPOTHESIS_PROFILE=mutation.
settings.register_profile("ci", max_examples=15, deadline=None, derandomize=True, database=None)
settings.register_profile("mutation", max_examples=100, deadline=None, derandomize=True, database=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# Compiled programs are cached on disk so repeated local runs skip most compilation; the command lines
# the tests run, in this process or as their own, keep theirs in the same place
# (`machine.use_compilation_cache`), not in the user's cache directory.
JAX_CACHE = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".jax_cache"))
os.environ.setdefault("FEDJAX_RL_COMPILATION_CACHE", JAX_CACHE)
jax.config.update("jax_compilation_cache_dir", os.environ["FEDJAX_RL_COMPILATION_CACHE"])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)

# Longest modules first. `make test` runs xdist with `--dist loadfile --no-loadscope-reorder`, which
# hands modules out in collection order; xdist's default order (most tests first) left the few long
# tests (multiprocess, learning, LunarLander parity) for the tail, with one worker idle meanwhile.
LONGEST_FIRST = ("test_td3_sac.py", "test_learning.py", "test_lunar_lander.py", "test_multiprocess.py",
                 "test_mujoco_envs.py", "test_ddpg.py", "test_dqn.py", "test_reproducibility.py", "test_reproduce.py",
                 "test_executor.py", "test_cli.py")


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONGEST_FIRST)))  # stable: module order kept


@pytest.fixture
def example_algorithm():
    """examples/own_algorithm's FedRDQN-min, registered from user code for the test's length."""
    from fedjax_rl import agents

    example = os.path.join(os.path.dirname(__file__), "..", "examples", "own_algorithm")
    sys.path.insert(0, example)
    try:
        import fedrdqn_min

        yield agents.register(fedrdqn_min.ALGORITHM)
    finally:
        sys.path.remove(example)
        agents.REGISTRY.entries.pop("fedrdqn_min", None)
        agents.REGISTRY.origins.pop("fedrdqn_min", None)
