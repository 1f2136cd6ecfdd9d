"""IterDataPipe and MapDataPipe: composable datasets with a functional form (``dp.map(f)``).

# NOTE [Functional forms]
``@functional_datapipe("map")`` registers a DataPipe class under a name; ``dp.map(f, ...)`` is
then ``MapperIterDataPipe(dp, f, ...)``. Iter and map pipes have separate registries. The
lookup happens in ``__getattr__``, so only names that are not real attributes reach it.

# NOTE [Pickling DataPipes]
DataPipes pickle with the standard ``pickle`` (worker processes started with ``spawn`` need it).
A lambda cannot be pickled, so a pipe built with one warns when it is built (as PyTorch does
without ``dill``) and pickling it raises ``pickle.PicklingError``/``AttributeError`` from pickle.
``getstate_hook``/``reduce_ex_hook`` let a caller intercept pickling, as in PyTorch.
"""
from __future__ import annotations

import functools
from types import GenericAlias

from ..dataset import Dataset, IterableDataset
from ._hook_iterator import hook_iterator
from ._typing import _DataPipeMeta, _DataPipeType, issubtype

__all__ = ["DataChunk", "DFIterDataPipe", "IterDataPipe", "MapDataPipe"]


class _IterDataPipeMeta(_DataPipeMeta):
    """Installs NOTE [One live iterator per IterDataPipe] around each class's own ``__iter__``."""

    def __new__(mcs, name, bases, namespace, **kwargs):
        if "__iter__" in namespace:
            hook_iterator(namespace)
        return super().__new__(mcs, name, bases, namespace, **kwargs)


class _DataPipeBase:
    """What Iter and Map pipes share: functional forms, element type, pickling hooks."""

    functions: dict = {}
    getstate_hook = None
    reduce_ex_hook = None
    repr_hook = None
    str_hook = None
    __class_getitem__ = classmethod(GenericAlias)

    def __getattr__(self, attribute_name):
        # See NOTE [Functional forms]
        fn = type(self).functions.get(attribute_name)
        if fn is None or attribute_name.startswith("__"):
            raise AttributeError(f"'{type(self).__name__}' object has no attribute '{attribute_name}'")
        bound = functools.partial(fn, self)
        functools.update_wrapper(bound, fn, assigned=("__doc__",))
        return bound

    @classmethod
    def register_function(cls, function_name, function):
        cls.functions[function_name] = function

    @classmethod
    def register_datapipe_as_function(cls, function_name, cls_to_register, enable_df_api_tracing=False):
        if function_name in cls.functions:
            raise Exception(f"Unable to add DataPipe function name {function_name} as it is already taken")

        def class_function(source_dp, *args, **kwargs):
            return cls_to_register(source_dp, *args, **kwargs)

        functools.update_wrapper(class_function, cls_to_register, assigned=("__doc__",))
        cls.functions[function_name] = class_function

    @property
    def type(self):
        return self.__dict__.get("_reinforced_type") or type(self).type

    def reinforce_type(self, expected_type):
        """Narrow this pipe's element type to ``expected_type`` (a subtype of the current one); returns self."""
        if isinstance(expected_type, tuple):
            expected_type = tuple[expected_type]
        if not issubtype(expected_type, self.type.param):
            raise TypeError(f"Expected 'expected_type' as subtype of {self.type}, but found {expected_type!r}")
        self._reinforced_type = _DataPipeType(expected_type)
        return self

    def __getstate__(self):
        # See NOTE [Pickling DataPipes]
        state = dict(self.__dict__)
        hook = type(self).getstate_hook
        return hook(state) if hook is not None else state

    def __setstate__(self, state):
        self.__dict__.update(state)

    def __reduce_ex__(self, *args, **kwargs):
        hook = type(self).reduce_ex_hook
        if hook is not None:
            try:
                return hook(self)
            except NotImplementedError:
                pass
        return super().__reduce_ex__(*args, **kwargs)

    @classmethod
    def set_getstate_hook(cls, hook_fn):
        if cls.getstate_hook is not None and hook_fn is not None:
            raise RuntimeError("Attempt to override existing getstate_hook")
        cls.getstate_hook = hook_fn

    @classmethod
    def set_reduce_ex_hook(cls, hook_fn):
        if cls.reduce_ex_hook is not None and hook_fn is not None:
            raise RuntimeError("Attempt to override existing reduce_ex_hook")
        cls.reduce_ex_hook = hook_fn

    def __repr__(self):
        if type(self).repr_hook is not None:
            return type(self).repr_hook(self)
        return type(self).__qualname__

    def __str__(self):
        if type(self).str_hook is not None:
            return type(self).str_hook(self)
        return type(self).__qualname__

    def __dir__(self):
        return list(super().__dir__()) + list(type(self).functions)


class IterDataPipe(_DataPipeBase, IterableDataset, metaclass=_IterDataPipeMeta):
    """An iterable DataPipe: a stream you compose with functional forms (``dp.map(f).batch(2)``).

    Subclass it and implement ``__iter__`` (and ``__len__`` when the length is known). Each new
    iterator restarts the pipe and invalidates the previous one (NOTE [One live iterator per
    IterDataPipe]); override ``reset()`` to clear per-iteration state.

    Examples
    --------
    >>> from lucid.utils.data.datapipes.iter import IterableWrapper
    >>> list(IterableWrapper(range(6)).map(lambda x: x * 10).filter(lambda x: x % 20 == 0).batch(2))
    [[0, 20], [40]]
    """

    functions: dict = {}
    getstate_hook = None
    reduce_ex_hook = None
    repr_hook = None
    str_hook = None
    _valid_iterator_id = None
    _number_of_samples_yielded = 0
    _is_child_datapipe = False  # (a class attribute: a miss would go through __getattr__, slowly)

    def reset(self):
        """Clear per-iteration state; called each time a new iterator is created."""


class DFIterDataPipe(IterDataPipe):
    """An IterDataPipe of data frames (PyTorch's marker class for the DataFrame API)."""

    def _is_dfpipe(self):
        return True


class MapDataPipe(_DataPipeBase, Dataset, metaclass=_DataPipeMeta):
    """A map-style DataPipe: ``dp[i]`` and ``len(dp)``, composed with functional forms.

    Examples
    --------
    >>> from lucid.utils.data.datapipes.map import SequenceWrapper
    >>> dp = SequenceWrapper(range(5)).map(lambda x: x * x).batch(2)
    >>> dp[1], len(dp)
    ([4, 9], 3)
    """

    functions: dict = {}
    getstate_hook = None
    reduce_ex_hook = None
    repr_hook = None
    str_hook = None


class DataChunk(list):
    """A batch: a list that remembers it is one (what ``batch``/``groupby`` yield).

    Examples
    --------
    >>> from lucid.utils.data import DataChunk
    >>> DataChunk([1, 2]).as_str()
    '[1, 2]'
    """

    __class_getitem__ = classmethod(GenericAlias)

    def __init__(self, items=()):
        items = list(items)
        super().__init__(items)
        self.items = items

    def as_str(self, indent=""):
        return indent + "[" + ", ".join(str(i) for i in iter(self)) + "]"

    def __iter__(self):
        yield from super().__iter__()

    def raw_iterator(self):
        yield from self.items
