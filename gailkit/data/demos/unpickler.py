"""The restricted unpickler: an exact list of `(module, name)` globals, and nothing else resolves.

Admitted, nothing else: numpy's array and scalar reconstruction functions, `numpy.ndarray`,
`numpy.dtype` and the dtype classes of `numpy.dtypes`; plain containers (`builtins.dict`, `list`,
`tuple`, `set`, `frozenset`, `bytearray`, `complex`, `slice`, `object`, `collections.OrderedDict`),
`copyreg._reconstructor` and `_codecs.encode` (how protocols 0-2 write objects and bytes, also
under Python 2's module names `__builtin__` and `copy_reg`); and
imitation's `Trajectory`, `TrajectoryWithRew`, `Transitions`, `TransitionsWithRew`,
`TransitionsMinimal` and `DictObs`, which resolve to gailkit's own plain records, so imitation need not be
installed and none of its code runs. Dotted or other names (`os.system`, `builtins.eval`,
`numpy.dtypes.__builtins__.get`, a user class) are refused in `find_class`, before anything they
name is touched. `peek_env_id` reads a gailkit pickle's env id from its opcodes without unpickling.
"""

from __future__ import annotations

import builtins
import collections
import copyreg
import functools
import pickle
import pickletools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from gailkit.core.errors import DemoError


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
    "DictObs": _record("DictObs", "_d"),  # a Dict observation's arrays, under `_d`
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


def _same(value: Any) -> Any:
    return value


# What a container's constructor may be called with from a pickle: data the file holds. A number would be a
# size (`bytearray(10**10)` is a dozen bytes of pickle and 10 GB of memory), so it is refused.
_CONTENTS = (bytes, bytearray, str, list, tuple, set, frozenset, dict)
_SIZED = (bytearray, list, tuple, set, frozenset, dict, collections.OrderedDict)


def _checked(cls: Any) -> Any:
    """`cls` as a pickle may call it: a container only from contents, never from a number."""
    if cls not in _SIZED:
        return cls

    def make(*args: Any, **kwargs: Any) -> Any:
        if kwargs or len(args) > 1 or (args and not isinstance(args[0], _CONTENTS)):
            raise pickle.UnpicklingError(f"{cls.__name__}() of anything but contents the file holds")
        return cls(*args)

    return make


def _reconstructor(cls: Any, base: Any, state: Any) -> Any:
    """`copyreg._reconstructor` (protocols 0-1), its base's constructor checked as a pickle's call of it is."""
    if base is not object and state is not None:
        _checked(base)(state)
    return vars(copyreg)["_reconstructor"](cls, base, state)


def _allowed() -> dict[tuple[str, str], Callable[[], Any]]:
    table: dict[tuple[str, str], Callable[[], Any]] = {}
    for core in ("numpy.core", "numpy._core"):
        for name in ("_reconstruct", "scalar"):
            table[(f"{core}.multiarray", name)] = _numpy(
                f"numpy._core.multiarray:{name}", f"numpy.core.multiarray:{name}"
            )
        table[(f"{core}.numeric", "_frombuffer")] = _numpy(
            "numpy._core.numeric:_frombuffer", "numpy.core.numeric:_frombuffer"
        )
    table[("numpy", "ndarray")] = lambda: np.ndarray
    table[("numpy", "dtype")] = lambda: np.dtype
    for name in _DTYPE_CLASSES:
        table[("numpy.dtypes", name)] = _numpy(f"numpy.dtypes:{name}")
    for name in ("dict", "list", "tuple", "set", "frozenset", "bytearray", "complex", "slice", "object"):
        for module in ("builtins", "__builtin__"):  # protocols 0-2 write Python 2's names
            table[(module, name)] = functools.partial(_checked, getattr(builtins, name))
    table[("collections", "OrderedDict")] = functools.partial(_checked, collections.OrderedDict)
    table[("copyreg", "_reconstructor")] = table[("copy_reg", "_reconstructor")] = lambda: _reconstructor
    table[("_codecs", "encode")] = lambda: __import__("_codecs").encode
    for name, cls in RECORDS.items():
        table[("imitation.data.types", name)] = functools.partial(_same, cls)
    return table


ALLOWED = _allowed()


class RefusedGlobal(Exception):
    """A pickle named a global outside the allow-list; `name` is `module.name`."""

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


class RestrictedUnpickler(pickle.Unpickler):
    """Resolves only the exact `(module, name)` pairs of `ALLOWED`; anything else raises before it is touched."""

    def find_class(self, module: str, name: str) -> Any:
        resolve = ALLOWED.get((module, name))
        if resolve is None:
            raise RefusedGlobal(f"{module}.{name}")
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
                value = memo.get(int(arg or 0), object())
            elif op.name == "MEMOIZE":
                memo[len(memo)] = last
                continue
            elif op.name in ("BINPUT", "LONG_BINPUT", "PUT"):
                memo[int(arg or 0)] = last
                continue
            if previous == "env_id" and isinstance(value, str):
                return value
            previous, last = value, value
    except (ValueError, pickle.UnpicklingError, EOFError):
        return None
    return None
