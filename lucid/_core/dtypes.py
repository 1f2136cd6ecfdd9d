"""Dtypes and PyTorch's type-promotion rule, in one table.

NOTE [Dtype objects]
Arrays carry NumPy dtypes; users see :class:`dtype` objects (``lucid.float32``), one
singleton per NumPy dtype. A ``lucid.dtype`` exposes its NumPy dtype as ``.dtype``, which
NumPy accepts anywhere a dtype is expected (``np.zeros(2, lucid.float32)``), compares and
hashes equal to it (and to its name: ``lucid.float32 == "float32"``), and carries PyTorch's
attributes (``is_floating_point``, ``is_complex``, ``is_signed``, ``itemsize``). Internally
ops keep working on NumPy dtypes (``to_dtype`` returns one), so the eager hot path never
converts; only ``Tensor.dtype`` maps the array's dtype to its singleton (one dict lookup).
"""
from __future__ import annotations

import builtins

import numpy as np


class dtype:
    """A tensor element type, ``lucid.float32``; equal to the NumPy dtype of the same name.

    Examples
    --------
    >>> import lucid, numpy as np
    >>> lucid.float32, lucid.float32.itemsize, lucid.float32.is_floating_point
    (lucid.float32, 4, True)
    >>> lucid.float32 == np.float32, lucid.float32 == "float32"
    (True, True)
    """

    __slots__ = ("dtype", "name", "kind", "itemsize", "is_floating_point", "is_complex", "is_signed")

    def __init__(self, np_dtype):
        d = np.dtype(np_dtype)
        self.dtype, self.name, self.kind, self.itemsize = d, d.name, kind_of(d), d.itemsize
        self.is_floating_point = self.kind == "f"
        self.is_complex = self.kind == "c"
        self.is_signed = self.kind in "fic"

    def __repr__(self):
        return f"lucid.{self.name}"

    __str__ = __repr__

    def __eq__(self, other):
        if other.__class__ is dtype:
            return other is self
        if isinstance(other, dtype):  # a quantized dtype equals only itself
            return False
        try:
            return bool(self.dtype == other)
        except (TypeError, ValueError):  # "bfloat16" before ml_dtypes registered the name
            return self.name == other if other.__class__ is str else False

    def __hash__(self):
        return hash(self.dtype)

    def __reduce__(self):
        return (as_lucid, (self.name,))

    def __getattr__(self, name):
        # The rest of NumPy's dtype surface (``type``, ``char``, ``str`` ...).
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.dtype, name)

    def to_real(self):
        """The real dtype of the same precision (``complex64 -> float32``; bfloat16 is real)."""
        return as_lucid({"c": np.float32 if self.itemsize == 8 else np.float64}.get(self.kind, self.dtype))

    def to_complex(self):
        """The complex dtype of the same precision (``float32 -> complex64``)."""
        if self.kind == "c":
            return self
        if self.kind != "f":
            raise TypeError(f"to_complex: {self} is not a floating point dtype")
        return as_lucid(np.complex128 if self.itemsize == 8 else np.complex64)


_Dtype = dtype


