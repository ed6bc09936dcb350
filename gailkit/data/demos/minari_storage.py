"""Minari's two storages read offline: HDF5 with h5py (every dataset bounded and checked before it is
read), Arrow with pyarrow. A Dict observation is a group (HDF5) or a struct column (Arrow) of one
array per entry, read as a dict of arrays; a Tuple's (entries `_index_0`, ... in HDF5, fields "0", ...
in Arrow) as the dict keyed "0", "1", ... that gailkit makes of a Tuple."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from gailkit.core import fsutil, limits
from gailkit.core import obs as obs_tree
from gailkit.core.errors import DemoError, GailkitError, first_line


def _read_hdf5(data: Path) -> list[dict[str, Any]]:
    try:
        import h5py
    except ImportError:
        raise DemoError(f"{data}: reading Minari's HDF5 storage needs h5py: pip install 'gailkit[minari]'") from None
    try:
        with h5py.File(fsutil.check_regular(data / "main_data.hdf5"), "r") as f:
            names = sorted((k for k in f.keys() if k.startswith("episode_")), key=lambda k: int(k.split("_")[1]))
            return [
                {
                    k: _dataset(f[name], k, data)
                    for k in ("observations", "actions", "rewards", "terminations", "truncations")
                }
                for name in names
            ]
    except GailkitError:
        raise
    except Exception as e:  # noqa: BLE001 - h5py raises many types for crafted files; all mean unreadable
        raise DemoError(
            f"{data}: main_data.hdf5 is not a readable Minari file ({type(e).__name__}: {str(e)[:200]})"
        ) from None


def _dataset(group: Any, key: str, data: Path, nested: bool = False) -> Any:
    item = group[key]
    where = f"{data / 'main_data.hdf5'}: {item.name}"
    if not hasattr(item, "shape"):  # a group: a Dict observation's entries (one level)
        if nested or key != "observations":
            raise DemoError(f"{where}: a group inside a group (only Dict observations of one level are read)")
        entries = {sub: _dataset(item, sub, data, nested=True) for sub in item.keys()}
        if entries and all(re.fullmatch(r"_index_\d+", k) for k in entries):  # Minari's Tuple: "0", "1", ...
            return {k.removeprefix("_index_"): v for k, v in entries.items()}
        return entries
    if item.external or item.is_virtual:  # storage in other files: they could be anything on this machine
        raise DemoError(
            f"{where}: stored in {'external files' if item.external else 'other files (a virtual dataset)'}; "
            "gailkit reads only data inside the dataset's own file"
        )
    if item.dtype.kind not in "biuf":
        raise DemoError(f"{where}: dtype {item.dtype} is not numeric")
    declared = int(np.prod(item.shape, dtype=np.float64)) * item.dtype.itemsize
    stored = item.id.get_storage_size()
    if declared and not stored:
        raise DemoError(f"{where}: declares {declared:,} bytes but stores none")
    limits.check_size(declared, stored, where)
    return np.asarray(item[()])


def _read_arrow(data: Path) -> list[dict[str, Any]]:
    import pyarrow as pa

    from gailkit.data.demos.arrow_read import read_table

    episodes = []
    folders = sorted((p for p in data.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name))
    for folder in folders:
        try:
            table = pa.concat_tables([read_table(p, "arrow") for p in sorted(folder.glob("part-*.arrow"))])
        except (pa.ArrowException, OSError, ValueError) as e:
            raise DemoError(f"{folder}: not a readable Minari episode ({first_line(e)})") from None
        ep: dict[str, Any] = {}
        for key in ("observations", "actions", "rewards", "terminations", "truncations"):
            if key not in table.column_names:
                raise DemoError(f"{folder}: no column '{key}'")
            col = table.column(key).combine_chunks()
            if pa.types.is_struct(col.type) and key == "observations":  # a Dict observation: one field per entry
                fields = [col.type.field(j).name for j in range(col.type.num_fields)]
                ep[key] = {f: _arrow_numpy(col.field(f), f"{key}/{f}", folder) for f in fields}
            else:
                ep[key] = _arrow_numpy(col, key, folder)
        n = obs_tree.length(ep["observations"]) - 1  # actions, rewards and flags carry a dummy last row
        episodes.append({k: (v if k == "observations" else v[:n]) for k, v in ep.items()})
    return episodes


def _arrow_numpy(col: Any, key: str, folder: Path) -> np.ndarray:
    import pyarrow as pa

    from gailkit.data.demos.arrow_read import nested_lists_to_numpy

    if pa.types.is_list(col.type) or pa.types.is_fixed_size_list(col.type):
        return nested_lists_to_numpy(col, key, folder)
    if not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type) or pa.types.is_boolean(col.type)):
        raise DemoError(f"{folder}: column '{key}' of type {col.type} is not numeric")
    return col.to_numpy(zero_copy_only=False)
