"""gailkit: imitation learning with GAIL, from expert demonstration files to an ONNX policy."""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("gailkit")  # pyproject.toml's version, as installed: one source of truth
except _metadata.PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"
