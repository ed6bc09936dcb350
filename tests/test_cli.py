"""The CLI as a user runs it: real subprocesses, real files, exit codes and one-line errors."""

import json
import subprocess
import sys

import pytest
from conftest import ROOT, run_cli


def test_help_does_not_import_torch():
    code = "import sys; from gailkit import cli; cli.build_parser(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_python_dash_m_gailkit_is_the_same_command_line():
    """`python -m gailkit` (a notebook's `!python -m gailkit ...`, an env without the script on PATH)."""
    r = subprocess.run([sys.executable, "-m", "gailkit", "train", "--env"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and "--env" in r.stderr
    r = subprocess.run([sys.executable, "-m", "gailkit", "--version"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0 and r.stdout.startswith("gailkit ")


def test_record_inspect_convert(tmp_path):
    out = tmp_path / "custom.arrow"
    r = run_cli("demos", "record", "--expert", "scripted", "--env", "CustomEnv", "--episodes", "3", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "wrote" in r.stdout and "3 episodes, 24 transitions of CustomEnv" in r.stdout
    assert r.stdout.startswith("episode returns: 1.0 1.0 1.0")

    r = run_cli("demos", "convert", str(out), str(tmp_path / "custom.parquet"))
    assert r.returncode == 0, r.stderr
    r = run_cli(
        "demos", "convert", str(tmp_path / "custom.parquet"), str(tmp_path / "custom.pkl"), "--env", "CustomEnv"
    )
    assert r.returncode == 0, r.stderr

    r = run_cli("demos", "inspect", str(tmp_path))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 5 and lines[-1].split()[:3] == ["total", "9", "72"]
    assert "Box(2,) float32 -> Box(2,) float32" in lines[1]

    r = run_cli("demos", "inspect", str(tmp_path / "custom.pkl"), "--json")
    info = json.loads(r.stdout)["files"][0]
    assert info["episodes"] == 3 and info["env_id"] == "CustomEnv" and info["format"] == "pickle/dict"


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "broken.parquet").write_bytes(b"PAR1 not really")
    cases = [
        ("demos", "inspect", str(tmp_path / "broken.parquet")),
        ("demos", "inspect", str(tmp_path / "nothing_here")),
        ("demos", "record", "--expert", "scripted", "--env", "CartPol-v1", "--out", str(tmp_path / "x.arrow")),
        (
            "demos",
            "record",
            "--expert",
            "scripted",
            "--env",
            "CustomEnv",
            "--episodes",
            "0",
            "--out",
            str(tmp_path / "x.arrow"),
        ),
        ("expert", "train", "--env", "CartPole-v1", "--set", "ppo.n_stepz=3"),
    ]
    for args in cases:
        r = run_cli(*args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert r.stderr.count("\n") == 1 and r.stderr.startswith("gailkit: error: "), (args, r.stderr)
    assert not (tmp_path / "x.arrow").exists()


def test_refused_pickle_via_cli(tmp_path):
    (tmp_path / "evil.pkl").write_bytes(b"cos\nsystem\n(S'true'\ntR.")
    r = run_cli("demos", "inspect", str(tmp_path / "evil.pkl"))
    assert r.returncode == 2 and "refused to unpickle 'os.system'" in r.stderr and "--unsafe-pickle" in r.stderr


def _spoiled(tmp_path, cartpole_demos, name, **changes):
    import dataclasses

    from gailkit.data import demos

    return demos.save(dataclasses.replace(cartpole_demos, **changes), tmp_path / name)


def test_inspect_validates_like_train(tmp_path, cartpole_demos):
    import numpy as np

    d = cartpole_demos
    nan_obs = d.obs.copy()
    nan_obs[5, 1] = np.nan
    cases = {
        "nan.arrow": ({"obs": nan_obs}, "column 'obs' row 5 is not finite"),
        "action7.parquet": ({"acts": np.full_like(d.acts, 7)}, "column 'acts' row 0 is 7, outside Discrete(2)"),
        "wide.pkl": (
            {"obs": np.zeros((len(d), 6), np.float32), "next_obs": np.zeros((len(d), 6), np.float32)},
            "column 'obs' has shape (6,) per row",
        ),
    }
    for name, (changes, message) in cases.items():
        path = _spoiled(tmp_path, d, name, **changes)  # metadata still says CartPole-v1: Box(4,) -> Discrete(2)
        r = run_cli("demos", "inspect", str(path))
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and message in r.stderr and name in r.stderr, (
            name,
            r.stderr,
        )
    good = tmp_path / "good"
    good.mkdir()
    _spoiled(good, d, "fine.arrow")
    (good / "corrupt.arrow").write_bytes(b"ARROW1" + bytes(200))
    r = run_cli("demos", "inspect", str(good))
    assert r.returncode == 2 and "corrupt.arrow" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    r = run_cli("demos", "inspect", str(good / "fine.arrow"), "--env", "CartPole-v1")
    assert r.returncode == 0 and "fine.arrow" in r.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (("demos", "record", "--expert", "./nowhere.py:fn", "--env", "CustomEnv", "--out", "x.arrow"), "no such file"),
        (
            ("demos", "record", "--expert", "tests/slow_env.py:time", "--env", "CustomEnv", "--out", "x.arrow"),
            "not callable",
        ),
        (("evaluate", "nowhere_run"), "no such run directory"),
        (("export", "data/cartpole.arrow", "--out", "x.onnx"), "not a readable gailkit checkpoint"),
        (("infer", "data/cartpole.arrow"), "not a loadable ONNX model"),
        (("keys", "generate", "--out", "/proc/nope/k.json"), "No such file or directory"),
        (("actor", "--connect", "nonsense://x"), "--connect nonsense://x"),
        (("actor", "--connect", "tcp://127.0.0.1:1", "--key-file", "data/cartpole.arrow"), "not a gailkit key file"),
    ],
)
def test_user_and_os_errors_are_one_line_exit_2(tmp_path, args, message):
    r = run_cli(*args, cwd=None)
    assert r.returncode == 2 and r.stderr.startswith("gailkit: error: ") and r.stderr.count("\n") == 1, (args, r.stderr)
    assert message in r.stderr, (args, r.stderr)
    assert not (tmp_path / "x.arrow").exists()


def test_version_is_the_package_version():
    import re

    want = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    r = run_cli("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"gailkit {want}", r.stdout


def test_config_show_names_the_layer_of_every_setting():
    r = run_cli("config", "show", "--env", "CustomEnv", "--preset", "tiny", "--set", "seed=3", "--set", "ppo.gamma=0.8")
    assert r.returncode == 0, r.stderr
    rows = {line.split(":")[0]: line for line in r.stdout.splitlines()}
    assert rows["env.id"].endswith("# flags") and rows["seed"].split("#")[0].strip() == "seed: 3"
    assert rows["seed"].endswith("# --set seed=3") and rows["ppo.gamma"].endswith("# --set ppo.gamma=0.8")
    assert rows["n_envs"].endswith("# --preset tiny") and rows["unsafe_pickle"].endswith("# default")
    assert rows["ppo.learning_rate"].endswith("customenv.gail.yaml")  # the env's own defaults file
    assert len(rows) > 60 and all(" # " in line for line in rows.values())
    r = run_cli("config", "show", "--env", "CustomEnv", "--set", "ppo.n_stepz=3")
    assert r.returncode == 2 and "unknown setting 'ppo.n_stepz'" in r.stderr and r.stderr.count("\n") == 1


def test_expert_train_says_how_it_rounds_its_steps(tmp_path):
    r = run_cli(
        "expert",
        "train",
        "--env",
        "CartPole-v1",
        "--total-steps",
        "100",
        "--set",
        "n_envs=2",
        "--set",
        "ppo.n_steps=64",
        "--set",
        "ppo.batch_size=64",
        "--set",
        "eval_episodes=1",
        "--quiet",
        "--out",
        str(tmp_path / "e.zip"),
    )
    assert r.returncode == 0, r.stderr
    assert (
        "for 100 steps (2 envs) = 128 (total_timesteps 100 rounded up to whole rollouts of 2 envs x 64 steps)"
        in r.stdout
    ), r.stdout
    assert (tmp_path / "e.zip").is_file() and (tmp_path / "e.json").is_file()


def test_every_command_shows_its_defaults_and_one_example():
    from gailkit.cli import build_parser
    from gailkit.cli.help import EXAMPLES

    leaves = []

    def walk(parser):
        subs = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
        if not subs:
            leaves.append(parser)
        for action in subs:
            for child in action.choices.values():
                walk(child)

    walk(build_parser())
    assert {p.prog for p in leaves} == set(EXAMPLES)
    for p in leaves:
        text = p.format_help()
        assert f"example: {EXAMPLES[p.prog]}".split()[:3] == text[text.index("example:") :].split()[:3], p.prog
    assert "(default: 50)" in build_parser()._subparsers._group_actions[0].choices["evaluate"].format_help()
    r = run_cli("config", "show", "--env", "CartPole-v1", "--preset", "fast")
    assert r.returncode == 0 and "total_steps: 50000" in r.stdout and "# --preset fast" in r.stdout
