"""How much what a file holds takes once a reader walks it, found before it is walked.

A pickle (and torch's weights-only loader, which is one) refers back to what it has already built in a few
bytes, so a file of a few hundred bytes can hold a list of ten references to a list of ten references ... to
ten numbers: 10^10 numbers to `numpy.asarray`, to a check of each value, to `repr` in an error message.
`check` sizes each object once (by its id), in time linear in what the file holds, and refuses what would
pass a limit, or what holds itself (a cycle, which such walks never finish)."""

from __future__ import annotations

from typing import Any

import numpy as np


class Expands(Exception):
    """What a file holds, its shared references walked as a reader walks them, passes `limit` bytes, or
    holds itself (`str(e)` says which)."""


def check(obj: Any, limit: int) -> None:
    """Raise `Expands` when `obj`, walked as a reader walks it (each reference to a shared list, dict or
    array again), is over `limit` bytes (8 a number), or holds itself. A pickle refers back to what it has
    built in a few bytes, so ten lists of ten references to the one before are 10^10 numbers from 358 bytes
    of file: `numpy.asarray` would build them all. Each object is sized once (by its id), so this takes
    time in the file's own size whatever it expands to."""
    sizes: dict[int, int] = {}  # by id, once walked
    pending: dict[int, tuple[int, list[Any]]] = {}  # by id, while its contents are walked: (leaf bytes, containers)
    stack: list[tuple[Any, bool]] = [(obj, False)]
    while stack:
        item, done = stack.pop()
        key = id(item)
        if done:
            own, inner = pending.pop(key)
            sizes[key] = own + sum(sizes[id(c)] for c in inner)
            if sizes[key] > limit:
                raise Expands(f"its shared references expand it past {limit / 2**30:.1f} GiB")
            continue
        children = _children(item)
        if children is None:
            if _leaf_bytes(item) > limit:
                raise Expands(f"it holds more than {limit / 2**30:.1f} GiB")
            continue
        if key in pending:
            raise Expands("it holds itself (a reference cycle)")
        if key in sizes:
            continue
        own, inner = 0, []
        for c in children:
            if type(c) in _NUMBERS:
                own += 8
            elif type(c) in (list, tuple) and id(c) not in sizes and all(map(_NUMBERS.__contains__, map(type, c))):
                sizes[id(c)] = 8 * len(c)  # a row of numbers, the common case, sized at C speed
                inner.append(c)
            elif _children(c) is None:
                own += _leaf_bytes(c)
            else:
                inner.append(c)
        pending[key] = (own, inner)
        stack.append((item, True))
        stack.extend((c, False) for c in inner if id(c) not in sizes)


_NUMBERS = frozenset({int, float, bool, complex, type(None)})


def _children(item: Any) -> Any:
    """What `item` holds, if it is a container (a dict: its keys and values); None for anything else."""
    if type(item) in _NUMBERS:
        return None
    if isinstance(item, dict):
        return [*item.keys(), *item.values()]
    if isinstance(item, (list, tuple, set, frozenset)):
        return item
    if isinstance(item, np.ndarray) and item.dtype == object:
        return item.ravel().tolist()
    fields = getattr(type(item), "FIELDS", None)  # a record of fields (the unpickler's stand-ins)
    if isinstance(fields, tuple):
        return [getattr(item, f, None) for f in fields]
    return None


def _leaf_bytes(item: Any) -> int:
    if isinstance(item, np.ndarray):
        return int(item.nbytes)
    if isinstance(item, (bytes, bytearray, str)):
        return len(item)
    return 8
