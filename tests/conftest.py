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
# gailkit's own per-user files (the tune signing key) go to a folder of the test run, not the user's ~/.config.
os.environ.setdefault("XDG_CONFIG_HOME", str(Path(os.environ.get("TMPDIR", "/tmp")) / f"gailkit-tests-{os.getpid()}"))


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


def small_generator(observation_space, action_space, ppo, net_arch=(8,), normalize_obs=False, n_envs=1):
    """A PPO generator with a small network on CPU, seed 0 (what the generator and actor tests train)."""
    from gailkit.algo.generator.ppo import PPOGenerator
    from gailkit.config import PolicyConfig

    net = PolicyConfig(net_arch=list(net_arch))
    return PPOGenerator(observation_space, action_space, ppo, net, normalize_obs, n_envs, "cpu", 0)
