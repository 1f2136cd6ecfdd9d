"""Every differentiable op of the op database on bfloat16 and float8_e5m2 inputs (NOTE [bfloat16],
NOTE [float8]).

For each op, its first sample is rounded to the low-precision dtype and run twice: on tensors of
that dtype, and on float32 tensors holding the very same (rounded) values. Both dtypes compute
in float32 and round each primitive's result once, so the two must agree to the dtype's
precision (bfloat16: 2^-8 relative, a few roundings for composites; float8_e5m2: 2^-2, so only
gross errors show), the floating outputs must have the low dtype, and the backward must hand
every low-precision input a gradient of its dtype close to the float32 one. float8_e5m2 rather
than e4m3fn: the masked reductions fill with -inf, which e4m3fn (no infinity) turns into NaN.
Runs on the CPU pass only: CuPy has neither dtype (a cuda device refuses them,
tests/test_bfloat16.py).
"""
import glob
import importlib
import os
import sys

import numpy as np
import pytest

import lucid

ml_dtypes = pytest.importorskip("ml_dtypes")  # the bfloat16 extra (installed with the test extra)

sys.path.insert(0, os.path.dirname(__file__))

ALL = []
for path in sorted(glob.glob(os.path.join(os.path.dirname(__file__), "db_*.py"))):
    ALL.extend(importlib.import_module(os.path.basename(path)[:-3]).OPS)

# Ops whose bfloat16 behaviour differs from "a bfloat16 result" on purpose, and why.
EXPECTED_BF16 = {
    # the complex or statistics results are float32/complex64, as float16 inputs give (and as
    # PyTorch's batch_norm_stats family returns float32 statistics for reduced-precision inputs)
    "fft.irfft": "float32 out", "fft.hfft": "float32 out", "linalg.eig": "complex64 out",
    "linalg.eigvals": "complex64 out", "torch.batch_norm_stats_0": "float32 out",
    "torch.batch_norm_stats_1": "float32 out", "torch.batch_norm_backward_reduce_0": "float32 out",
    "torch.batch_norm_backward_reduce_1": "float32 out", "torch.batch_norm_update_stats_0": "float32 out",
    "torch.batch_norm_update_stats_1": "float32 out",
    "view_as_complex": "refused, as in PyTorch (float32/float64 only)",
    # a round trip through the strict stand-in device, which (as CuPy) has no bfloat16
    "to_device": "refused on the device",
    # an iterative eigensolver: bfloat16 inputs change its answer beyond 2^-8, and its tolerance
    # (float32's) is never met, so it runs to its iteration limit (seconds)
    "lobpcg": "iterative", "lobpcg_eigenvalues": "iterative", "lobpcg_generalized": "iterative",
}


# float8_e5m2: the bfloat16 exceptions, and ops whose answer its 2 mantissa bits change beyond
# the check's tolerance, or that mix it with another floating dtype (refused: NOTE [float8]).
EXPECTED_F8 = {
    **EXPECTED_BF16,
    "dist.ContinuousBernoulli.log_prob": "its formula near p = 0.5 amplifies e5m2's rounding of p",
    "linalg.pinv": "an ill-conditioned gradient amplifies the rounding",
    "grid_sample_bilinear": "grid coordinates rounded to 2 mantissa bits move the samples",
    "torch.grid_sampler": "as grid_sample", "torch.grid_sampler_2d": "as grid_sample",
    "masked.normalize_fully_masked": "a norm of near-zero rows divides rounding noise",
    **dict.fromkeys(["torch.batch_norm_backward_reduce_2", "torch.batch_norm_backward_reduce_3",
                     "fake_quantize_per_channel_affine.ste", "istft", "cov_complex_weights",
                     "cov_complex_aweights"], "mixes float8 with a float32/float64/complex operand: refused"),
}
LOW = {"bfloat16": (EXPECTED_BF16, 3e-2, 6e-2), "float8_e5m2": (EXPECTED_F8, 0.5, 0.5)}


def _cases():
    cases = []
    for low, (expected, _, _) in LOW.items():
        for info in ALL:
            if not info.grad or info.name in expected:
                continue
            samples = info.samples(np.random.default_rng(0))[:1]
            if samples and any(isinstance(a, np.ndarray) and a.dtype == np.float64 for a in samples[0].args):
                cases.append(pytest.param(low, info, samples[0], id=f"{low}-{info.name}"))
    return cases


def _rounded(a, low):
    return a.astype(np.float32).astype(getattr(ml_dtypes, low))


def _inputs(sample, low, as_low):
    """The sample's float64 arrays rounded to ``low``, as tensors of it (as_low) or float32."""
    out = []
    for a in sample.args:
        if isinstance(a, np.ndarray) and a.dtype == np.float64:
            r = _rounded(a, low)
            t = lucid.tensor(r if as_low else r.astype(np.float32))
            out.append(t.requires_grad_())
        elif isinstance(a, np.ndarray):
            out.append(lucid.tensor(a))
        else:
            out.append(a)
    return out


def _tensors(res):
    return [r for r in (res if isinstance(res, (tuple, list)) else (res,)) if isinstance(r, lucid.Tensor)]


def _close(got, want, what, tol=3e-2):
    got, want = got.astype(np.float64), want.astype(np.float64)
    scale = float(np.max(np.abs(want[np.isfinite(want)]), initial=0.0))
    # 2^-8 per rounding, a few roundings inside composites: 3% of the value or of the output's scale
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale + 1e-3, equal_nan=True, err_msg=what)


@pytest.mark.parametrize("dtype_name,info,sample", _cases())
def test_low_precision_matches_float32_on_the_same_values(dtype_name, info, sample):
    _, tol, grad_tol = LOW[dtype_name]
    dt = getattr(lucid, dtype_name)
    low, full = _inputs(sample, dtype_name, True), _inputs(sample, dtype_name, False)
    got, want = _tensors(info.op(*low, **sample.kwargs)), _tensors(info.op(*full, **sample.kwargs))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if w.dtype == lucid.float32:
            assert g.dtype == dt, f"{info.name}: a float32 result is {g.dtype} from {dt} inputs"
        if g.is_complex():
            g, w = lucid.view_as_real(g), lucid.view_as_real(w)
        _close(g.detach().float().numpy() if g.dtype == dt else g.detach().numpy(),
               w.detach().numpy(), f"{info.name} forward", tol)
    picked = [got[info.out_index]] if info.out_index is not None else got
    picked_full = [want[info.out_index]] if info.out_index is not None else want
    grad_of = [(g, w) for g, w in zip(picked, picked_full) if g.requires_grad and not g.is_complex()]
    if not grad_of:
        return
    # the same cotangent (bfloat16-exact values) on both: a loss sum(out * c)
    rng = np.random.default_rng(1)
    loss_low = loss_full = 0
    for g, w in grad_of:
        c = _rounded(rng.uniform(-1, 1, tuple(g.shape)), dtype_name).astype(np.float32)
        loss_low = loss_low + (g.float() * lucid.tensor(c)).sum()
        loss_full = loss_full + (w * lucid.tensor(c)).sum()
    loss_low.backward()
    loss_full.backward()
    for a, b in zip(low, full):
        if isinstance(a, lucid.Tensor) and a.dtype == dt and a.grad is not None:
            assert a.grad.dtype == dt, f"{info.name}: a {dt} input got a {a.grad.dtype} gradient"
            # (a backward rounds its intermediate results too, and subtracts: bfloat16 6%)
            _close(a.grad.float().numpy(), b.grad.numpy(), f"{info.name} gradient", grad_tol)
