"""Small envs of every common gymnasium space, each with a scripted expert (`module:function`), for the
end-to-end space tests. Episodes are 16 steps; the reward is 1 when the action is the expert's."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

LENGTH = 16


class _Base(gym.Env):
    def __init__(self) -> None:
        self._t = 0
        self._state = np.zeros(3, np.float32)

    def _obs(self) -> Any:
        raise NotImplementedError

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._t = 0
        self._state = self.np_random.uniform(-1, 1, 3).astype(np.float32)
        return self._obs(), {}

    def step(self, action):
        reward = float(np.all(np.asarray(action) == np.asarray(type(self).expert(self._obs()))))
        self._t += 1
        self._state = self.np_random.uniform(-1, 1, 3).astype(np.float32)
        return self._obs(), reward, False, self._t >= LENGTH, {}


class DiscreteObs(_Base):
    """Discrete(6) observations, Discrete(3) actions: the expert plays obs mod 3."""

    observation_space = gym.spaces.Discrete(6)
    action_space = gym.spaces.Discrete(3)

    def _obs(self) -> Any:
        return int((self._state[0] + 1) * 2.99)

    @staticmethod
    def expert(obs: Any) -> Any:
        return int(obs) % 3


class MultiDiscreteAct(_Base):
    """Box(3) observations, MultiDiscrete([3, 2]) actions: the signs and size of the first two entries."""

    observation_space = gym.spaces.Box(-1, 1, (3,), np.float32)
    action_space = gym.spaces.MultiDiscrete([3, 2])

    def _obs(self) -> Any:
        return self._state.copy()

    @staticmethod
    def expert(obs: Any) -> Any:
        return np.array([int((obs[0] + 1) * 1.49), int(obs[1] > 0)], np.int64)


class MultiBinaryAct(_Base):
    """Box(3) observations, MultiBinary(3) actions: which entries are positive."""

    observation_space = gym.spaces.Box(-1, 1, (3,), np.float32)
    action_space = gym.spaces.MultiBinary(3)

    def _obs(self) -> Any:
        return self._state.copy()

    @staticmethod
    def expert(obs: Any) -> Any:
        return (np.asarray(obs) > 0).astype(np.int8)


class ImageObs(_Base):
    """uint8 frames (12, 12, 3), height x width x channels, with one bright column; Discrete(2)
    actions: whether it is in the left half."""

    observation_space = gym.spaces.Box(0, 255, (12, 12, 3), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def _obs(self) -> Any:
        frame = np.zeros((12, 12, 3), np.uint8)
        frame[:, int((self._state[0] + 1) * 5.99)] = 255
        return frame

    @staticmethod
    def expert(obs: Any) -> Any:
        frame = np.asarray(obs)[-1] if np.asarray(obs).ndim == 4 else np.asarray(obs)  # a stack: its newest frame
        return int(np.argmax(frame[0, :, 0]) < 6)


class ImageCHW(ImageObs):
    """ImageObs's frames channels first (3, 12, 12)."""

    observation_space = gym.spaces.Box(0, 255, (3, 12, 12), np.uint8)

    def _obs(self) -> Any:
        return np.ascontiguousarray(super()._obs().transpose(2, 0, 1))

    @staticmethod
    def expert(obs: Any) -> Any:
        return ImageObs.expert(np.moveaxis(np.asarray(obs), -3, -1))  # channels last, a stack's too


class BigImageObs(ImageObs):
    """The same task in frames of 40 x 40 (SB3's CnnPolicy needs 36 pixels and more)."""

    observation_space = gym.spaces.Box(0, 255, (40, 40, 3), np.uint8)

    def _obs(self) -> Any:
        frame = np.zeros((40, 40, 3), np.uint8)
        frame[:, int((self._state[0] + 1) * 19.99)] = 255
        return frame

    @staticmethod
    def expert(obs: Any) -> Any:
        return int(np.argmax(np.asarray(obs)[0, :, 0]) < 20)


class GreyObs(ImageObs):
    """The same task in grey frames of 16 x 16 without a channel axis (AtariPreprocessing without a frame
    stack gives such frames): a CNN reads them as one channel."""

    observation_space = gym.spaces.Box(0, 255, (16, 16), np.uint8)

    def _obs(self) -> Any:
        frame = np.zeros((16, 16), np.uint8)
        frame[:, int((self._state[0] + 1) * 7.99)] = 255
        return frame

    @staticmethod
    def expert(obs: Any) -> Any:
        return int(np.argmax(np.asarray(obs)[0]) < 8)


