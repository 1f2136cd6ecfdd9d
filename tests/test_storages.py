"""Storage classes: ``UntypedStorage``, ``TypedStorage`` and the legacy ``FloatStorage`` ...
(NOTE [Storage objects])."""
import struct
import sys
import warnings

import numpy as np
import pytest

import lucid
from lucid.ops.storage import _tensor_sharing

LEGACY = {"FloatStorage": lucid.float32, "DoubleStorage": lucid.float64, "HalfStorage": lucid.float16,
          "LongStorage": lucid.int64, "IntStorage": lucid.int32, "ShortStorage": lucid.int16,
          "CharStorage": lucid.int8, "ByteStorage": lucid.uint8, "BoolStorage": lucid.bool,
          "ComplexFloatStorage": lucid.complex64, "ComplexDoubleStorage": lucid.complex128,
          "QInt8Storage": lucid.qint8, "QUInt8Storage": lucid.quint8, "QInt32Storage": lucid.qint32}


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        yield


def test_legacy_classes_make_typed_storages():
    for name, dt in LEGACY.items():
        cls = getattr(lucid, name)
        s = cls(3)
        assert type(s) is lucid.TypedStorage and s.dtype == dt and cls.dtype == dt
        assert s.size() == 3 and len(s) == 3 and s.nbytes() == 3 * s.element_size()
        assert s.device.type == "cpu" and s.type() == f"lucid.{name}"
        assert isinstance(s, cls) and isinstance(s, lucid.TypedStorage) and not isinstance(s, lucid.UntypedStorage)
        assert issubclass(cls, lucid.TypedStorage)
        others = [getattr(lucid, n) for n in LEGACY if n != name]
        assert not any(isinstance(s, o) for o in others)
    assert lucid.FloatStorage(2).element_size() == 4 and lucid.ComplexDoubleStorage(1).element_size() == 16
    assert lucid.QInt32Storage(2).element_size() == 4
    with pytest.raises(RuntimeError, match="dtype"):
        lucid.FloatStorage(2, dtype=lucid.float64)


def test_values_sizes_and_items():
    s = lucid.FloatStorage([1.5, 2.5, 3.5])
    assert s.tolist() == [1.5, 2.5, 3.5] and list(s) == [1.5, 2.5, 3.5] and s[1] == 2.5 and s[-1] == 3.5
    s[0] = 9
    s[1:3] = 0.5
    assert s.tolist() == [9.0, 0.5, 0.5]
    with pytest.raises(IndexError):
        s[3]
    assert lucid.FloatStorage(2).tolist() == [0.0, 0.0]  # new memory is zero-filled
    assert lucid.LongStorage([1, 2]).tolist() == [1, 2] and lucid.BoolStorage([True, False]).tolist() == [True, False]
    assert lucid.TypedStorage([1, 2], dtype=lucid.int32).tolist() == [1, 2]
    assert lucid.TypedStorage(dtype=lucid.float64).size() == 0
    assert lucid.TypedStorage(2).dtype == lucid.get_default_dtype()
    u = lucid.UntypedStorage(4)
    assert (u.size(), u.nbytes(), u.element_size(), u.tolist()) == (4, 4, 1, [0, 0, 0, 0])
    assert lucid.UntypedStorage([1, 2, 255]).tolist() == [1, 2, 255]
    with pytest.raises(ValueError, match="non-negative"):
        lucid.FloatStorage(-1)


def test_fill_copy_resize_clone():
    s = lucid.FloatStorage(3).fill_(2.0)
    assert s.tolist() == [2.0, 2.0, 2.0]
    assert lucid.UntypedStorage(3).fill_(7).tolist() == [7, 7, 7]
    assert s.copy_(lucid.FloatStorage([1, 2, 3])) is s and s.tolist() == [1.0, 2.0, 3.0]
    with pytest.raises(RuntimeError, match="self was 12 bytes but src was 24 bytes"):
        s.copy_(lucid.DoubleStorage([1, 2, 3]))  # a byte copy, as PyTorch: sizes in bytes must match
    assert lucid.IntStorage(1).copy_(lucid.FloatStorage([1.0]).untyped()).tolist() == [0x3F800000]
    assert s.resize_(5) is None and s.tolist() == [1.0, 2.0, 3.0, 0.0, 0.0]
    s.resize_(2)
    assert s.tolist() == [1.0, 2.0] and s.nbytes() == 8
    u = lucid.UntypedStorage([1, 2])
    assert u.resize_(3) is u and u.tolist() == [1, 2, 0]
    c = s.clone()
    c[0] = 50
    assert s[0] == 1.0 and c.tolist() == [50.0, 2.0] and c.dtype == lucid.float32
    assert c.data_ptr() != s.data_ptr()


