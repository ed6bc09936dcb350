"""GAIL's own cost: end-to-end env steps/s of `gailkit train` against SB3 PPO's `learn()` on the true
reward, with the same PPO settings and env count, side by side in one run; and where a round's time goes.

    python bench/ppo_throughput.py --env Hopper-v4 --demos data/hopper.arrow --steps 200000

The PPO settings are gailkit's for the env (experts/<env>.gail.yaml, or the defaults). SB3 steps a
DummyVecEnv of the same number of envs with the same policy class and settings, and is timed over
`learn()`. gailkit is timed end to end (`time/elapsed_s` of its last round: collection, rewards,
PPO, discriminator, metrics; evaluation excluded) in three fleets: in-process, one actor process,
and one actor process with max_policy_lag 1 (collection of round v+1 overlaps learning round v).
`--threads N` gives SB3 and gailkit's learner (its `threads` setting) N torch threads (default 1; actor processes
keep one).
Each fleet's rate is also given for the rounds with the BC term (its first half when the policy reads frames;
the whole run otherwise) and those after it.
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from pathlib import Path

import torch as th
from stable_baselines3.common.logger import Logger

from gailkit.data import envs, experts
from gailkit.model import policy
from gailkit.run import metrics, train


def sb3_rate(cfg, steps: int, own_class: bool = False) -> float:
    """SB3's `learn()`; with SB3's own `ActorCriticPolicy` (its `preprocess_obs` casts frames to float before the
    CNN), or with `own_class` gailkit's `ActorCritic` (the same modules; frames reach the CNN as uint8)."""
    venv = experts.make_vec_env(cfg.env, cfg.total_envs, cfg.seed)
    model = policy.make_ppo(venv, cfg.ppo, cfg.policy, cfg.normalize_obs, "cpu", cfg.seed)
    if not own_class:  # make_ppo names SB3's class for saving: rebuild the policy with it
        model._setup_model()
    model.set_logger(Logger(folder=None, output_formats=[]))  # else learn() makes an empty folder in the temp folder
    model.learn(cfg.round_steps)  # warm-up: imports, first allocation
    t0 = time.perf_counter()
    model.learn(steps, reset_num_timesteps=False)
    rate = steps / (time.perf_counter() - t0)
    venv.close()
    return rate


def gailkit_rate(cfg, steps: int, tmp: Path, name: str) -> tuple[float, dict[str, float]]:
    cfg.total_steps, cfg.eval_every, cfg.checkpoint_every = steps, 0, 0
    train.train(cfg, tmp / name, quiet=True, log=lambda m: None)
    rows = metrics.read_rows(tmp / name / "metrics.csv")
    first, last = rows[0], rows[-1]  # the first round holds start-up costs: time from its end
    elapsed = float(last["time/elapsed_s"]) - float(last.get("time/eval_s") or 0) - float(first["time/elapsed_s"])
    rate = (int(last["env_steps"]) - int(first["env_steps"])) / elapsed
    split = {
        k: sum(float(r[f"time/{k}_s"]) for r in rows[1:]) / (len(rows) - 1)
        for k in ("collect", "reward", "ppo", "disc", "round")
    }
    # the rounds with the BC term (the first half of a run when the policy reads frames) and those after it, each
    # timed from the round before's end (evaluation excluded)
    wall = [float(r["time/elapsed_s"]) - float(r.get("time/eval_s") or 0) for r in rows]
    for phase, with_bc in (("bc", True), ("after", False)):
        part = [i for i in range(1, len(rows)) if bool(rows[i].get("bc/loss")) == with_bc]
        seconds = sum(wall[i] - float(rows[i - 1]["time/elapsed_s"]) for i in part)
        steps = sum(int(rows[i]["env_steps"]) - int(rows[i - 1]["env_steps"]) for i in part)
        split[f"{phase}_rate"] = steps / seconds if part else float("nan")
    return rate, split


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--env", default="Hopper-v4")
    p.add_argument("--demos", default="data/")
    p.add_argument("--steps", type=int, default=200_000)
    p.add_argument("--set", action="append", default=[])
    p.add_argument(
        "--threads", type=int, default=1, help="torch threads of SB3 and of gailkit's learner (actors keep 1 each)"
    )
    args = p.parse_args()
    th.set_num_threads(args.threads)
    envs.spaces(args.env)
    base = train.train_config(args.env, args.demos, None, args.set)
    print(
        f"# {args.env}: {base.total_envs} envs x {base.ppo.n_steps} steps per round, batch {base.ppo.batch_size}, "
        f"{base.ppo.n_epochs} epochs, net {base.policy.net_arch}; {args.steps:,} env steps; {platform.machine()}, "
        f"torch {th.__version__} ({args.threads} thread{'s' if args.threads > 1 else ''}), {time.strftime('%Y-%m-%d')}",
        flush=True,
    )
    sb3 = sb3_rate(base, args.steps)
    print(f"SB3 PPO learn() on the true reward: {sb3:,.0f} env steps/s", flush=True)
    rows = [("SB3 PPO learn() (true reward, no discriminator)", sb3, None)]
    own = sb3_rate(base, args.steps, own_class=True)
    print(f"SB3 PPO learn() with gailkit's policy class: {own:,.0f} env steps/s", flush=True)
    rows.append(("SB3 PPO learn(), gailkit's policy class (frames to the CNN as uint8)", own, None))
    fleets = {
        "gailkit train, in-process (fleet.actors 0)": [],
        "gailkit train, 1 actor process": ["fleet.actors=1", f"fleet.envs_per_actor={base.total_envs}"],
        "gailkit train, 1 actor process, max_policy_lag 1": [
            "fleet.actors=1",
            f"fleet.envs_per_actor={base.total_envs}",
            "fleet.max_policy_lag=1",
        ],
    }
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, extra) in enumerate(fleets.items()):
            cfg = train.train_config(args.env, args.demos, None, [f"threads={args.threads}", *args.set, *extra])
            rate, split = gailkit_rate(cfg, args.steps, Path(tmp), f"run{i}")
            rows.append((name, rate, split))
            print(
                f"{name}: {rate:,.0f} env steps/s ({rate / sb3:.2f}x SB3); rounds with the BC term "
                f"{split['bc_rate']:,.0f} ({split['bc_rate'] / sb3:.2f}x), after it {split['after_rate']:,.0f} "
                f"({split['after_rate'] / sb3:.2f}x)",
                flush=True,
            )
    print(
        "\n| trainer | env steps/s | vs SB3 PPO | rounds with the BC term | rounds after it "
        "| round s | collect s | reward s | PPO s | discriminator s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, rate, split in rows:
        parts = (
            ["–"] * 7
            if split is None
            else [f"{split[k] / sb3:.2f}x" for k in ("bc_rate", "after_rate")]
            + [f"{split[k]:.3f}" for k in ("round", "collect", "reward", "ppo", "disc")]
        )
        print(f"| {name} | {rate:,.0f} | {rate / sb3:.2f}x | " + " | ".join(parts) + " |")


if __name__ == "__main__":
    main()
