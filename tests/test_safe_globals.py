"""lucid.serialization's safe globals (PyTorch 2.4+'s add_safe_globals API, NOTE [Safe globals]):
real torch.save files with user classes load once allowlisted and only then; hand-built
malicious pickles stay refused (those run without torch)."""
import argparse
import dataclasses
import enum
import io
import pickle
import struct
import zipfile

import pytest

import lucid
from lucid.serialization import (add_safe_globals, clear_safe_globals, get_safe_globals,
                                 get_unsafe_globals_in_checkpoint, safe_globals)


class Color(enum.Enum):
    RED = 1
    BLUE = 2


@dataclasses.dataclass
class Config:
    lr: float
    layers: int


class Slotted:
    __slots__ = ("a", "b")

    def __init__(self, a, b):
        self.a, self.b = a, b


class Stateful:
    def __init__(self, x):
        self.x = x

    def __getstate__(self):
        return {"stored": self.x}

    def __setstate__(self, state):  # proves that BUILD went through __setstate__
        self.x = state["stored"] * 10


def scale(v, k):
    return v * k


@pytest.fixture(autouse=True)
def _clean_registry():
    clear_safe_globals()
    yield
    clear_safe_globals()


def _name(obj):
    return f"{obj.__module__}.{obj.__qualname__}"


# ------------------------------------------------------------ hand-built archives (no torch)
def _archive(pkl, storages=()):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("archive/data.pkl", pkl)
        zf.writestr("archive/byteorder", b"little")
        for key, raw in dict(storages).items():
            zf.writestr(f"archive/data/{key}", raw)
        zf.writestr("archive/version", b"3\n")
    return buf.getvalue()


def _glob(module, name):
    return b"c" + f"{module}\n{name}\n".encode()


def _str(text):
    raw = text.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw


def _load(raw, tmp_path, name="ckpt.pt", **kw):
    path = tmp_path / name
    path.write_bytes(raw)
    return lucid.load(path, **kw)


def test_registry_add_get_clear_and_validation():
    assert get_safe_globals() == []
    add_safe_globals([Config, (Color, "elsewhere.Color"), Config])
    assert get_safe_globals() == [Config, (Color, "elsewhere.Color")]  # once each, in order
    clear_safe_globals()
    assert get_safe_globals() == []
    with pytest.raises(TypeError, match="^add_safe_globals: expected a list"):
        add_safe_globals(Config)
    with pytest.raises(ValueError, match="^add_safe_globals: expected a tuple of length 2"):
        add_safe_globals([(Config, "a.b", 1)])
    with pytest.raises(TypeError, match="^add_safe_globals: expected the second item"):
        add_safe_globals([(Config, 3)])
    with pytest.raises(TypeError, match="^add_safe_globals: 3 has no __module__"):
        add_safe_globals([3])
    assert get_safe_globals() == []  # a failing call registers nothing


def test_safe_globals_context_adds_then_removes_only_its_own():
    add_safe_globals([Config])
    with safe_globals([Config, Color]) as ctx:
        assert isinstance(ctx, safe_globals) and set(get_safe_globals()) == {Config, Color}
        with safe_globals([Slotted]):
            assert Slotted in get_safe_globals()
        assert Slotted not in get_safe_globals()
    assert get_safe_globals() == [Config]  # registered before the block: kept
    with pytest.raises(ValueError, match="boom"), safe_globals([Color]):
        raise ValueError("boom")
    assert get_safe_globals() == [Config]


def test_registered_function_is_called_and_alias_names_are_matched(tmp_path):
    pkl = b"\x80\x02" + _glob(__name__, "scale") + b"K\x03K\x04\x86R."  # scale(3, 4)
    with pytest.raises(pickle.UnpicklingError, match=rf"refusing to load '{__name__}.scale'.*add_safe_globals"):
        _load(_archive(pkl), tmp_path)
    add_safe_globals([scale])
    assert _load(_archive(pkl), tmp_path) == 12
    # an (object, "module.name") pair answers that name only
    other = b"\x80\x02" + _glob("oldpkg.configs", "Config") + b")\x81}(" + _str("lr") + b"K\x02" + _str("layers") \
        + b"K\x05ub."
    with pytest.raises(pickle.UnpicklingError, match="refusing to load 'oldpkg.configs.Config'"):
        _load(_archive(other), tmp_path)
    add_safe_globals([(Config, "oldpkg.configs.Config")])
    assert _load(_archive(other), tmp_path) == Config(lr=2, layers=5)
    assert get_unsafe_globals_in_checkpoint(io.BytesIO(_archive(other))) == []


