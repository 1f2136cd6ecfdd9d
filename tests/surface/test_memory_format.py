"""Memory formats (lucid/ops/memory_format.py, NOTE [Memory formats]): the ``lucid.memory_format``
values, ``contiguous``/``is_contiguous``/``clone``/``*_like``/``empty``/``to`` with
``memory_format=``, ``Module.to`` and ``nn.utils.convert_conv{2,3}d_weight_memory_format``.

Strides are checked against values computed by hand; the PyTorch parity tests skip without torch.
"""
import copy
import itertools
import pickle

import numpy as np
import pytest

import lucid
import lucid.nn as nn
import lucid.nn.functional as F
from lucid.autograd import gradcheck, gradgradcheck
from lucid.testing import strict_device

CL, CL3, CF, PF = lucid.channels_last, lucid.channels_last_3d, lucid.contiguous_format, lucid.preserve_format


def host(t):
    return t.detach().cpu().numpy()


def nhwc(*shape, dtype=lucid.float64):
    """A channels-last tensor with values 0, 1, 2 ... in NCHW order, made without memory_format."""
    n, c, h, w = shape
    return lucid.arange(float(np.prod(shape)), dtype=dtype).reshape(shape).permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)


# ------------------------------------------------------------------------------ the type


def test_values_are_singletons_with_lucid_names():
    names = ["contiguous_format", "channels_last", "channels_last_3d", "preserve_format"]
    assert [repr(getattr(lucid, n)) for n in names] == [f"lucid.{n}" for n in names]
    assert str(CL) == "lucid.channels_last"
    assert lucid.legacy_contiguous_format is CF
    assert len({id(getattr(lucid, n)) for n in names}) == 4
    for f in (CF, CL, CL3, PF):
        assert isinstance(f, lucid.memory_format)
        assert pickle.loads(pickle.dumps(f)) is f
        assert copy.copy(f) is f and copy.deepcopy(f) is f
        assert f == f and hash(f) == hash(f)
    assert CL != CF


def test_no_new_instances_and_read_only():
    with pytest.raises(TypeError, match="cannot create 'lucid.memory_format' instances"):
        lucid.memory_format()
    with pytest.raises(AttributeError):
        CL.name = "other"


def test_repr_matches_torch():
    torch = pytest.importorskip("torch")
    for n in ["contiguous_format", "channels_last", "channels_last_3d", "preserve_format", "legacy_contiguous_format"]:
        assert repr(getattr(lucid, n)) == repr(getattr(torch, n)).replace("torch.", "lucid.")


def test_a_torch_memory_format_is_read_by_name():
    torch = pytest.importorskip("torch")
    x = lucid.zeros(2, 3, 4, 5)
    assert x.contiguous(memory_format=torch.channels_last).stride() == (60, 1, 15, 3)
    assert x.is_contiguous(memory_format=torch.channels_last) is False


def test_a_string_or_int_is_refused():
    x = lucid.zeros(2, 3, 4, 5)
    with pytest.raises(TypeError, match=r"^contiguous: argument 'memory_format' must be lucid.memory_format, not str"):
        x.contiguous(memory_format="channels_last")
    with pytest.raises(TypeError, match=r"^clone: .*not int"):
        x.clone(memory_format=1)
    with pytest.raises(TypeError, match=r"^is_contiguous: "):
        x.is_contiguous(memory_format="channels_last")
    with pytest.raises(TypeError, match=r"^to: "):
        x.to(memory_format="channels_last")


# ------------------------------------------------------------------------------ strides by hand


def test_contiguous_channels_last_strides_and_values():
    x = lucid.arange(120.0).reshape(2, 3, 4, 5)
    y = x.contiguous(memory_format=CL)
    assert y.stride() == (60, 1, 15, 3)  # C innermost, then W (3 channels), H (5*3), N (4*5*3)
    assert np.array_equal(host(y), host(x))
    assert y.is_contiguous(memory_format=CL) and not y.is_contiguous()
    assert y.contiguous(memory_format=CL) is y
    z = y.contiguous()
    assert z.stride() == (60, 20, 5, 1) and np.array_equal(host(z), host(x))
    assert x.contiguous(memory_format=CF) is x


