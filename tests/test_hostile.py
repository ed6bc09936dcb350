"""Hostile inputs, by class: folders that try to open doors, files that name other files, bombs that
declare more than they hold, files that never end. Each case runs the real command and checks one
line, exit 2, that nothing ran (a marker file), and, for bombs, the peak memory of the process."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from conftest import ROOT, run_cli
from test_train import _start_training

TINY = ["--preset", "tiny", "--total-steps", "64", "--quiet"]
PEAK_MB = 200  # a rejected bomb's whole process stays under this (the CLI alone takes ~150 MB)


def _one_line(r, *needles):
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    errors = [line for line in r.stderr.splitlines() if line.startswith("gailkit: error: ")]
    assert len(errors) == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    for needle in needles:
        assert needle in errors[0], r.stderr


def _evil_pickle(path: Path, marker: Path) -> Path:
    code = f"open({str(marker)!r}, 'w').write('ran')".encode()
    path.write_bytes(b"cbuiltins\nexec\n(S'" + code.replace(b"'", b"\\'") + b"'\ntR.")
    return path


def _evil_env(folder: Path, marker: Path) -> Path:
    path = folder / "evil_env.py"
    path.write_text(
        f"open({str(marker)!r}, 'w').write('ran')\nimport gymnasium as gym\nclass Env(gym.Env):\n    pass\n"
    )
    return path


# ---------------------------------------------------------------------------------------------
# Folders and settings files are data: they never open a door.


def test_a_run_folder_cannot_turn_on_unsafe_pickle_listen_or_code(tmp_path):
    run, marker = tmp_path / "run", tmp_path / "ran"
    r = run_cli("train", "--env", "CustomEnv", "--demos", "data/customenv.arrow", *TINY, "--run-dir", str(run))
    assert r.returncode == 0, r.stderr
    evil = _evil_pickle(tmp_path / "evil.pkl", marker)
    saved = (run / "config.yaml").read_text()
    tampered = (
        saved.replace("unsafe_pickle: false", "unsafe_pickle: true")
        .replace("demos: data/customenv.arrow", f"demos: {evil}")
        .replace("listen: ''", "listen: tcp://0.0.0.0:5999")
    )
    (run / "config.yaml").write_text(tampered)
    r = run_cli("train", "--resume", str(run), "--total-steps", "128")
    _one_line(r, "refused to unpickle 'builtins.exec'")
    assert "ignored unsafe_pickle=True (pass --unsafe-pickle to set it), fleet.listen='tcp://0.0.0.0:5999'" in r.stderr
    assert not marker.exists()
    # a code env named by the run's config.yaml is not imported unless the same --env is typed
    env_file = _evil_env(tmp_path, marker)
    (run / "config.yaml").write_text(saved.replace("id: CustomEnv", f"id: {env_file}:Env"))
    r = run_cli("train", "--resume", str(run), "--total-steps", "128")
    _one_line(r, "which is code", f"pass --env {env_file}:Env")
    assert not marker.exists()


def test_a_config_file_cannot_turn_on_unsafe_pickle_or_name_code(tmp_path):
    marker = tmp_path / "ran"
    evil = _evil_pickle(tmp_path / "evil.pkl", marker)
    cfg = tmp_path / "best.yaml"
    cfg.write_text(f"env: {{id: CustomEnv}}\ndemos: {evil}\nunsafe_pickle: true\n")
    r = run_cli("train", "--config", str(cfg), *TINY, "--run-dir", str(tmp_path / "r"))
    _one_line(r, "refused to unpickle")
    assert "ignored unsafe_pickle=True" in r.stderr and not marker.exists() and not (tmp_path / "r").exists()
    env_file = _evil_env(tmp_path, marker)
    cfg.write_text(f"env: {{id: '{env_file}:Env'}}\ndemos: data/customenv.arrow\n")
    r = run_cli("train", "--config", str(cfg), *TINY, "--run-dir", str(tmp_path / "r"))
    _one_line(r, "which is code")
    assert not marker.exists()


def test_an_experts_folder_in_the_current_folder_is_never_read(tmp_path, monkeypatch):
    from gailkit.run import train

    (tmp_path / "experts").mkdir()
    (tmp_path / "experts" / "cartpole.gail.yaml").write_text(
        "env: {id: CartPole-v1}\nunsafe_pickle: true\nseed: 4242\n"
    )
    monkeypatch.chdir(tmp_path)
    cfg = train.train_config("CartPole-v1", "data", None, [])
    assert cfg.seed != 4242 and cfg.unsafe_pickle is False


def test_doors_come_from_flags_typed_now():
    from gailkit import config
    from gailkit.config import TrainConfig

    with pytest.warns(UserWarning, match="ignored unsafe_pickle=True.*fleet.key_file='k.json'"):
        layer = config.without_doors({"unsafe_pickle": True, "fleet": {"key_file": "k.json", "actors": 2}}, "f.yaml")
    cfg = config.build(TrainConfig, [("f.yaml", layer)], ["unsafe_pickle=true"])
    assert cfg.unsafe_pickle is True and cfg.fleet.key_file == "" and cfg.fleet.actors == 2


def test_local_actors_do_not_import_packages_from_the_current_folder(tmp_path):
    """An `envs/` (or `gailkit/`) folder where the learner runs is not what its actor processes import."""
    marker = tmp_path / "ran"
    for name in ("envs", "gailkit"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    r = subprocess.run(
        [
            str(Path(sys.executable).parent / "gailkit"),
            "train",
            "--env",
            "CartPole-v1",
            "--demos",
            str(ROOT / "data" / "cartpole.arrow"),
            *TINY,
            "--actors",
            "1",
            "--envs-per-actor",
            "2",
            "--run-dir",
            str(tmp_path / "run"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert not marker.exists()


# ---------------------------------------------------------------------------------------------
# Files that name other files, and files that never end.


def _minari(tmp_path: Path, data_format: str = "hdf5") -> tuple[Path, dict]:
    root = tmp_path / "minari"
    env = {"MINARI_DATASETS_PATH": str(root)}
    r = run_cli(
        "demos", "convert", "data/customenv.arrow", "minari:test/ab-v0", "--minari-format", data_format, env=env
    )
    assert r.returncode == 0, r.stderr
    return root / "test" / "ab-v0" / "data", env


def test_hdf5_storage_outside_the_file_and_ids_outside_the_root_are_refused(tmp_path):
    h5py = pytest.importorskip("h5py")
    data, env = _minari(tmp_path)
    secret = tmp_path / "secret.bin"
    secret.write_bytes(np.arange(18, dtype=np.float32).tobytes())
    with h5py.File(data / "main_data.hdf5", "a") as f:
        del f["episode_0"]["observations"]
        f["episode_0"].create_dataset("observations", shape=(9, 2), dtype="f4", external=[(str(secret), 0, 72)])
    _one_line(run_cli("demos", "inspect", "minari:test/ab-v0", env=env), "stored in external files")
    with h5py.File(data / "main_data.hdf5", "a") as f:
        del f["episode_0"]["observations"]
        layout = h5py.VirtualLayout(shape=(9, 2), dtype="f4")
        layout[:] = h5py.VirtualSource(str(tmp_path / "other.h5"), "x", shape=(9, 2))
        f["episode_0"].create_virtual_dataset("observations", layout)
    _one_line(run_cli("demos", "inspect", "minari:test/ab-v0", env=env), "virtual dataset")
    for spec in ("minari:../x", "minari:test/../../..", "minari:/etc"):
        _one_line(run_cli("demos", "inspect", spec, env=env), "a name inside the local root")


def test_imitation_folders_cannot_name_files_outside_them(tmp_path):
    folder = tmp_path / "ds"
    folder.mkdir()
    (folder / "dataset_info.json").write_text("{}")
    for name in ("../outside.arrow", "/etc/passwd"):
        (folder / "state.json").write_text(json.dumps({"_data_files": [{"filename": name}]}))
        _one_line(run_cli("demos", "inspect", str(folder)), "leaves")


def test_fifos_are_refused_without_waiting(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    data, env = _minari(tmp_path)
    (data / "main_data.hdf5").unlink()
    os.mkfifo(data / "main_data.hdf5")
    _one_line(run_cli("demos", "inspect", "minari:test/ab-v0", env=env, timeout=30), "a FIFO, not a plain file")
    folder = tmp_path / "ds"
    folder.mkdir()
    (folder / "dataset_info.json").write_text("{}")
    (folder / "state.json").write_text('{"_data_files": [{"filename": "shard"}]}')
    os.mkfifo(folder / "shard")
    _one_line(run_cli("demos", "inspect", str(folder), timeout=30), "a FIFO")
    _one_line(run_cli("train", "--config", str(fifo), timeout=30), "a FIFO")
    _one_line(run_cli("actor", "--connect", "tcp://127.0.0.1:1", "--key-file", str(fifo), timeout=30), "a FIFO")


# ---------------------------------------------------------------------------------------------
# Bombs: declared sizes are checked before anything is allocated; the process stays small.


def _peak_mb_of(*args: str, env: dict | None = None) -> tuple[subprocess.CompletedProcess, float]:
    code = (
        "import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
        "sys.stdout.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) + '\\n'); "
        "sys.stderr.write(r.stderr); sys.exit(r.returncode)"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, sys.executable, "-m", "gailkit.cli", *args],
        cwd=ROOT,
        env=dict(os.environ, **(env or {})),
        capture_output=True,
        text=True,
        timeout=120,
    )
    return r, int(r.stdout.split()[-1]) / 1024


def _ipc(table: pa.Table, path: Path, compression: str | None, stream: bool = False) -> Path:
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with (pa.ipc.new_stream if stream else pa.ipc.new_file)(str(path), table.schema, options=options) as w:
        w.write_table(table)
    return path


def _zeros_table(rows: int) -> pa.Table:
    from gailkit.core import arrow_tensors

    obs = arrow_tensors.to_arrow(np.zeros((rows, 2), np.float32))
    return pa.table(
        {
            "obs": obs,
            "next_obs": obs,
            "acts": obs,
            "terminated": pa.array(np.zeros(rows, bool)),
            "truncated": pa.array(np.zeros(rows, bool)),
        }
    )


def test_bombs_are_refused_before_they_inflate(tmp_path):
    h5py = pytest.importorskip("h5py")
    rows = 100_000_000  # 2.4 GB of zeros once read
    cases = {
        "zstd-file": _ipc(_zeros_table(rows), tmp_path / "zstd.arrow", "zstd"),
        "lz4-stream": _ipc(_zeros_table(rows), tmp_path / "lz4.arrow", "lz4", stream=True),
    }
    import pyarrow.parquet as pq

    pq.write_table(_zeros_table(rows // 4), tmp_path / "zeros.parquet", compression="zstd")
    cases["parquet"] = tmp_path / "zeros.parquet"
    data, env = _minari(tmp_path)
    with h5py.File(data / "main_data.hdf5", "a") as f:
        del f["episode_0"]["observations"]
        f["episode_0"].create_dataset("observations", shape=(1 << 28, 2), dtype="f4")  # 2 GiB declared, none stored
    for name, path in cases.items():
        assert path.stat().st_size < 30 << 20, (name, path.stat().st_size)
        r, peak = _peak_mb_of("demos", "inspect", str(path))
        _one_line(r, str(path))
        assert "compression bomb" in r.stderr or "memory budget" in r.stderr, r.stderr
        assert peak < PEAK_MB, (name, peak)
    r, peak = _peak_mb_of("demos", "inspect", "minari:test/ab-v0", env=env)
    _one_line(r, "declares 2,147,483,648 bytes but stores none")
    assert peak < PEAK_MB
    r, _ = _peak_mb_of("demos", "inspect", str(cases["zstd-file"]), env={"GAILKIT_MEMORY_BUDGET": "64M"})
    _one_line(r, "over the memory budget of 67,108,864")


def test_an_expert_zip_bomb_is_refused(tmp_path):
    bomb = tmp_path / "expert.zip"
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("data", "{}")
        with z.open("policy.pth", "w", force_zip64=True) as f:
            block = bytes(1 << 20)
            for _ in range(1 << 11):  # 2 GiB of zeros, about 2 MB stored
                f.write(block)
    r, peak = _peak_mb_of(
        "demos",
        "record",
        "--expert",
        str(bomb),
        "--env",
        "CartPole-v1",
        "--episodes",
        "1",
        "--out",
        str(tmp_path / "d.arrow"),
    )
    _one_line(r, "compression bomb")
    assert peak < 400 and not (tmp_path / "d.arrow").exists()  # this command imports torch: ~300 MB before any file


def test_arrow_files_with_bad_offsets_are_one_line_not_an_abort(tmp_path):
    values = pa.array(np.arange(10, dtype=np.float32))
    offsets = pa.array(np.array([0, 2, 1_000_000, 4], np.int32)).buffers()[1]
    bad = pa.ListArray.from_buffers(pa.list_(pa.float32()), 3, [None, offsets], children=[values])
    table = pa.table(
        {"obs": bad, "next_obs": bad, "terminated": pa.array([False, False, True]), "truncated": pa.array([False] * 3)}
    )
    for stream in (False, True):
        path = _ipc(table, tmp_path / f"bad{stream}.arrow", None, stream)
        _one_line(run_cli("demos", "inspect", str(path)), "Offset invariant failure")


def test_a_pickle_over_the_budget_is_refused_unread(tmp_path):
    path = tmp_path / "big.pkl"
    path.write_bytes(pickle.dumps({"obs": np.zeros((3 << 20, 2), np.float32)}))  # 24 MB
    _one_line(run_cli("demos", "inspect", str(path), env={"GAILKIT_MEMORY_BUDGET": "8M"}), "over the 8,388,608")


def test_the_budget_setting_is_checked():
    _one_line(
        run_cli("demos", "inspect", "data/customenv.arrow", env={"GAILKIT_MEMORY_BUDGET": "lots"}),
        "GAILKIT_MEMORY_BUDGET='lots'",
    )


# ---------------------------------------------------------------------------------------------
# Writers that cannot destroy.


def test_writers_replace_only_plain_files(tmp_path):
    fifo = tmp_path / "fifo.arrow"
    os.mkfifo(fifo)
    for args in (
        ("demos", "convert", "data/customenv.arrow", str(fifo)),
        ("demos", "strip-actions", "data/customenv.arrow", str(fifo)),
        ("demos", "record", "--expert", "scripted", "--env", "CustomEnv", "--episodes", "1", "--out", str(fifo)),
        ("keys", "generate", "--out", str(fifo)),
    ):
        _one_line(run_cli(*args, timeout=60), "a FIFO")
        assert fifo.exists() and not fifo.is_file()
    target = tmp_path / "precious.arrow"
    target.write_bytes(b"keep")
    (tmp_path / "link.arrow").symlink_to(target)
    r = run_cli("demos", "convert", "data/customenv.arrow", str(tmp_path / "link.arrow"))
    assert r.returncode == 0, r.stderr
    assert (
        target.read_bytes() == b"keep" and (tmp_path / "link.arrow").is_file()
    )  # the link was replaced, not written through


def test_a_run_has_one_writer(tmp_path):
    run = tmp_path / "run"
    proc = _start_training(run, "--preset", "tiny", "--set", "checkpoint_every=1")
    try:
        import time

        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not list(run.glob("checkpoints/round_*.pt")):
            time.sleep(0.2)
        _one_line(
            run_cli("train", "--resume", str(run), "--total-steps", "200000000"), "in use by another gailkit process"
        )
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
    r = run_cli("train", "--resume", str(run), "--total-steps", "1", "--quiet")  # free again once the writer ended
    assert r.returncode == 0, r.stderr


def test_links_in_a_run_lead_nowhere(tmp_path):
    run = tmp_path / "run"
    r = run_cli("train", "--env", "CustomEnv", "--demos", "data/customenv.arrow", *TINY, "--run-dir", str(run))
    assert r.returncode == 0, r.stderr
    outside = tmp_path / "outside"
    outside.mkdir()
    for i in range(5):
        (outside / f"round_{i:06d}.pt").write_bytes(b"mine")
    (run / "checkpoints").rename(tmp_path / "real_checkpoints")
    (run / "checkpoints").symlink_to(outside)
    _one_line(run_cli("train", "--resume", str(run), "--total-steps", "4096"), "a link")
    assert len(list(outside.iterdir())) == 5
    (run / "checkpoints").unlink()
    (tmp_path / "real_checkpoints").rename(run / "checkpoints")
    (run / "plots").symlink_to(outside)
    _one_line(run_cli("evaluate", str(run), "--episodes", "1"), "a link")
    assert sorted(p.name for p in outside.iterdir()) == [f"round_{i:06d}.pt" for i in range(5)]


def test_a_metrics_file_gailkit_could_not_have_written_is_one_line_and_changes_nothing(tmp_path):
    """Resume, evaluate's plots and tune --resume parse a run's metrics.csv: a round of '²' (which str.isdigit
    takes and int() refuses), a step count or a value that is not a number, foreign columns, ragged rows, a field
    past csv's limit, bytes that are not UTF-8 or a link were tracebacks. Each is one line naming the file and
    line, before anything is written; a last line cut short by a kill is still left out and the run resumes."""
    run = tmp_path / "run"
    r = run_cli("train", "--env", "CustomEnv", "--demos", "data/customenv.arrow", *TINY, "--run-dir", str(run))
    assert r.returncode == 0, r.stderr
    good = (run / "metrics.csv").read_bytes()
    header = good.split(b"\n")[0].decode()
    (tmp_path / "elsewhere.csv").write_text("round,env_steps\n1,2\n")

    def state() -> dict[str, object]:
        return {p.relative_to(run).as_posix(): p.stat().st_mtime_ns for p in run.rglob("*") if p.name != ".lock"}

    cases = {
        b"round,env_steps\n\xc2\xb2,64\n": "line 2: round is '\u00b2', not a whole number",
        b"round,env_steps\n1,abc\n": "line 2: env_steps is 'abc', not a whole number",
        b"round,env_steps,eval/return_mean\n1,64,xyz\n": "line 2: 'eval/return_mean' is 'xyz', not a number",
        b"name,value\nx,1\n": "its header has no round and env_steps columns",
        b"round,env_steps\n1,64,7\n": "line 2: not as many fields as the header's 2",
        b"round,env_steps\n1\n2,128\n": "line 2: not as many fields as the header's 2",
        b'round,env_steps\n1,"' + b"9" * 200_000 + b'"\n': "not a CSV table (field larger than field limit",
        b"round,env_steps\n\xff\xfe,1\n": "not a metrics file gailkit wrote (not UTF-8 text)",
        None: "a link",
    }
    for bad, message in cases.items():
        (run / "metrics.csv").unlink()
        if bad is None:
            (run / "metrics.csv").symlink_to(tmp_path / "elsewhere.csv")
        else:
            (run / "metrics.csv").write_bytes(bad)
        before = state()
        _one_line(run_cli("train", "--resume", str(run), "--total-steps", "256", "--quiet"), "metrics.csv", message)
        _one_line(run_cli("evaluate", str(run), "--episodes", "1"), "metrics.csv", message)
        assert state() == before, bad
        if bad is not None:
            assert (run / "metrics.csv").read_bytes() == bad
    (run / "metrics.csv").unlink()
    (run / "metrics.csv").write_bytes(good + ",".join(["9", "9999"] + ["0.1"] * (header.count(",") - 1)).encode())
    r = run_cli("train", "--resume", str(run), "--total-steps", "256", "--quiet")  # a last row cut short by a kill
    assert r.returncode == 0, r.stderr
    assert b"9,9999" not in (run / "metrics.csv").read_bytes()


def test_a_failed_first_round_leaves_an_empty_run_dir_empty(tmp_path, monkeypatch):
    from gailkit.algo.learner import Learner
    from gailkit.run import train

    run = tmp_path / "given"
    run.mkdir()
    cfg = train.train_config("CustomEnv", "data/customenv.arrow", None, ["total_steps=64"], "tiny")

    def boom(self, frags):
        raise RuntimeError("boom")

    with monkeypatch.context() as m:
        m.setattr(Learner, "round", boom)
        with pytest.raises(RuntimeError):
            train.train(cfg, run, quiet=True, log=lambda m: None)
    assert run.is_dir() and not list(run.iterdir())
    assert train.train(cfg, run, quiet=True, log=lambda m: None)["rounds"] >= 1  # the same folder works again


# ---------------------------------------------------------------------------------------------
# One line for every bad flag; nothing waits forever.


def _keys(tmp_path: Path) -> Path:
    r = run_cli("keys", "generate", "--out", str(tmp_path / "k.json"))
    assert r.returncode == 0, r.stderr
    return tmp_path / "k.json"


@pytest.mark.parametrize(
    "args, message",
    [
        (("train", "--env", "CustomEnv", "--seed", "-1"), "--seed: must be in [0, 2**32)"),
        (("train", "--env", "CustomEnv", "--seed", str(2**32)), "--seed: must be in [0, 2**32)"),
        (("train", "--env", "CustomEnv", "--set", "seed=-5"), "'seed' must be in [0, 2**32)"),
        (("evaluate", "runs", "--seed", "-1"), "--seed: must be in [0, 2**32)"),
        (("infer", "x.onnx", "--seed", "99999999999"), "--seed: must be in [0, 2**32)"),
        (
            ("demos", "record", "--expert", "scripted", "--env", "CustomEnv", "--seed", "-3", "--out", "x.arrow"),
            "--seed",
        ),
        (("expert", "train", "--env", "CartPole-v1", "--seed", "-1"), "--seed: must be in [0, 2**32)"),
        (("evaluate", "runs", "--episodes", "0"), "--episodes: must be from 1"),
        (("train", "--env", "CustomEnv", "--device", "meta"), "'meta' is not supported"),
        (("train", "--env", "CustomEnv", "--device", "mps"), "'mps' is not supported"),
        (("train", "--env", "CustomEnv", "--device", "xla"), "'xla' is not supported"),
        (("expert", "train", "--env", "CartPole-v1", "--device", "meta"), "'meta' is not supported"),
        (("train", "--env", "CustomEnv", "--set", "ppo.batch_size=1"), "'ppo.batch_size' must be >= 2"),
        (("train", "--config", "/dev/zero"), "a device or socket, not a plain file"),
        (("train", "--env", "CustomEnv", "--actors", "500", "--local-actors", "500"), "'fleet.local_actors': 500"),
        (("actor", "--connect", "tcp://127.0.0.1:9", "--learner-timeout", "nan"), "--learner-timeout"),
        (("actor", "--connect", "tcp://127.0.0.1:9", "--learner-timeout", "inf"), "--learner-timeout"),
        (("actor", "--connect", "inproc://x"), "inproc:// reaches only threads"),
        (("train", "--env", "CustomEnv", "--actors", "1", "--listen", "inproc://x"), "inproc://"),
        (
            ("train", "--env", "CustomEnv", "--actors", "1", "--listen", "tcp://127.0.0.1:70000"),
            "a port from 1 to 65535",
        ),
        (
            ("tune", "--env", "CustomEnv", "--space", "experts/spaces/gail.yaml", "--resources", "cpu=nan"),
            "a finite number",
        ),
        (("tune", "--env", "CustomEnv", "--space", "experts/spaces/gail.yaml", "--resources", "cpu=0"), "cpu > 0"),
        (
            ("tune", "--env", "CustomEnv", "--space", "experts/spaces/gail.yaml", "--resources", "tpu=1"),
            "cpu and gpu only",
        ),
        (
            (
                "tune",
                "--env",
                "CustomEnv",
                "--space",
                "experts/spaces/small.yaml",
                "--preset",
                "tiny",
                "--ray-address",
                "127.0.0.1:1",
            ),
            "nothing answers there within 10 s",
        ),
        (
            ("train", "--env", "CustomEnv", "--fleet", "ray", "--actors", "1", "--ray-address", "127.0.0.1:1"),
            "nothing answers there within 10 s",
        ),
        (
            ("tune", "--env", "CustomEnv", "--space", "experts/spaces/small.yaml", "--resources", "cpu=1000000"),
            "so no trial could ever start",
        ),
    ],
)
def test_bad_flags_are_one_line(tmp_path, args, message):
    r = (
        run_cli(*args, "--demos", "data/customenv.arrow")
        if args[0] in ("train", "tune") and "--config" not in args
        else run_cli(*args, timeout=60)
    )
    _one_line(r, message)


def test_key_files_that_cannot_be_trusted_are_refused(tmp_path):
    import json

    keys = _keys(tmp_path)
    assert oct(keys.stat().st_mode & 0o777) == "0o600"
    loose = tmp_path / "loose.json"
    loose.write_bytes(keys.read_bytes())
    loose.chmod(0o644)
    _one_line(run_cli("actor", "--connect", "tcp://127.0.0.1:9", "--key-file", str(loose)), "chmod 600")
    (tmp_path / "o").mkdir()
    other = json.loads(_keys(tmp_path / "o").read_text())
    mixed = json.loads(keys.read_text())
    mixed["server_public"] = other["server_public"]
    bad = tmp_path / "mixed.json"
    bad.write_text(json.dumps(mixed))
    bad.chmod(0o600)
    _one_line(
        run_cli("actor", "--connect", "tcp://127.0.0.1:9", "--key-file", str(bad)),
        "its server public key is not the one of its server secret key",
    )


def test_a_checkpoint_that_does_not_fit_falls_back_to_an_older_one(tmp_path):
    import torch as th

    run = tmp_path / "run"
    r = run_cli(
        "train",
        "--env",
        "CustomEnv",
        "--demos",
        "data/customenv.arrow",
        "--preset",
        "tiny",
        "--total-steps",
        "256",
        "--set",
        "checkpoint_every=1",
        "--quiet",
        "--run-dir",
        str(run),
    )
    assert r.returncode == 0, r.stderr
    newest = sorted((run / "checkpoints").glob("round_*.pt"))[-1]
    data = th.load(newest, weights_only=True)
    name = next(iter(data["learner"]["generator"]["policy"]))
    data["learner"]["generator"]["policy"][name] = th.full_like(
        data["learner"]["generator"]["policy"][name], float("nan")
    )
    th.save(data, newest)
    r = run_cli("train", "--resume", str(run), "--total-steps", "320", "--quiet")
    assert r.returncode == 0, r.stderr
    assert "skipped the checkpoint of round 4" in r.stdout + r.stderr and "resuming at round 3" in r.stdout, r.stdout
    saved = (run / "config.yaml").read_text()
    (run / "config.yaml").write_text(saved.replace("- 16", "- 24"))  # an edited net_arch: no checkpoint fits
    _one_line(run_cli("train", "--resume", str(run), "--total-steps", "512"), "no usable checkpoint")
    (run / "config.yaml").write_text(saved)


def test_crafted_onnx_files_are_one_line(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    def model(meta: dict, out_shape=(None,), out_type=TensorProto.INT64, input_name="obs"):
        x = helper.make_tensor_value_info(input_name, TensorProto.FLOAT, [None, 2])
        y = helper.make_tensor_value_info("action", out_type, list(out_shape))
        node = helper.make_node("ReduceSum", [input_name], ["s"], keepdims=0)
        cast = helper.make_node("Cast", ["s"], ["action"], to=out_type)
        g = helper.make_graph([node, cast], "g", [x], [y])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        for k, v in meta.items():
            m.metadata_props.append(onnx.StringStringEntryProto(key=k, value=v))
        return m

    box = '{"type": "Box", "shape": [2], "dtype": "float32", "low": "-inf", "high": "inf"}'
    cases = {
        "bad json": (
            {"observation_space": "{", "action_space": "{}", "env_id": "CustomEnv"},
            {},
            "metadata is malformed",
        ),
        "nested too deeply": (
            {"observation_space": "[" * 100_000, "action_space": box, "env_id": "CustomEnv"},
            {},
            "metadata is malformed (ValueError: JSON nested too deeply)",
        ),
        "unknown space": (
            {"observation_space": '{"type": "Graph"}', "action_space": box, "env_id": "CustomEnv"},
            {},
            "metadata is malformed",
        ),
        "huge shape": (
            {
                "observation_space": '{"type": "Box", "shape": [100000, 100000], "dtype": "float32"}',
                "action_space": box,
                "env_id": "CustomEnv",
            },
            {},
            "metadata is malformed",
        ),
        "odd dtype": (
            {
                "observation_space": '{"type": "Box", "shape": [2], "dtype": "object"}',
                "action_space": box,
                "env_id": "CustomEnv",
            },
            {},
            "metadata is malformed",
        ),
        "wrong input": (
            {"observation_space": box, "action_space": box, "env_id": "CustomEnv"},
            {"input_name": "x"},
            "takes ['x']",
        ),
        "actions of the wrong shape": (
            {"observation_space": box, "action_space": box, "env_id": "CustomEnv"},
            {"out_type": TensorProto.FLOAT},
            "the graph returned actions of shape ()",
        ),
        "actions outside Discrete": (
            {"observation_space": box, "action_space": '{"type": "Discrete", "n": 1}', "env_id": "CustomEnv"},
            {},
            None,
        ),
    }
    for name, (meta, kw, message) in cases.items():
        path = tmp_path / f"{name.replace(' ', '_')}.onnx"
        onnx.save(model(meta, **kw), str(path))
        r = run_cli("infer", str(path), "--episodes", "1", timeout=60)
        if message is None:  # a sum of observations is rarely exactly 0: an action outside Discrete(1), or a fit
            assert r.returncode in (0, 2) and "Traceback" not in r.stderr, (name, r.stderr)
        else:
            _one_line(r, message)


def test_an_onnx_model_whose_weights_name_another_file_is_refused_before_anything_reads_it(tmp_path):
    """ONNX lets a tensor be stored in a file it names by path; onnxruntime before its fixes of December 2025
    read whatever it named (an absolute path, `../`), and a graph of one Identity then returns that file's bytes
    as its actions. A model is refused when any tensor anywhere in it (an initializer, a Constant node, a
    subgraph) names a file, even one beside it, which a newer onnxruntime would read."""
    import onnx
    from onnx import TensorProto, helper

    from gailkit.inference import InferenceError, OnnxPolicy

    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"0123456789abcdef")
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "beside.bin").write_bytes(b"0123456789abcdef")
    box = '{"type": "Box", "shape": [2], "dtype": "float32", "low": "-inf", "high": "inf"}'

    def external(name: str, location: str) -> TensorProto:
        t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=[2], data_location=TensorProto.EXTERNAL)
        for k, v in {"location": location, "offset": "0", "length": "8"}.items():
            t.external_data.add(key=k, value=v)
        return t

    def model(where: str, location: str) -> onnx.ModelProto:
        x = helper.make_tensor_value_info("obs", TensorProto.FLOAT, [None, 2])
        y = helper.make_tensor_value_info("action", TensorProto.FLOAT, [None, 2])
        inits, nodes = [], [helper.make_node("Add", ["obs", "w"], ["action"])]
        if where == "initializer":
            inits.append(external("w", location))
        elif where == "constant":
            nodes.insert(0, helper.make_node("Constant", [], ["w"], value=external("c", location)))
        else:  # a branch of an If whose condition is a constant
            branch = helper.make_graph(
                [helper.make_node("Constant", [], ["b"], value=external("deep", location))],
                "branch",
                [],
                [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2])],
            )
            nodes[:0] = [
                helper.make_node("Constant", [], ["cond"], value=helper.make_tensor("k", TensorProto.BOOL, [], [1])),
                helper.make_node("If", ["cond"], ["w"], then_branch=branch, else_branch=branch),
            ]
        m = helper.make_model(
            helper.make_graph(nodes, "g", [x], [y], inits), opset_imports=[helper.make_opsetid("", 17)]
        )
        for k, v in {"observation_space": box, "action_space": box, "env_id": "Pendulum-v1"}.items():
            m.metadata_props.append(onnx.StringStringEntryProto(key=k, value=v))
        return m

    cases = [("initializer", str(secret)), ("initializer", "../secret.bin"), ("constant", "beside.bin")]
    cases.append(("subgraph", "beside.bin"))
    for where, location in cases:
        path = folder / f"{where}.onnx"
        path.write_bytes(model(where, location).SerializeToString())
        with pytest.raises(InferenceError, match="is stored in another file"):
            OnnxPolicy(path)
        r = run_cli("infer", str(path), "--episodes", "1", timeout=60)
        _one_line(r, f"{path}: refused: its tensor", "is stored in another file")
        assert "0123456789" not in r.stdout + r.stderr


def test_json_and_yaml_nested_too_deeply_are_one_line_everywhere(tmp_path):
    """Python's JSON decoder and YAML's composer recurse once a level: `[[[[...` of a few hundred KB raised
    RecursionError, a traceback, from a settings file, a run's config.yaml, an expert's JSON, an SB3 zip,
    Minari's metadata, an rl-zoo3 config.yml; each is one line now (ONNX metadata: the crafted-ONNX test)."""
    import shutil
    import zipfile

    from gailkit.rollout import wire

    deep_json, deep_yaml = "[" * 200_000 + "]" * 200_000, "a: " + "[" * 200_000 + "]" * 200_000 + "\n"
    (tmp_path / "deep.yaml").write_text(deep_yaml)
    demos_args = ("--env", "CartPole-v1", "--demos", "data/cartpole.arrow")
    r = run_cli("train", *demos_args, "--config", str(tmp_path / "deep.yaml"), "--run-dir", str(tmp_path / "r1"))
    _one_line(r, "deep.yaml: not valid YAML (YAML nested too deeply)")
    r = run_cli("train", *demos_args, "--set", "ppo.n_steps=" + "[" * 20_000, "--run-dir", str(tmp_path / "r2"))
    _one_line(r, "'ppo.n_steps': expected an integer")
    run = tmp_path / "run"
    r = run_cli("train", *demos_args, "--preset", "tiny", "--total-steps", "64", "--run-dir", str(run), "--quiet")
    assert r.returncode == 0, r.stderr
    (run / "config.yaml").write_text(deep_yaml)
    _one_line(run_cli("train", "--resume", str(run)), "config.yaml: not valid YAML (YAML nested too deeply)")
    shutil.copy(ROOT / "experts" / "cartpole.zip", tmp_path / "e.zip")
    (tmp_path / "e.json").write_text(deep_json)
    record = ("demos", "record", "--episodes", "1", "--out", str(tmp_path / "x.arrow"))
    r = run_cli(*record, "--expert", str(tmp_path / "e.zip"), "--env", "CartPole-v1")
    _one_line(r, "e.json: not readable JSON (JSON nested too deeply)")
    with zipfile.ZipFile(tmp_path / "z.zip", "w") as z:
        z.writestr("data", deep_json)
        z.writestr("policy.pth", b"")
    r = run_cli(*record, "--expert", str(tmp_path / "z.zip"), "--env", "CartPole-v1")
    _one_line(r, "z.zip: not a readable stable-baselines3 zip (ValueError: JSON nested too deeply)")
    zoo = tmp_path / "logs" / "ppo" / "CartPole-v1_1"
    (zoo / "CartPole-v1").mkdir(parents=True)
    shutil.copy(ROOT / "experts" / "cartpole.zip", zoo / "CartPole-v1.zip")
    (zoo / "CartPole-v1" / "config.yml").write_text(deep_yaml)
    _one_line(
        run_cli(*record, "--expert", str(zoo)), "config.yml: not rl-zoo3's hyperparameters (YAML nested too deeply)"
    )
    (tmp_path / "mi" / "data").mkdir(parents=True)
    (tmp_path / "mi" / "data" / "metadata.json").write_text(deep_json)
    _one_line(run_cli("demos", "inspect", str(tmp_path / "mi")), "no demo files")
    assert not (tmp_path / "x.arrow").exists()
    with pytest.raises(wire.ProtocolError, match="bad JSON"):
        wire.decode_json(deep_json.encode())


