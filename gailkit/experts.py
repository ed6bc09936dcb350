"""Experts: training SB3 PPO experts, loading experts (SB3 zips or scripted), recording demos."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from gailkit import __version__, config, demos, envs, fsutil
from gailkit.config import EnvConfig, ExpertConfig
from gailkit.errors import ConfigError, ExpertError

REPO_EXPERTS = Path(__file__).resolve().parents[1] / "experts"
Policy = Callable[[np.ndarray], Any]


def slug(env_id: str) -> str:
    """`CartPole-v1` -> `cartpole`; `seals/CartPole-v0` -> `seals_cartpole`; `pkg.mod:Cls` -> `cls`."""
    name = env_id.rsplit(":", 1)[-1]
    name = re.sub(r"-v\d+$", "", name)
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def settings_dirs() -> list[Path]:
    """Where per-env YAML settings are looked up: ./experts, then the project's experts/."""
    dirs = [Path.cwd() / "experts", REPO_EXPERTS]
    return list(dict.fromkeys(d.resolve() for d in dirs if d.is_dir()))


def find_settings(env_id: str, kind: str) -> Path | None:
    """The YAML file of `kind` ('expert' or 'gail') whose `env.id` is `env_id`, if any."""
    for d in settings_dirs():
        for f in sorted(d.glob(f"*.{kind}.yaml")):
            data = config.read_yaml(f)
            if (data.get("env") or {}).get("id") == env_id:
                return f
    return None


def expert_config(env_id: str, config_file: str | None = None, overrides: list[str] = ()) -> ExpertConfig:
    """Defaults, then the env's YAML in experts/, then `config_file`, then `--set` overrides."""
    layers = [("--env", {"env": {"id": env_id}})]
    found = find_settings(env_id, "expert")
    if found is not None:
        layers.insert(0, (str(found), config.read_yaml(found)))
    if config_file:
        layers.append((config_file, config.read_yaml(config_file)))
    return config.build(ExpertConfig, layers, overrides)


def _ppo_kwargs(cfg: ExpertConfig) -> dict[str, Any]:
    from gailkit import policy  # imports torch and SB3: only when an expert is trained

    p = cfg.ppo
    lr, clip = policy.schedules(p)
    return dict(
        learning_rate=lr, n_steps=p.n_steps, batch_size=p.batch_size, n_epochs=p.n_epochs, gamma=p.gamma,
        gae_lambda=p.gae_lambda, clip_range=clip, ent_coef=p.ent_coef, vf_coef=p.vf_coef,
        max_grad_norm=p.max_grad_norm, normalize_advantage=p.normalize_advantage, use_sde=p.use_sde,
        sde_sample_freq=p.sde_sample_freq,
        policy_kwargs=dict(net_arch=list(p.net_arch), activation_fn=policy.ACTIVATIONS[p.activation],
                           log_std_init=p.log_std_init, ortho_init=p.ortho_init),
    )


def train_expert(cfg: ExpertConfig, out: Path, device: str = "cpu", log: Callable[[str], None] = print) -> dict:
    """Train an SB3 PPO expert, evaluate it, save `out` (.zip) and `out.json` atomically."""
    from stable_baselines3 import PPO

    if cfg.ppo.batch_size > cfg.ppo.n_steps * cfg.n_envs:
        raise ConfigError(f"'ppo.batch_size' {cfg.ppo.batch_size} exceeds n_steps * n_envs = {cfg.ppo.n_steps * cfg.n_envs}")
    venv = envs.make_vec_env(cfg.env, cfg.n_envs, cfg.seed)
    model = PPO("MlpPolicy", venv, seed=cfg.seed, device=device, verbose=0, **_ppo_kwargs(cfg))
    start = time.perf_counter()
    log(f"training PPO expert on {cfg.env.id} for {cfg.total_timesteps:,} steps ({cfg.n_envs} envs)")
    model.learn(total_timesteps=cfg.total_timesteps)
    seconds = time.perf_counter() - start
    returns = envs.run_episodes(sb3_policy(model, deterministic=True), cfg.env, cfg.eval_episodes, seed=cfg.seed + 10_000)
    info = {
        "env_id": cfg.env.id, "algo": "PPO (stable-baselines3)",
        "mean_return": returns["return_mean"], "std_return": returns["return_std"],
        "eval_episodes": cfg.eval_episodes, "eval_seed": cfg.seed + 10_000, "deterministic": True,
        "train_seconds": round(seconds, 1), "gailkit_version": __version__, "config": config.to_dict(cfg),
    }
    with fsutil.atomic_path(out, suffix=".zip") as tmp:
        model.save(tmp)
    fsutil.atomic_write_text(out.with_suffix(".json"), json.dumps(info, indent=2) + "\n")
    venv.close()
    return info


