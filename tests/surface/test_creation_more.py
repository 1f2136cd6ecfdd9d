"""asarray, frombuffer, empty_strided, scalar_tensor and the deprecated range (lucid/ops/creation.py)."""
import array
import struct
import warnings

import numpy as np
import pytest

import lucid
from lucid.testing import strict_device


@pytest.fixture
def strict():
    strict_device.enable()
    return "strict:1"  # the device that is not current (NOTE [Several devices])


def host(t):
    return t.detach().cpu().numpy()


# ----------------------------------------------------------------------------------- asarray


def test_asarray_shares_memory_with_numpy_arrays():
    a = np.arange(6.0).reshape(2, 3).T  # non-contiguous: wrapped as it is, strides kept
    t = lucid.asarray(a, device="cpu")
    assert t.dtype == lucid.float64 and t.stride() == (1, 3)
    a[0, 0] = 100.0
    assert t[0, 0].item() == 100.0
    t.add_(1.0)
    assert a[1, 1] == 5.0
    assert lucid.asarray(a, device="cpu", copy=False).data_ptr() == a.ctypes.data


def test_asarray_copies_when_asked_or_needed():
    a = np.arange(3.0)
    c = lucid.asarray(a, device="cpu", copy=True)
    f = lucid.asarray(a, device="cpu", dtype=lucid.float32)
    a[0] = 9.0
    assert host(c).tolist() == [0.0, 1.0, 2.0] and host(f).tolist() == [0.0, 1.0, 2.0]
    assert f.dtype == lucid.float32
    with pytest.raises(ValueError, match=r"^asarray: can't alias a tensor of dtype lucid.float64 into dtype "
                                         r"lucid.float32 \(copy=False"):
        lucid.asarray(a, device="cpu", dtype=lucid.float32, copy=False)
    with pytest.raises(ValueError, match=r"^asarray: can't alias an arbitrary sequence or scalar"):
        lucid.asarray([1, 2], copy=False)
    with pytest.raises(RuntimeError, match=r"^asarray: can't alias NumPy scalars"):
        lucid.asarray(np.float32(1.0), copy=False)


def test_asarray_of_a_tensor_is_the_tensor():
    x = lucid.ones(2)
    assert lucid.asarray(x) is x and lucid.asarray(x, copy=False) is x
    y = lucid.asarray(x, copy=True)
    assert y is not x and y.data_ptr() != x.data_ptr() and host(y).tolist() == [1.0, 1.0]
    d = lucid.asarray(x, dtype=lucid.float64)
    assert d.dtype == lucid.float64 and d.device == x.device


def test_asarray_requires_grad_follows_torch_2_13():
    w = lucid.ones(2, requires_grad=True)
    assert lucid.asarray(w) is w  # None: keeps the flag and the history
    d = lucid.asarray(w, dtype=lucid.float64)  # a cast keeps the history
    (d * d).sum().backward()
    assert host(w.grad).tolist() == [2.0, 2.0]
    off = lucid.asarray(w, requires_grad=False)
    assert off.requires_grad is False and w.requires_grad is True and off.data_ptr() == w.data_ptr()
    x = lucid.ones(2)
    assert lucid.asarray(x, requires_grad=True) is x and x.requires_grad  # PyTorch sets it on x
    n = lucid.asarray(np.arange(2.0), requires_grad=True)
    assert n.requires_grad and n.is_leaf
    with pytest.raises(RuntimeError, match=r"^asarray: only floating point and complex tensors can require"):
        lucid.asarray([1, 2], requires_grad=True)


def test_asarray_sequences_scalars_and_dtypes():
    assert lucid.asarray([1, 2]).dtype == lucid.int64
    assert lucid.asarray([1.0, 2.0]).dtype == lucid.float32
    assert lucid.asarray(3.0).shape == () and lucid.asarray(np.float32(2.5)).dtype == lucid.float32
    assert host(lucid.asarray([lucid.tensor(1.0), lucid.tensor(2.0)])).tolist() == [1.0, 2.0]
    assert lucid.asarray([1.0]).device == lucid.get_default_device()
    with pytest.raises(ValueError, match=r"^asarray: can't make a tensor from list"):
        lucid.asarray([[1, 2], [3]])
    with pytest.raises(TypeError, match=r"^asarray: can't make a tensor from NoneType"):
        lucid.asarray(None)
    with pytest.raises(TypeError, match=r"^asarray: can't alias an array of dtype timedelta64"):
        lucid.asarray(np.array([1, 2], "m8[s]"))
    assert lucid.asarray(np.array([1, 2], "m8[s]"), dtype=lucid.int32).tolist() == [1, 2]


