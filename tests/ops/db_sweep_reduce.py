"""Op database entries from the reductions/sorting sweep against PyTorch 2.13
(tests/regressions/test_reduce_sort_sweep.py holds the non-differentiable checks).

- ``dim=()`` (or ``[]``) reduces every dim in sum, mean, var, std, norm and logsumexp, as
  PyTorch reads it (``any``/``all`` keep ``()`` as "reduce nothing", unchanged);
- ``cov`` with weights on a complex input (the weights and normaliser stay real) and with one
  variable (a 0-d result, PyTorch's ``squeeze``).
"""
import numpy as np

import lucid
from opinfo import OpInfo, Sample, floats, positive


def _cfloats(rng, *shape):
    return np.asarray(rng.uniform(-1, 1, shape) + 1j * rng.uniform(-1, 1, shape), np.complex128)


def _np_cov(x, f=None, a=None, ddof=1):
    return np.asarray(np.cov(x, ddof=ddof, fweights=f, aweights=a))


def _all_dims(rng):
    return [Sample((floats(rng, 2, 3),)), Sample((floats(rng, 2, 1, 3),), {"keepdim": True}, name="keepdim"),
            Sample((floats(rng, 4),), {"keepdim": False}, name="1-d")]


OPS = [
    OpInfo("sum_dim_empty_tuple", lambda x, **k: lucid.sum(x, (), **k),
           lambda x, keepdim=False: np.sum(x, keepdims=keepdim), _all_dims),
    OpInfo("mean_dim_empty_list", lambda x, **k: lucid.mean(x, [], **k),
           lambda x, keepdim=False: np.mean(x, keepdims=keepdim), _all_dims),
    OpInfo("var_dim_empty_tuple", lambda x, **k: lucid.var(x, (), correction=0, **k),
           lambda x, keepdim=False: np.var(x, keepdims=keepdim), _all_dims),
    OpInfo("std_dim_empty_tuple", lambda x, **k: lucid.std(x, (), **k),
           lambda x, keepdim=False: np.std(x, ddof=1, keepdims=keepdim), _all_dims),
    OpInfo("norm_dim_empty_tuple", lambda x, **k: lucid.norm(x, 3, (), **k),
           lambda x, keepdim=False: np.sum(np.abs(x) ** 3, keepdims=keepdim) ** (1 / 3), _all_dims),
    OpInfo("logsumexp_dim_empty_tuple", lambda x, **k: lucid.logsumexp(x, (), **k),
           lambda x, keepdim=False: np.log(np.sum(np.exp(x), keepdims=keepdim)), _all_dims),
    OpInfo("cov_one_variable", lambda x, f, a: lucid.cov(x, fweights=f, aweights=a), _np_cov,
           lambda rng: [Sample((floats(rng, 1, 5), np.array([1, 2, 1, 3, 1]), positive(rng, 5))),
                        Sample((floats(rng, 4), np.array([2, 1, 1, 1]), positive(rng, 4)), name="1-d")]),
    OpInfo("cov_complex_weights", lambda x, f, a: lucid.cov(x, correction=1, fweights=f, aweights=a),
           _np_cov, lambda rng: [Sample((_cfloats(rng, 2, 4), np.array([1, 2, 1, 3]), positive(rng, 4)))]),
    OpInfo("cov_complex_aweights", lambda x, a: lucid.cov(x, correction=0, aweights=a),
           lambda x, a: _np_cov(x, a=a, ddof=0), lambda rng: [Sample((_cfloats(rng, 3, 4), positive(rng, 4)))]),
]
