"""Random numbers: ``Generator``, ``manual_seed`` and the sampling functions.

Every draw goes through :func:`_draw`, which applies the vmap randomness rules (NOTE
[vmap randomness]); ops that take tensors (``bernoulli``, ``normal`` with tensor
mean/std, ``multinomial``) draw their base noise that way and combine it with the
tensors through ordinary (batchable) lucid ops, so a batched ``p`` batches the result
even under ``randomness="same"``. Random outputs carry no gradient.

NumPy's PCG64 is the bit generator; a :class:`Generator` is a thin, seedable wrapper
around ``numpy.random.Generator`` (``gen._np``).
"""
from __future__ import annotations

import numpy as np

from .._core import backend, dtypes
from .._core.backend import xp
from .._core.grad_mode import STATE
from .._core.tensor import Tensor, _wrap, tensor_method
from ._family import _as_tensor, nondiff
from .creation import _device_of, _laid_out_like, device_arg, dtype_arg, layout_arg, size_arg, sizes_or_keyword
from .linalg import batch_leading

_DEFAULT_SEED = 67280421310721  # PyTorch's default seed
_STATE_BYTES = 37  # PCG64 state (16) + increment (16) + has_uint32 (1) + uinteger (4)


class _StateTypeError(TypeError, RuntimeError):
    """A state that is not a uint8 tensor: PyTorch's TypeError; a RuntimeError here before."""


def _seed_arg(seed):
    """A seed as PyTorch takes it: an int (not a bool, float, str or tensor) in [-2**63, 2**64)."""
    if isinstance(seed, (bool, float, str, Tensor)) or not hasattr(seed, "__index__"):
        raise RuntimeError(f"manual_seed: expected an int seed, got {type(seed).__name__}")
    seed = seed.__index__()
    if not -2 ** 63 <= seed < 2 ** 64:
        raise ValueError(f"manual_seed: seed {seed} overflows (expected -2**63 <= seed < 2**64)")
    return seed


class Generator:
    """A random number generator (PCG64); pass it as ``generator=`` to any sampling function.

    Parameters
    ----------
    device : str
        Only 'cpu' exists.

    Examples
    --------
    >>> import lucid
    >>> g = lucid.Generator().manual_seed(0)
    >>> a = lucid.rand(2, generator=g)
    >>> _ = g.manual_seed(0)
    >>> bool((lucid.rand(2, generator=g) == a).all())
    True
    """

    def __init__(self, device="cpu"):
        device_arg(device, "Generator")
        self.device = backend.CPU  # a device, as PyTorch's (it equals "cpu")
        self.manual_seed(_DEFAULT_SEED)

    def manual_seed(self, seed):
        """Reseed (an int in [-2**63, 2**64); negatives wrap like PyTorch's uint64) and return ``self``."""
        seed = _seed_arg(seed)
        self._seed = seed % 2 ** 64
        self._np = np.random.Generator(np.random.PCG64(self._seed))
        return self

    def seed(self):
        """Reseed from OS entropy and return the new seed."""
        s = int(np.random.SeedSequence().entropy % 2 ** 63)
        self.manual_seed(s)
        return s

    def initial_seed(self):
        """The seed last set by ``manual_seed`` / ``seed``."""
        return self._seed

    def get_state(self):
        """The generator state as a uint8 tensor (restore it with :meth:`set_state`)."""
        st = self._np.bit_generator.state
        raw = (st["state"]["state"].to_bytes(16, "little") + st["state"]["inc"].to_bytes(16, "little")
               + bytes([st["has_uint32"]]) + int(st["uinteger"]).to_bytes(4, "little"))
        return _wrap(np.frombuffer(raw, dtype=np.uint8).copy())

    def set_state(self, new_state):
        """Restore a state returned by :meth:`get_state`; returns ``self``."""
        if not isinstance(new_state, Tensor) or new_state.dtype != np.uint8:
            raise _StateTypeError(f"Generator.set_state: expected a uint8 tensor from get_state(), got "
                                  f"{getattr(new_state, 'dtype', type(new_state).__name__)}")
        arr = new_state._data
        if arr.shape != (_STATE_BYTES,):
            raise RuntimeError(f"Generator.set_state: expected a uint8 tensor of shape ({_STATE_BYTES},) "
                               f"from get_state(), got dtype {arr.dtype} and shape {tuple(arr.shape)}")
        raw = arr.tobytes()
        self._np.bit_generator.state = {
            "bit_generator": "PCG64",
            "state": {"state": int.from_bytes(raw[:16], "little"), "inc": int.from_bytes(raw[16:32], "little")},
            "has_uint32": raw[32], "uinteger": int.from_bytes(raw[33:37], "little"),
        }
        return self

    def __repr__(self):
        return f"<lucid.Generator seed={self._seed}>"


