"""LunarLander-v3 (discrete) in JAX, with gravity, wind and the lander's physics in `EnvParams`.

What this is
------------
A gymnax environment that reproduces gymnasium's Box2D ``LunarLander-v3`` (discrete actions:
0 noop, 1 left orientation engine, 2 main engine, 3 right orientation engine): the same 8-dim
observation, reward shaping, fuel costs, -100 crash / +100 at rest, out-of-bounds termination,
per-episode random terrain with the flat helipad (same chunk heights and the same 0.33 smoothing,
including Python's wrap-around ``height[-1]`` at the first chunk), the same random initial push,
the same wind/turbulence ``tanh(sin(0.02 i) + sin(0.01 pi i))`` with random start indices, the same
engine impulses with dispersion noise applied at the same (orientation dependent) points, 50 FPS
and the 1000-step limit (gymnax ``max_steps_in_episode``, reported as truncation).

Physics approach (and why not MJX)
----------------------------------
MJX is in our stack, but it is a 3D engine: a planar lander would need planar joints or
constraints on every body, and gymnasium draws a *new* terrain every episode. MJX geometry (a
height field or mesh) lives in the compiled ``mjx.Model``; changing it per episode and per vmapped
agent means batching the model itself, and MJX's soft contacts would not reproduce Box2D's rigid,
iterative solver (the thing that decides when the lander "comes to rest"). So this module contains
a small Box2D-2.3-style 2D solver written directly in ``jax.numpy``, shaped for this one scene:

* Three rigid bodies (lander polygon of density 5, two 4x16 px legs of density 1) with Box2D's own
  mass and inertia formulas, integrated with Box2D's semi-implicit Euler order: apply impulses,
  integrate velocities (gravity + forces), solve velocity constraints, integrate positions (with
  Box2D's max translation/rotation clamps), solve position constraints (non-linear Gauss-Seidel),
  then the island sleep test.
* Two revolute joints (lander origin <-> leg anchor) solved as in ``b2RevoluteJoint``: motor
  (speed +-0.3, max torque ``leg_spring_torque``) then the 3x3 point+limit block with the
  lower/upper clamping logic, warm started across steps; positions by limit then point
  correction. The legs start at gymnasium's violated joint configuration and are pulled into
  place by a position pre-solve at reset, as Box2D's position iterations do in the reset step.
* Contacts: the terrain is the piecewise-linear height field of the episode. Each leg's polygon
  vertices are tested against the terrain segment beneath them, with Box2D's polygon skin
  (2 x 0.01 m): within the skin a contact exists (``ground_contact``), the velocity solver applies
  non-negative normal impulses and Coulomb friction (Box2D's mixed friction sqrt(0.2 * 0.1)),
  warm started while the contact persists, and the position solver removes penetration beyond
  Box2D's slop with Baumgarte 0.2 and max correction 0.2 m. As in Box2D, contacts are found from
  the positions at the *start* of the world step, so the leg-contact flags and the crash flag lag
  the positions by one step exactly like gymnasium's ``ContactListener``.
* The lander body never needs a contact *response*: touching the ground ends the episode with
  ``game_over`` at that step. Its contact is detected with the same skin, both ways (lander
  vertices below the terrain, terrain vertices inside the lander polygon).
* "At rest" is Box2D's island sleep rule: every body below 0.01 m/s and 2 deg/s for 0.5 s and the
  position constraints solved.

Approximations, stated: the two joints are solved in parallel (Jacobi) on the heavy lander rather
than one after the other; the velocity and position iteration counts are constructor arguments
(defaults 12 and 3, with warm starting) rather than gymnasium's 180 and 60; Box2D's
continuous-collision sub-stepping and its two-point block contact solver are not reproduced;
a leg vertex is tested only against the terrain segment under it. The tests in
``tests/test_lunar_lander.py`` measure what these cost: heuristic-controller and random-action
returns against gymnasium's Box2D environment in four physical settings.

Every function uses ``jax.lax``-friendly control flow only, and everything is vmappable over
``EnvParams`` and keys, so each agent can have its own gravity, wind and lander physics.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment, spaces

from fedjax_rl.envs.base import PerturbablePhysics

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
    max_steps_in_episode: int = 1000


@struct.dataclass
class EnvState(environment.EnvState):
    pos: jax.Array  # (3, 2) centres of mass: lander, legs[0], legs[1]
    angle: jax.Array  # (3,)
    vel: jax.Array  # (3, 2)
    angvel: jax.Array  # (3,)
    joint_impulse: jax.Array  # (2, 3) accumulated point (x, y) and limit impulses (warm start)
    motor_impulse: jax.Array  # (2,)
    limit_state: jax.Array  # (2,) int: 0 inactive, 1 at lower, 2 at upper
    contact_impulse: jax.Array  # (2, 2, 2) per leg foot: normal, tangent (warm start)
    leg_contact: jax.Array  # (2,) bool, as gymnasium's legs[i].ground_contact
    game_over: jax.Array  # bool
    sleep_time: jax.Array  # (3,)
    awake: jax.Array  # bool
    terrain_y: jax.Array  # (CHUNKS,) smoothed heights at CHUNK_X
    wind_idx: jax.Array  # int32
    torque_idx: jax.Array  # int32
    prev_shaping: jax.Array
    time: int


# --- small 2D helpers ------------------------------------------------------------------------
def _cross(a, b):
    return a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]


def _cross_sv(s, v):  # scalar x vector
    return jnp.stack([-s * v[..., 1], s * v[..., 0]], -1)


def _rot(angle, v):
    c, s = jnp.cos(angle), jnp.sin(angle)
    return jnp.stack([c * v[..., 0] - s * v[..., 1], s * v[..., 0] + c * v[..., 1]], -1)


def _masses(params):
    m = jnp.stack([params.lander_density * _LANDER_UNIT_MASS] + [params.leg_density * _LEG_UNIT_MASS] * 2)
    i = jnp.stack(
        [params.lander_density * _LANDER_UNIT_INERTIA] + [params.leg_density * _LEG_UNIT_INERTIA] * 2
    )
    return 1.0 / m, 1.0 / i


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


def _leg_vertices(pl, al):
    """(2, 4, 2) world vertices of both legs from their centres of mass and angles."""
    return pl[:, None, :] + _rot(al[:, None], LEG_VERTS[None])


def _leg_feet(pl, al):
    """(2, 2, 2) world positions of the two bottom vertices of each leg (the only leg vertices
    that can reach the ground before the lander body does)."""
    return pl[:, None, :] + _rot(al[:, None], LEG_VERTS[None, :2])


def _lander_touches(terrain_y, p0, a0):
    """Whether the lander polygon is within Box2D's contact skin of the terrain."""
    verts = p0 + _rot(a0, LANDER_VERTS)  # (6, 2)
    p1, n, inside = _terrain_under(terrain_y, verts[:, 0])
    sep = jnp.sum((verts - p1) * n, -1) - CONTACT_SKIN
    vertex_hit = jnp.any(inside & (sep < 0.0))
    # Terrain corners poking into the lander (inflated by the skin).
    corners = jnp.stack([jnp.asarray(CHUNK_X), terrain_y], -1)  # (11, 2)
    edges = jnp.roll(verts, -1, axis=0) - verts
    normals = jnp.stack([edges[:, 1], -edges[:, 0]], -1) / jnp.linalg.norm(edges, axis=-1, keepdims=True)
    dist = jnp.sum((corners[:, None, :] - verts[None]) * normals[None], -1)  # (11, 6) outward
    corner_hit = jnp.any(jnp.max(dist, axis=1) < CONTACT_SKIN)
    return vertex_hit | corner_hit


