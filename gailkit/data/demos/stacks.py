"""Frame stacks: demo files hold one frame a step; the stacks an env with `env.frame_stack: K` observes
are rebuilt from each episode when the demos are read, exactly as gymnasium's `FrameStackObservation`
builds them (a new leading axis, oldest frame first, padded at reset with the episode's first frame).

A stacked Pong observation is 4 x 84 x 84 bytes; storing it would hold each frame four times in `obs`
and four more in `next_obs`. Files that already hold stacks (shape `(K, *frame)`) are read as they are.
"""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np

from gailkit.core import limits
from gailkit.core.errors import DemoError
from gailkit.data.demos.core import Demos, space_to_json


def frame_space(space: gym.Space) -> gym.spaces.Box:
    """One frame of a stacked Box (its leading axis dropped)."""
    if not isinstance(space, gym.spaces.Box) or len(space.shape) < 2:
        raise DemoError(f"frame stacks need a Box observation of 2 or more axes, not {space}")
    return gym.spaces.Box(space.low[0], space.high[0], dtype=space.dtype)  # type: ignore[arg-type]


def stored_space(space: gym.Space, k: int) -> gym.Space:
    """The observation space a demo file holds for an env observing `space` with a K-frame stack: one
    frame when K > 1, else `space` itself."""
    return frame_space(space) if k > 1 else space


def is_frames(d: Demos, stacked: gym.Space) -> bool:
    """Whether `d` holds single frames of the stacked space (rather than the stacks themselves)."""
    shape = tuple(stacked.shape or ())
    return len(shape) >= 2 and tuple(d.obs.shape[1:]) == shape[1:]


def rebuild(d: Demos, k: int, stacked: gym.Space) -> Demos:
    """`d` with `obs`/`next_obs` the K-frame stacks of its episodes; its episodes must be whole (a
    subsampled file has lost the frames before each kept step)."""
    where = d.meta.path or "demos"
    if not d.whole_episodes():
        raise DemoError(
            f"{where}: holds single frames, and env.frame_stack {k} rebuilds stacks from whole episodes; this "
            "file's episodes are not whole (subsampled or cut): record it with the frame stack, or set env.frame_stack 1"
        )
    bounds = d.episode_bounds()
    n = len(d)
    # the stacks hold each frame k times in obs and k more in next_obs: bounded before they are built
    limits.check_size(2 * n * k * int(d.obs[:1].nbytes), None, f"{where}: env.frame_stack {k} rebuilds")
    # row index of the frame at stack slot j of row i: the episode's row (step - (k-1-j)), clipped to its start
    starts = np.repeat(bounds[:-1], np.diff(bounds))
    rows = np.arange(n)[:, None] - (k - 1 - np.arange(k))[None, :]
    rows = np.maximum(rows, starts[:, None])
    obs = d.obs[rows]
    next_obs = np.concatenate([obs[:, 1:], d.next_obs[:, None]], axis=1)
    meta = dataclasses.replace(d.meta, observation_space=space_to_json(stacked))
    return dataclasses.replace(d, obs=obs, next_obs=next_obs, meta=meta)


def nbytes(d: Demos) -> int:
    """Bytes the demos' observation columns hold in memory."""
    return int(d.obs.nbytes + d.next_obs.nbytes)
