"""PyTorch checkpoints: lucid.load reads torch.save's zip format (restricted unpickling), and
lucid.serialization.save_for_torch writes files torch.load reads.

Without torch, archives are assembled here byte for byte from protocol-2 pickle opcodes and
zipfile (``_Pickle``, ``_archive``), independently of the code under test; with torch, real
files go both ways."""
import importlib.util
import io
import os
import pickle
import pickletools
import struct
import zipfile
from collections import OrderedDict

import numpy as np
import pytest

import lucid
from lucid.serialization import save_for_torch


# ------------------------------------------------------------ building archives by hand
class _Pickle:
    """A tiny protocol-2 pickle assembler: what torch.save writes, opcode by opcode."""

    def __init__(self):
        self.b = bytearray(b"\x80\x02")

    def op(self, raw):
        self.b += raw
        return self

    def glob(self, module, name):
        return self.op(b"c" + f"{module}\n{name}\n".encode())

    def str(self, text):
        raw = text.encode()
        return self.op(b"X" + struct.pack("<I", len(raw)) + raw)

    def int(self, v):
        if -2 ** 31 <= v < 2 ** 31:
            return self.op(b"J" + struct.pack("<i", v))
        raw = v.to_bytes(9, "little", signed=True)
        return self.op(b"\x8a\x09" + raw)  # LONG1

    def ints(self, values):  # a tuple of ints
        self.op(b"(")
        for v in values:
            self.int(v)
        return self.op(b"t")

    def tensor(self, key, numel, size, stride, offset=0, storage="FloatStorage", location="cpu", rg=False,
               metadata=None):
        """``torch._utils._rebuild_tensor_v2(('storage', torch.<storage>, key, location, numel), ...)``."""
        self.glob("torch._utils", "_rebuild_tensor_v2").op(b"((")
        self.str("storage").glob("torch", storage).str(key).str(location).int(numel).op(b"tQ")
        self.int(offset).ints(size).ints(stride).op(b"\x88" if rg else b"\x89")
        self.glob("collections", "OrderedDict").op(b")R")
        if metadata:
            self.op(b"}(")
            for k in metadata:
                self.str(k).op(b"\x88")
            self.op(b"u")
        return self.op(b"tR")

    def done(self):
        return bytes(self.b) + b"."


