"""SB3 experts of every algorithm SB3 ships, read without unpickling: each plays as SB3's `predict` does."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

from gailkit.core.errors import ExpertError
from gailkit.data import experts
from tests.conftest import run_cli

ALGOS = {"SAC": "Pendulum-v1", "TD3": "Pendulum-v1", "DQN": "CartPole-v1", "A2C": "CartPole-v1"}


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    """A few steps of each algorithm (enough to move its weights), saved as SB3 saves them."""
    import stable_baselines3 as sb3

    folder = tmp_path_factory.mktemp("zoo")
    models = {}
    for algo, env in ALGOS.items():
        extra = {} if algo == "A2C" else {"learning_starts": 16}
        model = getattr(sb3, algo)("MlpPolicy", env, policy_kwargs={"net_arch": [16, 16]}, seed=0, **extra)
        model.learn(64)
        model.save(folder / f"{algo.lower()}.zip")
        models[algo] = model
    return folder, models


@pytest.mark.parametrize("algo", list(ALGOS))
def test_each_algorithm_plays_as_sb3_predicts(zoo, algo):
    folder, models = zoo
    model = models[algo]
    act, env_id, _ = experts.load_expert(str(folder / f"{algo.lower()}.zip"), ALGOS[algo], deterministic=True)
    obs = np.stack([model.observation_space.sample() for _ in range(16)])
    ours = np.stack([np.asarray(act(o)) for o in obs])
    theirs, _ = model.predict(obs, deterministic=True)
    assert env_id == ALGOS[algo] and np.allclose(ours.reshape(theirs.shape), theirs, atol=1e-6)


def test_demos_record_from_an_off_policy_zip(zoo, tmp_path):
    folder, _ = zoo
    out = tmp_path / "sac.arrow"
    r = run_cli("demos", "record", "--expert", str(folder / "sac.zip"), "--env", "Pendulum-v1",
                "--episodes", "1", "--out", str(out))  # fmt: skip
    assert r.returncode == 0 and out.is_file(), r.stderr


def test_a_zip_for_an_env_whose_discrete_space_does_not_start_at_0_is_refused_in_one_line(zoo, tmp_path):
    """SB3 counts Discrete values from 0 whatever the space's start (its env checker says so): what its
    policy's index meant to such an env cannot be known, so nothing is recorded."""
    folder, _ = zoo
    out = tmp_path / "d.arrow"
    r = run_cli("demos", "record", "--expert", str(folder / "dqn.zip"), "--env", "tests/space_envs.py:ShiftedDiscrete",
                "--episodes", "1", "--out", str(out))  # fmt: skip
    assert r.returncode == 2 and "dqn.zip" in r.stderr and "does not start at 0" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not out.exists()


def test_a_zip_naming_a_policy_gailkit_does_not_rebuild_is_one_line(zoo, tmp_path):
    folder, _ = zoo
    src, bad = folder / "sac.zip", tmp_path / "bad.zip"
    with zipfile.ZipFile(src) as z, zipfile.ZipFile(bad, "w") as w:
        for item in z.infolist():
            data = z.read(item.filename)
            if item.filename == "data":
                d = json.loads(data)
                d["policy_class"] = {"__module__": "os", "__init__": "<function system.__init__ at 0x0>"}
                data = json.dumps(d).encode()
            w.writestr(item, data)
    with pytest.raises(ExpertError, match=r"bad.zip: its policy os.system is not one gailkit rebuilds") as e:
        experts.load_expert(str(bad), "Pendulum-v1", deterministic=True)
    assert "\n" not in str(e.value)


def test_an_off_policy_expert_with_vecnormalize_gets_its_statistics(tmp_path):
    from stable_baselines3 import SAC
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    venv = VecNormalize(make_vec_env("Pendulum-v1", n_envs=1, seed=0))
    model = SAC("MlpPolicy", venv, policy_kwargs={"net_arch": [16]}, learning_starts=16, seed=0)
    model.learn(64)
    model.save(tmp_path / "sac.zip")
    venv.save(str(tmp_path / "sac_vecnormalize.pkl"))
    act, _, info = experts.load_expert(str(tmp_path / "sac.zip"), "Pendulum-v1", deterministic=True)
    obs = np.stack([venv.observation_space.sample() for _ in range(16)])
    theirs, _ = model.predict(venv.normalize_obs(obs), deterministic=True)
    assert info["vecnormalize"].endswith("sac_vecnormalize.pkl")
    assert np.allclose(np.stack([act(o) for o in obs]), theirs, atol=1e-5)


def test_a_cnn_policy_trained_on_transposed_frames_plays_the_env_s_own_frames(tmp_path):
    """SB3 trains a CnnPolicy on channels-first frames (VecTransposeImage); the env gives channels last."""
    from stable_baselines3 import PPO

    from tests.space_envs import BigImageObs

    model = PPO("CnnPolicy", BigImageObs(), n_steps=32, batch_size=32, n_epochs=1, seed=0)
    model.learn(32)
    model.save(tmp_path / "cnn.zip")
    act, _, _ = experts.load_expert(str(tmp_path / "cnn.zip"), "tests/space_envs.py:BigImageObs", deterministic=True)
    obs = np.stack([BigImageObs.observation_space.sample() for _ in range(8)])
    theirs, _ = model.predict(obs, deterministic=True)
    assert [int(act(o)) for o in obs] == theirs.tolist()


