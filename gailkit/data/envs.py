"""Resolving `--env` names and making envs.

A name is a gymnasium id (the project's `envs/` package and `seals` are imported first so their
ids are known), or code the user names: `module:Class` or `path/file.py:Class`. Code is loaded
only with `allow_code` (names the user typed); env names read from files (checkpoints, run
configs, ONNX metadata, an expert's .json) come with `allow_code=False` unless the user passed
the same `--env`. A class is checked to be a `gymnasium.Env` subclass before it is called.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from gailkit.config import EnvConfig
from gailkit.core.errors import EnvError, first_line
from gailkit.data.env_wrappers import Checked
from gailkit.data.env_wrappers import wrapped as _wrapped
from gailkit.model.spaces import in_box_dtype

PROJECT_ENVS = "gailkit_envs"  # the project's envs/ folder, as installed (never a top-level `envs`)


def import_project_envs() -> None:
    """Import the project's `envs/` package, installed as `gailkit_envs` (registers its ids); absent is fine."""
    try:
        importlib.import_module(PROJECT_ENVS)
    except ModuleNotFoundError as e:
        if e.name != PROJECT_ENVS:
            raise


def scripted_experts(env_id: str) -> dict[str, Callable]:
    """Named non-neural experts the project's `envs/` package offers for `env_id`."""
    import_project_envs()
    module = sys.modules.get(PROJECT_ENVS)
    return dict(getattr(module, "SCRIPTED_EXPERTS", {}).get(env_id, {}))


def observation_expert(env_id: str) -> Callable | None:
    """The env's scripted expert as `action(obs)`, when it acts from the observation alone (the action
    error of a policy is measured against it); None for envs without one or experts that read the env."""
    scripted = scripted_experts(env_id).get("scripted")
    return None if scripted is None or getattr(scripted, "reads_env", False) else scripted(None)


_MISSING = object()


def load_user_attr(spec: str, flag: str = "--env") -> Any:
    """`module:attr` or `path/file.py:attr`, as typed by the user (imports, so runs, that code); `attr`
    may be dotted (`Class.expert`), as an entry point's object reference is."""
    target, _, attr = spec.rpartition(":")
    if not target or not attr:
        raise EnvError(f"{flag} {spec}: expected module:NAME or path/file.py:NAME")
    if target.endswith(".py") or "/" in target:
        path = Path(target)
        if not path.is_file():
            raise EnvError(f"{flag} {spec}: no such file {path}")
        mod_name = f"gailkit_user_{abs(hash(str(path.resolve())))}"
        module = sys.modules.get(mod_name)
        if module is None:
            loader_spec = importlib.util.spec_from_file_location(mod_name, path)
            if loader_spec is None or loader_spec.loader is None:
                raise EnvError(f"{flag} {spec}: {path} is not a Python file")
            module = importlib.util.module_from_spec(loader_spec)
            sys.modules[mod_name] = module
            try:
                loader_spec.loader.exec_module(module)
            except Exception as e:  # the user's own code failed to import: say where, in one line
                del sys.modules[mod_name]
                raise EnvError(f"{flag} {spec}: importing {path} failed ({type(e).__name__}: {e})") from None
    else:
        try:
            module = importlib.import_module(target)
        except ImportError as e:
            raise EnvError(f"{flag} {spec}: cannot import module '{target}' ({e})") from None
    value: Any = module
    for i, part in enumerate(attr.split(".")):  # `Class.method`, as an entry point names an attribute
        value = getattr(value, part, _MISSING) if part else _MISSING
        if value is _MISSING:
            where = f"module '{target}'" if i == 0 else f"'{'.'.join(attr.split('.')[:i])}' in module '{target}'"
            raise EnvError(f"{flag} {spec}: {where} has no attribute '{part}'")
    return value


from gailkit.config.envid import canonical, same_env  # noqa: E402, F401  (re-exports)


