"""Quantized tensors: dtypes, qschemes, quantize/dequantize (bit-exact against a NumPy
reference of PyTorch's rounding, and against torch when installed), queries, views, printing,
errors."""
import copy
import os
import pickle
import sys
import warnings

import numpy as np
import pytest

import lucid

sys.path.insert(0, os.path.dirname(__file__))
import qref  # noqa: E402

QDTYPES = {"qint8": lucid.qint8, "quint8": lucid.quint8, "qint32": lucid.qint32}


def _torch():
    torch = pytest.importorskip("torch")
    warnings.filterwarnings("ignore", message=".*quantiz.*deprecated", category=UserWarning)
    return torch


def _ties(rng, scale, n=64):
    """Values on and near the rounding midpoints, and some far outside the range."""
    k = rng.integers(-400, 400, n)
    return np.concatenate([(k * 0.5 * scale), rng.normal(size=n) * 60 * scale, [1e9, -1e9, 0.0]]).astype(np.float32)


# ----------------------------------------------------------------- dtypes and schemes

def test_quantized_dtypes_are_their_own_dtypes():
    assert repr(lucid.qint8) == "lucid.qint8" and str(lucid.quint8) == "lucid.quint8"
    assert (lucid.qint8.itemsize, lucid.quint8.itemsize, lucid.qint32.itemsize) == (1, 1, 4)
    assert lucid.qint8 != lucid.int8 and lucid.int8 != lucid.qint8 and np.dtype(np.int8) != lucid.qint8
    assert not lucid.qint8.is_floating_point and not lucid.qint8.is_complex
    assert isinstance(lucid.qint8, lucid.dtype)
    assert pickle.loads(pickle.dumps(lucid.qint32)) is lucid.qint32
    with pytest.raises(RuntimeError, match="is_signed"):
        lucid.qint8.is_signed
    with pytest.raises(TypeError, match="zeros: dtype lucid.qint8 is a quantized dtype"):
        lucid.zeros(2, dtype=lucid.qint8)


def test_qschemes():
    assert repr(lucid.per_tensor_affine) == "lucid.per_tensor_affine"
    assert isinstance(lucid.per_channel_symmetric, lucid.qscheme)
    assert pickle.loads(pickle.dumps(lucid.per_channel_affine)) is lucid.per_channel_affine


# ----------------------------------------------------------------- quantize / dequantize

def test_quantize_per_tensor_closed_form():
    x = lucid.tensor([-1.0, 0.0, 0.05, 0.15, 0.25, 1.0, 30.0])
    q = lucid.quantize_per_tensor(x, 0.1, 10, lucid.quint8)
    # 0.05/0.1 = 0.5 and 0.25/0.1 = 2.5 round half to even; 30/0.1 + 10 clamps to 255
    assert q.int_repr().tolist() == [0, 10, 10, 12, 12, 20, 255]
    assert q.int_repr().dtype == lucid.uint8
    np.testing.assert_array_equal(q.dequantize().numpy(),
                                  np.array([-1.0, 0.0, 0.0, 0.2, 0.2, 1.0, 24.5], np.float32))
    assert (q.q_scale(), q.q_zero_point(), q.qscheme()) == (0.1, 10, lucid.per_tensor_affine)
    assert q.is_quantized and not x.is_quantized and q.dtype is lucid.quint8
    assert tuple(q.shape) == (7,) and tuple(q.size()) == (7,) and q.numel() == 7 and q.element_size() == 1


@pytest.mark.parametrize("name", sorted(QDTYPES))
def test_quantize_per_tensor_matches_reference(name):
    rng = np.random.default_rng(0)
    lo, hi = qref.RANGES[name]
    for _ in range(20):
        scale = float(rng.uniform(1e-3, 1))
        zp = int(rng.integers(max(lo, -1000), min(hi, 1000)))
        x = _ties(rng, scale)
        q = lucid.quantize_per_tensor(lucid.tensor(x), scale, zp, QDTYPES[name])
        want = qref.quantize_per_tensor(x, scale, zp, name)
        np.testing.assert_array_equal(q.int_repr().numpy().astype(np.int64), want)
        np.testing.assert_array_equal(q.dequantize().numpy(), qref.dequantize_per_tensor(want, scale, zp))