def _leg_contacts(terrain_y, pl, al):
    """Contact points of the legs' feet, found at the start of the world step (b2World::Collide)."""
    feet = _leg_feet(pl, al)
    p1, n, inside = _terrain_under(terrain_y, feet[..., 0])
    sep = jnp.sum((feet - p1) * n, -1) - CONTACT_SKIN
    active = inside & (sep < 0.0)
    return active, p1, n


# --- the solver --------------------------------------------------------------------------------
def _solve22(a11, a12, a22, b):
    det = a11 * a22 - a12 * a12
    det = jnp.where(det != 0.0, 1.0 / det, 0.0)
    return jnp.stack([det * (a22 * b[..., 0] - a12 * b[..., 1]), det * (a11 * b[..., 1] - a12 * b[..., 0])], -1)


def _solve33(k11, k12, k13, k22, k23, k33, b):
    """b2Mat33::Solve33 (Cramer's rule) for a symmetric matrix, batched over the leading axis."""
    c1 = k22 * k33 - k23 * k23
    c2 = k13 * k23 - k12 * k33
    c3 = k12 * k23 - k13 * k22
    det = k11 * c1 + k12 * c2 + k13 * c3
    det = jnp.where(det != 0.0, 1.0 / det, 0.0)
    b1, b2, b3 = b[..., 0], b[..., 1], b[..., 2]
    x = det * (b1 * c1 + b2 * c2 + b3 * c3)
    y = det * (b1 * c2 + b2 * (k11 * k33 - k13 * k13) + b3 * (k12 * k13 - k11 * k23))
    z = det * (b1 * c3 + b2 * (k13 * k12 - k11 * k23) + b3 * (k11 * k22 - k12 * k12))
    return jnp.stack([x, y, z], -1)