class ScalarObs(_Base):
    """A 0-dimensional Box observation (a bare scalar): refused in one line."""

    observation_space = gym.spaces.Box(-1, 1, (), np.float32)
    action_space = gym.spaces.Discrete(2)

    def _obs(self) -> Any:
        return np.asarray(self._state[0], np.float32)


class ImageBoxAct(_Base):
    """uint8 frames (8, 8, 1) with one bright column, Box(1) actions (SAC's kind): the expert's action is
    the column's place in [-1, 1], and the reward 1 minus the action's distance from it."""

    observation_space = gym.spaces.Box(0, 255, (8, 8, 1), np.uint8)
    action_space = gym.spaces.Box(-1, 1, (1,), np.float32)

    def _obs(self) -> Any:
        frame = np.zeros((8, 8, 1), np.uint8)
        frame[:, int((self._state[0] + 1) * 3.99)] = 255
        return frame

    def step(self, action):
        target = type(self).expert(self._obs())
        obs, _, terminated, truncated, info = super().step(action)
        return obs, 1.0 - float(np.abs(np.asarray(action) - target).sum()), terminated, truncated, info

    @staticmethod
    def expert(obs: Any) -> Any:
        frame = np.asarray(obs)[-1] if np.asarray(obs).ndim == 4 else np.asarray(obs)  # a stack: its newest frame
        return np.array([np.argmax(frame[0, :, 0]) / 3.5 - 1], np.float32)


class DictObs(_Base):
    """Dict observations (a Box and a Discrete), Discrete(2) actions."""

    observation_space = gym.spaces.Dict(
        {"pos": gym.spaces.Box(-1, 1, (2,), np.float32), "mode": gym.spaces.Discrete(2)}
    )
    action_space = gym.spaces.Discrete(2)

    def _obs(self) -> Any:
        return {"pos": self._state[:2].copy(), "mode": int(self._state[2] > 0)}

    @staticmethod
    def expert(obs: Any) -> Any:
        return int((obs["pos"][0] > 0) != bool(obs["mode"]))


class DictMixedObs(_Base):
    """Dict observations of every kind of entry (a uint8 frame, a vector, a Discrete), Box(1) actions:
    the expert steers toward the frame's bright column, flipped by the mode."""

    observation_space = gym.spaces.Dict(
        {
            "frame": gym.spaces.Box(0, 255, (8, 8, 1), np.uint8),
            "vec": gym.spaces.Box(-1, 1, (2,), np.float32),
            "mode": gym.spaces.Discrete(2),
        }
    )
    action_space = gym.spaces.Box(-1, 1, (1,), np.float32)

    def _obs(self) -> Any:
        frame = np.zeros((8, 8, 1), np.uint8)
        frame[:, int((self._state[0] + 1) * 3.99)] = 255
        return {"vec": self._state[1:].copy(), "mode": int(self._state[2] > 0), "frame": frame}

    def step(self, action):
        want = type(self).expert(self._obs())
        reward = float(1.0 - abs(float(np.asarray(action).reshape(-1)[0]) - float(want[0])))
        self._t += 1
        self._state = self.np_random.uniform(-1, 1, 3).astype(np.float32)
        return self._obs(), reward, False, self._t >= LENGTH, {}

    @staticmethod
    def expert(obs: Any) -> Any:
        column = int(np.argmax(np.asarray(obs["frame"])[0, :, 0]))
        sign = 1.0 if int(obs["mode"]) else -1.0
        return np.array([sign * (column - 3.5) / 3.5], np.float32)


class TupleObs(_Base):
    """Tuple observations (a Box and a Discrete), Discrete(2) actions; gailkit sees them as a Dict keyed
    "0", "1" (its scripted expert too)."""

    observation_space = gym.spaces.Tuple((gym.spaces.Box(-1, 1, (2,), np.float32), gym.spaces.Discrete(2)))
    action_space = gym.spaces.Discrete(2)

    def _obs(self) -> Any:
        return (self._state[:2].copy(), int(self._state[2] > 0))

    def step(self, action):
        obs = self._obs()
        reward = float(int(action) == type(self).expert({"0": obs[0], "1": obs[1]}))
        self._t += 1
        self._state = self.np_random.uniform(-1, 1, 3).astype(np.float32)
        return self._obs(), reward, False, self._t >= LENGTH, {}

    @staticmethod
    def expert(obs: Any) -> Any:
        return int((obs["0"][0] > 0) != bool(obs["1"]))


class NestedObs(_Base):
    """A Dict holding a Tuple: no encoder fits it (refused in one line)."""

    observation_space = gym.spaces.Dict({"inner": gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Discrete(3)))})
    action_space = gym.spaces.Discrete(2)

    def _obs(self) -> Any:
        return {"inner": (0, 1)}

    @staticmethod
    def expert(obs: Any) -> Any:
        return 0


