"""Graph passes (``torch.fx.passes``): ``shape_prop.ShapeProp``."""
from . import shape_prop  # noqa: F401
from .shape_prop import ShapeProp, TensorMetadata  # noqa: F401

__all__ = ["shape_prop", "ShapeProp", "TensorMetadata"]
