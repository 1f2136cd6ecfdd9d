"""pytorch/vision's pure-PyTorch pieces run on Lucid (``import lucid as torch``), batch 17:

- ``torchvision/ops/boxes.py`` with ``_box_convert.py``: ``box_convert`` (all axis-aligned and rotated
  formats), ``box_area``, ``_box_inter_union``, ``box_iou``, ``generalized_box_iou``,
  ``complete_box_iou``, ``distance_box_iou``, ``remove_small_boxes``, ``clip_boxes_to_image``,
  ``masks_to_boxes``, ``batched_nms`` with ``_batched_nms_coordinate_trick`` and ``_batched_nms_vanilla``; ``nms`` itself is a
  compiled kernel in torchvision, so here it is a pure-Python greedy loop written after the kernel's text
  (sort by score, suppress IoU > threshold).
- ``ops/giou_loss.py``, ``diou_loss.py``, ``ciou_loss.py`` (masked in-place intersection, ``no_grad``
  alpha), ``focal_loss.py`` (``sigmoid_focal_loss``), ``stochastic_depth.py`` (``bernoulli_`` + ``div_``
  noise, row and batch modes).
- ``ops/misc.py``: ``FrozenBatchNorm2d`` (``rsqrt`` and its ``_load_from_state_dict`` that drops
  ``num_batches_tracked``), ``ConvNormActivation``/``Conv2dNormActivation``, ``SqueezeExcitation``, ``MLP``.
- ``ops/roi_align.py``: the pure-Python, differentiable ``_roi_align`` with ``_bilinear_interpolate``
  (advanced indexing into ``[K, C, PH, PW, IY, IX]``, adaptive sampling masks), and
  ``_utils.convert_boxes_to_roi_format``.
- ``models/detection/_utils.py``: ``BalancedPositiveNegativeSampler``, ``encode_boxes``, ``BoxCoder``,
  ``Matcher`` (``allow_low_quality_matches``); ``anchor_utils.py``'s ``AnchorGenerator`` with ``ImageList``;
  ``rpn.py`` (``RPNHead``, ``permute_and_flatten``, ``concat_box_prediction_layers``,
  ``RegionProposalNetwork`` with per-level ``topk``, clipping, ``batched_nms`` and its training losses);
  ``transform.py`` (``GeneralizedRCNNTransform``: normalisation, ``interpolate(scale_factor=...,
  recompute_scale_factor=True)`` of images and masks, ``batch_images`` through ``new_full`` + ``copy_`` into
  views, ``postprocess``; ``resize_boxes``, ``resize_keypoints``) and ``roi_heads.py``'s ``fastrcnn_loss``,
  ``maskrcnn_loss``/``project_masks_on_boxes``/``maskrcnn_inference``, ``keypoints_to_heatmap``,
  ``keypointrcnn_loss``, ``heatmaps_to_keypoints`` (bicubic upsampling, arg-max), ``expand_boxes``,
  ``expand_masks`` and ``paste_masks_in_image`` (0-d tensors as slice bounds).
- ``ops/drop_block.py``: ``drop_block2d``/``drop_block3d`` (``bernoulli_`` seeds, ``F.pad`` + stride-1
  ``max_pool2d``/``max_pool3d`` dilation, ``numel() / (eps + sum())`` rescaling, the in-place variant).
- ``ops/feature_pyramid_network.py`` (``FeaturePyramidNetwork`` with ``LastLevelMaxPool``, nearest top-down
  ``interpolate``) and ``ops/poolers.py`` (``LevelMapper``, ``MultiScaleRoIAlign`` with ``infer_scale``/
  ``setup_scales``, and its ``_onnx_merge_levels`` through ``nonzero`` + ``scatter``).
- ``models``: ``mobilenetv2.py`` (``_make_divisible``, ``InvertedResidual``, ``MobileNetV2`` at width 0.25
  with a two-stage setting), ``mobilenetv3.py`` (``InvertedResidualConfig``, ``InvertedResidual`` with
  Hardswish and a Hardsigmoid ``SqueezeExcitation``, in-place residual ``+=``), ``efficientnet.py``
  (``MBConvConfig``, ``MBConv`` with SiLU, SE and ``StochasticDepth`` on the residual branch),
  ``shufflenetv2.py`` (``channel_shuffle``, ``InvertedResidual``), ``squeezenet.py``'s ``Fire``,
  ``densenet.py``'s ``_DenseLayer``/``_DenseBlock``/``_Transition`` (with the ``memory_efficient`` path
  through ``torch.utils.checkpoint``), ``swin_transformer.py`` (``shifted_window_attention`` with its
  padding, ``torch.roll`` cyclic shift and ``masked_fill`` region mask, ``ShiftedWindowAttention`` and V2's
  cosine attention with the continuous position-bias MLP, ``PatchMerging``, ``SwinTransformerBlock``/V2,
  ``SwinTransformer``) and ``vision_transformer.py`` (``MLPBlock`` with its versioned
  ``_load_from_state_dict`` renaming legacy keys, ``EncoderBlock`` on ``nn.MultiheadAttention``,
  ``Encoder``, ``VisionTransformer`` with the conv stem, ``interpolate_embeddings`` through bicubic
  ``interpolate(align_corners=True)``).
- ``transforms/_functional_tensor.py``: ``rgb_to_grayscale``, ``adjust_brightness``/``contrast``/
  ``saturation``/``hue`` (``_rgb2hsv``/``_hsv2rgb`` with the one-hot ``einsum``), ``hflip``/``vflip``,
  ``crop`` (out of bounds: padded), ``pad`` (constant/edge/reflect/symmetric), ``resize``, ``normalize``,
  ``gaussian_blur``, ``affine``/``rotate`` through ``_gen_affine_grid`` + ``grid_sample`` (with the fill
  mask), ``erase``, ``invert``, ``posterize``, ``solarize``, ``autocontrast``, ``equalize``.

Data are synthetic and sizes tiny. Each page is a function of the module it is handed as ``torch``;
every check recomputes its numbers in NumPy (or a closed form, or float64 finite differences), and the
``*_torch_parity`` tests run the same text on PyTorch with the same weights and data.

Adapted: the boxes, stochastic-depth and roi_align pages keep torchvision's plumbing (``if not
torch.jit.is_scripting() and not torch.jit.is_tracing(): _log_api_usage_once(...)`` with
``torchvision/utils.py``'s helper, ``@torch.jit._script_if_tracing``, ``@torch._dynamo.allow_in_graph``,
``BroadcastingList2`` from ``torch.jit.annotations``); the other pages drop it, and ``torch.fx.wrap`` calls
(legal only at a module's top level) and ``torchvision.extension``'s op checks are left out everywhere;
``nms`` is the Python loop above; ``roi_align`` always takes the pure-Python path (as torchvision does
without its compiled ops); ``_upcast`` is the current ``ops/_utils.py`` text; ``MultiScaleRoIAlign.forward``
takes ``onnx_merge=`` where the original asks ``torchvision._is_tracing()``; ``_make_ntuple`` and ``Permute``
(torchvision's ``utils.py``/``ops/misc.py``) and ``ImageList`` are their few lines copied in.

Fixed on the way: ``from torch.jit.annotations import BroadcastingList2, List, Optional, Tuple`` failed
(``lucid.jit`` is a module, and ``lucid.jit.annotations`` was the ``__future__.annotations`` feature object
its ``from __future__ import annotations`` bound); ``torch.jit._script_if_tracing`` (the decorator
``ops/boxes.py`` uses) and ``torch._C._log_api_usage_once`` (which ``torchvision.utils._log_api_usage_once``
calls from every op and model) did not exist, nor ``torch._C._get_tracing_state`` (asked by
``transform.py``'s ``resize_keypoints`` and ``roi_heads.py``'s ``expand_masks``).

PyTorch itself differs in two places met here: its float64 ``hardsigmoid`` backward multiplies by the float32
constant ``1.0f / 6.0f`` (0.16666667163...), Lucid's by 1/6, so gradients through a Hardsigmoid agree with
PyTorch's to float32 precision only (the parity tests say so where they meet it). And its
``binary_cross_entropy_with_logits`` given a float64 input and a float32 target (the RPN's labels) computes in
float32 and returns float32, where Lucid promotes to float64.
"""
import colorsys
import math
from collections import OrderedDict
from functools import partial
from types import SimpleNamespace
from typing import List, Optional, Tuple

import numpy as np
import pytest

import lucid
import lucid.nn  # noqa: F401
import lucid.optim  # noqa: F401
import lucid.utils.checkpoint  # noqa: F401


def _np(t):
    return np.array(t.detach().cpu().numpy(), dtype=np.float64)  # a copy: .numpy() shares memory


def _load(torch, module, seed, scale=0.3):
    """Overwrite every parameter/buffer with seeded NumPy values (same on both libraries)."""
    rng = np.random.default_rng(seed)
    new = {}
    for k, v in module.state_dict().items():
        if "running_var" in k:
            new[k] = torch.tensor(rng.uniform(0.5, 1.5, tuple(v.shape)), dtype=v.dtype)
        elif not v.is_floating_point() or k.endswith("relative_coords_table"):
            new[k] = v  # counters, index buffers and Swin V2's fixed coordinate table
        else:
            new[k] = torch.tensor(rng.uniform(-scale, scale, tuple(v.shape)), dtype=v.dtype)
    module.load_state_dict(new)


# ====================================================================== ops/boxes.py
def _log_api_usage_once_for(torch):
    from types import FunctionType

    # torchvision/utils.py
    def _log_api_usage_once(obj) -> None:
        """
        Logs API usage(module and name) within an organization.
        """
        module = obj.__module__
        if not module.startswith("torchvision"):
            module = f"torchvision.internal.{module}"
        name = obj.__class__.__name__
        if isinstance(obj, FunctionType):
            name = obj.__name__
        torch._C._log_api_usage_once(f"{module}.{name}")

    return _log_api_usage_once


def boxes_page(torch):
    Tensor = torch.Tensor
    _log_api_usage_once = _log_api_usage_once_for(torch)

    # ops/_utils.py
    def _upcast(t: Tensor) -> Tensor:
        # Protects from numerical overflows in multiplications by upcasting to the equivalent higher type
        if t.is_floating_point():
            return t if t.dtype in (torch.float32, torch.float64) else t.float()
        else:
            return t if t.dtype in (torch.int32, torch.int64) else t.int()

    # ops/_box_convert.py
    def _box_cxcywh_to_xyxy(boxes: Tensor) -> Tensor:
        # We need to change all 4 of them so some temporary variable is needed.
        cx, cy, w, h = boxes.unbind(-1)
        x1 = cx - 0.5 * w
        y1 = cy - 0.5 * h
        x2 = cx + 0.5 * w
        y2 = cy + 0.5 * h

        boxes = torch.stack((x1, y1, x2, y2), dim=-1)

        return boxes

    def _box_xyxy_to_cxcywh(boxes: Tensor) -> Tensor:
        x1, y1, x2, y2 = boxes.unbind(-1)
        cx = (x1 + x2) / 2
        cy = (y1 + y2) / 2
        w = x2 - x1
        h = y2 - y1

        boxes = torch.stack((cx, cy, w, h), dim=-1)

        return boxes

    def _box_xywh_to_xyxy(boxes: Tensor) -> Tensor:
        x, y, w, h = boxes.unbind(-1)
        boxes = torch.stack([x, y, x + w, y + h], dim=-1)
        return boxes

    def _box_xyxy_to_xywh(boxes: Tensor) -> Tensor:
        x1, y1, x2, y2 = boxes.unbind(-1)
        w = x2 - x1  # x2 - x1
        h = y2 - y1  # y2 - y1
        boxes = torch.stack((x1, y1, w, h), dim=-1)
        return boxes

    def _box_cxcywhr_to_xywhr(boxes: Tensor) -> Tensor:
        cx, cy, w, h, r = boxes.unbind(-1)
        r_rad = r * torch.pi / 180.0
        cos, sin = torch.cos(r_rad), torch.sin(r_rad)

        x1 = cx - w / 2 * cos - h / 2 * sin
        y1 = cy - h / 2 * cos + w / 2 * sin
        boxes = torch.stack((x1, y1, w, h, r), dim=-1)

        return boxes

    def _box_xywhr_to_cxcywhr(boxes: Tensor) -> Tensor:
        x1, y1, w, h, r = boxes.unbind(-1)
        r_rad = r * torch.pi / 180.0
        cos, sin = torch.cos(r_rad), torch.sin(r_rad)

        cx = x1 + w / 2 * cos + h / 2 * sin
        cy = y1 - w / 2 * sin + h / 2 * cos

        boxes = torch.stack([cx, cy, w, h, r], dim=-1)
        return boxes

    def _box_xywhr_to_xyxyxyxy(boxes: Tensor) -> Tensor:
        x1, y1, w, h, r = boxes.unbind(-1)
        r_rad = r * torch.pi / 180.0
        cos, sin = torch.cos(r_rad), torch.sin(r_rad)

        x3 = x1 + w * cos
        y3 = y1 - w * sin
        x2 = x3 + h * sin
        y2 = y3 + h * cos
        x4 = x1 + h * sin
        y4 = y1 + h * cos

        return torch.stack((x1, y1, x3, y3, x2, y2, x4, y4), dim=-1)

    def _box_xyxyxyxy_to_xywhr(boxes: Tensor) -> Tensor:
        x1, y1, x3, y3, x2, y2, x4, y4 = boxes.unbind(-1)
        r_rad = torch.atan2(y1 - y3, x3 - x1)
        r = r_rad * 180 / torch.pi

        w = ((x3 - x1) ** 2 + (y1 - y3) ** 2).sqrt()
        h = ((x3 - x2) ** 2 + (y3 - y2) ** 2).sqrt()

        boxes = torch.stack((x1, y1, w, h, r), dim=-1)

        return boxes

    # ops/boxes.py
    def nms(boxes: Tensor, scores: Tensor, iou_threshold: float) -> Tensor:
        if not torch.jit.is_scripting() and not torch.jit.is_tracing():
            _log_api_usage_once(nms)
        # torchvision's nms is a compiled kernel (csrc/ops/cpu/nms_kernel.cpp); the same greedy loop:
        if boxes.numel() == 0:
            return torch.empty((0,), dtype=torch.long, device=boxes.device)
        order = scores.sort(descending=True)[1]
        iou = box_iou(boxes, boxes)
        suppressed = torch.zeros(boxes.shape[0], dtype=torch.bool, device=boxes.device)
        keep = []
        for i in order.tolist():
            if suppressed[i]:
                continue
            keep.append(i)
            suppressed |= iou[i] > iou_threshold
        return torch.tensor(keep, dtype=torch.long, device=boxes.device)

    def batched_nms(
        boxes: Tensor,
        scores: Tensor,
        idxs: Tensor,
        iou_threshold: float,
    ) -> Tensor:
        if not torch.jit.is_scripting() and not torch.jit.is_tracing():
            _log_api_usage_once(batched_nms)
        # Benchmarks that drove the following thresholds are at
        # https://github.com/pytorch/vision/issues/1311#issuecomment-781329339
        # and https://github.com/pytorch/vision/pull/8925
        if boxes.numel() > (4000 if boxes.device.type == "cpu" else 100_000):  # and not torchvision._is_tracing()
            return _batched_nms_vanilla(boxes, scores, idxs, iou_threshold)
        else:
            return _batched_nms_coordinate_trick(boxes, scores, idxs, iou_threshold)

    @torch.jit._script_if_tracing
    def _batched_nms_coordinate_trick(
        boxes: Tensor,
        scores: Tensor,
        idxs: Tensor,
        iou_threshold: float,
    ) -> Tensor:
        # strategy: in order to perform NMS independently per class,
        # we add an offset to all the boxes. The offset is dependent
        # only on the class idx, and is large enough so that boxes
        # from different classes do not overlap
        if boxes.numel() == 0:
            return torch.empty((0,), dtype=torch.int64, device=boxes.device)
        max_coordinate = boxes.max()
        offsets = idxs.to(boxes) * (max_coordinate + torch.tensor(1).to(boxes))
        boxes_for_nms = boxes + offsets[:, None]
        keep = nms(boxes_for_nms, scores, iou_threshold)
        return keep

    @torch.jit._script_if_tracing
    def _batched_nms_vanilla(
        boxes: Tensor,
        scores: Tensor,
        idxs: Tensor,
        iou_threshold: float,
    ) -> Tensor:
        # Based on Detectron2 implementation, just manually call nms() on each class independently
        keep_mask = torch.zeros_like(scores, dtype=torch.bool)
        for class_id in torch.unique(idxs):
            curr_indices = torch.where(idxs == class_id)[0]
            curr_keep_indices = nms(boxes[curr_indices], scores[curr_indices], iou_threshold)
            keep_mask[curr_indices[curr_keep_indices]] = True
        keep_indices = torch.where(keep_mask)[0]
        return keep_indices[scores[keep_indices].sort(descending=True)[1]]

    def remove_small_boxes(boxes: Tensor, min_size: float) -> Tensor:
        if not torch.jit.is_scripting() and not torch.jit.is_tracing():
            _log_api_usage_once(remove_small_boxes)
        ws, hs = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
        keep = (ws >= min_size) & (hs >= min_size)
        keep = torch.where(keep)[0]
        return keep

    def clip_boxes_to_image(boxes: Tensor, size: Tuple[int, int]) -> Tensor:
        if not torch.jit.is_scripting() and not torch.jit.is_tracing():
            _log_api_usage_once(clip_boxes_to_image)
        dim = boxes.dim()
        boxes_x = boxes[..., 0::2]
        boxes_y = boxes[..., 1::2]
        height, width = size

        boxes_x = boxes_x.clamp(min=0, max=width)
        boxes_y = boxes_y.clamp(min=0, max=height)

        clipped_boxes = torch.stack((boxes_x, boxes_y), dim=dim)
        return clipped_boxes.reshape(boxes.shape)

    def box_convert(boxes: Tensor, in_fmt: str, out_fmt: str) -> Tensor:
        if not torch.jit.is_scripting() and not torch.jit.is_tracing():
            _log_api_usage_once(box_convert)
        allowed_fmts = (
            "xyxy",
            "xywh",
            "cxcywh",
            "xywhr",
            "cxcywhr",
            "xyxyxyxy",
        )
        if in_fmt not in allowed_fmts or out_fmt not in allowed_fmts:
            raise ValueError(f"Unsupported Bounding Box Conversions for given in_fmt {in_fmt} and out_fmt {out_fmt}")

        if in_fmt == out_fmt:
            return boxes.clone()
        e = (in_fmt, out_fmt)
        if e == ("xywh", "xyxy"):
            boxes = _box_xywh_to_xyxy(boxes)
        elif e == ("cxcywh", "xyxy"):
            boxes = _box_cxcywh_to_xyxy(boxes)
        elif e == ("xyxy", "xywh"):
            boxes = _box_xyxy_to_xywh(boxes)
        elif e == ("xyxy", "cxcywh"):
            boxes = _box_xyxy_to_cxcywh(boxes)
        elif e == ("xywh", "cxcywh"):
            boxes = _box_xywh_to_xyxy(boxes)
            boxes = _box_xyxy_to_cxcywh(boxes)
        elif e == ("cxcywh", "xywh"):
            boxes = _box_cxcywh_to_xyxy(boxes)
            boxes = _box_xyxy_to_xywh(boxes)
        elif e == ("cxcywhr", "xywhr"):
            boxes = _box_cxcywhr_to_xywhr(boxes)
        elif e == ("xywhr", "cxcywhr"):
            boxes = _box_xywhr_to_cxcywhr(boxes)
        elif e == ("cxcywhr", "xyxyxyxy"):
            boxes = _box_cxcywhr_to_xywhr(boxes).to(boxes.dtype)
            boxes = _box_xywhr_to_xyxyxyxy(boxes)
        elif e == ("xyxyxyxy", "cxcywhr"):
            boxes = _box_xyxyxyxy_to_xywhr(boxes).to(boxes.dtype)
            boxes = _box_xywhr_to_cxcywhr(boxes)
        elif e == ("xywhr", "xyxyxyxy"):
            boxes = _box_xywhr_to_xyxyxyxy(boxes)
        elif e == ("xyxyxyxy", "xywhr"):
            boxes = _box_xyxyxyxy_to_xywhr(boxes)
        else:
            raise NotImplementedError(f"Unsupported Bounding Box Conversions for given in_fmt {e[0]} and out_fmt {e[1]}")

        return boxes

    def box_area(boxes: Tensor) -> Tensor:
        if not torch.jit.is_scripting() and not torch.jit.is_tracing():
            _log_api_usage_once(box_area)
        boxes = _upcast(boxes)
        return (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])

    # implementation from https://github.com/kuangliu/torchcv/blob/master/torchcv/utils/box.py
    # with slight modifications
    def _box_inter_union(boxes1: Tensor, boxes2: Tensor) -> Tuple[Tensor, Tensor]:
        area1 = box_area(boxes1)
        area2 = box_area(boxes2)

        lt = torch.max(boxes1[:, None, :2], boxes2[:, :2])  # [N,M,2]
        rb = torch.min(boxes1[:, None, 2:], boxes2[:, 2:])  # [N,M,2]

        wh = _upcast(rb - lt).clamp(min=0)  # [N,M,2]
        inter = wh[:, :, 0] * wh[:, :, 1]  # [N,M]

        union = area1[:, None] + area2 - inter

        return inter, union

    def box_iou(boxes1: Tensor, boxes2: Tensor) -> Tensor:
        if not torch.jit.is_scripting() and not torch.jit.is_tracing():
            _log_api_usage_once(box_iou)
        inter, union = _box_inter_union(boxes1, boxes2)
        iou = inter / union
        return iou

    # Implementation adapted from https://github.com/facebookresearch/detr/blob/master/util/box_ops.py
    def generalized_box_iou(boxes1: Tensor, boxes2: Tensor) -> Tensor:
        if not torch.jit.is_scripting() and not torch.jit.is_tracing():
            _log_api_usage_once(generalized_box_iou)
        inter, union = _box_inter_union(boxes1, boxes2)
        iou = inter / union

        lti = torch.min(boxes1[:, None, :2], boxes2[:, :2])
        rbi = torch.max(boxes1[:, None, 2:], boxes2[:, 2:])

        whi = _upcast(rbi - lti).clamp(min=0)  # [N,M,2]
        areai = whi[:, :, 0] * whi[:, :, 1]

        return iou - (areai - union) / areai

    def complete_box_iou(boxes1: Tensor, boxes2: Tensor, eps: float = 1e-7) -> Tensor:
        if not torch.jit.is_scripting() and not torch.jit.is_tracing():
            _log_api_usage_once(complete_box_iou)
        boxes1 = _upcast(boxes1)
        boxes2 = _upcast(boxes2)

        diou, iou = _box_diou_iou(boxes1, boxes2, eps)

        w_pred = boxes1[:, None, 2] - boxes1[:, None, 0]
        h_pred = boxes1[:, None, 3] - boxes1[:, None, 1]

        w_gt = boxes2[:, 2] - boxes2[:, 0]
        h_gt = boxes2[:, 3] - boxes2[:, 1]

        v = (4 / (torch.pi**2)) * torch.pow(torch.atan(w_pred / h_pred) - torch.atan(w_gt / h_gt), 2)
        with torch.no_grad():
            alpha = v / (1 - iou + v + eps)
        return diou - alpha * v

    def distance_box_iou(boxes1: Tensor, boxes2: Tensor, eps: float = 1e-7) -> Tensor:
        if not torch.jit.is_scripting() and not torch.jit.is_tracing():
            _log_api_usage_once(distance_box_iou)
        boxes1 = _upcast(boxes1)
        boxes2 = _upcast(boxes2)
        diou, _ = _box_diou_iou(boxes1, boxes2, eps=eps)
        return diou

    def _box_diou_iou(boxes1: Tensor, boxes2: Tensor, eps: float = 1e-7) -> Tuple[Tensor, Tensor]:
        iou = box_iou(boxes1, boxes2)
        lti = torch.min(boxes1[:, None, :2], boxes2[:, :2])
        rbi = torch.max(boxes1[:, None, 2:], boxes2[:, 2:])
        whi = _upcast(rbi - lti).clamp(min=0)  # [N,M,2]
        diagonal_distance_squared = (whi[:, :, 0] ** 2) + (whi[:, :, 1] ** 2) + eps
        # centers of boxes
        x_p = (boxes1[:, 0] + boxes1[:, 2]) / 2
        y_p = (boxes1[:, 1] + boxes1[:, 3]) / 2
        x_g = (boxes2[:, 0] + boxes2[:, 2]) / 2
        y_g = (boxes2[:, 1] + boxes2[:, 3]) / 2
        # The distance between boxes' centers squared.
        centers_distance_squared = (_upcast(x_p[:, None] - x_g[None, :]) ** 2) + (
            _upcast(y_p[:, None] - y_g[None, :]) ** 2
        )
        # The distance IoU is the IoU penalized by a normalized
        # distance between boxes' centers squared.
        return iou - (centers_distance_squared / diagonal_distance_squared), iou

    def masks_to_boxes(masks: torch.Tensor) -> torch.Tensor:
        if not torch.jit.is_scripting() and not torch.jit.is_tracing():
            _log_api_usage_once(masks_to_boxes)
        if masks.numel() == 0:
            return torch.zeros((0, 4), device=masks.device, dtype=torch.float)

        n = masks.shape[0]

        bounding_boxes = torch.zeros((n, 4), device=masks.device, dtype=torch.float)

        for index, mask in enumerate(masks):
            y, x = torch.where(mask != 0)

            bounding_boxes[index, 0] = torch.min(x)
            bounding_boxes[index, 1] = torch.min(y)
            bounding_boxes[index, 2] = torch.max(x)
            bounding_boxes[index, 3] = torch.max(y)

        return bounding_boxes

    return SimpleNamespace(**{k: v for k, v in locals().items() if callable(v)})


