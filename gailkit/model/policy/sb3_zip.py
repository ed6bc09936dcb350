"""Reading a stable-baselines3 PPO/A2C zip without unpickling: weights with `weights_only=True`, the
architecture from the readable copies of `policy_kwargs`, declared sizes checked first."""

from __future__ import annotations

import ast
import io
import json
import zipfile
from pathlib import Path
from typing import Any
from zlib import error as zlib_error

import torch as th
from stable_baselines3.common.policies import ActorCriticPolicy

from gailkit.core import fsutil, limits
from gailkit.core.errors import GailkitError
from gailkit.model.policy import ACTIVATIONS, NormalizedFlatten

_ACTIVATION_CLASSES = {
    "Tanh": "tanh",
    "ReLU": "relu",
    "ELU": "elu",
    "LeakyReLU": "leaky_relu",
    "GELU": "gelu",
    "SiLU": "silu",
}


def _field(value: Any) -> Any:
    """A policy_kwargs entry of an SB3 zip: JSON as is, or the repr SB3 stores beside its cloudpickle."""
    if isinstance(value, str):
        try:
            return ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return value
    return value


def read_sb3_zip(path: Path, observation_space: Any, action_space: Any):
    """The policy of a stable-baselines3 PPO/A2C zip, without unpickling anything (ValueError if it cannot).

    SB3's own `PPO.load` runs cloudpickle on fields of the zip, which can run code. Here the
    weights come from `policy.pth` through `torch.load(weights_only=True)`, the architecture from
    the readable copies of `policy_kwargs` SB3 writes beside each pickled field, and the spaces
    from the env; the weights must fit the rebuilt network exactly.
    """
    try:
        with zipfile.ZipFile(fsutil.check_regular(path)) as z:
            for name in ("data", "policy.pth"):  # declared sizes first: a zip bomb is refused before it inflates
                info = z.getinfo(name)
                limits.check_size(info.file_size, info.compress_size, f"{path}: {name}")
            data = json.loads(z.read("data"))
            weights = th.load(io.BytesIO(z.read("policy.pth")), map_location="cpu", weights_only=True)
    except (
        zipfile.BadZipFile,
        KeyError,
        OSError,
        ValueError,
        RuntimeError,
        EOFError,
        NotImplementedError,
        zlib_error,
        GailkitError,
    ) as e:
        raise ValueError(
            f"{path}: not a readable stable-baselines3 zip ({type(e).__name__}: {str(e).splitlines()[0]})"
        ) from None
    if not isinstance(data, dict) or "ActorCriticPolicy.__init__" not in str(
        (data.get("policy_class") or {}).get("__init__", "")
    ):
        raise ValueError(f"{path}: not a stable-baselines3 PPO/A2C zip with an MlpPolicy (ActorCriticPolicy)")
    shape = _field((data.get("observation_space") or {}).get("_shape"))
    if isinstance(shape, (list, tuple)) and tuple(shape) != tuple(observation_space.shape or ()):
        raise ValueError(
            f"{path}: trained on observations of shape {tuple(shape)}, the env has {observation_space.shape}"
        )
    pk = data.get("policy_kwargs") or {}
    kwargs: dict[str, Any] = {}
    net_arch = _field(pk.get("net_arch"))
    if isinstance(net_arch, list) and net_arch and isinstance(net_arch[0], dict):
        net_arch = net_arch[0]  # SB3 < 1.8 wrote [dict(pi=..., vf=...)]
    if net_arch is not None:
        kwargs["net_arch"] = net_arch
    if "activation_fn" in pk:
        name = str(pk["activation_fn"]).rstrip("'>").rsplit(".", 1)[-1]
        if name not in _ACTIVATION_CLASSES:
            raise ValueError(
                f"{path}: activation {pk['activation_fn']} is not one gailkit rebuilds ({', '.join(_ACTIVATION_CLASSES)})"
            )
        kwargs["activation_fn"] = ACTIVATIONS[_ACTIVATION_CLASSES[name]]
    for key in (
        "log_std_init",
        "full_std",
        "use_expln",
        "squash_output",
        "share_features_extractor",
        "normalize_images",
    ):
        if key in pk:
            kwargs[key] = _field(pk[key])
    extractor = str(pk.get("features_extractor_class", "FlattenExtractor"))
    if "NormalizedFlatten" in extractor:
        kwargs["features_extractor_class"] = NormalizedFlatten
        kwargs["features_extractor_kwargs"] = _field(pk.get("features_extractor_kwargs", {})) or {}
    elif "FlattenExtractor" not in extractor:
        raise ValueError(f"{path}: features extractor {extractor} is not one gailkit rebuilds")
    try:
        pol = ActorCriticPolicy(
            observation_space, action_space, lambda _: 0.0, use_sde=bool(data.get("use_sde", False)), **kwargs
        )
        pol.load_state_dict(weights)
    except (RuntimeError, TypeError, ValueError, AttributeError) as e:
        raise ValueError(
            f"{path}: its weights do not fit the network it describes ({str(e).splitlines()[0]})"
        ) from None
    pol.set_training_mode(False)
    return pol
