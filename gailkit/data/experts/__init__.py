"""Experts: loading experts (SB3 zips or scripted), recording demos; `experts.training`: training SB3 PPO experts."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gailkit import __version__, config
from gailkit.config import EnvConfig, ExpertConfig
from gailkit.config.envid import same_env
from gailkit.core import fsutil, textparse
from gailkit.core import obs as obs_tree
from gailkit.core.errors import EnvError, ExpertError, GailkitError
from gailkit.data import demos, envs
from gailkit.data.demos import stacks
from gailkit.data.experts import zoo
from gailkit.model.spaces import in_box_dtype

REPO_EXPERTS = Path(__file__).resolve().parents[3] / "experts"  # gailkit/data/experts/ -> the project
Policy = Callable[[np.ndarray], Any]


def slug(env_id: str) -> str:
    """`CartPole-v1` -> `cartpole`; `seals/CartPole-v0` -> `seals_cartpole`; `pkg.mod:Cls` -> `cls`."""
    name = env_id.rsplit(":", 1)[-1]
    name = re.sub(r"-v\d+$", "", name)
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def settings_dirs() -> list[Path]:
    """Where per-env YAML settings are looked up: the project's own experts/ only. A folder of the same
    name in the current folder is never read unless named (`--config FILE`)."""
    return [REPO_EXPERTS.resolve()] if REPO_EXPERTS.is_dir() else []


def find_settings(env_id: str, kind: str) -> Path | None:
    """The YAML file of `kind` ('expert' or 'gail') whose `env.id` is `env_id`, if any."""
    for d in settings_dirs():
        for f in sorted(d.glob(f"*.{kind}.yaml")):
            data = config.read_yaml(f)
            if (data.get("env") or {}).get("id") == env_id:
                return f
    return None


def env_settings(env_id: str) -> EnvConfig:
    """The env as `gailkit train --env ENV_ID` makes it by default: the `env` section of its
    `experts/*.gail.yaml` (kwargs, preprocessing, frame stack), else the id alone."""
    found = find_settings(env_id, "gail")
    data = (config.read_settings(found).get("env") or {}) if found is not None else {}
    return config.from_dict(EnvConfig, {**data, "id": env_id}, f"{found}: env" if found else "env")


def expert_config(env_id: str, config_file: str | None = None, overrides: Sequence[str] = ()) -> ExpertConfig:
    """Defaults, then the env's YAML in experts/, then `config_file`, then `--set` overrides."""
    layers = [("--env", {"env": {"id": env_id}})]
    found = find_settings(env_id, "expert")
    if found is not None:
        layers.insert(0, (str(found), config.read_settings(found)))
    if config_file:
        layers.append((config_file, config.read_settings(config_file)))
    return config.build(ExpertConfig, layers, overrides)


