"""`gailkit train`: build a run, loop GAIL rounds, and after each round run the hooks
(evaluate, checkpoint, metrics, progress); the fleet stops in `finally`.

SIGINT and SIGTERM both ask the run to stop: it finishes the round under way (or stops waiting
for fragments), saves a checkpoint and returns; a second signal stops at once, keeping the
checkpoints already written.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gailkit import config, envs, experts, policy
from gailkit.config import TrainConfig
from gailkit.fleet import FleetError, Interrupted
from gailkit.rundir import RunDir
from gailkit.session import Run


def train_config(env_id: str | None, demos_path: str | None, config_file: str | None, overrides: list[str],
                 preset: str | None = None) -> TrainConfig:
    """Defaults, then the env's `experts/*.gail.yaml`, then a preset, then `config_file`, then flags and `--set`.

    Files never open a door (`config.DOORS`: only flags and `--set` do)."""
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
    return config.build(TrainConfig, layers, overrides)


def train(cfg: TrainConfig, run_dir: str | Path, resume: bool = False, quiet: bool = False,
          log: Callable[[str], None] = print, allow_code: bool = True,
          on_eval: Callable[[int, dict[str, float]], None] | None = None) -> dict[str, Any]:
    """Train GAIL per `cfg` into `run_dir`; with `resume`, continue from its newest readable checkpoint.
    `on_eval(env_steps, eval_stats)` is called after every evaluation (gailkit tune reports them)."""
    stop = StopSignals()
    folder = RunDir(run_dir)
    try:
        run = Run.prepare(cfg, folder, resume, log, allow_code, stop.event)
    except BaseException:
        folder.unlock()
        raise
    hooks = [Evaluate(run, on_eval), Checkpoints(run), Metrics(run), Progress(run, quiet, log)]
    interrupted = False
    with stop:
        try:
            run.start()
            for hook in hooks:
                hook.start()
            if not resume:
                hooks[-1].bc(run.learner.behaviour_clone())
            while run.learner.env_steps < run.target_steps:
                if stop.event.is_set():
                    raise Interrupted()
                t0 = time.perf_counter()
                frags = run.fleet.collect(run.learner.weights(), cfg.ppo.n_steps)
                stats = {"time/collect_s": time.perf_counter() - t0, **run.fleet.stats, **run.learner.round(frags)}
                stats["time/round_s"] = time.perf_counter() - t0
                for hook in hooks:
                    hook.after_round(stats)
        except Interrupted:
            interrupted = True
            log(f"interrupted at round {run.learner.version}: saving a checkpoint")
        except FleetError as e:
            if resume or run.learner.version:
                raise FleetError(f"{e}; checkpoint {run.save()} saved, continue with gailkit train --resume {run_dir}") from None
            run.dir.remove()
            raise
        except BaseException:
            if not resume and run.learner.version == 0:
                run.dir.remove()  # a start that failed leaves no run folder
            raise
        finally:
            for hook in hooks:
                hook.close()
            run.stop()
    run.save()
    if not interrupted:
        run.save("final")
    return hooks[0].summary(interrupted)


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


class Hook:
    def __init__(self, run: Run):
        self.run, self.cfg = run, run.cfg
        self.last: dict[str, float] = {}

    def start(self) -> None: ...

    def after_round(self, stats: dict[str, float]) -> None: ...

    def close(self) -> None: ...

    def due(self, setting: int, auto_count: int) -> bool:
        version, done = self.run.learner.version, self.run.learner.env_steps >= self.run.target_steps
        every = self.cfg.every(setting, auto_count)
        return done or (every > 0 and version % every == 0)


class Evaluate(Hook):
    """Deterministic episodes on fixed seeds every `eval_every` rounds and at the end; keeps `best/`."""

    def __init__(self, run: Run, on_eval: Callable[[int, dict[str, float]], None] | None = None):
        super().__init__(run)
        self.on_eval = on_eval

    def start(self) -> None:
        scripted = envs.scripted_experts(self.cfg.env.id).get("scripted")
        self.expert_action = scripted(None) if scripted is not None else None
        self.t_start, self.steps_start = time.perf_counter(), self.run.learner.env_steps

    def after_round(self, stats: dict[str, float]) -> None:
        if not self.due(self.cfg.eval_every, 25):
            return
        t0 = time.perf_counter()
        pol = self.run.learner.generator.policy
        pol.set_training_mode(False)
        out = envs.run_episodes(policy.deterministic_actor(pol), self.cfg.env, self.cfg.eval_episodes,
                                self.run.references.random_seed, self.expert_action)
        self.last = {f"eval/{k}": v for k, v in out.items() if k in ("return_mean", "return_std", "action_error")}
        normalized = self.run.references.normalized(out["return_mean"])
        if normalized is not None:
            self.last["eval/normalized"] = normalized
        stats.update(self.last, **{"time/eval_s": time.perf_counter() - t0})
        value = out.get("action_error") if self.run.best.metric == "action_error" else out["return_mean"]
        if self.run.best.beaten_by(value):
            self.run.best.value, self.run.best.round = value, self.run.learner.version
            self.run.save("best")
        if self.on_eval is not None:
            self.on_eval(self.run.learner.env_steps, self.last)

    def summary(self, interrupted: bool) -> dict[str, Any]:
        refs, learner = self.run.references, self.run.learner
        return {"run_dir": str(self.run.dir), "rounds": learner.version, "env_steps": learner.env_steps,
                "interrupted": interrupted, "expert_return": refs.expert_return, "expert_source": refs.expert_source,
                "random_return": refs.random_return, "reward_fn": self.run.reward_fn,
                "seconds": time.perf_counter() - self.t_start, "best": self.run.best.value, "best_round": self.run.best.round,
                **{k.split("/")[1]: v for k, v in self.last.items()}}


class Checkpoints(Hook):
    def after_round(self, stats: dict[str, float]) -> None:
        if self.due(self.cfg.checkpoint_every, 10):
            self.run.save()


class Metrics(Hook):
    """One metrics.csv row and TensorBoard scalars per round, with every stat the round produced."""

    def start(self) -> None:
        from gailkit.metrics import MetricsLog

        keep = self.run.learner.version if self.run.resume_from is not None else None
        self.log = MetricsLog(self.run.dir.metrics, self.run.dir.tensorboard, keep)
        self.t0, self.steps0 = time.perf_counter(), self.run.learner.env_steps

    def after_round(self, stats: dict[str, float]) -> None:
        learner = self.run.learner
        elapsed = time.perf_counter() - self.t0
        round_steps = self.cfg.round_steps
        stats.update({"round": learner.version, "env_steps": learner.env_steps, "time/elapsed_s": elapsed,
                      "time/fps": (learner.env_steps - self.steps0) / max(elapsed, 1e-9),
                      "time/collect_fps": round_steps / max(stats["time/collect_s"], 1e-9)})
        self.log.write(stats)

    def close(self) -> None:
        if hasattr(self, "log"):
            self.log.close()


class Progress(Hook):
    """The first line, a progress bar, one line per round (fps: env steps per second of the whole
    run, collection and learning; collect fps: per second of collection alone)."""

    def __init__(self, run: Run, quiet: bool, log: Callable[[str], None]):
        super().__init__(run)
        self.quiet, self.log, self.bar = quiet, log, None

    def start(self) -> None:
        run, refs, cfg = self.run, self.run.references, self.cfg
        expert = "unknown" if refs.expert_return is None else f"{refs.expert_return:.1f} ({refs.expert_source})"
        rounds = f"{cfg.total_rounds} rounds of {cfg.round_steps:,} env steps"
        if run.target_steps != cfg.total_steps:
            rounds += f" = {run.target_steps:,} (total_steps {cfg.total_steps:,} rounded up to whole rounds)"
        self.log(f"gailkit train: {cfg.env.id}, {len(run.expert_demos):,} expert transitions "
                 f"({run.expert_demos.n_episodes} episodes), expert return {expert}, random return "
                 f"{refs.random_return:.1f}, reward {run.reward_fn}"
                 + ("" if run.expert_demos.has_actions else ", demos without actions: learning from observation with a "
                    "discriminator on (obs, next_obs)")
                 + f", device {run.device}, {rounds}, run {run.dir}"
                 + (f", resuming at round {run.learner.version}" if run.resume_from else ""))
        if not self.quiet:
            from tqdm import tqdm

            self.bar = tqdm(total=run.target_steps, initial=min(run.learner.env_steps, run.target_steps), unit="step",
                            dynamic_ncols=True, leave=False)

    def bc(self, stats: dict[str, float]) -> None:
        if stats:
            self.log(f"behaviour cloning: {self.cfg.bc.epochs} epochs over the demos, loss {stats['bc/loss_first']:.4f} "
                     f"-> {stats['bc/loss_last']:.4f}")

    def after_round(self, s: dict[str, float]) -> None:
        if self.bar is None:
            return
        self.bar.update(min(self.run.learner.env_steps, self.run.target_steps) - self.bar.n)
        self.bar.set_postfix(fps=f"{s['time/fps']:.0f}", acc_e=f"{s.get('disc/acc_expert', 0):.2f}",
                             acc_g=f"{s.get('disc/acc_gen', 0):.2f}")
        parts = [f"round {s['round']:>4}", f"steps {s['env_steps']:>9,}",
                 f"fps {s['time/fps']:6.0f} (collect {s['time/collect_fps']:6.0f})",
                 f"disc acc {s.get('disc/acc_expert', float('nan')):.2f}/{s.get('disc/acc_gen', float('nan')):.2f}"]
        if "rollout/ep_rew_mean" in s:
            parts.append(f"true return {s['rollout/ep_rew_mean']:8.1f}")
        if "eval/return_mean" in s:
            parts.append(f"eval {s['eval/return_mean']:8.1f}" + (f" ({s['eval/normalized']:.2f} of expert)"
                                                                  if "eval/normalized" in s else ""))
        if "eval/action_error" in s:
            parts.append(f"action error {s['eval/action_error']:.3f}")
        if "actors/live" in s:
            parts.append(f"actors {s['actors/live']:.0f} (restarts {s.get('actors/restarts', 0):.0f}, "
                         f"dropped {s.get('actors/dropped', 0):.0f})")
        self.bar.write(" | ".join(parts))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
