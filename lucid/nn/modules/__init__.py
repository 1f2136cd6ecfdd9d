"""``lucid.nn.modules``: PyTorch's package path for every layer class (``torch.nn.modules``), with
one submodule per PyTorch file (``lucid.nn.modules.loss._Loss``, ``.batchnorm._BatchNorm``,
``.conv._ConvNd``, ``.utils._pair`` ...) re-exporting Lucid's own classes.

Examples
--------
>>> import lucid.nn as nn
>>> from lucid.nn.modules.loss import _WeightedLoss
>>> isinstance(nn.BCELoss(), _WeightedLoss), nn.modules.Linear is nn.Linear
(True, True)
"""
from . import (activation, adaptive, batchnorm, channelshuffle, container, conv, distance, dropout,  # noqa: F401
               flatten, fold, instancenorm, lazy, linear, linear_cross_entropy, linear_cross_entropy_options,
               loss, module, normalization, padding, pixelshuffle, pooling, rnn, sparse, transformer,
               upsampling, utils)
from .pooling import (AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveAvgPool3d, AdaptiveMaxPool1d,  # noqa: F401
                      AdaptiveMaxPool2d, AdaptiveMaxPool3d, AvgPool1d, AvgPool2d, AvgPool3d,
                      FractionalMaxPool2d, FractionalMaxPool3d, LPPool1d, LPPool2d, LPPool3d, MaxPool1d,
                      MaxPool2d, MaxPool3d, MaxUnpool1d, MaxUnpool2d, MaxUnpool3d)
from .adaptive import AdaptiveLogSoftmaxWithLoss  # noqa: F401
from .dropout import AlphaDropout, Dropout, Dropout1d, Dropout2d, Dropout3d, FeatureAlphaDropout  # noqa: F401
from .loss import (BCELoss, BCEWithLogitsLoss, CTCLoss, CosineEmbeddingLoss, CrossEntropyLoss,  # noqa: F401
                   GaussianNLLLoss, HingeEmbeddingLoss, HuberLoss, KLDivLoss, L1Loss, LinearCrossEntropyLoss,
                   MSELoss, MarginRankingLoss, MultiLabelMarginLoss, MultiLabelSoftMarginLoss,
                   MultiMarginLoss, NLLLoss, NLLLoss2d, PoissonNLLLoss, SmoothL1Loss, SoftMarginLoss,
                   TripletMarginLoss, TripletMarginWithDistanceLoss)
from .batchnorm import (BatchNorm1d, BatchNorm2d, BatchNorm3d, LazyBatchNorm1d, LazyBatchNorm2d,  # noqa: F401
                        LazyBatchNorm3d, SyncBatchNorm)
from .linear import Bilinear, Identity, LazyLinear, Linear  # noqa: F401
from .activation import (CELU, ELU, GELU, GLU, Hardshrink, Hardsigmoid, Hardswish, Hardtanh, LeakyReLU,  # noqa: F401
                         LogSigmoid, LogSoftmax, Mish, MultiheadAttention, PReLU, RReLU, ReLU, ReLU6, SELU,
                         SiLU, Sigmoid, Softmax, Softmax2d, Softmin, Softplus, Softshrink, Softsign, Tanh,
                         Tanhshrink, Threshold)
from .channelshuffle import ChannelShuffle  # noqa: F401
from .padding import (CircularPad1d, CircularPad2d, CircularPad3d, ConstantPad1d, ConstantPad2d,  # noqa: F401
                      ConstantPad3d, ReflectionPad1d, ReflectionPad2d, ReflectionPad3d, ReplicationPad1d,
                      ReplicationPad2d, ReplicationPad3d, ZeroPad1d, ZeroPad2d, ZeroPad3d)
from .container import Container, ModuleDict, ModuleList, ParameterDict, ParameterList, Sequential  # noqa: F401
from .conv import (Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d, LazyConv1d,  # noqa: F401
                   LazyConv2d, LazyConv3d, LazyConvTranspose1d, LazyConvTranspose2d, LazyConvTranspose3d)
from .distance import CosineSimilarity, PairwiseDistance  # noqa: F401
from .normalization import CrossMapLRN2d, GroupNorm, LayerNorm, LocalResponseNorm, RMSNorm  # noqa: F401
from .sparse import Embedding, EmbeddingBag  # noqa: F401
from .flatten import Flatten, Unflatten  # noqa: F401
from .fold import Fold, Unfold  # noqa: F401
from .rnn import GRU, GRUCell, LSTM, LSTMCell, RNN, RNNBase, RNNCell, RNNCellBase  # noqa: F401
from .instancenorm import (InstanceNorm1d, InstanceNorm2d, InstanceNorm3d, LazyInstanceNorm1d,  # noqa: F401
                           LazyInstanceNorm2d, LazyInstanceNorm3d)
