"""Collection throughput: gailkit actor processes (1, 2, 4) vs the in-process fleet vs SB3 SubprocVecEnv.

    python bench/fleet_throughput.py [--envs 8] [--n-steps 256] [--rounds 4]

For CartPole-v1 (fast steps) and `bench/busy_env.py:BusyCartPole` (each step burns ~1 ms of CPU),
with the same total env count everywhere: env steps per second of collection (policy forward
passes included, as in training), after one warm-up round. SubprocVecEnv runs one process per
env with the policy's forward pass on the main process, as SB3's own rollouts do. Also the
transport's cost per fragment: Arrow encode + ZeroMQ loopback round trip + decode of one
2,048-step fragment, against the time it took to collect that fragment.
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import numpy as np
import torch as th
import zmq

from gailkit.config import EnvConfig, FleetConfig, PolicyConfig
from gailkit.data import envs
from gailkit.model import policy
from gailkit.rollout import wire
from gailkit.rollout.actor import Actor, ActorSpec
from gailkit.rollout.fleet import InProcessFleet
from gailkit.rollout.fleet.zmq_fleet import ZmqFleet

BUSY = EnvConfig(id=f"{Path(__file__).resolve().parent / 'busy_env.py'}:BusyCartPole")
PPO = PolicyConfig()  # the default MLP, 64x64


def _weights(env_cfg, version):
    obs_space, act_space = envs.spaces(env_cfg)
    th.manual_seed(0)
    return policy.get_weights(policy.build(obs_space, act_space, PPO, True), version)


def fleet_rate(fleet, env_cfg, n_steps, rounds) -> float:
    fleet.start()
    try:
        fleet.collect(_weights(env_cfg, 0), n_steps)  # warm-up: processes up, imports done
        t0 = time.perf_counter()
        for v in range(1, rounds + 1):
            fleet.collect(_weights(env_cfg, v), n_steps)
        return fleet.n_envs * n_steps * rounds / (time.perf_counter() - t0)
    finally:
        fleet.stop()


def subproc_rate(env_cfg, n_envs, n_steps, rounds) -> float:
    from stable_baselines3.common.vec_env import SubprocVecEnv

    factory = envs.make_factory(env_cfg)
    venv = SubprocVecEnv([factory] * n_envs)
    obs_space, act_space = venv.observation_space, venv.action_space
    pol = policy.build(obs_space, act_space, PPO, True)
    try:
        obs = venv.reset()
        t0 = None
        for r in range(rounds + 1):
            if r == 1:
                t0 = time.perf_counter()
            for _ in range(n_steps):
                acts, _ = policy.act(pol, obs)
                obs, _, _, _ = venv.step(acts)
        return n_envs * n_steps * rounds / (time.perf_counter() - t0)
    finally:
        venv.close()


def transport_cost(n_steps: int = 2048, n_envs: int = 8) -> dict[str, float]:
    actor = Actor(ActorSpec(EnvConfig(id="CartPole-v1"), PPO, True, n_envs=n_envs, seed=0))
    actor.start()
    t0 = time.perf_counter()
    frag = actor.sample(n_steps)
    collect = time.perf_counter() - t0
    ctx = zmq.Context()
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    port = a.bind_to_random_port("tcp://127.0.0.1")
    b.connect(f"tcp://127.0.0.1:{port}")
    header = wire.Header(wire.Kind.FRAGMENT, bytes(16), 0, 0)
    times, size = [], 0
    for _ in range(20):
        t0 = time.perf_counter()
        body = wire.encode_fragment(frag)
        b.send_multipart([header.pack(), body])
        h, data = a.recv_multipart()
        head = wire.parse_header(h, None)
        wire.decode_fragment(data, head.actor_id, head.policy_version)
        times.append(time.perf_counter() - t0)
        size = len(body)
    a.close()
    b.close()
    ctx.term()
    actor.stop()
    per = float(np.median(times))
    return {"collect_s": collect, "transport_s": per, "mb": size / 2**20, "mb_per_s": size / 2**20 / per}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--envs", type=int, default=8)
    p.add_argument("--n-steps", type=int, default=256)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--actors", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--env", choices=["cartpole", "busy", "both"], default="both")
    args = p.parse_args()
    print(
        f"# {args.envs} envs in all, {args.n_steps} steps per env per round, {args.rounds} timed rounds; "
        f"{platform.machine()}, {th.get_num_threads()} torch threads, {time.strftime('%Y-%m-%d')}"
    )
    print("| env | collector | env steps/s | vs 1 actor |\n|---|---|---|---|")
    cases = [("CartPole-v1", EnvConfig(id="CartPole-v1"))] if args.env != "busy" else []
    cases += [("1 ms/step", BUSY)] if args.env != "cartpole" else []
    for label, env_cfg in cases:
        rates = {}
        for n in args.actors:
            spec = ActorSpec(env_cfg, PPO, True, n_envs=args.envs // n, seed=0)
            fleet = ZmqFleet(
                spec, FleetConfig(actors=n, envs_per_actor=args.envs // n, local_actors=n), envs.spaces(env_cfg)
            )
            rates[f"gailkit, {n} actor process{'es' if n > 1 else ''}"] = fleet_rate(
                fleet, env_cfg, args.n_steps, args.rounds
            )
        rates["gailkit in-process (--actors 0)"] = fleet_rate(
            InProcessFleet(ActorSpec(env_cfg, PPO, True, n_envs=args.envs, seed=0)), env_cfg, args.n_steps, args.rounds
        )
        rates[f"SB3 SubprocVecEnv ({args.envs} processes)"] = subproc_rate(
            env_cfg, args.envs, args.n_steps, args.rounds
        )
        base = rates[f"gailkit, {args.actors[0]} actor process"] if 1 in args.actors else 1.0
        for name, rate in rates.items():
            print(f"| {label} | {name} | {rate:,.0f} | {rate / base:.2f}x |", flush=True)
    t = transport_cost()
    print(
        f"\ntransport per 2,048-step x 8-env CartPole fragment: {t['transport_s'] * 1e3:.1f} ms "
        f"({t['mb']:.2f} MB, {t['mb_per_s']:.0f} MB/s encode+send+recv+decode) vs {t['collect_s']:.2f} s to collect it "
        f"= {100 * t['transport_s'] / t['collect_s']:.2f}% of collection time"
    )


if __name__ == "__main__":
    main()