default_generator = Generator()


def manual_seed(seed):
    """Seed the default generator (and the on-device ones); returns it.

    Parameters
    ----------
    seed : int
        The seed of the global generator.

    Returns
    -------
    Generator
        The global generator.

    Examples
    --------
    >>> import lucid
    >>> _ = lucid.manual_seed(0)
    >>> a = lucid.randn(3)
    >>> _ = lucid.manual_seed(0)
    >>> bool((lucid.randn(3) == a).all())
    True
    """
    seed = _seed_arg(seed)
    seed_device("cuda", seed)
    return default_generator.manual_seed(seed)


def seed():
    """Seed the default generator from OS entropy; returns the seed.

    Examples
    --------
    >>> import lucid
    >>> isinstance(lucid.seed(), int)
    True
    """
    return default_generator.seed()


def initial_seed():
    """The seed the global generator was last seeded with.

    Returns
    -------
    int

    Examples
    --------
    >>> import lucid
    >>> _ = lucid.manual_seed(7)
    >>> lucid.initial_seed()
    7
    """
    return default_generator.initial_seed()


def get_rng_state():
    """State of the default generator (a uint8 tensor).

    Examples
    --------
    >>> import lucid
    >>> state = lucid.get_rng_state()
    >>> a = lucid.rand(2)
    >>> lucid.set_rng_state(state)
    >>> lucid.equal(a, lucid.rand(2))
    True
    """
    return default_generator.get_state()


def set_rng_state(new_state):
    """Restore the global generator's state from :func:`get_rng_state`.

    Parameters
    ----------
    new_state : Tensor
        A state returned by :func:`get_rng_state`.

    Examples
    --------
    >>> import lucid
    >>> state = lucid.get_rng_state()
    >>> a = lucid.randn(2)
    >>> lucid.set_rng_state(state)
    >>> lucid.equal(a, lucid.randn(2))
    True
    """
    default_generator.set_state(new_state)


# --------------------------------------------------------------------- drawing

# NOTE [vmap randomness]
# Inside vmap (torch.func semantics), a random op looks at every active BatchTrace:
#   "error"     -> RuntimeError naming the op (the default: silent sharing is a bug magnet);
#   "different" -> each example gets independent values: the draw gets one extra leading
#                  dim per such vmap (outermost first) and is wrapped in a BatchTracer
#                  with bdim 0 for each, innermost last;
#   "same"      -> one draw shared by every example of that vmap (no batch dim).
# Nested vmaps: an inner vmap's randomness overrides an enclosing "error" for the inner
# body (the enclosing level takes the nearest inner non-"error" mode); "different" and
# "same" on an enclosing level keep their per-level meaning.
def _vmap_levels(op):
    from ..func._traces import BatchTrace

    levels = []
    inherited = None
    for t in reversed(STATE.traces):  # innermost first
        if not isinstance(t, BatchTrace):
            continue
        mode = t.randomness
        if mode == "error":
            mode = inherited
            if mode is None:
                raise RuntimeError(
                    f"{op}: random operations are not allowed inside vmap(..., randomness='error') (the "
                    "default). Pass randomness='different' for independent values per example or "
                    "randomness='same' for one value shared by all examples, or draw outside vmap.")
        else:
            inherited = mode
        if mode == "different":
            levels.append(t)
    levels.reverse()  # outermost first
    return levels


def _gen(generator, op):
    if generator is None:
        return default_generator._np
    if not isinstance(generator, Generator):
        raise TypeError(f"{op}: generator must be a lucid.Generator, got {type(generator).__name__}")
    return generator._np


# NOTE [Random numbers on devices]
# Draws are made by NumPy's PCG64 on the host and copied to the tensor's device, except on
# CUDA, where the common samplers (uniform, normal, Bernoulli masks: those marked ``native``)
# run on CuPy's own generator (Philox4x32-10), one per device, seeded by ``lucid.manual_seed`` /
# ``lucid.cuda.manual_seed`` (so, as in PyTorch, CPU and CUDA streams differ). An explicit
# ``generator=`` is a host generator: its draws are copied to the device.
_DEVICE_RNG: dict = {}
_DEVICE_SEED = [_DEFAULT_SEED]


_DEVICE_STATES_TAKEN = [0]


def seed_device(device_type, seed):
    """Reseed the on-device generators (called by ``lucid.manual_seed`` and ``lucid.cuda.manual_seed``)."""
    _DEVICE_SEED[0] = int(seed) % 2 ** 64
    _DEVICE_STATES_TAKEN[0] = 0
    _DEVICE_RNG.clear()


