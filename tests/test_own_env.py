"""Your own env in your own file, used from another folder: record, train, evaluate, export, infer."""

from __future__ import annotations

import json
import textwrap

from gailkit.config.envid import canonical, same_env
from tests.conftest import run_cli

ENV_FILE = textwrap.dedent(
    '''
    import gymnasium as gym
    import numpy as np


    class Reach1D(gym.Env):
        """Move a point towards 0 on a line; 20 steps."""

        observation_space = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
        action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.x, self.t = float(self.np_random.uniform(-1.5, 1.5)), 0
            return np.array([self.x], np.float32), {}

        def step(self, action):
            self.x = float(np.clip(self.x + 0.2 * float(np.clip(action[0], -1, 1)), -2, 2))
            self.t += 1
            return np.array([self.x], np.float32), -abs(self.x), False, self.t >= 20, {}


    def expert(obs):
        return np.array([np.clip(-5 * obs[0], -1, 1)], np.float32)
    '''
)


def test_an_env_in_the_users_file_works_from_another_folder(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "my_env.py").write_text(ENV_FILE)
    r = run_cli("demos", "record", "--env", "my_env.py:Reach1D", "--expert", "my_env.py:expert", "--episodes", "8",
                "--out", "demos.arrow", cwd=work)  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = run_cli("train", "--env", "my_env.py:Reach1D", "--demos", "demos.arrow", "--preset", "tiny",
                "--total-steps", "256", "--quiet", "--run-dir", "run", cwd=work)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert str(work / "my_env.py") in (work / "run" / "config.yaml").read_text()  # recorded by what it is
    # from the parent folder, the same file under another spelling: every command takes it
    env = "work/my_env.py:Reach1D"
    r = run_cli("evaluate", "work/run", "--env", env, "--episodes", "2", "--no-plots", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = run_cli("evaluate", "work/run", "--episodes", "2", "--no-plots", cwd=tmp_path)  # not typed: no code runs
    assert r.returncode == 2 and f"--env {work / 'my_env.py'}:Reach1D" in r.stderr, r.stderr
    r = run_cli("export", "work/run", "--out", "p.onnx", "--sb3", "p.zip", cwd=tmp_path)  # no env needed
    assert r.returncode == 0 and (tmp_path / "p.onnx").is_file() and (tmp_path / "p.zip").is_file(), r.stderr
    r = run_cli("infer", "p.onnx", "--env", env, "--episodes", "2", "--json", cwd=tmp_path)
    assert r.returncode == 0 and json.loads(r.stdout)["episodes"] == 2, r.stderr
    r = run_cli("train", "--env", env, "--demos", "work/demos.arrow", "--preset", "tiny", "--total-steps", "128",
                "--quiet", "--run-dir", "run2", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr  # the demos say my_env.py:Reach1D, recorded in work/


def test_your_own_expert_trained_on_your_own_env_records_demos_from_another_folder(tmp_path):
    """The README's walk-through with `expert train --algo sac` on the user's file, then demos recorded
    from that expert's zip with the env named from the parent folder."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "my_env.py").write_text(ENV_FILE)
    r = run_cli("expert", "train", "--env", "my_env.py:Reach1D", "--algo", "sac", "--total-steps", "300",
                "--out", "experts/reach.zip", "--set", "eval_episodes=2", "--quiet", cwd=work)  # fmt: skip
    assert r.returncode == 0 and (work / "experts" / "reach.zip").is_file(), r.stderr
    r = run_cli("demos", "record", "--expert", "work/experts/reach.zip", "--env", "work/my_env.py:Reach1D",
                "--episodes", "3", "--out", "d.arrow", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = run_cli("demos", "inspect", "d.arrow", "--json", cwd=tmp_path)
    assert r.returncode == 0 and json.loads(r.stdout)["files"][0]["episodes"] == 3, r.stderr


def test_which_names_are_the_same_env(tmp_path, monkeypatch):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "e.py").write_text("x = 1\n")
    (tmp_path / "b" / "e.py").write_text("x = 2\n")
    monkeypatch.chdir(tmp_path)
    assert same_env("a/e.py:E", f"{tmp_path}/a/e.py:E") and canonical("a/e.py:E") == f"{tmp_path}/a/e.py:E"
    assert same_env("e.py:E", "a/e.py:E")  # recorded elsewhere as e.py: found here under a/
    assert not same_env("a/e.py:E", "b/e.py:E")  # two files of the same name, different code
    assert not same_env("a/e.py:E", "a/e.py:F") and not same_env("CartPole-v1", "CartPole-v0")
    assert not same_env(None, "CartPole-v1") and same_env("CartPole-v1", "CartPole-v1")


def test_an_env_that_never_ends_gets_its_time_limit_from_the_settings_everywhere(tmp_path):
    """`env.max_episode_steps` (and `demos record --max-episode-steps`) cut an env class's episodes, which have
    no registered limit: recording, training's evaluations, and `infer` from the ONNX file alone all end."""
    from gailkit.data import demos

    env = "tests/space_envs.py:Endless"
    out, run, onnx = tmp_path / "endless.arrow", tmp_path / "run", tmp_path / "p.onnx"
    r = run_cli("demos", "record", "--env", env, "--expert", "tests/space_envs.py:endless_expert",
                "--episodes", "3", "--max-episode-steps", "20", "--out", str(out))  # fmt: skip
    assert r.returncode == 0, r.stderr
    d = demos.load_file(out)
    assert list(d.episode_lengths()) == [20, 20, 20] and d.truncated.sum() == 3 and not d.terminated.any()
    r = run_cli("train", "--env", env, "--demos", str(out), "--preset", "tiny", "--total-steps", "256", "--quiet",
                "--run-dir", str(run), "--set", "env.max_episode_steps=20", "--set", "eval_episodes=2")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "max_episode_steps: 20" in (run / "config.yaml").read_text()
    assert run_cli("export", str(run), "--out", str(onnx)).returncode == 0
    r = run_cli("infer", str(onnx), "--env", env, "--episodes", "2", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["length_mean"] == 20
