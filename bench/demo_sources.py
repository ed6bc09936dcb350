"""The same expert episodes from three sources: Arrow with actions, Arrow without actions (learning
from observation), and a Minari dataset; one GAIL run each, same seed and budget.

    python bench/demo_sources.py --env CartPole-v1 --demos data/cartpole.arrow --steps 100000
    python bench/demo_sources.py --env Hopper-v4 --demos data/hopper.arrow --steps 300000 --sources arrow no-actions minari

The action-free file is `gailkit demos strip-actions`'s output; the Minari dataset is written by
`gailkit demos convert ... minari:ID` (HDF5 storage, with the `minari` package's own writer) into a
temporary Minari root, and read back by path. Training uses gailkit's defaults for the env (its
experts/<env>.gail.yaml where one exists); without actions that means the (obs, next_obs)
discriminator and no BC. Evaluation: the deterministic policy on 10 fixed episodes every
`--eval-every-steps`, normalized against the expert policy's return from the demos' metadata.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

import torch as th
from ablations import run  # bench/ is on the path when a script in it runs

from gailkit.data import demos, envs

SOURCES = {
    "arrow": "Arrow, obs + actions",
    "no-actions": "Arrow, no actions (strip-actions)",
    "minari": "Minari dataset (HDF5)",
}


def make_source(kind: str, src: str, env: str, tmp: Path) -> str:
    if kind == "arrow":
        return src
    d = demos.load(src, env_id=env, spaces=envs.spaces(env))
    if kind == "no-actions":
        return str(demos.save(demos.strip_actions(d), tmp / "no-actions.arrow"))
    os.environ["MINARI_DATASETS_PATH"] = str(tmp / "minari")
    name = env.split("-")[0].lower()
    return str(demos.save(d, f"minari:gailkit/{name}-expert-v0"))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--env", required=True)
    p.add_argument("--demos", required=True)
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval-every-steps", type=int, default=10_000)
    p.add_argument("--sources", nargs="+", default=["arrow", "no-actions"], choices=list(SOURCES))
    args = p.parse_args()
    th.set_num_threads(1)
    print(
        f"# {args.env}, {args.demos}, seed {args.seed}, {args.steps:,} env steps per source, {platform.machine()}, "
        f"torch {th.__version__}, {time.strftime('%Y-%m-%d')}",
        flush=True,
    )
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.sources:
            path = make_source(kind, args.demos, args.env, Path(tmp))
            r = run(args.env, path, args.steps, args.seed, args.eval_every_steps, [], Path(tmp))
            rows.append((kind, r))
            print(
                f"{SOURCES[kind]}: 0.9 at {r['reach'][0.9]}, 0.95 at {r['reach'][0.95]}, best {r['best']:.2f}, "
                f"final {r['final']:.2f}, {r['seconds']:.0f} s; curve "
                + " ".join(f"{s // 1000}k:{v:.2f}" for s, v in r["curve"]),
                flush=True,
            )
    print(f"\nexpert return {rows[0][1]['expert']:.1f} (expert policy)\n")
    print("| env | demos | steps to 0.9 | steps to 0.95 | best | final | seconds |")
    print("|---|---|---|---|---|---|---|")
    fmt = lambda v: "not reached" if v is None else f"{v:,}"  # noqa: E731
    for kind, r in rows:
        print(
            f"| {args.env} | {SOURCES[kind]} | {fmt(r['reach'][0.9])} | {fmt(r['reach'][0.95])} | {r['best']:.2f} | "
            f"{r['final']:.2f} | {r['seconds']:.0f} |"
        )


if __name__ == "__main__":
    main()
