"""Arrow IPC / Feather / Parquet demo files, and imitation's HuggingFace-datasets folders.

Schema (one row per transition): `episode_id` int64, `step` int64, `obs`, `acts`, `next_obs`
(`arrow.fixed_shape_tensor` keeping each row's shape, or a plain scalar column for scalar
spaces; a Dict observation is one such column per entry, `obs/<key>` and `next_obs/<key>`),
`terminated` bool, `truncated` bool, optional `rews` float32. Schema metadata key
`gailkit` holds JSON: env_id, observation_space, action_space, source, gailkit_version,
format_version. Vector columns are written uncompressed, so a memory map reads them without copying;
frames zstd-compressed in record batches of 1,024 rows, read a batch at a time (`arrow_read`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from gailkit.core import arrow_tensors, fsutil, textparse
from gailkit.core import obs as obs_tree
from gailkit.core.errors import DemoError
from gailkit.data.demos.arrow_read import Columns, column_to_numpy, first_line, open_ipc_schema, read_columns
from gailkit.data.demos.core import DemoMeta, Demos, episode_columns

META_KEY = b"gailkit"
_REQUIRED = ("obs", "next_obs")  # `acts` may be absent: demos without actions


def read_meta(path: Path, fmt: str) -> DemoMeta:
    """The file's metadata without reading its columns."""
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            schema = pq.read_schema(str(fsutil.check_regular(path)))
        else:
            schema = open_ipc_schema(path)
    except (pa.ArrowException, OSError) as e:
        raise DemoError(f"{path}: not a readable {fmt} file, truncated or corrupt ({first_line(e)})") from None
    return _meta_from_schema(schema, fmt, path)


def _meta_from_schema(schema: pa.Schema, fmt: str, path: Path) -> DemoMeta:
    raw = (schema.metadata or {}).get(META_KEY)
    if raw is None:
        return DemoMeta(format=fmt, path=str(path))
    try:
        d = textparse.loads_json(raw)
    except ValueError:
        raise DemoError(f"{path}: schema metadata 'gailkit' is not valid JSON") from None
    return DemoMeta.from_json(d, fmt, str(path))


COLUMN_NAMES = ("obs", "acts", "next_obs", "terminated", "truncated", "dones", "episode_id", "step", "rews")


def read(path: Path, fmt: str, columns: dict[str, str] | None = None) -> Demos:
    """A demo table; `columns` maps gailkit's column names to the file's own (`obs: observation`, or
    `obs: x+y+z` to stack scalar columns into one vector)."""
    table = read_columns(path, fmt)
    meta = _meta_from_schema(table.schema, fmt, path)
    where = {name: (columns or {}).get(name, name) for name in COLUMN_NAMES}
    for name, source in where.items():
        absent = [part for part in source.split("+") if part not in table.column_names]
        if name in (columns or {}) and absent:
            raise DemoError(
                f"{path}: --columns {name}={source}: no column '{absent[0]}' (has: {', '.join(table.column_names)})"
            )
    missing = [c for c in _REQUIRED if not _present(table, where[c]) and "+" not in where[c]]
    if missing:
        raise DemoError(
            f"{path}: missing column '{missing[0]}' (has: {', '.join(table.column_names)}); "
            f"name yours with --columns {missing[0]}=COLUMN"
        )
    cols = {}
    for name, source in where.items():
        if not _present(table, source):
            continue
        cols[name] = _mapped(table, source, path)
        # a column read is dropped from the table (its decompressed buffers freed) unless a later one maps it
        later = {part for s in list(where.values())[list(where).index(name) + 1 :] for part in _sources(table, s)}
        table = table.drop_columns([c for c in _sources(table, source) if c not in later])
        pa.default_memory_pool().release_unused()  # else the pool keeps the freed pages past the next column's read
    return from_columns(cols, meta, path)


def _sources(table: Columns, source: str) -> list[str]:
    """The table's columns that `source` maps (its parts, or a Dict observation's entries)."""
    return _entries(table, source) or [p for p in source.split("+") if p in table.column_names]


def _entries(table: Columns, source: str) -> list[str]:
    """The columns `source/key` of a Dict observation (none unless `source` itself is absent)."""
    if source in table.column_names or "+" in source:
        return []
    return [c for c in table.column_names if obs_tree.is_column_of(c, source)]


def _present(table: Columns, source: str) -> bool:
    return all(part in table.column_names for part in source.split("+")) or bool(_entries(table, source))


