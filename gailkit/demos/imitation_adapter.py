"""The one place demos meet imitation's data types (so imitation can be replaced later)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gailkit import fsutil
from gailkit.demos.core import Demos


def to_trajectories(demos: Demos) -> list:
    """One imitation `TrajectoryWithRew` (or `Trajectory` without rews) per episode.

    An episode's `terminal` is its last step's `terminated`; obs are the episode's obs plus the
    last next_obs.
    """
    from imitation.data import types

    out = []
    bounds = demos.episode_bounds()
    for a, b in zip(bounds[:-1], bounds[1:]):
        obs = np.concatenate([demos.obs[a:b], demos.next_obs[b - 1 : b]])
        kwargs = dict(obs=obs, acts=np.asarray(demos.acts[a:b]), infos=None, terminal=bool(demos.terminated[b - 1]))
        if demos.rews is not None:
            out.append(types.TrajectoryWithRew(rews=np.asarray(demos.rews[a:b], np.float32), **kwargs))
        else:
            out.append(types.Trajectory(**kwargs))
    return out


def write_dataset(demos: Demos, path: Path) -> None:
    """A folder as `imitation.data.serialize.save` writes it, replaced atomically."""
    from imitation.data import serialize

    trajs = to_trajectories(demos)
    with fsutil.atomic_dir(path) as tmp:
        serialize.save(tmp, trajs)
