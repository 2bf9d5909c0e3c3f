"""LunarLander-v3's world: the lander's bodies, gymnasium's geometry and Box2D 2.3's constants, the
terrain contacts and the 2D solver in reduced coordinates that steps them (`world_step`, and
`reset_world_step` for the step Box2D takes at reset), ported line by line against Box2D's so that
contacts and leg flags come event for event (docs/lunar_lander.md). The task built on it
(observation, reward, episodes, wind) is `fedjax_rl.envs.lunar_lander`.

Every function uses `jax.lax`-friendly control flow only, and everything is vmappable over
`EnvParams` and keys, so each agent can have its own gravity, wind and lander physics.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment

# --- gymnasium's constants -------------------------------------------------------------------
FPS = 50
SCALE = 30.0
MAIN_ENGINE_POWER = 13.0
SIDE_ENGINE_POWER = 0.6
INITIAL_RANDOM = 1000.0
LANDER_POLY = [(-14, +17), (-17, 0), (-17, -10), (+17, -10), (+17, 0), (+14, +17)]
LEG_AWAY = 20
LEG_DOWN = 18
LEG_W, LEG_H = 2, 8
LEG_SPRING_TORQUE = 40
SIDE_ENGINE_HEIGHT = 14
SIDE_ENGINE_AWAY = 12
MAIN_ENGINE_Y_LOCATION = 4
VIEWPORT_W = 600
VIEWPORT_H = 400
W = VIEWPORT_W / SCALE
H = VIEWPORT_H / SCALE
CHUNKS = 11
HELIPAD_Y = H / 4
CHUNK_X = np.array([W / (CHUNKS - 1) * i for i in range(CHUNKS)], np.float32)

# --- Box2D 2.3 constants (b2Settings.h) ----------------------------------------------------------
DT = 1.0 / FPS
LINEAR_SLOP = 0.005
ANGULAR_SLOP = 2.0 / 180.0 * np.pi
POLYGON_RADIUS = 2.0 * LINEAR_SLOP
CONTACT_SKIN = 2.0 * POLYGON_RADIUS  # edge radius + polygon radius
MAX_LINEAR_CORRECTION = 0.2
MAX_ANGULAR_CORRECTION = 8.0 / 180.0 * np.pi
MAX_TRANSLATION = 2.0
MAX_ROTATION = 0.5 * np.pi
BAUMGARTE = 0.2
# b2TimeOfImpact's target distance between the core shapes: max(slop, total radius - 3 slop).
TOI_TARGET = max(LINEAR_SLOP, CONTACT_SKIN - 3.0 * LINEAR_SLOP)
TIME_TO_SLEEP = 0.5
LINEAR_SLEEP_TOL = 0.01
ANGULAR_SLEEP_TOL = 2.0 / 180.0 * np.pi
LANDER_FRICTION = 0.1
LEG_FRICTION = float(np.sqrt(0.2 * 0.1))  # b2MixFriction(leg default 0.2, terrain 0.1)


def _polygon_mass(vertices: np.ndarray, density: float = 1.0):
    """b2PolygonShape::ComputeMass: (mass, centroid, inertia about the centroid)."""
    s = vertices.mean(axis=0)
    area, center, inertia = 0.0, np.zeros(2), 0.0
    n = len(vertices)
    for i in range(n):
        e1 = vertices[i] - s
        e2 = vertices[(i + 1) % n] - s
        d = e1[0] * e2[1] - e1[1] * e2[0]
        tri = 0.5 * d
        area += tri
        center += tri * (e1 + e2) / 3.0
        intx2 = e1[0] * e1[0] + e2[0] * e1[0] + e2[0] * e2[0]
        inty2 = e1[1] * e1[1] + e2[1] * e1[1] + e2[1] * e2[1]
        inertia += 0.25 / 3.0 * d * (intx2 + inty2)
    mass = density * area
    center = center / area
    # Parallel axis theorem: inertia about the centroid (Box2D's `I - m |c|^2` after ResetMassData).
    inertia_com = density * inertia - mass * (center @ center)
    return mass, center + s, inertia_com


_LANDER_VERTS_BODY = np.array(LANDER_POLY, np.float64) / SCALE
_LANDER_UNIT_MASS, _LANDER_CENTER, _LANDER_UNIT_INERTIA = _polygon_mass(_LANDER_VERTS_BODY)
_LEG_VERTS = np.array(
    [(-LEG_W, -LEG_H), (LEG_W, -LEG_H), (LEG_W, LEG_H), (-LEG_W, LEG_H)], np.float64
) / SCALE
_LEG_UNIT_MASS, _LEG_CENTER, _LEG_UNIT_INERTIA = _polygon_mass(_LEG_VERTS)
# Vertices relative to each body's centre of mass (the solver works on centres of mass).
LANDER_VERTS = jnp.asarray(_LANDER_VERTS_BODY - _LANDER_CENTER, jnp.float32)
LEG_VERTS = jnp.asarray(_LEG_VERTS - _LEG_CENTER, jnp.float32)
LANDER_LOCAL_CENTER = jnp.asarray(_LANDER_CENTER, jnp.float32)
LEG_SIGNS = np.array([-1.0, 1.0], np.float32)  # gymnasium's i for legs[0], legs[1]
# Joint anchors relative to the centres of mass of the lander (A) and of each leg (B).
ANCHOR_A = jnp.asarray(np.tile(-_LANDER_CENTER, (2, 1)), jnp.float32)
ANCHOR_B = jnp.asarray(
    np.stack([LEG_SIGNS * LEG_AWAY / SCALE, np.full(2, LEG_DOWN / SCALE)], -1) - _LEG_CENTER,
    jnp.float32,
)
LOWER_ANGLE = jnp.asarray([0.9 - 0.5, -0.9], jnp.float32)
UPPER_ANGLE = jnp.asarray([0.9, -0.9 + 0.5], jnp.float32)
MOTOR_SPEED = jnp.asarray(0.3 * LEG_SIGNS, jnp.float32)
# pybox2d's joint definition records the bodies' relative angle at creation (leg angle i * 0.05).
REF_ANGLE = jnp.asarray(0.05 * LEG_SIGNS, jnp.float32)


@struct.dataclass
class EnvParams(environment.EnvParams):
    """Physics of one lander. Every float field is a perturbable physical parameter."""

    gravity: float = -10.0
    enable_wind: bool = False
    wind_power: float = 15.0
    turbulence_power: float = 1.5
    main_engine_power: float = MAIN_ENGINE_POWER
    side_engine_power: float = SIDE_ENGINE_POWER
    initial_random: float = INITIAL_RANDOM
    lander_density: float = 5.0
    leg_density: float = 1.0
    leg_spring_torque: float = float(LEG_SPRING_TORQUE)
    #: scale of gymnasium's random engine dispersion (1: as gymnasium; 0: noiseless engines).
    engine_dispersion: float = 1.0
    max_steps_in_episode: int = 1000


@struct.dataclass
class EnvState(environment.EnvState):
    """One lander episode: the three bodies' positions, angles and velocities, the solver's warm starts,
    contacts and their Box2D event order, sleep, the episode's terrain, wind phases and shaping so far."""

    pos: jax.Array  # (3, 2) centres of mass: lander, legs[0], legs[1]
    angle: jax.Array  # (3,)
    vel: jax.Array  # (3, 2)
    angvel: jax.Array  # (3,)
    limit_impulse: jax.Array  # (2,) accumulated joint-limit impulses (warm start)
    motor_impulse: jax.Array  # (2,)
    limit_state: jax.Array  # (2,) int: 0 inactive, 1 at lower, 2 at upper
    contact_impulse: jax.Array  # (2, 2, 2) per leg foot: normal, tangent (warm start)
    leg_contact: jax.Array  # (2,) bool, as gymnasium's legs[i].ground_contact
    edge_touching: jax.Array  # (2, CHUNKS - 1) bool: Box2D's touching flag of each leg-edge contact
    edge_contact_order: jax.Array  # (2, CHUNKS - 1) int32: creation order of each contact, -1 if none
    game_over: jax.Array  # bool
    sleep_time: jax.Array  # (3,)
    awake: jax.Array  # bool
    terrain_y: jax.Array  # (CHUNKS,) smoothed heights at CHUNK_X
    wind_idx: jax.Array  # int32
    torque_idx: jax.Array  # int32
    prev_shaping: jax.Array
    time: int


