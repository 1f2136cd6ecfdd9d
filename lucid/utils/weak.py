"""``lucid.utils.weak`` (``torch.utils.weak``): weak references and dictionaries keyed by
object identity, for tensors (whose ``==`` is elementwise and so unusable as a dict key).

Examples
--------
>>> import gc
>>> import lucid
>>> from lucid.utils.weak import WeakTensorKeyDictionary
>>> d = WeakTensorKeyDictionary()
>>> t = lucid.ones(2)
>>> d[t] = "meta"
>>> d[t], len(d)
('meta', 1)
>>> del t; _ = gc.collect(); len(d)   # the entry goes with its tensor
0
"""
from __future__ import annotations

import weakref
from collections.abc import MutableMapping

__all__ = ["TensorWeakRef", "WeakIdKeyDictionary", "WeakIdRef", "WeakTensorKeyDictionary"]


class WeakIdRef(weakref.ref):
    """A weak reference that hashes by its object's ``id`` and compares by identity.

    Two refs to the same live object are equal; a dead ref equals only itself (its object's
    ``id`` may be reused). ``WeakIdRef(x)`` for the same ``x`` always hash alike.
    """

    __slots__ = ("_id",)

    def __new__(cls, key, callback=None):
        return super().__new__(cls, key, callback)

    def __init__(self, key, callback=None):
        self._id = id(key)
        super().__init__(key, callback)

    def __call__(self):
        return super().__call__()

    def __hash__(self):
        return self._id

    def __eq__(self, other):
        a, b = self(), other() if isinstance(other, (WeakIdRef, _StrongIdRef)) else None
        if a is not None and b is not None:
            return a is b
        return self is other

    def __ne__(self, other):
        return not self.__eq__(other)


class _StrongIdRef:
    """A strong key with ``WeakIdRef``'s hash and equality, for lookups (no weakref made)."""

    __slots__ = ("_obj", "_id")

    def __init__(self, obj):
        self._obj, self._id = obj, id(obj)

    def __call__(self):
        return self._obj

    def __hash__(self):
        return self._id

    def __eq__(self, other):
        return isinstance(other, (WeakIdRef, _StrongIdRef)) and other() is self._obj




class WeakIdKeyDictionary(MutableMapping):
    """A mapping whose keys are held weakly and compared by identity (``id``), so any object,
    a Tensor included, can be a key; an entry disappears when its key is collected.

    Parameters
    ----------
    dict : mapping, optional
        Initial entries.
    ref_type : type
        The weak reference class (:class:`WeakIdRef`).
    """

    def __init__(self, dict=None, ref_type=WeakIdRef):  # noqa: A002 - PyTorch's parameter name
        self.data = {}
        self.ref_type = ref_type
        self_ref = weakref.ref(self)

        def remove(k, selfref=self_ref):
            owner = selfref()
            if owner is not None:
                owner.data.pop(k, None)

        self._remove = remove
        if dict is not None:
            self.update(dict)

    def __setitem__(self, key, value):
        self.data[self.ref_type(key, self._remove)] = value

    def __getitem__(self, key):
        return self.data[_StrongIdRef(key)]

    def __delitem__(self, key):
        del self.data[_StrongIdRef(key)]

    def __contains__(self, key):
        try:
            return _StrongIdRef(key) in self.data
        except TypeError:
            return False

    def __iter__(self):
        for ref in list(self.data):
            obj = ref()
            if obj is not None:
                yield obj

    def __len__(self):
        return sum(1 for ref in list(self.data) if ref() is not None)

    def __repr__(self):
        return f"<{type(self).__name__} at {id(self):#x}>"

    def copy(self):
        """A new dictionary with the same (weakly held) entries."""
        new = type(self)(ref_type=self.ref_type)
        for key, value in self.items():
            new[key] = value
        return new

    __copy__ = copy

    def __deepcopy__(self, memo):
        import copy

        new = type(self)(ref_type=self.ref_type)
        for key, value in self.items():
            new[key] = copy.deepcopy(value, memo)
        return new

    def keyrefs(self):
        """The weak references to the keys."""
        return list(self.data)

    def __eq__(self, other):
        if not isinstance(other, MutableMapping):
            return NotImplemented
        return len(self) == len(other) and all(k in other and other[k] is v or (k in other and other[k] == v)
                                               for k, v in self.items())

    __hash__ = None


WeakTensorKeyDictionary = WeakIdKeyDictionary


class TensorWeakRef:
    """A weak reference to a Tensor: calling it returns the tensor, or None once it is gone.

    Examples
    --------
    >>> import lucid
    >>> from lucid.utils.weak import TensorWeakRef
    >>> t = lucid.zeros(1)
    >>> r = TensorWeakRef(t)
    >>> r() is t
    True
    """

    __slots__ = ("ref",)

    def __init__(self, tensor):
        from .._core.tensor import Tensor

        if not isinstance(tensor, Tensor):
            raise TypeError(f"TensorWeakRef: expected a Tensor, got {type(tensor).__name__}")
        self.ref = weakref.ref(tensor)

    def __call__(self):
        return self.ref()
