"""lucid.dtype objects, finfo/iinfo, promote_types/result_type/can_cast, default dtype, Size.

Expected values are PyTorch's rules written out by hand; where torch is installed the
whole dtype tables are also compared against it.
"""
import pickle

import numpy as np
import pytest

import lucid

L = lucid
ALL = [L.bool, L.uint8, L.int8, L.int16, L.int32, L.int64, L.float16, L.float32, L.float64,
       L.complex64, L.complex128]


def test_dtype_objects_print_and_carry_attributes():
    assert repr(L.float32) == "lucid.float32" and str(L.int64) == "lucid.int64"
    assert isinstance(L.float32, L.dtype)
    assert (L.float32.is_floating_point, L.float32.is_complex, L.float32.is_signed, L.float32.itemsize) == \
        (True, False, True, 4)
    assert (L.uint8.is_signed, L.int8.is_signed, L.bool.is_signed) == (False, True, False)
    assert L.complex128.is_complex and L.complex128.itemsize == 16 and not L.complex128.is_floating_point
    assert L.complex64.to_real() is L.float32 and L.float64.to_complex() is L.complex128
    with pytest.raises(TypeError, match="to_complex"):
        L.int32.to_complex()


def test_dtype_equality_with_numpy_and_strings():
    for d in ALL:
        nd = np.dtype(d.name)
        assert d == nd and nd == d and d == d.name and hash(d) == hash(nd)
        assert np.dtype(d) == nd  # NumPy accepts a lucid dtype wherever a dtype goes
    assert L.float32 == np.float32 and L.float32 != L.float64 and L.float32 != "float64"
    assert L.float32 != "not a dtype" and L.float32 != 3
    assert {np.dtype("float32"): 1}[L.float32] == 1
    assert np.zeros(2, L.int16).dtype == np.int16 and np.ones(1).astype(L.float16).dtype == np.float16
    assert pickle.loads(pickle.dumps(L.float64)) is L.float64
    assert L.float32.type is np.float32  # the rest of NumPy's dtype surface is forwarded


def test_tensor_dtype_is_the_singleton():
    assert L.zeros(2).dtype is L.float32
    assert L.arange(3).dtype is L.int64
    assert L.tensor([1.0], dtype=np.float64).dtype is L.float64
    assert L.tensor([True]).dtype is L.bool
    seen = []
    L.func.vmap(lambda r: seen.append(r.dtype) or r)(L.zeros(2, 3))
    assert seen == [L.float32] and seen[0] is L.float32


def test_finfo_iinfo_values():
    f = L.finfo(L.float32)
    assert (f.bits, f.eps, f.max, f.tiny, f.dtype) == (32, 2.0 ** -23, float(np.finfo(np.float32).max),
                                                       2.0 ** -126, "float32")
    assert L.finfo(L.float16).resolution == 0.001 and L.finfo(L.float64).resolution == 1e-15
    assert L.finfo().bits == 32 and L.finfo(L.complex64).eps == 2.0 ** -23
    i = L.iinfo(L.int16)
    assert (i.bits, i.min, i.max, i.dtype) == (16, -32768, 32767, "int16")
    assert (L.iinfo(L.uint8).min, L.iinfo(L.uint8).max) == (0, 255)
    with pytest.raises(TypeError, match="finfo: expected a floating"):
        L.finfo(L.int32)
    with pytest.raises(TypeError, match="iinfo: expected an integer"):
        L.iinfo(L.float32)


PROMOTE = [
    (L.int64, L.float16, L.float16), (L.uint8, L.int8, L.int16), (L.bool, L.bool, L.bool),
    (L.bool, L.uint8, L.uint8), (L.int32, L.int64, L.int64), (L.float16, L.float64, L.float64),
    (L.complex64, L.float64, L.complex128), (L.int64, L.complex64, L.complex64),
    (L.float32, L.complex64, L.complex64),
]


@pytest.mark.parametrize("a,b,want", PROMOTE)
def test_promote_types(a, b, want):
    assert L.promote_types(a, b) is want and L.promote_types(b, a) is want


