import re

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from gailkit.config import EnvConfig
from gailkit.core.errors import EnvError
from gailkit.data import envs


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
    from gailkit_envs.custom_env import CustomEnv

    check_env(CustomEnv(), skip_render_check=True)


def test_custom_env_seeded_reset_is_reproducible():
    a, b = envs.make_env("CustomEnv"), envs.make_env("CustomEnv")
    assert np.array_equal(a.reset(seed=5)[0], b.reset(seed=5)[0])
    assert not np.array_equal(a.reset(seed=5)[0], a.reset(seed=6)[0])


def test_module_class():
    env = envs.make_factory("gailkit_envs.custom_env:CustomEnv")()
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


@pytest.mark.parametrize(
    "name, message",
    [
        ("nosuchmodule_xyz:Env", "cannot import module 'nosuchmodule_xyz'"),
        ("os:system", "system is not a gymnasium.Env subclass"),
        ("gymnasium:Space", "Space is not a gymnasium.Env subclass"),
        ("gailkit_envs.custom_env:Nope", "has no attribute 'Nope'"),
        ("missing/file.py:Env", "no such file"),
        ("", "no env given"),
    ],
)
def test_bad_env_names(name, message):
    with pytest.raises(EnvError, match=message):
        envs.make_factory(name)


def test_bad_kwargs():
    with pytest.raises(EnvError, match="bad env kwargs"):
        envs.make_env(EnvConfig(id="CustomEnv", kwargs={"nope": 1}))


def test_vec_env_seeds_each_env_differently():
    from gailkit.data import experts

    venv = experts.make_vec_env("CustomEnv", n_envs=2, seed=0)
    obs = venv.reset()
    assert obs.shape == (2, 2) and not np.array_equal(obs[0], obs[1])


def test_scripted_expert_is_offered():
    assert "scripted" in envs.scripted_experts("CustomEnv")
    assert envs.scripted_experts("CartPole-v1") == {}
    assert isinstance(envs.make_env("CustomEnv"), gym.Env)


@pytest.mark.parametrize("name", ["os:system", "gailkit_envs.custom_env:CustomEnv", "tests/slow_env.py:SlowCartPole"])
def test_code_named_by_a_file_is_not_loaded(tmp_path, name):
    """An env name read from a checkpoint or config is resolved as a registry id only: nothing is imported."""
    import sys

    marker = tmp_path / "ran"
    evil = tmp_path / "evil_env.py"
    evil.write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    before = set(sys.modules)
    for spec in (name, f"{evil}:Env"):
        with pytest.raises(EnvError, match="which is code .* pass --env"):
            envs.make_factory(EnvConfig(id=spec), allow_code=False, source="run/config.yaml")
    assert not marker.exists() and not {m for m in set(sys.modules) - before if "gailkit_user" in m}
    assert envs.make_factory(EnvConfig(id="CustomEnv"), allow_code=False)().observation_space.shape == (2,)


def test_a_file_env_that_raises_on_import_is_one_line(tmp_path):
    bad = tmp_path / "bad_env.py"
    bad.write_text("raise RuntimeError('boom')\n")
    with pytest.raises(EnvError, match="importing .*bad_env.py failed \\(RuntimeError: boom\\)"):
        envs.make_factory(f"{bad}:Env")


@pytest.mark.parametrize(
    "name, says",
    [
        (
            "WrongShape",
            "step() at step 3 of an episode returned an observation of shape (3, 1), where its "
            "observation_space is Box(-1.0, 1.0, (3,), float32)",
        ),  # fmt: skip
        ("NanObservation", "step() at step 3 of an episode returned an observation holding NaN or inf"),
        (
            "ArrayReward",
            "step() at step 3 of an episode returned the reward array([1.]); a reward is one finite number",
        ),
        ("NanReward", "returned the reward nan; a reward is one finite number"),
        ("FourValues", "step() at step 3 of an episode returned a tuple of 4 values; gymnasium's API returns 5"),
        (
            "ObservationOnlyReset",
            "reset() returned a value of type ndarray; gymnasium's API returns (observation, info)",
        ),
        ("ArrayFlag", "returned terminated=array([False, False]); it is one bool"),
        ("NoneInfo", "reset() returned an info of type NoneType; it is a dict"),
        ("TextReward", "step() at step 3 of an episode returned the reward '1'; a reward is one finite number"),
        (
            "MissingDictEntry",
            "returned an observation of type dict with keys ['pos'], where its observation_space is Dict(",
        ),
    ],
)
def test_an_env_that_breaks_the_api_or_its_own_spaces_is_one_line_and_nothing_is_written(tmp_path, name, says):
    """A user's env returning what gymnasium's API or its own declared spaces do not allow: `demos record` says
    so in one line naming the env, exit 2, no file; the same check holds in every env gailkit makes."""
    from tests.conftest import run_cli

    out = tmp_path / "demos.arrow"
    env = f"tests/broken_envs.py:{name}"
    r = run_cli("demos", "record", "--env", env, "--expert", "tests/broken_envs.py:expert", "--episodes", "2",
                "--out", str(out))  # fmt: skip
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"gailkit: error: --env {env}: ") and says in lines[0], r.stderr
    assert not out.exists() and list(tmp_path.iterdir()) == []
    made = envs.make_env(env)
    with pytest.raises(EnvError, match="^--env " + re.escape(env) + ": .*" + re.escape(says)):
        made.reset(seed=0)
        for _ in range(8):
            made.step(0)


def test_an_env_that_keeps_the_api_loosely_is_taken_as_it_is(tmp_path):
    """float64 arrays and lists for a float32 Box, numpy rewards, 0/1 flags: what gymnasium's own checker
    lets through is recorded and stepped without a word."""
    from tests.conftest import run_cli

    out = tmp_path / "demos.arrow"
    r = run_cli("demos", "record", "--env", "tests/broken_envs.py:FloatsAndLists", "--expert",
                "tests/broken_envs.py:expert", "--episodes", "2", "--out", str(out))  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert out.is_file()
