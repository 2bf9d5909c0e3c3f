"""GymSlide-v0: the block on ice of examples/own_environment, written as most users' environments are,
as a plain `gymnasium.Env` in Python, and federated through the host bridge with no JAX port
(docs/environments.md, "Any gymnasium environment"). Its state is in `self.state` (what the bridge
reads and writes by default) and its physics, the block's mass, is an attribute. The entry point
`GymSlide-v0` in pyproject.toml names `SPEC`.
"""

from __future__ import annotations

import gymnasium
import numpy as np

from fedjax_rl import envs


class GymSlide(gymnasium.Env):
    """A block on ice pushed left or right toward x = 0; reward -|x|, terminated beyond |x| = 2."""

    def __init__(self):
        self.observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = gymnasium.spaces.Discrete(2)
        self.mass = 1.0
        self.state = np.zeros(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.state = np.array([self.np_random.uniform(-1.0, 1.0), 0.0])
        return self.state.astype(np.float32), {}

    def step(self, action):
        x, v = self.state
        v = v + 0.1 * (1.0 if action == 1 else -1.0) / self.mass
        x = x + 0.1 * v
        self.state = np.array([x, v])
        return self.state.astype(np.float32), -abs(x), bool(abs(x) > 2.0), False, {}


SPEC = envs.gymnasium_spec("GymSlide-v0", GymSlide, perturbed=("mass",), max_steps=20,
                           notes="examples/gymnasium_environment: a block on ice, in plain gymnasium")