def load_expert(
    spec: str,
    env_id: str | None,
    deterministic: bool,
    vecnormalize_file: str | Path | None = None,
    env_for: Callable[[str], EnvConfig] | None = None,
) -> tuple[Policy | Scripted, str, dict]:
    """`(policy, env_id, info)` for an SB3 zip, an rl-zoo3 log folder (`logs/ALGO/ENV_N/`), a scripted
    expert name of the env, or module:function. `vecnormalize_file`: the zip's VecNormalize statistics
    (default: found beside it, `vecnormalize.find`). A zip's network is checked against the env as it will
    be played, `env_for(env_id)` (default `env_settings`: preprocessing and frame stack as `train` makes
    the env; an Atari expert trained on stacked 84x84 frames needs them)."""
    path = Path(spec)
    typed = env_id is not None  # a code env may load only when the user typed it (files are data)
    if path.is_dir():
        path, folder_env = zoo.model(path)
        env_id = env_id or folder_env
    if path.suffix == ".zip":
        if not path.is_file():
            raise ExpertError(f"--expert {spec}: no such file")
        meta_path = path.with_suffix(".json")
        try:
            info = textparse.loads_json(fsutil.read_regular(meta_path, 16 << 20)) if meta_path.exists() else {}
        except (OSError, ValueError, GailkitError) as e:
            raise ExpertError(f"{meta_path}: not readable JSON ({e})") from None
        info = info if isinstance(info, dict) else {}
        file_env = info.get("env_id") if isinstance(info.get("env_id"), str) else None
        if env_id and file_env and not same_env(env_id, file_env):
            raise ExpertError(f"--expert {spec} was trained on {file_env}, not {env_id}")
        env_id = env_id or file_env
        if not env_id:
            raise ExpertError(f"--expert {spec}: no {meta_path.name} beside it naming its env; pass --env")
        obs_space, act_space = envs.spaces((env_for or env_settings)(env_id), allow_code=typed, source=str(meta_path))
        from gailkit.model import policy

        try:
            pol = policy.read_sb3_zip(path, obs_space, act_space)
        except ValueError as e:
            raise ExpertError(str(e)) from None
        from gailkit.data.experts import vecnormalize

        stats_path = Path(vecnormalize_file) if vecnormalize_file else vecnormalize.find(path)
        stats = None if stats_path is None else vecnormalize.read(stats_path, obs_space)
        if stats is not None:
            vecnormalize.apply(pol, stats)
            info = {**info, "vecnormalize": str(stats_path)}
        return _policy_actor(pol, deterministic), env_id, info
    if not env_id:
        raise ExpertError(f"--expert {spec}: pass --env for a scripted expert")
    scripted = envs.scripted_experts(env_id)
    if spec in scripted:
        return Scripted(scripted[spec]), env_id, {"scripted": spec}
    if ":" in spec:
        try:
            fn = envs.load_user_attr(spec, flag="--expert")
        except EnvError as e:
            raise ExpertError(str(e)) from None
        if not callable(fn):
            raise ExpertError(f"--expert {spec}: {type(fn).__name__} is not callable (obs -> action)")
        return fn, env_id, {"scripted": spec}
    names = ", ".join(sorted(scripted)) or "none"
    raise ExpertError(
        f"--expert {spec}: not a .zip file, nor a scripted expert of {env_id} (it has: {names}), nor module:function"
    )


def _policy_actor(pol: Any, deterministic: bool) -> Policy:
    """One observation -> the action the env is given, through SB3's own `predict` (any policy class:
    scaling of squashed actions, clipping to the Box bounds, channels-first frames all as SB3 does)."""

    def one(obs: Any) -> Any:
        actions, _ = pol.predict(obs_tree.tmap(lambda v: np.asarray(v)[None], obs), deterministic=deterministic)
        return actions[0]

    return one


class Scripted:
    """A non-neural expert from `envs/`: `factory(env) -> policy`, bound to the env it drives.

    A factory may carry `env_kwargs` (e.g. `{"controller": "actuated"}`: the simulator's own
    controller drives and the env reports its choice as `info["expert_action"]`).
    """

    def __init__(self, factory: Callable):
        self.factory = factory
        self.env_kwargs: dict[str, Any] = dict(getattr(factory, "env_kwargs", {}))

    def bind(self, env: Any) -> Policy:
        return self.factory(env)


def record_demos(
    spec: str,
    env_id: str | None,
    episodes: int,
    seed: int,
    sample: bool = False,
    log: Callable[[str], None] = lambda line: None,
    vecnormalize_file: str | Path | None = None,
    preprocess: str | None = None,
    frame_stack: int | None = None,
    max_episode_steps: int | None = None,
) -> demos.Demos:
    """Demos of an expert with the expert policy's own return in their metadata, recorded on the env with
    `preprocess` and `frame_stack` (`EnvConfig`'s; None: as `env_settings` has them, i.e. as `train`
    makes the env; with a stack, the file holds one frame a step).

    Deterministic by default: the demos then show the policy whose return is the reference.
    With `sample`, actions are drawn from the expert's distribution, and its deterministic return
    is measured on other seeds (`seed + 100000 + i`) for the metadata.
    """
    allow_code = env_id is not None
    from_zoo: dict[str, Any] = {}
    if Path(spec).is_dir():  # an rl-zoo3 folder: its config.yml names the wrappers the expert saw
        from_zoo, others = zoo.pipeline(Path(spec))
        if others:
            log(f"expert: its config.yml names env wrappers gailkit does not apply: {', '.join(others)[:200]}")
        if from_zoo:
            log(f"expert: {spec} trained with {', '.join(f'{k} {v}' for k, v in from_zoo.items())} (its config.yml)")
    typed = {"preprocess": preprocess, "frame_stack": frame_stack, "max_episode_steps": max_episode_steps}
    picked = {**from_zoo, **{k: v for k, v in typed.items() if v is not None}}  # flags over the folder's

    def env_for(name: str) -> EnvConfig:
        env_cfg = env_settings(name)
        return config.from_dict(EnvConfig, {**config.to_dict(env_cfg), **picked}, "env") if picked else env_cfg

    pol, env_name, info = load_expert(spec, env_id, not sample, vecnormalize_file, env_for)
    if "vecnormalize" in info:
        log(f"expert: {spec} with the observation statistics of {info['vecnormalize']} (VecNormalize)")
    env_cfg = env_for(env_name)
    d = record(pol, env_cfg, episodes, seed, source=spec, allow_code=allow_code)
    reference = d.episode_returns()
    if sample:
        det, _, _ = load_expert(spec, env_name, True, vecnormalize_file, env_for)
        reference = record(det, env_cfg, max(10, min(episodes, 50)), seed + 100_000, spec, allow_code).episode_returns()
    assert reference is not None, "recorded episodes always carry their returns"
    d.meta.expert_return, d.meta.expert_return_std = float(reference.mean()), float(reference.std())
    d.meta.expert_episodes, d.meta.sampled = len(reference), sample
    return d


