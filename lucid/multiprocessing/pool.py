"""``lucid.multiprocessing.pool`` (``torch.multiprocessing.pool``): a process pool whose workers
receive and return tensors through shared memory.

Python's pool pickles with ``ForkingPickler``, where :mod:`lucid.multiprocessing` registered the
tensor reductions, so :class:`Pool` is Python's pool with workers that collect garbage after each
task (:func:`clean_worker`, as PyTorch's: a shared tensor's memory is released promptly).

Examples
--------
>>> from lucid.multiprocessing.pool import Pool
>>> with Pool(1) as pool:
...     pool.map(abs, [-1, 2])
[1, 2]
"""
from __future__ import annotations

import gc
import multiprocessing.pool

from .queue import SimpleQueue

__all__ = ["Pool", "SimpleQueue", "clean_worker"]


def clean_worker(*args, **kwargs):
    """Run the pool's worker loop, then collect garbage (frees shared tensors at once)."""
    multiprocessing.pool.worker(*args, **kwargs)
    gc.collect()


class Pool(multiprocessing.pool.Pool):
    """``multiprocessing.pool.Pool`` whose workers run :func:`clean_worker`."""

    @staticmethod
    def _repopulate_pool_static(ctx, Process, processes, pool, inqueue, outqueue, initializer, initargs,
                                maxtasksperchild, wrap_exception):
        for _ in range(processes - len(pool)):
            w = Process(ctx, target=clean_worker,
                        args=(inqueue, outqueue, initializer, initargs, maxtasksperchild, wrap_exception))
            w.name = w.name.replace("Process", "PoolWorker")
            w.daemon = True
            w.start()
            pool.append(w)
