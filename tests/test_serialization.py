"""lucid.save / lucid.load: safetensors files with a JSON structure, safe and atomic."""
import io
import json
import math
import os
import pickle
import struct
from collections import OrderedDict

import numpy as np
import pytest

import lucid

DTYPES = [lucid.float16, lucid.float32, lucid.float64, lucid.int8, lucid.int16, lucid.int32, lucid.int64,
          lucid.uint8, lucid.bool]


def _roundtrip(obj, tmp_path, name="ckpt.safetensors"):
    path = tmp_path / name
    lucid.save(obj, path)
    return lucid.load(path)


def _same(a, b):
    """Structural equality, tensors compared by dtype, shape, values and requires_grad."""
    if isinstance(a, lucid.Tensor):
        assert isinstance(b, lucid.Tensor) and type(a) is type(b)
        assert a.dtype == b.dtype and a.shape == b.shape and a.requires_grad == b.requires_grad
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    elif isinstance(a, dict):
        assert type(a) is type(b) and list(a) == list(b)
        for k in a:
            _same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    elif isinstance(a, float) and math.isnan(a):
        assert isinstance(b, float) and math.isnan(b)
    else:
        assert type(a) is type(b) and a == b


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(), (0,), (3,), (2, 3, 1)])
def test_tensor_round_trip_every_dtype(dtype, shape, tmp_path):
    rng = np.random.default_rng(0)
    arr = (rng.standard_normal(shape) * 50).astype(dtype)
    _same(lucid.tensor(arr), _roundtrip(lucid.tensor(arr), tmp_path))


def test_requires_grad_parameter_and_complex(tmp_path):
    obj = [lucid.tensor([1.0, 2.0], requires_grad=True), lucid.tensor([3.0]),
           lucid.nn.Parameter(lucid.ones(2)), lucid.nn.Parameter(lucid.ones(1), requires_grad=False),
           lucid.tensor([1 + 2j, -3j], dtype=lucid.complex128), lucid.tensor(1j, dtype=lucid.complex64)]
    out = _roundtrip(obj, tmp_path)
    _same(obj, out)
    assert out[0].is_leaf and out[0].grad is None


def test_nested_containers_and_python_values(tmp_path):
    t = lucid.arange(4)
    obj = {
        "a": [1, 2.5, -0.0, True, None, "text", float("inf"), float("-inf"), float("nan"), 2 ** 62],
        "t": (t, (t * 2, [])),
        3: {"nested": OrderedDict([("z", lucid.zeros(2, 2)), ("y", 1)])},
        (1, "k"): np.arange(3.0),
        None: {},
        2.5: (),
        False: "b",
    }
    out = _roundtrip(obj, tmp_path)
    _same(obj, out)
    assert isinstance(out[3]["nested"], OrderedDict) and list(out[3]["nested"]) == ["z", "y"]
    assert out["t"][0] is not t
    assert math.copysign(1, out["a"][2]) == -1


def test_same_tensor_twice_is_stored_once_and_views_stay_views(tmp_path):
    base = lucid.arange(6.0)
    view = base[2:4]
    out = _roundtrip({"a": base, "b": base, "v": view}, tmp_path)
    assert out["a"] is out["b"]
    assert out["v"].tolist() == [2.0, 3.0]
    out["v"].add_(1)  # as PyTorch: the loaded view still views the loaded base (NOTE [Shared storage])
    assert out["a"].tolist() == [0.0, 1.0, 3.0, 4.0, 4.0, 5.0]
    assert out["v"]._version is out["a"]._version


