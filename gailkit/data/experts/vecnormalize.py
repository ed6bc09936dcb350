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


def read(path: Path, observation_space: gym.Space) -> ObsStats | None:
    """The observation statistics of a VecNormalize file (None when it did not normalize observations);
    ExpertError, one line naming the file, for anything else."""
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
    if not isinstance(vn.obs_rms, _RunningMeanStd):
        raise bad("its obs_rms is not a RunningMeanStd (Dict observations are not read)")
    rms: Any = vn.obs_rms
    shape = observation_space.shape or ()
    mean, var = (
        np.asarray(getattr(rms, k), np.float64) if isinstance(getattr(rms, k), np.ndarray) else None
        for k in ("mean", "var")
    )
    if mean is None or var is None or mean.shape != shape or var.shape != shape:
        raise bad(f"its statistics are not arrays of the env's observation shape {shape}")
    if not (np.isfinite(mean).all() and np.isfinite(var).all() and (var >= 0).all()):
        raise bad("its statistics hold NaN, inf or a negative variance")
    numbers = {"count": rms.count, "clip_obs": vn.clip_obs, "epsilon": vn.epsilon}
    for key, value in numbers.items():
        if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)) or not 0 < float(value) < 1e300:
            raise bad(f"its {key} is {textparse.shown(value)}, not a positive number")
    return ObsStats(mean, var, float(rms.count), float(vn.clip_obs), float(vn.epsilon))


def _bad(path: Path, says: str) -> ExpertError:
    return ExpertError(f"{path}: not usable VecNormalize statistics: {says}")


def apply(pol: Any, stats: ObsStats) -> None:
    """Put `stats` in front of every network of an SB3 policy whose extractors only flatten (what
    `MlpPolicy` has, for any algorithm): each `FlattenExtractor` is replaced by one `NormalizedFlatten`."""
    from stable_baselines3.common.torch_layers import FlattenExtractor

    from gailkit.model.encoders import NormalizedFlatten

    norm = NormalizedFlatten(pol.observation_space, normalize=True, clip=stats.clip, eps=stats.epsilon)
    norm.set_stats(stats.mean, stats.var, stats.count)
    norm.to(next(pol.parameters()).device)
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
