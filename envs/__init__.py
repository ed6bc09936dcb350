"""The project's own environments; importing this package registers them with gymnasium.

`SCRIPTED_EXPERTS[env_id][name]` is a factory `(env) -> policy`, `policy(obs) -> action`, for
experts that are not neural networks (`gailkit demos record --expert NAME`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym

from envs import custom_env

ENVS = {
    "CustomEnv": "envs.custom_env:CustomEnv",
}

SCRIPTED_EXPERTS: dict[str, dict[str, Callable[[gym.Env], Callable[[Any], Any]]]] = {
    "CustomEnv": {"scripted": lambda env: custom_env.expert_action},
}

for _env_id, _entry_point in ENVS.items():
    if _env_id not in gym.registry:
        gym.register(id=_env_id, entry_point=_entry_point)
