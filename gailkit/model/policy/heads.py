"""What `gailkit export` traces: observation -> (deterministic action, value, log_prob of that action)."""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import torch as th
from stable_baselines3.common.policies import ActorCriticPolicy

from gailkit.model.spaces import start_of


def deterministic_head(pol: Any) -> th.nn.Module:
    """`DeterministicHead`, or `squashed.SquashedHead` for SAC's actor (what export traces)."""
    if isinstance(pol, ActorCriticPolicy):
        return DeterministicHead(pol)
    from gailkit.model.policy import squashed

    return squashed.SquashedHead(pol)


class DeterministicHead(th.nn.Module):
    """Raw observation -> (deterministic action, value, log_prob of that action), as plain tensor ops.

    The deterministic action is the argmax for Discrete spaces (per entry for MultiDiscrete), logit > 0
    for MultiBinary (SB3's rounding of the probability), and the Gaussian mean clipped to the Box bounds
    for continuous ones; what `gailkit export` traces into ONNX.
    """

    low: th.Tensor  # buffers, for Box actions
    high: th.Tensor
    start: th.Tensor
    has_value = True

    def __init__(self, pol: ActorCriticPolicy):
        super().__init__()
        self.pol = pol
        space = pol.action_space
        self.nvec: list[int] = []
        if isinstance(space, gym.spaces.Discrete):
            self.kind = "discrete"
        elif isinstance(space, gym.spaces.MultiDiscrete) and np.asarray(space.nvec).ndim == 1:
            self.kind, self.nvec = "multi_discrete", [int(k) for k in space.nvec]
        elif isinstance(space, gym.spaces.MultiBinary) and np.ndim(space.n) == 0:
            self.kind = "multi_binary"
        elif isinstance(space, gym.spaces.Box):
            self.kind = "box"
            if pol.use_sde:
                raise ValueError("policies with gSDE are not exportable")
            self.shape = tuple(space.shape)  # the policy's mean is a flat row; the env takes this shape
            self.register_buffer("low", th.as_tensor(space.low, dtype=th.float32).reshape(-1))
            self.register_buffer("high", th.as_tensor(space.high, dtype=th.float32).reshape(-1))
        else:
            raise ValueError(f"action space {space} is not exportable (Box, Discrete, MultiDiscrete, MultiBinary are)")
        self.discrete = self.kind != "box"
        # the heads count from 0; the graph's action is the env's value (plus a Discrete's or MultiDiscrete's start)
        self.register_buffer("start", th.as_tensor(start_of(space), dtype=th.int64))
        self.shifted = bool(np.any(start_of(space) != 0))  # 0 for every other kind

    def forward(self, obs: Any) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        features = self.pol.extract_features(obs, self.pol.features_extractor)
        latent_pi, latent_vf = self.pol.mlp_extractor(features)
        out = self.pol.action_net(latent_pi)
        if self.kind == "discrete":
            action = th.argmax(out, dim=-1)
            log_prob = th.log_softmax(out, dim=-1).gather(-1, action.unsqueeze(-1)).squeeze(-1)
        elif self.kind == "multi_discrete":
            parts = th.split(out, self.nvec, dim=-1)
            picks = [th.argmax(p, dim=-1) for p in parts]
            action = th.stack(picks, dim=-1)
            log_prob = sum(
                (th.log_softmax(p, dim=-1).gather(-1, a.unsqueeze(-1)).squeeze(-1) for p, a in zip(parts, picks)),
                th.zeros_like(out[..., 0]),
            )
        elif self.kind == "multi_binary":
            ones = out > 0
            action = ones.long()
            log_prob = th.where(ones, th.nn.functional.logsigmoid(out), th.nn.functional.logsigmoid(-out)).sum(-1)
        else:
            action = th.minimum(th.maximum(out, self.low), self.high).reshape(-1, *self.shape)
            log_std = self.pol.log_std.expand_as(out)  # at the mean, the Gaussian's quadratic term is 0
            log_prob = (-log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        if self.shifted:
            action = action + self.start
        return action, self.pol.value_net(latent_vf).squeeze(-1), log_prob
