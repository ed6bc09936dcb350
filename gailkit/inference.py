"""`OnnxPolicy`: run an exported policy with onnxruntime and numpy (no torch import).

from gailkit.inference import OnnxPolicy
pi = OnnxPolicy("exports/cartpole.onnx")
action = pi.predict(obs)            # one observation -> one action
actions = pi.predict(batch)         # (N, *obs_shape) -> (N, *act_shape)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from gailkit.core import obs as obs_tree
from gailkit.core.errors import GailkitError, first_line
from gailkit.core.textparse import loads_json, shown


class InferenceError(GailkitError):
    """The ONNX file or an observation does not fit."""


def session(model: str | Path | bytes, threads: int = 1):
    """An onnxruntime CPU session for a file path or serialized model bytes."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    where = "model" if isinstance(model, bytes) else str(model)
    if isinstance(model, bytes):
        data = model
    else:
        from gailkit.core import fsutil, limits

        limits.check_size(fsutil.check_regular(model).stat().st_size, None, str(model))
        data = Path(model).read_bytes()
    _refuse_external_data(data, where)
    try:  # the bytes just checked, not the path again: what runs is what was checked
        return ort.InferenceSession(data, sess_options=opts, providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime raises its own exception types for bad files
        raise InferenceError(f"{where}: not a loadable ONNX model ({first_line(e)})") from None


def _refuse_external_data(data: bytes, where: str) -> None:
    """Refuse a model any of whose tensors is stored in another file. ONNX lets a tensor name a file by path,
    and onnxruntime releases before its fixes of December 2025 read whatever it named (`../../.ssh/id_rsa`, an
    absolute path) as weights, which a graph can then return as its output. gailkit's exports hold every weight
    in the file. Every message of the model is walked (initializers, Constant nodes, subgraphs of If and Loop,
    functions), not a list of places."""
    import onnx
    from google.protobuf.descriptor import FieldDescriptor
    from google.protobuf.message import Message

    try:
        proto = onnx.load_from_string(data)
    except Exception as e:  # noqa: BLE001 - protobuf's DecodeError and others
        raise InferenceError(f"{where}: not a loadable ONNX model ({type(e).__name__})") from None
    stack: list[Any] = [proto]
    while stack:
        msg = stack.pop()
        if isinstance(msg, onnx.TensorProto) and (
            msg.data_location == onnx.TensorProto.EXTERNAL or len(msg.external_data)
        ):
            found = {e.key: e.value for e in msg.external_data}.get("location", "")
            raise InferenceError(
                f"{where}: refused: its tensor {shown(msg.name)} is stored in another file ({shown(found)}); "
                "gailkit reads ONNX models whose weights are all in the file"
            )
        for field, value in msg.ListFields():
            if field.type == FieldDescriptor.TYPE_MESSAGE:
                stack.extend([value] if isinstance(value, Message) else value)  # one message, or a repeated field


class OnnxPolicy:
    def __init__(self, path: str | Path, threads: int = 1):
        path = Path(path)
        if not path.is_file():
            raise InferenceError(f"{path}: no such ONNX file")
        self.session = session(path, threads)
        try:
            meta = self.session.get_modelmeta().custom_metadata_map
        except (UnicodeDecodeError, RuntimeError) as e:
            raise InferenceError(f"{path}: unreadable metadata ({type(e).__name__})") from None
        if "observation_space" not in meta:
            raise InferenceError(f"{path}: no gailkit metadata (observation_space); export it with gailkit export")
        self.path = path
        self.metadata: dict[str, str] = dict(meta)
        self.env_id: str = meta.get("env_id", "")
        try:  # the env as trained: its kwargs, preprocessing and frame stack (files of gailkit < 0.5: the id alone)
            env = loads_json(meta.get("env", "{}"))
        except ValueError:
            raise InferenceError(f"{path}: its gailkit metadata 'env' is not JSON") from None
        if not isinstance(env, dict) or not isinstance(env.get("kwargs", {}), dict):
            raise InferenceError(f"{path}: its gailkit metadata 'env' is not a mapping with kwargs")
        self.env_settings: dict[str, Any] = {
            k: env[k] for k in ("kwargs", "preprocess", "frame_stack", "max_episode_steps") if k in env
        }
        try:
            self.observation_space: dict[str, Any] = _space(loads_json(meta["observation_space"]))
            self.action_space: dict[str, Any] = _space(loads_json(meta["action_space"]), nested=True)  # never a Dict
        except (KeyError, ValueError, TypeError) as e:
            raise InferenceError(f"{path}: its gailkit metadata is malformed ({type(e).__name__}: {e})") from None
        obs = self.observation_space
        # input name -> (shape, dtype): `obs`, or `obs/<key>` per entry of a Dict observation
        entries = obs["spaces"] if obs["type"] == "Dict" else {"": obs}
        self.inputs: dict[str, tuple[tuple[int, ...], np.dtype]] = {
            f"obs{obs_tree.SEP}{k}" if k else "obs": (tuple(sub["shape"]), np.dtype(sub["dtype"]))
            for k, sub in entries.items()
        }
        self.keys: list[str] | None = list(entries) if obs["type"] == "Dict" else None
        self.obs_shape, self.obs_dtype = self.inputs.get("obs", ((), np.dtype("float32")))
        inputs = [i.name for i in self.session.get_inputs()]
        self.outputs = [o.name for o in self.session.get_outputs()]
        if inputs != list(self.inputs) or "action" not in self.outputs:
            raise InferenceError(
                f"{path}: takes {inputs} and gives {self.outputs}; a gailkit policy of its observation space takes "
                f"{list(self.inputs)} and gives 'action'"
            )

    def env_config(self, env_id: str | None = None) -> Any:
        """The env as trained (`EnvConfig`: kwargs, preprocessing, frame stack), under `env_id` when given."""
        from gailkit.config import EnvConfig, from_dict

        return from_dict(EnvConfig, {**self.env_settings, "id": env_id or self.env_id}, f"{self.path}: metadata env")

    def _feed(self, obs: Any) -> tuple[dict[str, np.ndarray], int, bool]:
        """The graph's inputs for one observation or a batch (a mapping of entries for a Dict space), its
        batch size, and whether it was one observation."""
        if self.keys is None:
            parts = {"obs": obs}
        elif isinstance(obs, dict) and set(obs) == set(self.keys):
            parts = {f"obs{obs_tree.SEP}{k}": obs[k] for k in self.keys}
        else:
            has = sorted(obs) if isinstance(obs, dict) else type(obs).__name__
            raise InferenceError(f"observation {has}; expected a mapping of {self.keys} for {self.env_id}")
        feed, sizes = {}, set()
        for name, value in parts.items():
            shape, dtype = self.inputs[name]
            arr, n = _entry(value, shape, dtype, name, self.env_id)
            feed[name] = np.ascontiguousarray(arr)
            sizes.add(n)
        if len(sizes) != 1:
            raise InferenceError(f"observation entries of different batch sizes {sorted(map(str, sizes))}")
        n = sizes.pop()
        return feed, n or 1, n is None

    def run(self, obs: Any) -> dict[str, np.ndarray]:
        """Every output of the graph (`action`, and `value`/`log_prob` when exported) for `obs`."""
        feed, n, single = self._feed(obs)
        try:
            out = dict(zip(self.outputs, self.session.run(None, feed)))
        except Exception as e:  # noqa: BLE001 - onnxruntime raises its own types for graphs that do not run
            raise InferenceError(f"{self.path}: the graph failed on an observation ({first_line(e, 200)})") from None
        _check_actions(out["action"], n, self.action_space, self.path)
        out["action"] = _in_box_dtype(out["action"], self.action_space)
        return {k: v[0] for k, v in out.items()} if single else out

    def predict(self, obs: Any) -> np.ndarray:
        """The deterministic action for one observation, or actions for a batch."""
        return self.run(obs)["action"]

    __call__ = predict


def _entry(value: Any, shape: tuple[int, ...], dtype: np.dtype, name: str, env_id: str) -> tuple[np.ndarray, Any]:
    """One input as the graph takes it (a batch), and its batch size (None: it was one observation)."""
    arr = np.asarray(value)
    want = f"{dtype} of shape {shape} or (N, {', '.join(map(str, shape))})"
    if arr.dtype.kind not in "fiub":
        raise InferenceError(f"observation '{name}' of dtype {arr.dtype} is not numeric; expected {want}")
    if arr.shape == shape:
        return arr.astype(dtype, copy=False)[None], None
    if arr.shape[1:] == shape and arr.ndim == len(shape) + 1:
        return arr.astype(dtype, copy=False), len(arr)
    raise InferenceError(f"observation '{name}' of shape {arr.shape}; expected {want} for {env_id}")


_KINDS = {"Box", "Discrete", "MultiDiscrete", "MultiBinary"}


def _space(d: Any, nested: bool = False) -> dict[str, Any]:
    """A space's JSON checked enough to size arrays by: a known type, a shape of small non-negative ints, a
    numeric dtype; `shape` and `dtype` filled in for the discrete kinds; a Dict of those, one level."""
    if isinstance(d, dict) and d.get("type") == "Dict" and not nested:
        entries = d.get("spaces")
        if not isinstance(entries, dict) or not 1 <= len(entries) <= obs_tree.MAX_ENTRIES:
            raise ValueError(f"a Dict space needs 1 to {obs_tree.MAX_ENTRIES} entries")
        if not all(obs_tree.is_entry_name(k) for k in entries):
            raise ValueError("a Dict space's entry names must be non-empty strings without '/'")
        return {"type": "Dict", "spaces": {k: _space(v, nested=True) for k, v in entries.items()}}
    if not isinstance(d, dict) or d.get("type") not in _KINDS:
        raise ValueError(f"a space of type {shown(d.get('type') if isinstance(d, dict) else d)}")
    out = dict(d)
    if d["type"] == "Discrete":
        n = d.get("n")
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n < 1 << 31:
            raise ValueError(f"Discrete n={shown(n)}")
        out.update(shape=[], dtype="int64", start=_start(d.get("start", 0), []))
    elif d["type"] == "MultiBinary" and "shape" not in d:
        n = d.get("n")
        out["shape"], out["dtype"] = (n if isinstance(n, list) else [n]), "int8"
    elif d["type"] == "MultiDiscrete":
        nvec = d.get("nvec")
        if not isinstance(nvec, list) or not nvec or not all(type(k) is int and 1 <= k < 1 << 31 for k in nvec):
            raise ValueError(f"MultiDiscrete nvec={shown(nvec)}")
        out["shape"], out["dtype"] = [len(nvec)], "int64"
        out["start"] = _start(d.get("start", 0), [len(nvec)])
    shape = out.get("shape", [])
    if (
        not isinstance(shape, list)
        or not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 20 for v in shape)
        or int(np.prod(shape, dtype=np.float64)) > 1 << 28
    ):
        raise ValueError(f"shape {shown(shape)}")
    dtype = np.dtype(str(out.get("dtype", "float32")))
    if dtype.kind not in "fiub":
        raise ValueError(f"dtype {dtype}")
    out["dtype"] = dtype.name
    return out


