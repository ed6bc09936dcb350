"""Pickle demo files, loaded through the restricted unpickler (`demos.unpickler`); `unsafe=True`
(the CLI's `--unsafe-pickle`) uses the plain unpickler, for files the user trusts.

Layouts read: a list of imitation trajectories; one imitation Transitions; a dict of arrays
(`obs`, `acts`, `next_obs`, `dones` or `terminated`/`truncated`, optional `rews`, `episode_id`,
`step`, `metadata`); a list of per-step dicts with those keys.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

import numpy as np

from gailkit.core import expansion, fsutil, limits
from gailkit.core import obs as obs_tree
from gailkit.core.errors import DemoError
from gailkit.data.demos.arrow_io import from_columns
from gailkit.data.demos.core import DemoMeta, Demos
from gailkit.data.demos.unpickler import RECORDS, RefusedGlobal, RestrictedUnpickler, peek_env_id

__all__ = ["RECORDS", "RefusedGlobal", "RestrictedUnpickler", "peek_env_id", "read", "write"]


def _unpickle(path: Path, unsafe: bool) -> Any:
    try:
        data = fsutil.read_regular(path, limits.memory_budget())
    except OSError as e:
        raise DemoError(f"{path}: cannot read ({e.strerror})") from None
    if not data:
        raise DemoError(f"{path}: empty file")
    try:
        obj = pickle.loads(data) if unsafe else RestrictedUnpickler(io.BytesIO(data)).load()
        expansion.check(obj, limits.memory_budget())
        return obj
    except expansion.Expands as e:
        raise DemoError(f"{path}: refused: {e}") from None
    except RefusedGlobal as e:
        raise DemoError(
            f"{path}: refused to unpickle '{e.name}' (a pickle can run code; only numpy arrays, "
            "imitation's data types and plain containers load by default); pass --unsafe-pickle "
            "only if you trust this file"
        ) from None
    except Exception as e:  # noqa: BLE001 - only admitted numpy/container code ran; any failure is a bad file
        raise DemoError(f"{path}: truncated or corrupt pickle ({type(e).__name__}: {str(e)[:200]})") from None


def read(path: Path, unsafe: bool = False) -> Demos:
    obj = _unpickle(path, unsafe)
    if isinstance(obj, dict):
        return _from_dict(obj, path)
    if _is_transitions(obj):
        return _from_transitions(obj, path)
    if isinstance(obj, (list, tuple)):
        if not obj:
            raise DemoError(f"{path}: holds an empty list (no transitions)")
        if all(_is_trajectory(t) for t in obj):
            return _from_trajectories(list(obj), path)
        if all(isinstance(t, dict) for t in obj):
            return _from_step_dicts(list(obj), path)
        kinds = sorted({type(t).__name__ for t in obj})
        raise DemoError(f"{path}: a list of {', '.join(kinds)}; expected imitation trajectories or per-step dicts")
    raise DemoError(f"{path}: holds a {type(obj).__name__}; expected trajectories, Transitions or a dict of arrays")


def _is_trajectory(obj: Any) -> bool:
    """imitation's Trajectory (as gailkit's record, or imitation's own class with --unsafe-pickle)."""
    return not isinstance(obj, dict) and all(hasattr(obj, k) for k in ("obs", "acts", "terminal"))


def _is_transitions(obj: Any) -> bool:
    return not isinstance(obj, dict) and all(hasattr(obj, k) for k in ("obs", "acts", "next_obs", "dones"))


def _array(value: Any, name: str, path: Path, where: str = "") -> Any:
    """An array; for observations of a Dict space, a dict of arrays (a plain dict, or imitation's
    `DictObs`), one level deep."""
    entries = getattr(value, "_d", None) if type(value).__name__ == "DictObs" else None  # imitation's, or its record
    if isinstance(value, dict) or entries is not None:
        entries = value if entries is None else entries
        if name not in ("obs", "next_obs") or not isinstance(entries, dict) or not entries:
            raise DemoError(f"{path}: {where}'{name}' is a mapping; only observations may be (a Dict space)")
        out = {}
        for key, sub in entries.items():
            if not obs_tree.is_entry_name(key) or isinstance(sub, dict):
                raise DemoError(f"{path}: {where}'{name}' entry {str(key)[:40]!r}: a name without '/', of an array")
            out[key] = _array(sub, f"{name}/{key}", path, where)
        return out
    try:
        return np.asarray(value)
    except ValueError:
        raise DemoError(f"{path}: {where}'{name}' is ragged (entries of different shapes)") from None


def _from_dict(d: dict, path: Path) -> Demos:
    for key in ("obs", "next_obs"):  # `acts` may be absent: demos without actions
        if key not in d:
            raise DemoError(f"{path}: dict has no key '{key}' (has: {', '.join(map(str, d))})")
    cols = {
        k: _array(v, k, path)
        for k, v in d.items()
        if v is not None
        and k in ("obs", "acts", "next_obs", "dones", "terminated", "truncated", "rews", "episode_id", "step")
    }
    meta_d = d.get("metadata")
    meta = (
        DemoMeta.from_json(meta_d, "pickle/dict", str(path))
        if isinstance(meta_d, dict)
        else DemoMeta(format="pickle/dict", path=str(path))
    )
    return from_columns(cols, meta, path)


