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

import contextlib
import dataclasses
import math
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

from gailkit import config
from gailkit.core import fsutil, signing
from gailkit.run import metrics
from gailkit.config import TrainConfig
from gailkit.core.errors import ConfigError, first_line
from gailkit.tune.search import Search, check_resources, load_search, parse_space, read_space, tune_space

__all__ = ["Search", "check_resources", "load_search", "parse_space", "read_space", "run", "tune_space"]


def _trial(params: dict[str, Any], search: Search, out: str, allow_code: bool = False) -> None:
    """One Tune trial: `search.seeds` training runs of `search.budget` env steps with these settings.

    A trial restarted by `--resume` continues each seed's run from its newest checkpoint (a seed
    that finished is reported again from its metrics.csv, not retrained)."""
    from ray import tune

    from gailkit.run import train
    from gailkit.run.callbacks import Callback
    from gailkit.run.rundir import RunDir

    name = tune.get_context().get_trial_id()
    overrides = [f"{k}={v}" for k, v in params.items()]
    finished: list[float] = []
    state = {"steps": 0, "best": -math.inf}
    for k in range(search.seeds):
        cfg = config.build(TrainConfig, [("base", search.base)], [*overrides, f"total_steps={search.budget}",
                                                                  f"seed={search.base['seed'] + k}"])
        curve: list[float] = []

        def report(env_steps: int, stats: dict[str, float], curve=curve, k=k) -> None:
            value = _objective(stats)
            curve.append(value)
            state["best"] = max(state["best"], value)
            score = (sum(finished) + sum(curve) / len(curve)) / (len(finished) + 1)
            tune.report({"score": score, "normalized": value, "best": state["best"], "seed": k,
                         "env_steps": state["steps"] + env_steps})

        class Report(Callback):
            def on_eval(self, run, stats, report=report):
                report(run.learner.env_steps, stats)

        run_dir = RunDir(Path(out) / "runs" / name / f"seed{k}")
        resume = bool(run_dir.round_checkpoints())
        if resume or run_dir.slot("final").is_file():
            for row in metrics.read_rows(run_dir.metrics):  # what this seed reported before the search stopped
                stats = {key: float(v) for key, v in row.items() if key.startswith("eval/") and v not in ("", None)}
                if "eval/return_mean" in stats:
                    report(int(float(row["env_steps"])), stats)
        elif run_dir.path.exists():
            import shutil

            shutil.rmtree(run_dir.path)  # the trial's own folder, from a start that never reached a checkpoint
        if not run_dir.slot("final").is_file():
            train.train(cfg, run_dir.path, resume=resume, quiet=True, log=lambda m: None, callbacks=[Report()],
                        allow_code=allow_code)
        finished.append(sum(curve) / len(curve) if curve else -math.inf)
        state["steps"] += cfg.total_rounds * cfg.round_steps


def _objective(stats: dict[str, float]) -> float:
    """The normalized evaluation; minus the action error for envs judged against a scripted expert
    (where the return says nothing); the raw return when the expert's level is unknown."""
    if "eval/action_error" in stats:
        return -stats["eval/action_error"]
    return stats.get("eval/normalized", stats["eval/return_mean"])


def run(search: Search, out: Path, resume: bool = False, ray_address: str = "", log=print,
        allow_code: bool = False) -> list[dict[str, Any]]:
    """Run (or continue) the search into `out`; returns the trial rows also written to trials.csv.

    `allow_code`: the env may be code (`module:Class`), because the user typed it in this invocation.
    Ray's own state (`out/search/`, which Ray unpickles) is signed when the search stops and checked
    before `--resume` lets Ray read it (`gailkit.core.signing`). SIGTERM stops the search as SIGINT does."""
    import ray
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler

    out = out.resolve()
    searched, signature = out / "search", out / "search.sig"
    if resume:
        signing.verify(searched, signature)  # before Ray unpickles anything there
    os.environ.setdefault("RAY_worker_niceness", "0")  # trials are the workload, not background tasks
    os.environ.setdefault("RAY_CHDIR_TO_TRIAL_DIR", "0")
    if not ray.is_initialized():
        log(f"gailkit tune: starting Ray{' at ' + ray_address if ray_address else ' on this machine'}")
        from gailkit.rollout.fleet.ray_fleet import probe

        probe(ray_address)
        try:
            local: dict[str, Any] = {} if ray_address else {"num_cpus": os.cpu_count()}
            # no address: a Ray of its own on this machine ("local"), never a cluster that RAY_ADDRESS or Ray's
            # address file on this machine names (`--ray-address auto` joins that one)
            ray.init(address=ray_address or "local", include_dashboard=False, log_to_driver=False, configure_logging=False,
                     **local)
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise ConfigError(f"--ray-address {ray_address or '(local)'}: cannot start or reach Ray "
                              f"({first_line(e)})") from None
    have = ray.cluster_resources()
    for key, need in search.resources.items():
        if need > have.get(key.upper() if key == "gpu" else "CPU", 0.0) + 1e-9:
            raise ConfigError(f"--resources {key}={need:g}: the Ray cluster has {have.get('GPU' if key == 'gpu' else 'CPU', 0):g} "
                              "in all, so no trial could ever start")
    trainable = tune.with_resources(tune.with_parameters(_trial, search=search, out=str(out), allow_code=allow_code),
                                    search.resources)
    callbacks = [_progress(log, lambda: signing.sign(searched, signature))]
    if resume:
        tuner = tune.Tuner.restore(str(searched), trainable, resume_unfinished=True, resume_errored=False)
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
        tuner = tune.Tuner(trainable, param_space=tune_space(search),
                           tune_config=tune.TuneConfig(metric="score", mode="max", scheduler=scheduler, search_alg=searcher,
                                                       num_samples=1 if search.search == "grid" else search.trials),
                           run_config=tune.RunConfig(name="search", storage_path=str(out), verbose=0, callbacks=callbacks,
                                                     failure_config=tune.FailureConfig(max_failures=0)))
    with _sigterm_as_sigint():
        try:
            results = tuner.fit()
        finally:
            if searched.is_dir():
                signing.sign(searched, signature)
    return write_results(results, search, out)


@contextlib.contextmanager
def _sigterm_as_sigint():
    """SIGTERM asks Tune to stop as Ctrl-C does (it saves its state and returns); Ray's own handling of
    SIGTERM in the driver aborts with a stack dump."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGTERM, lambda signum, frame: os.kill(os.getpid(), signal.SIGINT))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _progress(log, sign):
    """A Tune callback printing one line per finished trial and signing Ray's state every 10 s (built
    here, so this module imports without Ray)."""
    from ray import tune

    class Progress(tune.Callback):
        done, signed = 0, time.monotonic()

        def on_step_end(self, iteration, trials, **info):
            if time.monotonic() - self.signed > 10:
                self.signed = time.monotonic()
                try:
                    sign()
                except (OSError, signing.SignatureError):
                    pass  # a file Ray is replacing right now: the next step, or the end, signs it

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
