"""Reading Arrow IPC (file, stream, Feather v1) and Parquet demo tables, bounded and validated.

Every file's declared (decompressed) sizes are checked (`limits`) before anything is read, and every
value is validated (offsets, lengths) before it is used. An IPC file of several record batches (frames,
written zstd in batches of 1,024 rows) is read a column at a time and a batch at a time (`BatchedIpc`);
anything else is read whole. Columns become numpy arrays here (`column_to_numpy`); what they mean is
`arrow_io`'s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Union

import numpy as np
import pyarrow as pa

from gailkit.core import arrow_tensors, fsutil, limits
from gailkit.core.errors import DemoError


def column_to_numpy(table: Columns, name: str, path: Path) -> np.ndarray:
    if isinstance(table, BatchedIpc):
        return table.column_numpy(name)
    col = table.column(name)
    return array_to_numpy(col.combine_chunks() if col.num_chunks != 1 else col.chunk(0), name, path)


def array_to_numpy(arr: pa.Array, name: str, path: Path) -> np.ndarray:
    if isinstance(arr.type, pa.FixedShapeTensorType):
        if arr.null_count:
            raise DemoError(f"{path}: column '{name}' has {arr.null_count} null rows")
        return arrow_tensors.to_numpy(arr)
    if pa.types.is_fixed_size_list(arr.type) or pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type):
        return nested_lists_to_numpy(arr, name, path)
    if arr.null_count:
        first = int(np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))[0])
        raise DemoError(f"{path}: column '{name}' row {first} is null")
    return arr.to_numpy(zero_copy_only=False)


def nested_lists_to_numpy(arr: pa.Array, name: str, path: Path) -> np.ndarray:
    """Lists (of lists ...) of numbers with equal lengths per level -> one (N, d1, d2, ...) array."""
    shape = [len(arr)]
    values = arr
    while (
        pa.types.is_fixed_size_list(values.type) or pa.types.is_list(values.type) or pa.types.is_large_list(values.type)
    ):
        if values.null_count:
            raise DemoError(f"{path}: column '{name}' has null entries")
        if pa.types.is_fixed_size_list(values.type):
            width = values.type.list_size
        else:
            lengths = values.value_lengths().to_numpy(zero_copy_only=False)
            if len(lengths) and (lengths != lengths[0]).any():
                row = int(np.flatnonzero(lengths != lengths[0])[0])
                raise DemoError(
                    f"{path}: column '{name}' is ragged: entry {row} has {lengths[row]} values, entry 0 has {lengths[0]}"
                )
            width = int(lengths[0]) if len(lengths) else 0
        shape.append(width)
        values = values.flatten()
    return values.to_numpy(zero_copy_only=False).reshape(shape)


class BatchedIpc:
    """An Arrow IPC file of several record batches, read a column at a time and each column a batch at a time.

    A column's batches are decompressed and validated one by one and copied into one array, so reading
    peaks at the arrays already read plus one batch of one column. Reading the whole table first would
    hold every column decompressed, and then each column again when its batches are joined (a Pong file's
    frames, written zstd in batches of 1,024 rows, peaked at 1.7x their own size that way)."""

    def __init__(self, source: pa.MemoryMappedFile, path: Path):
        self.source, self.path = source, path
        reader = pa.ipc.open_file(source)
        self.schema, self.num_rows = reader.schema, reader.count_rows()
        self.column_names = self.schema.names

    def drop_columns(self, names: list[str]) -> BatchedIpc:
        return self  # nothing is held between columns

    def column_numpy(self, name: str) -> np.ndarray:
        options = pa.ipc.IpcReadOptions(included_fields=[self.schema.get_field_index(name)])
        out, pos = None, 0
        try:
            reader = pa.ipc.open_file(self.source, options=options)
            for i in range(reader.num_record_batches):
                batch = reader.get_batch(i)
                batch.validate(full=True)
                part = array_to_numpy(batch.column(0), name, self.path)
                if out is None:
                    out = np.empty((self.num_rows, *part.shape[1:]), part.dtype)
                if part.shape[1:] != out.shape[1:]:
                    raise DemoError(
                        f"{self.path}: column '{name}' is ragged: record batch {i} holds rows of shape "
                        f"{part.shape[1:]}, the first {out.shape[1:]}"
                    )
                if pos + len(part) > len(out):
                    break
                out[pos : pos + len(part)] = part
                pos += len(part)
        except (pa.ArrowException, OSError) as e:
            raise DemoError(f"{self.path}: not a readable arrow file, truncated or corrupt ({first_line(e)})") from None
        if out is None or pos != self.num_rows:
            raise DemoError(f"{self.path}: column '{name}' does not hold the {self.num_rows} rows the file declares")
        return out


def first_line(e: BaseException) -> str:
    return (str(e).splitlines() or [""])[0]


def open_ipc(path: Path, batched: bool = False) -> Columns:
    """An Arrow IPC file or stream, its declared (decompressed) sizes checked before anything is read;
    `batched`: a file of several record batches as a `BatchedIpc`, its columns read one by one."""
    fsutil.check_regular(path)
    source = pa.memory_map(str(path), "r")
    whole = source.read_buffer()
    if whole.size >= 6 and whole[:6].to_pybytes() == b"ARROW1" or not is_feather_v1(whole):
        limits.check_ipc(whole, str(path))
    try:
        reader = pa.ipc.open_file(source)
        if batched and reader.num_record_batches > 1:
            return BatchedIpc(source, path)
        return reader.read_all()
    except pa.ArrowInvalid:
        pass
    try:
        return pa.ipc.open_stream(whole).read_all()
    except pa.ArrowInvalid:
        pass
    import pyarrow.feather as feather  # Feather v1: uncompressed, so bounded by the file's own size

    return feather.read_table(str(path))


def is_feather_v1(buf: pa.Buffer) -> bool:
    return buf.size >= 4 and buf[:4].to_pybytes() == b"FEA1"


def check_parquet(path: Path) -> None:
    import pyarrow.parquet as pq

    file = pq.ParquetFile(str(path))
    meta, schema = file.metadata, file.schema_arrow
    declared = 0.0
    for i in range(meta.num_row_groups):  # encoded sizes say little (a dictionary of one zero): count rows x widths
        group = meta.row_group(i)
        for j in range(group.num_columns):
            column = group.column(j)
            top = column.path_in_schema.split(".")[0]
            width = limits.fixed_width(schema.field(top).type) if top in schema.names else None
            declared += max(0, column.total_uncompressed_size) if width is None else 0
        declared += group.num_rows * sum(limits.fixed_width(f.type) or 0 for f in schema)
    limits.check_size(int(declared), path.stat().st_size, str(path))


def read_table(path: Path, fmt: str) -> pa.Table:
    """A whole demo table, bounded (`limits`) and fully validated (offsets, lengths) before any value is used."""
    table = read_columns(path, fmt, batched=False)
    assert isinstance(table, pa.Table)
    return table


def read_columns(path: Path, fmt: str, batched: bool = True) -> Columns:
    """`read_table`, or with `batched` an IPC file of several record batches as a `BatchedIpc` (each batch
    validated as it is read)."""
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            check_parquet(fsutil.check_regular(path))
            table = pq.read_table(str(path), memory_map=True)
        else:
            table = open_ipc(path, batched)
        if isinstance(table, pa.Table):
            table.validate(full=True)
        return table
    except (pa.ArrowException, OSError) as e:
        raise DemoError(f"{path}: not a readable {fmt} file, truncated or corrupt ({first_line(e)})") from None


def open_ipc_schema(path: Path) -> pa.Schema:
    fsutil.check_regular(path)
    try:
        return pa.ipc.open_file(pa.memory_map(str(path), "r")).schema
    except pa.ArrowInvalid:
        pass
    try:
        return pa.ipc.open_stream(pa.memory_map(str(path), "r")).schema
    except pa.ArrowInvalid:
        import pyarrow.feather as feather

        return feather.read_table(str(path)).schema


Columns = Union[pa.Table, "BatchedIpc"]
"""A demo table's columns: read whole, or read one column at a time from the file."""
