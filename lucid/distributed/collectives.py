"""Tensor collectives (``all_reduce``, ``broadcast`` ...) on MPI, with PyTorch's names.

NOTE [Collective buffers]
A collective reads and writes the tensor's own ndarray: MPI gets the buffer itself when it
is C-contiguous, so nothing is copied. A non-contiguous view is packed into a contiguous
temporary and the result written back through the view (correct, one copy each way;
PyTorch refuses such tensors). A read-only view (an ``expand``) can't be written. Every
written tensor gets its version bumped, as an in-place op would (NOTE [In-place
semantics]), and one that requires grad is refused while grad mode is on or when it is
inside a graph: autograd can't see a collective's write (call it on ``t.detach()`` or
under ``no_grad``). Arguments are checked the same way on every rank. See NOTE [Same
checks on every rank] in process_group.py.

NOTE [Collectives on a device]
MPI here moves host memory (the pip mpich is not CUDA-aware). A tensor on a device is staged
through the host, as PyTorch's gloo backend does with CUDA tensors: an explicit copy to the
host before the collective, and one back into the tensor when it completes. Correct, and
synchronous per tensor; a GPU job would use NCCL for speed (not here: no multi-GPU machine
has been lent to prove it).

NOTE [bfloat16 collectives]
MPI has no bfloat16 datatype. A bfloat16 tensor (NOTE [bfloat16]) goes on the wire as its bits,
a uint16 view of its buffer (``_wire``): moving collectives (broadcast, gathers, scatters,
all-to-all, send/recv) copy bits exactly. Reductions use user-defined MPI ops (``_bf16_op``,
made once per process) that combine two bfloat16 buffers in float32 and round once per pair,
as NCCL's and gloo's bfloat16 reductions do; ``AVG`` divides the sum in float32 and rounds.
Dtype checks and messages use the tensors' own dtypes, never the wire's.
"""
from __future__ import annotations

import enum
import warnings

import numpy as np

from .._core import backend
from .._core import dtypes as _dtypes
from .._core.grad_mode import STATE
from .._core.tensor import Tensor
from .process_group import CollectiveArgumentError, _mpi, _resolve


class ReduceOp(enum.Enum):
    """How ``all_reduce``/``reduce``/``reduce_scatter`` combine values.

    ``AVG`` is a sum divided by the group size (floating and complex tensors only). On
    ``bool`` tensors ``SUM``/``MAX`` are a logical or, ``PRODUCT``/``MIN`` a logical and.
    """

    SUM = "sum"
    AVG = "avg"
    PRODUCT = "product"
    MIN = "min"
    MAX = "max"
    BAND = "band"
    BOR = "bor"
    BXOR = "bxor"


_BOOL_OPS = {"sum": "LOR", "max": "LOR", "bor": "LOR", "product": "LAND", "min": "LAND",
             "band": "LAND", "bxor": "LXOR"}
_OPS = {"sum": "SUM", "avg": "SUM", "product": "PROD", "min": "MIN", "max": "MAX",
        "band": "BAND", "bor": "BOR", "bxor": "BXOR"}


class BitwiseReduceOpError(RuntimeError, TypeError):
    """``ReduceOp.BAND/BOR/BXOR`` on a floating or complex tensor: PyTorch's RuntimeError, and
    the TypeError Lucid raised before."""


class ComplexReduceOpError(ValueError, TypeError):
    """``ReduceOp.MIN/MAX`` on a complex tensor: PyTorch's ValueError, and the TypeError Lucid
    raised before."""


