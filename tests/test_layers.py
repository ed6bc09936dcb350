"""Imports point to lower layers only (the layer table of ARCHITECTURE.md), lazy imports included;
each heavy third-party library stays with the modules that own it."""

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "gailkit"

# Sub-packages, bottom to top: a module imports from a lower sub-package, or from its own one at a lower
# module layer (LAYERS). `rollout` and `algo` share a level, so neither imports the other: the actor side
# never sees the learner's code, and the learner never sees the transport.
SUBPACKAGES = {
    "gailkit": -1,  # the package's __init__: the version and the public names (lazily)
    "core": 0,
    "config": 1,
    "model": 2,
    "data": 3,
    "rollout": 4,
    "algo": 4,
    "inference": 4,  # onnxruntime and numpy only: importable without torch
    "run": 5,
    "tune": 6,
    "cli": 7,
    "__main__": 8,  # `python -m gailkit`: the CLI's entry point
}
LAYERS = {
    "gailkit": -9,
    "errors": -3,
    "fsutil": -2,
    "textparse": -2,  # JSON and YAML with their nesting bounded (json, and yaml when asked)
    "limits": -2,
    "expansion": -2,  # what a loaded pickle's shared references expand to (numpy only)
    "arrow_tensors": -1,
    "framestacks": -2,  # frame stacks held as frames and an index (numpy arrays or torch tensors; no torch import)
    "obs": -1,  # observation batches: an array or a dict of arrays
    "signing": -1,
    "fragments": 0,
    "config": 0,
    "spaces": -1,  # which spaces the networks take (gymnasium only)
    "encoders": 0,  # the encoder factory: torch and gymnasium only
    "policy": 1,
    "env_wrappers": 0,  # what every env is wrapped in (gymnasium's wrappers, Tuple as Dict)
    "envs": 1,
    "demos": 1,
    "experts": 2,
    "wire": 1,
    "actor": 2,
    "transport": 2,
    "fleet": 3,
    "discriminator": 1,
    "generator": 2,
    "learner": 3,
    "inference": 2,
    "checkpoint": 2,
    "metrics": 2,
    "rundir": 3,
    "cpu": 0,  # the learner's torch threads (os only)
    "video": 3,
    "session": 4,
    "evaluate": 4,
    "export": 4,
    "callbacks": 5,
    "tracking": 6,
    "train": 7,
    "api": 8,
    "tune": 7,
    "cli": 8,
}
ACTOR_SIDE_FORBIDDEN = {"demos"}  # the actor side reads no demo files (learner, generator, discriminator: by level)
FORBIDDEN = {m: ACTOR_SIDE_FORBIDDEN for m in ("actor", "transport", "fleet", "wire")}
THIRD_PARTY_OWNERS = {
    "zmq": {"transport"},
    "onnx": {"export", "inference"},  # inference: its reader only, to refuse a model naming other files before it runs
    "onnxruntime": {"inference"},
    "ray": {"fleet", "tune"},
    "stable_baselines3": {"generator", "policy", "experts"},
    "imitation": {"discriminator", "demos"},
    "optuna": {"tune"},
    "minari": {"demos"},
    "wandb": {"tracking"},
}
TOP_LEVEL = {"config", "inference", "tune", "cli"}  # modules and packages that are their own sub-package


def _module_of(path: Path) -> tuple[str, str]:
    """(sub-package, module) of a file: `run/train.py` -> (run, train), `model/policy/sb3_zip.py` -> (model, policy)."""
    parts = path.relative_to(PKG).parts
    if len(parts) == 1:
        name = parts[0].removesuffix(".py")
        return ("gailkit", "gailkit") if name == "__init__" else (name, name)
    if parts[0] in TOP_LEVEL:
        return parts[0], parts[0]
    name = parts[1].removesuffix(".py")
    return (parts[0], parts[0]) if name == "__init__" else (parts[0], name)


