"""Pong's data: the scripted expert's and a random policy's returns, what the demo file and its frame
stacks cost on disk and in memory, and what a fragment of Pong frames costs on the wire.

    python bench/pong.py --demos data/pong.arrow --random-episodes 10
    python bench/pong.py --demos data/pong.arrow --bc           # BC alone on the same demos
    python bench/pong.py --demos pong20.arrow --bc --set bc.epochs=31  # BC alone, as many steps as a run's BC
    python bench/pong.py --summarize runs/pong                   # a `gailkit train` run's curve
    python bench/pong.py --train-memory                          # peak memory of a one-round train
    python bench/pong.py --read-memory                           # peak memory of reading the demo file
    python bench/pong.py --replay-memory                         # SAC's replay on Pong's stacks: bytes, seconds
    python bench/pong.py --disc-shift 1500                       # the discriminator: random shifts or not, held out
    python bench/pong.py --bc-probe 1000 --bc-lr 1e-3            # what BC's CNN learns: train vs held-out game
    python bench/pong.py --bc-probe 500 --bc-net-arch 64,64       # the same with tanh layers after the CNN
    python bench/pong.py --cnn-layout 6                           # a learner round: NCHW vs channels-last CNN input
    python bench/pong.py --stalls 10                              # the scripted expert's games: where play stops

`--bc` trains gailkit's BC warm start alone (one round in which the cloned policy is not trained: the
critic warm-up) and evaluates it as a run does. `--summarize` reads a run's metrics: env steps and
seconds (evaluation time left out) to 0.9 of the expert, best and final, with both references.

The demos are recorded beforehand (`gailkit demos record --expert scripted --env ALE/Pong-v5
--preprocess atari ...`); their metadata carries the expert's return over the recorded episodes.
Collection speed against SB3 PPO is `bench/ppo_throughput.py` with the Pong settings (BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from gail_vs_imitation import eval_curve, first_reaching  # the same curve and threshold

from gailkit.config import EnvConfig
from gailkit.core.fragments import Fragment
from gailkit.data import demos, envs
from gailkit.data.demos import stacks
from gailkit.rollout import wire
from gailkit.run import checkpoint, metrics, train

ENV = EnvConfig(id="ALE/Pong-v5", preprocess="atari", frame_stack=4)


def random_return(episodes: int, seed: int) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    out = envs.run_episodes(lambda obs: rng.integers(6), ENV, episodes, seed)
    return out["return_mean"], out["return_std"]


def fragment_bytes(d: demos.Demos, n_steps: int = 256, n_envs: int = 8) -> tuple[int, int]:
    """Encoded and raw bytes of one fragment of real (stacked) Pong observations."""
    rows = n_steps * n_envs
    obs = d.obs[:rows].reshape(n_steps, n_envs, *d.obs.shape[1:])
    nxt = d.next_obs[:rows].reshape(obs.shape)
    f = Fragment(
        obs=obs,
        acts=d.acts[:rows].reshape(n_steps, n_envs),
        next_obs=nxt,
        terminated=np.zeros((n_steps, n_envs), bool),
        truncated=np.zeros((n_steps, n_envs), bool),
        log_probs=np.zeros((n_steps, n_envs), np.float32),
        rews=np.zeros((n_steps, n_envs), np.float32),
        first_starts=np.zeros(n_envs, bool),
        episode_returns=np.zeros(0, np.float32),
        episode_lengths=np.zeros(0, np.int64),
        actor_id=0,
        policy_version=0,
    )
    body = wire.encode_fragment(f)
    return len(body), obs.nbytes + nxt.nbytes + rows * 8


def summarize(run: Path) -> None:
    """A run's evaluations (steps and seconds to 0.9, best, final), then its training games and PPO's update."""
    rows = metrics.read_rows(run / "metrics.csv")
    curve = eval_curve(rows)
    refs = checkpoint.load(run / "best" / "checkpoint.pt").references
    r_exp, r_rand = refs.expert_return, refs.random_return
    steps, secs = first_reaching(curve, 0.9, r_rand, r_exp)
    score = [(s, t, (r - r_rand) / (r_exp - r_rand), r) for s, t, r in curve]
    best = max(score, key=lambda x: x[2])
    print(f"{run}: expert {r_exp:.1f} ({refs.expert_source}), random {r_rand:.1f}; {len(curve)} evaluations")
    print(f"  to 0.9: {'not reached' if steps is None else f'{steps:,} env steps, {secs:.0f} s'}")
    print(f"  best {best[2]:.2f} (return {best[3]:.1f}) at {best[0]:,} steps; final {score[-1][2]:.2f} "
          f"(return {score[-1][3]:.1f}) at {score[-1][0]:,} steps, {score[-1][1]:.0f} s")  # fmt: skip
    for s, t, n, r in score:
        print(f"  {s:>9,} steps {t:>7.0f} s  return {r:6.1f}  normalized {n:5.2f}")
    games = [r for r in rows if r.get("rollout/ep_rew_mean")]
    print("  training games (sampled actions), mean of each 20 rounds that ended one: return, length")
    for k in range(0, len(games), 20):
        part = games[k : k + 20]
        ret, length = (np.mean([float(r[f"rollout/ep_{c}_mean"]) for r in part]) for c in ("rew", "len"))
        print(f"  {part[0]['env_steps']:>9}–{part[-1]['env_steps']} steps  return {ret:6.2f}  length {length:6.0f}")
    for col in ("train/clip_fraction", "train/approx_kl", "bc/loss"):
        v = np.array([float(r[col]) for r in rows if r.get(col)])
        if len(v):
            p5, p50, p95 = np.percentile(v, [5, 50, 95])
            print(f"  {col}: first {v[0]:.3f}, last {v[-1]:.3f}; 5th/50th/95th percentile {p5:.3f}/{p50:.3f}/{p95:.3f}")


def behaviour_cloning_alone(demos_path: Path, episodes: int, sets: list[str] = ()) -> None:
    cfg = train.train_config(ENV.id, str(demos_path), None, ["total_steps=1", f"eval_episodes={episodes}", *sets])
    with tempfile.TemporaryDirectory() as tmp:
        out = train.train(cfg, Path(tmp) / "bc", quiet=True, log=lambda m: None)
        refs = checkpoint.load(Path(tmp) / "bc" / "final" / "checkpoint.pt").references
    r_exp, r_rand = refs.expert_return, refs.random_return
    print(
        f"BC alone ({cfg.bc.epochs if cfg.bc.epochs > 0 else 'auto'} epochs): return {out['return_mean']:.1f} over "
        f"{episodes} games, normalized {(out['return_mean'] - r_rand) / (r_exp - r_rand):.2f} (expert {r_exp:.1f}, "
        f"random {r_rand:.1f}); {out['seconds']:.0f} s"
    )


def bc_probe(demos_path: Path, steps: int, lr: float, net_arch: str = "") -> None:
    """BC (PPO's `bc_steps`, the run's CNN) on the demos' longest game; on 1,024 frames of it and of the other
    games: how much the logits and the actor's latent (the CNN's features after `net_arch`'s layers) vary across
    frames (std), the argmax's accuracy, and NOOP's share. `net_arch` "64,64": the layers before
    `policy.default_net_arch`."""
    import torch as th

    from gailkit.algo import generator
    from gailkit.algo.generator.common import bc_tensors
    from gailkit.core import obs as obs_tree
    from gailkit.core.framestacks import FrameStacks

    arch = [f"policy.net_arch=[{net_arch}]"] if net_arch else []
    cfg = train.train_config(ENV.id, str(demos_path), None, ["generator=ppo", *arch])
    spaces = envs.spaces(ENV)
    d = demos.load(demos_path, ENV.id, spaces, frame_stack=ENV.frame_stack)
    assert isinstance(d.obs, FrameStacks)
    ids, counts = np.unique(d.episode_id, return_counts=True)
    train_rows = np.where(d.episode_id == ids[np.argmax(counts)])[0]
    held_rows = np.where(d.episode_id != ids[np.argmax(counts)])[0]
    th.manual_seed(0)
    gen = generator.make(cfg, *spaces, "cpu")
    rng = np.random.default_rng(0)
    obs_t = bc_tensors(d.obs, "cpu")

    def probe(rows: np.ndarray) -> str:
        idx = np.sort(rng.choice(rows, 1024))
        pol = gen.policy
        with th.no_grad():
            f = pol.extract_features(obs_tree.take(obs_t, th.as_tensor(idx)), pol.pi_features_extractor)
            latent = pol.mlp_extractor.forward_actor(f)
            logits = pol.action_net(latent)
        t = d.acts[idx].astype(int)
        acc, noop = (logits.argmax(1).numpy() == t).mean(), (t == 0).mean()
        return (
            f"logit std {float(logits.std(0).mean()):.4f}, latent std {float(latent.std(0).mean()):.5f}, "
            f"accuracy {acc:.3f} (NOOP's share {noop:.3f})"
        )

    print(f"BC probe: trained on game {ids[np.argmax(counts)]} ({len(train_rows):,} transitions), held out "
          f"{len(held_rows):,}; lr {lr}; actor layers after the CNN {cfg.policy.net_arch or 'default'}")  # fmt: skip
    print(f"  at init: held out {probe(held_rows)}", flush=True)
    train_obs = FrameStacks(d.obs.frames, d.obs.index[train_rows])
    for k in range(4):
        losses = gen.bc_steps(train_obs, d.acts[train_rows], steps // 4, 256, lr, rng)
        print(f"  {(k + 1) * (steps // 4)} steps: loss {np.mean(losses[-20:]):.3f}; training game {probe(train_rows)}; "
              f"held out {probe(held_rows)}", flush=True)  # fmt: skip


def train_memory(demos_path: Path) -> None:
    """Peak resident memory of a `gailkit train` of one round (1,024 env steps, BC warm start of one epoch,
    in-process collection) on the demos: reading them, the expert pool, BC's copy, the CNNs."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-c", "from gailkit.cli import main; main()", "train", "--env", ENV.id, "--demos",
               str(demos_path), "--run-dir", f"{tmp}/run", "--set", "total_steps=1024", "--set", "bc.epochs=1", "--set", "eval_episodes=1",
               "--quiet"]  # fmt: skip
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        secs = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1e3
    print(f"gailkit train, one round on {demos_path}: peak RSS {peak:,.0f} MB, {secs:.0f} s")