def test_channels_last_strides_with_size_one_dims():
    # c10's get_channels_last_strides_2d: C=1, W=C, H=W*C, N=H*W*C (no max(size, 1))
    for shape, want in [((2, 3, 1, 1), (3, 1, 3, 3)), ((1, 3, 4, 5), (60, 1, 15, 3)),
                        ((2, 3, 1, 4), (12, 1, 12, 3)), ((2, 3, 4, 1), (12, 1, 3, 3))]:
        assert lucid.zeros(*shape).clone(memory_format=CL).stride() == want, shape
        assert lucid.empty(*shape, memory_format=CL).stride() == want, shape
    # a default tensor with C == 1 (or H == W == 1) already is channels-last contiguous
    for shape in [(2, 1, 3, 3), (2, 3, 1, 1), (1, 1, 1, 1)]:
        x = lucid.zeros(*shape)
        assert x.is_contiguous() and x.is_contiguous(memory_format=CL), shape
        assert x.contiguous(memory_format=CL) is x
    assert lucid.zeros(2, 1, 3, 3).clone(memory_format=CL).stride() == (9, 1, 3, 1)
    # an empty dim zeroes every stride outside it (the same formula)
    assert lucid.zeros(2, 0, 3, 3).contiguous(memory_format=CL).stride() == (0, 1, 0, 0)
    assert lucid.empty(2, 3, 0, 1, memory_format=CL).stride() == (0, 1, 3, 3)
    assert lucid.zeros_like(lucid.zeros(0, 3, 2, 2), memory_format=CL).stride() == (12, 1, 6, 3)


def test_channels_last_3d_strides():
    x = lucid.arange(720.0).reshape(2, 3, 4, 5, 6)
    y = x.contiguous(memory_format=CL3)
    assert y.stride() == (360, 1, 90, 18, 3)
    assert np.array_equal(host(y), host(x))
    assert y.is_contiguous(memory_format=CL3) and not y.is_contiguous(memory_format=CL)
    assert not x.is_contiguous(memory_format=CL3)


def test_wrong_rank_raises_like_torch():
    for fn in (lambda t, f: t.contiguous(memory_format=f), lambda t, f: t.clone(memory_format=f),
               lambda t, f: t.to(memory_format=f), lambda t, f: lucid.zeros_like(t, memory_format=f)):
        for shape in [(2, 3), (2, 3, 4), (2, 3, 4, 5, 6)]:
            with pytest.raises(RuntimeError, match="required rank 4 tensor to use channels_last format"):
                fn(lucid.zeros(*shape), CL)
        with pytest.raises(RuntimeError, match="required rank 5 tensor to use channels_last_3d format"):
            fn(lucid.zeros(2, 3, 4, 5), CL3)
    with pytest.raises(RuntimeError, match="^contiguous: required rank 4"):
        lucid.zeros(2, 3).contiguous(memory_format=CL)
    with pytest.raises(RuntimeError, match="^empty: required rank 4"):
        lucid.empty(2, 3, memory_format=CL)
    # a rank-3 tensor is never channels-last contiguous (no error from the query)
    assert lucid.zeros(2, 3, 4).is_contiguous(memory_format=CL) is False


def test_preserve_format_in_contiguous_and_empty():
    x = lucid.zeros(2, 3)
    assert x.contiguous(memory_format=PF) is x
    with pytest.raises(RuntimeError, match="^contiguous: preserve memory format is unsupported"):
        x.t().contiguous(memory_format=PF)
    with pytest.raises(RuntimeError, match="^empty: unsupported memory format Preserve"):
        lucid.empty(2, 3, memory_format=PF)
    assert x.t().is_contiguous(memory_format=PF) is False and x.is_contiguous(memory_format=PF) is True


