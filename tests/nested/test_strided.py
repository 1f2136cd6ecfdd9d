"""Strided nested tensors (PyTorch's default nested layout): components ragged in several dims,
checked against NumPy per component, finite differences (gradcheck) through the components,
PyTorch's size/reshape/padding rules and errors, and PyTorch itself where it is installed."""
import pickle

import numpy as np
import pytest

import lucid
import lucid.nested as N
import lucid.nn.functional as F
from lucid.autograd import gradcheck

rng = np.random.default_rng(7)
SHAPES = ((3, 4, 5), (3, 6, 2))


def _arrays(shapes=SHAPES):
    return [rng.normal(size=s) for s in shapes]


def _nt(arrays, **kw):
    return N.nested_tensor([lucid.tensor(a) for a in arrays], **kw)


def _np(t):
    return t.detach().numpy()


def _check(nt, refs, tol=1e-12):
    assert nt.is_nested and nt.layout is lucid.strided
    parts = nt.unbind()
    assert len(parts) == len(refs)
    for p, r in zip(parts, refs):
        assert tuple(p.shape) == np.shape(r)
        np.testing.assert_allclose(_np(p), r, rtol=tol, atol=tol)


def _through(fn, arrays):
    """gradcheck of ``fn`` (nested in, nested out) with respect to every component."""
    comps = [lucid.tensor(a, requires_grad=True) for a in arrays]

    def f(*cs):
        return fn(N.as_nested_tensor(list(cs))).to_padded_tensor(0.0)
    assert gradcheck(f, comps)


# ------------------------------------------------------------------ construction and metadata

def test_default_layout_is_strided_and_sizes_may_differ_in_every_dim():
    a, b = _arrays()
    nt = _nt([a, b])
    assert nt.layout is lucid.strided and nt.is_nested and isinstance(nt, N.StridedNestedTensor)
    assert nt.dim() == nt.ndim == 4 and nt.size(0) == 2 and nt.size(1) == 3 and nt.size(-3) == 3
    assert nt.numel() == 96 and nt.dtype == lucid.float64 and nt.is_contiguous()
    assert nt._nested_tensor_size().tolist() == [[3, 4, 5], [3, 6, 2]]
    assert nt._nested_tensor_strides().tolist() == [[20, 5, 1], [12, 2, 1]]
    assert nt._nested_tensor_storage_offsets().tolist() == [0, 60]
    _check(nt, [a, b])
    for d in (2, 3, -1, -2):
        with pytest.raises(RuntimeError, match=f"^size: Given dimension {d} is irregular"):
            nt.size(d)
    with pytest.raises(IndexError, match=r"^size: Dimension out of range \(expected to be in range of \[-4, 3\]"):
        nt.size(4)
    with pytest.raises(RuntimeError, match="^shape: a strided nested tensor has irregular dims"):
        nt.shape
    assert tuple(_nt([np.ones((2, 3)), np.ones((2, 3))]).shape) == (2, 2, 3)  # regular: a plain size


def test_constructor_options_and_errors():
    nt = N.nested_tensor([[1, 2], [3]])  # lists become components; the first one's dtype wins
    assert nt.dtype == lucid.int64 and [t.tolist() for t in nt.unbind()] == [[1, 2], [3]]
    mixed = N.nested_tensor([lucid.ones(2, dtype=lucid.int64), lucid.tensor([1.5])])
    assert mixed.dtype == lucid.int64 and mixed.unbind()[1].tolist() == [1]
    assert N.nested_tensor([lucid.ones(2)], dtype=lucid.float64).dtype == lucid.float64
    scalars = N.nested_tensor([lucid.tensor(1.0), lucid.tensor(2.0)])
    assert scalars.dim() == 1 and [t.item() for t in scalars.unbind()] == [1.0, 2.0]
    empty = N.nested_tensor([])
    assert empty.dim() == 1 and empty.numel() == 0 and empty.size(0) == 0 and len(empty) == 0
    assert tuple(empty.to_padded_tensor(0.0).shape) == (0,)
    with pytest.raises(RuntimeError, match="^nested_tensor: All Tensors given to nested_tensor must have the same "
                                           "dimension. Found dimension 2 for Tensor at index 1"):
        N.nested_tensor([lucid.ones(2), lucid.ones(2, 1)])
    with pytest.raises(RuntimeError, match="unsupported for nested tensors: lucid.sparse_coo"):
        N.nested_tensor([lucid.ones(2)], layout=lucid.sparse_coo)
    with pytest.raises(TypeError, match="^nested_tensor: expected a list of tensors"):
        N.nested_tensor(lucid.ones(2, 3))


