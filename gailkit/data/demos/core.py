"""The in-memory demo type: columns of transitions, plus what the file said about its env."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from gailkit.core import obs as obs_tree
from gailkit.core import textparse
from gailkit.core.errors import DemoError
from gailkit.core.framestacks import FrameStacks

FORMAT_VERSION = 1
COLUMNS = ("obs", "acts", "next_obs", "terminated", "truncated", "episode_id", "step", "rews")


@dataclasses.dataclass
class DemoMeta:
    """What a demo file says about itself (every field may be unknown)."""

    env_id: str | None = None
    observation_space: dict[str, Any] | None = None
    """The space as `space_to_json` writes it."""
    action_space: dict[str, Any] | None = None
    source: str | None = None
    """Where the demos came from: an expert file, a scripted expert's name."""
    expert_return: float | None = None
    """The expert policy's own mean return, evaluated when the demos were recorded (deterministic
    actions, fresh seeds); what normalized scores are measured against when present."""
    expert_return_std: float | None = None
    expert_episodes: int | None = None
    """Episodes behind `expert_return`."""
    expert_return_of: str | None = None
    """Set when `expert_return` was carried over from another file (`demos subsample`: the source's)."""
    sampled: bool | None = None
    """Whether the recorded actions were sampled from the expert (true) or its deterministic ones."""
    recorded_with: str | None = None
    """The env pipeline `demos record` played (`env.preprocess=atari env.frame_stack=4`); None: the env as is."""
    gailkit_version: str | None = None
    format: str = ""
    """How the file was read: arrow, parquet, pickle/dict, pickle/trajectories, imitation-dataset, ..."""
    path: str = ""
    ends_from_dones: bool = False
    """The file marks episode ends as `dones` alone, which cannot tell a time limit from a termination
    (set by the reader; `demos.load` reads ends at the env's time limit as truncations)."""

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.pop("format")
        d.pop("path")
        d.pop("ends_from_dones")
        d["format_version"] = FORMAT_VERSION
        return d

    @classmethod
    def from_json(cls, d: Any, fmt: str, path: str) -> DemoMeta:
        """From a file's metadata; a field of the wrong type is a DemoError naming the file and field."""
        if not isinstance(d, dict):
            raise DemoError(f"{path}: metadata 'gailkit' is a {type(d).__name__}, expected a mapping")
        out = {}
        for key, kind in _META_TYPES.items():
            value = d.get(key)
            if value is None:
                continue
            if (
                not isinstance(value, kind)
                or (kind is not bool and isinstance(value, bool))
                or (isinstance(value, float) and not math.isfinite(value))
            ):
                raise DemoError(
                    f"{path}: metadata field '{key}' is {textparse.shown(value)}, expected a {getattr(kind, '__name__', 'number')}"
                )
            out[key] = value
        return cls(**out, format=fmt, path=path)


_META_TYPES: dict[str, Any] = {
    "env_id": str,
    "observation_space": dict,
    "action_space": dict,
    "source": str,
    "gailkit_version": str,
    "expert_return": (int, float),
    "expert_return_std": (int, float),
    "expert_episodes": int,
    "expert_return_of": str,
    "sampled": bool,
    "recorded_with": str,
}