def test_is_contiguous_by_hand():
    # (shape, stride, contiguous, channels_last)
    cases = [((2, 3, 4, 5), (60, 20, 5, 1), True, False),
             ((2, 3, 4, 5), (60, 1, 15, 3), False, True),
             ((2, 3, 4, 5), (120, 1, 30, 3), False, False),  # a gap below N: dense from the inside fails
             ((2, 1, 4, 5), (20, 20, 5, 1), True, True),     # C == 1: both
             ((2, 1, 4, 5), (20, 7, 5, 1), True, True),      # a size-1 dim's stride is ignored
             ((2, 3, 1, 1), (3, 1, 1, 1), True, True),       # H == W == 1
             ((1, 3, 4, 5), (999, 1, 15, 3), False, True),   # N == 1
             ((2, 3, 4, 5), (60, 20, 1, 4), False, False)]   # H, W swapped
    for shape, stride, c, cl in cases:
        t = lucid.empty_strided(shape, stride)
        assert (t.is_contiguous(), t.is_contiguous(memory_format=CL), t.is_contiguous(memory_format=CF)) == (c, cl, c), \
            (shape, stride)


def test_clone_preserve_format_by_hand():
    x = lucid.zeros(2, 3, 4)
    assert x.transpose(0, 2).clone(memory_format=PF).stride() == (1, 4, 12)      # dense: same strides
    assert x[:, :, ::2].clone(memory_format=PF).stride() == (6, 2, 1)            # gaps: dense, same order
    assert x[:, :, ::2].transpose(0, 2).clone(memory_format=PF).stride() == (1, 2, 6)
    assert x.transpose(0, 2).clone().stride() == (6, 2, 1)                       # None: row-major
    assert lucid.zeros(3).expand(2, 3).clone(memory_format=PF).stride() == (3, 1)  # overlapping: row-major
    y = nhwc(2, 3, 4, 5)
    assert y.clone(memory_format=PF).stride() == (60, 1, 15, 3)
    assert y[:, :, ::2].clone(memory_format=PF).stride() == (30, 1, 15, 3)


def test_like_functions_preserve_by_default():
    y = nhwc(2, 3, 4, 5)
    for fn in (lucid.empty_like, lucid.zeros_like, lucid.ones_like, lambda t, **k: lucid.full_like(t, 7.0, **k)):
        assert fn(y).stride() == (60, 1, 15, 3)
        assert fn(y, memory_format=CF).stride() == (60, 20, 5, 1)
        assert fn(lucid.zeros(2, 3, 4, 5), memory_format=CL).stride() == (60, 1, 15, 3)
        assert fn(lucid.zeros(2, 3).t()).stride() == (1, 3)
        assert fn(lucid.zeros(2, 3), dtype=lucid.int32).stride() == (3, 1)
    assert np.all(host(lucid.full_like(y, 7.0)) == 7.0) and np.all(host(lucid.ones_like(y, memory_format=CL)) == 1)
    assert lucid.zeros_like(y, dtype=lucid.float32).stride() == (60, 1, 15, 3)


def test_to_memory_format_aliases_as_torch():
    x = lucid.zeros(2, 3, 4, 5)
    y = x.to(memory_format=CL)
    assert y.stride() == (60, 1, 15, 3) and y is not x
    assert y.to(memory_format=CL) is y and x.to(memory_format=CF) is x and x.to(memory_format=PF) is x
    t = x.transpose(1, 2)  # strides that suggest contiguous_format: returned as it is (as PyTorch)
    assert t.to(memory_format=CF) is t
    assert y.to(memory_format=CF).stride() == (60, 20, 5, 1)
    assert y.to(memory_format=CL, copy=True) is not y
    assert t.to(memory_format=PF, copy=True).stride() == (60, 5, 20, 1)
    z = x.to(lucid.float64, memory_format=CL)
    assert z.dtype == lucid.float64 and z.stride() == (60, 1, 15, 3)


def test_dim_order_agrees_with_formats():
    y = nhwc(2, 3, 4, 5)
    assert y.dim_order() == (0, 2, 3, 1)
    assert y.dim_order(ambiguity_check=[CL, CF]) == (0, 2, 3, 1)
    assert lucid.zeros(2, 3, 4, 5, 6).contiguous(memory_format=CL3).dim_order() == (0, 2, 3, 4, 1)
    with pytest.raises(RuntimeError, match="does not have unique dim order"):
        lucid.zeros(2, 1, 4, 5).dim_order(ambiguity_check=[CL, CF])
    assert lucid.zeros(2, 3, 4, 5).dim_order(ambiguity_check=[PF]) == (0, 1, 2, 3)


