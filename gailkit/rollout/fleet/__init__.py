"""Running actors. A fleet turns weights into fragments: `start()`, `collect(weights, n_steps)`,
`state()`, `load_state()`, `stop()`, and `stats` (the last round's `actors/...` figures).

`InProcessFleet`: the actor code in this process and thread (tests, debuggers, `fleet.actors: 0`).
`ZmqFleet` (fleet.zmq_fleet): actor processes here and actors on other machines, over ZeroMQ.
`RayFleet` (fleet.ray_fleet): Ray actors. `make_fleet` picks one from the settings.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

import gymnasium as gym

from gailkit.config import FleetConfig, TrainConfig
from gailkit.core.errors import ConfigError, GailkitError
from gailkit.core.fragments import Fragment, Weights
from gailkit.model import policy
from gailkit.rollout.actor import Actor, ActorSpec


class FleetError(GailkitError):
    """No live actor for too long, or actors that cannot start."""


class Interrupted(Exception):
    """The run was asked to stop (SIGINT/SIGTERM) while a fleet waited for fragments."""


class Fleet(Protocol):
    n_envs: int
    stats: dict[str, float]

    def start(self) -> None: ...

    def collect(self, weights: Weights, n_steps: int) -> list[Fragment]: ...

    def state(self) -> dict[str, Any]: ...

    def load_state(self, state: dict[str, Any]) -> None: ...

    def stop(self) -> None: ...


class InProcessFleet:
    """Zero actor processes: one `Actor` with `spec.n_envs` envs, stepped when `collect` is called."""

    def __init__(self, spec: ActorSpec, allow_code: bool = True):
        self.n_envs = spec.n_envs
        self.stats: dict[str, float] = {}
        self.actor = Actor(spec, allow_code)

    def start(self) -> None:
        self.actor.start()

    def collect(self, weights: Weights, n_steps: int) -> list[Fragment]:
        self.actor.set_weights(weights)
        return [self.actor.sample(n_steps)]

    def state(self) -> dict[str, Any]:
        return {"actors": [self.actor.state()]}

    def load_state(self, state: dict[str, Any]) -> None:
        if state.get("actors"):
            self.actor.load_state(state["actors"][0])

    def stop(self) -> None:
        self.actor.stop()

    def __enter__(self) -> InProcessFleet:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def actor_spec(cfg: TrainConfig) -> ActorSpec:
    """The template every actor of this run is made from (its `actor_id` set per actor)."""
    n_envs = cfg.fleet.envs_per_actor if cfg.fleet.actors else cfg.in_process_envs
    kind = policy.kind_of(cfg.generator)
    return ActorSpec(cfg.env, cfg.policy, cfg.normalize_obs, n_envs, cfg.seed, policy_kind=kind)


def make_fleet(
    cfg: TrainConfig,
    spaces: tuple[gym.Space, gym.Space],
    interrupt: threading.Event | None = None,
    allow_code: bool = True,
    log: Callable[[str], None] | None = None,
) -> Fleet:
    """The fleet the settings ask for (nothing starts until `start()`)."""
    spec, fl = actor_spec(cfg), cfg.fleet
    if fl.actors == 0:
        return InProcessFleet(spec, allow_code)
    if fl.kind == "ray":
        try:
            from gailkit.rollout.fleet.ray_fleet import RayFleet
        except ImportError:
            raise ConfigError("'fleet.kind: ray' needs Ray: pip install 'gailkit[ray]'") from None
        return RayFleet(spec, fl, spaces, interrupt, allow_code, log=log)
    from gailkit.rollout.fleet.zmq_fleet import ZmqFleet

    return ZmqFleet(spec, fl, spaces, interrupt, allow_code)


__all__ = ["Fleet", "FleetConfig", "FleetError", "InProcessFleet", "Interrupted", "actor_spec", "make_fleet"]
