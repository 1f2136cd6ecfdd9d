"""Every op in the database on the meta device: the CPU's output shapes and dtypes, and its
gradients' (NOTE [Meta device] in lucid/_core/meta_backend.py).

One test per op runs all its samples twice, on the CPU and on "meta", and compares what a
meta tensor keeps: shape, dtype, device, and the same for the gradient of the sum of the
outputs with respect to every float input. Ops whose output *shape* depends on values, and the
few computed on the host, are listed in ``RAISES``: there the meta call must raise
NotImplementedError, strictly (one that starts working fails until its line is removed).
"""
import glob
import importlib
import os
import sys

import numpy as np
import pytest

import lucid

sys.path.insert(0, os.path.dirname(__file__))

ALL = []
for _path in sorted(glob.glob(os.path.join(os.path.dirname(__file__), "db_*.py"))):
    ALL.extend(importlib.import_module(os.path.basename(_path)[:-3]).OPS)

# op name -> why it raises on the meta device
RAISES = {
    **dict.fromkeys(["nonzero", "nonzero_tuple", "argwhere", "masked_select", "torch.histogramdd",
                     "masked_scatter", "complex_masked_scatter"], "the output's shape (or a check) depends on values"),
    **dict.fromkeys(["allclose", "equal", "torch.cond", "lobpcg", "lobpcg_eigenvalues",
                     "lobpcg_generalized", "von_mises_sample", "special.legendre_polynomial_p_tensor_n"],
                    "Python reads a value (a bool, a loop's stop)"),
    **dict.fromkeys(["airy_ai", "erf_numpy_path", "erfc_numpy_path", "linalg.ldl_factor", "linalg.ldl_solve",
                     "complex.linalg.ldl_factor", "complex.linalg.ldl_solve", "linalg.lstsq",
                     "linalg.lstsq_rank_deficient", "complex.linalg.lstsq"], "computed on the host"),
    "to_device": "copies out to the CPU",
}


def _signature(info, sample, device):
    args = []
    for a in sample.args:
        if isinstance(a, np.ndarray):
            t = lucid.tensor(a, device=device)
            if info.grad and a.dtype.kind in "fc":
                t.requires_grad_()
            a = t
        args.append(a)
    res = info.op(*args, **sample.kwargs)
    outs = [o for o in (res if isinstance(res, (tuple, list)) else (res,)) if isinstance(o, lucid.Tensor)]
    sig = [(tuple(o.shape), o.dtype, o.device.type) for o in outs]
    diff = [o for o in outs if o.requires_grad]
    inputs = [a for a in args if isinstance(a, lucid.Tensor) and a.requires_grad]
    if diff and inputs:
        total = sum((o.real if o.dtype.is_complex else o).sum() for o in diff)
        grads = lucid.autograd.grad(total, inputs, allow_unused=True)
        grads = grads if isinstance(grads, tuple) else (grads,)
        sig.append([None if g is None else (tuple(g.shape), g.dtype, g.device.type) for g in grads])
    return sig


def _on_meta(sig):
    return [[None if g is None else (g[0], g[1], "meta") for g in s] if isinstance(s, list)
            else (s[0], s[1], "meta") for s in sig]


_TENSOR_OPS = [info for info in ALL
               if any(isinstance(a, np.ndarray) for s in info.samples(np.random.default_rng(0)) for a in s.args)]


@pytest.mark.parametrize("info", _TENSOR_OPS, ids=lambda info: info.name)
def test_meta_matches_the_cpu_in_shape_and_dtype(info):
    samples = [s for s in info.samples(np.random.default_rng(0)) if any(isinstance(a, np.ndarray) for a in s.args)]
    raised = []
    for sample in samples:
        want = _on_meta(_signature(info, sample, "cpu"))
        try:
            got = _signature(info, sample, "meta")
        except NotImplementedError as e:
            assert info.name in RAISES, f"{info.name} {sample}: {e}"
            raised.append(str(e))
            continue
        assert got == want, f"{info.name} {sample}"
    if info.name in RAISES:
        assert raised, f"{info.name} now runs on the meta device: remove it from RAISES"


def test_a_big_template_runs_in_little_memory():
    import tracemalloc

    with lucid.device("meta"):
        model = lucid.nn.Sequential(*[lucid.nn.Linear(4096, 4096) for _ in range(4)])  # 64 MB each
        x = lucid.randn(256, 4096)
    tracemalloc.start()
    try:
        y = model(x)
        y.sum().backward()
        lucid.optim.AdamW(model.parameters()).step()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert y.shape == (256, 4096) and model[0].weight.grad.shape == (4096, 4096)
    assert peak < 4 * 2 ** 20, peak  # one weight's values alone would be 64 MB
