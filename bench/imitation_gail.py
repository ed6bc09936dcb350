"""imitation 1.0.1's GAIL (or, with `--algo bc`, its BC) with its own tuned settings, run in the imitation
environment (.venv-imitation).

    .venv-imitation/bin/python bench/imitation_gail.py --env Hopper-v4 --demos data/hopper.arrow --seed 0 \
        --steps 1000000 --eval-every-steps 20000 --eval-episodes 10 --eval-seed 1000000 --out run.json
    .venv-imitation/bin/python bench/imitation_gail.py --algo bc --env Hopper-v4 --demos data/hopper.arrow --out bc.json

Called by bench/gail_vs_imitation.py; not a gailkit feature. The settings are imitation's own, from
`imitation/scripts/config/tuned_hps/gail_seals_<env>_best_hp_eval.json` inside the installed
package (tuned on the seals/ versions of the envs), built the way imitation's `train_adversarial`
script builds them: PPO with RunningNorm-normalized features, a BasicRewardNet with RunningNorm
inputs wrapped in a NormalizedRewardNet, 8 envs (`rl.batch_size` = n_steps x 8). BC: the tuned
`bc_seals_<env>` settings (policy, batch size, l2 weight, optimizer, epochs), as imitation's `train_bc`
builds them. The demos are read with gailkit's loader (imitation's own is 170x slower) and handed over
as imitation `Transitions` (what imitation flattens trajectories into; subsampled demos have no
trajectories). A tuned demo batch larger than the demos is cut to their number (imitation refuses it
otherwise), and the output says so. Evaluation: deterministic policy, episodes seeded `eval_seed + i`, every
`eval_every_steps` env steps; its time is left out of the wall-clock.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch as th

TUNED = {"Hopper": "hopper", "HalfCheetah": "half_cheetah", "Walker2d": "walker", "Ant": "ant", "Swimmer": "swimmer"}


# imitation's documented GAIL example ("Train an Agent using GAIL"), for envs it has no tuned settings for.
DOCUMENTED = {
    "algorithm_kwargs": {"demo_batch_size": 1024, "gen_replay_buffer_capacity": 512, "n_disc_updates_per_round": 8},
    "rl": {
        "batch_size": 8 * 2048,
        "rl_kwargs": {"batch_size": 64, "ent_coef": 0.0, "learning_rate": 4e-4, "gamma": 0.95, "n_epochs": 5},
    },
    "policy": {"policy_cls": "MlpPolicy", "policy_kwargs": {}},
    "reward": {},
}


def tuned_settings(env_id: str, algo: str = "gail") -> dict:
    import imitation

    if env_id.split("-")[0] not in TUNED:
        if algo == "gail":
            return DOCUMENTED
        raise SystemExit(f"imitation has no tuned {algo} settings for {env_id}")
    name = TUNED[env_id.split("-")[0]]
    path = (
        Path(imitation.__file__).parent / "scripts" / "config" / "tuned_hps" / f"{algo}_seals_{name}_best_hp_eval.json"
    )
    return json.loads(path.read_text())


def as_transitions(d):
    """The demos as imitation `Transitions` (dones = terminated, as `flatten_trajectories` sets them)."""
    from imitation.data import types

    if d.acts is None:
        raise SystemExit("imitation's BC and GAIL need the expert's actions; these demos have none")
    n = len(d.acts)
    return types.Transitions(
        obs=np.asarray(d.obs),
        acts=np.asarray(d.acts),
        infos=np.array([{}] * n),
        next_obs=np.asarray(d.next_obs),
        dones=np.asarray(d.terminated, bool),
    )


def run_bc(args, d, obs_space, act_space) -> dict:
    """imitation's BC with its tuned settings, then one evaluation: a curve of one point (0 env steps)."""
    from imitation.algorithms import bc

    from gailkit.data import envs

    hp = tuned_settings(args.env, "bc")
    demos_t = as_transitions(d)
    th.manual_seed(args.seed)  # the policy's initialization too
    policy = _cls(hp["policy"]["policy_cls"])(
        observation_space=obs_space, action_space=act_space, lr_schedule=lambda _: 1.0, **policy_kwargs(hp)
    )
    b = hp["bc"]
    batch = min(int(b["batch_size"]), len(demos_t))
    trainer = bc.BC(
        observation_space=obs_space,
        action_space=act_space,
        policy=policy,
        demonstrations=demos_t,
        rng=np.random.default_rng(args.seed),
        batch_size=batch,
        l2_weight=b["l2_weight"],
        optimizer_cls=_cls(b["optimizer_cls"]),
        optimizer_kwargs=b["optimizer_kwargs"],
        device="cpu",
    )
    t0 = time.perf_counter()
    train = {k: v for k, v in b["train_kwargs"].items() if k in ("n_epochs", "n_batches") and v is not None}
    trainer.train(**train, progress_bar=False)
    seconds = time.perf_counter() - t0

    def act(obs):
        return trainer.policy.predict(obs, deterministic=True)[0]

    ret = envs.run_episodes(act, args.env, args.eval_episodes, args.eval_seed)["return_mean"]
    return {"curve": [(0, seconds, ret)], "settings": {**b, "batch_size": batch}, "tuned_batch_size": b["batch_size"]}


