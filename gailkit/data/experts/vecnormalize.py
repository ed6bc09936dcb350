"""An SB3 expert's VecNormalize statistics, read without running any code, baked into its policy.

An expert trained with `VecNormalize` acts on normalized observations; loaded without the statistics
it acts on raw ones and plays like a random policy (or worse). SB3 saves them with
`VecNormalize.save` as a pickle (rl-zoo3: `ENV/vecnormalize.pkl` beside `ENV.zip`). gailkit finds
that file beside the `.zip` (`STATS_NAMES`), or takes the one named by `--vecnormalize FILE`, reads it with the restricted unpickler, where
VecNormalize, RunningMeanStd and gymnasium's spaces resolve to inert records (none of their code
runs; any other global is refused), checks the numbers, and puts them into a `NormalizedFlatten`
in front of the policy's layers, SB3's formula, epsilon and clip included.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import pickle
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from gailkit.core import fsutil, textparse
from gailkit.core import obs as obs_tree
from gailkit.core.errors import ExpertError, GailkitError
from gailkit.data.demos import unpickler

STATS_NAMES = ("{stem}_vecnormalize.pkl", "{stem}.vecnormalize.pkl", "vecnormalize.pkl", "{stem}/vecnormalize.pkl")
MAX_BYTES = 64 << 20


class _Inert:
    """Stands for any object the statistics file holds that gailkit does not read (spaces, RNGs)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        pass


_VecNormalize = unpickler._record("VecNormalize", "obs_rms clip_obs epsilon norm_obs norm_obs_keys")
_RunningMeanStd = unpickler._record("RunningMeanStd", "mean var count")
_STUBS: dict[tuple[str, str], Any] = {
    ("stable_baselines3.common.vec_env.vec_normalize", "VecNormalize"): _VecNormalize,
    ("stable_baselines3.common.running_mean_std", "RunningMeanStd"): _RunningMeanStd,
}
# What else a VecNormalize pickle holds (its spaces, their RNGs) resolves to `_Inert`, by module prefix.
_INERT_MODULES = ("gymnasium.spaces.", "numpy.random.")


class _StatsUnpickler(unpickler.RestrictedUnpickler):
    def find_class(self, module: str, name: str) -> Any:
        stub = _STUBS.get((module, name))
        if stub is None and module.startswith(_INERT_MODULES) and name.isidentifier():
            stub = _Inert
        return stub if stub is not None else super().find_class(module, name)


@dataclasses.dataclass
class ObsStats:
    mean: np.ndarray
    var: np.ndarray
    count: float
    clip: float
    epsilon: float


def find(zip_path: Path) -> Path | None:
    """The statistics file beside an expert's .zip, if there is one (`STATS_NAMES`, first found)."""
    for pattern in STATS_NAMES:
        candidate = zip_path.parent / pattern.format(stem=zip_path.stem)
        if candidate.is_file():
            return candidate
    return None


def read(path: Path, observation_space: gym.Space) -> ObsStats | dict[str, ObsStats] | None:
    """The observation statistics of a VecNormalize file (None when it did not normalize observations; for
    a Dict observation, one per entry it normalized, SB3's `norm_obs_keys`); ExpertError, one line naming
    the file, for anything else."""
    try:
        data = fsutil.read_regular(path, MAX_BYTES)
    except (OSError, GailkitError) as e:
        raise ExpertError(f"{path}: cannot read the VecNormalize statistics ({e})") from None
    try:
        obj: Any = _StatsUnpickler(io.BytesIO(data)).load()
    except unpickler.RefusedGlobal as e:
        raise ExpertError(
            f"{path}: not VecNormalize statistics: it names {e.name}, which gailkit never loads"
        ) from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError) as e:
        raise ExpertError(f"{path}: not a readable VecNormalize file ({type(e).__name__}: {e})") from None
    bad = functools.partial(_bad, path)
    if not isinstance(obj, _VecNormalize):
        raise bad(f"holds a {type(obj).__name__}, not SB3's VecNormalize")
    vn: Any = obj
    if vn.norm_obs is False:
        return None
    numbers = {"clip_obs": vn.clip_obs, "epsilon": vn.epsilon}
    for key, value in numbers.items():
        if not _positive(value):
            raise bad(f"its {key} is {textparse.shown(value)}, not a positive number")
    if isinstance(vn.obs_rms, dict):  # a Dict observation: statistics for the entries in `norm_obs_keys`
        if not isinstance(observation_space, gym.spaces.Dict):
            raise bad(
                f"its statistics are per Dict entry, and the env's observations are {type(observation_space).__name__}"
            )
        if len(vn.obs_rms) > obs_tree.MAX_ENTRIES:
            raise bad(f"its statistics name {len(vn.obs_rms)} Dict entries")
        out = {}
        for key, rms in vn.obs_rms.items():
            if not isinstance(key, str) or key not in observation_space.spaces:
                raise bad(f"its statistics name the entry {textparse.shown(key)}, which the env's observations lack")
            out[key] = _stats(rms, observation_space[key], vn, bad, f"entry {key!r}: ")
        return out or None
    return _stats(vn.obs_rms, observation_space, vn, bad, "")


