"""Frame stacks: demo files hold one frame a step; the stacks an env with `env.frame_stack: K` observes
are rebuilt from each episode when the demos are read, exactly as gymnasium's `FrameStackObservation`
builds them (a new leading axis, oldest frame first, padded at reset with the episode's first frame).

A stacked Pong observation is 4 x 84 x 84 bytes; storing it would hold each frame four times in `obs`
and four more in `next_obs`. So neither files nor memory hold the stacks: the rebuilt `obs` and
`next_obs` are `FrameStacks` over one shared array of frames, built a minibatch at a time. Files that
already hold stacks (shape `(K, *frame)`) are read as they are.
"""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np

from gailkit.core import limits
from gailkit.core import obs as obs_tree
from gailkit.core.errors import DemoError
from gailkit.core.framestacks import FrameStacks
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
    """`d` with `obs`/`next_obs` the K-frame stacks of its episodes, held as `FrameStacks` (each frame once,
    built when a minibatch reads them); its episodes must be whole (a subsampled file has lost the frames
    before each kept step)."""
    where = d.meta.path or "demos"
    if not d.whole_episodes():
        raise DemoError(
            f"{where}: holds single frames, and env.frame_stack {k} rebuilds stacks from whole episodes; this "
            "file's episodes are not whole (subsampled or cut): record it with the frame stack, or set env.frame_stack 1"
        )
    bounds = d.episode_bounds()
    n = len(d)
    frames_in = np.asarray(d.obs)
    # bounded before anything is built: the frames, at most the last frame of every step, and two indexes
    limits.check_size(2 * n * (int(frames_in[:1].nbytes) + 8 * k), None, f"{where}: env.frame_stack {k} rebuilds")
    # row index of the frame at stack slot j of row i: the episode's row (step - (k-1-j)), clipped to its start
    starts = np.repeat(bounds[:-1], np.diff(bounds))
    rows = np.arange(n)[:, None] - (k - 1 - np.arange(k))[None, :]
    rows = np.maximum(rows, starts[:, None])
    # a step's next frame is the next row's frame within an episode (held once); an episode's last next
    # frame, or one that differs from the next row's, is held as a frame of its own
    follows = _next_is_next_row(d, frames_in)
    own = np.flatnonzero(~follows)
    frames = np.concatenate([frames_in, np.asarray(d.next_obs)[own]])
    last = np.arange(n, dtype=np.int64) + 1
    last[own] = n + np.arange(len(own))
    next_rows = np.concatenate([rows[:, 1:], last[:, None]], axis=1)
    meta = dataclasses.replace(d.meta, observation_space=space_to_json(stacked))
    return dataclasses.replace(d, obs=FrameStacks(frames, rows), next_obs=FrameStacks(frames, next_rows), meta=meta)


def _next_is_next_row(d: Demos, frames: np.ndarray, chunk: int = 4096) -> np.ndarray:
    """(N,) bool: row i's next frame equals row i + 1's frame, in the same episode (compared in chunks)."""
    n = len(d)
    out = np.zeros(n, bool)
    same = np.flatnonzero(d.episode_id[1:] == d.episode_id[:-1]) if n > 1 else np.zeros(0, np.int64)
    nxt = np.asarray(d.next_obs)
    for lo in range(0, len(same), chunk):
        i = same[lo : lo + chunk]
        out[i] = (nxt[i] == frames[i + 1]).reshape(len(i), -1).all(axis=1)
    return out


def nbytes(d: Demos) -> int:
    """Bytes the demos' observation columns hold in memory (frames shared by `obs` and `next_obs` once)."""
    if FrameStacks.share_frames(d.obs, d.next_obs):
        return int(d.obs.nbytes + d.next_obs.index.nbytes)
    return int(obs_tree.nbytes(d.obs) + obs_tree.nbytes(d.next_obs))


def built_nbytes(d: Demos) -> int:
    """Bytes the stacks would take built (`obs` and `next_obs`): what holding them as frames saves."""
    return 2 * len(d) * int(np.prod(obs_tree.first(d.obs).shape[1:])) * np.dtype(obs_tree.first(d.obs).dtype).itemsize