READ_PEAK = """
import sys, time
from gailkit.data import demos
def hwm():  # this process's own peak (ru_maxrss would count the parent's memory from before exec)
    line = next(x for x in open("/proc/self/status") if x.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024
base = hwm()
t0 = time.perf_counter()
d = demos.load_file(sys.argv[1])
secs = time.perf_counter() - t0
print(hwm() - base, d.obs.nbytes + d.next_obs.nbytes, secs)
"""


def read_memory(demos_path: Path, repeats: int = 3) -> None:
    """What reading the file (decompress, validate, numpy columns) adds to a fresh process's peak resident
    memory, against the bytes of the `obs` and `next_obs` columns it returns; each read in its own process."""
    for _ in range(repeats):
        out = subprocess.run([sys.executable, "-c", READ_PEAK, str(demos_path)], check=True, capture_output=True)
        grown, cols, secs = (float(x) for x in out.stdout.split())
        print(f"read {demos_path}: peak RSS grew {grown / 1e6:,.0f} MB for {cols / 1e6:,.0f} MB of obs and next_obs "
              f"({grown / cols:.2f}x), {secs:.1f} s")  # fmt: skip


def replay_memory(demos_path: Path, rows: int = 8192) -> None:
    """The off-policy generator's replay on Pong's stacks (the shipped games' first `rows` transitions, added
    32 at a time as a 1-env SAC round adds them): bytes a transition, frames written, seconds to add and to
    draw SAC's 256-row minibatches, for the replay of whole stacks and the one that holds each frame once."""
    from gailkit.algo.generator.frame_replay import FrameReplay
    from gailkit.algo.generator.replay import Replay
    from gailkit.core import limits

    obs_space, act_space = envs.spaces(ENV)
    d = demos.load(demos_path, ENV.id, (obs_space, act_space), frame_stack=ENV.frame_stack)
    n = min(rows, len(d))
    obs, nxt = np.asarray(d.obs[:n]), np.asarray(d.next_obs[:n])
    acts = np.zeros((n, 1), np.float32)  # Pong's actions are Discrete; a Box(1) stands in (SAC's kind)
    term = np.asarray(d.terminated[:n])
    box = __import__("gymnasium").spaces.Box(-1, 1, (1,), np.float32)
    print(f"# replay of {n:,} Pong transitions ({ENV.frame_stack} x 84 x 84 uint8 stacks); memory budget "
          f"{limits.memory_budget() / 1e9:.1f} GB; {platform.machine()}, {time.strftime('%Y-%m-%d')}")  # fmt: skip
    print("| replay | bytes a transition | transitions the budget holds | frames written a transition | add s / 1k "
          "| sample s / 256 |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for cls in (Replay, FrameReplay):
        r = cls(obs_space, box, n)
        t0 = time.perf_counter()
        for i in range(0, n, 32):
            r.add(obs[i : i + 32], acts[i : i + 32], nxt[i : i + 32], term[i : i + 32])
        add_s = (time.perf_counter() - t0) / n * 1000
        rng = np.random.default_rng(0)
        t0 = time.perf_counter()
        for _ in range(50):
            r.sample(256, rng)
        sample_s = (time.perf_counter() - t0) / 50
        per = r.bytes / r.capacity
        frames = getattr(r, "written", 2 * ENV.frame_stack * n) / n
        print(f"| {cls.__name__} | {per:,.0f} | {limits.memory_budget() // per:,.0f} | {frames:.2f} | {add_s:.3f} | "
              f"{sample_s:.4f} |")  # fmt: skip


MOVES = (0, 2, 3)  # NOOP, UP, DOWN: the actions the scripted expert takes


def noisy_expert_play(rows: int, seed: int, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """`rows` (stack, action) pairs of the scripted expert taking one of its own moves at random with
    probability `eps`: a player near the expert's states but not at them, as a generator part-way through
    GAIL is, whose actions alone do not give it away."""
    expert = envs.scripted_experts(ENV.id)["scripted"]  # factory(env) -> policy, reading that env's RAM
    env = envs.make_factory(ENV)()
    rng = np.random.default_rng(seed)
    tracker, obs_out, acts = expert(env), [], []
    obs, _ = env.reset(seed=seed)
    while len(acts) < rows:
        a = int(rng.choice(MOVES)) if rng.random() < eps else int(tracker(obs))
        obs_out.append(np.asarray(obs)), acts.append(a)
        obs, _, term, trunc, _ = env.step(a)
        if term or trunc:
            tracker, (obs, _) = expert(env), env.reset(seed=seed + len(acts))
    env.close()
    return np.stack(obs_out), np.asarray(acts)


def disc_shift(demos_path: Path, updates: int, eps: float = 0.5, rows: int = 8000, every: int = 250) -> None:
    """Does random-shift augmentation (`disc.augment_shift`) help Pong's discriminator generalize? It trains
    on the expert's first game and one noisy-expert play (`noisy_expert_play`), and is scored on the other
    game and another play: accuracy, and the AUC of its logits (expert against generator), on 2,048 rows
    of each, training rows and held-out, every `every` updates. The run's own Pong settings otherwise."""
    import dataclasses

    import torch as th

    from gailkit.algo.discriminator import Discriminator

    cfg = train.train_config(ENV.id, str(demos_path), None, [])
    obs_space, act_space = envs.spaces(ENV)
    d = demos.load(demos_path, ENV.id, (obs_space, act_space), frame_stack=ENV.frame_stack)
    b = d.episode_bounds()
    expert = {"train": np.arange(b[0], b[1]), "held-out": np.arange(b[1], b[2])}
    t0 = time.perf_counter()
    gen = {"train": noisy_expert_play(rows, 100, eps), "held-out": noisy_expert_play(rows, 200, eps)}
    print(f"# Pong discriminator, random shift or not: expert games of {len(expert['train']):,} / "
          f"{len(expert['held-out']):,} transitions, noisy-expert plays (eps {eps}) of {rows:,} each "
          f"({time.perf_counter() - t0:.0f} s); {updates} updates of {cfg.disc.demo_batch_size} + "
          f"{cfg.disc.demo_batch_size}; {platform.machine()}, {time.strftime('%Y-%m-%d')}")  # fmt: skip
    print("| augment_shift | updates | train acc | held-out acc | train AUC | held-out AUC | s per update |")
    print("|---|---|---|---|---|---|---|", flush=True)

    def auc(pos: np.ndarray, neg: np.ndarray) -> float:
        ranks = np.argsort(np.argsort(np.concatenate([pos, neg]))) + 1
        return float((ranks[: len(pos)].sum() - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg)))

    for shift in (0, 4):
        th.manual_seed(0)
        rng = np.random.default_rng(0)
        disc = Discriminator(obs_space, act_space, dataclasses.replace(cfg.disc, augment_shift=shift), "cpu", "gail")
        probe = {k: (rng.choice(expert[k], 2048), rng.integers(0, rows, 2048)) for k in expert}
        n, spent = cfg.disc.demo_batch_size, 0.0
        for step in range(1, updates + 1):
            e, g = rng.choice(expert["train"], n), rng.integers(0, rows, n)
            t0 = time.perf_counter()
            disc.train_step(
                disc.batch(d.obs[e], d.acts[e], None), disc.batch(gen["train"][0][g], gen["train"][1][g], None)
            )
            spent += time.perf_counter() - t0
            if step % every and step != updates:
                continue
            cells = {}
            for k in ("train", "held-out"):
                e2, g2 = probe[k]
                le = disc.logits(disc.batch(d.obs[e2], d.acts[e2], None)).detach().numpy()
                lg = disc.logits(disc.batch(gen[k][0][g2], gen[k][1][g2], None)).detach().numpy()
                cells[k] = ((np.mean(le > 0) + np.mean(lg < 0)) / 2, auc(le, lg))
            print(f"| {shift} | {step} | {cells['train'][0]:.3f} | {cells['held-out'][0]:.3f} | {cells['train'][1]:.3f} | "
                  f"{cells['held-out'][1]:.3f} | {spent / step:.2f} |", flush=True)  # fmt: skip


def cnn_layout(demos_path: Path, rounds: int, repeats: int = 2) -> None:
    """Seconds of a GAIL round (in-process, 1,024 env steps, no critic warm-up) with the CNN's input cast to
    float32 as it comes (NCHW, the layout before) and in channels-last (today's, on the CPU), runs alternating
    in one process: collection, rewards, PPO with the BC term, discriminator; the first round left out."""
    import torch as th

    from gailkit.model import encoders

    today = encoders.ImageCNN.forward

    def nchw(self, obs):  # ImageCNN.forward before channels-last
        x = obs.float() * self.scale
        return self.linear(self.cnn(x if self.channels_first else x.permute(0, 3, 1, 2)))

    th.set_num_threads(1)
    sets = ["bc.epochs=1", "bc.critic_warmup_rounds=0", "eval_every=0", "checkpoint_every=0"]
    cols = ("round", "collect", "reward", "ppo", "disc")
    print(f"# {ENV.id}: CNN input layout, {rounds} rounds a run, {repeats} runs each, alternating; "
          f"{platform.machine()}, torch {th.__version__} (1 thread), {time.strftime('%Y-%m-%d')}")  # fmt: skip
    seen: dict[str, list[dict]] = {"NCHW": [], "channels-last": []}
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(repeats):
            for name, fwd in (("NCHW", nchw), ("channels-last", today)):
                encoders.ImageCNN.forward = fwd  # type: ignore[method-assign]
                cfg = train.train_config(ENV.id, str(demos_path), None, [*sets, f"total_steps={rounds * 1024}"])
                train.train(cfg, Path(tmp) / f"{name}-{k}", quiet=True, log=lambda m: None)
                seen[name] += metrics.read_rows(Path(tmp) / f"{name}-{k}" / "metrics.csv")[1:]
    encoders.ImageCNN.forward = today  # type: ignore[method-assign]
    print("| CNN input | rounds | " + " | ".join(f"{c} s" for c in cols) + " |")
    print("|---|---|" + "---|" * len(cols))
    for name, rows in seen.items():
        means = [np.mean([float(r[f"time/{c}_s"]) for r in rows]) for c in cols]
        print(f"| {name} | {len(rows)} | " + " | ".join(f"{m:.2f}" for m in means) + " |")


def stalls(demos_path: Path, games: int, fire: bool = False) -> None:
    """The scripted expert's games from reset seeds 0..games-1 (as `demos record --seed 0` plays them): length, score,
    points, how they ended, and the longest stretch with no ball in play (RAM ball y = 0); then, in the demo file,
    each episode's steps after its last point and the NOOP share there and before. `fire`: the expert presses FIRE
    whenever no ball is in play (does that bring one back?)."""
    from gailkit_envs import pong  # the scripted expert: the project's envs/ as installed (gailkit.data.envs)

    print(f"# scripted Pong expert{', FIRE while no ball is in play' if fire else ''}, {games} games; "
          f"{platform.machine()}, {time.strftime('%Y-%m-%d')}")  # fmt: skip
    print(
        "| reset seed | steps | return | points | largest reward of one step | ended by | longest stretch without a ball (steps) |"
    )
    print("|---|---|---|---|---|---|---|")
    for seed in range(games):
        env = envs.make_factory(ENV)()
        obs, _ = env.reset(seed=seed)
        act, steps, ret, points, idle, longest, top = pong.tracker(env), 0, 0.0, 0, 0, 0, 0.0
        while True:
            idle = idle + 1 if env.unwrapped.ale.getRAM()[pong.BALL_Y] == 0 else 0
            longest = max(longest, idle)
            a = act(obs)
            obs, r, term, trunc, _ = env.step(1 if fire and idle else a)
            steps, ret, points, top = steps + 1, ret + float(r), points + int(r != 0), max(top, float(r))
            if term or trunc:
                break
        env.close()
        end = "termination (21 points)" if term else "truncation (the env's step limit)"
        print(f"| {seed} | {steps:,} | {ret:+.0f} | {points} | {top:+.0f} | {end} | {longest:,} |", flush=True)
    d = demos.load_file(demos_path)
    for e in np.unique(d.episode_id):
        rows = np.where(d.episode_id == e)[0]
        rews, acts = np.asarray(d.rews)[rows], np.asarray(d.acts)[rows].astype(int)
        last = int(np.nonzero(rews)[0][-1]) + 1
        tail = f"NOOP {np.mean(acts[last:] == 0):.2f}" if last < len(rows) else "none"
        print(f"{demos_path} episode {e}: {len(rows):,} transitions, {len(rows) - last:,} after its last point "
              f"({(len(rows) - last) / len(d):.1%} of the file); NOOP share {np.mean(acts[:last] == 0):.2f} up to "
              f"it, after it {tail}")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--demos", type=Path, default=Path("data/pong.arrow"))
    p.add_argument("--random-episodes", type=int, default=10)
    p.add_argument("--bc", action="store_true", help="BC alone on the demos instead")
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--set", action="append", default=[], help="with --bc: a setting of the run (bc.epochs=31)")
    p.add_argument("--summarize", type=Path, help="a gailkit train run's folder: its curve instead")
    p.add_argument("--train-memory", action="store_true", help="peak memory of a one-round train instead")
    p.add_argument("--read-memory", action="store_true", help="peak memory of reading the demo file instead")
    p.add_argument("--replay-memory", action="store_true", help="SAC's replay on Pong's stacks instead")
    p.add_argument("--disc-shift", type=int, metavar="UPDATES", help="the discriminator with random shifts or not")
    p.add_argument("--bc-probe", type=int, metavar="STEPS", help="what BC's CNN learns in STEPS steps instead")
    p.add_argument("--bc-lr", type=float, default=1e-3)
    p.add_argument(
        "--bc-net-arch", default="", metavar="64,64", help="with --bc-probe: the actor's layers after the CNN"
    )
    p.add_argument("--cnn-layout", type=int, metavar="ROUNDS", help="a round with NCHW vs channels-last input instead")
    p.add_argument("--stalls", type=int, metavar="GAMES", help="where the scripted expert's games stop playing instead")
    p.add_argument("--fire", action="store_true", help="with --stalls: FIRE whenever no ball is in play")
    args = p.parse_args()
    if args.stalls:
        return stalls(args.demos, args.stalls, args.fire)
    if args.cnn_layout:
        return cnn_layout(args.demos, args.cnn_layout)
    if args.bc_probe:
        return bc_probe(args.demos, args.bc_probe, args.bc_lr, args.bc_net_arch)
    if args.train_memory:
        return train_memory(args.demos)
    if args.read_memory:
        return read_memory(args.demos)
    if args.replay_memory:
        return replay_memory(args.demos)
    if args.disc_shift:
        return disc_shift(args.demos, args.disc_shift)
    if args.summarize:
        return summarize(args.summarize)
    if args.bc:
        return behaviour_cloning_alone(args.demos, args.eval_episodes, args.set)
    print(f"# Pong data: {args.demos}; {platform.machine()}, {time.strftime('%Y-%m-%d')}", flush=True)
    t0 = time.perf_counter()
    frames = demos.load_file(args.demos)
    read_s = time.perf_counter() - t0
    obs_space, act_space = envs.spaces(ENV)
    t0 = time.perf_counter()
    d = demos.load(args.demos, ENV.id, (obs_space, act_space), frame_stack=ENV.frame_stack)
    stack_s = time.perf_counter() - t0
    returns = frames.episode_returns()
    assert returns is not None
    size = args.demos.stat().st_size
    print(
        f"expert (scripted): {frames.meta.expert_return:.2f} ± {frames.meta.expert_return_std:.2f} over "
        f"{frames.meta.expert_episodes} episodes; the file's episodes: {' '.join(f'{r:.0f}' for r in returns)}"
    )
    print(
        f"file: {size / 1e6:.2f} MB for {len(frames):,} transitions ({frames.n_episodes} episodes), "
        f"{size / len(frames):.0f} B/transition; frames in memory {stacks.nbytes(frames) / 1e6:.0f} MB "
        f"({stacks.nbytes(frames) / size:.0f}:1), read in {read_s:.1f} s"
    )
    held, built = stacks.nbytes(d), stacks.built_nbytes(d)
    print(
        f"stacks of {ENV.frame_stack} rebuilt in {stack_s:.1f} s, held as frames and an index: {held / 1e6:.0f} MB "
        f"in memory ({held / len(d) / 1024:.1f} KiB/transition); built whole they would take {built / 1e6:.0f} MB "
        f"({built / held:.1f}x; stored stacked and uncompressed the file would be {built / size:.0f}x this one); "
        f"peak RSS so far {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3:.0f} MB"
    )
    enc, raw = fragment_bytes(d)
    print(f"wire: a 256-step x 8-env fragment of Pong frames: {enc / 1e6:.2f} MB encoded, {raw / 1e6:.1f} MB raw "
          f"({raw / enc:.0f}:1), {enc / 2048:.0f} B/env step")  # fmt: skip
    mean, std = random_return(args.random_episodes, 0)
    print(f"random policy: {mean:.2f} ± {std:.2f} over {args.random_episodes} episodes")


if __name__ == "__main__":
    main()
