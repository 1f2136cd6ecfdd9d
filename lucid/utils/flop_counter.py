"""``lucid.utils.flop_counter``: count the FLOPs of matrix products and convolutions, per module
(PyTorch's ``torch.utils.flop_counter``).

NOTE [FLOP counting]
While a :class:`FlopCounterMode` is open, the primitives that have a FLOP formula (``matmul``,
``linear``, ``einsum``, ``conv`` and the two convolutions of its backward, ``conv_transpose``
and ``conv_weight``) run wrapped: each call adds its count to every module running at the time
(:class:`~lucid.utils.module_tracker.ModuleTracker`, forward and backward) and to
``"Global"``. The wrapper sits both in the primitive (the path of ``bind``: eager ops,
transforms, a backward that builds a graph) and in the array namespace backward rules call
directly, so a backward is counted once. The formulas are PyTorch's: a product of an (m, k)
and a (k, n) matrix is ``2 m k n`` (bias additions are not counted), a convolution
``2 N prod(out spatial) C_out C_in/groups prod(kernel)``, and each of its two backward
products the same again. Leaving the mode restores the primitives, so counting costs nothing
when off. On the meta device ops run without data (NOTE [Meta device]), so a model's FLOPs
can be counted without computing it.
"""
from __future__ import annotations

import math
from collections import defaultdict

from .module_tracker import ModuleTracker

__all__ = ["FlopCounterMode", "register_flop_formula"]

_FORMULAS = {}


def _name(target) -> str:
    """A primitive's name from the primitive, its name, or ``"lucid.<name>"``."""
    name = getattr(target, "name", target)
    if not isinstance(name, str):
        raise TypeError(f"register_flop_formula: expected a primitive or its name, got {target!r}")
    return name[len("lucid."):] if name.startswith("lucid.") else name


def register_flop_formula(targets, get_raw=False):
    """Decorator registering ``formula(*input_shapes, out_shape=..., **params) -> int`` as the
    FLOP count of the primitives ``targets`` (a primitive, its name, or a list of them).

    With ``get_raw=True`` the formula gets the arrays themselves instead of their shapes.

    Examples
    --------
    >>> import lucid
    >>> from lucid.utils.flop_counter import FlopCounterMode, register_flop_formula
    >>> @register_flop_formula("exp")
    ... def exp_flop(x_shape, out_shape=None, **params):
    ...     return lucid.Size(x_shape).numel()
    >>> with FlopCounterMode(display=False) as counter:
    ...     _ = lucid.ones(3, 4).exp()
    >>> counter.get_total_flops()
    12
    >>> del lucid.utils.flop_counter._FORMULAS["exp"]
    """
    targets = targets if isinstance(targets, (list, tuple)) else [targets]

    def register(formula):
        wrapped = formula if get_raw else _shape_formula(formula)
        for target in targets:
            _FORMULAS[_name(target)] = wrapped
        return formula

    return register


def _shape_formula(formula):
    def on_arrays(*arrays, out=None, **params):
        shapes = [tuple(a.shape) if hasattr(a, "shape") else a for a in arrays]
        return formula(*shapes, out_shape=None if out is None else tuple(out.shape), **params)

    return on_arrays


# ------------------------------------------------------------------------------ formulas

@register_flop_formula("matmul")
def matmul_flop(a_shape, b_shape, out_shape=None, **params) -> int:
    """``2 * (elements of the product) * k``: every output element is k multiply-adds."""
    return 2 * math.prod(out_shape) * a_shape[-1]


@register_flop_formula("linear")
def linear_flop(x_shape, w_shape, *bias_shape, out_shape=None, **params) -> int:
    """``x @ w.T``: ``2 * (elements of the output) * in_features`` (the bias is not counted)."""
    return 2 * math.prod(out_shape) * w_shape[1]