def test_asarray_reads_buffers_in_place():
    b = bytearray(struct.pack("<2f", 1.0, 2.0))
    t = lucid.asarray(b, device="cpu")
    assert t.dtype == lucid.float32 and t.tolist() == [1.0, 2.0]
    b[0:4] = struct.pack("<f", 7.0)
    assert t.tolist() == [7.0, 2.0]
    d = lucid.asarray(array.array("d", [1.5, 2.5]), dtype=lucid.float64, device="cpu")
    assert d.tolist() == [1.5, 2.5]
    with pytest.raises(ValueError, match=r"^asarray: buffer length \(6 bytes\) after offset \(0 bytes\) must "
                                         r"be a multiple of element size \(4\)"):
        lucid.asarray(bytearray(6))


def test_asarray_goes_through_dlpack():
    torch = pytest.importorskip("torch")
    src = torch.arange(3.0)
    t = lucid.asarray(src, device="cpu")
    src[0] = 5.0
    assert t.tolist() == [5.0, 1.0, 2.0]


def test_asarray_devices(strict):
    a = np.arange(3.0)
    t = lucid.asarray(a, device=strict)
    assert t.device == lucid.device(strict) and host(t).tolist() == [0.0, 1.0, 2.0]
    assert lucid.asarray(t) is t  # a device tensor stays where it is
    assert lucid.asarray(t, device="cpu").device.type == "cpu"
    with pytest.raises(ValueError, match=r"^asarray: can't alias a tensor from device 'cpu' to 'strict:1'"):
        lucid.asarray(a, device=strict, copy=False)
    assert lucid.asarray([1.0, 2.0], device=strict).device == lucid.device(strict)
    assert lucid.asarray(t._data).device == lucid.device(strict)  # a device array is wrapped as it is


def test_asarray_matches_torch_dtypes():
    torch = pytest.importorskip("torch")
    for obj in ([1, 2], [1.0, 2], 3, 2.5, True, [True, False], np.arange(3), np.float32(1.5), 1 + 2j):
        want = str(torch.asarray(obj).dtype).replace("torch.", "lucid.")
        assert str(lucid.asarray(obj).dtype) == want, obj


# -------------------------------------------------------------------------------- frombuffer


def test_frombuffer_shares_and_checks_like_torch():
    b = bytearray(struct.pack("<2f", 1.0, 2.0))
    t = lucid.frombuffer(b, dtype=lucid.float32)
    assert t.device.type == "cpu" and t.tolist() == [1.0, 2.0]
    t.mul_(3.0)
    assert struct.unpack("<2f", b) == (3.0, 6.0)
    assert lucid.frombuffer(b, dtype=lucid.float32, count=1, offset=4).tolist() == [6.0]
    assert lucid.frombuffer(b, dtype=lucid.int16, count=2, offset=2).shape == (2,)
    cases = [
        ({"offset": 2}, r"buffer length \(6 bytes\) after offset \(2 bytes\) must be a multiple of element size \(4\)"),
        ({"count": 3}, r"requested buffer length \(3 \* 4 bytes\) after offset \(0 bytes\) must not be greater "
                       r"than actual buffer length \(8 bytes\)"),
        ({"offset": 8}, r"offset \(8 bytes\) must be non-negative and no greater than buffer length \(8 bytes\) "
                        r"minus 1"),
        ({"offset": -1}, r"offset \(-1 bytes\) must be non-negative"),
        ({"count": 0}, r"both buffer length \(8\) and count \(0\) must not be 0"),
    ]
    for kw, msg in cases:
        with pytest.raises(ValueError, match="^frombuffer: " + msg):
            lucid.frombuffer(b, dtype=lucid.float32, **kw)
    with pytest.raises(ValueError, match=r"^frombuffer: object does not implement Python buffer protocol"):
        lucid.frombuffer([1, 2], dtype=lucid.int16)
    with pytest.raises(RuntimeError, match=r"^frombuffer: only floating point and complex tensors"):
        lucid.frombuffer(b, dtype=lucid.int16, requires_grad=True)
    g = lucid.frombuffer(b, dtype=lucid.float32, requires_grad=True)
    assert g.requires_grad and g.is_leaf


def test_frombuffer_of_read_only_bytes_is_read_only():
    t = lucid.frombuffer(struct.pack("<2f", 1.0, 2.0), dtype=lucid.float32)
    assert t.tolist() == [1.0, 2.0]
    with pytest.raises((RuntimeError, ValueError)):
        t.add_(1.0)
    assert t.tolist() == [1.0, 2.0]


