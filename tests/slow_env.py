"""CartPole whose step takes a few milliseconds, so a test can act while a round is under way."""

import time

import gymnasium
import numpy as np
from gymnasium.envs.classic_control import CartPoleEnv


class SlowCartPole(CartPoleEnv):
    def step(self, action):
        time.sleep(0.004)
        return super().step(action)


class SlowBox(gymnasium.Env):
    """A continuous-action env whose step takes 80 ms (a slow simulator, for `generator: auto`)."""

    observation_space = gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        time.sleep(0.08)
        return np.clip(np.asarray(action, np.float32), -1, 1), 0.0, False, False, {}


class StepRaises(SlowBox):
    """A continuous-action env that must never be stepped (choosing a generator does not time the env)."""

    def step(self, action):
        raise RuntimeError("stepped")
