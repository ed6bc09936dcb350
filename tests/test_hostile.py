"""Hostile inputs, by class: folders that try to open doors, files that name other files, bombs that
declare more than they hold, files that never end. Each case runs the real command and checks one
line, exit 2, that nothing ran (a marker file), and, for bombs, the peak memory of the process."""

from __future__ import annotations

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
    path.write_text(f"open({str(marker)!r}, 'w').write('ran')\n"
                    "import gymnasium as gym\nclass Env(gym.Env):\n    pass\n")
    return path


# ---------------------------------------------------------------------------------------------
# Folders and settings files are data: they never open a door.


def test_a_run_folder_cannot_turn_on_unsafe_pickle_listen_or_code(tmp_path):
    run, marker = tmp_path / "run", tmp_path / "ran"
    r = run_cli("train", "--env", "CustomEnv", "--demos", "data/customenv.arrow", *TINY, "--run-dir", str(run))
    assert r.returncode == 0, r.stderr
    evil = _evil_pickle(tmp_path / "evil.pkl", marker)
    saved = (run / "config.yaml").read_text()
    tampered = saved.replace("unsafe_pickle: false", "unsafe_pickle: true").replace(
        "demos: data/customenv.arrow", f"demos: {evil}").replace("listen: ''", "listen: tcp://0.0.0.0:5999")
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
    from gailkit import train

    (tmp_path / "experts").mkdir()
    (tmp_path / "experts" / "cartpole.gail.yaml").write_text("env: {id: CartPole-v1}\nunsafe_pickle: true\nseed: 4242\n")
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
    r = subprocess.run([str(Path(sys.executable).parent / "gailkit"), "train", "--env", "CartPole-v1", "--demos",
                        str(ROOT / "data" / "cartpole.arrow"), *TINY, "--actors", "1", "--envs-per-actor", "2",
                        "--run-dir", str(tmp_path / "run")], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert not marker.exists()


# ---------------------------------------------------------------------------------------------
# Files that name other files, and files that never end.


def _minari(tmp_path: Path, data_format: str = "hdf5") -> tuple[Path, dict]:
    root = tmp_path / "minari"
    env = {"MINARI_DATASETS_PATH": str(root)}
    r = run_cli("demos", "convert", "data/customenv.arrow", "minari:test/ab-v0", "--minari-format", data_format, env=env)
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
        (folder / "state.json").write_text('{"_data_files": [{"filename": "%s"}]}' % name)
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
    code = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
            "sys.stdout.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) + '\\n'); "
            "sys.stderr.write(r.stderr); sys.exit(r.returncode)")
    r = subprocess.run([sys.executable, "-c", code, sys.executable, "-m", "gailkit.cli", *args], cwd=ROOT,
                       env=dict(os.environ, **(env or {})), capture_output=True, text=True, timeout=120)
    return r, int(r.stdout.split()[-1]) / 1024


def _ipc(table: pa.Table, path: Path, compression: str | None, stream: bool = False) -> Path:
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with (pa.ipc.new_stream if stream else pa.ipc.new_file)(str(path), table.schema, options=options) as w:
        w.write_table(table)
    return path


def _zeros_table(rows: int) -> pa.Table:
    from gailkit import arrow_tensors

    obs = arrow_tensors.to_arrow(np.zeros((rows, 2), np.float32))
    return pa.table({"obs": obs, "next_obs": obs, "acts": obs, "terminated": pa.array(np.zeros(rows, bool)),
                     "truncated": pa.array(np.zeros(rows, bool))})


def test_bombs_are_refused_before_they_inflate(tmp_path):
    h5py = pytest.importorskip("h5py")
    rows = 100_000_000  # 2.4 GB of zeros once read
    cases = {"zstd-file": _ipc(_zeros_table(rows), tmp_path / "zstd.arrow", "zstd"),
             "lz4-stream": _ipc(_zeros_table(rows), tmp_path / "lz4.arrow", "lz4", stream=True)}
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
    r, peak = _peak_mb_of("demos", "record", "--expert", str(bomb), "--env", "CartPole-v1", "--episodes", "1",
                          "--out", str(tmp_path / "d.arrow"))
    _one_line(r, "compression bomb")
    assert peak < 400 and not (tmp_path / "d.arrow").exists()  # this command imports torch: ~300 MB before any file


def test_arrow_files_with_bad_offsets_are_one_line_not_an_abort(tmp_path):
    values = pa.array(np.arange(10, dtype=np.float32))
    offsets = pa.array(np.array([0, 2, 1_000_000, 4], np.int32)).buffers()[1]
    bad = pa.ListArray.from_buffers(pa.list_(pa.float32()), 3, [None, offsets], children=[values])
    table = pa.table({"obs": bad, "next_obs": bad, "terminated": pa.array([False, False, True]),
                      "truncated": pa.array([False] * 3)})
    for stream in (False, True):
        path = _ipc(table, tmp_path / f"bad{stream}.arrow", None, stream)
        _one_line(run_cli("demos", "inspect", str(path)), "Offset invariant failure")


def test_a_pickle_over_the_budget_is_refused_unread(tmp_path):
    path = tmp_path / "big.pkl"
    path.write_bytes(pickle.dumps({"obs": np.zeros((3 << 20, 2), np.float32)}))  # 24 MB
    _one_line(run_cli("demos", "inspect", str(path), env={"GAILKIT_MEMORY_BUDGET": "8M"}), "over the 8,388,608")


def test_the_budget_setting_is_checked():
    _one_line(run_cli("demos", "inspect", "data/customenv.arrow", env={"GAILKIT_MEMORY_BUDGET": "lots"}),
              "GAILKIT_MEMORY_BUDGET='lots'")
