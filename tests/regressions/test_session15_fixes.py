"""Session 15's own fixes: optimizer state is Tensors, as PyTorch's (it was raw arrays:
``opt.state[p]["exp_avg"].zero_()``, ``.norm()`` or ``.to(device)`` failed), and ``diagonal``
of a 1-d tensor raises PyTorch's IndexError."""
import numpy as np
import pytest

import lucid
from lucid import optim


def _adam_moments(grads, b1=0.9, b2=0.999):
    m = v = 0.0
    for g in grads:
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
    return m, v


@pytest.mark.parametrize("name", ["Adam", "AdamW", "SGD", "RMSprop", "Adagrad", "Adamax", "NAdam", "RAdam",
                                  "ASGD", "Rprop", "Adadelta", "Adafactor", "SparseAdam"])
def test_array_state_is_tensors_that_keep_their_identity(name):
    p = lucid.tensor([1.0, -2.0], dtype=lucid.float64, requires_grad=True)
    kw = {"momentum": 0.9} if name == "SGD" else {}
    opt = getattr(optim, name)([p], lr=0.1, **kw)
    p.grad = lucid.tensor([0.5, 0.25], dtype=lucid.float64)
    opt.step()
    first = dict(opt.state[p])
    arrays = {k: v for k, v in first.items() if isinstance(v, lucid.Tensor)}
    assert arrays, name
    for k, v in arrays.items():
        assert v.dtype == lucid.float64 and v.device == p.device and not v.requires_grad, k
    p.grad = lucid.tensor([0.5, 0.25], dtype=lucid.float64)
    opt.step()
    # the rules change momentum buffers and moments in place: the user's Tensor sees the update
    for k in ("exp_avg", "exp_avg_sq", "momentum_buffer", "square_avg", "sum", "acc_delta"):
        if k in arrays:
            assert opt.state[p][k] is arrays[k], k


def test_adam_moments_are_updated_in_place_and_a_reset_is_seen():
    p = lucid.tensor([1.0, -2.0], dtype=lucid.float64, requires_grad=True)
    opt = optim.Adam([p], lr=0.1)
    g = np.array([0.5, -1.5])
    for _ in range(3):
        p.grad = lucid.tensor(g, dtype=lucid.float64)
        opt.step()
    m, v = _adam_moments([g] * 3)
    np.testing.assert_allclose(opt.state[p]["exp_avg"].numpy(), m, rtol=1e-14)
    np.testing.assert_allclose(opt.state[p]["exp_avg_sq"].numpy(), v, rtol=1e-14)
    assert float(opt.state[p]["exp_avg"].norm()) == pytest.approx(np.linalg.norm(m), rel=1e-14)
    opt.state[p]["exp_avg"].zero_()  # e.g. resetting moments after a restart
    before = p.detach().numpy().copy()
    p.grad = lucid.tensor(g, dtype=lucid.float64)
    opt.step()
    m4 = 0.1 * g  # from a zeroed first moment
    v4 = 0.999 * v + 0.001 * g * g
    want = before - 0.1 / (1 - 0.9 ** 4) * m4 / (np.sqrt(v4) / np.sqrt(1 - 0.999 ** 4) + 1e-8)
    np.testing.assert_allclose(p.detach().numpy(), want, rtol=1e-13)


def test_a_graph_that_saved_a_state_tensor_raises_after_the_step():
    p = lucid.tensor([1.0, 2.0], requires_grad=True)
    opt = optim.Adam([p], lr=0.1)
    p.grad = lucid.ones(2)
    opt.step()
    w = lucid.ones(2, requires_grad=True)
    y = (w * opt.state[p]["exp_avg"]).sum()  # mul saves the moment for w's gradient
    p.grad = lucid.ones(2)
    opt.step()  # changes it in place, as PyTorch's
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_a_users_tensor_put_in_the_state_is_used():
    p = lucid.tensor([1.0, 2.0], dtype=lucid.float64, requires_grad=True)
    opt = optim.SGD([p], lr=0.5, momentum=0.5)
    opt.state[p]["momentum_buffer"] = lucid.tensor([2.0, -2.0], dtype=lucid.float64)
    p.grad = lucid.tensor([1.0, 1.0], dtype=lucid.float64)
    opt.step()
    buf = np.array([0.5 * 2.0 + 1.0, 0.5 * -2.0 + 1.0])
    np.testing.assert_allclose(opt.state[p]["momentum_buffer"].numpy(), buf)
    np.testing.assert_allclose(p.detach().numpy(), np.array([1.0, 2.0]) - 0.5 * buf)


