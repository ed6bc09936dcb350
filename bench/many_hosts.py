"""Collection across separate network hosts: env steps per second with 1 and 2 actor hosts at added
round trips, beside local actor processes on loopback, in one run.

    sudo python bench/many_hosts.py [--rtts 0 10 50] [--mbit 0] [--hosts 1 2] [--lags 0 1] [--rounds 6]

Hosts are network namespaces on a bridge (`bench/hosts.py`); the learner side (a ZeroMQ fleet with
CURVE keys, listening on host 0) runs on host 0, `gailkit actor --connect` on hosts 1..k, and
`bench/netproxy.py` on host 0 adds the round trip (and bandwidth cap) between them. The env is
`bench/busy_env.py:BusyCartPole` (about 1 ms of CPU per step), `--envs-per-actor` envs per actor,
`--n-steps` steps per fragment, one fragment slot per actor; each configuration runs a warm-up
round, then `--rounds` timed rounds of collection (weights out, fragments back, as in training).
With `--lags 1` the fleet hands slots out again as soon as a round's fragments are in
(`fleet.max_policy_lag: 1`). Prints a Markdown table and writes JSON lines to --out.

With `--train`, the learner is `gailkit train` itself (GAIL with PPO updates between rounds, on demos
relabelled for BusyCartPole), so a round trip and the update both cost: env steps per second over the
rounds after the first two (the run's own clock), and the megabytes per second that came over the wire.
`--train-env` names a registry env trained on its shipped demos instead (`ALE/Pong-v5`: 84x84 frame
stacks, `experts/pong.gail.yaml`'s preprocessing; `--set` passes settings, e.g. `bc.epochs=1`), and
`--generator sac` makes the learner the off-policy one (rounds of `--n-steps` as `sac.n_steps`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
BUSY = f"{ROOT / 'bench' / 'busy_env.py'}:BusyCartPole"
GAILKIT = [sys.executable, "-m", "gailkit.cli"]


def learner(args) -> None:
    """Inside host 0: collect rounds through a ZeroMQ fleet; print env steps per second as JSON."""
    import torch as th

    from gailkit.config import EnvConfig, FleetConfig, PolicyConfig
    from gailkit.data import envs
    from gailkit.model import policy
    from gailkit.rollout.actor import ActorSpec
    from gailkit.rollout.fleet.zmq_fleet import ZmqFleet

    env_cfg = EnvConfig(id=BUSY)
    spaces = envs.spaces(env_cfg)
    spec = ActorSpec(env_cfg, PolicyConfig(), True, n_envs=args.envs_per_actor, seed=0)
    fleet_cfg = FleetConfig(
        actors=args.actors, envs_per_actor=args.envs_per_actor, local_actors=args.local, listen=args.listen,
        key_file=args.key_file, max_policy_lag=args.lag,
    )  # fmt: skip
    th.manual_seed(0)
    pol = policy.build(*spaces, PolicyConfig(), True)
    fleet = ZmqFleet(spec, fleet_cfg, spaces)
    fleet.start()
    try:
        fleet.collect(policy.get_weights(pol, 0), args.n_steps)  # warm-up: every actor connected
        t0 = time.perf_counter()
        for v in range(1, args.rounds + 1):
            fleet.collect(policy.get_weights(pol, v), args.n_steps)
        seconds = time.perf_counter() - t0
    finally:
        fleet.stop()
    steps = args.actors * args.envs_per_actor * args.n_steps * args.rounds
    print(json.dumps({"steps_per_s": steps / seconds, "seconds": seconds, "steps": steps}))


def measure(args, hosts_n: int, rtt: float, lag: int, keys: Path) -> float:
    import hosts as hosts_mod

    with hosts_mod.Hosts(1 + hosts_n) as h:
        addr = h.address(0)
        port = 5555
        if rtt or args.mbit:
            port = 6000
            h.popen(0, [sys.executable, str(ROOT / "bench" / "netproxy.py"), "--listen", f"{addr}:6000",
                        "--to", f"{addr}:5555", "--rtt-ms", str(rtt), "--mbit", str(args.mbit)])  # fmt: skip
        learner_proc = h.popen(
            0,
            [sys.executable, __file__, "--learner", "--actors", str(hosts_n), "--local", "0",
             "--listen", f"tcp://{addr}:5555", "--key-file", str(keys), "--lag", str(lag), *_sizes(args)],
            stdout=subprocess.PIPE, text=True, cwd=ROOT,
        )  # fmt: skip
        for i in range(1, hosts_n + 1):
            h.popen(i, [*GAILKIT, "actor", "--connect", f"tcp://{addr}:{port}", "--key-file", str(keys),
                        "--env", BUSY], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        out, _ = learner_proc.communicate(timeout=900)
        return float(json.loads(out.strip().splitlines()[-1])["steps_per_s"])


def train_rate(args, hosts_n: int, rtt: float, lag: int, keys: Path, demos: Path, tmp: Path, local: bool) -> dict:
    """`gailkit train` with `hosts_n` actors (remote hosts, or local processes on loopback): steps/s and wire MB/s."""
    import hosts as hosts_mod

    run = tmp / f"train-{hosts_n}-{rtt}-{lag}-{local}-{time.monotonic_ns()}"
    env = BUSY if args.train_env == "busy" else args.train_env
    allow = ["--env", BUSY] if env == BUSY else []  # a code env loads on an actor only when named there
    steps_key = "sac.n_steps" if args.generator == "sac" else "ppo.n_steps"
    argv = [*GAILKIT, "train", "--env", env, "--generator", args.generator, "--demos", str(demos), "--run-dir", str(run),
            "--quiet", "--actors", str(hosts_n), "--envs-per-actor", str(args.envs_per_actor),
            "--set", f"{steps_key}={args.n_steps}",
            "--set", "eval_every=0", "--set", "checkpoint_every=0", "--set", f"fleet.max_policy_lag={lag}",
            "--total-steps", str((args.rounds + 2) * hosts_n * args.envs_per_actor * args.n_steps),
            *(x for kv in args.set for x in ("--set", kv))]  # fmt: skip
    if local:
        subprocess.run([*argv, "--local-actors", str(hosts_n)], cwd=ROOT, check=True, capture_output=True, timeout=1800)
    else:
        with hosts_mod.Hosts(1 + hosts_n) as h:
            addr, port = h.address(0), 5555
            if rtt or args.mbit:
                port = 6000
                h.popen(0, [sys.executable, str(ROOT / "bench" / "netproxy.py"), "--listen", f"{addr}:6000",
                            "--to", f"{addr}:5555", "--rtt-ms", str(rtt), "--mbit", str(args.mbit)])  # fmt: skip
            learner_proc = h.popen(0, [*argv, "--local-actors", "0", "--listen", f"tcp://{addr}:5555",
                                       "--key-file", str(keys)], cwd=ROOT, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, text=True)  # fmt: skip
            for i in range(1, hosts_n + 1):
                h.popen(i, [*GAILKIT, "actor", "--connect", f"tcp://{addr}:{port}", "--key-file", str(keys), *allow],
                        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
            _, err = learner_proc.communicate(timeout=1800)
            if learner_proc.returncode:
                raise RuntimeError(err[-500:])
    from gailkit.run import metrics

    # not the first two rounds (actors joining, first update) nor the last (its row's clock includes the final
    # evaluation)
    rows = metrics.read_rows(run / "metrics.csv")[2:-1]
    steps = int(rows[-1]["env_steps"]) - int(rows[0]["env_steps"])
    seconds = float(rows[-1]["time/elapsed_s"]) - float(rows[0]["time/elapsed_s"])
    wire_mb = sum(float(r["actors/fragment_mb"]) * hosts_n for r in rows[1:])
    update_s = statistics.median(float(r["time/round_s"]) - float(r["time/collect_s"]) for r in rows)
    return {"steps_per_s": steps / seconds, "wire_mb_per_s": wire_mb / seconds, "update_s": update_s}


def relabelled_demos(tmp: Path) -> Path:
    """The shipped CartPole demos, said to be BusyCartPole's (the same spaces and dynamics)."""
    import dataclasses

    from gailkit.data import demos

    d = demos.check(demos.load_file(ROOT / "data" / "cartpole.arrow"))
    d.meta = dataclasses.replace(d.meta, env_id=BUSY)
    return demos.save(d, tmp / "busy.arrow")