def _mpi_op(op, dtype, api):
    """``(MPI op, whether to divide by the group size)`` for ``op`` on ``dtype`` (the tensor's,
    not the wire's: NOTE [bfloat16 collectives])."""
    MPI = _mpi(api)
    if isinstance(op, str) and op.upper() in ReduceOp.__members__:
        op = ReduceOp[op.upper()]
    if not isinstance(op, ReduceOp):
        raise TypeError(f"{api}: op must be a ReduceOp, got {op!r}")
    kind, name = _dtypes.kind_of(dtype), op.value
    if _is_bf16(dtype):
        if name in ("band", "bor", "bxor"):
            raise BitwiseReduceOpError(f"{api}: ReduceOp.{op.name} needs an integer tensor, got bfloat16")
        return _bf16_op(MPI, "sum" if name == "avg" else name), name == "avg"
    if kind == "b":
        if name == "avg":
            raise TypeError(f"{api}: ReduceOp.AVG is not defined for bool tensors")
        return getattr(MPI, _BOOL_OPS[name]), False
    if name == "avg" and kind not in "fc":
        raise TypeError(f"{api}: ReduceOp.AVG needs a floating or complex tensor, got {dtype}")
    if name in ("min", "max") and kind == "c":
        raise ComplexReduceOpError(f"{api}: ReduceOp.{op.name} is not defined for complex tensors")
    if name in ("band", "bor", "bxor") and kind not in "iu":
        raise BitwiseReduceOpError(f"{api}: ReduceOp.{op.name} needs an integer tensor, got {dtype}")
    return getattr(MPI, _OPS[name]), name == "avg"


# ------------------------------------------------------------------ buffers


def _is_bf16(dtype):
    return _dtypes.BF16 is not None and dtype == _dtypes.BF16


_BF16_OPS = {}
_BF16_UFUNCS = {"sum": np.add, "product": np.multiply, "max": np.maximum, "min": np.minimum}


def _bf16_op(MPI, name):
    """The user-defined MPI op reducing bfloat16 bits with ``name`` (NOTE [bfloat16 collectives])."""
    op = _BF16_OPS.get(name)
    if op is None:
        ufunc, bf16 = _BF16_UFUNCS[name], _dtypes.BF16

        def combine(inbuf, inoutbuf, datatype):
            a = np.frombuffer(inbuf, dtype=bf16)
            b = np.frombuffer(inoutbuf, dtype=bf16)
            b[...] = ufunc(a.astype(np.float32), b.astype(np.float32)).astype(bf16)

        op = _BF16_OPS[name] = MPI.Op.Create(combine, commute=True)
    return op


def _wire(arr):
    """What MPI sends of a contiguous host array: a bfloat16 one as its uint16 bits."""
    return arr.view(np.uint16) if _is_bf16(arr.dtype) else arr


def _check_tensor(t, api, what="tensor"):
    if not isinstance(t, Tensor):
        raise TypeError(f"{api}: {what} must be a lucid Tensor, got {type(t).__name__}")
    if t._level:
        raise TypeError(f"{api}: collectives can't run on a tensor traced by lucid.func transforms")
    if t._data.dtype in _dtypes.FLOAT8:  # (float8_e5m2's NumPy kind is "f": NOTE [float8])
        raise TypeError(f"{api}: {what} has dtype {t._data.dtype}: MPI has no float8 type; a broadcast, "
                        "gather or send can move its bits as t.view(lucid.uint8)")
    if t._data.dtype.kind not in "biufc" and not _is_bf16(t._data.dtype):
        raise TypeError(f"{api}: {what} has dtype {t._data.dtype}, which MPI can't reduce")
    return t._data


def _source(t, api, what="tensor"):
    """A contiguous host array with ``t``'s values (``t``'s own buffer when possible; a host copy
    of a device tensor's, NOTE [Collectives on a device]), as MPI sends it (``_wire``)."""
    return _wire(np.ascontiguousarray(backend.host(_check_tensor(t, api, what))))


