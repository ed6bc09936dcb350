"""`gailkit tune`: hyperparameter search for GAIL on Ray Tune, from one laptop to a cluster.

Each trial is an ordinary `gailkit train` run per seed (its own run directory under
`OUT/runs/<trial>/seed<k>`, config.yaml, metrics.csv, checkpoints) inside a Ray Tune trial,
reporting every evaluation to Tune. The objective, `score`, is the area under the normalized
learning curve: the mean of every evaluation's normalized score `(R - R_random) / (R_expert -
R_random)` so far, averaged over the trial's seeds. Why not the score at the budget: GAIL's last
evaluation is noisy (one lucky or unlucky round decides it), and a setting that reaches expert
level early and stays there is what users want; the area rewards both speed and stability, and it
is meaningful at every report, which ASHA needs to stop weak trials early (`env_steps` is its time
axis). Search: Tune's random search, grid search, or Optuna (`OptunaSearch`); all of Tune, ASHA and
Optuna are used as they are. Results: `trials.csv` (settings, score, best and last normalized
score, steps, seconds, status), `best.yaml` (the best trial's settings as `gailkit train --config`
takes them), `learning_curves.png`; `--resume OUT` continues an interrupted search.
"""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path
from typing import Any

from gailkit import config, fsutil, metrics
from gailkit.config import TrainConfig
from gailkit.errors import ConfigError

DISTRIBUTIONS = {"choice": 1, "uniform": 2, "loguniform": 2, "randint": 2, "grid": 1}


@dataclasses.dataclass
class Search:
    """What `gailkit tune` was asked for; saved as OUT/tune.yaml so `--resume` needs nothing else."""

    base: dict[str, Any]
    space: dict[str, dict[str, list]]
    trials: int = 8
    budget: int = 100_000
    seeds: int = 1
    scheduler: str = "asha"
    search: str = "random"
    resources: dict[str, float] = dataclasses.field(default_factory=lambda: {"cpu": 1.0, "gpu": 0.0})


def read_space(path: str | Path, base: TrainConfig) -> dict[str, dict[str, list]]:
    """`KEY: {DISTRIBUTION: ARGS}` per line of a YAML file; keys are settings as for `--set`."""
    data = config.read_yaml(path)
    if not data:
        raise ConfigError(f"{path}: no settings to search")
    out = {}
    for key, spec in data.items():
        if not isinstance(spec, dict) or len(spec) != 1:
            raise ConfigError(f"{path}: '{key}' must map one distribution to its arguments, e.g. {{loguniform: [1e-5, 1e-3]}}")
        (dist, args), = spec.items()
        args = args if isinstance(args, list) else [args]
        if dist not in DISTRIBUTIONS:
            raise ConfigError(f"{path}: '{key}': unknown distribution {dist!r} (known: {', '.join(DISTRIBUTIONS)})")
        if DISTRIBUTIONS[dist] == 2 and len(args) != 2:
            raise ConfigError(f"{path}: '{key}': {dist} takes [low, high], got {args!r}")
        if not args:
            raise ConfigError(f"{path}: '{key}': {dist} needs at least one value")
        for value in args if DISTRIBUTIONS[dist] == 1 else [args[0]]:  # every listed value must be a valid setting
            config.build(TrainConfig, [("base", config.to_dict(base))], [f"{key}={value}"])
        out[str(key)] = {dist: list(args)}
    return out


def _tune_space(search: Search) -> dict[str, Any]:
    from ray import tune

    make = {"choice": tune.choice, "grid": tune.grid_search, "uniform": lambda a: tune.uniform(*a),
            "loguniform": lambda a: tune.loguniform(*a), "randint": lambda a: tune.randint(a[0], a[1] + 1)}
    space = {}
    for key, spec in search.space.items():
        (dist, args), = spec.items()
        if search.search == "grid" and dist not in ("grid", "choice"):
            raise ConfigError(f"--search grid: '{key}' is {dist}; grid search takes grid or choice lists only")
        if search.search == "optuna" and dist == "grid":
            raise ConfigError(f"--search optuna: '{key}' is a grid; Optuna samples, use choice")
        space[key] = make["grid" if search.search == "grid" else dist](args)
    return space


def _trial(params: dict[str, Any], search: Search, out: str) -> None:
    """One Tune trial: `search.seeds` training runs of `search.budget` env steps with these settings."""
    from ray import tune

    from gailkit import train

    name = tune.get_context().get_trial_id()
    overrides = [f"{k}={v}" for k, v in params.items()]
    finished: list[float] = []
    state = {"steps": 0, "best": -math.inf}
    for k in range(search.seeds):
        cfg = config.build(TrainConfig, [("base", search.base)], [*overrides, f"total_steps={search.budget}",
                                                                  f"seed={search.base['seed'] + k}"])
        curve: list[float] = []

        def report(env_steps: int, stats: dict[str, float], curve=curve) -> None:
            value = _objective(stats)
            curve.append(value)
            state["best"] = max(state["best"], value)
            score = (sum(finished) + sum(curve) / len(curve)) / (len(finished) + 1)
            tune.report({"score": score, "normalized": value, "best": state["best"], "seed": k,
                         "env_steps": state["steps"] + env_steps})

        train.train(cfg, Path(out) / "runs" / name / f"seed{k}", quiet=True, log=lambda m: None, on_eval=report)
        finished.append(sum(curve) / len(curve))
        state["steps"] += cfg.total_rounds * cfg.round_steps


def _objective(stats: dict[str, float]) -> float:
    """The normalized evaluation; minus the action error for envs judged against a scripted expert
    (where the return says nothing); the raw return when the expert's level is unknown."""
    if "eval/action_error" in stats:
        return -stats["eval/action_error"]
    return stats.get("eval/normalized", stats["eval/return_mean"])


