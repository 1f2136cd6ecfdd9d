"""Graph passes (``torch.fx.passes``): ``shape_prop.ShapeProp``, ``split_module.split_module``."""
from . import shape_prop, split_module  # noqa: F401
from .shape_prop import ShapeProp, TensorMetadata  # noqa: F401

__all__ = ["shape_prop", "split_module", "ShapeProp", "TensorMetadata"]