class _Target:
    """A tensor a collective writes: its buffer, or a contiguous stand-in written back; ``tmp``
    is what MPI writes (``_wire``: a bfloat16 buffer's uint16 view)."""

    __slots__ = ("tensor", "arr", "tmp", "direct")

    def __init__(self, t, api, what="tensor"):
        arr = _check_tensor(t, api, what)
        if t._rg and (STATE.grad_enabled or t.grad_fn is not None):
            raise RuntimeError(
                f"{api}: {what} (shape {tuple(arr.shape)}) requires grad; a collective writes into "
                "it in place, which autograd can't record. Use tensor.detach() or lucid.no_grad()")
        if not backend.writeable(arr):
            raise RuntimeError(f"{api}: {what} (shape {tuple(arr.shape)}) is a read-only view "
                               "(e.g. made by expand); a collective can't write into it")
        self.tensor, self.arr = t, arr
        # a device tensor's values go through a host copy (NOTE [Collectives on a device])
        self.direct = arr.__class__ is np.ndarray and arr.flags.c_contiguous
        self.tmp = _wire(arr if self.direct else np.ascontiguousarray(backend.host(arr)))

    def scale(self, n):
        """Divide the result by ``n`` (``ReduceOp.AVG``), in float32 for bfloat16."""
        if self.tmp.dtype == self.arr.dtype:
            np.true_divide(self.tmp, n, out=self.tmp)
        else:
            values = self.tmp.view(self.arr.dtype)
            values[...] = (values.astype(np.float32) / n).astype(self.arr.dtype)

    def done(self, api):
        """Write the stand-in back (if any) and bump the version."""
        if not self.direct:
            with backend.on_device(self.arr):  # NOTE [Several devices]
                self.arr[...] = backend.on_device_of(self.tmp.view(self.arr.dtype), self.arr)
        v = self.tensor._version
        v[0] += 1
        if len(v) == 1:
            v.append(api)
        else:
            v[1] = api


def _same_layout(tensors, like, api, what):
    for i, t in enumerate(tensors):
        _check_tensor(t, api, f"{what}[{i}]")
        if t.shape != like.shape or t.dtype != like.dtype:
            raise CollectiveArgumentError(f"{api}: {what}[{i}] has shape {tuple(t.shape)} and dtype {t.dtype}; "
                                          f"expected shape {tuple(like.shape)} and dtype {like.dtype}")


def _list_len(lst, n, api, what):
    if not isinstance(lst, (list, tuple)) or len(lst) != n:
        got = len(lst) if isinstance(lst, (list, tuple)) else type(lst).__name__
        raise CollectiveArgumentError(f"{api}: {what} must be a list of {n} tensors (one per rank), got {got}")


# --------------------------------------------------------------------- work


class Work:
    """The handle of a collective started with ``async_op=True``.

    Backed by non-blocking MPI requests; the output tensors hold the result only after
    :meth:`wait` (or once :meth:`is_completed` returns True). Keep the tensors unchanged
    until then.
    """

    def __init__(self, requests, finish=None, result=None, status=None):
        self._requests, self._finish, self._result = list(requests), finish, result
        self._status = status  # an MPI.Status for a receive: who sent it
        self._check = None  # a receive's size check: NOTE [Receive sizes]
        self._done = False

    def _complete(self):
        self._done = True
        self._requests = []
        if self._finish is not None:
            finish, self._finish = self._finish, None
            finish()

    def wait(self, timeout=None):
        """Block until the collective has finished (``timeout`` is ignored). Returns True."""
        if not self._done:
            if self._status is not None:
                self._received(lambda: self._requests[0].Wait(self._status))
            elif self._requests:
                _mpi("Work.wait").Request.Waitall(self._requests)
            self._complete()
        return True

    def is_completed(self):
        """Whether it has finished (a non-blocking test that also drives MPI's progress)."""
        if self._done:
            return True
        if self._status is not None:
            ready = self._received(lambda: self._requests[0].Test(self._status))
        else:
            ready = not self._requests or _mpi("Work.is_completed").Request.Testall(self._requests)
        if ready:
            self._complete()
        return self._done

    def _received(self, complete):
        """Run a receive's Wait/Test; a message of another size raises. See NOTE [Receive sizes]."""
        MPI = _mpi("Work.wait")
        try:
            ready = complete()
        except MPI.Exception as e:
            if e.Get_error_class() != MPI.ERR_TRUNCATE or self._check is None:
                raise
            self._fail()
            raise self._check(None) from None
        if ready is not False and self._check is not None:
            error = self._check(self._status.Get_count(MPI.BYTE))
            if error is not None:
                self._fail()
                raise error
        return ready

    def _fail(self):
        # the request is over (MPI completed it with the error); the tensor's value is undefined
        self._done, self._requests, self._finish = True, [], None

    def is_success(self):
        return self.is_completed()

    def exception(self):
        return None

    def result(self):
        """The output tensors (after :meth:`wait`)."""
        self.wait()
        return self._result

    def get_future(self):
        """A :class:`lucid.futures.Future` of :meth:`result` (PyTorch's ``Work.get_future``).

        MPI has no completion callbacks, so the future is completed here, by waiting for the
        operation: call it when you are ready to block (or poll :meth:`is_completed` first).
        """
        from ..futures import Future

        fut = Future()
        try:
            fut.set_result(self.result())
        except Exception as e:  # noqa: BLE001  (the future carries the failure, as PyTorch's does)
            fut.set_exception(e)
        return fut

    def __repr__(self):
        return f"Work(completed={self._done})"


