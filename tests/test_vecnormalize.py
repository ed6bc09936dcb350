"""An SB3 expert trained with VecNormalize: its statistics file beside the .zip is read without running
code and baked into the policy, so gailkit's expert acts as SB3's model on normalized observations."""

from __future__ import annotations

import os
import pickle
import re
import shutil

import numpy as np
import pytest
import torch as th

from gailkit.core.errors import ExpertError
from gailkit.data import experts
from gailkit.data.experts import vecnormalize
from gailkit.model import policy
from tests.conftest import run_cli


@pytest.fixture(scope="module")
def sb3_expert(tmp_path_factory):
    """A PPO trained a little on CartPole under VecNormalize, saved as SB3 and rl-zoo3 save it."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    folder = tmp_path_factory.mktemp("zoo")
    venv = VecNormalize(make_vec_env("CartPole-v1", n_envs=2, seed=0))
    model = PPO("MlpPolicy", venv, n_steps=128, batch_size=64, n_epochs=1, seed=0, policy_kwargs={"net_arch": [16]})
    model.learn(512)
    model.save(folder / "cartpole.zip")
    venv.save(str(folder / "vecnormalize.pkl"))
    return folder, model, venv


def _obs(n=256):
    rng = np.random.default_rng(0)
    return (rng.normal(0, 1, (n, 4)) * [1.0, 2.0, 0.1, 1.5]).astype(np.float32)


def test_the_expert_acts_as_sb3_does_on_normalized_observations(sb3_expert):
    folder, model, venv = sb3_expert
    zip_path = folder / "cartpole.zip"
    obs = _obs()
    theirs = model.policy.get_distribution(model.policy.obs_to_tensor(venv.normalize_obs(obs))[0]).distribution.probs
    pol = policy.read_sb3_zip(zip_path, venv.observation_space, venv.action_space)
    bare = pol.get_distribution(th.as_tensor(obs)).distribution.probs
    assert not th.allclose(bare, theirs, atol=1e-3)  # without the statistics it is another policy
    found = vecnormalize.find(zip_path)
    assert found == folder / "vecnormalize.pkl"
    stats = vecnormalize.read(found, venv.observation_space)
    assert stats is not None and np.allclose(stats.mean, venv.obs_rms.mean) and stats.clip == venv.clip_obs
    vecnormalize.apply(pol, stats)
    ours = pol.get_distribution(th.as_tensor(obs)).distribution.probs
    assert th.allclose(ours, theirs, atol=1e-5)
    act, _, info = experts.load_expert(str(zip_path), "CartPole-v1", deterministic=True)
    assert info["vecnormalize"] == str(found)
    assert [act(o) for o in obs[:32]] == model.predict(venv.normalize_obs(obs[:32]), deterministic=True)[0].tolist()


def test_demos_record_says_which_statistics_it_used(sb3_expert, tmp_path):
    folder, _, _ = sb3_expert
    out = tmp_path / "d.arrow"
    r = run_cli("demos", "record", "--expert", str(folder / "cartpole.zip"), "--env", "CartPole-v1",
                "--episodes", "2", "--out", str(out))  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert f"with the observation statistics of {folder / 'vecnormalize.pkl'} (VecNormalize)" in r.stdout


class _Evil:
    def __reduce__(self):
        return (os.system, ("touch MARKER",))


def test_a_statistics_file_that_names_code_is_refused_and_nothing_runs(sb3_expert, tmp_path, monkeypatch):
    folder, _, venv = sb3_expert
    shutil.copy(folder / "cartpole.zip", tmp_path / "cartpole.zip")
    (tmp_path / "cartpole_vecnormalize.pkl").write_bytes(pickle.dumps({"obs_rms": _Evil()}))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        ExpertError, match=r"cartpole_vecnormalize.pkl: not VecNormalize statistics: it names (posix|os)\.system"
    ):
        experts.load_expert(str(tmp_path / "cartpole.zip"), "CartPole-v1", deterministic=True)
    assert not (tmp_path / "MARKER").exists()


@pytest.mark.parametrize(
    "mutate, says",
    [
        (lambda v: setattr(v.obs_rms, "mean", np.zeros(3)), "observation shape"),
        (lambda v: setattr(v.obs_rms, "var", np.full(4, np.nan)), "NaN"),
        (lambda v: setattr(v, "clip_obs", -1.0), "clip_obs is -1.0"),
    ],
)
def test_statistics_that_do_not_fit_are_named_in_one_line(sb3_expert, tmp_path, mutate, says):
    from stable_baselines3.common.vec_env import VecNormalize

    folder, _, venv = sb3_expert
    bad = VecNormalize.load(str(folder / "vecnormalize.pkl"), venv.venv)  # a copy (the test's own file)
    mutate(bad)
    bad.save(str(tmp_path / "vecnormalize.pkl"))
    with pytest.raises(ExpertError, match=says) as e:
        vecnormalize.read(tmp_path / "vecnormalize.pkl", venv.observation_space)
    assert "\n" not in str(e.value)


def test_an_rl_zoo3_log_folder_is_an_expert_with_its_statistics(sb3_expert, tmp_path):
    """rl-zoo3 writes logs/ppo/CartPole-v1_1/CartPole-v1.zip and CartPole-v1/vecnormalize.pkl: the folder
    alone is the expert (its env from the folder's name); --vecnormalize names a file kept elsewhere."""
    folder, model, venv = sb3_expert
    zoo = tmp_path / "logs" / "ppo" / "CartPole-v1_1"
    (zoo / "CartPole-v1").mkdir(parents=True)
    shutil.copy(folder / "cartpole.zip", zoo / "CartPole-v1.zip")
    shutil.copy(folder / "vecnormalize.pkl", zoo / "CartPole-v1" / "vecnormalize.pkl")
    act, env_id, info = experts.load_expert(str(zoo), None, deterministic=True)
    obs = _obs(32)
    assert env_id == "CartPole-v1" and info["vecnormalize"] == str(zoo / "CartPole-v1" / "vecnormalize.pkl")
    assert [act(o) for o in obs] == model.predict(venv.normalize_obs(obs), deterministic=True)[0].tolist()
    out = tmp_path / "d.arrow"
    r = run_cli("demos", "record", "--expert", str(zoo), "--episodes", "1", "--out", str(out))
    assert r.returncode == 0 and "(VecNormalize)" in r.stdout, r.stderr
    lone = tmp_path / "lone"
    lone.mkdir()
    shutil.copy(folder / "cartpole.zip", lone / "model.zip")
    shutil.copy(folder / "vecnormalize.pkl", tmp_path / "stats.pkl")
    r = run_cli("demos", "record", "--expert", str(lone / "model.zip"), "--env", "CartPole-v1", "--episodes", "1",
                "--vecnormalize", str(tmp_path / "stats.pkl"), "--out", str(tmp_path / "e.arrow"))  # fmt: skip
    assert r.returncode == 0 and "stats.pkl (VecNormalize)" in r.stdout, r.stderr
    (tmp_path / "empty").mkdir()
    r = run_cli("demos", "record", "--expert", str(tmp_path / "empty"), "--episodes", "1", "--out", str(out))
    assert r.returncode == 2 and "rl-zoo3" in r.stderr and r.stderr.count("\n") == 1, r.stderr


@pytest.mark.parametrize("algo", ["ppo", "sac"])
def test_a_multi_input_expert_with_vecnormalize_of_some_dict_entries_acts_as_sb3_does(tmp_path, algo):
    """VecNormalize over a Dict observation keeps one RunningMeanStd per entry of `norm_obs_keys` and passes
    the others through; the statistics go in front of those entries' flattening in MultiInputPolicy's
    extractors (SAC's actor and critics each have one), and the expert acts as SB3's model on `normalize_obs`."""
    import stable_baselines3 as sb3
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    from tests.space_envs import DictBoxAct

    class Spread(DictBoxAct):  # "pos" far from unit scale, so statistics matter
        def _obs(self):
            obs = super()._obs()
            return {**obs, "pos": obs["pos"] * 50 + 20}

    venv = VecNormalize(DummyVecEnv([Spread]), norm_obs_keys=["pos"], norm_reward=False)
    cls, kwargs = (sb3.PPO, {"n_steps": 64, "batch_size": 32}) if algo == "ppo" else (sb3.SAC, {"learning_starts": 16})
    model = cls("MultiInputPolicy", venv, policy_kwargs={"net_arch": [16]}, seed=0, **kwargs)
    model.learn(128)
    model.save(tmp_path / "expert.zip")
    venv.save(str(tmp_path / "vecnormalize.pkl"))
    stats = vecnormalize.read(tmp_path / "vecnormalize.pkl", venv.observation_space)
    assert (
        isinstance(stats, dict) and list(stats) == ["pos"] and np.allclose(stats["pos"].mean, venv.obs_rms["pos"].mean)
    )
    pol = policy.read_sb3_zip(tmp_path / "expert.zip", venv.observation_space, venv.action_space)
    vecnormalize.apply(pol, stats)
    rng = np.random.default_rng(0)
    obs = {"pos": rng.uniform(-30, 70, (32, 2)).astype(np.float32), "mode": rng.integers(0, 2, 32)}
    theirs, _ = model.predict(venv.normalize_obs(obs), deterministic=True)
    ours, _ = pol.predict(obs, deterministic=True)
    bare, _ = policy.read_sb3_zip(tmp_path / "expert.zip", venv.observation_space, venv.action_space).predict(
        obs, deterministic=True
    )
    assert np.allclose(ours, theirs, atol=1e-5) and not np.allclose(bare, theirs, atol=1e-3)


@pytest.mark.parametrize(
    "mutate, says",
    [
        (lambda vn: vn.obs_rms.update(extra=vn.obs_rms["pos"]), "its statistics name the entry 'extra', which the env's observations lack"),
        (lambda vn: setattr(vn.obs_rms["pos"], "mean", np.zeros(5)), "entry 'pos': its statistics are not arrays of the env's "
                                                                      "observation shape (2,)"),
    ],
)  # fmt: skip
def test_dict_statistics_that_do_not_fit_are_named_in_one_line(tmp_path, mutate, says):
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    from tests.space_envs import DictBoxAct

    venv = VecNormalize(DummyVecEnv([DictBoxAct]), norm_obs_keys=["pos"])
    mutate(venv)
    venv.save(str(tmp_path / "vecnormalize.pkl"))
    with pytest.raises(ExpertError, match=re.escape(says)) as e:
        vecnormalize.read(tmp_path / "vecnormalize.pkl", venv.observation_space)
    assert "\n" not in str(e.value) and str(e.value).startswith(str(tmp_path / "vecnormalize.pkl"))
