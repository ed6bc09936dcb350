"""The actor-critic policy: SB3's `ActorCriticPolicy` whose features extractor comes from the encoder
factory (`gailkit.model.encoders`: a normalizing flatten for vectors, a CNN for images, one per Dict entry).

The running mean/variance live inside the network (buffers of `NormalizedFlatten`), so weights,
checkpoints and ONNX exports all carry them: expert data, actors, evaluation and export see one
normalization. Statistics change only through `update_normalizer`, never in `forward`.
This package, `generator` and `experts` are the only ones that import stable_baselines3.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch as th
from stable_baselines3.common.policies import ActorCriticPolicy, BaseModel, MultiInputActorCriticPolicy

from gailkit.config import PolicyConfig, PPOConfig
from gailkit.core import obs as obs_tree
from gailkit.core.fragments import Weights
from gailkit.core.framestacks import FrameStacks
from gailkit.model import encoders
from gailkit.model.encoders import NormalizedFlatten
from gailkit.model.spaces import check_action_space, clipped, env_action, has_images  # noqa: F401  (re-exports)

ACTIVATIONS = {
    "tanh": th.nn.Tanh,
    "relu": th.nn.ReLU,
    "elu": th.nn.ELU,
    "leaky_relu": th.nn.LeakyReLU,
    "gelu": th.nn.GELU,
    "silu": th.nn.SiLU,
}


def linear(value: float, decay: bool) -> Any:
    """`value` for SB3, or with `decay` its linear fall to 0 (SB3's progress goes from 1 to 0; rl-zoo3's `lin_`)."""
    return (lambda progress: progress * value) if decay else value


def default_net_arch(observation_space: gym.Space, encoder: str = "auto") -> list[int]:
    """Hidden layers between the encoder and the heads when `policy.net_arch` is empty: none when a CNN reads
    the frames (alone, as SB3's `CnnPolicy` and rl-zoo3's Atari PPO, or as an entry of a Dict), [64, 64]
    otherwise (SB3's `MlpPolicy`). Two tanh layers after a CNN saturate during behaviour cloning: on Pong the
    clone predicted the action counts for every frame (BENCHMARKS.md, "Pong"); ReLU layers do not, so
    `net_arch: [64, 64]` with `activation: relu` is the choice for a Dict whose vectors need layers."""
    return [] if has_images(observation_space, encoder) else [64, 64]


def as_trained(net: PolicyConfig, observation_space: gym.Space, learner_state: Any) -> PolicyConfig:
    """`net` as the checkpointed learner state was trained with it: before `default_net_arch`, an empty
    `net_arch` put [64, 64] tanh layers after a CNN too, so such a policy's settings name them (and it
    rebuilds, resumes, evaluates and exports as it was trained)."""
    generator = learner_state.get("generator") if isinstance(learner_state, dict) else None
    weights = generator.get("policy") if isinstance(generator, dict) else None  # any shape a file may hold
    if isinstance(weights, dict) and flattened_frame_stack(
        net.encoder, observation_space, weights, "features_extractor.mean"
    ):
        return dataclasses.replace(net, encoder="flat")  # a stack of colour frames, flattened before 2026-12-07
    hidden = isinstance(weights, dict) and "mlp_extractor.policy_net.0.weight" in weights
    older = not net.net_arch and hidden and not default_net_arch(observation_space, net.encoder)
    return dataclasses.replace(net, net_arch=[64, 64]) if older else net


def flattened_frame_stack(encoder: str, observation_space: gym.Space, weights: dict, flat_key: str) -> bool:
    """Whether weights saved for a 4-dimensional frame stack hold a flattening encoder (`flat_key`): until
    2026-12-07 `auto` flattened such a Box (a CNN reads it since), so they rebuild with `encoder: flat`."""
    stacked = isinstance(observation_space, gym.spaces.Box) and len(observation_space.shape) == 4
    return encoder == "auto" and stacked and flat_key in weights


def policy_kwargs(cfg: PolicyConfig, normalize_obs: bool, observation_space: gym.Space) -> dict[str, Any]:
    """Keyword arguments of `ActorCriticPolicy` for these settings (same on learner and actors); the
    features extractor is the encoder factory's choice for the space."""
    extractor, extractor_kwargs = encoders.choose(observation_space, cfg.encoder, normalize_obs, cfg.cnn_features)
    pi = list(cfg.net_arch or default_net_arch(observation_space, cfg.encoder))
    return dict(
        net_arch=dict(pi=pi, vf=list(cfg.vf_arch or pi)),
        activation_fn=ACTIVATIONS["tanh" if cfg.activation == "auto" else cfg.activation],
        ortho_init=cfg.ortho_init,
        log_std_init=cfg.log_std_init,
        features_extractor_class=extractor,
        features_extractor_kwargs=extractor_kwargs,
        normalize_images=False,  # the encoder scales uint8 frames itself (ImageCNN)
    )


