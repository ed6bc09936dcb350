"""Actor processes and remote actors over ZeroMQ on loopback: real processes, real sockets."""

import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import zmq

from gailkit.config import EnvConfig, FleetConfig, PolicyConfig
from gailkit.model import policy
from gailkit.rollout import transport, wire
from gailkit.rollout.actor import ActorSpec
from gailkit.rollout.fleet import FleetError
from gailkit.rollout.fleet.zmq_fleet import ZmqFleet
from gailkit.rollout.wire import Header, Kind
from gailkit.run import train

ROOT = Path(__file__).resolve().parents[1]
SLOW = EnvConfig(id=f"{ROOT / 'tests' / 'slow_env.py'}:SlowCartPole")
PPO = PolicyConfig(net_arch=[16])


def _weights(version=0):
    pol = policy.build(gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), gym.spaces.Discrete(2), PPO, True)
    return policy.get_weights(pol, version)


SPACES = (gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), gym.spaces.Discrete(2))


def _fleet(n_slots=2, **kw):
    fl = dict(actors=n_slots, envs_per_actor=2, local_actors=2, heartbeat_timeout=20.0, no_actor_timeout=60.0)
    fl.update(kw)
    spec = ActorSpec(SLOW, PPO, normalize_obs=True, n_envs=2, seed=0)
    return ZmqFleet(spec, FleetConfig(**fl), SPACES)


def _in_thread(fn):
    out = {}

    def run():
        try:
            out["value"] = fn()
        except Exception as e:  # surfaced by the test's assertions
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def _children(pid):
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            kids.append(int(stat.parent.name))
    return kids


def test_two_actor_processes_train_cartpole(tmp_path):
    cfg = train.train_config(
        "CartPole-v1",
        "data/",
        None,
        ["fleet.actors=2", "fleet.envs_per_actor=2", "ppo.batch_size=64", "total_steps=512", "eval_every=4"],
        preset="tiny",
    )
    s = train.train(cfg, tmp_path / "run", quiet=True, log=lambda m: None)
    assert s["rounds"] == 4 and s["env_steps"] == 512
    import csv

    rows = list(csv.DictReader(open(tmp_path / "run" / "metrics.csv")))
    # both processes are live by the end; the first round may be filled by the one that started first (a race
    # between two interpreters starting, seen once in CI on a clean clone)
    assert float(rows[-1]["actors/live"]) == 2 and all(float(r["actors/live"]) >= 1 for r in rows)
    assert float(rows[-1]["actors/fragments_per_s"]) > 0
    assert not _children(os.getpid())  # every actor process is gone


def test_policy_lag_one_overlaps_collection_and_learning(tmp_path):
    import csv

    cfg = train.train_config(
        "CartPole-v1",
        "data/",
        None,
        ["fleet.actors=2", "fleet.envs_per_actor=2", "fleet.max_policy_lag=1", "ppo.batch_size=64", "total_steps=640"],
        preset="tiny",
    )
    s = train.train(cfg, tmp_path / "run", quiet=True, log=lambda m: None)
    assert s["rounds"] == 5
    lags = [float(r["actors/policy_lag"]) for r in csv.DictReader(open(tmp_path / "run" / "metrics.csv"))]
    assert lags[0] == 0 and all(lag == 1 for lag in lags[1:]), lags  # rounds 2.. trained on v - 1 fragments
    assert not _children(os.getpid())


@pytest.mark.parametrize("lag", [0, 1])
def test_a_learner_busy_longer_than_the_heartbeat_timeout_loses_no_actor(lag):
    """Between rounds the learner trains and evaluates without reading its socket (minutes on frames); the
    actors' heartbeats wait queued, so that time is not silence: no actor is lost, nothing dropped (a
    Pong run lost its actor, and 70 queued messages, at every evaluation before)."""
    fleet = _fleet(heartbeat_timeout=2.5, max_policy_lag=lag, n_slots=1, local_actors=1)  # heartbeats: 1 s
    fleet.start()
    try:
        fleet.collect(_weights(0), n_steps=20)
        time.sleep(6.0)  # a learner busy for more than twice the heartbeat timeout
        frags = fleet.collect(_weights(1), n_steps=20)
        assert len(frags) == 1 and fleet.restarts == 0 and sum(fleet.dropped.values()) == 0, fleet.dropped
        assert fleet.stats["actors/live"] == 1
    finally:
        fleet.stop()