def _make_device_rng(dev, seed):
    """A fresh generator on ``dev`` seeded with ``seed``: CuPy's ``Generator`` on Philox4x32-10
    (PyTorch's CUDA generator too), whose per-thread setup is a counter, where XORWOW's (CuPy's
    ``default_rng``) skips ahead per thread; NOTE [Device generator states] makes one per take."""
    xp_dev = backend._BACKENDS[dev.type].xp
    with xp_dev.cuda.Device(dev.index or 0):
        philox = getattr(xp_dev.random, "Philox4x3210", None)
        if philox is None:  # a CuPy without it
            return xp_dev.random.default_rng(seed)
        return xp_dev.random.Generator(philox(seed))


def _device_rng(dev):
    rng = _DEVICE_RNG.get(dev)
    if rng is None:
        rng = _DEVICE_RNG[dev] = _make_device_rng(dev, _DEVICE_SEED[0] + (dev.index or 0))
    return rng


# NOTE [Device generator states]
# CuPy's generators expose no state to save and restore, yet checkpoint's replay and
# vmap(randomness="same", strategy="isolated") must repeat a device's draws. So a device
# generator's state is a seed: *taking* the states reseeds each generator in use with the next
# seed of a sequence fixed by ``lucid.manual_seed`` and returns those seeds; restoring them
# reseeds with them (and drops generators made since, which restart from the seed). The draws
# after a restore repeat those after the take. Unlike PyTorch's, taking the state moves the
# stream on (deterministically: runs stay reproducible).
def device_rng_states():
    """The on-device generators' states, for :func:`set_device_rng_states` (see NOTE
    [Device generator states]): ``{device: seed}`` for each generator in use."""
    states = {}
    for dev in list(_DEVICE_RNG):
        _DEVICE_STATES_TAKEN[0] += 1
        seed = (_DEVICE_SEED[0] + 0x9E3779B97F4A7C15 * _DEVICE_STATES_TAKEN[0] + (dev.index or 0)) % 2 ** 64
        _DEVICE_RNG[dev] = _make_device_rng(dev, seed)
        states[dev] = seed
    return states


def all_rng_states():
    """The CPU generator's state and the device generators' (NOTE [Device generator states]):
    what checkpoint's replay and vmap(randomness="same") restore, as PyTorch's checkpoint
    saves the CUDA states beside the CPU's."""
    return get_rng_state(), device_rng_states()


def set_all_rng_states(states):
    """Restore :func:`all_rng_states`."""
    set_rng_state(states[0])
    set_device_rng_states(states[1])


def set_device_rng_states(states):
    """Restore states from :func:`device_rng_states`: later draws repeat those made after it."""
    for dev in list(_DEVICE_RNG):
        if dev not in states:
            del _DEVICE_RNG[dev]
    for dev, seed in states.items():
        _DEVICE_RNG[dev] = _make_device_rng(dev, seed)


def native(sample):
    """Mark ``sample`` as runnable on a device generator (its ``rng`` calls exist in CuPy's)."""
    sample.native = True
    return sample


def _draw(op, shape, sample, generator=None, device=None):
    """``sample(rng, full_shape) -> array`` as a Tensor on ``device`` (default: the default
    device), under NOTE [vmap randomness] and NOTE [Random numbers on devices]."""
    dev = device if isinstance(device, backend.device) else backend.check_device(device)
    levels = _vmap_levels(op) if STATE.traces else ()
    lead = tuple(t.size for t in levels)
    if dev is backend.CPU:
        out = _wrap(np.asarray(sample(_gen(generator, op), lead + tuple(shape))))
    elif dev.type == "cuda" and generator is None and getattr(sample, "native", False):
        b = backend._BACKENDS["cuda"]
        backend.note_device(b, dev.index)  # NOTE [Several devices]: the draw runs on dev's GPU
        with b.use_device(dev.index):
            out = _wrap(sample(_device_rng(dev), lead + tuple(shape)))
    else:
        arr = np.asarray(sample(_gen(generator, op), lead + tuple(shape)))
        out = _wrap(backend.to_device(arr, dev))
    if levels:
        from ..func._traces import BatchTracer

        for t in levels:
            out = BatchTracer(out, 0, t)
    return out


def _float_dtype(dtype, op, complex_ok=False):
    dt = dtype_arg(dtype, op) if dtype is not None else dtypes.get_default_dtype()
    if not dtypes.is_floating(dt) and not (complex_ok and dt.kind == "c"):
        # NotImplementedError, PyTorch's type (it derives from RuntimeError, raised here before)
        raise NotImplementedError(f"{op}: expected a floating point dtype, got {dt}")
    return dt