def _run(blocking, nonblocking, finish, async_op, result):
    """Start one MPI operation: blocking now, or a Work around its request."""
    if not async_op:
        blocking()
        finish()
        return None
    return Work([nonblocking()], finish, result)


def _member(group, api):
    """The group and its communicator, or ``(pg, None)`` when this process is not a member."""
    pg = _resolve(group, api)
    if pg.comm is None:
        warnings.warn(f"{api}: running on a rank that does not belong to the given group; "
                      "nothing is done", stacklevel=3)
    return pg, pg.comm


def _finisher(targets, api, scale=None):
    def finish():
        for t in targets:
            if scale is not None:
                t.scale(scale)
            t.done(api)
    return finish


# -------------------------------------------------------------- collectives


def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    """Combine ``tensor`` across the ranks of ``group`` with ``op``; every rank gets the result, in place.

    Parameters
    ----------
    tensor : Tensor
        Input and output (any bool, int, float or complex dtype).
    op : ReduceOp
    group : ProcessGroup, optional
        Default: the world.
    async_op : bool
        Return a :class:`Work` handle instead of waiting.

    Examples
    --------
    >>> import lucid, lucid.distributed as dist
    >>> t = lucid.tensor([1.0, 2.0])
    >>> dist.all_reduce(t)        # doctest: +SKIP
    >>> t                         # doctest: +SKIP
    tensor([2., 4.])
    >>> # (with 2 ranks)
    """
    api = "all_reduce"
    _resolve(group, api)  # first: "not initialized" beats "no mpi4py"
    target = _Target(tensor, api)
    mop, avg = _mpi_op(op, target.arr.dtype, api)
    pg, comm = _member(group, api)
    if comm is None:
        return None
    MPI, buf = _mpi(api), target.tmp
    return _run(lambda: comm.Allreduce(MPI.IN_PLACE, buf, mop), lambda: comm.Iallreduce(MPI.IN_PLACE, buf, mop),
                _finisher([target], api, pg.size() if avg else None), async_op, [tensor])


def reduce(tensor, dst=None, op=ReduceOp.SUM, group=None, async_op=False, group_dst=None):
    """Combine ``tensor`` across ranks into the tensor of rank ``dst`` (a global rank).

    The other ranks' tensors are left unchanged.
    """
    api = "reduce"
    _resolve(group, api)
    target = _Target(tensor, api)
    mop, avg = _mpi_op(op, target.arr.dtype, api)
    pg, comm = _member(group, api)
    root = _root(pg, dst, group_dst, api, "dst")
    if comm is None:
        return None
    MPI, buf = _mpi(api), target.tmp
    if comm.Get_rank() == root:
        blocking = lambda: comm.Reduce(MPI.IN_PLACE, buf, mop, root)  # noqa: E731
        nonblocking = lambda: comm.Ireduce(MPI.IN_PLACE, buf, mop, root)  # noqa: E731
        finish = _finisher([target], api, pg.size() if avg else None)
    else:
        blocking = lambda: comm.Reduce(buf, None, mop, root)  # noqa: E731
        nonblocking = lambda: comm.Ireduce(buf, None, mop, root)  # noqa: E731
        finish = _finisher([], api)
    return _run(blocking, nonblocking, finish, async_op, [tensor])


