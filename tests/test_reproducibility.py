"""One seed, one result (issue 14): the command line, the Python API and a resumed run run the same
compiled block functions and agree bit for bit; other program shapes agree to a few float32 ulps
after one update (chaotic tasks then amplify that, so they are not expected to match later on)."""

import json
import logging

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_rl.cli import commands
from fedjax_rl.training import checkpoint, configs, loop, machine, program, records, run_directory
from references import max_dot_batch_dims

AGENT = dict(hidden_sizes=(16, 16), learning_starts=15, train_freq=1, gradient_steps=1, target_update_interval=5,
             batch_size=8, buffer_size=50, omega=0.2)
FIELDS = dict(physics=("length",), num_agents=2, sync_every=10, steps_per_agent=60, eval_every_rounds=3,
              eval_episodes=2)
ARGV = ["--algo", "fedrdqn", "--env", "CartPole-v1", "--param", "length", "--agents", "2", "--sync-every", "10",
        "--steps", "60", "--eval-every", "3", "--eval-episodes", "2", "--omega", "0.2", "--seeds", "2",
        "--set", "hidden_sizes=16,16", "--set", "learning_starts=15", "--set", "train_freq=1",
        "--set", "gradient_steps=1", "--set", "target_update_interval=5", "--set", "batch_size=8",
        "--set", "buffer_size=50", "--no-progress"]


def _assert_results_identical(a: dict, b: dict) -> None:
    for part in ("curve", "final"):
        assert sorted(a[part]) == sorted(b[part])
        for name in a[part]:
            np.testing.assert_array_equal(np.asarray(a[part][name]), np.asarray(b[part][name]), err_msg=f"{part}/{name}")


