"""The restricted unpickler: only the exact allow-list resolves, through every opcode that fetches a global,
and no pickle can run code (a marker file proves nothing ran)."""

import copyreg
import io
import pickle
import struct

import numpy as np
import pytest

from gailkit.data import demos
from gailkit.data.demos import pickle_io
from gailkit.data.demos.unpickler import ALLOWED, RefusedGlobal, RestrictedUnpickler, peek_env_id

MODULES = sorted({module for module, _ in ALLOWED})
# Names an attacker reaches for inside an admitted module: dotted paths to builtins, private helpers,
# the module's own imports.
HOSTILE_NAMES = [
    "__builtins__.get",
    "__builtins__.eval",
    "eval",
    "exec",
    "system",
    "os.system",
    "sys.modules.get",
    "__class__",
    "__dict__",
    "_reconstruct.__globals__.get",
    "ndarray.__reduce__",
    "getattr",
    "__import__",
    "dtype.__new__",
    "_frombuffer.__code__",
    "loads",
    "open",
]


def _marker_code(marker):
    return f"open({str(marker)!r}, 'w').write('ran')"


def _payloads(module: str, name: str, marker) -> dict[str, bytes]:
    """The same call `module.name('...')` through each opcode that fetches a global."""
    arg = _marker_code(marker).encode()
    m, n = module.encode(), name.encode()
    return {
        "GLOBAL": b"c" + m + b"\n" + n + b"\n(S'" + arg.replace(b"'", b"\\'") + b"'\ntR.",
        "STACK_GLOBAL": (
            b"\x80\x04"
            + b"\x8c"
            + bytes([len(m)])
            + m
            + b"\x8c"
            + bytes([len(n)])
            + n
            + b"\x93"
            + b"\x8c"
            + struct.pack("<B", len(arg))
            + arg
            + b"\x85R."
        ),
        "INST": b"(S'" + arg.replace(b"'", b"\\'") + b"'\ni" + m + b"\n" + n + b"\n.",
        "OBJ": b"(c" + m + b"\n" + n + b"\nS'" + arg.replace(b"'", b"\\'") + b"'\no.",
    }


@pytest.mark.parametrize("module", MODULES)
@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_every_admitted_module_refuses_every_other_name_through_every_opcode(tmp_path, module, name):
    if (module, name) in ALLOWED:
        pytest.skip("an admitted pair")
    marker = tmp_path / "ran"
    for opcode, data in _payloads(module, name, marker).items():
        with pytest.raises(RefusedGlobal):
            RestrictedUnpickler(io.BytesIO(data)).load()
        path = tmp_path / f"{opcode}.pkl"
        path.write_bytes(data)
        with pytest.raises(demos.DemoError, match=f"refused to unpickle '{module}.{name}'"):
            demos.load_file(path)
        assert not marker.exists(), (module, name, opcode)


def test_extension_registry_opcodes_are_refused_too(tmp_path):
    """EXT1/EXT2/EXT4 name a global through copyreg's registry; they go through find_class as well."""
    marker = tmp_path / "ran"
    copyreg.add_extension("builtins", "eval", 240)
    copyreg.add_extension("numpy.dtypes", "__builtins__.get", 70000)
    try:
        arg = _marker_code(marker).encode()
        call = b"\x8c" + struct.pack("<B", len(arg)) + arg + b"\x85R."
        for head in (b"\x82\xf0", b"\x83" + struct.pack("<H", 240), b"\x84" + struct.pack("<i", 70000)):
            with pytest.raises(RefusedGlobal):
                RestrictedUnpickler(io.BytesIO(b"\x80\x02" + head + call)).load()
    finally:
        copyreg.remove_extension("builtins", "eval", 240)
        copyreg.remove_extension("numpy.dtypes", "__builtins__.get", 70000)
    assert not marker.exists()


def test_the_published_escape_is_refused(tmp_path):
    """numpy.dtypes.__builtins__.get('eval')(code): an 89-byte pickle that escaped gailkit 0.1."""
    marker = tmp_path / "ran"
    code = _marker_code(marker).encode()
    data = (
        b"\x80\x04\x8c\x0cnumpy.dtypes\x8c\x10__builtins__.get\x93\x8c\x04eval\x85R"
        + b"\x8c"
        + bytes([len(code)])
        + code
        + b"\x85R."
    )
    (tmp_path / "escape.pkl").write_bytes(data)
    with pytest.raises(demos.DemoError, match="refused to unpickle 'numpy.dtypes.__builtins__.get'"):
        demos.load(tmp_path / "escape.pkl")
    assert not marker.exists()


@pytest.mark.parametrize("proto", range(pickle.HIGHEST_PROTOCOL + 1))
def test_numpy_arrays_scalars_and_containers_load_in_every_protocol(proto):
    import collections

    obj = {
        "a": np.arange(6, dtype=np.float32).reshape(2, 3),
        "b": np.float64(2.5),
        "c": np.int64(3),
        "d": [1, (2, 3)],
        "e": {4, 5},
        "f": frozenset({6}),
        "g": np.array([True, False]),
        "h": np.array([{"x": 1}], dtype=object),
        "i": collections.OrderedDict(k=1),
        "j": np.zeros((2, 2)).T,
        "k": bytearray(b"xy"),
        "l": 1 + 2j,
        "m": np.dtype("float32"),
        "n": np.array(["text"]),
    }
    back = RestrictedUnpickler(io.BytesIO(pickle.dumps(obj, protocol=proto))).load()
    assert set(back) == set(obj)
    for key in obj:
        if isinstance(obj[key], np.ndarray):
            assert np.array_equal(back[key], obj[key]) and back[key].dtype == obj[key].dtype, key
        else:
            assert back[key] == obj[key], key


