"""The SUMO traffic-light envs: checker, seeding, process lifecycle, controller experts, GAIL with actors."""

import gc
import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("sumo")  # the optional extra gailkit[sumo]; CI installs it

import gailkit_envs  # noqa: E402,F401  (registers the traffic-light ids)
import gymnasium as gym  # noqa: E402
from gymnasium.utils.env_checker import check_env  # noqa: E402

from gailkit.config import EnvConfig  # noqa: E402
from gailkit.data import demos, experts  # noqa: E402
from gailkit.run import train

SHORT = {"episode_seconds": 60}


def _alive(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.parametrize("env_id", ["TrafficLight-v0", "TrafficGrid-v0"])
def test_env_checker_and_spaces(env_id):
    env = gym.make(env_id, **SHORT).unwrapped
    try:
        check_env(env, skip_render_check=True)
        assert env.action_space.n == (2 if env_id == "TrafficLight-v0" else 16)
        assert env.observation_space.shape == (15 * env.n_lights,)
    finally:
        env.close()


def test_seeded_resets_are_reproducible():
    a, b = gym.make("TrafficLight-v0", **SHORT), gym.make("TrafficLight-v0", **SHORT)
    try:
        for env in (a, b):
            env.reset(seed=3)
        runs = []
        for env in (a, b):
            env.reset(seed=3)
            trace = [env.step(i % 2) for i in range(12)]
            runs.append((np.stack([t[0] for t in trace]), [t[1] for t in trace]))
        assert np.array_equal(runs[0][0], runs[1][0]) and runs[0][1] == runs[1][1]
        other = a.reset(seed=4)[0], [a.step(i % 2)[1] for i in range(12)]
        assert other[1] != runs[0][1]  # another seed, other demand
    finally:
        a.close()
        b.close()


def test_no_sumo_process_outlives_its_env():
    env = gym.make("TrafficLight-v0", **SHORT).unwrapped
    env.reset(seed=0)
    pid, folder = env._proc.pid, env._dir
    env.close()
    assert not _alive(pid) and not folder.exists()

    env = gym.make("TrafficLight-v0", **SHORT).unwrapped
    env.reset(seed=0)
    pid = env._proc.pid
    with pytest.raises(ValueError, match="outside Discrete"):
        env.step(99)  # an exception inside step
    env.close()
    assert not _alive(pid)

    env = gym.make("TrafficLight-v0", **SHORT).unwrapped
    env.reset(seed=0)
    pid = env._proc.pid
    del env
    gc.collect()
    assert not _alive(pid)


def test_many_envs_side_by_side():
    envs_ = [gym.make("TrafficLight-v0", **SHORT).unwrapped for _ in range(3)]
    try:
        for i, env in enumerate(envs_):
            env.reset(seed=i)
        assert len({env._proc.pid for env in envs_}) == 3 and len({env._dir for env in envs_}) == 3
        for env in envs_:
            env.step(1)
    finally:
        for env in envs_:
            env.close()


@pytest.mark.parametrize("expert", ["actuated", "max-pressure", "fixed-time"])
def test_demos_record_from_controller_experts(tmp_path, expert):
    policy, env_id, info = experts.load_expert(expert, "TrafficLight-v0", deterministic=True)
    d = experts.record(policy, EnvConfig(id=env_id, kwargs=SHORT), episodes=2, seed=0, source=expert)
    assert d.n_episodes == 2 and len(d) == 2 * 12 and d.truncated.sum() == 2
    assert set(np.unique(d.acts)) <= {0, 1} and d.meta.source == expert
    back = demos.load(
        demos.save(d, tmp_path / f"{expert}.arrow"),
        env_id="TrafficLight-v0",
        spaces=(gym.spaces.Box(0, 1, (15,), np.float32), gym.spaces.Discrete(2)),
    )
    assert len(back) == len(d)
    if expert != "max-pressure":  # SUMO's own program: the recorded action is the green it showed
        assert (d.obs[1:, 12:14].argmax(1)[d.step[1:] > 0] == d.acts[:-1][d.step[1:] > 0]).mean() > 0.8


def test_gail_rounds_with_two_actor_processes(tmp_path):
    policy, env_id, _ = experts.load_expert("actuated", "TrafficLight-v0", deterministic=True)
    d = experts.record(policy, EnvConfig(id=env_id, kwargs=SHORT), episodes=3, seed=0, source="actuated")
    demos.save(d, tmp_path / "demos" / "actuated.arrow")
    cfg = train.train_config(
        "TrafficLight-v0",
        str(tmp_path / "demos"),
        None,
        [
            "env.kwargs.episode_seconds=60",
            "fleet.actors=2",
            "fleet.envs_per_actor=1",
            "ppo.n_steps=24",
            "ppo.batch_size=48",
            "ppo.n_epochs=2",
            "policy.net_arch=[16]",
            "disc.net_arch=[16]",
            "disc.demo_batch_size=32",
            "total_steps=144",
            "eval_episodes=1",
        ],
    )
    s = train.train(cfg, tmp_path / "run", quiet=True, log=lambda m: None)
    assert s["rounds"] == 3 and s["env_steps"] == 144 and "return_mean" in s
    assert not [p for p in Path("/proc").glob("[0-9]*") if p.name != str(os.getpid()) and _is_our_sumo(p)]


def _is_our_sumo(proc: Path) -> bool:
    try:
        cmd = (proc / "cmdline").read_bytes().split(b"\0")
        return bool(cmd) and cmd[0].endswith(b"/sumo") and _alive(int(proc.name))
    except OSError:
        return False


def test_sumo_ends_when_its_python_process_is_killed(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "hold.py"
    script.write_text(
        "import gymnasium as gym, gailkit_envs, time\n"
        "e = gym.make('TrafficLight-v0').unwrapped\ne.reset(seed=0)\n"
        "print(e._proc.pid, flush=True)\ntime.sleep(120)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, str(script)], cwd=Path(__file__).resolve().parents[1], stdout=subprocess.PIPE, text=True
    )
    sumo_pid = int(proc.stdout.readline())
    assert _alive(sumo_pid)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    while _alive(sumo_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(sumo_pid)  # SUMO quits when its TraCI client's connection drops