# ------------------------------------------------------------------------------ gradients


def test_copies_are_differentiable():
    x = lucid.randn(2, 3, 2, 2, dtype=lucid.float64, requires_grad=True)
    assert gradcheck(lambda t: t.contiguous(memory_format=CL), (x,))
    assert gradgradcheck(lambda t: t.clone(memory_format=CL) * t, (x,))
    assert gradcheck(lambda t: t.transpose(1, 3).clone(memory_format=PF), (x,))
    assert gradcheck(lambda t: t.to(memory_format=CL), (x,))
    x5 = lucid.randn(1, 2, 2, 1, 2, dtype=lucid.float64, requires_grad=True)
    assert gradcheck(lambda t: t.contiguous(memory_format=CL3), (x5,))
    w = lucid.arange(24.0, dtype=lucid.float64).reshape(2, 3, 2, 2)
    (x.contiguous(memory_format=CL) * w).sum().backward()
    assert np.array_equal(host(x.grad), host(w))


def test_under_vmap_and_grad():
    xs = lucid.randn(3, 2, 3, 2, 2, dtype=lucid.float64)
    out = lucid.vmap(lambda t: t.contiguous(memory_format=CL) * 2)(xs)
    assert np.allclose(host(out), 2 * host(xs))
    g = lucid.func.grad(lambda t: (t.clone(memory_format=CL) ** 2).sum())(xs[0])
    assert np.allclose(host(g), 2 * host(xs[0]))


# ------------------------------------------------------------------------------ ops on channels-last input


def test_ops_on_channels_last_input_give_the_same_values():
    x = lucid.randn(2, 3, 5, 4, dtype=lucid.float64)
    y = x.contiguous(memory_format=CL)
    w = lucid.randn(4, 3, 3, 3, dtype=lucid.float64)
    b = lucid.randn(4, dtype=lucid.float64)
    checks = [lambda a: F.relu(a), lambda a: a + 1, lambda a: a * a, lambda a: a + x, lambda a: a.sum(1),
              lambda a: F.conv2d(a, w, b, padding=1), lambda a: F.max_pool2d(a, 2), lambda a: F.avg_pool2d(a, 2),
              lambda a: F.batch_norm(a, None, None, training=True), lambda a: a.softmax(1),
              lambda a: a.reshape(2, -1), lambda a: a.flatten(1) @ lucid.ones(60, 2, dtype=lucid.float64)]
    for f in checks:
        np.testing.assert_allclose(host(f(y)), host(f(x)), rtol=1e-12, atol=1e-12)
    # elementwise ops keep a lone channels-last operand's layout (NumPy's K order)
    assert F.relu(y).stride() == (60, 1, 12, 3) and (y + 1).stride() == (60, 1, 12, 3)
    # and the gradient through a conv on channels-last input is the same
    gx = lucid.func.grad(lambda a: F.conv2d(a.contiguous(memory_format=CL), w).square().sum())(x)
    gy = lucid.func.grad(lambda a: F.conv2d(a, w).square().sum())(x)
    np.testing.assert_allclose(host(gx), host(gy), rtol=1e-12)


# ------------------------------------------------------------------------------ modules


def test_module_to_lays_out_4d_tensors():
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Linear(3, 2))
    w = net[0].weight
    before = host(w)
    w.grad = lucid.ones(4, 3, 3, 3)
    assert net.to(memory_format=CL) is net
    assert net[0].weight is w and w.stride() == (27, 1, 9, 3) and np.array_equal(host(w), before)
    assert w.grad.stride() == (27, 1, 9, 3)
    assert net[2].weight.stride() == (3, 1) and net[1].running_mean.stride() == (1,)
    net.to(memory_format=CF)
    assert w.stride() == (27, 9, 3, 1) and np.array_equal(host(w), before)
    out = net[0](nhwc(1, 3, 5, 5, dtype=lucid.float32))
    assert out.shape == (1, 4, 3, 3)


