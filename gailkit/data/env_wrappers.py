"""What every env gailkit makes is wrapped in: a check of what it returns against gymnasium's API and its
own spaces (`Checked`), Atari's preprocessing and a frame stack when the settings name them (gymnasium's own
wrappers), and a Tuple observation seen as a Dict."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NoReturn

import gymnasium as gym
import numpy as np

from gailkit.config import EnvConfig
from gailkit.core import textparse
from gailkit.core.errors import EnvError, first_line
from gailkit.model.spaces import one_line


class TupleAsDict(gym.ObservationWrapper):
    """A Tuple observation as a Dict keyed "0", "1", ... (what every data path and the ONNX inputs carry;
    a scripted expert of such an env gets that dict)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        space = env.observation_space
        assert isinstance(space, gym.spaces.Tuple)
        self.observation_space = gym.spaces.Dict({str(i): sub for i, sub in enumerate(space.spaces)})

    def observation(self, observation: Any) -> dict[str, Any]:
        return {str(i): v for i, v in enumerate(observation)}


class Checked(gym.Wrapper):
    """What an env returns, checked as it returns it: `reset` an (observation, info) pair, `step` five values
    (gymnasium's API; an env written for gym < 0.26 returns the observation alone, and four values), every
    observation of its observation space's structure and shape with finite floats, a reward of one finite
    number, flags of one value each, an info dict. A breach is one line naming the env and what it returned
    (`EnvError`), where it would otherwise be a traceback deep in recording, training or an actor, or NaN in
    the policy's normalizer. Dtypes are not checked (a float64 vector of a float32 Box, a list, are taken)."""

    def __init__(self, env: gym.Env, name: str):
        super().__init__(env)
        self.name = name
        self._t = 0

    def _fail(self, what: str) -> NoReturn:
        raise EnvError(f"--env {self.name}: {what}")

    def reset(self, **kwargs: Any) -> Any:
        out: Any = self.env.reset(**kwargs)
        if isinstance(out, tuple) and len(out) == 2 and not isinstance(out[1], Mapping):
            self._fail(f"reset() returned an info of type {type(out[1]).__name__}; it is a dict")
        if not (isinstance(out, tuple) and len(out) == 2):
            self._fail(
                f"reset() returned {_kind(out)}; gymnasium's API returns (observation, info) (an env written "
                "for gym < 0.26 returns the observation alone)"
            )
        self._t = 0
        self._observation(out[0], "reset()")
        return out

    def step(self, action: Any) -> Any:
        out: Any = self.env.step(action)
        self._t += 1
        where = f"step() at step {self._t} of an episode"
        if not (isinstance(out, tuple) and len(out) == 5):
            self._fail(
                f"{where} returned {_kind(out)}; gymnasium's API returns 5 (observation, reward, terminated, "
                "truncated, info) (an env written for gym < 0.26 returns 4, with one done)"
            )
        obs, reward, terminated, truncated, info = out  # typed Any: the env's class may return anything
        self._observation(obs, where)
        if not (type(reward) in _NUMBERS and math.isfinite(reward)):
            number = _number(reward)
            if number is None or not math.isfinite(number):
                self._fail(f"{where} returned the reward {_shown(reward)}; a reward is one finite number")
        for flag, value in (("terminated", terminated), ("truncated", truncated)):
            if type(value) not in _FLAGS and _number(value) is None:
                self._fail(f"{where} returned {flag}={_shown(value)}; it is one bool")
        if type(info) is not dict and not isinstance(info, Mapping):
            self._fail(f"{where} returned an info of type {type(info).__name__}; it is a dict")
        return out

    def _observation(self, obs: Any, where: str) -> None:
        space = self.env.observation_space
        if type(obs) is np.ndarray and type(space) is gym.spaces.Box and obs.shape == space.shape:  # the usual case
            if obs.dtype.kind != "f" or math.isfinite(obs.sum()):
                return
        problem = _misfit(space, obs)
        if problem:
            self._fail(f"{where} returned an observation {problem}, where its observation_space is {one_line(space)}")


_NUMBERS = (float, int, np.float64, np.float32)
_FLAGS = (bool, np.bool_)


def _number(value: Any) -> float | None:
    """`value` as one number (a bool, int or float, or a 0-dimensional array of one), else None."""
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError):
        return None
    return float(arr.item()) if arr.ndim == 0 and arr.dtype.kind in "biuf" else None


def _kind(value: Any) -> str:
    if isinstance(value, tuple):
        return f"a tuple of {len(value)} values"
    return f"a value of type {type(value).__name__}"


def _shown(value: Any) -> str:
    return " ".join(textparse.shown(value).split())  # a numpy matrix's repr spans lines


def _misfit(space: gym.Space, obs: Any, key: str = "") -> str:
    """How `obs` does not fit `space`'s structure and shape (or holds NaN or inf), or "" when it fits."""
    at = f"entry {key!r} " if key else ""
    if isinstance(space, gym.spaces.Dict):
        if not isinstance(obs, Mapping) or set(obs) != set(space.spaces):
            keys = sorted(map(str, obs)) if isinstance(obs, Mapping) else None
            return f"{at}of type {type(obs).__name__}" + (f" with keys {keys}" if keys is not None else "")
        return next((m for k, sub in space.spaces.items() if (m := _misfit(sub, obs[k], f"{key}{k}"))), "")
    if isinstance(space, gym.spaces.Tuple):
        if not isinstance(obs, (tuple, list)) or len(obs) != len(space.spaces):
            return f"{at}of type {type(obs).__name__}" + (f" of {len(obs)}" if isinstance(obs, (tuple, list)) else "")
        return next((m for i, sub in enumerate(space.spaces) if (m := _misfit(sub, obs[i], f"{key}{i}"))), "")
    if not isinstance(space, (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)):
        return ""
    try:
        arr = np.asarray(obs)
    except (TypeError, ValueError):
        return f"{at}of type {type(obs).__name__}"
    if arr.dtype.kind not in "biuf":
        return f"{at}of dtype {arr.dtype}"
    if arr.shape != tuple(space.shape or ()) and not (isinstance(space, gym.spaces.Discrete) and arr.size == 1):
        return f"{at}of shape {arr.shape}"
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        return f"{at}holding NaN or inf"
    return ""


def wrapped(env: gym.Env, cfg: EnvConfig) -> gym.Env:
    """`env` with the preprocessing and frame stack `cfg` names (gymnasium's own wrappers); a Tuple
    observation becomes a Dict (`TupleAsDict`)."""
    if isinstance(env.observation_space, gym.spaces.Tuple):
        env = TupleAsDict(env)
    if cfg.preprocess == "atari":
        from gymnasium.wrappers import AtariPreprocessing

        try:
            env = AtariPreprocessing(env, noop_max=30, frame_skip=4, screen_size=84, grayscale_obs=True)
        except (ValueError, AssertionError, AttributeError, gym.error.DependencyNotInstalled) as e:
            env.close()
            raise EnvError(f"--env {cfg.id}: env.preprocess atari does not fit it ({first_line(e)})") from None
    if cfg.frame_stack > 1:
        try:
            from gymnasium.wrappers import FrameStackObservation
        except ImportError:  # gymnasium 0.29 (imitation's pin) names it FrameStack, with other padding
            env.close()
            raise EnvError(f"--env {cfg.id}: env.frame_stack needs gymnasium >= 1.0") from None
        env = FrameStackObservation(env, cfg.frame_stack)
    return env
