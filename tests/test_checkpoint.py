"""Checkpoints (one reader, layout checked), the run directory (rotation, fallback, stale temps), metrics.csv."""

import csv
import os

import pytest
import torch as th

from gailkit.core import fsutil
from gailkit.run import checkpoint, metrics, rundir
from gailkit.run.checkpoint import Best, CheckpointError, References, RunState


def _state(round_=3) -> RunState:
    return RunState(
        round=round_,
        env_steps=round_ * 64,
        config={"env": {"id": "CartPole-v1", "kwargs": {}}},
        spaces={
            "observation": {"type": "Box", "shape": [4], "dtype": "float32", "low": "-inf", "high": "inf"},
            "action": {"type": "Discrete", "n": 2, "start": 0},
        },
        reward_fn="gail",
        references=References(500.0, "expert policy", 22.0, 20, 1_000_000),
        best=Best("return", 410.0, 2),
        learner={"w": th.arange(3.0), "version": round_},
        fleet={"actors": []},
        rng={"torch": th.get_rng_state()},
    )


def test_round_trip(tmp_path):
    path = checkpoint.save(tmp_path / "c.pt", _state())
    back = checkpoint.load(path)
    assert back.round == 3 and back.references.normalized(261.0) == pytest.approx(0.5)
    assert back.best.beaten_by(411.0) and not back.best.beaten_by(409.0)
    assert th.equal(back.learner["w"], th.arange(3.0)) and back.reward_fn == "gail"
    assert not [p for p in tmp_path.iterdir() if ".tmp" in p.name]


def test_action_error_best_is_lower_is_better():
    assert Best("action_error", 0.2, 1).beaten_by(0.1) and not Best("action_error", 0.2, 1).beaten_by(0.3)
    assert References(None, "unknown", 0.0, 20, 0).normalized(5.0) is None


@pytest.mark.parametrize(
    "spoil, message",
    [
        (lambda p: p.write_bytes(p.read_bytes()[:200]), "truncated or corrupt"),
        (lambda p: p.write_bytes(b"not a torch file at all"), "not a readable gailkit checkpoint"),
        (lambda p: th.save({"format": 1, "round": 3}, p), "not a gailkit checkpoint of format 2 \\(found 1\\)"),
        (lambda p: th.save([1, 2, 3], p), "not a gailkit checkpoint of format 2"),
        (lambda p: th.save({**_dict(), "round": "3"}, p), "field 'round' is missing or not a int"),
        (lambda p: th.save({**_dict(), "references": {"oops": 1}}, p), "malformed 'references'"),
        (
            lambda p: th.save({**_dict(), "references": {**_dict()["references"], "random_return": float("nan")}}, p),
            "returns must be finite numbers",
        ),
        (
            lambda p: th.save({**_dict(), "references": {**_dict()["references"], "expert_return": "high"}}, p),
            "malformed 'references'",
        ),
        (lambda p: th.save({**_dict(), "round": -4}, p), "counters round -4"),
        (lambda p: th.save({**_dict(), "best": {"metric": "rm -rf", "value": 1.0, "round": 0}}, p), "malformed 'best'"),
        (
            lambda p: th.save({**_dict(), "best": {"metric": "return", "value": float("inf"), "round": 0}}, p),
            "malformed 'best'",
        ),
        # shared references that a walk (a check, a repr) would expand to 10^10 values, and a list that holds itself
        (lambda p: th.save({**_dict(), "format": _laughs()}, p), "its shared references expand it past"),
        (lambda p: th.save({**_dict(), "config": {"policy": {"net_arch": _laughs()}}}, p), "expand it past"),
        (lambda p: th.save({**_dict(), "learner": {"w": _cycle()}}, p), "it holds itself"),
    ],
)
def test_bad_checkpoints_are_one_line_without_torchs_unsafe_advice(tmp_path, spoil, message):
    path = checkpoint.save(tmp_path / "c.pt", _state())
    spoil(path)
    with pytest.raises(CheckpointError, match=message) as e:
        checkpoint.load(path)
    assert "\n" not in str(e.value) and "weights_only=False" not in str(e.value)


def _laughs() -> list:
    rows: list = [16] * 10
    for _ in range(9):
        rows = [rows] * 10
    return rows


def _cycle() -> list:
    rows: list = [1.0]
    rows.append(rows)
    return rows


def _dict():
    import dataclasses

    s = _state()
    d = {f.name: getattr(s, f.name) for f in dataclasses.fields(s)}
    return {**d, "references": dataclasses.asdict(s.references), "best": dataclasses.asdict(s.best)}


class _Exploit:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_a_checkpoint_that_would_run_code_is_refused_before_it_runs(tmp_path):
    marker = tmp_path / "pwned"
    th.save({**_dict(), "learner": {"x": _Exploit(marker)}}, tmp_path / "evil.pt")
    with pytest.raises(CheckpointError, match="not a torch file of plain data"):
        checkpoint.load(tmp_path / "evil.pt")
    assert not marker.exists()


