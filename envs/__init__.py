"""The project's own environments; importing this package registers them with gymnasium.

Installed as `gailkit_envs` (pyproject's package-dir), never as a top-level `envs` that another
project's folder could shadow or be shadowed by; the folder keeps its name in the repository.

`SCRIPTED_EXPERTS[env_id][name]` is a factory `(env) -> policy`, `policy(obs) -> action`, for
experts that are not neural networks (`gailkit demos record --expert NAME`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym

from . import custom_env, pong

ENVS = {
    "CustomEnv": (f"{__name__}.custom_env:CustomEnv", {}),
    "TrafficLight-v0": (f"{__name__}.traffic_light:TrafficLightEnv", {"grid": 1}),  # needs gailkit[sumo]
    "TrafficGrid-v0": (f"{__name__}.traffic_light:TrafficLightEnv", {"grid": 2}),
}


def _max_pressure(env: gym.Env) -> Callable[[Any], Any]:
    return lambda obs: env.unwrapped.max_pressure_action()


def _sumo_controller(kind: str) -> Callable[[gym.Env], Callable[[Any], Any]]:
    """SUMO's own program drives (`controller=kind`); the env reports its choice as info['expert_action']."""

    def factory(env: gym.Env) -> Callable[[Any], Any]:
        return lambda obs: 0

    factory.env_kwargs = {"controller": kind}  # type: ignore[attr-defined]
    return factory


_TRAFFIC = {
    "actuated": _sumo_controller("actuated"),
    "fixed-time": _sumo_controller("fixed"),
    "max-pressure": _max_pressure,
}

SCRIPTED_EXPERTS: dict[str, dict[str, Callable[[gym.Env], Callable[[Any], Any]]]] = {
    "CustomEnv": {"scripted": lambda env: custom_env.expert_action},
    "TrafficLight-v0": _TRAFFIC,
    "TrafficGrid-v0": _TRAFFIC,
    "ALE/Pong-v5": {"scripted": pong.tracker},  # reads the console's RAM (needs gailkit[atari])
}

for _env_id, (_entry_point, _kwargs) in ENVS.items():
    if _env_id not in gym.registry:
        gym.register(id=_env_id, entry_point=_entry_point, kwargs=_kwargs)
