"""LunarLander-v3 (discrete) in JAX, with gravity, wind and the lander's physics in `EnvParams`: the
task (observation, reward, engines and wind, episodes, gymnasium's heuristic) on the world that
`fedjax_rl.envs.lunar_lander_physics` steps (bodies, terrain contacts, Box2D's solver).

Its design (what it reproduces of gymnasium's environment, the 2D solver in reduced coordinates,
contacts and leg flags event for event, what it approximates, and why not MJX): docs/lunar_lander.md.
Every function uses `jax.lax`-friendly control flow only, and everything is vmappable over
`EnvParams` and keys, so each agent can have its own gravity, wind and lander physics.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from gymnax.environments import environment, spaces

from fedjax_rl.envs.base import EnvIdentity, PerturbablePhysics
from fedjax_rl.envs.lunar_lander_physics import (
    CHUNKS, EnvParams, EnvState, FPS, H, HELIPAD_Y, LEG_DOWN, MAIN_ENGINE_Y_LOCATION, SCALE,
    SIDE_ENGINE_AWAY, SIDE_ENGINE_HEIGHT, W, cross, engine_noise, initial_bodies, lander_origin,
    mass_properties, reset_world_step, world_step)


# --- observation and reward (pure functions, shared with the tests) ---------------------------
def observation(state: EnvState) -> jax.Array:
    """gymnasium's 8-dim observation of a state: position, velocity, angle, angular velocity and the two
    leg-contact flags."""
    origin = lander_origin(state.pos, state.angle)
    v = state.vel[0]
    return jnp.stack(
        [
            (origin[0] - W / 2) / (W / 2),
            (origin[1] - (HELIPAD_Y + LEG_DOWN / SCALE)) / (H / 2),
            v[0] * (W / 2) / FPS,
            v[1] * (H / 2) / FPS,
            state.angle[0],
            20.0 * state.angvel[0] / FPS,
            state.leg_contact[0].astype(jnp.float32),
            state.leg_contact[1].astype(jnp.float32),
        ]
    ).astype(jnp.float32)


def shaping(obs):
    """gymnasium's shaping potential of an observation; a step's reward includes its change."""
    return (
        -100 * jnp.sqrt(obs[0] * obs[0] + obs[1] * obs[1])
        - 100 * jnp.sqrt(obs[2] * obs[2] + obs[3] * obs[3])
        - 100 * jnp.abs(obs[4])
        + 10 * obs[6]
        + 10 * obs[7]
    )


def reward_fn(obs, prev_shaping, m_power, s_power, crashed, at_rest, first_step=False):
    """gymnasium's LunarLander reward for one step. Returns (reward, shaping)."""
    shape = shaping(obs)
    reward = jnp.where(first_step, 0.0, shape - prev_shaping)
    reward = reward - m_power * 0.30 - s_power * 0.03
    reward = jnp.where(crashed, -100.0, reward)
    reward = jnp.where(at_rest, 100.0, reward)
    return reward, shape


