"""Lazy modules: layers whose input size is inferred from the first input.

NOTE [Lazy modules]
A lazy layer holds ``UninitializedParameter``/``UninitializedBuffer`` placeholders (empty
tensors). A forward pre-hook runs once: ``initialize_parameters(input)`` reads the input's
feature / channel size, ``materialize``s every placeholder (which becomes a plain
``Parameter``/``Tensor`` in place, so references held elsewhere, e.g. by an optimizer built
before the first call, stay valid), runs the layer's ``reset_parameters`` and turns the
module into its ordinary class (``LazyLinear`` becomes ``Linear``), as PyTorch does. Until
then a placeholder refuses ``shape`` (so ``dim``/``ndim``) and ``numel`` as PyTorch's does,
rather than answer from its empty array; ``size()`` and ``.data`` give the empty tensor.
``load_state_dict`` materialises placeholders from the incoming shapes first; a placeholder
coming in (``state_dict()`` of a lazy module keeps its placeholders) leaves one there as it is.

A placeholder is an empty array on the device it was made for (the ``device`` argument, else
the default device at creation), so ``module.to(device)`` moves it like any tensor, and
``materialize`` makes the values there (or on its own ``device`` argument), as PyTorch's
``UninitializedParameter`` does.
"""
from __future__ import annotations

import numpy as np

from .._core import backend
from .._core.grad_mode import no_grad
from .._core.size import as_size
from .._core.tensor import Tensor, _disabled_torch_function_impl
from .conv import Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
from .linear import Linear
from .normalization import (BatchNorm1d, BatchNorm2d, BatchNorm3d, InstanceNorm1d, InstanceNorm2d,
                            InstanceNorm3d)
from .parameter import Parameter

__all__ = ["UninitializedParameter", "UninitializedBuffer", "LazyModuleMixin", "LazyLinear", "LazyConv1d",
           "LazyConv2d", "LazyConv3d", "LazyConvTranspose1d", "LazyConvTranspose2d", "LazyConvTranspose3d",
           "LazyBatchNorm1d", "LazyBatchNorm2d", "LazyBatchNorm3d", "LazyInstanceNorm1d", "LazyInstanceNorm2d",
           "LazyInstanceNorm3d"]


def _dtype(dtype):
    return np.dtype(dtype if dtype is not None else np.float32)


def _placeholder_array(device, dtype):
    """An empty array on ``device`` (None: the default device)."""
    dev = backend.check_device(device)
    arr = np.zeros(0, _dtype(dtype))
    return arr if dev is backend.CPU else backend.to_device(arr, dev)


def _materialized(t, shape, device, dtype):
    """``t``'s new (zero) array of ``shape``: on ``device``, else where the placeholder is;
    made on the host and copied once, as the factory functions do."""
    old = t._data
    arr = np.zeros(tuple(shape), _dtype(dtype) if dtype is not None else old.dtype)
    if device is not None:
        dev = backend.check_device(device)
        return arr if dev is backend.CPU else backend.to_device(arr, dev)
    return arr if old.__class__ is np.ndarray else backend.to_device(arr, backend.device_of_array(old))


_SHAPE_MSG = ("Can't access the shape of an uninitialized parameter or buffer. This error usually happens in "
              "`load_state_dict` when trying to load an uninitialized parameter into an initialized one. Call "
              "`forward` to initialize the parameters before accessing their attributes.")


class _UninitializedMixin:
    """What a placeholder refuses, as PyTorch's ``UninitializedTensorMixin`` does: its ``shape``
    (and so ``dim``/``ndim``) and ``numel``, which would otherwise read the empty stand-in array
    (a lazy model would count 0 parameters). ``size()`` and ``.data`` still give the empty tensor,
    as in PyTorch (so ``p.data.normal_()`` before the first forward does nothing)."""

    @property
    def shape(self):
        raise RuntimeError(_SHAPE_MSG)

    def size(self, dim=None):
        s = as_size(self._data.shape)
        return s if dim is None else s[dim]

    def numel(self):
        raise ValueError(f"Attempted to use an uninitialized parameter in numel(). This error happens when you are "
                         f"using a `LazyModule` or explicitly manipulating `lucid.nn.{type(self).__name__}` objects. "
                         "When using LazyModules Call `forward` with a dummy batch to initialize the parameters "
                         "before calling lucid functions")

    nelement = numel


