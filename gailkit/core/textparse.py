"""JSON and YAML from files, checkpoints and sockets, parsed with their nesting bounded.

Python's JSON decoder and PyYAML's composer recurse once per level of nesting, so a few hundred kilobytes
of `[[[[...` raise RecursionError, which no reader's `except ValueError` (or `yaml.YAMLError`) expects: a
traceback instead of one line. These wrappers turn it into the error each reader already handles."""

from __future__ import annotations

import json
import reprlib
from typing import Any


def loads_json(text: str | bytes | bytearray) -> Any:
    """`json.loads`; ValueError for nesting deeper than the interpreter can decode."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


# A YAML document's values counted as its readers walk them: aliases are walked again wherever they stand.
YAML_MAX_VALUES = 1_000_000


def load_yaml(text: str, loader: Any = None) -> Any:
    """`yaml.load` with `loader` (default the safe loader); yaml.YAMLError for nesting too deep to compose,
    or for a document whose aliases expand it past `YAML_MAX_VALUES` values.

    An alias is composed once and shared, so a few lines of anchors nested ten deep (the "billion laughs")
    load at once, yet every reader that walks the result (a check, an error message, a copy into a run's
    folder) walks each alias again: 10^10 values. The walk here stops at the bound."""
    import yaml

    try:
        data = yaml.load(text, Loader=loader or yaml.SafeLoader)  # noqa: S506 (a safe loader or a subclass of it)
    except RecursionError:
        raise yaml.YAMLError("YAML nested too deeply") from None
    if _expands_past(data, YAML_MAX_VALUES):
        raise yaml.YAMLError(f"YAML whose aliases expand it past {YAML_MAX_VALUES:,} values")
    return data


def _expands_past(data: Any, limit: int) -> bool:
    stack, seen = [data], 0
    while stack:
        item = stack.pop()
        seen += 1
        if seen > limit:
            return True
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set)):
            stack.extend(item)
    return False


_SHOWN = reprlib.Repr()
_SHOWN.maxstring = _SHOWN.maxother = 80
_SHOWN.maxlist = _SHOWN.maxtuple = _SHOWN.maxdict = _SHOWN.maxset = 6
_SHOWN.maxlevel = 3


def shown(value: Any) -> str:
    """`repr` of a value read from a file, cut short for a one-line error (a setting can be a long list)."""
    return _SHOWN.repr(value)
