"""The Tensor surface of lucid/ops/tensor_surface_more.py: Python protocols, queries (device
flags, dim_order, is_set_to), method forms and legacy constructors (new, as_subclass, resize,
unsafe_split ...), apply_/map_/map2_, storages and set_ (NOTE [Set_]). PyTorch parity checks
skip where torch is not installed."""
import random
import warnings

import numpy as np
import pytest

import lucid
import lucid.func as F

F64 = lucid.float64


def T(a, dtype=F64, **kw):
    return lucid.tensor(np.asarray(a), dtype=dtype, **kw)


def _np(t):
    return np.asarray(t.detach().numpy())


def C(a, dtype=F64):
    """A CPU tensor, whatever the default device (apply_/map_ are CPU-only, as in PyTorch)."""
    return lucid.tensor(np.asarray(a), dtype=dtype, device="cpu")


# ------------------------------------------------------------------ Python protocols


def test_contains():
    x = lucid.tensor([[1, 2], [3, 4]])
    assert (3 in x) is True and (5 in x) is False and (2.0 in x) is True
    assert lucid.tensor([3, 9]) in x and lucid.tensor([9, 9]) not in x  # broadcast against the rows
    assert float("nan") not in lucid.tensor([float("nan")])  # nan == nan is False, as in PyTorch
    with pytest.raises(RuntimeError, match="^__contains__: .*only supports Tensor or scalar"):
        "a" in x  # noqa: B015


def test_reversed_flips_dim_0_and_differentiates():
    x = T([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], requires_grad=True)
    r = reversed(x)
    np.testing.assert_array_equal(_np(r), [[5.0, 6.0], [3.0, 4.0], [1.0, 2.0]])
    (r * T([[1.0, 0.0], [0.0, 0.0], [0.0, 10.0]])).sum().backward()
    np.testing.assert_array_equal(_np(x.grad), [[0.0, 10.0], [0.0, 0.0], [1.0, 0.0]])
    s = T(2.0)
    assert reversed(s) is s


def test_floordiv_and_mod_assignment_are_in_place():
    a = lucid.tensor([7, -7, 9])
    b = a
    b //= 2
    assert b is a and a.tolist() == [3, -4, 4] and a._version[0] == 1
    f = T([5.5, -7.0, 2.0])
    g = f
    g %= 3
    assert g is f
    np.testing.assert_allclose(_np(f), np.mod([5.5, -7.0, 2.0], 3))  # Python's (floor) modulo
    x = T([1.0, 2.0], requires_grad=True)
    y = x * 1.0
    y %= 1.5  # in a graph: the derivative of remainder is 1
    y.sum().backward()
    np.testing.assert_array_equal(_np(x.grad), [1.0, 1.0])


def test_python2_operator_names():
    a, b = T([1.0, 2.0]), T([4.0, 8.0])
    np.testing.assert_array_equal(_np(a.__div__(b)), [0.25, 0.25])
    np.testing.assert_array_equal(_np(a.__rdiv__(2.0)), [2.0, 1.0])
    c = a.clone()
    assert c.__idiv__(2.0) is c and _np(c).tolist() == [0.5, 1.0]
    assert lucid.tensor([2.7]).__long__() == 2 and lucid.tensor(0).__nonzero__() is False


def test_cuda_array_interface_only_on_cuda():
    x = lucid.zeros(2)
    if x.device.type != "cuda":
        assert not hasattr(x, "__cuda_array_interface__")
        with pytest.raises(AttributeError, match="^__cuda_array_interface__: .*non-CUDA"):
            x.__cuda_array_interface__  # noqa: B018


# --------------------------------------------------------------------------- queries


def test_device_and_kind_flags():
    x = lucid.zeros(2)
    m = lucid.zeros(2, device="meta")
    assert m.is_meta is True and x.is_meta is False
    for flag in ("is_mps", "is_xpu", "is_xla", "is_ipu", "is_mtia", "is_maia", "is_vulkan", "is_sparse",
                 "is_sparse_csr", "is_quantized", "is_nested", "is_mkldnn"):
        assert getattr(x, flag) is False and getattr(m, flag) is False, flag
    assert x.is_distributed() is False
    from lucid.ops.tensor_surface_more import strided

    assert x.layout is strided and repr(strided) == "lucid.strided"
    assert x.const_data_ptr() == x.data_ptr() and x[1:].const_data_ptr() == x.data_ptr() + 4


def test_output_nr_is_the_output_index():
    a = T([[2.0, 1.0], [1.0, 3.0]], requires_grad=True)
    q, r = lucid.linalg.qr(a)
    assert (q.output_nr, r.output_nr) == (0, 1) and q.grad_fn is r.grad_fn
    assert a.output_nr == 0 and (a * 2).output_nr == 0


