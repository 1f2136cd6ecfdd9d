"""Regressions fixed by the lead in session 13 (outside the sweeps' own files)."""
import numpy as np
import pytest

import lucid
from lucid.func import grad, jvp, vmap


def test_is_contiguous_under_vmap_reads_each_example_layout():
    # Raised "a batched tensor can't be turned into data"; now read from the example's strides,
    # as stride() is (each example its own row-major storage).
    x = lucid.randn(3, 4, 5)
    as_flag = lambda t: lucid.tensor(t.is_contiguous())
    assert vmap(as_flag)(x).tolist() == [True] * 3
    assert vmap(lambda t: lucid.tensor(t.t().is_contiguous()))(x).tolist() == [False] * 3
    assert vmap(lambda t: lucid.tensor(t.mT.contiguous().is_contiguous()))(x).tolist() == [True] * 3
    # a size-1 dim never breaks contiguity (PyTorch's rule)
    assert vmap(lambda t: lucid.tensor(t[:1].t().is_contiguous()))(x).tolist() == [True] * 3


def test_is_contiguous_under_grad_and_jvp():
    seen = []

    def f(t):
        seen.append((t.is_contiguous(), t.t().is_contiguous()))
        return (t * t).sum()

    x = lucid.randn(2, 3, dtype=lucid.float64)
    assert lucid.allclose(grad(f)(x), 2 * x)
    jvp(f, (x,), (lucid.ones_like(x),))
    assert seen == [(True, False), (True, False)]


def test_is_exporting_true_only_while_export_traces():
    from lucid.compiler import is_compiling, is_exporting

    seen = []

    class Scale(lucid.nn.Module):
        def forward(self, x):
            seen.append((is_exporting(), is_compiling()))
            return x * (3 if is_exporting() else 2)

    ep = lucid.export.export(Scale(), (lucid.ones(2),))
    assert seen and all(flags == (True, True) for flags in seen)
    assert ep.module()(lucid.ones(2)).tolist() == [3.0, 3.0]  # the export branch is the one kept
    assert Scale()(lucid.ones(2)).tolist() == [2.0, 2.0]
    assert (is_exporting(), is_compiling()) == (False, False)
    lucid.fx.symbolic_trace(Scale())  # fx tracing is not export (PyTorch: False there too)
    assert seen[-1] == (False, False)


def test_is_exporting_resets_when_export_fails():
    from lucid.compiler import is_exporting

    class Bad(lucid.nn.Module):
        def forward(self, x):
            raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        lucid.export.export(Bad(), (lucid.ones(2),))
    assert not is_exporting()


def test_export_guard_failure_is_also_an_assertion_error():
    # PyTorch 2.13's ep.module() raises AssertionError("Guard failed: ...") on a size it was not
    # exported for; Lucid's RuntimeError (earlier PyTorch's type, kept for old callers) is both.
    class Double(lucid.nn.Module):
        def forward(self, x):
            return x * 2

    ep = lucid.export.export(Double(), (lucid.ones(2, 3),))
    with pytest.raises(AssertionError, match=r"shape\[0\] to be equal to 2, but got 3"):
        ep.module()(lucid.ones(3, 3))
    with pytest.raises(RuntimeError, match=r"shape\[0\] to be equal to 2, but got 3"):
        ep.module()(lucid.ones(3, 3))
    assert ep.module()(lucid.ones(2, 3)).tolist() == [[2.0] * 3] * 2


def _scaled_step(scaler, grad_values):
    w = lucid.nn.Parameter(lucid.tensor([1.0, 2.0]))
    opt = lucid.optim.SGD([w], lr=0.1)
    scaler.scale((w * lucid.tensor(grad_values)).sum()).backward()
    scaler.step(opt)
    return w


def test_grad_scaler_update_without_scale_raises_as_pytorch():
    # Lucid returned silently (and dropped new_scale); PyTorch asserts
    scaler = lucid.amp.GradScaler("cpu")
    with pytest.raises(AssertionError, match="Attempted update but the scale is None"):
        scaler.update()
    with pytest.raises(RuntimeError, match="Attempted update"):
        scaler.update(new_scale=5.0)
    assert scaler.get_scale() == 2.0 ** 16  # nothing changed


