"""``lucid.bfloat16`` (NOTE [bfloat16]): rounding, promotion, float32 compute, autograd, transforms,
training, autocast, saving, and the messages without ml_dtypes or on a cuda device.

Every op of the op database is checked on bfloat16 in tests/ops/test_opdb_bfloat16.py.
"""
import io
import os
import subprocess
import sys

import numpy as np
import pytest

import lucid
import lucid.nn as nn

ml_dtypes = pytest.importorskip("ml_dtypes")  # the bfloat16 extra (installed with the test extra)
bf16 = lucid.bfloat16


def _round_to_bfloat16(x):
    """float32 -> bfloat16 by hand: round the upper 16 bits to nearest, ties to even (NaN stays NaN)."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    lsb = (bits >> 16) & 1
    rounded = ((bits + 0x7FFF + lsb) >> 16) << 16
    out = rounded.astype(np.uint32).view(np.float32)
    return np.where(np.isnan(x), np.float32(np.nan), out)


def _values(t):
    return t.detach().float().numpy().astype(np.float64)


def test_conversion_rounds_to_nearest_even():
    ulp = 2.0 ** -7  # bfloat16 keeps 7 mantissa bits: the spacing at 1
    x = np.array([1 + ulp / 2, 1 + 1.5 * ulp, 1 + ulp / 2 + 2 ** -20, -3.0e38, 1e-40, np.inf, -np.inf, 0.1, 1 / 3],
                 np.float32)
    got = _values(lucid.tensor(x).to(bf16))
    np.testing.assert_array_equal(got[:3], [1.0, 1 + 2 * ulp, 1 + ulp])  # ties to even; above a tie rounds up
    np.testing.assert_array_equal(got, _round_to_bfloat16(x).astype(np.float64))
    rng = np.random.default_rng(0)
    r = (rng.standard_normal(1000) * 10.0 ** rng.uniform(-30, 30, 1000)).astype(np.float32)
    np.testing.assert_array_equal(_values(lucid.tensor(r).bfloat16()), _round_to_bfloat16(r))
    assert np.isnan(_values(lucid.tensor([np.nan]).bfloat16())).all()


def test_dtype_attributes_and_finfo():
    assert bf16.itemsize == 2 and bf16.is_floating_point and bf16.is_signed and not bf16.is_complex
    assert repr(bf16) == "lucid.bfloat16" and lucid.tensor([1.0], dtype=bf16).element_size() == 2
    assert bf16 == "bfloat16" and lucid.tensor([1.0], dtype="bfloat16").dtype is bf16
    from lucid import dtypes as lucid3_dtypes

    assert lucid3_dtypes.bfloat16 is bf16  # upstream Lucid 3's namespace
    f = lucid.finfo(bf16)
    assert (f.bits, f.eps, f.max, f.tiny) == (16, 2.0 ** -7, (2 - 2.0 ** -7) * 2.0 ** 127, 2.0 ** -126)
    assert f.resolution == 0.01  # PyTorch's: 10 ** -floor(7 * log10(2))


def test_promotion_is_pytorchs():
    t = lucid.ones(2, dtype=bf16)
    table = {lucid.float16: lucid.float32, lucid.float32: lucid.float32, lucid.float64: lucid.float64,
             lucid.int64: bf16, lucid.uint8: bf16, lucid.bool: bf16, lucid.complex64: lucid.complex64,
             bf16: bf16}
    for other, want in table.items():
        assert lucid.promote_types(bf16, other) is want, other
        assert (t + lucid.ones(2, dtype=other)).dtype is want, other
    # weak operands: a Python float and a 0-d float32 tensor keep bfloat16 (a category it already has)
    assert (t * 2.5).dtype is bf16 and (t + lucid.tensor(1.0)).dtype is bf16
    assert (lucid.ones(2) + lucid.tensor(1.0, dtype=bf16)).dtype is lucid.float32
    assert (lucid.ones(2, dtype=lucid.int64) * lucid.tensor(1.5, dtype=bf16)).dtype is bf16


def test_ops_compute_in_float32_and_round_once():
    # 1024 ones: bfloat16 accumulation would stop at 256 (256 + 1 rounds back to 256)
    assert lucid.ones(1024, dtype=bf16).sum().item() == 1024.0
    rng = np.random.default_rng(1)
    a, b = (_round_to_bfloat16(rng.standard_normal((16, 64)).astype(np.float32)) for _ in range(2))
    got = lucid.tensor(a).bfloat16() @ lucid.tensor(b).bfloat16().T
    assert got.dtype is bf16
    np.testing.assert_array_equal(_values(got), _round_to_bfloat16(a @ b.T))  # one rounding of the float32 product
    x = lucid.tensor(a).bfloat16()
    for op, ref in ((lucid.exp, np.exp), (lucid.tanh, np.tanh), (lucid.sigmoid, lambda v: 1 / (1 + np.exp(-v)))):
        want = _round_to_bfloat16(ref(a.astype(np.float64)).astype(np.float32))
        np.testing.assert_allclose(_values(op(x)), want, rtol=2.0 ** -8)  # float32 libm: at most one bf16 ulp
    # views stay views of bfloat16 memory
    v = x[1:3, ::2]
    assert v.dtype is bf16 and np.shares_memory(v.numpy(), x.numpy())
    v.zero_()
    assert _values(x)[1:3, ::2].sum() == 0


def test_gradients_are_bfloat16_and_match_float32():
    rng = np.random.default_rng(2)
    w32 = _round_to_bfloat16(rng.standard_normal((5, 3)).astype(np.float32))
    x32 = _round_to_bfloat16(rng.standard_normal((4, 5)).astype(np.float32))
    w = lucid.tensor(w32).bfloat16().requires_grad_()
    y = (lucid.tensor(x32).bfloat16() @ w).sum()
    assert y.dtype is bf16 and y.requires_grad
    y.backward()
    assert w.grad.dtype is bf16
    # d/dw sum(x @ w) = x^T @ ones: the column sums of x, rounded once
    np.testing.assert_array_equal(_values(w.grad), np.repeat(_round_to_bfloat16(x32.sum(0))[:, None], 3, 1))
    # a float32 leaf mixed with a bfloat16 tensor: float32 result, float32 gradient
    u = lucid.ones(3, requires_grad=True)
    (u * lucid.tensor([1.5, 2.0, -1.0], dtype=bf16)).sum().backward()
    assert u.grad.dtype is lucid.float32 and u.grad.tolist() == [1.5, 2.0, -1.0]


def test_transforms_on_bfloat16():
    x = lucid.tensor([0.5, -1.25, 2.0], dtype=bf16)
    g = lucid.func.grad(lambda t: (t * t * t).sum())(x)
    assert g.dtype is bf16 and _values(g).tolist() == [0.75, 4.6875, 12.0]  # 3 t^2, exact in bfloat16
    batch = lucid.tensor([[0.5, 1.0], [2.0, -3.0], [0.25, 4.0]], dtype=bf16)
    out = lucid.func.vmap(lambda r: (r * r).sum())(batch)
    assert out.dtype is bf16
    np.testing.assert_array_equal(_values(out), [float((r * r).sum().float()) for r in batch])  # a loop
    primal, tangent = lucid.func.jvp(lambda t: t.sin(), (x,), (lucid.ones(3, dtype=bf16),))
    assert tangent.dtype is bf16
    np.testing.assert_allclose(_values(tangent), np.cos(_values(x)), rtol=2.0 ** -7)
    h = lucid.func.hessian(lambda t: (t ** 3).sum())(x)
    np.testing.assert_array_equal(_values(h), np.diag(6 * _values(x)))


def test_a_bfloat16_model_trains_with_bfloat16_state():
    lucid.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 1)).to(bf16)
    opt = lucid.optim.AdamW(model.parameters(), lr=2e-2)
    rng = np.random.default_rng(3)
    x = lucid.tensor(rng.standard_normal((64, 4)), dtype=bf16)
    y = (x.float() @ lucid.tensor([[1.0], [-2.0], [0.5], [3.0]])).to(bf16)
    losses = []
    for _ in range(40):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(p.dtype is bf16 and p.grad.dtype is bf16 for p in model.parameters())
    assert all(v.dtype is bf16 for s in opt.state.values() for k, v in s.items() if k.startswith("exp_avg"))
    assert losses[-1] < 0.1 * losses[0], losses


def test_autocast_on_the_cpu_defaults_to_bfloat16():
    w = lucid.ones(3, 2, requires_grad=True)
    x = lucid.tensor([[0.5, 1.5, 2.0]])
    assert lucid.get_autocast_dtype("cpu") is bf16
    with lucid.autocast("cpu"):
        y = x @ w
        loss = nn.functional.mse_loss(y, lucid.zeros(1, 2))  # on the float32 list
    assert y.dtype is bf16 and loss.dtype is lucid.float32
    loss.backward()
    assert w.grad.dtype is lucid.float32  # the gradient of a float32 weight stays float32
    # d mean((x w)^2) / dw = x^T (x w) (the mean's 1/2 and the square's 2 cancel); x w = [4, 4]
    np.testing.assert_array_equal(w.grad.numpy(), np.outer([0.5, 1.5, 2.0], [4.0, 4.0]))


def test_save_and_load_keep_the_bits(tmp_path):
    rng = np.random.default_rng(4)
    w = lucid.tensor(rng.standard_normal((3, 5)), dtype=bf16)
    state = {"w": w, "p": nn.Parameter(w[:, 1:3]), "n": 3}
    lucid.save(state, tmp_path / "ckpt.pt")
    back = lucid.load(tmp_path / "ckpt.pt")
    assert back["w"].dtype is bf16 and back["p"].dtype is bf16 and back["n"] == 3
    np.testing.assert_array_equal(back["w"].numpy().view(np.uint16), w.numpy().view(np.uint16))
    np.testing.assert_array_equal(back["p"].detach().numpy().view(np.uint16), w[:, 1:3].numpy().view(np.uint16))
    buf = io.BytesIO()
    lucid.save(nn.Linear(2, 2).bfloat16().state_dict(), buf)
    buf.seek(0)
    assert all(v.dtype is bf16 for v in lucid.load(buf).values())


def test_torch_checkpoints_both_ways(tmp_path):
    torch = pytest.importorskip("torch")
    values = torch.tensor([1.5, -2.25, 3.0e5, 1e-3, float("inf")])
    torch.save({"w": values.bfloat16()}, tmp_path / "t.pt")
    w = lucid.load(tmp_path / "t.pt")["w"]
    assert w.dtype is bf16
    np.testing.assert_array_equal(w.numpy().view(np.uint16), values.bfloat16().view(torch.int16).numpy().view(np.uint16))
    lucid.serialization.save_for_torch({"w": w, "half": w[::2]}, tmp_path / "l.pt")
    back = torch.load(tmp_path / "l.pt")
    assert back["w"].dtype == torch.bfloat16 and torch.equal(back["w"], values.bfloat16())
    assert torch.equal(back["half"], values.bfloat16()[::2])


def test_values_match_pytorch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    a = rng.standard_normal((8, 32)).astype(np.float32)
    b = rng.standard_normal((32, 6)).astype(np.float32)
    la, lb = lucid.tensor(a).bfloat16(), lucid.tensor(b).bfloat16()
    ta, tb = torch.tensor(a).bfloat16(), torch.tensor(b).bfloat16()
    np.testing.assert_array_equal(la.numpy().view(np.uint16), ta.view(torch.int16).numpy().view(np.uint16))
    for lf, tf in ((lambda x, y: x @ y, lambda x, y: x @ y), (lambda x, y: (x.exp() * 0.5).sum(1), lambda x, y: (x.exp() * 0.5).sum(1)),
                   (lambda x, y: nn.functional.softmax(x, -1), lambda x, y: torch.nn.functional.softmax(x, -1))):
        got, want = _values(lf(la, lb)), tf(ta, tb).float().numpy()
        np.testing.assert_allclose(got, want, rtol=2.0 ** -7, atol=1e-6)  # within one bfloat16 ulp
    assert str(lucid.tensor([1.5, 2.0]).bfloat16()) == "tensor([1.5, 2. ], dtype=lucid.bfloat16)"


def test_without_ml_dtypes_the_name_says_what_to_install():
    code = (
        "import sys; sys.modules['ml_dtypes'] = None\n"  # import ml_dtypes now raises ImportError
        "import warnings, lucid\n"
        "assert 'ml_dtypes' not in [m for m in sys.modules if sys.modules[m] is not None]\n"
        "try:\n    lucid.bfloat16\nexcept AttributeError as e:\n    print('ERR', e)\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    with lucid.autocast('cpu'):\n"
        "        print('DTYPE', (lucid.ones(2, 2) @ lucid.ones(2, 2)).dtype)\n"
        "print('WARN', str(w[0].message))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120,
                         cwd=os.path.dirname(os.path.dirname(lucid.__file__)))
    assert out.returncode == 0, out.stderr
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines())
    assert "pip install 'lucid[bfloat16]'" in lines["ERR"] and lines["DTYPE"] == "lucid.float32"
    assert "bfloat16 is not supported" in lines["WARN"]


def test_import_lucid_does_not_import_ml_dtypes():
    code = "import sys, lucid, lucid.nn, lucid.optim; print('ml_dtypes' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=os.path.dirname(os.path.dirname(lucid.__file__)))
    assert out.stdout.strip() == "False", out.stderr


def test_the_strict_stand_in_refuses_bfloat16_as_cupy_does():
    from lucid.testing import strict_device

    strict_device.enable()
    x = lucid.ones(2, dtype=bf16)
    with pytest.raises(TypeError, match="CuPy has no bfloat16"):
        x.to("strict")
    with pytest.raises(TypeError, match="CuPy has no bfloat16"):
        lucid.ones(2, device="strict").to(bf16)
    assert x.to("strict", lucid.float32).dtype is lucid.float32  # converted first, then moved


def test_a_cuda_device_refuses_bfloat16():
    if not lucid.cuda.is_available():
        pytest.skip("no CUDA device (CuPy's refusal is checked on a GPU machine)")
    with pytest.raises(TypeError, match="CuPy has no bfloat16"):
        lucid.ones(2, dtype=bf16).to("cuda")


def test_interop_and_legacy_names():
    a = np.array([1.5, -2.0, 3.25], ml_dtypes.bfloat16)
    for make in (lucid.from_numpy, lucid.as_tensor, lucid.asarray, lucid.tensor):
        t = make(a)
        assert t.dtype is bf16 and t.float().tolist() == [1.5, -2.0, 3.25], make
    assert lucid.from_numpy(a).numpy().base is a or np.shares_memory(lucid.from_numpy(a).numpy(), a)
    x = lucid.ones(2).type("torch.BFloat16Tensor")
    assert x.dtype is bf16 and x.type() == "lucid.BFloat16Tensor"
    assert lucid.randperm(5, dtype=bf16).sort()[0].float().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    lucid.testing.assert_close(lucid.tensor([1.0, 2.0], dtype=bf16), lucid.tensor([1.0078125, 2.0], dtype=bf16))
    with pytest.raises(AssertionError):  # PyTorch's bfloat16 tolerance: rtol 1.6e-2
        lucid.testing.assert_close(lucid.tensor([1.0], dtype=bf16), lucid.tensor([1.03125], dtype=bf16))


def test_load_state_dict_takes_bfloat16_values_both_ways():
    src = nn.Linear(3, 2).bfloat16()
    dst = nn.Linear(3, 2)  # float32: the values are converted, as param.copy_(value)
    dst.load_state_dict(src.state_dict())
    assert dst.weight.dtype is lucid.float32
    np.testing.assert_array_equal(dst.weight.detach().numpy(), src.weight.float().detach().numpy())
    back = nn.Linear(3, 2).bfloat16()
    back.load_state_dict({k: v.numpy() for k, v in dst.state_dict().items()})  # float32 arrays into bfloat16
    np.testing.assert_array_equal(back.weight.detach().float().numpy(), dst.weight.detach().numpy())
    raw = {k: v.detach().numpy() for k, v in src.state_dict().items()}  # ml_dtypes arrays
    dst.load_state_dict(raw)
    np.testing.assert_array_equal(dst.bias.detach().numpy(), src.bias.float().detach().numpy())