def _dim_order_cases():
    z = lucid.zeros(2, 3, 5, 7)
    return [
        (z, (0, 1, 2, 3)),
        (z.transpose(1, 2), (0, 2, 1, 3)),
        (z.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2), (0, 2, 3, 1)),  # channels-last
        (lucid.zeros(3, 4).t(), (1, 0)),
        (lucid.zeros(2, 3, 4).permute(2, 0, 1), (1, 2, 0)),
        (lucid.zeros(4, 6)[:, ::2], (0, 1)),
        (lucid.zeros(5), (0,)),
        (lucid.zeros(()), ()),
    ]


def test_dim_order_values():
    for x, want in _dim_order_cases():
        assert x.dim_order() == want, (x.shape, x.stride())
        assert x.dim_order() == tuple(int(i) for i in np.argsort([-s for s in x.stride()], kind="stable")) \
            or 1 in x.shape


def test_dim_order_ambiguity_checks():
    x = lucid.zeros(1, 2, 3, 4)  # a size-1 dim: several orders fit
    assert x.dim_order() == (0, 1, 2, 3)
    with pytest.raises(RuntimeError, match="^dim_order: The tensor does not have unique dim order"):
        x.dim_order(ambiguity_check=True)
    assert x.dim_order(ambiguity_check=["contiguous_format", "channels_last"]) == (0, 1, 2, 3)
    with pytest.raises(RuntimeError, match="^dim_order: "):
        lucid.zeros(2, 1, 3, 4).dim_order(ambiguity_check=["contiguous_format", "channels_last"])  # both fit
    assert lucid.zeros(2, 3, 4).dim_order(ambiguity_check=True) == (0, 1, 2)
    with pytest.raises(TypeError, match="^dim_order: The ambiguity_check argument must be"):
        x.dim_order(ambiguity_check="ILLEGAL")
    with pytest.raises(TypeError, match="^dim_order: "):
        x.dim_order(ambiguity_check=["no_such_format"])


def test_dim_order_matches_torch():
    torch = pytest.importorskip("torch")
    rng = random.Random(0)
    checked = 0
    for _ in range(300):
        nd = rng.randint(0, 5)
        shape = tuple(rng.choice([1, 2, 3]) for _ in range(nd))
        perm = list(range(nd))
        rng.shuffle(perm)
        ops = [lambda x, p=tuple(perm): x.permute(*p)] if nd else []
        if nd and rng.random() < 0.3:
            d = rng.randrange(nd)
            ops.append(lambda x, d=d: x.narrow(d, 0, max(1, x.shape[d] - 1)))
        t, lt = torch.zeros(shape), lucid.zeros(shape)
        for op in ops:
            t, lt = op(t), op(lt)
        if t.stride() != lt.stride():  # size-1 dims may carry other strides
            continue
        for amb in (False, True, [torch.contiguous_format, torch.channels_last], [torch.channels_last]):
            lamb = amb if isinstance(amb, bool) else [str(f) for f in amb]
            outcome = []
            for fn in (lambda: t.dim_order(ambiguity_check=amb), lambda: lt.dim_order(ambiguity_check=lamb)):
                try:
                    outcome.append(tuple(fn()))
                except RuntimeError:
                    outcome.append("error")
            assert outcome[0] == outcome[1], (tuple(t.shape), t.stride(), amb)
            checked += 1
    assert checked > 800


def test_is_set_to():
    x = lucid.arange(6.0)
    assert x.is_set_to(x) and x.is_set_to(x[:]) and x[1:].is_set_to(x[1:]) and x.is_set_to(x.view(6))
    assert not x.is_set_to(x.clone()) and not x.is_set_to(x[1:]) and not x.is_set_to(x.view(2, 3))
    assert x.view(2, 3).t().is_set_to(x.view(2, 3).t()) and not x.view(2, 3).t().is_set_to(x.view(3, 2))
    assert x.is_set_to(x.view(lucid.int32))  # same storage, offset, sizes and strides: dtypes may differ
    m = lucid.zeros(2, device="meta")
    assert m.is_set_to(m) and not m.is_set_to(lucid.zeros(2, device="meta"))
    with pytest.raises(TypeError, match="^is_set_to: expected a Tensor"):
        x.is_set_to(3)


# ------------------------------------------------------------------- method forms


