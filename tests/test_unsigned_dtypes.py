"""uint16, uint32, uint64: names, limits, PyTorch's promotion table (NOTE [Unsigned dtypes] in
lucid/_core/dtypes.py), integer ops, bit views, serialization."""
import io
import itertools
import os

import numpy as np
import pytest

import lucid

L = lucid
BAREBONES = (L.uint16, L.uint32, L.uint64)
ALL = (L.bool, L.uint8, L.int8, L.int16, L.int32, L.int64, L.uint16, L.uint32, L.uint64, L.float16,
       L.float32, L.float64, L.complex64, L.complex128)
ERR = "error"


def test_names_limits_and_attributes():
    for dt, bits in zip(BAREBONES, (16, 32, 64)):
        assert repr(dt) == f"lucid.uint{bits}" and dt == f"uint{bits}" and dt == np.dtype(f"uint{bits}")
        assert dt.itemsize == bits // 8 and not dt.is_signed and not dt.is_floating_point
        info = L.iinfo(dt)
        assert (info.bits, info.min, info.max, info.dtype) == (bits, 0, 2 ** bits - 1, f"uint{bits}")
    assert L.uint64 is L.as_tensor([1], dtype="uint64").dtype
    x = L.tensor([1, 2], dtype=L.uint32, device="cpu")
    assert x.type() == "lucid.UInt32Tensor" and x.type("lucid.UInt64Tensor").dtype == L.uint64
    assert not x.is_signed() and x.element_size() == 4


def _expected_promote(a, b):
    """PyTorch's promote_types for a pair with a uint16/32/64, written out as its rule."""
    if a == b:
        return a
    if a.is_floating_point:
        return a
    if b.is_floating_point:
        return b
    return ERR


def _lucid_promote(a, b):
    try:
        return L.promote_types(a, b)
    except RuntimeError as e:
        assert str(e).startswith("promote_types: promotion for uint16, uint32, uint64 types is not supported")
        return ERR


@pytest.mark.parametrize("u", BAREBONES, ids=str)
def test_promote_types_table(u):
    for d in ALL:
        assert _lucid_promote(u, d) == _expected_promote(u, d), d
        assert _lucid_promote(d, u) == _expected_promote(d, u), d


# (operand, operand, result): "t" a tensor with dims, "0d" a zero-dim tensor, else a Python scalar
CASES = [
    (("t", L.uint16), 3, L.uint16), (("t", L.uint64), -1, L.uint64), (("t", L.uint32), True, L.uint32),
    (("t", L.uint16), 2.5, L.float32), (("t", L.uint64), 1j, L.complex64),
    (("t", L.uint16), ("0d", L.int64), L.uint16), (("t", L.uint32), ("0d", L.bool), L.uint32),
    (("t", L.uint64), ("0d", L.uint8), L.uint64), (("t", L.uint16), ("0d", L.float64), L.float64),
    (("t", L.uint16), ("0d", L.complex128), L.complex128), (("t", L.int8), ("0d", L.uint64), L.int8),
    (("t", L.float16), ("0d", L.uint32), L.float16), (("t", L.complex64), ("0d", L.uint16), L.complex64),
    (("t", L.bool), ("0d", L.uint16), ERR), (("0d", L.bool), ("0d", L.uint16), ERR),
    (("t", L.uint16), ("t", L.int32), ERR), (("t", L.uint16), ("t", L.uint32), ERR),
    (("t", L.uint64), ("t", L.complex64), ERR), (("0d", L.uint8), ("0d", L.uint16), ERR),
    (("0d", L.uint16), ("0d", L.float16), L.float16), (("0d", L.uint32), 7, L.uint32),
    (("0d", L.uint32), ("t", L.int64), L.int64), (("t", L.uint16), ("t", L.uint16), L.uint16),
]


def _make(spec, mod=L):
    if not isinstance(spec, tuple):
        return spec
    kind, dt = spec
    dt = getattr(mod, str(dt).split(".")[-1])
    return mod.ones(2, dtype=dt) if kind == "t" else mod.ones((), dtype=dt)


def _result(f):
    try:
        return f()
    except RuntimeError as e:
        assert "promotion for uint16, uint32, uint64 types is not supported" in str(e).lower()
        return ERR


@pytest.mark.parametrize("a,b,want", CASES)
def test_result_type_and_ops_follow_the_table(a, b, want):
    x, y = _make(a), _make(b)
    assert _result(lambda: L.result_type(x, y)) == want
    assert _result(lambda: L.result_type(y, x)) == want
    assert _result(lambda: (x * y).dtype) == want  # the ops promote as result_type says


def test_whole_pair_table_matches_torch():
    torch = pytest.importorskip("torch")
    kinds = ["t", "0d"]
    for a, b in itertools.product(ALL, ALL):
        if L.uint16 not in (a, b) and L.uint32 not in (a, b) and L.uint64 not in (a, b):
            continue
        ta, tb = (getattr(torch, str(d).split(".")[-1]) for d in (a, b))
        want = _result(lambda: str(torch.promote_types(ta, tb)).split(".")[-1])
        assert _result(lambda: L.promote_types(a, b).name) == want, (a, b)
        for ka, kb in itertools.product(kinds, kinds):
            want = _result(lambda: str(torch.result_type(_make((ka, a), torch), _make((kb, b), torch))).split(".")[-1])
            got = _result(lambda: L.result_type(_make((ka, a)), _make((kb, b))).name)
            assert got == want, (ka, a, kb, b)
        for s in (True, 3, 2.5, 1j):
            for ka in kinds:
                want = _result(lambda: str(torch.result_type(_make((ka, a), torch), s)).split(".")[-1])
                if want != "complex32":  # a dtype lucid lacks (float16 with 1j)
                    assert _result(lambda: L.result_type(_make((ka, a)), s).name) == want, (ka, a, s)


