"""lucid.amp: autocast's per-op precision (NOTE [Autocast]) and GradScaler (NOTE [Gradient scaling]).

Runs on the default device of the run (the CPU, or the strict stand-in in the device passes)."""
import threading
import warnings

import numpy as np
import pytest

import lucid
from lucid import nn
from lucid.amp import GradScaler, autocast

F16, F32, F64 = lucid.float16, lucid.float32, lucid.float64


def _dev():
    return lucid.get_default_device().type


def _region(**kw):
    return autocast(_dev(), dtype=F16, **kw)


def test_each_op_runs_in_its_precision():
    rng = np.random.default_rng(0)
    a, b = lucid.tensor(rng.standard_normal((3, 4)), dtype=F32), lucid.tensor(rng.standard_normal((4, 2)), dtype=F32)
    h = lucid.tensor(rng.standard_normal((3, 4))).to(F16)
    lin = nn.Linear(4, 2)
    conv = nn.Conv2d(1, 2, 3)
    with _region():
        assert (a @ b).dtype is F16 and lin(a).dtype is F16 and lucid.einsum("ij,jk->ik", a, b).dtype is F16
        assert conv(lucid.ones(1, 1, 4, 4)).dtype is F16
        assert (h @ b).dtype is F16  # a float16 input and a float32 weight: both half
        # PyTorch's lists differ by device (NOTE [Autocast]): CUDA's (which the strict stand-in
        # takes) runs these in float32, the CPU's leaves them in the dtype they are given
        cuda_f32 = F16 if _dev() == "cpu" else F32
        for f in (lucid.exp, lucid.log1p, lucid.sum, lambda t: t.softmax(-1), lambda t: t.log_softmax(-1),
                  lambda t: t.logsumexp(-1), lambda t: t ** 2.0, lambda t: t.cumsum(0)):
            assert f(h.abs()).dtype is cuda_f32
        assert nn.functional.cross_entropy(h, lucid.tensor([0, 1, 3])).dtype is F32
        fn = nn.functional
        for f in (fn.mse_loss, fn.l1_loss, fn.smooth_l1_loss, fn.huber_loss, fn.kl_div, fn.soft_margin_loss):
            assert f(h, h * 2).dtype is F32  # composites PyTorch runs in float32 on both devices
        assert fn.cosine_similarity(h, h * 2).dtype is cuda_f32
        assert fn.layer_norm(h, (4,)).dtype is cuda_f32 and nn.GroupNorm(1, 3)(h.reshape(1, 3, 4)).dtype is cuda_f32
        p = h.sigmoid()
        if _dev() == "cpu":  # PyTorch's CPU autocast runs it in float32; its CUDA autocast refuses it
            assert nn.BCELoss()(p, p.detach()).dtype is F32
        else:
            with pytest.raises(RuntimeError, match="binary_cross_entropy and BCELoss are unsafe to autocast"):
                nn.BCELoss()(p, p.detach())
        assert fn.binary_cross_entropy_with_logits(h, p.detach()).dtype is F32  # the safe form
        assert h.relu().dtype is F16 and (h + 1).dtype is F16 and a.relu().dtype is F32  # others: as given
        d = a.to(F64)
        assert (d @ b.to(F64)).dtype is F64  # float64 is never cast
    assert (a @ b).dtype is F32  # outside: nothing


