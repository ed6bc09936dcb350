"""PPO fed from a fragment must equal SB3's own PPO update on the same rollout."""

import dataclasses
import subprocess
import sys

import numpy as np
import pytest
import torch as th
from stable_baselines3 import PPO

from gailkit.algo.generator.ppo import PPOGenerator as Generator
from gailkit.config import PolicyConfig, PPOConfig
from gailkit.core.fragments import Fragment
from gailkit.data import experts
from gailkit.model import policy
from tests.conftest import small_generator

CFG = PPOConfig(n_steps=64, batch_size=32, n_epochs=2, learning_rate=1e-3)
NET = PolicyConfig(net_arch=[16])


def _spaces(venv):
    return venv.observation_space, venv.action_space


def test_update_from_fragment_matches_sb3():
    venv = experts.make_vec_env("CartPole-v1", n_envs=2, seed=0)
    gen = Generator(
        venv.observation_space, venv.action_space, CFG, NET, normalize_obs=True, n_envs=2, device="cpu", seed=0
    )
    policy.normalizer(gen.policy).update(th.randn(100, 4))  # non-trivial normalizer statistics
    before = {k: v.clone() for k, v in gen.policy.state_dict().items()}
    ref = PPO(
        "MlpPolicy",
        venv,
        n_steps=CFG.n_steps,
        batch_size=CFG.batch_size,
        n_epochs=CFG.n_epochs,
        learning_rate=CFG.learning_rate,
        gamma=CFG.gamma,
        gae_lambda=CFG.gae_lambda,
        policy_kwargs=policy.policy_kwargs(NET, True, venv.observation_space),
        seed=0,
        device="cpu",
    )
    ref.policy.load_state_dict(gen.policy.state_dict())

    # SB3 collects its own rollout (env rewards) ...
    _, callback = ref._setup_learn(total_timesteps=CFG.n_steps * 2, callback=None)
    ref.collect_rollouts(ref.env, callback, ref.rollout_buffer, n_rollout_steps=CFG.n_steps)
    buf = ref.rollout_buffer
    starts = buf.episode_starts.astype(bool)
    dones = np.concatenate([starts[1:], ref._last_episode_starts[None].astype(bool)])
    next_obs = np.concatenate([buf.observations[1:], ref._last_obs[None]])
    assert dones.any()  # the rollout crosses episode ends
    # ... and the same rollout goes to the generator as a fragment.
    frag = Fragment(
        obs=buf.observations.copy(),
        acts=buf.actions[..., 0].astype(np.int64),
        next_obs=next_obs,
        terminated=dones,
        truncated=np.zeros_like(dones),
        log_probs=buf.log_probs.copy(),
        rews=buf.rewards.copy(),
        first_starts=starts[0],
        episode_returns=np.zeros(0),
        episode_lengths=np.zeros(0, np.int64),
        actor_id=0,
        policy_version=0,
    )
    rewards = buf.rewards.copy()

    np.random.seed(7)
    th.manual_seed(7)
    ref.train()
    np.random.seed(7)
    th.manual_seed(7)
    gen.update(frag, rewards, progress_remaining=1.0)

    assert np.allclose(buf.advantages, gen.ppo.rollout_buffer.advantages, atol=1e-5)
    for (name, a), b in zip(ref.policy.state_dict().items(), gen.policy.state_dict().values()):
        assert th.allclose(a, b, atol=1e-5), name
    moved = [k for k, v in gen.policy.state_dict().items() if not th.equal(before[k], v)]
    assert "action_net.weight" in moved and "value_net.weight" in moved  # the update did train both heads


def _fragment(obs, acts, next_obs, truncated=None, log_prob=-0.69, terminated=None) -> Fragment:
    """A fragment of (T, E, ...) arrays, no env reward recorded; nothing terminated unless `terminated` (T, E) says,
    each termination a finished episode of length 1 and return 0."""
    t, e = obs.shape[:2]
    terminated = np.zeros((t, e), bool) if terminated is None else terminated
    ends = int(terminated.sum())
    return Fragment(
        obs=obs,
        acts=acts,
        next_obs=next_obs,
        terminated=terminated,
        truncated=np.zeros((t, e), bool) if truncated is None else truncated,
        log_probs=np.full((t, e), log_prob, np.float32),
        rews=np.zeros((t, e), np.float32),
        first_starts=np.ones(e, bool),
        episode_returns=np.zeros(ends),
        episode_lengths=np.ones(ends, np.int64),
        actor_id=0,
        policy_version=0,
    )