def test_frombuffer_matches_torch():
    torch = pytest.importorskip("torch")
    raw = bytes(range(24))
    for dt in ("float32", "int16", "uint8", "float64", "int64"):
        for kw in ({}, {"offset": 8}, {"count": 2, "offset": 4}):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # torch warns about the read-only buffer
                want = torch.frombuffer(bytearray(raw), dtype=getattr(torch, dt), **kw)
            got = lucid.frombuffer(bytearray(raw), dtype=getattr(lucid, dt), **kw)
            np.testing.assert_array_equal(got.numpy(), want.numpy())


# ----------------------------------------------------------------------------- empty_strided


@pytest.mark.parametrize("size, stride, span", [
    ((2, 3), (1, 2), 6), ((2, 3), (3, 1), 6), ((2, 3), (0, 1), 3), ((2, 0), (5, 1), 0),
    ((4,), (3,), 10), ((), (), 1), ((2, 2, 2), (1, 4, 2), 8),
])
def test_empty_strided_geometry(size, stride, span):
    from lucid.ops.shape.strided import storage_geometry

    x = lucid.empty_strided(size, stride)
    assert x.shape == size and x.stride() == stride and x.storage_offset() == 0
    assert x.device == lucid.get_default_device() and x.dtype == lucid.float32
    assert storage_geometry(x._data)[3] == span  # the smallest storage the strides reach


def test_empty_strided_writes_land_in_the_strided_layout():
    x = lucid.empty_strided((2, 3), (1, 2), dtype=lucid.float64, device="cpu")
    x.copy_(lucid.tensor([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]], dtype=lucid.float64, device="cpu"))
    flat = np.lib.stride_tricks.as_strided(x.numpy(), shape=(6,), strides=(8,))  # storage order
    assert flat.tolist() == [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]


def test_empty_strided_on_devices(strict):
    x = lucid.empty_strided((2, 3), (1, 2), dtype=lucid.float64, device=strict, requires_grad=True)
    assert x.device == lucid.device(strict) and x.stride() == (1, 2) and x.requires_grad
    y = (x * 2).sum()
    y.backward()
    assert x.grad.device == lucid.device(strict)
    assert lucid.empty_strided((2, 3), (3, 1), device="meta").shape == (2, 3)
    with pytest.raises(RuntimeError, match=r"^empty_strided: the 'meta' device keeps no strides"):
        lucid.empty_strided((2, 3), (1, 2), device="meta")


def test_empty_strided_errors():
    with pytest.raises(RuntimeError, match=r"^empty_strided: dimensionality of sizes \(2\) must match "
                                           r"dimensionality of strides \(1\)"):
        lucid.empty_strided((2, 3), (3,))
    with pytest.raises(RuntimeError, match=r"^empty_strided: strides must be non-negative"):
        lucid.empty_strided((2, 3), (-1, 2))
    with pytest.raises(RuntimeError, match=r"^empty_strided: trying to create tensor with negative dimension"):
        lucid.empty_strided((-1, 3), (3, 1))
    with pytest.raises(TypeError, match=r"^empty_strided: size must be a tuple of ints, got int"):
        lucid.empty_strided(2, 1)


# ----------------------------------------------------------------------------- scalar_tensor


def test_scalar_tensor():
    for s in (3, True, 2.5, np.float64(2.5), np.int8(4)):
        t = lucid.scalar_tensor(s)
        assert t.shape == () and t.dtype == lucid.float32 and t.item() == float(s)
        assert t.device == lucid.get_default_device()
    assert lucid.scalar_tensor(3, dtype=lucid.int64).dtype == lucid.int64
    assert lucid.scalar_tensor(3.7, dtype=lucid.int64).item() == 3  # truncated, as PyTorch
    assert lucid.scalar_tensor(1 + 0j).item() == 1.0
    assert lucid.scalar_tensor(1 + 2j, dtype=lucid.complex64).item() == 1 + 2j
    assert lucid.scalar_tensor(float("inf")).item() == float("inf")
    t = lucid.scalar_tensor(2.0, requires_grad=True)
    (t * t).backward()
    assert t.grad.item() == 4.0


@pytest.mark.parametrize("s, kw", [(1e40, {}), (300, {"dtype": lucid.uint8}), (1 + 2j, {}),
                                   (float("inf"), {"dtype": lucid.int64}), (-256, {"dtype": lucid.uint8}),
                                   (-0.5, {"dtype": lucid.uint8})])  # -1 wraps to 255, as PyTorch's
def test_scalar_tensor_overflow(s, kw):
    with pytest.raises(RuntimeError, match=r"^scalar_tensor: value cannot be converted to type \w+ without "
                                           r"overflow"):
        lucid.scalar_tensor(s, **kw)


