"""Messages between learner and actors: a fixed binary header, then an Arrow IPC stream body.

Header (big-endian, 35 bytes): magic `GKIT`, protocol version u16, kind u8, run id (16 bytes),
actor id i32, policy version i64. Bodies: fragments and weights as Arrow IPC streams (fully
validated by Arrow before any value is read); hello, config and reject as UTF-8 JSON. Nothing is
unpickled: any message that does not parse exactly raises `ProtocolError` and nothing else (the
fuzz tests hold this), which receivers count and drop. Whether a well-formed fragment fits the run
is `fragments.FragmentSpec`'s business.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import struct
from typing import Any

import numpy as np
import pyarrow as pa

from gailkit.core import arrow_tensors, limits, textparse
from gailkit.core import obs as obs_tree
from gailkit.core.errors import InputError
from gailkit.core.fragments import Fragment, Weights

PROTOCOL_VERSION = (
    4  # 2: REJECT; fragments checked against the run's spaces. 3: CONFIG names `policy`, not `ppo`. 4: `policy_kind`
)
MAGIC = b"GKIT"
_HEADER = struct.Struct("!4sHB16siq")
HEADER_SIZE = _HEADER.size


class Kind(enum.IntEnum):
    HELLO = 1  # actor -> learner: JSON {"actor_id", "host", "pid"}
    CONFIG = 2  # learner -> actor: JSON settings (env, ppo, envs, seed, ...)
    WORK = 3  # learner -> actor: weights of version v; collect one fragment with them
    FRAGMENT = 4  # actor -> learner
    HEARTBEAT = 5  # actor -> learner: alive (while collecting, or idle)
    STOP = 6  # learner -> actor: exit
    REJECT = 7  # actor -> learner: JSON {"reason"}; the WORK of that version was not done (bad weights)


class ProtocolError(Exception):
    """A message that is not a well-formed gailkit message of this protocol and run."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


@dataclasses.dataclass(frozen=True)
class Header:
    kind: Kind
    run_id: bytes
    actor_id: int
    policy_version: int
    protocol: int = PROTOCOL_VERSION

    def pack(self) -> bytes:
        return _HEADER.pack(MAGIC, self.protocol, int(self.kind), self.run_id, self.actor_id, self.policy_version)


def parse_header(data: bytes, run_id: bytes | None) -> Header:
    """Check magic, protocol, kind and (when given) run id."""
    if len(data) != HEADER_SIZE:
        raise ProtocolError("malformed", f"header of {len(data)} bytes, expected {HEADER_SIZE}")
    magic, protocol, kind, rid, actor_id, version = _HEADER.unpack(data)
    if magic != MAGIC:
        raise ProtocolError("malformed", "bad magic")
    if protocol != PROTOCOL_VERSION:
        raise ProtocolError("wrong_version", f"protocol {protocol}, expected {PROTOCOL_VERSION}")
    try:
        kind = Kind(kind)
    except ValueError:
        raise ProtocolError("malformed", f"unknown kind {kind}") from None
    if run_id is not None and kind != Kind.HELLO and rid != run_id:
        raise ProtocolError("wrong_run", rid.hex())
    return Header(kind, rid, actor_id, version, protocol)


def _ipc(batch: pa.RecordBatch, compress: bool = False) -> bytes:
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression="lz4") if compress else None
    with pa.ipc.new_stream(sink, batch.schema, options=options) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def _read_batch(body: bytes) -> pa.RecordBatch:
    try:
        limits.check_ipc(body, "message")  # declared, decompressed sizes, before Arrow allocates any
    except InputError as e:
        raise ProtocolError("malformed", str(e)[:300]) from None
    try:
        table = pa.ipc.open_stream(pa.py_buffer(body)).read_all()
        table.validate(full=True)  # offsets and lengths checked before any value is touched
    except Exception as e:  # noqa: BLE001 - Arrow raises several types for hostile bytes; all mean malformed
        raise ProtocolError("malformed", f"not a valid Arrow IPC stream ({type(e).__name__}: {str(e)[:200]})") from None
    batches = table.to_batches()
    if len(batches) != 1:
        raise ProtocolError("malformed", f"{len(batches)} record batches, expected 1")
    return batches[0]


_STEP_FIELDS = ("obs", "acts", "next_obs", "terminated", "truncated", "log_probs", "rews")


def encode_fragment(f: Fragment) -> bytes:
    t, e = f.n_steps, f.n_envs
    cols = {  # a Dict observation travels as one column per entry (`obs/key`)
        name: arrow_tensors.to_arrow(obs_tree.merge_steps(arr))
        for field in _STEP_FIELDS
        for name, arr in obs_tree.items(getattr(f, field), field)
    }
    meta = {
        "n_steps": t,
        "n_envs": e,
        "first_starts": f.first_starts.tolist(),
        "episode_returns": f.episode_returns.tolist(),
        "episode_lengths": f.episode_lengths.tolist(),
        "sample_seconds": f.sample_seconds,
    }
    batch = pa.record_batch(list(cols.values()), names=list(cols))
    big = batch.nbytes >= arrow_tensors.FRAME_ROW_BYTES * max(1, batch.num_rows)  # frames travel LZ4-compressed
    return _ipc(batch.replace_schema_metadata({b"gailkit": json.dumps(meta).encode()}), compress=big)