def _joint_mass22(inv_m, inv_i, ra, rb):
    ma, mb, ia, ib = inv_m[0], inv_m[1:], inv_i[0], inv_i[1:]
    k11 = ma + mb + ia * ra[:, 1] ** 2 + ib * rb[:, 1] ** 2
    k12 = -ia * ra[:, 0] * ra[:, 1] - ib * rb[:, 0] * rb[:, 1]
    k22 = ma + mb + ia * ra[:, 0] ** 2 + ib * rb[:, 0] ** 2
    return k11, k12, k22


def _solve_positions(bodies, limit_state, contact_active, contact_p1, contact_n, inv_m, inv_i, iterations):
    """Box2D's position pass: contacts, then joints (limit, then point), `iterations` times."""
    ma, mb, ia, ib = inv_m[0], inv_m[1:], inv_i[0], inv_i[1:]

    def body(_, carry):
        p0, a0, pl, al = carry
        # Contacts (the ground is static, so only the legs move).
        for slot in range(2):
            foot = pl + _rot(al, LEG_VERTS[slot])
            r = foot - pl
            n = contact_n[:, slot]
            sep = jnp.sum((foot - contact_p1[:, slot]) * n, -1) - CONTACT_SKIN
            c = jnp.clip(BAUMGARTE * (sep + LINEAR_SLOP), -MAX_LINEAR_CORRECTION, 0.0)
            rn = _cross(r, n)
            impulse = jnp.where(contact_active[:, slot], -c / (mb + ib * rn * rn), 0.0)
            p = impulse[:, None] * n
            pl = pl + mb[:, None] * p
            al = al + ib * _cross(r, p)
        # Joints: angular limit, then point.
        ja = al - a0
        c_low = jnp.clip(ja - LOWER_ANGLE + ANGULAR_SLOP, -MAX_ANGULAR_CORRECTION, 0.0)
        c_up = jnp.clip(ja - UPPER_ANGLE - ANGULAR_SLOP, 0.0, MAX_ANGULAR_CORRECTION)
        c = jnp.where(limit_state == 1, c_low, jnp.where(limit_state == 2, c_up, 0.0))
        limit_impulse = -c / (ia + ib)
        a0 = a0 - ia * jnp.sum(limit_impulse)
        al = al + ib * limit_impulse
        ra = _rot(a0, ANCHOR_A)
        rb = _rot(al, ANCHOR_B)
        cvec = pl + rb - p0 - ra
        k11, k12, k22 = _joint_mass22(inv_m, inv_i, ra, rb)
        impulse = -_solve22(k11, k12, k22, cvec)
        p0 = p0 - ma * jnp.sum(impulse, 0)
        a0 = a0 - ia * jnp.sum(_cross(ra, impulse))
        pl = pl + mb[:, None] * impulse
        al = al + ib * _cross(rb, impulse)
        return p0, a0, pl, al

    return jax.lax.fori_loop(0, iterations, body, bodies)