def test_scalar_tensor_wants_a_number(strict):
    for bad in ("x", lucid.tensor(1.0), [1.0]):
        with pytest.raises(TypeError, match=r"^scalar_tensor: argument 's' must be a number"):
            lucid.scalar_tensor(bad)
    assert lucid.scalar_tensor(1.5, device=strict).device == lucid.device(strict)


# ------------------------------------------------------------------------------------- range


def test_range_warns_and_includes_the_end():
    with pytest.warns(UserWarning, match=r"^lucid.range is deprecated and will be removed in a future release "
                                         r"because its behavior is inconsistent with Python's range builtin"):
        r = lucid.range(1, 4)
    assert host(r).tolist() == [1.0, 2.0, 3.0, 4.0] and r.dtype == lucid.float32
    assert r.device == lucid.get_default_device()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert host(lucid.range(0, 1, 0.3)).tolist() == pytest.approx([0.0, 0.3, 0.6, 0.9])
        r = lucid.range(0, 1, 0.1, dtype=lucid.float64)
        assert r.shape == (11,) and host(r)[-1] == 1.0
        np.testing.assert_array_equal(host(r), np.arange(11) * 0.1)  # start + i * step, in float64
        assert host(lucid.range(4, 1, -1)).tolist() == [4.0, 3.0, 2.0, 1.0]
        assert host(lucid.range(1, 2.5)).tolist() == [1.0, 2.0]
        assert host(lucid.range(0.5, 3, dtype=lucid.int64)).tolist() == [0, 1, 2, 3]  # truncated first
        big = lucid.range(2 ** 60, 2 ** 60 + 2, dtype=lucid.int64)
        assert host(big).tolist() == [2 ** 60, 2 ** 60 + 1, 2 ** 60 + 2]  # exact in int64
        g = lucid.range(0, 2, requires_grad=True)
        assert g.requires_grad and g.is_leaf


@pytest.mark.parametrize("args, error, match", [
    ((4, 1), RuntimeError, r"^range: upper bound and lower bound inconsistent with step sign"),
    ((1, 4, 0), RuntimeError, r"^range: step must be nonzero"),
    ((1, float("inf")), RuntimeError, r"^range: unsupported range: 1 -> inf"),
    ((4,), TypeError, r"^range: missing the required argument 'end'"),
])
def test_range_errors(args, error, match):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(error, match=match):
            lucid.range(*args)


def test_range_matches_torch():
    torch = pytest.importorskip("torch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for args in ((1, 4), (0, 1, 0.3), (0, 1, 0.1), (4, 1, -1), (-2.5, 3.7, 0.7), (1, 2.5)):
            want = torch.range(*args, dtype=torch.float64).numpy()
            np.testing.assert_array_equal(host(lucid.range(*args, dtype=lucid.float64)), want)



_NUMPY_LEAF_CASES = [
    ([np.float64(1.5)], "float64"), ([np.int8(1), np.int8(2)], "int8"), ([np.float16(1)], "float16"),
    ([np.float32(1), 2.0], "float32"), ([1.0, np.float64(2)], "float64"), ([np.int8(1), 2], "int64"),
    ([np.int32(1), 2.5], "float32"), ([np.array([1.0, 2.0])], "float64"),
    ([np.array([1, 2], dtype=np.int16), np.array([3, 4], dtype=np.int16)], "int16"),
    ([[np.float64(1)], [np.float64(2)]], "float64"), ([np.bool_(True), np.bool_(False)], "bool"),
    ([np.uint8(3), np.int8(1)], "int16"), ([np.complex64(1j), 2.0], "complex64"), ([np.float16(1), 2.0], "float32"),
    ([1.0, 2.0], "float32"), ([1, 2], "int64"), ([True, 2], "int64"),
]


@pytest.mark.parametrize("data,want", _NUMPY_LEAF_CASES)
def test_a_list_of_numpy_scalars_keeps_their_promoted_dtype(data, want):
    # PyTorch promotes the leaves' dtypes (a Python float counts as the default dtype); Lucid
    # took NumPy's float64/int64 and then the defaults, so tensor([np.float64(1.5)]) was float32.
    t = lucid.tensor(data)
    assert str(t.dtype) == f"lucid.{want}"
    np.testing.assert_array_equal(t.numpy(), np.array(data).astype(want))


def test_numpy_leaves_match_pytorch():
    torch = pytest.importorskip("torch")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns that a list of ndarrays is slow
        for data, _ in _NUMPY_LEAF_CASES:
            assert str(lucid.tensor(data).dtype).split(".")[1] == str(torch.tensor(data).dtype).split(".")[1]
