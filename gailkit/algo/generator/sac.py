"""The off-policy generator: stable-baselines3's SAC update, fed from gailkit's own replay (DAC-style).

Each round's fragment joins the replay (`Replay`; `FrameReplay` for frame stacks, each frame held once;
no rewards stored); then SB3's `SAC.train()` runs `updates_per_step` gradient steps per new env step.
SAC draws its minibatches through `_Feed`, which samples the replay and asks the learner's `relabel`
for the current discriminator's rewards of exactly those transitions (a terminated one also gets the
absorbing state's value, see `learner`), so old transitions are never judged by an old
discriminator. Actions reach SAC in [-1, 1]
(`squashed.to_unit`); everything else sees the env's units. With `sac.bc_weight`, the actor
optimizer's `step` first adds the gradient of a BC term (`_anchored`), so each actor step of
`SAC.train()` minimizes SAC's actor loss plus that term (TD3+BC) without copying SB3's update.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch as th
from stable_baselines3.common.type_aliases import ReplayBufferSamples

from gailkit.algo.generator.common import StatsLogger, bc_tensors, warm_start
from gailkit.algo.generator.frame_replay import make_replay
from gailkit.config import PolicyConfig, SACConfig, TrainConfig
from gailkit.core import obs as obs_tree
from gailkit.core.fragments import Fragment
from gailkit.model import policy
from gailkit.model.policy import squashed

Relabel = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], th.Tensor]


class _Feed:
    """What SAC.train() calls `replay_buffer`: minibatches of the replay with rewards computed now."""

    def __init__(self, gen: SACGenerator):
        self.gen = gen

    def sample(self, batch_size: int, env: Any = None) -> ReplayBufferSamples:
        gen = self.gen
        assert gen.relabel is not None
        obs, acts, next_obs, terminated = gen.replay.sample(batch_size, gen.rng)
        rewards = gen.relabel(obs, acts, next_obs, terminated).reshape(-1, 1).float()
        dev = gen.device
        return ReplayBufferSamples(
            obs_tree.tmap(lambda v: th.as_tensor(v, device=dev), obs),
            th.as_tensor(squashed.to_unit(gen.action_space, acts), device=dev),
            obs_tree.tmap(lambda v: th.as_tensor(v, device=dev), next_obs),
            th.as_tensor(terminated, device=dev).float().reshape(-1, 1),
            rewards,
        )


class SACGenerator:
    """Owns SAC's actor (the policy actors run), its critics and the replay (a `Generator`)."""

    off_policy = True

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        cfg: SACConfig,
        net: PolicyConfig,
        normalize_obs: bool,
        device: str | th.device,
        seed: int,
        frame_stack: int = 1,
    ):
        self.cfg, self.gamma, self.action_space = cfg, cfg.gamma, action_space
        self.sac = squashed.make_sac(observation_space, action_space, cfg, net, normalize_obs, device, seed)
        self.replay = make_replay(observation_space, action_space, cfg.buffer_size, frame_stack)
        self.rng = np.random.default_rng(seed)
        self.sac.replay_buffer = _Feed(self)
        self.logger = StatsLogger()
        self.sac.set_logger(self.logger)
        self.relabel: Relabel | None = None
        self._bc_opt: th.optim.Adam | None = None
        self._bc_data: tuple | None = None
        self._anchor_weight = 0.0
        self.sac.actor.optimizer.step = self._anchored(self.sac.actor.optimizer.step)  # type: ignore[method-assign]

    @classmethod
    def from_settings(
        cls, settings: TrainConfig, observation_space: gym.Space, action_space: gym.Space, device: str | th.device
    ) -> SACGenerator:
        return cls(
            observation_space,
            action_space,
            settings.sac,
            settings.policy,
            settings.normalize_obs,
            device,
            settings.seed,
            settings.env.frame_stack,
        )

    @property
    def policy(self):
        return self.sac.actor

    @property
    def device(self) -> th.device:
        return self.sac.device

    def prepare(self, frag: Fragment) -> None:
        """Nothing: every minibatch is judged when drawn."""

    def update(
        self,
        frag: Fragment,
        rewards: np.ndarray,
        progress_remaining: float,
        terminal_value: float = 0.0,
        train_policy: bool = True,
        relabel: Relabel | None = None,
    ) -> dict[str, float]:
        """Add `frag` to the replay, then `updates_per_step` SAC steps per new transition (none before
        `learning_starts`). `rewards` and `terminal_value` are this round's, used only by on-policy
        generators: every minibatch is judged by `relabel` when drawn."""
        if relabel is None:
            raise ValueError("the off-policy generator needs the learner's relabel function")
        n = frag.n_steps * frag.n_envs
        flat = [obs_tree.merge_steps(a) for a in (frag.obs, frag.acts, frag.next_obs, frag.terminated)]
        self.replay.add(*flat)
        stats = {"replay/size": float(self.replay.size)}
        if self.replay.size < max(self.cfg.learning_starts, self.cfg.batch_size) or not train_policy:
            return stats
        self.relabel = relabel
        self.sac._current_progress_remaining = progress_remaining
        try:
            self.sac.train(gradient_steps=max(1, round(n * self.cfg.updates_per_step)), batch_size=self.cfg.batch_size)
        finally:
            self.relabel = None
        return {**stats, **self.logger.take()}

    def sample_replay(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, ...] | None:
        """`n` generator transitions for the discriminator, drawn from the whole replay (DAC)."""
        return self.replay.sample(n, rng) if self.replay.size else None

    def anchor(self, obs: Any, acts: np.ndarray, decay: float) -> None:
        """The BC term inside the actor's loss for the coming updates: `sac.bc_weight` x `decay`."""
        self._anchor_weight = self.cfg.bc_weight * decay
        if self._anchor_weight > 0:
            self._demo_tensors(obs, acts)

    def _anchored(self, step: Callable[..., Any]) -> Callable[..., Any]:
        """The actor optimizer's `step`, which first adds the BC term's gradient to the actor loss's (SB3
        has just back-propagated that loss): weight x mean |min Q(s, tanh mean)| x MSE(tanh mean, a) on a
        minibatch of the demos, Q's scale taken without its gradient (TD3+BC's normalization)."""

        def anchored_step(*args: Any, **kwargs: Any) -> Any:
            if self._anchor_weight > 0 and self._bc_data is not None:
                _, obs_t, target = self._bc_data
                actor = self.sac.actor
                idx = th.as_tensor(self.rng.integers(0, len(target), self.cfg.batch_size), device=self.device)
                obs = obs_tree.take(obs_t, idx)
                mean = th.tanh(actor.mu(actor.latent_pi(actor.extract_features(obs, actor.features_extractor))))
                with th.no_grad():
                    q_scale = th.cat(self.sac.critic(obs, mean), dim=1).min(dim=1).values.abs().mean()
                error = ((mean - target[idx]) ** 2).mean()
                (self._anchor_weight * q_scale * error).backward()
                self.logger.record("train/bc_anchor_error", error.item())
            return step(*args, **kwargs)

        return anchored_step

    def _demo_tensors(self, obs: Any, acts: np.ndarray) -> tuple[Any, th.Tensor]:
        """The demos' observations and actions (in [-1, 1]) on the device, made once per demo set."""
        if self._bc_data is None or self._bc_data[0] is not obs:
            self._bc_data = (
                obs,
                bc_tensors(obs, self.device),
                th.as_tensor(squashed.to_unit(self.action_space, np.array(acts)), device=self.device),
            )
        return self._bc_data[1], self._bc_data[2]

    def update_normalizer(self, obs: np.ndarray) -> None:
        """The actor's and both critics' encoders see one normalization."""
        for module in (self.sac.actor, self.sac.critic, self.sac.critic_target):
            policy.update_normalizer(module, obs)

    def bc_steps(
        self, obs: Any, acts: np.ndarray, steps: int, batch_size: int, lr: float, rng: np.random.Generator
    ) -> list[float]:
        """`steps` Adam steps fitting tanh of the actor's mean to the expert's actions (in [-1, 1])."""
        actor, opt = self.sac.actor, self._bc_optimizer()
        for group in opt.param_groups:
            group["lr"] = lr
        obs_t, target = self._demo_tensors(obs, acts)
        losses = []
        actor.set_training_mode(True)
        for _ in range(steps):
            idx = th.as_tensor(rng.integers(0, len(target), batch_size), device=self.device)
            features = actor.extract_features(obs_tree.take(obs_t, idx), actor.features_extractor)
            loss = ((th.tanh(actor.mu(actor.latent_pi(features))) - target[idx]) ** 2).sum(-1).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses

    def _bc_optimizer(self) -> th.optim.Adam:
        """BC's Adam over the actor's layers but its log std (made once, checkpointed)."""
        if self._bc_opt is None:
            params = [p for n, p in self.sac.actor.named_parameters() if not n.startswith("log_std")]
            self._bc_opt = th.optim.Adam(params)
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
        """BC warm start: `epochs` passes' worth of `bc_steps` (SAC's log std is a layer, left as it is)."""
        return warm_start(self.bc_steps, obs, acts, epochs, batch_size, lr, rng)

    def state_dict(self) -> dict[str, Any]:
        sac = self.sac
        return {
            "policy": sac.actor.state_dict(),
            "critic": sac.critic.state_dict(),
            "critic_target": sac.critic_target.state_dict(),
            "actor_optimizer": sac.actor.optimizer.state_dict(),
            "critic_optimizer": sac.critic.optimizer.state_dict(),
            "log_ent_coef": None if sac.log_ent_coef is None else sac.log_ent_coef.detach().clone(),
            "ent_coef_optimizer": None if sac.ent_coef_optimizer is None else sac.ent_coef_optimizer.state_dict(),
            "n_updates": sac._n_updates,
            "bc_optimizer": None if self._bc_opt is None else self._bc_opt.state_dict(),
            "replay": th.frombuffer(bytearray(self.replay.state()), dtype=th.uint8),
            "replay_rng": self.rng.bit_generator.state,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        sac = self.sac
        self.replay.load_state(state["replay"].cpu().numpy().tobytes())
        sac.actor.load_state_dict(state["policy"])
        sac.critic.load_state_dict(state["critic"])
        sac.critic_target.load_state_dict(state["critic_target"])
        sac.actor.optimizer.load_state_dict(copy.deepcopy(state["actor_optimizer"]))
        sac.critic.optimizer.load_state_dict(copy.deepcopy(state["critic_optimizer"]))
        if state["log_ent_coef"] is not None and sac.log_ent_coef is not None:
            with th.no_grad():
                sac.log_ent_coef.copy_(state["log_ent_coef"])
            sac.ent_coef_optimizer.load_state_dict(copy.deepcopy(state["ent_coef_optimizer"]))
        sac._n_updates = int(state["n_updates"])
        if state.get("bc_optimizer") is not None:
            self._bc_optimizer().load_state_dict(copy.deepcopy(state["bc_optimizer"]))
        self.rng.bit_generator.state = state["replay_rng"]
