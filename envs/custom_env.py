"""`CustomEnv`: the original prototype's toy env, on the gymnasium 0.29 API.

Observations and actions are `Box(-1, 1, (2,))`. Each observation is drawn uniformly at random,
independently of the action; an episode lasts `max_steps` steps and pays 1.0 on the last step
only. The reward ignores actions, so returns say nothing about a policy: what it is for is
imitation of `expert_action`, a fixed mapping from observation to action, and the metric is the
mean absolute action error against that mapping (a uniform random policy scores 2/3).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np


def expert_action(obs: np.ndarray) -> np.ndarray:
    """The scripted expert: rotate the observation by 90 degrees, `(x, y) -> (-y, x)`.

    Works on one observation `(2,)` or a batch `(n, 2)`.
    """
    obs = np.asarray(obs, dtype=np.float32)
    return np.stack([-obs[..., 1], obs[..., 0]], axis=-1)


class CustomEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, max_steps: int = 8, render_mode: str | None = None):
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.max_steps = max_steps
        self.render_mode = render_mode
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self._t = 0

    def _draw(self) -> np.ndarray:
        return self.np_random.uniform(-1.0, 1.0, size=2).astype(np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._t = 0
        return self._draw(), {}

    def step(self, action):
        self._t += 1
        terminated = self._t >= self.max_steps
        reward = 1.0 if terminated else 0.0
        return self._draw(), reward, terminated, False, {}
