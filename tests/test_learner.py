"""The learner on its own: a round trains both nets, its declared state continues exactly, absorbing
states, replay, critic warm-up, and divergence caught before weights leave."""

import operator

import numpy as np
import pytest
import torch as th

from gailkit.algo.discriminator import Discriminator
from gailkit.algo.generator.ppo import PPOGenerator as Generator
from gailkit.algo.learner import Learner, TrainingDiverged, expert_data
from gailkit.data import envs, experts
from gailkit.model import policy
from gailkit.rollout.actor import Actor, ActorSpec
from gailkit.run import train


def _learner(cartpole_demos, *overrides, seed=0):
    cfg = train.train_config("CartPole-v1", "data/", None, ["n_envs=2", *overrides], preset="tiny")
    spaces = envs.spaces(cfg.env)
    th.manual_seed(seed)
    gen = Generator(*spaces, cfg.ppo, cfg.policy, cfg.normalize_obs, 2, "cpu", seed)
    disc = Discriminator(*spaces, cfg.disc, "cpu", "gail")
    d = cartpole_demos
    return Learner(
        cfg, gen, disc, expert_data(disc, d.obs, d.acts, d.next_obs, d.terminated), np.random.default_rng(seed)
    )


def _fragments(learner, seed=0, version=None):
    a = Actor(ActorSpec(learner.cfg.env, learner.cfg.policy, learner.cfg.normalize_obs, n_envs=2, seed=seed))
    a.start()
    a.set_weights(learner.weights())
    frag = a.sample(learner.cfg.ppo.n_steps)
    a.stop()
    if version is not None:
        import dataclasses

        frag = dataclasses.replace(frag, policy_version=version)
    return [frag]


def test_a_round_trains_both_nets_and_counts(cartpole_demos):
    lrn = _learner(cartpole_demos)
    gen_before = {k: v.clone() for k, v in lrn.generator.policy.state_dict().items()}
    disc_before = {k: v.clone() for k, v in lrn.disc.net.state_dict().items()}
    stats = lrn.round(_fragments(lrn))
    assert lrn.version == 1 and lrn.env_steps == 64
    assert not th.equal(gen_before["action_net.weight"], lrn.generator.policy.state_dict()["action_net.weight"])
    assert not th.equal(disc_before["mlp.dense0.weight"], lrn.disc.net.state_dict()["mlp.dense0.weight"])
    for key in ("disc/loss", "disc/acc_expert", "train/loss", "train/approx_kl", "time/ppo_s", "disc/reward_mean"):
        assert key in stats, key


def test_fragments_of_another_version_are_refused(cartpole_demos):
    lrn = _learner(cartpole_demos)
    with pytest.raises(ValueError, match="fragments of versions \\[5\\]"):
        lrn.round(_fragments(lrn, version=5))


def test_state_dict_continues_exactly(cartpole_demos):
    a = _learner(cartpole_demos, "disc.replay_rounds=2")
    a.round(_fragments(a, 1))
    a.round(_fragments(a, 2, version=1))
    saved = a.state_dict()
    b = _learner(cartpole_demos, "disc.replay_rounds=2", seed=99)  # other seeds: everything must come from the state
    b.load_state_dict(saved)
    assert b.version == 2 and len(b.replay) == 2
    frags = _fragments(a, 3, version=2)
    th.manual_seed(5), np.random.seed(5)  # SB3 shuffles minibatches with the global RNGs (RunState.rng keeps them)
    a.round(frags)
    th.manual_seed(5), np.random.seed(5)
    b.round(frags)
    for (k, x), y in zip(a.generator.policy.state_dict().items(), b.generator.policy.state_dict().values()):
        assert th.equal(x, y), k
    for (k, x), y in zip(a.disc.net.state_dict().items(), b.disc.net.state_dict().values()):
        assert th.equal(x, y), k


class _InLine:
    """An executor that runs what it is given at once, on the calling thread."""

    def submit(self, fn, *args):
        import concurrent.futures

        f = concurrent.futures.Future()
        f.set_result(fn(*args))
        return f