def test_nested_tensor_copies_and_unbind_views():
    x = lucid.zeros(2, 1)
    for nt in (N.nested_tensor([x]), N.nested_tensor([x, lucid.zeros(1, 3)])):
        nt.unbind()[0].add_(1)
        assert x.tolist() == [[0.0], [0.0]] and nt.unbind()[0].tolist() == [[1.0], [1.0]]  # views of the buffer
    dense = lucid.zeros(2, 2)
    N.as_nested_tensor(dense).unbind()[0].add_(1)  # a dense input is viewed, as PyTorch's
    assert dense.tolist() == [[1.0, 1.0], [0.0, 0.0]]


def test_requires_grad_leaf_and_gradients():
    a, b = _arrays(((2, 3), (1, 2)))
    nt = _nt([a, b], requires_grad=True)
    assert nt.requires_grad and nt.is_leaf and nt.grad_fn is None
    out = nt * nt
    assert not out.is_leaf and out.grad_fn is not None
    g = _nt([np.ones((2, 3)), 2 * np.ones((1, 2))])
    out.backward(g)
    _check(nt.grad, [2 * a, 4 * b])
    with pytest.raises(RuntimeError, match="^backward: grad can be implicitly created only for scalar outputs"):
        (nt * 2).backward()
    with pytest.raises(RuntimeError, match="^backward: Expected both self and other to be nested"):
        (nt * 2).backward(lucid.ones(3))
    with pytest.raises(RuntimeError):
        N.nested_tensor([lucid.ones(2, dtype=lucid.int64)], requires_grad=True)


def test_as_nested_tensor_keeps_the_graph():
    a = lucid.tensor(rng.normal(size=(2, 3)), requires_grad=True)
    b = lucid.tensor(rng.normal(size=(4, 1)), requires_grad=True)
    nt = N.as_nested_tensor([a, b])
    assert nt.layout is lucid.strided and nt.grad_fn is not None
    nt.to_padded_tensor(0.0).pow(2).sum().backward()
    np.testing.assert_allclose(_np(a.grad), 2 * _np(a))
    np.testing.assert_allclose(_np(b.grad), 2 * _np(b))
    assert N.as_nested_tensor([lucid.ones(2), lucid.ones(3)], dtype=lucid.float64).dtype == lucid.float64
    assert N.as_nested_tensor(nt) is nt
    with pytest.raises(RuntimeError, match=r"^as_nested_tensor: Expected tensor argument to have dim\(\) > 1"):
        N.as_nested_tensor(lucid.ones(3))
    with pytest.raises(RuntimeError, match="^as_nested_tensor: Converting between nested tensor layouts"):
        N.as_nested_tensor(nt, layout=lucid.jagged)


def test_narrow_default_layout_is_strided():
    x = lucid.arange(6.0).reshape(3, 2)
    nt = N.narrow(x, 0, 1, 2)
    _check(nt, [[2.0, 3.0], [4.0, 5.0]])
    with pytest.raises(RuntimeError, match="^narrow: start and length must be integers for the strided layout"):
        N.narrow(x, 1, lucid.tensor([0, 1, 0]), lucid.tensor([1, 1, 1]))
    with pytest.raises(RuntimeError, match="^narrow: only dim=0 supported"):
        N.narrow(x, 1, 0, 1)


# ------------------------------------------------------------------ padding