# Where Box2D's reset step leaves the legs: joint angles +-0.542 (measured over 50 seeds, spread
# 0.002), turning with the lander. See `reset_world_step`.
INITIAL_JOINT_ANGLE = 0.542


# --- small 2D helpers ------------------------------------------------------------------------
def cross(a, b):
    """The 2D cross product a_x b_y - a_y b_x (Box2D's b2Cross of two vectors), over the last axis."""
    return a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]


def _rot(angle, v):
    c, s = jnp.cos(angle), jnp.sin(angle)
    return jnp.stack([c * v[..., 0] - s * v[..., 1], s * v[..., 0] + c * v[..., 1]], -1)


def mass_properties(params):
    """Masses and inertias (about each centre of mass) of the lander and the two legs."""
    m = jnp.stack([params.lander_density * _LANDER_UNIT_MASS] + [params.leg_density * _LEG_UNIT_MASS] * 2)
    i = jnp.stack(
        [params.lander_density * _LANDER_UNIT_INERTIA] + [params.leg_density * _LEG_UNIT_INERTIA] * 2
    )
    return m, i


def lander_origin(pos, angle):
    """gymnasium's `lander.position` (the body origin) from the lander's centre of mass."""
    return pos[0] - _rot(angle[0], LANDER_LOCAL_CENTER)


# --- terrain ---------------------------------------------------------------------------------
def _terrain_under(terrain_y, x):
    """Segment beneath x: its first point, its upward unit normal, and whether x is on the moon."""
    seg = jnp.clip(jnp.floor(x / (W / (CHUNKS - 1))).astype(jnp.int32), 0, CHUNKS - 2)
    x1 = jnp.asarray(CHUNK_X)[seg]
    x2 = jnp.asarray(CHUNK_X)[seg + 1]
    y1, y2 = terrain_y[seg], terrain_y[seg + 1]
    d = jnp.stack([x2 - x1, y2 - y1], -1)
    n = jnp.stack([-d[..., 1], d[..., 0]], -1) / jnp.linalg.norm(d, axis=-1, keepdims=True)
    p1 = jnp.stack([x1, y1], -1)
    inside = (x >= 0.0) & (x <= W)
    return p1, n, inside


