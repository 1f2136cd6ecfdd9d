"""The tape and the backward engine.

A :class:`Node` is recorded for every differentiable primitive evaluated with an
argument that needs grad. The same nodes and the same engine serve the eager tape
(values are ndarrays, level 0) and ``lucid.func.grad`` (values are lower-level
Tensors, level >= 1). See NOTE [Two namespaces] and NOTE [Levels].

The engine is iterative (a dependency count and a ready stack), so a chain of
100 000 ops does not touch Python's recursion limit.
"""
from __future__ import annotations

import itertools
import threading
import traceback
import weakref
from heapq import heappop, heappush

import numpy as np

from .._core import backend, dtypes, primitive
from .._core.grad_mode import PROFILING, STATE, enable_grad, no_grad
from .._core.primitive import AN, TN, Meta
from .._core.tensor import _POST_HOOKS, SAME_DTYPE, Tensor, _wrap
from .._runtime import _in_package

DEVICE_GUARD = backend.DEVICE_GUARD

_as_array = backend.as_array


_SEQ = itertools.count()
_NOTHING = [(None,) * n for n in range(16)]  # saved inputs of prims whose rules need none


def _getitem_node_name(key):
    """PyTorch's name for the node of ``x[key]``: its indexing applies the key's parts in turn,
    advanced (tensor) indices last, so the last part that does something names the node."""
    from ..ops.indexing import IDX

    if any(k is IDX for k in key):
        return "IndexBackward0"
    for k in reversed(key):
        if isinstance(k, slice):
            if k != slice(None):
                return "SliceBackward0"
        elif k is None:
            return "UnsqueezeBackward0"
        elif k is not Ellipsis:
            return "SelectBackward0"
    return "AliasBackward0"


