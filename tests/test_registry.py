"""The algorithm registry and the setting declarations: one default per setting whatever the door
(Python API or command line), messages that name the setting, DQNAvg without an omega leaf, and a
non-finite loss that stops a run with the quantity, seed, agent and environment step."""

import os
import re
import subprocess
import sys

import numpy as np
import pytest

from fedjax_rl import agents
from fedjax_rl.agents import dqn
from fedjax_rl.analysis import plots
from fedjax_rl.cli import commands
from fedjax_rl.core import settings
from fedjax_rl.training import checkpoint, configs, loop, program


def cli_config(*argv):
    return commands.config_from_args(commands.build_parser().parse_args(["train", *argv]))


def test_registry_lists_every_algorithm_once():
    assert {"fedrdqn", "dqnavg", "fedrddpg", "ddpgavg1", "ddpgavg2"} <= set(agents.names())
    for name, algorithm in agents.ALGORITHMS.items():
        assert algorithm.name == name
        declared = [s.name for s in algorithm.config.SETTINGS]
        assert len(declared) == len(set(declared))
        assert set(algorithm.fixed) <= set(declared)
        agents.check_algorithm(algorithm, "built-in")  # its agent and config, now imported, serve


def test_the_registry_imports_an_agent_only_when_its_algorithm_is_asked_for():
    """A label costs no agent module (nor JAX); the agent class imports its family's module alone."""
    probe = ("import sys; from fedjax_rl import agents; "
             "assert agents.ALGORITHMS['fedrdqn'].describe({'omega': 0.1}) == 'FedRDQN (ω=0.1)'; "
             "assert not [m for m in sys.modules if m.startswith('fedjax_rl.agents.') and m != 'fedjax_rl.agents.registry'], "
             "sorted(sys.modules); assert 'jax' not in sys.modules; "
             "agents.get('dqnavg').agent; assert 'fedjax_rl.agents.dqn' in sys.modules; "
             "assert 'fedjax_rl.agents.ddpg' not in sys.modules")
    subprocess.run([sys.executable, "-c", probe], check=True)


