"""`fedjax-rl render` (fedjax_rl/analysis/render.py) on CartPole: frames drawn by gymnasium's renderer from the
JAX episode, the pole's drawn length at two scales against gymnasium's geometry, two policies side by
side from one initial state, the printed return against `evaluate.episode_return`, the video file,
and the refusals; MuJoCo's offscreen drawing where EGL or OSMesa is installed, and its refusal where
neither is.

The run directories hold what `fedjax-rl train` writes for a render (config.json and
global_params.npz) around policies made to act one way: a Q network whose last layer prefers
"push left" (or "right") everywhere. No training: its compile is not what is tested here."""

import ctypes.util
import json
import os
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest
from PIL import Image

from fedjax_rl.analysis import render
from fedjax_rl.cli import commands
from fedjax_rl.core import evaluate
from fedjax_rl.training import checkpoint, configs, program, records

POLE = np.array([202, 152, 101])  # gymnasium's pole colour
PIXELS_PER_METRE = 600 / 4.8  # gymnasium's CartPole: screen width / world width (2 x x_threshold)


def _write_run(directory, config, shared) -> str:
    """config.json and global_params.npz as `fedjax-rl train --out` writes them (one seed)."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(records.recorded_config(config, 1, 0)[0], f)
    checkpoint.save(os.path.join(directory, "global_params.npz"), jax.tree.map(lambda leaf: leaf[:, 0], shared))
    return str(directory)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{"left", "right", "left_again"}: DQNAvg CartPole runs whose global policy always pushes left
    (right); "left_again" is a copy of "left"."""
    config = configs.train_config("dqnavg", "CartPole-v1", num_agents=2, sync_every=10, steps_per_agent=40,
                                  eval_every_rounds=2, agent_overrides=dict(hidden_sizes=(8,), buffer_size=20,
                                                                              batch_size=4))
    trainer = program.make_trainer(config)
    shared = jax.jit(jax.vmap(trainer.init))(program.seed_keys(0, 1)).agents.learner.shared

    def pushing(action):
        def last_layer(path, leaf):
            name = jax.tree_util.keystr(path)
            if not name.startswith(".q['params']['Dense_1']"):
                return leaf
            return np.zeros_like(leaf) if name.endswith("['kernel']") else np.eye(2, dtype=leaf.dtype)[action][None, None]

        return jax.tree_util.tree_map_with_path(last_layer, shared)

    root = tmp_path_factory.mktemp("render")
    out = {"left": _write_run(root / "left", config, pushing(0)), "right": _write_run(root / "right", config, pushing(1))}
    out["left_again"] = str(root / "left_again")
    shutil.copytree(out["left"], out["left_again"])
    return out


def pole_pixels(frame: np.ndarray) -> np.ndarray:
    return np.all(frame == POLE, axis=-1)


def test_frames_are_gymnasiums_drawing_of_the_episode(runs):
    episode = render.run_episode(runs["left"], scale=1.9)
    first, last = episode.frames[0], episode.frames[-1]
    assert first.shape == (400, 600, 3) and len(episode.frames) == len(episode.rewards) + 1
    for frame in (first, last):
        assert np.sum(np.all(frame == 0, axis=-1)) > 1000  # the black cart (50 x 30 px)
        assert pole_pixels(frame).sum() > 500
        assert len(np.unique(frame.reshape(-1, 3), axis=0)) > 3
    assert not np.array_equal(first, last)  # the cart moved, the pole fell


def test_the_drawn_pole_is_the_perturbed_pole(runs):
    """The pole's vertical extent at the episode's start (|theta| <= 0.05) is gymnasium's 2 x length x
    scale at 125 px per metre: 62.5 px at 0.5 x the nominal half-length 0.5 m, 237.5 px at 1.9 x."""
    extents = {}
    for scale in (0.5, 1.9):
        frame = render.run_episode(runs["left"], scale=scale, max_frames=1).frames[0]
        rows = np.nonzero(pole_pixels(frame).any(axis=1))[0]
        extents[scale] = rows.max() - rows.min() + 1
        assert abs(extents[scale] - 2 * 0.5 * scale * PIXELS_PER_METRE) <= 3, (scale, extents[scale])
    assert extents[1.9] > 3 * extents[0.5]


