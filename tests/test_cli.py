"""The CLI as a user runs it: real subprocesses, real files, exit codes and one-line errors."""

import json
import subprocess
import sys

from conftest import run_cli


def test_help_does_not_import_torch():
    code = "import sys; from gailkit import cli; cli.build_parser(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_record_inspect_convert(tmp_path):
    out = tmp_path / "custom.arrow"
    r = run_cli("demos", "record", "--expert", "scripted", "--env", "CustomEnv", "--episodes", "3", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "wrote" in r.stdout and "3 episodes, 24 transitions of CustomEnv" in r.stdout
    assert r.stdout.startswith("episode returns: 1.0 1.0 1.0")

    r = run_cli("demos", "convert", str(out), str(tmp_path / "custom.parquet"))
    assert r.returncode == 0, r.stderr
    r = run_cli("demos", "convert", str(tmp_path / "custom.parquet"), str(tmp_path / "custom.pkl"), "--env", "CustomEnv")
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
        ("demos", "record", "--expert", "scripted", "--env", "CustomEnv", "--episodes", "0", "--out", str(tmp_path / "x.arrow")),
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
