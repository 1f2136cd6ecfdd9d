"""``lucid.nn.modules.padding``: PyTorch's module path for padding layers and their bases
``_ConstantPadNd``, ``_ReflectionPadNd``, ``_ReplicationPadNd``, ``_CircularPadNd``."""
from ..padding import (_ConstantPadNd, _ReflectionPadNd, _ReplicationPadNd, _CircularPadNd, CircularPad1d,  # noqa: F401
                       CircularPad2d, CircularPad3d, ConstantPad1d, ConstantPad2d, ConstantPad3d,
                       ReflectionPad1d, ReflectionPad2d, ReflectionPad3d, ReplicationPad1d, ReplicationPad2d,
                       ReplicationPad3d, ZeroPad1d, ZeroPad2d, ZeroPad3d)

__all__ = ["CircularPad1d", "CircularPad2d", "CircularPad3d", "ConstantPad1d", "ConstantPad2d",
           "ConstantPad3d", "ReflectionPad1d", "ReflectionPad2d", "ReflectionPad3d", "ReplicationPad1d",
           "ReplicationPad2d", "ReplicationPad3d", "ZeroPad1d", "ZeroPad2d", "ZeroPad3d"]
