"""A run's whole state (`RunState`), saved atomically and read back by one function, `load`.

A checkpoint is a torch file of plain containers and tensors, read with
`torch.load(weights_only=True)`: reading it cannot run code. `load` then checks its layout and
types before anyone uses it, so a truncated, foreign or tampered file is one `CheckpointError`
line. What is in it: the counters, the resolved settings, the spaces, the reward function the run
chose, the reference returns its normalized scores use, the best evaluation so far, the learner's
own state (`Learner.state_dict()`), the fleet's, and every RNG.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch as th

from gailkit import __version__
from gailkit.core import expansion, fsutil, limits, textparse
from gailkit.core.errors import GailkitError, first_line

FORMAT = 2
RANDOM_EPISODES = 20  # episodes behind a run's random-policy reference (at least eval_episodes)


class CheckpointError(GailkitError):
    """A checkpoint is missing, unreadable, or not of this format."""


@dataclasses.dataclass
class References:
    """What a run's normalized scores are measured against, fixed when the run starts.

    `expert_return` is the expert policy's evaluated return when the demos carry it, else the
    demos' mean episode return (`expert_source` says which); `random_return` is a uniform random
    policy's mean return over `random_episodes` episodes from `random_seed`.
    """

    expert_return: float | None
    expert_source: str
    random_return: float
    random_episodes: int
    random_seed: int

    def normalized(self, ret: float) -> float | None:
        """(R - R_random) / (R_expert - R_random), or None when the expert level is unknown or not above
        random (a score against an expert worse than random flips its sign: it would mean nothing)."""
        if self.expert_return is None or self.expert_return <= self.random_return:
            return None
        return (ret - self.random_return) / (self.expert_return - self.random_return)


def rng_state() -> dict[str, Any]:
    """Every global RNG's state (torch, python, numpy, cuda), as a checkpoint holds it."""
    np_state: Any = np.random.get_state()  # the legacy tuple
    return {
        "torch": th.get_rng_state(),
        "python": random.getstate(),
        "numpy_global": [np_state[0], th.as_tensor(np_state[1].astype(np.int64)), *np_state[2:]],
        "cuda": th.cuda.get_rng_state_all() if th.cuda.is_available() else [],
    }


def set_rng_state(s: dict[str, Any]) -> None:
    th.set_rng_state(s["torch"])
    random.setstate(s["python"])
    g = s["numpy_global"]
    np.random.set_state((g[0], g[1].numpy().astype(np.uint32), *g[2:]))
    if s["cuda"] and th.cuda.is_available():
        th.cuda.set_rng_state_all(s["cuda"])


def random_reference(
    env_cfg: Any,
    act_space: Any,
    episodes: int,
    seed: int,
    allow_code: bool,
    expert_return: float | None = None,
    expert_source: str = "unknown",
) -> References:
    """The one random-policy baseline (train and evaluate alike): `episodes` episodes of uniformly sampled
    actions, episode i reset with `seed + i`, the action space seeded with a stream of its own drawn from `seed`
    (never `seed` itself: an env that draws its start state with the same generator call would otherwise get
    actions equal to its state)."""
    import numpy as np

    from gailkit.data import envs

    act_space.seed(int(np.random.SeedSequence([seed, 1]).generate_state(1)[0]))
    out = envs.run_episodes(lambda obs: act_space.sample(), env_cfg, episodes, seed, allow_code=allow_code)
    refs = References(expert_return, expert_source, out["return_mean"], episodes, seed)
    if expert_return is not None and expert_return < refs.random_return:
        import warnings

        warnings.warn(
            f"THE EXPERT IS WORSE THAN RANDOM: its return {expert_return:.1f} ({expert_source}) is below a "
            f"random policy's {refs.random_return:.1f}, so no score is normalized; check the demos (an expert "
            "trained with VecNormalize needs its vecnormalize.pkl beside its .zip when recording)",
            stacklevel=2,
        )
    return refs


@dataclasses.dataclass
class Best:
    """The best evaluation so far: `metric` is `return` (higher is better) or `action_error` (lower)."""

    metric: str = "return"
    value: float | None = None
    round: int = 0

    def beaten_by(self, value: float) -> bool:
        if self.value is None:
            return True
        return value < self.value if self.metric == "action_error" else value > self.value


@dataclasses.dataclass
class RunState:
    round: int
    env_steps: int
    config: dict[str, Any]
    """The resolved TrainConfig, as `config.to_dict` writes it."""
    spaces: dict[str, Any]
    """{"observation": ..., "action": ...} as `demos.space_to_json` writes them."""
    reward_fn: str
    references: References
    best: Best
    learner: dict[str, Any]
    """`Learner.state_dict()`: generator, discriminator, learner RNG."""
    fleet: dict[str, Any]
    rng: dict[str, Any]
    """Global RNG states (torch, numpy, python, cuda)."""
    gailkit_version: str = __version__
    format: int = FORMAT
    # Parsed once by `load` from `config` and `spaces` (not saved: derived from them).
    settings: Any = dataclasses.field(default=None, repr=False, compare=False, metadata={"derived": True})
    """The run's `TrainConfig`."""
    observation_space: Any = dataclasses.field(default=None, repr=False, compare=False, metadata={"derived": True})
    action_space: Any = dataclasses.field(default=None, repr=False, compare=False, metadata={"derived": True})