def test_to_padded_tensor_pads_every_dim():
    a, b = np.arange(6.0).reshape(2, 3), np.arange(4.0).reshape(4, 1)
    nt = _nt([a, b])
    ref = np.full((2, 4, 3), -1.0)
    ref[0, :2, :3], ref[1, :4, :1] = a, b
    np.testing.assert_array_equal(_np(nt.to_padded_tensor(-1.0)), ref)
    np.testing.assert_array_equal(_np(N.to_padded_tensor(nt, -1.0)), ref)
    big = nt.to_padded_tensor(7.0, (3, 5, 4))
    assert tuple(big.shape) == (3, 5, 4) and (_np(big)[2] == 7).all() and (_np(big)[:, 4] == 7).all()
    np.testing.assert_array_equal(_np(big)[0, :2, :3], a)
    with pytest.raises(RuntimeError, match="^to_padded_tensor: Value in output_size is less than NestedTensor padded"):
        nt.to_padded_tensor(0.0, (2, 3, 3))
    with pytest.raises(RuntimeError, match="^to_padded_tensor: Length of output_size does not match"):
        nt.to_padded_tensor(0.0, (2, 4))
    ints = N.nested_tensor([[1, 2], [3]]).to_padded_tensor(1.7)
    assert ints.dtype == lucid.int64 and ints.tolist() == [[1, 2], [3, 1]]  # the padding is cast, as PyTorch's


def test_to_padded_tensor_is_a_nested_method_only():
    with pytest.raises(NotImplementedError, match="^to_padded_tensor: expected a nested tensor"):
        lucid.ones(2).to_padded_tensor(0.0)
    with pytest.raises(TypeError, match="^to_padded_tensor: expected a nested tensor"):  # older callers
        N.to_padded_tensor(lucid.ones(2), 0.0)


def test_to_padded_tensor_gradient():
    _through(lambda nt: nt * 1.0, _arrays(((2, 3), (3, 1))))


# ------------------------------------------------------------------ pointwise

def test_pointwise_ops_on_the_buffer():
    a, b = _arrays()
    x, y = _nt([a, b]), _nt([b * 0 + 0.5, a * 0 + 0.5][::-1])
    _check((x * 2 + 1).relu(), [np.maximum(2 * a + 1, 0), np.maximum(2 * b + 1, 0)])
    _check(x.exp(), [np.exp(a), np.exp(b)])  # PyTorch has no strided kernel for exp: Lucid does
    _check(x - y, [a - 0.5, b - 0.5])
    _check(x + lucid.tensor(2.0), [a + 2, b + 2])
    _check(lucid.add(x, x, alpha=3), [4 * a, 4 * b])
    _check(x > 0, [a > 0, b > 0])
    _check(x.to(lucid.float32), [a.astype(np.float32), b.astype(np.float32)], tol=1e-6)
    z = x.clone()
    z.mul_(2)
    _check(z, [2 * a, 2 * b])
    _check(x, [a, b])
    with pytest.raises(RuntimeError, match="^add: Expected both self and other to be nested"):
        x + lucid.ones(5)
    with pytest.raises(RuntimeError, match="^add: does not support broadcasting when given a NestedTensor"):
        x + _nt([a, a])
    jt = N.nested_tensor([lucid.ones(2, 3)], layout=lucid.jagged)
    for x, y in ((_nt([np.ones((2, 3))]), jt), (jt, _nt([np.ones((2, 3))]))):
        with pytest.raises(RuntimeError, match="^add: nested tensors of the jagged and the strided layout"):
            x + y


def test_pointwise_gradients():
    _through(lambda nt: (nt * nt).sigmoid() + nt.sin() * 2, _arrays(((2, 3), (1, 4))))


# ------------------------------------------------------------------ per component