def test_grad_scaler_errors_are_pytorch_assertions_and_old_types():
    with pytest.raises(AssertionError, match="growth factor must be > 1.0"):
        lucid.amp.GradScaler("cpu", growth_factor=1.0)
    with pytest.raises(ValueError, match="backoff factor must be < 1.0"):
        lucid.amp.GradScaler("cpu", backoff_factor=1.5)
    w = lucid.nn.Parameter(lucid.tensor([1.0]))
    w.sum().backward()
    with pytest.raises(AssertionError, match="Attempted step but the scale is None"):
        lucid.amp.GradScaler("cpu").step(lucid.optim.SGD([w], lr=0.1))


def test_grad_scaler_new_scale_and_backoff_values():
    scaler = lucid.amp.GradScaler("cpu", init_scale=8.0, growth_interval=1)
    w = _scaled_step(scaler, [1.0, float("inf")])  # skipped: w unchanged, scale backed off
    scaler.update()
    assert w.tolist() == [1.0, 2.0] and scaler.get_scale() == 4.0
    w = _scaled_step(scaler, [1.0, 1.0])
    scaler.update(new_scale=lucid.tensor([3.0]))
    assert lucid.allclose(w.detach(), lucid.tensor([0.9, 1.9])) and scaler.get_scale() == 3.0


@pytest.mark.parametrize("ord", [2, 3, 1, 0, float("inf"), -1, -0.5])
def test_vector_norm_of_a_scalar_over_dim_0(ord):
    # raised numpy's AxisError for the powered norms; PyTorch: the norm of one element
    x = lucid.tensor(-2.0, dtype=lucid.float64, requires_grad=True)
    got = lucid.linalg.vector_norm(x, ord, 0)
    assert got.shape == () and got.item() == (1.0 if ord == 0 else 2.0)
    assert lucid.linalg.vector_norm(x, ord, -1, keepdim=True).shape == ()
    got.backward()
    assert x.grad.item() == (0.0 if ord == 0 else -1.0)


@pytest.mark.parametrize("ord", [-1, -0.5, float("-inf"), float("inf")])
def test_vector_norm_with_no_identity_over_an_empty_dim_raises(ord):
    # negative powers returned inf over an empty dim; PyTorch refuses (no identity)
    with pytest.raises(RuntimeError, match=r"cannot compute the .* norm on the dimension 0 because this dimension is empty"):
        lucid.linalg.vector_norm(lucid.zeros(0, 3), ord, 0)
    assert lucid.linalg.vector_norm(lucid.zeros(0, 3), ord, 1).shape == (0,)  # nothing to reduce: fine
    assert lucid.linalg.vector_norm(lucid.zeros(0, 3), 2, 0).tolist() == [0.0, 0.0, 0.0]


def test_vector_norm_ord_types_as_pytorch():
    x = lucid.tensor([3.0, -4.0])
    with pytest.raises(TypeError, match="ord must be a number"):  # was RuntimeError only
        lucid.linalg.vector_norm(x, (0,))
    with pytest.raises(RuntimeError, match="ord must be a number"):
        lucid.linalg.vector_norm(x, "fro")
    assert lucid.linalg.vector_norm(x, True).item() == 7.0  # PyTorch reads True as 1 (Lucid refused)


def test_function_forms_route_sparse_tensors_to_their_methods():
    # lucid.sum(s) / t / transpose / index_select / narrow_copy raised NotImplementedError
    s = lucid.tensor([[0.0, 1.0], [2.0, 0.0]]).to_sparse()
    assert lucid.sum(s).item() == 3.0
    assert lucid.sum(s, 0).to_dense().tolist() == [2.0, 1.0]
    assert lucid.t(s).to_dense().tolist() == [[0.0, 2.0], [1.0, 0.0]]
    assert lucid.transpose(s, 0, 1).to_dense().tolist() == [[0.0, 2.0], [1.0, 0.0]]
    assert lucid.index_select(s, 0, lucid.tensor([1, 1])).to_dense().tolist() == [[2.0, 0.0], [2.0, 0.0]]
    assert lucid.narrow_copy(s, 1, 0, 1).to_dense().tolist() == [[0.0], [2.0]]
    assert lucid.sum(lucid.ones(3)).item() == 3.0 and lucid.t(lucid.ones(2, 3)).shape == (3, 2)


def test_layer_norm_and_multihead_attention_reprs_are_pytorchs():
    nn = lucid.nn
    assert repr(nn.LayerNorm(3, bias=False)) == "LayerNorm((3,), eps=1e-05, elementwise_affine=True, bias=False)"
    assert repr(nn.LayerNorm(3, elementwise_affine=False)) == (
        "LayerNorm((3,), eps=1e-05, elementwise_affine=False, bias=False)")
    assert repr(nn.MultiheadAttention(4, 2)) == (
        "MultiheadAttention(\n  (out_proj): NonDynamicallyQuantizableLinear(in_features=4, out_features=4, "
        "bias=True)\n)")