def test_two_policies_side_by_side_from_one_initial_state(runs):
    left = render.run_episode(runs["left"], scale=1.9)
    right = render.run_episode(runs["right"], scale=1.9)
    again = render.run_episode(runs["left_again"], scale=1.9)
    np.testing.assert_array_equal(left.frames[0], right.frames[0])  # the same episode seed: the same start
    assert not np.array_equal(left.frames[3], right.frames[3])  # pushed the other way
    assert len(again.frames) == len(left.frames)
    assert all(np.array_equal(a, b) for a, b in zip(left.frames, again.frames))  # the same policy: the same film
    frames = render.compose([left, right])
    width = left.frames[0].shape[1]
    assert frames[0].shape == (400, 2 * width + 4, 3) and len(frames) == max(len(left.frames), len(right.frames))
    above_text = slice(0, 300)  # the text sits at the bottom, under CartPole's track
    for i in (0, 3):
        same = np.array_equal(frames[i][above_text, :width], frames[i][above_text, width + 4:])
        assert same == (i == 0), i


def test_the_printed_return_is_the_evaluations_return(runs):
    """The panel's episode return is `evaluate.episode_return`'s for that episode (same key, same
    perturbed physics), and the text on every frame says it."""
    from fedjax_rl import envs
    from fedjax_rl.core import perturb

    episode = render.run_episode(runs["right"], scale=1.9, episode_seed=3)
    config = configs.train_config("dqnavg", "CartPole-v1", num_agents=2, sync_every=10, steps_per_agent=40,
                                  eval_every_rounds=2, agent_overrides=dict(hidden_sizes=(8,), buffer_size=20,
                                                                              batch_size=4))
    trainer = program.make_trainer(config)
    like = jax.eval_shape(trainer.init, jax.random.key(0)).agents.learner.shared
    shared, _ = checkpoint.load(os.path.join(runs["right"], "global_params.npz"),
                                jax.tree.map(lambda s: np.zeros((1, *s.shape[1:]), s.dtype), like))
    env, nominal = envs.make("CartPole-v1", ("length",))
    params = jax.tree.map(lambda x: x[0], perturb.scaled_env_params(env, nominal, ("length",), np.array([1.9])))
    policy = lambda obs: trainer.agent.greedy_action(jax.tree.map(lambda x: x[0], shared), obs)  # noqa: E731
    expected = evaluate.episode_return(env, params, policy, jax.random.key(3), 500)
    assert episode.total == float(expected) and 5 <= episode.total < 100
    lines = render.panel_lines(episode, len(episode.rewards))
    assert lines == ["DQNAvg", f"length ×1.9: episode return {episode.total:.1f}",
                     f"step {len(episode.rewards)}: return so far {episode.total:.1f}  (episode over)"]


def test_the_command_writes_a_gif_of_both_runs(runs, tmp_path, capsys):
    out = tmp_path / "sub" / "both.gif"
    assert commands.main(["render", runs["left"], runs["right"], "--scale", "1.9", "--out", str(out), "--every", "2",
                     "--max-frames", "4", "--width", "300"]) == 0
    printed = capsys.readouterr().out
    assert f"wrote {out}: length ×1.9, episode seed 0; returns DQNAvg: left " in printed
    with Image.open(out) as gif:
        assert gif.size == (2 * 300 + 4, 200) and gif.n_frames == 4
        gif.seek(3)
        assert len(set(gif.convert("RGB").getdata())) > 3


