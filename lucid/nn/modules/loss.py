"""``lucid.nn.modules.loss``: PyTorch's module path for loss modules and their bases ``_Loss`` and
``_WeightedLoss``."""
from ..loss import (_Loss, _WeightedLoss, L1Loss, NLLLoss, NLLLoss2d, PoissonNLLLoss, GaussianNLLLoss,  # noqa: F401
                    KLDivLoss, MSELoss, BCELoss, BCEWithLogitsLoss, HingeEmbeddingLoss, MultiLabelMarginLoss,
                    SmoothL1Loss, HuberLoss, SoftMarginLoss, CrossEntropyLoss, MultiLabelSoftMarginLoss,
                    CosineEmbeddingLoss, MarginRankingLoss, MultiMarginLoss, TripletMarginLoss,
                    TripletMarginWithDistanceLoss, CTCLoss)
from ..linear_cross_entropy import LinearCrossEntropyLoss  # noqa: F401

__all__ = ["L1Loss", "NLLLoss", "NLLLoss2d", "PoissonNLLLoss", "GaussianNLLLoss", "KLDivLoss", "MSELoss",
           "BCELoss", "BCEWithLogitsLoss", "HingeEmbeddingLoss", "MultiLabelMarginLoss", "SmoothL1Loss",
           "HuberLoss", "SoftMarginLoss", "CrossEntropyLoss", "LinearCrossEntropyLoss",
           "MultiLabelSoftMarginLoss", "CosineEmbeddingLoss", "MarginRankingLoss", "MultiMarginLoss",
           "TripletMarginLoss", "TripletMarginWithDistanceLoss", "CTCLoss"]
