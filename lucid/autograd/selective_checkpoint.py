"""Selective activation checkpointing (``torch.utils.checkpoint.create_selective_checkpoint_contexts``).

NOTE [Selective checkpointing]
``checkpoint(fn, ..., use_reentrant=False, context_fn=partial(create_selective_checkpoint_contexts,
policy))`` keeps the outputs of the ops the policy saves (typically the matrix products) and
recomputes the rest (the cheap elementwise ops) in the backward. The two contexts swap every
primitive's ``impl`` for a wrapper while the segment runs (as the profiler does, so nothing is
paid outside): in the forward the wrapper asks the policy about each op call and caches a copy
of the output of those to save, in order; in the recomputation it asks again and, for those,
returns the cached output instead of computing it. A copy, not the array itself, so an in-place
change of the output later in the forward (``y = x @ w; y.relu_()``) cannot leak into the
recomputation (PyTorch keeps an alias and raises when it was changed, unless
``allow_cache_entry_mutation``; a copy makes that check unnecessary). The ``*_CPU_OFFLOAD``
policies keep the copy in host memory and move it back. The policy receives a
:class:`SelectiveCheckpointContext`, the op (a Lucid primitive: ``op.name`` is ``"matmul"``,
``"linear"``, ``"conv"`` ...; it compares equal to its name and to the public function of the
same name, so ``op in [lucid.matmul, "linear"]`` works) and the op's arguments as tensors.
"""
from __future__ import annotations

import enum

from .checkpoint import CheckpointError

__all__ = ["CheckpointPolicy", "SelectiveCheckpointContext", "create_selective_checkpoint_contexts"]


class CheckpointPolicy(enum.Enum):
    """What selective checkpointing does with an op's output (PyTorch's values)."""

    MUST_SAVE = 0
    PREFER_SAVE = 1
    MUST_RECOMPUTE = 2
    PREFER_RECOMPUTE = 3
    MUST_CPU_OFFLOAD = 4
    PREFER_CPU_OFFLOAD = 5


_SAVE = (CheckpointPolicy.MUST_SAVE, CheckpointPolicy.PREFER_SAVE)
_OFFLOAD = (CheckpointPolicy.MUST_CPU_OFFLOAD, CheckpointPolicy.PREFER_CPU_OFFLOAD)


class SelectiveCheckpointContext:
    """What a policy function is told: ``is_recompute`` is True in the backward's recomputation."""

    def __init__(self, *, is_recompute):
        self.is_recompute = is_recompute


class _Op:
    """The op a policy sees: a primitive, equal to its name and to a function of that name."""

    __slots__ = ("prim", "name")

    def __init__(self, prim):
        self.prim, self.name = prim, prim.name

    def __eq__(self, other):
        if isinstance(other, _Op):
            return self.name == other.name
        return _op_name(other) == self.name

    def __hash__(self):
        return hash(self.name)

    def __repr__(self):
        return f"lucid.{self.name}"


def _op_name(op):
    if isinstance(op, str):
        return op[len("lucid."):] if op.startswith("lucid.") else op
    name = getattr(op, "name", None)  # a primitive
    if isinstance(name, str):
        return name
    return getattr(op, "__name__", None)  # a public function: lucid.matmul, F.linear


class _Cache:
    def __init__(self, policy, allow_mutation):
        self.policy, self.allow_mutation = policy, allow_mutation
        self.entries = []
        self.position = 0


def _decide(cache, prim, arrays, params, is_recompute):
    from .._core.tensor import _wrap

    args = [_wrap(a) if hasattr(a, "shape") and hasattr(a, "dtype") else a for a in arrays]
    policy = cache.policy(SelectiveCheckpointContext(is_recompute=is_recompute), _Op(prim), *args, **params)
    if not isinstance(policy, CheckpointPolicy):
        if isinstance(policy, bool):  # PyTorch's deprecated form: True saves
            return CheckpointPolicy.MUST_SAVE if policy else CheckpointPolicy.PREFER_RECOMPUTE
        raise TypeError(f"create_selective_checkpoint_contexts: the policy returned {policy!r} for "
                        f"{prim.name}; expected a CheckpointPolicy")
    return policy