def _mapped(table: Columns, source: str, path: Path) -> Any:
    entries = _entries(table, source)
    if entries:  # a Dict observation: one column per entry
        return {c[len(source) + 1 :]: column_to_numpy(table, c, path) for c in entries}
    parts = source.split("+")
    if len(parts) == 1:
        return column_to_numpy(table, source, path)
    arrays = [column_to_numpy(table, part, path) for part in parts]
    if any(a.ndim != 1 for a in arrays):
        raise DemoError(f"{path}: --columns ...={source}: only scalar columns can be stacked into one")
    return np.stack(arrays, axis=1)


def from_columns(cols: dict[str, Any], meta: DemoMeta, path: Path | str) -> Demos:
    """Demos from named columns (`obs`/`next_obs` may be dicts of arrays: a Dict observation); `dones`
    stands in for terminated/truncated when those are absent."""
    cols = {k: v for k, v in cols.items() if v is not None}
    n = obs_tree.length(cols["obs"])
    for field, x in cols.items():
        for name, arr in obs_tree.items(x, field):
            if len(arr) != n:
                raise DemoError(f"{path}: column '{name}' has {len(arr)} rows, 'obs' has {n} (ragged columns)")
    if "terminated" in cols:
        terminated = np.asarray(cols["terminated"], dtype=bool)
        truncated = np.asarray(cols.get("truncated", np.zeros(n, bool)), dtype=bool)
    elif "dones" in cols:
        terminated, truncated = np.asarray(cols["dones"], dtype=bool), np.zeros(n, bool)
        meta.ends_from_dones = True
    else:
        raise DemoError(f"{path}: needs column 'terminated' (and 'truncated') or 'dones' to tell episodes apart")
    if "episode_id" in cols and "step" in cols:
        episode_id, step = np.asarray(cols["episode_id"], np.int64), np.asarray(cols["step"], np.int64)
    else:
        episode_id, step = episode_columns(terminated | truncated)
    rews = cols.get("rews")
    return Demos(
        obs=cols["obs"],
        acts=cols.get("acts"),
        next_obs=cols["next_obs"],
        terminated=terminated,
        truncated=truncated,
        episode_id=episode_id,
        step=step,
        rews=None if rews is None else np.asarray(rews, np.float32),
        meta=meta,
    )


def to_table(demos: Demos) -> pa.Table:
    arrays = {
        "episode_id": pa.array(np.asarray(demos.episode_id, np.int64)),
        "step": pa.array(np.asarray(demos.step, np.int64)),
        **{k: arrow_tensors.to_arrow(v) for k, v in obs_tree.items(demos.obs, "obs")},
        **{k: arrow_tensors.to_arrow(v) for k, v in obs_tree.items(demos.next_obs, "next_obs")},
        "terminated": pa.array(np.asarray(demos.terminated, bool)),
        "truncated": pa.array(np.asarray(demos.truncated, bool)),
    }
    if demos.acts is not None:
        arrays["acts"] = arrow_tensors.to_arrow(demos.acts)
    if demos.rews is not None:
        arrays["rews"] = pa.array(np.asarray(demos.rews, np.float32))
    meta = {META_KEY: json.dumps(demos.meta.to_json()).encode()}
    return pa.table(arrays).replace_schema_metadata(meta)


def write(demos: Demos, path: Path, fmt: str) -> None:
    table = to_table(demos)
    with fsutil.atomic_path(path) as tmp:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            pq.write_table(table, str(tmp))
        else:
            # frames (rows of 1 KiB and more) are written zstd-compressed in batches of 1,024 rows (a Pong file:
            # 210:1); vectors uncompressed, so they are memory-mapped when read
            frames = obs_tree.nbytes(obs_tree.take(demos.obs, slice(0, 1))) >= arrow_tensors.FRAME_ROW_BYTES
            options = pa.ipc.IpcWriteOptions(compression="zstd" if frames else None)
            with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, table.schema, options=options) as writer:
                writer.write_table(table, max_chunksize=1024 if frames else None)


# ---------------------------------------------------------------------------------------------
# imitation's `imitation.data.serialize.save` folders: HuggingFace `datasets` Arrow stream files,
# one row per trajectory (`obs` L+1 entries, `acts` L, `infos`, `terminal`, optional `rews`).
# Read with pyarrow directly: `infos` are jsonpickle strings, and decoding them could run code.
