import dataclasses
import json
import pickle
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pyarrow as pa
import pytest

from gailkit.data import demos, envs
from gailkit.data.demos import DemoError, DemoWarning
from tests.conftest import ROOT, run_cli

FILE_SUFFIXES = ["x.arrow", "x.feather", "x.parquet", "x.pkl"]


def assert_same(a: demos.Demos, b: demos.Demos):
    for name, col in a.columns().items():
        other = getattr(b, name)
        assert other is not None, name
        assert col.shape == other.shape and np.array_equal(col, other), name


@pytest.mark.parametrize("name", FILE_SUFFIXES)
def test_round_trip_every_format(tmp_path, custom_demos, name):
    path = demos.save(custom_demos, tmp_path / name)
    back = demos.load_file(path)
    assert_same(custom_demos, back)
    assert back.meta.env_id == "CustomEnv" and back.meta.source == "scripted"
    assert back.meta.observation_space == custom_demos.meta.observation_space


def test_round_trip_discrete_with_terminations(tmp_path, cartpole_demos):
    assert cartpole_demos.terminated.sum() == 3  # random CartPole falls over: terminations, no truncation
    for name in FILE_SUFFIXES:
        assert_same(cartpole_demos, demos.load_file(demos.save(cartpole_demos, tmp_path / name)))


FIXTURES = Path(__file__).resolve().parent / "fixtures" / "imitation"


@pytest.mark.imitation
@pytest.mark.parametrize("name", ["trajectories_p2.pkl", "trajectories_p5.pkl", "transitions.pkl", "dataset"])
def test_files_written_by_imitation_load_without_importing_it(custom_demos, name):
    """Made by imitation's own code (tests/fixtures/imitation/make.py); read here without its import."""
    code = (
        "import sys, json; from gailkit.data import demos; "
        f"d = demos.load_file({str(FIXTURES / name)!r}); "
        "print(json.dumps({'imported': 'imitation' in sys.modules, 'n': len(d), 'format': d.meta.format, "
        "'obs': d.obs.tolist(), 'acts': d.acts.tolist(), 'next_obs': d.next_obs.tolist(), 'rews': d.rews.tolist(), "
        "'term': d.terminated.tolist(), 'trunc': d.truncated.tolist(), 'ep': d.episode_id.tolist()}))"
    )
    import json
    import subprocess
    import sys

    out = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert out["imported"] is False
    d = custom_demos
    for key, col in (
        ("obs", d.obs),
        ("acts", d.acts),
        ("next_obs", d.next_obs),
        ("rews", d.rews),
        ("ep", d.episode_id),
    ):
        assert np.array_equal(np.asarray(out[key], col.dtype), col), key
    if name == "transitions.pkl":  # its infos mark the very last step as a time-limit cut
        assert out["trunc"][-1] and not out["term"][-1] and sum(out["term"]) == d.terminated.sum() - 1
    else:
        assert out["term"] == d.terminated.tolist() and out["trunc"] == d.truncated.tolist()


@pytest.mark.imitation
def test_writing_imitation_formats_round_trips_through_imitation(tmp_path, custom_demos):
    pytest.importorskip("imitation")
    from imitation.data import serialize

    demos.save(custom_demos, tmp_path / "ds")
    assert_same(custom_demos, demos.load_file(tmp_path / "ds"))
    trajs = serialize.load(tmp_path / "ds")
    assert len(trajs) == custom_demos.n_episodes and np.array_equal(trajs[0].acts, custom_demos.acts[:8])
    demos.save(custom_demos, tmp_path / "t.pkl", pickle_layout="trajectories")
    assert_same(custom_demos, demos.load_file(tmp_path / "t.pkl"))


def test_writing_imitation_formats_without_it_is_one_clear_error(tmp_path, custom_demos):
    try:
        import imitation  # noqa: F401

        pytest.skip("imitation is installed here")
    except ImportError:
        pass
    with pytest.raises(DemoError, match="writing imitation dataset folders needs imitation"):
        demos.save(custom_demos, tmp_path / "ds")
    assert not (tmp_path / "ds").exists()


