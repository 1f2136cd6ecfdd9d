"""Container modules: Sequential, ModuleList, ModuleDict, ParameterList, ParameterDict."""
from __future__ import annotations

import operator
from collections import OrderedDict
from itertools import islice

from .module import Module
from .parameter import Parameter

__all__ = ["Container", "Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict"]


_CONTAINER_DEPRECATED = ("`nn.Container` is deprecated. All of its functionality is now implemented in "
                         "`nn.Module`. Subclass that instead.")


class Container(Module):
    """Deprecated (PyTorch's ``nn.Container``): a Module whose keyword arguments become its
    submodules. Making one, or subclassing it, warns with a FutureWarning; subclass
    :class:`Module` instead.

    Examples
    --------
    >>> import warnings, lucid.nn as nn
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore", FutureWarning)
    ...     c = nn.Container(fc=nn.Linear(2, 3))
    >>> [n for n, _ in c.named_parameters()]
    ['fc.weight', 'fc.bias']
    """

    def __init_subclass__(cls, **kwargs):
        import warnings

        warnings.warn(_CONTAINER_DEPRECATED, FutureWarning, stacklevel=2)
        super().__init_subclass__(**kwargs)

    def __init__(self, **kwargs):
        if type(self) is Container:  # as typing_extensions.deprecated: subclasses warned when defined
            import warnings

            warnings.warn(_CONTAINER_DEPRECATED, FutureWarning, stacklevel=2)
        super().__init__()
        for key, value in kwargs.items():
            self.add_module(key, value)


class _OperandError(TypeError, ValueError):
    """PyTorch raises ValueError where Lucid raised TypeError: both keep callers working."""


def _repeat_check(seq, other, op):
    if not isinstance(other, int) or isinstance(other, bool):
        raise TypeError(f"unsupported operand type(s) for {op}: {type(seq)} and {type(other)}")
    if other <= 0:
        raise ValueError(f"Non-positive multiplication factor {other} for {type(seq)}")


def _tensor_line(key, p, dtype_text):
    """One line of PyTorch's ParameterList/ParameterDict repr (its 2-space indent included)."""
    from .._core.tensor import Tensor

    if not isinstance(p, Tensor):
        return f"  ({key}): Object of type: {type(p).__name__}"
    size = "x".join(str(n) for n in p.shape)
    dev = f" ({p.device})" if p.device.type not in ("cpu", "meta") else ""
    kind = "Parameter" if isinstance(p, Parameter) else "Tensor"
    return f"  ({key}): {kind} containing: [{dtype_text(p)} of size {size}{dev}]"


def _index(idx, n, what):
    idx = operator.index(idx)
    if not -n <= idx < n:
        raise IndexError(f"{what}: index {idx} is out of range for length {n}")
    return idx % n


class Sequential(Module):
    """Modules applied one after the other; ``Sequential(OrderedDict(...))`` names them.

    Parameters
    ----------
    *args : Module
        The modules in order (or one ``OrderedDict`` of named modules).

    Examples
    --------
    >>> import lucid.nn as nn
    >>> net = nn.Sequential(nn.Linear(2, 3), nn.ReLU())
    >>> len(net), type(net[0]).__name__
    (2, 'Linear')
    """

    def __init__(self, *args):
        super().__init__()
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            for key, m in args[0].items():
                self.add_module(key, m)
        else:
            for i, m in enumerate(args):
                self.add_module(str(i), m)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return type(self)(OrderedDict(list(self._modules.items())[idx]))
        i = _index(idx, len(self), "Sequential")
        return next(islice(self._modules.values(), i, None))

    def __setitem__(self, idx, module):
        key = list(self._modules)[_index(idx, len(self), "Sequential")]
        self.add_module(key, module)

    def __delitem__(self, idx):
        keys = list(self._modules)
        for k in (keys[idx] if isinstance(idx, slice) else [keys[_index(idx, len(self), "Sequential")]]):
            del self._modules[k]
        items = list(self._modules.items())  # renumber, as PyTorch does
        if all(k.isdigit() for k, _ in items):
            self._modules.clear()
            for i, (_, m) in enumerate(items):
                self._modules[str(i)] = m

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __add__(self, other):
        if not isinstance(other, Sequential):
            raise _OperandError("Sequential: add operator supports only objects of Sequential class, "
                                f"but {type(other)} is given.")
        return Sequential(*self, *other)

    def __mul__(self, other):
        """``seq * n``: a new Sequential running the same modules (shared, not copied) n times."""
        _repeat_check(self, other, "*")
        return Sequential(*(list(self) * other))

    __rmul__ = __mul__

    def __imul__(self, other):
        _repeat_check(self, other, "*=")
        for m in list(self) * (other - 1):
            self.append(m)
        return self

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules):
        for m in modules:
            self.append(m)
        return self

    def insert(self, index, module):
        mods = list(self._modules.values())
        n = len(mods)
        if not -n <= index <= n:
            raise IndexError(f"Sequential.insert: index {index} is out of range")
        mods.insert(index + n if index < 0 else index, module)  # list.insert's rule, as PyTorch
        self._modules.clear()
        for i, m in enumerate(mods):
            self.add_module(str(i), m)
        return self

    def pop(self, idx):
        m = self[idx]
        del self[idx]
        return m

    def forward(self, input):
        for m in self._modules.values():
            input = m(input)
        return input