# ---- engine: PyTorch's checks that Lucid skipped (found by the autograd API sweep)

def test_retained_grad_of_a_non_leaf_accumulates_across_backward_calls():
    x = lucid.tensor([1.0, 2.0], requires_grad=True)
    h = x * 2
    h.retain_grad()
    y = (h * h).sum()
    y.backward(retain_graph=True)
    y.backward()
    assert h.grad.tolist() == [8.0, 16.0]  # 2 * (2h); Lucid overwrote: [4, 8]


def test_anomaly_mode_checks_nan_only():
    x = lucid.tensor([0.0, 1.0], dtype=lucid.float64, requires_grad=True)
    with lucid.autograd.detect_anomaly():
        x.sqrt().sum().backward()  # d sqrt at 0 is inf: a value, not an anomaly (PyTorch)
    assert x.grad.tolist() == [float("inf"), 0.5]


def test_backward_error_names_the_element_and_refuses_empty_inputs():
    a = lucid.tensor([1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="element 1 of tensors does not require grad"):
        lucid.autograd.backward([a * 2, lucid.ones(1)], [lucid.ones(1), lucid.ones(1)])
    with pytest.raises(RuntimeError, match="'inputs' argument to backward\\(\\) cannot be empty"):
        (a * 2).sum().backward(inputs=[])
    assert a.grad is None


def test_hook_may_not_change_dtype_or_shape():
    x = lucid.tensor([1.0, 2.0], requires_grad=True)
    h = x * 1
    h.register_hook(lambda g: g.double())
    with pytest.raises(RuntimeError, match="has changed the type of value"):
        (h * 2).sum().backward()
    y = lucid.tensor([1.0, 2.0], requires_grad=True)
    y.register_hook(lambda g: g.sum())
    with pytest.raises(RuntimeError, match="has changed the type of value"):
        (y * 2).sum().backward()


def test_gradient_seed_checks_as_pytorch():
    x = lucid.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="mismatch in shape"):
        (x * 2).sum().backward(lucid.tensor([1.0]))  # (1,) for a 0-d output
    (x * 2)[:1].backward(lucid.tensor(1.0))  # a 0-d gradient for a one-element output: fine
    z = lucid.tensor([1 + 1j], requires_grad=True)
    with pytest.raises(RuntimeError, match="same dtype"):
        (z * 2).backward(lucid.tensor([1.0]))


def test_integer_grad_outputs_with_create_graph():
    # gave zeros (the int seed truncated the cotangents); PyTorch: cos(x)
    x = lucid.tensor([1.0, 2.0], dtype=lucid.float64, requires_grad=True)
    g = lucid.autograd.grad(x.sin(), x, grad_outputs=lucid.ones(2, dtype=lucid.int64), create_graph=True)
    assert lucid.allclose(g, x.detach().cos())
    assert lucid.allclose(lucid.autograd.grad(g.sum(), x), -x.detach().sin())


def test_tensor_where_method_takes_self_as_the_values():
    # x.where(cond, y) read x as the condition: [1, 2].where([T, F], [5, 6]) gave [1, 0]
    x = lucid.tensor([1.0, 2.0], requires_grad=True)
    out = x.where(lucid.tensor([True, False]), lucid.tensor([5.0, 6.0]))
    assert out.tolist() == [1.0, 6.0]
    out.sum().backward()
    assert x.grad.tolist() == [1.0, 0.0]
    assert lucid.tensor([1, 2]).where(lucid.tensor([False, True]), 0).tolist() == [0, 2]


def test_integer_scores_in_cross_entropy_and_nll_loss_are_refused():
    # gave tensor(0.) silently (the class pick truncated); PyTorch: NotImplementedError
    F = lucid.nn.functional
    scores, target = lucid.tensor([[1, 0, 2], [3, 1, 0]]), lucid.tensor([0, 2])
    for fn in (F.cross_entropy, F.nll_loss):
        with pytest.raises(NotImplementedError, match="must be floating point"):
            fn(scores, target)
    got = F.cross_entropy(scores.double(), target).item()
    assert abs(got - 2.2887264) < 1e-6


