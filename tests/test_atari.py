"""Frame stacks and Atari: demo files hold one frame a step and the stacks come back exactly as
gymnasium's FrameStackObservation builds them; Pong's scripted expert records, and a run on Atari's
preprocessing trains, exports and infers with the pipeline rebuilt from the ONNX file alone."""

from __future__ import annotations

import json

import numpy as np
import pytest

ale_py = pytest.importorskip("ale_py", reason="Atari tests need gailkit[atari]")
gym_wrappers = pytest.importorskip("gymnasium.wrappers")
if not hasattr(gym_wrappers, "FrameStackObservation"):  # gymnasium 0.29 (the imitation environment)
    pytest.skip("frame stacks need gymnasium >= 1.0", allow_module_level=True)

from gymnasium.wrappers import FrameStackObservation  # noqa: E402

from gailkit.config import EnvConfig  # noqa: E402
from gailkit.core.errors import DemoError, InputError  # noqa: E402
from gailkit.core.framestacks import FrameStacks  # noqa: E402
from gailkit.data import demos, envs  # noqa: E402
from gailkit.data.demos import stacks  # noqa: E402
from tests.conftest import run_cli  # noqa: E402
from tests.space_envs import ImageObs  # noqa: E402


def _stacked_rollouts(k: int, episodes: int) -> tuple[np.ndarray, np.ndarray]:
    """What the env wrapped in gymnasium's own frame stack shows the same expert on the same seeds."""
    env = FrameStackObservation(ImageObs(), k)
    obs_rows, next_rows = [], []
    for ep in range(episodes):
        obs, _ = env.reset(seed=ep)
        done = False
        while not done:
            nxt, _, term, trunc, _ = env.step(ImageObs.expert(obs))
            obs_rows.append(obs)
            next_rows.append(nxt)
            obs, done = nxt, term or trunc
    return np.stack(obs_rows), np.stack(next_rows)


def test_stacks_rebuilt_from_one_frame_a_step_are_gymnasiums_own(tmp_path):
    out = tmp_path / "frames.arrow"
    r = run_cli("demos", "record", "--env", "tests/space_envs.py:ImageObs", "--expert",
                "tests/space_envs.py:image_expert", "--episodes", "3", "--frame-stack", "3", "--out", str(out))  # fmt: skip
    assert r.returncode == 0, r.stderr
    raw = demos.load_file(out)
    assert raw.obs.shape[1:] == (12, 12, 3)  # one frame a step in the file
    stacked_space = FrameStackObservation(ImageObs(), 3).observation_space
    d = demos.load(out, "tests/space_envs.py:ImageObs", (stacked_space, ImageObs.action_space), frame_stack=3)
    obs, next_obs = _stacked_rollouts(3, 3)
    assert d.obs.shape == obs.shape == (len(raw), 3, 12, 12, 3)
    np.testing.assert_array_equal(d.obs, obs)
    np.testing.assert_array_equal(d.next_obs, next_obs)
    # a folder of two frame files (Arrow and Parquet): their stacks are joined as frames, not built
    both = tmp_path / "both"
    both.mkdir()
    demos.save(raw, both / "a.arrow")
    demos.save(raw, both / "b.parquet")
    d2 = demos.load(both, "tests/space_envs.py:ImageObs", (stacked_space, ImageObs.action_space), frame_stack=3)
    assert isinstance(d2.obs, FrameStacks) and d2.obs.frames is d2.next_obs.frames and len(d2.obs.frames) < len(d2) * 2
    np.testing.assert_array_equal(d2.obs, np.concatenate([obs, obs]))
    np.testing.assert_array_equal(d2.next_obs, np.concatenate([next_obs, next_obs]))
    # a subsampled file has lost the frames before its kept steps: refused in one line
    sub = tmp_path / "sub.arrow"
    assert run_cli("demos", "subsample", str(out), str(sub), "--episodes", "2", "--every", "4").returncode == 0
    with pytest.raises(DemoError, match="not whole"):
        demos.load(sub, "tests/space_envs.py:ImageObs", (stacked_space, ImageObs.action_space), frame_stack=3)


