"""PyTorch's torch.func pages run on Lucid (``import lucid as torch``): "torch.func Whirlwind Tour"
(``grad``, ``vmap``, ``vjp``, ``jvp``, ``jacrev``, ``jacfwd``, ``hessian``), "UX Limitations"
(randomness, mutation, data-dependent control flow) and "Patching Batch Norm" (the error of a
batch norm with unbatched running statistics, ``track_running_stats=False``,
``replace_all_batch_norm_modules_``, eval mode), plus "Model ensembling" with batch-norm members
in training mode: ``stack_module_state`` stacks the running statistics and each member updates
its own slice (this failed: ``batch_norm`` read the batched statistics as data).
"""
import copy

import numpy as np
import pytest

import lucid
import lucid.func  # noqa: F401
import lucid.nn  # noqa: F401
import lucid.nn.functional  # noqa: F401


def npy(t):
    return np.array(t.detach().cpu().numpy())  # a copy: buffers change in place later


def _func(torch):
    from importlib import import_module
    return import_module(torch.__name__ + ".func")


# ------------------------------------------------------------------------ torch.func Whirlwind Tour

def whirlwind_tour(torch):
    f_ = _func(torch)
    grad, vmap, vjp, jvp = f_.grad, f_.vmap, f_.vjp, f_.jvp
    jacrev, jacfwd, hessian = f_.jacrev, f_.jacfwd, f_.hessian
    res = {}
    x = torch.randn([])
    cos_x = grad(lambda x: torch.sin(x))(x)
    assert torch.allclose(cos_x, x.cos())
    neg_sin_x = grad(grad(lambda x: torch.sin(x)))(x)
    assert torch.allclose(neg_sin_x, -x.sin())

    batch_size, feature_size = 3, 5
    weights = torch.randn(feature_size, requires_grad=True)

    def model(feature_vec):
        assert feature_vec.dim() == 1
        return feature_vec.dot(weights).relu()

    examples = torch.randn(batch_size, feature_size)
    result = vmap(model)(examples)
    res["vmap"] = (npy(examples), npy(weights), npy(result))

    inputs = torch.randn(5)
    output, vjp_fn = vjp(torch.sin, inputs)
    assert torch.allclose(vjp_fn(torch.ones(5))[0], torch.cos(inputs))

    x = torch.randn(5)
    y = torch.randn(5)
    f = lambda x, y: (x * y)
    _, out_tangent = jvp(f, (x, y), (torch.ones(5), torch.ones(5)))
    assert torch.allclose(out_tangent, x + y)

    x = torch.randn(5)
    jacobian = jacrev(torch.sin)(x)
    expected = torch.diag(torch.cos(x))
    assert torch.allclose(jacobian, expected)
    x = torch.randn(64, 5)
    jacobian = vmap(jacrev(torch.sin))(x)
    assert jacobian.shape == (64, 5, 5)
    x = torch.randn(5)
    jacobian = jacrev(jacrev(torch.sin))(x)
    res["jacjac"] = (npy(x), npy(jacobian))

    def f(x, y):
        return x + y ** 2

    x, y = torch.randn(5), torch.randn(5)
    jacobian = jacrev(f, argnums=1)(x, y)
    expected = torch.diag(2 * y)
    assert torch.allclose(jacobian, expected)
    x = torch.randn(5)
    jacobian = jacfwd(torch.sin)(x)
    expected = torch.diag(torch.cos(x))
    assert torch.allclose(jacobian, expected)
    x, y = torch.randn(5), torch.randn(5)
    jacobian = jacfwd(f, argnums=1)(x, y)
    expected = torch.diag(2 * y)
    assert torch.allclose(jacobian, expected)

    def f(x):
        return x.sin().sum()

    x = torch.randn(5)
    hess = hessian(f)(x)
    assert torch.allclose(hess, torch.diag(-x.sin()))
    res["ok"] = True
    return res


