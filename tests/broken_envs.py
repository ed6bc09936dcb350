"""Envs that break gymnasium's API or their own spaces, the ways user envs do (for `tests/test_envs.py`).
Each is fine until `BREAKS_AT` steps into an episode, so that what the check catches is what a step
returned, not the first reset. `expert` is a scripted expert for all of them."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

BREAKS_AT = 3


class _Fine(gym.Env):
    observation_space = gym.spaces.Box(-1, 1, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._t = 0
        return self._obs(), {}

    def _obs(self) -> Any:
        return self.np_random.uniform(-1, 1, 3).astype(np.float32)

    def step(self, action):
        self._t += 1
        return self._obs(), 1.0, False, self._t >= 8, {}

    @property
    def broken(self) -> bool:
        return self._t >= BREAKS_AT


def expert(obs: Any) -> Any:
    return 0


class FloatsAndLists(_Fine):
    """Not broken: a float32 Box's observations as float64 arrays and as lists, numpy rewards, 0/1 flags."""

    def _obs(self) -> Any:
        x = self.np_random.uniform(-1, 1, 3)
        return x.tolist() if getattr(self, "_t", 0) % 2 else x

    def step(self, action):
        obs, _, terminated, truncated, info = super().step(action)
        return obs, np.float64(0.5), int(terminated), np.bool_(truncated), info


class WrongShape(_Fine):
    def _obs(self) -> Any:
        x = super()._obs()
        return x[:, None] if getattr(self, "_t", 0) >= BREAKS_AT else x


class NanObservation(_Fine):
    def _obs(self) -> Any:
        x = super()._obs()
        if getattr(self, "_t", 0) >= BREAKS_AT:
            x[1] = np.nan
        return x


class ArrayReward(_Fine):
    def step(self, action):
        obs, r, terminated, truncated, info = super().step(action)
        return obs, (np.array([r]) if self.broken else r), terminated, truncated, info


class NanReward(_Fine):
    def step(self, action):
        obs, r, terminated, truncated, info = super().step(action)
        return obs, (float("nan") if self.broken else r), terminated, truncated, info


class FourValues(_Fine):
    """gym < 0.26's step: (obs, reward, done, info)."""

    def step(self, action):
        obs, r, terminated, truncated, info = super().step(action)
        return (obs, r, terminated or truncated, info) if self.broken else (obs, r, terminated, truncated, info)


class ObservationOnlyReset(_Fine):
    """gym < 0.26's reset: the observation alone."""

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        return super().reset(seed=seed)[0]


class ArrayFlag(_Fine):
    def step(self, action):
        obs, r, terminated, truncated, info = super().step(action)
        return obs, r, (np.array([terminated, terminated]) if self.broken else terminated), truncated, info


class MissingDictEntry(_Fine):
    observation_space = gym.spaces.Dict(
        {"pos": gym.spaces.Box(-1, 1, (2,), np.float32), "mode": gym.spaces.Discrete(2)}
    )

    def _obs(self) -> Any:
        pos = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        return {"pos": pos} if getattr(self, "_t", 0) >= BREAKS_AT else {"pos": pos, "mode": 1}


class NoneInfo(_Fine):
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        return super().reset(seed=seed)[0], None


class TextReward(_Fine):
    def step(self, action):
        obs, r, terminated, truncated, info = super().step(action)
        return obs, ("1" if self.broken else r), terminated, truncated, info
