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
from gailkit.core import obs as obs_tree
from gailkit.core.arrow_tensors import to_arrow, to_numpy

FIELDS = ("obs", "acts", "next_obs", "terminated")


def shape_dtype(space: gym.Space) -> tuple[tuple[int, ...], np.dtype]:
    if isinstance(space, gym.spaces.Discrete):
        return (), np.dtype(np.int64)
    if isinstance(space, (gym.spaces.Box, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)):
        return tuple(space.shape), np.dtype(space.dtype)
    raise ValueError(f"the replay holds Box, Discrete, MultiDiscrete and MultiBinary observations, not {space}")


def _obs_layout(space: gym.Space, field: str) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Column name -> (shape, dtype): one column, or `field/key` per entry of a Dict space."""
    if isinstance(space, gym.spaces.Dict):
        return {f"{field}{obs_tree.SEP}{k}": shape_dtype(sub) for k, sub in space.spaces.items()}
    return {field: shape_dtype(space)}


def to_ipc(table: pa.Table) -> bytes:
    """`table` as an Arrow IPC stream (zstd): a replay's form in checkpoints."""
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as writer:
        writer.write_table(table)
    return sink.getvalue()


def read_ipc(data: bytes, what: str) -> pa.Table:
    """`to_ipc`'s bytes back, size-checked and fully validated; ValueError for anything else."""
    try:
        limits.check_ipc(data, what)
        table = pa.ipc.open_stream(data).read_all()
        table.validate(full=True)
        return table
    except (pa.ArrowException, OSError, limits.InputError) as e:
        raise ValueError(f"unreadable replay ({type(e).__name__}: {str(e)[:200]})") from None


class Replay:
    """Columns `obs`, `acts`, `next_obs`, `terminated` (a Dict observation: one column per entry)."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, capacity: int):
        act_shape, _ = shape_dtype(action_space)
        self.keys = list(observation_space.spaces) if isinstance(observation_space, gym.spaces.Dict) else None
        self.layout = {
            **_obs_layout(observation_space, "obs"),
            "acts": (act_shape, np.dtype(np.float32)),
            **_obs_layout(observation_space, "next_obs"),
            "terminated": ((), np.dtype(bool)),
        }
        per = sum(int(np.prod(s)) * d.itemsize for s, d in self.layout.values())
        self.wanted = capacity
        self.capacity = max(1, min(capacity, limits.memory_budget() // max(1, per)))
        self.bytes = self.capacity * per
        self.data = {k: np.zeros((self.capacity, *s), d) for k, (s, d) in self.layout.items()}
        self.pos = 0  # the next row written
        self.size = 0

    def add(self, obs: Any, acts: np.ndarray, next_obs: Any, terminated: np.ndarray) -> None:
        fields = {"obs": obs, "acts": acts, "next_obs": next_obs, "terminated": terminated}
        rows = {name: v for f, x in fields.items() for name, v in obs_tree.items(x, f)}
        n = len(terminated)
        idx = (self.pos + np.arange(n)) % self.capacity
        for k, v in rows.items():
            self.data[k][idx] = np.asarray(v).reshape(n, *self.layout[k][0])
        self.pos = int((self.pos + n) % self.capacity)
        self.size = min(self.capacity, self.size + n)

    def sample(self, n: int, rng: np.random.Generator) -> tuple[Any, ...]:
        """`n` transitions drawn uniformly: (obs, acts, next_obs, terminated)."""
        idx = rng.integers(0, self.size, n)
        return self._fields({k: v[idx] for k, v in self.data.items()})

    def _fields(self, cols: dict[str, np.ndarray]) -> tuple[Any, ...]:
        """(obs, acts, next_obs, terminated) from columns (a Dict observation's entries gathered)."""
        return tuple(obs_tree.from_columns(f, cols, self.keys if f.endswith("obs") else None) for f in FIELDS)

    def _ordered(self) -> dict[str, np.ndarray]:
        """The rows held, oldest first (by column)."""
        start = self.pos if self.size == self.capacity else 0
        idx = (start + np.arange(self.size)) % self.capacity
        return {k: v[idx] for k, v in self.data.items()}

    def state(self) -> bytes:
        """The rows held, oldest first, as an Arrow IPC stream (zstd)."""
        return to_ipc(pa.table({k: to_arrow(v) for k, v in self._ordered().items()}))

    def load_state(self, blob: Any) -> None:
        """Replace the rows with those of `state()`'s bytes; ValueError (nothing changed) when they do
        not fit this replay's spaces."""
        cols = self.read_columns(bytes(blob))
        rows = len(cols["terminated"])
        n = min(rows, self.capacity)
        self.pos = self.size = 0
        self.add(*self._fields({k: v[rows - n :] for k, v in cols.items()}))

    def read_columns(self, data: bytes) -> dict[str, np.ndarray]:
        """`state()`'s rows by column, checked against this replay's spaces (ValueError)."""
        table = read_ipc(data, "the checkpoint's replay")
        if table.column_names != list(self.layout):
            raise ValueError(f"replay columns {table.column_names}, expected {list(self.layout)}")
        cols = {k: to_numpy(table.column(k).combine_chunks()) for k in self.layout}
        for k, (shape, dtype) in self.layout.items():
            if cols[k].shape[1:] != shape or cols[k].dtype != dtype:
                raise ValueError(f"replay column {k} is {cols[k].shape[1:]} {cols[k].dtype}, expected {shape} {dtype}")
        return cols