def _leg_feet(pl, al):
    """(2, 2, 2) world positions of the two bottom vertices of each leg (the only leg vertices
    that can reach the ground before the lander body does)."""
    return pl[:, None, :] + _rot(al[:, None], LEG_VERTS[None, :2])


def _lander_touches(terrain_y, p0, a0, skin=CONTACT_SKIN):
    """Whether the lander polygon is within `skin` of the terrain (Box2D's contact skin, or
    the time-of-impact target distance)."""
    verts = p0 + _rot(a0, LANDER_VERTS)  # (6, 2)
    p1, n, inside = _terrain_under(terrain_y, verts[:, 0])
    sep = jnp.sum((verts - p1) * n, -1) - skin
    vertex_hit = jnp.any(inside & (sep < 0.0))
    # Terrain corners poking into the lander (inflated by the skin).
    corners = jnp.stack([jnp.asarray(CHUNK_X), terrain_y], -1)  # (11, 2)
    edges = jnp.roll(verts, -1, axis=0) - verts
    normals = jnp.stack([edges[:, 1], -edges[:, 0]], -1) / jnp.linalg.norm(edges, axis=-1, keepdims=True)
    dist = jnp.sum((corners[:, None, :] - verts[None]) * normals[None], -1)  # (11, 6) outward
    corner_hit = jnp.any(jnp.max(dist, axis=1) < skin)
    return vertex_hit | corner_hit


def _leg_contacts(terrain_y, pl, al):
    """Contact candidates for the legs' feet at the start of the world step (b2World::Collide):
    whether each is over the moon, its terrain plane, and its separation beyond the skin
    (negative: touching)."""
    feet = _leg_feet(pl, al)
    p1, n, inside = _terrain_under(terrain_y, feet[..., 0])
    sep = jnp.sum((feet - p1) * n, -1) - CONTACT_SKIN
    return inside, p1, n, sep


_LEG_NORMALS = jnp.asarray([[0.0, -1.0], [1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]], jnp.float32)  # of LEG_VERTS' edges
AABB_MARGIN = 0.1  # b2_aabbExtension: the broad phase's fattening of every shape's box


def _leg_edge_pairs(terrain_y, pl, al):
    """Per leg and terrain edge (each chunk is its own edge fixture in gymnasium): whether Box2D
    would report the contact as touching (b2CollideEdgeAndPolygon's separating-axis test against
    the 0.02 m skin) and whether the broad phase keeps a contact at all (fat boxes overlap)."""
    verts = pl[:, None, :] + _rot(al[:, None], LEG_VERTS[None])  # (2, 4, 2)
    normals = _rot(al[:, None], _LEG_NORMALS[None])  # (2, 4, 2)
    p = jnp.stack([jnp.asarray(CHUNK_X), terrain_y], -1)  # (CHUNKS, 2)
    p1, p2 = p[:-1], p[1:]  # (E, 2)
    d = p2 - p1
    n = jnp.stack([-d[:, 1], d[:, 0]], -1) / jnp.linalg.norm(d, axis=-1, keepdims=True)  # upward
    sep_edge = jnp.min(jnp.einsum("ed,levd->lev", n, verts[:, None] - p1[None, :, None]), -1)  # (2, E)
    sep_p1 = jnp.einsum("lvd,levd->lev", normals, p1[None, :, None] - verts[:, None])
    sep_p2 = jnp.einsum("lvd,levd->lev", normals, p2[None, :, None] - verts[:, None])
    sep_poly = jnp.max(jnp.minimum(sep_p1, sep_p2), -1)  # (2, E)
    touching = jnp.maximum(sep_edge, sep_poly) <= CONTACT_SKIN
    leg_lo, leg_hi = verts.min(1), verts.max(1)  # (2, 2)
    edge_lo, edge_hi = jnp.minimum(p1, p2), jnp.maximum(p1, p2)
    gap = jnp.maximum(edge_lo[None] - leg_hi[:, None], leg_lo[:, None] - edge_hi[None])  # (2, E, 2)
    overlap = jnp.all(gap < 2.0 * (AABB_MARGIN + POLYGON_RADIUS), -1)
    return touching, overlap


