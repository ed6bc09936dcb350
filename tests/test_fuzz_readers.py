"""Fuzzing every reader and every setting with hypothesis: mutated Arrow (file, stream, compressed),
Parquet, Minari (HDF5 and Arrow), imitation folders, ONNX files, checkpoints, key files, and any value
for any setting. Only gailkit's one-line errors may come out: a traceback type fails the test, and an
abort (Arrow's SIGABRT on bad offsets) would end the whole run, a reader that runs past 20 s fails, and
so does a process whose peak memory passes 2 GB (a reader that allocated what a file declared)."""

from __future__ import annotations

import dataclasses
import json
import shutil
import typing
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gailkit.config import TrainConfig
from gailkit.core.errors import GailkitError
from gailkit.data import demos

ROOT = Path(__file__).resolve().parents[1]
FUZZ = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
MUTATIONS = st.tuples(
    st.lists(st.tuples(st.integers(0, 10**7), st.integers(0, 255)), max_size=8),
    st.integers(0, 4096),
    st.binary(max_size=32),
)


def _mutate(data: bytes, mutation) -> bytes:
    flips, cut, tail = mutation
    out = bytearray(data)
    for pos, value in flips:
        out[pos % len(out)] = value
    return bytes(out[: max(1, len(out) - cut)]) + tail


def _small_demos() -> demos.Demos:
    d = demos.load_file(ROOT / "data" / "customenv.arrow")
    keep = int(d.episode_bounds()[3])
    return dataclasses.replace(d, **{k: v[:keep] for k, v in d.columns().items() if v is not None})


@pytest.fixture(scope="module")
def seeds(tmp_path_factory) -> dict[str, Path]:
    """One small, valid file (or folder) of each format the readers take."""
    folder = tmp_path_factory.mktemp("seeds")
    d = _small_demos()
    out = {"arrow": demos.save(d, folder / "d.arrow"), "parquet": demos.save(d, folder / "d.parquet")}
    table = pa.ipc.open_file(pa.memory_map(str(out["arrow"]))).read_all()
    # the last: a file of several record batches, which is read a column and a batch at a time
    for name, compression, stream, rows in (
        ("zstd.arrow", "zstd", False, None),
        ("lz4stream.arrow", "lz4", True, None),
        ("batches.arrow", "zstd", False, 8),
    ):
        options = pa.ipc.IpcWriteOptions(compression=compression)
        with (pa.ipc.new_stream if stream else pa.ipc.new_file)(str(folder / name), table.schema, options=options) as w:
            w.write_table(table, max_chunksize=rows)
        out[name] = folder / name
    return out


MAX_PEAK_MB = 2048  # the whole pytest process (torch, Ray and the suite loaded: ~0.6-1 GB) never passes this


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang("a reader ran past 20 s")


def _expect_only_gailkit_errors(fn) -> None:
    """`fn` returns or raises a GailkitError, within 20 s (a hang fails the test instead of stalling the suite)."""
    import resource
    import signal

    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(20)
    try:
        fn()
    except GailkitError:
        pass
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    assert peak_mb < MAX_PEAK_MB, (
        f"the test process peaked at {peak_mb:.0f} MB: a reader allocated what a file declared"
    )


@pytest.mark.parametrize("kind", ["arrow", "parquet", "zstd.arrow", "lz4stream.arrow", "batches.arrow"])
@FUZZ
@given(mutation=MUTATIONS)
def test_fuzz_mutated_table_files(tmp_path, seeds, kind, mutation):
    path = tmp_path / Path(kind).name
    path.write_bytes(_mutate(seeds[kind].read_bytes(), mutation))
    _expect_only_gailkit_errors(lambda: demos.load_file(path))
    _expect_only_gailkit_errors(lambda: demos.load(path, env_id="CustomEnv"))  # the metadata-only path too


@FUZZ
@given(data=st.binary(max_size=4096), suffix=st.sampled_from([".arrow", ".parquet", ".pkl"]))
def test_fuzz_random_bytes_in_every_format(tmp_path, data, suffix):
    path = tmp_path / f"f{suffix}"
    path.write_bytes(data)
    _expect_only_gailkit_errors(lambda: demos.load_file(path))


