"""Loss modules: thin wrappers over ``lucid.nn.functional`` holding the options."""
from __future__ import annotations

from . import functional as F
from .functional.loss import _legacy_reduction
from .module import Module

__all__ = [
    "MSELoss", "L1Loss", "SmoothL1Loss", "HuberLoss", "CrossEntropyLoss", "NLLLoss", "BCELoss",
    "BCEWithLogitsLoss", "KLDivLoss", "SoftMarginLoss", "PoissonNLLLoss", "MarginRankingLoss",
    "HingeEmbeddingLoss", "GaussianNLLLoss", "TripletMarginLoss", "TripletMarginWithDistanceLoss",
    "CosineEmbeddingLoss", "MultiMarginLoss", "MultiLabelMarginLoss", "MultiLabelSoftMarginLoss", "CTCLoss",
    "NLLLoss2d",
]


class _Loss(Module):
    def __init__(self, size_average=None, reduce=None, reduction="mean"):
        super().__init__()
        self.reduction = _legacy_reduction(size_average, reduce, reduction)


class _WeightedLoss(_Loss):
    def __init__(self, weight=None, size_average=None, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)


class MSELoss(_Loss):
    """Mean squared error.

    Parameters
    ----------
    reduction : {'mean', 'sum', 'none'}
        How the per-element losses are combined.
    size_average, reduce : optional
        Deprecated PyTorch arguments that override ``reduction``.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.MSELoss()(lucid.tensor([1.0, 3.0]), lucid.tensor([1.0, 1.0]))
    tensor(2.)
    """

    def forward(self, input, target):
        return F.mse_loss(input, target, reduction=self.reduction)


class L1Loss(_Loss):
    """Mean absolute error.

    Parameters
    ----------
    reduction : {'mean', 'sum', 'none'}
        How the per-element losses are combined.
    size_average, reduce : optional
        Deprecated PyTorch arguments that override ``reduction``.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.L1Loss()(lucid.tensor([1.0, 3.0]), lucid.tensor([2.0, 1.0])).item()
    1.5
    """

    def forward(self, input, target):
        return F.l1_loss(input, target, reduction=self.reduction)


class SmoothL1Loss(_Loss):
    """Squared error below ``beta`` (halved and scaled by ``1 / beta``), absolute error above.

    Parameters
    ----------
    reduction : {'mean', 'sum', 'none'}
        How the per-element losses are combined.
    size_average, reduce : optional
        Deprecated PyTorch arguments that override ``reduction``.
    beta : float
        Where the loss switches from quadratic to linear.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.SmoothL1Loss()(lucid.tensor([0.0, 3.0]), lucid.tensor([0.5, 0.0])).tolist()
    1.3125
    """
    def __init__(self, size_average=None, reduce=None, reduction="mean", beta=1.0):
        super().__init__(size_average, reduce, reduction)
        self.beta = beta

    def forward(self, input, target):
        return F.smooth_l1_loss(input, target, reduction=self.reduction, beta=self.beta)


class HuberLoss(_Loss):
    """Huber loss: ``0.5 d^2`` for ``|d| <= delta``, else ``delta * (|d| - 0.5 delta)``.

    Parameters
    ----------
    reduction : {'mean', 'sum', 'none'}
        How the per-element losses are combined.
    delta : float
        Where the loss switches from quadratic to linear.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.HuberLoss(reduction='sum')(lucid.tensor([0.0, 3.0]), lucid.tensor([0.5, 0.0])).item()
    2.625
    """
    def __init__(self, reduction="mean", delta=1.0):
        if not isinstance(delta, (float, int)):  # PyTorch refuses at construction (e.g. a complex delta)
            raise TypeError(f"HuberLoss: delta must be a float or int, got: {type(delta)}")
        super().__init__(reduction=reduction)
        self.delta = delta

    def forward(self, input, target):
        return F.huber_loss(input, target, reduction=self.reduction, delta=self.delta)


class CrossEntropyLoss(_WeightedLoss):
    """Cross entropy from logits; see :func:`lucid.nn.functional.cross_entropy`.

    Parameters
    ----------
    weight : Tensor, optional
        A weight per class (or per element).
    ignore_index : int
        Targets with this value contribute nothing.
    reduction : {'mean', 'sum', 'none'}
        How the per-element losses are combined.
    size_average, reduce : optional
        Deprecated PyTorch arguments that override ``reduction``.
    label_smoothing : float
        Mix the one-hot target with the uniform distribution by this amount.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> loss = nn.CrossEntropyLoss()(lucid.tensor([[2.0, 0.0]]), lucid.tensor([0]))
    >>> round(loss.item(), 4)
    0.1269
    """

    def __init__(self, weight=None, size_average=None, ignore_index=-100, reduce=None,
                 reduction="mean", label_smoothing=0.0):
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index, self.label_smoothing = ignore_index, label_smoothing

    def forward(self, input, target):
        return F.cross_entropy(input, target, weight=self.weight, ignore_index=self.ignore_index,
                               reduction=self.reduction, label_smoothing=self.label_smoothing)