def _complex_sampler(make, dt, scale):
    """For a complex ``dt``: real and imaginary parts drawn independently by ``make``'s sampler
    in the matching real dtype, times ``scale`` (PyTorch: randn's parts have variance 1/2)."""
    if dt.kind != "c":
        return make(dt)
    part = make(np.dtype(np.float32) if dt == np.complex64 else np.dtype(np.float64))

    def sample(rng, shape):
        re = part(rng, shape)
        return ((re + 1j * part(rng, shape)) * scale).astype(dt, copy=False)

    return native(sample)


def _uniform01(dt):
    """Sampler for U[0, 1) in dtype ``dt`` (float16 and bfloat16 drawn in float32, kept below 1)."""

    def sample(rng, shape):
        if dt.itemsize <= 2:  # float16, bfloat16, float8: drawn in float32, kept below 1 once rounded
            below_one = 1.0 - float(dtypes.np_finfo(dt).epsneg)
            return np.minimum(rng.random(shape, dtype=np.float32), below_one).astype(dt)
        return rng.random(shape, dtype=dt)

    return native(sample)


def _normal01(dt):
    def sample(rng, shape):
        wide = np.float32 if dt.itemsize <= 2 else dt  # float16, bfloat16, float8: drawn in float32
        return rng.standard_normal(shape, dtype=wide).astype(dt, copy=False)

    return native(sample)


def _finish(t, requires_grad, op=None):
    if requires_grad and type(t) is Tensor:
        if not t.dtype.is_floating_point and not t.dtype.is_complex:
            raise RuntimeError(f"{op or 'random'}: only tensors of floating point and complex dtype can "
                               f"require gradients, got dtype {t.dtype}")
        t.requires_grad_()
    return t


def _int_bound(v, name, op):
    """An int bound: PyTorch refuses floats rather than truncating them (5.5 is not an int)."""
    if isinstance(v, Tensor):
        v = v.item()
    if isinstance(v, (bool, float)) or not hasattr(v, "__index__"):
        raise TypeError(f"{op}: argument '{name}' must be int, not {type(v).__name__}")
    return int(v.__index__())


def _check_range_fits(dt, low, high, op):
    """PyTorch refuses a ``[low, high)`` the dtype cannot hold, rather than wrapping the draws."""
    dt = np.dtype(getattr(dt, "dtype", dt))
    if dt.kind == "b":
        lo, hi = 0, 1
    elif dtypes.is_floating(dt):
        lo, hi = float(dtypes.np_finfo(dt).min), float(dtypes.np_finfo(dt).max)
    elif dt.kind in "iu":
        lo, hi = int(np.iinfo(dt).min), int(np.iinfo(dt).max)
    else:
        raise NotImplementedError(f"{op}: not implemented for dtype {dt}")
    for what, v in (("from", low), ("to - 1", high - 1)):
        if not lo <= v <= hi:
            raise RuntimeError(f"{op}: {what} is out of bounds for {dt} (got {v}, the dtype holds [{lo}, {hi}])")


# ------------------------------------------------------------------- samplers

def rand(*size_args, size=None, generator=None, dtype=None, device=None, requires_grad=False, layout=None):
    """Uniform samples on ``[0, 1)``.

    Parameters
    ----------
    *size : int or tuple of int
        The shape.
    generator : Generator, optional
        The random source (default: the global one).
    dtype : dtype, optional
        A floating dtype (default: the default dtype).
    device : str, optional
        Only 'cpu' exists.
    requires_grad : bool
        Make the result a leaf that requires grad.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.rand(2, 3)
    >>> x.shape, bool(((x >= 0) & (x < 1)).all())
    ((2, 3), True)
    """
    if layout is not None:
        layout_arg(layout, "rand")
    device = device_arg(device, "rand")
    dt = _float_dtype(dtype, "rand", complex_ok=True)
    shape = size_arg(sizes_or_keyword(size_args, size, "rand"), "rand")
    return _finish(_draw("rand", shape, _complex_sampler(_uniform01, dt, 1.0), generator,
                         device),
                   requires_grad)


def randn(*size_args, size=None, generator=None, dtype=None, device=None, requires_grad=False, layout=None):
    """Standard normal samples.

    Parameters
    ----------
    *size : int or tuple of int
        The shape.
    generator : Generator, optional
        The random source (default: the global one).
    dtype : dtype, optional
        A floating dtype (default: the default dtype).
    device : str, optional
        Only 'cpu' exists.
    requires_grad : bool
        Make the result a leaf that requires grad.

    Examples
    --------
    >>> import lucid
    >>> lucid.randn(4, dtype=lucid.float64).dtype == lucid.float64
    True
    """
    if layout is not None:
        layout_arg(layout, "randn")
    device = device_arg(device, "randn")
    dt = _float_dtype(dtype, "randn", complex_ok=True)
    shape = size_arg(sizes_or_keyword(size_args, size, "randn"), "randn")
    return _finish(_draw("randn", shape, _complex_sampler(_normal01, dt, 0.5 ** 0.5),
                         generator, device),
                   requires_grad)


