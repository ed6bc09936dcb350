"""`ZmqFleet`: actor processes on this machine and actors on other machines, over ZeroMQ.

Each round has `n_slots` fragment slots of `envs_per_actor` envs x `n_steps` steps. The fleet
hands slots to idle live actors (a WORK message carries the weights of version v), collects one
fragment per slot, and returns them in slot order. An actor that dies mid-round (its process
exits, or it misses heartbeats for `heartbeat_timeout` s) loses its slot to another actor and,
if it was local, is replaced by a new process; its partial work is never seen. With no live actor
for `no_actor_timeout` s, `collect` raises `FleetError`. Malformed, wrong-version, wrong-run,
stale and oversized messages are dropped and counted (`dropped`).
"""

from __future__ import annotations

import collections
import dataclasses
import os
import subprocess
import sys
import time
from typing import Any

from gailkit import config, transport, wire
from gailkit.config import EnvConfig, PPOConfig
from gailkit.fleet import FleetError
from gailkit.fragments import Fragment, Weights
from gailkit.wire import Header, Kind, ProtocolError


@dataclasses.dataclass
class _Peer:
    identity: bytes
    actor_id: int
    last_seen: float
    slot: int | None = None
    proc: subprocess.Popen | None = None


class ZmqFleet:
    def __init__(self, env_cfg: EnvConfig, ppo_cfg: PPOConfig, normalize_obs: bool, n_slots: int,
                 envs_per_actor: int, seed: int, local_actors: int, listen: str = "tcp://127.0.0.1:0",
                 key_file: str | None = None, heartbeat_timeout: float = 10.0, no_actor_timeout: float = 60.0,
                 heartbeat_s: float = 1.0, max_policy_lag: int = 0):
        self.env_cfg, self.ppo_cfg, self.normalize_obs = env_cfg, ppo_cfg, normalize_obs
        self.n_slots, self.envs_per_actor, self.seed = n_slots, envs_per_actor, seed
        self.local_actors, self.key_file = local_actors, key_file
        self.heartbeat_timeout, self.no_actor_timeout, self.heartbeat_s = heartbeat_timeout, no_actor_timeout, heartbeat_s
        self.n_envs = n_slots * envs_per_actor
        self.max_policy_lag = max_policy_lag
        self.run_id = os.urandom(16)
        self.endpoint = transport.LearnerEndpoint(listen, self.run_id, key_file)
        self.peers: dict[bytes, _Peer] = {}
        self.procs: list[subprocess.Popen] = []
        self.restarts = 0
        self.stats: dict[str, float] = {}
        self.dropped = self.endpoint.dropped
        self._next_id = 0
        self._unclaimed: set[int] = set()  # ids of local processes spawned but not yet said hello

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        self.address = self.endpoint.start()
        for _ in range(self.local_actors):
            self._spawn()

    def _spawn(self) -> subprocess.Popen:
        actor_id = self._next_id
        self._next_id += 1
        connect = self.address.replace("0.0.0.0", "127.0.0.1")
        cmd = [sys.executable, "-m", "gailkit.cli", "actor", "--connect", connect, "--actor-id", str(actor_id),
               "--parent-pid", str(os.getpid())]
        if self.key_file:
            cmd += ["--key-file", str(self.key_file)]
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL)
        proc.actor_id = actor_id  # type: ignore[attr-defined]
        self.procs.append(proc)
        self._unclaimed.add(actor_id)
        return proc

    def stop(self) -> None:
        for peer in self.peers.values():
            self.endpoint.send(peer.identity, Header(Kind.STOP, self.run_id, peer.actor_id, 0))
        deadline = time.monotonic() + 5
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs = []
        self.endpoint.close(linger_ms=1000)  # let STOPs to remote actors go out

    def state(self) -> dict[str, Any]:
        return {"actors": []}  # actor processes restart their episodes on resume (see README)

    def load_state(self, state: dict[str, Any]) -> None:
        pass

    # -- one round ------------------------------------------------------------------------------

    def _settings(self, actor_id: int) -> dict[str, Any]:
        return {"actor_id": actor_id, "env": config.to_dict(self.env_cfg), "ppo": config.to_dict(self.ppo_cfg),
                "normalize_obs": self.normalize_obs, "n_envs": self.envs_per_actor, "seed": self.seed,
                "heartbeat_s": self.heartbeat_s}

    def _hello(self, identity: bytes, body: bytes, now: float) -> None:
        try:
            wanted = int(wire.decode_json(body).get("actor_id", -1))
        except (ProtocolError, TypeError, ValueError):
            self.dropped["malformed"] += 1
            return
        peer = self.peers.get(identity)
        if peer is None:
            taken = {p.actor_id for p in self.peers.values()}
            if wanted < 0 or wanted in taken:
                wanted = self._next_id
                self._next_id += 1
            self._unclaimed.discard(wanted)
            proc = next((p for p in self.procs if getattr(p, "actor_id", None) == wanted), None)
            peer = self.peers[identity] = _Peer(identity, wanted, now, proc=proc)
        peer.last_seen = now
        self.endpoint.send(identity, Header(Kind.CONFIG, self.run_id, peer.actor_id, 0),
                           wire.encode_json(self._settings(peer.actor_id)))

    def _lose(self, peer: _Peer, pending: collections.deque) -> None:
        """A peer is gone: free its slot (its partial work is dropped) and replace it if local."""
        self.peers.pop(peer.identity, None)
        if peer.slot is not None:
            pending.appendleft(peer.slot)
        if peer.proc is not None:
            if peer.proc.poll() is None:
                peer.proc.kill()
            peer.proc.wait()
            self.procs.remove(peer.proc)
            self.restarts += 1
            self._spawn()

    def _check_liveness(self, now: float, pending: collections.deque) -> None:
        for peer in list(self.peers.values()):
            dead_proc = peer.proc is not None and peer.proc.poll() is not None
            if dead_proc or now - peer.last_seen > self.heartbeat_timeout:
                self._lose(peer, pending)
        for proc in list(self.procs):  # local processes that died before saying hello
            if proc.poll() is not None and getattr(proc, "actor_id", None) in self._unclaimed:
                self._unclaimed.discard(proc.actor_id)  # type: ignore[attr-defined]
                self.procs.remove(proc)
                self.restarts += 1
                if self.restarts > 10 * max(1, self.local_actors):
                    raise FleetError(f"local actor processes keep dying before they start (exit code {proc.returncode})")
                self._spawn()

    def collect(self, weights: Weights, n_steps: int) -> list[Fragment]:
        """One fragment per slot, of version `weights.version` (or up to `max_policy_lag` older:
        with a lag, every slot is handed out again as soon as a round's fragments are in, so the
        actors collect the next round while the learner trains)."""
        body = wire.encode_work(weights, n_steps)
        busy = {p.slot for p in self.peers.values() if p.slot is not None}
        pending: collections.deque[int] = collections.deque(s for s in range(self.n_slots) if s not in busy)
        results: dict[int, Fragment] = {}
        oldest = weights.version - self.max_policy_lag
        start = last_live = time.monotonic()
        received_bytes, sample_s = 0, []
        while len(results) < self.n_slots:
            now = time.monotonic()
            self._check_liveness(now, pending)
            for peer in self.peers.values():
                if peer.slot is None and pending:
                    slot = pending.popleft()
                    if self.endpoint.send(peer.identity, Header(Kind.WORK, self.run_id, peer.actor_id, weights.version), body):
                        peer.slot = slot
                    else:
                        pending.appendleft(slot)
            if self.peers:
                last_live = now
            elif now - last_live > self.no_actor_timeout:
                raise FleetError(f"no live actor for {self.no_actor_timeout:.0f} s (listening on {self.address}); "
                                 "start actors with: gailkit actor --connect ADDRESS")
            msg = self.endpoint.recv(100)
            if msg is None:
                continue
            identity, header, payload = msg
            now = time.monotonic()
            if header.kind == Kind.HELLO:
                self._hello(identity, payload, now)
                continue
            peer = self.peers.get(identity)
            if peer is None:
                self.dropped["unknown_peer"] += 1
                continue
            peer.last_seen = now
            if header.kind != Kind.FRAGMENT:
                continue
            if peer.slot is None or not oldest <= header.policy_version <= weights.version or peer.slot in results:
                self.dropped["stale"] += 1
                if peer.slot is not None and peer.slot not in results:
                    pending.appendleft(peer.slot)  # the slot still needs a fresh fragment
                peer.slot = None
                continue
            try:
                frag = wire.decode_fragment(header, payload)
                if (frag.n_steps, frag.n_envs) != (n_steps, self.envs_per_actor):
                    raise ProtocolError("malformed", f"fragment of {frag.n_steps} x {frag.n_envs}")
            except (ProtocolError, ValueError):
                self.dropped["malformed"] += 1
                pending.appendleft(peer.slot)
                peer.slot = None
                continue
            results[peer.slot] = frag
            peer.slot = None
            received_bytes += len(payload)
            sample_s.append(frag.sample_seconds)
        if self.max_policy_lag:
            for peer, slot in zip(list(self.peers.values()), range(self.n_slots)):  # next round, with weights v
                if peer.slot is None and self.endpoint.send(
                        peer.identity, Header(Kind.WORK, self.run_id, peer.actor_id, weights.version), body):
                    peer.slot = slot
        wait = time.monotonic() - start
        self.stats = {"actors/live": float(len(self.peers)), "actors/restarts": float(self.restarts),
                      "actors/dropped": float(sum(self.dropped.values())), "actors/refused": float(self.endpoint.refused),
                      "actors/wait_s": wait, "actors/sample_s": max(sample_s), "actors/fragments_per_s": self.n_slots / wait,
                      "actors/fragment_mb": received_bytes / self.n_slots / 2**20}
        return [results[s] for s in range(self.n_slots)]