class NLLLoss(_WeightedLoss):
    """Negative log-likelihood of class indices from log-probabilities.

    Parameters
    ----------
    weight : Tensor, optional
        A weight per class (or per element).
    ignore_index : int
        Targets with this value contribute nothing.
    reduction : {'mean', 'sum', 'none'}
        How the per-element losses are combined.
    size_average, reduce : optional
        Deprecated PyTorch arguments that override ``reduction``.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.NLLLoss()(lucid.tensor([[-1.0, -2.0]]), lucid.tensor([1])).item()
    2.0
    """
    def __init__(self, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean"):
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index

    def forward(self, input, target):
        return F.nll_loss(input, target, weight=self.weight, ignore_index=self.ignore_index,
                          reduction=self.reduction)


_NLLLOSS2D_DEPRECATED = ("`NLLLoss2d` has been deprecated. Please use `NLLLoss` instead as a drop-in replacement "
                         "and see https://pytorch.org/docs/main/nn.html#torch.nn.NLLLoss for more details.")


class NLLLoss2d(NLLLoss):
    """Deprecated alias of :class:`NLLLoss` (PyTorch's): making one, or subclassing it, warns
    with a FutureWarning; it computes exactly what ``NLLLoss`` does.

    Examples
    --------
    >>> import warnings, lucid, lucid.nn as nn
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore", FutureWarning)
    ...     loss = nn.NLLLoss2d()
    >>> loss(lucid.tensor([[-1.0, -2.0]]), lucid.tensor([1])).item()
    2.0
    """

    def __init_subclass__(cls, **kwargs):
        import warnings

        warnings.warn(_NLLLOSS2D_DEPRECATED, FutureWarning, stacklevel=2)
        super().__init_subclass__(**kwargs)

    def __init__(self, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean"):
        if type(self) is NLLLoss2d:  # as typing_extensions.deprecated: subclasses warned when defined
            import warnings

            warnings.warn(_NLLLOSS2D_DEPRECATED, FutureWarning, stacklevel=2)
        super().__init__(weight, size_average, ignore_index, reduce, reduction)


class BCELoss(_WeightedLoss):
    """Binary cross entropy of probabilities: ``-(y log p + (1 - y) log(1 - p))``.

    Parameters
    ----------
    weight : Tensor, optional
        A weight per class (or per element).
    reduction : {'mean', 'sum', 'none'}
        How the per-element losses are combined.
    size_average, reduce : optional
        Deprecated PyTorch arguments that override ``reduction``.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> round(nn.BCELoss()(lucid.tensor([0.5]), lucid.tensor([1.0])).item(), 4)
    0.6931
    """
    def forward(self, input, target):
        return F.binary_cross_entropy(input, target, weight=self.weight, reduction=self.reduction)


class BCEWithLogitsLoss(_Loss):
    """Binary cross entropy from logits (sigmoid folded in, numerically stable).

    Parameters
    ----------
    weight : Tensor, optional
        A weight per class (or per element).
    reduction : {'mean', 'sum', 'none'}
        How the per-element losses are combined.
    size_average, reduce : optional
        Deprecated PyTorch arguments that override ``reduction``.
    pos_weight : Tensor, optional
        Weight of the positive term, per class.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> round(nn.BCEWithLogitsLoss()(lucid.tensor([0.0]), lucid.tensor([1.0])).item(), 4)
    0.6931
    """
    def __init__(self, weight=None, size_average=None, reduce=None, reduction="mean", pos_weight=None):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)
        self.register_buffer("pos_weight", pos_weight)

    def forward(self, input, target):
        return F.binary_cross_entropy_with_logits(input, target, self.weight, reduction=self.reduction,
                                                  pos_weight=self.pos_weight)


class KLDivLoss(_Loss):
    """Kullback-Leibler divergence ``target * (log(target) - input)`` with ``input`` given as log-probabilities.

    Parameters
    ----------
    reduction : {'mean', 'sum', 'none'}
        How the per-element losses are combined.
    size_average, reduce : optional
        Deprecated PyTorch arguments that override ``reduction``.
    log_target : bool
        Whether ``target`` is given as log-probabilities too.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.KLDivLoss(reduction='sum')(lucid.tensor([0.5, 0.5]).log(), lucid.tensor([0.5, 0.5])).item()
    0.0
    """
    def __init__(self, size_average=None, reduce=None, reduction="mean", log_target=False):
        super().__init__(size_average, reduce, reduction)
        self.log_target = log_target

    def forward(self, input, target):
        return F.kl_div(input, target, reduction=self.reduction, log_target=self.log_target)


class SoftMarginLoss(_Loss):
    """Two-class logistic loss ``log(1 + exp(-y x))`` for targets ``y`` in {-1, 1}.

    Parameters
    ----------
    reduction : {'mean', 'sum', 'none'}
        How the per-element losses are combined.
    size_average, reduce : optional
        Deprecated PyTorch arguments that override ``reduction``.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> round(nn.SoftMarginLoss()(lucid.tensor([0.0]), lucid.tensor([1.0])).item(), 4)
    0.6931
    """
    def forward(self, input, target):
        return F.soft_margin_loss(input, target, reduction=self.reduction)


class PoissonNLLLoss(_Loss):
    """Poisson negative log-likelihood: ``exp(x) - y x`` (``log_input=True``) or ``x - y log(x + eps)``.

    Parameters
    ----------
    log_input : bool
        Whether the input is the log of the rate.
    full : bool
        Add the Stirling approximation term.
    eps : float
        Keeps the log finite when ``log_input=False``.
    reduction : {'mean', 'sum', 'none'}
        How the per-element losses are combined.
    size_average, reduce : optional
        Deprecated PyTorch arguments that override ``reduction``.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.PoissonNLLLoss()(lucid.tensor([0.0]), lucid.tensor([1.0])).item()
    1.0
    """
    def __init__(self, log_input=True, full=False, size_average=None, eps=1e-8, reduce=None,
                 reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.log_input, self.full, self.eps = log_input, full, eps

    def forward(self, log_input, target):
        return F.poisson_nll_loss(log_input, target, log_input=self.log_input, full=self.full,
                                  eps=self.eps, reduction=self.reduction)


class MarginRankingLoss(_Loss):
    """``max(0, -y * (x1 - x2) + margin)`` for targets ``y`` in {-1, 1}.

    Parameters
    ----------
    margin : float
        The required gap.
    reduction : {'mean', 'sum', 'none'}
        How the per-element losses are combined.
    size_average, reduce : optional
        Deprecated PyTorch arguments that override ``reduction``.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.MarginRankingLoss()(lucid.tensor([1.0]), lucid.tensor([3.0]), lucid.tensor([1.0])).item()
    2.0
    """
    def __init__(self, margin=0.0, size_average=None, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.margin = margin

    def forward(self, input1, input2, target):
        return F.margin_ranking_loss(input1, input2, target, margin=self.margin, reduction=self.reduction)


class HingeEmbeddingLoss(_Loss):
    """``x`` where ``y = 1`` and ``max(0, margin - x)`` where ``y = -1``.

    Parameters
    ----------
    margin : float
        The margin for the negative pairs.
    reduction : {'mean', 'sum', 'none'}
        How the per-element losses are combined.
    size_average, reduce : optional
        Deprecated PyTorch arguments that override ``reduction``.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.HingeEmbeddingLoss(reduction="sum")(lucid.tensor([0.5, 2.0]), lucid.tensor([-1.0, 1.0])).item()
    2.5
    """
    def __init__(self, margin=1.0, size_average=None, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.margin = margin

    def forward(self, input, target):
        return F.hinge_embedding_loss(input, target, margin=self.margin, reduction=self.reduction)


def _doc(text, example):
    return (f"{text}\n\nParameters are those of the functional form; ``reduction`` is 'mean', 'sum' or "
            f"'none'.\n\nExamples\n--------\n>>> import lucid, lucid.nn as nn\n{example}\n")


class GaussianNLLLoss(_Loss):
    __doc__ = _doc("Gaussian negative log likelihood (``F.gaussian_nll_loss``); ``forward(input, target, var)``.",
                   ">>> nn.GaussianNLLLoss()(lucid.zeros(2), lucid.zeros(2), lucid.ones(2)).item()\n0.0")

    def __init__(self, *, full=False, eps=1e-6, reduction="mean"):
        super().__init__(None, None, reduction)
        self.full, self.eps = full, eps

    def forward(self, input, target, var):
        return F.gaussian_nll_loss(input, target, var, full=self.full, eps=self.eps, reduction=self.reduction)


class TripletMarginLoss(_Loss):
    __doc__ = _doc("Triplet margin loss with the pairwise p-norm distance (``F.triplet_margin_loss``).",
                   ">>> nn.TripletMarginLoss(margin=1.0, eps=0.0)(lucid.zeros(1, 2), lucid.zeros(1, 2), "
                   "lucid.zeros(1, 2)).item()\n1.0")

    def __init__(self, margin=1.0, p=2.0, eps=1e-6, swap=False, size_average=None, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.margin, self.p, self.eps, self.swap = margin, p, eps, swap

    def forward(self, anchor, positive, negative):
        return F.triplet_margin_loss(anchor, positive, negative, margin=self.margin, p=self.p, eps=self.eps,
                                     swap=self.swap, reduction=self.reduction)


class TripletMarginWithDistanceLoss(_Loss):
    __doc__ = _doc("Triplet margin loss with any distance function (``F.triplet_margin_with_distance_loss``).",
                   ">>> nn.TripletMarginWithDistanceLoss(margin=2.0)(lucid.zeros(1, 2), lucid.zeros(1, 2), "
                   "lucid.zeros(1, 2)).item()\n2.0")

    def __init__(self, *, distance_function=None, margin=1.0, swap=False, reduction="mean"):
        super().__init__(None, None, reduction)
        if distance_function is None:  # a child module, as PyTorch's (its repr lists it)
            from .distance import PairwiseDistance

            distance_function = PairwiseDistance()
        self.distance_function, self.margin, self.swap = distance_function, margin, swap

    def forward(self, anchor, positive, negative):
        return F.triplet_margin_with_distance_loss(anchor, positive, negative,
                                                   distance_function=self.distance_function, margin=self.margin,
                                                   swap=self.swap, reduction=self.reduction)


class CosineEmbeddingLoss(_Loss):
    __doc__ = _doc("Cosine embedding loss (``F.cosine_embedding_loss``); ``forward(x1, x2, y)``, y in {1, -1}.",
                   ">>> x = lucid.tensor([[1.0, 0.0]])\n>>> nn.CosineEmbeddingLoss()(x, x, lucid.tensor([1])).item()\n0.0")

    def __init__(self, margin=0.0, size_average=None, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.margin = margin

    def forward(self, input1, input2, target):
        return F.cosine_embedding_loss(input1, input2, target, margin=self.margin, reduction=self.reduction)


class MultiMarginLoss(_WeightedLoss):
    __doc__ = _doc("Multi-class hinge loss (``F.multi_margin_loss``).",
                   ">>> nn.MultiMarginLoss()(lucid.tensor([[0.0, 5.0]]), lucid.tensor([1])).item()\n0.0")

    def __init__(self, p=1, margin=1.0, weight=None, size_average=None, reduce=None, reduction="mean"):
        super().__init__(weight, size_average, reduce, reduction)
        if p not in (1, 2):
            raise ValueError(f"MultiMarginLoss: only p == 1 and p == 2 supported, got {p}")
        self.p, self.margin = p, margin

    def forward(self, input, target):
        return F.multi_margin_loss(input, target, p=self.p, margin=self.margin, weight=self.weight,
                                   reduction=self.reduction)


class MultiLabelMarginLoss(_Loss):
    __doc__ = _doc("Multi-label hinge loss (``F.multilabel_margin_loss``); targets end at the first -1.",
                   ">>> nn.MultiLabelMarginLoss()(lucid.tensor([[5.0, 0.0]]), lucid.tensor([[0, -1]])).item()\n0.0")

    def forward(self, input, target):
        return F.multilabel_margin_loss(input, target, reduction=self.reduction)


class MultiLabelSoftMarginLoss(_WeightedLoss):
    __doc__ = _doc("Multi-label one-versus-all logistic loss (``F.multilabel_soft_margin_loss``).",
                   ">>> round(nn.MultiLabelSoftMarginLoss()(lucid.zeros(1, 2), lucid.tensor([[1.0, 0.0]])).item(), 4)"
                   "\n0.6931")

    def forward(self, input, target):
        return F.multilabel_soft_margin_loss(input, target, weight=self.weight, reduction=self.reduction)


class CTCLoss(_Loss):
    __doc__ = _doc("Connectionist temporal classification loss (``F.ctc_loss``); ``forward(log_probs, targets, "
                   "input_lengths, target_lengths)``.",
                   ">>> lp = lucid.log(lucid.full((1, 1, 2), 0.5))\n"
                   ">>> round(nn.CTCLoss(reduction='sum')(lp, lucid.tensor([[1]]), [1], [1]).item(), 4)\n0.6931")

    def __init__(self, blank=0, reduction="mean", zero_infinity=False):
        super().__init__(None, None, reduction)
        self.blank, self.zero_infinity = blank, zero_infinity

    def forward(self, log_probs, targets, input_lengths, target_lengths):
        return F.ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=self.blank,
                          reduction=self.reduction, zero_infinity=self.zero_infinity)