class UninitializedParameter(_UninitializedMixin, Parameter):
    """A parameter whose shape is not known yet (See NOTE [Lazy modules]).

    Examples
    --------
    >>> from lucid.nn import UninitializedParameter
    >>> p = UninitializedParameter()
    >>> p.materialize((2, 3)); type(p).__name__, p.shape
    ('Parameter', (2, 3))
    """

    cls_to_become = Parameter

    def __init__(self, requires_grad=True, device=None, dtype=None):
        Parameter.__init__(self, _placeholder_array(device, dtype), requires_grad)

    def materialize(self, shape, device=None, dtype=None):
        """Give the placeholder its shape (uninitialised values) and make it a plain parameter,
        on ``device`` (default: the placeholder's own device)."""
        self._data = _materialized(self, shape, device, dtype)
        self._version[0] += 1
        self.__class__ = self.cls_to_become

    def __repr__(self):
        return "<UninitializedParameter>"


class UninitializedBuffer(_UninitializedMixin, Tensor):
    """A buffer whose shape is not known yet (See NOTE [Lazy modules])."""

    __torch_function__ = _disabled_torch_function_impl  # plain-tensor behaviour (NOTE [Torch function])

    cls_to_become = Tensor

    def __init__(self, requires_grad=False, device=None, dtype=None):
        Tensor.__init__(self, None)
        self._data = _placeholder_array(device, dtype)

    def materialize(self, shape, device=None, dtype=None):
        """Give the placeholder its shape and make it a plain tensor, on ``device`` (default:
        the placeholder's own device)."""
        self._data = _materialized(self, shape, device, dtype)
        self._version[0] += 1
        self.__class__ = self.cls_to_become

    def __repr__(self):
        return "<UninitializedBuffer>"


_PLACEHOLDERS = (UninitializedParameter, UninitializedBuffer)


def _infer_parameters(module, args):
    module.initialize_parameters(*args)
    if module.has_uninitialized_params():
        raise RuntimeError(f"{type(module).__name__}: module {module._get_name()} has not been fully initialized")
    module._lazy_hook.remove()
    del module._lazy_hook
    if module.cls_to_become is not None:
        module.__class__ = module.cls_to_become


class LazyModuleMixin:
    """Mixin of the lazy layers (See NOTE [Lazy modules]); subclasses define
    ``initialize_parameters(input)`` and ``cls_to_become``."""

    cls_to_become = None

    def _setup_lazy(self):
        self._lazy_hook = self.register_forward_pre_hook(_infer_parameters)

    def has_uninitialized_params(self):
        """Whether any parameter or buffer is still a placeholder."""
        tensors = list(self._parameters.values()) + list(self._buffers.values())
        return any(isinstance(t, _PLACEHOLDERS) for t in tensors)

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        # placeholders go in as they are (PyTorch's lazy modules too), so that loading them into
        # another lazy module leaves it lazy (See NOTE [Lazy modules])
        super()._save_to_state_dict(destination, prefix, keep_vars)
        for name, t in list(self._parameters.items()) + list(self._buffers.items()):
            if isinstance(t, _PLACEHOLDERS) and prefix + name in destination:
                destination[prefix + name] = t

    def _materialize_from_state_dict(self, state_dict, prefix):
        for name, t in list(self._parameters.items()) + list(self._buffers.items()):
            value = state_dict.get(prefix + name)
            if (isinstance(t, _PLACEHOLDERS) and value is not None
                    and not isinstance(value, _PLACEHOLDERS) and hasattr(value, "shape")):
                t.materialize(tuple(value.shape))

    def _materialize(self, shapes):
        with no_grad():
            for name, shape in shapes.items():
                t = getattr(self, name)
                if isinstance(t, _PLACEHOLDERS):
                    t.materialize(shape)
            self.reset_parameters()


def _lazy_init(self, placeholder_names, device, dtype, buffers=()):
    for name in placeholder_names:
        if getattr(self, name, None) is not None:
            setattr(self, name, UninitializedParameter(device=device, dtype=dtype))
    for name in buffers:
        if getattr(self, name, None) is not None:
            self.register_buffer(name, UninitializedBuffer(device=device, dtype=dtype))
    self._setup_lazy()


class LazyLinear(LazyModuleMixin, Linear):
    """``Linear`` whose ``in_features`` is the last dim of the first input.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> m = nn.LazyLinear(4)
    >>> m(lucid.zeros(2, 3)).shape, type(m).__name__, m.weight.shape
    ((2, 4), 'Linear', (4, 3))
    """

    cls_to_become = Linear

    def __init__(self, out_features, bias=True, device=None, dtype=None):
        Linear.__init__(self, 1, out_features, bias, device=device, dtype=dtype)
        self.in_features = 0
        _lazy_init(self, ("weight", "bias"), device, dtype)

    def initialize_parameters(self, input, *args):
        if self.has_uninitialized_params():
            self.in_features = int(input.shape[-1])
            shapes = {"weight": (self.out_features, self.in_features)}
            if self.bias is not None:
                shapes["bias"] = (self.out_features,)
            self._materialize(shapes)