# NOTE [bfloat16]
# NumPy has no bfloat16; ``ml_dtypes`` (JAX's dtype package, the ``bfloat16`` extra) adds one as
# a NumPy extension type, so bfloat16 tensors are ordinary arrays of 2-byte elements. Two things
# make it unlike NumPy's own floats, and Lucid hides both:
# * its NumPy ``kind`` is "V" (void): every dtype test here goes through ``kind_of`` (and the
#   lucid.dtype object's ``kind`` is "f"), so it is floating point for promotion, grad and ops;
# * NumPy computes on it through ml_dtypes' element-wise loops (no BLAS, no float32
#   accumulation): as PyTorch does on the CPU, every op that computes runs in float32 on the
#   upcast operands and rounds its floating results back to bfloat16 (``lucid/_bfloat16.py``,
#   one hook in bind's slow branch, switched on with the type; views and casts run as they are).
# ml_dtypes is loaded on the first use of ``lucid.bfloat16`` (never by ``import lucid``).
#
# NOTE [float8]
# ``lucid.float8_e4m3fn``, ``float8_e5m2`` (OCP FP8, as on H100s) and their ``fnuz`` variants
# (no negative zero, no infinity, as on MI300s) are ml_dtypes types too, enabled on first use
# the same way and computing the same way (float32 between two casts, one rounding). A cast to
# them rounds to nearest even as ml_dtypes does: a value past the largest finite one becomes inf
# (e5m2) or NaN (the others), which JAX does too; PyTorch 2.13's CPU cast saturates e4m3fn to
# +-448 instead (its e5m2 and fnuz casts agree with ml_dtypes), so scale first, as FP8 code
# does (``(x / scale).clamp(-448, 448).to(float8_e4m3fn)``). Promotion: a float8 dtype meeting
# another floating or complex dtype raises, as PyTorch (where JAX would widen); it wins over
# bool and integer operands, as every floating dtype does and as JAX does (PyTorch refuses
# those too, but its float8 has almost no kernels to refuse them in: ops that count or index
# inside, masked means, scatter reductions, need it here). Weak operands -- Python numbers,
# 0-dim tensors -- keep it. PyTorch's CPU lacks most kernels for float8 (``f8 + f8`` raises
# there); every op works here, rounded once, as JAX computes them. README "Differences from
# PyTorch" lists all three. ``float8_e8m0fnu`` and ``float4_e2m1fn_x2`` are not provided (PyTorch's
# e8m0 rounds 0 to 2**-127 where ml_dtypes gives NaN; float4 packs two values per byte).
_ML_FLOAT_NAMES = ("bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
BF16 = None  # the NumPy dtype, once enabled
ML_FLOATS = set()  # the NumPy dtypes of the ml_dtypes floats enabled so far (bfloat16, float8)
FLOAT8 = set()  # those of them that are float8 (NOTE [float8])
_ML_ENABLED = {}  # name -> lucid dtype


def kind_of(d) -> str:
    """``d.kind`` of a NumPy dtype, "f" for bfloat16 and float8 (whose NumPy kind is "V")."""
    k = d.kind
    return "f" if k == "V" and d in ML_FLOATS else k


def enable_ml_float(name):
    """Load ml_dtypes and register ``lucid.<name>``, bfloat16 or a float8 type (idempotent);
    NOTE [bfloat16], NOTE [float8]."""
    global BF16
    have = _ML_ENABLED.get(name)
    if have is not None:
        return have
    try:
        import ml_dtypes
    except ImportError:
        raise AttributeError(
            f"module 'lucid' has no attribute {name!r}: it needs the ml_dtypes package "
            f"(pip install 'lucid[bfloat16]'); NumPy alone has no {name} type") from None
    d = np.dtype(getattr(ml_dtypes, name))
    _SUPPORTED.add(d)
    ML_FLOATS.add(d)  # before as_lucid: the dtype object reads its kind through kind_of
    if name == "bfloat16":
        BF16 = d
    else:
        FLOAT8.add(d)
    have = _ML_ENABLED[name] = globals()[name] = as_lucid(d)
    from .. import _bfloat16  # the float32-compute hook in bind (outside _core: it binds ops)

    _bfloat16.install()
    return have


def enable_bfloat16():
    """Load ml_dtypes and register ``lucid.bfloat16`` (idempotent); NOTE [bfloat16]."""
    return enable_ml_float("bfloat16")


def np_finfo(d):
    """``np.finfo(d)``, and ml_dtypes' for bfloat16 and float8 (which ``np.finfo`` refuses)."""
    d = np.dtype(d)
    if d in ML_FLOATS:  # (float8_e5m2's NumPy kind is "f", the others' "V")
        import ml_dtypes

        return ml_dtypes.finfo(d)
    return np.finfo(d)


def supported(d) -> bool:
    """Whether arrays of the NumPy dtype ``d`` can back a tensor (an ml_dtypes bfloat16 or
    float8 array met before its lucid dtype is enabled enables it)."""
    if d in _SUPPORTED:
        return True
    name = ml_float_name(d.type)
    if name is not None:
        enable_ml_float(name)
        return True
    return False


def ml_float_name(d):
    """The name of the ml_dtypes float ``d`` names (a string such as "torch.float8_e5m2", or
    ml_dtypes' type), or None."""
    if d.__class__ is str:
        name = d.rpartition(".")[2] if d.startswith(("torch.", "lucid.")) else d
        return name if name in _ML_FLOAT_NAMES else None
    name = getattr(d, "__name__", None)
    if name in _ML_FLOAT_NAMES and getattr(d, "__module__", "").startswith("ml_dtypes"):
        return name
    return None


# NOTE [Quantized dtypes]
# ``lucid.qint8``/``quint8``/``qint32`` (PyTorch's quantized element types) are ``dtype``
# instances of a subclass with no NumPy dtype: no array ever carries one (a quantized tensor
# stores its integers in an int8/uint8/int32 tensor, NOTE [Quantized tensors] in
# ``_core/quantized.py``), so the eager path and ``Tensor.dtype`` never see them. Each
# equals only itself (``qint8 != int8``), and NumPy cannot take one for a dtype.
class _QuantizedDtype(dtype):
    """A quantized element type; ``storage`` is the NumPy dtype of its integer representation."""

    __slots__ = ("storage",)

    def __init__(self, name, storage):
        d = np.dtype(storage)
        self.name, self.kind, self.itemsize, self.storage = name, "q", d.itemsize, d
        self.is_floating_point = self.is_complex = False

    @property
    def is_signed(self):
        raise RuntimeError("is_signed: isSignedType not supported for quantized types")

    def __eq__(self, other):
        return other is self

    def __hash__(self):
        return hash(("quantized", self.name))

    def __reduce__(self):
        return (_quantized_dtype, (self.name,))

    def __getattr__(self, name):
        raise AttributeError(f"'lucid.dtype' object has no attribute {name!r}")

    def to_real(self):
        return self

    def to_complex(self):
        raise TypeError(f"to_complex: {self} is not a floating point dtype")


qint8 = _QuantizedDtype("qint8", np.int8)
quint8 = _QuantizedDtype("quint8", np.uint8)
qint32 = _QuantizedDtype("qint32", np.int32)
_QUANTIZED = {d.name: d for d in (qint8, quint8, qint32)}


def _quantized_dtype(name):
    return _QUANTIZED[name]


class _DtypeTable(dict):
    """NumPy dtype -> its lucid singleton, made on first use (covers any NumPy dtype)."""

    def __missing__(self, key):
        d = np.dtype(key)
        if d not in self:
            dict.__setitem__(self, d, dtype(d))
        self[key] = v = dict.__getitem__(self, d)
        return v


_LUCID = _DtypeTable()


def as_lucid(d) -> dtype:
    """The :class:`dtype` singleton for a NumPy dtype, type or name."""
    if d.__class__ is dtype or d.__class__ is _QuantizedDtype:
        return d
    return _LUCID[d]


float16 = half = as_lucid("float16")
float32 = float = as_lucid("float32")
float64 = double = as_lucid("float64")
int8 = as_lucid("int8")
int16 = short = as_lucid("int16")
int32 = int = as_lucid("int32")
int64 = long = as_lucid("int64")
uint8 = as_lucid("uint8")
uint16 = as_lucid("uint16")
uint32 = as_lucid("uint32")
uint64 = as_lucid("uint64")
bool_ = as_lucid("bool")
complex64 = cfloat = as_lucid("complex64")
complex128 = cdouble = as_lucid("complex128")

# NumPy dtypes: what arrays carry and what ops compare against internally.
_SUPPORTED = {d.dtype for d in (float16, float32, float64, int8, int16, int32, int64, uint8, uint16, uint32,
                                uint64, bool_, complex64, complex128)}
# PyTorch's "shell" unsigned dtypes: no promotion with another non-float dtype.
# See NOTE [Unsigned dtypes]
_BAREBONES = frozenset(d.dtype for d in (uint16, uint32, uint64))

_default_float = float32


def get_default_dtype() -> dtype:
    """The dtype Python floats become (float32 unless changed).

    Examples
    --------
    >>> import lucid
    >>> lucid.get_default_dtype()
    lucid.float32
    """
    return _default_float


def set_default_dtype(d) -> None:
    """Set the dtype Python floats and ``float``-producing ops default to.

    Only float16, float32 and float64 are accepted (PyTorch also accepts its complex
    defaults' partners implicitly: complex Python numbers follow the float default).
    """
    global _default_float
    try:
        nd = to_dtype(d) if ml_float_name(d) is not None else np.dtype(d)
    except TypeError:
        raise TypeError(f"set_default_dtype: expected a floating dtype, got {d!r}") from None
    if kind_of(nd) != "f" or nd not in _SUPPORTED or nd in FLOAT8:
        raise TypeError(f"set_default_dtype: expected a floating dtype (float16, bfloat16, float32, float64), "
                        f"got {d}")
    _default_float = as_lucid(nd)


def to_dtype(dtype) -> np.dtype:
    """Normalise ``dtype`` (lucid/NumPy dtype, type, or string) to a supported dtype."""
    if dtype is None:
        return None
    if dtype is builtins.bool:
        return bool_.dtype
    if dtype is builtins.float:
        return float64.dtype
    if dtype is builtins.int:
        return int64.dtype
    if dtype is builtins.complex:
        return complex128.dtype
    if dtype.__class__ is _Dtype:
        return dtype.dtype
    if dtype.__class__ is _QuantizedDtype:
        raise TypeError(f"dtype {dtype} is a quantized dtype: make quantized tensors with "
                        "lucid.quantize_per_tensor or lucid.quantize_per_channel")
    name = ml_float_name(dtype)
    if name is not None:  # "bfloat16", "torch.float8_e4m3fn", ml_dtypes' types: NOTE [float8]
        return enable_ml_float(name).dtype
    d = np.dtype(dtype)
    if d not in _SUPPORTED:
        name = ml_float_name(d.type)
        if name is not None:  # an ml_dtypes array met first
            return enable_ml_float(name).dtype
        raise TypeError(f"dtype {d} is not supported by lucid")
    return d


def category(dtype: np.dtype) -> int:
    """0 bool, 1 integer, 2 floating, 3 complex: the order of PyTorch's promotion categories."""
    k = dtype.kind
    return 0 if k == "b" else 1 if k in "iu" else 2 if k == "f" or kind_of(dtype) == "f" else 3


def is_floating(dtype: np.dtype) -> bool:
    return dtype.kind == "f" or kind_of(dtype) == "f"


def is_differentiable(dtype: np.dtype) -> bool:
    return dtype.kind in "fc" or kind_of(dtype) == "f"


def _promote_np(a, b):
    """``np.promote_types`` with PyTorch's answers for bfloat16 (bfloat16 + float16 is float32,
    which ml_dtypes refuses); NOTE [bfloat16]."""
    if BF16 is not None and (a is BF16 or b is BF16) and a is not b:
        other = b if a is BF16 else a
        if other.kind == "f" and other.itemsize == 2:
            return np.dtype(np.float32)
        if other.kind == "c":
            return other
        if other.kind != "f":  # an integer or bool of the same group: the float wins
            return BF16
    return np.promote_types(a, b)


_SCALAR_CATEGORY = {builtins.bool: 0, builtins.int: 1, builtins.float: 2, builtins.complex: 3}


def scalar_category(value) -> int:
    """Category of a Python scalar (bool, int, float, complex); -1 for anything else."""
    return _SCALAR_CATEGORY.get(type(value), -1)


# NOTE [Type promotion]
# PyTorch's rule, which Lucid follows: operands fall in three priority groups —
# tensors with dims, zero-dim tensors, Python scalars. The result category (bool <
# int < float < complex) is the highest over all operands; within the winning
# category, the dtype comes from the highest-priority group that reaches it, and a
# Python scalar that alone reaches it yields the default dtype (float32, int64;
# complex64, or complex128 when the default float is float64).
# Complex keeps the *width* of a higher-priority float (c10's combine_categories):
# float64 tensor + complex64 0-dim tensor or 1j -> complex128; float32 tensor +
# complex128 0-dim -> complex64; within one group float64 + complex64 -> complex128
# and int + complex64 -> complex64 (NumPy would widen to complex128).
# NumPy differs (int64 + float16 -> float64; int / int -> float64), so binary ops
# call ``result_type`` instead of trusting NumPy.
def _complex_of(dt):
    """The complex dtype as wide as the floating dtype ``dt`` (float16 -> complex64)."""
    return complex128 if dt == float64 else complex64


def default_complex():
    """The dtype Python complex scalars become: complex64, complex128 if the default float is float64."""
    return complex128 if _default_float == float64 else complex64


# NOTE [Unsigned dtypes]
# uint16, uint32 and uint64 are PyTorch's "shell" dtypes (2.3+): a dtype promotes with itself
# and with any floating dtype (the float wins), and with nothing else — bool, the other
# integers, uint8 and complex raise RuntimeError (uint64 has no exact signed partner, and
# PyTorch would not pick one). Weak operands never promote: ``u16 + 3``, ``u16 * True`` and
# ``u16 + tensor(3)`` (a 0-d int64) stay uint16, ``u16 * 1j`` and ``u16 + tensor(1j)`` are
# complex64; but a bool tensor meeting a weaker uint16 operand raises, as PyTorch's
# combine_categories promotes a bool with whatever it meets. Lucid follows that table
# exactly; unlike PyTorch (which lacks most kernels for them), every integer op works.
def _barebones_clash(a, b, op):
    """Raise if ``a`` and ``b`` (NumPy dtypes) are a pair NOTE [Unsigned dtypes] refuses."""
    if a != b and (a in _BAREBONES or b in _BAREBONES) and a.kind != "f" and b.kind != "f":
        raise RuntimeError(f"{op}: promotion for uint16, uint32, uint64 types is not supported, "
                           f"attempted to promote {as_lucid(a)} and {as_lucid(b)}")


def _float8_clash(a, b, op):
    """Raise if ``a`` and ``b`` (NumPy dtypes, one of them float8) are two different floating or
    complex dtypes: NOTE [float8]."""
    if a != b and kind_of(a) in "fc" and kind_of(b) in "fc":
        raise RuntimeError(f"{op}: promotion for float8 types is not supported, attempted to promote "
                           f"{as_lucid(a)} and {as_lucid(b)}")


def _same_group(cur, cat, dt):
    """Combine two operands of one priority group (PyTorch's promoteTypes)."""
    if dt is not cur[1] and (dt in _BAREBONES or cur[1] in _BAREBONES):
        _barebones_clash(cur[1], dt, "result_type")
    if FLOAT8 and dt is not cur[1] and dt is not None and cur[1] is not None and (dt in FLOAT8 or cur[1] in FLOAT8):
        _float8_clash(cur[1], dt, "result_type")
    if cat > cur[0]:
        if cat == 3 and cur[0] == 2 and cur[1] is not None and dt is not None:
            return (3, _promote_np(cur[1], dt))
        return (cat, dt)
    if cat == cur[0] and dt is not None and cur[1] is not None:
        return (cat, _promote_np(cur[1], dt))
    if cat == 2 and cur[0] == 3 and dt is not None and cur[1] is not None:
        return (3, _promote_np(cur[1], dt))
    return cur


def result_type(*operands) -> np.dtype:
    """PyTorch-style promoted dtype of tensors (objects with ``dtype``/``ndim``) and scalars."""
    best = [None, None, None]  # per group: (category, dtype)
    for op in operands:
        dt = getattr(op, "dtype", None)
        if dt.__class__ is _Dtype:
            dt = dt.dtype
        elif dt.__class__ is _QuantizedDtype:  # See NOTE [Quantized tensors]
            raise NotImplementedError(f"result_type: {dt} tensors are not supported by dense ops; "
                                      "call .dequantize() first")
        if dt is None:
            cat = scalar_category(op)
            if cat < 0:
                raise TypeError(f"unsupported operand type {type(op).__name__}")
            group, dt = 2, None
        else:
            cat = category(dt)
            group = 0 if op.ndim else 1
        cur = best[group]
        best[group] = (cat, dt) if cur is None else _same_group(cur, cat, dt)
    top = max(b[0] for b in best if b is not None)
    for b in best:
        if b is not None and b[0] == top and b[1] is not None:
            res = b[1]
            break
    else:
        res = (bool_, int64, _default_float, default_complex())[top].dtype
    if top == 1 and best[0] is not None and best[0][0] == 0 and res in _BAREBONES:
        _barebones_clash(best[0][1], res, "result_type")  # bool meets a weaker uint16: NOTE [Unsigned dtypes]
    if top == 3:  # a float of a higher-priority group keeps its width. See NOTE [Type promotion]
        for b in best:
            if b is not None and b[0] == 3 and b[1] is not None:
                break
            if b is not None and b[0] == 2 and b[1] is not None:
                return _complex_of(b[1]).dtype
    return res


# ------------------------------------------------------------- public dtype queries


def _dtype_of(d, op):
    try:
        return to_dtype(d)
    except TypeError as e:
        raise TypeError(f"{op}: {e}") from None


def promote_types(type1, type2) -> dtype:
    """The smallest dtype both ``type1`` and ``type2`` convert to without losing category.

    PyTorch's table, not NumPy's: ``promote_types(int64, float16)`` is ``float16``.

    Examples
    --------
    >>> import lucid
    >>> lucid.promote_types(lucid.int64, lucid.float16)
    lucid.float16
    >>> lucid.promote_types(lucid.uint8, lucid.int8)
    lucid.int16
    """
    a, b = _dtype_of(type1, "promote_types"), _dtype_of(type2, "promote_types")
    _barebones_clash(a, b, "promote_types")
    if a in FLOAT8 or b in FLOAT8:
        _float8_clash(a, b, "promote_types")
    ca, cb = category(a), category(b)
    if ca != cb:
        win, lose = (a, b) if ca > cb else (b, a)
        if win.kind == "c" and lose.kind == "f" and lose.itemsize > win.itemsize // 2:
            return as_lucid(np.promote_types(win, lose))  # complex64 + float64 -> complex128
        return as_lucid(win)
    return as_lucid(_promote_np(a, b))


def public_result_type(tensor1, tensor2) -> dtype:
    """The dtype of ``tensor1 + tensor2`` under NOTE [Type promotion] (tensors or numbers).

    Examples
    --------
    >>> import lucid
    >>> lucid.result_type(lucid.tensor([1, 2]), 2.5)
    lucid.float32
    >>> lucid.result_type(lucid.tensor([1], dtype=lucid.int8), lucid.tensor(300))
    lucid.int8
    """
    return as_lucid(result_type(tensor1, tensor2))


_CAST_ORDER = {"b": 0, "u": 1, "i": 1, "f": 2, "c": 3, "V": 2}  # "V": bfloat16 (NOTE [bfloat16])


def can_cast(from_, to) -> bool:
    """Whether PyTorch's casting rule allows ``from_`` -> ``to`` (no lower category).

    Examples
    --------
    >>> import lucid
    >>> lucid.can_cast(lucid.float64, lucid.int32), lucid.can_cast(lucid.int32, lucid.float16)
    (False, True)
    """
    a, b = _dtype_of(from_, "can_cast"), _dtype_of(to, "can_cast")
    return _CAST_ORDER[a.kind] <= _CAST_ORDER[b.kind]


class finfo:
    """Machine limits of a floating point dtype (PyTorch's attribute names).

    Attributes: ``bits``, ``eps``, ``max``, ``min``, ``tiny`` (= ``smallest_normal``),
    ``resolution``, ``dtype`` (the name, as PyTorch gives it).

    Examples
    --------
    >>> import lucid
    >>> lucid.finfo(lucid.float32).eps
    1.1920928955078125e-07
    >>> lucid.finfo().bits  # the default dtype
    32
    """

    def __init__(self, type=None):
        d = _dtype_of(get_default_dtype() if type is None else type, "finfo")
        if kind_of(d) not in "fc":
            raise TypeError(f"finfo: expected a floating point or complex dtype, got {as_lucid(d)}")
        f = np_finfo(d)
        self.bits = builtins.int(f.bits)
        self.eps, self.max, self.min = builtins.float(f.eps), builtins.float(f.max), builtins.float(f.min)
        self.tiny = self.smallest_normal = builtins.float(f.smallest_normal)
        self.resolution = 10.0 ** -builtins.int(f.precision)
        self.dtype = np.dtype(f.dtype).name

    def __repr__(self):
        return (f"finfo(resolution={self.resolution}, min={self.min:.6g}, max={self.max:.6g}, "
                f"eps={self.eps:.6g}, smallest_normal={self.tiny:.6g}, tiny={self.tiny:.6g}, "
                f"dtype={self.dtype})")


class iinfo:
    """Machine limits of an integer (or bool) dtype: ``bits``, ``min``, ``max``, ``dtype``.

    Examples
    --------
    >>> import lucid
    >>> lucid.iinfo(lucid.int8).min, lucid.iinfo(lucid.uint8).max
    (-128, 255)
    """

    def __init__(self, type):
        d = _dtype_of(type, "iinfo")
        if kind_of(d) not in "iub":
            raise TypeError(f"iinfo: expected an integer dtype, got {as_lucid(d)}")
        if d.kind == "b":
            self.bits, self.min, self.max = 8, 0, 1
        else:
            i = np.iinfo(d)
            self.bits, self.min, self.max = builtins.int(i.bits), builtins.int(i.min), builtins.int(i.max)
        self.dtype = d.name

    def __repr__(self):
        return f"iinfo(min={self.min}, max={self.max}, dtype={self.dtype})"
