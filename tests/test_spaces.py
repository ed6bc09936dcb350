"""Every common gymnasium space through the encoder factory, and end to end (record, train, evaluate,
export, infer) on the small envs of `space_envs.py`."""

from __future__ import annotations

import json
import re

import gymnasium as gym
import numpy as np
import pytest
import torch as th

from gailkit.algo.discriminator import Discriminator
from gailkit.config import DiscConfig, PolicyConfig
from gailkit.data import demos as demos_mod
from gailkit.model import encoders, policy, spaces
from tests import space_envs
from tests.conftest import onnx_plays_as_torch, resumed_equals_uninterrupted, run_cli

IMAGE_HWC = gym.spaces.Box(0, 255, (40, 40, 3), np.uint8)
IMAGE_CHW = gym.spaces.Box(0, 255, (3, 40, 40), np.uint8)
VECTOR = gym.spaces.Box(-1, 1, (3, 2), np.float32)


@pytest.mark.parametrize(
    "space, cls, width",
    [
        (VECTOR, encoders.NormalizedFlatten, 6),
        (gym.spaces.Discrete(5), encoders.NormalizedFlatten, 5),
        (gym.spaces.MultiDiscrete([3, 2]), encoders.NormalizedFlatten, 5),
        (gym.spaces.MultiBinary(4), encoders.NormalizedFlatten, 4),
        (IMAGE_HWC, encoders.ImageCNN, 512),
        (gym.spaces.Box(0, 255, (6, 6, 2), np.uint8), encoders.ImageCNN, 512),  # below Nature's 36 pixels
        (gym.spaces.Dict({"v": VECTOR, "d": gym.spaces.Discrete(3)}), encoders.DictEncoder, 9),
    ],
)
def test_the_factory_picks_an_encoder_per_space_and_it_takes_preprocessed_batches(space, cls, width):
    enc = encoders.make(space)
    assert type(enc) is cls and enc.features_dim == width
    raw = [space.sample() for _ in range(4)]
    batch = (
        {k: np.stack([r[k] for r in raw]) for k in space.spaces}
        if isinstance(space, gym.spaces.Dict)
        else np.stack(raw)
    )
    if isinstance(batch, dict):
        batch = {k: th.as_tensor(v) for k, v in batch.items()}
    out = enc(encoders.preprocess(space, batch if isinstance(batch, dict) else th.as_tensor(batch)))
    assert out.shape == (4, width) and th.isfinite(out).all()


def test_only_vector_boxes_are_normalized_and_one_hot_rows_are_exact():
    assert encoders.make(VECTOR).normalize and not encoders.make(gym.spaces.Discrete(4)).normalize
    x = encoders.preprocess(gym.spaces.MultiDiscrete([3, 2]), th.tensor([[2, 0], [0, 1]]))
    assert th.equal(x, th.tensor([[0, 0, 1, 1, 0], [1, 0, 0, 0, 1]], dtype=th.float32))
    enc = encoders.make(gym.spaces.Discrete(4))
    enc.update(encoders.preprocess(gym.spaces.Discrete(4), th.tensor([0, 1, 1, 3])))
    assert enc.count == 0  # one-hot inputs keep no statistics


def test_a_cnn_sees_the_same_frames_channels_first_or_last():
    th.manual_seed(0)
    last, first = encoders.make(IMAGE_HWC), encoders.make(IMAGE_CHW)
    first.load_state_dict(last.state_dict())
    frames = th.randint(0, 256, (5, 40, 40, 3), dtype=th.uint8)
    assert th.allclose(last(frames.float()), first(frames.permute(0, 3, 1, 2).float()), atol=1e-6)


@pytest.mark.parametrize("space", [IMAGE_HWC, IMAGE_CHW, gym.spaces.Box(0, 255, (6, 6, 2), np.uint8)])
def test_a_cnn_is_the_plain_network_on_frames_scaled_to_one_whatever_the_batch(space):
    """The 1/255 folded into the first convolution and large batches taken in chunks give what the layers
    give applied in order to frames / 255 (the function the weights were trained as), uint8 or float input."""
    th.manual_seed(0)
    enc = encoders.make(space)
    n = encoders.CNN_CHUNK + 37  # more than one chunk
    frames = th.randint(0, 256, (n, *space.shape), dtype=th.uint8)
    x = frames if int(np.argmin(space.shape)) == 0 else frames.permute(0, 3, 1, 2)
    with th.no_grad():
        want = enc.linear(enc.cnn(x.float() / 255.0))
        assert th.allclose(enc(frames), want, atol=1e-5)
        assert th.allclose(enc(frames.float()), want, atol=1e-5)
    enc(frames[:3]).sum().backward()  # the first convolution's weights still learn
    assert enc.cnn[0].weight.grad is not None and enc.cnn[0].weight.grad.abs().sum() > 0


