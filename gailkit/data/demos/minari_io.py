"""Minari datasets: read with h5py (HDF5 storage) or pyarrow (Arrow storage), offline, without minari;
written with minari's own writer (extra `gailkit[minari]`).

A dataset is a folder `<root>/<dataset_id>/data/` holding `metadata.json` (spaces and env spec as
JSON) and either `main_data.hdf5` (group `episode_<i>` per episode) or one folder per episode
with `part-*.arrow`. Minari stores T + 1 observations for an episode of T steps; transition t is
`(observations[t], actions[t], observations[t + 1])` with `terminations[t]`, `truncations[t]`,
`rewards[t]` (Arrow storage pads actions, rewards and flags with a dummy row T, which is dropped).
`minari:DATASET_ID` names a dataset in the local Minari root (`$MINARI_DATASETS_PATH`, else
`~/.minari/datasets`); nothing is downloaded.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from gailkit.core import fsutil, textparse
from gailkit.core import obs as obs_tree
from gailkit.core.errors import DemoError, GailkitError
from gailkit.data.demos.core import DemoMeta, Demos, space_from_json, space_to_json
from gailkit.data.demos.minari_storage import _read_arrow, _read_hdf5

PREFIX = "minari:"


def root() -> Path:
    return Path(os.environ.get("MINARI_DATASETS_PATH") or Path.home() / ".minari" / "datasets")


def _local_id(spec: str) -> str:
    """The dataset id of `minari:ID`, if it names a folder inside the local root (reading and writing alike)."""
    dataset_id = spec[len(PREFIX) :]
    if not dataset_id or dataset_id.startswith(("/", "~")) or ".." in Path(dataset_id).parts:
        raise DemoError(f"{spec}: a Minari dataset id is a name inside the local root, like hopper/expert-v0")
    return dataset_id


def resolve(spec: str | Path) -> Path:
    """`minari:ID` -> its data folder in the local root; a dataset folder -> its data folder."""
    text = str(spec)
    if text.startswith(PREFIX):
        path = fsutil.inside(root() / _local_id(text) / "data", root(), f"{text}: ")
        if not (path / "metadata.json").is_file():
            raise DemoError(
                f"{text}: no such dataset in the local Minari root {root()} (gailkit reads offline: "
                "copy the dataset there, or pass its folder)"
            )
        return path
    path = Path(spec)
    return path / "data" if (path / "data" / "metadata.json").is_file() else path


def is_dataset(path: Path) -> bool:
    meta = resolve(path) / "metadata.json"
    if not meta.is_file():
        return False
    try:
        d = textparse.loads_json(fsutil.read_regular(meta, 16 << 20))
    except (OSError, ValueError, GailkitError):
        return False
    return isinstance(d, dict) and "data_format" in d and "observation_space" in d


def _metadata(data: Path) -> dict[str, Any]:
    try:
        meta = textparse.loads_json(fsutil.read_regular(data / "metadata.json", 16 << 20))
        obs_space = space_from_json(_json(meta["observation_space"]))
        act_space = space_from_json(_json(meta["action_space"]))
        spec = _json(meta.get("env_spec") or "null")
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DemoError(f"{data}: not a readable Minari dataset (metadata.json: {type(e).__name__}: {e})") from None
    if meta.get("jpeg_encoding") and any(len(sub.shape or ()) == 3 for sub in _entries(obs_space).values()):
        raise DemoError(
            f"{data}: JPEG-encoded image observations are not supported; write the dataset with jpeg_encoding=False"
        )
    env_id = spec.get("id") if isinstance(spec, dict) and isinstance(spec.get("id"), str) else None
    ref_max = meta.get("ref_max_score")  # Minari's reference for normalized scores: its expert policy's mean return
    if ref_max is not None and not (type(ref_max) in (int, float) and math.isfinite(ref_max)):
        raise DemoError(f"{data}: metadata.json: ref_max_score is not a finite number ({str(ref_max)[:40]})")
    ref_episodes = meta.get("num_episodes_average_score")
    return {
        "ref_max_score": ref_max,
        "ref_episodes": ref_episodes if type(ref_episodes) is int and ref_episodes > 0 else None,
        "format": meta.get("data_format"),
        "obs_space": obs_space,
        "act_space": act_space,
        "env_id": env_id,
        "dataset_id": meta.get("dataset_id"),
        "episodes": meta.get("total_episodes"),
    }


def _entries(space: Any) -> dict[str, Any]:
    """A Dict space's entries, or the space itself under ''."""
    return dict(space.spaces) if isinstance(getattr(space, "spaces", None), dict) else {"": space}


def _shaped(obs: np.ndarray, space: Any) -> np.ndarray:
    """Observations in the space's shape (Minari's Arrow storage keeps frames flat)."""
    shape = tuple(space.shape or ())
    if len(shape) > 1 and obs.ndim == 2 and obs.shape[1] == int(np.prod(shape)):
        return obs.reshape(len(obs), *shape)
    return obs


def peek_env_id(path: str | Path) -> str | None:
    return _metadata(resolve(path))["env_id"]


def _json(value: Any) -> Any:
    return textparse.loads_json(value) if isinstance(value, str) else value


