"""`RayFleet`: the same actor code as Ray actors (`--fleet ray [--ray-address auto]`).

Weights go into Ray's object store once per version, as the Arrow bytes `wire` makes; each Ray
actor returns its fragment as Arrow bytes too, so our data never goes through pickle (Ray's own
plumbing ships the actor class with its serializer). A Ray actor that dies is restarted by Ray
(`max_restarts`) and its slot is collected again; with no fragment for `no_actor_timeout`
seconds, `collect` raises `FleetError`. The only module that imports ray.
"""

from __future__ import annotations

import os
import time
from typing import Any

from gailkit import config, wire
from gailkit.config import EnvConfig, PPOConfig
from gailkit.fleet import FleetError
from gailkit.fragments import Fragment, Weights
from gailkit.wire import Header, Kind


class _RayActor:
    """Runs inside a Ray worker process: an `Actor` fed and read through Arrow bytes."""

    def __init__(self, settings: dict[str, Any]):
        import torch as th

        from gailkit.actor import Actor

        th.set_num_threads(1)
        self.actor = Actor(EnvConfig(**settings["env"]), config.from_dict(PPOConfig, settings["ppo"]),
                           bool(settings["normalize_obs"]), int(settings["actor_id"]), int(settings["n_envs"]),
                           int(settings["seed"]))
        self.actor.start()

    def collect(self, weights: bytes, version: int, n_steps: int) -> bytes:
        header = Header(Kind.WORK, bytes(16), self.actor.actor_id, version)
        self.actor.set_weights(wire.decode_weights(header, weights))
        return wire.encode_fragment(self.actor.sample(n_steps))

    def pid(self) -> int:
        import os

        return os.getpid()


class RayFleet:
    def __init__(self, env_cfg: EnvConfig, ppo_cfg: PPOConfig, normalize_obs: bool, n_slots: int,
                 envs_per_actor: int, seed: int, address: str = "", no_actor_timeout: float = 120.0,
                 max_restarts: int = 5):
        self.env_cfg, self.ppo_cfg, self.normalize_obs = env_cfg, ppo_cfg, normalize_obs
        self.n_slots, self.envs_per_actor, self.seed = n_slots, envs_per_actor, seed
        self.address, self.no_actor_timeout, self.max_restarts = address, no_actor_timeout, max_restarts
        self.n_envs = n_slots * envs_per_actor
        self.stats: dict[str, float] = {}
        self.restarts = 0
        self.actors: list[Any] = []
        self._started_ray = False

    def start(self) -> None:
        import ray

        if not ray.is_initialized():
            # Ray starts its workers at nice 15; here they are the workload, not background tasks
            os.environ.setdefault("RAY_worker_niceness", "0")
            kwargs: dict[str, Any] = dict(include_dashboard=False, log_to_driver=False, configure_logging=False)
            if self.address:
                ray.init(address=self.address, **kwargs)
            else:
                ray.init(num_cpus=max(2, self.n_slots), **kwargs)
            self._started_ray = True
        remote_cls = ray.remote(num_cpus=1, max_restarts=self.max_restarts)(_RayActor)
        self.actors = [remote_cls.remote(self._settings(i)) for i in range(self.n_slots)]

    def _settings(self, actor_id: int) -> dict[str, Any]:
        return {"actor_id": actor_id, "env": config.to_dict(self.env_cfg), "ppo": config.to_dict(self.ppo_cfg),
                "normalize_obs": self.normalize_obs, "n_envs": self.envs_per_actor, "seed": self.seed}

    def collect(self, weights: Weights, n_steps: int) -> list[Fragment]:
        import ray
        from ray.exceptions import RayActorError

        start = time.monotonic()
        ref = ray.put(wire.encode_weights(weights))  # once per version, shared by every actor
        futures = {self.actors[s].collect.remote(ref, weights.version, n_steps): s for s in range(self.n_slots)}
        results: dict[int, Fragment] = {}
        last_progress = time.monotonic()
        while futures:
            ready, _ = ray.wait(list(futures), num_returns=1, timeout=1.0)
            if not ready:
                if time.monotonic() - last_progress > self.no_actor_timeout:
                    raise FleetError(f"no fragment from any Ray actor for {self.no_actor_timeout:.0f} s")
                continue
            future = ready[0]
            slot = futures.pop(future)
            try:
                body = ray.get(future)
            except RayActorError:
                self.restarts += 1  # Ray restarts the actor (max_restarts); collect the slot again
                if self.restarts > self.max_restarts * self.n_slots:
                    raise FleetError(f"Ray actors died {self.restarts} times; giving up") from None
                futures[self.actors[slot].collect.remote(ref, weights.version, n_steps)] = slot
                continue
            header = Header(Kind.FRAGMENT, bytes(16), slot, weights.version)
            results[slot] = wire.decode_fragment(header, body)
            last_progress = time.monotonic()
        wait = time.monotonic() - start
        self.stats = {"actors/live": float(self.n_slots), "actors/restarts": float(self.restarts), "actors/wait_s": wait,
                      "actors/sample_s": max(f.sample_seconds for f in results.values()),
                      "actors/fragments_per_s": self.n_slots / wait}
        return [results[s] for s in range(self.n_slots)]

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
