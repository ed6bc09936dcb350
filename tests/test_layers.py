"""Imports point to lower layers only (the layer table of ARCHITECTURE.md), lazy imports included;
each heavy third-party library stays with the modules that own it."""

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "gailkit"

LAYERS = {
    "errors": -3,
    "fsutil": -2,
    "limits": -2,
    "gailkit": -1,
    "arrow_tensors": -1,  # below layer 0: the version, user errors, atomic writes
    "config": 0,
    "spaces": -1,  # which spaces the networks take (gymnasium only)
    "encoders": 0,  # the encoder factory: torch and gymnasium only
    "fragments": 0,
    "envs": 1,
    "demos": 1,
    "policy": 1,
    "wire": 1,
    "discriminator": 1,
    "actor": 2,
    "generator": 2,
    "transport": 2,
    "checkpoint": 2,
    "experts": 2,
    "inference": 2,
    "metrics": 2,
    "fleet": 3,
    "learner": 3,
    "rundir": 3,
    "session": 4,
    "evaluate": 4,
    "export": 4,
    "callbacks": 5,
    "train": 6,
    "tune": 7,
    "signing": -1,
    "cli": 8,
}
ACTOR_SIDE_FORBIDDEN = {"learner", "generator", "discriminator", "demos"}
FORBIDDEN = {m: ACTOR_SIDE_FORBIDDEN for m in ("actor", "transport", "fleet")} | {"learner": {"transport"}}
THIRD_PARTY_OWNERS = {
    "zmq": {"transport"},
    "onnx": {"export"},
    "onnxruntime": {"inference"},
    "ray": {"fleet", "tune"},
    "stable_baselines3": {"generator", "policy", "experts"},
    "imitation": {"discriminator", "demos"},
    "optuna": {"tune"},
    "minari": {"demos"},
}


def _module_of(path: Path) -> str:
    rel = path.relative_to(PKG)
    return "gailkit" if rel.name == "__init__.py" and len(rel.parts) == 1 else rel.parts[0].removesuffix(".py")


def _imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "gailkit":
                yield from (f"gailkit.{a.name}" for a in node.names)
            else:
                yield node.module
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names)


def test_every_module_has_a_layer():
    modules = {_module_of(p) for p in PKG.rglob("*.py")}
    assert modules <= set(LAYERS), modules - set(LAYERS)


def test_imports_follow_the_layers():
    problems = []
    for path in PKG.rglob("*.py"):
        me = _module_of(path)
        for name in _imports(path):
            parts = name.split(".")
            if parts[0] == "gailkit" and len(parts) > 1:
                other = parts[1]
                if other != me and other in LAYERS and name != "gailkit.__version__" and LAYERS[other] >= LAYERS[me]:
                    problems.append(f"{path.name}: {me} (layer {LAYERS[me]}) imports {other} (layer {LAYERS[other]})")
                if other in FORBIDDEN.get(me, ()):
                    problems.append(f"{path.name}: {me} must not import {other}")
            owners = THIRD_PARTY_OWNERS.get(parts[0])
            if owners is not None and me not in owners:
                problems.append(f"{path.name}: only {', '.join(sorted(owners))} may import {parts[0]}")
    assert not problems, "\n".join(problems)


def test_modules_stay_small():
    big = {str(p.relative_to(PKG)): n for p in PKG.rglob("*.py") if (n := len(p.read_text().splitlines())) > 300}
    assert not big, big


def test_train_reads_top_to_bottom_in_about_fifty_lines():
    tree = ast.parse((PKG / "train.py").read_text())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "train")
    assert fn.end_lineno - fn.lineno + 1 <= 60


def test_one_function_reads_checkpoints():
    """torch.load appears once in the package: checkpoint.load (SB3 zips' weights aside, read in policy)."""
    users = {
        str(p.relative_to(PKG))
        for p in PKG.rglob("*.py")
        if "th.load(" in p.read_text() or "torch.load(" in p.read_text()
    }
    assert users == {"checkpoint.py", "policy/sb3_zip.py"}, users
    assert (PKG / "checkpoint.py").read_text().count("th.load(") == 1


def test_every_package_folder_is_installed_and_envs_is_not_top_level():
    import re

    text = (PKG.parent / "pyproject.toml").read_text()
    listed = set(re.findall(r'"(gailkit[\w.]*)"', re.search(r"^packages = \[(.*?)\]", text, re.M | re.S).group(1)))
    folders = {".".join(p.parent.relative_to(PKG.parent).parts) for p in PKG.rglob("__init__.py")}
    assert folders | {"gailkit_envs"} == listed, listed ^ (folders | {"gailkit_envs"})
    assert '"gailkit_envs" = "envs"' in text and '"envs"' not in text.replace('= "envs"', "")