# --- the environment -------------------------------------------------------------------------
class LunarLander(EnvIdentity, environment.Environment, PerturbablePhysics):
    """gymnasium LunarLander-v3 (discrete) in JAX; see the module docstring."""

    aliases = {"wind": "wind_power"}

    def __init__(
        self,
        enable_wind: bool = False,
        velocity_iterations: int = 20,
        position_iterations: int = 6,
    ):
        super().__init__()
        self.enable_wind = enable_wind
        self.velocity_iterations = velocity_iterations
        self.position_iterations = position_iterations
        self.obs_shape = (8,)

    def identity(self) -> tuple:
        return (self.enable_wind, self.velocity_iterations, self.position_iterations)

    @property
    def default_params(self) -> EnvParams:
        return EnvParams(enable_wind=self.enable_wind)

    @staticmethod
    def wind_params(wind_power: float = 15.0, **kwargs) -> EnvParams:
        """The wind row: gymnasium's `enable_wind=True` with the given wind power."""
        return EnvParams(enable_wind=True, wind_power=wind_power, **kwargs)

    def _step(self, noise, state, action, params, extra_force, first=False):
        """`noise`: gymnasium's two per-step uniforms in [-1, 1] (engine dispersion)."""
        action = jnp.asarray(action, jnp.int32)
        dispersion = noise / SCALE * params.engine_dispersion

        # Wind and turbulence, only while no leg touches the ground.
        apply_wind = jnp.asarray(params.enable_wind) & ~(state.leg_contact[0] | state.leg_contact[1])

        def wave(idx):
            idx = idx.astype(jnp.float32)
            return jnp.tanh(jnp.sin(0.02 * idx) + jnp.sin(jnp.pi * 0.01 * idx))

        wind = jnp.where(apply_wind, wave(state.wind_idx) * params.wind_power, 0.0)
        torque = jnp.where(apply_wind, wave(state.torque_idx) * params.turbulence_power, 0.0)
        state = state.replace(
            wind_idx=state.wind_idx + apply_wind.astype(jnp.int32),
            torque_idx=state.torque_idx + apply_wind.astype(jnp.int32),
        )
        force = extra_force + jnp.stack([wind, jnp.zeros_like(wind)])

        # Engine impulses, at gymnasium's points.
        m, inertia = mass_properties(params)
        a0 = state.angle[0]
        tip = jnp.stack([jnp.sin(a0), jnp.cos(a0)])
        side = jnp.stack([-tip[1], tip[0]])
        origin = lander_origin(state.pos, state.angle)
        m_power = (action == 2).astype(jnp.float32)
        s_power = ((action == 1) | (action == 3)).astype(jnp.float32)
        direction = (action - 2).astype(jnp.float32)

        main_off = MAIN_ENGINE_Y_LOCATION / SCALE + 2 * dispersion[0]
        main_o = jnp.stack(
            [tip[0] * main_off + side[0] * dispersion[1], -tip[1] * main_off - side[1] * dispersion[1]]
        )
        main_pos = origin + main_o
        main_imp = -main_o * params.main_engine_power * m_power

        side_off = 3 * dispersion[1] + direction * SIDE_ENGINE_AWAY / SCALE
        side_o = jnp.stack(
            [tip[0] * dispersion[0] + side[0] * side_off, -tip[1] * dispersion[0] - side[1] * side_off]
        )
        side_pos = origin + side_o + jnp.stack([-tip[0] * 17 / SCALE, tip[1] * SIDE_ENGINE_HEIGHT / SCALE])
        side_imp = -side_o * params.side_engine_power * s_power

        vel0 = state.vel[0] + (1.0 / m[0]) * (main_imp + side_imp)
        w0 = state.angvel[0] + (1.0 / inertia[0]) * (
            cross(main_pos - state.pos[0], main_imp) + cross(side_pos - state.pos[0], side_imp)
        )
        state = state.replace(vel=state.vel.at[0].set(vel0), angvel=state.angvel.at[0].set(w0))

        if first:  # gymnasium's reset step: high above the terrain
            state = reset_world_step(state, params, force, torque)
        else:
            state = world_step(state, params, force, torque, self.velocity_iterations, self.position_iterations)
        obs = observation(state)
        crashed = state.game_over | (jnp.abs(obs[0]) >= 1.0)
        at_rest = ~state.awake
        return state, obs, m_power, s_power, crashed, at_rest

    def step_env(self, key, state, action, params):
        return self.step_with_noise(engine_noise(key), state, action, params)

    def step_with_noise(self, noise, state, action, params):
        """`step_env` with the engines' dispersion given: `noise` is the pair of uniforms in
        [-1, 1] that gymnasium draws from `np_random` at every step. Lets a test replay one of
        gymnasium's episodes with its own random stream (common random numbers); no auto-reset."""
        state, obs, m_power, s_power, crashed, at_rest = self._step(noise, state, action, params, jnp.zeros(2))
        reward, shape = reward_fn(obs, state.prev_shaping, m_power, s_power, crashed, at_rest)
        state = state.replace(prev_shaping=shape, time=state.time + 1)
        terminated = crashed | at_rest
        return obs, state, reward.astype(jnp.float32), terminated, {"crashed": crashed, "at_rest": at_rest}

    def reset_env(self, key, params):
        k_terrain, k_force, k_wind, k_torque, k_step = jax.random.split(key, 5)
        height = jax.random.uniform(k_terrain, (CHUNKS + 1,), minval=0.0, maxval=H / 2)
        height = height.at[CHUNKS // 2 - 2 : CHUNKS // 2 + 3].set(HELIPAD_Y)
        idx = jnp.arange(CHUNKS)
        terrain_y = 0.33 * (height[idx - 1] + height[idx] + height[idx + 1])  # height[-1] wraps, as in numpy
        force = jax.random.uniform(k_force, (2,), minval=-1.0, maxval=1.0) * params.initial_random
        pos, angle = initial_bodies()
        state = EnvState(
            pos=pos,
            angle=angle,
            vel=jnp.zeros((3, 2)),
            angvel=jnp.zeros(3),
            limit_impulse=jnp.zeros(2),
            motor_impulse=jnp.zeros(2),
            limit_state=jnp.zeros(2, jnp.int32),
            contact_impulse=jnp.zeros((2, 2, 2)),
            leg_contact=jnp.zeros(2, bool),
            edge_touching=jnp.zeros((2, CHUNKS - 1), bool),
            edge_contact_order=jnp.full((2, CHUNKS - 1), -1, jnp.int32),
            game_over=jnp.asarray(False),
            sleep_time=jnp.zeros(3),
            awake=jnp.asarray(True),
            terrain_y=terrain_y,
            wind_idx=jax.random.randint(k_wind, (), -9999, 9999),
            torque_idx=jax.random.randint(k_torque, (), -9999, 9999),
            prev_shaping=jnp.zeros(()),
            time=0,
        )
        # gymnasium's reset ends with step(0), which also applies the initial random force.
        state, obs, *_ = self._step(engine_noise(k_step), state, 0, params, force, first=True)
        return obs, state.replace(prev_shaping=shaping(obs))

    def is_terminated(self, state, params):
        obs = observation(state)
        return state.game_over | (jnp.abs(obs[0]) >= 1.0) | ~state.awake

    @property
    def name(self) -> str:
        return "LunarLander-v3"

    @property
    def num_actions(self) -> int:
        return 4

    def action_space(self, params: EnvParams | None = None) -> spaces.Discrete:
        return spaces.Discrete(4)

    def observation_space(self, params: EnvParams | None = None) -> spaces.Box:
        high = jnp.array([2.5, 2.5, 10.0, 10.0, 2 * jnp.pi, 10.0, 1.0, 1.0], jnp.float32)
        low = -high.at[6:].set(0.0)
        return spaces.Box(low, high, (8,), jnp.float32)


# --- gymnasium's heuristic controller, in JAX ----------------------------------------------------
def heuristic_action(obs: jax.Array) -> jax.Array:
    """gymnasium.envs.box2d.lunar_lander.heuristic for discrete actions; vmappable."""
    s = obs
    angle_targ = jnp.clip(s[0] * 0.5 + s[2] * 1.0, -0.4, 0.4)
    hover_targ = 0.55 * jnp.abs(s[0])
    angle_todo = (angle_targ - s[4]) * 0.5 - s[5] * 1.0
    hover_todo = (hover_targ - s[1]) * 0.5 - s[3] * 0.5
    legs = (s[6] != 0) | (s[7] != 0)
    angle_todo = jnp.where(legs, 0.0, angle_todo)
    hover_todo = jnp.where(legs, -s[3] * 0.5, hover_todo)
    return jnp.where(
        (hover_todo > jnp.abs(angle_todo)) & (hover_todo > 0.05),
        2,
        jnp.where(angle_todo < -0.05, 3, jnp.where(angle_todo > 0.05, 1, 0)),
    ).astype(jnp.int32)


def make_env(enable_wind: bool = False, **kwargs: Any) -> tuple[LunarLander, EnvParams]:
    """A LunarLander (with wind when `enable_wind`) and its default params; `kwargs` go to the constructor."""
    env = LunarLander(enable_wind=enable_wind, **kwargs)
    return env, env.default_params
