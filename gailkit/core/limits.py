"""How much memory a reader may allocate for one input, checked from what the input declares, before
anything is allocated: Arrow IPC streams and files (compressed buffers included, read from the
message metadata), and the declared sizes that HDF5, Parquet and zip readers report.

The budget is `GAILKIT_MEMORY_BUDGET` (bytes; `512M`, `4G` work), by default an eighth of this
machine's memory. A buffer that would inflate more than `MAX_RATIO` times its stored size is refused
as a compression bomb once it passes `RATIO_FLOOR` bytes: real observations, frames included,
compress far less.
"""

from __future__ import annotations

import os
import struct
from typing import Any

from gailkit.core.errors import InputError

MAX_RATIO = 200
RATIO_FLOOR = 64 << 20
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def memory_budget() -> int:
    text = os.environ.get("GAILKIT_MEMORY_BUDGET", "").strip().upper().removesuffix("B").removesuffix("I")
    if text:
        unit = text[-1] if text[-1] in _UNITS else ""
        try:
            value = float(text[: len(text) - len(unit)]) * _UNITS[unit]
        except ValueError:
            value = -1.0
        if not 1 << 20 <= value < 1 << 50:
            raise InputError(f"GAILKIT_MEMORY_BUDGET={os.environ['GAILKIT_MEMORY_BUDGET']!r}: a size from 1M, e.g. 4G")
        return int(value)
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        total = 8 << 30
    return max(256 << 20, total // 8)


def check_size(declared: int, stored: int | None, what: str, budget: int | None = None) -> None:
    """Refuse `declared` bytes over the budget, or inflating more than `MAX_RATIO` times `stored`."""
    budget = memory_budget() if budget is None else budget
    if declared > budget:
        raise InputError(
            f"{what}: declares {declared:,} bytes, over the memory budget of {budget:,} (GAILKIT_MEMORY_BUDGET)"
        )
    if stored is not None and declared > RATIO_FLOOR and declared > MAX_RATIO * max(stored, 1):
        raise InputError(
            f"{what}: {stored:,} stored bytes would inflate to {declared:,} "
            f"(over {MAX_RATIO}:1): refused as a compression bomb"
        )


def fixed_width(arrow_type: Any) -> float | None:
    """Bytes per value of a fixed-width Arrow type (lists of fixed size and tensors included), else None."""
    import pyarrow as pa

    t = arrow_type.storage_type if isinstance(arrow_type, pa.BaseExtensionType) else arrow_type
    if pa.types.is_fixed_size_list(t):
        inner = fixed_width(t.value_type)
        return None if inner is None else inner * t.list_size
    if pa.types.is_boolean(t):
        return 1.0  # read into numpy as one byte a value
    try:
        return t.bit_width / 8
    except ValueError:
        return None


# ---------------------------------------------------------------------------------------------
# Arrow IPC: the declared sizes of every record batch, from its flatbuffer metadata.


def _u(fmt: str, buf: Any, pos: int) -> int:
    return struct.unpack_from(fmt, buf, pos)[0]


def _field(buf: Any, table: int, index: int) -> int | None:
    """The absolute position of field `index` of the flatbuffer table at `table`, or None when absent."""
    vtable = table - _u("<i", buf, table)
    entry = 4 + 2 * index
    if entry >= _u("<H", buf, vtable):
        return None
    offset = _u("<H", buf, vtable + entry)
    return table + offset if offset else None


def _deref(buf: Any, pos: int) -> int:
    return pos + _u("<I", buf, pos)


def _structs(buf: Any, table: int, index: int) -> list[tuple[int, int]]:
    """A vector of 16-byte structs of two int64 (FieldNode, Buffer)."""
    pos = _field(buf, table, index)
    if pos is None:
        return []
    vec = _deref(buf, pos)
    n = _u("<I", buf, vec)
    if n > 1 << 20:
        raise ValueError(f"{n} entries in one record batch")
    return [struct.unpack_from("<qq", buf, vec + 4 + 16 * i) for i in range(n)]


def _batch_bytes(meta: Any, body: Any, what: str) -> int:
    """Bytes a record batch (or dictionary batch) message will occupy once read, decompressed."""
    root = _deref(meta, 0)
    header_type = _field(meta, root, 1)
    header = _field(meta, root, 2)
    if header_type is None or header is None:
        return 0
    kind = meta[header_type]
    batch = _deref(meta, header)
    if kind == 4:  # DictionaryBatch: its `data` is a RecordBatch
        data = _field(meta, batch, 1)
        if data is None:
            return 0
        batch = _deref(meta, data)
    elif kind != 3:  # Schema (1) and tensors take no buffers of ours
        return 0
    compressed = _field(meta, batch, 3) is not None
    total, stored = 0, 0
    for offset, length in _structs(meta, batch, 2):
        if offset < 0 or length < 0 or offset + length > len(body):
            raise InputError(
                f"{what}: a buffer of {length} bytes at {offset} lies outside its {len(body)}-byte message"
            )
        stored += length
        if compressed and length >= 8:
            raw = _u("<q", body, offset)
            total += length - 8 if raw == -1 else raw
            if raw < -1:
                raise InputError(f"{what}: a compressed buffer declares {raw} bytes")
        else:
            total += length
    for rows, nulls in _structs(meta, batch, 1):
        if not 0 <= nulls <= rows <= 1 << 40:
            raise InputError(f"{what}: a column declares {rows} rows with {nulls} nulls")
    check_size(total, stored, what)
    return total


def check_ipc(source: Any, what: str) -> int:
    """Bytes an Arrow IPC stream or file (`bytes`, a pyarrow buffer or memory map) declares once read;
    raises `InputError` over the budget, for a compression bomb, or for metadata that does not parse."""
    import pyarrow as pa

    buf = pa.py_buffer(source) if isinstance(source, (bytes, bytearray, memoryview)) else source
    if isinstance(buf, pa.Buffer) and buf.size >= 8 and buf[:6].to_pybytes() == b"ARROW1":
        buf = buf.slice(8)  # the file format: magic, padding, then a stream (and a footer after it)
    total = 0
    try:
        reader = pa.ipc.MessageReader.open_stream(pa.BufferReader(buf) if isinstance(buf, pa.Buffer) else buf)
        while True:
            try:
                message = reader.read_next_message()
            except StopIteration:
                break
            if message is None:
                break
            body = message.body if message.body is not None else b""
            total += _batch_bytes(memoryview(message.metadata), memoryview(body), what)
            check_size(total, None, what)
    except InputError:
        raise
    except Exception as e:  # noqa: BLE001 - hostile bytes raise several types; all mean malformed
        raise InputError(f"{what}: not a valid Arrow IPC stream ({type(e).__name__}: {str(e)[:200]})") from None
    return total