def uniform(low=0.0, high=1.0, size=(), *, generator=None, dtype=None, requires_grad=False):
    """Uniform samples on ``[low, high)`` (scalar bounds).

    Parameters
    ----------
    low, high : float
        The interval ``[low, high)``.
    size : tuple of int
        The shape.
    generator : Generator, optional
        The random source (default: the global one).
    dtype : dtype, optional
        A floating dtype (default: the default dtype).
    requires_grad : bool
        Make the result a leaf that requires grad.

    Examples
    --------
    >>> import lucid
    >>> bool((lucid.uniform(2.0, 3.0, (5,)) >= 2.0).all())
    True
    """
    dt = _float_dtype(dtype, "uniform")
    if not low <= high:
        raise RuntimeError(f"uniform: expected low <= high, got low={low} and high={high}")
    u = _draw("uniform", size_arg((size,) if isinstance(size, int) else (tuple(size),), "uniform"),
              lambda rng, shape: (low + (high - low) * rng.random(shape)).astype(dt), generator)
    return _finish(u, requires_grad)


def _randint_args(args, size, op):
    if size is not None:
        args = args + (size,)
    if len(args) == 2:
        low, (high, size) = 0, args
    elif len(args) == 3:
        low, high, size = args
    else:
        raise TypeError(f"{op}: expected (high, size) or (low, high, size), got {len(args)} positional argument(s)")
    low, high = _int_bound(low, "low", op), _int_bound(high, "high", op)
    if low >= high:
        raise RuntimeError(f"{op}: expected low < high, got low={low} and high={high}")
    return low, high, size


def randint(*args, low=None, high=None, size=None, generator=None, dtype=None, device=None, requires_grad=False, layout=None):
    """Integers uniform on ``[low, high)``: ``randint(high, size)`` or ``randint(low, high, size)``.

    Parameters
    ----------
    low : int, optional
        Lowest value (default 0).
    high : int
        One above the highest value.
    size : tuple of int
        The shape.
    generator : Generator, optional
        The random source (default: the global one).
    dtype : dtype, optional
        Default int64.
    device : str, optional
        Only 'cpu' exists.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.randint(3, 7, (10,))
    >>> x.dtype == lucid.int64, bool(((x >= 3) & (x < 7)).all())
    (True, True)
    """
    if layout is not None:
        layout_arg(layout, "randint")
    device = device_arg(device, "randint")
    if high is not None:  # randint(low=1, high=5, size=s), randint(1, high=5, size=s), randint(high=5, ...)
        if low is None:
            low, args = (args[0], args[1:]) if args else (0, ())
        args = (low, high) + tuple(args)
    elif low is not None:  # randint(5, (2,), low=1)
        args = (low,) + tuple(args)
    low, high, size = _randint_args(args, size, "randint")
    dt = dtypes.to_dtype(dtype) if dtype is not None else dtypes.int64
    _check_range_fits(dt, low, high, "randint")
    shape = size_arg((size,) if isinstance(size, int) else (tuple(size),), "randint")
    out = _draw("randint", shape, lambda rng, s: rng.integers(low, high, s, dtype=np.int64).astype(dt), generator,
                device)
    return _finish(out, requires_grad, "randint")


def rand_like(input, *, generator=None, dtype=None, layout=None, device=None, requires_grad=False,
              memory_format=None):
    """:func:`rand` with the shape (and floating dtype) of ``input``.

    Parameters
    ----------
    input : Tensor
        Gives the shape (and by default the dtype).
    generator : Generator, optional
        The random source (default: the global one).
    dtype : dtype, optional
        A floating dtype (default: the default dtype).
    requires_grad : bool
        Make the result a leaf that requires grad.
    device : device, optional
        Default: ``input``'s device.
    memory_format : lucid.memory_format, optional
        Default (None, PyTorch's ``preserve_format``): ``input``'s layout.

    Examples
    --------
    >>> import lucid
    >>> lucid.rand_like(lucid.zeros(2, 3)).shape
    (2, 3)
    """
    input = _as_tensor(input)
    out = rand(tuple(input.shape), generator=generator, dtype=dtype or _like_float(input),
               device=device or _device_of(input), requires_grad=requires_grad)
    return _laid_out_like(out, input, memory_format, "rand_like")