@pytest.mark.parametrize("name", sorted(QDTYPES))
def test_quantize_per_tensor_matches_torch(name):
    torch = _torch()
    rng = np.random.default_rng(1)
    lo, hi = qref.RANGES[name]
    tdt = getattr(torch, name)
    for _ in range(20):
        scale = float(rng.uniform(1e-3, 1))
        zp = int(rng.integers(max(lo, -1000), min(hi, 1000)))
        x = _ties(rng, scale, n=int(rng.integers(1, 40)))
        if name == "qint32":  # PyTorch's int32 ``q - zp`` wraps around at the range's ends
            x = x[np.abs(x) < 1e8]
        q = lucid.quantize_per_tensor(lucid.tensor(x), scale, zp, QDTYPES[name])
        t = torch.quantize_per_tensor(torch.from_numpy(x), scale, zp, tdt)
        np.testing.assert_array_equal(q.int_repr().numpy(), t.int_repr().numpy())
        np.testing.assert_array_equal(q.dequantize().numpy(), t.dequantize().numpy())


def test_tensor_scale_and_zero_point_and_lists():
    x = lucid.tensor([0.3, -0.2])
    q = lucid.quantize_per_tensor(x, lucid.tensor(0.1), lucid.tensor(3), lucid.qint8)
    assert q.q_scale() == float(np.float32(0.1)) == 0.10000000149011612 and q.q_zero_point() == 3
    assert q.int_repr().tolist() == [6, 1]
    qs = lucid.quantize_per_tensor([lucid.ones(2), lucid.zeros(2)], lucid.tensor([0.5, 0.25]),
                                   lucid.tensor([1, 2]), lucid.quint8)
    assert isinstance(qs, tuple) and [t.int_repr().tolist() for t in qs] == [[3, 3], [2, 2]]
    assert [t.tolist() for t in lucid.dequantize(list(qs))] == [[1.0, 1.0], [0.0, 0.0]]


@pytest.mark.parametrize("name", sorted(QDTYPES))
def test_quantize_per_channel(name):
    rng = np.random.default_rng(2)
    lo, hi = qref.RANGES[name]
    x = (rng.normal(size=(3, 4, 5)) * 4).astype(np.float32)
    x[:, 0, :2] = [[0.05, 0.15], [0.25, -0.25], [0.75, 1.25]]
    scales = np.array([0.1, 0.5, 0.03, 0.2])
    zps = np.array([0, min(3, hi), max(lo, -2) if lo < 0 else 2, 1])
    q = lucid.quantize_per_channel(lucid.tensor(x), lucid.tensor(scales), lucid.tensor(zps), 1, QDTYPES[name])
    want = qref.quantize_per_channel(x, scales, zps, 1, name)
    np.testing.assert_array_equal(q.int_repr().numpy().astype(np.int64), want)
    deq = ((want - zps.reshape(1, -1, 1)) * scales.reshape(1, -1, 1)).astype(np.float32)
    np.testing.assert_array_equal(q.dequantize().numpy(), deq)
    assert q.qscheme() is lucid.per_channel_affine and q.q_per_channel_axis() == 1
    assert q.q_per_channel_scales().dtype == lucid.float64 and q.q_per_channel_zero_points().dtype == lucid.int64
    np.testing.assert_array_equal(q.q_per_channel_scales().numpy(), scales)


def test_quantize_per_channel_matches_torch():
    torch = _torch()
    rng = np.random.default_rng(3)
    x = (rng.normal(size=(6, 7)) * 3).astype(np.float32)
    s = rng.uniform(0.01, 0.5, 7)
    for name, z in (("qint8", rng.integers(-5, 5, 7)), ("quint8", rng.integers(0, 20, 7))):
        q = lucid.quantize_per_channel(lucid.tensor(x), lucid.tensor(s), lucid.tensor(z), 1, QDTYPES[name])
        t = torch.quantize_per_channel(torch.from_numpy(x), torch.from_numpy(s), torch.from_numpy(z), 1,
                                       getattr(torch, name))
        np.testing.assert_array_equal(q.int_repr().numpy(), t.int_repr().numpy())
        np.testing.assert_array_equal(q.dequantize().numpy(), t.dequantize().numpy())


