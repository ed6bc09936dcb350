"""Shared fixtures: small real demos recorded from real envs and experts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gailkit.data import experts

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session", autouse=True)
def _own_folders(tmp_path_factory):
    """gailkit's per-user files (the tune signing key) and the folders SB3's `learn()` makes for its logger
    go to this test run's temporary folder (pytest keeps the last three), not the user's ~/.config or loose
    folders in the system's temp directory; subprocesses inherit both."""
    saved = {k: os.environ.get(k) for k in ("XDG_CONFIG_HOME", "SB3_LOGDIR")}
    os.environ["XDG_CONFIG_HOME"] = str(tmp_path_factory.mktemp("config"))
    os.environ["SB3_LOGDIR"] = str(tmp_path_factory.mktemp("sb3-logs"))
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session")
def custom_demos():
    """5 episodes of CustomEnv from its scripted expert (40 transitions)."""
    policy, env_id, _ = experts.load_expert("scripted", "CustomEnv", deterministic=True)
    return experts.record(policy, env_id, episodes=5, seed=0, source="scripted")


@pytest.fixture(scope="session")
def cartpole_demos():
    """3 short episodes of CartPole-v1 from a random policy (discrete actions, with terminations)."""
    rng = np.random.default_rng(0)
    return experts.record(lambda obs: int(rng.integers(2)), "CartPole-v1", episodes=3, seed=0, source="random")


def run_cli(
    *args: str, cwd: Path | None = None, timeout: float = 300, env: dict | None = None
) -> subprocess.CompletedProcess:
    """Run `gailkit ARGS` in a fresh interpreter, as a user would (`env`: extra environment variables)."""
    env = dict(os.environ, PYTHONWARNINGS="ignore::DeprecationWarning", **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "gailkit.cli", *args],
        cwd=cwd or ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def resumed_equals_uninterrupted(cfg, full: Path, resumed: Path, last_round: int) -> None:
    """Copy the finished run `full`, drop its last checkpoint (round `last_round`) and final folder, resume:
    the replay and the policy at the end must equal the uninterrupted run's, tensor for tensor."""
    import shutil

    import torch as th

    from gailkit.run import checkpoint, train

    shutil.copytree(full, resumed)
    (resumed / "checkpoints" / f"round_{last_round:06d}.pt").unlink()
    shutil.rmtree(resumed / "final")
    s = train.train(cfg, resumed, resume=True, quiet=True, log=lambda m: None, allow_code=True)
    assert s["rounds"] == last_round
    a = checkpoint.load(full / "final" / "checkpoint.pt").learner
    b = checkpoint.load(resumed / "final" / "checkpoint.pt").learner
    assert th.equal(a["generator"]["replay"], b["generator"]["replay"])
    for name, tensor in a["generator"]["policy"].items():
        assert th.equal(tensor, b["generator"]["policy"][name]), name


def onnx_plays_as_torch(run: Path, env: str, onnx: Path) -> dict:
    """`gailkit export` of `run` to `onnx` passes its parity check, and `gailkit evaluate --onnx` plays 2
    episodes with returns equal to the torch policy's; the evaluation's report."""
    import json

    r = run_cli("export", str(run), "--out", str(onnx))
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr
    r = run_cli("evaluate", str(run), "--env", env, "--episodes", "2", "--onnx", str(onnx), "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["onnx"]["returns"] == pytest.approx(report["policy"]["returns"], rel=1e-5)  # float actions
    return report


def small_generator(observation_space, action_space, ppo, net_arch=(8,), normalize_obs=False, n_envs=1):
    """A PPO generator with a small network on CPU, seed 0 (what the generator and actor tests train)."""
    from gailkit.algo.generator.ppo import PPOGenerator
    from gailkit.config import PolicyConfig

    net = PolicyConfig(net_arch=list(net_arch))
    return PPOGenerator(observation_space, action_space, ppo, net, normalize_obs, n_envs, "cpu", 0)