def record(
    policy: Policy | Scripted, env_cfg: EnvConfig | str, episodes: int, seed: int, source: str, allow_code: bool = True
) -> demos.Demos:
    """Roll out `policy` for `episodes` episodes seeded `seed + i`; every transition with its reward.

    Where the env reports `info["expert_action"]` (its own controller drove), that is the action recorded.
    """
    if episodes < 1:
        raise ExpertError(f"--episodes must be >= 1, got {episodes}")
    env_cfg = EnvConfig(id=env_cfg) if isinstance(env_cfg, str) else env_cfg
    extra = policy.env_kwargs if isinstance(policy, Scripted) else {}
    env = envs.make_factory(dataclasses.replace(env_cfg, kwargs={**env_cfg.kwargs, **extra}), allow_code)()
    # with a frame stack the expert sees the stack; the file holds one frame a step (stacks.rebuild reads it back)
    frame = (lambda o: np.asarray(o)[-1]) if env_cfg.frame_stack > 1 else (lambda o: o)
    try:  # what the file will hold, known before anything is recorded (a Dict with a frame stack: one line)
        stored = demos.space_to_json(stacks.stored_space(env.observation_space, env_cfg.frame_stack))
    except BaseException:
        env.close()
        raise
    if isinstance(policy, Scripted):
        policy = policy.bind(env)
    cols: dict[str, list] = {
        k: [] for k in ("obs", "acts", "next_obs", "terminated", "truncated", "rews", "episode_id", "step")
    }
    try:
        for ep in range(episodes):
            obs, _ = env.reset(seed=seed + ep)
            env.action_space.seed(seed + ep)
            t, done = 0, False
            while not done:
                act = np.asarray(in_box_dtype(env.action_space, np.asarray(policy(obs))))  # what the env gets
                next_obs, r, term, trunc, info = env.step(envs.step_action(act))
                if "expert_action" in info:
                    act = np.asarray(info["expert_action"])
                for k, v in zip(cols, (frame(obs), act, frame(next_obs), term, trunc, r, ep, t)):
                    cols[k].append(v)
                obs, t, done = next_obs, t + 1, term or trunc
        meta = demos.DemoMeta(
            env_id=env_cfg.id,
            observation_space=stored,
            action_space=demos.space_to_json(env.action_space),
            source=source,
            gailkit_version=__version__,
            recorded_with=" ".join(
                f"env.{k}={v}" for k, v in (("preprocess", env_cfg.preprocess), ("frame_stack", env_cfg.frame_stack))
                if v not in ("none", 1)
            ) or None,
        )  # fmt: skip
    finally:
        env.close()
    return demos.Demos(
        obs=obs_tree.stack(cols["obs"]),
        acts=np.stack(cols["acts"]),
        next_obs=obs_tree.stack(cols["next_obs"]),
        terminated=np.array(cols["terminated"], bool),
        truncated=np.array(cols["truncated"], bool),
        rews=np.array(cols["rews"], np.float32),
        episode_id=np.array(cols["episode_id"], np.int64),
        step=np.array(cols["step"], np.int64),
        meta=meta,
    )


from gailkit.data.experts.training import make_vec_env, train_expert  # noqa: E402, F401  (re-exports)
