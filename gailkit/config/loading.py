"""Settings from YAML files, presets and `--set key=value` overrides into the dataclasses of `schema`, strictly."""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml

from gailkit.config.fields import FieldError
from gailkit.core.errors import ConfigError
from gailkit.core.textparse import load_yaml, shown

T = TypeVar("T")

PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {  # seconds-long runs for tests and smoke checks: tiny nets, short rounds, one eval episode
        "n_envs": 2,
        "eval_episodes": 1,
        "ppo": {"n_steps": 32, "batch_size": 32, "n_epochs": 2},
        "policy": {"net_arch": [16]},
        "disc": {"net_arch": [16], "demo_batch_size": 32, "n_disc_updates_per_round": 2},
        "bc": {"batch_size": 32, "critic_warmup_rounds": 0},
    },
    "fast": {"total_steps": 50_000, "eval_episodes": 5},  # a first look in minutes
    "quality": {"total_steps": 1_000_000, "eval_episodes": 20},  # the MuJoCo budget of BENCHMARKS.md
}
# Settings of gailkit 0.1 that moved into the `fleet` section (read from old runs' config.yaml).
_MOVED_TO_FLEET = tuple(
    "actors envs_per_actor local_actors listen key_file ray_address max_policy_lag heartbeat_timeout "
    "no_actor_timeout".split()
)
# Settings of gailkit 0.2 that describe the network and moved from `ppo` into the `policy` section.
_MOVED_TO_POLICY = ("net_arch", "vf_arch", "activation", "log_std_init", "ortho_init")


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
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]  # T is a dataclass type
    kwargs = {}
    for key, value in data.items():
        full = f"{path}.{key}" if path else str(key)
        if key not in names:
            raise ConfigError(f"unknown setting '{full}'{_did_you_mean(str(key), names)}")
        kwargs[key] = _coerce(hints[key], value, full)
    try:
        return cls(**kwargs)
    except FieldError as e:
        full = f"{path}.{e.field}" if path else e.field
        raise ConfigError(f"'{full}' {e.says}, got {shown(e.value)}") from None
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
        value = load_yaml(raw) if raw.strip() else ""
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
    from gailkit.core import fsutil

    try:
        text = fsutil.read_regular(path, 16 << 20).decode()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read config file ({e.strerror})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a text file") from None
    try:
        data = load_yaml(text)
    except yaml.YAMLError as e:
        line = f" line {where.line + 1}" if (where := getattr(e, "problem_mark", None)) else ""
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
        data = merge(data, migrate(layer, source) if _has_policy(cls) else layer)
        try:
            from_dict(cls, data)
        except ConfigError as e:
            raise ConfigError(f"{source}: {e}") from None
    for text in overrides:
        keys, value = parse_override(text)
        if len(keys) == 2 and keys[0] == "ppo" and keys[1] in _MOVED_TO_POLICY and _has_policy(cls):
            _notice(f"--set {text}: 'ppo.{keys[1]}' is now 'policy.{keys[1]}' (read as such)")
            keys = ["policy", keys[1]]
        _check_path(cls, keys)
        data = merge(data, nest(keys, value))
    return from_dict(cls, data)


def sources(
    cls: type, layers: typing.Sequence[tuple[str, dict[str, Any]]] = (), overrides: typing.Sequence[str] = ()
) -> dict[str, str]:
    """For every setting (dotted key), the layer that gave its value: `default`, a file, a preset, `flags`
    or `--set` (the last one that named it, as `build` applies them)."""

    def leaves(data: Any, prefix: str = "") -> list[str]:
        if not isinstance(data, dict) or not data:
            return [prefix]
        return [
            leaf for key, value in data.items() for leaf in leaves(value, f"{prefix}.{key}" if prefix else str(key))
        ]

    out = dict.fromkeys(leaves(to_dict(cls())), "default")
    for source, layer in layers:
        for key in leaves(layer):
            out[key if key in out else next((k for k in out if key.startswith(k + ".")), key)] = source
    for text in overrides:
        keys, _ = parse_override(text)
        out[".".join(keys)] = f"--set {text}"
    return out


def save_yaml(cfg: Any, path: str | Path) -> None:
    """Write a config as YAML, atomically."""
    from gailkit.core import fsutil

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
        raise ConfigError(errors[0] if errors else f"'{path}': bad value {shown(value)}")
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"'{path}': expected one of {', '.join(map(repr, args))}, got {shown(value)}")
        return value
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return from_dict(tp, value, path)
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"'{path}': expected a list, got {shown(value)}")
        return [_coerce(args[0] if args else Any, v, f"{path}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"'{path}': expected a mapping, got {shown(value)}")
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"'{path}': expected true or false, got {shown(value)}")
    if tp in (int, float):
        number = value
        if isinstance(value, str):  # YAML 1.1 reads `1e5` as a string
            try:
                number = float(value)
            except ValueError:
                pass
        if isinstance(number, bool) or not isinstance(number, (int, float)):
            raise ConfigError(f"'{path}': expected {'an integer' if tp is int else 'a number'}, got {shown(value)}")
        if not math.isfinite(number):
            raise ConfigError(f"'{path}': expected a finite number, got {shown(value)}")
        if tp is int:
            if float(number) != int(number):
                raise ConfigError(f"'{path}': expected an integer, got {shown(value)}")
            return int(number)
        return float(number)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"'{path}': expected a string, got {shown(value)}")
        return value
    raise AssertionError(f"unsupported config type {tp!r} at {path}")


def preset(name: str) -> dict[str, Any]:
    """A named layer of settings (`--preset tiny`)."""
    if name not in PRESETS:
        raise ConfigError(f"--preset {name!r}: unknown preset (known: {', '.join(PRESETS)})")
    return PRESETS[name]


def migrate(data: dict[str, Any], source: str = "settings") -> dict[str, Any]:
    """A TrainConfig (or ExpertConfig) mapping of an older gailkit in today's layout: 0.1's fleet settings
    at the top (`fleet: local|ray`), 0.2's network settings under `ppo` (now `policy`, one notice).
    Anything but a mapping comes back as it is (the reader then names what is wrong)."""
    if not isinstance(data, dict):
        return data
    data = dict(data)
    fleet = data.get("fleet")
    if isinstance(fleet, str) or any(k in data for k in _MOVED_TO_FLEET):
        section = {"kind": fleet} if isinstance(fleet, str) else dict(fleet or {})
        for key in _MOVED_TO_FLEET:
            if key in data:
                section[key] = data.pop(key)
        data["fleet"] = section
    ppo = data.get("ppo")
    if isinstance(ppo, dict) and any(k in ppo for k in _MOVED_TO_POLICY):
        ppo, pol = dict(ppo), data.get("policy")
        pol = dict(pol) if isinstance(pol, dict) else {}
        moved = [k for k in _MOVED_TO_POLICY if k in ppo]
        for key in moved:
            pol.setdefault(key, ppo[key])
            del ppo[key]
        data["ppo"], data["policy"] = ppo, pol
        _notice(
            f"{source}: written by gailkit 0.2; ppo.{', ppo.'.join(moved)} read as policy.* (the network's section)"
        )
    return data


def _has_policy(cls: type) -> bool:
    return dataclasses.is_dataclass(cls) and any(f.name == "policy" for f in dataclasses.fields(cls))


def _notice(line: str) -> None:
    __import__("warnings").warn(line, stacklevel=3)
