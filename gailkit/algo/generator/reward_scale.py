"""Rewards scaled by the running spread of their discounted sums, as SB3's `VecNormalize` scales an env's.

PPO's generator keeps one `RewardScale` across rounds (`ppo.reward_scale: returns`) and checkpoints it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.running_mean_std import RunningMeanStd


class RewardScale:
    """SB3's `VecNormalize` reward scaling for rewards that come a round at a time: each env's discounted sum of
    rewards so far (reset at every episode end), whose running variance (SB3's `RunningMeanStd`, merged a step at a
    time as `VecNormalize` merges it) gives the scale, 1 / sqrt(var + 1e-8), of the round's rewards."""

    CLIP = 10.0  # VecNormalize's clip_reward
    EPS = 1e-8

    def __init__(self, n_envs: int, gamma: float):
        self.gamma = gamma
        self.returns = np.zeros(n_envs, np.float64)
        self.rms = RunningMeanStd(shape=())

    def update(self, rewards: np.ndarray, dones: np.ndarray) -> float:
        """Merge a round's (T, E) rewards (and its (T, E) episode ends) into the statistics; the scale they give."""
        for r, done in zip(rewards, dones):
            self.returns = self.returns * self.gamma + r
            self.rms.update(self.returns)
            self.returns[done] = 0.0
        return float(1.0 / np.sqrt(self.rms.var + self.EPS))

    def state_dict(self) -> dict[str, Any]:
        rms = self.rms
        return {
            "returns": th.as_tensor(self.returns),
            "mean": float(rms.mean),
            "var": float(rms.var),
            "count": rms.count,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        returns = np.asarray(state["returns"], np.float64)
        if returns.shape != self.returns.shape:
            raise ValueError(
                f"the checkpoint's reward scale is for {returns.shape[0]} envs, the run has {len(self.returns)}"
            )
        mean, var, count = float(state["mean"]), float(state["var"]), float(state["count"])
        if not (np.isfinite(returns).all() and np.isfinite([mean, var, count]).all() and var >= 0 and count > 0):
            raise ValueError("the checkpoint's reward scale holds non-finite or negative statistics")
        self.returns = returns.copy()
        self.rms.mean, self.rms.var, self.rms.count = np.asarray(mean), np.asarray(var), count