def test_rebuilt_stacks_are_held_as_frames_and_refused_over_the_memory_budget_before_they_are_built(
    tmp_path, monkeypatch
):
    out = tmp_path / "frames.arrow"
    r = run_cli("demos", "record", "--env", "tests/space_envs.py:ImageObs", "--expert",
                "tests/space_envs.py:image_expert", "--episodes", "30", "--out", str(out))  # fmt: skip
    assert r.returncode == 0, r.stderr
    raw = demos.load_file(out)
    n, frame = len(raw), 12 * 12 * 3
    monkeypatch.setenv("GAILKIT_MEMORY_BUDGET", "1M")
    # 16-frame stacks built whole would take 2 * n * 16 frames, past the budget; held as frames they fit
    assert 2 * n * 16 * frame > 1 << 20 > 2 * n * (frame + 8 * 16)
    stacked_space = FrameStackObservation(ImageObs(), 16).observation_space
    d = demos.load(out, "tests/space_envs.py:ImageObs", (stacked_space, ImageObs.action_space), frame_stack=16)
    assert isinstance(d.obs, FrameStacks) and d.obs.frames is d.next_obs.frames
    assert d.obs.shape == d.next_obs.shape == (n, 16, 12, 12, 3)
    # each step's frame once, plus one next frame per episode end (30 episodes)
    assert len(d.obs.frames) == n + 30
    assert stacks.built_nbytes(d) > 10 * stacks.nbytes(d)
    # what a minibatch reads is what the stacks are: gymnasium's own, row for row
    want_obs, want_next = _stacked_rollouts(16, 30)
    rows = np.random.default_rng(0).integers(0, n, 64)
    np.testing.assert_array_equal(d.obs[rows], want_obs[rows])
    np.testing.assert_array_equal(d.next_obs[rows], want_next[rows])
    # what the frames and their index would hold past the budget: refused in one line, before anything is built
    big = demos.Demos(
        obs=np.zeros((2000, 12, 12, 3), np.uint8),
        acts=np.zeros(2000, np.int64),
        next_obs=np.zeros((2000, 12, 12, 3), np.uint8),
        terminated=np.arange(2000) % 100 == 99,
        truncated=np.zeros(2000, bool),
        episode_id=np.arange(2000) // 100,
        step=np.arange(2000) % 100,
        meta=demos.DemoMeta(path="big.arrow"),
    )
    with pytest.raises(InputError, match=r"big.arrow: env.frame_stack 16 rebuilds: declares .*GAILKIT_MEMORY_BUDGET"):
        stacks.rebuild(big, 16, stacked_space)


def test_frames_are_written_compressed_and_vectors_are_not(tmp_path):
    r = run_cli("demos", "record", "--env", "tests/space_envs.py:BigImageObs", "--expert",
                "tests/space_envs.py:image_expert", "--episodes", "4", "--out", str(tmp_path / "f.arrow"))  # fmt: skip
    assert r.returncode == 0, r.stderr
    d = demos.load_file(tmp_path / "f.arrow")
    raw = d.obs.nbytes + d.next_obs.nbytes
    assert (tmp_path / "f.arrow").stat().st_size < raw / 10  # one bright column a frame: mostly zeros
    r = run_cli("demos", "record", "--env", "tests/space_envs.py:DiscreteObs", "--expert",
                "tests/space_envs.py:discrete_obs_expert", "--episodes", "4", "--out", str(tmp_path / "v.arrow"))  # fmt: skip
    assert r.returncode == 0, r.stderr
    v = demos.load_file(tmp_path / "v.arrow")
    assert (tmp_path / "v.arrow").stat().st_size > v.obs.nbytes + v.next_obs.nbytes  # vectors: as they are (mapped)


