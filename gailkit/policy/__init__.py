"""The actor-critic policy: SB3's `ActorCriticPolicy` whose features extractor normalizes observations.

The running mean/variance live inside the network (buffers of `NormalizedFlatten`), so weights,
checkpoints and ONNX exports all carry them: expert data, actors, evaluation and export see one
normalization. Statistics change only through `NormalizedFlatten.update`, never in `forward`.
This module, `generator` and `experts` are the only ones that import stable_baselines3.
"""

from __future__ import annotations

import math
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
    """Flatten, then `(x - mean) / sqrt(var + eps)` clipped to `±clip` (identity when disabled).

    The same formula, epsilon and clip as SB3's `VecNormalize`, so its statistics can be copied in.
    """

    mean: th.Tensor  # buffers (saved with the policy)
    var: th.Tensor
    count: th.Tensor

    def __init__(self, observation_space: gym.Space, normalize: bool = True, clip: float = 10.0, eps: float = 1e-8):
        dim = (
            gym.spaces.flatdim(observation_space)
            if not isinstance(observation_space, gym.spaces.Box)
            else int(np.prod(observation_space.shape))
        )
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

    @th.no_grad()
    def set_stats(self, mean: np.ndarray, var: np.ndarray, count: float) -> None:
        self.mean.copy_(th.as_tensor(np.asarray(mean).reshape(-1), dtype=th.float32))
        self.var.copy_(th.as_tensor(np.asarray(var).reshape(-1), dtype=th.float32))
        self.count.fill_(float(count))


ACTIVATIONS = {
    "tanh": th.nn.Tanh,
    "relu": th.nn.ReLU,
    "elu": th.nn.ELU,
    "leaky_relu": th.nn.LeakyReLU,
    "gelu": th.nn.GELU,
    "silu": th.nn.SiLU,
}


def schedules(cfg: PPOConfig) -> tuple[Any, Any]:
    """`(learning_rate, clip_range)` for SB3: constants, or linear decay to 0 with `linear_schedule`
    (SB3's progress goes from 1 to 0; rl-zoo3's `lin_` prefix)."""
    if not cfg.linear_schedule:
        return cfg.learning_rate, cfg.clip_range
    return (lambda progress, v=cfg.learning_rate: progress * v), (lambda progress, v=cfg.clip_range: progress * v)


def policy_kwargs(cfg: PPOConfig, normalize_obs: bool) -> dict[str, Any]:
    """Keyword arguments of `ActorCriticPolicy` for these settings (same on learner and actors)."""
    return dict(
        net_arch=dict(pi=list(cfg.net_arch), vf=list(cfg.vf_arch or cfg.net_arch)),
        activation_fn=ACTIVATIONS[cfg.activation],
        ortho_init=cfg.ortho_init,
        log_std_init=cfg.log_std_init,
        features_extractor_class=NormalizedFlatten,
        features_extractor_kwargs=dict(normalize=normalize_obs),
    )


def build(
    observation_space: gym.Space,
    action_space: gym.Space,
    cfg: PPOConfig,
    normalize_obs: bool,
    device: str | th.device = "cpu",
) -> ActorCriticPolicy:
    """A fresh policy (the actors' CPU copy; the learner's comes from `make_ppo` with the same kwargs)."""
    pol = ActorCriticPolicy(
        observation_space, action_space, lambda _: cfg.learning_rate, **policy_kwargs(cfg, normalize_obs)
    )
    return pol.to(device)


def make_ppo(venv: Any, cfg: PPOConfig, normalize_obs: bool, device: str | th.device = "cpu", seed: int | None = None):
    """SB3's `PPO` for these settings: the one place gailkit builds it (generator, experts, export)."""
    from stable_baselines3 import PPO

    lr, clip = schedules(cfg)
    return PPO(
        "MlpPolicy",
        venv,
        learning_rate=lr,
        n_steps=cfg.n_steps,
        batch_size=cfg.batch_size,
        n_epochs=cfg.n_epochs,
        gamma=cfg.gamma,
        gae_lambda=cfg.gae_lambda,
        clip_range=clip,
        ent_coef=cfg.ent_coef,
        vf_coef=cfg.vf_coef,
        max_grad_norm=cfg.max_grad_norm,
        normalize_advantage=cfg.normalize_advantage,
        use_sde=cfg.use_sde,
        sde_sample_freq=cfg.sde_sample_freq,
        target_kl=cfg.target_kl,
        policy_kwargs=policy_kwargs(cfg, normalize_obs),
        device=device,
        seed=seed,
        verbose=0,
    )


