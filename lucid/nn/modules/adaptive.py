"""``lucid.nn.modules.adaptive``: PyTorch's module path for ``AdaptiveLogSoftmaxWithLoss`` and its
output tuple."""
from ..adaptive import AdaptiveLogSoftmaxWithLoss, _ASMoutput  # noqa: F401

__all__ = ["AdaptiveLogSoftmaxWithLoss"]