def test_image_observations_keep_their_shape(tmp_path):
    rng = np.random.default_rng(0)
    n = 6
    obs = rng.integers(0, 255, (n, 4, 5, 3), dtype=np.uint8)
    d = demos.Demos(
        obs=obs,
        acts=rng.integers(0, 3, n),
        next_obs=obs[::-1].copy(),
        terminated=np.eye(n, dtype=bool)[-1],
        truncated=np.zeros(n, bool),
        episode_id=np.zeros(n, np.int64),
        step=np.arange(n),
    )
    for name in ["i.arrow", "i.parquet", "i.pkl"]:
        back = demos.load_file(demos.save(d, tmp_path / name))
        assert back.obs.shape == (n, 4, 5, 3) and back.obs.dtype == np.uint8
        assert_same(d, back)


def _frame_demos(n: int, seed: int = 0) -> demos.Demos:
    """`n` transitions of 16x16x4 uint8 frames (1 KiB a row: written zstd, in record batches of 1,024 rows)."""
    rng = np.random.default_rng(seed)
    obs = (rng.integers(0, 4, (n + 1, 16, 16, 4)) * 60).astype(np.uint8)  # compressible, as frames are
    return demos.Demos(
        obs=obs[:-1],
        acts=rng.integers(0, 3, n),
        next_obs=obs[1:],
        terminated=np.arange(n) == n - 1,
        truncated=np.zeros(n, bool),
        episode_id=np.zeros(n, np.int64),
        step=np.arange(n),
    )


def test_a_frame_file_of_several_record_batches_is_read_a_column_and_a_batch_at_a_time(tmp_path):
    from gailkit.data.demos import arrow_read

    d = _frame_demos(2500)
    path = demos.save(d, tmp_path / "frames.arrow")
    assert pa.ipc.open_file(pa.memory_map(str(path))).num_record_batches == 3
    assert isinstance(arrow_read.open_ipc(path, batched=True), arrow_read.BatchedIpc)
    back = demos.load_file(path)
    assert back.obs.shape == (2500, 16, 16, 4) and back.obs.dtype == np.uint8
    assert_same(d, back)
    # what reads the whole table (Minari's Arrow parts) reads the same file to the same arrays
    table = arrow_read.read_table(path, "arrow")
    np.testing.assert_array_equal(arrow_read.column_to_numpy(table, "next_obs", path), d.next_obs)


def test_a_record_batch_that_breaks_a_column_is_refused_naming_the_file_column_and_batch(tmp_path):
    """Several batches whose list rows change width from one batch to the next (a file gailkit did not
    write), and one whose compressed body was damaged: one line each, naming what is wrong."""
    rows = [[float(i)] * 3 for i in range(6)] + [[float(i)] * 2 for i in range(6)]
    table = pa.table(
        {
            "obs": pa.array(rows, pa.list_(pa.float32())),
            "next_obs": pa.array(rows, pa.list_(pa.float32())),
            "acts": pa.array(np.zeros(12, np.int64)),
            "terminated": pa.array(np.arange(12) == 11),
        }
    )
    with pa.ipc.new_file(str(tmp_path / "ragged.arrow"), table.schema) as w:
        w.write_table(table, max_chunksize=6)
    with pytest.raises(
        DemoError, match=r"ragged.arrow: column 'obs' is ragged: record batch 1 holds rows of shape \(2,\)"
    ):
        demos.load_file(tmp_path / "ragged.arrow")

    path = demos.save(_frame_demos(2500), tmp_path / "damaged.arrow")
    data = bytearray(path.read_bytes())
    middle = len(data) // 2  # inside the frames' compressed bytes
    data[middle : middle + 4096] = bytes(4096)
    path.write_bytes(bytes(data))
    with pytest.raises(DemoError, match="damaged.arrow: (not a readable arrow file|.*declares)"):
        demos.load_file(path)


def test_arrow_load_is_zero_copy(tmp_path, custom_demos):
    back = demos.load_file(demos.save(custom_demos, tmp_path / "z.arrow"))
    assert not back.obs.flags.writeable  # a view of the memory-mapped file, not a copy


@pytest.mark.imitation
def test_trajectory_pickle_and_truncation(tmp_path, custom_demos):
    pytest.importorskip("imitation")
    d = dataclasses.replace(
        custom_demos, terminated=np.zeros(len(custom_demos), bool), truncated=custom_demos.terminated.copy()
    )
    path = demos.save(d, tmp_path / "t.pkl", pickle_layout="trajectories")
    back = demos.load_file(path)
    assert back.meta.format == "pickle/trajectories"
    assert_same(d, back)


