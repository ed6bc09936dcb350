"""Wire messages: exact round trips, and a fuzz suite: random and mutated bytes into every decoder
raise ProtocolError and nothing else."""

import dataclasses

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gailkit.config import PolicyConfig
from gailkit.core.fragments import BadFragment, Fragment, FragmentSpec
from gailkit.model import policy
from gailkit.rollout import wire
from gailkit.rollout.wire import HEADER_SIZE, Header, Kind, ProtocolError

RUN = bytes(range(16))
SPACES = (gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), gym.spaces.Discrete(2))


def _fragment(t=5, e=2, seed=0):
    rng = np.random.default_rng(seed)
    term = np.zeros((t, e), bool)
    term[2, 1] = True
    return Fragment(
        obs=rng.normal(size=(t, e, 4)).astype(np.float32),
        acts=rng.integers(0, 2, (t, e)),
        next_obs=rng.normal(size=(t, e, 4)).astype(np.float32),
        terminated=term,
        truncated=np.zeros((t, e), bool),
        log_probs=-rng.random((t, e)).astype(np.float32),
        rews=np.ones((t, e), np.float32),
        first_starts=np.array([True, False]),
        episode_returns=np.array([3.0]),
        episode_lengths=np.array([3]),
        actor_id=1,
        policy_version=7,
    )


FRAGMENT_BODY = wire.encode_fragment(_fragment())
WEIGHTS = policy.get_weights(policy.build(*SPACES, PolicyConfig(net_arch=[8]), True), 3)
WORK_BODY = wire.encode_work(WEIGHTS, 64)


def test_fragment_round_trip_is_exact():
    f = _fragment()
    back = wire.decode_fragment(FRAGMENT_BODY, 1, 7)
    for name in (
        "obs",
        "acts",
        "next_obs",
        "terminated",
        "truncated",
        "log_probs",
        "rews",
        "first_starts",
        "episode_returns",
        "episode_lengths",
    ):
        assert np.array_equal(getattr(f, name), getattr(back, name)), name
    FragmentSpec.of(*SPACES, 5, 2).check(back)


def test_fragments_of_frames_travel_compressed_and_come_back_exact():
    import dataclasses

    f = _fragment(t=16, e=2)
    frames = np.zeros((16, 2, 42, 42, 3), np.uint8)  # mostly background, as game frames are
    frames[:, :, 10:14, 5:9] = 200
    img = dataclasses.replace(f, obs=frames, next_obs=frames[::-1].copy())
    body = wire.encode_fragment(img)
    assert len(body) < frames.nbytes // 4  # both frame columns, compressed
    back = wire.decode_fragment(body, 1, 7)
    assert np.array_equal(back.obs, frames) and np.array_equal(back.next_obs, frames[::-1])
    plain = wire.encode_fragment(f)  # vector rows travel as they are
    assert len(plain) > f.obs.nbytes + f.next_obs.nbytes


DICT_SPACE = gym.spaces.Dict(
    {"frame": gym.spaces.Box(0, 255, (6, 6, 1), np.uint8), "vec": gym.spaces.Box(-1, 1, (4,), np.float32)}
)


def _dict_fragment() -> Fragment:
    f = _fragment()
    frames = np.arange(5 * 2 * 36, dtype=np.uint8).reshape(5, 2, 6, 6, 1)
    return dataclasses.replace(
        f, obs={"frame": frames, "vec": f.obs}, next_obs={"frame": frames[::-1].copy(), "vec": f.next_obs}
    )


def test_dict_observations_travel_as_one_column_per_entry_and_are_checked_entry_by_entry():
    f = _dict_fragment()
    back = wire.decode_fragment(wire.encode_fragment(f), 1, 7)
    for field in ("obs", "next_obs"):
        assert set(getattr(back, field)) == {"frame", "vec"}
        for k in ("frame", "vec"):
            assert np.array_equal(getattr(back, field)[k], getattr(f, field)[k]), (field, k)
            assert getattr(back, field)[k].dtype == getattr(f, field)[k].dtype
    spec = FragmentSpec.of(DICT_SPACE, SPACES[1], 5, 2)
    spec.check(back)
    with pytest.raises(BadFragment, match=r"'obs' has entries \['frame'\], expected \['frame', 'vec'\]"):
        spec.check(dataclasses.replace(back, obs={"frame": back.obs["frame"]}, next_obs={"frame": back.obs["frame"]}))
    with pytest.raises(ValueError, match="'next_obs' shape"):  # decode_fragment makes this a malformed message
        dataclasses.replace(back, next_obs=back.next_obs["vec"])
    with pytest.raises(BadFragment, match=r"'obs/vec' holds NaN"):
        spec.check(dataclasses.replace(back, obs={**back.obs, "vec": np.full((5, 2, 4), np.nan, np.float32)}))
    wrong = {**back.obs, "frame": back.obs["frame"][..., 0]}
    with pytest.raises(BadFragment, match=r"'obs/frame' is \(5, 2, 6, 6\)"):
        spec.check(dataclasses.replace(back, obs=wrong, next_obs=wrong))
    with pytest.raises(BadFragment, match="entries one array"):  # a vector fragment where the run has a Dict
        spec.check(_fragment())


