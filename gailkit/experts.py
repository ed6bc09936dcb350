"""Experts: training SB3 PPO experts, loading experts (SB3 zips or scripted), recording demos."""

from __future__ import annotations

import ast
import io
import json
import re
import zipfile
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


def _progress_callback(total: int, quiet: bool):
    """An SB3 callback drawing a tqdm bar with the mean training return (SB3's own bar needs `rich`)."""
    from stable_baselines3.common.callbacks import BaseCallback
    from tqdm import tqdm

    class Progress(BaseCallback):
        def _on_training_start(self) -> None:
            self.bar = None if quiet else tqdm(total=total, unit="step", dynamic_ncols=True, leave=False)

        def _on_step(self) -> bool:
            if self.bar is not None and self.num_timesteps - self.bar.n >= 1000:
                self.bar.update(self.num_timesteps - self.bar.n)
                infos = self.model.ep_info_buffer
                if infos:
                    self.bar.set_postfix(ep_return=f"{np.mean([i['r'] for i in infos]):.1f}")
            return True

        def _on_training_end(self) -> None:
            if self.bar is not None:
                self.bar.close()

    return Progress()


def train_expert(cfg: ExpertConfig, out: Path, device: str = "cpu", log: Callable[[str], None] = print,
                 quiet: bool = False) -> dict:
    """Train an SB3 PPO expert, evaluate it, save `out` (.zip) and `out.json` atomically.

    With `normalize_obs`, VecNormalize's observation statistics are copied into the policy's
    `NormalizedFlatten` at the end, so the saved policy takes raw observations like gailkit's own.
    """
    from stable_baselines3.common.vec_env import VecNormalize

    from gailkit import policy  # imports torch and SB3: only when an expert is trained

    if cfg.ppo.batch_size > cfg.ppo.n_steps * cfg.n_envs:
        raise ConfigError(f"'ppo.batch_size' {cfg.ppo.batch_size} exceeds n_steps * n_envs = {cfg.ppo.n_steps * cfg.n_envs}")
    venv = envs.make_vec_env(cfg.env, cfg.n_envs, cfg.seed)
    if cfg.normalize_obs or cfg.normalize_reward:
        venv = VecNormalize(venv, norm_obs=cfg.normalize_obs, norm_reward=cfg.normalize_reward, gamma=cfg.ppo.gamma,
                            clip_obs=10.0, epsilon=1e-8)
    model = policy.make_ppo(venv, cfg.ppo, normalize_obs=False, device=device, seed=cfg.seed)
    start = time.perf_counter()
    log(f"training PPO expert on {cfg.env.id} for {cfg.total_timesteps:,} steps ({cfg.n_envs} envs)")
    model.learn(total_timesteps=cfg.total_timesteps, callback=_progress_callback(cfg.total_timesteps, quiet))
    seconds = time.perf_counter() - start
    if cfg.normalize_obs:
        rms = venv.obs_rms
        ext = policy.normalizer(model.policy)
        ext.set_stats(rms.mean, rms.var, rms.count)
        ext.normalize = True
        model.policy_kwargs["features_extractor_kwargs"]["normalize"] = True  # what the zip records
    model.policy.set_training_mode(False)
    returns = envs.run_episodes(policy.deterministic_actor(model.policy), cfg.env, cfg.eval_episodes,
                                seed=cfg.seed + 10_000)
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
        obs_space, act_space = envs.spaces(env_id)
        pol = read_sb3_zip(path, obs_space, act_space)
        return _policy_actor(pol, deterministic), env_id, info
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


def _policy_actor(pol: Any, deterministic: bool) -> Policy:
    from gailkit import policy

    def one(obs: np.ndarray) -> Any:
        a, _ = policy.act(pol, np.asarray(obs)[None], deterministic=deterministic)
        return policy.env_action(pol.action_space, a)[0]

    return one


_ACTIVATION_CLASSES = {"Tanh": "tanh", "ReLU": "relu", "ELU": "elu", "LeakyReLU": "leaky_relu", "GELU": "gelu", "SiLU": "silu"}


