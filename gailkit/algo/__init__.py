"""The learner side of GAIL: the discriminator, the generators that update the policy from its rewards,
and the learner's round that joins them. Never imports `rollout`."""