def test_in_place_subtraction_of_a_bool_is_refused():
    # x.sub_(mask) subtracted the mask; PyTorch refuses as `-` does
    x = lucid.tensor([1.0, 2.0])
    with pytest.raises(RuntimeError, match="Subtraction, the `-` operator, with a bool tensor"):
        x.sub_(lucid.tensor([True, False]))
    with pytest.raises(RuntimeError, match="with a bool tensor"):
        x -= True
    assert x.tolist() == [1.0, 2.0]


@pytest.mark.parametrize("name", ["addmm", "baddbmm", "addbmm", "prelu", "vecdot"])
def test_autocast_casts_pytorchs_cpu_lower_precision_composites_whole(name):
    # these kept float32 (their additions/sums promoted the float16 product back); PyTorch's CPU
    # autocast list runs each as one float16 op
    a = lucid.tensor(np.arange(16.0).reshape(4, 4) / 16, dtype=lucid.float32, requires_grad=True)
    v = lucid.tensor(np.linspace(-1, 1, 4), dtype=lucid.float32)
    call = {"addmm": lambda: lucid.addmm(v, a, a), "baddbmm": lambda: lucid.baddbmm(a[None], a[None], a[None]),
            "addbmm": lambda: lucid.addbmm(a, a[None], a[None]),
            "prelu": lambda: lucid.nn.functional.prelu(a - 0.5, lucid.tensor([0.25])),
            "vecdot": lambda: lucid.linalg.vecdot(a, a)}[name]
    with lucid.autocast(lucid.get_default_device().type, dtype=lucid.float16):  # the tensors' device
        out = call()
    assert out.dtype == lucid.float16
    ref = call()
    assert ref.dtype == lucid.float32
    np.testing.assert_allclose(out.float().detach().numpy(), ref.detach().numpy(), rtol=2e-3, atol=2e-3)
    out.float().sum().backward()  # the cast is differentiable: the float32 leaf gets a float32 grad
    assert a.grad.dtype == lucid.float32


def test_autocast_float32_composites_still_cast_up_and_inner_ops_are_not_recast():
    F = lucid.nn.functional
    h = lucid.ones(2, 3, dtype=lucid.float16)
    with lucid.autocast(lucid.get_default_device().type, dtype=lucid.float16):
        assert F.mse_loss(h, h * 2).dtype == lucid.float32
        # layer_norm is on CUDA's float32 list (the strict stand-in takes it), not the CPU's
        cuda = lucid.get_default_device().type != "cpu"
        assert F.layer_norm(h, (3,)).dtype == (lucid.float32 if cuda else lucid.float16)
        assert (h.float() @ h.float().t()).dtype == lucid.float16


def test_ldl_solve_refuses_to_differentiate_instead_of_a_zero_gradient():
    # d/dB (ldl_solve(LD, piv, B) + B).sum() came out as ones (B's path through the solve dropped)
    L = lucid.linalg
    LD, piv = L.ldl_factor(lucid.tensor([[4.0, 2.0], [2.0, 3.0]]))
    B = lucid.tensor([[6.0], [5.0]], requires_grad=True)
    X = L.ldl_solve(LD, piv, B)
    assert X.tolist() == [[1.0], [1.0]] and X.requires_grad
    with pytest.raises(RuntimeError, match="ldl_solve: the derivative is not implemented"):
        (X + B).sum().backward()
    assert B.grad is None
    with pytest.raises(NotImplementedError, match="forward-mode derivative"):
        jvp(lambda b: L.ldl_solve(LD, piv, b), (B.detach(),), (lucid.ones(2, 1),))
    assert vmap(lambda b: L.ldl_solve(LD, piv, b))(lucid.ones(3, 2, 1)).shape == (3, 2, 1)


def test_retained_grad_after_an_in_place_change_is_the_new_values_gradient():
    # gave the old value's gradient too ([36, 72] before, [48, 96] once retained grads accumulated)
    x = lucid.tensor([1.0, 2.0], requires_grad=True)
    h = x * 2
    h.retain_grad()
    h.mul_(3)
    (h * h).sum().backward()
    assert h.grad.tolist() == [12.0, 24.0] and x.grad.tolist() == [72.0, 144.0]
    x = lucid.tensor([1.0, 2.0], requires_grad=True)
    h = x * 2
    h.retain_grad()
    h[0:1].mul_(3)  # through a view
    (h * h).sum().backward()
    assert h.grad.tolist() == [12.0, 8.0] and x.grad.tolist() == [72.0, 16.0]