def test_complex_state_is_complex_of_the_parameters_shape():
    p = lucid.tensor([1 + 2j, 3 - 1j], requires_grad=True)
    opt = optim.Adam([p], lr=0.1)
    for _ in range(2):
        p.grad = lucid.tensor([0.5 - 1j, 2 + 0.25j])
        opt.step()
    m, v = opt.state[p]["exp_avg"], opt.state[p]["exp_avg_sq"]
    assert m.dtype == lucid.complex64 and tuple(m.shape) == (2,)
    g = np.array([0.5 - 1j, 2 + 0.25j])
    pairs = np.stack([g.real, g.imag], -1)  # re and im are independent reals (PyTorch's view_as_real)
    em, ev = _adam_moments([pairs] * 2)
    np.testing.assert_allclose(m.numpy(), em[:, 0] + 1j * em[:, 1], rtol=1e-6)
    np.testing.assert_allclose(v.numpy(), ev[:, 0] + 1j * ev[:, 1], rtol=1e-6)
    np.testing.assert_allclose(p.detach().numpy(), [0.8 + 2.2j, 2.8 - 1.2j], rtol=1e-6)
    # a checkpoint round trip keeps them complex and the next step equal
    other = lucid.tensor(p.detach().numpy(), requires_grad=True)
    opt2 = optim.Adam([other], lr=0.1)
    opt2.load_state_dict(opt.state_dict())
    assert opt2.state[other]["exp_avg"].dtype == lucid.complex64
    for q, o in ((p, opt), (other, opt2)):
        q.grad = lucid.tensor([1j, -1.0])
        o.step()
    np.testing.assert_array_equal(other.detach().numpy(), p.detach().numpy())


def test_complex_state_matches_torch():
    torch = pytest.importorskip("torch")
    g = np.array([0.5 - 1j, 2 + 0.25j], dtype=np.complex64)
    tp = torch.nn.Parameter(torch.tensor([1 + 2j, 3 - 1j], dtype=torch.complex64))
    lp = lucid.tensor([1 + 2j, 3 - 1j], dtype=lucid.complex64, requires_grad=True)
    topt, lopt = torch.optim.Adam([tp], lr=0.1), optim.Adam([lp], lr=0.1)
    for _ in range(3):
        tp.grad, lp.grad = torch.tensor(g), lucid.tensor(g)
        topt.step()
        lopt.step()
    for k in ("exp_avg", "exp_avg_sq"):
        np.testing.assert_allclose(lopt.state[lp][k].numpy(), topt.state[tp][k].numpy(), rtol=1e-6)


def test_a_differentiable_step_leaves_an_eager_steps_tensor_alone():
    w = lucid.tensor([1.0, 2.0], dtype=lucid.float64, requires_grad=True)
    p = w.clone()
    opt = optim.SGD([p], lr=0.1, momentum=0.9, differentiable=True)
    held = opt.state[p]["momentum_buffer"] = lucid.tensor([1.0, 1.0], dtype=lucid.float64)  # a plain Tensor
    p.grad = lucid.tensor([1.0, 1.0], dtype=lucid.float64) * w  # depends on w
    opt.step()
    np.testing.assert_array_equal(held.numpy(), [1.0, 1.0])  # not changed under the user's feet
    new = opt.state[p]["momentum_buffer"]
    assert new is not held and new.grad_fn is not None
    np.testing.assert_allclose(new.detach().numpy(), [0.9 + 1.0, 0.9 + 2.0])
    # d(sum p)/dw through the update: p = p0 - 0.1 * (0.9 * 1 + w)
    (gw,) = lucid.autograd.grad(p.sum(), [w])
    np.testing.assert_allclose(gw.numpy(), [1.0 - 0.1, 1.0 - 0.1])


def test_adagrad_makes_its_state_at_construction_as_tensors():
    p = lucid.zeros(3, requires_grad=True)
    opt = optim.Adagrad([p], initial_accumulator_value=0.25)
    st = opt.state_dict()["state"][0]
    assert isinstance(opt.state[p]["sum"], lucid.Tensor) and st["step"] == 0
    np.testing.assert_array_equal(opt.state[p]["sum"].numpy(), [0.25] * 3)


@pytest.mark.parametrize("shape", [(2,), ()])
def test_diagonal_of_fewer_than_two_dims_is_an_index_error(shape):
    with pytest.raises(IndexError, match="^diagonal: dimension"):
        lucid.diagonal(lucid.ones(*shape))


