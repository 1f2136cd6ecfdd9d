"""Op database entries for the nested (jagged) compositions the masked/nested/sparse sweep
added: products of a nested tensor and a dense batch of matrices. (The sparse fixes of that
sweep coalesce with ``unique``, which the meta device refuses; their tests are in
tests/regressions/test_masked_nested_sparse_sweep.py.)

Each op takes dense arrays, builds the nested tensor inside (offsets fixed, on the
input's device) and returns its dense values, so the generic checks (values, vjp/jvp against
finite differences) see an ordinary function of dense tensors (no vmap: a batch of nested
tensors is not a thing). The references compute
each sequence's product with NumPy.
"""
import numpy as np

import lucid
from opinfo import OpInfo, Sample, floats

_OFFSETS = [0, 2, 3, 6]  # three sequences of lengths 2, 1, 3


def _nested(vals, ragged_idx=1):
    import lucid.nested

    offsets = lucid.tensor(_OFFSETS, dtype=lucid.int64, device=vals.device)
    return lucid.nested.nested_tensor_from_jagged(vals, offsets, jagged_dim=ragged_idx)


def _batch(n):
    return np.repeat(np.arange(len(_OFFSETS) - 1), np.diff(_OFFSETS))[:n]


def nested_bmm(vals, mats):
    nt = _nested(vals)  # made first: making it switches the dispatch protocol on (NOTE [Nested tensors])
    return lucid.bmm(nt, mats).values()


def nested_bmm_ref(vals, mats):
    return np.einsum("nd,nde->ne", vals, mats[_batch(len(vals))])


def dense_matmul_nested(mats, vals):
    # (B, F, D) @ (B, D, j): the nested operand is the transpose of a (B, j, D) tensor
    nt = _nested(vals).transpose(1, 2)
    return lucid.matmul(mats, nt).values()


def dense_matmul_nested_ref(mats, vals):
    return np.einsum("nfd,nd->fn", mats[_batch(len(vals))], vals)


def _bmm_samples(rng):
    return [Sample((floats(rng, 6, 2), floats(rng, 3, 2, 4)))]


def _dense_nested_samples(rng):
    return [Sample((floats(rng, 3, 4, 2), floats(rng, 6, 2)))]


OPS = [
    OpInfo("nested.bmm_dense", nested_bmm, nested_bmm_ref, _bmm_samples, vmap=False),
    OpInfo("nested.dense_matmul_transposed", dense_matmul_nested, dense_matmul_nested_ref,
           _dense_nested_samples, vmap=False),
]
