"""Traffic signal control on SUMO: fixed-time, actuated (the expert), max-pressure, and GAIL, over seeded demand.

    python bench/traffic.py [--demo-episodes 30] [--steps 48000] [--episodes 10]

Records the actuated controller's demos (or uses --demos), trains GAIL with the shipped defaults
(`experts/trafficlight.gail.yaml`), exports the policy to ONNX, then evaluates every controller
on the same `--episodes` seeded demand patterns (seeds 5000 + i, unseen in training): total
waiting time (minus the env's return: vehicle-seconds spent waiting on incoming lanes, summed
over 5 s steps), throughput (vehicles through) and mean travel time. The ONNX policy runs through
`OnnxPolicy`, the same path as `gailkit infer`.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from gailkit.config import EnvConfig
from gailkit.data import demos, envs, experts
from gailkit.inference import OnnxPolicy
from gailkit.run import export, train

ENV = "TrafficLight-v0"


def run(policy, env_kwargs: dict, episodes: int, seed: int) -> dict[str, float]:
    if isinstance(policy, experts.Scripted):  # SUMO's own controllers drive through env kwargs
        env_kwargs = {**env_kwargs, **policy.env_kwargs}
    env = envs.make_factory(EnvConfig(id=ENV, kwargs=env_kwargs))()
    if isinstance(policy, experts.Scripted):
        policy = policy.bind(env)
    waits, through, travel = [], [], []
    try:
        for i in range(episodes):
            obs, _ = env.reset(seed=seed + i)
            total, done = 0.0, False
            while not done:
                obs, r, term, trunc, info = env.step(policy(obs))
                total += r
                done = term or trunc
            waits.append(-total)
            through.append(info["throughput"])
            travel.append(info["mean_travel_time"])
    finally:
        env.close()
    return {
        "waiting_s": float(np.mean(waits)),
        "waiting_std": float(np.std(waits)),
        "throughput": float(np.mean(through)),
        "travel_time_s": float(np.mean(travel)),
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--demos", help="use these demos instead of recording new ones")
    p.add_argument("--demo-episodes", type=int, default=30)
    p.add_argument("--steps", type=int, default=48_000)
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--run-dir", type=Path, default=None)
    p.add_argument("--no-train", action="store_true", help="evaluate the existing --run-dir instead of training")
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="gailkit-traffic-"))
    if args.demos or args.no_train:
        demo_path = Path(args.demos or "(existing run)")
    else:
        policy, env_id, _ = experts.load_expert("actuated", ENV, deterministic=True)
        d = experts.record(policy, ENV, args.demo_episodes, seed=0, source="actuated")
        demo_path = demos.save(d, tmp / "actuated.arrow")
    run_dir = args.run_dir or tmp / "run"
    t0 = time.perf_counter()
    if args.no_train:
        summary = {"env_steps": "(existing run)"}
    else:
        cfg = train.train_config(ENV, str(demo_path), None, [f"total_steps={args.steps}"])
        summary = train.train(cfg, run_dir, quiet=True, log=print)
    train_s = time.perf_counter() - t0
    onnx_path = run_dir / "policy.onnx"
    export.export(run_dir, onnx_path, which="best")
    onnx_policy = OnnxPolicy(onnx_path)
    seed = 5000
    rows = {
        "fixed-time (SUMO's static program)": run(
            experts.load_expert("fixed-time", ENV, True)[0], {}, args.episodes, seed
        ),
        "actuated (SUMO, the expert)": run(experts.load_expert("actuated", ENV, True)[0], {}, args.episodes, seed),
        "max-pressure": run(experts.load_expert("max-pressure", ENV, True)[0], {}, args.episodes, seed),
        "GAIL policy (ONNX, onnxruntime)": run(onnx_policy.predict, {}, args.episodes, seed),
    }
    rng = np.random.default_rng(0)
    rows["uniform random actions"] = run(lambda obs: int(rng.integers(2)), {}, args.episodes, seed)
    print(
        f"# {ENV}, demos {demo_path}, GAIL {summary['env_steps']} env steps in {train_s:.0f} s "
        f"(best checkpoint exported), {args.episodes} evaluation episodes from seed {seed}, {time.strftime('%Y-%m-%d')}"
    )
    print("| controller | total waiting time (veh·s) | throughput (veh) | mean travel time (s) |\n|---|---|---|---|")
    for name, r in rows.items():
        print(
            f"| {name} | {r['waiting_s']:,.0f} ± {r['waiting_std']:,.0f} | {r['throughput']:.1f} | {r['travel_time_s']:.1f} |"
        )


if __name__ == "__main__":
    main()