def _crash_after_first_checkpoint(monkeypatch, config, num_seeds=2, **run_kwargs) -> None:
    """loop.run that dies (a simulated crash) right after writing its first checkpoint."""
    real_save = checkpoint.save

    def save_then_die(path, tree, **extra):
        real_save(path, tree, **extra)
        raise KeyboardInterrupt("simulated crash after the first block")

    monkeypatch.setattr(checkpoint, "save", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        loop.run(config, num_seeds=num_seeds, seed=0, progress=False, **run_kwargs)
    monkeypatch.setattr(checkpoint, "save", real_save)


def _rerun_without_compiling(monkeypatch, config, **run_kwargs) -> dict:
    """loop.run on a finished out_dir, where building a program would fail."""
    def no_program(*args, **kwargs):
        raise AssertionError("a finished run was computed again")

    with monkeypatch.context() as patched:
        patched.setattr(loop, "over_runs", no_program)
        return loop.run(config, num_seeds=2, seed=0, progress=False, **run_kwargs)


@pytest.fixture
def every_program_cached(monkeypatch):
    """Writes every compiled program to the persistent cache, not only those that took a second or more:
    whether a program crossed that threshold is the host's timing, and a resume that finds its block
    program missing only because the first compile took 0.98 s would fail for no fault of the code."""
    monkeypatch.setenv(machine.CACHE_MIN_COMPILE_ENV, "0")
    before = jax.config.jax_persistent_cache_min_compile_time_secs
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    yield
    jax.config.update("jax_persistent_cache_min_compile_time_secs", before)


def test_cli_python_api_and_resumed_run_are_bit_identical(tmp_path, monkeypatch, caplog, every_program_cached):
    config = configs.train_config("fedrdqn", "CartPole-v1", agent_overrides=AGENT, **FIELDS)

    assert commands.main(["train", *ARGV, "--out", str(tmp_path / "cli")]) == 0
    written = json.loads((tmp_path / "cli" / "config.json").read_text())
    # What the API records for the same config.
    assert written == json.loads(json.dumps(records.recorded_config(config, num_seeds=2, seed=0)[0])), \
        "the CLI resolved another configuration than the Python API"
    from_cli = json.loads((tmp_path / "cli" / "metrics.json").read_text())

    from_api = loop.run(config, num_seeds=2, seed=0, progress=False)
    assert from_api["curve"]["td_loss"][:, -1].min() > 0  # the run trained
    _assert_results_identical(from_api, from_cli)

    out = str(tmp_path / "resumed")
    _crash_after_first_checkpoint(monkeypatch, config, out_dir=out)
    assert json.loads(str(np.load(f"{out}/checkpoint.npz")["extra:blocks_done"])) == 1
    recorded, _ = records.recorded_config(config, num_seeds=2, seed=0)
    assert json.loads((tmp_path / "resumed" / "config.json").read_text()) == json.loads(json.dumps(recorded))
    on_disk = run_directory.RunDirectory(out, recorded).progress(config.num_evals)
    assert (on_disk["state"], on_disk["blocks_done"]) == ("partial", 1) and on_disk["wall_s"] > 0
    with caplog.at_level(logging.DEBUG, logger="jax._src.compiler"):
        resumed = loop.run(config, num_seeds=2, seed=0, out_dir=out, progress=False)
    _assert_results_identical(resumed, from_api)
    # The restored state is the fresh one's program input: its block and final programs come from the
    # compilation cache the first runs filled.
    assert "CACHE MISS for 'jit_mapped'" not in caplog.text
    timing = resumed["timing"]  # the crashed process's time is carried by the checkpoint
    assert timing["resumed_at_block"] == 1 and timing["wall_s"] > timing["wall_s_this_process"] > 0
    assert json.loads((tmp_path / "resumed" / "metrics.json").read_text())["timing"] == pytest.approx(timing)

    assert run_directory.RunDirectory(out, recorded).progress(config.num_evals)["state"] == "finished"
    # A finished run is read back from its files: no compile, no final evaluation again.
    again = _rerun_without_compiling(monkeypatch, config, out_dir=out)
    _assert_results_identical(again, resumed)
    assert again["timing"]["resumed_at_block"] == config.num_evals
    assert again["timing"]["wall_s"] == pytest.approx(timing["wall_s"])
    assert again["communication"] == resumed["communication"] and again["run_batch"] == resumed["run_batch"]

    # An omega grid is one program with a leading grid axis; each point gets its own run directory.
    grid = loop.run(config, num_seeds=2, seed=0, out_dir=str(tmp_path / "grid"), progress=False,
                          grid={"omega": [0.2, 0.5]})
    assert [p.agent.omega for p in grid["grid"]] == [0.2, 0.5]
    point = json.loads((tmp_path / "grid" / "omega=0.5" / "config.json").read_text())
    assert point["agent"]["omega"] == 0.5 and point["num_seeds"] == 2
    on_disk = json.loads((tmp_path / "grid" / "omega=0.2" / "metrics.json").read_text())
    for name in from_api["curve"]:
        np.testing.assert_array_equal(grid["curve"][name][0], on_disk["curve"][name])
        # The same computation in a differently shaped program: equal up to float rounding.
        np.testing.assert_allclose(grid["curve"][name][0], from_api["curve"][name], rtol=1e-5, atol=1e-6)
    assert not np.allclose(grid["curve"]["td_loss"][0], grid["curve"]["td_loss"][1])
    grid_again = _rerun_without_compiling(monkeypatch, config, out_dir=str(tmp_path / "grid"), grid={"omega": [0.2, 0.5]})
    _assert_results_identical(grid_again, grid)  # the points' files stacked back into the grid axis
    assert grid_again["grid"] == grid["grid"]
    # A point's outputs deleted: the run is evaluated again from its checkpoint and writes them back.
    (tmp_path / "grid" / "omega=0.5" / "metrics.json").unlink()
    rewritten = loop.run(config, num_seeds=2, seed=0, out_dir=str(tmp_path / "grid"), progress=False,
                               grid={"omega": [0.2, 0.5]})
    assert rewritten["timing"]["resumed_at_block"] == config.num_evals
    _assert_results_identical(rewritten, grid)
    assert (tmp_path / "grid" / "omega=0.5" / "metrics.json").exists()


@pytest.mark.parametrize(
    "grid,match",
    [
        ({"omega": [0.1, 1.5]}, r"omega must be in \[0, 1\), got 1.5"),
        ({"batch_size": [8]}, r"grid setting 'batch_size' is not a vmappable hyperparameter of fedrdqn; allowed: .*omega"),
        ({"omega": []}, r"grid setting 'omega' needs at least one value"),
    ],
)
def test_bad_grids_raise_before_compiling(grid, match):
    config = configs.train_config("fedrdqn", "CartPole-v1", agent_overrides=AGENT, **FIELDS)
    with pytest.raises(ValueError, match=match):
        configs.grid_configs(config, grid)


def _one_update_config(**fields):
    # One block of 30 steps whose only gradient step is the last one (learning_starts = 29: the first
    # gradient step follows step learning_starts + 1).
    agent = dict(AGENT, learning_starts=29)
    return configs.train_config("fedrdqn", "CartPole-v1", agent_overrides=agent,
                                **{**FIELDS, "num_agents": 4, "steps_per_agent": 30, "eval_episodes": 1, "sweep_points": 2,
                                   **fields})


def _after_one_block(trainer, keys):
    state = jax.jit(jax.vmap(trainer.init))(keys)
    state, _ = jax.jit(jax.vmap(trainer.run_block, in_axes=(0, None, None)))(state, trainer.hparams, 0)
    return state.agents.learner.shared


def test_other_program_shapes_agree_to_a_few_ulps_after_one_update():
    """Measured on the AMD EPYC development machine (jaxlib 0.10.2), max |difference| of the shared
    parameters after one update, against the host loop with 2 seeds: whole-run program
    (`jit(vmap(make_train))`) 3.0e-8, a vmapped omega axis 3.0e-8, agents sharded over 2 devices
    1.2e-7, 3 seeds instead of 2 bit-identical, one seed at a time (run_batch=1, lax.map) 1.9e-9.
    Parameters are of order 1, so these are 1-2 ulps.
    The bound below is 8 ulps of the largest parameter."""
    trainer = program.make_trainer(_one_update_config())
    keys = program.seed_keys(0, 3)
    reference = _after_one_block(trainer, keys[:2])
    initial = jax.jit(jax.vmap(trainer.init))(keys[:2]).agents.learner.shared
    hparams = jax.vmap(lambda w: trainer.hparams.replace(omega=w))(jnp.array([0.2, 0.5]))
    omega_axis = jax.jit(jax.vmap(jax.vmap(trainer.run_block, in_axes=(0, None, None)), in_axes=(None, 0, None)))(
        jax.jit(jax.vmap(trainer.init))(keys[:2]), hparams, 0)[0].agents.learner.shared
    one_run_at_a_time = jax.jit(program.over_runs(trainer.run_block, (2,), run_batch=1))(
        jax.jit(jax.vmap(trainer.init))(keys[:2]), trainer.hparams, 0)[0].agents.learner.shared
    variants = {
        "run_batch=1 (lax.map over seeds)": one_run_at_a_time,
        "whole-run program": jax.jit(jax.vmap(trainer.train, in_axes=(0, None)))(keys[:2], trainer.hparams)[0]
        .agents.learner.shared,
        "three seeds": jax.tree.map(lambda x: x[:2], _after_one_block(trainer, keys)),
        "omega axis": jax.tree.map(lambda x: x[0], omega_axis),
        "sharded agents": _after_one_block(program.make_trainer(_one_update_config(num_devices=2)), keys[:2]),
    }
    scale = max(float(jnp.max(jnp.abs(leaf))) for leaf in jax.tree.leaves(reference))
    bound = 8 * float(np.finfo(np.float32).eps) * scale
    moved = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(jax.tree.leaves(reference.q), jax.tree.leaves(initial.q)))
    assert moved > 1e3 * bound  # the block changed the parameters far more than the tolerance
    for name, shared in variants.items():
        diff = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(jax.tree.leaves(shared), jax.tree.leaves(reference)))
        print(f"{name}: max |difference| {diff:.2g} (bound {bound:.2g})")
        assert diff <= bound, name