def test_hardshrink_and_prelu_methods_values_and_gradients():
    a = np.array([-1.2, -0.3, 0.0, 0.4, 2.0])
    x = T(a, requires_grad=True)
    y = x.hardshrink(0.35)
    np.testing.assert_array_equal(_np(y), np.where(np.abs(a) > 0.35, a, 0.0))
    y.sum().backward()
    np.testing.assert_array_equal(_np(x.grad), (np.abs(a) > 0.35).astype(float))
    np.testing.assert_array_equal(_np(T(a).hardshrink()), np.where(np.abs(a) > 0.5, a, 0.0))
    b = np.array([[-1.0, 2.0, -3.0], [4.0, -5.0, 6.0]])
    x = T(b, requires_grad=True)
    w = T([0.5], requires_grad=True)
    y = x.prelu(w)
    np.testing.assert_array_equal(_np(y), np.where(b > 0, b, 0.5 * b))
    y.sum().backward()
    np.testing.assert_array_equal(_np(x.grad), np.where(b > 0, 1.0, 0.5))
    np.testing.assert_allclose(_np(w.grad), [np.minimum(b, 0).sum()])
    xc = T(np.array([[[-2.0], [-2.0]]]))  # one weight per channel (dim 1)
    np.testing.assert_array_equal(_np(xc.prelu(T([0.1, 0.2]))), [[[-0.2], [-0.4]]])
    assert T(a, dtype=lucid.float32).hardshrink().dtype == lucid.float32
    with pytest.raises(RuntimeError, match="^prelu: "):
        T([1.0, 2.0]).prelu(T([0.1, 0.2, 0.3]))


def _householder_np(a, tau):
    m, n = a.shape
    q = np.eye(m)
    for i in range(len(tau)):
        v = np.concatenate([np.zeros(i), [1.0], a[i + 1:, i]])
        q = q @ (np.eye(m) - tau[i] * np.outer(v, v))
    return q[:, :n]


def test_orgqr_is_the_householder_product():
    a = np.array([[1.0, 0.2], [0.5, 1.0], [-0.3, 0.7]])
    tau = np.array([1.2, 0.4])
    x, t = T(a, requires_grad=True), T(tau, requires_grad=True)
    q = x.orgqr(t)
    np.testing.assert_allclose(_np(q), _householder_np(a, tau), atol=1e-12)
    np.testing.assert_allclose(_np(lucid.orgqr(x, t)), _np(lucid.linalg.householder_product(x, t)))
    assert lucid.autograd.gradcheck(lambda u, v: u.orgqr(v), (x, t))
    with pytest.raises(RuntimeError, match="^orgqr: "):
        T(np.ones((2, 3))).orgqr(T([1.0, 1.0, 1.0]))


def test_unsafe_split_chunk_and_split_with_sizes():
    x = T(np.arange(10.0).reshape(5, 2), requires_grad=True)
    parts = x.unsafe_split(2)
    assert isinstance(parts, tuple) and [p.shape for p in parts] == [(2, 2), (2, 2), (1, 2)]
    np.testing.assert_array_equal(np.concatenate([_np(p) for p in parts]), _np(x))
    assert [p.shape for p in lucid.unsafe_split(x, 1, dim=1)] == [(5, 1), (5, 1)]
    assert [p.shape for p in x.unsafe_chunk(2)] == [(3, 2), (2, 2)]
    assert [p.shape for p in lucid.unsafe_chunk(x, 3)] == [(2, 2), (2, 2), (1, 2)]
    sizes = x.unsafe_split_with_sizes([1, 4])
    assert [p.shape for p in sizes] == [(1, 2), (4, 2)]
    assert [p.shape for p in lucid.unsafe_split_with_sizes(x, (1, 1), dim=1)] == [(5, 1), (5, 1)]
    (parts[0].sum() + 3 * parts[2].sum()).backward()
    np.testing.assert_array_equal(_np(x.grad), [[1, 1], [1, 1], [0, 0], [0, 0], [3, 3]])
    y = lucid.arange(6.0)
    p = y.detach().unsafe_split(3)[1]
    assert p.data_ptr() == y.data_ptr() + 3 * 4  # views, as PyTorch's (which skips view tracking)
    with pytest.raises(TypeError, match="^unsafe_split: argument 'split_size' must be int"):
        y.unsafe_split([2, 4])
    with pytest.raises(RuntimeError, match="^unsafe_split_with_sizes: .*sum exactly to 6"):
        y.unsafe_split_with_sizes([2, 2])
    with pytest.raises(TypeError, match="^unsafe_split_with_sizes: "):
        y.unsafe_split_with_sizes(3)
    with pytest.raises(TypeError, match="^unsafe_chunk: "):
        y.unsafe_chunk(2.0)
    with pytest.raises((RuntimeError, IndexError), match="^unsafe_chunk: "):
        y.unsafe_chunk(2, dim=3)


