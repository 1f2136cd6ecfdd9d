"""Leftover op bugs found by review and a differential sweep against PyTorch 2.13, and the
``torch._foreach_*`` functions (``lucid/ops/foreach.py``).

Leftovers: LU of empty batches and of (m, 0) matrices (P is the identity), ``lu_unpack`` with no
rows; eig/eigvals/pinv of a non-finite matrix raise ``lucid.linalg.LinAlgError`` (a
RuntimeError, as PyTorch's, and still NumPy's LinAlgError); renorm refuses p <= 0 and a negative
maxnorm; ``normal(mean, std, size, device=, layout=, pin_memory=)``; relu passes the gradient at
NaN; conv refuses an integer/floating bias mix, conv_transpose and convolution cast the bias;
'reflect' pad with negative pads reflects about the uncropped ends; add/sub keep ``alpha`` out of
type promotion and refuse the alphas PyTorch refuses; ``linalg.vector_norm(dtype=)`` checks the
dtype; frac refuses integers, lerp mixed or integer dtypes, addcmul bools, abs_ complex and bool.

Expected values are closed forms or NumPy; the PyTorch comparisons skip without torch.
"""
import math

import numpy as np
import pytest

import lucid
import lucid.nn.functional as F

nan, inf = float("nan"), float("inf")


def _np(t):
    return np.asarray(t.tolist())


# ------------------------------------------------------------------ LU of empty inputs

def test_lu_of_empty_batches_and_matrices():
    P, L, U = lucid.linalg.lu(lucid.zeros(0, 3, 3))
    assert [tuple(x.shape) for x in (P, L, U)] == [(0, 3, 3)] * 3
    P, L, U = lucid.linalg.lu(lucid.zeros(2, 3, 0))  # no columns: nothing pivots, P = I
    assert [tuple(x.shape) for x in (P, L, U)] == [(2, 3, 3), (2, 3, 0), (2, 0, 0)]
    assert _np(P).tolist() == [np.eye(3).tolist()] * 2
    LU, piv = lucid.linalg.lu_factor(lucid.zeros(0, 3, 3))
    assert tuple(LU.shape) == (0, 3, 3) and tuple(piv.shape) == (0, 3) and piv.dtype == lucid.int32
    X = lucid.linalg.lu_solve(LU, piv, lucid.zeros(0, 3, 2))
    assert tuple(X.shape) == (0, 3, 2)
    LU, piv = lucid.linalg.lu_factor(lucid.zeros(2, 0, 0))
    assert tuple(lucid.linalg.lu_solve(LU, piv, lucid.zeros(2, 0, 4)).shape) == (2, 0, 4)


def test_lu_unpack_with_no_rows():
    P, L, U = lucid.lu_unpack(lucid.zeros(0, 3), lucid.zeros(0, dtype=lucid.int32))
    assert [tuple(x.shape) for x in (P, L, U)] == [(0, 0), (0, 0), (0, 3)]


# ------------------------------------------------------------------ non-finite eig / pinv

@pytest.mark.parametrize("fn", [lucid.linalg.eig, lucid.linalg.eigvals, lucid.linalg.pinv])
def test_non_finite_matrix_raises_linalg_error(fn):
    a = lucid.tensor([[nan, 1.0], [2.0, 3.0]], dtype=lucid.float64)
    with pytest.raises(lucid.linalg.LinAlgError) as info:
        fn(a)
    assert isinstance(info.value, RuntimeError)  # PyTorch's type
    assert isinstance(info.value, np.linalg.LinAlgError)  # what Lucid raised before: old callers still catch it


# ------------------------------------------------------------------ renorm

@pytest.mark.parametrize("p,maxnorm,msg", [(0, 1.0, "non-positive-norm"), (-1, 1.0, "non-positive-norm"),
                                           (2, -1.0, "maxnorm")])
def test_renorm_refuses_bad_p_and_maxnorm(p, maxnorm, msg):
    with pytest.raises(RuntimeError, match=msg):
        lucid.renorm(lucid.ones(2, 2), p, 0, maxnorm)