def _load_class(name: str) -> type:
    cls = load_user_attr(name)
    if not (isinstance(cls, type) and issubclass(cls, gym.Env)):
        raise EnvError(f"--env {name}: {getattr(cls, '__name__', cls)!s} is not a gymnasium.Env subclass")
    return cls


_ALE_LEGACY = re.compile(r"[A-Z][A-Za-z]*(-ram)?(NoFrameskip|Deterministic)?-v[04]")
"""ale-py's older ids (`PongNoFrameskip-v4`, what rl-zoo3's Atari experts were trained on), registered
with its `ALE/...-v5` ones."""


def _is_registered(name: str) -> bool:
    wanted = (
        ("seals", name.startswith("seals/"), None),
        ("ale_py", name.startswith("ALE/"), f"--env {name}: Atari envs need ale-py: pip install 'gailkit[atari]'"),
        ("ale_py", _ALE_LEGACY.fullmatch(name) is not None, None),  # not Atari's, maybe: no error without ale-py
    )
    for module, needed, missing in wanted:
        if needed and name not in gym.registry:
            try:
                gym.register_envs(importlib.import_module(module))
            except ImportError:
                if missing:
                    raise EnvError(missing) from None
    return name in gym.registry


def make_factory(cfg: EnvConfig | str, allow_code: bool = True, source: str = "") -> Callable[[], gym.Env]:
    """A zero-argument callable that builds a fresh env for `cfg` (fails now if it cannot resolve).

    `allow_code=False` (an env name read from `source`, a file the user did not type) resolves
    gymnasium ids and `envs/` names only.
    """
    if isinstance(cfg, str):
        cfg = EnvConfig(id=cfg)
    name, kwargs = cfg.id, dict(cfg.kwargs)
    if not isinstance(name, str) or not name:
        raise EnvError("no env given: pass --env NAME (a gymnasium id, a name from envs/, module:Class)")
    import_project_envs()
    if cfg.preprocess == "atari":
        entry = str(gym.spec(name).entry_point) if _is_registered(name) else ""
        if not entry.startswith("ale_py"):
            raise EnvError(f"--env {name}: env.preprocess atari is for Atari envs (ALE/...), and {name} is not one")
        if kwargs.get("frameskip", 1) != 1:
            raise EnvError(f"--env {name}: env.preprocess atari skips frames itself; drop env.kwargs.frameskip")
        kwargs["frameskip"] = 1  # AtariPreprocessing's frame skip replaces the env's own
    if _is_registered(name):
        return _RegisteredFactory(name, kwargs, cfg)
    if ":" in name:
        if not allow_code:
            raise EnvError(
                f"{source or 'a file'} names the env {name!r}, which is code (module:Class); gailkit loads "
                f"code only from a name you type: pass --env {name} if you trust it"
            )
        _load_class(name)  # fail now, with a clear error, if it cannot load
        return _ClassFactory(name, kwargs, cfg)
    close = difflib.get_close_matches(name, list(gym.registry), n=4, cutoff=0.5)
    hint = f" (close matches: {', '.join(close)})" if close else ""
    raise EnvError(
        f"unknown env '{name}'{hint}; give a gymnasium id, a name registered by envs/, "
        "module:Class or path/file.py:Class"
    )


class _RegisteredFactory:
    def __init__(self, name: str, kwargs: dict[str, Any], cfg: EnvConfig):
        self.name, self.kwargs, self.cfg = name, kwargs, cfg

    def __call__(self) -> gym.Env:
        # The limit counts the agent's steps. Atari's preprocessing steps the env 4 frames at a time, so there
        # the limit wraps the preprocessed env; elsewhere gym.make sets it (replacing the registered one).
        n, atari = self.cfg.max_episode_steps, self.cfg.preprocess == "atari"
        limit: dict[str, Any] = {"max_episode_steps": n} if n and not atari else {}
        try:
            env = gym.make(self.name, **self.kwargs, **limit)
        except (TypeError, ValueError) as e:
            raise EnvError(f"--env {self.name}: bad env kwargs {self.kwargs} ({e})") from None
        except gym.error.DependencyNotInstalled as e:
            raise EnvError(f"--env {self.name}: {first_line(e)}") from None
        env = _wrapped(Checked(env, self.name), self.cfg)
        return check_spaces(gym.wrappers.TimeLimit(env, n) if n and atari else env, self.name)


