import json

import numpy as np
import pytest
from conftest import ROOT, run_cli

from gailkit import config
from gailkit.config import ExpertConfig
from gailkit.core.errors import ConfigError, ExpertError
from gailkit.data import demos, experts


@pytest.fixture(scope="module")
def tiny_expert(tmp_path_factory):
    cfg = config.build(
        ExpertConfig,
        overrides=[
            "env.id=CartPole-v1",
            "total_timesteps=256",
            "n_envs=2",
            "eval_episodes=2",
            "ppo.n_steps=64",
            "ppo.batch_size=64",
            "ppo.n_epochs=1",
            "policy.net_arch=[16]",
        ],
    )
    out = tmp_path_factory.mktemp("expert") / "cp.zip"
    info = experts.train_expert(cfg, out, log=lambda s: None)
    return out, info


def test_train_expert_saves_zip_and_metadata(tiny_expert):
    out, info = tiny_expert
    assert out.is_file() and out.with_suffix(".json").is_file()
    meta = json.loads(out.with_suffix(".json").read_text())
    assert meta["env_id"] == "CartPole-v1" and meta["mean_return"] == info["mean_return"] > 0
    assert meta["config"]["policy"]["net_arch"] == [16]
    assert not [p for p in out.parent.iterdir() if ".tmp" in p.name]  # no temp files left


def test_a_ppo_expert_leaves_nothing_in_the_temp_folder(tmp_path, monkeypatch):
    """SB3's `learn()` makes an empty `SB3-<time>` folder in the temp folder whenever no logger was set; an
    expert's training sets one that writes nowhere."""
    import tempfile

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    overrides = ["env.id=CartPole-v1", "total_timesteps=64", "n_envs=1", "eval_episodes=1", "ppo.n_steps=64"]
    cfg = config.build(ExpertConfig, overrides=[*overrides, "ppo.batch_size=64", "policy.net_arch=[8]"])
    experts.train_expert(cfg, tmp_path / "cp.zip", log=lambda s: None)
    # torch's own cache folder, one per user and reused by every process, appears where torch was not yet
    # fully imported (this test alone): it is not litter of a call
    left = [p.name for p in scratch.iterdir() if not p.name.startswith("torchinductor_")]
    assert (tmp_path / "cp.zip").is_file() and not left, left


def test_an_expert_trains_with_the_learners_thread_rule(tmp_path, monkeypatch):
    """One torch thread for vector observations (torch's default of one a core slowed a TD3 expert's training
    30x beside one busy process on 2 cores), unless the user set OMP_NUM_THREADS."""
    import torch as th

    before = th.get_num_threads()
    overrides = ["env.id=CartPole-v1", "total_timesteps=64", "n_envs=1", "eval_episodes=1", "ppo.n_steps=64"]
    cfg = config.build(ExpertConfig, overrides=[*overrides, "ppo.batch_size=64", "policy.net_arch=[8]"])
    try:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        th.set_num_threads(2)
        experts.train_expert(cfg, tmp_path / "a.zip", log=lambda s: None)
        assert th.get_num_threads() == 1
        monkeypatch.setenv("OMP_NUM_THREADS", "2")
        th.set_num_threads(2)
        experts.train_expert(cfg, tmp_path / "b.zip", log=lambda s: None)
        assert th.get_num_threads() == 2
    finally:
        th.set_num_threads(before)


def test_record_from_sb3_expert(tiny_expert):
    out, _ = tiny_expert
    policy, env_id, info = experts.load_expert(str(out), None, deterministic=True)
    assert env_id == "CartPole-v1" and info["env_id"] == env_id
    d = experts.record(policy, env_id, episodes=2, seed=3, source=str(out))
    assert d.n_episodes == 2 and d.acts.dtype.kind == "i" and d.meta.source == str(out)
    again = experts.record(policy, env_id, episodes=2, seed=3, source=str(out))
    assert np.array_equal(d.obs, again.obs)  # seeded episodes are reproducible


def test_expert_for_another_env_is_refused(tiny_expert):
    with pytest.raises(ExpertError, match="was trained on CartPole-v1, not Pendulum-v1"):
        experts.load_expert(str(tiny_expert[0]), "Pendulum-v1", deterministic=True)


def test_scripted_expert_matches_its_mapping(custom_demos):
    from gailkit_envs.custom_env import expert_action

    assert np.allclose(custom_demos.acts, expert_action(custom_demos.obs))
    assert np.abs(expert_action(np.array([0.5, -0.25])) - [0.25, 0.5]).max() < 1e-7


@pytest.mark.parametrize(
    "spec, message",
    [
        ("missing.zip", "no such file"),
        ("telepathy", "not a .zip file, nor a scripted expert of CustomEnv \\(it has: scripted\\)"),
        ("gailkit_envs.custom_env:nothing", "has no attribute 'nothing'"),
        ("gailkit_envs.custom_env:CustomEnv.__name__", "str is not callable"),
        (
            "gailkit_envs.custom_env:CustomEnv.nothing",
            "'CustomEnv' in module 'gailkit_envs.custom_env' has no attribute 'nothing'",
        ),
    ],
)
def test_bad_expert_specs(spec, message):
    with pytest.raises(ExpertError, match=message):
        experts.load_expert(spec, "CustomEnv", deterministic=True)


