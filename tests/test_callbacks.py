"""Callbacks: the lifecycle a caller sees, in order, on a real tiny run; built-ins are the same mechanism."""

from __future__ import annotations

import pytest
from conftest import run_cli

from gailkit import config
from gailkit.run import callbacks, metrics, train
from gailkit.run.callbacks import Callback


class Recorder(Callback):
    def __init__(self):
        self.events: list[str] = []
        self.eval_steps: list[int] = []

    def on_start(self, run):
        self.events.append("start")

    def on_bc(self, run, stats):
        self.events.append("bc")

    def on_round(self, run, stats):
        self.events.append("round")
        assert stats["round"] == run.learner.version  # the built-in Metrics ran first and filled the row

    def on_eval(self, run, stats):
        self.events.append("eval")
        self.eval_steps.append(run.learner.env_steps)

    def on_best(self, run, stats):
        self.events.append("best")
        assert run.best.round == run.learner.version

    def on_end(self, run, summary):
        self.events.append("end")

    def close(self):
        self.events.append("close")


def test_a_user_callback_sees_the_whole_lifecycle_in_order(tmp_path):
    cfg = train.train_config("CustomEnv", "data/customenv.arrow", None, ["total_steps=256", "eval_every=2"], "tiny")
    rec = Recorder()
    summary = train.train(cfg, tmp_path / "run", quiet=True, log=lambda m: None, callbacks=[rec])
    rounds = summary["rounds"]
    assert rec.events[:2] == ["start", "bc"] and rec.events[-2:] == ["close", "end"]
    assert rec.events.count("round") == rounds == len(metrics.read_rows(tmp_path / "run" / "metrics.csv"))
    assert rec.events.count("eval") == rounds // 2 and rec.eval_steps == [2 * 64 * (i + 1) for i in range(rounds // 2)]
    assert 1 <= rec.events.count("best") <= rec.events.count("eval")
    assert (tmp_path / "run" / "best" / "checkpoint.pt").is_file()  # BestCheckpoint, a built-in, heard on_best too


def test_close_reaches_every_callback_when_one_fails(tmp_path):
    class Boom(Callback):
        def on_round(self, run, stats):
            raise RuntimeError("boom")

    rec = Recorder()
    cfg = train.train_config("CustomEnv", "data/customenv.arrow", None, ["total_steps=256"], "tiny")
    with pytest.raises(RuntimeError, match="boom"):
        train.train(cfg, tmp_path / "run", quiet=True, log=lambda m: None, callbacks=[Boom(), rec])
    assert rec.events[-1] == "close" and "end" not in rec.events


def test_built_ins_are_named_callbacks():
    names = [type(c).__name__ for c in callbacks.built_in(quiet=True, log=print)]
    assert names == ["Checkpoints", "BestCheckpoint", "Metrics", "Progress"]


def test_output_piped_to_a_log_is_plain_lines(tmp_path):
    """Not a terminal: no progress bar, no carriage returns, a line before each long step, about 50 round
    lines however long the run (every evaluation round among them)."""
    from conftest import run_cli

    r = run_cli(
        "train",
        "--env",
        "CustomEnv",
        "--demos",
        "data/customenv.arrow",
        "--preset",
        "tiny",
        "--total-steps",
        str(120 * 64),
        "--set",
        "eval_every=40",
        "--run-dir",
        str(tmp_path / "run"),
    )
    assert r.returncode == 0, r.stderr
    assert "\r" not in r.stdout + r.stderr and "it/s" not in r.stderr and "step/s" not in r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("measuring a uniform random policy's return over 20 episodes")
    assert lines[1].startswith("gailkit train: CustomEnv") and lines[2].startswith("behaviour cloning: ")
    rounds = [line for line in lines if line.startswith("round ")]
    assert 55 <= len(rounds) <= 70, len(rounds)  # every 2nd of 120 rounds, and the 3 evaluation rounds
    assert sum(" eval " in line for line in rounds) == 3


def test_wandb_logs_every_round_and_the_settings_offline(tmp_path, monkeypatch, cartpole_demos):
    """`--wandb PROJECT` with W&B's offline mode: the run's settings, every round's metrics and the
    summary land in the run folder's wandb/ (nothing leaves the machine); a settings file cannot set it."""
    pytest.importorskip("wandb")
    import json

    from gailkit.data import demos

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    path = demos.save(cartpole_demos, tmp_path / "cp.arrow")
    r = run_cli(
        "train", "--env", "CartPole-v1", "--demos", str(path), "--preset", "tiny", "--total-steps", "128",
        "--run-dir", str(tmp_path / "run"), "--wandb", "gailkit-test", "--quiet",
        env={"WANDB_MODE": "offline", "WANDB_SILENT": "true"},
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    runs = list((tmp_path / "run" / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("*.wandb"))
    summary = json.loads((runs[0] / "files" / "wandb-summary.json").read_text())
    assert summary["round"] == 2 and "disc/acc_expert" in summary and summary["env_steps"] == 128
    cfg = (runs[0] / "files" / "config.yaml").read_text()
    assert "CartPole-v1" in cfg
    settings = tmp_path / "s.yaml"
    settings.write_text("wandb: exfiltrate\n")
    with pytest.warns(UserWarning, match="ignored wandb='exfiltrate'"):
        config.read_settings(settings)