def test_the_discriminator_steps_beside_the_ppo_update_and_gets_what_it_gets_alone(cartpole_demos, monkeypatch):
    """On-policy, the discriminator's steps run on their own thread while PPO updates; nothing they use is
    shared with the update, so both nets end as when the steps run alone after it (gradient penalty on: it
    draws from torch's RNG)."""
    import threading

    seen: list[str] = []
    step = Discriminator.train_step
    monkeypatch.setattr(
        Discriminator, "train_step", lambda d, *a: seen.append(threading.current_thread().name) or step(d, *a)
    )
    runs = []
    for inline in (False, True):
        lrn = _learner(cartpole_demos, "disc.grad_penalty=1.0", "bc.steps_per_round=5", "disc.replay_rounds=2")
        if inline:
            lrn._thread = _InLine()
        th.manual_seed(3), np.random.seed(3)
        for v in range(2):
            lrn.round(_fragments(lrn, v, version=v))
        runs.append(lrn)
    assert all(n.startswith("gailkit-disc") for n in seen[:4]) and seen[4:] == ["MainThread"] * 4
    for net in ("generator.policy", "disc.net"):
        a, b = (operator.attrgetter(net)(r).state_dict() for r in runs)
        for k in a:
            assert th.equal(a[k], b[k]), (net, k)


def test_the_critics_values_are_taken_beside_the_rewards_and_the_update_ends_as_if_it_took_them(
    cartpole_demos, monkeypatch
):
    """The critic's values of a round (its observations, the final observations of truncated steps, the last
    step's) are taken on the main thread while the discriminator's rewards are taken on the second; the PPO update
    then ends bit for bit as when it takes the values itself."""
    import dataclasses
    import threading

    where: dict[str, list] = {"reward": [], "values": []}
    reward, values = Discriminator.reward, Generator.values
    monkeypatch.setattr(
        Discriminator, "reward", lambda d, b: where["reward"].append(threading.current_thread().name) or reward(d, b)
    )
    monkeypatch.setattr(
        Generator, "values", lambda g, o: where["values"].append(threading.current_thread().name) or values(g, o)
    )
    lrn = _learner(cartpole_demos)
    lrn.round(_fragments(lrn))
    assert set(where["reward"]) == {"gailkit-disc_0"}
    assert where["values"] == ["MainThread"] * 2  # the round's observations, its last ones: taken once, then used
    gens = []
    for prepared in (False, True):
        lrn = _learner(cartpole_demos)
        frag = lrn._stack(_fragments(lrn, 1))
        cut = np.zeros_like(frag.truncated)
        cut[3] = ~frag.terminated[3]  # time limits at step 3: those steps bootstrap from their final observations
        frag = dataclasses.replace(frag, truncated=frag.truncated | cut)
        rewards = np.random.default_rng(0).normal(size=frag.terminated.shape)
        if prepared:
            lrn.generator.prepare(frag)
        th.manual_seed(3), np.random.seed(3)
        lrn.generator.update(frag, rewards, 1.0, terminal_value=0.5)
        gens.append(lrn.generator)
    assert cut.any()
    a, b = (g.ppo.rollout_buffer for g in gens)
    assert np.array_equal(a.values, b.values) and np.array_equal(a.returns, b.returns)
    for (k, x), y in zip(gens[0].policy.state_dict().items(), gens[1].policy.state_dict().values()):
        assert th.equal(x, y), k


def test_absorbing_rows_join_both_pools_and_value_terminations(cartpole_demos):
    lrn = _learner(cartpole_demos, "disc.absorbing=true", "disc.n_disc_updates_per_round=8")
    n_terminated = int(cartpole_demos.terminated.sum())
    assert n_terminated == 3 and len(lrn.expert.batch) == len(cartpole_demos) + n_terminated
    assert lrn.expert.batch.obs_absorbing[-n_terminated:].all()  # the absorbing rows: both flags set
    assert lrn.expert.batch.next_absorbing[-n_terminated:].all()
    seen = []
    original = lrn.disc.train_step
    lrn.disc.train_step = lambda e, g: (seen.append(g), original(e, g))[1]
    frags = _fragments(lrn)
    stats = lrn.round(frags)
    assert "disc/reward_absorbing" in stats
    if frags[0].terminated.any():
        assert any(g.obs_absorbing.any() for g in seen)  # generator absorbing rows were sampled


def test_critic_warmup_keeps_the_policy(cartpole_demos):
    """A critic-only round leaves the policy as it is: its layers, and its observation normalizer (which would
    otherwise move the clone's inputs under it); the first round that trains the policy moves both (with
    `obs_stats: running`)."""
    lrn = _learner(cartpole_demos, "bc.critic_warmup_rounds=1", "normalize_obs=true", "obs_stats=running")
    norm = [k for k in lrn.generator.policy.state_dict() if k.startswith("features_extractor.")]
    assert norm, "the policy keeps normalizer statistics"
    before = {k: v.clone() for k, v in lrn.generator.policy.state_dict().items()}
    lrn.round(_fragments(lrn))
    after = lrn.generator.policy.state_dict()
    assert th.equal(before["action_net.weight"], after["action_net.weight"])
    assert all(th.equal(before[k], after[k]) for k in norm)
    assert not th.equal(before["value_net.weight"], after["value_net.weight"])
    lrn.round(_fragments(lrn, version=1))
    after = lrn.generator.policy.state_dict()
    assert not th.equal(before["action_net.weight"], after["action_net.weight"])
    assert not all(th.equal(before[k], after[k]) for k in norm)