class ModuleList(Module):
    """A list of submodules, registered so their parameters are found.

    Parameters
    ----------
    modules : iterable of Module, optional
        The initial modules.

    Examples
    --------
    >>> import lucid.nn as nn
    >>> layers = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])
    >>> len(list(layers.parameters()))
    6
    """

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return type(self)(list(self._modules.values())[idx])
        return self._modules[str(_index(idx, len(self), "ModuleList"))]

    def __setitem__(self, idx, module):
        self.add_module(str(_index(idx, len(self), "ModuleList")), module)

    def __delitem__(self, idx):
        mods = list(self._modules.values())
        del mods[idx if isinstance(idx, slice) else _index(idx, len(self), "ModuleList")]
        self._modules.clear()
        for i, m in enumerate(mods):
            self._modules[str(i)] = m

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __iadd__(self, modules):
        return self.extend(modules)

    def __add__(self, other):
        return ModuleList(list(self) + list(other))

    def __repr__(self):
        """PyTorch's: runs of equal entries print once, as ``(0-3): 4 x Linear(...)``."""
        from .module import _addindent

        reprs = [repr(m) for m in self]
        if not reprs:
            return self._get_name() + "()"
        runs = []  # [start, end, text]
        for i, r in enumerate(reprs):
            if runs and runs[-1][2] == r:
                runs[-1][1] = i
            else:
                runs.append([i, i, r])
        lines = [_addindent(f"({a}): {r}" if a == b else f"({a}-{b}): {b - a + 1} x {r}", 2)
                 for a, b, r in runs]
        return self._get_name() + "(\n  " + "\n  ".join(lines) + "\n)"

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules):
        if isinstance(modules, Module) and not isinstance(modules, (ModuleList, Sequential)):
            raise TypeError("ModuleList.extend should be called with an iterable of Modules")
        for m in modules:
            self.append(m)
        return self

    def insert(self, index, module):
        mods = list(self._modules.values())
        mods.insert(index, module)
        self._modules.clear()
        for i, m in enumerate(mods):
            self.add_module(str(i), m)

    def pop(self, idx=-1):
        m = self[idx]
        del self[idx]
        return m

    def forward(self, *args, **kwargs):
        raise NotImplementedError("ModuleList has no forward; iterate over its modules instead")


class ModuleDict(Module):
    """An ordered dict of submodules.

    Parameters
    ----------
    modules : mapping or iterable of (str, Module), optional
        The initial modules.

    Examples
    --------
    >>> import lucid.nn as nn
    >>> d = nn.ModuleDict({"enc": nn.Linear(2, 2)})
    >>> list(d.keys())
    ['enc']
    """

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key):
        return self._modules[key]

    def __setitem__(self, key, module):
        self.add_module(key, module)

    def __delitem__(self, key):
        del self._modules[key]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def __contains__(self, key):
        return key in self._modules

    def keys(self):
        return self._modules.keys()

    def values(self):
        return self._modules.values()

    def items(self):
        return self._modules.items()

    def clear(self):
        self._modules.clear()

    def pop(self, key):
        v = self[key]
        del self[key]
        return v

    def update(self, modules):
        items = modules.items() if hasattr(modules, "items") else modules
        for k, m in items:
            self[k] = m

    def forward(self, *args, **kwargs):
        raise NotImplementedError("ModuleDict has no forward; index it instead")


def _as_param(value):
    from .._core.tensor import Tensor

    if isinstance(value, Tensor) and not isinstance(value, Parameter):
        return Parameter(value)
    return value


