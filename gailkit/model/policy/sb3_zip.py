"""Reading a stable-baselines3 zip (PPO, A2C, SAC, TD3, DQN; MlpPolicy or CnnPolicy) without unpickling:
weights with `weights_only=True`, the policy class from a fixed table of SB3's, the architecture from
the readable copies of `policy_kwargs`, declared sizes checked first."""

from __future__ import annotations

import ast
import importlib
import inspect
import io
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any
from zlib import error as zlib_error

import torch as th

from gailkit.core import expansion, fsutil, limits, textparse
from gailkit.core.errors import GailkitError, first_line
from gailkit.model import encoders, spaces
from gailkit.model.policy import ACTIVATIONS

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
    """The policy of a stable-baselines3 zip, without unpickling anything (ValueError if it cannot).

    SB3's own `PPO.load` runs cloudpickle on fields of the zip, which can run code. Here the
    weights come from `policy.pth` through `torch.load(weights_only=True)`, the architecture from
    the readable copies of `policy_kwargs` SB3 writes beside each pickled field, and the spaces
    from the env; the weights must fit the rebuilt network exactly. An env whose Discrete or MultiDiscrete
    space starts anywhere but 0 is refused: stable-baselines3 counts from 0 there (its env checker says it
    does not support such spaces), so what its policy's index meant to that env cannot be known.
    """
    for what, space in (("observation", observation_space), ("action", action_space)):
        if spaces.has_start(space):
            raise ValueError(
                f"{path}: the env's {what} space {spaces.one_line(space)} does not start at 0, which "
                "stable-baselines3 does not support (its policies count from 0), so its experts are not read for it"
            )
    try:
        with zipfile.ZipFile(fsutil.check_regular(path)) as z:
            for name in ("data", "policy.pth"):  # declared sizes first: a zip bomb is refused before it inflates
                info = z.getinfo(name)
                limits.check_size(info.file_size, info.compress_size, f"{path}: {name}")
            data = textparse.loads_json(z.read("data"))
            weights = th.load(io.BytesIO(z.read("policy.pth")), map_location="cpu", weights_only=True)
        expansion.check(weights, limits.memory_budget())
    except (
        expansion.Expands,
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
            f"{path}: not a readable stable-baselines3 zip ({type(e).__name__}: {first_line(e)})"
        ) from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a stable-baselines3 zip (its data is not a mapping)")
    cls = _policy_class(path, data.get("policy_class"))
    obs_space = _trained_space(path, data, observation_space, cls)
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
    for key in _PLAIN_KWARGS:
        if key in pk:
            kwargs[key] = _field(pk[key])
    if "use_sde" not in kwargs and "use_sde" in data:
        kwargs["use_sde"] = bool(data.get("use_sde"))
    kwargs.update(_extractor(path, pk))
    accepted = inspect.signature(cls).parameters
    try:
        pol = cls(obs_space, action_space, lambda _: 0.0, **{k: v for k, v in kwargs.items() if k in accepted})
        pol.load_state_dict(weights)
    except (RuntimeError, TypeError, ValueError, AttributeError, AssertionError, GailkitError) as e:
        raise ValueError(f"{path}: its weights do not fit the network it describes ({first_line(e)})") from None
    pol.set_training_mode(False)
    return pol


# Policy classes gailkit rebuilds, by the module and class a zip names (only as keys: the classes are
# imported from this table, never from the file).
_CLASSES = {
    ("stable_baselines3.common.policies", "ActorCriticPolicy"): "ActorCriticPolicy",
    ("stable_baselines3.common.policies", "MultiInputActorCriticPolicy"): "MultiInputActorCriticPolicy",
    ("stable_baselines3.sac.policies", "MultiInputPolicy"): "MultiInputPolicy",
    ("stable_baselines3.td3.policies", "MultiInputPolicy"): "MultiInputPolicy",
    ("stable_baselines3.dqn.policies", "MultiInputPolicy"): "MultiInputPolicy",
    ("stable_baselines3.common.policies", "ActorCriticCnnPolicy"): "ActorCriticCnnPolicy",
    ("stable_baselines3.sac.policies", "SACPolicy"): "SACPolicy",
    ("stable_baselines3.sac.policies", "CnnPolicy"): "CnnPolicy",
    ("stable_baselines3.td3.policies", "TD3Policy"): "TD3Policy",
    ("stable_baselines3.td3.policies", "CnnPolicy"): "CnnPolicy",
    ("stable_baselines3.dqn.policies", "DQNPolicy"): "DQNPolicy",
    ("stable_baselines3.dqn.policies", "CnnPolicy"): "CnnPolicy",
}
_PLAIN_KWARGS = (
    "log_std_init",
    "full_std",
    "use_expln",
    "squash_output",
    "share_features_extractor",
    "normalize_images",
    "use_sde",
    "clip_mean",
    "n_critics",
)