from .linear_cross_entropy_options import LinearCrossEntropyOptions  # noqa: F401
from .module import Module  # noqa: F401
from .pixelshuffle import PixelShuffle, PixelUnshuffle  # noqa: F401
from .transformer import (Transformer, TransformerDecoder, TransformerDecoderLayer, TransformerEncoder,  # noqa: F401
                          TransformerEncoderLayer)
from .upsampling import Upsample, UpsamplingBilinear2d, UpsamplingNearest2d  # noqa: F401

__all__ = [
    "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "AdaptiveLogSoftmaxWithLoss",
    "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveMaxPool3d", "AlphaDropout", "AvgPool1d",
    "AvgPool2d", "AvgPool3d", "BCELoss", "BCEWithLogitsLoss", "BatchNorm1d", "BatchNorm2d",
    "BatchNorm3d", "Bilinear", "CELU", "CTCLoss", "ChannelShuffle", "CircularPad1d", "CircularPad2d",
    "CircularPad3d", "ConstantPad1d", "ConstantPad2d", "ConstantPad3d", "Container", "Conv1d", "Conv2d",
    "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d", "CosineEmbeddingLoss",
    "CosineSimilarity", "CrossEntropyLoss", "CrossMapLRN2d", "Dropout", "Dropout1d", "Dropout2d",
    "Dropout3d", "ELU", "Embedding", "EmbeddingBag", "FeatureAlphaDropout", "Flatten", "Fold",
    "FractionalMaxPool2d", "FractionalMaxPool3d", "GELU", "GLU", "GRU", "GRUCell", "GaussianNLLLoss",
    "GroupNorm", "Hardshrink", "Hardsigmoid", "Hardswish", "Hardtanh", "HingeEmbeddingLoss",
    "HuberLoss", "Identity", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "KLDivLoss",
    "L1Loss", "LPPool1d", "LPPool2d", "LPPool3d", "LSTM", "LSTMCell", "LayerNorm", "LazyBatchNorm1d",
    "LazyBatchNorm2d", "LazyBatchNorm3d", "LazyConv1d", "LazyConv2d", "LazyConv3d",
    "LazyConvTranspose1d", "LazyConvTranspose2d", "LazyConvTranspose3d", "LazyInstanceNorm1d",
    "LazyInstanceNorm2d", "LazyInstanceNorm3d", "LazyLinear", "LeakyReLU", "Linear",
    "LinearCrossEntropyLoss", "LinearCrossEntropyOptions", "LocalResponseNorm", "LogSigmoid",
    "LogSoftmax", "MSELoss", "MarginRankingLoss", "MaxPool1d", "MaxPool2d", "MaxPool3d", "MaxUnpool1d",
    "MaxUnpool2d", "MaxUnpool3d", "Mish", "Module", "ModuleDict", "ModuleList", "MultiLabelMarginLoss",
    "MultiLabelSoftMarginLoss", "MultiMarginLoss", "MultiheadAttention", "NLLLoss", "NLLLoss2d",
    "PReLU", "PairwiseDistance", "ParameterDict", "ParameterList", "PixelShuffle", "PixelUnshuffle",
    "PoissonNLLLoss", "RMSNorm", "RNN", "RNNBase", "RNNCell", "RNNCellBase", "RReLU", "ReLU", "ReLU6",
    "ReflectionPad1d", "ReflectionPad2d", "ReflectionPad3d", "ReplicationPad1d", "ReplicationPad2d",
    "ReplicationPad3d", "SELU", "Sequential", "SiLU", "Sigmoid", "SmoothL1Loss", "SoftMarginLoss",
    "Softmax", "Softmax2d", "Softmin", "Softplus", "Softshrink", "Softsign", "SyncBatchNorm", "Tanh",
    "Tanhshrink", "Threshold", "Transformer", "TransformerDecoder", "TransformerDecoderLayer",
    "TransformerEncoder", "TransformerEncoderLayer", "TripletMarginLoss",
    "TripletMarginWithDistanceLoss", "Unflatten", "Unfold", "Upsample", "UpsamplingBilinear2d",
    "UpsamplingNearest2d", "ZeroPad1d", "ZeroPad2d", "ZeroPad3d"
]
