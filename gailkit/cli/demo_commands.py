"""`gailkit demos ...`: record, inspect and convert demonstration files."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from gailkit.core.errors import ConfigError


def add_parsers(sub, cmd) -> None:
    from gailkit.cli import _count, _seed

    dem = sub.add_parser("demos", help="record, inspect and convert demonstration files").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    p = dem.add_parser("record", help="roll out an expert and write its transitions (with its return in the metadata)")
    p.add_argument(
        "--expert",
        required=True,
        help="an SB3 .zip (PPO, A2C, SAC, TD3, DQN), an rl-zoo3 log folder (logs/ALGO/ENV_N/), a scripted expert "
        "of the env (e.g. 'scripted'), or module:function",
    )
    p.add_argument("--env", help="the env (default: the one the expert .zip was trained on)")
    p.add_argument("--episodes", type=_count, default=50)
    p.add_argument(
        "--out", type=Path, required=True, help=".arrow, .feather, .parquet, .pkl, or a folder (imitation dataset)"
    )
    p.add_argument(
        "--sample",
        action="store_true",
        help="sample the expert's actions (default: its deterministic actions, the policy whose return is the reference)",
    )
    p.add_argument("--deterministic", action="store_true", help=argparse.SUPPRESS)  # the default since gailkit 0.2
    p.add_argument("--seed", type=_seed, default=0, help="episode i is reset with seed + i")
    p.add_argument(
        "--vecnormalize",
        metavar="FILE",
        help="the expert's VecNormalize statistics (default: found beside the .zip, or rl-zoo3's ENV/vecnormalize.pkl)",
    )
    p.add_argument(
        "--preprocess",
        choices=("none", "atari"),
        help="atari: gymnasium's AtariPreprocessing (84x84 gray, 4 frames a step), as env.preprocess in training "
        "(default: as experts/<env>.gail.yaml sets it, else none)",
    )
    p.add_argument(
        "--frame-stack",
        type=_count,
        help="the expert sees the last K frames (env.frame_stack; default: as experts/<env>.gail.yaml sets it, "
        "else 1); the file still holds one frame a step",
    )
    p.add_argument(
        "--max-episode-steps",
        type=_count,
        help="cut episodes after N steps (env.max_episode_steps; for an env that never ends by itself)",
    )
    p.set_defaults(func=cmd("demo_commands:record"))

    p = dem.add_parser("inspect", help="episodes, returns, spaces and env of demo files, each validated as train would")
    p.add_argument("path", type=Path)
    p.add_argument("--env", help="validate against this env's spaces (default: each file's own metadata)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument(
        "--columns",
        metavar="NAME=COLUMN,...",
        help="an Arrow/Parquet table's own column names, e.g. obs=observation,acts=action (x+y+z stacks scalar columns)",
    )
    p.add_argument(
        "--unsafe-pickle", action="store_true", help="unpickle with the plain unpickler (only for trusted files)"
    )
    p.set_defaults(func=cmd("demo_commands:inspect"))

    p = dem.add_parser("convert", help="convert demos between formats (lossless), written atomically")
    p.add_argument("src", type=Path, help="a demo file or folder, or minari:DATASET_ID")
    p.add_argument(
        "dst",
        type=Path,
        help=".arrow, .feather, .parquet, .pkl, a folder name (imitation dataset), or "
        "minari:DATASET_ID (a Minari dataset in the local Minari root)",
    )
    p.add_argument("--env", help="take only this env's demos from a folder, validated against its spaces")
    p.add_argument(
        "--columns",
        metavar="NAME=COLUMN,...",
        help="an Arrow/Parquet table's own column names, e.g. obs=observation,acts=action (x+y+z stacks scalar columns)",
    )
    p.add_argument(
        "--pickle-layout",
        choices=["dict", "trajectories"],
        default="dict",
        help="for .pkl output: a dict of arrays (lossless) or a list of imitation trajectories",
    )
    p.add_argument("--minari-format", choices=["hdf5", "arrow"], default="hdf5", help="for minari: output, its storage")
    p.add_argument(
        "--unsafe-pickle", action="store_true", help="unpickle with the plain unpickler (only for trusted files)"
    )
    p.set_defaults(func=cmd("demo_commands:convert"))

    p = dem.add_parser("strip-actions", help="write the same demos without actions (for learning from observation)")
    p.add_argument("src", type=Path, help="a demo file or dataset")
    p.add_argument("dst", type=Path, help=".arrow, .feather, .parquet or .pkl")
    p.add_argument(
        "--unsafe-pickle", action="store_true", help="unpickle with the plain unpickler (only for trusted files)"
    )
    p.set_defaults(func=cmd("demo_commands:strip_actions"))

    p = dem.add_parser(
        "subsample",
        help="K random whole episodes, every N-th transition of each from a random offset (GAIL's protocol)",
    )
    p.add_argument("src", type=Path, help="a demo file or dataset")
    p.add_argument("dst", type=Path, help=".arrow, .feather, .parquet or .pkl")
    p.add_argument("--episodes", type=int, required=True, help="whole episodes to draw")
    p.add_argument("--every", type=int, default=1, help="keep every N-th transition (default 1: whole episodes)")
    p.add_argument("--seed", type=int, default=0, help="which episodes and offsets (default 0)")
    p.add_argument(
        "--unsafe-pickle", action="store_true", help="unpickle with the plain unpickler (only for trusted files)"
    )
    p.set_defaults(func=cmd("demo_commands:subsample"))


def record(args: argparse.Namespace) -> int:
    import warnings

    from gailkit.data import demos, experts

    d = experts.record_demos(
        args.expert,
        args.env,
        args.episodes,
        args.seed,
        sample=args.sample,
        log=print,
        vecnormalize_file=args.vecnormalize,
        preprocess=args.preprocess,
        frame_stack=args.frame_stack,
        max_episode_steps=args.max_episode_steps,
    )
    demos.save(d, args.out)
    returns = d.episode_returns()
    assert returns is not None and d.meta.expert_return is not None  # recorded demos carry both
    print(f"episode returns: {' '.join(f'{r:.1f}' for r in returns)}")
    how = "sampled" if args.sample else "deterministic"
    print(
        f"wrote {args.out}: {d.n_episodes} episodes, {len(d)} transitions of {d.meta.env_id} ({how} actions), "
        f"return {returns.mean():.1f} ± {returns.std():.1f}; the expert policy's own return "
        f"{d.meta.expert_return:.1f} ± {d.meta.expert_return_std:.1f} over {d.meta.expert_episodes} deterministic episodes"
    )
    gap = d.meta.expert_return - returns.mean()
    if args.sample and gap > 0.1 * max(abs(d.meta.expert_return), 1.0):
        warnings.warn(
            f"the sampled demos return {returns.mean():.1f}, far below the expert policy's {d.meta.expert_return:.1f}: "
            "GAIL will imitate the noisier behaviour; record without --sample to show the policy itself",
            stacklevel=2,
        )
    return 0


def _fmt(x: float | None, digits: int = 1) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def parse_columns(text: str) -> dict[str, str]:
    """`--columns obs=observation,acts=action` -> {"obs": "observation", "acts": "action"} (one line if malformed)."""
    out: dict[str, str] = {}
    for item in text.split(","):
        name, sep, column = item.partition("=")
        if not sep or not name.strip() or not column.strip():
            raise ConfigError(
                f"--columns {text!r}: expected NAME=COLUMN[,NAME=COLUMN...], e.g. obs=observation,acts=action"
            )
        out[name.strip()] = column.strip()
    return out


def _columns(args: argparse.Namespace) -> dict[str, str] | None:
    """`--columns` checked like the `demo_columns` setting (one line naming what is wrong)."""
    if not args.columns:
        return None
    from gailkit import config
    from gailkit.config import TrainConfig

    return config.build(TrainConfig, overrides=[f"demo_columns={json.dumps(parse_columns(args.columns))}"]).demo_columns


def _frame_spaces(env_id: str) -> tuple:
    """The spaces a demo file of `env_id` holds: the env as `train` makes it (its experts/*.gail.yaml's
    preprocessing), one frame a step where a frame stack is on (files never hold the stacks)."""
    from gailkit.data import envs, experts
    from gailkit.data.demos import stacks

    cfg = experts.env_settings(env_id)
    obs, act = envs.spaces(cfg)
    return stacks.stored_space(obs, cfg.frame_stack), act


def inspect(args: argparse.Namespace) -> int:
    from gailkit.data import demos

    files = demos.discover(args.path)
    if not files:
        raise demos.DemoError(f"{args.path}: no demo files")
    spaces = _frame_spaces(args.env) if args.env else None
    rows = []
    columns = _columns(args)
    for f in files:
        d = demos.load_file(f, args.unsafe_pickle, columns)
        demos.check(d, spaces)  # what train checks: against --env, else the file's own metadata
        rows.append(demos.summarize(d))
    if args.json:
        print(json.dumps({"files": rows}, indent=2))
        return 0
    print(
        f"{'file':<28} {'format':<20} {'env':<14} {'episodes':>8} {'steps':>8} {'return':>17} {'expert':>9} "
        f"{'length':>13}  spaces (obs -> acts)"
    )
    for r in rows:
        ret = f"{_fmt(r['return_mean'])} ± {_fmt(r['return_std'])}" if r["return_mean"] is not None else "n/a"
        loose = r["episodes"] is None  # subsampled or cut: no episode structure
        length = "loose" if loose else f"{r['length_mean']:.1f} ± {r['length_std']:.1f}"
        print(
            f"{Path(r['path']).name:<28} {r['format']:<20} {str(r['env_id'] or '?'):<14} {'-' if loose else r['episodes']:>8} "
            f"{r['transitions']:>8} {ret:>17} {_fmt(r['expert_return']):>9} {length:>13}  "
            f"{r['observation_space']} -> {r['action_space']}"
        )
    if len(rows) > 1:
        print(
            f"{'total':<28} {'':<20} {'':<14} {sum(r['episodes'] or 0 for r in rows):>8} {sum(r['transitions'] for r in rows):>8}"
        )
    return 0


def convert(args: argparse.Namespace) -> int:
    from gailkit.data import demos, envs

    columns = _columns(args)
    if args.env is None:
        files = demos.discover(args.src)
        if len(files) != 1:
            envs_seen = {demos.load_file(f, args.unsafe_pickle, columns).meta.env_id for f in files}
            if len(envs_seen) > 1:
                raise demos.DemoError(
                    f"{args.src}: holds demos of several envs ({', '.join(map(str, envs_seen))}); pass --env"
                )
            d = demos.load(args.src, unsafe_pickle=args.unsafe_pickle, columns=columns)
        else:
            d = demos.load_file(files[0], args.unsafe_pickle, columns)
        demos.check(d, None)
    else:
        spaces = _frame_spaces(args.env)
        d = demos.load(args.src, env_id=args.env, spaces=spaces, unsafe_pickle=args.unsafe_pickle, columns=columns)
    envs.import_project_envs()  # so a Minari dataset can record a project env by its registered id
    demos.save(d, args.dst, pickle_layout=args.pickle_layout, minari_format=args.minari_format)
    print(f"wrote {args.dst}: {d.n_episodes} episodes, {len(d)} transitions")
    return 0


def strip_actions(args: argparse.Namespace) -> int:
    from gailkit.data import demos

    files = demos.discover(args.src)
    if len(files) != 1:
        raise demos.DemoError(f"{args.src}: strip-actions takes one demo file or dataset, found {len(files)}")
    d = demos.check(demos.load_file(files[0], args.unsafe_pickle))
    demos.save(demos.strip_actions(d), args.dst)
    print(f"wrote {args.dst}: {d.n_episodes} episodes, {len(d)} transitions, observations only (no actions)")
    return 0


def subsample(args: argparse.Namespace) -> int:
    from gailkit.data import demos

    files = demos.discover(args.src)
    if len(files) != 1:
        raise demos.DemoError(f"{args.src}: subsample takes one demo file or dataset, found {len(files)}")
    d = demos.check(demos.load_file(files[0], args.unsafe_pickle))
    out = demos.subsample(d, args.episodes, args.every, args.seed)
    demos.save(out, args.dst)
    ref, source = demos.expert_reference(out)
    said = f"expert return {ref:.1f} ({source})" if ref is not None else "expert return unknown (none in the source)"
    print(f"wrote {args.dst}: {len(out)} transitions of {args.episodes} episodes (every {args.every}); {said}")
    return 0
