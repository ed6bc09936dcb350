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


def test_a_remote_actor_host_trains_with_curve_keys(two_hosts, tmp_path):
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
    actor = two_hosts.popen(
        1,
        [*GAILKIT, "actor", "--connect", f"tcp://{two_hosts.address(0)}:5555", "--key-file", str(keys)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    out, err = learner.communicate(timeout=240)
    assert learner.returncode == 0, err[-2000:]
    rows = list(csv.DictReader(open(run / "metrics.csv")))
    assert int(rows[-1]["env_steps"]) >= 512 and all(float(r["actors/policy_lag"]) == 0 for r in rows)
    actor.wait(timeout=60)  # told to stop by the learner