def test_unsafe_functions_match_torch():
    torch = pytest.importorskip("torch")
    a = np.arange(14.0).reshape(7, 2)
    for name, args in (("unsafe_split", (3,)), ("unsafe_chunk", (3,)), ("unsafe_split_with_sizes", ([2, 5],))):
        got = getattr(lucid, name)(T(a), *args)
        want = getattr(torch, name)(torch.tensor(a), *args)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(_np(g), w.numpy())


def test_to_dense_and_module_load():
    x = lucid.ones(2)
    assert x.to_dense() is x and x.to_dense(x.dtype) is x
    y = x.to_dense(F64)
    assert y.dtype == F64 and _np(y).tolist() == [1.0, 1.0]
    p = lucid.zeros(3)
    new = T([1.0, 2.0, 3.0], requires_grad=True)
    out = p.module_load(new)
    assert out is not p and out is not new and not out.requires_grad and out.dtype == lucid.float32
    assert _np(p).tolist() == [1.0, 2.0, 3.0] and out.data_ptr() == p.data_ptr()
    out = p.module_load(new, assign=True)
    assert out.dtype == F64 and out.data_ptr() == new.data_ptr() and out.grad_fn is None
    with pytest.raises(TypeError, match="^module_load: expected a Tensor"):
        p.module_load([1.0, 2.0, 3.0])
    with pytest.raises(RuntimeError):
        p.module_load(lucid.ones(4))


def test_new_empty_strided():
    x = lucid.zeros(3, dtype=F64)
    y = x.new_empty_strided((2, 3), (1, 2))
    assert y.shape == (2, 3) and y.stride() == (1, 2) and y.dtype == F64 and y.device == x.device
    z = x.new_empty_strided((2,), (1,), dtype=lucid.int32, requires_grad=False)
    assert z.dtype == lucid.int32 and not z.requires_grad
    assert x.new_empty_strided((2,), (1,), requires_grad=True).requires_grad
    assert x.new_empty_strided((2,), (1,), device="meta").is_meta
    with pytest.raises((RuntimeError, ValueError, TypeError), match="^new_empty_strided: "):
        x.new_empty_strided((2, 3), (1,))


def test_new_every_form():
    x = lucid.tensor([1, 2])
    e = x.new()
    assert e.shape == (0,) and e.dtype == lucid.int64 and e.device == x.device
    s = x.new(2, 3)
    assert s.shape == (2, 3) and s.dtype == lucid.int64 and s.device == x.device
    assert x.new(lucid.Size([4])).shape == (4,) and x.new(3).shape == (3,)
    assert x.new((2, 3)).tolist() == [2, 3]  # a tuple is data, as in PyTorch
    assert x.new([1.5, 2.7]).tolist() == [1, 2] and x.new([[1], [2]]).shape == (2, 1)
    f = T([1.0, 2.0])
    assert f.new(np.array([3, 4])).dtype == F64
    assert f.new(2, device="meta").is_meta and f.new([1.0], device="cpu").device.type == "cpu"
    for bad in (2.5, True, "ab"):
        with pytest.raises(TypeError, match="^new: data must be a sequence"):
            f.new(bad)
    with pytest.raises(RuntimeError, match="^new: .*negative"):
        f.new(-1)
    with pytest.raises(TypeError, match="^new: "):
        f.new(2, 3.0)
    with pytest.raises(TypeError, match="^new: expected a tensor of dtype"):
        f.new(lucid.tensor([1, 2]))


def test_new_of_a_tensor_is_an_alias():
    x = T([1.0, 2.0, 3.0], requires_grad=True)
    y = x.new(x)
    assert y is not x and y.data_ptr() == x.data_ptr() and y._version is x._version and y.requires_grad
    (y * T([1.0, 2.0, 3.0])).sum().backward()
    np.testing.assert_array_equal(_np(x.grad), [1.0, 2.0, 3.0])
    z = lucid.zeros(2, dtype=F64)
    a = z.new(z)
    a[0] = 5.0
    assert _np(z).tolist() == [5.0, 0.0] and z._version[0] == 1


