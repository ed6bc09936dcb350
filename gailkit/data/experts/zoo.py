"""rl-zoo3 log folders as experts: the model a folder holds, and the env pipeline its `config.yml` names.

rl-zoo3 saves a run's hyperparameters as `logs/ALGO/ENV_N/ENV/config.yml`, a YAML dump of an
OrderedDict (a `!!python/object/apply:collections.OrderedDict` tag). It is read with PyYAML's safe
loader plus a constructor for that one tag that builds a plain dict from the pairs: no other tag is
accepted and nothing is imported or called. What gailkit takes from it: `frame_stack` (the expert saw
that many stacked frames) and an `env_wrapper` naming SB3's `AtariWrapper` (84x84 gray frames, 4
console frames a step: gailkit's `env.preprocess: atari`)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from gailkit.core import fsutil, textparse
from gailkit.core.errors import ExpertError, first_line

_ORDERED_DICT = "tag:yaml.org,2002:python/object/apply:collections.OrderedDict"


class _ZooLoader(yaml.SafeLoader):
    """The safe loader and rl-zoo3's OrderedDict tag, read as a dict of its pairs."""


def _ordered_dict(loader: yaml.SafeLoader, node: yaml.Node) -> dict:
    args = loader.construct_sequence(node, deep=True) if isinstance(node, yaml.SequenceNode) else []
    pairs = args[0] if len(args) == 1 and isinstance(args[0], list) else []
    if not all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) for p in pairs):
        raise yaml.constructor.ConstructorError(
            None, None, "an OrderedDict that is not a list of pairs", node.start_mark
        )
    return dict(pairs)


_ZooLoader.add_constructor(_ORDERED_DICT, _ordered_dict)


def model(folder: Path) -> tuple[Path, str | None]:
    """An rl-zoo3 log folder's model and env: `logs/ppo/CartPole-v1_1/` holds `CartPole-v1.zip` (and
    `best_model.zip` with evaluation on); its VecNormalize statistics in `CartPole-v1/vecnormalize.pkl`."""
    env = re.sub(r"_\d+$", "", folder.name) or None
    for name in (f"{env}.zip", "best_model.zip"):
        if (folder / name).is_file():
            return folder / name, env
    zips = sorted(folder.glob("*.zip"))
    if len(zips) == 1:
        return zips[0], env
    raise ExpertError(
        f"--expert {folder}: a folder holding {env}.zip or best_model.zip (rl-zoo3's logs/ALGO/ENV_N/), "
        f"found {', '.join(z.name for z in zips) or 'no .zip'}"
    )


def hyperparams(path: Path) -> dict[str, Any]:
    """A `config.yml` as a dict; ExpertError naming it when it is not rl-zoo3's plain hyperparameters."""
    try:
        data = textparse.load_yaml(fsutil.read_regular(path, 1 << 20).decode(), _ZooLoader)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        why = getattr(e, "problem", None) or getattr(e, "strerror", None) or first_line(e)
        raise ExpertError(f"{path}: not rl-zoo3's hyperparameters ({why})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ExpertError(f"{path}: not rl-zoo3's hyperparameters (a {type(data).__name__}, not a mapping)")
    return data


def _wrapper_names(params: dict[str, Any]) -> list[str]:
    wrappers = params.get("env_wrapper")
    names = wrappers if isinstance(wrappers, list) else [wrappers]
    names = [next(iter(w)) if isinstance(w, dict) and w else w for w in names]
    return [w for w in names if isinstance(w, str)]


def unapplied_wrappers(params: dict[str, Any]) -> list[str]:
    """The `env_wrapper`s gailkit does not rebuild (all but SB3's AtariWrapper), e.g. sb3-contrib's
    TimeFeatureWrapper, which adds an observation entry: the expert then expects other observations."""
    return [w for w in _wrapper_names(params) if w.rsplit(".", 1)[-1] != "AtariWrapper"]


def pipeline(folder: Path) -> tuple[dict[str, Any], list[str]]:
    """What the folder's `ENV/config.yml` says of the env the expert saw: the `EnvConfig` fields it implies
    (`env_pipeline`) and the wrappers gailkit does not rebuild (`unapplied_wrappers`); nothing without one."""
    env = model(folder)[1]
    path = folder / (env or "") / "config.yml"
    params = hyperparams(path) if env and path.is_file() else {}
    return env_pipeline(params, path), unapplied_wrappers(params)


def env_pipeline(params: dict[str, Any], source: Path) -> dict[str, Any]:
    """The `EnvConfig` fields the hyperparameters imply: `preprocess` for SB3's AtariWrapper, `frame_stack`."""
    out: dict[str, Any] = {}
    if any(w.rsplit(".", 1)[-1] == "AtariWrapper" for w in _wrapper_names(params)):
        out["preprocess"] = "atari"
    stack = params.get("frame_stack")
    if stack not in (None, False):
        if isinstance(stack, bool) or not isinstance(stack, int) or not 1 <= stack <= 64:
            raise ExpertError(
                f"{source}: frame_stack {textparse.shown(stack)} is not a whole number of frames from 1 to 64"
            )
        out["frame_stack"] = stack
    return out
