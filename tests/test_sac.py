"""The off-policy generator (`generator: sac`) end to end at tiny sizes: its replay, rewards judged when
sampled, exact resume, actor processes, ONNX and SB3 exports; and the references of loose demos."""

import csv
import shutil

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from conftest import ROOT, run_cli

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
    assert state.settings.generator == "sac" and state.settings.bc.epochs == 0  # no BC warm start with sac
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
    learner._train_discriminator(disc.batch(obs[:32] + 0.5, acts[:32], obs[:32], None, ended[:32]))
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


def test_auto_picks_sac_only_for_bounded_box_actions_of_slow_envs():
    from gailkit.algo.generator import SLOW_ENV_STEP_S, choose, resolve
    from gailkit.config import TrainConfig

    auto = TrainConfig()
    box, unbounded = gym.spaces.Box(-1, 1, (2,), np.float32), gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    assert choose(auto, box, SLOW_ENV_STEP_S * 2) == "sac" and choose(auto, box, SLOW_ENV_STEP_S / 2) == "ppo"
    assert choose(auto, unbounded, 1.0) == "ppo" and choose(auto, gym.spaces.Discrete(2), 1.0) == "ppo"
    assert choose(TrainConfig(generator="ppo"), box, 1.0) == "ppo"
    # a real env's step is timed: this test env sleeps 80 ms a step, Pendulum takes microseconds
    slow = TrainConfig(env=config.EnvConfig(id=str(ROOT / "tests" / "slow_env.py") + ":SlowBox"))
    assert resolve(slow, box).generator == "sac"
    assert resolve(TrainConfig(env=config.EnvConfig(id="Pendulum-v1")), box).generator == "ppo"


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
