"""SAC's squashed-Gaussian actor: the policy actors run, checkpoints hold and export ships with
`generator: sac`.

It is stable-baselines3's `sac.policies.Actor` (features from the encoder factory, `latent_pi`, `mu`,
`log_std`), whose actions lie in [-1, 1] and are scaled to the action Box here: actors, fragments,
demos, the discriminator and ONNX files all see actions in the env's own units, and only the SAC
update sees the [-1, 1] ones (`to_unit`).
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import torch as th
from stable_baselines3.sac.policies import Actor, SACPolicy

from gailkit.config import PolicyConfig, SACConfig
from gailkit.core.errors import GailkitError
from gailkit.model import encoders, spaces

DEFAULT_NET = [256, 256]
DEFAULT_ACTIVATION = "relu"


def check_action_space(space: gym.Space) -> None:
    """A squashed Gaussian needs a Box (SAC's own requirement) of finite bounds (every policy head's: `spaces`)."""
    if not isinstance(space, gym.spaces.Box):
        raise GailkitError(f"generator 'sac' needs a continuous (Box) action space, not {space}; use 'generator: ppo'")
    spaces.check_action_space(space)


def policy_kwargs(cfg: PolicyConfig, normalize_obs: bool, observation_space: gym.Space) -> dict[str, Any]:
    """`SACPolicy` keyword arguments for these settings (actor: `net_arch`; each Q network: `vf_arch`)."""
    from gailkit.model.policy import ACTIVATIONS

    extractor, extractor_kwargs = encoders.choose(observation_space, cfg.encoder, normalize_obs, cfg.cnn_features)
    pi = list(cfg.net_arch or DEFAULT_NET)
    activation = DEFAULT_ACTIVATION if cfg.activation == "auto" else cfg.activation
    return dict(
        net_arch=dict(pi=pi, qf=list(cfg.vf_arch or pi)),
        activation_fn=ACTIVATIONS[activation],
        features_extractor_class=extractor,
        features_extractor_kwargs=extractor_kwargs,
        normalize_images=False,  # the encoder scales uint8 frames itself
        share_features_extractor=False,
    )


def build(
    observation_space: gym.Space, action_space: gym.Space, cfg: PolicyConfig, normalize_obs: bool, device: Any = "cpu"
) -> Actor:
    """A fresh actor (the actors' CPU copy; the learner's is the one inside `make_sac`)."""
    check_action_space(action_space)
    box: Any = action_space
    full = SACPolicy(observation_space, box, lambda _: 3e-4, **policy_kwargs(cfg, normalize_obs, observation_space))
    return full.actor.to(device)


def make_sac(
    observation_space: gym.Space,
    action_space: gym.Space,
    cfg: SACConfig,
    net: PolicyConfig,
    normalize_obs: bool,
    device: Any = "cpu",
    seed: int | None = None,
) -> Any:
    """SB3's `SAC` for these settings, built for the env's own observation layout, with a one-slot SB3
    replay buffer (the generator replaces it with its own)."""
    from stable_baselines3 import SAC

    from gailkit.model.policy import linear, spaces_only_venv

    check_action_space(action_space)
    model = SAC(
        "MultiInputPolicy" if isinstance(observation_space, gym.spaces.Dict) else "MlpPolicy",
        spaces_only_venv(observation_space, action_space),
        learning_rate=linear(cfg.learning_rate, cfg.linear_schedule),
        buffer_size=1,
        learning_starts=0,
        batch_size=cfg.batch_size,
        tau=cfg.tau,
        gamma=cfg.gamma,
        ent_coef=cfg.ent_coef,
        target_entropy="auto" if cfg.target_entropy is None else cfg.target_entropy,
        policy_kwargs=policy_kwargs(net, normalize_obs, observation_space),
        device=device,
        seed=seed,
        verbose=0,
        _init_setup_model=False,
    )
    model.observation_space = observation_space  # SB3 would build for channels-first frames
    model._setup_model()
    return model


def is_squashed(pol: Any) -> bool:
    return isinstance(pol, Actor)


def to_env(space: Any, unit: np.ndarray) -> np.ndarray:
    """[-1, 1] actions (flat rows, as the actor gives them) -> the Box's own units and shape."""
    low, high = space.low.astype(np.float32), space.high.astype(np.float32)
    unit = np.reshape(np.asarray(unit, np.float32), (-1, *space.shape))
    return (low + 0.5 * (unit + 1.0) * (high - low)).astype(np.float32)


def to_unit(space: Any, acts: np.ndarray) -> np.ndarray:
    """The Box's units -> [-1, 1] as flat rows, the actor's layout (clipped: demos may hold actions beyond
    the bounds)."""
    low, high = space.low.astype(np.float32), space.high.astype(np.float32)
    acts = np.reshape(np.asarray(acts, np.float32), (-1, *space.shape))
    unit = np.clip(2.0 * (acts - low) / (high - low) - 1.0, -1.0, 1.0).astype(np.float32)
    return unit.reshape(len(unit), -1)


@th.no_grad()
def act(pol: Actor, obs: Any, deterministic: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """`(actions in the env's units, log_probs)` for a batch of observations."""
    obs_t, _ = pol.obs_to_tensor(obs)
    mean, log_std, kwargs = pol.get_action_dist_params(obs_t)
    dist: Any = pol.action_dist.proba_distribution(mean, log_std, **kwargs)
    unit = dist.get_actions(deterministic=deterministic)
    log_prob = dist.log_prob(unit, dist.gaussian_actions)
    return to_env(pol.action_space, unit.cpu().numpy()), log_prob.cpu().numpy().astype(np.float32)


def deterministic(pol: Actor, obs: th.Tensor) -> th.Tensor:
    """tanh of the Gaussian mean, in [-1, 1], with gradients (behaviour cloning, export)."""
    mean, _, _ = pol.get_action_dist_params(obs)
    return th.tanh(mean)


class SquashedHead(th.nn.Module):
    """Raw observation -> (deterministic action in the Box's units, 0 as value, log_prob of that action):
    what `gailkit export` traces for a SAC policy (it has no state-value function)."""

    has_value = False
    discrete = False
    low: th.Tensor  # buffers
    high: th.Tensor

    def __init__(self, pol: Actor):
        super().__init__()
        self.pol = pol
        space = pol.action_space
        self.shape = tuple(space.shape)  # the actor's mean is a flat row; the env takes this shape
        self.register_buffer("low", th.as_tensor(space.low, dtype=th.float32).reshape(-1))
        self.register_buffer("high", th.as_tensor(space.high, dtype=th.float32).reshape(-1))

    def forward(self, obs: Any) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        mean, log_std, _ = self.pol.get_action_dist_params(obs)
        unit = th.tanh(mean)
        action = (self.low + 0.5 * (unit + 1.0) * (self.high - self.low)).reshape(-1, *self.shape)
        # the Gaussian at its mean, through tanh (SB3's SquashedDiagGaussianDistribution.log_prob)
        log_prob = (-log_std - 0.5 * math.log(2 * math.pi)).sum(-1) - th.log(1 - unit**2 + 1e-6).sum(-1)
        return action, th.zeros_like(log_prob), log_prob