def _truncated_from_infos(infos: Any, dones: np.ndarray) -> np.ndarray:
    """SB3 and imitation mark time-limit ends in infos as `TimeLimit.truncated`."""
    truncated = np.zeros(len(dones), bool)
    if infos is not None:
        for i, info in enumerate(infos):
            if dones[i] and isinstance(info, dict) and info.get("TimeLimit.truncated", False):
                truncated[i] = True
    return truncated


def _from_transitions(t: Any, path: Path) -> Demos:
    dones = _array(t.dones, "dones", path).astype(bool)
    truncated = _truncated_from_infos(getattr(t, "infos", None), dones)
    cols = {
        "obs": _array(t.obs, "obs", path),
        "acts": None if t.acts is None else _array(t.acts, "acts", path),
        "next_obs": _array(t.next_obs, "next_obs", path),
        "terminated": dones & ~truncated,
        "truncated": truncated,
    }
    if getattr(t, "rews", None) is not None:
        cols["rews"] = _array(t.rews, "rews", path)
    infos = getattr(t, "infos", None)
    marked = infos is not None and any(isinstance(i, dict) and "TimeLimit.truncated" in i for i in infos)
    meta = DemoMeta(format="pickle/transitions", path=str(path), ends_from_dones=not marked)
    return from_columns(cols, meta, path)


def _from_trajectories(trajs: list, path: Path) -> Demos:
    obs, next_obs, acts, rews, term, trunc, ep, step = [], [], [], [], [], [], [], []
    with_rews = all(getattr(t, "rews", None) is not None for t in trajs)
    for i, t in enumerate(trajs):
        o = _array(t.obs, "obs", path, f"trajectory {i}: ")
        a = None if t.acts is None else _array(t.acts, "acts", path, f"trajectory {i}: ")
        n_obs = obs_tree.length(o)
        n = n_obs - 1 if a is None else len(a)
        if n_obs != n + 1:
            raise DemoError(f"{path}: trajectory {i} has {n_obs} obs for {n} acts (needs acts + 1)")
        obs.append(obs_tree.take(o, slice(None, -1)))
        next_obs.append(obs_tree.take(o, slice(1, None)))
        acts.append(a)
        last = np.zeros(n, bool)
        if n:
            last[-1] = True
        term.append(last & bool(t.terminal))
        trunc.append(last & (not t.terminal))
        ep.append(np.full(n, i, np.int64))
        step.append(np.arange(n, dtype=np.int64))
        if with_rews:
            r = _array(t.rews, "rews", path, f"trajectory {i}: ")
            if len(r) != n:
                raise DemoError(f"{path}: trajectory {i} has {len(r)} rews for {n} acts")
            rews.append(r)
    cols = {
        "obs": obs_tree.concat(obs),
        "next_obs": obs_tree.concat(next_obs),
        "terminated": np.concatenate(term),
        "truncated": np.concatenate(trunc),
        "episode_id": np.concatenate(ep),
        "step": np.concatenate(step),
    }
    if all(a is not None for a in acts):
        cols["acts"] = np.concatenate([a for a in acts if a is not None])
    if with_rews:
        cols["rews"] = np.concatenate(rews)
    return from_columns(cols, DemoMeta(format="pickle/trajectories", path=str(path)), path)


def _from_step_dicts(steps: list[dict], path: Path) -> Demos:
    keys = set(steps[0])
    for i, s in enumerate(steps):
        if set(s) != keys:
            raise DemoError(f"{path}: step dict {i} has keys {sorted(s)}, step 0 has {sorted(keys)}")
    stacked = {}
    for k in keys:
        try:
            stacked[k] = (
                obs_tree.stack([s[k] for s in steps])
                if isinstance(steps[0][k], dict)
                else np.stack([np.asarray(s[k]) for s in steps])
            )
        except (ValueError, KeyError, TypeError):
            raise DemoError(f"{path}: key '{k}' has entries of different shapes across steps") from None
    return _from_dict(stacked, path)


def write(demos: Demos, path: Path, layout: str = "dict") -> None:
    """`layout="dict"`: a dict of arrays with gailkit metadata (lossless). `"trajectories"`: a
    list of imitation `TrajectoryWithRew` / `Trajectory` for imitation's own tools."""
    if layout == "dict":
        obj: Any = {**demos.fields(), "metadata": demos.meta.to_json()}  # a Dict observation stays a dict of arrays
    elif layout == "trajectories":
        from gailkit.data.demos.imitation_adapter import to_trajectories

        obj = to_trajectories(demos)
    else:
        raise DemoError(f"--pickle-layout {layout!r}: expected 'dict' or 'trajectories'")
    with fsutil.atomic_path(path) as tmp, open(tmp, "wb") as f:
        pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL)
