"""Each DQN gradient step against its own ceiling: the library's step beside a plain JAX update of
exactly its matrix products, and the plain update grown part by part toward the library's.

On a CPU, evidence is bought in agent-steps, and a gradient step is most of an agent-step. The
ceiling of a step is the plain update of its own networks: the forward and backward passes it needs,
written directly with `jnp` matrix products and `optax.adam`, on a batch that is already there. The
parts the library adds on top are then timed one at a time, each on top of the previous:

  plain        Q's forward and backward, the target network's forward (and for FedRDQN D's forward
               in the target and D's forward and backward in its expectile loss), Adam on each
               trained network; the batch is given (no replay): a new one every step, read from the
               scan's input as a contiguous slice;
  + replay     the batch drawn from a replay buffer of `buffer_size` items per network, as the
               library draws it (uniform indices, a gather);
  + clip       `optax.clip_by_global_norm` before Adam (SB3's max_grad_norm 10);
  + lr leaf    the learning rate a traced hyperparameter (`optax.inject_hyperparams`), as the library
               needs it for a vmappable learning rate;
  library      `DQNAgent.gradient_step` itself (flax modules, flashbax replay, the library's
               optimizer chain, the robust term as a component).

Every case runs B = seeds x agents networks vmapped, N gradient steps in a `lax.scan` per call (the
library trains so: `gradient_steps` in a scan), and is timed in process CPU-seconds, interleaved
case by case over repeats (the machine is shared). FLOPs are the matrix products' (2 m n k each),
counted by hand from the shapes; GFLOP/s divides them by CPU-seconds, and "of plain" is the case's
rate relative to the plain update's.

A ceiling must run every product it is credited with on every step. Given one fixed batch, a plain
DQN step's target forward reads only values the loop never changes (the batch and the target
network, which no gradient step in the scan updates), so XLA hoists it out of the loop and computes
it once per call: 8 of DQNAvg's 11 products per step, 15 of FedRDQN's 18. Each case therefore records
the matrix products its compiled loop body holds (`dots_in_loop`), and the plain update reads a new
batch every step. "plain, one batch" is that hoisted update, kept as a measurement of what the
hoisting was worth.

    python -m benchmarks.kernels.step_ceiling [--networks 25] [--batch 16] [--steps 128] [--repeats 5]
    python -m benchmarks.kernels.step_ceiling --family ddpg [--batch 64]

`--family ddpg` does the same for DDPGAvg(1) and FedRDDPG on Hopper-v4's shapes (11 observations, 3
actions, RL-Zoo3's 400-300 networks, the paper's batch 64): the plain update is the critic's forward
and backward, the target actor's and target critic's forwards, the actor's forward and backward
through the critic (input gradients), Polyak averaging of both targets, and for FedRDDPG D's forward
and backward; the library case is `DDPGAgent.gradient_step`.

Timed by benchmarks/harness.py (`cpu_s`, process CPU-seconds); writes benchmarks/results/kernels/step_ceiling.json
(step_ceiling_ddpg.json for DDPG), a row per algorithm, case and repeat.
"""

from __future__ import annotations

import itertools
import re

import jax
import jax.numpy as jnp
import numpy as np
import optax

from benchmarks import common, harness
from fedjax_rl.agents.base import Transition
from fedjax_rl.training import configs, program

BENCHMARK = "kernels.step_ceiling"

RESULTS = harness.default_out(BENCHMARK)
OBS, ACTIONS, HIDDEN = 4, 2, (256, 256)  # CartPole-v1, RL-Zoo3's network
GAMMA, LR, TAU, OMEGA, MAX_GRAD_NORM = 0.99, 2.3e-3, 0.01, 0.1, 10.0


def mlp_init(key, sizes):
    keys = jax.random.split(key, len(sizes) - 1)
    return [(jax.random.normal(k, (a, b)) / np.sqrt(a), jnp.zeros(b)) for k, a, b in zip(keys, sizes[:-1], sizes[1:])]


def mlp(params, x):
    for w, b in params[:-1]:
        x = jax.nn.relu(x @ w + b)
    w, b = params[-1]
    return x @ w + b