# ------------------------------------------------------------ malicious pickles stay refused
class _Evil:
    """Registered, but its pickle points at os.system: the file names os.system, not _Evil."""

    def __init__(self, cmd):
        self.cmd = cmd

    def __reduce__(self):
        import os

        return os.system, (self.cmd,)


class _EvilSubprocess(_Evil):
    def __reduce__(self):
        import subprocess

        return subprocess.call, (self.cmd.split(),)


def test_blocked_modules_stay_refused_even_when_registered(tmp_path, monkeypatch):
    import os

    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "pwned"
    add_safe_globals([os.system, (os.system, "os.system"), (os.system, "posix.system"), _Evil])
    raw = pickle.dumps(_Evil(f"touch {marker}"), protocol=2)
    assert raw.count(b"system") == 1  # the file names os's (posix's) system, never _Evil
    for pkl in (raw, b"\x80\x02" + _glob("os", "system") + _str(f"touch {marker}") + b"\x85R."):
        with pytest.raises(pickle.UnpicklingError, match=r"refusing to load '(os|posix)\.system'.*is blocked"):
            _load(_archive(pkl), tmp_path)
        assert not marker.exists()
    assert get_unsafe_globals_in_checkpoint(io.BytesIO(_archive(raw))) == [f"{os.system.__module__}.system"]


def test_registered_class_whose_reduce_points_elsewhere_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "pwned"
    add_safe_globals([_EvilSubprocess])
    raw = pickle.dumps(_EvilSubprocess(f"touch {marker}"), protocol=2)
    with pytest.raises(pickle.UnpicklingError, match=r"refusing to load 'commands.call'.*add_safe_globals\(\[subprocess.call\]\)"
                                                  r".*nothing in the file"):
        _load(_archive(raw), tmp_path, weights_only=False)
    assert not marker.exists()
    assert get_unsafe_globals_in_checkpoint(io.BytesIO(_archive(raw))) == ["subprocess.call"]


def test_registered_qualname_in_another_module_is_refused(tmp_path):
    add_safe_globals([Config])
    pkl = b"\x80\x02" + _glob("evil_module", "Config") + b")\x81."
    with pytest.raises(pickle.UnpicklingError, match="refusing to load 'evil_module.Config'"):
        _load(_archive(pkl), tmp_path)
    # nor does a registered class open its attributes: Config.__init__ is another name
    pkl = b"\x80\x02" + _glob(__name__, "Config.__init__") + b")R."
    with pytest.raises(pickle.UnpicklingError, match=r"refusing to load '.*Config\.__init__'"):
        _load(_archive(pkl), tmp_path)


def test_weights_only_false_is_still_refused_and_says_so(tmp_path):
    pkl = b"\x80\x02" + _glob(__name__, "Config") + b")\x81."
    with pytest.raises(pickle.UnpicklingError, match="weights_only=False does not change this"):
        _load(_archive(pkl), tmp_path, weights_only=False)
    with pytest.raises(pickle.UnpicklingError) as info:
        _load(_archive(pkl), tmp_path)
    assert "weights_only=False" not in str(info.value)
    assert f"lucid.serialization.add_safe_globals([{__name__}.Config])" in str(info.value)


@pytest.mark.parametrize("body, match", [
    # NEWOBJ of a registered function, or of a whitelisted class that is not registered
    (_glob(__name__, "scale") + b")\x81", "instantiates a class that is not allowlisted"),
    (_glob("collections", "OrderedDict") + b")\x81", "instantiates a class that is not allowlisted"),
    # BUILD may not retype a registered instance through its slot state
    (_glob(__name__, "Config") + b")\x81N}" + _str("__class__") + _glob(__name__, "Config") + b"s\x86b",
     "setting the slot state"),
    # BUILD on an object of a type that is not registered (a list), even with Config registered
    (b"]}" + _str("x") + b"K\x01sb", "setting the state of a list"),
    # NEWOBJ_EX stays refused, as in PyTorch
    (_glob(__name__, "Config") + b")}\x92", "instantiates a class"),
])
def test_opcodes_stay_restricted_for_registered_globals(body, match, tmp_path):
    add_safe_globals([Config, scale])
    with pytest.raises(pickle.UnpicklingError, match=match):
        _load(_archive(b"\x80\x02" + body + b"."), tmp_path)