def test_an_expert_may_be_named_by_a_dotted_attribute_of_a_file():
    """`file.py:Class.expert`, as an entry point names an object: a scripted expert kept on its env class."""
    from tests.space_envs import DiscreteObs

    expert, env_id, info = experts.load_expert(
        "tests/space_envs.py:DiscreteObs.expert", "tests/space_envs.py:DiscreteObs", True
    )
    assert [expert(o) for o in range(6)] == [DiscreteObs.expert(o) for o in range(6)] == [0, 1, 2, 0, 1, 2]
    assert info == {"scripted": "tests/space_envs.py:DiscreteObs.expert"}


def test_shipped_settings_are_found_and_valid():
    for env_id in ("CartPole-v1", "Pendulum-v1"):
        cfg = experts.expert_config(env_id)
        assert cfg.env.id == env_id and cfg.total_timesteps >= 100_000


def test_impossible_batch_size(tmp_path):
    cfg = config.build(ExpertConfig, overrides=["env.id=CartPole-v1", "n_envs=1", "ppo.n_steps=8", "ppo.batch_size=64"])
    with pytest.raises(ConfigError, match="'ppo.batch_size' 64 exceeds n_steps \\* n_envs = 8"):
        experts.train_expert(cfg, tmp_path / "x.zip", log=lambda s: None)


def test_slug():
    assert experts.slug("CartPole-v1") == "cartpole"
    assert experts.slug("seals/CartPole-v0") == "seals_cartpole"
    assert experts.slug("gailkit_envs.custom_env:CustomEnv") == "customenv"
    assert isinstance(demos.Demos, type)


@pytest.mark.parametrize("algo, env_id", [("sac", "Pendulum-v1"), ("dqn", "CartPole-v1")])
def test_expert_train_with_another_sb3_algorithm_then_record_its_demos(tmp_path, algo, env_id):
    """`expert train --algo sac|dqn` saves SB3's own zip and a .json with its return; demos record reads
    that zip without unpickling and replays its deterministic actions."""
    from conftest import run_cli

    out, scratch = tmp_path / f"{algo}.zip", tmp_path / "scratch"
    scratch.mkdir()
    r = run_cli(
        "expert", "train", "--env", env_id, "--algo", algo, "--total-steps", "300", "--out", str(out),
        "--set", "eval_episodes=1", "--set", "policy.net_arch=[16]", "--quiet", env={"TMPDIR": str(scratch)},
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert not list(scratch.iterdir())  # SB3's learn() left no SB3-<time> folder in the temp folder
    meta = json.loads(out.with_suffix(".json").read_text())
    assert meta["algo"] == f"{algo.upper()} (stable-baselines3)" and meta["config"]["algo"] == algo
    r = run_cli(
        "demos", "record", "--expert", str(out), "--env", env_id, "--episodes", "1", "--out", str(tmp_path / "d.arrow")
    )
    assert r.returncode == 0, r.stderr
    d = demos.load(tmp_path / "d.arrow", env_id, None)
    assert d.n_episodes == 1 and d.meta.expert_return is not None and d.meta.source == str(out)
    bad = run_cli(
        "expert",
        "train",
        "--env",
        "CartPole-v1",
        "--algo",
        "sac",
        "--total-steps",
        "10",
        "--out",
        str(tmp_path / "x.zip"),
    )
    assert (
        bad.returncode == 2
        and "'algo: sac' cannot train on CartPole-v1" in bad.stderr
        and not (tmp_path / "x.zip").exists()
    )


def test_an_rl_zoo_folders_config_yml_is_read_as_data(tmp_path):
    """rl-zoo3's config.yml (an OrderedDict dump): wrappers gailkit does not rebuild are named in one line,
    a frame_stack that is not a whole number is one line, and a plain CartPole folder records."""
    import collections
    import shutil

    import yaml

    folder = tmp_path / "logs" / "ppo" / "CartPole-v1_1"
    (folder / "CartPole-v1").mkdir(parents=True)
    shutil.copy(ROOT / "experts" / "cartpole.zip", folder / "CartPole-v1.zip")
    config = folder / "CartPole-v1" / "config.yml"
    params = [("env_wrapper", [{"sb3_contrib.common.wrappers.TimeFeatureWrapper": {"max_steps": 500}}]), ("n_envs", 8)]
    config.write_text(yaml.dump(collections.OrderedDict(params)))
    out = tmp_path / "d.arrow"
    r = run_cli("demos", "record", "--expert", str(folder), "--episodes", "1", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "env wrappers gailkit does not apply: sb3_contrib.common.wrappers.TimeFeatureWrapper" in r.stdout + r.stderr
    assert demos.load_file(out).meta.recorded_with is None
    config.write_text(yaml.dump(collections.OrderedDict([("frame_stack", "4")])))
    r = run_cli("demos", "record", "--expert", str(folder), "--episodes", "1", "--out", str(tmp_path / "e.arrow"))
    assert r.returncode == 2 and "frame_stack '4' is not a whole number of frames" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "e.arrow").exists()