# ------------------------------------------------------------------ Tensor.grad_dtype (PyTorch 2.13)

def test_grad_dtype_gives_float32_gradients_to_float16_weights():
    w = lucid.tensor([1.0, 2.0], dtype=lucid.float16, requires_grad=True)
    assert w.grad_dtype == lucid.float16  # the tensor's own by default
    w.grad_dtype = lucid.float32
    (w * 3).sum().backward()
    (w * 3).sum().backward()  # accumulates in float32
    assert w.grad.dtype == lucid.float32
    np.testing.assert_array_equal(w.grad.numpy(), [6.0, 6.0])
    w.grad = None
    w.grad_dtype = None  # gradients keep the dtype they arrive with
    (w * 3).sum().backward()
    assert w.grad.dtype == lucid.float16 and w.grad_dtype is None
    # an optimizer steps a float16 weight with its float32 gradient
    p = lucid.nn.Parameter(lucid.ones(2, dtype=lucid.float16))
    p.grad_dtype = lucid.float32
    (p * 2).sum().backward()
    optim.SGD([p], lr=0.1).step()
    assert p.dtype == lucid.float16 and p.grad.dtype == lucid.float32
    np.testing.assert_allclose(p.detach().numpy().astype(np.float64), [0.8, 0.8], rtol=1e-3)


def test_grad_dtype_rules_as_torch():
    w = lucid.tensor([1.0, 2.0], dtype=lucid.float16, requires_grad=True)
    with pytest.raises(RuntimeError, match="grad_dtype"):
        w.grad = lucid.ones(2, dtype=lucid.float64)  # must match grad_dtype (the dtype by default)
    w.grad_dtype = None
    w.grad = lucid.ones(2, dtype=lucid.float64)  # None: any dtype
    with pytest.raises(RuntimeError, match="already a gradient with dtype"):
        w.grad_dtype = lucid.float16
    y = w * 2
    with pytest.raises(RuntimeError, match="only be accessed on leaf"):
        y.grad_dtype
    with pytest.raises(RuntimeError, match="only be set on leaf"):
        y.grad_dtype = lucid.float32


def test_grad_dtype_matches_torch():
    torch = pytest.importorskip("torch")
    out = {}
    for lib in (torch, lucid):
        w = lib.tensor([1.0, -2.0, 0.5], dtype=lib.float16, requires_grad=True)
        w.grad_dtype = lib.float32
        (w * w).sum().backward()
        out[lib.__name__] = (str(w.grad.dtype).split(".")[-1], w.grad.detach().numpy())
    assert out["torch"][0] == out["lucid"][0] == "float32"
    np.testing.assert_array_equal(out["torch"][1], out["lucid"][1])


def test_atleast_nd_of_nothing_is_an_empty_tuple():
    assert lucid.atleast_1d() == lucid.atleast_2d() == lucid.atleast_3d() == ()


@pytest.mark.parametrize("call", [lambda: lucid.randint(low=3, high=5, size=(400,)),
                                  lambda: lucid.randint(3, high=5, size=(400,)),
                                  lambda: lucid.randint(5, (400,), low=3)])
def test_randint_takes_low_and_high_by_keyword(call):
    x = call()  # as in PyTorch's CTCLoss example: randint(low=1, high=C, size=(N, S))
    assert tuple(x.shape) == (400,) and x.dtype == lucid.int64
    assert set(x.tolist()) == {3, 4}
    assert set(lucid.randint(high=2, size=(400,)).tolist()) == {0, 1}


def test_copysign_gives_other_a_zero_gradient_and_keeps_signed_zeros():
    a = lucid.tensor([3.0, -5.0, 0.0], dtype=lucid.float64, requires_grad=True)
    b = lucid.tensor([-1.0, 0.0, -2.0], dtype=lucid.float64, requires_grad=True)
    y = lucid.copysign(a, b)
    assert np.signbit(y.detach().numpy()).tolist() == [True, False, True]  # -0.0 stays -0.0
    ga, gb = lucid.autograd.grad(y.sum(), [a, b])  # PyTorch: zeros for other, not "unused"
    np.testing.assert_array_equal(ga.numpy(), [-1.0, -1.0, 0.0])
    np.testing.assert_array_equal(gb.numpy(), [0.0, 0.0, 0.0])
    s = lucid.tensor(-1.0, dtype=lucid.float64, requires_grad=True)
    assert lucid.autograd.grad(lucid.copysign(a, s).sum(), s).item() == 0.0


