"""CURVE key files (written 0600, read only when plain, yours alone and consistent) and endpoint checks."""

from __future__ import annotations

import ipaddress
import json
import os
from pathlib import Path
from urllib.parse import urlparse

import zmq
from zmq.utils import z85

from gailkit.core import fsutil, textparse
from gailkit.core.errors import ConfigError, GailkitError


def generate_keys(path: str | Path) -> Path:
    """A key file (JSON, mode 0600) with a server and a client CURVE key pair, z85-encoded."""
    server_public, server_secret = zmq.curve_keypair()
    client_public, client_secret = zmq.curve_keypair()
    data = {
        "server_public": server_public.decode(),
        "server_secret": server_secret.decode(),
        "client_public": client_public.decode(),
        "client_secret": client_secret.decode(),
    }
    path = fsutil.check_writable_target(path)
    fsutil.atomic_write_bytes(path, (json.dumps(data, indent=2) + "\n").encode(), mode=0o600)
    return path


def read_keys(path: str | Path) -> dict[str, bytes]:
    """The four z85 keys of a key file; anything else is a ConfigError naming the file."""
    try:
        raw = fsutil.read_regular(path, 64 << 10)
    except (OSError, GailkitError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e).removeprefix(f"{path}: ")
        raise ConfigError(
            f"--key-file {path}: not a gailkit key file ({why}); make one with gailkit keys generate"
        ) from None
    try:
        data = textparse.loads_json(raw)
        keys = {k: data[k].encode() for k in ("server_public", "server_secret", "client_public", "client_secret")}
        for key in keys.values():
            if len(key) != 40:
                raise ValueError(f"a key of {len(key)} characters, CURVE keys have 40")
            z85.decode(key)
        for who in ("server", "client"):
            if zmq.curve_public(keys[f"{who}_secret"]) != keys[f"{who}_public"]:
                raise ValueError(f"its {who} public key is not the one of its {who} secret key")
    except (OSError, ValueError, KeyError, AttributeError, TypeError, UnicodeError, zmq.ZMQError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else f"{type(e).__name__}: {e}"
        raise ConfigError(
            f"--key-file {path}: not a gailkit key file ({why}); make one with gailkit keys generate"
        ) from None
    if os.stat(path).st_mode & 0o077:
        raise ConfigError(
            f"--key-file {path}: readable or writable by others than you; its secret keys let anyone "
            f"join or impersonate the learner (chmod 600 {path})"
        )
    return keys


def check_endpoint(endpoint: str, flag: str) -> str:
    """`tcp://HOST:PORT` (PORT 1-65535, or 0 for any free one when listening) or `ipc://PATH`; one line otherwise."""
    scheme, sep, rest = endpoint.partition("://")
    if scheme == "ipc" and rest:
        return endpoint
    if scheme != "tcp" or not sep:
        raise ConfigError(
            f"{flag} {endpoint}: expected tcp://HOST:PORT (or ipc://PATH on one machine)"
            + ("; inproc:// reaches only threads of one process" if scheme == "inproc" else "")
        )
    host, _, port = rest.rpartition(":")
    if not host or not port.isdigit() or not 0 <= int(port) <= 65535 or (int(port) == 0 and flag != "--listen"):
        raise ConfigError(f"{flag} {endpoint}: expected tcp://HOST:PORT with a port from 1 to 65535")
    return endpoint


def is_loopback(endpoint: str) -> bool:
    if endpoint.startswith(("ipc://", "inproc://")):
        return True
    try:
        host = urlparse(endpoint).hostname or ""
    except ValueError:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
