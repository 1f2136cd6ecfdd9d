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
            raise TypeError("Sequential: can only add another Sequential")
        return Sequential(*self, *other)

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
        mods.insert(index % (n + 1) if index < 0 else index, module)
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
        return "\n".join(f"({i}): Parameter containing: [{p.dtype} of size {tuple(p.shape)}]"
                         for i, p in enumerate(self))

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
        items = parameters.items() if hasattr(parameters, "items") else parameters
        for k, v in items:
            self[k] = v

    def extra_repr(self):
        return "\n".join(f"({k}): Parameter containing: [{p.dtype} of size {tuple(p.shape)}]"
                         for k, p in self.items())

    def forward(self, *args, **kwargs):
        raise NotImplementedError("ParameterDict has no forward")
