"""Every setting as a dataclass field; each field's own bounds are checked when the dataclass is built.

Field docstrings are the settings' documentation. A field's `metadata["check"]` is `(test, says)`:
building a dataclass whose value fails `test` raises `FieldError` naming the field, which the
loader turns into `'ppo.learning_rate' must be > 0, got -1`. Every float must be finite. Checks
that involve several fields (a batch larger than a round) are `TrainConfig.check()`.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Literal

from gailkit.config.bc import BCConfig, ObsStats
from gailkit.config.fields import COLUMNS, GE0, GE1, GT0, LAYERS, SEED, _Checked, _f, _rule
from gailkit.config.generators import PolicyConfig, PPOConfig, SACConfig
from gailkit.core.errors import ConfigError


@dataclasses.dataclass
class EnvConfig(_Checked):
    id: str = ""
    """Env name: a gymnasium id, a name registered by `envs/`, `module:Class` or `file.py:Class`."""
    kwargs: dict[str, Any] = _f({})
    """Keyword arguments passed to the env's constructor."""
    preprocess: Literal["none", "atari"] = "none"
    """`atari`: gymnasium's `AtariPreprocessing` (the env made with `frameskip=1`, then 4 frames a step
    with max-pooling, 30 no-ops at reset, 84x84 grayscale uint8), the standard Atari pipeline; needs
    gailkit[atari]. Recorded in the run and in exported ONNX files, so evaluate/export/infer rebuild it."""
    frame_stack: int = _f(1, _rule(lambda v: 1 <= v <= 16, "must lie in [1, 16]"))
    """Observations are the last this-many frames (gymnasium's `FrameStackObservation`, a new leading
    axis, padded at reset with the first frame). Demo files hold one frame a step; stacks are rebuilt
    from their episodes when they are read."""
    max_episode_steps: int = _f(0, GE0)
    """Episodes are cut (truncated) after this many of the agent's steps (gymnasium's time limit; with
    `preprocess: atari`, steps of 4 frames); 0: the env's own
    (a registered id's `max_episode_steps`; an env class named by file has none, so an env that never
    ends needs this)."""


@dataclasses.dataclass
class DiscConfig(_Checked):
    """The GAIL discriminator: an MLP with running input normalization (see `discriminator`)."""

    net: Literal["gailkit", "imitation"] = "gailkit"
    """gailkit's own network, or imitation's `BasicRewardNet` (same layout; needs gailkit[imitation])."""
    net_arch: list[int] = _f([64, 64], LAYERS)
    encoder: Literal["auto", "flat", "cnn"] = "auto"
    """How it sees observations (the encoder factory, as `policy.encoder`): auto = a CNN for images."""
    cnn_features: int = _f(256, GE1)
    """Width of its CNN encoder's output (images only)."""
    use_action: bool = True
    use_next_state: bool = False
    """Feed `next_obs` too; with `use_action: false` and this on, the discriminator is state-only."""
    disc_lr: float = _f(3e-4, GT0)
    demo_batch_size: int = _f(256, GE1)
    """Expert transitions per discriminator batch (the same number of generator transitions join them)."""
    n_disc_updates_per_round: int = _f(4, GE0)
    grad_penalty: float = _f(-1.0, _rule(lambda v: v >= 0 or v == -1, "must be >= 0, or -1 (auto)"))
    """Weight of the gradient penalty `(||grad D(x)|| - 1)^2` on expert/generator interpolates; -1
    (auto): 10 with `generator: sac` (DAC's), 0 with ppo."""
    ent_coef: float = _f(0.0, GE0)
    """Entropy bonus on the discriminator's Bernoulli output (Ho & Ermon's `entcoeff`)."""
    spectral_norm: bool = False
    """Spectral normalization of every linear layer (Miyato et al. 2018): a 1-Lipschitz discriminator."""
    label_smoothing: float = _f(0.0, _rule(lambda v: 0 <= v < 0.5, "must lie in [0, 0.5)"))
    """One-sided label smoothing: expert labels are 1 - this (Salimans et al. 2016)."""
    absorbing: bool = True
    """Absorbing states after terminations (DAC): the discriminator also judges "the episode ended here",
    and a terminated step is worth the absorbing state's value (see `learner`)."""
    augment_shift: int = _f(0, GE0)
    """Random-shift augmentation of the frames it trains on (DrQ): pad by this many pixels, crop back at a
    random offset (4 is DrQ's for 84x84); 0: off. Images only; rewards see the frames unshifted."""
    replay_rounds: int = _f(0, GE0)
    """Generator transitions of this many earlier rounds join the current round's in discriminator
    batches (a replay of earlier generator samples)."""
    reward_fn: Literal["auto", "gail", "airl", "negative"] = "gail"
    """Generator reward from logit l: gail = -log(1 - D) >= 0, negative = log D <= 0, airl = l =
    log D - log(1 - D). With absorbing states the sign carries no survival or ending bias (a
    termination is worth what the expert's data says), so one choice serves every env. Without
    them: gail pays for surviving, negative for ending; auto picks gail when most expert episodes
    end by time limit and airl when most terminate."""