def _listener_flags(state, touching, overlap):
    """gymnasium's ContactListener on Box2D's per-edge contacts, at b2World::Collide.

    BeginContact sets `ground_contact`, EndContact clears it, whatever other edge the leg still
    touches; a leg sliding from one terrain chunk to the next therefore usually reads 0 while it
    stands on the ground. Box2D updates contacts newest first (new contacts are prepended to the
    world's list), so the last event, which decides the flag, is the oldest contact's; contacts
    found in the same step are taken in edge order, the lowest edge last (Box2D sorts new pairs by
    proxy id; gymnasium creates the edges in order, though recycled ids can differ).
    Returns the flags, the touching state and the contacts' creation order."""
    edges = CHUNKS - 1
    touching = touching & overlap  # a contact the broad phase destroys reports EndContact
    created = overlap & (state.edge_contact_order < 0)
    order = jnp.where(created, state.time * edges + jnp.arange(edges), state.edge_contact_order)
    begin = touching & ~state.edge_touching
    end = state.edge_touching & ~touching
    event = begin | end
    last = jnp.argmin(jnp.where(event, order, jnp.iinfo(jnp.int32).max), axis=-1)
    flags = jnp.where(jnp.any(event, -1), jnp.take_along_axis(begin, last[:, None], -1)[:, 0], state.leg_contact)
    return flags, touching, jnp.where(overlap, order, -1)


# --- the solver (reduced coordinates) ----------------------------------------------------------
# Generalised coordinates q = (lander x, lander y, lander angle, leg0 angle, leg1 angle) of the
# lander's centre of mass; the legs' centres follow from the (exact) revolute joints.
def _perp(r):
    return jnp.stack([-r[..., 1], r[..., 0]], -1)


def _kinematics(p0, a0, al):
    """Joint anchors relative to the lander's and legs' centres, and the legs' centres."""
    ra = _rot(a0, ANCHOR_A)  # (2, 2)
    rb = _rot(al, ANCHOR_B)  # (2, 2)
    return ra, rb, p0 + ra - rb


def _body_jacobians(ra, rb):
    """(3 bodies, 3 = (vx, vy, w), 5) maps from generalised to body velocities."""
    z = jnp.zeros(2)
    e = jnp.eye(2)
    lander = jnp.eye(3, 5)
    vx = jnp.concatenate([jnp.ones((2, 1)), jnp.zeros((2, 1)), -ra[:, 1:2], rb[:, 1:2] * e], -1)
    vy = jnp.concatenate([jnp.zeros((2, 1)), jnp.ones((2, 1)), ra[:, 0:1], -rb[:, 0:1] * e], -1)
    w = jnp.concatenate([z[:, None], z[:, None], z[:, None], e], -1)
    legs = jnp.stack([vx, vy, w], 1)  # (2, 3, 5)
    return jnp.concatenate([lander[None], legs], 0)


def _point_jacobian(ra, rb, r_point, direction):
    """Rows d . (velocity of a point r_point from leg i's centre), for each leg: (..., 5)."""
    lever = r_point - rb[:, None, :]  # from the joint anchor
    e = jnp.eye(2)[:, None, :]
    return jnp.concatenate(
        [
            direction,
            jnp.sum(direction * _perp(ra)[:, None, :], -1, keepdims=True),
            jnp.sum(direction * _perp(lever), -1, keepdims=True) * e,
        ],
        -1,
    )


class _Contacts(NamedTuple):
    """The legs' feet contacts found at the start of the step: over the moon, the terrain plane
    (a point, the upward normal), and touching (within the contact skin)."""

    active: jax.Array  # (2 legs, 2 feet)
    p1: jax.Array  # (2, 2, 2)
    n: jax.Array  # (2, 2, 2)
    touching: jax.Array  # (2, 2)


class _JointRows(NamedTuple):
    """Each leg's joint row (its angle relative to the lander): motor and one-sided limit."""

    rows: jax.Array  # (2, 5)
    w: jax.Array  # rows @ inverse generalised mass
    eff: jax.Array  # effective masses
    limit_state: jax.Array  # 0 free, 1 at the lower limit, 2 at the upper
    max_motor: jax.Array  # the motor's impulse bound this step


class _FootRows(NamedTuple):
    """Each foot's normal and friction rows (2 legs, 2 feet, 5)."""

    normal: jax.Array
    normal_w: jax.Array
    normal_eff: jax.Array
    tangent: jax.Array
    tangent_w: jax.Array
    tangent_eff: jax.Array


class _SweptFeet(NamedTuple):
    """Where the step's motion alone takes the legs' feet (Box2D's TOI sweep): the legs' centres,
    the feet, the terrain normals under them, the feet's heights over it, and which reach the
    time-of-impact distance."""

    legs: jax.Array
    feet: jax.Array
    normal: jax.Array
    core: jax.Array
    toi: jax.Array