class ParameterList(Module):
    """A list of Parameters (plain Tensors are wrapped as Parameters).

    Parameters
    ----------
    values : iterable of Tensor, optional
        The initial parameters.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> ps = nn.ParameterList([nn.Parameter(lucid.zeros(2)), lucid.ones(3)])
    >>> [tuple(p.shape) for p in ps]
    [(2,), (3,)]
    """

    def __init__(self, values=None):
        super().__init__()
        self._size = 0
        if values is not None:
            self.extend(values)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return ParameterList([self[i] for i in range(len(self))[idx]])
        return getattr(self, str(_index(idx, len(self), "ParameterList")))

    def __setitem__(self, idx, param):
        idx = _index(idx, len(self), "ParameterList")
        setattr(self, str(idx), _as_param(param))

    def __len__(self):
        return self._size

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __iadd__(self, params):
        return self.extend(params)

    def append(self, value):
        new = self._size
        self._size += 1
        setattr(self, str(new), _as_param(value))
        return self

    def extend(self, values):
        for v in values:
            self.append(v)
        return self

    def extra_repr(self):
        return "\n".join(_tensor_line(i, p, lambda t: t.dtype) for i, p in enumerate(self))

    def forward(self, *args, **kwargs):
        raise NotImplementedError("ParameterList has no forward")


class ParameterDict(Module):
    """An ordered dict of Parameters (plain Tensors are wrapped as Parameters).

    Parameters
    ----------
    parameters : mapping or iterable of (str, Tensor), optional
        The initial parameters.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> pd = nn.ParameterDict({'a': lucid.zeros(2)})
    >>> type(pd['a']).__name__, [n for n, _ in pd.named_parameters()]
    ('Parameter', ['a'])
    """

    def __init__(self, parameters=None):
        super().__init__()
        self._keys = {}
        if parameters is not None:
            self.update(parameters)

    def __getitem__(self, key):
        return getattr(self, key)

    def __setitem__(self, key, value):
        self._keys[key] = None
        setattr(self, key, _as_param(value))

    def __delitem__(self, key):
        del self._keys[key]
        delattr(self, key)

    def __len__(self):
        return len(self._keys)

    def __iter__(self):
        return iter(self._keys)

    def __contains__(self, key):
        return key in self._keys

    def keys(self):
        return self._keys.keys()

    def values(self):
        return (self[k] for k in self._keys)

    def items(self):
        return ((k, self[k]) for k in self._keys)

    def pop(self, key):
        v = self[key]
        del self[key]
        return v

    def update(self, parameters):
        """Add ``parameters``; a plain mapping's keys go in sorted order, as PyTorch's (an
        ``OrderedDict`` or ``ParameterDict`` keeps its own order)."""
        from collections.abc import Iterable, Mapping

        if isinstance(parameters, (OrderedDict, ParameterDict)):
            items = parameters.items()
        elif isinstance(parameters, Mapping):
            items = sorted(parameters.items())
        elif isinstance(parameters, Iterable):
            items = list(parameters)
            for j, p in enumerate(items):
                if not isinstance(p, Iterable):
                    raise TypeError(f"ParameterDict update sequence element #{j} should be Iterable; "
                                    f"is {type(p).__name__}")
                if len(p) != 2:
                    raise ValueError(f"ParameterDict update sequence element #{j} has length {len(p)}; "
                                     "2 is required")
        else:
            raise TypeError("ParametersDict.update should be called with an iterable of key/value pairs, "
                            f"but got {type(parameters).__name__}")
        for k, v in items:
            self[k] = v

    def get(self, key, default=None):
        return self[key] if key in self else default

    def setdefault(self, key, default=None):
        if key not in self:
            self[key] = default
        return self[key]

    def popitem(self):
        """Remove and return the last inserted ``(key, parameter)``."""
        if not self._keys:
            raise KeyError("popitem(): dictionary is empty")
        key = next(reversed(self._keys))
        return key, self.pop(key)

    def clear(self):
        for k in list(self._keys):
            del self[k]

    def copy(self):
        """A new ParameterDict holding the same Parameter objects."""
        return ParameterDict(OrderedDict((k, self[k]) for k in self._keys))

    def fromkeys(self, keys, default=None):
        return ParameterDict((k, default) for k in keys)

    def __reversed__(self):
        return reversed(list(self._keys))

    def __or__(self, other):
        out = self.copy()
        out.update(other)
        return out

    def __ror__(self, other):
        out = other.copy()
        out.update(self)
        return out

    def __ior__(self, other):
        self.update(other)
        return self

    def extra_repr(self):
        return "\n".join(_tensor_line(k, p, lambda t: t.type()) for k, p in self.items())

    def forward(self, *args, **kwargs):
        raise NotImplementedError("ParameterDict has no forward")
