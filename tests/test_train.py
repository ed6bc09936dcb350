"""The GAIL trainer end to end at tiny sizes: runs, resume equality, signals, settings errors, the CLI."""

import csv
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch as th
from conftest import ROOT, run_cli

from gailkit import cli, config
from gailkit.config import TrainConfig
from gailkit.run import checkpoint, metrics, rundir, train


def tiny_config(demos_path, env_id="CartPole-v1", extra=()):
    return train.train_config(env_id, str(demos_path), None, list(extra), preset="tiny")


@pytest.fixture(scope="module")
def cartpole_file(tmp_path_factory, cartpole_demos):
    from gailkit.data import demos

    return demos.save(cartpole_demos, tmp_path_factory.mktemp("demos") / "cp.arrow")


def test_run_directory_contents(tmp_path, cartpole_file):
    cfg = tiny_config(cartpole_file, extra=["total_steps=192", "eval_every=2", "checkpoint_every=2"])
    s = train.train(cfg, tmp_path / "run", quiet=True, log=lambda m: None)
    run = tmp_path / "run"
    assert s["rounds"] == 3 and s["env_steps"] == 192 and not s["interrupted"]
    assert (run / "config.yaml").is_file() and (run / "final" / "checkpoint.pt").is_file()
    assert (run / "best" / "checkpoint.pt").is_file() and list((run / "tensorboard").iterdir())
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["round_000002.pt", "round_000003.pt"]
    rows = list(csv.DictReader(open(run / "metrics.csv")))
    assert [int(r["round"]) for r in rows] == [1, 2, 3]
    assert rows[1]["eval/return_mean"] and not rows[0]["eval/return_mean"]
    assert all(0 <= float(r["disc/acc_expert"]) <= 1 for r in rows)
    for key in (
        "train/loss",
        "train/learning_rate",
        "train/clip_range",
        "train/n_updates",
        "time/collect_fps",
        "disc/reward_std",
        "disc/logit_expert",
        "time/bytes_per_s",
    ):  # every stat the round produces reaches the file
        assert rows[-1][key], key
    saved = config.build(TrainConfig, [("saved", config.read_yaml(run / "config.yaml"))])
    import dataclasses

    # config.yaml records what ran: BC's auto values filled in, and the generator `auto` chose
    auto_disc = dataclasses.replace(saved.disc, grad_penalty=-1.0)
    auto_sac = dataclasses.replace(saved.sac, bc_weight=-1.0)
    assert saved.sac.bc_weight == 0.0  # TD3+BC's term is SAC's, for loose transitions only
    assert (
        dataclasses.replace(saved, bc=cfg.bc, generator="auto", disc=auto_disc, sac=auto_sac, obs_stats="auto") == cfg
    )
    from gailkit.data import demos

    whole = demos.load_file(cartpole_file).whole_episodes()  # obs_stats auto: held under a clone of whole episodes
    assert saved.obs_stats == ("expert" if whole else "running")
    assert saved.generator == "ppo" and saved.disc.grad_penalty == 0.0
    assert (saved.bc.epochs, saved.bc.steps_per_round, saved.bc.anneal_steps) == (50, 100, 0) and cfg.bc.epochs == -1
    assert float(rows[0]["data/round_bytes"]) == 64 * (4 + 4) * 4 + 64 * 8  # obs, next_obs float32 x 4; int64 acts
    state = checkpoint.load(run / "final" / "checkpoint.pt")
    assert state.reward_fn == "gail" and state.references.random_episodes >= 20
    assert state.best.metric == "return" and state.best.round == 2


@pytest.mark.parametrize("subsample", [False, True])
def test_the_bc_term_is_kept_for_the_whole_run_and_the_normalizer_held_under_whole_episodes(tmp_path, subsample):
    """The shipped CartPole demos hold 50 whole episodes: the BC term never anneals and the policy's
    normalizer keeps the expert's statistics; 4 of them subsampled (loose transitions) keep the term too, and
    merge the generator's observations into the normalizer. config.yaml records what ran."""
    from gailkit.data import demos

    d = demos.check(demos.load_file(ROOT / "data" / "cartpole.arrow"))
    assert d.n_episodes >= 10 and d.whole_episodes()
    used = demos.subsample(d, 4, 20, 0) if subsample else d
    path = demos.save(used, tmp_path / "d.arrow")
    cfg = tiny_config(path, extra=["total_steps=64", "bc.epochs=1", "eval_every=0", "eval_episodes=1"])
    lines: list[str] = []
    train.train(cfg, tmp_path / "run", quiet=True, log=lines.append)
    cloned = [m for m in lines if m.startswith("behaviour cloning: 1 epochs over the demos")]
    assert len(cloned) == 1 and ("normalizer keeps the expert's statistics" in cloned[0]) is not subsample
    saved = config.build(TrainConfig, [("saved", config.read_yaml(tmp_path / "run" / "config.yaml"))])
    assert saved.bc.anneal_steps == 0 and saved.bc.steps_per_round == 100
    assert saved.obs_stats == ("running" if subsample else "expert") and cfg.obs_stats == "auto"
    pol = checkpoint.load(tmp_path / "run" / "final" / "checkpoint.pt").learner["generator"]["policy"]
    count = float(pol["features_extractor.count"])  # the normalizer: seeded with the demos, then the round's 64 steps?
    assert count == len(used) + (64 if subsample else 0)


