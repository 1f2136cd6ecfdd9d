"""Project-MONAI/MONAI run on Lucid (``import lucid as torch``).

Ported from ``monai/``, text kept, trimmed to the code paths used:

- ``networks/utils.py``: ``one_hot`` (``torch.zeros(size=...)`` then ``scatter_(dim, index, value=1)``).
- ``losses/dice.py``: ``DiceLoss`` (sigmoid/softmax/other_act, include_background, to_onehot_y,
  squared_pred, jaccard, batch, the three reductions), ``GeneralizedDiceLoss`` (its weights made
  finite by ``for b in w: b[infs] = 0.0; b[infs] = torch.max(b)``, writes through the row views of
  an iteration), ``DiceCELoss``; ``losses/utils.py``'s ``compute_tp_fp_fn`` (both branches, the soft
  one through ``torch.linalg.vector_norm`` over several dims) with ``losses/tversky.py``'s
  ``TverskyLoss``; ``losses/focal_loss.py``'s ``FocalLoss`` with ``sigmoid_focal_loss`` and
  ``softmax_focal_loss`` (``register_buffer`` of ``None`` then a class-weight tensor, ``.to(loss)``).
- ``metrics``: ``compute_dice`` (``meandice.py``'s ``compute_meandice`` with ``ignore_empty``),
  ``compute_iou`` (``meaniou.py``), ``utils.py``'s ``do_metric_reduction`` and
  ``ignore_background``, ``confusion_matrix.py``'s ``get_confusion_matrix`` and
  ``compute_confusion_matrix_metric``, ``rocauc.py``'s ``_calculate``/``compute_roc_auc`` (``unique``,
  ``Tensor.equal``, ``argsort``, ``.cpu().numpy()`` and the tie-aware running sum).
- ``losses/hausdorff_loss.py``'s ``HausdorffDTLoss``/``LogHausdorffDTLoss`` (``@torch.no_grad()`` on a
  method, ``input[:, [i]]``, ``bool(mask.any())``, the distance fields from ``scipy.ndimage`` through
  ``transforms/utils.py``'s host path of ``distance_transform_edt``, written into ``field[batch_idx]``).
- ``losses/ssim_loss.py``'s ``SSIMLoss`` (2-D and 3-D, the channel loop through ``torch.stack``) and
  ``metrics/regression.py``'s ``_gaussian_kernel``, ``compute_ssim_and_cs`` (grouped ``conv2d``/``conv3d``
  with an expanded kernel) and ``compute_ms_ssim`` (``avg_pool``, ``relu``, ``prod`` of powers).
- ``inferers/utils.py``'s ``sliding_window_inference`` with ``_get_scan_interval`` and
  ``data/utils.py``'s ``compute_importance_map`` (separable Gaussian, ``torch.clamp_``),
  ``dense_patch_slices`` and ``get_valid_patch_size``: windows cut with a *list* of slices
  (``inputs[win_slice]``, ``output[original_idx_zoom] += ...``, ``output_i[final_slicing]``).
- ``networks/blocks/convolutions.py``: ``Convolution`` and ``ResidualUnit`` (the layer factories
  ``Conv``/``Norm``/``Act`` written out as small tables, ``same_padding`` from ``layers/convutils.py``).

Checks without PyTorch: every loss against a NumPy recomputation (sums over axes), their float64
gradients by ``gradcheck`` (the focal loss casts to float32, so its gradient is checked against
NumPy central differences of the same formula), the metrics against NumPy and AUC against the
Mann-Whitney rank formula with ties, the Gaussian importance map against a NumPy outer product,
sliding-window inference of a pointwise linear network against one full-volume call and of a
window-mean predictor against a NumPy blend of the windows, SSIM (uniform and Gaussian windows,
2-D/3-D, MS-SSIM) against NumPy correlations, the Hausdorff distance-transform loss against
``scipy.ndimage`` fields and its gradient in closed form, a 3-D ``ResidualUnit`` forward against a
NumPy convolution/instance-norm/PReLU, and a few Adam steps on a Dice+CE loss going down. The
``*_torch_parity`` tests run the same text on PyTorch (float64 to 1e-10, float32 to 1e-5).

Adapted: ``Resize`` of the importance map, ``MetaTensor``, ``tqdm`` and dict/tuple predictor outputs
are left out of ``sliding_window_inference`` (the predictors here keep the window size and return
one tensor); ``convert_data_type(x, torch.Tensor, device, dtype)[0]`` is written ``x.to(device,
dtype)``; MONAI's ``StrEnum``s are plain ``Enum``s with ``look_up_option`` reduced to a lookup.

Fixed on the way: indexing with a *list* holding slices (MONAI's sliding window,
``inputs[[slice(0, 1), slice(None), slice(0, 4), ...]]``) raised ``IndexError: getitem: index
arrays must be integer or bool, got object``; PyTorch (as NumPy once did) reads a short list that
holds a slice, None, Ellipsis, a tensor or a sequence as a tuple key, with a deprecation warning
(so ``x[[t0, t1]]`` of two index tensors is ``x[t0, t1]`` and ``x[[[0, 1], [1, 2]]]`` is
``x[[0, 1], [1, 2]]``, as in PyTorch). ``F.cross_entropy``/``nll_loss`` on a spatial (or weighted)
target with a class out of range said ``one_hot: class values must be in ...``; it now names the
loss (``cross_entropy: target class values must be in [0, 3), got range [0, 3] ...``), still an
``IndexError`` as PyTorch's "Target 3 is out of bounds.".
"""
import math
import warnings
from enum import Enum
from importlib import import_module
from types import SimpleNamespace

import numpy as np
import pytest

import lucid
import lucid.nn  # noqa: F401
import lucid.optim  # noqa: F401


# ----------------------------------------------------------------------------- monai.utils (trimmed)
class LossReduction(Enum):
    NONE = "none"
    MEAN = "mean"
    SUM = "sum"


class Weight(Enum):
    SIMPLE = "simple"
    SQUARE = "square"
    UNIFORM = "uniform"


class BlendMode(Enum):
    CONSTANT = "constant"
    GAUSSIAN = "gaussian"


class PytorchPadMode(Enum):
    CONSTANT = "constant"
    REFLECT = "reflect"
    REPLICATE = "replicate"
    CIRCULAR = "circular"


class Average(Enum):
    MACRO = "macro"
    WEIGHTED = "weighted"
    MICRO = "micro"
    NONE = "none"


class MetricReduction(Enum):
    NONE = "none"
    MEAN = "mean"
    SUM = "sum"
    MEAN_BATCH = "mean_batch"
    SUM_BATCH = "sum_batch"
    MEAN_CHANNEL = "mean_channel"
    SUM_CHANNEL = "sum_channel"


def look_up_option(opt, supported):
    return opt if isinstance(opt, supported) else supported(opt)


def ensure_tuple_rep(tup, dim):
    if not isinstance(tup, (list, tuple)):
        return (tup,) * dim
    if len(tup) == dim:
        return tuple(tup)
    raise ValueError(f"Sequence must have length {dim}, got {len(tup)}.")


def ensure_tuple_size(tup, dim, pad_val=0):
    tup = tuple(tup) if isinstance(tup, (list, tuple)) else (tup,)
    return (tup + (pad_val,) * dim)[:dim]


def fall_back_tuple(user_provided, default):
    ndim = len(default)
    user = ensure_tuple_rep(user_provided, ndim)
    return tuple(default_c if (user_c is None or user_c <= 0) else user_c for default_c, user_c in zip(default, user))


def first(iterable, default=None):
    for i in iterable:
        return i
    return default


def same_padding(kernel_size, dilation=1):
    kernel_size_np = np.atleast_1d(kernel_size)
    dilation_np = np.atleast_1d(dilation)
    padding_np = (kernel_size_np - 1) / 2 * dilation_np
    padding = tuple(int(p) for p in padding_np)
    return padding if len(padding) > 1 else padding[0]


_CACHE = {}


def monai(torch):
    """The ported MONAI modules, built once per framework."""
    if torch.__name__ not in _CACHE:
        _CACHE[torch.__name__] = _build(torch)
    return _CACHE[torch.__name__]


