"""What the learner's torch threads (`threads`) do to its small steps, alone and beside one busy process.

    OMP_NUM_THREADS= python bench/learner_threads.py --steps 300
    OMP_NUM_THREADS= python bench/learner_threads.py --expert td3 --env Pendulum-v1 --steps 300

Times behaviour-cloning steps of gailkit's PPO policy on the shipped CartPole demos (an MLP, batch 256) with
1 thread and with every core, first on a quiet machine, then while one other process keeps a core busy (what a
local actor process, a second run or any other job does). Each measurement runs in a fresh process, since torch
fixes its thread pool once it has used it. The whole `gailkit train` side by side with SB3 is
`bench/ppo_throughput.py --threads N`.

`--expert ALGO` times `gailkit expert train --algo ALGO --total-steps STEPS` instead (the seconds of training it
prints): with the thread rule it applies by itself (1 thread for vector observations), and with
`OMP_NUM_THREADS` set to every core, the rule's way of leaving torch at a thread per core (what expert training
did before it took the rule).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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


def expert_seconds(algo: str, env_id: str, steps: int, omp: str | None) -> float:
    """Seconds of training `gailkit expert train` records (its .json), in a fresh process with OMP_NUM_THREADS
    `omp`."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"} | ({"OMP_NUM_THREADS": omp} if omp else {})
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "gailkit.cli", "expert", "train", "--env", env_id, "--algo", algo, "--total-steps",
             str(steps), "--quiet", "--out", f"{tmp}/e.zip"],
            env=env, check=True, text=True, capture_output=True,
        )  # fmt: skip
        return float(json.loads(Path(f"{tmp}/e.json").read_text())["train_seconds"])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=300, help="BC steps (with --expert: env steps) in each measurement")
    p.add_argument("--expert", help="time `gailkit expert train --algo EXPERT` instead of BC steps")
    p.add_argument("--env", default="Pendulum-v1", help="the expert's env (with --expert)")
    args = p.parse_args()
    cores = len(os.sched_getaffinity(0))
    if args.expert:
        what = f"s of `gailkit expert train --algo {args.expert} --env {args.env} --total-steps {args.steps}`"
        print(f"# {platform.machine()}, {cores} cores, {time.strftime('%Y-%m-%d %H:%M')}; {what}")
        measure = [lambda: expert_seconds(args.expert, args.env, args.steps, None),
                   lambda: expert_seconds(args.expert, args.env, args.steps, str(cores))]  # fmt: skip
    else:
        print(
            f"# {platform.machine()}, {cores} cores, {time.strftime('%Y-%m-%d %H:%M')}; "
            "ms a BC step (CartPole, batch 256)"
        )
        measure = [lambda: step_ms(1, args.steps), lambda: step_ms(cores, args.steps)]
    print("| beside | 1 thread | every core |\n|---|---|---|")
    for busy in (False, True):
        stop = mp.Event()
        burner = mp.Process(target=_burn, args=(stop,)) if busy else None
        if burner is not None:
            burner.start()
        try:
            one, every = measure[0](), measure[1]()
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