def _keep(out, policy):
    from .._core import backend

    def one(a):
        if policy in _OFFLOAD:
            return ("host", backend.host(a).copy(), backend.device_of_array(a))
        with backend.on_device(a):
            return ("same", a.copy(), None)

    return tuple(one(o) for o in out) if isinstance(out, tuple) else one(out)


def _restore(kept):
    from .._core import backend

    def one(entry):
        where, arr, dev = entry
        return backend.to_device(arr, dev) if where == "host" and dev.type != "cpu" else arr

    return tuple(one(k) for k in kept) if isinstance(kept[0], tuple) else one(kept)


class _Swap:
    """Wraps every primitive's impl while open (see NOTE [Selective checkpointing])."""

    def __init__(self, cache, is_recompute):
        self.cache, self.is_recompute = cache, is_recompute
        self.saved = None

    def _wrapped(self, prim, impl):
        cache, recompute = self.cache, self.is_recompute

        def run(*arrays, **params):
            policy = _decide(cache, prim, arrays, params, recompute)
            if policy not in _SAVE and policy not in _OFFLOAD:
                return impl(*arrays, **params)
            if not recompute:
                out = impl(*arrays, **params)
                cache.entries.append((prim.name, _keep(out, policy)))
                return out
            if cache.position >= len(cache.entries) or cache.entries[cache.position][0] != prim.name:
                raise CheckpointError(
                    f"checkpoint: the recomputation saved {prim.name} where the forward saved "
                    f"{cache.entries[cache.position][0] if cache.position < len(cache.entries) else 'nothing'}; "
                    "the policy and the function must make the same choices each time")
            name, kept = cache.entries[cache.position]
            cache.entries[cache.position] = (name, None)  # handed over: freed with its node
            cache.position += 1
            return _restore(kept)

        return run

    def __enter__(self):
        from .._core.primitive import REGISTRY

        self.saved = [(prim, prim.impl) for prim in REGISTRY.values()]
        for prim, impl in self.saved:
            prim.impl = self._wrapped(prim, impl)
        return self

    def __exit__(self, *exc):
        for prim, impl in self.saved:
            prim.impl = impl
        self.saved = None
        if self.is_recompute:
            self.cache.entries, self.cache.position = [], 0
        return False


def create_selective_checkpoint_contexts(policy_fn_or_list, allow_cache_entry_mutation=False):
    """The two contexts (forward, recomputation) of selective activation checkpointing, for
    ``checkpoint(..., use_reentrant=False, context_fn=...)`` (NOTE [Selective checkpointing]).

    Parameters
    ----------
    policy_fn_or_list : callable or list
        ``policy(ctx, op, *args, **params) -> CheckpointPolicy``, or a list of ops (primitives,
        their names or the public functions: ``[lucid.matmul, "linear"]``) to save, every
        other op being recomputed.
    allow_cache_entry_mutation : bool
        Accepted: saved outputs are copies, so changing them in place is always safe.

    Examples
    --------
    >>> import functools, lucid
    >>> from lucid.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts
    >>> w = lucid.tensor([[2.0, 0.0], [0.0, 3.0]], requires_grad=True)
    >>> fn = lambda x: (x @ w).sigmoid().sum()
    >>> ctx = functools.partial(create_selective_checkpoint_contexts, [lucid.matmul])
    >>> checkpoint(fn, lucid.ones(1, 2), use_reentrant=False, context_fn=ctx).backward()
    >>> w.grad.shape
    (2, 2)
    """
    if callable(policy_fn_or_list):
        policy = policy_fn_or_list
    elif isinstance(policy_fn_or_list, (list, tuple, set)):
        names = set()
        for op in policy_fn_or_list:
            name = _op_name(op)
            if name is None:
                raise ValueError(f"create_selective_checkpoint_contexts: {op!r} is not an op (a primitive, "
                                 "its name or a lucid function)")
            names.add(name)

        def policy(ctx, op, *args, **kwargs):
            return CheckpointPolicy.MUST_SAVE if op.name in names else CheckpointPolicy.PREFER_RECOMPUTE
    else:
        raise TypeError("create_selective_checkpoint_contexts: policy_fn_or_list must be either a function or a "
                        f"list of ops, got {type(policy_fn_or_list).__name__}")
    cache = _Cache(policy, allow_cache_entry_mutation)
    return _Swap(cache, False), _Swap(cache, True)