def test_lstsq_residuals_under_vmap_and_grad():
    # vmap/grad dropped the residuals (the rank had no value to read): shape (2, 0) for gelsd
    L = lucid.linalg
    rng = np.random.default_rng(0)
    A = lucid.tensor(rng.standard_normal((2, 2, 4, 3)))
    B = lucid.tensor(rng.standard_normal((2, 2, 4, 1)))
    got = vmap(lambda a, b: L.lstsq(a, b, driver="gelsd").residuals)(A, B)
    want = L.lstsq(A, B, driver="gelsd").residuals
    assert got.shape == (2, 2, 1)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-10)
    a0, b0 = A[0, 0].numpy(), B[0, 0].numpy()
    x = np.linalg.lstsq(a0, b0, rcond=None)[0]
    np.testing.assert_allclose(want[0, 0].numpy(), ((a0 @ x - b0) ** 2).sum(0), rtol=1e-10)
    g = grad(lambda a: L.lstsq(a, B[0, 0], driver="gelsd").residuals.sum())(A[0, 0])
    eps, fd = 1e-6, np.zeros((4, 3))
    res = lambda a: ((a @ np.linalg.lstsq(a, b0, rcond=None)[0] - b0) ** 2).sum()
    for i in range(4):
        for j in range(3):
            d = np.zeros((4, 3)); d[i, j] = eps
            fd[i, j] = (res(a0 + d) - res(a0 - d)) / (2 * eps)
    np.testing.assert_allclose(g.numpy(), fd, rtol=1e-5, atol=1e-8)
    assert vmap(lambda a, b: L.lstsq(a, b).residuals)(A[0], B[0]).shape == (2, 0)  # gelsy: none, as PyTorch


def test_integer_and_bool_casts_do_not_require_grad():
    # x.long() of a tensor that requires grad kept requires_grad=True and a CastBackward node
    x = lucid.tensor([1.5, 2.5], requires_grad=True)
    for out in (x.long(), x.int(), x.bool(), x.to(lucid.int64), x.type(lucid.uint8)):
        assert not out.requires_grad and out.grad_fn is None
    assert x.double().requires_grad and x.to(lucid.complex64).requires_grad  # float/complex casts still do
    assert grad(lambda t: (t * t.long()).sum())(lucid.tensor([1.5, 2.5])).tolist() == [1.0, 2.0]
    assert vmap(lambda t: t.long())(lucid.tensor([[1.5], [2.5]])).tolist() == [[1], [2]]


def test_numpy_scalars_promote_as_python_numbers():
    # float32 tensor + np.float64 gave float64; PyTorch treats a NumPy scalar as a (weak) number
    t = lucid.tensor([1.0, 2.0])
    assert (t + np.float64(2.0)).dtype == lucid.float32
    assert (np.float64(2.0) * t).dtype == lucid.float32 and (np.float64(2.0) * t).tolist() == [2.0, 4.0]
    assert (lucid.tensor([1, 2]) + np.float32(0.5)).dtype == lucid.float32
    assert (lucid.tensor([1, 2]) * np.int64(3)).dtype == lucid.int64
    assert (t + np.complex128(1j)).dtype == lucid.complex64
    assert (t.double() * np.float32(2.0)).dtype == lucid.float64


def test_tensor_eq_none_isclose_negative_tolerance_and_view_as():
    t = lucid.tensor([1, 2])
    assert (t == None) is False and (t != None) is True  # noqa: E711  (PyTorch: no error)
    assert (t == "a") is False
    with pytest.raises(RuntimeError, match="rtol must be greater than or equal to zero"):
        lucid.isclose(lucid.ones(2), lucid.ones(2), rtol=-1)  # was silently accepted
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        lucid.arange(6.0).reshape(2, 3).t().view_as(lucid.zeros(6))  # copied silently
    v = lucid.arange(6.0).view_as(lucid.zeros(2, 3))
    assert v.shape == (2, 3) and v._base is not None


def test_narrow_integer_dtypes_take_python_ints_by_pytorchs_rule():
    # NumPy 2 raised OverflowError for tensor([-5], dtype=uint8) and fill_(-1) on uint8
    assert lucid.tensor([-5, -255], dtype=lucid.uint8).tolist() == [251, 1]
    assert lucid.zeros(2, dtype=lucid.uint8).fill_(-1).tolist() == [255, 255]
    for value, dtype in [(256, lucid.uint8), (-256, lucid.uint8), (200, lucid.int8), (2 ** 31, lucid.int32)]:
        with pytest.raises(RuntimeError, match="without overflow"):
            lucid.tensor([value], dtype=dtype)
    with pytest.raises(OverflowError):  # still the old type too
        lucid.tensor([300], dtype=lucid.uint8)
    with pytest.raises(RuntimeError, match="fill_: value 300"):
        lucid.zeros(1, dtype=lucid.uint8).fill_(300)