def _archive(pkl, storages=(), prefix="archive", byteorder=b"little", extra=()):
    """A torch.save-style zip: ``<prefix>/data.pkl``, ``data/<key>`` records, byteorder, version."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr(f"{prefix}/data.pkl", pkl)
        if byteorder is not None:
            zf.writestr(f"{prefix}/byteorder", byteorder)
        for key, raw in dict(storages).items():
            zf.writestr(f"{prefix}/data/{key}", raw)
        for name, raw in dict(extra).items():
            zf.writestr(name, raw)
        zf.writestr(f"{prefix}/version", b"3\n")
    return buf.getvalue()


def _load(raw, tmp_path, name="ckpt.pt", **kw):
    path = tmp_path / name
    path.write_bytes(raw)
    return lucid.load(path, **kw)


def _f32(*values, order="<"):
    return np.asarray(values, dtype=order + "f4").tobytes()


def _state_dict_pickle():
    """OrderedDict([('w', 2x3 float), ('n', 0-d int64)]) with ``_metadata``, as torch.save writes."""
    p = _Pickle().glob("collections", "OrderedDict").op(b")R(")
    p.str("w").tensor("0", 6, (2, 3), (3, 1))
    p.str("n").tensor("1", 1, (), (), storage="LongStorage")
    p.op(b"u}").str("_metadata").glob("collections", "OrderedDict").op(b")R(")
    p.str("").op(b"}").str("version").int(1).op(b"su")  # {'': {'version': 1}}
    return p.op(b"sb").done()  # SETITEM BUILD


# ------------------------------------------------------------ reading, without torch
def test_reads_a_hand_built_state_dict(tmp_path):
    raw = _archive(_state_dict_pickle(), {"0": _f32(1, 2, 3, 4, 5, 6), "1": struct.pack("<q", 7)})
    sd = _load(raw, tmp_path)
    assert type(sd) is OrderedDict and list(sd) == ["w", "n"]
    assert sd["w"].dtype == lucid.float32 and sd["w"].tolist() == [[1, 2, 3], [4, 5, 6]]
    assert sd["n"].dtype == lucid.int64 and sd["n"].shape == () and sd["n"].item() == 7
    assert sd._metadata == OrderedDict([("", {"version": 1})])
    assert not sd["w"].requires_grad and type(sd["w"]) is lucid.Tensor


def test_views_share_their_storage(tmp_path):
    p = _Pickle().op(b"(")
    p.tensor("0", 12, (3, 4), (4, 1))  # the base
    p.tensor("0", 12, (4, 3), (1, 4))  # its transpose
    p.tensor("0", 12, (2, 2), (4, 1), offset=5)  # base[1:, 1:3]
    p.tensor("0", 12, (3, 2), (0, 2), offset=1)  # a stride-0 (expanded) view
    raw = _archive(p.op(b"l").done(), {"0": _f32(*range(12))})
    base, t, sub, ex = _load(raw, tmp_path)
    want = np.arange(12.0).reshape(3, 4)
    assert t.tolist() == want.T.tolist() and sub.tolist() == want[1:, 1:3].tolist()
    assert ex.tolist() == [[1, 3]] * 3
    assert t.stride() == (1, 4) and sub.storage_offset() == 5 and sub.stride() == (4, 1)
    base.add_(100)  # tied: one storage, so a write through one is seen by all
    assert t.tolist() == (want.T + 100).tolist() and sub.tolist() == (want[1:, 1:3] + 100).tolist()
    assert ex.tolist() == [[101, 103]] * 3


@pytest.mark.parametrize("storage, dtype, raw, want", [
    ("HalfStorage", lucid.float16, np.array([1.5, -2], "<f2").tobytes(), [1.5, -2.0]),
    ("DoubleStorage", lucid.float64, np.array([0.1, 1e300], "<f8").tobytes(), [0.1, 1e300]),
    ("CharStorage", lucid.int8, bytes([0xFF, 5]), [-1, 5]),
    ("ByteStorage", lucid.uint8, bytes([0xFF, 5]), [255, 5]),
    ("ShortStorage", lucid.int16, struct.pack("<2h", -300, 7), [-300, 7]),
    ("IntStorage", lucid.int32, struct.pack("<2i", -70000, 7), [-70000, 7]),
    ("LongStorage", lucid.int64, struct.pack("<2q", -2 ** 40, 7), [-2 ** 40, 7]),
    ("BoolStorage", lucid.bool, bytes([0, 2]), [False, True]),  # any nonzero byte is True
    ("ComplexFloatStorage", lucid.complex64, np.array([1 + 2j, -3j], "<c8").tobytes(), [1 + 2j, -3j]),
    ("ComplexDoubleStorage", lucid.complex128, np.array([1 + 2j, -3j], "<c16").tobytes(), [1 + 2j, -3j]),
])
def test_every_storage_type(storage, dtype, raw, want, tmp_path):
    t = _load(_archive(_Pickle().tensor("0", 2, (2,), (1,), storage=storage).done(), {"0": raw}), tmp_path)
    assert t.dtype == dtype and t.tolist() == want


def test_big_endian_archive(tmp_path):
    pkl = _Pickle().tensor("0", 3, (3,), (1,)).done()
    t = _load(_archive(pkl, {"0": _f32(1.5, -2, 2 ** 34, order=">")}, byteorder=b"big"), tmp_path)
    assert t.tolist() == [1.5, -2.0, 2 ** 34]
    t = _load(_archive(pkl, {"0": _f32(1.5, -2, 2 ** 34)}, byteorder=None), tmp_path)  # no record: little
    assert t.tolist() == [1.5, -2.0, 2 ** 34]
    with pytest.raises(ValueError, match="byteorder"):
        _load(_archive(pkl, {"0": _f32(1, 2, 3)}, byteorder=b"middle"), tmp_path)


def test_parameters_requires_grad_and_lazy_bits(tmp_path):
    p = _Pickle().op(b"(").glob("torch._utils", "_rebuild_parameter").op(b"(")
    p.tensor("0", 2, (2,), (1,)).op(b"\x88").glob("collections", "OrderedDict").op(b")RtR")
    p.tensor("1", 2, (2,), (1,), rg=True)
    p.tensor("2", 2, (2,), (1,), storage="ComplexFloatStorage", metadata=["conj"])
    p.tensor("1", 2, (2,), (1,), metadata=["neg"])
    raw = _archive(p.op(b"l").done(), {"0": _f32(1, 2), "1": _f32(3, 4),
                                       "2": np.array([1 + 2j, 3 - 1j], "<c8").tobytes()})
    param, rg, conj, neg = _load(raw, tmp_path)
    assert type(param) is lucid.nn.Parameter and param.requires_grad and param.tolist() == [1, 2]
    assert type(rg) is lucid.Tensor and rg.requires_grad and rg.is_leaf
    assert conj.tolist() == [1 - 2j, 3 + 1j] and neg.tolist() == [-3.0, -4.0]


@pytest.mark.parametrize("attr, ok", [("note", True), ("_data", False), ("requires_grad", False),
                                      ("grad", False), ("__class__", False)])
def test_parameter_state_sets_plain_attributes_only(attr, ok, tmp_path):
    p = _Pickle().glob("torch._utils", "_rebuild_parameter_with_state").op(b"(")
    p.tensor("0", 2, (2,), (1,)).op(b"\x88").glob("collections", "OrderedDict").op(b")R}")
    p.str(attr).str("hello").op(b"stR")
    raw = _archive(p.done(), {"0": _f32(1, 2)})
    if ok:
        param = _load(raw, tmp_path)
        assert type(param) is lucid.nn.Parameter and param.note == "hello" and param.tolist() == [1, 2]
    else:
        with pytest.raises(ValueError, match=f"sets '{attr}', which Lucid does not restore"):
            _load(raw, tmp_path)


def test_plain_values_and_torch_helpers(tmp_path):
    p = _Pickle().op(b"}(")
    p.str("ints").op(b"(K\x05M\xe8\x03").int(-5).op(b"\x8a\x09" + (2 ** 70).to_bytes(9, "little") + b"l")
    p.str("float").op(b"G" + struct.pack(">d", 2.5))
    p.str("misc").op(b"(N\x88\x89").str("s").op(b"t")
    p.str("size").glob("torch", "Size").ints((2, 3)).op(b"\x85R")
    p.str("dev").glob("torch", "device").str("cuda").op(b"K\x01\x86R")
    p.str("dtype").glob("torch", "float16")
    p.str("bytes").glob("_codecs", "encode").str("\xffb").str("latin1").op(b"\x86R")
    p.str("set").glob("__builtin__", "set").op(b"](K\x01K\x02e\x85R")
    p.op(b"K\x07").str("int key").op(b"u")
    out = _load(_archive(p.done()), tmp_path)
    assert out == {"ints": [5, 1000, -5, 2 ** 70], "float": 2.5, "misc": (None, True, False, "s"),
                   "size": (2, 3), "dev": "cuda:1", "dtype": lucid.float16, "bytes": b"\xffb",
                   "set": {1, 2}, 7: "int key"}


def test_map_location(tmp_path):
    raw = _archive(_Pickle().tensor("0", 2, (2,), (1,), location="cuda:0").done(), {"0": _f32(1, 2)})
    if not lucid.cuda.is_available():
        with pytest.raises(RuntimeError, match="map_location='cpu'"):
            _load(raw, tmp_path)
    for where in ("cpu", lucid.device("cpu"), {"cuda:0": "cpu"}):
        t = _load(raw, tmp_path, map_location=where)
        assert t.device == lucid.device("cpu") and t.tolist() == [1, 2]
    seen = []

    def f(storage, location):
        seen.append((storage.tolist(), location))
        return storage * 10

    assert _load(raw, tmp_path, map_location=f).tolist() == [10, 20] and seen == [([1, 2], "cuda:0")]


def test_refuses_legacy_and_other_archives(tmp_path):
    legacy = b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19.\x80\x02M\xe9\x03."  # torch < 1.6 opening
    with pytest.raises(ValueError, match="legacy format"):
        _load(legacy, tmp_path)
    with pytest.raises(ValueError, match="without 'stuff/data.pkl'"):
        _load(_zip({"stuff/readme.txt": b"hi"}), tmp_path)
    with pytest.raises(ValueError, match="pickle"):  # a plain pickle is still refused as before
        _load(pickle.dumps([1, 2], protocol=2), tmp_path)
    p = _Pickle().tensor("0", 2, (2,), (1,), storage="BFloat16Storage").done()
    pytest.importorskip("ml_dtypes")  # the bfloat16 extra: bfloat16 storages load (1.0 is 0x3F80)
    got = _load(_archive(p, {"0": b"\x80\x3f\x00\xc0"}), tmp_path)
    assert got.dtype == lucid.bfloat16 and got.float().tolist() == [1.0, -2.0]


def _zip(records):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, raw in records.items():
            zf.writestr(name, raw)
    return buf.getvalue()


# ------------------------------------------------------------ malicious archives
def _payloads(marker):
    cmd, code = f"touch {marker}", f"open({str(marker)!r}, 'w')"
    yield "os.system", _Pickle().glob("os", "system").str(cmd).op(b"\x85R").done()
    yield "posix.system", _Pickle().glob("posix", "system").str(cmd).op(b"\x85R").done()
    yield "builtins.eval", _Pickle().glob("builtins", "eval").str(code).op(b"\x85R").done()
    yield "__builtin__.eval", _Pickle().glob("__builtin__", "eval").str(code).op(b"\x85R").done()
    # protocol 4's STACK_GLOBAL, and INST (protocol 0), reach find_class the same way
    yield "builtins.exec", (b"\x80\x04\x8c\x08builtins\x8c\x04exec\x93\x8c" + bytes([len(f"open({str(marker)!r},'w')")])
                            + f"open({str(marker)!r},'w')".encode() + b"\x85R.")
    yield "subprocess.call", _Pickle().op(b"(](").str("touch").str(str(marker)).op(b"eisubprocess\ncall\n").done()
    # an unlisted class built by reduce / NEWOBJ
    yield "collections.defaultdict", _Pickle().glob("collections", "defaultdict").op(b")R").done()
    yield "torch.nn.modules.linear.Linear", _Pickle().glob("torch.nn.modules.linear", "Linear").op(b")\x81").done()


def test_malicious_globals_are_refused_without_running(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "pwned"
    for name, pkl in _payloads(marker):
        with pytest.raises(pickle.UnpicklingError, match=f"refusing to load '{name}'") as info:
            _load(_archive(pkl), tmp_path, name="evil.pt", weights_only=False)
        assert isinstance(info.value, ValueError) and "nothing in the file is executed" in str(info.value)
        assert "evil.pt" in str(info.value)
        assert not marker.exists(), name


def test_torchscript_archive_gets_a_hint(tmp_path):
    pkl = _Pickle().glob("__torch__.Net", "Net").op(b")\x81").done()
    with pytest.raises(pickle.UnpicklingError, match="TorchScript"):
        _load(_archive(pkl, prefix="net"), tmp_path)


@pytest.mark.parametrize("ops, what", [
    # calls and method-reaching opcodes on whitelisted objects
    (lambda p: p.glob("torch", "float32").op(b")R"), "a call of"),  # a dtype is not callable here
    (lambda p: p.op(b"]").glob("collections", "OrderedDict").op(b"b"), "setting the state of a list"),
    (lambda p: p.glob("collections", "OrderedDict").op(b")R}").str("__class__").op(b"K\x01sb"), "setting the state"),
    (lambda p: p.glob("collections", "OrderedDict").op(b")R}").str("keys").op(b"K\x01sb"), "setting the state"),
    (lambda p: p.tensor("0", 2, (2,), (1,)).op(b"K\x00K\x01s"), "adding items to a Tensor"),
    (lambda p: p.tensor("0", 2, (2,), (1,)).op(b"(K\x01e"), "adding items to a Tensor"),
    (lambda p: p.glob("collections", "OrderedDict").op(b")\x81"), "instantiates a class"),  # NEWOBJ
    (lambda p: p.op(b"\x82\x01"), "instantiates a class"),  # EXT1
])
def test_restricted_opcodes(ops, what, tmp_path):
    p = _Pickle()
    ops(p)
    with pytest.raises(pickle.UnpicklingError, match=what):
        _load(_archive(p.done(), {"0": _f32(1, 2)}), tmp_path)


@pytest.mark.parametrize("build, storages, match", [
    (lambda p: p.tensor("../../../etc/passwd", 2, (2,), (1,)), {}, "not a plain record name"),
    (lambda p: p.tensor("a/b", 2, (2,), (1,)), {"a/b": _f32(1, 2)}, "not a plain record name"),
    (lambda p: p.tensor("0", 1000, (2,), (1,)), {"0": _f32(1, 2)}, "holds 8 bytes, but 4000 are declared"),
    (lambda p: p.tensor("0", 2 ** 60, (2,), (1,)), {"0": _f32(1, 2)}, "are declared"),
    (lambda p: p.tensor("7", 2, (2,), (1,)), {"0": _f32(1, 2)}, "no record 'archive/data/7'"),
    (lambda p: p.tensor("0", 2, (3,), (1,)), {"0": _f32(1, 2)}, "reaches past its 2 elements"),
    (lambda p: p.tensor("0", 2, (2,), (1,), offset=1), {"0": _f32(1, 2)}, "reaches past"),
    (lambda p: p.tensor("0", 2, (2, 2), (1, 2 ** 40)), {"0": _f32(1, 2)}, "reaches past"),
    (lambda p: p.tensor("0", 2, (2,), (-1,)), {"0": _f32(1, 2)}, "bad view"),
    (lambda p: p.tensor("0", 2, (2,), (1,), storage="LongStorage"), {"0": _f32(1, 2)}, "holds 8 bytes, but 16"),
    (lambda p: p.tensor("0", 2, (2,), (1,), storage="LongStorage", rg=True), {"0": _f32(1, 2, 3, 4)},
     "int64 tensor is marked requires_grad"),
    (lambda p: p.op(b"(").tensor("0", 2, (2,), (1,)).tensor("0", 1, (1,), (1,)).op(b"l"), {"0": _f32(1, 2)},
     "declared twice"),
    (lambda p: p.glob("torch._utils", "_rebuild_tensor_v2").op(b"(").ints((1, 2)).int(0).ints((2,)).ints((1,))
     .op(b"\x89N" + b"tR"), {}, "no typed storage"),  # a forged storage: not from persistent_load
    (lambda p: p.op(b"(").str("storage").int(1).str("0").str("cpu").int(2).op(b"tQ"), {}, "not a storage class"),
    (lambda p: p.op(b"(").str("storage").op(b"K\x01tQ"), {}, "unknown persistent id"),
])
def test_corrupt_or_tampered_contents(build, storages, match, tmp_path):
    p = _Pickle()
    build(p)
    with pytest.raises(ValueError, match=match) as info:
        _load(_archive(p.done(), storages), tmp_path)
    assert "ckpt.pt" in str(info.value)


def test_lazy_bits_apply_to_the_storage_not_the_view(tmp_path):
    # a 2**40-element stride-0 view of one element, negated: a view of the negated storage,
    # never materialized (that would allocate 4 TiB from a file of a few hundred bytes)
    p = _Pickle().op(b"(").tensor("0", 2, (2 ** 40,), (0,), metadata=["neg"])
    p.tensor("0", 2, (2, 2), (0, 1), metadata=["neg"]).tensor("0", 2, (2,), (1,)).op(b"l")
    big, small, plain = _load(_archive(p.done(), {"0": _f32(1.5, -2)}), tmp_path)
    assert big.shape == (2 ** 40,) and big._data.strides == (0,) and big[2 ** 40 - 1].item() == -1.5
    assert small.tolist() == [[-1.5, 2.0], [-1.5, 2.0]] and plain.tolist() == [1.5, -2.0]
    assert np.shares_memory(big._data, small._data)  # one negated copy per storage, shared by the views


def _nested_archive(n, base):
    """Stored zip records nested one inside another: record i's data is record i+1's local
    header and data, so n records of about ``len(base)`` bytes each fit in one of them."""
    import zlib

    names = [f"archive/data/{i}".encode() for i in range(n)]

    def local(i, data):
        return struct.pack("<4s2B4HL2L2H", b"PK\x03\x04", 20, 0, 0, 0, 0, 0x21, zlib.crc32(data), len(data),
                           len(data), len(names[i]), 0) + names[i]

    pay = [base]
    for i in range(n - 1, 0, -1):
        pay.insert(0, local(i, pay[0]) + pay[0])
    p = _Pickle().op(b"(")
    for i in range(n):
        p.tensor(str(i), len(pay[i]) // 4, (len(pay[i]) // 4,), (1,))
    head = _zip({"archive/data.pkl": p.op(b"l").done()})
    cd_at = head.index(b"PK\x01\x02")
    out, cd = bytearray(head[:cd_at]), bytearray(head[cd_at:head.index(b"PK\x05\x06")])
    for i in range(n):
        at = len(out) + sum(len(local(j, pay[j])) for j in range(i))
        cd += struct.pack("<4s4B4HL2L5H2L", b"PK\x01\x02", 20, 0, 20, 0, 0, 0, 0, 0x21, zlib.crc32(pay[i]),
                          len(pay[i]), len(pay[i]), len(names[i]), 0, 0, 0, 0, 0, at) + names[i]
    out += local(0, pay[0]) + pay[0]
    cd_start = len(out)
    out += cd + struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, n + 1, n + 1, len(cd), cd_start, 0)
    return bytes(out)


def test_overlapping_records_are_refused(tmp_path):
    raw = _nested_archive(3, _f32(1, 2, 3, 4))
    zf = zipfile.ZipFile(io.BytesIO(raw))  # a valid zip to zipfile: each record reads back, CRC and all
    assert [len(zf.read(f"archive/data/{i}")) for i in range(3)] == [16 + 2 * 44, 16 + 44, 16]
    with pytest.raises(ValueError, match="'archive/data/1' overlaps another"):
        _load(raw, tmp_path)


def test_truncated_and_tampered_archives(tmp_path):
    raw = _archive(_state_dict_pickle(), {"0": _f32(1, 2, 3, 4, 5, 6), "1": struct.pack("<q", 7)})
    for cut in list(range(0, len(raw), 37)) + [len(raw) - 1, len(raw) - 22]:
        with pytest.raises(ValueError, match="ckpt.pt"):
            _load(raw[:cut], tmp_path)
    data_at = raw.index(_f32(1, 2, 3, 4, 5, 6))
    flipped = raw[:data_at] + bytes([raw[data_at] ^ 1]) + raw[data_at + 1:]
    with pytest.raises(ValueError, match="can't be read.*CRC"):
        _load(flipped, tmp_path)
    pkl_at = raw.index(b"_metadata")  # a byte of data.pkl changed: CRC again, before unpickling
    with pytest.raises(ValueError, match="CRC"):
        _load(raw[:pkl_at] + b"x" + raw[pkl_at + 1:], tmp_path)
    # the central directory claims a size the archive can't hold (checked before allocating)
    tampered = _set_sizes(raw, "archive/data/0", 10 ** 9)
    assert zipfile.ZipFile(io.BytesIO(tampered)).getinfo("archive/data/0").file_size == 10 ** 9
    with pytest.raises(ValueError, match="are declared"):
        _load(tampered, tmp_path)
    pkl = _Pickle().tensor("0", 250_000_000, (2,), (1,)).done()  # numel matching the claimed size
    with pytest.raises(ValueError, match="more than the archive"):
        _load(_set_sizes(_archive(pkl, {"0": _f32(1, 2)}), "archive/data/0", 10 ** 9), tmp_path)
    with pytest.raises(ValueError, match="corrupt"):  # a pickle that stops half way
        _load(_archive(_state_dict_pickle()[:-30], {"0": _f32(*range(6)), "1": bytes(8)}), tmp_path)


def _set_sizes(raw, name, size):
    """``raw`` with the central-directory sizes of record ``name`` set to ``size``."""
    eocd = raw.rindex(b"PK\x05\x06")
    (entry,) = struct.unpack("<I", raw[eocd + 16:eocd + 20])  # where the central directory starts
    while True:
        n_name, = struct.unpack("<H", raw[entry + 28:entry + 30])
        if raw[entry + 46:entry + 46 + n_name] == name.encode():
            break
        n_extra, n_comment = struct.unpack("<HH", raw[entry + 30:entry + 34])
        entry += 46 + n_name + n_extra + n_comment
    return raw[:entry + 20] + struct.pack("<II", size, size) + raw[entry + 28:]


def test_a_non_seekable_stream_is_read(tmp_path):
    raw = _archive(_Pickle().tensor("0", 2, (2,), (1,)).done(), {"0": _f32(1, 2)})

    class Stream(io.RawIOBase):
        def __init__(self):
            self.src = io.BytesIO(raw)

        def readable(self):
            return True

        def readinto(self, b):
            data = self.src.read(len(b))
            b[:len(data)] = data
            return len(data)

    assert lucid.load(io.BufferedReader(Stream())).tolist() == [1, 2]

    class Sink(io.RawIOBase):  # writing to a pipe: zip's data descriptors instead of seeking back
        def __init__(self):
            self.b = bytearray()

        def writable(self):
            return True

        def write(self, data):
            self.b += data
            return len(data)

    sink = Sink()
    save_for_torch({"a": lucid.arange(3.0), "b": [lucid.tensor([True, False])]}, sink)
    _check_layout(bytes(sink.b))
    out = lucid.load(io.BytesIO(bytes(sink.b)))
    assert out["a"].tolist() == [0, 1, 2] and out["b"][0].tolist() == [True, False]


# ------------------------------------------------------------ writing, without torch
_TORCH_WEIGHTS_ONLY = {"collections OrderedDict", "torch._utils _rebuild_tensor_v2", "torch._utils _rebuild_parameter",
                       "torch Size", "torch device", "_codecs encode", "builtins set", "builtins complex"} | \
    {f"torch {n}Storage" for n in ("Float", "Double", "Half", "Long", "Int", "Short", "Char", "Byte", "Bool",
                                   "ComplexFloat", "ComplexDouble")} | \
    {f"torch {d}" for d in ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool",
                            "complex64", "complex128")}


def _written(obj):
    buf = io.BytesIO()
    save_for_torch(obj, buf)
    return buf.getvalue()


def _check_layout(raw):
    """What torch.load needs: one folder, data.pkl first, byteorder, version, 64-byte aligned
    records, and only globals torch.load(weights_only=True) allows."""
    zf = zipfile.ZipFile(io.BytesIO(raw))
    names = zf.namelist()
    assert names[0] == "archive/data.pkl" and {"archive/byteorder", "archive/version"} <= set(names)
    assert zf.read("archive/byteorder") == b"little" and zf.testzip() is None
    for info in zf.infolist():
        n_name, n_extra = struct.unpack("<HH", raw[info.header_offset + 26:info.header_offset + 30])
        assert (info.header_offset + 30 + n_name + n_extra) % 64 == 0, info.filename
        assert info.compress_type == zipfile.ZIP_STORED
    used = {arg for op, arg, _ in pickletools.genops(zf.read("archive/data.pkl")) if op.name == "GLOBAL"}
    assert used <= _TORCH_WEIGHTS_ONLY, used - _TORCH_WEIGHTS_ONLY
    return zf


def _model():
    lucid.manual_seed(0)
    m = lucid.nn.Sequential(lucid.nn.Conv2d(2, 3, 3), lucid.nn.BatchNorm2d(3), lucid.nn.Flatten(),
                            lucid.nn.Linear(12, 4))
    m(lucid.randn(5, 2, 4, 4))  # moves the running stats and num_batches_tracked
    return m.eval()


def test_state_dict_round_trip_and_layout(tmp_path):
    m = _model()
    sd = m.state_dict()
    raw = _written(sd)
    _check_layout(raw)
    back = _load(raw, tmp_path)
    assert type(back) is OrderedDict and list(back) == list(sd)
    for k in sd:
        assert back[k].dtype == sd[k].dtype and back[k].tolist() == sd[k].tolist()
    assert back["1.num_batches_tracked"].dtype == lucid.int64 and back["1.num_batches_tracked"].item() == 1
    assert back._metadata == sd._metadata
    m2 = _model()
    for p in m2.parameters():
        p.data.zero_()
    m2.load_state_dict(back)
    x = lucid.randn(2, 2, 4, 4)
    np.testing.assert_array_equal(m2(x).detach().numpy(), m(x).detach().numpy())


def test_lstm_and_optimizer_state_round_trip(tmp_path):
    lucid.manual_seed(0)
    lstm = lucid.nn.LSTM(3, 4, num_layers=2)
    opt = lucid.optim.Adam(lstm.parameters(), lr=0.01)
    out, _ = lstm(lucid.randn(5, 2, 3))
    out.sum().backward()
    opt.step()
    obj = {"model": lstm.state_dict(), "opt": opt.state_dict()}
    back = _load(_written(obj), tmp_path)
    assert list(back["model"]) == list(obj["model"])
    for k, v in obj["model"].items():
        assert back["model"][k].tolist() == v.tolist()
    o, b = obj["opt"], back["opt"]
    assert b["param_groups"] == o["param_groups"] and list(b["state"]) == list(o["state"])
    for i, st in o["state"].items():
        for k, v in st.items():
            assert (b["state"][i][k].tolist() if isinstance(v, lucid.Tensor) else b["state"][i][k]) == \
                (v.tolist() if isinstance(v, lucid.Tensor) else v)
    opt2 = lucid.optim.Adam(lstm.parameters(), lr=0.5)
    opt2.load_state_dict(back["opt"])
    assert opt2.param_groups[0]["lr"] == 0.01


def test_sharing_views_and_types_written(tmp_path):
    base = lucid.arange(12.0).reshape(3, 4)
    w = lucid.nn.Parameter(lucid.randn(2, 2))
    obj = {"base": base, "t": base.t(), "sub": base[1:, 1:3], "flip": lucid.arange(4.0).flip(0),
           "tied": [w, w], "rg": lucid.ones(2, requires_grad=True), "empty": lucid.zeros(0, 3),
           "cplx": lucid.tensor([1 + 2j, -1j]), "real": lucid.tensor([1 + 2j, -1j]).real,
           "misc": (None, True, 2 ** 70, -5, 2.5, float("inf"), "s", b"\x00\xff", 1 + 2j, {3},
                    lucid.Size([2, 3]), lucid.device("cpu"), lucid.float64)}
    raw = _written(obj)
    zf = _check_layout(raw)
    assert len([n for n in zf.namelist() if "/data/" in n]) == 7  # base, flip, w, rg, empty, cplx, real
    back = _load(raw, tmp_path)
    assert back["t"].tolist() == base.t().tolist() and back["t"].stride() == (1, 4)
    assert back["sub"].storage_offset() == 5 and back["flip"].tolist() == [3, 2, 1, 0]
    back["base"].add_(1)
    assert back["sub"].tolist() == (base[1:, 1:3] + 1).tolist()
    t1, t2 = back["tied"]
    assert t1 is t2 and type(t1) is lucid.nn.Parameter and t1.requires_grad
    assert back["rg"].requires_grad and back["empty"].shape == (0, 3)
    assert back["cplx"].tolist() == [1 + 2j, -1j] and back["real"].tolist() == [1.0, 0.0]
    assert back["misc"] == (None, True, 2 ** 70, -5, 2.5, float("inf"), "s", b"\x00\xff", 1 + 2j, {3},
                            (2, 3), "cpu", lucid.float64)


def test_write_errors_and_atomic_save(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.pt"
    save_for_torch({"w": lucid.ones(2)}, path)
    before = path.read_bytes()
    with pytest.raises(TypeError, match="save_for_torch: can't save a NumPy array at 'x.0'"):
        save_for_torch({"x": [np.ones(2)]}, path)
    with pytest.raises(TypeError, match="save_for_torch: can't save an object of type Linear at 'm'"):
        save_for_torch({"m": lucid.nn.Linear(1, 1)}, path)
    with pytest.raises(TypeError, match="dict keys"):
        save_for_torch({lucid.ones(1): 1}, path)
    loop = []
    loop.append(loop)
    with pytest.raises(ValueError, match="nested too deeply"):
        save_for_torch(loop, path)
    import lucid.serialization_torch_write as st

    real = st._record
    calls = []

    def failing(zf, name, data):  # the disk fills up after the pickle is written
        calls.append(name)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        real(zf, name, data)

    monkeypatch.setattr(st, "_record", failing)
    with pytest.raises(OSError, match="save_for_torch: writing .*ckpt.pt.* No space left"):
        save_for_torch({"w": lucid.zeros(3)}, path)
    assert path.read_bytes() == before and sorted(os.listdir(tmp_path)) == ["ckpt.pt"]
    monkeypatch.setattr(st, "_record", real)
    with pytest.raises(ValueError, match="save_for_torch: refusing to replace"):
        save_for_torch({}, tmp_path)
    link = tmp_path / "link.pt"
    link.symlink_to(path)
    save_for_torch({"w": lucid.zeros(1)}, link)  # follows the symlink, replaces its target
    assert link.is_symlink() and lucid.load(path)["w"].tolist() == [0.0]


# ------------------------------------------------------------ with PyTorch
def _torch_file(tmp_path, obj, name="t.pt", **kw):
    torch = pytest.importorskip("torch")
    path = tmp_path / name
    torch.save(obj, path, **kw)
    return path


def test_torch_state_dicts_load_into_lucid_models(tmp_path):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    tm = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3), torch.nn.BatchNorm2d(3), torch.nn.Flatten(),
                             torch.nn.Linear(12, 4))
    tm(torch.randn(5, 2, 4, 4))
    tm.eval()
    tlstm = torch.nn.LSTM(3, 4, num_layers=2)
    path = _torch_file(tmp_path, {"cnn": tm.state_dict(), "lstm": tlstm.state_dict()})
    sd = lucid.load(path)
    assert sd["cnn"]["1.num_batches_tracked"].dtype == lucid.int64
    assert sd["cnn"]["1.num_batches_tracked"].item() == 1
    m = _model()
    m.load_state_dict(sd["cnn"])
    lstm = lucid.nn.LSTM(3, 4, num_layers=2)
    lstm.load_state_dict(sd["lstm"])
    x = np.random.default_rng(0).standard_normal((2, 2, 4, 4)).astype(np.float32)
    np.testing.assert_allclose(m(lucid.tensor(x)).detach().numpy(), tm(torch.from_numpy(x)).detach().numpy(),
                               rtol=1e-5, atol=1e-6)
    s = np.random.default_rng(1).standard_normal((5, 2, 3)).astype(np.float32)
    np.testing.assert_allclose(lstm(lucid.tensor(s))[0].detach().numpy(),
                               tlstm(torch.from_numpy(s))[0].detach().numpy(), rtol=1e-5, atol=1e-6)


def test_torch_dtypes_views_ties_and_parameters(tmp_path):
    torch = pytest.importorskip("torch")
    base = torch.arange(12.0).reshape(3, 4)
    emb = torch.nn.Parameter(torch.randn(5, 2))
    obj = {"dt": {str(d): (torch.arange(4) % 3).to(d) for d in (torch.float16, torch.float64, torch.int32,
                                                                  torch.int8, torch.uint8, torch.bool)},
           "c": torch.tensor([1 + 2j, -1j]), "c128": torch.tensor([1 + 2j], dtype=torch.complex128),
           "t": base.t(), "sub": base[1:, 1:3], "base": base, "tied": [emb, emb.detach()],
           "rg": torch.ones(2, requires_grad=True), "conj": torch.tensor([1 + 2j]).conj()}
    back = lucid.load(_torch_file(tmp_path, obj))
    for k, v in obj["dt"].items():
        assert str(back["dt"][k].dtype).split(".")[1] == k.split(".")[1] and back["dt"][k].tolist() == v.tolist()
    assert back["c"].dtype == lucid.complex64 and back["c"].tolist() == [1 + 2j, -1j]
    assert back["c128"].dtype == lucid.complex128 and back["conj"].tolist() == [1 - 2j]
    assert back["t"].stride() == (1, 4) and back["sub"].storage_offset() == 5
    back["base"].mul_(2)
    assert back["sub"].tolist() == (2 * base[1:, 1:3]).tolist() and back["t"].tolist() == (2 * base.t()).tolist()
    p, d = back["tied"]
    assert type(p) is lucid.nn.Parameter and p.requires_grad and not d.requires_grad
    p.data.add_(1)
    assert d.tolist() == (emb.detach() + 1).tolist()  # tied weights stay tied
    assert back["rg"].requires_grad
    emb.note = "kept"  # a Parameter with attributes: torch writes _rebuild_parameter_with_state
    assert lucid.load(_torch_file(tmp_path, emb, name="p.pt")).note == "kept"


def test_torch_optimizer_state_and_model_outputs(tmp_path):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    lin = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(lin.parameters(), lr=0.01)
    lin(torch.randn(4, 3)).sum().backward()
    opt.step()
    back = lucid.load(_torch_file(tmp_path, opt.state_dict()))
    want = opt.state_dict()
    assert list(back["state"]) == [0, 1] and back["param_groups"][0]["params"] == [0, 1]
    assert back["param_groups"][0]["betas"] == (0.9, 0.999) and back["param_groups"][0]["lr"] == 0.01
    for i in (0, 1):
        for k in ("step", "exp_avg", "exp_avg_sq"):
            np.testing.assert_array_equal(back["state"][i][k].numpy(), want["state"][i][k].numpy())
    assert back["state"][0]["step"].dtype == lucid.float32 and back["state"][0]["step"].item() == 1.0


def test_torch_refusals(tmp_path):
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match="legacy format"):
        lucid.load(_torch_file(tmp_path, {"w": torch.ones(2)}, _use_new_zipfile_serialization=False))
    if importlib.util.find_spec("ml_dtypes") is not None:  # the bfloat16 extra: bfloat16 loads
        w = lucid.load(_torch_file(tmp_path, {"w": torch.tensor([1.5, -3.0], dtype=torch.bfloat16)}))["w"]
        assert w.dtype == lucid.bfloat16 and w.float().tolist() == [1.5, -3.0]
    with pytest.raises(pickle.UnpicklingError, match="refusing to load 'torch.nn.modules.linear.Linear'"):
        lucid.load(_torch_file(tmp_path, torch.nn.Linear(2, 2)))


def test_lucid_checkpoints_load_in_torch(tmp_path):
    torch = pytest.importorskip("torch")
    m = _model()
    lstm = lucid.nn.LSTM(3, 4, num_layers=2)
    opt = lucid.optim.Adam(lstm.parameters(), lr=0.01)
    lstm(lucid.randn(5, 2, 3))[0].sum().backward()
    opt.step()
    base = lucid.arange(12.0).reshape(3, 4)
    path = tmp_path / "for_torch.pt"
    save_for_torch({"cnn": m.state_dict(), "lstm": lstm.state_dict(), "opt": opt.state_dict(),
                    "views": [base, base.t(), base[1:, 1:3]], "p": lucid.nn.Parameter(lucid.ones(2)),
                    "dt": [lucid.ones(2, dtype=d) for d in (lucid.float16, lucid.int64, lucid.bool,
                                                            lucid.complex128)],
                    "misc": (lucid.Size([2]), lucid.device("cpu"), lucid.float16, b"x", {1}, 1j)}, path)
    got = torch.load(path)  # weights_only=True, PyTorch's default
    assert torch.load(path, mmap=True)["views"][2].tolist() == base[1:, 1:3].tolist()  # aligned records
    tm = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3), torch.nn.BatchNorm2d(3), torch.nn.Flatten(),
                             torch.nn.Linear(12, 4)).eval()
    tm.load_state_dict(got["cnn"])
    assert got["cnn"]["1.num_batches_tracked"].dtype == torch.int64
    tlstm = torch.nn.LSTM(3, 4, num_layers=2)
    tlstm.load_state_dict(got["lstm"])
    x = np.random.default_rng(0).standard_normal((2, 2, 4, 4)).astype(np.float32)
    np.testing.assert_allclose(tm(torch.from_numpy(x)).detach().numpy(), m(lucid.tensor(x)).detach().numpy(),
                               rtol=1e-5, atol=1e-6)
    s = np.random.default_rng(1).standard_normal((5, 2, 3)).astype(np.float32)
    np.testing.assert_allclose(tlstm(torch.from_numpy(s))[0].detach().numpy(),
                               lstm(lucid.tensor(s))[0].detach().numpy(), rtol=1e-5, atol=1e-6)
    topt = torch.optim.Adam(tlstm.parameters(), lr=0.5)
    topt.load_state_dict(got["opt"])
    assert topt.param_groups[0]["lr"] == 0.01
    v = got["views"]
    assert v[0].untyped_storage().data_ptr() == v[1].untyped_storage().data_ptr() == v[2].untyped_storage().data_ptr()
    assert v[1].stride() == (1, 4) and v[2].storage_offset() == 5
    assert isinstance(got["p"], torch.nn.Parameter) and got["p"].requires_grad
    assert [t.dtype for t in got["dt"]] == [torch.float16, torch.int64, torch.bool, torch.complex128]
    assert got["misc"] == (torch.Size([2]), torch.device("cpu"), torch.float16, b"x", {1}, 1j)


def test_counter_and_bytearray_load_as_in_torchs_weights_only(tmp_path):
    torch = pytest.importorskip("torch")
    import collections

    path = str(tmp_path / "ck.pt")
    torch.save({"counts": collections.Counter({"a": 2, "b": 1}), "blob": bytearray(b"\x00ab"),
                "w": torch.ones(2)}, path)
    back = lucid.load(path)
    assert back["counts"] == collections.Counter({"a": 2, "b": 1}) and isinstance(back["counts"], collections.Counter)
    assert back["blob"] == bytearray(b"\x00ab") and isinstance(back["blob"], bytearray)
    assert back["w"].tolist() == [1.0, 1.0]
