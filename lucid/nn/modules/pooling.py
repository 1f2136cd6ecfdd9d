"""``lucid.nn.modules.pooling``: PyTorch's module path for pooling layers and their bases
``_MaxPoolNd``, ``_AvgPoolNd``, ``_MaxUnpoolNd``, ``_LPPoolNd``, ``_AdaptiveMaxPoolNd``,
``_AdaptiveAvgPoolNd``."""
from ..pooling import (_MaxPoolNd, _MaxUnpoolNd, _AvgPoolNd, _LPPoolNd, _AdaptiveMaxPoolNd,  # noqa: F401
                       _AdaptiveAvgPoolNd, MaxPool1d, MaxPool2d, MaxPool3d, MaxUnpool1d, MaxUnpool2d,
                       MaxUnpool3d, AvgPool1d, AvgPool2d, AvgPool3d, FractionalMaxPool2d,
                       FractionalMaxPool3d, LPPool1d, LPPool2d, LPPool3d, AdaptiveMaxPool1d,
                       AdaptiveMaxPool2d, AdaptiveMaxPool3d, AdaptiveAvgPool1d, AdaptiveAvgPool2d,
                       AdaptiveAvgPool3d)

__all__ = ["MaxPool1d", "MaxPool2d", "MaxPool3d", "MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d", "AvgPool1d",
           "AvgPool2d", "AvgPool3d", "FractionalMaxPool2d", "FractionalMaxPool3d", "LPPool1d", "LPPool2d",
           "LPPool3d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveMaxPool3d", "AdaptiveAvgPool1d",
           "AdaptiveAvgPool2d", "AdaptiveAvgPool3d"]