def test_actor_killed_mid_round_is_replaced_and_round_completes():
    fleet = _fleet()
    fleet.start()
    try:
        fleet.collect(_weights(0), n_steps=20)  # everyone is up
        victim = fleet.procs[0]
        t, out = _in_thread(lambda: fleet.collect(_weights(1), n_steps=150))  # ~0.6 s of stepping per slot
        time.sleep(0.3)
        os.kill(victim.pid, signal.SIGKILL)
        t.join(120)
        assert "error" not in out, out.get("error")
        frags = out["value"]
        assert len(frags) == 2 and all(f.obs.shape == (150, 2, 4) and f.policy_version == 1 for f in frags)
        assert fleet.restarts == 1 and victim.poll() is not None
        assert len(fleet.procs) == 2 and all(p.poll() is None for p in fleet.procs)  # a replacement runs
        assert victim not in fleet.procs
    finally:
        fleet.stop()
    assert all(p.poll() is not None for p in fleet.procs)


def test_garbage_wrong_version_and_wrong_run_are_dropped():
    fleet = _fleet()
    fleet.start()
    try:
        t, out = _in_thread(lambda: fleet.collect(_weights(0), n_steps=100))
        ctx = zmq.Context()
        rogue = ctx.socket(zmq.DEALER)
        rogue.setsockopt(zmq.LINGER, 0)
        rogue.connect(fleet.address)
        rogue.send_multipart([b"garbage"])
        rogue.send_multipart([b"x" * wire.HEADER_SIZE, b"body"])
        good = Header(Kind.FRAGMENT, fleet.run_id, 0, 0)
        rogue.send_multipart([Header(Kind.FRAGMENT, fleet.run_id, 0, 0, protocol=99).pack(), b""])
        rogue.send_multipart([Header(Kind.FRAGMENT, os.urandom(16), 0, 0).pack(), b""])
        rogue.send_multipart([good.pack(), b"not arrow"])  # from a peer that never said hello
        rogue.send_multipart([Header(Kind.FRAGMENT, fleet.run_id, 0, 0).pack(), b"\xff" * 100000])
        t.join(120)
        rogue.close()
        ctx.term()
        assert "error" not in out, out.get("error")
        assert len(out["value"]) == 2
        d = fleet.dropped
        assert d["malformed"] >= 2 and d["wrong_version"] == 1 and d["wrong_run"] == 1 and d["unknown_peer"] == 2, d
    finally:
        fleet.stop()


def test_no_live_actor_fails_within_the_timeout():
    fleet = _fleet(local_actors=0, no_actor_timeout=1.0)
    fleet.start()
    try:
        t0 = time.monotonic()
        with pytest.raises(FleetError, match="no live actor for 1 s"):
            fleet.collect(_weights(0), n_steps=10)
        assert time.monotonic() - t0 < 10
    finally:
        fleet.stop()


def test_listening_beyond_loopback_needs_keys():
    from gailkit.core.errors import ConfigError

    with pytest.raises(ConfigError, match="listening beyond loopback needs --key-file"):
        transport.LearnerEndpoint("tcp://0.0.0.0:0", os.urandom(16))


