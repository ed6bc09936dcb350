"""Demonstration files: discover, read (Arrow, Parquet, pickle, imitation datasets), validate, write.

demos.load("data/", env_id="CartPole-v1", spaces=(obs_space, act_space)) -> Demos;  demos.save(d, "data/x.parquet")
"""

from __future__ import annotations

import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np

from gailkit import __version__
from gailkit.config.envid import same_env
from gailkit.core import obs as obs_tree
from gailkit.core.errors import DemoError, GailkitError
from gailkit.data.demos import arrow_io, imitation_io, minari_io, pickle_io, stacks
from gailkit.data.demos.core import DemoMeta, Demos, concat, describe_space, space_from_json, space_to_json
from gailkit.data.demos.transform import expert_reference, strip_actions, subsample
from gailkit.data.demos.validate import DemoWarning, check, check_structure, fits, recorded_with_hint, validate

__all__ = [
    "subsample",
    "Demos",
    "DemoMeta",
    "DemoError",
    "DemoWarning",
    "load",
    "load_file",
    "discover",
    "save",
    "validate",
    "check",
    "summarize",
    "expert_reference",
    "strip_actions",
    "space_to_json",
    "space_from_json",
    "describe_space",
    "format_of",
]

SUFFIXES = {
    ".arrow": "arrow",
    ".feather": "arrow",
    ".ipc": "arrow",
    ".parquet": "parquet",
    ".pkl": "pickle",
    ".pickle": "pickle",
}


def format_of(path: Path) -> str | None:
    """`arrow`, `parquet`, `pickle`, `imitation-dataset`, `minari`, or None for files that are not demos."""
    if str(path).startswith(minari_io.PREFIX) or (path.is_dir() and minari_io.is_dataset(path)):
        return "minari"
    if imitation_io.is_imitation_dataset(path):
        return "imitation-dataset"
    return SUFFIXES.get(path.suffix.lower()) if path.is_file() else None


def discover(path: str | Path) -> list[Path]:
    """Demo files under `path` (a file, an imitation dataset folder, or a folder searched recursively)."""
    if str(path).startswith(minari_io.PREFIX):
        return [minari_io.resolve(path)]
    path = Path(path)
    if not path.exists():
        raise DemoError(f"{path}: no such file or folder")
    if path.is_file() or imitation_io.is_imitation_dataset(path) or minari_io.is_dataset(path):
        if format_of(path) is None:
            raise DemoError(
                f"{path}: unknown demo format (expected {', '.join(sorted(SUFFIXES))} or an imitation dataset folder)"
            )
        return [path]
    found: list[Path] = []
    for child in sorted(path.iterdir()):
        if child.name.startswith("."):
            continue  # temp files of atomic writes, hidden files
        if child.is_dir() and not imitation_io.is_imitation_dataset(child) and not minari_io.is_dataset(child):
            found.extend(discover(child))
        elif format_of(child) is not None:
            found.append(child)
    return found


def load_file(path: str | Path, unsafe_pickle: bool = False, columns: dict[str, str] | None = None) -> Demos:
    """One file (or imitation dataset folder), structurally checked but not against any env; `columns`
    names an Arrow or Parquet table's own columns (`arrow_io.read`)."""
    path = Path(path)
    fmt = format_of(path)
    if fmt is None:
        raise DemoError(f"{path}: unknown demo format")
    if columns and fmt not in ("arrow", "parquet"):
        raise DemoError(f"{path}: --columns names the columns of Arrow and Parquet tables, not of {fmt} files")
    try:
        if fmt == "pickle":
            d = pickle_io.read(path, unsafe=unsafe_pickle)
        elif fmt == "imitation-dataset":
            d = imitation_io.read_imitation_dataset(path)
        elif fmt == "minari":
            d = minari_io.read(path)
        else:
            d = arrow_io.read(path, fmt, columns)
        check_structure(d)
    except GailkitError:
        raise
    except Exception as e:  # noqa: BLE001 - a file is data: whatever a reader trips on, it is this file's fault
        raise DemoError(f"{path}: not a readable {fmt} file ({type(e).__name__}: {str(e).strip()[:200]})") from None
    return d