@pytest.mark.parametrize(
    "algo,env", [("fedrdqn", "CartPole-v1"), ("dqnavg", "Acrobot-v1"), ("fedrdqn", "LunarLander-v3")]
)
def test_cli_and_api_resolve_the_same_defaults(algo, env):
    api = configs.train_config(algo, env)
    assert cli_config("--algo", algo, "--env", env) == api
    assert api.steps_per_agent == dqn.ZOO_DQN[env]["steps"]  # RL-Zoo3's budget, not a fixed 20k
    assert api.eval_every_rounds == max(1, api.num_rounds // configs.EVAL_POINTS)
    assert api.eval_episodes == 5  # the paper's evaluation


def test_cli_flags_are_config_names_and_give_the_api_config():
    api = configs.train_config(
        "fedrdqn", "CartPole-v1", physics=("masscart",), num_agents=3, sync_every=50, max_rate=0.3,
        steps_per_agent=3000, eval_every_rounds=2, eval_episodes=4, sweep_points=5,
        agent_overrides=dict(omega=0.3, tau=0.05, hidden_sizes=(32,), learning_rate=1e-3),
    )
    by_config_name = cli_config(
        "--algo", "fedrdqn", "--env-name", "CartPole-v1", "--physics", "masscart", "--num-agents", "3",
        "--sync-every", "50", "--max-rate", "0.3", "--steps-per-agent", "3000", "--eval-every-rounds", "2",
        "--eval-episodes", "4", "--sweep-points", "5", "--omega", "0.3", "--tau", "0.05",
        "--set", "hidden_sizes=32", "--set", "learning_rate=1e-3",
    )
    by_alias = cli_config(
        "--env", "CartPole-v1", "--param", "masscart", "--agents", "3", "--sync-every", "50", "--max-rate", "0.3",
        "--steps", "3000", "--eval-every", "2", "--eval-episodes", "4", "--sweep-points", "5",
        "--set", "omega=0.3", "--set", "tau=0.05", "--set", "hidden_sizes=32", "--set", "learning_rate=1e-3",
    )
    assert by_config_name == api
    assert by_alias == api


def test_a_setting_parses_with_its_declared_kind():
    declared = settings.by_name(agents.get("fedrdqn").config.SETTINGS)
    assert declared["hidden_sizes"].parse("64,64") == (64, 64)
    assert declared["batch_size"].parse("32") == 32
    with pytest.raises(ValueError, match="batch_size expects int, got '3.5'"):
        declared["batch_size"].parse("3.5")
    with pytest.raises(ValueError, match="omega expects float"):
        cli_config("--set", "omega=high")


def test_amend_replaces_in_place_drops_and_appends():
    a, b, c = (settings.Setting(name, 1.0) for name in "abc")
    amended = settings.amend((a, b, c), b.with_default(2.0), drop=("a",), add=(settings.Setting("d", 0.0),))
    assert [(s.name, s.default) for s in amended] == [("b", 2.0), ("c", 1.0), ("d", 0.0)]
    with pytest.raises(ValueError, match=r"amend: \['e'\] are not among the settings"):
        settings.amend((a, b), drop=("e",))
    # TD3 and SAC are DDPG's declarations amended: the shared ones in DDPG's order.
    from fedjax_rl.agents import ddpg, sac, td3

    assert [s.name for s in td3.SETTINGS][:len(ddpg.SETTINGS)] == [s.name for s in ddpg.SETTINGS]
    assert "exploration_noise" not in settings.by_name(sac.SETTINGS)
    assert settings.by_name(sac.SETTINGS)["hidden_sizes"].default == (256, 256)


def test_dqnavg_has_no_omega_leaf():
    config = configs.train_config("dqnavg", "CartPole-v1", steps_per_agent=1000, eval_every_rounds=1)
    trainer = program.make_trainer(config)
    assert "omega" not in trainer.hparams.names()
    # A sweep over omega on a DQNAvg trainer cannot silently change its target: it is refused before
    # anything is traced.
    with pytest.raises(ValueError, match=r"DQNAvg .* has no hyperparameter 'omega'; its vmappable hyperparameters"):
        trainer.hparams.replace(omega=0.3)
    with pytest.raises(ValueError, match=r"omega must be 0 for DQNAvg .*got 0.3"):
        configs.train_config("dqnavg", "CartPole-v1", agent_overrides=dict(omega=0.3))
    with pytest.raises(ValueError, match=r"robust is fixed to False by algo='dqnavg'"):
        configs.train_config("dqnavg", "CartPole-v1", agent_overrides=dict(robust=True))
    # FedRDQN keeps it.
    robust = program.make_trainer(configs.train_config("fedrdqn", "CartPole-v1", steps_per_agent=1000, eval_every_rounds=1))
    assert robust.hparams.replace(omega=0.3).omega == 0.3


def test_unknown_and_mismatched_settings_name_themselves():
    with pytest.raises(ValueError, match=r"unknown DQN settings \['colour'\]"):
        configs.train_config("fedrdqn", "CartPole-v1", agent_overrides=dict(colour=3))
    with pytest.raises(ValueError, match=r"unknown settings \['colour'\]"):
        configs.train_config("fedrdqn", "CartPole-v1", colour=3)
    with pytest.raises(ValueError, match=r"algo must be one of"):
        configs.train_config("ppo", "CartPole-v1")


def test_nonfinite_loss_stops_the_run_naming_quantity_seed_agent_and_step(tmp_path):
    """A huge learning rate (1e30) makes the first gradient step (env step 25, in block 1) blow the
    Q network up; the run stops in block 1 with a message, and block 0 stays on disk."""
    config = configs.train_config(
        "fedrdqn", "CartPole-v1", physics=("length",), num_agents=2, sync_every=10, steps_per_agent=60,
        eval_every_rounds=2, eval_episodes=1, sweep_points=2,
        agent_overrides=dict(hidden_sizes=(8,), learning_starts=25, train_freq=1, gradient_steps=1,
                             batch_size=4, buffer_size=40, learning_rate=1e30),
    )
    out = tmp_path / "run"
    with pytest.raises(loop.NonFiniteError) as info:
        loop.run(config, num_seeds=2, seed=0, out_dir=str(out), progress=False)
    message = str(info.value)
    print(message)
    quantity = re.search(r"non-finite (Q loss|expectile loss|shared parameters)", message)
    step = re.search(r"environment step (\d+)", message)
    assert quantity and step and re.search(r"seed index [01]\b", message) and re.search(r"agent [01]\b", message)
    assert 25 < int(step.group(1)) <= 40  # after the first update, within block 1 (steps 21-40)
    _, extra = checkpoint.load(str(out / "checkpoint.npz"), _init_state(config))
    assert int(extra["blocks_done"]) == 1  # the finished block is on disk, the bad one is not
    curve = __import__("json").loads(str(extra["curve"]))
    assert len(curve) == 1 and np.all(np.asarray(curve[0]["nonfinite_step/td_loss"]) == 0)

    # The other non-finite records of the block are counted once each, and the count is their sum.
    more = re.search(r"\((\d+) more non-finite record\(s\) in this block: (.*)\)", message)
    assert more, message
    assert int(more.group(1)) == sum(int(n) for n in re.findall(r" in (\d+) run\(s\)", more.group(2))) >= 1
    # What the run made is written down, marked stopped; compare and plot show it as such.
    assert f"The 1 evaluation(s) made before it are in {out}/metrics.json, marked stopped" in message
    written = __import__("json").loads((out / "metrics.json").read_text())
    assert written["stopped"] == {"reason": message.split(". The 1 evaluation")[0], "blocks_done": 1, "num_blocks": 3}
    assert written["curve"]["env_steps"] == [[20], [20]] and written["final"] == {}
    assert not (out / loop.FINISHED).exists()
    table = plots.comparison_table([str(out)])
    assert re.search(rf"{out} +\| CartPole-v1 \(length\) \| FedRDQN \(ω=0\.1\) \| 2 +\| stopped at block 1 of 3 \| "
                     rf"stopped at block 1 of 3 \|", table), table
    assert f"{out}: non-finite" in table
    assert [os.path.basename(p) for p in plots.plot_runs([str(out)], str(tmp_path / "fig"))] == ["fig_curve.png"]


def _init_state(config):
    import jax

    return jax.jit(jax.vmap(program.make_trainer(config).init))(program.seed_keys(0, 2))


def test_nonfinite_message_counts_the_other_records_by_hand():
    """3 seeds: td_loss non-finite in seeds 0 (step 30) and 2 (step 12), parameters in seeds 1 and 2
    (step 40). Reported: the earliest, seed 2's td_loss; the 3 others are counted once each (the old
    message said '(3 more: [...])' and listed the reported quantity among them)."""
    from types import SimpleNamespace

    metrics = {"env_steps": np.array([40, 40, 40]),
               "nonfinite_step/td_loss": np.array([30, 0, 12]), "nonfinite_agent/td_loss": np.array([1, -1, 0]),
               "nonfinite_step/parameters": np.array([0, 40, 40]), "nonfinite_agent/parameters": np.array([-1, 0, 1])}
    trainer = SimpleNamespace(agent=SimpleNamespace(loss_descriptions={"td_loss": "Q loss"}))
    with pytest.raises(loop.NonFiniteError) as info:
        loop.check_finite(metrics, trainer, seed=7, block=1)
    assert str(info.value) == (
        "non-finite Q loss in seed index 2 (of the seeds vmapped from seed=7), agent 0, at environment step 12 "
        "(block 1); stopped before checkpointing this block (3 more non-finite record(s) in this block: "
        "shared parameters in 2 run(s), Q loss in 1 run(s))")