class Node:
    """A recorded call: what to run backward and where to send the results.

    ``parents[i]`` is ``None`` (no gradient for argument ``i``), a leaf (a Tensor to
    accumulate into) or ``(node, output_index)``.
    """

    __slots__ = ("prim", "params", "saved", "versions", "out", "out_meta", "parents",
                 "hooks", "retains", "freed", "eager", "stack", "seq", "nout", "out_versions",
                 "__weakref__")

    def __init__(self, prim, params, saved, versions, out, out_meta, parents, eager):
        self.prim, self.params, self.saved, self.versions = prim, params, saved, versions
        self.out, self.out_meta, self.parents, self.eager = out, out_meta, parents, eager
        self.nout = prim.nout
        self.hooks = self.retains = self.stack = None
        self.freed = False
        self.out_versions = None  # (version list, value) per saved output; set by record()
        # Creation order: consumers always have a larger seq than their inputs, so the
        # engine can run nodes by decreasing seq without a topological sort.
        self.seq = next(_SEQ)

    op_name = property(lambda self: self.prim.name)  # used in error messages
    keeps_none = False  # FunctionNode: missing output grads stay None (materialize_grads=False)
    recomputes_saved = False  # a checkpointed node (autograd/checkpoint.py's _Refill)

    # Introspection as in PyTorch's ``torch.autograd.graph.Node`` (see autograd/graph.py).
    def name(self):
        """PyTorch-style name, e.g. ``'MulBackward0'``."""
        if self.op_name == "getitem":
            return _getitem_node_name(self.params.get("key", ()))
        return "".join(w[:1].upper() + w[1:] for w in self.op_name.split("_")) + "Backward0"

    @property
    def next_functions(self):
        """``((node or AccumulateGrad or None, output_index), ...)``, one per input."""
        from .graph import _next_functions

        return _next_functions(self)

    @property
    def metadata(self):
        """A dict private to this node (for user annotations)."""
        from .graph import _metadata

        return _metadata(self)

    def register_hook(self, fn):
        """``fn(grad_inputs, grad_outputs)`` after this node ran; may return new grad_inputs."""
        from .graph import _add_node_hook

        return _add_node_hook(self, fn, post=True)

    def register_prehook(self, fn):
        """``fn(grad_outputs)`` before this node runs; may return new grad_outputs."""
        from .graph import _add_node_hook

        return _add_node_hook(self, fn, post=False)

    def __repr__(self):  # as PyTorch prints ``tensor.grad_fn``
        return f"<{self.name()} object at {id(self):#x}>"

    def add_hook(self, idx, hook):
        if self.hooks is None:
            self.hooks = {}
        lst = self.hooks.setdefault(idx, [])
        lst.append(hook)
        from .._core.tensor import _HookHandle

        return _HookHandle(lst, hook)

    def add_retain(self, idx, tensor):
        if self.retains is None:
            self.retains = {}
        self.retains[idx] = weakref.ref(tensor)

    # ----------------------------------------------------------------- backward
    def apply(self, grads, tensor_mode):
        """Input cotangents (one per argument, None where not needed)."""
        if self.freed:
            raise RuntimeError(
                f"backward: trying to backward through the graph a second time (op "
                f"'{self.op_name}'): its saved values were freed after the first backward. "
                "Pass retain_graph=True to the first backward() if you need to backward twice."
            )
        prim = self.prim
        if self.eager:
            if self.versions is not None or self.out_versions is not None:
                self._check_versions()
            if tensor_mode:
                args = self.saved
                out = self._out_tensors()
                ns = TN
            else:
                args = [a._data if isinstance(a, Tensor) else a for a in self.saved]
                out = self.out
                ns = AN
        else:
            args, out, ns = self.saved, self.out, TN
        g = grads[0] if len(grads) == 1 else tuple(grads)
        rules = prim.vjp
        params = self.params
        result = []
        i = -1
        for parent in self.parents:
            i += 1
            if parent is None:
                result.append(None)
            elif rules.__class__ is tuple:
                rule = rules[i]
                if rule is None:
                    raise RuntimeError(f"backward: op '{prim.name}' is not differentiable with respect to argument {i}")
                result.append(rule(ns, g, out, *args, **params))
            else:  # one rule for a variadic primitive (cat, stack ...), told which argument
                result.append(rules(i, ns, g, out, *args, **params))
        return result

    def _out_tensors(self):
        """The outputs as Tensors attached to this node, for a differentiable backward."""
        if self.out is None:
            return None
        if self.nout == 1:
            t = _wrap(self.out)
            t.grad_fn, t._rg = self, True
            return t
        outs = []
        for i, o in enumerate(self.out):
            t = _wrap(o)
            if dtypes.is_differentiable(o.dtype):
                t.grad_fn, t._out_idx, t._rg = self, i, True
            outs.append(t)
        return tuple(outs)

    def _check_versions(self):
        # See NOTE [In-place semantics] in lucid/ops/inplace.py: _version[1] names the last
        # in-place op.
        versions = self.versions
        if versions is not None:
            for j, (a, v) in enumerate(zip(self.saved, versions)):
                if isinstance(a, Tensor) and a._version[0] != v and self._reads(j):
                    i = [x is a for x in self.saved].index(True)
                    self._version_error(f"argument {i}", tuple(a.shape), a._version, v)
        out_versions = self.out_versions
        if out_versions is not None:
            for lst, v in out_versions:
                if lst[0] != v:
                    i = [x[0] is lst for x in out_versions].index(True)
                    shape = self.out_meta[i][0] if self.out_meta else np.shape(self.out)
                    self._version_error("output" if self.nout == 1 else f"output {i}", tuple(shape), lst, v)

    def _reads(self, j):
        """NOTE [Version checks of unread inputs]
        PyTorch saves an input for backward only where a gradient that is wanted needs it:
        ``y = v * 0.01; v[0] = 0.0; y.sum().backward()`` is fine there (the multiplier's
        gradient is not wanted, so ``v`` is not saved). A node here saves all its inputs, so an
        in-place change of one is an error only if the vjp rule of an argument that gets a
        gradient reads it (``prim.vjp_reads``; without it, every saved input counts). Called
        only once a version differs: the backward pays nothing for it. A checkpointed node
        counts every input: its saved values are recomputed from them (NOTE [Checkpoint by
        recomputed saved values])."""
        reads = getattr(self.prim, "vjp_reads", None)
        if reads is None or self.recomputes_saved:
            return True
        return any(p is not None and j in reads[i] for i, p in enumerate(self.parents))

    def _version_error(self, what, shape, lst, v):
        by = f" It was last changed in place by '{lst[1]}'." if len(lst) > 1 else ""
        raise RuntimeError(
            f"backward: one of the variables needed for gradient computation has been modified "
            f"by an inplace operation: the {what} of '{self.op_name}' (a Tensor of shape {shape}), "
            f"saved for its backward, is at version {lst[0]}; expected version {v}.{by} "
            "Hint: clone the tensor before changing it in place, or use the out-of-place op."
        )

    def release(self):
        self.saved = self.out = None
        self.freed = True