def test_module_to_rank_error_changes_nothing():
    net = nn.Sequential(nn.Conv2d(2, 2, 1), nn.Conv3d(2, 2, 1))
    with pytest.raises(RuntimeError, match="^Module.to: required rank 4 tensor to use channels_last format"):
        net.to(memory_format=CL)
    assert net[0].weight.stride() == (2, 1, 1, 1)  # not converted before the error
    net[1].to(memory_format=CL3)
    assert net[1].weight.stride() == (2, 1, 2, 2, 2)
    assert net.to(lucid.float64, memory_format=PF)[0].weight.dtype == lucid.float64


def test_convert_conv_weight_memory_format():
    assert hasattr(nn.utils, "memory_format")
    net = nn.Sequential(nn.Conv2d(3, 4, 2), nn.Sequential(nn.ConvTranspose2d(4, 3, 2)), nn.Conv3d(1, 1, 1),
                        nn.Linear(2, 2))
    p = net[0].weight
    before = host(p)
    assert nn.utils.convert_conv2d_weight_memory_format(net, CL) is net
    assert net[0].weight is p and p.stride() == (12, 1, 6, 3) and np.array_equal(host(p), before)
    assert net[1][0].weight.stride() == (12, 1, 6, 3)   # (C_in, C_out, kh, kw) = (4, 3, 2, 2)
    assert net[2].weight.stride() == (1, 1, 1, 1, 1) and net[3].weight.stride() == (2, 1)
    nn.utils.convert_conv2d_weight_memory_format(net, CF)
    assert p.stride() == (12, 4, 2, 1)
    c3 = nn.utils.memory_format.convert_conv3d_weight_memory_format(nn.Conv3d(2, 3, 2), CL3)
    assert c3.weight.stride() == (16, 1, 8, 4, 2)
    with pytest.raises(RuntimeError, match="required rank 5 tensor to use channels_last_3d format"):
        nn.utils.convert_conv2d_weight_memory_format(nn.Conv2d(2, 2, 1), CL3)
    with pytest.raises(RuntimeError, match="^convert_conv2d_weight_memory_format: unsupported memory format Preserve"):
        nn.utils.convert_conv2d_weight_memory_format(nn.Conv2d(2, 2, 1), PF)
    assert nn.utils.convert_conv2d_weight_memory_format(nn.Linear(2, 2), PF) is not None  # no conv: nothing to do


def test_on_a_second_device():
    strict_device.enable()
    x = lucid.arange(24.0).reshape(1, 2, 3, 4).to("strict:1")
    y = x.contiguous(memory_format=CL)
    assert y.device == x.device and y.stride() == (24, 1, 8, 2)
    assert np.array_equal(host(y), host(x))
    assert lucid.zeros_like(y).stride() == (24, 1, 8, 2) and lucid.zeros_like(y).device == x.device
    assert lucid.ones_like(x, memory_format=CL).stride() == (24, 1, 8, 2)
    e = lucid.empty(1, 2, 3, 4, memory_format=CL, device="strict:1")
    assert e.device == x.device and e.stride() == (24, 1, 8, 2)
    h = x.to("cpu", memory_format=CL)
    assert h.device == lucid.device("cpu") and h.stride() == (24, 1, 8, 2) and np.array_equal(h.numpy(), host(x))
    conv = nn.Conv2d(2, 2, 1).to("strict:1")
    conv.to(memory_format=CL)
    assert conv.weight.device == x.device and conv.weight.stride() == (2, 1, 2, 2)
    nn.utils.convert_conv2d_weight_memory_format(conv, CF)
    assert conv.weight.stride() == (2, 1, 1, 1)
    np.testing.assert_allclose(host(conv(y)), host(conv(x)), rtol=1e-6)


# ------------------------------------------------------------------------------ PyTorch parity


def _geometries():
    shapes = [(2, 3, 4, 5), (1, 3, 4, 5), (2, 1, 4, 5), (2, 3, 1, 5), (2, 3, 4, 1), (2, 3, 1, 1), (2, 1, 1, 1),
              (1, 1, 1, 1), (1, 3, 1, 1), (2, 1, 3, 1), (3, 2), (2, 3, 2, 2, 2), (2, 1, 2, 1, 2)]
    for shape in shapes:
        for perm in itertools.permutations(range(len(shape))):
            base = tuple(shape[p] for p in perm)
            inv = tuple(int(i) for i in np.argsort(perm))
            yield base, inv, None
            for d in range(len(shape)):
                if shape[d] > 1:
                    yield base, inv, d


