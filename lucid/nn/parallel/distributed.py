"""``DistributedDataParallel``: data-parallel training over a ``lucid.distributed`` group.

NOTE [DDP buckets]
Parameters that require grad are grouped, in reverse registration order (about the order
backward produces their gradients), into buckets of one dtype and at most
``bucket_cap_mb`` MiB (the first one at most 1 MiB, as in PyTorch, so communication
starts early). Each parameter has a post-accumulate-grad hook (NOTE [Backward callbacks
and post-accumulate hooks] in ``lucid/autograd/engine.py``): it copies ``p.grad`` into
its bucket's flat buffer; when a bucket is full, it and every full bucket after the last
one launched start a non-blocking ``all_reduce`` (``Iallreduce``) -- strictly in bucket
order, so every rank issues the same collectives in the same order even if gradients
become ready in a different order. The first hook of a backward queues an engine
callback that runs when the backward ends: it launches what is left (with
``find_unused_parameters=True`` the never-used parameters count as zeros), waits for
every bucket, divides by the world size and copies the averages back into ``p.grad``.
So ``loss.backward(); opt.step()`` works unchanged.
"""
from __future__ import annotations

import contextlib

import numpy as np

from ..._core import backend
from ..._core.grad_mode import STATE, no_grad
from ..._core.tensor import Tensor, _wrap
from ..module import Module

_FIRST_BUCKET_BYTES = 1 << 20


class _Bucket:
    __slots__ = ("params", "offsets", "buf", "ready", "work", "index")

    def __init__(self, index, params):
        self.index, self.params = index, params
        self.offsets, n = [], 0
        for p in params:
            self.offsets.append(n)
            n += p._data.size
        self.offsets.append(n)
        self.buf = np.zeros(n, params[0]._data.dtype)
        self.ready, self.work = set(), None


