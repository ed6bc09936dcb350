"""Pickle demo files, loaded through a restricted unpickler that resolves only an exact list of globals.

Admitted `(module, name)` pairs, nothing else: numpy's array and scalar reconstruction functions,
`numpy.ndarray`, `numpy.dtype` and the dtype classes of `numpy.dtypes`; plain containers
(`builtins.dict`, `list`, `tuple`, `set`, `frozenset`, `bytearray`, `complex`, `slice`, `object`,
`collections.OrderedDict`), `copyreg._reconstructor` and `_codecs.encode` (how protocols 0-2
write objects and bytes); and imitation's `Trajectory`, `TrajectoryWithRew`, `Transitions`,
`TransitionsWithRew`, `TransitionsMinimal`, which resolve to gailkit's own plain records, so
imitation need not be installed and none of its code runs. Dotted or other names (`os.system`,
`builtins.eval`, `numpy.dtypes.__builtins__.get`, a user class) are refused in `find_class`,
before anything they name is touched. `unsafe=True` (the CLI's `--unsafe-pickle`) uses the plain
unpickler.

Layouts read: a list of imitation trajectories; one imitation Transitions; a dict of arrays
(`obs`, `acts`, `next_obs`, `dones` or `terminated`/`truncated`, optional `rews`, `episode_id`,
`step`, `metadata`); a list of per-step dicts with those keys.
"""

from __future__ import annotations

import builtins
import collections
import copyreg
import io
import pickle
import pickletools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from gailkit import fsutil
from gailkit.demos.arrow_io import from_columns
from gailkit.demos.core import Demos, DemoMeta
from gailkit.errors import DemoError


class _Record:
    """A stand-in for one of imitation's frozen dataclasses: the unpickler's BUILD step sets its fields."""

    FIELDS: tuple[str, ...] = ()

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) == 2:  # (dict state, slot state)
            state = {**(state[0] or {}), **(state[1] or {})}
        if not isinstance(state, dict):
            raise pickle.UnpicklingError(f"{type(self).__name__}: state is a {type(state).__name__}, expected a dict")
        for key in self.FIELDS:
            object.__setattr__(self, key, state.get(key))


def _record(name: str, fields: str) -> type[_Record]:
    return type(name, (_Record,), {"FIELDS": tuple(fields.split()), "__module__": __name__})


RECORDS: dict[str, type[_Record]] = {
    "Trajectory": _record("Trajectory", "obs acts infos terminal"),
    "TrajectoryWithRew": _record("TrajectoryWithRew", "obs acts infos terminal rews"),
    "TransitionsMinimal": _record("TransitionsMinimal", "obs acts infos"),
    "Transitions": _record("Transitions", "obs acts infos next_obs dones"),
    "TransitionsWithRew": _record("TransitionsWithRew", "obs acts infos next_obs dones rews"),
}

_DTYPE_CLASSES = (
    "BoolDType Int8DType ByteDType UInt8DType UByteDType Int16DType ShortDType UInt16DType UShortDType Int32DType "
    "IntDType UInt32DType UIntDType Int64DType LongDType UInt64DType ULongDType LongLongDType ULongLongDType "
    "Float16DType Float32DType Float64DType LongDoubleDType Complex64DType Complex128DType CLongDoubleDType "
    "ObjectDType BytesDType StrDType VoidDType DateTime64DType TimeDelta64DType"
).split()


def _numpy(*paths: str) -> Callable[[], Any]:
    """Resolve the first of `module:attr` paths that exists (numpy 2 moved `numpy.core` to `numpy._core`)."""
    def resolve() -> Any:
        import importlib

        for path in paths:
            module, attr = path.split(":")
            try:
                return getattr(importlib.import_module(module), attr)
            except (ImportError, AttributeError):
                continue
        raise pickle.UnpicklingError(f"this numpy has none of {paths}")

    return resolve


def _allowed() -> dict[tuple[str, str], Callable[[], Any]]:
    table: dict[tuple[str, str], Callable[[], Any]] = {}
    for core in ("numpy.core", "numpy._core"):
        for name in ("_reconstruct", "scalar"):
            table[(f"{core}.multiarray", name)] = _numpy(f"numpy._core.multiarray:{name}", f"numpy.core.multiarray:{name}")
        table[(f"{core}.numeric", "_frombuffer")] = _numpy("numpy._core.numeric:_frombuffer", "numpy.core.numeric:_frombuffer")
    table[("numpy", "ndarray")] = lambda: np.ndarray
    table[("numpy", "dtype")] = lambda: np.dtype
    for name in _DTYPE_CLASSES:
        table[("numpy.dtypes", name)] = _numpy(f"numpy.dtypes:{name}")
    for name in ("dict", "list", "tuple", "set", "frozenset", "bytearray", "complex", "slice", "object"):
        table[("builtins", name)] = lambda n=name: getattr(builtins, n)
    table[("collections", "OrderedDict")] = lambda: collections.OrderedDict
    table[("copyreg", "_reconstructor")] = lambda: copyreg._reconstructor
    table[("_codecs", "encode")] = lambda: __import__("_codecs").encode
    for name, cls in RECORDS.items():
        table[("imitation.data.types", name)] = lambda c=cls: c
    return table


ALLOWED = _allowed()


class _RefusedGlobal(Exception):
    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


class RestrictedUnpickler(pickle.Unpickler):
    """Resolves only the exact `(module, name)` pairs of `ALLOWED`; anything else raises before it is touched."""

    def find_class(self, module: str, name: str) -> Any:
        resolve = ALLOWED.get((module, name))
        if resolve is None:
            raise _RefusedGlobal(f"{module}.{name}")
        return resolve()


