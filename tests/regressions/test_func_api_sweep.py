"""Regressions from the torch.func API sweep: vmap/jvp input mutations, out_dims pytrees and
ranges, None outputs, chunked randomness="same", argnums checks, 0-dim grad outputs, exception
types, vjp cotangent dtypes, linearize over pytrees, functional_call checks, func.rearrange."""
import numpy as np
import pytest

import lucid
import lucid.func as F
from lucid import nn

A = np.arange(6.0).reshape(2, 3)
D = np.arange(24.0).reshape(2, 3, 4)


def t(a):
    return lucid.tensor(np.array(a, dtype=np.float64))


# ---------------------------------------------------------------- input mutations (vmap, jvp)


@pytest.mark.parametrize("in_dims", [0, 1, -1])
def test_vmap_in_place_change_of_a_batched_input_reaches_the_caller(in_dims):
    y = t(A)
    out = F.vmap(lambda x: x.mul_(2), in_dims=in_dims)(y)
    np.testing.assert_array_equal(y.numpy(), 2 * A)
    np.testing.assert_array_equal(out.numpy(), 2 * A if in_dims == 0 else 2 * A.T)


def test_vmap_in_place_change_through_a_view_and_of_a_view_input():
    y = t(A)
    F.vmap(lambda x: x[0].mul_(10))(y)  # a view of the input made inside f
    np.testing.assert_array_equal(y.numpy(), [[0.0, 1.0, 2.0], [30.0, 4.0, 5.0]])
    y = t(A)
    F.vmap(lambda x: x.add_(1))(y[:, 1:])  # the input is a view: the change lands in its base
    np.testing.assert_array_equal(y.numpy(), [[0.0, 2.0, 3.0], [3.0, 5.0, 6.0]])


def test_vmap_in_place_change_nested_chunked_and_in_pytrees():
    y = t(D)
    F.vmap(F.vmap(lambda x: x.mul_(2), in_dims=1), in_dims=2)(y)
    np.testing.assert_array_equal(y.numpy(), 2 * D)
    y = t(A)
    F.vmap(lambda x: x.mul_(3), chunk_size=1)(y)
    np.testing.assert_array_equal(y.numpy(), 3 * A)
    a, b = t(A), t(np.ones(3))
    F.vmap(lambda d: d["a"].sub_(d["b"]), in_dims=({"a": 1, "b": 0},))({"a": a, "b": b})
    np.testing.assert_array_equal(a.numpy(), A - 1)
    np.testing.assert_array_equal(b.numpy(), np.ones(3))  # not changed: not written back


