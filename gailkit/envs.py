"""Resolving `--env` names and making (vector) envs.

A name is, in this order: `module:Class` or `path/file.py:Class`; a gymnasium id (the project's
`envs/` package and `seals` are imported first so their ids are known).
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from gailkit.config import EnvConfig
from gailkit.errors import EnvError


def import_project_envs() -> None:
    """Import the top-level `envs/` package (registers its ids); silently absent is fine."""
    try:
        importlib.import_module("envs")
    except ModuleNotFoundError as e:
        if e.name != "envs":
            raise


def scripted_experts(env_id: str) -> dict[str, Callable]:
    """Named non-neural experts the project's `envs/` package offers for `env_id`."""
    import_project_envs()
    module = sys.modules.get("envs")
    return dict(getattr(module, "SCRIPTED_EXPERTS", {}).get(env_id, {}))


def _load_class(name: str) -> type:
    target, _, attr = name.rpartition(":")
    if target.endswith(".py") or "/" in target:
        path = Path(target)
        if not path.is_file():
            raise EnvError(f"--env {name}: no such file {path}")
        mod_name = f"gailkit_user_env_{abs(hash(str(path.resolve())))}"
        module = sys.modules.get(mod_name)
        if module is None:
            spec = importlib.util.spec_from_file_location(mod_name, path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[mod_name] = module
            spec.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(target)
        except ModuleNotFoundError as e:
            raise EnvError(f"--env {name}: cannot import module '{target}' ({e})") from None
    cls = getattr(module, attr, None)
    if cls is None:
        raise EnvError(f"--env {name}: module '{target}' has no attribute '{attr}'")
    return cls


def _is_registered(name: str) -> bool:
    if name.startswith("seals/"):
        try:
            importlib.import_module("seals")
        except ImportError:
            pass
    return name in gym.registry


def make_factory(cfg: EnvConfig | str) -> Callable[[], gym.Env]:
    """A zero-argument callable that builds a fresh env for `cfg` (fails now if it cannot resolve)."""
    if isinstance(cfg, str):
        cfg = EnvConfig(id=cfg)
    name, kwargs = cfg.id, dict(cfg.kwargs)
    if not name:
        raise EnvError("no env given: pass --env NAME (a gymnasium id, a name from envs/, module:Class)")
    import_project_envs()
    if _is_registered(name):
        return _RegisteredFactory(name, kwargs)
    if ":" in name:
        _load_class(name)  # fail now, with a clear error, if it cannot load
        return _ClassFactory(name, kwargs)
    close = difflib.get_close_matches(name, list(gym.registry), n=4, cutoff=0.5)
    hint = f" (close matches: {', '.join(close)})" if close else ""
    raise EnvError(
        f"unknown env '{name}'{hint}; give a gymnasium id, a name registered by envs/, "
        "module:Class or path/file.py:Class"
    )


class _RegisteredFactory:
    def __init__(self, name: str, kwargs: dict[str, Any]):
        self.name, self.kwargs = name, kwargs

    def __call__(self) -> gym.Env:
        try:
            return gym.make(self.name, **self.kwargs)
        except TypeError as e:
            raise EnvError(f"--env {self.name}: bad env kwargs {self.kwargs} ({e})") from None


class _ClassFactory:
    """Holds the name, not the class, so it pickles to worker processes (SB3's SubprocVecEnv)."""

    def __init__(self, name: str, kwargs: dict[str, Any]):
        self.name, self.kwargs = name, kwargs

    def __call__(self) -> gym.Env:
        cls = _load_class(self.name)
        try:
            env = cls(**self.kwargs)
        except TypeError as e:
            raise EnvError(f"--env {self.name}: cannot construct with kwargs {self.kwargs} ({e})") from None
        if not isinstance(env, gym.Env):
            raise EnvError(f"--env {self.name}: {cls.__name__} is not a gymnasium.Env")
        return env


def make_env(cfg: EnvConfig | str, seed: int | None = None) -> gym.Env:
    """One env, reset once with `seed` when given so its RNG is seeded."""
    env = make_factory(cfg)()
    if seed is not None:
        env.reset(seed=seed)
        env.action_space.seed(seed)
    return env


def spaces(cfg: EnvConfig | str) -> tuple[gym.Space, gym.Space]:
    """The (observation, action) spaces of an env, from one throwaway instance."""
    env = make_factory(cfg)()
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()


def make_vec_env(cfg: EnvConfig | str, n_envs: int, seed: int, monitor: bool = True):
    """An SB3 `DummyVecEnv` of `n_envs` envs seeded `seed + i` (episode stats via `Monitor`)."""
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    factory = make_factory(cfg)

    def thunk():
        env = factory()
        return Monitor(env) if monitor else env

    venv = DummyVecEnv([thunk] * n_envs)
    venv.seed(seed)
    return venv


def run_episodes(act: Callable[[np.ndarray], Any], env_cfg, episodes: int, seed: int,
                 expert_action: Callable | None = None) -> dict[str, Any]:
    """Episodes of `act` seeded `seed + i`: mean/std return, and the mean absolute action error
    against `expert_action(obs)` when given (a scripted expert)."""
    env = make_factory(env_cfg)()
    returns, lengths, errors = [], [], []
    try:
        for i in range(episodes):
            obs, _ = env.reset(seed=seed + i)
            env.action_space.seed(seed + i)
            total, steps, done = 0.0, 0, False
            while not done:
                a = act(obs)
                if expert_action is not None:
                    errors.append(float(np.abs(np.asarray(a) - expert_action(obs)).mean()))
                obs, r, term, trunc, _ = env.step(a)
                total, steps, done = total + float(r), steps + 1, term or trunc
            returns.append(total)
            lengths.append(steps)
    finally:
        env.close()
    out: dict[str, Any] = {"return_mean": float(np.mean(returns)), "return_std": float(np.std(returns)),
                           "length_mean": float(np.mean(lengths)), "length_std": float(np.std(lengths)),
                           "returns": [float(r) for r in returns]}
    if errors:
        out["action_error"] = float(np.mean(errors))
    return out
