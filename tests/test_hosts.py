"""Learner and actors on separate network hosts (network namespaces made by the test itself, `bench/hosts.py`).

Opt-in (they need root and make namespaces): `GAILKIT_HOSTS_TESTS=1 pytest -m hosts`. Skipped with one
line otherwise, or where namespaces cannot be made.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import hosts as hosts_mod  # noqa: E402

pytestmark = [
    pytest.mark.hosts,
    pytest.mark.skipif(
        not os.environ.get("GAILKIT_HOSTS_TESTS"),
        reason="opt-in: GAILKIT_HOSTS_TESTS=1 pytest -m hosts (makes network namespaces, needs root)",
    ),
]

GAILKIT = [sys.executable, "-m", "gailkit.cli"]


@pytest.fixture
def two_hosts():
    why = hosts_mod.available()
    if why:
        pytest.skip(why)
    with hosts_mod.Hosts(2) as h:
        yield h
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert h.tag not in left  # torn down


@pytest.mark.parametrize("rtt_ms", [0, 20])
def test_a_remote_actor_host_trains_with_curve_keys(two_hosts, tmp_path, rtt_ms):
    """The learner on host 0, an actor on host 1 (directly, or through bench/netproxy.py adding a round trip)."""
    keys = tmp_path / "keys.key"
    subprocess.run([*GAILKIT, "keys", "generate", "--out", str(keys)], check=True, cwd=ROOT)
    run = tmp_path / "run"
    learner = two_hosts.popen(
        0,
        [*GAILKIT, "train", "--env", "CartPole-v1", "--demos", "data/cartpole.arrow", "--preset", "tiny",
         "--total-steps", "512", "--quiet", "--run-dir", str(run), "--actors", "1", "--local-actors", "0",
         "--listen", f"tcp://{two_hosts.address(0)}:5555", "--key-file", str(keys)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    port = 5555
    if rtt_ms:
        port = 6000
        two_hosts.popen(
            0, [sys.executable, str(ROOT / "bench" / "netproxy.py"), "--listen", f"{two_hosts.address(0)}:6000",
                "--to", f"{two_hosts.address(0)}:5555", "--rtt-ms", str(rtt_ms)],
        )  # fmt: skip
    actor = two_hosts.popen(
        1,
        [*GAILKIT, "actor", "--connect", f"tcp://{two_hosts.address(0)}:{port}", "--key-file", str(keys)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    out, err = learner.communicate(timeout=240)
    assert learner.returncode == 0, err[-2000:]
    rows = list(csv.DictReader(open(run / "metrics.csv")))
    assert int(rows[-1]["env_steps"]) >= 512 and all(float(r["actors/policy_lag"]) == 0 for r in rows)
    actor.wait(timeout=60)  # told to stop by the learner


def test_the_proxy_adds_the_round_trip_it_is_asked_for(two_hosts, tmp_path):
    """bench/netproxy.py on the learner's host: a connection from another host through it sees the added
    round trip (measured with a small echo server)."""
    echo = two_hosts.popen(
        0, [sys.executable, "-c",
            "import socket\ns=socket.create_server(('HOST', 7000))\nc,_=s.accept()\n"
            "while (b:=c.recv(64)): c.sendall(b)".replace("HOST", two_hosts.address(0))],
    )  # fmt: skip
    proxy = two_hosts.popen(
        0, [sys.executable, str(ROOT / "bench" / "netproxy.py"), "--listen", f"{two_hosts.address(0)}:7001",
            "--to", f"{two_hosts.address(0)}:7000", "--rtt-ms", "40"],
    )  # fmt: skip
    probe = (
        "import socket, time\n"
        "for _ in range(50):\n"
        "    try:\n        c=socket.create_connection(('HOST', 7001), timeout=5); break\n"
        "    except OSError: time.sleep(0.2)\n"
        "ts=[]\n"
        "for _ in range(5):\n    t=time.perf_counter(); c.sendall(b'x'); c.recv(8); ts.append(time.perf_counter()-t)\n"
        "print(min(ts))"
    ).replace("HOST", two_hosts.address(0))
    out = subprocess.run(
        ["ip", "netns", "exec", two_hosts.names[1], sys.executable, "-c", probe],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert 0.04 <= float(out.stdout) < 0.2  # 40 ms added, little else on a bridge
    proxy.kill()
    echo.kill()


import host_faults  # noqa: E402


def _faults_args(**kw):
    import argparse

    return argparse.Namespace(**{"steps": 8192, "at_round": 6, "cut_s": 12.0, "lag": 0, "timeout": 600.0, **kw})


def _intact(res: dict, rounds: int) -> None:
    """Nothing lost or counted twice, nothing trained on beyond the allowed lag, the checkpoints evaluate."""
    assert res["exit_code"] == 0 and res["rounds"] == rounds
    assert res["rounds_missing_or_twice"] == 0 and res["steps_off"] == 0
    assert res["max_lag"] <= res["allowed_lag"] and res["checkpoint_evaluates"]


@pytest.mark.parametrize("fault", ["cut", "learner"])
def test_a_cut_link_or_a_killed_learner_host_loses_nothing(fault, tmp_path):
    """An actor host's link cut for 12 s (the run goes on with the other, then takes it back), or the learner's
    host killed and the run resumed there while the actors wait: every round once, every step once."""
    why = hosts_mod.available()
    if why:
        pytest.skip(why)
    keys = tmp_path / "keys.key"
    subprocess.run([*GAILKIT, "keys", "generate", "--out", str(keys)], check=True, cwd=ROOT, capture_output=True)
    res = host_faults.zmq_scenario(_faults_args(), fault, keys, tmp_path)
    _intact(res, 16)  # 8,192 steps in rounds of 2 actors x 8 envs x 32 steps
    if fault == "cut":
        assert res["min_live"] == 1  # the cut host was dropped, and the round went to the other
    else:
        assert res["redone_rounds"] == 2  # killed after round 6, resumed from round 4's checkpoint


def test_a_three_node_ray_cluster_with_token_auth_survives_a_worker_node_s_death(tmp_path):
    """Head on host 0, workers on hosts 1 and 2, one actor per node; host 2 killed mid-run: Ray restarts its
    actor on a live node, and the run ends with every round once. A driver without the token is refused."""
    pytest.importorskip("ray")
    why = hosts_mod.available()
    if why:
        pytest.skip(why)
    res = host_faults.ray_scenario(_faults_args(), tmp_path / "unused.key", tmp_path)
    _intact(res, 11)  # 8,192 steps in rounds of 3 actors x 8 envs x 32 steps
    assert "refused: True" in res["note"]
    nodes = {f"10.77.0.{i}" for i in (1, 2, 3)}
    assert all(f"on node {n}" in res["note"] for n in nodes)  # an actor on every node
    assert "restarted on node" in res["note"] and "(was 10.77.0.3)" in res["note"]