def test_truncation_bootstraps_from_final_value():
    venv = experts.make_vec_env("CartPole-v1", n_envs=1, seed=0)
    cfg = PPOConfig(n_steps=4, batch_size=4, n_epochs=1, gamma=0.5, gae_lambda=1.0)
    gen = small_generator(venv.observation_space, venv.action_space, cfg)
    obs = np.random.default_rng(0).normal(size=(4, 1, 4)).astype(np.float32)
    nxt = np.random.default_rng(1).normal(size=(4, 1, 4)).astype(np.float32)
    trunc = np.array([[False], [True], [False], [False]])
    frag = _fragment(obs, np.zeros((4, 1), np.int64), nxt, truncated=trunc, log_prob=0.0)
    v_final = float(gen.values(nxt[1]).item())
    rewards = np.ones((4, 1), np.float32)
    gen.update(frag, rewards, 1.0)
    assert np.isclose(gen.ppo.rollout_buffer.rewards[1, 0], 1.0 + 0.5 * v_final, atol=1e-6)
    assert gen.ppo.rollout_buffer.rewards[0, 0] == 1.0


def _two_env_fragment(rng, t, ends):
    """Random CartPole-shaped observations and actions of 2 envs and `t` steps, terminating where `ends` (T, 2) says."""
    obs, acts = rng.normal(size=(t, 2, 4)).astype(np.float32), rng.integers(0, 2, (t, 2))
    return _fragment(obs, acts, rng.normal(size=(t, 2, 4)).astype(np.float32), terminated=ends)


def test_rewards_reach_ppo_scaled_by_the_running_spread_of_their_discounted_sums_as_sb3s_vecnormalize_does():
    """`ppo.reward_scale: returns`: the statistics are VecNormalize's (its own `RunningMeanStd` updated from the same
    discounted sums, reset at episode ends), a round's rewards and its absorbing value are divided by
    sqrt(var + 1e-8) and clipped to +-10, the bootstraps stay in the critic's units, and `none` leaves them as given."""
    from stable_baselines3.common.running_mean_std import RunningMeanStd

    venv = experts.make_vec_env("CartPole-v1", n_envs=2, seed=0)
    t, gamma = 8, 0.9
    cfg = PPOConfig(n_steps=t, batch_size=16, n_epochs=1, gamma=gamma, gae_lambda=1.0, reward_scale="returns")
    gen = small_generator(venv.observation_space, venv.action_space, cfg, n_envs=2)
    raw = small_generator(
        venv.observation_space, venv.action_space, dataclasses.replace(cfg, reward_scale="none"), n_envs=2
    )
    rng = np.random.default_rng(0)
    ref, returns = RunningMeanStd(shape=()), np.zeros(2)  # what VecNormalize keeps for norm_reward
    for k in range(3):
        ends = np.zeros((t, 2), bool)
        ends[3 + k, 0] = ends[5, 1] = True
        frag = _two_env_fragment(rng, t, ends)
        rewards = rng.normal(0.4 + k, 0.3, (t, 2)).astype(np.float32)
        if k == 2:  # a long history of a narrow spread: these rewards scale past 10 and are clipped
            for rms in (ref, gen.reward_scale.rms):
                rms.var, rms.count = np.float64(1e-4), 1e6
        for r, done in zip(rewards, ends):
            returns = returns * gamma + r
            ref.update(returns)
            returns[done] = 0.0
        scale = 1 / np.sqrt(ref.var + 1e-8)
        stats = gen.update(frag, rewards, 1.0, terminal_value=2.0)
        buf = gen.ppo.rollout_buffer.rewards
        want = np.clip(rewards * scale, -10, 10)
        want[ends] += gamma * 2.0 * scale  # the absorbing state's value, in the same units
        assert np.isclose(stats["train/reward_scale"], scale, rtol=1e-6)
        assert np.allclose(buf, want, rtol=1e-5, atol=1e-6), k
        assert scale != 1.0 and (k < 2 or (buf == 10.0).mean() > 0.5)
        raw.update(frag, rewards, 1.0, terminal_value=2.0)
        unscaled = rewards.copy()
        unscaled[ends] += gamma * 2.0
        assert np.allclose(raw.ppo.rollout_buffer.rewards, unscaled, atol=1e-6)
    assert np.isclose(gen.reward_scale.rms.var, ref.var) and np.allclose(gen.reward_scale.returns, returns)


