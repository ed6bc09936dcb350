"""Faults between separate network hosts, each one counted: GAIL on CartPole-v1 with the learner on one host
and its actors on others, a fault injected mid-run, then what was lost, counted twice or trained on stale,
and how long the run stalled.

    sudo python bench/host_faults.py [--faults cut kill slow learner ray] [--steps 40960] [--at-round 14]

Hosts are network namespaces on a bridge (`bench/hosts.py`); the learner is `gailkit train --listen` with
CURVE keys on host 0 and the actors `gailkit actor --connect` on hosts 1 and 2 (2 fragment slots of 8 envs
x 32 steps a round), or, for `ray`, a 3-node Ray cluster with token authentication (head on host 0,
workers on hosts 1 and 2, one actor per node). Faults, injected once the run has written `--at-round`
rounds:
  cut:     host 2's link down for `--cut-s` s, then up again (its actor lives on, unreachable)
  kill:    every process on host 2 killed; a new `gailkit actor` started there 5 s later
  slow:    host 2 reaches the learner through `bench/netproxy.py` at 10x host 1's round trip (5 vs 50 ms)
  learner: every process on host 0 killed, then `gailkit train --resume` started there; the actors wait
  ray:     Ray worker node on host 2 killed (raylet and workers); Ray restarts its actor on a live node
What is counted, from the run's metrics.csv and checkpoints after it ends: rounds written (must be every
round 1..N, once), env steps per round (must be exactly the round's size: a fragment counted twice or
lost would change it), the largest policy lag trained on (must be <= fleet.max_policy_lag), rounds
redone after a resume (work since the last checkpoint, not data), the longest gap between two rounds'
rows as seen from outside against the median gap (the stall), and the last evaluation's return.
Prints a Markdown table and writes JSON lines to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import hosts as hosts_mod  # noqa: E402

from gailkit.run import metrics  # noqa: E402

GAILKIT = [sys.executable, "-m", "gailkit.cli"]
PY_BIN = Path(sys.executable).parent
ENVS_PER_ACTOR, N_STEPS = 8, 32


def _rows(run: Path) -> list[dict[str, str]]:
    """The run's complete metrics rows so far (the project's own reader: a row being written is left out)."""
    try:
        return metrics.read_rows(run / "metrics.csv")
    except OSError:  # replaced under us by a resume
        return []


class Watch:
    """Polls a run's metrics.csv from outside: when each round's row appeared (the latest time, so a round
    redone after a resume counts at its second appearance)."""

    def __init__(self, run: Path):
        self.run, self.seen = run, {}

    def poll(self) -> int:
        rows = _rows(self.run)
        now = time.monotonic()
        rounds = [int(r["round"]) for r in rows]
        for r in rounds:
            self.seen.setdefault(r, now)
        for r in list(self.seen):
            if r not in rounds:  # dropped by a resume: it will be redone
                del self.seen[r]
        return max(rounds, default=0)

    def wait_for(self, round_: int, procs: list[subprocess.Popen], timeout: float) -> None:
        end = time.monotonic() + timeout
        while self.poll() < round_:
            if time.monotonic() > end or any(p.poll() is not None for p in procs):
                raise RuntimeError(f"round {round_} never came ({self.run})")
            time.sleep(0.1)

    def follow(self, proc: subprocess.Popen, timeout: float) -> int:
        end = time.monotonic() + timeout
        while proc.poll() is None and time.monotonic() < end:
            self.poll()
            time.sleep(0.05)
        self.poll()
        if proc.poll() is None:
            proc.kill()
        return proc.wait()

    def sleep(self, seconds: float) -> None:
        """Wait while still watching (a gap is measured from outside, so the watch never looks away)."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.poll()
            time.sleep(0.05)

    def gaps(self) -> tuple[float, float]:
        """(longest, median) seconds between consecutive rounds' rows."""
        times = [self.seen[r] for r in sorted(self.seen)]
        gaps = [b - a for a, b in zip(times, times[1:], strict=False)] or [0.0]
        return max(gaps), statistics.median(gaps)


