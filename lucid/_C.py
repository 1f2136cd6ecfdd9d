"""``lucid._C``: the names PyTorch code reaches through ``torch._C`` for the ``__torch_function__``
protocol (NOTE [Torch function] in lucid/overrides.py)."""
from ._core.tensor import _disabled_torch_function_impl  # noqa: F401
from .overrides import DisableTorchFunction, DisableTorchFunctionSubclass  # noqa: F401
