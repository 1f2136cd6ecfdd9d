"""``Dim``, ``ShapesCollection`` and the input guards of an exported program
(``torch.export.dynamic_shapes``).

NOTE [Export guards]
An exported program is only promised to be right for inputs like its example: every tensor
input keeps its rank and dtype, every dimension keeps its example size unless
``dynamic_shapes`` marks it dynamic (a named ``Dim``, ``Dim.DYNAMIC`` or ``Dim.AUTO``), and
then its size must stay within the Dim's ``[min, max]`` (one named Dim used twice must have
equal sizes); a non-tensor input is specialised to its example value. ``ep.module()`` checks
all of this at its entry with torch's messages (``_check_input_constraints_for_graph``:
``Expected input at *args[0].shape[0] to be equal to 4, but got 5``), before any op runs.
The guards are data (``InputGuard``), so ``lucid.export.save`` writes them and ``load``
restores them without code.
"""
from __future__ import annotations

import dataclasses
import math

__all__ = ["Dim", "ShapesCollection", "ValueRange", "InputGuard"]


@dataclasses.dataclass(frozen=True)
class _DimHint:
    """``Dim.AUTO`` / ``Dim.DYNAMIC`` / ``Dim.STATIC``; call one to bound it (``Dim.AUTO(max=64)``)."""

    type: str
    min: int | None = None
    max: int | None = None
    _factory: bool = True

    def __call__(self, min=None, max=None):
        if not self._factory:
            raise TypeError(f"'{type(self).__name__}' object is not callable")
        if min is not None and min < 0:
            raise AssertionError(f"min must be non-negative, got {min}")
        if max is not None and max < 0:
            raise AssertionError(f"max must be non-negative, got {max}")
        if min is not None and max is not None and min > max:
            raise AssertionError(f"min must be <= max, got min={min}, max={max}")
        return _DimHint(self.type, min, max, False)

    def __repr__(self):
        parts = [self.type] + [f"{k}={v}" for k, v in (("min", self.min), ("max", self.max)) if v is not None]
        return f"DimHint({', '.join(parts)})"


class Dim:
    """A named dynamic dimension of an exported program's inputs (``torch.export.Dim``).

    ``Dim("batch", min=2, max=64)`` makes every input dimension marked with it accept any size
    in ``[min, max]`` (and all of them equal); ``Dim.AUTO`` lets export decide (dynamic unless
    the model's Python code depends on the size), ``Dim.DYNAMIC`` insists on dynamic, and
    ``Dim.STATIC`` (like ``None``) keeps the example's size.

    Parameters
    ----------
    name : str
        An identifier, used in ``range_constraints`` and error messages.
    min, max : int, optional
        Inclusive bounds (default 0 and unbounded).

    Examples
    --------
    >>> from lucid.export import Dim
    >>> Dim("batch", min=2, max=8)
    Dim('batch', min=2, max=8)
    >>> Dim.AUTO
    DimHint(AUTO)
    """

    AUTO = _DimHint("AUTO")
    DYNAMIC = _DimHint("DYNAMIC")
    STATIC = _DimHint("STATIC")

    def __init__(self, name, *, min=None, max=None):
        lo = 0 if min is None else min
        hi = math.inf if max is None else max
        if not hi > lo:
            raise AssertionError(f"Cannot create Dim with inconsistent min={min}, max={max}")
        if not isinstance(name, str) or not name.isidentifier():
            raise AssertionError(f"Dim name must be a valid identifier, got {name}")
        self.__name__ = name
        self.min, self.max = lo, hi

    def __repr__(self):
        lo = None if self.min == 0 else self.min
        hi = None if self.max == math.inf else self.max
        bounds = "".join(f", {k}={v}" for k, v in (("min", lo), ("max", hi)) if v is not None)
        return f"Dim({self.__name__!r}{bounds})"


@dataclasses.dataclass(frozen=True)
class ValueRange:
    """The inclusive range ``[lower, upper]`` a dynamic size may take (``upper`` may be inf)."""

    lower: int
    upper: float

    def __repr__(self):
        return f"VR[{self.lower}, {'int_oo' if self.upper == math.inf else self.upper}]"


