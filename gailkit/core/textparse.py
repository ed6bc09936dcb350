"""JSON and YAML from files, checkpoints and sockets, parsed with their nesting bounded.

Python's JSON decoder and PyYAML's composer recurse once per level of nesting, so a few hundred kilobytes
of `[[[[...` raise RecursionError, which no reader's `except ValueError` (or `yaml.YAMLError`) expects: a
traceback instead of one line. These wrappers turn it into the error each reader already handles."""

from __future__ import annotations

import json
from typing import Any


def loads_json(text: str | bytes | bytearray) -> Any:
    """`json.loads`; ValueError for nesting deeper than the interpreter can decode."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def load_yaml(text: str, loader: Any = None) -> Any:
    """`yaml.load` with `loader` (default the safe loader); yaml.YAMLError for nesting too deep to compose."""
    import yaml

    try:
        return yaml.load(text, Loader=loader or yaml.SafeLoader)  # noqa: S506 (a safe loader or a subclass of it)
    except RecursionError:
        raise yaml.YAMLError("YAML nested too deeply") from None
