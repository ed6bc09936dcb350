"""`gailkit train`: builds everything from the config, loops GAIL rounds, evaluates, checkpoints.

Run directory: config.yaml (resolved), metrics.csv, tensorboard/, checkpoints/round_*.pt,
best/checkpoint.pt (best deterministic evaluation: highest return, or lowest action error where the
env has a scripted expert, since there the return says nothing), final/checkpoint.pt.
"""

from __future__ import annotations

import csv
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch as th

from gailkit import checkpoint, config, demos, envs, experts, policy
from gailkit.config import TrainConfig
from gailkit.discriminator import Discriminator, choose_reward_fn
from gailkit.errors import ConfigError
from gailkit.fleet import FleetError, InProcessFleet
from gailkit.generator import Generator
from gailkit.learner import ExpertData, Learner

METRIC_COLUMNS = [
    "round", "env_steps", "time/elapsed_s", "time/fps", "time/collect_s", "time/reward_s", "time/ppo_s", "time/disc_s",
    "rollout/ep_rew_mean", "rollout/ep_len_mean", "disc/loss", "disc/acc_expert", "disc/acc_gen", "disc/entropy",
    "disc/reward_mean", "time/eval_s", "train/policy_gradient_loss", "train/value_loss", "train/entropy_loss", "train/approx_kl",
    "train/clip_fraction", "train/explained_variance", "train/std", "eval/return_mean", "eval/return_std",
    "eval/normalized", "eval/action_error", "time/learn_s", "time/env_steps_per_s", "time/learn_rate_mb_s",
    "actors/live", "actors/restarts", "actors/dropped", "actors/refused", "actors/wait_s", "actors/sample_s",
    "actors/fragments_per_s", "actors/fragment_mb", "actors/policy_lag",
]
KEEP_CHECKPOINTS = 3


def train_config(env_id: str | None, demos_path: str | None, config_file: str | None, overrides: list[str]) -> TrainConfig:
    """Defaults, then the env's `experts/*.gail.yaml`, then `config_file`, then flags and `--set`."""
    layers: list[tuple[str, dict]] = []
    file_data = config.read_yaml(config_file) if config_file else {}
    env_id = env_id or (file_data.get("env") or {}).get("id")
    if env_id:
        found = experts.find_settings(env_id, "gail")
        if found is not None:
            layers.append((str(found), config.read_yaml(found)))
    if config_file:
        layers.append((config_file, file_data))
    flags: dict[str, Any] = {}
    if env_id:
        flags["env"] = {"id": env_id}
    if demos_path:
        flags["demos"] = demos_path
    layers.append(("flags", flags))
    return config.build(TrainConfig, layers, overrides)


def resolve_device(name: str) -> th.device:
    if name == "auto":
        return th.device("cuda" if th.cuda.is_available() else "cpu")
    try:
        device = th.device(name)
    except RuntimeError:
        raise ConfigError(f"'device': unknown device {name!r} (auto, cpu, cuda, cuda:N)") from None
    if device.type == "cuda" and not th.cuda.is_available():
        raise ConfigError(f"'device': {name} asked for, but torch sees no CUDA device (use --device auto or cpu)")
    return device


def check_settings(cfg: TrainConfig) -> None:
    """Impossible settings fail here, before anything is built."""
    p, d = cfg.ppo, cfg.disc
    positive = {"total_steps": cfg.total_steps, "n_envs": cfg.n_envs, "envs_per_actor": cfg.envs_per_actor, "ppo.n_steps": p.n_steps,
                "ppo.batch_size": p.batch_size, "ppo.n_epochs": p.n_epochs, "disc.demo_batch_size": d.demo_batch_size,
                "eval_episodes": cfg.eval_episodes}
    for key, value in positive.items():
        if value < 1:
            raise ConfigError(f"'{key}' must be >= 1, got {value}")
    if cfg.actors < 0:
        raise ConfigError(f"'actors' must be >= 0, got {cfg.actors}")
    if cfg.max_policy_lag not in (0, 1):
        raise ConfigError(f"'max_policy_lag' must be 0 or 1, got {cfg.max_policy_lag}")
    if cfg.max_policy_lag and (cfg.actors == 0 or cfg.fleet == "ray"):
        raise ConfigError("'max_policy_lag: 1' needs actor processes ('actors' >= 1, 'fleet: local')")
    if cfg.fleet == "ray" and cfg.actors == 0:
        raise ConfigError("'fleet: ray' needs 'actors' >= 1 (the number of Ray actors)")
    if cfg.listen and cfg.actors == 0:
        raise ConfigError("'listen' needs 'actors' >= 1 (the number of fragment slots per round)")
    n_envs = total_envs(cfg)
    if p.batch_size > p.n_steps * n_envs:
        raise ConfigError(f"'ppo.batch_size' {p.batch_size} exceeds a round's n_steps * envs = {p.n_steps * n_envs}")
    if not 0 < p.gamma <= 1 or not 0 <= p.gae_lambda <= 1:
        raise ConfigError(f"'ppo.gamma' and 'ppo.gae_lambda' must lie in (0, 1], got {p.gamma} and {p.gae_lambda}")
    if p.use_sde:
        raise ConfigError("'ppo.use_sde': gSDE is not supported by the GAIL generator; set it to false")
    if not d.use_action and not d.use_next_state:
        raise ConfigError("'disc.use_action' and 'disc.use_next_state' are both false: the discriminator would see only obs")


