"""CartPole whose step takes a few milliseconds, so a test can act while a round is under way."""

import time

from gymnasium.envs.classic_control import CartPoleEnv


class SlowCartPole(CartPoleEnv):
    def step(self, action):
        time.sleep(0.004)
        return super().step(action)
