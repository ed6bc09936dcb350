"""Running actors. A fleet turns weights into fragments: `start()`, `collect(weights, n_steps)`,
`state()`, `load_state()`, `stop()`, and `stats` (the last round's `actors/...` figures).

`InProcessFleet`: the actor code in this process and thread (tests, debuggers, `--actors 0`).
`ZmqFleet` (fleet.zmq_fleet): actor processes here and actors on other machines, over ZeroMQ.
"""

from __future__ import annotations

from typing import Any, Protocol

from gailkit.actor import Actor
from gailkit.config import EnvConfig, PPOConfig
from gailkit.errors import GailkitError
from gailkit.fragments import Fragment, Weights


class FleetError(GailkitError):
    """No live actor for too long, or actors that cannot start."""


class Fleet(Protocol):
    n_envs: int
    stats: dict[str, float]

    def start(self) -> None: ...

    def collect(self, weights: Weights, n_steps: int) -> list[Fragment]: ...

    def state(self) -> dict[str, Any]: ...

    def load_state(self, state: dict[str, Any]) -> None: ...

    def stop(self) -> None: ...


class InProcessFleet:
    """Zero actor processes: one `Actor` with `n_envs` envs, stepped when `collect` is called."""

    def __init__(self, env_cfg: EnvConfig, ppo_cfg: PPOConfig, normalize_obs: bool, n_envs: int, seed: int):
        self.n_envs = n_envs
        self.stats: dict[str, float] = {}
        self.actor = Actor(env_cfg, ppo_cfg, normalize_obs, actor_id=0, n_envs=n_envs, seed=seed)

    def start(self) -> None:
        self.actor.start()

    def collect(self, weights: Weights, n_steps: int) -> list[Fragment]:
        self.actor.set_weights(weights)
        return [self.actor.sample(n_steps)]

    def state(self) -> dict[str, Any]:
        return {"actors": [self.actor.state()]}

    def load_state(self, state: dict[str, Any]) -> None:
        self.actor.load_state(state["actors"][0])

    def stop(self) -> None:
        self.actor.stop()

    def __enter__(self) -> InProcessFleet:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
