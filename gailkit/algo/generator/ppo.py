"""The PPO generator: stable-baselines3's PPO update, fed from fragments instead of its own rollouts.

The only module that touches SB3 internals: it writes SB3's `RolloutBuffer` arrays directly from
a (stacked) fragment, computes GAE with SB3's own `compute_returns_and_advantage`, and runs
`PPO.train()`. Values come from the learner's current critic in one batched pass (`prepare`, while the
learner's second thread takes the discriminator's rewards).
"""

from __future__ import annotations

import copy
from typing import Any

import gymnasium as gym
import numpy as np
import torch as th

from gailkit.algo.generator.common import StatsLogger, bc_tensors, warm_start
from gailkit.algo.generator.reward_scale import RewardScale
from gailkit.config import PolicyConfig, PPOConfig, TrainConfig
from gailkit.core import obs as obs_tree
from gailkit.core.fragments import Fragment
from gailkit.model import policy, spaces


class PPOGenerator:
    """Owns the policy the learner trains and SB3's PPO around it (a `gailkit.algo.generator.Generator`)."""

    off_policy = False

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        cfg: PPOConfig,
        net: PolicyConfig,
        normalize_obs: bool,
        n_envs: int,
        device: str | th.device,
        seed: int,
    ):
        self.cfg, self.gamma = cfg, cfg.gamma
        self.reward_scale = RewardScale(n_envs, cfg.gamma) if cfg.reward_scale == "returns" else None
        venv = policy.spaces_only_venv(observation_space, action_space, n_envs)
        self.ppo = policy.make_ppo(venv, cfg, net, normalize_obs, device, seed, transpose_images=False)
        self.logger = StatsLogger()
        self.ppo.set_logger(self.logger)
        self._bc_opt: th.optim.Adam | None = None
        self._bc_data: tuple | None = None
        self._prepared: tuple[Fragment, tuple[np.ndarray, np.ndarray, th.Tensor]] | None = None

    @classmethod
    def from_settings(
        cls, settings: TrainConfig, observation_space: gym.Space, action_space: gym.Space, device: str | th.device
    ) -> PPOGenerator:
        return cls(
            observation_space,
            action_space,
            settings.ppo,
            settings.policy,
            settings.normalize_obs,
            settings.total_envs,
            device,
            settings.seed,
        )

    @property
    def policy(self):
        return self.ppo.policy

    @property
    def device(self) -> th.device:
        return self.ppo.device

    @th.no_grad()
    def values(self, obs: Any) -> th.Tensor:
        """(N,) critic values of a batch of raw observations (N, *obs_shape). A fragment decoded from the wire
        holds read-only views of its message, which torch would wrap with a warning: those are copied."""
        obs = obs_tree.tmap(obs_tree.writable, obs)
        obs_t, _ = self.policy.obs_to_tensor(obs)
        return self.policy.predict_values(obs_t).flatten()

    def prepare(self, frag: Fragment) -> None:
        """The critic's values `update(frag, ...)` will need (the round's observations; the final observations of
        truncated episodes and of the last step), computed while the learner's second thread takes the
        discriminator's rewards."""
        self._prepared = (frag, self._critic(frag))

    def _critic(self, frag: Fragment) -> tuple[np.ndarray, np.ndarray, th.Tensor]:
        """(T, E) values of `frag.obs`, the values of the truncated steps' `next_obs`, and (E,) of the last step's."""
        t, e = frag.n_steps, frag.n_envs
        values = self.values(obs_tree.merge_steps(frag.obs)).reshape(t, e).cpu().numpy()
        cut = frag.truncated & ~frag.terminated
        boot = self.values(obs_tree.take(frag.next_obs, cut)).cpu().numpy() if cut.any() else np.zeros(0, np.float32)
        return values, boot, self.values(obs_tree.take(frag.next_obs, -1))

    def update(
        self,
        frag: Fragment,
        rewards: np.ndarray,
        progress_remaining: float,
        terminal_value: float = 0.0,
        train_policy: bool = True,
        relabel: Any = None,
    ) -> dict[str, float]:
        """One PPO update on `frag` with `rewards` (T, E) (the discriminator's, not the env's).

        A terminated step's target gets `gamma * terminal_value` (an absorbing state's value; 0
        without absorbing states); a truncated one bootstraps from its final observation's value.
        `train_policy=False` fits the value function only (the actor's parameters get no gradient).
        """
        t, e = frag.n_steps, frag.n_envs
        buf = self.ppo.rollout_buffer
        if (buf.buffer_size, buf.n_envs) != (t, e):
            raise ValueError(f"fragment is {t} steps x {e} envs, PPO expects {buf.buffer_size} x {buf.n_envs}")
        prepared, self._prepared = self._prepared, None
        values, boot, last_values = prepared[1] if prepared is not None and prepared[0] is frag else self._critic(frag)
        rewards = np.asarray(rewards, np.float32).copy()
        stats: dict[str, float] = {}
        if self.reward_scale is not None:  # before the bootstraps: the critic's values are in the scaled units
            scale = self.reward_scale.update(rewards, frag.dones)
            rewards = np.clip(rewards * scale, -RewardScale.CLIP, RewardScale.CLIP).astype(np.float32)
            terminal_value *= scale
            stats["train/reward_scale"] = scale
        # Time-limit truncation is not a real end: bootstrap from the final observation's value
        # (what SB3's collect_rollouts does, see SB3 issue 633).
        cut = frag.truncated & ~frag.terminated
        if cut.any():
            rewards[cut] += self.cfg.gamma * boot
        if terminal_value:
            rewards[frag.terminated] += self.cfg.gamma * terminal_value
        buf.reset()
        if obs_tree.is_dict(frag.obs):  # SB3's DictRolloutBuffer
            for k, v in frag.obs.items():
                buf.observations[k][:] = v.reshape(buf.observations[k].shape)
        else:
            buf.observations[:] = frag.obs.reshape(buf.observations.shape)
        buf.actions[:] = frag.acts.reshape(buf.actions.shape)
        buf.rewards[:] = rewards
        buf.episode_starts[:] = frag.episode_starts()
        buf.values[:] = values
        buf.log_probs[:] = frag.log_probs
        buf.pos, buf.full = t, True
        buf.compute_returns_and_advantage(last_values=last_values, dones=frag.dones[-1].astype(np.float32))
        self.ppo._current_progress_remaining = progress_remaining
        actor_params = [] if train_policy else self._actor_parameters()
        for p in actor_params:
            p.requires_grad_(False)
        try:
            self.ppo.train()
        finally:
            for p in actor_params:
                p.requires_grad_(True)
        return {**self.logger.take(), **stats}

    def sample_replay(self, n: int, rng: np.random.Generator) -> None:
        return None  # on-policy: the learner keeps the discriminator's own replay of rounds

    def update_normalizer(self, obs: Any) -> None:
        policy.update_normalizer(self.policy, obs)

    def _actor_parameters(self) -> list[th.nn.Parameter]:
        """What maps an observation to the action: the actor's encoder (a CNN or per-entry encoders; shared
        with the critic by default, so critic-only rounds leave it as BC made it), its layers, its head and
        log std. BC trains all but the log std."""
        pol = self.policy
        params = [*pol.pi_features_extractor.parameters(), *pol.mlp_extractor.policy_net.parameters()]
        params += [*pol.action_net.parameters()]
        return params + ([pol.log_std] if isinstance(getattr(pol, "log_std", None), th.nn.Parameter) else [])

    def anchor(self, obs: Any, acts: np.ndarray, decay: float) -> None:
        """No BC term inside PPO's loss: PPO's is `bc_steps` after each update."""

    def bc_steps(
        self, obs: Any, acts: np.ndarray, steps: int, batch_size: int, lr: float, rng: np.random.Generator
    ) -> list[float]:
        """`steps` Adam steps fitting the policy to (obs, acts) on random minibatches: its Gaussian mean
        by squared error (actions clipped to the bounds, as the env saw them) or its logits by
        cross-entropy (the negative log-likelihood for MultiDiscrete and MultiBinary). The optimizer
        (over the actor's layers, not its log std) persists across calls."""
        pol, space = self.policy, self.policy.action_space
        opt = self._bc_optimizer()
        for group in opt.param_groups:
            group["lr"] = lr
        if self._bc_data is None or self._bc_data[0] is not obs:  # on the device once per demo set
            self._bc_data = (
                obs,
                bc_tensors(obs, self.device),
                th.as_tensor(policy.clipped(space, np.array(acts)), device=self.device),
            )
        _, obs_t, target = self._bc_data
        start = th.as_tensor(spaces.start_of(space), device=self.device)  # the heads count from 0
        losses = []
        pol.set_training_mode(True)
        for _ in range(steps):
            idx = th.as_tensor(rng.integers(0, len(target), batch_size), device=self.device)
            features = pol.extract_features(obs_tree.take(obs_t, idx), pol.pi_features_extractor)
            latent_pi = pol.mlp_extractor.forward_actor(features)
            out = pol.action_net(latent_pi)
            if isinstance(space, gym.spaces.Discrete):
                loss = th.nn.functional.cross_entropy(out, target[idx].long().reshape(-1) - start)
            elif isinstance(space, gym.spaces.Box):
                loss = ((out - target[idx].float().reshape(out.shape)) ** 2).sum(-1).mean()
            else:  # MultiDiscrete, MultiBinary: the negative log-likelihood of the expert's action
                dist = pol.action_dist.proba_distribution(action_logits=out)
                index = target[idx].reshape(len(idx), -1) - start
                loss = -dist.log_prob(index.float()).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses

    def _bc_optimizer(self) -> th.optim.Adam:
        """BC's Adam over the actor's layers (not its log std), made once and kept (it is checkpointed)."""
        if self._bc_opt is None:
            pol = self.policy
            params = [p for p in self._actor_parameters() if p is not getattr(pol, "log_std", None)]
            self._bc_opt = th.optim.Adam(params)  # bc_steps sets the learning rate of every call
        return self._bc_opt

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
        """BC warm start: `epochs` passes' worth of `bc_steps`, then log std set to `log_std`."""
        stats = warm_start(self.bc_steps, obs, acts, epochs, batch_size, lr, rng)
        pol = self.policy
        if log_std is not None and isinstance(getattr(pol, "log_std", None), th.nn.Parameter):
            with th.no_grad():
                pol.log_std.fill_(log_std)
        return stats

    def state_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy.state_dict(),
            "optimizer": self.policy.optimizer.state_dict(),
            "n_updates": self.ppo._n_updates,
            "bc_optimizer": None if self._bc_opt is None else self._bc_opt.state_dict(),
            "reward_scale": None if self.reward_scale is None else self.reward_scale.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.load_state_dict(state["policy"])
        self.policy.optimizer.load_state_dict(
            copy.deepcopy(state["optimizer"])
        )  # torch shares, not copies, its tensors
        self.ppo._n_updates = int(state["n_updates"])
        if state.get("bc_optimizer") is not None:
            self._bc_optimizer().load_state_dict(copy.deepcopy(state["bc_optimizer"]))
        if self.reward_scale is not None and state.get("reward_scale") is not None:
            self.reward_scale.load_state_dict(state["reward_scale"])
