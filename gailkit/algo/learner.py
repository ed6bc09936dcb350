"""One GAIL round: fragments of policy v -> rewards -> generator update -> discriminator updates -> v + 1.

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

import concurrent.futures
import contextlib
import dataclasses
import time
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch as th

from gailkit.algo.discriminator import Batch, Discriminator
from gailkit.algo.generator import Generator
from gailkit.config import TrainConfig, resolve_obs_stats
from gailkit.core import fragments as fragments_mod
from gailkit.core import obs as obs_tree
from gailkit.core.errors import GailkitError
from gailkit.core.fragments import Fragment, Weights
from gailkit.model import policy, spaces


class TrainingDiverged(GailkitError):
    """The policy's weights stopped being finite numbers."""


@dataclasses.dataclass
class ExpertData:
    """Expert transitions as the discriminator takes them (on the learner's device), and for BC.

    `batch`: the N transitions, then K absorbing rows (one per terminated episode when absorbing
    states are on). `obs` (N, *obs_shape) and `acts` (N, *act_shape, or None for demos without
    actions) stay as numpy arrays.
    """

    batch: Batch
    obs: obs_tree.Obs
    acts: np.ndarray | None


def expert_data(
    disc: Discriminator, obs: Any, acts: np.ndarray | None, next_obs: Any, terminated: np.ndarray
) -> ExpertData:
    env_acts = None if acts is None else policy.clipped(disc.action_space, acts)
    terminated = np.asarray(terminated, bool)
    if env_acts is None and disc.cfg.use_action:
        raise ValueError("a discriminator on actions needs demos with actions")
    b = with_absorbing_rows(disc, transitions(disc, obs, env_acts, next_obs, terminated), terminated)
    return ExpertData(b, obs_tree.asarray(obs), None if acts is None else np.asarray(acts))


def transitions(disc: Discriminator, obs: Any, acts: Any, next_obs: Any, terminated: np.ndarray) -> Batch:
    """Transitions as a discriminator batch; with absorbing states on, a terminated one leads to the
    absorbing state (its next-absorbing flag is set)."""
    return disc.batch(obs, acts, next_obs, None, terminated if disc.cfg.absorbing else None)


def with_absorbing_rows(disc: Discriminator, b: Batch, terminated: np.ndarray) -> Batch:
    """`b` and, with absorbing states on, one absorbing self-loop row per terminated transition."""
    if disc.cfg.absorbing and terminated.any():
        return Batch.cat([b, disc.absorbing(int(terminated.sum()))])
    return b