def broadcast(tensor, src=None, group=None, async_op=False, group_src=None):
    """Copy rank ``src``'s ``tensor`` (``src`` is a global rank) into every rank's ``tensor``."""
    api = "broadcast"
    _resolve(group, api)
    target = _Target(tensor, api)
    pg, comm = _member(group, api)
    root = _root(pg, src, group_src, api, "src")
    if comm is None:
        return None
    buf = target.tmp
    return _run(lambda: comm.Bcast(buf, root), lambda: comm.Ibcast(buf, root),
                _finisher([target], api), async_op, [tensor])


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    """Concatenate every rank's ``input_tensor`` into ``output_tensor``.

    ``output_tensor`` has ``world_size`` times the elements of ``input_tensor`` (shape
    ``(world_size * n, ...)`` or ``(world_size, n, ...)``), rank ``i``'s part at block ``i``.
    """
    api = "all_gather_into_tensor"
    pg = _resolve(group, api)
    src = _source(input_tensor, api, "input_tensor")
    target = _Target(output_tensor, api, "output_tensor")
    _check_blocks(output_tensor, input_tensor, pg.size(), api, "output_tensor", "input_tensor")
    pg, comm = _member(group, api)
    if comm is None:
        return None
    out = target.tmp
    return _run(lambda: comm.Allgather(src, out), lambda: comm.Iallgather(src, out),
                _finisher([target], api), async_op, [output_tensor])


def all_gather(tensor_list, tensor, group=None, async_op=False):
    """Gather every rank's ``tensor`` into ``tensor_list[i]`` (one tensor per rank, same shape)."""
    api = "all_gather"
    pg = _resolve(group, api)
    src = _source(tensor, api)
    _list_len(tensor_list, pg.size(), api, "tensor_list")
    _same_layout(tensor_list, tensor, api, "tensor_list")
    targets = [_Target(t, api, f"tensor_list[{i}]") for i, t in enumerate(tensor_list)]
    pg, comm = _member(group, api)
    if comm is None:
        return None
    out = np.empty((pg.size(),) + src.shape, src.dtype)
    return _run(lambda: comm.Allgather(src, out), lambda: comm.Iallgather(src, out),
                _scatter_rows(out, targets, api), async_op, list(tensor_list))


