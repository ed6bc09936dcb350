"""The public names at the top of the package: a notebook's five lines."""

import subprocess
import sys

import pytest

import gailkit


def test_public_names_are_listed_and_import_lazily():
    code = (
        "import sys, gailkit\n"
        "assert {'train', 'train_config', 'Callback', 'load_demos', 'evaluate', 'export', 'OnnxPolicy', 'TrainConfig'}"
        " <= set(dir(gailkit))\n"
        "assert 'torch' not in sys.modules\n"
        "gailkit.OnnxPolicy\n"
        "assert 'torch' not in sys.modules, 'OnnxPolicy needs onnxruntime only'\n"
        "gailkit.train\n"
        "assert 'torch' in sys.modules\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    with pytest.raises(AttributeError, match="no attribute 'GAIL'"):
        gailkit.GAIL  # noqa: B018


def test_a_notebook_trains_from_the_top_level_names(tmp_path):
    seen = []

    class Evals(gailkit.Callback):
        def on_eval(self, run, stats):
            seen.append(stats["eval/return_mean"])

    cfg = gailkit.train_config("CustomEnv", "data/customenv.arrow", None, ["total_steps=256"], "tiny")
    assert isinstance(cfg, gailkit.TrainConfig)
    summary = gailkit.train(cfg, tmp_path / "run", quiet=True, log=lambda line: None, callbacks=[Evals()])
    assert seen and summary["env_steps"] >= 256
    demos = gailkit.load_demos("data/customenv.arrow")
    assert len(demos) > 0 and demos.obs.shape[1:] == (2,)


def test_the_readmes_python_example_runs_as_written(tmp_path):
    """The README's notebook-sized example, run as it stands (its run folder moved to a temp one)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text()
    section = readme[readme.index("### From Python, with callbacks") :]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1).replace("runs/notebook", str(tmp_path / "nb"))
    r = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "nb" / "final" / "checkpoint.pt").is_file() and r.stdout.strip()
