"""`fedjax-rl render`: the final global policy of a run acting in a perturbed environment, as a GIF
(or MP4), side by side with a second run's where one is given. ::

    fedjax-rl render runs/fedrdqn runs/dqnavg --scale 1.9 --out runs/cartpole_1.9.gif

The environment is the run's own task with every parameter the run perturbed set to `scale` times
its nominal value, through the environment's physics methods, exactly as the robustness sweep
builds its points (`perturb.scaled_env_params`): `--scale 1.9` on a `--param length` run is
the sweep's longest pole. Both runs act from the same episode seed (the same initial state), and
each panel prints the run, the perturbation, the step, the return so far and the episode's return,
which is what `evaluate.episode_return` gives for that episode.

The episode runs in JAX (the run's own environment and policy, compiled); its states are then drawn
on the host:

- classic control (CartPole, Acrobot, MountainCar, Pendulum) by gymnasium's own renderer, fed with
  the JAX state (the states map 1:1) and the perturbed lengths it draws (CartPole's pole, Acrobot's
  links), headless: pygame draws into a surface, no display. gymnasium's pictures are the ones SB3
  and RL-Zoo3 users know, and no drawing code of ours can drift from the physics it shows;
- MuJoCo robots by MuJoCo's offscreen renderer with gymnasium's v4 camera settings, following the
  torso. That needs OpenGL without a display: EGL (Debian: libegl1, with Mesa's libegl-mesa0 on a
  machine without a GPU driver) or OSMesa (libosmesa6), chosen through MUJOCO_GL before MuJoCo is
  imported; where neither is installed the command stops with that message.

LunarLander and Brax's environments are not drawn (gymnasium's Box2D renderer needs Box2D's own
world, Brax has its own HTML viewer).
"""

from __future__ import annotations

import ctypes.util
import dataclasses
import os
import sys
import warnings

import numpy as np

CLASSIC = {  # task -> gymnasium id; what its renderer reads is set by `_draw_classic`
    "CartPole-v1": "CartPole-v1",
    "Acrobot-v1": "Acrobot-v1",
    "MountainCar-v0": "MountainCar-v0",
    "Pendulum-v1": "Pendulum-v1",
}
MUJOCO = {"Hopper-v4": "hopper_v4", "Walker2d-v4": "walker2d_v4", "HalfCheetah-v4": "half_cheetah_v4",
          "Ant-v4": "ant_v4"}  # task -> gymnasium's module holding its DEFAULT_CAMERA_CONFIG
OFFSCREEN = (("egl", "EGL"), ("osmesa", "OSMesa"))  # MUJOCO_GL value, the library it loads
OFFSCREEN_HELP = ("MuJoCo's offscreen renderer needs OpenGL without a display: EGL (Debian: apt-get install "
                  "libegl1 libegl-mesa0; a GPU driver's EGL works too) or OSMesa (apt-get install libosmesa6), "
                  "chosen with MUJOCO_GL=egl or MUJOCO_GL=osmesa")
FRAME_MS = 40  # per frame of the video: 25 frames per second
PANEL_TEXT = (20, 20, 20)


class RenderError(ValueError):
    """A run or a request that cannot be rendered here; the message says why and what would."""


@dataclasses.dataclass
class Episode:
    """One run's episode in the perturbed environment: what a panel shows."""

    label: str
    run_dir: str
    description: str  # the perturbation, e.g. "length ×1.9"
    rewards: np.ndarray  # [steps] of the episode, to its end
    frames: list  # RGB arrays: the initial state, then the state after every `every`-th step, and the last
    frame_steps: list  # the step each frame shows (0: the initial state)

    @property
    def total(self) -> float:
        return float(np.sum(self.rewards))


def _recorded(run_dir: str) -> dict:
    """config.json of a finished run directory (not a grid's top directory)."""
    from fedjax_rl.training.run_directory import RunDirectory

    try:
        recorded = RunDirectory.read_config(run_dir)
    except FileNotFoundError as error:
        raise RenderError(str(error)) from None
    if "grid" in recorded:
        points = sorted(name for name in os.listdir(run_dir) if "=" in name)
        raise RenderError(f"{run_dir} holds a grid of runs; render one of its points, e.g. "
                          f"{os.path.join(run_dir, points[0]) if points else run_dir + '/omega=...'}")
    if not RunDirectory.has_parameters(run_dir):
        raise RenderError(f"{run_dir} has no global_params.npz: the run has not finished (rerun its `fedjax-rl "
                          "train` command to finish it)")
    return recorded


def _check_drawable(env_name: str) -> None:
    if env_name not in CLASSIC and env_name not in MUJOCO:
        raise RenderError(f"cannot draw {env_name}: `render` draws {', '.join(CLASSIC)} (gymnasium's renderer) and "
                          f"{', '.join(MUJOCO)} (MuJoCo's offscreen renderer)")