@contextlib.contextmanager
def _timed(stats: dict[str, float], key: str) -> Iterator[None]:
    start = time.perf_counter()
    yield
    stats[key] = time.perf_counter() - start


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
        frames = spaces.has_images(discriminator.observation_space, cfg.policy.encoder)
        bc = cfg.bc.resolve(n_demos, cfg.total_steps, cfg.generator, frames)  # auto (-1): the run resolved it first
        obs_stats = resolve_obs_stats(cfg.obs_stats, bc.epochs, 0)  # likewise; episodes unknown here
        cfg = dataclasses.replace(cfg, bc=bc, sac=cfg.sac.resolve(cfg.generator, loose=False), obs_stats=obs_stats)
        self.cfg, self.generator, self.disc, self.expert, self.rng = cfg, generator, discriminator, expert, rng
        self.moves_normalizer = cfg.normalize_obs and cfg.obs_stats == "running"
        """Whether rounds that train the policy merge its observations into the normalizer (`obs_stats`)."""
        self.version = 0
        self.env_steps = 0
        self.replay: list[Batch] = []  # generator transitions of earlier rounds (disc.replay_rounds)
        self._thread: concurrent.futures.ThreadPoolExecutor | None = None  # the discriminator's, on-policy

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
        frag = self._stack(frags)
        stats = {"actors/policy_lag": float(self.version - min(f.policy_version for f in frags))}
        stats["data/round_bytes"] = float(obs_tree.nbytes(frag.obs) + obs_tree.nbytes(frag.next_obs) + frag.acts.nbytes)
        with _timed(stats, "time/reward_s"):  # the rewards on the second thread, the critic's values beside them
            judged = self._pool().submit(self._judge, frag, stats)
            try:
                self.generator.prepare(frag)
            finally:
                concurrent.futures.wait([judged])  # never left running on an error
            gen, rewards, terminal_value = judged.result()
        # On-policy, the discriminator's steps need nothing of the generator's update (its rewards are taken): they
        # run beside it on a second thread (minibatches drawn first, here), so a second core takes them. Off-policy,
        # they draw from the replay the update fills and the update relabels with the discriminator: one, then the other.
        beside = None if self.generator.off_policy else self._pool().submit(self._disc_steps, self._draws(gen))
        try:
            with _timed(stats, "time/ppo_s"):
                stats.update(self._update_generator(frag, rewards, terminal_value))
                stats.update(self._clone_steps())
                if self._train_policy and self.moves_normalizer:  # a critic-only round leaves the clone as it is
                    self._update_normalizer(frag)
        except BaseException:
            concurrent.futures.wait([beside] if beside is not None else [])  # never left running on an error
            raise
        stats.update(beside.result() if beside is not None else self._disc_steps(self._draws(gen)))
        if self.cfg.disc.replay_rounds:
            self.replay = [*self.replay, gen][-self.cfg.disc.replay_rounds :]
        self._advance(frag, stats)
        return stats

    def _pool(self) -> concurrent.futures.ThreadPoolExecutor:
        self._thread = self._thread or concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="gailkit-disc")
        return self._thread

    def _stack(self, frags: list[Fragment]) -> Fragment:
        """One fragment of all, once every one was collected within the allowed policy lag."""
        lag = self.cfg.fleet.max_policy_lag
        stale = [f.policy_version for f in frags if not self.version - lag <= f.policy_version <= self.version]
        if stale:
            raise ValueError(f"fragments of versions {stale} for learner version {self.version} (max lag {lag})")
        return fragments_mod.stack(frags)

    def _judge(self, frag: Fragment, stats: dict[str, float]) -> tuple[Batch, np.ndarray, float]:
        """The round's transitions as a discriminator batch (plus absorbing rows), their rewards (T, E),
        and the absorbing state's value for terminated steps."""
        t, e = frag.n_steps, frag.n_envs
        acts = policy.env_action(self.disc.action_space, _flat(frag.acts))
        terminated = _flat(frag.terminated)
        gen = transitions(self.disc, _flat(frag.obs), acts, _flat(frag.next_obs), terminated)
        rewards = self.disc.reward(gen)
        terminal_value = 0.0
        if self.disc.cfg.absorbing:
            r_abs = float(self.disc.reward(self.disc.absorbing(1))[0])
            terminal_value = r_abs / max(1.0 - self.generator.gamma, 1e-3)
            stats["disc/reward_absorbing"] = r_abs
            gen = with_absorbing_rows(self.disc, gen, terminated)
        stats["disc/reward_mean"] = float(rewards.mean())
        stats["disc/reward_std"] = float(rewards.std()) if len(rewards) > 1 else 0.0
        return gen, rewards.cpu().numpy().reshape(t, e), terminal_value

    def _update_generator(self, frag: Fragment, rewards: np.ndarray, terminal_value: float) -> dict[str, float]:
        progress = max(0.0, 1.0 - self.env_steps / max(1, self.cfg.total_steps))
        relabel = self._relabel if self.generator.off_policy else None
        if self.expert.acts is not None:
            self.generator.anchor(self.expert.obs, self.expert.acts, self._bc_decay())
        return self.generator.update(frag, rewards, progress, terminal_value, self._train_policy, relabel)

    def _relabel(self, obs: Any, acts: np.ndarray, next_obs: Any, terminated: np.ndarray) -> th.Tensor:
        """(N,) the current discriminator's rewards of replayed transitions; a terminated one also earns
        the absorbing state's discounted value, gamma * r_a / (1 - gamma) (its target then stops there)."""
        rewards = self.disc.reward(transitions(self.disc, obs, acts, next_obs, terminated))
        if self.disc.cfg.absorbing and terminated.any():
            gamma = self.generator.gamma
            r_abs = self.disc.reward(self.disc.absorbing(1))[0]
            ended = th.as_tensor(terminated, device=rewards.device).to(rewards.dtype)
            rewards = rewards + ended * gamma * r_abs / max(1.0 - gamma, 1e-3)
        return rewards

    def _replayed(self, n: int) -> Batch | None:
        """`n` generator transitions of an off-policy generator's replay as a discriminator batch, absorbing
        rows in their share (one per terminated transition drawn)."""
        drawn = self.generator.sample_replay(n, self.rng)
        if drawn is None:
            return None
        obs, acts, next_obs, terminated = drawn
        b = with_absorbing_rows(self.disc, transitions(self.disc, obs, acts, next_obs, terminated), terminated)
        if len(b) > n:  # absorbing rows joined: n of all, each as likely
            b = b[th.as_tensor(self.rng.permutation(len(b))[:n], device=self.disc.device)]
        return b

    @property
    def _train_policy(self) -> bool:
        """False in the critic warm-up rounds (the cloned policy stays as it is)."""
        return self.version >= self.cfg.bc.critic_warmup_rounds

    def _clone_steps(self) -> dict[str, float]:
        """The BC term kept during GAIL (`bc.steps_per_round`), its learning rate annealed to 0."""
        bc = self.cfg.bc
        if not bc.steps_per_round or self.expert.acts is None or not self._train_policy:
            return {}
        decay = self._bc_decay()
        if decay <= 0:
            return {}
        losses = self.generator.bc_steps(
            self.expert.obs, self.expert.acts, bc.steps_per_round, bc.batch_size, bc.learning_rate * decay, self.rng
        )
        return {"bc/loss": float(np.mean(losses))}

    def _bc_decay(self) -> float:
        """What is left of the BC terms' strength: 1 falling linearly to 0 over `bc.anneal_steps` (1 if 0)."""
        anneal = self.cfg.bc.anneal_steps
        return 1.0 if not anneal else max(0.0, 1.0 - self.env_steps / anneal)

    def _update_normalizer(self, frag: Fragment) -> None:
        """Normalizer statistics move after the update, so this round's PPO ratio used the
        normalization the actors used; the new statistics ship with version v + 1."""
        self.generator.update_normalizer(_flat(frag.obs))

    def _advance(self, frag: Fragment, stats: dict[str, float]) -> None:
        self.env_steps += frag.n_steps * frag.n_envs
        self.version += 1
        if len(frag.episode_returns):
            stats["rollout/ep_rew_mean"] = float(np.mean(frag.episode_returns))
            stats["rollout/ep_len_mean"] = float(np.mean(frag.episode_lengths))

    def behaviour_clone(self) -> dict[str, float]:
        """BC warm start from the expert's (obs, acts) (`bc.epochs`; nothing without actions)."""
        bc = self.cfg.bc
        if not bc.epochs or self.expert.acts is None:
            return {}
        return self.generator.behaviour_clone(
            self.expert.obs, self.expert.acts, bc.epochs, bc.batch_size, bc.learning_rate, self.rng, bc.log_std
        )

    def _draws(self, gen: Batch) -> list[tuple[th.Tensor, Batch, th.Tensor | None]]:
        """Each discriminator step's rows: expert indices, and generator indices into this round and the
        kept rounds (`disc.replay_rounds`); off-policy, the generator's rows come from its replay instead."""
        d = self.cfg.disc
        pool = Batch.cat([*self.replay, gen]) if self.replay else gen
        draws: list[tuple[th.Tensor, Batch, th.Tensor | None]] = []
        for _ in range(d.n_disc_updates_per_round):
            exp_idx = th.as_tensor(
                self.rng.integers(0, len(self.expert.batch), d.demo_batch_size), device=self.disc.device
            )
            replayed = self._replayed(d.demo_batch_size) if self.generator.off_policy else None
            if replayed is not None:
                draws.append((exp_idx, replayed, None))
                continue
            gen_idx = th.as_tensor(self.rng.integers(0, len(pool), d.demo_batch_size), device=self.disc.device)
            draws.append((exp_idx, pool, gen_idx))
        return draws

    def _disc_steps(self, draws: list[tuple[th.Tensor, Batch, th.Tensor | None]]) -> dict[str, float]:
        start = time.perf_counter()
        out = [self.disc.train_step(self.expert.batch[e], g if i is None else g[i]) for e, g, i in draws]
        stats = {key: float(np.mean([s[key] for s in out])) for key in (out[0] if out else {})}
        return {**stats, "time/disc_s": time.perf_counter() - start}

    def state_dict(self) -> dict[str, Any]:
        return {
            "generator": self.generator.state_dict(),
            "discriminator": self.disc.state_dict(),
            "version": self.version,
            "env_steps": self.env_steps,
            "rng": self.rng.bit_generator.state,
            "replay": [b.state() for b in self.replay],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.generator.load_state_dict(state["generator"])
        self.disc.load_state_dict(state["discriminator"])
        self.version, self.env_steps = int(state["version"]), int(state["env_steps"])
        self.rng.bit_generator.state = state["rng"]
        try:
            self.replay = [Batch.from_state(b, self.disc.device) for b in state.get("replay", [])]
        except ValueError:
            warnings.warn("the checkpoint's discriminator replay is of an older gailkit; it starts empty", stacklevel=2)
            self.replay = []


_flat = obs_tree.merge_steps  # (T, E, ...) -> (T * E, ...), every entry of a Dict observation