def test_dynamic_qparams_match_the_reference_and_torch():
    rng = np.random.default_rng(4)
    cases = [(-2.0, 3.5), (0.0, 0.0), (1e-7, 2e-7), (-3e-6, 0.0), (0.0, 5e-6), (-1e-6, 2e-6), (-8.0, -1.0)]
    for lo, hi in cases + [tuple(sorted(rng.normal(size=2) * 5)) for _ in range(20)]:
        for qmin, qmax in ((0, 255), (-128, 127)):
            for rr in (False, True):
                assert lucid._core.quantized.choose_qparams(lo, hi, qmin, qmax, rr) == \
                    qref.choose_qparams(lo, hi, qmin, qmax, rr)
    torch = _torch()
    for _ in range(20):
        x = (rng.normal(size=int(rng.integers(1, 30))) * rng.uniform(0.01, 10) + rng.uniform(-3, 3))
        x = x.astype(np.float32)
        for name in ("quint8", "qint8"):
            for rr in (False, True):
                q = lucid.quantize_per_tensor_dynamic(lucid.tensor(x), QDTYPES[name], rr)
                t = torch.quantize_per_tensor_dynamic(torch.from_numpy(x), getattr(torch, name), rr)
                assert (q.q_scale(), q.q_zero_point()) == (t.q_scale(), t.q_zero_point())
                np.testing.assert_array_equal(q.int_repr().numpy(), t.int_repr().numpy())


# ----------------------------------------------------------------- queries, views, copies

def test_views_of_per_tensor_tensors_keep_the_quantizer():
    q = lucid.quantize_per_tensor(lucid.arange(6.0).reshape(2, 3), 0.5, 2, lucid.qint8)
    for v, ints in ((q[1], [8, 10, 12]), (q.reshape(6)[1:3], [4, 6]), (q.t()[0], [2, 8]),
                    (q.flatten()[-1:], [12]), (q.unsqueeze(0)[0, 0], [2, 4, 6])):
        assert v.is_quantized and (v.q_scale(), v.q_zero_point()) == (0.5, 2)
        assert v.int_repr().tolist() == ints
    assert tuple(q.view(3, 2).shape) == (3, 2) and q.contiguous() is q
    c = q.clone()
    assert c is not q and c.int_repr().tolist() == q.int_repr().tolist()
    d = copy.deepcopy(q)
    assert d.int_repr().tolist() == q.int_repr().tolist() and d.q_scale() == 0.5
    p = pickle.loads(pickle.dumps(q))
    assert p.int_repr().tolist() == q.int_repr().tolist() and p.dtype is lucid.qint8
    assert q[1, 2].item() == 5.0 and len(q) == 2


def test_queries_of_the_wrong_kind_raise():
    q = lucid.quantize_per_tensor(lucid.ones(2), 0.5, 0, lucid.qint8)
    qc = lucid.quantize_per_channel(lucid.ones(2, 2), lucid.tensor([0.5, 1.0]), lucid.tensor([0, 0]), 0, lucid.qint8)
    with pytest.raises(RuntimeError, match="q_per_channel_scales: expected a per-channel"):
        q.q_per_channel_scales()
    with pytest.raises(RuntimeError, match="q_scale: expected a per-tensor"):
        qc.q_scale()
    with pytest.raises(NotImplementedError, match="reshape: views of per-channel"):
        qc.reshape(4)
    for name in ("q_scale", "int_repr", "qscheme", "q_per_channel_axis"):
        with pytest.raises(NotImplementedError, match=f"{name}: expected a quantized tensor"):
            getattr(lucid.ones(2), name)()
    assert lucid.ones(2).dequantize().dtype == lucid.float32
    assert lucid.tensor([1, 2]).dequantize().tolist() == [1.0, 2.0]


def test_dense_ops_refuse_quantized_tensors():
    q = lucid.quantize_per_tensor(lucid.ones(3), 0.5, 0, lucid.qint8)
    for fn, name in ((lambda: lucid.exp(q), "exp"), (lambda: q + 1, "add"), (lambda: q.sum(), "sum"),
                     (lambda: lucid.ones(3) * q, "mul")):
        with pytest.raises(NotImplementedError, match=f"^{name}: quantized tensors are not supported here"):
            fn()
    with pytest.raises(TypeError, match="numpy: can't convert a quantized tensor"):
        q.numpy()
    with pytest.raises(RuntimeError, match="requires_grad"):
        q.requires_grad_()
    assert not q.requires_grad and q.is_leaf and q.grad is None


