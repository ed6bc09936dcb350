"""How long loading 1,000,000 expert transitions takes, by format, in one run.

    python bench/demo_load.py [--transitions 1000000] [--obs-dim 17] [--repeats 3]

Writes each format once into a temp folder, then times loading it back to numpy arrays (best and
median of `--repeats`, page cache warm, so the figure is the loader's own cost without the disk
read; the file size tells what a cold read adds). Peers: gailkit's restricted pickle loader, and
imitation's own `serialize.load` followed by `flatten_trajectories`, the usual imitation path.
Writing imitation's formats needs imitation, which pins gymnasium 0.29: run it with the
imitation environment's python (`.venv-imitation/bin/python bench/demo_load.py`).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from gailkit.data import demos


def make_demos(n: int, obs_dim: int, act_dim: int, episode_len: int) -> demos.Demos:
    rng = np.random.default_rng(0)
    n_eps = n // episode_len
    all_obs = rng.standard_normal((n + n_eps, obs_dim), dtype=np.float32)
    episode_id = np.repeat(np.arange(n_eps), episode_len)
    step = np.tile(np.arange(episode_len), n_eps)
    idx = np.arange(n) + episode_id
    last = step == episode_len - 1
    return demos.Demos(
        obs=all_obs[idx],
        next_obs=all_obs[idx + 1],
        acts=rng.uniform(-1, 1, (n, act_dim)).astype(np.float32),
        terminated=np.zeros(n, bool),
        truncated=last,
        episode_id=episode_id,
        step=step,
        rews=rng.standard_normal(n).astype(np.float32),
        meta=demos.DemoMeta(env_id="Bench-v0", source="bench"),
    )


def timed(fn, repeats: int) -> tuple[float, float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
        del out
    return min(times), statistics.median(times)


def size_of(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*")) if path.is_dir() else path.stat().st_size


def imitation_load(path: Path) -> np.ndarray:
    from imitation.data import rollout, serialize

    trajs = serialize.load(path)
    t = rollout.flatten_trajectories(list(trajs))
    return t.obs


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--transitions", type=int, default=1_000_000)
    p.add_argument("--obs-dim", type=int, default=17)
    p.add_argument("--act-dim", type=int, default=6)
    p.add_argument("--episode-len", type=int, default=1000)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    d = make_demos(args.transitions, args.obs_dim, args.act_dim, args.episode_len)
    print(
        f"# {args.transitions:,} transitions, obs ({args.obs_dim},) float32, acts ({args.act_dim},) float32, "
        f"episodes of {args.episode_len}; {platform.processor() or platform.machine()}, python {platform.python_version()}"
    )
    import gymnasium as gym

    spaces = (
        gym.spaces.Box(-np.inf, np.inf, (args.obs_dim,), np.float32),
        gym.spaces.Box(-1, 1, (args.act_dim,), np.float32),
    )
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        cases = [
            ("gailkit load, Arrow IPC (.arrow)", "d.arrow", {}, lambda f: demos.load(f)),
            (
                "gailkit load + validate vs Box spaces, Arrow IPC",
                "d.arrow",
                None,
                lambda f: demos.load(f, env_id="Bench-v0", spaces=spaces),
            ),
            ("gailkit load, Parquet", "d.parquet", {}, lambda f: demos.load(f)),
            ("gailkit load, pickle dict (restricted unpickler)", "d.pkl", {}, lambda f: demos.load(f)),
            (
                "gailkit load, pickle of imitation trajectories",
                "t.pkl",
                {"pickle_layout": "trajectories"},
                lambda f: demos.load(f),
            ),
            ("gailkit load, imitation dataset folder", "ds", {}, lambda f: demos.load(f)),
            ("imitation serialize.load + flatten_trajectories", "ds", None, imitation_load),
        ]
        for label, name, save_kwargs, load in cases:
            path = tmp / name
            if save_kwargs is not None:
                demos.save(d, path, **save_kwargs)
            load(path)  # warm the page cache and imports
            best, median = timed(lambda load=load, path=path: load(path), args.repeats)
            rows.append((label, size_of(path), best, median))
            print(
                f"{label:<52} {size_of(path) / 2**20:8.1f} MiB  best {best:7.3f} s  median {median:7.3f} s", flush=True
            )
    base = rows[0][2]
    print("\n| loader | file size | best (s) | median (s) | vs Arrow |\n|---|---|---|---|---|")
    for label, size, best, median in rows:
        print(f"| {label} | {size / 2**20:.1f} MiB | {best:.3f} | {median:.3f} | {best / base:.1f}x |")


if __name__ == "__main__":
    main()
