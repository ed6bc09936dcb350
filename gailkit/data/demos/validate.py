"""Checking demos against an env's spaces before any training; each problem names file, column, row."""

from __future__ import annotations

import dataclasses
import re
import warnings
from typing import Any

import gymnasium as gym
import numpy as np

from gailkit.core import obs as obs_tree
from gailkit.core.errors import DemoError
from gailkit.data.demos.core import Demos, shape_of, space_from_json


class DemoWarning(UserWarning):
    """Something in the demos is suspicious but usable (e.g. actions outside the Box bounds)."""


def _first(mask: np.ndarray) -> int:
    flat = mask.reshape(len(mask), -1).any(axis=1) if mask.ndim > 1 else mask
    return int(np.flatnonzero(flat)[0])


def check_structure(d: Demos) -> None:
    """Episode layout: non-empty, equal-length columns, contiguous episodes, ends only at the end."""
    where = d.meta.path or "demos"
    n = len(d)
    if n == 0:
        raise DemoError(f"{where}: holds no transitions (empty file)")
    for name, arr in d.columns().items():
        if len(arr) != n:
            raise DemoError(f"{where}: column '{name}' has {len(arr)} rows, 'obs' has {n} (ragged columns)")
    if obs_tree.shapes(d.obs, 1) != obs_tree.shapes(d.next_obs, 1):
        raise DemoError(
            f"{where}: column 'next_obs' has shape {obs_tree.shapes(d.next_obs, 1)} per row, "
            f"'obs' has {obs_tree.shapes(d.obs, 1)}"
        )
    new_episode = np.concatenate([[True], d.episode_id[1:] != d.episode_id[:-1]])
    expected_step = np.where(new_episode, 0, np.concatenate([[0], d.step[:-1] + 1]))
    bad = d.step != expected_step
    if bad.any():
        r = _first(bad)
        raise DemoError(
            f"{where}: column 'step' row {r} is {d.step[r]}, expected {expected_step[r]} "
            f"(episode {d.episode_id[r]} is ragged: missing, repeated or interleaved steps)"
        )
    starts = d.episode_id[new_episode]
    if len(np.unique(starts)) != len(starts):
        dup = d.episode_id[new_episode][np.flatnonzero(np.bincount(np.unique(starts, return_inverse=True)[1]) > 1)[0]]
        raise DemoError(f"{where}: column 'episode_id': episode {dup} is split into several runs of rows")
    last = np.concatenate([new_episode[1:], [True]])
    early = d.dones & ~last
    if early.any():
        r = _first(early)
        raise DemoError(
            f"{where}: row {r} ends its episode (terminated/truncated) but episode {d.episode_id[r]} goes on"
        )


def _check_finite(arr: np.ndarray, column: str, where: str) -> None:
    if np.issubdtype(arr.dtype, np.floating):
        bad = ~np.isfinite(arr)
        if bad.any():
            r = _first(bad)
            raise DemoError(f"{where}: column '{column}' row {r} is not finite (NaN or inf)")


