"""`ZmqFleet`: actor processes on this machine and actors on other machines, over ZeroMQ.

Each round has `actors` fragment slots of `envs_per_actor` envs x `n_steps` steps. The fleet
hands slots to idle live actors (a WORK message carries the weights of version v), collects one
fragment per slot, and returns them in slot order. An actor that dies mid-round (its process
exits, or it misses heartbeats for `heartbeat_timeout` s of listening) loses its slot to another actor and,
if it was local, is replaced by a new process; its partial work is never seen. With no live actor
for `no_actor_timeout` s, `collect` raises `FleetError`.

Nothing a peer sends can stop the round: malformed, wrong-version, wrong-run, stale and oversized
messages are dropped and counted (`dropped`), and so is every fragment that does not fit the
run's spaces (`FragmentSpec`: shapes, dtypes, NaN, out-of-range actions, episode counts); its
slot is handed out again, and a peer that sends `max_bad_fragments` of them (or rejects that many
WORK messages) is cut off: its messages are dropped from then on, and a local one is replaced.
"""

from __future__ import annotations

import collections
import dataclasses
import hmac
import os
import subprocess
import threading
import time
from typing import Any

import gymnasium as gym

from gailkit.config import FleetConfig
from gailkit.core.fragments import BadFragment, Fragment, FragmentSpec, Weights
from gailkit.rollout import transport, wire
from gailkit.rollout.actor import ActorSpec
from gailkit.rollout.fleet import FleetError, Interrupted
from gailkit.rollout.fleet.local import spawn_actor
from gailkit.rollout.fleet.slots import Round
from gailkit.rollout.wire import Header, Kind, ProtocolError


@dataclasses.dataclass
class _Peer:
    identity: bytes
    actor_id: int
    last_seen: float
    slot: int | None = None
    proc: subprocess.Popen | None = None
    bad: int = 0
    slot_at: float = 0.0


