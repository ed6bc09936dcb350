import numpy as np
import pytest

from gailkit.config import EnvConfig, PolicyConfig, PPOConfig
from gailkit.model import policy
from gailkit.rollout.actor import Actor, ActorSpec
from tests.conftest import small_generator

CFG = PolicyConfig(net_arch=[16])


def _actor(seed=0, actor_id=0):
    a = Actor(ActorSpec(EnvConfig(id="CartPole-v1"), CFG, normalize_obs=True, n_envs=3, seed=seed, actor_id=actor_id))
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


@pytest.mark.parametrize(
    "spoil, message",
    [
        (lambda t: t.pop(next(iter(t))), "weights for another network"),
        (lambda t: t.update({"extra": np.zeros(3, np.float32)}), "weights for another network"),
        (lambda t: t.update({k: np.zeros((1, 1), np.float32) for k in list(t)[-1:]}), "expected"),
        (lambda t: t.update({k: np.full(v.shape, np.nan, v.dtype) for k, v in list(t.items())[-1:]}), "NaN or inf"),
        (lambda t: t.update({k: v.astype(np.float64) for k, v in list(t.items())[-1:]}), "expected"),
    ],
)
def test_bad_weights_are_refused_and_change_nothing(spoil, message):
    import dataclasses

    a = _actor()
    before = policy.get_weights(a._policy, 0).tensors
    other = policy.get_weights(policy.build(a.observation_space, a.action_space, CFG, normalize_obs=True), version=5)
    spoil(other.tensors)
    with pytest.raises(ValueError, match=message):
        a.set_weights(dataclasses.replace(other))
    assert a.version == -1
    after = policy.get_weights(a._policy, 0).tensors
    assert all(np.array_equal(before[k], after[k]) for k in before)


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


class _Counter:
    """A hand-checkable env: obs = [t, episode], terminates at t == 3 on even episodes, truncated at t == 5."""

    @staticmethod
    def make():
        import gymnasium as gym

        class CounterEnv(gym.Env):
            observation_space = gym.spaces.Box(-1e6, 1e6, (2,), np.float32)
            action_space = gym.spaces.Discrete(2)

            def __init__(self):
                self.episode = -1

            def reset(self, *, seed=None, options=None):
                super().reset(seed=seed)
                self.t, self.episode = 0, self.episode + 1
                return np.array([0, self.episode], np.float32), {}

            def step(self, action):
                self.t += 1
                obs = np.array([self.t, self.episode], np.float32)
                terminated = self.episode % 2 == 0 and self.t == 3
                truncated = not terminated and self.t == 5
                return obs, float(self.t), terminated, truncated, {}

        return CounterEnv


def test_fragments_never_hold_the_reset_step_and_keep_true_final_obs(monkeypatch):
    """gymnasium 1.x vector envs reset on the step after an episode ends; gailkit's actor steps
    each env itself and must never emit (final obs -> reset obs) as a transition."""
    import gymnasium as gym

    from gailkit.data import envs

    cls = _Counter.make()
    monkeypatch.setattr(envs, "make_factory", lambda cfg, *a, **k: cls)
    a = Actor(ActorSpec(EnvConfig(id="counter"), CFG, normalize_obs=False, n_envs=1, seed=0))
    a.start()
    f = a.sample(12)
    obs, nxt = f.obs[:, 0], f.next_obs[:, 0]
    # episode 0 terminates after 3 steps, episode 1 is truncated after 5, episode 2 terminates after 3, ...
    assert obs[:, 0].tolist() == [0, 1, 2, 0, 1, 2, 3, 4, 0, 1, 2, 0]
    assert nxt[:, 0].tolist() == [1, 2, 3, 1, 2, 3, 4, 5, 1, 2, 3, 1]
    assert obs[:, 1].tolist() == [0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 2, 3]
    assert np.array_equal(nxt[:, 1], obs[:, 1])  # every transition stays inside one episode
    assert f.terminated[:, 0].tolist() == [0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0]
    assert f.truncated[:, 0].tolist() == [0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0]
    assert f.episode_returns.tolist() == [6.0, 15.0, 6.0] and f.episode_lengths.tolist() == [3, 5, 3]
    assert isinstance(cls(), gym.Env)


def test_truncation_bootstraps_from_the_true_final_observation(monkeypatch):
    """The PPO target of a truncated step adds gamma * V(final obs), that of a terminated step adds nothing."""
    from gailkit.data import envs

    cls = _Counter.make()
    monkeypatch.setattr(envs, "make_factory", lambda cfg, *a, **k: cls)
    a = Actor(ActorSpec(EnvConfig(id="counter"), CFG, normalize_obs=False, n_envs=1, seed=0))
    a.start()
    f = a.sample(12)
    cfg = PPOConfig(n_steps=12, batch_size=12, n_epochs=1, gamma=0.5)
    gen = small_generator(a.observation_space, a.action_space, cfg)
    v_final = gen.values(np.array([[5, 1]], np.float32)).item()  # the truncated episode's last obs, t = 5
    v_reset = gen.values(np.array([[0, 2]], np.float32)).item()  # what a next-step autoreset would show
    assert abs(v_final - v_reset) > 1e-4
    gen.update(f, np.ones((12, 1), np.float32), 1.0)
    rewards = gen.ppo.rollout_buffer.rewards[:, 0]
    assert np.isclose(rewards[7], 1.0 + 0.5 * v_final, atol=1e-6)  # truncated at t = 5
    assert rewards[2] == 1.0 and rewards[10] == 1.0  # terminated: no future value
    assert np.allclose(np.delete(rewards, 7), 1.0)