def test_unlisted_composites_keep_their_dtypes_and_per_device_lists():
    # outer, dot, kron, trace, interpolate, embedding_bag are built on matmul or sum in Lucid,
    # but PyTorch's autocast lists none of them (on the CPU): they run in the dtypes given
    rng = np.random.default_rng(2)
    a = lucid.tensor(rng.standard_normal((4, 4)), dtype=F32)
    h = a.to(F16)
    fn = nn.functional
    on_cpu = _dev() == "cpu"
    with _region():
        assert lucid.outer(a[0], a[1]).dtype is F32 and lucid.dot(a[0], a[1]).dtype is F32
        assert lucid.kron(a, a).dtype is F32 and lucid.vdot(a[0], a[1]).dtype is F32
        assert fn.embedding_bag(lucid.tensor([0, 1, 2]), a, lucid.tensor([0])).dtype is F32
        assert fn.bilinear(a, a, lucid.ones(2, 4, 4)).dtype is F32
        assert fn.interpolate(a[None], scale_factor=2, mode="linear").dtype is F32
        assert fn.interpolate(h[None], scale_factor=2, mode="linear").dtype is (F16 if on_cpu else F32)
        assert lucid.trace(h).dtype is (F32 if on_cpu else F16)  # on the CPU list only
        # mv, addmv, addr: CUDA's lower-precision list, not the CPU's
        low = F32 if on_cpu else F16
        assert lucid.mv(a, a[0]).dtype is low and lucid.addmv(a[0], a, a[1]).dtype is low
        assert lucid.addr(a, a[0], a[1]).dtype is low
        # composites PyTorch leaves unlisted but builds from listed ops follow them
        assert lucid.tensordot(a, a, 1).dtype is F16 and lucid.inner(a, a).dtype is F16
        assert lucid.linalg.multi_dot([a, a, a]).dtype is F16
        # the losses are float32 on both devices; linear algebra and FFTs on the CPU's list only
        assert fn.nll_loss(h, lucid.tensor([0, 1, 2, 3])).dtype is F32
        assert fn.triplet_margin_loss(h, h * 2, h).dtype is F32
        if on_cpu:
            assert lucid.linalg.qr(h)[0].dtype is F32 and lucid.linalg.inv(h + 4 * lucid.eye(4, dtype=F16)).dtype is F32
            assert lucid.fft.rfft(h).dtype is lucid.complex64
            assert fn.avg_pool3d(h[None, None, None], 1).dtype is F32
        else:
            assert lucid.cdist(h, h).dtype is F32 and fn.rms_norm(h, (4,)).dtype is F32
            assert lucid.linalg.matrix_norm(h).dtype is F32 and lucid.dist(h, h * 2).dtype is F32


AMP_CASES = {
    "outer": lambda L, a: L.outer(a[0], a[1]), "dot": lambda L, a: L.dot(a[0], a[1]),
    "mv": lambda L, a: L.mv(a, a[0]), "addmv": lambda L, a: L.addmv(a[0], a, a[1]),
    "addr": lambda L, a: L.addr(a, a[0], a[1]), "kron": lambda L, a: L.kron(a, a),
    "trace": lambda L, a: L.trace(a), "tensordot": lambda L, a: L.tensordot(a, a, 1),
    "inner": lambda L, a: L.inner(a, a), "exp": lambda L, a: L.exp(a), "sum": lambda L, a: a.sum(),
    "softmax": lambda L, a: a.softmax(-1), "layer_norm": lambda L, a: L.nn.functional.layer_norm(a, (4,)),
    "nll_loss": lambda L, a: L.nn.functional.nll_loss(a, L.tensor([0, 1, 2, 3])),
    "kl_div": lambda L, a: L.nn.functional.kl_div(a, a.abs()),
    "interpolate": lambda L, a: L.nn.functional.interpolate(a[None], scale_factor=2, mode="linear"),
    "embedding_bag": lambda L, a: L.nn.functional.embedding_bag(L.tensor([0, 1]), a, L.tensor([0])),
    "qr": lambda L, a: L.linalg.qr(a)[0], "quantile": lambda L, a: L.quantile(a, 0.5),
    "bce": lambda L, a: L.nn.functional.binary_cross_entropy(a.sigmoid(), a.sigmoid()),
    "max_pool3d": lambda L, a: L.nn.functional.max_pool3d(a[None, None, None], 1),
    "cosine_similarity": lambda L, a: L.nn.functional.cosine_similarity(a, a),
}


@pytest.mark.skipif(lucid.get_default_device().type != "cpu", reason="PyTorch's CPU lists")
@pytest.mark.parametrize("name", sorted(AMP_CASES))
def test_cpu_autocast_dtypes_match_torch(name):
    torch = pytest.importorskip("torch")
    got = []
    for lib in (torch, lucid):
        for dt in (lib.float32, lib.float16):
            x = lib.tensor(np.random.default_rng(3).random((4, 4)) + 0.5, dtype=dt)
            with lib.autocast("cpu", dtype=lib.float16):
                got.append(str(AMP_CASES[name](lib, x).dtype).split(".")[-1])
    assert got[:2] == got[2:]