def sb3_policy(model: Any, deterministic: bool) -> Policy:
    def act(obs: np.ndarray) -> Any:
        return model.predict(obs, deterministic=deterministic)[0]

    return act


def load_expert(spec: str, env_id: str | None, deterministic: bool) -> tuple[Policy, str, dict]:
    """`(policy, env_id, info)` for an SB3 zip, a scripted expert name of the env, or module:function."""
    path = Path(spec)
    if path.suffix == ".zip":
        if not path.is_file():
            raise ExpertError(f"--expert {spec}: no such file")
        meta_path = path.with_suffix(".json")
        info = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
        file_env = info.get("env_id")
        if env_id and file_env and env_id != file_env:
            raise ExpertError(f"--expert {spec} was trained on {file_env}, not {env_id}")
        env_id = env_id or file_env
        if not env_id:
            raise ExpertError(f"--expert {spec}: no {meta_path.name} beside it naming its env; pass --env")
        from stable_baselines3 import PPO

        try:
            model = PPO.load(path, device="cpu")
        except Exception as e:  # SB3 raises assorted errors for non-SB3 zips
            raise ExpertError(f"--expert {spec}: not a stable-baselines3 PPO zip ({type(e).__name__}: {e})") from None
        return sb3_policy(model, deterministic), env_id, info
    if not env_id:
        raise ExpertError(f"--expert {spec}: pass --env for a scripted expert")
    scripted = envs.scripted_experts(env_id)
    if spec in scripted:
        return Scripted(scripted[spec]), env_id, {"scripted": spec}
    if ":" in spec:
        import importlib

        module, _, attr = spec.partition(":")
        try:
            fn = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as e:
            raise ExpertError(f"--expert {spec}: cannot load ({e})") from None
        return fn, env_id, {"scripted": spec}
    names = ", ".join(sorted(scripted)) or "none"
    raise ExpertError(f"--expert {spec}: not a .zip file, nor a scripted expert of {env_id} (it has: {names}), nor module:function")


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


def record(policy: Policy | Scripted, env_cfg: EnvConfig | str, episodes: int, seed: int, source: str) -> demos.Demos:
    """Roll out `policy` for `episodes` episodes seeded `seed + i`; every transition with its reward.

    Where the env reports `info["expert_action"]` (its own controller drove), that is the action recorded.
    """
    if episodes < 1:
        raise ExpertError(f"--episodes must be >= 1, got {episodes}")
    env_cfg = EnvConfig(id=env_cfg) if isinstance(env_cfg, str) else env_cfg
    extra = policy.env_kwargs if isinstance(policy, Scripted) else {}
    env = envs.make_factory(EnvConfig(id=env_cfg.id, kwargs={**env_cfg.kwargs, **extra}))()
    if isinstance(policy, Scripted):
        policy = policy.bind(env)
    cols: dict[str, list] = {k: [] for k in ("obs", "acts", "next_obs", "terminated", "truncated", "rews", "episode_id", "step")}
    try:
        for ep in range(episodes):
            obs, _ = env.reset(seed=seed + ep)
            env.action_space.seed(seed + ep)
            t, done = 0, False
            while not done:
                act = np.asarray(policy(obs))
                next_obs, r, term, trunc, info = env.step(act)
                if "expert_action" in info:
                    act = np.asarray(info["expert_action"])
                for k, v in zip(cols, (obs, act, next_obs, term, trunc, r, ep, t)):
                    cols[k].append(v)
                obs, t, done = next_obs, t + 1, term or trunc
        meta = demos.DemoMeta(
            env_id=env_cfg.id, observation_space=demos.space_to_json(env.observation_space),
            action_space=demos.space_to_json(env.action_space), source=source, gailkit_version=__version__,
        )
    finally:
        env.close()
    return demos.Demos(
        obs=np.stack(cols["obs"]), acts=np.stack(cols["acts"]), next_obs=np.stack(cols["next_obs"]),
        terminated=np.array(cols["terminated"], bool), truncated=np.array(cols["truncated"], bool),
        rews=np.array(cols["rews"], np.float32), episode_id=np.array(cols["episode_id"], np.int64),
        step=np.array(cols["step"], np.int64), meta=meta,
    )
