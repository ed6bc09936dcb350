"""Callbacks: what runs around `train()`'s rounds, after stable-baselines3's `BaseCallback`.

    class Report(Callback):
        def on_eval(self, run, stats):
            print(run.learner.env_steps, stats["eval/return_mean"])

    train(cfg, "runs/x", callbacks=[Report()])

The lifecycle, in order: `on_start(run)` once the fleet is up and the run folder exists;
`on_bc(run, stats)` after the behaviour-cloning warm start of a new run; per round
`on_round(run, stats)` (every stat of the round, evaluation included), then `on_eval(run, stats)`
when the round evaluated, then `on_best(run, stats)` when that evaluation is the best so far;
`on_end(run, summary)` after the last checkpoint; `close()` always, also when training failed.
`run` is the `session.Run` (settings, learner, fleet, references, `best`). The built-in ones that
every `train()` runs: `Checkpoints`, `BestCheckpoint`, `Metrics`, `Progress`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

from gailkit.run.session import Run


class Callback:
    def on_start(self, run: Run) -> None: ...

    def on_bc(self, run: Run, stats: dict[str, float]) -> None: ...

    def on_round(self, run: Run, stats: dict[str, float]) -> None: ...

    def on_eval(self, run: Run, stats: dict[str, float]) -> None: ...

    def on_best(self, run: Run, stats: dict[str, float]) -> None: ...

    def on_end(self, run: Run, summary: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


class CallbackList(Callback):
    """Calls each callback in order; `close` reaches every one even if one of them fails."""

    def __init__(self, callbacks: Iterable[Callback]):
        self.callbacks = list(callbacks)

    def _each(self, event: str, *args: Any) -> None:
        for c in self.callbacks:
            getattr(c, event)(*args)

    def on_start(self, run: Run) -> None:
        self._each("on_start", run)

    def on_bc(self, run: Run, stats: dict[str, float]) -> None:
        self._each("on_bc", run, stats)

    def on_round(self, run: Run, stats: dict[str, float]) -> None:
        self._each("on_round", run, stats)

    def on_eval(self, run: Run, stats: dict[str, float]) -> None:
        self._each("on_eval", run, stats)

    def on_best(self, run: Run, stats: dict[str, float]) -> None:
        self._each("on_best", run, stats)

    def on_end(self, run: Run, summary: dict[str, Any]) -> None:
        self._each("on_end", run, summary)

    def close(self) -> None:
        errors = []
        for c in self.callbacks:
            try:
                c.close()
            except Exception as e:  # noqa: BLE001 - the others still close; the first error is raised after
                errors.append(e)
        if errors:
            raise errors[0]


class Checkpoints(Callback):
    """checkpoints/round_*.pt every `checkpoint_every` rounds and at the end."""

    def on_round(self, run: Run, stats: dict[str, float]) -> None:
        if run.due(run.cfg.checkpoint_every, 10):
            run.save()


class BestCheckpoint(Callback):
    """best/checkpoint.pt whenever an evaluation beats the best so far."""

    def on_best(self, run: Run, stats: dict[str, float]) -> None:
        run.save("best")


class Metrics(Callback):
    """One metrics.csv row and TensorBoard scalars per round, with every stat the round produced."""

    def __init__(self) -> None:
        self.log: Any = None  # a metrics.MetricsLog once started

    def on_start(self, run: Run) -> None:
        from gailkit.run.metrics import MetricsLog

        keep = run.learner.version if run.resume_from is not None else None
        self.log = MetricsLog(run.dir.metrics, run.dir.tensorboard, keep)
        self.t0, self.steps0, self.bytes = time.perf_counter(), run.learner.env_steps, 0.0

    def on_round(self, run: Run, stats: dict[str, float]) -> None:
        learner = run.learner
        elapsed = time.perf_counter() - self.t0
        stats.update(
            {
                "round": learner.version,
                "env_steps": learner.env_steps,
                "time/elapsed_s": elapsed,
                "time/fps": (learner.env_steps - self.steps0) / max(elapsed, 1e-9),
                "time/collect_fps": run.cfg.round_steps / max(stats["time/collect_s"], 1e-9),
            }
        )
        self.bytes += stats.get("data/round_bytes", 0.0)
        stats["time/bytes_per_s"] = self.bytes / max(elapsed, 1e-9)  # the seed's measure: data learned per second
        assert self.log is not None
        self.log.write(stats)

    def close(self) -> None:
        if self.log is not None:
            self.log.close()


class Progress(Callback):
    """The first line, then per round: on a terminal, a progress bar and one line per round; in a log
    (output piped to a file), plain lines only: every evaluation round, about 50 others spread over
    the run, and at least one every `every_s` seconds. `quiet`: the first line only. (fps: env steps
    per second of the whole run, collection and learning; collect fps: of collection alone.)"""

    def __init__(
        self, quiet: bool = False, log: Callable[[str], None] = print, tty: bool | None = None, every_s: float = 30.0
    ):
        self.quiet, self.log, self.bar, self.every_s = quiet, log, None, every_s
        self.tty = sys.stderr.isatty() if tty is None else tty
        self.last_line = time.monotonic()

    def on_start(self, run: Run) -> None:
        refs, cfg, d = run.references, run.cfg, run.expert_demos
        why = "the demos carry no rewards" if d.rews is None else "loose transitions carry no episode return"
        expert = (
            f"unknown ({why}; pass --expert-return; scores stay raw)"
            if refs.expert_return is None
            else f"{refs.expert_return:.1f} ({refs.expert_source})"
        )
        episodes = f"{d.n_episodes} episodes" if d.whole_episodes() else "no whole episodes"
        rounds = f"{cfg.total_rounds} rounds of {cfg.round_steps:,} env steps"
        if run.target_steps != cfg.total_steps:
            rounds += f" = {run.target_steps:,} (total_steps {cfg.total_steps:,} rounded up to whole rounds)"
        self.log(
            f"gailkit train: {cfg.env.id}, {len(run.expert_demos):,} expert transitions "
            f"({episodes}), {cfg.generator}, expert return {expert}, random return "
            f"{refs.random_return:.1f}, reward {run.reward_fn}"
            + (
                ""
                if run.expert_demos.has_actions
                else ", demos without actions: learning from observation with a discriminator on (obs, next_obs)"
            )
            + f", device {run.device}, {rounds}, run {run.dir}"
            + (f", resuming at round {run.learner.version}" if run.resume_from else "")
        )
        replay = getattr(run.learner.generator, "replay", None)
        if replay is not None and replay.capacity < replay.wanted:
            self.log(
                f"replay: {replay.capacity:,} transitions ({replay.bytes / 1e6:,.0f} MB), sac.buffer_size "
                f"{replay.wanted:,} cut to the memory budget (GAILKIT_MEMORY_BUDGET sets it)"
            )
        self.every_rounds = max(1, cfg.total_rounds // 50)
        self.last_line = time.monotonic()
        if not self.quiet and self.tty:
            from tqdm import tqdm

            self.bar = tqdm(
                total=run.target_steps,
                initial=min(run.learner.env_steps, run.target_steps),
                unit="step",
                dynamic_ncols=True,
                leave=False,
            )

    def on_bc(self, run: Run, stats: dict[str, float]) -> None:
        if stats:
            held = run.cfg.normalize_obs and not run.learner.moves_normalizer  # normalize_obs false: nothing to hold
            held_text = "; the policy's normalizer keeps the expert's statistics" if held else ""
            self.log(
                f"behaviour cloning: {run.cfg.bc.epochs} epochs over the demos, loss {stats['bc/loss_first']:.4f} "
                f"-> {stats['bc/loss_last']:.4f}{held_text}"
            )

    def on_round(self, run: Run, s: dict[str, float]) -> None:
        if self.quiet:
            return
        if self.bar is not None:
            self.bar.update(min(run.learner.env_steps, run.target_steps) - self.bar.n)
            self.bar.set_postfix(
                fps=f"{s['time/fps']:.0f}",
                acc_e=f"{s.get('disc/acc_expert', 0):.2f}",
                acc_g=f"{s.get('disc/acc_gen', 0):.2f}",
            )
            self.bar.write(round_line(s))
            return
        now = time.monotonic()
        last = run.learner.env_steps >= run.target_steps
        if (
            "eval/return_mean" in s
            or last
            or run.learner.version % self.every_rounds == 0
            or now - self.last_line >= self.every_s
        ):
            self.log(round_line(s))
            self.last_line = now

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def round_line(s: dict[str, float]) -> str:
    """One human line for a round's stats."""
    parts = [
        f"round {s['round']:>4}",
        f"steps {s['env_steps']:>9,}",
        f"fps {s['time/fps']:6.0f} (collect {s['time/collect_fps']:6.0f})",
        f"disc acc {s.get('disc/acc_expert', float('nan')):.2f}/{s.get('disc/acc_gen', float('nan')):.2f}",
    ]
    if "rollout/ep_rew_mean" in s:
        parts.append(f"true return {s['rollout/ep_rew_mean']:8.1f}")
    if "eval/return_mean" in s:
        parts.append(
            f"eval {s['eval/return_mean']:8.1f}"
            + (f" ({s['eval/normalized']:.2f} of expert)" if "eval/normalized" in s else "")
        )
    if "eval/action_error" in s:
        parts.append(f"action error {s['eval/action_error']:.3f}")
    if "actors/live" in s:
        parts.append(
            f"actors {s['actors/live']:.0f} (restarts {s.get('actors/restarts', 0):.0f}, "
            f"dropped {s.get('actors/dropped', 0):.0f})"
        )
    return " | ".join(parts)


def built_in(quiet: bool, log: Callable[[str], None]) -> list[Callback]:
    """What every `train()` runs, before the caller's own callbacks."""
    return [Checkpoints(), BestCheckpoint(), Metrics(), Progress(quiet, log)]