def test_whirlwind_tour():
    res = whirlwind_tour(lucid)
    assert res["ok"]
    ex, w, out = res["vmap"]
    np.testing.assert_allclose(out, np.maximum(ex @ w, 0), rtol=1e-5, atol=1e-6)
    x, jj = res["jacjac"]
    assert jj.shape == (5, 5, 5)
    want = np.zeros((5, 5, 5), np.float32)
    want[np.arange(5), np.arange(5), np.arange(5)] = -np.sin(x)
    np.testing.assert_allclose(jj, want, rtol=1e-5, atol=1e-7)


# ------------------------------------------------------------------------------------ UX Limitations

def ux_limitations(torch):
    f_ = _func(torch)
    vmap, grad = f_.vmap, f_.grad
    res = {}

    def add_noise(x):
        y = torch.randn(())
        return x + y

    try:
        vmap(add_noise)(torch.ones(3))
        res["random_error"] = None
    except RuntimeError as e:
        res["random_error"] = type(e).__name__
    res["same"] = vmap(add_noise, randomness="same")(torch.ones(3)).unique().numel()
    res["different"] = vmap(add_noise, randomness="different")(torch.ones(3)).unique().numel()

    def f(x):
        y = x.clone()
        y.add_(1)
        return y

    res["mutation"] = vmap(f)(torch.ones(3, 2)).tolist()

    def g(x, y):
        x.add_(y)
        return x

    try:
        vmap(g, in_dims=(None, 0))(torch.ones(3), torch.ones(2, 3))
        res["unbatched_inplace"] = None
    except RuntimeError as e:
        res["unbatched_inplace"] = type(e).__name__

    def relu(x):
        if x > 0:
            return x
        return 0

    try:
        vmap(relu)(torch.randn(3))
        res["control_flow"] = None
    except RuntimeError as e:
        res["control_flow"] = type(e).__name__
    res["where"] = vmap(lambda x: torch.where(x > 0, x, 0))(torch.tensor([-1., 2.])).tolist()
    res["grad_where"] = grad(lambda x: torch.where(x > 0, x, 0).sum())(torch.tensor([-1., 2.])).tolist()
    return res


def test_ux_limitations():
    res = ux_limitations(lucid)
    assert res["random_error"] == "RuntimeError" and res["same"] == 1 and res["different"] == 3
    assert res["mutation"] == [[2.0, 2.0]] * 3
    assert res["unbatched_inplace"] == "RuntimeError" and res["control_flow"] == "RuntimeError"
    assert res["where"] == [0.0, 2.0] and res["grad_where"] == [0.0, 1.0]


def test_ux_limitations_torch_parity():
    torch = pytest.importorskip("torch")
    assert ux_limitations(lucid) == ux_limitations(torch)


# ---------------------------------------------------------------------------- Patching Batch Norm

def patching_batch_norm(torch):
    f_ = _func(torch)
    vmap, nn = f_.vmap, torch.nn
    res = {}
    x = torch.randn(2, 1, 3, 5, 5)
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))
    try:
        vmap(net)(x)
        res["error"] = None
    except RuntimeError as e:
        res["error"] = "were not batched" in str(e)
    net2 = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4, affine=True, track_running_stats=False))
    res["no_stats"] = tuple(vmap(net2)(x).shape)
    f_.replace_all_batch_norm_modules_(net)
    res["patched"] = (net[1].running_mean, net[1].track_running_stats, tuple(vmap(net)(x).shape))
    net3 = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))
    net3.eval()
    res["eval"] = tuple(vmap(net3)(x).shape)
    return res


def test_patching_batch_norm():
    res = patching_batch_norm(lucid)
    assert res["error"] is True  # PyTorch's message (a data-access error before)
    assert res["no_stats"] == (2, 1, 4, 3, 3) and res["eval"] == (2, 1, 4, 3, 3)
    assert res["patched"] == (None, False, (2, 1, 4, 3, 3))


def test_patching_batch_norm_torch_parity():
    torch = pytest.importorskip("torch")
    assert patching_batch_norm(lucid) == patching_batch_norm(torch)


