"""The off-policy generator (`generator: sac`) end to end at tiny sizes: its replay, rewards judged when
sampled, exact resume, actor processes, ONNX and SB3 exports; and the references of loose demos."""

import csv
import shutil

import gymnasium as gym
import numpy as np
import pytest
import torch as th
import yaml
from conftest import ROOT, onnx_plays_as_torch, resumed_equals_uninterrupted, run_cli

from gailkit import config
from gailkit.algo.generator.replay import Replay
from gailkit.config import DiscConfig
from gailkit.data import demos
from gailkit.run import checkpoint, export, train

PENDULUM = ROOT / "data" / "pendulum.arrow"
SAC = [
    "generator=sac",
    "n_envs=1",
    "sac.learning_starts=32",
    "sac.batch_size=32",
    "sac.buffer_size=5000",
    "policy.net_arch=[16]",
    "disc.grad_penalty=1",
    "sac.n_steps=16",
]


@pytest.fixture(scope="module")
def pendulum_small(tmp_path_factory):
    d = demos.subsample(demos.load_file(PENDULUM), episodes=2, every=1, seed=0)
    return demos.save(d, tmp_path_factory.mktemp("demos") / "p.arrow")


def _config(demos_path, extra=()):
    return train.train_config("Pendulum-v1", str(demos_path), None, [*SAC, *extra], preset="tiny")


@pytest.fixture(scope="module")
def sac_run(tmp_path_factory, pendulum_small):
    run = tmp_path_factory.mktemp("sac") / "run"
    cfg = _config(pendulum_small, ["total_steps=160", "eval_every=5", "checkpoint_every=5"])
    s = train.train(cfg, run, quiet=True, log=lambda m: None)
    assert s["rounds"] == 10 and s["env_steps"] == 160
    return run


def test_sac_trains_from_its_replay_and_says_so_in_its_metrics(sac_run):
    rows = list(csv.DictReader(open(sac_run / "metrics.csv")))
    sizes = [float(r["replay/size"]) for r in rows]
    assert sizes == [16.0 * (i + 1) for i in range(10)]  # every round's transitions join the replay
    assert not rows[0].get("train/critic_loss")  # nothing before learning_starts (32 transitions)
    assert rows[-1]["train/critic_loss"] and rows[-1]["train/ent_coef"] and float(rows[-1]["train/n_updates"]) == 144
    state = checkpoint.load(sac_run / "final" / "checkpoint.pt")
    assert state.settings.generator == "sac" and state.settings.bc.epochs == 0  # whole episodes: no BC with sac
    assert state.settings.sac.bc_weight == 0.0
    assert set(state.learner["generator"]) >= {"policy", "critic", "critic_target", "replay"}


def test_rewards_are_the_current_discriminators_when_sampled():
    """A replayed transition is judged by the discriminator of the moment, and a terminated one also
    earns the absorbing state's discounted value."""
    from gailkit.algo.discriminator import Discriminator
    from gailkit.algo.generator.sac import SACGenerator
    from gailkit.algo.learner import Learner, expert_data
    from gailkit.config import PolicyConfig, SACConfig, TrainConfig

    obs_space = gym.spaces.Box(-1, 1, (3,), np.float32)
    act_space = gym.spaces.Box(-2, 2, (1,), np.float32)
    gen = SACGenerator(obs_space, act_space, SACConfig(), PolicyConfig(net_arch=[8]), False, "cpu", 0)
    disc = Discriminator(obs_space, act_space, DiscConfig(net_arch=[8]), "cpu", "gail")
    rng = np.random.default_rng(0)
    obs = rng.uniform(-1, 1, (64, 3)).astype(np.float32)
    acts = rng.uniform(-2, 2, (64, 1)).astype(np.float32)
    ended = np.zeros(64, bool)
    ended[::8] = True
    exp = expert_data(disc, obs, acts, obs, ended)
    learner = Learner(TrainConfig(generator="sac"), gen, disc, exp, rng)
    before = learner._relabel(obs, acts, obs, ended)
    r_abs = float(disc.reward(disc.absorbing(1))[0])
    plain = disc.reward(disc.batch(obs, acts, obs, None, ended))
    assert th.allclose(before[~ended], plain[~ended])
    assert th.allclose(before[ended], plain[ended] + 0.99 * r_abs / 0.01, rtol=1e-5)
    learner._disc_steps(learner._draws(disc.batch(obs[:32] + 0.5, acts[:32], obs[:32], None, ended[:32])))
    assert not th.allclose(learner._relabel(obs, acts, obs, ended), before)  # judged again, by the new one


