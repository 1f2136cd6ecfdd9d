"""Op database entries from the complex-autograd sweep against PyTorch 2.13
(tests/regressions/test_complex_autograd_sweep.py holds the value checks at the special points).

- ``sgn`` of complex input (``z / |z|``; its derivative at 0 is 0, checked in the test file);
- ``einsum`` in PyTorch's sublist form (``einsum(a, [0, 1], b, [1, 2], [0, 2])``);
- ``norm(p=None)`` (PyTorch's default, the 2-norm) and ``norm(p=0)`` (a count that stays in
  the graph with a zero gradient);
- ``contiguous`` of a non-contiguous complex tensor, batched under vmap.
"""
import numpy as np

import lucid
from db_complex import _away_from_zero, cfloats
from opinfo import OpInfo, Sample, floats


def _nonzero_count(x, axis):
    return np.count_nonzero(x, axis=axis).astype(np.float64)


OPS = [
    OpInfo("sweep_complex_sgn", lucid.sgn, lambda z: z / np.abs(z),
           lambda rng: [Sample((_away_from_zero(rng, 2, 3),)), Sample((_away_from_zero(rng),), name="0-d")]),
    OpInfo("sweep_complex_einsum_sublist", lambda a, b: lucid.einsum(a, [0, 1], b, [1, 2], [0, 2]),
           lambda a, b: a @ b,
           lambda rng: [Sample((cfloats(rng, 2, 3), cfloats(rng, 3, 2))),
                        Sample((floats(rng, 2, 3), cfloats(rng, 3, 2)), name="real with complex")]),
    OpInfo("sweep_complex_einsum_sublist_implicit", lambda a: lucid.einsum(a, [Ellipsis, 0, 0]),
           lambda a: np.einsum("...ii->...", a), lambda rng: [Sample((cfloats(rng, 2, 3, 3),))]),
    OpInfo("sweep_complex_norm_p_none", lambda z: lucid.norm(z, None, dim=1),
           lambda z: np.linalg.norm(z, axis=1), lambda rng: [Sample((_away_from_zero(rng, 2, 3, 2),))]),
    OpInfo("sweep_complex_norm_p0", lambda z: lucid.norm(z, 0, dim=1),
           lambda z: _nonzero_count(z, 1),
           lambda rng: [Sample((_away_from_zero(rng, 2, 3),)), Sample((floats(rng, 2, 3),), name="real")]),
    OpInfo("sweep_complex_contiguous", lambda z: z.transpose(0, 1).contiguous(),
           lambda z: np.ascontiguousarray(z.swapaxes(0, 1)), lambda rng: [Sample((cfloats(rng, 2, 3, 2),))]),
]