def run(search: Search, out: Path, resume: bool = False, ray_address: str = "", log=print) -> list[dict[str, Any]]:
    """Run (or continue) the search into `out`; returns the trial rows also written to trials.csv."""
    import ray
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler

    out = out.resolve()
    os.environ.setdefault("RAY_worker_niceness", "0")  # trials are the workload, not background tasks
    os.environ.setdefault("RAY_CHDIR_TO_TRIAL_DIR", "0")
    if not ray.is_initialized():
        ray.init(address=ray_address or None, include_dashboard=False, log_to_driver=False, configure_logging=False,
                 **({} if ray_address else {"num_cpus": os.cpu_count()}))
    trainable = tune.with_resources(tune.with_parameters(_trial, search=search, out=str(out)), search.resources)
    callbacks = [_progress(log)]
    if resume:
        tuner = tune.Tuner.restore(str(out / "search"), trainable, resume_unfinished=True, resume_errored=False)
    else:
        fsutil.atomic_write_text(out / "tune.yaml", _yaml(dataclasses.asdict(search)))
        scheduler = None
        if search.scheduler == "asha":
            max_t = search.budget * search.seeds
            scheduler = ASHAScheduler(time_attr="env_steps", max_t=max_t, grace_period=max(1, max_t // 8), reduction_factor=3)
        searcher = None
        if search.search == "optuna":
            from ray.tune.search.optuna import OptunaSearch

            searcher = OptunaSearch(seed=search.base["seed"])
        tuner = tune.Tuner(trainable, param_space=_tune_space(search),
                           tune_config=tune.TuneConfig(metric="score", mode="max", scheduler=scheduler, search_alg=searcher,
                                                       num_samples=1 if search.search == "grid" else search.trials),
                           run_config=tune.RunConfig(name="search", storage_path=str(out), verbose=0, callbacks=callbacks,
                                                     failure_config=tune.FailureConfig(max_failures=0)))
    results = tuner.fit()
    return write_results(results, search, out)


def _progress(log):
    """A Tune callback printing one line per finished trial (built here, so this module imports without Ray)."""
    from ray import tune

    class Progress(tune.Callback):
        done = 0

        def on_trial_complete(self, iteration, trials, trial, **info):
            self.done += 1
            r = trial.last_result or {}
            log(f"trial {trial.trial_id} done ({self.done} finished): score {r.get('score', float('nan')):.3f}, "
                f"best {r.get('best', float('nan')):.3f}, {r.get('env_steps', 0):,} env steps, {trial.config}")

        def on_trial_error(self, iteration, trials, trial, **info):
            self.done += 1
            log(f"trial {trial.trial_id} failed ({self.done} finished); the search goes on: {trial.config}")

    return Progress()


def write_results(results: Any, search: Search, out: Path) -> list[dict[str, Any]]:
    rows = []
    for r in results:
        m = r.metrics or {}
        params = {k: v for k, v in (r.config or {}).items()}
        stopped = m.get("env_steps", 0) < search.budget * search.seeds
        status = "error" if r.error else ("stopped early" if stopped else "complete")
        error = str(r.error).strip().splitlines()[-1][:200] if r.error else ""
        rows.append({**params, "score": m.get("score"), "best": m.get("best"), "last": m.get("normalized"),
                     "env_steps": m.get("env_steps", 0), "seconds": round(m.get("time_total_s", 0.0), 1), "status": status,
                     "error": error, "trial": m.get("trial_id") or _trial_id(r.path)})
    rows.sort(key=lambda row: -math.inf if row["score"] is None else row["score"], reverse=True)
    _write_csv(out / "trials.csv", rows)
    good = [row for row in rows if row["score"] is not None]
    if good:
        best = config.build(TrainConfig, [("base", search.base)], [f"{k}={good[0][k]}" for k in search.space])
        fsutil.atomic_write_text(out / "best.yaml", f"# gailkit tune: the best of {len(rows)} trials (trial {good[0]['trial']}, "
                                 f"score {good[0]['score']:.3f}, {search.seeds} seed(s) of {search.budget:,} env steps)\n"
                                 + _yaml(config.to_dict(best)))
    _plot(out, rows)
    return rows


def _trial_id(path: str | None) -> str:
    import re

    m = re.search(r"_trial_([0-9a-f]+_\d+)", path or "")
    return m.group(1) if m else ""


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    import csv
    import io

    buf = io.StringIO()
    if rows:
        writer = csv.DictWriter(buf, fieldnames=list(rows[0]), extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    fsutil.atomic_write_text(path, buf.getvalue())


def _yaml(data: Any) -> str:
    import yaml

    return yaml.safe_dump(data, sort_keys=False)


def _plot(out: Path, rows: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for row in rows:
        for run_dir in sorted((out / "runs" / row["trial"]).glob("seed*")) if row["trial"] else []:
            pts = [(int(r["env_steps"]), float(r.get("eval/normalized") or r["eval/return_mean"]))
                   for r in metrics.read_rows(run_dir / "metrics.csv") if r.get("eval/return_mean")]
            if pts:
                ax.plot(*zip(*pts), alpha=0.7, label=f"{row['trial']} {run_dir.name} ({row['status']})")
    ax.axhline(1.0, color="k", linestyle="--", label="expert")
    ax.set(xlabel="env steps", ylabel="normalized evaluation", title="gailkit tune: every trial's learning curve")
    ax.legend(fontsize=6)
    with fsutil.atomic_path(out / "learning_curves.png", suffix=".png") as tmp:
        fig.savefig(tmp, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
