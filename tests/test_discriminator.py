import dataclasses

import numpy as np
import pytest
import torch as th

from gailkit.algo.discriminator import Batch, Discriminator, choose_reward_fn
from gailkit.config import DiscConfig
from gailkit.data import envs


def _data(custom_demos):
    rng = np.random.default_rng(0)
    exp = (custom_demos.obs, custom_demos.acts, custom_demos.next_obs)
    rand = (custom_demos.obs, rng.uniform(-1, 1, custom_demos.acts.shape).astype(np.float32), custom_demos.next_obs)
    return exp, rand


@pytest.mark.parametrize(
    "extra, acc, gap",
    [({}, 0.85, 0.5), ({"grad_penalty": 1.0, "label_smoothing": 0.1}, 0.85, 0.2), ({"spectral_norm": True}, 0.75, 0.2)],
)  # 1-Lipschitz: a slower, smaller margin
def test_separates_expert_from_random_after_a_few_updates(custom_demos, extra, acc, gap):
    th.manual_seed(0)
    obs_space, act_space = envs.spaces("CustomEnv")
    disc = Discriminator(obs_space, act_space, DiscConfig(net_arch=[32, 32], disc_lr=3e-3, **extra), "cpu", "gail")
    exp, rand = (disc.batch(*x) for x in _data(custom_demos))
    first = disc.train_step(exp, rand)
    for _ in range(400):
        stats = disc.train_step(exp, rand)
    assert stats["disc/loss"] < first["disc/loss"]
    assert stats["disc/acc_expert"] > acc and stats["disc/acc_gen"] > acc, stats
    assert disc.reward(exp).mean() > disc.reward(rand).mean() + gap


@pytest.mark.parametrize("fn", ["gail", "airl", "negative"])
def test_batched_reward_equals_per_sample_and_has_its_sign(custom_demos, fn):
    obs_space, act_space = envs.spaces("CustomEnv")
    th.manual_seed(0)
    disc = Discriminator(obs_space, act_space, DiscConfig(grad_penalty=1.0, ent_coef=0.01, disc_lr=3e-3), "cpu", fn)
    exp, rand = (disc.batch(*x) for x in _data(custom_demos))
    for _ in range(50):
        disc.train_step(exp, rand)  # moves the normalization statistics and the logits away from 0
    both = Batch.cat([exp, rand])
    batched = disc.reward(both, chunk=7).numpy()
    single = np.array([disc.reward(both[i : i + 1]).item() for i in range(len(both))])
    assert np.allclose(batched, single, atol=1e-6)
    logits = disc.logits(both).detach().numpy()
    assert (logits > 0).any() and (logits < 0).any()
    expected = {"gail": np.logaddexp(0, logits), "airl": logits, "negative": -np.logaddexp(0, -logits)}[fn]
    assert np.allclose(batched, expected, atol=1e-5)


def test_reward_does_not_move_normalization(custom_demos):
    obs_space, act_space = envs.spaces("CustomEnv")
    disc = Discriminator(obs_space, act_space, DiscConfig(), "cpu", "gail")
    exp, _ = (disc.batch(*x) for x in _data(custom_demos))
    before = {k: v.clone() for k, v in disc.net.state_dict().items()}
    disc.reward(exp)
    assert all(th.equal(before[k], v) for k, v in disc.net.state_dict().items())
    disc.train_step(exp, exp)
    key = next(k for k in before if k.endswith("running_mean"))
    assert not th.equal(before[key], disc.net.state_dict()[key])


def test_discrete_actions_one_hot(cartpole_demos):
    obs_space, act_space = envs.spaces("CartPole-v1")
    disc = Discriminator(obs_space, act_space, DiscConfig(absorbing=False), "cpu", "gail")
    b = disc.batch(cartpole_demos.obs, cartpole_demos.acts, cartpole_demos.next_obs)
    x = disc.inputs(b)
    assert x.shape == (len(cartpole_demos), 4 + 2)
    assert th.equal(x[:, 4:].argmax(1), th.as_tensor(cartpole_demos.acts))
    assert th.equal(x[:, 4:].sum(1), th.ones(len(cartpole_demos)))
    assert disc.reward(b).shape == (len(cartpole_demos),)


