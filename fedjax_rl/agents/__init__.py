"""The agents: one module per algorithm family implementing the agent protocol (`agents.base`), and
the algorithm registry (`agents.registry`), re-exported here. An agent module is imported when an
algorithm of its family is first asked for, not by importing this package."""

from fedjax_rl.agents.registry import (  # noqa: F401
    AGENT_METHODS, ALGORITHMS, REGISTRY, Algorithm, built_in, check_algorithm, get, known, load_plugins, names, register)