# ------------------------------------------------------------------ found by running PyTorch's OpInfo samples

def test_integer_linspace_truncates_as_torch():
    # PyTorch: integer ends (a float end truncates toward zero), steps in double, each value
    # truncated toward zero; NumPy's floors the float values (gave -3 at -2.5)
    assert lucid.linspace(-2.5, -3, 6, dtype=lucid.int64).tolist() == [-2, -2, -2, -2, -2, -3]
    assert lucid.linspace(-2.5, 1, 6, dtype=lucid.int64).tolist() == [-2, -1, 0, 0, 0, 1]
    assert lucid.linspace(1.9, 2.1, 1, dtype=lucid.int8).tolist() == [1]
    assert lucid.linspace(-9, 9, 10, dtype=lucid.uint8).tolist() == [247, 220, 194, 167, 141, 114, 88, 61, 35, 9]
    with pytest.raises(RuntimeError, match="linspace: value cannot be converted"):
        lucid.linspace(-2.5, 1, 6, dtype=lucid.uint8)


def test_scatter_family_keeps_bool_and_small_int_dtypes():
    i = lucid.tensor([0, 0, 2])
    s = lucid.tensor([True, False, True])
    z, o = lucid.zeros(3, dtype=lucid.bool), lucid.ones(3, dtype=lucid.bool)
    cases = {"sum": (z.scatter_reduce(0, i, s, "sum"), [True, False, True]),  # an or
             "prod": (o.scatter_reduce(0, i, s, "prod"), [False, True, True]),  # an and
             "amax": (z.scatter_reduce(0, i, s, "amax"), [True, False, True]),
             "amin": (o.scatter_reduce(0, i, s, "amin"), [False, True, True]),
             "multiply": (o.scatter(0, i, s, reduce="multiply"), [False, True, True]),
             "index_copy": (z.index_copy(0, lucid.tensor([1]), lucid.tensor([True])), [False, True, False]),
             "index_fill": (z.index_fill(0, lucid.tensor([1]), 5), [False, True, False])}
    for name, (got, want) in cases.items():
        assert got.dtype == lucid.bool and got.tolist() == want, name
    wrapped = lucid.zeros(3, dtype=lucid.int8).scatter_reduce(0, i, lucid.tensor([100, 100, 1], dtype=lucid.int8), "sum")
    assert wrapped.dtype == lucid.int8 and wrapped.tolist() == [-56, 0, 1]  # int8 wraps, as PyTorch's
    filled = lucid.zeros(3, dtype=lucid.int64).index_fill(0, lucid.tensor([1]), -2.7)
    assert filled.dtype == lucid.int64 and filled.tolist() == [0, -2, 0]
    with pytest.raises(NotImplementedError, match="scatter_reduce: reduce='mean'"):
        z.scatter_reduce(0, i, s, "mean")


def test_logaddexp_of_complex_inputs():
    a = lucid.tensor([1 + 1j, 2 - 1j, 800 + 0.5j], dtype=lucid.complex128)
    b = lucid.tensor([0.5j, 1.0 + 0j, 799 + 0j], dtype=lucid.complex128)
    got = lucid.logaddexp(a, b).numpy()
    # closed form, shifted by the larger real part (exp(800) overflows)
    m = np.maximum(a.numpy().real, b.numpy().real)
    want = np.log(np.exp(a.numpy() - m) + np.exp(b.numpy() - m)) + m
    np.testing.assert_allclose(got, want, rtol=1e-13)
    assert np.isfinite(got).all()


def test_small_fixes_from_the_opinfo_samples():
    x = lucid.ones(2, 3, 2, 2)
    for name in ("float", "half", "cfloat", "cdouble"):  # memory_format as PyTorch's conversions
        assert getattr(x, name)(memory_format=lucid.channels_last).is_contiguous(memory_format=lucid.channels_last)
    np.testing.assert_array_equal(lucid.gradient(lucid.tensor([1.0, 4.0, 9.0, 16.0]), spacing=None)[0].numpy(),
                                  [3.0, 4.0, 6.0, 7.0])
    assert tuple(lucid.nn.functional.unfold(lucid.ones(0, 1, 5, 5), 2).shape) == (0, 4, 16)
    assert lucid.linalg.vander(lucid.tensor(2.0), N=3).tolist() == [[1.0, 2.0, 4.0]]
    out = lucid.nn.functional.local_response_norm(lucid.tensor([[[1, 2], [3, 4], [-8, 9]]]), 2)
    assert out.dtype == lucid.float32  # an integer input is computed in float (was truncated: x / 1)
    sq = np.array([[1, 4], [9, 16], [64, 81]], dtype=np.float64)
    div = np.stack([(sq[0] + 0) / 2, (sq[0] + sq[1]) / 2, (sq[1] + sq[2]) / 2])  # window of 2: pad before
    np.testing.assert_allclose(out.numpy()[0], np.array([[1, 2], [3, 4], [-8, 9]]) / (1 + 1e-4 * div) ** 0.75,
                               rtol=1e-6)


