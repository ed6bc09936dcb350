"""gailkit tune on a local Ray with tiny budgets: results, a failing trial, resuming an interrupted search."""

import csv
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT, run_cli

pytest.importorskip("ray.tune")  # the extra gailkit[ray]; the set-up installs it

TINY = ["--env", "CustomEnv", "--demos", "data/customenv.arrow", "--preset", "tiny", "--budget", "256"]


def _rows(out):
    return list(csv.DictReader(open(out / "trials.csv")))


def test_a_search_writes_table_yaml_plot_and_survives_a_failing_trial(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text("ppo.learning_rate: {loguniform: [1.0e-4, 1.0e-3]}\nppo.batch_size: {grid: [32, 999999]}\n")
    out = tmp_path / "out"
    r = run_cli("tune", *TINY, "--space", str(space), "--trials", "1", "--out", str(out), timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = _rows(out)
    assert sorted(row["status"] for row in rows) == ["complete", "error"]  # the failing trial did not stop the search
    bad = next(row for row in rows if row["status"] == "error")
    assert "'ppo.batch_size' 999999 exceeds" in bad["error"]
    good = next(row for row in rows if row["status"] == "complete")
    assert -2 / 3 < float(good["score"]) <= 0 and int(good["env_steps"]) == 256  # minus CustomEnv's action error
    png = (out / "learning_curves.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    assert (out / "runs" / good["trial"] / "seed0" / "metrics.csv").is_file()  # an ordinary run directory per trial
    r = run_cli("train", "--config", str(out / "best.yaml"), "--total-steps", "64", "--run-dir", str(tmp_path / "again"),
                "--quiet")
    assert r.returncode == 0, r.stderr
    assert good["ppo.learning_rate"] in (out / "best.yaml").read_text()


def test_bad_spaces_are_one_line(tmp_path):
    for text, message in (("ppo.learning_rat: {uniform: [0, 1]}\n", "unknown setting 'ppo.learning_rat'"),
                          ("ppo.learning_rate: {normal: [0, 1]}\n", "unknown distribution 'normal'"),
                          ("ppo.learning_rate: {uniform: [1]}\n", "uniform takes [low, high]"),
                          ("ppo.n_steps: {choice: [0, 8]}\n", "'ppo.n_steps' must be >= 1, got 0")):
        space = tmp_path / "s.yaml"
        space.write_text(text)
        r = run_cli("tune", *TINY, "--space", str(space), "--out", str(tmp_path / "o"))
        assert r.returncode == 2 and message in r.stderr and r.stderr.count("\n") == 1, (text, r.stderr)
        assert not (tmp_path / "o").exists()


def test_an_interrupted_search_resumes(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text("disc.disc_lr: {grid: [1.0e-4, 3.0e-4, 1.0e-3]}\n")
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "gailkit.cli", "tune", *TINY, "--budget", "512", "--space", str(space), "--search", "grid",
           "--scheduler", "none", "--resources", "cpu=2", "--out", str(out)]  # one trial at a time on 2 CPUs
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not list(out.glob("runs/*/seed0/final/checkpoint.pt")):
        time.sleep(0.5)
    proc.send_signal(signal.SIGINT)  # Tune saves its experiment state and stops
    proc.communicate(timeout=300)
    finished_before = len(list(out.glob("runs/*/seed0/final/checkpoint.pt")))
    assert 1 <= finished_before < 3
    r = run_cli("tune", "--resume", str(out), timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = _rows(out)
    assert len(rows) == 3 and all(row["status"] == "complete" for row in rows), rows
    assert sorted(float(row["disc.disc_lr"]) for row in rows) == [1e-4, 3e-4, 1e-3]