@pytest.fixture(scope="module")
def minari_seeds(tmp_path_factory) -> dict[str, Path]:
    pytest.importorskip("minari")
    import os

    root = tmp_path_factory.mktemp("minari")
    old = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = str(root)
    try:
        d = _small_demos()
        return {fmt: demos.save(d, f"minari:fuzz/{fmt}-v0", minari_format=fmt) for fmt in ("hdf5", "arrow")}
    finally:
        if old is None:
            os.environ.pop("MINARI_DATASETS_PATH")
        else:
            os.environ["MINARI_DATASETS_PATH"] = old


@pytest.mark.parametrize("fmt", ["hdf5", "arrow"])
@FUZZ
@given(mutation=MUTATIONS, which=st.integers(0, 100))
def test_fuzz_mutated_minari_datasets(tmp_path, minari_seeds, fmt, mutation, which):
    import tempfile

    data = Path(tempfile.mkdtemp(dir=tmp_path)) / "data"
    shutil.copytree(minari_seeds[fmt], data)
    files = sorted(p for p in data.rglob("*") if p.is_file())
    victim = files[which % len(files)]
    victim.write_bytes(_mutate(victim.read_bytes(), mutation))
    _expect_only_gailkit_errors(lambda: demos.load_file(data))


@FUZZ
@given(
    state=st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=20),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=3),
        max_leaves=12,
    ),
    files=st.lists(st.text(min_size=1, max_size=20), max_size=3),
)
def test_fuzz_imitation_folders(tmp_path, state, files):
    folder = tmp_path / "ds"
    folder.mkdir(exist_ok=True)
    (folder / "dataset_info.json").write_text("{}")
    (folder / "state.json").write_text(
        json.dumps({"_data_files": [{"filename": f} for f in files]} if files else state)
    )
    _expect_only_gailkit_errors(lambda: demos.load_file(folder))
    shutil.rmtree(folder)