def randn_like(input, *, generator=None, dtype=None, layout=None, device=None, requires_grad=False,
               memory_format=None):
    """:func:`randn` with the shape (and floating dtype) of ``input``.

    Parameters
    ----------
    input : Tensor
        Gives the shape (and by default the dtype).
    generator : Generator, optional
        The random source (default: the global one).
    dtype : dtype, optional
        A floating dtype (default: the default dtype).
    requires_grad : bool
        Make the result a leaf that requires grad.
    device : device, optional
        Default: ``input``'s device.
    memory_format : lucid.memory_format, optional
        Default (None, PyTorch's ``preserve_format``): ``input``'s layout.

    Examples
    --------
    >>> import lucid
    >>> lucid.randn_like(lucid.zeros(2, 3)).shape
    (2, 3)
    """
    input = _as_tensor(input)
    out = randn(tuple(input.shape), generator=generator, dtype=dtype or _like_float(input),
                device=device or _device_of(input), requires_grad=requires_grad)
    return _laid_out_like(out, input, memory_format, "randn_like")


def randint_like(input, low=0, high=None, *, generator=None, dtype=None, layout=None, device=None,
                 requires_grad=False, memory_format=None):
    """:func:`randint` with the shape and dtype of ``input``: ``(input, high)`` or ``(input, low, high)``.

    Parameters
    ----------
    input : Tensor
        Gives the shape.
    low, high : int
        The range ``[low, high)`` (``randint_like(x, high)`` also works).
    generator : Generator, optional
        The random source (default: the global one).
    dtype : dtype, optional
        Default: the input's dtype.
    requires_grad : bool
        Make the result a leaf that requires grad (a floating dtype only).
    device : device, optional
        Default: ``input``'s device.
    memory_format : lucid.memory_format, optional
        Default (None, PyTorch's ``preserve_format``): ``input``'s layout.

    Examples
    --------
    >>> import lucid
    >>> lucid.randint_like(lucid.zeros(4), 1).tolist()
    [0.0, 0.0, 0.0, 0.0]
    """
    input = _as_tensor(input)
    if high is None:
        low, high = 0, low
    out = randint(low, high, tuple(input.shape), generator=generator, dtype=dtype or input.dtype,
                  device=device or _device_of(input), requires_grad=requires_grad)
    return _laid_out_like(out, input, memory_format, "randint_like")


def _like_float(t):
    return t.dtype if t.dtype.kind in "fc" else None


def randperm(n, *, generator=None, dtype=None, device=None, requires_grad=False, layout=None):
    """A random permutation of ``0 .. n-1``.

    Parameters
    ----------
    n : int
        Permute ``0 .. n-1``.
    generator : Generator, optional
        The random source (default: the global one).
    dtype : dtype, optional
        Default int64.
    device : str, optional
        Only 'cpu' exists.

    Examples
    --------
    >>> import lucid
    >>> sorted(lucid.randperm(5).tolist())
    [0, 1, 2, 3, 4]
    """
    if layout is not None:
        layout_arg(layout, "randperm")
    device = device_arg(device, "randperm")
    n = _int_bound(n, "n", "randperm")
    if n < 0:
        raise RuntimeError(f"randperm: n must be non-negative, got {n}")
    dt = dtypes.to_dtype(dtype) if dtype is not None else dtypes.int64
    if dtypes.kind_of(dt) not in "fiu":
        raise NotImplementedError(f"randperm: not implemented for dtype {dt}")
    # every value 0 .. n-1 must be exact in dt (PyTorch: 2**digits + 1 for a float dtype)
    ndt = np.dtype(getattr(dt, "dtype", dt))
    top = 2 ** (dtypes.np_finfo(ndt).nmant + 1) if dtypes.is_floating(ndt) else int(np.iinfo(ndt).max)
    if n - 1 > top:
        raise RuntimeError(f"randperm: n={n} does not fit dtype {dt} (at most {top + 1})")

    def sample(rng, shape):
        if len(shape) == 1:
            return rng.permutation(n).astype(dt)
        return np.argsort(rng.random(shape), axis=-1, kind="stable").astype(dt)

    return _finish(_draw("randperm", (n,), sample, generator, device), requires_grad, "randperm")