def test_a_policy_that_reads_frames_anneals_its_bc_term_even_with_whole_episodes(tmp_path):
    """Whole episodes keep the BC term for vectors (above); a CNN policy's term still anneals over half the
    run at 10 steps a round (a kept term of 100 CNN steps a round was not measured). config.yaml says so."""
    env = "tests/space_envs.py:ImageObs"
    out = tmp_path / "frames.arrow"
    r = run_cli("demos", "record", "--env", env, "--expert", "tests/space_envs.py:image_expert", "--episodes", "3",
                "--out", str(out))  # fmt: skip
    assert r.returncode == 0, r.stderr
    cfg = tiny_config(out, env, ["total_steps=64", "bc.epochs=1", "eval_every=0", "eval_episodes=1"])
    train.train(cfg, tmp_path / "run", quiet=True, log=lambda m: None, allow_code=True)
    saved = config.build(TrainConfig, [("saved", config.read_yaml(tmp_path / "run" / "config.yaml"))])
    assert (saved.bc.anneal_steps, saved.bc.steps_per_round) == (32, 10)


def test_a_run_from_before_obs_stats_resumes_with_its_normalizer_moving(tmp_path):
    """Runs of an older gailkit merged every round's observations into the normalizer; their checkpoints name no
    `obs_stats`, and resuming one keeps doing what it did (today's auto would hold it under this clone)."""
    import yaml

    from gailkit.data import demos

    d = demos.check(demos.load_file(ROOT / "data" / "cartpole.arrow"))
    sets = ["bc.epochs=1", "eval_every=0", "eval_episodes=1", "checkpoint_every=1"]
    run = tmp_path / "run"
    train.train(tiny_config(ROOT / "data" / "cartpole.arrow", extra=[*sets, "total_steps=64", "obs_stats=running"]),
                run, quiet=True, log=lambda m: None)  # fmt: skip
    for ckpt in run.rglob("*.pt"):  # what such a run wrote
        data = th.load(ckpt, weights_only=True)
        del data["config"]["obs_stats"]
        th.save(data, ckpt)
    settings = yaml.safe_load((run / "config.yaml").read_text())
    del settings["obs_stats"]
    (run / "config.yaml").write_text(yaml.safe_dump(settings))
    train.train(tiny_config(ROOT / "data" / "cartpole.arrow", extra=[*sets, "total_steps=128"]), run, resume=True,
                quiet=True, log=lambda m: None)  # fmt: skip
    state = checkpoint.load(run / "final" / "checkpoint.pt")
    assert state.env_steps == 128 and state.settings.obs_stats == "running"
    assert float(state.learner["generator"]["policy"]["features_extractor.count"]) == len(d) + 128


def test_a_run_with_scaled_rewards_records_checkpoints_and_resumes_its_scale(tmp_path):
    """`ppo.reward_scale: returns` is recorded, its statistics are checkpointed, and a resumed run goes on from them
    (its count holds both legs' steps); without it the checkpoint holds none."""
    import yaml

    sets = ["bc.epochs=1", "eval_every=0", "eval_episodes=1", "checkpoint_every=1", "ppo.reward_scale=returns"]
    demos = ROOT / "data" / "cartpole.arrow"
    run = tmp_path / "run"
    train.train(tiny_config(demos, extra=[*sets, "total_steps=64"]), run, quiet=True, log=lambda m: None)
    assert yaml.safe_load((run / "config.yaml").read_text())["ppo"]["reward_scale"] == "returns"
    first = checkpoint.load(run / "final" / "checkpoint.pt").learner["generator"]["reward_scale"]
    assert 64 <= first["count"] < 65 and first["var"] != 1.0
    train.train(tiny_config(demos, extra=[*sets, "total_steps=128"]), run, resume=True, quiet=True,
                log=lambda m: None)  # fmt: skip
    state = checkpoint.load(run / "final" / "checkpoint.pt")
    assert state.env_steps == 128 and 128 <= state.learner["generator"]["reward_scale"]["count"] < 129
    rows = metrics.read_rows(run / "metrics.csv")
    scales = [float(r["train/reward_scale"]) for r in rows if r.get("train/reward_scale")]
    assert len(scales) == len(rows) == 2 and all(v > 0 for v in scales)  # rounds of 64 steps
    plain = tmp_path / "plain"
    train.train(tiny_config(demos, extra=[*sets[:-1], "total_steps=64"]), plain, quiet=True, log=lambda m: None)
    assert checkpoint.load(plain / "final" / "checkpoint.pt").learner["generator"]["reward_scale"] is None


