"""Evaluate, export and ONNX inference on tiny trained runs (discrete CartPole, continuous Pendulum)."""

import json
import subprocess
import sys

import numpy as np
import pytest

from gailkit.inference import InferenceError, OnnxPolicy
from gailkit.run import evaluate, export, train

SMALL = ["ppo.n_steps=64", "ppo.batch_size=64", "total_steps=256", "eval_every=2"]


@pytest.fixture(scope="module", params=["CartPole-v1", "Pendulum-v1"])
def run(request, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("run") / request.param
    cfg = train.train_config(request.param, "data/", None, SMALL, preset="tiny")
    train.train(cfg, run_dir, quiet=True, log=lambda m: None)
    return run_dir


@pytest.fixture(scope="module")
def exported(run):
    out = run.parent / "policy.onnx"
    report = export.export(run, out, with_value=True, with_log_prob=True)
    return out, report


def test_export_parity_and_metadata(run, exported):
    import onnx

    out, report = exported
    onnx.checker.check_model(onnx.load(str(out)))
    assert report["parity"]["ok"] and report["parity"]["observations"] == 1000
    assert report["parity"]["max_abs_diff"]["action"] <= 1e-5 and report["parity"]["discrete_mismatches"] == 0
    meta = OnnxPolicy(out).metadata
    assert meta["env_id"] == run.name and meta["outputs"] == "action,value,log_prob" and meta["opset"] == "17"
    assert json.loads(meta["observation_space"])["type"] == "Box"
    assert not [p for p in out.parent.iterdir() if ".tmp" in p.name]


def test_onnx_matches_torch_policy_on_batches(run, exported):
    from gailkit.model import policy
    from gailkit.run import checkpoint, rundir

    pol, _ = checkpoint.load_policy(rundir.resolve(run))
    pi = OnnxPolicy(exported[0])
    obs = np.random.default_rng(1).uniform(-1, 1, (64, *pi.obs_shape)).astype(np.float32)
    torch_acts = policy.env_action(pol.action_space, policy.act(pol, obs, deterministic=True)[0])
    onnx_acts = pi.predict(obs)
    assert onnx_acts.shape == torch_acts.shape
    assert np.allclose(onnx_acts, torch_acts, atol=1e-5)
    single = pi.predict(obs[0])
    assert np.allclose(single, onnx_acts[0], atol=1e-6)
    assert set(pi.run(obs)) == {"action", "value", "log_prob"}


def test_bad_observations_are_rejected(exported):
    pi = OnnxPolicy(exported[0])
    with pytest.raises(
        InferenceError, match=r"observation 'obs' of shape \(7,\); expected float32 of shape \(\d,\) or \(N, \d\)"
    ):
        pi.predict(np.zeros(7))
    with pytest.raises(InferenceError, match="dtype <U1 is not numeric; expected float32"):
        pi.predict(np.array(["a"] * pi.obs_shape[0]))
    with pytest.raises(InferenceError, match="no such ONNX file"):
        OnnxPolicy(exported[0].parent / "missing.onnx")


def test_failed_parity_writes_nothing(run, monkeypatch):
    monkeypatch.setattr(export, "TOLERANCE", -1.0)  # no difference can pass: the failure path must hold
    out = run.parent / "never.onnx"
    with pytest.raises(export.ExportError, match="parity check failed.*nothing written"):
        export.export(run, out)
    assert not out.exists()


def test_infer_without_torch_matches_evaluate(run, exported):
    code = (
        "import sys, json\n"
        "from gailkit import cli\n"
        f"rc = cli.main(['infer', {str(exported[0])!r}, '--episodes', '3', '--seed', '5', '--json'])\n"
        "assert rc == 0\n"
        "print('TORCH', 'torch' in sys.modules)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    out, marker = r.stdout.rsplit("TORCH", 1)
    assert marker.strip() == "False"
    inferred = json.loads(out)["returns"]
    report = evaluate.evaluate(run, episodes=3, seed=5, onnx_path=exported[0], plots=False)
    assert np.allclose(inferred, report["policy"]["returns"], rtol=1e-4, atol=1e-3)
    assert np.allclose(inferred, report["onnx"]["returns"], rtol=0, atol=0)


def test_evaluate_report_schema_and_plots(run, exported):
    r = evaluate.evaluate(run, episodes=2, seed=0, onnx_path=exported[0])
    assert set(r) == {
        "schema",
        "env_id",
        "source",
        "checkpoint",
        "episodes",
        "seed",
        "policy",
        "expert",
        "random",
        "normalized",
        "action_error",
        "onnx",
        "plots",
        "video",
        "stochastic",
    }
    assert (
        r["schema"] == 3
        and r["video"] is None
        and r["stochastic"] is False
        and set(r["policy"])
        == {
            "return_mean",
            "return_std",
            "length_mean",
            "length_std",
            "returns",
        }
    )
    assert r["expert"]["return_mean"] is not None and r["normalized"] is not None
    assert r["checkpoint"].endswith("best/checkpoint.pt")
    assert len(r["plots"]) == 3
    for path in r["plots"]:
        data = open(path, "rb").read()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    assert "normalized score" in evaluate.format_table(r)


def test_sb3_zip_loads_in_plain_sb3(run, exported):
    from stable_baselines3 import PPO

    out = export.export_sb3(run, run.parent / "policy_sb3.zip")
    model = PPO.load(out, device="cpu")
    pi = OnnxPolicy(exported[0])
    obs = np.random.default_rng(2).uniform(-1, 1, (8, *pi.obs_shape)).astype(np.float32)
    sb3_acts, _ = model.predict(obs, deterministic=True)
    assert np.allclose(sb3_acts, pi.predict(obs), atol=1e-5)


def test_custom_env_action_error_reported(tmp_path):
    cfg = train.train_config("CustomEnv", "data/customenv.arrow", None, SMALL, preset="tiny")
    train.train(cfg, tmp_path / "run", quiet=True, log=lambda m: None)
    r = evaluate.evaluate(tmp_path / "run", episodes=2, plots=False)
    assert r["action_error"] is not None and 0 <= r["action_error"] < 2


def test_evaluate_uses_the_runs_references_from_any_folder(run, tmp_path, monkeypatch):
    """The same checkpoint gets the same normalized score wherever evaluate runs (the run stores its
    references), and train's own last evaluation agrees with evaluate on the same episodes."""
    from gailkit.run import checkpoint, rundir

    state = checkpoint.load(rundir.resolve(run, "final"))
    monkeypatch.chdir(tmp_path)  # the run's demos path ("data/") means nothing here
    r = evaluate.evaluate(run, episodes=3, seed=state.references.random_seed, plots=False, which="final")
    assert r["expert"]["return_mean"] == state.references.expert_return
    assert r["random"] == {
        "return_mean": state.references.random_return,
        "episodes": state.references.random_episodes,
        "seed": state.references.random_seed,
    }
    assert r["normalized"] == state.references.normalized(r["policy"]["return_mean"])


def test_export_refuses_to_write_where_it_cannot_in_one_line(run, tmp_path):
    """An OS error (here: the folder is a file) is one line and exit 2, and nothing is left behind."""
    from conftest import run_cli

    blocker = tmp_path / "not_a_folder"
    blocker.write_text("a file")
    r = run_cli("export", str(run), "--out", str(blocker / "p.onnx"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith(f"gailkit: error: {blocker}") and (
        "File exists" in r.stderr or "Not a directory" in r.stderr
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["not_a_folder"]


@pytest.mark.parametrize("env_id", ["os:system", "tests/slow_env.py:SlowCartPole"])
def test_env_code_named_by_a_checkpoint_or_run_config_never_runs(run, tmp_path, env_id):
    """A checkpoint, a run's config.yaml or an ONNX file naming code as its env: nothing is imported or
    called unless the user types the same --env; the refusal is one line."""
    import shutil

    import yaml
    from conftest import run_cli

    from gailkit.run import checkpoint, rundir

    marker = tmp_path / "pwned"
    evil = tmp_path / "evil_run"
    shutil.copytree(run, evil)
    for path in [*evil.rglob("*.pt")]:
        state = checkpoint.load(path)
        state.config["env"] = {"id": env_id, "kwargs": {"command": f"touch {marker}"}}
        checkpoint.save(path, state)
    cfg = yaml.safe_load((evil / "config.yaml").read_text())
    cfg["env"] = {"id": env_id, "kwargs": {"command": f"touch {marker}"}}
    (evil / "config.yaml").write_text(yaml.safe_dump(cfg))
    for args in (
        ("evaluate", str(evil), "--no-plots", "--episodes", "1"),
        ("evaluate", str(rundir.resolve(evil)), "--no-plots", "--episodes", "1"),
        ("train", "--resume", str(evil), "--quiet"),
        ("export", str(evil), "--out", str(tmp_path / "e.onnx"), "--sb3", str(tmp_path / "e.zip")),
    ):
        r = run_cli(*args)
        if args[0] == "export":  # export makes no env at all (the spaces come from the checkpoint)
            assert r.returncode == 0, r.stderr
            continue
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and "which is code" in r.stderr, (args, r.stderr)
        assert f"pass --env {env_id}" in r.stderr
    assert not marker.exists()


def test_onnx_metadata_naming_code_is_not_loaded(exported, tmp_path):
    import onnx
    from conftest import run_cli

    marker = tmp_path / "pwned"
    model = onnx.load(str(exported[0]))
    for prop in model.metadata_props:
        if prop.key == "env_id":
            prop.value = "os:system"
    onnx.save(model, str(tmp_path / "evil.onnx"))
    r = run_cli("infer", str(tmp_path / "evil.onnx"), "--episodes", "1")
    assert r.returncode == 2 and "which is code" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert not marker.exists()


@pytest.mark.parametrize(
    "key, space, says",
    [
        ("action_space", {"type": "Dict", "spaces": {"a": {"type": "Discrete", "n": 2}}}, "malformed"),
        ("observation_space", {"type": "Dict", "spaces": {"x": {"type": "Discrete", "n": 2}}}, r"takes \['obs'\]"),
        ("observation_space", {"type": "Dict", "spaces": {"a/b": {"type": "Discrete", "n": 2}}}, "malformed"),
        ("observation_space", {"type": "Dict", "spaces": {}}, "malformed"),
        ("action_space", {"type": "Discrete", "n": 2, "start": "1"}, "malformed.*start="),
        ("action_space", {"type": "Discrete", "n": 2, "start": True}, "malformed.*start="),
        ("action_space", {"type": "Discrete", "n": 2, "start": [1]}, "malformed.*start="),
        ("action_space", {"type": "Discrete", "n": 2, "start": 1 << 40}, "malformed.*start="),
        ("action_space", {"type": "MultiDiscrete", "nvec": [2, 2], "start": [1]}, r"malformed.*start=\[1\]"),
    ],
)
def test_onnx_metadata_naming_dict_spaces_it_does_not_fit_is_one_line(exported, tmp_path, key, space, says):
    """Metadata that names a Dict action space, a Dict observation the graph's inputs do not match, an entry
    name with '/', no entries, or a Discrete's or MultiDiscrete's start that is not a whole number (one per
    entry) within 32 bits: refused in one line, before any observation."""
    import onnx

    model = onnx.load(str(exported[0]))
    for prop in model.metadata_props:
        if prop.key == key:
            prop.value = json.dumps(space)
    path = tmp_path / "edited.onnx"
    path.write_bytes(model.SerializeToString())
    with pytest.raises(InferenceError, match=says):
        OnnxPolicy(path)