def _meta(a):
    return Meta(a.shape, a.dtype, backend.array_cls_of(a))


def _saved_inputs(prim, args, eager):
    """(saved values, their versions) for a node; unsaved tensor inputs become Meta."""
    save = prim.save_inputs
    if save is True:
        saved = args
    elif save is None:
        return _NOTHING[len(args)], None
    elif save is False:
        return [_meta(a) if isinstance(a, Tensor) else a for a in args], None
    elif save.__class__ is tuple:  # the values at these positions (where: the condition only)
        saved = tuple(_meta(a) if i not in save and isinstance(a, Tensor) else a
                      for i, a in enumerate(args))
    else:  # an int k: only the arguments from position k on are needed
        saved = tuple(_meta(a) if i < save and isinstance(a, Tensor) else a
                      for i, a in enumerate(args))
    if not eager:
        return saved, None
    return saved, [a._version[0] if isinstance(a, Tensor) else 0 for a in saved]


def make_node(prim, args, params, out, parents, eager):
    """Build the tape node for one call (shared by the eager tape and func.grad)."""
    saved, versions = _saved_inputs(prim, args, eager)
    meta = None if prim.nout == 1 else tuple(
        (o.shape, o.dtype, backend.array_cls_of(o) if isinstance(o, Tensor) else o.__class__) for o in out)
    node = Node(prim, params, saved, versions, out if prim.save_out else None, meta, parents, eager)
    if STATE.anomaly:
        node.stack = traceback.extract_stack(limit=12)[:-3]
    return node


def record(prim, args, params, out):
    """Eager tape: wrap ``out`` in Tensors attached to a new node. Called by ``bind``.

    This is the hot path of every recorded op, so ``make_node`` is inlined here.
    """
    parents = []
    save = prim.save_inputs
    versions = [] if save is True else None
    for a in args:
        if isinstance(a, Tensor):
            if versions is not None:
                versions.append(a._version[0])
            if a._rg:
                fn = a.grad_fn
                parents.append(a if fn is None else (fn, a._out_idx))
                continue
        elif versions is not None:
            versions.append(0)
        parents.append(None)
    if save is True:
        saved = args
    elif save is None:  # the rules need nothing of the inputs (e.g. exp: g * out)
        saved = _NOTHING[len(args)]
    elif save is False:  # only shapes are needed (inlined _saved_inputs: hot path)
        saved = [Meta(a._data.shape, a._data.dtype, a._data.__class__) if isinstance(a, Tensor) else a
                 for a in args]
    else:
        saved, versions = _saved_inputs(prim, args, True)
    if prim.nout == 1:
        node = Node(prim, params, saved, versions, out if prim.save_out else None, None, parents, True)
        if STATE.anomaly:
            node.stack = traceback.extract_stack(limit=12)[:-3]
        t = object.__new__(Tensor)  # _wrap, inlined
        t._data = out if out.__class__ is np.ndarray else _as_array(out)
        t._version = [0]
        t.grad_fn = node
        t._rg = True
        if prim.is_view:
            primitive._share_version(t, args[0], prim, params, args)
        if prim.save_out:  # the output array is saved: detect in-place changes of it
            node.out_versions = ((t._version, t._version[0]),)
        return t
    node = make_node(prim, args, params, out, parents, True)
    outs = []
    for i, o in enumerate(out):
        t = _wrap(o)
        if dtypes.is_differentiable(o.dtype):
            t.grad_fn, t._out_idx, t._rg = node, i, True
        outs.append(t)
    if prim.save_out:
        node.out_versions = tuple((t._version, t._version[0]) for t in outs)
    return tuple(outs)


primitive._record = record


# --------------------------------------------------------------------- engine


def _edge_key(edge):
    return id(edge) if isinstance(edge, (Tensor,)) else (id(edge[0]), edge[1])


def _topo(root_nodes):
    """Nodes reachable from the roots, in an order with parents first."""
    order = []
    seen = set()
    stack = [(n, False) for n in root_nodes]
    while stack:
        node, done = stack.pop()
        if done:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        for p in node.parents:
            if isinstance(p, tuple):
                pn = p[0]
                if id(pn) not in seen:
                    stack.append((pn, False))
    return order


