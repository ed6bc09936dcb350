"""gailkit tune on a local Ray with tiny budgets: results, a failing trial, resuming an interrupted search."""

import csv
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time

import pytest
from conftest import ROOT, run_cli

from gailkit.core.errors import GailkitError

pytest.importorskip("ray.tune")  # the extra gailkit[ray]; the set-up installs it

TINY = ["--env", "CustomEnv", "--demos", "data/customenv.arrow", "--preset", "tiny", "--budget", "256"]


class _Evil:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


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
    r = run_cli(
        "train",
        "--config",
        str(out / "best.yaml"),
        "--total-steps",
        "64",
        "--run-dir",
        str(tmp_path / "again"),
        "--quiet",
    )
    assert r.returncode == 0, r.stderr
    assert good["ppo.learning_rate"] in (out / "best.yaml").read_text()


def test_bad_spaces_are_one_line(tmp_path):
    for text, message in (
        ("ppo.learning_rat: {uniform: [0, 1]}\n", "unknown setting 'ppo.learning_rat'"),
        ("ppo.learning_rate: {normal: [0, 1]}\n", "unknown distribution 'normal'"),
        ("ppo.learning_rate: {uniform: [1]}\n", "uniform takes [low, high]"),
        ("ppo.n_steps: {choice: [0, 8]}\n", "'ppo.n_steps' must be >= 1, got 0"),
    ):
        space = tmp_path / "s.yaml"
        space.write_text(text)
        r = run_cli("tune", *TINY, "--space", str(space), "--out", str(tmp_path / "o"))
        assert r.returncode == 2 and message in r.stderr and r.stderr.count("\n") == 1, (text, r.stderr)
        assert not (tmp_path / "o").exists()


def test_an_interrupted_search_resumes(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text("disc.disc_lr: {grid: [1.0e-4, 3.0e-4, 1.0e-3]}\n")
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        "-m",
        "gailkit.cli",
        "tune",
        *TINY,
        "--budget",
        "512",
        "--space",
        str(space),
        "--search",
        "grid",
        "--scheduler",
        "none",
        "--resources",
        "cpu=2",
        "--out",
        str(out),
    ]  # one trial at a time on 2 CPUs
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not list(out.glob("runs/*/seed0/final/checkpoint.pt")):
        time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)  # as Ctrl-C: Tune saves its experiment state and stops (no abort, no stack dump)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode >= 0 and "Traceback" not in err and "Aborted" not in err, (proc.returncode, err[-2000:])
    finished_before = len(list(out.glob("runs/*/seed0/final/checkpoint.pt")))
    assert 1 <= finished_before < 3
    marker = tmp_path / "ran"
    evil = pickle.dumps(_Evil(marker))
    for change in ("replace tuner.pkl", "add a pickle", "link a file"):  # Ray would unpickle any of these on resume
        copy = tmp_path / change.replace(" ", "_")
        shutil.copytree(out, copy, symlinks=True)
        if change == "replace tuner.pkl":
            (copy / "search" / "tuner.pkl").write_bytes(evil)
        elif change == "add a pickle":
            (copy / "search" / "searcher-state-evil.pkl").write_bytes(evil)
        else:
            (copy / "search" / "elsewhere.json").symlink_to(tmp_path / "space.yaml")
        r = run_cli("tune", "--resume", str(copy), timeout=120)
        assert r.returncode == 2 and r.stderr.startswith("gailkit: error: ") and r.stderr.count("\n") == 1, r.stderr
        assert not marker.exists()
    r = run_cli("tune", "--resume", str(out), timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = _rows(out)
    assert len(rows) == 3 and all(row["status"] == "complete" for row in rows), rows
    assert sorted(float(row["disc.disc_lr"]) for row in rows) == [1e-4, 3e-4, 1e-3]


def test_a_tune_yaml_opens_no_door(tmp_path):
    from gailkit.tune import load_search

    marker = tmp_path / "ran"
    env_file = tmp_path / "evil_env.py"
    env_file.write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    saved = tmp_path / "tune.yaml"
    saved.write_text(
        f"base: {{env: {{id: '{env_file}:Env'}}, unsafe_pickle: true, fleet: {{listen: 'tcp://0.0.0.0:9'}}}}\n"
        "space: {ppo.learning_rate: {loguniform: [1.0e-4, 1.0e-3]}}\n"
    )
    with pytest.warns(UserWarning, match="ignored unsafe_pickle=True.*fleet.listen"):
        search, allow_code = load_search(saved)
    assert not allow_code and search.base["unsafe_pickle"] is False and search.base["fleet"]["listen"] == ""
    assert load_search(saved, f"{env_file}:Env")[1]  # the same env typed again may run
    r = run_cli("tune", "--resume", str(tmp_path))
    assert r.returncode == 2 and "search.sig: missing" in r.stderr, r.stderr
    for bad, message in (
        ("trials: -1\n", "'trials' must be an integer >= 1"),
        ("resources: {cpu: .nan}\n", "finite"),
        ("bogus: 1\n", "unknown key 'bogus'"),
        ("space: {ppo.learning_rate: {loguniform: [0, .inf]}}\n", "finite numbers low < high"),
    ):
        (tmp_path / "t2.yaml").write_text(
            saved.read_text().split("space:")[0]
            + ("" if "space:" in bad else "space: {ppo.learning_rate: {uniform: [0.1, 0.2]}}\n")
            + bad
        )
        with pytest.raises(GailkitError, match=message):
            load_search(tmp_path / "t2.yaml")
    assert not marker.exists()


@pytest.mark.parametrize("name", ["gail.yaml", "gail-sac.yaml", "small.yaml"])
def test_the_shipped_search_spaces_read_against_their_generator(name):
    """Every key of a shipped space is a setting of the generator it is for, with a valid distribution."""
    from gailkit.config import TrainConfig
    from gailkit.tune import search

    base = TrainConfig(generator="sac" if "sac" in name else "ppo")
    space = search.read_space(ROOT / "experts" / "spaces" / name, base)
    assert space and all(len(spec) == 1 for spec in space.values())
