"""Experiment trackers as callbacks: Weights & Biases (`--wandb PROJECT`, extra `gailkit[wandb]`).

The run's resolved settings become the W&B run's config, every round's stats (the same keys as
metrics.csv) are logged at its env-step count, and the summary at the end. The W&B run's id is
derived from the run folder, so `gailkit train --resume` continues the same W&B run. With
`WANDB_MODE=offline` everything is written under the run folder's `wandb/` and nothing leaves the
machine (`wandb sync` uploads it later). Which project a run reports to is a door (data leaves the
machine): it comes only from the flag typed now, never from a settings file (`config.DOORS`).
"""

from __future__ import annotations

import hashlib
import sys
from typing import Any

from gailkit.core.errors import GailkitError
from gailkit.run.callbacks import Callback
from gailkit.run.session import Run


def check_available() -> None:
    """One line, before anything is written, when the extra is missing."""
    try:
        import wandb  # noqa: F401
    except ImportError:
        raise GailkitError("--wandb needs Weights & Biases: pip install 'gailkit[wandb]'") from None


def trackers(cfg: Any) -> list[Callback]:
    """The trackers the settings ask for (`wandb`), each checked to be installed."""
    if not cfg.wandb:
        return []
    check_available()
    return [WandbLogger(cfg.wandb)]


class WandbLogger(Callback):
    def __init__(self, project: str) -> None:
        self.project = project
        self.wb: Any = None

    def on_start(self, run: Run) -> None:
        import wandb

        from gailkit import config

        path = run.dir.path.resolve()
        self.wb = wandb.init(
            project=self.project,
            name=path.name,
            id="gailkit-" + hashlib.sha256(str(path).encode()).hexdigest()[:16],
            resume="allow",
            dir=str(path),
            config=config.to_dict(run.cfg),
            reinit="finish_previous",
        )

    def on_round(self, run: Run, stats: dict[str, float]) -> None:
        self.wb.log({k: v for k, v in stats.items() if isinstance(v, (int, float))}, step=run.learner.env_steps)

    def on_end(self, run: Run, summary: dict[str, Any]) -> None:
        """After the final checkpoint (`close` has run by then): the summary, then the W&B run ends."""
        if self.wb is None:
            return
        for key, value in summary.items():
            if isinstance(value, (int, float, str)):
                self.wb.summary[key] = value
        self.wb.finish()
        self.wb = None

    def close(self) -> None:
        """On the way out of a failed run the W&B run ends marked failed; a run that ends well is
        finished by `on_end`, which comes after `close`."""
        if self.wb is not None and sys.exc_info()[0] is not None:
            self.wb.finish(exit_code=1)
            self.wb = None
