"""CartPole whose every step also burns about 1 ms of CPU (a stand-in for a simulator step)."""

import time

from gymnasium.envs.classic_control import CartPoleEnv


class BusyCartPole(CartPoleEnv):
    step_cost_s = 0.001

    def step(self, action):
        end = time.perf_counter() + self.step_cost_s
        while time.perf_counter() < end:
            pass
        return super().step(action)
