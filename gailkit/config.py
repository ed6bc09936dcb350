"""Settings as plain dataclasses: YAML files, `--set key=value` overrides, strict type checks."""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml

from gailkit.errors import ConfigError

T = TypeVar("T")


@dataclasses.dataclass
class EnvConfig:
    id: str = ""
    """Env name: a gymnasium id, a name registered by `envs/`, `module:Class` or `file.py:Class`."""
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Keyword arguments passed to the env's constructor."""


@dataclasses.dataclass
class PPOConfig:
    """PPO settings under stable-baselines3's names (see `stable_baselines3.PPO`)."""

    learning_rate: float = 3e-4
    n_steps: int = 2048
    """Steps per env per rollout."""
    batch_size: int = 64
    n_epochs: int = 10
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_range: float = 0.2
    ent_coef: float = 0.0
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    normalize_advantage: bool = True
    use_sde: bool = False
    sde_sample_freq: int = -1
    linear_schedule: bool = False
    """Decay learning_rate and clip_range linearly to 0 (rl-zoo3's `lin_` prefix)."""
    target_kl: float | None = None
    """Stop an update's epochs early once the approximate KL passes 1.5 x this (SB3's target_kl)."""
    net_arch: list[int] = dataclasses.field(default_factory=lambda: [64, 64])
    """Hidden layers of the policy network."""
    vf_arch: list[int] = dataclasses.field(default_factory=list)
    """Hidden layers of the value network (empty: the same as `net_arch`)."""
    activation: Literal["tanh", "relu", "elu", "leaky_relu", "gelu", "silu"] = "tanh"
    log_std_init: float = 0.0
    ortho_init: bool = True


@dataclasses.dataclass
class ExpertConfig:
    """How `gailkit expert train` trains an SB3 PPO expert."""

    env: EnvConfig = dataclasses.field(default_factory=EnvConfig)
    total_timesteps: int = 100_000
    n_envs: int = 8
    seed: int = 0
    eval_episodes: int = 20
    normalize_obs: bool = False
    """Normalize observations with SB3's VecNormalize while training; the statistics are then copied
    into the policy network (`NormalizedFlatten`), so the saved expert takes raw observations."""
    normalize_reward: bool = False
    """Scale rewards by VecNormalize's running return statistics while training (rl-zoo3's `normalize`)."""
    ppo: PPOConfig = dataclasses.field(default_factory=PPOConfig)


@dataclasses.dataclass
class DiscConfig:
    """The GAIL discriminator: an MLP with running input normalization (see `discriminator`)."""

    net: Literal["gailkit", "imitation"] = "gailkit"
    """gailkit's own network, or imitation's `BasicRewardNet` (same layout; needs gailkit[imitation])."""
    net_arch: list[int] = dataclasses.field(default_factory=lambda: [32, 32])
    use_action: bool = True
    use_next_state: bool = False
    """Feed `next_obs` too; with `use_action: false` and this on, the discriminator is state-only."""
    disc_lr: float = 3e-4
    demo_batch_size: int = 256
    """Expert transitions per discriminator batch (the same number of generator transitions join them)."""
    n_disc_updates_per_round: int = 4
    grad_penalty: float = 0.0
    """Weight of the gradient penalty `(||grad D(x)|| - 1)^2` on expert/generator interpolates."""
    ent_coef: float = 0.0
    """Entropy bonus on the discriminator's Bernoulli output (Ho & Ermon's `entcoeff`)."""
    spectral_norm: bool = False
    """Spectral normalization of every linear layer (Miyato et al. 2018): a 1-Lipschitz discriminator."""
    label_smoothing: float = 0.0
    """One-sided label smoothing: expert labels are 1 - this (Salimans et al. 2016)."""
    absorbing: bool = False
    """Absorbing states after terminations (DAC): the discriminator also judges "the episode ended here"."""
    reward_fn: Literal["auto", "gail", "airl", "negative"] = "auto"
    """Generator reward from logit l: gail = -log(1 - D) >= 0 (pays for surviving), negative =
    log D <= 0 (pays for ending), airl = l = log D - log(1 - D). auto: gail when most expert
    episodes end by time limit, airl when most end by termination."""


@dataclasses.dataclass
class TrainConfig:
    """How `gailkit train` runs GAIL."""

    env: EnvConfig = dataclasses.field(default_factory=EnvConfig)
    demos: str = "data"
    """A demo file or folder; a folder serves only the files for `env.id`."""
    unsafe_pickle: bool = False
    """Unpickle demo files with the plain unpickler (only for files you trust)."""
    seed: int = 0
    total_steps: int = 150_000
    """Env steps to collect in all."""
    device: str = "auto"
    """Learner device: auto (CUDA when present), cpu, cuda, cuda:N."""
    n_envs: int = 8
    """Envs stepped by the in-process fleet (`actors: 0`)."""
    actors: int = 0
    """Fragment slots per round filled by actor processes (each `envs_per_actor` envs); 0: in-process."""
    fleet: Literal["local", "ray"] = "local"
    """Who runs the actors: local (processes here, plus remote ones with `listen`) or ray."""
    ray_address: str = ""
    """With `fleet: ray`: the cluster to join (`auto`); empty starts a local Ray."""
    envs_per_actor: int = 8
    local_actors: int = -1
    """Actor processes to start on this machine; -1: `actors` without `listen`, else 0."""
    listen: str = ""
    """Where the learner listens for actors, e.g. tcp://0.0.0.0:5555 (needs key_file beyond loopback)."""
    key_file: str = ""
    """CURVE key file from `gailkit keys generate`; actors must present its client key."""
    max_policy_lag: int = 0
    """0: round v trains only on fragments of weights v. 1: actors collect round v + 1 with weights v
    while the learner trains round v (PPO's ratio uses the fragments' behaviour log-probs)."""
    heartbeat_timeout: float = 10.0
    """Seconds of silence after which an actor counts as dead and its slot goes to another."""
    no_actor_timeout: float = 60.0
    """Seconds with no live actor after which training checkpoints and stops with an error."""
    normalize_obs: bool = True
    """Running observation normalization inside the policy (seeded from the expert's observations)."""
    eval_every: int = 10
    """Rounds between evaluations (0: only at the end)."""
    eval_episodes: int = 10
    checkpoint_every: int = 50
    """Rounds between checkpoints (0: only at the end)."""
    ppo: PPOConfig = dataclasses.field(default_factory=PPOConfig)
    disc: DiscConfig = dataclasses.field(default_factory=DiscConfig)