def loopback(args, n: int, lag: int) -> float:
    """Local actor processes on loopback (no namespaces), the same sizes."""
    out = subprocess.run(
        [sys.executable, __file__, "--learner", "--actors", str(n), "--local", str(n), "--lag", str(lag),
         *_sizes(args)],
        capture_output=True, text=True, timeout=900, check=True, cwd=ROOT,
    )  # fmt: skip
    return float(json.loads(out.stdout.strip().splitlines()[-1])["steps_per_s"])


def _sizes(args) -> list[str]:
    return ["--envs-per-actor", str(args.envs_per_actor), "--n-steps", str(args.n_steps), "--rounds", str(args.rounds)]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--learner", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--actors", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--local", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--listen", default="", help=argparse.SUPPRESS)
    p.add_argument("--key-file", default="", help=argparse.SUPPRESS)
    p.add_argument("--lag", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--hosts", type=int, nargs="+", default=[1, 2])
    p.add_argument("--rtts", type=float, nargs="+", default=[0, 10, 50])
    p.add_argument("--lags", type=int, nargs="+", default=[0])
    p.add_argument("--mbit", type=float, default=0.0)
    p.add_argument("--envs-per-actor", type=int, default=4)
    p.add_argument("--n-steps", type=int, default=128)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--train", action="store_true", help="gailkit train as the learner (updates between rounds)")
    p.add_argument("--set", action="append", default=[], help="with --train: a setting for every learner run")
    p.add_argument("--generator", default="ppo", choices=["ppo", "sac"], help="with --train: the learner's generator")
    p.add_argument("--train-env", default="busy",
                   choices=["busy", "Hopper-v4", "HalfCheetah-v4", "CartPole-v1", "Pendulum-v1", "ALE/Pong-v5"],
                   help="with --train: BusyCartPole (1 ms a step), or a registry env with its shipped demos")  # fmt: skip
    p.add_argument("--out", type=Path, default=Path("bench/out/many_hosts.jsonl"))
    args = p.parse_args()
    if args.learner:
        return learner(args)
    import hosts as hosts_mod

    why = hosts_mod.available()
    if why:
        sys.exit(f"many_hosts: {why}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    busy = not args.train or args.train_env == "busy"
    env_name = "BusyCartPole (~1 ms/step)" if busy else args.train_env
    print(
        f"# {platform.machine()}, {os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d')}, {env_name}, "
        f"{args.envs_per_actor} envs x {args.n_steps} steps per actor, {args.rounds} rounds, cap {args.mbit or 'none'} Mbit/s",
        flush=True,
    )
    print("| actors | where | added round trip | max_policy_lag | env steps/s | vs 1 actor, same link |")
    print("| --- | --- | --- | --- | --- | --- |", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        keys = Path(tmp) / "keys.key"
        subprocess.run([*GAILKIT, "keys", "generate", "--out", str(keys)], check=True, capture_output=True)
        if args.train:
            return train_table(args, keys, Path(tmp))
        for lag in args.lags:
            base = {}
            for n in args.hosts:
                rate = loopback(args, n, lag)
                base.setdefault(("loopback", 0.0), rate)
                _row(args, n, "local processes, loopback", 0.0, lag, rate, base[("loopback", 0.0)])
            for rtt in args.rtts:
                for n in args.hosts:
                    rate = measure(args, n, rtt, lag, keys)
                    base.setdefault(("hosts", rtt), rate)
                    _row(args, n, "separate hosts", rtt, lag, rate, base[("hosts", rtt)])


def train_table(args, keys: Path, tmp: Path) -> None:
    shipped = {"Hopper-v4": "hopper", "HalfCheetah-v4": "halfcheetah", "CartPole-v1": "cartpole", "Pendulum-v1": "pendulum",
               "ALE/Pong-v5": "pong"}  # fmt: skip
    demos = relabelled_demos(tmp) if args.train_env == "busy" else ROOT / "data" / f"{shipped[args.train_env]}.arrow"
    print(f"# learner: gailkit train on {args.train_env}, generator {args.generator}", flush=True)
    print("| actors | where | added round trip | max_policy_lag | env steps/s | vs 1 actor, same link | wire MB/s "
          "| update s per round |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- |", flush=True)
    for lag in args.lags:
        links = [("local processes, loopback", 0.0, True)] + [("separate hosts", r, False) for r in args.rtts]
        for where, rtt, local in links:
            first = None
            for n in args.hosts:
                res = train_rate(args, n, rtt, lag, keys, demos, tmp, local)
                first = first or res["steps_per_s"]
                print(f"| {n} | {where} | {rtt:.0f} ms | {lag} | {res['steps_per_s']:,.0f} | "
                      f"{res['steps_per_s'] / first:.2f}x | {res['wire_mb_per_s']:.2f} | {res['update_s']:.2f} |",
                      flush=True)  # fmt: skip
                with open(args.out, "a") as f:
                    row = {"mode": "train", "actors": n, "where": where, "rtt_ms": rtt, "lag": lag, "mbit": args.mbit}
                    f.write(json.dumps({**row, **res}) + "\n")


def _row(args, n, where, rtt, lag, rate, first) -> None:
    print(f"| {n} | {where} | {rtt:.0f} ms | {lag} | {rate:,.0f} | {rate / first:.2f}x |", flush=True)
    with open(args.out, "a") as f:
        f.write(json.dumps({"actors": n, "where": where, "rtt_ms": rtt, "lag": lag, "steps_per_s": rate}) + "\n")


if __name__ == "__main__":
    main()
