"""`gailkit evaluate`: returns against the expert and a random policy, a JSON report, PNG plots.

For a run (or one of its checkpoints) the normalized score uses the references the run fixed when
it started (the expert policy's return from the demos' metadata, else the demos' mean return; a
random policy's return over the run's own seeds), so `train` and `evaluate` agree; `--demos`
replaces the expert reference. Report schema (version 3: 2 plus video and stochastic), every field always present (null when
unknown):
  schema, env_id, source, checkpoint, episodes, seed,
  policy: {return_mean, return_std, length_mean, length_std, returns},
  expert: {return_mean, source}       source: "expert policy", "demos" or "unknown"
  random: {return_mean, episodes, seed},
  normalized ((R - R_random) / (R_expert - R_random)), action_error (scripted-expert envs),
  onnx: null or {path, return_mean, return_std, length_mean, length_std, returns},
  plots: [paths],
  video: null or {video (its path), frames, fps, return}   (with --video; the first evaluated episode),
  stochastic: whether actions were sampled (--stochastic) rather than the deterministic ones
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

from gailkit.config import TrainConfig
from gailkit.config.envid import same_env
from gailkit.core import fsutil
from gailkit.core.errors import GailkitError
from gailkit.data import demos, envs
from gailkit.model import policy
from gailkit.run import checkpoint, rundir
from gailkit.run.checkpoint import RANDOM_EPISODES, References

SCHEMA = 3


class EvaluateError(GailkitError):
    """What to evaluate cannot be found or does not fit the env."""


def _load(source: Path, env_id: str | None, which: str, deterministic: bool = True):
    """`(act, env_cfg, allow_code, train_cfg | None, state | None, checkpoint path | None)`."""
    if source.suffix == ".zip":
        from gailkit.data import experts

        act, env_name, _ = experts.load_expert(str(source), env_id, deterministic=deterministic)
        return act, experts.env_settings(env_name), env_name == env_id, None, None, None  # the env train makes
    path = rundir.resolve(source, which)
    pol, state = checkpoint.load_policy(path)
    cfg = state.settings
    if env_id and not same_env(env_id, cfg.env.id):
        raise EvaluateError(f"{source} was trained on {cfg.env.id}, not {env_id}")
    env_cfg = dataclasses.replace(cfg.env, id=env_id) if env_id else cfg.env  # the same env, as typed here
    return policy.deterministic_actor(pol, deterministic), env_cfg, env_id is not None, cfg, state, path


def _episode_stats(out: dict[str, Any]) -> dict[str, Any]:
    return {k: out[k] for k in ("return_mean", "return_std", "length_mean", "length_std", "returns")}


def evaluate(
    source: str | Path,
    env_id: str | None = None,
    episodes: int = 50,
    seed: int = 0,
    onnx_path: str | Path | None = None,
    demos_path: str | None = None,
    plots: bool = True,
    which: str = "best",
    video: str | Path | None = None,
    stochastic: bool = False,
) -> dict[str, Any]:
    source = Path(source)
    if not source.exists():
        raise EvaluateError(f"{source}: no such run directory, checkpoint or expert zip")
    if episodes < 1:
        raise EvaluateError(f"--episodes must be >= 1, got {episodes}")
    if video is not None:
        from gailkit.run import video as video_mod

        video_mod.check_target(video)  # before minutes of evaluation
    act, env_cfg, allow_code, cfg, state, ckpt = _load(source, env_id, which, deterministic=not stochastic)
    obs_space, act_space = envs.spaces(env_cfg, allow_code, source=str(source))
    rows = None
    if plots and source.is_dir() and cfg is not None:  # the run's own files, checked before minutes of episodes
        from gailkit.run.metrics import read_rows

        run = rundir.RunDir(source)
        run.check_own()  # plots/ must not be a link out of the run
        rows = read_rows(run.metrics)
    expert_action = envs.observation_expert(env_cfg.id)
    trained = envs.run_episodes(act, env_cfg, episodes, seed, expert_action, allow_code)
    refs = (
        state.references
        if state is not None
        else checkpoint.random_reference(env_cfg, act_space, RANDOM_EPISODES, seed, allow_code)
    )
    if demos_path or state is None:
        try:
            d = demos.load(
                demos_path or "data", env_id=env_cfg.id, spaces=(obs_space, act_space), frame_stack=env_cfg.frame_stack
            )
            refs.expert_return, refs.expert_source = demos.expert_reference(d)
        except demos.DemoError:
            if demos_path:
                raise
    onnx_stats = None
    if onnx_path is not None:
        from gailkit.inference import OnnxPolicy

        onnx_policy = OnnxPolicy(onnx_path)
        if not same_env(onnx_policy.env_id, env_cfg.id):
            raise EvaluateError(f"{onnx_path} was exported for {onnx_policy.env_id}, not {env_cfg.id}")
        onnx_stats = {
            "path": str(onnx_path),
            **_episode_stats(envs.run_episodes(onnx_policy.predict, env_cfg, episodes, seed, allow_code=allow_code)),
        }
    report = {
        "schema": SCHEMA,
        "video": None,
        "stochastic": stochastic,
        "env_id": env_cfg.id,
        "source": str(source),
        "checkpoint": None if ckpt is None else str(ckpt),
        "episodes": episodes,
        "seed": seed,
        "policy": _episode_stats(trained),
        "expert": {"return_mean": refs.expert_return, "source": refs.expert_source},
        "random": {"return_mean": refs.random_return, "episodes": refs.random_episodes, "seed": refs.random_seed},
        "normalized": refs.normalized(trained["return_mean"]),
        "action_error": trained.get("action_error"),
        "onnx": onnx_stats,
        "plots": [],
    }
    if rows is not None and cfg is not None:
        report["plots"] = _plots(
            source, cfg, obs_space, act_space, env_cfg, episodes, seed, trained, refs, allow_code, rows
        )
    if video is not None:
        report["video"] = video_mod.record(act, env_cfg, video, seed, allow_code)
    return report


def _plots(
    run_dir: Path,
    cfg: TrainConfig,
    obs_space,
    act_space,
    env_cfg,
    episodes,
    seed,
    trained,
    refs: References,
    allow_code: bool,
    rows: list[dict[str, str]],
) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch as th

    th.manual_seed(cfg.seed)
    kind = policy.kind_of(cfg.generator)
    untrained_pol = policy.build(obs_space, act_space, cfg.policy, cfg.normalize_obs, "cpu", kind)
    untrained_pol.set_training_mode(False)
    untrained = envs.run_episodes(
        policy.deterministic_actor(untrained_pol), env_cfg, episodes, seed, allow_code=allow_code
    )
    r_expert = refs.expert_return
    expert_label = f"expert ({refs.expert_source}, {r_expert:.1f})" if r_expert is not None else ""
    out_dir = rundir.RunDir(run_dir).plots
    written = []

    def save(fig, name: str) -> None:
        with fsutil.atomic_path(out_dir / name, suffix=".png") as tmp:
            fig.savefig(tmp, format="png", dpi=100, bbox_inches="tight")
        plt.close(fig)
        written.append(str(out_dir / name))

    fig, ax = plt.subplots(figsize=(6, 4))
    bins = np.histogram_bin_edges(untrained["returns"] + trained["returns"], bins=20).tolist()
    ax.hist(untrained["returns"], bins=bins, alpha=0.6, label=f"untrained ({untrained['return_mean']:.1f})")
    ax.hist(trained["returns"], bins=bins, alpha=0.6, label=f"trained ({trained['return_mean']:.1f})")
    if r_expert is not None:
        ax.axvline(r_expert, color="k", linestyle="--", label=expert_label)
    ax.set(xlabel="episode return", ylabel="episodes", title=f"{env_cfg.id}: returns over {episodes} episodes")
    ax.legend()
    save(fig, "returns_histogram.png")

    steps = [int(r["env_steps"]) for r in rows]

    def series(key):
        pts = [(s, float(r[key])) for s, r in zip(steps, rows) if r.get(key)]
        return ([p[0] for p in pts], [p[1] for p in pts])

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(*series("rollout/ep_rew_mean"), label="training episodes (true return)", alpha=0.7)
    ax.plot(*series("eval/return_mean"), "o-", label="evaluation (deterministic)")
    if r_expert is not None:
        ax.axhline(r_expert, color="k", linestyle="--", label=expert_label)
    ax.set(xlabel="env steps", ylabel="return", title=f"{env_cfg.id}: learning curve")
    ax.legend()
    save(fig, "learning_curve.png")

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(*series("disc/acc_expert"), label="on expert data")
    ax.plot(*series("disc/acc_gen"), label="on generator data")
    ax.set(xlabel="env steps", ylabel="accuracy", ylim=(0, 1.05), title="discriminator accuracy")
    ax.legend()
    save(fig, "disc_accuracy.png")
    return written


def format_table(r: dict[str, Any]) -> str:
    p = r["policy"]
    lines = [
        f"{r['env_id']}: {r['episodes']} episodes from seed {r['seed']} ({r['checkpoint'] or r['source']})"
        + (", actions sampled" if r.get("stochastic") else ""),
        f"  {'policy':<10} return {p['return_mean']:9.1f} ± {p['return_std']:7.1f}   length {p['length_mean']:7.1f} ± {p['length_std']:.1f}",
    ]
    if r["onnx"]:
        o = r["onnx"]
        lines.append(
            f"  {'onnx':<10} return {o['return_mean']:9.1f} ± {o['return_std']:7.1f}   length {o['length_mean']:7.1f} ± {o['length_std']:.1f}"
        )
    exp, rnd = r["expert"], r["random"]
    lines.append(
        f"  {'expert':<10} return {exp['return_mean']:9.1f} ({exp['source']})"
        if exp["return_mean"] is not None
        else f"  {'expert':<10} return unknown (no demos)"
    )
    lines.append(
        f"  {'random':<10} return {rnd['return_mean']:9.1f} ({rnd['episodes']} episodes from seed {rnd['seed']})"
    )
    if r["normalized"] is not None:
        lines.append(f"  normalized score {r['normalized']:.3f} (against the {exp['source']}'s return)")
    elif exp["return_mean"] is not None and exp["return_mean"] < rnd["return_mean"]:
        lines.append("  normalized score none: THE EXPERT IS WORSE THAN RANDOM (check the demos and the expert)")
    if r["action_error"] is not None:
        lines.append(f"  action error vs scripted expert {r['action_error']:.4f} (uniform random policy: 0.667)")
    for path in r["plots"]:
        lines.append(f"  plot: {path}")
    if r.get("video"):
        v = r["video"]
        lines.append(f"  video: {v['video']} ({v['frames']} frames at {v['fps']} fps, return {v['return']:.1f})")
    return "\n".join(lines)


def to_json(r: dict[str, Any]) -> str:
    return json.dumps(r, indent=2)
