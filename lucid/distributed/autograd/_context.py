"""Distributed autograd contexts: what each worker sent and received with gradients in one pass.

NOTE [Send and recv]
An RPC made inside ``dist_autograd.context()`` (or by a server thread running a request that
came with a context) carries the context id. On the sender, the tensors of the message that
require grad are recorded as one *send* of that context (``sends[send_id]``: the tensors
themselves, so their graph stays alive). On the receiver, those tensors arrive as fresh leaves
that require grad, recorded as *recvs* (``recvs[id(t)]``: the sender's worker id, the send id
and the position in the send). A response is recorded the same way when its request carried
a context, so values coming back from a remote model join the caller's graph. This is
PyTorch's pair of ``SendRpcBackward``/``RecvRpcBackward`` functions, kept as a table beside the
graph instead of as graph nodes (the local engine needs no change).

NOTE [Distributed backward]
``backward(context_id, roots)`` runs the local engine from the roots, capturing the gradient of
every leaf it reaches (nothing is written to ``.grad``). A captured leaf that is a recv has its
gradient sent to the worker that sent the tensor, which runs its own piece of the graph from
the tensors of that send, in the same way, and answers when that piece (with everything it in
turn sent further) is done; other leaves sum their gradients in the context
(``get_gradients``). This is PyTorch's FAST mode: each piece runs as soon as its gradients
arrive. Backward is linear, so a graph node reached by several pieces gets the sum of their
contributions; the graph is therefore always kept (as if ``retain_graph=True``) until the
context is released. Pieces on one worker run one at a time (``_ENGINE_LOCK``), never while
that worker waits for an RPC, so two workers sending each other gradients can't deadlock.
"""
from __future__ import annotations

import threading

_CURRENT = threading.local()  # .context_id of the context this thread runs in (or None)
_CONTEXTS = {}
_LOCK = threading.Lock()
_ENGINE_LOCK = threading.Lock()
_NEXT = [0]


class DistAutogradContext:
    """One context's sends, recvs and the leaf gradients summed on this worker."""

    def __init__(self, context_id):
        self.context_id = context_id
        self.sends = {}  # send_id -> (destination worker id, [tensors])
        self.recvs = {}  # id(tensor) -> (tensor, source worker id, send_id, position)
        self.grads = {}  # id(leaf) -> [leaf, summed gradient array]
        self.known_workers = set()
        self._lock = threading.Lock()
        self._next_send = 0

    def _context_id(self):
        return self.context_id

    def record_send(self, dest, tensors):
        with self._lock:
            send_id = self._next_send
            self._next_send += 1
            self.sends[send_id] = (dest, list(tensors))
            self.known_workers.add(dest)
        return send_id

    def record_recv(self, src, send_id, position, tensor):
        with self._lock:
            self.recvs[id(tensor)] = (tensor, src, send_id, position)
            self.known_workers.add(src)

    def accumulate(self, leaf, g):
        with self._lock:
            cur = self.grads.get(id(leaf))
            if cur is None:
                self.grads[id(leaf)] = [leaf, g.copy()]
            else:
                cur[1] = cur[1] + g

    def gradients(self):
        from lucid._core.tensor import _wrap

        with self._lock:
            return {leaf: _wrap(g.copy()) for leaf, g in self.grads.values()}


def _worker_id(api):
    from lucid.distributed.rpc import _agent

    agent = _agent.current(api)
    return agent.worker_id


def new_context(api="context"):
    """A new context owned by this thread: id ``worker_id << 48 | counter`` (unique across workers)."""
    if getattr(_CURRENT, "context_id", None) is not None:
        raise RuntimeError(f"{api}: already have an autograd context id for this thread "
                           f"({_CURRENT.context_id}); distributed autograd contexts can't be nested")
    wid = _worker_id(api)
    with _LOCK:
        cid = (wid << 48) | _NEXT[0]
        _NEXT[0] += 1
        ctx = _CONTEXTS[cid] = DistAutogradContext(cid)
    _CURRENT.context_id = cid
    return ctx


def get_or_create(context_id):
    """The context ``context_id`` on this worker, made when a message first brings it here."""
    with _LOCK:
        ctx = _CONTEXTS.get(context_id)
        if ctx is None:
            ctx = _CONTEXTS[context_id] = DistAutogradContext(context_id)
        return ctx


def retrieve(context_id, api):
    with _LOCK:
        ctx = _CONTEXTS.get(context_id)
    if ctx is None:
        raise RuntimeError(f"{api}: could not find autograd context with id: {context_id}")
    return ctx


def current():
    """This thread's context, or None."""
    cid = getattr(_CURRENT, "context_id", None)
    if cid is None:
        return None
    with _LOCK:
        return _CONTEXTS.get(cid)


class running_in:
    """Make ``context_id`` this thread's context for a block (a server thread running a request)."""

    def __init__(self, context_id):
        self.context_id = context_id

    def __enter__(self):
        self.saved = getattr(_CURRENT, "context_id", None)
        _CURRENT.context_id = self.context_id

    def __exit__(self, *exc):
        _CURRENT.context_id = self.saved


def release(context_id):
    """Forget ``context_id`` here; returns the workers it involved (to be told too), or None."""
    with _LOCK:
        ctx = _CONTEXTS.pop(context_id, None)
    if getattr(_CURRENT, "context_id", None) == context_id:
        _CURRENT.context_id = None
    return None if ctx is None else ctx.known_workers


def release_all():
    """Drop every context (``rpc.shutdown``)."""
    with _LOCK:
        _CONTEXTS.clear()
    _CURRENT.context_id = None


def _reachable_leaves(roots):
    """The leaves (tensors) the engine can reach from ``roots`` (edges), each once."""
    from lucid._core.tensor import Tensor
    from lucid.autograd.engine import _topo

    leaves, seen = [], set()

    def add(t):
        if id(t) not in seen:
            seen.add(id(t))
            leaves.append(t)

    for e in roots:
        if isinstance(e, Tensor):
            add(e)
    for node in _topo([e[0] for e in roots if isinstance(e, tuple)]):
        for p in node.parents:
            if p is not None and p.__class__ is not tuple:
                add(p)
    return leaves


def run_local_piece(ctx, roots, grads):
    """Run this worker's graph from ``roots`` (edges) with ``grads`` (arrays); sum the leaf
    gradients into ``ctx`` and return ``{source worker: [(send_id, position, grad)]}`` for the
    recvs reached (NOTE [Distributed backward])."""
    from lucid._core.grad_mode import no_grad
    from lucid.autograd.engine import run_backward

    outgoing = {}
    with _ENGINE_LOCK:
        leaves = _reachable_leaves(roots)
        if not leaves:
            return outgoing
        with no_grad():
            got = run_backward(roots, grads, retain_graph=True, tensor_mode=False, capture=leaves, prune=False)
        for leaf, g in zip(leaves, got):
            if g is None:
                continue
            recv = ctx.recvs.get(id(leaf))
            if recv is not None and recv[0] is leaf:
                outgoing.setdefault(recv[1], []).append((recv[2], recv[3], g))
            elif leaf._rg:
                ctx.accumulate(leaf, g)
    return outgoing
