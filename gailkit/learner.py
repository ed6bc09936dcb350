"""One GAIL round: fragments of policy v -> rewards -> PPO update -> discriminator updates -> v + 1.

No sockets, no files: the learner gets fragments from whoever calls `round()` (a fleet, a test).
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import torch as th

from gailkit import fragments as fragments_mod
from gailkit import policy
from gailkit.config import TrainConfig
from gailkit.discriminator import Discriminator
from gailkit.fragments import Fragment, Weights
from gailkit.generator import Generator


@dataclasses.dataclass
class ExpertData:
    """Expert transitions, preprocessed for the discriminator once, on the learner's device."""

    inputs: th.Tensor
    """(N, in_size) discriminator inputs."""
    n: int


class Learner:
    def __init__(self, cfg: TrainConfig, generator: Generator, discriminator: Discriminator,
                 expert: ExpertData, rng: np.random.Generator):
        self.cfg, self.generator, self.disc, self.expert, self.rng = cfg, generator, discriminator, expert, rng
        self.version = 0
        self.env_steps = 0

    def weights(self) -> Weights:
        return policy.get_weights(self.generator.policy, self.version)

    def round(self, frags: list[Fragment]) -> dict[str, float]:
        """Train on fragments collected with the current version; returns `section/key` stats."""
        lag = self.cfg.max_policy_lag
        stale = [f.policy_version for f in frags if not self.version - lag <= f.policy_version <= self.version]
        if stale:
            raise ValueError(f"fragments of versions {stale} given to learner at version {self.version} (max lag {lag})")
        frag = fragments_mod.stack(frags)
        t, e = frag.n_steps, frag.n_envs
        stats: dict[str, float] = {"actors/policy_lag": float(self.version - min(f.policy_version for f in frags))}

        start = time.perf_counter()
        flat = lambda a: a.reshape(t * e, *a.shape[2:])  # noqa: E731
        acts = policy.env_action(self.generator.policy.action_space, flat(frag.acts))
        gen_inputs = self.disc.preprocess(flat(frag.obs), acts, flat(frag.next_obs))
        rewards = self.disc.reward(gen_inputs)
        stats["disc/reward_mean"] = float(rewards.mean())
        stats["time/reward_s"] = time.perf_counter() - start

        start = time.perf_counter()
        progress = max(0.0, 1.0 - self.env_steps / max(1, self.cfg.total_steps))
        stats.update(self.generator.update(frag, rewards.cpu().numpy().reshape(t, e), progress))
        # Normalizer statistics move after the update, so this round's PPO ratio used the
        # normalization the actors used; the new statistics ship with version v + 1.
        policy.normalizer(self.generator.policy).update(th.as_tensor(flat(frag.obs)))
        stats["time/ppo_s"] = time.perf_counter() - start

        start = time.perf_counter()
        disc_stats: list[dict[str, float]] = []
        batch = self.cfg.disc.demo_batch_size
        for _ in range(self.cfg.disc.n_disc_updates_per_round):
            exp_idx = th.as_tensor(self.rng.integers(0, self.expert.n, batch), device=self.disc.device)
            gen_idx = th.as_tensor(self.rng.integers(0, t * e, batch), device=self.disc.device)
            disc_stats.append(self.disc.train_step(self.expert.inputs[exp_idx], gen_inputs[gen_idx]))
        for key in disc_stats[0] if disc_stats else []:
            stats[key] = float(np.mean([s[key] for s in disc_stats]))
        stats["time/disc_s"] = time.perf_counter() - start

        self.env_steps += t * e
        self.version += 1
        if len(frag.episode_returns):
            stats["rollout/ep_rew_mean"] = float(np.mean(frag.episode_returns))
            stats["rollout/ep_len_mean"] = float(np.mean(frag.episode_lengths))
        return stats