class DistributedDataParallel(Module):
    """Train ``module`` data-parallel: one replica per process, gradients averaged in backward.

    At construction rank 0's parameters and buffers are broadcast to every rank. During
    ``backward`` the gradients are averaged across ranks in buckets whose all-reduce starts
    as soon as the bucket's gradients are ready (NOTE [DDP buckets]); ``backward()``
    returns with every ``p.grad`` averaged. Each rank should feed its own share of the
    data (``DistributedSampler``).

    Parameters
    ----------
    module : Module
    device_ids, output_device, dim : ignored
        PyTorch compatibility (CPU only).
    broadcast_buffers : bool, optional
        Deprecated in PyTorch 2.13 (a ``FutureWarning``) for ``forward_sync_buffers``; unlike
        it, ``broadcast_buffers=False`` also skips the buffers' broadcast at construction.
    init_sync : bool
        Broadcast rank 0's parameters (and buffers) at construction (default True).
    forward_sync_buffers : bool, optional
        Give every rank rank 0's buffers (BatchNorm running statistics) at the start of each
        forward that follows a forward with gradient synchronization (PyTorch's rule: every
        forward of a training loop, also in eval mode; not the one after a ``no_grad`` or
        ``no_sync`` forward). Between a backward and the next forward each rank keeps the
        buffers its own forward updated. Default True.
    process_group : ProcessGroup, optional
        Default: the world.
    bucket_cap_mb : float, optional
        Bucket size in MiB (default 25).
    find_unused_parameters : bool
        Allow parameters that get no gradient in a backward (they contribute zeros; one that
        no rank used keeps its ``.grad``). Without it such a parameter is an error that
        names it.

    Notes
    -----
    ``register_comm_hook`` (``lucid.distributed.algorithms.ddp_comm_hooks.default_hooks``) and
    ``join()`` for uneven inputs work as PyTorch's. It is a
    :class:`~lucid.distributed.algorithms.join.Joinable` (``join_hook``, ``join_device``,
    ``join_process_group``), so ``Join([model, zero_optimizer])`` works too.
    ``state_dict()``/``load_state_dict()`` are the wrapped module's (no ``module.`` prefix),
    so a checkpoint loads into the plain model; ``load_state_dict`` also accepts keys with
    the prefix. ``named_parameters()`` keeps PyTorch's ``module.`` names.

    Examples
    --------
    >>> import lucid, lucid.distributed as dist
    >>> from lucid.nn.parallel import DistributedDataParallel as DDP
    >>> dist.init_process_group("mpi")                       # doctest: +SKIP
    >>> model = DDP(lucid.nn.Linear(4, 2))                   # doctest: +SKIP
    >>> model(lucid.randn(8, 4)).sum().backward()            # grads averaged  # doctest: +SKIP
    """

    def __init__(self, module, device_ids=None, output_device=None, dim=0, broadcast_buffers=None, init_sync=True,
                 process_group=None, bucket_cap_mb=None, find_unused_parameters=False,
                 check_reduction=False, gradient_as_bucket_view=False, static_graph=False,
                 forward_sync_buffers=None):
        super().__init__()
        from ... import distributed as dist

        if not isinstance(module, Module):
            raise TypeError(f"DistributedDataParallel: module must be a lucid.nn.Module, got {type(module).__name__}")
        if not dist.is_initialized():
            raise ValueError("DistributedDataParallel: default process group has not been initialized, "
                             "please make sure to call init_process_group")
        self.module = module
        init_buffers = _buffer_flags(broadcast_buffers, forward_sync_buffers)
        self.forward_sync_buffers = init_buffers if forward_sync_buffers is None else bool(forward_sync_buffers)
        self.find_unused_parameters = find_unused_parameters
        self.process_group = process_group
        self._dist = dist
        self._world = dist.get_world_size(process_group)
        self.require_backward_grad_sync = True
        self.require_forward_param_sync = True  # the next forward broadcasts the buffers
        params = [p for _, p in module.named_parameters() if p.requires_grad]
        self._names = {id(p): n for n, p in module.named_parameters()}
        cap = 25 if bucket_cap_mb is None else float(bucket_cap_mb)
        self._buckets = _make_buckets(params[::-1], cap * (1 << 20))
        self._where = {id(p): (b, i) for b in self._buckets for i, p in enumerate(b.params)}
        if init_sync:
            self._sync_states(include_params=True, buffers=init_buffers)
        self._grad_hooks = [p.register_post_accumulate_grad_hook(self._grad_ready) for p in params]
        self._expect = False  # the last forward's backward should average gradients
        self._running = False  # a backward of ours is in flight
        self._next = 0  # the first bucket not launched yet
        self._comm_hook = self._hook_state = None
        self._join, self._divisor, self._src = None, self._world, None  # NOTE [DDP join]
        # A Joinable (NOTE [Generic join]): lucid.distributed is loaded by now, so its join module is cheap
        from ...distributed.algorithms.join import _JoinConfig

        self._join_config = _JoinConfig.construct_disabled_join_config()
        self._join_divide = True  # the last join_hook's divide_by_initial_world_size

    @property
    def broadcast_buffers(self):
        """PyTorch's deprecated name of ``forward_sync_buffers``."""
        return self.forward_sync_buffers

    @broadcast_buffers.setter
    def broadcast_buffers(self, value):
        self.forward_sync_buffers = bool(value)

    def register_comm_hook(self, state, hook):
        """Average gradients with ``hook(state, bucket)`` instead of the built-in all-reduce.

        ``bucket`` is a :class:`GradBucket`; the hook returns a :class:`lucid.futures.Future`
        whose value is the bucket's flat tensor of reduced gradients, written to ``p.grad`` as
        it is (no division by the world size: the hook decides, as
        ``lucid.distributed.algorithms.ddp_comm_hooks.default_hooks`` do). Hooks run in bucket
        order on every rank (NOTE [DDP buckets]). Call it once, before the first backward.

        Examples
        --------
        >>> from lucid.distributed.algorithms.ddp_comm_hooks import default_hooks
        >>> model.register_comm_hook(None, default_hooks.fp16_compress_hook)   # doctest: +SKIP
        """
        api = "DistributedDataParallel.register_comm_hook"
        if not callable(hook):
            raise TypeError(f"{api}: the communication hook must be callable, got {type(hook).__name__}")
        if self._comm_hook is not None:
            raise RuntimeError(f"{api}: register_comm_hook can only be called once")
        self._comm_hook, self._hook_state = hook, state

    # -------------------------------------------------------------- forward
    def forward(self, *inputs, **kwargs):
        # PyTorch's _pre_forward/_post_forward: buffers go out from rank 0 (the highest active
        # rank under join) before the forward, whether training or not, unless the previous
        # forward ran without gradient synchronization.
        fwd_sync = self.forward_sync_buffers and self.require_forward_param_sync \
            and any(b is not None for b in self.module.buffers())
        self._expect = STATE.grad_enabled and self.require_backward_grad_sync
        self._src = None
        if self._join is not None:
            from ._ddp_join import before_forward

            self._src = before_forward(self, fwd_sync)
        if fwd_sync:
            self._sync_states(include_params=False, src=self._src)
        self._reset()
        out = self.module(*inputs, **kwargs)
        self.require_forward_param_sync = self._expect
        return out

    def join(self, divide_by_initial_world_size=True, enable=True, throw_on_early_termination=False):
        """A context for training on uneven inputs: a rank whose data runs out shadows the others'
        collectives until every rank is done (NOTE [DDP join] in ``_ddp_join.py``).

        Parameters
        ----------
        divide_by_initial_world_size : bool
            Average gradients over the whole world (default) or over the ranks still training.
        enable : bool
            ``False``: a plain context (no extra communication).
        throw_on_early_termination : bool
            Raise ``RuntimeError`` on every rank as soon as one rank runs out of data.

        Examples
        --------
        >>> with model.join():                                   # doctest: +SKIP
        ...     for x, y in my_uneven_batches:
        ...         loss_fn(model(x), y).backward(); opt.step(); opt.zero_grad()
        """
        from ._ddp_join import join

        return join(self, divide_by_initial_world_size, enable, throw_on_early_termination)

    # ------------------------------------------------------------ Joinable
    # DistributedDataParallel is a Joinable (registered as one by lucid.distributed.algorithms.join,
    # so that ``import lucid.nn`` does not load lucid.distributed): ``Join([ddp, ...])`` runs DDP's
    # own join rounds (NOTE [Generic join], NOTE [DDP join]).
    def join_hook(self, **kwargs):
        """The hook of a joined rank inside ``Join([ddp, ...])``: it shadows the active ranks'
        forward round, buffer broadcast and gradient all-reduces (NOTE [DDP join]).

        Parameters
        ----------
        divide_by_initial_world_size : bool, keyword, optional
            Average gradients over the whole world (default True) or over the active ranks.
        **kwargs
            The ``Join``'s other keyword arguments (ignored).

        Examples
        --------
        >>> from lucid.distributed.algorithms.join import Join
        >>> with Join([model], divide_by_initial_world_size=False):   # doctest: +SKIP
        ...     for x in my_uneven_batches:
        ...         model(x).sum().backward()
        """
        from ...distributed.algorithms.join import _DDPJoinHook

        self._join_divide = bool(kwargs.get("divide_by_initial_world_size", True))
        return _DDPJoinHook(self)

    @property
    def join_device(self):
        """The device of the wrapped module's first parameter (PyTorch's ``DDP.device``)."""
        first = next(iter(self.module.parameters()), None)
        if first is None:
            from ... import device

            return device("cpu")
        return first.device

    @property
    def join_process_group(self):
        """The process group of the join's collectives: the model's own."""
        return self.process_group

    def _join_enter(self, throw):
        """``Join.__enter__``: the configuration DDP's forward reads (NOTE [DDP join])."""
        if self._join is not None:
            raise RuntimeError("Join: this DistributedDataParallel is already inside a join context")
        self._join = {"divide_by_initial": self._join_divide, "throw": throw, "last": None}

    def _join_exit(self):
        """``Join.__exit__``: back to plain training (the divisor is the world size again)."""
        self._join = None
        self._divisor = self._world

    def _shadow_backward(self):
        """A joined rank's zeros for every bucket, in bucket order, and the unused-parameter flags."""
        for b in self._buckets:
            b.buf[...] = 0
            b.ready.clear()
        self._next = 0
        self._launch_ready(force=True)
        if self.find_unused_parameters:
            self._used_anywhere([p for b in self._buckets for p in b.params])
        for b in self._buckets:
            self._reduced(b)

    @contextlib.contextmanager
    def no_sync(self):
        """Inside, forward/backward only accumulate local gradients (no communication).

        The first backward after the block averages the accumulated gradients.
        """
        old = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = old

    # -------------------------------------------------------------- backward
    def _grad_ready(self, p):
        if not self._expect:
            return
        if not self._running:
            self._running = True
            from ...autograd.engine import queue_callback

            queue_callback(self._finish)
        bucket, i = self._where[id(p)]
        # a device gradient is copied to the host bucket (NOTE [Collectives on a device])
        bucket.buf[bucket.offsets[i]:bucket.offsets[i + 1]] = backend.host(p.grad._data).reshape(-1)
        bucket.ready.add(i)
        self._launch_ready()
        self._progress()

    def _progress(self):
        """Test the buckets in flight: MPI advances a non-blocking collective only inside MPI
        calls (no progress thread), so each hook gives the launched ones a push."""
        for b in self._buckets[:self._next]:
            if b.work is not None and self._comm_hook is None:
                b.work.is_completed()

    def _launch_ready(self, force=False):
        """Start the all-reduce of full buckets, in bucket order (NOTE [DDP buckets])."""
        buckets = self._buckets
        while self._next < len(buckets):
            b = buckets[self._next]
            if not force and len(b.ready) < len(b.params):
                return
            if self._comm_hook is None:
                b.work = self._dist.all_reduce(_wrap(b.buf), group=self.process_group, async_op=True)
            else:
                b.work = self._comm_hook(self._hook_state, GradBucket(b, b.index == len(buckets) - 1))
            self._next += 1

    def _finish(self):
        """Engine callback at the end of backward: wait, average, write ``p.grad``."""
        self._expect = self._running = False
        missing = [p for b in self._buckets for i, p in enumerate(b.params) if i not in b.ready]
        if missing and not self.find_unused_parameters:
            names = ", ".join(self._names.get(id(p), "?") for p in missing)
            raise RuntimeError(
                "DistributedDataParallel: these parameters received no gradient in this backward: "
                f"{names}. Pass find_unused_parameters=True if some parameters are not used in "
                "every forward, or make sure every output takes part in the loss")
        for b in self._buckets:
            for i in range(len(b.params)):
                if i not in b.ready:
                    b.buf[b.offsets[i]:b.offsets[i + 1]] = 0
        self._launch_ready(force=True)
        # Every rank must make the same calls: the flags go round whether or not this rank
        # missed a parameter.
        used = self._used_anywhere(missing) if self.find_unused_parameters else None
        for b in self._buckets:
            flat, world = self._reduced(b)
            for i, p in enumerate(b.params):
                if used is not None and not used[1][used[0][id(p)]]:
                    continue  # no rank used it: leave its .grad as it was
                _set_grad(p, flat[b.offsets[i]:b.offsets[i + 1]], world)

    def _reduced(self, b):
        """``(flat sums or averages, divisor)`` of a launched bucket, once its communication is done."""
        work, b.work = b.work, None
        if self._comm_hook is None:
            work.wait()
            return b.buf, self._divisor
        from ...futures import Future

        api = "DistributedDataParallel.register_comm_hook"
        if not isinstance(work, Future):
            raise RuntimeError(f"{api}: the hook must return a lucid.futures.Future, got {type(work).__name__}")
        value = work.wait()
        value = value[0] if isinstance(value, (list, tuple)) and len(value) == 1 else value
        flat = backend.host(value._data if isinstance(value, Tensor) else np.asarray(value)).reshape(-1)
        if flat.size != b.buf.size:
            raise RuntimeError(f"{api}: the hook's result has {flat.size} elements, the bucket {b.buf.size}")
        return flat.astype(b.buf.dtype, copy=False), 1

    def _used_anywhere(self, missing):
        """``({id(p): k}, flags)``: whether any rank used the k-th locally unused parameter."""
        order = [p for b in self._buckets for p in b.params]
        unused = {id(p) for p in missing}
        flags = np.array([0 if id(p) in unused else 1 for p in order], np.int32)
        self._dist.all_reduce(_wrap(flags), op=self._dist.ReduceOp.MAX, group=self.process_group)
        return {id(p): k for k, p in enumerate(order)}, flags

    def _reset(self):
        for b in self._buckets:
            if b.work is not None:  # a backward that failed half-way: finish its requests
                b.work.wait()
                b.work = None
            b.ready.clear()
        self._next, self._running = 0, False

    # ----------------------------------------------------------------- state
    def _sync_states(self, include_params, src=None, buffers=True):
        """Broadcast ``src``'s (default: the group's first rank's) buffers (and parameters) of the
        wrapped module, one array per dtype."""
        tensors = list(self.module.parameters()) if include_params else []
        tensors += [b for b in self.module.buffers() if b is not None] if buffers else []
        if not tensors:
            return
        if src is None:
            src = self._dist.get_process_group_ranks(self.process_group)[0] if self.process_group else 0
        for dtype in sorted({t._data.dtype.str for t in tensors}):
            group = [t for t in tensors if t._data.dtype.str == dtype]
            flat = np.concatenate([backend.host(t._data).reshape(-1) for t in group])
            self._dist.broadcast(_wrap(flat), src=src, group=self.process_group)
            with no_grad():
                at = 0
                for t in group:
                    n = t._data.size
                    value = backend.on_device_of(flat[at:at + n].reshape(t._data.shape), t._data)
                    if backend.writeable(t._data):  # every buffer is an array (num_batches_tracked too)
                        with backend.on_device(t):
                            t._data[...] = value
                    else:
                        t._data = value.copy() if value.__class__ is np.ndarray else value
                    t._version[0] += 1
                    at += n

    def state_dict(self, *args, **kwargs):
        return self.module.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict, strict=True, assign=False):
        if state_dict and all(isinstance(k, str) and k.startswith("module.") for k in state_dict):
            state_dict = {k[len("module."):]: v for k, v in state_dict.items()}
        return self.module.load_state_dict(state_dict, strict=strict, assign=assign)

    def extra_repr(self):
        return f"world_size={self._world}, buckets={len(self._buckets)}"


