"""``lucid.__future__`` (``torch.__future__``): flags for behaviours PyTorch will change.

NOTE [Module conversion flags]
PyTorch's ``Module._apply`` (``.to()``, ``.float()``, ``.cuda()`` ...) has three ways to put a
converted value in a parameter: ``param.data = new`` (the default), a new Parameter object
(``set_overwrite_module_params_on_conversion(True)``) or ``swap_tensors(param, new)``
(``set_swap_module_params_on_conversion(True)``, which ``load_state_dict`` follows too). The
default and the swap both keep each Parameter object, which is what Lucid's ``_apply`` and
``load_state_dict`` always do (a Lucid tensor's value is its ``_data``), so optimizers built
before a conversion keep working under either flag; overwriting makes new Parameter objects
(their ``.grad`` converted too), as in PyTorch.
"""
from __future__ import annotations

__all__ = ["set_overwrite_module_params_on_conversion", "get_overwrite_module_params_on_conversion",
           "set_swap_module_params_on_conversion", "get_swap_module_params_on_conversion"]

_FLAGS = {"overwrite": False, "swap": False}


def set_overwrite_module_params_on_conversion(value: bool) -> None:
    """Make ``Module.to()`` and friends give modules new Parameter objects (default False).

    Examples
    --------
    >>> import lucid, lucid.__future__
    >>> lucid.__future__.set_overwrite_module_params_on_conversion(True)
    >>> m = lucid.nn.Linear(2, 2)
    >>> w = m.weight
    >>> m.double().weight is w
    False
    >>> lucid.__future__.set_overwrite_module_params_on_conversion(False)
    """
    _FLAGS["overwrite"] = bool(value)


def get_overwrite_module_params_on_conversion() -> bool:
    """Whether module conversions make new Parameter objects (see the setter).

    Examples
    --------
    >>> import lucid, lucid.__future__
    >>> lucid.__future__.get_overwrite_module_params_on_conversion()
    False
    """
    return _FLAGS["overwrite"]


def set_swap_module_params_on_conversion(value: bool) -> None:
    """PyTorch's switch to ``swap_tensors`` in module conversions and ``load_state_dict``.

    Lucid's conversions and loads already keep each Parameter object and change its value
    in place, what swapping gives (NOTE [Module conversion flags]); the flag is recorded and
    takes precedence over overwriting, as in PyTorch.

    Examples
    --------
    >>> import lucid, lucid.__future__
    >>> lucid.__future__.set_swap_module_params_on_conversion(True)
    >>> lucid.__future__.get_swap_module_params_on_conversion()
    True
    >>> lucid.__future__.set_swap_module_params_on_conversion(False)
    """
    _FLAGS["swap"] = bool(value)


def get_swap_module_params_on_conversion() -> bool:
    """Whether module conversions swap parameters (see the setter).

    Examples
    --------
    >>> import lucid, lucid.__future__
    >>> lucid.__future__.get_swap_module_params_on_conversion()
    False
    """
    return _FLAGS["swap"]