def matmul_flops(robust: bool, batch: int) -> int:
    """The step's matrix products, 2 m n k each: Q's forward (3 layers), its backward (weight
    gradients for 3 layers, input gradients for the 2 hidden ones), the target's forward; FedRDQN
    adds D's forward (shared by its target and its loss) and D's backward."""
    def layers(out):
        sizes = (OBS, *HIDDEN, out)
        return list(zip(sizes[:-1], sizes[1:]))

    def forward(out):
        return sum(2 * batch * a * b for a, b in layers(out))

    def backward(out):
        weights = sum(2 * batch * a * b for a, b in layers(out))
        inputs = sum(2 * batch * a * b for a, b in layers(out)[1:])
        return weights + inputs

    flops = 2 * forward(ACTIONS) + backward(ACTIONS)
    if robust:
        flops += forward(1) + backward(1)
    return flops


def draw(data, key, batch: int, buffer_size: int):
    """A minibatch drawn from the replay items as the library draws it: uniform indices, a gather."""
    idx = jax.random.randint(key, (batch,), 0, buffer_size)
    return jax.tree.map(lambda x: x[idx], data)


def td_target(data, next_value):
    return data.reward + GAMMA * jnp.where(data.terminated, 0.0, next_value)


def robust_target(state, out, data, next_value, opt):
    """The robust term of a plain update: D's expectile step (into `out`) and the target it gives,
    y = r + gamma (1 - omega) V(s') + gamma omega D(s)."""
    bootstrap = jnp.where(data.terminated, 0.0, next_value)

    def d_loss(d):
        pred = mlp(d, data.obs)[:, 0]
        diff = bootstrap - pred
        return jnp.mean(jnp.where(diff >= 0, TAU, 1 - TAU) * diff ** 2), pred

    (_, degree), d_grads = jax.value_and_grad(d_loss, has_aux=True)(state["d"])
    updates, out["d_opt"] = opt.update(d_grads, state["d_opt"], state["d"])
    out["d"] = optax.apply_updates(state["d"], updates)
    return data.reward + GAMMA * (1 - OMEGA) * bootstrap + GAMMA * OMEGA * jax.lax.stop_gradient(degree)


def plain_case(robust: bool, replay: bool, clip: bool, lr_leaf: bool, batch: int, buffer_size: int,
               steps: int | None = None):
    """One network's gradient step as a plain function of (state, key), with the parts asked for.
    Without replay, `steps` batches are generated and step t reads batch t from the scan's input
    (`compiled_case`); `steps` None: one batch, read by every step (XLA then hoists the target's
    forward out of the loop; see the module docstring)."""
    chain = [optax.clip_by_global_norm(MAX_GRAD_NORM)] if clip else []
    if lr_leaf:
        opt = optax.chain(*chain, optax.scale_by_adam(), optax.inject_hyperparams(optax.scale_by_learning_rate)(
            learning_rate=LR))
    else:
        opt = optax.chain(*chain, optax.adam(LR))

    def init(key):
        kq, kd, kb = jax.random.split(key, 3)
        q = mlp_init(kq, (OBS, *HIDDEN, ACTIONS))
        d = mlp_init(kd, (OBS, *HIDDEN, 1))
        rows = buffer_size if replay else batch * (steps or 1)
        ko, ka, kr, kn = jax.random.split(kb, 4)
        data = Transition(obs=jax.random.normal(ko, (rows, OBS)), action=jax.random.randint(ka, (rows,), 0, ACTIONS),
                          reward=jax.random.normal(kr, (rows,)), next_obs=jax.random.normal(kn, (rows, OBS)),
                          terminated=jnp.zeros(rows, bool))
        state = dict(q=q, q_target=q, q_opt=opt.init(q))
        if replay or steps is None:
            state["data"] = data
        else:  # a batch per step, the scan's input
            state[BATCHES] = jax.tree.map(lambda x: x.reshape(steps, batch, *x.shape[1:]), data)
        if robust:
            state.update(d=d, d_opt=opt.init(d))
        return state

    def step(state, key_or_batch):
        if replay:
            data = draw(state["data"], key_or_batch, batch, buffer_size)
        else:
            data = state["data"] if steps is None else key_or_batch[1]
        next_value = jnp.max(mlp(state["q_target"], data.next_obs), axis=-1)
        out = dict(state)
        target = robust_target(state, out, data, next_value, opt) if robust else td_target(data, next_value)

        def q_loss(q):
            taken = jnp.take_along_axis(mlp(q, data.obs), data.action[:, None], axis=-1)[:, 0]
            return jnp.mean((taken - target) ** 2)

        grads = jax.grad(q_loss)(state["q"])
        updates, out["q_opt"] = opt.update(grads, state["q_opt"], state["q"])
        out["q"] = optax.apply_updates(state["q"], updates)
        return out, None

    return init, step


