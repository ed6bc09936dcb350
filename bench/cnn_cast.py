"""What a batch of Pong-sized frames (uint8, 4x84x84) costs through the encoder factory's CNN, by the way the frames
reach it: SB3's float copy first, then a channels-last copy and a 1/255 pass (the code before `policy.ActorCritic`),
against uint8 frames cast once with the scale folded into the first convolution (now); and a 1,024-frame batch
whole against in chunks of `encoders.CNN_CHUNK`. Forward (no grad) and forward plus backward, in one process,
the ways alternating, the best of `--repeats` timings each.

    OMP_NUM_THREADS=1 python bench/cnn_cast.py --repeats 5

Last, two such CNNs (a round's critic values and discriminator rewards) over 1,024 frames each: one after the other
on one thread, against each on its own Python thread at once (what `Learner.round` does with them).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import platform
import time

import gymnasium as gym
import numpy as np
import torch as th

from gailkit.model.encoders import CNN_CHUNK, ImageCNN


def _before(enc: ImageCNN, x: th.Tensor) -> th.Tensor:
    """The path before: SB3's `preprocess_obs` float copy, a channels-last copy, a pass scaling by 1/255."""
    x = x.float().to(memory_format=th.channels_last)
    return enc.linear(enc.cnn(x * enc.scale))


def _best(fn, repeats: int, backward: bool) -> float:
    times = []
    for _ in range(repeats + 1):  # the first is a warm-up
        start = time.perf_counter()
        if backward:
            fn().sum().backward()
        else:
            with th.no_grad():
                fn()
        times.append(time.perf_counter() - start)
    return min(times[1:])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    th.set_num_threads(1)
    th.manual_seed(0)
    enc = ImageCNN(gym.spaces.Box(0, 255, (4, 84, 84), np.uint8))
    print(f"# {platform.machine()}, torch {th.__version__}, 1 thread, {time.strftime('%Y-%m-%d %H:%M')}")
    print("| frames | way in | forward ms | forward + backward ms |")
    print("| --- | --- | --- | --- |")
    rng = np.random.default_rng(0)
    for n in (256, 1024):
        x = th.as_tensor(rng.integers(0, 256, (n, 4, 84, 84), dtype=np.uint8))
        with th.no_grad():
            assert th.allclose(_before(enc, x), enc(x), atol=1e-5)  # the same function
        ways = {
            "float copy, channels-last copy, 1/255 pass (before)": lambda x=x: _before(enc, x),
            "uint8 cast once, scale folded, whole batch": lambda x=x: enc._forward(x),
        }
        if n > CNN_CHUNK:
            ways[f"uint8 cast once, scale folded, chunks of {CNN_CHUNK} (now)"] = lambda x=x: enc(x)
        for name, fn in ways.items():
            fwd, both = _best(fn, args.repeats, False), _best(fn, args.repeats, True)
            print(f"| {n} | {name} | {fwd * 1e3:.1f} | {both * 1e3:.1f} |", flush=True)
    other = ImageCNN(gym.spaces.Box(0, 255, (4, 84, 84), np.uint8))
    pool = concurrent.futures.ThreadPoolExecutor(1)

    def beside() -> th.Tensor:
        second = pool.submit(other, x)
        return enc(x) + second.result()

    with th.no_grad():
        alone = _best(lambda: enc(x) + other(x), args.repeats, False)
        both = _best(beside, args.repeats, False)
    print(f"\ntwo CNNs over {len(x)} frames: {alone * 1e3:.1f} ms one after the other, {both * 1e3:.1f} ms on two "
          f"threads ({alone / both:.2f}x)")  # fmt: skip


if __name__ == "__main__":
    main()