def _position_solved(bodies, limit_state, contact_active, contact_p1, contact_n):
    p0, a0, pl, al = bodies
    feet = _leg_feet(pl, al)
    sep = jnp.sum((feet - contact_p1) * contact_n, -1) - CONTACT_SKIN
    contacts_ok = jnp.all(jnp.where(contact_active, sep, 0.0) >= -3.0 * LINEAR_SLOP)
    point_err = jnp.linalg.norm(pl + _rot(al, ANCHOR_B) - p0 - _rot(a0, ANCHOR_A), axis=-1)
    ja = al - a0
    ang_err = jnp.where(limit_state == 1, LOWER_ANGLE - ja, jnp.where(limit_state == 2, ja - UPPER_ANGLE, 0.0))
    return contacts_ok & jnp.all(point_err <= LINEAR_SLOP) & jnp.all(ang_err <= ANGULAR_SLOP)


def _world_step(state: EnvState, params: EnvParams, force, torque, velocity_iterations, position_iterations,
                contacts: bool = True):
    """One b2World::Step(1/FPS) of the lander scene. Returns the new state (contacts refreshed).

    `contacts=False` skips collision (used for the reset step, where the lander is high above
    the terrain)."""
    inv_m, inv_i = _masses(params)
    ma, mb, ia, ib = inv_m[0], inv_m[1:], inv_i[0], inv_i[1:]
    p0, a0, pl, al = state.pos[0], state.angle[0], state.pos[1:], state.angle[1:]
    v0, w0, vl, wl = state.vel[0], state.angvel[0], state.vel[1:], state.angvel[1:]

    # Collide: contacts and listener flags from the positions at the start of the step.
    if contacts:
        contact_active, contact_p1, contact_n = _leg_contacts(state.terrain_y, pl, al)
        leg_contact = jnp.any(contact_active, axis=-1)
        game_over = state.game_over | _lander_touches(state.terrain_y, p0, a0)
    else:
        contact_active = jnp.zeros((2, 2), bool)
        contact_p1 = jnp.zeros((2, 2, 2))
        contact_n = jnp.zeros((2, 2, 2)).at[..., 1].set(1.0)
        leg_contact, game_over = state.leg_contact, state.game_over

    # Integrate velocities.
    g = jnp.stack([jnp.zeros_like(params.gravity), params.gravity]) * DT
    v0 = v0 + g + DT * ma * force
    w0 = w0 + DT * ia * torque
    vl = vl + g

    # Joint set-up (limit state, warm start), as b2RevoluteJoint::InitVelocityConstraints.
    ja = al - a0
    limit_state = jnp.where(ja <= LOWER_ANGLE, 1, jnp.where(ja >= UPPER_ANGLE, 2, 0)).astype(jnp.int32)
    keep_z = (limit_state != 0) & (limit_state == state.limit_state)
    jimp_xy = state.joint_impulse[:, :2]
    jimp_z = jnp.where(keep_z, state.joint_impulse[:, 2], 0.0)
    motor_impulse = state.motor_impulse
    ra = _rot(a0, ANCHOR_A)
    rb = _rot(al, ANCHOR_B)
    k11, k12, k22 = _joint_mass22(inv_m, inv_i, ra, rb)
    k13 = -ra[:, 1] * ia - rb[:, 1] * ib
    k23 = ra[:, 0] * ia + rb[:, 0] * ib
    k33 = ia + ib
    motor_mass = 1.0 / (ia + ib)
    max_motor = DT * params.leg_spring_torque

    # Contact set-up (anchors fixed during the velocity pass, as in b2ContactSolver).
    feet = _leg_feet(pl, al)
    r_c = feet - pl[:, None, :]  # (2, 2, 2)
    tangent = jnp.stack([contact_n[..., 1], -contact_n[..., 0]], -1)
    rn = _cross(r_c, contact_n)
    rt = _cross(r_c, tangent)
    normal_mass = 1.0 / (mb[:, None] + ib[:, None] * rn * rn)
    tangent_mass = 1.0 / (mb[:, None] + ib[:, None] * rt * rt)
    cimp = jnp.where(contact_active[..., None], state.contact_impulse, 0.0)
    cimp_n, cimp_t = cimp[..., 0], cimp[..., 1]

    # Warm start.
    v0 = v0 - ma * jnp.sum(jimp_xy, 0)
    w0 = w0 - ia * jnp.sum(_cross(ra, jimp_xy) + motor_impulse + jimp_z)
    vl = vl + mb[:, None] * jimp_xy
    wl = wl + ib * (_cross(rb, jimp_xy) + motor_impulse + jimp_z)
    p_contact = cimp_n[..., None] * contact_n + cimp_t[..., None] * tangent  # (2, 2, 2)
    vl = vl + mb[:, None] * jnp.sum(p_contact, 1)
    wl = wl + ib * jnp.sum(_cross(r_c, p_contact), 1)

    def velocity_iteration(_, carry):
        v0, w0, vl, wl, jimp_xy, jimp_z, motor_impulse, cimp_n, cimp_t = carry
        # Joint motors.
        cdot = wl - w0 - MOTOR_SPEED
        new_motor = jnp.clip(motor_impulse - motor_mass * cdot, -max_motor, max_motor)
        imp = new_motor - motor_impulse
        motor_impulse = new_motor
        w0 = w0 - ia * jnp.sum(imp)
        wl = wl + ib * imp
        # Joint point + limit (the two joints in parallel on the lander).
        cdot1 = vl + _cross_sv(wl, rb) - v0 - _cross_sv(w0, ra)
        cdot2 = wl - w0
        full = -_solve33(k11, k12, k13, k22, k23, k33, jnp.concatenate([cdot1, cdot2[:, None]], -1))
        newz = jimp_z + full[:, 2]
        clamp = ((limit_state == 1) & (newz < 0.0)) | ((limit_state == 2) & (newz > 0.0))
        rhs = -cdot1 + jimp_z[:, None] * jnp.stack([k13, k23], -1)
        reduced = _solve22(k11, k12, k22, rhs)
        point_only = _solve22(k11, k12, k22, -cdot1)
        imp_xy = jnp.where((limit_state == 0)[:, None], point_only, jnp.where(clamp[:, None], reduced, full[:, :2]))
        imp_z = jnp.where(limit_state == 0, 0.0, jnp.where(clamp, -jimp_z, full[:, 2]))
        jimp_xy = jimp_xy + imp_xy
        jimp_z = jimp_z + imp_z
        v0 = v0 - ma * jnp.sum(imp_xy, 0)
        w0 = w0 - ia * jnp.sum(_cross(ra, imp_xy) + imp_z)
        vl = vl + mb[:, None] * imp_xy
        wl = wl + ib * (_cross(rb, imp_xy) + imp_z)
        if contacts:
            # Friction first, then normal, as b2ContactSolver::SolveVelocityConstraints.
            for slot in range(2):
                r, t = r_c[:, slot], tangent[:, slot]
                vt = jnp.sum((vl + _cross_sv(wl, r)) * t, -1)
                max_f = LEG_FRICTION * cimp_n[:, slot]
                new = jnp.clip(cimp_t[:, slot] - tangent_mass[:, slot] * vt, -max_f, max_f)
                p = (new - cimp_t[:, slot])[:, None] * t
                vl = vl + mb[:, None] * p
                wl = wl + ib * _cross(r, p)
                cimp_t = cimp_t.at[:, slot].set(new)
            for slot in range(2):
                r, n = r_c[:, slot], contact_n[:, slot]
                vn = jnp.sum((vl + _cross_sv(wl, r)) * n, -1)
                new = jnp.maximum(cimp_n[:, slot] - normal_mass[:, slot] * vn, 0.0)
                new = jnp.where(contact_active[:, slot], new, 0.0)
                p = (new - cimp_n[:, slot])[:, None] * n
                vl = vl + mb[:, None] * p
                wl = wl + ib * _cross(r, p)
                cimp_n = cimp_n.at[:, slot].set(new)
        return v0, w0, vl, wl, jimp_xy, jimp_z, motor_impulse, cimp_n, cimp_t

    v0, w0, vl, wl, jimp_xy, jimp_z, motor_impulse, cimp_n, cimp_t = jax.lax.fori_loop(
        0,
        velocity_iterations,
        velocity_iteration,
        (v0, w0, vl, wl, jimp_xy, jimp_z, motor_impulse, cimp_n, cimp_t),
    )

    # Integrate positions, with Box2D's per-step clamps.
    vel = jnp.concatenate([v0[None], vl], 0)
    angvel = jnp.concatenate([w0[None], wl], 0)
    trans = DT * jnp.linalg.norm(vel, axis=-1)
    vel = vel * jnp.where(trans > MAX_TRANSLATION, MAX_TRANSLATION / jnp.maximum(trans, 1e-12), 1.0)[:, None]
    rot = DT * jnp.abs(angvel)
    angvel = angvel * jnp.where(rot > MAX_ROTATION, MAX_ROTATION / jnp.maximum(rot, 1e-12), 1.0)
    bodies = (p0 + DT * vel[0], a0 + DT * angvel[0], pl + DT * vel[1:], al + DT * angvel[1:])

    bodies = _solve_positions(
        bodies, limit_state, contact_active, contact_p1, contact_n, inv_m, inv_i, position_iterations
    )
    solved = _position_solved(bodies, limit_state, contact_active, contact_p1, contact_n)
    p0, a0, pl, al = bodies

    # Island sleep.
    still = (jnp.sum(vel * vel, -1) <= LINEAR_SLEEP_TOL**2) & (angvel * angvel <= ANGULAR_SLEEP_TOL**2)
    sleep_time = jnp.where(still, state.sleep_time + DT, 0.0)
    asleep = (jnp.min(sleep_time) >= TIME_TO_SLEEP) & solved

    return state.replace(
        pos=jnp.concatenate([p0[None], pl], 0),
        angle=jnp.concatenate([a0[None], al], 0),
        vel=vel,
        angvel=angvel,
        joint_impulse=jnp.concatenate([jimp_xy, jimp_z[:, None]], -1),
        motor_impulse=motor_impulse,
        limit_state=limit_state,
        contact_impulse=jnp.stack([cimp_n, cimp_t], -1),
        leg_contact=leg_contact,
        game_over=game_over,
        sleep_time=sleep_time,
        awake=state.awake & ~asleep,
    )


