"""The learner's torch threads (`threads`): one for vectors, every core for frames, OMP_NUM_THREADS when the user
set it, and what a run sets."""

import torch as th
from conftest import run_cli

from gailkit.core import cpu
from gailkit.run import train


def test_auto_threads_are_one_for_vectors_every_core_for_frames_and_the_users_omp_setting(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert cpu.learner_threads(-1, frames=False) == 1
    assert cpu.learner_threads(-1, frames=True) == cpu.cores() >= 1
    assert cpu.learner_threads(3, frames=False) == 3 and cpu.learner_threads(3, frames=True) == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert cpu.learner_threads(-1, frames=False) is None  # torch keeps what the user's variable gave it
    assert cpu.learner_threads(1, frames=True) == 1


def test_a_run_computes_with_the_threads_it_resolved(tmp_path, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = th.get_num_threads()
    try:
        for setting, want in ((-1, 1), (2, 2)):
            th.set_num_threads(4)
            cfg = train.train_config("CartPole-v1", "data/", None, [f"threads={setting}"], preset="tiny")
            cfg.total_steps = 1
            train.train(cfg, tmp_path / f"run{setting}", quiet=True, log=lambda m: None)
            assert th.get_num_threads() == want
    finally:
        th.set_num_threads(before)


def test_threads_below_one_but_auto_are_refused_in_one_line_before_anything_is_written(tmp_path):
    r = run_cli("train", "--env", "CartPole-v1", "--demos", "data/", "--threads", "0", "--run-dir", str(tmp_path / "r"))
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "'threads'" in r.stderr
    assert not (tmp_path / "r").exists()
