"""The settings of the generators (what updates the policy) and of the policy network they share."""

from __future__ import annotations

import dataclasses
from typing import Literal

from gailkit.config.fields import GE0, GE1, GE2, GT0, LAYERS, UNIT, _Checked, _f, _rule


@dataclasses.dataclass
class PPOConfig(_Checked):
    """PPO's update under stable-baselines3's names (see `stable_baselines3.PPO`); the network is `policy:`."""

    learning_rate: float = _f(3e-4, GT0)
    n_steps: int = _f(2048, GE1)
    """Steps per env per rollout (a round)."""
    batch_size: int = _f(64, GE2)
    n_epochs: int = _f(10, GE1)
    gamma: float = _f(0.99, _rule(lambda v: 0 < v <= 1, "must lie in (0, 1]"))
    gae_lambda: float = _f(0.95, UNIT)
    clip_range: float = _f(0.2, GT0)
    ent_coef: float = _f(0.0, GE0)
    vf_coef: float = _f(0.5, GE0)
    max_grad_norm: float = _f(0.5, GT0)
    normalize_advantage: bool = True
    use_sde: bool = False
    sde_sample_freq: int = -1
    linear_schedule: bool = False
    """Decay learning_rate and clip_range linearly to 0 (rl-zoo3's `lin_` prefix)."""
    target_kl: float | None = _f(None, GT0)
    """Stop an update's epochs early once the approximate KL passes 1.5 x this (SB3's target_kl)."""
    reward_scale: Literal["none", "returns"] = "none"
    """How the discriminator's rewards reach PPO's update. none: as the discriminator gives them. returns: divided
    by the running standard deviation of their discounted sum and clipped to +-10, SB3's
    `VecNormalize(norm_reward=True)` (the same statistics, over every round so far, checkpointed). From one whole
    demo episode (BENCHMARKS.md, "Rewards scaled by the spread of their returns") the critic explained none of a
    round's returns with raw rewards (the median over a run's rounds of SB3's explained variance was 0.00 on 11 of
    12 runs) and 0.65-0.95 of them with scaled ones, but the runs did not end clearly higher (by less than rounding
    alone moved them), so it is not the default."""


@dataclasses.dataclass
class PolicyConfig(_Checked):
    """The policy's network and its value function's, whatever updates them (`gailkit/model/encoders.py`,
    `gailkit/model/policy/`): what actors build, checkpoints hold and ONNX files carry."""

    net_arch: list[int] = _f([], LAYERS)
    """Hidden layers of the policy network (after the encoder); empty: the generator's own default
    ([64, 64] for ppo, but none when a CNN reads frames, alone as in SB3's `CnnPolicy` or in a Dict;
    [256, 256] for sac)."""
    vf_arch: list[int] = _f([], LAYERS)
    """Hidden layers of the value network, or of each of SAC's twin Q networks (empty: as `net_arch`)."""
    activation: Literal["auto", "tanh", "relu", "elu", "leaky_relu", "gelu", "silu"] = "auto"
    """auto: the generator's own default (tanh for ppo, relu for sac)."""
    log_std_init: float = 0.0
    """Continuous actions: the Gaussian's initial log standard deviation."""
    ortho_init: bool = True
    encoder: Literal["auto", "flat", "cnn"] = "auto"
    """How observations become features: auto = a CNN for images (3-dimensional uint8 Box), flattened
    (one-hot for discrete spaces) otherwise, one encoder per entry of a Dict; flat; cnn."""
    cnn_features: int = _f(512, GE1)
    """Width of a CNN encoder's output."""


def _ent_coef_ok(v: object) -> bool:
    text = str(v)
    try:
        return float(text.removeprefix("auto_")) > 0 if text != "auto" else True
    except ValueError:
        return False


@dataclasses.dataclass
class SACConfig(_Checked):
    """The off-policy generator (`generator: sac`): SB3's SAC update on a replay of the run's own
    transitions whose rewards the current discriminator recomputes at sample time (DAC, Kostrikov
    et al. 2019); the network is `policy:`."""

    learning_rate: float = _f(3e-4, GT0)
    n_steps: int = _f(32, GE1)
    """Steps per env per round (a round's transitions join the replay, then its updates run): with
    the one env `n_envs: -1` gives sac, 32 transitions and 32 updates a round."""
    buffer_size: int = _f(1_000_000, GE1)
    """Replay capacity in transitions (also bounded by the memory budget; the oldest go first)."""
    learning_starts: int = _f(2_000, GE0)
    """Transitions in the replay before the first update."""
    batch_size: int = _f(256, GE2)
    updates_per_step: float = _f(1.0, GT0)
    """Gradient steps per env step collected (SB3's gradient_steps / train_freq)."""
    tau: float = _f(0.005, UNIT)
    gamma: float = _f(0.99, _rule(lambda v: 0 < v < 1, "must lie in (0, 1)"))
    ent_coef: str = _f("auto", _rule(_ent_coef_ok, "must be 'auto', 'auto_<float>' or a float > 0"))
    """Entropy coefficient: auto (learned toward target_entropy, from 1.0), auto_0.1 (from 0.1), or fixed."""
    target_entropy: float | None = None
    """Target entropy of the learned coefficient (None: minus the action dimension)."""
    linear_schedule: bool = False
    """Decay learning_rate linearly to 0 over the run, for the actor, the critics and the entropy
    coefficient alike (SB3's learning-rate schedule; rl-zoo3's `lin_` prefix)."""
    bc_weight: float = _f(-1.0, _rule(lambda v: v >= 0 or v == -1, "must be >= 0, or -1 (auto)"))
    """A BC term inside the actor's own loss (TD3+BC, Fujimoto and Gu 2021), 0 for none: each actor step
    adds `bc_weight` x mean |Q| x the mean squared error between tanh of the actor's mean and the
    expert's actions (in [-1, 1]) on `sac.batch_size` demos, so the term keeps its share of the loss
    whatever the scale of Q (TD3+BC's alpha 2.5 is 0.4 here). Needs demos with actions; annealed to 0
    over `bc.anneal_steps` when that is set. -1 (auto): see `resolve`."""

    def resolve(self, generator: str, loose: bool) -> SACConfig:
        """`bc_weight: -1` (auto) filled in: 0.4 with `generator: sac` for `loose` transitions with actions (no whole
        episode: subsampled or cut demos), with BC's warm start (`BCConfig.resolve` keeps it for them); 0 otherwise.
        From 200 loose transitions (4 episodes, every 20th) with the warm start and 0.4, SAC reached 0.9 of the
        expert within 100k env steps on 3 of 3 seeds on HalfCheetah and 2 of 3 on Ant, against 1 of 3 and 0 of 1
        without; on Hopper sooner than without (29,952 / 49,920 / 39,936 env steps against 89,856 / 49,920 / 49,920),
        and on Walker2d at 99,840 / 139,776 / 89,856 where plain SAC ended its 200k at 0.79 (BENCHMARKS.md, "Where
        BC fails", protocol (c)). Whole episodes keep plain SAC: the term was measured on them only on Ant (b), one seed."""
        if self.bc_weight != -1:
            return self
        return dataclasses.replace(self, bc_weight=0.4 if generator == "sac" and loose else 0.0)
