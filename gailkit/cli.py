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
    _add_config_flags(p)
    p.set_defaults(func=cmd_train)

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