def test_renorm_values_and_0d():
    out = lucid.renorm(lucid.tensor([[3.0, 4.0], [0.3, 0.4]], dtype=lucid.float64), 2, 0, 1.0)
    assert np.allclose(_np(out), [[0.6, 0.8], [0.3, 0.4]], rtol=1e-6)
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        lucid.renorm(lucid.tensor(3.0), 2, 0, 1.0)


# ------------------------------------------------------------------ normal's keywords

def test_normal_float_overload_takes_device_layout_pin_memory():
    g = lucid.Generator().manual_seed(7)
    a = lucid.normal(1.0, 2.0, (4,), generator=g, dtype=lucid.float64)
    g.manual_seed(7)
    b = lucid.normal(1.0, 2.0, size=(4,), generator=g, device="cpu", layout=lucid.strided, pin_memory=False,
                     dtype=lucid.float64)
    assert b.dtype == lucid.float64 and b.device.type == "cpu"
    assert np.allclose(_np(a), _np(b), rtol=1e-6)  # the same draws
    assert lucid.normal(0.0, 1.0, (2,), requires_grad=True, device="cpu").requires_grad


def test_normal_tensor_overload_refuses_device():
    with pytest.raises(TypeError, match="normal"):
        lucid.normal(lucid.zeros(3), 1.0, device="cpu")


# ------------------------------------------------------------------ relu at NaN

def test_relu_gradient_at_nan_is_one():
    x = lucid.tensor([nan, 2.0, -1.0, 0.0], dtype=lucid.float64, requires_grad=True)
    y = lucid.relu(x)
    y.sum().backward()
    assert math.isnan(y.tolist()[0])
    assert x.grad.tolist() == [1.0, 1.0, 0.0, 0.0]
    g = lucid.func.grad(lambda t: lucid.relu(t).sum())(lucid.tensor([nan, -3.0], dtype=lucid.float64))
    assert g.tolist() == [1.0, 0.0]


# ------------------------------------------------------------------ conv bias dtype

def test_conv_refuses_a_bias_of_another_dtype():
    with pytest.raises(RuntimeError, match="bias type"):
        F.conv1d(lucid.ones(1, 1, 4, dtype=lucid.int64), lucid.ones(1, 1, 2, dtype=lucid.int64), lucid.ones(1))
    with pytest.raises(RuntimeError, match="bias type"):
        F.conv1d(lucid.ones(1, 1, 4), lucid.ones(1, 1, 2), lucid.ones(1, dtype=lucid.int64))
    # the generic convolution casts the bias to the input's dtype, as PyTorch's
    x, w = lucid.ones(1, 1, 4, dtype=lucid.int64), lucid.ones(1, 1, 2, dtype=lucid.int64)
    out = lucid.convolution(x, w, lucid.tensor([0.5]), [1], [0], [1], False, [0], 1)
    assert out.dtype == lucid.int64 and out.tolist() == [[[2, 2, 2]]]


def test_conv_transpose_casts_the_bias():
    out = F.conv_transpose1d(lucid.ones(1, 1, 2), lucid.ones(1, 1, 2), lucid.tensor([0.5], dtype=lucid.float64))
    assert out.dtype == lucid.float32 and out.tolist() == [[[1.5, 2.5, 1.5]]]
    with pytest.raises(RuntimeError, match="can't be cast"):
        F.conv_transpose1d(lucid.ones(1, 1, 2, dtype=lucid.int64), lucid.ones(1, 1, 2, dtype=lucid.int64),
                           lucid.ones(1))


# ------------------------------------------------------------------ reflect pad with negative pads

@pytest.mark.parametrize("pads,want", [((-3, 2), [3, 4, 3, 2]), ((2, -3), [2, 1, 0, 1]),
                                       ((-1, 4), [1, 2, 3, 4, 3, 2, 1, 0]), ((-2, -1), [2, 3])])
def test_reflect_pad_with_negative_pads_reflects_about_the_uncropped_ends(pads, want):
    x = lucid.arange(5.0, dtype=lucid.float64).reshape(1, 1, 5).requires_grad_()
    out = F.pad(x, pads, mode="reflect")
    assert out.tolist() == [[want]]
    out.sum().backward()  # each source position counted as often as it appears
    assert x.grad.tolist() == [[[float(want.count(i)) for i in range(5)]]]


