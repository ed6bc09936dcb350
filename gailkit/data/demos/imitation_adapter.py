"""Writing imitation's formats (its trajectory types, its dataset folders): the one place demos import imitation.

Reading them needs no imitation (`pickle_io` maps its types to gailkit's records, `arrow_io`
reads its folders with pyarrow); writing them does (extra `gailkit[imitation]`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from gailkit.core import fsutil
from gailkit.core import obs as obs_tree
from gailkit.core.errors import DemoError
from gailkit.data.demos.core import Demos


def _imitation(what: str):
    try:
        from imitation.data import serialize, types
    except ImportError:
        raise DemoError(
            f"writing {what} needs imitation: pip install 'gailkit[imitation]' "
            "(in an environment of its own: it pins gymnasium 0.29)"
        ) from None
    return serialize, types


def to_trajectories(demos: Demos) -> list:
    """One imitation `TrajectoryWithRew` (or `Trajectory` without rews) per episode.

    An episode's `terminal` is its last step's `terminated`; obs are the episode's obs plus the
    last next_obs.
    """
    if demos.acts is None:
        raise DemoError("imitation's trajectories need actions; these demos have none")
    _, types = _imitation("imitation trajectories")
    out = []
    bounds = demos.episode_bounds()
    for a, b in zip(bounds[:-1], bounds[1:]):
        obs: Any = obs_tree.concat(
            [obs_tree.take(demos.obs, slice(a, b)), obs_tree.take(demos.next_obs, slice(b - 1, b))]
        )
        if obs_tree.is_dict(obs):
            obs = types.DictObs(obs)
        kwargs = dict(obs=obs, acts=np.asarray(demos.acts[a:b]), infos=None, terminal=bool(demos.terminated[b - 1]))
        if demos.rews is not None:
            out.append(types.TrajectoryWithRew(rews=np.asarray(demos.rews[a:b], np.float32), **kwargs))
        else:
            out.append(types.Trajectory(**kwargs))
    return out


def write_dataset(demos: Demos, path: Path) -> None:
    """A folder as `imitation.data.serialize.save` writes it, replaced atomically."""
    serialize, _ = _imitation("imitation dataset folders")
    trajs = to_trajectories(demos)
    with fsutil.atomic_dir(path) as tmp:
        serialize.save(tmp, trajs)