def test_yaml_whose_aliases_expand_past_any_setting_is_one_line_at_once(tmp_path):
    """Anchors nested ten deep (the "billion laughs") load at once, since PyYAML shares each alias, yet every
    walk of the result expands them: a settings file, a run's config.yaml or an rl-zoo3 config.yml of a dozen
    lines hung `train` in its check of the values (and would have in writing the run's config). Each is refused
    in one line now; and a long value is shown cut short in its error, not in full."""
    import shutil

    laughs = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    laughs += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    bomb = "\n".join(laughs) + "\nseed: *a9\n"
    (tmp_path / "bomb.yaml").write_text(bomb)
    demos_args = ("--env", "CartPole-v1", "--demos", "data/cartpole.arrow")
    expands = "not valid YAML (YAML whose aliases expand it past 1,000,000 values)"
    r = run_cli("train", *demos_args, "--config", str(tmp_path / "bomb.yaml"), "--run-dir", str(tmp_path / "r1"),
                timeout=60)  # fmt: skip
    _one_line(r, f"bomb.yaml: {expands}")
    assert not (tmp_path / "r1").exists()
    (tmp_path / "long.yaml").write_text(f"seed: [{', '.join(map(str, range(100_000)))}]\n")
    r = run_cli("train", *demos_args, "--config", str(tmp_path / "long.yaml"), "--run-dir", str(tmp_path / "r2"))
    _one_line(r, "'seed': expected an integer, got [0, 1, 2, 3, 4, 5, ...]")
    assert len(r.stderr) < 300
    run = tmp_path / "run"
    r = run_cli("train", *demos_args, "--preset", "tiny", "--total-steps", "64", "--run-dir", str(run), "--quiet")
    assert r.returncode == 0, r.stderr
    kept = (run / "final" / "checkpoint.pt").read_bytes()
    (run / "config.yaml").write_text(bomb)
    _one_line(run_cli("train", "--resume", str(run), timeout=60), f"config.yaml: {expands}")
    assert (run / "final" / "checkpoint.pt").read_bytes() == kept
    zoo = tmp_path / "logs" / "ppo" / "CartPole-v1_1"
    (zoo / "CartPole-v1").mkdir(parents=True)
    shutil.copy(ROOT / "experts" / "cartpole.zip", zoo / "CartPole-v1.zip")
    (zoo / "CartPole-v1" / "config.yml").write_text(bomb)
    out = tmp_path / "x.arrow"
    r = run_cli("demos", "record", "--episodes", "1", "--out", str(out), "--expert", str(zoo), timeout=60)
    _one_line(r, "config.yml: not rl-zoo3's hyperparameters (YAML whose aliases expand it past 1,000,000 values)")
    assert not out.exists()


