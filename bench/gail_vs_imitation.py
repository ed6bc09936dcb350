"""gailkit's GAIL against imitation's GAIL on the same demos, machine and env-step budget, in one run.

    python bench/gail_vs_imitation.py --env CartPole-v1 --seeds 0 1 2 --steps 150000
    python bench/gail_vs_imitation.py --env Pendulum-v1 --seeds 0 --steps 500000 --skip-imitation

imitation runs with its documented GAIL settings (docs, "Train an Agent using GAIL"): 8 envs, PPO
batch 64, lr 4e-4, gamma 0.95, 5 epochs, ent 0; demo_batch_size 1024, replay 512, 8 disc updates
per round, BasicRewardNet with RunningNorm. gailkit runs with its shipped defaults
(experts/<env>.gail.yaml). Both are evaluated the same way: deterministic policy, the same
episode seeds, every `--eval-every-steps` env steps; evaluation time is excluded from wall-clock.
Normalized return: (R - R_random) / (R_expert - R_random), R_expert = the demos' mean return.
Prints a Markdown table for BENCHMARKS.md and writes JSON lines to --out.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import torch as th

from gailkit import demos, envs, train
from gailkit.demos.imitation_adapter import to_trajectories


def evaluate(act, env_id: str, episodes: int, seed: int) -> float:
    return envs.run_episodes(act, env_id, episodes, seed)["return_mean"]


def run_gailkit(env_id: str, demos_path: str, seed: int, steps: int, eval_every_steps: int, episodes: int) -> dict:
    cfg = train.train_config(env_id, demos_path, None, [f"seed={seed}", f"total_steps={steps}", "checkpoint_every=0",
                                                        f"eval_episodes={episodes}"])
    per_round = cfg.ppo.n_steps * cfg.n_envs
    cfg.eval_every = max(1, eval_every_steps // per_round)
    with tempfile.TemporaryDirectory() as tmp:
        summary = train.train(cfg, Path(tmp) / "run", quiet=True, log=lambda m: None)
        import csv

        rows = list(csv.DictReader(open(Path(tmp) / "run" / "metrics.csv")))
    curve, eval_time = [], 0.0
    split = {k: float(np.mean([float(r[f"time/{k}_s"]) for r in rows])) for k in ("collect", "reward", "ppo", "disc")}
    for r in rows:
        if r["time/eval_s"]:
            eval_time += float(r["time/eval_s"])
            curve.append((int(r["env_steps"]), float(r["time/elapsed_s"]) - eval_time, float(r["eval/return_mean"])))
    return {"curve": curve, "round_split_s": split, "per_round_steps": per_round,
            "expert": summary["expert_return"], "random": summary["random_return"]}


def run_imitation(env_id: str, d: demos.Demos, seed: int, steps: int, eval_every_steps: int, episodes: int,
                  eval_seed: int) -> dict:
    from imitation.algorithms.adversarial.gail import GAIL
    from imitation.rewards.reward_nets import BasicRewardNet
    from imitation.util.networks import RunningNorm
    from stable_baselines3 import PPO
    from stable_baselines3.ppo import MlpPolicy

    venv = envs.make_vec_env(env_id, n_envs=8, seed=seed)
    learner = PPO(env=venv, policy=MlpPolicy, batch_size=64, ent_coef=0.0, learning_rate=4e-4, gamma=0.95,
                  n_epochs=5, seed=seed, device="cpu")
    reward_net = BasicRewardNet(observation_space=venv.observation_space, action_space=venv.action_space,
                                normalize_input_layer=RunningNorm)
    trainer = GAIL(demonstrations=to_trajectories(d), demo_batch_size=1024, gen_replay_buffer_capacity=512,
                   n_disc_updates_per_round=8, venv=venv, gen_algo=learner, reward_net=reward_net,
                   allow_variable_horizon=True, init_tensorboard=False)
    space = venv.action_space
    curve, state = [], {"eval": 0.0, "next": eval_every_steps, "start": time.perf_counter()}

    def act(obs):
        a, _ = learner.predict(obs, deterministic=True)
        return a

    def callback(round_num: int) -> None:
        done_steps = (round_num + 1) * learner.n_steps * venv.num_envs
        if done_steps >= state["next"] or done_steps >= steps:
            t0 = time.perf_counter()
            ret = evaluate(act, env_id, episodes, eval_seed)
            state["eval"] += time.perf_counter() - t0
            curve.append((done_steps, time.perf_counter() - state["start"] - state["eval"], ret))
            state["next"] = done_steps + eval_every_steps

    trainer.train(steps, callback=callback)
    del space
    return {"curve": curve, "per_round_steps": learner.n_steps * venv.num_envs}


def first_reaching(curve, target_norm, r_random, r_expert):
    for steps, seconds, ret in curve:
        if (ret - r_random) / (r_expert - r_random) >= target_norm:
            return steps, seconds
    return None, None


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--demos", default="data/")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=150_000)
    p.add_argument("--eval-every-steps", type=int, default=10_000)
    p.add_argument("--eval-episodes", type=int, default=5)
    p.add_argument("--target", type=float, default=0.95)
    p.add_argument("--skip-imitation", action="store_true")
    p.add_argument("--out", type=Path, default=Path("bench/out/gail.jsonl"))
    args = p.parse_args()
    th.set_num_threads(2)
    obs_space, act_space = envs.spaces(args.env)
    d = demos.load(args.demos, env_id=args.env, spaces=(obs_space, act_space))
    eval_seed = 1_000_000  # gailkit evaluates on seeds base + 1_000_000 + i; imitation gets the same episodes
    args.out.parent.mkdir(parents=True, exist_ok=True)
    print(f"# {args.env}, {args.steps:,} env steps, seeds {args.seeds}, {platform.machine()}, "
          f"torch {th.__version__}, {time.strftime('%Y-%m-%d')}")
    rows = []
    for seed in args.seeds:
        g = run_gailkit(args.env, args.demos, seed, args.steps, args.eval_every_steps, args.eval_episodes)
        r_exp, r_rand = g["expert"], g["random"]
        results = {"gailkit": g}
        if not args.skip_imitation:
            results["imitation"] = run_imitation(args.env, d, seed, args.steps, args.eval_every_steps,
                                                 args.eval_episodes, eval_seed + seed)
        for tool, res in results.items():
            steps_to, secs_to = first_reaching(res["curve"], args.target, r_rand, r_exp)
            final = (res["curve"][-1][2] - r_rand) / (r_exp - r_rand)
            row = {"env": args.env, "tool": tool, "seed": seed, "steps_to_target": steps_to, "seconds_to_target": secs_to,
                   "final_normalized": final, "total_seconds": res["curve"][-1][1], "expert": r_exp, "random": r_rand,
                   "curve": res["curve"], "round_split_s": res.get("round_split_s"), "per_round_steps": res["per_round_steps"]}
            rows.append(row)
            with open(args.out, "a") as f:
                f.write(json.dumps(row) + "\n")
            print(f"{tool:9} seed {seed}: to {args.target} at {steps_to} steps / "
                  f"{'-' if secs_to is None else f'{secs_to:.0f} s'}, final normalized {final:.2f}, "
                  f"train time {row['total_seconds']:.0f} s", flush=True)
    print("\n| tool | seed | steps to target | wall-clock to target (s) | final normalized | training time (s) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        s = "not reached" if r["steps_to_target"] is None else f"{r['steps_to_target']:,}"
        t = "-" if r["seconds_to_target"] is None else f"{r['seconds_to_target']:.0f}"
        print(f"| {r['tool']} | {r['seed']} | {s} | {t} | {r['final_normalized']:.2f} | {r['total_seconds']:.0f} |")
    for r in rows:
        if r["round_split_s"]:
            sp = r["round_split_s"]
            print(f"gailkit seed {r['seed']} round ({r['per_round_steps']} steps) split, s: collect {sp['collect']:.4f}, "
                  f"reward {sp['reward']:.4f}, ppo {sp['ppo']:.4f}, disc {sp['disc']:.4f}")


if __name__ == "__main__":
    main()