# ------------------------------------------------------- Model ensembling with batch-norm members

def ensembling_with_batch_norm(torch, seed=0):
    f_ = _func(torch)
    nn = torch.nn
    rng = np.random.default_rng(seed)
    models = []
    for _ in range(3):
        m = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.ReLU()).double()
        with torch.no_grad():
            for p in m.parameters():
                p.copy_(torch.tensor(rng.standard_normal(tuple(p.shape)), dtype=torch.float64))
        models.append(m)
    params, buffers = f_.stack_module_state(models)
    base_model = copy.deepcopy(models[0]).to("meta")

    def fmodel(params, buffers, x):
        return f_.functional_call(base_model, (params, buffers), (x,))

    minibatch = torch.tensor(rng.standard_normal((5, 4)))
    out = f_.vmap(fmodel, in_dims=(0, 0, None))(params, buffers, minibatch)
    res = {"out": npy(out), "rm": npy(buffers["1.running_mean"]), "rv": npy(buffers["1.running_var"]),
           "nbt": buffers["1.num_batches_tracked"].tolist()}

    def loss(params, buffers, x):
        return fmodel(params, buffers, x).sum()

    g = f_.vmap(f_.grad(loss), in_dims=(0, 0, None))(params, buffers, minibatch)
    res["g"] = npy(g["0.weight"])
    res["rm2"] = npy(buffers["1.running_mean"])
    res["x"] = npy(minibatch)
    res["loop"] = [npy(m(minibatch)) for m in models]  # the members themselves, in training mode
    res["loop_rm"] = [npy(m[1].running_mean) for m in models]
    return res


def test_ensembling_with_batch_norm():
    res = ensembling_with_batch_norm(lucid)
    np.testing.assert_allclose(res["out"], np.stack(res["loop"]), rtol=1e-12, atol=1e-12)
    # one update each from zeros: momentum * the batch mean of each member's linear output
    np.testing.assert_allclose(res["rm"], np.stack(res["loop_rm"]), rtol=1e-12, atol=1e-15)
    assert res["nbt"] == [1, 1, 1] and np.abs(res["rm"]).min() > 0
    np.testing.assert_allclose(res["rm2"], 1.9 * res["rm"], rtol=1e-12)  # the same batch again
    assert res["g"].shape == (3, 3, 4) and np.isfinite(res["g"]).all()


def test_batched_running_stats_follow_the_closed_form():
    F, vmap = lucid.nn.functional, lucid.func.vmap
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 4, 5))
    rm, rv = lucid.zeros(2, 4, dtype=lucid.float64), lucid.ones(2, 4, dtype=lucid.float64)
    out = vmap(lambda x, a, b: F.batch_norm(x, a, b, training=True, momentum=0.2))(lucid.tensor(x), rm, rv)
    np.testing.assert_allclose(npy(rm), 0.2 * x.mean((1, 3)), rtol=1e-12)
    var = x.transpose(0, 2, 1, 3).reshape(2, 4, -1).var(-1, ddof=1)
    np.testing.assert_allclose(npy(rv), 0.8 + 0.2 * var, rtol=1e-12)
    mean, bvar = x.mean((1, 3), keepdims=True), x.var((1, 3), keepdims=True)
    np.testing.assert_allclose(npy(out), (x - mean) / np.sqrt(bvar + 1e-5), rtol=1e-10)
    with pytest.raises(RuntimeError, match=r"^batch_norm: .*were not batched"):
        vmap(lambda x: F.batch_norm(x, lucid.zeros(4), lucid.ones(4), training=True))(lucid.randn(2, 3, 4))


def test_ensembling_with_batch_norm_torch_parity():
    torch = pytest.importorskip("torch")
    lo, to = ensembling_with_batch_norm(lucid), ensembling_with_batch_norm(torch)
    for k in ("out", "rm", "rv", "g", "rm2"):
        np.testing.assert_allclose(lo[k], to[k], rtol=1e-10, atol=1e-12, err_msg=k)
    assert lo["nbt"] == to["nbt"]