def test_dict_of_arrays_and_step_dicts(tmp_path, cartpole_demos):
    d = cartpole_demos
    plain = {"obs": d.obs, "acts": d.acts, "next_obs": d.next_obs, "dones": d.dones, "rews": d.rews}
    (tmp_path / "plain.pkl").write_bytes(pickle.dumps(plain))
    steps = [{k: v[i] for k, v in plain.items()} for i in range(len(d))]
    (tmp_path / "steps.pickle").write_bytes(pickle.dumps(steps))
    for name in ("plain.pkl", "steps.pickle"):
        back = demos.load_file(tmp_path / name)
        assert np.array_equal(back.episode_id, d.episode_id) and np.array_equal(back.step, d.step)
        assert np.array_equal(back.acts, d.acts) and back.meta.env_id is None


def test_mixed_folder_serves_each_env_its_own(tmp_path, custom_demos, cartpole_demos):
    demos.save(custom_demos, tmp_path / "custom.arrow")
    demos.save(cartpole_demos, tmp_path / "sub" / "cartpole.parquet")
    demos.save(custom_demos, tmp_path / "sub" / "custom.pkl")
    # no metadata: a plain dict of arrays, used when its shapes fit the env
    (tmp_path / "anon.pkl").write_bytes(
        pickle.dumps(
            {
                "obs": custom_demos.obs,
                "acts": custom_demos.acts,
                "next_obs": custom_demos.next_obs,
                "dones": custom_demos.dones,
            }
        )
    )
    got = demos.load(tmp_path, env_id="CustomEnv", spaces=envs.spaces("CustomEnv"))
    assert len(got) == 3 * len(custom_demos) and got.n_episodes == 3 * custom_demos.n_episodes
    assert len(np.unique(got.episode_id)) == got.n_episodes
    assert got.meta.format == "mixed" and got.rews is None  # the anonymous file has no rews
    cp = demos.load(tmp_path, env_id="CartPole-v1", spaces=envs.spaces("CartPole-v1"))
    assert len(cp) == len(cartpole_demos)


def test_folder_without_the_env_says_what_it_holds(tmp_path, custom_demos):
    demos.save(custom_demos, tmp_path / "custom.arrow")
    with pytest.raises(DemoError, match=r"no demos for Pendulum-v1; it holds: custom.arrow \(CustomEnv\)"):
        demos.load(tmp_path, env_id="Pendulum-v1", spaces=envs.spaces("Pendulum-v1"))


def test_empty_folder_and_missing_path(tmp_path):
    with pytest.raises(DemoError, match="no demo files"):
        demos.load(tmp_path)
    with pytest.raises(DemoError, match="no such file or folder"):
        demos.load(tmp_path / "nope")
    (tmp_path / "x.csv").write_text("a,b\n")
    with pytest.raises(DemoError, match="unknown demo format"):
        demos.load(tmp_path / "x.csv")


# ---------------------------------------------------------------------------------------------
# Validation: each problem is one DemoError naming file, column and row.


def _with(d, **cols):
    return dataclasses.replace(d, **cols)


def _save_and_load(tmp_path, d, env_id):
    path = demos.save(d, tmp_path / "bad.arrow")
    return demos.load(path, env_id=env_id, spaces=envs.spaces(env_id))


def test_shape_mismatch(tmp_path, custom_demos):
    with pytest.raises(
        DemoError, match=r"bad.arrow: column 'obs' has shape \(2,\) per row, the env's space .* has \(4,\)"
    ):
        _save_and_load(tmp_path, dataclasses.replace(custom_demos, meta=demos.DemoMeta()), "CartPole-v1")


def test_demos_for_another_env(tmp_path, custom_demos):
    with pytest.raises(DemoError, match="no demos for CartPole-v1; it holds: bad.arrow \\(CustomEnv\\)"):
        _save_and_load(tmp_path, custom_demos, "CartPole-v1")


def test_float_actions_for_discrete(tmp_path, cartpole_demos):
    d = _with(cartpole_demos, acts=cartpole_demos.acts.astype(np.float32))
    with pytest.raises(DemoError, match="column 'acts' has dtype float32, expected integers"):
        _save_and_load(tmp_path, d, "CartPole-v1")