def test_imitation_records_take_only_their_fields():
    rec = pickle_io.RECORDS["Trajectory"].__new__(pickle_io.RECORDS["Trajectory"])
    rec.__setstate__({"obs": 1, "acts": 2, "infos": None, "terminal": True, "__class__": "nope", "extra": 5})
    assert (rec.obs, rec.acts, rec.terminal) == (1, 2, True) and not hasattr(rec, "extra")
    with pytest.raises(pickle.UnpicklingError):
        rec.__setstate__("not a dict")


def test_a_folder_pickle_of_another_env_is_never_unpickled(tmp_path, custom_demos, cartpole_demos):
    """The env id of a gailkit pickle is read from its opcodes: other envs' files are not loaded at all."""
    demos.save(custom_demos, tmp_path / "custom.pkl")
    demos.save(cartpole_demos, tmp_path / "cartpole.pkl")
    assert peek_env_id(tmp_path / "custom.pkl") == "CustomEnv"
    assert peek_env_id(tmp_path / "cartpole.pkl") == "CartPole-v1"
    loaded = []
    original = pickle_io.read

    def spy(path, unsafe=False):
        loaded.append(path.name)
        return original(path, unsafe)

    pickle_io.read, saved = spy, pickle_io.read
    try:
        from gailkit.data import envs

        d = demos.load(tmp_path, env_id="CustomEnv", spaces=envs.spaces("CustomEnv"))
    finally:
        pickle_io.read = saved
    assert loaded == ["custom.pkl"] and len(d) == len(custom_demos)


def test_what_a_few_bytes_of_pickle_would_build_past_memory_is_refused_at_once(tmp_path):
    """A pickle refers back to what it has built in a few bytes, and calls the constructors it may name: ten
    lists of ten references to the one before (358 bytes) are 10^10 numbers once `numpy.asarray` walks them,
    `bytearray(10**10)` (by REDUCE, or by protocol 0's `copyreg._reconstructor`) is 10 GB of zeros, and a list
    that holds itself never ends. Each hung `demos inspect` or took its memory; each is one line now, at once,
    and a file whose rows share one list (small) still loads."""
    from tests.conftest import run_cli

    laughs: list = [0.0] * 10
    for _ in range(9):
        laughs = [laughs] * 10
    cycle: list = [1.0]
    cycle.append(cycle)

    class Sized:
        def __reduce__(self):
            return (bytearray, (10**10,))

    files = {
        "laughs": (pickle.dumps({"obs": laughs, "next_obs": laughs, "acts": [0] * 10}), "expand it past"),
        "bytearray": (pickle.dumps({"obs": Sized(), "next_obs": [0.0]}, protocol=4), "bytearray() of anything but"),
        "reconstructor": (
            b"(dS'obs'\nccopy_reg\n_reconstructor\n(c__builtin__\nbytearray\nc__builtin__\nbytearray\n"
            b"I10000000000\ntRs.",
            "bytearray() of anything but",
        ),
        "list": (b"(dS'obs'\nc__builtin__\nlist\n(I10000000000\ntRs.", "list() of anything but"),
        "cycle": (pickle.dumps({"obs": cycle, "next_obs": cycle, "acts": [0, 0]}), "holds itself"),
    }
    for name, (data, says) in files.items():
        (tmp_path / f"{name}.pkl").write_bytes(data)
        r = run_cli("demos", "inspect", str(tmp_path / f"{name}.pkl"), timeout=60)
        errors = [line for line in r.stderr.splitlines() if line.startswith("gailkit: error: ")]
        assert r.returncode == 2 and len(errors) == 1 and "Traceback" not in r.stderr, (name, r.stderr[-2000:])
        assert f"{name}.pkl" in errors[0] and says in errors[0], (name, errors)
    import zipfile

    import torch as th

    from tests.conftest import ROOT

    weights = io.BytesIO()  # torch's weights-only loader is an unpickler too: an SB3 zip's policy.pth
    th.save({"w": laughs}, weights)
    with zipfile.ZipFile(ROOT / "experts" / "cartpole.zip") as src, zipfile.ZipFile(tmp_path / "e.zip", "w") as z:
        for name in src.namelist():
            z.writestr(name, weights.getvalue() if name == "policy.pth" else src.read(name))
    out = tmp_path / "x.arrow"
    r = run_cli("demos", "record", "--expert", str(tmp_path / "e.zip"), "--env", "CartPole-v1", "--out", str(out),
                "--episodes", "1", timeout=60)  # fmt: skip
    assert r.returncode == 2 and "e.zip: not a readable stable-baselines3 zip" in r.stderr, r.stderr[-2000:]
    assert "expand it past" in r.stderr and not out.exists()
    rows = [[0.5, 1.0, 2.0]] * 20  # every row the one list: 60 numbers, as written
    shared = {"obs": rows, "next_obs": rows, "acts": [[0.0]] * 20, "dones": [False] * 19 + [True]}
    (tmp_path / "shared.pkl").write_bytes(pickle.dumps(shared))
    loaded = demos.load(tmp_path / "shared.pkl")
    assert loaded.obs.shape == (20, 3) and np.all(loaded.obs == [0.5, 1.0, 2.0])
