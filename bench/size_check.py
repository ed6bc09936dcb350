"""What the memory guard costs on the wire: `limits.check_ipc` (declared sizes read from a message's Arrow
metadata) against decoding the same FRAGMENT, for one Hopper-sized fragment (256 steps x 8 envs).

    python bench/size_check.py [--repeats 300]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from gailkit.core import limits
from gailkit.core.fragments import Fragment
from gailkit.rollout import wire


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=300)
    args = parser.parse_args()
    t, e, rng = 256, 8, np.random.default_rng(0)
    frag = Fragment(
        obs=rng.standard_normal((t, e, 11), np.float32),
        acts=rng.standard_normal((t, e, 3), np.float32),
        next_obs=rng.standard_normal((t, e, 11), np.float32),
        terminated=np.zeros((t, e), bool),
        truncated=np.zeros((t, e), bool),
        log_probs=np.zeros((t, e), np.float32),
        rews=np.zeros((t, e), np.float32),
        first_starts=np.zeros(e, bool),
        episode_returns=np.zeros(0),
        episode_lengths=np.zeros(0, np.int64),
        actor_id=0,
        policy_version=1,
        sample_seconds=0.1,
    )
    body = wire.encode_fragment(frag)

    def per_call_us(fn) -> float:
        fn()
        start = time.perf_counter()
        for _ in range(args.repeats):
            fn()
        return (time.perf_counter() - start) / args.repeats * 1e6

    check = per_call_us(lambda: limits.check_ipc(body, "message"))
    decode = per_call_us(lambda: wire.decode_fragment(body, 0, 1))
    print(
        f"fragment {len(body) / 1024:.0f} KiB: size check {check:.0f} us, decode (size check included) {decode:.0f} us "
        f"({check / decode:.0%} of decoding); {time.strftime('%Y-%m-%d')}"
    )


if __name__ == "__main__":
    main()