@dataclasses.dataclass
class FleetConfig(_Checked):
    """Who steps the envs: the learner's own process (`actors: 0`), actor processes, other machines, Ray."""

    kind: Literal["local", "ray"] = "local"
    """local: processes on this machine, plus remote ones with `listen`; ray: Ray actors."""
    actors: int = _f(0, GE0)
    """Fragment slots per round filled by actors (each `envs_per_actor` envs); 0: in-process."""
    envs_per_actor: int = _f(8, GE1)
    local_actors: int = _f(-1, _rule(lambda v: v >= -1, "must be >= -1"))
    """Actor processes to start on this machine; -1: `actors` without `listen`, else 0."""
    listen: str = ""
    """Where the learner listens for actors, e.g. tcp://0.0.0.0:5555 (needs key_file beyond loopback)."""
    key_file: str = ""
    """CURVE key file from `gailkit keys generate`; actors must present its client key."""
    ray_address: str = ""
    """With `kind: ray`: the cluster to join (`auto`); empty starts a local Ray."""
    max_policy_lag: int = _f(0, _rule(lambda v: v in (0, 1), "must be 0 or 1"))
    """0: round v trains only on fragments of weights v. 1: actors collect round v + 1 with weights v
    while the learner trains round v (PPO's ratio uses the fragments' behaviour log-probs)."""
    heartbeat_timeout: float = _f(10.0, GT0)
    """Seconds of silence after which an actor counts as dead and its slot goes to another."""
    no_actor_timeout: float = _f(60.0, GT0)
    """Seconds with no live actor after which training checkpoints and stops with an error."""
    max_bad_fragments: int = _f(3, GE1)
    """Invalid fragments (wrong shapes, NaN, out-of-range actions) after which a peer is cut off."""


