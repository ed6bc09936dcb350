"""The Ray fleet on a local Ray with 2 CPUs: the same actor code, a few GAIL rounds, a dead actor restarted."""

import csv

import gymnasium as gym
import numpy as np
import pytest

from gailkit.config import EnvConfig, FleetConfig, PolicyConfig
from gailkit.model import policy
from gailkit.rollout.actor import ActorSpec
from gailkit.run import train

ray = pytest.importorskip("ray")  # the optional extra gailkit[ray]; CI installs it


@pytest.fixture(scope="module")
def local_ray():
    import os

    os.environ.setdefault("RAY_worker_niceness", "0")  # as RayFleet does: actors are the workload
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def test_ray_fleet_trains_a_few_rounds(tmp_path, local_ray):
    cfg = train.train_config(
        "CartPole-v1",
        "data/",
        None,
        ["fleet.kind=ray", "fleet.actors=2", "fleet.envs_per_actor=2", "ppo.batch_size=64", "total_steps=384"],
        preset="tiny",
    )
    said: list[str] = []
    s = train.train(cfg, tmp_path / "run", quiet=True, log=said.append)
    assert s["rounds"] == 3 and s["env_steps"] == 384
    rows = list(csv.DictReader(open(tmp_path / "run" / "metrics.csv")))
    assert all(float(r["actors/live"]) == 2 and float(r["actors/nodes"]) == 1 for r in rows)
    where = [m for m in said if m.startswith("ray fleet: ")]  # where each actor ran, in the run's log
    node = ray.util.get_node_ip_address()
    assert where == [f"ray fleet: actor 0 on node {node}, actor 1 on node {node}"]


def test_dead_ray_actor_is_restarted(local_ray):
    from gailkit.rollout.fleet.ray_fleet import RayFleet

    ppo = PolicyConfig(net_arch=[16])
    spaces = (gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), gym.spaces.Discrete(2))
    fleet = RayFleet(ActorSpec(EnvConfig(id="CartPole-v1"), ppo, True, n_envs=2, seed=0), FleetConfig(actors=2), spaces)
    fleet.start()
    pol = policy.build(*spaces, ppo, True)
    try:
        assert len(fleet.collect(policy.get_weights(pol, 0), 16)) == 2
        ray.kill(fleet.actors[0], no_restart=False)  # as if its worker process died
        for version in range(1, 4):  # the kill is asynchronous: a round may still reach the old actor
            frags = fleet.collect(policy.get_weights(pol, version), 16)
            assert len(frags) == 2 and all(f.obs.shape == (16, 2, 4) and f.policy_version == version for f in frags)
            if fleet.restarts:
                break
        # counted whether the round's task died with the actor or Ray restarted it before the round was sent
        assert fleet.restarts == 1 and fleet.stats["actors/restarts"] == 1
    finally:
        fleet.stop()
