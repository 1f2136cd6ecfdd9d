"""The graph of a DataPipe pipeline: ``traverse_dps(dp)`` -> ``{id(dp): (dp, {sources...})}``.

# NOTE [Finding a pipe's sources]
A pipe's sources are the DataPipes it holds: in its attributes, in lists/tuples/dicts/sets
there, in ``functools.partial`` arguments and as the ``self`` of bound methods (PyTorch finds
the same ones by pickling the pipe with a hook). The search stops at each DataPipe it meets (that
pipe's own sources are its children in the graph). A pipe met again on its own path (a cycle)
appears once more with no children; shared sources (a diamond) appear under each user.
"""
from __future__ import annotations

import functools
import types
from typing import Union

from .datapipes.datapipe import IterDataPipe, MapDataPipe

__all__ = ["traverse", "traverse_dps"]

DataPipe = Union[IterDataPipe, MapDataPipe]
DataPipeGraph = dict  # {int: (DataPipe, DataPipeGraph)}



def _direct_sources(datapipe, only_datapipe):
    """The DataPipes ``datapipe`` holds, in first-met order. See NOTE [Finding a pipe's sources]."""
    found, seen_ids, seen_objs = [], {id(datapipe)}, set()

    def visit(obj):
        if isinstance(obj, (IterDataPipe, MapDataPipe)):
            if id(obj) not in seen_ids:
                seen_ids.add(id(obj))
                found.append(obj)
            return
        if id(obj) in seen_objs or isinstance(obj, (str, bytes, int, float, bool, type(None), type)):
            return
        seen_objs.add(id(obj))
        if isinstance(obj, dict):
            for k, v in obj.items():
                visit(k)
                visit(v)
        elif isinstance(obj, (list, tuple, set, frozenset)):
            for v in obj:
                visit(v)
        elif isinstance(obj, functools.partial):
            visit(obj.func)
            visit(obj.args)
            visit(obj.keywords)
        elif isinstance(obj, types.MethodType):
            visit(obj.__self__)
        elif not only_datapipe and hasattr(obj, "__dict__") and not isinstance(
                obj, (types.FunctionType, types.ModuleType, types.BuiltinFunctionType)):
            visit(vars(obj))

    visit(vars(datapipe) if hasattr(datapipe, "__dict__") else {})
    return found


def _traverse(datapipe, only_datapipe, path):
    dp_id = id(datapipe)
    if dp_id in path:
        return {dp_id: (datapipe, {})}
    path = path | {dp_id}
    children = {}
    for source in _direct_sources(datapipe, only_datapipe):
        children.update(_traverse(source, only_datapipe, path))
    return {dp_id: (datapipe, children)}


def traverse_dps(datapipe):
    """The graph of the pipeline ending at ``datapipe``: ``{id(dp): (dp, graph of its sources)}``.

    Parameters
    ----------
    datapipe : IterDataPipe or MapDataPipe

    Returns
    -------
    dict

    Examples
    --------
    >>> from lucid.utils.data.datapipes.iter import IterableWrapper
    >>> from lucid.utils.data.graph import traverse_dps
    >>> src = IterableWrapper(range(3)); dp = src.batch(2)
    >>> g = traverse_dps(dp)
    >>> g[id(dp)][0] is dp, list(g[id(dp)][1]) == [id(src)]
    (True, True)
    """
    return _traverse(datapipe, only_datapipe=True, path=frozenset())


def traverse(datapipe, only_datapipe=None):
    """Deprecated alias of ``traverse_dps``; ``only_datapipe=False`` also searches the
    attributes of any object the pipes hold."""
    import warnings

    msg = "`traverse` function and will be removed after 1.13. Please use `traverse_dps` instead."
    if not only_datapipe:
        msg += " And, the behavior will be changed to the equivalent of `only_datapipe=True`."
    warnings.warn(msg, FutureWarning, stacklevel=2)
    if only_datapipe is None:
        only_datapipe = False
    return _traverse(datapipe, only_datapipe=only_datapipe, path=frozenset())


