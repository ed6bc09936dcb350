"""ZeroMQ endpoints: the learner's ROUTER and each actor's DEALER; CURVE keys; drop-and-count.

Every message is `[header, body]` (see `wire`). The learner binds, actors connect. Sends never
block: high-water marks are small and a full queue or a vanished peer makes `send` return False.
Receives take a timeout. With a key file, the learner is a CURVE server that admits only the
client key in that file; peers failing the handshake are counted in `refused`.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any

import zmq
import zmq.auth
import zmq.utils.z85
from zmq.utils.monitor import recv_monitor_message

from gailkit.core.errors import ConfigError
from gailkit.rollout.transport.keys import check_endpoint, generate_keys, is_loopback, read_keys
from gailkit.rollout.wire import HEADER_SIZE, Header, Kind, ProtocolError, parse_header

HWM = 16


__all__ = ["ActorEndpoint", "LearnerEndpoint", "check_endpoint", "generate_keys", "is_loopback", "read_keys"]


class LearnerEndpoint:
    """The learner's socket. `start()` binds; `recv()` returns `(identity, header, body)` or None."""

    def __init__(self, bind: str, run_id: bytes, key_file: str | None = None, max_bytes: int = 256 << 20):
        check_endpoint(bind, "--listen")
        if not key_file and not is_loopback(bind):
            raise ConfigError(f"--listen {bind}: listening beyond loopback needs --key-file (gailkit keys generate)")
        self.bind, self.run_id, self.key_file, self.max_bytes = bind, run_id, key_file, max_bytes
        self.dropped: collections.Counter[str] = collections.Counter()
        self.refused = 0
        self.address = ""
        self._ctx: zmq.Context | None = None
        self._sock: zmq.Socket | None = None
        self._auth: Any = None  # a zmq ThreadAuthenticator while listening with keys
        self._monitor_thread: threading.Thread | None = None

    def start(self) -> str:
        """Bind; a bad address, a busy port or a bad key file is a ConfigError, and nothing stays open."""
        try:
            return self._start()
        except zmq.ZMQError as e:
            self.close()
            raise ConfigError(f"--listen {self.bind}: cannot listen there ({zmq.strerror(e.errno or 0)})") from None
        except ConfigError:
            self.close()
            raise

    def _start(self) -> str:
        keys = read_keys(self.key_file) if self.key_file else None
        self._ctx = zmq.Context()
        sock = self._sock = self._ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        sock.setsockopt(zmq.SNDHWM, HWM)
        sock.setsockopt(zmq.RCVHWM, HWM * 8)
        sock.setsockopt(zmq.MAXMSGSIZE, self.max_bytes + HEADER_SIZE + 64)
        if keys is not None:
            from zmq.auth.thread import ThreadAuthenticator

            self._auth = ThreadAuthenticator(self._ctx)
            self._auth.start()
            self._auth.configure_curve_callback(domain="*", credentials_provider=_OneKey(keys["client_public"]))
            sock.curve_server = True
            sock.curve_secretkey = keys["server_secret"]
            sock.curve_publickey = keys["server_public"]
            monitor = sock.get_monitor_socket(
                zmq.EVENT_HANDSHAKE_FAILED_AUTH
                | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
                | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
            )
            self._monitor_thread = threading.Thread(target=self._watch, args=(monitor,), daemon=True)
            self._monitor_thread.start()
        if self.bind.endswith(":0"):
            port = sock.bind_to_random_port(self.bind.rsplit(":", 1)[0])
            self.address = f"{self.bind.rsplit(':', 1)[0]}:{port}"
        else:
            sock.bind(self.bind)
            self.address = sock.getsockopt_string(zmq.LAST_ENDPOINT)
        return self.address

    def _watch(self, monitor: zmq.Socket) -> None:
        while True:
            try:
                event = recv_monitor_message(monitor)
            except zmq.ZMQError:
                return
            if event["event"] == zmq.EVENT_MONITOR_STOPPED:
                return
            self.refused += 1

    def send(self, identity: bytes, header: Header, body: bytes = b"") -> bool:
        assert self._sock is not None
        try:
            self._sock.send_multipart([identity, header.pack(), body], flags=zmq.NOBLOCK, copy=False)
            return True
        except zmq.Again:
            self.dropped["send_queue_full"] += 1
            return False
        except zmq.ZMQError as e:
            if e.errno == zmq.EHOSTUNREACH:
                self.dropped["peer_gone"] += 1
                return False
            raise

    def recv(self, timeout_ms: int) -> tuple[bytes, Header, bytes] | None:
        """The next well-formed message, or None after `timeout_ms`; bad ones are counted and skipped."""
        assert self._sock is not None
        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        remaining = timeout_ms
        deadline = time.monotonic() + timeout_ms / 1000
        while remaining >= 0:
            if not poller.poll(remaining):
                return None
            frames = self._sock.recv_multipart(copy=True)
            remaining = int((deadline - time.monotonic()) * 1000)
            if len(frames) != 3:
                self.dropped["malformed"] += 1
                continue
            identity, head, body = frames
            if len(body) > self.max_bytes:
                self.dropped["oversized"] += 1
                continue
            try:
                return identity, parse_header(head, self.run_id), body
            except ProtocolError as e:
                self.dropped[e.reason] += 1
        return None

    def close(self, linger_ms: int = 0) -> None:
        """Close; `linger_ms` gives messages still queued (a last STOP) that long to leave."""
        if self._sock is not None:
            if self._monitor_thread is not None:
                self._sock.disable_monitor()
                self._monitor_thread = None
            self._sock.close(linger=linger_ms)
            self._sock = None
        if self._auth is not None:
            self._auth.stop()
            self._auth = None
        if self._ctx is not None:
            self._ctx.term()
            self._ctx = None


