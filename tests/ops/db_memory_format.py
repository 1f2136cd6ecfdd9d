"""Op database entries for memory formats (lucid/ops/memory_format.py): copies in a layout keep
the values, so each reference is the identity (or the view taken first), and the generic checks
prove the copies differentiable and batchable. Strides are checked in
tests/surface/test_memory_format.py."""
import numpy as np

import lucid
from opinfo import OpInfo, Sample, floats


def _fmt(rng, shapes, fmt):
    return [Sample((floats(rng, *s),), {"memory_format": fmt}, name=f"{s}") for s in shapes]


_SHAPES_4D = [(2, 3, 2, 2), (1, 2, 1, 3), (2, 1, 2, 2)]  # size-1 N, C, H/W included
_SHAPES_5D = [(1, 2, 2, 1, 2)]


def _same(x, memory_format):
    return x


OPS = [
    OpInfo("contiguous_channels_last", lambda x, memory_format: x.contiguous(memory_format=memory_format), _same,
           lambda rng: _fmt(rng, _SHAPES_4D, lucid.channels_last)),
    OpInfo("contiguous_channels_last_3d", lambda x, memory_format: x.contiguous(memory_format=memory_format), _same,
           lambda rng: _fmt(rng, _SHAPES_5D, lucid.channels_last_3d)),
    OpInfo("clone_channels_last", lambda x, memory_format: lucid.clone(x, memory_format=memory_format), _same,
           lambda rng: _fmt(rng, _SHAPES_4D, lucid.channels_last) + _fmt(rng, _SHAPES_5D, lucid.channels_last_3d)),
    # a permuted input keeps its order under preserve_format
    OpInfo("clone_preserve_format",
           lambda x, memory_format: x.transpose(0, -1).clone(memory_format=memory_format),
           lambda x, memory_format: np.swapaxes(x, 0, -1),
           lambda rng: _fmt(rng, [(2, 3), (2, 1, 3)], lucid.preserve_format)),
    OpInfo("to_channels_last", lambda x, memory_format: x.to(lucid.float64, memory_format=memory_format), _same,
           lambda rng: _fmt(rng, _SHAPES_4D[:1], lucid.channels_last)),
]
