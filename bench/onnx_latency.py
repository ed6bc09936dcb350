"""Batch-1 latency and batch-1024 throughput: `OnnxPolicy` (onnxruntime) against the torch policy.

    python bench/onnx_latency.py [--env Pendulum-v1] [--iters 2000]

Trains nothing: builds the default policy (MLP 64x64, tanh, observation normalizer) for the env,
saves it as a checkpoint, exports it with `gailkit export`'s code, then times in one run:
torch eager (the exported module's forward under `torch.no_grad()`, the same graph ONNX holds)
and `OnnxPolicy.predict`, both single-threaded, on the same observations.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch as th

from gailkit import config
from gailkit.config import TrainConfig
from gailkit.data import demos, envs
from gailkit.inference import OnnxPolicy
from gailkit.model import policy
from gailkit.run import checkpoint, export


def timeit(fn, iters: int) -> list[float]:
    for _ in range(min(100, iters)):
        fn()
    out = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--env", default="Pendulum-v1")
    p.add_argument("--iters", type=int, default=2000)
    args = p.parse_args()
    th.set_num_threads(1)
    cfg = config.build(TrainConfig, overrides=[f"env.id={args.env}"])
    obs_space, act_space = envs.spaces(cfg.env)
    pol = policy.build(obs_space, act_space, cfg.policy, cfg.normalize_obs)
    state = checkpoint.RunState(
        round=0,
        env_steps=0,
        config=config.to_dict(cfg),
        reward_fn="gail",
        spaces={"observation": demos.space_to_json(obs_space), "action": demos.space_to_json(act_space)},
        references=checkpoint.References(None, "none", 0.0, 0, 0),
        best=checkpoint.Best(),
        learner={"generator": {"policy": pol.state_dict()}},
        fleet={},
        rng={},
    )
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = checkpoint.save(Path(tmp) / "c.pt", state)
        export.export(ckpt, Path(tmp) / "p.onnx")
        onnx_policy = OnnxPolicy(Path(tmp) / "p.onnx", threads=1)
    module = export._Exported(pol, False, False).eval()
    rng = np.random.default_rng(0)
    one = rng.uniform(-1, 1, (1, *obs_space.shape)).astype(np.float32)
    big = rng.uniform(-1, 1, (1024, *obs_space.shape)).astype(np.float32)

    def torch_call(x):
        with th.no_grad():
            return module(th.as_tensor(x))[0].numpy()

    rows = []
    for label, fn1, fnb in [
        ("torch eager", lambda: torch_call(one), lambda: torch_call(big)),
        ("onnxruntime (OnnxPolicy)", lambda: onnx_policy.predict(one), lambda: onnx_policy.predict(big)),
    ]:
        lat = timeit(fn1, args.iters)
        thr = timeit(fnb, max(50, args.iters // 20))
        rows.append((label, statistics.median(lat) * 1e6, np.percentile(lat, 99) * 1e6, 1024 / statistics.median(thr)))
    print(
        f"# {args.env}, MLP {cfg.policy.net_arch} {cfg.policy.activation}, 1 thread, {platform.machine()}, torch {th.__version__}, "
        f"{time.strftime('%Y-%m-%d')}"
    )
    print("| runtime | batch-1 latency median (µs) | p99 (µs) | batch-1024 throughput (obs/s) |\n|---|---|---|---|")
    for label, med, p99, thr in rows:
        print(f"| {label} | {med:.1f} | {p99:.1f} | {thr:,.0f} |")
    print(
        f"\nONNX batch-1 latency is {rows[0][1] / rows[1][1]:.1f}x lower than torch eager; "
        f"batch-1024 throughput ratio onnx/torch {rows[1][3] / rows[0][3]:.2f}"
    )


if __name__ == "__main__":
    main()