def _positive(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float, np.floating)) and 0 < float(value) < 1e300


def _stats(obj: Any, space: gym.Space, vn: Any, bad: Any, at: str) -> ObsStats:
    """One RunningMeanStd's numbers, checked against the (entry's) observation space."""
    if not isinstance(obj, _RunningMeanStd):
        raise bad(f"{at}its obs_rms is not a RunningMeanStd")
    rms: Any = obj
    shape = space.shape or ()
    mean, var = (
        np.asarray(getattr(rms, k), np.float64) if isinstance(getattr(rms, k), np.ndarray) else None
        for k in ("mean", "var")
    )
    if mean is None or var is None or mean.shape != shape or var.shape != shape:
        raise bad(f"{at}its statistics are not arrays of the env's observation shape {shape}")
    if not (np.isfinite(mean).all() and np.isfinite(var).all() and (var >= 0).all()):
        raise bad(f"{at}its statistics hold NaN, inf or a negative variance")
    if not _positive(rms.count):
        raise bad(f"{at}its count is {textparse.shown(rms.count)}, not a positive number")
    return ObsStats(mean, var, float(rms.count), float(vn.clip_obs), float(vn.epsilon))


def _bad(path: Path, says: str) -> ExpertError:
    return ExpertError(f"{path}: not usable VecNormalize statistics: {says}")


def apply(pol: Any, stats: ObsStats | dict[str, ObsStats]) -> None:
    """Put `stats` in front of every network of an SB3 policy whose extractors only flatten (what
    `MlpPolicy` has, for any algorithm): each `FlattenExtractor` is replaced by one `NormalizedFlatten`.
    Per-entry statistics go in front of the entries' flattening in each of `MultiInputPolicy`'s
    `CombinedExtractor`s, as VecNormalize normalized those entries and passed the others through."""
    from stable_baselines3.common.torch_layers import CombinedExtractor, FlattenExtractor
    from torch import nn

    from gailkit.model.encoders import NormalizedFlatten

    device = next(pol.parameters()).device

    def normalizer(space: gym.Space, st: ObsStats) -> NormalizedFlatten:
        norm = NormalizedFlatten(space, normalize=True, clip=st.clip, eps=st.epsilon)
        norm.set_stats(st.mean, st.var, st.count)
        return norm.to(device)

    if isinstance(stats, dict):
        combined = [m for m in pol.modules() if isinstance(m, CombinedExtractor)]
        if not combined:
            raise ExpertError(
                "a VecNormalize file of Dict statistics lies beside an expert whose network has no "
                f"MultiInputPolicy extractor ({type(getattr(pol, 'features_extractor', None)).__name__}); move one of them away"
            )
        for extractor in combined:
            for key, st in stats.items():
                if not isinstance(extractor.extractors[key], nn.Flatten):
                    raise ExpertError(
                        f"VecNormalize statistics for the Dict entry {key!r}, which the expert's network reads "
                        f"with {type(extractor.extractors[key]).__name__}, not by flattening it"
                    )
                extractor.extractors[key] = normalizer(pol.observation_space[key], st)
        return

    norm = normalizer(pol.observation_space, stats)
    slots = [  # every name a FlattenExtractor is registered under (SB3 shares one as features/pi/vf extractor)
        (m, name) for m in pol.modules() for name, child in m._modules.items() if isinstance(child, FlattenExtractor)
    ]
    if not slots:
        raise ExpertError(
            "a VecNormalize file lies beside an expert whose network has its own extractor "
            f"({type(getattr(pol, 'features_extractor', None)).__name__}); move one of them away"
        )
    for module, name in slots:
        setattr(module, name, norm)
