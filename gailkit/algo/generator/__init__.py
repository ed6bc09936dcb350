"""The generator seam: what the learner needs of whatever updates the policy from discriminator rewards.

The learner collects nothing itself: it hands the generator a fragment (`n_steps x n_envs`
transitions of the current or a recent policy, see `gailkit.core.fragments`) with the discriminator's
rewards, and asks for behaviour cloning on the demos. `generator: ppo` (the default) is
stable-baselines3's PPO update (`generator/ppo.py`). Adding one is a module here with a class that
has the methods of `Generator` (and a `from_settings` classmethod), one entry in `GENERATORS`, and
its name in `TrainConfig.generator` (with a section for its own settings); nothing else changes.
"""

from __future__ import annotations

import importlib
from typing import Any, Literal, Protocol

import gymnasium as gym
import numpy as np
import torch as th

from gailkit.config import TrainConfig
from gailkit.core.fragments import Fragment

GENERATORS = {"ppo": "gailkit.algo.generator.ppo:PPOGenerator", "sac": "gailkit.algo.generator.sac:SACGenerator"}


class Generator(Protocol):
    """What the learner calls. `policy` is the SB3 `ActorCriticPolicy` that actors run and export ships."""

    policy: Any
    device: th.device
    gamma: float
    off_policy: bool
    """True: `update` learns from a replay judged through `relabel`, and the discriminator's generator
    samples come from `sample_replay`; False: from this round's fragment and its `rewards`."""

    def update(
        self,
        frag: Fragment,
        rewards: np.ndarray,
        progress_remaining: float,
        terminal_value: float = 0.0,
        train_policy: bool = True,
        relabel: Any = None,
    ) -> dict[str, float]:
        """Learn from `frag` with `rewards` (T, E); `terminal_value` is an absorbing state's value;
        `train_policy=False` trains the critic only. `relabel(obs, acts, next_obs, terminated)` gives the
        current discriminator's rewards (absorbing value included) of any transitions. Returns stats
        for the round's metrics."""
        ...

    def sample_replay(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, ...] | None:
        """`n` (obs, acts, next_obs, terminated) of the generator's replay, or None without one."""
        ...

    def update_normalizer(self, obs: Any) -> None:
        """Merge raw observations into every encoder's running statistics."""
        ...

    def bc_steps(
        self, obs: np.ndarray, acts: np.ndarray, steps: int, batch_size: int, lr: float, rng: np.random.Generator
    ) -> list[float]:
        """`steps` behaviour-cloning steps on (obs, acts); their losses."""
        ...

    def behaviour_clone(
        self,
        obs: np.ndarray,
        acts: np.ndarray,
        epochs: int,
        batch_size: int,
        lr: float,
        rng: np.random.Generator,
        log_std: float | None = None,
    ) -> dict[str, float]:
        """The BC warm start before the first round."""
        ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def choose(settings: TrainConfig, action_space: gym.Space) -> Literal["ppo", "sac"]:
    """The generator `generator: auto` means for this action space (the rule of BENCHMARKS.md, "Where BC
    fails"): ppo, whose wall-clock time to the expert is the shorter one on the runs measured there.
    `sac` needs Box actions, so only an explicit choice gets it."""
    if settings.generator != "auto":
        return settings.generator
    return "ppo"


def make(
    settings: TrainConfig, observation_space: gym.Space, action_space: gym.Space, device: str | th.device
) -> Generator:
    """The generator `settings.generator` names (`GENERATORS`), built from the run's settings."""
    module, _, cls = GENERATORS[choose(settings, action_space)].partition(":")
    return getattr(importlib.import_module(module), cls).from_settings(
        settings, observation_space, action_space, device
    )


__all__ = ["GENERATORS", "Generator", "choose", "make"]
