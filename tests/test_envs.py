import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from gailkit import envs
from gailkit.config import EnvConfig
from gailkit.errors import EnvError


def test_gymnasium_id():
    env = envs.make_env("CartPole-v1", seed=0)
    assert env.spec.id == "CartPole-v1"


def test_project_env_by_name_and_kwargs():
    env = envs.make_env(EnvConfig(id="CustomEnv", kwargs={"max_steps": 3}), seed=0)
    steps, done = 0, False
    while not done:
        _, r, term, trunc, _ = env.step(env.action_space.sample())
        steps, done = steps + 1, term or trunc
    assert steps == 3 and r == 1.0 and term and not trunc


def test_custom_env_passes_gymnasium_checker():
    from envs.custom_env import CustomEnv

    check_env(CustomEnv(), skip_render_check=True)


def test_custom_env_seeded_reset_is_reproducible():
    a, b = envs.make_env("CustomEnv"), envs.make_env("CustomEnv")
    assert np.array_equal(a.reset(seed=5)[0], b.reset(seed=5)[0])
    assert not np.array_equal(a.reset(seed=5)[0], a.reset(seed=6)[0])


def test_module_class():
    env = envs.make_factory("envs.custom_env:CustomEnv")()
    assert env.observation_space.shape == (2,)


def test_file_class(tmp_path):
    f = tmp_path / "my_env.py"
    f.write_text(
        "import gymnasium as gym, numpy as np\n"
        "class Mine(gym.Env):\n"
        "    def __init__(self, size=3):\n"
        "        self.observation_space = gym.spaces.Box(0, 1, (size,), np.float32)\n"
        "        self.action_space = gym.spaces.Discrete(2)\n"
    )
    obs_space, act_space = envs.spaces(EnvConfig(id=f"{f}:Mine", kwargs={"size": 5}))
    assert obs_space.shape == (5,) and act_space.n == 2


def test_unknown_env_lists_close_matches():
    with pytest.raises(EnvError, match=r"unknown env 'CartPol-v1' \(close matches: CartPole-v1"):
        envs.make_factory("CartPol-v1")


@pytest.mark.parametrize("name, message", [
    ("nosuchmodule_xyz:Env", "cannot import module 'nosuchmodule_xyz'"),
    ("envs.custom_env:Nope", "has no attribute 'Nope'"),
    ("missing/file.py:Env", "no such file"),
    ("", "no env given"),
])
def test_bad_env_names(name, message):
    with pytest.raises(EnvError, match=message):
        envs.make_factory(name)


def test_bad_kwargs():
    with pytest.raises(EnvError, match="bad env kwargs"):
        envs.make_env(EnvConfig(id="CustomEnv", kwargs={"nope": 1}))


def test_vec_env_seeds_each_env_differently():
    venv = envs.make_vec_env("CustomEnv", n_envs=2, seed=0)
    obs = venv.reset()
    assert obs.shape == (2, 2) and not np.array_equal(obs[0], obs[1])


def test_scripted_expert_is_offered():
    assert "scripted" in envs.scripted_experts("CustomEnv")
    assert envs.scripted_experts("CartPole-v1") == {}
    assert isinstance(envs.make_env("CustomEnv"), gym.Env)