def library_case(algo: str, batch: int, buffer_size: int, env_name: str = "CartPole-v1", physics=("length",),
                 hidden=HIDDEN, obs_dim: int = OBS, action: jax.ShapeDtypeStruct | None = None,
                 overrides: dict | None = None):
    """The library's own gradient step (`agent.gradient_step`) on a full replay buffer of `buffer_size`
    items; `action` is one stored action's shape and dtype (default: a discrete action); `overrides`
    further agent settings (default: DQN's gradient clipping, SB3's max_grad_norm)."""
    action = action or jax.ShapeDtypeStruct((), jnp.int32)
    config = configs.train_config(algo, env_name, physics=physics, agent_overrides=dict(
        batch_size=batch, buffer_size=buffer_size, hidden_sizes=hidden,
        **(dict(max_grad_norm=MAX_GRAD_NORM) if overrides is None else overrides)))
    agent = program.make_setup(config).agent
    hp = config.agent.hparams()

    def init(key):
        state = agent.init(key)
        # A full buffer, so that sampling draws from every slot as in training.
        items = Transition(obs=jnp.ones((buffer_size, obs_dim)), action=jnp.zeros((buffer_size, *action.shape), action.dtype),
                           reward=jnp.ones(buffer_size), next_obs=jnp.ones((buffer_size, obs_dim)),
                           terminated=jnp.zeros(buffer_size, bool))
        state, _ = jax.lax.scan(lambda s, t: (agent.observe(s, t), None), state, items)
        return state

    def step(state, key):
        return agent.gradient_step(state, key, hp)[0], None

    return init, step


BATCHES = "batches"  # a plain case's per-step batches: scanned over, not carried


def _scan_steps(step, state, keys):
    """`step` over the keys, and over the state's per-step batches where it has them."""
    if isinstance(state, dict) and BATCHES in state:
        carried = {name: value for name, value in state.items() if name != BATCHES}
        carried = jax.lax.scan(step, carried, (keys, state[BATCHES]))[0]
        return {**carried, BATCHES: state[BATCHES]}
    return jax.lax.scan(step, state, keys)[0]


def dots_in_loop(compiled_text: str) -> int:
    """Matrix products inside the compiled program's while-loop bodies (and what they call): the
    products that run on every step, not once per call."""
    computations, name = {}, None
    for line in compiled_text.split("\n"):
        header = re.match(r"^(?:ENTRY )?%?([\w.\-]+) .*\{$", line.rstrip())
        if header:
            name = header.group(1)
            computations[name] = []
        elif name is not None:
            computations[name].append(line)
    reached = set()

    def reach(computation):
        if computation in reached or computation not in computations:
            return
        reached.add(computation)
        for line in computations[computation]:
            for group in re.findall(r"(?:calls|to_apply|body|condition|branch_computations)=\{?([%\w.\-, ]+)\}?", line):
                for callee in group.split(","):
                    reach(callee.strip().lstrip("%"))

    for lines in computations.values():
        for line in lines:
            for body in re.findall(r"body=%?([\w.\-]+)", line):
                reach(body)
    return sum(1 for c in reached for line in computations[c] if re.search(r"= \S+ dot\(", line))


def compiled_case(init, step, networks: int, steps: int):
    """The setup of a harness case: compile, run once, return the timed call (each a new key)."""
    keys = jax.random.split(jax.random.key(0), networks)
    state = jax.jit(jax.vmap(init))(keys)

    @jax.jit
    def call(state, key):
        keys = jax.random.split(key, (networks, steps))
        return jax.vmap(lambda s, k: _scan_steps(step, s, k))(state, keys)

    compiled = call.lower(state, jax.random.key(1)).compile()
    dots = dots_in_loop(compiled.as_text())
    box = dict(state=compiled(state, jax.random.key(1)))
    jax.block_until_ready(box["state"])

    counter = itertools.count(2)

    def timed():
        box["state"] = compiled(box["state"], jax.random.key(next(counter)))
        jax.block_until_ready(box["state"])
        return dict(dots_in_loop=dots)

    return timed


