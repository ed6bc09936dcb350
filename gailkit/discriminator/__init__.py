"""The GAIL discriminator: an MLP on (obs, acts[, next_obs]) with running input normalization, its loss, its rewards.

Convention: `logits_expert_is_high`, labels_expert_is_one; D = sigmoid(logit) is the probability
that a transition is the expert's. The network is laid out as imitation's `BasicRewardNet`
(`mlp.normalize_input` a `RunningNorm`, `mlp.dense0`, ..., `mlp.dense_final`, ReLU between), with
the same normalization arithmetic, so the two load each other's weights; `disc.net: imitation`
uses imitation's own class (extra `gailkit[imitation]`).

Inputs are one float matrix per batch (see `Features`): flattened obs, then actions (one-hot for
discrete spaces), then next obs, then, with absorbing states on, two 0/1 flags (obs is absorbing,
next obs is absorbing). An absorbing state (DAC, Kostrikov et al. 2019) stands for "after the
episode terminated": its observation part is zeros and its flag is 1.
"""

from __future__ import annotations

import copy
from typing import Any

import gymnasium as gym
import numpy as np
import torch as th
import torch.nn.functional as F
from torch import nn

from gailkit.config import DiscConfig
from gailkit.discriminator.nets import DiscriminatorNet, RunningNorm, _ImitationNet  # noqa: F401  (RunningNorm: a re-export)

REWARD_FNS = {
    "gail": lambda logits: F.softplus(logits),  # -log(1 - D): positive
    "negative": lambda logits: -F.softplus(-logits),  # log D: negative
    "airl": lambda logits: logits,  # log D - log(1 - D)
}


def choose_reward_fn(setting: str, terminated_fraction: float) -> str:
    """`auto` -> `gail` when most expert episodes end by time limit, else `airl` (see DiscConfig)."""
    if setting != "auto":
        return setting
    return "airl" if terminated_fraction > 0.5 else "gail"


