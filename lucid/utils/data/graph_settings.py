"""Settings applied over a whole DataPipe graph: sharding, shuffling, random seeds.

A DataLoader uses these: ``shuffle=`` turns every shuffler on or off
(``apply_shuffle_settings``); each epoch every random pipe gets a seed drawn from one shared
generator (``apply_random_seed``), identical in all workers; each worker keeps its share
(``apply_sharding`` with ``num_workers`` instances).
"""
from __future__ import annotations

import inspect
import warnings

from .graph import traverse_dps

__all__ = ["apply_random_seed", "apply_sharding", "apply_shuffle_seed", "apply_shuffle_settings",
           "get_all_graph_pipes"]


def get_all_graph_pipes(graph):
    """Every pipe in ``graph`` (from ``traverse_dps``) once, outermost first."""
    results, seen = [], set()

    def walk(g):
        for dp_id, (datapipe, sub_graph) in g.items():
            if dp_id in seen:
                continue
            seen.add(dp_id)
            results.append(datapipe)
            walk(sub_graph)

    walk(graph)
    return results


def _has_method(datapipe, *names):
    return all(inspect.ismethod(getattr(datapipe, n, None)) for n in names)


def _is_sharding_datapipe(datapipe):
    from .datapipes.iter.sharding import _ShardingIterDataPipe

    return isinstance(datapipe, _ShardingIterDataPipe) or _has_method(datapipe, "apply_sharding")


def apply_sharding(datapipe, num_of_instances, instance_id, sharding_group=None):
    """Call ``apply_sharding`` on each sharding pipe (``sharding_filter``) of the graph.

    Raises RuntimeError if two sharding pipes lie on one path (data would be lost).

    Examples
    --------
    >>> from lucid.utils.data.datapipes.iter import IterableWrapper
    >>> from lucid.utils.data.graph_settings import apply_sharding
    >>> list(apply_sharding(IterableWrapper(range(5)).sharding_filter(), 2, 1))
    [1, 3]
    """
    from .datapipes.iter.sharding import SHARDING_PRIORITIES

    if sharding_group is None:
        sharding_group = SHARDING_PRIORITIES.DEFAULT

    def walk(graph, applied_above):
        for datapipe_, sub_graph in graph.values():
            applied = applied_above
            if _is_sharding_datapipe(datapipe_):
                if applied_above is not None:
                    raise RuntimeError("Sharding twice on a single pipeline is likely unintended and will cause "
                                       f"data loss. Sharding already applied to {applied_above} while trying to "
                                       f"apply to {datapipe_}")
                if len(inspect.signature(datapipe_.apply_sharding).parameters) < 3:
                    datapipe_.apply_sharding(num_of_instances, instance_id)
                else:
                    datapipe_.apply_sharding(num_of_instances, instance_id, sharding_group=sharding_group)
                applied = datapipe_
            walk(sub_graph, applied)

    walk(traverse_dps(datapipe), None)
    return datapipe


def _is_shuffle_datapipe(datapipe):
    return _has_method(datapipe, "set_shuffle", "set_seed")


def apply_shuffle_settings(datapipe, shuffle=None):
    """Turn every shuffler of the graph on or off (``None``: leave them). With ``shuffle=True``
    and no shuffler, one is added at the end (with a warning), as in PyTorch."""
    if shuffle is None:
        return datapipe
    shufflers = [p for p in get_all_graph_pipes(traverse_dps(datapipe)) if _is_shuffle_datapipe(p)]
    if not shufflers and shuffle:
        warnings.warn("`shuffle=True` was set, but the datapipe does not contain a `Shuffler`. Adding one at the "
                      "end. Be aware that the default buffer size might not be sufficient for your task.",
                      stacklevel=2)
        datapipe = datapipe.shuffle()
        shufflers = [datapipe]
    for shuffler in shufflers:
        shuffler.set_shuffle(shuffle)
    return datapipe


def _draw_seed(rng):
    from .dataset import _rng

    return int(_rng(rng, "apply_random_seed").integers(0, 2 ** 63))


def apply_random_seed(datapipe, rng):
    """Give each random pipe (one with ``set_seed``) of the graph a seed drawn from ``rng``
    (a ``lucid.Generator``), in graph order.

    Examples
    --------
    >>> import lucid
    >>> from lucid.utils.data.datapipes.iter import IterableWrapper
    >>> from lucid.utils.data.graph_settings import apply_random_seed
    >>> dp = IterableWrapper(range(5)).shuffle()
    >>> a = list(apply_random_seed(dp, lucid.Generator().manual_seed(1)))
    >>> a == list(apply_random_seed(dp, lucid.Generator().manual_seed(1)))
    True
    """
    seen = set()
    for pipe in get_all_graph_pipes(traverse_dps(datapipe)):
        if id(pipe) not in seen and _has_method(pipe, "set_seed"):
            seen.add(id(pipe))
            pipe.set_seed(_draw_seed(rng))
    return datapipe


def apply_shuffle_seed(datapipe, rng):
    """Deprecated: ``apply_random_seed``."""
    warnings.warn("`apply_shuffle_seed` is deprecated since 1.12 and will be removed in the future releases. "
                  "Please use `apply_random_seed` instead.", FutureWarning, stacklevel=2)
    return apply_random_seed(datapipe, rng)