def test_discrete_action_out_of_range(tmp_path, cartpole_demos):
    acts = cartpole_demos.acts.copy()
    acts[7] = 2
    with pytest.raises(DemoError, match=r"column 'acts' row 7 is 2, outside Discrete\(2\)"):
        _save_and_load(tmp_path, _with(cartpole_demos, acts=acts), "CartPole-v1")


@pytest.mark.parametrize("column", ["obs", "next_obs", "acts"])
def test_nan_and_inf(tmp_path, custom_demos, column):
    arr = getattr(custom_demos, column).copy()
    arr[11, 1] = np.nan if column != "acts" else np.inf
    with pytest.raises(DemoError, match=f"column '{column}' row 11 is not finite"):
        _save_and_load(tmp_path, _with(custom_demos, **{column: arr}), "CustomEnv")


def test_out_of_bounds_actions_warn(tmp_path, custom_demos):
    acts = custom_demos.acts.copy()
    acts[3] = 1.5
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _save_and_load(tmp_path, _with(custom_demos, acts=acts), "CustomEnv")
    assert any(
        issubclass(w.category, DemoWarning)
        and "1 of 40 rows outside" in str(w.message)
        and "first at row 3" in str(w.message)
        for w in caught
    )


def test_ragged_columns(tmp_path, custom_demos):
    d = custom_demos
    (tmp_path / "r.pkl").write_bytes(
        pickle.dumps({"obs": d.obs, "acts": d.acts[:-1], "next_obs": d.next_obs, "dones": d.dones})
    )
    with pytest.raises(DemoError, match="r.pkl: column 'acts' has 39 rows, 'obs' has 40"):
        demos.load(tmp_path / "r.pkl")


def test_ragged_episode_steps(tmp_path, custom_demos):
    step = custom_demos.step.copy()
    step[10] = 5
    with pytest.raises(DemoError, match=r"column 'step' row 10 is 5, expected 2 \(episode 1 is ragged"):
        _save_and_load(tmp_path, _with(custom_demos, step=step), "CustomEnv")


def test_episode_ending_early(tmp_path, custom_demos):
    term = custom_demos.terminated.copy()
    term[2] = True
    with pytest.raises(DemoError, match="row 2 ends its episode .* but episode 0 goes on"):
        _save_and_load(tmp_path, _with(custom_demos, terminated=term), "CustomEnv")


def test_ragged_trajectory_pickle(tmp_path, monkeypatch):
    import sys
    import types

    from gailkit.data.demos import pickle_io

    trajs = pickle_io.RestrictedUnpickler(open(FIXTURES / "trajectories_p5.pkl", "rb")).load()
    trajs[1].acts = trajs[1].acts[:-1]  # a pickle skips imitation's own __post_init__ check
    cls = pickle_io.RECORDS["TrajectoryWithRew"]  # pickled under imitation's name, as imitation would
    for name in ("imitation", "imitation.data", "imitation.data.types"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setattr(sys.modules["imitation.data.types"], "TrajectoryWithRew", cls, raising=False)
    monkeypatch.setattr(cls, "__module__", "imitation.data.types")
    (tmp_path / "t.pkl").write_bytes(pickle.dumps(trajs))
    with pytest.raises(DemoError, match=r"t.pkl: trajectory 1 has 9 obs for 7 acts"):
        demos.load(tmp_path / "t.pkl")


@pytest.mark.parametrize("name", ["e.arrow", "e.parquet", "e.pkl"])
def test_empty_file(tmp_path, name):
    (tmp_path / name).write_bytes(b"")
    with pytest.raises(DemoError, match=f"{name}: "):
        demos.load(tmp_path / name)


def test_zero_transitions(tmp_path, custom_demos):
    path = demos.save(custom_demos, tmp_path / "z.arrow")
    empty = demos.Demos(**{k: v[:0] for k, v in custom_demos.columns().items()}, meta=custom_demos.meta)
    demos.save(empty, path)
    with pytest.raises(DemoError, match="z.arrow: holds no transitions"):
        demos.load(path)


@pytest.mark.parametrize("name", ["c.arrow", "c.parquet", "c.pkl"])
def test_truncated_file(tmp_path, custom_demos, name):
    path = demos.save(custom_demos, tmp_path / name)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DemoError, match=f"{name}: .*(truncated or corrupt|missing)"):
        demos.load(path)


def test_corrupt_file(tmp_path):
    (tmp_path / "junk.arrow").write_bytes(b"ARROW1" + bytes(range(256)) * 4)
    with pytest.raises(DemoError, match="junk.arrow: not a readable arrow file"):
        demos.load(tmp_path / "junk.arrow")


