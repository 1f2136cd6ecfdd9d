"""The single-iterator rule of IterDataPipes, installed around every ``__iter__``.

# NOTE [One live iterator per IterDataPipe]
As in PyTorch, each new iterator of an IterDataPipe resets it (``reset()``) and invalidates
the iterators made before: their next ``next()`` raises a RuntimeError naming the pipe. When
``__iter__`` is a generator function the reset happens at the first ``next()`` (the body has
not run before); otherwise when ``iter()`` is called. A child of ``fork``/``demux`` shares its
container's generation (see ``iter/combining.py``): a new iterator of one child restarts all of
them, unless that child has not started since the last restart.
"""
from __future__ import annotations

import functools
import inspect

_FEEDBACK = ("\nFor feedback regarding this single iterator per IterDataPipe constraint, feel free "
             "to comment on this issue: https://github.com/pytorch/data/issues/45.")


def _describe(datapipe):
    """``ClassName(arg=value, ...)`` for the constructor arguments the pipe still holds."""
    try:
        params = inspect.signature(type(datapipe)).parameters
    except (TypeError, ValueError):
        params = {}
    parts = []
    for name in params:
        if name in getattr(datapipe, "__dict__", {}):
            value = datapipe.__dict__[name]
            parts.append(f"{name}={value.__name__ if inspect.isfunction(value) else repr(value)}")
    return f"{type(datapipe).__name__}({', '.join(parts)})"


def _invalid_message(datapipe):
    return ("This iterator has been invalidated because another iterator has been created "
            f"from the same IterDataPipe: {_describe(datapipe)}\n"
            "This may be caused by multiple references to the same IterDataPipe. We recommend "
            "using `.fork()` if that is necessary." + _FEEDBACK)


def _start_generation(datapipe):
    """A new iterator: bump the pipe's generation and reset it; returns the new generation."""
    if datapipe._is_child_datapipe:
        return datapipe._set_main_datapipe_valid_iterator_id()
    gen = datapipe.__dict__.get("_valid_iterator_id")
    datapipe._valid_iterator_id = 0 if gen is None else gen + 1
    datapipe.reset()
    return datapipe._valid_iterator_id


def _check_valid(datapipe, iterator_id):
    if datapipe._is_child_datapipe:
        if not datapipe._check_valid_iterator_id(iterator_id):
            raise RuntimeError("This iterator has been invalidated, because a new iterator has been created "
                               f"from one of the ChildDataPipes of {_describe(datapipe.main_datapipe)}."
                               + _FEEDBACK)
    elif datapipe._valid_iterator_id != iterator_id:
        raise RuntimeError(_invalid_message(datapipe))


class _GuardedIterator:
    """The iterator a non-generator ``__iter__`` returned, checked for validity at each ``next``."""

    def __init__(self, iterator, datapipe, iterator_id):
        self.iterator, self.datapipe, self.iterator_id = iterator, datapipe, iterator_id

    def __iter__(self):
        return self

    def __next__(self):
        _check_valid(self.datapipe, self.iterator_id)
        return next(self.iterator)

    def __getattr__(self, name):
        return getattr(self.iterator, name)


def hook_iterator(namespace):
    """Wrap ``namespace['__iter__']`` with the rule of NOTE [One live iterator per IterDataPipe]."""
    iter_fn = namespace["__iter__"]
    if inspect.isgeneratorfunction(iter_fn):
        @functools.wraps(iter_fn)
        def guarded_generator(self, *args, **kwargs):
            iterator_id = _start_generation(self)
            gen = iter_fn(self, *args, **kwargs)
            try:
                response = gen.send(None)
                while True:
                    request = yield response
                    if self._valid_iterator_id != iterator_id or self._is_child_datapipe:  # (inlined: hot)
                        _check_valid(self, iterator_id)
                    response = gen.send(request)
            except StopIteration:
                return
            finally:
                gen.close()

        namespace["__iter__"] = guarded_generator
        return

    if iter_fn is None:
        return

    @functools.wraps(iter_fn)
    def guarded_iter(self, *args, **kwargs):
        iterator = iter_fn(self, *args, **kwargs)
        iterator_id = _start_generation(self)
        if "__next__" in type(self).__dict__ or iterator is self:
            return iterator  # (a pipe that is its own iterator: nothing else could be invalidated)
        return _GuardedIterator(iterator, self, iterator_id)

    namespace["__iter__"] = guarded_iter
