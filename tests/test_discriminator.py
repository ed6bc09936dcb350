import numpy as np
import torch as th

from gailkit import envs
from gailkit.config import DiscConfig
from gailkit.discriminator import Discriminator, choose_reward_fn


def _data(custom_demos):
    rng = np.random.default_rng(0)
    exp = (custom_demos.obs, custom_demos.acts, custom_demos.next_obs)
    rand = (custom_demos.obs, rng.uniform(-1, 1, custom_demos.acts.shape).astype(np.float32), custom_demos.next_obs)
    return exp, rand


def test_separates_expert_from_random_after_a_few_updates(custom_demos):
    th.manual_seed(0)
    obs_space, act_space = envs.spaces("CustomEnv")
    disc = Discriminator(obs_space, act_space, DiscConfig(net_arch=[32, 32], disc_lr=3e-3), "cpu", "gail")
    exp, rand = (disc.preprocess(*x) for x in _data(custom_demos))
    for _ in range(150):
        stats = disc.train_step(exp, rand)
    assert stats["disc/acc_expert"] > 0.85 and stats["disc/acc_gen"] > 0.85, stats
    assert disc.reward(exp).mean() > disc.reward(rand).mean() + 0.5


def test_batched_reward_equals_per_sample(custom_demos):
    obs_space, act_space = envs.spaces("CustomEnv")
    for fn in ("gail", "airl", "negative"):
        disc = Discriminator(obs_space, act_space, DiscConfig(grad_penalty=1.0, ent_coef=0.01), "cpu", fn)
        exp, rand = (disc.preprocess(*x) for x in _data(custom_demos))
        disc.train_step(exp, rand)  # moves the RunningNorm statistics away from their start
        batched = disc.reward(exp, chunk=7).numpy()
        single = np.array([disc.reward(tuple(x[i:i + 1] for x in exp)).item() for i in range(len(exp[0]))])
        assert np.allclose(batched, single, atol=1e-6), fn
        assert (batched >= 0).all() if fn == "gail" else True
        assert (batched <= 0).all() if fn == "negative" else True


def test_reward_does_not_move_normalization(custom_demos):
    obs_space, act_space = envs.spaces("CustomEnv")
    disc = Discriminator(obs_space, act_space, DiscConfig(), "cpu", "gail")
    exp, _ = (disc.preprocess(*x) for x in _data(custom_demos))
    before = {k: v.clone() for k, v in disc.net.state_dict().items()}
    disc.reward(exp)
    assert all(th.equal(before[k], v) for k, v in disc.net.state_dict().items())


def test_discrete_actions_one_hot(cartpole_demos):
    obs_space, act_space = envs.spaces("CartPole-v1")
    disc = Discriminator(obs_space, act_space, DiscConfig(), "cpu", "gail")
    inputs = disc.preprocess(cartpole_demos.obs, cartpole_demos.acts, cartpole_demos.next_obs)
    assert inputs[1].shape == (len(cartpole_demos), 2)
    assert disc.reward(inputs).shape == (len(cartpole_demos),)


def test_auto_reward_choice():
    assert choose_reward_fn("auto", terminated_fraction=0.0) == "gail"
    assert choose_reward_fn("auto", terminated_fraction=0.9) == "airl"
    assert choose_reward_fn("negative", terminated_fraction=0.0) == "negative"
