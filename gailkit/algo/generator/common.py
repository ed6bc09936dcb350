"""What the generators share: SB3's update statistics caught in memory, the BC warm start's shape, and the
demos' observations on the device for BC."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.logger import Logger

from gailkit.core import obs as obs_tree


class StatsLogger(Logger):
    """An SB3 logger that only keeps the last values recorded (the `train/...` stats of `train()`)."""

    def __init__(self):
        super().__init__(folder=None, output_formats=[])

    def dump(self, step: int = 0) -> None:
        pass

    def take(self) -> dict[str, float]:
        """The `train/...` values recorded since the last call."""
        stats = {k: float(v) for k, v in self.name_to_value.items() if k.startswith("train/")}
        self.name_to_value.clear()
        return stats


def warm_start(
    bc_steps: Callable[..., list[float]],
    obs: Any,
    acts: np.ndarray,
    epochs: int,
    batch_size: int,
    lr: float,
    rng: np.random.Generator,
) -> dict[str, float]:
    """`epochs` passes' worth of a generator's `bc_steps` over (obs, acts); the first and last losses."""
    losses = bc_steps(obs, acts, epochs * -(-len(acts) // batch_size), batch_size, lr, rng)
    return {
        "bc/loss_first": float(losses[0]) if losses else 0.0,
        "bc/loss_last": float(np.mean(losses[-10:])) if losses else 0.0,
    }


def bc_tensors(obs: Any, device: th.device | str) -> Any:
    """The demos' observations as tensors on `device` for BC's minibatches: sharing the arrays' memory on
    the CPU where they are writable (a read-only map is copied), frame stacks kept as frames and an index."""

    return obs_tree.convert(lambda v: th.as_tensor(obs_tree.writable(v), device=device), obs)
