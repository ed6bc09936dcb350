"""Saving and loading a run's whole state, atomically, as a torch file of plain containers and tensors.

Loaded with `torch.load(weights_only=True)`: a checkpoint cannot run code when read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch as th

from gailkit import fsutil
from gailkit.errors import GailkitError

FORMAT = 1


class CheckpointError(GailkitError):
    """A checkpoint is missing, unreadable, or from an incompatible version."""


def save(path: str | Path, state: dict[str, Any]) -> Path:
    path = Path(path)
    with fsutil.atomic_path(path) as tmp:
        th.save({"format": FORMAT, **state}, tmp)
    return path


def load(path: str | Path, device: str | th.device = "cpu") -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint")
    try:
        state = th.load(path, map_location=device, weights_only=True)
    except Exception as e:  # torch raises assorted errors for truncated or foreign files
        raise CheckpointError(f"{path}: not a readable gailkit checkpoint ({type(e).__name__}: {str(e).splitlines()[0]})") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a gailkit checkpoint of format {FORMAT}")
    return state


def latest(run_dir: str | Path) -> Path:
    """The newest checkpoint of a run (`checkpoints/round_*.pt`)."""
    found = sorted(Path(run_dir, "checkpoints").glob("round_*.pt"))
    if not found:
        raise CheckpointError(f"{run_dir}: no checkpoints/round_*.pt to resume from")
    return found[-1]


def resolve(path: str | Path, which: str = "final") -> Path:
    """A checkpoint file from a run directory (`final`, `best`, or `latest`) or a .pt path."""
    path = Path(path)
    if path.is_file():
        return path
    if not path.is_dir():
        raise CheckpointError(f"{path}: no such run directory or checkpoint file")
    if which == "latest":
        return latest(path)
    candidate = path / which / "checkpoint.pt"
    if candidate.is_file():
        return candidate
    return latest(path)  # an interrupted run has no final/: fall back to its newest checkpoint


def load_policy(path: str | Path, device: str = "cpu"):
    """`(policy, state)`: the trained policy of a checkpoint (eval mode) and the checkpoint's state."""
    from gailkit import config, demos, policy
    from gailkit.config import TrainConfig

    state = load(path, device)
    cfg = config.from_dict(TrainConfig, state["config"])
    obs_space = demos.space_from_json(state["spaces"]["observation"])
    act_space = demos.space_from_json(state["spaces"]["action"])
    pol = policy.build(obs_space, act_space, cfg.ppo, cfg.normalize_obs, device)
    pol.load_state_dict(state["generator"]["policy"])
    pol.set_training_mode(False)
    return pol, state