def test_remote_actor_with_curve_keys_and_unauthenticated_peer_refused(tmp_path):
    keys = transport.generate_keys(tmp_path / "k.json")
    assert oct(keys.stat().st_mode & 0o777) == "0o600"
    fleet = _fleet(local_actors=0, n_slots=1, key_file=str(keys), listen="tcp://127.0.0.1:0")
    assert fleet.endpoint.address == ""  # nothing binds before start()
    fleet.start()
    # a peer without the keys: its handshake fails and it is counted
    ctx = zmq.Context()
    intruder = ctx.socket(zmq.DEALER)
    intruder.setsockopt(zmq.LINGER, 0)
    other_pub, other_sec = zmq.curve_keypair()
    intruder.curve_serverkey = transport.read_keys(keys)["server_public"]
    intruder.curve_publickey, intruder.curve_secretkey = other_pub, other_sec
    intruder.connect(fleet.address)
    intruder.send_multipart([Header(Kind.HELLO, bytes(16), -1, 0).pack(), b"{}"], flags=zmq.NOBLOCK)
    # a remote actor (its own process, as on another machine) with the key file
    actor = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gailkit.cli",
            "actor",
            "--connect",
            fleet.address,
            "--key-file",
            str(keys),
            "--env",
            SLOW.id,
        ],
        cwd=ROOT,
    )
    try:
        frags = fleet.collect(_weights(0), n_steps=10)
        assert len(frags) == 1 and frags[0].obs.shape == (10, 2, 4)
        deadline = time.monotonic() + 10
        while fleet.endpoint.refused == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert fleet.endpoint.refused >= 1
        assert len(fleet.peers) == 1  # the intruder never registered
    finally:
        intruder.close()
        ctx.term()
        fleet.stop()
        assert actor.wait(timeout=30) == 0  # STOP makes the remote actor exit cleanly (slowly on a loaded machine)


def test_killed_learner_leaves_no_actor_running(tmp_path):
    learner = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gailkit.cli",
            "train",
            "--env",
            "CartPole-v1",
            "--demos",
            "data/",
            "--actors",
            "2",
            "--envs-per-actor",
            "2",
            "--total-steps",
            "10000000",
            "--quiet",
            "--set",
            "ppo.batch_size=64",
            "--set",
            "bc.epochs=1",  # the actors start after the warm start: 50 epochs over 25,000 demos take minutes under load
            "--run-dir",
            str(tmp_path / "run"),
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        actors = []
        while len(actors) < 2 and time.monotonic() < deadline:
            time.sleep(0.5)
            actors = _children(learner.pid)
        assert len(actors) == 2, "actors did not start"
        time.sleep(2)
    finally:
        learner.kill()
        learner.wait()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in actors):
        time.sleep(0.2)
        for p in actors:  # reap zombies re-parented to us, if any
            try:
                os.waitpid(p, os.WNOHANG)
            except ChildProcessError:
                pass
    alive = [
        p for p in actors if Path(f"/proc/{p}").exists() and "Z" not in Path(f"/proc/{p}/stat").read_text().split()[2]
    ]
    assert not alive


