"""Evaluate, export and ONNX inference on tiny trained runs (discrete CartPole, continuous Pendulum)."""

import json
import subprocess
import sys

import numpy as np
import pytest

from gailkit import evaluate, export, train
from gailkit.inference import InferenceError, OnnxPolicy

TINY = ["n_envs=2", "ppo.n_steps=64", "ppo.batch_size=64", "ppo.n_epochs=2", "ppo.net_arch=[16]",
        "disc.net_arch=[16]", "disc.demo_batch_size=64", "eval_episodes=1", "total_steps=256", "eval_every=2"]


@pytest.fixture(scope="module", params=["CartPole-v1", "Pendulum-v1"])
def run(request, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("run") / request.param
    cfg = train.train_config(request.param, "data/", None, TINY)
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
    from gailkit import checkpoint, policy

    pol, _ = checkpoint.load_policy(checkpoint.resolve(run))
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
    with pytest.raises(InferenceError, match=r"observation of shape \(7,\); expected \(\d,\) or \(N, \d\) \(float32\)"):
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
    assert set(r) == {"schema", "env_id", "source", "episodes", "seed", "policy", "expert", "random",
                      "normalized", "action_error", "onnx", "plots"}
    assert r["schema"] == 1 and set(r["policy"]) == {"return_mean", "return_std", "length_mean", "length_std", "returns"}
    assert r["expert"]["return_mean"] is not None and r["normalized"] is not None
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
    cfg = train.train_config("CustomEnv", "data/customenv.arrow", None, TINY)
    train.train(cfg, tmp_path / "run", quiet=True, log=lambda m: None)
    r = evaluate.evaluate(tmp_path / "run", episodes=2, plots=False)
    assert r["action_error"] is not None and 0 <= r["action_error"] < 2
