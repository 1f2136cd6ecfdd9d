"""Op database entries for as_strided on views (issue 14): offsets and strides count in the storage
of the root base, so on a transposed, sliced or expanded input the result is a view of the root's
memory. Each sample stays within its input's elements, so every transform applies."""
import numpy as np

import lucid
from opinfo import OpInfo, Sample, floats


def _storage_as_strided(a, size, stride, offset):
    """The closed form: the sample array is the root base, its row-major elements the storage."""
    flat = np.ascontiguousarray(a).reshape(-1)
    return np.array([[flat[offset + sum(i * s for i, s in zip(idx, stride))]]
                     for idx in np.ndindex(*size)]).reshape(size)


OPS = [
    OpInfo("as_strided_of_transpose", lambda x, sz, st, o: x.t().as_strided(sz, st, o), _storage_as_strided,
           lambda rng: [Sample((floats(rng, 3, 4), (4, 3), (1, 4), 0), name="transpose back"),
                        Sample((floats(rng, 3, 4), (3, 2), (1, 1), 1), name="overlapping windows"),
                        Sample((floats(rng, 2, 3), (2, 2), (0, 1), 3), name="zero stride")]),
    OpInfo("as_strided_of_slice", lambda x, sz, st, o: x[1:, 1:].as_strided(sz, st, o), _storage_as_strided,
           lambda rng: [Sample((floats(rng, 3, 4), (2, 2), (1, 4), 5)),
                        Sample((floats(rng, 3, 4), (2, 2), (1, 1), 5), name="overlapping windows")]),
    OpInfo("as_strided_of_expand", lambda x, sz, st, o: x.expand(3, *x.shape).as_strided(sz, st, o),
           _storage_as_strided,
           lambda rng: [Sample((floats(rng, 4), (2, 2), (1, 2), 0)),
                        Sample((floats(rng, 2, 2), (3,), (1,), 1))]),
    OpInfo("as_strided_of_diagonal", lambda x, sz, st, o: x.diagonal().as_strided(sz, st, o),
           _storage_as_strided,
           lambda rng: [Sample((floats(rng, 3, 3), (2, 2), (4, 4), 0), name="overlapping")]),
    # view(dtype): the bytes reinterpreted (a bit cast, no gradient), the last dim rescaled
    OpInfo("view_dtype", lambda x: x.view(lucid.int64), lambda x: np.ascontiguousarray(x).view(np.int64),
           lambda rng: [Sample((floats(rng, 2, 3),)), Sample((np.array([-0.0, 1.0, np.inf]),), name="signed zero")],
           grad=False),
    OpInfo("view_dtype_narrower", lambda x: x.view(lucid.float32),
           lambda x: np.ascontiguousarray(x).view(np.float32),
           lambda rng: [Sample((floats(rng, 2, 3),)), Sample((floats(rng, 4),), name="1-d")], grad=False),
    OpInfo("view_dtype_wider", lambda x: x.view(lucid.float32).view(lucid.complex128),
           lambda x: np.ascontiguousarray(x).view(np.complex128),
           lambda rng: [Sample((floats(rng, 3, 4),))], grad=False),
]