@pytest.mark.parametrize("second_version", [5, 1])
def test_remote_actor_carries_on_after_the_learner_drops_and_returns(second_version):
    """The learner's socket vanishes; a new learner on the same address gets the same actor process back, with
    its weights: newer ones, or older ones as a run resumed from an earlier checkpoint sends (the actor held
    version 3 and must not keep sampling with it)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    first = _fleet(local_actors=0, n_slots=1, listen=f"tcp://127.0.0.1:{port}")
    first.start()
    actor = subprocess.Popen(
        [sys.executable, "-m", "gailkit.cli", "actor", "--connect", f"tcp://127.0.0.1:{port}", "--env", SLOW.id],
        cwd=ROOT,
    )
    try:
        for version in range(4):
            assert len(first.collect(_weights(version), n_steps=10)) == 1
        first.endpoint.close()  # the learner's socket vanishes without a word (crash, network cut)
        time.sleep(1)
        second = _fleet(local_actors=0, n_slots=1, listen=f"tcp://127.0.0.1:{port}")
        second.start()
        try:
            frags = second.collect(_weights(second_version), n_steps=10)  # the same actor comes back by itself
            assert len(frags) == 1 and frags[0].policy_version == second_version and actor.poll() is None
            assert second.dropped["stale"] == second.dropped["future_version"] == 0, second.dropped
        finally:
            second.stop()
        assert actor.wait(timeout=10) == 0
    finally:
        if actor.poll() is None:
            actor.kill()


class _ProtocolPeer:
    """A peer that speaks the protocol correctly (HELLO, then a FRAGMENT for each WORK) but answers
    each WORK with `reply(header, good_fragment) -> (kind, body)`: a hostile or broken actor."""

    def __init__(self, address, reply, hello_id=77):
        from gailkit.rollout.actor import Actor

        self.reply, self.stop, self.works, self.hello_id = reply, threading.Event(), 0, hello_id
        self.actor = Actor(ActorSpec(EnvConfig(id="CartPole-v1"), PPO, True, n_envs=2, seed=9))
        self.actor.start()
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(address)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        run_id, my_id = bytes(16), -1
        self.sock.send_multipart([Header(Kind.HELLO, run_id, -1, 0).pack(), b'{"actor_id": %d}' % self.hello_id])
        beat = time.monotonic()
        while not self.stop.is_set():
            if time.monotonic() - beat > 0.5:  # alive, whatever it does with its WORK
                beat = time.monotonic()
                self.sock.send_multipart([Header(Kind.HEARTBEAT, run_id, my_id, 0).pack(), b""])
            if not self.sock.poll(100):
                continue
            head, body = self.sock.recv_multipart()
            h = wire.parse_header(head, None)
            if h.kind == Kind.CONFIG:
                run_id, my_id = h.run_id, h.actor_id
            elif h.kind == Kind.WORK:
                self.works += 1
                weights, n_steps = wire.decode_work(body, h.policy_version)
                self.actor.set_weights(weights)
                answer = self.reply(h, self.actor.sample(n_steps))
                if answer is not None:  # None: keep the slot and never fill it
                    kind, out, *version = answer  # a third item: the version it claims
                    version = version[0] if version else h.policy_version
                    self.sock.send_multipart([Header(kind, run_id, my_id, version).pack(), out])
            elif h.kind == Kind.STOP:
                return

    def close(self):
        self.stop.set()
        self.thread.join(5)
        self.sock.close()
        self.ctx.term()
        self.actor.stop()


def _bad(**changes):
    def reply(header, frag):
        fields = {k: v(frag) if callable(v) else v for k, v in changes.items()}
        return Kind.FRAGMENT, wire.encode_fragment(dataclasses.replace(frag, **fields))

    return reply


BAD_FRAGMENTS = {
    "wider observations": _bad(
        obs=lambda f: np.zeros((*f.obs.shape[:2], 7), np.float32),
        next_obs=lambda f: np.zeros((*f.obs.shape[:2], 7), np.float32),
    ),
    "NaN observations": _bad(obs=lambda f: np.full_like(f.obs, np.nan)),
    "action 7 for Discrete(2)": _bad(acts=lambda f: np.full_like(f.acts, 7)),
    "float actions for Discrete(2)": _bad(acts=lambda f: f.acts.astype(np.float32)),
    "infinite log-probs": _bad(log_probs=lambda f: np.full_like(f.log_probs, -np.inf)),
    "more envs than asked": _bad(
        **{
            k: (lambda f, k=k: np.concatenate([getattr(f, k)] * 2, axis=1))
            for k in ("obs", "acts", "next_obs", "terminated", "truncated", "log_probs", "rews")
        },
        first_starts=lambda f: np.concatenate([f.first_starts] * 2),
    ),
    "episode stats that do not add up": _bad(
        episode_returns=lambda f: np.zeros(len(f.episode_returns) + 3),
        episode_lengths=lambda f: np.ones(len(f.episode_lengths) + 3, np.int64),
    ),
    "REJECT of every WORK": lambda h, f: (Kind.REJECT, b'{"reason": "no"}'),
    "a version this learner never sent": lambda h, f: (
        Kind.FRAGMENT,
        wire.encode_fragment(dataclasses.replace(f, policy_version=h.policy_version + 7)),
        h.policy_version + 7,
    ),
    "WORK taken, only heartbeats sent": lambda h, f: None,
}


@pytest.mark.parametrize("case", list(BAD_FRAGMENTS))
def test_a_peer_sending_bad_fragments_never_stops_the_round_and_is_cut_off(case):
    """The round completes with real actors' fragments; the bad peer's are dropped by reason and
    its slot handed out again; after max_bad_fragments it is cut off (and told to STOP)."""
    # heartbeats every 1 s: 5 s lets a busy machine's local actor miss four before it is taken for lost
    fleet = _fleet(local_actors=1, n_slots=2, max_bad_fragments=3, heartbeat_timeout=5.0)
    fleet.start()
    peer = _ProtocolPeer(fleet.address, BAD_FRAGMENTS[case], hello_id=0)  # claims the local actor's id, too
    try:
        for version in range(6):
            frags = fleet.collect(_weights(version), n_steps=20)
            assert len(frags) == 2 and all(f.obs.shape == (20, 2, 4) and np.isfinite(f.obs).all() for f in frags)
            assert all(set(np.unique(f.acts)) <= {0, 1} for f in frags)
        reasons = {k: v for k, v in fleet.dropped.items() if v}
        assert fleet.dropped["cut_off"] == 1, (case, reasons, peer.works)
        bad = sum(
            v
            for k, v in reasons.items()
            if k.startswith("invalid_") or k in ("rejected_work", "malformed", "slot_deadline", "future_version")
        )
        assert bad == 3, reasons
        assert fleet.restarts == 0 and all(p.poll() is None for p in fleet.procs)  # the local actor it posed as lives
        assert peer.works == 3 and peer.thread.join(5) is None and not peer.thread.is_alive()  # STOP ended it
    finally:
        peer.close()
        fleet.stop()


def test_a_remote_actor_loads_no_code_env_it_was_not_told_to():
    """A learner (or whoever holds the keys) that names `file.py:Class` gets no code run on the actor's machine."""
    fleet = _fleet(local_actors=0, n_slots=1, no_actor_timeout=3.0)
    fleet.start()
    actor = subprocess.Popen(
        [sys.executable, "-m", "gailkit.cli", "actor", "--connect", fleet.address],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # The fleet answers a hello only inside `collect`, which gives up after 3 s with no live actor: on a loaded
        # machine the actor may not have started by then, so collect again until it has said no (or 2 minutes).
        deadline = time.monotonic() + 120
        while actor.poll() is None and time.monotonic() < deadline:
            with pytest.raises(FleetError):
                fleet.collect(_weights(0), n_steps=10)
        _, err = actor.communicate(timeout=30)
        assert actor.returncode == 2 and "which is code" in err and f"pass --env {SLOW.id}" in err
    finally:
        if actor.poll() is None:
            actor.kill()
        fleet.stop()


def test_a_round_fills_each_slot_once_in_order_and_reopens_what_failed():
    """`fleet.slots.Round`, the bookkeeping both fleets share: stale and bad fragments leave the slot
    open (first in line again), a filled slot is never reopened, fragments come back in slot order."""
    from gailkit.core.fragments import BadFragment, FragmentSpec
    from gailkit.rollout.actor import Actor
    from gailkit.rollout.fleet.slots import Round

    actor = Actor(ActorSpec(EnvConfig(id="CartPole-v1"), PPO, True, n_envs=2, seed=3))
    actor.start()
    try:
        actor.set_weights(_weights(5))
        bodies = [wire.encode_fragment(actor.sample(4)) for _ in range(3)]
        short = wire.encode_fragment(actor.sample(3))
    finally:
        actor.stop()
    spec = FragmentSpec.of(actor.observation_space, actor.action_space, 4, 2)
    rnd = Round(3, spec, version=5, max_lag=1, busy=[2])
    assert list(rnd.pending) == [0, 1] and rnd.take() == 0 and rnd.take() == 1 and rnd.take() is None
    assert not rnd.wants(0, 3) and rnd.wants(0, 4) and rnd.wants(0, 5) and not rnd.wants(None, 5)
    with pytest.raises(BadFragment):
        rnd.accept(1, short, 1, 5)  # 3 steps where the run collects 4
    rnd.give_back(1)
    rnd.accept(2, bodies[2], 7, 5)
    rnd.accept(0, bodies[0], 1, 4)
    rnd.give_back(0)  # filled: stays filled
    assert list(rnd.pending) == [1] and not rnd.done and not rnd.wants(0, 5)
    rnd.accept(rnd.take(), bodies[1], 2, 5)
    assert rnd.done and [f.actor_id for f in rnd.fragments()] == [1, 2, 7]
    assert rnd.stats()["actors/fragment_mb"] > 0
