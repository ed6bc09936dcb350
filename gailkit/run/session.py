"""`Run`: everything one training run is made of, built from the settings before any file is written.

`Run.prepare` checks the settings, resolves the device and the env, loads and validates the demos, fixes the reward
function and the reference returns, builds the learner and the fleet, and reads the checkpoint to resume from;
nothing is written and nothing is started. `Run.start` starts the fleet and only then creates the run directory (or
cleans and continues it): a start that fails (a busy port, a bad key file) leaves no folder. `Run.stop` always stops the fleet.
"""

from __future__ import annotations

import dataclasses
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch as th

from gailkit import config
from gailkit.algo.discriminator import Discriminator, choose_reward_fn
from gailkit.algo.generator import make as make_generator
from gailkit.algo.generator import resolve as resolve_generator
from gailkit.algo.learner import Learner, expert_data
from gailkit.config import TrainConfig, resolve_obs_stats
from gailkit.core import cpu
from gailkit.core.errors import ConfigError, first_line
from gailkit.data import demos, envs
from gailkit.model import policy
from gailkit.model.spaces import has_images
from gailkit.rollout.fleet import Fleet, make_fleet
from gailkit.run.checkpoint import (
    RANDOM_EPISODES,
    Best,
    CheckpointError,
    References,
    RunState,
    as_trained,
    random_reference,
    rng_state,
    set_rng_state,
)
from gailkit.run.rundir import RunDir


def resolve_device(name: str) -> th.device:
    if name == "auto":
        return th.device("cuda" if th.cuda.is_available() else "cpu")
    try:
        device = th.device(name)
    except (RuntimeError, TypeError, ValueError):
        raise ConfigError(f"'device': unknown device {name!r} (auto, cpu, cuda, cuda:N)") from None
    if device.type not in ("cpu", "cuda"):
        raise ConfigError(f"'device': {name!r} is not supported (auto, cpu, cuda, cuda:N)")
    if device.type == "cuda" and not th.cuda.is_available():
        raise ConfigError(f"'device': {name} asked for, but torch sees no CUDA device (use --device auto or cpu)")
    if device.type == "cuda" and device.index is not None and device.index >= th.cuda.device_count():
        raise ConfigError(f"'device': {name} asked for, but torch sees {th.cuda.device_count()} CUDA device(s)")
    return device


def _restore(learner: Learner, state: RunState, states, log: Callable[[str], None]) -> RunState:
    """Load the newest checkpoint whose learner state fits this run (an edited net_arch, tampered tensors, a
    bad RNG state: the next older one is tried, and each skipped one is said)."""
    while True:
        try:
            learner.load_state_dict(state.learner)
            if not all(th.isfinite(p).all() for p in learner.generator.policy.parameters()):
                raise ValueError("non-finite policy weights")
            saved = rng_state()
            set_rng_state(state.rng)  # only checks that it applies; `Run.start` restores it for real
            set_rng_state(saved)
            return state
        except (KeyError, TypeError, ValueError, IndexError, RuntimeError, AttributeError) as e:
            why = f"it does not fit this run's settings or holds bad values ({type(e).__name__}: {first_line(e, 200)})"
            log(f"gailkit: warning: skipped the checkpoint of round {state.round}: {why}")
        state = next(states)[0]