@pytest.mark.parametrize(
    "space",
    [
        IMAGE_CHW,
        gym.spaces.Discrete(5),
        gym.spaces.Dict({"img": IMAGE_HWC, "v": VECTOR, "d": gym.spaces.Discrete(3)}),
    ],
)
def test_the_policy_encodes_observations_as_the_env_gave_them_with_sb3s_results(space):
    """gailkit's policy hands frames to its CNN as uint8 (no float copy first) and every other space as SB3's
    `preprocess_obs` does: with the same weights it gives SB3's own `ActorCriticPolicy`'s actions, values and
    log-probabilities."""
    from stable_baselines3.common.policies import ActorCriticPolicy

    th.manual_seed(0)
    pol = policy.build(space, gym.spaces.Discrete(3), PolicyConfig(cnn_features=32), True)
    sb3 = ActorCriticPolicy(
        space, gym.spaces.Discrete(3), lambda _: 0.0, **policy.policy_kwargs(PolicyConfig(cnn_features=32), True, space)
    )
    sb3.load_state_dict(pol.state_dict())
    raw = [space.sample() for _ in range(7)]
    batch = (
        {k: np.stack([r[k] for r in raw]) for k in space.spaces}
        if isinstance(space, gym.spaces.Dict)
        else np.stack(raw)
    )
    obs, _ = pol.obs_to_tensor(batch)
    acts = th.as_tensor([0, 1, 2, 0, 1, 2, 0])
    with th.no_grad():
        for a, b in zip(pol.evaluate_actions(obs, acts), sb3.evaluate_actions(obs, acts)):
            assert th.allclose(a, b, atol=1e-5)


@pytest.mark.parametrize(
    "space, says",
    [
        (gym.spaces.Tuple([VECTOR, VECTOR]), "Tuple"),
        (gym.spaces.Text(5), "Text"),
        (gym.spaces.Dict({"a": gym.spaces.Dict({"b": VECTOR})}), "is itself a Dict"),
    ],
)
def test_a_space_no_encoder_fits_is_named_in_one_line(space, says):
    with pytest.raises(encoders.UnsupportedSpace, match=says) as e:
        encoders.make(space)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "space, says",
    [
        (gym.spaces.MultiDiscrete([3, 2], start=[-1, 1]), None),
        (gym.spaces.MultiDiscrete([[2, 3], [4, 2]]), "flatten it (e.g. MultiDiscrete([2, 3, 4, 2])"),
        (gym.spaces.MultiBinary([2, 3]), "flatten it (e.g. MultiBinary(6)"),
        (gym.spaces.Box(-np.inf, np.inf, (2,), np.float32), "needs finite bounds"),
        (gym.spaces.Box(-1, 1, (2,), np.float32), None),
        (gym.spaces.Box(-1, 1, (2, 2), np.float32), None),
        (gym.spaces.Dict({"a": gym.spaces.Discrete(2)}), "Dict"),
        (gym.spaces.Tuple([gym.spaces.Discrete(2)] * 2), "(Box, Discrete, MultiDiscrete, MultiBinary are)"),
        (gym.spaces.Box(0, 4, (2,), np.int64), None),
    ],
)
def test_an_action_space_no_policy_head_takes_is_named_in_one_line(space, says):
    if says is None:
        spaces.check_action_space(space)
        return
    with pytest.raises(spaces.UnsupportedSpace, match=re.escape(says)) as e:
        spaces.check_action_space(space)
    assert "\n" not in str(e.value) and str(e.value).startswith("action space ")


