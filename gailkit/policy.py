"""The actor-critic policy: SB3's `ActorCriticPolicy` whose features extractor normalizes observations.

The running mean/variance live inside the network (buffers of `NormalizedFlatten`), so weights,
checkpoints and ONNX exports all carry them: expert data, actors, evaluation and export see one
normalization. Statistics change only through `NormalizedFlatten.update`, never in `forward`.
This module, `generator` and `experts` are the only ones that import stable_baselines3.
"""

from __future__ import annotations

import ast
import io
import json
import math
import zipfile
from zlib import error as zlib_error
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch as th
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

from gailkit import fsutil, limits
from gailkit.config import PPOConfig
from gailkit.errors import GailkitError
from gailkit.fragments import Weights


class NormalizedFlatten(BaseFeaturesExtractor):
    """Flatten, then `(x - mean) / sqrt(var + eps)` clipped to `±clip` (identity when disabled).

    The same formula, epsilon and clip as SB3's `VecNormalize`, so its statistics can be copied in.
    """

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

    @th.no_grad()
    def set_stats(self, mean: np.ndarray, var: np.ndarray, count: float) -> None:
        self.mean.copy_(th.as_tensor(np.asarray(mean).reshape(-1), dtype=th.float32))
        self.var.copy_(th.as_tensor(np.asarray(var).reshape(-1), dtype=th.float32))
        self.count.fill_(float(count))


ACTIVATIONS = {"tanh": th.nn.Tanh, "relu": th.nn.ReLU, "elu": th.nn.ELU, "leaky_relu": th.nn.LeakyReLU,
               "gelu": th.nn.GELU, "silu": th.nn.SiLU}


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


def build(observation_space: gym.Space, action_space: gym.Space, cfg: PPOConfig, normalize_obs: bool,
          device: str | th.device = "cpu") -> ActorCriticPolicy:
    """A fresh policy (the actors' CPU copy; the learner's comes from `make_ppo` with the same kwargs)."""
    pol = ActorCriticPolicy(observation_space, action_space, lambda _: cfg.learning_rate,
                            **policy_kwargs(cfg, normalize_obs))
    return pol.to(device)


def make_ppo(venv: Any, cfg: PPOConfig, normalize_obs: bool, device: str | th.device = "cpu", seed: int | None = None):
    """SB3's `PPO` for these settings: the one place gailkit builds it (generator, experts, export)."""
    from stable_baselines3 import PPO

    lr, clip = schedules(cfg)
    return PPO("MlpPolicy", venv, learning_rate=lr, n_steps=cfg.n_steps, batch_size=cfg.batch_size,
               n_epochs=cfg.n_epochs, gamma=cfg.gamma, gae_lambda=cfg.gae_lambda, clip_range=clip,
               ent_coef=cfg.ent_coef, vf_coef=cfg.vf_coef, max_grad_norm=cfg.max_grad_norm,
               normalize_advantage=cfg.normalize_advantage, use_sde=cfg.use_sde, sde_sample_freq=cfg.sde_sample_freq,
               target_kl=cfg.target_kl, policy_kwargs=policy_kwargs(cfg, normalize_obs), device=device, seed=seed,
               verbose=0)


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


_ACTIVATION_CLASSES = {"Tanh": "tanh", "ReLU": "relu", "ELU": "elu", "LeakyReLU": "leaky_relu", "GELU": "gelu", "SiLU": "silu"}


def _field(value: Any) -> Any:
    """A policy_kwargs entry of an SB3 zip: JSON as is, or the repr SB3 stores beside its cloudpickle."""
    if isinstance(value, str):
        try:
            return ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return value
    return value


def read_sb3_zip(path: Path, observation_space: Any, action_space: Any):
    """The policy of a stable-baselines3 PPO/A2C zip, without unpickling anything (ValueError if it cannot).

    SB3's own `PPO.load` runs cloudpickle on fields of the zip, which can run code. Here the
    weights come from `policy.pth` through `torch.load(weights_only=True)`, the architecture from
    the readable copies of `policy_kwargs` SB3 writes beside each pickled field, and the spaces
    from the env; the weights must fit the rebuilt network exactly.
    """
    try:
        with zipfile.ZipFile(fsutil.check_regular(path)) as z:
            for name in ("data", "policy.pth"):  # declared sizes first: a zip bomb is refused before it inflates
                info = z.getinfo(name)
                limits.check_size(info.file_size, info.compress_size, f"{path}: {name}")
            data = json.loads(z.read("data"))
            weights = th.load(io.BytesIO(z.read("policy.pth")), map_location="cpu", weights_only=True)
    except (zipfile.BadZipFile, KeyError, OSError, ValueError, RuntimeError, EOFError, NotImplementedError,
            zlib_error, GailkitError) as e:
        raise ValueError(f"{path}: not a readable stable-baselines3 zip ({type(e).__name__}: {str(e).splitlines()[0]})") from None
    if not isinstance(data, dict) or "ActorCriticPolicy.__init__" not in str((data.get("policy_class") or {}).get("__init__", "")):
        raise ValueError(f"{path}: not a stable-baselines3 PPO/A2C zip with an MlpPolicy (ActorCriticPolicy)")
    shape = _field((data.get("observation_space") or {}).get("_shape"))
    if isinstance(shape, (list, tuple)) and tuple(shape) != tuple(observation_space.shape or ()):
        raise ValueError(f"{path}: trained on observations of shape {tuple(shape)}, the env has {observation_space.shape}")
    pk = data.get("policy_kwargs") or {}
    kwargs: dict[str, Any] = {}
    net_arch = _field(pk.get("net_arch"))
    if isinstance(net_arch, list) and net_arch and isinstance(net_arch[0], dict):
        net_arch = net_arch[0]  # SB3 < 1.8 wrote [dict(pi=..., vf=...)]
    if net_arch is not None:
        kwargs["net_arch"] = net_arch
    if "activation_fn" in pk:
        name = str(pk["activation_fn"]).rstrip("'>").rsplit(".", 1)[-1]
        if name not in _ACTIVATION_CLASSES:
            raise ValueError(f"{path}: activation {pk['activation_fn']} is not one gailkit rebuilds ({', '.join(_ACTIVATION_CLASSES)})")
        kwargs["activation_fn"] = ACTIVATIONS[_ACTIVATION_CLASSES[name]]
    for key in ("log_std_init", "full_std", "use_expln", "squash_output", "share_features_extractor"):
        if key in pk:
            kwargs[key] = _field(pk[key])
    extractor = str(pk.get("features_extractor_class", "FlattenExtractor"))
    if "NormalizedFlatten" in extractor:
        kwargs["features_extractor_class"] = NormalizedFlatten
        kwargs["features_extractor_kwargs"] = _field(pk.get("features_extractor_kwargs", {})) or {}
    elif "FlattenExtractor" not in extractor:
        raise ValueError(f"{path}: features extractor {extractor} is not one gailkit rebuilds")
    try:
        pol = ActorCriticPolicy(observation_space, action_space, lambda _: 0.0, use_sde=bool(data.get("use_sde", False)), **kwargs)
        pol.load_state_dict(weights)
    except (RuntimeError, TypeError, ValueError, AttributeError) as e:
        raise ValueError(f"{path}: its weights do not fit the network it describes ({str(e).splitlines()[0]})") from None
    pol.set_training_mode(False)
    return pol


class DeterministicHead(th.nn.Module):
    """Raw observation -> (deterministic action, value, log_prob of that action), as plain tensor ops.

    The deterministic action is the argmax for discrete spaces and the Gaussian mean clipped to the
    Box bounds for continuous ones; what `gailkit export` traces into ONNX.
    """

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