def test_as_subclass():
    class _Tagged(lucid.Tensor):  # defined here: a Tensor subclass switches __torch_function__ on
        def tag(self):
            return "tagged"

    x = T([1.0, -2.0], requires_grad=True)
    y = x.as_subclass(_Tagged)
    assert type(y) is _Tagged and y.tag() == "tagged" and y.data_ptr() == x.data_ptr() and y.requires_grad
    (y * y).sum().backward()  # still attached to x's graph
    np.testing.assert_array_equal(_np(x.grad), [2.0, -4.0])
    p = lucid.zeros(2).as_subclass(lucid.nn.Parameter)
    assert isinstance(p, lucid.nn.Parameter) and not p.requires_grad and repr(p).startswith("Parameter containing")
    assert type(lucid.zeros(1).as_subclass(lucid.Tensor)) is lucid.Tensor
    with pytest.raises(TypeError, match="^as_subclass: Creating a Tensor subclass from a class that does not"):
        x.as_subclass(int)
    with pytest.raises(RuntimeError, match="^as_subclass: "):
        F.vmap(lambda t: t.as_subclass(_Tagged))(lucid.zeros(2, 2))


def test_resize_and_resize_as_out_of_place():
    x = T(np.arange(6.0), requires_grad=True)
    with pytest.warns(UserWarning, match="^resize: non-inplace resize is deprecated"):
        y = x.resize(2, 3)
    assert y.shape == (2, 3) and y.data_ptr() == x.data_ptr() and x.shape == (6,)
    (y * T(np.arange(6.0).reshape(2, 3))).sum().backward()
    np.testing.assert_array_equal(_np(x.grad), np.arange(6.0))
    with pytest.warns(UserWarning, match="^resize_as: "):
        z = x.detach().resize_as(lucid.zeros(3, 2))
    assert z.shape == (3, 2)
    with pytest.warns(UserWarning):
        same = x.resize(6)
    assert same is not x and same.data_ptr() == x.data_ptr()
    t = T(np.arange(6.0).reshape(2, 3)).t()  # not contiguous: a row-major copy
    with pytest.warns(UserWarning):
        r = t.resize((6,))
    assert _np(r).tolist() == [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]
    with pytest.warns(UserWarning), pytest.raises(RuntimeError, match=r"^resize: requested resize to 4 \(4 elem"):
        x.resize(4)
    with pytest.warns(UserWarning), pytest.raises(TypeError, match="^resize_as: expected a Tensor"):
        x.resize_as((2, 3))


def test_removed_linear_algebra_methods_say_what_replaces_them():
    a = T(np.eye(2))
    for name, hint in (("eig", "lucid.linalg.eig"), ("symeig", "lucid.linalg.eigh"), ("solve", "lucid.linalg.solve"),
                       ("lstsq", "lucid.linalg.lstsq")):
        with pytest.raises(RuntimeError, match=f"^{name}: This function was deprecated") as info:
            getattr(a, name)(a) if name in ("solve", "lstsq") else getattr(a, name)()
        assert hint in str(info.value)


# ------------------------------------------------- Python callables on each element


def test_apply_values_order_and_version():
    x = C([[1.0, 2.0], [3.0, 4.0]])
    seen = []
    assert x.apply_(lambda v: seen.append(v) or v * v + 1) is x
    assert seen == [1.0, 2.0, 3.0, 4.0] and all(type(v) is float for v in seen)
    np.testing.assert_array_equal(_np(x), [[2.0, 5.0], [10.0, 17.0]])
    assert x._version[0] == 1
    i = lucid.tensor([[1, 2], [3, 4]], device="cpu").t()  # logical row-major order, written through strides
    counter = iter(range(10))
    i.apply_(lambda v: next(counter))
    assert i.tolist() == [[0, 1], [2, 3]]
    base = C(np.arange(6.0))
    base[1:4].apply_(lambda v: -v)  # writes into the base's memory; one version for both
    assert _np(base).tolist() == [0.0, -1.0, -2.0, -3.0, 4.0, 5.0] and base._version[0] == 1
    assert C(5.0).apply_(lambda v: v + 1).item() == 6.0 and C([]).apply_(lambda v: 1 / 0).shape == (0,)


