"""`gailkit train`: build a run, loop GAIL rounds (collect and learn, evaluate when due), and around
them run the callbacks (`gailkit.run.callbacks`: checkpoints, best, metrics, progress, and the caller's
own); the fleet stops in `finally`.

SIGINT and SIGTERM both ask the run to stop: it finishes the round under way (or stops waiting
for fragments), saves a checkpoint and returns; a second signal stops at once, keeping the
checkpoints already written.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gailkit import config
from gailkit.config import TrainConfig
from gailkit.data import experts
from gailkit.rollout.fleet import FleetError, Interrupted
from gailkit.run import tracking
from gailkit.run.callbacks import Callback, CallbackList, built_in
from gailkit.run.rundir import RunDir
from gailkit.run.session import Run


def train_config(
    env_id: str | None, demos_path: str | None, config_file: str | None, overrides: list[str], preset: str | None = None
) -> TrainConfig:
    """Defaults, then the env's `experts/*.gail.yaml`, then a preset, then `config_file`, then flags and `--set`.

    Files never open a door (`config.DOORS`: only flags and `--set` do)."""
    return config.build(TrainConfig, train_layers(env_id, demos_path, config_file, preset), overrides)


def train_layers(
    env_id: str | None, demos_path: str | None, config_file: str | None, preset: str | None = None
) -> list[tuple[str, dict]]:
    """The `(source, settings)` layers of `train_config`, in the order they apply."""
    layers: list[tuple[str, dict]] = []
    file_data = config.read_settings(config_file) if config_file else {}
    env_id = env_id or (file_data.get("env") or {}).get("id")
    if env_id:
        found = experts.find_settings(env_id, "gail")
        if found is not None:
            layers.append((str(found), config.read_settings(found)))
    if preset:
        layers.append((f"--preset {preset}", config.preset(preset)))
    if config_file:
        layers.append((config_file, file_data))
    flags: dict[str, Any] = {}
    if env_id:
        flags["env"] = {"id": env_id}
    if demos_path:
        flags["demos"] = demos_path
    layers.append(("flags", flags))
    return layers


def train(
    cfg: TrainConfig,
    run_dir: str | Path,
    resume: bool = False,
    quiet: bool = False,
    log: Callable[[str], None] = print,
    allow_code: bool = True,
    callbacks: Sequence[Callback] = (),
) -> dict[str, Any]:
    """Train GAIL per `cfg` into `run_dir`; with `resume`, continue from its newest usable checkpoint.
    `callbacks` run after the built-in ones (`callbacks.built_in`: checkpoints, best, metrics, progress)."""
    stop = StopSignals()
    trackers = tracking.trackers(cfg)  # checked before anything is written
    run = Run.prepare(cfg, RunDir(run_dir), resume, log, allow_code, stop.event)
    cbs = CallbackList([*built_in(quiet, log), *trackers, *callbacks])
    interrupted = False
    with stop:
        try:
            run.start(fleet=resume)  # a new run starts its fleet after the BC warm start (Run.start)
            cbs.on_start(run)
            if not resume:
                cbs.on_bc(run, run.behaviour_clone())
                run.start_fleet()
            while run.learner.env_steps < run.target_steps:
                if stop.event.is_set():
                    raise Interrupted()
                stats = run.collect_and_learn()
                evaluated, best = run.evaluate(stats)
                cbs.on_round(run, stats)
                if evaluated:
                    cbs.on_eval(run, stats)
                if best:
                    cbs.on_best(run, stats)
        except Interrupted:
            interrupted = True
            log(f"interrupted at round {run.learner.version}: saving a checkpoint")
        except FleetError as e:
            if resume or run.learner.version:
                raise FleetError(
                    f"{e}; checkpoint {run.save()} saved, continue with gailkit train --resume {run_dir}"
                ) from None
            run.dir.remove()
            raise
        except BaseException:
            if not resume and run.learner.version == 0:
                run.dir.remove()  # a start that failed leaves no run folder
            raise
        finally:
            try:
                cbs.close()
            finally:
                run.stop()
    run.save()
    if not interrupted:
        run.save("final")
    summary = run.summary(interrupted)
    cbs.on_end(run, summary)
    return summary


class StopSignals:
    """SIGINT/SIGTERM set `event` (stop after this round, with a checkpoint); a second raises KeyboardInterrupt."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.event = threading.Event()
        self._old: dict[int, Any] = {}

    def _handle(self, signum, frame) -> None:
        if self.event.is_set():
            raise KeyboardInterrupt
        self.event.set()

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            self._old = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self._old.items():
            signal.signal(s, handler)