def test_reflect_pad_2d_negative_matches_per_dim_indices():
    a = np.arange(30.0).reshape(1, 1, 5, 6)
    out = F.pad(lucid.tensor(a), (-3, 3, 2, -3), mode="reflect")  # crop-then-pad would have too little to reflect
    rows = np.abs(np.arange(-2, 5 - 3))
    cols = np.abs(np.arange(3, 6 + 3))
    cols = np.where(cols > 5, 10 - cols, cols)
    assert np.array_equal(_np(out), a[:, :, rows][:, :, :, cols])


# ------------------------------------------------------------------ add/sub alpha

def test_alpha_takes_no_part_in_promotion():
    t = lucid.tensor([True, False])
    out = lucid.add(t, t, alpha=3)
    assert out.dtype == lucid.bool and out.tolist() == [True, False]
    a = lucid.tensor([1, 2], dtype=lucid.int32)
    out = lucid.add(a, lucid.tensor([True, True]), alpha=3)  # int32, not int64 (bool * 3)
    assert out.dtype == lucid.int32 and out.tolist() == [4, 5]
    x = lucid.tensor([True])
    assert x.add_(True, alpha=2).tolist() == [True]


@pytest.mark.parametrize("a,b,alpha,msg", [
    ([1, 2], [1, 1], 2.5, "floating point"), ([1.0], [1.0], True, "Boolean alpha"),
    ([1.0], [1.0], 1j, "complex"), ([1], 2, 1j, "alpha"),
])
def test_alpha_checks(a, b, alpha, msg):
    x, y = lucid.tensor(a), (lucid.tensor(b) if isinstance(b, list) else b)
    for op in (lucid.add, lucid.sub):
        with pytest.raises(RuntimeError, match=msg):
            op(x, y, alpha=alpha)
    with pytest.raises(RuntimeError, match=msg):
        x.clone().add_(y, alpha=alpha)


def test_alpha_common_cases_unchanged():
    x = lucid.tensor([1.0, 2.0], dtype=lucid.float64)
    assert lucid.add(x, x, alpha=0.5).tolist() == [1.5, 3.0]
    assert lucid.sub(lucid.tensor([5, 7]), 2, alpha=2).tolist() == [1, 3]
    assert x.clone().add_(x, alpha=-0.5).tolist() == [0.5, 1.0]


# ------------------------------------------------------------------ vector_norm(dtype=)

@pytest.mark.parametrize("src,dt,msg", [
    (lucid.float32, lucid.float16, "narrowing"), (lucid.int64, lucid.float32, "floating"),
    (lucid.float32, lucid.int64, "floating point or complex"), (lucid.float32, lucid.complex64, "real"),
    (lucid.complex64, lucid.float32, "complex")])
def test_vector_norm_dtype_checks(src, dt, msg):
    with pytest.raises(RuntimeError, match=msg):
        lucid.linalg.vector_norm(lucid.ones(2, dtype=src), dtype=dt)


def test_vector_norm_dtype_widening():
    assert lucid.linalg.vector_norm(lucid.tensor([3.0, 4.0]), dtype=lucid.float64).dtype == lucid.float64
    assert lucid.linalg.vector_norm(lucid.ones(2, dtype=lucid.complex64), dtype=lucid.complex128).dtype == lucid.float64


# ------------------------------------------------------------------ frac / lerp dtypes

def test_frac_refuses_integers():
    with pytest.raises(NotImplementedError, match="frac"):
        lucid.frac(lucid.tensor([1, 2]))
    assert lucid.frac(lucid.tensor([1.5, -2.25])).tolist() == [0.5, -0.25]


def test_in_place_abs_refuses_complex_and_bool():
    for fn in (lucid.Tensor.abs_, lucid.Tensor.absolute_):
        with pytest.raises(RuntimeError, match="not supported for complex"):
            fn(lucid.tensor([3 + 4j]))
        with pytest.raises(NotImplementedError, match="Bool"):
            fn(lucid.tensor([True]))
        assert fn(lucid.tensor([-1.5, 2.0])).tolist() == [1.5, 2.0]