@register_flop_formula("conv")
def conv_flop(x_shape, w_shape, *bias_shape, out_shape=None, **params) -> int:
    """``2 N prod(out spatial) C_out C_in/groups prod(kernel)`` (``w`` is (C_out, C_in/groups, *k))."""
    return 2 * x_shape[0] * math.prod(out_shape[2:]) * math.prod(w_shape)


@register_flop_formula("conv_transpose")
def conv_transpose_flop(x_shape, w_shape, out_shape=None, **params) -> int:
    """A transposed convolution counts over its *input* positions (``w`` is (C_in, C_out/groups, *k))."""
    return 2 * x_shape[0] * math.prod(x_shape[2:]) * math.prod(w_shape)


@register_flop_formula("conv_weight")
def conv_weight_flop(x_shape, g_shape, out_shape=None, **params) -> int:
    """A weight gradient: the forward convolution's count (``out`` is the weight's shape)."""
    return 2 * x_shape[0] * math.prod(g_shape[2:]) * math.prod(out_shape)


@register_flop_formula("einsum")
def einsum_flop(*shapes, out_shape=None, subscripts=None, **params) -> int:
    """Two or more operands: ``2 * (elements of the output) * prod(summed-over sizes)``."""
    if len(shapes) < 2 or subscripts is None:
        return 0
    spec = subscripts.replace(" ", "")
    inputs, _, output = spec.partition("->")
    terms = inputs.split(",")
    sizes = {}
    for term, shape in zip(terms, shapes):
        head, dots, tail = term.partition("...")
        for label, n in zip(head, shape):
            sizes[label] = max(sizes.get(label, 1), n)
        for label, n in zip(tail[::-1], shape[::-1]):
            sizes[label] = max(sizes.get(label, 1), n)
    if not _:  # implicit output: the labels seen once
        labels = "".join(terms).replace(".", "")
        output = "".join(sorted(c for c in set(labels) if labels.count(c) == 1))
    summed = set(sizes) - set(output)
    return 2 * math.prod(out_shape) * math.prod(sizes[c] for c in summed)


# ----------------------------------------------------------------------------- the mode