class ShapesCollection:
    """Build ``dynamic_shapes`` by tensor instead of by argument name (``torch.export.ShapesCollection``).

    Examples
    --------
    >>> import lucid
    >>> from lucid.export import Dim, ShapesCollection
    >>> x = lucid.zeros(4, 3)
    >>> sc = ShapesCollection()
    >>> sc[x] = {0: Dim("batch")}
    >>> sc.dynamic_shapes(None, (x,))
    ({0: Dim('batch')},)
    """

    def __init__(self):
        self._shapes = {}  # id(tensor) -> (tensor, spec)

    def __setitem__(self, t, spec):
        self._shapes[id(t)] = (t, spec)

    def __getitem__(self, t):
        return self._shapes[id(t)][1]

    def __len__(self):
        return len(self._shapes)

    def dynamic_shapes(self, m, args, kwargs=None):
        """The ``dynamic_shapes`` for ``(args, kwargs)``: a tuple (one spec or None per positional
        input), or, with keyword inputs, a dict by ``m.forward``'s parameter names."""
        spec = lambda v: self._shapes[id(v)][1] if id(v) in self._shapes else None  # noqa: E731
        if not kwargs:
            return tuple(spec(a) for a in args)
        import inspect

        bound = inspect.signature(type(m).forward).bind(m, *args, **kwargs)
        return {k: spec(v) for k, v in list(bound.arguments.items())[1:]}


@dataclasses.dataclass
class InputGuard:
    """What ``ep.module()`` checks about one user input. See NOTE [Export guards].

    ``kind`` is ``"tensor"`` (``dtype`` name and ``dims``: an int for a static size, a str
    naming a ``range_constraints`` symbol for a dynamic one) or ``"constant"`` (``value``).
    """

    name: str
    kind: str
    dtype: str | None = None
    dims: list | None = None
    value: object = None
    optional: bool = False  # a constant the example left to its default: a call may omit it too


# ------------------------------------------------------------------ dynamic_shapes -> per-dim specs
def normalize_dynamic_shapes(dynamic_shapes, names, values):
    """``{input name: {dim: Dim | _DimHint | int | None}}`` from any accepted form."""
    if dynamic_shapes is None:
        return {}
    if isinstance(dynamic_shapes, ShapesCollection):
        dynamic_shapes = {n: dynamic_shapes._shapes[id(v)][1] for n, v in zip(names, values)
                          if id(v) in dynamic_shapes._shapes}
    if isinstance(dynamic_shapes, (tuple, list)):
        if len(dynamic_shapes) > len(names):
            raise ValueError(f"export: dynamic_shapes has {len(dynamic_shapes)} entries for {len(names)} inputs")
        dynamic_shapes = dict(zip(names, dynamic_shapes))
    if not isinstance(dynamic_shapes, dict):
        raise TypeError(f"export: dynamic_shapes must be a dict, tuple or list, got {type(dynamic_shapes).__name__}")
    unknown = set(dynamic_shapes) - set(names)
    if unknown:
        raise ValueError(f"export: dynamic_shapes names {sorted(unknown)}, which are not inputs of forward {names}")
    out = {}
    for name, spec in dynamic_shapes.items():
        if spec is None:
            continue
        value = values[names.index(name)]
        ndim = getattr(value, "ndim", None)
        if ndim is None:
            raise ValueError(f"export: dynamic_shapes[{name!r}] is given but input {name!r} is not a tensor")
        if isinstance(spec, (tuple, list)):
            if len(spec) != ndim:
                raise ValueError(f"export: dynamic_shapes[{name!r}] has {len(spec)} entries for a {ndim}-d input")
            spec = dict(enumerate(spec))
        if not isinstance(spec, dict):
            raise TypeError(f"export: dynamic_shapes[{name!r}] must be a dict or a tuple per dimension")
        for d in spec:
            if not isinstance(d, int) or not -ndim <= d < ndim:
                raise ValueError(f"export: dynamic_shapes[{name!r}] names dimension {d!r} of a {ndim}-d input")
        out[name] = {d % ndim: s for d, s in spec.items()}
    return out


