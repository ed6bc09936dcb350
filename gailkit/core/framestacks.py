"""Frame stacks held as their frames: `(N, K, *frame)` stacks stored as the frames once and an `(N, K)`
index, each stack built when its rows are read (`stacks[idx]`).

A K-frame stack repeats every frame K times in `obs` and K more in `next_obs`; Pong's 4 x 84 x 84 stacks
held whole cost 55 KiB a transition where its frames cost 7 KiB. Demo stacks (`data.demos.stacks`) are
held this way from the moment they are rebuilt, through the discriminator's expert pool and behaviour
cloning, on the CPU or the learner's device; what a minibatch reads is a plain array or tensor.

The class works on numpy arrays and torch tensors alike (`map` moves both parts to another backend or
device; nothing here imports torch).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np


class FrameStacks:
    """`N` stacks of `K` frames: stack `i` is `frames[index[i]]` (the oldest frame first)."""

    __slots__ = ("frames", "index")

    def __init__(self, frames: Any, index: Any):
        if len(index.shape) != 2:
            raise ValueError(f"a frame-stack index is (N, K), not {tuple(index.shape)}")
        self.frames, self.index = frames, index

    @property
    def shape(self) -> tuple[int, ...]:
        return (int(self.index.shape[0]), int(self.index.shape[1]), *(int(s) for s in self.frames.shape[1:]))

    @property
    def dtype(self) -> Any:
        return self.frames.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        """What is held (frames and index), not what the stacks would take built."""
        return int(self.frames.nbytes) + int(self.index.nbytes)

    def __len__(self) -> int:
        return int(self.index.shape[0])

    def __getitem__(self, idx: Any) -> Any:
        """The stacks at rows `idx` (an int, a slice, an index array or tensor), built: an array or
        tensor of the frames' kind."""
        return self.frames[self.index[idx]]

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        """Every stack built (K times the frames' memory): for code that needs the whole array."""
        return np.asarray(self.frames[self.index], dtype=dtype)

    def map(self, fn: Callable[[Any], Any]) -> FrameStacks:
        """`fn` applied to the frames and the index (a backend or device move: `th.as_tensor`, `.to(d)`)."""
        return FrameStacks(fn(self.frames), fn(self.index))

    def to(self, device: Any) -> FrameStacks:
        return self.map(lambda a: a.to(device))

    def cpu(self) -> FrameStacks:
        return self.map(lambda a: a.cpu())

    @staticmethod
    def of_built(stacks: Any, arange: Callable[[int], Any]) -> FrameStacks:
        """Built stacks `(n, K, *frame)` as a FrameStacks holding their n * K frames (`arange(m)`: the
        backend's 0..m-1, on the stacks' device)."""
        n, k = int(stacks.shape[0]), int(stacks.shape[1])
        return FrameStacks(stacks.reshape(n * k, *stacks.shape[2:]), arange(n * k).reshape(n, k))

    @staticmethod
    def share_frames(a: Any, b: Any) -> bool:
        """Whether `a` and `b` are both FrameStacks over one array of frames (obs and next_obs held once)."""
        return isinstance(a, FrameStacks) and isinstance(b, FrameStacks) and a.frames is b.frames

    @staticmethod
    def join(parts: Sequence[FrameStacks], cat: Callable[[list[Any]], Any]) -> FrameStacks:
        """The rows of every part, in order (`cat`: the backend's concatenation along axis 0)."""
        offsets, total = [], 0
        for p in parts:
            offsets.append(total)
            total += int(p.frames.shape[0])
        return FrameStacks(cat([p.frames for p in parts]), cat([p.index + o for p, o in zip(parts, offsets)]))

    def __repr__(self) -> str:
        return f"FrameStacks(shape={self.shape}, dtype={self.dtype}, frames={int(self.frames.shape[0])})"
