"""The off-policy generator's replay: the run's own transitions, without rewards.

A ring of `capacity` transitions (observations as the env gives them: uint8 frames stay uint8;
actions in the env's units; the true next observation; whether the step terminated). Rewards are
never stored: the discriminator that judges a sample is the current one (DAC). The capacity is
bounded by the memory budget as well as by `sac.buffer_size`, and its state travels in
checkpoints as an Arrow IPC stream (zstd), read back with the same size checks and full validation
as any Arrow file.
"""

from __future__ import annotations

import io
from typing import Any

import gymnasium as gym
import numpy as np
import pyarrow as pa

from gailkit.core import limits
from gailkit.core.arrow_tensors import to_arrow, to_numpy

FIELDS = ("obs", "acts", "next_obs", "terminated")


def _shape_dtype(space: gym.Space) -> tuple[tuple[int, ...], np.dtype]:
    if isinstance(space, gym.spaces.Discrete):
        return (), np.dtype(np.int64)
    if isinstance(space, gym.spaces.Box):
        return tuple(space.shape), np.dtype(space.dtype)
    raise ValueError(f"the replay holds Box and Discrete observations, not {space}")


class Replay:
    def __init__(self, observation_space: gym.Space, action_space: gym.Space, capacity: int):
        obs_shape, obs_dtype = _shape_dtype(observation_space)
        act_shape, _ = _shape_dtype(action_space)
        self.layout = {
            "obs": (obs_shape, obs_dtype),
            "acts": (act_shape, np.dtype(np.float32)),
            "next_obs": (obs_shape, obs_dtype),
            "terminated": ((), np.dtype(bool)),
        }
        per = sum(int(np.prod(s)) * d.itemsize for s, d in self.layout.values())
        self.wanted = capacity
        self.capacity = max(1, min(capacity, limits.memory_budget() // max(1, per)))
        self.bytes = self.capacity * per
        self.data = {k: np.zeros((self.capacity, *s), d) for k, (s, d) in self.layout.items()}
        self.pos = 0  # the next row written
        self.size = 0

    def add(self, obs: np.ndarray, acts: np.ndarray, next_obs: np.ndarray, terminated: np.ndarray) -> None:
        rows = {"obs": obs, "acts": acts, "next_obs": next_obs, "terminated": terminated}
        n = len(terminated)
        idx = (self.pos + np.arange(n)) % self.capacity
        for k, v in rows.items():
            self.data[k][idx] = np.asarray(v).reshape(n, *self.layout[k][0])
        self.pos = int((self.pos + n) % self.capacity)
        self.size = min(self.capacity, self.size + n)

    def sample(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
        """`n` transitions drawn uniformly: (obs, acts, next_obs, terminated)."""
        idx = rng.integers(0, self.size, n)
        return tuple(self.data[k][idx] for k in FIELDS)

    def _ordered(self) -> dict[str, np.ndarray]:
        """The rows held, oldest first."""
        start = self.pos if self.size == self.capacity else 0
        idx = (start + np.arange(self.size)) % self.capacity
        return {k: self.data[k][idx] for k in FIELDS}

    def state(self) -> bytes:
        """The rows held, oldest first, as an Arrow IPC stream (zstd)."""
        table = pa.table({k: to_arrow(v) for k, v in self._ordered().items()})
        sink = io.BytesIO()
        options = pa.ipc.IpcWriteOptions(compression="zstd")
        with pa.ipc.new_stream(sink, table.schema, options=options) as writer:
            writer.write_table(table)
        return sink.getvalue()

    def load_state(self, blob: Any) -> None:
        """Replace the rows with those of `state()`'s bytes; ValueError (nothing changed) when they do
        not fit this replay's spaces."""
        data = bytes(blob)
        try:
            limits.check_ipc(data, "the checkpoint's replay")
            table = pa.ipc.open_stream(data).read_all()
            table.validate(full=True)
        except (pa.ArrowException, OSError, limits.InputError) as e:
            raise ValueError(f"unreadable replay ({type(e).__name__}: {str(e)[:200]})") from None
        if table.column_names != list(FIELDS):
            raise ValueError(f"replay columns {table.column_names}, expected {list(FIELDS)}")
        cols = {k: to_numpy(table.column(k).combine_chunks()) for k in FIELDS}
        for k, (shape, dtype) in self.layout.items():
            if cols[k].shape[1:] != shape or cols[k].dtype != dtype:
                raise ValueError(f"replay column {k} is {cols[k].shape[1:]} {cols[k].dtype}, expected {shape} {dtype}")
        n = min(table.num_rows, self.capacity)
        self.pos = self.size = 0
        self.add(*(cols[k][table.num_rows - n :] for k in FIELDS))
