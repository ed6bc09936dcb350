"""A scripted expert for Atari Pong (`ALE/Pong-v5`): it reads the ball and its own paddle from the
console's RAM and moves the paddle to where the ball will cross its line. No training needed.

RAM bytes (measured against the frames): 49 ball x, 54 ball y (0 while no ball is in play), 51 the
right (agent's) paddle's y. The ball bounces between y 44 and 206 and reaches the agent's paddle at
x 188; the paddle's centre is 6 below its RAM y. The paddle keeps moving a little after a press, so
the controller aims its position one step ahead (`y + velocity`) and holds still within 8 of the
target. Measured with sticky actions (v5's 0.25) and gymnasium's AtariPreprocessing (4 frames a step):
BENCHMARKS.md, "Pong".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

BALL_X, BALL_Y, PADDLE_Y = 49, 54, 51
Y_MIN, Y_MAX, PADDLE_X = 44.0, 206.0, 188.0
CENTRE, LEAD, DEAD_BAND, REST = 6.0, 1.0, 8.0, 125.0
NOOP, UP, DOWN = 0, 2, 3


def _reflect(y: float) -> float:
    """Where a ball travelling straight to `y` ends up between the walls (bounces unfolded)."""
    span = Y_MAX - Y_MIN
    t = (y - Y_MIN) % (2 * span)
    return Y_MIN + (t if t <= span else 2 * span - t)


class PongTracker:
    """`policy(obs) -> action`, bound to the env whose console RAM it reads (the observation is ignored)."""

    def __init__(self, env: Any):
        self.ale = env.unwrapped.ale
        self.prev: tuple[float, float, float] | None = None

    def __call__(self, obs: Any) -> np.int64:
        ram = self.ale.getRAM()
        bx, by, py = float(ram[BALL_X]), float(ram[BALL_Y]), float(ram[PADDLE_Y])
        if self.prev is None or by == 0:
            vx = vy = vp = 0.0
        else:
            vx, vy, vp = bx - self.prev[0], by - self.prev[1], py - self.prev[2]
        self.prev = (bx, by, py)
        if by > 0 and 0 < vx < 10 and bx < PADDLE_X and abs(vy) < 20:
            target = _reflect(by + vy * (PADDLE_X - bx) / vx)  # where it will cross the paddle's line
        elif by > 0 and vx > 0:
            target = by
        else:
            target = REST  # the ball moves away or is not in play: wait mid-court
        error = target - (py + CENTRE + LEAD * vp)
        return np.int64(DOWN if error > DEAD_BAND else UP if error < -DEAD_BAND else NOOP)


def tracker(env: Any) -> Callable[[Any], Any]:
    if env is None or not hasattr(env.unwrapped, "ale"):
        raise TypeError("the scripted Pong expert reads the console's RAM: it needs the ALE env it drives")
    return PongTracker(env)


tracker.reads_env = True  # type: ignore[attr-defined]  # no action from an observation alone (evaluate's action error)