@dataclasses.dataclass
class Demos:
    """Expert transitions, one row per step, episodes stored contiguously.

    Arrays (N transitions):
      obs, next_obs: (N, *obs_shape), or a dict of those (one per entry of a Dict space);
      acts: (N, *act_shape), or None for demos without actions
        (observations only: learning from observation);
      terminated, truncated: (N,) bool, true only on an episode's last step;
      episode_id: (N,) int64; step: (N,) int64, 0.. within the episode;
      rews: (N,) float32 or None (the env's reward as recorded; never used for training).
    """

    obs: obs_tree.Obs
    acts: np.ndarray | None
    next_obs: obs_tree.Obs
    terminated: np.ndarray
    truncated: np.ndarray
    episode_id: np.ndarray
    step: np.ndarray
    rews: np.ndarray | None = None
    meta: DemoMeta = dataclasses.field(default_factory=DemoMeta)

    def __len__(self) -> int:
        return obs_tree.length(self.obs)

    @property
    def dones(self) -> np.ndarray:
        return self.terminated | self.truncated

    def fields(self) -> dict[str, Any]:
        """Field name -> its array (a Dict observation: its dict of arrays), the absent ones left out."""
        return {name: getattr(self, name) for name in COLUMNS if getattr(self, name) is not None}

    def columns(self) -> dict[str, np.ndarray]:
        """Column name -> array; a Dict observation gives one column per entry (`obs/key`)."""
        return {label: arr for name, x in self.fields().items() for label, arr in obs_tree.items(x, name)}

    @property
    def has_actions(self) -> bool:
        return self.acts is not None

    def episode_bounds(self) -> np.ndarray:
        """(E + 1,) row offsets: episode e is rows `[b[e], b[e + 1])`."""
        if len(self) == 0:
            return np.zeros(1, dtype=np.int64)
        starts = np.flatnonzero(np.diff(self.episode_id) != 0) + 1
        return np.concatenate([[0], starts, [len(self)]]).astype(np.int64)

    def episode_lengths(self) -> np.ndarray:
        return np.diff(self.episode_bounds())

    def whole_episodes(self, checks: int = 1000) -> bool:
        """Whether the episodes are whole: each starts at step 0, counts up by one, ends done, and each
        transition's next observation is the next row's observation (checked on up to `checks` pairs
        drawn evenly). Subsampled or cut files fail it, and their rewards sum to no episode's return."""
        if len(self) == 0:
            return False
        bounds = self.episode_bounds()
        if (self.step[bounds[:-1]] != 0).any() or not self.dones[bounds[1:] - 1].all():
            return False
        same = np.flatnonzero(self.episode_id[1:] == self.episode_id[:-1])
        if (self.step[same + 1] != self.step[same] + 1).any():
            return False
        picks = same[np.linspace(0, len(same) - 1, min(checks, len(same))).astype(np.int64)] if len(same) else same
        nxt, obs = obs_tree.take(self.next_obs, picks), obs_tree.take(self.obs, picks + 1)
        return all(np.array_equal(a, b) for (_, a), (_, b) in zip(obs_tree.items(nxt, ""), obs_tree.items(obs, "")))

    def episode_returns(self) -> np.ndarray | None:
        """Each episode's return, or None without rewards or whole episodes (`whole_episodes`)."""
        if self.rews is None or not self.whole_episodes():
            return None
        bounds = self.episode_bounds()
        if len(bounds) < 2:
            return np.zeros(0)
        return np.add.reduceat(self.rews.astype(np.float64), bounds[:-1])

    @property
    def n_episodes(self) -> int:
        return len(self.episode_bounds()) - 1


def episode_columns(dones: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`(episode_id, step)` for contiguous episodes that end where `dones` (N,) is true."""
    dones = np.asarray(dones, dtype=bool)
    ends = np.concatenate([[0], np.cumsum(dones)[:-1]]) if len(dones) else np.zeros(0, np.int64)
    episode_id = ends.astype(np.int64)
    starts = (
        np.flatnonzero(np.concatenate([[True], episode_id[1:] != episode_id[:-1]]))
        if len(dones)
        else np.zeros(0, np.int64)
    )
    step = np.arange(len(dones), dtype=np.int64)
    if len(dones):
        step -= np.repeat(starts, np.diff(np.append(starts, len(dones))))
    return episode_id, step


def concat(parts: list[Demos], meta: DemoMeta) -> Demos:
    """Join demos from several files; episode ids are renumbered so they stay unique."""
    if len(parts) == 1:
        return dataclasses.replace(parts[0], meta=meta)
    ids, offset = [], 0
    for part in parts:
        _, inverse = np.unique(part.episode_id, return_inverse=True)
        ids.append(inverse.astype(np.int64) + offset)
        offset += int(inverse.max()) + 1 if len(part) else 0
    has_rews = all(p.rews is not None for p in parts)
    obs, next_obs = obs_tree.concat([p.obs for p in parts]), obs_tree.concat([p.next_obs for p in parts])
    if all(FrameStacks.share_frames(p.obs, p.next_obs) for p in parts):
        next_obs = FrameStacks(obs.frames, next_obs.index)  # the same frames at the same offsets: held once
    return Demos(
        obs=obs,
        acts=np.concatenate([p.acts for p in parts]) if all(p.acts is not None for p in parts) else None,
        next_obs=next_obs,
        terminated=np.concatenate([p.terminated for p in parts]),
        truncated=np.concatenate([p.truncated for p in parts]),
        episode_id=np.concatenate(ids),
        step=np.concatenate([p.step for p in parts]),
        rews=np.concatenate([p.rews for p in parts]) if has_rews else None,
        meta=meta,
    )


from gailkit.data.demos.space_json import (  # noqa: E402, F401  (re-exports: the demos' spaces as JSON)
    MAX_SPACE_SIZE,
    describe_space,
    shape_of,
    space_from_json,
    space_to_json,
)
