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

__all__ = ["Dim", "dims", "ShapesCollection", "ValueRange", "InputGuard", "UserError"]


class UserError(RuntimeError, ValueError):
    """``dynamic_shapes`` or the example inputs break what export was asked to promise
    (torch's ``UserError`` / ``ConstraintViolationError``, both RuntimeErrors; Lucid raised
    ValueError before, so this is both).

    Examples
    --------
    >>> import lucid
    >>> from lucid.export import export, Dim, UserError
    >>> try:
    ...     export(lucid.nn.ReLU(), (lucid.ones(6),), dynamic_shapes={"input": {0: Dim("n", max=4)}})
    ... except UserError as e:
    ...     print(str(e)[:59])
    export: the example input 'input' has size 6 at dimension 0
    """


class UserTypeError(UserError, TypeError):
    """A ``dynamic_shapes`` entry of the wrong type (a TypeError in Lucid before, torch's
    ``UserError``)."""


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
    ``Dim.STATIC`` (like ``None``) keeps the example's size. ``2*dim``, ``dim + 1`` (increasing
    integer-linear functions of a Dim) mark a dimension whose size follows ``dim``'s; Dims with
    one name are one symbol.

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
    >>> 2 * Dim("n") + 1
    2*n + 1
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

    # A dimension may be an increasing integer-linear function ``a*dim + b`` of a Dim (torch's
    # derived dims): ``2*d``, ``d + 1``. The Dim itself is ``1*d + 0``.
    _root, _a, _b = property(lambda self: self), 1, 0

    def __add__(self, other):
        if type(other) is not int:
            raise NotImplementedError(f"Attempted to add {other} to {self.__name__}, where an integer was expected. "
                                      "(Only increasing linear operations with integer coefficients are supported.)")
        return _DerivedDim(self._root, self._a, self._b + other)

    __radd__ = __add__

    def __sub__(self, other):
        if type(other) is not int:
            raise NotImplementedError(f"Attempted to subtract {other} from {self.__name__}, where an integer was "
                                      "expected. (Only increasing linear operations with integer coefficients are "
                                      "supported.)")
        return _DerivedDim(self._root, self._a, self._b - other)

    def __rsub__(self, other):
        raise NotImplementedError(f"Attempted to negate {self.__name__}. (Only increasing linear operations with "
                                  "integer coefficients are supported.)")

    def __mul__(self, other):
        if type(other) is not int or other <= 0:
            raise NotImplementedError(f"Attempted to multiply {self.__name__} with {other}, where a positive integer "
                                      "was expected. (Only increasing linear operations with integer coefficients "
                                      "are supported.)")
        return _DerivedDim(self._root, self._a * other, self._b * other)

    __rmul__ = __mul__


class _DerivedDim(Dim):
    """``a*root + b`` for a Dim ``root`` (``2*Dim("d")``): its size follows the root's."""

    def __init__(self, root, a, b):
        name = (root.__name__ if a == 1 else f"{a}*{root.__name__}") + (
            f" + {b}" if b > 0 else f" - {-b}" if b < 0 else "")
        self.__name__, self.root = name, root
        self.min, self.max = a * root.min + b, a * root.max + b
        self._derived = (a, b)

    _root = property(lambda self: self.root)
    _a = property(lambda self: self._derived[0])
    _b = property(lambda self: self._derived[1])

    def __repr__(self):
        return self.__name__


def dims(*names, min=None, max=None):
    """One :class:`Dim` per name, all with the same bounds (``torch.export.dims``).

    Examples
    --------
    >>> from lucid.export import dims
    >>> dims("h", "w", max=64)
    (Dim('h', max=64), Dim('w', max=64))
    """
    return tuple(Dim(name, min=min, max=max) for name in names)


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
def normalize_dynamic_shapes(dynamic_shapes, names, values, trees=None, leaves=None):
    """``{input leaf name: {dim: Dim | _DimHint | int | None}}`` from any accepted form; an
    entry for a container input mirrors its structure (NOTE [Container inputs])."""
    from ._inputs import build, leaf_specs

    if dynamic_shapes is None:
        return {}
    trees = trees or {n: {"leaf": n} for n in names}
    leaves = leaves if leaves is not None else dict(zip(names, values))
    if isinstance(dynamic_shapes, ShapesCollection):
        shapes = dynamic_shapes._shapes
        dynamic_shapes = {n: build(trees[n], lambda leaf: shapes[id(leaves[leaf])][1]
                                   if id(leaves[leaf]) in shapes else None) for n in names}
    if isinstance(dynamic_shapes, (tuple, list)):
        if len(dynamic_shapes) > len(names):
            raise UserError(f"export: dynamic_shapes has {len(dynamic_shapes)} entries for {len(names)} inputs")
        dynamic_shapes = dict(zip(names, dynamic_shapes))
    if not isinstance(dynamic_shapes, dict):
        raise UserTypeError(f"export: dynamic_shapes must be a dict, tuple or list, got {type(dynamic_shapes).__name__}")
    unknown = set(dynamic_shapes) - set(names)
    if unknown:
        raise UserError(f"export: dynamic_shapes names {sorted(unknown)}, which are not inputs of forward {names}")
    out = {}
    for top, top_spec in dynamic_shapes.items():
        for name, spec in leaf_specs(trees[top], top_spec, f"dynamic_shapes[{top!r}]"):
            if spec is not None:
                out[name] = _dim_specs(name, spec, leaves[name])
    return out