def _make(mod, base, inv, d):
    t = mod.zeros(base).permute(*inv)
    if d is not None:
        t = t[tuple(slice(None, None, 2) if i == d else slice(None) for i in range(len(inv)))]
    return t


def test_strides_match_torch_on_many_geometries():
    torch = pytest.importorskip("torch")
    names = ["contiguous_format", "channels_last", "channels_last_3d", "preserve_format"]

    def both(f):
        out = []
        for mod, t in ((torch, tt), (lucid, lt)):
            try:
                r = f(mod, t)
                out.append(r.stride() if hasattr(r, "stride") else r)
            except RuntimeError:
                out.append("error")
        return out

    n = 0
    for base, inv, d in _geometries():
        tt, lt = _make(torch, base, inv, d), _make(lucid, base, inv, d)
        assert tt.stride() == lt.stride()
        n += 1
        a, b = both(lambda m, t: t.dim_order())
        assert a == b, (tt.shape, tt.stride())
        a, b = both(lambda m, t: m.empty_like(t))
        assert a == b, (tt.shape, tt.stride())
        for name in names:
            for what, f in [("is_contiguous", lambda m, t: t.is_contiguous(memory_format=getattr(m, name))),
                            ("contiguous", lambda m, t: t.contiguous(memory_format=getattr(m, name))),
                            ("clone", lambda m, t: t.clone(memory_format=getattr(m, name))),
                            ("zeros_like", lambda m, t: m.zeros_like(t, memory_format=getattr(m, name))),
                            ("to", lambda m, t: (t.to(memory_format=getattr(m, name)).stride(),
                                                 t.to(memory_format=getattr(m, name)) is t)),
                            ("to copy", lambda m, t: t.to(m.float64, memory_format=getattr(m, name)))]:
                if name == "preserve_format" and what == "contiguous":
                    continue
                a, b = both(f)
                assert a == b, (what, name, tt.shape, tt.stride(), a, b)
    assert n > 1000


def test_module_to_matches_torch():
    torch = pytest.importorskip("torch")
    tnet = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ConvTranspose2d(4, 2, 2),
                               torch.nn.Linear(3, 2))
    lnet = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ConvTranspose2d(4, 2, 2), nn.Linear(3, 2))
    tnet.to(memory_format=torch.channels_last)
    lnet.to(memory_format=CL)
    assert [p.stride() for p in tnet.parameters()] == [p.stride() for p in lnet.parameters()]


def test_like_functions_work_under_vmap():
    # *_like reads its input's strides for preserve_format; a vmap tracer has none
    from lucid.func import vmap

    out = vmap(lambda x: lucid.zeros_like(x) + lucid.ones_like(x) * x)(lucid.tensor([[1.0, 2.0], [3.0, 4.0]]))
    np.testing.assert_array_equal(out.numpy(), [[1.0, 2.0], [3.0, 4.0]])


def test_random_like_functions_follow_the_input_layout():
    x = lucid.zeros(2, 3, 4, 5).contiguous(memory_format=lucid.channels_last)
    for make in (lucid.rand_like, lucid.randn_like, lambda t, **k: lucid.randint_like(t, 5, **k)):
        assert make(x).stride() == (60, 1, 15, 3)  # preserve_format, PyTorch's default
        assert make(x, memory_format=lucid.contiguous_format).stride() == (60, 20, 5, 1)
        assert make(lucid.zeros(2, 3, 4, 5), memory_format=lucid.channels_last).stride() == (60, 1, 15, 3)
    r = lucid.randint_like(lucid.zeros(3), 0, 4, requires_grad=True)
    assert r.requires_grad and r.dtype == lucid.float32 and 0 <= float(r.min()) and float(r.max()) < 4
    assert lucid.rand_like(lucid.zeros(2), device="cpu").device.type == "cpu"