def test_work_round_trip_and_header():
    weights, n_steps = wire.decode_work(WORK_BODY, 3)
    assert n_steps == 64 and set(weights.tensors) == set(WEIGHTS.tensors)
    assert all(np.array_equal(weights.tensors[k], WEIGHTS.tensors[k]) for k in weights.tensors)
    h = Header(Kind.REJECT, RUN, -5, 2**40)
    assert wire.parse_header(h.pack(), RUN) == h and len(h.pack()) == HEADER_SIZE


@pytest.mark.parametrize(
    "change, reason",
    [
        ({"obs": np.zeros((5, 2, 7), np.float32), "next_obs": np.zeros((5, 2, 7), np.float32)}, "wrong_shape"),
        ({"obs": np.full((5, 2, 4), np.nan, np.float32)}, "not_finite"),
        ({"acts": np.full((5, 2), 7)}, "bad_action"),
        ({"acts": np.zeros((5, 2), np.float32)}, "wrong_shape"),
        ({"log_probs": np.full((5, 2), np.inf, np.float32)}, "not_finite"),
        ({"log_probs": np.full((5, 2), 0.5, np.float32)}, "bad_log_prob"),
        ({"episode_returns": np.array([1.0, 2.0]), "episode_lengths": np.array([1, 1])}, "bad_episode_stats"),
        ({"terminated": np.zeros((5, 2), np.int8)}, "wrong_dtype"),
    ],
)
def test_fragment_spec_names_what_is_wrong(change, reason):
    f = dataclasses.replace(_fragment(), **change)
    with pytest.raises(BadFragment) as e:
        FragmentSpec.of(*SPACES, 5, 2).check(f)
    assert e.value.reason == reason


@pytest.mark.parametrize(
    "space, acts, ok",
    [
        (gym.spaces.MultiDiscrete([3, 2], start=[-1, 5]), [[2, 1]], True),  # the policy's indices, from 0
        (gym.spaces.MultiDiscrete([3, 2]), [[3, 0]], False),
        (gym.spaces.MultiDiscrete([3, 2]), [[-1, 0]], False),
        (gym.spaces.MultiDiscrete([3, 2]), [[0.5, 0]], False),
        (gym.spaces.MultiBinary(2), [[1.0, 0.0]], True),  # SB3's Bernoulli samples are floats
        (gym.spaces.MultiBinary(2), [[2, 0]], False),
        (gym.spaces.MultiBinary(2), [[0.5, 0.0]], False),
    ],
)
def test_multi_discrete_and_multi_binary_actions_outside_their_space_are_bad_fragments(space, acts, ok):
    """A remote actor's MultiDiscrete or MultiBinary action that no policy could sample is refused like a
    Discrete one (it would index past a distribution's logits in the learner)."""
    f = dataclasses.replace(_fragment(), acts=np.broadcast_to(np.asarray(acts), (5, 2, 2)).copy())
    spec = FragmentSpec.of(SPACES[0], space, 5, 2)
    if ok:
        spec.check(f)
        return
    with pytest.raises(BadFragment) as e:
        spec.check(f)
    assert e.value.reason == "bad_action"


def test_wrong_sizes_are_bad_fragments():
    with pytest.raises(BadFragment, match="wrong_size"):
        FragmentSpec.of(*SPACES, 6, 2).check(_fragment())


def _decoders(data: bytes):
    head = Header(Kind.FRAGMENT, RUN, 0, 0)
    return [
        lambda: wire.parse_header(data[:HEADER_SIZE], RUN),
        lambda: wire.decode_fragment(data, 0, 0),
        lambda: wire.decode_work(data, head.policy_version),
        lambda: wire.decode_weights(data, head.policy_version),
        lambda: wire.decode_json(data),
    ]


def _only_protocol_errors(data: bytes) -> None:
    for decode in _decoders(data):
        try:
            decode()
        except ProtocolError:
            pass


FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.binary(max_size=4096))
def test_fuzz_random_bytes_raise_only_protocol_errors(data):
    _only_protocol_errors(data)


@FUZZ
@given(
    st.sampled_from([FRAGMENT_BODY, WORK_BODY]),
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=8),
    st.integers(0, 10**6),
    st.integers(0, 64),
)
def test_fuzz_mutated_messages_raise_only_protocol_errors(body, flips, cut, insert):
    data = bytearray(body)
    for pos, value in flips:
        data[pos % len(data)] = value
    data = bytes(data[: len(data) - cut % len(data)]) + bytes(insert)
    _only_protocol_errors(data)
    # and what does decode as a fragment is then judged by the run's spec, never crashes it
    try:
        frag = wire.decode_fragment(data, 0, 0)
    except ProtocolError:
        return
    try:
        FragmentSpec.of(*SPACES, 5, 2).check(frag)
    except BadFragment:
        pass


@FUZZ
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    )
)
def test_fuzz_json_bodies_and_actor_specs(value):
    import json

    from gailkit.core.errors import ConfigError
    from gailkit.rollout.actor import ActorSpec

    body = json.dumps(value).encode()
    try:
        d = wire.decode_json(body)
    except ProtocolError:
        return
    try:
        ActorSpec.from_json(d)
    except (ConfigError, ValueError):
        pass


def test_deeply_nested_json_is_a_protocol_error():
    with pytest.raises(ProtocolError):
        wire.decode_json(b"[" * 100000 + b"]" * 100000)
