"""Which env a name means: `file.py:Class` names are compared by the file they point to, not by the string.

A run, a demo file or an ONNX file records the env name it was made with; the user may later type the
same env from another folder (`my_env.py:Reach1D` there is `work/my_env.py:Reach1D` here). Two names
mean the same env when they are equal, when they point to the same file and class, or, when one of
the files cannot be found from here, when the file names and classes agree and every file that can
be found has the same content. Code still loads only from a name the user typed (`data.envs`).
"""

from __future__ import annotations

import hashlib
from pathlib import Path


def is_file_spec(spec: str) -> bool:
    target, sep, _ = spec.rpartition(":")
    return bool(sep) and (target.endswith(".py") or "/" in target)


def canonical(spec: str) -> str:
    """`path/file.py:Class` with its path made absolute (the same file from any folder); other names as they are."""
    if not is_file_spec(spec):
        return spec
    target, _, attr = spec.rpartition(":")
    return f"{Path(target).resolve()}:{attr}"


def same_env(a: str | None, b: str | None) -> bool:
    if not a or not b:
        return False
    if a == b or canonical(a) == canonical(b):
        return True
    if not (is_file_spec(a) and is_file_spec(b)):
        return False
    (ta, _, ca), (tb, _, cb) = a.rpartition(":"), b.rpartition(":")
    if ca != cb or Path(ta).name != Path(tb).name:
        return False
    digests = {_digest(Path(t)) for t in (ta, tb) if Path(t).is_file()}
    return len(digests) <= 1


def _digest(path: Path) -> str:
    """The file's SHA-256, read in chunks (a name from a demo file may point at any file: no whole read)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