def test_addcmul_refuses_bool():
    b = lucid.tensor([True, False])
    with pytest.raises(NotImplementedError, match="addcmul"):
        lucid.addcmul(b, b, b)
    assert lucid.addcmul(lucid.tensor([1, 2]), b, b, value=3).tolist() == [4, 2]


def test_lerp_refuses_mixed_and_integer_dtypes():
    with pytest.raises(RuntimeError, match="for `end`"):
        lucid.lerp(lucid.ones(2), lucid.ones(2, dtype=lucid.float64), 0.5)
    with pytest.raises(RuntimeError, match="for `weight`"):
        lucid.ones(2).lerp_(lucid.ones(2), lucid.full((2,), 0.5, dtype=lucid.float64))
    with pytest.raises(NotImplementedError, match="lerp"):
        lucid.lerp(lucid.tensor([1, 2]), lucid.tensor([3, 4]), 0.5)
    z, o = lucid.zeros(2, dtype=lucid.float64), lucid.ones(2, dtype=lucid.float64)
    assert lucid.lerp(z, o, 0.25).tolist() == [0.25] * 2


# ================================================================== torch._foreach_*

UNARY = {"abs": np.abs, "acos": np.arccos, "asin": np.arcsin, "atan": np.arctan, "ceil": np.ceil, "cos": np.cos,
         "cosh": np.cosh, "exp": np.exp, "expm1": np.expm1, "floor": np.floor, "frac": lambda v: v - np.trunc(v),
         "log": np.log, "log10": np.log10, "log1p": np.log1p, "log2": np.log2, "neg": np.negative,
         "reciprocal": lambda v: 1 / v, "round": np.round, "rsqrt": lambda v: 1 / np.sqrt(v),
         "sigmoid": lambda v: 1 / (1 + np.exp(-v)), "sign": np.sign, "sin": np.sin, "sinh": np.sinh, "sqrt": np.sqrt,
         "tan": np.tan, "tanh": np.tanh, "trunc": np.trunc,
         "erf": np.vectorize(math.erf), "erfc": np.vectorize(math.erfc), "lgamma": np.vectorize(math.lgamma)}
ALL = ["_foreach_" + n for n in UNARY] + ["_foreach_" + n + "_" for n in UNARY] + [
    "_foreach_" + n + s for n in ("add", "sub", "mul", "div", "clamp_min", "clamp_max", "maximum", "minimum", "pow",
                                  "addcmul", "addcdiv", "lerp") for s in ("", "_")] + [
    "_foreach_zero_", "_foreach_clone", "_foreach_copy_", "_foreach_mm", "_foreach_max", "_foreach_norm",
    "_foreach_powsum"]
A = [np.array([0.3, 0.6, 0.9]), np.array([[0.2, 0.5], [0.7, 0.4]])]
B = [np.array([0.5, 0.25, 0.8]), np.array([[0.9, 0.1], [0.3, 0.6]])]


def _ts(arrs, rg=False):
    return [lucid.tensor(a, dtype=lucid.float64, requires_grad=rg) for a in arrs]


