"""The GAIL discriminator: imitation's `BasicRewardNet` (with `RunningNorm` inputs), its loss, its rewards.

Convention: `logits_expert_is_high`, labels_expert_is_one. D = sigmoid(logit) is the probability
that a transition is the expert's.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch as th
import torch.nn.functional as F

from gailkit.config import DiscConfig

REWARD_FNS = {
    "gail": lambda logits: F.softplus(logits),  # -log(1 - D): positive, pays for surviving
    "negative": lambda logits: -F.softplus(-logits),  # log D: negative, pays for ending
    "airl": lambda logits: logits,  # log D - log(1 - D)
}


def choose_reward_fn(setting: str, terminated_fraction: float) -> str:
    """`auto` -> `gail` when most expert episodes end by time limit, else `airl` (see DiscConfig)."""
    if setting != "auto":
        return setting
    return "airl" if terminated_fraction > 0.5 else "gail"


class Discriminator:
    def __init__(self, observation_space: gym.Space, action_space: gym.Space, cfg: DiscConfig,
                 device: str | th.device, reward_fn: str):
        from imitation.rewards.reward_nets import BasicRewardNet
        from imitation.util.networks import RunningNorm

        self.cfg, self.reward_fn = cfg, reward_fn
        self.net = BasicRewardNet(
            observation_space, action_space, use_state=True, use_action=cfg.use_action,
            use_next_state=cfg.use_next_state, use_done=False, hid_sizes=tuple(cfg.net_arch),
            normalize_input_layer=RunningNorm,
        ).to(device)
        self.optimizer = th.optim.Adam(self.net.parameters(), lr=cfg.disc_lr)
        self.device = th.device(device)

    def preprocess(self, obs: np.ndarray, acts: np.ndarray, next_obs: np.ndarray) -> tuple[th.Tensor, ...]:
        """Tensors on the device (actions one-hot for discrete spaces), ready for `logits`."""
        dones = np.zeros(len(obs), dtype=bool)
        return self.net.preprocess(obs, acts, next_obs, dones)

    def logits(self, inputs: tuple[th.Tensor, ...]) -> th.Tensor:
        return self.net(*inputs)

    @th.no_grad()
    def reward(self, inputs: tuple[th.Tensor, ...], chunk: int = 65536) -> th.Tensor:
        """(N,) generator rewards for preprocessed transitions, in batched passes (no stat updates)."""
        self.net.eval()
        try:
            n = len(inputs[0])
            out = [REWARD_FNS[self.reward_fn](self.logits(tuple(x[i:i + chunk] for x in inputs)))
                   for i in range(0, n, chunk)]
            return th.cat(out) if out else th.zeros(0, device=self.device)
        finally:
            self.net.train()

    def train_step(self, expert: tuple[th.Tensor, ...], gen: tuple[th.Tensor, ...]) -> dict[str, float]:
        """One Adam step of binary cross-entropy (+ entropy bonus, + gradient penalty)."""
        self.net.train()
        inputs = tuple(th.cat([a, b]) for a, b in zip(expert, gen))
        labels = th.cat([th.ones(len(expert[0]), device=self.device), th.zeros(len(gen[0]), device=self.device)])
        logits = self.logits(inputs)
        loss = F.binary_cross_entropy_with_logits(logits, labels)
        p = th.sigmoid(logits)
        entropy = F.binary_cross_entropy_with_logits(logits, p).mean()
        total = loss - self.cfg.ent_coef * entropy
        if self.cfg.grad_penalty > 0:
            total = total + self.cfg.grad_penalty * self._gradient_penalty(expert, gen)
        self.optimizer.zero_grad()
        total.backward()
        self.optimizer.step()
        with th.no_grad():
            n_exp = len(expert[0])
            acc_exp = (logits[:n_exp] > 0).float().mean()
            acc_gen = (logits[n_exp:] < 0).float().mean()
        return {"disc/loss": loss.item(), "disc/acc_expert": acc_exp.item(), "disc/acc_gen": acc_gen.item(),
                "disc/entropy": entropy.item()}

    def _gradient_penalty(self, expert: tuple[th.Tensor, ...], gen: tuple[th.Tensor, ...]) -> th.Tensor:
        n = min(len(expert[0]), len(gen[0]))
        alpha = th.rand(n, 1, device=self.device)
        mixed = []
        for a, b in zip(expert, gen):
            if a.dtype.is_floating_point and a.dim() > 1:
                w = alpha.view(n, *([1] * (a.dim() - 1)))
                mixed.append((w * a[:n] + (1 - w) * b[:n]).requires_grad_(True))
            else:
                mixed.append(a[:n])
        out = self.logits(tuple(mixed))
        grads = th.autograd.grad(out.sum(), [m for m in mixed if m.requires_grad], create_graph=True, allow_unused=True)
        norm = th.cat([g.flatten(1) for g in grads if g is not None], dim=1).norm(2, dim=1)
        return ((norm - 1) ** 2).mean()

    def state_dict(self) -> dict[str, Any]:
        return {"net": self.net.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.net.load_state_dict(state["net"])
        self.optimizer.load_state_dict(state["optimizer"])