def world_step(state: EnvState, params: EnvParams, force, torque, velocity_iterations, position_iterations):
    """One b2World::Step(1/FPS) of the lander scene, in Box2D's order: collide, the island's velocity
    and position solves, the sleep test, then the time-of-impact sub-step. Returns the new state
    (contacts refreshed)."""
    m, inertia = mass_properties(params)
    p0, a0, al = state.pos[0], state.angle[0], state.angle[1:]
    ra, rb, pl = _kinematics(p0, a0, al)
    contacts, game_over, (leg_contact, edge_touching, edge_order) = _collide(state, p0, a0, al, pl)
    inv_mass, u = _free_velocity(state, params, m, inertia, ra, rb, force, torque)
    joints, u, motor_impulse, limit_impulse = _joint_rows(state, params, inv_mass, a0, al, u)
    feet, u, cimp_n, cimp_t = _foot_rows(state, ra, rb, pl, al, contacts, inv_mass, u)
    u, motor_impulse, limit_impulse, cimp_n, cimp_t = _solve_velocities(
        u, motor_impulse, limit_impulse, cimp_n, cimp_t, joints, feet, contacts, velocity_iterations)
    u, q_swept = _integrate_positions(u, p0, a0, al)
    q = _solve_positions(q_swept, joints, feet, contacts, position_iterations)
    p0, a0, al, pl, vel, angvel = _bodies(q, u)
    solved = _position_solved(joints, contacts, a0, al, pl)
    swept, leg_contact, edge_touching, game_over = _time_of_impact(state, q_swept, leg_contact, edge_touching,
                                                                   game_over)
    sleep_time, asleep = _island_sleep(state, vel, angvel, solved)
    vel, angvel = _toi_leg_impacts(vel, angvel, m, inertia, swept.feet - swept.legs[:, None], swept.normal,
                                   swept.core, swept.toi)

    return state.replace(
        pos=jnp.concatenate([p0[None], pl], 0),
        angle=jnp.concatenate([a0[None], al]),
        vel=vel,
        angvel=angvel,
        limit_impulse=limit_impulse,
        motor_impulse=motor_impulse,
        limit_state=joints.limit_state,
        contact_impulse=jnp.stack([cimp_n, cimp_t], -1),
        leg_contact=leg_contact,
        edge_touching=edge_touching,
        edge_contact_order=edge_order,
        game_over=game_over,
        sleep_time=sleep_time,
        awake=state.awake & ~asleep,
    )


def _collide(state: EnvState, p0, a0, al, pl):
    """b2World::Collide: the feet's contacts, whether the lander touches the ground, and the
    listener's leg flags, from the positions at the start of the step."""
    contact_active, contact_p1, contact_n, contact_sep = _leg_contacts(state.terrain_y, pl, al)
    touching = contact_active & (contact_sep < 0.0)
    game_over = state.game_over | _lander_touches(state.terrain_y, p0, a0)
    flags = _listener_flags(state, *_leg_edge_pairs(state.terrain_y, pl, al))
    return _Contacts(contact_active, contact_p1, contact_n, touching), game_over, flags


def _free_velocity(state: EnvState, params: EnvParams, m, inertia, ra, rb, force, torque):
    """The inverse generalised mass, and the generalised velocity before the constraints: the
    momentum-preserving projection of the body velocities (which carry this step's engine impulses
    on the lander) onto the joints, then gravity on every body, wind and the initial push on the
    lander."""
    jac = _body_jacobians(ra, rb)  # (3, 3, 5)
    diag = jnp.stack([m, m, inertia], -1)  # (3, 3)
    mass = jnp.einsum("bki,bk,bkj->ij", jac, diag, jac)
    inv_mass = jnp.linalg.inv(mass)
    body_vel = jnp.concatenate([state.vel, state.angvel[:, None]], -1)  # (3, 3)
    u = inv_mass @ jnp.einsum("bki,bk,bk->i", jac, diag, body_vel)

    gravity = jnp.stack([jnp.zeros_like(params.gravity), params.gravity])
    body_force = jnp.concatenate([m[:, None] * gravity, jnp.zeros((3, 1))], -1)
    body_force = body_force.at[0].add(jnp.concatenate([force, torque[None]]))
    u = u + DT * inv_mass @ jnp.einsum("bki,bk->i", jac, body_force)
    return inv_mass, u


def _joint_rows(state: EnvState, params: EnvParams, inv_mass, a0, al, u):
    """The joints' motor and limit rows, and `u` warm-started with the impulses they carry over
    from the last step (a limit's only while it stays at the same limit)."""
    joint_rows = jnp.concatenate([jnp.zeros((2, 2)), -jnp.ones((2, 1)), jnp.eye(2)], -1)  # (2, 5)
    joint_w = joint_rows @ inv_mass
    joint_eff = 1.0 / jnp.sum(joint_rows * joint_w, -1)
    ja = al - a0 - REF_ANGLE
    limit_state = jnp.where(ja <= LOWER_ANGLE, 1, jnp.where(ja >= UPPER_ANGLE, 2, 0)).astype(jnp.int32)
    limit_impulse = jnp.where((limit_state != 0) & (limit_state == state.limit_state), state.limit_impulse, 0.0)
    motor_impulse = state.motor_impulse
    max_motor = DT * params.leg_spring_torque
    u = u + joint_w.T @ (motor_impulse + limit_impulse)
    return _JointRows(joint_rows, joint_w, joint_eff, limit_state, max_motor), u, motor_impulse, limit_impulse


