"""lucid.nn.utils: gradient clipping, parameter/vector conversion, ``rnn`` (packed sequences),
``parametrize``/``parametrizations``, old-style ``weight_norm``, ``fusion``, ``skip_init``."""
from .clip_grad import clip_grad_norm, clip_grad_norm_, clip_grad_value_, clip_grads_with_norm_, get_total_norm
from .convert_parameters import parameters_to_vector, vector_to_parameters
from . import fusion, parametrizations, parametrize, prune, rnn  # noqa: F401
from . import stateless  # noqa: F401  (deprecated functional_call, as torch.nn.utils.stateless)
from .fusion import fuse_conv_bn_eval, fuse_conv_bn_weights, fuse_linear_bn_eval, fuse_linear_bn_weights
from .memory_format import convert_conv2d_weight_memory_format, convert_conv3d_weight_memory_format
from .spectral_norm import remove_spectral_norm, spectral_norm
from .weight_norm import remove_weight_norm, weight_norm

__all__ = ["clip_grad_norm_", "clip_grad_norm", "clip_grad_value_", "get_total_norm",
           "parameters_to_vector", "vector_to_parameters", "weight_norm", "remove_weight_norm", "spectral_norm", "remove_spectral_norm",
           "skip_init", "clip_grads_with_norm_",
           "fuse_conv_bn_eval", "fuse_conv_bn_weights", "fuse_linear_bn_eval", "fuse_linear_bn_weights",
           "convert_conv2d_weight_memory_format", "convert_conv3d_weight_memory_format"]


class _NotAModuleClass(RuntimeError, TypeError):
    """PyTorch raises TypeError where Lucid raised RuntimeError: both keep callers working."""


def skip_init(module_cls, *args, **kwargs):
    """Build ``module_cls(*args, **kwargs)`` without initialising its parameters.

    As PyTorch: the module is built on the ``"meta"`` device (initialisers do nothing there),
    then given uninitialised memory on ``device`` (default ``"cpu"``, whatever the default
    device is) by :meth:`Module.to_empty`. So ``module_cls`` must take a ``device`` keyword and
    compute nothing from its parameters in ``__init__`` beyond ``nn.init`` calls.

    Raises
    ------
    RuntimeError
        ``module_cls`` is not a Module class (also a ``TypeError``), or takes no ``device``.

    Examples
    --------
    >>> import lucid.nn as nn
    >>> m = nn.utils.skip_init(nn.Linear, 3, 2)
    >>> m.weight.shape, m.weight.device.type
    ((2, 3), 'cpu')
    >>> _ = nn.init.orthogonal_(m.weight)   # the values to use are set afterwards
    """
    import inspect

    from ..module import Module

    if not (isinstance(module_cls, type) and issubclass(module_cls, Module)):
        raise _NotAModuleClass(f"skip_init: expected a Module class, got {module_cls!r}")
    if "device" not in inspect.signature(module_cls).parameters:
        raise RuntimeError("skip_init: Module must support a 'device' arg to skip initialization")
    final_device = kwargs.pop("device", "cpu")
    kwargs["device"] = "meta"
    return module_cls(*args, **kwargs).to_empty(device=final_device)
