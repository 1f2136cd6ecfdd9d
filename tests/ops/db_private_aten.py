"""Op database entries for PyTorch's private functions (lucid/ops/private_aten*.py) whose
derivatives matter most: the softmax backward helpers (custom Functions differentiate through
them: gradgradcheck), ``_euclidean_dist`` and ``_chunk_cat`` (padding and regrouping). They are
compositions, so these checks confirm the rules of the ops they are built from come through."""
import numpy as np

import lucid
from opinfo import OpInfo, Sample, floats, positive


def _np_chunk_cat(tensors, dim, n):
    parts = []
    for t in tensors:
        per = -(-t.shape[dim] // n)
        pad = [(0, 0)] * t.ndim
        pad[dim] = (0, per * n - t.shape[dim])
        t = np.pad(t, pad)
        parts.append(t.reshape(t.shape[:dim] + (n, -1)))
    return np.concatenate(parts, dim + 1)


def _np_euclidean(a, b):
    sq = (a * a).sum(-1)[..., :, None] + (b * b).sum(-1)[..., None, :] - 2 * a @ np.swapaxes(b, -1, -2)
    return np.sqrt(np.maximum(sq, 1e-30))


OPS = [
    OpInfo("_softmax_backward_data", lambda g, y: lucid._softmax_backward_data(g, y, 1, lucid.float64),
           lambda g, y: y * (g - (g * y).sum(1, keepdims=True)),
           lambda rng: [Sample((floats(rng, 2, 3), positive(rng, 2, 3)))]),
    OpInfo("_log_softmax_backward_data", lambda g, y: lucid._log_softmax_backward_data(g, y, 1, lucid.float64),
           lambda g, y: g - np.exp(y) * g.sum(1, keepdims=True),
           lambda rng: [Sample((floats(rng, 2, 3), floats(rng, 2, 3)))]),
    OpInfo("_euclidean_dist", lucid._euclidean_dist, _np_euclidean,
           lambda rng: [Sample((floats(rng, 3, 2), floats(rng, 2, 2) + 3.0))]),
    OpInfo("_chunk_cat", lambda a, b: lucid._chunk_cat([a, b], 1, 2), lambda a, b: _np_chunk_cat([a, b], 1, 2),
           lambda rng: [Sample((floats(rng, 2, 3), floats(rng, 2, 2)))]),
]
