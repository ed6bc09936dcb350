"""A run directory's layout, and every read and write of its checkpoints.

    config.yaml              the resolved settings
    metrics.csv              one row per round (`metrics.MetricsLog`)
    tensorboard/             the same scalars for TensorBoard
    checkpoints/round_*.pt   every `checkpoint_every` rounds and at the end; the newest KEEP kept
    best/checkpoint.pt       the best evaluation (highest return; lowest action error for envs
                             with a scripted expert)
    final/checkpoint.pt      the end of a run that was not interrupted
    plots/                   from `gailkit evaluate`

Every file is written atomically; `clean()` removes temp files whose writer died.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

from gailkit import config
from gailkit.config import TrainConfig
from gailkit.core import fsutil
from gailkit.core.errors import ConfigError
from gailkit.run import checkpoint
from gailkit.run.checkpoint import CheckpointError, RunState

KEEP = 3


class RunDir:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.created = False
        self.was_empty = False
        self._lock: int | None = None
        self.config = self.path / "config.yaml"
        self.metrics = self.path / "metrics.csv"
        self.tensorboard = self.path / "tensorboard"
        self.checkpoints = self.path / "checkpoints"
        self.plots = self.path / "plots"

    def __str__(self) -> str:
        return str(self.path)

    def slot(self, which: str) -> Path:
        """The checkpoint file of `best` or `final`."""
        return self.path / which / "checkpoint.pt"

    def is_run(self) -> bool:
        return self.config.is_file()

    def check_new(self) -> None:
        """A new run needs a new or empty folder: an existing one is never written into, nor removed."""
        if self.path.exists() and (not self.path.is_dir() or any(self.path.iterdir())):
            what = "a run" if self.is_run() else "not empty"
            raise ConfigError(
                f"--run-dir {self.path}: exists and is {what}; choose another folder"
                + (f" or continue it with --resume {self.path}" if self.is_run() else "")
            )

    def create(self, cfg: TrainConfig) -> None:
        self.check_new()
        self.created, self.was_empty = not self.path.exists(), self.path.is_dir()
        self.path.mkdir(parents=True, exist_ok=True)
        self.lock()
        config.save_yaml(cfg, self.config)

    def remove(self) -> None:
        """Undo a start that failed: remove the folder this process created, or empty the empty one it was given
        (so the same command can be run again)."""
        if self.created or self.was_empty:
            self.unlock()
            if self.created:
                shutil.rmtree(self.path, ignore_errors=True)
            else:
                for child in self.path.iterdir():
                    shutil.rmtree(
                        child, ignore_errors=True
                    ) if child.is_dir() and not child.is_symlink() else child.unlink()
            self.created = self.was_empty = False

    def lock(self) -> None:
        """Hold the run against a second writer (another `train` or `--resume` of it) until this process ends."""
        import fcntl

        if self._lock is not None:
            return
        fd = os.open(self.path / ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ConfigError(
                f"{self.path}: in use by another gailkit process (a run has one writer); wait for it "
                "to end, or stop it first"
            ) from None
        self._lock = fd

    def unlock(self) -> None:
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

    def check_own(self) -> None:
        """Every folder and file gailkit writes or removes in the run is its own: no link leads out of it."""
        for path in (
            self.config,
            self.metrics,
            self.tensorboard,
            self.checkpoints,
            self.plots,
            self.path / "best",
            self.path / "final",
            *self.round_checkpoints(),
            self.slot("best"),
            self.slot("final"),
        ):
            if path.is_symlink():
                raise ConfigError(
                    f"{path}: a link; gailkit writes and removes only inside the run folder, never through "
                    "links (replace it with a plain file or folder)"
                )

    def clean(self) -> list[Path]:
        """Remove temp files of atomic writes left by processes that are gone."""
        return fsutil.clean_stale(self.path)

    def save(self, state: RunState, which: str = "round") -> Path:
        """`round`: checkpoints/round_<n>.pt, keeping the newest KEEP; `best` or `final`: their slot."""
        self.check_own()
        if which == "round":
            path = checkpoint.save(self.checkpoints / f"round_{state.round:06d}.pt", state)
            for old in self.round_checkpoints()[:-KEEP]:
                old.unlink(missing_ok=True)
            return path
        return checkpoint.save(self.slot(which), state)

    def round_checkpoints(self) -> list[Path]:
        if self.checkpoints.is_symlink():
            return []  # never read, rotated or deleted through a link (`check_own` refuses such a run)
        return sorted(p for p in self.checkpoints.glob("round_*.pt") if not p.is_symlink())

    def latest(self, device: str = "cpu", log: Callable[[str], None] = print) -> tuple[RunState, Path]:
        """The newest readable round checkpoint; unreadable newer ones are skipped, and said so."""
        return next(self.readable(device, log))

    def readable(self, device: str = "cpu", log: Callable[[str], None] = print) -> Iterator[tuple[RunState, Path]]:
        """Readable round checkpoints, newest first (a caller that cannot use one takes the next); unreadable ones
        are skipped and said so; none at all is a CheckpointError."""
        self.check_own()
        found = self.round_checkpoints()
        if not found:
            raise CheckpointError(f"{self.path}: no checkpoints/round_*.pt to resume from")
        problems = []
        for path in reversed(found):
            try:
                state = checkpoint.load(path, device)
            except CheckpointError as e:
                problems.append(str(e))
                continue
            for problem in problems:
                log(f"gailkit: warning: skipped {problem}")
            problems = []
            yield state, path
        raise CheckpointError(f"{self.path}: no usable checkpoint ({'; '.join(problems) or 'none left'})")

    def find(self, which: str) -> Path:
        """The checkpoint file for `best`, `final` or `latest`; best and final fall back to the newest."""
        if which in ("best", "final") and self.slot(which).is_file():
            return self.slot(which)
        found = self.round_checkpoints()
        if not found:
            raise CheckpointError(f"{self.path}: no {which}/checkpoint.pt and no checkpoints/round_*.pt")
        return found[-1]


def resolve(source: str | Path, which: str = "best") -> Path:
    """A checkpoint file from a run directory (`best`, `final`, `latest`) or a .pt path."""
    source = Path(source)
    if source.is_file():
        return source
    if not source.is_dir():
        raise CheckpointError(f"{source}: no such run directory or checkpoint file")
    return RunDir(source).find(which)