class UnusedInputError(RuntimeError):
    """A captured edge the roots do not reach (raised before anything runs)."""

    def __init__(self, index):
        super().__init__(f"input {index} is not reachable from the outputs")
        self.index = index


def _check_reachable(roots, order, capture):
    seen = {_edge_key(e) for e in roots}
    for node in order:
        seen.update((id(node), i) for i in range(node.nout))
        seen.update(_edge_key(p) for p in node.parents if p is not None)
    for i, e in enumerate(capture):
        if _edge_key(e) not in seen:
            raise UnusedInputError(i)


# NOTE [Backward callbacks and post-accumulate hooks]
# ``queue_callback(fn)`` (PyTorch's ``Variable._execution_engine.queue_callback``) adds ``fn``
# to the innermost running backward's list; ``run_backward`` runs the list once the graph is
# done and every ``.grad`` is written, in queue order (a callback may queue another). A
# backward that raises runs none. ``Tensor.register_post_accumulate_grad_hook`` hooks run
# right after their leaf's ``.grad`` is written. Only while such hooks exist
# (``_POST_HOOKS[0] > 0``) does a backward walk its graph first to count the edges into
# each hooked leaf; such a leaf is written as soon as the last of them has run, so its hook
# fires in the middle of the backward (DistributedDataParallel starts its all-reduce there).
# Those leaves are the exception to NOTE [Failed backward changes nothing]. Without hooks
# the cost is one check per backward and one per node.
class _CallbackStack(threading.local):
    """Per thread: one list of queued callbacks per running backward, innermost last (two
    threads' backwards must not see each other's)."""

    def __init__(self):
        self.lists = []


_CALLBACKS = _CallbackStack()


def current_callbacks():
    """The callback list of the backward running in this thread (innermost), or None."""
    lists = _CALLBACKS.lists
    return lists[-1] if lists else None


def queue_callback(callback):
    """Run ``callback()`` once, when the backward that is running now has finished.

    Call it during a backward (from a tensor hook, a post-accumulate-grad hook or a custom
    ``Function.backward``); the callback runs after every gradient of that backward has
    been accumulated into ``.grad``, before ``backward()`` returns. PyTorch spells it
    ``Variable._execution_engine.queue_callback``. A backward that raises runs none of
    its callbacks.

    Examples
    --------
    >>> import lucid
    >>> w = lucid.tensor([3.0], requires_grad=True)
    >>> log = []
    >>> def hook(g):
    ...     lucid.autograd.queue_callback(lambda: log.append(w.grad.item()))
    >>> _ = w.register_hook(hook)
    >>> (w * w).sum().backward()
    >>> log
    [6.0]
    """
    callbacks = current_callbacks()
    if callbacks is None:
        raise RuntimeError("queue_callback: final callbacks can only be installed during a backward "
                           "pass (call it from a hook or a Function's backward)")
    if not callable(callback):
        raise TypeError(f"queue_callback: expected a callable, got {type(callback).__name__}")
    callbacks.append(callback)


def run_backward(roots, root_grads, *, accumulate_into=None, **kw):
    """:func:`_run_graph`, then (still inside this backward) accumulate the captured
    gradients into ``accumulate_into`` (``backward(inputs=...)``) and run the queued
    callbacks. See NOTE [Backward callbacks and post-accumulate hooks]."""
    callbacks = []
    lists = _CALLBACKS.lists
    lists.append(callbacks)
    try:
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # NOTE [Silent floating-point errors]
            got = _run_graph(roots, root_grads, **kw)
        if accumulate_into is not None:
            own_ids = set()
            for leaf, g in zip(accumulate_into, got):
                if g is not None:
                    with backend.on_device(g):  # NOTE [Several devices]
                        _accumulate(leaf, g, own_ids, kw["tensor_mode"])
                    if leaf._post_hooks:
                        _run_post_hooks(leaf)
        i = 0
        while i < len(callbacks):  # a callback may queue another
            callbacks[i]()
            i += 1
    finally:
        lists.pop()
    return got


def _early_counts(roots):
    """id(leaf) -> number of graph edges into it, for leaves with post-accumulate hooks."""
    counts = {}
    for node in _topo([e[0] for e in roots if isinstance(e, tuple)]):
        for p in node.parents:
            if p is not None and p.__class__ is not tuple and p._post_hooks:
                counts[id(p)] = counts.get(id(p), 0) + 1
    for e in roots:  # a root leaf has its seed before anything runs: written at the end
        if not isinstance(e, tuple):
            counts.pop(id(e), None)
    return counts


