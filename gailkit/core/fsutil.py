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
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from gailkit.core.errors import InputError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(target: str | Path, suffix: str = "", mode: int | None = None) -> Iterator[Path]:
    """Yield a temp path beside `target`; on success rename it over `target`, else remove it.

    `suffix` lets writers that insist on an extension (SB3 appends `.zip`) keep it on the temp name.
    """
    target = Path(target)
    _replaceable(target, is_dir=False)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.{os.getpid()}.", suffix=f".tmp{suffix}", dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask() if mode is None else mode)  # mkstemp makes 0600; the usual mode, or `mode`
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()


@contextlib.contextmanager
def atomic_dir(target: str | Path) -> Iterator[Path]:
    """Yield a temp folder beside `target`; on success it replaces `target` (an old one is removed)."""
    target = Path(target)
    _replaceable(target, is_dir=True)
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


def _replaceable(target: Path, is_dir: bool) -> None:
    """An atomic write replaces only what it would write: a plain file (or a folder, for `atomic_dir`), or a
    link (the link is replaced, never what it points to); never a device, FIFO or socket."""
    try:
        mode = os.lstat(target).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISLNK(mode) or (stat.S_ISDIR(mode) if is_dir else stat.S_ISREG(mode)):
        return
    raise InputError(
        f"{target}: exists and is {_kind(mode)}; gailkit replaces only {'folders' if is_dir else 'plain files'} "
        "it writes, never anything else"
    )


def atomic_write_bytes(target: str | Path, data: bytes, mode: int | None = None) -> None:
    with atomic_path(target, mode=mode) as tmp:
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
    removed: list[Path] = []
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


# ---------------------------------------------------------------------------------------------
# Reading: plain files only (a FIFO or a device would block or never end), within bounds.


def check_regular(path: str | Path, what: str = "") -> Path:
    """`path` if it is a plain file (links followed); a FIFO, device, socket or folder is refused in one line."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise InputError(f"{what}{path}: no such file") from None
    except (OSError, ValueError) as e:
        raise InputError(f"{what}{str(path)!r}: cannot read ({getattr(e, 'strerror', None) or e})") from None
    if not stat.S_ISREG(mode):
        raise InputError(f"{what}{path}: {_kind(mode)}, not a plain file")
    return path


def _kind(mode: int) -> str:
    return (
        "a folder"
        if stat.S_ISDIR(mode)
        else "a plain file"
        if stat.S_ISREG(mode)
        else "a FIFO"
        if stat.S_ISFIFO(mode)
        else "a device or socket"
    )


def read_regular(path: str | Path, limit: int, what: str = "") -> bytes:
    """The bytes of the plain file `path`, refusing FIFOs and devices (never blocks) and files over `limit` bytes."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except ValueError as e:  # an embedded NUL byte
        raise InputError(f"{what}{str(path)!r}: not a usable path ({e})") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise InputError(f"{what}{path}: {_kind(info.st_mode)}, not a plain file")
        if info.st_size > limit:
            raise InputError(f"{what}{path}: {info.st_size:,} bytes, over the {limit:,} this file may have")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise InputError(f"{what}{path}: over the {limit:,} bytes this file may have")
    return data


def inside(path: str | Path, folder: str | Path, what: str = "") -> Path:
    """`path` resolved, if it stays inside `folder` (links resolved); else one line."""
    try:
        resolved, root = Path(path).resolve(), Path(folder).resolve()
    except (ValueError, OSError) as e:  # an embedded NUL byte, a link loop
        raise InputError(f"{what}{str(path)!r}: not a usable path ({e})") from None
    if resolved != root and root not in resolved.parents:
        raise InputError(f"{what}{path}: leaves {folder}; gailkit reads only inside it")
    return resolved


def check_writable_target(path: str | Path, flag: str = "--out") -> Path:
    """A path a writer may replace: new, a plain file or a link (never a device, FIFO, socket or folder)."""
    try:
        _replaceable(Path(path), is_dir=False)
    except InputError as e:
        raise InputError(f"{flag} {e}") from None
    return Path(path)