def test_build_of_registered_classes_without_torch(tmp_path):
    add_safe_globals([Config, Slotted, Stateful])
    cfg = _load(_archive(pickle.dumps(Config(0.5, 2), protocol=2)), tmp_path)
    assert cfg == Config(0.5, 2)
    slotted = _load(_archive(pickle.dumps(Slotted(1, [2]), protocol=2)), tmp_path)
    assert type(slotted) is Slotted and (slotted.a, slotted.b) == (1, [2])
    st = _load(_archive(pickle.dumps(Stateful(4), protocol=2)), tmp_path)
    assert st.x == 40


def test_unsafe_globals_of_a_lucid_file_and_errors(tmp_path):
    buf = io.BytesIO()
    lucid.save({"w": lucid.ones(2)}, buf)
    buf.seek(0)
    assert get_unsafe_globals_in_checkpoint(buf) == []
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(ValueError, match="^get_unsafe_globals_in_checkpoint: .*bad.pt"):
        get_unsafe_globals_in_checkpoint(bad)


# ------------------------------------------------------------ real torch.save files
_OBJECTS = {
    "namespace": lambda torch: argparse.Namespace(lr=0.1, epochs=3),
    "dataclass": lambda torch: Config(lr=0.01, layers=4),
    "enum": lambda torch: Color.BLUE,
    "setstate": lambda torch: Stateful(7),
    "slots": lambda torch: Slotted(1.5, "b"),
}
_CLASSES = {"namespace": argparse.Namespace, "dataclass": Config, "enum": Color, "setstate": Stateful,
            "slots": Slotted}


def _check(kind, obj):
    if kind == "namespace":
        assert type(obj) is argparse.Namespace and vars(obj) == {"lr": 0.1, "epochs": 3}
    elif kind == "dataclass":
        assert obj == Config(lr=0.01, layers=4)
    elif kind == "enum":
        assert obj is Color.BLUE
    elif kind == "setstate":
        assert type(obj) is Stateful and obj.x == 70
    else:
        assert type(obj) is Slotted and (obj.a, obj.b) == (1.5, "b")


@pytest.mark.parametrize("kind", list(_OBJECTS))
def test_torch_checkpoint_with_a_user_object(kind, tmp_path):
    torch = pytest.importorskip("torch")
    path = tmp_path / f"{kind}.pt"
    torch.save({"model": {"w": torch.arange(3.0)}, "args": _OBJECTS[kind](torch)}, path)
    cls = _CLASSES[kind]
    name = _name(cls)
    assert get_unsafe_globals_in_checkpoint(path) == [name]
    with pytest.raises(pickle.UnpicklingError, match=f"refusing to load '{name}'.*add_safe_globals"):
        lucid.load(path)
    add_safe_globals([cls])
    assert get_unsafe_globals_in_checkpoint(str(path)) == []
    ck = lucid.load(path)
    assert ck["model"]["w"].tolist() == [0.0, 1.0, 2.0]
    _check(kind, ck["args"])
    clear_safe_globals()
    with pytest.raises(pickle.UnpicklingError, match=f"refusing to load '{name}'"):
        lucid.load(path)
    with safe_globals([cls]):
        _check(kind, lucid.load(path)["args"])
    with pytest.raises(pickle.UnpicklingError, match=f"refusing to load '{name}'"):
        lucid.load(path)
    # torch agrees on what needs allowlisting
    assert torch.serialization.get_unsafe_globals_in_checkpoint(str(path)) == [name]


def test_torch_namespace_holding_tensors(tmp_path):
    torch = pytest.importorskip("torch")
    path = tmp_path / "ns.pt"
    torch.save({"args": argparse.Namespace(w=torch.tensor([1.0, 2.0]), dev=torch.device("cpu"))}, path)
    with safe_globals([argparse.Namespace]):
        ns = lucid.load(path)["args"]
    assert isinstance(ns.w, lucid.Tensor) and ns.w.tolist() == [1.0, 2.0] and ns.dev == "cpu"


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_scan_and_load_across_pickle_protocols(protocol, tmp_path):
    # protocol 4+ names globals with STACK_GLOBAL from memoized strings: the scan follows them
    obj = {"a": argparse.Namespace(x=1), "b": argparse.Namespace(y=Color.RED), "s": "argparse"}
    raw = _archive(pickle.dumps(obj, protocol=protocol))
    assert get_unsafe_globals_in_checkpoint(io.BytesIO(raw)) == sorted([_name(Color), "argparse.Namespace"])
    add_safe_globals([argparse.Namespace])
    assert get_unsafe_globals_in_checkpoint(io.BytesIO(raw)) == [_name(Color)]
    with safe_globals([Color]):
        got = _load(raw, tmp_path)
    assert vars(got["a"]) == {"x": 1} and got["b"].y is Color.RED and got["s"] == "argparse"