def _start(value: Any, shape: list[int]) -> Any:
    """A Discrete's or MultiDiscrete's start as the metadata gives it: an int, or a list of ints (one per
    entry), each within ±2**31."""
    values = value if isinstance(value, list) else [value]
    if not all(type(v) is int and -(1 << 31) <= v < 1 << 31 for v in values) or (
        isinstance(value, list) and [len(value)] != shape
    ):
        raise ValueError(f"start={shown(value)}")
    return value


def _in_box_dtype(actions: np.ndarray, space: dict[str, Any]) -> np.ndarray:
    """A Box's actions in its own dtype, as the env checks them (the graph gives float32): rounded for a Box
    of integers or booleans (the graph has clipped them to the bounds)."""
    dtype = np.dtype(space["dtype"])
    if space["type"] != "Box" or actions.dtype == dtype:
        return actions
    return (np.rint(actions) if dtype.kind in "iub" and actions.dtype.kind == "f" else actions).astype(dtype)


def _check_actions(actions: Any, n: int, space: dict[str, Any], path: Path) -> None:
    """What the graph returned fits the action space: one finite action per observation, of its shape (and range)."""
    arr = np.asarray(actions)
    if (
        arr.dtype.kind not in "fiub"
        or arr.shape != (n, *space["shape"])
        or (arr.dtype.kind == "f" and not np.isfinite(arr).all())
    ):
        raise InferenceError(
            f"{path}: the graph returned actions of shape {arr.shape} ({arr.dtype}); the action space "
            f"{space['type']} needs ({n}, {', '.join(map(str, space['shape']))}), finite"
        )
    if space["type"] == "Discrete" and not ((arr >= space["start"]) & (arr < space["start"] + space["n"])).all():
        raise InferenceError(
            f"{path}: the graph returned an action outside Discrete({space['n']}, start={space['start']})"
        )
    if space["type"] == "MultiBinary" and not ((arr == 0) | (arr == 1)).all():
        raise InferenceError(f"{path}: the graph returned a MultiBinary action other than 0 and 1")
    if space["type"] == "MultiDiscrete":
        nvec = np.asarray(space.get("nvec", []), dtype=np.float64)
        start = np.asarray(space["start"], dtype=np.float64)
        if nvec.shape != arr.shape[1:] or not ((arr >= start) & (arr < start + nvec)).all():
            raise InferenceError(
                f"{path}: the graph returned an action outside MultiDiscrete({nvec.astype(int).tolist()}, "
                f"start={space['start']})"
            )