def check_inputs(guards, range_constraints, args, kwargs):
    """Raise torch's RuntimeError when ``(args, kwargs)`` violates the guards (NOTE [Export guards]);
    returns ``kwargs`` with omitted defaulted constants filled in."""
    names = [g.name for g in guards]
    kwargs = dict(kwargs)
    for g in guards[len(args):]:
        if g.optional and g.name not in kwargs:
            kwargs[g.name] = g.value
    if len(args) > len(names) or any(k not in names[len(args):] for k in kwargs) \
            or len(args) + len(kwargs) != len(names):
        raise RuntimeError(f"Unexpected number of inputs (expected {len(names)}, got {len(args) + len(kwargs)})")
    bound = {}
    for guard, value, path in _paired(guards, args, kwargs):
        if guard.kind == "constant":
            _check_constant(guard, value, path)
            continue
        _check_tensor(guard, value, path, range_constraints, bound)
    return kwargs


class GuardError(RuntimeError, AssertionError):
    """An exported program's input check failed.

    PyTorch 2.13's ``ep.module()`` raises ``AssertionError("Guard failed: ...")`` for a size
    outside what was exported (earlier versions a RuntimeError with the message kept here):
    both ``except`` clauses catch this one.

    Examples
    --------
    >>> import lucid
    >>> class Double(lucid.nn.Module):
    ...     def forward(self, x):
    ...         return x * 2
    >>> ep = lucid.export.export(Double(), (lucid.ones(2, 3),))
    >>> try:
    ...     ep.module()(lucid.ones(3, 3))
    ... except AssertionError as e:
    ...     print(str(e)[:52])
    Expected input at *args[0].shape[0] to be equal to 2
    """


def _paired(guards, args, kwargs):
    for i, guard in enumerate(guards):
        if i < len(args):
            yield guard, args[i], f"*args[{i}]"
        else:
            yield guard, kwargs[guard.name], f"**kwargs[{guard.name!r}]"


def _check_constant(guard, value, path):
    ok = type(value) is type(guard.value) and (value == guard.value or (
        isinstance(value, float) and math.isnan(value) and math.isnan(guard.value)))
    if not ok:
        raise GuardError(f"Expected input at {path} to be equal to {guard.value!r}, but got {value!r}")


def _check_tensor(guard, value, path, range_constraints, bound):
    import lucid

    if not isinstance(value, lucid.Tensor):
        raise GuardError(f"Expected input at {path} to be a tensor, but got {type(value)}")
    shape = tuple(value.shape)
    if len(shape) != len(guard.dims):
        raise GuardError(f"Unexpected number of dimensions in input at {path}.shape "
                           f"(expected {_shape_text(guard.dims)}, got {shape})")
    if str(value.dtype).replace("lucid.", "") != guard.dtype:
        raise GuardError(f"Expected input at {path} to have dtype {guard.dtype}, but got "
                           f"{str(value.dtype).replace('lucid.', '')}")
    for i, (size, d) in enumerate(zip(shape, guard.dims)):
        where = f"{path}.shape[{i}]"
        if isinstance(d, int):
            if size != d:
                raise GuardError(f"Expected input at {where} to be equal to {d}, but got {size}. If you meant "
                                   "for this dimension to be dynamic, please re-export and specify dynamic_shapes "
                                   "(e.g. with Dim.DYNAMIC)")
            continue
        if d in bound and bound[d] != size:
            raise GuardError(f"Expected input at {where} to be equal to {bound[d]}, but got {size}")
        bound[d] = size
        vr = range_constraints[d]
        if size < vr.lower:
            raise GuardError(f"Expected input at {where} to be >= {vr.lower}, but got {size}")
        if size > vr.upper:
            raise GuardError(f"Expected input at {where} to be <= {vr.upper}, but got {size}")


def _shape_text(dims):
    return "(" + ", ".join(str(d) for d in dims) + ("," if len(dims) == 1 else "") + ")"