def _peek_env_id(path: Path, unsafe_pickle: bool) -> tuple[str | None, Demos | None]:
    """The env id a file names, reading only metadata where the format allows."""
    fmt = format_of(path)
    try:
        if fmt in ("arrow", "parquet"):
            return arrow_io.read_meta(path, fmt).env_id, None
        if fmt == "pickle":
            return pickle_io.peek_env_id(path), None
        if fmt == "minari":
            return minari_io.peek_env_id(path), None
    except GailkitError:
        raise
    except Exception as e:  # noqa: BLE001 - as in load_file: the file's fault, one line
        raise DemoError(f"{path}: not a readable {fmt} file ({type(e).__name__}: {str(e).strip()[:200]})") from None
    d = load_file(path, unsafe_pickle)
    return d.meta.env_id, d


def _time_limit_ends(d: Demos, env_id: str | None, time_limit: int = 0) -> Demos:
    """Demos whose ends came as `dones` alone: an episode ending exactly at the time limit (`time_limit`
    when given, else `max_episode_steps` of the env's registration) was cut, not terminated; one
    warning line says so."""
    if not d.meta.ends_from_dones or not len(d):
        return d
    import dataclasses

    spec = gym.spec(env_id) if env_id is not None and env_id in gym.registry else None
    limit = time_limit or getattr(spec, "max_episode_steps", None)
    ends = d.terminated | d.truncated
    cut = ends & (d.step + 1 == limit) if limit else np.zeros(len(d), bool)
    n_ends, n_cut = int(ends.sum()), int(cut.sum())
    how = (
        f"{n_cut} of {n_ends} ends at the time limit ({limit} steps) are read as truncations, the rest as terminations"
        if limit
        else f"all {n_ends} ends are read as terminations ({env_id or 'the env'} names no "
        "time limit); pass --time-limit-ends N, or write 'terminated' and 'truncated' to tell them apart"
    )
    warnings.warn(
        f"{d.meta.path}: episode ends come as 'dones' alone, which cannot tell a time limit from a termination: {how}",
        DemoWarning,
        stacklevel=2,
    )
    return dataclasses.replace(d, terminated=d.terminated & ~cut, truncated=d.truncated | cut)


def load(
    path: str | Path,
    env_id: str | None = None,
    spaces: tuple[gym.Space, gym.Space] | None = None,
    unsafe_pickle: bool = False,
    columns: dict[str, str] | None = None,
    merge: bool = False,
    time_limit: int = 0,
    frame_stack: int = 1,
) -> Demos:
    """All demos under `path` for `env_id`, validated against `spaces` (obs, act) when given.

    With `env_id`, a file is used when its metadata names that env; a file without an env id is
    used when its shapes fit `spaces`. When nothing is left, the error lists what `path` holds.
    With `frame_stack` K > 1 (`spaces[0]` then stacked), a file of single frames has its stacks
    rebuilt from its episodes (`stacks`).
    """
    files = discover(path)
    if not files:
        raise DemoError(f"{path}: no demo files ({', '.join(sorted(SUFFIXES))} or imitation dataset folders)")
    chosen: list[Demos] = []
    held: list[str] = []
    for f in files:
        try:
            file_env, d = _peek_env_id(f, unsafe_pickle)
            if env_id is not None and file_env is not None and not same_env(file_env, env_id):
                held.append(f"{f.name} ({file_env})")
                continue
            d = d if d is not None and not columns else load_file(f, unsafe_pickle, columns)
        except DemoError as e:
            if len(files) == 1:
                raise
            # a folder may hold other files too (an expert's vecnormalize.pkl, notes): skipped, said in one line
            warnings.warn(f"{f}: skipped, not readable as demos ({str(e).removeprefix(f'{f}: ')})", DemoWarning, 2)
            held.append(f"{f.name} (not demos)")
            continue
        frames = spaces is not None and frame_stack > 1 and stacks.is_frames(d, spaces[0])
        file_spaces = (stacks.frame_space(spaces[0]), spaces[1]) if frames and spaces is not None else spaces
        if env_id is not None and file_env is None and file_spaces is not None and not fits(d, *file_spaces):
            if len(files) == 1:
                validate(d, *file_spaces)  # raises with the exact mismatch
            acts = "none" if d.acts is None else d.acts.shape[1:]
            held.append(f"{f.name} (no env id; obs {obs_tree.shapes(d.obs, 1)}, acts {acts})")
            continue
        d = _time_limit_ends(d, env_id, time_limit)
        try:
            d = validate(d, *file_spaces) if file_spaces is not None else d
        except DemoError as e:  # a file of frames from a pipeline the run's env lacks: name its settings
            raise recorded_with_hint(e, d) from None
        chosen.append(stacks.rebuild(d, frame_stack, spaces[0]) if frames and spaces is not None else d)
    if not chosen:
        raise DemoError(f"{path}: no demos for {env_id}; it holds: {', '.join(held)}")
    first = chosen[0].meta
    meta = DemoMeta(
        env_id=env_id or first.env_id,
        observation_space=space_to_json(spaces[0]) if spaces else first.observation_space,
        action_space=space_to_json(spaces[1]) if spaces else first.action_space,
        source=first.source
        if len(chosen) == 1
        else ", ".join(sorted({c.meta.source for c in chosen if c.meta.source})) or None,
        gailkit_version=first.gailkit_version,
        format=first.format if len(chosen) == 1 else "mixed",
        path=str(path),
    )
    experts_seen = {
        (c.meta.expert_return, c.meta.expert_return_std, c.meta.expert_episodes, c.meta.expert_return_of)
        for c in chosen
    }
    if len(experts_seen) == 1:  # one expert policy behind every file: its return is the reference
        meta.expert_return, meta.expert_return_std, meta.expert_episodes, meta.expert_return_of = experts_seen.pop()
        meta.sampled = first.sampled if all(c.meta.sampled == first.sampled for c in chosen) else None
    else:
        returns = ", ".join(f"{Path(c.meta.path or '?').name} {c.meta.expert_return}" for c in chosen)
        if not merge:
            raise DemoError(
                f"{path}: holds demos of {len(chosen)} files from different experts (expert returns: {returns}); "
                "point --demos at one file, or pass --merge to learn from all of them as one"
            )
        warnings.warn(
            f"{path}: demos of {len(chosen)} files from different experts are merged (--merge; expert returns: "
            f"{returns}); no one expert's return is the reference, the demos' mean return is",
            DemoWarning,
            2,
        )
    return concat(chosen, meta)


