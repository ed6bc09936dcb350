"""PPO fed from a fragment must equal SB3's own PPO update on the same rollout."""

import numpy as np
import torch as th
from stable_baselines3 import PPO

from gailkit import envs, policy
from gailkit.config import PPOConfig
from gailkit.fragments import Fragment
from gailkit.generator import Generator

CFG = PPOConfig(n_steps=64, batch_size=32, n_epochs=2, net_arch=[16], learning_rate=1e-3)


def test_update_from_fragment_matches_sb3():
    venv = envs.make_vec_env("CartPole-v1", n_envs=2, seed=0)
    gen = Generator(venv.observation_space, venv.action_space, CFG, normalize_obs=True, n_envs=2, device="cpu", seed=0)
    policy.normalizer(gen.policy).update(th.randn(100, 4))  # non-trivial normalizer statistics
    ref = PPO("MlpPolicy", venv, n_steps=CFG.n_steps, batch_size=CFG.batch_size, n_epochs=CFG.n_epochs,
              learning_rate=CFG.learning_rate, gamma=CFG.gamma, gae_lambda=CFG.gae_lambda,
              policy_kwargs=policy.policy_kwargs(CFG, True), seed=0, device="cpu")
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
    frag = Fragment(obs=buf.observations.copy(), acts=buf.actions[..., 0].astype(np.int64), next_obs=next_obs,
                    terminated=dones, truncated=np.zeros_like(dones), log_probs=buf.log_probs.copy(),
                    rews=buf.rewards.copy(), first_starts=starts[0], episode_returns=np.zeros(0),
                    episode_lengths=np.zeros(0, np.int64), actor_id=0, policy_version=0)
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
    changed = any(not th.equal(a, b) for a, b in zip(ref.policy.parameters(), policy.build(
        venv.observation_space, venv.action_space, CFG, True).parameters()))
    assert changed


def test_truncation_bootstraps_from_final_value():
    venv = envs.make_vec_env("CartPole-v1", n_envs=1, seed=0)
    cfg = PPOConfig(n_steps=4, batch_size=4, n_epochs=1, net_arch=[8], gamma=0.5, gae_lambda=1.0)
    gen = Generator(venv.observation_space, venv.action_space, cfg, normalize_obs=False, n_envs=1, device="cpu", seed=0)
    obs = np.random.default_rng(0).normal(size=(4, 1, 4)).astype(np.float32)
    nxt = np.random.default_rng(1).normal(size=(4, 1, 4)).astype(np.float32)
    trunc = np.array([[False], [True], [False], [False]])
    frag = Fragment(obs=obs, acts=np.zeros((4, 1), np.int64), next_obs=nxt, terminated=np.zeros((4, 1), bool),
                    truncated=trunc, log_probs=np.zeros((4, 1), np.float32), rews=np.zeros((4, 1), np.float32),
                    first_starts=np.ones(1, bool), episode_returns=np.zeros(0), episode_lengths=np.zeros(0, np.int64),
                    actor_id=0, policy_version=0)
    v_final = float(gen.values(nxt[1]).item())
    rewards = np.ones((4, 1), np.float32)
    gen.update(frag, rewards, 1.0)
    assert np.isclose(gen.ppo.rollout_buffer.rewards[1, 0], 1.0 + 0.5 * v_final, atol=1e-6)
    assert gen.ppo.rollout_buffer.rewards[0, 0] == 1.0
