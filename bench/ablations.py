"""What each part of gailkit's GAIL recipe is worth: one training run per variant, same demos, seed and budget.

    python bench/ablations.py --env Hopper-v4 --demos data/hopper.arrow --steps 300000
    python bench/ablations.py --env Hopper-v4 --demos data/hopper.arrow --only defaults no-bc

Each variant is the defaults with a few settings changed (the table below says which). Evaluation:
the deterministic policy on 10 fixed episodes every `--eval-every-steps`; normalized against the
expert policy's return from the demos' metadata. Prints a Markdown table for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from pathlib import Path

import torch as th

from gailkit.run import checkpoint, metrics, train

VARIANTS = {
    "defaults": [],
    "no BC (neither warm start nor BC term)": ["bc.epochs=0", "bc.steps_per_round=0", "bc.critic_warmup_rounds=0"],
    "BC warm start only (no BC term)": ["bc.steps_per_round=0"],
    "no critic warm-up": ["bc.critic_warmup_rounds=0"],
    "BC term never annealed": ["bc.anneal_steps=1000000000"],
    "no absorbing states (reward auto)": ["disc.absorbing=false", "disc.reward_fn=auto"],
    "reward airl (logit)": ["disc.reward_fn=airl"],
    "+ gradient penalty 10": ["disc.grad_penalty=10"],
    "+ spectral norm": ["disc.spectral_norm=true"],
    "+ label smoothing 0.1": ["disc.label_smoothing=0.1"],
    "+ replay of 4 earlier rounds": ["disc.replay_rounds=4"],
    "+ linear lr and clip decay": ["ppo.linear_schedule=true"],
    "no observation normalization": ["normalize_obs=false"],
    "PPO minibatches of 64": ["ppo.batch_size=64"],
    "rounds of 8 x 2048 steps (SB3's n_steps)": ["ppo.n_steps=2048", "ppo.batch_size=64"],
    "discriminator 32x32 (gailkit 0.1)": ["disc.net_arch=[32,32]"],
}
SLUGS = {name.split(" (")[0].lower().replace(" ", "-").replace("+-", "").replace(",", ""): name for name in VARIANTS}


def run(env: str, demos: str, steps: int, seed: int, every: int, extra: list[str], tmp: Path) -> dict:
    cfg = train.train_config(env, demos, None, [f"seed={seed}", f"total_steps={steps}", "eval_episodes=10", *extra])
    cfg.eval_every = max(1, every // cfg.round_steps)
    run_dir = tmp / f"run{time.monotonic_ns()}"
    s = train.train(cfg, run_dir, quiet=True, log=lambda m: None)
    refs = checkpoint.load(run_dir / "final" / "checkpoint.pt").references
    curve = [
        (int(r["env_steps"]), float(r["eval/normalized"]))
        for r in metrics.read_rows(run_dir / "metrics.csv")
        if r.get("eval/normalized")
    ]
    reach = {t: next((st for st, v in curve if v >= t), None) for t in (0.9, 0.95)}
    return {
        "curve": curve,
        "reach": reach,
        "best": max(v for _, v in curve),
        "final": curve[-1][1],
        "seconds": s["seconds"],
        "expert": refs.expert_return,
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--env", default="Hopper-v4")
    p.add_argument("--demos", default="data/hopper.arrow")
    p.add_argument("--steps", type=int, default=300_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval-every-steps", type=int, default=20_000)
    p.add_argument("--only", nargs="+", help=f"variants by slug: {', '.join(SLUGS)}")
    args = p.parse_args()
    th.set_num_threads(1)
    chosen = [SLUGS[s] for s in args.only] if args.only else list(VARIANTS)
    print(
        f"# {args.env}, seed {args.seed}, {args.steps:,} env steps per variant, {platform.machine()}, "
        f"torch {th.__version__}, {time.strftime('%Y-%m-%d')}",
        flush=True,
    )
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in chosen:
            r = run(args.env, args.demos, args.steps, args.seed, args.eval_every_steps, VARIANTS[name], Path(tmp))
            rows.append((name, r))
            print(
                f"{name}: 0.9 at {r['reach'][0.9]}, 0.95 at {r['reach'][0.95]}, best {r['best']:.2f}, final {r['final']:.2f}, "
                f"{r['seconds']:.0f} s; curve " + " ".join(f"{s // 1000}k:{v:.2f}" for s, v in r["curve"]),
                flush=True,
            )
    print(f"\nexpert return {rows[0][1]['expert']:.1f} (expert policy)\n")
    print("| variant | settings | steps to 0.9 | steps to 0.95 | best | final | seconds |")
    print("|---|---|---|---|---|---|---|")
    fmt = lambda v: "not reached" if v is None else f"{v:,}"  # noqa: E731
    for name, r in rows:
        print(
            f"| {name} | {' '.join(VARIANTS[name]) or '–'} | {fmt(r['reach'][0.9])} | {fmt(r['reach'][0.95])} | "
            f"{r['best']:.2f} | {r['final']:.2f} | {r['seconds']:.0f} |"
        )


if __name__ == "__main__":
    main()