def policy_kwargs(hp: dict) -> dict:
    """The SB3 policy's keyword arguments from a tuned settings file's `policy.policy_kwargs` (classes named
    as `py/type` strings there; an old-style `net_arch` list holds one dict)."""
    pk, out = hp["policy"]["policy_kwargs"], {}
    if "activation_fn" in pk:
        out["activation_fn"] = _cls(pk["activation_fn"])
    if "net_arch" in pk:
        out["net_arch"] = pk["net_arch"][0] if isinstance(pk["net_arch"], list) else pk["net_arch"]
    if "features_extractor_class" in pk:
        out["features_extractor_class"] = _cls(pk["features_extractor_class"])
        out["features_extractor_kwargs"] = {"normalize_class": _cls(pk["features_extractor_kwargs"]["normalize_class"])}
    return out


def _cls(spec):
    import importlib

    module, _, name = spec["py/type"].rpartition(".")
    return getattr(importlib.import_module(module), name)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--env", required=True)
    p.add_argument("--demos", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=1_000_000)
    p.add_argument("--eval-every-steps", type=int, default=20_000)
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--eval-seed", type=int, default=1_000_000)
    p.add_argument("--n-envs", type=int, default=8)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--algo", choices=["gail", "bc"], default="gail")
    args = p.parse_args()

    from imitation.algorithms.adversarial.gail import GAIL
    from imitation.rewards.reward_nets import BasicRewardNet, NormalizedRewardNet
    from imitation.util.networks import RunningNorm
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv

    from gailkit.data import demos, envs

    obs_space, act_space = envs.spaces(args.env)
    d = demos.load(args.demos, env_id=args.env, spaces=(obs_space, act_space))
    if args.algo == "bc":
        args.out.write_text(json.dumps(run_bc(args, d, obs_space, act_space)))
        return
    hp = tuned_settings(args.env)
    factory = envs.make_factory(args.env)
    venv = DummyVecEnv([factory] * args.n_envs)
    venv.seed(args.seed)
    rl = hp["rl"]
    policy = hp["policy"]["policy_cls"]
    policy = _cls(policy) if isinstance(policy, dict) else policy
    learner = PPO(
        policy,
        venv,
        n_steps=rl["batch_size"] // args.n_envs,
        seed=args.seed,
        device="cpu",
        policy_kwargs=policy_kwargs(hp),
        **rl["rl_kwargs"],
    )
    reward_net = BasicRewardNet(obs_space, act_space, normalize_input_layer=RunningNorm)
    if hp["reward"].get("normalize_output_layer"):
        reward_net = NormalizedRewardNet(reward_net, _cls(hp["reward"]["normalize_output_layer"]))
    algo_kwargs = dict(hp["algorithm_kwargs"])
    demos_t = as_transitions(d)
    algo_kwargs["demo_batch_size"] = min(algo_kwargs["demo_batch_size"], len(demos_t))
    trainer = GAIL(
        demonstrations=demos_t,
        venv=venv,
        gen_algo=learner,
        reward_net=reward_net,
        allow_variable_horizon=True,
        init_tensorboard=False,
        **algo_kwargs,
    )

    def act(obs):
        return learner.predict(obs, deterministic=True)[0]

    curve, state = [], {"eval": 0.0, "next": args.eval_every_steps, "start": time.perf_counter()}

    def callback(round_num: int) -> None:
        done = (round_num + 1) * learner.n_steps * venv.num_envs
        if done >= state["next"] or done >= args.steps:
            t0 = time.perf_counter()
            ret = envs.run_episodes(act, args.env, args.eval_episodes, args.eval_seed)["return_mean"]
            state["eval"] += time.perf_counter() - t0
            curve.append((done, time.perf_counter() - state["start"] - state["eval"], ret))
            state["next"] = done + args.eval_every_steps

    th.manual_seed(args.seed)
    np.random.seed(args.seed)
    trainer.train(args.steps, callback=callback)
    args.out.write_text(
        json.dumps(
            {
                "curve": curve,
                "settings": hp["rl"],
                "disc": algo_kwargs,
                "tuned_demo_batch_size": hp["algorithm_kwargs"]["demo_batch_size"],
                "per_round_steps": learner.n_steps * venv.num_envs,
            }
        )
    )


if __name__ == "__main__":
    main()