def _build(torch):
    nn = torch.nn
    F = torch.nn.functional
    LA = torch.linalg
    _Loss = import_module(torch.__name__ + ".nn.modules.loss")._Loss

    # ------------------------------------------------------------------ networks/utils.py
    def one_hot(labels: torch.Tensor, num_classes: int, dtype: torch.dtype = torch.float, dim: int = 1) -> torch.Tensor:
        # if `dim` is bigger, add singleton dim at the end
        if labels.ndim < dim + 1:
            shape = list(labels.shape) + [1] * (dim + 1 - len(labels.shape))
            labels = torch.reshape(labels, shape)

        sh = list(labels.shape)

        if sh[dim] != 1:
            raise AssertionError("labels should have a channel with length equal to one.")

        sh[dim] = num_classes

        o = torch.zeros(size=sh, dtype=dtype, device=labels.device)
        labels = o.scatter_(dim=dim, index=labels.long(), value=1)

        return labels

    # ------------------------------------------------------------------ losses/dice.py
    class DiceLoss(_Loss):
        def __init__(
            self,
            include_background=True,
            to_onehot_y=False,
            sigmoid=False,
            softmax=False,
            other_act=None,
            squared_pred=False,
            jaccard=False,
            reduction=LossReduction.MEAN,
            smooth_nr=1e-5,
            smooth_dr=1e-5,
            batch=False,
        ) -> None:
            super().__init__(reduction=LossReduction(reduction).value)
            if other_act is not None and not callable(other_act):
                raise TypeError(f"other_act must be None or callable but is {type(other_act).__name__}.")
            if int(sigmoid) + int(softmax) + int(other_act is not None) > 1:
                raise ValueError("Incompatible values: more than 1 of [sigmoid=True, softmax=True, other_act is not None].")
            self.include_background = include_background
            self.to_onehot_y = to_onehot_y
            self.sigmoid = sigmoid
            self.softmax = softmax
            self.other_act = other_act
            self.squared_pred = squared_pred
            self.jaccard = jaccard
            self.smooth_nr = float(smooth_nr)
            self.smooth_dr = float(smooth_dr)
            self.batch = batch

        def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
            if self.sigmoid:
                input = torch.sigmoid(input)

            n_pred_ch = input.shape[1]
            if self.softmax:
                if n_pred_ch == 1:
                    warnings.warn("single channel prediction, `softmax=True` ignored.")
                else:
                    input = torch.softmax(input, 1)

            if self.other_act is not None:
                input = self.other_act(input)

            if self.to_onehot_y:
                if n_pred_ch == 1:
                    warnings.warn("single channel prediction, `to_onehot_y=True` ignored.")
                else:
                    target = one_hot(target, num_classes=n_pred_ch)

            if not self.include_background:
                if n_pred_ch == 1:
                    warnings.warn("single channel prediction, `include_background=False` ignored.")
                else:
                    # if skipping background, removing first channel
                    target = target[:, 1:]
                    input = input[:, 1:]

            if target.shape != input.shape:
                raise AssertionError(f"ground truth has different shape ({target.shape}) from input ({input.shape})")

            # reducing only spatial dimensions (not batch nor channels)
            reduce_axis = torch.arange(2, len(input.shape)).tolist()
            if self.batch:
                # reducing spatial dimensions and batch
                reduce_axis = [0] + reduce_axis

            intersection = torch.sum(target * input, dim=reduce_axis)

            if self.squared_pred:
                target = torch.pow(target, 2)
                input = torch.pow(input, 2)

            ground_o = torch.sum(target, dim=reduce_axis)
            pred_o = torch.sum(input, dim=reduce_axis)

            denominator = ground_o + pred_o

            if self.jaccard:
                denominator = 2.0 * (denominator - intersection)

            f = 1.0 - (2.0 * intersection + self.smooth_nr) / (denominator + self.smooth_dr)

            if self.reduction == LossReduction.MEAN.value:
                f = torch.mean(f)  # the batch and channel average
            elif self.reduction == LossReduction.SUM.value:
                f = torch.sum(f)  # sum over the batch and channel dims
            elif self.reduction != LossReduction.NONE.value:
                raise ValueError(f'Unsupported reduction: {self.reduction}, available options are ["mean", "sum", "none"].')

            return f

    class GeneralizedDiceLoss(_Loss):
        def __init__(
            self,
            include_background=True,
            to_onehot_y=False,
            sigmoid=False,
            softmax=False,
            other_act=None,
            w_type=Weight.SQUARE,
            reduction=LossReduction.MEAN,
            smooth_nr=1e-5,
            smooth_dr=1e-5,
            batch=False,
        ) -> None:
            super().__init__(reduction=LossReduction(reduction).value)
            if other_act is not None and not callable(other_act):
                raise TypeError(f"other_act must be None or callable but is {type(other_act).__name__}.")
            if int(sigmoid) + int(softmax) + int(other_act is not None) > 1:
                raise ValueError("Incompatible values: more than 1 of [sigmoid=True, softmax=True, other_act is not None].")

            self.include_background = include_background
            self.to_onehot_y = to_onehot_y
            self.sigmoid = sigmoid
            self.softmax = softmax
            self.other_act = other_act

            self.w_type = look_up_option(w_type, Weight)

            self.smooth_nr = float(smooth_nr)
            self.smooth_dr = float(smooth_dr)
            self.batch = batch

        def w_func(self, grnd):
            if self.w_type == Weight.SIMPLE:
                return torch.reciprocal(grnd)
            if self.w_type == Weight.SQUARE:
                return torch.reciprocal(grnd * grnd)
            return torch.ones_like(grnd)

        def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
            if self.sigmoid:
                input = torch.sigmoid(input)
            n_pred_ch = input.shape[1]
            if self.softmax:
                if n_pred_ch == 1:
                    warnings.warn("single channel prediction, `softmax=True` ignored.")
                else:
                    input = torch.softmax(input, 1)

            if self.other_act is not None:
                input = self.other_act(input)

            if self.to_onehot_y:
                if n_pred_ch == 1:
                    warnings.warn("single channel prediction, `to_onehot_y=True` ignored.")
                else:
                    target = one_hot(target, num_classes=n_pred_ch)

            if not self.include_background:
                if n_pred_ch == 1:
                    warnings.warn("single channel prediction, `include_background=False` ignored.")
                else:
                    # if skipping background, removing first channel
                    target = target[:, 1:]
                    input = input[:, 1:]

            if target.shape != input.shape:
                raise AssertionError(f"ground truth has differing shape ({target.shape}) from input ({input.shape})")

            # reducing only spatial dimensions (not batch nor channels)
            reduce_axis = torch.arange(2, len(input.shape)).tolist()
            if self.batch:
                reduce_axis = [0] + reduce_axis
            intersection = torch.sum(target * input, reduce_axis)

            ground_o = torch.sum(target, reduce_axis)
            pred_o = torch.sum(input, reduce_axis)

            denominator = ground_o + pred_o

            w = self.w_func(ground_o.float())
            for b in w:
                infs = torch.isinf(b)
                b[infs] = 0.0
                b[infs] = torch.max(b)

            f = 1.0 - (2.0 * (intersection * w).sum(0 if self.batch else 1) + self.smooth_nr) / (
                (denominator * w).sum(0 if self.batch else 1) + self.smooth_dr
            )

            if self.reduction == LossReduction.MEAN.value:
                f = torch.mean(f)  # the batch and channel average
            elif self.reduction == LossReduction.SUM.value:
                f = torch.sum(f)  # sum over the batch and channel dims
            elif self.reduction != LossReduction.NONE.value:
                raise ValueError(f'Unsupported reduction: {self.reduction}, available options are ["mean", "sum", "none"].')

            return f

    class DiceCELoss(_Loss):
        def __init__(
            self,
            include_background=True,
            to_onehot_y=False,
            sigmoid=False,
            softmax=False,
            other_act=None,
            squared_pred=False,
            jaccard=False,
            reduction="mean",
            smooth_nr=1e-5,
            smooth_dr=1e-5,
            batch=False,
            ce_weight=None,
            lambda_dice=1.0,
            lambda_ce=1.0,
        ) -> None:
            super().__init__()
            self.dice = DiceLoss(
                include_background=include_background,
                to_onehot_y=to_onehot_y,
                sigmoid=sigmoid,
                softmax=softmax,
                other_act=other_act,
                squared_pred=squared_pred,
                jaccard=jaccard,
                reduction=reduction,
                smooth_nr=smooth_nr,
                smooth_dr=smooth_dr,
                batch=batch,
            )
            self.cross_entropy = nn.CrossEntropyLoss(
                weight=ce_weight,
                reduction=reduction,
            )
            if lambda_dice < 0.0:
                raise ValueError("lambda_dice should be no less than 0.0.")
            if lambda_ce < 0.0:
                raise ValueError("lambda_ce should be no less than 0.0.")
            self.lambda_dice = lambda_dice
            self.lambda_ce = lambda_ce

        def ce(self, input: torch.Tensor, target: torch.Tensor):
            n_pred_ch, n_target_ch = input.shape[1], target.shape[1]
            if n_pred_ch == n_target_ch:
                # target is in the one-hot format, convert to BH[WD] format to calculate ce loss
                target = torch.argmax(target, dim=1)
            else:
                target = torch.squeeze(target, dim=1)
            target = target.long()
            return self.cross_entropy(input, target)

        def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
            if len(input.shape) != len(target.shape):
                raise ValueError("the number of dimensions for input and target should be the same.")

            dice_loss = self.dice(input, target)
            ce_loss = self.ce(input, target)
            total_loss = self.lambda_dice * dice_loss + self.lambda_ce * ce_loss

            return total_loss

    # ------------------------------------------------------------------ losses/utils.py, tversky.py
    def compute_tp_fp_fn(input, target, reduce_axis, ord, soft_label, decoupled=True):
        # the original implementation that is erroneous with soft labels
        if ord == 1 and not soft_label:
            tp = torch.sum(input * target, dim=reduce_axis)
            # the original implementation of Dice and Jaccard loss
            if decoupled:
                fp = torch.sum(input, dim=reduce_axis) - tp
                fn = torch.sum(target, dim=reduce_axis) - tp
            # the original implementation of Tversky loss
            else:
                fp = torch.sum(input * (1 - target), dim=reduce_axis)
                fn = torch.sum((1 - input) * target, dim=reduce_axis)
        # the new implementation that is correct with soft labels
        # and it is identical to the original implementation with hard labels
        else:
            pred_o = LA.vector_norm(input, ord=ord, dim=reduce_axis)
            ground_o = LA.vector_norm(target, ord=ord, dim=reduce_axis)
            difference = LA.vector_norm(input - target, ord=ord, dim=reduce_axis)

            if ord > 1:
                pred_o = torch.pow(pred_o, exponent=ord)
                ground_o = torch.pow(ground_o, exponent=ord)
                difference = torch.pow(difference, exponent=ord)

            tp = (pred_o + ground_o - difference) / 2
            fp = pred_o - tp
            fn = ground_o - tp

        return tp, fp, fn

    class TverskyLoss(_Loss):
        def __init__(
            self,
            include_background=True,
            to_onehot_y=False,
            sigmoid=False,
            softmax=False,
            other_act=None,
            alpha=0.5,
            beta=0.5,
            reduction=LossReduction.MEAN,
            smooth_nr=1e-5,
            smooth_dr=1e-5,
            batch=False,
            soft_label=False,
        ) -> None:
            super().__init__(reduction=LossReduction(reduction).value)
            if other_act is not None and not callable(other_act):
                raise TypeError(f"other_act must be None or callable but is {type(other_act).__name__}.")
            if int(sigmoid) + int(softmax) + int(other_act is not None) > 1:
                raise ValueError("Incompatible values: more than 1 of [sigmoid=True, softmax=True, other_act is not None].")
            self.include_background = include_background
            self.to_onehot_y = to_onehot_y
            self.sigmoid = sigmoid
            self.softmax = softmax
            self.other_act = other_act
            self.alpha = alpha
            self.beta = beta
            self.smooth_nr = float(smooth_nr)
            self.smooth_dr = float(smooth_dr)
            self.batch = batch
            self.soft_label = soft_label

        def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
            if self.sigmoid:
                input = torch.sigmoid(input)

            n_pred_ch = input.shape[1]
            if self.softmax:
                if n_pred_ch == 1:
                    warnings.warn("single channel prediction, `softmax=True` ignored.", stacklevel=2)
                else:
                    input = torch.softmax(input, 1)

            if self.other_act is not None:
                input = self.other_act(input)

            if self.to_onehot_y:
                if n_pred_ch == 1:
                    warnings.warn("single channel prediction, `to_onehot_y=True` ignored.", stacklevel=2)
                else:
                    target = one_hot(target, num_classes=n_pred_ch)

            if not self.include_background:
                if n_pred_ch == 1:
                    warnings.warn("single channel prediction, `include_background=False` ignored.", stacklevel=2)
                else:
                    # if skipping background, removing first channel
                    target = target[:, 1:]
                    input = input[:, 1:]

            if target.shape != input.shape:
                raise AssertionError(f"ground truth has differing shape ({target.shape}) from input ({input.shape})")

            # reducing only spatial dimensions (not batch nor channels)
            reduce_axis = list(range(2, len(input.shape)))
            if self.batch:
                # reducing spatial dimensions and batch
                reduce_axis = [0] + reduce_axis

            tp, fp, fn = compute_tp_fp_fn(input, target, reduce_axis, 1, self.soft_label, False)
            fp *= self.alpha
            fn *= self.beta
            numerator = tp + self.smooth_nr
            denominator = tp + fp + fn + self.smooth_dr

            score = 1.0 - numerator / denominator

            if self.reduction == LossReduction.SUM.value:
                return torch.sum(score)  # sum over the batch and channel dims
            if self.reduction == LossReduction.NONE.value:
                return score  # returns [N, num_classes] losses
            if self.reduction == LossReduction.MEAN.value:
                return torch.mean(score)
            raise ValueError(f'Unsupported reduction: {self.reduction}, available options are ["mean", "sum", "none"].')

    # ------------------------------------------------------------------ losses/focal_loss.py
    class FocalLoss(_Loss):
        def __init__(
            self,
            include_background=True,
            to_onehot_y=False,
            gamma=2.0,
            alpha=None,
            weight=None,
            reduction=LossReduction.MEAN,
            use_softmax=False,
        ) -> None:
            super().__init__(reduction=LossReduction(reduction).value)
            self.include_background = include_background
            self.to_onehot_y = to_onehot_y
            self.gamma = gamma
            self.alpha = alpha
            self.weight = weight
            self.use_softmax = use_softmax
            weight = torch.as_tensor(weight) if weight is not None else None
            self.register_buffer("class_weight", weight)
            self.class_weight: None | torch.Tensor

        def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
            n_pred_ch = input.shape[1]

            if self.to_onehot_y:
                if n_pred_ch == 1:
                    warnings.warn("single channel prediction, `to_onehot_y=True` ignored.")
                else:
                    target = one_hot(target, num_classes=n_pred_ch)

            if not self.include_background:
                if n_pred_ch == 1:
                    warnings.warn("single channel prediction, `include_background=False` ignored.")
                else:
                    # if skipping background, removing first channel
                    target = target[:, 1:]
                    input = input[:, 1:]

            if target.shape != input.shape:
                raise ValueError(f"ground truth has different shape ({target.shape}) from input ({input.shape})")

            loss = None
            input = input.float()
            target = target.float()
            if self.use_softmax:
                if not self.include_background and self.alpha is not None:
                    self.alpha = None
                    warnings.warn("`include_background=False`, `alpha` ignored when using softmax.")
                loss = softmax_focal_loss(input, target, self.gamma, self.alpha)
            else:
                loss = sigmoid_focal_loss(input, target, self.gamma, self.alpha)

            num_of_classes = target.shape[1]
            if self.class_weight is not None and num_of_classes != 1:
                # make sure the lengths of weights are equal to the number of classes
                if self.class_weight.ndim == 0:
                    self.class_weight = torch.as_tensor([self.class_weight] * num_of_classes)
                else:
                    if self.class_weight.shape[0] != num_of_classes:
                        raise ValueError(
                            """the length of the `weight` sequence should be the same as the number of classes.
                            If `include_background=False`, the weight should not include
                            the background category class 0."""
                        )
                if self.class_weight.min() < 0:
                    raise ValueError("the value/values of the `weight` should be no less than 0.")
                # apply class_weight to loss
                self.class_weight = self.class_weight.to(loss)
                broadcast_dims = [-1] + [1] * len(target.shape[2:])
                self.class_weight = self.class_weight.view(broadcast_dims)
                loss = self.class_weight * loss

            if self.reduction == LossReduction.SUM.value:
                # Previously there was a mean over the last dimension, which did not
                # return a compatible BCE loss. To maintain backwards compatible
                # behavior we have a flag that performs this extra step, disable or
                # parameterize if necessary. (Or justify why the mean should be there)
                average_spatial_dims = True
                if average_spatial_dims:
                    loss = loss.mean(dim=list(range(2, len(target.shape))))
                loss = loss.sum()
            elif self.reduction == LossReduction.MEAN.value:
                loss = loss.mean()
            elif self.reduction == LossReduction.NONE.value:
                pass
            else:
                raise ValueError(f'Unsupported reduction: {self.reduction}, available options are ["mean", "sum", "none"].')
            return loss

    def softmax_focal_loss(input, target, gamma=2.0, alpha=None):
        input_ls = input.log_softmax(1)
        loss = -(1 - input_ls.exp()).pow(gamma) * input_ls * target

        if alpha is not None:
            # (1-alpha) for the background class and alpha for the other classes
            alpha_fac = torch.tensor([1 - alpha] + [alpha] * (target.shape[1] - 1)).to(loss)
            broadcast_dims = [-1] + [1] * len(target.shape[2:])
            alpha_fac = alpha_fac.view(broadcast_dims)
            loss = alpha_fac * loss

        return loss

    def sigmoid_focal_loss(input, target, gamma=2.0, alpha=None):
        # computing binary cross entropy with logits
        # equivalent to F.binary_cross_entropy_with_logits(input, target, reduction='none')
        loss = input - input * target - F.logsigmoid(input)

        # sigmoid(-i) if t==1; sigmoid(i) if t==0 <=>
        # 1-sigmoid(i) if t==1; sigmoid(i) if t==0 <=>
        # 1-p if t==1; p if t==0 <=>
        # pfac, that is, the term (1 - pt)
        invprobs = F.logsigmoid(-input * (target * 2 - 1))  # reduced chance of overflow
        # (pfac.log() * gamma).exp() <=>
        # pfac.log().exp() ^ gamma <=>
        # pfac ^ gamma
        loss = (invprobs * gamma).exp() * loss

        if alpha is not None:
            # alpha if t==1; (1-alpha) if t==0
            alpha_factor = target * alpha + (1 - target) * (1 - alpha)
            loss = alpha_factor * loss

        return loss

    # ------------------------------------------------------------------ metrics
    def ignore_background(y_pred, y):
        y = y[:, 1:] if y.shape[1] > 1 else y
        y_pred = y_pred[:, 1:] if y_pred.shape[1] > 1 else y_pred
        return y_pred, y

    def do_metric_reduction(f, reduction=MetricReduction.MEAN):
        # some elements might be Nan (if ground truth y was missing (zeros))
        # we need to account for it
        nans = torch.isnan(f)
        not_nans = (~nans).float()

        t_zero = torch.zeros(1, device=f.device, dtype=f.dtype)
        reduction = look_up_option(reduction, MetricReduction)
        if reduction == MetricReduction.NONE:
            return f, not_nans

        f[nans] = 0
        if reduction == MetricReduction.MEAN:
            # 2 steps, first, mean by channel (accounting for nans), then by batch
            not_nans = not_nans.sum(dim=1)
            f = torch.where(not_nans > 0, f.sum(dim=1) / not_nans, t_zero)  # channel average

            not_nans = (not_nans > 0).float().sum(dim=0)
            f = torch.where(not_nans > 0, f.sum(dim=0) / not_nans, t_zero)  # batch average

        elif reduction == MetricReduction.SUM:
            not_nans = not_nans.sum(dim=[0, 1])
            f = torch.sum(f, dim=[0, 1])  # sum over the batch and channel dims
        elif reduction == MetricReduction.MEAN_BATCH:
            not_nans = not_nans.sum(dim=0)
            f = torch.where(not_nans > 0, f.sum(dim=0) / not_nans, t_zero)  # batch average
        elif reduction == MetricReduction.SUM_BATCH:
            not_nans = not_nans.sum(dim=0)
            f = f.sum(dim=0)  # the batch sum
        elif reduction == MetricReduction.MEAN_CHANNEL:
            not_nans = not_nans.sum(dim=1)
            f = torch.where(not_nans > 0, f.sum(dim=1) / not_nans, t_zero)  # channel average
        elif reduction == MetricReduction.SUM_CHANNEL:
            not_nans = not_nans.sum(dim=1)
            f = f.sum(dim=1)  # the channel sum
        elif reduction != MetricReduction.NONE:
            raise ValueError(f"Unsupported reduction: {reduction}.")
        return f, not_nans

    def compute_dice(y_pred, y, include_background=True, ignore_empty=True):
        if not include_background:
            y_pred, y = ignore_background(y_pred=y_pred, y=y)

        y = y.float()
        y_pred = y_pred.float()

        if y.shape != y_pred.shape:
            raise ValueError(f"y_pred and y should have same shapes, got {y_pred.shape} and {y.shape}.")

        # reducing only spatial dimensions (not batch nor channels)
        n_len = len(y_pred.shape)
        reduce_axis = list(range(2, n_len))
        intersection = torch.sum(y * y_pred, dim=reduce_axis)

        y_o = torch.sum(y, reduce_axis)
        y_pred_o = torch.sum(y_pred, dim=reduce_axis)
        denominator = y_o + y_pred_o

        if ignore_empty is True:
            return torch.where(y_o > 0, (2.0 * intersection) / denominator, torch.tensor(float("nan"), device=y_o.device))
        return torch.where(denominator > 0, (2.0 * intersection) / denominator, torch.tensor(1.0, device=y_o.device))

    def compute_iou(y_pred, y, include_background=True, ignore_empty=True):
        if not include_background:
            y_pred, y = ignore_background(y_pred=y_pred, y=y)

        if y.shape != y_pred.shape:
            raise ValueError(f"y_pred and y should have same shapes, got {y_pred.shape} and {y.shape}.")

        # reducing only spatial dimensions (not batch nor channels)
        n_len = len(y_pred.shape)
        reduce_axis = list(range(2, n_len))
        intersection = torch.sum(y * y_pred, dim=reduce_axis)

        y_o = torch.sum(y, reduce_axis)
        y_pred_o = torch.sum(y_pred, dim=reduce_axis)
        union = y_o + y_pred_o - intersection

        if ignore_empty:
            return torch.where(y_o > 0, (intersection) / union, torch.tensor(float("nan"), device=y_o.device))
        return torch.where(union > 0, (intersection) / union, torch.tensor(1.0, device=y_o.device))

    def get_confusion_matrix(y_pred, y, include_background=True):
        if not include_background:
            y_pred, y = ignore_background(y_pred=y_pred, y=y)

        if y.shape != y_pred.shape:
            raise ValueError(f"y_pred and y should have same shapes, got {y_pred.shape} and {y.shape}.")

        # get confusion matrix related metric
        batch_size, n_class = y_pred.shape[:2]
        # convert to [BNS], where S is the number of pixels for one sample.
        # As for classification tasks, S equals to 1.
        y_pred = y_pred.reshape(batch_size, n_class, -1)
        y = y.reshape(batch_size, n_class, -1)
        tp = (y_pred + y) == 2
        tn = (y_pred + y) == 0

        tp = tp.sum(dim=[2]).float()
        tn = tn.sum(dim=[2]).float()
        p = y.sum(dim=[2]).float()
        n = y.shape[-1] - p

        fn = p - tp
        fp = n - tn

        return torch.stack([tp, fp, tn, fn], dim=-1)

    def compute_confusion_matrix_metric(metric_name, confusion_matrix):
        metric = metric_name
        input_dim = confusion_matrix.ndimension()
        if input_dim == 1:
            confusion_matrix = confusion_matrix.unsqueeze(dim=0)
        if confusion_matrix.shape[-1] != 4:
            raise ValueError("the size of the last dimension of confusion_matrix should be 4.")

        tp = confusion_matrix[..., 0]
        fp = confusion_matrix[..., 1]
        tn = confusion_matrix[..., 2]
        fn = confusion_matrix[..., 3]
        p = tp + fn
        n = fp + tn
        # calculate metric
        nan_tensor = torch.tensor(float("nan"), device=confusion_matrix.device)
        if metric == "tpr":
            numerator, denominator = tp, p
        elif metric == "tnr":
            numerator, denominator = tn, n
        elif metric == "ppv":
            numerator, denominator = tp, (tp + fp)
        elif metric == "f1":
            numerator, denominator = tp * 2.0, (tp * 2.0 + fn + fp)
        elif metric == "mcc":
            numerator = tp * tn - fp * fn
            denominator = torch.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
        elif metric == "accuracy":
            numerator, denominator = (tp + tn), (p + n)
        else:
            raise NotImplementedError("the metric is not implemented.")
        if isinstance(denominator, torch.Tensor):
            return torch.where(denominator != 0, numerator / denominator, nan_tensor)
        return numerator / denominator

    def _calculate(y_pred, y):
        if not (y.ndimension() == y_pred.ndimension() == 1 and len(y) == len(y_pred)):
            raise AssertionError("y and y_pred must be 1 dimension data with same length.")
        y_unique = y.unique()
        if len(y_unique) == 1:
            warnings.warn(f"y values can not be all {y_unique.item()}, skip AUC computation and return `Nan`.")
            return float("nan")
        if not y_unique.equal(torch.tensor([0, 1], dtype=y.dtype, device=y.device)):
            warnings.warn(f"y values must be 0 or 1, but in {y_unique.tolist()}, skip AUC computation and return `Nan`.")
            return float("nan")

        n = len(y)
        indices = y_pred.argsort()
        y = y[indices].cpu().numpy()
        y_pred = y_pred[indices].cpu().numpy()
        nneg = auc = tmp_pos = tmp_neg = 0.0

        for i in range(n):
            y_i = float(y[i])
            if i + 1 < n and y_pred[i] == y_pred[i + 1]:
                tmp_pos += y_i
                tmp_neg += 1 - y_i
                continue
            if tmp_pos + tmp_neg > 0:
                tmp_pos += y_i
                tmp_neg += 1 - y_i
                nneg += tmp_neg
                auc += tmp_pos * (nneg - tmp_neg / 2)
                tmp_pos = tmp_neg = 0
                continue
            if y_i == 1:
                auc += nneg
            else:
                nneg += 1
        return auc / (nneg * (n - nneg))

    def compute_roc_auc(y_pred, y, average=Average.MACRO):
        y_pred_ndim = y_pred.ndimension()
        y_ndim = y.ndimension()
        if y_pred_ndim not in (1, 2):
            raise ValueError(
                f"Predictions should be of shape (batch_size, num_classes) or (batch_size, ), got {y_pred.shape}."
            )
        if y_ndim not in (1, 2):
            raise ValueError(f"Targets should be of shape (batch_size, num_classes) or (batch_size, ), got {y.shape}.")
        if y_pred_ndim == 2 and y_pred.shape[1] == 1:
            y_pred = y_pred.squeeze(dim=-1)
            y_pred_ndim = 1
        if y_ndim == 2 and y.shape[1] == 1:
            y = y.squeeze(dim=-1)

        if y_pred_ndim == 1:
            return _calculate(y_pred, y)

        if y.shape != y_pred.shape:
            raise ValueError(f"data shapes of y_pred and y do not match, got {y_pred.shape} and {y.shape}.")

        average = look_up_option(average, Average)
        if average == Average.MICRO:
            return _calculate(y_pred.flatten(), y.flatten())
        y, y_pred = y.transpose(0, 1), y_pred.transpose(0, 1)
        auc_values = [_calculate(y_pred_, y_) for y_pred_, y_ in zip(y_pred, y)]
        if average == Average.NONE:
            return auc_values
        if average == Average.MACRO:
            return np.mean(auc_values)
        if average == Average.WEIGHTED:
            weights = [sum(y_) for y_ in y]
            return np.average(auc_values, weights=weights)
        raise ValueError(f'Unsupported average: {average}, available options are ["macro", "weighted", "micro", "none"].')

    # ------------------------------------------------------------------ data/utils.py
    def get_valid_patch_size(image_size, patch_size):
        ndim = len(image_size)
        patch_size_ = ensure_tuple_size(patch_size, ndim)

        # ensure patch size dimensions are not larger than image dimension, if a dimension is None or 0 use whole dimension
        return tuple(min(ms, ps or ms) for ms, ps in zip(image_size, patch_size_))

    def dense_patch_slices(image_size, patch_size, scan_interval):
        num_spatial_dims = len(image_size)
        patch_size = get_valid_patch_size(image_size, patch_size)
        scan_interval = ensure_tuple_size(scan_interval, num_spatial_dims)

        scan_num = []
        for i in range(num_spatial_dims):
            if scan_interval[i] == 0:
                scan_num.append(1)
            else:
                num = int(math.ceil(float(image_size[i]) / scan_interval[i]))
                scan_dim = first(d for d in range(num) if d * scan_interval[i] + patch_size[i] >= image_size[i])
                scan_num.append(scan_dim + 1 if scan_dim is not None else 1)

        starts = []
        for dim in range(num_spatial_dims):
            dim_starts = []
            for idx in range(scan_num[dim]):
                start_idx = idx * scan_interval[dim]
                start_idx -= max(start_idx + patch_size[dim] - image_size[dim], 0)
                dim_starts.append(start_idx)
            starts.append(dim_starts)
        out = np.asarray([x.flatten() for x in np.meshgrid(*starts, indexing="ij")]).T
        return [tuple(slice(s, s + patch_size[d]) for d, s in enumerate(x)) for x in out]

    def compute_importance_map(patch_size, mode=BlendMode.CONSTANT, sigma_scale=0.125, device="cpu", dtype=torch.float32):
        mode = look_up_option(mode, BlendMode)
        device = torch.device(device)
        if mode == BlendMode.CONSTANT:
            importance_map = torch.ones(patch_size, device=device, dtype=torch.float)
        elif mode == BlendMode.GAUSSIAN:
            sigma_scale = ensure_tuple_rep(sigma_scale, len(patch_size))
            sigmas = [i * sigma_s for i, sigma_s in zip(patch_size, sigma_scale)]

            for i in range(len(patch_size)):
                x = torch.arange(
                    start=-(patch_size[i] - 1) / 2.0, end=(patch_size[i] - 1) / 2.0 + 1, dtype=torch.float, device=device
                )
                x = torch.exp(x**2 / (-2 * sigmas[i] ** 2))  # 1D gaussian
                importance_map = importance_map.unsqueeze(-1) * x[(None,) * i] if i > 0 else x
        else:
            raise ValueError(
                f"Unsupported mode: {mode}, available options are [{BlendMode.CONSTANT}, {BlendMode.CONSTANT}]."
            )
        # handle non-positive weights
        min_non_zero = max(torch.min(importance_map).item(), 1e-3)
        importance_map = torch.clamp_(importance_map.to(torch.float), min=min_non_zero).to(dtype)
        return importance_map

    # ------------------------------------------------------------------ inferers/utils.py
    def _get_scan_interval(image_size, roi_size, num_spatial_dims, overlap):
        if len(image_size) != num_spatial_dims:
            raise ValueError("image coord different from spatial dims.")
        if len(roi_size) != num_spatial_dims:
            raise ValueError("roi coord different from spatial dims.")

        scan_interval = []
        for i in range(num_spatial_dims):
            if roi_size[i] == image_size[i]:
                scan_interval.append(int(roi_size[i]))
            else:
                interval = int(roi_size[i] * (1 - overlap))
                scan_interval.append(interval if interval > 0 else 1)
        return tuple(scan_interval)

    def sliding_window_inference(
        inputs,
        roi_size,
        sw_batch_size,
        predictor,
        overlap=0.25,
        mode=BlendMode.CONSTANT,
        sigma_scale=0.125,
        padding_mode=PytorchPadMode.CONSTANT,
        cval=0.0,
        sw_device=None,
        device=None,
        roi_weight_map=None,
    ):
        compute_dtype = inputs.dtype
        num_spatial_dims = len(inputs.shape) - 2
        if overlap < 0 or overlap >= 1:
            raise ValueError("overlap must be >= 0 and < 1.")

        # determine image spatial size and batch size
        # Note: all input images must have the same image size and batch size
        batch_size, _, *image_size_ = inputs.shape

        if device is None:
            device = inputs.device
        if sw_device is None:
            sw_device = inputs.device

        roi_size = fall_back_tuple(roi_size, image_size_)
        # in case that image size is smaller than roi size
        image_size = tuple(max(image_size_[i], roi_size[i]) for i in range(num_spatial_dims))
        pad_size = []
        for k in range(len(inputs.shape) - 1, 1, -1):
            diff = max(roi_size[k - 2] - inputs.shape[k], 0)
            half = diff // 2
            pad_size.extend([half, diff - half])

        if max(pad_size) > 0:
            inputs = F.pad(inputs, pad=pad_size, mode=look_up_option(padding_mode, PytorchPadMode).value, value=cval)

        scan_interval = _get_scan_interval(image_size, roi_size, num_spatial_dims, overlap)

        # Store all slices in list
        slices = dense_patch_slices(image_size, roi_size, scan_interval)
        num_win = len(slices)  # number of windows per image
        total_slices = num_win * batch_size  # total number of windows

        # Create window-level importance map
        valid_patch_size = get_valid_patch_size(image_size, roi_size)
        if valid_patch_size == roi_size and (roi_weight_map is not None):
            importance_map_ = roi_weight_map
        else:
            try:
                importance_map_ = compute_importance_map(valid_patch_size, mode=mode, sigma_scale=sigma_scale, device=device)
            except BaseException as e:
                raise RuntimeError(
                    "Seems to be OOM. Please try smaller patch size or mode='constant' instead of mode='gaussian'."
                ) from e
        importance_map_ = importance_map_.to(device=device, dtype=compute_dtype)

        # handle non-positive weights
        min_non_zero = max(torch.min(importance_map_).item(), 1e-3)
        importance_map_ = torch.clamp_(importance_map_.to(torch.float32), min=min_non_zero).to(compute_dtype)

        # Perform predictions
        output_image_list, count_map_list = [], []
        _initialized_ss = -1

        # for each patch
        for slice_g in range(0, total_slices, sw_batch_size):
            slice_range = range(slice_g, min(slice_g + sw_batch_size, total_slices))
            unravel_slice = [
                [slice(int(idx / num_win), int(idx / num_win) + 1), slice(None)] + list(slices[idx % num_win])
                for idx in slice_range
            ]
            window_data = torch.cat([inputs[win_slice] for win_slice in unravel_slice]).to(sw_device)
            seg_prob_out = predictor(window_data)  # batched patch segmentation
            seg_prob_tuple = (seg_prob_out,)
            importance_map = importance_map_

            # for each output in multi-output list
            for ss, seg_prob in enumerate(seg_prob_tuple):
                seg_prob = seg_prob.to(device)  # BxCxMxNxP or BxCxMxN

                # compute zoom scale: out_roi_size/in_roi_size
                zoom_scale = []
                for axis, (img_s_i, out_w_i, in_w_i) in enumerate(
                    zip(image_size, seg_prob.shape[2:], window_data.shape[2:])
                ):
                    _scale = out_w_i / float(in_w_i)
                    if not (img_s_i * _scale).is_integer():
                        warnings.warn(f"For spatial axis: {axis}, output[{ss}] will have non-integer shape.")
                    zoom_scale.append(_scale)

                if _initialized_ss < ss:  # init. the ss-th buffer at the first iteration
                    # construct multi-resolution outputs
                    output_classes = seg_prob.shape[1]
                    output_shape = [batch_size, output_classes] + [
                        int(image_size_d * zoom_scale_d) for image_size_d, zoom_scale_d in zip(image_size, zoom_scale)
                    ]
                    # allocate memory to store the full output and the count for overlapping parts
                    output_image_list.append(torch.zeros(output_shape, dtype=compute_dtype, device=device))
                    count_map_list.append(torch.zeros([1, 1] + output_shape[2:], dtype=compute_dtype, device=device))
                    _initialized_ss += 1

                # store the result in the proper location of the full output. Apply weights from importance map.
                for idx, original_idx in zip(slice_range, unravel_slice):
                    # zoom roi
                    original_idx_zoom = list(original_idx)  # 4D for 2D image, 5D for 3D image
                    for axis in range(2, len(original_idx_zoom)):
                        zoomed_start = original_idx[axis].start * zoom_scale[axis - 2]
                        zoomed_end = original_idx[axis].stop * zoom_scale[axis - 2]
                        original_idx_zoom[axis] = slice(int(zoomed_start), int(zoomed_end), None)
                    importance_map_zoom = importance_map.to(compute_dtype)
                    # store results and weights
                    output_image_list[ss][original_idx_zoom] += importance_map_zoom * seg_prob[idx - slice_g]
                    count_map_list[ss][original_idx_zoom] += (
                        importance_map_zoom.unsqueeze(0).unsqueeze(0).expand(count_map_list[ss][original_idx_zoom].shape)
                    )

        # account for any overlapping sections
        for ss in range(len(output_image_list)):
            output_image_list[ss] = output_image_list[ss]
            _map = count_map_list.pop(0)
            for _i in range(output_image_list[ss].shape[1]):
                output_image_list[ss][:, _i : _i + 1, ...] /= _map
            output_image_list[ss] = output_image_list[ss].to(compute_dtype)

        # remove padding if image_size smaller than roi_size
        for ss, output_i in enumerate(output_image_list):
            zoom_scale = [
                seg_prob_map_shape_d / roi_size_d for seg_prob_map_shape_d, roi_size_d in zip(output_i.shape[2:], roi_size)
            ]

            final_slicing = []
            for sp in range(num_spatial_dims):
                slice_dim = slice(pad_size[sp * 2], image_size_[num_spatial_dims - sp - 1] + pad_size[sp * 2])
                slice_dim = slice(
                    int(round(slice_dim.start * zoom_scale[num_spatial_dims - sp - 1])),
                    int(round(slice_dim.stop * zoom_scale[num_spatial_dims - sp - 1])),
                )
                final_slicing.insert(0, slice_dim)
            while len(final_slicing) < len(output_i.shape):
                final_slicing.insert(0, slice(None))
            output_image_list[ss] = output_i[final_slicing]

        final_output = tuple(output_image_list)
        return final_output[0]

    # ------------------------------------------------------------------ transforms/utils.py (host path)
    def distance_transform_edt(img):
        from scipy import ndimage

        img_ = img.detach().to(device="cpu").numpy()
        distances_ = np.zeros(img_.shape, dtype=np.float64)
        for channel_idx in range(img_.shape[0]):
            ndimage.distance_transform_edt(img_[channel_idx], distances=distances_[channel_idx])
        return torch.as_tensor(distances_, device=img.device)

    # ------------------------------------------------------------------ losses/hausdorff_loss.py
    class HausdorffDTLoss(_Loss):
        def __init__(self, alpha=2.0, include_background=False, to_onehot_y=False, sigmoid=False, softmax=False,
                     other_act=None, reduction=LossReduction.MEAN, batch=False) -> None:
            super().__init__(reduction=LossReduction(reduction).value)
            if other_act is not None and not callable(other_act):
                raise TypeError(f"other_act must be None or callable but is {type(other_act).__name__}.")
            if int(sigmoid) + int(softmax) > 1:
                raise ValueError("Incompatible values: more than 1 of [sigmoid=True, softmax=True, other_act is not None].")

            self.alpha = alpha
            self.include_background = include_background
            self.to_onehot_y = to_onehot_y
            self.sigmoid = sigmoid
            self.softmax = softmax
            self.other_act = other_act
            self.batch = batch

        @torch.no_grad()
        def distance_field(self, img):
            field = torch.zeros_like(img)

            for batch_idx in range(len(img)):
                fg_mask = img[batch_idx] > 0.5

                # For cases where the mask is entirely background or entirely foreground
                # the distance transform is not well defined for all 1s,
                # which always would happen on either foreground or background, so skip
                if fg_mask.any() and not fg_mask.all():
                    fg_dist = distance_transform_edt(fg_mask)  # type: ignore
                    bg_mask = ~fg_mask
                    bg_dist = distance_transform_edt(bg_mask)  # type: ignore

                    field[batch_idx] = fg_dist + bg_dist

            return field

        def forward(self, input, target):
            if input.dim() != 4 and input.dim() != 5:
                raise ValueError("Only 2D (NCHW) and 3D (NCHWD) supported")

            if self.sigmoid:
                input = torch.sigmoid(input)

            n_pred_ch = input.shape[1]
            if self.softmax:
                if n_pred_ch == 1:
                    warnings.warn("single channel prediction, `softmax=True` ignored.")
                else:
                    input = torch.softmax(input, 1)

            if self.other_act is not None:
                input = self.other_act(input)

            if self.to_onehot_y:
                if n_pred_ch == 1:
                    warnings.warn("single channel prediction, `to_onehot_y=True` ignored.")
                else:
                    target = one_hot(target, num_classes=n_pred_ch)

            if not self.include_background:
                if n_pred_ch == 1:
                    warnings.warn("single channel prediction, `include_background=False` ignored.")
                else:
                    # If skipping background, removing first channel
                    target = target[:, 1:]
                    input = input[:, 1:]

            if target.shape != input.shape:
                raise AssertionError(f"ground truth has different shape ({target.shape}) from input ({input.shape})")

            device = input.device
            all_f = []
            for i in range(input.shape[1]):
                ch_input = input[:, [i]]
                ch_target = target[:, [i]]
                pred_dt = self.distance_field(ch_input.detach()).float()
                target_dt = self.distance_field(ch_target.detach()).float()

                pred_error = (ch_input - ch_target) ** 2
                distance = pred_dt**self.alpha + target_dt**self.alpha

                running_f = pred_error * distance.to(device)
                reduce_axis = torch.arange(2, len(input.shape)).tolist()
                if self.batch:
                    # reducing spatial dimensions and batch
                    reduce_axis = [0] + reduce_axis
                all_f.append(running_f.mean(dim=reduce_axis, keepdim=True))
            f = torch.cat(all_f, dim=1)
            if self.reduction == LossReduction.MEAN.value:
                f = torch.mean(f)  # the batch and channel average
            elif self.reduction == LossReduction.SUM.value:
                f = torch.sum(f)  # sum over the batch and channel dims
            elif self.reduction == LossReduction.NONE.value:
                # If we are not computing voxelwise loss components at least make sure a none reduction maintains a
                # broadcastable shape
                broadcast_shape = list(f.shape[0:2]) + [1] * (len(ch_input.shape) - 2)
                f = f.view(broadcast_shape)
            else:
                raise ValueError(f'Unsupported reduction: {self.reduction}, available options are ["mean", "sum", "none"].')

            return f

    class LogHausdorffDTLoss(HausdorffDTLoss):
        def forward(self, input, target):
            log_loss = torch.log(super().forward(input, target) + 1)
            return log_loss

    # ------------------------------------------------------------------ losses/ssim_loss.py
    class SSIMLoss(_Loss):
        def __init__(self, win_size: int = 7, k1: float = 0.01, k2: float = 0.03, spatial_dims: int = 2):
            super().__init__()
            self.win_size = win_size
            self.k1, self.k2 = k1, k2
            self.spatial_dims = spatial_dims
            self.register_buffer(
                "w", torch.ones([1, 1] + [win_size for _ in range(spatial_dims)]) / win_size**spatial_dims
            )
            self.cov_norm = (win_size**2) / (win_size**2 - 1)

        def forward(self, x, y, data_range):
            if x.shape[1] > 1:  # handling multiple channels (C>1)
                if x.shape[1] != y.shape[1]:
                    raise ValueError(
                        f"x and y should have the same number of channels, "
                        f"but x has {x.shape[1]} channels and y has {y.shape[1]} channels."
                    )
                losses = torch.stack(
                    [
                        SSIMLoss(self.win_size, self.k1, self.k2, self.spatial_dims)(
                            x[:, i, ...].unsqueeze(1), y[:, i, ...].unsqueeze(1), data_range
                        )
                        for i in range(x.shape[1])
                    ]
                )
                channel_wise_loss = losses.mean()
                return channel_wise_loss

            data_range = data_range[(None,) * (self.spatial_dims + 2)]
            # determine whether to work with 2D convolution or 3D
            conv = getattr(F, f"conv{self.spatial_dims}d")
            w = self.w.to(x)

            c1 = (self.k1 * data_range) ** 2  # stability constant for luminance
            c2 = (self.k2 * data_range) ** 2  # stability constant for contrast
            ux = conv(x, w)  # mu_x
            uy = conv(y, w)  # mu_y
            uxx = conv(x * x, w)  # mu_x^2
            uyy = conv(y * y, w)  # mu_y^2
            uxy = conv(x * y, w)  # mu_xy
            vx = self.cov_norm * (uxx - ux * ux)  # sigma_x
            vy = self.cov_norm * (uyy - uy * uy)  # sigma_y
            vxy = self.cov_norm * (uxy - ux * uy)  # sigma_xy

            numerator = (2 * ux * uy + c1) * (2 * vxy + c2)
            denom = (ux**2 + uy**2 + c1) * (vx + vy + c2)
            ssim_value = numerator / denom
            loss = 1 - ssim_value.mean()
            return loss

    # ------------------------------------------------------------------ metrics/regression.py
    def _gaussian_kernel(spatial_dims, num_channels, kernel_size, kernel_sigma):
        def gaussian_1d(kernel_size: int, sigma: float):
            dist = torch.arange(start=(1 - kernel_size) / 2, end=(1 + kernel_size) / 2, step=1)
            gauss = torch.exp(-torch.pow(dist / sigma, 2) / 2)
            return (gauss / gauss.sum()).unsqueeze(dim=0)

        gaussian_kernel_x = gaussian_1d(kernel_size[0], kernel_sigma[0])
        gaussian_kernel_y = gaussian_1d(kernel_size[1], kernel_sigma[1])
        kernel = torch.matmul(gaussian_kernel_x.t(), gaussian_kernel_y)  # (kernel_size, 1) * (1, kernel_size)

        kernel_dimensions = (num_channels, 1, kernel_size[0], kernel_size[1])

        if spatial_dims == 3:
            gaussian_kernel_z = gaussian_1d(kernel_size[2], kernel_sigma[2])[None,]
            kernel = torch.mul(
                kernel.unsqueeze(-1).repeat(1, 1, kernel_size[2]),
                gaussian_kernel_z.expand(kernel_size[0], kernel_size[1], kernel_size[2]),
            )
            kernel_dimensions = (num_channels, 1, kernel_size[0], kernel_size[1], kernel_size[2])

        return kernel.expand(kernel_dimensions)

    def compute_ssim_and_cs(y_pred, y, spatial_dims, kernel_size, kernel_sigma, data_range=1.0,
                            kernel_type="gaussian", k1=0.01, k2=0.03):
        if y.shape != y_pred.shape:
            raise ValueError(f"y_pred and y should have same shapes, got {y_pred.shape} and {y.shape}.")

        y_pred = y_pred.to(dtype=torch.float)
        y = y.to(dtype=torch.float)

        num_channels = y_pred.size(1)

        if kernel_type == "gaussian":
            kernel = _gaussian_kernel(spatial_dims, num_channels, kernel_size, kernel_sigma)
        elif kernel_type == "uniform":
            kernel = torch.ones((num_channels, 1, *kernel_size)) / torch.prod(torch.tensor(kernel_size))

        kernel = kernel.to(y_pred)

        c1 = (k1 * data_range) ** 2  # stability constant for luminance
        c2 = (k2 * data_range) ** 2  # stability constant for contrast

        conv_fn = getattr(F, f"conv{spatial_dims}d")
        mu_x = conv_fn(y_pred, kernel, groups=num_channels)
        mu_y = conv_fn(y, kernel, groups=num_channels)
        mu_xx = conv_fn(y_pred * y_pred, kernel, groups=num_channels)
        mu_yy = conv_fn(y * y, kernel, groups=num_channels)
        mu_xy = conv_fn(y_pred * y, kernel, groups=num_channels)

        sigma_x = mu_xx - mu_x * mu_x
        sigma_y = mu_yy - mu_y * mu_y
        sigma_xy = mu_xy - mu_x * mu_y

        contrast_sensitivity = (2 * sigma_xy + c2) / (sigma_x + sigma_y + c2)
        ssim_value_full_image = ((2 * mu_x * mu_y + c1) / (mu_x**2 + mu_y**2 + c1)) * contrast_sensitivity

        return ssim_value_full_image, contrast_sensitivity

    def compute_ms_ssim(y_pred, y, spatial_dims, data_range=1.0, kernel_type="gaussian", kernel_size=11,
                        kernel_sigma=1.5, k1=0.01, k2=0.03, weights=(0.0448, 0.2856, 0.3001, 0.2363, 0.1333)):
        kernel_size = ensure_tuple_rep(kernel_size, spatial_dims)
        kernel_sigma = ensure_tuple_rep(kernel_sigma, spatial_dims)
        # check if image have enough size for the number of downsamplings and the size of the kernel
        weights_div = max(1, (len(weights) - 1)) ** 2
        y_pred_spatial_dims = y_pred.shape[2:]
        for i in range(len(y_pred_spatial_dims)):
            if y_pred_spatial_dims[i] // weights_div <= kernel_size[i] - 1:
                raise ValueError(
                    f"For a given number of `weights` parameters {len(weights)} and kernel size "
                    f"{kernel_size[i]}, the image height must be larger than "
                    f"{(kernel_size[i] - 1) * weights_div}."
                )

        weights_tensor = torch.tensor(weights, device=y_pred.device, dtype=torch.float)

        avg_pool = getattr(F, f"avg_pool{spatial_dims}d")

        multiscale_list = []
        for _ in range(len(weights_tensor)):
            ssim, cs = compute_ssim_and_cs(
                y_pred=y_pred,
                y=y,
                spatial_dims=spatial_dims,
                data_range=data_range,
                kernel_type=kernel_type,
                kernel_size=kernel_size,
                kernel_sigma=kernel_sigma,
                k1=k1,
                k2=k2,
            )

            cs_per_batch = cs.view(cs.shape[0], -1).mean(1)

            multiscale_list.append(torch.relu(cs_per_batch))
            y_pred = avg_pool(y_pred, kernel_size=2)
            y = avg_pool(y, kernel_size=2)

        ssim = ssim.view(ssim.shape[0], -1).mean(1)
        multiscale_list[-1] = torch.relu(ssim)
        multiscale_list_tensor = torch.stack(multiscale_list)

        ms_ssim_value_full_image = torch.prod(multiscale_list_tensor ** weights_tensor.view(-1, 1), dim=0)

        ms_ssim_per_batch = ms_ssim_value_full_image.view(ms_ssim_value_full_image.shape[0], -1).mean(
            1, keepdim=True
        )

        return ms_ssim_per_batch

    # ------------------------------------------------------------------ networks/blocks/convolutions.py
    def split_args(args):
        if isinstance(args, str):
            return args, {}
        name_obj, name_args = args
        return name_obj, name_args

    class Conv:
        CONV = "conv"
        CONVTRANS = "convtrans"
        _table = {("conv", 1): nn.Conv1d, ("conv", 2): nn.Conv2d, ("conv", 3): nn.Conv3d,
                  ("convtrans", 1): nn.ConvTranspose1d, ("convtrans", 2): nn.ConvTranspose2d,
                  ("convtrans", 3): nn.ConvTranspose3d}

        def __class_getitem__(cls, key):
            return cls._table[key]

    class Norm:
        INSTANCE = "instance"
        BATCH = "batch"
        _table = {("instance", 1): nn.InstanceNorm1d, ("instance", 2): nn.InstanceNorm2d,
                  ("instance", 3): nn.InstanceNorm3d, ("batch", 1): nn.BatchNorm1d, ("batch", 2): nn.BatchNorm2d,
                  ("batch", 3): nn.BatchNorm3d}

        def __class_getitem__(cls, key):
            return cls._table[(key[0].lower(), key[1])]

    class Act:
        PRELU = "prelu"
        RELU = "relu"
        _table = {"prelu": nn.PReLU, "relu": nn.ReLU}

        def __class_getitem__(cls, key):
            return cls._table[key.lower()]

    class Dropout:
        DROPOUT = "dropout"
        _table = {("dropout", 1): nn.Dropout, ("dropout", 2): nn.Dropout2d, ("dropout", 3): nn.Dropout3d}

        def __class_getitem__(cls, key):
            return cls._table[key]

    class Convolution(nn.Sequential):
        def __init__(
            self,
            dimensions,
            in_channels,
            out_channels,
            strides=1,
            kernel_size=3,
            act=Act.PRELU,
            norm=Norm.INSTANCE,
            dropout=None,
            dropout_dim=1,
            dilation=1,
            groups=1,
            bias=True,
            conv_only=False,
            is_transposed=False,
        ) -> None:
            super().__init__()
            self.dimensions = dimensions
            self.in_channels = in_channels
            self.out_channels = out_channels
            self.is_transposed = is_transposed

            padding = same_padding(kernel_size, dilation)
            conv_type = Conv[Conv.CONVTRANS if is_transposed else Conv.CONV, dimensions]

            # define the normalisation type and the arguments to the constructor
            norm_name, norm_args = split_args(norm)
            norm_type = Norm[norm_name, dimensions]

            # define the activation type and the arguments to the constructor
            if act is not None:
                act_name, act_args = split_args(act)
                act_type = Act[act_name]
            else:
                act_type = act_args = None

            if dropout:
                # if dropout was specified simply as a p value, use default name and make a keyword map with the value
                if isinstance(dropout, (int, float)):
                    drop_name = Dropout.DROPOUT
                    drop_args = {"p": dropout}
                else:
                    drop_name, drop_args = split_args(dropout)

                if dropout_dim > dimensions:
                    raise ValueError(
                        f"dropout_dim should be no larger than dimensions, got dropout_dim={dropout_dim} and dimensions={dimensions}."
                    )
                drop_type = Dropout[drop_name, dropout_dim]

            if is_transposed:
                conv = conv_type(
                    in_channels,
                    out_channels,
                    kernel_size=kernel_size,
                    stride=strides,
                    padding=padding,
                    output_padding=strides - 1,
                    groups=groups,
                    bias=bias,
                    dilation=dilation,
                )
            else:
                conv = conv_type(
                    in_channels,
                    out_channels,
                    kernel_size=kernel_size,
                    stride=strides,
                    padding=padding,
                    dilation=dilation,
                    groups=groups,
                    bias=bias,
                )

            self.add_module("conv", conv)

            if not conv_only:
                self.add_module("norm", norm_type(out_channels, **norm_args))
                if dropout:
                    self.add_module("dropout", drop_type(**drop_args))
                if act is not None:
                    self.add_module("act", act_type(**act_args))

    class ResidualUnit(nn.Module):
        def __init__(
            self,
            dimensions,
            in_channels,
            out_channels,
            strides=1,
            kernel_size=3,
            subunits=2,
            act=Act.PRELU,
            norm=Norm.INSTANCE,
            dropout=None,
            dropout_dim=1,
            dilation=1,
            bias=True,
            last_conv_only=False,
        ) -> None:
            super().__init__()
            self.dimensions = dimensions
            self.in_channels = in_channels
            self.out_channels = out_channels
            self.conv = nn.Sequential()
            self.residual = nn.Identity()

            padding = same_padding(kernel_size, dilation)
            schannels = in_channels
            sstrides = strides
            subunits = max(1, subunits)

            for su in range(subunits):
                conv_only = last_conv_only and su == (subunits - 1)
                unit = Convolution(
                    dimensions,
                    schannels,
                    out_channels,
                    strides=sstrides,
                    kernel_size=kernel_size,
                    act=act,
                    norm=norm,
                    dropout=dropout,
                    dropout_dim=dropout_dim,
                    dilation=dilation,
                    bias=bias,
                    conv_only=conv_only,
                )

                self.conv.add_module(f"unit{su:d}", unit)

                # after first loop set channels and strides to what they should be for subsequent units
                schannels = out_channels
                sstrides = 1

            # apply convolution to input to change number of output channels and size to match that coming from self.conv
            if np.prod(strides) != 1 or in_channels != out_channels:
                rkernel_size = kernel_size
                rpadding = padding

                if np.prod(strides) == 1:  # if only adapting number of channels a 1x1 kernel is used with no padding
                    rkernel_size = 1
                    rpadding = 0

                conv_type = Conv[Conv.CONV, dimensions]
                self.residual = conv_type(in_channels, out_channels, rkernel_size, strides, rpadding, bias=bias)

        def forward(self, x):
            res = self.residual(x)  # create the additive residual from x
            cx = self.conv(x)  # apply x to sequence of operations
            return cx + res  # add the residual to the output

    return SimpleNamespace(**{k: v for k, v in locals().items() if not k.startswith("__")})