def test_the_replay_is_a_bounded_ring_and_travels_as_arrow(monkeypatch):
    obs_space, act_space = gym.spaces.Box(-1, 1, (2,), np.float32), gym.spaces.Box(-1, 1, (1,), np.float32)
    r = Replay(obs_space, act_space, capacity=5)
    for i in range(3):  # 9 transitions into 5 rows: the oldest 4 go
        o = np.full((3, 2), i * 3 + np.arange(3)[:, None], np.float32)
        r.add(o, o[:, :1], o + 0.5, np.array([False, False, i == 2]))
    assert r.size == 5
    back = Replay(obs_space, act_space, capacity=5)
    back.load_state(r.state())
    held = back._ordered()
    assert held["obs"][:, 0].tolist() == [4, 5, 6, 7, 8] and held["terminated"].tolist() == [0, 0, 0, 0, 1]
    other = Replay(gym.spaces.Box(-1, 1, (3,), np.float32), act_space, capacity=5)
    with pytest.raises(ValueError, match="replay column obs"):
        other.load_state(r.state())
    with pytest.raises(ValueError, match="unreadable replay"):
        other.load_state(b"\xff" * 64)
    monkeypatch.setenv("GAILKIT_MEMORY_BUDGET", "1M")  # the memory budget bounds it too
    assert Replay(obs_space, act_space, capacity=10**9).capacity == (1 << 20) // (4 * 2 + 4 + 4 * 2 + 1)


def _stacked_transitions(k: int, n_envs: int, steps: int, seed: int = 0):
    """Fragments of gymnasium's own frame stacks (FrameStackObservation over a pixel env with Box actions),
    `n_envs` envs stepped side by side, episodes of 16 steps ended and reset inside the fragments."""
    from gymnasium.wrappers import FrameStackObservation
    from space_envs import ImageBoxAct

    envs = [FrameStackObservation(ImageBoxAct(), k) for _ in range(n_envs)]
    obs = [e.reset(seed=seed + i)[0] for i, e in enumerate(envs)]
    out: dict[str, list] = {"obs": [], "acts": [], "next_obs": [], "terminated": []}
    starts = n_envs
    for t in range(steps):
        for i, e in enumerate(envs):
            act = np.array([t * n_envs + i], np.float32)  # each transition's action tells it apart
            nxt, _, term, trunc, _ = e.step(np.zeros(1, np.float32))
            (
                out["obs"].append(obs[i]),
                out["acts"].append(act),
                out["next_obs"].append(nxt),
                out["terminated"].append(term),
            )
            obs[i] = nxt
            if term or trunc:
                obs[i], starts = e.reset()[0], starts + 1
    return {k2: np.asarray(v) for k2, v in out.items()}, starts, envs[0].observation_space


def _check_sampled(r, want, n=400, seed=0):
    """Every sampled transition is one that was added: its stacks as they were, by its action's id."""
    obs, acts, nxt, term = r.sample(n, np.random.default_rng(seed))
    ids = acts[:, 0].astype(int)
    np.testing.assert_array_equal(obs, want["obs"][ids])
    np.testing.assert_array_equal(nxt, want["next_obs"][ids])
    np.testing.assert_array_equal(term, want["terminated"][ids])
    return ids


