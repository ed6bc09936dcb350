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
