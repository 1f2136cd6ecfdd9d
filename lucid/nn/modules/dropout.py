"""``lucid.nn.modules.dropout``: PyTorch's module path for dropout layers and their base ``_DropoutNd``."""
from ..dropout import (_DropoutNd, Dropout, Dropout1d, Dropout2d, Dropout3d, AlphaDropout,  # noqa: F401
                       FeatureAlphaDropout)

__all__ = ["Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout"]
