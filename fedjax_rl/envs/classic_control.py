"""gymnax classic control with perturbable physics: CartPole-v1, Acrobot-v1, MountainCar-v0.

Each class is the gymnax environment plus `PerturbablePhysics`, so any float field of its params is
a physical parameter addressed by name (`env.set_physics(params, "length", 0.75)`), and derived
fields are recomputed whenever a primary one changes. gymnasium is the reference physics; the
parity tests in `tests/test_envs.py` step both from the same states under perturbed parameters.

Step API (gymnax 1.x, inherited unchanged): `step(key, state, action, params)` returns
`(obs, state, reward, terminated, truncated, info)` with auto-reset; `obs`/`state` are post-reset
when the episode ended and `info["final_observation"]` is the observation before the reset.

Paper parameters and what they touch:

- CartPole: `length` (half the pole length, as in gymnasium) and `masscart`. Derived, not settable:
  `total_mass = masscart + masspole`, `polemass_length = masspole * length`.
- Acrobot: `gravity` and `length`. gymnax and gymnasium hard-code g = 9.8 in the dynamics; here the
  dynamics read `params.gravity` (default 9.8, which reproduces gymnasium exactly). `length` is an
  alias of `link_length_1`, gymnasium's `LINK_LENGTH_1`: the inner link, the only link length that
  enters the equations of motion directly (the outer link's length enters only through its centre
  of mass). The centre of mass of each link is at its middle, so `link_com_pos_1 = link_length_1/2`
  and `link_com_pos_2 = link_length_2/2` are derived; `link_length_2` is perturbable on its own.
  The moment of inertia `link_moi` stays a separate parameter (gymnasium's `LINK_MOI = 1`, not a
  rod's m l^2 / 12), and the goal height `-cos(t1) - cos(t1 + t2) > 1` is kept as in gymnasium.
- MountainCar: `gravity` and `force` (gymnax's field names, the same as gymnasium's attributes).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments.classic_control import acrobot as gx_acrobot
from gymnax.environments.classic_control import cartpole as gx_cartpole
from gymnax.environments.classic_control import mountain_car as gx_mountain_car
from gymnax.environments.classic_control import pendulum as gx_pendulum

from fedjax_rl.envs.base import EnvIdentity, PerturbablePhysics


# --------------------------------------------------------------------------------------------------
# CartPole-v1


CartPoleParams = gx_cartpole.EnvParams
CartPoleState = gx_cartpole.EnvState


class CartPole(EnvIdentity, PerturbablePhysics, gx_cartpole.CartPole):
    """gymnax CartPole-v1 whose `total_mass` and `polemass_length` follow their inputs."""

    derived_fields = ("total_mass", "polemass_length")

    def derive(self, params: CartPoleParams) -> CartPoleParams:
        return params.replace(
            total_mass=params.masscart + params.masspole,
            polemass_length=params.masspole * params.length,
        )


# --------------------------------------------------------------------------------------------------
# Acrobot-v1


@struct.dataclass
class AcrobotParams(gx_acrobot.EnvParams):
    """gymnax's Acrobot params plus the gravitational acceleration the dynamics read."""

    gravity: float = 9.8


AcrobotState = gx_acrobot.EnvState


def acrobot_dsdt(s_augmented: jax.Array, params: AcrobotParams) -> jax.Array:
    """Time derivative of (theta1, theta2, dtheta1, dtheta2, torque); 'book' dynamics, as gymnasium.

    Identical to gymnasium's `AcrobotEnv._dsdt` except that g is `params.gravity`.
    """
    m1, m2 = params.link_mass_1, params.link_mass_2
    l1 = params.link_length_1
    lc1, lc2 = params.link_com_pos_1, params.link_com_pos_2
    i1 = i2 = params.link_moi
    g = params.gravity
    a = s_augmented[-1]
    theta1, theta2, dtheta1, dtheta2 = s_augmented[:-1]
    d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * jnp.cos(theta2)) + i1 + i2
    d2 = m2 * (lc2**2 + l1 * lc2 * jnp.cos(theta2)) + i2
    phi2 = m2 * lc2 * g * jnp.cos(theta1 + theta2 - jnp.pi / 2.0)
    phi1 = (
        -m2 * l1 * lc2 * dtheta2**2 * jnp.sin(theta2)
        - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * jnp.sin(theta2)
        + (m1 * lc1 + m2 * l1) * g * jnp.cos(theta1 - jnp.pi / 2)
        + phi2
    )
    ddtheta2 = (a + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta1**2 * jnp.sin(theta2) - phi2) / (
        m2 * lc2**2 + i2 - d2**2 / d1
    )
    ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
    return jnp.stack([dtheta1, dtheta2, ddtheta1, ddtheta2, jnp.zeros_like(dtheta1)])


