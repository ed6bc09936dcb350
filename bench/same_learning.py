"""Does a refactor change what gailkit learns? Train the same run with an older commit and with this tree,
then compare every metric of every round (timings aside) and the wall time.

    OMP_NUM_THREADS=1 python bench/same_learning.py --ref 0d8f261 --env Hopper-v4 --demos data/hopper.arrow \\
        --steps 30000

The older commit is checked out into a temporary git worktree and run with its own code first on the
path; both runs use this interpreter, the same seed and the same settings. Prints one Markdown row:
rounds, metric cells compared, cells that differ, each run's last evaluation and wall seconds.
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMING = ("time/", "fps", "per_s", "wall", "_s")


def _train(code: Path, run_dir: Path, args: argparse.Namespace) -> float:
    cmd = [sys.executable, "-m", "gailkit.cli", "train", "--env", args.env, "--demos", args.demos]
    cmd += ["--total-steps", str(args.steps), "--seed", str(args.seed), "--quiet", "--run-dir", str(run_dir)]
    for s in args.set:
        cmd += ["--set", s]
    env = dict(os.environ, PYTHONPATH=str(code), OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    start = time.perf_counter()
    subprocess.run(cmd, cwd=code, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def _rows(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "metrics.csv") as f:
        return list(csv.DictReader(f))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ref", required=True, help="the older commit")
    p.add_argument("--env", required=True)
    p.add_argument("--demos", required=True)
    p.add_argument("--steps", type=int, default=30_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--set", action="append", default=[])
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="same-learning-"))
    old_tree = tmp / "ref"
    subprocess.run(["git", "worktree", "add", "--detach", str(old_tree), args.ref], cwd=ROOT, check=True)
    try:
        old_s = _train(old_tree, tmp / "run-ref", args)
        new_s = _train(ROOT, tmp / "run-new", args)
        old, new = _rows(tmp / "run-ref"), _rows(tmp / "run-new")
        keys = [k for k in old[0] if k in new[0] and not any(t in k for t in TIMING)]
        cells = sum(1 for _ in zip(old, new)) * len(keys)
        differ = sum(a[k] != b[k] for a, b in zip(old, new) for k in keys)
        first = next(((i, k, a[k], b[k]) for i, (a, b) in enumerate(zip(old, new)) for k in keys if a[k] != b[k]), None)
        if first is not None:
            print(f"first difference: row {first[0]}, {first[1]}: {first[2]} (ref) vs {first[3]} (this tree)")
        last = [
            next((r["eval/return_mean"] for r in reversed(rows) if r.get("eval/return_mean")), "")
            for rows in (old, new)
        ]
        print(
            f"| {args.env} | {args.steps:,} | {len(old)} / {len(new)} | {cells:,} | {differ} | {last[0]} / {last[1]} | "
            f"{old_s:.0f} / {new_s:.0f} ({new_s / old_s:.2f}x) |"
        )
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(old_tree)], cwd=ROOT, check=False)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