@dataclasses.dataclass
class TrainConfig(_Checked):
    """How `gailkit train` runs GAIL."""

    env: EnvConfig = dataclasses.field(default_factory=EnvConfig)
    demos: str = "data"
    """A demo file or folder; a folder serves only the files for `env.id`."""
    demo_columns: dict[str, str] = _f({}, COLUMNS)
    demo_merge: bool = False
    """Learn from a folder's demos of different experts as one set (`--merge`); else that is refused."""
    """An Arrow or Parquet table's own column names, e.g. {obs: observation, acts: action}; `x+y+z`
    stacks scalar columns into one vector (`--columns obs=x+y+z,acts=action`)."""
    demo_time_limit: int = _f(0, GE0)
    """Demos whose episode ends come as `dones` alone: an end at exactly this many steps is a time-limit
    truncation (`--time-limit-ends N`); 0: the env's registered `max_episode_steps`."""
    unsafe_pickle: bool = False
    """Unpickle demo files with the plain unpickler (only for files you trust)."""
    wandb: str = ""
    """Weights & Biases project that receives the run's metrics (`--wandb PROJECT`; only from the flag)."""
    expert_return: float | None = None
    """The expert policy's return that scores are normalized against (`--expert-return`); None: the
    demos' metadata, else the mean return of their whole episodes, else unknown (raw returns only)."""
    seed: int = _f(0, SEED)
    total_steps: int = _f(150_000, GE1)
    """Env steps to collect in all (rounded up to whole rounds; the first line says so)."""
    generator: Literal["auto", "ppo", "sac"] = "auto"
    """What updates the policy from the discriminator's rewards (`gailkit/algo/generator/`): ppo (SB3's
    PPO update), sac (SB3's SAC update on a replay, DAC-style; Box actions only), auto (see
    `generator.choose`: the rule measured in BENCHMARKS.md)."""
    device: str = "auto"
    """Learner device: auto (CUDA when present), cpu, cuda, cuda:N."""
    threads: int = _f(-1, _rule(lambda v: v >= 1 or v == -1, "must be >= 1, or -1 (auto)"))
    """torch threads of the learner's process (`--threads`); -1 (auto): OMP_NUM_THREADS when set, else 1 for
    vector observations and every core for frames (`core.cpu.learner_threads`, measured in BENCHMARKS.md)."""
    n_envs: int = _f(-1, _rule(lambda v: v >= 1 or v == -1, "must be >= 1, or -1 (auto)"))
    """Envs stepped by the in-process fleet (`fleet.actors: 0`); -1 (auto): 8 with ppo, 1 with sac
    (measured in BENCHMARKS.md, "Where BC fails": SAC learned slower from 8 envs x 4 steps a round)."""
    normalize_obs: bool = True
    """Observation normalization inside the policy, seeded from the expert's observations (`obs_stats`)."""
    obs_stats: ObsStats = "auto"
    """What the policy's normalizer holds after it is seeded: expert (the expert observations' statistics,
    the whole run), running (every round that trains the policy merges its generator observations in, as
    SB3's VecNormalize does); auto: expert when the policy starts as a clone of whole demo episodes (a BC
    warm start), running otherwise (`resolve_obs_stats`). Moving statistics move a clone's inputs under
    it: one round of them took HalfCheetah's clone from 0.99 to 0.12 of the expert with the policy's
    weights held (BENCHMARKS.md)."""
    eval_every: int = _f(-1, _rule(lambda v: v >= -1, "must be >= -1"))
    """Rounds between evaluations; 0: only at the end; -1: about 25 evaluations over the run."""
    eval_episodes: int = _f(10, GE1)
    checkpoint_every: int = _f(-1, _rule(lambda v: v >= -1, "must be >= -1"))
    """Rounds between checkpoints; 0: only at the end; -1: about 10 over the run."""
    ppo: PPOConfig = dataclasses.field(default_factory=lambda: PPOConfig(n_steps=256, batch_size=256))
    """GAIL's PPO: rounds of n_envs x 256 steps, minibatches of 256 (SB3's own defaults are 2048 and 64)."""
    sac: SACConfig = dataclasses.field(default_factory=SACConfig)
    policy: PolicyConfig = dataclasses.field(default_factory=PolicyConfig)
    disc: DiscConfig = dataclasses.field(default_factory=DiscConfig)
    fleet: FleetConfig = dataclasses.field(default_factory=FleetConfig)
    bc: BCConfig = dataclasses.field(default_factory=BCConfig)

    @property
    def in_process_envs(self) -> int:
        return self.n_envs if self.n_envs > 0 else (1 if self.generator == "sac" else 8)

    @property
    def total_envs(self) -> int:
        return self.fleet.actors * self.fleet.envs_per_actor if self.fleet.actors else self.in_process_envs

    @property
    def fragment_steps(self) -> int:
        """Steps per env per round (the generator's `n_steps`)."""
        return self.sac.n_steps if self.generator == "sac" else self.ppo.n_steps

    @property
    def round_steps(self) -> int:
        return self.fragment_steps * self.total_envs

    @property
    def total_rounds(self) -> int:
        return -(-self.total_steps // self.round_steps)

    def every(self, setting: int, auto_count: int) -> int:
        """Rounds between events for `eval_every`/`checkpoint_every` (0: only at the end)."""
        return max(1, self.total_rounds // auto_count) if setting == -1 else setting

    def observation_only(self) -> TrainConfig:
        """Settings for demos without actions: a state-transition discriminator on (obs, next_obs) (GAIfO,
        Torabi et al. 2018); settings that need the expert's actions are refused."""
        if self.sac.bc_weight > 0:
            raise ConfigError(
                "'sac.bc_weight': behaviour cloning needs the expert's actions, and these demos have none"
            )
        if self.disc.net == "imitation" and not self.disc.use_next_state:
            raise ConfigError("'disc.net: imitation' with demos without actions needs 'disc.use_next_state: true'")
        return dataclasses.replace(self, disc=dataclasses.replace(self.disc, use_action=False, use_next_state=True))

    def check(self) -> None:
        """Settings that are impossible together; one line naming them."""
        p, d, fl = self.ppo, self.disc, self.fleet
        if fl.max_policy_lag and (fl.actors == 0 or fl.kind == "ray"):
            raise ConfigError(
                "'fleet.max_policy_lag: 1' needs actor processes ('fleet.actors' >= 1, 'fleet.kind: local')"
            )
        if fl.kind == "ray" and fl.actors == 0:
            raise ConfigError("'fleet.kind: ray' needs 'fleet.actors' >= 1 (the number of Ray actors)")
        if fl.listen and fl.actors == 0:
            raise ConfigError("'fleet.listen' needs 'fleet.actors' >= 1 (the number of fragment slots per round)")
        most = 8 * (os.cpu_count() or 1)
        if fl.local_actors > most or (
            fl.local_actors == -1 and not fl.listen and fl.actors > most and fl.kind == "local"
        ):
            raise ConfigError(
                f"'fleet.local_actors': {max(fl.local_actors, fl.actors)} actor processes on a machine of "
                f"{os.cpu_count()} CPUs (at most {most}); use --listen and actors on other machines, or fewer"
            )
        if self.total_envs > 4096 or self.round_steps > 1 << 24:
            raise ConfigError(
                f"a round of {self.total_envs} envs x {p.n_steps} steps ({self.round_steps:,} transitions) is "
                "beyond what gailkit holds in memory (4,096 envs and 16,777,216 transitions at most)"
            )
        if self.generator != "sac" and p.batch_size > self.round_steps:
            raise ConfigError(f"'ppo.batch_size' {p.batch_size} exceeds a round's n_steps * envs = {self.round_steps}")
        if p.use_sde:
            raise ConfigError("'ppo.use_sde': gSDE is not supported by the GAIL generator; set it to false")
        if not d.use_action and not d.use_next_state:
            raise ConfigError(
                "'disc.use_action' and 'disc.use_next_state' are both false: the discriminator would see only obs"
            )


@dataclasses.dataclass
class ExpertConfig(_Checked):
    """How `gailkit expert train` trains an SB3 expert (PPO with these settings, or another SB3 algorithm
    with SB3's own defaults)."""

    env: EnvConfig = dataclasses.field(default_factory=EnvConfig)
    algo: Literal["ppo", "a2c", "sac", "td3", "dqn"] = "ppo"
    """Which SB3 algorithm: ppo (the `ppo:` and `policy:` settings below), or a2c, sac, td3, dqn with
    SB3's defaults (and `policy.net_arch` when set); off-policy ones make one update per env step."""
    total_timesteps: int = _f(100_000, GE1)
    n_envs: int = _f(8, GE1)
    seed: int = _f(0, SEED)
    eval_episodes: int = _f(20, GE1)
    normalize_obs: bool = False
    """Normalize observations with SB3's VecNormalize while training; the statistics are then copied
    into the policy network (`NormalizedFlatten`), so the saved expert takes raw observations."""
    normalize_reward: bool = False
    """Scale rewards by VecNormalize's running return statistics while training (rl-zoo3's `normalize`)."""
    ppo: PPOConfig = dataclasses.field(default_factory=PPOConfig)
    policy: PolicyConfig = dataclasses.field(default_factory=PolicyConfig)
