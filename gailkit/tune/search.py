"""What a search is (`Search`, saved as OUT/tune.yaml), its space of settings, and reading both back
as strictly as the flags that made them: a tune folder is data, and never opens a door."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

from gailkit import config
from gailkit.config import TrainConfig
from gailkit.core.errors import ConfigError

DISTRIBUTIONS = {"choice": 1, "uniform": 2, "loguniform": 2, "randint": 2, "grid": 1}


@dataclasses.dataclass
class Search:
    """What `gailkit tune` was asked for; saved as OUT/tune.yaml so `--resume` needs nothing else."""

    base: dict[str, Any]
    space: dict[str, dict[str, list]]
    trials: int = 8
    budget: int = 100_000
    seeds: int = 1
    scheduler: str = "asha"
    search: str = "random"
    resources: dict[str, float] = dataclasses.field(default_factory=lambda: {"cpu": 1.0, "gpu": 0.0})


def read_space(path: str | Path, base: TrainConfig) -> dict[str, dict[str, list]]:
    """`KEY: {DISTRIBUTION: ARGS}` per line of a YAML file; keys are settings as for `--set`."""
    return parse_space(config.read_yaml(path), str(path), base)


def parse_space(data: Any, source: str, base: TrainConfig) -> dict[str, dict[str, list]]:
    if not data or not isinstance(data, dict):
        raise ConfigError(f"{source}: no settings to search")
    out = {}
    for key, spec in data.items():
        if not isinstance(spec, dict) or len(spec) != 1:
            raise ConfigError(f"{source}: '{key}' must map one distribution to its arguments, e.g. {{loguniform: [1e-5, 1e-3]}}")
        (dist, args), = spec.items()
        args = args if isinstance(args, list) else [args]
        if dist not in DISTRIBUTIONS:
            raise ConfigError(f"{source}: '{key}': unknown distribution {dist!r} (known: {', '.join(DISTRIBUTIONS)})")
        if DISTRIBUTIONS[dist] == 2 and len(args) != 2:
            raise ConfigError(f"{source}: '{key}': {dist} takes [low, high], got {args!r}")
        if not args:
            raise ConfigError(f"{source}: '{key}': {dist} needs at least one value")
        if DISTRIBUTIONS[dist] == 2:
            low, high = args
            if isinstance(low, bool) or isinstance(high, bool) or not all(isinstance(v, (int, float)) for v in args) \
                    or not (math.isfinite(low) and math.isfinite(high)) or not low < high or (dist == "loguniform" and low <= 0):
                raise ConfigError(f"{source}: '{key}': {dist} takes finite numbers low < high"
                                  f"{' (both > 0)' if dist == 'loguniform' else ''}, got {args!r}")
            if dist == "randint" and not all(isinstance(v, int) for v in args):
                raise ConfigError(f"{source}: '{key}': randint takes integers, got {args!r}")
        for value in args:  # every listed value, and both bounds of a range, must be a valid setting
            config.build(TrainConfig, [("base", config.to_dict(base))], [f"{key}={value}"])
        out[str(key)] = {dist: list(args)}
    return out


def load_search(path: Path, allow_code_env: str | None = None) -> tuple[Search, bool]:
    """A tune folder's `tune.yaml`, checked as strictly as the flags that made it; doors left out
    (`config.DOORS`). Returns the search and whether its env may be code (`allow_code_env` typed the same)."""
    data = config.read_yaml(path)
    fields = {f.name for f in dataclasses.fields(Search)}
    unknown = sorted(set(data) - fields)
    if unknown or "base" not in data or "space" not in data:
        raise ConfigError(f"{path}: not a gailkit tune.yaml ({'unknown key ' + repr(unknown[0]) if unknown else 'no base or space'})")
    base = config.build(TrainConfig, [(str(path), config.without_doors(data["base"] or {}, str(path)))])
    search = Search(base=config.to_dict(base), space=parse_space(data["space"], str(path), base),
                    **{k: data[k] for k in ("trials", "budget", "seeds", "scheduler", "search") if k in data})
    for name in ("trials", "budget", "seeds"):
        value = getattr(search, name)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1 << 40:
            raise ConfigError(f"{path}: '{name}' must be an integer >= 1, got {value!r}")
    if search.scheduler not in ("asha", "none") or search.search not in ("random", "grid", "optuna"):
        raise ConfigError(f"{path}: unknown scheduler {search.scheduler!r} or search {search.search!r}")
    search.resources = check_resources(data.get("resources", {"cpu": 1.0, "gpu": 0.0}), str(path))
    from gailkit.data import envs

    return search, envs.same_env(allow_code_env, base.env.id)


def check_resources(value: Any, source: str) -> dict[str, float]:
    """Per-trial resources: cpu > 0 and gpu >= 0, finite, nothing else."""
    if not isinstance(value, dict) or set(value) - {"cpu", "gpu"}:
        raise ConfigError(f"{source}: resources take cpu and gpu only, e.g. cpu=1,gpu=0; got {value!r}")
    out = {"cpu": 1.0, "gpu": 0.0}
    for key, v in value.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 or v > 1 << 20:
            raise ConfigError(f"{source}: resources {key}={v!r}: a finite number >= 0")
        out[key] = float(v)
    if out["cpu"] <= 0:
        raise ConfigError(f"{source}: resources cpu={out['cpu']:g}: a trial needs cpu > 0")
    return out


def tune_space(search: Search) -> dict[str, Any]:
    from ray import tune

    make = {"choice": tune.choice, "grid": tune.grid_search, "uniform": lambda a: tune.uniform(*a),
            "loguniform": lambda a: tune.loguniform(*a), "randint": lambda a: tune.randint(a[0], a[1] + 1)}
    space = {}
    for key, spec in search.space.items():
        (dist, args), = spec.items()
        if search.search == "grid" and dist not in ("grid", "choice"):
            raise ConfigError(f"--search grid: '{key}' is {dist}; grid search takes grid or choice lists only")
        if search.search == "optuna" and dist == "grid":
            raise ConfigError(f"--search optuna: '{key}' is a grid; Optuna samples, use choice")
        space[key] = make["grid" if search.search == "grid" else dist](args)
    return space
