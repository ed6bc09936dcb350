"""The public names at the top of the package: a notebook's five lines."""

import subprocess
import sys

import pytest

import gailkit


def test_public_names_are_listed_and_import_lazily():
    code = (
        "import sys, gailkit\n"
        "assert {'learn', 'train', 'train_config', 'Callback', 'load_demos', 'evaluate', 'export', 'OnnxPolicy', 'TrainConfig'}"
        " <= set(dir(gailkit))\n"
        "assert 'torch' not in sys.modules\n"
        "gailkit.OnnxPolicy\n"
        "assert 'torch' not in sys.modules, 'OnnxPolicy needs onnxruntime only'\n"
        "gailkit.train\n"
        "assert 'torch' in sys.modules\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    with pytest.raises(AttributeError, match="no attribute 'GAIL'"):
        gailkit.GAIL  # noqa: B018


def test_a_notebook_trains_from_the_top_level_names(tmp_path):
    seen = []

    class Evals(gailkit.Callback):
        def on_eval(self, run, stats):
            seen.append(stats["eval/return_mean"])

    cfg = gailkit.train_config("CustomEnv", "data/customenv.arrow", None, ["total_steps=256"], "tiny")
    assert isinstance(cfg, gailkit.TrainConfig)
    summary = gailkit.train(cfg, tmp_path / "run", quiet=True, log=lambda line: None, callbacks=[Evals()])
    assert seen and summary["env_steps"] >= 256
    demos = gailkit.load_demos("data/customenv.arrow")
    assert len(demos) > 0 and demos.obs.shape[1:] == (2,)


def test_the_readmes_python_example_runs_as_written(tmp_path):
    """The README's notebook-sized example, run as it stands (its run folder moved to a temp one)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text()
    section = readme[readme.index("### From Python, with callbacks") :]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1).replace("runs/notebook", str(tmp_path / "nb"))
    r = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "nb" / "final" / "checkpoint.pt").is_file() and r.stdout.strip()


def test_learn_from_an_env_class_of_this_process_and_demos_as_arrays(tmp_path, monkeypatch):
    """A notebook's own env class and its demos as numpy arrays: one call trains; the demos land once
    in the cache folder by content; actor processes are refused in one line (the class lives here)."""
    import gymnasium as gym
    import numpy as np

    from gailkit.core.errors import ConfigError

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))

    class Reach(gym.Env):
        observation_space = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
        action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.x, self.t = np.float32(self.np_random.uniform(-1, 1)), 0
            return np.array([self.x], np.float32), {}

        def step(self, action):
            self.x = np.float32(np.clip(self.x + 0.5 * float(np.asarray(action).reshape(-1)[0]), -2, 2))
            self.t += 1
            return np.array([self.x], np.float32), -abs(float(self.x)), False, self.t >= 10, {}

    rng = np.random.default_rng(0)
    obs = rng.uniform(-1, 1, (50, 1)).astype(np.float32)
    acts = np.clip(-obs, -1, 1)
    arrays = {"obs": obs, "acts": acts, "next_obs": obs + 0.5 * acts, "terminated": np.zeros(50, bool)}
    arrays["truncated"] = (np.arange(50) % 10) == 9
    s = gailkit.learn(Reach, arrays, tmp_path / "run", total_steps=128, preset="tiny", quiet=True, log=lambda m: None)
    assert s["env_steps"] == 128
    cached = list((tmp_path / "cache" / "gailkit" / "demos").glob("*.arrow"))
    assert len(cached) == 1
    said: list[str] = []
    gailkit.learn(Reach(), arrays, tmp_path / "again", total_steps=64, preset="tiny", quiet=True, log=said.append)
    assert any("expert return unknown (the demos carry no rewards; pass --expert-return" in line for line in said), said
    assert list((tmp_path / "cache" / "gailkit" / "demos").glob("*.arrow")) == cached  # same content, same file
    with pytest.raises(ConfigError, match="lives in this process only"):
        gailkit.learn(Reach, arrays, tmp_path / "r3", settings=["fleet.actors=2"], quiet=True, log=lambda m: None)
    with pytest.raises(ConfigError, match="the dict has no 'next_obs'"):
        gailkit.learn(Reach, {"obs": obs}, tmp_path / "r4", quiet=True, log=lambda m: None)


def test_learn_from_dict_observations_given_as_arrays(tmp_path, monkeypatch):
    """Demos of a Dict-observation env as arrays: `obs` and `next_obs` are mappings of arrays, one per entry."""
    from gailkit.data import experts
    from tests.space_envs import DictObs

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    d = experts.record(experts.Scripted(lambda e: DictObs.expert), "tests/space_envs.py:DictObs", 4, 0, "test")
    arrays = {
        "obs": d.obs,
        "next_obs": d.next_obs,
        "acts": d.acts,
        "terminated": d.terminated,
        "truncated": d.truncated,
    }
    assert isinstance(arrays["obs"], dict) and set(arrays["obs"]) == {"pos", "mode"}
    s = gailkit.learn(DictObs, arrays, tmp_path / "run", total_steps=128, preset="tiny", quiet=True, log=lambda m: None)
    assert s["env_steps"] == 128