def test_the_reward_scale_resumes_exactly_and_is_off_unless_asked_for():
    """A checkpointed reward scale (each env's discounted sum, the running statistics) resumes where it was: the next
    round's rewards scale the same; one of another number of envs is refused. The default leaves rewards raw."""
    venv = experts.make_vec_env("CartPole-v1", n_envs=2, seed=0)
    cfg = PPOConfig(n_steps=8, batch_size=16, n_epochs=1, reward_scale="returns")
    first = small_generator(venv.observation_space, venv.action_space, cfg, n_envs=2)
    rng = np.random.default_rng(1)
    frags = [_two_env_fragment(rng, 8, rng.random((8, 2)) < 0.1) for _ in range(2)]
    rewards = [rng.normal(1.0, 0.5, (8, 2)).astype(np.float32) for _ in range(2)]
    first.update(frags[0], rewards[0], 1.0)
    state = first.state_dict()
    resumed = small_generator(venv.observation_space, venv.action_space, cfg, n_envs=2)
    resumed.load_state_dict(state)
    a, b = first.update(frags[1], rewards[1], 1.0), resumed.update(frags[1], rewards[1], 1.0)
    assert a["train/reward_scale"] == b["train/reward_scale"] != 1.0
    assert np.array_equal(first.ppo.rollout_buffer.rewards, resumed.ppo.rollout_buffer.rewards)
    other = small_generator(venv.observation_space, venv.action_space, cfg, n_envs=3)
    with pytest.raises(ValueError, match="for 2 envs, the run has 3"):
        other.load_state_dict(state)
    for bad in ({"var": float("nan")}, {"var": -1.0}, {"count": 0.0}, {"returns": th.tensor([1.0, float("inf")])}):
        with pytest.raises(ValueError, match="non-finite or negative"):  # a tampered checkpoint: skipped, one line
            resumed.load_state_dict({**state, "reward_scale": {**state["reward_scale"], **bad}})
    assert resumed.reward_scale.rms.var == first.reward_scale.rms.var  # what a refused state left unchanged
    plain = small_generator(venv.observation_space, venv.action_space, PPOConfig(n_steps=8, batch_size=16), n_envs=2)
    assert PPOConfig().reward_scale == "none" and plain.reward_scale is None
    assert plain.state_dict()["reward_scale"] is None and "train/reward_scale" not in plain.update(
        frags[0], rewards[0], 1.0
    )
    assert np.array_equal(plain.ppo.rollout_buffer.rewards, rewards[0])


def test_value_only_update_leaves_the_actor_alone():
    venv = experts.make_vec_env("CartPole-v1", n_envs=1, seed=0)
    cfg = PPOConfig(n_steps=16, batch_size=16, n_epochs=2)
    gen = small_generator(venv.observation_space, venv.action_space, cfg)
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(16, 1, 4)).astype(np.float32)
    acts = rng.integers(0, 2, (16, 1))
    frag = _fragment(obs, acts, rng.normal(size=(16, 1, 4)).astype(np.float32))
    before = {k: v.clone() for k, v in gen.policy.state_dict().items()}
    gen.update(frag, rng.normal(size=(16, 1)).astype(np.float32), 1.0, train_policy=False)
    after = gen.policy.state_dict()
    actor = [k for k in before if k.startswith(("mlp_extractor.policy_net", "action_net"))]
    assert actor and all(th.equal(before[k], after[k]) for k in actor)
    assert not th.equal(before["value_net.weight"], after["value_net.weight"])
    assert all(p.requires_grad for p in gen.policy.parameters())


