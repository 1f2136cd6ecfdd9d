"""Op database entries for behaviour fixed by the OpInfo sweep of linalg and special
(tests/regressions/test_opinfo_sweep_linalg.py): ``vector_norm`` over an empty dim list
reduces every dim, for any ``ord``; ``householder_product`` with no reflector (an empty
``tau``) is the identity's first columns, still in the graph (zero gradients).
"""
import numpy as np

import lucid
from opinfo import OpInfo, Sample, floats

L = lucid.linalg


OPS = [
    OpInfo("linalg.vector_norm_empty_dim_list", lambda x, **k: L.vector_norm(x, dim=(), **k),
           lambda x, ord=2, keepdim=False: np.linalg.norm(x.ravel(), ord).reshape((1,) * x.ndim if keepdim else ()),
           lambda rng: [Sample((floats(rng, 2, 3) + 2,)), Sample((floats(rng, 2, 3) + 2,), {"ord": 0.5}),
                        Sample((floats(rng, 3, 2) + 2,), {"ord": -1.5, "keepdim": True}),
                        Sample((floats(rng, 2, 2) + 2,), {"ord": 3})]),
    OpInfo("linalg.householder_product_no_reflector", lambda a, t: L.householder_product(a, t),
           lambda a, t: np.broadcast_to(np.eye(*a.shape[-2:]), a.shape),
           lambda rng: [Sample((floats(rng, 3, 2), np.zeros(0))), Sample((floats(rng, 2, 3, 3), np.zeros((2, 0))))]),
]