def test_file_objects_and_header_layout(tmp_path):
    buf = io.BytesIO()
    lucid.save({"w": lucid.tensor([[1.0, 2.0]]), "n": 3}, buf)
    raw = buf.getvalue()
    (n,) = struct.unpack("<Q", raw[:8])
    assert n % 8 == 0
    header = json.loads(raw[8:8 + n])
    assert header["w"] == {"dtype": "F32", "shape": [1, 2], "data_offsets": [0, 8]}
    assert header["__metadata__"]["format"] == "lucid"
    assert np.frombuffer(raw[8 + n:], "<f4").tolist() == [1.0, 2.0]
    buf.seek(0)
    assert lucid.load(buf, map_location="cpu", weights_only=True)["n"] == 3
    with open(tmp_path / "f.bin", "wb") as f:
        lucid.save([lucid.ones(1)], f)
    with open(tmp_path / "f.bin", "rb") as f:
        assert lucid.load(f)[0].tolist() == [1.0]


def test_unsupported_objects_raise_type_error(tmp_path):
    with pytest.raises(TypeError, match="lucid.save: can't save an object of type object at 'x.0'"):
        lucid.save({"x": [object()]}, tmp_path / "a")
    with pytest.raises(TypeError, match="dict keys"):
        lucid.save({lucid.ones(1): 1}, tmp_path / "a")
    assert os.listdir(tmp_path) == []
    with pytest.raises(RuntimeError, match="device"):
        lucid.load(io.BytesIO(b""), map_location="cuda")


# ------------------------------------------------------------------ state dicts
def test_module_state_dict_round_trip(tmp_path):
    lucid.manual_seed(0)
    m = lucid.nn.Sequential(lucid.nn.Linear(3, 4), lucid.nn.BatchNorm1d(4), lucid.nn.Linear(4, 2))
    m(lucid.randn(5, 3))  # updates the running stats
    sd = m.state_dict()
    loaded = _roundtrip(sd, tmp_path)
    _same(sd, loaded)
    lucid.manual_seed(1)
    m2 = lucid.nn.Sequential(lucid.nn.Linear(3, 4), lucid.nn.BatchNorm1d(4), lucid.nn.Linear(4, 2))
    m2.load_state_dict(loaded)
    m.eval(), m2.eval()
    x = lucid.randn(2, 3)
    np.testing.assert_array_equal(m(x).detach().numpy(), m2(x).detach().numpy())


@pytest.mark.parametrize("kind,kw", [("SGD", dict(lr=0.1, momentum=0.9)), ("Adam", dict(lr=0.05, amsgrad=True)),
                                     ("RMSprop", dict(lr=0.01, centered=True)), ("NAdam", dict(lr=0.01))])
def test_training_resumes_exactly_through_a_file(kind, kw, tmp_path):
    rng = np.random.default_rng(0)
    X, Y = lucid.tensor(rng.standard_normal((16, 3))), lucid.tensor(rng.standard_normal((16, 2)))

    def make():
        lucid.manual_seed(0)
        m = lucid.nn.Linear(3, 2).to(lucid.float64)
        return m, getattr(lucid.optim, kind)(m.parameters(), **kw)

    def train(m, opt, n):
        for _ in range(n):
            opt.zero_grad()
            ((m(X) - Y) ** 2).mean().backward()
            opt.step()

    m, opt = make()
    train(m, opt, 6)
    want = [p.detach().numpy().copy() for p in m.parameters()]
    m, opt = make()
    train(m, opt, 3)
    lucid.save({"model": m.state_dict(), "optim": opt.state_dict(), "epoch": 3}, tmp_path / "ck")
    ck = lucid.load(tmp_path / "ck")
    m2, opt2 = make()
    m2.load_state_dict(ck["model"])
    opt2.load_state_dict(ck["optim"])
    assert ck["epoch"] == 3
    train(m2, opt2, 3)
    for p, w in zip(m2.parameters(), want):
        np.testing.assert_array_equal(p.detach().numpy(), w)


def test_lbfgs_state_dict_round_trip(tmp_path):
    x = lucid.tensor([-1.0, 1.5], dtype=lucid.float64, requires_grad=True)
    opt = lucid.optim.LBFGS([x], max_iter=3)

    def closure():
        opt.zero_grad()
        loss = ((x - 2.0) ** 2 * lucid.tensor([1.0, 5.0], dtype=lucid.float64)).sum()
        loss.backward()
        return loss

    opt.step(closure)
    sd = opt.state_dict()
    _same(sd, _roundtrip(sd, tmp_path))