def _flush_early(node, counts, pending, own_ids, tensor_mode):
    """``node`` has sent its gradients: write hooked leaves that expect no more."""
    for p in node.parents:
        if p is not None and p.__class__ is not tuple:
            k = id(p)
            n = counts.get(k)
            if n is None:
                continue
            if n > 1:
                counts[k] = n - 1
                continue
            del counts[k]
            entry = pending.pop(k, None)
            if entry is not None:
                with backend.on_device(entry[1]):  # NOTE [Several devices]
                    _accumulate(p, entry[1], own_ids, tensor_mode)
                _run_post_hooks(p)


def _run_post_hooks(leaf):
    for h in list(leaf._post_hooks):
        h(leaf)


def _run_graph(roots, root_grads, *, retain_graph, tensor_mode, capture=None, require_all=False,
               prune=True):
    """Propagate ``root_grads`` from ``roots`` (edges) back through the graph.

    Without ``capture`` gradients are accumulated into the ``.grad`` of leaves; with it
    (a list of edges) they are returned, aligned with ``capture``, and nothing else is
    touched (``autograd.grad`` / ``func.grad``); ``require_all`` raises
    :class:`UnusedInputError` first if a captured edge is unreachable. ``prune`` skips
    nodes that lead to no captured edge (one graph walk; ``func.grad`` turns it off: at
    its level every node depends on a differentiated input).

    NOTE [Failed backward changes nothing]: leaf gradients are summed while the graph
    runs and written to ``.grad`` (leaf hooks run once, on the total) only at the end,
    so an error raised in the middle leaves every ``.grad`` as it was.

    Nodes run by decreasing creation order (``Node.seq``) from a heap: every consumer of
    a node was created after it, so it has already sent its gradient when the node runs.
    """
    wanted = needed = None
    captured = {}
    node_capture = False
    if capture is not None:
        wanted = {_edge_key(e) for e in capture}
        node_capture = any(isinstance(e, tuple) for e in capture)
        if prune or require_all:
            order = _topo([e[0] for e in roots if isinstance(e, tuple)])
            needed = _needed_nodes(order, wanted) if prune else None
            if require_all:
                _check_reachable(roots, order, capture)
    buffers = {}
    heap = []
    pending = {}  # id(leaf) -> [leaf, summed gradient]. See NOTE [Failed backward changes nothing]
    own_ids = set()
    # See NOTE [Backward callbacks and post-accumulate hooks]
    early = _early_counts(roots) if _POST_HOOKS[0] and capture is None else None
    for edge, g in zip(roots, root_grads):
        _send(edge, g, buffers, heap, captured, wanted, pending, tensor_mode)
    anomaly = STATE.anomaly and STATE.anomaly_check_nan  # detect_anomaly(check_nan=False): no NaN checks
    capturing = wanted is not None
    pop, push, get_buf = heappop, heappush, buffers.get
    # The plain eager backward (arrays, no capture, no anomaly) takes an inlined copy of
    # Node.apply for single-output primitive nodes: it is the hot path of training loops.
    # NOTE [Several devices]: with the guard on, each node runs on its gradients' device (below)
    fast = not (capturing or tensor_mode or anomaly or PROFILING[0] or DEVICE_GUARD[0])
    while heap:
        node = pop(heap)[1]
        grads = buffers.pop(node)
        if fast and node.__class__ is Node and node.nout == 1 and node.eager and not (
                node.hooks or node.retains or node.freed):
            if node.versions is not None or node.out_versions is not None:
                node._check_versions()
            prim = node.prim
            rules, params, out, g = prim.vjp, node.params, node.out, grads[0]
            args = [a._data if isinstance(a, Tensor) else a for a in node.saved]
            i = -1
            for parent in node.parents:
                i += 1
                if parent is None:
                    continue
                if rules.__class__ is tuple:
                    rule = rules[i]
                    if rule is None:
                        raise RuntimeError(
                            f"backward: op '{prim.name}' is not differentiable with respect to argument {i}")
                    gi = rule(AN, g, out, *args, **params)
                else:
                    gi = rules(i, AN, g, out, *args, **params)
                if gi is None:
                    continue
                if parent.__class__ is tuple:
                    pn, idx = parent
                    buf = get_buf(pn)
                    if buf is None:
                        buf = buffers[pn] = [None] * pn.nout
                        push(heap, (-pn.seq, pn))
                        buf[idx] = gi
                    else:
                        cur = buf[idx]
                        buf[idx] = gi if cur is None else cur + gi
                else:
                    _send(parent, gi, buffers, heap, captured, wanted, pending, tensor_mode)
            if not retain_graph:
                node.saved = node.out = None
                node.freed = True
            if early:
                _flush_early(node, early, pending, own_ids, tensor_mode)
            continue
        with backend.on_device(*grads):  # NOTE [Several devices]: a no-op for one device
            if node_capture or node.nout > 1 or node.hooks or node.retains:
                grads = _prepare_output_grads(node, grads, captured, wanted if node_capture else None, tensor_mode)
            if needed is None or node in needed:
                in_grads = node.apply(grads, tensor_mode)
                if anomaly:
                    _check_anomaly(node, in_grads)
                for parent, g in zip(node.parents, in_grads):
                    if parent is None or g is None:
                        continue
                    if parent.__class__ is tuple:
                        pn, idx = parent
                        buf = get_buf(pn)
                        if buf is None:
                            buf = buffers[pn] = [None] * pn.nout
                            push(heap, (-pn.seq, pn))
                            buf[idx] = g
                        else:
                            cur = buf[idx]
                            buf[idx] = g if cur is None else _add(cur, g)
                    else:
                        _send(parent, g, buffers, heap, captured, wanted, pending, tensor_mode)
                if not retain_graph:  # a node this backward pruned keeps what it saved, as in PyTorch
                    node.release()
        if early:
            _flush_early(node, early, pending, own_ids, tensor_mode)
    for leaf, g in pending.values():
        with backend.on_device(g):
            _accumulate(leaf, g, own_ids, tensor_mode)
        if leaf._post_hooks:
            _run_post_hooks(leaf)
    if capture is not None:
        return [captured.get(_edge_key(e)) for e in capture]
    return None