def test_values_are_the_half_precision_products():
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((5, 8)).astype(np.float32), rng.standard_normal((8, 3)).astype(np.float32)
    with _region():
        got = (lucid.tensor(x) @ lucid.tensor(w)).cpu().numpy()
    want = x.astype(np.float16) @ w.astype(np.float16)
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(got, x @ w, rtol=2e-2, atol=2e-2)


def test_nesting_disabling_decorating_and_threads():
    a = lucid.ones(2, 2)
    with _region():
        with autocast(_dev(), enabled=False):
            assert (a @ a).dtype is F32
        assert (a @ a).dtype is F16

        seen = []
        t = threading.Thread(target=lambda: seen.append((a @ a).dtype))
        t.start()
        t.join()
        assert seen == [F32]  # per thread, as PyTorch

    @_region()
    def f(t):
        return t @ t

    assert f(a).dtype is F16 and (a @ a).dtype is F32
    assert lucid.is_autocast_enabled(_dev()) is False


def test_gradients_reach_float32_parameters_in_float32():
    lin = nn.Linear(4, 3)
    x = lucid.randn(6, 4)
    with _region():
        loss = lin(x).float().pow(2).mean()
    loss.backward()
    assert lin.weight.grad.dtype is F32 and lin.bias.grad.dtype is F32
    g16 = lin.weight.grad.cpu().numpy()
    lin.zero_grad()
    lin(x).pow(2).mean().backward()
    np.testing.assert_allclose(g16, lin.weight.grad.cpu().numpy(), rtol=3e-2, atol=3e-3)


def test_a_backward_inside_the_region_keeps_the_forward_dtypes():
    w = lucid.randn(3, 3, requires_grad=True)
    with _region():
        y = (w @ w).float().sum()
        (g,) = lucid.autograd.grad(y, (w,), create_graph=True)
    assert g.dtype is F32 and g.requires_grad


def test_cpu_default_dtype_and_unknown_devices():
    pytest.importorskip("ml_dtypes")  # the bfloat16 extra (tests/test_bfloat16.py: the region without it)
    region = autocast("cpu")  # PyTorch's CPU default: bfloat16
    assert region.fast_dtype is lucid.bfloat16
    with region:
        out = lucid.ones(2, 2, device="cpu") @ lucid.full((2, 2), 3.0, device="cpu")
    assert out.dtype is lucid.bfloat16
    np.testing.assert_array_equal(out.float().numpy(), np.full((2, 2), 6.0))
    with pytest.raises(RuntimeError, match="unsupported autocast device_type 'tpu'"):
        autocast("tpu")
    if not lucid.cuda.is_available():
        with pytest.warns(UserWarning, match="CUDA is not available. Disabling"):
            region = lucid.cuda.amp.autocast()
        assert region.fast_dtype is F16 and region._enabled is False


# ---------------------------------------------------------------- GradScaler


def _step_setup(value=1.0):
    w = lucid.tensor([value, -value], requires_grad=True)
    return w, lucid.optim.SGD([w], lr=0.25)


def test_scaled_step_equals_the_plain_step():
    w, opt = _step_setup()
    scaler = GradScaler(_dev(), init_scale=1024.0)
    scaler.scale((w * w).sum()).backward()
    np.testing.assert_array_equal(w.grad.cpu().numpy(), [2048.0, -2048.0])
    scaler.step(opt)
    scaler.update()
    np.testing.assert_array_equal(w.detach().cpu().numpy(), [0.5, -0.5])  # w - 0.25 * 2w
    assert scaler.get_scale() == 1024.0