def read(path: str | Path) -> Demos:
    data = resolve(path)
    meta = _metadata(data)
    if meta["format"] == "hdf5":
        episodes = _read_hdf5(data)
    elif meta["format"] == "arrow":
        episodes = _read_arrow(data)
    else:
        raise DemoError(
            f"{data}: Minari storage {textparse.shown(meta['format'])} is not supported (hdf5 and arrow are)"
        )
    if not episodes:
        raise DemoError(f"{data}: a Minari dataset with no episodes")
    cols: dict[str, list] = {
        k: [] for k in ("obs", "acts", "next_obs", "terminated", "truncated", "rews", "episode_id", "step")
    }
    spaces = _entries(meta["obs_space"])
    for i, ep in enumerate(episodes):
        obs, n = ep["observations"], len(ep["actions"])
        if obs_tree.is_dict(obs) != ("" not in spaces) or (obs_tree.is_dict(obs) and set(obs) != set(spaces)):
            raise DemoError(f"{data}: episode {i}'s observations do not match the metadata's space {meta['obs_space']}")
        obs = {k: _shaped(obs[k], spaces[k]) for k in spaces} if obs_tree.is_dict(obs) else _shaped(obs, spaces[""])
        if obs_tree.length(obs) != n + 1:
            raise DemoError(
                f"{data}: episode {i} has {obs_tree.length(obs)} observations for {n} actions (Minari stores T + 1)"
            )
        cols["obs"].append(obs_tree.take(obs, slice(None, -1)))
        cols["next_obs"].append(obs_tree.take(obs, slice(1, None)))
        cols["acts"].append(ep["actions"])
        for key, name in (("terminated", "terminations"), ("truncated", "truncations"), ("rews", "rewards")):
            cols[key].append(np.asarray(ep[name]))
        cols["episode_id"].append(np.full(n, i, np.int64))
        cols["step"].append(np.arange(n, dtype=np.int64))
    out = {k: obs_tree.concat(v) for k, v in cols.items()}
    dm = DemoMeta(
        env_id=meta["env_id"],
        observation_space=space_to_json(meta["obs_space"]),
        action_space=space_to_json(meta["act_space"]),
        source=f"minari:{meta['dataset_id']}",
        format=f"minari-{meta['format']}",
        path=str(path),
    )
    if meta["ref_max_score"] is not None:
        dm.expert_return, dm.expert_episodes = float(meta["ref_max_score"]), meta["ref_episodes"]
        dm.expert_return_of = "the dataset's ref_max_score"
    return Demos(
        obs=out["obs"],
        acts=out["acts"],
        next_obs=out["next_obs"],
        terminated=out["terminated"].astype(bool),
        truncated=out["truncated"].astype(bool),
        episode_id=out["episode_id"],
        step=out["step"],
        rews=out["rews"].astype(np.float32),
        meta=dm,
    )


def write(demos: Demos, spec: str, data_format: str = "hdf5") -> Path:
    """Write `demos` as the Minari dataset `minari:ID` in the local root, with minari's own writer."""
    try:
        import minari
        from minari.data_collector.episode_buffer import EpisodeBuffer
    except ImportError:
        raise DemoError("writing Minari datasets needs minari: pip install 'gailkit[minari]'") from None
    if demos.acts is None:
        raise DemoError("Minari datasets hold actions; these demos have none")
    dataset_id = _local_id(spec)
    from minari.dataset.minari_dataset import parse_dataset_id

    try:
        parse_dataset_id(dataset_id)
    except (ValueError, TypeError):  # minari raises TypeError for an id without a version
        raise DemoError(
            f"{spec}: not a Minari dataset id (NAMESPACE/NAME-vN or NAME-vN, e.g. hopper/expert-v0)"
        ) from None
    if demos.meta.observation_space is None or demos.meta.action_space is None:
        raise DemoError(f"{spec}: these demos name no spaces; Minari datasets need them")
    obs_space, act_space = space_from_json(demos.meta.observation_space), space_from_json(demos.meta.action_space)
    bounds = demos.episode_bounds()
    rews = demos.rews if demos.rews is not None else np.zeros(len(demos), np.float32)
    buffers = [
        EpisodeBuffer(
            id=i,
            observations=obs_tree.concat(
                [obs_tree.take(demos.obs, slice(a, b)), obs_tree.take(demos.next_obs, slice(b - 1, b))]
            ),
            actions=np.asarray(demos.acts[a:b]),
            rewards=np.asarray(rews[a:b], np.float64),
            terminations=np.asarray(demos.terminated[a:b]),
            truncations=np.asarray(demos.truncated[a:b]),
            infos={},
        )
        for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:]))
    ]
    if (root() / dataset_id).exists():
        raise DemoError(f"{spec}: already in the local Minari root {root()}; choose another id or remove it")
    import gymnasium as gym

    # Minari records an env by making it: registry ids only (callers import the project's envs/ first), no code.
    env = gym.spec(demos.meta.env_id) if demos.meta.env_id in gym.registry else None
    import inspect

    lossless = (
        {"jpeg_encoding": False}
        if "jpeg_encoding" in inspect.signature(minari.create_dataset_from_buffers).parameters
        else {}
    )
    try:
        minari.create_dataset_from_buffers(
            dataset_id,
            buffers,
            **lossless,  # frames as they are (minari's default JPEG encoding is lossy)
            env=env,
            observation_space=obs_space,
            action_space=act_space,
            algorithm_name=demos.meta.source or "gailkit",
            data_format=data_format,
            description=f"env {demos.meta.env_id}",
        )
    except BaseException as e:
        import shutil

        shutil.rmtree(root() / dataset_id, ignore_errors=True)  # nothing half-written stays in the root
        if isinstance(e, (ValueError, TypeError, OSError)):
            raise DemoError(f"{spec}: minari could not write it ({type(e).__name__}: {str(e)[:200]})") from None
        raise
    return root() / dataset_id / "data"
