"""The actor process: connect, say hello, get settings, then collect a fragment for each WORK message.

Run as `gailkit actor --connect tcp://HOST:PORT [--key-file K] [--env NAME]` on any machine, or
started by the learner for local actors (with `--parent-pid`, so it exits as soon as the learner
is gone). It exits on STOP, when its parent learner dies, or after `learner_timeout` seconds
without a word from the learner. While collecting it sends a heartbeat every `heartbeat_s` seconds.

What the learner sends is checked like any input from the network: settings as an `ActorSpec`
(an env that is code, `module:Class`, only when `--env` names the same), weights against the
policy's own tensors (names, shapes, dtypes, finite); WORK with bad weights is answered REJECT.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable

from gailkit.config.envid import same_env
from gailkit.core.errors import ConfigError, EnvError
from gailkit.rollout import transport, wire
from gailkit.rollout.actor import Actor, ActorSpec
from gailkit.rollout.wire import Header, Kind, ProtocolError

NO_RUN = bytes(16)


def run_actor(
    connect: str,
    key_file: str | None = None,
    actor_id: int = -1,
    parent_pid: int | None = None,
    learner_timeout: float = 300.0,
    allowed_env: str | None = None,
    log: Callable[[str], None] = print,
) -> int:
    """Serve one learner until STOP, the parent's death or `learner_timeout`; the process's exit code."""
    import torch as th

    th.set_num_threads(1)  # one core per actor: actors scale by processes, not threads
    worker = _Worker(transport.ActorEndpoint(connect, key_file), actor_id, allowed_env, log)
    worker.endpoint.start()
    try:
        worker.hello()
        while True:
            if parent_pid is not None and os.getppid() != parent_pid:
                log("gailkit actor: learner process is gone; exiting")
                return 0
            msg = worker.endpoint.recv(500)
            if msg is None:
                if time.monotonic() - worker.last_heard > learner_timeout:
                    log(f"gailkit actor: no word from the learner at {connect} for {learner_timeout:.0f} s; exiting")
                    return 3
                worker.idle()
                continue
            code = worker.handle(*msg)
            if code is not None:
                return code
    except KeyboardInterrupt:
        return 0
    finally:
        worker.close()


class _Worker:
    """One actor process's side of the protocol: who it is to the learner, and what each message does."""

    HELLO_EVERY = 2.0

    def __init__(self, endpoint: transport.ActorEndpoint, actor_id: int, allowed_env: str | None, log: Callable):
        self.endpoint, self.allowed_env, self.log = endpoint, allowed_env, log
        self.actor: Actor | None = None
        self.heartbeat_s = 1.0
        self.run_id, self.my_id = NO_RUN, actor_id
        self.last_heard = self.last_sent = time.monotonic()

    def say(self, kind: Kind, version: int = 0, body: bytes = b"") -> None:
        self.endpoint.send(Header(kind, self.run_id, self.my_id, version), body, timeout_ms=1000)
        self.last_sent = time.monotonic()

    def hello(self) -> None:
        me = {"actor_id": self.my_id, "host": socket.gethostname(), "pid": os.getpid()}
        self.say(Kind.HELLO, body=wire.encode_json({**me, "token": os.environ.get("GAILKIT_ACTOR_TOKEN", "")}))

    def heartbeat(self) -> None:
        if time.monotonic() - self.last_sent >= self.heartbeat_s:
            self.say(Kind.HEARTBEAT, self.actor.version if self.actor else 0)

    def idle(self) -> None:
        """Nothing came: (re)introduce itself while unregistered or unheard from, else keep alive."""
        if self.actor is None or time.monotonic() - self.last_heard > max(self.HELLO_EVERY, 3 * self.heartbeat_s):
            self.hello()
        else:
            self.heartbeat()

    def handle(self, header: Header, body: bytes) -> int | None:
        """Act on one message from the learner; an exit code when the process should end."""
        self.last_heard = time.monotonic()
        if header.kind == Kind.STOP:
            return 0
        if header.kind == Kind.CONFIG:
            return self._configure(header, body)
        if header.kind == Kind.WORK and self.actor is not None:
            self._work(header, body)
        return None

    def _configure(self, header: Header, body: bytes) -> int | None:
        try:
            spec = ActorSpec.from_json(wire.decode_json(body))
        except (ProtocolError, ConfigError, ValueError) as e:
            self.log(f"gailkit actor: ignoring settings that do not parse ({e})")
            return None
        if self.actor is not None and header.run_id != self.run_id:  # another learner, or the same run resumed
            if spec.with_id(0).to_json() != self.actor.spec.with_id(0).to_json():
                self.actor.stop()  # another run's env or policy: start afresh
                self.actor = None
            else:
                self.actor.forget_weights()
        self.run_id, self.my_id, self.heartbeat_s = header.run_id, spec.actor_id, spec.heartbeat_s
        if self.actor is None:
            self.actor = Actor(spec, allow_code=same_env(spec.env.id, self.allowed_env))
            try:
                self.actor.start()
            except EnvError as e:
                self.log(f"gailkit actor: {e}")
                self.actor = None
                return 2
        self.say(Kind.HEARTBEAT)
        return None

    def _work(self, header: Header, body: bytes) -> None:
        assert self.actor is not None
        try:
            weights, n_steps = wire.decode_work(body, header.policy_version)
            self.actor.set_weights(weights)
        except (ProtocolError, ValueError) as e:
            self.say(Kind.REJECT, header.policy_version, json.dumps({"reason": str(e)[:200]}).encode())
            return
        frag = self.actor.sample(n_steps, on_step=self.heartbeat)
        self.say(Kind.FRAGMENT, frag.policy_version, wire.encode_fragment(frag))

    def close(self) -> None:
        if self.actor is not None:
            self.actor.stop()
        self.endpoint.close()
