"""What `env_wrappers.Checked` (every `reset` and `step` checked against gymnasium's API and the env's own
observation space) costs an env step: the bare env against the same env wrapped, in one process, the two
alternating, the best of `--repeats` timings of `--steps` random-action steps each (resets counted in).

    OMP_NUM_THREADS=1 python bench/env_check.py --repeats 5 --steps 20000

Envs: CartPole-v1 (a fast step, where the check weighs most), Pendulum-v1, Hopper-v4 (MuJoCo) and
ALE/Pong-v5 (frames) when their extras are installed.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import gymnasium as gym

from gailkit.data.env_wrappers import Checked


def _per_step(env: gym.Env, steps: int) -> float:
    env.reset(seed=0)
    env.action_space.seed(0)
    actions = [env.action_space.sample() for _ in range(256)]
    start = time.perf_counter()
    for i in range(steps):
        _, _, terminated, truncated, _ = env.step(actions[i % 256])
        if terminated or truncated:
            env.reset()
    return (time.perf_counter() - start) / steps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--steps", type=int, default=20000)
    p.add_argument("--envs", nargs="+", default=["CartPole-v1", "Pendulum-v1", "Hopper-v4", "ALE/Pong-v5"])
    args = p.parse_args()
    print(f"# {platform.machine()}, {os.cpu_count()} cores, {args.repeats} x {args.steps} steps")
    print("| env | bare, us a step | checked, us a step | added, us a step | checked / bare |")
    print("| --- | --- | --- | --- | --- |")
    for name in args.envs:
        if name.startswith("ALE/"):
            try:
                import ale_py

                gym.register_envs(ale_py)
            except ImportError:
                continue
        try:
            bare, checked = gym.make(name), Checked(gym.make(name), name)
        except (gym.error.Error, ImportError) as e:
            print(f"| {name} | not run ({type(e).__name__}) | | | |")
            continue
        steps = args.steps // 20 if name.startswith("ALE/") else args.steps
        times: dict[str, list[float]] = {"bare": [], "checked": []}
        for _ in range(args.repeats):
            times["bare"].append(_per_step(bare, steps))
            times["checked"].append(_per_step(checked, steps))
        b, c = min(times["bare"]) * 1e6, min(times["checked"]) * 1e6
        print(f"| {name} | {b:.1f} | {c:.1f} | {c - b:.1f} | {c / b:.2f}x |")


if __name__ == "__main__":
    main()