class _LazyConvMixin(LazyModuleMixin):
    def _lazy_conv_init(self, device, dtype):
        self.in_channels = 0
        _lazy_init(self, ("weight", "bias"), device, dtype)

    def initialize_parameters(self, input, *args):
        if not self.has_uninitialized_params():
            return
        batched = input.ndim == self._nsp + 2
        self.in_channels = int(input.shape[1] if batched else input.shape[0])
        if self.in_channels % self.groups:
            raise ValueError(f"{type(self).__name__}: in_channels ({self.in_channels}) must be divisible by "
                             f"groups ({self.groups})")
        if self._transposed:
            shape = (self.in_channels, self.out_channels // self.groups) + tuple(self.kernel_size)
        else:
            shape = (self.out_channels, self.in_channels // self.groups) + tuple(self.kernel_size)
        shapes = {"weight": shape}
        if self.bias is not None:
            shapes["bias"] = (self.out_channels,)
        self._materialize(shapes)


def _lazy_conv(name, base, transposed):
    def __init__(self, out_channels, kernel_size, stride=1, padding=0, *rest, device=None, dtype=None, **kw):
        if transposed:
            base.__init__(self, out_channels, out_channels, kernel_size, stride, padding, *rest, device=device,
                          dtype=dtype, **kw)
        else:
            groups = kw.get("groups", rest[1] if len(rest) > 1 else 1)
            base.__init__(self, groups, out_channels, kernel_size, stride, padding, *rest, device=device,
                          dtype=dtype, **kw)
        self._lazy_conv_init(device, dtype)

    doc = (f"``{base.__name__}`` whose ``in_channels`` is read from the first input (dim 1, or dim 0 "
           f"unbatched).\n\nExamples\n--------\n>>> import lucid, lucid.nn as nn\n>>> m = nn.{name}(4, 3)\n"
           f">>> _ = m(lucid.zeros(1, 2{', 5' * base._nsp})); type(m).__name__\n'{base.__name__}'\n")
    return type(name, (_LazyConvMixin, base), {"__init__": __init__, "cls_to_become": base, "__doc__": doc,
                                               "__module__": __name__})


LazyConv1d = _lazy_conv("LazyConv1d", Conv1d, False)
LazyConv2d = _lazy_conv("LazyConv2d", Conv2d, False)
LazyConv3d = _lazy_conv("LazyConv3d", Conv3d, False)
LazyConvTranspose1d = _lazy_conv("LazyConvTranspose1d", ConvTranspose1d, True)
LazyConvTranspose2d = _lazy_conv("LazyConvTranspose2d", ConvTranspose2d, True)
LazyConvTranspose3d = _lazy_conv("LazyConvTranspose3d", ConvTranspose3d, True)


class _LazyNormMixin(LazyModuleMixin):
    def initialize_parameters(self, input, *args):
        if not self.has_uninitialized_params() and self.num_features:
            return
        unbatched = "Instance" in self.cls_to_become.__name__ and input.ndim == self._dims[0]
        self.num_features = int(input.shape[0] if unbatched else input.shape[1])
        shapes = {n: (self.num_features,) for n in ("weight", "bias", "running_mean", "running_var")
                  if getattr(self, n, None) is not None}
        self._materialize(shapes)


def _lazy_norm(name, base):
    # PyTorch's lazy norms default to affine=True, track_running_stats=True, the lazy instance
    # norms too (unlike InstanceNorm*d): a PyTorch state dict then has the same keys.
    def __init__(self, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True, device=None, dtype=None,
                 *, bias=True):
        base.__init__(self, 0, eps, momentum, affine, track_running_stats, device=device, dtype=dtype, bias=bias)
        _lazy_init(self, ("weight", "bias"), device, dtype, buffers=("running_mean", "running_var"))

    doc = (f"``{base.__name__}`` whose ``num_features`` is read from the first input.\n\nExamples\n--------\n"
           f">>> import lucid, lucid.nn as nn\n>>> m = nn.{name}()\n"
           f">>> _ = m(lucid.ones(2, 3{', 4' * (base._dims[-1] - 2)})); m.num_features\n3\n")
    return type(name, (_LazyNormMixin, base), {"__init__": __init__, "cls_to_become": base, "__doc__": doc,
                                               "__module__": __name__})


LazyBatchNorm1d = _lazy_norm("LazyBatchNorm1d", BatchNorm1d)
LazyBatchNorm2d = _lazy_norm("LazyBatchNorm2d", BatchNorm2d)
LazyBatchNorm3d = _lazy_norm("LazyBatchNorm3d", BatchNorm3d)
LazyInstanceNorm1d = _lazy_norm("LazyInstanceNorm1d", InstanceNorm1d)
LazyInstanceNorm2d = _lazy_norm("LazyInstanceNorm2d", InstanceNorm2d)
LazyInstanceNorm3d = _lazy_norm("LazyInstanceNorm3d", InstanceNorm3d)
