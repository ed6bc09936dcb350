"""The `gailkit` command: argv in, human output and exit codes out (0 ok, 2 user error).

Command modules are imported lazily, so `gailkit --help` does not import torch.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

from gailkit import __version__
from gailkit.errors import GailkitError


def _add_config_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", help="a YAML file of settings, applied over the env's defaults")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override one setting, e.g. --set ppo.n_steps=256 (repeatable)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gailkit", description="Imitation learning with GAIL, from demos to ONNX.")
    parser.add_argument("--version", action="version", version=f"gailkit {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    expert = sub.add_parser("expert", help="train expert policies").add_subparsers(dest="action", required=True, metavar="ACTION")
    p = expert.add_parser("train", help="train an SB3 PPO expert with the env's tuned settings from experts/")
    p.add_argument("--env", required=True, help="gymnasium id, envs/ name, module:Class or file.py:Class")
    p.add_argument("--out", type=Path, help="where to save the expert (.zip; default experts/<env>.zip)")
    p.add_argument("--total-steps", type=int, help="env steps to train (overrides total_timesteps)")
    p.add_argument("--seed", type=int)
    p.add_argument("--device", default="cpu", help="torch device for PPO: cpu, cuda or auto (default cpu: faster for MLPs)")
    _add_config_flags(p)
    p.set_defaults(func=cmd_expert_train)

    p = sub.add_parser("train", help="train a policy with GAIL from expert demos")
    p.add_argument("--env", help="gymnasium id, envs/ name, module:Class or file.py:Class")
    p.add_argument("--demos", help="a demo file or folder (default: data/)")
    p.add_argument("--total-steps", type=int, help="env steps to collect in all")
    p.add_argument("--device", help="learner device: auto (CUDA when present), cpu, cuda")
    p.add_argument("--seed", type=int)
    p.add_argument("--run-dir", type=Path, help="where the run goes (default runs/<env>-<time>)")
    p.add_argument("--resume", type=Path, metavar="RUN_DIR", help="continue a run from its newest checkpoint")
    p.add_argument("--quiet", action="store_true", help="no progress bar or per-round lines; metrics files only")
    p.add_argument("--unsafe-pickle", action="store_true", help="unpickle demo files with the plain unpickler (trusted files only)")
    p.add_argument("--actors", type=int, help="fragment slots per round filled by actor processes (0: in-process)")
    p.add_argument("--envs-per-actor", type=int, help="envs each actor steps")
    p.add_argument("--local-actors", type=int, help="actor processes to start here (default: --actors, or 0 with --listen)")
    p.add_argument("--listen", help="accept actors from other machines, e.g. tcp://0.0.0.0:5555 (needs --key-file)")
    p.add_argument("--key-file", help="CURVE key file from gailkit keys generate")
    p.add_argument("--fleet", choices=["local", "ray"], help="who runs the --actors: local processes (default) or Ray")
    p.add_argument("--ray-address", help="with --fleet ray: the cluster to join (auto); default: a local Ray")
    _add_config_flags(p)
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("actor", help="run an actor that connects to a learner (on this or another machine)")
    p.add_argument("--connect", required=True, help="the learner's address, e.g. tcp://learner:5555")
    p.add_argument("--key-file", help="the CURVE key file the learner uses")
    p.add_argument("--actor-id", type=int, default=-1, help="ask for this actor id (default: the learner picks)")
    p.add_argument("--parent-pid", type=int, help=argparse.SUPPRESS)
    p.add_argument("--learner-timeout", type=float, default=300.0, help="exit after this many seconds without the learner")
    p.set_defaults(func=cmd_actor)

    keys = sub.add_parser("keys", help="CURVE keys for remote actors").add_subparsers(dest="action", required=True, metavar="ACTION")
    p = keys.add_parser("generate", help="write a key file (server and client key pairs); give it to learner and actors")
    p.add_argument("--out", type=Path, required=True)
    p.set_defaults(func=cmd_keys_generate)

    p = sub.add_parser("evaluate", help="returns vs expert and random, JSON report, PNG plots")
    p.add_argument("source", type=Path, help="a run directory (its best checkpoint), a .pt checkpoint, or an SB3 expert .zip")
    p.add_argument("--env", help="the env (default: the run's)")
    p.add_argument("--episodes", type=int, default=50)
    p.add_argument("--seed", type=int, default=0, help="episode i is reset with seed + i")
    p.add_argument("--onnx", type=Path, help="also evaluate this exported ONNX file on the same episodes")
    p.add_argument("--demos", help="where the expert's demos are (default: the run's demos)")
    p.add_argument("--json", action="store_true", help="print the JSON report instead of a table")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("export", help="export a trained policy to ONNX (with a torch-vs-onnxruntime parity check)")
    p.add_argument("source", type=Path, help="a run directory or a .pt checkpoint")
    p.add_argument("--out", type=Path, required=True, help="the .onnx file to write (atomically)")
    p.add_argument("--checkpoint", choices=["final", "best", "latest"], default="final", help="which checkpoint of a run")
    p.add_argument("--value", action="store_true", help="add the critic's value as an output")
    p.add_argument("--log-prob", action="store_true", help="add the log-probability of the action as an output")
    p.add_argument("--sb3", type=Path, help="also write the policy as a plain stable-baselines3 PPO zip")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("infer", help="run episodes with an exported ONNX policy (onnxruntime only, no torch)")
    p.add_argument("model", type=Path, help="an .onnx file from gailkit export")
    p.add_argument("--env", help="the env (default: the one in the file's metadata)")
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--seed", type=int, default=0, help="episode i is reset with seed + i")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_infer)

    dem = sub.add_parser("demos", help="record, inspect and convert demonstration files").add_subparsers(
        dest="action", required=True, metavar="ACTION")
    p = dem.add_parser("record", help="roll out an expert and write its transitions")
    p.add_argument("--expert", required=True, help="an SB3 .zip, a scripted expert of the env (e.g. 'scripted'), or module:function")
    p.add_argument("--env", help="the env (default: the one the expert .zip was trained on)")
    p.add_argument("--episodes", type=int, default=50)
    p.add_argument("--out", type=Path, required=True, help=".arrow, .feather, .parquet, .pkl, or a folder (imitation dataset)")
    p.add_argument("--deterministic", action="store_true", help="take the expert's deterministic action (default: sample)")
    p.add_argument("--seed", type=int, default=0, help="episode i is reset with seed + i")
    p.set_defaults(func=cmd_demos_record)

    p = dem.add_parser("inspect", help="episodes, returns, lengths, spaces and env of demo files")
    p.add_argument("path", type=Path)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--unsafe-pickle", action="store_true", help="unpickle with the plain unpickler (only for trusted files)")
    p.set_defaults(func=cmd_demos_inspect)

    p = dem.add_parser("convert", help="convert demos between formats (lossless), written atomically")
    p.add_argument("src", type=Path, help="a demo file or folder")
    p.add_argument("dst", type=Path, help=".arrow, .feather, .parquet, .pkl, or a folder name (imitation dataset)")
    p.add_argument("--env", help="take only this env's demos from a folder, validated against its spaces")
    p.add_argument("--pickle-layout", choices=["dict", "trajectories"], default="dict",
                   help="for .pkl output: a dict of arrays (lossless) or a list of imitation trajectories")
    p.add_argument("--unsafe-pickle", action="store_true", help="unpickle with the plain unpickler (only for trusted files)")
    p.set_defaults(func=cmd_demos_convert)
    return parser


def _load_demos(path: Path, env_id: str | None, unsafe_pickle: bool):
    from gailkit import demos, envs

    spaces = envs.spaces(env_id) if env_id else None
    return demos.load(path, env_id=env_id, spaces=spaces, unsafe_pickle=unsafe_pickle)


def cmd_expert_train(args: argparse.Namespace) -> int:
    from gailkit import experts

    overrides = list(args.overrides)
    if args.total_steps is not None:
        overrides.append(f"total_timesteps={args.total_steps}")
    if args.seed is not None:
        overrides.append(f"seed={args.seed}")
    cfg = experts.expert_config(args.env, args.config, overrides)
    out = args.out or Path("experts") / f"{experts.slug(args.env)}.zip"
    device = args.device
    if device == "auto":
        import torch as th

        device = "cuda" if th.cuda.is_available() else "cpu"
    info = experts.train_expert(cfg, out, device=device)
    print(f"expert {out}: mean return {info['mean_return']:.1f} ± {info['std_return']:.1f} over "
          f"{info['eval_episodes']} deterministic episodes ({info['train_seconds']:.0f} s of training)")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    import time

    from gailkit import config, experts, train
    from gailkit.config import TrainConfig

    overrides = list(args.overrides)
    for flag, key in (("total_steps", "total_steps"), ("device", "device"), ("seed", "seed")):
        if getattr(args, flag) is not None:
            overrides.append(f"{key}={getattr(args, flag)}")
    if args.unsafe_pickle:
        overrides.append("unsafe_pickle=true")
    for flag in ("actors", "envs_per_actor", "local_actors", "listen", "key_file", "fleet", "ray_address"):
        if getattr(args, flag) is not None:
            overrides.append(f"{flag}={getattr(args, flag)}")
    if args.resume is not None:
        if args.env or args.demos or args.config:
            raise config.ConfigError("--resume continues a run with its own config.yaml: drop --env, --demos and --config")
        saved = args.resume / "config.yaml"
        if not saved.is_file():
            raise config.ConfigError(f"--resume {args.resume}: no config.yaml there (is it a run directory?)")
        cfg = config.build(TrainConfig, [(str(saved), config.read_yaml(saved))], overrides)
        run_dir = args.resume
    else:
        if not args.env:
            raise config.ConfigError("--env is required (or --resume RUN_DIR)")
        cfg = train.train_config(args.env, args.demos, args.config, overrides)
        run_dir = args.run_dir or Path("runs") / f"{experts.slug(cfg.env.id)}-{time.strftime('%Y%m%d-%H%M%S')}"
    s = train.train(cfg, run_dir, resume=args.resume is not None, quiet=args.quiet)
    state = "interrupted, checkpoint saved" if s["interrupted"] else "done"
    print(f"{state}: {s['rounds']} rounds, {s['env_steps']:,} env steps in {s['seconds']:.0f} s -> {s['run_dir']}")
    if "return_mean" in s:
        line = f"evaluation: return {s['return_mean']:.1f} ± {s['return_std']:.1f}"
        if s.get("normalized") is not None:
            line += f" (expert {s['expert_return']:.1f}, random {s['random_return']:.1f}, normalized {s['normalized']:.2f})"
        if s.get("action_error") is not None:
            line += f", action error vs scripted expert {s['action_error']:.3f}"
        print(line)
    return 0


def cmd_actor(args: argparse.Namespace) -> int:
    from gailkit.fleet.worker import run_actor

    return run_actor(args.connect, args.key_file, args.actor_id, args.parent_pid, args.learner_timeout,
                     log=lambda m: print(m, file=sys.stderr))


def cmd_keys_generate(args: argparse.Namespace) -> int:
    from gailkit import transport

    path = transport.generate_keys(args.out)
    print(f"wrote {path} (mode 0600): pass it as --key-file to the learner and to every actor")
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from gailkit import evaluate

    report = evaluate.evaluate(args.source, args.env, args.episodes, args.seed, args.onnx, args.demos,
                               plots=not args.no_plots)
    print(evaluate.to_json(report) if args.json else evaluate.format_table(report))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from gailkit import export

    r = export.export(args.source, args.out, args.value, args.log_prob, args.checkpoint)
    p = r["parity"]
    diffs = ", ".join(f"{k} {v:.1e}" for k, v in p["max_abs_diff"].items() if k != "action" or v)
    print(f"parity vs torch on {p['observations']} observations at batch 1 and 64: max abs difference "
          f"{diffs or 'action 0'}, discrete mismatches {p['discrete_mismatches']}: ok")
    print(f"wrote {r['out']} ({r['metadata']['env_id']}, outputs {r['metadata']['outputs']}, opset {r['metadata']['opset']}) "
          f"from {r['checkpoint']}")
    if args.sb3:
        print(f"wrote {export.export_sb3(args.source, args.sb3, args.checkpoint)} (stable-baselines3 PPO)")
    return 0


def cmd_infer(args: argparse.Namespace) -> int:
    from gailkit import envs
    from gailkit.inference import InferenceError, OnnxPolicy

    pi = OnnxPolicy(args.model)
    env_id = args.env or pi.env_id
    if args.env and pi.env_id and args.env != pi.env_id:
        raise InferenceError(f"{args.model} was exported for {pi.env_id}, not {args.env}")
    if args.episodes < 1:
        raise InferenceError(f"--episodes must be >= 1, got {args.episodes}")
    out = envs.run_episodes(pi.predict, env_id, args.episodes, args.seed)
    if args.json:
        print(json.dumps({"env_id": env_id, "episodes": args.episodes, "seed": args.seed, **out}, indent=2))
    else:
        print(f"{env_id}: return {out['return_mean']:.1f} ± {out['return_std']:.1f}, length {out['length_mean']:.1f} "
              f"over {args.episodes} episodes from seed {args.seed} (onnxruntime)")
    return 0


def cmd_demos_record(args: argparse.Namespace) -> int:
    from gailkit import demos, experts

    policy, env_id, _ = experts.load_expert(args.expert, args.env, args.deterministic)
    d = experts.record(policy, env_id, args.episodes, args.seed, source=args.expert)
    demos.save(d, args.out)
    returns = d.episode_returns()
    shown = " ".join(f"{r:.1f}" for r in returns)
    print(f"episode returns: {shown}")
    print(f"wrote {args.out}: {d.n_episodes} episodes, {len(d)} transitions of {env_id}, "
          f"return {returns.mean():.1f} ± {returns.std():.1f}")
    return 0


def _fmt(x: float | None, digits: int = 1) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def cmd_demos_inspect(args: argparse.Namespace) -> int:
    from gailkit import demos

    files = demos.discover(args.path)
    if not files:
        raise demos.DemoError(f"{args.path}: no demo files")
    rows = [demos.summarize(demos.load_file(f, args.unsafe_pickle)) for f in files]
    if args.json:
        print(json.dumps({"files": rows}, indent=2))
        return 0
    header = f"{'file':<28} {'format':<20} {'env':<14} {'episodes':>8} {'steps':>8} {'return':>17} {'length':>13}  spaces (obs -> acts)"
    print(header)
    for r in rows:
        ret = f"{_fmt(r['return_mean'])} ± {_fmt(r['return_std'])}" if r["return_mean"] is not None else "n/a"
        length = f"{r['length_mean']:.1f} ± {r['length_std']:.1f}"
        name = Path(r["path"]).name
        print(f"{name:<28} {r['format']:<20} {str(r['env_id'] or '?'):<14} {r['episodes']:>8} {r['transitions']:>8} "
              f"{ret:>17} {length:>13}  {r['observation_space']} -> {r['action_space']}")
    if len(rows) > 1:
        print(f"{'total':<28} {'':<20} {'':<14} {sum(r['episodes'] for r in rows):>8} {sum(r['transitions'] for r in rows):>8}")
    return 0


def cmd_demos_convert(args: argparse.Namespace) -> int:
    from gailkit import demos

    if args.env is None:
        files = demos.discover(args.src)
        if len(files) != 1:
            d = demos.load(args.src, unsafe_pickle=args.unsafe_pickle)
            envs_seen = {demos.load_file(f, args.unsafe_pickle).meta.env_id for f in files}
            if len(envs_seen) > 1:
                raise demos.DemoError(f"{args.src}: holds demos of several envs ({', '.join(map(str, envs_seen))}); pass --env")
        else:
            d = demos.load_file(files[0], args.unsafe_pickle)
    else:
        d = _load_demos(args.src, args.env, args.unsafe_pickle)
    demos.save(d, args.dst, pickle_layout=args.pickle_layout)
    print(f"wrote {args.dst}: {d.n_episodes} episodes, {len(d)} transitions")
    return 0


def _warning_line(message, category, filename, lineno, file=None, line=None) -> None:
    print(f"gailkit: warning: {message}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    warnings.showwarning = _warning_line
    try:
        return int(args.func(args) or 0)
    except GailkitError as e:
        print(f"gailkit: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gailkit: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