_TYPES = {
    "round": int,
    "env_steps": int,
    "config": dict,
    "spaces": dict,
    "reward_fn": str,
    "references": dict,
    "best": dict,
    "learner": dict,
    "fleet": dict,
    "rng": dict,
    "gailkit_version": str,
    "format": int,
}


def save(path: str | Path, state: RunState) -> Path:
    """Write `state` to `path` atomically (a temp file beside it, fsync, rename)."""
    path = Path(path)
    data = {f.name: getattr(state, f.name) for f in dataclasses.fields(state) if not f.metadata.get("derived")}
    data["references"] = dataclasses.asdict(state.references)
    data["best"] = dataclasses.asdict(state.best)
    import io

    buf = io.BytesIO()  # serialized in memory, then written as plain bytes: a full disk is the OS's own one-line error
    th.save(data, buf)  # (torch's own file writer reports it as an opaque RuntimeError)
    with fsutil.atomic_path(path) as tmp:
        tmp.write_bytes(buf.getbuffer())
    return path


def load(path: str | Path, device: str | th.device = "cpu") -> RunState:
    """The one reader of checkpoints: weights-only unpickling, then a check of layout and types."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint")
    try:
        data = th.load(path, map_location=device, weights_only=True)
    except Exception as e:  # noqa: BLE001 - torch raises assorted errors for truncated, foreign or hostile files
        kind = "truncated or corrupt" if isinstance(e, (EOFError, RuntimeError)) else "not a torch file of plain data"
        raise CheckpointError(f"{path}: not a readable gailkit checkpoint ({kind}: {type(e).__name__})") from None
    try:
        expansion.check(data, limits.memory_budget())
    except expansion.Expands as e:
        raise CheckpointError(f"{path}: not a gailkit checkpoint: {e}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise CheckpointError(f"{path}: not a gailkit checkpoint of format {FORMAT} (found {textparse.shown(found)})")
    for key, expected in _TYPES.items():
        if not isinstance(data.get(key), expected) or (expected is int and isinstance(data.get(key), bool)):
            raise CheckpointError(f"{path}: field '{key}' is missing or not a {expected.__name__}")
    try:
        refs = References(**data["references"])
        best = Best(**data["best"])
    except TypeError as e:
        raise CheckpointError(f"{path}: malformed 'references' or 'best' ({e})") from None
    problem = _check_values(data, refs, best)
    if problem:
        raise CheckpointError(f"{path}: {problem}")
    from gailkit import config
    from gailkit.config import TrainConfig
    from gailkit.data import demos

    try:
        settings = config.from_dict(TrainConfig, config.migrate(data["config"], str(path)), "config")
        spaces = demos.space_from_json(data["spaces"]["observation"]), demos.space_from_json(data["spaces"]["action"])
    except (GailkitError, KeyError, TypeError, ValueError, AttributeError) as e:
        raise CheckpointError(f"{path}: its settings or spaces cannot be read ({type(e).__name__}: {e})") from None
    settings = as_trained(settings, spaces[0], data.get("learner"))
    known = {f.name for f in dataclasses.fields(RunState) if not f.metadata.get("derived")}
    fields = {k: v for k, v in data.items() if k in known and k not in ("references", "best")}
    return RunState(
        **fields, references=refs, best=best, settings=settings, observation_space=spaces[0], action_space=spaces[1]
    )


def _number(v: Any, optional: bool = False) -> bool:
    import math

    return (v is None and optional) or (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v))


def _check_values(data: dict[str, Any], refs: References, best: Best) -> str:
    """What is wrong with a checkpoint's counters, references and best evaluation ('' when nothing)."""
    if not 0 <= data["round"] < 1 << 40 or not 0 <= data["env_steps"] < 1 << 50:
        return f"counters round {data['round']}, env_steps {data['env_steps']} out of range"
    if not (
        _number(refs.expert_return, optional=True)
        and _number(refs.random_return)
        and isinstance(refs.expert_source, str)
        and isinstance(refs.random_episodes, int)
        and isinstance(refs.random_seed, int)
    ):
        return "malformed 'references' (returns must be finite numbers)"
    if (
        best.metric not in ("return", "action_error")
        or not _number(best.value, optional=True)
        or not isinstance(best.round, int)
        or isinstance(best.round, bool)
    ):
        return "malformed 'best'"
    return ""


def as_trained(settings: Any, observation_space: Any, learner_state: Any) -> Any:
    """`settings` (a TrainConfig) as a checkpoint's weights were trained: `policy.as_trained` and
    `discriminator.as_trained` (a resumed run's and a loaded checkpoint's alike)."""
    from gailkit.algo import discriminator
    from gailkit.model import policy

    return dataclasses.replace(
        settings,
        policy=policy.as_trained(settings.policy, observation_space, learner_state),
        disc=discriminator.as_trained(settings.disc, observation_space, learner_state),
    )


def load_policy(path: str | Path, device: str = "cpu"):
    """`(policy, state)`: the trained policy of a checkpoint (eval mode) and the checkpoint's state."""
    from gailkit.model import policy

    state = load(path, device)
    try:
        s = state.settings
        kind = policy.kind_of(s.generator)
        pol = policy.build(state.observation_space, state.action_space, s.policy, s.normalize_obs, device, kind)
        pol.load_state_dict(state.learner["generator"]["policy"])
    except (GailkitError, KeyError, TypeError, ValueError, RuntimeError) as e:
        raise CheckpointError(f"{path}: its policy cannot be rebuilt ({type(e).__name__}: {first_line(e)})") from None
    pol.set_training_mode(False)
    return pol, state
