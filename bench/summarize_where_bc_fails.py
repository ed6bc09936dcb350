"""Where `bench/where_bc_fails.py`'s runs stay, not only where they end: a row per run from its JSON lines (`--out`),
and, from the folder its `--keep-metrics` filled, the mean of chosen metrics over a run's later rounds.

    python bench/summarize_where_bc_fails.py runs.jsonl --after 100000
    python bench/summarize_where_bc_fails.py runs.jsonl --metrics runs-metrics --from-step 300000 \
        --columns rollout/ep_len_mean disc/acc_gen train/explained_variance eval/normalized

Per run: the expert policy's and the random policy's return (the references every normalized score uses), env
steps to 0.9 of the expert, the best and the final normalized evaluation, the mean of the last three; and, over the
evaluations after `--after` env steps, the lowest, the share at 0.9 or above and the mean. Then the same over all
runs of the file. With `--metrics`, a line per run: each column's mean (or, with `--median`, its
median) over the rounds after `--from-step` (rounds that left a column empty are skipped).
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from pathlib import Path

from gail_vs_imitation import first_reaching

TARGET = 0.9


def summary(res: dict, after: int) -> dict:
    """One run's figures (see the module's text); `res` is a JSON line of `where_bc_fails.py`."""
    r_exp, r_rand = res["expert"], res["random"]
    norm = [(s, (ret - r_rand) / (r_exp - r_rand)) for s, _, ret in res["curve"]]
    later = [n for s, n in norm if s > after]
    return {
        "reach": first_reaching(res["curve"], TARGET, r_rand, r_exp)[0],
        "best": max(n for _, n in norm),
        "final": norm[-1][1],
        "last_three": sum(n for _, n in norm[-3:]) / len(norm[-3:]),
        **(
            {
                "lowest": min(later),
                "share": sum(n >= TARGET for n in later) / len(later),
                "mean": sum(later) / len(later),
            }
            if later
            else {}
        ),
    }


def metric_means(path: Path, from_step: int, columns: list[str], median: bool = False) -> dict[str, float]:
    with open(path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if int(r["env_steps"]) > from_step]
    out = {}
    for col in columns:
        vals = [float(r[col]) for r in rows if r.get(col)]
        out[col] = (statistics.median(vals) if median else statistics.fmean(vals)) if vals else float("nan")
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("jsonl", type=Path)
    p.add_argument("--after", type=int, default=100_352, help="evaluations after this many env steps (the 100k run)")
    p.add_argument("--metrics", type=Path, help="the folder `where_bc_fails.py --keep-metrics` filled")
    p.add_argument("--from-step", type=int, default=0)
    p.add_argument("--median", action="store_true", help="the metrics' median over the rounds, not their mean")
    p.add_argument("--columns", nargs="+", default=["rollout/ep_len_mean", "disc/acc_gen", "eval/normalized"])
    args = p.parse_args()
    runs = [json.loads(line) for line in args.jsonl.read_text().splitlines() if line.strip()]
    print(f"| env | arm | seed | expert / random | to {TARGET} | best | final | last three | after {args.after:,}: "
          f"lowest | ≥ {TARGET} | mean |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    figures = []
    for res in runs:
        s = summary(res, args.after)
        figures.append(s)
        reach = "–" if s["reach"] is None else f"{s['reach']:,}"
        later = f"{s['lowest']:.2f} | {s['share']:.0%} | {s['mean']:.2f}" if "share" in s else "– | – | –"
        print(
            f"| {res['env']} | {res['arm']} | {res['seed']} | {res['expert']:,.0f} / {res['random']:,.0f} | "
            f"{reach} | {s['best']:.2f} | {s['final']:.2f} | "
            f"{s['last_three']:.2f} | {later} |"
        )
    if figures:
        n = len(figures)
        print(
            f"\n{n} runs: {TARGET} reached on {sum(s['reach'] is not None for s in figures)}, final ≥ {TARGET} on "
            f"{sum(s['final'] >= TARGET for s in figures)}, mean final {sum(s['final'] for s in figures) / n:.2f}, "
            f"mean of the last three {sum(s['last_three'] for s in figures) / n:.2f}"
        )
        later = [s for s in figures if "share" in s]
        if later:
            print(
                f"after {args.after:,} ({len(later)} runs): {sum(s['share'] for s in later) / len(later):.0%} of "
                f"evaluations ≥ {TARGET}, mean {sum(s['mean'] for s in later) / len(later):.2f}, lowest "
                f"{min(s['lowest'] for s in later):.2f}"
            )
    if args.metrics:
        print(f"\n{'medians' if args.median else 'means'} over the rounds after {args.from_step:,} env steps:")
        for res in runs:
            path = args.metrics / f"{res['env']}-{res['protocol']}-{res['arm']}-{res['seed']}.csv"
            means = metric_means(path, args.from_step, args.columns, args.median)
            print(
                f"{res['env']} {res['arm']} seed {res['seed']}: " + ", ".join(f"{k} {v:.2f}" for k, v in means.items())
            )


if __name__ == "__main__":
    main()