def test_to_takes_pytorchs_positional_non_blocking_and_copy():
    x = lucid.tensor([1.0, 2.0])
    y = x.to(lucid.float32, False, True)  # raised "Cannot interpret 'True' as a data type"
    assert y is not x and y.tolist() == x.tolist()
    assert x.to(lucid.float32, False) is x and x.to("cpu", lucid.float64, False, True).dtype == lucid.float64


def test_out_reaches_decorated_top_level_functions():
    # normal, multinomial, histc, histogram (device-guard decorated) and addmm/baddbmm/addbmm
    # (autocast-decorated) refused out= : accept_out skipped anything with __wrapped__
    y = lucid.empty(2, 2)
    assert lucid.addmm(lucid.ones(2, 2), lucid.eye(2), lucid.eye(2), out=y) is y
    assert y.tolist() == [[2.0, 1.0], [1.0, 2.0]]
    z = lucid.empty(1, 2, 2)
    assert lucid.baddbmm(lucid.ones(1, 2, 2), lucid.eye(2)[None], lucid.eye(2)[None], out=z) is z
    assert lucid.normal(lucid.zeros(3), 1.0, out=lucid.empty(3)).shape == (3,)
    idx = lucid.empty(2, dtype=lucid.int64)
    assert lucid.multinomial(lucid.ones(3), 2, out=idx) is idx
    h = lucid.empty(4)
    assert lucid.histc(lucid.tensor([1.0, 2.0, 1.0]), 4, 0, 3, out=h) is h and h.tolist() == [0.0, 2.0, 1.0, 0.0]


def test_zero_d_index_of_a_one_d_input_is_one_position():
    # gather/scatter/scatter_add broadcast a 0-d index over the whole 1-d input (silently wrong)
    x = lucid.arange(10.0)
    assert lucid.gather(x, 0, lucid.tensor(3)).item() == 3.0 and lucid.gather(x, 0, lucid.tensor(3)).shape == ()
    assert lucid.zeros(4).scatter_(0, lucid.tensor(2), value=1).tolist() == [0.0, 0.0, 1.0, 0.0]
    assert lucid.zeros(4).scatter_add(0, lucid.tensor(1), lucid.tensor(7.0)).tolist() == [0.0, 7.0, 0.0, 0.0]
    assert lucid.zeros(4).scatter_reduce(0, lucid.tensor(1), lucid.tensor(7.0), "amax").tolist() == [0.0, 7.0, 0.0, 0.0]
    w = lucid.arange(4.0, requires_grad=True)
    lucid.gather(w, 0, lucid.tensor(2)).backward()
    assert w.grad.tolist() == [0.0, 0.0, 1.0, 0.0]


def test_strides_of_fresh_empty_tensors_are_pytorchs():
    # NumPy reports 0 for an empty array's dims; PyTorch's contiguous strides read sizes as >= 1
    assert lucid.empty(0).stride() == (1,) and lucid.zeros(2, 0).stride() == (1, 1)
    assert lucid.zeros(2, 0, 3).stride() == (3, 3, 1) and lucid.zeros(0, 3, 2).stride() == (6, 2, 1)
    assert lucid.zeros(2, 3)[:, :0].stride() == (3, 1)  # a view keeps its base's steps
    lucid.testing.assert_close(lucid.zeros(2, 0), lucid.zeros(2, 0), check_stride=True)


def test_dlpack_errors_are_pytorchs_buffer_errors():
    from lucid.utils.dlpack import from_dlpack, to_dlpack

    x = lucid.ones(2, requires_grad=True, device="cpu")  # DLPack is a CPU exchange here
    with pytest.raises(BufferError, match="requires grad"):  # PyTorch's type; still a RuntimeError
        x.__dlpack__()
    with pytest.raises(RuntimeError, match="requires grad"):
        np.from_dlpack(x)
    with pytest.raises(BufferError, match="can't import"):
        from_dlpack(np.array(["a"]))
    with pytest.raises(TypeError, match="to_dlpack: expected a Tensor"):  # was AttributeError '_rg'
        to_dlpack(1)
    assert from_dlpack(to_dlpack(x)).tolist() == [1.0, 1.0]  # the legacy export takes it, as PyTorch's
