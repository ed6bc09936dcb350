"""gailkit: imitation learning with GAIL, from expert demonstration files to an ONNX policy.

The public names, imported on first use (so `import gailkit` stays light, and `gailkit.OnnxPolicy`
needs no torch): `learn` (from env objects and arrays), `train`, `train_config`, `Callback`, `load_demos`, `evaluate`, `export`, `OnnxPolicy`,
`TrainConfig`.
The sub-packages, bottom to top: `core`, `config`, `model`, `data`, `rollout` | `algo`, `run`,
`tune`, `cli` (ARCHITECTURE.md).
"""

from importlib import import_module as _import_module
from importlib import metadata as _metadata
from typing import Any

try:
    __version__ = _metadata.version("gailkit")  # pyproject.toml's version, as installed: one source of truth
except _metadata.PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"

_PUBLIC = {
    "learn": "gailkit.run.api:learn",
    "train": "gailkit.run.train:train",
    "train_config": "gailkit.run.train:train_config",
    "Callback": "gailkit.run.callbacks:Callback",
    "load_demos": "gailkit.data.demos:load",
    "OnnxPolicy": "gailkit.inference:OnnxPolicy",
    "evaluate": "gailkit.run.evaluate:evaluate",
    "export": "gailkit.run.export:export",
    "TrainConfig": "gailkit.config:TrainConfig",
}
__all__ = ["__version__", *_PUBLIC]


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'gailkit' has no attribute {name!r}")
    module, _, attr = _PUBLIC[name].partition(":")
    return getattr(_import_module(module), attr)


def __dir__() -> list[str]:
    return sorted([*globals(), *_PUBLIC])
