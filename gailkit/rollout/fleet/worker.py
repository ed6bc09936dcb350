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
    import torch as th

    th.set_num_threads(1)  # one core per actor: actors scale by processes, not threads
    ep = transport.ActorEndpoint(connect, key_file)
    ep.start()
    actor: Actor | None = None
    heartbeat_s = 1.0
    run_id, my_id = NO_RUN, actor_id
    last_heard = last_sent = time.monotonic()
    hello_every = 2.0

    def parent_gone() -> bool:
        return parent_pid is not None and os.getppid() != parent_pid

    def say(kind: Kind, version: int = 0, body: bytes = b"") -> None:
        nonlocal last_sent
        ep.send(Header(kind, run_id, my_id, version), body, timeout_ms=1000)
        last_sent = time.monotonic()

    def hello() -> None:
        say(
            Kind.HELLO,
            body=wire.encode_json(
                {
                    "actor_id": my_id,
                    "host": socket.gethostname(),
                    "pid": os.getpid(),
                    "token": os.environ.get("GAILKIT_ACTOR_TOKEN", ""),
                }
            ),
        )

    def heartbeat() -> None:
        if time.monotonic() - last_sent >= heartbeat_s:
            say(Kind.HEARTBEAT, actor.version if actor else 0)

    try:
        hello()
        while True:
            if parent_gone():
                log("gailkit actor: learner process is gone; exiting")
                return 0
            msg = ep.recv(500)
            now = time.monotonic()
            if msg is None:
                if now - last_heard > learner_timeout:
                    log(f"gailkit actor: no word from the learner at {connect} for {learner_timeout:.0f} s; exiting")
                    return 3
                if actor is None or now - last_heard > max(hello_every, 3 * heartbeat_s):
                    hello()  # not registered yet, or the learner may have dropped us: (re)introduce
                elif actor is not None:
                    heartbeat()
                continue
            header, body = msg
            last_heard = now
            if header.kind == Kind.STOP:
                return 0
            if header.kind == Kind.CONFIG:
                try:
                    spec = ActorSpec.from_json(wire.decode_json(body))
                except (ProtocolError, ConfigError, ValueError) as e:
                    log(f"gailkit actor: ignoring settings that do not parse ({e})")
                    continue
                run_id, my_id, heartbeat_s = header.run_id, spec.actor_id, spec.heartbeat_s
                if actor is None:
                    actor = Actor(spec, allow_code=spec.env.id == allowed_env)
                    try:
                        actor.start()
                    except EnvError as e:
                        log(f"gailkit actor: {e}")
                        actor = None
                        return 2
                say(Kind.HEARTBEAT)
            elif header.kind == Kind.WORK and actor is not None:
                try:
                    weights, n_steps = wire.decode_work(body, header.policy_version)
                    actor.set_weights(weights)
                except (ProtocolError, ValueError) as e:
                    say(Kind.REJECT, header.policy_version, json.dumps({"reason": str(e)[:200]}).encode())
                    continue
                frag = actor.sample(n_steps, on_step=heartbeat)
                say(Kind.FRAGMENT, frag.policy_version, wire.encode_fragment(frag))
    except KeyboardInterrupt:
        return 0
    finally:
        if actor is not None:
            actor.stop()
        ep.close()