def _needed_nodes(order, wanted):
    needed = set()
    for node in order:  # parents come first
        for p in node.parents:
            if p is None:
                continue
            if _edge_key(p) in wanted or (isinstance(p, tuple) and p[0] in needed):
                needed.add(node)
                break
    return needed


def _prepare_output_grads(node, grads, captured, wanted, tensor_mode):
    """Fill missing output grads with zeros, run tensor hooks, serve retain_grad/capture."""
    keep_none = node.keeps_none  # a custom Function without materialize_grads
    for i, g in enumerate(grads):
        if g is None and not keep_none:
            shape, dtype, cls = node.out_meta[i] if node.out_meta else (None, None, np.ndarray)
            z = np.zeros(shape, dtype) if cls is np.ndarray else backend.namespace_of(Meta(shape, dtype, cls)).zeros(shape, dtype)
            grads[i] = _wrap(z) if tensor_mode else z
    if node.hooks:
        for i, hooks in node.hooks.items():
            for h in list(hooks):
                if grads[i] is None:
                    break
                gi = _as_tensor(grads[i])
                r = h(gi)
                if r is not None:
                    _check_hook_result(h, gi, r)
                    grads[i] = r if tensor_mode else r._data
    if node.retains:
        for i, ref in node.retains.items():
            t = ref()
            if t is not None and grads[i] is not None:
                g = _as_tensor(grads[i])
                if t._grad is None:
                    t._grad = g if tensor_mode else _wrap(g._data.copy())
                else:  # accumulates across backward calls, as a leaf's .grad does (PyTorch)
                    t._grad = t._grad + g if tensor_mode else _wrap(t._grad._data + g._data)
    if wanted is not None:
        for i in range(len(grads)):
            k = (id(node), i)
            if k in wanted:
                captured[k] = grads[i]
    return grads


def _as_tensor(g):
    return g if isinstance(g, Tensor) else _wrap(g)


def _check_hook_result(hook, old, new):
    """A gradient hook may replace the value, not its dtype or shape (PyTorch's checks)."""
    if not isinstance(new, Tensor):
        raise TypeError(f"hook '{getattr(hook, '__name__', hook)}' returned a {type(new).__name__}, "
                        "expected a Tensor or None")
    if new.dtype != old.dtype or tuple(new.shape) != tuple(old.shape):  # error path only
        raise RuntimeError(
            f"hook '{getattr(hook, '__name__', hook)}' has changed the type of value (was dtype {old.dtype}, "
            f"shape {tuple(old.shape)}; got dtype {new.dtype}, shape {tuple(new.shape)})")