def test_apply_conversions_as_pytorch():
    assert lucid.tensor([1, 2, 3], device="cpu").apply_(lambda v: v * 2.7).tolist() == [2, 5, 8]  # truncated
    assert lucid.tensor([1], device="cpu").apply_(lambda v: -3.9).tolist() == [-3]
    assert lucid.tensor([1], dtype=lucid.uint8, device="cpu").apply_(lambda v: -1).tolist() == [255]
    assert lucid.tensor([True, False], device="cpu").apply_(lambda v: not v).tolist() == [False, True]
    assert lucid.tensor([True], device="cpu").apply_(lambda v: 0.5).tolist() == [True]
    assert lucid.tensor([1j], device="cpu").apply_(lambda v: 2).tolist() == [2 + 0j]
    assert C([1.0]).apply_(lambda v: True).tolist() == [1.0]
    assert C([1.0]).apply_(lambda v: lucid.tensor(3.5)).tolist() == [3.5]
    assert C([1.0]).apply_(lambda v: np.float32(2.5)).tolist() == [2.5]
    x = C([1.0, 2.0])
    with pytest.raises(TypeError, match="^apply_: must be real number, not str"):
        x.apply_(lambda v: "2")
    assert _np(x).tolist() == [1.0, 2.0]  # nothing written when the callable fails
    with pytest.raises(TypeError, match="^apply_: must be real number, not complex"):
        x.apply_(lambda v: 1j)
    with pytest.raises(TypeError, match="^apply_: "):
        lucid.tensor([1], device="cpu").apply_(lambda v: None)
    with pytest.raises(RuntimeError, match="^apply_: value cannot be converted to type lucid.int8 without overflow"):
        lucid.tensor([1], dtype=lucid.int8, device="cpu").apply_(lambda v: 300)
    with pytest.raises(RuntimeError, match="^apply_: value cannot be converted to type lucid.int64"):
        lucid.tensor([1], device="cpu").apply_(lambda v: float("nan"))
    with pytest.raises(RuntimeError, match="^apply_: value cannot be converted to type lucid.uint8"):
        lucid.tensor([1], dtype=lucid.uint8, device="cpu").apply_(lambda v: 256)


def test_apply_matches_torch():
    torch = pytest.importorskip("torch")
    cases = [([1.5, -2.0, 3.25], "float64", lambda v: v * v - 1), ([1, 2, 3], "int64", lambda v: v * 2.7),
             ([1, 200, 7], "uint8", lambda v: -v), ([True, False], "bool", lambda v: 3 if v else 0),
             ([1 + 1j, 2j], "complex128", lambda v: v.conjugate() * 2)]
    for data, dt, fn in cases:
        got = lucid.tensor(data, dtype=getattr(lucid, dt), device="cpu").apply_(fn)
        want = torch.tensor(data, dtype=getattr(torch, dt)).apply_(fn)
        assert got.tolist() == want.tolist(), dt


def test_map_and_map2():
    x = C(np.zeros((2, 3)))
    assert x.map_(C([1.0, 2.0, 3.0]), lambda a, b: a + 10 * b) is x
    np.testing.assert_array_equal(_np(x), [[10.0, 20.0, 30.0]] * 2)
    y = C([1.0, 2.0])
    y.map_(C([[5.0], [7.0]])[:, 0], lambda a, b: a * b)
    assert _np(y).tolist() == [5.0, 14.0] and y._version[0] == 1
    z = C(np.ones((2, 2)))
    z.map2_(C([1.0, 2.0]), C([[10.0], [100.0]]), lambda a, b, c: a + b * c)
    np.testing.assert_array_equal(_np(z), [[11.0, 21.0], [101.0, 201.0]])
    with pytest.raises(RuntimeError, match="^map_: .*do not broadcast"):
        C(np.zeros(2)).map_(C(np.zeros(3)), lambda a, b: a)
    with pytest.raises(RuntimeError, match="^map_: "):
        C(np.zeros(3)).map_(C(np.zeros((2, 3))), lambda a, b: a)  # only the other operand broadcasts
    with pytest.raises(TypeError, match="^map_: expected lucid.float64 on cpu for argument 'tensor'"):
        C(np.zeros(2)).map_(lucid.tensor([1, 2], device="cpu"), lambda a, b: a)
    with pytest.raises(TypeError, match="^map2_: expected lucid.float64 on cpu for argument 'y'"):
        C(np.zeros(2)).map2_(C(np.zeros(2)), lucid.tensor([1, 2], device="cpu"), lambda a, b, c: a)
    with pytest.raises(TypeError, match="^map_: argument 'tensor' must be Tensor, not float"):
        C(np.zeros(2)).map_(2.0, lambda a, b: a)
    with pytest.raises(TypeError, match="^map2_: argument 'y' must be Tensor, not int"):
        C(np.zeros(2)).map2_(C(np.zeros(2)), 3, lambda a, b, c: a)
    with pytest.raises(TypeError, match="^map_: the callable argument must be callable"):
        C(np.zeros(2)).map_(C(np.zeros(2)), 3)


def test_map_matches_torch():
    torch = pytest.importorskip("torch")
    a, b, c = np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([0.5, -1.0]), np.array([[2.0], [3.0]])
    got = C(a).map2_(C(b), C(c), lambda p, q, r: p * q + r)
    want = torch.tensor(a).map2_(torch.tensor(b), torch.tensor(c), lambda p, q, r: p * q + r)
    np.testing.assert_array_equal(_np(got), want.numpy())


