"""One actor: a few envs and a CPU copy of the policy, turning weights into fragments.

Every episode starts from a seed drawn from the actor's own `np.random.Generator` (seeded
`seed + actor_id`), and the actions taken since each env's last reset are kept, so the actor's
whole state (`state()`) is a few numbers and action lists: restoring it resets each env with its
episode seed and replays the actions, which rebuilds the env exactly for deterministic envs.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch as th

from gailkit import config
from gailkit.config import EnvConfig, PolicyConfig
from gailkit.core import obs as obs_tree
from gailkit.core.fragments import Fragment, Weights
from gailkit.data import envs
from gailkit.model import policy


@dataclasses.dataclass(frozen=True)
class ActorSpec:
    """Everything an actor needs, as it travels to actor processes and Ray actors (JSON)."""

    env: EnvConfig
    policy: PolicyConfig
    """The network an actor builds (its weights come from the learner)."""
    normalize_obs: bool
    n_envs: int
    seed: int
    actor_id: int = 0
    heartbeat_s: float = 1.0
    policy_kind: str = "gaussian"
    """`policy.KINDS`: SB3's actor-critic policy (ppo) or SAC's squashed-Gaussian actor (sac)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "env": config.to_dict(self.env),
            "policy": config.to_dict(self.policy),
            "normalize_obs": self.normalize_obs,
            "n_envs": self.n_envs,
            "seed": self.seed,
            "actor_id": self.actor_id,
            "heartbeat_s": self.heartbeat_s,
            "policy_kind": self.policy_kind,
        }

    @classmethod
    def from_json(cls, d: Any) -> ActorSpec:
        """Checked like any settings: a malformed spec raises ConfigError (ValueError for bad numbers)."""
        if not isinstance(d, dict):
            raise config.ConfigError(f"actor spec: expected a mapping, got {type(d).__name__}")
        try:
            n_envs, seed, actor_id = int(d["n_envs"]), int(d["seed"]), int(d["actor_id"])
            heartbeat_s = float(d.get("heartbeat_s", 1.0))
            normalize, kind = d["normalize_obs"], d.get("policy_kind", "gaussian")
        except (KeyError, TypeError, ValueError, OverflowError) as e:
            raise config.ConfigError(f"actor spec: {type(e).__name__}: {e}") from None
        if not (1 <= n_envs <= 4096 and 0 < heartbeat_s < 3600 and isinstance(normalize, bool)):
            raise config.ConfigError(
                f"actor spec: {n_envs} envs, heartbeat {heartbeat_s} s, normalize_obs {normalize!r}"
            )
        if kind not in policy.KINDS.values():
            raise config.ConfigError(
                f"actor spec: policy_kind {str(kind)[:40]!r} (expected one of {sorted(policy.KINDS.values())})"
            )
        return cls(
            config.from_dict(EnvConfig, d.get("env"), "env"),
            config.from_dict(PolicyConfig, d.get("policy"), "policy"),
            normalize,
            n_envs,
            seed,
            actor_id,
            heartbeat_s,
            kind,
        )

    def with_id(self, actor_id: int) -> ActorSpec:
        return dataclasses.replace(self, actor_id=actor_id)


@dataclasses.dataclass
class _EnvSlot:
    env: Any
    obs: Any = None  # the env's observation once reset
    episode_seed: int = 0
    actions: list = dataclasses.field(default_factory=list)
    ret: float = 0.0
    length: int = 0
    starting: bool = True


