"""Testing helpers: :func:`assert_close` and :func:`make_tensor` (PyTorch's ``torch.testing``),
and the strict stand-in device (``lucid.testing.strict_device``, NOTE [Strict stand-in device]).

Importing this package loads only these helpers (the core of ``lucid`` is already loaded);
``strict_device`` loads when imported.
"""
from ._comparison import assert_close, make_tensor

__all__ = ["assert_close", "make_tensor"]