class BigDictObs(_Base):
    """A Dict of a 40 x 40 frame and a Discrete (SB3's MultiInputPolicy puts a NatureCNN on the frame)."""

    observation_space = gym.spaces.Dict(
        {"frame": gym.spaces.Box(0, 255, (40, 40, 3), np.uint8), "mode": gym.spaces.Discrete(2)}
    )
    action_space = gym.spaces.Discrete(2)

    def _obs(self) -> Any:
        frame = np.zeros((40, 40, 3), np.uint8)
        frame[:, int((self._state[0] + 1) * 19.99)] = 255
        return {"frame": frame, "mode": int(self._state[2] > 0)}

    @staticmethod
    def expert(obs: Any) -> Any:
        return int((np.argmax(np.asarray(obs["frame"])[0, :, 0]) < 20) != bool(obs["mode"]))


class DictBoxAct(DictObs):
    """DictObs's observations with Box(1) actions (for SB3's off-policy MultiInputPolicy experts)."""

    action_space = gym.spaces.Box(-1, 1, (1,), np.float32)

    @staticmethod
    def expert(obs: Any) -> Any:
        return np.array([np.sign(obs["pos"][0]) * (1 if obs["mode"] else -1)], np.float32)


class MatrixBoxAct(_Base):
    """Box(3, 2) float64 observations and Box(2, 2) actions (a policy's Gaussian is a flat row of 4; the env
    takes the matrix): the expert's action is the observation's first two rows, clipped."""

    observation_space = gym.spaces.Box(-1, 1, (3, 2), np.float64)
    action_space = gym.spaces.Box(-1, 1, (2, 2), np.float32)

    def _obs(self) -> Any:
        return np.stack([self._state, self._state[::-1]], axis=1).astype(np.float64)

    def step(self, action):
        assert np.shape(action) == (2, 2), np.shape(action)
        want = type(self).expert(self._obs())
        obs, _, terminated, truncated, info = super().step(want)
        return obs, 1.0 - float(np.abs(np.asarray(action) - want).mean()), terminated, truncated, info

    @staticmethod
    def expert(obs: Any) -> Any:
        return np.asarray(obs, np.float32)[:2]


class MultiDiscreteObs(_Base):
    """MultiDiscrete([3, 4]) observations, Discrete(3) actions: the expert plays the first entry."""

    observation_space = gym.spaces.MultiDiscrete([3, 4])
    action_space = gym.spaces.Discrete(3)

    def _obs(self) -> Any:
        return np.array([int((self._state[0] + 1) * 1.49), int((self._state[1] + 1) * 1.99)], np.int64)

    @staticmethod
    def expert(obs: Any) -> Any:
        return int(np.asarray(obs)[0])


class MultiBinaryMatrixObs(_Base):
    """MultiBinary((2, 3)) observations, Discrete(2) actions: whether the first row's first entry is set."""

    observation_space = gym.spaces.MultiBinary([2, 3])
    action_space = gym.spaces.Discrete(2)

    def _obs(self) -> Any:
        row = (self._state > 0).astype(np.int8)
        return np.stack([row, row[::-1]])

    @staticmethod
    def expert(obs: Any) -> Any:
        return int(np.asarray(obs)[0, 0])


class UnboundedAct(_Base):
    """Box(-inf, inf) actions: no policy head can clip or squash into them (refused in one line)."""

    observation_space = gym.spaces.Box(-1, 1, (3,), np.float32)
    action_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)

    def _obs(self) -> Any:
        return self._state.copy()

    @staticmethod
    def expert(obs: Any) -> Any:
        return np.zeros(2, np.float32)


class BoolObs(_Base):
    """Box(0, 1, (3,), bool) observations (Arrow has no bool tensors), Discrete(2) actions: the first flag."""

    observation_space = gym.spaces.Box(0, 1, (3,), bool)
    action_space = gym.spaces.Discrete(2)

    def _obs(self) -> Any:
        return self._state > 0

    @staticmethod
    def expert(obs: Any) -> Any:
        return int(np.asarray(obs)[0])


class IntBoxAct(_Base):
    """Box(0, 4, (2,), int64) actions, checked as a strict env checks them (`action_space.contains`: a
    policy's float actions fail it): the expert steps the first entry by the observation, the second stays 1."""

    observation_space = gym.spaces.Box(-1, 1, (3,), np.float32)
    action_space = gym.spaces.Box(0, 4, (2,), np.int64)

    def step(self, action):
        assert self.action_space.contains(action), (action, np.asarray(action).dtype)
        return super().step(action)

    def _obs(self) -> Any:
        return self._state.copy()

    @staticmethod
    def expert(obs: Any) -> Any:
        return np.array([int((obs[0] + 1) * 2.49), 1], np.int64)