def reduce_scatter_tensor(output, input, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduce ``input`` (``world_size`` blocks) across ranks; rank ``i`` gets block ``i`` in ``output``."""
    api = "reduce_scatter_tensor"
    pg = _resolve(group, api)
    src = _source(input, api, "input")
    target = _Target(output, api, "output")
    _check_blocks(input, output, pg.size(), api, "input", "output")
    mop, avg = _mpi_op(op, target.arr.dtype, api)
    pg, comm = _member(group, api)
    if comm is None:
        return None
    out = target.tmp
    return _run(lambda: comm.Reduce_scatter_block(src, out, mop),
                lambda: comm.Ireduce_scatter_block(src, out, mop),
                _finisher([target], api, pg.size() if avg else None), async_op, [output])


def reduce_scatter(output, input_list, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduce ``input_list[i]`` across ranks into rank ``i``'s ``output``."""
    api = "reduce_scatter"
    pg = _resolve(group, api)
    _list_len(input_list, pg.size(), api, "input_list")
    _same_layout(input_list, output, api, "input_list")
    target = _Target(output, api, "output")
    mop, avg = _mpi_op(op, target.arr.dtype, api)
    pg, comm = _member(group, api)
    if comm is None:
        return None
    src = _wire(np.stack([backend.host(t._data) for t in input_list])) if input_list \
        else np.empty(0, target.tmp.dtype)
    out = target.tmp
    return _run(lambda: comm.Reduce_scatter_block(src, out, mop),
                lambda: comm.Ireduce_scatter_block(src, out, mop),
                _finisher([target], api, pg.size() if avg else None), async_op, [output])


def gather(tensor, gather_list=None, dst=None, group=None, async_op=False, group_dst=None):
    """Collect every rank's ``tensor`` into ``gather_list`` on rank ``dst`` (a global rank).

    ``gather_list`` is given on ``dst`` only (``world_size`` tensors like ``tensor``).
    """
    api = "gather"
    pg = _resolve(group, api)
    src = _source(tensor, api)
    root = _root(pg, dst, group_dst, api, "dst")
    is_root = pg.comm is not None and pg.comm.Get_rank() == root
    targets = _root_list(gather_list, tensor, pg.size(), is_root, api, "gather_list")
    pg, comm = _member(group, api)
    if comm is None:
        return None
    out = np.empty((pg.size(),) + src.shape, src.dtype) if is_root else None
    finish = _scatter_rows(out, targets, api) if is_root else _finisher([], api)
    return _run(lambda: comm.Gather(src, out, root), lambda: comm.Igather(src, out, root),
                finish, async_op, gather_list)


def scatter(tensor, scatter_list=None, src=None, group=None, async_op=False, group_src=None):
    """Send ``scatter_list[i]`` of rank ``src`` (a global rank) to rank ``i``'s ``tensor``."""
    api = "scatter"
    pg = _resolve(group, api)
    target = _Target(tensor, api)
    root = _root(pg, src, group_src, api, "src")
    is_root = pg.comm is not None and pg.comm.Get_rank() == root
    if is_root:
        _list_len(scatter_list, pg.size(), api, "scatter_list")
        _same_layout(scatter_list, tensor, api, "scatter_list")
    elif scatter_list:
        raise ValueError(f"{api}: scatter_list must be given on the source rank only")
    pg, comm = _member(group, api)
    if comm is None:
        return None
    send = _wire(np.stack([backend.host(t._data) for t in scatter_list])) if is_root else None
    out = target.tmp
    return _run(lambda: comm.Scatter(send, out, root), lambda: comm.Iscatter(send, out, root),
                _finisher([target], api), async_op, [tensor])


def barrier(group=None, async_op=False, device_ids=None):
    """Wait until every rank of ``group`` has reached this call."""
    api = "barrier"
    pg, comm = _member(group, api)
    if comm is None:
        return None
    return _run(comm.Barrier, comm.Ibarrier, lambda: None, async_op, None)


def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None, group=None,
                      async_op=False):
    """Rank ``i`` sends block ``j`` of ``input`` (split along dim 0) to rank ``j``, which stores it
    as block ``i`` of ``output``.

    Without split sizes the first dimension is cut into ``world_size`` equal blocks; with them,
    ``input_split_sizes[j]`` rows go to rank ``j`` and ``output_split_sizes[i]`` rows come from
    rank ``i`` (they must match what the other ranks send).
    """
    api = "all_to_all_single"
    pg = _resolve(group, api)
    src = _source(input, api, "input")
    target = _Target(output, api, "output")
    if input._data.dtype != output._data.dtype:
        raise TypeError(f"{api}: output has dtype {output._data.dtype} but input has dtype {input._data.dtype}")
    send = _splits(src, input_split_sizes, pg.size(), api, "input")
    recv = _splits(target.tmp, output_split_sizes, pg.size(), api, "output")
    pg, comm = _member(group, api)
    if comm is None:
        return None
    s, r = [src, send], [target.tmp, recv]
    return _run(lambda: comm.Alltoallv(s, r), lambda: comm.Ialltoallv(s, r),
                _finisher([target], api), async_op, [output])