# --- observation and reward (pure functions, shared with the tests) ---------------------------
def observation(state: EnvState) -> jax.Array:
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
class LunarLander(environment.Environment, PerturbablePhysics):
    """gymnasium LunarLander-v3 (discrete) in JAX; see the module docstring."""

    aliases = {"wind": "wind_power"}

    def __init__(
        self,
        enable_wind: bool = False,
        velocity_iterations: int = 12,
        position_iterations: int = 3,
        reset_iterations: int = 4,
    ):
        super().__init__()
        self.reset_iterations = reset_iterations
        self.enable_wind = enable_wind
        self.velocity_iterations = velocity_iterations
        self.position_iterations = position_iterations
        self.obs_shape = (8,)

    def __hash__(self):
        return hash(
            (type(self), self.enable_wind, self.velocity_iterations, self.position_iterations, self.reset_iterations)
        )

    def __eq__(self, other):
        return type(self) is type(other) and hash(self) == hash(other)

    @property
    def default_params(self) -> EnvParams:
        return EnvParams(enable_wind=self.enable_wind)

    @staticmethod
    def wind_params(wind_power: float = 15.0, **kwargs) -> EnvParams:
        """The wind row: gymnasium's `enable_wind=True` with the given wind power."""
        return EnvParams(enable_wind=True, wind_power=wind_power, **kwargs)

    def _step(self, key, state, action, params, extra_force, first=False):
        action = jnp.asarray(action, jnp.int32)
        dispersion = jax.random.uniform(key, (2,), minval=-1.0, maxval=1.0) / SCALE

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
        inv_m, inv_i = _masses(params)
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

        vel0 = state.vel[0] + inv_m[0] * (main_imp + side_imp)
        w0 = state.angvel[0] + inv_i[0] * (
            _cross(main_pos - state.pos[0], main_imp) + _cross(side_pos - state.pos[0], side_imp)
        )
        state = state.replace(vel=state.vel.at[0].set(vel0), angvel=state.angvel.at[0].set(w0))

        if first:  # gymnasium's reset step: high above the terrain, the legs' joints only
            state = _world_step(state, params, force, torque, self.reset_iterations, self.position_iterations, False)
        else:
            state = _world_step(state, params, force, torque, self.velocity_iterations, self.position_iterations)
        obs = observation(state)
        crashed = state.game_over | (jnp.abs(obs[0]) >= 1.0)
        at_rest = ~state.awake
        return state, obs, m_power, s_power, crashed, at_rest

    def step_env(self, key, state, action, params):
        state, obs, m_power, s_power, crashed, at_rest = self._step(key, state, action, params, jnp.zeros(2))
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
        pos, angle = _initial_bodies()
        state = EnvState(
            pos=pos,
            angle=angle,
            vel=jnp.zeros((3, 2)),
            angvel=jnp.zeros(3),
            joint_impulse=jnp.zeros((2, 3)),
            motor_impulse=jnp.zeros(2),
            limit_state=jnp.zeros(2, jnp.int32),
            contact_impulse=jnp.zeros((2, 2, 2)),
            leg_contact=jnp.zeros(2, bool),
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
        state, obs, *_ = self._step(k_step, state, 0, params, force, first=True)
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


def settle_initial_bodies(iterations: int = 60):
    """The bodies as gymnasium creates them (legs beside the lander, joints violated by 0.6 m),
    pulled together by Box2D position iterations, as the reset step's position pass does.
    `INITIAL_POS`/`INITIAL_ANGLE` hold its result (a test checks they agree)."""
    x0, y0 = W / 2, H
    pos = jnp.asarray(
        np.stack([np.array([x0, y0]) + _LANDER_CENTER] + [np.array([x0 - i * LEG_AWAY / SCALE, y0]) for i in LEG_SIGNS]),
        jnp.float32,
    )
    angle = jnp.asarray([0.0, -0.05, 0.05], jnp.float32)
    inv_m, inv_i = _masses(EnvParams())
    ja = angle[1:] - angle[0]
    limit = jnp.where(ja <= LOWER_ANGLE, 1, jnp.where(ja >= UPPER_ANGLE, 2, 0))
    none = jnp.zeros((2, 2), bool)
    zeros = jnp.zeros((2, 2, 2))
    p0, a0, pl, al = _solve_positions(
        (pos[0], angle[0], pos[1:], angle[1:]), limit, none, zeros, zeros, inv_m, inv_i, iterations
    )
    return jnp.concatenate([p0[None], pl]), jnp.concatenate([a0[None], al])


# settle_initial_bodies(), stored so that importing this module compiles nothing.
INITIAL_POS = np.array([[10.0, 13.440772], [10.871059, 13.125689], [9.128941, 13.125689]], np.float32)
INITIAL_ANGLE = np.array([0.0, 0.49215114, -0.49215114], np.float32)


def _initial_bodies():
    return jnp.asarray(INITIAL_POS), jnp.asarray(INITIAL_ANGLE)


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
    env = LunarLander(enable_wind=enable_wind, **kwargs)
    return env, env.default_params
