"""Mapper (``map``) and Collator (``collate``): apply a function to each element."""
from __future__ import annotations

from .._decorator import functional_datapipe
from ..datapipe import IterDataPipe
from ..utils.common import _check_unpickable_fn, validate_input_col
from .utils import _length_of


def _apply_to_columns(fn, data, input_col, output_col):
    """``fn`` applied to ``data`` or to its ``input_col`` column(s), the result written back to
    ``output_col`` (``-1``: appended) or in place of the input column(s). ``data`` is not changed."""
    if input_col is None:
        return fn(data)
    if isinstance(input_col, (list, tuple)):
        res = fn(*(data[c] for c in input_col))
    else:
        res = fn(data[input_col])
    was_tuple = isinstance(data, tuple)
    out = list(data) if was_tuple else (data.copy() if hasattr(data, "copy") else data)
    if output_col is None:
        if isinstance(input_col, (list, tuple)):
            out[input_col[0]] = res
            for idx in sorted(input_col[1:], reverse=True):
                del out[idx]
        else:
            out[input_col] = res
    elif output_col == -1:
        out.append(res)
    else:
        out[output_col] = res
    return tuple(out) if was_tuple else out


@functional_datapipe("map")
class MapperIterDataPipe(IterDataPipe):
    """Apply ``fn`` to each element (functional name: ``map``).

    Parameters
    ----------
    datapipe : IterDataPipe
    fn : callable
    input_col : int, key or list of them, optional
        Apply ``fn`` to these columns of each element only (several: as positional arguments).
    output_col : int or key, optional
        Where the result goes (``-1``: appended); default: in place of ``input_col``.

    Examples
    --------
    >>> from lucid.utils.data.datapipes.iter import IterableWrapper
    >>> list(IterableWrapper([(1, 2), (3, 4)]).map(lambda a, b: a + b, input_col=[0, 1], output_col=-1))
    [(1, 2, 3), (3, 4, 7)]
    """

    def __init__(self, datapipe, fn, input_col=None, output_col=None):
        self.datapipe = datapipe
        _check_unpickable_fn(fn)
        self.fn = fn
        if input_col is None and output_col is not None:
            raise ValueError("`output_col` must be None when `input_col` is None.")
        if isinstance(output_col, (list, tuple)):
            if len(output_col) > 1:
                raise ValueError("`output_col` must be a single-element list or tuple")
            output_col = output_col[0]
        self.input_col, self.output_col = input_col, output_col
        validate_input_col(fn, input_col)

    def _apply_fn(self, data):
        return _apply_to_columns(self.fn, data, self.input_col, self.output_col)

    def __iter__(self):
        for data in self.datapipe:
            yield self._apply_fn(data)

    def __len__(self):
        return _length_of(self, self.datapipe)


def _collate_by_key(conversion, batch):
    """A mapping batch with ``conversion[key]`` applied to each of its fields (others kept)."""
    return type(batch)((k, conversion[k](v) if k in conversion else v) for k, v in batch.items())


@functional_datapipe("collate")
class CollatorIterDataPipe(MapperIterDataPipe):
    """Collate each element (a batch) with ``collate_fn`` or ``conversion`` (functional name: ``collate``).

    Parameters
    ----------
    datapipe : IterDataPipe
    conversion : callable or dict, default ``default_collate``
        A dict maps a field name of each (mapping) batch to the function applied to it.
    collate_fn : callable, optional
        Overrides ``conversion``.

    Examples
    --------
    >>> from lucid.utils.data.datapipes.iter import IterableWrapper
    >>> [b.tolist() for b in IterableWrapper(range(4)).batch(2).collate()]
    [[0, 1], [2, 3]]
    """

    def __init__(self, datapipe, conversion=None, collate_fn=None):
        if collate_fn is None:
            if conversion is None:
                from ...dataloader import default_collate
                conversion = default_collate
            if callable(conversion):
                collate_fn = conversion
            elif isinstance(conversion, dict):
                import functools
                collate_fn = functools.partial(_collate_by_key, conversion)
            else:
                raise TypeError(f"CollatorIterDataPipe: conversion must be callable or a dict, "
                                f"got {type(conversion).__name__}")
        super().__init__(datapipe, fn=collate_fn)


Mapper = MapperIterDataPipe
Collator = CollatorIterDataPipe