@pytest.mark.parametrize(
    "argv,message",
    [
        (lambda r, t: [r["left"], "--scale", "0"], r"--scale: physics scale must be > 0, got 0.0"),
        (lambda r, t: [r["left"], "--out", f"{t}/x.png"], r"--out must end in .gif or .mp4, got '\S+/x.png'"),
        (lambda r, t: [r["left"], r["right"], r["left_again"]], r"render shows one run or two side by side, got 3"),
        (lambda r, t: [f"{t}/nothing"], r"\S+/nothing has no config.json"),
        (lambda r, t: [f"{t}/grid"], r"\S+/grid holds a grid of runs; render one of its points, e.g. \S+/grid/omega=0"),
        (lambda r, t: [f"{t}/lander"], r"cannot draw LunarLander-v3: `render` draws CartPole-v1, Acrobot-v1"),
        (lambda r, t: [r["left"], f"{t}/acrobot"], r"side by side needs runs of one task and perturbed parameter"),
        (lambda r, t: [r["left"], "--seed-index", "1"], r"--seed-index must be in \[0, 1\) for \S+ \(1 seed\(s\)\)"),
    ],
    ids=["scale", "extension", "three runs", "no run", "grid", "not drawable", "two tasks", "seed index"],
)
def test_bad_requests_stop_with_a_message(runs, tmp_path, argv, message):
    import re

    for name, changes in (("grid", {"grid": {"omega": [0.0, 0.1]}}), ("lander", {"env_name": "LunarLander-v3"}),
                          ("acrobot", {"env_name": "Acrobot-v1"})):
        shutil.copytree(runs["left"], tmp_path / name)
        recorded = json.loads((tmp_path / name / "config.json").read_text())
        (tmp_path / name / "config.json").write_text(json.dumps({**recorded, **changes}))
    (tmp_path / "grid" / "omega=0").mkdir()
    with pytest.raises(SystemExit) as exit_info:
        commands.main(["render", *argv(runs, tmp_path)])
    assert re.search(message, str(exit_info.value)), str(exit_info.value)


def test_an_mp4_is_written_where_its_writer_is_installed(tmp_path):
    imageio = pytest.importorskip("imageio.v2")
    pytest.importorskip("imageio_ffmpeg")  # the `video` extra, not the test extras
    frames = [np.full((40, 60, 3), 40 * i, np.uint8) for i in range(5)]
    render.write_video(frames, str(tmp_path / "x.mp4"))
    with imageio.get_reader(tmp_path / "x.mp4") as reader:
        read = [frame for frame in reader]
    assert len(read) == 5 and read[0].shape == (40, 60, 3)
    assert abs(float(read[4].mean()) - 160) < 3


def test_an_mp4_without_its_writer_is_refused_with_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "imageio_ffmpeg", None)  # as if not installed
    with pytest.raises(render.RenderError, match=r"writing an MP4 needs imageio-ffmpeg \(pip install"):
        render.write_video([np.zeros((4, 4, 3), np.uint8)], str(tmp_path / "x.mp4"))


def test_mujoco_without_offscreen_opengl_is_refused_naming_the_packages(monkeypatch):
    monkeypatch.delenv("MUJOCO_GL", raising=False)
    with pytest.raises(render.RenderError, match=r"neither libEGL nor libOSMesa is installed\. .*apt-get install "
                                                 r"libegl1 libegl-mesa0.*apt-get install libosmesa6"):
        render.offscreen_gl(find_library=lambda name: None)
    monkeypatch.setenv("MUJOCO_GL", "osmesa")  # a user's choice is kept
    assert render.offscreen_gl(find_library=lambda name: None) == "osmesa"


DRAW_HOPPER = """
import jax, numpy as np
from fedjax_rl import envs
from fedjax_rl.analysis import render
print("backend", render.offscreen_gl())
env, params = envs.make("Hopper-v4", ("torso",))
_, state = env.reset(jax.random.key(0), params)
fallen = state.replace(qpos=state.qpos.at[2].set(1.2))  # the torso tilted by 1.2 rad
frames = render._draw_mujoco("Hopper-v4", env, params, [state, fallen], 96)
np.save("frames.npy", np.stack(frames))
"""


@pytest.mark.skipif(not (ctypes.util.find_library("EGL") or ctypes.util.find_library("OSMesa")),
                    reason="neither libEGL nor libOSMesa: the refusal is tested above")
def test_mujoco_robots_are_drawn_offscreen(tmp_path):
    """In a fresh interpreter (MUJOCO_GL is read when MuJoCo is imported): Hopper at its reset state and
    with its torso tilted, through MuJoCo's offscreen renderer and gymnasium's camera."""
    env = {k: v for k, v in os.environ.items() if k != "MUJOCO_GL"}
    done = subprocess.run([sys.executable, "-c", DRAW_HOPPER], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[:2] in (["backend", "egl"], ["backend", "osmesa"])
    upright, tilted = np.load(tmp_path / "frames.npy")
    assert upright.shape == (96, 96, 3) and len(np.unique(upright.reshape(-1, 3), axis=0)) > 20
    assert np.mean(np.abs(upright.astype(float) - tilted)) > 1.0