def _softmax(x, axis):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def test_softmax_and_reductions_per_component():
    a, b = _arrays()
    nt = _nt([a, b])
    for d in (1, 2, 3, -1):
        ax = d - 1 if d > 0 else d
        _check(F.softmax(nt, d), [_softmax(a, ax), _softmax(b, ax)])
    _check(F.log_softmax(nt, -1), [np.log(_softmax(a, -1)), np.log(_softmax(b, -1))])
    with pytest.raises(RuntimeError, match="^softmax: Cannot apply softmax across nested dimension 0"):
        F.softmax(nt, 0)
    _check(nt.sum(-1, keepdim=True), [a.sum(-1, keepdims=True), b.sum(-1, keepdims=True)])
    _check(nt.mean((1, 2)), [a.mean((0, 1)), b.mean((0, 1))])
    mx = nt.max(-1)
    _check(mx.values, [a.max(-1), b.max(-1)])
    _check(mx.indices, [a.argmax(-1), b.argmax(-1)])
    np.testing.assert_allclose(_np(nt.sum()), a.sum() + b.sum())
    with pytest.raises(RuntimeError, match="^sum: reducing across the batch dimension"):
        nt.sum(0)
    _through(lambda t: F.softmax(t, 2).sum(-1, keepdim=True) * t.amax(-1, keepdim=True), _arrays(((2, 3), (4, 2))))


def test_shape_ops_per_component():
    a, b = _arrays()
    nt = _nt([a, b])
    t = nt.transpose(1, 3)
    _check(t, [a.transpose(2, 1, 0), b.transpose(2, 1, 0)])
    assert not t.is_contiguous() and t.contiguous().is_contiguous()
    assert (t * 2).transpose(3, 1).is_contiguous() and not t.transpose(1, 2).is_contiguous()  # strides, as PyTorch
    with pytest.raises(RuntimeError, match="^transpose: Nested tensor dimension 0 cannot be transposed"):
        nt.transpose(0, 1)
    _check(nt.unsqueeze(-1), [a[..., None], b[..., None]])
    _check(nt.unsqueeze(2).squeeze(2), [a, b])
    with pytest.raises(RuntimeError, match="^unsqueeze: For nested tensors, unsqueezing dimension 0"):
        nt.unsqueeze(0)
    with pytest.raises(RuntimeError, match="^squeeze: For nested tensors, squeeze without the dim argument"):
        nt.squeeze()
    _check(nt.select(2, 1), [a[:, 1], b[:, 1]])
    np.testing.assert_array_equal(_np(nt.select(0, 1)), b)
    np.testing.assert_array_equal(_np(nt[1, 2]), b[2])
    _check(nt.permute(0, 3, 1, 2), [a.transpose(2, 0, 1), b.transpose(2, 0, 1)])
    _check(lucid.cat([nt, nt], 0), [a, b, a, b])
    _check(lucid.cat([nt, nt], -1), [np.concatenate([a, a], -1), np.concatenate([b, b], -1)])
    _through(lambda t: t.transpose(-1, -2).unsqueeze(1) * 3, _arrays(((2, 3), (4, 2))))


def test_reshape_follows_pytorch_minus_one_rule():
    a, b = _arrays(((3, 4), (5, 4)))
    nt = _nt([a, b])
    _check(nt.reshape(2, -1, 2, 2), [a.reshape(3, 2, 2), b.reshape(5, 2, 2)])  # -1 keeps each one's size
    _check(nt.view(2, -1, -1), [a, b])
    _check(nt.reshape((2, -1, 1, 4)), [a.reshape(3, 1, 4), b.reshape(5, 1, 4)])
    with pytest.raises(RuntimeError, match="^reshape: For now nested reshape cannot change or infer the implicit"):
        nt.reshape(-1, -1, 4)
    with pytest.raises(RuntimeError, match="^view: nested tensor does not infer shape"):
        nt.view(2, -1, 2, -1)
    with pytest.raises(RuntimeError, match=r"^reshape: shape '\[2, 3, 4\]' is invalid for input of size 20"):
        nt.reshape(2, 3, 4)
    nt3 = _nt(_arrays(((3, 4, 6), (5, 2, 6))))
    with pytest.raises(RuntimeError, match="^reshape: only one dimension can be inferred"):
        nt3.reshape(2, -1, -1, 2, 3)
    v = nt.clone().view(2, -1, 4, 1)  # reshapes and (un)squeezes are views of the buffer, as PyTorch's
    v.unsqueeze(1).squeeze(1).unbind()[1].mul_(0)
    _check(v, [a[..., None], np.zeros((5, 4, 1))])
    _through(lambda t: t.reshape(2, -1, 2, 2).sum(-1), [a, b])


