"""The discriminator's networks: `Inputs` (a structured `Batch` -> one feature matrix, through the encoder
factory), then imitation's `BasicRewardNet` layout (`RunningNorm`, ReLU MLP), or imitation's own class
(`disc.net: imitation`)."""

from __future__ import annotations

import collections
from typing import Any

import gymnasium as gym
import torch as th
from torch import nn

from gailkit.algo.discriminator.batch import Batch, Obs
from gailkit.config import DiscConfig
from gailkit.core import obs as obs_tree
from gailkit.model import encoders


def _masked(x: Obs, absorbing: th.Tensor) -> Obs:
    """`x` with its absorbing rows (`absorbing`, (N,) bool) set to 0, in `x`'s own dtype. A batch without
    one is returned as it is: a batch of frames is not copied (nor cast to float) for nothing."""
    if not bool(absorbing.any()):
        return x
    return obs_tree.tmap(lambda v: v.masked_fill(absorbing.reshape(-1, *([1] * (v.dim() - 1))), 0), x)


class Inputs(nn.Module):
    """A `Batch` -> (N, size) features: encoded obs, actions (one-hot when discrete), encoded next obs
    (the same encoder), then with absorbing states two 0/1 flags. An absorbing row's observation and
    action parts are zeros before encoding (the flag tells it apart). For vector spaces the encoder
    only flattens, so the matrix is the one imitation's `BasicRewardNet` concatenates."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, cfg: DiscConfig, flat: bool = False):
        super().__init__()
        self.observation_space, self.action_space = observation_space, action_space
        self.use_action, self.use_next_state, self.absorbing = cfg.use_action, cfg.use_next_state, cfg.absorbing
        self.encoder = encoders.make(observation_space, "flat" if flat else cfg.encoder, None, cfg.cnn_features)
        self.obs_dim = encoders.width(self.encoder)
        self.act_dim = encoders.flat_dim(action_space)
        self.size = (
            self.obs_dim * (2 if cfg.use_next_state else 1)
            + (self.act_dim if cfg.use_action else 0)
            + (2 if cfg.absorbing else 0)
        )

    def forward(self, b: Batch) -> th.Tensor:
        a = b.obs_absorbing.float()[:, None]
        nxt = b.next_absorbing.float()[:, None]
        parts = [self.encoder(_masked(encoders.preprocess(self.observation_space, b.obs), b.obs_absorbing))]
        if self.use_action:
            assert b.acts is not None, "a discriminator on actions needs them"
            acts = encoders.preprocess(self.action_space, b.acts)
            assert isinstance(acts, th.Tensor)
            parts.append(acts.reshape(len(a), -1).float() * (1.0 - a))
        if self.use_next_state:
            assert b.next_obs is not None, "a discriminator on next observations needs them"
            parts.append(
                self.encoder(_masked(encoders.preprocess(self.observation_space, b.next_obs), b.next_absorbing))
            )
        if self.absorbing:
            parts += [a, nxt]
        return th.cat(parts, dim=1)

    def split(self, x: th.Tensor) -> tuple[th.Tensor, th.Tensor | None, th.Tensor | None]:
        """The matrix's parts for nets that take them separately: (obs, acts, next_obs)."""
        i = self.obs_dim
        obs = x[:, :i]
        acts = next_obs = None
        if self.use_action:
            acts, i = x[:, i : i + self.act_dim], i + self.act_dim
        if self.use_next_state:
            next_obs = x[:, i : i + self.obs_dim]
        return obs, acts, next_obs


class RunningNorm(nn.Module):
    """Inputs to mean 0 and variance 1 with statistics over all batches seen in training mode
    (Chan et al.'s parallel update); imitation's `RunningNorm`, same buffers and arithmetic."""

    running_mean: th.Tensor  # buffers
    running_var: th.Tensor
    count: th.Tensor

    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.register_buffer("running_mean", th.zeros(num_features))
        self.register_buffer("running_var", th.ones(num_features))
        self.register_buffer("count", th.zeros((), dtype=th.int))

    def forward(self, x: th.Tensor) -> th.Tensor:
        if self.training:
            with th.no_grad():
                self.update_stats(x)
        return (x - self.running_mean) / th.sqrt(self.running_var + self.eps)

    def update_stats(self, batch: th.Tensor) -> None:
        batch_mean = th.mean(batch, dim=0)
        batch_var = th.var(batch, dim=0, unbiased=False)
        batch_count = batch.shape[0]
        delta = batch_mean - self.running_mean
        tot_count = self.count + batch_count
        self.running_mean += delta * batch_count / tot_count
        self.running_var *= self.count
        self.running_var += batch_var * batch_count
        self.running_var += th.square(delta) * self.count * batch_count / tot_count
        self.running_var /= tot_count
        self.count += batch_count


