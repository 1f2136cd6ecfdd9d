"""Testing helpers: :func:`assert_close`, :func:`make_tensor` and the deprecated
:func:`assert_allclose` (PyTorch's ``torch.testing``),
and the strict stand-in device (``lucid.testing.strict_device``, NOTE [Strict stand-in device]).

Importing this package loads only these helpers (the core of ``lucid`` is already loaded);
``strict_device`` loads when imported.
"""
from ._comparison import assert_close, make_tensor
from ._deprecated import assert_allclose

__all__ = ["assert_close", "make_tensor", "assert_allclose"]
