"""The CUDA path, end to end: a few GAIL rounds with `--device cuda`, checking every tensor's device.

    python bench/cuda_check.py            # on a machine with a GPU; exits 1 on any mismatch
    python bench/cuda_check.py --pong     # the CNN path: Pong's frames (data/pong.arrow, gailkit[atari])

imitation's users hit device-mismatch errors (reward net on one device, batches on another);
this trains Hopper for a few rounds on CUDA (BC, absorbing states, gradient penalty, replay: the
default recipe's every path) and asserts that the policy, the discriminator, the expert batch and
the rewards all live on the GPU, that a checkpoint loads on the CPU, and that a run resumes on CUDA.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch as th

from gailkit.run import checkpoint, train
from gailkit.run.callbacks import Callback


class DeviceCheck(Callback):
    """After every round: where the policy, its normalizer, the discriminator, the expert batch, the
    replayed generator inputs and the rewards live."""

    def __init__(self) -> None:
        self.seen: dict[str, th.device] = {}

    def on_round(self, run, stats) -> None:
        learner = run.learner
        self.seen["policy"] = next(learner.generator.policy.parameters()).device
        encoder = learner.generator.policy.features_extractor  # a normalizing flatten (buffers) or a CNN
        self.seen["encoder"] = next(iter([*encoder.parameters(), *encoder.buffers()])).device
        self.seen["disc"] = next(learner.disc.net.parameters()).device
        self.seen["disc_inputs"] = learner.expert.batch.obs_absorbing.device
        self.seen["rewards"] = learner.disc.reward(learner.expert.batch[:8]).device
        if learner.replay:
            self.seen["replay"] = learner.replay[-1].device


def main() -> int:
    device = "cuda"
    if not th.cuda.is_available():
        if "--cpu" not in sys.argv:
            print("no CUDA device: nothing to check here (--cpu runs the same script on the CPU)")
            return 0
        device = "cpu"
    check = DeviceCheck()
    env, demos, steps = "Hopper-v4", "data/hopper.arrow", (8192, 12288)
    extra = ["disc.grad_penalty=1.0", "disc.replay_rounds=2"]
    if "--pong" in sys.argv:  # CNN encoders for policy, value and discriminator on uint8 frame stacks
        env, demos, steps = "ALE/Pong-v5", "data/pong.arrow", (2048, 3072)
        extra = ["disc.grad_penalty=1.0", "disc.replay_rounds=2", "bc.epochs=1", "eval_episodes=1"]
    cfg = train.train_config(env, demos, None, [f"total_steps={steps[0]}", f"device={device}", "eval_every=2", *extra])
    with tempfile.TemporaryDirectory() as tmp:
        summary = train.train(cfg, Path(tmp) / "run", quiet=True, callbacks=[check])
        state = checkpoint.load(Path(tmp) / "run" / "final" / "checkpoint.pt", device="cpu")
        resumed = train.train(
            train.train_config(env, demos, None, [f"total_steps={steps[1]}", f"device={device}", *extra[2:]]),
            Path(tmp) / "run",
            resume=True,
            quiet=True,
            callbacks=[check],
        )
    seen = check.seen
    bad = {k: str(v) for k, v in seen.items() if v.type != device}
    print(f"devices seen: { {k: str(v) for k, v in seen.items()} }; eval return {summary['return_mean']:.1f}")
    print(
        f"checkpoint tensors load on cpu: {all(t.device.type == 'cpu' for t in state.learner['generator']['policy'].values())}; "
        f"resumed on {device} to round {resumed['rounds']}"
    )
    if bad or len(seen) < 6:
        print(f"FAIL: not on {device}: {bad or 'some checks never ran'}")
        return 1
    print(f"OK: the learner stayed on {device}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
