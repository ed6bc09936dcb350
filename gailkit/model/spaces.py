"""Which gymnasium spaces gailkit's networks take, checked without torch (`envs` and `gailkit infer` use
it too); the encoders themselves are in `gailkit.model.encoders`."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from gailkit.core import obs as obs_tree
from gailkit.core.errors import GailkitError

SUPPORTED = "Box, Discrete, MultiDiscrete, MultiBinary, or a Dict of those"


class UnsupportedSpace(GailkitError):
    """A gymnasium space no encoder fits."""


MIN_GREY_SIDE = 8
"""A 2-dimensional Box is a grey frame (one channel) when both sides have at least this many pixels;
smaller ones (a 2x3 table of counts) stay vectors."""


def is_image(space: gym.Space, kind: str = "auto") -> bool:
    """Whether `space` gets a CNN: a Box of uint8 (`auto`), or of any dtype (`cnn`), that is 3-dimensional
    (channels first or last), a grey frame (2-dimensional, both sides at least `MIN_GREY_SIDE`), or a stack
    of frames with channels (4-dimensional: `env.frame_stack` over colour frames, K x H x W x C or K x C x H x W)."""
    if not isinstance(space, gym.spaces.Box):
        return False
    shape = tuple(space.shape)
    if not (len(shape) in (3, 4) or (len(shape) == 2 and min(shape) >= MIN_GREY_SIDE)):
        return False
    return kind == "cnn" or (kind == "auto" and space.dtype == np.uint8)


def image_keys(space: gym.Space, kind: str = "auto") -> list[str | None]:
    """The parts of an observation a CNN reads: [None] for an image space, a Dict's image entries."""
    if isinstance(space, gym.spaces.Dict):
        return [k for k, sub in space.spaces.items() if is_image(sub, kind)]
    return [None] if is_image(space, kind) else []


def has_images(space: gym.Space, kind: str = "auto") -> bool:
    """Whether a CNN reads any of `space`: an image, or a Dict with an image entry."""
    return bool(image_keys(space, kind))


def one_line(space: gym.Space) -> str:
    """`str(space)` on one line (numpy prints an array of two dimensions over several)."""
    return " ".join(str(space).split())


def check_space(space: gym.Space, what: str = "observation space", supported: str = SUPPORTED) -> None:
    """Raise `UnsupportedSpace` (one line naming the space) unless some encoder fits `space`."""
    if isinstance(space, gym.spaces.Dict):
        for key, sub in space.spaces.items():
            if not obs_tree.is_entry_name(key):
                raise UnsupportedSpace(
                    f"{what} {one_line(space)}: entry {key!r} needs a name, a non-empty string without '/'"
                )
            if isinstance(sub, gym.spaces.Dict):
                raise UnsupportedSpace(
                    f"{what} {one_line(space)}: entry {key!r} is itself a Dict (one level of Dict is supported)"
                )
            check_space(sub, f"{what} entry {key!r}:")
        return
    if not isinstance(space, (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)):
        raise UnsupportedSpace(f"{what} {one_line(space)} is not supported ({supported} are)")
    if isinstance(space, gym.spaces.Box) and 0 in space.shape:
        raise UnsupportedSpace(f"{what} {one_line(space)} holds no values (an axis of length 0)")
    if isinstance(space, gym.spaces.Box) and space.shape == ():
        raise UnsupportedSpace(
            f"{what} {one_line(space)} has no axes (a 0-dimensional Box); give it shape (1,) in the env "
            "(gymnasium's ReshapeObservation does it for observations)"
        )
    if isinstance(space, gym.spaces.MultiDiscrete):
        _check_flat(space, what)


def check_action_space(space: gym.Space) -> None:
    """`check_space` for actions, and what a policy's head needs besides: one flat MultiDiscrete or
    MultiBinary (stable-baselines3's distributions take no other), a Box of finite bounds, no Dict."""
    what, supported = "action space", "Box, Discrete, MultiDiscrete, MultiBinary"
    if isinstance(space, gym.spaces.Dict):
        raise UnsupportedSpace(f"{what} {one_line(space)} is not supported ({supported} are)")
    check_space(space, what, supported)
    if isinstance(space, gym.spaces.MultiBinary):
        _check_flat(space, what)
    if isinstance(space, gym.spaces.Box) and not (np.isfinite(space.low).all() and np.isfinite(space.high).all()):
        raise UnsupportedSpace(
            f"{what} {one_line(space)} needs finite bounds (actions are clipped or squashed into them)"
        )