def offscreen_gl(find_library=ctypes.util.find_library) -> str:
    """The MUJOCO_GL backend for offscreen rendering: the one set, else EGL or OSMesa, whichever
    library is installed (set in the environment before MuJoCo is imported, which reads it then).
    `RenderError` naming the packages where neither is."""
    chosen = os.environ.get("MUJOCO_GL", "").strip().lower()
    if chosen:
        return chosen
    for backend, library in OFFSCREEN:
        if find_library(library):
            if "mujoco" not in sys.modules:
                os.environ["MUJOCO_GL"] = backend
            return backend
    raise RenderError(f"cannot draw a MuJoCo robot on this machine: neither libEGL nor libOSMesa is installed. "
                      f"{OFFSCREEN_HELP}")


def _episode_program(env, agent, max_steps: int):
    """jit(shared params, env params, key) -> (states [max_steps], rewards [max_steps], ended [max_steps]):
    `evaluate.episode_return`'s episode step by step (the same keys and steps), keeping each step's
    state before any auto-reset (the state the episode reached, a fallen pole included)."""
    import jax
    import jax.numpy as jnp

    def episode(shared, params, key):
        reset_key, steps_key = jax.random.split(key)
        obs, state = env.reset(reset_key, params)

        def step(carry, step_key):
            obs, state, alive = carry
            key_step, _ = jax.random.split(step_key)  # as gymnax's `step` splits its key
            action = agent.greedy_action(shared, obs)  # the evaluation's policy: greedy, ready for the env
            next_obs, next_state, reward, terminated, _ = env.step_env(key_step, state, action, params)
            ended = terminated | env.is_truncated(next_state, params)
            return (next_obs, next_state, alive & ~ended), (next_state, jnp.where(alive, reward, 0.0), alive & ended)

        _, (states, rewards, ended) = jax.lax.scan(step, (obs, state, jnp.bool_(True)),
                                                   jax.random.split(steps_key, max_steps))
        return state, states, rewards, ended

    return jax.jit(episode)


def _load_policy(config, recorded: dict, run_dir: str, seed_index: int):
    """(trainer, the global model of the run's seed index `seed_index`) from global_params.npz."""
    import jax
    import jax.numpy as jnp

    from fedjax_rl.training import program
    from fedjax_rl.training.run_directory import RunDirectory

    num_seeds = recorded["num_seeds"]
    if not 0 <= seed_index < num_seeds:
        raise RenderError(f"--seed-index must be in [0, {num_seeds}) for {run_dir} ({num_seeds} seed(s)), "
                          f"got {seed_index}")
    trainer = program.make_trainer(config)
    shapes = jax.eval_shape(trainer.init, jax.random.key(0)).agents.learner.shared  # [K, ...]
    like = jax.tree.map(lambda s: jnp.zeros((num_seeds, *s.shape[1:]), s.dtype), shapes)
    params = RunDirectory.read_parameters(run_dir, like)  # [seeds, ...]: agent 0's
    return trainer, jax.tree.map(lambda leaf: leaf[seed_index], params)


def run_episode(run_dir: str, scale: float, episode_seed: int = 0, seed_index: int = 0, every: int = 1,
                max_frames: int | None = None, width: int | None = None) -> Episode:
    """The run's final global policy (its seed `seed_index`) for one episode in its task with every
    perturbed parameter at `scale` x nominal, drawn every `every` steps and at its last state (the
    first `max_frames` of those frames, if given). The return is the whole episode's."""
    import jax

    from fedjax_rl import envs
    from fedjax_rl.analysis import plots
    from fedjax_rl.core import perturb
    from fedjax_rl.training import records

    recorded = _recorded(run_dir)
    _check_drawable(recorded["env_name"])
    if recorded["env_name"] in MUJOCO:
        offscreen_gl()  # before the environment imports MuJoCo
    config = records.config_from_record(recorded)
    trainer, shared = _load_policy(config, recorded, run_dir, seed_index)
    env, nominal = envs.make(config.env_name, config.physics, config.engine)
    params = jax.tree.map(lambda leaf: leaf[0],
                          perturb.scaled_env_params(env, nominal, config.physics, np.array([scale])))
    max_steps = int(nominal.max_steps_in_episode)
    run_episode = _episode_program(env, trainer.agent, max_steps)
    first, states, rewards, ended = run_episode(shared, params, jax.random.key(episode_seed))
    ended = np.asarray(ended)
    length = int(np.argmax(ended)) + 1 if ended.any() else max_steps
    steps = list(range(0, length + 1, every))
    if steps[-1] != length:
        steps.append(length)
    if max_frames is not None and len(steps) > max_frames:
        steps = steps[:max_frames]
    states = jax.tree.map(np.asarray, states)
    pick = [jax.tree.map(np.asarray, first) if s == 0 else jax.tree.map(lambda x, s=s: x[s - 1], states)
            for s in steps]
    draw = _draw_classic if config.env_name in CLASSIC else _draw_mujoco
    frames = draw(config.env_name, env, params, pick, width)
    description = ", ".join(f"{name} ×{scale:g}" for name in config.physics)
    return Episode(label=plots.label(recorded), run_dir=run_dir, description=description,
                   rewards=np.asarray(rewards)[:length], frames=frames, frame_steps=steps)


