"""The discriminator's networks: imitation's `BasicRewardNet` layout (`RunningNorm`, ReLU MLP) and the
wrapper around imitation's own class (`disc.net: imitation`)."""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING

import gymnasium as gym
import torch as th
from torch import nn

from gailkit.config import DiscConfig

if TYPE_CHECKING:
    from gailkit.discriminator import Features


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
    """(N, in_size) features -> (N,) logits; `mlp` as imitation's `build_mlp` names its layers
    (`passthrough` > 0, the absorbing flags, adds a layer imitation's net does not have)."""

    def __init__(self, in_size: int, hid_sizes: list[int], spectral_norm: bool = False, passthrough: int = 0):
        super().__init__()
        layers: collections.OrderedDict[str, nn.Module] = collections.OrderedDict()
        layers["normalize_input"] = _NormalizeLeading(in_size, passthrough) if passthrough else RunningNorm(in_size)
        prev = in_size
        for i, size in enumerate(hid_sizes):
            layers[f"dense{i}"] = _maybe_sn(nn.Linear(prev, size), spectral_norm)
            layers[f"act{i}"] = nn.ReLU()
            prev = size
        layers["dense_final"] = _maybe_sn(nn.Linear(prev, 1), spectral_norm)
        layers["squeeze"] = _Squeeze()
        self.mlp = nn.Sequential(layers)

    def forward(self, x: th.Tensor) -> th.Tensor:
        return self.mlp(x)


def _maybe_sn(layer: nn.Linear, on: bool) -> nn.Module:
    return nn.utils.parametrizations.spectral_norm(layer) if on else layer


class _ImitationNet(nn.Module):
    """imitation's `BasicRewardNet` behind the same (N, in_size) -> (N,) interface."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, cfg: DiscConfig, features: Features):
        super().__init__()
        try:
            from imitation.rewards.reward_nets import BasicRewardNet
            from imitation.util.networks import RunningNorm as ImitationRunningNorm
        except ImportError:
            from gailkit.errors import ConfigError

            raise ConfigError("'disc.net: imitation' needs imitation: pip install 'gailkit[imitation]'") from None
        if features.absorbing:
            from gailkit.errors import ConfigError

            raise ConfigError("'disc.net: imitation' has no input for absorbing states: set 'disc.absorbing: false'")
        self.features = features
        self.net = BasicRewardNet(
            observation_space,
            action_space,
            use_state=True,
            use_action=cfg.use_action,
            use_next_state=cfg.use_next_state,
            use_done=False,
            hid_sizes=tuple(cfg.net_arch),
            normalize_input_layer=ImitationRunningNorm,
        )

    def forward(self, x: th.Tensor) -> th.Tensor:
        obs, acts, next_obs = self.features.split(x)
        return self.net(obs, acts, next_obs, th.zeros(len(x), device=x.device))
