"""What every env gailkit makes is wrapped in: Atari's preprocessing and a frame stack when the settings
name them (gymnasium's own wrappers), and a Tuple observation seen as a Dict."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from gailkit.config import EnvConfig
from gailkit.core.errors import EnvError, first_line


class TupleAsDict(gym.ObservationWrapper):
    """A Tuple observation as a Dict keyed "0", "1", ... (what every data path and the ONNX inputs carry;
    a scripted expert of such an env gets that dict)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        space = env.observation_space
        assert isinstance(space, gym.spaces.Tuple)
        self.observation_space = gym.spaces.Dict({str(i): sub for i, sub in enumerate(space.spaces)})

    def observation(self, observation: Any) -> dict[str, Any]:
        return {str(i): v for i, v in enumerate(observation)}


def wrapped(env: gym.Env, cfg: EnvConfig) -> gym.Env:
    """`env` with the preprocessing and frame stack `cfg` names (gymnasium's own wrappers); a Tuple
    observation becomes a Dict (`TupleAsDict`)."""
    if isinstance(env.observation_space, gym.spaces.Tuple):
        env = TupleAsDict(env)
    if cfg.preprocess == "atari":
        from gymnasium.wrappers import AtariPreprocessing

        try:
            env = AtariPreprocessing(env, noop_max=30, frame_skip=4, screen_size=84, grayscale_obs=True)
        except (ValueError, AssertionError, AttributeError, gym.error.DependencyNotInstalled) as e:
            env.close()
            raise EnvError(f"--env {cfg.id}: env.preprocess atari does not fit it ({first_line(e)})") from None
    if cfg.frame_stack > 1:
        try:
            from gymnasium.wrappers import FrameStackObservation
        except ImportError:  # gymnasium 0.29 (imitation's pin) names it FrameStack, with other padding
            env.close()
            raise EnvError(f"--env {cfg.id}: env.frame_stack needs gymnasium >= 1.0") from None
        env = FrameStackObservation(env, cfg.frame_stack)
    return env
