"""The actor-critic policy: SB3's `ActorCriticPolicy` whose features extractor normalizes observations.

The running mean/variance live inside the network (buffers of `NormalizedFlatten`), so weights,
checkpoints and ONNX exports all carry them: expert data, actors, evaluation and export see one
normalization. Statistics change only through `update_normalizer`, never in `forward`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch as th
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

from gailkit.config import PPOConfig
from gailkit.fragments import Weights


class NormalizedFlatten(BaseFeaturesExtractor):
    """Flatten, then `(x - mean) / sqrt(var + eps)` clipped to `±clip` (identity when disabled)."""

    def __init__(self, observation_space: gym.Space, normalize: bool = True, clip: float = 10.0, eps: float = 1e-8):
        dim = gym.spaces.flatdim(observation_space) if not isinstance(observation_space, gym.spaces.Box) \
            else int(np.prod(observation_space.shape))
        super().__init__(observation_space, features_dim=dim)
        self.normalize, self.clip, self.eps = normalize, clip, eps
        self.register_buffer("mean", th.zeros(dim))
        self.register_buffer("var", th.ones(dim))
        self.register_buffer("count", th.zeros((), dtype=th.float64))

    def forward(self, obs: th.Tensor) -> th.Tensor:
        x = th.flatten(obs, start_dim=1).float()
        if not self.normalize:
            return x
        return th.clamp((x - self.mean) / th.sqrt(self.var + self.eps), -self.clip, self.clip)

    @th.no_grad()
    def update(self, batch: th.Tensor) -> None:
        """Merge a batch `(N, *obs_shape)` into the running statistics (Chan et al.'s parallel update)."""
        x = th.flatten(batch, start_dim=1).to(self.mean.device, th.float64)
        n = x.shape[0]
        if n == 0:
            return
        b_mean, b_var = x.mean(0), x.var(0, unbiased=False)
        total = self.count + n
        delta = b_mean - self.mean.double()
        new_mean = self.mean.double() + delta * n / total
        m2 = self.var.double() * self.count + b_var * n + delta**2 * self.count * n / total
        self.mean.copy_(new_mean.float())
        self.var.copy_((m2 / total).float())
        self.count.copy_(total)


ACTIVATIONS = {"tanh": th.nn.Tanh, "relu": th.nn.ReLU}


def schedules(cfg: PPOConfig) -> tuple[Any, Any]:
    """`(learning_rate, clip_range)` for SB3: constants, or linear decay to 0 with `linear_schedule`
    (SB3's progress goes from 1 to 0; rl-zoo3's `lin_` prefix)."""
    if not cfg.linear_schedule:
        return cfg.learning_rate, cfg.clip_range
    return (lambda progress, v=cfg.learning_rate: progress * v), (lambda progress, v=cfg.clip_range: progress * v)


def policy_kwargs(cfg: PPOConfig, normalize_obs: bool) -> dict[str, Any]:
    """Keyword arguments of `ActorCriticPolicy` for these settings (same on learner and actors)."""
    return dict(
        net_arch=dict(pi=list(cfg.net_arch), vf=list(cfg.net_arch)),
        activation_fn=ACTIVATIONS[cfg.activation],
        ortho_init=cfg.ortho_init,
        log_std_init=cfg.log_std_init,
        features_extractor_class=NormalizedFlatten,
        features_extractor_kwargs=dict(normalize=normalize_obs),
    )


def build(observation_space: gym.Space, action_space: gym.Space, cfg: PPOConfig, normalize_obs: bool,
          device: str | th.device = "cpu") -> ActorCriticPolicy:
    """A fresh policy (the actors' CPU copy; the learner's comes from SB3's PPO with the same kwargs)."""
    pol = ActorCriticPolicy(observation_space, action_space, lambda _: cfg.learning_rate,
                            **policy_kwargs(cfg, normalize_obs))
    return pol.to(device)


def normalizer(pol: ActorCriticPolicy) -> NormalizedFlatten:
    ext = pol.features_extractor
    assert isinstance(ext, NormalizedFlatten), type(ext)
    return ext


def get_weights(pol: ActorCriticPolicy, version: int) -> Weights:
    return Weights(version, {k: v.detach().cpu().numpy().copy() for k, v in pol.state_dict().items()})


def set_weights(pol: ActorCriticPolicy, weights: Weights) -> None:
    device = next(pol.parameters()).device
    state = {k: th.as_tensor(v, device=device) for k, v in weights.tensors.items()}
    pol.load_state_dict(state)


@th.no_grad()
def act(pol: ActorCriticPolicy, obs: np.ndarray, deterministic: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """`(actions, log_probs)` for a batch `obs` (E, *obs_shape); actions as sampled (unclipped)."""
    obs_t, _ = pol.obs_to_tensor(obs)
    dist = pol.get_distribution(obs_t)
    actions = dist.get_actions(deterministic=deterministic)
    log_probs = dist.log_prob(actions)
    acts = actions.cpu().numpy()
    if isinstance(pol.action_space, gym.spaces.Discrete):
        acts = acts.reshape(-1)
    return acts, log_probs.cpu().numpy().astype(np.float32)


def deterministic_actor(pol: ActorCriticPolicy) -> Callable[[np.ndarray], Any]:
    """One observation -> the deterministic action the env is given (evaluation)."""
    def one(obs: np.ndarray) -> Any:
        a, _ = act(pol, np.asarray(obs)[None], deterministic=True)
        return env_action(pol.action_space, a)[0]

    return one


def env_action(action_space: gym.Space, acts: np.ndarray) -> np.ndarray:
    """What the env is given: Box actions clipped to the bounds (SB3 does the same)."""
    if isinstance(action_space, gym.spaces.Box):
        return np.clip(acts, action_space.low, action_space.high)
    return acts
