"""Imitation where behaviour cloning fails: BC alone, gailkit with the PPO generator and with the SAC one,
on the same demos, machine and env-step budget, in one run.

    python bench/where_bc_fails.py --env Hopper-v4 --protocol c --seeds 0 --steps 100000
    python bench/where_bc_fails.py --env Hopper-v4 --protocol d --arms ppo sac --steps 200000

Protocols, made from the shipped demos (`data/<env>.arrow`, 25 episodes of the shipped expert) with
`gailkit demos subsample` / `strip-actions` at the seed's own draw:
  a: all 25 full episodes;  b: 1 full episode;  c: 4 episodes, every 20th transition (GAIL's protocol,
  200 transitions, no episode structure);  d: 4 full episodes without actions.
Arms: `bc` (gailkit's BC warm start alone: one round in which the cloned policy is not trained,
then evaluated), `ppo` and `sac` (`--generator`, each with its shipped defaults plus `--set`),
`imitation-bc` and `imitation-gail` (imitation 1.0.1's BC and GAIL with its tuned settings, run by
`bench/imitation_gail.py` in the imitation environment, `make setup-imitation`; scored against the same
references, which this script computes as a gailkit run does).
Every arm is evaluated the same way (the deterministic policy, 10 episodes from the run's evaluation
seed, every `--eval-every-steps`); evaluation time is left out of the seconds. `--fresh-episodes N` then plays
a gailkit run's best checkpoint (what `gailkit export` ships; chosen on those evaluations, so its own figure
is the luckiest draw) and its last policy on N episodes of other seeds. Normalized score:
(R - R_random) / (R_expert - R_random), R_expert = the expert policy's own return (the source file's
metadata), printed beside every score. Prints a Markdown table and writes JSON lines to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import torch as th
from gail_vs_imitation import eval_curve, scored  # the same curve and threshold

from gailkit.data import demos, envs
from gailkit.run import checkpoint, evaluate, metrics, session, train

ROOT = Path(__file__).resolve().parents[1]
ENV_FILES = {"Hopper-v4": "hopper", "HalfCheetah-v4": "halfcheetah", "Walker2d-v4": "walker2d", "Ant-v4": "ant"}
PROTOCOLS = {"a": (25, 1, True), "b": (1, 1, True), "c": (4, 20, True), "d": (4, 1, False)}
FRESH_SEED = 2_000_000
"""`--fresh-episodes` start here (+ the run's seed); a run's own evaluations start at 1,000,000 + its seed."""


def make_demos(env: str, protocol: str, seed: int, out: Path, episodes: int | None = None) -> Path:
    """The protocol's demo file; `episodes` in place of the protocol's number of episodes."""
    n, every, actions = PROTOCOLS[protocol]
    episodes = episodes or n
    d = demos.check(demos.load_file(ROOT / "data" / f"{ENV_FILES[env]}.arrow"))
    d = demos.subsample(d, episodes, every, seed)
    return demos.save(d if actions else demos.strip_actions(d), out / f"{env}-{protocol}-{seed}.arrow")


def extra_settings(args, arm: str) -> list[str]:
    return [*args.set, *(args.set_sac if arm == "sac" else []), *(args.set_ppo if arm == "ppo" else [])]


def run_arm(args, arm: str, seed: int, demo_file: Path, tmp: Path) -> dict:
    steps = 1 if arm == "bc" else args.steps
    generator = "ppo" if arm == "bc" else arm
    extra = extra_settings(args, arm)
    cfg = train.train_config(
        args.env,
        str(demo_file),
        None,
        [
            f"seed={seed}",
            f"total_steps={steps}",
            f"eval_episodes={args.eval_episodes}",
            f"generator={generator}",
            *extra,
        ],
    )
    if arm != "bc":
        cfg.eval_every = max(1, args.eval_every_steps // cfg.round_steps)
    run = tmp / f"{arm}-{seed}"
    summary = train.train(cfg, run, quiet=True, log=lambda m: None)
    curve = eval_curve(metrics.read_rows(run / "metrics.csv"))
    if args.keep_metrics:  # every round's figures (losses, rewards, entropy), not only the evaluations
        args.keep_metrics.mkdir(parents=True, exist_ok=True)
        shutil.copy(run / "metrics.csv", args.keep_metrics / f"{args.env}-{args.protocol}-{arm}-{seed}.csv")
    refs = checkpoint.load(run / "final" / "checkpoint.pt").references
    res = {"curve": curve, "expert": refs.expert_return, "random": refs.random_return, "seconds": summary["seconds"]}
    if args.fresh_episodes and arm != "bc":  # what a user exports (the best checkpoint) and the last policy, both
        for which in ("best", "final"):  # judged again on episodes neither was chosen on
            out = evaluate.evaluate(run, episodes=args.fresh_episodes, seed=seed + FRESH_SEED, plots=False, which=which)
            res[f"fresh_{which}"] = out["policy"]["return_mean"]
    return res


def run_imitation(args, arm: str, seed: int, demo_file: Path, tmp: Path) -> dict:
    """imitation's BC or GAIL on the same file, evaluated on the same seeds, against the references a gailkit
    run of this seed computes (the file's expert return; the random policy from `seed + 1_000_000`)."""
    cfg = train.train_config(args.env, str(demo_file), None, [f"seed={seed}", f"eval_episodes={args.eval_episodes}"])
    refs = session.run_references(cfg, envs.spaces(cfg.env), demos.load_file(demo_file), False)
    out = tmp / f"{arm}-{seed}.json"
    cmd = [args.imitation_python, str(ROOT / "bench" / "imitation_gail.py"), "--algo", arm.split("-")[1]]
    cmd += ["--env", args.env, "--demos", str(demo_file), "--seed", str(seed), "--steps", str(args.steps)]
    cmd += ["--eval-every-steps", str(args.eval_every_steps), "--eval-episodes", str(args.eval_episodes)]
    cmd += ["--eval-seed", str(refs.random_seed), "--out", str(out)]
    with open(tmp / f"{arm}-{seed}.log", "w") as log:  # imitation prints a table per round
        subprocess.run(cmd, check=True, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    res = json.loads(out.read_text())
    return {
        "curve": res["curve"],
        "expert": refs.expert_return,
        "random": refs.random_return,
        "seconds": res["curve"][-1][1],
        "imitation": {k: v for k, v in res.items() if k != "curve"},
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--env", required=True, choices=sorted(ENV_FILES))
    p.add_argument("--protocol", required=True, choices=sorted(PROTOCOLS))
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--episodes", type=int, help="this many episodes in place of the protocol's (a: 25, b: 1, c/d: 4)")
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument(
        "--arms",
        nargs="+",
        default=["bc", "ppo", "sac"],
        choices=["bc", "ppo", "sac", "imitation-bc", "imitation-gail"],
    )
    p.add_argument("--imitation-python", default=str(ROOT / ".venv-imitation" / "bin" / "python"))
    p.add_argument("--eval-every-steps", type=int, default=10_000)
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument(
        "--fresh-episodes",
        type=int,
        default=0,
        help="after a gailkit run, its best checkpoint (what `gailkit export` ships) and its last policy on this many "
        "episodes of other seeds than its evaluations'",
    )
    p.add_argument("--set", action="append", default=[], help="a setting for every arm")
    p.add_argument("--set-sac", action="append", default=[], help="a setting for the sac arm")
    p.add_argument("--set-ppo", action="append", default=[], help="a setting for the ppo arm")
    p.add_argument("--out", type=Path, default=Path("bench/out/where_bc_fails.jsonl"))
    p.add_argument("--keep-metrics", type=Path, help="copy each gailkit run's metrics.csv into this folder")
    args = p.parse_args()
    th.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    print(
        f"# {args.env}, protocol {args.protocol} {PROTOCOLS[args.protocol]}"
        f"{f', {args.episodes} episodes' if args.episodes else ''}, {args.steps:,} env steps, seeds "
        f"{args.seeds}, {platform.machine()}, {os.cpu_count()} CPUs, torch {th.__version__}, {time.strftime('%Y-%m-%d')}",
        flush=True,
    )
    print("| arm | seed | expert (policy) | random | steps to 0.9 | seconds to 0.9 | best | final |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            demo_file = make_demos(args.env, args.protocol, seed, Path(tmp), args.episodes)
            for arm in args.arms:
                run = run_imitation if arm.startswith("imitation") else run_arm
                res = run(args, arm, seed, demo_file, Path(tmp))
                s = scored(res)
                secs = s["seconds"]
                row = {"env": args.env, "protocol": args.protocol, "episodes": args.episodes, "arm": arm, "seed": seed,
                       **res, "settings": extra_settings(args, arm)}  # fmt: skip
                with open(args.out, "a") as f:
                    f.write(json.dumps(row) + "\n")
                fresh = "".join(
                    f" {w} on fresh episodes {res[f'fresh_{w}']:.0f} ({_norm(res, res[f'fresh_{w}']):.2f}) |"
                    for w in ("best", "final")
                    if f"fresh_{w}" in res
                )
                print(
                    f"| {arm} | {seed} | {res['expert']:.0f} | {res['random']:.0f} | {s['steps'] or '-'} | "
                    f"{f'{secs:.0f}' if secs else '-'} | {s['best']} | {s['final']} |{fresh}",
                    flush=True,
                )


def _norm(res: dict, ret: float) -> float:
    return (ret - res["random"]) / (res["expert"] - res["random"])


if __name__ == "__main__":
    main()