class _Squeeze(nn.Module):
    def forward(self, x: th.Tensor) -> th.Tensor:
        return x.squeeze(1)


class _NormalizeLeading(nn.Module):
    """A RunningNorm over all but the last `passthrough` columns (0/1 flags, which need none: a
    flag that is always 0 would get a near-zero variance, and its gradient, scaled by 1 / sqrt(eps),
    would swamp a gradient penalty)."""

    def __init__(self, in_size: int, passthrough: int):
        super().__init__()
        self.passthrough = passthrough
        self.norm = RunningNorm(in_size - passthrough)

    def forward(self, x: th.Tensor) -> th.Tensor:
        k = x.shape[1] - self.passthrough
        return th.cat([self.norm(x[:, :k]), x[:, k:]], dim=1)


class DiscriminatorNet(nn.Module):
    """A `Batch` -> (N,) logits: `inputs` (the encoder factory's encoder for obs and next obs), then
    `mlp` as imitation's `build_mlp` names its layers (the absorbing flags pass its input
    normalization untouched, a layer imitation's net does not have)."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, cfg: DiscConfig):
        super().__init__()
        self.inputs = Inputs(observation_space, action_space, cfg)
        in_size, passthrough = self.inputs.size, 2 if cfg.absorbing else 0
        layers: collections.OrderedDict[str, nn.Module] = collections.OrderedDict()
        layers["normalize_input"] = _NormalizeLeading(in_size, passthrough) if passthrough else RunningNorm(in_size)
        prev = in_size
        for i, size in enumerate(cfg.net_arch):
            layers[f"dense{i}"] = _maybe_sn(nn.Linear(prev, size), cfg.spectral_norm)
            layers[f"act{i}"] = nn.ReLU()
            prev = size
        layers["dense_final"] = _maybe_sn(nn.Linear(prev, 1), cfg.spectral_norm)
        layers["squeeze"] = _Squeeze()
        self.mlp = nn.Sequential(layers)

    def head(self, x: th.Tensor) -> th.Tensor:
        """Logits of an `inputs` matrix (the gradient penalty's interpolates go here)."""
        return self.mlp(x)

    def forward(self, b: Batch) -> th.Tensor:
        return self.head(self.inputs(b))


def _maybe_sn(layer: nn.Linear, on: bool) -> nn.Module:
    return nn.utils.parametrizations.spectral_norm(layer) if on else layer


class _ImitationNet(nn.Module):
    """imitation's `BasicRewardNet` behind the same interface (its own flattening inputs)."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, cfg: DiscConfig):
        super().__init__()
        try:
            from imitation.rewards.reward_nets import BasicRewardNet
            from imitation.util.networks import RunningNorm as ImitationRunningNorm
        except ImportError:
            from gailkit.core.errors import ConfigError

            raise ConfigError("'disc.net: imitation' needs imitation: pip install 'gailkit[imitation]'") from None
        from gailkit.core.errors import ConfigError

        if cfg.absorbing:
            raise ConfigError("'disc.net: imitation' has no input for absorbing states: set 'disc.absorbing: false'")
        if encoders.is_image(observation_space, cfg.encoder):
            raise ConfigError("'disc.net: imitation' flattens images; use 'disc.net: gailkit' for its CNN")
        self.inputs = Inputs(observation_space, action_space, cfg, flat=True)
        self.net: Any = BasicRewardNet(
            observation_space,
            action_space,
            use_state=True,
            use_action=cfg.use_action,
            use_next_state=cfg.use_next_state,
            use_done=False,
            hid_sizes=tuple(cfg.net_arch),
            normalize_input_layer=ImitationRunningNorm,
        )

    def head(self, x: th.Tensor) -> th.Tensor:
        obs, acts, next_obs = self.inputs.split(x)
        return self.net(obs, acts, next_obs, th.zeros(len(x), device=x.device))

    def forward(self, b: Batch) -> th.Tensor:
        return self.head(self.inputs(b))