def total_envs(cfg: TrainConfig) -> int:
    return cfg.actors * cfg.envs_per_actor if cfg.actors else cfg.n_envs


def make_fleet(cfg: TrainConfig):
    if cfg.actors == 0:
        return InProcessFleet(cfg.env, cfg.ppo, cfg.normalize_obs, cfg.n_envs, cfg.seed)
    if cfg.fleet == "ray":
        try:
            from gailkit.fleet.ray_fleet import RayFleet
        except ImportError:
            raise ConfigError("'fleet: ray' needs Ray: pip install 'gailkit[ray]'") from None
        return RayFleet(cfg.env, cfg.ppo, cfg.normalize_obs, cfg.actors, cfg.envs_per_actor, cfg.seed,
                        cfg.ray_address, no_actor_timeout=cfg.no_actor_timeout)
    from gailkit.fleet.zmq_fleet import ZmqFleet

    local = cfg.local_actors if cfg.local_actors >= 0 else (0 if cfg.listen else cfg.actors)
    return ZmqFleet(cfg.env, cfg.ppo, cfg.normalize_obs, cfg.actors, cfg.envs_per_actor, cfg.seed, local,
                    listen=cfg.listen or "tcp://127.0.0.1:0", key_file=cfg.key_file or None,
                    heartbeat_timeout=cfg.heartbeat_timeout, no_actor_timeout=cfg.no_actor_timeout,
                    max_policy_lag=cfg.max_policy_lag)


def _rng_state(rng: np.random.Generator) -> dict[str, Any]:
    np_state = np.random.get_state()
    return {"learner": rng.bit_generator.state, "torch": th.get_rng_state(), "python": random.getstate(),
            "numpy_global": [np_state[0], th.as_tensor(np_state[1].astype(np.int64)), *np_state[2:]],
            "cuda": th.cuda.get_rng_state_all() if th.cuda.is_available() else []}


def _set_rng_state(rng: np.random.Generator, s: dict[str, Any]) -> None:
    rng.bit_generator.state = s["learner"]
    th.set_rng_state(s["torch"])
    random.setstate(s["python"])
    g = s["numpy_global"]
    np.random.set_state((g[0], g[1].numpy().astype(np.uint32), *g[2:]))
    if s["cuda"] and th.cuda.is_available():
        th.cuda.set_rng_state_all(s["cuda"])


class _Metrics:
    """metrics.csv (one row per round) and TensorBoard scalars."""

    def __init__(self, run_dir: Path, resume_round: int | None):
        self.path = run_dir / "metrics.csv"
        if resume_round is not None and self.path.exists():  # drop rounds after the checkpoint
            with open(self.path) as f:
                rows = [r for r in csv.DictReader(f) if int(r["round"]) <= resume_round]
        else:
            rows = []
        self.file = open(self.path, "w", newline="")
        self.writer = csv.DictWriter(self.file, fieldnames=METRIC_COLUMNS, extrasaction="ignore")
        self.writer.writeheader()
        self.writer.writerows(rows)
        from torch.utils.tensorboard import SummaryWriter

        self.tb = SummaryWriter(str(run_dir / "tensorboard"))

    def write(self, stats: dict[str, float]) -> None:
        self.writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in stats.items()})
        self.file.flush()
        for key, value in stats.items():
            if "/" in key:
                self.tb.add_scalar(key, value, int(stats["env_steps"]))

    def close(self) -> None:
        self.file.close()
        self.tb.close()


