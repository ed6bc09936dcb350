"""The `gailkit` command: argv in, human output and exit codes out (0 ok, 2 user or OS error, 130 interrupted).

Command modules are imported lazily, so `gailkit --help` does not import torch. Every error meant
for users (`GailkitError`), and every OS error (a read-only folder, a full disk, a missing file),
is one line `gailkit: error: ...` and exit code 2; only a genuine bug shows a traceback.
"""

from __future__ import annotations

import argparse
import sys
import threading
import warnings
from pathlib import Path

from gailkit import __version__
from gailkit.core.errors import GailkitError


def _bounded(kind: type, low: float, high: float, says: str):
    """An argparse type: `kind(text)` within [low, high] (NaN never is), else one line saying `says`."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected {'an integer' if kind is int else 'a number'}, got {text!r}"
            ) from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be {says}, got {text}")
        return value

    return parse


_seed = _bounded(int, 0, 2**32 - 1, "in [0, 2**32)")  # what numpy and gymnasium accept
_count = _bounded(int, 1, 1_000_000, "from 1 to 1,000,000")  # --episodes
_seconds = _bounded(float, 1e-3, 7 * 86400, "a number of seconds > 0 and at most a week")  # timeouts


def _config_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", help="a YAML file of settings, applied over the env's defaults")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one setting, e.g. --set ppo.n_steps=256 (repeatable)",
    )


def _cmd(name: str):
    """A lazily imported command function (`module:function` inside gailkit.cli)."""
    module, _, func = name.partition(":")

    def run(args: argparse.Namespace) -> int:
        import importlib

        return getattr(importlib.import_module(f"gailkit.cli.{module}"), func)(args)

    return run


class _Parser(argparse.ArgumentParser):
    """Usage errors are one line and exit 2, like every other user error."""

    def error(self, message: str):  # type: ignore[override]
        one_line = " ".join(message.split())
        self.exit(2, f"gailkit: error: {self.prog}: {one_line} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="gailkit", description="Imitation learning with GAIL, from demos to ONNX.")
    parser.add_argument("--version", action="version", version=f"gailkit {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    expert = sub.add_parser("expert", help="train expert policies").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    p = expert.add_parser("train", help="train an SB3 expert (PPO with the env's tuned settings from experts/)")
    p.add_argument("--env", required=True, help="gymnasium id, envs/ name, module:Class or file.py:Class")
    p.add_argument(
        "--algo",
        choices=["ppo", "a2c", "sac", "td3", "dqn"],
        help="SB3 algorithm (default ppo; others: SB3's defaults)",
    )
    p.add_argument("--out", type=Path, help="where to save the expert (.zip; default experts/<env>.zip)")
    p.add_argument("--total-steps", type=int, help="env steps to train (overrides total_timesteps)")
    p.add_argument("--seed", type=_seed)
    p.add_argument(
        "--device", default="cpu", help="torch device for PPO: cpu, cuda or auto (default cpu: faster for MLPs)"
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    _config_flags(p)
    p.set_defaults(func=_cmd("commands:expert_train"))

    p = sub.add_parser("train", help="train a policy with GAIL from expert demos")
    p.add_argument("--env", help="gymnasium id, envs/ name, module:Class or file.py:Class")
    p.add_argument("--demos", help="a demo file or folder (default: data/)")
    p.add_argument(
        "--columns",
        metavar="NAME=COLUMN,...",
        help="an Arrow/Parquet table's own column names, e.g. obs=observation,acts=action (x+y+z stacks scalar columns)",
    )
    p.add_argument("--merge", action="store_true", help="learn from a folder's demos of different experts as one set")
    p.add_argument(
        "--time-limit-ends",
        type=int,
        metavar="N",
        help="dones-only demos: an end at step N is a time limit, not a termination",
    )
    p.add_argument("--total-steps", type=int, help="env steps to collect in all")
    p.add_argument(
        "--expert-return",
        type=float,
        help="the expert policy's return to normalize scores against, when the demos do not carry it",
    )
    p.add_argument(
        "--generator",
        choices=["auto", "ppo", "sac"],
        help="what updates the policy: ppo (on-policy), sac (off-policy, DAC-style; Box actions) [generator]",
    )
    p.add_argument("--device", help="learner device: auto (CUDA when present), cpu, cuda")
    p.add_argument(
        "--threads", type=int, help="torch threads of the learner (default: 1 for vectors, every core for frames)"
    )
    p.add_argument("--seed", type=_seed)
    p.add_argument("--run-dir", type=Path, help="where the run goes (default runs/<env>-<time>); a new or empty folder")
    p.add_argument("--resume", type=Path, metavar="RUN_DIR", help="continue a run from its newest readable checkpoint")
    p.add_argument(
        "--preset",
        help="a named set of settings applied before --config and --set (tiny: seconds; fast: 50k steps; quality: 1M steps)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar or per-round lines; metrics files only")
    p.add_argument(
        "--unsafe-pickle", action="store_true", help="unpickle demo files with the plain unpickler (trusted files only)"
    )
    p.add_argument(
        "--actors", type=int, help="fragment slots per round filled by actors (0: in-process) [fleet.actors]"
    )
    p.add_argument("--envs-per-actor", type=int, help="envs each actor steps [fleet.envs_per_actor]")
    p.add_argument(
        "--local-actors", type=int, help="actor processes to start here (default: --actors, or 0 with --listen)"
    )
    p.add_argument("--listen", help="accept actors from other machines, e.g. tcp://0.0.0.0:5555 (needs --key-file)")
    p.add_argument("--key-file", help="CURVE key file from gailkit keys generate")
    p.add_argument("--wandb", metavar="PROJECT", help="log metrics to this Weights & Biases project (gailkit[wandb])")
    p.add_argument("--fleet", choices=["local", "ray"], help="who runs the --actors: local processes (default) or Ray")
    p.add_argument("--ray-address", help="with --fleet ray: the cluster to join (auto); default: a local Ray")
    _config_flags(p)
    p.set_defaults(func=_cmd("commands:train"))

    p = sub.add_parser("actor", help="run an actor that connects to a learner (on this or another machine)")
    p.add_argument("--connect", required=True, help="the learner's address, e.g. tcp://learner:5555")
    p.add_argument("--key-file", help="the CURVE key file the learner uses")
    p.add_argument("--env", help="allow this env when it is code (module:Class); gymnasium ids need nothing")
    p.add_argument("--actor-id", type=int, default=-1, help="ask for this actor id (default: the learner picks)")
    p.add_argument("--parent-pid", type=int, help=argparse.SUPPRESS)
    p.add_argument(
        "--learner-timeout", type=_seconds, default=300.0, help="exit after this many seconds without the learner"
    )
    p.set_defaults(func=_cmd("commands:actor"))

    keys = sub.add_parser("keys", help="CURVE keys for remote actors").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    p = keys.add_parser(
        "generate", help="write a key file (server and client key pairs); give it to learner and actors"
    )
    p.add_argument("--out", type=Path, required=True)
    p.set_defaults(func=_cmd("commands:keys_generate"))

    p = sub.add_parser("evaluate", help="returns vs expert and random, JSON report, PNG plots")
    p.add_argument("source", type=Path, help="a run directory, a .pt checkpoint, or an SB3 expert .zip")
    p.add_argument(
        "--checkpoint", choices=["best", "final", "latest"], default="best", help="which checkpoint of a run"
    )
    p.add_argument("--env", help="the env (default: the run's; needed to load an env that is code)")
    p.add_argument("--episodes", type=_count, default=50)
    p.add_argument("--seed", type=_seed, default=0, help="episode i is reset with seed + i")
    p.add_argument("--onnx", type=Path, help="also evaluate this exported ONNX file on the same episodes")
    p.add_argument("--demos", help="demos whose expert return to use as the reference (default: the run's references)")
    p.add_argument("--json", action="store_true", help="print the JSON report instead of a table")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument(
        "--video",
        metavar="FILE|DIR",
        help="also write the first evaluated episode as FILE (.gif, .mp4) or DIR/episode-0.mp4",
    )
    p.add_argument("--stochastic", action="store_true", help="sample the policy's actions (default: deterministic)")
    p.set_defaults(func=_cmd("commands:evaluate"))

    p = sub.add_parser("export", help="export a trained policy to ONNX (with a torch-vs-onnxruntime parity check)")
    p.add_argument("source", type=Path, help="a run directory or a .pt checkpoint")
    p.add_argument("--out", type=Path, required=True, help="the .onnx file to write (atomically)")
    p.add_argument(
        "--checkpoint", choices=["best", "final", "latest"], default="best", help="which checkpoint of a run"
    )
    p.add_argument("--value", action="store_true", help="add the critic's value as an output")
    p.add_argument("--log-prob", action="store_true", help="add the log-probability of the action as an output")
    p.add_argument("--sb3", type=Path, help="also write the policy as a stable-baselines3 zip (PPO; SAC for a sac run)")
    p.set_defaults(func=_cmd("commands:export"))

    p = sub.add_parser("infer", help="run episodes with an exported ONNX policy (onnxruntime only, no torch)")
    p.add_argument("model", type=Path, help="an .onnx file from gailkit export")
    p.add_argument("--env", help="the env (default: the one in the file's metadata)")
    p.add_argument("--episodes", type=_count, default=10)
    p.add_argument("--seed", type=_seed, default=0, help="episode i is reset with seed + i")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd("commands:infer"))

    p = sub.add_parser(
        "tune", help="search GAIL settings on Ray Tune (ASHA, random/grid/Optuna), locally or on a cluster"
    )
    p.add_argument("--env", help="gymnasium id, envs/ name, module:Class or file.py:Class")
    p.add_argument("--demos", help="a demo file or folder (default: data/)")
    p.add_argument("--space", type=Path, help="a YAML file: setting -> {choice|uniform|loguniform|randint|grid: args}")
    p.add_argument(
        "--trials", type=int, default=8, help="trials to sample (random, optuna; grid runs every combination)"
    )
    p.add_argument("--budget", type=int, default=100_000, help="env steps per training run")
    p.add_argument("--seeds", type=int, default=1, help="training runs (seeds) per trial; the score averages them")
    p.add_argument("--scheduler", choices=["asha", "none"], default="asha", help="ASHA stops weak trials early")
    p.add_argument("--search", choices=["random", "grid", "optuna"], default="random")
    p.add_argument(
        "--ray-address", default="", help="an existing Ray cluster (auto, ray://host:port); default: a local Ray"
    )
    p.add_argument("--resources", default="cpu=1,gpu=0", help="per trial, e.g. cpu=2,gpu=0.5")
    p.add_argument("--out", type=Path, help="where the search goes (default tune/<env>-<time>)")
    p.add_argument("--resume", type=Path, metavar="OUT", help="continue an interrupted search")
    p.add_argument(
        "--preset", help="a named set of settings under every trial (tiny: seconds; fast: 50k steps; quality: 1M steps)"
    )
    _config_flags(p)
    p.set_defaults(func=_cmd("commands:tune"))

    cfg_cmd = sub.add_parser("config", help="the settings a command would use").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    p = cfg_cmd.add_parser(
        "show",
        help="print the resolved training settings, each with the layer it came from",
        description="Every setting of `gailkit train` with these flags, and where its value came from: default, "
        "experts/<env>.gail.yaml, --preset, --config, flags or --set. Example: gailkit config show --env Hopper-v4 "
        "--preset tiny --set ppo.n_steps=128",
    )
    p.add_argument("--env", help="gymnasium id, envs/ name, module:Class or file.py:Class")
    p.add_argument("--demos", help="a demo file or folder")
    p.add_argument("--preset", help="a named set of settings (tiny, fast, quality)")
    _config_flags(p)
    p.set_defaults(func=_cmd("commands:config_show"))

    from gailkit.cli.demo_commands import add_parsers

    add_parsers(sub, _cmd)
    from gailkit.cli.help import finish

    finish(parser)
    return parser


def _warning_line(message, category, filename, lineno, file=None, line=None) -> None:
    print(f"gailkit: warning: {message}", file=sys.stderr)


def _thread_exception(args) -> None:
    """A writer thread's OS error (TensorBoard's, on a full disk) is reported by the main thread's next
    write, in one line; anything else as Python would."""
    if not issubclass(args.exc_type, OSError):
        threading.__excepthook__(args)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    warnings.showwarning = _warning_line
    threading.excepthook = _thread_exception
    try:
        return int(args.func(args) or 0)
    except GailkitError as e:
        print(f"gailkit: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `gailkit ... | head`: the reader has all it wanted
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as e:  # the OS said no: a read-only folder, a full disk, a missing file
        where = f"{e.filename}: " if e.filename else ""
        print(f"gailkit: error: {where}{e.strerror or e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gailkit: interrupted", file=sys.stderr)
        return 130
