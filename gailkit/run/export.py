"""Export a trained policy to ONNX: raw observation in, deterministic action out, normalizer inside.

Outputs: `action` (argmax for discrete spaces; the Gaussian mean clipped to the Box bounds for
continuous ones), and optionally `value` (the critic) and `log_prob` (of the unclipped
deterministic action). The batch axis is dynamic. Metadata: env id, spaces (JSON), gailkit
version, run, opset. After `onnx.checker`, a parity check against the torch policy on 1,000
observations at batch 1 and batch 64 must pass (max abs difference <= 1e-5 on actions, discrete
actions identical; `value` and `log_prob`, which can be large, are held to 1e-5 relative to
max(1, |x|)) or the export fails and nothing is written.
"""

from __future__ import annotations

import dataclasses
import io
import json
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import onnx
import torch as th

from gailkit import __version__, inference
from gailkit.core import fsutil
from gailkit.core import obs as obs_tree
from gailkit.core.errors import GailkitError, first_line
from gailkit.model import policy
from gailkit.model.spaces import start_of
from gailkit.run import checkpoint, rundir

OPSET = 17
TOLERANCE = 1e-5


class ExportError(GailkitError):
    """The export failed its checks; nothing was written."""


class _Exported(th.nn.Module):
    """The policy's deterministic head (`policy.deterministic_head`), with the chosen outputs. A Dict
    observation comes in as one input per entry (`obs/<key>`, the space's key order)."""

    def __init__(self, pol, with_value: bool, with_log_prob: bool, keys: list[str] | None = None):
        super().__init__()
        self.head, self.with_value, self.with_log_prob = policy.deterministic_head(pol), with_value, with_log_prob
        if with_value and not self.head.has_value:
            raise ExportError("--value: this policy (generator 'sac') has no state-value function to export")
        self.discrete = self.head.discrete
        self.keys = keys

    def forward(self, *inputs: th.Tensor):
        obs: Any = dict(zip(self.keys, inputs)) if self.keys is not None else inputs[0]
        action, value, log_prob = self.head(obs)
        return (action, *([value] if self.with_value else []), *([log_prob] if self.with_log_prob else []))


def input_names(space: gym.Space) -> list[str]:
    """`obs`, or `obs/<key>` per entry of a Dict space."""
    return [f"obs{obs_tree.SEP}{k}" for k in space.spaces] if isinstance(space, gym.spaces.Dict) else ["obs"]


def _sample_obs(space: gym.Space, n: int, rng: np.random.Generator) -> list[np.ndarray]:
    """`n` observations as the graph's inputs (one array, or one per Dict entry)."""
    if isinstance(space, gym.spaces.Dict):
        return [_sample_obs(sub, n, rng)[0] for sub in space.spaces.values()]
    if isinstance(space, gym.spaces.Box):
        low = np.where(np.isfinite(space.low), space.low, -10.0)
        high = np.where(np.isfinite(space.high), space.high, 10.0)
        return [rng.uniform(low, high, (n, *space.shape)).astype(space.dtype)]
    if isinstance(space, gym.spaces.Discrete):
        return [rng.integers(space.start, space.start + space.n, n)]
    if isinstance(space, gym.spaces.MultiDiscrete):
        start = start_of(space)
        return [rng.integers(start, start + space.nvec, (n, *space.shape)).astype(space.dtype)]
    if isinstance(space, gym.spaces.MultiBinary):
        return [rng.integers(0, 2, (n, *space.shape)).astype(space.dtype)]
    raise ExportError(f"observation space {space} is not supported for export")