def test_products_layers_and_attention():
    a, b = _arrays(((3, 4), (5, 4)))
    nt = _nt([a, b])
    _check(lucid.matmul(nt, nt.transpose(1, 2)), [a @ a.T, b @ b.T])
    _check(lucid.bmm(nt, nt.transpose(1, 2)), [a @ a.T, b @ b.T])
    w, bias = rng.normal(size=(3, 4)), rng.normal(size=3)
    _check(F.linear(nt, lucid.tensor(w), lucid.tensor(bias)), [a @ w.T + bias, b @ w.T + bias])
    mu = [x.mean(-1, keepdims=True) for x in (a, b)]
    sd = [np.sqrt(x.var(-1, keepdims=True) + 1e-5) for x in (a, b)]
    ln = F.layer_norm(nt, (4,), lucid.ones(4, dtype=lucid.float64) * 2, lucid.zeros(4, dtype=lucid.float64))
    _check(ln, [2 * (a - mu[0]) / sd[0], 2 * (b - mu[1]) / sd[1]], tol=1e-10)
    qs = _arrays(((2, 3, 4), (2, 5, 4)))
    q = _nt(qs)
    refs = []
    for x in qs:
        refs.append(_softmax(x @ x.transpose(0, 2, 1) / 2.0, -1) @ x)
    _check(F.scaled_dot_product_attention(q, q, q), refs, tol=1e-10)
    idx = N.nested_tensor([lucid.tensor([0, 2]), lucid.tensor([1])])
    _check(F.embedding(idx, lucid.tensor(w)), [w[[0, 2]], w[[1]]])
    np.testing.assert_array_equal(_np(nt.values()), np.concatenate([a.ravel(), b.ravel()]))
    with pytest.raises(RuntimeError, match="^matmul: For nested tensors, only inputs with >= 3 dims"):
        lucid.matmul(_nt([np.ones(3)]), _nt([np.ones(3)]))
    with pytest.raises(RuntimeError, match="^linear: Expected all tensors in nested tensor to have the same trailing"):
        F.linear(_nt([np.ones((2, 3)), np.ones((2, 4))]), lucid.ones(2, 3, dtype=lucid.float64))
    with pytest.raises(RuntimeError, match="^scaled_dot_product_attention: Nested tensors for query / key are not "
                                           "supported when an explicit attn_mask"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=lucid.ones(3, 3, dtype=lucid.bool))
    _through(lambda t: lucid.matmul(t, t.transpose(1, 2)).sum(-1, keepdim=True)
             + F.linear(t, lucid.tensor(w)).sum(-1, keepdim=True), [a, b])


# ------------------------------------------------------------------ printing, pickling

def test_repr_as_pytorch():  # on the CPU: another device prints itself in each component
    nt = N.nested_tensor([lucid.tensor([1.0, 2.0]), lucid.tensor([3.0])], requires_grad=True, device="cpu")
    assert repr(nt) == ("nested_tensor([\n  tensor([1., 2.], requires_grad=True),\n"
                        "  tensor([3.], requires_grad=True)\n], requires_grad=True)")
    assert repr(nt * 2).endswith("], grad_fn=<MulBackward0>)")
    assert repr(N.nested_tensor([[[1, 2]], [[3], [4]]], device="cpu")) == \
        "nested_tensor([\n  tensor([[1, 2]]),\n  tensor([[3],\n          [4]])\n])"
    assert repr(N.nested_tensor([], device="cpu")) == "nested_tensor([\n\n])"


def test_pickle_round_trip():
    a, b = _arrays()
    back = pickle.loads(pickle.dumps(_nt([a, b], requires_grad=True)))
    assert back.requires_grad and back.is_leaf
    _check(back, [a, b])


