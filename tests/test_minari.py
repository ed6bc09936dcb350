"""Minari datasets: written by minari's own writer, read back offline (HDF5 and Arrow storage), mapped to
transitions exactly, read without minari installed, checked against --env; demos without actions."""

import json
import subprocess
import sys

import numpy as np
import pytest

from gailkit.data import demos, envs, experts

minari = pytest.importorskip("minari")  # the extra gailkit[minari]; the set-up installs it


@pytest.fixture()
def minari_root(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    return tmp_path / "minari"


def _hand_episode():
    """One CartPole-shaped episode of 3 steps, values chosen by hand: obs_t = [t / 10, t, -t / 10, t]."""
    obs = np.array([[t / 10, t, -t / 10, t] for t in range(4)], np.float32)  # T + 1 = 4 observations, in bounds
    return demos.Demos(
        obs=obs[:-1],
        acts=np.array([1, 0, 1]),
        next_obs=obs[1:],
        terminated=np.array([False, False, True]),
        truncated=np.zeros(3, bool),
        episode_id=np.zeros(3, np.int64),
        step=np.arange(3),
        rews=np.array([1.0, 2.0, 3.0], np.float32),
        meta=demos.DemoMeta(
            env_id="CartPole-v1",
            observation_space=demos.space_to_json(envs.spaces("CartPole-v1")[0]),
            action_space=demos.space_to_json(envs.spaces("CartPole-v1")[1]),
        ),
    )


@pytest.mark.parametrize("storage", ["hdf5", "arrow"])
def test_a_hand_computed_episode_maps_to_its_transitions(minari_root, storage):
    path = demos.save(_hand_episode(), f"minari:test/hand-{storage}-v0", minari_format=storage)
    ds = minari.load_dataset(f"test/hand-{storage}-v0")  # minari's own reader agrees with what was written
    ep = next(iter(ds.iterate_episodes()))
    assert ep.observations.shape == (4, 4) and list(ep.actions) == [1, 0, 1]
    for source in (f"minari:test/hand-{storage}-v0", path, path.parent):
        d = demos.load(source, env_id="CartPole-v1", spaces=envs.spaces("CartPole-v1"))
        assert d.obs[:, 1].tolist() == [0, 1, 2] and d.next_obs[:, 1].tolist() == [1, 2, 3]
        assert (
            d.next_obs[2, 3] == 3
            and d.next_obs[2, 2] == np.float32(-0.3)
            and d.acts.tolist() == [1, 0, 1]
            and d.rews.tolist() == [1, 2, 3]
        )
        assert d.terminated.tolist() == [False, False, True] and not d.truncated.any()
        assert d.meta.env_id == "CartPole-v1" and d.meta.format == f"minari-{storage}"


@pytest.mark.parametrize("storage", ["hdf5", "arrow"])
def test_recorded_demos_round_trip_through_minari(minari_root, custom_demos, cartpole_demos, storage):
    for name, d in (("custom", custom_demos), ("cartpole", cartpole_demos)):
        demos.save(d, f"minari:test/{name}-{storage}-v0", minari_format=storage)
        back = demos.load_file(f"minari:test/{name}-{storage}-v0")
        for col in ("obs", "acts", "next_obs", "terminated", "truncated", "episode_id", "step"):
            assert np.array_equal(getattr(back, col), getattr(d, col)), (name, col)
        assert np.allclose(back.rews, d.rews)


@pytest.mark.parametrize("storage", ["hdf5", "arrow"])
def test_reading_needs_no_minari(minari_root, cartpole_demos, storage):
    """Read in a process where `import minari` fails: HDF5 through h5py, Arrow through pyarrow."""
    path = demos.save(cartpole_demos, f"minari:test/cp-{storage}-v0", minari_format=storage)
    code = (
        "import sys, json; sys.modules['minari'] = None\n"
        "from gailkit.data import demos\n"
        f"d = demos.load({str(path)!r}, env_id='CartPole-v1')\n"
        "print(json.dumps({'n': len(d), 'imported': sys.modules.get('minari') is not None}))"
    )
    out = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert out == {"n": len(cartpole_demos), "imported": False}


def test_spaces_and_env_come_from_the_dataset_and_are_checked(minari_root, custom_demos):
    demos.save(custom_demos, "minari:test/custom-v0")
    with pytest.raises(demos.DemoError, match="no demos for CartPole-v1; it holds: data \\(CustomEnv\\)"):
        demos.load("minari:test/custom-v0", env_id="CartPole-v1", spaces=envs.spaces("CartPole-v1"))
    with pytest.raises(demos.DemoError, match="minari:test/nothing-v0: no such dataset in the local Minari root"):
        demos.load("minari:test/nothing-v0")
    with pytest.raises(demos.DemoError, match="already in the local Minari root"):
        demos.save(custom_demos, "minari:test/custom-v0")


def test_cli_convert_inspect_and_train_from_minari(minari_root, tmp_path):
    from conftest import run_cli

    env = {"MINARI_DATASETS_PATH": str(minari_root)}
    r = run_cli(
        "demos", "convert", "data/cartpole.arrow", "minari:cartpole/expert-v0", "--minari-format", "arrow", env=env
    )
    assert r.returncode == 0, r.stderr
    r = run_cli("demos", "inspect", "minari:cartpole/expert-v0", env=env)
    assert r.returncode == 0 and "minari-arrow" in r.stdout and "CartPole-v1" in r.stdout, r.stderr
    r = run_cli(
        "train",
        "--env",
        "CartPole-v1",
        "--demos",
        "minari:cartpole/expert-v0",
        "--preset",
        "tiny",
        "--total-steps",
        "128",
        "--run-dir",
        str(tmp_path / "run"),
        "--quiet",
        env=env,
    )
    assert r.returncode == 0 and "50 episodes" in r.stdout, r.stderr


def test_demos_without_actions_everywhere(tmp_path, cartpole_demos):
    """strip-actions, every file format, inspect, convert, and training with a state-transition discriminator."""
    from conftest import run_cli

    from gailkit.run import checkpoint, train

    path = demos.save(cartpole_demos, tmp_path / "cp.arrow")
    r = run_cli("demos", "strip-actions", str(path), str(tmp_path / "obs_only.parquet"))
    assert r.returncode == 0, r.stderr
    for name in ("a.arrow", "b.pkl"):
        r = run_cli("demos", "convert", str(tmp_path / "obs_only.parquet"), str(tmp_path / name))
        assert r.returncode == 0, r.stderr
        back = demos.load_file(tmp_path / name)
        assert back.acts is None and np.array_equal(back.obs, cartpole_demos.obs)
    r = run_cli("demos", "inspect", str(tmp_path / "b.pkl"), "--json")
    assert json.loads(r.stdout)["files"][0]["actions"] is False
    cfg = train.train_config("CartPole-v1", str(tmp_path / "a.arrow"), None, ["total_steps=64"], preset="tiny")
    lines = []
    train.train(cfg, tmp_path / "run", quiet=True, log=lines.append)
    assert "demos without actions" in next(line for line in lines if line.startswith("gailkit train:"))
    state = checkpoint.load(tmp_path / "run" / "final" / "checkpoint.pt")
    assert state.config["disc"]["use_action"] is False and state.config["disc"]["use_next_state"] is True
    bad = train.train_config("CartPole-v1", str(tmp_path / "a.arrow"), None, ["bc.epochs=2"], preset="tiny")
    from gailkit.core.errors import ConfigError

    with pytest.raises(ConfigError, match="behaviour cloning needs the expert's actions"):
        train.train(bad, tmp_path / "run2", quiet=True, log=lambda m: None)
    with pytest.raises(demos.DemoError, match="imitation's trajectories need actions"):
        demos.save(demos.load_file(tmp_path / "a.arrow"), tmp_path / "t.pkl", pickle_layout="trajectories")
    with pytest.raises(demos.DemoError, match="Minari datasets hold actions"):
        demos.save(demos.load_file(tmp_path / "a.arrow"), "minari:x/y-v0")
    assert experts is not None


@pytest.mark.parametrize("storage", ["hdf5", "arrow"])
def test_image_demos_round_trip_through_minari_losslessly(minari_root, storage):
    """uint8 frames written by gailkit come back byte for byte (no JPEG), and their bounds, which
    Minari writes as lists nested to the frame's shape, are read."""
    from tests.space_envs import ImageObs

    d = experts.record(experts.Scripted(lambda env: ImageObs.expert), "tests/space_envs.py:ImageObs", 3, 0, "test")
    demos.save(d, f"minari:test/img-{storage}-v0", minari_format=storage)
    back = demos.load_file(f"minari:test/img-{storage}-v0")
    assert back.obs.dtype == np.uint8 and np.array_equal(back.obs, d.obs) and np.array_equal(back.next_obs, d.next_obs)
    assert demos.space_from_json(back.meta.observation_space) == ImageObs.observation_space


@pytest.mark.parametrize("storage", ["hdf5", "arrow"])
def test_dict_demos_round_trip_through_minari_and_load_against_the_env(minari_root, storage):
    """A Dict observation (a uint8 frame, a vector, a Discrete): an HDF5 group or an Arrow struct column of one
    array per entry, read back entry for entry, and checked against the env's Dict space."""
    from tests.space_envs import DictMixedObs

    env = "tests/space_envs.py:DictMixedObs"
    d = experts.record(experts.Scripted(lambda e: DictMixedObs.expert), env, 3, 0, "test")
    demos.save(d, f"minari:test/dict-{storage}-v0", minari_format=storage)
    back = demos.load_file(f"minari:test/dict-{storage}-v0")
    assert set(back.obs) == {"frame", "vec", "mode"} and back.obs["frame"].dtype == np.uint8
    for k in d.obs:
        assert np.array_equal(back.obs[k], d.obs[k]) and np.array_equal(back.next_obs[k], d.next_obs[k]), k
    assert np.array_equal(back.acts, d.acts) and demos.space_from_json(back.meta.observation_space) == (
        DictMixedObs.observation_space
    )
    loaded = demos.load(f"minari:test/dict-{storage}-v0", env, envs.spaces(env))
    assert len(loaded) == len(d) and loaded.whole_episodes()


@pytest.mark.parametrize("storage", ["hdf5", "arrow"])
def test_a_tuple_dataset_minari_wrote_reads_as_the_dict_gailkit_makes_of_a_tuple(minari_root, storage):
    """A dataset of Tuple observations written by minari itself (HDF5 entries `_index_0`, ...; Arrow fields
    "0", ...) reads as the Dict keyed "0", "1" that every gailkit path carries, checks against the Tuple env,
    and trains."""
    import minari
    from minari.data_collector.episode_buffer import EpisodeBuffer

    from tests.conftest import run_cli
    from tests.space_envs import TupleObs

    env = TupleObs()
    rng = np.random.default_rng(0)
    buffers = []
    for i in range(3):
        n = 6
        vec = rng.uniform(-1, 1, (n + 1, 2)).astype(np.float32)
        bit = rng.integers(0, 2, n + 1)
        acts = np.array([TupleObs.expert({"0": vec[t], "1": bit[t]}) for t in range(n)])
        buffers.append(EpisodeBuffer(id=i, observations=(vec, bit), actions=acts, rewards=np.ones(n),
                                     terminations=np.zeros(n, bool), truncations=np.eye(n, dtype=bool)[-1], infos={}))  # fmt: skip
    minari.create_dataset_from_buffers(
        f"test/tuple-{storage}-v0", buffers, observation_space=env.observation_space,
        action_space=env.action_space, algorithm_name="test", data_format=storage,
    )  # fmt: skip
    d = demos.load_file(f"minari:test/tuple-{storage}-v0")
    assert set(d.obs) == {"0", "1"} and len(d) == 18
    np.testing.assert_array_equal(d.obs["0"][:6], buffers[0].observations[0][:-1])
    np.testing.assert_array_equal(d.next_obs["1"][:6], buffers[0].observations[1][1:])
    spec = "tests/space_envs.py:TupleObs"
    loaded = demos.load(f"minari:test/tuple-{storage}-v0", spec, envs.spaces(spec))
    assert len(loaded) == 18 and loaded.whole_episodes()
    r = run_cli("train", "--env", spec, "--demos", f"minari:test/tuple-{storage}-v0", "--preset", "tiny",
                "--total-steps", "64", "--run-dir", str(minari_root.parent / "run"), "--quiet",
                env={"MINARI_DATASETS_PATH": str(minari_root)})  # fmt: skip
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("ref, says", [(412.5, None), ("400", "ref_max_score is not a finite number"),
                                       (float("nan"), "ref_max_score is not a finite number"), (None, None)])  # fmt: skip
def test_a_datasets_ref_max_score_is_its_expert_reference_named_as_such(minari_root, cartpole_demos, ref, says):
    """Minari's `ref_max_score` (its expert policy's mean return, what `get_normalized_score` divides by) is the
    reference a run normalizes against, and says where it came from; a malformed one is one line."""
    from gailkit.core.errors import DemoError

    path = demos.save(cartpole_demos, "minari:test/ref-v0")
    meta = json.loads((path / "metadata.json").read_text())
    if ref is not None:
        meta.update(ref_max_score=ref, num_episodes_average_score=100)
    (path / "metadata.json").write_text(json.dumps(meta))
    if says:
        with pytest.raises(DemoError, match=says) as e:
            demos.load_file("minari:test/ref-v0")
        assert "\n" not in str(e.value)
        return
    back = demos.load_file("minari:test/ref-v0")
    value, source = demos.expert_reference(back)
    if ref is None:  # whole episodes, no reference: the demos' own mean return, said to be that
        assert (value, source) == (pytest.approx(back.episode_returns().mean()), "demos")
    else:
        assert value == 412.5 and source == "expert policy, of the dataset's ref_max_score"
        assert back.meta.expert_episodes == 100
