"""Filter (``filter``): keep the elements a predicate accepts."""
from __future__ import annotations

from .._decorator import functional_datapipe
from ..datapipe import IterDataPipe
from ..utils.common import _check_unpickable_fn, validate_input_col


@functional_datapipe("filter")
class FilterIterDataPipe(IterDataPipe):
    """Keep the elements for which ``filter_fn`` returns True (functional name: ``filter``).

    Parameters
    ----------
    datapipe : IterDataPipe
    filter_fn : callable returning bool
    input_col : int, key or list of them, optional
        Pass only these columns of each element to ``filter_fn``.

    Examples
    --------
    >>> from lucid.utils.data.datapipes.iter import IterableWrapper
    >>> list(IterableWrapper(range(6)).filter(lambda x: x % 2 == 0))
    [0, 2, 4]
    """

    def __init__(self, datapipe, filter_fn, input_col=None):
        self.datapipe = datapipe
        _check_unpickable_fn(filter_fn)
        self.filter_fn = filter_fn
        self.input_col = input_col
        validate_input_col(filter_fn, input_col)

    def _returns_true(self, data):
        if self.input_col is None:
            res = self.filter_fn(data)
        elif isinstance(self.input_col, (list, tuple)):
            res = self.filter_fn(*(data[c] for c in self.input_col))
        else:
            res = self.filter_fn(data[self.input_col])
        if not isinstance(res, bool):
            raise ValueError("Boolean output is required for `filter_fn` of FilterIterDataPipe, "
                             f"got {type(res)}.")
        return res

    def __iter__(self):
        for data in self.datapipe:
            if self._returns_true(data):
                yield data


Filter = FilterIterDataPipe