def test_total_steps_round_up_to_whole_rounds_and_say_so(tmp_path, cartpole_file):
    cfg = tiny_config(cartpole_file, extra=["total_steps=100"])  # rounds of 2 envs x 32 steps = 64
    lines = []
    s = train.train(cfg, tmp_path / "run", quiet=True, log=lines.append)
    assert s["env_steps"] == 128
    first = next(line for line in lines if line.startswith("gailkit train:"))  # after the random baseline's line
    assert "2 rounds of 64 env steps = 128 (total_steps 100 rounded up to whole rounds)" in first


def test_resume_after_round_k_equals_uninterrupted(tmp_path, cartpole_file):
    cfg = tiny_config(
        cartpole_file,
        extra=[
            "total_steps=256",
            "eval_every=1",
            "checkpoint_every=2",
            "disc.replay_rounds=2",
            "disc.absorbing=true",
            "bc.epochs=2",
            "bc.steps_per_round=2",
            "bc.anneal_steps=200",
        ],
    )
    full = tmp_path / "full"
    train.train(cfg, full, quiet=True, log=lambda m: None)
    resumed = tmp_path / "resumed"
    shutil.copytree(full, resumed)
    (resumed / "checkpoints" / "round_000004.pt").unlink()
    shutil.rmtree(resumed / "final")
    s = train.train(cfg, resumed, resume=True, quiet=True, log=lambda m: None)
    assert s["rounds"] == 4
    a = checkpoint.load(full / "final" / "checkpoint.pt").learner
    b = checkpoint.load(resumed / "final" / "checkpoint.pt").learner
    for part, key in (("generator", "policy"), ("discriminator", "net")):
        for name, tensor in a[part][key].items():
            assert th.equal(tensor, b[part][key][name]), (part, name)
    rows = list(csv.DictReader(open(resumed / "metrics.csv")))
    assert [int(r["round"]) for r in rows] == [1, 2, 3, 4]


def test_resume_falls_back_to_the_newest_readable_checkpoint(tmp_path, cartpole_file):
    cfg = tiny_config(cartpole_file, extra=["total_steps=256", "checkpoint_every=1"])
    run = tmp_path / "run"
    train.train(cfg, run, quiet=True, log=lambda m: None)
    newest = run / "checkpoints" / "round_000004.pt"
    newest.write_bytes(newest.read_bytes()[:1000])  # cut short, as by a full disk
    shutil.rmtree(run / "final")
    lines = []
    s = train.train(
        tiny_config(cartpole_file, extra=["total_steps=320", "checkpoint_every=1"]),
        run,
        resume=True,
        quiet=True,
        log=lines.append,
    )
    assert s["rounds"] == 5
    warning = next(line for line in lines if "skipped" in line)
    assert "round_000004.pt" in warning and "weights_only=False" not in " ".join(lines)
    assert "resuming at round 3" in next(line for line in lines if line.startswith("gailkit train"))


def test_custom_env_learns_the_scripted_mapping(tmp_path):
    cfg = train.train_config(
        "CustomEnv",
        "data/customenv.arrow",
        None,
        ["total_steps=2048", "n_envs=4", "ppo.n_steps=64", "ppo.batch_size=64", "eval_episodes=5"],
    )
    s = train.train(cfg, tmp_path / "run", quiet=True, log=lambda m: None)
    assert s["action_error"] < 2 / 3  # a uniform random policy's error
    assert checkpoint.load(tmp_path / "run" / "best" / "checkpoint.pt").best.metric == "action_error"


