"""The off-policy generator's replay for frame stacks (`env.frame_stack` K: observations `(K, *frame)`),
holding each frame once.

Consecutive observations of one env share K - 1 frames, and a transition's next observation shares
K - 1 with its own observation, so `Replay` (which holds both stacks whole) holds every frame 2K
times. Here frames live once in a ring of their own, and a transition holds the ids of its
observation's K frames and its next observation's K: a transition that continues one already held
(its observation is that one's next observation, frame for frame) writes one new frame, the first
of an episode K + 1. Nothing about the env is assumed: sharing is found by comparing frames, and
a stack that does not continue its predecessor, or a next observation that is not its observation
shifted by one frame, has its frames written in full.

The frame ring holds `FRAMES_PER_ROW` frames a transition. Frame ids count every frame written; a
frame is held while its id is among the ring's last, and a transition is sampled only while all its
frames are held (the oldest transitions of a run whose episodes are shorter than about 2K steps
lose frames first). Checkpoints carry the held frames and transitions, their ids as they are, as
two Arrow IPC streams (zstd), read back with the same checks as any Arrow input; a replay of
whole stacks (`Replay.state()`, written before this class existed) loads too.
"""

from __future__ import annotations

import json
import struct
from collections import OrderedDict
from typing import Any

import gymnasium as gym
import numpy as np
import pyarrow as pa

from gailkit.algo.generator.replay import Replay, read_ipc, shape_dtype, to_ipc
from gailkit.core import limits, textparse
from gailkit.core.arrow_tensors import to_arrow, to_numpy

FRAMES_PER_ROW = 2
LOOKBACK = 8192  # the next observations remembered (by their frames' hash) for the transitions that continue them
MAGIC = b"GKFRAMES"


def is_frame_stack(space: gym.Space, frame_stack: int) -> bool:
    return (
        frame_stack > 1
        and isinstance(space, gym.spaces.Box)
        and len(space.shape) >= 2
        and space.shape[0] == frame_stack
    )


def make_replay(observation_space: gym.Space, action_space: gym.Space, capacity: int, frame_stack: int = 1) -> Any:
    """A `FrameReplay` for stacks of `frame_stack` frames, else a `Replay`."""
    if is_frame_stack(observation_space, frame_stack):
        return FrameReplay(observation_space, action_space, capacity)
    return Replay(observation_space, action_space, capacity)