@pytest.mark.parametrize("dt", BAREBONES, ids=str)
def test_integer_ops_wrap_like_c(dt):
    top = int(L.iinfo(dt).max)
    x = L.tensor([0, 1, top], dtype=dt)
    assert (x + 1).tolist() == [1, 2, 0]
    assert (x - 2).tolist() == [top - 1, top, top - 2]
    assert (x * -1).tolist() == [0, top, 1]
    assert (-x).tolist() == [0, top, 1]
    assert (~x).tolist() == [top, top - 1, 0]
    assert (x >> 1).tolist() == [0, 0, top >> 1] and (x << 1).tolist() == [0, 2, top - 1]
    assert (x // 2).tolist() == [0, 0, top // 2] and (x % 3).tolist() == [0, 1, top % 3]
    assert (x & 6).tolist() == [0, 0, 6] and (x | 6).tolist() == [6, 7, top] and (x ^ 1).tolist() == [1, 0, top - 1]
    assert x.max().item() == top and x.argmax().item() == 2 and x.sort(descending=True)[0].tolist() == [top, 1, 0]
    assert (x > 1).tolist() == [False, False, True]
    assert x.sum().dtype == L.int64 and x[:2].sum().item() == 1
    assert (x / 2).dtype == L.float32 and x.to(L.float64).tolist() == [0.0, 1.0, float(top)]
    assert L.where(x > 0, x, 5).tolist() == [5, 1, top]


def test_uint64_beyond_int64_and_bit_views():
    top = 2 ** 64 - 1
    x = L.tensor([top, 2 ** 63], dtype=L.uint64)
    assert x.tolist() == [top, 2 ** 63] and x[0].item() == top
    assert repr(x.cpu()) == "tensor([18446744073709551615,  9223372036854775808], dtype=lucid.uint64)"
    assert x.sum().item() == 2 ** 63 - 1  # -1 + -2**63 in int64, wrapping as in PyTorch
    assert x.view(L.int64).tolist() == [-1, -(2 ** 63)]
    assert L.tensor([1.0], dtype=L.float64).view(L.uint64).item() == 0x3FF0000000000000
    assert L.tensor([1, 2], dtype=L.uint16).view(L.uint8).tolist() == [1, 0, 2, 0]
    assert L.tensor([0x01020304], dtype=L.uint32).view(L.uint16).tolist() == [0x0304, 0x0102]


@pytest.mark.parametrize("dt", BAREBONES, ids=str)
def test_creation_and_random(dt):
    assert L.zeros(2, dtype=dt).dtype == dt and L.arange(3, dtype=dt).tolist() == [0, 1, 2]
    assert L.full((2,), 7, dtype=dt).tolist() == [7, 7]
    r = L.randint(3, 9, (50,), dtype=dt)
    assert r.dtype == dt and 3 <= int(r.min().item()) and int(r.max().item()) < 9
    m = L.testing.make_tensor((20,), dtype=dt, device="cpu")
    assert m.dtype == dt and 0 <= int(m.min().item()) and int(m.max().item()) < 10
    a = np.array([1, 2], dtype=str(dt).split(".")[-1])
    assert L.tensor(a).dtype == dt and L.from_numpy(a).dtype == dt and L.asarray(a).dtype == dt


def test_unsupported_pairs_fail_cleanly():
    u = L.tensor([1, 2], dtype=L.uint16)
    with pytest.raises(RuntimeError, match="^result_type: promotion for uint16, uint32, uint64 types is not "
                                           "supported, attempted to promote lucid.uint16 and lucid.int64"):
        u + L.tensor([1, 2])
    with pytest.raises(RuntimeError, match="^result_type: .* lucid.bool and lucid.uint32"):
        L.tensor([True]) & L.tensor(1, dtype=L.uint32)
    assert (u + L.tensor([1, 2]).to(L.uint16)).tolist() == [2, 4]  # an explicit cast is the way


def test_lucid_format_round_trip(tmp_path):
    d = {f"u{b}": L.tensor([0, 1, 2 ** b - 1], dtype=getattr(L, f"uint{b}")) for b in (16, 32, 64)}
    path = os.path.join(tmp_path, "u.safetensors")
    L.save(d, path)
    back = L.load(path)
    for k, v in d.items():
        assert back[k].dtype == v.dtype and back[k].tolist() == v.tolist()


def test_torch_checkpoints_both_ways(tmp_path):
    torch = pytest.importorskip("torch")
    from lucid.serialization_torch_write import save_for_torch

    x = L.tensor([[1, 2 ** 16 - 1], [3, 4]], dtype=L.uint16)
    obj = {"a": x, "b": x[:, 1], "c": L.tensor([2 ** 64 - 1], dtype=L.uint64), "d": L.tensor([7], dtype=L.uint32)}
    path = os.path.join(tmp_path, "l.pt")
    save_for_torch(obj, path)
    t = torch.load(path)
    assert t["a"].dtype == torch.uint16 and t["a"].tolist() == x.tolist() and t["b"].tolist() == [2 ** 16 - 1, 4]
    assert t["a"].untyped_storage().data_ptr() == t["b"].untyped_storage().data_ptr()  # one storage
    assert t["c"].dtype == torch.uint64 and t["c"].tolist() == [2 ** 64 - 1] and t["d"].tolist() == [7]
    buf = io.BytesIO()
    torch.save({"u": torch.tensor([5, 6, 7], dtype=torch.uint32)[1:], "w": torch.tensor([2 ** 63], dtype=torch.uint64)},
               buf)
    back = L.load(io.BytesIO(buf.getvalue()))
    assert back["u"].dtype == L.uint32 and back["u"].tolist() == [6, 7] and back["w"].tolist() == [2 ** 63]