def test_scaling_keeps_float16_gradients_from_underflowing():
    x = lucid.full((1, 4), 1e-3)

    def grad_of(scaler):
        w = lucid.ones(4, 1, requires_grad=True)
        with _region():
            loss = (x @ w).float().sum() * 1e-6  # dloss/d(x @ w) = 1e-6: below float16's grid after x
        (scaler.scale(loss) if scaler else loss).backward()
        if scaler:
            scaler.unscale_(lucid.optim.SGD([w], lr=0.1))
        return w.grad.cpu().numpy()

    np.testing.assert_array_equal(grad_of(None), 0.0)  # 1e-6 * 1e-3 flushes to zero in float16
    np.testing.assert_allclose(grad_of(GradScaler(_dev())), 1e-9, rtol=1e-2)


def test_an_overflow_skips_the_step_and_backs_off_then_clean_steps_grow():
    w, opt = _step_setup()
    scaler = GradScaler(_dev(), init_scale=8.0, growth_interval=2)
    w.grad = lucid.tensor([float("inf"), 1.0])
    assert scaler.scale(lucid.tensor(1.0)).item() == 8.0
    assert scaler.step(opt) is None
    scaler.update()
    np.testing.assert_array_equal(w.detach().cpu().numpy(), [1.0, -1.0])  # untouched
    assert scaler.get_scale() == 4.0
    for expected in (4.0, 8.0, 8.0):
        opt.zero_grad()
        scaler.scale((w * w).sum()).backward()
        scaler.step(opt)
        scaler.update()
        assert scaler.get_scale() == expected
    state = scaler.state_dict()
    assert state == {"scale": 8.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2,
                     "_growth_tracker": 1}
    other = GradScaler(_dev())
    other.load_state_dict(state)
    assert other.state_dict() == state


def test_wrong_order_and_bad_input_raise():
    w, opt = _step_setup()
    scaler = GradScaler(_dev())
    with pytest.raises(RuntimeError, match="did not use scaler.scale"):
        scaler.step(opt)
    scaler.scale((w * w).sum()).backward()
    scaler.unscale_(opt)
    with pytest.raises(RuntimeError, match="unscale_\\(\\) has already been called"):
        scaler.unscale_(opt)
    scaler.step(opt)
    with pytest.raises(RuntimeError, match="step\\(\\) has already been called"):
        scaler.step(opt)
    with pytest.raises(RuntimeError, match="unscale_\\(\\) is being called after step\\(\\)"):
        scaler.unscale_(opt)
    with pytest.raises(RuntimeError, match="Closure use is not currently supported"):
        scaler.step(opt, closure=lambda: 0.0)
    scaler.update()
    h = lucid.ones(2, dtype=F16, requires_grad=True)
    h.grad = lucid.ones(2, dtype=F16)
    with pytest.raises(ValueError, match="Attempting to unscale FP16 gradients"):
        scaler.unscale_(lucid.optim.SGD([h], lr=0.1))
    with pytest.raises(RuntimeError, match="state dict is empty"):
        scaler.load_state_dict({})
    with pytest.raises(ValueError, match="growth factor must be > 1.0"):
        GradScaler(_dev(), growth_factor=1.0)


def test_disabled_scaler_passes_through():
    w, opt = _step_setup()
    scaler = GradScaler(_dev(), enabled=False)
    loss = (w * w).sum()
    assert scaler.scale(loss) is loss and scaler.get_scale() == 1.0 and scaler.state_dict() == {}
    loss.backward()
    scaler.step(opt)
    np.testing.assert_array_equal(w.detach().cpu().numpy(), [0.5, -0.5])
    if not lucid.cuda.is_available():
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            assert GradScaler("cuda").is_enabled() is False
        assert "CUDA is not available" in str(rec[0].message)


def test_under_transforms():
    lucid.manual_seed(0)  # the draws used to follow the worker's earlier tests (a flake)
    w, xs = lucid.randn(3, 3), lucid.randn(4, 3)
    with _region():
        batched = lucid.func.vmap(lambda x: x @ w)(xs)
        g = lucid.func.grad(lambda v: (xs @ v).float().sum())(w)
    assert batched.dtype is F16 and g.dtype is F32
    # xs was rounded to float16 for the matmul: an absolute float16-sized error, also where the
    # column sum is near 0 (a relative tolerance alone failed there)
    np.testing.assert_allclose(g.cpu().numpy(), np.repeat(xs.sum(0).cpu().numpy()[:, None], 3, axis=1),
                               rtol=1e-2, atol=1e-2)


