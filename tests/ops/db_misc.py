"""Op database entries for small no-gradient primitives not covered by a family file."""
import numpy as np

import lucid
from opinfo import OpInfo, Sample


def _ints(rng, *shape):
    return rng.integers(0, 8, size=shape).astype(np.int64)


def _bools(rng, *shape):
    return rng.integers(0, 2, size=shape).astype(bool)


OPS = [
    OpInfo("bitwise_or", lambda a, b: a | b, np.bitwise_or,
           lambda rng: [Sample((_ints(rng, 2, 3), _ints(rng, 3))), Sample((_bools(rng, 4), _bools(rng, 4)))], grad=False),
    OpInfo("bitwise_xor", lambda a, b: a ^ b, np.bitwise_xor,
           lambda rng: [Sample((_ints(rng, 2, 3), _ints(rng, 2, 3))), Sample((_bools(rng, 3), _bools(rng, 3)))], grad=False),
    OpInfo("logical_not", lucid.logical_not, np.logical_not,
           lambda rng: [Sample((_bools(rng, 2, 3),)), Sample((_ints(rng, 4),))], grad=False),
    OpInfo("sign", lucid.sign, np.sign,
           lambda rng: [Sample((rng.uniform(-1, 1, (2, 3)),)), Sample((np.array([-2.0, 0.0, 3.0]),))], grad=False),
]
