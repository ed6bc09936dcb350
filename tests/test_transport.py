"""The ZeroMQ endpoints on loopback: messages both ways, bounded sizes, timeouts, keys, and failed starts."""

import json
import os
import time

import pytest
import zmq

from gailkit.core.errors import ConfigError
from gailkit.rollout import transport
from gailkit.rollout.wire import HEADER_SIZE, Header, Kind

RUN = os.urandom(16)


@pytest.fixture()
def pair():
    learner = transport.LearnerEndpoint("tcp://127.0.0.1:0", RUN, max_bytes=1 << 16)
    address = learner.start()
    actor = transport.ActorEndpoint(address)
    actor.start()
    yield learner, actor
    actor.close()
    learner.close()


def test_messages_both_ways_and_timeouts(pair):
    learner, actor = pair
    t0 = time.monotonic()
    assert learner.recv(200) is None and 0.15 < time.monotonic() - t0 < 2  # a timeout, not a hang
    assert actor.send(Header(Kind.HELLO, bytes(16), 3, 0), b'{"actor_id": 3}')
    identity, header, body = learner.recv(5000)
    assert header.kind == Kind.HELLO and header.actor_id == 3 and json.loads(body) == {"actor_id": 3}
    assert learner.send(identity, Header(Kind.CONFIG, RUN, 3, 0), b"{}")
    got = actor.recv(5000)
    assert got is not None and got[0].kind == Kind.CONFIG and actor.run_id == RUN
    assert learner.send(identity, Header(Kind.WORK, os.urandom(16), 3, 1), b"x")  # another run's message
    assert actor.recv(500) is None  # is ignored by the actor


def test_oversized_malformed_and_foreign_messages_are_counted(pair):
    learner, actor = pair
    actor.send(Header(Kind.FRAGMENT, RUN, 0, 0), b"x" * ((1 << 16) + 1))  # over max_bytes
    sock = actor._sock
    sock.send_multipart([b"short header", b"body"])
    sock.send_multipart([b"one frame only"])
    sock.send_multipart([Header(Kind.FRAGMENT, os.urandom(16), 0, 0).pack(), b""])
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and sum(learner.dropped.values()) < 3:
        learner.recv(100)
    assert learner.dropped["malformed"] == 2 and learner.dropped["wrong_run"] == 1
    # over ZeroMQ's own MAXMSGSIZE the connection is dropped before anything is read; either way nothing arrives
    assert learner.dropped["oversized"] in (0, 1)


def test_sends_never_block_on_a_vanished_peer(pair):
    learner, actor = pair
    actor.send(Header(Kind.HELLO, bytes(16), 1, 0), b"{}")
    identity, _, _ = learner.recv(5000)
    actor.close()
    time.sleep(0.3)
    t0 = time.monotonic()
    for _ in range(200):
        learner.send(identity, Header(Kind.WORK, RUN, 1, 0), b"y" * 1000)
    assert time.monotonic() - t0 < 2
    assert learner.dropped["peer_gone"] + learner.dropped["send_queue_full"] > 0


def test_keys_files_and_refusals(tmp_path):
    path = transport.generate_keys(tmp_path / "k.json")
    keys = transport.read_keys(path)
    assert set(keys) == {"server_public", "server_secret", "client_public", "client_secret"}
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    for content, why in (
        ("{}", "KeyError"),
        ("not json", "JSONDecodeError"),
        (json.dumps({**{k: v.decode() for k, v in keys.items()}, "client_secret": "short"}), "40"),
    ):
        (tmp_path / "bad.json").write_text(content)
        with pytest.raises(ConfigError, match=f"--key-file .*bad.json: not a gailkit key file .*{why}"):
            transport.read_keys(tmp_path / "bad.json")
    with pytest.raises(ConfigError, match="No such file or directory"):
        transport.read_keys(tmp_path / "missing.json")


def test_a_failed_start_leaves_the_port_free(tmp_path):
    learner = transport.LearnerEndpoint("tcp://127.0.0.1:0", RUN)
    address = learner.start()
    port = address.rsplit(":", 1)[1]
    second = transport.LearnerEndpoint(f"tcp://127.0.0.1:{port}", RUN)
    with pytest.raises(ConfigError, match="cannot listen there \\(Address already in use\\)"):
        second.start()
    learner.close()
    third = transport.LearnerEndpoint(f"tcp://127.0.0.1:{port}", RUN, key_file=str(tmp_path / "none.json"))
    with pytest.raises(ConfigError, match="not a gailkit key file"):
        third.start()
    fourth = transport.LearnerEndpoint(f"tcp://127.0.0.1:{port}", RUN)
    assert fourth.start().endswith(port)  # nothing of the failed starts holds the port
    fourth.close()


@pytest.mark.parametrize(
    "endpoint, loopback",
    [
        ("tcp://127.0.0.1:5", True),
        ("tcp://localhost:5", True),
        ("tcp://[::1]:5", True),
        ("ipc:///tmp/x", True),
        ("tcp://0.0.0.0:5", False),
        ("tcp://10.0.0.1:5", False),
        ("tcp://[::1:5", False),
    ],
)
def test_loopback_detection(endpoint, loopback):
    assert transport.is_loopback(endpoint) is loopback
    assert HEADER_SIZE == 35 and zmq.zmq_version_info() >= (4, 0)
