"""The GAIL trainer end to end at tiny sizes: runs, resume equality, settings errors, the CLI."""

import csv
import shutil

import pytest
import torch as th

from gailkit import checkpoint, cli, config, train
from gailkit.config import TrainConfig

TINY = ["n_envs=2", "ppo.n_steps=32", "ppo.batch_size=32", "ppo.n_epochs=2", "ppo.net_arch=[16]",
        "disc.net_arch=[16]", "disc.demo_batch_size=32", "disc.n_disc_updates_per_round=2", "eval_episodes=1"]


def tiny_config(demos_path, env_id="CartPole-v1", extra=()):
    return train.train_config(env_id, str(demos_path), None, [*TINY, *extra])


@pytest.fixture(scope="module")
def cartpole_file(tmp_path_factory, cartpole_demos):
    from gailkit import demos

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
    saved = config.build(TrainConfig, [("saved", config.read_yaml(run / "config.yaml"))])
    assert saved == cfg


def test_resume_after_round_k_equals_uninterrupted(tmp_path, cartpole_file):
    cfg = tiny_config(cartpole_file, extra=["total_steps=256", "eval_every=1", "checkpoint_every=2"])
    full = tmp_path / "full"
    train.train(cfg, full, quiet=True, log=lambda m: None)
    resumed = tmp_path / "resumed"
    shutil.copytree(full, resumed)
    for later in ("round_000004.pt",):
        (resumed / "checkpoints" / later).unlink()
    shutil.rmtree(resumed / "final")
    s = train.train(cfg, resumed, resume=True, quiet=True, log=lambda m: None)
    assert s["rounds"] == 4
    a = checkpoint.load(full / "final" / "checkpoint.pt")
    b = checkpoint.load(resumed / "final" / "checkpoint.pt")
    for part in ("generator", "discriminator"):
        for key in ("policy", "net"):
            if key in a[part]:
                for name, tensor in a[part][key].items():
                    assert th.equal(tensor, b[part][key][name]), (part, name)
    rows = list(csv.DictReader(open(resumed / "metrics.csv")))
    assert [int(r["round"]) for r in rows] == [1, 2, 3, 4]


def test_custom_env_learns_the_scripted_mapping(tmp_path):
    cfg = train.train_config("CustomEnv", "data/customenv.arrow", None,
                             ["total_steps=2048", "n_envs=4", "ppo.n_steps=64", "ppo.batch_size=64", "eval_episodes=5"])
    s = train.train(cfg, tmp_path / "run", quiet=True, log=lambda m: None)
    assert s["action_error"] < 2 / 3  # a uniform random policy's error


@pytest.mark.parametrize("args, message", [
    (["--env", "CartPol-v1"], "unknown env 'CartPol-v1'"),
    (["--env", "Pendulum-v1", "--demos", "data/cartpole.arrow"], "no demos for Pendulum-v1; it holds: cartpole.arrow"),
    (["--env", "CustomEnv", "--demos", "data/customenv.arrow", "--set", "ppo.batch_size=999999"], "'ppo.batch_size' 999999 exceeds"),
    (["--env", "CustomEnv", "--demos", "data/customenv.arrow", "--set", "ppo.use_sde=true"], "gSDE is not supported"),
    (["--env", "CustomEnv", "--demos", "data/customenv.arrow", "--set", "disc.demo_batch_size=0"], "'disc.demo_batch_size' must be >= 1"),
    (["--env", "CustomEnv", "--demos", "data/customenv.arrow", "--device", "cuda:7"], "no CUDA device"),
    (["--env", "CustomEnv", "--demos", "nowhere/"], "nowhere: no such file or folder"),
    (["--resume", "nowhere"], "no config.yaml there"),
    (["--env", "CustomEnv", "--demos", "data/customenv.arrow", "--set", "max_policy_lag=1"], "needs actor processes"),
    (["--env", "CustomEnv", "--demos", "data/customenv.arrow", "--fleet", "ray"], "'fleet: ray' needs 'actors' >= 1"),
    (["--env", "CustomEnv", "--demos", "data/customenv.arrow", "--listen", "tcp://127.0.0.1:0"], "'listen' needs 'actors' >= 1"),
    (["--env", "CustomEnv", "--demos", "data/customenv.arrow", "--actors", "1", "--listen", "tcp://0.0.0.0:0"],
     "listening beyond loopback needs --key-file"),
    ([], "--env is required"),
])
def test_bad_settings_fail_before_training(tmp_path, capsys, args, message):
    if "cuda" in " ".join(args) and th.cuda.is_available():
        pytest.skip("this machine has CUDA")
    code = cli.main(["train", *args, "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1, err
    assert not (tmp_path / "run").exists()


def test_demos_with_wrong_spaces(tmp_path, capsys, custom_demos):
    import dataclasses

    from gailkit import demos

    anon = dataclasses.replace(custom_demos, meta=demos.DemoMeta())
    demos.save(anon, tmp_path / "anon.arrow")
    code = cli.main(["train", "--env", "CartPole-v1", "--demos", str(tmp_path / "anon.arrow"), "--run-dir", str(tmp_path / "r")])
    assert code == 2 and "column 'obs' has shape (2,) per row" in capsys.readouterr().err


def test_cli_smoke_train_then_resume(tmp_path):
    from conftest import run_cli

    run = tmp_path / "run"
    sets = [x for s in TINY for x in ("--set", s)]
    r = run_cli("train", "--env", "CustomEnv", "--demos", "data/", "--total-steps", "128", "--run-dir", str(run), *sets)
    assert r.returncode == 0, r.stderr
    assert "evaluation: return" in r.stdout and "action error vs scripted expert" in r.stdout
    r = run_cli("train", "--resume", str(run), "--total-steps", "256", "--quiet")
    assert r.returncode == 0, r.stderr
    assert "resuming at round 2" in r.stdout and "4 rounds, 256 env steps" in r.stdout


def test_ctrl_c_saves_a_checkpoint_and_exits_0(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    from conftest import ROOT

    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "gailkit.cli", "train", "--env", "CustomEnv", "--demos", "data/",
                             "--total-steps", "100000000", "--quiet", "--run-dir", str(run)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (run / "metrics.csv").is_file():
        time.sleep(0.2)
    time.sleep(2)  # a few rounds in
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "interrupted, checkpoint saved" in out
    assert list((run / "checkpoints").glob("round_*.pt")) and not (run / "final").exists()
