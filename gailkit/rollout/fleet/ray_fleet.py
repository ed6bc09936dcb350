"""`RayFleet`: the same actor code as Ray actors (`--fleet ray [--ray-address auto]`).

Weights go into Ray's object store once per version, as the Arrow bytes `wire` makes; each Ray
actor returns its fragment as Arrow bytes too, so our data never goes through pickle (Ray's own
plumbing ships the actor class with its serializer). A Ray actor that dies is restarted by Ray
(`max_restarts`) and its slot is collected again; with no fragment for `no_actor_timeout`
seconds, `collect` raises `FleetError`. Each actor's fragments begin with a token drawn when it started, so a
restart is counted (`actors/restarts`), and the actor located again, even when Ray restarted it between two
rounds and no task failed. The only module that imports ray.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym

from gailkit.config import FleetConfig
from gailkit.core.errors import first_line
from gailkit.core.fragments import BadFragment, Fragment, FragmentSpec, Weights
from gailkit.rollout import wire
from gailkit.rollout.actor import ActorSpec
from gailkit.rollout.fleet import FleetError, Interrupted
from gailkit.rollout.fleet.slots import Round
from gailkit.rollout.wire import ProtocolError

TOKEN_BYTES = 16
"""Length of the token that begins each of an actor's fragments."""


class _RayActor:
    """Runs inside a Ray worker process: an `Actor` fed and read through Arrow bytes."""

    def __init__(self, spec: dict[str, Any], allow_code: bool):
        import torch as th

        from gailkit.rollout.actor import Actor

        th.set_num_threads(1)
        self.token = os.urandom(TOKEN_BYTES)  # new with every start, Ray's restarts included
        self.actor = Actor(ActorSpec.from_json(spec), allow_code)
        self.actor.start()

    def collect(self, weights: bytes, version: int, n_steps: int) -> bytes:
        self.actor.set_weights(wire.decode_weights(weights, version))
        return self.token + wire.encode_fragment(self.actor.sample(n_steps))

    def pid(self) -> int:
        return os.getpid()

    def node(self) -> str:
        """The address of the Ray node this actor runs on."""
        import ray

        return ray.util.get_node_ip_address()