def _field(value: Any) -> Any:
    """A policy_kwargs entry of an SB3 zip: JSON as is, or the repr SB3 stores beside its cloudpickle."""
    if isinstance(value, str):
        try:
            return ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return value
    return value


def read_sb3_zip(path: Path, observation_space: Any, action_space: Any):
    """The policy of a stable-baselines3 PPO/A2C zip, without unpickling anything.

    SB3's own `PPO.load` runs cloudpickle on fields of the zip, which can run code. Here the
    weights come from `policy.pth` through `torch.load(weights_only=True)`, the architecture from
    the readable copies of `policy_kwargs` SB3 writes beside each pickled field, and the spaces
    from the env; the weights must fit the rebuilt network exactly.
    """
    import torch as th
    from stable_baselines3.common.policies import ActorCriticPolicy

    from gailkit import policy

    try:
        with zipfile.ZipFile(path) as z:
            data = json.loads(z.read("data"))
            weights = th.load(io.BytesIO(z.read("policy.pth")), map_location="cpu", weights_only=True)
    except (zipfile.BadZipFile, KeyError, OSError, ValueError, RuntimeError, EOFError) as e:
        raise ExpertError(f"{path}: not a readable stable-baselines3 zip ({type(e).__name__}: {str(e).splitlines()[0]})") from None
    if not isinstance(data, dict) or "ActorCriticPolicy.__init__" not in str((data.get("policy_class") or {}).get("__init__", "")):
        raise ExpertError(f"{path}: not a stable-baselines3 PPO/A2C zip with an MlpPolicy (ActorCriticPolicy)")
    shape = _field((data.get("observation_space") or {}).get("_shape"))
    if isinstance(shape, (list, tuple)) and tuple(shape) != tuple(observation_space.shape or ()):
        raise ExpertError(f"{path}: trained on observations of shape {tuple(shape)}, the env has {observation_space.shape}")
    pk = data.get("policy_kwargs") or {}
    kwargs: dict[str, Any] = {}
    net_arch = _field(pk.get("net_arch"))
    if isinstance(net_arch, list) and net_arch and isinstance(net_arch[0], dict):
        net_arch = net_arch[0]  # SB3 < 1.8 wrote [dict(pi=..., vf=...)]
    if net_arch is not None:
        kwargs["net_arch"] = net_arch
    if "activation_fn" in pk:
        name = str(pk["activation_fn"]).rstrip("'>").rsplit(".", 1)[-1]
        if name not in _ACTIVATION_CLASSES:
            raise ExpertError(f"{path}: activation {pk['activation_fn']} is not one gailkit rebuilds ({', '.join(_ACTIVATION_CLASSES)})")
        kwargs["activation_fn"] = policy.ACTIVATIONS[_ACTIVATION_CLASSES[name]]
    for key in ("log_std_init", "full_std", "use_expln", "squash_output", "share_features_extractor"):
        if key in pk:
            kwargs[key] = _field(pk[key])
    extractor = str(pk.get("features_extractor_class", "FlattenExtractor"))
    if "NormalizedFlatten" in extractor:
        kwargs["features_extractor_class"] = policy.NormalizedFlatten
        kwargs["features_extractor_kwargs"] = _field(pk.get("features_extractor_kwargs", {})) or {}
    elif "FlattenExtractor" not in extractor:
        raise ExpertError(f"{path}: features extractor {extractor} is not one gailkit rebuilds")
    try:
        pol = ActorCriticPolicy(observation_space, action_space, lambda _: 0.0, use_sde=bool(data.get("use_sde", False)), **kwargs)
        pol.load_state_dict(weights)
    except (RuntimeError, TypeError, ValueError, AttributeError) as e:
        raise ExpertError(f"{path}: its weights do not fit the network it describes ({str(e).splitlines()[0]})") from None
    pol.set_training_mode(False)
    return pol


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
