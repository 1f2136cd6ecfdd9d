"""lucid.utils."""
from . import data  # noqa: F401


def swap_tensors(t1, t2):
    """Swap the contents of two tensors in place, keeping each Python object (``torch.utils.swap_tensors``).

    After the call ``t1`` holds what ``t2`` held (its data, dtype, device, autograd state and
    Python attributes, even its class: a Parameter swapped with a plain tensor becomes a plain
    tensor) and the other way round; every reference to ``t1`` sees the new contents. It is
    what ``lucid.__future__.set_swap_module_params_on_conversion(True)`` names.

    Parameters
    ----------
    t1, t2 : Tensor
        The tensors. Neither may have weak references, and their classes must have the same
        ``__slots__``.

    Raises
    ------
    TypeError
        If either argument is not a Tensor.
    RuntimeError
        If either tensor has weak references, is a view or has live views, or the slots differ.

    Notes
    -----
    Limitation: PyTorch also refuses a tensor still held elsewhere by its autograd graph and
    poisons a leaf's gradient accumulator so that a backward through a graph recorded before
    the swap raises. Lucid has no reference counts to check: swap before the forward (or after
    the backward), as PyTorch requires, or the old graph's gradients reach the swapped object.
    Lucid also refuses views and tensors with live views, which PyTorch swaps: its views are
    kept in step with their base through weak references to the tensor objects.

    Examples
    --------
    >>> import lucid, lucid.utils
    >>> t1, t2 = lucid.arange(2), lucid.arange(3)
    >>> t1.foo = "t1"
    >>> lucid.utils.swap_tensors(t1, t2)
    >>> t1, t2, t2.foo
    (tensor([0, 1, 2]), tensor([0, 1]), 't1')
    """
    import copyreg
    import weakref

    from .._core.tensor import Tensor

    if not isinstance(t1, Tensor) or not isinstance(t2, Tensor):
        raise TypeError(f"swap_tensors: expected two Tensors, got {type(t1).__name__} and {type(t2).__name__}")
    for name, t in (("t1", t1), ("t2", t2)):
        if t._base is not None or any(r() is not None for r in (t._views or ())):
            raise RuntimeError(f"swap_tensors: cannot swap {name} because it is a view or has live views; Lucid "
                               "replays views through weak references to these objects (NOTE [View replay])")
        if weakref.getweakrefs(t):
            raise RuntimeError(f"swap_tensors: cannot swap {name} because it has weakref associated with it")
    slots = set(copyreg._slotnames(t1.__class__))
    if slots != set(copyreg._slotnames(t2.__class__)):
        raise RuntimeError("swap_tensors: cannot swap t1 and t2 if they have different slots")
    t1.__class__, t2.__class__ = t2.__class__, t1.__class__
    t1.__dict__, t2.__dict__ = t2.__dict__, t1.__dict__  # a Tensor's whole state lives in its __dict__
    missing = object()
    for slot in slots:
        a, b = getattr(t1, slot, missing), getattr(t2, slot, missing)
        for t, v in ((t1, b), (t2, a)):
            if v is missing:
                if hasattr(t, slot):
                    delattr(t, slot)
            else:
                setattr(t, slot, v)


def __getattr__(name):  # ``lucid.utils.checkpoint`` / ``.benchmark`` after ``import lucid``, as in PyTorch
    if name in ("checkpoint", "benchmark", "tensorboard", "dlpack", "hooks", "_pytree", "flop_counter",
                "module_tracker"):
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