def _send(edge, g, buffers, heap, captured, wanted, pending, tensor_mode):
    """Route one cotangent to a node's buffer, a captured slot, or a leaf's ``.grad``."""
    if isinstance(edge, tuple):
        node, idx = edge
        buf = buffers.get(node)
        if buf is None:
            buf = buffers[node] = [None] * node.nout
            heappush(heap, (-node.seq, node))
        cur = buf[idx]
        buf[idx] = g if cur is None else _add(cur, g)
        return
    if wanted is not None:
        k = id(edge)
        if k in wanted:
            cur = captured.get(k)
            captured[k] = g if cur is None else _add(cur, g)
        return
    cur = pending.get(id(edge))
    if cur is None:
        pending[id(edge)] = [edge, g]
    else:
        cur[1] = _add(cur[1], g)


def _add(total, g):
    """``total + g``, two gradients of one value: on their device (NOTE [Several devices])."""
    if DEVICE_GUARD[0]:
        guard = backend.guard_for((total,))
        if guard is not None:
            with guard:
                return total + g
    return total + g


# How many custom Function backwards have run in Tensor mode (function.py counts them), and its
# value when the running create_graph backward started (None outside one): a constant gradient
# is joined to its leaf only if no such backward made it. See NOTE [Constant gradients under
# create_graph] (autograd/grad.py).
FUNCTION_BACKWARDS = [0]
JOIN_FROM = [None]


def _accumulate(leaf, g, own_ids, tensor_mode):
    if leaf._hooks:
        for h in list(leaf._hooks):
            gt = _as_tensor(g)
            r = h(gt)
            if r is not None:
                if not (isinstance(r, Tensor) and r.dtype == leaf.dtype and r.shape == leaf.shape):
                    _check_hook_result(h, gt, r)
                g = r if tensor_mode else r._data
    want = leaf.dtype if leaf._grad_dtype is SAME_DTYPE else leaf._grad_dtype  # None: as it comes
    if tensor_mode:
        g = _as_tensor(g)
        if want is not None and g.dtype != want:
            g = g.to(want)
        if not g._rg and STATE.grad_enabled and JOIN_FROM[0] == FUNCTION_BACKWARDS[0]:
            # a constant gradient still depends on its leaf, unless a custom Function's backward
            # made it (create_graph only). See NOTE [Constant gradients under create_graph]
            from .grad import _joined  # grad.py imports this module

            g = _joined(g, leaf)
        leaf._grad = g if leaf._grad is None else leaf._grad + g
        return
    g = g._data if isinstance(g, Tensor) else g if g.__class__ is np.ndarray else _as_array(g)
    if g.shape != leaf.shape:
        raise RuntimeError(
            f"backward: internal error, gradient of shape {g.shape} for a leaf of shape {leaf.shape}"
        )
    if leaf._grad is None:
        # Own the buffer: a rule may pass the same array (or a view of it) to several
        # leaves, and .grad is later changed in place (zero_, clip_grad_norm_ ...).
        data = leaf._data
        if g.strides != data.strides and g.size > 1:
            # PyTorch's layout contract: .grad takes its leaf's strides (a backward through
            # x.t() gives a transposed array; optimizers and hooks expect the leaf's layout)
            buf = backend.namespace_of(data).empty_like(data, dtype=g.dtype if want is None else want)
            buf[...] = g
            g = buf
        elif (id(g) in own_ids or (want is not None and g.dtype != want) or not g.flags.owndata
                or not getattr(g.flags, "writeable", True)):  # device arrays (CuPy) have no flag
            g = g.astype(g.dtype if want is None else want, copy=True)
        own_ids.add(id(g))
        leaf._grad = _wrap(g)
    else:
        buf = leaf._grad._data
        if getattr(buf.flags, "writeable", True):
            buf += g
            leaf._grad._version[0] += 1
        else:
            leaf._grad = _wrap(buf + g)