def test_missing_column(tmp_path, custom_demos):
    import pyarrow as pa
    import pyarrow.feather as feather

    table = demos.arrow_io.to_table(custom_demos).drop_columns(["next_obs"])
    feather.write_feather(table, str(tmp_path / "m.feather"), compression="uncompressed")
    with pytest.raises(DemoError, match="m.feather: missing column 'next_obs'"):
        demos.load(tmp_path / "m.feather")
    assert isinstance(table, pa.Table)


# ---------------------------------------------------------------------------------------------
# Restricted unpickling.


class _Exploit:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        import os

        return os.system, (f"touch {self.marker}",)


def test_code_running_pickle_is_refused_before_it_runs(tmp_path):
    marker = tmp_path / "pwned"
    (tmp_path / "evil.pkl").write_bytes(pickle.dumps({"obs": _Exploit(marker)}))
    with pytest.raises(DemoError, match=r"evil.pkl: refused to unpickle 'posix.system'.*--unsafe-pickle"):
        demos.load(tmp_path / "evil.pkl")
    assert not marker.exists()


def test_eval_and_user_classes_are_refused(tmp_path):
    class_payload = pickle.dumps(demos.DemoMeta())
    (tmp_path / "cls.pkl").write_bytes(class_payload)
    with pytest.raises(DemoError, match="refused to unpickle 'gailkit.data.demos.core.DemoMeta'"):
        demos.load_file(tmp_path / "cls.pkl")
    # a hand-written pickle calling builtins.eval
    (tmp_path / "eval.pkl").write_bytes(b"cbuiltins\neval\n(S'1+1'\ntR.")
    with pytest.raises(DemoError, match="refused to unpickle 'builtins.eval'"):
        demos.load_file(tmp_path / "eval.pkl")


def test_unsafe_pickle_opt_in_loads_other_classes(tmp_path, custom_demos):
    import collections

    Box = collections.namedtuple("Box", "obs")  # not on the allow-list
    payload = {
        "obs": custom_demos.obs,
        "acts": custom_demos.acts,
        "next_obs": custom_demos.next_obs,
        "dones": custom_demos.dones,
        "extra": Box(1),
    }
    globals()["Box"] = Box
    Box.__qualname__ = "Box"
    (tmp_path / "nt.pkl").write_bytes(pickle.dumps(payload))
    with pytest.raises(DemoError, match="refused"):
        demos.load_file(tmp_path / "nt.pkl")
    assert len(demos.load_file(tmp_path / "nt.pkl", unsafe_pickle=True)) == len(custom_demos)


def test_summary(custom_demos):
    s = demos.summarize(custom_demos)
    assert s["episodes"] == 5 and s["transitions"] == 40
    assert s["return_mean"] == 1.0 and s["length_mean"] == 8.0
    assert s["observation_space"] == "Box(2,) float32" and s["env_id"] == "CustomEnv"
    assert isinstance(gym.spaces.Box(-1, 1, (2,)), gym.Space)


def test_the_expert_policys_return_travels_with_the_demos(tmp_path, custom_demos):
    import dataclasses

    meta = dataclasses.replace(
        custom_demos.meta, expert_return=0.9, expert_return_std=0.1, expert_episodes=7, sampled=True
    )
    d = dataclasses.replace(custom_demos, meta=meta)
    for name in ("e.arrow", "e.parquet", "e.pkl"):
        back = demos.load(demos.save(d, tmp_path / name), env_id="CustomEnv", spaces=envs.spaces("CustomEnv"))
        assert (back.meta.expert_return, back.meta.expert_episodes, back.meta.sampled) == (0.9, 7, True), name
        assert demos.expert_reference(back) == (0.9, "expert policy")
    other = dataclasses.replace(d, meta=dataclasses.replace(meta, expert_return=0.5))
    demos.save(other, tmp_path / "other.arrow")
    both = demos.load(tmp_path, env_id="CustomEnv", spaces=envs.spaces("CustomEnv"), merge=True)
    assert (
        both.meta.expert_return is None and demos.expert_reference(both)[1] == "demos"
    )  # two experts: no one reference