def test_on_the_strict_device():
    from lucid.testing import strict_device

    strict_device.enable()
    a, b = _arrays(((2, 3), (1, 4)))
    nt = N.nested_tensor([lucid.tensor(a), lucid.tensor(b)], device="strict", requires_grad=True)
    out = F.softmax(nt * 2, -1)
    padded = out.to_padded_tensor(0.0)
    assert nt.device.type == "strict" and out.device == nt.device and padded.device == nt.device
    padded.sum().backward()
    assert nt.grad.device == nt.device
    np.testing.assert_allclose(_np(padded.cpu())[0, :2, :3], _softmax(2 * a, -1), rtol=1e-12)


# ------------------------------------------------------------------ PyTorch parity

@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
def test_torch_parity():
    torch = pytest.importorskip("torch")
    arrays = _arrays()
    ln = _nt(arrays, requires_grad=True)
    tn = torch.nested.nested_tensor([torch.tensor(a) for a in arrays], requires_grad=True)
    pairs = [
        (lambda x: (x * 2 + 1).relu(), lambda x: (x * 2 + 1).relu()),
        (lambda x: F.softmax(x, 2), lambda x: torch.nn.functional.softmax(x, 2)),
        (lambda x: x.transpose(1, 2), lambda x: x.transpose(1, 2)),
        (lambda x: x.sum(-1, keepdim=True), lambda x: x.sum(-1, keepdim=True)),
        (lambda x: lucid.matmul(x, x.transpose(-1, -2)), lambda x: torch.matmul(x, x.transpose(-1, -2))),
        (lambda x: x.unsqueeze(-1), lambda x: x.unsqueeze(-1)),
    ]
    for fl, ft in pairs:
        lo, to = fl(ln), ft(tn)
        assert lo._nested_tensor_size().tolist() == to._nested_tensor_size().tolist()
        g = [rng.normal(size=tuple(c.shape)) for c in to.unbind()]
        lo.backward(N.nested_tensor([lucid.tensor(x) for x in g]))
        to.backward(torch.nested.nested_tensor([torch.tensor(x) for x in g]))
        for lc, tc in zip(lo.unbind(), to.unbind()):
            np.testing.assert_allclose(_np(lc), tc.detach().numpy(), rtol=1e-10, atol=1e-12)
        for lc, tc in zip(ln.grad.unbind(), tn.grad.unbind()):
            np.testing.assert_allclose(_np(lc), tc.numpy(), rtol=1e-10, atol=1e-12)
        ln.grad, tn.grad = None, None
    np.testing.assert_array_equal(_np(ln.to_padded_tensor(-1.0)), tn.to_padded_tensor(-1.0).detach().numpy())
    assert repr(_nt([np.ones((1, 2))], device="cpu")).replace("lucid", "torch") == \
        repr(torch.nested.nested_tensor([torch.ones(1, 2, dtype=torch.float64)]))


# ------------------------------------------------------------------ transforms

@pytest.mark.parametrize("layout", ["strided", "jagged"])
def test_transforms_through_a_nested_tensor(layout):  # vmap used to fail reading a tracer's _data
    lay = getattr(lucid, layout)
    a, b = lucid.tensor(rng.normal(size=(3, 2, 3))), lucid.tensor(rng.normal(size=(3, 1, 3)))

    def f(x, y):
        return F.softmax(N.as_nested_tensor([x, y], layout=lay) * 2, -1).to_padded_tensor(0.0)
    out = lucid.func.vmap(f)(a, b)
    for i in range(3):
        np.testing.assert_allclose(_np(out[i]), _np(f(a[i], b[i])), rtol=1e-12)
    np.testing.assert_allclose(_np(out[:, 0, :2]), _softmax(2 * _np(a), -1), rtol=1e-12)
    g = lucid.func.grad(lambda x: f(x, b[0]).pow(2).sum())(a[0])
    x = a[0].detach().requires_grad_()
    f(x, b[0]).pow(2).sum().backward()
    np.testing.assert_allclose(_np(g), _np(x.grad), rtol=1e-12)
