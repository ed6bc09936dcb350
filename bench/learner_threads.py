"""What the learner's torch threads (`threads`) do to its small steps, alone and beside one busy process.

    OMP_NUM_THREADS= python bench/learner_threads.py --steps 300

Times behaviour-cloning steps of gailkit's PPO policy on the shipped CartPole demos (an MLP, batch 256) with
1 thread and with every core, first on a quiet machine, then while one other process keeps a core busy (what a
local actor process, a second run or any other job does). Each measurement runs in a fresh process, since torch
fixes its thread pool once it has used it. The whole `gailkit train` side by side with SB3 is
`bench/ppo_throughput.py --threads N`.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import subprocess
import sys
import time

CHILD = """
import sys, time, numpy as np, torch as th
th.set_num_threads(int(sys.argv[1]))
from gailkit.run import train
from gailkit.data import envs, demos
from gailkit.algo.generator.ppo import PPOGenerator
cfg = train.train_config("CartPole-v1", "data/", None, [])
sp = envs.spaces(cfg.env)
g = PPOGenerator(*sp, cfg.ppo, cfg.policy, cfg.normalize_obs, cfg.total_envs, "cpu", 0)
d = demos.load("data/", env_id="CartPole-v1", spaces=sp)
rng = np.random.default_rng(0)
g.bc_steps(d.obs, d.acts, 10, 256, 1e-3, rng)
t = time.perf_counter()
g.bc_steps(d.obs, d.acts, int(sys.argv[2]), 256, 1e-3, rng)
print(1000 * (time.perf_counter() - t) / int(sys.argv[2]))
"""


def _burn(stop) -> None:
    while not stop.is_set():
        sum(i * i for i in range(10_000))


def step_ms(threads: int, steps: int) -> float:
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", CHILD, str(threads), str(steps)], env=env, check=True, text=True,
                         capture_output=True).stdout  # fmt: skip
    return float(out.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=300, help="BC steps timed in each measurement")
    args = p.parse_args()
    cores = len(os.sched_getaffinity(0))
    print(
        f"# {platform.machine()}, {cores} cores, {time.strftime('%Y-%m-%d %H:%M')}; ms a BC step (CartPole, batch 256)"
    )
    print("| beside | 1 thread | every core |\n|---|---|---|")
    for busy in (False, True):
        stop = mp.Event()
        burner = mp.Process(target=_burn, args=(stop,)) if busy else None
        if burner is not None:
            burner.start()
        try:
            one, every = step_ms(1, args.steps), step_ms(cores, args.steps)
        finally:
            if burner is not None:
                stop.set()
                burner.join()
        print(
            f"| {'one busy process' if busy else 'nothing'} | {one:.2f} | {every:.2f} ({every / one:.1f}x) |",
            flush=True,
        )


if __name__ == "__main__":
    main()