def train_argv(args, run: Path, listen: str, keys: Path, actors: int, extra: list[str]) -> list[str]:
    return [
        *GAILKIT, "train", "--env", "CartPole-v1", "--demos", "data/cartpole.arrow", "--run-dir", str(run),
        "--total-steps", str(args.steps), "--quiet", "--actors", str(actors), "--envs-per-actor", str(ENVS_PER_ACTOR),
        "--set", f"ppo.n_steps={N_STEPS}", "--set", "checkpoint_every=4", "--set", "eval_every=20",
        "--set", f"fleet.max_policy_lag={args.lag}", *(["--local-actors", "0", "--listen", listen,
                                                        "--key-file", str(keys)] if listen else []), *extra,
    ]  # fmt: skip


def actor_argv(addr: str, keys: Path) -> list[str]:
    return [*GAILKIT, "actor", "--connect", addr, "--key-file", str(keys)]


def zmq_scenario(args, fault: str, keys: Path, tmp: Path) -> dict:
    run = tmp / f"run-{fault}"
    log = open(tmp / f"{fault}.log", "w")
    with hosts_mod.Hosts(3) as h:
        a0 = h.address(0)
        listen = f"tcp://{a0}:5555"
        addrs = {1: listen, 2: listen}
        if fault == "slow":  # both through the proxy: host 1 at 5 ms, host 2 at 50 ms
            for i, (port, rtt) in {1: (6001, 5), 2: (6002, 50)}.items():
                h.popen(0, [sys.executable, str(ROOT / "bench" / "netproxy.py"), "--listen", f"{a0}:{port}",
                            "--to", f"{a0}:5555", "--rtt-ms", str(rtt)], stderr=log)  # fmt: skip
                addrs[i] = f"tcp://{a0}:{port}"
        learner = h.popen(0, train_argv(args, run, listen, keys, 2, []), cwd=ROOT, stdout=log, stderr=log)
        for i in (1, 2):
            h.popen(i, actor_argv(addrs[i], keys), cwd=ROOT, stdout=log, stderr=log)
        watch = Watch(run)
        watch.wait_for(args.at_round, [learner], 300)
        t_fault, redone, note = time.monotonic(), 0, ""
        if fault == "cut":
            h.cut(2)
            watch.sleep(args.cut_s)
            h.restore(2)
            note = f"link down {args.cut_s:.0f} s"
        elif fault == "kill":
            h.kill_host(2)
            watch.sleep(5)
            h.popen(2, actor_argv(addrs[2], keys), cwd=ROOT, stdout=log, stderr=log)
            note = "host killed, new actor after 5 s"
        elif fault == "learner":
            before = watch.poll()
            h.kill_host(0)
            watch.sleep(2)
            saved = sorted((run / "checkpoints").glob("round_*.pt"))
            resumed_at = int(saved[-1].stem.split("_")[1]) if saved else 0
            # a run's folder never opens a door: the listen address and key file are typed again
            resume = [*GAILKIT, "train", "--resume", str(run), "--quiet", "--listen", listen, "--key-file", str(keys)]
            learner = h.popen(0, resume, cwd=ROOT, stdout=log, stderr=log)
            redone = max(0, before - resumed_at)
            note = f"killed after round {before}, resumed from round {resumed_at}"
        elif fault == "slow":
            note = "host 1 at 5 ms, host 2 at 50 ms round trip"
        code = watch.follow(learner, args.timeout)
        return summarize(args, fault, run, watch, code, t_fault, redone, note)