@pytest.mark.parametrize(
    "settings, moves",
    [
        (["obs_stats=expert"], False),  # the policy starts as a BC clone: its inputs keep the expert's statistics
        (["obs_stats=expert", "bc.epochs=0"], False),
        (["obs_stats=running"], True),
        (["obs_stats=auto"], True),  # a learner alone does not know whether the demos are whole episodes
        (["obs_stats=auto", "bc.epochs=0"], True),
    ],
)
def test_rounds_that_train_the_policy_merge_its_observations_into_the_normalizer_by_obs_stats(
    cartpole_demos, settings, moves
):
    lrn = _learner(cartpole_demos, "bc.critic_warmup_rounds=0", "normalize_obs=true", *settings)
    assert lrn.moves_normalizer is moves
    norm = policy.normalizer(lrn.generator.policy)
    lrn.generator.update_normalizer(cartpole_demos.obs)  # seeded from the expert, as a run is
    seeded = norm.mean.clone(), norm.var.clone(), float(norm.count)
    before = lrn.generator.policy.action_net.weight.clone()
    lrn.round(_fragments(lrn))
    assert not th.equal(before, lrn.generator.policy.action_net.weight)  # the policy trained either way
    held = th.equal(seeded[0], norm.mean) and th.equal(seeded[1], norm.var) and seeded[2] == float(norm.count)
    assert held is not moves
    if moves:
        assert float(norm.count) == seeded[2] + 64  # this round's 2 envs x 32 steps


def test_diverged_weights_never_leave_the_learner(cartpole_demos):
    lrn = _learner(cartpole_demos)
    with th.no_grad():
        lrn.generator.policy.action_net.weight.fill_(float("nan"))
    with pytest.raises(TrainingDiverged, match="round 0: the policy's weights hold NaN"):
        lrn.weights()


def test_behaviour_cloning_needs_actions(cartpole_demos):
    lrn = _learner(cartpole_demos, "bc.epochs=2")
    assert set(lrn.behaviour_clone()) == {"bc/loss_first", "bc/loss_last"}
    lrn.expert.acts = None
    assert lrn.behaviour_clone() == {}
    assert policy.normalizer(lrn.generator.policy) is not None


def test_a_bc_term_during_gail_pulls_toward_the_expert_and_anneals():
    # an expert with a rule to learn (push the way the pole falls), not random actions: BC has something to pull to
    cartpole_demos = experts.record(lambda o: int(o[2] + o[3] > 0), "CartPole-v1", episodes=3, seed=0, source="rule")
    plain = _learner(cartpole_demos)
    kept = _learner(cartpole_demos, "bc.steps_per_round=20", "bc.anneal_steps=128", "bc.learning_rate=0.01")
    frags = _fragments(plain)
    th.manual_seed(1), np.random.seed(1)
    plain.round(frags)
    th.manual_seed(1), np.random.seed(1)
    stats = kept.round(frags)
    assert "bc/loss" in stats

    def likelihood(lrn):  # mean log-probability of the expert's actions under the policy
        pol = lrn.generator.policy
        obs, _ = pol.obs_to_tensor(np.array(cartpole_demos.obs))
        with th.no_grad():
            _, log_prob, _ = pol.evaluate_actions(obs, th.as_tensor(np.array(cartpole_demos.acts)))
        return float(log_prob.mean())

    assert likelihood(kept) > likelihood(plain) + 0.01
    assert "bc/loss" in kept.round(_fragments(kept, version=1))  # at 64 of 128 env steps: half the lr, still on
    assert "bc/loss" not in kept.round(_fragments(kept, version=2))  # at 128: annealed away
    always = _learner(cartpole_demos, "bc.steps_per_round=20", "bc.anneal_steps=0", "total_steps=128")
    for version in range(3):  # to the end of the run and past it, at full strength
        assert "bc/loss" in always.round(_fragments(always, version=version)) and always._bc_decay() == 1.0