def all_to_all(output_tensor_list, input_tensor_list, group=None, async_op=False):
    """Rank ``i`` sends ``input_tensor_list[j]`` to rank ``j``, which receives it in
    ``output_tensor_list[i]`` (shapes may differ per pair; one dtype)."""
    api = "all_to_all"
    pg = _resolve(group, api)
    n = pg.size()
    _list_len(input_tensor_list, n, api, "input_tensor_list")
    _list_len(output_tensor_list, n, api, "output_tensor_list")
    srcs = [_source(t, api, f"input_tensor_list[{i}]") for i, t in enumerate(input_tensor_list)]
    targets = [_Target(t, api, f"output_tensor_list[{i}]") for i, t in enumerate(output_tensor_list)]
    dtypes = {t._data.dtype for t in list(input_tensor_list) + list(output_tensor_list)}
    if len(dtypes) != 1:
        raise TypeError(f"{api}: every tensor must have the same dtype, got {sorted(map(str, dtypes))}")
    pg, comm = _member(group, api)
    if comm is None:
        return None
    dtype = targets[0].tmp.dtype if targets else srcs[0].dtype if srcs else dtypes.pop()
    send = np.concatenate([a.reshape(-1) for a in srcs]) if srcs else np.empty(0, dtype)
    out = np.empty(sum(t.tmp.size for t in targets), dtype)
    s = [send, _counts([a.size for a in srcs])]
    r = [out, _counts([t.tmp.size for t in targets])]

    def finish():
        at = 0
        for t in targets:
            t.tmp[...] = out[at:at + t.tmp.size].reshape(t.tmp.shape)
            at += t.tmp.size
            t.done(api)
    return _run(lambda: comm.Alltoallv(s, r), lambda: comm.Ialltoallv(s, r), finish, async_op,
                list(output_tensor_list))


