"""Behaviour cloning's settings, and the auto values that depend on the demos: how long and how firmly the BC term
runs (`BCConfig.resolve`, by the demos' size and whether the policy reads frames) and what the policy's normalizer holds
(`resolve_obs_stats`). `run.session` resolves them once, before config.yaml is written."""

from __future__ import annotations

import dataclasses
from typing import Literal

from gailkit.config.fields import GE1, GT0, _Checked, _f, _rule
from gailkit.core.errors import ConfigError

AUTO = _rule(lambda v: v >= -1, "must be >= 0, or -1 (auto)")
BC_MAX_STEPS = 5_000
"""The BC warm start's auto epochs stop at this many minibatch steps (large demo sets)."""


def keeps_bc_term(frames: bool) -> bool:
    """Whether the auto BC term is kept for the whole run (`anneal_steps` 0, `steps_per_round` 100) rather than
    annealed over half of it (10 steps a round): kept unless the policy reads frames. PPO, 100k env steps, 4 MuJoCo
    envs, mean finals with the term kept against annealed: 0.98 against 0.62 with 25 whole episodes (3 seeds), 0.93
    against 0.62 with 10, 0.90 against 0.57 with 4, 0.84 against 0.48 with 1 (2 seeds each), and 0.49 against 0.31
    from 200 loose transitions (protocol (c): 4 episodes, every 20th transition; 3 seeds; 4 of 12 runs reach 0.9
    against 1 of 12); BENCHMARKS.md, "The BC term: kept or annealed". A policy that reads frames keeps the annealed
    term (Pong: a kept term was not run, and 100 CNN steps a round would cost several times its PPO update)."""
    return not frames


@dataclasses.dataclass
class BCConfig(_Checked):
    """Behaviour cloning of the demos: a warm start before GAIL, and a BC term during GAIL (kept for the whole
    run, annealed away when the policy reads frames). Needs demos with actions; -1 (auto)
    means the value in brackets with actions, 0 without."""

    epochs: int = _f(-1, AUTO)
    """Passes over the demos before GAIL starts [50, at most 5,000 steps of `batch_size`: 25 MuJoCo episodes
    get all 50, which BC alone needs to reach the expert there; 2,000 left it at 0.57 and 0.74 of the expert on
    Hopper and HalfCheetah, BENCHMARKS.md]. The policy's mean (or logits) is fit to the expert's actions. Few
    whole episodes get no more: 5,000 steps from one episode (1,250 passes) took BC alone from 0.01–0.89 to
    0.35–1.00 of the expert, but GAIL from that clone did no better at 100k and ended worse at 500k on Walker2d
    (BENCHMARKS.md, "How long BC trains"); to use BC alone, set `bc.epochs` (and `total_steps` 1)."""
    batch_size: int = _f(256, GE1)
    learning_rate: float = _f(1e-3, GT0)
    log_std: float | None = -1.0
    """Continuous actions: the policy's log std after cloning (None: keep `policy.log_std_init`)."""
    critic_warmup_rounds: int = _f(-1, AUTO)
    """First rounds in which PPO fits only the value function (the cloned policy stays as it is)
    while the discriminator learns to tell the cloned policy from the expert [5]."""
    steps_per_round: int = _f(-1, AUTO)
    """BC steps after every PPO update, on `batch_size` demos each [100; 10 when the policy reads frames
    (`keeps_bc_term`). With the term kept, 100 ended at 0.98 of the expert against 0.93 with 30 and 0.85 with 10,
    mean of 4 MuJoCo envs x 3 seeds with 25 whole episodes, BENCHMARKS.md]."""
    anneal_steps: int = _f(-1, AUTO)
    """Env steps over which those steps' learning rate falls linearly to 0; 0: it never falls [0, where PPO
    without the term drifted away from the clone; half of total_steps when the policy reads frames (`keeps_bc_term`
    says what was measured)]."""

    def resolve(
        self, n_demos: int, total_steps: int, generator: str = "ppo", frames: bool = False, loose: bool = False
    ) -> BCConfig:
        """The auto (-1) values filled in for `n_demos` transitions with actions (0: demos without
        actions, where explicit BC is refused), for a policy that reads frames (a CNN) or not
        (`keeps_bc_term`). With `generator: sac` the warm start (`epochs`) is kept only for `loose`
        transitions (no whole episode: subsampled or cut demos), where `sac.bc_weight`'s auto value keeps the
        clone through SAC's updates (`SACConfig.resolve` says what was measured); every other auto value is 0
        with sac: a cloned actor alone meets a critic that knows nothing of it, and SAC's first updates undo it
        (BENCHMARKS.md, "Where BC fails", Ant-v4 (c))."""
        has_actions = n_demos > 0
        if not has_actions:
            named = [k for k in ("epochs", "steps_per_round") if getattr(self, k) > 0]
            if named:
                raise ConfigError(
                    f"'bc.{named[0]}': behaviour cloning needs the expert's actions, and these demos have none"
                )
        epochs = max(1, min(50, BC_MAX_STEPS // max(1, -(-n_demos // self.batch_size))))
        kept = keeps_bc_term(frames)
        auto = {
            "epochs": epochs,
            "critic_warmup_rounds": 5,
            "steps_per_round": 100 if kept else 10,
            "anneal_steps": 0 if kept else max(1, total_steps // 2),
        }
        keep = {k: has_actions and (generator != "sac" or (loose and k == "epochs")) for k in auto}
        return dataclasses.replace(
            self, **{k: (v if keep[k] else 0) for k, v in auto.items() if getattr(self, k) == -1}
        )


ObsStats = Literal["auto", "expert", "running"]


def resolve_obs_stats(obs_stats: ObsStats, bc_epochs: int, whole_episodes: int) -> ObsStats:
    """`obs_stats` with auto chosen: expert when the policy starts as a BC clone (`bc_epochs`, resolved) of
    whole episodes, running otherwise (no clone; or a clone of loose transitions, whose few rows estimate the
    statistics poorly). Measured with PPO in BENCHMARKS.md ("What PPO does with a clone")."""
    if obs_stats != "auto":
        return obs_stats
    return "expert" if bc_epochs > 0 and whole_episodes > 0 else "running"