def test_run_dir_rotation_latest_fallback_and_find(tmp_path):
    d = rundir.RunDir(tmp_path / "run")
    for r in range(1, 6):
        d.save(_state(r))
    assert [p.name for p in d.round_checkpoints()] == ["round_000003.pt", "round_000004.pt", "round_000005.pt"]
    (d.checkpoints / "round_000005.pt").write_bytes(b"garbage")
    said = []
    state, path = d.latest(log=said.append)
    assert state.round == 4 and path.name == "round_000004.pt" and "round_000005.pt" in said[0]
    assert d.find("best") == d.checkpoints / "round_000005.pt"  # no best/ yet: the newest round file
    d.save(_state(4), "best")
    assert d.find("best") == d.slot("best") and rundir.resolve(d.path, "best") == d.slot("best")
    with pytest.raises(CheckpointError, match="no such run directory"):
        rundir.resolve(tmp_path / "nowhere")


def test_stale_temps_of_dead_writers_are_cleaned_and_live_ones_kept(tmp_path):
    d = rundir.RunDir(tmp_path / "run")
    d.save(_state(1))
    dead = d.checkpoints / ".round_000002.pt.999999.abcdefgh.tmp"
    dead.write_bytes(b"half")
    dead_dir = d.path / ".final.999999.abcdefgh.tmp"
    dead_dir.mkdir()
    live = d.checkpoints / f".round_000002.pt.{os.getpid()}.abcdefgh.tmp"
    live.write_bytes(b"being written")
    removed = d.clean()
    assert set(removed) == {dead, dead_dir} and live.exists()


def test_atomic_write_failure_leaves_no_temp(tmp_path):
    with pytest.raises(RuntimeError):
        with fsutil.atomic_path(tmp_path / "x.bin") as tmp:
            tmp.write_bytes(b"partial")
            raise RuntimeError("disk full")
    assert list(tmp_path.iterdir()) == []


def test_metrics_log_appends_grows_columns_atomically_and_resumes(tmp_path):
    path = tmp_path / "metrics.csv"
    log = metrics.MetricsLog(path, None)
    log.write({"round": 1, "env_steps": 64, "disc/loss": 0.5})
    log.write({"round": 2, "env_steps": 128, "disc/loss": 0.4, "eval/return_mean": 10.0})  # a new column
    log.write({"round": 3, "env_steps": 192, "disc/loss": 0.3})
    log.close()
    rows = list(csv.DictReader(open(path)))
    assert (
        [r["round"] for r in rows] == ["1", "2", "3"]
        and rows[1]["eval/return_mean"] == "10"
        and rows[0]["eval/return_mean"] == ""
    )
    with open(path, "a") as f:
        f.write("4,256,0.2")  # a row cut short by a kill
    assert [r["round"] for r in metrics.read_rows(path)] == ["1", "2", "3"]
    resumed = metrics.MetricsLog(path, None, keep_through_round=2)
    assert [r["round"] for r in metrics.read_rows(path)] == ["1", "2"]
    resumed.write({"round": 3, "env_steps": 192, "disc/loss": 0.31})
    assert [r["disc/loss"] for r in metrics.read_rows(path)] == ["0.5", "0.4", "0.31"]


def test_load_parses_settings_and_spaces_once(tmp_path):
    import gymnasium as gym

    from gailkit.config import TrainConfig

    back = checkpoint.load(checkpoint.save(tmp_path / "c.pt", _state()))
    assert isinstance(back.settings, TrainConfig) and back.settings.env.id == "CartPole-v1"
    assert back.observation_space == gym.spaces.Box(
        -float("inf"), float("inf"), (4,)
    ) and back.action_space == gym.spaces.Discrete(2)
    th.save({**_dict(), "config": {"ppo": {"net_arch": "wide"}}}, tmp_path / "c.pt")
    with pytest.raises(CheckpointError, match="its settings or spaces cannot be read"):
        checkpoint.load(tmp_path / "c.pt")
    th.save({**_dict(), "spaces": {"observation": {"type": "Graph"}}}, tmp_path / "c.pt")
    with pytest.raises(CheckpointError, match="its settings or spaces cannot be read"):
        checkpoint.load(tmp_path / "c.pt")


def test_the_random_reference_draws_its_actions_apart_from_the_env_s_start_state():
    """The random policy's actions come from a stream of their own: an env that draws its start state with
    the same generator call as the action space would otherwise be solved by chance."""
    import gymnasium as gym

    from gailkit.run.checkpoint import random_reference

    for seed in (0, 7):
        refs = random_reference("tests/space_envs.py:GuessTheStart", gym.spaces.Discrete(1000), 4, seed, True)
        assert refs.random_return == 0.0, seed


def test_an_expert_worse_than_random_is_said_loudly_and_nothing_is_normalized_against_it():
    """A VecNormalize expert loaded without its statistics plays worse than random: a score against it
    would flip signs, so there is none, and one warning line says why."""
    import gymnasium as gym

    from gailkit.run.checkpoint import random_reference

    with pytest.warns(UserWarning, match=r"THE EXPERT IS WORSE THAN RANDOM: its return 9.4 \(demos\) is below"):
        refs = random_reference("CartPole-v1", gym.spaces.Discrete(2), 5, 0, True, 9.4, "demos")
    assert refs.random_return > 9.4 and refs.normalized(500.0) is None and refs.normalized(5.0) is None
    good = random_reference("CartPole-v1", gym.spaces.Discrete(2), 5, 0, True, 500.0, "expert policy")
    assert good.normalized(500.0) == 1.0