@pytest.mark.parametrize(
    "algo, name", [("PPO", "BigDictObs"), ("DQN", "BigDictObs"), ("SAC", "DictBoxAct"), ("TD3", "DictBoxAct")]
)
def test_a_multi_input_policy_on_dict_observations_plays_and_records_as_sb3_does(tmp_path, algo, name):
    """SB3's MultiInputPolicy of each algorithm (CombinedExtractor, a frame entry transposed channels first) is
    rebuilt without unpickling, acts as SB3's own `predict` does, and records Dict demos."""
    import stable_baselines3

    from gailkit.data import demos
    from tests import space_envs
    from tests.conftest import run_cli

    env, cls = f"tests/space_envs.py:{name}", getattr(space_envs, name)
    extra = (
        {"n_steps": 32, "batch_size": 32, "n_epochs": 1} if algo == "PPO" else {"learning_starts": 0, "buffer_size": 64}
    )
    model = getattr(stable_baselines3, algo)("MultiInputPolicy", cls(), seed=0, **extra)
    model.learn(32)
    model.save(tmp_path / "multi.zip")
    act, _, _ = experts.load_expert(str(tmp_path / "multi.zip"), env, deterministic=True)
    space = cls.observation_space
    space.seed(0)
    obs = [space.sample() for _ in range(8)]
    theirs = np.array([model.predict(o, deterministic=True)[0] for o in obs])
    assert np.allclose(np.array([act(o) for o in obs]), theirs, atol=1e-5)
    out = tmp_path / "multi.arrow"
    r = run_cli("demos", "record", "--expert", str(tmp_path / "multi.zip"), "--env", env, "--episodes", "2",
                "--out", str(out))  # fmt: skip
    assert r.returncode == 0, r.stderr
    d = demos.load_file(out)
    assert set(d.obs) == set(space.spaces) and len(d) == 32 and d.meta.expert_return is not None


@pytest.mark.parametrize(
    "algo, name, kind",
    [
        ("ppo", "DictMixedObs", "DictEncoder"),  # gailkit's PPO: its own encoders, in the zip
        ("ppo", "ImageObs", "ImageCNN"),
        ("td3", "DictMixedObs", "DictEncoder"),  # an 8x8 frame in a Dict: SB3's NatureCNN cannot take it
        ("dqn", "BigImageObs", "CnnPolicy"),  # SB3's own, for 40x40 frames
    ],
)
def test_an_expert_gailkit_trains_on_frames_or_dicts_records_demos(tmp_path, algo, name, kind):
    """`gailkit expert train` picks the policy the observations need (MultiInputPolicy, CnnPolicy) and the zip it
    saves is one `demos record` rebuilds, acting as the model that trained (its SB3 `predict`)."""
    import stable_baselines3

    from gailkit import config
    from gailkit.config import ExpertConfig
    from gailkit.data import demos
    from tests import space_envs

    env, out = f"tests/space_envs.py:{name}", tmp_path / "e.zip"
    sizes = ["total_timesteps=64", "n_envs=1", "eval_episodes=1"]
    sizes += ["ppo.n_steps=32", "ppo.batch_size=32", "ppo.n_epochs=1"] if algo == "ppo" else []
    cfg = config.build(ExpertConfig, overrides=[f"env.id={env}", f"algo={algo}", *sizes])
    experts.train_expert(cfg, out, log=lambda s: None)
    with zipfile.ZipFile(out) as z:
        assert kind in z.read("data").decode()
    act, _, _ = experts.load_expert(str(out), env, deterministic=True)
    model = getattr(stable_baselines3, algo.upper()).load(out, device="cpu")  # our own file: SB3 may unpickle it
    space = getattr(space_envs, name).observation_space
    space.seed(1)
    obs = [space.sample() for _ in range(6)]
    theirs = np.array([model.predict(o, deterministic=True)[0] for o in obs])
    assert np.allclose(np.array([act(o) for o in obs]).reshape(theirs.shape), theirs, atol=1e-5)
    d = experts.record(act, env, episodes=1, seed=0, source=str(out))
    assert len(d) == 16 and demos.space_from_json(d.meta.observation_space) is not None


@pytest.mark.parametrize(
    "kwargs",
    [{"normalize": "yes"}, {"features_dim": 10**9}, {"kind": "os.system"}, {"evil": 1}, {"kind": "cnn"}],
)
def test_a_zip_naming_gailkit_encoders_with_arguments_out_of_bounds_is_one_line(tmp_path, kwargs):
    from gailkit import config
    from gailkit.config import ExpertConfig

    src, bad = tmp_path / "e.zip", tmp_path / "bad.zip"
    overrides = ["env.id=CartPole-v1", "total_timesteps=32", "n_envs=1", "eval_episodes=1", "ppo.n_steps=32"]
    experts.train_expert(config.build(ExpertConfig, overrides=[*overrides, "ppo.batch_size=32"]), src, log=print)
    with zipfile.ZipFile(src) as z, zipfile.ZipFile(bad, "w") as w:
        for item in z.infolist():
            data = z.read(item.filename)
            if item.filename == "data":
                d = json.loads(data)
                name = {"features_dim": "ImageCNN", "kind": "DictEncoder"}.get(next(iter(kwargs)), "NormalizedFlatten")
                d["policy_kwargs"]["features_extractor_class"] = f"<class 'gailkit.model.encoders.{name}'>"
                d["policy_kwargs"]["features_extractor_kwargs"] = kwargs
                data = json.dumps(d).encode()
            w.writestr(item, data)
    says = "its weights do not fit the network" if kwargs == {"kind": "cnn"} else "features_extractor_kwargs"
    with pytest.raises(ExpertError, match=rf"bad.zip: {says}") as e:
        experts.load_expert(str(bad), "CartPole-v1", deterministic=True)
    assert "\n" not in str(e.value)