def _foot_rows(state: EnvState, ra, rb, pl, al, contacts: _Contacts, inv_mass, u):
    """The feet's normal and friction rows, and `u` warm-started with the impulses of the feet that
    still touch."""
    feet = _leg_feet(pl, al)  # (2, 2, 2)
    tangent = jnp.stack([contacts.n[..., 1], -contacts.n[..., 0]], -1)
    normal_rows = _point_jacobian(ra, rb, feet - pl[:, None, :], contacts.n)  # (2, 2, 5)
    tangent_rows = _point_jacobian(ra, rb, feet - pl[:, None, :], tangent)
    normal_w = normal_rows @ inv_mass
    tangent_w = tangent_rows @ inv_mass
    normal_eff = 1.0 / jnp.sum(normal_rows * normal_w, -1)
    tangent_eff = 1.0 / jnp.sum(tangent_rows * tangent_w, -1)
    cimp = jnp.where(contacts.touching[..., None], state.contact_impulse, 0.0)
    cimp_n, cimp_t = cimp[..., 0], cimp[..., 1]
    u = u + jnp.einsum("lsi,ls->i", normal_w, cimp_n) + jnp.einsum("lsi,ls->i", tangent_w, cimp_t)
    rows = _FootRows(normal_rows, normal_w, normal_eff, tangent_rows, tangent_w, tangent_eff)
    return rows, u, cimp_n, cimp_t


def _solve_velocities(u, motor_impulse, limit_impulse, cimp_n, cimp_t, joints: _JointRows, feet: _FootRows,
                      contacts: _Contacts, iterations):
    """Box2D's sequential impulses: per iteration the motors, the limits, then the feet's friction
    and normal rows, as b2ContactSolver orders them. Returns `u` and the impulses."""
    joint_rows, joint_w, joint_eff, limit_state, max_motor = joints
    normal_rows, normal_w, normal_eff, tangent_rows, tangent_w, tangent_eff = feet
    touching = contacts.touching

    def velocity_iteration(_, carry):
        u, motor_impulse, limit_impulse, cimp_n, cimp_t = carry
        for i in range(2):  # motors
            cdot = joint_rows[i] @ u - MOTOR_SPEED[i]
            new = jnp.clip(motor_impulse[i] - joint_eff[i] * cdot, -max_motor, max_motor)
            u = u + joint_w[i] * (new - motor_impulse[i])
            motor_impulse = motor_impulse.at[i].set(new)
        for i in range(2):  # limits
            new = limit_impulse[i] - joint_eff[i] * (joint_rows[i] @ u)
            new = jnp.where(limit_state[i] == 1, jnp.maximum(new, 0.0), jnp.where(limit_state[i] == 2, jnp.minimum(new, 0.0), 0.0))
            u = u + joint_w[i] * (new - limit_impulse[i])
            limit_impulse = limit_impulse.at[i].set(new)
        for i in range(2):  # friction first, then normal, as b2ContactSolver
            for s in range(2):
                bound = LEG_FRICTION * cimp_n[i, s]
                new = jnp.clip(cimp_t[i, s] - tangent_eff[i, s] * (tangent_rows[i, s] @ u), -bound, bound)
                u = u + tangent_w[i, s] * (new - cimp_t[i, s])
                cimp_t = cimp_t.at[i, s].set(new)
        for i in range(2):
            for s in range(2):
                vn = normal_rows[i, s] @ u
                new = jnp.where(touching[i, s], jnp.maximum(cimp_n[i, s] - normal_eff[i, s] * vn, 0.0), 0.0)
                u = u + normal_w[i, s] * (new - cimp_n[i, s])
                cimp_n = cimp_n.at[i, s].set(new)
        return u, motor_impulse, limit_impulse, cimp_n, cimp_t

    return jax.lax.fori_loop(0, iterations, velocity_iteration, (u, motor_impulse, limit_impulse, cimp_n, cimp_t))


def _integrate_positions(u, p0, a0, al):
    """`u` with Box2D's per-step clamps on the lander's translation and rotation, and the
    coordinates it takes the bodies to (what Box2D's TOI sweep sees)."""
    trans = DT * jnp.linalg.norm(u[:2])
    u = u.at[:2].multiply(jnp.where(trans > MAX_TRANSLATION, MAX_TRANSLATION / jnp.maximum(trans, 1e-12), 1.0))
    rot = DT * jnp.abs(u[2:])
    u = u.at[2:].multiply(jnp.where(rot > MAX_ROTATION, MAX_ROTATION / jnp.maximum(rot, 1e-12), 1.0))
    return u, jnp.concatenate([p0, a0[None], al]) + DT * u


def _solve_positions(q, joints: _JointRows, feet: _FootRows, contacts: _Contacts, iterations):
    """The position pass (non-linear Gauss-Seidel): feet out of the ground, legs into their limits."""
    def position_iteration(_, q):
        for i in range(2):
            for s in range(2):
                foot = _foot(q, i, s)
                sep = jnp.sum((foot - contacts.p1[i, s]) * contacts.n[i, s]) - CONTACT_SKIN
                c = jnp.clip(BAUMGARTE * (sep + LINEAR_SLOP), -MAX_LINEAR_CORRECTION, 0.0)
                q = q + feet.normal_w[i, s] * jnp.where(contacts.active[i, s], -c * feet.normal_eff[i, s], 0.0)
        for i in range(2):
            ja = q[3 + i] - q[2] - REF_ANGLE[i]
            c_low = jnp.clip(ja - LOWER_ANGLE[i] + ANGULAR_SLOP, -MAX_ANGULAR_CORRECTION, 0.0)
            c_up = jnp.clip(ja - UPPER_ANGLE[i] - ANGULAR_SLOP, 0.0, MAX_ANGULAR_CORRECTION)
            c = jnp.where(joints.limit_state[i] == 1, c_low, jnp.where(joints.limit_state[i] == 2, c_up, 0.0))
            q = q + joints.w[i] * (-c * joints.eff[i])
        return q

    return jax.lax.fori_loop(0, iterations, position_iteration, q)