def test_bad_arguments():
    x = lucid.ones(3)
    with pytest.raises(RuntimeError, match="quantize_per_tensor: zero_point 300 is above upper bound"):
        lucid.quantize_per_tensor(x, 0.1, 300, lucid.quint8)
    with pytest.raises(RuntimeError, match="quantize_per_tensor: zero_point -1 is below lower bound"):
        lucid.quantize_per_tensor(x, 0.1, -1, lucid.quint8)
    with pytest.raises(RuntimeError, match="quantize_per_tensor: expected a quantized dtype"):
        lucid.quantize_per_tensor(x, 0.1, 0, lucid.int8)
    with pytest.raises(RuntimeError, match="quantize_per_tensor: Quantize only works on Float Tensor, got lucid.float6"):
        lucid.quantize_per_tensor(x.double(), 0.1, 0, lucid.qint8)
    with pytest.raises(RuntimeError, match="quantize_per_channel: Channel axis out of range"):
        lucid.quantize_per_channel(lucid.ones(2, 3), lucid.ones(2), lucid.zeros(2), 2, lucid.qint8)
    with pytest.raises(RuntimeError, match="quantize_per_channel: length of scales"):
        lucid.quantize_per_channel(lucid.ones(2, 3), lucid.ones(3), lucid.zeros(3), 0, lucid.qint8)


# ----------------------------------------------------------------- printing

def test_printing_follows_pytorch_layout():
    x = lucid.tensor([-1.0, 0.0, 0.05, 0.15, 0.25, 1.0, 30.0], device="cpu")
    q = lucid.quantize_per_tensor(x, 0.1, 10, lucid.quint8)
    assert repr(q) == ("tensor([-1. ,  0. ,  0. ,  0.2,  0.2,  1. , 24.5], size=(7,),\n"
                       "       dtype=lucid.quint8, quantization_scheme=lucid.per_tensor_affine,\n"
                       "       scale=0.1, zero_point=10)")
    qc = lucid.quantize_per_channel(lucid.tensor([[1.0, 2.0], [4.0, 5.0]], device="cpu"), [0.1, 0.5], [0, 3], 0,
                                    lucid.qint8)
    assert str(qc) == ("tensor([[1., 2.],\n        [4., 5.]], size=(2, 2), dtype=lucid.qint8,\n"
                       "       quantization_scheme=lucid.per_channel_affine,\n"
                       "       scale=tensor([0.1, 0.5], dtype=lucid.float64), zero_point=tensor([0, 3]),\n"
                       "       axis=0)")


def test_printing_suffixes_match_torch():
    torch = _torch()
    x = np.array([0.0, 0.3, 1.0], np.float32)
    t = repr(torch.quantize_per_tensor(torch.from_numpy(x), torch.tensor(0.1), torch.tensor(3), torch.qint8))
    q = repr(lucid.quantize_per_tensor(lucid.tensor(x, device="cpu"), lucid.tensor(0.1), lucid.tensor(3),
                                       lucid.qint8))
    # the values print in each library's own number format; the suffixes are PyTorch's
    assert q[q.index("size="):].replace("lucid.", "torch.").split() == t[t.index("size="):].split()


def test_quantized_tensors_and_dtypes_save_and_load(tmp_path):
    path = str(tmp_path / "q.safetensors")
    x = lucid.tensor([[-1.0, 0.25, 2.0], [0.5, -0.75, 1.5]])
    per_tensor = lucid.quantize_per_tensor(x, 0.1, 10, lucid.quint8)
    per_channel = lucid.quantize_per_channel(x, lucid.tensor([0.1, 0.05], dtype=lucid.float64),
                                             lucid.tensor([0, -3]), 0, lucid.qint8)
    lucid.save({"a": per_tensor, "b": per_channel, "dtypes": [lucid.qint32, lucid.float16]}, path)
    got = lucid.load(path)
    a, b = got["a"], got["b"]
    assert a.dtype is lucid.quint8 and a.q_scale() == 0.1 and a.q_zero_point() == 10
    assert a.int_repr().tolist() == per_tensor.int_repr().tolist()
    assert b.dtype is lucid.qint8 and b.q_per_channel_axis() == 0
    assert b.int_repr().tolist() == per_channel.int_repr().tolist()
    assert b.q_per_channel_scales().tolist() == [0.1, 0.05] and b.q_per_channel_zero_points().tolist() == [0, -3]
    assert got["dtypes"] == [lucid.qint32, lucid.float16]
