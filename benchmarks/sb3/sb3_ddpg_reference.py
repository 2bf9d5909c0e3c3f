"""Reference implementation of the federated DDPG (or SAC) loop with Stable-Baselines3 and gymnasium's MuJoCo.

The baseline of `benchmarks.throughput.ddpg_throughput`: K independent SB3 ``DDPG`` agents, each in its own gymnasium
``Hopper-v4`` (MuJoCo C) whose torso mass is ``nominal * (1 + n_k)``, ``n_k ~ U(-p, p)`` (the
paper's perturbation, `fedjax_rl.core.perturb`). Every ``sync_every`` environment steps the server
averages actor, actor target, critic and critic target over the agents and loads the mean back
into every agent (optimizers and replay buffers stay private): DDPGAvg(1), the same work per
agent-step as fedjax_rl's ``ddpgavg1`` (FedRDDPG adds an expectile network; SB3 has none).

``--algo sac``: K SB3 ``SAC`` agents instead, SB3's SAC defaults (RL-Zoo3's MuJoCo block keeps them:
lr 3e-4, gamma 0.99, tau 0.005, ent_coef 'auto', train_freq 1, gradient_steps 1) with the paper's
batch 64 and replay 1e5 and the ``--net-arch`` of the JAX side; the server averages actor, critic,
critic target and log(alpha), as fedjax_rl's ``sacavg`` does: the same work per agent-step as
``sacavg`` (FedRSAC adds an expectile network).

Settings: RL-Zoo3's MuJoCo DDPG (lr 1e-3, [400, 300], normal action noise 0.1, train_freq 1,
gradient_steps 1, tau 0.005, gamma 0.99) with the paper's batch 64 and replay 1e5, and a small
``learning_starts`` so that the timed rounds all train (one env step + one gradient update per
agent-step, like the JAX side). The loop, its timing and its rates are `sb3_reference.federated_seeds`,
shared with the DQN reference (its driver: the body of ``OffPolicyAlgorithm.learn`` without its per-call
setup).

Needs torch / stable-baselines3 / gymnasium[mujoco] (not project dependencies)::

    .venv-bench/bin/pip install torch==2.13.0 "stable-baselines3>=2.3,<3" "gymnasium[mujoco]>=1.0,<1.4"
    .venv-bench/bin/python -m benchmarks.sb3.sb3_ddpg_reference --steps 200 --seeds 1

Prints its throughput as JSON on stdout, which the benchmark that started it parses (this
interpreter has no JAX, so the result is written by that benchmark, through the harness).
"""

from __future__ import annotations

import json

import numpy as np

from benchmarks.sb3.sb3_reference import _average_into, federated_seeds, parser

ZOO_MUJOCO_DDPG = dict(learning_rate=1e-3, gamma=0.99, tau=0.005, policy_kwargs=dict(net_arch=[400, 300]))
SHARED = ("actor", "actor_target", "critic", "critic_target")  # averaged; optimizers and replay stay private
SB3_SAC = dict(learning_rate=3e-4, gamma=0.99, tau=0.005, ent_coef="auto")
SAC_SHARED = ("actor", "critic", "critic_target")  # and log(alpha), a tensor of the model (`_average_sac`)


def _average_sac(models) -> None:
    """fedjax_rl's SAC server step: the policy modules and log(alpha) averaged and loaded back."""
    import torch

    _average_into(models, SAC_SHARED)
    with torch.no_grad():
        mean = torch.stack([m.log_ent_coef.detach() for m in models]).mean(0)
        for m in models:
            m.log_ent_coef.copy_(mean)


def make_perturbed(env_name: str, body: str, n_k: float):
    """gymnasium `env_name` with `body`'s mass scaled by (1 + n_k) (inertia unscaled, as fedjax_rl)."""
    import gymnasium as gym
    import mujoco

    env = gym.make(env_name)
    model = env.unwrapped.model
    model.body_mass[mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, body)] *= 1.0 + float(n_k)
    return env


def run(env_name="Hopper-v4", body="torso", num_agents=5, num_seeds=1, steps=200, sync_every=100,
        max_rate=0.5, batch_size=64, buffer_size=100_000, learning_starts=64, seed=0, num_threads=1, algo="ddpg",
        net_arch=(400, 300)) -> dict:
    from stable_baselines3 import DDPG, SAC
    from stable_baselines3.common.noise import NormalActionNoise

    def build(s):
        n = np.random.default_rng([seed, s]).uniform(-max_rate, max_rate, size=num_agents)
        models = []
        for k in range(num_agents):
            env = make_perturbed(env_name, body, n[k])
            act = env.action_space.shape[0]
            common = dict(batch_size=batch_size, buffer_size=buffer_size, learning_starts=learning_starts,
                          train_freq=1, gradient_steps=1, seed=seed * 100_003 + s * num_agents + k, device="cpu",
                          verbose=0)
            if algo == "sac":
                models.append(SAC("MlpPolicy", env, policy_kwargs=dict(net_arch=list(net_arch)), **common, **SB3_SAC))
            else:
                models.append(DDPG("MlpPolicy", env, action_noise=NormalActionNoise(np.zeros(act), 0.1 * np.ones(act)),
                                   **common, **ZOO_MUJOCO_DDPG))
        average = (lambda: _average_sac(models)) if algo == "sac" else (lambda: _average_into(models, SHARED))
        average()  # a common initialisation, as the federated algorithm has
        return models, average

    out = federated_seeds(build, num_agents, num_seeds, steps, sync_every, learning_starts, num_threads)
    rounds, warmup_rounds = out.pop("rounds"), out.pop("warmup_rounds")
    settings = (dict(SB3_SAC, net_arch=list(net_arch)) if algo == "sac"
                else dict(action_noise=0.1, **ZOO_MUJOCO_DDPG))
    return dict(impl=f"stable-baselines3 {algo.upper()} + gymnasium MuJoCo (C)", algo=algo, env=env_name, body=body,
                **out, config=dict(num_agents=num_agents, num_seeds=num_seeds, timed_steps_per_agent=rounds * sync_every,
                                   warmup_rounds=warmup_rounds, sync_every=sync_every, max_rate=max_rate,
                                   batch_size=batch_size, buffer_size=buffer_size, learning_starts=learning_starts,
                                   train_freq=1, gradient_steps=1, **settings))


def main(argv=None) -> None:
    p = parser(__doc__, steps=200, learning_starts=64)
    p.add_argument("--env", default="Hopper-v4")
    p.add_argument("--body", default="torso")
    p.add_argument("--algo", choices=("ddpg", "sac"), default="ddpg")
    p.add_argument("--net-arch", default="400,300", help="SAC's hidden layers (DDPG: RL-Zoo3's 400,300)")
    a = p.parse_args(argv)
    net_arch = tuple(int(n) for n in a.net_arch.split(","))
    print(json.dumps(run(a.env, a.body, a.agents, a.seeds, a.steps, a.sync_every, learning_starts=a.learning_starts,
                         seed=a.seed, num_threads=a.threads, algo=a.algo, net_arch=net_arch), indent=1))


if __name__ == "__main__":
    main()
