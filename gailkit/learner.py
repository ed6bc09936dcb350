"""One GAIL round: fragments of policy v -> rewards -> PPO update -> discriminator updates -> v + 1.

No sockets, no files: the learner gets fragments from whoever calls `round()` (a fleet, a test),
and declares everything it must keep across a restart in `state_dict()` (as SB3's algorithms
declare what they save).

Terminations (with `disc.absorbing`, after DAC, Kostrikov et al. 2019): a terminated transition
leads to an absorbing state, a self-loop whose reward r_a the discriminator learns like any other
(expert pools hold one absorbing row per terminated expert episode, generator pools one per
terminated generator transition). The PPO target of a terminated step then adds the absorbing
state's value, gamma * r_a / (1 - gamma), instead of nothing: ending an episode is worth what
the expert's data says it is worth, whatever the sign of the reward function.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import gymnasium as gym
import numpy as np
import torch as th

from gailkit import fragments as fragments_mod
from gailkit import policy
from gailkit.config import TrainConfig
from gailkit.discriminator import Discriminator
from gailkit.errors import GailkitError
from gailkit.fragments import Fragment, Weights
from gailkit.generator import Generator


class TrainingDiverged(GailkitError):
    """The policy's weights stopped being finite numbers."""


@dataclasses.dataclass
class ExpertData:
    """Expert transitions as discriminator inputs (on the learner's device), and for BC.

    `inputs` (N + K, in_size): the N transitions, then K absorbing rows (one per terminated
    episode when absorbing states are on). `obs` (N, *obs_shape) and `acts` (N, *act_shape, or
    None for demos without actions) stay as numpy arrays.
    """

    inputs: th.Tensor
    obs: np.ndarray
    acts: np.ndarray | None


def absorbing_rows(disc: Discriminator, n: int) -> th.Tensor:
    """(n, in_size) inputs of the absorbing state's self-loop."""
    shape = disc.features.observation_space.shape or ()
    zeros = np.zeros((n, *shape), np.float32)
    act_space = disc.features.action_space
    acts = (
        np.zeros((n, *(act_space.shape or ())), act_space.dtype)
        if isinstance(act_space, gym.spaces.Box)
        else np.full(n, getattr(act_space, "start", 0), np.int64)
    )
    flags = np.ones(n, bool)
    return disc.preprocess(zeros, acts, zeros, flags, flags)


def expert_data(
    disc: Discriminator, obs: np.ndarray, acts: np.ndarray | None, next_obs: np.ndarray, terminated: np.ndarray
) -> ExpertData:
    env_acts = None if acts is None else policy.env_action(disc.features.action_space, acts)
    terminated = np.asarray(terminated, bool)
    x = disc.preprocess(obs, env_acts, next_obs, None, terminated if disc.cfg.absorbing else None)
    if disc.cfg.absorbing and terminated.any():
        x = th.cat([x, absorbing_rows(disc, int(terminated.sum()))])
    return ExpertData(x, np.asarray(obs), None if acts is None else np.asarray(acts))