# ---------------------------------------------------------- interop and safety
def _write_safetensors(path, tensors, metadata=None, pad=b""):
    """An independent writer of the published format."""
    header, blobs, off = {}, [], 0
    for name, arr in tensors.items():
        code = {np.float32: "F32", np.int64: "I64", np.float64: "F64", np.bool_: "BOOL"}[arr.dtype.type]
        b = arr.astype(arr.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": code, "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if metadata is not None:
        header["__metadata__"] = metadata
    h = json.dumps(header).encode() + pad
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def test_plain_safetensors_file_loads_as_a_dict(tmp_path):
    path = tmp_path / "plain.safetensors"
    tensors = {"b": np.arange(3, dtype=np.int64), "a": np.ones((2, 2), np.float32), "m": np.array([True, False])}
    _write_safetensors(path, tensors, metadata={"format": "pt"}, pad=b"   ")
    out = lucid.load(path)
    assert list(out) == ["b", "a", "m"]  # storage order
    for k, v in tensors.items():
        assert out[k].dtype == v.dtype
        np.testing.assert_array_equal(out[k].numpy(), v)


def test_reference_safetensors_package_interop(tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    path = str(tmp_path / "ref.safetensors")
    st.save_file({"x": np.arange(6, dtype=np.float32).reshape(2, 3), "y": np.array([1, 2], np.int64)}, path)
    out = lucid.load(path)
    assert out["x"].tolist() == [[0, 1, 2], [3, 4, 5]] and out["y"].tolist() == [1, 2]
    lucid.save(OrderedDict(w=lucid.ones(2, 2), b=lucid.zeros(2)), tmp_path / "ours.safetensors")
    back = st.load_file(str(tmp_path / "ours.safetensors"))
    np.testing.assert_array_equal(back["w"], np.ones((2, 2), np.float32))


def _good_bytes():
    buf = io.BytesIO()
    lucid.save({"w": lucid.arange(4.0), "v": lucid.ones(2, dtype=lucid.int64)}, buf)
    return buf.getvalue()


def _corrupt_header(fn):
    raw = _good_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    fn(header)
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + raw[8 + n:]


CORRUPT = {
    "empty": lambda: b"",
    "short": lambda: b"\x01\x02\x03",
    "truncated_data": lambda: _good_bytes()[:-5],
    "truncated_header": lambda: _good_bytes()[:40],
    "huge_header_len": lambda: struct.pack("<Q", 2 ** 60) + b"{}",
    "not_json": lambda: struct.pack("<Q", 4) + b"\xff\xfe{{",
    "json_list": lambda: struct.pack("<Q", 2) + b"[]",
    "bad_dtype": lambda: _corrupt_header(lambda h: h["w"].update(dtype="Q7")),
    "size_mismatch": lambda: _corrupt_header(lambda h: h["w"].update(shape=[5])),
    "negative_shape": lambda: _corrupt_header(lambda h: h["w"].update(shape=[-4])),
    "offset_out_of_range": lambda: _corrupt_header(lambda h: h["v"].update(data_offsets=[32, 4000])),
    "overlap": lambda: _corrupt_header(lambda h: h["v"].update(data_offsets=[0, 16])),
    "missing_key": lambda: _corrupt_header(lambda h: h["w"].pop("shape")),
    "bad_structure_json": lambda: _corrupt_header(lambda h: h["__metadata__"].update({"lucid.structure": "{"})),
    "dangling_reference": lambda: _corrupt_header(
        lambda h: h["__metadata__"].update({"lucid.structure": '{"t": "nope", "rg": false}'})),
    "unknown_node": lambda: _corrupt_header(
        lambda h: h["__metadata__"].update({"lucid.structure": '{"__reduce__": "os.system"}'})),
}


@pytest.mark.parametrize("kind", list(CORRUPT))
def test_corrupt_files_raise_naming_the_path(kind, tmp_path):
    path = tmp_path / f"bad_{kind}.safetensors"
    path.write_bytes(CORRUPT[kind]())
    with pytest.raises((ValueError, RuntimeError)) as info:
        lucid.load(path)
    assert str(path) in str(info.value) and "lucid.load" in str(info.value)


class _Boom:
    def __reduce__(self):
        return (os.system, ("echo pwned > should_not_exist",))


def test_pickle_and_zip_files_are_refused_without_executing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for proto in (2, 4, 5):
        (tmp_path / "evil.pt").write_bytes(pickle.dumps(_Boom(), protocol=proto))
        with pytest.raises(ValueError, match="pickle"):
            lucid.load(tmp_path / "evil.pt", weights_only=False)
    (tmp_path / "evil.zip").write_bytes(b"PK\x03\x04" + b"\x00" * 40)
    with pytest.raises(ValueError, match="evil.zip"):
        lucid.load(tmp_path / "evil.zip")
    assert not (tmp_path / "should_not_exist").exists()


def test_failed_save_leaves_existing_file_untouched_and_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.safetensors"
    lucid.save({"w": lucid.ones(3)}, path)
    before = path.read_bytes()
    with pytest.raises(TypeError):  # fails while encoding
        lucid.save({"w": lucid.zeros(3), "bad": object()}, path)

    def broken_fsync(fd):
        raise OSError("disk on fire")

    monkeypatch.setattr(os, "fsync", broken_fsync)  # fails after the temp file has been written
    with pytest.raises(OSError, match="disk on fire"):
        lucid.save({"w": lucid.zeros(3)}, path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["ckpt.safetensors"]
    lucid.save({"w": lucid.zeros(3)}, path)  # and a good save replaces it
    assert lucid.load(path)["w"].tolist() == [0.0, 0.0, 0.0]
    assert os.listdir(tmp_path) == ["ckpt.safetensors"]
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(path).st_mode & 0o777 == 0o666 & ~umask  # not mkstemp's 0o600


def test_exported_from_lucid():
    import lucid.serialization as ser

    assert ser.__all__ == ["save", "load"] and lucid.save is ser.save and lucid.load is ser.load


# ---------------------------------------------------------------- issue 14: safe save, lean load
def test_save_through_a_symlink_replaces_its_target(tmp_path):
    real = tmp_path / "real.safetensors"
    lucid.save({"w": lucid.ones(2)}, real)
    link = tmp_path / "link.safetensors"
    link.symlink_to(real)
    lucid.save({"w": lucid.zeros(3)}, link)
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert lucid.load(real)["w"].tolist() == [0.0, 0.0, 0.0]
    dangling = tmp_path / "dangling.safetensors"
    dangling.symlink_to(tmp_path / "made.safetensors")
    lucid.save({"w": lucid.ones(1)}, dangling)
    assert dangling.is_symlink() and lucid.load(tmp_path / "made.safetensors")["w"].tolist() == [1.0]
    assert sorted(os.listdir(tmp_path)) == ["dangling.safetensors", "link.safetensors", "made.safetensors",
                                            "real.safetensors"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_save_refuses_fifos_directories_and_links_to_them(tmp_path):
    import stat

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    link = tmp_path / "link"
    link.symlink_to(fifo)
    for target in (fifo, link, tmp_path):
        with pytest.raises(ValueError, match="not a regular file") as info:
            lucid.save({"w": lucid.ones(2)}, target)
        assert repr(str(fifo if target != tmp_path else tmp_path)) in str(info.value)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and link.is_symlink()
    assert sorted(os.listdir(tmp_path)) == ["link", "pipe"]


def test_save_errors_name_the_target_not_the_temporary_file(tmp_path):
    path = tmp_path / "missing_dir" / "ckpt.safetensors"
    with pytest.raises(FileNotFoundError) as info:
        lucid.save({"w": lucid.ones(2)}, path)
    assert repr(str(path)) in str(info.value) and ".tmp" not in str(info.value)


def test_a_killed_save_leaves_a_temporary_file_that_the_next_save_removes(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "ckpt.safetensors"
    script = ("import os, signal, lucid\n"
              "os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL)\n"
              f"lucid.save({{'w': lucid.ones(1000)}}, {str(path)!r})\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert proc.returncode == -9
    left = os.listdir(tmp_path)
    assert len(left) == 1 and left[0].startswith(".ckpt.safetensors.lucid-tmp-")
    lucid.save({"w": lucid.zeros(2)}, path)
    assert os.listdir(tmp_path) == ["ckpt.safetensors"]


def test_load_copies_each_byte_once(tmp_path):
    import tracemalloc

    rng = np.random.default_rng(0)
    # host memory is what is measured: CPU tensors (a device's copy would be its own memory)
    obj = {"a": lucid.tensor(rng.standard_normal((1000, 1000)), device="cpu"),
           "b": lucid.tensor(rng.standard_normal(2_000_000), device="cpu"),
           "m": (lucid.tensor(rng.integers(0, 2, 1_000_000).astype(bool), device="cpu"),)}
    path = tmp_path / "big.safetensors"
    lucid.save(obj, path)
    size = os.path.getsize(path)
    for source in ("path", "file"):
        tracemalloc.start()
        try:
            if source == "path":
                out = lucid.load(path)
            else:
                with open(path, "rb") as f:
                    out = lucid.load(f)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak <= 1.1 * size, (source, peak / size)
        _same(obj, out)


def test_deeply_nested_json_is_a_value_error_naming_the_file(tmp_path):
    deep = "[" * 200_000 + "]" * 200_000
    for header in ('{"x": ' + deep + "}",
                   json.dumps({"__metadata__": {"format": "lucid", "lucid.structure": '{"list": [' + deep + "]}"}})):
        raw = header.encode()
        path = tmp_path / "deep.safetensors"
        path.write_bytes(struct.pack("<Q", len(raw)) + raw)
        with pytest.raises(ValueError, match="deep.safetensors"):
            lucid.load(path)


def test_mmap_flags_private_and_shared(tmp_path):
    """``set_default_mmap_options``: MAP_PRIVATE (default) keeps writes to mapped tensors in
    memory, MAP_SHARED writes them through to the file; as a context manager it restores."""
    import mmap

    from lucid import serialization as S

    path = tmp_path / "w.safetensors"
    lucid.save({"w": lucid.tensor([1.0, 2.0, 3.0], device="cpu")}, path)
    assert S.get_default_mmap_options() == mmap.MAP_PRIVATE
    w = lucid.load(path, mmap=True)["w"]
    w.add_(10.0)
    assert w.tolist() == [11.0, 12.0, 13.0] and lucid.load(path)["w"].tolist() == [1.0, 2.0, 3.0]
    with S.set_default_mmap_options(mmap.MAP_SHARED):
        assert S.get_default_mmap_options() == mmap.MAP_SHARED
        w = lucid.load(path, mmap=True)["w"]
        w.mul_(2.0)
        del w
    assert S.get_default_mmap_options() == mmap.MAP_PRIVATE
    assert lucid.load(path)["w"].tolist() == [2.0, 4.0, 6.0]  # the write reached the file
    with pytest.raises(ValueError, match="expected mmap.MAP_PRIVATE or mmap.MAP_SHARED, but got 7"):
        S.set_default_mmap_options(7)
    assert S.get_default_mmap_options() == mmap.MAP_PRIVATE


def test_fallback_byte_order_of_old_torch_checkpoints(tmp_path):
    """A PyTorch checkpoint without a byteorder record (before PyTorch 1.10) is read in the
    byte order ``set_default_load_endianness`` names (native by default)."""
    import zipfile

    from lucid import serialization as S

    full, old = tmp_path / "full.pt", tmp_path / "old.pt"
    S.save_for_torch({"x": lucid.tensor([1.0, -2.5], device="cpu", dtype=lucid.float64)}, full)
    with zipfile.ZipFile(full) as src, zipfile.ZipFile(old, "w", zipfile.ZIP_STORED) as dst:
        names = [n for n in src.namelist() if not n.endswith("/byteorder")]
        assert len(names) == len(src.namelist()) - 1
        for n in names:
            dst.writestr(n, src.read(n))
    assert lucid.load(old)["x"].tolist() == [1.0, -2.5]
    try:
        S.set_default_load_endianness(S.LoadEndianness.BIG)
        assert S.get_default_load_endianness() is S.LoadEndianness.BIG
        want = np.array([1.0, -2.5]).astype("<f8").view(">f8").tolist()  # the bytes read big-endian
        assert lucid.load(old)["x"].tolist() == want
        assert lucid.load(full)["x"].tolist() == [1.0, -2.5]  # a record wins over the fallback
        S.set_default_load_endianness(S.LoadEndianness.LITTLE)
        assert lucid.load(old)["x"].tolist() == [1.0, -2.5]
        with pytest.raises(TypeError, match="expected a LoadEndianness or None, got str"):
            S.set_default_load_endianness("big")
    finally:
        S.set_default_load_endianness(None)


def test_restore_location_registry():
    from lucid import serialization as S

    t = lucid.tensor([1.0, 2.0], device="cpu")
    assert S.location_tag(t) == "cpu"
    assert S.default_restore_location(t, "cpu") is t
    with pytest.raises(RuntimeError, match=r"don't know how to restore data location of Tensor \(tagged with tpu:3\)"):
        S.default_restore_location(t, "tpu:3")
    with pytest.raises(RuntimeError, match="don't know how to determine data location of list"):
        S.location_tag([1])
    # a user's package: asked before Lucid's own entry (lower priority number first)
    from lucid import serialization_options

    seen, registry = [], list(serialization_options._PACKAGES)
    try:
        S.register_package(5, lambda s: "halved" if isinstance(s, lucid.Tensor) and s.dtype is lucid.float16 else None,
                           lambda s, loc: seen.append(loc) or (s * 0.5 if loc == "halved" else None))
        assert S.location_tag(lucid.ones(1, dtype=lucid.float16, device="cpu")) == "halved"
        assert S.default_restore_location(t, "halved").tolist() == [0.5, 1.0] and seen == ["halved"]
        assert S.default_restore_location(t, "cpu") is t and seen == ["halved", "cpu"]
    finally:
        serialization_options._PACKAGES[:] = registry
    assert issubclass(S.SourceChangeWarning, Warning)
    with pytest.raises(TypeError, match="register_package: tagger and deserializer must be callables"):
        S.register_package(1, None, None)


def test_restore_location_on_a_device():
    from lucid import serialization as S
    from lucid.testing import strict_device

    strict_device.enable()
    t = lucid.tensor([1.0, 2.0], device="cpu")
    moved = S.default_restore_location(t, "strict:1")
    assert moved.device == lucid.device("strict:1") and S.location_tag(moved) == "strict:1"
    # fairseq's map_location: every storage to the CPU
    buf = io.BytesIO()
    S.save_for_torch({"w": moved}, buf)
    buf.seek(0)
    out = lucid.load(buf, map_location=lambda s, loc: S.default_restore_location(s, "cpu"))
    assert out["w"].device.type == "cpu" and out["w"].tolist() == [1.0, 2.0]


def test_loading_options_match_torch():
    torch = pytest.importorskip("torch")
    import mmap

    from lucid import serialization as S

    assert [e.name for e in S.LoadEndianness] == [e.name for e in torch.serialization.LoadEndianness]
    assert [e.value for e in S.LoadEndianness] == [e.value for e in torch.serialization.LoadEndianness]
    assert S.get_default_mmap_options() == torch.serialization.get_default_mmap_options() == mmap.MAP_PRIVATE
    assert S.get_default_load_endianness() == torch.serialization.get_default_load_endianness()
    t, lt = torch.ones(2), lucid.ones(2, device="cpu")
    assert torch.serialization.location_tag(t.untyped_storage()) == S.location_tag(lt) == "cpu"