def _check_anomaly(node, in_grads):
    for i, g in enumerate(in_grads):
        if g is None:
            continue
        arr = g._data if isinstance(g, Tensor) else _as_array(g)
        if not dtypes.is_differentiable(arr.dtype):
            continue
        if backend.is_array(arr):
            has_nan = bool(np.isnan(arr).any())  # anomaly mode: a sync; inf is a value (PyTorch)
        else:  # a wrapper subclass's gradient has no array (NOTE [Subclass autograd])
            from ..utils._python_dispatch import has_nan_values

            has_nan = has_nan_values(g)
        if has_nan:
            where = ""
            if node.stack:
                frames = [f for f in node.stack if not _in_package(f.filename)]
                if frames:
                    f = frames[-1]
                    where = f"\nThe forward op was created at {f.filename}:{f.lineno}: {f.line}"
            raise RuntimeError(
                f"anomaly: function '{node.name()}' returned nan values in its "
                f"gradient for argument {i}.{where}"
            )


# --------------------------------------------------------------------- public


def _edge_of(t):
    return t if t.grad_fn is None else (t.grad_fn, t._out_idx)


def _check_seed_dtype(out, dtype, api):
    """PyTorch's rule: a complex output's gradient has its dtype (a real one would drop the
    imaginary part of the cotangent silently)."""
    if (out.dtype.kind == "c") != (np.dtype(dtype).kind == "c"):
        raise RuntimeError(
            f"{api}: for complex tensors, both the gradient and the output must have the same dtype; "
            f"got a gradient of dtype {dtype} for an output of dtype {out.dtype}")


def _seed(out, g, api):
    if g is None:
        if out.numel() != 1:
            raise RuntimeError(
                f"{api}: grad can be implicitly created only for scalar outputs, but the output "
                f"has shape {tuple(out.shape)}; pass a gradient of that shape"
            )
        if out.dtype.kind == "c":
            raise RuntimeError(
                f"{api}: grad can be implicitly created only for real scalar outputs, but the "
                f"output has dtype {out.dtype}; take a real loss (e.g. .abs()) or pass a gradient. "
                "See NOTE [Complex gradients]"
            )
        return backend.namespace_of(out).ones(out.shape, out.dtype)
    if isinstance(g, Tensor):
        arr = g._data
        _check_seed_dtype(out, g.dtype, api)
    else:
        arr = backend.to_device(np.asarray(g, dtype=out.dtype), out.device)
    if arr.shape != out.shape:
        if arr.size == out.numel() and arr.size == 1 and (arr.ndim == 0 or out.ndim > 0):
            return arr.reshape(out.shape).astype(out.dtype)  # a 0-d gradient for a one-element output
        raise RuntimeError(
            f"{api}: mismatch in shape: gradient has shape {tuple(arr.shape)} but the output "
            f"has shape {tuple(out.shape)}"
        )
    return arr.astype(out.dtype, copy=False)


def backward(tensor, gradient=None, retain_graph=None, create_graph=False, inputs=None):
    """``Tensor.backward``: accumulate gradients into leaves. See :meth:`Tensor.backward`."""
    tensors = [tensor] if isinstance(tensor, Tensor) else list(tensor)
    grads = [gradient] if isinstance(tensor, Tensor) else list(gradient or [None] * len(tensors))
    if retain_graph is None:
        retain_graph = create_graph
    roots, seeds = [], []
    if inputs is not None and not isinstance(inputs, Tensor) and len(inputs) == 0:
        raise RuntimeError("backward: 'inputs' argument to backward() cannot be empty")
    for k, (t, g) in enumerate(zip(tensors, grads)):
        if not t._rg:
            raise RuntimeError(
                f"backward: element {k} of tensors does not require grad and does not have a grad_fn "
                f"(shape {tuple(t.shape)}); did you create it under no_grad or from detached data?"
            )
        roots.append(_edge_of(t))
        with backend.on_device(t):
            seed = _seed(t, g, "backward")
        seeds.append(_wrap(seed) if create_graph else seed)
    kw = {}
    if inputs is not None:
        inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
        kw = {"capture": [_edge_of(i) for i in inputs], "accumulate_into": inputs}
    ctx = enable_grad() if create_graph else no_grad()
    outer, JOIN_FROM[0] = JOIN_FROM[0], FUNCTION_BACKWARDS[0] if create_graph else None
    try:
        with ctx:
            run_backward(roots, seeds, retain_graph=retain_graph, tensor_mode=create_graph, **kw)
    finally:
        JOIN_FROM[0] = outer
