"""The GAIL discriminator: a net on structured transitions (obs, acts[, next_obs], absorbing flags), its loss, its rewards.

Convention: `logits_expert_is_high`, labels_expert_is_one; D = sigmoid(logit) is the probability
that a transition is the expert's. It takes a `Batch` (see `batch`): observations as the env gives
them, which the encoder factory's encoder turns into features (flattened vectors, one-hot discrete
values, a CNN's features for images, one encoder per Dict entry); then an MLP laid out as
imitation's `BasicRewardNet` (`mlp.normalize_input` a `RunningNorm`, `mlp.dense0`, ...,
`mlp.dense_final`, ReLU between), with the same normalization arithmetic, so for vector spaces the
two load each other's weights; `disc.net: imitation` uses imitation's own class (extra
`gailkit[imitation]`). An absorbing state (DAC, Kostrikov et al. 2019) stands for "after the
episode terminated": its observation part is zeros and its flag is 1.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import gymnasium as gym
import numpy as np
import torch as th
import torch.nn.functional as F

from gailkit.algo.discriminator import augment
from gailkit.algo.discriminator.batch import Batch
from gailkit.algo.discriminator.nets import DiscriminatorNet, Inputs, RunningNorm, _ImitationNet  # noqa: F401  (re-exports)
from gailkit.config import DiscConfig
from gailkit.core import obs as obs_tree
from gailkit.core.framestacks import FrameStacks
from gailkit.model.spaces import image_keys

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


def _zeros(space: gym.Space, n: int) -> Any:
    if isinstance(space, gym.spaces.Dict):
        return {k: _zeros(sub, n) for k, sub in space.spaces.items()}
    return np.zeros((n, *(space.shape or ())), space.dtype or np.float32)


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
        self.observation_space, self.action_space = observation_space, action_space
        self.device = th.device(device)
        if cfg.net == "imitation":
            self.net: DiscriminatorNet | _ImitationNet = _ImitationNet(observation_space, action_space, cfg)
        else:
            self.net = DiscriminatorNet(observation_space, action_space, cfg)
        self.net.to(self.device)
        self.optimizer = th.optim.Adam(self.net.parameters(), lr=cfg.disc_lr)
        self.image_keys = image_keys(observation_space, cfg.encoder) if cfg.augment_shift else []

    def batch(
        self,
        obs: Any,
        acts: np.ndarray | None,
        next_obs: Any,
        obs_absorbing: np.ndarray | None = None,
        next_absorbing: np.ndarray | None = None,
    ) -> Batch:
        """Transitions (numpy, as the env gives them) as a `Batch` on the device; only the parts this
        discriminator looks at are kept (acts with `use_action`, next obs with `use_next_state`)."""
        n = len(obs_absorbing) if obs_absorbing is not None else _length(obs)
        flags = [
            th.as_tensor(np.zeros(n, bool) if f is None else np.asarray(f, bool), device=self.device)
            for f in (obs_absorbing, next_absorbing)
        ]
        if self.cfg.use_action and acts is None:
            raise ValueError("a discriminator on actions needs them")
        if self.cfg.use_next_state and next_obs is None:
            raise ValueError("a discriminator on next observations needs them")
        return Batch(
            _tensor(obs, self.device),
            _tensor(acts, self.device) if self.cfg.use_action else None,
            _tensor(next_obs, self.device) if self.cfg.use_next_state else None,
            *flags,
        )

    def absorbing(self, n: int) -> Batch:
        """`n` rows of the absorbing state's self-loop (both flags set; the rest is masked)."""
        flags = np.ones(n, bool)
        zeros = _zeros(self.observation_space, n)
        return self.batch(zeros, _zeros(self.action_space, n), zeros, flags, flags)

    def inputs(self, b: Batch) -> th.Tensor:
        """The (N, size) feature matrix the net's MLP sees (encoded parts, then flags)."""
        return self.net.inputs(b)

    def logits(self, b: Batch) -> th.Tensor:
        return self.net(b)

    @th.no_grad()
    def reward(self, b: Batch, chunk: int = 65536) -> th.Tensor:
        """(N,) generator rewards, in batched passes (no statistics move)."""
        self.net.eval()
        try:
            out = [REWARD_FNS[self.reward_fn](self.logits(b[i : i + chunk])) for i in range(0, len(b), chunk)]
            return th.cat(out) if out else th.zeros(0, device=self.device)
        finally:
            self.net.train()

    def train_step(self, expert: Batch, gen: Batch) -> dict[str, float]:
        """One Adam step of binary cross-entropy (+ entropy bonus, gradient penalty, label smoothing), on
        frames shifted at random with `disc.augment_shift`."""
        self.net.train()
        n_exp = len(expert)
        both = augment.random_shift(Batch.cat([expert, gen]), self.image_keys, self.cfg.augment_shift)
        x = self.net.inputs(both)  # encoded once: the loss and the penalty share it
        logits = self.net.head(x)
        labels = th.cat(
            [
                th.full((n_exp,), 1.0 - self.cfg.label_smoothing, device=self.device),
                th.zeros(len(gen), device=self.device),
            ]
        )
        loss = F.binary_cross_entropy_with_logits(logits, labels)
        entropy = F.binary_cross_entropy_with_logits(logits, th.sigmoid(logits))
        total = loss - self.cfg.ent_coef * entropy
        if self.cfg.grad_penalty > 0:  # -1 (auto) is resolved when a run starts; on its own it means off
            total = total + self.cfg.grad_penalty * self._gradient_penalty(x[:n_exp], x[n_exp:])
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

    def _gradient_penalty(self, x_expert: th.Tensor, x_gen: th.Tensor) -> th.Tensor:
        """`(||grad_x D(x)|| - 1)^2` on interpolates of expert and generator inputs (WGAN-GP), taken at
        the MLP's input (after the encoder; for vector spaces, the transitions themselves); the input
        normalization is held fixed for this pass."""
        n = min(len(x_expert), len(x_gen))
        x_exp, x_gen = x_expert[:n].detach(), x_gen[:n].detach()
        alpha = th.rand(n, 1, device=self.device)
        mixed = (alpha * x_exp + (1 - alpha) * x_gen).requires_grad_(True)
        self.net.eval()
        try:
            out = self.net.head(mixed)
        finally:
            self.net.train()
        (grad,) = th.autograd.grad(out.sum(), mixed, create_graph=True)
        return ((grad.norm(2, dim=1) - 1) ** 2).mean()

    def state_dict(self) -> dict[str, Any]:
        return {"net": self.net.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.net.load_state_dict(state["net"])
        self.optimizer.load_state_dict(copy.deepcopy(state["optimizer"]))  # torch shares, not copies, its tensors


def as_trained(cfg: DiscConfig, observation_space: gym.Space, learner_state: Any) -> DiscConfig:
    """`cfg` as the checkpointed discriminator was trained with it: one of a stack of colour frames saved
    before a CNN read them (`policy.flattened_frame_stack`) rebuilds with `encoder: flat`."""
    from gailkit.model.policy import flattened_frame_stack

    saved = learner_state.get("discriminator") if isinstance(learner_state, dict) else None
    weights = saved.get("net") if isinstance(saved, dict) else None
    if not isinstance(weights, dict) or any(str(k).startswith("inputs.encoder.") for k in weights):
        return cfg
    older = flattened_frame_stack(cfg.encoder, observation_space, weights, "mlp.normalize_input.norm.running_mean")
    return dataclasses.replace(cfg, encoder="flat") if older else cfg


def _length(x: Any) -> int:
    return len(next(iter(x.values()))) if isinstance(x, dict) else len(x)


def _tensor(x: Any, device: th.device) -> Any:
    if isinstance(x, dict):
        return {k: _tensor(v, device) for k, v in x.items()}
    if isinstance(x, FrameStacks):  # frames and index on the device; stacks built per minibatch
        return x.map(lambda v: _tensor(v, device))
    return th.as_tensor(obs_tree.writable(x), device=device)


__all__ = ["Batch", "Discriminator", "REWARD_FNS", "RunningNorm", "choose_reward_fn"]
