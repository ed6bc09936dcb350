"""One summary table from `bench/gail_vs_imitation.py`'s JSON lines: a row per env and tool.

    python bench/summarize_gail.py bench/out/gail_hopper.jsonl bench/out/gail_halfcheetah.jsonl ...

Per env and tool, over its seeds: the expert policy's return (the reference every normalized score
uses), env steps and training seconds to 0.9 and 0.95 of the expert (each seed's figure; "–" where a
seed never got there), the best and final normalized score (min–max over seeds, rounded down), and the training
seconds for the whole budget (evaluation excluded).
"""

from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict


def fmt_steps(vals):
    return " / ".join("–" if v is None else f"{v / 1000:.0f}k" for v in vals)


def fmt_secs(vals):
    return " / ".join("–" if v is None else f"{v:.0f}" for v in vals)


def span(vals):
    """min–max, rounded down to 0.01 (so 0.949 never reads as 0.95)."""
    lo, hi = (math.floor(v * 100) / 100 for v in (min(vals), max(vals)))
    return f"{lo:.2f}" if lo == hi else f"{lo:.2f}–{hi:.2f}"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("files", nargs="+")
    args = p.parse_args()
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for path in args.files:
        with open(path) as f:
            for line in f:
                row = json.loads(line)
                groups[(row["env"], row["tool"])].append(row)
    print(
        "| env | expert return | tool | seeds | steps to 0.9 | s to 0.9 | steps to 0.95 | s to 0.95 | best | final | training s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for (env, tool), rows in groups.items():
        rows.sort(key=lambda r: r["seed"])
        print(
            f"| {env} | {rows[0]['expert']:,.1f} | {tool} | {len(rows)} | {fmt_steps([r['steps_0.9'] for r in rows])} | "
            f"{fmt_secs([r['seconds_0.9'] for r in rows])} | {fmt_steps([r['steps_0.95'] for r in rows])} | "
            f"{fmt_secs([r['seconds_0.95'] for r in rows])} | {span([r['best'] for r in rows])} | "
            f"{span([r['final'] for r in rows])} | {fmt_secs([r['total_seconds'] for r in rows])} |"
        )


if __name__ == "__main__":
    main()
