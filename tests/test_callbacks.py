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


def _wandb_records(data: bytes) -> list:
    """(kind, record) of a W&B offline run file: a LevelDB-style log (7-byte header, 32 KiB blocks of
    checksummed chunks) of protobuf `Record`s."""
    import struct

    from wandb.proto import wandb_internal_pb2 as pb

    out, pos, buf = [], 7, b""
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        _, n, kind = struct.unpack("<IHB", data[pos : pos + 7]) if left >= 7 else (0, 0, 0)
        if n == 0 and kind == 0:
            pos += left
            continue
        buf, pos = buf + data[pos + 7 : pos + 7 + n], pos + 7 + n
        if kind in (1, 4):  # a whole record, or the last chunk of one
            record = pb.Record()
            record.ParseFromString(buf)
            which = record.WhichOneof("record_type")
            out.append((which, getattr(record, which)))
            buf = b""
    return out


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
    assert len(runs) == 1
    records = _wandb_records(next(runs[0].glob("*.wandb")).read_bytes())
    history = [
        {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.item}
        for k, r in records
        if k == "history"
    ]
    assert [h["env_steps"] for h in history] == [64, 128] and all("disc/acc_expert" in h for h in history)
    summary = {
        i.key or "/".join(i.nested_key): json.loads(i.value_json)
        for kind, r in records
        if kind == "summary"
        for i in r.update
    }
    assert summary["rounds"] == 2 and summary["env_steps"] == 128 and "return_mean" in summary
    config_keys = {i.key or "/".join(i.nested_key) for kind, r in records if kind == "config" for i in r.update}
    run_record = next(r for kind, r in records if kind == "run")
    assert {"env", "disc", "generator"} <= config_keys | {i.key for i in run_record.config.update}
    settings = tmp_path / "s.yaml"
    settings.write_text("wandb: exfiltrate\n")
    with pytest.warns(UserWarning, match="ignored wandb='exfiltrate'"):
        config.read_settings(settings)
