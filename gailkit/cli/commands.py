"""The commands that train, run and ship policies: expert train, train, actor, keys, evaluate, export, infer."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from gailkit.cli.demo_commands import parse_columns
from gailkit.config.envid import canonical, same_env
from gailkit.core.errors import ConfigError

_FLAGS = {  # flags that set one setting each
    **{k: k for k in ("total_steps", "device", "threads", "generator", "expert_return", "seed", "unsafe_pickle")},
    "wandb": "wandb",
    "merge": "demo_merge",
    "time_limit_ends": "demo_time_limit",
    "actors": "fleet.actors",
    "envs_per_actor": "fleet.envs_per_actor",
    "local_actors": "fleet.local_actors",
    "listen": "fleet.listen",
    "key_file": "fleet.key_file",
    "fleet": "fleet.kind",
    "ray_address": "fleet.ray_address",
}


def expert_train(args: argparse.Namespace) -> int:
    from gailkit.data import experts

    overrides = list(args.overrides)
    if args.total_steps is not None:
        overrides.append(f"total_timesteps={args.total_steps}")
    if args.seed is not None:
        overrides.append(f"seed={args.seed}")
    if args.algo is not None:
        overrides.append(f"algo={args.algo}")
    cfg = experts.expert_config(args.env, args.config, overrides)
    out = args.out or Path("experts") / f"{experts.slug(args.env)}.zip"
    from gailkit.run.session import resolve_device

    device = str(resolve_device(args.device))
    info = experts.train_expert(cfg, out, device=device, quiet=args.quiet)
    print(
        f"expert {out}: mean return {info['mean_return']:.1f} ± {info['std_return']:.1f} over "
        f"{info['eval_episodes']} deterministic episodes ({info['train_seconds']:.0f} s of training)"
    )
    return 0


def _train_overrides(args: argparse.Namespace) -> list[str]:
    overrides = list(args.overrides)
    given = {key: getattr(args, flag, None) for flag, key in _FLAGS.items()}  # 0 is a value, None/False are not
    overrides += [f"{key}={value}" for key, value in given.items() if value is not None and value is not False]
    overrides += [f"demo_columns={json.dumps(parse_columns(args.columns))}"] if getattr(args, "columns", None) else []
    return overrides


def typed_env(args: argparse.Namespace, env_id: str) -> bool:
    """Whether `env_id` was typed in this invocation (`--env` or `--set env.id=`), so may name code."""
    return same_env(env_id, args.env) or f"env.id={env_id}" in [o.replace(" ", "") for o in args.overrides]


def train(args: argparse.Namespace) -> int:
    from gailkit import config
    from gailkit.config import TrainConfig
    from gailkit.data import experts
    from gailkit.run import train as train_mod

    overrides = _train_overrides(args)
    if args.resume is not None:
        if args.demos or args.config or args.preset or args.run_dir:
            raise ConfigError(
                "--resume continues a run with its own config.yaml: drop --demos, --config, --preset and --run-dir"
            )
        saved = args.resume / "config.yaml"
        if not saved.is_file():
            raise ConfigError(f"--resume {args.resume}: no config.yaml there (is it a run directory?)")
        cfg = config.build(TrainConfig, [(str(saved), config.read_settings(saved))], overrides)
        run_dir, allow_code = args.resume, typed_env(args, cfg.env.id)  # code named by a file runs only if typed again
        if args.env and not allow_code:
            raise ConfigError(f"--resume {args.resume}: the run trains {cfg.env.id}, not {args.env}")
    else:
        if not args.env and not args.config:
            raise ConfigError("--env is required (or --config FILE naming env.id, or --resume RUN_DIR)")
        cfg = train_mod.train_config(args.env, args.demos, args.config, overrides, args.preset)
        if not cfg.env.id:
            raise ConfigError(f"--config {args.config}: names no env.id; pass --env")
        run_dir = args.run_dir or Path("runs") / f"{experts.slug(cfg.env.id)}-{time.strftime('%Y%m%d-%H%M%S')}"
        if allow_code := typed_env(args, cfg.env.id):  # a file env is kept by its absolute path: found from anywhere
            cfg.env.id = canonical(cfg.env.id)
    s = train_mod.train(cfg, run_dir, resume=args.resume is not None, quiet=args.quiet, allow_code=allow_code)
    state = "interrupted, checkpoint saved" if s["interrupted"] else "done"
    print(f"{state}: {s['rounds']} rounds, {s['env_steps']:,} env steps in {s['seconds']:.0f} s -> {s['run_dir']}")
    if "return_mean" in s:
        line = f"evaluation: return {s['return_mean']:.1f} ± {s['return_std']:.1f}"
        if s.get("normalized") is not None:
            line += (
                f" (expert {s['expert_return']:.1f} [{s['expert_source']}], random {s['random_return']:.1f}, "
                f"normalized {s['normalized']:.2f})"
            )
        if s.get("action_error") is not None:
            line += f", action error vs scripted expert {s['action_error']:.3f}"
        print(line)
    return 0


def config_show(args: argparse.Namespace) -> int:
    """The resolved training settings, one `key: value  # source` line each (nothing is made or loaded)."""
    from gailkit import config
    from gailkit.config import TrainConfig
    from gailkit.run import train as train_mod

    if not args.env and not args.config:
        raise ConfigError("config show needs --env (or --config FILE naming env.id)")
    layers = train_mod.train_layers(args.env, args.demos, args.config, args.preset)
    cfg = config.build(TrainConfig, layers, list(args.overrides))
    where = config.sources(TrainConfig, layers, list(args.overrides))
    values = _flatten(config.to_dict(cfg))
    width = max(len(f"{k}: {json.dumps(v)}") for k, v in values.items())
    for key, value in values.items():
        print(f"{f'{key}: {json.dumps(value)}':<{width}}  # {where.get(key, 'default')}")
    return 0


def _flatten(data: dict, prefix: str = "") -> dict:
    out: dict = {}
    for key, value in data.items():
        name = f"{prefix}.{key}" if prefix else key
        out.update(_flatten(value, name) if isinstance(value, dict) and value else {name: value})
    return out


def actor(args: argparse.Namespace) -> int:
    from gailkit.rollout.fleet.worker import run_actor

    return run_actor(
        args.connect,
        args.key_file,
        args.actor_id,
        args.parent_pid,
        args.learner_timeout,
        args.env,
        log=lambda m: print(m, file=sys.stderr),
    )


def keys_generate(args: argparse.Namespace) -> int:
    from gailkit.rollout import transport

    print(f"wrote {transport.generate_keys(args.out)} (mode 0600): pass it as --key-file to learner and actors")
    return 0


def evaluate(args: argparse.Namespace) -> int:
    from gailkit.run import evaluate as evaluate_mod

    report = evaluate_mod.evaluate(
        args.source,
        args.env,
        args.episodes,
        args.seed,
        args.onnx,
        args.demos,
        plots=not args.no_plots,
        which=args.checkpoint,
        video=args.video,
        stochastic=args.stochastic,
    )
    print(evaluate_mod.to_json(report) if args.json else evaluate_mod.format_table(report))
    return 0


def export(args: argparse.Namespace) -> int:
    from gailkit.core import fsutil
    from gailkit.run import export as export_mod

    outs = [fsutil.check_writable_target(args.out)] + (
        [fsutil.check_writable_target(args.sb3, "--sb3")] if args.sb3 else []
    )
    new = [out for out in outs if not out.exists()]
    try:  # both files or neither: a failure of the second removes the first if this command made it
        sb3 = export_mod.export_sb3(args.source, args.sb3, args.checkpoint) if args.sb3 else None
        r = export_mod.export(args.source, args.out, args.value, args.log_prob, args.checkpoint)
    except BaseException:
        for out in new:
            out.unlink(missing_ok=True)
        raise
    p = r["parity"]
    diffs = ", ".join(f"{k} {v:.1e}" for k, v in p["max_abs_diff"].items() if k != "action" or v)
    print(
        f"parity vs torch on {p['observations']} observations at batch 1 and 64: max abs difference "
        f"{diffs or 'action 0'}, discrete mismatches {p['discrete_mismatches']}: ok"
    )
    print(
        f"wrote {r['out']} ({r['metadata']['env_id']}, outputs {r['metadata']['outputs']}, opset {r['metadata']['opset']}) "
        f"from {r['checkpoint']}"
    )
    if sb3 is not None:
        print(f"wrote {sb3} (stable-baselines3 {'SAC' if r['generator'] == 'sac' else 'PPO'})")
    return 0


def infer(args: argparse.Namespace) -> int:
    from gailkit.data import envs
    from gailkit.inference import InferenceError, OnnxPolicy

    pi = OnnxPolicy(args.model)
    env_id = args.env or pi.env_id
    if args.env and pi.env_id and not envs.same_env(args.env, pi.env_id):
        raise InferenceError(f"{args.model} was exported for {pi.env_id}, not {args.env}")
    if args.episodes < 1:
        raise InferenceError(f"--episodes must be >= 1, got {args.episodes}")
    env_cfg = pi.env_config(env_id)  # with the preprocessing and frame stack it was trained with
    out = envs.run_episodes(pi.predict, env_cfg, args.episodes, args.seed, allow_code=args.env is not None)
    if args.json:
        print(json.dumps({"env_id": env_id, "episodes": args.episodes, "seed": args.seed, **out}, indent=2))
    else:
        print(
            f"{env_id}: return {out['return_mean']:.1f} ± {out['return_std']:.1f}, length {out['length_mean']:.1f} "
            f"over {args.episodes} episodes from seed {args.seed} (onnxruntime)"
        )
    return 0


def tune(args: argparse.Namespace) -> int:
    from gailkit import config
    from gailkit import tune as tune_mod
    from gailkit.data import envs, experts
    from gailkit.run import train as train_mod

    if args.resume is not None:
        saved = args.resume / "tune.yaml"
        if not saved.is_file():
            raise ConfigError(f"--resume {args.resume}: no tune.yaml there (is it a gailkit tune folder?)")
        search, allow_code = tune_mod.load_search(saved, args.env)
        if args.env and not allow_code:
            raise ConfigError(f"--resume {args.resume}: the search tunes {search.base['env']['id']}, not {args.env}")
        out = args.resume
    else:
        if not args.env or args.space is None:
            raise ConfigError("gailkit tune needs --env and --space (or --resume OUT)")
        for flag in ("trials", "budget", "seeds"):
            if getattr(args, flag) < 1:
                raise ConfigError(f"--{flag} must be >= 1, got {getattr(args, flag)}")
        base = train_mod.train_config(args.env, args.demos, args.config, list(args.overrides), args.preset)
        base.demos = str(Path(base.demos).resolve()) if not base.demos.startswith("minari:") else base.demos
        allow_code = typed_env(args, base.env.id)
        base.env.id = envs.canonical(base.env.id)  # trials run in other folders
        search = tune_mod.Search(
            base=config.to_dict(base),
            space=tune_mod.read_space(args.space, base),
            trials=args.trials,
            budget=args.budget,
            seeds=args.seeds,
            scheduler=args.scheduler,
            search=args.search,
            resources=_resources(args.resources),
        )
        out = args.out or Path("tune") / f"{experts.slug(base.env.id)}-{time.strftime('%Y%m%d-%H%M%S')}"
        if out.exists() and any(out.iterdir()):
            raise ConfigError(f"--out {out}: exists and is not empty; choose another folder or --resume it")
    rows = tune_mod.run(
        search, out, resume=args.resume is not None, ray_address=args.ray_address, allow_code=allow_code
    )
    keys = list(search.space)
    print(
        f"{'trial':<14} {'score':>7} {'best':>7} {'last':>7} {'env steps':>10} {'s':>7} {'status':<14} "
        + " ".join(keys)
    )
    for r in rows:
        fmt = lambda v: "n/a" if v is None else f"{v:.3f}"  # noqa: E731
        print(
            f"{r['trial']:<14} {fmt(r['score']):>7} {fmt(r['best']):>7} {fmt(r['last']):>7} {r['env_steps']:>10,} "
            f"{r['seconds']:>7.0f} {r['status']:<14} " + " ".join(str(r.get(k)) for k in keys)
        )
    print(
        f"wrote {out / 'trials.csv'}, {out / 'learning_curves.png'}"
        + (
            f", {out / 'best.yaml'} (gailkit train --config {out / 'best.yaml'})"
            if (out / "best.yaml").is_file()
            else ""
        )
    )
    return 0


def _resources(text: str) -> dict[str, float]:
    from gailkit.tune import check_resources

    out: dict[str, float] = {}
    for part in filter(None, text.split(",")):
        key, _, value = part.partition("=")
        try:
            out[key.strip()] = float(value)
        except ValueError:
            raise ConfigError(f"--resources {text!r}: expected NAME=NUMBER[,NAME=NUMBER], e.g. cpu=1,gpu=0") from None
    return check_resources(out, f"--resources {text!r}")