@pytest.fixture(scope="module")
def onnx_seed(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("onnx")
    from gailkit import cli

    run = folder / "run"
    assert (
        cli.main(
            [
                "train",
                "--env",
                "CustomEnv",
                "--demos",
                str(ROOT / "data" / "customenv.arrow"),
                "--preset",
                "tiny",
                "--total-steps",
                "64",
                "--quiet",
                "--run-dir",
                str(run),
            ]
        )
        == 0
    )
    assert cli.main(["export", str(run), "--out", str(folder / "p.onnx")]) == 0
    return folder


@FUZZ
@given(mutation=MUTATIONS)
def test_fuzz_mutated_onnx_files(tmp_path, onnx_seed, mutation):
    from gailkit.inference import OnnxPolicy

    path = tmp_path / "p.onnx"
    path.write_bytes(_mutate((onnx_seed / "p.onnx").read_bytes(), mutation))

    def use():
        pi = OnnxPolicy(path)
        pi.predict(np.zeros(pi.obs_shape, pi.obs_dtype))

    _expect_only_gailkit_errors(use)


@FUZZ
@given(mutation=MUTATIONS)
def test_fuzz_mutated_checkpoints(tmp_path, onnx_seed, mutation):
    from gailkit.run import checkpoint

    path = tmp_path / "c.pt"
    path.write_bytes(_mutate((onnx_seed / "run" / "final" / "checkpoint.pt").read_bytes(), mutation))
    _expect_only_gailkit_errors(lambda: checkpoint.load_policy(path))


@pytest.fixture(scope="module")
def frame_replay_seed():
    """A replay of frame stacks (each frame held once) holding 40 transitions of 3 episodes, as its bytes."""
    import gymnasium as gym

    from gailkit.algo.generator.frame_replay import FrameReplay

    space, acts = gym.spaces.Box(0, 255, (2, 4, 4), np.uint8), gym.spaces.Box(-1, 1, (1,), np.float32)
    frames = np.random.default_rng(0).integers(0, 255, (41, 4, 4), np.uint8)
    stacks = np.stack([frames[np.maximum(np.arange(i - 1, i + 1), 0)] for i in range(41)])
    r = FrameReplay(space, acts, 64)
    ends = np.isin(np.arange(40), [12, 25])
    r.add(stacks[:-1], np.zeros((40, 1), np.float32), stacks[1:], ends)
    return r.state(), lambda: FrameReplay(space, acts, 64)


@FUZZ
@given(mutation=MUTATIONS)
def test_fuzz_mutated_frame_replays(frame_replay_seed, mutation):
    """A checkpoint's replay of frame stacks, mutated: refused with ValueError (which the checkpoint loader
    turns into its one line) and nothing changed, or read whole with every frame id in the ring."""
    blob, make = frame_replay_seed
    r = make()
    try:
        r.load_state(_mutate(blob, mutation))
    except ValueError:
        assert r.size == 0 and r.written == 0
        return
    rows = np.arange(r.size)
    assert r.size <= r.capacity and r._rows_held(rows).all()
    if r.size:
        r.sample(8, np.random.default_rng(0))


@FUZZ
@given(
    doc=st.dictionaries(
        st.sampled_from(["server_public", "server_secret", "client_public", "client_secret", "x"]),
        st.text(max_size=45) | st.integers(),
        max_size=5,
    )
    | st.text(max_size=50)
)
def test_fuzz_key_files(tmp_path, doc):
    from gailkit.rollout import transport

    path = tmp_path / "k.json"
    path.write_text(json.dumps(doc))
    path.chmod(0o600)
    _expect_only_gailkit_errors(lambda: transport.read_keys(path))


def _settings(cls, prefix: str = "") -> list[str]:
    out = []
    for f in dataclasses.fields(cls):
        tp = typing.get_type_hints(cls)[f.name]
        if dataclasses.is_dataclass(tp):
            out += _settings(tp, f"{prefix}{f.name}.")
        else:
            out.append(f"{prefix}{f.name}")
    return out


VALUES = (
    st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.booleans()
    | st.text(max_size=12)
    | st.sampled_from(
        [
            "",
            "-1",
            "0",
            "1",
            "1e999",
            ".nan",
            "[1, -2]",
            "{a: 1}",
            "null",
            "cuda:99",
            "meta",
            "tcp://0.0.0.0:1",
            "inproc://x",
            "2147483648",
        ]
    )
)


@FUZZ
@given(key=st.sampled_from(_settings(TrainConfig)), value=VALUES)
def test_fuzz_any_value_for_any_setting(key, value):
    """Every setting takes any value from `--set` with a one-line ConfigError or a config that checks."""
    from gailkit import config
    from gailkit.run.session import resolve_device

    def build():
        cfg = config.build(TrainConfig, [], [f"{key}={value}"])
        cfg.check()
        resolve_device(cfg.device)

    _expect_only_gailkit_errors(build)


COMMANDS = [
    ["train"],
    ["evaluate", "runs/x"],
    ["export", "runs/x"],
    ["infer", "x.onnx"],
    ["actor"],
    ["tune"],
    ["demos", "record"],
    ["demos", "inspect"],
    ["demos", "convert"],
    ["keys", "generate"],
    ["config", "show"],
    ["expert", "train"],
]
FLAGS = [
    "--seed",
    "--episodes",
    "--total-steps",
    "--device",
    "--actors",
    "--local-actors",
    "--learner-timeout",
    "--listen",
    "--connect",
    "--set",
    "--resources",
    "--trials",
    "--budget",
    "--checkpoint",
    "--actor-id",
    "--env",
]


@FUZZ
@given(command=st.sampled_from(COMMANDS), flag=st.sampled_from(FLAGS), value=VALUES)
def test_fuzz_any_flag_value_parses_or_is_one_line(command, flag, value):
    """argparse stage of every command: a Namespace, or exit 2 with one line (never a traceback)."""
    import contextlib
    import io

    from gailkit.cli import build_parser

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            build_parser().parse_args([*command, flag, str(value)])
        except SystemExit as e:
            assert e.code == 2 and err.getvalue().count("\n") == 1 and err.getvalue().startswith("gailkit: error: "), (
                err.getvalue()
            )


@FUZZ
@given(
    doc=st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.dictionaries(
                st.sampled_from(
                    [
                        "base",
                        "space",
                        "trials",
                        "budget",
                        "seeds",
                        "scheduler",
                        "search",
                        "resources",
                        "env",
                        "id",
                        "ppo",
                        "unsafe_pickle",
                        "cpu",
                        "uniform",
                        "x",
                    ]
                ),
                inner,
                max_size=4,
            )
        ),
        max_leaves=16,
    )
)
def test_fuzz_tune_yaml(tmp_path, doc):
    """A tune folder's tune.yaml, any shape: a Search or one line."""
    import yaml

    from gailkit.tune import load_search

    path = tmp_path / "tune.yaml"
    path.write_text(yaml.safe_dump(doc))
    _expect_only_gailkit_errors(lambda: load_search(path))