def test_apply_refusals():
    for name, call in (("apply_", lambda t, o: t.apply_(lambda v: v)),
                       ("map_", lambda t, o: t.map_(o, lambda a, b: a)),
                       ("map2_", lambda t, o: t.map2_(o, o, lambda a, b, c: a))):
        leaf = C([1.0, 2.0])
        leaf.requires_grad_()
        with pytest.raises(RuntimeError, match=f"^{name}: Can't call {name}\\(\\) on a tensor that requires grad"):
            call(leaf, C([1.0, 2.0]))
        with lucid.no_grad(), pytest.raises(RuntimeError, match=f"^{name}: Can't call"):
            call(leaf, C([1.0, 2.0]))
        if name != "apply_":
            with pytest.raises(RuntimeError, match=f"^{name}: Can't call"):
                call(C([1.0, 2.0]), leaf)
        with pytest.raises(RuntimeError, match=f"^{name}: .*read-only"):
            call(C([1.0]).expand(3), C([1.0, 2.0, 3.0]))
        m = lucid.zeros(2, dtype=F64, device="meta")
        assert call(m, lucid.zeros(2, dtype=F64, device="meta")) is m  # skipped, as PyTorch
        with pytest.raises(RuntimeError, match=f"^{name}: .*active transform"):
            F.vmap(lambda t: call(t, t))(C(np.zeros((2, 2))))


def test_apply_is_cpu_only():
    from lucid.testing import strict_device

    strict_device.enable()
    d = lucid.zeros(2, dtype=F64, device="strict")
    with pytest.raises(TypeError, match="^apply_ is only implemented on CPU tensors"):
        d.apply_(lambda v: v)
    with pytest.raises(TypeError, match="^map_ is only implemented on CPU tensors"):
        d.map_(d, lambda a, b: a)
    with pytest.raises(TypeError, match="^map2_ is only implemented on CPU tensors"):
        C([0.0, 0.0]).map2_(d, d, lambda a, b, c: a)
    with pytest.raises(TypeError, match="^map_: expected lucid.float64 on cpu"):
        C([0.0, 0.0]).map_(d, lambda a, b: a)


# ---------------------------------------------------------------------------- storages


def test_untyped_storage():
    x = lucid.arange(6, dtype=lucid.int32)
    s = x.view(2, 3).t()[1:].untyped_storage()
    assert s.nbytes() == s.size() == len(s) == 24 and s.element_size() == 1 and s.data_ptr() == x.data_ptr()
    assert s == x.untyped_storage() and hash(s) == hash(x.untyped_storage()) and s.untyped() is s
    assert s != x.clone().untyped_storage() and s.device == x.device
    assert s.tolist() == list(np.arange(6, dtype=np.int32).tobytes()) and s[4] == 1
    assert repr(s).startswith("lucid.UntypedStorage(device=") and repr(s).endswith("of size 24")
    with pytest.raises(TypeError, match="^UntypedStorage: index must be an int"):
        s[1:2]
    with pytest.raises(NotImplementedError, match="^UntypedStorage: a meta tensor's storage"):
        lucid.zeros(2, device="meta").untyped_storage().nbytes()


def test_typed_storage_warns_and_counts_elements():
    y = T([1.5, 2.5, 3.5, 4.5])
    with pytest.warns(UserWarning, match="^storage: TypedStorage is deprecated"):
        s = y[2:].storage()
    assert s.dtype == F64 and s.size() == len(s) == 4 and s.element_size() == 8 and s.nbytes() == 32
    assert s.tolist() == [1.5, 2.5, 3.5, 4.5] and s[3] == 4.5 and s.data_ptr() == y.data_ptr()
    with pytest.warns(UserWarning):
        assert s.untyped() == y.untyped_storage() and s != y.view(lucid.int64).storage()


def test_storages_match_torch():
    torch = pytest.importorskip("torch")
    a = np.arange(5, dtype=np.float32)
    t, x = torch.tensor(a), lucid.tensor(a, device="cpu")
    assert x[2:].untyped_storage().tolist() == t[2:].untyped_storage().tolist()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert x[1:].storage().tolist() == t[1:].storage().tolist()
        assert x.storage().size() == t.storage().size()


# ------------------------------------------------------------------------------- set_


def test_set_to_a_tensor_shares_its_memory():
    y = T(np.arange(6.0))
    x = T([0.0, 0.0])
    v = x[1:]  # a view of x's old memory
    assert x.set_(y[2:]) is x
    assert x.shape == (4,) and x.storage_offset() == 2 and x.is_set_to(y[2:]) and x._base is y
    assert _np(v).tolist() == [0.0] and v._base is not x  # x's old views keep the old memory
    x[0] = 9.0
    assert _np(y).tolist() == [0.0, 1.0, 9.0, 3.0, 4.0, 5.0]
    assert x._version[0] == 2 and y._version[0] == 0  # x's own counter, as in PyTorch


