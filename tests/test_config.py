import pytest

from gailkit import config
from gailkit.config import ExpertConfig
from gailkit.core.errors import ConfigError


def test_defaults_then_yaml_then_overrides(tmp_path):
    f = tmp_path / "cfg.yaml"
    f.write_text("env: {id: CartPole-v1}\ntotal_timesteps: 1e5\nppo:\n  n_steps: 32\npolicy:\n  net_arch: [16]\n")
    cfg = config.build(ExpertConfig, [(str(f), config.read_yaml(f))], ["ppo.n_steps=64", "ppo.gamma=0.9"])
    assert cfg.env.id == "CartPole-v1"
    assert cfg.total_timesteps == 100_000 and isinstance(cfg.total_timesteps, int)
    assert cfg.ppo.n_steps == 64 and cfg.ppo.gamma == 0.9 and cfg.policy.net_arch == [16]
    assert cfg.ppo.batch_size == ExpertConfig().ppo.batch_size  # untouched keys keep defaults


def test_unknown_key_names_full_path_and_suggests(tmp_path):
    f = tmp_path / "cfg.yaml"
    f.write_text("ppo:\n  n_stepz: 3\n")
    with pytest.raises(ConfigError, match=r"cfg.yaml: unknown setting 'ppo.n_stepz' \(did you mean 'n_steps'"):
        config.build(ExpertConfig, [(str(f), config.read_yaml(f))])
    with pytest.raises(ConfigError, match="unknown setting 'ppo.gama'"):
        config.build(ExpertConfig, overrides=["ppo.gama=0.9"])


@pytest.mark.parametrize(
    "override, message",
    [
        ("ppo.n_steps=abc", "'ppo.n_steps': expected an integer, got 'abc'"),
        ("ppo.n_steps=1.5", "'ppo.n_steps': expected an integer, got 1.5"),
        ("ppo.use_sde=3", "'ppo.use_sde': expected true or false"),
        ("policy.net_arch=7", "'policy.net_arch': expected a list"),
        ("policy.activation=sigmoid", "'policy.activation': expected one of 'auto', 'tanh', 'relu'"),
        ("policy.encoder=rnn", "'policy.encoder': expected one of 'auto', 'flat', 'cnn'"),
        ("env=3", "env: expected a mapping"),
        ("nokey", "expected KEY=VALUE"),
    ],
)
def test_wrong_types_fail_with_path(override, message):
    with pytest.raises(ConfigError) as e:
        config.build(ExpertConfig, overrides=[override])
    assert message in str(e.value)


def test_env_kwargs_are_free_form():
    cfg = config.build(ExpertConfig, overrides=["env.kwargs.max_steps=3"])
    assert cfg.env.kwargs == {"max_steps": 3}


def test_bad_yaml_file(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("ppo: [1, 2\n")
    with pytest.raises(ConfigError, match="bad.yaml: line .* not valid YAML"):
        config.read_yaml(f)
    f.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="expected a mapping"):
        config.read_yaml(f)


def test_save_yaml_round_trip(tmp_path):
    cfg = config.build(ExpertConfig, overrides=["ppo.n_steps=8", "env.id=CustomEnv"])
    config.save_yaml(cfg, tmp_path / "out.yaml")
    again = config.build(ExpertConfig, [("out.yaml", config.read_yaml(tmp_path / "out.yaml"))])
    assert again == cfg


def test_network_settings_of_gailkit_0_2_move_from_ppo_to_policy_with_one_notice(tmp_path):
    """A 0.2 settings file, `--set ppo.net_arch=...` and a 0.2 run's config all land in `policy:`."""
    from gailkit.config import TrainConfig

    f = tmp_path / "old.yaml"
    f.write_text("ppo:\n  n_steps: 32\n  net_arch: [16]\n  activation: relu\n")
    with pytest.warns(UserWarning, match=r"old.yaml: written by gailkit 0.2; ppo.net_arch, ppo.activation read as"):
        cfg = config.build(TrainConfig, [(str(f), config.read_settings(f))])
    assert cfg.policy.net_arch == [16] and cfg.policy.activation == "relu" and cfg.ppo.n_steps == 32
    with pytest.warns(UserWarning, match=r"--set ppo.log_std_init=-1: 'ppo.log_std_init' is now 'policy.log_std_init'"):
        cfg = config.build(TrainConfig, overrides=["ppo.log_std_init=-1"])
    assert cfg.policy.log_std_init == -1.0
    with pytest.warns(UserWarning, match="run.pt: written by gailkit 0.2"):
        old = config.migrate({"ppo": {"ortho_init": False}, "policy": {"net_arch": [8]}}, "run.pt")
    assert old == {"ppo": {}, "policy": {"net_arch": [8], "ortho_init": False}}
    with pytest.raises(ConfigError, match="unknown setting 'ppo.encoder'"):  # only the moved names move
        config.build(TrainConfig, overrides=["ppo.encoder=cnn"])


def test_bc_auto_epochs_by_data_size():
    """50 passes over the demos, stopped at `BC_MAX_STEPS` minibatch steps for large demo sets; nothing without
    actions, and nothing by default with the SAC generator."""
    from gailkit.config.bc import BC_MAX_STEPS, BCConfig

    bc = BCConfig()
    assert bc.resolve(200, 100_000).epochs == 50  # one minibatch a pass
    assert bc.resolve(25_000, 1_000_000).epochs == 50  # 98 a pass: 4,900 steps
    big = bc.resolve(100_000, 1_000_000)  # 391 a pass
    assert big.epochs == BC_MAX_STEPS // 391 and big.epochs * 391 <= BC_MAX_STEPS
    assert bc.resolve(0, 100_000).epochs == 0 and bc.resolve(25_000, 100_000, "sac").epochs == 0
    assert BCConfig(epochs=3).resolve(25_000, 100_000).epochs == 3


def test_the_bc_term_stays_for_the_whole_run_unless_the_policy_reads_frames():
    """Demos with actions, whole episodes or loose transitions: the BC term never falls and takes 100 steps a
    round; a policy that reads frames anneals it over half the run at 10 (100 CNN steps a round were not run)."""
    from gailkit.config.bc import BCConfig

    bc = BCConfig()
    for n in (200, 1_000, 25_000):  # 200 loose transitions (protocol (c)) to 25 whole episodes
        assert (bc.resolve(n, 100_000).anneal_steps, bc.resolve(n, 100_000).steps_per_round) == (0, 100)
    frames = bc.resolve(37_000, 2_000_000, "ppo", frames=True)  # Pong's 2 games
    assert (frames.anneal_steps, frames.steps_per_round) == (1_000_000, 10)
    assert BCConfig(steps_per_round=3).resolve(25_000, 100_000).steps_per_round == 3
    assert BCConfig(anneal_steps=7).resolve(25_000, 100_000).anneal_steps == 7  # a value given is kept
    assert bc.resolve(25_000, 100_000, "sac").steps_per_round == 0  # SAC: no BC term by default
    assert bc.resolve(0, 100_000).steps_per_round == 0  # no actions: nothing to clone