def test_absorbing_rows_are_zeroed_and_flagged(custom_demos):
    obs_space, act_space = envs.spaces("CustomEnv")
    cfg = DiscConfig(use_next_state=True, absorbing=True)
    disc = Discriminator(obs_space, act_space, cfg, "cpu", "gail")
    n = 4
    obs_abs, next_abs = np.array([True, False, False, False]), np.array([True, True, False, False])
    b = disc.batch(custom_demos.obs[:n], custom_demos.acts[:n], custom_demos.next_obs[:n], obs_abs, next_abs)
    x = disc.inputs(b)
    assert x.shape == (n, 2 + 2 + 2 + 2)
    assert th.equal(x[0, :6], th.zeros(6)) and x[0, 6] == 1 and x[0, 7] == 1
    assert th.equal(x[1, :4], th.as_tensor(np.concatenate([custom_demos.obs[1], custom_demos.acts[1]])))
    assert th.equal(x[1, 4:6], th.zeros(2)) and x[1, 6] == 0 and x[1, 7] == 1
    assert x[2, 6] == 0 and x[2, 7] == 0 and th.equal(x[2, 4:6], th.as_tensor(custom_demos.next_obs[2]))


def test_absorbing_frames_are_zeroed_before_the_cnn_and_other_rows_are_left_as_they_are():
    """Frames of an absorbing row count as zeros whatever they hold (masked in their own dtype, not cast);
    a row that is not absorbing is encoded from its frames, with or without absorbing rows beside it."""
    import gymnasium as gym

    obs_space, act_space = gym.spaces.Box(0, 255, (2, 40, 40), np.uint8), gym.spaces.Discrete(3)
    disc = Discriminator(obs_space, act_space, DiscConfig(use_next_state=True, absorbing=True), "cpu", "gail")
    rng = np.random.default_rng(0)
    obs, nxt = (rng.integers(0, 256, (3, 2, 40, 40), dtype=np.uint8) for _ in range(2))
    acts = np.array([0, 1, 2])
    none, some = np.zeros(3, bool), np.array([False, True, False])
    plain = disc.inputs(disc.batch(obs, acts, nxt, none, none))
    masked = disc.inputs(disc.batch(obs, acts, nxt, some, some))
    zeros = np.zeros_like(obs)
    as_zeros = disc.inputs(disc.batch(zeros, acts, zeros, some, some))
    assert th.equal(masked[1], as_zeros[1])  # the absorbing row: its frames do not matter
    assert th.equal(masked[[0, 2], :-2], plain[[0, 2], :-2])  # the others: as encoded alone
    assert not th.equal(plain[1], masked[1])


def test_state_only_discriminator_ignores_actions(custom_demos):
    obs_space, act_space = envs.spaces("CustomEnv")
    disc = Discriminator(
        obs_space, act_space, DiscConfig(use_action=False, use_next_state=True, absorbing=False), "cpu", "gail"
    )
    a = disc.inputs(disc.batch(custom_demos.obs, custom_demos.acts, custom_demos.next_obs))
    b = disc.inputs(disc.batch(custom_demos.obs, None, custom_demos.next_obs))
    assert th.equal(a, b) and a.shape[1] == 4


def test_auto_reward_choice():
    assert choose_reward_fn("auto", terminated_fraction=0.0) == "gail"
    assert choose_reward_fn("auto", terminated_fraction=0.9) == "airl"
    assert choose_reward_fn("negative", terminated_fraction=0.0) == "negative"


@pytest.mark.imitation
@pytest.mark.parametrize("space_env", ["CustomEnv", "CartPole-v1"])
@pytest.mark.parametrize("use_next_state", [False, True])
def test_same_logits_as_imitations_basic_reward_net(custom_demos, cartpole_demos, space_env, use_next_state):
    """gailkit's net and imitation's BasicRewardNet give the same logits for the same weights,
    before and after training steps move the normalization statistics."""
    pytest.importorskip("imitation")
    d = custom_demos if space_env == "CustomEnv" else cartpole_demos
    obs_space, act_space = envs.spaces(space_env)
    cfg = DiscConfig(net_arch=[16, 8], use_next_state=use_next_state, absorbing=False)
    th.manual_seed(0)
    ours = Discriminator(obs_space, act_space, cfg, "cpu", "airl")
    theirs = Discriminator(obs_space, act_space, dataclasses.replace(cfg, net="imitation"), "cpu", "airl")
    x = ours.batch(d.obs, d.acts, d.next_obs)
    assert th.equal(ours.inputs(x), theirs.inputs(theirs.batch(d.obs, d.acts, d.next_obs)))
    for _ in range(3):
        ours.train_step(x, x[th.arange(len(x) - 1, -1, -1)])
    theirs.net.net.load_state_dict(ours.net.state_dict())
    ours.net.eval(), theirs.net.eval()
    assert th.allclose(ours.logits(x), theirs.logits(x), atol=1e-6)
    imitation_inputs = theirs.net.net.preprocess(d.obs, d.acts, d.next_obs, np.zeros(len(d), bool))
    assert th.allclose(theirs.net.net(*imitation_inputs), ours.logits(x), atol=1e-6)
    ours.net.train(), theirs.net.train()
    ours.logits(x), theirs.logits(x)  # one training-mode pass: both update their statistics alike
    for (k, a), b in zip(ours.net.state_dict().items(), theirs.net.net.state_dict().values()):
        assert th.allclose(a.float(), b.float(), atol=1e-6), k