def _check_flat(space: gym.Space, what: str) -> None:
    """Refuse a MultiDiscrete or MultiBinary of two or more dimensions (stable-baselines3's policies take one),
    naming the flat space a gymnasium wrapper could give instead."""
    if len(space.shape or ()) == 1:
        return
    if isinstance(space, gym.spaces.MultiDiscrete):
        flat = f"MultiDiscrete({np.asarray(space.nvec).reshape(-1).tolist()})"
    else:
        flat = f"{type(space).__name__}({int(np.prod(space.shape or ()))})"
    raise UnsupportedSpace(
        f"{what} {one_line(space)} has {len(space.shape or ())} dimensions; stable-baselines3's policies take one: "
        f"flatten it (e.g. {flat} in a gymnasium wrapper)"
    )


def start_of(space: gym.Space) -> int | np.ndarray:
    """Where a Discrete's (an int) or MultiDiscrete's (an array of nvec's shape) values start; 0 for other
    spaces. The env, demo files and the ONNX graph carry the env's own values; a policy's heads, one-hot
    encodings and the actions in fragments count from 0 (value minus start)."""
    if isinstance(space, gym.spaces.Discrete):
        return int(space.start)
    if isinstance(space, gym.spaces.MultiDiscrete):
        start = np.asarray(getattr(space, "start", 0), dtype=np.int64)
        return np.broadcast_to(start, np.asarray(space.nvec).shape).copy()
    return 0


def has_start(space: gym.Space) -> bool:
    """Whether a Discrete or MultiDiscrete `space` (a Dict: any entry) counts from anywhere but 0."""
    if isinstance(space, gym.spaces.Dict):
        return any(has_start(sub) for sub in space.spaces.values())
    return bool(np.any(start_of(space) != 0))


def flat_dim(space: gym.Space) -> int:
    """Width of `preprocess(space, x)` flattened: one-hot widths for discrete spaces."""
    if isinstance(space, gym.spaces.Discrete):
        return int(space.n)
    if isinstance(space, gym.spaces.MultiDiscrete):
        return int(np.sum(space.nvec))
    if isinstance(space, gym.spaces.Dict):
        return sum(flat_dim(s) for s in space.spaces.values())
    return int(np.prod(space.shape or ()))


def env_action(action_space: gym.Space, acts: np.ndarray) -> np.ndarray:
    """What the env is given for a policy's actions: Box actions in the space's shape (a policy's are flat
    rows), clipped to the bounds (SB3 does the same) and in the Box's dtype (`in_box_dtype`); a Discrete or
    MultiDiscrete index plus the space's start (a policy's heads count from 0, the env's values from `start`)."""
    start = start_of(action_space)
    if np.any(start != 0):
        return np.asarray(acts) + start
    return in_box_dtype(action_space, clipped(action_space, acts))


def in_box_dtype(action_space: gym.Space, acts: Any) -> Any:
    """Actions in a Box's own dtype, as an env that checks `action_space.contains` takes them: rounded to the
    nearest value within the bounds for a Box of integers or booleans (a policy's Gaussian gives floats),
    cast for a float Box of another width; any other space's actions, and actions already in it, unchanged."""
    if not isinstance(action_space, gym.spaces.Box):
        return acts
    arr = np.asarray(acts)
    if arr.dtype == action_space.dtype:
        return acts
    if action_space.dtype.kind in "iub" and arr.dtype.kind == "f":
        low, high = action_space.low.astype(np.float64), action_space.high.astype(np.float64)
        arr = np.clip(np.rint(arr), np.ceil(low), np.floor(high))
    return arr.astype(action_space.dtype)


def clipped(action_space: gym.Space, acts: np.ndarray) -> np.ndarray:
    """Actions already in the env's values (a demo file's) as the env saw them: Box actions in the space's
    shape, clipped to the bounds; others unchanged."""
    if isinstance(action_space, gym.spaces.Box):
        return np.clip(np.reshape(acts, (-1, *action_space.shape)), action_space.low, action_space.high)
    return acts