def test_run_batch_is_recorded_and_cli_api_and_resume_agree(tmp_path, monkeypatch):
    """`run_batch` (runs vmapped at a time, the rest mapped) is one more program shape: the command
    line, the API and a resumed run with the same value agree bit for bit; a directory written with
    another value is not resumed from."""
    config = configs.train_config("fedrdqn", "CartPole-v1", agent_overrides=AGENT, **FIELDS)
    grid = {"omega": [0.2, 0.5]}  # 2 points x 2 seeds = 4 runs, 3 per batch: a full and a partial batch
    out = str(tmp_path / "api")
    _crash_after_first_checkpoint(monkeypatch, config, out_dir=out, grid=grid, run_batch=3)
    assert json.loads((tmp_path / "api" / "config.json").read_text())["run_batch"] == 3
    resumed = loop.run(config, num_seeds=2, seed=0, out_dir=out, progress=False, grid=grid, run_batch=3)
    assert resumed["timing"]["resumed_at_block"] == 1
    fresh = loop.run(config, num_seeds=2, seed=0, progress=False, grid=grid, run_batch=3)
    _assert_results_identical(resumed, fresh)
    everything_at_once = loop.run(config, num_seeds=2, seed=0, progress=False, grid=grid)
    for name in fresh["curve"]:  # another program shape: float rounding apart
        np.testing.assert_allclose(fresh["curve"][name], everything_at_once["curve"][name], rtol=1e-4, atol=1e-5)

    # Another run_batch is another program: refused before compiling, naming the difference. With
    # new_run the finished run_batch=3 run moves, whole, to set_aside/1; asked for again, it comes back.
    with pytest.raises(loop.RunExists, match=r"holds a run of other settings:\n  run_batch: 3 -> 2\n"):
        loop.run(config, num_seeds=2, seed=0, out_dir=out, progress=False, grid=grid, run_batch=2)
    with pytest.warns(UserWarning, match=r"held a run of other settings \(run_batch: 3 -> 2\): moved to .*set_aside/1"):
        _crash_after_first_checkpoint(monkeypatch, config, out_dir=out, grid=grid, run_batch=2, new_run=True)
    kept = tmp_path / "api" / loop.SET_ASIDE / "1"
    assert json.loads((kept / "config.json").read_text())["run_batch"] == 3
    assert (kept / loop.FINISHED).exists() and (kept / "omega=0.5" / "metrics.json").exists()
    assert int(np.load(kept / "checkpoint.npz")["extra:blocks_done"]) == 2  # all of its blocks
    assert json.loads((tmp_path / "api" / "config.json").read_text())["run_batch"] == 2
    assert not (tmp_path / "api" / loop.FINISHED).exists()
    batch3, _ = records.recorded_config(config, 2, 0, grid, run_batch=3)
    assert run_directory.RunDirectory(out, batch3).progress(config.num_evals)["state"] == "other settings"
    with pytest.warns(UserWarning, match=r"set_aside/1 held a run of these settings: moved back"):
        back = _rerun_without_compiling(monkeypatch, config, out_dir=out, grid=grid, run_batch=3)
    _assert_results_identical(back, resumed)
    assert json.loads((tmp_path / "api" / loop.SET_ASIDE / "2" / "config.json").read_text())["run_batch"] == 2
    assert not kept.exists()

    # run_batch >= the number of runs is every run at once: the all-at-once program, recorded as none.
    loop.run(config, num_seeds=2, seed=0, out_dir=str(tmp_path / "all"), progress=False, run_batch=2)
    assert json.loads((tmp_path / "all" / "config.json").read_text())["run_batch"] is None

    assert commands.main(["train", *ARGV, "--run-batch", "1", "--out", str(tmp_path / "cli")]) == 0
    assert json.loads((tmp_path / "cli" / "config.json").read_text())["run_batch"] == 1
    from_api = loop.run(config, num_seeds=2, seed=0, progress=False, run_batch=1)
    _assert_results_identical(from_api, json.loads((tmp_path / "cli" / "metrics.json").read_text()))


