"""HMAC signatures over the files of a folder that a library would unpickle.

`gailkit tune --resume` hands `OUT/search/` to Ray Tune, which unpickles its files (the tuner, the
searcher's state, every trial's parameters). A folder is data, never code: gailkit signs every file
under it with a key only the user holds (`$XDG_CONFIG_HOME/gailkit/signing.key`, default
`~/.config/gailkit/`, made with mode 0600 on first use), and `verify` checks, before anything reads
the folder, that every file is one gailkit signed, unchanged, that none was added or removed, and
that nothing in it is a link or anything but a plain file or folder.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import stat
from pathlib import Path

from gailkit.core import fsutil, textparse
from gailkit.core.errors import GailkitError

VERSION = 1
MAX_FILE_BYTES = 1 << 30  # a search's own state files are small; anything bigger is not one gailkit signed


class SignatureError(GailkitError):
    """A signed folder was changed, added to, or never signed."""


def key_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gailkit" / "signing.key"


def _key() -> bytes:
    path = key_path()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        key = secrets.token_bytes(32)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # never readable by others, not even briefly
        with os.fdopen(fd, "wb") as f:
            f.write(key.hex().encode())
        return key
    except OSError as e:
        raise SignatureError(f"{path}: cannot read the signing key ({e.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_mode & 0o077:
            raise SignatureError(
                f"{path}: the signing key must be a plain file readable by you alone (chmod 600 {path})"
            )
        text = f.read(65)
    try:
        key = bytes.fromhex(text.decode().strip())
    except ValueError:
        key = b""
    if len(key) != 32:
        raise SignatureError(
            f"{path}: not a gailkit signing key (remove it to make a new one; older signatures then fail)"
        )
    return key


def _files(folder: Path) -> dict[str, Path]:
    """Every plain file under `folder` by its relative path; links and special files are refused."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            mode = os.lstat(path).st_mode
            if stat.S_ISLNK(mode) or not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                raise SignatureError(
                    f"{path}: a link or special file inside {folder}; gailkit never signs or reads those"
                )
            if stat.S_ISREG(mode):
                out[path.relative_to(folder).as_posix()] = path
    return out


def _mac(key: bytes, path: Path) -> str:
    digest = hmac.new(key, digestmod=hashlib.sha256)
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size > MAX_FILE_BYTES:
            raise SignatureError(f"{path}: over {MAX_FILE_BYTES >> 20} MiB; not a file gailkit signed")
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _manifest_mac(key: bytes, files: dict[str, str]) -> str:
    return hmac.new(key, json.dumps(files, sort_keys=True).encode(), hashlib.sha256).hexdigest()


def sign(folder: str | Path, signature: str | Path) -> None:
    """Write `signature`: the HMAC of every file under `folder`, and of the list itself."""
    key, folder = _key(), Path(folder)
    files = {rel: _mac(key, path) for rel, path in sorted(_files(folder).items())}
    doc = {"version": VERSION, "files": files, "mac": _manifest_mac(key, files)}
    fsutil.atomic_write_text(signature, json.dumps(doc, indent=1))


def verify(folder: str | Path, signature: str | Path) -> None:
    """Raise `SignatureError` unless `folder` holds exactly the files `signature` signed, unchanged."""
    folder, signature = Path(folder), Path(signature)
    try:
        doc = textparse.loads_json(fsutil.read_regular(signature, 16 << 20))
        files, mac = doc["files"], doc["mac"]
        if doc.get("version") != VERSION or not isinstance(files, dict) or not isinstance(mac, str):
            raise ValueError("unknown layout")
    except FileNotFoundError:
        raise SignatureError(
            f"{signature}: missing; {folder} was never signed by gailkit (a search killed before it "
            "could sign its state cannot be resumed: start a new one)"
        ) from None
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise SignatureError(f"{signature}: not a gailkit signature ({e})") from None
    key = _key()
    if not hmac.compare_digest(_manifest_mac(key, files), mac):
        raise SignatureError(f"{signature}: its signature does not match your key: not signed by you, or edited")
    found = _files(folder)
    added, missing = sorted(set(found) - set(files)), sorted(set(files) - set(found))
    if added or missing:
        what = f"added {added[0]}" if added else f"removed {missing[0]}"
        raise SignatureError(f"{folder}: changed since gailkit signed it ({what}); it is not read")
    for rel, path in found.items():
        if not hmac.compare_digest(_mac(key, path), str(files[rel])):
            raise SignatureError(f"{path}: changed since gailkit signed it; {folder} is not read")