DDPG_OBS, DDPG_ACTIONS, DDPG_HIDDEN, DDPG_LR, DDPG_ETA = 11, 3, (400, 300), 1e-3, 0.005  # Hopper-v4


def ddpg_matmul_flops(robust: bool, batch: int) -> int:
    """DDPG's matrix products, 2 m n k each. Forward of a net: its layers. Backward for the weights:
    the same again; for the inputs of its hidden layers: the same less the first layer; through the
    critic for the actor's loss, the input gradient of the first layer too (the action's part)."""
    actor = list(zip((DDPG_OBS, *DDPG_HIDDEN), (*DDPG_HIDDEN, DDPG_ACTIONS)))
    critic = list(zip((DDPG_OBS + DDPG_ACTIONS, *DDPG_HIDDEN), (*DDPG_HIDDEN, 1)))
    degree = list(zip((DDPG_OBS, *DDPG_HIDDEN), (*DDPG_HIDDEN, 1)))

    def fwd(layers):
        return sum(2 * batch * a * b for a, b in layers)

    def bwd_weights(layers):
        return fwd(layers)

    def bwd_inputs(layers, first=False):
        return fwd(layers if first else layers[1:])

    flops = fwd(actor) + fwd(critic)  # target actor and target critic on s'
    flops += fwd(critic) + bwd_weights(critic) + bwd_inputs(critic)  # the critic's update
    flops += fwd(actor) + fwd(critic) + bwd_inputs(critic, first=True) + bwd_weights(actor) + bwd_inputs(actor)
    if robust:
        flops += fwd(degree) + bwd_weights(degree) + bwd_inputs(degree)
    return flops


def ddpg_plain_case(robust: bool, replay: bool, batch: int, buffer_size: int):
    """One agent's DDPG gradient step as a plain function of (state, key): SB3's order (critic and
    D, then the actor against the updated critic, then Polyak targets), Adam, no clipping."""
    opt = optax.adam(DDPG_LR)

    def actor_apply(p, obs):
        return jnp.tanh(mlp(p, obs))

    def critic_apply(p, obs, action):
        return mlp(p, jnp.concatenate([obs, action], axis=-1))[:, 0]

    def init(key):
        ka, kc, kd, kb = jax.random.split(key, 4)
        actor = mlp_init(ka, (DDPG_OBS, *DDPG_HIDDEN, DDPG_ACTIONS))
        critic = mlp_init(kc, (DDPG_OBS + DDPG_ACTIONS, *DDPG_HIDDEN, 1))
        rows = buffer_size if replay else batch
        ko, ku, kr, kn = jax.random.split(kb, 4)
        data = Transition(obs=jax.random.normal(ko, (rows, DDPG_OBS)),
                          action=jax.random.uniform(ku, (rows, DDPG_ACTIONS), minval=-1.0, maxval=1.0),
                          reward=jax.random.normal(kr, (rows,)), next_obs=jax.random.normal(kn, (rows, DDPG_OBS)),
                          terminated=jnp.zeros(rows, bool))
        state = dict(actor=actor, actor_target=actor, critic=critic, critic_target=critic, actor_opt=opt.init(actor),
                     critic_opt=opt.init(critic), data=data)
        if robust:
            d = mlp_init(kd, (DDPG_OBS, *DDPG_HIDDEN, 1))
            state.update(d=d, d_opt=opt.init(d))
        return state

    def step(state, key):
        data = state["data"]
        data = draw(data, key, batch, buffer_size) if replay else data
        next_value = critic_apply(state["critic_target"], data.next_obs, actor_apply(state["actor_target"], data.next_obs))
        out = dict(state)
        target = robust_target(state, out, data, next_value, opt) if robust else td_target(data, next_value)
        grads = jax.grad(lambda c: jnp.mean((critic_apply(c, data.obs, data.action) - target) ** 2))(state["critic"])
        updates, out["critic_opt"] = opt.update(grads, state["critic_opt"], state["critic"])
        out["critic"] = optax.apply_updates(state["critic"], updates)
        grads = jax.grad(lambda a: -jnp.mean(critic_apply(out["critic"], data.obs, actor_apply(a, data.obs))))(
            state["actor"])
        updates, out["actor_opt"] = opt.update(grads, state["actor_opt"], state["actor"])
        out["actor"] = optax.apply_updates(state["actor"], updates)
        out["critic_target"] = optax.incremental_update(out["critic"], state["critic_target"], DDPG_ETA)
        out["actor_target"] = optax.incremental_update(out["actor"], state["actor_target"], DDPG_ETA)
        return out, None

    return init, step


