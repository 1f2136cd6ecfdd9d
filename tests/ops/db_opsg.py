"""Op database entries for session 17's opsG fixes (tests/regressions/test_opsg_fixes.py): the
cases PyTorch accepts that Lucid refused, run through the generic checks (gradients, jvp, vmap):
take_along_dim with indices that wrap, tensordot contracting a size-1 dim against a longer one,
linalg.tensorsolve with ``dims``. All are composites of existing primitives."""
import numpy as np

import lucid
from db_linalg import wellcond
from opinfo import OpInfo, Sample, floats

# -1 is the last column, 4 and -5 wrap modulo 3 to 1 (PyTorch 2.13 takes indices modulo the size)
_WRAPPED = np.array([[-1, 0, 4], [2, -5, -3]])


def _tensorsolve_dims_sample(rng):
    square = wellcond(rng, 6, 6)
    # A with dims (0, 2) moved to the end is square.reshape(3, 2, 6): A[i0, i1, i2] = moved[i1, i0, i2]
    return [Sample((square.reshape(3, 2, 6).transpose(1, 0, 2).copy(), floats(rng, 2, 3)))]


def _np_tensorsolve_dims(a, b):
    return np.linalg.solve(a.transpose(1, 0, 2).reshape(6, 6), b.reshape(6))


OPS = [
    OpInfo("take_along_dim_wrapped", lambda x: lucid.take_along_dim(x, lucid.tensor(_WRAPPED, device=x.device), 1),
           lambda x: np.take_along_axis(x, np.mod(_WRAPPED, 3), 1),
           lambda rng: [Sample((floats(rng, 2, 3),))]),
    OpInfo("tensordot_size1_contraction", lambda a, b: lucid.tensordot(a, b, dims=([0], [0])),
           lambda a, b: np.einsum("i,kj->ij", a[0], b),
           lambda rng: [Sample((floats(rng, 1, 3), floats(rng, 4, 2)))]),
    OpInfo("linalg.tensorsolve_dims", lambda a, b: lucid.linalg.tensorsolve(a, b, dims=(0, 2)),
           _np_tensorsolve_dims, _tensorsolve_dims_sample, vmap=False),
]
