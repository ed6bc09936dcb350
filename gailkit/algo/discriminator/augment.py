"""Random-shift augmentation of the frames a discriminator trains on (DrQ, Kostrikov et al. 2020).

Each transition's frames are padded by `pad` pixels (the edge repeated) and cropped back to their size
at a random offset: the same offset for its observation and its next observation, so what moves
between the two still moves. Only the parts a CNN reads are shifted (images, alone or as a Dict's
entries); vectors and rewards are not touched, and rewards are judged on frames as they are.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch as th

from gailkit.algo.discriminator.batch import Batch


def _shift(x: th.Tensor, pad: int, dy: th.Tensor, dx: th.Tensor) -> th.Tensor:
    """Frames (N, C, H, W) or (N, H, W, C) (or stacks of them, (N, K, ...)), channels where the CNN finds them (the smallest axis first or
    last), each cropped at (dy[i], dx[i]) of itself padded by `pad` with its edge: indices clamped to the
    frame, so frames keep their dtype and nothing padded is built."""
    if x.dim() == 3:  # grey frames (N, H, W): shifted as one channel
        return _shift(x.unsqueeze(1), pad, dy, dx).squeeze(1)
    if x.dim() == 5:  # stacks of K frames with channels: each frame by the same offsets
        return th.stack([_shift(x[:, i], pad, dy, dx) for i in range(x.shape[1])], dim=1)
    channels_first = int(np.argmin(x.shape[1:])) == 0
    nchw = x if channels_first else x.permute(0, 3, 1, 2)
    n, _, h, w = nchw.shape
    rows = (dy[:, None] - pad + th.arange(h, device=x.device)).clamp(0, h - 1)[:, :, None]  # (N, H, 1)
    cols = (dx[:, None] - pad + th.arange(w, device=x.device)).clamp(0, w - 1)[:, None, :]  # (N, 1, W)
    out = nchw[th.arange(n, device=x.device)[:, None, None], :, rows, cols]  # (N, H, W, C)
    return out.permute(0, 3, 1, 2).contiguous() if channels_first else out


def random_shift(b: Batch, keys: list[str | None], pad: int) -> Batch:
    """`b` with the frames at `keys` of its observations and next observations shifted (see the module)."""
    if pad <= 0 or not keys:
        return b
    n = len(b)
    dy = th.randint(0, 2 * pad + 1, (n,), device=b.obs_absorbing.device)
    dx = th.randint(0, 2 * pad + 1, (n,), device=b.obs_absorbing.device)

    def shifted(obs: Any) -> Any:
        if obs is None:
            return None
        if isinstance(obs, dict):
            return {k: _shift(v, pad, dy, dx) if k in keys else v for k, v in obs.items()}
        return _shift(obs, pad, dy, dx)

    return Batch(shifted(b.obs), b.acts, shifted(b.next_obs), b.obs_absorbing, b.next_absorbing)