@pytest.mark.parametrize("value", ["0", "-2", "two", "1.5"])
def test_bad_run_batch_stops_before_compiling(value, capsys):
    with pytest.raises(SystemExit, match=r"--run-batch must be 'all' or an integer >= 1|run_batch must be an integer >= 1"):
        commands.main(["train", *ARGV, "--run-batch", value])
    with pytest.raises(ValueError, match=r"run_batch must be an integer >= 1 \(runs vmapped at a time\) or None"):
        loop.run(configs.train_config("fedrdqn", "CartPole-v1", agent_overrides=AGENT, **FIELDS), run_batch=0)


@pytest.mark.parametrize("run_batch", [None, 4])
def test_over_runs_maps_each_run_once_on_one_flat_axis(run_batch):
    """Run (i, j) of a [grid points, seeds] layout gets state[i, j] and hparams[i], whether all runs are
    vmapped at once or 4 at a time. The runs are one batch axis, not a vmap of vmaps: nested, every
    dot of a robot's physics gained a batch dimension, and a rank-7 one crashed XLA's CPU runtime."""
    points, seeds = 2, 3
    state = {"x": jnp.arange(points * seeds * 4, dtype=jnp.float32).reshape(points, seeds, 4) / 10}
    hparams = jnp.array([1.0, -2.0])

    def one_run(s, h):  # both operands of the dot vary with the run, as MJX's rotations do
        return s["x"] @ (jnp.outer(s["x"], s["x"]) * h)

    mapped = program.over_runs(one_run, (points, seeds), run_batch)
    out = jax.jit(mapped)(state, hparams)
    chex.assert_shape(out, (points, seeds, 4))
    for i in range(points):
        for j in range(seeds):
            np.testing.assert_allclose(out[i, j], one_run({"x": state["x"][i, j]}, hparams[i]), rtol=1e-6)
    assert max_dot_batch_dims(jax.make_jaxpr(mapped)(state, hparams).jaxpr) == 1


