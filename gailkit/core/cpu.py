"""How many torch threads the learner's process computes with (`threads`).

torch starts with one intra-op thread per core. The learner runs its ops from two Python threads (the
discriminator's steps beside the PPO update), and local actor processes take cores of their own: each of those
threads then asks for a team of threads on cores that are already busy, and OpenMP's teams wait on each other.
Measured on 2 cores (BENCHMARKS.md, "The learner's torch threads"): a BC step on CartPole took 0.47 ms with one
thread and 0.43 ms with two on a quiet machine, 2.38 ms with two beside one busy process
(`bench/learner_threads.py`); Hopper's `gailkit train` ran at 0.57x of its one-thread rate with torch's default of
two, where SB3's `learn()` (one Python thread) did not change (`bench/ppo_throughput.py --threads 1|2`). Frames are
another matter: a CNN's convolutions are large enough for a team of threads to pay.
"""

from __future__ import annotations

import os


def cores() -> int:
    """The cores this process may run on (its affinity: a container's or `taskset`'s share, not the host's)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def learner_threads(setting: int, frames: bool) -> int | None:
    """`threads` resolved: itself when >= 1; for auto (-1), None (torch left as it is) when the user set
    OMP_NUM_THREADS, 1 for vector observations (small matrices: a second thread never paid), and every core for
    frames (a CNN's convolutions are large enough to pay for a team: Pong's `gailkit train` ran 1.28-1.34x faster
    with two threads than with one, an actor process and the discriminator's thread beside it)."""
    if setting >= 1:
        return setting
    if os.environ.get("OMP_NUM_THREADS"):
        return None
    return cores() if frames else 1