def normalizer(pol: ActorCriticPolicy) -> NormalizedFlatten:
    ext = pol.features_extractor
    assert isinstance(ext, NormalizedFlatten), type(ext)
    return ext


def get_weights(pol: ActorCriticPolicy, version: int) -> Weights:
    return Weights(version, {k: v.detach().cpu().numpy().copy() for k, v in pol.state_dict().items()})


def check_weights(pol: ActorCriticPolicy, weights: Weights) -> None:
    """Raise ValueError unless `weights` holds exactly the policy's tensors, of their shapes and
    dtypes, all finite (what an actor checks before it applies weights from the network)."""
    want = weight_shapes(pol)
    got = weights.tensors
    if set(got) != set(want):
        missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
        raise ValueError(f"weights for another network (missing {missing[:3]}, unexpected {extra[:3]})")
    for name, (shape, dtype) in want.items():
        arr = got[name]
        if tuple(arr.shape) != shape or str(arr.dtype) != dtype:
            raise ValueError(f"weight '{name}' is {tuple(arr.shape)} {arr.dtype}, expected {shape} {dtype}")
        if arr.dtype.kind == "f" and not np.isfinite(arr).all():
            raise ValueError(f"weight '{name}' holds NaN or inf")


def set_weights(pol: ActorCriticPolicy, weights: Weights) -> None:
    check_weights(pol, weights)
    device = next(pol.parameters()).device
    state = {k: th.as_tensor(v, device=device) for k, v in weights.tensors.items()}
    pol.load_state_dict(state)


def weight_shapes(pol: ActorCriticPolicy) -> dict[str, tuple[tuple[int, ...], str]]:
    """Name -> (shape, dtype) of every tensor in the policy's state dict (what a weights message must hold)."""
    return {k: (tuple(v.shape), str(v.dtype).removeprefix("torch.")) for k, v in pol.state_dict().items()}


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


class DeterministicHead(th.nn.Module):
    """Raw observation -> (deterministic action, value, log_prob of that action), as plain tensor ops.

    The deterministic action is the argmax for discrete spaces and the Gaussian mean clipped to the
    Box bounds for continuous ones; what `gailkit export` traces into ONNX.
    """

    low: th.Tensor  # buffers, for Box actions
    high: th.Tensor

    def __init__(self, pol: ActorCriticPolicy):
        super().__init__()
        self.pol = pol
        space = pol.action_space
        self.discrete = isinstance(space, gym.spaces.Discrete)
        if not self.discrete:
            if not isinstance(space, gym.spaces.Box):
                raise ValueError(f"action space {space} is not exportable (Box and Discrete are)")
            if pol.use_sde:
                raise ValueError("policies with gSDE are not exportable")
            self.register_buffer("low", th.as_tensor(space.low, dtype=th.float32))
            self.register_buffer("high", th.as_tensor(space.high, dtype=th.float32))

    def forward(self, obs: th.Tensor) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        features = self.pol.extract_features(obs, self.pol.features_extractor)
        latent_pi, latent_vf = self.pol.mlp_extractor(features)
        out = self.pol.action_net(latent_pi)
        if self.discrete:
            action = th.argmax(out, dim=-1)
            log_prob = th.log_softmax(out, dim=-1).gather(-1, action.unsqueeze(-1)).squeeze(-1)
        else:
            action = th.minimum(th.maximum(out, self.low), self.high)
            log_std = self.pol.log_std.expand_as(out)  # at the mean, the Gaussian's quadratic term is 0
            log_prob = (-log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        return action, self.pol.value_net(latent_vf).squeeze(-1), log_prob


from gailkit.policy.sb3_zip import read_sb3_zip  # noqa: E402, F401  (a re-export; it builds on the classes above)
