import numpy as np

from gailkit import policy
from gailkit.actor import Actor
from gailkit.config import EnvConfig, PPOConfig

CFG = PPOConfig(net_arch=[16])


def _actor(seed=0, actor_id=0):
    a = Actor(EnvConfig(id="CartPole-v1"), CFG, normalize_obs=True, actor_id=actor_id, n_envs=3, seed=seed)
    a.start()
    return a


def test_fragment_fields_and_episode_bookkeeping():
    a = _actor()
    f = a.sample(60)
    assert f.obs.shape == (60, 3, 4) and f.acts.shape == (60, 3) and f.log_probs.shape == (60, 3)
    assert f.first_starts.all()
    # where an episode ended, the next step's obs is a fresh reset, and next_obs is the final obs
    t, e = np.argwhere(f.terminated)[0]
    assert not np.array_equal(f.next_obs[t, e], f.obs[t + 1, e])
    assert np.array_equal(f.next_obs[t - 1, e], f.obs[t, e])
    assert len(f.episode_returns) == f.terminated.sum() and (f.episode_lengths == f.episode_returns).all()
    g = a.sample(5)
    assert np.array_equal(g.first_starts, f.dones[-1])
    a.stop()


def test_weights_apply_only_if_newer():
    a = _actor()
    other = policy.build(a.observation_space, a.action_space, CFG, normalize_obs=True)
    assert a.set_weights(policy.get_weights(other, version=2))
    assert a.version == 2
    assert not a.set_weights(policy.get_weights(other, version=1))
    assert a.version == 2


def test_seeds_differ_by_actor_and_repeat_by_seed():
    f0, f1, again = _actor(actor_id=0).sample(3), _actor(actor_id=1).sample(3), _actor(actor_id=0).sample(3)
    assert not np.array_equal(f0.obs[0], f1.obs[0])
    assert np.array_equal(f0.obs[0], again.obs[0])


def test_state_restores_envs_mid_episode():
    import torch as th

    a = _actor()
    a.sample(25)
    state, torch_state = a.state(), th.get_rng_state()
    expected = a.sample(40)
    b = _actor(seed=123)  # different seed: everything must come from the state
    b.set_weights(policy.get_weights(a._policy, version=0))
    b.load_state(state)
    th.set_rng_state(torch_state)
    got = b.sample(40)
    for name in ("obs", "acts", "next_obs", "terminated", "episode_returns", "first_starts"):
        assert np.array_equal(getattr(expected, name), getattr(got, name)), name