def test_ends_given_as_dones_alone_are_read_against_the_env_time_limit(tmp_path):
    """A dict pickle (or table) with only `dones` cannot tell a time limit from a termination: ends at the
    env's `max_episode_steps` become truncations, with one warning line; the rest stay terminations."""
    import pickle

    from gailkit.data import demos, experts

    rng = np.random.default_rng(0)
    for env_id, policy, want_cut in (
        ("Pendulum-v1", lambda obs: rng.uniform(-2, 2, (1,)).astype(np.float32), 2),
        ("CartPole-v1", lambda obs: int(rng.integers(2)), 0),
    ):
        d = experts.record(policy, env_id, episodes=2, seed=0, source="random")
        path = tmp_path / f"{env_id}.pkl"
        path.write_bytes(pickle.dumps({"obs": d.obs, "acts": d.acts, "next_obs": d.next_obs, "dones": d.dones}))
        with pytest.warns(demos.DemoWarning, match=f"{want_cut} of 2 ends at the time limit"):
            back = demos.load(path, env_id=env_id)
        assert int(back.truncated.sum()) == want_cut and int(back.terminated.sum()) == 2 - want_cut
        assert np.array_equal(back.truncated, d.truncated) and np.array_equal(back.terminated, d.terminated)
    # an env that names no time limit: the user says it (--time-limit-ends N, setting demo_time_limit)
    d = experts.record(lambda obs: rng.uniform(-2, 2, (1,)).astype(np.float32), "Pendulum-v1", 2, 0, "random")
    path = tmp_path / "nolimit.pkl"
    path.write_bytes(pickle.dumps({"obs": d.obs, "acts": d.acts, "next_obs": d.next_obs, "dones": d.dones}))
    with pytest.warns(demos.DemoWarning, match="2 of 2 ends at the time limit \\(200 steps\\)"):
        back = demos.load(path, env_id=None, time_limit=200)
    assert back.truncated.sum() == 2 and not back.terminated.any()
    with pytest.warns(demos.DemoWarning, match="pass --time-limit-ends N"):
        assert demos.load(path, env_id=None).terminated.sum() == 2


def test_a_folder_skips_what_is_not_demos_and_says_when_experts_are_merged(tmp_path, custom_demos):
    """An expert's vecnormalize.pkl (or any file that is not demos) beside the demos is skipped in one
    warning line; demos of different experts in one folder are merged with a warning naming them."""
    import dataclasses
    import pickle

    demos.save(custom_demos, tmp_path / "a.arrow")
    (tmp_path / "vecnormalize.pkl").write_bytes(pickle.dumps({"not": "demos"}))
    with pytest.warns(demos.DemoWarning, match=r"vecnormalize.pkl: skipped, not readable as demos"):
        d = demos.load(tmp_path, env_id="CustomEnv", spaces=envs.spaces("CustomEnv"))
    assert len(d) == len(custom_demos) and d.meta.expert_return == custom_demos.meta.expert_return
    other = dataclasses.replace(custom_demos, meta=dataclasses.replace(custom_demos.meta, expert_return=0.25))
    demos.save(other, tmp_path / "b.arrow")
    with pytest.raises(demos.DemoError, match=r"holds demos of 2 files from different experts .*b.arrow 0.25.*--merge"):
        demos.load(tmp_path, env_id="CustomEnv", spaces=envs.spaces("CustomEnv"))
    with pytest.warns(demos.DemoWarning, match=r"demos of 2 files from different experts are merged \(--merge"):
        d = demos.load(tmp_path, env_id="CustomEnv", spaces=envs.spaces("CustomEnv"), merge=True)
    assert len(d) == 2 * len(custom_demos) and d.meta.expert_return is None
    with pytest.raises(demos.DemoError, match="vecnormalize.pkl"):  # named on its own, it is an error
        demos.load(tmp_path / "vecnormalize.pkl", env_id="CustomEnv")