def _tmpfs(folder: Path, size_kb: int) -> bool:
    folder.mkdir(parents=True, exist_ok=True)
    return (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(folder)], capture_output=True
        ).returncode
        == 0
    )


def test_a_full_disk_while_saving_is_one_line_and_leaves_no_partial_file(tmp_path):
    run = tmp_path / "run"
    r = run_cli("train", "--env", "CustomEnv", "--demos", "data/customenv.arrow", *TINY, "--run-dir", str(run))
    assert r.returncode == 0, r.stderr
    checkpoint_kb = max(p.stat().st_size for p in run.rglob("*.pt")) // 1024
    small = tmp_path / "small"
    if not _tmpfs(small, max(16, checkpoint_kb // 2)):
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        r = run_cli(
            "train", "--env", "CustomEnv", "--demos", "data/customenv.arrow", *TINY, "--run-dir", str(small / "r")
        )
        _one_line(r, "No space left on device")
        assert not [p for p in small.rglob("*") if p.name.startswith(".") and ".tmp" in p.name]  # no temp left behind
    finally:
        subprocess.run(["umount", str(small)], check=False)
    fits = tmp_path / "fits"
    if not _tmpfs(fits, checkpoint_kb * 3 // 2 + sum(p.stat().st_size for p in run.rglob("*") if p.is_file()) // 1024):
        pytest.skip("cannot mount a small tmpfs here")
    try:
        import shutil

        shutil.copytree(run, fits / "r")
        r = run_cli("train", "--resume", str(fits / "r"), "--total-steps", "4096")
        _one_line(r, "No space left on device")
        assert (fits / "r" / "final" / "checkpoint.pt").is_file()  # what was there is still there
    finally:
        subprocess.run(["umount", str(fits)], check=False)


def test_a_compressed_fragment_bomb_is_dropped_before_it_inflates(tmp_path):
    """100 KB of zstd that would inflate to 2 GB: refused from the message's own metadata, the process staying small."""
    script = tmp_path / "bomb.py"
    script.write_text(
        "import numpy as np, pyarrow as pa\n"
        "from gailkit.rollout import wire\n"
        "from gailkit.rollout.wire import Header, Kind, ProtocolError\n"
        "batch = pa.record_batch({'obs': pa.array(np.zeros(250_000_000, np.float64))})\n"
        "sink = pa.BufferOutputStream()\n"
        "with pa.ipc.new_stream(sink, batch.schema, options=pa.ipc.IpcWriteOptions(compression='zstd')) as w:\n"
        "    w.write_batch(batch)\n"
        "body = sink.getvalue().to_pybytes()\n"
        "del batch, sink\n"
        "try:\n"
        "    wire.decode_fragment(body, 0, 0)\n"
        "except ProtocolError as e:\n"
        "    print('refused', len(body), e)\n"
    )
    r = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.startswith("refused"), (r.stdout, r.stderr[-2000:])
    assert "compression bomb" in r.stdout and int(r.stdout.split()[1]) < 1 << 20


def test_export_writes_both_files_or_neither(tmp_path):
    run = tmp_path / "run"
    r = run_cli("train", "--env", "CustomEnv", "--demos", "data/customenv.arrow", *TINY, "--run-dir", str(run))
    assert r.returncode == 0, r.stderr
    fifo = tmp_path / "p.zip"
    os.mkfifo(fifo)
    _one_line(run_cli("export", str(run), "--out", str(tmp_path / "p.onnx"), "--sb3", str(fifo)), "a FIFO")
    assert not (tmp_path / "p.onnx").exists()


def test_a_minari_write_that_fails_leaves_nothing_in_the_root(tmp_path):
    root = tmp_path / "minari"
    env = {"MINARI_DATASETS_PATH": str(root)}
    for bad in ("minari:x/a-v0", "minari:../up/ab-v0", "minari:no-version"):
        _one_line(run_cli("demos", "convert", "data/customenv.arrow", bad, env=env), bad)
    assert not root.exists() or not any(root.rglob("*"))


def test_an_error_without_a_message_still_makes_one_line():
    """A bare `assert` or `raise ValueError()` in a library (or a user's env) has no first line to quote: its
    type is quoted instead of an IndexError escaping as a traceback."""
    from gailkit.core.errors import first_line

    assert first_line(AssertionError()) == "AssertionError"
    assert first_line(ValueError("\n   \n  the cause \nmore")) == "the cause"
    assert first_line(RuntimeError("x" * 500), 200) == "x" * 200