def _dim_specs(name, spec, value):
    ndim = getattr(value, "ndim", None)
    if ndim is None:
        raise UserError(f"export: dynamic_shapes[{name!r}] is given but input {name!r} is not a tensor")
    if isinstance(spec, (tuple, list)):
        if len(spec) != ndim:
            raise UserError(f"export: dynamic_shapes[{name!r}] has {len(spec)} entries for a {ndim}-d input")
        spec = dict(enumerate(spec))
    if not isinstance(spec, dict):
        raise UserTypeError(f"export: dynamic_shapes[{name!r}] must be a dict or a tuple per dimension")
    for d in spec:
        if not isinstance(d, int) or not -ndim <= d < ndim:
            raise UserError(f"export: dynamic_shapes[{name!r}] names dimension {d!r} of a {ndim}-d input")
    return {d % ndim: s for d, s in spec.items()}


def check_inputs(guards, range_constraints, args, kwargs, trees=None):
    """Raise torch's RuntimeError when ``(args, kwargs)`` violates the guards (NOTE [Export guards]);
    returns the input leaves' values in guard order, the graph's user placeholders (NOTE
    [Container inputs]), omitted defaulted constants filled in."""
    from ._inputs import flatten_call

    trees = trees or [[g.name, {"leaf": g.name}] for g in guards]
    names = [n for n, _ in trees]
    by_leaf = {g.name: g for g in guards}
    kwargs = dict(kwargs)
    for name, tree in trees[len(args):]:
        g = by_leaf.get(tree.get("leaf"))
        if g is not None and g.optional and name not in kwargs:
            kwargs[name] = g.value
    if len(args) > len(names) or any(k not in names[len(args):] for k in kwargs) \
            or len(args) + len(kwargs) != len(names):
        raise RuntimeError(f"Unexpected number of inputs (expected {len(names)}, got {len(args) + len(kwargs)})")
    values, bound = {}, {}
    for i, (name, tree) in enumerate(trees):
        value, path = (args[i], f"*args[{i}]") if i < len(args) else (kwargs[name], f"**kwargs[{name!r}]")
        for leaf, v, where in flatten_call(tree, value, path):
            guard = by_leaf[leaf]
            if guard.kind == "constant":
                _check_constant(guard, v, where)
            else:
                _check_tensor(guard, v, where, range_constraints, bound)
            values[leaf] = v
    return [values[g.name] for g in guards]


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
        sym, a, b = (d, 1, 0) if isinstance(d, str) else d  # [symbol, a, b]: a derived Dim's a*symbol + b
        if sym in bound and a * bound[sym] + b != size:
            raise GuardError(f"Expected input at {where} to be equal to {a * bound[sym] + b}, but got {size}")
        value, rem = divmod(size - b, a)
        if rem:
            raise GuardError(f"Expected input at {where} to be of the form {_affine_text(sym, a, b)}, "
                             f"but got {size}")
        bound[sym] = value
        vr = range_constraints[sym]
        if value < vr.lower:
            raise GuardError(f"Expected input at {where} to be >= {a * vr.lower + b}, but got {size}")
        if value > vr.upper:
            raise GuardError(f"Expected input at {where} to be <= {a * vr.upper + b}, but got {size}")


def _affine_text(sym, a, b):
    return (sym if a == 1 else f"{a}*{sym}") + (f" + {b}" if b > 0 else f" - {-b}" if b < 0 else "")


def _shape_text(dims):
    text = [d if isinstance(d, (int, str)) else _affine_text(*d) for d in dims]
    return "(" + ", ".join(str(d) for d in text) + ("," if len(dims) == 1 else "") + ")"
