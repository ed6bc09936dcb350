"""`gailkit evaluate RUN --video FILE|DIR`: one episode of a policy as an animated GIF or an MP4
(a folder gets `episode-0.mp4`).

The env is made with `render_mode="rgb_array"` (its own kwargs kept) and reset with the evaluation's
first seed, so the video shows the first evaluated episode. Frames go to imageio (GIF through
Pillow; MP4 through imageio-ffmpeg, both in the `video` extra), written atomically. (gymnasium's
`RecordVideo` would need moviepy; imageio writes the same files with less.) CartPole and the other classic-control envs
render through pygame (extra `gailkit[video]`); MuJoCo envs on a machine without a display need
`MUJOCO_GL=egl` (or `osmesa`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from gailkit.config import EnvConfig
from gailkit.core import fsutil
from gailkit.core.errors import EnvError, GailkitError, first_line
from gailkit.data import envs

MAX_FRAMES = 5000
SUFFIXES = (".gif", ".mp4")


class VideoError(GailkitError):
    """A video that cannot be made: the env does not render, or the format has no writer."""


def record(
    act: Callable[[Any], Any],
    env_cfg: EnvConfig,
    out: str | Path,
    seed: int = 0,
    allow_code: bool = True,
    fps: int | None = None,
) -> dict[str, Any]:
    """Play one episode of `act` from `seed` and write its frames to `out`; its return and frame count."""
    out = check_target(out)
    frames, ret, env_fps = _frames(act, env_cfg, seed, allow_code)
    fps = fps or env_fps
    _write(frames, out, fps)
    return {"video": str(out), "frames": len(frames), "return": ret, "fps": fps}


def check_target(out: str | Path) -> Path:
    """`out` if a video may be written there (before anything is evaluated); one line otherwise."""
    text, out = str(out), Path(out)
    is_video = out.suffix.lower() in SUFFIXES and not text.endswith("/")
    if not is_video and (out.is_dir() or text.endswith("/") or not out.suffix):  # a folder: an MP4 in it
        if out.exists() and not out.is_dir():
            raise VideoError(f"--video {out}: not a folder, and no .gif or .mp4 suffix")
        out = out / "episode-0.mp4"
        if out.parent.is_dir():
            return fsutil.check_writable_target(out, "--video")
        return out  # the folder is made when the video is written
    if out.suffix.lower() not in SUFFIXES:
        raise VideoError(f"--video {out}: expected a .gif or .mp4 file, or a folder")
    return fsutil.check_writable_target(out, "--video")


def _render_cfg(env_cfg: EnvConfig) -> EnvConfig:
    return dataclasses.replace(env_cfg, kwargs={**env_cfg.kwargs, "render_mode": "rgb_array"})


def _frames(act: Callable[[Any], Any], env_cfg: EnvConfig, seed: int, allow_code: bool) -> tuple[list, float, int]:
    """The episode's frames, its return, and the env's own `render_fps` (30 when it names none)."""
    import os

    for driver in ("SDL_VIDEODRIVER", "SDL_AUDIODRIVER"):  # pygame renders off screen, silently
        os.environ.setdefault(driver, "dummy")
    try:
        env = envs.make_factory(_render_cfg(env_cfg), allow_code)()
    except EnvError as e:
        raise VideoError(f"--video: {env_cfg.id} cannot be made to render frames ({e})") from None
    try:
        obs, _ = env.reset(seed=seed)
        frames, total, done = [_frame(env, env_cfg)], 0.0, False
        while not done and len(frames) < MAX_FRAMES:
            obs, reward, terminated, truncated, _ = env.step(envs.step_action(act(obs), env.action_space))
            total, done = total + float(reward), terminated or truncated
            frames.append(_frame(env, env_cfg))
        return frames, total, int(env.metadata.get("render_fps") or 30)
    finally:
        env.close()


def _frame(env: Any, env_cfg: EnvConfig) -> np.ndarray:
    try:
        frame = env.render()
    except Exception as e:  # noqa: BLE001 - the env's renderer (pygame, OpenGL) said no: one line
        first = first_line(e)
        raise VideoError(f"--video: {env_cfg.id} cannot render frames ({first})") from None
    arr = np.asarray(frame) if frame is not None else None
    if arr is None or arr.ndim != 3 or arr.shape[2] not in (3, 4):
        raise VideoError(f"--video: {env_cfg.id} gives no RGB frames with render_mode='rgb_array'")
    return arr[..., :3].astype(np.uint8)


def _write(frames: list[np.ndarray], out: Path, fps: int) -> None:
    try:
        import imageio.v3 as iio
    except ImportError:
        raise VideoError("--video needs imageio: pip install 'gailkit[video]'") from None
    out.parent.mkdir(parents=True, exist_ok=True)
    fsutil.check_writable_target(out, "--video")
    with fsutil.atomic_path(out, suffix=out.suffix) as tmp:
        try:
            if out.suffix.lower() == ".gif":
                iio.imwrite(tmp, np.stack(frames), extension=".gif", duration=1000 / fps, loop=0)
            else:
                iio.imwrite(tmp, np.stack(frames), extension=".mp4", fps=fps)
        except (ImportError, OSError, ValueError, RuntimeError) as e:
            if out.suffix.lower() == ".mp4":
                raise VideoError(f"--video {out}: writing MP4 needs imageio-ffmpeg ({first_line(e)})") from None
            raise VideoError(f"--video {out}: {first_line(e)}") from None
