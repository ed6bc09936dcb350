"""Training SB3 experts (`gailkit expert train`): PPO with VecNormalize's statistics baked into the policy,
or A2C, SAC, TD3, DQN with SB3's own defaults (`--algo`)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from gailkit import __version__, config
from gailkit.config import EnvConfig, ExpertConfig
from gailkit.core import cpu, fsutil
from gailkit.core.errors import ConfigError, first_line
from gailkit.data import envs


def make_vec_env(cfg: EnvConfig | str, n_envs: int, seed: int, monitor: bool = True, allow_code: bool = True):
    """An SB3 `DummyVecEnv` of `n_envs` envs seeded `seed + i` (episode stats via `Monitor`)."""
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    factory = envs.make_factory(cfg, allow_code)

    def thunk():
        env = factory()
        return Monitor(env) if monitor else env

    venv = DummyVecEnv([thunk] * n_envs)
    venv.seed(seed)
    return venv


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


def train_expert(
    cfg: ExpertConfig, out: Path, device: str = "cpu", log: Callable[[str], None] = print, quiet: bool = False
) -> dict:
    """Train an SB3 PPO expert, evaluate it, save `out` (.zip) and `out.json` atomically.

    With `normalize_obs`, VecNormalize's observation statistics are copied into the policy's
    `NormalizedFlatten` at the end, so the saved policy takes raw observations like gailkit's own.
    """
    from stable_baselines3.common.vec_env import VecNormalize

    from gailkit.model import policy  # imports torch and SB3: only when an expert is trained

    if cfg.algo != "ppo":
        return _train_other(cfg, out, device, log, quiet)

    if cfg.ppo.batch_size > cfg.ppo.n_steps * cfg.n_envs:
        raise ConfigError(
            f"'ppo.batch_size' {cfg.ppo.batch_size} exceeds n_steps * n_envs = {cfg.ppo.n_steps * cfg.n_envs}"
        )
    venv = make_vec_env(cfg.env, cfg.n_envs, cfg.seed)
    if cfg.normalize_obs or cfg.normalize_reward:
        venv = VecNormalize(
            venv,
            norm_obs=cfg.normalize_obs,
            norm_reward=cfg.normalize_reward,
            gamma=cfg.ppo.gamma,
            clip_obs=10.0,
            epsilon=1e-8,
        )
    model = policy.make_ppo(venv, cfg.ppo, cfg.policy, normalize_obs=False, device=device, seed=cfg.seed)
    start = time.perf_counter()
    rollout = cfg.ppo.n_steps * cfg.n_envs
    steps = -(-cfg.total_timesteps // rollout) * rollout  # SB3 collects whole rollouts
    rounded = (
        ""
        if steps == cfg.total_timesteps
        else (
            f" = {steps:,} (total_timesteps {cfg.total_timesteps:,} rounded up to whole rollouts of {cfg.n_envs} envs x "
            f"{cfg.ppo.n_steps} steps)"
        )
    )
    log(f"training PPO expert on {cfg.env.id} for {cfg.total_timesteps:,} steps ({cfg.n_envs} envs){rounded}")
    _learn(model, cfg.total_timesteps, quiet)
    seconds = time.perf_counter() - start
    if cfg.normalize_obs:
        rms = venv.obs_rms
        ext = policy.normalizer(model.policy)
        ext.set_stats(rms.mean, rms.var, rms.count)
        ext.normalize = True
        model.policy_kwargs["features_extractor_kwargs"]["normalize"] = True  # what the zip records
    model.policy.set_training_mode(False)
    return _evaluate_and_save(model, policy.deterministic_actor(model.policy), "PPO", cfg, out, seconds, venv)


def _learn(model: Any, total_timesteps: int, quiet: bool) -> None:
    """SB3's `learn()` with a logger that writes nowhere (without one, SB3 makes a logger of its own and, with it,
    an empty `SB3-<time>` folder in the system's temp folder on every call), and the learner's thread rule
    (`core.cpu`; frames keep every core): a TD3 expert's 300 steps on 2 cores took 2.4 s with one thread and 5.3 s
    with torch's default of two beside one busy process, 2.7 s and 1.8 s alone (`bench/learner_threads.py
    --expert td3`); beside the test suite and a benchmark, 3 s and 94 s."""
    import torch as th
    from stable_baselines3.common.logger import Logger

    from gailkit.model.spaces import has_images

    threads = cpu.learner_threads(-1, frames=has_images(model.observation_space, "auto"))
    if threads is not None:
        th.set_num_threads(threads)
    model.set_logger(Logger(folder=None, output_formats=[]))
    model.learn(total_timesteps=total_timesteps, callback=_progress_callback(total_timesteps, quiet))


def _evaluate_and_save(
    model: Any, act: Callable[[Any], Any], name: str, cfg: ExpertConfig, out: Path, seconds: float, venv: Any
) -> dict:
    """The expert's deterministic return over `eval_episodes` fresh seeds, then its zip (as SB3 saves it)
    and `out.json` (that return, the settings), each written atomically."""
    returns = envs.run_episodes(act, cfg.env, cfg.eval_episodes, seed=cfg.seed + 10_000)
    info = {
        "env_id": cfg.env.id,
        "algo": f"{name} (stable-baselines3)",
        "mean_return": returns["return_mean"],
        "std_return": returns["return_std"],
        "eval_episodes": cfg.eval_episodes,
        "eval_seed": cfg.seed + 10_000,
        "deterministic": True,
        "train_seconds": round(seconds, 1),
        "gailkit_version": __version__,
        "config": config.to_dict(cfg),
    }
    with fsutil.atomic_path(out, suffix=".zip") as tmp:
        model.save(tmp)  # SB3 leaves replay buffers out of its zips
    fsutil.atomic_write_text(out.with_suffix(".json"), json.dumps(info, indent=2) + "\n")
    venv.close()
    return info


ALGOS = {"a2c": "A2C", "sac": "SAC", "td3": "TD3", "dqn": "DQN"}


def _sb3_policy(venv: Any) -> tuple[str, dict[str, Any]]:
    """SB3's policy kind for the env's observations, and policy kwargs it needs: MultiInputPolicy for a Dict,
    CnnPolicy for frames, else MlpPolicy. SB3's NatureCNN needs 36 pixels a side: smaller frames are flattened
    (MlpPolicy), and a Dict holding one gets gailkit's encoder (one per entry, a small CNN for such frames; it
    scales frames itself), which gailkit reads back from the zip."""
    import gymnasium as gym
    from stable_baselines3.common.preprocessing import is_image_space

    from gailkit.model import encoders

    def big_frame(sub: gym.Space) -> bool:
        return is_image_space(sub) and sorted(sub.shape or (0, 0, 0))[1] >= 36  # height, width: above the channels

    space = venv.observation_space
    if isinstance(space, gym.spaces.Dict):
        if all(big_frame(sub) for sub in space.spaces.values() if is_image_space(sub)):
            return "MultiInputPolicy", {}
        extractor, kwargs = encoders.choose(space, "auto", False, 256)
        return "MultiInputPolicy", dict(
            features_extractor_class=extractor, features_extractor_kwargs=kwargs, normalize_images=False
        )
    return ("CnnPolicy" if big_frame(space) else "MlpPolicy"), {}


def _train_other(cfg: ExpertConfig, out: Path, device: str, log: Callable[[str], None], quiet: bool) -> dict:
    """An SB3 A2C, SAC, TD3 or DQN expert with SB3's defaults (one update per env step for the off-policy
    ones), evaluated with its deterministic actions and saved as SB3 saves it (gailkit reads such zips
    without unpickling)."""
    import stable_baselines3 as sb3

    if cfg.normalize_obs or cfg.normalize_reward:
        raise ConfigError(
            f"'normalize_obs'/'normalize_reward' are for 'algo: ppo' (its statistics are baked into the policy); "
            f"train the {cfg.algo} expert without them"
        )
    name = ALGOS[cfg.algo]
    venv = make_vec_env(cfg.env, cfg.n_envs if cfg.algo == "a2c" else 1, cfg.seed)
    kwargs: dict[str, Any] = {} if cfg.algo == "a2c" else {"gradient_steps": -1}
    kind, policy_kwargs = _sb3_policy(venv)
    if cfg.policy.net_arch:
        policy_kwargs["net_arch"] = list(cfg.policy.net_arch)
    if policy_kwargs:
        kwargs["policy_kwargs"] = policy_kwargs
    try:
        model = getattr(sb3, name)(kind, venv, seed=cfg.seed, device=device, verbose=0, **kwargs)
    except (AssertionError, ValueError) as e:  # SB3 asserts the action space each algorithm takes
        venv.close()
        raise ConfigError(f"'algo: {cfg.algo}' cannot train on {cfg.env.id}: {first_line(e)}") from None
    log(f"training {name} expert on {cfg.env.id} for {cfg.total_timesteps:,} steps ({venv.num_envs} envs)")
    start = time.perf_counter()
    _learn(model, cfg.total_timesteps, quiet)
    seconds = time.perf_counter() - start
    return _evaluate_and_save(
        model, lambda obs: model.predict(obs, deterministic=True)[0], name, cfg, out, seconds, venv
    )