def _policy_class(path: Path, described: Any) -> type:
    """The SB3 policy class a zip's `policy_class` names, from `_CLASSES`; ValueError naming it otherwise."""
    described = described if isinstance(described, dict) else {}
    module = str(described.get("__module__", ""))
    init = str(described.get("__init__", ""))  # "<function SACPolicy.__init__ at 0x...>"
    name = init.removeprefix("<function ").split(".__init__")[0].rsplit(".", 1)[-1] if ".__init__" in init else ""
    if (module, name) not in _CLASSES:
        known = "PPO/A2C, SAC, TD3, DQN (MlpPolicy, CnnPolicy, MultiInputPolicy)"
        raise ValueError(f"{path}: its policy {module or '?'}.{name or '?'} is not one gailkit rebuilds ({known})")
    return getattr(importlib.import_module(module), _CLASSES[(module, name)])


def _trained_space(path: Path, data: dict, observation_space: Any, cls: type) -> Any:
    """The observation space the zip's network was built for: the env's, or for images the env's frames
    channels first (SB3 trains on VecTransposeImage; its `predict` transposes the env's frames back)."""
    import gymnasium as gym

    if isinstance(observation_space, gym.spaces.Dict):  # SB3 transposes every channels-last frame entry
        return gym.spaces.Dict({k: _channels_first(sub) for k, sub in observation_space.spaces.items()})
    shape = _field((data.get("observation_space") or {}).get("_shape"))
    env_shape = tuple(observation_space.shape or ())
    if not isinstance(shape, (list, tuple)) or tuple(shape) == env_shape:
        return observation_space
    if len(env_shape) == 3 and tuple(shape) == (env_shape[2], env_shape[0], env_shape[1]):
        import gymnasium as gym

        low, high = observation_space.low.transpose(2, 0, 1), observation_space.high.transpose(2, 0, 1)
        return gym.spaces.Box(low, high, dtype=observation_space.dtype)
    hint = ""
    if len(shape) == 3 and tuple(shape[1:]) == (84, 84) and env_shape != tuple(shape):
        hint = (
            f" (84x84 frames in a stack of {shape[0]}: the Atari pipeline, --preprocess atari --frame-stack {shape[0]})"
        )
    raise ValueError(
        f"{path}: trained on observations of shape {tuple(shape)}, the env has {observation_space.shape}{hint}"
    )


def _channels_first(space: Any) -> Any:
    """`space` as SB3's VecTransposeImage gives it: a channels-last uint8 frame becomes channels first."""
    from stable_baselines3.common.preprocessing import is_image_space, is_image_space_channels_first

    if not is_image_space(space) or is_image_space_channels_first(space):
        return space
    import gymnasium as gym

    return gym.spaces.Box(space.low.transpose(2, 0, 1), space.high.transpose(2, 0, 1), dtype=space.dtype)


# gailkit's own encoders (what `gailkit expert train` saves with PPO): the keyword arguments each takes, and
# the values each may have (a zip's values are data: checked here before they reach a constructor)
_GAILKIT_ENCODERS: dict[str, dict[str, Callable[[Any], bool]]] = {
    "NormalizedFlatten": {"normalize": lambda v: isinstance(v, bool)},
    "ImageCNN": {"features_dim": lambda v: type(v) is int and 1 <= v <= 1 << 16},
    "DictEncoder": {
        "kind": lambda v: v in encoders.KINDS,
        "normalize": lambda v: v is None or isinstance(v, bool),
        "cnn_features": lambda v: type(v) is int and 1 <= v <= 1 << 16,
    },
}


def _extractor(path: Path, pk: dict) -> dict[str, Any]:
    extractor = str(pk.get("features_extractor_class", ""))
    extractor_kwargs = _field(pk.get("features_extractor_kwargs", {})) or {}
    if not isinstance(extractor_kwargs, dict):
        raise ValueError(f"{path}: features_extractor_kwargs is not a mapping")
    name = extractor.removesuffix("'>").rsplit(".", 1)[-1]
    if extractor.startswith("<class 'gailkit.") and name in _GAILKIT_ENCODERS:  # any gailkit version's module
        allowed = _GAILKIT_ENCODERS[name]
        for key, value in extractor_kwargs.items():
            if key not in allowed or not allowed[key](value):
                raise ValueError(f"{path}: features_extractor_kwargs {str(key)[:40]!r}={str(value)[:40]} for {name}")
        return {"features_extractor_class": getattr(encoders, name), "features_extractor_kwargs": extractor_kwargs}
    if "NatureCNN" in extractor:
        from stable_baselines3.common.torch_layers import NatureCNN

        return {"features_extractor_class": NatureCNN, "features_extractor_kwargs": extractor_kwargs}
    if "CombinedExtractor" in extractor:
        from stable_baselines3.common.torch_layers import CombinedExtractor

        return {"features_extractor_class": CombinedExtractor, "features_extractor_kwargs": extractor_kwargs}
    if extractor and "FlattenExtractor" not in extractor:
        raise ValueError(f"{path}: features extractor {extractor} is not one gailkit rebuilds")
    return {}  # the class's own default (FlattenExtractor for Mlp, NatureCNN for Cnn policies)
