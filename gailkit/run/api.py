"""`gailkit.learn`: GAIL from Python objects (an env class or instance, demos as arrays) in one call.

What it adds to `train()`: an env given as an object becomes a name the run can record (a registered
id, or `module:Class` for a class importable from a module; a class defined in a notebook is
registered for this process only, so the run's actors stay in it), and demos given as arrays or a
`Demos` are checked, then written once to a content-addressed Arrow file in the user's cache folder
(`$XDG_CACHE_HOME/gailkit/demos/`), so the run records a path, resumes and evaluates like any other.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from gailkit.core.errors import ConfigError
from gailkit.data import demos as demos_mod
from gailkit.run import train as train_mod
from gailkit.run.callbacks import Callback

_SESSION_PREFIX = "gailkit-session/"


def env_name(env: Any) -> tuple[str, bool]:
    """`(name, in_process_only)` for an env id, a `gymnasium.Env` subclass or an instance of one."""
    if isinstance(env, str):
        return env, env.startswith(_SESSION_PREFIX)
    if isinstance(env, gym.Env):
        spec = getattr(env, "spec", None)
        if spec is not None and spec.id in gym.registry and not spec.kwargs:
            return spec.id, spec.id.startswith(_SESSION_PREFIX)
        env = type(env.unwrapped)
    if not (isinstance(env, type) and issubclass(env, gym.Env)):
        raise ConfigError(f"env: expected an id, a gymnasium.Env subclass or instance, got {type(env).__name__}")
    module, qualname = env.__module__, env.__qualname__
    if module != "__main__" and "<locals>" not in qualname:
        return f"{module}:{qualname}", False
    name = f"{_SESSION_PREFIX}{qualname.replace('.<locals>.', '.')}-v0"
    if name not in gym.registry:
        entry: Any = env
        gym.register(name, entry_point=entry)
    return name, True


def _as_demos(data: Any) -> demos_mod.Demos:
    if isinstance(data, demos_mod.Demos):
        return data
    if not isinstance(data, Mapping):
        raise ConfigError(f"demos: expected a path, a Demos or a dict of arrays, got {type(data).__name__}")
    from gailkit.data.demos.arrow_io import from_columns

    cols = {  # a Dict observation: obs and next_obs as mappings of arrays
        k: {e: np.asarray(a) for e, a in v.items()} if isinstance(v, Mapping) else np.asarray(v)
        for k, v in data.items()
        if v is not None
    }
    missing = [k for k in ("obs", "next_obs") if k not in cols]
    if missing:
        raise ConfigError(f"demos: the dict has no {missing[0]!r} array (has: {', '.join(map(str, data))})")
    return from_columns(cols, demos_mod.DemoMeta(format="arrays", path="<arrays>"), "<arrays>")


def cache_demos(data: Any, env_id: str) -> Path:
    """Arrays or a `Demos`, checked, written once under the cache folder by their content's hash."""
    d = demos_mod.check(_as_demos(data))
    d.meta.env_id = d.meta.env_id or env_id
    digest = hashlib.sha256(env_id.encode())
    for name, arr in sorted(d.columns().items()):
        digest.update(name.encode() + str(arr.dtype).encode() + str(arr.shape).encode())
        digest.update(np.ascontiguousarray(arr).tobytes())
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gailkit" / "demos"
    path = base / f"{digest.hexdigest()[:32]}.arrow"
    if not path.is_file():
        base.mkdir(parents=True, exist_ok=True)
        demos_mod.save(d, path)
    return path


def learn(
    env: Any,
    demos: Any,
    run_dir: str | Path,
    *,
    total_steps: int | None = None,
    preset: str | None = None,
    settings: Sequence[str] = (),
    callbacks: Sequence[Callback] = (),
    resume: bool = False,
    quiet: bool = False,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Train GAIL on `env` from `demos` into `run_dir`; returns `train()`'s summary.

    `env`: an id, a `gymnasium.Env` subclass, or an instance (its class is used). `demos`: a file or
    folder, a `Demos`, or a dict of numpy arrays (`obs`, `next_obs`, optional `acts`, and `terminated`
    plus `truncated`, or `dones`). `settings`: `"key=value"` overrides, as `--set` takes them."""
    name, in_process = env_name(env)
    path = demos if isinstance(demos, (str, Path)) else cache_demos(demos, name)
    overrides = [*settings, *([f"total_steps={total_steps}"] if total_steps is not None else [])]
    cfg = train_mod.train_config(name, str(path), None, overrides, preset)
    if in_process and cfg.fleet.actors:
        raise ConfigError(
            f"env {name}: a class defined in a notebook or function lives in this process only; "
            "set fleet.actors=0, or define it in a module (file.py) to use actor processes"
        )
    return train_mod.train(cfg, run_dir, resume=resume, quiet=quiet, log=log, callbacks=callbacks)
