"""`Batch`: transitions as the discriminator takes them, structured, not one pre-flattened matrix.

The fields follow imitation's `RewardNet(state, action, next_state, done)`: observations as the env
gives them (uint8 frames stay uint8, discrete observations stay integers, a Dict space gives a dict
of tensors), actions, next observations, and two absorbing flags (DAC: "this observation is the
absorbing state after a termination", "the next one is"). Preprocessing (one-hot, scaling) and
encoding happen inside the network (`nets.Inputs`), so pools of images cost their uint8 size.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch as th

from gailkit.core.framestacks import FrameStacks

Obs = th.Tensor | dict[str, th.Tensor]
"""What the net takes. An expert pool of frame stacks holds a `FrameStacks` (frames once and an index)
in their place, which `Batch.__getitem__`, `cat`, `to` and `state` handle: the rows read from the pool
(`batch[idx]`), which are what the net sees, are built tensors."""


def _map(x: Any, fn: Any) -> Any:
    if x is None:
        return None
    if isinstance(x, dict):
        return {k: fn(v) for k, v in x.items()}
    return fn(x)


def _cat(parts: Sequence[Any]) -> Any:
    if parts[0] is None:
        return None
    if isinstance(parts[0], dict):
        return {k: th.cat([p[k] for p in parts]) for k in parts[0]}
    if any(isinstance(p, FrameStacks) for p in parts):  # the expert pool's stacks and its absorbing rows
        return FrameStacks.join([p if isinstance(p, FrameStacks) else _held(p) for p in parts], th.cat)
    return th.cat(list(parts))


def _held(stacks: th.Tensor) -> FrameStacks:
    return FrameStacks.of_built(stacks, lambda n: th.arange(n, device=stacks.device))


@dataclasses.dataclass
class Batch:
    obs: Obs
    acts: th.Tensor | None
    """None when the discriminator does not look at actions (`disc.use_action: false`)."""
    next_obs: Obs | None
    """None when it does not look at next observations (`disc.use_next_state: false`)."""
    obs_absorbing: th.Tensor
    """(N,) bool."""
    next_absorbing: th.Tensor
    """(N,) bool."""

    def __len__(self) -> int:
        return len(self.obs_absorbing)

    def __getitem__(self, idx: Any) -> Batch:
        """Rows `idx` (a slice or an index tensor) of every field."""
        return Batch(*(_map(getattr(self, f.name), lambda v: v[idx]) for f in dataclasses.fields(self)))

    @staticmethod
    def cat(batches: Sequence[Batch]) -> Batch:
        fields = dataclasses.fields(Batch)
        return Batch(*(_cat([getattr(b, f.name) for b in batches]) for f in fields))

    def to(self, device: th.device | str) -> Batch:
        return Batch(*(_map(getattr(self, f.name), lambda v: v.to(device)) for f in dataclasses.fields(self)))

    def state(self) -> dict[str, Any]:
        """A checkpoint's form: a dict of CPU tensors (nested for Dict observations)."""
        return {f.name: _map(getattr(self, f.name), lambda v: v.cpu()) for f in dataclasses.fields(self)}

    @classmethod
    def from_state(cls, state: Any, device: th.device | str) -> Batch:
        """The inverse of `state`; raises ValueError for anything else (an older checkpoint's matrix)."""
        names = [f.name for f in dataclasses.fields(cls)]
        if not isinstance(state, dict) or set(state) != set(names):
            raise ValueError("not a discriminator batch")
        return cls(**state).to(device)