class FrameReplay:
    """Transitions `obs_ids`, `acts`, `next_ids`, `terminated` over a ring of frames (see the module)."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, capacity: int):
        assert isinstance(observation_space, gym.spaces.Box)
        self.k = int(observation_space.shape[0])
        self.frame_shape, self.frame_dtype = tuple(observation_space.shape[1:]), np.dtype(observation_space.dtype)
        self.act_shape = shape_dtype(action_space)[0]
        frame_bytes = int(np.prod(self.frame_shape)) * self.frame_dtype.itemsize
        per = FRAMES_PER_ROW * frame_bytes + 2 * self.k * 8 + 4 * int(np.prod(self.act_shape)) + 1
        self.wanted = capacity
        self.capacity = max(1, min(capacity, limits.memory_budget() // max(1, per)))
        self.n_frames = FRAMES_PER_ROW * self.capacity + 2 * self.k  # room for one transition written in full
        self.bytes = self.capacity * per
        self.frames = np.zeros((self.n_frames, *self.frame_shape), self.frame_dtype)
        self.obs_ids = np.zeros((self.capacity, self.k), np.int64)
        self.next_ids = np.zeros((self.capacity, self.k), np.int64)
        self.acts = np.zeros((self.capacity, *self.act_shape), np.float32)
        self.terminated = np.zeros(self.capacity, bool)
        self.written = 0  # frames written so far: the next frame's id
        self.pos = 0  # the next row written
        self.size = 0
        self._latest: OrderedDict[int, np.ndarray] = OrderedDict()  # a next stack's hash -> its frames' ids

    def _write(self, frames: np.ndarray) -> np.ndarray:
        ids = self.written + np.arange(len(frames))
        self.frames[ids % self.n_frames] = frames
        self.written += len(frames)
        return ids

    def _held(self, ids: np.ndarray) -> np.ndarray:
        return ids.min(axis=-1) >= self.written - self.n_frames

    def _continued(self, stack: np.ndarray) -> np.ndarray | None:
        """The ids of a held next observation equal to `stack`, frame for frame."""
        ids = self._latest.get(hash(stack.tobytes()))
        if ids is not None and self._held(ids) and np.array_equal(self.frames[ids % self.n_frames], stack):
            return ids
        return None

    def add(self, obs: Any, acts: np.ndarray, next_obs: Any, terminated: np.ndarray) -> None:
        obs, next_obs = np.asarray(obs), np.asarray(next_obs)
        acts = np.asarray(acts, np.float32).reshape(len(terminated), *self.act_shape)
        for i in range(len(terminated)):
            o, nxt = obs[i], next_obs[i]
            obs_ids = self._continued(o)
            if obs_ids is None:
                obs_ids = self._write(o)
            if np.array_equal(nxt[:-1], o[1:]):
                next_ids = np.concatenate([obs_ids[1:], self._write(nxt[-1:])])
            else:
                next_ids = self._write(nxt)
            row = self.pos
            self.obs_ids[row], self.next_ids[row] = obs_ids, next_ids
            self.acts[row], self.terminated[row] = acts[i], terminated[i]
            self.pos = (self.pos + 1) % self.capacity
            self.size = min(self.capacity, self.size + 1)
            self._remember(nxt, next_ids)

    def _remember(self, stack: np.ndarray, ids: np.ndarray) -> None:
        key = hash(stack.tobytes())
        self._latest.pop(key, None)
        self._latest[key] = ids
        if len(self._latest) > LOOKBACK:
            self._latest.popitem(last=False)

    def _rows_held(self, rows: np.ndarray) -> np.ndarray:
        return self._held(self.obs_ids[rows]) & self._held(self.next_ids[rows])

    def sample(self, n: int, rng: np.random.Generator) -> tuple[Any, ...]:
        """`n` transitions drawn uniformly from those whose frames are all held: (obs, acts, next_obs,
        terminated), stacks built."""
        rows = rng.integers(0, self.size, n)
        lost = ~self._rows_held(rows)
        if lost.any():  # redraw from the transitions still whole (rare: the oldest, when episodes are short)
            whole = np.flatnonzero(self._rows_held(np.arange(self.size)))
            if not len(whole):
                raise ValueError("the replay holds no transition whose frames are all held")
            rows[lost] = whole[rng.integers(0, len(whole), int(lost.sum()))]
        return (
            self.frames[self.obs_ids[rows] % self.n_frames],
            self.acts[rows],
            self.frames[self.next_ids[rows] % self.n_frames],
            self.terminated[rows],
        )

    def _ordered_rows(self) -> np.ndarray:
        """The rows held whole, oldest first."""
        start = self.pos if self.size == self.capacity else 0
        rows = (start + np.arange(self.size)) % self.capacity
        return rows[self._rows_held(rows)]

    def state(self) -> bytes:
        """MAGIC, a header (JSON), then the transitions and the held frames as Arrow IPC streams (zstd)."""
        rows = self._ordered_rows()
        first = max(0, self.written - self.n_frames)
        ids = np.arange(first, self.written)
        transitions = pa.table(
            {
                "obs_ids": to_arrow(self.obs_ids[rows]),
                "acts": to_arrow(self.acts[rows]),
                "next_ids": to_arrow(self.next_ids[rows]),
                "terminated": to_arrow(self.terminated[rows]),
            }
        )
        a, b = to_ipc(transitions), to_ipc(pa.table({"frames": to_arrow(self.frames[ids % self.n_frames])}))
        header = json.dumps({"written": int(self.written), "first": int(first)}).encode()
        return MAGIC + struct.pack("<QQQ", len(header), len(a), len(b)) + header + a + b

    def load_state(self, blob: Any) -> None:
        """Replace the transitions with those of `state()`'s bytes (or `Replay.state()`'s, stacks whole);
        ValueError, nothing changed, when they do not fit this replay's spaces. Everything is checked
        before the replay's own arrays are written."""
        data = bytes(blob)
        if data.startswith(MAGIC):
            self._install(*self._parsed(data))
            return
        stacked = gym.spaces.Box(0, 1, (self.k, *self.frame_shape), self.frame_dtype)
        cols = Replay(stacked, gym.spaces.Box(-1, 1, self.act_shape, np.float32), 1).read_columns(data)
        n = len(cols["terminated"])
        keep = slice(max(0, n - self.capacity), n)
        self.written = self.pos = self.size = 0
        self._latest.clear()
        self.add(cols["obs"][keep], cols["acts"][keep], cols["next_obs"][keep], cols["terminated"][keep])

    def _parsed(self, data: bytes) -> tuple[dict[str, np.ndarray], np.ndarray, int, int]:
        """(transitions by column, held frames, the first held frame's id, frames written), checked."""
        head = len(MAGIC) + 24
        if len(data) < head:
            raise ValueError("unreadable replay (cut short)")
        n_header, n_a, n_b = struct.unpack("<QQQ", data[len(MAGIC) : head])
        if head + n_header + n_a + n_b != len(data):
            raise ValueError("unreadable replay (its parts' lengths do not add up)")
        try:
            header = textparse.loads_json(data[head : head + n_header])
            written, first = int(header["written"]), int(header["first"])
        except (ValueError, KeyError, TypeError):
            raise ValueError("unreadable replay (header)") from None
        transitions = read_ipc(data[head + n_header : head + n_header + n_a], "the checkpoint's replay")
        held = read_ipc(data[head + n_header + n_a :], "the checkpoint's replay frames")
        want = {"obs_ids": ((self.k,), np.int64), "acts": (self.act_shape, np.float32),
                "next_ids": ((self.k,), np.int64), "terminated": ((), np.bool_)}  # fmt: skip
        if transitions.column_names != list(want) or held.column_names != ["frames"]:
            raise ValueError(f"replay columns {transitions.column_names + held.column_names}, expected frame ids")
        cols = {k: to_numpy(transitions.column(k).combine_chunks()) for k in want}
        frames = to_numpy(held.column("frames").combine_chunks())
        for k, (shape, dtype) in {**want, "frames": (self.frame_shape, self.frame_dtype)}.items():
            v = frames if k == "frames" else cols[k]
            if v.shape[1:] != shape or v.dtype != dtype:
                raise ValueError(f"replay column {k} is {v.shape[1:]} {v.dtype}, expected {shape} {dtype}")
        if not 0 <= first <= written or written - first != len(frames):
            raise ValueError(f"replay header: frames {first}..{written} for {len(frames)} held")
        for k in ("obs_ids", "next_ids"):
            if len(cols[k]) and (cols[k].min() < first or cols[k].max() >= written):
                raise ValueError(f"replay column {k} names frames outside the {first}..{written} held")
        return cols, frames, first, written

    def _install(self, cols: dict[str, np.ndarray], frames: np.ndarray, first: int, written: int) -> None:
        """The checked contents of a checkpoint, into this replay's arrays (the most recent that fit)."""
        keep_from = max(first, written - self.n_frames)
        kept = np.arange(keep_from, written)
        self.frames[kept % self.n_frames] = frames[keep_from - first :]
        whole = (cols["obs_ids"].min(axis=1, initial=written) >= keep_from) & (
            cols["next_ids"].min(axis=1, initial=written) >= keep_from
        )
        rows = np.flatnonzero(whole)[-self.capacity :]
        n = len(rows)
        self.obs_ids[:n], self.next_ids[:n] = cols["obs_ids"][rows], cols["next_ids"][rows]
        self.acts[:n], self.terminated[:n] = cols["acts"][rows], cols["terminated"][rows]
        self.written, self.pos, self.size = written, n % self.capacity, n
        self._latest.clear()
        for r in range(max(0, n - LOOKBACK), n):
            self._remember(self.frames[self.next_ids[r] % self.n_frames], self.next_ids[r].copy())