class _AsTheEnvGaveThem(BaseModel):
    """Observations reach the encoder as the env gave them: SB3's `preprocess_obs` casts every Box to float32
    first, a pass over a batch of frames that `ImageCNN` repeats in its own layout (`bench/cnn_cast.py`,
    BENCHMARKS.md). gailkit's encoders cast for themselves
    (`encoders.preprocess`: one-hot for discrete spaces as SB3 does, Boxes unchanged)."""

    def extract_features(self, obs: Any, features_extractor: th.nn.Module) -> th.Tensor:
        return features_extractor(encoders.preprocess(self.observation_space, obs))


class ActorCritic(ActorCriticPolicy, _AsTheEnvGaveThem):  # type: ignore[misc]  # SB3 widens the signature
    """SB3's `ActorCriticPolicy` (the same modules, weights and state dict) whose encoder takes the
    observations as the env gave them (`_AsTheEnvGaveThem`, next in the method order after SB3's policy
    classes). For vector and Dict observations alike: SB3's `MultiInputPolicy` differs only in its default
    features extractor, which gailkit always names."""


KINDS = {"ppo": "gaussian", "sac": "squashed"}
STATS_CHUNK = 4096
"""Rows of frame stacks built at a time for the normalizer's statistics."""
"""The policy each generator trains: SB3's ActorCriticPolicy (a Gaussian or categorical head and a value
function) or SAC's squashed-Gaussian actor (`policy.squashed`)."""


def kind_of(generator: str) -> str:
    """The kind of policy `generator` trains (`auto`, resolved later, and ppo: gaussian)."""
    return KINDS.get(generator, "gaussian")


def build(
    observation_space: gym.Space,
    action_space: gym.Space,
    cfg: PolicyConfig,
    normalize_obs: bool,
    device: str | th.device = "cpu",
    kind: str = "gaussian",
) -> Any:
    """A fresh policy of `kind` (the actors' CPU copy; the learner's comes from its generator with the
    same kwargs)."""
    check_action_space(action_space)
    if kind == "squashed":
        from gailkit.model.policy import squashed

        return squashed.build(observation_space, action_space, cfg, normalize_obs, device)
    pol = ActorCritic(
        observation_space, action_space, lambda _: 0.0, **policy_kwargs(cfg, normalize_obs, observation_space)
    )
    return pol.to(device)


def make_ppo(
    venv: Any,
    cfg: PPOConfig,
    net: PolicyConfig,
    normalize_obs: bool,
    device: str | th.device = "cpu",
    seed: int | None = None,
    transpose_images: bool = True,
):
    """SB3's `PPO` for these settings: the one place gailkit builds it (generator, experts, export).
    `transpose_images=False` keeps frames in the env's own layout (the generator's)."""
    from stable_baselines3 import PPO

    check_action_space(venv.action_space)
    lr, clip = linear(cfg.learning_rate, cfg.linear_schedule), linear(cfg.clip_range, cfg.linear_schedule)
    space = venv.observation_space
    # SB3 wraps an env of height x width x channels frames in VecTransposeImage and builds its policy
    # for channels first; gailkit's learner steps no env and its encoder takes frames as the env gives
    # them, so the model is set up for the env's own layout (actors, demos and ONNX agree).
    own_layout = not transpose_images and encoders.is_image(space) and len(space.shape) == 3
    own_layout = own_layout and int(np.argmin(space.shape)) != 0
    model = PPO(
        ActorCritic,
        venv,
        learning_rate=lr,
        n_steps=cfg.n_steps,
        batch_size=cfg.batch_size,
        n_epochs=cfg.n_epochs,
        gamma=cfg.gamma,
        gae_lambda=cfg.gae_lambda,
        clip_range=clip,
        ent_coef=cfg.ent_coef,
        vf_coef=cfg.vf_coef,
        max_grad_norm=cfg.max_grad_norm,
        normalize_advantage=cfg.normalize_advantage,
        use_sde=cfg.use_sde,
        sde_sample_freq=cfg.sde_sample_freq,
        target_kl=cfg.target_kl,
        policy_kwargs=policy_kwargs(net, normalize_obs, venv.observation_space),
        device=device,
        seed=seed,
        verbose=0,
        _init_setup_model=not own_layout,
    )
    if own_layout:
        model.observation_space = space
        model._setup_model()
    # A zip this model saves (experts, `export --sb3`) names SB3's own class, which SB3 alone rebuilds and
    # gailkit's zip reader knows; `ActorCritic` is that class with a faster way in for frames.
    model.policy_class = MultiInputActorCriticPolicy if isinstance(space, gym.spaces.Dict) else ActorCriticPolicy
    return model


