"""`gailkit evaluate --video`: the first evaluated episode as an animated GIF."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import run_cli


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("video") / "run"
    r = run_cli("train", "--env", "CartPole-v1", "--demos", "data/cartpole.arrow", "--preset", "tiny",
                "--total-steps", "256", "--quiet", "--run-dir", str(run))  # fmt: skip
    assert r.returncode == 0, r.stderr
    return run


def test_a_gif_of_the_first_evaluated_episode(cartpole_run, tmp_path):
    pytest.importorskip("pygame")
    import imageio.v3 as iio

    out = tmp_path / "episode.gif"
    r = run_cli("evaluate", str(cartpole_run), "--episodes", "2", "--no-plots", "--video", str(out), "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    video = report["video"]
    frames = iio.imread(out, index=None)  # GIF merges identical consecutive frames
    assert video["frames"] == report["policy"]["returns"][0] + 1 >= len(frames) > 10  # CartPole: 1 per step
    assert frames.shape[-1] == 3 and frames.dtype == np.uint8 and frames.std() > 0
    assert not [p for p in tmp_path.iterdir() if p.name != "episode.gif"]  # written atomically, nothing else


def test_what_cannot_be_a_video_is_one_line_and_leaves_nothing(cartpole_run, tmp_path):
    (tmp_path / "notes").write_text("x")
    for name, says in [("e.avi", "expected a .gif or .mp4"), ("notes", "not a folder")]:
        r = run_cli("evaluate", str(cartpole_run), "--episodes", "1", "--no-plots", "--video", str(tmp_path / name))
        assert r.returncode == 2 and says in r.stderr and r.stderr.count("\n") == 1, r.stderr
    (tmp_path / "folder.gif").mkdir()
    r = run_cli("evaluate", str(cartpole_run), "--episodes", "1", "--no-plots", "--video", str(tmp_path / "folder.gif"))
    assert r.returncode == 2 and "folder.gif" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder.gif", "notes"]
    assert not list((tmp_path / "folder.gif").iterdir())


def test_a_folder_gets_the_episode_as_an_mp4(cartpole_run, tmp_path):
    pytest.importorskip("pygame")
    pytest.importorskip("imageio_ffmpeg")
    import imageio.v3 as iio

    r = run_cli(
        "evaluate", str(cartpole_run), "--episodes", "1", "--no-plots", "--video", f"{tmp_path}/videos/", "--json"
    )
    assert r.returncode == 0, r.stderr
    out = tmp_path / "videos" / "episode-0.mp4"
    assert json.loads(r.stdout)["video"]["video"] == str(out)
    frames = iio.imread(out, index=None)
    assert len(frames) == json.loads(r.stdout)["video"]["frames"] and frames.shape[-1] == 3


def test_stochastic_evaluation_samples_the_policy(cartpole_run):
    runs = {}
    for flags in ([], ["--stochastic"]):
        r = run_cli("evaluate", str(cartpole_run), "--episodes", "5", "--no-plots", "--json", *flags)
        assert r.returncode == 0, r.stderr
        runs[bool(flags)] = json.loads(r.stdout)
    assert runs[True]["stochastic"] and not runs[False]["stochastic"]
    assert runs[True]["policy"]["returns"] != runs[False]["policy"]["returns"]  # a tiny policy is far from sure
    r = run_cli("evaluate", str(cartpole_run), "--episodes", "1", "--no-plots", "--stochastic")
    assert "actions sampled" in r.stdout.splitlines()[0]