class ZmqFleet:
    def __init__(
        self,
        spec: ActorSpec,
        cfg: FleetConfig,
        spaces: tuple[gym.Space, gym.Space],
        interrupt: threading.Event | None = None,
        allow_code: bool = True,
        heartbeat_s: float = 1.0,
    ):
        self.spec, self.cfg, self.spaces, self.interrupt = spec, cfg, spaces, interrupt
        self.allow_code = allow_code
        self.n_slots = cfg.actors
        self.local_actors = cfg.local_actors if cfg.local_actors >= 0 else (0 if cfg.listen else cfg.actors)
        self.heartbeat_s = heartbeat_s
        self.n_envs = cfg.actors * spec.n_envs
        self.run_id = os.urandom(16)
        self.endpoint = transport.LearnerEndpoint(cfg.listen or "tcp://127.0.0.1:0", self.run_id, cfg.key_file or None)
        self.peers: dict[bytes, _Peer] = {}
        self.banned: set[bytes] = set()
        self.procs: list[subprocess.Popen] = []
        self.restarts = 0
        self.slot_seconds: collections.deque[float] = collections.deque(maxlen=32)  # hand-out to fragment, recent slots
        self.stats: dict[str, float] = {}
        self.dropped = self.endpoint.dropped
        self.address = ""
        self._next_id = 0
        self._unclaimed: set[int] = set()  # ids of local processes spawned but not yet said hello
        self._left_at: float | None = None  # when the last round's collection returned (the learner went away)

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        self.address = self.endpoint.start()
        for _ in range(self.local_actors):
            self._spawn()

    def _spawn(self) -> subprocess.Popen:
        actor_id = self._next_id
        self._next_id += 1
        code_env = self.spec.env.id if self.allow_code and ":" in self.spec.env.id else None  # typed by the user
        proc = spawn_actor(self.address.replace("0.0.0.0", "127.0.0.1"), actor_id, self.cfg.key_file, code_env)
        self.procs.append(proc)
        self._unclaimed.add(actor_id)
        return proc

    def stop(self) -> None:
        if self.endpoint.address and self.peers:
            self._say_stop(time.monotonic() + 0.5)
        deadline = time.monotonic() + 5
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs = []
        self.endpoint.close(linger_ms=1000)  # let STOPs to remote actors go out

    def _say_stop(self, until: float) -> None:
        """STOP every peer, then read what still comes in until `until`, telling whoever talks to stop
        again. Closing a socket with unread input makes the kernel reset the connection, which can
        throw away a STOP still in the actor's buffers: draining first is what gets it there."""
        for peer in self.peers.values():
            self.endpoint.send(peer.identity, Header(Kind.STOP, self.run_id, peer.actor_id, 0))
        while (left := until - time.monotonic()) > 0:
            msg = self.endpoint.recv(int(left * 1000) + 1)
            if msg is not None and msg[0] in self.peers:
                self.endpoint.send(msg[0], Header(Kind.STOP, self.run_id, self.peers[msg[0]].actor_id, 0))

    def state(self) -> dict[str, Any]:
        return {"actors": []}  # actor processes restart their episodes on resume (see README)

    def load_state(self, state: dict[str, Any]) -> None:
        pass

    # -- peers ----------------------------------------------------------------------------------

    def _hello(self, identity: bytes, body: bytes, now: float) -> None:
        try:
            hello = wire.decode_json(body)
            wanted, token = int(hello.get("actor_id", -1)), str(hello.get("token", ""))
        except (ProtocolError, TypeError, ValueError, OverflowError, AttributeError):
            self.dropped["malformed"] += 1
            return
        peer = self.peers.get(identity)
        if peer is None:
            # An id reserved for a local process goes only to the process that holds its token (from its
            # environment): a peer claiming it gets a fresh id, and cutting that peer off kills nothing here.
            proc = next((p for p in self.procs if getattr(p, "actor_id", None) == wanted), None)
            if proc is not None and not hmac.compare_digest(token.encode(), proc.token.encode()):  # type: ignore[attr-defined]
                proc, wanted = None, -1
            taken = {p.actor_id for p in self.peers.values()} | {
                getattr(p, "actor_id", None) for p in self.procs if p is not proc
            }
            if wanted < 0 or wanted in taken or wanted >= 1 << 31:
                wanted = self._next_id
                self._next_id += 1
            self._unclaimed.discard(wanted)
            peer = self.peers[identity] = _Peer(identity, wanted, now, proc=proc)
        peer.last_seen = now
        spec = self.spec.with_id(peer.actor_id)
        body = wire.encode_json({**spec.to_json(), "heartbeat_s": self.heartbeat_s})
        self.endpoint.send(identity, Header(Kind.CONFIG, self.run_id, peer.actor_id, 0), body)

    def _lose(self, peer: _Peer, pending: collections.deque) -> None:
        """A peer is gone: free its slot (its partial work is dropped) and replace it if local."""
        self.peers.pop(peer.identity, None)
        if peer.slot is not None:
            pending.appendleft(peer.slot)
            peer.slot = None
        if peer.proc is not None:
            if peer.proc.poll() is None:
                peer.proc.kill()
            peer.proc.wait()
            if peer.proc in self.procs:
                self.procs.remove(peer.proc)
            self.restarts += 1
            self._spawn()

    def _strike(self, peer: _Peer, reason: str, pending: collections.deque) -> None:
        """Count a bad fragment or a rejected WORK; hand the slot out again; cut the peer off at the limit."""
        self.dropped[reason] += 1
        if peer.slot is not None:
            pending.appendleft(peer.slot)
            peer.slot = None
        peer.bad += 1
        if peer.bad >= self.cfg.max_bad_fragments:
            self.banned.add(peer.identity)
            self.endpoint.send(peer.identity, Header(Kind.STOP, self.run_id, peer.actor_id, 0))
            self.dropped["cut_off"] += 1
            self._lose(peer, pending)

    def slot_deadline(self) -> float:
        """Seconds a peer may hold a slot: 10x the median of recent slots plus `heartbeat_timeout` (no limit before
        any slot was filled). A peer that takes WORK and only sends heartbeats loses the slot, is counted
        (`slot_deadline`), and is cut off at `max_bad_fragments`."""
        if not self.slot_seconds:
            return float("inf")
        return 10 * sorted(self.slot_seconds)[len(self.slot_seconds) // 2] + self.cfg.heartbeat_timeout

    def _check_liveness(self, now: float, pending: collections.deque) -> None:
        deadline = self.slot_deadline()
        for peer in list(self.peers.values()):
            dead_proc = peer.proc is not None and peer.proc.poll() is not None
            if dead_proc or now - peer.last_seen > self.cfg.heartbeat_timeout:
                self._lose(peer, pending)
            elif peer.slot is not None and now - peer.slot_at > deadline:
                self._strike(peer, "slot_deadline", pending)
        for proc in list(self.procs):  # local processes that died before saying hello
            if proc.poll() is not None and getattr(proc, "actor_id", None) in self._unclaimed:
                self._unclaimed.discard(proc.actor_id)  # type: ignore[attr-defined]
                self.procs.remove(proc)
                self.restarts += 1
                if self.restarts > 10 * max(1, self.local_actors):
                    raise FleetError(
                        f"local actor processes keep dying before they start (exit code {proc.returncode})"
                    )
                self._spawn()

    # -- one round ------------------------------------------------------------------------------

    def collect(self, weights: Weights, n_steps: int) -> list[Fragment]:
        """One fragment per slot, of version `weights.version` (or up to `max_policy_lag` older:
        with a lag, every slot is handed out again as soon as a round's fragments are in, so the
        actors collect the next round while the learner trains)."""
        body = wire.encode_work(weights, n_steps)
        busy = [p.slot for p in self.peers.values() if p.slot is not None]
        spec = FragmentSpec.of(*self.spaces, n_steps, self.spec.n_envs)
        rnd = Round(self.n_slots, spec, weights.version, self.cfg.max_policy_lag, busy)
        pending = rnd.pending
        last_live = time.monotonic()
        if self._left_at is not None:  # time spent learning (or evaluating) is not silence: the peers' heartbeats
            away = last_live - self._left_at  # are queued unread, so their clocks move on by that long
            for p in self.peers.values():
                p.last_seen, p.slot_at = p.last_seen + away, p.slot_at + away
        while not rnd.done:
            if self.interrupt is not None and self.interrupt.is_set():
                raise Interrupted()
            now = time.monotonic()
            self._check_liveness(now, pending)
            self._hand_out(pending, weights.version, body)
            if self.peers:
                last_live = now
            elif now - last_live > self.cfg.no_actor_timeout:
                raise FleetError(
                    f"no live actor for {self.cfg.no_actor_timeout:.0f} s (listening on {self.address}); "
                    "start actors with: gailkit actor --connect ADDRESS"
                )
            msg = self.endpoint.recv(100)
            if msg is None:
                continue
            identity, header, payload = msg
            if identity in self.banned:
                self.dropped["banned"] += 1
                continue
            now = time.monotonic()
            if header.kind == Kind.HELLO:
                self._hello(identity, payload, now)
                continue
            peer = self.peers.get(identity)
            if peer is None:
                self.dropped["unknown_peer"] += 1
                continue
            peer.last_seen = now
            if header.kind == Kind.REJECT:
                self._strike(peer, "rejected_work", pending)
                continue
            if header.kind != Kind.FRAGMENT:
                continue
            if header.policy_version > weights.version:  # weights this learner never sent: a broken peer
                self._strike(peer, "future_version", pending)
                continue
            if not rnd.wants(peer.slot, header.policy_version):
                self.dropped["stale"] += 1
                rnd.give_back(peer.slot)  # the slot still needs a fresh fragment
                peer.slot = None
                continue
            assert peer.slot is not None  # `wants` says so
            try:
                rnd.accept(peer.slot, payload, header.actor_id, header.policy_version)
            except ProtocolError:
                self._strike(peer, "malformed", pending)
                continue
            except BadFragment as e:
                self._strike(peer, f"invalid_{e.reason}", pending)
                continue
            self.slot_seconds.append(now - peer.slot_at)
            peer.slot = None
        if self.cfg.max_policy_lag:  # next round's slots go out now, with weights v
            self._hand_out(collections.deque(range(self.n_slots)), weights.version, body)
        self.stats = {
            "actors/live": float(len(self.peers)),
            "actors/restarts": float(self.restarts),
            "actors/dropped": float(sum(self.dropped.values())),
            "actors/refused": float(self.endpoint.refused),
            "actors/cut_off": float(self.dropped["cut_off"]),
            **rnd.stats(),
        }
        self._left_at = time.monotonic()
        return rnd.fragments()

    def _hand_out(self, pending: collections.deque, version: int, body: bytes) -> None:
        for peer in self.peers.values():
            if peer.slot is None and pending:
                slot = pending.popleft()
                if self.endpoint.send(peer.identity, Header(Kind.WORK, self.run_id, peer.actor_id, version), body):
                    peer.slot, peer.slot_at = slot, time.monotonic()
                else:
                    pending.appendleft(slot)
