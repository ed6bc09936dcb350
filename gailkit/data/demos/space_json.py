"""Gymnasium spaces as JSON (demo files' and checkpoints' metadata), read back strictly: a known type, a
bounded size, a Dict of one level; non-finite bounds are written as the strings "inf"/"-inf"."""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np

from gailkit.core import obs as obs_tree
from gailkit.core import textparse


def _bound(a: np.ndarray) -> Any:
    flat = np.asarray(a, dtype=np.float64).ravel()
    values = [v if math.isfinite(v) else ("inf" if v > 0 else "-inf") for v in flat.tolist()]
    return values[0] if len(set(map(str, values))) == 1 else values


def _unbound(v: Any, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Bounds as written: one number (or "inf"), a flat list, or a list nested to the space's shape
    (Minari writes image bounds that way)."""
    arr = np.asarray(v, dtype=np.float64).reshape(-1)
    if arr.size == 1:
        arr = np.full(shape, arr[0])
    return arr.reshape(shape).astype(dtype)


def space_to_json(space: gym.Space) -> dict[str, Any]:
    if isinstance(space, gym.spaces.Box):
        return {
            "type": "Box",
            "shape": list(space.shape),
            "dtype": str(space.dtype),
            "low": _bound(space.low),
            "high": _bound(space.high),
        }
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, gym.spaces.MultiDiscrete):
        out = {"type": "MultiDiscrete", "nvec": np.asarray(space.nvec).tolist()}
        start = np.asarray(getattr(space, "start", 0))
        return {**out, "start": start.tolist()} if np.any(start != 0) else out
    if isinstance(space, gym.spaces.MultiBinary):
        return {"type": "MultiBinary", "n": np.asarray(space.n).tolist()}
    if isinstance(space, gym.spaces.Dict):
        return {"type": "Dict", "spaces": {str(k): space_to_json(sub) for k, sub in space.spaces.items()}}
    raise ValueError(f"unsupported space {space} (Box, Discrete, MultiDiscrete, MultiBinary, Dict are)")


MAX_SPACE_SIZE = 1 << 24  # elements of one observation or action, at most (a guard against hostile metadata)


def _dict_space(d: dict[str, Any]) -> gym.spaces.Dict:
    """A Dict space of one level (entries of the other kinds), at most `obs.MAX_ENTRIES` of them."""
    entries = d.get("spaces", d.get("subspaces"))  # Minari's metadata names them `subspaces`
    if not isinstance(entries, dict) or not 1 <= len(entries) <= obs_tree.MAX_ENTRIES:
        raise ValueError(f"a Dict space needs 1 to {obs_tree.MAX_ENTRIES} entries under 'spaces'")
    subs = {}
    for k, sub in entries.items():
        if not obs_tree.is_entry_name(k) or (isinstance(sub, dict) and sub.get("type") == "Dict"):
            raise ValueError(f"Dict entry {str(k)[:40]!r}: a non-empty name without '/', of a space that is not a Dict")
        subs[k] = space_from_json(sub)
    total = sum(int(np.prod(s.shape or (1,))) for s in subs.values())
    if total > MAX_SPACE_SIZE:
        raise ValueError(f"a Dict space of {total} elements")
    return gym.spaces.Dict(subs)


def _flat_ints(dims: list[Any], depth: int = 0) -> list[Any]:
    """A list nested at most 8 deep, flattened (a non-list item is kept for the caller to refuse)."""
    out: list[Any] = []
    for x in dims:
        if isinstance(x, list) and depth < 8:
            out.extend(_flat_ints(x, depth + 1))
        else:
            out.append(x)
        if len(out) > MAX_SPACE_SIZE:
            raise ValueError("a space of over 2**24 entries")
    return out


def space_from_json(d: dict[str, Any]) -> gym.Space:
    """Inverse of `space_to_json`; raises ValueError (or KeyError, TypeError) on anything else."""
    if not isinstance(d, dict):
        raise ValueError(f"a space must be a mapping, got {type(d).__name__}")
    kind = d.get("type")
    if kind == "Dict":
        return _dict_space(d)
    if kind == "Tuple":  # Minari's metadata: read as the Dict keyed "0", "1", ... that gailkit makes of a Tuple
        subs = d.get("subspaces", d.get("spaces"))
        if not isinstance(subs, list):
            raise ValueError("a Tuple space needs a list of 'subspaces'")
        return _dict_space({"spaces": {str(i): sub for i, sub in enumerate(subs)}})
    if kind not in ("Box", "Discrete", "MultiDiscrete", "MultiBinary"):
        raise ValueError(f"unknown space type {str(kind)[:40]!r}")
    # the field each kind is built from (a file may carry others beside it, such as a shape it does not use)
    dims = {"Box": d.get("shape"), "MultiDiscrete": d.get("nvec"), "MultiBinary": d.get("n")}.get(kind, d.get("n"))
    dims = dims if isinstance(dims, list) else [dims]
    if kind in ("MultiDiscrete", "MultiBinary"):  # nvec (MultiBinary: n) may be nested to the space's shape
        dims = _flat_ints(dims)
    if not all(type(x) is int and 0 <= x <= MAX_SPACE_SIZE for x in dims) or int(np.prod(dims)) > MAX_SPACE_SIZE:
        raise ValueError(f"a space of shape/size {textparse.shown(dims)}")
    if kind == "Box":
        shape, dtype = tuple(d["shape"]), np.dtype(d["dtype"])
        return gym.spaces.Box(_unbound(d["low"], shape, dtype), _unbound(d["high"], shape, dtype), shape, dtype)
    if kind == "Discrete":
        start = d.get("start", 0)
        if type(start) is not int or abs(start) >= 1 << 62:
            raise ValueError(f"a Discrete start of {str(start)[:40]}")
        return gym.spaces.Discrete(int(d["n"]), start=start)
    if kind == "MultiDiscrete":
        nvec = np.asarray(d["nvec"], np.int64)
        raw = d.get("start", 0)
        if not all(type(x) is int and abs(x) < 1 << 62 for x in _flat_ints(raw if isinstance(raw, list) else [raw])):
            raise ValueError(f"a MultiDiscrete start of {str(raw)[:40]}")
        start = np.asarray(raw, np.int64)
        if start.size != 1 and start.shape != nvec.shape:
            raise ValueError(f"a MultiDiscrete start of shape {start.shape} for nvec of shape {nvec.shape}")
        return gym.spaces.MultiDiscrete(nvec, start=np.broadcast_to(start, nvec.shape).copy())
    if kind == "MultiBinary":
        return gym.spaces.MultiBinary(d["n"])
    raise ValueError(f"unknown space type {textparse.shown(kind)}")


def describe_space(d: dict[str, Any] | None) -> str:
    if d is None:
        return "?"
    if d.get("type") == "Box":
        return f"Box{tuple(d['shape'])} {d['dtype']}"
    if d.get("type") == "Dict" and isinstance(d.get("spaces"), dict):
        return "Dict(" + ", ".join(f"{k}: {describe_space(v)}" for k, v in d["spaces"].items()) + ")"
    start = d.get("start", 0)
    at = f", start={start}" if start not in (0, None) and not (isinstance(start, list) and not any(start)) else ""
    return f"{d.get('type')}({d.get('nvec', d.get('n'))}{at})"


def shape_of(space: gym.Space) -> tuple[int, ...]:
    return tuple(space.shape) if space.shape is not None else ()