def test_vmap_without_in_place_change_leaves_inputs_alone():
    y = t(A)
    F.vmap(lambda x: x * 2)(y)
    F.vmap(lambda x, z: x.clone().mul_(z), in_dims=(0, None))(y, t([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(y.numpy(), A)
    assert y._version[0] == 0


def test_jvp_in_place_change_of_a_primal_reaches_the_caller():
    x = t([1.0, 2.0])
    p, tan = F.jvp(lambda z: z.mul_(3), (x,), (t([1.0, 1.0]),))
    np.testing.assert_array_equal(x.numpy(), [3.0, 6.0])
    np.testing.assert_array_equal(p.numpy(), [3.0, 6.0])
    np.testing.assert_array_equal(tan.numpy(), [3.0, 3.0])


def test_vmap_of_jvp_with_in_place_change():
    y = t(A)
    p, tan = F.vmap(lambda r: F.jvp(lambda z: z.mul_(z), (r,), (lucid.ones_like(r),)))(y)
    np.testing.assert_array_equal(y.numpy(), A * A)
    np.testing.assert_array_equal(tan.numpy(), 2 * A)


# ------------------------------------------------------------------------ out_dims and outputs


def test_vmap_out_dims_dict_matches_a_dict_output():
    x = t(D)
    for chunk in (None, 1):
        out = F.vmap(lambda v: {"a": v, "b": v.sum()}, out_dims={"a": 1, "b": 0}, chunk_size=chunk)(x)
        assert out["a"].shape == (3, 2, 4)
        np.testing.assert_array_equal(out["a"].numpy(), D.transpose(1, 0, 2))
        np.testing.assert_array_equal(out["b"].numpy(), D.sum((1, 2)))
    out = F.vmap(lambda v: {"a": (v, v.sum()), "b": v}, out_dims={"a": (2, 0), "b": -1})(x)
    assert out["a"][0].shape == (3, 4, 2) and out["b"].shape == (3, 4, 2) and out["a"][1].shape == (2,)
    with pytest.raises(ValueError, match=r"^vmap\(f, in_dims, out_dims\)"):
        F.vmap(lambda v: {"a": v, "b": v}, out_dims={"a": 1, "c": 0})(x)


@pytest.mark.parametrize("out_dims", [3, -4, 5])
def test_vmap_out_dims_out_of_range_raises_index_error(out_dims):
    x = t(A)
    with pytest.raises(IndexError, match="out_dim"):
        F.vmap(lambda a, b: a + b, out_dims=out_dims)(x, x)  # the two-input fast path
    with pytest.raises(IndexError, match="out_dim"):
        F.vmap(lambda a: a, out_dims=out_dims)(x)
    with pytest.raises(ValueError):  # still a ValueError for old callers
        F.vmap(lambda a: a, out_dims=out_dims)(x)


def test_vmap_negative_out_dims_on_the_fast_path():
    x = t(A)
    out = F.vmap(lambda a, b: a + b, out_dims=-2)(x, x)
    np.testing.assert_array_equal(out.numpy(), 2 * A)
    out = F.vmap(lambda a, b: a + b, out_dims=-1)(x, x)
    np.testing.assert_array_equal(out.numpy(), 2 * A.T)


def test_vmap_none_output_needs_out_dims_none():
    x = t(A)
    with pytest.raises(ValueError, match="got None"):
        F.vmap(lambda v: None)(x)
    with pytest.raises(ValueError, match="got None"):
        F.vmap(lambda v: (v, None))(x)
    assert F.vmap(lambda v: None, out_dims=None)(x) is None
    a, b = F.vmap(lambda v: (v * 2, None), out_dims=(0, None))(x)
    assert b is None
    np.testing.assert_array_equal(a.numpy(), 2 * A)


def test_vmap_isolated_checks_outputs_and_takes_an_empty_batch():
    x = t(A)
    iso = dict(strategy="isolated")
    with pytest.raises(ValueError, match="got None"):
        F.vmap(lambda v: (v, None), **iso)(x)
    with pytest.raises(ValueError, match="got float"):
        F.vmap(lambda v: 1.0, **iso)(x)
    a, b = F.vmap(lambda v: (v * 2, None), out_dims=(1, None), **iso)(x)
    assert b is None
    np.testing.assert_array_equal(a.numpy(), 2 * A.T)
    out = F.vmap(lambda v: {"a": v, "b": v.sum()}, out_dims={"a": 1, "b": 0}, **iso)(x)
    np.testing.assert_array_equal(out["a"].numpy(), A.T)
    np.testing.assert_array_equal(out["b"].numpy(), A.sum(1))
    out = F.vmap(lambda v: v * 2, out_dims=1, **iso)(lucid.zeros(0, 3, dtype=lucid.float64))
    assert out.shape == (3, 0)


# ------------------------------------------------------------------------------- randomness


def test_vmap_randomness_checked_with_runtime_error():
    with pytest.raises(RuntimeError, match="randomness"):
        F.vmap(lambda v: v, randomness="bad")
    with pytest.raises(ValueError):
        F.vmap(lambda v: v, randomness="bad")


@pytest.mark.parametrize("chunk_size", [1, 2])
def test_vmap_chunked_randomness_same_shares_one_draw_across_chunks(chunk_size):
    z = lucid.zeros(5, 6, dtype=lucid.float64)
    out = F.vmap(lambda x: x + lucid.rand_like(x), randomness="same", chunk_size=chunk_size)(z).numpy()
    for i in range(1, 5):
        np.testing.assert_array_equal(out[i], out[0])
    out = F.vmap(lambda x: x + lucid.rand_like(x), randomness="different", chunk_size=chunk_size)(z).numpy()
    assert not np.allclose(out[1], out[0]) and not np.allclose(out[4], out[0])


# ------------------------------------------------------------------- argnums, outputs, types


def _f(x, y):
    return (x.sin() * y).sum()


@pytest.mark.parametrize("argnums", [(0, 0), (1, -1), (), 0.0, True, (0, 1.0)])
def test_bad_argnums_raise_runtime_error(argnums):
    x = t([0.1, 0.2])
    for api in (F.grad, F.grad_and_value, F.jacrev, F.jacfwd, F.hessian):
        with pytest.raises(RuntimeError, match="argnums"):
            api(_f, argnums=argnums)(x, x)


def test_argnums_out_of_range_is_runtime_error():
    x = t([0.1, 0.2])
    with pytest.raises(RuntimeError, match=r"^grad\(f\)\(\*args\): got argnums=2"):
        F.grad(_f, argnums=2)(x, x)
    with pytest.raises(ValueError):  # old callers
        F.jacrev(_f, argnums=(0, 5))(x, x)


def test_grad_needs_a_zero_dim_output():
    x = t([0.1, 0.2])
    with pytest.raises(RuntimeError, match=r"^grad\(f\)\(\*args\): expected f to return a scalar \(0-dim\)"):
        F.grad(lambda v: v.sum().reshape(1))(x)
    with pytest.raises(RuntimeError, match="0-dim"):
        F.grad_and_value(lambda v: v.sum().reshape(1, 1))(x)
    np.testing.assert_allclose(F.grad(lambda v: (v * v).sum())(x).numpy(), [0.2, 0.4])


def test_integer_inputs_and_non_tensor_outputs_raise_torch_types():
    i = lucid.arange(3)
    x = t([0.1, 0.2])
    for call in (lambda: F.grad(lambda v: v.sum())(i), lambda: F.vjp(lambda v: v * 2, i),
                 lambda: F.jacrev(lambda v: v * 2)(i), lambda: F.grad(lambda v: 1.0)(x),
                 lambda: F.vjp(lambda v: 2.0, x), lambda: F.jvp(lambda v: 1.0, (x,), (x,))):
        with pytest.raises(RuntimeError):  # PyTorch's type
            call()
        with pytest.raises(TypeError):  # Lucid's earlier type
            call()
    for call in (lambda: F.jvp(lambda v: v * 2, (i,), (i,)), lambda: F.jacfwd(lambda v: v * 2)(i),
                 lambda: F.grad(lambda v: v.sum())(3.0)):
        with pytest.raises(ValueError, match="Tensor"):
            call()


def test_jacfwd_non_tensor_aux_is_a_clear_error():
    with pytest.raises(RuntimeError, match=r"^jacfwd\(f\)\(\*args\): expected every leaf of aux to be a Tensor"):
        F.jacfwd(lambda v: (v.sin(), 3), has_aux=True)(t([0.1, 0.2]))


def test_vjp_fn_takes_cotangents_of_another_dtype_as_the_output_dtype():
    x = t([0.1, -0.5, 2.0])
    _, vjp_fn = F.vjp(lambda v: v.sin(), x)
    for ct in (lucid.ones(3, dtype=lucid.int64), lucid.ones(3, dtype=lucid.float32)):
        (g,) = vjp_fn(ct)  # an integer cotangent gave zeros before
        assert g.dtype == lucid.float64
        np.testing.assert_allclose(g.numpy(), np.cos([0.1, -0.5, 2.0]), rtol=1e-7)
    with pytest.raises(RuntimeError, match="^vjp_fn: got a complex cotangent"):
        vjp_fn(lucid.ones(3, dtype=lucid.complex128))
    with pytest.raises(RuntimeError, match="^vjp_fn: expected every cotangent to be a Tensor"):
        vjp_fn(1.0)


# ------------------------------------------------------------------------------- linearize


def test_linearize_pytree_outputs_and_primals():
    x, y = t([0.3, -0.7]), t([1.5, 2.0])
    out, jvp_fn = F.linearize(lambda a, b: {"p": a.sin() * b, "q": [a.sum(), t([9.0])]}, x, y)
    np.testing.assert_allclose(out["p"].numpy(), np.sin([0.3, -0.7]) * [1.5, 2.0])
    tx, ty = t([1.0, 2.0]), t([0.5, -1.0])
    tan = jvp_fn(tx, ty)
    xv, yv = np.array([0.3, -0.7]), np.array([1.5, 2.0])
    np.testing.assert_allclose(tan["p"].numpy(), np.cos(xv) * yv * [1.0, 2.0] + np.sin(xv) * [0.5, -1.0])
    np.testing.assert_allclose(tan["q"][0].numpy(), 3.0)
    np.testing.assert_array_equal(tan["q"][1].numpy(), [0.0])  # an output that ignores the inputs
    out, jvp_fn = F.linearize(lambda d: (d["a"] ** 2,), {"a": x})
    np.testing.assert_allclose(jvp_fn({"a": tx})[0].numpy(), 2 * xv * [1.0, 2.0])


def test_linearize_jvp_fn_checks_tangents():
    _, jvp_fn = F.linearize(lambda a: a.sin(), t([0.3, -0.7]))
    with pytest.raises(RuntimeError, match=r"^linearize\(f, \*primals\) jvp_fn: tangent dtype"):
        jvp_fn(lucid.ones(2, dtype=lucid.float32))
    with pytest.raises(RuntimeError, match="tangent shape"):
        jvp_fn(lucid.ones(3, dtype=lucid.float64))
    with pytest.raises(RuntimeError, match="structure"):
        jvp_fn(lucid.ones(2, dtype=lucid.float64), lucid.ones(2, dtype=lucid.float64))


# -------------------------------------------------------------------------- functional_call


def test_functional_call_rejects_a_list_of_non_dicts_with_value_error():
    lin = nn.Linear(2, 1)
    with pytest.raises(ValueError, match="^functional_call: expected a dict or a tuple of dicts"):
        F.functional_call(lin, [1, 2], (lucid.ones(1, 2),))
    with pytest.raises(TypeError):
        F.functional_call(lin, 3, (lucid.ones(1, 2),))


def test_functional_call_strict_counts_tied_aliases_as_given():
    net = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 3)).double()
    net[1].weight, net[1].bias = net[0].weight, net[0].bias
    x = t(np.arange(6.0).reshape(2, 3))
    w, b = t(np.eye(3) * 2), t([1.0, 0.0, -1.0])
    out = F.functional_call(net, {"0.weight": w, "0.bias": b}, (x,), strict=True)
    np.testing.assert_allclose(out.numpy(), (x.numpy() * 2 + b.numpy()) * 2 + b.numpy())
    with pytest.raises(RuntimeError, match=r"missing keys: \['1.bias', '1.weight'\]"):
        F.functional_call(net, {"0.weight": w, "0.bias": b}, (x,), strict=True, tie_weights=False)


# ------------------------------------------------------------------------------- rearrange

R_X = np.arange(24.0).reshape(2, 3, 4)
R_CASES = [  # pattern, axes_lengths, NumPy reference
    ("a b c -> c a b", {}, lambda x: x.transpose(2, 0, 1)),
    ("a b c -> (a b) c", {}, lambda x: x.reshape(6, 4)),
    ("a b (c d) -> (d a) c b", {"d": 2}, lambda x: x.reshape(2, 3, 2, 2).transpose(3, 0, 2, 1).reshape(4, 2, 3)),
    ("a (b1 b2) c -> a b1 b2 c", {"b1": 3}, lambda x: x.reshape(2, 3, 1, 4)),
    ("a b c -> a 1 b () c", {}, lambda x: x.reshape(2, 1, 3, 1, 4)),
    ("... c -> c ...", {}, lambda x: x.transpose(2, 0, 1)),
    ("a ... -> (...) a", {}, lambda x: x.transpose(1, 2, 0).reshape(12, 2)),
    ("a b c ... -> ... c b a", {}, lambda x: x.transpose(2, 1, 0)),
    ("a b c -> (c) (b) (a)", {}, lambda x: x.transpose(2, 1, 0)),
]


@pytest.mark.parametrize("pattern,lengths,ref", R_CASES)
def test_rearrange_values_grads_and_vmap(pattern, lengths, ref):
    x = t(R_X)
    out = F.rearrange(x, pattern, **lengths)
    np.testing.assert_array_equal(out.numpy(), ref(R_X))
    w = np.arange(out.numel(), dtype=np.float64).reshape(tuple(out.shape))
    g = F.grad(lambda v: (F.rearrange(v, pattern, **lengths) * t(w)).sum())(x)
    # rearrange only moves elements: the gradient puts each weight back where its element came from
    np.testing.assert_array_equal(ref(g.numpy()), w)
    _, tan = F.jvp(lambda v: F.rearrange(v, pattern, **lengths), (x,), (t(R_X * 2),))
    np.testing.assert_array_equal(tan.numpy(), ref(2 * R_X))
    xs = np.stack([R_X, -R_X], 1)
    got = F.vmap(lambda v: F.rearrange(v, pattern, **lengths), in_dims=1)(t(xs))
    np.testing.assert_array_equal(got.numpy(), np.stack([ref(R_X), ref(-R_X)]))


def test_rearrange_sequences_units_and_errors():
    parts = [t(R_X[0]), t(R_X[1])]
    np.testing.assert_array_equal(F.rearrange(parts, "n b c -> b (n c)").numpy(),
                                  R_X.transpose(1, 0, 2).reshape(3, 8))
    assert F.rearrange(lucid.ones(2, 1, 3), "a 1 b -> b a").shape == (3, 2)
    assert F.rearrange(lucid.ones(()), " -> 1 1").shape == (1, 1)
    x = t(R_X)
    for pattern, lengths, match in [("a b c -> b", {}, "only on one side"), ("a b -> a b", {}, "dimension"),
                                    ("a a c -> a c", {}, "more than once"), ("a b c -> a b 2 c", {}, "size 1"),
                                    ("a b c - a b c", {}, "'->'"), ("a (b c) d -> a b c d", {}, "infer"),
                                    ("a b (c d) -> a b c d", {"c": 5}, "split"), ("a b c -> a b c", {"z": 2}, "z"),
                                    ("a b c -> a (b c", {}, "parentheses"), ("a b c -> ... a b c", {}, "'...'"),
                                    ("a 1 c -> a c", {}, "unit axis")]:
        with pytest.raises(ValueError, match=f"^rearrange: .*{match}"):
            F.rearrange(x, pattern, **lengths)


# ---------------------------------------------------------------- optional PyTorch parity


def test_torch_parity_mutations_out_dims_and_rearrange():
    torch = pytest.importorskip("torch")
    for lib in (torch, lucid):
        y = lib.tensor(D.copy())
        out = lib.func.vmap(lambda v: {"a": v.mul_(2), "b": v.sum()}, in_dims=1, out_dims={"a": -1, "b": 0})(y)
        if lib is torch:
            want = (y.numpy().copy(), out["a"].numpy(), out["b"].numpy())
    np.testing.assert_array_equal(y.numpy(), want[0])
    np.testing.assert_array_equal(out["a"].numpy(), want[1])
    np.testing.assert_array_equal(out["b"].numpy(), want[2])
    for pattern, lengths, _ in R_CASES:
        want = torch.func.rearrange(torch.tensor(R_X), pattern, **lengths).numpy()
        np.testing.assert_array_equal(F.rearrange(t(R_X), pattern, **lengths).numpy(), want)