def save(d: Demos, path: str | Path, pickle_layout: str = "dict", minari_format: str = "hdf5") -> Path:
    """Write `d` by the suffix of `path`; a path without a suffix becomes an imitation dataset folder,
    `minari:ID` a Minari dataset in the local Minari root."""
    path = Path(path)
    if d.meta.gailkit_version is None:
        d.meta.gailkit_version = __version__
    if str(path).startswith(minari_io.PREFIX):
        return minari_io.write(d, str(path), minari_format)
    suffix = path.suffix.lower()
    if suffix == "":
        from gailkit.data.demos import imitation_adapter

        imitation_adapter.write_dataset(d, path)
    elif SUFFIXES.get(suffix) in ("arrow", "parquet"):
        arrow_io.write(d, path, SUFFIXES[suffix])
    elif SUFFIXES.get(suffix) == "pickle":
        pickle_io.write(d, path, pickle_layout)
    else:
        raise DemoError(
            f"{path}: unknown output format '{suffix}' (use {', '.join(sorted(SUFFIXES))} or a folder name)"
        )
    return path


def summarize(d: Demos) -> dict:
    """Episodes, transitions, return and length statistics, spaces and env of `d`."""
    lengths = d.episode_lengths()
    returns = d.episode_returns()
    return {
        "path": d.meta.path,
        "format": d.meta.format,
        "env_id": d.meta.env_id,
        "source": d.meta.source,
        "episodes": d.n_episodes if d.whole_episodes() else None,  # loose transitions: no episodes
        "transitions": len(d),
        "return_mean": None if returns is None or not len(returns) else float(returns.mean()),
        "return_std": None if returns is None or not len(returns) else float(returns.std()),
        "expert_return": d.meta.expert_return,
        "length_mean": float(lengths.mean()) if len(lengths) else 0.0,
        "length_std": float(lengths.std()) if len(lengths) else 0.0,
        "observation_space": describe_space(d.meta.observation_space)
        if d.meta.observation_space
        else f"{obs_tree.shapes(d.obs, 1)} {obs_tree.tmap(lambda v: str(v.dtype), d.obs)} (no metadata)",
        "actions": d.acts is not None,
        "action_space": (
            "no actions"
            if d.acts is None
            else describe_space(d.meta.action_space)
            if d.meta.action_space
            else f"{tuple(d.acts.shape[1:])} {d.acts.dtype} (no metadata)"
        ),
    }