def main() -> None:
    parser = harness.parser(BENCHMARK, __doc__, repeats=5)
    parser.set_defaults(out=None)
    parser.add_argument("--networks", type=int, default=25, help="networks vmapped: seeds x agents (default 25)")
    parser.add_argument("--batch", type=int, default=16, help="minibatch (default 16, the paper's FedRDQN)")
    parser.add_argument("--buffer", type=int, default=1000, help="replay items per network (default 1000)")
    parser.add_argument("--steps", type=int, default=128, help="gradient steps per call, in a scan (default 128)")
    parser.add_argument("--family", choices=("dqn", "ddpg"), default="dqn")
    args = parser.parse_args()
    args.out = args.out or (RESULTS if args.family == "dqn" else RESULTS.replace(".json", "_ddpg.json"))

    info = common.machine()
    rows = []
    algos = (("dqnavg", False), ("fedrdqn", True)) if args.family == "dqn" else (("ddpgavg1", False), ("fedrddpg", True))
    for algo, robust in algos:
        if args.family == "ddpg":
            cases = {"plain": ddpg_plain_case(robust, False, args.batch, args.buffer),
                     "+ replay": ddpg_plain_case(robust, True, args.batch, args.buffer),
                     "library": library_case(algo, args.batch, args.buffer, "Hopper-v4", ("torso",), DDPG_HIDDEN,
                                             DDPG_OBS, jax.ShapeDtypeStruct((DDPG_ACTIONS,), jnp.float32), overrides={})}
        else:
            cases = {
                "plain": plain_case(robust, False, False, False, args.batch, args.buffer, args.steps),
                "plain, one batch": plain_case(robust, False, False, False, args.batch, args.buffer),
                "+ replay": plain_case(robust, True, False, False, args.batch, args.buffer),
                "+ clip": plain_case(robust, True, True, False, args.batch, args.buffer),
                "+ lr leaf": plain_case(robust, True, True, True, args.batch, args.buffer),
                "library": library_case(algo, args.batch, args.buffer),
            }
        timed = harness.measure([harness.Case(name, lambda c=case: compiled_case(*c, args.networks, args.steps),
                                              dict(algo=algo)) for name, case in cases.items()],
                                args.repeats, warmup=0)  # interleaved; each setup ran its case once
        flops = (matmul_flops if args.family == "dqn" else ddpg_matmul_flops)(robust, args.batch) * args.networks * args.steps
        plain = harness.median(timed, "cpu_s", case="plain")
        for row in timed:
            row.update(gflops_per_cpu_s=flops / row["cpu_s"] / 1e9, of_plain=plain / row["cpu_s"],
                       matmul_flops_per_call=flops)
        for name in cases:
            median = harness.median(timed, "cpu_s", case=name)
            dots = next(r["dots_in_loop"] for r in timed if r["case"] == name)
            print(f"{algo:8s} {name:16s} {median * 1e3:8.1f} ms  {flops / median / 1e9:6.1f} GFLOP/s  "
                  f"{plain / median:5.2f} of plain  {dots:3d} products in the loop", flush=True)
        rows += timed
    harness.write(args.out, BENCHMARK, dict(family=args.family, networks=args.networks, batch=args.batch,
                                            buffer=args.buffer, steps_per_call=args.steps, repeats=args.repeats),
                  rows, machine=info)


if __name__ == "__main__":
    main()