def test_box_actions_reach_the_env_in_the_boxs_own_dtype():
    """A policy's Gaussian gives float32; an env that checks `contains` needs its Box's dtype: an integer or
    bool Box's actions rounded within the bounds, a float Box's cast; other spaces' actions untouched."""
    ints = gym.spaces.Box(0, 4, (3,), np.int64)
    got = spaces.env_action(ints, np.array([[-0.7, 2.5, 3.6], [1.49, 9.0, 0.51]], np.float32))
    assert got.dtype == np.int64 and got.tolist() == [[0, 2, 4], [1, 4, 1]]
    assert all(ints.contains(row) for row in got)
    flags = gym.spaces.Box(0, 1, (2,), bool)
    assert spaces.in_box_dtype(flags, np.array([0.2, 0.8], np.float32)).tolist() == [False, True]
    halves = gym.spaces.Box(-1, 1, (2,), np.float16)
    assert halves.contains(spaces.env_action(halves, np.array([[0.25, -2.0]], np.float32))[0])
    assert spaces.env_action(gym.spaces.Discrete(3, start=1), np.array([0, 2])).tolist() == [1, 3]
    same = np.array([0.5], np.float32)
    assert spaces.in_box_dtype(gym.spaces.Box(-1, 1, (1,), np.float32), same) is same


def test_matrix_observations_the_policies_take_or_refuse_in_one_line():
    spaces.check_space(gym.spaces.MultiBinary([2, 3]))  # flattened by the encoder, like a matrix Box
    with pytest.raises(spaces.UnsupportedSpace, match=r"MultiDiscrete\(\[\[2 3\] \[4 2\]\]\) has 2 dim") as e:
        spaces.check_space(gym.spaces.MultiDiscrete([[2, 3], [4, 2]]))
    assert "\n" not in str(e.value)


def test_a_box_without_axes_is_refused_in_one_line_before_anything_is_recorded(tmp_path):
    """A 0-dimensional Box (a scalar observation or action) crashed the first round; it is one line now."""
    scalar = gym.spaces.Box(-1, 1, (), np.float32)
    for check in (spaces.check_space, spaces.check_action_space):
        with pytest.raises(spaces.UnsupportedSpace, match=r"has no axes .* give it shape \(1,\)") as e:
            check(scalar)
        assert "\n" not in str(e.value)
    with pytest.raises(spaces.UnsupportedSpace, match=r"holds no values"):
        spaces.check_space(gym.spaces.Box(0, 1, (3, 0), np.float32))
    out = tmp_path / "d.arrow"
    r = run_cli("demos", "record", "--env", "tests/space_envs.py:ScalarObs", "--expert",
                "tests/space_envs.py:scalar_expert", "--episodes", "2", "--out", str(out))  # fmt: skip
    assert r.returncode == 2 and "observation space Box(-1.0, 1.0, (), float32) has no axes" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not out.exists()


def test_an_unbounded_action_space_is_refused_before_anything_is_recorded(tmp_path):
    out = tmp_path / "d.arrow"
    r = run_cli("demos", "record", "--env", "tests/space_envs.py:UnboundedAct", "--expert",
                "tests/space_envs.py:unbounded_expert", "--episodes", "2", "--out", str(out))  # fmt: skip
    assert r.returncode == 2 and "needs finite bounds" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not out.exists()