class _OneKey:
    def __init__(self, allowed: bytes):
        self.allowed = allowed

    def callback(self, domain: str, key: bytes) -> bool:
        """pyzmq's authenticator hands over the client's public key z85-encoded."""
        return key == self.allowed


class ActorEndpoint:
    """An actor's socket, connected to the learner (reconnects by itself after drops)."""

    def __init__(self, connect: str, key_file: str | None = None):
        check_endpoint(connect, "--connect")
        self.connect, self.key_file = connect, key_file
        self._ctx: zmq.Context | None = None
        self._sock: zmq.Socket | None = None
        self.run_id: bytes | None = None

    def start(self) -> None:
        """Connect (ZeroMQ connects lazily); a bad address or key file is a ConfigError."""
        try:
            self._start()
        except zmq.ZMQError as e:
            self.close()
            raise ConfigError(f"--connect {self.connect}: {zmq.strerror(e.errno or 0)}") from None
        except ConfigError:
            self.close()
            raise

    def _start(self) -> None:
        keys = read_keys(self.key_file) if self.key_file else None
        self._ctx = zmq.Context()
        sock = self._sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, HWM)
        sock.setsockopt(zmq.RCVHWM, HWM)
        sock.setsockopt(zmq.IMMEDIATE, 1)
        sock.setsockopt(zmq.MAXMSGSIZE, (256 << 20) + HEADER_SIZE + 64)  # what a learner may send us, at most
        if keys is not None:
            sock.curve_serverkey = keys["server_public"]
            sock.curve_publickey = keys["client_public"]
            sock.curve_secretkey = keys["client_secret"]
        sock.connect(self.connect)

    def send(self, header: Header, body: bytes = b"", timeout_ms: int = 5000) -> bool:
        assert self._sock is not None
        if not self._sock.poll(timeout_ms, zmq.POLLOUT):
            return False
        self._sock.send_multipart([header.pack(), body], flags=zmq.NOBLOCK, copy=False)
        return True

    def recv(self, timeout_ms: int) -> tuple[Header, bytes] | None:
        assert self._sock is not None
        if not self._sock.poll(timeout_ms, zmq.POLLIN):
            return None
        frames = self._sock.recv_multipart()
        if len(frames) != 2:
            return None
        try:
            header = parse_header(frames[0], None)
        except ProtocolError:
            return None
        if header.kind == Kind.CONFIG:
            self.run_id = header.run_id
        elif self.run_id is not None and header.run_id != self.run_id:
            return None
        return header, frames[1]

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close(linger=0)
            self._sock = None
        if self._ctx is not None:
            self._ctx.term()
            self._ctx = None
