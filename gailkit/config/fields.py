"""How a settings field carries its bounds: `_f(default, RULE)` puts `(test, says)` in the field's
metadata, and `_Checked.__post_init__` raises `FieldError` naming the field when a value fails it
(or is a non-finite float)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from gailkit.core import textparse
from gailkit.core.errors import ConfigError


class FieldError(ConfigError):
    """One field is out of its bounds; `field` is its name within its dataclass."""

    def __init__(self, field: str, says: str, value: Any):
        super().__init__(f"'{field}' {says}, got {textparse.shown(value)}")
        self.field, self.says, self.value = field, says, value


def _rule(test, says: str) -> dict[str, Any]:
    return {"check": (test, says)}


GT0 = _rule(lambda v: v > 0, "must be > 0")
GE0 = _rule(lambda v: v >= 0, "must be >= 0")
GE1 = _rule(lambda v: v >= 1, "must be >= 1")
GE2 = _rule(lambda v: v >= 2, "must be >= 2 (advantages are normalized over a minibatch)")
SEED = _rule(lambda v: 0 <= v < 2**32, "must be in [0, 2**32)")
UNIT = _rule(lambda v: 0 <= v <= 1, "must lie in [0, 1]")
LAYERS = _rule(lambda v: all(n >= 1 for n in v), "must be a list of layer sizes >= 1")


def _check_fields(obj: Any) -> None:
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if isinstance(value, float) and not math.isfinite(value):
            raise FieldError(f.name, "must be a finite number", value)
        test, says = f.metadata.get("check", (None, ""))
        if test is not None and value is not None and not test(value):
            raise FieldError(f.name, says, value)


class _Checked:
    def __post_init__(self) -> None:
        _check_fields(self)


def _f(default: Any, meta: dict[str, Any] | None = None) -> Any:
    if isinstance(default, (list, dict)):
        copy: Any = lambda d=default: type(d)(d)  # a fresh list or dict per instance
        return dataclasses.field(default_factory=copy, metadata=meta or {})
    return dataclasses.field(default=default, metadata=meta or {})


DEMO_COLUMNS = ("obs", "acts", "next_obs", "terminated", "truncated", "dones", "episode_id", "step", "rews")


def _columns_ok(mapping: Any) -> bool:
    return isinstance(mapping, dict) and all(
        k in DEMO_COLUMNS and isinstance(v, str) and v and all(part.strip() for part in v.split("+"))
        for k, v in mapping.items()
    )


COLUMNS = _rule(_columns_ok, f"must map some of {', '.join(DEMO_COLUMNS)} to the file's column names")