class Actor:
    """`start()` makes the envs; `set_weights()` applies only newer versions; `sample()` steps.

    `allow_code`: whether `spec.env` may name code (module:Class); see `envs.make_factory`.
    """

    def __init__(self, spec: ActorSpec, allow_code: bool = True):
        self.spec, self.allow_code = spec, allow_code
        self.env_cfg, self.policy_cfg, self.normalize_obs = spec.env, spec.policy, spec.normalize_obs
        self.actor_id, self.n_envs, self.seed = spec.actor_id, spec.n_envs, spec.seed
        self.version = -1
        self._slots: list[_EnvSlot] = []
        self._policy: Any = None  # an SB3 ActorCriticPolicy once started
        self._rng: np.random.Generator | None = None

    def start(self) -> None:
        factory = envs.make_factory(self.env_cfg, self.allow_code, source="the learner's settings")
        self._slots = [_EnvSlot(factory()) for _ in range(self.n_envs)]
        first = self._slots[0].env
        self.observation_space, self.action_space = first.observation_space, first.action_space
        self._policy = policy.build(
            self.observation_space, self.action_space, self.policy_cfg, self.normalize_obs, "cpu", self.spec.policy_kind
        )
        self._policy.set_training_mode(False)
        self._rng = np.random.default_rng(self.seed + self.actor_id)
        for slot in self._slots:
            self._reset(slot, int(self._rng.integers(2**31)))

    def _reset(self, slot: _EnvSlot, episode_seed: int) -> None:
        slot.obs, _ = slot.env.reset(seed=episode_seed)
        slot.episode_seed, slot.actions, slot.ret, slot.length, slot.starting = episode_seed, [], 0.0, 0, True

    def forget_weights(self) -> None:
        """Take the next weights whatever their version: a new learner (a run resumed from a checkpoint
        counts versions from there, below what this actor last held) is the one truth from now on."""
        self.version = -1

    def set_weights(self, weights: Weights) -> bool:
        """Apply `weights` if newer than what this actor has; return whether it did.

        Raises ValueError, changing nothing, when they do not fit the policy (names, shapes,
        dtypes) or are not finite."""
        if weights.version <= self.version:
            return False
        policy.set_weights(self._policy, weights)
        self.version = weights.version
        return True

    def sample(self, n_steps: int, on_step: Callable[[], None] | None = None) -> Fragment:
        """Step every env `n_steps` times with the current policy (`on_step` runs after each step)."""
        assert self._rng is not None, "call start() first"
        start = time.perf_counter()
        obs_b, acts_b, next_b, term_b, trunc_b, logp_b, rew_b = [], [], [], [], [], [], []
        first_starts = np.array([s.starting for s in self._slots])
        ep_returns, ep_lengths = [], []
        for _ in range(n_steps):
            obs = obs_tree.stack([s.obs for s in self._slots])
            acts, log_probs = policy.act(self._policy, obs)
            env_acts = policy.env_action(self.action_space, acts)
            nxt, rews, terms, truncs = [], [], [], []
            for slot, a in zip(self._slots, env_acts):
                o2, r, term, trunc, _ = slot.env.step(a)
                slot.actions.append(a)
                slot.ret += float(r)
                slot.length += 1
                slot.starting = False
                nxt.append(o2)
                rews.append(r)
                terms.append(term)
                truncs.append(trunc)
                if term or trunc:
                    ep_returns.append(slot.ret)
                    ep_lengths.append(slot.length)
                    self._reset(slot, int(self._rng.integers(2**31)))
                else:
                    slot.obs = o2
            obs_b.append(obs)
            acts_b.append(acts)
            next_b.append(obs_tree.stack(nxt))
            term_b.append(terms)
            trunc_b.append(truncs)
            logp_b.append(log_probs)
            rew_b.append(rews)
            if on_step is not None:
                on_step()
        return Fragment(
            obs=obs_tree.stack(obs_b),
            acts=np.stack(acts_b),
            next_obs=obs_tree.stack(next_b),
            terminated=np.array(term_b, bool),
            truncated=np.array(trunc_b, bool),
            log_probs=np.stack(logp_b).astype(np.float32),
            rews=np.array(rew_b, np.float32),
            first_starts=first_starts,
            episode_returns=np.array(ep_returns, np.float64),
            episode_lengths=np.array(ep_lengths, np.int64),
            actor_id=self.actor_id,
            policy_version=self.version,
            sample_seconds=time.perf_counter() - start,
        )

    def state(self) -> dict[str, Any]:
        """Everything needed to continue exactly: RNG state and each env's episode so far."""
        assert self._rng is not None
        return {
            "rng": self._rng.bit_generator.state,
            "envs": [
                {
                    "episode_seed": s.episode_seed,
                    "ret": s.ret,
                    "starting": s.starting,
                    "actions": th.as_tensor(np.array(s.actions)) if s.actions else None,
                }
                for s in self._slots
            ],
        }

    def load_state(self, state: dict[str, Any]) -> None:
        assert self._rng is not None, "call start() first"
        self._rng.bit_generator.state = state["rng"]
        for slot, saved in zip(self._slots, state["envs"]):
            self._reset(slot, int(saved["episode_seed"]))
            actions = [] if saved["actions"] is None else list(saved["actions"].numpy())
            for a in actions:
                slot.obs, _, _, _, _ = slot.env.step(a)
            slot.actions, slot.length, slot.ret, slot.starting = (
                actions,
                len(actions),
                float(saved["ret"]),
                bool(saved["starting"]),
            )

    def stop(self) -> None:
        for slot in self._slots:
            slot.env.close()
        self._slots = []