def test_a_table_with_its_own_column_names_is_read_through_a_mapping(tmp_path, custom_demos):
    """A user's Parquet file: `observation`, `action`, `next_observation`, `done`, obs as scalar columns
    too; `--columns` maps them, for inspect and train alike; an unmapped table says which flag to use."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = custom_demos
    table = pa.table(
        {
            "x": d.obs[:, 0],
            "y": d.obs[:, 1],
            "action": list(d.acts),
            "next_observation": list(d.next_obs),
            "terminal": d.terminated,
            "timeout": d.truncated,
        }
    )
    path = tmp_path / "mine.parquet"
    pq.write_table(table, path)
    r = run_cli("demos", "inspect", str(path), "--env", "CustomEnv")
    assert r.returncode == 2 and "missing column 'obs'" in r.stderr and "--columns obs=COLUMN" in r.stderr
    mapping = "obs=x+y,acts=action,next_obs=next_observation,terminated=terminal,truncated=timeout"
    r = run_cli("demos", "inspect", str(path), "--env", "CustomEnv", "--columns", mapping, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["files"][0]["episodes"] == d.n_episodes
    loaded = demos.load(path, env_id="CustomEnv", spaces=envs.spaces("CustomEnv"), columns=dict(
        kv.split("=") for kv in mapping.split(",")))  # fmt: skip
    assert np.allclose(loaded.obs, d.obs) and np.array_equal(loaded.terminated, d.terminated)
    r = run_cli("train", "--env", "CustomEnv", "--demos", str(path), "--columns", mapping, "--preset", "tiny",
                "--total-steps", "64", "--quiet", "--run-dir", str(tmp_path / "run"))  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "x+y" in (tmp_path / "run" / "config.yaml").read_text()  # the run remembers how it read its demos
    for bad, says in [("obs=nope", "no column 'nope'"), ("observation=x", "'demo_columns' must map some of"),
                      ("obs", "expected NAME=COLUMN")]:  # fmt: skip
        r = run_cli("demos", "inspect", str(path), "--env", "CustomEnv", "--columns", bad)
        assert r.returncode == 2 and says in r.stderr and r.stderr.count("\n") == 1, (bad, r.stderr)


def test_dict_observations_round_trip_through_every_writer_and_imitations_dict_obs_pickles(tmp_path, monkeypatch):
    """Arrow, Parquet and gailkit's dict pickle keep a Dict observation entry by entry; a pickle of imitation's
    trajectories whose obs are its `DictObs` is read through the restricted unpickler (no imitation needed)."""
    import pickle
    import sys
    import types

    from gailkit.data import experts
    from tests.space_envs import DictMixedObs

    env = "tests/space_envs.py:DictMixedObs"
    d = experts.record(experts.Scripted(lambda e: DictMixedObs.expert), env, 2, 0, "test")
    for name in ("d.arrow", "d.parquet", "d.pkl"):
        back = demos.load(demos.save(d, tmp_path / name), env, envs.spaces(env))
        for k in d.obs:
            assert np.array_equal(back.obs[k], d.obs[k]) and back.obs[k].dtype == d.obs[k].dtype, (name, k)
            assert np.array_equal(back.next_obs[k], d.next_obs[k]), (name, k)
    module = types.ModuleType("imitation.data.types")  # stand-ins pickled under imitation's own names

    class DictObs:
        def __init__(self, d):
            self._d = d

    class TrajectoryWithRew:
        def __init__(self, **kw):
            self.__dict__.update(kw)

    for cls in (DictObs, TrajectoryWithRew):
        cls.__module__, cls.__qualname__ = "imitation.data.types", cls.__name__
        setattr(module, cls.__name__, cls)
    for name in ("imitation", "imitation.data"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "imitation.data.types", module)
    bounds = d.episode_bounds()
    trajs = [
        TrajectoryWithRew(
            obs=DictObs({k: np.concatenate([v[a:b], d.next_obs[k][b - 1 : b]]) for k, v in d.obs.items()}),
            acts=d.acts[a:b],
            infos=None,
            terminal=False,
            rews=d.rews[a:b],
        )  # fmt: skip
        for a, b in zip(bounds[:-1], bounds[1:])
    ]
    (tmp_path / "imitation.pkl").write_bytes(pickle.dumps(trajs))
    for name in ("imitation", "imitation.data", "imitation.data.types"):
        monkeypatch.delitem(sys.modules, name)
    back = demos.load(tmp_path / "imitation.pkl", env, envs.spaces(env))
    assert back.meta.format == "pickle/trajectories" and np.array_equal(back.obs["frame"], d.obs["frame"])
    assert np.array_equal(back.next_obs["vec"], d.next_obs["vec"]) and len(back) == len(d)


@pytest.mark.parametrize(
    "space",
    [
        {"type": "Dict", "spaces": {f"k{i}": {"type": "Discrete", "n": 2} for i in range(65)}},
        {"type": "Dict", "spaces": {"a": {"type": "Dict", "spaces": {"b": {"type": "Discrete", "n": 2}}}}},
        {"type": "Dict", "spaces": {"a/b": {"type": "Discrete", "n": 2}}},
        {
            "type": "Dict",
            "spaces": {"a": {"type": "Box", "shape": [1 << 13, 1 << 12], "dtype": "uint8", "low": 0, "high": 1}},
        },
        {"type": "Dict", "spaces": ["a"]},
    ],
)
def test_a_file_naming_a_dict_space_gailkit_cannot_read_is_one_line(tmp_path, space):
    rng = np.random.default_rng(0)
    obs = {"a": rng.integers(0, 2, 4)}
    d = demos.Demos(
        obs=obs, acts=np.zeros(4, np.int64), next_obs=obs, terminated=np.array([0, 0, 0, 1], bool),
        truncated=np.zeros(4, bool), episode_id=np.zeros(4, np.int64), step=np.arange(4),
        meta=demos.DemoMeta(observation_space=space, action_space={"type": "Discrete", "n": 2}),
    )  # fmt: skip
    path = demos.save(d, tmp_path / "d.arrow")
    with pytest.raises(DemoError, match="metadata names a space gailkit cannot read"):
        demos.check(demos.load_file(path))


@pytest.mark.parametrize(
    "space",
    [
        gym.spaces.MultiDiscrete([3, 2], start=[-1, 1]),
        gym.spaces.MultiDiscrete([[2, 3], [4, 2]]),
        gym.spaces.MultiBinary([2, 3]),
        gym.spaces.MultiBinary(4),
        gym.spaces.Discrete(3, start=-1),
    ],
)
def test_spaces_of_every_shape_and_start_round_trip_through_file_metadata(space):
    """A start or a shape left out of a file's metadata would read its values as another space's."""
    assert demos.space_from_json(json.loads(json.dumps(demos.space_to_json(space)))) == space


def test_a_space_nested_past_any_shape_is_refused():
    deep: list = [2]
    for _ in range(20):
        deep = [deep]
    with pytest.raises(ValueError, match="shape/size"):
        demos.space_from_json({"type": "MultiDiscrete", "nvec": deep})
    with pytest.raises(ValueError, match="start of shape"):
        demos.space_from_json({"type": "MultiDiscrete", "nvec": [2, 3], "start": [0, 0, 0]})
    for start in ([10**30, 0], ["a", 0], [{"x": 1}, 0], 1.5, True):
        with pytest.raises(ValueError, match="a MultiDiscrete start of"):
            demos.space_from_json({"type": "MultiDiscrete", "nvec": [2, 3], "start": start})
    for d in ({"type": "MultiDiscrete", "shape": [1], "nvec": 10**30}, {"type": "MultiBinary", "shape": [1], "n": 1.5}):
        with pytest.raises(ValueError, match="shape/size"):  # read by the field the space is built from, not `shape`
            demos.space_from_json(d)
    with pytest.raises(ValueError, match="unknown space type 'Text'"):
        demos.space_from_json({"type": "Text", "n": 3})
    for start in (10**30, "1", 2.5, True, [1]):  # an OverflowError, or a start silently rounded, before
        with pytest.raises(ValueError, match="a Discrete start of"):
            demos.space_from_json({"type": "Discrete", "n": 2, "start": start})


def test_a_files_recorded_with_is_quoted_only_when_it_names_settings(tmp_path):
    """A frame file recorded on a preprocessed env names the settings a run needs; any other words in that
    field (a file's own text) are left out of the error."""
    from gailkit.data.demos.validate import recorded_with_hint

    d = demos.load_file(ROOT / "data" / "cartpole.arrow")
    e = DemoError("x.arrow: column 'obs' has shape (84, 84) per row")
    good = dataclasses.replace(
        d, meta=dataclasses.replace(d.meta, recorded_with="env.preprocess=atari env.frame_stack=4")
    )
    assert str(recorded_with_hint(e, good)).endswith(": --set env.preprocess=atari --set env.frame_stack=4)")
    for said in ("rm -rf / " * 1000, "env.kwargs.x=1", "env.frame_stack=" + "4" * 40, ""):
        bad = dataclasses.replace(d, meta=dataclasses.replace(d.meta, recorded_with=said))
        assert recorded_with_hint(e, bad) is e
