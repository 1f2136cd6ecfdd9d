"""Op database entries for session 15's changes: ``logaddexp`` of complex inputs (PyTorch's
complex logaddexp; it raised "not supported for complex tensors") and ``copysign`` with a
gradient for ``other`` (zero, as PyTorch's)."""
import numpy as np

import lucid
from db_complex import cfloats
from opinfo import OpInfo, Sample, floats


def _np_logaddexp(a, b):
    return np.log(np.exp(a) + np.exp(b))


OPS = [
    OpInfo("complex_logaddexp", lucid.logaddexp, _np_logaddexp,
           lambda rng: [Sample((cfloats(rng, 2, 3), cfloats(rng, 2, 3))),
                        Sample((cfloats(rng, 2, 3), cfloats(rng, 3)), name="broadcast"),
                        Sample((cfloats(rng, 3), floats(rng, 3).astype(np.complex128) + 40.0), name="far apart")]),
    OpInfo("copysign_both_differentiable", lucid.copysign, np.copysign,
           lambda rng: [Sample((floats(rng, 2, 3), floats(rng, 2, 3))),
                        Sample((floats(rng, 2, 3), floats(rng, 3)), name="broadcast")]),
]