def bool_obs_expert(obs: Any) -> Any:
    return BoolObs.expert(obs)


def matrix_box_expert(obs: Any) -> Any:
    return MatrixBoxAct.expert(obs)


def multi_discrete_obs_expert(obs: Any) -> Any:
    return MultiDiscreteObs.expert(obs)


def multi_binary_matrix_expert(obs: Any) -> Any:
    return MultiBinaryMatrixObs.expert(obs)


def tuple_expert(obs: Any) -> Any:
    return TupleObs.expert(obs)


def nested_expert(obs: Any) -> Any:
    return 0


def unbounded_expert(obs: Any) -> Any:
    return UnboundedAct.expert(obs)


def dict_mixed_expert(obs: Any) -> Any:
    return DictMixedObs.expert(obs)


def discrete_obs_expert(obs: Any) -> Any:
    return DiscreteObs.expert(obs)


def multi_discrete_expert(obs: Any) -> Any:
    return MultiDiscreteAct.expert(obs)


def multi_binary_expert(obs: Any) -> Any:
    return MultiBinaryAct.expert(obs)


def scalar_expert(obs: Any) -> Any:
    return int(float(obs) > 0)


def grey_expert(obs: Any) -> Any:
    return GreyObs.expert(obs)


def image_expert(obs: Any) -> Any:
    return ImageObs.expert(obs)


def dict_expert(obs: Any) -> Any:
    return DictObs.expert(obs)


class GuessTheStart(gym.Env):
    """One step: the start state is a draw of Discrete(1000) from the env's generator, the reward is 1 when the
    action equals it. A random policy scores 1/1000 on average; a random policy whose actions share the
    env's seed would score 1 every time."""

    observation_space = gym.spaces.Discrete(1000)
    action_space = gym.spaces.Discrete(1000)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._start = int(self.np_random.integers(1000))
        return 0, {}

    def step(self, action):
        return 0, float(int(action) == self._start), True, False, {}


class Endless(_Base):
    """Box(3) observations, Discrete(2) actions, and no end of its own (neither terminates nor truncates):
    an env class named by file gets no registered time limit."""

    observation_space = gym.spaces.Box(-1, 1, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def _obs(self) -> Any:
        return self._state.copy()

    def step(self, action):
        obs, reward, terminated, _, info = super().step(action)
        return obs, reward, terminated, False, info

    @staticmethod
    def expert(obs: Any) -> Any:
        return int(obs[0] > 0)


def endless_expert(obs: Any) -> Any:
    return Endless.expert(obs)


def image_box_expert(obs: Any) -> Any:
    return ImageBoxAct.expert(obs)


class _Strict(_Base):
    """An env that refuses an action outside its space (as many envs index tables with it)."""

    def step(self, action):
        if not self.action_space.contains(np.asarray(action, self.action_space.dtype)):
            raise ValueError(f"action {action!r} outside {self.action_space}")
        return super().step(action)


class ShiftedDiscrete(_Strict):
    """Discrete(6, start=-2) observations, Discrete(3, start=1) actions: values that do not count from 0."""

    observation_space = gym.spaces.Discrete(6, start=-2)
    action_space = gym.spaces.Discrete(3, start=1)

    def _obs(self) -> Any:
        return int((self._state[0] + 1) * 2.99) - 2

    @staticmethod
    def expert(obs: Any) -> Any:
        return (int(obs) + 2) % 3 + 1


class ShiftedDict(_Strict):
    """Dict observations of a MultiDiscrete([3, 4], start=[-1, 5]) and a Discrete(2, start=7), actions
    MultiDiscrete([3, 2], start=[-1, 10])."""

    observation_space = gym.spaces.Dict(
        {
            "grid": gym.spaces.MultiDiscrete([3, 4], start=[-1, 5]),
            "mode": gym.spaces.Discrete(2, start=7),
        }
    )
    action_space = gym.spaces.MultiDiscrete([3, 2], start=[-1, 10])

    def _obs(self) -> Any:
        grid = np.array([int((self._state[0] + 1) * 1.49) - 1, int((self._state[1] + 1) * 1.99) + 5], np.int64)
        return {"grid": grid, "mode": 7 + int(self._state[2] > 0)}

    @staticmethod
    def expert(obs: Any) -> Any:
        return np.array([int(obs["grid"][0]), 10 + int(obs["mode"]) - 7], np.int64)


def shifted_discrete_expert(obs: Any) -> Any:
    return ShiftedDiscrete.expert(obs)


def shifted_dict_expert(obs: Any) -> Any:
    return ShiftedDict.expert(obs)