def _imports(path: Path):
    """(sub-package, module) of every gailkit import in a file, lazy ones included; third-party top names."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module in ("gailkit", *(f"gailkit.{s}" for s in SUBPACKAGES)):
                for a in node.names:
                    yield _target(f"{node.module}.{a.name}")
            else:
                yield _target(node.module)
        elif isinstance(node, ast.Import):
            yield from (_target(a.name) for a in node.names)


def _target(dotted: str) -> tuple[str, str]:
    parts = dotted.split(".")
    if parts[0] != "gailkit":
        return "", parts[0]
    if len(parts) == 1 or parts[1] not in SUBPACKAGES or parts[1] == "gailkit":
        return "gailkit", "gailkit"
    if parts[1] in TOP_LEVEL or len(parts) == 2 or parts[2] not in LAYERS:
        return parts[1], parts[1]
    return parts[1], parts[2]


def test_every_module_has_a_layer():
    seen = {_module_of(p) for p in PKG.rglob("*.py")}
    assert {s for s, _ in seen} <= set(SUBPACKAGES), seen
    assert {m for s, m in seen if m != s} <= set(LAYERS), {m for s, m in seen if m != s} - set(LAYERS)


def test_imports_follow_the_layers():
    problems = []
    for path in PKG.rglob("*.py"):
        sub, me = _module_of(path)
        where = path.relative_to(PKG)
        for other_sub, other in _imports(path):
            if other_sub == "":
                owners = THIRD_PARTY_OWNERS.get(other)
                if owners is not None and me not in owners:
                    problems.append(f"{where}: only {', '.join(sorted(owners))} may import {other}")
                continue
            if other_sub == "gailkit" or (other_sub, other) == (sub, me):
                continue  # the version and the public names; a package's own modules
            if other_sub != sub and SUBPACKAGES[other_sub] >= SUBPACKAGES[sub]:
                problems.append(f"{where}: {sub} (level {SUBPACKAGES[sub]}) imports {other_sub}.{other}")
            if other_sub == sub and other != sub and me != sub and LAYERS[other] >= LAYERS[me]:
                problems.append(
                    f"{where}: {sub}.{me} (layer {LAYERS[me]}) imports {sub}.{other} (layer {LAYERS[other]})"
                )
            if other in FORBIDDEN.get(me, ()):
                problems.append(f"{where}: {me} must not import {other}")
    assert not problems, "\n".join(problems)


def test_modules_stay_small():
    big = {str(p.relative_to(PKG)): n for p in PKG.rglob("*.py") if (n := len(p.read_text().splitlines())) > 300}
    assert not big, big


def test_train_reads_top_to_bottom_in_about_fifty_lines():
    tree = ast.parse((PKG / "run" / "train.py").read_text())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "train")
    assert fn.end_lineno - fn.lineno + 1 <= 60


def test_one_function_reads_checkpoints():
    """torch.load appears once in the package: checkpoint.load (SB3 zips' weights aside, read in policy)."""
    users = {
        str(p.relative_to(PKG))
        for p in PKG.rglob("*.py")
        if "th.load(" in p.read_text() or "torch.load(" in p.read_text()
    }
    assert users == {"run/checkpoint.py", "model/policy/sb3_zip.py"}, users
    assert (PKG / "run" / "checkpoint.py").read_text().count("th.load(") == 1


def test_every_package_folder_is_installed_and_envs_is_not_top_level():
    import re

    text = (PKG.parent / "pyproject.toml").read_text()
    listed = set(re.findall(r'"(gailkit[\w.]*)"', re.search(r"^packages = \[(.*?)\]", text, re.M | re.S).group(1)))
    folders = {".".join(p.parent.relative_to(PKG.parent).parts) for p in PKG.rglob("__init__.py")}
    assert folders | {"gailkit_envs"} == listed, listed ^ (folders | {"gailkit_envs"})
    assert '"gailkit_envs" = "envs"' in text and '"envs"' not in text.replace('= "envs"', "")
