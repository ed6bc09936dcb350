"""gailkit's GAIL against imitation's GAIL on the same demos, machine and env-step budget, in one run.

    python bench/gail_vs_imitation.py --env Hopper-v4 --demos data/hopper.arrow --seeds 0 1 2 --steps 1000000
    python bench/gail_vs_imitation.py --env CartPole-v1 --demos data/cartpole.arrow --steps 150000 --eval-every-steps 10000

gailkit runs in this process with its shipped defaults (experts/<env>.gail.yaml, or the generic
ones); imitation 1.0.1 runs in its own environment (.venv-imitation: it pins gymnasium 0.29 and
SB3 2.2) through bench/imitation_gail.py, with its own tuned settings for MuJoCo envs (shipped
inside the imitation package) or its documented CartPole settings. Both are evaluated the same
way: the deterministic policy on the same episode seeds (`seed + 1,000,000 + i`), every
`--eval-every-steps` env steps; evaluation time is left out of the wall-clock. Normalized score:
(R - R_random) / (R_expert - R_random), R_expert = the expert policy's return from the demos'
metadata (the demos' mean return when they carry none), R_random = gailkit's random-policy
reference for that seed. Prints a Markdown table for BENCHMARKS.md and writes JSON lines to --out.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch as th

from gailkit.data import demos, envs
from gailkit.run import checkpoint, metrics, train

ROOT = Path(__file__).resolve().parents[1]


def run_gailkit(args, seed: int, tmp: Path) -> dict:
    cfg = train.train_config(
        args.env,
        args.demos,
        None,
        [f"seed={seed}", f"total_steps={args.steps}", f"eval_episodes={args.eval_episodes}", *args.set],
    )
    cfg.eval_every = max(1, args.eval_every_steps // cfg.round_steps)
    run = tmp / f"gailkit-{seed}"
    summary = train.train(cfg, run, quiet=True, log=lambda m: None)
    rows = metrics.read_rows(run / "metrics.csv")
    curve = eval_curve(rows)
    split = {k: sum(float(r[f"time/{k}_s"]) for r in rows) / len(rows) for k in ("collect", "reward", "ppo", "disc")}
    refs = checkpoint.load(run / "final" / "checkpoint.pt").references
    return {
        "curve": curve,
        "round_split_s": split,
        "per_round_steps": cfg.round_steps,
        "expert": refs.expert_return,
        "expert_source": refs.expert_source,
        "random": refs.random_return,
        "fps": summary["env_steps"] / summary["seconds"],
    }


def eval_curve(rows: list[dict]) -> list[tuple[int, float, float]]:
    """`(env steps, seconds without evaluation time, evaluation return)` of every evaluated round."""
    curve, eval_time = [], 0.0
    for r in rows:
        if r.get("eval/return_mean"):
            eval_time += float(r["time/eval_s"])
            curve.append((int(r["env_steps"]), float(r["time/elapsed_s"]) - eval_time, float(r["eval/return_mean"])))
    return curve


def run_imitation(args, seed: int, tmp: Path) -> dict:
    out = tmp / f"imitation-{seed}.json"
    cmd = [
        args.imitation_python,
        str(ROOT / "bench" / "imitation_gail.py"),
        "--env",
        args.env,
        "--demos",
        args.demos,
        "--seed",
        str(seed),
        "--steps",
        str(args.steps),
        "--eval-every-steps",
        str(args.eval_every_steps),
        "--eval-episodes",
        str(args.eval_episodes),
        "--eval-seed",
        str(seed + 1_000_000),
        "--out",
        str(out),
    ]
    with open(tmp / f"imitation-{seed}.log", "w") as log:  # imitation prints a table per round
        subprocess.run(cmd, check=True, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    return json.loads(out.read_text())


def first_reaching(curve, target, r_random, r_expert):
    for steps, seconds, ret in curve:
        if (ret - r_random) / (r_expert - r_random) >= target:
            return steps, seconds
    return None, None


def scored(res: dict, target: float = 0.9) -> dict:
    """A run's `curve` against its references (`expert`, `random` returns): env steps and seconds to `target`
    of the expert, and its best and final returns as table cells, each with its normalized score."""
    r_exp, r_rand = res["expert"], res["random"]
    steps, seconds = first_reaching(res["curve"], target, r_rand, r_exp)
    rets = [c[2] for c in res["curve"]]

    def cell(ret: float) -> str:
        return f"{ret:.0f} ({(ret - r_rand) / (r_exp - r_rand):.2f})"

    return {"steps": steps, "seconds": seconds, "best": cell(max(rets)), "final": cell(rets[-1])}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--env", required=True)
    p.add_argument("--demos", required=True)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=1_000_000)
    p.add_argument("--eval-every-steps", type=int, default=20_000)
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--tools", nargs="+", default=["gailkit", "imitation"], choices=["gailkit", "imitation"])
    p.add_argument("--imitation-python", default=str(ROOT / ".venv-imitation" / "bin" / "python"))
    p.add_argument("--set", action="append", default=[], help="a gailkit setting for this run (ablations)")
    p.add_argument("--out", type=Path, default=Path("bench/out/gail.jsonl"))
    args = p.parse_args()
    th.set_num_threads(1)
    d = demos.load(args.demos, env_id=args.env, spaces=envs.spaces(args.env))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    print(
        f"# {args.env}, {d.n_episodes} expert episodes, {args.steps:,} env steps, seeds {args.seeds}, {platform.machine()}, "
        f"torch {th.__version__}, {time.strftime('%Y-%m-%d')}",
        flush=True,
    )
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            results = {}
            for tool in args.tools:
                results[tool] = (
                    run_gailkit(args, seed, Path(tmp)) if tool == "gailkit" else run_imitation(args, seed, Path(tmp))
                )
            g = results.get("gailkit") or run_gailkit_refs(args, seed)
            for tool, res in results.items():
                r_exp, r_rand = g["expert"], g["random"]
                row = {
                    "env": args.env,
                    "tool": tool,
                    "seed": seed,
                    "expert": r_exp,
                    "expert_source": g["expert_source"],
                    "random": r_rand,
                    "curve": res["curve"],
                    "per_round_steps": res["per_round_steps"],
                    "round_split_s": res.get("round_split_s"),
                    "settings": args.set if tool == "gailkit" else res.get("settings"),
                }
                for target in (0.9, 0.95):
                    row[f"steps_{target}"], row[f"seconds_{target}"] = first_reaching(
                        res["curve"], target, r_rand, r_exp
                    )
                norm = [(c[2] - r_rand) / (r_exp - r_rand) for c in res["curve"]]
                row.update(
                    final=norm[-1], best=max(norm), final_return=res["curve"][-1][2], total_seconds=res["curve"][-1][1]
                )
                rows.append(row)
                with open(args.out, "a") as f:
                    f.write(json.dumps(row) + "\n")
                print(
                    f"{tool:9} seed {seed}: 0.9 at {row['steps_0.9']} steps / {row['seconds_0.9']} s, 0.95 at "
                    f"{row['steps_0.95']}, best {row['best']:.2f}, final {row['final']:.2f} ({row['final_return']:.0f}), "
                    f"train time {row['total_seconds']:.0f} s",
                    flush=True,
                )
    print(f"\nexpert return {rows[0]['expert']:.1f} ({rows[0]['expert_source']}), random {rows[0]['random']:.1f}\n")
    print("| tool | seed | steps to 0.9 | s to 0.9 | steps to 0.95 | s to 0.95 | best | final (return) | training s |")
    print("|---|---|---|---|---|---|---|---|---|")
    fmt_s = lambda v: "not reached" if v is None else f"{v:,}"  # noqa: E731
    fmt_t = lambda v: "–" if v is None else f"{v:.0f}"  # noqa: E731
    for r in rows:
        print(
            f"| {r['tool']} | {r['seed']} | {fmt_s(r['steps_0.9'])} | {fmt_t(r['seconds_0.9'])} | {fmt_s(r['steps_0.95'])} | "
            f"{fmt_t(r['seconds_0.95'])} | {r['best']:.2f} | {r['final']:.2f} ({r['final_return']:.0f}) | {r['total_seconds']:.0f} |"
        )
    for r in rows:
        if r["round_split_s"]:
            sp = r["round_split_s"]
            print(
                f"gailkit seed {r['seed']} round ({r['per_round_steps']} steps), mean s: collect {sp['collect']:.3f}, "
                f"reward {sp['reward']:.4f}, ppo {sp['ppo']:.3f}, disc {sp['disc']:.3f}"
            )


def run_gailkit_refs(args, seed: int) -> dict:
    """The references gailkit would use for this seed, when only imitation runs."""
    from gailkit.run.rundir import RunDir
    from gailkit.run.session import Run

    cfg = train.train_config(args.env, args.demos, None, [f"seed={seed}", f"eval_episodes={args.eval_episodes}"])
    with tempfile.TemporaryDirectory() as tmp:
        refs = Run.prepare(cfg, RunDir(Path(tmp) / "r"), log=lambda m: None).references
    return {"expert": refs.expert_return, "expert_source": refs.expert_source, "random": refs.random_return}


if __name__ == "__main__":
    sys.exit(main())