def _draw_classic(env_name: str, env, params, states: list, width: int | None) -> list:
    """gymnasium's own drawing of each JAX state, with the perturbed lengths it draws."""
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # pygame draws into a surface: no display
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    import gymnasium

    gym_env = gymnasium.make(CLASSIC[env_name], render_mode="rgb_array").unwrapped
    if env_name == "CartPole-v1":
        gym_env.length, gym_env.x_threshold = float(params.length), float(params.x_threshold)
    elif env_name == "Acrobot-v1":
        gym_env.LINK_LENGTH_1, gym_env.LINK_LENGTH_2 = float(params.link_length_1), float(params.link_length_2)
    elif env_name == "MountainCar-v0":
        gym_env.min_position, gym_env.max_position = float(params.min_position), float(params.max_position)
        gym_env.goal_position = float(params.goal_position)
    frames = []
    for state in states:
        if env_name == "CartPole-v1":
            gym_env.state = np.array([state.x, state.x_dot, state.theta, state.theta_dot], np.float64)
        elif env_name == "Acrobot-v1":
            gym_env.state = np.array([state.joint_angle1, state.joint_angle2, state.velocity_1, state.velocity_2])
        elif env_name == "MountainCar-v0":
            gym_env.state = np.array([state.position, state.velocity])
        else:  # Pendulum-v1
            gym_env.state, gym_env.last_u = np.array([state.theta, state.theta_dot]), float(state.last_u)
        frames.append(_resized(gym_env.render(), width))
    gym_env.close()
    return frames


def _draw_mujoco(env_name: str, env, params, states: list, width: int | None) -> list:
    """MuJoCo's offscreen renderer at each state, through gymnasium's v4 camera, following the torso.
    Masses do not show, so the nominal model draws every perturbation."""
    import importlib

    import mujoco

    size = width or 480
    model = env.mj_model
    data = mujoco.MjData(model)
    try:
        renderer = mujoco.Renderer(model, size, size)
    except Exception as error:  # no usable OpenGL context (a missing library, no EGL device, ...)
        raise RenderError(f"MuJoCo's offscreen renderer failed (MUJOCO_GL={os.environ.get('MUJOCO_GL', '')!r}): "
                          f"{error}. {OFFSCREEN_HELP}") from None
    settings = importlib.import_module(f"gymnasium.envs.mujoco.{MUJOCO[env_name]}").DEFAULT_CAMERA_CONFIG
    camera = mujoco.MjvCamera()
    mujoco.mjv_defaultFreeCamera(model, camera)
    camera.type = mujoco.mjtCamera.mjCAMERA_TRACKING
    camera.trackbodyid = int(settings.get("trackbodyid", 1))
    camera.distance = float(settings.get("distance", camera.distance))
    camera.elevation = float(settings.get("elevation", -20.0))
    frames = []
    with renderer:
        for state in states:
            data.qpos[:], data.qvel[:] = np.asarray(state.qpos, np.float64), np.asarray(state.qvel, np.float64)
            mujoco.mj_forward(model, data)
            renderer.update_scene(data, camera)
            frames.append(renderer.render().copy())
    return frames


def _resized(frame: np.ndarray, width: int | None) -> np.ndarray:
    if width is None or width == frame.shape[1]:
        return frame
    from PIL import Image

    height = round(frame.shape[0] * width / frame.shape[1])
    return np.asarray(Image.fromarray(frame).resize((width, height), Image.LANCZOS))


def _font(size: int):
    """DejaVu Sans from matplotlib (a dependency): it has the ω of the runs' labels."""
    import matplotlib
    from PIL import ImageFont

    return ImageFont.truetype(os.path.join(matplotlib.get_data_path(), "fonts", "ttf", "DejaVuSans.ttf"), size)


def panel_lines(episode: Episode, step: int) -> list[str]:
    """The text of a panel at `step`: the run, the perturbation and its episode's return, the step and
    the return so far."""
    so_far = float(np.sum(episode.rewards[:step]))
    over = "  (episode over)" if step == len(episode.rewards) else ""
    return [episode.label, f"{episode.description}: episode return {episode.total:.1f}",
            f"step {step}: return so far {so_far:.1f}{over}"]