def _splits(arr, sizes, n, api, what):
    """MPI ``(counts, displacements)`` in elements for ``arr`` cut along dim 0."""
    if arr.ndim == 0:
        raise ValueError(f"{api}: {what} must have at least one dimension")
    lead, row = arr.shape[0], int(np.prod(arr.shape[1:], dtype=np.int64))
    if sizes is None:
        if lead % n:
            raise CollectiveArgumentError(f"{api}: {what}'s first dimension ({lead}) must be divisible by the "
                                          f"world size ({n}) when no split sizes are given")
        sizes = [lead // n] * n
    else:
        sizes = [int(s) for s in sizes]
        if len(sizes) != n or min(sizes, default=0) < 0 or sum(sizes) != lead:
            raise CollectiveArgumentError(f"{api}: {what}_split_sizes {sizes} must be {n} non-negative sizes "
                                          f"adding up to {what}'s first dimension ({lead})")
    return _counts([s * row for s in sizes])


def _counts(counts):
    displs, at = [], 0
    for c in counts:
        displs.append(at)
        at += c
    return counts, displs


# ------------------------------------------------------------ point to point


def send(tensor, dst=None, group=None, tag=0, group_dst=None):
    """Send ``tensor`` to rank ``dst`` (a global rank); blocks until it can be reused."""
    isend(tensor, dst, group, tag, group_dst).wait()


def recv(tensor, src=None, group=None, tag=0, group_src=None):
    """Receive into ``tensor`` from rank ``src`` (default: any); returns the sender's global rank."""
    work = _irecv(tensor, src, group, tag, group_src, blocking=True)
    if work is None:
        return -1
    work.wait()
    return work._source_rank()


def isend(tensor, dst=None, group=None, tag=0, group_dst=None):
    """Start sending ``tensor`` to rank ``dst``; returns a :class:`Work`."""
    api = "isend"
    pg = _resolve(group, api)
    buf = _source(tensor, api)
    peer = _root(pg, dst, group_dst, api, "dst")
    pg, comm = _member(group, api)
    if comm is None:
        return None
    if peer == comm.Get_rank():
        raise ValueError(f"{api}: a rank can't send to itself (dst={pg.ranks[peer]})")
    return Work([comm.Isend(buf, peer, tag)], None, [tensor])


def irecv(tensor, src=None, group=None, tag=0, group_src=None):
    """Start receiving into ``tensor`` from rank ``src`` (default: any); returns a :class:`Work`.

    Its ``wait()`` raises a RuntimeError naming both ranks when the message sent has another
    size than ``tensor`` (NOTE [Receive sizes]).
    """
    return _irecv(tensor, src, group, tag, group_src, blocking=False)


def _irecv(tensor, src, group, tag, group_src, blocking):
    api = "recv" if blocking else "irecv"
    pg = _resolve(group, api)
    target = _Target(tensor, api)
    MPI = _mpi(api)
    peer = MPI.ANY_SOURCE if src is None and group_src is None else _root(pg, src, group_src, api, "src")
    pg, comm = _member(group, api)
    if comm is None:
        return None
    if peer == comm.Get_rank():
        raise ValueError(f"{api}: a rank can't receive from itself (src={pg.ranks[peer]})")
    status = MPI.Status()
    work = Work([comm.Irecv(target.tmp, peer, tag)], _finisher([target], api), [tensor], status)
    work._source_rank = lambda: pg.ranks[status.Get_source()]  # PyTorch's Work._source_rank()
    work._check = _size_check(api, target.tmp, pg, status, tag, target.arr.dtype)
    return work


# NOTE [Receive sizes]
# MPI moves bytes: a message longer than the receive buffer fails at the receiver's wait with
# MPI's bare ERR_TRUNCATE ("Message truncated"), and a shorter one fills part of the tensor
# silently. A receive checks both when it completes, from its MPI.Status alone: the truncation
# error is caught and re-raised naming the op, the ranks, the tag and the receiving tensor; a
# short message is caught by its byte count. No extra message is sent (a size handshake would
# double every send's latency), so the sender's shape is not known here: a short message
# reports its length in the receiver's elements, a long one only that it is longer. The
# sender's side completes normally, as in MPI. (PyTorch's MPI backend raises MPI's error text;
# gloo raises on any size mismatch.)
def _size_check(api, buf, pg, status, tag, dtype):
    """``buf``: what MPI received into; ``dtype``: the receiving tensor's (NOTE [bfloat16 collectives])."""
    def check(nbytes):
        if nbytes == buf.nbytes:
            return None
        here = f"rank {pg.ranks[pg.comm.Get_rank()]}"
        there = f"rank {pg.ranks[status.Get_source()]}"
        tensor = f"the receive tensor (shape {tuple(buf.shape)}, dtype {dtype}, {buf.nbytes} bytes)"
        if nbytes is None:
            sent = f"a message longer than {tensor}"
        else:
            n = nbytes / buf.itemsize
            sent = (f"a message of {nbytes} bytes ({int(n) if n == int(n) else n} elements of {dtype}), "
                    f"but {tensor} expects {buf.size} elements")
        return RuntimeError(f"{api}: {here} got from {there} (tag {tag}) {sent}; send and receive tensors "
                            "must have the same number of elements and dtype")

    return check


# -------------------------------------------------------------------- helpers


def _root(pg, rank, group_rank, api, what):
    """The group rank named by ``rank`` (global) or ``group_rank``; default 0."""
    if rank is not None and group_rank is not None:
        raise ValueError(f"{api}: pass {what} or group_{what}, not both")
    if group_rank is not None:
        if not 0 <= group_rank < pg.size():
            raise ValueError(f"{api}: group_{what}={group_rank} is out of range for a group of {pg.size()}")
        return group_rank
    return pg.group_rank(pg.ranks[0] if rank is None else rank, api, what)


def _check_blocks(big, small, n, api, big_name, small_name):
    """``big`` (a tensor) holds ``n`` blocks of ``small``'s size and has its dtype."""
    big, small = big._data, small._data
    if big.dtype != small.dtype:
        raise TypeError(f"{api}: {big_name} has dtype {big.dtype} but {small_name} has dtype {small.dtype}")
    if big.size != n * small.size:
        raise CollectiveArgumentError(f"{api}: {big_name} (shape {big.shape}) must have world_size ({n}) times the "
                                      f"elements of {small_name} (shape {small.shape})")


def _root_list(lst, like, n, is_root, api, what):
    if not is_root:
        if lst:
            raise ValueError(f"{api}: {what} must be given on the destination rank only")
        return []
    _list_len(lst, n, api, what)
    _same_layout(lst, like, api, what)
    return [_Target(t, api, f"{what}[{i}]") for i, t in enumerate(lst)]


def _scatter_rows(out, targets, api):
    def finish():
        for row, t in zip(out, targets):
            t.tmp[...] = row
            t.done(api)
    return finish
