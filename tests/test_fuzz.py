"""Fuzzing with hypothesis: random and mutated pickles into the demo loader, and random and mutated
messages into a live learner's fleet on loopback. Only the documented errors may come out, the
learner's rounds complete, and no code runs (a marker file proves it)."""

import pickle
import threading
from pathlib import Path

import numpy as np
import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gailkit.data import demos
from gailkit.rollout import wire
from gailkit.rollout.wire import Header, Kind

MARKER = Path(__file__).resolve().parent / ".fuzz_marker_must_never_exist"
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "imitation"


def _seed_pickles() -> list[bytes]:
    code = f"open({str(MARKER)!r}, 'w').write('ran')".encode()
    escape = (
        b"\x80\x04\x8c\x0cnumpy.dtypes\x8c\x10__builtins__.get\x93\x8c\x04eval\x85R"
        + b"\x8c"
        + bytes([len(code)])
        + code
        + b"\x85R."
    )
    system = b"cos\nsystem\n(S'touch " + str(MARKER).encode() + b"'\ntR."
    d = {
        "obs": np.zeros((4, 2), np.float32),
        "acts": np.ones((4, 2), np.float32),
        "next_obs": np.zeros((4, 2), np.float32),
        "dones": np.array([0, 0, 0, 1], bool),
        "metadata": {"env_id": "CustomEnv"},
    }
    return [
        escape,
        system,
        pickle.dumps(d, 2),
        pickle.dumps(d, 5),
        (FIXTURES / "trajectories_p2.pkl").read_bytes(),
        (FIXTURES / "transitions.pkl").read_bytes(),
    ]


SEEDS = _seed_pickles()
FUZZ = settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)


def _load(tmp_path, data: bytes) -> None:
    path = tmp_path / "f.pkl"
    path.write_bytes(data)
    try:
        demos.load_file(path)
    except demos.DemoError:
        pass
    assert not MARKER.exists()


@FUZZ
@given(st.binary(max_size=2048))
def test_fuzz_random_pickles(tmp_path, data):
    _load(tmp_path, data)


@FUZZ
@given(
    st.sampled_from(range(len(SEEDS))),
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=6),
    st.integers(0, 64),
    st.binary(max_size=16),
)
def test_fuzz_mutated_pickles(tmp_path, which, flips, cut, tail):
    data = bytearray(SEEDS[which])
    for pos, value in flips:
        data[pos % len(data)] = value
    _load(tmp_path, bytes(data[: max(1, len(data) - cut)]) + tail)


# ---------------------------------------------------------------------------------------------
# A live learner: a ZmqFleet with one real actor process collects rounds while hostile peers send
# whatever hypothesis makes. Every round must complete with valid fragments.


@pytest.fixture(scope="module")
def live_fleet():
    from test_fleet import _fleet

    fleet = _fleet(n_slots=2, local_actors=2, max_bad_fragments=1000)
    fleet.start()
    yield fleet
    fleet.stop()


def _messages():
    kinds = st.sampled_from([int(k) for k in Kind] + [0, 99])
    frag = wire.encode_fragment(_real_fragment())
    body = st.one_of(
        st.binary(max_size=512),
        st.just(frag),
        st.tuples(st.integers(0, len(frag) - 1), st.integers(0, 255)).map(
            lambda t: frag[: t[0]] + bytes([t[1]]) + frag[t[0] + 1 :]
        ),
        st.integers(1, len(frag)).map(lambda n: frag[:n]),
    )
    return st.tuples(kinds, st.integers(-3, 3), st.integers(-2, 10), body, st.booleans())


def _real_fragment():
    from test_wire import _fragment

    return _fragment(t=20, e=2)


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(_messages(), min_size=10, max_size=60), st.lists(st.binary(max_size=64), max_size=5))
def test_fuzz_a_live_learner_on_loopback(live_fleet, messages, raw_frames):
    from test_fleet import _weights

    out: dict = {}
    version = live_fleet_version(live_fleet)
    t = threading.Thread(target=lambda: out.setdefault("frags", live_fleet.collect(_weights(version), n_steps=20)))
    t.start()
    ctx = zmq.Context()
    try:
        hello = ctx.socket(zmq.DEALER)  # says hello, so its fragments reach the decoder and the spec check
        anon = ctx.socket(zmq.DEALER)
        for sock in (hello, anon):
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(live_fleet.address)
        hello.send_multipart([Header(Kind.HELLO, bytes(16), -1, 0).pack(), b'{"actor_id": 5}'])
        for kind, actor_id, v, body, from_hello in messages:
            head = Header(Kind.FRAGMENT, live_fleet.run_id, actor_id, version + v - 2).pack()
            head = head[:6] + bytes([kind % 256]) + head[7:]
            (hello if from_hello else anon).send_multipart([head, body], flags=zmq.NOBLOCK)
        for frames in raw_frames:
            anon.send_multipart([frames], flags=zmq.NOBLOCK)
        t.join(120)
    finally:
        ctx.destroy(linger=0)
    assert not t.is_alive() and len(out["frags"]) == 2
    assert all(
        f.obs.shape == (20, 2, 4) and np.isfinite(f.obs).all() and set(np.unique(f.acts)) <= {0, 1}
        for f in out["frags"]
    )


_VERSION = {"v": 0}


def live_fleet_version(fleet) -> int:
    _VERSION["v"] += 1
    return _VERSION["v"]
