"""Observation batches as numpy: one array for Box and discrete spaces, a dict of arrays (the space's
key order) for a `Dict` space. Every data path (demos, fragments, the wire, the replay) goes through
these helpers, so none of them branches on the space.

Arrow tables and wire messages hold a Dict observation as one column per entry, named
`<field>/<key>` (`obs/position`, `next_obs/image`): `columns` and `from_columns` convert.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from gailkit.core.framestacks import FrameStacks

MAX_ENTRIES = 64
"""Entries of a Dict observation, at most (a bound on what a file's or a model's metadata may declare)."""

Obs = Any
"""`np.ndarray | dict[str, np.ndarray]`; Any, since most code holds one kind and indexes it as such."""
SEP = "/"


def is_entry_name(key: Any) -> bool:
    """Whether `key` can name a Dict entry everywhere it travels (columns and ONNX inputs `obs/<key>`):
    a non-empty string without the separator."""
    return isinstance(key, str) and bool(key) and SEP not in key


def is_dict(x: Any) -> bool:
    return isinstance(x, Mapping)


def tmap(fn: Callable[[Any], Any], x: Any) -> Any:
    """`fn` applied to the array (or tensor), or to every entry of a dict (keys kept in order)."""
    if is_dict(x):
        return {k: fn(v) for k, v in x.items()}
    return fn(x)


def take(x: Any, idx: Any) -> Any:
    """Rows (leading axis) `idx` of every array."""
    return tmap(lambda v: v[idx], x)


def concat(parts: Sequence[Any], axis: int = 0) -> Any:
    if is_dict(parts[0]):
        return {k: np.concatenate([p[k] for p in parts], axis=axis) for k in parts[0]}
    if axis == 0 and any(isinstance(p, FrameStacks) for p in parts):  # joined, not built
        held = [p if isinstance(p, FrameStacks) else FrameStacks.of_built(np.asarray(p), np.arange) for p in parts]
        return FrameStacks.join(held, np.concatenate)
    return np.concatenate(list(parts), axis=axis)


def convert(fn: Callable[[Any], Any], x: Any) -> Any:
    """`fn` applied to every array (a backend or device move); frame stacks (`FrameStacks`) get it on
    their frames and index, and stay unbuilt."""
    return tmap(lambda v: v.map(fn) if isinstance(v, FrameStacks) else fn(v), x)


def stack(parts: Sequence[Any]) -> Any:
    """One observation per element -> a batch (a new leading axis)."""
    if is_dict(parts[0]):
        return {k: np.stack([np.asarray(p[k]) for p in parts]) for k in parts[0]}
    return np.stack([np.asarray(p) for p in parts])


def reshape_lead(x: Any, lead: tuple[int, ...], n_lead: int = 1) -> Any:
    """Replace the first `n_lead` axes of every array with `lead` (e.g. (T*E,) <-> (T, E))."""
    return tmap(lambda v: v.reshape(*lead, *v.shape[n_lead:]), x)


def merge_steps(x: Any) -> Any:
    """(T, E, ...) -> (T * E, ...) for every array: a fragment's steps of all its envs, one row each."""
    return tmap(lambda v: np.asarray(v).reshape(v.shape[0] * v.shape[1], *v.shape[2:]), x)


def first(x: Any) -> np.ndarray:
    """The first array (a dict's first entry): for leading-axis lengths."""
    return next(iter(x.values())) if is_dict(x) else x


def length(x: Any) -> int:
    return len(first(x))


def nbytes(x: Any) -> int:
    return int(sum(v.nbytes for v in x.values())) if is_dict(x) else int(x.nbytes)


def asarray(x: Any) -> Any:
    """Every entry as a numpy array; frame stacks stay unbuilt."""
    return convert(np.asarray, x)


def writable(a: Any) -> np.ndarray:
    """`a` as a numpy array torch may wrap without copying: itself where writable, else a copy (a demo file's
    read-only map, or a fragment's views of its wire message, which torch would wrap with a warning)."""
    a = np.asarray(a)
    return a if a.flags.writeable else a.copy()


def shapes(x: Any, skip: int = 0) -> Any:
    """Shape of each array without its first `skip` axes (a dict of them for a dict)."""
    return tmap(lambda v: tuple(v.shape[skip:]), x)


def items(x: Any, name: str) -> list[tuple[str, np.ndarray]]:
    """`(label, array)` pairs for messages and checks: `name` for one array, `name/key` per entry."""
    if is_dict(x):
        return [(f"{name}{SEP}{k}", v) for k, v in x.items()]
    return [(name, x)]


def from_columns(name: str, cols: Mapping[str, Any], keys: Sequence[str] | None = None) -> Any:
    """Field `name` back from columns: the column `name` if there is one, else the dict of every
    `name/key` column (in `keys`' order when given, else the columns' order); None when absent."""
    if name in cols:
        return cols[name]
    prefix = name + SEP
    found = {c[len(prefix) :]: v for c, v in cols.items() if c.startswith(prefix)}
    if not found:
        return None
    if keys is not None:
        if set(keys) != set(found):
            raise KeyError(f"'{name}' has entries {sorted(found)}, expected {sorted(keys)}")
        return {k: found[k] for k in keys}
    return found


def is_column_of(column: str, name: str) -> bool:
    return column == name or column.startswith(name + SEP)