@backend.runs_on_operands_device  # its checks run on the operands' device (NOTE [Several devices])
def normal(mean=0.0, std=1.0, size=None, *, generator=None, dtype=None, layout=None, device=None,
           pin_memory=False, requires_grad=False):
    """Normal samples; ``mean`` and ``std`` may be tensors (broadcast) or floats (then ``size``).

    The result carries no gradient to ``mean``/``std`` (use ``mean + std * randn_like(mean)``
    for a reparameterised sample).

    Parameters
    ----------
    mean, std : float or Tensor
        Mean and standard deviation (tensors broadcast).
    size : tuple of int, optional
        The shape when both are numbers.
    generator : Generator, optional
        The random source (default: the global one).
    dtype : dtype, optional
        A floating dtype (default: the default dtype).
    layout, device, pin_memory : optional
        Only with float ``mean`` and ``std`` (as PyTorch's overloads): the strided layout, the
        device to draw on (default: the default device), and pinning (accepted, no effect).
    requires_grad : bool
        Make the result a leaf that requires grad.

    Examples
    --------
    >>> import lucid
    >>> lucid.normal(2.0, 0.5, (3,)).shape
    (3,)
    >>> lucid.normal(lucid.zeros(2, 2), 1.0).shape
    (2, 2)
    """
    from .elementwise import add, mul

    tensors = [t for t in (mean, std) if isinstance(t, Tensor)]
    if not tensors:
        if size is None:
            raise TypeError("normal: with float mean and std, size is required")
        if std < 0:
            raise RuntimeError(f"normal: expected std >= 0, got {std}")
        dt = _float_dtype(dtype, "normal")
        shape = size_arg((size,) if isinstance(size, int) else (tuple(size),), "normal")
        if layout is not None and str(layout) != "lucid.strided":
            raise NotImplementedError(f"normal: only the strided layout is supported, got {layout}")
        eps = _draw("normal", shape, _normal01(dt), generator, device_arg(device, "normal"))
        return _finish(add(mul(eps, std), mean), requires_grad)
    given = [k for k, v in (("layout", layout), ("device", device), ("pin_memory", pin_memory))
             if v not in (None, False)]
    if given:  # PyTorch's tensor overloads have no such keywords
        raise TypeError(f"normal: {', '.join(given)} is only accepted with float mean and std "
                        "(a Tensor mean or std fixes the device and layout)")
    if type(std) is Tensor and std.numel() and bool((std._data < 0).any()):
        raise RuntimeError("normal: expected all elements of std >= 0")
    if not isinstance(std, Tensor) and std < 0:
        raise RuntimeError(f"normal: expected std >= 0, got {std}")
    lead = mean if isinstance(mean, Tensor) else std  # PyTorch's output takes this one's dtype
    if dtype is None and lead.dtype.kind not in "fc":
        raise NotImplementedError(f"normal: not implemented for an integer or bool "
                                  f"{'mean' if lead is mean else 'std'} (dtype {lead.dtype})")
    dt = dtypes.to_dtype(dtype) if dtype is not None else (
        np.result_type(*[t.dtype for t in tensors]) if all(t.dtype.kind == "f" for t in tensors)
        else dtypes.get_default_dtype())
    shape = np.broadcast_shapes(*[tuple(t.shape) for t in tensors])
    if size is not None and tuple(size_arg((size,) if isinstance(size, int) else (tuple(size),), "normal")) != shape:
        raise RuntimeError(f"normal: size {tuple(size)} does not match the broadcast shape {shape} of mean and std")
    eps = _draw("normal", shape, _normal01(dt), generator, _device_of(tensors[0]))
    m = mean.detach().to(dt) if isinstance(mean, Tensor) else mean
    s = std.detach().to(dt) if isinstance(std, Tensor) else std
    return add(mul(eps, s), m)


def _check_probs(p, op):
    """Range check on concrete values (skipped for tracers, whose values are not concrete)."""
    if type(p) is Tensor and p.numel():
        arr = p._data
        with backend.on_device(arr):
            inside = bool(((arr >= 0) & (arr <= 1)).all())
        if not inside:
            raise RuntimeError(f"{op}: expected all probabilities in [0, 1] (input shape {tuple(p.shape)})")


@tensor_method("bernoulli")
def bernoulli(input, p=None, *, generator=None):
    """0/1 samples, 1 with probability ``input`` (or with the scalar ``p``); dtype of ``input``.

    Parameters
    ----------
    input : Tensor
        Probabilities in [0, 1] (or the shape, with ``p``).
    p : float, optional
        One probability for every element.
    generator : Generator, optional
        The random source (default: the global one).

    Examples
    --------
    >>> import lucid
    >>> lucid.bernoulli(lucid.tensor([0.0, 1.0])).tolist()
    [0.0, 1.0]
    """
    input = _as_tensor(input)
    if input.dtype.kind != "f":
        raise NotImplementedError(f"bernoulli: expected a floating point input, got {input.dtype}")
    probs = input.detach() if p is None else float(p)
    if p is None:
        _check_probs(probs, "bernoulli")
    elif not 0 <= probs <= 1:
        raise RuntimeError(f"bernoulli: expected 0 <= p <= 1, got {p}")
    u = _draw("bernoulli", tuple(input.shape), _uniform01(np.dtype(np.float64)), generator, _device_of(input))
    return (u < probs).to(input.dtype)