def test_a_failed_load_changes_nothing():
    scaler = GradScaler(_dev(), init_scale=8.0)
    before = scaler.state_dict()
    bad = dict(before, growth_interval="often")
    with pytest.raises(ValueError):
        scaler.load_state_dict(bad)
    with pytest.raises(KeyError, match="missing \\['_growth_tracker'\\]"):
        scaler.load_state_dict({k: v for k, v in before.items() if k != "_growth_tracker"})
    assert scaler.state_dict() == before


# ------------------------------------------------------- custom_fwd / custom_bwd


def _matmul_function(seen, *, cast_inputs=None, decorate_bwd=True):
    from lucid.amp import custom_bwd, custom_fwd

    def forward(ctx, a, b):
        seen["forward inputs"] = (a.dtype, b.dtype)
        ctx.save_for_backward(a, b)
        out = a @ b
        seen["forward product"] = out.dtype
        return out

    def backward(ctx, g):
        a, b = ctx.saved_tensors
        ga = g.to(lucid.float32) @ b.to(lucid.float32).T
        seen["backward product"] = ga.dtype
        return ga.to(a.dtype), (a.to(lucid.float32).T @ g.to(lucid.float32)).to(b.dtype)

    fwd = custom_fwd(forward, device_type=_dev(), cast_inputs=cast_inputs)
    bwd = custom_bwd(device_type=_dev())(backward) if decorate_bwd else backward
    return type("MatMul", (lucid.autograd.Function,), {"forward": staticmethod(fwd), "backward": staticmethod(bwd)})


def test_custom_fwd_records_the_region_and_custom_bwd_restores_it():
    a = lucid.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    b = lucid.tensor([[0.5, -1.0], [2.0, 0.25]], requires_grad=True)
    for decorate_bwd, backward_dtype in ((True, lucid.float16), (False, lucid.float32)):
        seen = {}
        fn = _matmul_function(seen, decorate_bwd=decorate_bwd)
        with _region():
            y = fn.apply(a, b)
        assert seen["forward product"] == lucid.float16 and y.dtype == lucid.float16
        y.sum().backward()  # outside the region: custom_bwd re-enters the forward's region
        assert seen["backward product"] == backward_dtype
        np.testing.assert_allclose(a.grad.numpy(), np.ones((2, 2)) @ b.numpy().T, rtol=1e-3)
        a.grad = b.grad = None


def test_custom_fwd_cast_inputs_runs_the_forward_outside_autocast():
    a16 = lucid.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=lucid.float16)
    b64 = lucid.tensor([[1.0], [1.0]], dtype=lucid.float64)
    seen = {}
    fn = _matmul_function(seen, cast_inputs=lucid.float32)
    with _region():
        y = fn.apply(a16, b64)
    assert seen["forward inputs"] == (lucid.float32, lucid.float32)
    assert seen["forward product"] == lucid.float32 and y.dtype == lucid.float32
    np.testing.assert_array_equal(y.numpy(), [[3.0], [7.0]])
    seen.clear()
    fn.apply(a16, b64.to(lucid.float16))  # no region: nothing is cast
    assert seen["forward inputs"] == (lucid.float16, lucid.float16)


def test_custom_bwd_needs_custom_fwd_and_device_type():
    from lucid.amp import custom_bwd, custom_fwd

    class Plain(lucid.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        @custom_bwd(device_type=_dev())
        def backward(ctx, g):
            return g * 2

    x = lucid.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="custom_bwd: the forward of this Function is not decorated"):
        Plain.apply(x).sum().backward()
    with pytest.raises(TypeError, match="custom_fwd: device_type must be a str"):
        custom_fwd(lambda ctx, x: x, device_type=None)
    assert callable(lucid.cuda.amp.custom_fwd(lambda ctx, x: x)) and callable(lucid.cuda.amp.custom_bwd(lambda c, g: g))