def test_frame_stacks_are_held_as_their_frames_once_and_sampled_as_the_env_gave_them(monkeypatch):
    from gailkit.algo.generator import frame_replay

    k, n_envs, steps = 4, 3, 40
    want, starts, space = _stacked_transitions(k, n_envs, steps)
    act_space = gym.spaces.Box(-1e6, 1e6, (1,), np.float32)
    r = frame_replay.make_replay(space, act_space, 10_000, frame_stack=k)
    assert isinstance(r, frame_replay.FrameReplay)
    assert isinstance(frame_replay.make_replay(space, act_space, 10, frame_stack=1), Replay)  # no stack: whole rows
    n = len(want["acts"])
    for t in range(0, steps, 8):  # fragments of 8 steps x 3 envs, rows step-major as merge_steps gives them
        rows = slice(t * n_envs, (t + 8) * n_envs)
        r.add(want["obs"][rows], want["acts"][rows], want["next_obs"][rows], want["terminated"][rows])
    # one new frame a transition, K + 1 for the first of each episode (fewer where a stack was held already)
    assert r.size == n and n <= r.written <= n + k * starts
    ids = _check_sampled(r, want)
    assert len(set(ids.tolist())) >= 100  # of 120: drawn from all of them
    whole = Replay(space, act_space, 10_000)
    # 2 frames a transition and 2K ids, not 2K frames (2.6x less at these 64-byte frames, 4x at Pong's)
    assert r.bytes / r.capacity < whole.bytes / whole.capacity / 2.5

    # a ring of 20 transitions: the oldest go, and a transition is never sampled once its frames are gone
    small = frame_replay.make_replay(space, act_space, 20, frame_stack=k)
    small.add(want["obs"], want["acts"], want["next_obs"], want["terminated"])
    assert small.size == 20 and set(_check_sampled(small, want).tolist()) <= set(range(n - 20, n))

    # checkpoints: the same transitions back, also from a replay of whole stacks (a run from before)
    back = frame_replay.make_replay(space, act_space, 10_000, frame_stack=k)
    back.load_state(r.state())
    assert back.size == n and back.written == r.written
    for a, b in zip(back.sample(64, np.random.default_rng(3)), r.sample(64, np.random.default_rng(3)), strict=True):
        np.testing.assert_array_equal(a, b)
    whole.add(want["obs"], want["acts"], want["next_obs"], want["terminated"])
    older = frame_replay.make_replay(space, act_space, 10_000, frame_stack=k)
    older.load_state(whole.state())
    assert older.size == n and older.written == r.written
    _check_sampled(older, want)
    shrunk = frame_replay.make_replay(space, act_space, 20, frame_stack=k)
    shrunk.load_state(r.state())
    assert shrunk.size == 20 and set(_check_sampled(shrunk, want).tolist()) <= set(range(n - 20, n))

    monkeypatch.setattr(frame_replay, "FRAMES_PER_ROW", 1)  # a frame ring too small for every transition held
    tight = frame_replay.make_replay(space, act_space, 20, frame_stack=k)
    tight.add(want["obs"], want["acts"], want["next_obs"], want["terminated"])
    lost = ~tight._rows_held(np.arange(tight.size))
    assert 0 < lost.sum() < 20
    sampled = set(_check_sampled(tight, want).tolist())
    assert len(sampled) == 20 - lost.sum()  # only transitions whose frames are all held, each as it was