def _check_against(arr: Any, space: gym.Space, column: str, where: str) -> Any:
    """Shape, dtype and range of one column against `space`; returns it cast to the space's dtype (a
    Dict space: each of its entries' columns, `column/key`, against its entry)."""
    if isinstance(space, gym.spaces.Dict) or obs_tree.is_dict(arr):
        if not (isinstance(space, gym.spaces.Dict) and obs_tree.is_dict(arr)):
            has = f"entries {sorted(arr)}" if obs_tree.is_dict(arr) else "one array"
            raise DemoError(f"{where}: column '{column}' holds {has}, the env's space is {space}")
        if set(arr) != set(space.spaces):
            raise DemoError(
                f"{where}: column '{column}' has entries {sorted(arr)}, the env's Dict space has {sorted(space.spaces)}"
            )
        return {k: _check_against(arr[k], sub, f"{column}{obs_tree.SEP}{k}", where) for k, sub in space.spaces.items()}
    want = shape_of(space)
    if tuple(arr.shape[1:]) != want:
        raise DemoError(
            f"{where}: column '{column}' has shape {tuple(arr.shape[1:])} per row, the env's space {space} has {want}"
        )
    if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
        raise DemoError(f"{where}: column '{column}' has dtype {arr.dtype}, expected numbers for {space}")
    _check_finite(arr, column, where)
    if isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)):
        if np.issubdtype(arr.dtype, np.floating):
            raise DemoError(f"{where}: column '{column}' has dtype {arr.dtype}, expected integers for {space}")
        if isinstance(space, gym.spaces.Discrete):
            low, high = space.start, space.start + space.n - 1
        elif isinstance(space, gym.spaces.MultiDiscrete):
            low = np.asarray(getattr(space, "start", 0))
            high = low + np.asarray(space.nvec) - 1
        else:
            low, high = 0, 1
        bad = (arr < low) | (arr > high)
        if bad.any():
            r = _first(bad)
            raise DemoError(f"{where}: column '{column}' row {r} is {arr[r]}, outside {space}")
        return arr.astype(space.dtype, copy=False)
    if isinstance(space, gym.spaces.Box):
        out = arr.astype(space.dtype, copy=False)
        bad = (out < space.low) | (out > space.high)
        if bad.any():
            count = int(bad.reshape(len(bad), -1).any(axis=1).sum())
            warnings.warn(
                f"{where}: column '{column}': {count} of {len(arr)} rows outside the env's bounds "
                f"(first at row {_first(bad)})"
                + ("; they are clipped when used as actions" if column == "acts" else ""),
                DemoWarning,
                stacklevel=3,
            )
        return out
    raise DemoError(
        f"{where}: the env's space {space} is not supported (Box, Discrete, MultiDiscrete, MultiBinary are)"
    )


def validate(d: Demos, observation_space: gym.Space, action_space: gym.Space) -> Demos:
    """Raise `DemoError` on the first problem; return the demos cast to the spaces' dtypes."""
    check_structure(d)
    where = d.meta.path or "demos"
    obs = _check_against(d.obs, observation_space, "obs", where)
    next_obs = _check_against(d.next_obs, observation_space, "next_obs", where)
    acts = None if d.acts is None else _check_against(d.acts, action_space, "acts", where)
    if d.rews is not None:
        _check_finite(d.rews, "rews", where)
    return dataclasses.replace(d, obs=obs, next_obs=next_obs, acts=acts)


def fits(d: Demos, observation_space: gym.Space, action_space: gym.Space) -> bool:
    """Whether the per-row shapes match the spaces (used to pick files without env metadata)."""
    if obs_tree.is_dict(d.obs) or isinstance(observation_space, gym.spaces.Dict):
        want = {k: shape_of(s) for k, s in getattr(observation_space, "spaces", {}).items()}
        obs_fits = obs_tree.is_dict(d.obs) and obs_tree.shapes(d.obs, 1) == want
    else:
        obs_fits = tuple(d.obs.shape[1:]) == shape_of(observation_space)
    return obs_fits and (d.acts is None or tuple(d.acts.shape[1:]) == shape_of(action_space))


def check(d: Demos, spaces: tuple[gym.Space, gym.Space] | None = None) -> Demos:
    """What `train` checks: against `spaces`, else against the spaces the file's own metadata names,
    else the episode structure and finiteness alone (a file with no metadata)."""
    where = d.meta.path or "demos"
    if spaces is None and d.meta.observation_space is not None and d.meta.action_space is not None:
        try:
            spaces = (space_from_json(d.meta.observation_space), space_from_json(d.meta.action_space))
        except (ValueError, KeyError, TypeError) as e:
            raise DemoError(f"{where}: metadata names a space gailkit cannot read ({type(e).__name__}: {e})") from None
    if spaces is not None:
        return validate(d, *spaces)
    check_structure(d)
    for column in ("obs", "acts", "next_obs", "rews"):
        arr = getattr(d, column)
        if arr is not None:
            for name, a in obs_tree.items(arr, column):
                _check_finite(np.asarray(a), name, where)
    return d


def recorded_with_hint(e: DemoError, d: Demos) -> DemoError:
    """`e` with the settings the file says it was recorded with (`DemoMeta.recorded_with`), when they are
    settings: a file's words are quoted only if they read `env.preprocess=...` or `env.frame_stack=...`."""
    said = (d.meta.recorded_with or "").split()[:2]
    if not said or not all(re.fullmatch(r"env\.(preprocess|frame_stack)=\w{1,16}", w) for w in said):
        return e
    flags = " ".join(f"--set {w}" for w in said)
    return DemoError(f"{e} (the file was recorded on the env with {' '.join(said)}: {flags})")