@pytest.mark.slow
def test_pong_scripted_expert_records_and_the_atari_pipeline_trains_exports_and_infers(tmp_path):
    """Pong (short games: 1,200 console frames) with AtariPreprocessing and a 4-frame stack from the settings;
    `infer` rebuilds the preprocessing and stack from the ONNX metadata and plays exactly as `evaluate` does."""
    from gailkit.data import experts

    short = {"max_num_frames_per_episode": 1200}
    cfg = EnvConfig(id="ALE/Pong-v5", kwargs=short, preprocess="atari", frame_stack=4)
    expert = experts.load_expert("scripted", "ALE/Pong-v5", True)[0]
    d = experts.record(expert, cfg, 2, 0, "scripted")
    # up to 1,200 frames / 4 a game (reset no-ops take some), twice
    assert d.obs.shape[1:] == (84, 84) and d.obs.dtype == np.uint8 and 500 < len(d) <= 600
    d.meta.expert_return = float(d.episode_returns().mean())
    path = demos.save(d, tmp_path / "pong.arrow")
    assert path.stat().st_size < (d.obs.nbytes + d.next_obs.nbytes) / 20
    env = envs.make_env(cfg)
    assert env.observation_space.shape == (4, 84, 84) and env.observation_space.dtype == np.uint8
    env.close()
    # the env as train makes it by default (experts/pong.gail.yaml): inspect and record use the same one
    assert (experts.env_settings("ALE/Pong-v5").preprocess, experts.env_settings("ALE/Pong-v5").frame_stack) == (
        "atari",
        4,
    )
    assert experts.env_settings("CartPole-v1").frame_stack == 1
    r = run_cli("demos", "inspect", str(path), "--env", "ALE/Pong-v5")  # frames checked against the preprocessed env
    assert r.returncode == 0 and "Box(84, 84) uint8" in r.stdout, r.stderr
    run, onnx = tmp_path / "run", tmp_path / "pong.onnx"
    sets = ["env.preprocess=atari", "env.frame_stack=4", "env.kwargs.max_num_frames_per_episode=1200",
            "bc.epochs=1"]  # fmt: skip
    args = ["train", "--env", "ALE/Pong-v5", "--demos", str(path), "--preset", "tiny", "--total-steps", "128"]
    r = run_cli(*args, "--run-dir", str(run), "--quiet", *[x for s in sets for x in ("--set", s)])
    assert r.returncode == 0, r.stderr
    saved = (run / "config.yaml").read_text()
    assert "preprocess: atari" in saved and "frame_stack: 4" in saved
    r = run_cli("export", str(run), "--out", str(onnx))
    assert r.returncode == 0, r.stderr
    r = run_cli("evaluate", str(run), "--episodes", "1", "--json", "--onnx", str(onnx))
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["onnx"]["returns"] == report["policy"]["returns"]
    r = run_cli("infer", str(onnx), "--episodes", "1", "--json")  # no --env: the ONNX file's own pipeline
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["returns"] == report["policy"]["returns"]


def test_an_atari_episode_limit_counts_the_agents_steps_not_console_frames():
    """`env.max_episode_steps` with Atari's preprocessing cuts after that many agent steps (4 frames each), as it
    does for any env; the Pong settings set one below the step at which the console stops play."""
    from gailkit.data import experts

    env = envs.make_env(EnvConfig(id="ALE/Pong-v5", preprocess="atari", frame_stack=4, max_episode_steps=30))
    env.reset(seed=0)
    steps, truncated = 0, False
    while not truncated:
        _, _, terminated, truncated, _ = env.step(0)
        steps += 1
        assert not terminated
    env.close()
    assert steps == 30
    assert 0 < experts.env_settings("ALE/Pong-v5").max_episode_steps < 16_300


