"""Atomic writes: a temp file beside the target, fsync, then rename, so readers never see half a file.

Temp names are `.<target>.<pid>.<random>.tmp[suffix]` (folders the same, and `.<target>.old-<pid>`
while one is swapped in), so `clean_stale` can remove those whose writer is gone (a kill -9,
a power cut) without touching another live process's.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(target: str | Path, suffix: str = "") -> Iterator[Path]:
    """Yield a temp path beside `target`; on success rename it over `target`, else remove it.

    `suffix` lets writers that insist on an extension (SB3 appends `.zip`) keep it on the temp name.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.{os.getpid()}.", suffix=f".tmp{suffix}", dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the usual mode
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()


@contextlib.contextmanager
def atomic_dir(target: str | Path) -> Iterator[Path]:
    """Yield a temp folder beside `target`; on success it replaces `target` (an old one is removed)."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.{os.getpid()}.", suffix=".tmp", dir=target.parent))
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~_umask())
        old = None
        if target.exists():
            old = target.with_name(f".{target.name}.old-{os.getpid()}")
            os.replace(target, old)
        os.replace(tmp, target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def atomic_write_bytes(target: str | Path, data: bytes) -> None:
    with atomic_path(target) as tmp:
        tmp.write_bytes(data)


def atomic_write_text(target: str | Path, text: str) -> None:
    atomic_write_bytes(target, text.encode())


_TEMP = re.compile(r"^\..+\.(?P<pid>\d+)\.[^.]+\.tmp(\.\w+)?$|^\..+\.old-(?P<old>\d+)$")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale(folder: str | Path) -> list[Path]:
    """Remove temp files and folders of atomic writes under `folder` whose writing process is gone."""
    removed = []
    folder = Path(folder)
    if not folder.is_dir():
        return removed
    for path in sorted(folder.rglob(".*")):
        m = _TEMP.match(path.name)
        if m is None:
            continue
        pid = int(m.group("pid") or m.group("old"))
        if pid == os.getpid() or _alive(pid):
            continue
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed.append(path)
    return removed