def _bodies(q, u):
    """The lander's and legs' positions, angles and velocities at generalised coordinates `q` and
    velocity `u`."""
    p0, a0, al = q[:2], q[2], q[3:]
    ra, rb, pl = _kinematics(p0, a0, al)
    vel = jnp.concatenate([u[None, :2], u[:2] + u[2] * _perp(ra) - u[3:, None] * _perp(rb)], 0)
    angvel = jnp.concatenate([u[2:3], u[3:]])
    return p0, a0, al, pl, vel, angvel


def _position_solved(joints: _JointRows, contacts: _Contacts, a0, al, pl):
    """Whether the position constraints are solved (Box2D's test before an island may sleep)."""
    ja = al - a0 - REF_ANGLE
    ang_err = jnp.where(joints.limit_state == 1, LOWER_ANGLE - ja,
                        jnp.where(joints.limit_state == 2, ja - UPPER_ANGLE, 0.0))
    solved = jnp.all(ang_err <= ANGULAR_SLOP)
    feet = _leg_feet(pl, al)
    sep = jnp.sum((feet - contacts.p1) * contacts.n, -1) - CONTACT_SKIN
    return solved & jnp.all(jnp.where(contacts.active, sep, 0.0) >= -3.0 * LINEAR_SLOP)


def _time_of_impact(state: EnvState, q_swept, leg_contact, edge_touching, game_over):
    """Continuous collision (b2World::SolveTOI): a foot or the lander whose swept motion reaches the
    time-of-impact distance touches within this step and calls BeginContact. Returns the swept
    feet, and the leg flags, touching edges and `game_over` with those contacts."""
    _, _, swept_pl = _kinematics(q_swept[:2], q_swept[2], q_swept[3:])
    end_feet = _leg_feet(swept_pl, q_swept[3:])
    end_p1, end_n, end_inside = _terrain_under(state.terrain_y, end_feet[..., 0])
    end_core = jnp.sum((end_feet - end_p1) * end_n, -1)
    end_edge = jnp.clip(jnp.floor(end_feet[..., 0] / (W / (CHUNKS - 1))).astype(jnp.int32), 0, CHUNKS - 2)
    toi = end_inside & (end_core < TOI_TARGET)  # (2 legs, 2 feet)
    toi_edges = jnp.any(toi[..., None] & (end_edge[..., None] == jnp.arange(CHUNKS - 1)), axis=1)  # (2, E)
    # A TOI event on a contact that is not yet touching calls BeginContact.
    leg_contact = leg_contact | jnp.any(toi_edges & ~edge_touching, -1)
    edge_touching = edge_touching | toi_edges
    game_over = game_over | _lander_touches(state.terrain_y, q_swept[:2], q_swept[2], TOI_TARGET)
    return _SweptFeet(swept_pl, end_feet, end_n, end_core, toi), leg_contact, edge_touching, game_over


def _island_sleep(state: EnvState, vel, angvel, solved):
    """Box2D's island sleep, decided in the island solve (before the TOI sub-steps): every body still
    for TIME_TO_SLEEP with the positions solved. Returns the bodies' still time and whether the
    island sleeps."""
    still = (jnp.sum(vel * vel, -1) <= LINEAR_SLEEP_TOL**2) & (angvel * angvel <= ANGULAR_SLEEP_TOL**2)
    sleep_time = jnp.where(still, state.sleep_time + DT, 0.0)
    return sleep_time, (jnp.min(sleep_time) >= TIME_TO_SLEEP) & solved


def _toi_leg_impacts(vel, angvel, m, inertia, lever, normal, core, toi, iterations=8):
    """Box2D's TOI sub-step for a leg whose foot reaches the time-of-impact distance: the leg
    alone (its joint is not part of the TOI island) meets the ground, so the contact stops its
    foot with the leg's own mass, and the leg tumbles. The lander keeps its velocity; the joint
    passes the leg's changed momentum on in the next step (the momentum projection at its start),
    as Box2D's joint solver does. Points: the foot that triggered, and the other one if it is
    within the contact skin too."""
    hit = jnp.any(toi, -1)  # (2,)
    points = hit[:, None] & (toi | (core < CONTACT_SKIN))  # (2, 2)
    tangent = jnp.stack([normal[..., 1], -normal[..., 0]], -1)
    v, w = vel[1:], angvel[1:]
    rn, rt = cross(lever, normal), cross(lever, tangent)  # (2, 2)
    eff_n = 1.0 / (1.0 / m[1:, None] + rn * rn / inertia[1:, None])
    eff_t = 1.0 / (1.0 / m[1:, None] + rt * rt / inertia[1:, None])

    def iteration(_, carry):
        v, w, pn, pt = carry
        for s in range(2):
            vp = v + w[:, None] * _perp(lever[:, s])
            new_t = jnp.clip(pt[:, s] - eff_t[:, s] * jnp.sum(vp * tangent[:, s], -1), -LEG_FRICTION * pn[:, s], LEG_FRICTION * pn[:, s])
            dt_ = jnp.where(points[:, s], new_t - pt[:, s], 0.0)
            v = v + dt_[:, None] * tangent[:, s] / m[1:, None]
            w = w + dt_ * rt[:, s] / inertia[1:]
            pt = pt.at[:, s].add(dt_)
            vp = v + w[:, None] * _perp(lever[:, s])
            new_n = jnp.maximum(pn[:, s] - eff_n[:, s] * jnp.sum(vp * normal[:, s], -1), 0.0)
            dn = jnp.where(points[:, s], new_n - pn[:, s], 0.0)
            v = v + dn[:, None] * normal[:, s] / m[1:, None]
            w = w + dn * rn[:, s] / inertia[1:]
            pn = pn.at[:, s].add(dn)
        return v, w, pn, pt

    v, w, _, _ = jax.lax.fori_loop(0, iterations, iteration, (v, w, jnp.zeros((2, 2)), jnp.zeros((2, 2))))
    return vel.at[1:].set(v), angvel.at[1:].set(w)


