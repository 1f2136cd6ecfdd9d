"""PyTorch's default DDP communication hooks: plain, float16- and bfloat16-compressed all-reduce.

The bfloat16 ones need ``lucid.bfloat16`` (the ``bfloat16`` extra, NOTE [bfloat16]); MPI has
no bfloat16 datatype, so the buckets travel as their bits and are summed by a user-defined MPI
op in float32, one rounding per pair (NOTE [bfloat16 collectives]).

Each takes ``(process_group, bucket)`` (``None``: the world), divides the bucket by the group
size and all-reduces it, returning a :class:`lucid.futures.Future` of the averaged flat
gradients. MPI completes a request only inside an MPI call, so the future is complete when
the hook returns (``Work.get_future``); the buckets still go out in the same order on every
rank (NOTE [DDP buckets]).

Examples
--------
>>> from lucid.distributed.algorithms.ddp_comm_hooks import default_hooks
>>> sorted(n for n in default_hooks.__all__ if n.endswith("_hook"))
['allreduce_hook', 'bf16_compress_hook', 'fp16_compress_hook']
"""
from __future__ import annotations

__all__ = ["allreduce_hook", "fp16_compress_hook", "fp16_compress_wrapper", "bf16_compress_hook",
           "bf16_compress_wrapper"]


def _reduce(process_group, tensor):
    """A future of ``tensor`` averaged over ``process_group`` (in place)."""
    from ... import get_world_size
    from ...collectives import all_reduce

    tensor.div_(get_world_size(process_group))
    return all_reduce(tensor, group=process_group, async_op=True).get_future()


def allreduce_hook(process_group, bucket):
    """Average the bucket over the ranks with one all-reduce (what DDP does without a hook).

    Examples
    --------
    >>> model.register_comm_hook(None, allreduce_hook)   # doctest: +SKIP
    """
    return _reduce(process_group, bucket.buffer()).then(lambda fut: fut.value()[0])


def _compress_hook(dtype, process_group, bucket):
    buf = bucket.buffer()
    fut = _reduce(process_group, buf.to(dtype))

    def decompress(fut):
        buf.copy_(fut.value()[0])  # back into the bucket's own dtype
        return buf

    return fut.then(decompress)


def fp16_compress_hook(process_group, bucket):
    """Average the bucket in float16 (half the traffic), then cast back to its dtype.

    Examples
    --------
    >>> model.register_comm_hook(None, fp16_compress_hook)   # doctest: +SKIP
    """
    import lucid

    return _compress_hook(lucid.float16, process_group, bucket)


def _compress_wrapper(dtype, hook):
    def wrapped(state, bucket):
        buf = bucket.buffer()
        original = buf.clone()
        bucket.set_buffer(buf.to(dtype).to(buf.dtype))  # the rounding the wire would do

        def decompress(fut):
            value = fut.value()
            value = value[0] if isinstance(value, (list, tuple)) else value
            original.copy_(value)
            return original

        return hook(state, bucket).then(decompress)

    return wrapped


def fp16_compress_wrapper(hook):
    """``hook`` run on the bucket rounded to float16 (PyTorch's wrapper for any hook).

    Examples
    --------
    >>> model.register_comm_hook(None, fp16_compress_wrapper(allreduce_hook))   # doctest: +SKIP
    """
    import lucid

    return _compress_wrapper(lucid.float16, hook)


def bf16_compress_hook(process_group, bucket):
    """Average the bucket in bfloat16 (half the traffic, float32's range), then cast back to its dtype.

    Examples
    --------
    >>> model.register_comm_hook(None, bf16_compress_hook)   # doctest: +SKIP
    """
    import lucid

    return _compress_hook(lucid.bfloat16, process_group, bucket)


def bf16_compress_wrapper(hook):
    """``hook`` run on the bucket rounded to bfloat16 (PyTorch's wrapper for any hook).

    Examples
    --------
    >>> model.register_comm_hook(None, bf16_compress_wrapper(allreduce_hook))   # doctest: +SKIP
    """
    import lucid

    return _compress_wrapper(lucid.bfloat16, hook)