def acrobot_rk4(y0: jax.Array, params: AcrobotParams) -> jax.Array:
    """One classical Runge-Kutta step of length `params.dt` (gymnasium integrates over [0, dt])."""
    dt = params.dt
    k1 = acrobot_dsdt(y0, params)
    k2 = acrobot_dsdt(y0 + dt / 2.0 * k1, params)
    k3 = acrobot_dsdt(y0 + dt / 2.0 * k2, params)
    k4 = acrobot_dsdt(y0 + dt * k3, params)
    return y0 + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)


class Acrobot(EnvIdentity, PerturbablePhysics, gx_acrobot.Acrobot):
    """gymnax Acrobot-v1 with `gravity` in its params; "length" is link 1 (see module docstring)."""

    aliases = {"length": "link_length_1"}
    derived_fields = ("link_com_pos_1", "link_com_pos_2")

    @property
    def default_params(self) -> AcrobotParams:
        return AcrobotParams(available_torque=jnp.array([-1.0, 0.0, +1.0]))

    def derive(self, params: AcrobotParams) -> AcrobotParams:
        return params.replace(
            link_com_pos_1=params.link_length_1 / 2.0,
            link_com_pos_2=params.link_length_2 / 2.0,
        )

    def step_env(
        self, key: jax.Array, state: AcrobotState, action, params: AcrobotParams
    ) -> tuple[jax.Array, AcrobotState, jax.Array, jax.Array, dict[Any, Any]]:
        torque = params.available_torque[action]
        torque = torque + jax.random.uniform(
            key, shape=(), minval=-params.torque_noise_max, maxval=params.torque_noise_max
        )
        s_augmented = jnp.stack(
            [state.joint_angle1, state.joint_angle2, state.velocity_1, state.velocity_2, torque]
        )
        ns = acrobot_rk4(s_augmented, params)
        state = AcrobotState(
            joint_angle1=gx_acrobot.wrap(ns[0], -jnp.pi, jnp.pi),
            joint_angle2=gx_acrobot.wrap(ns[1], -jnp.pi, jnp.pi),
            velocity_1=jnp.clip(ns[2], -params.max_vel_1, params.max_vel_1),
            velocity_2=jnp.clip(ns[3], -params.max_vel_2, params.max_vel_2),
            time=jnp.int32(state.time + 1),
        )
        terminated = self.is_terminated(state, params)
        reward = jnp.where(terminated, 0.0, -1.0)
        return (
            jax.lax.stop_gradient(self.get_obs(state)),
            jax.lax.stop_gradient(state),
            reward,
            terminated,
            {"discount": self.discount(state, params)},
        )


# --------------------------------------------------------------------------------------------------
# MountainCar-v0


MountainCarParams = gx_mountain_car.EnvParams
MountainCarState = gx_mountain_car.EnvState


class MountainCar(EnvIdentity, PerturbablePhysics, gx_mountain_car.MountainCar):
    """gymnax MountainCar-v0; `gravity` and `force` are its params fields (nothing is derived)."""


# --------------------------------------------------------------------------------------------------
# Pendulum-v1 (continuous actions: torque in Box(-2, 2), shape (1,))


PendulumParams = gx_pendulum.EnvParams
PendulumState = gx_pendulum.EnvState


class Pendulum(EnvIdentity, PerturbablePhysics, gx_pendulum.Pendulum):
    """gymnax Pendulum-v1 (gymnasium's dynamics); `m` (mass) and `l` (length) are its params
    fields, nothing is derived. Never terminates; truncated after 200 steps."""
