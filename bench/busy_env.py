"""CartPole whose every step also burns about 1 ms of CPU (a stand-in for a simulator step). Episodes end
at 500 steps as CartPole-v1's do (a class named by file gets no registered time limit)."""

import time

from gymnasium.envs.classic_control import CartPoleEnv


class BusyCartPole(CartPoleEnv):
    step_cost_s = 0.001
    max_episode_steps = 500

    def reset(self, *, seed=None, options=None):
        self._t = 0
        return super().reset(seed=seed, options=options)

    def step(self, action):
        end = time.perf_counter() + self.step_cost_s
        while time.perf_counter() < end:
            pass
        obs, reward, terminated, truncated, info = super().step(action)
        self._t += 1
        return obs, reward, terminated, truncated or self._t >= self.max_episode_steps, info