def compose(episodes: list[Episode]) -> list[np.ndarray]:
    """The video's frames: one panel per run, side by side, each with its run, the perturbation,
    the episode's return and, frame by frame, the step and the return so far. A run whose episode
    ended holds its last frame."""
    from PIL import Image, ImageDraw

    count = max(len(e.frames) for e in episodes)
    height = max(e.frames[0].shape[0] for e in episodes)
    font = _font(max(10, height // 28))
    frames = []
    for i in range(count):
        canvas = Image.new("RGB", (sum(e.frames[0].shape[1] for e in episodes) + 4 * (len(episodes) - 1), height),
                           (128, 128, 128))  # the gap between panels
        x = 0
        for e in episodes:
            j = min(i, len(e.frames) - 1)
            panel = Image.fromarray(e.frames[j])
            canvas.paste(panel, (x, 0))
            lines = panel_lines(e, e.frame_steps[j])
            # At the bottom, where CartPole has nothing to draw and the long pole's top stays in view,
            # on white over a MuJoCo floor.
            draw, text = ImageDraw.Draw(canvas), "\n".join(lines)
            height_of = draw.multiline_textbbox((0, 0), "\n".join(["Ag(ω)"] * len(lines)), font=font)[3]
            top = panel.height - 6 - height_of  # the same in every panel
            box = draw.multiline_textbbox((x + 6, top), text, font=font)
            draw.rectangle((box[0] - 3, box[1] - 3, box[2] + 3, box[3] + 3), fill=(255, 255, 255))
            draw.multiline_text((x + 6, top), text, fill=PANEL_TEXT, font=font)
            x += panel.width + 4
        frames.append(np.asarray(canvas))
    return frames


def write_video(frames: list[np.ndarray], path: str, frame_ms: int = FRAME_MS) -> str:
    """A GIF (Pillow) or, for a .mp4 path, an MP4 (imageio with imageio-ffmpeg)."""
    if path.lower().endswith(".mp4"):
        try:
            import imageio.v2 as imageio
            import imageio_ffmpeg  # noqa: F401  (the writer imageio needs for MP4)
        except ImportError:
            raise RenderError("writing an MP4 needs imageio-ffmpeg (pip install 'fedjax-rl[video]' or "
                              "pip install imageio-ffmpeg); a .gif path needs nothing more") from None
        even = [f[: f.shape[0] // 2 * 2, : f.shape[1] // 2 * 2] for f in frames]  # H.264 wants even sizes
        with warnings.catch_warnings():
            # imageio starts ffmpeg as a subprocess; JAX warns at any fork, but the child only execs ffmpeg.
            warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called")
            imageio.mimwrite(path, even, fps=1000 / frame_ms, macro_block_size=1)
        return path
    if not path.lower().endswith(".gif"):
        raise RenderError(f"--out must end in .gif or .mp4, got {path!r}")
    from PIL import Image

    images = [Image.fromarray(f) for f in frames]
    images[0].save(path, save_all=True, append_images=images[1:], duration=frame_ms, loop=0)
    return path


def render(run_dirs: list[str], out: str, scale: float = 1.9, episode_seed: int = 0, seed_index: int = 0,
           every: int = 1, max_frames: int | None = None, width: int | None = None) -> tuple[str, list[Episode]]:
    """One or two runs' final global policies, side by side, for one episode each from the same seed
    in their task at `scale` x the perturbed parameters; written to `out` (.gif or .mp4)."""
    from fedjax_rl.envs.base import check_scales

    if not 1 <= len(run_dirs) <= 2:
        raise RenderError(f"render shows one run or two side by side, got {len(run_dirs)}")
    try:
        check_scales(scale)
    except ValueError as error:
        raise RenderError(f"--scale: {error}") from None
    if every < 1 or (max_frames is not None and max_frames < 1) or (width is not None and width < 16):
        raise RenderError(f"--every and --max-frames must be >= 1 and --width >= 16, got {every}, {max_frames}, "
                          f"{width}")
    if not out.lower().endswith((".gif", ".mp4")):
        raise RenderError(f"--out must end in .gif or .mp4, got {out!r}")
    tasks = {}
    for run_dir in run_dirs:
        recorded = _recorded(run_dir)
        tasks[run_dir] = (recorded["env_name"], tuple(recorded["physics"]))
    if len(set(tasks.values())) > 1:
        raise RenderError("side by side needs runs of one task and perturbed parameter(s): "
                          + "; ".join(f"{d}: {name} {', '.join(p)}" for d, (name, p) in tasks.items()))
    episodes = [run_episode(d, scale, episode_seed, seed_index, every, max_frames, width) for d in run_dirs]
    if len({e.label for e in episodes}) < len(episodes):  # the same algorithm twice: say which run is which
        for e in episodes:
            e.label = f"{e.label}: {os.path.basename(os.path.normpath(e.run_dir))}"
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    return write_video(compose(episodes), out), episodes