def test_conversions_and_untyped():
    s = lucid.LongStorage([1, 2])
    f = s.float()
    assert f.dtype == lucid.float32 and f.tolist() == [1.0, 2.0] and isinstance(f, lucid.FloatStorage)
    assert s.double().tolist() == [1.0, 2.0] and s.long() is s
    assert s.type(lucid.DoubleStorage).dtype == lucid.float64 and s.type(lucid.float16).dtype == lucid.float16
    u = s.untyped()
    assert type(u) is lucid.UntypedStorage and u.nbytes() == 16 and u.data_ptr() == s.data_ptr()
    assert u.tolist() == list(struct.pack("<qq", 1, 2)) if sys.byteorder == "little" else True
    w = lucid.TypedStorage(wrap_storage=u, dtype=lucid.int32)
    assert w.size() == 4 and w.data_ptr() == s.data_ptr()
    w[0] = 5  # shared memory
    assert s[0] == 5 if sys.byteorder == "little" else True


def test_from_buffer():
    raw = np.array([1.0, -2.0, 3.0], dtype=np.float32).tobytes()
    assert lucid.FloatStorage.from_buffer(raw, "native").tolist() == [1.0, -2.0, 3.0]
    assert lucid.FloatStorage.from_buffer(b"\x3f\x80\x00\x00", "big").tolist() == [1.0]
    assert lucid.FloatStorage.from_buffer(b"\x00\x00\x80\x3f", "little").tolist() == [1.0]
    assert lucid.FloatStorage.from_buffer(raw, "native", count=1, offset=4).tolist() == [-2.0]
    assert lucid.ByteStorage.from_buffer(b"ab").tolist() == [97, 98]  # one-byte elements: no byte order
    assert lucid.TypedStorage.from_buffer(raw, "native", dtype=lucid.float32).size() == 3
    assert lucid.UntypedStorage.from_buffer(b"abcd").tolist() == [97, 98, 99, 100]
    with pytest.raises(RuntimeError, match="byte_order"):
        lucid.FloatStorage.from_buffer(raw)
    with pytest.raises(ValueError, match="byte_order"):
        lucid.FloatStorage.from_buffer(raw, "middle")


def test_tensor_views_storage_memory():
    x = lucid.arange(4.0, device="cpu")
    st = x.storage()
    assert isinstance(st, lucid.FloatStorage) and st.data_ptr() == x.data_ptr()
    y = lucid.tensor([], device="cpu").set_(st)
    y[0] = 100.0
    assert x.tolist() == [100.0, 1.0, 2.0, 3.0]
    st.fill_(1.0)  # writes through the storage reach the tensor
    assert x.tolist() == [1.0, 1.0, 1.0, 1.0]
    fresh = lucid.DoubleStorage([1, 2, 3])
    z = lucid.empty(0, dtype=lucid.float64, device="cpu").set_(fresh, 1, (2,))
    z[1] = 7.0
    assert fresh.tolist() == [1.0, 2.0, 7.0]
    shared = _tensor_sharing(fresh)
    assert shared.dtype == lucid.float64 and shared.tolist() == [1.0, 2.0, 7.0]
    shared[0] = -1.0
    assert fresh[0] == -1.0
    assert lucid.tensor(lucid.FloatStorage([1.5, 2.5])).tolist() == [1.5, 2.5]  # values, via __array__


def test_storage_of_default_device_tensor():
    x = lucid.arange(3.0)  # the default device (the stand-in under --lucid-device=strict)
    s = x.untyped_storage()
    assert s.device == x.device and s.nbytes() == 12
    assert isinstance(x.storage(), lucid.FloatStorage) == (x.device.type == "cpu")
    t = lucid.TypedStorage(2, dtype=lucid.float32, device=x.device)
    assert t.device == x.device and t.tolist() == [0.0, 0.0]
    t.fill_(3.0)
    assert t.tolist() == [3.0, 3.0]


def test_deprecation_warning():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lucid.FloatStorage(1)
        lucid.TypedStorage(1, dtype=lucid.float32)
    assert [w.category for w in caught] == [UserWarning, UserWarning]
    assert all("TypedStorage is deprecated" in str(w.message) for w in caught)
    assert all(w.filename == __file__ for w in caught)


def test_matches_torch():
    torch = pytest.importorskip("torch")
    raw = np.array([1.0, -2.0, 3.0], dtype=np.float32).tobytes()
    assert lucid.FloatStorage.from_buffer(raw, "native").tolist() == torch.FloatStorage.from_buffer(
        raw, "native").tolist()
    for name in LEGACY:
        ts, ls = getattr(torch, name)(2), getattr(lucid, name)(2)
        assert (ts.size(), ts.nbytes(), ts.element_size()) == (ls.size(), ls.nbytes(), ls.element_size())
        assert isinstance(ts, torch.TypedStorage) == isinstance(ls, lucid.TypedStorage)
        assert isinstance(ts, torch.UntypedStorage) == isinstance(ls, lucid.UntypedStorage)
        assert ts.type().replace("torch.", "") == ls.type().replace("lucid.", "")
    assert torch.LongStorage([1, 2]).untyped().tolist() == lucid.LongStorage([1, 2]).untyped().tolist()
