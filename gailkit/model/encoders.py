"""The encoder factory: the one place where an observation space meets a network.

`choose(space, ...)` picks the feature extractor for a space and `make` builds it; the policy (as
SB3's `features_extractor_class`, for the actor and the value function alike) and the
discriminator (for obs and next_obs) both get theirs here:

- a vector `Box` (any shape that is not an image), `Discrete` (one-hot), `MultiDiscrete` (one-hot
  per entry), `MultiBinary`: flattened, with running mean/variance normalization for Boxes when
  asked (`NormalizedFlatten`);
- an image (a 3-dimensional uint8 `Box`, channels first or last; any 3-dimensional Box with
  `kind="cnn"`): a CNN, Nature DQN's layout for frames of 36 pixels and more, a small padded one
  below that (`ImageCNN`); uint8 pixels are scaled to [0, 1] inside it;
- a `Dict` of those: one encoder per entry, their features concatenated (`DictEncoder`).

Encoders take *preprocessed* observations, as stable-baselines3 hands them to a features extractor
(`preprocess`: floats, one-hot for discrete spaces, a dict of those for Dict; images are not
rescaled there). Running statistics change only through `update(preprocessed_batch)`, never in
`forward`. A space no encoder fits (Text, Graph, a Dict or Tuple inside a Dict) is refused with one line
naming it (`UnsupportedSpace`). Adding an encoder: a class here and a branch in `choose`.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch as th
import torch.nn.functional as F
from torch import nn

from gailkit.model.spaces import UnsupportedSpace, check_space, flat_dim, is_image, start_of

Obs = th.Tensor | dict[str, th.Tensor]
KINDS = ("auto", "flat", "cnn")


def preprocess(space: gym.Space, x: Any) -> Obs:
    """Raw batch (tensor, or dict of tensors) -> what an encoder takes: one-hot for discrete spaces (of the
    value minus the space's start; a value outside the space, such as an absorbing row's zeros, which the
    discriminator masks afterwards, is clamped into it), 0/1 floats for MultiBinary, Boxes unchanged (stable-baselines3's `preprocess_obs` with
    `normalize_images=False`, but for the float cast, which each encoder does itself)."""
    if isinstance(space, gym.spaces.Dict):
        return {k: preprocess(sub, x[k]) for k, sub in space.spaces.items()}  # type: ignore[misc]
    x = th.as_tensor(x)
    if isinstance(space, gym.spaces.Discrete):
        index = x.long().reshape(-1) - int(space.start)
        return F.one_hot(index.clamp(0, int(space.n) - 1), int(space.n)).float()
    if isinstance(space, gym.spaces.MultiDiscrete):
        nvec = np.asarray(space.nvec).reshape(-1)
        starts = np.asarray(start_of(space)).reshape(-1)
        flat = x.long().reshape(-1, len(nvec))  # not len(x): an exported graph keeps its batch size free
        return th.cat(
            [
                F.one_hot((flat[:, j] - int(s)).clamp(0, int(k) - 1), int(k)).float()
                for j, (k, s) in enumerate(zip(nvec, starts))
            ],
            dim=1,
        )
    if isinstance(space, gym.spaces.MultiBinary):
        return x.float()
    return x  # a Box as it comes: encoders cast to float32 themselves, running statistics take float64 as is


class NormalizedFlatten(nn.Module):
    """Flatten, then `(x - mean) / sqrt(var + eps)` clipped to `±clip` (identity when disabled).

    The same formula, epsilon and clip as SB3's `VecNormalize`, so its statistics can be copied in.
    The buffers exist either way (a policy's weights have the same names with and without).
    """

    mean: th.Tensor  # buffers (saved with the policy)
    var: th.Tensor
    count: th.Tensor

    def __init__(self, observation_space: gym.Space, normalize: bool = True, clip: float = 10.0, eps: float = 1e-8):
        super().__init__()
        self.features_dim = dim = flat_dim(observation_space)
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
        """Merge a batch `(N, ...)` into the running statistics (Chan et al.'s parallel update)."""
        x = th.flatten(batch, start_dim=1).to(self.mean.device, th.float64)
        n = x.shape[0]
        if n == 0 or not self.normalize:
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


class Flatten(nn.Module):
    """Flatten, nothing else: the discriminator's vector encoder (its own input norm follows)."""

    def __init__(self, observation_space: gym.Space):
        super().__init__()
        self.features_dim = flat_dim(observation_space)

    def forward(self, obs: th.Tensor) -> th.Tensor:
        return th.flatten(obs, start_dim=1).float()

    def update(self, batch: th.Tensor) -> None:
        pass


CNN_CHUNK = 256
"""Frames a CNN encodes at a time: a larger batch (a round's values or rewards) goes through in chunks of this
many, which keeps its activations in cache and its buffers reused (1,024 Pong frames are slower whole:
`bench/cnn_cast.py`, BENCHMARKS.md). The result is the same; an ONNX export traces one pass."""


class ImageCNN(nn.Module):
    """Frames (N, C, H, W), (N, H, W, C), grey (N, H, W), or stacks of frames with channels (N, K, H, W, C)
    or (N, K, C, H, W), their K x C channels read as one frame's -> (N, features_dim).

    Nature DQN's convolutions (32 8x8/4, 64 4x4/2, 64 3x3/1, as SB3's `NatureCNN`) for frames of
    at least 36x36; two padded 3x3 convolutions for smaller ones. uint8 spaces are scaled by 1/255.
    """

    def __init__(self, observation_space: gym.Space, features_dim: int = 512):
        super().__init__()
        assert isinstance(observation_space, gym.spaces.Box) and len(observation_space.shape) in (2, 3, 4)
        self.grey = len(observation_space.shape) == 2  # one channel, added in `forward`
        self.stacked = len(observation_space.shape) == 4  # K frames: their channels merged in `forward`
        shape = (1, *observation_space.shape) if self.grey else observation_space.shape[self.stacked :]
        self.channels_first = int(np.argmin(shape)) == 0
        c, h, w = shape if self.channels_first else (shape[2], shape[0], shape[1])
        c *= observation_space.shape[0] if self.stacked else 1
        self.scale = 1.0 / 255.0 if observation_space.dtype == np.uint8 else 1.0
        if min(h, w) >= 36:
            convs: list[nn.Module] = [nn.Conv2d(c, 32, 8, 4), nn.ReLU(), nn.Conv2d(32, 64, 4, 2), nn.ReLU()]
            convs += [nn.Conv2d(64, 64, 3, 1), nn.ReLU(), nn.Flatten()]
        else:
            convs = [nn.Conv2d(c, 16, 3, 1, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, 1, padding=1), nn.ReLU()]
            convs += [nn.Flatten()]
        self.cnn = nn.Sequential(*convs)
        with th.no_grad():
            n_flat = self.cnn(th.zeros(1, c, h, w)).shape[1]
        self.linear = nn.Sequential(nn.Linear(n_flat, features_dim), nn.ReLU())
        self.features_dim = features_dim

    def forward(self, obs: th.Tensor) -> th.Tensor:
        exporting = th.jit.is_tracing() or th.onnx.is_in_onnx_export()
        if len(obs) <= CNN_CHUNK or exporting:
            return self._forward(obs)
        return th.cat([self._forward(part) for part in th.split(obs, CNN_CHUNK)])

    def _forward(self, obs: th.Tensor) -> th.Tensor:
        if self.stacked:  # (N, K, C, H, W) -> (N, K x C, H, W): frame 0's channels first
            x = (obs if self.channels_first else obs.permute(0, 1, 4, 2, 3)).flatten(1, 2)
        else:
            obs = obs.unsqueeze(1) if self.grey else obs
            x = obs if self.channels_first else obs.permute(0, 3, 1, 2)
        # On the CPU, oneDNN's convolutions run about a third faster on channels-last input (forward and
        # backward; BENCHMARKS.md, Pong). The frames are cast once, uint8 to float32 in that layout; the 1/255
        # scale is folded into the first convolution's weights instead of a pass over the frames (the same
        # function: a convolution is linear in its input). Weights keep their layout and values.
        fmt = th.channels_last if x.device.type == "cpu" else th.preserve_format
        x = x.to(dtype=th.float32, memory_format=fmt)
        first = self.cnn[0]
        assert isinstance(first, nn.Conv2d)
        weight = first.weight * self.scale if self.scale != 1.0 else first.weight
        x = F.conv2d(x, weight, first.bias, first.stride, first.padding)
        return self.linear(self.cnn[1:](x))

    def update(self, batch: th.Tensor) -> None:
        pass


class DictEncoder(nn.Module):
    """One encoder per entry of a Dict space (in the space's key order), features concatenated."""

    def __init__(
        self, observation_space: gym.Space, kind: str = "auto", normalize: bool = True, cnn_features: int = 512
    ):
        super().__init__()
        assert isinstance(observation_space, gym.spaces.Dict)
        self.encoders = nn.ModuleDict(
            {k: make(sub, kind, normalize, cnn_features) for k, sub in observation_space.spaces.items()}
        )
        self.features_dim = sum(width(e) for e in self.encoders.values())

    def forward(self, obs: dict[str, th.Tensor]) -> th.Tensor:
        return th.cat([enc(obs[k]) for k, enc in self.encoders.items()], dim=1)

    def update(self, batch: dict[str, th.Tensor]) -> None:
        for k, enc in self.encoders.items():
            update_stats(enc, batch[k])


def width(encoder: nn.Module) -> int:
    width = encoder.features_dim
    assert isinstance(width, int)
    return width


def update_stats(encoder: nn.Module, batch: Obs) -> None:
    """Merge a preprocessed batch into `encoder`'s running statistics (if it keeps any)."""
    update = getattr(encoder, "update", None)
    if callable(update):
        update(batch)


def choose(
    space: gym.Space, kind: str = "auto", normalize: bool | None = True, cnn_features: int = 512
) -> tuple[type[nn.Module], dict[str, Any]]:
    """`(class, kwargs)` of the encoder for `space`; `class(space, **kwargs)` builds it (SB3's
    `features_extractor_class`/`_kwargs`). `normalize=None`: no running statistics at all."""
    check_space(space)
    if kind not in KINDS:
        raise UnsupportedSpace(f"encoder {kind!r}: expected one of {', '.join(KINDS)}")
    if isinstance(space, gym.spaces.Dict):
        return DictEncoder, {"kind": kind, "normalize": normalize, "cnn_features": cnn_features}
    if kind == "cnn" and not is_image(space, "cnn"):
        raise UnsupportedSpace(
            f"encoder 'cnn' needs images (a 3-dimensional Box, or 2-dimensional of 8x8 or more), not {space}"
        )
    if is_image(space, kind):
        return ImageCNN, {"features_dim": cnn_features}
    if normalize is None:
        return Flatten, {}
    box = isinstance(space, gym.spaces.Box)
    return NormalizedFlatten, {"normalize": bool(normalize and box)}


def make(space: gym.Space, kind: str = "auto", normalize: bool | None = True, cnn_features: int = 512) -> nn.Module:
    """The encoder for `space` (see `choose`); it has `features_dim`, `forward` and `update`."""
    cls, kwargs = choose(space, kind, normalize, cnn_features)
    return cls(space, **kwargs)


__all__ = [
    "DictEncoder",
    "Flatten",
    "ImageCNN",
    "NormalizedFlatten",
    "UnsupportedSpace",
    "check_space",
    "choose",
    "flat_dim",
    "is_image",
    "make",
    "update_stats",
    "width",
    "preprocess",
]