class GradBucket:
    """What a communication hook gets (PyTorch's ``dist.GradBucket``): one bucket's flattened gradients.

    Examples
    --------
    >>> def hook(state, bucket):                       # doctest: +SKIP
    ...     return dist.all_reduce(bucket.buffer() / 2, async_op=True).get_future()
    """

    def __init__(self, bucket, is_last):
        self._b, self._last = bucket, is_last

    def index(self):
        """The bucket's position (0 holds the parameters registered last)."""
        return self._b.index

    def buffer(self):
        """The flat gradients, a tensor over the bucket's own memory (in-place edits reach it)."""
        return _wrap(self._b.buf)

    def gradients(self):
        """Each parameter's gradient, as views of :meth:`buffer`."""
        b = self._b
        return [_wrap(b.buf[b.offsets[i]:b.offsets[i + 1]].reshape(p._data.shape)) for i, p in enumerate(b.params)]

    def parameters(self):
        return list(self._b.params)

    def is_last(self):
        """Whether this is the last bucket of the backward (the one holding the first parameters)."""
        return self._last

    def set_buffer(self, tensor):
        """Replace the bucket's values with ``tensor``'s (same number of elements)."""
        self._b.buf[...] = backend.host(tensor._data).reshape(-1)


def _buffer_flags(broadcast_buffers, forward_sync_buffers):
    """Whether construction broadcasts the buffers, with PyTorch 2.13's deprecation warnings."""
    import warnings

    if broadcast_buffers is not None:
        if forward_sync_buffers is not None:
            warnings.warn("DistributedDataParallel: Both `broadcast_buffers` and `forward_sync_buffers` were "
                          "specified. `broadcast_buffers` is deprecated and its value is ignored when "
                          "`forward_sync_buffers` is provided.", FutureWarning, stacklevel=3)
        else:
            warnings.warn("DistributedDataParallel: `broadcast_buffers` is deprecated. Use `forward_sync_buffers` "
                          "instead. IMPORTANT: unlike `broadcast_buffers=False`, `forward_sync_buffers=False` still "
                          "syncs buffers at init.", FutureWarning, stacklevel=3)
    if forward_sync_buffers is not None:
        return True
    return True if broadcast_buffers is None else bool(broadcast_buffers)


def _make_buckets(params, cap):
    buckets, cur, size, limit = [], [], 0, min(cap, _FIRST_BUCKET_BYTES)
    for p in params:
        nbytes = p._data.nbytes
        if cur and (size + nbytes > limit or p._data.dtype != cur[0]._data.dtype):
            buckets.append(_Bucket(len(buckets), cur))
            cur, size, limit = [], 0, cap
        cur.append(p)
        size += nbytes
    if cur:
        buckets.append(_Bucket(len(buckets), cur))
    return buckets


def _set_grad(p, flat, world):
    """``p.grad = flat / world`` (the average), in place when ``p.grad`` can take it."""
    g, total = p._grad, flat.reshape(p._data.shape)
    if p._data.__class__ is not np.ndarray:  # the average goes back to p's device
        with backend.on_device(p):
            p._grad = _wrap(backend.on_device_of(total, p._data) / world)
        return
    if g is not None and g._data.__class__ is np.ndarray and g._data.flags.writeable \
            and g._data.shape == p._data.shape and g._data.dtype == total.dtype:
        np.true_divide(total, world, out=g._data)
        g._version[0] += 1
    else:
        p._grad = _wrap(total / world)
