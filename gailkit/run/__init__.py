"""A training run as a user sees it: its folder and lock (`rundir`), checkpoints (`checkpoint`), metrics,
the session that owns a run (`session`), callbacks, `train`, `evaluate` and `export`."""
