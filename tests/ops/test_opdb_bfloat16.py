"""Every differentiable op of the op database on bfloat16 inputs (NOTE [bfloat16]).

For each op, its first sample is rounded to bfloat16 and run twice: on bfloat16 tensors, and on
float32 tensors holding the very same (rounded) values. bfloat16 computes in float32 and rounds
each primitive's result once, so the two must agree to bfloat16's precision (2^-8 relative,
a few roundings for composites), the floating outputs must be bfloat16, and the backward must
hand every bfloat16 input a bfloat16 gradient close to the float32 one. Runs on the CPU pass
only: CuPy has no bfloat16 (a cuda device refuses bfloat16 tensors, tests/test_bfloat16.py).
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
EXPECTED = {
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


def _cases():
    cases = []
    for info in ALL:
        if not info.grad or info.name in EXPECTED:
            continue
        samples = info.samples(np.random.default_rng(0))[:1]
        if samples and any(isinstance(a, np.ndarray) and a.dtype == np.float64 for a in samples[0].args):
            cases.append(pytest.param(info, samples[0], id=info.name))
    return cases


def _rounded(a):
    return a.astype(np.float32).astype(ml_dtypes.bfloat16)


def _inputs(sample, low):
    """The sample's float64 arrays rounded to bfloat16, as bfloat16 (low) or float32 tensors."""
    out = []
    for a in sample.args:
        if isinstance(a, np.ndarray) and a.dtype == np.float64:
            r = _rounded(a)
            t = lucid.tensor(r if low else r.astype(np.float32))
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


@pytest.mark.parametrize("info,sample", _cases())
def test_bfloat16_matches_float32_on_the_same_values(info, sample):
    low, full = _inputs(sample, True), _inputs(sample, False)
    got, want = _tensors(info.op(*low, **sample.kwargs)), _tensors(info.op(*full, **sample.kwargs))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if w.dtype == lucid.float32:
            assert g.dtype == lucid.bfloat16, f"{info.name}: a float32 result is {g.dtype} from bfloat16 inputs"
        if g.is_complex():
            g, w = lucid.view_as_real(g), lucid.view_as_real(w)
        _close(g.detach().float().numpy() if g.dtype == lucid.bfloat16 else g.detach().numpy(),
               w.detach().numpy(), f"{info.name} forward")
    picked = [got[info.out_index]] if info.out_index is not None else got
    picked_full = [want[info.out_index]] if info.out_index is not None else want
    grad_of = [(g, w) for g, w in zip(picked, picked_full) if g.requires_grad and not g.is_complex()]
    if not grad_of:
        return
    # the same cotangent (bfloat16-exact values) on both: a loss sum(out * c)
    rng = np.random.default_rng(1)
    loss_low = loss_full = 0
    for g, w in grad_of:
        c = _rounded(rng.uniform(-1, 1, tuple(g.shape))).astype(np.float32)
        loss_low = loss_low + (g.float() * lucid.tensor(c)).sum()
        loss_full = loss_full + (w * lucid.tensor(c)).sum()
    loss_low.backward()
    loss_full.backward()
    for a, b in zip(low, full):
        if isinstance(a, lucid.Tensor) and a.dtype == lucid.bfloat16 and a.grad is not None:
            assert a.grad.dtype == lucid.bfloat16, f"{info.name}: a bfloat16 input got a {a.grad.dtype} gradient"
            # (a backward rounds its intermediate results too, and subtracts: 6%)
            _close(a.grad.float().numpy(), b.grad.numpy(), f"{info.name} gradient", tol=6e-2)