class SpacesOnly(gym.Env):
    """Gives SB3's PPO the spaces it asks its env for; never stepped."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space):
        self.observation_space, self.action_space = observation_space, action_space

    def reset(self, *, seed=None, options=None):  # pragma: no cover - never called
        raise RuntimeError("a spaces-only env and is never stepped")

    def step(self, action):  # pragma: no cover - never called
        raise RuntimeError("a spaces-only env and is never stepped")


def spaces_only_venv(observation_space: gym.Space, action_space: gym.Space, n_envs: int = 1) -> Any:
    """An SB3 vector env that only carries the spaces (to build an SB3 algorithm that never steps it)."""
    from stable_baselines3.common.vec_env import DummyVecEnv

    return DummyVecEnv([lambda: SpacesOnly(observation_space, action_space)] * n_envs)


def normalizer(pol: ActorCriticPolicy) -> NormalizedFlatten:
    """The policy's observation normalizer (vector observations; see `update_normalizer` for any)."""
    ext = pol.features_extractor
    if not isinstance(ext, NormalizedFlatten):
        raise TypeError(f"the policy's encoder is {type(ext).__name__}, not a normalizing flatten")
    return ext


@th.no_grad()
def update_normalizer(pol: ActorCriticPolicy, obs: Any) -> None:
    """Merge a raw batch of observations (as the env gives them) into the encoder's running
    statistics (a no-op for encoders without any)."""
    space = pol.observation_space
    if isinstance(obs, FrameStacks):  # built a chunk at a time, each merged into the statistics (Chan's update)
        for lo in range(0, len(obs), STATS_CHUNK):
            update_normalizer(pol, obs[lo : lo + STATS_CHUNK])
        return
    if isinstance(space, gym.spaces.Dict):
        batch: Any = {k: th.from_numpy(np.array(obs[k])) for k in space.spaces}  # a copy: demos may be read-only maps
    else:
        batch = th.from_numpy(np.array(obs))
    encoders.update_stats(pol.features_extractor, encoders.preprocess(space, batch))


def get_weights(pol: ActorCriticPolicy, version: int) -> Weights:
    return Weights(version, {k: v.detach().cpu().numpy().copy() for k, v in pol.state_dict().items()})


def check_weights(pol: ActorCriticPolicy, weights: Weights) -> None:
    """Raise ValueError unless `weights` holds exactly the policy's tensors, of their shapes and
    dtypes, all finite (what an actor checks before it applies weights from the network)."""
    want = weight_shapes(pol)
    got = weights.tensors
    if set(got) != set(want):
        missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
        raise ValueError(f"weights for another network (missing {missing[:3]}, unexpected {extra[:3]})")
    for name, (shape, dtype) in want.items():
        arr = got[name]
        if tuple(arr.shape) != shape or str(arr.dtype) != dtype:
            raise ValueError(f"weight '{name}' is {tuple(arr.shape)} {arr.dtype}, expected {shape} {dtype}")
        if arr.dtype.kind == "f" and not np.isfinite(arr).all():
            raise ValueError(f"weight '{name}' holds NaN or inf")


def set_weights(pol: ActorCriticPolicy, weights: Weights) -> None:
    check_weights(pol, weights)
    device = next(pol.parameters()).device
    state = {k: th.as_tensor(v, device=device) for k, v in weights.tensors.items()}
    pol.load_state_dict(state)


def weight_shapes(pol: ActorCriticPolicy) -> dict[str, tuple[tuple[int, ...], str]]:
    """Name -> (shape, dtype) of every tensor in the policy's state dict (what a weights message must hold)."""
    return {k: (tuple(v.shape), str(v.dtype).removeprefix("torch.")) for k, v in pol.state_dict().items()}


@th.no_grad()
def act(pol: ActorCriticPolicy, obs: Any, deterministic: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """`(actions, log_probs)` for a batch `obs` (E, *obs_shape); actions as sampled (unclipped)."""
    if not isinstance(pol, ActorCriticPolicy):  # SAC's squashed actor
        from gailkit.model.policy import squashed

        return squashed.act(pol, obs, deterministic)
    obs_t, _ = pol.obs_to_tensor(obs)
    dist = pol.get_distribution(obs_t)
    actions = dist.get_actions(deterministic=deterministic)
    log_probs = dist.log_prob(actions)
    acts = actions.cpu().numpy()
    if isinstance(pol.action_space, gym.spaces.Discrete):
        acts = acts.reshape(-1)
    return acts, log_probs.cpu().numpy().astype(np.float32)


def deterministic_actor(pol: ActorCriticPolicy, deterministic: bool = True) -> Callable[[np.ndarray], Any]:
    """One observation -> the deterministic action the env is given (evaluation); with
    `deterministic=False`, an action sampled from the policy's distribution (`evaluate --stochastic`)."""

    def one(obs: Any) -> Any:
        a, _ = act(pol, obs_tree.tmap(lambda v: np.asarray(v)[None], obs), deterministic=deterministic)
        return env_action(pol.action_space, a)[0]

    return one


from gailkit.model.policy.heads import DeterministicHead, deterministic_head  # noqa: E402, F401  (re-exports)
from gailkit.model.policy.sb3_zip import read_sb3_zip  # noqa: E402, F401  (a re-export; it builds on the classes above)