def _close(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert tuple(g.shape) == np.shape(w)
        assert np.allclose(_np(g), w, rtol=1e-6, atol=1e-12), (g, w)


def test_every_foreach_function_is_exported():
    missing = [n for n in ALL if not callable(getattr(lucid, n, None))]
    assert not missing and len(ALL) == 91


@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary_values_and_in_place(op):
    out = getattr(lucid, f"_foreach_{op}")(_ts(A))
    assert isinstance(out, tuple)  # PyTorch's out-of-place forms return tuples
    _close(out, [UNARY[op](a) for a in A])
    xs = _ts(A)
    before = [x._version_counter for x in xs]
    ret = getattr(lucid, f"_foreach_{op}_")(xs)
    assert ret is xs
    assert all(x._version_counter > v for x, v in zip(xs, before))
    _close(xs, [UNARY[op](a) for a in A])


def test_binary_overloads():
    f = lucid._foreach_add
    _close(f(_ts(A), 2.0), [a + 2 for a in A])
    _close(f(_ts(A), [1.0, -2.0]), [A[0] + 1, A[1] - 2])
    _close(f(_ts(A), _ts(B), alpha=3), [a + 3 * b for a, b in zip(A, B)])
    _close(f(_ts(A), lucid.tensor(0.5, dtype=lucid.float64), alpha=2), [a + 1 for a in A])
    _close(lucid._foreach_sub(_ts(A), _ts(B), alpha=2), [a - 2 * b for a, b in zip(A, B)])
    _close(lucid._foreach_mul(_ts(A), [2, 3]), [2 * A[0], 3 * A[1]])
    _close(lucid._foreach_div(_ts(A), _ts(B)), [a / b for a, b in zip(A, B)])
    _close(lucid._foreach_pow(_ts(A), 2), [a ** 2 for a in A])
    _close(lucid._foreach_pow(2.0, _ts(A)), [2 ** a for a in A])
    _close(lucid._foreach_maximum(_ts(A), 0.5), [np.maximum(a, 0.5) for a in A])
    _close(lucid._foreach_minimum(_ts(A), _ts(B)), [np.minimum(a, b) for a, b in zip(A, B)])
    _close(lucid._foreach_clamp_max(_ts(A), [0.5, 0.3]), [np.minimum(A[0], 0.5), np.minimum(A[1], 0.3)])
    # broadcasting inside a pair, and the promotion of each op
    _close(lucid._foreach_add([lucid.ones(2, 3, dtype=lucid.float64)], [lucid.ones(3, dtype=lucid.float64)]),
           [np.full((2, 3), 2.0)])
    ints = [lucid.tensor([1, 2]), lucid.tensor([3])]
    assert [t.dtype for t in lucid._foreach_add(ints, 1.5)] == [lucid.float32] * 2
    assert [t.dtype for t in lucid._foreach_div(ints, ints)] == [lucid.float32] * 2
    assert [t.dtype for t in lucid._foreach_mul(ints, 2)] == [lucid.int64] * 2
    mixed = lucid._foreach_add([lucid.ones(1), lucid.ones(1, dtype=lucid.float64)], [1, 2.5])
    assert [t.dtype for t in mixed] == [lucid.float32, lucid.float64] and mixed[1].tolist() == [3.5]


def test_pointwise_reduce_and_other():
    value = 0.5
    _close(lucid._foreach_addcmul(_ts(A), _ts(B), _ts(A), value), [a + value * b * a for a, b in zip(A, B)])
    _close(lucid._foreach_addcdiv(_ts(A), _ts(A), _ts(B), [2.0, -1.0]), [A[0] + 2 * A[0] / B[0], A[1] - A[1] / B[1]])
    packed = lucid.tensor([2.0, -1.0])
    _close(lucid._foreach_addcdiv(_ts(A), _ts(A), _ts(B), packed), [A[0] + 2 * A[0] / B[0], A[1] - A[1] / B[1]])
    _close(lucid._foreach_lerp(_ts(A), _ts(B), 0.25), [a + 0.25 * (b - a) for a, b in zip(A, B)])
    _close(lucid._foreach_lerp(_ts(A), _ts(B), _ts(B)), [a + b * (b - a) for a, b in zip(A, B)])
    _close(lucid._foreach_max(_ts(A)), [np.max(a) for a in A])
    _close(lucid._foreach_norm(_ts(A)), [np.linalg.norm(a.ravel()) for a in A])
    _close(lucid._foreach_norm(_ts(A), 1), [np.abs(a).sum() for a in A])
    _close(lucid._foreach_norm(_ts(A), inf), [np.abs(a).max() for a in A])
    _close(lucid._foreach_powsum(_ts(A), 3), [(np.abs(a) ** 3).sum() for a in A])
    assert lucid._foreach_powsum([lucid.tensor([3.0, 0.0])], 0)[0].item() == 2.0  # 0 ** 0 counts 1
    assert lucid._foreach_norm([lucid.tensor([3.0, 4.0])], dtype=lucid.float64)[0].dtype == lucid.float64
    _close(lucid._foreach_mm([lucid.tensor(A[1])], [lucid.tensor(B[1])]), [A[1] @ B[1]])
    _close(lucid._foreach_clone(_ts(A)), A)


def test_in_place_forms_return_self_and_bump_versions():
    xs, ys = _ts(A), _ts(B)
    ids = [id(x) for x in xs]
    assert lucid._foreach_mul_(xs, 0.5) is xs
    assert lucid._foreach_add_(xs, ys, alpha=2) is xs
    assert lucid._foreach_maximum_(xs, ys) is xs
    assert lucid._foreach_lerp_(xs, ys, 0.5) is xs
    assert lucid._foreach_addcmul_(xs, ys, ys, [1.0, 2.0]) is xs
    assert [id(x) for x in xs] == ids
    want = [np.maximum(0.5 * a + 2 * b, b) for a, b in zip(A, B)]
    want = [w + 0.5 * (b - w) for w, b in zip(want, B)]
    want = [want[0] + B[0] ** 2, want[1] + 2 * B[1] ** 2]
    _close(xs, want)
    zs = _ts(A)
    lucid._foreach_copy_(zs, [lucid.tensor([1, 2, 3]), lucid.tensor(5)])  # cast and broadcast as copy_
    _close(zs, [np.array([1.0, 2.0, 3.0]), np.full((2, 2), 5.0)])
    lucid._foreach_zero_(zs)
    _close(zs, [np.zeros(3), np.zeros((2, 2))])


def test_in_place_refuses_unsafe_casts_and_leaves():
    with pytest.raises(RuntimeError, match="can't be cast"):
        lucid._foreach_add_([lucid.tensor([1, 2])], 1.5)
    with pytest.raises(RuntimeError, match="can't be cast"):
        lucid._foreach_exp_([lucid.tensor([1, 2])])
    with pytest.raises(RuntimeError, match="can't be cast"):
        lucid._foreach_maximum_([lucid.tensor([1, 2])], [lucid.tensor([1.5, 0.0])])
    with pytest.raises(RuntimeError, match="leaf"):
        lucid._foreach_add_(_ts(A, rg=True), 1.0)


def test_out_of_place_gradients():
    xs, ys = _ts(A, rg=True), _ts(B, rg=True)
    w = lucid.tensor(0.7, dtype=lucid.float64, requires_grad=True)
    outs = (lucid._foreach_mul(xs, ys) + lucid._foreach_addcdiv(xs, xs, ys, 2.0) + lucid._foreach_norm(xs)
            + lucid._foreach_mul(ys, w) + lucid._foreach_pow(2.0, ys))
    total = sum(o.sum() for o in outs)
    total.backward()
    for x, y, a, b in zip(xs, ys, A, B):
        assert np.allclose(_np(x.grad), b + 1 + 2 / b + a / np.linalg.norm(a.ravel()), rtol=1e-6)
        assert np.allclose(_np(y.grad), a - 2 * a / b ** 2 + 0.7 + np.log(2) * 2 ** b, rtol=1e-6)
    assert np.isclose(w.grad.item(), sum(b.sum() for b in B))


def test_in_place_gradients_through_non_leaves():
    leaves, ys = _ts(A, rg=True), _ts(B, rg=True)
    xs = [x * 1 for x in leaves]
    lucid._foreach_maximum_(xs, ys)  # list form: computed from a copy, then written back
    lucid._foreach_mul_(xs, 3.0)
    sum(x.sum() for x in xs).backward()
    for x, y, a, b in zip(leaves, ys, A, B):
        assert np.array_equal(_np(x.grad), 3.0 * (a > b)) and np.array_equal(_np(y.grad), 3.0 * (b > a))


def test_foreach_under_vmap_and_jvp():
    from lucid.func import jvp, vmap

    xs = lucid.tensor(np.arange(6.0).reshape(2, 3), dtype=lucid.float64)
    out = vmap(lambda r: lucid._foreach_mul([r, r], [2.0, 3.0])[1])(xs)
    assert np.allclose(_np(out), 3 * np.arange(6.0).reshape(2, 3))
    p, t = jvp(lambda r: lucid._foreach_exp([r])[0], (lucid.tensor([0.0, 1.0], dtype=lucid.float64),),
               (lucid.ones(2, dtype=lucid.float64),))
    assert np.allclose(_np(t), np.exp([0.0, 1.0]))


@pytest.mark.parametrize("call,exc,msg", [
    (lambda: lucid._foreach_add([], 1), RuntimeError, "_foreach_add: Tensor list must have at least one tensor"),
    (lambda: lucid._foreach_exp_([]), RuntimeError, "at least one tensor"),
    (lambda: lucid._foreach_add([lucid.ones(2)] * 2, [lucid.ones(2)]), RuntimeError,
     "same number of tensors, got 2 and 1"),
    (lambda: lucid._foreach_mul([lucid.ones(2)] * 2, [1.0]), RuntimeError, "same number of elements as scalar list"),
    (lambda: lucid._foreach_sub([lucid.ones(2)], 1, alpha=2), TypeError, "alpha"),
    (lambda: lucid._foreach_mul([lucid.ones(2)], [lucid.ones(2)], alpha=2), TypeError, "alpha"),
    (lambda: lucid._foreach_mul([lucid.ones(2)], lucid.ones(1)), RuntimeError, "expected to be 0 dim"),
    (lambda: lucid._foreach_clamp_min([lucid.ones(2)], lucid.tensor(1.0)), TypeError, "_foreach_clamp_min"),
    (lambda: lucid._foreach_add(lucid.ones(2), 1), TypeError, "list or tuple of Tensors"),
    (lambda: lucid._foreach_add([lucid.ones(2)], "a"), TypeError, "_foreach_add"),
    (lambda: lucid._foreach_max([lucid.ones(0)]), RuntimeError, "empty tensor"),
    (lambda: lucid._foreach_norm([lucid.tensor([1, 2])]), RuntimeError, "floating point"),
    (lambda: lucid._foreach_powsum([lucid.tensor([1, 2])]), NotImplementedError, "_foreach_powsum"),
    (lambda: lucid._foreach_addcmul([lucid.ones(1)] * 2, [lucid.ones(1)] * 2, [lucid.ones(1)] * 2,
                                    lucid.ones(3)), RuntimeError, "length of scalars"),
    (lambda: lucid._foreach_addcmul([lucid.ones(1)] * 2, [lucid.ones(1)] * 2, [lucid.ones(1)] * 2,
                                    lucid.ones(1, 2)), RuntimeError, "dimension 1"),
    (lambda: lucid._foreach_lerp([lucid.ones(1)], [lucid.ones(1)] * 2, 0.5), RuntimeError, "same number of tensors"),
    (lambda: lucid._foreach_copy_([lucid.ones(1)], [lucid.ones(1)] * 2), RuntimeError, "same number of tensors"),
])
def test_foreach_errors(call, exc, msg):
    with pytest.raises(exc, match=msg):
        call()


def test_matches_torch_foreach():
    torch = pytest.importorskip("torch")
    ta, tb = [torch.tensor(a) for a in A], [torch.tensor(b) for b in B]
    cases = [("_foreach_add", (tb,), {"alpha": 2}), ("_foreach_div", ([0.5, 2.0],), {}),
             ("_foreach_addcmul", (ta, tb, [0.5, 2.0]), {}), ("_foreach_lerp", (tb, 0.3), {}),
             ("_foreach_norm", (3,), {}), ("_foreach_maximum", (tb,), {}), ("_foreach_sigmoid", (), {}),
             ("_foreach_clamp_min", (0.5,), {}), ("_foreach_powsum", (1.5,), {})]

    def conv(v):
        return [lucid.tensor(t.numpy()) for t in v] if isinstance(v, list) and torch.is_tensor(v[0]) else v

    for name, args, kw in cases:
        want = getattr(torch, name)([t.clone() for t in ta], *args, **kw)
        got = getattr(lucid, name)(_ts(A), *[conv(a) for a in args], **kw)
        assert type(got) is type(want)
        _close(got, [w.numpy() for w in want])