# ============================================================================ data and helpers
def _seg_data(seed=0, b=2, c=3, shape=(4, 3, 5)):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(b, c) + shape)
    labels = rng.integers(0, c, size=(b, 1) + shape)
    return logits, labels


def _onehot_np(labels, c):
    return (labels == np.arange(c).reshape((1, c) + (1,) * (labels.ndim - 2))).astype(np.float64)


def _softmax_np(x, axis=1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _sigmoid_np(x):
    return 1.0 / (1.0 + np.exp(-x))


def _np(t):
    return t.detach().cpu().numpy() if hasattr(t, "detach") else np.asarray(t)


def _dice_np(p, t, axes, squared=False, jaccard=False, nr=1e-5, dr=1e-5):
    inter = (p * t).sum(axes)
    pp, tt = (p ** 2, t ** 2) if squared else (p, t)
    den = tt.sum(axes) + pp.sum(axes)
    if jaccard:
        den = 2.0 * (den - inter)
    return 1.0 - (2.0 * inter + nr) / (den + dr)


def _compare(a, b, tol):
    assert a.keys() == b.keys()
    for k in a:
        t = max(tol, 1e-6) if np.asarray(a[k]).dtype == np.float32 else tol  # the focal loss computes in float32
        np.testing.assert_allclose(np.asarray(a[k], dtype=np.float64), np.asarray(b[k], dtype=np.float64),
                                   rtol=t, atol=t, err_msg=k)


# ============================================================================ pages
def losses_page(torch, logits, labels):
    M = monai(torch)
    x = torch.tensor(logits, dtype=torch.float64)
    y = torch.tensor(labels)
    yo = M.one_hot(y, 3, dtype=torch.float64)
    out = {"onehot": yo}
    out["dice_softmax"] = M.DiceLoss(softmax=True, to_onehot_y=True)(x, y)
    out["dice_sigmoid_none"] = M.DiceLoss(sigmoid=True, reduction="none")(x, yo)
    out["dice_nobg_sq_sum"] = M.DiceLoss(softmax=True, include_background=False, squared_pred=True,
                                         reduction="sum")(x, yo)
    out["dice_jaccard_batch"] = M.DiceLoss(other_act=torch.tanh, jaccard=True, batch=True, reduction="none")(x, yo)
    out["gdl_square"] = M.GeneralizedDiceLoss(softmax=True, to_onehot_y=True, reduction="none")(x, y)
    out["gdl_simple_batch"] = M.GeneralizedDiceLoss(sigmoid=True, w_type="simple", batch=True)(x, yo)
    out["tversky"] = M.TverskyLoss(softmax=True, alpha=0.3, beta=0.7, reduction="none")(x, yo)
    soft = torch.softmax(torch.tensor(logits[:, ::-1].copy(), dtype=torch.float64) * 0.7, 1)
    out["tversky_soft"] = M.TverskyLoss(sigmoid=True, soft_label=True, reduction="none")(x, soft)
    out["focal_sig"] = M.FocalLoss(to_onehot_y=True, gamma=2.0, alpha=0.25, reduction="none")(x, y)
    out["focal_soft_w"] = M.FocalLoss(to_onehot_y=True, use_softmax=True, weight=[0.5, 1.0, 2.0], reduction="sum")(x, y)
    out["focal_g0"] = M.FocalLoss(gamma=0.0)(x, soft)
    out["dice_ce"] = M.DiceCELoss(softmax=True, to_onehot_y=True, lambda_ce=0.5)(x, y)
    out["dice_ce_onehot"] = M.DiceCELoss(sigmoid=True, ce_weight=torch.tensor([1.0, 2.0, 0.5], dtype=torch.float64))(x, yo)
    return {k: _np(v) for k, v in out.items()}


def test_losses_against_numpy():
    logits, labels = _seg_data()
    # class 2 absent from the first item: GDL's infinite weight is replaced by the row's largest
    labels[0][labels[0] == 2] = 1
    out = losses_page(lucid, logits, labels)
    sp = (2, 3, 4)
    t = _onehot_np(labels, 3)
    np.testing.assert_array_equal(out["onehot"], t)
    p = _softmax_np(logits)
    s = _sigmoid_np(logits)
    np.testing.assert_allclose(out["dice_softmax"], _dice_np(p, t, sp).mean(), rtol=1e-12)
    np.testing.assert_allclose(out["dice_sigmoid_none"], _dice_np(s, t, sp), rtol=1e-12)
    np.testing.assert_allclose(out["dice_nobg_sq_sum"], _dice_np(p[:, 1:], t[:, 1:], sp, squared=True).sum(), rtol=1e-12)
    np.testing.assert_allclose(out["dice_jaccard_batch"], _dice_np(np.tanh(logits), t, (0,) + sp, jaccard=True),
                               rtol=1e-12)
    # generalized Dice
    g = t.sum(sp)
    with np.errstate(divide="ignore"):
        w = 1.0 / (g.astype(np.float32) * g.astype(np.float32))
    for row in w:
        row[np.isinf(row)] = 0.0
        row[row == 0.0] = row.max()
    assert np.isfinite(w).all() and w[0, 2] == w[0].max()
    inter, den = (p * t).sum(sp), (p + t).sum(sp)
    np.testing.assert_allclose(out["gdl_square"], 1 - (2 * (inter * w).sum(1) + 1e-5) / ((den * w).sum(1) + 1e-5),
                               rtol=1e-6)
    gb = t.sum((0,) + sp)
    wb = 1.0 / gb
    ib, db = (s * t).sum((0,) + sp), (s + t).sum((0,) + sp)
    np.testing.assert_allclose(out["gdl_simple_batch"], 1 - (2 * (ib * wb).sum() + 1e-5) / ((db * wb).sum() + 1e-5),
                               rtol=1e-6)
    # Tversky, hard and soft labels
    tp, fp, fn = (p * t).sum(sp), (p * (1 - t)).sum(sp), ((1 - p) * t).sum(sp)
    np.testing.assert_allclose(out["tversky"], 1 - (tp + 1e-5) / (tp + 0.3 * fp + 0.7 * fn + 1e-5), rtol=1e-12)
    q = _softmax_np(logits[:, ::-1] * 0.7)
    po, go, dd = np.abs(s).sum(sp), np.abs(q).sum(sp), np.abs(s - q).sum(sp)
    tp = (po + go - dd) / 2
    np.testing.assert_allclose(out["tversky_soft"],
                               1 - (tp + 1e-5) / (tp + 0.5 * (po - tp) + 0.5 * (go - tp) + 1e-5), rtol=1e-12)
    # focal, sigmoid with alpha (computed in float32 by the loss)
    bce = -(t * np.log(s) + (1 - t) * np.log(1 - s))
    pt = np.where(t == 1, s, 1 - s)
    fl = (1 - pt) ** 2 * bce * (t * 0.25 + (1 - t) * 0.75)
    np.testing.assert_allclose(out["focal_sig"], fl, rtol=2e-5, atol=1e-7)
    assert out["focal_sig"].dtype == np.float32
    fs = -(1 - p) ** 2 * np.log(p) * t * np.array([0.5, 1.0, 2.0]).reshape(1, 3, 1, 1, 1)
    np.testing.assert_allclose(out["focal_soft_w"], fs.mean(sp).sum(), rtol=2e-5)
    bce_soft = -(q * np.log(s) + (1 - q) * np.log(1 - s))
    np.testing.assert_allclose(out["focal_g0"], bce_soft.mean(), rtol=2e-5)
    # Dice + CE
    ce = -np.log(np.take_along_axis(p, labels, 1)).mean()
    np.testing.assert_allclose(out["dice_ce"], _dice_np(p, t, sp).mean() + 0.5 * ce, rtol=1e-12)
    wce = np.array([1.0, 2.0, 0.5])[labels[:, 0]]
    ce_w = (-np.log(np.take_along_axis(p, labels, 1))[:, 0] * wce).sum() / wce.sum()
    np.testing.assert_allclose(out["dice_ce_onehot"], _dice_np(s, t, sp).mean() + ce_w, rtol=1e-12)


def test_losses_torch_parity():
    torch = pytest.importorskip("torch")
    logits, labels = _seg_data()
    labels[0][labels[0] == 2] = 1
    _compare(losses_page(lucid, logits, labels), losses_page(torch, logits, labels), 1e-10)


def _loss_fns(M, torch, t_soft):
    return {
        "dice_softmax_sq_jac": lambda x, y: M.DiceLoss(softmax=True, to_onehot_y=True, squared_pred=True,
                                                       jaccard=True)(x, y),
        "dice_sigmoid_batch_nobg": lambda x, y: M.DiceLoss(sigmoid=True, to_onehot_y=True, include_background=False,
                                                           batch=True)(x, y),
        "gdl_softmax": lambda x, y: M.GeneralizedDiceLoss(softmax=True, to_onehot_y=True)(x, y),
        "tversky_soft": lambda x, y: M.TverskyLoss(sigmoid=True, soft_label=True, alpha=0.2, beta=0.8)(x, t_soft),
        "dice_ce": lambda x, y: M.DiceCELoss(softmax=True, to_onehot_y=True)(x, y),
    }


def test_loss_gradients_float64_finite_differences():
    logits, labels = _seg_data(1, b=1, c=3, shape=(2, 2, 2))
    M = monai(lucid)
    y = lucid.tensor(labels)
    t_soft = lucid.tensor(_softmax_np(np.random.default_rng(5).normal(size=logits.shape)) * 0.9 + 0.03)
    for name, fn in _loss_fns(M, lucid, t_soft).items():
        x = lucid.tensor(logits, dtype=lucid.float64, requires_grad=True)
        assert lucid.autograd.gradcheck(lambda x: fn(x, y), (x,), eps=1e-6, atol=1e-8, rtol=1e-6), name
    # the focal loss computes in float32 (``input.float()``): its gradient against float64 central
    # differences of the same formula written in NumPy
    x = lucid.tensor(logits, dtype=lucid.float32, requires_grad=True)
    M.FocalLoss(to_onehot_y=True, gamma=2.0, alpha=0.25)(x, y).backward()
    t = _onehot_np(labels, 3)

    def focal(z):
        s = _sigmoid_np(z)
        pt = np.where(t == 1, s, 1 - s)
        return ((1 - pt) ** 2 * -np.log(pt) * (t * 0.25 + (1 - t) * 0.75)).mean()

    z0 = logits.astype(np.float32).astype(np.float64)
    fd = np.zeros_like(z0)
    for i in np.ndindex(z0.shape):
        e = np.zeros_like(z0)
        e[i] = 1e-6
        fd[i] = (focal(z0 + e) - focal(z0 - e)) / 2e-6
    np.testing.assert_allclose(_np(x.grad), fd, rtol=1e-4, atol=1e-7)


def _grads_page(torch, logits, labels, t_soft):
    M = monai(torch)
    y = torch.tensor(labels)
    ts = torch.tensor(t_soft)
    out = {}
    for name, fn in _loss_fns(M, torch, ts).items():
        x = torch.tensor(logits, dtype=torch.float64, requires_grad=True)
        loss = fn(x, y)
        loss.backward()
        out[name] = loss.detach().numpy() if torch.__name__ == "torch" else _np(loss)
        out[name + "_grad"] = _np(x.grad)
    return out


def test_loss_gradients_torch_parity():
    torch = pytest.importorskip("torch")
    logits, labels = _seg_data(1, b=1, c=3, shape=(2, 2, 2))
    t_soft = _softmax_np(np.random.default_rng(5).normal(size=logits.shape)) * 0.9 + 0.03
    _compare(_grads_page(lucid, logits, labels, t_soft), _grads_page(torch, logits, labels, t_soft), 1e-10)


def test_loss_errors_and_warnings():
    M = monai(lucid)
    x = lucid.zeros(1, 3, 2, 2)
    with pytest.raises(AssertionError, match="ground truth has different shape"):
        M.DiceLoss()(x, lucid.zeros(1, 2, 2, 2))
    with pytest.raises(ValueError, match="Incompatible values"):
        M.DiceLoss(sigmoid=True, softmax=True)
    with pytest.raises(AssertionError, match="labels should have a channel with length equal to one"):
        M.one_hot(lucid.zeros(1, 2, 2, 2, dtype=lucid.long), 3)
    with pytest.raises(RuntimeError, match="index 5 is out of bounds for dimension 1 with size 3"):
        M.one_hot(lucid.tensor([[[0, 5]]]), 3)
    # DiceCELoss.ce on a spatial label map with a class out of range: PyTorch's IndexError ("Target 3
    # is out of bounds."); Lucid's message named ``one_hot`` instead of the loss. (On a device the
    # range is not checked, README "Differences from PyTorch": it would read back every step.)
    if lucid.get_default_device().type == "cpu":
        with pytest.raises(IndexError, match=r"^cross_entropy: target class values must be in \[0, 3\), got range \[0, 3\]"):
            M.DiceCELoss(softmax=True).ce(lucid.zeros(1, 3, 2, 2), lucid.tensor([[[[0, 1], [2, 3]]]]))
    with pytest.warns(UserWarning, match="single channel prediction, `softmax=True` ignored"):
        loss = M.DiceLoss(softmax=True)(lucid.ones(1, 1, 2, 2) * 0.5, lucid.ones(1, 1, 2, 2))
    assert abs(loss.item() - (1 - (2 * 2.0 + 1e-5) / (6.0 + 1e-5))) < 1e-6


# ---------------------------------------------------------------------------- metrics
def _metric_data():
    rng = np.random.default_rng(3)
    yp = (rng.random((3, 3, 4, 4)) > 0.5).astype(np.float32)
    y = (rng.random((3, 3, 4, 4)) > 0.6).astype(np.float32)
    y[1, 2] = 0  # empty ground truth: NaN (ignore_empty) or 1/0
    yp[1, 2] = 0
    y[2, 1] = 0  # empty ground truth, non-empty prediction
    scores = np.round(rng.random((12, 3)), 1).astype(np.float32)  # ties
    labels = (rng.random((12, 3)) > 0.5).astype(np.float32)
    labels[0, :] = 1
    labels[1, :] = 0
    return yp, y, scores, labels


def metrics_page(torch, yp, y, scores, labels):
    M = monai(torch)
    yp_t, y_t = torch.tensor(yp), torch.tensor(y)
    out = {}
    out["dice"] = M.compute_dice(yp_t, y_t)
    out["dice_nobg_keep"] = M.compute_dice(yp_t, y_t, include_background=False, ignore_empty=False)
    out["iou"] = M.compute_iou(yp_t, y_t)
    for red in ("mean", "sum", "mean_batch", "mean_channel", "sum_channel"):
        f, nn_ = M.do_metric_reduction(M.compute_dice(yp_t, y_t), red)
        out["red_" + red] = f
        out["notnan_" + red] = nn_
    cm = M.get_confusion_matrix(yp_t, y_t)
    out["cm"] = cm
    for name in ("tpr", "tnr", "ppv", "f1", "mcc", "accuracy"):
        out["cm_" + name] = M.compute_confusion_matrix_metric(name, cm)
    s, l = torch.tensor(scores), torch.tensor(labels)
    out["auc_1d"] = M.compute_roc_auc(s[:, 0], l[:, 0])
    out["auc_macro"] = M.compute_roc_auc(s, l)
    out["auc_micro"] = M.compute_roc_auc(s, l, average="micro")
    out["auc_weighted"] = M.compute_roc_auc(s, l, average="weighted")
    out["auc_none"] = M.compute_roc_auc(s, l, average="none")
    return {k: _np(v) if hasattr(v, "detach") else np.asarray(v, dtype=np.float64) for k, v in out.items()}


def _auc_rank(s, l):
    pos, neg = s[l == 1], s[l == 0]
    return ((pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()) / (len(pos) * len(neg))


def test_metrics_against_numpy():
    yp, y, scores, labels = _metric_data()
    out = metrics_page(lucid, yp, y, scores, labels)
    sp = (2, 3)
    inter, yo, po = (yp * y).sum(sp), y.sum(sp), yp.sum(sp)
    with np.errstate(invalid="ignore", divide="ignore"):
        dice = np.where(yo > 0, 2 * inter / (yo + po), np.nan)
        iou = np.where(yo > 0, inter / (yo + po - inter), np.nan)
        keep = np.where((yo + po) > 0, 2 * inter / (yo + po), 1.0)[:, 1:]
    np.testing.assert_allclose(out["dice"], dice, rtol=1e-6)
    assert np.isnan(out["dice"][1, 2]) and np.isnan(out["dice"][2, 1])
    np.testing.assert_allclose(out["dice_nobg_keep"], keep, rtol=1e-6)
    assert out["dice_nobg_keep"][1, 1] == 1.0 and out["dice_nobg_keep"][2, 0] == 0.0
    np.testing.assert_allclose(out["iou"], iou, rtol=1e-6)
    ok = ~np.isnan(dice)
    d0 = np.where(ok, dice, 0.0)
    np.testing.assert_allclose(out["red_mean"], np.mean(d0.sum(1) / ok.sum(1)), rtol=1e-6)
    np.testing.assert_allclose(out["red_sum"], d0.sum(), rtol=1e-6)
    np.testing.assert_allclose(out["notnan_sum"], ok.sum())
    np.testing.assert_allclose(out["red_mean_batch"], d0.sum(0) / ok.sum(0), rtol=1e-6)
    np.testing.assert_allclose(out["notnan_mean_batch"], ok.sum(0))
    np.testing.assert_allclose(out["red_mean_channel"], d0.sum(1) / ok.sum(1), rtol=1e-6)
    np.testing.assert_allclose(out["red_sum_channel"], d0.sum(1), rtol=1e-6)
    # confusion matrix
    P, Y = yp.reshape(3, 3, -1), y.reshape(3, 3, -1)
    tp, tn = ((P == 1) & (Y == 1)).sum(-1), ((P == 0) & (Y == 0)).sum(-1)
    fp, fn = ((P == 1) & (Y == 0)).sum(-1), ((P == 0) & (Y == 1)).sum(-1)
    np.testing.assert_array_equal(out["cm"], np.stack([tp, fp, tn, fn], -1))
    with np.errstate(invalid="ignore", divide="ignore"):
        np.testing.assert_allclose(out["cm_tpr"], np.where(tp + fn > 0, tp / (tp + fn), np.nan), rtol=1e-6)
        np.testing.assert_allclose(out["cm_tnr"], tn / (tn + fp), rtol=1e-6)
        np.testing.assert_allclose(out["cm_ppv"], np.where(tp + fp > 0, tp / (tp + fp), np.nan), rtol=1e-6)
        np.testing.assert_allclose(out["cm_f1"], 2 * tp / (2 * tp + fn + fp), rtol=1e-6)
        den = np.sqrt(((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)).astype(np.float64))
        np.testing.assert_allclose(out["cm_mcc"], np.where(den > 0, (tp * tn - fp * fn) / den, np.nan), rtol=1e-5)
    np.testing.assert_allclose(out["cm_accuracy"], (tp + tn) / 16, rtol=1e-6)
    # ROC AUC: the running sum against the Mann-Whitney statistic with ties counted 1/2
    per = [_auc_rank(scores[:, i], labels[:, i]) for i in range(3)]
    np.testing.assert_allclose(out["auc_1d"], per[0], rtol=1e-12)
    np.testing.assert_allclose(out["auc_none"], per, rtol=1e-12)
    np.testing.assert_allclose(out["auc_macro"], np.mean(per), rtol=1e-12)
    np.testing.assert_allclose(out["auc_weighted"], np.average(per, weights=labels.sum(0)), rtol=1e-12)
    np.testing.assert_allclose(out["auc_micro"], _auc_rank(scores.ravel(), labels.ravel()), rtol=1e-12)
    M = monai(lucid)
    with pytest.warns(UserWarning, match="y values can not be all 1"):
        assert math.isnan(M.compute_roc_auc(lucid.tensor([0.1, 0.2]), lucid.tensor([1, 1])))


def test_metrics_torch_parity():
    torch = pytest.importorskip("torch")
    data = _metric_data()
    a, b = metrics_page(lucid, *data), metrics_page(torch, *data)
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=1e-6, err_msg=k)  # NaNs in the same places


# ---------------------------------------------------------------------------- sliding window
def _gauss_np(size, scale=0.125):
    m = np.ones(())
    for n in size:
        x = np.arange(-(n - 1) / 2.0, (n - 1) / 2.0 + 1)
        m = np.multiply.outer(m, np.exp(-x ** 2 / (2 * (n * scale) ** 2)))
    return np.clip(m, max(m.min(), 1e-3), None)


def _starts_np(image, roi, overlap):
    step = roi if roi == image else max(int(roi * (1 - overlap)), 1)
    out, s = [], 0
    while True:
        out.append(min(s, image - roi))
        if s + roi >= image:
            return out
        s += step


def _sw_net(torch, seed=0):
    torch.manual_seed(seed)
    net = torch.nn.Conv3d(2, 3, 1).double()
    with torch.no_grad():
        net.weight.copy_(torch.tensor(np.random.default_rng(seed).normal(size=(3, 2, 1, 1, 1))))
        net.bias.copy_(torch.tensor([0.1, -0.2, 0.3], dtype=torch.float64))
    return net


def sliding_page(torch, vol):
    M = monai(torch)
    net = _sw_net(torch)
    x = torch.tensor(vol)
    out = {}
    out["imp"] = M.compute_importance_map((4, 5, 3), mode="gaussian", sigma_scale=0.125, device=x.device)
    out["imp_const"] = M.compute_importance_map((2, 3), mode="constant", device=x.device)
    out["slices"] = np.array([[(s.start, s.stop) for s in w] for w in M.dense_patch_slices((6, 7, 5), (4, 4, 4), (2, 3, 3))])
    with torch.no_grad():
        out["full"] = net(x)
        out["sw_gauss"] = M.sliding_window_inference(x, (4, 4, 4), 3, net, overlap=0.5, mode="gaussian")
        out["sw_pad"] = M.sliding_window_inference(x, (4, 9, -1), 2, net, overlap=0.25)
        out["sw_mean"] = M.sliding_window_inference(
            x, (4, 4, 4), 4, lambda w: w.mean(dim=(2, 3, 4), keepdim=True) + 0 * w, overlap=0.5, mode="gaussian")
    return {k: _np(v) for k, v in out.items()}


def _vol():
    return np.random.default_rng(7).normal(size=(2, 2, 6, 7, 5))


def test_sliding_window_against_full_volume_and_numpy():
    vol = _vol()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the list keys are MONAI's; only PyTorch's deprecation note may warn
        warnings.filterwarnings("ignore", "Using a non-tuple sequence", UserWarning)
        out = sliding_page(lucid, vol)
    np.testing.assert_allclose(out["imp"], _gauss_np((4, 5, 3)), rtol=1e-6)
    assert out["imp"].dtype == np.float32 and out["imp"].shape == (4, 5, 3)
    np.testing.assert_array_equal(out["imp_const"], np.ones((2, 3)))
    starts = [_starts_np(6, 4, 0.5), [0, 3], [0, 1]]  # scan 2 in dim 0; 3 in dims 1, 2 (last start clipped)
    assert starts == [[0, 2], [0, 3], [0, 1]]
    want = [[(a, a + 4), (b, b + 4), (c, c + 4)] for a in [0, 2] for b in [0, 3] for c in [0, 1]]
    np.testing.assert_array_equal(out["slices"], want)
    # a pointwise linear network: each window's weighted average is the full call
    np.testing.assert_allclose(out["sw_gauss"], out["full"], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out["sw_pad"], out["full"], rtol=1e-12, atol=1e-12)  # padded (roi 9 > 7), cropped
    # a window-mean predictor: the Gaussian blend recomputed in NumPy
    w = _gauss_np((4, 4, 4))
    acc, cnt = np.zeros(vol.shape), np.zeros(vol.shape[2:])
    for a in _starts_np(6, 4, 0.5):
        for b in _starts_np(7, 4, 0.5):
            for c in _starts_np(5, 4, 0.5):
                sl = (slice(a, a + 4), slice(b, b + 4), slice(c, c + 4))
                m = vol[(slice(None), slice(None)) + sl].mean(axis=(2, 3, 4), keepdims=True)
                acc[(slice(None), slice(None)) + sl] += w.astype(np.float32).astype(np.float64) * m
                cnt[sl] += w.astype(np.float32).astype(np.float64)
    np.testing.assert_allclose(out["sw_mean"], acc / cnt, rtol=1e-12)
    assert np.ptp(out["sw_mean"]) > 0.1  # windows differ: the blend is not trivially constant


def test_sliding_window_torch_parity():
    torch = pytest.importorskip("torch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _compare(sliding_page(lucid, _vol()), sliding_page(torch, _vol()), 1e-12)


def test_list_of_slices_as_index_key():
    x = lucid.arange(24.0).reshape(1, 2, 3, 4)
    a = np.arange(24.0).reshape(1, 2, 3, 4)
    with pytest.warns(UserWarning, match="non-tuple sequence for multidimensional indexing"):
        got = x[[slice(0, 1), slice(None), slice(1, 3), 2]]
    np.testing.assert_array_equal(_np(got), a[0:1, :, 1:3, 2])
    with pytest.warns(UserWarning):
        got = x[[0, Ellipsis, None]]
    assert tuple(got.shape) == (2, 3, 4, 1)
    y = lucid.zeros(1, 2, 3, 4)
    with pytest.warns(UserWarning):
        y[[slice(None), 1, slice(0, 2)]] += 1
    assert _np(y).sum() == 8 and _np(y)[0, 1, :2].min() == 1
    z = lucid.arange(6).reshape(2, 3)
    with pytest.warns(UserWarning):
        assert z[[lucid.tensor([1, 0]), lucid.tensor([2, 2])]].tolist() == [5, 2]
    with pytest.warns(UserWarning):  # nested lists: one index per dim, z[[0, 1], [1, 2]]
        assert z[[[0, 1], [1, 2]]].tolist() == np.arange(6).reshape(2, 3)[[0, 1], [1, 2]].tolist()
    # a list of ints stays one advanced index (no warning)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tuple(x[[0, 0]].shape) == (2, 2, 3, 4)


# ---------------------------------------------------------------------------- residual unit
def _conv3d_np(x, w, b, stride, pad):
    xp_ = np.pad(x, ((0, 0), (0, 0)) + ((pad, pad),) * 3)
    k = w.shape[2]
    win = np.lib.stride_tricks.sliding_window_view(xp_, (k, k, k), axis=(2, 3, 4))[:, :, ::stride, ::stride, ::stride]
    return np.einsum("bcxyzijk,ocijk->boxyz", win, w) + b.reshape(1, -1, 1, 1, 1)


def _unit_np(x, conv, prelu_a, stride):
    y = _conv3d_np(x, conv["w"], conv["b"], stride, 1)
    m, v = y.mean((2, 3, 4), keepdims=True), y.var((2, 3, 4), keepdims=True)
    y = (y - m) / np.sqrt(v + 1e-5)
    return np.where(y > 0, y, prelu_a * y)


def _ru_params(net):
    P = {k: _np(v).astype(np.float64) for k, v in net.state_dict().items()}
    return P


def test_residual_unit_forward_against_numpy():
    M = monai(lucid)
    lucid.manual_seed(0)
    x = np.random.default_rng(2).normal(size=(2, 2, 6, 6, 6))
    for strides in (1, 2):
        net = M.ResidualUnit(3, 2, 3, strides=strides, subunits=2).double()
        P = _ru_params(net)
        names = sorted(P)
        assert "residual.weight" in names and "conv.unit0.conv.weight" in names and "conv.unit1.act.weight" in names
        h = _unit_np(x, {"w": P["conv.unit0.conv.weight"], "b": P["conv.unit0.conv.bias"]}, P["conv.unit0.act.weight"], strides)
        h = _unit_np(h, {"w": P["conv.unit1.conv.weight"], "b": P["conv.unit1.conv.bias"]}, P["conv.unit1.act.weight"], 1)
        rk = 1 if strides == 1 else 3
        res = _conv3d_np(x, P["residual.weight"], P["residual.bias"], strides, 0 if rk == 1 else 1)
        assert P["residual.weight"].shape[2] == rk
        got = _np(net(lucid.tensor(x)))
        assert got.shape == (2, 3, 6 // strides, 6 // strides, 6 // strides)
        np.testing.assert_allclose(got, h + res, rtol=1e-10, atol=1e-10)


def train_page(torch, state=None, steps=6):
    M = monai(torch)
    torch.manual_seed(0)
    net = M.ResidualUnit(3, 1, 2, strides=1, subunits=2, last_conv_only=True)
    if state is not None:
        net.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
    rng = np.random.default_rng(4)
    img = rng.normal(size=(2, 1, 8, 8, 8)).astype(np.float32)
    lab = (img > 0.3).astype(np.int64)  # a thresholding task the unit can learn
    x, y = torch.tensor(img), torch.tensor(lab)
    loss_fn = M.DiceCELoss(to_onehot_y=True, softmax=True)
    opt = torch.optim.Adam(net.parameters(), lr=0.05)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    with torch.no_grad():
        pred = net(x).argmax(1, keepdim=True)
        dice = M.compute_dice(M.one_hot(pred, 2), M.one_hot(y, 2)).mean()
    return {"losses": np.array(losses), "dice": _np(dice)}, {k: _np(v) for k, v in net.state_dict().items()}


def test_residual_unit_training_loss_goes_down():
    out, _ = train_page(lucid)
    assert out["losses"][-1] < 0.8 * out["losses"][0], out["losses"]
    assert float(out["dice"]) > 0.6


def test_residual_unit_training_torch_parity():
    torch = pytest.importorskip("torch")
    _, state0 = train_page(lucid, steps=0)
    a, _ = train_page(lucid, state0)
    b, _ = train_page(torch, state0)
    np.testing.assert_allclose(a["losses"], b["losses"], rtol=1e-5)
    np.testing.assert_allclose(a["dice"], b["dice"], rtol=1e-5)


# ---------------------------------------------------------------------------- SSIM
def _corr_np(x, k):
    """Valid cross-correlation of (B, C, *S) with one (k...) kernel per channel."""
    nd = k.ndim
    win = np.lib.stride_tricks.sliding_window_view(x, k.shape, axis=tuple(range(2, 2 + nd)))
    sub = "ijk"[:nd]
    return np.einsum(f"...{sub},{sub}->...", win, k)


def _ssim_np(x, y, k, c1, c2, cov_norm=1.0):
    ux, uy = _corr_np(x, k), _corr_np(y, k)
    vx = cov_norm * (_corr_np(x * x, k) - ux * ux)
    vy = cov_norm * (_corr_np(y * y, k) - uy * uy)
    vxy = cov_norm * (_corr_np(x * y, k) - ux * uy)
    cs = (2 * vxy + c2) / (vx + vy + c2)
    return (2 * ux * uy + c1) / (ux ** 2 + uy ** 2 + c1) * cs, cs


def _gk_np(size, sigma):
    k = np.ones(())
    for n, s in zip(size, sigma):
        d = np.arange((1 - n) / 2, (1 + n) / 2)
        g = np.exp(-(d / s) ** 2 / 2)
        k = np.multiply.outer(k, g / g.sum())
    return k


def _ssim_data():
    rng = np.random.default_rng(11)
    x2 = rng.random((2, 2, 9, 8))
    y2 = np.clip(x2 + 0.2 * rng.normal(size=x2.shape), 0, 1)
    x3 = rng.random((1, 1, 6, 7, 6))
    y3 = np.clip(x3 + 0.3 * rng.normal(size=x3.shape), 0, 1)
    return x2, y2, x3, y3


def ssim_page(torch, x2, y2, x3, y3):
    M = monai(torch)
    out = {}
    X2, Y2, X3, Y3 = (torch.tensor(a) for a in (x2, y2, x3, y3))
    dr = torch.tensor([1.0], dtype=torch.float64)
    out["loss2"] = M.SSIMLoss(win_size=3, spatial_dims=2)(X2, Y2, dr)
    out["loss3"] = M.SSIMLoss(win_size=3, spatial_dims=3)(X3, Y3, dr)
    out["ssim2"], out["cs2"] = M.compute_ssim_and_cs(X2, Y2, 2, (5, 3), (1.5, 0.8))
    out["ssim3_u"], _ = M.compute_ssim_and_cs(X3, Y3, 3, (3, 3, 3), (1.0, 1.0, 1.0), kernel_type="uniform",
                                              data_range=2.0)
    out["ssim3_g"], _ = M.compute_ssim_and_cs(X3, Y3, 3, (3, 3, 3), (1.0, 0.7, 1.3))
    out["ms2"] = M.compute_ms_ssim(X2, Y2, 2, kernel_size=3, weights=(0.4, 0.6))
    x = torch.tensor(x2[:, :1], requires_grad=True)
    M.SSIMLoss(win_size=3)(x, Y2[:, :1], dr).backward()
    out["loss2_grad"] = x.grad
    return {k: _np(v) for k, v in out.items()}


def test_ssim_against_numpy():
    x2, y2, x3, y3 = _ssim_data()
    out = ssim_page(lucid, x2, y2, x3, y3)
    u3 = np.full((3, 3), np.float32(1 / 9), np.float64)  # the window buffer is float32, cast to x's dtype
    want = np.mean([1 - _ssim_np(x2[:, c:c + 1], y2[:, c:c + 1], u3, 1e-4, 9e-4, 9 / 8)[0].mean() for c in range(2)])
    np.testing.assert_allclose(out["loss2"], want, rtol=1e-12)
    u33 = np.full((3, 3, 3), np.float32(1 / 27), np.float64)
    np.testing.assert_allclose(out["loss3"], 1 - _ssim_np(x3, y3, u33, 1e-4, 9e-4, 9 / 8)[0].mean(), rtol=1e-12)
    s, cs = _ssim_np(x2, y2, _gk_np((5, 3), (1.5, 0.8)), 1e-4, 9e-4)
    np.testing.assert_allclose(out["ssim2"], s, rtol=2e-5, atol=2e-6)  # float32 (MONAI casts)
    np.testing.assert_allclose(out["cs2"], cs, rtol=2e-5, atol=2e-6)
    assert out["ssim2"].shape == (2, 2, 5, 6) and out["ssim2"].dtype == np.float32
    np.testing.assert_allclose(out["ssim3_u"], _ssim_np(x3, y3, u33, 4e-4, 36e-4)[0], rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(out["ssim3_g"], _ssim_np(x3, y3, _gk_np((3, 3, 3), (1.0, 0.7, 1.3)), 1e-4, 9e-4)[0],
                               rtol=2e-5, atol=2e-6)
    # MS-SSIM with two scales: cs at full size ** 0.4 times ssim at half size ** 0.6
    k = _gk_np((3, 3), (1.5, 1.5))
    _, cs0 = _ssim_np(x2, y2, k, 1e-4, 9e-4)
    pool = lambda a: a[..., :8, :8].reshape(2, 2, 4, 2, 4, 2).mean((3, 5))  # noqa: E731
    s1, _ = _ssim_np(pool(x2), pool(y2), k, 1e-4, 9e-4)
    ms = np.maximum(cs0.reshape(2, -1).mean(1), 0) ** 0.4 * np.maximum(s1.reshape(2, -1).mean(1), 0) ** 0.6
    np.testing.assert_allclose(out["ms2"], ms[:, None], rtol=2e-5)
    with pytest.raises(ValueError, match="the image height must be larger than 32"):
        monai(lucid).compute_ms_ssim(lucid.tensor(x2), lucid.tensor(y2), 2, kernel_size=3, weights=(0.2,) * 5)
    # the float64 gradient of the 2-D loss against central differences
    M = monai(lucid)
    dr = lucid.tensor([1.0], dtype=lucid.float64)
    yt = lucid.tensor(y2[:1, :1, :5, :4])
    assert lucid.autograd.gradcheck(lambda a: M.SSIMLoss(win_size=3)(a, yt, dr),
                                    (lucid.tensor(x2[:1, :1, :5, :4], requires_grad=True),), eps=1e-6, atol=1e-8)


def test_ssim_torch_parity():
    torch = pytest.importorskip("torch")
    _compare(ssim_page(lucid, *_ssim_data()), ssim_page(torch, *_ssim_data()), 1e-12)


# ---------------------------------------------------------------------------- Hausdorff DT loss
def _hd_data():
    rng = np.random.default_rng(13)
    x2 = rng.normal(size=(2, 3, 6, 5)) * 2
    l2 = rng.integers(0, 3, size=(2, 1, 6, 5))
    x3 = rng.normal(size=(2, 1, 4, 5, 4)) * 2
    t3 = (rng.random((2, 1, 4, 5, 4)) > 0.6).astype(np.float64)
    t3[1] = 1.0  # all foreground: its field is skipped (zero)
    return x2, l2, x3, t3


def hd_page(torch, x2, l2, x3, t3):
    M = monai(torch)
    out = {}
    x = torch.tensor(x2, requires_grad=True)
    loss = M.HausdorffDTLoss(softmax=True, to_onehot_y=True)(x, torch.tensor(l2))
    loss.backward()
    out["hd2"], out["hd2_grad"] = loss, x.grad
    out["hd3_none"] = M.HausdorffDTLoss(sigmoid=True, alpha=1.0, reduction="none")(torch.tensor(x3), torch.tensor(t3))
    out["hd3_batch"] = M.HausdorffDTLoss(sigmoid=True, batch=True, reduction="sum")(torch.tensor(x3), torch.tensor(t3))
    out["loghd"] = M.LogHausdorffDTLoss(softmax=True, to_onehot_y=True, include_background=True)(
        torch.tensor(x2), torch.tensor(l2))
    return {k: _np(v) for k, v in out.items()}


def _field_np(m):
    from scipy import ndimage

    f = np.zeros(m.shape)
    for b in range(len(m)):
        fg = m[b] > 0.5
        if fg.any() and not fg.all():
            f[b] = ndimage.distance_transform_edt(fg) + ndimage.distance_transform_edt(~fg)
    return f.astype(np.float32)  # the loss takes ``.float()`` of the fields


def _dist_np(a, b, alpha):
    return (a ** np.float32(alpha) + b ** np.float32(alpha)).astype(np.float64)  # float32, as the loss


def test_hausdorff_dt_loss_against_scipy_and_numpy():
    x2, l2, x3, t3 = _hd_data()
    out = hd_page(lucid, x2, l2, x3, t3)
    p, t = _softmax_np(x2), _onehot_np(l2, 3)

    def hd(p, t, alpha, axes):
        fs = []
        for c in range(p.shape[1]):
            d = _dist_np(_field_np(p[:, [c]]), _field_np(t[:, [c]]), alpha)
            fs.append(((p[:, [c]] - t[:, [c]]) ** 2 * d).mean(axis=axes, keepdims=True))
        return np.concatenate(fs, 1)

    np.testing.assert_allclose(out["hd2"], hd(p[:, 1:], t[:, 1:], 2.0, (2, 3)).mean(), rtol=1e-12)
    assert out["hd2"] > 0.1
    # the fields are constants: the gradient is that of sum (p - t)^2 * d through the softmax
    d = np.concatenate([_dist_np(_field_np(p[:, [c]]), _field_np(t[:, [c]]), 2.0) for c in (1, 2)], 1)
    gp = np.zeros_like(p)
    gp[:, 1:] = 2 * (p[:, 1:] - t[:, 1:]) * d / (2 * 2 * 30)
    np.testing.assert_allclose(out["hd2_grad"], p * (gp - (gp * p).sum(1, keepdims=True)), rtol=1e-10, atol=1e-14)
    s3 = _sigmoid_np(x3)
    want3 = hd(s3, t3, 1.0, (2, 3, 4))
    assert out["hd3_none"].shape == (2, 1, 1, 1, 1)
    np.testing.assert_allclose(out["hd3_none"], want3, rtol=1e-12)
    np.testing.assert_allclose(out["hd3_batch"], hd(s3, t3, 2.0, (0, 2, 3, 4)).sum(), rtol=1e-12)
    np.testing.assert_allclose(out["loghd"], np.log(hd(p, t, 2.0, (2, 3)).mean() + 1), rtol=1e-12)


def test_hausdorff_dt_loss_torch_parity():
    torch = pytest.importorskip("torch")
    _compare(hd_page(lucid, *_hd_data()), hd_page(torch, *_hd_data()), 1e-12)