class Learner:
    def __init__(
        self,
        cfg: TrainConfig,
        generator: Generator,
        discriminator: Discriminator,
        expert: ExpertData,
        rng: np.random.Generator,
    ):
        n_demos = 0 if expert.acts is None else len(expert.acts)
        cfg = dataclasses.replace(cfg, bc=cfg.bc.resolve(n_demos, cfg.total_steps))  # auto (-1) settings, once
        self.cfg, self.generator, self.disc, self.expert, self.rng = cfg, generator, discriminator, expert, rng
        self.version = 0
        self.env_steps = 0
        self.replay: list[th.Tensor] = []  # generator inputs of earlier rounds (disc.replay_rounds)

    def weights(self) -> Weights:
        w = policy.get_weights(self.generator.policy, self.version)
        bad = [k for k, v in w.tensors.items() if v.dtype.kind == "f" and not np.isfinite(v).all()]
        if bad:
            raise TrainingDiverged(
                f"round {self.version}: the policy's weights hold NaN or inf ({bad[0]}); "
                "lower ppo.learning_rate or raise ppo.batch_size, and resume from a checkpoint"
            )
        return w

    def round(self, frags: list[Fragment]) -> dict[str, float]:
        """Train on fragments collected with the current version; returns `section/key` stats."""
        lag = self.cfg.fleet.max_policy_lag
        stale = [f.policy_version for f in frags if not self.version - lag <= f.policy_version <= self.version]
        if stale:
            raise ValueError(
                f"fragments of versions {stale} given to learner at version {self.version} (max lag {lag})"
            )
        frag = fragments_mod.stack(frags)
        t, e = frag.n_steps, frag.n_envs
        stats: dict[str, float] = {"actors/policy_lag": float(self.version - min(f.policy_version for f in frags))}

        start = time.perf_counter()
        flat = lambda a: a.reshape(t * e, *a.shape[2:])  # noqa: E731
        acts = policy.env_action(self.generator.policy.action_space, flat(frag.acts))
        absorbing = self.disc.cfg.absorbing
        terminated = flat(frag.terminated)
        gen_inputs = self.disc.preprocess(
            flat(frag.obs), acts, flat(frag.next_obs), None, terminated if absorbing else None
        )
        rewards = self.disc.reward(gen_inputs)
        terminal_value = 0.0
        if absorbing:
            r_abs = float(self.disc.reward(absorbing_rows(self.disc, 1))[0])
            terminal_value = r_abs / max(1.0 - self.cfg.ppo.gamma, 1e-3)
            stats["disc/reward_absorbing"] = r_abs
            if terminated.any():
                gen_inputs = th.cat([gen_inputs, absorbing_rows(self.disc, int(terminated.sum()))])
        stats["disc/reward_mean"] = float(rewards.mean())
        stats["disc/reward_std"] = float(rewards.std()) if len(rewards) > 1 else 0.0
        stats["time/reward_s"] = time.perf_counter() - start

        start = time.perf_counter()
        progress = max(0.0, 1.0 - self.env_steps / max(1, self.cfg.total_steps))
        train_policy = self.version >= self.cfg.bc.critic_warmup_rounds
        stats.update(
            self.generator.update(frag, rewards.cpu().numpy().reshape(t, e), progress, terminal_value, train_policy)
        )
        bc = self.cfg.bc
        if bc.steps_per_round and self.expert.acts is not None and train_policy:
            decay = 1.0 if not bc.anneal_steps else max(0.0, 1.0 - self.env_steps / bc.anneal_steps)
            if decay > 0:
                losses = self.generator.bc_steps(
                    self.expert.obs,
                    self.expert.acts,
                    bc.steps_per_round,
                    bc.batch_size,
                    bc.learning_rate * decay,
                    self.rng,
                )
                stats["bc/loss"] = float(np.mean(losses))
        # Normalizer statistics move after the update, so this round's PPO ratio used the
        # normalization the actors used; the new statistics ship with version v + 1.
        policy.normalizer(self.generator.policy).update(th.tensor(flat(frag.obs)))
        stats["time/ppo_s"] = time.perf_counter() - start

        start = time.perf_counter()
        stats.update(self._train_discriminator(gen_inputs))
        stats["time/disc_s"] = time.perf_counter() - start

        self.env_steps += t * e
        self.version += 1
        if len(frag.episode_returns):
            stats["rollout/ep_rew_mean"] = float(np.mean(frag.episode_returns))
            stats["rollout/ep_len_mean"] = float(np.mean(frag.episode_lengths))
        return stats

    def behaviour_clone(self) -> dict[str, float]:
        """BC warm start from the expert's (obs, acts) (`bc.epochs`; nothing without actions)."""
        bc = self.cfg.bc
        if not bc.epochs or self.expert.acts is None:
            return {}
        return self.generator.behaviour_clone(
            self.expert.obs, self.expert.acts, bc.epochs, bc.batch_size, bc.learning_rate, self.rng, bc.log_std
        )

    def _train_discriminator(self, gen_inputs: th.Tensor) -> dict[str, float]:
        d = self.disc.cfg
        pool = th.cat([*self.replay, gen_inputs]) if self.replay else gen_inputs
        out: list[dict[str, float]] = []
        for _ in range(d.n_disc_updates_per_round):
            exp_idx = th.as_tensor(
                self.rng.integers(0, len(self.expert.inputs), d.demo_batch_size), device=self.disc.device
            )
            gen_idx = th.as_tensor(self.rng.integers(0, len(pool), d.demo_batch_size), device=self.disc.device)
            out.append(self.disc.train_step(self.expert.inputs[exp_idx], pool[gen_idx]))
        if d.replay_rounds:
            self.replay = [*self.replay, gen_inputs][-d.replay_rounds :]
        return {key: float(np.mean([s[key] for s in out])) for key in (out[0] if out else {})}

    def state_dict(self) -> dict[str, Any]:
        return {
            "generator": self.generator.state_dict(),
            "discriminator": self.disc.state_dict(),
            "version": self.version,
            "env_steps": self.env_steps,
            "rng": self.rng.bit_generator.state,
            "replay": [x.cpu() for x in self.replay],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.generator.load_state_dict(state["generator"])
        self.disc.load_state_dict(state["discriminator"])
        self.version, self.env_steps = int(state["version"]), int(state["env_steps"])
        self.rng.bit_generator.state = state["rng"]
        self.replay = [x.to(self.disc.device) for x in state.get("replay", [])]