class RayFleet:
    def __init__(
        self,
        spec: ActorSpec,
        cfg: FleetConfig,
        spaces: tuple[gym.Space, gym.Space],
        interrupt: Any = None,
        allow_code: bool = True,
        max_restarts: int = 5,
        log: Callable[[str], None] | None = None,
    ):
        self.spec, self.cfg, self.spaces, self.interrupt, self.allow_code = spec, cfg, spaces, interrupt, allow_code
        self.n_slots, self.max_restarts = cfg.actors, max_restarts
        self.n_envs = cfg.actors * spec.n_envs
        self.stats: dict[str, float] = {}
        self.restarts = 0  # actors seen delivering under a new token
        self.deaths = 0  # tasks lost to a dead actor
        self.dropped = 0
        self.actors: list[Any] = []
        self.where: list[str] = []  # the node address of each slot's actor, said in the run's log
        self._lost: set[int] = set()  # slots whose actor restarted and that were not located since
        self._token: dict[int, bytes] = {}  # each slot's actor's token, from its last fragment
        self.log = log or (lambda m: None)
        self._started_ray = False

    def start(self) -> None:
        import ray

        if not ray.is_initialized():
            # Ray starts its workers at nice 15; here they are the workload, not background tasks
            os.environ.setdefault("RAY_worker_niceness", "0")
            kwargs: dict[str, Any] = dict(include_dashboard=False, log_to_driver=False, configure_logging=False)
            if self.cfg.ray_address:
                probe(self.cfg.ray_address)
                ray.init(address=self.cfg.ray_address, **kwargs)
            else:
                # a Ray of its own, never a cluster named by RAY_ADDRESS or Ray's address file (`auto` joins that)
                ray.init(address="local", num_cpus=max(2, self.n_slots), **kwargs)
            self._started_ray = True
        # SPREAD: one actor per node first, so that a cluster's every node collects (and one node's death
        # costs the fewest slots)
        remote_cls = ray.remote(num_cpus=1, max_restarts=self.max_restarts, scheduling_strategy="SPREAD")(_RayActor)
        self.actors = [remote_cls.remote(self.spec.with_id(i).to_json(), self.allow_code) for i in range(self.n_slots)]
        self.where = ray.get([a.node.remote() for a in self.actors])
        self.log("ray fleet: " + ", ".join(f"actor {i} on node {w}" for i, w in enumerate(self.where)))

    def _relocate(self, slot: int) -> None:
        """Where slot's actor runs now that Ray restarted it and it delivered (said in the log when it moved)."""
        import ray
        from ray.exceptions import RayActorError

        try:
            node = ray.get(self.actors[slot].node.remote(), timeout=self.cfg.no_actor_timeout)
        except (RayActorError, ray.exceptions.GetTimeoutError):
            return  # died again since: asked once more after its next fragment
        self._lost.discard(slot)
        if node != self.where[slot]:
            self.log(f"ray fleet: actor {slot} restarted on node {node} (was {self.where[slot]})")
            self.where[slot] = node

    def collect(self, weights: Weights, n_steps: int) -> list[Fragment]:
        import ray
        from ray.exceptions import RayActorError, RayTaskError

        rnd = Round(self.n_slots, FragmentSpec.of(*self.spaces, n_steps, self.spec.n_envs), weights.version)
        ref = ray.put(wire.encode_weights(weights))  # once per version, shared by every actor
        futures: dict[Any, int] = {}
        last_progress = time.monotonic()
        while not rnd.done:
            while (slot := rnd.take()) is not None:
                futures[self.actors[slot].collect.remote(ref, weights.version, n_steps)] = slot
            if self.interrupt is not None and self.interrupt.is_set():
                raise Interrupted()
            ready, _ = ray.wait(list(futures), num_returns=1, timeout=0.5)
            if not ready:
                if time.monotonic() - last_progress > self.cfg.no_actor_timeout:
                    raise FleetError(f"no fragment from any Ray actor for {self.cfg.no_actor_timeout:.0f} s")
                continue
            slot = futures.pop(ready[0])
            try:
                body = ray.get(ready[0])
            except RayTaskError as e:  # the actor refused the weights, or its env raised
                body = e
            except RayActorError as e:
                self.deaths += 1  # Ray restarts the actor (max_restarts); collect the slot again
                if self.deaths > self.max_restarts * self.n_slots:
                    last = [line for line in str(e).splitlines() if "Error" in line][-1:] or [str(e)[:200]]
                    raise FleetError(
                        f"Ray actors died {self.deaths} times; giving up (last: {last[0].strip()})"
                    ) from None
                rnd.give_back(slot)  # its restarted actor delivers under a new token and is located then
                continue
            try:
                if isinstance(body, Exception):
                    raise ProtocolError("actor_error", first_line(body))
                token, body = body[:TOKEN_BYTES], body[TOKEN_BYTES:]
                if self._token.setdefault(slot, token) != token:  # Ray restarted it, maybe between rounds
                    self.restarts += 1
                    self._token[slot] = token
                    self._lost.add(slot)
                rnd.accept(slot, body, slot, weights.version)
                if slot in self._lost:
                    self._relocate(slot)
            except (ProtocolError, BadFragment):
                self.dropped += 1
                if self.dropped > self.cfg.max_bad_fragments * self.n_slots:
                    raise FleetError(
                        f"Ray actors sent {self.dropped} fragments that do not fit the run; giving up"
                    ) from None
                rnd.give_back(slot)
                continue
            last_progress = time.monotonic()
        self.stats = {
            "actors/live": float(self.n_slots),
            "actors/nodes": float(len(set(self.where))),
            "actors/restarts": float(self.restarts),
            "actors/dropped": float(self.dropped),
            **rnd.stats(),
        }
        return rnd.fragments()

    def state(self) -> dict[str, Any]:
        return {"actors": []}

    def load_state(self, state: dict[str, Any]) -> None:
        pass

    def stop(self) -> None:
        import ray

        for actor in self.actors:
            ray.kill(actor, no_restart=True)
        self.actors = []
        if self._started_ray:
            ray.shutdown()


def probe(address: str, timeout: float = 10.0) -> None:
    """Fail in one line, within `timeout`, when a Ray address (`HOST:PORT` or `ray://HOST:PORT`) does not answer:
    Ray itself retries for minutes without a word. `auto` (the cluster this machine joined) is left to Ray."""
    import socket

    if address in ("", "auto", "local"):
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise FleetError(f"--ray-address {address}: expected HOST:PORT, ray://HOST:PORT or auto")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as e:
        raise FleetError(
            f"--ray-address {address}: nothing answers there within {timeout:.0f} s "
            f"({e.strerror or type(e).__name__}); is the cluster's head started (ray start --head)?"
        ) from None