def bernoulli_mask(shape, p, dtype=None, *, generator=None, device=None):
    """A 0/1 mask of ``shape``, 1 with probability ``p`` (a float) — for dropout-like layers.

    Follows the vmap randomness rules like every sampler (NOTE [vmap randomness]).

    Examples
    --------
    >>> import lucid
    >>> from lucid.ops.random import bernoulli_mask
    >>> bernoulli_mask((2, 3), 1.0).tolist()
    [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]
    """
    if not 0 <= p <= 1:
        raise RuntimeError(f"bernoulli_mask: expected 0 <= p <= 1, got {p}")
    dt = _float_dtype(dtype, "bernoulli_mask")
    shape = tuple(shape)
    return _draw("bernoulli_mask", shape, native(lambda rng, s: (rng.random(s) < p).astype(dt)), generator,
                 device)


def dropout_mask(shape, p, dtype=None, *, generator=None, device=None):
    """Inverted-dropout mask: 0 with probability ``p``, else ``1 / (1 - p)`` (all zeros if ``p == 1``)."""
    if p == 1:
        return bernoulli_mask(shape, 0.0, dtype, generator=generator, device=device)
    return bernoulli_mask(shape, 1.0 - p, dtype, generator=generator, device=device) * (1.0 / (1.0 - p))


# multinomial: a non-differentiable primitive over (weights, noise), so that batched
# weights and batched noise combine through the elementwise batching rule.
def _multinomial_impl(p, u, replacement, num_samples):
    lead = np.broadcast_shapes(p.shape[:-1], u.shape[:-1])
    p = xp.broadcast_to(p, lead + p.shape[-1:]).astype(np.float64)
    u = xp.broadcast_to(u, lead + u.shape[-1:])
    if replacement:  # inverse CDF
        cdf = xp.cumsum(p, axis=-1)
        cdf = cdf / cdf[..., -1:]
        idx = (u[..., :, None] >= cdf[..., None, :]).sum(-1)
        return xp.minimum(idx, p.shape[-1] - 1).astype(np.int64)
    with np.errstate(divide="ignore"):  # Gumbel top-k: log(p) - log(-log(u))
        keys = xp.log(p) - xp.log(-xp.log(u))
    return xp.argsort(-keys, axis=-1, kind="stable")[..., :num_samples].astype(np.int64)


multinomial_p = nondiff("multinomial", _multinomial_impl)
multinomial_p.batch = batch_leading(multinomial_p)


@tensor_method("multinomial")
@backend.runs_on_operands_device  # its checks run on the operands' device (NOTE [Several devices])
def multinomial(input, num_samples, replacement=False, *, generator=None):
    """Indices sampled from the categorical distribution(s) with weights ``input`` (1-D or 2-D).

    Parameters
    ----------
    input : Tensor
        Non-negative weights, (K,) or (N, K).
    num_samples : int
        Draws per row.
    replacement : bool
        Draw with replacement.
    generator : Generator, optional
        The random source (default: the global one).

    Examples
    --------
    >>> import lucid
    >>> lucid.multinomial(lucid.tensor([0.0, 1.0, 0.0]), 2, replacement=True).tolist()
    [1, 1]
    """
    input = _as_tensor(input)
    if input.ndim not in (1, 2) or input.dtype.kind != "f":
        raise RuntimeError(f"multinomial: expected a 1-D or 2-D float tensor of weights, got shape "
                           f"{tuple(input.shape)} and dtype {input.dtype}")
    n, k = input.shape[-1], int(num_samples)
    if k <= 0 or (not replacement and k > n):
        raise RuntimeError(f"multinomial: cannot sample num_samples={k} from {n} categories "
                           f"{'with' if replacement else 'without'} replacement (input shape {tuple(input.shape)})")
    if type(input) is Tensor:
        w = input._data
        if (w < 0).any() or not np.isfinite(w).all() or (w.sum(-1) <= 0).any():
            raise RuntimeError(f"multinomial: weights must be finite, non-negative and sum to a positive "
                               f"value (input shape {tuple(input.shape)})")
        # Without replacement, fewer non-zero weights than draws is not an error: as PyTorch's
        # p / Exp(1) top-k, the zero-weight categories (Gumbel key -inf) come after the others.
    # With replacement: one uniform per sample (inverse CDF); without: one per category (Gumbel keys).
    u = _draw("multinomial", tuple(input.shape[:-1]) + (k if replacement else n,),
              native(lambda rng, s: rng.random(s)), generator, _device_of(input))
    from .._core.primitive import bind

    probs = input.detach().to(dtypes.float64)
    return bind(multinomial_p, (probs, u), {"replacement": bool(replacement), "num_samples": k})


__all__ = ["Generator", "default_generator", "manual_seed", "seed", "initial_seed", "get_rng_state",
           "set_rng_state", "rand", "randn", "randint", "rand_like", "randn_like", "randint_like",
           "randperm", "normal", "uniform", "bernoulli", "multinomial"]
