"""The generator seam: what the learner needs of whatever updates the policy from discriminator rewards.

The learner collects nothing itself: it hands the generator a fragment (`n_steps x n_envs`
transitions of the current or a recent policy, see `gailkit.core.fragments`) with the discriminator's
rewards, and asks for behaviour cloning on the demos. `generator: ppo` (the default) is
stable-baselines3's PPO update (`generator/ppo.py`). Adding one is a module here with a class that
has the methods of `Generator` (and a `from_settings` classmethod), one entry in `GENERATORS`, and
its name in `TrainConfig.generator` (with a section for its own settings); nothing else changes.
"""

from __future__ import annotations

import dataclasses
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

    def prepare(self, frag: Fragment) -> None:
        """Whatever `update(frag, ...)` needs that the rewards do not change (PPO: the critic's values),
        computed while the learner's second thread takes the discriminator's rewards; a no-op for others."""
        ...

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
        self, obs: Any, acts: np.ndarray, steps: int, batch_size: int, lr: float, rng: np.random.Generator
    ) -> list[float]:
        """`steps` behaviour-cloning steps on (obs, acts); their losses."""
        ...

    def anchor(self, obs: Any, acts: np.ndarray, decay: float) -> None:
        """The expert's (obs, acts) for a BC term inside the generator's own loss in the coming updates, at
        `decay` (1 falling to 0) of its configured weight; a no-op for a generator without one."""
        ...

    def behaviour_clone(
        self,
        obs: Any,
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


OBSERVATION_ONLY: Literal["ppo", "sac"] = "sac"
"""`generator: auto` for demos without actions (BENCHMARKS.md, "Where BC fails", protocol (d), 4 whole
episodes without actions): PPO with the state-only discriminator stayed at the random policy's level
(0.06 of the expert on Hopper at 100k env steps, 0.05 on HalfCheetah at 200k), where SAC reached 0.9 on
every run measured (3 seeds each: Hopper and HalfCheetah within 60k-160k, Walker2d and Ant within 300k).
No step time makes a generator that does not get there the faster one, so the env's step is not timed."""


LOOSE_TRANSITIONS: Literal["ppo", "sac"] = "sac"
"""`generator: auto` for demos with actions but no whole episode (subsampled or cut files; BENCHMARKS.md,
"Where BC fails", protocol (c), 4 episodes every 20th transition, 200 transitions; 3 seeds per env): PPO
reached 0.9 of the expert within 100k env steps (Walker2d: 200k) on 4 of 12 runs (Hopper 3, Ant 1,
HalfCheetah and Walker2d none), SAC with its auto settings for such data (a BC warm start and TD3+BC's
term, `SACConfig.resolve`) on 11 of 12 (Ant seed 0 ended at 0.84). As for `OBSERVATION_ONLY`, the env's
step is not timed: PPO's cheaper step does not make it the faster one where it mostly does not get there.
Whole episodes: `WHOLE_EPISODES`."""


WHOLE_EPISODES: Literal["ppo", "sac"] = "ppo"
"""`generator: auto` for demos of whole episodes with actions, whatever one env step costs (BENCHMARKS.md, "Where
BC fails": "(a) 25 full episodes with SAC" and "The BC term: kept or annealed"). PPO with its kept BC term
needed fewer env steps to 0.9 of the expert than SAC: from 25 whole episodes at its first evaluations (8k-33k on
every run of 12), where plain SAC took 89,856 and 79,872 on Hopper and HalfCheetah and was still short of it at
100k on Walker2d (0.69) and Ant (best 0.36; seed 0 of each); from one whole episode sooner on 9 of the 12 runs
measured with both on the same file (SAC on 3: Hopper seed 2, Walker2d seeds 1 and 2). A generator
that needs fewer steps and costs less per step (PPO's update about 0.2 ms an env step on 2 CPU cores, SAC's about
12 ms) is the faster one however long the env's step takes, so the env is not timed. (Until 2026-12-07 `auto`
took sac from 50 ms a step, a rule measured on loose transitions, which `LOOSE_TRANSITIONS` now covers; with
50 ms steps SAC would have been the faster one on 2 of those 12 runs.)"""


def choose(
    settings: TrainConfig, action_space: gym.Space, has_actions: bool = True, loose: bool = False
) -> Literal["ppo", "sac"]:
    """The generator `settings.generator` means: itself, or for `auto`, sac when the actions are a bounded
    Box and the demos have no actions (`OBSERVATION_ONLY`) or are `loose` transitions with actions and no
    whole episode (`LOOSE_TRANSITIONS`); for whole episodes with actions `WHOLE_EPISODES` (ppo); ppo for
    any other action space."""
    if settings.generator != "auto":
        return settings.generator
    box = action_space if isinstance(action_space, gym.spaces.Box) else None
    bounded = box is not None and bool(np.isfinite(box.low).all() and np.isfinite(box.high).all())
    if not bounded:
        return "ppo"
    if not has_actions:
        return OBSERVATION_ONLY
    return LOOSE_TRANSITIONS if loose else WHOLE_EPISODES


def resolve(
    settings: TrainConfig, action_space: gym.Space, has_actions: bool = True, loose: bool = False
) -> TrainConfig:
    """The settings with `generator: auto` chosen (`choose`; `loose`: demos with actions and no whole
    episode) and the discriminator's settings that depend on it filled in: `disc.grad_penalty: -1` is 10
    with sac (DAC's), 0 with ppo."""
    name = choose(settings, action_space, has_actions, loose)
    gp = settings.disc.grad_penalty
    disc = dataclasses.replace(settings.disc, grad_penalty=(10.0 if name == "sac" else 0.0) if gp == -1 else gp)
    return dataclasses.replace(settings, generator=name, disc=disc)


def make(
    settings: TrainConfig, observation_space: gym.Space, action_space: gym.Space, device: str | th.device
) -> Generator:
    """The generator `settings.generator` names (`GENERATORS`), built from the run's settings."""
    module, _, cls = GENERATORS[choose(settings, action_space)].partition(":")
    return getattr(importlib.import_module(module), cls).from_settings(
        settings, observation_space, action_space, device
    )


__all__ = ["GENERATORS", "Generator", "choose", "make", "resolve"]