def ray_scenario(args, keys: Path, tmp: Path) -> dict:
    log = open(tmp / "ray.log", "w")
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32),
           "PATH": f"{PY_BIN}:{os.environ['PATH']}", "RAY_worker_niceness": "0"}  # fmt: skip
    # the cluster's files, and its address file (which a later plain ray.init() on this machine would try to
    # join), go to a folder of their own, removed afterwards; a short path, as Ray's socket paths must fit
    env["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="gkray")
    try:
        return _ray_run(args, keys, tmp, env, log)
    finally:
        shutil.rmtree(env["RAY_TMPDIR"], ignore_errors=True)


def _ray_run(args, keys: Path, tmp: Path, env: dict, log) -> dict:
    run = tmp / "run-ray"
    ray_bin = str(PY_BIN / "ray")
    common = ["--num-cpus", "2", "--disable-usage-stats", "--block"]
    with hosts_mod.Hosts(3) as h:
        a0 = h.address(0)
        h.popen(0, [ray_bin, "start", "--head", "--node-ip-address", a0, "--port", "6379",
                    "--include-dashboard", "false", *common], env=env, stdout=log, stderr=log)  # fmt: skip
        _wait_port(h, a0, 6379)
        for i in (1, 2):  # one at a time: two nodes starting at once on 2 cores can time out
            h.popen(i, [ray_bin, "start", "--address", f"{a0}:6379", "--node-ip-address", h.address(i), *common],
                    env=env, stdout=log, stderr=log)  # fmt: skip
            _wait_nodes(h, env, a0, 1 + i)
        outsider = {k: v for k, v in env.items() if not k.startswith("RAY_AUTH")}  # no token, no mode
        refused = _ray_refuses(h, outsider, a0)
        extra = ["--fleet", "ray", "--ray-address", f"{a0}:6379"]
        learner = h.popen(0, train_argv(args, run, "", keys, 3, extra), cwd=ROOT, env=env, stdout=log, stderr=log)
        watch = Watch(run)
        watch.wait_for(args.at_round, [learner], 300)
        t_fault = time.monotonic()
        h.kill_host(2)
        code = watch.follow(learner, args.timeout)
    log.close()
    said = [line.strip() for line in open(tmp / "ray.log") if "ray fleet:" in line]
    where = [line.split("ray fleet: ")[-1] for line in said]
    note = f"a driver without the token refused: {refused}; " + " / ".join(w.split("ray fleet: ")[-1] for w in where)
    return summarize(args, "ray", run, watch, code, t_fault, 0, note)


def _wait_nodes(h, env: dict, head: str, n: int, timeout: float = 120) -> None:
    """Until the cluster at `head` has `n` live nodes (asked from host 0, with the cluster's token)."""
    probe = (
        "import ray, time\n"
        f"ray.init(address='{head}:6379', include_dashboard=False, log_to_driver=False, configure_logging=False)\n"
        f"end = time.monotonic() + {timeout}\n"
        f"while sum(x['Alive'] for x in ray.nodes()) < {n} and time.monotonic() < end: time.sleep(0.5)\n"
        "print(sum(x['Alive'] for x in ray.nodes()))"
    )
    out = h.popen(
        0, [sys.executable, "-c", probe], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    alive = out.communicate(timeout=timeout + 60)[0].strip()
    if alive != str(n):
        raise RuntimeError(f"the Ray cluster has {alive or 'no'} live nodes of {n}")


def _ray_refuses(h, env: dict, head: str) -> bool:
    """Whether a driver on host 1 without the cluster's token fails to get anything out of it."""
    probe = (
        f"import ray\nray.init(address='{head}:6379', include_dashboard=False, log_to_driver=False)\n"
        "print('in', len(ray.nodes()))"
    )
    p = h.popen(1, [sys.executable, "-c", probe], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        out = p.communicate(timeout=90)[0]
    except subprocess.TimeoutExpired:
        p.kill()
        return True
    return "in " not in out


def _wait_port(h, addr: str, port: int, timeout: float = 60) -> None:
    """Until something listens on addr:port, asked from inside host 0 (this machine's own namespace has no
    route to the hosts' addresses; they would leave it through its default route)."""
    probe = (
        "import socket, sys, time\n"
        f"end = time.monotonic() + {timeout}\n"
        "while time.monotonic() < end:\n"
        f"    try: socket.create_connection(('{addr}', {port}), timeout=1).close(); sys.exit(0)\n"
        "    except OSError: time.sleep(0.5)\n"
        "sys.exit(1)"
    )
    if h.popen(0, [sys.executable, "-c", probe]).wait(timeout=timeout + 30) != 0:
        raise RuntimeError(f"nothing listens on {addr}:{port} after {timeout:.0f} s")


def summarize(args, fault, run, watch, code, t_fault, redone, note) -> dict:
    rows = _rows(run)
    rounds = [int(r["round"]) for r in rows]
    steps = [int(r["env_steps"]) for r in rows]
    size = int(rows[0]["env_steps"]) if rows else 0
    evals = [float(r["eval/return_mean"]) for r in rows if r.get("eval/return_mean")]
    longest, median = watch.gaps()
    collect = [float(r["time/collect_s"]) for r in rows if r.get("time/collect_s")]
    checkpoint_ok = subprocess.run([*GAILKIT, "evaluate", str(run), "--episodes", "2", "--json", "--no-plots"],
                                   cwd=ROOT, capture_output=True, timeout=300).returncode == 0  # fmt: skip
    return {
        "fault": fault,
        "exit_code": code,
        "rounds": len(rounds),
        "rounds_missing_or_twice": int(rounds != list(range(1, len(rounds) + 1))),
        "steps_off": sum(b - a != size for a, b in zip([0, *steps], steps, strict=False)),
        "max_lag": max((float(r.get("actors/policy_lag") or 0) for r in rows), default=0.0),
        "allowed_lag": args.lag,
        "redone_rounds": redone,
        "stall_s": longest - median,
        "median_round_s": median,
        "collect_stall_s": max(collect, default=0.0) - statistics.median(collect or [0.0]),
        "collect_extra_s": sum(c - statistics.median(collect or [0.0]) for c in collect),
        "restarts": max((float(r.get("actors/restarts") or 0) for r in rows), default=0.0),
        "min_live": min((float(r.get("actors/live") or 0) for r in rows), default=0.0),
        "last_eval": evals[-1] if evals else None,
        "best_eval": max(evals) if evals else None,
        "checkpoint_evaluates": checkpoint_ok,
        "note": note,
        "fault_at_s": t_fault,
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--faults", nargs="+", default=["cut", "kill", "slow", "learner", "ray"],
                   choices=["cut", "kill", "slow", "learner", "ray"])  # fmt: skip
    p.add_argument("--steps", type=int, default=40_960)
    p.add_argument("--at-round", type=int, default=14)
    p.add_argument("--cut-s", type=float, default=20.0)
    p.add_argument("--lag", type=int, default=0)
    p.add_argument("--timeout", type=float, default=900.0)
    p.add_argument("--keep", type=Path, default=None, help="copy the runs and logs here")
    p.add_argument("--out", type=Path, default=Path("bench/out/host_faults.jsonl"))
    args = p.parse_args()
    why = hosts_mod.available()
    if why:
        sys.exit(f"host_faults: {why}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    print(f"# {platform.machine()}, {os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d %H:%M')}, CartPole-v1, "
          f"{args.steps:,} env steps, fault after round {args.at_round}, max_policy_lag {args.lag}")  # fmt: skip
    print(
        "| fault | exit | rounds | rounds missing/twice | rounds with wrong step count | max lag (allowed) "
        "| redone rounds | stall s (median round s) | longest collect over median s | restarts | min live "
        "| last (best) eval | checkpoint evaluates | note |"
    )
    print("| --- " * 14 + "|", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        keys = Path(tmp) / "keys.key"
        subprocess.run([*GAILKIT, "keys", "generate", "--out", str(keys)], check=True, capture_output=True)
        for fault in args.faults:
            try:
                res = (
                    ray_scenario(args, keys, Path(tmp))
                    if fault == "ray"
                    else zmq_scenario(args, fault, keys, Path(tmp))
                )
            except Exception as e:  # noqa: BLE001 - one fault's failure is a row, not the end of the bench
                res = {"fault": fault, "error": f"{type(e).__name__}: {e}"}
            finally:
                if args.keep:
                    subprocess.run(["cp", "-r", tmp, str(args.keep)], check=False)
            with open(args.out, "a") as f:
                f.write(json.dumps({**res, "date": time.strftime("%Y-%m-%d"), "steps": args.steps}) + "\n")
            if "error" in res:
                print(f"| {fault} | error: {res['error']} |" + " |" * 12, flush=True)
                continue
            print(
                f"| {fault} | {res['exit_code']} | {res['rounds']} | {res['rounds_missing_or_twice']} | {res['steps_off']} "
                f"| {res['max_lag']:.0f} ({res['allowed_lag']}) | {res['redone_rounds']} "
                f"| {res['stall_s']:.1f} ({res['median_round_s']:.2f}) | {res['collect_stall_s']:.1f} "
                f"| {res['restarts']:.0f} | {res['min_live']:.0f} "
                f"| {res['last_eval']} ({res['best_eval']}) | {res['checkpoint_evaluates']} | {res['note']} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
