"""`OnnxPolicy`: run an exported policy with onnxruntime and numpy alone (no torch import).

    from gailkit.inference import OnnxPolicy
    pi = OnnxPolicy("exports/cartpole.onnx")
    action = pi.predict(obs)            # one observation -> one action
    actions = pi.predict(batch)         # (N, *obs_shape) -> (N, *act_shape)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from gailkit.errors import GailkitError


class InferenceError(GailkitError):
    """The ONNX file or an observation does not fit."""


def session(model: str | Path | bytes, threads: int = 1):
    """An onnxruntime CPU session for a file path or serialized model bytes."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    source = model if isinstance(model, bytes) else str(model)
    try:
        return ort.InferenceSession(source, sess_options=opts, providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime raises its own exception types for bad files
        where = "model" if isinstance(model, bytes) else str(model)
        raise InferenceError(f"{where}: not a loadable ONNX model ({str(e).splitlines()[0]})") from None


class OnnxPolicy:
    def __init__(self, path: str | Path, threads: int = 1):
        path = Path(path)
        if not path.is_file():
            raise InferenceError(f"{path}: no such ONNX file")
        self.session = session(path, threads)
        meta = self.session.get_modelmeta().custom_metadata_map
        if "observation_space" not in meta:
            raise InferenceError(f"{path}: no gailkit metadata (observation_space); export it with gailkit export")
        self.path = path
        self.metadata: dict[str, str] = dict(meta)
        self.env_id: str = meta.get("env_id", "")
        self.observation_space: dict[str, Any] = json.loads(meta["observation_space"])
        self.action_space: dict[str, Any] = json.loads(meta["action_space"])
        obs = self.observation_space
        self.obs_shape: tuple[int, ...] = tuple(obs.get("shape", ())) if obs["type"] == "Box" else ()
        self.obs_dtype = np.dtype(obs["dtype"]) if obs["type"] == "Box" else np.dtype(np.int64)
        self.outputs = [o.name for o in self.session.get_outputs()]

    def _batch(self, obs: Any) -> tuple[np.ndarray, bool]:
        arr = np.asarray(obs)
        if arr.dtype.kind not in "fiu":
            raise InferenceError(f"observation dtype {arr.dtype} is not numeric; expected {self.obs_dtype} "
                                 f"of shape {self.obs_shape} or (N, {', '.join(map(str, self.obs_shape))})")
        if arr.shape == self.obs_shape:
            return arr.astype(self.obs_dtype, copy=False)[None], True
        if arr.shape[1:] == self.obs_shape and arr.ndim == len(self.obs_shape) + 1:
            return arr.astype(self.obs_dtype, copy=False), False
        raise InferenceError(f"observation of shape {arr.shape}; expected {self.obs_shape} or (N, "
                             f"{', '.join(map(str, self.obs_shape))}) ({self.obs_dtype}) for {self.env_id}")

    def run(self, obs: Any) -> dict[str, np.ndarray]:
        """Every output of the graph (`action`, and `value`/`log_prob` when exported) for `obs`."""
        batch, single = self._batch(obs)
        out = dict(zip(self.outputs, self.session.run(None, {"obs": np.ascontiguousarray(batch)})))
        return {k: v[0] for k, v in out.items()} if single else out

    def predict(self, obs: Any) -> np.ndarray:
        """The deterministic action for one observation, or actions for a batch."""
        return self.run(obs)["action"]

    __call__ = predict