class Run:
    def __init__(
        self,
        cfg: TrainConfig,
        run_dir: RunDir,
        learner: Learner,
        fleet: Fleet,
        spaces,
        reward_fn: str,
        references: References,
        expert_demos: demos.Demos,
        device: th.device,
        resume_from: RunState | None,
        log: Callable[[str], None],
    ):
        self.cfg, self.dir, self.learner, self.fleet, self.spaces = cfg, run_dir, learner, fleet, spaces
        self.reward_fn, self.references, self.expert_demos, self.device = reward_fn, references, expert_demos, device
        self.resume_from, self.log = resume_from, log
        self._expert_action = envs.observation_expert(cfg.env.id)
        self.best = resume_from.best if resume_from else Best("action_error" if self._expert_action else "return")
        self.last_eval: dict[str, float] = {}
        self.started, self.t_start = False, time.perf_counter()

    @classmethod
    def prepare(cls, cfg: TrainConfig, run_dir: RunDir, *args: Any) -> Run:
        """`_prepare`, and the run folder's lock released if that fails (see `_prepare` for the arguments)."""
        try:
            return cls._prepare(cfg, run_dir, *args)
        except BaseException:
            run_dir.unlock()
            raise

    @classmethod
    def _prepare(
        cls,
        cfg: TrainConfig,
        run_dir: RunDir,
        resume: bool = False,
        log: Callable[[str], None] = print,
        allow_code: bool = True,
        interrupt: threading.Event | None = None,
    ) -> Run:
        cfg.check()
        device = resolve_device(cfg.device)
        if not resume:
            run_dir.check_new()
        if resume and run_dir.is_run():
            run_dir.lock()  # before its checkpoints are read: a second --resume of the same run is refused
        states = run_dir.readable(log=log) if resume else None
        state = next(states)[0] if states is not None else None
        spaces = envs.spaces(cfg.env, allow_code, source=str(run_dir.config) if resume else "the settings file")
        cfg = as_trained(cfg, spaces[0], state and state.learner)
        if state is not None and "obs_stats" not in state.config:  # a run from before obs_stats: its normalizer moved
            cfg = dataclasses.replace(cfg, obs_stats="running")
        limit = cfg.demo_time_limit or cfg.env.max_episode_steps
        how = (cfg.unsafe_pickle, cfg.demo_columns, cfg.demo_merge, limit)  # as demos.load names them
        expert_demos = demos.load(cfg.demos, cfg.env.id, spaces, *how, frame_stack=cfg.env.frame_stack)
        if not expert_demos.has_actions:
            cfg = cfg.observation_only()
        n_acts = len(expert_demos) if expert_demos.has_actions else 0
        whole = expert_demos.n_episodes if n_acts and expert_demos.whole_episodes() else 0
        loose = n_acts > 0 and not whole  # transitions with actions and no whole episode
        cfg = resolve_generator(cfg, spaces[1], expert_demos.has_actions, loose)
        cfg.check()
        frames = has_images(spaces[0], cfg.policy.encoder)
        if (threads := cpu.learner_threads(cfg.threads, frames)) is not None:
            th.set_num_threads(threads)
        bc = cfg.bc.resolve(n_acts, cfg.total_steps, cfg.generator, frames, loose)
        sac = cfg.sac.resolve(cfg.generator, loose)
        cfg = dataclasses.replace(cfg, bc=bc, sac=sac, obs_stats=resolve_obs_stats(cfg.obs_stats, bc.epochs, whole))
        th.manual_seed(cfg.seed)
        np.random.seed(cfg.seed)
        random.seed(cfg.seed)
        rng = np.random.default_rng(cfg.seed)
        if state is not None:
            reward_fn, references = state.reward_fn, state.references
        else:
            terminated_fraction = float(expert_demos.terminated.sum()) / max(1, expert_demos.n_episodes)
            reward_fn = choose_reward_fn(cfg.disc.reward_fn, terminated_fraction)
            episodes = max(RANDOM_EPISODES, cfg.eval_episodes)
            log(
                f"measuring a uniform random policy's return over {episodes} episodes (the low reference of normalized scores)"
            )
            references = run_references(cfg, spaces, expert_demos, allow_code)
        generator = make_generator(cfg, *spaces, device)
        disc = Discriminator(*spaces, cfg.disc, device, reward_fn)
        expert = expert_data(disc, expert_demos.obs, expert_demos.acts, expert_demos.next_obs, expert_demos.terminated)
        if cfg.normalize_obs:
            generator.update_normalizer(expert_demos.obs)
        learner = Learner(cfg, generator, disc, expert, rng)
        if state is not None and states is not None:
            state = _restore(learner, state, states, log)
        fleet = make_fleet(cfg, spaces, interrupt, allow_code, log)
        return cls(cfg, run_dir, learner, fleet, spaces, reward_fn, references, expert_demos, device, state, log)

    def start(self, fleet: bool = True) -> None:
        """Start the fleet (unless `fleet` is false: `start_fleet` later, after a BC warm start of minutes that
        actors would spend on a silent learner), then create or continue the run folder and restore its state."""
        self.t_start = time.perf_counter()
        if fleet:
            self.start_fleet()
        if self.resume_from is not None:
            for path in self.dir.clean():
                self.log(f"gailkit: removed {path}, a temp file of a write that never finished")
            try:
                self.fleet.load_state(self.resume_from.fleet)
            except (KeyError, TypeError, ValueError, IndexError) as e:
                raise CheckpointError(
                    f"the checkpoint's fleet state does not fit this run ({type(e).__name__}: {e})"
                ) from None
            set_rng_state(self.resume_from.rng)
        else:
            self.dir.create(self.cfg)

    def start_fleet(self) -> None:
        self.fleet.start()
        self.started = True

    def stop(self) -> None:
        if self.started:
            self.started = False
            self.fleet.stop()
        self.dir.unlock()

    def state(self) -> RunState:
        return RunState(
            round=self.learner.version,
            env_steps=self.learner.env_steps,
            config=config.to_dict(self.cfg),
            spaces={"observation": demos.space_to_json(self.spaces[0]), "action": demos.space_to_json(self.spaces[1])},
            reward_fn=self.reward_fn,
            references=self.references,
            best=self.best,
            learner=self.learner.state_dict(),
            fleet=self.fleet.state(),
            rng=rng_state(),
        )

    def save(self, which: str = "round") -> Any:
        return self.dir.save(self.state(), which)

    def behaviour_clone(self) -> dict[str, float]:
        """The BC warm start of a new run, announced first (it can take a while on large demos)."""
        if self.cfg.bc.epochs and self.expert_demos.has_actions:
            self.log(
                f"behaviour cloning: {self.cfg.bc.epochs} epochs over {len(self.expert_demos):,} demo transitions ..."
            )
        return self.learner.behaviour_clone()

    def collect_and_learn(self) -> dict[str, float]:
        """One GAIL round: the fleet collects with the current weights, the learner learns; every stat of both."""
        t0 = time.perf_counter()
        frags = self.fleet.collect(self.learner.weights(), self.cfg.fragment_steps)
        stats = {"time/collect_s": time.perf_counter() - t0, **self.fleet.stats, **self.learner.round(frags)}
        stats["time/round_s"] = time.perf_counter() - t0
        return stats

    def due(self, setting: int, auto_count: int) -> bool:
        """Whether an event every `setting` rounds (-1: about `auto_count` in the run) falls on this round, or it is the last."""
        every = self.cfg.every(setting, auto_count)
        return self.learner.env_steps >= self.target_steps or (every > 0 and self.learner.version % every == 0)

    def evaluate(self, stats: dict[str, float]) -> tuple[bool, bool]:
        """When due (`eval_every`), deterministic episodes on fixed seeds, added to `stats`; `best` updated.
        Returns (evaluated, a new best)."""
        if not self.due(self.cfg.eval_every, 25):
            return False, False
        t0 = time.perf_counter()
        pol = self.learner.generator.policy
        pol.set_training_mode(False)
        out = envs.run_episodes(
            policy.deterministic_actor(pol),
            self.cfg.env,
            self.cfg.eval_episodes,
            self.references.random_seed,
            self._expert_action,
        )
        self.last_eval = {f"eval/{k}": v for k, v in out.items() if k in ("return_mean", "return_std", "action_error")}
        normalized = self.references.normalized(out["return_mean"])
        if normalized is not None:
            self.last_eval["eval/normalized"] = normalized
        stats.update(self.last_eval, **{"time/eval_s": time.perf_counter() - t0})
        value = float(out["action_error"] if self.best.metric == "action_error" else out["return_mean"])
        if not self.best.beaten_by(value):
            return True, False
        self.best.value, self.best.round = value, self.learner.version
        return True, True

    def summary(self, interrupted: bool) -> dict[str, Any]:
        refs, learner = self.references, self.learner
        return {
            "run_dir": str(self.dir),
            "rounds": learner.version,
            "env_steps": learner.env_steps,
            "interrupted": interrupted,
            "expert_return": refs.expert_return,
            "expert_source": refs.expert_source,
            "random_return": refs.random_return,
            "reward_fn": self.reward_fn,
            "seconds": time.perf_counter() - self.t_start,
            "best": self.best.value,
            "best_round": self.best.round,
            **{k.split("/")[1]: v for k, v in self.last_eval.items()},
        }

    @property
    def target_steps(self) -> int:
        """`total_steps` rounded up to whole rounds."""
        return self.cfg.total_rounds * self.cfg.round_steps


def run_references(cfg: TrainConfig, spaces, expert_demos: demos.Demos, allow_code: bool) -> References:
    given = (cfg.expert_return, "--expert-return") if cfg.expert_return is not None else None
    expert_return, source = given or demos.expert_reference(expert_demos)
    episodes, seed = max(RANDOM_EPISODES, cfg.eval_episodes), cfg.seed + 1_000_000
    return random_reference(cfg.env, spaces[1], episodes, seed, allow_code, expert_return, source)


__all__ = ["Run", "resolve_device", "run_references"]