def test_result_type_and_can_cast():
    assert L.result_type(L.tensor([1, 2]), 2.5) is L.float32
    assert L.result_type(L.tensor([1], dtype=L.int8), L.tensor(300)) is L.int8
    assert L.result_type(L.tensor([1.0], dtype=L.float16), L.tensor([1], dtype=L.int64)) is L.float16
    assert L.result_type(2, 3.0) is L.float32
    assert L.can_cast(L.int32, L.float16) and not L.can_cast(L.float64, L.int32)
    assert not L.can_cast(L.int8, L.bool) and L.can_cast(L.bool, L.uint8) and not L.can_cast(L.complex64, L.float64)
    with pytest.raises(TypeError, match="can_cast"):
        L.can_cast("nope", L.float32)


def test_default_dtype_round_trip():
    assert L.get_default_dtype() is L.float32
    try:
        L.set_default_dtype(L.float64)
        assert L.get_default_dtype() is L.float64 and L.tensor([1.5]).dtype is L.float64
        assert L.finfo().bits == 64
    finally:
        L.set_default_dtype(L.float32)
    for bad in (L.int32, "int64", L.complex64):
        with pytest.raises(TypeError, match="set_default_dtype"):
            L.set_default_dtype(bad)
    assert L.get_default_dtype() is L.float32  # a failing call changes nothing


def test_constants_and_bfloat16():
    import math

    assert (L.pi, L.e, L.inf) == (math.pi, math.e, math.inf) and math.isnan(L.nan)
    assert L.zeros(3)[L.newaxis].shape == (1, 3)
    pytest.importorskip("ml_dtypes")  # tests/test_bfloat16.py: the message without it
    assert isinstance(L.bfloat16, L.dtype) and L.bfloat16.itemsize == 2 and L.bfloat16.is_floating_point


def test_size_is_a_tuple_subclass():
    x = L.zeros(2, 3, 4)
    s = x.shape
    assert isinstance(s, L.Size) and isinstance(s, tuple) and x.size() == s == (2, 3, 4)
    assert s.numel() == 24 and x.size(1) == 3 and x.size(-1) == 4
    assert isinstance(s[1:], L.Size) and s[1:] == (3, 4) and isinstance(s + (5,), L.Size)
    assert isinstance((1,) + s, L.Size) and (1,) + s == (1, 2, 3, 4)
    assert repr(s) == "(2, 3, 4)" and pickle.loads(pickle.dumps(s)) == s
    assert L.Size([2, np.int64(3)]) == (2, 3)
    with pytest.raises(TypeError, match="Size"):
        L.Size([1.5])
    assert L.zeros(*s).shape == s and L.ones(s).shape == s


def test_torch_parity_tables():
    torch = pytest.importorskip("torch")
    tmap = {d: getattr(torch, d.name) for d in ALL}
    for a in ALL:
        for b in ALL:
            assert L.promote_types(a, b).name == str(torch.promote_types(tmap[a], tmap[b])).split(".")[1], (a, b)
            assert L.can_cast(a, b) == torch.can_cast(tmap[a], tmap[b]), (a, b)
        if a.is_floating_point:
            f, tf = L.finfo(a), torch.finfo(tmap[a])
            assert (f.bits, f.eps, f.max, f.min, f.tiny, f.resolution) == \
                (tf.bits, tf.eps, tf.max, tf.min, tf.tiny, tf.resolution)
        elif a.kind in "iu":
            i, ti = L.iinfo(a), torch.iinfo(tmap[a])
            assert (i.bits, i.min, i.max) == (ti.bits, ti.min, ti.max)
        assert (a.is_floating_point, a.is_complex, a.is_signed, a.itemsize) == \
            (tmap[a].is_floating_point, tmap[a].is_complex, tmap[a].is_signed, tmap[a].itemsize)
    for x, y in [([1, 2], 2.5), ([1.0], [1]), (True, [1]), ([1], 1j)]:
        lx = L.tensor(x) if isinstance(x, list) else x
        ly = L.tensor(y) if isinstance(y, list) else y
        tx = torch.tensor(x) if isinstance(x, list) else x
        ty = torch.tensor(y) if isinstance(y, list) else y
        assert L.result_type(lx, ly).name == str(torch.result_type(tx, ty)).split(".")[1]