def _suffix(number) -> str:
    index = max(0, min(len(_SUFFIXES) - 1, (len(str(number)) - 2) // 3))
    return _SUFFIXES[index]


_SUFFIXES = ["", "K", "M", "B", "T"]


def _with_suffix(number, suffix) -> str:
    return f"{number / 1000 ** _SUFFIXES.index(suffix):.3f}{suffix}"


def _percent(num, denom) -> str:
    return "0%" if denom == 0 else f"{num / denom:.2%}"


def _tabulate(rows, header):
    """PyTorch's table (tabulate's "simple" format: a column is at least its header plus 2 wide),
    the first column left-aligned, the rest right."""
    widths = [max([len(header[i]) + 2] + [len(str(r[i])) for r in rows]) for i in range(len(header))]

    def line(cells):
        return "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return "\n".join([line(header), "  ".join("-" * w for w in widths)] + [line(r) for r in rows])


class FlopCounterMode:
    """Count the FLOPs run inside the block, per module and per op (NOTE [FLOP counting]).

    Parameters
    ----------
    mods : Module or list of Module, optional
        Accepted and ignored, with PyTorch's warning (modules are tracked without it).
    depth : int
        How deep the printed table goes into the module hierarchy.
    display : bool
        Print the table when the block ends.
    custom_mapping : dict, optional
        ``{primitive or name: formula(*input_shapes, out_shape=..., **params)}`` for this
        counter only (see :func:`register_flop_formula`).

    Examples
    --------
    >>> import lucid
    >>> from lucid.utils.flop_counter import FlopCounterMode
    >>> with lucid.device("meta"):  # shapes only: nothing is computed
    ...     model = lucid.nn.Sequential(lucid.nn.Linear(8, 4), lucid.nn.ReLU(), lucid.nn.Linear(4, 2))
    >>> with FlopCounterMode(display=False) as counter:
    ...     _ = model(lucid.ones(16, 8, device="meta")).sum()
    >>> counter.get_total_flops()  # 2*16*8*4 + 2*16*4*2
    1280
    >>> counter.get_flop_counts()["Sequential.0"]
    {'lucid.linear': 1024}
    """

    def __init__(self, mods=None, depth=2, display=True, custom_mapping=None):
        if mods is not None:
            import warnings

            warnings.warn("mods argument is not needed anymore, you can stop passing it", stacklevel=2)
        self.flop_counts = defaultdict(lambda: defaultdict(int))
        self.depth = depth
        self.display = display
        self.flop_registry = dict(_FORMULAS)
        for target, formula in (custom_mapping or {}).items():
            self.flop_registry[_name(target)] = (formula if getattr(formula, "_get_raw", False)
                                                 else _shape_formula(formula))
        self.mod_tracker = ModuleTracker()
        self._restore = None

    def get_total_flops(self) -> int:
        """All FLOPs counted in the block."""
        return sum(self.flop_counts["Global"].values())

    def get_flop_counts(self) -> dict:
        """``{module name: {op name: FLOPs}}``, with ``"Global"`` for everything."""
        return {k: dict(v) for k, v in self.flop_counts.items()}

    def get_table(self, depth=None) -> str:
        """The counts as PyTorch prints them, modules down to ``depth`` (default: the mode's)."""
        depth = self.depth if depth is None else depth
        depth = 999999 if depth is None else depth
        total = self.get_total_flops()
        suffix = _suffix(total)
        subsumed = False

        def rows_of(name, level):
            nonlocal subsumed
            flops = sum(self.flop_counts[name].values())
            subsumed |= flops >= total
            pad = " " * level
            rows = [[pad + name, _with_suffix(flops, suffix), _percent(flops, total)]]
            for op, n in self.flop_counts[name].items():
                rows.append([pad + " - " + str(op), _with_suffix(n, suffix), _percent(n, total)])
            return rows

        rows = []
        for name in sorted(self.flop_counts):
            if name == "Global" or name.count(".") + 1 > depth:
                continue
            rows.extend(rows_of(name, name.count(".")))
        if "Global" in self.flop_counts and not subsumed:  # FLOPs outside every module: show them
            for row in rows:
                row[0] = " " + row[0]
            rows = rows_of("Global", 0) + rows
        if not rows:
            rows = [["Global", "0", "0%"]]
        return _tabulate(rows, ["Module", "FLOP", "% Total"])

    def _count(self, name, formula, arrays, params, out):
        flops = int(formula(*arrays, out=out, **params))
        key = "lucid." + name
        for parent in set(self.mod_tracker.parents):
            self.flop_counts[parent][key] += flops

    def _counted(self, name, formula, impl):
        def counted(*arrays, **params):
            out = impl(*arrays, **params)
            self._count(name, formula, arrays, params, out)
            return out

        return counted

    def __enter__(self):
        from .._core.primitive import AN, REGISTRY

        if self._restore is not None:
            raise RuntimeError("FlopCounterMode: this counter is already open (it is not reentrant)")
        self.flop_counts.clear()
        self.mod_tracker.__enter__()
        restore = []
        for name, formula in self.flop_registry.items():
            prim = REGISTRY.get(name)
            if prim is None:
                continue
            restore.append((prim, prim.impl, getattr(AN, name)))
            prim.impl = self._counted(name, formula, prim.impl)
            setattr(AN, name, self._counted(name, formula, getattr(AN, name)))
        self._restore = restore
        return self

    def __exit__(self, *exc):
        from .._core.primitive import AN

        for prim, impl, array_fn in reversed(self._restore or []):
            prim.impl = impl
            setattr(AN, prim.name, array_fn)
        self._restore = None
        self.mod_tracker.__exit__()
        if self.display:
            print(self.get_table(self.depth))
        return False
