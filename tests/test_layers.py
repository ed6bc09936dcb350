"""Imports point to lower layers only (the module table of the design notes), lazy imports included."""

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "gailkit"

LAYERS = {
    "gailkit": -1, "errors": -1, "fsutil": -1, "arrow_tensors": -1,  # below layer 0: the version, user errors, atomic writes
    "config": 0, "fragments": 0,
    "envs": 1, "demos": 1, "policy": 1, "wire": 1, "discriminator": 1,
    # inference sits at layer 2 (the design table says 3): it depends on nothing of gailkit but its
    # error type, and export's parity check and evaluate's --onnx both need it.
    "actor": 2, "generator": 2, "transport": 2, "checkpoint": 2, "experts": 2, "inference": 2,
    "fleet": 3, "learner": 3, "evaluate": 3, "export": 3,
    "train": 4,
    "cli": 5,
}
ACTOR_SIDE_FORBIDDEN = {"learner", "generator", "discriminator", "demos"}
FORBIDDEN = {m: ACTOR_SIDE_FORBIDDEN for m in ("actor", "transport", "fleet")} | {"learner": {"transport"}}
THIRD_PARTY_OWNER = {"zmq": "transport", "onnx": "export", "onnxruntime": "inference", "ray": "fleet"}


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
            owner = THIRD_PARTY_OWNER.get(parts[0])
            if owner is not None and owner != me:
                problems.append(f"{path.name}: only {owner} may import {parts[0]}")
    assert not problems, "\n".join(problems)


def test_modules_stay_small():
    big = {p.name: n for p in PKG.rglob("*.py") if (n := len(p.read_text().splitlines())) > 400}
    assert not big, big