# ------------------------------------------------------------------ found by running PyTorch's ModuleInfo samples

def test_kl_div_of_a_negative_target_is_nan_as_torch():
    F = lucid.nn.functional
    x = lucid.tensor([[-0.5, 0.2], [0.1, 0.3]], dtype=lucid.float64)
    t = lucid.tensor([[0.3, -0.2], [0.0, float("nan")]], dtype=lucid.float64)
    got = F.kl_div(x, t, reduction="none").numpy()
    # xlogy(t, t) - t * x: 0 at t == 0, nan for a negative or nan target (it was a finite number)
    assert got[0, 0] == pytest.approx(0.3 * np.log(0.3) + 0.5 * 0.3) and got[1, 0] == 0.0
    assert np.isnan(got[0, 1]) and np.isnan(got[1, 1])


@pytest.mark.parametrize("var_shape,ok", [((1, 3), True), ((4, 1), True), ((4,), True), ((3,), False),
                                          ((1, 1), False), ((2, 3), False)])
def test_gaussian_nll_loss_var_shapes_as_torch(var_shape, ok):
    F = lucid.nn.functional
    rng = np.random.default_rng(0)
    x, t = rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
    v = rng.uniform(0.5, 1.5, var_shape)
    if not ok:
        with pytest.raises(ValueError, match="var is of incorrect size"):
            F.gaussian_nll_loss(lucid.tensor(x), lucid.tensor(t), lucid.tensor(v))
        return
    got = F.gaussian_nll_loss(lucid.tensor(x), lucid.tensor(t), lucid.tensor(v)).item()
    vb = np.broadcast_to(v.reshape(4, 1) if var_shape == (4,) else v, (4, 3))
    assert got == pytest.approx(np.mean(0.5 * (np.log(vb) + (x - t) ** 2 / vb)), rel=1e-12)


def test_batch_norm_of_an_empty_batch_in_training():
    m = lucid.nn.BatchNorm1d(5)
    y = m(lucid.randn(0, 5, 9))
    assert tuple(y.shape) == (0, 5, 9)
    assert m.running_mean.tolist() == [0.0] * 5 and m.running_var.tolist() == [1.0] * 5  # untouched
    assert int(m.num_batches_tracked) == 1  # counted, as PyTorch
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        m(lucid.randn(1, 5))


def test_dense_to_padded_tensor_raises_as_torch():
    with pytest.raises(NotImplementedError, match="to_padded_tensor: expected a nested tensor"):
        lucid.ones(2).to_padded_tensor(0.0)


def test_cpu_amp_and_config_namespaces():
    import warnings

    with pytest.warns(FutureWarning, match="lucid.cpu.amp.autocast"):
        region = lucid.cpu.amp.autocast(dtype=lucid.float16)
    a = lucid.ones(2, 2, device="cpu")  # CPU autocast casts CPU tensors only
    with region:  # PyTorch's older spelling of lucid.amp.autocast("cpu")
        assert lucid.mm(a, a).dtype == lucid.float16
    assert lucid.mm(a, a).dtype == lucid.float32
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scaler = lucid.cpu.amp.GradScaler(init_scale=8.0)
    assert isinstance(scaler, lucid.amp.GradScaler) and scaler.get_scale() == 8.0
    assert f"NumPy {np.__version__}" in lucid.__config__.show()
    assert f"lucid.get_num_threads() : {lucid.get_num_threads()}" in lucid.__config__.parallel_info()