def decode_fragment(body: bytes, actor_id: int, policy_version: int) -> Fragment:
    """A FRAGMENT body from `actor_id`, collected with weights `policy_version` (from its header on the
    wire; from the slot and the version asked for with Ray)."""
    batch = _read_batch(body)
    try:
        meta = textparse.loads_json((batch.schema.metadata or {})[b"gailkit"])
        t, e = int(meta["n_steps"]), int(meta["n_envs"])
        if batch.num_rows != t * e:
            raise ValueError(f"{batch.num_rows} rows for {t} x {e}")
        cols = {c: batch.column(c) for c in batch.schema.names}
        arrays = {}
        for field in _STEP_FIELDS:
            col = obs_tree.from_columns(field, cols)
            if col is None:
                raise ValueError(f"no column '{field}'")
            arrays[field] = obs_tree.reshape_lead(obs_tree.tmap(arrow_tensors.to_numpy, col), (t, e))
        return Fragment(
            **arrays,
            first_starts=np.asarray(meta["first_starts"], bool),
            episode_returns=np.asarray(meta["episode_returns"], np.float64),
            episode_lengths=np.asarray(meta["episode_lengths"], np.int64),
            actor_id=actor_id,
            policy_version=policy_version,
            sample_seconds=float(meta.get("sample_seconds", 0.0)),
        )
    except Exception as e:  # noqa: BLE001 - any failure to parse a peer's bytes is a malformed message
        raise ProtocolError("malformed", f"bad fragment ({type(e).__name__}: {str(e)[:200]})") from None


def encode_work(w: Weights, n_steps: int) -> bytes:
    """A WORK body: the weights, and how many steps to collect with them."""
    return encode_weights(w, {"n_steps": n_steps})


def decode_work(body: bytes, policy_version: int) -> tuple[Weights, int]:
    """A WORK body sent with weights of `policy_version` (its header's)."""
    weights, meta = _decode_weights(body, policy_version)
    try:
        n_steps = int(meta["n_steps"])
    except (KeyError, TypeError, ValueError, OverflowError):
        raise ProtocolError("malformed", "WORK without n_steps") from None
    if not 1 <= n_steps <= 1 << 24:
        raise ProtocolError("malformed", f"WORK of {n_steps} steps")
    return weights, n_steps


def encode_weights(w: Weights, meta: dict[str, Any] | None = None) -> bytes:
    names = list(w.tensors)
    arrays = [
        np.array(w.tensors[n], order="C", copy=True) for n in names
    ]  # ascontiguousarray would make 0-d arrays 1-d
    batch = pa.record_batch(
        [
            pa.array(names, pa.string()),
            pa.array([str(a.dtype) for a in arrays], pa.string()),
            pa.array([list(a.shape) for a in arrays], pa.list_(pa.int64())),
            pa.array([a.tobytes() for a in arrays], pa.large_binary()),
        ],
        names=["name", "dtype", "shape", "data"],
    )
    if meta:
        batch = batch.replace_schema_metadata({b"gailkit": json.dumps(meta).encode()})
    return _ipc(batch)


_WEIGHT_DTYPES = {"float32", "float64", "float16", "int64", "int32", "bool"}


def decode_weights(body: bytes, policy_version: int) -> Weights:
    """Weights bodies, of version `policy_version` (a WORK header's; the version Ray was asked for)."""
    return _decode_weights(body, policy_version)[0]


def _decode_weights(body: bytes, policy_version: int) -> tuple[Weights, dict[str, Any]]:
    batch = _read_batch(body)
    try:
        meta = textparse.loads_json((batch.schema.metadata or {}).get(b"gailkit", b"{}"))
        cols = batch.to_pydict()
        tensors = {}
        for name, dtype, shape, data in zip(cols["name"], cols["dtype"], cols["shape"], cols["data"]):
            if dtype not in _WEIGHT_DTYPES:
                raise ValueError(f"dtype {dtype!r} of {name}")
            tensors[name] = np.frombuffer(data, dtype=np.dtype(dtype)).reshape(tuple(shape)).copy()
        return Weights(policy_version, tensors), meta
    except Exception as e:  # noqa: BLE001 - any failure to parse a peer's bytes is a malformed message
        raise ProtocolError("malformed", f"bad weights ({type(e).__name__}: {str(e)[:200]})") from None


def encode_json(d: dict[str, Any]) -> bytes:
    return json.dumps(d).encode()


def decode_json(body: bytes) -> dict[str, Any]:
    try:
        d = textparse.loads_json(body.decode())
    except (UnicodeDecodeError, ValueError) as e:  # textparse: nesting too deep is a ValueError
        raise ProtocolError("malformed", f"bad JSON ({type(e).__name__})") from None
    if not isinstance(d, dict):
        raise ProtocolError("malformed", "JSON body is not an object")
    return d