@pytest.mark.parametrize(
    "args, message",
    [
        (["--env", "CartPol-v1"], "unknown env 'CartPol-v1'"),
        (
            ["--env", "Pendulum-v1", "--demos", "data/cartpole.arrow"],
            "no demos for Pendulum-v1; it holds: cartpole.arrow",
        ),
        (["--env", "CustomEnv", "--set", "ppo.batch_size=999999"], "'ppo.batch_size' 999999 exceeds"),
        (["--env", "CustomEnv", "--set", "ppo.use_sde=true"], "gSDE is not supported"),
        (["--env", "CustomEnv", "--set", "disc.demo_batch_size=0"], "'disc.demo_batch_size' must be >= 1, got 0"),
        (["--env", "CustomEnv", "--total-steps", "0"], "'total_steps' must be >= 1, got 0"),
        (["--env", "CustomEnv", "--set", "total_steps=1e400"], "'total_steps': expected a finite number"),
        (["--env", "CustomEnv", "--set", "total_steps=.inf"], "'total_steps': expected a finite number"),
        (["--env", "CustomEnv", "--set", "ppo.learning_rate=.nan"], "'ppo.learning_rate': expected a finite number"),
        (["--env", "CustomEnv", "--set", "ppo.learning_rate=-1"], "'ppo.learning_rate' must be > 0, got -1.0"),
        (["--env", "CustomEnv", "--set", "n_envs=100000"], "beyond what gailkit holds in memory"),
        (["--env", "CustomEnv", "--device", "cuda:7"], "no CUDA device"),
        (["--env", "CustomEnv", "--demos", "nowhere/"], "nowhere: no such file or folder"),
        (["--env", "CustomEnv", "--set", "fleet.max_policy_lag=1"], "needs actor processes"),
        (["--env", "CustomEnv", "--fleet", "ray"], "'fleet.kind: ray' needs 'fleet.actors' >= 1"),
        (["--env", "CustomEnv", "--listen", "tcp://127.0.0.1:0"], "'fleet.listen' needs 'fleet.actors' >= 1"),
        (
            ["--env", "CustomEnv", "--actors", "1", "--listen", "tcp://0.0.0.0:0"],
            "listening beyond loopback needs --key-file",
        ),
        (
            ["--env", "CustomEnv", "--actors", "1", "--listen", "udp://127.0.0.1:5"],
            "--listen udp://127.0.0.1:5: expected tcp://HOST:PORT",
        ),
        (
            [
                "--env",
                "CustomEnv",
                "--actors",
                "1",
                "--listen",
                "tcp://127.0.0.1:0",
                "--key-file",
                "data/cartpole.arrow",
            ],
            "--key-file data/cartpole.arrow: not a gailkit key file",
        ),
        (["--env", "CustomEnv", "--preset", "huge"], "--preset 'huge': unknown preset"),
        ([], "--env is required"),
    ],
)
def test_bad_settings_fail_before_training(tmp_path, capsys, args, message):
    if "cuda" in " ".join(args) and th.cuda.is_available():
        pytest.skip("this machine has CUDA")
    demos_flag = [] if "--demos" in args or not args else ["--demos", "data/customenv.arrow"]
    code = cli.main(["train", *args, *demos_flag, "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1, err
    assert not (tmp_path / "run").exists()  # a start that failed leaves no run folder


def test_busy_port_is_one_line_and_leaves_no_run_folder(tmp_path, capsys):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        code = cli.main(
            [
                "train",
                "--env",
                "CustomEnv",
                "--demos",
                "data/customenv.arrow",
                "--actors",
                "1",
                "--listen",
                f"tcp://127.0.0.1:{port}",
                "--run-dir",
                str(tmp_path / "run"),
            ]
        )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "cannot listen there (Address already in use)" in err, err
    assert not (tmp_path / "run").exists()


def test_resume_errors(tmp_path, capsys):
    code = cli.main(["train", "--resume", str(tmp_path / "nowhere")])
    assert code == 2 and "no config.yaml there" in capsys.readouterr().err
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.yaml").write_text("env: {id: CustomEnv}\ndemos: data/customenv.arrow\n")
    code = cli.main(["train", "--resume", str(tmp_path / "run")])
    assert code == 2 and "no checkpoints/round_*.pt to resume from" in capsys.readouterr().err
    assert (tmp_path / "run" / "config.yaml").is_file()  # a resumed run's folder is never removed


def test_a_run_folder_in_use_is_refused(tmp_path, capsys):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    code = cli.main(
        ["train", "--env", "CustomEnv", "--demos", "data/customenv.arrow", "--run-dir", str(tmp_path / "mine")]
    )
    assert code == 2 and "exists and is not empty" in capsys.readouterr().err
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


def test_demos_with_wrong_spaces(tmp_path, capsys, custom_demos):
    import dataclasses

    from gailkit.data import demos

    anon = dataclasses.replace(custom_demos, meta=demos.DemoMeta())
    demos.save(anon, tmp_path / "anon.arrow")
    code = cli.main(
        ["train", "--env", "CartPole-v1", "--demos", str(tmp_path / "anon.arrow"), "--run-dir", str(tmp_path / "r")]
    )
    assert code == 2 and "column 'obs' has shape (2,) per row" in capsys.readouterr().err


def test_cli_smoke_train_then_resume(tmp_path):
    run = tmp_path / "run"
    r = run_cli(
        "train",
        "--env",
        "CustomEnv",
        "--demos",
        "data/",
        "--preset",
        "tiny",
        "--total-steps",
        "128",
        "--run-dir",
        str(run),
    )
    assert r.returncode == 0, r.stderr
    assert "evaluation: return" in r.stdout and "action error vs scripted expert" in r.stdout
    first = next(line for line in r.stdout.splitlines() if line.startswith("gailkit train:"))
    assert first.startswith("gailkit train: CustomEnv") and first.endswith(f"run {run}")  # a line of its own
    r = run_cli("train", "--resume", str(run), "--total-steps", "256", "--quiet")
    assert r.returncode == 0, r.stderr
    assert "resuming at round 2" in r.stdout and "4 rounds, 256 env steps" in r.stdout


def _start_training(run, *extra):
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gailkit.cli",
            "train",
            "--env",
            "CustomEnv",
            "--demos",
            "data/",
            "--total-steps",
            "100000000",
            "--quiet",
            "--run-dir",
            str(run),
            *extra,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_rows(run, n, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and len(metrics.read_rows(run / "metrics.csv")) < n:
        time.sleep(0.2)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_sigint_and_sigterm_save_a_checkpoint_and_exit_0(tmp_path, sig):
    run = tmp_path / "run"
    proc = _start_training(run)
    _wait_for_rows(run, 3)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "interrupted, checkpoint saved" in out
    rows = metrics.read_rows(run / "metrics.csv")
    state, _ = rundir.RunDir(run).latest()
    assert state.round == int(rows[-1]["round"]) >= 3  # the checkpoint holds every round the metrics show
    assert not (run / "final").exists()


def test_metrics_survive_a_resumed_run_killed_before_its_first_round(tmp_path):
    run = tmp_path / "run"
    proc = _start_training(run, "--set", "checkpoint_every=2")
    _wait_for_rows(run, 6)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    kept = metrics.read_rows(run / "metrics.csv")
    last_ckpt = rundir.RunDir(run).latest()[0].round
    (run / "checkpoints" / ".round_000099.pt.999999.abcdefgh.tmp").write_bytes(
        b"half a checkpoint"
    )  # a killed writer's
    proc = subprocess.Popen(
        [sys.executable, "-m", "gailkit.cli", "train", "--resume", str(run), "--quiet"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (run / "checkpoints" / ".round_000099.pt.999999.abcdefgh.tmp").exists():
        time.sleep(0.05)
    proc.kill()  # before (or about when) its first new round ends
    proc.communicate(timeout=60)
    rows = metrics.read_rows(run / "metrics.csv")
    assert [r["round"] for r in rows[:last_ckpt]] == [r["round"] for r in kept[:last_ckpt]] and len(rows) >= last_ckpt
    assert not (run / "checkpoints" / ".round_000099.pt.999999.abcdefgh.tmp").exists()  # stale temp cleaned at start


@pytest.mark.parametrize("env_id", ["Acrobot-v1", "Hopper-v4", "Hopper-v5", "HalfCheetah-v5", "Pendulum-v1"])
def test_todays_envs_make_and_train(tmp_path, env_id):
    """gymnasium 1.x with numpy 2: Acrobot (which used np.float_ under gymnasium 0.29) and MuJoCo v4 and v5."""
    if env_id.startswith(("Hopper", "HalfCheetah")):
        pytest.importorskip("mujoco")  # the extra gailkit[mujoco]; the set-up installs it
    import gymnasium as gym
    import numpy as np

    from gailkit.data import demos, envs, experts

    space = envs.spaces(env_id)[1]
    space.seed(0)
    d = experts.record(lambda obs: space.sample(), env_id, episodes=2, seed=0, source="random")
    path = demos.save(d, tmp_path / "d.arrow")
    s = train.train(
        tiny_config(path, env_id, ["total_steps=64", "disc.absorbing=true"]),
        tmp_path / "run",
        quiet=True,
        log=lambda m: None,
    )
    assert s["rounds"] == 1 and np.isfinite(s["return_mean"])
    assert gym.__version__ >= "1" and np.__version__ >= "2"