# ================================================== ops/*_loss.py, focal_loss.py, stochastic_depth.py
def losses_page(torch):
    F = torch.nn.functional
    _log_api_usage_once = _log_api_usage_once_for(torch)
    nn = torch.nn
    Tensor = torch.Tensor
    bx = boxes_page(torch)
    distance_box_iou = bx.distance_box_iou

    def _upcast_non_float(t: Tensor) -> Tensor:
        # Protects from numerical overflows in multiplications by upcasting to the equivalent higher type
        if t.dtype not in (torch.float32, torch.float64):
            return t.float()
        return t

    def _loss_inter_union(boxes1: torch.Tensor, boxes2: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        x1, y1, x2, y2 = boxes1.unbind(dim=-1)
        x1g, y1g, x2g, y2g = boxes2.unbind(dim=-1)

        # Intersection keypoints
        xkis1 = torch.max(x1, x1g)
        ykis1 = torch.max(y1, y1g)
        xkis2 = torch.min(x2, x2g)
        ykis2 = torch.min(y2, y2g)

        intsctk = torch.zeros_like(x1)
        mask = (ykis2 > ykis1) & (xkis2 > xkis1)
        intsctk[mask] = (xkis2[mask] - xkis1[mask]) * (ykis2[mask] - ykis1[mask])
        unionk = (x2 - x1) * (y2 - y1) + (x2g - x1g) * (y2g - y1g) - intsctk

        return intsctk, unionk

    def generalized_box_iou_loss(
        boxes1: torch.Tensor,
        boxes2: torch.Tensor,
        reduction: str = "none",
        eps: float = 1e-7,
    ) -> torch.Tensor:
        # Original implementation from https://github.com/facebookresearch/fvcore/blob/bfff2ef/fvcore/nn/giou_loss.py
        boxes1 = _upcast_non_float(boxes1)
        boxes2 = _upcast_non_float(boxes2)
        intsctk, unionk = _loss_inter_union(boxes1, boxes2)
        iouk = intsctk / (unionk + eps)

        x1, y1, x2, y2 = boxes1.unbind(dim=-1)
        x1g, y1g, x2g, y2g = boxes2.unbind(dim=-1)

        # smallest enclosing box
        xc1 = torch.min(x1, x1g)
        yc1 = torch.min(y1, y1g)
        xc2 = torch.max(x2, x2g)
        yc2 = torch.max(y2, y2g)

        area_c = (xc2 - xc1) * (yc2 - yc1)
        miouk = iouk - ((area_c - unionk) / (area_c + eps))

        loss = 1 - miouk

        # Check reduction option and return loss accordingly
        if reduction == "none":
            pass
        elif reduction == "mean":
            loss = loss.mean() if loss.numel() > 0 else 0.0 * loss.sum()
        elif reduction == "sum":
            loss = loss.sum()
        else:
            raise ValueError(
                f"Invalid Value for arg 'reduction': '{reduction} \n Supported reduction modes: 'none', 'mean', 'sum'"
            )
        return loss

    def distance_box_iou_loss(
        boxes1: torch.Tensor,
        boxes2: torch.Tensor,
        reduction: str = "none",
        eps: float = 1e-7,
    ) -> torch.Tensor:
        if boxes1.dim() == 1 and boxes2.dim() == 1:
            batch_boxes1 = boxes1.unsqueeze(0)
            batch_boxes2 = boxes2.unsqueeze(0)
            diou = distance_box_iou(batch_boxes1, batch_boxes2, eps)[0, 0]
        else:
            diou = distance_box_iou(boxes1, boxes2, eps)[0]
        loss = 1 - diou
        if reduction == "mean":
            loss = loss.mean() if loss.numel() > 0 else 0.0 * loss.sum()
        elif reduction == "sum":
            loss = loss.sum()
        # Cast the loss to the same dtype as the input boxes
        loss = loss.to(boxes1.dtype)
        return loss

    def complete_box_iou_loss(
        boxes1: torch.Tensor,
        boxes2: torch.Tensor,
        reduction: str = "none",
        eps: float = 1e-7,
    ) -> torch.Tensor:
        # Original Implementation : https://github.com/facebookresearch/detectron2/blob/main/detectron2/layers/losses.py
        boxes1 = _upcast_non_float(boxes1)
        boxes2 = _upcast_non_float(boxes2)

        x1, y1, x2, y2 = boxes1.unbind(dim=-1)
        x1g, y1g, x2g, y2g = boxes2.unbind(dim=-1)

        # Intersection keypoints
        xkis1 = torch.max(x1, x1g)
        ykis1 = torch.max(y1, y1g)
        xkis2 = torch.min(x2, x2g)
        ykis2 = torch.min(y2, y2g)

        intsct = torch.zeros_like(x1)
        mask = (ykis2 > ykis1) & (xkis2 > xkis1)
        intsct[mask] = (xkis2[mask] - xkis1[mask]) * (ykis2[mask] - ykis1[mask])
        union = (x2 - x1) * (y2 - y1) + (x2g - x1g) * (y2g - y1g) - intsct + eps
        iou = intsct / union

        # smallest enclosing box
        xc1 = torch.min(x1, x1g)
        yc1 = torch.min(y1, y1g)
        xc2 = torch.max(x2, x2g)
        yc2 = torch.max(y2, y2g)
        diag_len = ((xc2 - xc1) ** 2) + ((yc2 - yc1) ** 2) + eps

        # centers of boxes
        x_p = (x2 + x1) / 2
        y_p = (y2 + y1) / 2
        x_g = (x1g + x2g) / 2
        y_g = (y1g + y2g) / 2
        distance = ((x_p - x_g) ** 2) + ((y_p - y_g) ** 2)

        # width and height of boxes
        w_pred = x2 - x1
        h_pred = y2 - y1
        w_gt = x2g - x1g
        h_gt = y2g - y1g
        v = (4 / (torch.pi**2)) * torch.pow((torch.atan(w_gt / h_gt) - torch.atan(w_pred / h_pred)), 2)
        with torch.no_grad():
            alpha = v / (1 - iou + v + eps)

        loss = 1 - iou + (distance / diag_len) + alpha * v
        if reduction == "mean":
            loss = loss.mean() if loss.numel() > 0 else 0.0 * loss.sum()
        elif reduction == "sum":
            loss = loss.sum()

        return loss

    def sigmoid_focal_loss(
        inputs: torch.Tensor,
        targets: torch.Tensor,
        alpha: float = 0.25,
        gamma: float = 2,
        reduction: str = "none",
    ) -> torch.Tensor:
        p = torch.sigmoid(inputs)
        ce_loss = F.binary_cross_entropy_with_logits(inputs, targets, reduction="none")
        p_t = p * targets + (1 - p) * (1 - targets)
        loss = ce_loss * ((1 - p_t) ** gamma)

        if alpha >= 0:
            alpha_t = alpha * targets + (1 - alpha) * (1 - targets)
            loss = alpha_t * loss

        # Check reduction option and return loss accordingly
        if reduction == "none":
            pass
        elif reduction == "mean":
            loss = loss.mean()
        elif reduction == "sum":
            loss = loss.sum()
        else:
            raise ValueError(
                f"Invalid Value for arg 'reduction': '{reduction} \n Supported reduction modes: 'none', 'mean', 'sum'"
            )
        return loss

    def stochastic_depth(input: Tensor, p: float, mode: str, training: bool = True) -> Tensor:
        if not torch.jit.is_scripting() and not torch.jit.is_tracing():
            _log_api_usage_once(stochastic_depth)
        if p < 0.0 or p > 1.0:
            raise ValueError(f"drop probability has to be between 0 and 1, but got {p}")
        if mode not in ["batch", "row"]:
            raise ValueError(f"mode has to be either 'batch' or 'row', but got {mode}")
        if not training or p == 0.0:
            return input

        survival_rate = 1.0 - p
        if mode == "row":
            size = [input.shape[0]] + [1] * (input.ndim - 1)
        else:
            size = [1] * input.ndim
        noise = torch.empty(size, dtype=input.dtype, device=input.device)
        noise = noise.bernoulli_(survival_rate)
        if survival_rate > 0.0:
            noise.div_(survival_rate)
        return input * noise

    class StochasticDepth(nn.Module):
        def __init__(self, p: float, mode: str) -> None:
            super().__init__()
            _log_api_usage_once(self)
            self.p = p
            self.mode = mode

        def forward(self, input: Tensor) -> Tensor:
            return stochastic_depth(input, self.p, self.mode, self.training)

        def __repr__(self) -> str:
            s = f"{self.__class__.__name__}(p={self.p}, mode={self.mode})"
            return s

    return SimpleNamespace(**{k: v for k, v in locals().items() if callable(v)})


# ====================================================================== ops/drop_block.py
def drop_block_page(torch):
    nn = torch.nn
    F = torch.nn.functional
    Tensor = torch.Tensor

    def drop_block2d(
        input: Tensor, p: float, block_size: int, inplace: bool = False, eps: float = 1e-06, training: bool = True
    ) -> Tensor:
        if p < 0.0 or p > 1.0:
            raise ValueError(f"drop probability has to be between 0 and 1, but got {p}.")
        if input.ndim != 4:
            raise ValueError(f"input should be 4 dimensional. Got {input.ndim} dimensions.")
        if not training or p == 0.0:
            return input

        N, C, H, W = input.size()
        block_size = min(block_size, W, H)
        if block_size % 2 == 0:
            raise ValueError(f"block size should be odd. Got {block_size} which is even.")

        # compute the gamma of Bernoulli distribution
        gamma = (p * H * W) / ((block_size**2) * ((H - block_size + 1) * (W - block_size + 1)))
        noise = torch.empty((N, C, H - block_size + 1, W - block_size + 1), dtype=input.dtype, device=input.device)
        noise.bernoulli_(gamma)

        noise = F.pad(noise, [block_size // 2] * 4, value=0)
        noise = F.max_pool2d(noise, stride=(1, 1), kernel_size=(block_size, block_size), padding=block_size // 2)
        noise = 1 - noise
        normalize_scale = noise.numel() / (eps + noise.sum())
        if inplace:
            input.mul_(noise).mul_(normalize_scale)
        else:
            input = input * noise * normalize_scale
        return input

    def drop_block3d(
        input: Tensor, p: float, block_size: int, inplace: bool = False, eps: float = 1e-06, training: bool = True
    ) -> Tensor:
        if p < 0.0 or p > 1.0:
            raise ValueError(f"drop probability has to be between 0 and 1, but got {p}.")
        if input.ndim != 5:
            raise ValueError(f"input should be 5 dimensional. Got {input.ndim} dimensions.")
        if not training or p == 0.0:
            return input

        N, C, D, H, W = input.size()
        block_size = min(block_size, D, H, W)
        if block_size % 2 == 0:
            raise ValueError(f"block size should be odd. Got {block_size} which is even.")

        # compute the gamma of Bernoulli distribution
        gamma = (p * D * H * W) / ((block_size**3) * ((D - block_size + 1) * (H - block_size + 1) * (W - block_size + 1)))
        noise = torch.empty(
            (N, C, D - block_size + 1, H - block_size + 1, W - block_size + 1), dtype=input.dtype, device=input.device
        )
        noise.bernoulli_(gamma)

        noise = F.pad(noise, [block_size // 2] * 6, value=0)
        noise = F.max_pool3d(
            noise, stride=(1, 1, 1), kernel_size=(block_size, block_size, block_size), padding=block_size // 2
        )
        noise = 1 - noise
        normalize_scale = noise.numel() / (eps + noise.sum())
        if inplace:
            input.mul_(noise).mul_(normalize_scale)
        else:
            input = input * noise * normalize_scale
        return input

    class DropBlock2d(nn.Module):
        def __init__(self, p: float, block_size: int, inplace: bool = False, eps: float = 1e-06) -> None:
            super().__init__()

            self.p = p
            self.block_size = block_size
            self.inplace = inplace
            self.eps = eps

        def forward(self, input: Tensor) -> Tensor:
            return drop_block2d(input, self.p, self.block_size, self.inplace, self.eps, self.training)

        def __repr__(self) -> str:
            s = f"{self.__class__.__name__}(p={self.p}, block_size={self.block_size}, inplace={self.inplace})"
            return s

    class DropBlock3d(DropBlock2d):
        def __init__(self, p: float, block_size: int, inplace: bool = False, eps: float = 1e-06) -> None:
            super().__init__(p, block_size, inplace, eps)

        def forward(self, input: Tensor) -> Tensor:
            return drop_block3d(input, self.p, self.block_size, self.inplace, self.eps, self.training)

    return SimpleNamespace(**{k: v for k, v in locals().items() if callable(v)})


# ====================================================================== ops/misc.py
def misc_page(torch):
    nn = torch.nn
    Tensor = torch.Tensor
    from typing import Callable

    class FrozenBatchNorm2d(torch.nn.Module):
        """
        BatchNorm2d where the batch statistics and the affine parameters are fixed
        """

        def __init__(self, num_features: int, eps: float = 1e-5):
            super().__init__()
            self.eps = eps
            self.register_buffer("weight", torch.ones(num_features))
            self.register_buffer("bias", torch.zeros(num_features))
            self.register_buffer("running_mean", torch.zeros(num_features))
            self.register_buffer("running_var", torch.ones(num_features))

        def _load_from_state_dict(
            self,
            state_dict: dict,
            prefix: str,
            local_metadata: dict,
            strict: bool,
            missing_keys: List[str],
            unexpected_keys: List[str],
            error_msgs: List[str],
        ):
            num_batches_tracked_key = prefix + "num_batches_tracked"
            if num_batches_tracked_key in state_dict:
                del state_dict[num_batches_tracked_key]

            super()._load_from_state_dict(
                state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
            )

        def forward(self, x: Tensor) -> Tensor:
            # move reshapes to the beginning
            # to make it user-friendly
            w = self.weight.reshape(1, -1, 1, 1)
            b = self.bias.reshape(1, -1, 1, 1)
            rv = self.running_var.reshape(1, -1, 1, 1)
            rm = self.running_mean.reshape(1, -1, 1, 1)
            scale = w * (rv + self.eps).rsqrt()
            bias = b - rm * scale
            return x * scale + bias

        def __repr__(self) -> str:
            return f"{self.__class__.__name__}({self.weight.shape[0]}, eps={self.eps})"

    class ConvNormActivation(torch.nn.Sequential):
        def __init__(
            self,
            in_channels: int,
            out_channels: int,
            kernel_size=3,
            stride=1,
            padding=None,
            groups: int = 1,
            norm_layer: Optional[Callable[..., torch.nn.Module]] = torch.nn.BatchNorm2d,
            activation_layer: Optional[Callable[..., torch.nn.Module]] = torch.nn.ReLU,
            dilation=1,
            inplace: Optional[bool] = True,
            bias: Optional[bool] = None,
            conv_layer: Callable[..., torch.nn.Module] = torch.nn.Conv2d,
        ) -> None:

            if padding is None:
                if isinstance(kernel_size, int) and isinstance(dilation, int):
                    padding = (kernel_size - 1) // 2 * dilation
                else:
                    _conv_dim = len(kernel_size) if isinstance(kernel_size, (list, tuple)) else len(dilation)
                    kernel_size = _make_ntuple(kernel_size, _conv_dim)
                    dilation = _make_ntuple(dilation, _conv_dim)
                    padding = tuple((kernel_size[i] - 1) // 2 * dilation[i] for i in range(_conv_dim))
            if bias is None:
                bias = norm_layer is None

            layers = [
                conv_layer(
                    in_channels,
                    out_channels,
                    kernel_size,
                    stride,
                    padding,
                    dilation=dilation,
                    groups=groups,
                    bias=bias,
                )
            ]

            if norm_layer is not None:
                layers.append(norm_layer(out_channels))

            if activation_layer is not None:
                params = {} if inplace is None else {"inplace": inplace}
                layers.append(activation_layer(**params))
            super().__init__(*layers)
            self.out_channels = out_channels

    class Conv2dNormActivation(ConvNormActivation):
        def __init__(
            self,
            in_channels: int,
            out_channels: int,
            kernel_size=3,
            stride=1,
            padding=None,
            groups: int = 1,
            norm_layer: Optional[Callable[..., torch.nn.Module]] = torch.nn.BatchNorm2d,
            activation_layer: Optional[Callable[..., torch.nn.Module]] = torch.nn.ReLU,
            dilation=1,
            inplace: Optional[bool] = True,
            bias: Optional[bool] = None,
        ) -> None:

            super().__init__(
                in_channels,
                out_channels,
                kernel_size,
                stride,
                padding,
                groups,
                norm_layer,
                activation_layer,
                dilation,
                inplace,
                bias,
                torch.nn.Conv2d,
            )

    class SqueezeExcitation(torch.nn.Module):
        def __init__(
            self,
            input_channels: int,
            squeeze_channels: int,
            activation: Callable[..., torch.nn.Module] = torch.nn.ReLU,
            scale_activation: Callable[..., torch.nn.Module] = torch.nn.Sigmoid,
        ) -> None:
            super().__init__()
            self.avgpool = torch.nn.AdaptiveAvgPool2d(1)
            self.fc1 = torch.nn.Conv2d(input_channels, squeeze_channels, 1)
            self.fc2 = torch.nn.Conv2d(squeeze_channels, input_channels, 1)
            self.activation = activation()
            self.scale_activation = scale_activation()

        def _scale(self, input: Tensor) -> Tensor:
            scale = self.avgpool(input)
            scale = self.fc1(scale)
            scale = self.activation(scale)
            scale = self.fc2(scale)
            return self.scale_activation(scale)

        def forward(self, input: Tensor) -> Tensor:
            scale = self._scale(input)
            return scale * input

    class MLP(torch.nn.Sequential):
        def __init__(
            self,
            in_channels: int,
            hidden_channels: List[int],
            norm_layer: Optional[Callable[..., torch.nn.Module]] = None,
            activation_layer: Optional[Callable[..., torch.nn.Module]] = torch.nn.ReLU,
            inplace: Optional[bool] = None,
            bias: bool = True,
            dropout: float = 0.0,
        ):
            # The addition of `norm_layer` is inspired from the implementation of TorchMultimodal:
            # https://github.com/facebookresearch/multimodal/blob/5dec8a/torchmultimodal/modules/layers/mlp.py
            params = {} if inplace is None else {"inplace": inplace}

            layers = []
            in_dim = in_channels
            for hidden_dim in hidden_channels[:-1]:
                layers.append(torch.nn.Linear(in_dim, hidden_dim, bias=bias))
                if norm_layer is not None:
                    layers.append(norm_layer(hidden_dim))
                layers.append(activation_layer(**params))
                layers.append(torch.nn.Dropout(dropout, **params))
                in_dim = hidden_dim

            layers.append(torch.nn.Linear(in_dim, hidden_channels[-1], bias=bias))
            layers.append(torch.nn.Dropout(dropout, **params))

            super().__init__(*layers)

    def _make_ntuple(x, n: int):
        # torchvision/utils.py
        if isinstance(x, (list, tuple)):
            return tuple(x)
        return tuple([x] * n)

    return SimpleNamespace(**{k: v for k, v in locals().items() if callable(v)})


# ====================================================================== ops/roi_align.py
def roi_align_page(torch):
    BroadcastingList2 = torch.jit.annotations.BroadcastingList2  # from torch.jit.annotations import ...
    _log_api_usage_once = _log_api_usage_once_for(torch)
    def _pair(x):  # torch.nn.modules.utils._pair
        return tuple(x) if isinstance(x, (tuple, list)) else (x, x)

    # ops/_utils.py
    def _cat(tensors: List[torch.Tensor], dim: int = 0) -> torch.Tensor:
        """
        Efficient version of torch.cat that avoids a copy if there is only a single element in a list
        """
        # TODO add back the assert
        # assert isinstance(tensors, (list, tuple))
        if len(tensors) == 1:
            return tensors[0]
        return torch.cat(tensors, dim)

    def convert_boxes_to_roi_format(boxes: List[torch.Tensor]) -> torch.Tensor:
        concat_boxes = _cat([b for b in boxes], dim=0)
        temp = []
        for i, b in enumerate(boxes):
            temp.append(torch.full_like(b[:, :1], i))
        ids = _cat(temp, dim=0)
        rois = torch.cat([ids, concat_boxes], dim=1)
        return rois

    # NB: all inputs are tensors
    def _bilinear_interpolate(
        input,  # [N, C, H, W]
        roi_batch_ind,  # [K]
        y,  # [K, PH, IY]
        x,  # [K, PW, IX]
        ymask,  # [K, IY]
        xmask,  # [K, IX]
    ):
        _, channels, height, width = input.size()

        # deal with inverse element out of feature map boundary
        y = y.clamp(min=0)
        x = x.clamp(min=0)
        y_low = y.int()
        x_low = x.int()
        y_high = torch.where(y_low >= height - 1, height - 1, y_low + 1)
        y_low = torch.where(y_low >= height - 1, height - 1, y_low)
        y = torch.where(y_low >= height - 1, y.to(input.dtype), y)

        x_high = torch.where(x_low >= width - 1, width - 1, x_low + 1)
        x_low = torch.where(x_low >= width - 1, width - 1, x_low)
        x = torch.where(x_low >= width - 1, x.to(input.dtype), x)

        ly = y - y_low
        lx = x - x_low
        hy = 1.0 - ly
        hx = 1.0 - lx

        # do bilinear interpolation, but respect the masking!
        # TODO: It's possible the masking here is unnecessary if y and
        # x were clamped appropriately; hard to tell
        def masked_index(
            y,  # [K, PH, IY]
            x,  # [K, PW, IX]
        ):
            if ymask is not None:
                assert xmask is not None
                y = torch.where(ymask[:, None, :], y, 0)
                x = torch.where(xmask[:, None, :], x, 0)
            return input[
                roi_batch_ind[:, None, None, None, None, None],
                torch.arange(channels, device=input.device)[None, :, None, None, None, None],
                y[:, None, :, None, :, None],  # prev [K, PH, IY]
                x[:, None, None, :, None, :],  # prev [K, PW, IX]
            ]  # [K, C, PH, PW, IY, IX]

        v1 = masked_index(y_low, x_low)
        v2 = masked_index(y_low, x_high)
        v3 = masked_index(y_high, x_low)
        v4 = masked_index(y_high, x_high)

        # all ws preemptively [K, C, PH, PW, IY, IX]
        def outer_prod(y, x):
            return y[:, None, :, None, :, None] * x[:, None, None, :, None, :]

        w1 = outer_prod(hy, hx)
        w2 = outer_prod(hy, lx)
        w3 = outer_prod(ly, hx)
        w4 = outer_prod(ly, lx)

        val = w1 * v1 + w2 * v2 + w3 * v3 + w4 * v4
        return val

    # TODO: this doesn't actually cache
    # TODO: main library should make this easier to do
    def maybe_cast(tensor):
        if torch.is_autocast_enabled() and tensor.is_cuda and tensor.dtype != torch.double:
            return tensor.float()
        else:
            return tensor

    # This is a slow but pure Python and differentiable implementation of
    # roi_align.  It is transcribed directly off of the roi_align CUDA kernel.
    @torch._dynamo.allow_in_graph
    def _roi_align(input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned):
        orig_dtype = input.dtype

        input = maybe_cast(input)
        rois = maybe_cast(rois)

        _, _, height, width = input.size()

        ph = torch.arange(pooled_height, device=input.device)  # [PH]
        pw = torch.arange(pooled_width, device=input.device)  # [PW]

        # input: [N, C, H, W]
        # rois: [K, 5]

        roi_batch_ind = rois[:, 0].int()  # [K]
        offset = 0.5 if aligned else 0.0
        roi_start_w = rois[:, 1] * spatial_scale - offset  # [K]
        roi_start_h = rois[:, 2] * spatial_scale - offset  # [K]
        roi_end_w = rois[:, 3] * spatial_scale - offset  # [K]
        roi_end_h = rois[:, 4] * spatial_scale - offset  # [K]

        roi_width = roi_end_w - roi_start_w  # [K]
        roi_height = roi_end_h - roi_start_h  # [K]
        if not aligned:
            roi_width = torch.clamp(roi_width, min=1.0)  # [K]
            roi_height = torch.clamp(roi_height, min=1.0)  # [K]

        bin_size_h = roi_height / pooled_height  # [K]
        bin_size_w = roi_width / pooled_width  # [K]

        exact_sampling = sampling_ratio > 0

        roi_bin_grid_h = sampling_ratio if exact_sampling else torch.ceil(roi_height / pooled_height)  # scalar or [K]
        roi_bin_grid_w = sampling_ratio if exact_sampling else torch.ceil(roi_width / pooled_width)  # scalar or [K]

        if exact_sampling:
            count = max(roi_bin_grid_h * roi_bin_grid_w, 1)  # scalar
            iy = torch.arange(roi_bin_grid_h, device=input.device)  # [IY]
            ix = torch.arange(roi_bin_grid_w, device=input.device)  # [IX]
            ymask = None
            xmask = None
        else:
            count = torch.clamp(roi_bin_grid_h * roi_bin_grid_w, min=1)  # [K]
            # When doing adaptive sampling, the number of samples we need to do
            # is data-dependent based on how big the ROIs are.  This is a bit
            # awkward because first-class dims can't actually handle this.
            # So instead, we inefficiently suppose that we needed to sample ALL
            # the points and mask out things that turned out to be unnecessary
            iy = torch.arange(height, device=input.device)  # [IY]
            ix = torch.arange(width, device=input.device)  # [IX]
            ymask = iy[None, :] < roi_bin_grid_h[:, None]  # [K, IY]
            xmask = ix[None, :] < roi_bin_grid_w[:, None]  # [K, IX]

        def from_K(t):
            return t[:, None, None]

        y = (
            from_K(roi_start_h)
            + ph[None, :, None] * from_K(bin_size_h)
            + (iy[None, None, :] + 0.5).to(input.dtype) * from_K(bin_size_h / roi_bin_grid_h)
        )  # [K, PH, IY]
        x = (
            from_K(roi_start_w)
            + pw[None, :, None] * from_K(bin_size_w)
            + (ix[None, None, :] + 0.5).to(input.dtype) * from_K(bin_size_w / roi_bin_grid_w)
        )  # [K, PW, IX]
        val = _bilinear_interpolate(input, roi_batch_ind, y, x, ymask, xmask)  # [K, C, PH, PW, IY, IX]

        # Mask out samples that weren't actually adaptively needed
        if not exact_sampling:
            val = torch.where(ymask[:, None, None, None, :, None], val, 0)
            val = torch.where(xmask[:, None, None, None, None, :], val, 0)

        output = val.sum((-1, -2))  # remove IY, IX ~> [K, C, PH, PW]
        if isinstance(count, torch.Tensor):
            output /= count[:, None, None, None]
        else:
            output /= count

        output = output.to(orig_dtype)

        return output

    def roi_align(
        input: torch.Tensor,
        boxes,
        output_size: BroadcastingList2[int],
        spatial_scale: float = 1.0,
        sampling_ratio: int = -1,
        aligned: bool = False,
    ) -> torch.Tensor:
        if not torch.jit.is_scripting() and not torch.jit.is_tracing():
            _log_api_usage_once(roi_align)
        rois = boxes
        output_size = _pair(output_size)
        if not isinstance(rois, torch.Tensor):
            rois = convert_boxes_to_roi_format(rois)
        return _roi_align(input, rois, spatial_scale, output_size[0], output_size[1], sampling_ratio, aligned)

    return SimpleNamespace(**{k: v for k, v in locals().items() if callable(v)})


# ===================================================== models/detection/_utils.py, anchor_utils.py
def detection_page(torch):
    nn = torch.nn
    Tensor = torch.Tensor

    class BalancedPositiveNegativeSampler:
        """
        This class samples batches, ensuring that they contain a fixed proportion of positives
        """

        def __init__(self, batch_size_per_image: int, positive_fraction: float) -> None:
            self.batch_size_per_image = batch_size_per_image
            self.positive_fraction = positive_fraction

        def __call__(self, matched_idxs: List[Tensor]) -> Tuple[List[Tensor], List[Tensor]]:
            pos_idx = []
            neg_idx = []
            for matched_idxs_per_image in matched_idxs:
                positive = torch.where(matched_idxs_per_image >= 1)[0]
                negative = torch.where(matched_idxs_per_image == 0)[0]

                num_pos = int(self.batch_size_per_image * self.positive_fraction)
                # protect against not enough positive examples
                num_pos = min(positive.numel(), num_pos)
                num_neg = self.batch_size_per_image - num_pos
                # protect against not enough negative examples
                num_neg = min(negative.numel(), num_neg)

                # randomly select positive and negative examples
                perm1 = torch.randperm(positive.numel(), device=positive.device)[:num_pos]
                perm2 = torch.randperm(negative.numel(), device=negative.device)[:num_neg]

                pos_idx_per_image = positive[perm1]
                neg_idx_per_image = negative[perm2]

                # create binary mask from indices
                pos_idx_per_image_mask = torch.zeros_like(matched_idxs_per_image, dtype=torch.uint8)
                neg_idx_per_image_mask = torch.zeros_like(matched_idxs_per_image, dtype=torch.uint8)

                pos_idx_per_image_mask[pos_idx_per_image] = 1
                neg_idx_per_image_mask[neg_idx_per_image] = 1

                pos_idx.append(pos_idx_per_image_mask)
                neg_idx.append(neg_idx_per_image_mask)

            return pos_idx, neg_idx

    def encode_boxes(reference_boxes: Tensor, proposals: Tensor, weights: Tensor) -> Tensor:
        # perform some unpacking to make it JIT-fusion friendly
        wx = weights[0]
        wy = weights[1]
        ww = weights[2]
        wh = weights[3]

        proposals_x1 = proposals[:, 0].unsqueeze(1)
        proposals_y1 = proposals[:, 1].unsqueeze(1)
        proposals_x2 = proposals[:, 2].unsqueeze(1)
        proposals_y2 = proposals[:, 3].unsqueeze(1)

        reference_boxes_x1 = reference_boxes[:, 0].unsqueeze(1)
        reference_boxes_y1 = reference_boxes[:, 1].unsqueeze(1)
        reference_boxes_x2 = reference_boxes[:, 2].unsqueeze(1)
        reference_boxes_y2 = reference_boxes[:, 3].unsqueeze(1)

        # implementation starts here
        ex_widths = proposals_x2 - proposals_x1
        ex_heights = proposals_y2 - proposals_y1
        ex_ctr_x = proposals_x1 + 0.5 * ex_widths
        ex_ctr_y = proposals_y1 + 0.5 * ex_heights

        gt_widths = reference_boxes_x2 - reference_boxes_x1
        gt_heights = reference_boxes_y2 - reference_boxes_y1
        gt_ctr_x = reference_boxes_x1 + 0.5 * gt_widths
        gt_ctr_y = reference_boxes_y1 + 0.5 * gt_heights

        targets_dx = wx * (gt_ctr_x - ex_ctr_x) / ex_widths
        targets_dy = wy * (gt_ctr_y - ex_ctr_y) / ex_heights
        targets_dw = ww * torch.log(gt_widths / ex_widths)
        targets_dh = wh * torch.log(gt_heights / ex_heights)

        targets = torch.cat((targets_dx, targets_dy, targets_dw, targets_dh), dim=1)
        return targets

    class BoxCoder:
        """
        This class encodes and decodes a set of bounding boxes into
        the representation used for training the regressors.
        """

        def __init__(self, weights: Tuple[float, float, float, float], bbox_xform_clip: float = math.log(1000.0 / 16)) -> None:
            self.weights = weights
            self.bbox_xform_clip = bbox_xform_clip

        def encode(self, reference_boxes: List[Tensor], proposals: List[Tensor]) -> List[Tensor]:
            boxes_per_image = [len(b) for b in reference_boxes]
            reference_boxes = torch.cat(reference_boxes, dim=0)
            proposals = torch.cat(proposals, dim=0)
            targets = self.encode_single(reference_boxes, proposals)
            return targets.split(boxes_per_image, 0)

        def encode_single(self, reference_boxes: Tensor, proposals: Tensor) -> Tensor:
            dtype = reference_boxes.dtype
            device = reference_boxes.device
            weights = torch.as_tensor(self.weights, dtype=dtype, device=device)
            targets = encode_boxes(reference_boxes, proposals, weights)

            return targets

        def decode(self, rel_codes: Tensor, boxes: List[Tensor]) -> Tensor:
            torch._assert(
                isinstance(boxes, (list, tuple)),
                "This function expects boxes of type list or tuple.",
            )
            torch._assert(
                isinstance(rel_codes, torch.Tensor),
                "This function expects rel_codes of type torch.Tensor.",
            )
            boxes_per_image = [b.size(0) for b in boxes]
            concat_boxes = torch.cat(boxes, dim=0)
            box_sum = 0
            for val in boxes_per_image:
                box_sum += val
            if box_sum > 0:
                rel_codes = rel_codes.reshape(box_sum, -1)
            pred_boxes = self.decode_single(rel_codes, concat_boxes)
            if box_sum > 0:
                pred_boxes = pred_boxes.reshape(box_sum, -1, 4)
            return pred_boxes

        def decode_single(self, rel_codes: Tensor, boxes: Tensor) -> Tensor:
            boxes = boxes.to(rel_codes.dtype)

            widths = boxes[:, 2] - boxes[:, 0]
            heights = boxes[:, 3] - boxes[:, 1]
            ctr_x = boxes[:, 0] + 0.5 * widths
            ctr_y = boxes[:, 1] + 0.5 * heights

            wx, wy, ww, wh = self.weights
            dx = rel_codes[:, 0::4] / wx
            dy = rel_codes[:, 1::4] / wy
            dw = rel_codes[:, 2::4] / ww
            dh = rel_codes[:, 3::4] / wh

            # Prevent sending too large values into torch.exp()
            dw = torch.clamp(dw, max=self.bbox_xform_clip)
            dh = torch.clamp(dh, max=self.bbox_xform_clip)

            pred_ctr_x = dx * widths[:, None] + ctr_x[:, None]
            pred_ctr_y = dy * heights[:, None] + ctr_y[:, None]
            pred_w = torch.exp(dw) * widths[:, None]
            pred_h = torch.exp(dh) * heights[:, None]

            # Distance from center to box's corner.
            c_to_c_h = torch.tensor(0.5, dtype=pred_ctr_y.dtype, device=pred_h.device) * pred_h
            c_to_c_w = torch.tensor(0.5, dtype=pred_ctr_x.dtype, device=pred_w.device) * pred_w

            pred_boxes1 = pred_ctr_x - c_to_c_w
            pred_boxes2 = pred_ctr_y - c_to_c_h
            pred_boxes3 = pred_ctr_x + c_to_c_w
            pred_boxes4 = pred_ctr_y + c_to_c_h
            pred_boxes = torch.stack((pred_boxes1, pred_boxes2, pred_boxes3, pred_boxes4), dim=2).flatten(1)
            return pred_boxes

    class Matcher:
        BELOW_LOW_THRESHOLD = -1
        BETWEEN_THRESHOLDS = -2

        def __init__(self, high_threshold: float, low_threshold: float, allow_low_quality_matches: bool = False) -> None:
            self.BELOW_LOW_THRESHOLD = -1
            self.BETWEEN_THRESHOLDS = -2
            torch._assert(low_threshold <= high_threshold, "low_threshold should be <= high_threshold")
            self.high_threshold = high_threshold
            self.low_threshold = low_threshold
            self.allow_low_quality_matches = allow_low_quality_matches

        def __call__(self, match_quality_matrix: Tensor) -> Tensor:
            if match_quality_matrix.numel() == 0:
                # empty targets or proposals not supported during training
                if match_quality_matrix.shape[0] == 0:
                    raise ValueError("No ground-truth boxes available for one of the images during training")
                else:
                    raise ValueError("No proposal boxes available for one of the images during training")

            # match_quality_matrix is M (gt) x N (predicted)
            # Max over gt elements (dim 0) to find best gt candidate for each prediction
            matched_vals, matches = match_quality_matrix.max(dim=0)
            if self.allow_low_quality_matches:
                all_matches = matches.clone()
            else:
                all_matches = None  # type: ignore[assignment]

            # Assign candidate matches with low quality to negative (unassigned) values
            below_low_threshold = matched_vals < self.low_threshold
            between_thresholds = (matched_vals >= self.low_threshold) & (matched_vals < self.high_threshold)
            matches[below_low_threshold] = self.BELOW_LOW_THRESHOLD
            matches[between_thresholds] = self.BETWEEN_THRESHOLDS

            if self.allow_low_quality_matches:
                if all_matches is None:
                    torch._assert(False, "all_matches should not be None")
                else:
                    self.set_low_quality_matches_(matches, all_matches, match_quality_matrix)

            return matches

        def set_low_quality_matches_(self, matches: Tensor, all_matches: Tensor, match_quality_matrix: Tensor) -> None:
            # For each gt, find the prediction with which it has the highest quality
            highest_quality_foreach_gt, _ = match_quality_matrix.max(dim=1)
            # Find the highest quality match available, even if it is low, including ties
            gt_pred_pairs_of_highest_quality = torch.where(match_quality_matrix == highest_quality_foreach_gt[:, None])
            # Each element in the first tensor is a gt index, and each element in second tensor is a prediction index
            # Note how gt items 1, 2, 3, and 5 each have two ties

            pred_inds_to_update = gt_pred_pairs_of_highest_quality[1]
            matches[pred_inds_to_update] = all_matches[pred_inds_to_update]

    class ImageList:
        # models/detection/image_list.py
        def __init__(self, tensors: Tensor, image_sizes: List[Tuple[int, int]]) -> None:
            self.tensors = tensors
            self.image_sizes = image_sizes

    class AnchorGenerator(nn.Module):
        def __init__(
            self,
            sizes=((128, 256, 512),),
            aspect_ratios=((0.5, 1.0, 2.0),),
        ):
            super().__init__()

            if not isinstance(sizes[0], (list, tuple)):
                # TODO change this
                sizes = tuple((s,) for s in sizes)
            if not isinstance(aspect_ratios[0], (list, tuple)):
                aspect_ratios = (aspect_ratios,) * len(sizes)

            self.sizes = sizes
            self.aspect_ratios = aspect_ratios
            self.cell_anchors = [
                self.generate_anchors(size, aspect_ratio) for size, aspect_ratio in zip(sizes, aspect_ratios)
            ]

        # TODO: https://github.com/pytorch/pytorch/issues/26792
        # For every (aspect_ratios, scales) combination, output a zero-centered anchor with those values.
        # (scales, aspect_ratios) are usually an element of zip(self.scales, self.aspect_ratios)
        # This method assumes aspect ratio = height / width for an anchor.
        def generate_anchors(
            self,
            scales: List[int],
            aspect_ratios: List[float],
            dtype: torch.dtype = torch.float32,
            device: torch.device = torch.device("cpu"),
        ) -> Tensor:
            scales = torch.as_tensor(scales, dtype=dtype, device=device)
            aspect_ratios = torch.as_tensor(aspect_ratios, dtype=dtype, device=device)
            h_ratios = torch.sqrt(aspect_ratios)
            w_ratios = 1 / h_ratios

            ws = (w_ratios[:, None] * scales[None, :]).view(-1)
            hs = (h_ratios[:, None] * scales[None, :]).view(-1)

            base_anchors = torch.stack([-ws, -hs, ws, hs], dim=1) / 2
            return base_anchors.round()

        def set_cell_anchors(self, dtype: torch.dtype, device: torch.device):
            self.cell_anchors = [cell_anchor.to(dtype=dtype, device=device) for cell_anchor in self.cell_anchors]

        def num_anchors_per_location(self) -> List[int]:
            return [len(s) * len(a) for s, a in zip(self.sizes, self.aspect_ratios)]

        # For every combination of (a, (g, s), i) in (self.cell_anchors, zip(grid_sizes, strides), 0:2),
        # output g[i] anchors that are s[i] distance apart in direction i, with the same dimensions as a.
        def grid_anchors(self, grid_sizes: List[List[int]], strides: List[List[Tensor]]) -> List[Tensor]:
            anchors = []
            cell_anchors = self.cell_anchors
            torch._assert(cell_anchors is not None, "cell_anchors should not be None")
            torch._assert(
                len(grid_sizes) == len(strides) == len(cell_anchors),
                "Anchors should be Tuple[Tuple[int]] because each feature "
                "map could potentially have different sizes and aspect ratios. "
                "There needs to be a match between the number of "
                "feature maps passed and the number of sizes / aspect ratios specified.",
            )

            for size, stride, base_anchors in zip(grid_sizes, strides, cell_anchors):
                grid_height, grid_width = size
                stride_height, stride_width = stride
                device = base_anchors.device

                # For output anchor, compute [x_center, y_center, x_center, y_center]
                shifts_x = torch.arange(0, grid_width, dtype=torch.int32, device=device) * stride_width
                shifts_y = torch.arange(0, grid_height, dtype=torch.int32, device=device) * stride_height
                shift_y, shift_x = torch.meshgrid(shifts_y, shifts_x, indexing="ij")
                shift_x = shift_x.reshape(-1)
                shift_y = shift_y.reshape(-1)
                shifts = torch.stack((shift_x, shift_y, shift_x, shift_y), dim=1)

                # For every (base anchor, output anchor) pair,
                # offset each zero-centered base anchor by the center of the output anchor.
                anchors.append((shifts.view(-1, 1, 4) + base_anchors.view(1, -1, 4)).reshape(-1, 4))

            return anchors

        def forward(self, image_list: ImageList, feature_maps: List[Tensor]) -> List[Tensor]:
            grid_sizes = [feature_map.shape[-2:] for feature_map in feature_maps]
            image_size = image_list.tensors.shape[-2:]
            dtype, device = feature_maps[0].dtype, feature_maps[0].device
            strides = [
                [
                    torch.empty((), dtype=torch.int64, device=device).fill_(image_size[0] // g[0]),
                    torch.empty((), dtype=torch.int64, device=device).fill_(image_size[1] // g[1]),
                ]
                for g in grid_sizes
            ]
            self.set_cell_anchors(dtype, device)
            anchors_over_all_feature_maps = self.grid_anchors(grid_sizes, strides)
            anchors: List[List[torch.Tensor]] = []
            for _ in range(len(image_list.image_sizes)):
                anchors_in_image = [anchors_per_feature_map for anchors_per_feature_map in anchors_over_all_feature_maps]
                anchors.append(anchors_in_image)
            anchors = [torch.cat(anchors_per_image) for anchors_per_image in anchors]
            return anchors

    return SimpleNamespace(**{k: v for k, v in locals().items() if callable(v)})


# ======================================== models: mobilenetv2, shufflenetv2, squeezenet, densenet
def models_page(torch):
    nn = torch.nn
    F = torch.nn.functional
    Tensor = torch.Tensor
    cp = torch.utils.checkpoint
    Conv2dNormActivation = misc_page(torch).Conv2dNormActivation

    # ---- mobilenetv2.py
    def _make_divisible(v: float, divisor: int, min_value: Optional[int] = None) -> int:
        """
        This function is taken from the original tf repo.
        It ensures that all layers have a channel number that is divisible by 8
        """
        if min_value is None:
            min_value = divisor
        new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
        # Make sure that round down does not go down by more than 10%.
        if new_v < 0.9 * v:
            new_v += divisor
        return new_v

    class InvertedResidual(nn.Module):
        def __init__(self, inp: int, oup: int, stride: int, expand_ratio: int, norm_layer=None) -> None:
            super().__init__()
            self.stride = stride
            if stride not in [1, 2]:
                raise ValueError(f"stride should be 1 or 2 instead of {stride}")

            if norm_layer is None:
                norm_layer = nn.BatchNorm2d

            hidden_dim = int(round(inp * expand_ratio))
            self.use_res_connect = self.stride == 1 and inp == oup

            layers: List[nn.Module] = []
            if expand_ratio != 1:
                # pw
                layers.append(
                    Conv2dNormActivation(inp, hidden_dim, kernel_size=1, norm_layer=norm_layer, activation_layer=nn.ReLU6)
                )
            layers.extend(
                [
                    # dw
                    Conv2dNormActivation(
                        hidden_dim,
                        hidden_dim,
                        stride=stride,
                        groups=hidden_dim,
                        norm_layer=norm_layer,
                        activation_layer=nn.ReLU6,
                    ),
                    # pw-linear
                    nn.Conv2d(hidden_dim, oup, 1, 1, 0, bias=False),
                    norm_layer(oup),
                ]
            )
            self.conv = nn.Sequential(*layers)
            self.out_channels = oup
            self._is_cn = stride > 1

        def forward(self, x: Tensor) -> Tensor:
            if self.use_res_connect:
                return x + self.conv(x)
            else:
                return self.conv(x)

    class MobileNetV2(nn.Module):
        def __init__(
            self,
            num_classes: int = 1000,
            width_mult: float = 1.0,
            inverted_residual_setting: Optional[List[List[int]]] = None,
            round_nearest: int = 8,
            block=None,
            norm_layer=None,
            dropout: float = 0.2,
        ) -> None:
            super().__init__()

            if block is None:
                block = InvertedResidual

            if norm_layer is None:
                norm_layer = nn.BatchNorm2d

            input_channel = 32
            last_channel = 1280

            if inverted_residual_setting is None:
                inverted_residual_setting = [
                    # t, c, n, s
                    [1, 16, 1, 1],
                    [6, 24, 2, 2],
                    [6, 32, 3, 2],
                    [6, 64, 4, 2],
                    [6, 96, 3, 1],
                    [6, 160, 3, 2],
                    [6, 320, 1, 1],
                ]

            # only check the first element, assuming user knows t,c,n,s are required
            if len(inverted_residual_setting) == 0 or len(inverted_residual_setting[0]) != 4:
                raise ValueError(
                    f"inverted_residual_setting should be non-empty or a 4-element list, got {inverted_residual_setting}"
                )

            # building first layer
            input_channel = _make_divisible(input_channel * width_mult, round_nearest)
            self.last_channel = _make_divisible(last_channel * max(1.0, width_mult), round_nearest)
            features: List[nn.Module] = [
                Conv2dNormActivation(3, input_channel, stride=2, norm_layer=norm_layer, activation_layer=nn.ReLU6)
            ]
            # building inverted residual blocks
            for t, c, n, s in inverted_residual_setting:
                output_channel = _make_divisible(c * width_mult, round_nearest)
                for i in range(n):
                    stride = s if i == 0 else 1
                    features.append(block(input_channel, output_channel, stride, expand_ratio=t, norm_layer=norm_layer))
                    input_channel = output_channel
            # building last several layers
            features.append(
                Conv2dNormActivation(
                    input_channel, self.last_channel, kernel_size=1, norm_layer=norm_layer, activation_layer=nn.ReLU6
                )
            )
            # make it nn.Sequential
            self.features = nn.Sequential(*features)

            # building classifier
            self.classifier = nn.Sequential(
                nn.Dropout(p=dropout),
                nn.Linear(self.last_channel, num_classes),
            )

            # weight initialization
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out")
                    if m.bias is not None:
                        nn.init.zeros_(m.bias)
                elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                    nn.init.ones_(m.weight)
                    nn.init.zeros_(m.bias)
                elif isinstance(m, nn.Linear):
                    nn.init.normal_(m.weight, 0, 0.01)
                    nn.init.zeros_(m.bias)

        def _forward_impl(self, x: Tensor) -> Tensor:
            # This exists since TorchScript doesn't support inheritance, so the superclass method
            # (this one) needs to have a name other than `forward` that can be accessed in a subclass
            x = self.features(x)
            # Cannot use "squeeze" as batch-size can be 1
            x = nn.functional.adaptive_avg_pool2d(x, (1, 1))
            x = torch.flatten(x, 1)
            x = self.classifier(x)
            return x

        def forward(self, x: Tensor) -> Tensor:
            return self._forward_impl(x)

    # ---- shufflenetv2.py
    def channel_shuffle(x: Tensor, groups: int) -> Tensor:
        batchsize, num_channels, height, width = x.size()
        channels_per_group = num_channels // groups

        # reshape
        x = x.view(batchsize, groups, channels_per_group, height, width)

        x = torch.transpose(x, 1, 2).contiguous()

        # flatten
        x = x.view(batchsize, num_channels, height, width)

        return x

    class ShuffleInvertedResidual(nn.Module):  # shufflenetv2.InvertedResidual
        def __init__(self, inp: int, oup: int, stride: int) -> None:
            super().__init__()

            if not (1 <= stride <= 3):
                raise ValueError("illegal stride value")
            self.stride = stride

            branch_features = oup // 2
            if (self.stride == 1) and (inp != branch_features << 1):
                raise ValueError(
                    f"Invalid combination of stride {stride}, inp {inp} and oup {oup} values. If stride == 1 then inp should be equal to oup // 2 << 1."
                )

            if self.stride > 1:
                self.branch1 = nn.Sequential(
                    self.depthwise_conv(inp, inp, kernel_size=3, stride=self.stride, padding=1),
                    nn.BatchNorm2d(inp),
                    nn.Conv2d(inp, branch_features, kernel_size=1, stride=1, padding=0, bias=False),
                    nn.BatchNorm2d(branch_features),
                    nn.ReLU(inplace=True),
                )
            else:
                self.branch1 = nn.Sequential()

            self.branch2 = nn.Sequential(
                nn.Conv2d(
                    inp if (self.stride > 1) else branch_features,
                    branch_features,
                    kernel_size=1,
                    stride=1,
                    padding=0,
                    bias=False,
                ),
                nn.BatchNorm2d(branch_features),
                nn.ReLU(inplace=True),
                self.depthwise_conv(branch_features, branch_features, kernel_size=3, stride=self.stride, padding=1),
                nn.BatchNorm2d(branch_features),
                nn.Conv2d(branch_features, branch_features, kernel_size=1, stride=1, padding=0, bias=False),
                nn.BatchNorm2d(branch_features),
                nn.ReLU(inplace=True),
            )

        @staticmethod
        def depthwise_conv(i: int, o: int, kernel_size: int, stride: int = 1, padding: int = 0, bias: bool = False) -> nn.Conv2d:
            return nn.Conv2d(i, o, kernel_size, stride, padding, bias=bias, groups=i)

        def forward(self, x: Tensor) -> Tensor:
            if self.stride == 1:
                x1, x2 = x.chunk(2, dim=1)
                out = torch.cat((x1, self.branch2(x2)), dim=1)
            else:
                out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)

            out = channel_shuffle(out, 2)

            return out

    # ---- squeezenet.py
    class Fire(nn.Module):
        def __init__(self, inplanes: int, squeeze_planes: int, expand1x1_planes: int, expand3x3_planes: int) -> None:
            super().__init__()
            self.inplanes = inplanes
            self.squeeze = nn.Conv2d(inplanes, squeeze_planes, kernel_size=1)
            self.squeeze_activation = nn.ReLU(inplace=True)
            self.expand1x1 = nn.Conv2d(squeeze_planes, expand1x1_planes, kernel_size=1)
            self.expand1x1_activation = nn.ReLU(inplace=True)
            self.expand3x3 = nn.Conv2d(squeeze_planes, expand3x3_planes, kernel_size=3, padding=1)
            self.expand3x3_activation = nn.ReLU(inplace=True)

        def forward(self, x: Tensor) -> Tensor:
            x = self.squeeze_activation(self.squeeze(x))
            return torch.cat(
                [self.expand1x1_activation(self.expand1x1(x)), self.expand3x3_activation(self.expand3x3(x))], 1
            )

    # ---- densenet.py
    class _DenseLayer(nn.Module):
        def __init__(
            self, num_input_features: int, growth_rate: int, bn_size: int, drop_rate: float, memory_efficient: bool = False
        ) -> None:
            super().__init__()
            self.norm1 = nn.BatchNorm2d(num_input_features)
            self.relu1 = nn.ReLU(inplace=True)
            self.conv1 = nn.Conv2d(num_input_features, bn_size * growth_rate, kernel_size=1, stride=1, bias=False)

            self.norm2 = nn.BatchNorm2d(bn_size * growth_rate)
            self.relu2 = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(bn_size * growth_rate, growth_rate, kernel_size=3, stride=1, padding=1, bias=False)

            self.drop_rate = float(drop_rate)
            self.memory_efficient = memory_efficient

        def bn_function(self, inputs: List[Tensor]) -> Tensor:
            concated_features = torch.cat(inputs, 1)
            bottleneck_output = self.conv1(self.relu1(self.norm1(concated_features)))  # noqa: T484
            return bottleneck_output

        # todo: rewrite when torchscript supports any
        def any_requires_grad(self, input: List[Tensor]) -> bool:
            for tensor in input:
                if tensor.requires_grad:
                    return True
            return False

        def call_checkpoint_bottleneck(self, input: List[Tensor]) -> Tensor:
            def closure(*inputs):
                return self.bn_function(inputs)

            return cp.checkpoint(closure, *input, use_reentrant=False)

        def forward(self, input) -> Tensor:  # noqa: F811
            if isinstance(input, Tensor):
                prev_features = [input]
            else:
                prev_features = input

            if self.memory_efficient and self.any_requires_grad(prev_features):
                bottleneck_output = self.call_checkpoint_bottleneck(prev_features)
            else:
                bottleneck_output = self.bn_function(prev_features)

            new_features = self.conv2(self.relu2(self.norm2(bottleneck_output)))
            if self.drop_rate > 0:
                new_features = F.dropout(new_features, p=self.drop_rate, training=self.training)
            return new_features

    class _DenseBlock(nn.ModuleDict):
        _version = 2

        def __init__(
            self,
            num_layers: int,
            num_input_features: int,
            bn_size: int,
            growth_rate: int,
            drop_rate: float,
            memory_efficient: bool = False,
        ) -> None:
            super().__init__()
            for i in range(num_layers):
                layer = _DenseLayer(
                    num_input_features + i * growth_rate,
                    growth_rate=growth_rate,
                    bn_size=bn_size,
                    drop_rate=drop_rate,
                    memory_efficient=memory_efficient,
                )
                self.add_module("denselayer%d" % (i + 1), layer)

        def forward(self, init_features: Tensor) -> Tensor:
            features = [init_features]
            for name, layer in self.items():
                new_features = layer(features)
                features.append(new_features)
            return torch.cat(features, 1)

    class _Transition(nn.Sequential):
        def __init__(self, num_input_features: int, num_output_features: int) -> None:
            super().__init__()
            self.norm = nn.BatchNorm2d(num_input_features)
            self.relu = nn.ReLU(inplace=True)
            self.conv = nn.Conv2d(num_input_features, num_output_features, kernel_size=1, stride=1, bias=False)
            self.pool = nn.AvgPool2d(kernel_size=2, stride=2)

    # ---- mobilenetv3.py
    SqueezeExcitation = misc_page(torch).SqueezeExcitation
    StochasticDepth = losses_page(torch).StochasticDepth

    class InvertedResidualConfig:
        # Stores information listed at Tables 1 and 2 of the MobileNetV3 paper
        def __init__(
            self,
            input_channels: int,
            kernel: int,
            expanded_channels: int,
            out_channels: int,
            use_se: bool,
            activation: str,
            stride: int,
            dilation: int,
            width_mult: float,
        ):
            self.input_channels = self.adjust_channels(input_channels, width_mult)
            self.kernel = kernel
            self.expanded_channels = self.adjust_channels(expanded_channels, width_mult)
            self.out_channels = self.adjust_channels(out_channels, width_mult)
            self.use_se = use_se
            self.use_hs = activation == "HS"
            self.stride = stride
            self.dilation = dilation

        @staticmethod
        def adjust_channels(channels: int, width_mult: float):
            return _make_divisible(channels * width_mult, 8)

    class InvertedResidualV3(nn.Module):  # mobilenetv3.InvertedResidual
        # Implemented as described at section 5 of MobileNetV3 paper
        def __init__(
            self,
            cnf: InvertedResidualConfig,
            norm_layer,
            se_layer=partial(SqueezeExcitation, scale_activation=nn.Hardsigmoid),
        ):
            super().__init__()
            if not (1 <= cnf.stride <= 2):
                raise ValueError("illegal stride value")

            self.use_res_connect = cnf.stride == 1 and cnf.input_channels == cnf.out_channels

            layers: List[nn.Module] = []
            activation_layer = nn.Hardswish if cnf.use_hs else nn.ReLU

            # expand
            if cnf.expanded_channels != cnf.input_channels:
                layers.append(
                    Conv2dNormActivation(
                        cnf.input_channels,
                        cnf.expanded_channels,
                        kernel_size=1,
                        norm_layer=norm_layer,
                        activation_layer=activation_layer,
                    )
                )

            # depthwise
            stride = 1 if cnf.dilation > 1 else cnf.stride
            layers.append(
                Conv2dNormActivation(
                    cnf.expanded_channels,
                    cnf.expanded_channels,
                    kernel_size=cnf.kernel,
                    stride=stride,
                    dilation=cnf.dilation,
                    groups=cnf.expanded_channels,
                    norm_layer=norm_layer,
                    activation_layer=activation_layer,
                )
            )
            if cnf.use_se:
                squeeze_channels = _make_divisible(cnf.expanded_channels // 4, 8)
                layers.append(se_layer(cnf.expanded_channels, squeeze_channels))

            # project
            layers.append(
                Conv2dNormActivation(
                    cnf.expanded_channels, cnf.out_channels, kernel_size=1, norm_layer=norm_layer, activation_layer=None
                )
            )

            self.block = nn.Sequential(*layers)
            self.out_channels = cnf.out_channels
            self._is_cn = cnf.stride > 1

        def forward(self, input: Tensor) -> Tensor:
            result = self.block(input)
            if self.use_res_connect:
                result += input
            return result

    # ---- efficientnet.py
    class _MBConvConfig:
        def __init__(self, expand_ratio, kernel, stride, input_channels, out_channels, num_layers, block):
            self.expand_ratio = expand_ratio
            self.kernel = kernel
            self.stride = stride
            self.input_channels = input_channels
            self.out_channels = out_channels
            self.num_layers = num_layers
            self.block = block

        @staticmethod
        def adjust_channels(channels: int, width_mult: float, min_value: Optional[int] = None) -> int:
            return _make_divisible(channels * width_mult, 8, min_value)

    class MBConvConfig(_MBConvConfig):
        # Stores information listed at Table 1 of the EfficientNet paper & Table 4 of the EfficientNetV2 paper
        def __init__(
            self,
            expand_ratio: float,
            kernel: int,
            stride: int,
            input_channels: int,
            out_channels: int,
            num_layers: int,
            width_mult: float = 1.0,
            depth_mult: float = 1.0,
            block=None,
        ) -> None:
            input_channels = self.adjust_channels(input_channels, width_mult)
            out_channels = self.adjust_channels(out_channels, width_mult)
            num_layers = self.adjust_depth(num_layers, depth_mult)
            if block is None:
                block = MBConv
            super().__init__(expand_ratio, kernel, stride, input_channels, out_channels, num_layers, block)

        @staticmethod
        def adjust_depth(num_layers: int, depth_mult: float):
            return int(math.ceil(num_layers * depth_mult))

    class MBConv(nn.Module):
        def __init__(
            self,
            cnf: MBConvConfig,
            stochastic_depth_prob: float,
            norm_layer,
            se_layer=SqueezeExcitation,
        ) -> None:
            super().__init__()

            if not (1 <= cnf.stride <= 2):
                raise ValueError("illegal stride value")

            self.use_res_connect = cnf.stride == 1 and cnf.input_channels == cnf.out_channels

            layers: List[nn.Module] = []
            activation_layer = nn.SiLU

            # expand
            expanded_channels = cnf.adjust_channels(cnf.input_channels, cnf.expand_ratio)
            if expanded_channels != cnf.input_channels:
                layers.append(
                    Conv2dNormActivation(
                        cnf.input_channels,
                        expanded_channels,
                        kernel_size=1,
                        norm_layer=norm_layer,
                        activation_layer=activation_layer,
                    )
                )

            # depthwise
            layers.append(
                Conv2dNormActivation(
                    expanded_channels,
                    expanded_channels,
                    kernel_size=cnf.kernel,
                    stride=cnf.stride,
                    groups=expanded_channels,
                    norm_layer=norm_layer,
                    activation_layer=activation_layer,
                )
            )

            # squeeze and excitation
            squeeze_channels = max(1, cnf.input_channels // 4)
            layers.append(se_layer(expanded_channels, squeeze_channels, activation=partial(nn.SiLU, inplace=True)))

            # project
            layers.append(
                Conv2dNormActivation(
                    expanded_channels, cnf.out_channels, kernel_size=1, norm_layer=norm_layer, activation_layer=None
                )
            )

            self.block = nn.Sequential(*layers)
            self.stochastic_depth = StochasticDepth(stochastic_depth_prob, "row")
            self.out_channels = cnf.out_channels

        def forward(self, input: Tensor) -> Tensor:
            result = self.block(input)
            if self.use_res_connect:
                result = self.stochastic_depth(result)
                result += input
            return result

    return SimpleNamespace(**{k: v for k, v in locals().items() if callable(v)})


# ====================================================== transforms/_functional_tensor.py
def transforms_page(torch):
    import warnings
    from typing import Union

    Tensor = torch.Tensor
    conv2d = torch.nn.functional.conv2d
    grid_sample = torch.nn.functional.grid_sample
    interpolate = torch.nn.functional.interpolate
    torch_pad = torch.nn.functional.pad

    def _is_tensor_a_torch_image(x: Tensor) -> bool:
        return x.ndim >= 2

    def _assert_image_tensor(img: Tensor) -> None:
        if not _is_tensor_a_torch_image(img):
            raise TypeError("Tensor is not a torch image.")

    def get_dimensions(img: Tensor) -> List[int]:
        _assert_image_tensor(img)
        channels = 1 if img.ndim == 2 else img.shape[-3]
        height, width = img.shape[-2:]
        return [channels, height, width]

    def _max_value(dtype: torch.dtype) -> int:
        if dtype == torch.uint8:
            return 255
        elif dtype == torch.int8:
            return 127
        elif dtype == torch.int16:
            return 32767
        elif dtype == torch.int32:
            return 2147483647
        elif dtype == torch.int64:
            return 9223372036854775807
        else:
            # This is only here for completeness. This value is implicitly assumed in a lot of places so changing it is not
            # easy.
            return 1

    def _assert_channels(img: Tensor, permitted: List[int]) -> None:
        c = get_dimensions(img)[0]
        if c not in permitted:
            raise TypeError(f"Input image tensor permitted channel values are {permitted}, but found {c}")

    def convert_image_dtype(image: torch.Tensor, dtype: torch.dtype = torch.float) -> torch.Tensor:
        if image.dtype == dtype:
            return image

        if image.is_floating_point():

            # TODO: replace with dtype.is_floating_point when torchscript supports it
            if torch.tensor(0, dtype=dtype).is_floating_point():
                return image.to(dtype)

            # float to int
            if (image.dtype == torch.float32 and dtype in (torch.int32, torch.int64)) or (
                image.dtype == torch.float64 and dtype == torch.int64
            ):
                msg = f"The cast from {image.dtype} to {dtype} cannot be performed safely."
                raise RuntimeError(msg)

            # https://github.com/pytorch/vision/pull/2078#issuecomment-612045321
            # For data in the range 0-1, (float * 255).to(uint) is only 255
            # when float is exactly 1.0.
            # `max + 1 - epsilon` provides more evenly distributed mapping of
            # ranges of floats to ints.
            eps = 1e-3
            max_val = float(_max_value(dtype))
            result = image.mul(max_val + 1.0 - eps)
            return result.to(dtype)
        else:
            input_max = float(_max_value(image.dtype))

            # int to float
            # TODO: replace with dtype.is_floating_point when torchscript supports it
            if torch.tensor(0, dtype=dtype).is_floating_point():
                image = image.to(dtype)
                return image / input_max

            output_max = float(_max_value(dtype))

            # int to int
            if input_max > output_max:
                # factor should be forced to int for torch jit script
                # otherwise factor is a float and image // factor can produce different results
                factor = int((input_max + 1) // (output_max + 1))
                image = torch.div(image, factor, rounding_mode="floor")
                return image.to(dtype)
            else:
                # factor should be forced to int for torch jit script
                # otherwise factor is a float and image * factor can produce different results
                factor = int((output_max + 1) // (input_max + 1))
                image = image.to(dtype)
                return image * factor

    def vflip(img: Tensor) -> Tensor:
        _assert_image_tensor(img)

        return img.flip(-2)

    def hflip(img: Tensor) -> Tensor:
        _assert_image_tensor(img)

        return img.flip(-1)

    def crop(img: Tensor, top: int, left: int, height: int, width: int) -> Tensor:
        _assert_image_tensor(img)

        _, h, w = get_dimensions(img)
        right = left + width
        bottom = top + height

        if left < 0 or top < 0 or right > w or bottom > h:
            padding_ltrb = [
                max(-left + min(0, right), 0),
                max(-top + min(0, bottom), 0),
                max(right - max(w, left), 0),
                max(bottom - max(h, top), 0),
            ]
            return pad(img[..., max(top, 0) : bottom, max(left, 0) : right], padding_ltrb, fill=0)
        return img[..., top:bottom, left:right]

    def rgb_to_grayscale(img: Tensor, num_output_channels: int = 1) -> Tensor:
        if img.ndim < 3:
            raise TypeError(f"Input image tensor should have at least 3 dimensions, but found {img.ndim}")
        _assert_channels(img, [1, 3])

        if num_output_channels not in (1, 3):
            raise ValueError("num_output_channels should be either 1 or 3")

        if img.shape[-3] == 3:
            r, g, b = img.unbind(dim=-3)
            # This implementation closely follows the TF one:
            # https://github.com/tensorflow/tensorflow/blob/v2.3.0/tensorflow/python/ops/image_ops_impl.py#L2105-L2138
            l_img = (0.2989 * r + 0.587 * g + 0.114 * b).to(img.dtype)
            l_img = l_img.unsqueeze(dim=-3)
        else:
            l_img = img.clone()

        if num_output_channels == 3:
            return l_img.expand(img.shape)

        return l_img

    def adjust_brightness(img: Tensor, brightness_factor: float) -> Tensor:
        if brightness_factor < 0:
            raise ValueError(f"brightness_factor ({brightness_factor}) is not non-negative.")

        _assert_image_tensor(img)

        _assert_channels(img, [1, 3])

        return _blend(img, torch.zeros_like(img), brightness_factor)

    def adjust_contrast(img: Tensor, contrast_factor: float) -> Tensor:
        if contrast_factor < 0:
            raise ValueError(f"contrast_factor ({contrast_factor}) is not non-negative.")

        _assert_image_tensor(img)

        _assert_channels(img, [3, 1])
        c = get_dimensions(img)[0]
        dtype = img.dtype if torch.is_floating_point(img) else torch.float32
        if c == 3:
            mean = torch.mean(rgb_to_grayscale(img).to(dtype), dim=(-3, -2, -1), keepdim=True)
        else:
            mean = torch.mean(img.to(dtype), dim=(-3, -2, -1), keepdim=True)

        return _blend(img, mean, contrast_factor)

    def adjust_hue(img: Tensor, hue_factor: float) -> Tensor:
        if not (-0.5 <= hue_factor <= 0.5):
            raise ValueError(f"hue_factor ({hue_factor}) is not in [-0.5, 0.5].")

        if not (isinstance(img, torch.Tensor)):
            raise TypeError("Input img should be Tensor image")

        _assert_image_tensor(img)

        _assert_channels(img, [1, 3])
        if get_dimensions(img)[0] == 1:  # Match PIL behaviour
            return img

        orig_dtype = img.dtype
        img = convert_image_dtype(img, torch.float32)

        img = _rgb2hsv(img)
        h, s, v = img.unbind(dim=-3)
        h = (h + hue_factor) % 1.0
        img = torch.stack((h, s, v), dim=-3)
        img_hue_adj = _hsv2rgb(img)

        return convert_image_dtype(img_hue_adj, orig_dtype)

    def adjust_saturation(img: Tensor, saturation_factor: float) -> Tensor:
        if saturation_factor < 0:
            raise ValueError(f"saturation_factor ({saturation_factor}) is not non-negative.")

        _assert_image_tensor(img)

        _assert_channels(img, [1, 3])

        if get_dimensions(img)[0] == 1:  # Match PIL behaviour
            return img

        return _blend(img, rgb_to_grayscale(img), saturation_factor)

    def _blend(img1: Tensor, img2: Tensor, ratio: float) -> Tensor:
        ratio = float(ratio)
        bound = _max_value(img1.dtype)
        return (ratio * img1 + (1.0 - ratio) * img2).clamp(0, bound).to(img1.dtype)

    def _rgb2hsv(img: Tensor) -> Tensor:
        r, g, b = img.unbind(dim=-3)

        # Implementation is based on https://github.com/python-pillow/Pillow/blob/4174d4267616897df3746d315d5a2d0f82c656ee/
        # src/libImaging/Convert.c#L330
        maxc = torch.max(img, dim=-3).values
        minc = torch.min(img, dim=-3).values

        # The algorithm erases S and H channel where `maxc = minc`. This avoids NaN
        # from happening in the results, because
        #   + S channel has division by `maxc`, which is zero only if `maxc = minc`
        #   + H channel has division by `(maxc - minc)`.
        eqc = maxc == minc

        cr = maxc - minc
        # Since `eqc => cr = 0`, replacing denominator with 1 when `eqc` is fine.
        ones = torch.ones_like(maxc)
        s = cr / torch.where(eqc, ones, maxc)
        # Note that `eqc => maxc = minc = r = g = b`. So the following calculation
        # of `h` would reduce to `bc - gc + 2 + rc - bc + 4 + rc - bc = 6` so it
        # would not matter what values `rc`, `gc`, and `bc` have here, and thus
        # replacing denominator with 1 when `eqc` is fine.
        cr_divisor = torch.where(eqc, ones, cr)
        rc = (maxc - r) / cr_divisor
        gc = (maxc - g) / cr_divisor
        bc = (maxc - b) / cr_divisor

        hr = (maxc == r) * (bc - gc)
        hg = ((maxc == g) & (maxc != r)) * (2.0 + rc - bc)
        hb = ((maxc != g) & (maxc != r)) * (4.0 + gc - rc)
        h = hr + hg + hb
        h = torch.fmod((h / 6.0 + 1.0), 1.0)
        return torch.stack((h, s, maxc), dim=-3)

    def _hsv2rgb(img: Tensor) -> Tensor:
        h, s, v = img.unbind(dim=-3)
        i = torch.floor(h * 6.0)
        f = (h * 6.0) - i
        i = i.to(dtype=torch.int32)

        p = torch.clamp((v * (1.0 - s)), 0.0, 1.0)
        q = torch.clamp((v * (1.0 - s * f)), 0.0, 1.0)
        t = torch.clamp((v * (1.0 - s * (1.0 - f))), 0.0, 1.0)
        i = i % 6

        mask = i.unsqueeze(dim=-3) == torch.arange(6, device=i.device).view(-1, 1, 1)

        a1 = torch.stack((v, q, p, p, t, v), dim=-3)
        a2 = torch.stack((t, v, v, q, p, p), dim=-3)
        a3 = torch.stack((p, p, t, v, v, q), dim=-3)
        a4 = torch.stack((a1, a2, a3), dim=-4)

        return torch.einsum("...ijk, ...xijk -> ...xjk", mask.to(dtype=img.dtype), a4)

    def _pad_symmetric(img: Tensor, padding: List[int]) -> Tensor:
        # padding is left, right, top, bottom

        # crop if needed
        if padding[0] < 0 or padding[1] < 0 or padding[2] < 0 or padding[3] < 0:
            neg_min_padding = [-min(x, 0) for x in padding]
            crop_left, crop_right, crop_top, crop_bottom = neg_min_padding
            img = img[..., crop_top : img.shape[-2] - crop_bottom, crop_left : img.shape[-1] - crop_right]
            padding = [max(x, 0) for x in padding]

        in_sizes = img.size()

        _x_indices = [i for i in range(in_sizes[-1])]  # [0, 1, 2, 3, ...]
        left_indices = [i for i in range(padding[0] - 1, -1, -1)]  # e.g. [3, 2, 1, 0]
        right_indices = [-(i + 1) for i in range(padding[1])]  # e.g. [-1, -2, -3]
        x_indices = torch.tensor(left_indices + _x_indices + right_indices, device=img.device)

        _y_indices = [i for i in range(in_sizes[-2])]
        top_indices = [i for i in range(padding[2] - 1, -1, -1)]
        bottom_indices = [-(i + 1) for i in range(padding[3])]
        y_indices = torch.tensor(top_indices + _y_indices + bottom_indices, device=img.device)

        ndim = img.ndim
        if ndim == 3:
            return img[:, y_indices[:, None], x_indices[None, :]]
        elif ndim == 4:
            return img[:, :, y_indices[:, None], x_indices[None, :]]
        else:
            raise RuntimeError("Symmetric padding of N-D tensors are not supported yet")

    def _parse_pad_padding(padding: Union[int, List[int]]) -> List[int]:
        if isinstance(padding, int):
            pad_left = pad_right = pad_top = pad_bottom = padding
        elif len(padding) == 1:
            pad_left = pad_right = pad_top = pad_bottom = padding[0]
        elif len(padding) == 2:
            pad_left = pad_right = padding[0]
            pad_top = pad_bottom = padding[1]
        else:
            pad_left = padding[0]
            pad_top = padding[1]
            pad_right = padding[2]
            pad_bottom = padding[3]

        return [pad_left, pad_right, pad_top, pad_bottom]

    def pad(
        img: Tensor, padding: Union[int, List[int]], fill: Optional[Union[int, float]] = 0, padding_mode: str = "constant"
    ) -> Tensor:
        _assert_image_tensor(img)

        if fill is None:
            fill = 0

        if not isinstance(padding, (int, tuple, list)):
            raise TypeError("Got inappropriate padding arg")
        if not isinstance(fill, (int, float)):
            raise TypeError("Got inappropriate fill arg")
        if not isinstance(padding_mode, str):
            raise TypeError("Got inappropriate padding_mode arg")

        if isinstance(padding, tuple):
            padding = list(padding)

        if isinstance(padding, list):
            # TODO: Jit is failing on loading this op when scripted and saved
            # https://github.com/pytorch/pytorch/issues/81100
            if len(padding) not in [1, 2, 4]:
                raise ValueError(
                    f"Padding must be an int or a 1, 2, or 4 element tuple, not a {len(padding)} element tuple"
                )

        if padding_mode not in ["constant", "edge", "reflect", "symmetric"]:
            raise ValueError("Padding mode should be either constant, edge, reflect or symmetric")

        p = _parse_pad_padding(padding)

        if padding_mode == "edge":
            # remap padding_mode str
            padding_mode = "replicate"
        elif padding_mode == "symmetric":
            # route to another implementation
            return _pad_symmetric(img, p)

        need_squeeze = False
        if img.ndim < 4:
            img = img.unsqueeze(dim=0)
            need_squeeze = True

        out_dtype = img.dtype
        need_cast = False
        if (padding_mode != "constant") and img.dtype not in (torch.float32, torch.float64):
            # Here we temporarily cast input tensor to float
            # until pytorch issue is resolved :
            # https://github.com/pytorch/pytorch/issues/40763
            need_cast = True
            img = img.to(torch.float32)

        if padding_mode in ("reflect", "replicate"):
            img = torch_pad(img, p, mode=padding_mode)
        else:
            img = torch_pad(img, p, mode=padding_mode, value=float(fill))

        if need_squeeze:
            img = img.squeeze(dim=0)

        if need_cast:
            img = img.to(out_dtype)

        return img

    def resize(
        img: Tensor,
        size: List[int],
        interpolation: str = "bilinear",
        antialias: Optional[bool] = True,
    ) -> Tensor:
        _assert_image_tensor(img)

        if isinstance(size, tuple):
            size = list(size)

        if antialias is None:
            antialias = False

        if antialias and interpolation not in ["bilinear", "bicubic"]:
            # We manually set it to False to avoid an error downstream in interpolate()
            # This behaviour is documented: the parameter is irrelevant for modes
            # that are not bilinear or bicubic. We used to raise an error here, but
            # now we don't as True is the default.
            antialias = False

        img, need_cast, need_squeeze, out_dtype = _cast_squeeze_in(img, [torch.float32, torch.float64])

        # Define align_corners to avoid warnings
        align_corners = False if interpolation in ["bilinear", "bicubic"] else None

        img = interpolate(img, size=size, mode=interpolation, align_corners=align_corners, antialias=antialias)

        if interpolation == "bicubic" and out_dtype == torch.uint8:
            img = img.clamp(min=0, max=255)

        img = _cast_squeeze_out(img, need_cast=need_cast, need_squeeze=need_squeeze, out_dtype=out_dtype)

        return img

    def _assert_grid_transform_inputs(
        img: Tensor,
        matrix: Optional[List[float]],
        interpolation: str,
        fill: Optional[Union[int, float, List[float]]],
        supported_interpolation_modes: List[str],
        coeffs: Optional[List[float]] = None,
    ) -> None:

        if not (isinstance(img, torch.Tensor)):
            raise TypeError("Input img should be Tensor")

        _assert_image_tensor(img)

        if matrix is not None and not isinstance(matrix, list):
            raise TypeError("Argument matrix should be a list")

        if matrix is not None and len(matrix) != 6:
            raise ValueError("Argument matrix should have 6 float values")

        if coeffs is not None and len(coeffs) != 8:
            raise ValueError("Argument coeffs should have 8 float values")

        if fill is not None and not isinstance(fill, (int, float, tuple, list)):
            warnings.warn("Argument fill should be either int, float, tuple or list")

        # Check fill
        num_channels = get_dimensions(img)[0]
        if fill is not None and isinstance(fill, (tuple, list)) and len(fill) > 1 and len(fill) != num_channels:
            msg = (
                "The number of elements in 'fill' cannot broadcast to match the number of "
                "channels of the image ({} != {})"
            )
            raise ValueError(msg.format(len(fill), num_channels))

        if interpolation not in supported_interpolation_modes:
            raise ValueError(f"Interpolation mode '{interpolation}' is unsupported with Tensor input")

    def _cast_squeeze_in(img: Tensor, req_dtypes: List[torch.dtype]) -> Tuple[Tensor, bool, bool, torch.dtype]:
        need_squeeze = False
        # make image NCHW
        if img.ndim < 4:
            img = img.unsqueeze(dim=0)
            need_squeeze = True

        out_dtype = img.dtype
        need_cast = False
        if out_dtype not in req_dtypes:
            need_cast = True
            req_dtype = req_dtypes[0]
            img = img.to(req_dtype)
        return img, need_cast, need_squeeze, out_dtype

    def _cast_squeeze_out(img: Tensor, need_cast: bool, need_squeeze: bool, out_dtype: torch.dtype) -> Tensor:
        if need_squeeze:
            img = img.squeeze(dim=0)

        if need_cast:
            if out_dtype in (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64):
                # it is better to round before cast
                img = torch.round(img)
            img = img.to(out_dtype)

        return img

    def _apply_grid_transform(
        img: Tensor, grid: Tensor, mode: str, fill: Optional[Union[int, float, List[float]]]
    ) -> Tensor:

        img, need_cast, need_squeeze, out_dtype = _cast_squeeze_in(img, [grid.dtype])

        if img.shape[0] > 1:
            # Apply same grid to a batch of images
            grid = grid.expand(img.shape[0], grid.shape[1], grid.shape[2], grid.shape[3])

        # Append a dummy mask for customized fill colors, should be faster than grid_sample() twice
        if fill is not None:
            mask = torch.ones((img.shape[0], 1, img.shape[2], img.shape[3]), dtype=img.dtype, device=img.device)
            img = torch.cat((img, mask), dim=1)

        img = grid_sample(img, grid, mode=mode, padding_mode="zeros", align_corners=False)

        # Fill with required color
        if fill is not None:
            mask = img[:, -1:, :, :]  # N * 1 * H * W
            img = img[:, :-1, :, :]  # N * C * H * W
            mask = mask.expand_as(img)
            fill_list, len_fill = (fill, len(fill)) if isinstance(fill, (tuple, list)) else ([float(fill)], 1)
            fill_img = torch.tensor(fill_list, dtype=img.dtype, device=img.device).view(1, len_fill, 1, 1).expand_as(img)
            if mode == "nearest":
                mask = mask < 0.5
                img[mask] = fill_img[mask]
            else:  # 'bilinear'
                img = img * mask + (1.0 - mask) * fill_img

        img = _cast_squeeze_out(img, need_cast, need_squeeze, out_dtype)
        return img

    def _gen_affine_grid(
        theta: Tensor,
        w: int,
        h: int,
        ow: int,
        oh: int,
    ) -> Tensor:
        # https://github.com/pytorch/pytorch/blob/74b65c32be68b15dc7c9e8bb62459efbfbde33d8/aten/src/ATen/native/
        # AffineGridGenerator.cpp#L18
        # Difference with AffineGridGenerator is that:
        # 1) we normalize grid values after applying theta
        # 2) we can normalize by other image size, such that it covers "extend" option like in PIL.Image.rotate

        d = 0.5
        base_grid = torch.empty(1, oh, ow, 3, dtype=theta.dtype, device=theta.device)
        x_grid = torch.linspace(-ow * 0.5 + d, ow * 0.5 + d - 1, steps=ow, device=theta.device)
        base_grid[..., 0].copy_(x_grid)
        y_grid = torch.linspace(-oh * 0.5 + d, oh * 0.5 + d - 1, steps=oh, device=theta.device).unsqueeze_(-1)
        base_grid[..., 1].copy_(y_grid)
        base_grid[..., 2].fill_(1)

        rescaled_theta = theta.transpose(1, 2) / torch.tensor([0.5 * w, 0.5 * h], dtype=theta.dtype, device=theta.device)
        output_grid = base_grid.view(1, oh * ow, 3).bmm(rescaled_theta)
        return output_grid.view(1, oh, ow, 2)

    def affine(
        img: Tensor,
        matrix: List[float],
        interpolation: str = "nearest",
        fill: Optional[Union[int, float, List[float]]] = None,
    ) -> Tensor:
        _assert_grid_transform_inputs(img, matrix, interpolation, fill, ["nearest", "bilinear"])

        dtype = img.dtype if torch.is_floating_point(img) else torch.float32
        theta = torch.tensor(matrix, dtype=dtype, device=img.device).reshape(1, 2, 3)
        shape = img.shape
        # grid will be generated on the same device as theta and img
        grid = _gen_affine_grid(theta, w=shape[-1], h=shape[-2], ow=shape[-1], oh=shape[-2])
        return _apply_grid_transform(img, grid, interpolation, fill=fill)

    def _compute_affine_output_size(matrix: List[float], w: int, h: int) -> Tuple[int, int]:

        # Inspired of PIL implementation:
        # https://github.com/python-pillow/Pillow/blob/11de3318867e4398057373ee9f12dcb33db7335c/src/PIL/Image.py#L2054

        # pts are Top-Left, Top-Right, Bottom-Left, Bottom-Right points.
        # Points are shifted due to affine matrix torch convention about
        # the center point. Center is (0, 0) for image center pivot point (w * 0.5, h * 0.5)
        pts = torch.tensor(
            [
                [-0.5 * w, -0.5 * h, 1.0],
                [-0.5 * w, 0.5 * h, 1.0],
                [0.5 * w, 0.5 * h, 1.0],
                [0.5 * w, -0.5 * h, 1.0],
            ]
        )
        theta = torch.tensor(matrix, dtype=torch.float).view(2, 3)
        new_pts = torch.matmul(pts, theta.T)
        min_vals, _ = new_pts.min(dim=0)
        max_vals, _ = new_pts.max(dim=0)

        # shift points to [0, w] and [0, h] interval to match PIL results
        min_vals += torch.tensor((w * 0.5, h * 0.5))
        max_vals += torch.tensor((w * 0.5, h * 0.5))

        # Truncate precision to 1e-4 to avoid ceil of Xe-15 to 1.0
        tol = 1e-4
        cmax = torch.ceil((max_vals / tol).trunc_() * tol)
        cmin = torch.floor((min_vals / tol).trunc_() * tol)
        size = cmax - cmin
        return int(size[0]), int(size[1])  # w, h

    def rotate(
        img: Tensor,
        matrix: List[float],
        interpolation: str = "nearest",
        expand: bool = False,
        fill: Optional[Union[int, float, List[float]]] = None,
    ) -> Tensor:
        _assert_grid_transform_inputs(img, matrix, interpolation, fill, ["nearest", "bilinear"])
        w, h = img.shape[-1], img.shape[-2]
        ow, oh = _compute_affine_output_size(matrix, w, h) if expand else (w, h)
        dtype = img.dtype if torch.is_floating_point(img) else torch.float32
        theta = torch.tensor(matrix, dtype=dtype, device=img.device).reshape(1, 2, 3)
        # grid will be generated on the same device as theta and img
        grid = _gen_affine_grid(theta, w=w, h=h, ow=ow, oh=oh)

        return _apply_grid_transform(img, grid, interpolation, fill=fill)

    def _get_gaussian_kernel1d(kernel_size: int, sigma: float, dtype: torch.dtype, device: torch.device) -> Tensor:
        ksize_half = (kernel_size - 1) * 0.5

        x = torch.linspace(-ksize_half, ksize_half, steps=kernel_size, dtype=dtype, device=device)
        pdf = torch.exp(-0.5 * (x / sigma).pow(2))
        kernel1d = pdf / pdf.sum()

        return kernel1d

    def _get_gaussian_kernel2d(
        kernel_size: List[int], sigma: List[float], dtype: torch.dtype, device: torch.device
    ) -> Tensor:
        kernel1d_x = _get_gaussian_kernel1d(kernel_size[0], sigma[0], dtype, device)
        kernel1d_y = _get_gaussian_kernel1d(kernel_size[1], sigma[1], dtype, device)
        kernel2d = torch.mm(kernel1d_y[:, None], kernel1d_x[None, :])
        return kernel2d

    def gaussian_blur(img: Tensor, kernel_size: List[int], sigma: List[float]) -> Tensor:
        if not (isinstance(img, torch.Tensor)):
            raise TypeError(f"img should be Tensor. Got {type(img)}")

        _assert_image_tensor(img)

        dtype = img.dtype if torch.is_floating_point(img) else torch.float32
        kernel = _get_gaussian_kernel2d(kernel_size, sigma, dtype=dtype, device=img.device)
        kernel = kernel.expand(img.shape[-3], 1, kernel.shape[0], kernel.shape[1])

        img, need_cast, need_squeeze, out_dtype = _cast_squeeze_in(img, [kernel.dtype])

        # padding = (left, right, top, bottom)
        padding = [kernel_size[0] // 2, kernel_size[0] // 2, kernel_size[1] // 2, kernel_size[1] // 2]
        img = torch_pad(img, padding, mode="reflect")
        img = conv2d(img, kernel, groups=img.shape[-3])

        img = _cast_squeeze_out(img, need_cast, need_squeeze, out_dtype)
        return img

    def invert(img: Tensor) -> Tensor:

        _assert_image_tensor(img)

        if img.ndim < 3:
            raise TypeError(f"Input image tensor should have at least 3 dimensions, but found {img.ndim}")

        _assert_channels(img, [1, 3])

        return _max_value(img.dtype) - img

    def posterize(img: Tensor, bits: int) -> Tensor:

        _assert_image_tensor(img)

        if img.ndim < 3:
            raise TypeError(f"Input image tensor should have at least 3 dimensions, but found {img.ndim}")
        if img.dtype != torch.uint8:
            raise TypeError(f"Only torch.uint8 image tensors are supported, but found {img.dtype}")

        _assert_channels(img, [1, 3])
        mask = -int(2 ** (8 - bits))  # JIT-friendly for: ~(2 ** (8 - bits) - 1)
        return img & mask

    def solarize(img: Tensor, threshold: float) -> Tensor:

        _assert_image_tensor(img)

        if img.ndim < 3:
            raise TypeError(f"Input image tensor should have at least 3 dimensions, but found {img.ndim}")

        _assert_channels(img, [1, 3])

        if threshold > _max_value(img.dtype):
            raise TypeError("Threshold should be less than bound of img.")

        inverted_img = invert(img)
        return torch.where(img >= threshold, inverted_img, img)

    def autocontrast(img: Tensor) -> Tensor:

        _assert_image_tensor(img)

        if img.ndim < 3:
            raise TypeError(f"Input image tensor should have at least 3 dimensions, but found {img.ndim}")

        _assert_channels(img, [1, 3])

        bound = _max_value(img.dtype)
        dtype = img.dtype if torch.is_floating_point(img) else torch.float32

        minimum = img.amin(dim=(-2, -1), keepdim=True).to(dtype)
        maximum = img.amax(dim=(-2, -1), keepdim=True).to(dtype)
        scale = bound / (maximum - minimum)
        eq_idxs = torch.isfinite(scale).logical_not()
        minimum[eq_idxs] = 0
        scale[eq_idxs] = 1

        return ((img - minimum) * scale).clamp(0, bound).to(img.dtype)

    def _scale_channel(img_chan: Tensor) -> Tensor:
        # TODO: we should expect bincount to always be faster than histc, but this
        # isn't always the case. Once
        # https://github.com/pytorch/pytorch/issues/53194 is fixed, remove the if
        # block and only use bincount.
        if img_chan.is_cuda:
            hist = torch.histc(img_chan.to(torch.float32), bins=256, min=0, max=255)
        else:
            hist = torch.bincount(img_chan.reshape(-1), minlength=256)

        nonzero_hist = hist[hist != 0]
        step = torch.div(nonzero_hist[:-1].sum(), 255, rounding_mode="floor")
        if step == 0:
            return img_chan

        lut = torch.div(torch.cumsum(hist, 0) + torch.div(step, 2, rounding_mode="floor"), step, rounding_mode="floor")
        lut = torch.nn.functional.pad(lut, [1, 0])[:-1].clamp(0, 255)

        return lut[img_chan.to(torch.int64)].to(torch.uint8)

    def _equalize_single_image(img: Tensor) -> Tensor:
        return torch.stack([_scale_channel(img[c]) for c in range(img.size(0))])

    def equalize(img: Tensor) -> Tensor:

        _assert_image_tensor(img)

        if not (3 <= img.ndim <= 4):
            raise TypeError(f"Input image tensor should have 3 or 4 dimensions, but found {img.ndim}")
        if img.dtype != torch.uint8:
            raise TypeError(f"Only torch.uint8 image tensors are supported, but found {img.dtype}")

        _assert_channels(img, [1, 3])

        if img.ndim == 3:
            return _equalize_single_image(img)

        return torch.stack([_equalize_single_image(x) for x in img])

    def normalize(tensor: Tensor, mean: List[float], std: List[float], inplace: bool = False) -> Tensor:
        _assert_image_tensor(tensor)

        if not tensor.is_floating_point():
            raise TypeError(f"Input tensor should be a float tensor. Got {tensor.dtype}.")

        if tensor.ndim < 3:
            raise ValueError(
                f"Expected tensor to be a tensor image of size (..., C, H, W). Got tensor.size() = {tensor.size()}"
            )

        if not inplace:
            tensor = tensor.clone()

        dtype = tensor.dtype
        mean = torch.as_tensor(mean, dtype=dtype, device=tensor.device)
        std = torch.as_tensor(std, dtype=dtype, device=tensor.device)
        if (std == 0).any():
            raise ValueError(f"std evaluated to zero after conversion to {dtype}, leading to division by zero.")
        if mean.ndim == 1:
            mean = mean.view(-1, 1, 1)
        if std.ndim == 1:
            std = std.view(-1, 1, 1)
        return tensor.sub_(mean).div_(std)

    def erase(img: Tensor, i: int, j: int, h: int, w: int, v: Tensor, inplace: bool = False) -> Tensor:
        _assert_image_tensor(img)

        if not inplace:
            img = img.clone()

        img[..., i : i + h, j : j + w] = v
        return img

    return SimpleNamespace(**{k: v for k, v in locals().items() if callable(v)})


# ======================================== ops/feature_pyramid_network.py, ops/poolers.py
def fpn_poolers_page(torch):
    nn = torch.nn
    F = torch.nn.functional
    Tensor = torch.Tensor
    from typing import Dict

    box_area = boxes_page(torch).box_area
    roi_align = roi_align_page(torch).roi_align

    class ExtraFPNBlock(nn.Module):
        def forward(
            self,
            results: List[Tensor],
            x: List[Tensor],
            names: List[str],
        ) -> Tuple[List[Tensor], List[str]]:
            pass

    class FeaturePyramidNetwork(nn.Module):
        def __init__(
            self,
            in_channels_list: List[int],
            out_channels: int,
            extra_blocks: Optional[ExtraFPNBlock] = None,
        ):
            super().__init__()
            self.inner_blocks = nn.ModuleList()
            self.layer_blocks = nn.ModuleList()
            for in_channels in in_channels_list:
                if in_channels == 0:
                    raise ValueError("in_channels=0 is currently not supported")
                inner_block_module = nn.Conv2d(in_channels, out_channels, 1)
                layer_block_module = nn.Conv2d(out_channels, out_channels, 3, padding=1)
                self.inner_blocks.append(inner_block_module)
                self.layer_blocks.append(layer_block_module)

            # initialize parameters now to avoid modifying the initialization of top_blocks
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_uniform_(m.weight, a=1)
                    nn.init.constant_(m.bias, 0)

            if extra_blocks is not None:
                assert isinstance(extra_blocks, ExtraFPNBlock)
            self.extra_blocks = extra_blocks

        def get_result_from_inner_blocks(self, x: Tensor, idx: int) -> Tensor:
            """
            This is equivalent to self.inner_blocks[idx](x),
            but torchscript doesn't support this yet
            """
            num_blocks = len(self.inner_blocks)
            if idx < 0:
                idx += num_blocks
            out = x
            for i, module in enumerate(self.inner_blocks):
                if i == idx:
                    out = module(x)
            return out

        def get_result_from_layer_blocks(self, x: Tensor, idx: int) -> Tensor:
            """
            This is equivalent to self.layer_blocks[idx](x),
            but torchscript doesn't support this yet
            """
            num_blocks = len(self.layer_blocks)
            if idx < 0:
                idx += num_blocks
            out = x
            for i, module in enumerate(self.layer_blocks):
                if i == idx:
                    out = module(x)
            return out

        def forward(self, x: Dict[str, Tensor]) -> Dict[str, Tensor]:
            # unpack OrderedDict into two lists for easier handling
            names = list(x.keys())
            x = list(x.values())

            last_inner = self.get_result_from_inner_blocks(x[-1], -1)
            results = []
            results.append(self.get_result_from_layer_blocks(last_inner, -1))

            for idx in range(len(x) - 2, -1, -1):
                inner_lateral = self.get_result_from_inner_blocks(x[idx], idx)
                feat_shape = inner_lateral.shape[-2:]
                inner_top_down = F.interpolate(last_inner, size=feat_shape, mode="nearest")
                last_inner = inner_lateral + inner_top_down
                results.insert(0, self.get_result_from_layer_blocks(last_inner, idx))

            if self.extra_blocks is not None:
                results, names = self.extra_blocks(results, x, names)

            # make it back an OrderedDict
            out = OrderedDict([(k, v) for k, v in zip(names, results)])

            return out

    class LastLevelMaxPool(ExtraFPNBlock):
        """
        Applies a max_pool2d on top of the last feature map
        """

        def forward(
            self,
            x: List[Tensor],
            y: List[Tensor],
            names: List[str],
        ) -> Tuple[List[Tensor], List[str]]:
            names.append("pool")
            x.append(F.max_pool2d(x[-1], 1, 2, 0))
            return x, names

    # copying result_idx_in_level to a specific index in result[]
    # is not supported by ONNX tracing yet.
    # _onnx_merge_levels() is an implementation supported by ONNX
    # that merges the levels to the right indices
    def _onnx_merge_levels(levels: Tensor, unmerged_results: List[Tensor]) -> Tensor:
        first_result = unmerged_results[0]
        dtype, device = first_result.dtype, first_result.device
        res = torch.zeros(
            (levels.size(0), first_result.size(1), first_result.size(2), first_result.size(3)), dtype=dtype, device=device
        )
        for level in range(len(unmerged_results)):
            index = (levels == level).nonzero().view(-1, 1, 1, 1)
            index = index.expand(
                index.size(0),
                unmerged_results[level].size(1),
                unmerged_results[level].size(2),
                unmerged_results[level].size(3),
            )
            res = res.scatter(0, index, unmerged_results[level])
        return res

    def initLevelMapper(
        k_min: int,
        k_max: int,
        canonical_scale: int = 224,
        canonical_level: int = 4,
        eps: float = 1e-6,
    ):
        return LevelMapper(k_min, k_max, canonical_scale, canonical_level, eps)

    class LevelMapper:
        """Determine which FPN level each RoI in a set of RoIs should map to based
        on the heuristic in the FPN paper.
        """

        def __init__(
            self,
            k_min: int,
            k_max: int,
            canonical_scale: int = 224,
            canonical_level: int = 4,
            eps: float = 1e-6,
        ):
            self.k_min = k_min
            self.k_max = k_max
            self.s0 = canonical_scale
            self.lvl0 = canonical_level
            self.eps = eps

        def __call__(self, boxlists: List[Tensor]) -> Tensor:
            # Compute level ids
            s = torch.sqrt(torch.cat([box_area(boxlist) for boxlist in boxlists]))

            # Eqn.(1) in FPN paper
            target_lvls = torch.floor(self.lvl0 + torch.log2(s / self.s0) + torch.tensor(self.eps, dtype=s.dtype))
            target_lvls = torch.clamp(target_lvls, min=self.k_min, max=self.k_max)
            return (target_lvls.to(torch.int64) - self.k_min).to(torch.int64)

    class MultiScaleRoIAlign(nn.Module):
        def __init__(
            self,
            featmap_names: List[str],
            output_size: List[int],
            sampling_ratio: int,
            canonical_scale: int = 224,
            canonical_level: int = 4,
        ):
            super().__init__()
            if isinstance(output_size, int):
                output_size = (output_size, output_size)
            self.featmap_names = featmap_names
            self.sampling_ratio = sampling_ratio
            self.output_size = tuple(output_size)
            self.scales = None
            self.map_levels = None
            self.canonical_scale = canonical_scale
            self.canonical_level = canonical_level

        def convert_to_roi_format(self, boxes: List[Tensor]) -> Tensor:
            concat_boxes = torch.cat(boxes, dim=0)
            device, dtype = concat_boxes.device, concat_boxes.dtype
            ids = torch.cat(
                [
                    torch.full_like(b[:, :1], i, dtype=dtype, layout=torch.strided, device=device)
                    for i, b in enumerate(boxes)
                ],
                dim=0,
            )
            rois = torch.cat([ids, concat_boxes], dim=1)
            return rois

        def infer_scale(self, feature: Tensor, original_size: List[int]) -> float:
            # assumption: the scale is of the form 2 ** (-k), with k integer
            size = feature.shape[-2:]
            possible_scales: List[float] = []
            for s1, s2 in zip(size, original_size):
                approx_scale = float(s1) / float(s2)
                scale = 2 ** float(torch.tensor(approx_scale).log2().round())
                possible_scales.append(scale)
            assert possible_scales[0] == possible_scales[1]
            return possible_scales[0]

        def setup_scales(
            self,
            features: List[Tensor],
            image_shapes: List[Tuple[int, int]],
        ) -> None:
            assert len(image_shapes) != 0
            max_x = 0
            max_y = 0
            for shape in image_shapes:
                max_x = max(shape[0], max_x)
                max_y = max(shape[1], max_y)
            original_input_shape = (max_x, max_y)

            scales = [self.infer_scale(feat, original_input_shape) for feat in features]
            # get the levels in the feature map by leveraging the fact that the network always
            # downsamples by a factor of 2 at each level.
            lvl_min = -torch.log2(torch.tensor(scales[0], dtype=torch.float32)).item()
            lvl_max = -torch.log2(torch.tensor(scales[-1], dtype=torch.float32)).item()
            self.scales = scales
            self.map_levels = initLevelMapper(
                int(lvl_min), int(lvl_max), canonical_scale=self.canonical_scale, canonical_level=self.canonical_level
            )

        def forward(
            self,
            x: Dict[str, Tensor],
            boxes: List[Tensor],
            image_shapes: List[Tuple[int, int]],
            onnx_merge: bool = False,
        ) -> Tensor:
            x_filtered = []
            for k, v in x.items():
                if k in self.featmap_names:
                    x_filtered.append(v)
            num_levels = len(x_filtered)
            rois = self.convert_to_roi_format(boxes)
            if self.scales is None:
                self.setup_scales(x_filtered, image_shapes)

            scales = self.scales
            assert scales is not None

            if num_levels == 1:
                return roi_align(
                    x_filtered[0], rois, output_size=self.output_size, spatial_scale=scales[0],
                    sampling_ratio=self.sampling_ratio
                )

            mapper = self.map_levels
            assert mapper is not None

            levels = mapper(boxes)

            num_rois = len(rois)
            num_channels = x_filtered[0].shape[1]

            dtype, device = x_filtered[0].dtype, x_filtered[0].device
            result = torch.zeros(
                (
                    num_rois,
                    num_channels,
                )
                + self.output_size,
                dtype=dtype,
                device=device,
            )

            tracing_results = []
            for level, (per_level_feature, scale) in enumerate(zip(x_filtered, scales)):
                idx_in_level = torch.nonzero(levels == level).squeeze(1)
                rois_per_level = rois[idx_in_level]

                result_idx_in_level = roi_align(
                    per_level_feature, rois_per_level, output_size=self.output_size, spatial_scale=scale,
                    sampling_ratio=self.sampling_ratio
                )

                if onnx_merge:  # torchvision._is_tracing()
                    tracing_results.append(result_idx_in_level.to(dtype))
                else:
                    result[idx_in_level] = result_idx_in_level.to(result.dtype)

            if onnx_merge:
                result = _onnx_merge_levels(levels, tracing_results)

            return result

    return SimpleNamespace(**{k: v for k, v in locals().items() if callable(v)})


# ====================================================================== models/swin_transformer.py
def swin_page(torch):
    nn = torch.nn
    F = torch.nn.functional
    Tensor = torch.Tensor
    from typing import Any, Callable, Dict

    MLP = misc_page(torch).MLP
    StochasticDepth = losses_page(torch).StochasticDepth

    class Permute(torch.nn.Module):
        # ops/misc.py
        def __init__(self, dims: List[int]):
            super().__init__()
            self.dims = dims

        def forward(self, x: Tensor) -> Tensor:
            return torch.permute(x, self.dims)

    def _patch_merging_pad(x: torch.Tensor) -> torch.Tensor:
        H, W, _ = x.shape[-3:]
        x = F.pad(x, (0, 0, 0, W % 2, 0, H % 2))
        return x

    def _get_relative_position_bias(
        relative_position_bias_table: torch.Tensor, relative_position_index: torch.Tensor, window_size: List[int]
    ) -> torch.Tensor:
        N = window_size[0] * window_size[1]
        relative_position_bias = relative_position_bias_table[relative_position_index]  # type: ignore[index]
        relative_position_bias = relative_position_bias.view(N, N, -1)
        relative_position_bias = relative_position_bias.permute(2, 0, 1).contiguous().unsqueeze(0)
        return relative_position_bias

    class PatchMerging(nn.Module):
        def __init__(self, dim: int, norm_layer: Callable[..., nn.Module] = nn.LayerNorm):
            super().__init__()
            self.dim = dim
            self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)
            self.norm = norm_layer(4 * dim)

        def forward(self, x: Tensor):
            x = _patch_merging_pad(x)

            x0 = x[..., 0::2, 0::2, :]  # ... H/2 W/2 C
            x1 = x[..., 1::2, 0::2, :]  # ... H/2 W/2 C
            x2 = x[..., 0::2, 1::2, :]  # ... H/2 W/2 C
            x3 = x[..., 1::2, 1::2, :]  # ... H/2 W/2 C
            x = torch.cat([x0, x1, x2, x3], -1)  # ... H/2 W/2 4*C

            x = self.norm(x)
            x = self.reduction(x)  # ... H/2 W/2 2*C
            return x

    def shifted_window_attention(
        input: Tensor,
        qkv_weight: Tensor,
        proj_weight: Tensor,
        relative_position_bias: Tensor,
        window_size: List[int],
        num_heads: int,
        shift_size: List[int],
        attention_dropout: float = 0.0,
        dropout: float = 0.0,
        qkv_bias: Optional[Tensor] = None,
        proj_bias: Optional[Tensor] = None,
        v2_logit_scale: Optional[torch.Tensor] = None,
    ):
        B, H, W, C = input.shape
        # pad feature maps to multiples of window size
        pad_r = (window_size[1] - W % window_size[1]) % window_size[1]
        pad_b = (window_size[0] - H % window_size[0]) % window_size[0]
        x = F.pad(input, (0, 0, 0, pad_r, 0, pad_b))
        _, pad_H, pad_W, _ = x.shape

        # If window size is larger than feature size, there is no need to shift window
        if window_size[0] >= pad_H:
            shift_size[0] = 0
        if window_size[1] >= pad_W:
            shift_size[1] = 0

        # cyclic shift
        if sum(shift_size) > 0:
            x = torch.roll(x, shifts=(-shift_size[0], -shift_size[1]), dims=(1, 2))

        # partition windows
        num_windows = (pad_H // window_size[0]) * (pad_W // window_size[1])
        x = x.view(B, pad_H // window_size[0], window_size[0], pad_W // window_size[1], window_size[1], C)
        x = x.permute(0, 1, 3, 2, 4, 5).reshape(B * num_windows, window_size[0] * window_size[1], C)  # B*nW, Ws*Ws, C

        # multi-head attention
        if v2_logit_scale is not None and qkv_bias is not None:
            qkv_bias = qkv_bias.clone()
            length = qkv_bias.numel() // 3
            qkv_bias[length : 2 * length].zero_()
        qkv = F.linear(x, qkv_weight, qkv_bias)
        qkv = qkv.reshape(x.size(0), x.size(1), 3, num_heads, C // num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        if v2_logit_scale is not None:
            # cosine attention
            attn = F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1)
            v2_logit_scale = torch.clamp(v2_logit_scale, max=math.log(100.0)).exp()
            attn = attn * v2_logit_scale
        else:
            q = q * (C // num_heads) ** -0.5
            attn = q.matmul(k.transpose(-2, -1))
        # add relative position bias
        attn = attn + relative_position_bias

        if sum(shift_size) > 0:
            # generate attention mask
            attn_mask = x.new_zeros((pad_H, pad_W))
            h_slices = ((0, -window_size[0]), (-window_size[0], -shift_size[0]), (-shift_size[0], None))
            w_slices = ((0, -window_size[1]), (-window_size[1], -shift_size[1]), (-shift_size[1], None))
            count = 0
            for h in h_slices:
                for w in w_slices:
                    attn_mask[h[0] : h[1], w[0] : w[1]] = count
                    count += 1
            attn_mask = attn_mask.view(pad_H // window_size[0], window_size[0], pad_W // window_size[1], window_size[1])
            attn_mask = attn_mask.permute(0, 2, 1, 3).reshape(num_windows, window_size[0] * window_size[1])
            attn_mask = attn_mask.unsqueeze(1) - attn_mask.unsqueeze(2)
            attn_mask = attn_mask.masked_fill(attn_mask != 0, float(-100.0)).masked_fill(attn_mask == 0, float(0.0))
            attn = attn.view(x.size(0) // num_windows, num_windows, num_heads, x.size(1), x.size(1))
            attn = attn + attn_mask.unsqueeze(1).unsqueeze(0)
            attn = attn.view(-1, num_heads, x.size(1), x.size(1))

        attn = F.softmax(attn, dim=-1)
        attn = F.dropout(attn, p=attention_dropout)

        x = attn.matmul(v).transpose(1, 2).reshape(x.size(0), x.size(1), C)
        x = F.linear(x, proj_weight, proj_bias)
        x = F.dropout(x, p=dropout)

        # reverse windows
        x = x.view(B, pad_H // window_size[0], pad_W // window_size[1], window_size[0], window_size[1], C)
        x = x.permute(0, 1, 3, 2, 4, 5).reshape(B, pad_H, pad_W, C)

        # reverse cyclic shift
        if sum(shift_size) > 0:
            x = torch.roll(x, shifts=(shift_size[0], shift_size[1]), dims=(1, 2))

        # unpad features
        x = x[:, :H, :W, :].contiguous()
        return x

    class ShiftedWindowAttention(nn.Module):
        def __init__(
            self,
            dim: int,
            window_size: List[int],
            shift_size: List[int],
            num_heads: int,
            qkv_bias: bool = True,
            proj_bias: bool = True,
            attention_dropout: float = 0.0,
            dropout: float = 0.0,
        ):
            super().__init__()
            if len(window_size) != 2 or len(shift_size) != 2:
                raise ValueError("window_size and shift_size must be of length 2")
            self.window_size = window_size
            self.shift_size = shift_size
            self.num_heads = num_heads
            self.attention_dropout = attention_dropout
            self.dropout = dropout

            self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
            self.proj = nn.Linear(dim, dim, bias=proj_bias)

            self.define_relative_coords()

        def define_relative_coords(self):
            # define a parameter table of relative position bias
            self.relative_position_bias_table = nn.Parameter(
                torch.zeros((2 * self.window_size[0] - 1) * (2 * self.window_size[1] - 1), self.num_heads)
            )  # 2*Wh-1 * 2*Ww-1, nH

            # get pair-wise relative position index for each token inside the window
            coords_h = torch.arange(self.window_size[0])
            coords_w = torch.arange(self.window_size[1])
            coords = torch.stack(torch.meshgrid(coords_h, coords_w, indexing="ij"))  # 2, Wh, Ww
            coords_flatten = torch.flatten(coords, 1)  # 2, Wh*Ww
            relative_coords = coords_flatten[:, :, None] - coords_flatten[:, None, :]  # 2, Wh*Ww, Wh*Ww
            relative_coords = relative_coords.permute(1, 2, 0).contiguous()  # Wh*Ww, Wh*Ww, 2
            relative_coords[:, :, 0] += self.window_size[0] - 1  # shift to start from 0
            relative_coords[:, :, 1] += self.window_size[1] - 1
            relative_coords[:, :, 0] *= 2 * self.window_size[1] - 1
            relative_position_index = relative_coords.sum(-1).flatten()  # Wh*Ww*Wh*Ww
            self.register_buffer("relative_position_index", relative_position_index)

            nn.init.trunc_normal_(self.relative_position_bias_table, std=0.02)

        def get_relative_position_bias(self) -> torch.Tensor:
            return _get_relative_position_bias(
                self.relative_position_bias_table, self.relative_position_index, self.window_size  # type: ignore[arg-type]
            )

        def forward(self, x: Tensor):
            relative_position_bias = self.get_relative_position_bias()
            return shifted_window_attention(
                x,
                self.qkv.weight,
                self.proj.weight,
                relative_position_bias,
                self.window_size,
                self.num_heads,
                shift_size=self.shift_size,
                attention_dropout=self.attention_dropout,
                dropout=self.dropout,
                qkv_bias=self.qkv.bias,
                proj_bias=self.proj.bias,
            )

    class ShiftedWindowAttentionV2(ShiftedWindowAttention):
        def __init__(
            self,
            dim: int,
            window_size: List[int],
            shift_size: List[int],
            num_heads: int,
            qkv_bias: bool = True,
            proj_bias: bool = True,
            attention_dropout: float = 0.0,
            dropout: float = 0.0,
            pretrained_window_size: List[int] = [0, 0],
        ):
            self.pretrained_window_size = pretrained_window_size  # TODO: unsafe, need copy?
            super().__init__(
                dim,
                window_size,
                shift_size,
                num_heads,
                qkv_bias=qkv_bias,
                proj_bias=proj_bias,
                attention_dropout=attention_dropout,
                dropout=dropout,
            )

            self.v2_logit_scale = nn.Parameter(torch.log(10 * torch.ones((num_heads, 1, 1))))
            # mlp to generate continuous relative position bias
            self.cpb_mlp = nn.Sequential(
                nn.Linear(2, 512, bias=True), nn.ReLU(inplace=True), nn.Linear(512, num_heads, bias=False)
            )
            if qkv_bias:
                length = self.qkv.bias.numel() // 3
                self.qkv.bias[length : 2 * length].data.zero_()

        def define_relative_coords(self):
            # get relative_coords_table
            relative_coords_h = torch.arange(-(self.window_size[0] - 1), self.window_size[0], dtype=torch.float32)
            relative_coords_w = torch.arange(-(self.window_size[1] - 1), self.window_size[1], dtype=torch.float32)
            relative_coords_table = torch.stack(torch.meshgrid([relative_coords_h, relative_coords_w], indexing="ij"))
            relative_coords_table = relative_coords_table.permute(1, 2, 0).contiguous().unsqueeze(0)  # 1, 2*Wh-1, 2*Ww-1, 2
            if self.pretrained_window_size[0] > 0:
                relative_coords_table[:, :, :, 0] /= self.pretrained_window_size[0] - 1
                relative_coords_table[:, :, :, 1] /= self.pretrained_window_size[1] - 1
            else:
                relative_coords_table[:, :, :, 0] /= self.window_size[0] - 1
                relative_coords_table[:, :, :, 1] /= self.window_size[1] - 1
            relative_coords_table *= 8  # normalize to -8, 8
            relative_coords_table = (
                torch.sign(relative_coords_table) * torch.log2(torch.abs(relative_coords_table) + 1.0) / 3.0
            )

            self.register_buffer("relative_coords_table", relative_coords_table)

            # get pair-wise relative position index for each token inside the window
            coords_h = torch.arange(self.window_size[0])
            coords_w = torch.arange(self.window_size[1])
            coords = torch.stack(torch.meshgrid([coords_h, coords_w], indexing="ij"))  # 2, Wh, Ww
            coords_flatten = torch.flatten(coords, 1)  # 2, Wh*Ww
            relative_coords = coords_flatten[:, :, None] - coords_flatten[:, None, :]  # 2, Wh*Ww, Wh*Ww
            relative_coords = relative_coords.permute(1, 2, 0).contiguous()  # Wh*Ww, Wh*Ww, 2
            relative_coords[:, :, 0] += self.window_size[0] - 1  # shift to start from 0
            relative_coords[:, :, 1] += self.window_size[1] - 1
            relative_coords[:, :, 0] *= 2 * self.window_size[1] - 1
            relative_position_index = relative_coords.sum(-1).flatten()  # Wh*Ww*Wh*Ww
            self.register_buffer("relative_position_index", relative_position_index)

        def get_relative_position_bias(self) -> torch.Tensor:
            relative_position_bias = _get_relative_position_bias(
                self.cpb_mlp(self.relative_coords_table).view(-1, self.num_heads),
                self.relative_position_index,  # type: ignore[arg-type]
                self.window_size,
            )
            relative_position_bias = 16 * torch.sigmoid(relative_position_bias)
            return relative_position_bias

        def forward(self, x: Tensor):
            relative_position_bias = self.get_relative_position_bias()
            return shifted_window_attention(
                x,
                self.qkv.weight,
                self.proj.weight,
                relative_position_bias,
                self.window_size,
                self.num_heads,
                shift_size=self.shift_size,
                attention_dropout=self.attention_dropout,
                dropout=self.dropout,
                qkv_bias=self.qkv.bias,
                proj_bias=self.proj.bias,
                v2_logit_scale=self.v2_logit_scale,
            )

    class SwinTransformerBlock(nn.Module):
        def __init__(
            self,
            dim: int,
            num_heads: int,
            window_size: List[int],
            shift_size: List[int],
            mlp_ratio: float = 4.0,
            dropout: float = 0.0,
            attention_dropout: float = 0.0,
            stochastic_depth_prob: float = 0.0,
            norm_layer: Callable[..., nn.Module] = nn.LayerNorm,
            attn_layer: Callable[..., nn.Module] = ShiftedWindowAttention,
            **kwargs,
        ):
            super().__init__()

            self.norm1 = norm_layer(dim)
            self.attn = attn_layer(
                dim,
                window_size,
                shift_size,
                num_heads,
                attention_dropout=attention_dropout,
                dropout=dropout,
                **kwargs,
            )
            self.stochastic_depth = StochasticDepth(stochastic_depth_prob, "row")
            self.norm2 = norm_layer(dim)
            self.mlp = MLP(dim, [int(dim * mlp_ratio), dim], activation_layer=nn.GELU, inplace=None, dropout=dropout)

            for m in self.mlp.modules():
                if isinstance(m, nn.Linear):
                    nn.init.xavier_uniform_(m.weight)
                    if m.bias is not None:
                        nn.init.normal_(m.bias, std=1e-6)

        def forward(self, x: Tensor):
            x = x + self.stochastic_depth(self.attn(self.norm1(x)))
            x = x + self.stochastic_depth(self.mlp(self.norm2(x)))
            return x

    class SwinTransformerBlockV2(SwinTransformerBlock):
        def __init__(
            self,
            dim: int,
            num_heads: int,
            window_size: List[int],
            shift_size: List[int],
            mlp_ratio: float = 4.0,
            dropout: float = 0.0,
            attention_dropout: float = 0.0,
            stochastic_depth_prob: float = 0.0,
            norm_layer: Callable[..., nn.Module] = nn.LayerNorm,
            attn_layer: Callable[..., nn.Module] = ShiftedWindowAttentionV2,
            pretrained_window_size: int = 0,
        ):
            super().__init__(
                dim,
                num_heads,
                window_size,
                shift_size,
                mlp_ratio=mlp_ratio,
                dropout=dropout,
                attention_dropout=attention_dropout,
                stochastic_depth_prob=stochastic_depth_prob,
                norm_layer=norm_layer,
                attn_layer=attn_layer,
                pretrained_window_size=[pretrained_window_size, pretrained_window_size],
            )

        def forward(self, x: Tensor):
            x = x + self.stochastic_depth(self.norm1(self.attn(x)))
            x = x + self.stochastic_depth(self.norm2(self.mlp(x)))
            return x

    class SwinTransformer(nn.Module):
        def __init__(
            self,
            patch_size: List[int],
            embed_dim: int,
            depths: List[int],
            num_heads: List[int],
            window_size: List[int],
            mlp_ratio: float = 4.0,
            dropout: float = 0.0,
            attention_dropout: float = 0.0,
            stochastic_depth_prob: float = 0.0,
            num_classes: int = 1000,
            block: Optional[Callable[..., nn.Module]] = None,
            norm_layer: Optional[Callable[..., nn.Module]] = None,
            use_v2: bool = False,
            v2_pretrained_window_sizes: List[int] = [0, 0, 0, 0],
        ):
            super().__init__()
            self.num_classes = num_classes

            if block is None:
                block = SwinTransformerBlockV2 if use_v2 else SwinTransformerBlock

            if norm_layer is None:
                norm_layer = partial(nn.LayerNorm, eps=1e-5)

            layers: List[nn.Module] = []
            # split image into non-overlapping patches
            layers.append(
                nn.Sequential(
                    nn.Conv2d(
                        3, embed_dim, kernel_size=(patch_size[0], patch_size[1]), stride=(patch_size[0], patch_size[1])
                    ),
                    Permute([0, 2, 3, 1]),
                    norm_layer(embed_dim),
                )
            )

            total_stage_blocks = sum(depths)
            stage_block_id = 0
            # build SwinTransformer blocks
            for i_stage in range(len(depths)):
                stage: List[nn.Module] = []
                dim = embed_dim * 2**i_stage
                kwargs: Dict[str, Any] = {}
                if use_v2:
                    kwargs["pretrained_window_size"] = v2_pretrained_window_sizes[i_stage]
                for i_layer in range(depths[i_stage]):
                    # adjust stochastic depth probability based on the depth of the stage block
                    sd_prob = stochastic_depth_prob * float(stage_block_id) / (total_stage_blocks - 1)
                    stage.append(
                        block(
                            dim,
                            num_heads[i_stage],
                            window_size=window_size,
                            shift_size=[0 if i_layer % 2 == 0 else w // 2 for w in window_size],
                            mlp_ratio=mlp_ratio,
                            dropout=dropout,
                            attention_dropout=attention_dropout,
                            stochastic_depth_prob=sd_prob,
                            norm_layer=norm_layer,
                            **kwargs,
                        )
                    )
                    stage_block_id += 1
                layers.append(nn.Sequential(*stage))
                # add patch merging layer
                if i_stage < (len(depths) - 1):
                    layers.append(PatchMerging(dim, norm_layer))
            self.features = nn.Sequential(*layers)

            num_features = embed_dim * 2 ** (len(depths) - 1)
            self.norm = norm_layer(num_features)
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.head = nn.Linear(num_features, num_classes)

            for m in self.modules():
                if isinstance(m, nn.Linear):
                    nn.init.trunc_normal_(m.weight, std=0.02)
                    if m.bias is not None:
                        nn.init.zeros_(m.bias)

        def forward(self, x):
            x = self.features(x)
            x = self.norm(x)
            x = x.permute(0, 3, 1, 2)
            x = self.avgpool(x)
            x = torch.flatten(x, 1)
            x = self.head(x)
            return x

    return SimpleNamespace(**{k: v for k, v in locals().items() if callable(v)})


# ====================================================================== models/vision_transformer.py
def vit_page(torch):
    nn = torch.nn
    from typing import Callable, NamedTuple

    MLP = misc_page(torch).MLP
    Conv2dNormActivation = misc_page(torch).Conv2dNormActivation

    class ConvStemConfig(NamedTuple):
        out_channels: int
        kernel_size: int
        stride: int
        norm_layer: Callable[..., nn.Module] = nn.BatchNorm2d
        activation_layer: Callable[..., nn.Module] = nn.ReLU

    class MLPBlock(MLP):
        """Transformer MLP block."""

        _version = 2

        def __init__(self, in_dim: int, mlp_dim: int, dropout: float):
            super().__init__(in_dim, [mlp_dim, in_dim], activation_layer=nn.GELU, inplace=None, dropout=dropout)

            for m in self.modules():
                if isinstance(m, nn.Linear):
                    nn.init.xavier_uniform_(m.weight)
                    if m.bias is not None:
                        nn.init.normal_(m.bias, std=1e-6)

        def _load_from_state_dict(
            self,
            state_dict,
            prefix,
            local_metadata,
            strict,
            missing_keys,
            unexpected_keys,
            error_msgs,
        ):
            version = local_metadata.get("version", None)

            if version is None or version < 2:
                # Replacing legacy MLPBlock with MLP. See https://github.com/pytorch/vision/pull/6053
                for i in range(2):
                    for type in ["weight", "bias"]:
                        old_key = f"{prefix}linear_{i+1}.{type}"
                        new_key = f"{prefix}{3*i}.{type}"
                        if old_key in state_dict:
                            state_dict[new_key] = state_dict.pop(old_key)

            super()._load_from_state_dict(
                state_dict,
                prefix,
                local_metadata,
                strict,
                missing_keys,
                unexpected_keys,
                error_msgs,
            )

    class EncoderBlock(nn.Module):
        """Transformer encoder block."""

        def __init__(
            self,
            num_heads: int,
            hidden_dim: int,
            mlp_dim: int,
            dropout: float,
            attention_dropout: float,
            norm_layer: Callable[..., torch.nn.Module] = partial(nn.LayerNorm, eps=1e-6),
        ):
            super().__init__()
            self.num_heads = num_heads

            # Attention block
            self.ln_1 = norm_layer(hidden_dim)
            self.self_attention = nn.MultiheadAttention(hidden_dim, num_heads, dropout=attention_dropout, batch_first=True)
            self.dropout = nn.Dropout(dropout)

            # MLP block
            self.ln_2 = norm_layer(hidden_dim)
            self.mlp = MLPBlock(hidden_dim, mlp_dim, dropout)

        def forward(self, input: torch.Tensor):
            torch._assert(input.dim() == 3, f"Expected (batch_size, seq_length, hidden_dim) got {input.shape}")
            x = self.ln_1(input)
            x, _ = self.self_attention(query=x, key=x, value=x, need_weights=False)
            x = self.dropout(x)
            x = x + input

            y = self.ln_2(x)
            y = self.mlp(y)
            return x + y

    class Encoder(nn.Module):
        """Transformer Model Encoder for sequence to sequence translation."""

        def __init__(
            self,
            seq_length: int,
            num_layers: int,
            num_heads: int,
            hidden_dim: int,
            mlp_dim: int,
            dropout: float,
            attention_dropout: float,
            norm_layer: Callable[..., torch.nn.Module] = partial(nn.LayerNorm, eps=1e-6),
        ):
            super().__init__()
            # Note that batch_size is on the first dim because
            # we have batch_first=True in nn.MultiAttention() by default
            self.pos_embedding = nn.Parameter(torch.empty(1, seq_length, hidden_dim).normal_(std=0.02))  # from BERT
            self.dropout = nn.Dropout(dropout)
            layers: OrderedDict = OrderedDict()
            for i in range(num_layers):
                layers[f"encoder_layer_{i}"] = EncoderBlock(
                    num_heads,
                    hidden_dim,
                    mlp_dim,
                    dropout,
                    attention_dropout,
                    norm_layer,
                )
            self.layers = nn.Sequential(layers)
            self.ln = norm_layer(hidden_dim)

        def forward(self, input: torch.Tensor):
            torch._assert(input.dim() == 3, f"Expected (batch_size, seq_length, hidden_dim) got {input.shape}")
            input = input + self.pos_embedding
            return self.ln(self.layers(self.dropout(input)))

    class VisionTransformer(nn.Module):
        """Vision Transformer as per https://arxiv.org/abs/2010.11929."""

        def __init__(
            self,
            image_size: int,
            patch_size: int,
            num_layers: int,
            num_heads: int,
            hidden_dim: int,
            mlp_dim: int,
            dropout: float = 0.0,
            attention_dropout: float = 0.0,
            num_classes: int = 1000,
            representation_size: Optional[int] = None,
            norm_layer: Callable[..., torch.nn.Module] = partial(nn.LayerNorm, eps=1e-6),
            conv_stem_configs: Optional[List[ConvStemConfig]] = None,
        ):
            super().__init__()
            torch._assert(image_size % patch_size == 0, "Input shape indivisible by patch size!")
            self.image_size = image_size
            self.patch_size = patch_size
            self.hidden_dim = hidden_dim
            self.mlp_dim = mlp_dim
            self.attention_dropout = attention_dropout
            self.dropout = dropout
            self.num_classes = num_classes
            self.representation_size = representation_size
            self.norm_layer = norm_layer

            if conv_stem_configs is not None:
                # As per https://arxiv.org/abs/2106.14881
                seq_proj = nn.Sequential()
                prev_channels = 3
                for i, conv_stem_layer_config in enumerate(conv_stem_configs):
                    seq_proj.add_module(
                        f"conv_bn_relu_{i}",
                        Conv2dNormActivation(
                            in_channels=prev_channels,
                            out_channels=conv_stem_layer_config.out_channels,
                            kernel_size=conv_stem_layer_config.kernel_size,
                            stride=conv_stem_layer_config.stride,
                            norm_layer=conv_stem_layer_config.norm_layer,
                            activation_layer=conv_stem_layer_config.activation_layer,
                        ),
                    )
                    prev_channels = conv_stem_layer_config.out_channels
                seq_proj.add_module(
                    "conv_last", nn.Conv2d(in_channels=prev_channels, out_channels=hidden_dim, kernel_size=1)
                )
                self.conv_proj: nn.Module = seq_proj
            else:
                self.conv_proj = nn.Conv2d(
                    in_channels=3, out_channels=hidden_dim, kernel_size=patch_size, stride=patch_size
                )

            seq_length = (image_size // patch_size) ** 2

            # Add a class token
            self.class_token = nn.Parameter(torch.zeros(1, 1, hidden_dim))
            seq_length += 1

            self.encoder = Encoder(
                seq_length,
                num_layers,
                num_heads,
                hidden_dim,
                mlp_dim,
                dropout,
                attention_dropout,
                norm_layer,
            )
            self.seq_length = seq_length

            heads_layers: OrderedDict = OrderedDict()
            if representation_size is None:
                heads_layers["head"] = nn.Linear(hidden_dim, num_classes)
            else:
                heads_layers["pre_logits"] = nn.Linear(hidden_dim, representation_size)
                heads_layers["act"] = nn.Tanh()
                heads_layers["head"] = nn.Linear(representation_size, num_classes)

            self.heads = nn.Sequential(heads_layers)

            if isinstance(self.conv_proj, nn.Conv2d):
                # Init the patchify stem
                fan_in = self.conv_proj.in_channels * self.conv_proj.kernel_size[0] * self.conv_proj.kernel_size[1]
                nn.init.trunc_normal_(self.conv_proj.weight, std=math.sqrt(1 / fan_in))
                if self.conv_proj.bias is not None:
                    nn.init.zeros_(self.conv_proj.bias)
            elif self.conv_proj.conv_last is not None and isinstance(self.conv_proj.conv_last, nn.Conv2d):
                # Init the last 1x1 conv of the conv stem
                nn.init.normal_(
                    self.conv_proj.conv_last.weight, mean=0.0, std=math.sqrt(2.0 / self.conv_proj.conv_last.out_channels)
                )
                if self.conv_proj.conv_last.bias is not None:
                    nn.init.zeros_(self.conv_proj.conv_last.bias)

            if hasattr(self.heads, "pre_logits") and isinstance(self.heads.pre_logits, nn.Linear):
                fan_in = self.heads.pre_logits.in_features
                nn.init.trunc_normal_(self.heads.pre_logits.weight, std=math.sqrt(1 / fan_in))
                nn.init.zeros_(self.heads.pre_logits.bias)

            if isinstance(self.heads.head, nn.Linear):
                nn.init.zeros_(self.heads.head.weight)
                nn.init.zeros_(self.heads.head.bias)

        def _process_input(self, x: torch.Tensor) -> torch.Tensor:
            n, c, h, w = x.shape
            p = self.patch_size
            torch._assert(h == self.image_size, f"Wrong image height! Expected {self.image_size} but got {h}!")
            torch._assert(w == self.image_size, f"Wrong image width! Expected {self.image_size} but got {w}!")
            n_h = h // p
            n_w = w // p

            # (n, c, h, w) -> (n, hidden_dim, n_h, n_w)
            x = self.conv_proj(x)
            # (n, hidden_dim, n_h, n_w) -> (n, hidden_dim, (n_h * n_w))
            x = x.reshape(n, self.hidden_dim, n_h * n_w)

            # (n, hidden_dim, (n_h * n_w)) -> (n, (n_h * n_w), hidden_dim)
            # The self attention layer expects inputs in the format (N, S, E)
            # where S is the source sequence length, N is the batch size, E is the
            # embedding dimension
            x = x.permute(0, 2, 1)

            return x

        def forward(self, x: torch.Tensor):
            # Reshape and permute the input tensor
            x = self._process_input(x)
            n = x.shape[0]

            # Expand the class token to the full batch
            batch_class_token = self.class_token.expand(n, -1, -1)
            x = torch.cat([batch_class_token, x], dim=1)

            x = self.encoder(x)

            # Classifier "token" as used by standard language architectures
            x = x[:, 0]

            x = self.heads(x)

            return x

    def interpolate_embeddings(
        image_size: int,
        patch_size: int,
        model_state,
        interpolation_mode: str = "bicubic",
        reset_heads: bool = False,
    ):
        # Shape of pos_embedding is (1, seq_length, hidden_dim)
        pos_embedding = model_state["encoder.pos_embedding"]
        n, seq_length, hidden_dim = pos_embedding.shape
        if n != 1:
            raise ValueError(f"Unexpected position embedding shape: {pos_embedding.shape}")

        new_seq_length = (image_size // patch_size) ** 2 + 1

        # Need to interpolate the weights for the position embedding.
        # We do this by reshaping the positions embeddings to a 2d grid, performing
        # an interpolation in the (h, w) space and then reshaping back to a 1d grid.
        if new_seq_length != seq_length:
            # The class token embedding shouldn't be interpolated so we split it up.
            seq_length -= 1
            new_seq_length -= 1
            pos_embedding_token = pos_embedding[:, :1, :]
            pos_embedding_img = pos_embedding[:, 1:, :]

            # (1, seq_length, hidden_dim) -> (1, hidden_dim, seq_length)
            pos_embedding_img = pos_embedding_img.permute(0, 2, 1)
            seq_length_1d = int(math.sqrt(seq_length))
            if seq_length_1d * seq_length_1d != seq_length:
                raise ValueError(
                    f"seq_length is not a perfect square! Instead got seq_length_1d * seq_length_1d = {seq_length_1d * seq_length_1d } and seq_length = {seq_length}"
                )

            # (1, hidden_dim, seq_length) -> (1, hidden_dim, seq_l_1d, seq_l_1d)
            pos_embedding_img = pos_embedding_img.reshape(1, hidden_dim, seq_length_1d, seq_length_1d)
            new_seq_length_1d = image_size // patch_size

            # Perform interpolation.
            # (1, hidden_dim, seq_l_1d, seq_l_1d) -> (1, hidden_dim, new_seq_l_1d, new_seq_l_1d)
            new_pos_embedding_img = nn.functional.interpolate(
                pos_embedding_img,
                size=new_seq_length_1d,
                mode=interpolation_mode,
                align_corners=True,
            )

            # (1, hidden_dim, new_seq_l_1d, new_seq_l_1d) -> (1, hidden_dim, new_seq_length)
            new_pos_embedding_img = new_pos_embedding_img.reshape(1, hidden_dim, new_seq_length)

            # (1, hidden_dim, new_seq_length) -> (1, new_seq_length, hidden_dim)
            new_pos_embedding_img = new_pos_embedding_img.permute(0, 2, 1)
            new_pos_embedding = torch.cat([pos_embedding_token, new_pos_embedding_img], dim=1)

            model_state["encoder.pos_embedding"] = new_pos_embedding

            if reset_heads:
                model_state_copy = OrderedDict()
                for k, v in model_state.items():
                    if not k.startswith("heads"):
                        model_state_copy[k] = v
                model_state = model_state_copy

        return model_state

    return SimpleNamespace(**{k: v for k, v in locals().items() if callable(v)})


# ============================================ models/detection/transform.py, roi_heads.py (pieces)
def rcnn_page(torch):
    nn = torch.nn
    F = torch.nn.functional
    Tensor = torch.Tensor
    from typing import Dict

    roi_align = roi_align_page(torch).roi_align
    ImageList = detection_page(torch).ImageList

    # models/detection/_utils.py (this version's)
    def smooth_l1_loss(input, target, beta: float = 1.0 / 9, size_average: bool = True):
        """
        very similar to the smooth_l1_loss from pytorch, but with
        the extra beta parameter
        """
        n = torch.abs(input - target)
        cond = n < beta
        loss = torch.where(cond, 0.5 * n**2 / beta, n - 0.5 * beta)
        if size_average:
            return loss.mean()
        return loss.sum()

    # ---- transform.py
    def _resize_image_and_masks(image, self_min_size, self_max_size, target):
        # type: (Tensor, float, float, Optional[Dict[str, Tensor]]) -> Tuple[Tensor, Optional[Dict[str, Tensor]]]
        im_shape = torch.tensor(image.shape[-2:])
        min_size = float(torch.min(im_shape))
        max_size = float(torch.max(im_shape))
        scale_factor = self_min_size / min_size
        if max_size * scale_factor > self_max_size:
            scale_factor = self_max_size / max_size
        image = torch.nn.functional.interpolate(
            image[None], scale_factor=scale_factor, mode="bilinear", recompute_scale_factor=True, align_corners=False
        )[0]

        if target is None:
            return image, target

        if "masks" in target:
            mask = target["masks"]
            mask = F.interpolate(mask[:, None].float(), scale_factor=scale_factor, recompute_scale_factor=True)[
                :, 0
            ].byte()
            target["masks"] = mask
        return image, target

    class GeneralizedRCNNTransform(nn.Module):
        def __init__(self, min_size, max_size, image_mean, image_std):
            super(GeneralizedRCNNTransform, self).__init__()
            if not isinstance(min_size, (list, tuple)):
                min_size = (min_size,)
            self.min_size = min_size
            self.max_size = max_size
            self.image_mean = image_mean
            self.image_std = image_std

        def forward(
            self,
            images,  # type: List[Tensor]
            targets=None,  # type: Optional[List[Dict[str, Tensor]]]
        ):
            # type: (...) -> Tuple[ImageList, Optional[List[Dict[str, Tensor]]]]
            images = [img for img in images]
            if targets is not None:
                # make a copy of targets to avoid modifying it in-place
                # once torchscript supports dict comprehension
                # this can be simplified as as follows
                # targets = [{k: v for k,v in t.items()} for t in targets]
                targets_copy: List[Dict[str, Tensor]] = []
                for t in targets:
                    data: Dict[str, Tensor] = {}
                    for k, v in t.items():
                        data[k] = v
                    targets_copy.append(data)
                targets = targets_copy
            for i in range(len(images)):
                image = images[i]
                target_index = targets[i] if targets is not None else None

                if image.dim() != 3:
                    raise ValueError(
                        "images is expected to be a list of 3d tensors " "of shape [C, H, W], got {}".format(image.shape)
                    )
                image = self.normalize(image)
                image, target_index = self.resize(image, target_index)
                images[i] = image
                if targets is not None and target_index is not None:
                    targets[i] = target_index

            image_sizes = [img.shape[-2:] for img in images]
            images = self.batch_images(images)
            image_sizes_list: List[Tuple[int, int]] = []
            for image_size in image_sizes:
                assert len(image_size) == 2
                image_sizes_list.append((image_size[0], image_size[1]))

            image_list = ImageList(images, image_sizes_list)
            return image_list, targets

        def normalize(self, image):
            if not image.is_floating_point():
                raise TypeError(
                    f"Expected input images to be of floating type (in range [0, 1]), "
                    f"but found type {image.dtype} instead"
                )
            dtype, device = image.dtype, image.device
            mean = torch.as_tensor(self.image_mean, dtype=dtype, device=device)
            std = torch.as_tensor(self.image_std, dtype=dtype, device=device)
            return (image - mean[:, None, None]) / std[:, None, None]

        def torch_choice(self, k):
            # type: (List[int]) -> int
            """
            Implements `random.choice` via torch ops so it can be compiled with
            TorchScript. Remove if https://github.com/pytorch/pytorch/issues/25803
            is fixed.
            """
            index = int(torch.empty(1).uniform_(0.0, float(len(k))).item())
            return k[index]

        def resize(self, image, target):
            # type: (Tensor, Optional[Dict[str, Tensor]]) -> Tuple[Tensor, Optional[Dict[str, Tensor]]]
            h, w = image.shape[-2:]
            if self.training:
                size = float(self.torch_choice(self.min_size))
            else:
                # FIXME assume for now that testing uses the largest scale
                size = float(self.min_size[-1])
            image, target = _resize_image_and_masks(image, size, float(self.max_size), target)

            if target is None:
                return image, target

            bbox = target["boxes"]
            bbox = resize_boxes(bbox, (h, w), image.shape[-2:])
            target["boxes"] = bbox

            if "keypoints" in target:
                keypoints = target["keypoints"]
                keypoints = resize_keypoints(keypoints, (h, w), image.shape[-2:])
                target["keypoints"] = keypoints
            return image, target

        def max_by_axis(self, the_list):
            # type: (List[List[int]]) -> List[int]
            maxes = the_list[0]
            for sublist in the_list[1:]:
                for index, item in enumerate(sublist):
                    maxes[index] = max(maxes[index], item)
            return maxes

        def batch_images(self, images, size_divisible=32):
            # type: (List[Tensor], int) -> Tensor
            max_size = self.max_by_axis([list(img.shape) for img in images])
            stride = float(size_divisible)
            max_size = list(max_size)
            max_size[1] = int(math.ceil(float(max_size[1]) / stride) * stride)
            max_size[2] = int(math.ceil(float(max_size[2]) / stride) * stride)

            batch_shape = [len(images)] + max_size
            batched_imgs = images[0].new_full(batch_shape, 0)
            for img, pad_img in zip(images, batched_imgs):
                pad_img[: img.shape[0], : img.shape[1], : img.shape[2]].copy_(img)

            return batched_imgs

        def postprocess(
            self,
            result,  # type: List[Dict[str, Tensor]]
            image_shapes,  # type: List[Tuple[int, int]]
            original_image_sizes,  # type: List[Tuple[int, int]]
        ):
            # type: (...) -> List[Dict[str, Tensor]]
            if self.training:
                return result
            for i, (pred, im_s, o_im_s) in enumerate(zip(result, image_shapes, original_image_sizes)):
                boxes = pred["boxes"]
                boxes = resize_boxes(boxes, im_s, o_im_s)
                result[i]["boxes"] = boxes
                if "masks" in pred:
                    masks = pred["masks"]
                    masks = paste_masks_in_image(masks, boxes, o_im_s)
                    result[i]["masks"] = masks
                if "keypoints" in pred:
                    keypoints = pred["keypoints"]
                    keypoints = resize_keypoints(keypoints, im_s, o_im_s)
                    result[i]["keypoints"] = keypoints
            return result

        def __repr__(self):
            format_string = self.__class__.__name__ + "("
            _indent = "\n    "
            format_string += "{0}Normalize(mean={1}, std={2})".format(_indent, self.image_mean, self.image_std)
            format_string += "{0}Resize(min_size={1}, max_size={2}, mode='bilinear')".format(
                _indent, self.min_size, self.max_size
            )
            format_string += "\n)"
            return format_string

    def resize_keypoints(keypoints, original_size, new_size):
        # type: (Tensor, List[int], List[int]) -> Tensor
        ratios = [
            torch.tensor(s, dtype=torch.float32, device=keypoints.device)
            / torch.tensor(s_orig, dtype=torch.float32, device=keypoints.device)
            for s, s_orig in zip(new_size, original_size)
        ]
        ratio_h, ratio_w = ratios
        resized_data = keypoints.clone()
        if torch._C._get_tracing_state():
            resized_data_0 = resized_data[:, :, 0] * ratio_w
            resized_data_1 = resized_data[:, :, 1] * ratio_h
            resized_data = torch.stack((resized_data_0, resized_data_1, resized_data[:, :, 2]), dim=2)
        else:
            resized_data[..., 0] *= ratio_w
            resized_data[..., 1] *= ratio_h
        return resized_data

    def resize_boxes(boxes, original_size, new_size):
        # type: (Tensor, List[int], List[int]) -> Tensor
        ratios = [
            torch.tensor(s, dtype=torch.float32, device=boxes.device)
            / torch.tensor(s_orig, dtype=torch.float32, device=boxes.device)
            for s, s_orig in zip(new_size, original_size)
        ]
        ratio_height, ratio_width = ratios
        xmin, ymin, xmax, ymax = boxes.unbind(1)

        xmin = xmin * ratio_width
        xmax = xmax * ratio_width
        ymin = ymin * ratio_height
        ymax = ymax * ratio_height
        return torch.stack((xmin, ymin, xmax, ymax), dim=1)

    # ---- roi_heads.py
    def fastrcnn_loss(class_logits, box_regression, labels, regression_targets):
        # type: (Tensor, Tensor, List[Tensor], List[Tensor]) -> Tuple[Tensor, Tensor]
        labels = torch.cat(labels, dim=0)
        regression_targets = torch.cat(regression_targets, dim=0)

        classification_loss = F.cross_entropy(class_logits, labels)

        # get indices that correspond to the regression targets for
        # the corresponding ground truth labels, to be used with
        # advanced indexing
        sampled_pos_inds_subset = torch.where(labels > 0)[0]
        labels_pos = labels[sampled_pos_inds_subset]
        N, num_classes = class_logits.shape
        box_regression = box_regression.reshape(N, box_regression.size(-1) // 4, 4)

        box_loss = smooth_l1_loss(
            box_regression[sampled_pos_inds_subset, labels_pos],
            regression_targets[sampled_pos_inds_subset],
            beta=1 / 9,
            size_average=False,
        )
        box_loss = box_loss / labels.numel()

        return classification_loss, box_loss

    def maskrcnn_inference(x, labels):
        # type: (Tensor, List[Tensor]) -> List[Tensor]
        mask_prob = x.sigmoid()

        # select masks corresponding to the predicted classes
        num_masks = x.shape[0]
        boxes_per_image = [label.shape[0] for label in labels]
        labels = torch.cat(labels)
        index = torch.arange(num_masks, device=labels.device)
        mask_prob = mask_prob[index, labels][:, None]
        mask_prob = mask_prob.split(boxes_per_image, dim=0)

        return mask_prob

    def project_masks_on_boxes(gt_masks, boxes, matched_idxs, M):
        # type: (Tensor, Tensor, Tensor, int) -> Tensor
        matched_idxs = matched_idxs.to(boxes)
        rois = torch.cat([matched_idxs[:, None], boxes], dim=1)
        gt_masks = gt_masks[:, None].to(rois)
        return roi_align(gt_masks, rois, (M, M), 1.0)[:, 0]

    def maskrcnn_loss(mask_logits, proposals, gt_masks, gt_labels, mask_matched_idxs):
        # type: (Tensor, List[Tensor], List[Tensor], List[Tensor], List[Tensor]) -> Tensor
        discretization_size = mask_logits.shape[-1]
        labels = [gt_label[idxs] for gt_label, idxs in zip(gt_labels, mask_matched_idxs)]
        mask_targets = [
            project_masks_on_boxes(m, p, i, discretization_size) for m, p, i in zip(gt_masks, proposals, mask_matched_idxs)
        ]

        labels = torch.cat(labels, dim=0)
        mask_targets = torch.cat(mask_targets, dim=0)

        # torch.mean (in binary_cross_entropy_with_logits) doesn't
        # accept empty tensors, so handle it separately
        if mask_targets.numel() == 0:
            return mask_logits.sum() * 0

        mask_loss = F.binary_cross_entropy_with_logits(
            mask_logits[torch.arange(labels.shape[0], device=labels.device), labels], mask_targets
        )
        return mask_loss

    def keypoints_to_heatmap(keypoints, rois, heatmap_size):
        # type: (Tensor, Tensor, int) -> Tuple[Tensor, Tensor]
        offset_x = rois[:, 0]
        offset_y = rois[:, 1]
        scale_x = heatmap_size / (rois[:, 2] - rois[:, 0])
        scale_y = heatmap_size / (rois[:, 3] - rois[:, 1])

        offset_x = offset_x[:, None]
        offset_y = offset_y[:, None]
        scale_x = scale_x[:, None]
        scale_y = scale_y[:, None]

        x = keypoints[..., 0]
        y = keypoints[..., 1]

        x_boundary_inds = x == rois[:, 2][:, None]
        y_boundary_inds = y == rois[:, 3][:, None]

        x = (x - offset_x) * scale_x
        x = x.floor().long()
        y = (y - offset_y) * scale_y
        y = y.floor().long()

        x[x_boundary_inds] = heatmap_size - 1
        y[y_boundary_inds] = heatmap_size - 1

        valid_loc = (x >= 0) & (y >= 0) & (x < heatmap_size) & (y < heatmap_size)
        vis = keypoints[..., 2] > 0
        valid = (valid_loc & vis).long()

        lin_ind = y * heatmap_size + x
        heatmaps = lin_ind * valid

        return heatmaps, valid

    def heatmaps_to_keypoints(maps, rois):
        """Extract predicted keypoint locations from heatmaps. Output has shape
        (#rois, 4, #keypoints) with the 4 rows corresponding to (x, y, logit, prob)
        for each keypoint.
        """
        # This function converts a discrete image coordinate in a HEATMAP_SIZE x
        # HEATMAP_SIZE image to a continuous keypoint coordinate. We maintain
        # consistency with keypoints_to_heatmap_labels by using the conversion from
        # Heckbert 1990: c = d + 0.5, where d is a discrete coordinate and c is a
        # continuous coordinate.
        offset_x = rois[:, 0]
        offset_y = rois[:, 1]

        widths = rois[:, 2] - rois[:, 0]
        heights = rois[:, 3] - rois[:, 1]
        widths = widths.clamp(min=1)
        heights = heights.clamp(min=1)
        widths_ceil = widths.ceil()
        heights_ceil = heights.ceil()

        num_keypoints = maps.shape[1]

        xy_preds = torch.zeros((len(rois), 3, num_keypoints), dtype=torch.float32, device=maps.device)
        end_scores = torch.zeros((len(rois), num_keypoints), dtype=torch.float32, device=maps.device)
        for i in range(len(rois)):
            roi_map_width = int(widths_ceil[i].item())
            roi_map_height = int(heights_ceil[i].item())
            width_correction = widths[i] / roi_map_width
            height_correction = heights[i] / roi_map_height
            roi_map = F.interpolate(
                maps[i][:, None], size=(roi_map_height, roi_map_width), mode="bicubic", align_corners=False
            )[:, 0]
            # roi_map_probs = scores_to_probs(roi_map.copy())
            w = roi_map.shape[2]
            pos = roi_map.reshape(num_keypoints, -1).argmax(dim=1)

            x_int = pos % w
            y_int = (pos - x_int) // w
            # assert (roi_map_probs[k, y_int, x_int] ==
            #         roi_map_probs[k, :, :].max())
            x = (x_int.float() + 0.5) * width_correction
            y = (y_int.float() + 0.5) * height_correction
            xy_preds[i, 0, :] = x + offset_x[i]
            xy_preds[i, 1, :] = y + offset_y[i]
            xy_preds[i, 2, :] = 1
            end_scores[i, :] = roi_map[torch.arange(num_keypoints), y_int, x_int]

        return xy_preds.permute(0, 2, 1), end_scores

    def keypointrcnn_loss(keypoint_logits, proposals, gt_keypoints, keypoint_matched_idxs):
        # type: (Tensor, List[Tensor], List[Tensor], List[Tensor]) -> Tensor
        N, K, H, W = keypoint_logits.shape
        assert H == W
        discretization_size = H
        heatmaps = []
        valid = []
        for proposals_per_image, gt_kp_in_image, midx in zip(proposals, gt_keypoints, keypoint_matched_idxs):
            kp = gt_kp_in_image[midx]
            heatmaps_per_image, valid_per_image = keypoints_to_heatmap(kp, proposals_per_image, discretization_size)
            heatmaps.append(heatmaps_per_image.view(-1))
            valid.append(valid_per_image.view(-1))

        keypoint_targets = torch.cat(heatmaps, dim=0)
        valid = torch.cat(valid, dim=0).to(dtype=torch.uint8)
        valid = torch.where(valid)[0]

        # torch.mean (in binary_cross_entropy_with_logits) does'nt
        # accept empty tensors, so handle it sepaartely
        if keypoint_targets.numel() == 0 or len(valid) == 0:
            return keypoint_logits.sum() * 0

        keypoint_logits = keypoint_logits.view(N * K, H * W)

        keypoint_loss = F.cross_entropy(keypoint_logits[valid], keypoint_targets[valid])
        return keypoint_loss

    def keypointrcnn_inference(x, boxes):
        # type: (Tensor, List[Tensor]) -> Tuple[List[Tensor], List[Tensor]]
        kp_probs = []
        kp_scores = []

        boxes_per_image = [box.size(0) for box in boxes]
        x2 = x.split(boxes_per_image, dim=0)

        for xx, bb in zip(x2, boxes):
            kp_prob, scores = heatmaps_to_keypoints(xx, bb)
            kp_probs.append(kp_prob)
            kp_scores.append(scores)

        return kp_probs, kp_scores

    # the next two functions should be merged inside Masker
    # but are kept here for the moment while we need them
    # temporarily for paste_mask_in_image
    def expand_boxes(boxes, scale):
        # type: (Tensor, float) -> Tensor
        w_half = (boxes[:, 2] - boxes[:, 0]) * 0.5
        h_half = (boxes[:, 3] - boxes[:, 1]) * 0.5
        x_c = (boxes[:, 2] + boxes[:, 0]) * 0.5
        y_c = (boxes[:, 3] + boxes[:, 1]) * 0.5

        w_half *= scale
        h_half *= scale

        boxes_exp = torch.zeros_like(boxes)
        boxes_exp[:, 0] = x_c - w_half
        boxes_exp[:, 2] = x_c + w_half
        boxes_exp[:, 1] = y_c - h_half
        boxes_exp[:, 3] = y_c + h_half
        return boxes_exp

    @torch.jit.unused
    def expand_masks_tracing_scale(M, padding):
        # type: (int, int) -> float
        return torch.tensor(M + 2 * padding).to(torch.float32) / torch.tensor(M).to(torch.float32)

    def expand_masks(mask, padding):
        # type: (Tensor, int) -> Tuple[Tensor, float]
        M = mask.shape[-1]
        if torch._C._get_tracing_state():  # could not import is_tracing(), not sure why
            scale = expand_masks_tracing_scale(M, padding)
        else:
            scale = float(M + 2 * padding) / M
        padded_mask = F.pad(mask, (padding,) * 4)
        return padded_mask, scale

    def paste_mask_in_image(mask, box, im_h, im_w):
        # type: (Tensor, Tensor, int, int) -> Tensor
        TO_REMOVE = 1
        w = int(box[2] - box[0] + TO_REMOVE)
        h = int(box[3] - box[1] + TO_REMOVE)
        w = max(w, 1)
        h = max(h, 1)

        # Set shape to [batchxCxHxW]
        mask = mask.expand((1, 1, -1, -1))

        # Resize mask
        mask = F.interpolate(mask, size=(h, w), mode="bilinear", align_corners=False)
        mask = mask[0][0]

        im_mask = torch.zeros((im_h, im_w), dtype=mask.dtype, device=mask.device)
        x_0 = max(box[0], 0)
        x_1 = min(box[2] + 1, im_w)
        y_0 = max(box[1], 0)
        y_1 = min(box[3] + 1, im_h)

        im_mask[y_0:y_1, x_0:x_1] = mask[(y_0 - box[1]) : (y_1 - box[1]), (x_0 - box[0]) : (x_1 - box[0])]
        return im_mask

    def paste_masks_in_image(masks, boxes, img_shape, padding=1):
        # type: (Tensor, Tensor, Tuple[int, int], int) -> Tensor
        masks, scale = expand_masks(masks, padding=padding)
        boxes = expand_boxes(boxes, scale).to(dtype=torch.int64)
        im_h, im_w = img_shape

        res = [paste_mask_in_image(m[0], b, im_h, im_w) for m, b in zip(masks, boxes)]
        if len(res) > 0:
            ret = torch.stack(res, dim=0)[:, None]
        else:
            ret = masks.new_empty((0, 1, im_h, im_w))
        return ret

    return SimpleNamespace(**{k: v for k, v in locals().items() if callable(v)})


# ====================================================================== models/detection/rpn.py
def rpn_page(torch):
    nn = torch.nn
    F = torch.nn.functional
    from typing import Dict

    box_ops = boxes_page(torch)
    det = detection_page(torch)
    det_utils = SimpleNamespace(BoxCoder=det.BoxCoder, Matcher=det.Matcher,
                                BalancedPositiveNegativeSampler=det.BalancedPositiveNegativeSampler,
                                smooth_l1_loss=rcnn_page(torch).smooth_l1_loss)

    class RPNHead(nn.Module):
        """
        Adds a simple RPN Head with classification and regression heads

        Arguments:
            in_channels (int): number of channels of the input feature
            num_anchors (int): number of anchors to be predicted
        """

        def __init__(self, in_channels, num_anchors):
            super(RPNHead, self).__init__()
            self.conv = nn.Conv2d(in_channels, in_channels, kernel_size=3, stride=1, padding=1)
            self.cls_logits = nn.Conv2d(in_channels, num_anchors, kernel_size=1, stride=1)
            self.bbox_pred = nn.Conv2d(in_channels, num_anchors * 4, kernel_size=1, stride=1)

            for layer in self.children():
                torch.nn.init.normal_(layer.weight, std=0.01)
                torch.nn.init.constant_(layer.bias, 0)

        def forward(self, x):
            # type: (List[Tensor]) -> Tuple[List[Tensor], List[Tensor]]
            logits = []
            bbox_reg = []
            for feature in x:
                t = F.relu(self.conv(feature))
                logits.append(self.cls_logits(t))
                bbox_reg.append(self.bbox_pred(t))
            return logits, bbox_reg

    def permute_and_flatten(layer, N, A, C, H, W):
        # type: (Tensor, int, int, int, int, int) -> Tensor
        layer = layer.view(N, -1, C, H, W)
        layer = layer.permute(0, 3, 4, 1, 2)
        layer = layer.reshape(N, -1, C)
        return layer

    def concat_box_prediction_layers(box_cls, box_regression):
        # type: (List[Tensor], List[Tensor]) -> Tuple[Tensor, Tensor]
        box_cls_flattened = []
        box_regression_flattened = []
        # for each feature level, permute the outputs to make them be in the
        # same format as the labels. Note that the labels are computed for
        # all feature levels concatenated, so we keep the same representation
        # for the objectness and the box_regression
        for box_cls_per_level, box_regression_per_level in zip(box_cls, box_regression):
            N, AxC, H, W = box_cls_per_level.shape
            Ax4 = box_regression_per_level.shape[1]
            A = Ax4 // 4
            C = AxC // A
            box_cls_per_level = permute_and_flatten(box_cls_per_level, N, A, C, H, W)
            box_cls_flattened.append(box_cls_per_level)

            box_regression_per_level = permute_and_flatten(box_regression_per_level, N, A, 4, H, W)
            box_regression_flattened.append(box_regression_per_level)
        # concatenate on the first dimension (representing the feature levels), to
        # take into account the way the labels were generated (with all feature maps
        # being concatenated as well)
        box_cls = torch.cat(box_cls_flattened, dim=1).flatten(0, -2)
        box_regression = torch.cat(box_regression_flattened, dim=1).reshape(-1, 4)
        return box_cls, box_regression

    class RegionProposalNetwork(torch.nn.Module):
        def __init__(
            self,
            anchor_generator,
            head,
            #
            fg_iou_thresh,
            bg_iou_thresh,
            batch_size_per_image,
            positive_fraction,
            #
            pre_nms_top_n,
            post_nms_top_n,
            nms_thresh,
        ):
            super(RegionProposalNetwork, self).__init__()
            self.anchor_generator = anchor_generator
            self.head = head
            self.box_coder = det_utils.BoxCoder(weights=(1.0, 1.0, 1.0, 1.0))

            # used during training
            self.box_similarity = box_ops.box_iou

            self.proposal_matcher = det_utils.Matcher(
                fg_iou_thresh,
                bg_iou_thresh,
                allow_low_quality_matches=True,
            )

            self.fg_bg_sampler = det_utils.BalancedPositiveNegativeSampler(batch_size_per_image, positive_fraction)
            # used during testing
            self._pre_nms_top_n = pre_nms_top_n
            self._post_nms_top_n = post_nms_top_n
            self.nms_thresh = nms_thresh
            self.min_size = 1e-3

        def pre_nms_top_n(self):
            if self.training:
                return self._pre_nms_top_n["training"]
            return self._pre_nms_top_n["testing"]

        def post_nms_top_n(self):
            if self.training:
                return self._post_nms_top_n["training"]
            return self._post_nms_top_n["testing"]

        def assign_targets_to_anchors(self, anchors, targets):
            # type: (List[Tensor], List[Dict[str, Tensor]]) -> Tuple[List[Tensor], List[Tensor]]
            labels = []
            matched_gt_boxes = []
            for anchors_per_image, targets_per_image in zip(anchors, targets):
                gt_boxes = targets_per_image["boxes"]

                if gt_boxes.numel() == 0:
                    # Background image (negative example)
                    device = anchors_per_image.device
                    matched_gt_boxes_per_image = torch.zeros(anchors_per_image.shape, dtype=torch.float32, device=device)
                    labels_per_image = torch.zeros((anchors_per_image.shape[0],), dtype=torch.float32, device=device)
                else:
                    match_quality_matrix = self.box_similarity(gt_boxes, anchors_per_image)
                    matched_idxs = self.proposal_matcher(match_quality_matrix)
                    # get the targets corresponding GT for each proposal
                    # NB: need to clamp the indices because we can have a single
                    # GT in the image, and matched_idxs can be -2, which goes
                    # out of bounds
                    matched_gt_boxes_per_image = gt_boxes[matched_idxs.clamp(min=0)]

                    labels_per_image = matched_idxs >= 0
                    labels_per_image = labels_per_image.to(dtype=torch.float32)

                    # Background (negative examples)
                    bg_indices = matched_idxs == self.proposal_matcher.BELOW_LOW_THRESHOLD
                    labels_per_image[bg_indices] = 0.0

                    # discard indices that are between thresholds
                    inds_to_discard = matched_idxs == self.proposal_matcher.BETWEEN_THRESHOLDS
                    labels_per_image[inds_to_discard] = -1.0

                labels.append(labels_per_image)
                matched_gt_boxes.append(matched_gt_boxes_per_image)
            return labels, matched_gt_boxes

        def _get_top_n_idx(self, objectness, num_anchors_per_level):
            # type: (Tensor, List[int]) -> Tensor
            r = []
            offset = 0
            for ob in objectness.split(num_anchors_per_level, 1):
                num_anchors = ob.shape[1]
                pre_nms_top_n = min(self.pre_nms_top_n(), num_anchors)
                _, top_n_idx = ob.topk(pre_nms_top_n, dim=1)
                r.append(top_n_idx + offset)
                offset += num_anchors
            return torch.cat(r, dim=1)

        def filter_proposals(self, proposals, objectness, image_shapes, num_anchors_per_level):
            # type: (Tensor, Tensor, List[Tuple[int, int]], List[int]) -> Tuple[List[Tensor], List[Tensor]]
            num_images = proposals.shape[0]
            device = proposals.device
            # do not backprop throught objectness
            objectness = objectness.detach()
            objectness = objectness.reshape(num_images, -1)

            levels = [torch.full((n,), idx, dtype=torch.int64, device=device) for idx, n in enumerate(num_anchors_per_level)]
            levels = torch.cat(levels, 0)
            levels = levels.reshape(1, -1).expand_as(objectness)

            # select top_n boxes independently per level before applying nms
            top_n_idx = self._get_top_n_idx(objectness, num_anchors_per_level)

            image_range = torch.arange(num_images, device=device)
            batch_idx = image_range[:, None]

            objectness = objectness[batch_idx, top_n_idx]
            levels = levels[batch_idx, top_n_idx]
            proposals = proposals[batch_idx, top_n_idx]

            final_boxes = []
            final_scores = []
            for boxes, scores, lvl, img_shape in zip(proposals, objectness, levels, image_shapes):
                boxes = box_ops.clip_boxes_to_image(boxes, img_shape)
                keep = box_ops.remove_small_boxes(boxes, self.min_size)
                boxes, scores, lvl = boxes[keep], scores[keep], lvl[keep]
                # non-maximum suppression, independently done per level
                keep = box_ops.batched_nms(boxes, scores, lvl, self.nms_thresh)
                # keep only topk scoring predictions
                keep = keep[: self.post_nms_top_n()]
                boxes, scores = boxes[keep], scores[keep]
                final_boxes.append(boxes)
                final_scores.append(scores)
            return final_boxes, final_scores

        def compute_loss(self, objectness, pred_bbox_deltas, labels, regression_targets):
            # type: (Tensor, Tensor, List[Tensor], List[Tensor]) -> Tuple[Tensor, Tensor]
            sampled_pos_inds, sampled_neg_inds = self.fg_bg_sampler(labels)
            sampled_pos_inds = torch.where(torch.cat(sampled_pos_inds, dim=0))[0]
            sampled_neg_inds = torch.where(torch.cat(sampled_neg_inds, dim=0))[0]

            sampled_inds = torch.cat([sampled_pos_inds, sampled_neg_inds], dim=0)

            objectness = objectness.flatten()

            labels = torch.cat(labels, dim=0)
            regression_targets = torch.cat(regression_targets, dim=0)

            box_loss = det_utils.smooth_l1_loss(
                pred_bbox_deltas[sampled_pos_inds],
                regression_targets[sampled_pos_inds],
                beta=1 / 9,
                size_average=False,
            ) / (sampled_inds.numel())

            objectness_loss = F.binary_cross_entropy_with_logits(objectness[sampled_inds], labels[sampled_inds])

            return objectness_loss, box_loss

        def forward(
            self,
            images,  # type: ImageList
            features,  # type: Dict[str, Tensor]
            targets=None,  # type: Optional[List[Dict[str, Tensor]]]
        ):
            # type: (...) -> Tuple[List[Tensor], Dict[str, Tensor]]
            # RPN uses all feature maps that are available
            features = list(features.values())
            objectness, pred_bbox_deltas = self.head(features)
            anchors = self.anchor_generator(images, features)

            num_images = len(anchors)
            num_anchors_per_level_shape_tensors = [o[0].shape for o in objectness]
            num_anchors_per_level = [s[0] * s[1] * s[2] for s in num_anchors_per_level_shape_tensors]
            objectness, pred_bbox_deltas = concat_box_prediction_layers(objectness, pred_bbox_deltas)
            # apply pred_bbox_deltas to anchors to obtain the decoded proposals
            # note that we detach the deltas because Faster R-CNN do not backprop through
            # the proposals
            proposals = self.box_coder.decode(pred_bbox_deltas.detach(), anchors)
            proposals = proposals.view(num_images, -1, 4)
            boxes, scores = self.filter_proposals(proposals, objectness, images.image_sizes, num_anchors_per_level)

            losses = {}
            if self.training:
                assert targets is not None
                labels, matched_gt_boxes = self.assign_targets_to_anchors(anchors, targets)
                regression_targets = self.box_coder.encode(matched_gt_boxes, anchors)
                loss_objectness, loss_rpn_box_reg = self.compute_loss(
                    objectness, pred_bbox_deltas, labels, regression_targets
                )
                losses = {
                    "loss_objectness": loss_objectness,
                    "loss_rpn_box_reg": loss_rpn_box_reg,
                }
            return boxes, losses

    return SimpleNamespace(**{k: v for k, v in locals().items() if callable(v)})


# ====================================================================== NumPy references
def _rand_boxes(rng, n, size=20.0):
    xy = rng.uniform(0, size * 0.6, (n, 2))
    wh = rng.uniform(2.0, size * 0.5, (n, 2))
    return np.concatenate([xy, xy + wh], axis=1)


def _np_iou_parts(a, b):
    """inter, union, enclosing box (w, h) and centre distance squared for every pair, by loops."""
    n, m = len(a), len(b)
    inter, union, cw, ch, d2 = (np.zeros((n, m)) for _ in range(5))
    for i in range(n):
        for j in range(m):
            iw = max(0.0, min(a[i, 2], b[j, 2]) - max(a[i, 0], b[j, 0]))
            ih = max(0.0, min(a[i, 3], b[j, 3]) - max(a[i, 1], b[j, 1]))
            inter[i, j] = iw * ih
            area_a = (a[i, 2] - a[i, 0]) * (a[i, 3] - a[i, 1])
            area_b = (b[j, 2] - b[j, 0]) * (b[j, 3] - b[j, 1])
            union[i, j] = area_a + area_b - inter[i, j]
            cw[i, j] = max(a[i, 2], b[j, 2]) - min(a[i, 0], b[j, 0])
            ch[i, j] = max(a[i, 3], b[j, 3]) - min(a[i, 1], b[j, 1])
            d2[i, j] = ((a[i, 0] + a[i, 2]) / 2 - (b[j, 0] + b[j, 2]) / 2) ** 2 + (
                (a[i, 1] + a[i, 3]) / 2 - (b[j, 1] + b[j, 3]) / 2
            ) ** 2
    return inter, union, cw, ch, d2


def _np_nms(boxes, scores, thr):
    order = list(np.argsort(-scores, kind="stable"))
    keep = []
    while order:
        i = order.pop(0)
        keep.append(i)
        inter, union, *_ = _np_iou_parts(boxes[i : i + 1], boxes[order]) if order else (None, None)
        if order:
            iou = (inter / union)[0]
            order = [o for o, v in zip(order, iou) if v <= thr]
    return keep


def _fd_grad(f, x, eps=1e-6, at=None):
    """Central finite differences of the scalar f (NumPy in, float out) at the float64 array x.

    ``at``: a list of index tuples to differentiate at (the rest stays NaN), to keep costly ones short."""
    g = np.full_like(x, np.nan) if at is not None else np.zeros_like(x)
    for idx in (at if at is not None else np.ndindex(*x.shape)):
        xp, xm = x.copy(), x.copy()
        xp[idx] += eps
        xm[idx] -= eps
        g[idx] = (f(xp) - f(xm)) / (2 * eps)
    return g


def _some(rng, shape, n):
    """n distinct random index tuples of an array of this shape."""
    flat = rng.choice(int(np.prod(shape)), size=n, replace=False)
    return [tuple(int(i) for i in np.unravel_index(k, shape)) for k in flat]


def _np_bilinear(img, y, x):
    # torchvision/csrc/ops/cpu/roi_align_common.h, one point
    c, height, width = img.shape
    if y < -1.0 or y > height or x < -1.0 or x > width:
        return np.zeros(c)
    y, x = max(y, 0.0), max(x, 0.0)
    y_low, x_low = int(y), int(x)
    if y_low >= height - 1:
        y_high = y_low = height - 1
        y = float(y_low)
    else:
        y_high = y_low + 1
    if x_low >= width - 1:
        x_high = x_low = width - 1
        x = float(x_low)
    else:
        x_high = x_low + 1
    ly, lx = y - y_low, x - x_low
    hy, hx = 1.0 - ly, 1.0 - lx
    return (hy * hx * img[:, y_low, x_low] + hy * lx * img[:, y_low, x_high]
            + ly * hx * img[:, y_high, x_low] + ly * lx * img[:, y_high, x_high])


def _np_roi_align(inp, rois, scale, ph_, pw_, sampling_ratio, aligned):
    out = np.zeros((len(rois), inp.shape[1], ph_, pw_))
    off = 0.5 if aligned else 0.0
    for k, (b, x1, y1, x2, y2) in enumerate(rois):
        sw, sh, ew, eh = x1 * scale - off, y1 * scale - off, x2 * scale - off, y2 * scale - off
        rw, rh = ew - sw, eh - sh
        if not aligned:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        bh, bw = rh / ph_, rw / pw_
        gh = sampling_ratio if sampling_ratio > 0 else int(math.ceil(rh / ph_))
        gw = sampling_ratio if sampling_ratio > 0 else int(math.ceil(rw / pw_))
        count = max(gh * gw, 1)
        for ph in range(ph_):
            for pw in range(pw_):
                acc = 0.0
                for iy in range(gh):
                    y = sh + ph * bh + (iy + 0.5) * bh / gh
                    for ix in range(gw):
                        x = sw + pw * bw + (ix + 0.5) * bw / gw
                        acc = acc + _np_bilinear(inp[int(b)], y, x)
                out[k, :, ph, pw] = acc / count
    return out


# ====================================================================== tests: boxes
def test_box_convert_area_and_iou_family_against_numpy():
    torch = lucid
    bx = boxes_page(torch)
    rng = np.random.default_rng(0)
    a, b = _rand_boxes(rng, 5), _rand_boxes(rng, 4)
    ta, tb = torch.tensor(a), torch.tensor(b)
    inter, union, cw, ch, d2 = _np_iou_parts(a, b)
    iou = inter / union
    np.testing.assert_allclose(_np(bx.box_area(ta)), (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1]), rtol=1e-12)
    np.testing.assert_allclose(_np(bx.box_iou(ta, tb)), iou, rtol=1e-12)
    np.testing.assert_allclose(_np(bx.generalized_box_iou(ta, tb)), iou - (cw * ch - union) / (cw * ch), rtol=1e-12)
    diou = iou - d2 / (cw ** 2 + ch ** 2 + 1e-7)
    np.testing.assert_allclose(_np(bx.distance_box_iou(ta, tb)), diou, rtol=1e-12)
    wa, ha = a[:, 2] - a[:, 0], a[:, 3] - a[:, 1]
    wb, hb = b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]
    v = 4 / math.pi ** 2 * (np.arctan(wa / ha)[:, None] - np.arctan(wb / hb)[None]) ** 2
    np.testing.assert_allclose(_np(bx.complete_box_iou(ta, tb)), diou - v / (1 - iou + v + 1e-7) * v, rtol=1e-12)
    # GIoU of a box with itself is 1, of two far apart boxes tends to -1
    far = torch.tensor([[0.0, 0, 1, 1], [100.0, 100, 101, 101]])
    g = _np(bx.generalized_box_iou(far, far))
    np.testing.assert_allclose(np.diag(g), 1.0)
    assert -1 < g[0, 1] < -0.999
    # conversions: closed forms and round trips through every format
    cxcywh = np.stack([(a[:, 0] + a[:, 2]) / 2, (a[:, 1] + a[:, 3]) / 2, wa, ha], 1)
    np.testing.assert_allclose(_np(bx.box_convert(ta, "xyxy", "cxcywh")), cxcywh, rtol=1e-12)
    np.testing.assert_allclose(_np(bx.box_convert(ta, "xyxy", "xywh")), np.stack([a[:, 0], a[:, 1], wa, ha], 1))
    for fmt in ("xywh", "cxcywh"):
        back = bx.box_convert(bx.box_convert(ta, "xyxy", fmt), fmt, "xyxy")
        np.testing.assert_allclose(_np(back), a, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(_np(bx.box_convert(bx.box_convert(ta, "xywh", "cxcywh"), "cxcywh", "xywh")), a,
                               atol=1e-12)
    rot = torch.tensor([[10.0, 8.0, 6.0, 4.0, 30.0], [5.0, 5.0, 2.0, 3.0, -45.0]])
    corners = _np(bx.box_convert(rot, "cxcywhr", "xyxyxyxy")).reshape(-1, 4, 2)
    r = np.deg2rad(_np(rot)[:, 4])
    for k in range(2):  # the four corners sit around the centre at (+-w/2, +-h/2) rotated by r
        cx, cy, w, h = _np(rot)[k, :4]
        rel = corners[k] - [cx, cy]
        rot_m = np.array([[np.cos(r[k]), np.sin(r[k])], [-np.sin(r[k]), np.cos(r[k])]])
        local = rel @ rot_m  # undo the (counter-clockwise in image coordinates) rotation
        np.testing.assert_allclose(local, [[-w / 2, -h / 2], [w / 2, -h / 2], [w / 2, h / 2], [-w / 2, h / 2]],
                                   atol=1e-5)
    np.testing.assert_allclose(_np(bx.box_convert(bx.box_convert(rot, "cxcywhr", "xyxyxyxy"), "xyxyxyxy", "cxcywhr")),
                               _np(rot), atol=1e-4)
    with pytest.raises(ValueError, match="Unsupported Bounding Box Conversions"):
        bx.box_convert(ta, "xyxy", "yxyx")


def test_nms_batched_nms_clip_remove_and_masks_to_boxes():
    torch = lucid
    bx = boxes_page(torch)
    rng = np.random.default_rng(1)
    base = _rand_boxes(rng, 6)
    boxes = np.concatenate([base, base + rng.uniform(-1.5, 1.5, base.shape)])  # near-duplicates overlap
    scores = rng.permutation(12) / 12.0 + 0.01
    idxs = np.array([0, 1, 2] * 4)
    tboxes, tscores = torch.tensor(boxes, dtype=torch.float32), torch.tensor(scores, dtype=torch.float32)
    keep = bx.nms(tboxes, tscores, 0.3).tolist()
    assert keep == _np_nms(boxes.astype(np.float32).astype(np.float64), scores, 0.3)
    assert len(keep) < 12
    trick = bx._batched_nms_coordinate_trick(tboxes, tscores, torch.tensor(idxs), 0.3).tolist()
    vanilla = bx._batched_nms_vanilla(tboxes, tscores, torch.tensor(idxs), 0.3).tolist()
    ref = []
    for c in range(3):
        sel = np.where(idxs == c)[0]
        ref += [sel[k] for k in _np_nms(boxes[sel], scores[sel], 0.3)]
    ref = sorted(ref, key=lambda i: -scores[i])
    assert trick == vanilla == ref
    assert bx._batched_nms_coordinate_trick(torch.zeros(0, 4), torch.zeros(0), torch.zeros(0), 0.5).shape == (0,)
    # clip and remove
    raw = np.array([[-3.0, 2.0, 25.0, 8.0], [4.0, -1.0, 6.0, 30.0], [1.0, 1.0, 1.5, 9.0]])
    clipped = _np(bx.clip_boxes_to_image(torch.tensor(raw), (12, 20)))
    np.testing.assert_array_equal(clipped, np.stack([raw[:, 0].clip(0, 20), raw[:, 1].clip(0, 12),
                                                     raw[:, 2].clip(0, 20), raw[:, 3].clip(0, 12)], 1))
    assert bx.remove_small_boxes(torch.tensor(raw), 1.0).tolist() == [0, 1]
    # masks_to_boxes: the extreme set pixels of each mask
    masks = np.zeros((3, 7, 9), dtype=bool)
    masks[0, 2:5, 3:8] = True
    masks[1, 6, 0] = True
    masks[2, [1, 4], [7, 2]] = True
    out = _np(bx.masks_to_boxes(torch.tensor(masks)))
    ref = [[xs.min(), ys.min(), xs.max(), ys.max()] for ys, xs in (np.nonzero(m) for m in masks)]
    np.testing.assert_array_equal(out, ref)


# ====================================================================== tests: losses
def test_box_losses_and_focal_loss_against_numpy_and_finite_differences():
    torch = lucid
    ls = losses_page(torch)
    rng = np.random.default_rng(2)
    a, b = _rand_boxes(rng, 5), _rand_boxes(rng, 5)
    b[0] = a[0] + [20, 20, 20, 20]  # one pair without overlap
    inter, union, cw, ch, d2 = (np.diag(m) for m in _np_iou_parts(a, b))
    giou_ref = 1 - (inter / (union + 1e-7) - (cw * ch - union) / (cw * ch + 1e-7))
    ta, tb = torch.tensor(a), torch.tensor(b)
    np.testing.assert_allclose(_np(ls.generalized_box_iou_loss(ta, tb)), giou_ref, rtol=1e-12)
    np.testing.assert_allclose(float(ls.generalized_box_iou_loss(ta, tb, reduction="sum")), giou_ref.sum(), rtol=1e-12)
    diou_ref = 1 - (inter / union - d2 / (cw ** 2 + ch ** 2 + 1e-7))
    # distance_box_iou_loss takes row 0 of the pairwise matrix: boxes1[0] against every boxes2 row
    inter0, union0, cw0, ch0, d20 = (m[0] for m in _np_iou_parts(a, b))
    np.testing.assert_allclose(_np(ls.distance_box_iou_loss(ta, tb)), 1 - (inter0 / union0 - d20 / (cw0 ** 2 + ch0 ** 2 + 1e-7)),
                               rtol=1e-12)
    np.testing.assert_allclose(float(ls.distance_box_iou_loss(ta[1], tb[1])), diou_ref[1], rtol=1e-12)
    iou_e = inter / (union + 1e-7)
    w1, h1, w2, h2 = a[:, 2] - a[:, 0], a[:, 3] - a[:, 1], b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]
    v = 4 / math.pi ** 2 * (np.arctan(w2 / h2) - np.arctan(w1 / h1)) ** 2
    ciou_ref = 1 - iou_e + d2 / (cw ** 2 + ch ** 2 + 1e-7) + v / (1 - iou_e + v + 1e-7) * v
    np.testing.assert_allclose(_np(ls.complete_box_iou_loss(ta, tb)), ciou_ref, rtol=1e-12)

    # gradients: GIoU loss by float64 finite differences
    def giou_np(x):
        return float(ls.generalized_box_iou_loss(torch.tensor(x), tb, reduction="sum"))

    x = torch.tensor(a, requires_grad=True)
    ls.generalized_box_iou_loss(x, tb, reduction="sum").backward()
    np.testing.assert_allclose(_np(x.grad), _fd_grad(giou_np, a), rtol=1e-6, atol=1e-8)
    # CIoU: alpha is under no_grad, so its gradient is that of 1 - iou + d2/c2 + alpha_fixed * v
    x = torch.tensor(a, requires_grad=True)
    ls.complete_box_iou_loss(x, tb, reduction="mean").backward()
    alpha = v / (1 - iou_e + v + 1e-7)

    def ciou_fixed_alpha(z):
        inter_, union_, cw_, ch_, d2_ = (np.diag(m) for m in _np_iou_parts(z, b))
        ie = inter_ / (union_ + 1e-7)
        v_ = 4 / math.pi ** 2 * (np.arctan(w2 / h2) - np.arctan((z[:, 2] - z[:, 0]) / (z[:, 3] - z[:, 1]))) ** 2
        return float(np.mean(1 - ie + d2_ / (cw_ ** 2 + ch_ ** 2 + 1e-7) + alpha * v_))

    np.testing.assert_allclose(_np(x.grad), _fd_grad(ciou_fixed_alpha, a), rtol=1e-6, atol=1e-8)

    # sigmoid focal loss: closed form and gradient
    logits = rng.normal(size=(4, 3)) * 2
    targets = (rng.uniform(size=(4, 3)) > 0.5).astype(np.float64)

    def focal_np(z, alpha=0.25, gamma=2):
        p = 1 / (1 + np.exp(-z))
        ce = -(targets * np.log(p) + (1 - targets) * np.log(1 - p))
        pt = p * targets + (1 - p) * (1 - targets)
        return (alpha * targets + (1 - alpha) * (1 - targets)) * ce * (1 - pt) ** gamma

    z = torch.tensor(logits, requires_grad=True)
    out = ls.sigmoid_focal_loss(z, torch.tensor(targets), reduction="mean")
    np.testing.assert_allclose(float(out.detach()), focal_np(logits).mean(), rtol=1e-12)
    out.backward()
    np.testing.assert_allclose(_np(z.grad), _fd_grad(lambda q: focal_np(q).mean(), logits), rtol=1e-6, atol=1e-10)
    np.testing.assert_allclose(_np(ls.sigmoid_focal_loss(z, torch.tensor(targets), alpha=-1, gamma=0)),
                               focal_np(logits, alpha=0.5, gamma=0) * 2, rtol=1e-12)
    with pytest.raises(ValueError, match="Invalid Value for arg 'reduction'"):
        ls.sigmoid_focal_loss(z, torch.tensor(targets), reduction="max")


def test_stochastic_depth_row_and_batch_modes():
    torch = lucid
    ls = losses_page(torch)
    torch.manual_seed(0)
    x = torch.ones(400, 3)
    out = _np(ls.stochastic_depth(x, 0.25, "row"))
    rows = out[:, 0]
    assert set(np.unique(out).tolist()) <= {0.0, float(np.float32(1) / np.float32(0.75))}
    assert np.all(out == rows[:, None])  # a whole row is kept or dropped
    kept = (rows > 0).mean()
    assert 0.65 < kept < 0.85  # 400 Bernoulli(0.75) draws: 5 standard deviations = 0.11
    batch = _np(ls.stochastic_depth(x, 0.5, "batch"))
    assert np.all(batch == 0.0) or np.all(batch == 2.0)
    assert ls.stochastic_depth(x, 0.5, "row", training=False) is x
    assert ls.stochastic_depth(x, 0.0, "row") is x
    m = ls.StochasticDepth(0.2, "row")
    assert repr(m) == "StochasticDepth(p=0.2, mode=row)"
    m.eval()
    assert m(x) is x
    np.testing.assert_array_equal(_np(ls.stochastic_depth(x, 1.0, "row")), 0.0)
    with pytest.raises(ValueError, match="drop probability has to be between 0 and 1, but got 1.5"):
        ls.stochastic_depth(x, 1.5, "row")
    with pytest.raises(ValueError, match="mode has to be either 'batch' or 'row', but got col"):
        ls.stochastic_depth(x, 0.5, "col")


# ====================================================================== tests: ops/misc.py
def test_frozen_batchnorm_state_dict_and_conv_se_mlp_blocks():
    torch = lucid
    nn = torch.nn
    ms = misc_page(torch)
    rng = np.random.default_rng(3)
    # a trained BatchNorm2d's state dict (with num_batches_tracked) loads strictly into FrozenBatchNorm2d
    bn = nn.BatchNorm2d(3)
    _load(torch, bn, 30)
    sd = bn.state_dict()
    assert "num_batches_tracked" in sd
    frozen = ms.FrozenBatchNorm2d(3)
    frozen.load_state_dict(sd)  # strict: only passes because _load_from_state_dict drops the counter
    assert repr(frozen) == "FrozenBatchNorm2d(3, eps=1e-05)"
    x = rng.normal(size=(2, 3, 4, 5))
    w, b, rm, rv = (_np(sd[k]) for k in ("weight", "bias", "running_mean", "running_var"))
    ref = (x - rm[:, None, None]) / np.sqrt(rv[:, None, None] + 1e-5) * w[:, None, None] + b[:, None, None]
    np.testing.assert_allclose(_np(frozen(torch.tensor(x, dtype=torch.float32))), ref, rtol=2e-5, atol=2e-6)
    bn.eval()
    np.testing.assert_allclose(_np(bn(torch.tensor(x, dtype=torch.float32))), ref, rtol=2e-5, atol=2e-6)
    assert len(list(frozen.parameters())) == 0
    # a missing key is still reported
    with pytest.raises(RuntimeError, match="running_var"):
        ms.FrozenBatchNorm2d(3).load_state_dict({k: v for k, v in sd.items() if k != "running_var"})

    # Conv2dNormActivation: conv (no bias with a norm layer), padding (k-1)//2*d, norm, activation
    block = ms.Conv2dNormActivation(3, 4, kernel_size=3, dilation=2, activation_layer=nn.ReLU6)
    assert [type(m).__name__ for m in block] == ["Conv2d", "BatchNorm2d", "ReLU6"]
    assert block[0].bias is None and block[0].padding == (2, 2) and block.out_channels == 4
    plain = ms.Conv2dNormActivation(3, 4, kernel_size=(3, 5), norm_layer=None, activation_layer=None)
    assert len(plain) == 1 and plain[0].bias is not None and plain[0].padding == (1, 2)
    assert block(torch.tensor(x, dtype=torch.float32)).shape == (2, 4, 4, 5)

    # SqueezeExcitation: sigmoid(fc2(relu(fc1(mean)))) * input
    se = ms.SqueezeExcitation(3, 2).double()
    _load(torch, se, 31, scale=0.8)
    p = {k: _np(v) for k, v in se.state_dict().items()}
    s = x.mean(axis=(2, 3))
    s = np.maximum(s @ p["fc1.weight"][:, :, 0, 0].T + p["fc1.bias"], 0)
    s = 1 / (1 + np.exp(-(s @ p["fc2.weight"][:, :, 0, 0].T + p["fc2.bias"])))
    np.testing.assert_allclose(_np(se(torch.tensor(x))), s[:, :, None, None] * x, rtol=1e-12)

    # MLP: Linear/ReLU/Dropout stack, trained: loss falls below half
    torch.manual_seed(0)
    mlp = ms.MLP(4, [8, 8, 1], norm_layer=nn.LayerNorm, dropout=0.0)
    assert [type(m).__name__ for m in mlp] == ["Linear", "LayerNorm", "ReLU", "Dropout"] * 2 + ["Linear", "Dropout"]
    xs = torch.tensor(rng.normal(size=(16, 4)), dtype=torch.float32)
    ys = (xs[:, :1] * 2 - xs[:, 1:2]).detach()
    opt = torch.optim.Adam(mlp.parameters(), lr=0.02)
    losses = []
    for _ in range(40):
        opt.zero_grad()
        loss = ((mlp(xs) - ys) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < 0.5 * losses[0]


# ====================================================================== tests: ops/roi_align.py
def _roi_inputs(rng):
    inp = rng.normal(size=(2, 2, 6, 7))
    rois = np.array([[0, 0.6, 1.1, 5.3, 4.7], [1, 2.2, 0.35, 6.4, 5.1], [1, 1.0, 1.0, 2.2, 1.9], [0, 3.1, 2.6, 4.0, 5.5]])
    return inp, rois


def test_roi_align_against_numpy_kernel_and_finite_differences():
    torch = lucid
    ra = roi_align_page(torch)
    rng = np.random.default_rng(4)
    inp, rois = _roi_inputs(rng)
    for sampling_ratio, aligned, scale in ((2, True, 1.0), (-1, False, 1.0), (-1, True, 0.8), (1, False, 0.5)):
        out = ra.roi_align(torch.tensor(inp), torch.tensor(rois), (3, 2), scale, sampling_ratio, aligned)
        np.testing.assert_allclose(_np(out), _np_roi_align(inp, rois, scale, 3, 2, sampling_ratio, aligned),
                                   rtol=1e-12, atol=1e-12)
    # list-of-boxes form goes through convert_boxes_to_roi_format
    boxes = [torch.tensor(rois[rois[:, 0] == i, 1:]) for i in range(2)]
    rois_sorted = np.concatenate([rois[rois[:, 0] == i] for i in range(2)])
    np.testing.assert_array_equal(_np(ra.convert_boxes_to_roi_format(boxes)), rois_sorted)
    out = ra.roi_align(torch.tensor(inp, dtype=torch.float32), [b.float() for b in boxes], 2, sampling_ratio=2)
    assert out.dtype == torch.float32
    np.testing.assert_allclose(_np(out), _np_roi_align(inp, rois_sorted, 1.0, 2, 2, 2, False), rtol=1e-5, atol=1e-5)

    # gradients with respect to the features and the box coordinates (float64 finite differences)
    x = torch.tensor(inp, requires_grad=True)
    r = torch.tensor(rois, requires_grad=True)
    wout = rng.normal(size=(4, 2, 3, 2))
    (ra.roi_align(x, r, (3, 2), 1.0, 2, True) * torch.tensor(wout)).sum().backward()
    gx = _fd_grad(lambda z: float((_np_roi_align(z, rois, 1.0, 3, 2, 2, True) * wout).sum()), inp, eps=1e-5)
    np.testing.assert_allclose(_np(x.grad), gx, rtol=1e-6, atol=1e-8)
    gr = _fd_grad(lambda z: float((_np_roi_align(inp, np.concatenate([rois[:, :1], z], 1), 1.0, 3, 2, 2, True)
                                   * wout).sum()), rois[:, 1:], eps=1e-6)
    np.testing.assert_allclose(_np(r.grad)[:, 1:], gr, rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(_np(r.grad)[:, 0], 0.0)


# ====================================================================== tests: detection utils
def test_box_coder_matcher_sampler_and_anchor_generator():
    torch = lucid
    dt = detection_page(torch)
    rng = np.random.default_rng(5)
    gt, anchors = _rand_boxes(rng, 6), _rand_boxes(rng, 6)
    coder = dt.BoxCoder((10.0, 10.0, 5.0, 5.0))
    (codes_a, codes_b) = coder.encode([torch.tensor(gt[:2]), torch.tensor(gt[2:])],
                                      [torch.tensor(anchors[:2]), torch.tensor(anchors[2:])])
    assert codes_a.shape == (2, 4) and codes_b.shape == (4, 4)
    aw, ah = anchors[:, 2] - anchors[:, 0], anchors[:, 3] - anchors[:, 1]
    gw, gh = gt[:, 2] - gt[:, 0], gt[:, 3] - gt[:, 1]
    ref = np.stack([10 * ((gt[:, 0] + gw / 2) - (anchors[:, 0] + aw / 2)) / aw,
                    10 * ((gt[:, 1] + gh / 2) - (anchors[:, 1] + ah / 2)) / ah,
                    5 * np.log(gw / aw), 5 * np.log(gh / ah)], 1)
    codes = torch.cat([codes_a, codes_b])
    np.testing.assert_allclose(_np(codes), ref, rtol=1e-12, atol=1e-12)
    decoded = coder.decode(codes, [torch.tensor(anchors[:2]), torch.tensor(anchors[2:])])
    assert decoded.shape == (6, 1, 4)
    np.testing.assert_allclose(_np(decoded)[:, 0], gt, rtol=1e-12, atol=1e-12)  # round trip
    # two classes of codes per box, the width clip at log(1000/16)
    big = torch.tensor(np.concatenate([ref, ref + [0, 0, 100, 0]], 1))
    dec2 = _np(coder.decode_single(big, torch.tensor(anchors)))
    np.testing.assert_allclose(dec2[:, :4], gt, rtol=1e-12)
    np.testing.assert_allclose(dec2[:, 6] - dec2[:, 4], aw * 1000 / 16, rtol=1e-12)

    # Matcher: thresholds and low-quality matches against a NumPy recomputation
    q = np.array([[0.9, 0.1, 0.45, 0.2, 0.05],
                  [0.3, 0.2, 0.6, 0.35, 0.1],
                  [0.1, 0.25, 0.2, 0.15, 0.02]])

    def np_match(q, hi, lo, allow):
        best, arg = q.max(0), q.argmax(0)
        m = arg.copy()
        m[best < lo] = -1
        m[(best >= lo) & (best < hi)] = -2
        if allow:
            for g in range(q.shape[0]):
                for p in np.nonzero(q[g] == q[g].max())[0]:
                    m[p] = arg[p]
        return m.tolist()

    for allow in (False, True):
        got = dt.Matcher(0.7, 0.3, allow)(torch.tensor(q))
        assert got.tolist() == np_match(q, 0.7, 0.3, allow)
    assert dt.Matcher(0.7, 0.3, True)(torch.tensor(q)).tolist() == [0, 2, 1, -2, -1]  # gt 2 keeps its best (0.25), gt 1 too (0.6)
    with pytest.raises(ValueError, match="No ground-truth boxes"):
        dt.Matcher(0.7, 0.3)(torch.zeros(0, 4))

    # BalancedPositiveNegativeSampler: fixed proportions, masks on the right elements
    torch.manual_seed(0)
    matched = [torch.tensor([1, 0, -1, 2, 0, 0, 3, 0, -2, 0, 0, 1]), torch.tensor([0, 0, -1, 1])]
    pos, neg = dt.BalancedPositiveNegativeSampler(6, 0.5)(matched)
    for m, p, n, (npos, nneg) in zip(matched, pos, neg, ((3, 3), (1, 2))):
        mm, pp, nn_ = np.array(m.tolist()), np.array(p.tolist()), np.array(n.tolist())
        assert p.dtype == torch.uint8 and pp.sum() == npos and nn_.sum() == nneg
        assert np.all(mm[pp == 1] >= 1) and np.all(mm[nn_ == 1] == 0)

    # AnchorGenerator: base anchors round(+-w/2, +-h/2), shifted on each feature map's grid
    gen = dt.AnchorGenerator(sizes=((8, 16), (32,)), aspect_ratios=((0.5, 1.0), (2.0,)))
    assert gen.num_anchors_per_location() == [4, 1]
    images = dt.ImageList(torch.zeros(2, 3, 32, 48), [(32, 48), (30, 40)])
    feats = [torch.zeros(2, 4, 4, 6), torch.zeros(2, 4, 2, 3)]
    out = gen(images, feats)
    assert len(out) == 2 and out[0].shape == (4 * 24 + 6, 4)

    def np_anchors(scales, ratios, gh, gw, sy, sx):
        hr = np.sqrt(np.array(ratios, dtype=np.float32))
        ws = ((1 / hr)[:, None] * np.array(scales, dtype=np.float32)[None]).reshape(-1)
        hs = (hr[:, None] * np.array(scales, dtype=np.float32)[None]).reshape(-1)
        base = np.round(np.stack([-ws, -hs, ws, hs], 1) / 2)
        yy, xx = np.meshgrid(np.arange(gh) * sy, np.arange(gw) * sx, indexing="ij")
        shifts = np.stack([xx.ravel(), yy.ravel(), xx.ravel(), yy.ravel()], 1)
        return (shifts[:, None] + base[None]).reshape(-1, 4)

    ref = np.concatenate([np_anchors((8, 16), (0.5, 1.0), 4, 6, 8, 8), np_anchors((32,), (2.0,), 2, 3, 16, 16)])
    np.testing.assert_array_equal(_np(out[0]), ref)
    np.testing.assert_array_equal(_np(out[1]), ref)
    assert out[0].dtype == torch.float32


# ====================================================================== tests: models
def _train(torch, model, x, y, steps, lr):
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


def test_mobilenetv2_shufflenet_squeezenet_blocks():
    torch = lucid
    md = models_page(torch)
    # _make_divisible: nearest multiple of 8, never more than 10% below
    assert [md._make_divisible(v, 8) for v in (32 * 0.25, 1280, 24 * 0.25, 16 * 0.25, 10, 100, 37)] == \
        [8, 1280, 8, 8, 16, 104, 40]
    rng = np.random.default_rng(6)
    torch.manual_seed(0)
    net = md.MobileNetV2(num_classes=3, width_mult=0.25, inverted_residual_setting=[[1, 16, 1, 1], [6, 24, 2, 2]],
                         dropout=0.0)
    blocks = list(net.features)
    assert [b.use_res_connect for b in blocks[1:4]] == [True, False, True]  # 8->8 s1, 8->8 s2, 8->8 s1
    assert net.last_channel == 1280 and blocks[-1].out_channels == 1280
    x = torch.tensor(rng.normal(size=(4, 3, 16, 16)), dtype=torch.float32)
    y = torch.tensor([0, 1, 2, 1])
    assert net(x).shape == (4, 3)
    losses = _train(torch, net, x, y, 8, 0.05)
    assert losses[-1] < 0.5 * losses[0], losses
    # the residual block adds its input: block(x) - x is its conv stack (eval mode, BN statistics fixed)
    net.eval()
    h = blocks[0](x)
    np.testing.assert_allclose(_np(blocks[1](h) - h), _np(blocks[1].conv(h)), rtol=1e-5, atol=1e-6)

    # channel_shuffle against a NumPy reshape/transpose
    z = rng.normal(size=(2, 6, 3, 2))
    np.testing.assert_array_equal(_np(md.channel_shuffle(torch.tensor(z), 3)),
                                  z.reshape(2, 3, 2, 3, 2).transpose(0, 2, 1, 3, 4).reshape(2, 6, 3, 2))
    # ShuffleNetV2 block: stride 1 keeps x1 (the first half) untouched, at even channels after the shuffle
    blk = md.ShuffleInvertedResidual(8, 8, 1).double()
    zz = torch.tensor(rng.normal(size=(2, 8, 5, 5)))
    np.testing.assert_array_equal(_np(blk(zz))[:, 0::2], _np(zz)[:, :4])
    down = md.ShuffleInvertedResidual(4, 8, 2).double()
    assert down(torch.tensor(rng.normal(size=(2, 4, 5, 5)))).shape == (2, 8, 3, 3)
    with pytest.raises(ValueError, match="Invalid combination of stride 1, inp 6 and oup 8"):
        md.ShuffleInvertedResidual(6, 8, 1)
    # its input gradient by float64 finite differences (training-mode BatchNorm included)
    zin = rng.normal(size=(2, 4, 3, 3))
    wout = rng.normal(size=(2, 8, 2, 2))
    zt = torch.tensor(zin, requires_grad=True)
    (down(zt) * torch.tensor(wout)).sum().backward()
    f = lambda q: float((_np(down(torch.tensor(q))) * wout).sum())  # noqa: E731
    at = _some(rng, zin.shape, 12)
    fd = _fd_grad(f, zin, at=at)
    np.testing.assert_allclose([_np(zt.grad)[i] for i in at], [fd[i] for i in at], rtol=1e-5, atol=1e-7)

    # squeezenet Fire: 1x1 squeeze, then [relu(1x1), relu(3x3)] concatenated
    fire = md.Fire(4, 2, 3, 5).double()
    _load(torch, fire, 60, scale=0.6)
    p = {k: _np(v) for k, v in fire.state_dict().items()}
    xin = rng.normal(size=(2, 4, 5, 5))
    out = _np(fire(torch.tensor(xin)))
    assert out.shape == (2, 8, 5, 5)
    sq = np.maximum(np.einsum("oc,nchw->nohw", p["squeeze.weight"][:, :, 0, 0], xin) + p["squeeze.bias"][:, None, None], 0)
    e1 = np.maximum(np.einsum("oc,nchw->nohw", p["expand1x1.weight"][:, :, 0, 0], sq) + p["expand1x1.bias"][:, None, None], 0)
    sqp = np.pad(sq, ((0, 0), (0, 0), (1, 1), (1, 1)))
    e3 = np.zeros((2, 5, 5, 5))
    for dy in range(3):
        for dx in range(3):
            e3 += np.einsum("oc,nchw->nohw", p["expand3x3.weight"][:, :, dy, dx], sqp[:, :, dy:dy + 5, dx:dx + 5])
    e3 = np.maximum(e3 + p["expand3x3.bias"][:, None, None], 0)
    np.testing.assert_allclose(out, np.concatenate([e1, e3], 1), rtol=1e-10, atol=1e-12)


def test_densenet_block_memory_efficient_checkpoint_matches_plain():
    torch = lucid
    md = models_page(torch)
    rng = np.random.default_rng(7)
    xin = rng.normal(size=(2, 4, 4, 4))
    grads, stats = [], []
    for memory_efficient in (False, True):
        block = md._DenseBlock(2, 4, bn_size=2, growth_rate=3, drop_rate=0.0, memory_efficient=memory_efficient).double()
        _load(torch, block, 70)
        rm0 = _np(block.denselayer1.norm1.running_mean)
        trans = md._Transition(10, 5).double()
        _load(torch, trans, 71)
        x = torch.tensor(xin, requires_grad=True)
        out = trans(block(x))
        assert out.shape == (2, 5, 2, 2)
        (out ** 2).sum().backward()
        grads.append([_np(x.grad)] + [_np(p.grad) for p in block.parameters()])
        stats.append(_np(block.denselayer1.norm1.running_mean))
    for a, b in zip(*grads):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    # the checkpoint recomputes norm1 in the backward, so its running mean takes a second momentum step
    batch_mean = xin.mean(axis=(0, 2, 3))
    np.testing.assert_allclose(stats[0], 0.9 * rm0 + 0.1 * batch_mean, rtol=1e-12)
    np.testing.assert_allclose(stats[1], 0.9 * (0.9 * rm0 + 0.1 * batch_mean) + 0.1 * batch_mean, rtol=1e-12)
    # no input needs a gradient: the plain path, no checkpoint
    layer = md._DenseLayer(4, 3, 2, 0.0, memory_efficient=True).double()
    with torch.no_grad():
        assert layer(torch.tensor(xin)).shape == (2, 3, 4, 4)


# ====================================================================== tests: transforms
def _np_resize_bilinear(img, oh, ow):
    # align_corners=False, no antialias: source = (dst + 0.5) * in / out - 0.5, clamped at 0
    def weights(n_in, n_out):
        src = np.maximum((np.arange(n_out) + 0.5) * n_in / n_out - 0.5, 0.0)
        i0 = src.astype(int)
        i1 = np.minimum(i0 + 1, n_in - 1)
        return i0, i1, src - i0

    y0, y1, ly = weights(img.shape[-2], oh)
    x0, x1, lx = weights(img.shape[-1], ow)
    top = img[..., y0, :] * (1 - ly)[:, None] + img[..., y1, :] * ly[:, None]
    return top[..., x0] * (1 - lx) + top[..., x1] * lx


def test_functional_tensor_color_ops_against_numpy_and_colorsys():
    torch = lucid
    tf = transforms_page(torch)
    rng = np.random.default_rng(8)
    img = rng.uniform(size=(3, 4, 5))
    img[:, 0, 0] = 0.5  # a grey pixel: hue and saturation 0
    t = torch.tensor(img)
    gray = 0.2989 * img[0] + 0.587 * img[1] + 0.114 * img[2]
    np.testing.assert_allclose(_np(tf.rgb_to_grayscale(t)), gray[None], rtol=1e-12)
    g3 = tf.rgb_to_grayscale(t, num_output_channels=3)
    np.testing.assert_allclose(_np(g3), np.broadcast_to(gray, (3, 4, 5)), rtol=1e-12)
    np.testing.assert_allclose(_np(tf.adjust_brightness(t, 1.7)), np.clip(1.7 * img, 0, 1), rtol=1e-12)
    np.testing.assert_allclose(_np(tf.adjust_contrast(t, 1.5)), np.clip(1.5 * img - 0.5 * gray.mean(), 0, 1),
                               rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(_np(tf.adjust_saturation(t, 0.3)), np.clip(0.3 * img + 0.7 * gray, 0, 1), rtol=1e-12)
    with pytest.raises(ValueError, match=r"brightness_factor \(-1\) is not non-negative"):
        tf.adjust_brightness(t, -1)
    # hue through _rgb2hsv / _hsv2rgb (float32 inside) against colorsys
    for factor in (0.2, -0.35):
        out = _np(tf.adjust_hue(t.float(), factor))
        ref = np.zeros_like(img)
        for i in range(4):
            for j in range(5):
                h, s, v = colorsys.rgb_to_hsv(*img.astype(np.float32)[:, i, j].astype(np.float64))
                ref[:, i, j] = colorsys.hsv_to_rgb((h + factor) % 1.0, s, v)
        np.testing.assert_allclose(out, ref, atol=2e-6)
    hsv = _np(tf._rgb2hsv(t))
    for i in range(4):
        for j in range(5):
            np.testing.assert_allclose(hsv[:, i, j], colorsys.rgb_to_hsv(*img[:, i, j]), atol=1e-12)
    np.testing.assert_allclose(_np(tf._hsv2rgb(tf._rgb2hsv(t))), img, atol=1e-12)
    # uint8 hue goes through convert_image_dtype both ways
    u8 = (img * 255).astype(np.uint8)
    tu = torch.tensor(u8)
    f = _np(tf.convert_image_dtype(tu, torch.float32))
    np.testing.assert_allclose(f, u8.astype(np.float32) / np.float32(255), rtol=1e-7)
    back = tf.convert_image_dtype(torch.tensor(f, dtype=torch.float32), torch.uint8)
    assert back.dtype == torch.uint8
    np.testing.assert_array_equal(back.cpu().numpy(), (f.astype(np.float32) * np.float32(255.999)).astype(np.uint8))
    assert tf.adjust_hue(tu, 0.1).dtype == torch.uint8
    # normalize, in place and not
    mean, std = [0.5, 0.4, 0.3], [0.2, 0.25, 0.5]
    ref = (img - np.array(mean)[:, None, None]) / np.array(std)[:, None, None]
    np.testing.assert_allclose(_np(tf.normalize(t, mean, std)), ref, rtol=1e-12)
    np.testing.assert_allclose(_np(t), img)  # untouched
    t2 = t.clone()
    tf.normalize(t2, mean, std, inplace=True)
    np.testing.assert_allclose(_np(t2), ref, rtol=1e-12)
    with pytest.raises(ValueError, match="std evaluated to zero"):
        tf.normalize(t, mean, [1.0, 0.0, 1.0])


def test_functional_tensor_geometry_ops_against_numpy():
    torch = lucid
    tf = transforms_page(torch)
    rng = np.random.default_rng(9)
    img = rng.uniform(size=(2, 5, 6))
    t = torch.tensor(img)
    np.testing.assert_array_equal(_np(tf.hflip(t)), img[..., ::-1])
    np.testing.assert_array_equal(_np(tf.vflip(t)), img[..., ::-1, :])
    np.testing.assert_array_equal(_np(tf.crop(t, 1, 2, 3, 3)), img[:, 1:4, 2:5])
    out = _np(tf.crop(t, -1, 3, 4, 5))  # beyond the top and the right: zero padded
    ref = np.zeros((2, 4, 5))
    ref[:, 1:, :3] = img[:, :3, 3:]
    np.testing.assert_array_equal(out, ref)
    for mode, np_mode in (("constant", "constant"), ("edge", "edge"), ("reflect", "reflect"), ("symmetric", "symmetric")):
        got = _np(tf.pad(t, [1, 2, 3, 1], padding_mode=mode))  # left, top, right, bottom
        np.testing.assert_array_equal(got, np.pad(img, ((0, 0), (2, 1), (1, 3)), mode=np_mode))
    np.testing.assert_array_equal(_np(tf.pad(t, 2, fill=3)), np.pad(img, ((0, 0), (2, 2), (2, 2)), constant_values=3))
    np.testing.assert_array_equal(_np(tf.pad(t, [1, 2], padding_mode="edge")),
                                  np.pad(img, ((0, 0), (2, 2), (1, 1)), mode="edge"))
    u8 = torch.tensor((img * 255).astype(np.uint8))
    padded = tf.pad(u8, [1, 1, 1, 1], padding_mode="reflect")
    assert padded.dtype == torch.uint8
    np.testing.assert_array_equal(padded.cpu().numpy(), np.pad((img * 255).astype(np.uint8), ((0, 0), (1, 1), (1, 1)),
                                                               mode="reflect"))
    with pytest.raises(ValueError, match="Padding must be an int or a 1, 2, or 4 element tuple, not a 3"):
        tf.pad(t, [1, 2, 3])
    # resize (bilinear, no antialias), up and down
    for size in ((8, 9), (3, 4)):
        np.testing.assert_allclose(_np(tf.resize(t, list(size), antialias=False)), _np_resize_bilinear(img, *size),
                                   rtol=1e-12, atol=1e-14)
    # gaussian blur: separable normalised kernel, reflect padding, depthwise conv
    k = (3, 5)
    sig = (0.8, 1.3)

    def k1(n, s):
        x = np.linspace(-(n - 1) / 2, (n - 1) / 2, n)
        p = np.exp(-0.5 * (x / s) ** 2)
        return p / p.sum()

    kern = np.outer(k1(k[1], sig[1]), k1(k[0], sig[0]))
    np.testing.assert_allclose(_np(tf._get_gaussian_kernel2d(list(k), list(sig), torch.float64, t.device)), kern,
                               rtol=1e-12)
    padded = np.pad(img, ((0, 0), (2, 2), (1, 1)), mode="reflect")
    ref = np.zeros_like(img)
    for dy in range(5):
        for dx in range(3):
            ref += kern[dy, dx] * padded[:, dy:dy + 5, dx:dx + 6]
    np.testing.assert_allclose(_np(tf.gaussian_blur(t, list(k), list(sig))), ref, rtol=1e-12)
    # affine / rotate through _gen_affine_grid + grid_sample
    sq = rng.uniform(size=(2, 5, 5))
    rot = _np(tf.rotate(torch.tensor(sq), [0.0, -1.0, 0.0, 1.0, 0.0, 0.0]))
    i, j = np.meshgrid(np.arange(5), np.arange(5), indexing="ij")
    np.testing.assert_array_equal(rot, sq[:, j, 4 - i])  # out[i, j] = in[j, 4 - i]
    shifted = _np(tf.affine(t, [1.0, 0.0, 2.0, 0.0, 1.0, -1.0], fill=7.0))
    ref = np.full_like(img, 7.0)
    ref[:, 1:, :4] = img[:, :4, 2:]  # out[i, j] = in[i - 1, j + 2]
    np.testing.assert_array_equal(shifted, ref)
    half = _np(tf.affine(t, [1.0, 0.0, 0.5, 0.0, 1.0, 0.0], interpolation="bilinear"))
    ref = 0.5 * img + 0.5 * np.concatenate([img[..., 1:], np.zeros((2, 5, 1))], -1)
    np.testing.assert_allclose(half, ref, rtol=1e-12, atol=1e-14)
    half_fill = _np(tf.affine(t, [1.0, 0.0, 0.5, 0.0, 1.0, 0.0], interpolation="bilinear", fill=[2.0, 4.0]))
    mask = np.ones(6)
    mask[-1] = 0.5  # the sampled ones-channel: half outside the image in the last column
    ref = ref * mask + (1 - mask) * np.array([2.0, 4.0])[:, None, None]
    np.testing.assert_allclose(half_fill, ref, rtol=1e-12, atol=1e-14)
    assert tf._compute_affine_output_size([0.0, -1.0, 0.0, 1.0, 0.0, 0.0], 6, 4) == (4, 6)
    # 6x5 turned about its centre (3, 2.5): x spans [0.5, 5.5] -> 6 - 0, y spans [-0.5, 5.5] -> 6 - (-1)
    assert tf._compute_affine_output_size([0.0, -1.0, 0.0, 1.0, 0.0, 0.0], 6, 5) == (6, 7)
    wide = tf.rotate(t, [0.0, -1.0, 0.0, 1.0, 0.0, 0.0], expand=True)
    assert wide.shape == (2, 7, 6)
    with pytest.raises(ValueError, match=r"The number of elements in 'fill' cannot broadcast .* \(3 != 2\)"):
        tf.affine(t, [1.0, 0.0, 0.0, 0.0, 1.0, 0.0], fill=[1.0, 2.0, 3.0])
    # erase
    er = _np(tf.erase(t, 1, 2, 2, 3, torch.tensor(-1.0)))
    ref = img.copy()
    ref[:, 1:3, 2:5] = -1
    np.testing.assert_array_equal(er, ref)
    np.testing.assert_array_equal(_np(t), img)


def test_functional_tensor_uint8_ops_against_numpy():
    torch = lucid
    tf = transforms_page(torch)
    rng = np.random.default_rng(10)
    u8 = rng.integers(20, 230, size=(3, 6, 7)).astype(np.uint8)
    u8[2] = rng.integers(0, 256, size=(6, 7))
    t = torch.tensor(u8)
    assert tf.invert(t).dtype == torch.uint8
    np.testing.assert_array_equal(tf.invert(t).cpu().numpy(), 255 - u8)
    for bits in (1, 3, 8):
        np.testing.assert_array_equal(tf.posterize(t, bits).cpu().numpy(), u8 & np.uint8((0xFF << (8 - bits)) & 0xFF))
    np.testing.assert_array_equal(tf.solarize(t, 128).cpu().numpy(), np.where(u8 >= 128, 255 - u8, u8))
    # autocontrast: each channel stretched to [0, 255] (float32 arithmetic, truncated)
    mn = u8.min(axis=(1, 2), keepdims=True).astype(np.float32)
    mx = u8.max(axis=(1, 2), keepdims=True).astype(np.float32)
    ref = np.clip((u8.astype(np.float32) - mn) * (np.float32(255) / (mx - mn)), 0, 255).astype(np.uint8)
    np.testing.assert_array_equal(tf.autocontrast(t).cpu().numpy(), ref)
    flat = np.stack([np.full((1, 4, 4), 0.3), rng.uniform(0.2, 0.6, (1, 4, 4))])  # two 1-channel images
    ac = _np(tf.autocontrast(torch.tensor(flat)))
    np.testing.assert_allclose(ac[0], 0.3)  # a constant image is left as it is
    np.testing.assert_allclose(ac[1], (flat[1] - flat[1].min()) / (flat[1].max() - flat[1].min()), rtol=1e-12)

    # equalize: PIL's histogram equalisation, recomputed in NumPy per channel
    def np_equalize(c):
        hist = np.bincount(c.ravel(), minlength=256)
        step = hist[hist != 0][:-1].sum() // 255
        if step == 0:
            return c
        lut = (np.cumsum(hist) + step // 2) // step
        lut = np.clip(np.concatenate([[0], lut[:-1]]), 0, 255)
        return lut[c].astype(np.uint8)

    big = rng.integers(0, 256, size=(2, 3, 24, 24)).astype(np.uint8)  # >255 pixels per channel: step >= 1
    big[0, 1] //= 4  # a dark channel
    eq = tf.equalize(torch.tensor(big))
    assert eq.dtype == torch.uint8
    np.testing.assert_array_equal(eq.cpu().numpy(), np.stack([np.stack([np_equalize(c) for c in im]) for im in big]))
    np.testing.assert_array_equal(tf.equalize(t).cpu().numpy(), np.stack([np_equalize(c) for c in u8]))  # step 0
    with pytest.raises(TypeError, match="Only torch.uint8 image tensors are supported, but found"):
        tf.equalize(t.float())


# ====================================================================== parity with PyTorch
def _compare(a, b, rtol, atol):
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=rtol, atol=atol, err_msg=k)


def _boxes_run(torch):
    bx, ls = boxes_page(torch), losses_page(torch)
    rng = np.random.default_rng(11)
    a, b = _rand_boxes(rng, 6), _rand_boxes(rng, 6)
    b[1] = a[1] + 30
    out = {}
    ta = torch.tensor(a, requires_grad=True)
    tb = torch.tensor(b)
    for name in ("box_iou", "generalized_box_iou", "distance_box_iou", "complete_box_iou"):
        out[name] = _np(getattr(bx, name)(ta, tb))
    for fmt in ("xywh", "cxcywh"):
        out[fmt] = _np(bx.box_convert(ta, "xyxy", fmt))
    rot = torch.tensor(np.concatenate([a[:, :4], rng.uniform(-90, 90, (6, 1))], 1))
    out["xyxyxyxy"] = _np(bx.box_convert(rot, "cxcywhr", "xyxyxyxy"))
    out["back"] = _np(bx.box_convert(bx.box_convert(rot, "xywhr", "xyxyxyxy"), "xyxyxyxy", "xywhr"))
    scores = torch.tensor(rng.permutation(12) / 12.0 + 0.01)
    both = torch.cat([ta, ta + torch.tensor(rng.uniform(-1, 1, (6, 4)))]).detach()
    out["nms"] = np.array(bx.nms(both, scores, 0.4).tolist())
    out["batched"] = np.array(bx._batched_nms_coordinate_trick(both, scores, torch.tensor([0, 1] * 6), 0.4).tolist())
    out["clip"] = _np(bx.clip_boxes_to_image(ta * 2 - 5, (20, 15)))
    total = 0
    for name in ("generalized_box_iou_loss", "complete_box_iou_loss"):
        loss = getattr(ls, name)(ta, tb, reduction="sum")
        out[name] = _np(loss)
        total = total + loss
    out["diou_loss"] = _np(ls.distance_box_iou_loss(ta, tb))
    logits = torch.tensor(rng.normal(size=(5, 3)) * 2, requires_grad=True)
    targets = torch.tensor((rng.uniform(size=(5, 3)) > 0.5) * 1.0)
    out["focal"] = _np(ls.sigmoid_focal_loss(logits, targets))
    (total + ls.sigmoid_focal_loss(logits, targets, reduction="mean")).backward()
    out["grad_boxes"], out["grad_logits"] = _np(ta.grad), _np(logits.grad)
    return out


def test_boxes_and_losses_torch_parity():
    torch = pytest.importorskip("torch")
    # float64 throughout: only summation order differs
    _compare(_boxes_run(lucid), _boxes_run(torch), rtol=1e-10, atol=1e-12)


def _roi_run(torch):
    ra = roi_align_page(torch)
    rng = np.random.default_rng(12)
    inp, rois = _roi_inputs(rng)
    out = {}
    for sr, aligned in ((2, True), (-1, False), (0, True)):
        x = torch.tensor(inp, requires_grad=True)
        r = torch.tensor(rois, requires_grad=True)
        y = ra.roi_align(x, r, (2, 3), 0.9, sr, aligned)
        (y * torch.tensor(rng.normal(size=y.shape))).sum().backward()
        out[f"y{sr}{aligned}"], out[f"gx{sr}{aligned}"], out[f"gr{sr}{aligned}"] = _np(y), _np(x.grad), _np(r.grad)
    return out


def test_roi_align_torch_parity():
    torch = pytest.importorskip("torch")
    _compare(_roi_run(lucid), _roi_run(torch), rtol=1e-10, atol=1e-12)


def _detection_run(torch):
    dt, bx = detection_page(torch), boxes_page(torch)
    rng = np.random.default_rng(13)
    gt, props = _rand_boxes(rng, 3), _rand_boxes(rng, 8)
    coder = dt.BoxCoder((1.0, 1.0, 1.0, 1.0))
    out = {}
    codes = coder.encode_single(torch.tensor(gt[[0, 1, 2, 0, 1, 2, 0, 1]]), torch.tensor(props))
    out["codes"] = _np(codes)
    out["decoded"] = _np(coder.decode(codes * 3, [torch.tensor(props[:5]), torch.tensor(props[5:])]))
    q = bx.box_iou(torch.tensor(gt), torch.tensor(props))
    for allow in (False, True):
        out[f"match{allow}"] = np.array(dt.Matcher(0.5, 0.2, allow)(q).tolist())
    gen = dt.AnchorGenerator(sizes=(16, 32), aspect_ratios=(0.5, 1.0, 2.0))
    anchors = gen(dt.ImageList(torch.zeros(1, 3, 40, 40), [(40, 40)]), [torch.zeros(1, 2, 5, 5), torch.zeros(1, 2, 3, 3)])
    out["anchors"] = _np(anchors[0])
    return out


def test_detection_utils_torch_parity():
    torch = pytest.importorskip("torch")
    _compare(_detection_run(lucid), _detection_run(torch), rtol=1e-10, atol=1e-10)


def _models_run(torch):
    md, ms = models_page(torch), misc_page(torch)
    rng = np.random.default_rng(14)
    out = {}
    torch.manual_seed(0)
    net = md.MobileNetV2(num_classes=3, width_mult=0.25, inverted_residual_setting=[[1, 16, 1, 1], [6, 24, 2, 2]],
                         dropout=0.0).double()
    _load(torch, net, 140)
    x = torch.tensor(rng.normal(size=(4, 3, 16, 16)))
    out["mobilenet_losses"] = np.array(_train(torch, net, x, torch.tensor([0, 1, 2, 1]), 3, 0.05))
    net.eval()
    out["mobilenet_eval"] = _np(net(x))
    blk = md.ShuffleInvertedResidual(4, 8, 2).double()
    _load(torch, blk, 141)
    z = torch.tensor(rng.normal(size=(2, 4, 5, 5)), requires_grad=True)
    (blk(z) ** 2).sum().backward()
    out["shuffle_grad"] = _np(z.grad)
    fire = md.Fire(4, 2, 3, 5).double()
    _load(torch, fire, 142)
    out["fire"] = _np(fire(torch.tensor(rng.normal(size=(2, 4, 5, 5)))))
    block = md._DenseBlock(2, 4, bn_size=2, growth_rate=3, drop_rate=0.0, memory_efficient=True).double()
    _load(torch, block, 143)
    d = torch.tensor(rng.normal(size=(2, 4, 4, 4)), requires_grad=True)
    (block(d) ** 2).sum().backward()
    out["dense_grad"] = _np(d.grad)
    out["dense_rm"] = _np(block.denselayer2.norm1.running_mean)
    out["dense_rv"] = _np(block.denselayer2.norm1.running_var)
    frozen = ms.FrozenBatchNorm2d(4).double()
    _load(torch, frozen, 144)
    se = ms.SqueezeExcitation(4, 2, activation=torch.nn.SiLU, scale_activation=torch.nn.Hardsigmoid).double()
    _load(torch, se, 145, scale=1.0)
    y = torch.tensor(rng.normal(size=(2, 4, 3, 3)), requires_grad=True)
    (se(frozen(y)) ** 3).sum().backward()
    out["se_grad"] = _np(y.grad)
    return out


def test_misc_and_models_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = _models_run(lucid), _models_run(torch)
    # PyTorch's float64 hardsigmoid backward multiplies by the float32 constant 1.0f / 6.0f
    # (0.1666666716...), Lucid by 1/6 in float64: the SE gradient agrees to float32 precision only.
    np.testing.assert_allclose(a.pop("se_grad"), b.pop("se_grad"), rtol=2e-7, atol=1e-12)
    _compare(a, b, rtol=1e-9, atol=1e-11)


def _transforms_run(torch):
    tf = transforms_page(torch)
    rng = np.random.default_rng(15)
    img = torch.tensor(rng.uniform(size=(2, 3, 6, 7)), dtype=torch.float32)
    u8 = torch.tensor(rng.integers(0, 256, size=(3, 20, 20)).astype(np.uint8))
    out = {
        "gray": tf.rgb_to_grayscale(img), "bright": tf.adjust_brightness(img, 1.3),
        "contrast": tf.adjust_contrast(img, 0.6), "sat": tf.adjust_saturation(img, 1.8),
        "hue": tf.adjust_hue(img, 0.27), "hue_u8": tf.adjust_hue(u8, -0.1),
        "crop": tf.crop(img, 4, -2, 4, 5), "sym": tf.pad(img, [2, 1, 0, 3], padding_mode="symmetric"),
        "refl": tf.pad(img, [2, 1], padding_mode="reflect"),
        "up": tf.resize(img, [9, 11], antialias=False), "down_aa": tf.resize(img, [3, 4], antialias=True),
        "bicubic": tf.resize(u8, [13, 9], interpolation="bicubic", antialias=False),
        "nearest": tf.resize(img, [4, 10], interpolation="nearest"),
        "norm": tf.normalize(img, [0.4, 0.5, 0.6], [0.2, 0.3, 0.4]),
        "blur": tf.gaussian_blur(img, [5, 3], [1.1, 0.7]), "blur_u8": tf.gaussian_blur(u8, [3, 3], [0.9, 0.9]),
        "affine": tf.affine(img, [0.8, -0.3, 1.2, 0.25, 0.9, -0.7], interpolation="bilinear", fill=[0.1, 0.2, 0.3]),
        "rotate": tf.rotate(img, [0.866, -0.5, 0.3, 0.5, 0.866, -0.2], interpolation="bilinear", expand=True),
        "rotate_u8": tf.rotate(u8, [0.0, 1.0, 0.0, -1.0, 0.0, 0.0], fill=9),
        "posterize": tf.posterize(u8, 2), "solarize": tf.solarize(u8, 100), "invert": tf.invert(img),
        "autocontrast": tf.autocontrast(u8), "equalize": tf.equalize(u8),
        "erase": tf.erase(img, 1, 1, 2, 3, torch.tensor([0.0, 0.5, 1.0])[:, None, None]),
    }
    return {k: _np(v) for k, v in out.items()}


def test_functional_tensor_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = _transforms_run(lucid), _transforms_run(torch)
    exact = ("crop", "sym", "refl", "nearest", "rotate_u8", "posterize", "solarize", "autocontrast", "equalize")
    _compare({k: a[k] for k in exact}, {k: b[k] for k in exact}, rtol=0, atol=0)
    rounded = ("hue_u8", "bicubic", "blur_u8")  # uint8 results: float32 rounding may move a value by one
    _compare({k: a[k] for k in rounded}, {k: b[k] for k in rounded}, rtol=0, atol=1)
    rest = sorted(set(a) - set(exact) - set(rounded))
    _compare({k: a[k] for k in rest}, {k: b[k] for k in rest}, rtol=1e-5, atol=2e-6)


# ====================================================================== tests: FPN, poolers, V3, MBConv
def _np_conv(x, w, b, pad):
    """Stride-1 cross-correlation, NumPy (N, C, H, W) x (O, C, k, k)."""
    k = w.shape[-1]
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    h, wd = x.shape[2] + 2 * pad - k + 1, x.shape[3] + 2 * pad - k + 1
    out = np.zeros((x.shape[0], w.shape[0], h, wd)) + b[:, None, None]
    for dy in range(k):
        for dx in range(k):
            out += np.einsum("oc,nchw->nohw", w[:, :, dy, dx], xp[:, :, dy:dy + h, dx:dx + wd])
    return out


def test_feature_pyramid_network_and_multiscale_roi_align_against_numpy():
    torch = lucid
    fp = fpn_poolers_page(torch)
    rng = np.random.default_rng(16)
    fpn = fp.FeaturePyramidNetwork([2, 3, 4], 3, extra_blocks=fp.LastLevelMaxPool()).double()
    np.testing.assert_array_equal(_np(fpn.inner_blocks[0].bias), 0.0)  # kaiming_uniform_(a=1), bias 0
    bound = math.sqrt(6 / ((1 + 1) * 2))  # gain sqrt(2 / (1 + a^2)) = 1, fan_in 2: U(-sqrt(3/2), sqrt(3/2))
    assert np.abs(_np(fpn.inner_blocks[0].weight)).max() <= bound
    _load(torch, fpn, 160, scale=0.5)
    feats = OrderedDict([("c2", rng.normal(size=(1, 2, 8, 8))), ("c3", rng.normal(size=(1, 3, 4, 4))),
                         ("c4", rng.normal(size=(1, 4, 3, 3)))])  # 3x3 -> 4x4: nearest repeats a row/column
    out = fpn(OrderedDict((k, torch.tensor(v)) for k, v in feats.items()))
    assert list(out.keys()) == ["c2", "c3", "c4", "pool"]
    p = {k: _np(v) for k, v in fpn.state_dict().items()}

    def nearest(x, size):
        iy = np.floor(np.arange(size[0]) * x.shape[2] / size[0]).astype(int)
        ix = np.floor(np.arange(size[1]) * x.shape[3] / size[1]).astype(int)
        return x[:, :, iy][:, :, :, ix]

    vals = list(feats.values())
    last = _np_conv(vals[2], p["inner_blocks.2.weight"], p["inner_blocks.2.bias"], 0)
    ref = [_np_conv(last, p["layer_blocks.2.weight"], p["layer_blocks.2.bias"], 1)]
    for i in (1, 0):
        last = _np_conv(vals[i], p[f"inner_blocks.{i}.weight"], p[f"inner_blocks.{i}.bias"], 0) + nearest(last, vals[i].shape[2:])
        ref.insert(0, _np_conv(last, p[f"layer_blocks.{i}.weight"], p[f"layer_blocks.{i}.bias"], 1))
    ref.append(ref[-1][:, :, ::2, ::2])  # max_pool2d(kernel 1, stride 2)
    for got, r in zip(out.values(), ref):
        np.testing.assert_allclose(_np(got), r, rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="in_channels=0 is currently not supported"):
        fp.FeaturePyramidNetwork([2, 0], 3)

    # MultiScaleRoIAlign: a 64x64 image, maps at 1/4 and 1/8; FPN level of each box from its size
    pooler = fp.MultiScaleRoIAlign(["p2", "p3"], 2, sampling_ratio=2, canonical_scale=32, canonical_level=3)
    maps = OrderedDict([("p2", rng.normal(size=(2, 3, 16, 16))), ("unused", rng.normal(size=(2, 3, 4, 4))),
                        ("p3", rng.normal(size=(2, 3, 8, 8)))])
    boxes = [np.array([[4.0, 4.0, 20.0, 22.0], [10.0, 8.0, 50.0, 60.0]]),
             np.array([[30.0, 2.0, 41.0, 15.0], [0.0, 0.0, 63.0, 40.0], [12.0, 30.0, 15.0, 33.0]])]
    tmaps = OrderedDict((k, torch.tensor(v)) for k, v in maps.items())
    tboxes = [torch.tensor(b) for b in boxes]
    res = pooler(tmaps, tboxes, [(64, 64), (60, 62)])
    assert pooler.scales == [0.25, 0.125]
    allb = np.concatenate(boxes)
    lv = np.clip(np.floor(3 + np.log2(np.sqrt((allb[:, 2] - allb[:, 0]) * (allb[:, 3] - allb[:, 1])) / 32) + 1e-6), 2, 3) - 2
    assert pooler.map_levels(tboxes).tolist() == lv.astype(int).tolist() == [0, 1, 0, 1, 0]
    rois = np.concatenate([np.concatenate([np.full((len(b), 1), i), b], 1) for i, b in enumerate(boxes)])
    ref = np.zeros((5, 3, 2, 2))
    for k in range(5):
        fmap, scale = (maps["p2"], 0.25) if lv[k] == 0 else (maps["p3"], 0.125)
        ref[k] = _np_roi_align(fmap, rois[k:k + 1], scale, 2, 2, 2, False)[0]
    np.testing.assert_allclose(_np(res), ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(_np(pooler(tmaps, tboxes, [(64, 64)], onnx_merge=True)), ref, rtol=1e-12, atol=1e-12)
    single = fp.MultiScaleRoIAlign(["p3"], (2, 3), sampling_ratio=1)
    np.testing.assert_allclose(_np(single(tmaps, tboxes, [(64, 64)])),
                               _np_roi_align(maps["p3"], rois, 0.125, 2, 3, 1, False), rtol=1e-12, atol=1e-12)


def test_mobilenetv3_block_and_efficientnet_mbconv_with_stochastic_depth():
    torch = lucid
    nn = torch.nn
    md = models_page(torch)
    rng = np.random.default_rng(17)
    cnf = md.InvertedResidualConfig(16, 3, 64, 16, True, "HS", 1, 1, 0.25)
    assert (cnf.input_channels, cnf.expanded_channels, cnf.out_channels, cnf.use_hs) == (8, 16, 8, True)
    blk = md.InvertedResidualV3(cnf, partial(nn.BatchNorm2d, eps=0.001, momentum=0.01)).double()
    assert [type(m).__name__ for m in blk.block] == ["Conv2dNormActivation", "Conv2dNormActivation",
                                                     "SqueezeExcitation", "Conv2dNormActivation"]
    assert type(blk.block[0][2]).__name__ == "Hardswish" and type(blk.block[2].scale_activation).__name__ == "Hardsigmoid"
    assert blk.block[2].fc1.out_channels == 8 and blk.use_res_connect
    _load(torch, blk, 170, scale=0.5)
    x = rng.normal(size=(2, 8, 2, 2))
    xt = torch.tensor(x, requires_grad=True)
    w = rng.normal(size=(2, 8, 2, 2))
    (blk(xt) * torch.tensor(w)).sum().backward()  # training-mode BatchNorm, in-place residual add
    f = lambda q: float((_np(blk(torch.tensor(q))) * w).sum())  # noqa: E731
    at = _some(rng, x.shape, 16)
    fd = _fd_grad(f, x, at=at)
    np.testing.assert_allclose([_np(xt.grad)[i] for i in at], [fd[i] for i in at], rtol=1e-5, atol=1e-7)
    blk.eval()
    np.testing.assert_allclose(_np(blk(torch.tensor(x))) - x, _np(blk.block(torch.tensor(x))), rtol=1e-12, atol=1e-12)
    dil = md.InvertedResidualV3(md.InvertedResidualConfig(8, 3, 8, 16, False, "RE", 2, 2, 1.0), nn.BatchNorm2d)
    assert len(dil.block) == 2 and dil.block[0][0].stride == (1, 1) and dil.block[0][0].padding == (2, 2)
    assert not dil.use_res_connect

    # EfficientNet MBConv: SiLU, SE, and stochastic depth on the residual branch (row mode)
    mcnf = md.MBConvConfig(4, 3, 1, 16, 16, 2, width_mult=0.5, depth_mult=1.6)
    assert (mcnf.input_channels, mcnf.out_channels, mcnf.num_layers) == (8, 8, 4)
    mb = md.MBConv(mcnf, 0.5, nn.BatchNorm2d).double()
    assert mb.block[2].fc1.out_channels == 2 and mb.block[0].out_channels == 32
    _load(torch, mb, 171, scale=0.4)
    torch.manual_seed(3)
    xs = rng.normal(size=(16, 8, 3, 3))
    out = _np(mb(torch.tensor(xs)))
    branch = _np(mb.block(torch.tensor(xs)))  # training-mode BN: the same batch gives the same branch
    kept = [bool(np.allclose(out[i], xs[i] + branch[i] / 0.5, rtol=1e-12)) for i in range(16)]
    dropped = [bool(np.array_equal(out[i], xs[i])) for i in range(16)]
    assert all(k != d for k, d in zip(kept, dropped)) and 2 <= sum(kept) <= 14
    mb.eval()
    np.testing.assert_allclose(_np(mb(torch.tensor(xs))), xs + _np(mb.block(torch.tensor(xs))), rtol=1e-12)
    # with p = 0, a few SGD steps on a regression target lower the loss
    mb0 = md.MBConv(mcnf, 0.0, nn.BatchNorm2d)
    xt = torch.tensor(xs, dtype=torch.float32)
    target = torch.tensor(rng.normal(size=(16, 8, 3, 3)), dtype=torch.float32)
    opt = torch.optim.SGD(mb0.parameters(), lr=0.1)
    losses = []
    for _ in range(6):
        opt.zero_grad()
        loss = ((mb0(xt) - target) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < 0.9 * losses[0], losses


def _fpn_v3_run(torch):
    fp, md = fpn_poolers_page(torch), models_page(torch)
    nn = torch.nn
    rng = np.random.default_rng(18)
    out = {}
    fpn = fp.FeaturePyramidNetwork([2, 3], 4, extra_blocks=fp.LastLevelMaxPool()).double()
    _load(torch, fpn, 180)
    feats = OrderedDict([("a", torch.tensor(rng.normal(size=(2, 2, 10, 12)), requires_grad=True)),
                         ("b", torch.tensor(rng.normal(size=(2, 3, 5, 6)), requires_grad=True))])
    res = fpn(feats)
    pooler = fp.MultiScaleRoIAlign(["a", "b"], 3, sampling_ratio=-1, canonical_scale=16, canonical_level=2)
    boxes = [torch.tensor([[1.0, 2.0, 30.0, 20.0], [5.0, 5.0, 9.0, 11.0]]), torch.tensor([[0.0, 0.0, 40.0, 35.0]])]
    pooled = pooler(res, boxes, [(40, 48)])
    (sum((v ** 2).sum() for v in res.values()) + pooled.sum()).backward()
    out.update({f"fpn_{k}": _np(v) for k, v in res.items()})
    out["pooled"], out["ga"], out["gb"] = _np(pooled), _np(feats["a"].grad), _np(feats["b"].grad)
    blk = md.InvertedResidualV3(md.InvertedResidualConfig(8, 5, 24, 8, True, "HS", 1, 1, 1.0),
                                partial(nn.BatchNorm2d, eps=0.001, momentum=0.01)).double()
    _load(torch, blk, 181, scale=0.5)
    mb = md.MBConv(md.MBConvConfig(2, 3, 1, 8, 8, 1), 0.0, nn.BatchNorm2d).double()
    _load(torch, mb, 182, scale=0.5)
    x = torch.tensor(rng.normal(size=(3, 8, 5, 5)), requires_grad=True)
    y = mb(blk(x))
    (y ** 2).mean().backward()
    out["v3_mb"], out["v3_mb_grad"] = _np(y), _np(x.grad)
    return out


def test_fpn_poolers_mobilenetv3_mbconv_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = _fpn_v3_run(lucid), _fpn_v3_run(torch)
    # Hardsigmoid's float64 backward in PyTorch uses the float32 constant 1/6 (see the models parity test)
    np.testing.assert_allclose(a.pop("v3_mb_grad"), b.pop("v3_mb_grad"), rtol=1e-6, atol=1e-10)
    _compare(a, b, rtol=1e-10, atol=1e-12)


# ====================================================================== tests: Swin
def _np_window_attention(x, p, ws, heads, shift):
    """Swin (V1) window attention by loops over windows, heads and token pairs; p: the module's state dict."""
    b_, h_, w_, c = x.shape
    ph, pw = -(-h_ // ws[0]) * ws[0], -(-w_ // ws[1]) * ws[1]
    xp = np.zeros((b_, ph, pw, c))
    xp[:, :h_, :w_] = x
    sh = [shift[0] if ws[0] < ph else 0, shift[1] if ws[1] < pw else 0]
    xr = np.roll(xp, (-sh[0], -sh[1]), axis=(1, 2))

    def region(i, n, w, s):  # the three bands of the shifted image: whole windows, wrapped-in part, the rest
        return 0 if i < n - w else (1 if i < n - s else 2)

    label = np.array([[region(r, ph, ws[0], sh[0]) * 3 + region(q, pw, ws[1], sh[1]) if sum(sh) else 0
                       for q in range(pw)] for r in range(ph)])
    d = c // heads
    out = np.zeros_like(xr)
    pos = [(i, j) for i in range(ws[0]) for j in range(ws[1])]
    for b in range(b_):
        for wy in range(ph // ws[0]):
            for wx in range(pw // ws[1]):
                rows = [wy * ws[0] + i for i, _ in pos]
                cols = [wx * ws[1] + j for _, j in pos]
                tok = xr[b, rows, cols]
                qkv = tok @ p["qkv.weight"].T + p["qkv.bias"]
                o = np.zeros((len(pos), c))
                for hd in range(heads):
                    q = qkv[:, hd * d:(hd + 1) * d] * d ** -0.5
                    k = qkv[:, c + hd * d:c + (hd + 1) * d]
                    v = qkv[:, 2 * c + hd * d:2 * c + (hd + 1) * d]
                    a = q @ k.T
                    for n, (i1, j1) in enumerate(pos):
                        for m, (i2, j2) in enumerate(pos):
                            idx = (i1 - i2 + ws[0] - 1) * (2 * ws[1] - 1) + (j1 - j2 + ws[1] - 1)
                            a[n, m] += p["relative_position_bias_table"][idx, hd]
                            if label[rows[n], cols[n]] != label[rows[m], cols[m]]:
                                a[n, m] -= 100.0
                    a = np.exp(a - a.max(1, keepdims=True))
                    o[:, hd * d:(hd + 1) * d] = (a / a.sum(1, keepdims=True)) @ v
                out[b, rows, cols] = o @ p["proj.weight"].T + p["proj.bias"]
    return np.roll(out, (sh[0], sh[1]), axis=(1, 2))[:, :h_, :w_]


def test_swin_shifted_window_attention_patch_merging_and_training():
    torch = lucid
    sw = swin_page(torch)
    rng = np.random.default_rng(19)
    attn = sw.ShiftedWindowAttention(4, [3, 2], [1, 1], 2).double()
    idx = np.array(attn.relative_position_index.tolist())
    ref_idx = [(i1 - i2 + 2) * 3 + (j1 - j2 + 1) for i1 in range(3) for j1 in range(2) for i2 in range(3) for j2 in range(2)]
    assert idx.tolist() == ref_idx
    _load(torch, attn, 190, scale=0.8)
    p = {k: _np(v) for k, v in attn.state_dict().items()}
    x = rng.normal(size=(2, 4, 5, 4))  # padded to 6 x 6: two windows down, three across
    for shift in ([1, 1], [0, 0], [2, 1]):
        attn.shift_size = list(shift)
        np.testing.assert_allclose(_np(attn(torch.tensor(x))), _np_window_attention(x, p, [3, 2], 2, shift),
                                   rtol=1e-10, atol=1e-12)
    attn.window_size, attn.shift_size = [3, 2], [1, 1]
    # the window covers the whole (padded) height: no shift along it, and the list is changed in place
    tall = rng.normal(size=(1, 3, 4, 4))
    np.testing.assert_allclose(_np(attn(torch.tensor(tall))), _np_window_attention(tall, p, [3, 2], 2, [1, 1]),
                               rtol=1e-10, atol=1e-12)
    assert attn.shift_size == [0, 1]
    attn.shift_size = [1, 1]
    xs = rng.normal(size=(1, 4, 3, 4))
    xt = torch.tensor(xs, requires_grad=True)
    wout = rng.normal(size=(1, 4, 3, 4))
    (attn(xt) * torch.tensor(wout)).sum().backward()
    f = lambda q: float((_np_window_attention(q, p, [3, 2], 2, [1, 1]) * wout).sum())  # noqa: E731
    np.testing.assert_allclose(_np(xt.grad), _fd_grad(f, xs), rtol=1e-6, atol=1e-9)

    # PatchMerging: odd sizes padded, 2x2 neighbourhoods concatenated as (0,0), (1,0), (0,1), (1,1)
    pm = sw.PatchMerging(3).double()
    _load(torch, pm, 191)
    q = {k: _np(v) for k, v in pm.state_dict().items()}
    z = rng.normal(size=(2, 5, 3, 3))
    zp = np.pad(z, ((0, 0), (0, 1), (0, 1), (0, 0)))
    cat = np.concatenate([zp[:, 0::2, 0::2], zp[:, 1::2, 0::2], zp[:, 0::2, 1::2], zp[:, 1::2, 1::2]], -1)
    ln = (cat - cat.mean(-1, keepdims=True)) / np.sqrt(cat.var(-1, keepdims=True) + 1e-5) * q["norm.weight"] + q["norm.bias"]
    np.testing.assert_allclose(_np(pm(torch.tensor(z))), ln @ q["reduction.weight"].T, rtol=1e-10, atol=1e-12)

    # a tiny Swin-T: patch 2, two stages, window 4 (shifted blocks in stage 1), trained a few steps
    torch.manual_seed(0)
    net = sw.SwinTransformer([2, 2], 8, [2, 1], [2, 2], [4, 4], num_classes=3)
    assert [b.attn.shift_size for b in net.features[1]] == [[0, 0], [2, 2]]
    imgs = torch.tensor(rng.normal(size=(4, 3, 16, 16)), dtype=torch.float32)
    labels = torch.tensor([0, 1, 2, 0])
    opt = torch.optim.AdamW(net.parameters(), lr=0.01)
    losses = []
    for _ in range(8):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(imgs), labels)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < 0.5 * losses[0], losses


def _swin_run(torch):
    sw = swin_page(torch)
    rng = np.random.default_rng(20)
    out = {}
    for v2 in (False, True):
        net = sw.SwinTransformer([2, 2], 8, [2, 2], [2, 2], [3, 3], num_classes=3, use_v2=v2).double()
        _load(torch, net, 200 + v2, scale=0.3)
        x = torch.tensor(rng.normal(size=(2, 3, 14, 12)), requires_grad=True)  # 7x6 patches: padded windows
        y = net(x)
        (y ** 2).sum().backward()
        out[f"y{v2}"], out[f"g{v2}"] = _np(y), _np(x.grad)
        out[f"gtable{v2}"] = _np(net.features[1][1].attn.qkv.weight.grad)
    return out


def test_swin_torch_parity():
    torch = pytest.importorskip("torch")
    _compare(_swin_run(lucid), _swin_run(torch), rtol=1e-9, atol=1e-11)


def _np_opening(mask, r):
    """Morphological opening by a (2r+1)-square: the union of all full squares inside ``mask``."""
    out = np.zeros_like(mask)
    h, w = mask.shape[-2:]
    for i in range(r, h - r):
        for j in range(r, w - r):
            sq = mask[..., i - r:i + r + 1, j - r:j + r + 1]
            full = sq.all(axis=(-2, -1))
            out[..., i - r:i + r + 1, j - r:j + r + 1] |= full[..., None, None]
    return out


def test_drop_block_drops_whole_blocks_and_rescales():
    torch = lucid
    db = drop_block_page(torch)
    torch.manual_seed(0)
    x = torch.ones(4, 3, 9, 9)
    out = _np(db.drop_block2d(x, 0.3, 3))
    dropped = out == 0
    kept = ~dropped
    scale = out.size / (1e-6 + kept.sum())
    np.testing.assert_allclose(out[kept], scale, rtol=1e-6)  # numel / (eps + noise.sum())
    np.testing.assert_array_equal(_np_opening(dropped, 1), dropped)  # a union of whole 3x3 blocks inside the map
    assert 0.1 < dropped.mean() < 0.4  # gamma = p * 81 / (9 * 49): about p of the map, less the overlaps
    y = torch.ones(2, 2, 5, 5)
    res = db.drop_block2d(y, 0.5, 4 + 1, inplace=True)  # block clipped to the map size: 5
    assert res is y
    ym = _np(y)
    assert np.all((ym == 0) | np.isclose(ym, ym.size / (1e-6 + (ym != 0).sum())))
    # a whole 5x5 map is one block: each (sample, channel) map is either all zero or all kept
    assert np.all((ym.reshape(4, -1) == 0).all(1) | (ym.reshape(4, -1) != 0).all(1))
    z = torch.ones(2, 1, 5, 5, 5)
    out3 = _np(db.DropBlock3d(0.4, 3)(z))
    d3 = out3 == 0
    assert np.all(np.isclose(out3[~d3], out3.size / (1e-6 + (~d3).sum())))
    m = db.DropBlock2d(0.3, 3)
    assert repr(m) == "DropBlock2d(p=0.3, block_size=3, inplace=False)"
    m.eval()
    assert m(x) is x
    with pytest.raises(ValueError, match="block size should be odd. Got 4 which is even."):
        db.drop_block2d(x, 0.3, 4)
    with pytest.raises(ValueError, match="input should be 4 dimensional. Got 5 dimensions."):
        db.drop_block2d(z, 0.3, 3)


# ====================================================================== tests: ViT
def _np_layer_norm(x, w, b, eps):
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps) * w + b


def _np_bicubic_matrix(n_in, n_out, a=-0.75):
    """align_corners=True cubic convolution (Keys, a = -0.75) as an (n_out, n_in) matrix, borders clamped."""
    m = np.zeros((n_out, n_in))
    for o in range(n_out):
        src = o * (n_in - 1) / (n_out - 1)
        i = int(math.floor(src))
        t = src - i
        near = lambda x: ((a + 2) * x - (a + 3)) * x * x + 1  # noqa: E731
        far = lambda x: ((a * x - 5 * a) * x + 8 * a) * x - 4 * a  # noqa: E731
        for k, w in zip(range(i - 1, i + 3), (far(t + 1), near(t), near(1 - t), far(2 - t))):
            m[o, min(max(k, 0), n_in - 1)] += w
    return m


def test_vit_encoder_block_legacy_mlp_state_dict_and_interpolate_embeddings():
    torch = lucid
    vt = vit_page(torch)
    erf = np.vectorize(math.erf)
    rng = np.random.default_rng(21)
    blk = vt.EncoderBlock(2, 6, 10, 0.0, 0.0).double()
    _load(torch, blk, 210, scale=0.5)
    p = {k: _np(v) for k, v in blk.state_dict().items()}
    x = rng.normal(size=(2, 5, 6))
    h = _np_layer_norm(x, p["ln_1.weight"], p["ln_1.bias"], 1e-6)
    q, k, v = np.split(h @ p["self_attention.in_proj_weight"].T + p["self_attention.in_proj_bias"], 3, -1)
    heads = []
    for hd in range(2):
        sl = slice(3 * hd, 3 * hd + 3)
        a = q[..., sl] @ k[..., sl].transpose(0, 2, 1) / math.sqrt(3)
        a = np.exp(a - a.max(-1, keepdims=True))
        heads.append(a / a.sum(-1, keepdims=True) @ v[..., sl])
    att = np.concatenate(heads, -1) @ p["self_attention.out_proj.weight"].T + p["self_attention.out_proj.bias"] + x
    y = _np_layer_norm(att, p["ln_2.weight"], p["ln_2.bias"], 1e-6) @ p["mlp.0.weight"].T + p["mlp.0.bias"]
    y = 0.5 * y * (1 + erf(y / math.sqrt(2)))
    ref = att + y @ p["mlp.3.weight"].T + p["mlp.3.bias"]
    np.testing.assert_allclose(_np(blk(torch.tensor(x))), ref, rtol=1e-10, atol=1e-12)

    # MLPBlock: a version-1 state dict (linear_1/linear_2 keys) is renamed on load, a version-2 one is not
    mlp = vt.MLPBlock(6, 10, 0.0)
    assert mlp.state_dict()._metadata[""]["version"] == 2
    legacy = OrderedDict((k.replace("0.", "linear_1.").replace("3.", "linear_2."), torch.ones_like(v) * i)
                         for i, (k, v) in enumerate(mlp.state_dict().items()))
    legacy._metadata = OrderedDict([("", {"version": 1})])
    mlp.load_state_dict(legacy)
    assert [float(v.mean()) for v in mlp.state_dict().values()] == [0.0, 1.0, 2.0, 3.0]
    legacy._metadata = OrderedDict([("", {"version": 2})])
    with pytest.raises(RuntimeError, match="linear_1.weight"):
        mlp.load_state_dict(legacy)

    # interpolate_embeddings: class token kept, the 3x3 grid of positions resized bicubically to 5x5
    pos = rng.normal(size=(1, 10, 4))
    state = OrderedDict([("encoder.pos_embedding", torch.tensor(pos)), ("heads.head.weight", torch.zeros(3, 4)),
                         ("conv_proj.weight", torch.zeros(4, 3, 2, 2))])
    new = vt.interpolate_embeddings(10, 2, state, reset_heads=True)
    assert list(new.keys()) == ["encoder.pos_embedding", "conv_proj.weight"]
    out = _np(new["encoder.pos_embedding"])
    assert out.shape == (1, 26, 4)
    np.testing.assert_array_equal(out[0, 0], pos[0, 0])
    grid = pos[0, 1:].T.reshape(4, 3, 3)
    mat = _np_bicubic_matrix(3, 5)
    ref = np.einsum("oh,chw,pw->cop", mat, grid, mat).reshape(4, 25).T
    np.testing.assert_allclose(out[0, 1:], ref, rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="seq_length is not a perfect square"):
        vt.interpolate_embeddings(4, 2, OrderedDict([("encoder.pos_embedding", torch.zeros(1, 4, 2))]))

    # a tiny ViT: zero-initialised head, so the first loss is log(3) exactly; then it trains
    torch.manual_seed(0)
    net = vt.VisionTransformer(8, 4, 1, 2, 8, 16, num_classes=3)
    assert net.seq_length == 5 and float(net.heads.head.weight.detach().abs().sum()) == 0.0
    imgs = torch.tensor(rng.normal(size=(6, 3, 8, 8)), dtype=torch.float32)
    labels = torch.tensor([0, 1, 2, 0, 1, 2])
    opt = torch.optim.Adam(net.parameters(), lr=0.02)
    losses = []
    for _ in range(10):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(imgs), labels)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert abs(losses[0] - math.log(3)) < 1e-6
    assert losses[-1] < 0.5 * losses[0], losses
    stem = vt.VisionTransformer(8, 4, 1, 2, 8, 16, num_classes=3, representation_size=5,
                                conv_stem_configs=[vt.ConvStemConfig(4, 3, 2), vt.ConvStemConfig(6, 3, 2)])
    assert [n for n, _ in stem.conv_proj.named_children()] == ["conv_bn_relu_0", "conv_bn_relu_1", "conv_last"]
    assert stem(imgs).shape == (6, 3) and [n for n, _ in stem.heads.named_children()] == ["pre_logits", "act", "head"]
    with pytest.raises(AssertionError, match="Wrong image height! Expected 8 but got 4!"):
        net(imgs[:, :, :4])


def _vit_run(torch):
    vt = vit_page(torch)
    rng = np.random.default_rng(22)
    net = vt.VisionTransformer(8, 2, 2, 2, 8, 12, num_classes=3, representation_size=6,
                               conv_stem_configs=[vt.ConvStemConfig(4, 3, 2)]).double()
    _load(torch, net, 220, scale=0.4)
    x = torch.tensor(rng.normal(size=(3, 3, 8, 8)), requires_grad=True)
    y = net(x)
    (y ** 2).sum().backward()
    state = vt.interpolate_embeddings(12, 2, OrderedDict(net.state_dict()))
    return {"y": _np(y), "gx": _np(x.grad), "gpos": _np(net.encoder.pos_embedding.grad),
            "pos12": _np(state["encoder.pos_embedding"])}


def test_vit_torch_parity():
    torch = pytest.importorskip("torch")
    _compare(_vit_run(lucid), _vit_run(torch), rtol=1e-9, atol=1e-11)


def test_torchscript_plumbing_names_torchvision_uses():
    # torchvision's text reaches these; each was missing: ``from torch.jit.annotations import
    # BroadcastingList2`` (ops/roi_align.py; ``lucid.jit.annotations`` was the ``__future__`` feature
    # object), ``@torch.jit._script_if_tracing`` (ops/boxes.py), ``torch._C._log_api_usage_once``
    # (torchvision/utils.py, called by every op and model).
    import types

    from lucid.jit.annotations import BroadcastingList2, List, Optional, Tuple

    assert isinstance(lucid.jit.annotations, types.ModuleType)
    assert (List, Optional, Tuple) == (__import__("typing").List, __import__("typing").Optional, __import__("typing").Tuple)
    assert BroadcastingList2[int] is None and lucid.jit.annotations.BroadcastingList3[float] is None

    def f(x):
        return x + 1

    assert lucid.jit._script_if_tracing(f) is f
    assert lucid._C._log_api_usage_once("torchvision.ops.boxes.nms") is None
    assert lucid._C._get_tracing_state() is None  # transform.py's resize_keypoints, roi_heads' expand_masks
    with pytest.raises(TypeError, match="_log_api_usage_once"):
        lucid._C._log_api_usage_once(3)
    # the pages above keep that text: their ops run with it
    bx = boxes_page(lucid)
    boxes = lucid.tensor([[0.0, 0.0, 2.0, 2.0], [1.0, 1.0, 3.0, 3.0], [0.1, 0.0, 2.0, 2.1]])
    keep = bx._batched_nms_coordinate_trick(boxes, lucid.tensor([0.9, 0.8, 0.7]), lucid.tensor([0, 0, 0]), 0.5)
    assert keep.tolist() == [0, 1]  # box 2 overlaps box 0 by 3.8 / 4.19 > 0.5; box 1 overlaps it by 1/7
    assert float(bx.box_area(boxes)[2]) == pytest.approx(1.9 * 2.1)
    inp = lucid.arange(16.0).view(1, 1, 4, 4)
    out = roi_align_page(lucid).roi_align(inp, [lucid.tensor([[0.0, 0.0, 2.0, 2.0]])], 1, sampling_ratio=1, aligned=True)
    assert float(out) == pytest.approx(2.5)  # one sample at (0.5, 0.5): (0 + 1 + 4 + 5) / 4


# ====================================================================== tests: R-CNN transform and heads
def _np_cubic_matrix(n_in, n_out, align_corners, a=-0.75):
    """PyTorch's bicubic as an (n_out, n_in) matrix: Keys kernel, borders clamped; without
    align_corners the source index is (dst + 0.5) * in / out - 0.5, not clamped at 0 (cubic)."""
    if align_corners:
        return _np_bicubic_matrix(n_in, n_out, a)
    m = np.zeros((n_out, n_in))
    near = lambda x: ((a + 2) * x - (a + 3)) * x * x + 1  # noqa: E731
    far = lambda x: ((a * x - 5 * a) * x + 8 * a) * x - 4 * a  # noqa: E731
    for o in range(n_out):
        src = (o + 0.5) * n_in / n_out - 0.5
        i = int(math.floor(src))
        t = src - i
        for k, w in zip(range(i - 1, i + 3), (far(t + 1), near(t), near(1 - t), far(2 - t))):
            m[o, min(max(k, 0), n_in - 1)] += w
    return m


def test_generalized_rcnn_transform_resize_batch_and_postprocess():
    torch = lucid
    rc = rcnn_page(torch)
    rng = np.random.default_rng(23)
    mean, std = [0.4, 0.5, 0.6], [0.2, 0.25, 0.3]
    tr = rc.GeneralizedRCNNTransform(12, 20, mean, std)
    assert repr(tr) == ("GeneralizedRCNNTransform(\n    Normalize(mean=[0.4, 0.5, 0.6], std=[0.2, 0.25, 0.3])\n"
                        "    Resize(min_size=(12,), max_size=20, mode='bilinear')\n)")
    tr.eval()
    imgs = [rng.uniform(size=(3, 10, 15)), rng.uniform(size=(3, 8, 6))]
    masks = (rng.uniform(size=(2, 10, 15)) > 0.5).astype(np.uint8)
    boxes = np.array([[1.0, 2.0, 9.0, 7.5], [0.0, 0.0, 15.0, 10.0]])
    kps = np.concatenate([rng.uniform(0, 10, (2, 3, 2)), np.ones((2, 3, 1))], -1)
    targets = [{"boxes": torch.tensor(boxes, dtype=torch.float32), "masks": torch.tensor(masks),
                "keypoints": torch.tensor(kps, dtype=torch.float32)},
               {"boxes": torch.tensor(boxes[:1] / 2, dtype=torch.float32)}]
    images, out_t = tr([torch.tensor(im, dtype=torch.float32) for im in imgs], targets)
    assert images.image_sizes == [(12, 18), (16, 12)]  # 10x15 scaled by 12/10; 8x6 by 2 (16 <= 20)
    batch = _np(images.tensors)
    assert batch.shape == (2, 3, 32, 32)  # padded to multiples of 32
    for k, (im, (h, w)) in enumerate(zip(imgs, images.image_sizes)):
        norm = (im - np.array(mean)[:, None, None]) / np.array(std)[:, None, None]
        np.testing.assert_allclose(batch[k, :, :h, :w], _np_resize_bilinear(norm, h, w), rtol=1e-5, atol=1e-5)
        assert np.all(batch[k, :, h:] == 0) and np.all(batch[k, :, :, w:] == 0)
    np.testing.assert_allclose(_np(out_t[0]["boxes"]), boxes * [1.2, 1.2, 1.2, 1.2], rtol=1e-6)
    np.testing.assert_allclose(_np(out_t[1]["boxes"]), boxes[:1] / 2 * [2, 2, 2, 2], rtol=1e-6)
    np.testing.assert_allclose(_np(out_t[0]["keypoints"]), kps * [1.2, 1.2, 1], rtol=1e-6)
    assert out_t[0]["masks"].dtype == torch.uint8
    iy, ix = (np.floor(np.arange(12) * 10 / 12).astype(int), np.floor(np.arange(18) * 15 / 18).astype(int))
    np.testing.assert_array_equal(out_t[0]["masks"].cpu().numpy(), masks[:, iy][:, :, ix])
    assert targets[0]["boxes"] is not out_t[0]["boxes"] and float(targets[0]["boxes"][0, 3]) == 7.5  # copies
    with pytest.raises(ValueError, match="images is expected to be a list of 3d tensors"):
        tr([torch.zeros(1, 3, 4, 4)])
    with pytest.raises(TypeError, match="Expected input images to be of floating type"):
        tr([torch.zeros(3, 4, 4, dtype=torch.uint8)])

    # postprocess: boxes back to the original size, masks pasted into the original image
    pred_boxes = np.array([[2.0, 3.0, 14.0, 10.0], [10.5, 0.5, 17.0, 11.0]], dtype=np.float32)
    pred_masks = rng.uniform(size=(2, 1, 5, 5)).astype(np.float32)
    kp = rng.uniform(0, 12, size=(2, 4, 3)).astype(np.float32)
    res = tr.postprocess([{"boxes": torch.tensor(pred_boxes), "masks": torch.tensor(pred_masks),
                           "keypoints": torch.tensor(kp)}], [(12, 18)], [(10, 15)])[0]
    orig_boxes = pred_boxes * np.float32(15 / 18)
    np.testing.assert_allclose(_np(res["boxes"]), orig_boxes, rtol=1e-6)
    np.testing.assert_allclose(_np(res["keypoints"]), kp * [15 / 18, 10 / 12, 1], rtol=1e-6)
    got = _np(res["masks"])
    assert got.shape == (2, 1, 10, 15)
    scale = 7 / 5  # one pixel of padding around a 5x5 mask
    for k in range(2):
        b = _np(res["boxes"])[k].astype(np.float32)
        w_half, h_half = (b[2] - b[0]) * np.float32(0.5) * np.float32(scale), (b[3] - b[1]) * np.float32(0.5) * np.float32(scale)
        xc, yc = (b[2] + b[0]) * np.float32(0.5), (b[3] + b[1]) * np.float32(0.5)
        x0, y0, x1, y1 = (int(v) for v in (xc - w_half, yc - h_half, xc + w_half, yc + h_half))  # to int64: truncation
        w, h = max(x1 - x0 + 1, 1), max(y1 - y0 + 1, 1)
        big = _np_resize_bilinear(np.pad(pred_masks[k, 0].astype(np.float64), 1), h, w)
        ref = np.zeros((10, 15))
        ya, yb, xa, xb = max(y0, 0), min(y1 + 1, 10), max(x0, 0), min(x1 + 1, 15)
        ref[ya:yb, xa:xb] = big[ya - y0:yb - y0, xa - x0:xb - x0]
        np.testing.assert_allclose(got[k, 0], ref, rtol=1e-5, atol=1e-6)
    assert rc.paste_masks_in_image(torch.zeros(0, 1, 5, 5), torch.zeros(0, 4), (3, 4)).shape == (0, 1, 3, 4)


def test_roi_heads_losses_keypoints_and_mask_inference_against_numpy():
    torch = lucid
    rc = rcnn_page(torch)
    rng = np.random.default_rng(24)
    # fastrcnn_loss: cross-entropy + smooth-L1 (beta 1/9) on the positives' own class boxes, / N
    logits = rng.normal(size=(5, 3))
    reg = rng.normal(size=(5, 12))
    labels = [np.array([0, 2, 1]), np.array([1, 0])]
    targets = [rng.normal(size=(3, 4)), rng.normal(size=(2, 4))]
    cls, box = rc.fastrcnn_loss(torch.tensor(logits), torch.tensor(reg), [torch.tensor(l) for l in labels],
                                [torch.tensor(t) for t in targets])
    lab, tgt = np.concatenate(labels), np.concatenate(targets)
    lse = np.log(np.exp(logits).sum(1))
    np.testing.assert_allclose(float(cls), np.mean(lse - logits[np.arange(5), lab]), rtol=1e-12)
    pos = np.nonzero(lab > 0)[0]
    d = np.abs(reg.reshape(5, 3, 4)[pos, lab[pos]] - tgt[pos])
    np.testing.assert_allclose(float(box), np.where(d < 1 / 9, 0.5 * d ** 2 * 9, d - 0.5 / 9).sum() / 5, rtol=1e-12)

    # maskrcnn_loss: targets are the gt masks roi-aligned on the proposals
    gt_masks = [(rng.uniform(size=(2, 12, 12)) > 0.4).astype(np.float64)]
    props = [np.array([[1.0, 1.5, 9.0, 10.0], [3.0, 0.0, 11.0, 6.5], [0.5, 4.0, 7.0, 11.5]])]
    midx = [np.array([1, 0, 1])]
    gt_labels = [np.array([2, 1])]
    mlog = rng.normal(size=(3, 3, 4, 4))
    loss = rc.maskrcnn_loss(torch.tensor(mlog), [torch.tensor(p) for p in props], [torch.tensor(m) for m in gt_masks],
                            [torch.tensor(g) for g in gt_labels], [torch.tensor(m) for m in midx])
    rois = np.concatenate([midx[0][:, None].astype(np.float64), props[0]], 1)
    mt = _np_roi_align(gt_masks[0][:, None], rois, 1.0, 4, 4, -1, False)[:, 0]
    z = mlog[np.arange(3), gt_labels[0][midx[0]]]
    bce = np.maximum(z, 0) - z * mt + np.log1p(np.exp(-np.abs(z)))
    np.testing.assert_allclose(float(loss), bce.mean(), rtol=1e-10)
    probs = rc.maskrcnn_inference(torch.tensor(mlog), [torch.tensor([2, 0]), torch.tensor([1])])
    assert [p.shape for p in probs] == [(2, 1, 4, 4), (1, 1, 4, 4)]
    np.testing.assert_allclose(_np(probs[1])[0, 0], 1 / (1 + np.exp(-mlog[2, 1])), rtol=1e-12)

    # keypoints_to_heatmap and keypointrcnn_loss
    rois_k = np.array([[2.0, 1.0, 10.0, 9.0], [0.0, 0.0, 6.0, 12.0]])
    kp = np.array([[[3.0, 2.0, 1], [10.0, 9.0, 1], [1.0, 5.0, 1], [6.0, 6.0, 0]],
                   [[5.9, 11.9, 1], [0.0, 0.0, 2], [6.0, 3.0, 1], [2.0, 13.0, 1]]])
    hm, valid = rc.keypoints_to_heatmap(torch.tensor(kp), torch.tensor(rois_k), 4)
    sx, sy = 4 / (rois_k[:, 2] - rois_k[:, 0]), 4 / (rois_k[:, 3] - rois_k[:, 1])
    x = np.floor((kp[..., 0] - rois_k[:, :1]) * sx[:, None]).astype(int)
    y = np.floor((kp[..., 1] - rois_k[:, 1:2]) * sy[:, None]).astype(int)
    x[kp[..., 0] == rois_k[:, 2:3]] = 3  # a keypoint on the right/bottom edge goes in the last bin
    y[kp[..., 1] == rois_k[:, 3:4]] = 3
    v = ((x >= 0) & (y >= 0) & (x < 4) & (y < 4) & (kp[..., 2] > 0)).astype(int)
    assert valid.tolist() == v.tolist() == [[1, 1, 0, 0], [1, 1, 1, 0]]
    assert hm.tolist() == ((y * 4 + x) * v).tolist()
    klog = rng.normal(size=(2, 4, 4, 4))
    kl = rc.keypointrcnn_loss(torch.tensor(klog), [torch.tensor(rois_k)], [torch.tensor(kp)], [torch.tensor([0, 1])])
    flat, tg = klog.reshape(8, 16)[v.reshape(-1) == 1], ((y * 4 + x) * v).reshape(-1)[v.reshape(-1) == 1]
    np.testing.assert_allclose(float(kl), np.mean(np.log(np.exp(flat).sum(1)) - flat[np.arange(len(tg)), tg]),
                               rtol=1e-12)

    # heatmaps_to_keypoints: bicubic upsampling to the box, arg-max, back to image coordinates
    maps = rng.normal(size=(2, 3, 4, 4)).astype(np.float32)
    boxes = np.array([[1.0, 2.0, 7.5, 6.0], [0.0, 0.0, 3.0, 9.2]], dtype=np.float32)
    (kps,), (scores,) = rc.keypointrcnn_inference(torch.tensor(maps), [torch.tensor(boxes)])
    for i in range(2):
        w, h = boxes[i, 2] - boxes[i, 0], boxes[i, 3] - boxes[i, 1]
        rw, rh = int(math.ceil(w)), int(math.ceil(h))
        up = np.einsum("oh,khw,pw->kop", _np_cubic_matrix(4, rh, False), maps[i].astype(np.float64),
                       _np_cubic_matrix(4, rw, False))
        posn = up.reshape(3, -1).argmax(1)
        yi, xi = posn // rw, posn % rw
        np.testing.assert_allclose(_np(kps)[i], np.stack([(xi + 0.5) * w / rw + boxes[i, 0],
                                                          (yi + 0.5) * h / rh + boxes[i, 1], np.ones(3)], 1), rtol=1e-5)
        np.testing.assert_allclose(_np(scores)[i], up[np.arange(3), yi, xi], rtol=1e-5, atol=1e-6)


def _rcnn_run(torch):
    rc = rcnn_page(torch)
    rng = np.random.default_rng(25)
    tr = rc.GeneralizedRCNNTransform((10, 14), 30, [0.5, 0.4, 0.3], [0.2, 0.3, 0.25])
    torch.manual_seed(0)
    tr.eval()
    imgs = [torch.tensor(rng.uniform(size=(3, 9, 13)), dtype=torch.float32),
            torch.tensor(rng.uniform(size=(3, 7, 7)), dtype=torch.float32)]
    tgt = [{"boxes": torch.tensor([[1.0, 1.0, 8.0, 6.0]]), "masks": torch.tensor((rng.uniform(size=(1, 9, 13)) > 0.5) * 1).byte()},
           {"boxes": torch.tensor([[0.5, 2.0, 6.0, 6.5]])}]
    il, t2 = tr(imgs, tgt)
    res = tr.postprocess([{"boxes": torch.tensor([[2.0, 1.0, 12.0, 9.0]]),
                           "masks": torch.tensor(rng.uniform(size=(1, 1, 6, 6)), dtype=torch.float32)}],
                         [il.image_sizes[0]], [(9, 13)])
    maps = torch.tensor(rng.normal(size=(2, 2, 5, 5)), dtype=torch.float32)
    kp, sc = rc.heatmaps_to_keypoints(maps, torch.tensor([[0.5, 1.0, 8.3, 6.0], [2.0, 2.0, 4.0, 12.0]]))
    return {"batch": _np(il.tensors), "boxes": _np(t2[0]["boxes"]), "masks": _np(t2[0]["masks"]),
            "pboxes": _np(res[0]["boxes"]), "pmasks": _np(res[0]["masks"]), "kp": _np(kp), "sc": _np(sc)}


def test_rcnn_transform_and_heads_torch_parity():
    torch = pytest.importorskip("torch")
    _compare(_rcnn_run(lucid), _rcnn_run(torch), rtol=1e-5, atol=1e-5)


# ====================================================================== tests: RPN
def _np_match(q, hi, lo, allow):
    """Matcher by NumPy: best gt per prediction, thresholds, then every gt's best predictions restored."""
    best, arg = q.max(0), q.argmax(0)
    m = arg.copy()
    m[best < lo] = -1
    m[(best >= lo) & (best < hi)] = -2
    if allow:
        for g in range(q.shape[0]):
            m[q[g] == q[g].max()] = arg[q[g] == q[g].max()]
    return m


def _np_decode(deltas, anchors, clip=math.log(1000.0 / 16)):
    w, h = anchors[:, 2] - anchors[:, 0], anchors[:, 3] - anchors[:, 1]
    cx, cy = anchors[:, 0] + 0.5 * w, anchors[:, 1] + 0.5 * h
    pcx, pcy = deltas[:, 0] * w + cx, deltas[:, 1] * h + cy
    pw, ph = np.exp(np.minimum(deltas[:, 2], clip)) * w, np.exp(np.minimum(deltas[:, 3], clip)) * h
    return np.stack([pcx - 0.5 * pw, pcy - 0.5 * ph, pcx + 0.5 * pw, pcy + 0.5 * ph], 1)


def _rpn_setup(torch, seed):
    rp, dt = rpn_page(torch), detection_page(torch)
    rng = np.random.default_rng(seed)
    gen = dt.AnchorGenerator(sizes=((8,), (16,)), aspect_ratios=((0.5, 1.0, 2.0),) * 2)
    head = rp.RPNHead(4, 3).double()
    _load(torch, head, seed, scale=0.5)
    rpn = rp.RegionProposalNetwork(gen, head, 0.6, 0.3, 1000, 0.5, dict(training=30, testing=20),
                                   dict(training=12, testing=10), 0.5)
    images = dt.ImageList(torch.zeros(2, 3, 32, 32, dtype=torch.float64), [(32, 32), (28, 30)])
    feats = OrderedDict([("p2", torch.tensor(rng.normal(size=(2, 4, 8, 8)))),
                         ("p3", torch.tensor(rng.normal(size=(2, 4, 4, 4))))])
    targets = [{"boxes": torch.tensor([[3.0, 4.0, 14.0, 12.0], [16.0, 18.0, 30.0, 31.0]])},
               {"boxes": torch.tensor([[8.0, 2.0, 20.0, 22.0]])}]
    return rp, rpn, images, feats, targets


def test_region_proposal_network_filter_and_losses_against_numpy():
    torch = lucid
    rp, rpn, images, feats, targets = _rpn_setup(torch, 26)
    # permute_and_flatten: (N, A*C, H, W) -> (N, H*W*A, C)
    z = np.arange(2 * 6 * 2 * 3, dtype=np.float64).reshape(2, 6, 2, 3)
    np.testing.assert_array_equal(_np(rp.permute_and_flatten(torch.tensor(z), 2, 3, 2, 2, 3)),
                                  z.reshape(2, 3, 2, 2, 3).transpose(0, 3, 4, 1, 2).reshape(2, -1, 2))
    logits, regs = rpn.head(list(feats.values()))
    obj = np.concatenate([_np(l).transpose(0, 2, 3, 1).reshape(2, -1) for l in logits], 1)
    dl = np.concatenate([_np(r).reshape(2, 3, 4, *r.shape[-2:]).transpose(0, 3, 4, 1, 2).reshape(2, -1, 4) for r in regs], 1)
    anchors = [_np(a) for a in rpn.anchor_generator(images, list(feats.values()))]
    n_lvl = [8 * 8 * 3, 4 * 4 * 3]
    lvl = np.repeat([0, 1], n_lvl)

    rpn.eval()
    boxes, losses = rpn(images, feats)
    assert losses == {}
    for i, (h, w) in enumerate(images.image_sizes):
        props = _np_decode(dl[i], anchors[i])
        idx = np.concatenate([np.argsort(-obj[i, :n_lvl[0]], kind="stable")[:20],
                              n_lvl[0] + np.argsort(-obj[i, n_lvl[0]:], kind="stable")[:20]])
        b, sc, lv = props[idx], obj[i, idx], lvl[idx]
        b = np.stack([b[:, 0].clip(0, w), b[:, 1].clip(0, h), b[:, 2].clip(0, w), b[:, 3].clip(0, h)], 1)
        ok = ((b[:, 2] - b[:, 0]) >= 1e-3) & ((b[:, 3] - b[:, 1]) >= 1e-3)
        b, sc, lv = b[ok], sc[ok], lv[ok]
        keep = []
        for level in (0, 1):
            sel = np.nonzero(lv == level)[0]
            keep += [sel[k] for k in _np_nms(b[sel], sc[sel], 0.5)]
        keep = sorted(keep, key=lambda k: -sc[k])[:10]
        np.testing.assert_allclose(_np(boxes[i]), b[keep], rtol=1e-10, atol=1e-10)

    # training: labels from the matcher (low-quality matches kept), every labelled anchor sampled
    rpn.train()
    _, losses = rpn(images, feats, targets)
    bce, l1, n_sampled = [], [], 0
    for i in range(2):
        gt = _np(targets[i]["boxes"])
        inter, union, *_ = _np_iou_parts(gt, anchors[i])
        m = _np_match(inter / union, 0.6, 0.3, True)
        lab = np.where(m >= 0, 1.0, np.where(m == -1, 0.0, -1.0))
        used = lab >= 0
        n_sampled += used.sum()
        zl = obj[i][used]
        bce.append(np.maximum(zl, 0) - zl * lab[used] + np.log1p(np.exp(-np.abs(zl))))
        pos = lab == 1
        g, a = gt[m.clip(min=0)][pos], anchors[i][pos]
        aw, ah = a[:, 2] - a[:, 0], a[:, 3] - a[:, 1]
        gw, gh = g[:, 2] - g[:, 0], g[:, 3] - g[:, 1]
        tgt = np.stack([((g[:, 0] + 0.5 * gw) - (a[:, 0] + 0.5 * aw)) / aw, ((g[:, 1] + 0.5 * gh) - (a[:, 1] + 0.5 * ah)) / ah,
                        np.log(gw / aw), np.log(gh / ah)], 1)
        d = np.abs(dl[i][pos] - tgt)
        l1.append(np.where(d < 1 / 9, 0.5 * d ** 2 * 9, d - 0.5 / 9).sum())
    np.testing.assert_allclose(float(losses["loss_objectness"].detach()), np.concatenate(bce).mean(), rtol=1e-10)
    np.testing.assert_allclose(float(losses["loss_rpn_box_reg"].detach()), sum(l1) / n_sampled, rtol=1e-10)
    opt = torch.optim.SGD(rpn.parameters(), lr=0.5)
    hist = []
    for _ in range(6):
        opt.zero_grad()
        _, losses = rpn(images, feats, targets)
        total = losses["loss_objectness"] + losses["loss_rpn_box_reg"]
        total.backward()
        opt.step()
        hist.append(float(total.detach()))
    assert hist[-1] < 0.8 * hist[0], hist


def _rpn_run(torch):
    _, rpn, images, feats, targets = _rpn_setup(torch, 27)
    rpn.eval()
    boxes, _ = rpn(images, feats)
    rpn.train()
    tb, losses = rpn(images, feats, targets)
    (losses["loss_objectness"] + losses["loss_rpn_box_reg"]).backward()
    out = {f"boxes{i}": _np(b) for i, b in enumerate(boxes)}
    out.update({f"train_boxes{i}": _np(b) for i, b in enumerate(tb)})
    out.update({k: _np(v) for k, v in losses.items()})
    out.update({f"g_{k}": _np(p.grad) for k, p in rpn.head.named_parameters()})
    return out


def test_region_proposal_network_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = _rpn_run(lucid), _rpn_run(torch)
    # The RPN's labels are float32 and its logits float64 here: PyTorch's binary_cross_entropy_with_logits
    # then computes ``(1 - target).mul_(input)`` in the target's float32 (and returns float32), Lucid
    # promotes to float64 (the NumPy test above matches Lucid to 1e-10): the objectness loss and the
    # gradients behind it agree to float32 precision.
    loss_keys = [k for k in a if k == "loss_objectness" or k.startswith("g_")]
    _compare({k: a.pop(k) for k in loss_keys}, {k: b.pop(k) for k in loss_keys}, rtol=1e-6, atol=1e-9)
    _compare(a, b, rtol=1e-9, atol=1e-11)