# ---------------------------------------------------------------------------------------------
# Generic machinery: dict <-> dataclass with full-path errors.


def to_dict(cfg: Any) -> dict[str, Any]:
    """A plain, YAML-safe dict of a config dataclass."""
    return dataclasses.asdict(cfg)


def from_dict(cls: type[T], data: Any, path: str = "") -> T:
    """Build `cls` from `data`, failing on unknown keys and wrong types with the key's full path."""
    if not isinstance(data, dict):
        raise ConfigError(f"{path or 'config'}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in data.items():
        full = f"{path}.{key}" if path else str(key)
        if key not in names:
            raise ConfigError(f"unknown setting '{full}'{_did_you_mean(str(key), names)}")
        kwargs[key] = _coerce(hints[key], value, full)
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{path or 'config'}: {e}") from None


def merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge `update` into a copy of `base`; mappings merge, everything else replaces."""
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def parse_override(text: str) -> tuple[list[str], Any]:
    """`a.b=value` -> (["a", "b"], value parsed as YAML)."""
    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected KEY=VALUE, e.g. --set ppo.n_steps=256")
    key, raw = text.split("=", 1)
    keys = key.strip().split(".")
    if not all(keys):
        raise ConfigError(f"--set {text!r}: empty key segment in {key!r}")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return keys, value


def nest(keys: list[str], value: Any) -> dict[str, Any]:
    out: dict[str, Any] = {keys[-1]: value}
    for key in reversed(keys[:-1]):
        out = {key: out}
    return out


def read_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read config file ({e.strerror})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        line = f" line {where.line + 1}" if where else ""
        raise ConfigError(f"{path}:{line} not valid YAML ({getattr(e, 'problem', e)})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of settings at the top, got {type(data).__name__}")
    return data


def build(
    cls: type[T],
    layers: typing.Sequence[tuple[str, dict[str, Any]]] = (),
    overrides: typing.Sequence[str] = (),
) -> T:
    """Defaults of `cls`, then each `(source, mapping)` layer, then `--set` overrides, validated.

    An error in a layer names its source (a file path) and the key's full path.
    """
    data = to_dict(cls())
    for source, layer in layers:
        data = merge(data, layer)
        try:
            from_dict(cls, data)
        except ConfigError as e:
            raise ConfigError(f"{source}: {e}") from None
    for text in overrides:
        keys, value = parse_override(text)
        _check_path(cls, keys)
        data = merge(data, nest(keys, value))
    return from_dict(cls, data)


def save_yaml(cfg: Any, path: str | Path) -> None:
    """Write a config as YAML, atomically."""
    from gailkit import fsutil

    fsutil.atomic_write_text(Path(path), yaml.safe_dump(to_dict(cfg), sort_keys=False))


def _check_path(cls: type, keys: list[str]) -> None:
    full = ""
    current: Any = cls
    for key in keys:
        full = f"{full}.{key}" if full else key
        if not (isinstance(current, type) and dataclasses.is_dataclass(current)):
            return  # inside a free-form mapping (env kwargs): anything goes
        names = [f.name for f in dataclasses.fields(current)]
        if key not in names:
            raise ConfigError(f"unknown setting '{full}'{_did_you_mean(key, names)}")
        current = typing.get_type_hints(current)[key]


def _did_you_mean(key: str, names: list[str]) -> str:
    close = difflib.get_close_matches(key, names, n=3, cutoff=0.6)
    return f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else f" (known: {', '.join(names)})"


def _coerce(tp: Any, value: Any, path: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(arg, value, path)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[0] if errors else f"'{path}': bad value {value!r}")
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"'{path}': expected one of {', '.join(map(repr, args))}, got {value!r}")
        return value
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, path)
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"'{path}': expected a list, got {value!r}")
        return [_coerce(args[0] if args else Any, v, f"{path}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"'{path}': expected a mapping, got {value!r}")
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"'{path}': expected true or false, got {value!r}")
    if tp in (int, float):
        number = value
        if isinstance(value, str):  # YAML 1.1 reads `1e5` as a string
            try:
                number = float(value)
            except ValueError:
                pass
        if isinstance(number, bool) or not isinstance(number, (int, float)):
            raise ConfigError(f"'{path}': expected {'an integer' if tp is int else 'a number'}, got {value!r}")
        if tp is int:
            if float(number) != int(number):
                raise ConfigError(f"'{path}': expected an integer, got {value!r}")
            return int(number)
        return float(number)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"'{path}': expected a string, got {value!r}")
        return value
    raise AssertionError(f"unsupported config type {tp!r} at {path}")