def test_an_atari_setting_that_cannot_apply_is_one_line(tmp_path):
    r = run_cli("demos", "record", "--env", "CartPole-v1", "--expert", "experts/cartpole.zip", "--episodes", "1",
                "--preprocess", "atari", "--out", str(tmp_path / "x.arrow"))  # fmt: skip
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "preprocess" in r.stderr and not (tmp_path / "x.arrow").exists()
    r = run_cli("train", "--env", "ALE/Pong-v5", "--set", "env.preprocess=atari", "--set", "env.kwargs.frameskip=4",
                "--run-dir", str(tmp_path / "run"))  # fmt: skip
    assert r.returncode == 2 and "frameskip" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_frame_stacks_held_as_frames_train_the_discriminator_and_bc_exactly_as_the_built_stacks_do(tmp_path):
    """The expert pool (with its absorbing rows) and behaviour cloning read the same minibatches from frames
    and an index as from the stacks built whole: the same losses and the same weights, step for step."""
    import torch as th

    from gailkit.algo.discriminator import Discriminator
    from gailkit.algo.generator.ppo import PPOGenerator
    from gailkit.algo.learner import expert_data
    from gailkit.config import DiscConfig, PolicyConfig, PPOConfig

    out = tmp_path / "frames.arrow"
    r = run_cli("demos", "record", "--env", "tests/space_envs.py:ImageObs", "--expert",
                "tests/space_envs.py:image_expert", "--episodes", "4", "--out", str(out))  # fmt: skip
    assert r.returncode == 0, r.stderr
    space = FrameStackObservation(ImageObs(), 4).observation_space
    d = demos.load(out, "tests/space_envs.py:ImageObs", (space, ImageObs.action_space), frame_stack=4)
    assert isinstance(d.obs, FrameStacks)
    ends = d.dones  # this env's episodes end by time limit: taken as terminations, absorbing rows join the pool
    built = (np.asarray(d.obs), np.asarray(d.next_obs))
    gen = {k: np.random.default_rng(1).integers(0, 256, (64, *space.shape), np.uint8) for k in ("obs", "next")}
    losses, weights, pools = [], [], []
    for obs, next_obs in [(d.obs, d.next_obs), built]:
        th.manual_seed(0)
        cfg = DiscConfig(net_arch=[16], use_next_state=True, absorbing=True, grad_penalty=1.0)
        disc = Discriminator(space, ImageObs.action_space, cfg, "cpu", "gail")
        expert = expert_data(disc, obs, d.acts, next_obs, ends)
        assert isinstance(expert.batch.obs, FrameStacks) == (obs is d.obs)  # the pool holds frames, not stacks
        pools.append(expert.batch[th.arange(len(expert.batch))])
        g = disc.batch(gen["obs"], np.zeros(64, np.int64), gen["next"])
        rng = np.random.default_rng(0)
        losses.append(
            [
                disc.train_step(expert.batch[th.as_tensor(rng.integers(0, len(expert.batch), 32))], g)["disc/loss"]
                for _ in range(3)
            ]
        )
        ppo = PPOGenerator(
            space,
            ImageObs.action_space,
            PPOConfig(n_steps=8, batch_size=8),
            PolicyConfig(net_arch=[16]),
            False,
            1,
            "cpu",
            0,
        )
        ppo.behaviour_clone(expert.obs, expert.acts, 1, 32, 1e-3, np.random.default_rng(0))
        weights.append({k: v.clone() for k, v in ppo.policy.state_dict().items()})
    assert all(th.equal(getattr(pools[0], f), getattr(pools[1], f)) for f in ("obs", "next_obs", "next_absorbing"))
    assert not pools[0].obs[len(d) :].any()  # the absorbing rows' observations are zeros
    assert losses[0] == losses[1]
    assert all(th.equal(weights[0][k], weights[1][k]) for k in weights[0])