def test_behaviour_cloning_fits_the_expert_actions(custom_demos):
    import gymnasium as gym

    space = gym.spaces.Box(-1, 1, (2,), np.float32)
    gen = Generator(
        space, space, PPOConfig(), PolicyConfig(net_arch=[32, 32]), normalize_obs=True, n_envs=1, device="cpu", seed=0
    )
    policy.normalizer(gen.policy).update(th.as_tensor(np.array(custom_demos.obs)))
    obs = np.array(custom_demos.obs)
    error = lambda: float(np.abs(policy.act(gen.policy, obs, deterministic=True)[0] - custom_demos.acts).mean())  # noqa: E731
    untrained = error()
    stats = gen.behaviour_clone(
        obs, custom_demos.acts, epochs=300, batch_size=64, lr=3e-3, rng=np.random.default_rng(0), log_std=-1.5
    )
    assert stats["bc/loss_last"] < stats["bc/loss_first"] / 10
    assert error() < untrained / 4
    assert th.allclose(gen.policy.log_std, th.full((2,), -1.5))


def test_the_learner_reaches_its_generator_only_through_the_seam(tmp_path, monkeypatch):
    """`generator.make` builds what `GENERATORS` names; a stand-in registered there gets every round's
    fragment with the discriminator's rewards (not the env's), and the BC warm start."""
    from gailkit.algo import generator as gen_mod
    from gailkit.algo.generator.ppo import PPOGenerator
    from gailkit.run import train

    calls: list[tuple] = []

    class Recording(PPOGenerator):
        def update(self, frag, rewards, *args, **kwargs):
            calls.append(
                ("update", frag.n_steps, frag.n_envs, np.asarray(rewards).shape, bool(np.allclose(rewards, frag.rews)))
            )
            return super().update(frag, rewards, *args, **kwargs)

        def behaviour_clone(self, *args, **kwargs):
            calls.append(("bc",))
            return super().behaviour_clone(*args, **kwargs)

    import sys

    monkeypatch.setattr(sys.modules[__name__], "Recording", Recording, raising=False)
    monkeypatch.setitem(gen_mod.GENERATORS, "ppo", f"{__name__}:Recording")
    cfg = train.train_config("CustomEnv", "data/customenv.arrow", None, ["total_steps=192"], "tiny")
    summary = train.train(cfg, tmp_path / "run", quiet=True, log=lambda m: None)
    assert calls[0] == ("bc",)
    updates = [c for c in calls if c[0] == "update"]
    assert len(updates) == summary["rounds"] == 3
    assert all(c[1:4] == (32, 2, (32, 2)) and not c[4] for c in updates)  # the discriminator's rewards


