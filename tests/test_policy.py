import gymnasium as gym
import numpy as np
import torch as th

from gailkit.config import PolicyConfig
from gailkit.core.fragments import Fragment, stack
from gailkit.model import policy

CFG = PolicyConfig(net_arch=[16])


def test_normalizer_matches_numpy_over_batches():
    space = gym.spaces.Box(-10, 10, (3,), np.float32)
    pol = policy.build(space, gym.spaces.Discrete(2), CFG, normalize_obs=True)
    norm = policy.normalizer(pol)
    rng = np.random.default_rng(0)
    data = rng.normal([1.0, -2.0, 5.0], [0.5, 2.0, 3.0], (1000, 3)).astype(np.float32)
    for chunk in np.array_split(data, 7):
        norm.update(th.as_tensor(chunk))
    assert np.allclose(norm.mean.numpy(), data.mean(0), atol=1e-5)
    assert np.allclose(norm.var.numpy(), data.var(0), rtol=1e-4)
    out = norm(th.as_tensor(data)).numpy()
    assert np.allclose(out.mean(0), 0, atol=1e-4) and np.allclose(out.std(0), 1, atol=1e-3)


def test_weights_round_trip_carries_normalizer():
    space = gym.spaces.Box(-1, 1, (2,), np.float32)
    a = policy.build(space, space, CFG, normalize_obs=True)
    policy.normalizer(a).update(th.randn(50, 2) * 3 + 1)
    b = policy.build(space, space, CFG, normalize_obs=True)
    policy.set_weights(b, policy.get_weights(a, version=3))
    obs = np.random.default_rng(0).uniform(-1, 1, (5, 2)).astype(np.float32)
    assert np.allclose(policy.act(a, obs, deterministic=True)[0], policy.act(b, obs, deterministic=True)[0])
    assert th.equal(policy.normalizer(a).mean, policy.normalizer(b).mean)


def test_act_shapes_and_clipping():
    space = gym.spaces.Box(-1, 1, (2,), np.float32)
    pol = policy.build(space, space, PolicyConfig(net_arch=[8], log_std_init=2.0), normalize_obs=False)
    acts, logp = policy.act(pol, np.zeros((64, 2), np.float32))
    assert acts.shape == (64, 2) and logp.shape == (64,)
    assert np.abs(acts).max() > 1  # sampled actions are unclipped ...
    assert np.abs(policy.env_action(space, acts)).max() <= 1  # ... the env gets them clipped
    pol_d = policy.build(space, gym.spaces.Discrete(3), CFG, normalize_obs=False)
    acts, _ = policy.act(pol_d, np.zeros((4, 2), np.float32))
    assert acts.shape == (4,) and set(acts) <= {0, 1, 2}


def _frag(t, e, actor_id, version=0):
    z = np.zeros((t, e), bool)
    return Fragment(
        obs=np.zeros((t, e, 3)),
        acts=np.zeros((t, e)),
        next_obs=np.zeros((t, e, 3)),
        terminated=z,
        truncated=z,
        log_probs=np.zeros((t, e), np.float32),
        rews=np.zeros((t, e), np.float32),
        first_starts=np.ones(e, bool),
        episode_returns=np.zeros(0),
        episode_lengths=np.zeros(0, np.int64),
        actor_id=actor_id,
        policy_version=version,
    )


def test_fragment_shape_checks_and_stack():
    import pytest

    with pytest.raises(ValueError, match="fragment field 'obs' has leading shape"):
        Fragment(**{**_frag(4, 2, 0).__dict__, "obs": np.zeros((3, 2, 3))})
    both = stack([_frag(4, 2, 0), _frag(4, 3, 1)])
    assert both.obs.shape == (4, 5, 3) and both.first_starts.shape == (5,)
    with pytest.raises(ValueError, match="different lengths"):
        stack([_frag(4, 2, 0), _frag(5, 2, 1)])


def test_a_cnn_policy_has_no_hidden_layers_by_default_and_older_checkpoints_keep_theirs():
    """SB3's CnnPolicy layout when `net_arch` is empty; a learner state trained with gailkit 0.2's default
    ([64, 64] after the CNN too) gets settings that rebuild exactly its network; vectors keep [64, 64]."""
    frames = gym.spaces.Box(0, 255, (12, 12, 3), np.uint8)
    vector = gym.spaces.Box(-1, 1, (3,), np.float32)
    acts = gym.spaces.Discrete(2)
    cnn = policy.build(frames, acts, PolicyConfig(), True)
    assert len(cnn.mlp_extractor.policy_net) == 0 and len(cnn.mlp_extractor.value_net) == 0
    assert len(policy.build(vector, acts, PolicyConfig(), True).mlp_extractor.policy_net) == 4  # two tanh layers
    older = policy.build(frames, acts, PolicyConfig(net_arch=[64, 64]), True)
    net = policy.as_trained(PolicyConfig(), frames, {"generator": {"policy": older.state_dict()}})
    assert net.net_arch == [64, 64]
    policy.build(frames, acts, net, True).load_state_dict(older.state_dict())  # rebuilds as trained
    assert policy.as_trained(PolicyConfig(), frames, {"generator": {"policy": cnn.state_dict()}}).net_arch == []
    assert policy.as_trained(
        PolicyConfig(net_arch=[16]), frames, {"generator": {"policy": older.state_dict()}}
    ).net_arch == [16]
    assert policy.as_trained(PolicyConfig(), vector, {"generator": {"policy": older.state_dict()}}).net_arch == []
    for odd in (None, [], {"generator": th.zeros(2)}, {"generator": {"policy": th.zeros(2)}}):  # what a file may hold
        assert policy.as_trained(PolicyConfig(), frames, odd).net_arch == []
    mixed = gym.spaces.Dict({"frame": frames, "vec": vector})
    assert len(policy.build(mixed, acts, PolicyConfig(), True).mlp_extractor.policy_net) == 0
    assert len(policy.build(gym.spaces.Dict({"vec": vector}), acts, PolicyConfig(), True).mlp_extractor.policy_net) == 4