def test_set_with_a_geometry_and_from_storages():
    y = T(np.arange(6.0))
    x = T([0.0])
    x.set_(y, 1, (2, 2))
    assert _np(x).tolist() == [[1.0, 2.0], [3.0, 4.0]] and x.stride() == (2, 1)
    x.set_(y, 0, (2, 3), (1, 2))
    assert _np(x).tolist() == [[0.0, 2.0, 4.0], [1.0, 3.0, 5.0]]
    z = T([0.0])
    z.set_(y.untyped_storage(), 3, (3,))
    assert _np(z).tolist() == [3.0, 4.0, 5.0] and z._base is y
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        z.set_(y.storage())
    assert _np(z).tolist() == list(np.arange(6.0))
    i = lucid.zeros(1, dtype=lucid.int32)
    i.set_(lucid.tensor([1.0], dtype=lucid.float32).untyped_storage(), 0, (1,))  # bytes reinterpreted
    assert i.tolist() == [np.float32(1.0).view(np.int32)]
    e = T([1.0, 2.0])
    e.set_()
    assert e.shape == (0,) and e.dtype == F64 and e._base is None


def test_set_to_its_own_view():
    b = T(np.arange(5.0))
    bv = b[2:]
    b.set_(bv)
    assert _np(b).tolist() == [2.0, 3.0, 4.0] and b._base is bv._base and b._base is not b


def test_set_then_in_place_in_a_graph_reaches_the_source():
    y = lucid.zeros(4, dtype=F64)
    x = lucid.zeros(1, dtype=F64)
    x.set_(y, 1, (2,))
    w = T([2.0, 3.0], requires_grad=True)
    x.add_(w * w)
    np.testing.assert_array_equal(_np(y), [0.0, 4.0, 9.0, 0.0])
    (y * T([1.0, 10.0, 100.0, 1000.0])).sum().backward()
    np.testing.assert_array_equal(_np(w.grad), [40.0, 600.0])


def test_set_refusals():
    y = lucid.ones(3)
    with pytest.raises(RuntimeError, match="^set_: a leaf Variable that requires grad"):
        lucid.zeros(2, requires_grad=True).set_(y)
    with pytest.raises(RuntimeError, match="^set_: not differentiable"):
        lucid.zeros(2).set_(lucid.ones(2, requires_grad=True))
    h = lucid.zeros(2, requires_grad=True) * 2
    with lucid.no_grad():
        p = lucid.zeros(2, requires_grad=True)
        p.set_(y)
        assert p.requires_grad and p.shape == (3,)
        with pytest.raises(RuntimeError, match="^set_: can't change the storage of a tensor that has autograd"):
            h.set_(y)
    with pytest.raises(RuntimeError, match="^set_: Could not set a tensor of type lucid.int64"):
        lucid.zeros(2).set_(lucid.ones(2, dtype=lucid.int64))
    with pytest.raises(TypeError, match="^set_: expected a Tensor or a storage"):
        lucid.zeros(2).set_(3)
    with pytest.raises(TypeError, match="^set_: a storage_offset needs a size"):
        lucid.zeros(2).set_(y, 1)
    with pytest.raises(RuntimeError, match="^set_: setStorage: .*out of bounds"):
        lucid.zeros(2).set_(y, 1, (3,))
    with pytest.raises(RuntimeError, match="^set_: .*active transform"):
        F.vmap(lambda t: t.set_(lucid.ones(3)))(lucid.zeros(2, 3))
    x = lucid.zeros(2)
    before = x._data
    with pytest.raises(RuntimeError):
        x.set_(y, 5, (2,))
    assert x._data is before and x._version[0] == 0


def test_set_matches_torch():
    torch = pytest.importorskip("torch")
    a = np.arange(8.0)
    tx, ty = torch.zeros(1, dtype=torch.float64), torch.tensor(a)
    lx, ly = lucid.zeros(1, dtype=F64, device="cpu"), lucid.tensor(a, device="cpu")
    tx.set_(ty, 2, (2, 3), (3, 1))
    lx.set_(ly, 2, (2, 3), (3, 1))
    np.testing.assert_array_equal(_np(lx), tx.numpy())
    assert lx.stride() == tx.stride() and lx.storage_offset() == tx.storage_offset()
    tx.set_(ty[3:])
    lx.set_(ly[3:])
    np.testing.assert_array_equal(_np(lx), tx.numpy())
    assert lx.storage_offset() == tx.storage_offset() and (lx._version[0] > 0) == (tx._version > 0)