def test_autograd_grad_takes_sparse_and_nested_inputs():
    # grad(out, [s]) raised "inputs[0] does not require grad": the wrapper's flag is its
    # values'; the gradient comes back in the input's layout, as PyTorch's
    import lucid.nested

    s = lucid.tensor([[0.0, 2.0], [3.0, 0.0]]).to_sparse().requires_grad_()
    g = lucid.autograd.grad((s * 2).to_dense().sum(), [s])[0]
    assert g.layout is lucid.sparse_coo and g.to_dense().tolist() == [[0.0, 2.0], [2.0, 0.0]]
    c = lucid.tensor([[0.0, 2.0], [3.0, 0.0]]).to_sparse_csr().requires_grad_()
    g = lucid.autograd.grad((c @ lucid.tensor([[1.0], [5.0]])).sum(), c)
    assert g.layout is lucid.sparse_csr and g.to_dense().tolist() == [[0.0, 5.0], [1.0, 0.0]]
    for layout in (lucid.strided, lucid.jagged):
        nt = lucid.nested.nested_tensor([lucid.ones(2), lucid.ones(3)], requires_grad=True, layout=layout)
        g = lucid.autograd.grad((nt * nt * 3).to_padded_tensor(0.0).sum(), [nt])[0]
        assert g.layout is layout and [c.tolist() for c in g.unbind()] == [[6.0, 6.0], [6.0, 6.0, 6.0]]


# ------------------------------------------------------------------ found by running PyTorch's OptimizerInfo database

def test_optimizers_take_named_parameters_as_torch():
    m = lucid.nn.Linear(2, 2)
    opt = optim.Adam(m.named_parameters(), lr=0.1)  # PyTorch 2.13: (name, tensor) pairs
    assert opt.param_groups[0]["param_names"] == ["weight", "bias"]
    assert [id(p) for p in opt.param_groups[0]["params"]] == [id(m.weight), id(m.bias)]
    m(lucid.ones(1, 2)).sum().backward()
    opt.step()
    sd = opt.state_dict()
    assert sd["param_groups"][0]["param_names"] == ["weight", "bias"] and sorted(sd["state"]) == [0, 1]
    plain = optim.Adam(m.parameters(), lr=0.1)
    plain.load_state_dict(sd)  # the names come along, as in PyTorch
    assert plain.param_groups[0]["param_names"] == ["weight", "bias"]
    opt.add_param_group({"params": [("extra", lucid.nn.Parameter(lucid.ones(1)))], "lr": 0.5})
    assert opt.param_groups[1]["param_names"] == ["extra"]
    p, q = lucid.nn.Parameter(lucid.ones(1)), lucid.nn.Parameter(lucid.ones(1))
    with pytest.raises(ValueError, match="with/without names. Some param names are missing"):
        optim.SGD([("a", p), q], lr=0.1)
    with pytest.raises(ValueError, match="param groups should be with/without names"):
        optim.SGD([{"params": [("a", p)]}, {"params": [q]}], lr=0.1)
    with pytest.raises(ValueError, match="SparseAdam requires dense parameter tensors"):
        optim.SparseAdam([lucid.zeros(3).to_sparse()])


def test_check_sparse_tensor_invariants_switches_the_constructors_default():
    c = lucid.sparse.check_sparse_tensor_invariants
    assert not c.is_enabled()
    lucid.sparse_coo_tensor([[0, 5]], [1.0, 2.0], (3,))  # unchecked by default, as PyTorch
    with c():
        assert c.is_enabled()
        with pytest.raises(RuntimeError):
            lucid.sparse_coo_tensor([[0, 5]], [1.0, 2.0], (3,))
        with pytest.raises(RuntimeError):
            lucid.sparse_csr_tensor([0, 2, 1], [0, 1], [1.0, 2.0], (2, 2))  # crow_indices not sorted
        assert tuple(lucid.sparse_coo_tensor([[0, 5]], [1.0, 2.0], (3,), check_invariants=False).shape) == (3,)
    assert not c.is_enabled()

    @c(enable=True)
    def checked():
        return c.is_enabled()

    assert checked() and not c.is_enabled()
    c.enable()
    try:
        assert c.is_enabled()
    finally:
        c.disable()


def test_simple_activation_layers_reach_quantized_kernels():
    # nn.Sigmoid & co. bound F.sigmoid at import: a quantized tensor (whose dispatcher is
    # installed later) raised through the layer but not through the function
    q = lucid.quantize_per_tensor(lucid.tensor([-1.0, 0.0, 2.5]), 0.1, 0, lucid.quint8)
    for layer, fn in ((lucid.nn.Sigmoid(), lucid.nn.functional.sigmoid), (lucid.nn.Tanh(), lucid.nn.functional.tanh),
                      (lucid.nn.Hardsigmoid(), lucid.nn.functional.hardsigmoid)):
        got, want = layer(q), fn(q)
        assert got.is_quantized and got.int_repr().tolist() == want.int_repr().tolist()
        assert (got.q_scale(), got.q_zero_point()) == (want.q_scale(), want.q_zero_point())
