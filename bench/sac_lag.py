"""How much policy lag the off-policy generator tolerates: SAC (`generator: sac`) trained on fragments
collected with the weights of K rounds ago, K = 0, 1, 4, 16, ..., everything else equal, one run per K.

    OMP_NUM_THREADS=1 python bench/sac_lag.py --env Pendulum-v1 --demos data/pendulum.arrow --lags 0 1 4 16 64

The lag is simulated in one process: the in-process fleet's actor is given the tensors of K rounds ago
under the current version number, so the learner (whose own check admits `fleet.max_policy_lag` 0 or 1)
trains on them as if they were fresh; the true lag is K rounds of `sac.n_steps` env steps each. This
measures what the learning tolerates, separately from what a fleet can pipeline (ZeroMQ and Ray fleets
collect at most one round ahead today). Evaluation: the deterministic policy every `--eval-every-steps`,
normalized against the expert policy's return (the demo file's metadata) and a random policy's.
Prints a Markdown table and appends JSON lines to --out.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import torch as th
from gail_vs_imitation import eval_curve, scored

from gailkit.core.fragments import Weights
from gailkit.rollout import fleet
from gailkit.run import checkpoint, metrics, train


def run(args, lag: int, seed: int, tmp: Path) -> dict:
    history: collections.deque = collections.deque(maxlen=lag + 1)

    def collect(self, weights: Weights, n_steps: int):
        history.append(weights.tensors)
        self.actor.set_weights(Weights(weights.version, history[0]))  # the tensors of `lag` rounds ago
        return [self.actor.sample(n_steps)]

    sets = [f"seed={seed}", f"total_steps={args.steps}", "generator=sac", "fleet.actors=0", *args.set]
    cfg = train.train_config(args.env, args.demos, None, sets)
    cfg.eval_every = max(1, args.eval_every_steps // cfg.round_steps)
    original = fleet.InProcessFleet.collect
    fleet.InProcessFleet.collect = collect  # type: ignore[method-assign]
    try:
        summary = train.train(cfg, tmp / f"lag{lag}-{seed}", quiet=True, log=lambda m: None)
    finally:
        fleet.InProcessFleet.collect = original  # type: ignore[method-assign]
    refs = checkpoint.load(tmp / f"lag{lag}-{seed}" / "final" / "checkpoint.pt").references
    return {
        "curve": eval_curve(metrics.read_rows(tmp / f"lag{lag}-{seed}" / "metrics.csv")),
        "expert": refs.expert_return,
        "random": refs.random_return,
        "seconds": summary["seconds"],
        "round_steps": cfg.round_steps,
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--env", required=True)
    p.add_argument("--demos", required=True)
    p.add_argument("--lags", type=int, nargs="+", default=[0, 1, 4, 16, 64])
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--steps", type=int, default=30_000)
    p.add_argument("--eval-every-steps", type=int, default=2_000)
    p.add_argument("--set", action="append", default=[], help="a setting for every run")
    p.add_argument("--out", type=Path, default=Path("bench/out/sac_lag.jsonl"))
    args = p.parse_args()
    th.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    print(
        f"# {args.env}, {args.demos}, SAC, {args.steps:,} env steps, seeds {args.seeds}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs, torch {th.__version__}, {time.strftime('%Y-%m-%d')}",
        flush=True,
    )
    print("| lag (rounds) | lag (env steps) | seed | expert | random | steps to 0.9 | best | final |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            for lag in args.lags:
                res = run(args, lag, seed, Path(tmp))
                s = scored(res)
                steps = s["steps"]
                with open(args.out, "a") as f:
                    f.write(json.dumps({"env": args.env, "lag": lag, "seed": seed, **res}) + "\n")
                print(
                    f"| {lag} | {lag * res['round_steps']:,} | {seed} | {res['expert']:.0f} | {res['random']:.0f} | "
                    f"{f'{steps:,}' if steps else '-'} | {s['best']} | {s['final']} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