def test_a_frame_replay_checkpoint_that_does_not_fit_is_refused_and_changes_nothing():
    import struct

    from gailkit.algo.generator import frame_replay

    want, _, space = _stacked_transitions(2, 2, 20)
    act_space = gym.spaces.Box(-1e6, 1e6, (1,), np.float32)
    r = frame_replay.make_replay(space, act_space, 1000, frame_stack=2)
    r.add(want["obs"], want["acts"], want["next_obs"], want["terminated"])
    blob = r.state()
    m = len(frame_replay.MAGIC)
    n_header, n_a, n_b = struct.unpack("<QQQ", blob[m : m + 24])
    header = blob[m + 24 : m + 24 + n_header]
    bad_header = header.replace(b'"first": 0', b'"first": 5')
    forged = blob[:m] + struct.pack("<QQQ", len(bad_header), n_a, n_b) + bad_header + blob[m + 24 + n_header :]
    other = frame_replay.make_replay(
        gym.spaces.Box(0, 255, (2, 8, 8, 3), np.uint8), act_space, 1000, frame_stack=2
    )  # a colour frame, not grey
    cases = [
        (blob[: len(blob) // 2], "lengths do not add up"),
        (blob[: m + 24] + b"{not json" + blob[m + 24 + n_header :], "unreadable replay"),
        (forged, "frames 5..|names frames outside"),
        (b"\xff" * 64, "unreadable replay"),
    ]
    for data, says in cases:
        before = r.state()
        with pytest.raises(ValueError, match=says):
            r.load_state(data)
        assert r.state() == before
    with pytest.raises(ValueError, match="replay column frames is"):
        other.load_state(blob)


def test_sac_on_frame_stacks_holds_each_frame_once_resumes_exactly_and_exports(tmp_path):
    """A pixel env with Box actions and `env.frame_stack: 2`, from the user's own file: SAC's replay holds
    its frames once (the checkpoint says so), a resumed run equals the uninterrupted one, and the ONNX
    policy takes the uint8 stacks and plays as the torch policy does."""

    from gailkit.algo.generator import frame_replay

    env, out = "tests/space_envs.py:ImageBoxAct", tmp_path / "frames.arrow"
    r = run_cli("demos", "record", "--env", env, "--expert", "tests/space_envs.py:image_box_expert",
                "--episodes", "6", "--frame-stack", "2", "--out", str(out))  # fmt: skip
    assert r.returncode == 0, r.stderr
    sets = ["generator=sac", "n_envs=1", "sac.learning_starts=32", "sac.batch_size=32", "sac.n_steps=16",
            "env.frame_stack=2", "total_steps=128", "checkpoint_every=4", "eval_every=4", "eval_episodes=2"]  # fmt: skip
    cfg = train.train_config(env, str(out), None, sets, preset="tiny")
    full = tmp_path / "full"
    train.train(cfg, full, quiet=True, log=lambda m: None, allow_code=True)
    blob = checkpoint.load(full / "final" / "checkpoint.pt").learner["generator"]["replay"]
    held = frame_replay.FrameReplay(gym.spaces.Box(0, 255, (2, 8, 8, 1), np.uint8), gym.spaces.Box(-1, 1, (1,)), 128)
    held.load_state(blob.numpy().tobytes())
    assert bytes(blob[:8].numpy()) == frame_replay.MAGIC and held.size == 128
    assert held.written <= 128 + 2 * 8  # one frame a step, 2 more for each of the 8 episodes' first
    resumed_equals_uninterrupted(cfg, full, tmp_path / "resumed", last_round=8)
    report = onnx_plays_as_torch(full, env, tmp_path / "frames.onnx")
    assert len(set(report["policy"]["returns"])) == 2  # returns that tell actions apart, not a constant


def test_a_replay_cut_to_the_memory_budget_says_so_when_the_run_starts(tmp_path, pendulum_small, monkeypatch):
    lines: list[str] = []
    cfg = _config(pendulum_small, ["total_steps=32", "eval_every=0", "sac.buffer_size=100000"])
    train.train(cfg, tmp_path / "roomy", quiet=True, log=lines.append)
    assert not [m for m in lines if m.startswith("replay:")]  # 100,000 rows of Pendulum fit the machine's budget
    monkeypatch.setenv("GAILKIT_MEMORY_BUDGET", "1M")
    train.train(cfg, tmp_path / "cut", quiet=True, log=lines.append)
    said = [m for m in lines if m.startswith("replay:")]
    per = 3 * 4 * 2 + 4 + 1  # obs and next_obs (3 float32), the action, terminated
    assert said == [
        f"replay: {(1 << 20) // per:,} transitions (1 MB), sac.buffer_size 100,000 cut to the memory budget "
        "(GAILKIT_MEMORY_BUDGET sets it)"
    ]


def test_resume_after_round_k_equals_uninterrupted(tmp_path, pendulum_small):
    cfg = _config(
        pendulum_small, ["total_steps=128", "eval_every=2", "checkpoint_every=4", "bc.epochs=2", "sac.bc_weight=0.4"]
    )
    full = tmp_path / "full"
    train.train(cfg, full, quiet=True, log=lambda m: None)
    resumed = tmp_path / "resumed"
    shutil.copytree(full, resumed)
    (resumed / "checkpoints" / "round_000008.pt").unlink()
    shutil.rmtree(resumed / "final")
    assert train.train(cfg, resumed, resume=True, quiet=True, log=lambda m: None)["rounds"] == 8
    a = checkpoint.load(full / "final" / "checkpoint.pt").learner
    b = checkpoint.load(resumed / "final" / "checkpoint.pt").learner
    for part, key in (("generator", "policy"), ("generator", "critic"), ("discriminator", "net")):
        for name, tensor in a[part][key].items():
            assert th.equal(tensor, b[part][key][name]), (part, key, name)
    assert th.equal(a["generator"]["replay"], b["generator"]["replay"])


@pytest.mark.parametrize("lag", [0, 1])
def test_actor_processes_run_the_squashed_policy(tmp_path, pendulum_small, lag):
    """Actor processes build SAC's actor from the wire's policy kind; with `max_policy_lag: 1` they collect
    the next round while the learner updates (fragments one version old join the replay)."""
    extra = [
        "total_steps=128",
        "fleet.actors=2",
        "fleet.envs_per_actor=1",
        "eval_every=0",
        f"fleet.max_policy_lag={lag}",
    ]
    cfg = _config(pendulum_small, extra)
    s = train.train(cfg, tmp_path / "run", quiet=True, log=lambda m: None)
    assert s["env_steps"] == 128
    rows = list(csv.DictReader(open(tmp_path / "run" / "metrics.csv")))
    assert float(rows[-1]["replay/size"]) == 128 and rows[-1]["train/actor_loss"]
    assert max(float(r["actors/policy_lag"]) for r in rows) == lag


def test_onnx_and_sb3_exports_of_a_sac_run(sac_run, tmp_path):
    out = export.export(sac_run, tmp_path / "p.onnx", with_log_prob=True)
    assert out["parity"]["ok"]
    from gailkit.inference import OnnxPolicy

    onnx = OnnxPolicy(tmp_path / "p.onnx")
    acts = onnx.predict(np.random.default_rng(0).uniform(-1, 1, (50, 3)).astype(np.float32))
    assert acts.shape == (50, 1) and np.abs(acts).max() <= 2.0  # the Box's units, inside its bounds
    r = run_cli("export", str(sac_run), "--out", str(tmp_path / "v.onnx"), "--value")
    assert r.returncode == 2 and "no state-value function" in r.stderr and not (tmp_path / "v.onnx").exists()
    r = run_cli("export", str(sac_run), "--out", str(tmp_path / "c.onnx"), "--sb3", str(tmp_path / "c.zip"))
    assert r.returncode == 0 and f"wrote {tmp_path / 'c.zip'} (stable-baselines3 SAC)" in r.stdout, r.stderr
    from stable_baselines3 import SAC

    model = SAC.load(export.export_sb3(sac_run, tmp_path / "m.zip"))
    pol, _ = checkpoint.load_policy(sac_run / "best" / "checkpoint.pt")
    o = np.zeros((1, 3), np.float32)
    from gailkit.model import policy

    assert np.allclose(model.predict(o, deterministic=True)[0], policy.act(pol, o, deterministic=True)[0], atol=1e-5)


def test_sac_on_discrete_actions_is_refused_in_one_line(tmp_path):
    r = run_cli(
        "train", "--env", "CartPole-v1", "--demos", "data/cartpole.arrow", "--generator", "sac",
        "--run-dir", str(tmp_path / "r"), "--preset", "tiny",
    )  # fmt: skip
    assert r.returncode == 2 and "generator 'sac' needs a continuous (Box) action space" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "r").exists()


def test_subsampled_demos_carry_their_sources_expert_return_and_no_episode_return(tmp_path):
    r = run_cli(
        "demos", "subsample", "data/pendulum.arrow", str(tmp_path / "s.arrow"), "--episodes", "4", "--every", "20"
    )
    assert r.returncode == 0, r.stderr
    assert "expert return -172.8 (expert policy, of pendulum.arrow)" in r.stdout
    d = demos.load(tmp_path / "s.arrow", "Pendulum-v1", None)
    assert len(d) == 40 and not d.whole_episodes() and d.episode_returns() is None
    # the same transitions with no expert return in the file: the reference is unknown, not their sum
    d.meta.expert_return = None
    demos.save(d, tmp_path / "bare.arrow")
    assert demos.expert_reference(demos.load(tmp_path / "bare.arrow", "Pendulum-v1", None)) == (None, "unknown")
    whole = demos.load_file(PENDULUM)
    whole.meta.expert_return = None
    assert demos.expert_reference(whole)[1] == "demos"  # whole episodes: their mean return, named so


def test_generator_dependent_settings_resolve_once_for_the_run():
    from gailkit.algo.generator import resolve
    from gailkit.config import TrainConfig

    box, discrete = gym.spaces.Box(-1, 1, (2,), np.float32), gym.spaces.Discrete(3)
    sac = resolve(TrainConfig(generator="sac"), box)
    assert (sac.generator, sac.disc.grad_penalty, sac.round_steps) == ("sac", 10.0, 32)  # DAC penalty, 1 env x 32
    ppo = resolve(TrainConfig(), discrete)
    assert (ppo.generator, ppo.disc.grad_penalty) == ("ppo", 0.0)
    mine = resolve(TrainConfig(generator="sac", disc=DiscConfig(grad_penalty=0.5)), box)
    assert mine.disc.grad_penalty == 0.5  # a value the user set stays


def test_auto_keeps_ppo_for_whole_episodes_however_slow_the_env_and_never_steps_it():
    """From whole episodes with actions PPO with its kept BC term reached the expert in fewer env steps than SAC
    (BENCHMARKS.md, "(a) 25 full episodes with SAC"), so a slow env does not make sac the faster one: `auto`
    takes ppo for whole episodes whatever the env's step costs, and no longer steps the env to time it (an env
    whose step raises is resolved without a step)."""
    from gailkit.algo.generator import choose, resolve
    from gailkit.config import TrainConfig

    auto = TrainConfig()
    box, unbounded = gym.spaces.Box(-1, 1, (2,), np.float32), gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    assert choose(auto, box) == "ppo" and choose(TrainConfig(generator="sac"), box) == "sac"
    assert choose(auto, unbounded) == "ppo" and choose(auto, gym.spaces.Discrete(2)) == "ppo"
    for name in ("SlowBox", "StepRaises"):  # 80 ms a step; a step that raises
        env = TrainConfig(env=config.EnvConfig(id=str(ROOT / "tests" / "slow_env.py") + ":" + name))
        assert resolve(env, box).generator == "ppo"
        assert resolve(env, box, loose=True).generator == "sac"  # loose transitions: sac, as below


def test_auto_picks_sac_for_demos_without_actions_wherever_sac_can_act(tmp_path, pendulum_small):
    """Without the expert's actions PPO stayed at the random policy's level on every env measured and SAC
    reached the expert: `auto` takes sac for a bounded Box action space, whatever the env's step costs,
    and still ppo where SAC cannot act. A real `gailkit train` with no --generator records the choice."""
    from gailkit.algo.generator import choose
    from gailkit.config import TrainConfig

    auto, box = TrainConfig(), gym.spaces.Box(-1, 1, (2,), np.float32)
    assert choose(auto, box, has_actions=False) == "sac" and choose(auto, box) == "ppo"
    unbounded = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    assert choose(auto, gym.spaces.Discrete(2), has_actions=False) == "ppo"
    assert choose(auto, unbounded, has_actions=False) == "ppo"
    assert choose(TrainConfig(generator="ppo"), box, has_actions=False) == "ppo"  # a user's choice stays
    obs_only = demos.save(demos.strip_actions(demos.load_file(pendulum_small)), tmp_path / "obs.arrow")
    for d, want in ((obs_only, "sac"), (pendulum_small, "ppo")):
        run = tmp_path / f"run-{want}"
        r = run_cli(
            "train", "--env", "Pendulum-v1", "--demos", str(d), "--run-dir", str(run), "--preset", "tiny",
            "--set", "total_steps=64", "--set", "eval_every=0", "--quiet",
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert yaml.safe_load((run / "config.yaml").read_text())["generator"] == want
        first = next(line for line in (r.stdout + r.stderr).splitlines() if line.startswith("gailkit train:"))
        assert f", {want}, " in first


def test_auto_picks_sac_for_loose_transitions_with_actions_without_timing_the_env(tmp_path):
    """From loose transitions with actions (subsampled: no whole episode) PPO reached 0.9 on 4 of 12 MuJoCo runs
    and SAC with its auto settings for them on 11 of 12: `auto` takes sac for a bounded Box whatever the env's
    step costs, ppo where SAC cannot act; whole episodes keep ppo. A real `gailkit train` with no
    --generator records the choice and SAC's settings for such data."""
    from gailkit.algo.generator import choose, resolve
    from gailkit.config import TrainConfig

    auto, box = TrainConfig(), gym.spaces.Box(-1, 1, (2,), np.float32)
    assert choose(auto, box, loose=True) == "sac"
    assert choose(auto, gym.spaces.Discrete(2), loose=True) == "ppo"
    assert choose(auto, gym.spaces.Box(-np.inf, np.inf, (2,), np.float32), loose=True) == "ppo"
    assert choose(TrainConfig(generator="ppo"), box, loose=True) == "ppo"  # a user's choice stays
    pendulum = TrainConfig(env=config.EnvConfig(id="Pendulum-v1"))
    assert resolve(pendulum, box, loose=True).generator == "sac" and resolve(pendulum, box).generator == "ppo"
    loose = demos.save(demos.subsample(demos.load_file(PENDULUM), episodes=2, every=5, seed=0), tmp_path / "l.arrow")
    assert not demos.load_file(loose).whole_episodes()
    run = tmp_path / "run"
    r = run_cli(
        "train", "--env", "Pendulum-v1", "--demos", str(loose), "--run-dir", str(run), "--preset", "tiny",
        "--set", "total_steps=64", "--set", "eval_every=0", "--quiet",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert (saved["generator"], saved["sac"]["bc_weight"], saved["bc"]["epochs"]) == ("sac", 0.4, 50)
    first = next(line for line in (r.stdout + r.stderr).splitlines() if line.startswith("gailkit train:"))
    assert ", sac, " in first


def test_sac_learns_from_observations_only(tmp_path, pendulum_small):
    """Demos without actions: the discriminator judges (obs, next_obs) of replayed transitions."""
    obs_only = demos.save(demos.strip_actions(demos.load_file(pendulum_small)), tmp_path / "obs.arrow")
    cfg = _config(obs_only, ["total_steps=96", "eval_every=0"])
    train.train(cfg, tmp_path / "run", quiet=True, log=lambda m: None)
    state = checkpoint.load(tmp_path / "run" / "final" / "checkpoint.pt")
    assert not state.settings.disc.use_action and state.settings.disc.use_next_state
    rows = list(csv.DictReader(open(tmp_path / "run" / "metrics.csv")))
    assert rows[-1]["train/critic_loss"] and float(rows[-1]["replay/size"]) == 96


def test_a_bc_term_inside_the_actor_loss_holds_the_actor_to_the_experts_actions(tmp_path, pendulum_small):
    """`sac.bc_weight` adds TD3+BC's term to every actor step of SAC's own update: the same run with it ends
    nearer the demos' actions than without it, and it is refused for demos without actions."""
    from gailkit.model import policy

    d = demos.load_file(pendulum_small)
    errors = {}
    for weight in (0.0, 5.0):
        run = tmp_path / f"w{weight}"
        cfg = _config(
            pendulum_small, ["total_steps=192", "eval_every=0", "sac.learning_rate=0.003", f"sac.bc_weight={weight}"]
        )
        train.train(cfg, run, quiet=True, log=lambda m: None)
        rows = list(csv.DictReader(open(run / "metrics.csv")))
        assert bool(rows[-1].get("train/bc_anchor_error")) == (weight > 0)
        pol, _ = checkpoint.load_policy(run / "final" / "checkpoint.pt")
        acts, _ = policy.act(pol, d.obs, deterministic=True)
        errors[weight] = float(np.mean((acts - d.acts) ** 2))
    assert errors[5.0] < 0.5 * errors[0.0], errors
    obs_only = demos.save(demos.strip_actions(d), tmp_path / "obs.arrow")
    r = run_cli(
        "train", "--env", "Pendulum-v1", "--demos", str(obs_only), "--generator", "sac", "--set", "sac.bc_weight=1",
        "--run-dir", str(tmp_path / "r"), "--preset", "tiny",
    )  # fmt: skip
    assert r.returncode == 2 and "'sac.bc_weight': behaviour cloning needs the expert's actions" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "r").exists()


def test_loose_transitions_give_sac_a_bc_warm_start_and_the_bc_term_by_default(tmp_path):
    """From loose transitions with actions (every 5th: no whole episode), SAC's auto settings clone the demos
    first and keep TD3+BC's term in the actor's loss (0.4); set explicitly, either stays as set."""
    loose = demos.subsample(demos.load_file(PENDULUM), episodes=2, every=5, seed=0)
    path = demos.save(loose, tmp_path / "loose.arrow")
    from gailkit.run.callbacks import Callback

    class SeesBC(Callback):
        def on_bc(self, run, stats):
            cloned.append(bool(stats) and stats["bc/loss_last"] < stats["bc/loss_first"])

    for extra, want in (([], (50, 0.4)), (["bc.epochs=0", "sac.bc_weight=0"], (0, 0.0))):
        run, cloned = tmp_path / f"run{len(extra)}", []
        cfg = _config(path, ["total_steps=64", "eval_every=0", *extra])
        train.train(cfg, run, quiet=True, log=lambda m: None, callbacks=[SeesBC()])
        assert cloned == [want[0] > 0], cloned  # the warm start ran, and fit the demos, or did not run
        state = checkpoint.load(run / "final" / "checkpoint.pt")
        assert (state.settings.bc.epochs, state.settings.sac.bc_weight) == want
        assert state.settings.bc.steps_per_round == 0  # SAC has its term in the actor's loss, not BC steps
        rows = list(csv.DictReader(open(run / "metrics.csv")))
        assert bool(rows[-1].get("train/bc_anchor_error")) == (want[1] > 0)


def test_a_linear_schedule_lowers_every_sac_optimizers_rate_with_the_runs_progress(tmp_path, pendulum_small):
    cfg = _config(pendulum_small, ["total_steps=160", "sac.linear_schedule=true", "sac.learning_rate=0.001"])
    train.train(cfg, tmp_path / "run", quiet=True, log=lambda m: None)
    rows = [r for r in csv.DictReader(open(tmp_path / "run" / "metrics.csv")) if r.get("train/learning_rate")]
    steps = [float(r["env_steps"]) for r in rows]
    rates = [float(r["train/learning_rate"]) for r in rows]
    assert len(rates) == 9 and rates == pytest.approx(
        [0.001 * (1 - (s - 16) / 160) for s in steps]
    )  # as of the round's start
    state = checkpoint.load(tmp_path / "run" / "final" / "checkpoint.pt").learner["generator"]
    for name in ("actor_optimizer", "critic_optimizer", "ent_coef_optimizer"):  # all three, as SB3 schedules them
        assert state[name]["param_groups"][0]["lr"] == pytest.approx(rates[-1])