def reset_world_step(state: EnvState, params: EnvParams, force, torque):
    """gymnasium's reset step (`step(0)` with the random push), in closed form.

    gymnasium creates each leg beside the lander, level with it, at its reference angle, so every
    joint starts 0.6 m apart and 0.4 rad past its limit. In that step Box2D's velocity solve sees
    the legs rigidly locked to the lander (limits and motors hold the relative angles; the point
    constraints act at the creation angles), and its position pass then pulls the legs onto their
    joints with equal and opposite corrections, which leaves the system's centre of mass where the
    step's motion took it. Both are reproduced here: gymnasium's post-reset state is affine in the
    push with slope -4.579e-4 rad/s per N for the spin (this model: -4.5788e-4) and the lander
    lifted 6.1 mm by its legs (this model: 6.0 mm); the joints end at +-INITIAL_JOINT_ANGLE."""
    m, inertia = mass_properties(params)
    p0 = state.pos[0]  # the lander's centre of mass, angle 0
    total = jnp.sum(m)
    # Velocity solve: one rigid body, legs where their joints hold at the creation angles.
    _, _, locked_legs = _kinematics(p0, jnp.zeros(()), REF_ANGLE)
    bodies = jnp.concatenate([p0[None], locked_legs])
    com = jnp.sum(m[:, None] * bodies, 0) / total
    r = bodies - com
    system_inertia = jnp.sum(inertia + m * jnp.sum(r * r, -1))
    gravity = jnp.stack([jnp.zeros_like(params.gravity), params.gravity])
    v_com = DT * (force / total + gravity)
    w = DT * (cross(r[0], force) + torque) / system_inertia
    vel = v_com + w * _perp(r)
    # Position pass: the legs, created at (x -+ LEG_AWAY, y), end on their joints; the centre of
    # mass of the integrated creation pose is kept.
    origin = p0 - LANDER_LOCAL_CENTER
    created_legs = origin + jnp.stack([-LEG_SIGNS * LEG_AWAY / SCALE, jnp.zeros(2)], -1) + _rot(REF_ANGLE, jnp.asarray(_LEG_CENTER, jnp.float32))
    moved = jnp.concatenate([p0[None], created_legs]) + DT * vel
    a0 = DT * w
    al = a0 + REF_ANGLE + INITIAL_JOINT_ANGLE * jnp.asarray(-LEG_SIGNS)
    _, _, legs_from_lander = _kinematics(jnp.zeros(2), a0, al)
    lander = jnp.sum(m[:, None] * moved, 0) / total - jnp.sum(m[1:, None] * legs_from_lander, 0) / total
    return state.replace(
        pos=jnp.concatenate([lander[None], lander + legs_from_lander]),
        angle=jnp.concatenate([a0[None], al]),
        vel=vel,
        angvel=jnp.full(3, w),
        limit_impulse=jnp.zeros(2),
        motor_impulse=jnp.zeros(2),
        limit_state=jnp.zeros(2, jnp.int32),
    )


def _foot(q, leg, slot):
    ra = _rot(q[2], ANCHOR_A[leg])
    rb = _rot(q[3 + leg], ANCHOR_B[leg])
    pl = q[:2] + ra - rb
    return pl + _rot(q[3 + leg], LEG_VERTS[slot])


def engine_noise(key):
    """The two uniforms in [-1, 1] behind one step's engine dispersion."""
    return jax.random.uniform(key, (2,), minval=-1.0, maxval=1.0)


def initial_bodies(joint_angle: float = INITIAL_JOINT_ANGLE):
    """Lander at gymnasium's start (top centre), legs hanging from their joints at `joint_angle`."""
    x0, y0 = W / 2, H
    p0 = jnp.asarray(np.array([x0, y0]) + _LANDER_CENTER, jnp.float32)
    al = jnp.asarray(REF_ANGLE + jnp.asarray([joint_angle, -joint_angle]))
    _, _, pl = _kinematics(p0, jnp.zeros(()), al)
    return jnp.concatenate([p0[None], pl]), jnp.concatenate([jnp.zeros(1), al])
