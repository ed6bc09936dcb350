"""What actors send the learner (`Fragment`) and what the learner sends actors (`Weights`)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from gailkit.core import obs as obs_tree


@dataclasses.dataclass(frozen=True)
class Fragment:
    """`n_steps` steps of `n_envs` envs, collected with policy `policy_version`.

    Arrays (T = n_steps, E = n_envs):
      obs, next_obs: (T, E, *obs_shape), or a dict of those for a Dict space; next_obs is the observation after the step, the final
        one (before auto-reset) where the episode ended.
      acts: (T, E, *act_shape), as sampled (continuous actions unclipped; the env got them clipped).
      terminated, truncated: (T, E) bool.
      log_probs: (T, E) float32, behaviour log-probabilities of `acts`.
      rews: (T, E) float32, the env's own reward: reported, never trained on.
      first_starts: (E,) bool, whether step 0 of each env began an episode.
      episode_returns, episode_lengths: (K,) stats of the K episodes that finished in this fragment.
    """

    obs: obs_tree.Obs
    acts: np.ndarray
    next_obs: obs_tree.Obs
    terminated: np.ndarray
    truncated: np.ndarray
    log_probs: np.ndarray
    rews: np.ndarray
    first_starts: np.ndarray
    episode_returns: np.ndarray
    episode_lengths: np.ndarray
    actor_id: int
    policy_version: int
    sample_seconds: float = 0.0
    """How long the actor took to collect it (reported as actors/sample_s)."""

    def __post_init__(self):
        t, e = self.terminated.shape
        for field in ("obs", "acts", "next_obs", "truncated", "log_probs", "rews"):
            for name, arr in obs_tree.items(getattr(self, field), field):
                if arr.shape[:2] != (t, e):
                    raise ValueError(
                        f"fragment field '{name}' has leading shape {arr.shape[:2]}, 'terminated' has {(t, e)}"
                    )
        if obs_tree.shapes(self.obs) != obs_tree.shapes(self.next_obs):
            raise ValueError(
                f"fragment 'next_obs' shape {obs_tree.shapes(self.next_obs)} != 'obs' shape {obs_tree.shapes(self.obs)}"
            )
        if self.first_starts.shape != (e,):
            raise ValueError(f"fragment 'first_starts' shape {self.first_starts.shape} != ({e},)")
        if self.episode_returns.shape != self.episode_lengths.shape:
            raise ValueError(
                f"fragment episode stats: {self.episode_returns.shape} returns vs {self.episode_lengths.shape} lengths"
            )

    @property
    def n_steps(self) -> int:
        return self.terminated.shape[0]

    @property
    def n_envs(self) -> int:
        return self.terminated.shape[1]

    @property
    def dones(self) -> np.ndarray:
        return self.terminated | self.truncated

    def episode_starts(self) -> np.ndarray:
        """(T, E) bool: step t began an episode (SB3's `episode_starts`)."""
        return np.concatenate([self.first_starts[None], self.dones[:-1]], axis=0)


def stack(fragments: list[Fragment]) -> Fragment:
    """Join fragments of equal length and version side by side on the env axis (actor order)."""
    if len(fragments) == 1:
        return fragments[0]
    lengths = {f.n_steps for f in fragments}
    if len(lengths) != 1:
        raise ValueError(f"fragments of different lengths {sorted(lengths)} cannot be stacked")
    cat = lambda name, axis=1: obs_tree.concat([getattr(f, name) for f in fragments], axis=axis)  # noqa: E731
    return Fragment(
        obs=cat("obs"),
        acts=cat("acts"),
        next_obs=cat("next_obs"),
        terminated=cat("terminated"),
        truncated=cat("truncated"),
        log_probs=cat("log_probs"),
        rews=cat("rews"),
        first_starts=cat("first_starts", 0),
        episode_returns=cat("episode_returns", 0),
        episode_lengths=cat("episode_lengths", 0),
        actor_id=-1,
        policy_version=min(f.policy_version for f in fragments),
        sample_seconds=max(f.sample_seconds for f in fragments),
    )


@dataclasses.dataclass(frozen=True)
class Weights:
    """Policy parameters (with normalizer statistics) as numpy arrays, tagged with a version."""

    version: int
    tensors: dict[str, np.ndarray]


class BadFragment(ValueError):
    """A fragment that does not fit the run; `reason` is a short key for the `actors/dropped` count."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


@dataclasses.dataclass(frozen=True)
class FragmentSpec:
    """What every fragment of a run must look like, from the env's spaces and the round's size.

    `act_n` is set for Discrete action spaces (actions must be integers in `[0, n)`: a fragment holds the
    policy's actions, which count from 0 whatever the space's start); otherwise actions are finite
    numbers of `act_shape`.
    """

    n_steps: int
    n_envs: int
    obs_shape: Any
    """The observation's shape, or a dict of them (one per entry of a Dict space)."""
    act_shape: tuple[int, ...]
    act_n: int | None = None
    act_nvec: tuple[int, ...] | None = None
    """For MultiDiscrete (its nvec) and MultiBinary (2 per entry) actions: each entry a whole number in `[0, nvec)`."""

    @classmethod
    def of(cls, observation_space, action_space, n_steps: int, n_envs: int) -> FragmentSpec:
        n = getattr(action_space, "n", None)
        discrete = (
            n is not None and getattr(action_space, "nvec", None) is None and np.ndim(n) == 0 and not action_space.shape
        )
        if isinstance(getattr(observation_space, "spaces", None), dict):
            obs_shape: Any = {k: tuple(sub.shape or ()) for k, sub in observation_space.spaces.items()}
        else:
            obs_shape = tuple(observation_space.shape or ())
        return cls(
            n_steps,
            n_envs,
            obs_shape,
            tuple(action_space.shape or ()),
            int(n) if discrete and n is not None else None,
            _nvec(action_space),
        )

    def check(self, f: Fragment) -> None:
        """Raise `BadFragment` unless shapes, dtypes, finiteness and action ranges all fit."""
        t, e = self.n_steps, self.n_envs
        if (f.n_steps, f.n_envs) != (t, e):
            raise BadFragment("wrong_size", f"{f.n_steps} steps x {f.n_envs} envs, expected {t} x {e}")
        for field in ("obs", "next_obs"):
            x = getattr(f, field)
            if obs_tree.is_dict(x) != isinstance(self.obs_shape, dict) or (
                isinstance(self.obs_shape, dict) and set(x) != set(self.obs_shape)
            ):
                want = list(self.obs_shape) if isinstance(self.obs_shape, dict) else "one array"
                raise BadFragment("wrong_shape", f"'{field}' has entries {_entries(x)}, expected {want}")
            for name, arr in obs_tree.items(x, field):
                shape = self.obs_shape[name.split(obs_tree.SEP, 1)[1]] if obs_tree.is_dict(x) else self.obs_shape
                if arr.shape != (t, e, *shape):
                    raise BadFragment("wrong_shape", f"'{name}' is {arr.shape}, expected {(t, e, *shape)}")
                _finite_numbers(arr, name)
        acts = f.acts
        if self.act_n is not None:
            if acts.shape != (t, e) or acts.dtype.kind not in "iu":
                raise BadFragment("wrong_shape", f"'acts' is {acts.shape} {acts.dtype}, expected {(t, e)} integers")
            if ((acts < 0) | (acts >= self.act_n)).any():
                raise BadFragment("bad_action", f"an action outside [0, {self.act_n})")
        else:
            if acts.shape != (t, e, *self.act_shape):
                raise BadFragment("wrong_shape", f"'acts' is {acts.shape}, expected {(t, e, *self.act_shape)}")
            _finite_numbers(acts, "acts")
            if self.act_nvec is not None:
                nvec = np.asarray(self.act_nvec).reshape(self.act_shape)
                if ((acts < 0) | (acts >= nvec) | (acts != np.floor(acts))).any():
                    raise BadFragment("bad_action", f"an action entry outside [0, nvec) for nvec {list(self.act_nvec)}")
        for name in ("terminated", "truncated"):
            if getattr(f, name).dtype != np.bool_:
                raise BadFragment("wrong_dtype", f"'{name}' is {getattr(f, name).dtype}, expected bool")
        if f.first_starts.dtype != np.bool_:
            raise BadFragment("wrong_dtype", f"'first_starts' is {f.first_starts.dtype}, expected bool")
        for name in ("log_probs", "rews"):
            _finite_numbers(getattr(f, name), name)
        if self.act_n is not None and (f.log_probs > 1e-4).any():
            raise BadFragment("bad_log_prob", "a discrete action's log-probability above 0")
        _finite_numbers(f.episode_returns, "episode_returns")
        if len(f.episode_returns) != int(f.dones.sum()) or (f.episode_lengths < 1).any():
            raise BadFragment(
                "bad_episode_stats", f"{len(f.episode_returns)} finished episodes for {int(f.dones.sum())} ends"
            )


def _nvec(action_space: Any) -> tuple[int, ...] | None:
    """How many values each entry of a MultiDiscrete (its nvec) or MultiBinary (2) action takes; None for others."""
    if getattr(action_space, "nvec", None) is not None:
        return tuple(int(k) for k in np.asarray(action_space.nvec).reshape(-1))
    if type(action_space).__name__ == "MultiBinary":
        return (2,) * int(np.prod(action_space.shape or ()))
    return None


def _entries(x: Any) -> Any:
    return list(x) if obs_tree.is_dict(x) else "one array"


def _finite_numbers(arr: np.ndarray, name: str) -> None:
    if arr.dtype.kind not in "fiub":
        raise BadFragment("wrong_dtype", f"'{name}' has dtype {arr.dtype}, expected numbers")
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        raise BadFragment("not_finite", f"'{name}' holds NaN or inf")