def test_cpu_matrix_products_library_is_the_algorithms_reaches_xla_and_is_not_a_runs_identity():
    ddpg = configs.train_config("fedrddpg", "Pendulum-v1")
    assert (ddpg.dots, configs.train_config("fedrdqn", "CartPole-v1").dots) == ("eigen", "ynnpack")
    ynnpack = configs.train_config("fedrddpg", "Pendulum-v1", cpu_dots="ynnpack")
    assert ynnpack.dots == "ynnpack" and ynnpack.compiler_options == {}
    with pytest.raises(ValueError, match=r"cpu_dots must be one of \['ynnpack', 'eigen'\], got 'mkl'"):
        configs.train_config("fedrddpg", "Pendulum-v1", cpu_dots="mkl")
    # XLA takes the option: without it a batched dot of these shapes is a YNNPACK fusion, with it not.
    x, w = jnp.ones((4, 64, 400)), jnp.ones((4, 400, 300))
    compiled = {c.dots: jax.jit(lambda x, w: jnp.einsum("abi,aio->abo", x, w), compiler_options=c.compiler_options)
                .lower(x, w).compile().as_text() for c in (ddpg, ynnpack)}
    assert "__ynn_fusion" in compiled["ynnpack"] and "__ynn_fusion" not in compiled["eigen"]
    # It only rounds differently: a run directory resumes and reads back with either library.
    assert records.recorded_config(ddpg, 2, 0) == records.recorded_config(ynnpack, 2, 0)