def _expert_return(d: demos.Demos) -> float | None:
    returns = d.episode_returns()
    return float(returns.mean()) if returns is not None and len(returns) else None


def train(cfg: TrainConfig, run_dir: str | Path, resume: bool = False, quiet: bool = False,
          log: Callable[[str], None] = print) -> dict[str, Any]:
    """Train GAIL per `cfg` into `run_dir`; with `resume`, continue from its newest checkpoint."""
    run_dir = Path(run_dir)
    check_settings(cfg)
    device = resolve_device(cfg.device)
    obs_space, act_space = envs.spaces(cfg.env)
    expert_demos = demos.load(cfg.demos, env_id=cfg.env.id, spaces=(obs_space, act_space),
                              unsafe_pickle=cfg.unsafe_pickle)
    state = checkpoint.load(checkpoint.latest(run_dir), device) if resume else None

    th.manual_seed(cfg.seed)
    np.random.seed(cfg.seed)
    random.seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    terminated_fraction = float(expert_demos.terminated.sum()) / max(1, expert_demos.n_episodes)
    reward_fn = choose_reward_fn(cfg.disc.reward_fn, terminated_fraction)
    generator = Generator(obs_space, act_space, cfg.ppo, cfg.normalize_obs, total_envs(cfg), device, cfg.seed)
    disc = Discriminator(obs_space, act_space, cfg.disc, device, reward_fn)
    expert_acts = policy.env_action(act_space, expert_demos.acts)
    expert = ExpertData(disc.preprocess(expert_demos.obs, expert_acts, expert_demos.next_obs), len(expert_demos))
    if cfg.normalize_obs:
        policy.normalizer(generator.policy).update(th.as_tensor(np.array(expert_demos.obs)))
    learner = Learner(cfg, generator, disc, expert, rng)
    fleet = make_fleet(cfg)

    scripted = envs.scripted_experts(cfg.env.id).get("scripted")
    expert_action = scripted(None) if scripted is not None else None
    eval_seed = cfg.seed + 1_000_000
    r_expert = _expert_return(expert_demos)
    act_space.seed(eval_seed)
    r_random = envs.run_episodes(lambda obs: act_space.sample(), cfg.env, cfg.eval_episodes, eval_seed)["return_mean"]
    best = -np.inf

    run_dir.mkdir(parents=True, exist_ok=True)
    config.save_yaml(cfg, run_dir / "config.yaml")
    fleet.start()
    if state is not None:
        generator.load_state_dict(state["generator"])
        disc.load_state_dict(state["discriminator"])
        learner.version, learner.env_steps = int(state["round"]), int(state["env_steps"])
        fleet.load_state(state["fleet"])
        _set_rng_state(rng, state["rng"])
        best = float(state["best_return"])
    metrics = _Metrics(run_dir, learner.version if state is not None else None)

    def snapshot() -> dict[str, Any]:
        return {"round": learner.version, "env_steps": learner.env_steps, "config": config.to_dict(cfg),
                "generator": generator.state_dict(), "discriminator": disc.state_dict(), "fleet": fleet.state(),
                "rng": _rng_state(rng), "best_return": best,  # the best score (return, or -action error) "reward_fn": reward_fn,
                "spaces": {"observation": demos.space_to_json(obs_space), "action": demos.space_to_json(act_space)}}

    def save_checkpoint() -> Path:
        path = checkpoint.save(run_dir / "checkpoints" / f"round_{learner.version:06d}.pt", snapshot())
        for old in sorted((run_dir / "checkpoints").glob("round_*.pt"))[:-KEEP_CHECKPOINTS]:
            old.unlink()
        return path

    def evaluate() -> dict[str, float]:
        generator.policy.set_training_mode(False)
        out = envs.run_episodes(policy.deterministic_actor(generator.policy), cfg.env, cfg.eval_episodes, eval_seed, expert_action)
        stats = {f"eval/{k}": v for k, v in out.items() if k in ("return_mean", "return_std", "action_error")}
        if r_expert is not None and r_expert != r_random:
            stats["eval/normalized"] = (out["return_mean"] - r_random) / (r_expert - r_random)
        return stats

    from tqdm import tqdm

    bar = None if quiet else tqdm(total=cfg.total_steps, initial=min(learner.env_steps, cfg.total_steps),
                                  unit="step", dynamic_ncols=True, leave=False)
    say = (lambda s: bar.write(s)) if bar is not None else (lambda s: None)
    log(f"gailkit train: {cfg.env.id}, {len(expert_demos)} expert transitions ({expert_demos.n_episodes} episodes, "
        f"return {r_expert if r_expert is None else round(r_expert, 1)}), random return {r_random:.1f}, "
        f"reward {reward_fn}, device {device}, run {run_dir}" + (f", resuming at round {learner.version}" if state else ""))
    interrupted, last_eval, start_time = False, {}, time.perf_counter()
    start_steps = learner.env_steps
    try:
        while learner.env_steps < cfg.total_steps:
            t0 = time.perf_counter()
            frags = fleet.collect(learner.weights(), cfg.ppo.n_steps)
            collect_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            stats = learner.round(frags)
            learn_s = time.perf_counter() - t0
            elapsed = time.perf_counter() - start_time
            round_steps = sum(f.n_steps * f.n_envs for f in frags)
            stats.update(fleet.stats)
            stats.update({"time/learn_s": learn_s, "time/env_steps_per_s": round_steps / max(collect_s, 1e-9),
                          "time/learn_rate_mb_s": sum(_nbytes(f) for f in frags) / 2**20 / max(learn_s, 1e-9),"round": learner.version, "env_steps": learner.env_steps, "time/collect_s": collect_s,
                          "time/elapsed_s": elapsed, "time/fps": (learner.env_steps - start_steps) / max(elapsed, 1e-9)})
            done = learner.env_steps >= cfg.total_steps
            if (cfg.eval_every and learner.version % cfg.eval_every == 0) or done:
                t0 = time.perf_counter()
                last_eval = evaluate()
                last_eval["time/eval_s"] = time.perf_counter() - t0
                stats.update(last_eval)
                score = -last_eval["eval/action_error"] if "eval/action_error" in last_eval else last_eval["eval/return_mean"]
                if score > best:
                    best = score
                    checkpoint.save(run_dir / "best" / "checkpoint.pt", snapshot())
            metrics.write(stats)
            if bar is not None:
                bar.update(min(learner.env_steps, cfg.total_steps) - bar.n)
                bar.set_postfix(fps=f"{stats['time/fps']:.0f}", acc_e=f"{stats.get('disc/acc_expert', 0):.2f}",
                                acc_g=f"{stats.get('disc/acc_gen', 0):.2f}",
                                eval=f"{last_eval.get('eval/return_mean', float('nan')):.1f}")
            say(_round_line(stats))
            if cfg.checkpoint_every and learner.version % cfg.checkpoint_every == 0:
                save_checkpoint()
    except KeyboardInterrupt:
        interrupted = True
        log(f"interrupted at round {learner.version}: saving a checkpoint")
    except FleetError as e:
        path = save_checkpoint()
        fleet.stop()
        raise FleetError(f"{e}; checkpoint {path} saved, continue with gailkit train --resume {run_dir}") from None
    finally:
        if bar is not None:
            bar.close()
        metrics.close()
    save_checkpoint()
    if not interrupted:
        checkpoint.save(run_dir / "final" / "checkpoint.pt", snapshot())
    fleet.stop()
    summary = {"run_dir": str(run_dir), "rounds": learner.version, "env_steps": learner.env_steps,
               "interrupted": interrupted, "expert_return": r_expert, "random_return": r_random,
               "seconds": time.perf_counter() - start_time, "reward_fn": reward_fn,
               **{k.split("/")[1]: v for k, v in last_eval.items() if k.startswith("eval/")}}
    return summary


def _nbytes(f) -> int:
    return sum(getattr(f, name).nbytes for name in ("obs", "acts", "next_obs", "log_probs", "rews", "terminated", "truncated"))


def _round_line(s: dict[str, Any]) -> str:
    parts = [f"round {s['round']:>4}", f"steps {s['env_steps']:>8,}", f"fps {s['time/fps']:6.0f}",
             f"disc acc {s.get('disc/acc_expert', float('nan')):.2f}/{s.get('disc/acc_gen', float('nan')):.2f}"]
    if "rollout/ep_rew_mean" in s:
        parts.append(f"true return {s['rollout/ep_rew_mean']:8.1f}")
    if "eval/return_mean" in s:
        parts.append(f"eval {s['eval/return_mean']:8.1f}")
    if "actors/live" in s:
        parts.append(f"actors {s['actors/live']:.0f} (restarts {s.get('actors/restarts', 0):.0f}, "
                     f"dropped {s.get('actors/dropped', 0):.0f})")
    if "eval/action_error" in s:
        parts.append(f"action error {s['eval/action_error']:.3f}")
    return " | ".join(parts)
