"""Settings files are data: the settings that open a door come only from flags typed in this invocation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gailkit.config.loading import migrate, read_yaml
from gailkit.core import textparse

# Settings that open a door: which files are unpickled with the plain unpickler, who may connect to the
# learner, which Ray cluster gets the run, where metrics are sent (W&B). They come only from flags typed in this invocation (the
# flag that sets each is named); every settings file (a run's config.yaml, a tune folder's files,
# `--config`, experts/*.gail.yaml) is read with them left out, and one warning line says so. A file
# naming code (`env.id: module:Class`) is refused unless the same `--env` is typed (`envs.make_factory`).
DOORS = {
    "unsafe_pickle": "--unsafe-pickle",
    "fleet.listen": "--listen",
    "fleet.key_file": "--key-file",
    "fleet.ray_address": "--ray-address",
    "wandb": "--wandb",
}


def without_doors(data: dict[str, Any], source: str) -> dict[str, Any]:
    """`data`, a settings file's mapping, with every setting of `DOORS` left out (one warning names them)."""
    if not isinstance(data, dict):
        from gailkit.core.errors import ConfigError

        raise ConfigError(f"{source}: expected a mapping of settings, got {type(data).__name__}")
    out = migrate(data, source)
    ignored = []
    for dotted, flag in DOORS.items():
        *parents, key = dotted.split(".")
        section = out
        for name in parents:
            nested = section.get(name)
            section = nested if isinstance(nested, dict) else {}
        if key in section:
            value = section.pop(key)
            if value not in ("", False, None):
                ignored.append(f"{dotted}={textparse.shown(value)} (pass {flag} to set it)")
    if ignored:
        import warnings

        warnings.warn(f"{source}: ignored {', '.join(ignored)}: a settings file never opens a door", stacklevel=2)
    return out


def read_settings(path: str | Path) -> dict[str, Any]:
    """A settings file as a layer for `build`: YAML, migrated from older layouts, with `DOORS` left out."""
    return without_doors(read_yaml(path), str(path))