@pytest.mark.slow
def test_an_sb3_atari_expert_trained_on_its_own_frame_stack_records_and_evaluates(tmp_path):
    """An rl-zoo-style expert (SB3's `make_atari_env` and `VecFrameStack(4)`, 84x84x4 frames transposed by
    SB3 to 4x84x84) is checked against the env as train makes it (preprocessed and stacked, from
    experts/pong.gail.yaml), not the raw console frames; the recorded actions are the model's own
    `predict` on the stacks the file rebuilds, and `evaluate` plays the zip on the same pipeline."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    venv = VecFrameStack(make_atari_env("ALE/Pong-v5", n_envs=1, seed=0, env_kwargs={"frameskip": 1}), n_stack=4)
    model = PPO("CnnPolicy", venv, n_steps=32, batch_size=32, n_epochs=1, seed=0, device="cpu")
    model.learn(32)
    model.save(tmp_path / "zoo.zip")
    venv.close()
    out = tmp_path / "zoo.arrow"
    r = run_cli("demos", "record", "--expert", str(tmp_path / "zoo.zip"), "--env", "ALE/Pong-v5", "--episodes", "1",
                "--max-episode-steps", "60", "--out", str(out))  # fmt: skip
    assert r.returncode == 0, r.stderr
    cfg = EnvConfig(id="ALE/Pong-v5", preprocess="atari", frame_stack=4, max_episode_steps=60)
    d = demos.load(out, "ALE/Pong-v5", envs.spaces(cfg), frame_stack=4)
    assert d.obs.shape == (60, 4, 84, 84)
    want, _ = model.predict(np.asarray(d.obs), deterministic=True)
    np.testing.assert_array_equal(d.acts, want)
    r = run_cli("evaluate", str(tmp_path / "zoo.zip"), "--env", "ALE/Pong-v5", "--episodes", "1", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["policy"]["returns"], r.stderr
    # the same model in an rl-zoo3 log folder for the env id it trains on: its config.yml (rl-zoo3 dumps an
    # OrderedDict) names AtariWrapper and frame_stack, which pick the pipeline without flags
    import collections
    import shutil

    import yaml

    folder = tmp_path / "logs" / "ppo" / "PongNoFrameskip-v4_1"
    (folder / "PongNoFrameskip-v4").mkdir(parents=True)
    shutil.copy(tmp_path / "zoo.zip", folder / "PongNoFrameskip-v4.zip")
    params = collections.OrderedDict(
        [("env_wrapper", ["stable_baselines3.common.atari_wrappers.AtariWrapper"]), ("frame_stack", 4),
         ("n_envs", 8), ("policy", "CnnPolicy"), ("normalize", False)]
    )  # fmt: skip
    (folder / "PongNoFrameskip-v4" / "config.yml").write_text(yaml.dump(params))
    assert "python/object/apply:collections.OrderedDict" in (folder / "PongNoFrameskip-v4" / "config.yml").read_text()
    out = tmp_path / "zoo-folder.arrow"
    r = run_cli("demos", "record", "--expert", str(folder), "--episodes", "1", "--max-episode-steps", "30",
                "--out", str(out))  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "preprocess atari, frame_stack 4 (its config.yml)" in r.stdout + r.stderr
    cfg = EnvConfig(id="PongNoFrameskip-v4", preprocess="atari", frame_stack=4, max_episode_steps=30)
    d = demos.load(out, "PongNoFrameskip-v4", envs.spaces(cfg), frame_stack=4)
    np.testing.assert_array_equal(d.acts, model.predict(np.asarray(d.obs), deterministic=True)[0])
    assert demos.load_file(out).meta.recorded_with == "env.preprocess=atari env.frame_stack=4"
    # training on the raw env says which settings the file was recorded with
    r = run_cli("train", "--env", "PongNoFrameskip-v4", "--demos", str(out), "--run-dir", str(tmp_path / "r"))
    assert r.returncode == 2 and "--set env.preprocess=atari --set env.frame_stack=4" in r.stderr, r.stderr
    # a config.yml with any other tag is refused in one line and runs nothing
    marker = tmp_path / "ran"
    (folder / "PongNoFrameskip-v4" / "config.yml").write_text(f"!!python/object/apply:os.system ['touch {marker}']\n")
    r = run_cli("demos", "record", "--expert", str(folder), "--episodes", "1", "--out", str(tmp_path / "no.arrow"))
    assert r.returncode == 2 and "config.yml: not rl-zoo3's hyperparameters" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not marker.exists() and not (tmp_path / "no.arrow").exists()