class _ClassFactory:
    """Holds the name, not the class, so it pickles to worker processes (SB3's SubprocVecEnv)."""

    def __init__(self, name: str, kwargs: dict[str, Any], cfg: EnvConfig):
        self.name, self.kwargs, self.cfg = name, kwargs, cfg

    def __call__(self) -> gym.Env:
        cls = _load_class(self.name)
        try:
            env = cls(**self.kwargs)
        except (TypeError, ValueError) as e:
            raise EnvError(f"--env {self.name}: cannot construct with kwargs {self.kwargs} ({e})") from None
        env = Checked(env, self.name)  # innermost: what the user's class returns, before any wrapper unpacks it
        if self.cfg.max_episode_steps:
            env = gym.wrappers.TimeLimit(env, self.cfg.max_episode_steps)
        return check_spaces(_wrapped(env, self.cfg), self.name)


def check_spaces(env: gym.Env, name: str) -> gym.Env:
    """`env`, once its spaces are ones gailkit handles end to end; else closed, and one line naming the
    space (before anything is recorded or trained)."""
    from gailkit.model import spaces as supported

    obs, act = env.observation_space, env.action_space
    problem = ""
    try:
        supported.check_space(obs)
        supported.check_action_space(act)
    except supported.UnsupportedSpace as e:
        problem = str(e)
    if problem:
        env.close()
        raise EnvError(f"--env {name}: {problem}")
    return env


def make_env(cfg: EnvConfig | str, seed: int | None = None, allow_code: bool = True) -> gym.Env:
    """One env, reset once with `seed` when given so its RNG is seeded."""
    env = make_factory(cfg, allow_code)()
    if seed is not None:
        env.reset(seed=seed)
        env.action_space.seed(seed)
    return env


def spaces(cfg: EnvConfig | str, allow_code: bool = True, source: str = "") -> tuple[gym.Space, gym.Space]:
    """The (observation, action) spaces of an env, from one throwaway instance."""
    env = make_factory(cfg, allow_code, source)()
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()


def step_action(action: Any, action_space: gym.Space | None = None) -> Any:
    """What `env.step` is given: a Box action in the Box's dtype (`in_box_dtype`: an integer Box's
    rounded), a 0-d array as a plain number (envs such as FrozenLake index tables with a Discrete action,
    and a 0-d array is not hashable); anything else as it is."""
    if action_space is not None:
        action = in_box_dtype(action_space, action)
    if isinstance(action, np.ndarray) and action.ndim == 0:
        return action.item()
    return action


def run_episodes(
    act: Callable[[np.ndarray], Any],
    env_cfg,
    episodes: int,
    seed: int,
    expert_action: Callable | None = None,
    allow_code: bool = True,
) -> dict[str, Any]:
    """Episodes of `act` seeded `seed + i`: mean/std return, and the mean absolute action error
    against `expert_action(obs)` when given (a scripted expert)."""
    env = make_factory(env_cfg, allow_code)()
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
                obs, r, term, trunc, _ = env.step(step_action(a, env.action_space))
                total, steps, done = total + float(r), steps + 1, term or trunc
            returns.append(total)
            lengths.append(steps)
    finally:
        env.close()
    out: dict[str, Any] = {
        "return_mean": float(np.mean(returns)),
        "return_std": float(np.std(returns)),
        "length_mean": float(np.mean(lengths)),
        "length_std": float(np.std(lengths)),
        "returns": [float(r) for r in returns],
    }
    if errors:
        out["action_error"] = float(np.mean(errors))
    return out