def parity(model_bytes: bytes, module: _Exported, obs_space: gym.Space, n: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Max abs difference torch vs onnxruntime over `n` observations at batch 1 and batch 64."""
    sess = inference.session(model_bytes)
    obs = _sample_obs(obs_space, n, np.random.default_rng(seed))
    names_in = input_names(obs_space)
    names = [o.name for o in sess.get_outputs()]
    report: dict[str, Any] = {
        "observations": n,
        "batches": [1, 64],
        "discrete_mismatches": 0,
        "max_abs_diff": {name: 0.0 for name in names},
        "max_scaled_diff": {name: 0.0 for name in names},
    }
    for batch in (1, 64):
        for i in range(0, n, batch):
            chunk = [o[i : i + batch] for o in obs]
            with th.no_grad():
                ref = [t.cpu().numpy() for t in module(*(th.as_tensor(c) for c in chunk))]
            got = sess.run(None, dict(zip(names_in, chunk)))
            for name, r, g in zip(names, ref, got):
                if name == "action" and module.discrete:
                    report["discrete_mismatches"] += int((r != g).sum())
                    continue
                diff = np.abs(r.astype(np.float64) - g)
                report["max_abs_diff"][name] = max(report["max_abs_diff"][name], float(diff.max()))
                scaled = diff / np.maximum(1.0, np.abs(r))
                report["max_scaled_diff"][name] = max(report["max_scaled_diff"][name], float(scaled.max()))
    report["ok"] = (
        report["discrete_mismatches"] == 0
        and report["max_abs_diff"]["action"] <= TOLERANCE
        and all(v <= TOLERANCE for v in report["max_scaled_diff"].values())
    )
    return report


def export(
    source: str | Path, out: str | Path, with_value: bool = False, with_log_prob: bool = False, which: str = "best"
) -> dict[str, Any]:
    """Export the policy of a run (or checkpoint) to `out`; returns the parity report and metadata."""
    ckpt = rundir.resolve(source, which)
    pol, state = checkpoint.load_policy(ckpt, "cpu")
    obs_space = state.observation_space
    keys = list(obs_space.spaces) if isinstance(obs_space, gym.spaces.Dict) else None
    try:
        module = _Exported(pol, with_value, with_log_prob, keys).eval()
    except ValueError as e:
        raise ExportError(f"{ckpt}: {e}") from None
    outputs = ["action"] + (["value"] if with_value else []) + (["log_prob"] if with_log_prob else [])
    names_in = input_names(obs_space)
    dummy = tuple(th.as_tensor(o) for o in _sample_obs(obs_space, 2, np.random.default_rng(0)))
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        th.onnx.export(
            module,
            dummy,
            buf,  # type: ignore[arg-type]  # torch.onnx.export writes to a file object too
            input_names=names_in,
            output_names=outputs,
            opset_version=OPSET,
            dynamic_axes={name: {0: "batch"} for name in [*names_in, *outputs]},
            dynamo=False,
        )
    model = onnx.load_from_string(buf.getvalue())
    meta = {
        "env_id": state.settings.env.id,
        "env": json.dumps(dataclasses.asdict(state.settings.env)),  # preprocessing and frame stack: infer rebuilds them
        "observation_space": json.dumps(state.spaces["observation"]),
        "action_space": json.dumps(state.spaces["action"]),
        "gailkit_version": __version__,
        "run": str(ckpt),
        "round": str(state.round),
        "opset": str(OPSET),
        "outputs": ",".join(outputs),
    }
    for key, value in meta.items():
        model.metadata_props.add(key=key, value=value)
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as e:
        raise ExportError(f"onnx.checker rejected the graph: {first_line(e)}") from None
    data = model.SerializeToString()
    report = parity(data, module, obs_space)
    if not report["ok"]:
        raise ExportError(
            f"parity check failed: max abs differences {report['max_abs_diff']} "
            f"(limit {TOLERANCE:.0e}), {report['discrete_mismatches']} discrete mismatches; nothing written"
        )
    fsutil.atomic_write_bytes(out, data)
    return {
        "out": str(out),
        "checkpoint": str(ckpt),
        "parity": report,
        "metadata": meta,
        "generator": state.settings.generator,
    }


def export_sb3(source: str | Path, out: str | Path, which: str = "best") -> Path:
    """The trained policy as a plain stable-baselines3 zip (`PPO.load(out)`, or `SAC.load(out)` for a
    run of `generator: sac`, critics included) where gailkit is installed: the observation normalizer
    is gailkit's `NormalizedFlatten`."""
    ckpt = rundir.resolve(source, which)
    pol, state = checkpoint.load_policy(ckpt, "cpu")
    cfg = state.settings  # the spaces come from the checkpoint: no env is made, so none needs --env
    if cfg.generator == "sac":
        from gailkit.model.policy import squashed

        model = squashed.make_sac(state.observation_space, state.action_space, cfg.sac, cfg.policy, cfg.normalize_obs)
        model.policy.actor.load_state_dict(pol.state_dict())
        gen = state.learner["generator"]
        model.policy.critic.load_state_dict(gen["critic"])
        model.policy.critic_target.load_state_dict(gen["critic_target"])
        with fsutil.atomic_path(Path(out), suffix=".zip") as tmp:
            model.save(tmp)  # SB3 leaves the replay buffer out
        return Path(out)
    venv = policy.spaces_only_venv(state.observation_space, state.action_space)
    try:
        ppo_cfg = dataclasses.replace(cfg.ppo, n_steps=max(cfg.ppo.n_steps, cfg.ppo.batch_size))
        model = policy.make_ppo(venv, ppo_cfg, cfg.policy, cfg.normalize_obs, "cpu")
        model.policy.load_state_dict(pol.state_dict())
        out = Path(out)
        with fsutil.atomic_path(out, suffix=".zip") as tmp:
            model.save(tmp)
    finally:
        venv.close()
    return out