def test_matrix_box_actions_through_sac_export_and_infer(tmp_path):
    """SAC's actor gives flat rows; the env, the demos, the replay and the ONNX graph see (2, 2) actions."""
    env = "tests/space_envs.py:MatrixBoxAct"
    demos, run, onnx = tmp_path / "demos.arrow", tmp_path / "run", tmp_path / "p.onnx"
    r = run_cli("demos", "record", "--env", env, "--expert", "tests/space_envs.py:matrix_box_expert",
                "--episodes", "4", "--out", str(demos))  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = run_cli(
        "train", "--env", env, "--demos", str(demos), "--preset", "tiny", "--total-steps", "256", "--quiet",
        "--run-dir", str(run), "--set", "eval_episodes=2", "--set", "generator=sac",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    report = onnx_plays_as_torch(run, env, onnx)
    r = run_cli("infer", str(onnx), "--env", env, "--episodes", "2", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["returns"] == pytest.approx(report["policy"]["returns"], rel=1e-5)


def test_policy_and_discriminator_get_their_encoders_only_from_the_factory(monkeypatch):
    """The seam: a policy (actor and critic) and a discriminator built for an image space both ask
    `encoders.choose`; bypassing it (a hand-built extractor) would leave `asked` empty."""
    asked = []
    real = encoders.choose
    monkeypatch.setattr(encoders, "choose", lambda space, *a, **k: (asked.append(space), real(space, *a, **k))[1])
    pol = policy.build(IMAGE_HWC, gym.spaces.Discrete(2), PolicyConfig(net_arch=[8], cnn_features=32), True)
    disc = Discriminator(IMAGE_HWC, gym.spaces.Discrete(2), DiscConfig(net_arch=[8], cnn_features=16), "cpu", "gail")
    assert asked == [IMAGE_HWC, IMAGE_HWC]
    assert isinstance(pol.features_extractor, encoders.ImageCNN)
    assert isinstance(disc.net.inputs.encoder, encoders.ImageCNN) and disc.net.inputs.encoder.features_dim == 16
    frames = np.stack([IMAGE_HWC.sample() for _ in range(6)])
    b = disc.batch(frames, np.array([0, 1, 0, 1, 0, 1]), frames)
    assert b.obs.dtype == th.uint8  # pools keep frames as uint8; the net scales them
    assert disc.train_step(b, b[th.arange(5, -1, -1)])["disc/loss"] > 0


ENVS = {
    "DiscreteObs": "discrete_obs_expert",
    "MultiDiscreteAct": "multi_discrete_expert",
    "MultiBinaryAct": "multi_binary_expert",
    "ImageObs": "image_expert",
    "GreyObs": "grey_expert",
    "DictObs": "dict_expert",
    "TupleObs": "tuple_expert",
    "MatrixBoxAct": "matrix_box_expert",
    "MultiDiscreteObs": "multi_discrete_obs_expert",
    "MultiBinaryMatrixObs": "multi_binary_matrix_expert",
    "BoolObs": "bool_obs_expert",
    "ShiftedDiscrete": "shifted_discrete_expert",
    "ShiftedDict": "shifted_dict_expert",
    "IntBoxAct": "IntBoxAct.expert",
}


@pytest.mark.parametrize("name", list(ENVS))
def test_every_space_end_to_end(tmp_path, name):
    """Record with a scripted expert, train a little, evaluate, export to ONNX (parity checked) and
    run it with onnxruntime: every command works and ONNX plays as the torch policy does."""
    env = f"tests/space_envs.py:{name}"
    demos, run, onnx = tmp_path / "demos.arrow", tmp_path / "run", tmp_path / "p.onnx"
    steps = ["record", "--env", env, "--expert", f"tests/space_envs.py:{ENVS[name]}", "--episodes", "6"]
    r = run_cli("demos", *steps, "--out", str(demos))
    assert r.returncode == 0, r.stderr
    r = run_cli(
        "train", "--env", env, "--demos", str(demos), "--preset", "tiny", "--total-steps", "512", "--quiet",
        "--run-dir", str(run), "--set", "eval_episodes=2",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = run_cli("export", str(run), "--out", str(onnx))
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr
    r = run_cli("evaluate", str(run), "--env", env, "--episodes", "3", "--onnx", str(onnx), "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    expect = report["policy"]["returns"]
    if name == "MatrixBoxAct":  # float actions: onnxruntime rounds apart from torch in the last bits
        expect = pytest.approx(expect, rel=1e-5)
    assert report["onnx"]["returns"] == expect
    r = run_cli("infer", str(onnx), "--env", env, "--episodes", "3", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["returns"] == expect
    if name in ("ImageObs", "GreyObs"):  # frames of either layout are read by a CNN, not flattened
        from gailkit.run import checkpoint

        pol, _ = checkpoint.load_policy(run / "final" / "checkpoint.pt")
        assert isinstance(pol.features_extractor, encoders.ImageCNN)


def test_grey_frames_are_images_and_small_tables_are_not():
    """A 2-dimensional Box is a grey frame (a CNN of one channel) from 8x8 on; a 2x3 table of uint8 stays a
    vector. Random shifts of grey frames are the shifts of the same frames with a channel axis."""
    from gailkit.algo.discriminator.augment import _shift

    grey, table = gym.spaces.Box(0, 255, (16, 12), np.uint8), gym.spaces.Box(0, 255, (2, 3), np.uint8)
    assert spaces.is_image(grey) and not spaces.is_image(table) and not spaces.is_image(table, "cnn")
    assert spaces.is_image(gym.spaces.Box(0, 1, (16, 12), np.float32), "cnn")
    cnn = encoders.make(grey, cnn_features=8)
    assert isinstance(cnn, encoders.ImageCNN) and cnn(th.as_tensor(np.stack([grey.sample()] * 5))).shape == (5, 8)
    assert isinstance(encoders.make(table), encoders.NormalizedFlatten)
    x = th.as_tensor(np.stack([grey.sample() for _ in range(4)]))
    dy, dx = th.tensor([0, 1, 4, 8]), th.tensor([8, 2, 0, 4])
    assert th.equal(_shift(x, 4, dy, dx), _shift(x.unsqueeze(1), 4, dy, dx).squeeze(1))


def test_what_the_data_path_cannot_carry_is_refused_before_anything_is_recorded(tmp_path):
    out = tmp_path / "d.arrow"
    r = run_cli("demos", "record", "--env", "tests/space_envs.py:NestedObs", "--expert",
                "tests/space_envs.py:nested_expert", "--episodes", "2", "--out", str(out))  # fmt: skip
    assert r.returncode == 2 and "entry 'inner'" in r.stderr and "Tuple" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not out.exists()


def test_discrete_multi_discrete_and_multi_binary_heads_match_sb3_modes():
    """The exported deterministic head picks what SB3's distribution calls its mode."""
    for space in (gym.spaces.Discrete(3), gym.spaces.MultiDiscrete([3, 2, 4]), gym.spaces.MultiBinary(3)):
        pol = policy.build(VECTOR, space, PolicyConfig(net_arch=[8], ortho_init=False), False)
        obs = th.as_tensor(np.stack([VECTOR.sample() for _ in range(64)]))
        action, _, log_prob = policy.DeterministicHead(pol)(obs)
        dist = pol.get_distribution(obs)
        assert th.equal(action.reshape(64, -1).float(), dist.mode().reshape(64, -1).float()), space
        assert th.allclose(log_prob, dist.log_prob(dist.mode()), atol=1e-5), space


def test_a_gymnasium_env_that_indexes_tables_with_its_action_records_and_trains(tmp_path):
    """FrozenLake looks its Discrete action up in a dict: a 0-d array there is unhashable (it crashed)."""
    from gailkit.data import demos, experts

    d = experts.record(lambda obs: 2, "FrozenLake-v1", 3, 0, "always right")
    assert len(d) > 0 and d.acts.dtype.kind == "i" and (d.acts == 2).all()
    demos.save(d, tmp_path / "fl.arrow")
    r = run_cli("train", "--env", "FrozenLake-v1", "--demos", str(tmp_path / "fl.arrow"), "--preset", "tiny",
                "--total-steps", "256", "--quiet", "--run-dir", str(tmp_path / "run"))  # fmt: skip
    assert r.returncode == 0, r.stderr


MIXED = "tests/space_envs.py:DictMixedObs"
SAC_TINY = ["generator=sac", "n_envs=1", "sac.learning_starts=32", "sac.batch_size=32", "sac.n_steps=16"]


@pytest.mark.slow
def test_dict_observations_of_every_entry_kind_through_actor_processes_sac_resume_and_onnx(tmp_path):
    """A Dict of a uint8 frame, a vector and a Discrete: demo files hold one column per entry; actor
    processes send them over the wire; SAC's replay keeps them (and its checkpoint resumes exactly);
    ONNX takes one input per entry and plays as the torch policy does."""

    from gailkit.data import demos as demos_mod
    from gailkit.run import metrics, train

    out = tmp_path / "mixed.arrow"
    r = run_cli("demos", "record", "--env", MIXED, "--expert", "tests/space_envs.py:dict_mixed_expert",
                "--episodes", "6", "--out", str(out))  # fmt: skip
    assert r.returncode == 0, r.stderr
    import pyarrow as pa

    names = pa.ipc.open_file(pa.memory_map(str(out))).schema.names
    assert {"obs/frame", "obs/vec", "obs/mode", "next_obs/frame"} <= set(names) and "obs" not in names
    d = demos_mod.load_file(out)
    assert d.obs["frame"].shape == (96, 8, 8, 1) and d.obs["frame"].dtype == np.uint8 and d.whole_episodes()
    sets = [*SAC_TINY, "total_steps=128", "checkpoint_every=4", "eval_every=4", "eval_episodes=2"]
    by_wire = ["total_steps=64", "eval_every=0", "fleet.actors=1", "fleet.envs_per_actor=1"]
    wire = train.train_config(MIXED, str(out), None, [*SAC_TINY, *by_wire], preset="tiny")
    s = train.train(wire, tmp_path / "wire", quiet=True, log=lambda m: None, allow_code=True)
    assert s["env_steps"] == 64  # every fragment came from the actor process, over the wire
    rows = metrics.read_rows(tmp_path / "wire" / "metrics.csv")
    assert float(rows[-1]["replay/size"]) == 64 and float(rows[-1]["actors/dropped"] or 0) == 0
    cfg = train.train_config(MIXED, str(out), None, sets, preset="tiny")
    full = tmp_path / "full"
    train.train(cfg, full, quiet=True, log=lambda m: None, allow_code=True)
    resumed_equals_uninterrupted(cfg, full, tmp_path / "resumed", last_round=8)
    onnx = tmp_path / "mixed.onnx"
    onnx_plays_as_torch(full, MIXED, onnx)
    from gailkit.inference import InferenceError, OnnxPolicy

    pi = OnnxPolicy(onnx)
    assert [i.name for i in pi.session.get_inputs()] == ["obs/frame", "obs/mode", "obs/vec"]
    one = {"frame": d.obs["frame"][0], "vec": d.obs["vec"][0], "mode": d.obs["mode"][0]}
    assert pi.predict(one).shape == (1,)
    assert pi.predict({k: d.obs[k][:5] for k in one}).shape == (5, 1)
    with pytest.raises(InferenceError, match=r"expected a mapping of \['frame', 'mode', 'vec'\]"):
        pi.predict(d.obs["vec"][0])
    with pytest.raises(InferenceError, match="'obs/frame' of shape"):
        pi.predict({**one, "frame": np.zeros((4, 4), np.uint8)})


def test_a_dict_observation_with_a_frame_stack_is_refused_before_any_episode_is_recorded(tmp_path):
    out = tmp_path / "d.arrow"
    r = run_cli("demos", "record", "--env", "tests/space_envs.py:DictObs", "--expert", "tests/space_envs.py:dict_expert",
                "--episodes", "2", "--frame-stack", "2", "--out", str(out))  # fmt: skip
    assert r.returncode == 2 and "frame stacks need a Box" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not out.exists()


def test_a_run_made_with_the_older_cnn_default_keeps_its_layers_to_evaluate_export_and_resume(tmp_path):
    """A CNN policy of a run from before `policy.default_net_arch` has [64, 64] tanh layers under an empty
    `net_arch` in its settings; today's default has none, and its checkpoints still load as trained."""
    import yaml

    from gailkit.run import checkpoint, train

    env, demos, run = "tests/space_envs.py:ImageObs", tmp_path / "demos.arrow", tmp_path / "run"
    r = run_cli("demos", "record", "--env", env, "--expert", "tests/space_envs.py:image_expert", "--episodes", "4",
                "--out", str(demos))  # fmt: skip
    assert r.returncode == 0, r.stderr
    sets = ["total_steps=128", "checkpoint_every=2", "eval_every=0"]
    older = train.train_config(env, str(demos), None, [*sets, "policy.net_arch=[64, 64]"], preset="tiny")
    train.train(older, run, quiet=True, log=lambda m: None, allow_code=True)
    for ckpt in run.rglob("*.pt"):  # what that run wrote: an empty net_arch
        data = th.load(ckpt, weights_only=True)
        data["config"]["policy"]["net_arch"] = []
        th.save(data, ckpt)
    settings = yaml.safe_load((run / "config.yaml").read_text())
    assert settings["policy"]["net_arch"] == [64, 64]
    settings["policy"]["net_arch"] = []
    (run / "config.yaml").write_text(yaml.safe_dump(settings))
    pol, state = checkpoint.load_policy(run / "final" / "checkpoint.pt")
    assert len(pol.mlp_extractor.policy_net) == 4 and state.settings.policy.net_arch == [64, 64]
    r = run_cli("evaluate", str(run), "--env", env, "--episodes", "1", "--json")
    assert r.returncode == 0, r.stderr
    r = run_cli("export", str(run), "--out", str(tmp_path / "p.onnx"))
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr
    logged: list[str] = []
    today = train.train_config(
        env, str(demos), None, [*sets[1:], "total_steps=192", "policy.net_arch=[]"], preset="tiny"
    )
    assert train.train(today, run, resume=True, quiet=True, log=logged.append, allow_code=True)["env_steps"] == 192
    assert not any("skipped" in m for m in logged), logged


@pytest.mark.parametrize("name", ["ShiftedDiscrete", "ShiftedDict"])
def test_spaces_that_do_not_count_from_zero_learn_the_experts_values(tmp_path, name):
    """Demo files, the env and the ONNX graph carry the env's values (Discrete(3, start=1) gives 1..3); the
    policy's heads count from 0. A clone of the expert must play the expert's values: the env refuses any
    other, and each step it matches scores 1 (16 a episode)."""
    env = f"tests/space_envs.py:{name}"
    demos, run, onnx = tmp_path / "demos.arrow", tmp_path / "run", tmp_path / "p.onnx"
    expert = f"tests/space_envs.py:{ENVS[name]}"
    r = run_cli("demos", "record", "--env", env, "--expert", expert, "--episodes", "20", "--out", str(demos))
    assert r.returncode == 0, r.stderr
    space = getattr(space_envs, name).action_space
    acts = demos_mod.load_file(demos).acts
    assert all(space.contains(np.asarray(a, space.dtype)) for a in acts)  # the env's values, as it was given them
    r = run_cli("demos", "inspect", str(demos))
    assert r.returncode == 0 and "start=" in r.stdout, r.stdout + r.stderr
    r = run_cli(
        "train", "--env", env, "--demos", str(demos), "--preset", "tiny", "--total-steps", "256", "--quiet",
        "--run-dir", str(run), "--set", "eval_episodes=4", "--set", "bc.epochs=200",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = run_cli("export", str(run), "--out", str(onnx))
    assert r.returncode == 0, r.stderr
    r = run_cli("infer", str(onnx), "--env", env, "--episodes", "4", "--json")
    assert r.returncode == 0, r.stderr
    assert np.mean(json.loads(r.stdout)["returns"]) >= 0.9 * 16, r.stdout


def test_absorbing_rows_and_the_gradient_penalty_take_discrete_spaces_that_do_not_start_at_0():
    """An absorbing row's observation and action are zeros, outside Discrete(3, start=5): the one-hot clamps
    them and the flag masks them, so the discriminator judges and trains on them."""
    obs_space, act_space = gym.spaces.Discrete(4, start=5), gym.spaces.MultiDiscrete([3, 2], start=[-1, 10])
    disc = Discriminator(
        obs_space, act_space, DiscConfig(net_arch=[8], absorbing=True, grad_penalty=10.0), "cpu", "gail"
    )
    obs = np.array([5, 6, 7, 8])
    acts = np.array([[-1, 10], [0, 11], [1, 10], [0, 10]])
    terminated = np.array([False, False, False, True])
    b = disc.batch(obs, acts, obs, None, terminated)
    both = type(b).cat([b, disc.absorbing(2)])
    assert th.isfinite(disc.reward(both)).all() and len(disc.reward(both)) == 6
    assert np.isfinite(disc.train_step(both, both)["disc/loss"])
    one_hot = encoders.preprocess(act_space, th.as_tensor(acts))
    assert one_hot.tolist()[0] == [1, 0, 0, 1, 0] and one_hot.tolist()[1] == [0, 1, 0, 0, 1]


@pytest.mark.parametrize(
    "name, expert, generator",
    [("ImageObs", "image_expert", "ppo"), ("ImageCHW", "ImageCHW.expert", "ppo"), ("ImageBoxAct", "image_box_expert", "sac")],
)  # fmt: skip
def test_a_stack_of_colour_frames_is_read_by_a_cnn_through_training_export_and_infer(tmp_path, name, expert, generator):
    """`env.frame_stack` over frames with channels gives a 4-dimensional Box (K x H x W x C, or K x C x H x W):
    a CNN reads the K frames' channels as one frame's (they were flattened into an MLP), for the policy and the
    discriminator (random shifts included), through PPO or SAC's frame replay, export and onnxruntime."""
    from gailkit.run import checkpoint

    env = f"tests/space_envs.py:{name}"
    demos, run, onnx = tmp_path / "demos.arrow", tmp_path / "run", tmp_path / "p.onnx"
    r = run_cli("demos", "record", "--env", env, "--expert", f"tests/space_envs.py:{expert}", "--frame-stack", "3",
                "--episodes", "4", "--out", str(demos))  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = run_cli(
        "train", "--env", env, "--demos", str(demos), "--preset", "tiny", "--total-steps", "256", "--quiet",
        "--run-dir", str(run), "--set", "eval_episodes=2", "--set", "env.frame_stack=3", "--set", f"generator={generator}",
        "--set", "disc.augment_shift=2",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    pol, _ = checkpoint.load_policy(run / "final" / "checkpoint.pt")
    extractor = pol.features_extractor  # PPO's ActorCritic or SAC's actor
    assert isinstance(extractor, encoders.ImageCNN) and len(pol.observation_space.shape) == 4
    assert extractor.cnn[0].in_channels == 3 * min(pol.observation_space.shape[1:])
    report = onnx_plays_as_torch(run, env, onnx)
    r = run_cli("infer", str(onnx), "--env", env, "--episodes", "2", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["returns"] == pytest.approx(report["policy"]["returns"], rel=1e-5)


def test_a_cnn_reads_a_stack_of_frames_as_the_frames_channels_side_by_side():
    """The stacked CNN is the plain CNN on the frames' channels concatenated (frame 0's first), either layout."""
    th.manual_seed(0)
    stack_last, frames_last = (
        gym.spaces.Box(0, 255, (3, 10, 10, 2), np.uint8),
        gym.spaces.Box(0, 255, (10, 10, 6), np.uint8),
    )
    stacked, plain = encoders.ImageCNN(stack_last, 16), encoders.ImageCNN(frames_last, 16)
    plain.load_state_dict(stacked.state_dict())
    x = th.as_tensor(np.stack([stack_last.sample() for _ in range(5)]))
    merged = x.permute(0, 2, 3, 1, 4).reshape(5, 10, 10, 6)  # (N, H, W, K x C), frame 0's channels first
    assert th.allclose(stacked(x), plain(merged), atol=1e-5)
    stack_first = gym.spaces.Box(0, 255, (3, 2, 10, 10), np.uint8)
    stacked_first = encoders.ImageCNN(stack_first, 16)
    stacked_first.load_state_dict(stacked.state_dict())
    assert th.allclose(stacked_first(x.permute(0, 1, 4, 2, 3)), stacked(x), atol=1e-5)


@pytest.mark.parametrize("generator", ["ppo", "sac"])
def test_a_run_that_flattened_a_stack_of_colour_frames_still_evaluates_exports_and_resumes(tmp_path, generator):
    """Before a CNN read 4-dimensional frame stacks, `encoder: auto` flattened them; such a run's checkpoints
    (policy and discriminator) rebuild with the flattening encoders they were trained with."""
    import yaml

    from gailkit.run import checkpoint, train

    env, demos, run = "tests/space_envs.py:ImageBoxAct", tmp_path / "demos.arrow", tmp_path / "run"
    r = run_cli("demos", "record", "--env", env, "--expert", "tests/space_envs.py:image_box_expert", "--frame-stack",
                "2", "--episodes", "3", "--out", str(demos))  # fmt: skip
    assert r.returncode == 0, r.stderr
    sets = ["total_steps=64", "checkpoint_every=1", "eval_every=0", "env.frame_stack=2", f"generator={generator}"]
    flat = ["policy.encoder=flat", "disc.encoder=flat"]
    older = train.train_config(env, str(demos), None, [*sets, *flat], preset="tiny")
    train.train(older, run, quiet=True, log=lambda m: None, allow_code=True)
    for ckpt in run.rglob("*.pt"):  # what a run of that code wrote: the encoders' `auto`
        data = th.load(ckpt, weights_only=True)
        data["config"]["policy"]["encoder"] = data["config"]["disc"]["encoder"] = "auto"
        th.save(data, ckpt)
    settings = yaml.safe_load((run / "config.yaml").read_text())
    settings["policy"]["encoder"] = settings["disc"]["encoder"] = "auto"
    (run / "config.yaml").write_text(yaml.safe_dump(settings))
    pol, state = checkpoint.load_policy(run / "final" / "checkpoint.pt")
    assert isinstance(pol.features_extractor, encoders.NormalizedFlatten)
    assert state.settings.policy.encoder == state.settings.disc.encoder == "flat"
    r = run_cli("evaluate", str(run), "--env", env, "--episodes", "1", "--json")
    assert r.returncode == 0, r.stderr
    r = run_cli("export", str(run), "--out", str(tmp_path / "p.onnx"))
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr
    logged: list[str] = []
    today = train.train_config(env, str(demos), None, [*sets[1:], "total_steps=128"], preset="tiny")
    assert train.train(today, run, resume=True, quiet=True, log=logged.append, allow_code=True)["env_steps"] == 128
    assert not any("skipped" in m for m in logged), logged