def test_absorbing_flags_pass_the_normalization_and_a_gradient_penalty_still_learns(custom_demos):
    """Flags that are always 0 (no terminations) must not swamp the gradient penalty."""
    th.manual_seed(0)
    obs_space, act_space = envs.spaces("CustomEnv")
    cfg = DiscConfig(net_arch=[32, 32], disc_lr=3e-3, grad_penalty=10.0, absorbing=True)
    disc = Discriminator(obs_space, act_space, cfg, "cpu", "gail")
    exp, rand = (disc.batch(*x) for x in _data(custom_demos))
    for _ in range(400):
        stats = disc.train_step(exp, rand)
    assert stats["disc/acc_expert"] > 0.65 and stats["disc/acc_gen"] > 0.65 and stats["disc/loss"] < 0.62, stats
    x = disc.inputs(exp)
    assert th.equal(disc.net.mlp.normalize_input(x)[:, -2:], x[:, -2:])  # the flags, untouched


@pytest.mark.parametrize("layout", ["channels_first", "channels_last", "dict"])
def test_random_shift_moves_each_transitions_frames_together_and_leaves_the_rest(layout):
    """`disc.augment_shift`: a transition's frame and next frame move by one offset (at most `pad` pixels
    each way, the edge repeated); offsets differ between transitions; vectors, actions and flags stay."""
    import gymnasium as gym

    from gailkit.algo.discriminator import augment

    n, pad = 64, 2
    frames = np.zeros((n, 1, 12, 12), np.uint8)
    frames[:, 0, 6, 5] = 255  # one bright pixel, away from the edges
    nxt = np.roll(frames, 1, axis=3)  # the next frame: the pixel one column on
    if layout == "channels_last":
        frames, nxt = frames.transpose(0, 2, 3, 1).copy(), nxt.transpose(0, 2, 3, 1).copy()
    space: gym.Space = gym.spaces.Box(0, 255, frames.shape[1:], np.uint8)
    vec = np.random.default_rng(0).normal(size=(n, 3)).astype(np.float32)
    obs, next_obs = frames, nxt
    if layout == "dict":
        space = gym.spaces.Dict({"frame": space, "vec": gym.spaces.Box(-9, 9, (3,), np.float32)})
        obs, next_obs = {"frame": frames, "vec": vec}, {"frame": nxt, "vec": vec}
    cfg = DiscConfig(use_next_state=True, augment_shift=pad)
    disc = Discriminator(space, gym.spaces.Discrete(2), cfg, "cpu", "gail")
    assert disc.image_keys == (["frame"] if layout == "dict" else [None])
    b = disc.batch(obs, np.zeros(n, np.int64), next_obs)
    th.manual_seed(0)
    out = augment.random_shift(b, disc.image_keys, pad)

    def where(x):
        x = x["frame"] if isinstance(x, dict) else x
        x = x if layout != "channels_last" else x.permute(0, 3, 1, 2)
        flat = x[:, 0].reshape(len(x), -1).argmax(dim=1)
        return th.stack([flat // 12, flat % 12], dim=1)

    moved = where(out.obs) - where(b.obs)
    assert th.equal(where(out.next_obs) - where(b.next_obs), moved)  # the same offset for both
    assert moved.abs().max() <= pad and len({tuple(m) for m in moved.tolist()}) > 10
    assert out.obs["frame"].dtype == th.uint8 if layout == "dict" else out.obs.dtype == th.uint8
    if layout == "dict":
        assert th.equal(out.obs["vec"], b.obs["vec"]) and th.equal(out.next_obs["vec"], b.next_obs["vec"])
    assert th.equal(out.acts, b.acts) and th.equal(out.obs_absorbing, b.obs_absorbing)
    assert augment.random_shift(b, disc.image_keys, 0) is b
    # training shifts what it sees; rewards judge the frames as they are, every time alike
    before = disc.reward(b)
    disc.train_step(b, b)
    assert th.equal(disc.reward(b), disc.reward(b)) and not th.equal(disc.reward(b), before)
    vectors = Discriminator(gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Discrete(2), cfg, "cpu", "gail")
    assert vectors.image_keys == []  # nothing to shift