def peek_env_id(path: Path) -> str | None:
    """The `env_id` of a gailkit dict pickle's `metadata`, read from its opcodes without unpickling.

    Walks the opcode stream (`pickletools.genops` only parses) for the string `env_id` followed by
    a string: None when the file names no env or is not laid out that way (it is then loaded in
    full, through the restricted unpickler, only if its shapes may fit).
    """
    try:
        data = path.read_bytes()
    except OSError as e:
        raise DemoError(f"{path}: cannot read ({e.strerror})") from None
    memo: dict[int, Any] = {}
    last: Any = None
    previous: Any = None
    strings = {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "SHORT_BINSTRING", "BINSTRING", "STRING"}
    try:
        for op, arg, _ in pickletools.genops(data):
            value: Any = object()
            if op.name in strings:
                value = arg
            elif op.name in ("BINGET", "LONG_BINGET", "GET"):
                value = memo.get(int(arg), object())
            elif op.name == "MEMOIZE":
                memo[len(memo)] = last
                continue
            elif op.name in ("BINPUT", "LONG_BINPUT", "PUT"):
                memo[int(arg)] = last
                continue
            if previous == "env_id" and isinstance(value, str):
                return value
            previous, last = value, value
    except (ValueError, pickle.UnpicklingError, EOFError):
        return None
    return None


def _unpickle(path: Path, unsafe: bool) -> Any:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise DemoError(f"{path}: cannot read ({e.strerror})") from None
    if not data:
        raise DemoError(f"{path}: empty file")
    try:
        if unsafe:
            return pickle.loads(data)
        return RestrictedUnpickler(io.BytesIO(data)).load()
    except _RefusedGlobal as e:
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
            return _from_step_dicts(obj, path)
        kinds = sorted({type(t).__name__ for t in obj})
        raise DemoError(f"{path}: a list of {', '.join(kinds)}; expected imitation trajectories or per-step dicts")
    raise DemoError(f"{path}: holds a {type(obj).__name__}; expected trajectories, Transitions or a dict of arrays")


def _is_trajectory(obj: Any) -> bool:
    """imitation's Trajectory (as gailkit's record, or imitation's own class with --unsafe-pickle)."""
    return not isinstance(obj, dict) and all(hasattr(obj, k) for k in ("obs", "acts", "terminal"))


def _is_transitions(obj: Any) -> bool:
    return not isinstance(obj, dict) and all(hasattr(obj, k) for k in ("obs", "acts", "next_obs", "dones"))


def _array(value: Any, name: str, path: Path, where: str = "") -> np.ndarray:
    if isinstance(value, dict):
        raise DemoError(f"{path}: {where}'{name}' is a dict (Dict observation spaces are not supported)")
    try:
        return np.asarray(value)
    except ValueError:
        raise DemoError(f"{path}: {where}'{name}' is ragged (entries of different shapes)") from None


def _from_dict(d: dict, path: Path) -> Demos:
    for key in ("obs", "acts", "next_obs"):
        if key not in d:
            raise DemoError(f"{path}: dict has no key '{key}' (has: {', '.join(map(str, d))})")
    cols = {k: _array(v, k, path) for k, v in d.items()
            if k in ("obs", "acts", "next_obs", "dones", "terminated", "truncated", "rews", "episode_id", "step")}
    meta_d = d.get("metadata")
    meta = DemoMeta.from_json(meta_d, "pickle/dict", str(path)) if isinstance(meta_d, dict) else DemoMeta(
        format="pickle/dict", path=str(path))
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
    cols = {"obs": _array(t.obs, "obs", path), "acts": _array(t.acts, "acts", path),
            "next_obs": _array(t.next_obs, "next_obs", path), "terminated": dones & ~truncated, "truncated": truncated}
    if getattr(t, "rews", None) is not None:
        cols["rews"] = _array(t.rews, "rews", path)
    return from_columns(cols, DemoMeta(format="pickle/transitions", path=str(path)), path)


def _from_trajectories(trajs: list, path: Path) -> Demos:
    obs, next_obs, acts, rews, term, trunc, ep, step = [], [], [], [], [], [], [], []
    with_rews = all(getattr(t, "rews", None) is not None for t in trajs)
    for i, t in enumerate(trajs):
        o = _array(t.obs, "obs", path, f"trajectory {i}: ")
        a = _array(t.acts, "acts", path, f"trajectory {i}: ")
        n = len(a)
        if len(o) != n + 1:
            raise DemoError(f"{path}: trajectory {i} has {len(o)} obs for {n} acts (needs acts + 1)")
        obs.append(o[:-1])
        next_obs.append(o[1:])
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
    cols = {"obs": np.concatenate(obs), "acts": np.concatenate(acts), "next_obs": np.concatenate(next_obs),
            "terminated": np.concatenate(term), "truncated": np.concatenate(trunc),
            "episode_id": np.concatenate(ep), "step": np.concatenate(step)}
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
            stacked[k] = np.stack([np.asarray(s[k]) for s in steps])
        except ValueError:
            raise DemoError(f"{path}: key '{k}' has entries of different shapes across steps") from None
    return _from_dict(stacked, path)


def write(demos: Demos, path: Path, layout: str = "dict") -> None:
    """`layout="dict"`: a dict of arrays with gailkit metadata (lossless). `"trajectories"`: a
    list of imitation `TrajectoryWithRew` / `Trajectory` for imitation's own tools."""
    if layout == "dict":
        obj: Any = {**demos.columns(), "metadata": demos.meta.to_json()}
    elif layout == "trajectories":
        from gailkit.demos.imitation_adapter import to_trajectories

        obj = to_trajectories(demos)
    else:
        raise DemoError(f"--pickle-layout {layout!r}: expected 'dict' or 'trajectories'")
    with fsutil.atomic_path(path) as tmp, open(tmp, "wb") as f:
        pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL)