def test_a_fragment_decoded_from_the_wire_updates_ppo_without_torchs_read_only_warning():
    """Fragments from actor processes hold read-only views of their message; torch warns (once a process)
    when such an array is wrapped, which SB3 does without a copy for channels-first frames (a stack). The
    check runs in a fresh process, on the learner's real path."""
    code = """
import gymnasium as gym
import numpy as np
from gailkit.algo.generator.ppo import PPOGenerator
from gailkit.config import PolicyConfig, PPOConfig
from gailkit.core.fragments import Fragment
from gailkit.rollout import wire

obs_space, act_space = gym.spaces.Box(0, 255, (4, 12, 12), np.uint8), gym.spaces.Discrete(2)
t, e = 16, 2
rng = np.random.default_rng(0)
f = Fragment(
    obs=rng.integers(0, 256, (t, e, 4, 12, 12), np.uint8), acts=rng.integers(0, 2, (t, e)),
    next_obs=rng.integers(0, 256, (t, e, 4, 12, 12), np.uint8), terminated=np.zeros((t, e), bool),
    truncated=np.zeros((t, e), bool), log_probs=np.full((t, e), -0.69, np.float32), rews=np.zeros((t, e), np.float32),
    first_starts=np.zeros(e, bool), episode_returns=np.zeros(0, np.float32), episode_lengths=np.zeros(0, np.int64),
    actor_id=0, policy_version=0,
)
frag = wire.decode_fragment(wire.encode_fragment(f), 0, 0)
assert not frag.obs.flags.writeable, "the wire's arrays are no longer read-only: this test checks nothing"
gen = PPOGenerator(obs_space, act_space, PPOConfig(n_steps=t, batch_size=16, n_epochs=1), PolicyConfig(net_arch=[8]),
                   False, e, "cpu", 0)
stats = gen.update(frag, np.ones((t, e), np.float32), 1.0)
assert np.isfinite(stats["train/value_loss"])
print("updated")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "updated" in r.stdout, r.stderr
    assert "not writable" not in r.stderr, r.stderr


def test_behaviour_cloning_fits_a_cnn_encoder_and_critic_only_rounds_leave_it_as_cloned():
    """On frames BC trains the CNN with the actor's head (a head on the CNN's random features cloned Pong's
    scripted expert no better than random); a critic-only update then leaves every actor parameter as BC
    left it, the CNN the critic shares included."""
    from tests.space_envs import ImageObs

    rng = np.random.default_rng(0)
    cols = rng.integers(0, 12, 256)
    obs = np.zeros((256, 12, 12, 3), np.uint8)
    obs[np.arange(256), :, cols] = 255  # one bright column; the expert's action: is it in the left half
    target = (cols < 6).astype(np.int64)
    gen = small_generator(ImageObs.observation_space, ImageObs.action_space, PPOConfig(n_steps=16, batch_size=16))
    cnn = {k: v.clone() for k, v in gen.policy.pi_features_extractor.state_dict().items()}
    gen.behaviour_clone(obs, target, 30, 64, 1e-3, rng)
    trained = gen.policy.pi_features_extractor.state_dict()
    assert any(v.is_floating_point() and not th.equal(v, trained[k]) for k, v in cnn.items())
    acts, _ = policy.act(gen.policy, obs, deterministic=True)
    assert (acts == target).mean() > 0.95
    frag = _fragment(obs[:16, None], target[:16, None], obs[16:32, None])
    before = {k: v.clone() for k, v in gen.policy.state_dict().items()}
    gen.update(frag, rng.normal(size=(16, 1)).astype(np.float32), 1.0, train_policy=False)
    after = gen.policy.state_dict()
    actor = [k for k in before if k.startswith(("pi_features_extractor", "mlp_extractor.policy_net", "action_net"))]
    assert any(k.startswith("pi_features_extractor") for k in actor)
    assert all(th.equal(before[k], after[k]) for k in actor)
    assert not th.equal(before["value_net.weight"], after["value_net.weight"])


@pytest.mark.parametrize("dict_obs", [False, True], ids=["frames", "dict"])
def test_behaviour_cloning_learns_where_a_small_ball_is_from_pong_like_frames_with_the_default_network(dict_obs):
    """Gray 40x40 frames, a 2-pixel ball and a paddle; the expert moves the paddle toward the ball. With
    two tanh layers after the CNN (the old default) BC kept predicting the action counts on such frames,
    as it did on Pong's demos, alone or as a Dict's entry; with the heads on the CNN's features (SB3's
    CnnPolicy) it learns them."""
    import gymnasium as gym

    size, n = 40, 1024
    rng = np.random.default_rng(0)
    ball_y, ball_x, paddle_y = rng.integers(2, size - 4, n), rng.integers(4, size - 8, n), rng.integers(2, size - 10, n)
    obs = np.full((n, 4, size, size), 87, np.uint8)
    for i in range(n):
        obs[i, :, ball_y[i] : ball_y[i] + 2, ball_x[i]] = 236
        obs[i, :, paddle_y[i] : paddle_y[i] + 8, size - 4 : size - 2] = 147
    gap = ball_y - (paddle_y + 3)
    target = np.where(gap < -2, 1, np.where(gap > 2, 2, 0))
    space: gym.Space = gym.spaces.Box(0, 255, (4, size, size), np.uint8)
    if dict_obs:
        space = gym.spaces.Dict({"frame": space, "vec": gym.spaces.Box(-1, 1, (2,), np.float32)})
        obs = {"frame": obs, "vec": rng.uniform(-1, 1, (n, 2)).astype(np.float32)}
    th.manual_seed(0)
    gen = Generator(
        space, gym.spaces.Discrete(3), PPOConfig(n_steps=16, batch_size=16), PolicyConfig(), True, 1, "cpu", 0
    )
    assert len(gen.policy.mlp_extractor.policy_net) == 0  # the heads read the CNN's features
    gen.behaviour_clone(obs, target, 120, 64, 1e-3, rng)
    acts, _ = policy.act(gen.policy, obs, deterministic=True)
    prior = np.bincount(target).max() / n
    assert (acts == target).mean() > prior + 0.25