class Features:
    """Turns transitions into the discriminator's input matrix (see the module docstring)."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        use_action: bool,
        use_next_state: bool,
        absorbing: bool,
    ):
        self.observation_space, self.action_space = observation_space, action_space
        self.use_action, self.use_next_state, self.absorbing = use_action, use_next_state, absorbing
        self.obs_dim = _flat_dim(observation_space)
        self.act_dim = _flat_dim(action_space)
        self.size = (
            self.obs_dim
            + (self.act_dim if use_action else 0)
            + (self.obs_dim if use_next_state else 0)
            + (2 if absorbing else 0)
        )

    def __call__(
        self,
        obs: np.ndarray,
        acts: np.ndarray | None,
        next_obs: np.ndarray | None,
        device: th.device,
        obs_absorbing: np.ndarray | None = None,
        next_absorbing: np.ndarray | None = None,
    ) -> th.Tensor:
        """(N, size) float32 on `device`. Absorbing rows get zero observation parts and flag 1."""
        n = len(obs)
        parts = [_encode(obs, self.observation_space, n)]
        if self.use_action:
            assert acts is not None, "a discriminator on actions needs them"
            parts.append(_encode(acts, self.action_space, n))
        if self.use_next_state:
            assert next_obs is not None, "a discriminator on next observations needs them"
            parts.append(_encode(next_obs, self.observation_space, n))
        x = th.cat([th.as_tensor(p) for p in parts], dim=1).to(device)
        if self.absorbing:
            a = th.as_tensor(np.zeros(n, bool) if obs_absorbing is None else obs_absorbing, device=device)
            b = th.as_tensor(np.zeros(n, bool) if next_absorbing is None else next_absorbing, device=device)
            x[a, : self.obs_dim] = 0.0
            if self.use_action:
                x[a, self.obs_dim : self.obs_dim + self.act_dim] = 0.0
            if self.use_next_state:
                x[b, x.shape[1] - self.obs_dim : x.shape[1]] = 0.0
            x = th.cat([x, a.float()[:, None], b.float()[:, None]], dim=1)
        return x

    def split(self, x: th.Tensor) -> tuple[th.Tensor, th.Tensor | None, th.Tensor | None]:
        """Inverse of `__call__` for nets that take the parts separately: (obs, acts, next_obs)."""
        i = self.obs_dim
        obs = x[:, :i]
        acts = next_obs = None
        if self.use_action:
            acts, i = x[:, i : i + self.act_dim], i + self.act_dim
        if self.use_next_state:
            next_obs = x[:, i : i + self.obs_dim]
        return obs, acts, next_obs


def _flat_dim(space: gym.Space) -> int:
    if isinstance(space, gym.spaces.Discrete):
        return int(space.n)
    if isinstance(space, gym.spaces.MultiDiscrete):
        return int(np.sum(space.nvec))
    return int(np.prod(space.shape or ()))


def _encode(arr: np.ndarray, space: gym.Space, n: int) -> np.ndarray:
    """(N, flat) float32: one-hot for (multi-)discrete spaces, images scaled to [0, 1], else as is."""
    arr = np.asarray(arr)
    if isinstance(space, gym.spaces.Discrete):
        out = np.zeros((n, int(space.n)), np.float32)
        out[np.arange(n), arr.reshape(n).astype(np.int64) - int(space.start)] = 1.0
        return out
    if isinstance(space, gym.spaces.MultiDiscrete):
        nvec = np.asarray(space.nvec).reshape(-1)
        flat = arr.reshape(n, -1).astype(np.int64)
        return np.concatenate([np.eye(k, dtype=np.float32)[flat[:, j]] for j, k in enumerate(nvec)], axis=1)
    out = arr.reshape(n, -1).astype(np.float32)
    if (
        isinstance(space, gym.spaces.Box)
        and space.dtype == np.uint8
        and np.all(space.low == 0)
        and np.all(space.high == 255)
    ):
        out = out / 255.0  # image observations, as SB3 and imitation scale them
    return out


class Discriminator:
    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        cfg: DiscConfig,
        device: str | th.device,
        reward_fn: str,
    ):
        self.cfg, self.reward_fn = cfg, reward_fn
        self.device = th.device(device)
        self.features = Features(observation_space, action_space, cfg.use_action, cfg.use_next_state, cfg.absorbing)
        if cfg.net == "imitation":
            self.net: nn.Module = _ImitationNet(observation_space, action_space, cfg, self.features)
        else:
            self.net = DiscriminatorNet(
                self.features.size, list(cfg.net_arch), cfg.spectral_norm, 2 if cfg.absorbing else 0
            )
        self.net.to(self.device)
        self.optimizer = th.optim.Adam(self.net.parameters(), lr=cfg.disc_lr)

    def preprocess(
        self,
        obs: np.ndarray,
        acts: np.ndarray | None,
        next_obs: np.ndarray | None,
        obs_absorbing: np.ndarray | None = None,
        next_absorbing: np.ndarray | None = None,
    ) -> th.Tensor:
        """(N, in_size) input matrix on the device (see `Features`)."""
        return self.features(obs, acts, next_obs, self.device, obs_absorbing, next_absorbing)

    def logits(self, x: th.Tensor) -> th.Tensor:
        return self.net(x)

    @th.no_grad()
    def reward(self, x: th.Tensor, chunk: int = 65536) -> th.Tensor:
        """(N,) generator rewards for preprocessed transitions, in batched passes (no stat updates)."""
        self.net.eval()
        try:
            out = [REWARD_FNS[self.reward_fn](self.logits(x[i : i + chunk])) for i in range(0, len(x), chunk)]
            return th.cat(out) if out else th.zeros(0, device=self.device)
        finally:
            self.net.train()

    def train_step(self, expert: th.Tensor, gen: th.Tensor) -> dict[str, float]:
        """One Adam step of binary cross-entropy (+ entropy bonus, gradient penalty, label smoothing)."""
        self.net.train()
        n_exp = len(expert)
        logits = self.logits(th.cat([expert, gen]))
        labels = th.cat(
            [
                th.full((n_exp,), 1.0 - self.cfg.label_smoothing, device=self.device),
                th.zeros(len(gen), device=self.device),
            ]
        )
        loss = F.binary_cross_entropy_with_logits(logits, labels)
        entropy = F.binary_cross_entropy_with_logits(logits, th.sigmoid(logits))
        total = loss - self.cfg.ent_coef * entropy
        if self.cfg.grad_penalty > 0:
            total = total + self.cfg.grad_penalty * self._gradient_penalty(expert, gen)
        self.optimizer.zero_grad()
        total.backward()
        self.optimizer.step()
        with th.no_grad():
            acc_exp = (logits[:n_exp] > 0).float().mean()
            acc_gen = (logits[n_exp:] < 0).float().mean()
        return {
            "disc/loss": loss.item(),
            "disc/acc_expert": acc_exp.item(),
            "disc/acc_gen": acc_gen.item(),
            "disc/entropy": entropy.item(),
            "disc/logit_expert": logits[:n_exp].mean().item(),
            "disc/logit_gen": logits[n_exp:].mean().item(),
        }

    def _gradient_penalty(self, expert: th.Tensor, gen: th.Tensor) -> th.Tensor:
        """`(||grad_x D(x)|| - 1)^2` on interpolates of expert and generator inputs (WGAN-GP);
        the input normalization is held fixed for this pass."""
        n = min(len(expert), len(gen))
        alpha = th.rand(n, 1, device=self.device)
        mixed = (alpha * expert[:n] + (1 - alpha) * gen[:n]).requires_grad_(True)
        self.net.eval()
        try:
            out = self.logits(mixed)
        finally:
            self.net.train()
        (grad,) = th.autograd.grad(out.sum(), mixed, create_graph=True)
        return ((grad.norm(2, dim=1) - 1) ** 2).mean()

    def state_dict(self) -> dict[str, Any]:
        return {"net": self.net.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.net.load_state_dict(state["net"])
        self.optimizer.load_state_dict(copy.deepcopy(state["optimizer"]))  # torch shares, not copies, its tensors
