"""Ultralytics' pure-PyTorch detection code run on Lucid (``import lucid as torch``), batch 18:

- ultralytics/yolov5 ``utils/general.py``: ``xyxy2xywh``, ``xywh2xyxy``, ``xywhn2xyxy``, ``clip_boxes`` (the
  in-place ``clamp_`` on column views), ``scale_boxes`` (in-place ``-=``/``/=`` through list indexing) and
  ``non_max_suppression`` (``nonzero(as_tuple=False).T``, ``x[i, 5 + j, None]``, ``argsort(descending=True)``,
  the class-offset trick, multi-label and class filtering); ``torchvision.ops.nms`` is a compiled kernel, so
  here it is a pure-Python loop written after ``nms_kernel.cpp`` (sort by score, suppress IoU > threshold).
- ``utils/metrics.py``: ``bbox_iou`` (IoU/GIoU/DIoU/CIoU, ``chunk`` and the ``no_grad`` alpha), ``box_iou``,
  ``smooth``, ``ap_per_class``, ``compute_ap`` and ``ConfusionMatrix``; ``val.py``'s ``process_batch``.
- ``utils/loss.py``: ``smooth_BCE``, ``FocalLoss``, ``QFocalLoss`` and ``ComputeLoss`` with
  ``build_targets`` (the 7-column gain, anchor-ratio matching, the five grid offsets through boolean
  masks of a repeated tensor, ``clamp_`` of the grid indices, ``tobj[b, a, gj, gi] = iou``).
- ``models/common.py``: ``autopad``, ``Conv``, ``Bottleneck``, ``C3``, ``SPP``, ``SPPF``; ``models/yolo.py``: the
  anchor-based ``Detect`` head (``_make_grid`` with ``meshgrid(indexing="ij")`` + ``expand``) and
  ``DetectionModel._initialize_biases`` (in-place ``+=`` on ``bias.view(na, -1).data``); ``utils/torch_utils.py``:
  ``fuse_conv_and_bn``.
- ultralytics/ultralytics ``utils/tal.py``: ``TaskAlignedAssigner`` (``topk``, the int8 ``scatter_add_`` count,
  advanced indexing ``pd_scores[ind[0], :, ind[1]]`` with a slice between, ``gt_``/``clamp_``/``masked_fill_``
  in place), ``make_anchors``, ``dist2bbox``, ``bbox2dist``; ``utils/metrics.py``'s ``bbox_iou``; ``utils/ops.py``'s
  ``xywh2xyxy``; ``utils/loss.py``: ``DFLoss``, ``BboxLoss`` and ``v8DetectionLoss`` (``preprocess`` with
  ``unique(return_counts=True)``, ``bbox_decode`` through ``softmax(3).matmul(proj)``); ``nn/modules/block.py``:
  ``DFL``, ``Bottleneck``, ``C2f`` (``chunk`` + ``extend`` + ``cat``); ``nn/modules/head.py``'s ``Detect``.

Data are synthetic and sizes tiny. Each page is a function of the module it is handed as ``torch``; every
check recomputes its numbers in NumPy (loops for IoU, matching, NMS and the assigner; the losses written
again with the detached parts frozen, for float64 finite differences), or a closed form, or a loss that goes
down by a stated margin, and the ``*_torch_parity`` tests run the same text on PyTorch with the same weights
and data.

Adapted: ``de_parallel`` is the identity, ``LOGGER`` a plain ``logging`` logger, ``check_version(...)`` is
``True``; ``compute_ap`` calls ``np.trapezoid`` (NumPy 2 dropped ``np.trapz``; later Ultralytics code picks
the same by version); ``ap_per_class`` is called without plots; ``ConfusionMatrix.plot`` (seaborn) and
``Detect``'s ``Segment`` branch are left out; the yolov5 ``Detect`` and ``v8DetectionLoss``/``BboxLoss`` are
the widely used v7.0 / v8.1 texts (the stored newest ``v8DetectionLoss`` carries a fork's objectness
experiments), ``BboxLoss`` without the unused ``imgsz``/``stride`` arguments of the newer signature;
``DetectionModel``'s yaml parser is replaced by a small two-level ``TinyDetectionModel`` per library (strides 4
and 8 on 32x32 images, its stride/anchor set-up and ``_initialize_biases`` copied from ``DetectionModel``).
The yolov5 loss is checked without the target centred on the image edge: its clamped grid row lands on the
cell of its own +x offset row, and which of two writes into one ``tobj`` cell wins PyTorch leaves open
(``build_targets`` itself is checked with it, the clamped ``gij`` reaching ``tbox`` through the ``gi, gj``
views).

Fixed on the way: ``torch.arange(end=w, ...)`` (``make_anchors``' spelling; PyTorch's signature is
``arange(start=0, end, step=1)``) raised ``TypeError: arange() missing 1 required positional argument: 'start'``.
"""
import logging
import math
import time
import warnings
from types import SimpleNamespace

import numpy as np
import pytest

import lucid
import lucid.nn  # noqa: F401
import lucid.optim  # noqa: F401


def _np(t):
    return np.array(t.detach().cpu().numpy(), dtype=np.float64)  # a copy: .numpy() shares memory


def _load(torch, module, seed, scale=0.3):
    """Overwrite every parameter/buffer with seeded NumPy values (same on both libraries)."""
    rng = np.random.default_rng(seed)
    new = {}
    for k, v in module.state_dict().items():
        if "running_var" in k:
            new[k] = torch.tensor(rng.uniform(0.5, 1.5, tuple(v.shape)), dtype=v.dtype)
        elif not v.is_floating_point() or k.endswith("anchors") or k.endswith("dfl.conv.weight"):
            new[k] = v  # counters, the anchors and DFL's fixed 0..15 projection
        else:
            new[k] = torch.tensor(rng.uniform(-scale, scale, tuple(v.shape)), dtype=v.dtype)
    module.load_state_dict(new)


# ====================================================================== torchvision.ops.nms, in Python
def _nms_for(torch):
    def nms(dets, scores, iou_threshold):
        # torchvision/csrc/ops/cpu/nms_kernel.cpp, nms_kernel_impl
        if dets.numel() == 0:
            return torch.empty((0,), dtype=torch.long, device=dets.device)
        x1_t, y1_t, x2_t, y2_t = (dets[:, k].contiguous() for k in range(4))
        areas_t = (x2_t - x1_t) * (y2_t - y1_t)
        order_t = scores.sort(0, descending=True)[1]
        ndets = dets.size(0)
        suppressed = [0] * ndets
        keep = []
        x1, y1, x2, y2, areas, order = (t.tolist() for t in (x1_t, y1_t, x2_t, y2_t, areas_t, order_t))
        for _i in range(ndets):
            i = order[_i]
            if suppressed[i] == 1:
                continue
            keep.append(i)
            ix1, iy1, ix2, iy2, iarea = x1[i], y1[i], x2[i], y2[i], areas[i]
            for _j in range(_i + 1, ndets):
                j = order[_j]
                if suppressed[j] == 1:
                    continue
                xx1, yy1 = max(ix1, x1[j]), max(iy1, y1[j])
                xx2, yy2 = min(ix2, x2[j]), min(iy2, y2[j])
                w, h = max(0.0, xx2 - xx1), max(0.0, yy2 - yy1)
                inter = w * h
                ovr = inter / (iarea + areas[j] - inter)
                if ovr > iou_threshold:
                    suppressed[j] = 1
        return torch.tensor(keep, dtype=torch.long, device=dets.device)

    return nms


# ====================================================================== yolov5 utils/general.py + metrics.py
def general_page(torch):
    torchvision = SimpleNamespace(ops=SimpleNamespace(nms=_nms_for(torch)))
    LOGGER = logging.getLogger("yolov5")

    def xyxy2xywh(x):
        """Convert nx4 boxes from [x1, y1, x2, y2] to [x, y, w, h] where xy1=top-left, xy2=bottom-right."""
        y = x.clone() if isinstance(x, torch.Tensor) else np.copy(x)
        y[..., 0] = (x[..., 0] + x[..., 2]) / 2  # x center
        y[..., 1] = (x[..., 1] + x[..., 3]) / 2  # y center
        y[..., 2] = x[..., 2] - x[..., 0]  # width
        y[..., 3] = x[..., 3] - x[..., 1]  # height
        return y

    def xywh2xyxy(x):
        """Convert nx4 boxes from [x, y, w, h] to [x1, y1, x2, y2] where xy1=top-left, xy2=bottom-right."""
        y = x.clone() if isinstance(x, torch.Tensor) else np.copy(x)
        y[..., 0] = x[..., 0] - x[..., 2] / 2  # top left x
        y[..., 1] = x[..., 1] - x[..., 3] / 2  # top left y
        y[..., 2] = x[..., 0] + x[..., 2] / 2  # bottom right x
        y[..., 3] = x[..., 1] + x[..., 3] / 2  # bottom right y
        return y

    def xywhn2xyxy(x, w=640, h=640, padw=0, padh=0):
        """Convert nx4 boxes from [x, y, w, h] normalized to [x1, y1, x2, y2] where xy1=top-left, xy2=bottom-right."""
        y = x.clone() if isinstance(x, torch.Tensor) else np.copy(x)
        y[..., 0] = w * (x[..., 0] - x[..., 2] / 2) + padw  # top left x
        y[..., 1] = h * (x[..., 1] - x[..., 3] / 2) + padh  # top left y
        y[..., 2] = w * (x[..., 0] + x[..., 2] / 2) + padw  # bottom right x
        y[..., 3] = h * (x[..., 1] + x[..., 3] / 2) + padh  # bottom right y
        return y

    def scale_boxes(img1_shape, boxes, img0_shape, ratio_pad=None):
        """Rescales (xyxy) bounding boxes from img1_shape to img0_shape, optionally using provided `ratio_pad`."""
        if ratio_pad is None:  # calculate from img0_shape
            gain = min(img1_shape[0] / img0_shape[0], img1_shape[1] / img0_shape[1])  # gain  = old / new
            pad = (img1_shape[1] - img0_shape[1] * gain) / 2, (img1_shape[0] - img0_shape[0] * gain) / 2  # wh padding
        else:
            gain = ratio_pad[0][0]
            pad = ratio_pad[1]

        boxes[..., [0, 2]] -= pad[0]  # x padding
        boxes[..., [1, 3]] -= pad[1]  # y padding
        boxes[..., :4] /= gain
        clip_boxes(boxes, img0_shape)
        return boxes

    def clip_boxes(boxes, shape):
        """Clips bounding box coordinates (xyxy) to fit within the specified image shape (height, width)."""
        if isinstance(boxes, torch.Tensor):  # faster individually
            boxes[..., 0].clamp_(0, shape[1])  # x1
            boxes[..., 1].clamp_(0, shape[0])  # y1
            boxes[..., 2].clamp_(0, shape[1])  # x2
            boxes[..., 3].clamp_(0, shape[0])  # y2
        else:  # np.array (faster grouped)
            boxes[..., [0, 2]] = boxes[..., [0, 2]].clip(0, shape[1])  # x1, x2
            boxes[..., [1, 3]] = boxes[..., [1, 3]].clip(0, shape[0])  # y1, y2

    def box_iou(box1, box2, eps=1e-7):
        # https://github.com/pytorch/vision/blob/master/torchvision/ops/boxes.py
        # inter(N,M) = (rb(N,M,2) - lt(N,M,2)).clamp(0).prod(2)
        (a1, a2), (b1, b2) = box1.unsqueeze(1).chunk(2, 2), box2.unsqueeze(0).chunk(2, 2)
        inter = (torch.min(a2, b2) - torch.max(a1, b1)).clamp(0).prod(2)

        # IoU = inter / (area1 + area2 - inter)
        return inter / ((a2 - a1).prod(2) + (b2 - b1).prod(2) - inter + eps)

    def non_max_suppression(
        prediction,
        conf_thres=0.25,
        iou_thres=0.45,
        classes=None,
        agnostic=False,
        multi_label=False,
        labels=(),
        max_det=300,
        nm=0,  # number of masks
    ):
        """Non-Maximum Suppression (NMS) on inference results to reject overlapping detections.

        Returns:
            list of detections, on (n,6) tensor per image [xyxy, conf, cls]
        """
        # Checks
        assert 0 <= conf_thres <= 1, f"Invalid Confidence threshold {conf_thres}, valid values are between 0.0 and 1.0"
        assert 0 <= iou_thres <= 1, f"Invalid IoU {iou_thres}, valid values are between 0.0 and 1.0"
        if isinstance(prediction, (list, tuple)):  # YOLOv5 model in validation model, output = (inference_out, loss_out)
            prediction = prediction[0]  # select only inference output

        device = prediction.device
        mps = "mps" in device.type  # Apple MPS
        if mps:  # MPS not fully supported yet, convert tensors to CPU before NMS
            prediction = prediction.cpu()
        bs = prediction.shape[0]  # batch size
        nc = prediction.shape[2] - nm - 5  # number of classes
        xc = prediction[..., 4] > conf_thres  # candidates

        # Settings
        # min_wh = 2  # (pixels) minimum box width and height
        max_wh = 7680  # (pixels) maximum box width and height
        max_nms = 30000  # maximum number of boxes into torchvision.ops.nms()
        time_limit = 0.5 + 0.05 * bs  # seconds to quit after
        redundant = True  # require redundant detections
        multi_label &= nc > 1  # multiple labels per box (adds 0.5ms/img)
        merge = False  # use merge-NMS

        t = time.time()
        mi = 5 + nc  # mask start index
        output = [torch.zeros((0, 6 + nm), device=prediction.device)] * bs
        for xi, x in enumerate(prediction):  # image index, image inference
            # Apply constraints
            # x[((x[..., 2:4] < min_wh) | (x[..., 2:4] > max_wh)).any(1), 4] = 0  # width-height
            x = x[xc[xi]]  # confidence

            # Cat apriori labels if autolabelling
            if labels and len(labels[xi]):
                lb = labels[xi]
                v = torch.zeros((len(lb), nc + nm + 5), device=x.device)
                v[:, :4] = lb[:, 1:5]  # box
                v[:, 4] = 1.0  # conf
                v[range(len(lb)), lb[:, 0].long() + 5] = 1.0  # cls
                x = torch.cat((x, v), 0)

            # If none remain process next image
            if not x.shape[0]:
                continue

            # Compute conf
            x[:, 5:] *= x[:, 4:5]  # conf = obj_conf * cls_conf

            # Box/Mask
            box = xywh2xyxy(x[:, :4])  # center_x, center_y, width, height) to (x1, y1, x2, y2)
            mask = x[:, mi:]  # zero columns if no masks

            # Detections matrix nx6 (xyxy, conf, cls)
            if multi_label:
                i, j = (x[:, 5:mi] > conf_thres).nonzero(as_tuple=False).T
                x = torch.cat((box[i], x[i, 5 + j, None], j[:, None].float(), mask[i]), 1)
            else:  # best class only
                conf, j = x[:, 5:mi].max(1, keepdim=True)
                x = torch.cat((box, conf, j.float(), mask), 1)[conf.view(-1) > conf_thres]

            # Filter by class
            if classes is not None:
                x = x[(x[:, 5:6] == torch.tensor(classes, device=x.device)).any(1)]

            # Apply finite constraint
            # if not torch.isfinite(x).all():
            #     x = x[torch.isfinite(x).all(1)]

            # Check shape
            n = x.shape[0]  # number of boxes
            if not n:  # no boxes
                continue
            x = x[x[:, 4].argsort(descending=True)[:max_nms]]  # sort by confidence and remove excess boxes

            # Batched NMS
            c = x[:, 5:6] * (0 if agnostic else max_wh)  # classes
            boxes, scores = x[:, :4] + c, x[:, 4]  # boxes (offset by class), scores
            i = torchvision.ops.nms(boxes, scores, iou_thres)  # NMS
            i = i[:max_det]  # limit detections
            if merge and (1 < n < 3e3):  # Merge NMS (boxes merged using weighted mean)
                # update boxes as boxes(i,4) = weights(i,n) * boxes(n,4)
                iou = box_iou(boxes[i], boxes) > iou_thres  # iou matrix
                weights = iou * scores[None]  # box weights
                x[i, :4] = torch.mm(weights, x[:, :4]).float() / weights.sum(1, keepdim=True)  # merged boxes
                if redundant:
                    i = i[iou.sum(1) > 1]  # require redundancy

            output[xi] = x[i]
            if mps:
                output[xi] = output[xi].to(device)
            if (time.time() - t) > time_limit:
                LOGGER.warning(f"WARNING ⚠️ NMS time limit {time_limit:.3f}s exceeded")
                break  # time limit exceeded

        return output

    return SimpleNamespace(**{k: v for k, v in locals().items() if callable(v)})


def metrics_page(torch):
    box_iou = general_page(torch).box_iou

    def smooth(y, f=0.05):
        # Box filter of fraction f
        nf = round(len(y) * f * 2) // 2 + 1  # number of filter elements (must be odd)
        p = np.ones(nf // 2)  # ones padding
        yp = np.concatenate((p * y[0], y, p * y[-1]), 0)  # y padded
        return np.convolve(yp, np.ones(nf) / nf, mode='valid')  # y-smoothed

    def ap_per_class(tp, conf, pred_cls, target_cls, plot=False, save_dir='.', names=(), eps=1e-16, prefix=""):
        """ Compute the average precision, given the recall and precision curves.
        Source: https://github.com/rafaelpadilla/Object-Detection-Metrics.
        """

        # Sort by objectness
        i = np.argsort(-conf)
        tp, conf, pred_cls = tp[i], conf[i], pred_cls[i]

        # Find unique classes
        unique_classes, nt = np.unique(target_cls, return_counts=True)
        nc = unique_classes.shape[0]  # number of classes, number of detections

        # Create Precision-Recall curve and compute AP for each class
        px, py = np.linspace(0, 1, 1000), []  # for plotting
        ap, p, r = np.zeros((nc, tp.shape[1])), np.zeros((nc, 1000)), np.zeros((nc, 1000))
        for ci, c in enumerate(unique_classes):
            i = pred_cls == c
            n_l = nt[ci]  # number of labels
            n_p = i.sum()  # number of predictions
            if n_p == 0 or n_l == 0:
                continue

            # Accumulate FPs and TPs
            fpc = (1 - tp[i]).cumsum(0)
            tpc = tp[i].cumsum(0)

            # Recall
            recall = tpc / (n_l + eps)  # recall curve
            r[ci] = np.interp(-px, -conf[i], recall[:, 0], left=0)  # negative x, xp because xp decreases

            # Precision
            precision = tpc / (tpc + fpc)  # precision curve
            p[ci] = np.interp(-px, -conf[i], precision[:, 0], left=1)  # p at pr_score

            # AP from recall-precision curve
            for j in range(tp.shape[1]):
                ap[ci, j], mpre, mrec = compute_ap(recall[:, j], precision[:, j])
                if plot and j == 0:
                    py.append(np.interp(px, mrec, mpre))  # precision at mAP@0.5

        # Compute F1 (harmonic mean of precision and recall)
        f1 = 2 * p * r / (p + r + eps)
        names = [v for k, v in names.items() if k in unique_classes]  # list: only classes that have data
        names = dict(enumerate(names))  # to dict

        i = smooth(f1.mean(0), 0.1).argmax()  # max F1 index
        p, r, f1 = p[:, i], r[:, i], f1[:, i]
        tp = (r * nt).round()  # true positives
        fp = (tp / (p + eps) - tp).round()  # false positives
        return tp, fp, p, r, f1, ap, unique_classes.astype(int)

    def compute_ap(recall, precision):
        """ Compute the average precision, given the recall and precision curves
        # Arguments
            recall:    The recall curve (list)
            precision: The precision curve (list)
        # Returns
            Average precision, precision curve, recall curve
        """

        # Append sentinel values to beginning and end
        mrec = np.concatenate(([0.0], recall, [1.0]))
        mpre = np.concatenate(([1.0], precision, [0.0]))

        # Compute the precision envelope
        mpre = np.flip(np.maximum.accumulate(np.flip(mpre)))

        # Integrate area under curve
        method = 'interp'  # methods: 'continuous', 'interp'
        if method == 'interp':
            x = np.linspace(0, 1, 101)  # 101-point interp (COCO)
            ap = np.trapezoid(np.interp(x, mrec, mpre), x)  # integrate
        else:  # 'continuous'
            i = np.where(mrec[1:] != mrec[:-1])[0]  # points where x axis (recall) changes
            ap = np.sum((mrec[i + 1] - mrec[i]) * mpre[i + 1])  # area under curve

        return ap, mpre, mrec

    class ConfusionMatrix:
        # Updated version of https://github.com/kaanakan/object_detection_confusion_matrix
        def __init__(self, nc, conf=0.25, iou_thres=0.45):
            self.matrix = np.zeros((nc + 1, nc + 1))
            self.nc = nc  # number of classes
            self.conf = conf
            self.iou_thres = iou_thres

        def process_batch(self, detections, labels):
            """
            Return intersection-over-union (Jaccard index) of boxes.
            Both sets of boxes are expected to be in (x1, y1, x2, y2) format.
            Arguments:
                detections (Array[N, 6]), x1, y1, x2, y2, conf, class
                labels (Array[M, 5]), class, x1, y1, x2, y2
            Returns:
                None, updates confusion matrix accordingly
            """
            if detections is None:
                gt_classes = labels.int()
                for gc in gt_classes:
                    self.matrix[self.nc, gc] += 1  # background FN
                return

            detections = detections[detections[:, 4] > self.conf]
            gt_classes = labels[:, 0].int()
            detection_classes = detections[:, 5].int()
            iou = box_iou(labels[:, 1:], detections[:, :4])

            x = torch.where(iou > self.iou_thres)
            if x[0].shape[0]:
                matches = torch.cat((torch.stack(x, 1), iou[x[0], x[1]][:, None]), 1).cpu().numpy()
                if x[0].shape[0] > 1:
                    matches = matches[matches[:, 2].argsort()[::-1]]
                    matches = matches[np.unique(matches[:, 1], return_index=True)[1]]
                    matches = matches[matches[:, 2].argsort()[::-1]]
                    matches = matches[np.unique(matches[:, 0], return_index=True)[1]]
            else:
                matches = np.zeros((0, 3))

            n = matches.shape[0] > 0
            m0, m1, _ = matches.transpose().astype(int)
            for i, gc in enumerate(gt_classes):
                j = m0 == i
                if n and sum(j) == 1:
                    self.matrix[detection_classes[m1[j]], gc] += 1  # correct
                else:
                    self.matrix[self.nc, gc] += 1  # true background

            if n:
                for i, dc in enumerate(detection_classes):
                    if not any(m1 == i):
                        self.matrix[dc, self.nc] += 1  # predicted background

        def matrix(self):
            return self.matrix

        def tp_fp(self):
            tp = self.matrix.diagonal()  # true positives
            fp = self.matrix.sum(1) - tp  # false positives
            # fn = self.matrix.sum(0) - tp  # false negatives (missed detections)
            return tp[:-1], fp[:-1]  # remove background class

        def print(self):
            for i in range(self.nc + 1):
                print(' '.join(map(str, self.matrix[i])))

    def bbox_iou(box1, box2, xywh=True, GIoU=False, DIoU=False, CIoU=False, eps=1e-7):
        # Returns Intersection over Union (IoU) of box1(1,4) to box2(n,4)

        # Get the coordinates of bounding boxes
        if xywh:  # transform from xywh to xyxy
            (x1, y1, w1, h1), (x2, y2, w2, h2) = box1.chunk(4, -1), box2.chunk(4, -1)
            w1_, h1_, w2_, h2_ = w1 / 2, h1 / 2, w2 / 2, h2 / 2
            b1_x1, b1_x2, b1_y1, b1_y2 = x1 - w1_, x1 + w1_, y1 - h1_, y1 + h1_
            b2_x1, b2_x2, b2_y1, b2_y2 = x2 - w2_, x2 + w2_, y2 - h2_, y2 + h2_
        else:  # x1, y1, x2, y2 = box1
            b1_x1, b1_y1, b1_x2, b1_y2 = box1.chunk(4, -1)
            b2_x1, b2_y1, b2_x2, b2_y2 = box2.chunk(4, -1)
            w1, h1 = b1_x2 - b1_x1, (b1_y2 - b1_y1).clamp(eps)
            w2, h2 = b2_x2 - b2_x1, (b2_y2 - b2_y1).clamp(eps)

        # Intersection area
        inter = (b1_x2.minimum(b2_x2) - b1_x1.maximum(b2_x1)).clamp(0) * \
                (b1_y2.minimum(b2_y2) - b1_y1.maximum(b2_y1)).clamp(0)

        # Union Area
        union = w1 * h1 + w2 * h2 - inter + eps

        # IoU
        iou = inter / union
        if CIoU or DIoU or GIoU:
            cw = b1_x2.maximum(b2_x2) - b1_x1.minimum(b2_x1)  # convex (smallest enclosing box) width
            ch = b1_y2.maximum(b2_y2) - b1_y1.minimum(b2_y1)  # convex height
            if CIoU or DIoU:  # Distance or Complete IoU https://arxiv.org/abs/1911.08287v1
                c2 = cw ** 2 + ch ** 2 + eps  # convex diagonal squared
                rho2 = ((b2_x1 + b2_x2 - b1_x1 - b1_x2) ** 2 + (b2_y1 + b2_y2 - b1_y1 - b1_y2) ** 2) / 4  # center dist ** 2
                if CIoU:  # https://github.com/Zzh-tju/DIoU-SSD-pytorch/blob/master/utils/box/box_utils.py#L47
                    v = (4 / math.pi ** 2) * (torch.atan(w2 / h2) - torch.atan(w1 / h1)).pow(2)
                    with torch.no_grad():
                        alpha = v / (v - iou + (1 + eps))
                    return iou - (rho2 / c2 + v * alpha)  # CIoU
                return iou - rho2 / c2  # DIoU
            c_area = cw * ch + eps  # convex area
            return iou - (c_area - union) / c_area  # GIoU https://arxiv.org/pdf/1902.09630.pdf
        return iou  # IoU

    # val.py
    def process_batch(detections, labels, iouv):
        """
        Return correct prediction matrix
        Arguments:
            detections (array[N, 6]), x1, y1, x2, y2, conf, class
            labels (array[M, 5]), class, x1, y1, x2, y2
        Returns:
            correct (array[N, 10]), for 10 IoU levels
        """
        correct = np.zeros((detections.shape[0], iouv.shape[0])).astype(bool)
        iou = box_iou(labels[:, 1:], detections[:, :4])
        correct_class = labels[:, 0:1] == detections[:, 5]
        for i in range(len(iouv)):
            x = torch.where((iou >= iouv[i]) & correct_class)  # IoU > threshold and classes match
            if x[0].shape[0]:
                matches = torch.cat((torch.stack(x, 1), iou[x[0], x[1]][:, None]), 1).cpu().numpy()  # [label, detect, iou]
                if x[0].shape[0] > 1:
                    matches = matches[matches[:, 2].argsort()[::-1]]
                    matches = matches[np.unique(matches[:, 1], return_index=True)[1]]
                    # matches = matches[matches[:, 2].argsort()[::-1]]
                    matches = matches[np.unique(matches[:, 0], return_index=True)[1]]
                correct[matches[:, 1].astype(int), i] = True
        return torch.tensor(correct, dtype=torch.bool, device=iouv.device)

    return SimpleNamespace(**{k: v for k, v in locals().items() if callable(v)})


# ====================================================================== yolov5 models/common.py, yolo.py
def common_page(torch):
    nn = torch.nn

    def autopad(k, p=None, d=1):  # kernel, padding, dilation
        # Pad to 'same' shape outputs
        if d > 1:
            k = d * (k - 1) + 1 if isinstance(k, int) else [d * (x - 1) + 1 for x in k]  # actual kernel-size
        if p is None:
            p = k // 2 if isinstance(k, int) else [x // 2 for x in k]  # auto-pad
        return p

    class Conv(nn.Module):
        # Standard convolution with args(ch_in, ch_out, kernel, stride, padding, groups, dilation, activation)
        default_act = nn.SiLU()  # default activation

        def __init__(self, c1, c2, k=1, s=1, p=None, g=1, d=1, act=True):
            super().__init__()
            self.conv = nn.Conv2d(c1, c2, k, s, autopad(k, p, d), groups=g, dilation=d, bias=False)
            self.bn = nn.BatchNorm2d(c2)
            self.act = self.default_act if act is True else act if isinstance(act, nn.Module) else nn.Identity()

        def forward(self, x):
            return self.act(self.bn(self.conv(x)))

        def forward_fuse(self, x):
            return self.act(self.conv(x))

    class Bottleneck(nn.Module):
        # Standard bottleneck
        def __init__(self, c1, c2, shortcut=True, g=1, e=0.5):  # ch_in, ch_out, shortcut, groups, expansion
            super().__init__()
            c_ = int(c2 * e)  # hidden channels
            self.cv1 = Conv(c1, c_, 1, 1)
            self.cv2 = Conv(c_, c2, 3, 1, g=g)
            self.add = shortcut and c1 == c2

        def forward(self, x):
            return x + self.cv2(self.cv1(x)) if self.add else self.cv2(self.cv1(x))

    class C3(nn.Module):
        # CSP Bottleneck with 3 convolutions
        def __init__(self, c1, c2, n=1, shortcut=True, g=1, e=0.5):  # ch_in, ch_out, number, shortcut, groups, expansion
            super().__init__()
            c_ = int(c2 * e)  # hidden channels
            self.cv1 = Conv(c1, c_, 1, 1)
            self.cv2 = Conv(c1, c_, 1, 1)
            self.cv3 = Conv(2 * c_, c2, 1)  # optional act=FReLU(c2)
            self.m = nn.Sequential(*(Bottleneck(c_, c_, shortcut, g, e=1.0) for _ in range(n)))

        def forward(self, x):
            return self.cv3(torch.cat((self.m(self.cv1(x)), self.cv2(x)), 1))

    class SPP(nn.Module):
        # Spatial Pyramid Pooling (SPP) layer https://arxiv.org/abs/1406.4729
        def __init__(self, c1, c2, k=(5, 9, 13)):
            super().__init__()
            c_ = c1 // 2  # hidden channels
            self.cv1 = Conv(c1, c_, 1, 1)
            self.cv2 = Conv(c_ * (len(k) + 1), c2, 1, 1)
            self.m = nn.ModuleList([nn.MaxPool2d(kernel_size=x, stride=1, padding=x // 2) for x in k])

        def forward(self, x):
            x = self.cv1(x)
            with warnings.catch_warnings():
                warnings.simplefilter('ignore')  # suppress torch 1.9.0 max_pool2d() warning
                return self.cv2(torch.cat([x] + [m(x) for m in self.m], 1))

    class SPPF(nn.Module):
        # Spatial Pyramid Pooling - Fast (SPPF) layer for YOLOv5 by Glenn Jocher
        def __init__(self, c1, c2, k=5):  # equivalent to SPP(k=(5, 9, 13))
            super().__init__()
            c_ = c1 // 2  # hidden channels
            self.cv1 = Conv(c1, c_, 1, 1)
            self.cv2 = Conv(c_ * 4, c2, 1, 1)
            self.m = nn.MaxPool2d(kernel_size=k, stride=1, padding=k // 2)

        def forward(self, x):
            x = self.cv1(x)
            with warnings.catch_warnings():
                warnings.simplefilter('ignore')  # suppress torch 1.9.0 max_pool2d() warning
                y1 = self.m(x)
                y2 = self.m(y1)
                return self.cv2(torch.cat((x, y1, y2, self.m(y2)), 1))

    # utils/torch_utils.py
    def fuse_conv_and_bn(conv, bn):
        # Fuse Conv2d() and BatchNorm2d() layers https://tehnokv.com/posts/fusing-batchnorm-and-conv/
        fusedconv = nn.Conv2d(conv.in_channels,
                              conv.out_channels,
                              kernel_size=conv.kernel_size,
                              stride=conv.stride,
                              padding=conv.padding,
                              dilation=conv.dilation,
                              groups=conv.groups,
                              bias=True).requires_grad_(False).to(conv.weight.device)

        # Prepare filters
        w_conv = conv.weight.clone().view(conv.out_channels, -1)
        w_bn = torch.diag(bn.weight.div(torch.sqrt(bn.eps + bn.running_var)))
        fusedconv.weight.copy_(torch.mm(w_bn, w_conv).view(fusedconv.weight.shape))

        # Prepare spatial bias
        b_conv = torch.zeros(conv.weight.size(0), device=conv.weight.device) if conv.bias is None else conv.bias
        b_bn = bn.bias - bn.weight.mul(bn.running_mean).div(torch.sqrt(bn.running_var + bn.eps))
        fusedconv.bias.copy_(torch.mm(w_bn, b_conv.reshape(-1, 1)).reshape(-1) + b_bn)

        return fusedconv

    # models/yolo.py
    class Detect(nn.Module):
        # YOLOv5 Detect head for detection models
        stride = None  # strides computed during build
        dynamic = False  # force grid reconstruction
        export = False  # export mode

        def __init__(self, nc=80, anchors=(), ch=(), inplace=True):  # detection layer
            super().__init__()
            self.nc = nc  # number of classes
            self.no = nc + 5  # number of outputs per anchor
            self.nl = len(anchors)  # number of detection layers
            self.na = len(anchors[0]) // 2  # number of anchors
            self.grid = [torch.empty(0) for _ in range(self.nl)]  # init grid
            self.anchor_grid = [torch.empty(0) for _ in range(self.nl)]  # init anchor grid
            self.register_buffer('anchors', torch.tensor(anchors).float().view(self.nl, -1, 2))  # shape(nl,na,2)
            self.m = nn.ModuleList(nn.Conv2d(x, self.no * self.na, 1) for x in ch)  # output conv
            self.inplace = inplace  # use inplace ops (e.g. slice assignment)

        def forward(self, x):
            z = []  # inference output
            for i in range(self.nl):
                x[i] = self.m[i](x[i])  # conv
                bs, _, ny, nx = x[i].shape  # x(bs,255,20,20) to x(bs,3,20,20,85)
                x[i] = x[i].view(bs, self.na, self.no, ny, nx).permute(0, 1, 3, 4, 2).contiguous()

                if not self.training:  # inference
                    if self.dynamic or self.grid[i].shape[2:4] != x[i].shape[2:4]:
                        self.grid[i], self.anchor_grid[i] = self._make_grid(nx, ny, i)

                    # Detect (boxes only)
                    xy, wh, conf = x[i].sigmoid().split((2, 2, self.nc + 1), 4)
                    xy = (xy * 2 + self.grid[i]) * self.stride[i]  # xy
                    wh = (wh * 2) ** 2 * self.anchor_grid[i]  # wh
                    y = torch.cat((xy, wh, conf), 4)
                    z.append(y.view(bs, self.na * nx * ny, self.no))

            return x if self.training else (torch.cat(z, 1),) if self.export else (torch.cat(z, 1), x)

        def _make_grid(self, nx=20, ny=20, i=0, torch_1_10=True):
            d = self.anchors[i].device
            t = self.anchors[i].dtype
            shape = 1, self.na, ny, nx, 2  # grid shape
            y, x = torch.arange(ny, device=d, dtype=t), torch.arange(nx, device=d, dtype=t)
            yv, xv = torch.meshgrid(y, x, indexing='ij') if torch_1_10 else torch.meshgrid(y, x)  # torch>=0.7 compatibility
            grid = torch.stack((xv, yv), 2).expand(shape) - 0.5  # add grid offset, i.e. y = 2.0 * x - 0.5
            anchor_grid = (self.anchors[i] * self.stride[i]).view((1, self.na, 1, 1, 2)).expand(shape)
            return grid, anchor_grid

    class TinyDetectionModel(nn.Module):
        """A two-level stand-in for ``DetectionModel`` (its yaml parser left out): strides 4 and 8."""

        def __init__(self, nc=3, anchors=((4, 5, 8, 10, 12, 6), (16, 20, 24, 14, 30, 30)), hyp=None):
            super().__init__()
            self.b0 = Conv(3, 8, 3, 2)
            self.b1 = C3(8, 8, 1)
            self.b2 = Conv(8, 16, 3, 2)
            self.b3 = SPPF(16, 16, 5)
            self.b4 = Conv(16, 16, 3, 2)
            self.model = nn.ModuleList([self.b0, self.b1, self.b2, self.b3, self.b4,
                                        Detect(nc, anchors, ch=(16, 16))])
            self.hyp = hyp
            # DetectionModel.__init__: Build strides, anchors
            m = self.model[-1]  # Detect()
            m.stride = torch.tensor([4.0, 8.0])
            m.anchors /= m.stride.view(-1, 1, 1)
            self.stride = m.stride

        def forward(self, x):
            p3 = self.b3(self.b2(self.b1(self.b0(x))))
            return self.model[-1]([p3, self.b4(p3)])

        def _initialize_biases(self, cf=None):  # initialize biases into Detect(), cf is class frequency
            # https://arxiv.org/abs/1708.02002 section 3.3
            # cf = torch.bincount(torch.tensor(np.concatenate(dataset.labels, 0)[:, 0]).long(), minlength=nc) + 1.
            m = self.model[-1]  # Detect() module
            for mi, s in zip(m.m, m.stride):  # from
                b = mi.bias.view(m.na, -1)  # conv.bias(255) to (3,85)
                b.data[:, 4] += math.log(8 / (640 / s) ** 2)  # obj (8 objects per 640 image)
                b.data[:, 5:5 + m.nc] += math.log(0.6 / (m.nc - 0.99999)) if cf is None else torch.log(cf / cf.sum())  # cls
                mi.bias = torch.nn.Parameter(b.view(-1), requires_grad=True)

    return SimpleNamespace(**{k: v for k, v in locals().items() if callable(v)})


# ====================================================================== yolov5 utils/loss.py
def loss5_page(torch):
    nn = torch.nn
    bbox_iou = metrics_page(torch).bbox_iou

    def de_parallel(model):
        return model

    def smooth_BCE(eps=0.1):
        """Returns label smoothing BCE targets for reducing overfitting; pos: `1.0 - 0.5*eps`, neg: `0.5*eps`."""
        return 1.0 - 0.5 * eps, 0.5 * eps

    class FocalLoss(nn.Module):
        """Applies focal loss to address class imbalance by modifying BCEWithLogitsLoss with gamma and alpha parameters."""

        def __init__(self, loss_fcn, gamma=1.5, alpha=0.25):
            super().__init__()
            self.loss_fcn = loss_fcn  # must be nn.BCEWithLogitsLoss()
            self.gamma = gamma
            self.alpha = alpha
            self.reduction = loss_fcn.reduction
            self.loss_fcn.reduction = "none"  # required to apply FL to each element

        def forward(self, pred, true):
            loss = self.loss_fcn(pred, true)
            # p_t = torch.exp(-loss)
            # loss *= self.alpha * (1.000001 - p_t) ** self.gamma  # non-zero power for gradient stability

            # TF implementation https://github.com/tensorflow/addons/blob/v0.7.1/tensorflow_addons/losses/focal_loss.py
            pred_prob = torch.sigmoid(pred)  # prob from logits
            p_t = true * pred_prob + (1 - true) * (1 - pred_prob)
            alpha_factor = true * self.alpha + (1 - true) * (1 - self.alpha)
            modulating_factor = (1.0 - p_t) ** self.gamma
            loss *= alpha_factor * modulating_factor

            if self.reduction == "mean":
                return loss.mean()
            elif self.reduction == "sum":
                return loss.sum()
            else:  # 'none'
                return loss

    class QFocalLoss(nn.Module):
        """Implements Quality Focal Loss to address class imbalance by modulating loss based on prediction confidence."""

        def __init__(self, loss_fcn, gamma=1.5, alpha=0.25):
            super().__init__()
            self.loss_fcn = loss_fcn  # must be nn.BCEWithLogitsLoss()
            self.gamma = gamma
            self.alpha = alpha
            self.reduction = loss_fcn.reduction
            self.loss_fcn.reduction = "none"  # required to apply FL to each element

        def forward(self, pred, true):
            loss = self.loss_fcn(pred, true)

            pred_prob = torch.sigmoid(pred)  # prob from logits
            alpha_factor = true * self.alpha + (1 - true) * (1 - self.alpha)
            modulating_factor = torch.abs(true - pred_prob) ** self.gamma
            loss *= alpha_factor * modulating_factor

            if self.reduction == "mean":
                return loss.mean()
            elif self.reduction == "sum":
                return loss.sum()
            else:  # 'none'
                return loss

    class ComputeLoss:
        """Computes the total loss for YOLOv5 model predictions, including classification, box, and objectness losses."""

        sort_obj_iou = False

        # Compute losses
        def __init__(self, model, autobalance=False):
            device = next(model.parameters()).device  # get model device
            h = model.hyp  # hyperparameters

            # Define criteria
            BCEcls = nn.BCEWithLogitsLoss(pos_weight=torch.tensor([h["cls_pw"]], device=device))
            BCEobj = nn.BCEWithLogitsLoss(pos_weight=torch.tensor([h["obj_pw"]], device=device))

            # Class label smoothing https://arxiv.org/pdf/1902.04103.pdf eqn 3
            self.cp, self.cn = smooth_BCE(eps=h.get("label_smoothing", 0.0))  # positive, negative BCE targets

            # Focal loss
            g = h["fl_gamma"]  # focal loss gamma
            if g > 0:
                BCEcls, BCEobj = FocalLoss(BCEcls, g), FocalLoss(BCEobj, g)

            m = de_parallel(model).model[-1]  # Detect() module
            self.balance = {3: [4.0, 1.0, 0.4]}.get(m.nl, [4.0, 1.0, 0.25, 0.06, 0.02])  # P3-P7
            self.ssi = list(m.stride).index(16) if autobalance else 0  # stride 16 index
            self.BCEcls, self.BCEobj, self.gr, self.hyp, self.autobalance = BCEcls, BCEobj, 1.0, h, autobalance
            self.na = m.na  # number of anchors
            self.nc = m.nc  # number of classes
            self.nl = m.nl  # number of layers
            self.anchors = m.anchors
            self.device = device

        def __call__(self, p, targets):  # predictions, targets
            lcls = torch.zeros(1, device=self.device)  # class loss
            lbox = torch.zeros(1, device=self.device)  # box loss
            lobj = torch.zeros(1, device=self.device)  # object loss
            tcls, tbox, indices, anchors = self.build_targets(p, targets)  # targets

            # Losses
            for i, pi in enumerate(p):  # layer index, layer predictions
                b, a, gj, gi = indices[i]  # image, anchor, gridy, gridx
                tobj = torch.zeros(pi.shape[:4], dtype=pi.dtype, device=self.device)  # target obj

                if n := b.shape[0]:
                    # pxy, pwh, _, pcls = pi[b, a, gj, gi].tensor_split((2, 4, 5), dim=1)  # faster, requires torch 1.8.0
                    pxy, pwh, _, pcls = pi[b, a, gj, gi].split((2, 2, 1, self.nc), 1)  # target-subset of predictions

                    # Regression
                    pxy = pxy.sigmoid() * 2 - 0.5
                    pwh = (pwh.sigmoid() * 2) ** 2 * anchors[i]
                    pbox = torch.cat((pxy, pwh), 1)  # predicted box
                    iou = bbox_iou(pbox, tbox[i], CIoU=True).squeeze()  # iou(prediction, target)
                    lbox += (1.0 - iou).mean()  # iou loss

                    # Objectness
                    iou = iou.detach().clamp(0).type(tobj.dtype)
                    if self.sort_obj_iou:
                        j = iou.argsort()
                        b, a, gj, gi, iou = b[j], a[j], gj[j], gi[j], iou[j]
                    if self.gr < 1:
                        iou = (1.0 - self.gr) + self.gr * iou
                    tobj[b, a, gj, gi] = iou  # iou ratio

                    # Classification
                    if self.nc > 1:  # cls loss (only if multiple classes)
                        t = torch.full_like(pcls, self.cn, device=self.device)  # targets
                        t[range(n), tcls[i]] = self.cp
                        lcls += self.BCEcls(pcls, t)  # BCE

                obji = self.BCEobj(pi[..., 4], tobj)
                lobj += obji * self.balance[i]  # obj loss
                if self.autobalance:
                    self.balance[i] = self.balance[i] * 0.9999 + 0.0001 / obji.detach().item()

            if self.autobalance:
                self.balance = [x / self.balance[self.ssi] for x in self.balance]
            lbox *= self.hyp["box"]
            lobj *= self.hyp["obj"]
            lcls *= self.hyp["cls"]
            bs = tobj.shape[0]  # batch size

            return (lbox + lobj + lcls) * bs, torch.cat((lbox, lobj, lcls)).detach()

        def build_targets(self, p, targets):
            na, nt = self.na, targets.shape[0]  # number of anchors, targets
            tcls, tbox, indices, anch = [], [], [], []
            gain = torch.ones(7, device=self.device)  # normalized to gridspace gain
            ai = torch.arange(na, device=self.device).float().view(na, 1).repeat(1, nt)  # same as .repeat_interleave(nt)
            targets = torch.cat((targets.repeat(na, 1, 1), ai[..., None]), 2)  # append anchor indices

            g = 0.5  # bias
            off = (
                torch.tensor(
                    [
                        [0, 0],
                        [1, 0],
                        [0, 1],
                        [-1, 0],
                        [0, -1],  # j,k,l,m
                        # [1, 1], [1, -1], [-1, 1], [-1, -1],  # jk,jm,lk,lm
                    ],
                    device=self.device,
                ).float()
                * g
            )  # offsets

            for i in range(self.nl):
                anchors, shape = self.anchors[i], p[i].shape
                gain[2:6] = torch.tensor(shape)[[3, 2, 3, 2]]  # xyxy gain

                # Match targets to anchors
                t = targets * gain  # shape(3,n,7)
                if nt:
                    # Matches
                    r = t[..., 4:6] / anchors[:, None]  # wh ratio
                    j = torch.max(r, 1 / r).max(2)[0] < self.hyp["anchor_t"]  # compare
                    # j = wh_iou(anchors, t[:, 4:6]) > model.hyp['iou_t']  # iou(3,n)=wh_iou(anchors(3,2), gwh(n,2))
                    t = t[j]  # filter

                    # Offsets
                    gxy = t[:, 2:4]  # grid xy
                    gxi = gain[[2, 3]] - gxy  # inverse
                    j, k = ((gxy % 1 < g) & (gxy > 1)).T
                    l, m = ((gxi % 1 < g) & (gxi > 1)).T
                    j = torch.stack((torch.ones_like(j), j, k, l, m))
                    t = t.repeat((5, 1, 1))[j]
                    offsets = (torch.zeros_like(gxy)[None] + off[:, None])[j]
                else:
                    t = targets[0]
                    offsets = 0

                # Define
                bc, gxy, gwh, a = t.chunk(4, 1)  # (image, class), grid xy, grid wh, anchors
                a, (b, c) = a.long().view(-1), bc.long().T  # anchors, image, class
                gij = (gxy - offsets).long()
                gi, gj = gij.T  # grid indices

                # Append
                indices.append((b, a, gj.clamp_(0, shape[2] - 1), gi.clamp_(0, shape[3] - 1)))  # image, anchor, grid
                tbox.append(torch.cat((gxy - gij, gwh), 1))  # box
                anch.append(anchors[a])  # anchors
                tcls.append(c)  # class

            return tcls, tbox, indices, anch

    return SimpleNamespace(**{k: v for k, v in locals().items() if callable(v)})


# ====================================================================== ultralytics tal.py, metrics.py, ops.py
def tal_page(torch):
    nn = torch.nn
    TORCH_1_10 = True

    # ultralytics/utils/ops.py
    def xywh2xyxy(x):
        """Convert bounding box coordinates from (x, y, width, height) format to (x1, y1, x2, y2) format."""
        assert x.shape[-1] == 4, f"input shape last dimension expected 4 but input shape is {x.shape}"
        y = torch.empty_like(x) if isinstance(x, torch.Tensor) else np.empty_like(x)  # faster than clone/copy
        dw = x[..., 2] / 2  # half-width
        dh = x[..., 3] / 2  # half-height
        y[..., 0] = x[..., 0] - dw  # top left x
        y[..., 1] = x[..., 1] - dh  # top left y
        y[..., 2] = x[..., 0] + dw  # bottom right x
        y[..., 3] = x[..., 1] + dh  # bottom right y
        return y

    # ultralytics/utils/metrics.py
    def bbox_iou(box1, box2, xywh=True, GIoU=False, DIoU=False, CIoU=False, eps=1e-7):
        """Calculate Intersection over Union (IoU) of box1(1, 4) to box2(n, 4)."""
        # Get the coordinates of bounding boxes
        if xywh:  # transform from xywh to xyxy
            (x1, y1, w1, h1), (x2, y2, w2, h2) = box1.chunk(4, -1), box2.chunk(4, -1)
            w1_, h1_, w2_, h2_ = w1 / 2, h1 / 2, w2 / 2, h2 / 2
            b1_x1, b1_x2, b1_y1, b1_y2 = x1 - w1_, x1 + w1_, y1 - h1_, y1 + h1_
            b2_x1, b2_x2, b2_y1, b2_y2 = x2 - w2_, x2 + w2_, y2 - h2_, y2 + h2_
        else:  # x1, y1, x2, y2 = box1
            b1_x1, b1_y1, b1_x2, b1_y2 = box1.chunk(4, -1)
            b2_x1, b2_y1, b2_x2, b2_y2 = box2.chunk(4, -1)
            w1, h1 = b1_x2 - b1_x1, b1_y2 - b1_y1 + eps
            w2, h2 = b2_x2 - b2_x1, b2_y2 - b2_y1 + eps

        # Intersection area
        inter = (b1_x2.minimum(b2_x2) - b1_x1.maximum(b2_x1)).clamp_(0) * (
            b1_y2.minimum(b2_y2) - b1_y1.maximum(b2_y1)
        ).clamp_(0)

        # Union Area
        union = w1 * h1 + w2 * h2 - inter + eps

        # IoU
        iou = inter / union
        if CIoU or DIoU or GIoU:
            cw = b1_x2.maximum(b2_x2) - b1_x1.minimum(b2_x1)  # convex (smallest enclosing box) width
            ch = b1_y2.maximum(b2_y2) - b1_y1.minimum(b2_y1)  # convex height
            if CIoU or DIoU:  # Distance or Complete IoU https://arxiv.org/abs/1911.08287v1
                c2 = cw.pow(2) + ch.pow(2) + eps  # convex diagonal squared
                rho2 = ((b2_x1 + b2_x2 - b1_x1 - b1_x2).pow(2) + (b2_y1 + b2_y2 - b1_y1 - b1_y2).pow(2)) / 4  # center dist**2
                if CIoU:  # https://github.com/Zzh-tju/DIoU-SSD-pytorch/blob/master/utils/box/box_utils.py#L47
                    v = (4 / math.pi**2) * ((w2 / h2).atan() - (w1 / h1).atan()).pow(2)
                    with torch.no_grad():
                        alpha = v / (v - iou + (1 + eps))
                    return iou - (rho2 / c2 + v * alpha)  # CIoU
                return iou - rho2 / c2  # DIoU
            c_area = cw * ch + eps  # convex area
            return iou - (c_area - union) / c_area  # GIoU https://arxiv.org/pdf/1902.09630.pdf
        return iou  # IoU

    class TaskAlignedAssigner(nn.Module):
        """
        A task-aligned assigner for object detection.

        This class assigns ground-truth (gt) objects to anchors based on the task-aligned metric, which combines both
        classification and localization information.
        """

        def __init__(self, topk=13, num_classes=80, alpha=1.0, beta=6.0, eps=1e-9):
            """Initialize a TaskAlignedAssigner object with customizable hyperparameters."""
            super().__init__()
            self.topk = topk
            self.num_classes = num_classes
            self.bg_idx = num_classes
            self.alpha = alpha
            self.beta = beta
            self.eps = eps

        @torch.no_grad()
        def forward(self, pd_scores, pd_bboxes, anc_points, gt_labels, gt_bboxes, mask_gt):
            """
            Compute the task-aligned assignment. Reference code is available at
            https://github.com/Nioolek/PPYOLOE_pytorch/blob/master/ppyoloe/assigner/tal_assigner.py.
            """
            self.bs = pd_scores.shape[0]
            self.n_max_boxes = gt_bboxes.shape[1]

            if self.n_max_boxes == 0:
                device = gt_bboxes.device
                return (
                    torch.full_like(pd_scores[..., 0], self.bg_idx).to(device),
                    torch.zeros_like(pd_bboxes).to(device),
                    torch.zeros_like(pd_scores).to(device),
                    torch.zeros_like(pd_scores[..., 0]).to(device),
                    torch.zeros_like(pd_scores[..., 0]).to(device),
                )

            mask_pos, align_metric, overlaps = self.get_pos_mask(
                pd_scores, pd_bboxes, gt_labels, gt_bboxes, anc_points, mask_gt
            )

            target_gt_idx, fg_mask, mask_pos = self.select_highest_overlaps(mask_pos, overlaps, self.n_max_boxes)

            # Assigned target
            target_labels, target_bboxes, target_scores = self.get_targets(gt_labels, gt_bboxes, target_gt_idx, fg_mask)

            # Normalize
            align_metric *= mask_pos
            pos_align_metrics = align_metric.amax(dim=-1, keepdim=True)  # b, max_num_obj
            pos_overlaps = (overlaps * mask_pos).amax(dim=-1, keepdim=True)  # b, max_num_obj
            norm_align_metric = (align_metric * pos_overlaps / (pos_align_metrics + self.eps)).amax(-2).unsqueeze(-1)
            target_scores = target_scores * norm_align_metric

            return target_labels, target_bboxes, target_scores, fg_mask.bool(), target_gt_idx

        def get_pos_mask(self, pd_scores, pd_bboxes, gt_labels, gt_bboxes, anc_points, mask_gt):
            """Get in_gts mask, (b, max_num_obj, h*w)."""
            mask_in_gts = self.select_candidates_in_gts(anc_points, gt_bboxes)
            # Get anchor_align metric, (b, max_num_obj, h*w)
            align_metric, overlaps = self.get_box_metrics(pd_scores, pd_bboxes, gt_labels, gt_bboxes, mask_in_gts * mask_gt)
            # Get topk_metric mask, (b, max_num_obj, h*w)
            mask_topk = self.select_topk_candidates(align_metric, topk_mask=mask_gt.expand(-1, -1, self.topk).bool())
            # Merge all mask to a final mask, (b, max_num_obj, h*w)
            mask_pos = mask_topk * mask_in_gts * mask_gt

            return mask_pos, align_metric, overlaps

        def get_box_metrics(self, pd_scores, pd_bboxes, gt_labels, gt_bboxes, mask_gt):
            """Compute alignment metric given predicted and ground truth bounding boxes."""
            na = pd_bboxes.shape[-2]
            mask_gt = mask_gt.bool()  # b, max_num_obj, h*w
            overlaps = torch.zeros([self.bs, self.n_max_boxes, na], dtype=pd_bboxes.dtype, device=pd_bboxes.device)
            bbox_scores = torch.zeros([self.bs, self.n_max_boxes, na], dtype=pd_scores.dtype, device=pd_scores.device)

            ind = torch.zeros([2, self.bs, self.n_max_boxes], dtype=torch.long)  # 2, b, max_num_obj
            ind[0] = torch.arange(end=self.bs).view(-1, 1).expand(-1, self.n_max_boxes)  # b, max_num_obj
            ind[1] = gt_labels.squeeze(-1)  # b, max_num_obj
            # Get the scores of each grid for each gt cls
            bbox_scores[mask_gt] = pd_scores[ind[0], :, ind[1]][mask_gt]  # b, max_num_obj, h*w

            # (b, max_num_obj, 1, 4), (b, 1, h*w, 4)
            pd_boxes = pd_bboxes.unsqueeze(1).expand(-1, self.n_max_boxes, -1, -1)[mask_gt]
            gt_boxes = gt_bboxes.unsqueeze(2).expand(-1, -1, na, -1)[mask_gt]
            overlaps[mask_gt] = self.iou_calculation(gt_boxes, pd_boxes)

            align_metric = bbox_scores.pow(self.alpha) * overlaps.pow(self.beta)
            return align_metric, overlaps

        def iou_calculation(self, gt_bboxes, pd_bboxes):
            """IoU calculation for horizontal bounding boxes."""
            return bbox_iou(gt_bboxes, pd_bboxes, xywh=False, CIoU=True).squeeze(-1).clamp_(0)

        def select_topk_candidates(self, metrics, largest=True, topk_mask=None):
            """Select the top-k candidates based on the given metrics."""
            # (b, max_num_obj, topk)
            topk_metrics, topk_idxs = torch.topk(metrics, self.topk, dim=-1, largest=largest)
            if topk_mask is None:
                topk_mask = (topk_metrics.max(-1, keepdim=True)[0] > self.eps).expand_as(topk_idxs)
            # (b, max_num_obj, topk)
            topk_idxs.masked_fill_(~topk_mask, 0)

            # (b, max_num_obj, topk, h*w) -> (b, max_num_obj, h*w)
            count_tensor = torch.zeros(metrics.shape, dtype=torch.int8, device=topk_idxs.device)
            ones = torch.ones_like(topk_idxs[:, :, :1], dtype=torch.int8, device=topk_idxs.device)
            for k in range(self.topk):
                # Expand topk_idxs for each value of k and add 1 at the specified positions
                count_tensor.scatter_add_(-1, topk_idxs[:, :, k : k + 1], ones)
            # count_tensor.scatter_add_(-1, topk_idxs, torch.ones_like(topk_idxs, dtype=torch.int8, device=topk_idxs.device))
            # Filter invalid bboxes
            count_tensor.masked_fill_(count_tensor > 1, 0)

            return count_tensor.to(metrics.dtype)

        def get_targets(self, gt_labels, gt_bboxes, target_gt_idx, fg_mask):
            """Compute target labels, target bounding boxes, and target scores for the positive anchor points."""
            # Assigned target labels, (b, 1)
            batch_ind = torch.arange(end=self.bs, dtype=torch.int64, device=gt_labels.device)[..., None]
            target_gt_idx = target_gt_idx + batch_ind * self.n_max_boxes  # (b, h*w)
            target_labels = gt_labels.long().flatten()[target_gt_idx]  # (b, h*w)

            # Assigned target boxes, (b, max_num_obj, 4) -> (b, h*w, 4)
            target_bboxes = gt_bboxes.view(-1, gt_bboxes.shape[-1])[target_gt_idx]

            # Assigned target scores
            target_labels.clamp_(0)

            # 10x faster than F.one_hot()
            target_scores = torch.zeros(
                (target_labels.shape[0], target_labels.shape[1], self.num_classes),
                dtype=torch.int64,
                device=target_labels.device,
            )  # (b, h*w, 80)
            target_scores.scatter_(2, target_labels.unsqueeze(-1), 1)

            fg_scores_mask = fg_mask[:, :, None].repeat(1, 1, self.num_classes)  # (b, h*w, 80)
            target_scores = torch.where(fg_scores_mask > 0, target_scores, 0)

            return target_labels, target_bboxes, target_scores

        @staticmethod
        def select_candidates_in_gts(xy_centers, gt_bboxes, eps=1e-9):
            """Select the positive anchor center in gt."""
            n_anchors = xy_centers.shape[0]
            bs, n_boxes, _ = gt_bboxes.shape
            lt, rb = gt_bboxes.view(-1, 1, 4).chunk(2, 2)  # left-top, right-bottom
            bbox_deltas = torch.cat((xy_centers[None] - lt, rb - xy_centers[None]), dim=2).view(bs, n_boxes, n_anchors, -1)
            # return (bbox_deltas.min(3)[0] > eps).to(gt_bboxes.dtype)
            return bbox_deltas.amin(3).gt_(eps)

        @staticmethod
        def select_highest_overlaps(mask_pos, overlaps, n_max_boxes):
            """If an anchor box is assigned to multiple gts, the one with the highest IoU will be selected."""
            # (b, n_max_boxes, h*w) -> (b, h*w)
            fg_mask = mask_pos.sum(-2)
            if fg_mask.max() > 1:  # one anchor is assigned to multiple gt_bboxes
                mask_multi_gts = (fg_mask.unsqueeze(1) > 1).expand(-1, n_max_boxes, -1)  # (b, n_max_boxes, h*w)
                max_overlaps_idx = overlaps.argmax(1)  # (b, h*w)

                is_max_overlaps = torch.zeros(mask_pos.shape, dtype=mask_pos.dtype, device=mask_pos.device)
                is_max_overlaps.scatter_(1, max_overlaps_idx.unsqueeze(1), 1)

                mask_pos = torch.where(mask_multi_gts, is_max_overlaps, mask_pos).float()  # (b, n_max_boxes, h*w)
                fg_mask = mask_pos.sum(-2)
            # Find each grid serve which gt(index)
            target_gt_idx = mask_pos.argmax(-2)  # (b, h*w)
            return target_gt_idx, fg_mask, mask_pos

    def make_anchors(feats, strides, grid_cell_offset=0.5):
        """Generate anchors from features."""
        anchor_points, stride_tensor = [], []
        assert feats is not None
        dtype, device = feats[0].dtype, feats[0].device
        for i, stride in enumerate(strides):
            _, _, h, w = feats[i].shape
            sx = torch.arange(end=w, device=device, dtype=dtype) + grid_cell_offset  # shift x
            sy = torch.arange(end=h, device=device, dtype=dtype) + grid_cell_offset  # shift y
            sy, sx = torch.meshgrid(sy, sx, indexing="ij") if TORCH_1_10 else torch.meshgrid(sy, sx)
            anchor_points.append(torch.stack((sx, sy), -1).view(-1, 2))
            stride_tensor.append(torch.full((h * w, 1), stride, dtype=dtype, device=device))
        return torch.cat(anchor_points), torch.cat(stride_tensor)

    def dist2bbox(distance, anchor_points, xywh=True, dim=-1):
        """Transform distance(ltrb) to box(xywh or xyxy)."""
        lt, rb = distance.chunk(2, dim)
        x1y1 = anchor_points - lt
        x2y2 = anchor_points + rb
        if xywh:
            c_xy = (x1y1 + x2y2) / 2
            wh = x2y2 - x1y1
            return torch.cat((c_xy, wh), dim)  # xywh bbox
        return torch.cat((x1y1, x2y2), dim)  # xyxy bbox

    def bbox2dist(anchor_points, bbox, reg_max):
        """Transform bbox(xyxy) to dist(ltrb)."""
        x1y1, x2y2 = bbox.chunk(2, -1)
        return torch.cat((anchor_points - x1y1, x2y2 - anchor_points), -1).clamp_(0, reg_max - 0.01)  # dist (lt, rb)

    return SimpleNamespace(**{k: v for k, v in locals().items() if callable(v)})


# ====================================================================== ultralytics nn/modules, utils/loss.py
def v8_page(torch):
    nn = torch.nn
    F = torch.nn.functional
    tal = tal_page(torch)
    bbox_iou, make_anchors, dist2bbox, bbox2dist = tal.bbox_iou, tal.make_anchors, tal.dist2bbox, tal.bbox2dist
    TaskAlignedAssigner, xywh2xyxy = tal.TaskAlignedAssigner, tal.xywh2xyxy
    Conv = common_page(torch).Conv  # nn/modules/conv.py: the same text as yolov5's models/common.py

    # nn/modules/block.py
    class DFL(nn.Module):
        """
        Integral module of Distribution Focal Loss (DFL).

        Proposed in Generalized Focal Loss https://ieeexplore.ieee.org/document/9792391
        """

        def __init__(self, c1=16):
            """Initialize a convolutional layer with a given number of input channels."""
            super().__init__()
            self.conv = nn.Conv2d(c1, 1, 1, bias=False).requires_grad_(False)
            x = torch.arange(c1, dtype=torch.float)
            self.conv.weight.data[:] = nn.Parameter(x.view(1, c1, 1, 1))
            self.c1 = c1

        def forward(self, x):
            """Applies a transformer layer on input tensor 'x' and returns a tensor."""
            b, _, a = x.shape  # batch, channels, anchors
            return self.conv(x.view(b, 4, self.c1, a).transpose(2, 1).softmax(1)).view(b, 4, a)
            # return self.conv(x.view(b, self.c1, 4, a).softmax(1)).view(b, 4, a)

    class Bottleneck(nn.Module):
        """Standard bottleneck."""

        def __init__(self, c1, c2, shortcut=True, g=1, k=(3, 3), e=0.5):
            """Initializes a bottleneck module with given input/output channels, shortcut option, group, kernels, and
            expansion.
            """
            super().__init__()
            c_ = int(c2 * e)  # hidden channels
            self.cv1 = Conv(c1, c_, k[0], 1)
            self.cv2 = Conv(c_, c2, k[1], 1, g=g)
            self.add = shortcut and c1 == c2

        def forward(self, x):
            """'forward()' applies the YOLO FPN to input data."""
            return x + self.cv2(self.cv1(x)) if self.add else self.cv2(self.cv1(x))

    class C2f(nn.Module):
        """Faster Implementation of CSP Bottleneck with 2 convolutions."""

        def __init__(self, c1, c2, n=1, shortcut=False, g=1, e=0.5):
            """Initialize CSP bottleneck layer with two convolutions with arguments ch_in, ch_out, number, shortcut, groups,
            expansion.
            """
            super().__init__()
            self.c = int(c2 * e)  # hidden channels
            self.cv1 = Conv(c1, 2 * self.c, 1, 1)
            self.cv2 = Conv((2 + n) * self.c, c2, 1)  # optional act=FReLU(c2)
            self.m = nn.ModuleList(Bottleneck(self.c, self.c, shortcut, g, k=((3, 3), (3, 3)), e=1.0) for _ in range(n))

        def _forward(self, x):
            x.extend(m(x[-1]) for m in self.m)
            return self.cv2(torch.cat(x, 1))

        def forward(self, x):
            """Forward pass through C2f layer."""
            y = list(self.cv1(x).chunk(2, 1))
            return self._forward(y)

        def forward_split(self, x):
            """Forward pass using split() instead of chunk()."""
            y = list(self.cv1(x).split((self.c, self.c), 1))
            return self._forward(y)

    # nn/modules/head.py
    class Detect(nn.Module):
        """YOLOv8 Detect head for detection models."""

        dynamic = False  # force grid reconstruction
        export = False  # export mode
        shape = None
        anchors = torch.empty(0)  # init
        strides = torch.empty(0)  # init

        def __init__(self, nc=80, ch=()):
            """Initializes the YOLOv8 detection layer with specified number of classes and channels."""
            super().__init__()
            self.nc = nc  # number of classes
            self.nl = len(ch)  # number of detection layers
            self.reg_max = 16  # DFL channels (ch[0] // 16 to scale 4/8/12/16/20 for n/s/m/l/x)
            self.no = nc + self.reg_max * 4  # number of outputs per anchor
            self.stride = torch.zeros(self.nl)  # strides computed during build
            c2, c3 = max((16, ch[0] // 4, self.reg_max * 4)), max(ch[0], min(self.nc, 100))  # channels
            self.cv2 = nn.ModuleList(
                nn.Sequential(Conv(x, c2, 3), Conv(c2, c2, 3), nn.Conv2d(c2, 4 * self.reg_max, 1)) for x in ch
            )
            self.cv3 = nn.ModuleList(nn.Sequential(Conv(x, c3, 3), Conv(c3, c3, 3), nn.Conv2d(c3, self.nc, 1)) for x in ch)
            self.dfl = DFL(self.reg_max) if self.reg_max > 1 else nn.Identity()

        def forward(self, x):
            """Concatenates and returns predicted bounding boxes and class probabilities."""
            for i in range(self.nl):
                x[i] = torch.cat((self.cv2[i](x[i]), self.cv3[i](x[i])), 1)
            if self.training:  # Training path
                return x

            # Inference path
            shape = x[0].shape  # BCHW
            x_cat = torch.cat([xi.view(shape[0], self.no, -1) for xi in x], 2)
            if self.dynamic or self.shape != shape:
                self.anchors, self.strides = (x.transpose(0, 1) for x in make_anchors(x, self.stride, 0.5))
                self.shape = shape

            box, cls = x_cat.split((self.reg_max * 4, self.nc), 1)
            dbox = self.decode_bboxes(box)
            y = torch.cat((dbox, cls.sigmoid()), 1)
            return y if self.export else (y, x)

        def bias_init(self):
            """Initialize Detect() biases, WARNING: requires stride availability."""
            m = self  # self.model[-1]  # Detect() module
            # cf = torch.bincount(torch.tensor(np.concatenate(dataset.labels, 0)[:, 0]).long(), minlength=nc) + 1
            # ncf = math.log(0.6 / (m.nc - 0.999999)) if cf is None else torch.log(cf / cf.sum())  # nominal class frequency
            for a, b, s in zip(m.cv2, m.cv3, m.stride):  # from
                a[-1].bias.data[:] = 1.0  # box
                b[-1].bias.data[: m.nc] = math.log(5 / m.nc / (640 / s) ** 2)  # cls (.01 objects, 80 classes, 640 img)

        def decode_bboxes(self, bboxes):
            """Decode bounding boxes."""
            return dist2bbox(self.dfl(bboxes), self.anchors.unsqueeze(0), xywh=True, dim=1) * self.strides

    # utils/loss.py
    class DFLoss(nn.Module):
        """Criterion class for computing Distribution Focal Loss (DFL)."""

        def __init__(self, reg_max=16) -> None:
            """Initialize the DFL module with regularization maximum."""
            super().__init__()
            self.reg_max = reg_max

        def __call__(self, pred_dist, target):
            """Return sum of left and right DFL losses from https://ieeexplore.ieee.org/document/9792391."""
            target = target.clamp_(0, self.reg_max - 1 - 0.01)
            tl = target.long()  # target left
            tr = tl + 1  # target right
            wl = tr - target  # weight left
            wr = 1 - wl  # weight right
            return (
                F.cross_entropy(pred_dist, tl.view(-1), reduction="none").view(tl.shape) * wl
                + F.cross_entropy(pred_dist, tr.view(-1), reduction="none").view(tl.shape) * wr
            ).mean(-1, keepdim=True)

    class BboxLoss(nn.Module):
        """Criterion class for computing training losses for bounding boxes."""

        def __init__(self, reg_max=16):
            """Initialize the BboxLoss module with regularization maximum and DFL settings."""
            super().__init__()
            self.dfl_loss = DFLoss(reg_max) if reg_max > 1 else None

        def forward(self, pred_dist, pred_bboxes, anchor_points, target_bboxes, target_scores, target_scores_sum, fg_mask):
            """Compute IoU and DFL losses for bounding boxes."""
            weight = target_scores.sum(-1)[fg_mask].unsqueeze(-1)
            iou = bbox_iou(pred_bboxes[fg_mask], target_bboxes[fg_mask], xywh=False, CIoU=True)
            loss_iou = ((1.0 - iou) * weight).sum() / target_scores_sum

            # DFL loss
            if self.dfl_loss:
                target_ltrb = bbox2dist(anchor_points, target_bboxes, self.dfl_loss.reg_max - 1)
                loss_dfl = self.dfl_loss(pred_dist[fg_mask].view(-1, self.dfl_loss.reg_max), target_ltrb[fg_mask]) * weight
                loss_dfl = loss_dfl.sum() / target_scores_sum
            else:
                loss_dfl = torch.tensor(0.0).to(pred_dist.device)

            return loss_iou, loss_dfl

    class v8DetectionLoss:
        """Criterion class for computing training losses."""

        def __init__(self, model, tal_topk=10):  # model must be de-paralleled
            """Initializes v8DetectionLoss with the model, defining model-related properties and BCE loss function."""
            device = next(model.parameters()).device  # get model device
            h = model.args  # hyperparameters

            m = model.model[-1]  # Detect() module
            self.bce = nn.BCEWithLogitsLoss(reduction="none")
            self.hyp = h
            self.stride = m.stride  # model strides
            self.nc = m.nc  # number of classes
            self.no = m.nc + m.reg_max * 4
            self.reg_max = m.reg_max
            self.device = device

            self.use_dfl = m.reg_max > 1

            self.assigner = TaskAlignedAssigner(topk=tal_topk, num_classes=self.nc, alpha=0.5, beta=6.0)
            self.bbox_loss = BboxLoss(m.reg_max).to(device)
            self.proj = torch.arange(m.reg_max, dtype=torch.float, device=device)

        def preprocess(self, targets, batch_size, scale_tensor):
            """Preprocesses the target counts and matches with the input batch size to output a tensor."""
            nl, ne = targets.shape
            if nl == 0:
                out = torch.zeros(batch_size, 0, ne - 1, device=self.device)
            else:
                i = targets[:, 0]  # image index
                _, counts = i.unique(return_counts=True)
                counts = counts.to(dtype=torch.int32)
                out = torch.zeros(batch_size, counts.max(), ne - 1, device=self.device)
                for j in range(batch_size):
                    matches = i == j
                    n = matches.sum()
                    if n:
                        out[j, :n] = targets[matches, 1:]
                out[..., 1:5] = xywh2xyxy(out[..., 1:5].mul_(scale_tensor))
            return out

        def bbox_decode(self, anchor_points, pred_dist):
            """Decode predicted object bounding box coordinates from anchor points and distribution."""
            if self.use_dfl:
                b, a, c = pred_dist.shape  # batch, anchors, channels
                pred_dist = pred_dist.view(b, a, 4, c // 4).softmax(3).matmul(self.proj.type(pred_dist.dtype))
                # pred_dist = pred_dist.view(b, a, c // 4, 4).transpose(2,3).softmax(3).matmul(self.proj.type(pred_dist.dtype))
                # pred_dist = (pred_dist.view(b, a, c // 4, 4).softmax(2) * self.proj.type(pred_dist.dtype).view(1, 1, -1, 1)).sum(2)
            return dist2bbox(pred_dist, anchor_points, xywh=False)

        def __call__(self, preds, batch):
            """Calculate the sum of the loss for box, cls and dfl multiplied by batch size."""
            loss = torch.zeros(3, device=self.device)  # box, cls, dfl
            feats = preds[1] if isinstance(preds, tuple) else preds
            pred_distri, pred_scores = torch.cat([xi.view(feats[0].shape[0], self.no, -1) for xi in feats], 2).split(
                (self.reg_max * 4, self.nc), 1
            )

            pred_scores = pred_scores.permute(0, 2, 1).contiguous()
            pred_distri = pred_distri.permute(0, 2, 1).contiguous()

            dtype = pred_scores.dtype
            batch_size = pred_scores.shape[0]
            imgsz = torch.tensor(feats[0].shape[2:], device=self.device, dtype=dtype) * self.stride[0]  # image size (h,w)
            anchor_points, stride_tensor = make_anchors(feats, self.stride, 0.5)

            # Targets
            targets = torch.cat((batch["batch_idx"].view(-1, 1), batch["cls"].view(-1, 1), batch["bboxes"]), 1)
            targets = self.preprocess(targets.to(self.device), batch_size, scale_tensor=imgsz[[1, 0, 1, 0]])
            gt_labels, gt_bboxes = targets.split((1, 4), 2)  # cls, xyxy
            mask_gt = gt_bboxes.sum(2, keepdim=True).gt_(0.0)

            # Pboxes
            pred_bboxes = self.bbox_decode(anchor_points, pred_distri)  # xyxy, (b, h*w, 4)

            _, target_bboxes, target_scores, fg_mask, _ = self.assigner(
                pred_scores.detach().sigmoid(),
                (pred_bboxes.detach() * stride_tensor).type(gt_bboxes.dtype),
                anchor_points * stride_tensor,
                gt_labels,
                gt_bboxes,
                mask_gt,
            )

            target_scores_sum = max(target_scores.sum(), 1)

            # Cls loss
            # loss[1] = self.varifocal_loss(pred_scores, target_scores, target_labels) / target_scores_sum  # VFL way
            loss[1] = self.bce(pred_scores, target_scores.to(dtype)).sum() / target_scores_sum  # BCE

            # Bbox loss
            if fg_mask.sum():
                target_bboxes /= stride_tensor
                loss[0], loss[2] = self.bbox_loss(
                    pred_distri, pred_bboxes, anchor_points, target_bboxes, target_scores, target_scores_sum, fg_mask
                )

            loss[0] *= self.hyp.box  # box gain
            loss[1] *= self.hyp.cls  # cls gain
            loss[2] *= self.hyp.dfl  # dfl gain

            return loss.sum() * batch_size, loss.detach()  # loss(box, cls, dfl)

    class TinyDetectionModel(nn.Module):
        """A two-level stand-in for ``DetectionModel`` (its yaml parser left out): strides 4 and 8."""

        def __init__(self, nc=2, args=None):
            super().__init__()
            self.b0 = Conv(3, 8, 3, 2)
            self.b1 = C2f(8, 8, 1, True)
            self.b2 = Conv(8, 16, 3, 2)
            self.b3 = Conv(16, 16, 3, 2)
            self.model = nn.ModuleList([self.b0, self.b1, self.b2, self.b3, Detect(nc, ch=(16, 16))])
            self.args = args
            m = self.model[-1]
            m.stride = torch.tensor([4.0, 8.0])
            self.stride = m.stride

        def forward(self, x):
            p3 = self.b2(self.b1(self.b0(x)))
            return self.model[-1]([p3, self.b3(p3)])

    return SimpleNamespace(**{k: v for k, v in locals().items() if callable(v)})


# ====================================================================== NumPy references
def _sig(x):
    return 1.0 / (1.0 + np.exp(-x))


def _bce(x, t):
    return np.maximum(x, 0) - x * t + np.log1p(np.exp(-np.abs(x)))


def _np_ious(b1, b2, xywh=True, v8=False, eps=1e-7, alpha=None):
    """Row-wise IoU/GIoU/DIoU/CIoU of (n,4) arrays; ``alpha`` frozen when given (the page's no_grad alpha)."""
    b1, b2 = np.atleast_2d(b1).astype(np.float64), np.atleast_2d(b2).astype(np.float64)
    if xywh:
        c1 = np.stack([b1[:, 0] - b1[:, 2] / 2, b1[:, 1] - b1[:, 3] / 2, b1[:, 0] + b1[:, 2] / 2, b1[:, 1] + b1[:, 3] / 2], 1)
        c2_ = np.stack([b2[:, 0] - b2[:, 2] / 2, b2[:, 1] - b2[:, 3] / 2, b2[:, 0] + b2[:, 2] / 2, b2[:, 1] + b2[:, 3] / 2], 1)
        w1, h1, w2, h2 = b1[:, 2], b1[:, 3], b2[:, 2], b2[:, 3]
    else:
        c1, c2_ = b1, b2
        w1, w2 = b1[:, 2] - b1[:, 0], b2[:, 2] - b2[:, 0]
        if v8:
            h1, h2 = b1[:, 3] - b1[:, 1] + eps, b2[:, 3] - b2[:, 1] + eps
        else:
            h1, h2 = np.maximum(b1[:, 3] - b1[:, 1], eps), np.maximum(b2[:, 3] - b2[:, 1], eps)
    iw = np.maximum(np.minimum(c1[:, 2], c2_[:, 2]) - np.maximum(c1[:, 0], c2_[:, 0]), 0)
    ih = np.maximum(np.minimum(c1[:, 3], c2_[:, 3]) - np.maximum(c1[:, 1], c2_[:, 1]), 0)
    inter = iw * ih
    union = w1 * h1 + w2 * h2 - inter + eps
    iou = inter / union
    cw = np.maximum(c1[:, 2], c2_[:, 2]) - np.minimum(c1[:, 0], c2_[:, 0])
    ch = np.maximum(c1[:, 3], c2_[:, 3]) - np.minimum(c1[:, 1], c2_[:, 1])
    diag = cw**2 + ch**2 + eps
    rho2 = ((c2_[:, 0] + c2_[:, 2] - c1[:, 0] - c1[:, 2]) ** 2 + (c2_[:, 1] + c2_[:, 3] - c1[:, 1] - c1[:, 3]) ** 2) / 4
    v = (4 / math.pi**2) * (np.arctan(w2 / h2) - np.arctan(w1 / h1)) ** 2
    if alpha is None:
        alpha = v / (v - iou + (1 + eps))
    area = cw * ch + eps
    return dict(iou=iou, giou=iou - (area - union) / area, diou=iou - rho2 / diag,
                ciou=iou - (rho2 / diag + v * alpha), alpha=alpha)


def _np_pair_iou(a, b, eps=1e-7):
    out = np.zeros((len(a), len(b)))
    for i in range(len(a)):
        for j in range(len(b)):
            iw = max(0.0, min(a[i, 2], b[j, 2]) - max(a[i, 0], b[j, 0]))
            ih = max(0.0, min(a[i, 3], b[j, 3]) - max(a[i, 1], b[j, 1]))
            inter = iw * ih
            out[i, j] = inter / ((a[i, 2] - a[i, 0]) * (a[i, 3] - a[i, 1]) + (b[j, 2] - b[j, 0]) * (b[j, 3] - b[j, 1]) - inter + eps)
    return out


def _np_greedy_nms(boxes, scores, thr):
    order = sorted(range(len(scores)), key=lambda k: -scores[k])
    keep = []
    while order:
        i = order.pop(0)
        keep.append(i)
        order = [o for o in order if _np_pair_iou(boxes[i:i + 1], boxes[o:o + 1], eps=0.0)[0, 0] <= thr]
    return keep


def _np_nms_pipeline(pred, conf_thres, iou_thres, classes=None, agnostic=False, multi_label=False):
    """non_max_suppression written again: loops over candidates, per-class greedy NMS."""
    out = []
    for x in pred:
        rows = []
        for r in x:
            if r[4] <= conf_thres:
                continue
            cls_conf = r[5:] * r[4]
            box = [r[0] - r[2] / 2, r[1] - r[3] / 2, r[0] + r[2] / 2, r[1] + r[3] / 2]
            if multi_label:
                rows += [box + [cls_conf[c], c] for c in range(len(cls_conf)) if cls_conf[c] > conf_thres]
            else:
                c = int(np.argmax(cls_conf))
                if cls_conf[c] > conf_thres:
                    rows.append(box + [cls_conf[c], c])
        if classes is not None:
            rows = [r for r in rows if r[5] in classes]
        rows = np.array(sorted(rows, key=lambda r: -r[4])).reshape(-1, 6)
        keep = []
        for c in ([None] if agnostic else sorted(set(rows[:, 5]))):
            idx = [k for k in range(len(rows)) if agnostic or rows[k, 5] == c]
            keep += [idx[k] for k in _np_greedy_nms(rows[idx, :4], rows[idx, 4], iou_thres)]
        out.append(rows[sorted(keep)])
    return out


def _fd_grad(f, x, eps=1e-6, at=None):
    """Central finite differences of the scalar f (NumPy in, float out) at the float64 array x."""
    g = np.full_like(x, np.nan) if at is not None else np.zeros_like(x)
    for idx in (at if at is not None else np.ndindex(*x.shape)):
        xp, xm = x.copy(), x.copy()
        xp[idx] += eps
        xm[idx] -= eps
        g[idx] = (f(xp) - f(xm)) / (2 * eps)
    return g


def _some(rng, shape, n):
    flat = rng.choice(int(np.prod(shape)), size=n, replace=False)
    return [tuple(int(i) for i in np.unravel_index(k, shape)) for k in flat]


def _rand_xyxy(rng, n, size=20.0):
    xy = rng.uniform(0, size * 0.6, (n, 2))
    wh = rng.uniform(2.0, size * 0.5, (n, 2))
    return np.concatenate([xy, xy + wh], axis=1)


# ====================================================================== tests: boxes, IoU, NMS
def test_box_conversions_clip_and_scale_boxes_against_closed_forms():
    torch = lucid
    gp = general_page(torch)
    rng = np.random.default_rng(0)
    xywh = np.concatenate([rng.uniform(0.2, 0.8, (5, 2)), rng.uniform(0.05, 0.4, (5, 2))], 1)
    x, y, w, h = xywh.T
    xyxy = np.stack([x - w / 2, y - h / 2, x + w / 2, y + h / 2], 1)
    np.testing.assert_allclose(_np(gp.xywh2xyxy(torch.tensor(xywh))), xyxy, rtol=0, atol=1e-15)
    np.testing.assert_allclose(_np(gp.xyxy2xywh(torch.tensor(xyxy))), xywh, rtol=0, atol=1e-15)
    t = torch.tensor(xywh)
    got = _np(gp.xywhn2xyxy(t, w=64, h=48, padw=3, padh=-2))
    np.testing.assert_allclose(got, xyxy * [64, 48, 64, 48] + [3, -2, 3, -2], rtol=1e-14)
    np.testing.assert_array_equal(_np(t), xywh)  # the input is not touched (clone)

    boxes = np.array([[-3.0, 2.0, 50.0, 70.0], [10.0, -1.0, 30.0, 20.0], [5.0, 6.0, 7.0, 8.0]])
    tb = torch.tensor(boxes)
    gp.clip_boxes(tb, (64, 40))  # in place, (height, width)
    np.testing.assert_array_equal(_np(tb), np.clip(boxes, 0, [40, 64, 40, 64]))

    # letterboxed 32x48 image of an original 64x80 one: gain 0.5, x padding 4
    tb = torch.tensor(boxes)
    out = gp.scale_boxes((32, 48), tb, (64, 80))
    assert out is tb
    np.testing.assert_allclose(_np(tb), np.clip((boxes - [4, 0, 4, 0]) / 0.5, 0, [80, 64, 80, 64]), rtol=1e-14)
    tb = torch.tensor(boxes)
    gp.scale_boxes((32, 48), tb, (64, 80), ratio_pad=((0.25, 0.25), (1.0, 2.0)))
    np.testing.assert_allclose(_np(tb), np.clip((boxes - [1, 2, 1, 2]) / 0.25, 0, [80, 64, 80, 64]), rtol=1e-14)


def test_bbox_iou_variants_box_iou_and_their_gradients_against_numpy():
    torch = lucid
    mp, tp = metrics_page(torch), tal_page(torch)
    rng = np.random.default_rng(1)
    a, b = _rand_xyxy(rng, 7), _rand_xyxy(rng, 7)
    b[0] = a[0] + 15  # disjoint pair: IoU 0, the penalties carry the signal
    a_wh = np.concatenate([(a[:, :2] + a[:, 2:]) / 2, a[:, 2:] - a[:, :2]], 1)
    b_wh = np.concatenate([(b[:, :2] + b[:, 2:]) / 2, b[:, 2:] - b[:, :2]], 1)
    for xywh, (p, q) in ((True, (a_wh, b_wh)), (False, (a, b))):
        for v8, fn in ((False, mp.bbox_iou), (True, tp.bbox_iou)):
            ref = _np_ious(p, q, xywh=xywh, v8=v8)
            tpp, tq = torch.tensor(p), torch.tensor(q)
            np.testing.assert_allclose(_np(fn(tpp, tq, xywh=xywh))[:, 0], ref["iou"], rtol=1e-12, atol=1e-15)
            for kind in ("GIoU", "DIoU", "CIoU"):
                got = _np(fn(tpp, tq, xywh=xywh, **{kind: True}))[:, 0]
                np.testing.assert_allclose(got, ref[kind.lower()], rtol=1e-12, atol=1e-14, err_msg=kind)
    assert _np_ious(a[:1], b[:1], xywh=False)["iou"][0] == 0.0
    # one box against many (the (1,4) vs (n,4) broadcast the docstring states)
    np.testing.assert_allclose(_np(mp.bbox_iou(torch.tensor(a[:1]), torch.tensor(b), xywh=False, GIoU=True))[:, 0],
                               _np_ious(np.repeat(a[:1], 7, 0), b, xywh=False)["giou"], rtol=1e-12)
    np.testing.assert_allclose(_np(mp.box_iou(torch.tensor(a), torch.tensor(b))), _np_pair_iou(a, b), rtol=1e-12, atol=1e-15)

    # gradients in float64 against central differences; CIoU's alpha is under no_grad, so it is frozen
    ta = torch.tensor(a, requires_grad=True)
    (1 - mp.bbox_iou(ta, torch.tensor(b), xywh=False, GIoU=True)).sum().backward()
    fd = _fd_grad(lambda z: float((1 - _np_ious(z, b, xywh=False)["giou"]).sum()), a)
    np.testing.assert_allclose(_np(ta.grad), fd, rtol=1e-6, atol=1e-8)
    ta = torch.tensor(a_wh, requires_grad=True)
    alpha = _np_ious(a_wh, b_wh, v8=True)["alpha"]
    (1 - tp.bbox_iou(ta, torch.tensor(b_wh), CIoU=True)).sum().backward()
    fd = _fd_grad(lambda z: float((1 - _np_ious(z, b_wh, v8=True, alpha=alpha)["ciou"]).sum()), a_wh)
    np.testing.assert_allclose(_np(ta.grad), fd, rtol=1e-6, atol=1e-8)


def _nms_inputs(rng, bs=2, n=14, nc=3):
    pred = np.zeros((bs, n, 5 + nc))
    centres = rng.uniform(10, 50, (bs, 3, 2))
    for b in range(bs):
        k = rng.integers(0, 3, n)
        pred[b, :, :2] = centres[b, k] + rng.normal(0, 2.0, (n, 2))
        pred[b, :, 2:4] = rng.uniform(8, 14, (n, 2))
        pred[b, :, 4] = rng.uniform(0.05, 1.0, n)
        pred[b, :, 5:] = rng.dirichlet(np.ones(nc) * 0.7, n)
    return pred


def test_non_max_suppression_against_brute_force():
    torch = lucid
    gp = general_page(torch)
    rng = np.random.default_rng(2)
    boxes, scores = _rand_xyxy(rng, 12), rng.permutation(12) / 12 + 0.01
    keep = _nms_for(torch)(torch.tensor(boxes), torch.tensor(scores), 0.3).tolist()
    assert keep == _np_greedy_nms(boxes, scores, 0.3)
    assert _nms_for(torch)(torch.zeros((0, 4)), torch.zeros(0), 0.5).shape == (0,)

    pred = _nms_inputs(rng)
    cases = [dict(), dict(agnostic=True), dict(multi_label=True), dict(classes=[0, 2]), dict(iou_thres=0.2, conf_thres=0.1)]
    for kw in cases:
        conf, iou = kw.pop("conf_thres", 0.25), kw.pop("iou_thres", 0.45)
        out = gp.non_max_suppression(torch.tensor(pred, dtype=torch.float32), conf, iou, **kw)
        ref = _np_nms_pipeline(pred, conf, iou, **kw)
        assert len(out) == 2
        for o, r in zip(out, ref):
            o = _np(o)
            o = o[np.lexsort((o[:, 5], -o[:, 4]))]
            r = r[np.lexsort((r[:, 5], -r[:, 4]))]
            assert o.shape == r.shape and o.shape[0] > 0, kw
            np.testing.assert_allclose(o, r, rtol=1e-5, atol=1e-5, err_msg=str(kw))
    # autolabelling: a-priori labels (class, xywh) join as rows of confidence 1 (``v[range(n), cls + 5] = 1.0``)
    lbs = [np.array([[2, 30.0, 30.0, 10.0, 12.0], [0, 12.0, 40.0, 9.0, 9.0]]), np.array([[1, 45.0, 20.0, 11.0, 8.0]])]
    out = gp.non_max_suppression(torch.tensor(pred, dtype=torch.float32), 0.25, 0.45,
                                 labels=[torch.tensor(lb, dtype=torch.float32) for lb in lbs])
    for o, x, lb in zip(out, pred, lbs):
        rows = np.zeros((len(lb), 8))
        rows[:, :4], rows[:, 4] = lb[:, 1:], 1.0
        rows[np.arange(len(lb)), lb[:, 0].astype(int) + 5] = 1.0
        r = _np_nms_pipeline(np.concatenate([x, rows])[None], 0.25, 0.45)[0]
        o = _np(o)
        np.testing.assert_allclose(o[np.lexsort((o[:, 5], -o[:, 4]))], r[np.lexsort((r[:, 5], -r[:, 4]))],
                                   rtol=1e-5, atol=1e-5)
        assert (o[:, 4] == 1.0).sum() >= 1
    # nothing above the threshold: the (0, 6) placeholder
    out = gp.non_max_suppression(torch.tensor(pred * [1, 1, 1, 1, 0, 1, 1, 1], dtype=torch.float32))
    assert [tuple(o.shape) for o in out] == [(0, 6), (0, 6)]


# ====================================================================== tests: metrics
def _np_interp(x, xp, fp):
    """np.interp's rule, by a loop: the last xp[j] <= x, linear to xp[j + 1]; the end value at and past xp[-1]."""
    if x >= xp[-1]:
        return fp[-1]
    j = max(k for k in range(len(xp)) if xp[k] <= x)
    return fp[j] + (x - xp[j]) * (fp[j + 1] - fp[j]) / (xp[j + 1] - xp[j])


def _np_ap(recall, precision):
    mrec = [0.0] + list(recall) + [1.0]
    mpre = [1.0] + list(precision) + [0.0]
    env = list(mpre)
    for k in range(len(env) - 2, -1, -1):
        env[k] = max(env[k], env[k + 1])
    xs = [k / 100 for k in range(101)]
    ys = [_np_interp(x, mrec, env) for x in xs]
    return sum((ys[k] + ys[k + 1]) / 2 * (xs[k + 1] - xs[k]) for k in range(100))


def _np_process_batch(det, lab, iouv):
    iou = _np_pair_iou(lab[:, 1:], det[:, :4])
    correct = np.zeros((len(det), len(iouv)), bool)
    for t, thr in enumerate(iouv):
        m = [(i, j, iou[i, j]) for i in range(len(lab)) for j in range(len(det))
             if iou[i, j] >= thr and lab[i, 0] == det[j, 5]]
        m.sort(key=lambda r: -r[2])
        best_per_det = {}
        for i, j, v in m:  # the highest IoU per detection...
            best_per_det.setdefault(j, (i, j, v))
        per_label = {}
        for j in sorted(best_per_det):  # ...then, per label, the lowest detection index (yolov5's order)
            i = best_per_det[j][0]
            per_label.setdefault(i, j)
        for j in per_label.values():
            correct[j, t] = True
    return correct


def _metrics_inputs(rng):
    lab = np.concatenate([rng.integers(0, 3, (6, 1)).astype(float), _rand_xyxy(rng, 6, 40)], 1)
    det = []
    for k in range(10):
        i = k % 6
        box = lab[i, 1:] + rng.normal(0, 2.0 if k < 6 else 4.0, 4)
        cls = lab[i, 0] if k not in (3, 8) else (lab[i, 0] + 1) % 3
        det.append(list(box) + [rng.uniform(0.3, 1.0), cls])
    return np.array(det), lab


def test_process_batch_ap_per_class_and_confusion_matrix_against_loops():
    torch = lucid
    mp = metrics_page(torch)
    rng = np.random.default_rng(3)
    det, lab = _metrics_inputs(rng)
    iouv = np.linspace(0.5, 0.95, 10)
    correct = mp.process_batch(torch.tensor(det), torch.tensor(lab), torch.tensor(iouv))
    assert correct.dtype == torch.bool
    ref = _np_process_batch(det, lab, iouv)
    np.testing.assert_array_equal(correct.cpu().numpy(), ref)
    assert 0 < ref.sum() < ref.size

    tp, fp, p, r, f1, ap, classes = mp.ap_per_class(ref, det[:, 4], det[:, 5], lab[:, 0], names={0: "a", 1: "b", 2: "c"})
    order = np.argsort(-det[:, 4])
    for ci, c in enumerate(classes):
        sel = [k for k in order if det[k, 5] == c]
        n_l = int((lab[:, 0] == c).sum())
        for j in range(len(iouv)):
            hits = np.cumsum([ref[k, j] for k in sel])
            rec = hits / (n_l + 1e-16)
            prec = hits / np.arange(1, len(sel) + 1)
            assert abs(ap[ci, j] - _np_ap(rec, prec)) < 1e-12
    np.testing.assert_array_equal(tp, np.round(r * np.unique(lab[:, 0], return_counts=True)[1]))
    assert (ap[:, 0] >= ap[:, -1]).all() and ap[:, 0].max() > 0

    cm = mp.ConfusionMatrix(nc=3, conf=0.4, iou_thres=0.45)
    cm.process_batch(torch.tensor(det), torch.tensor(lab))
    ref_m = np.zeros((4, 4))
    keep = det[det[:, 4] > 0.4]
    iou = _np_pair_iou(lab[:, 1:], keep[:, :4])
    m = sorted([(i, j, iou[i, j]) for i in range(len(lab)) for j in range(len(keep)) if iou[i, j] > 0.45],
               key=lambda x: -x[2])
    best_per_det, pairs = {}, {}
    for i, j, v in m:  # the highest IoU per detection...
        best_per_det.setdefault(j, (i, v))
    for j, (i, v) in sorted(best_per_det.items(), key=lambda kv: -kv[1][1]):  # ...then the highest per label
        pairs.setdefault(i, j)
    used_d = set(pairs.values())
    for i in range(len(lab)):
        ref_m[int(keep[pairs[i], 5]) if i in pairs else 3, int(lab[i, 0])] += 1
    for j in range(len(keep)):
        if j not in used_d:
            ref_m[int(keep[j, 5]), 3] += 1
    np.testing.assert_array_equal(cm.matrix, ref_m)
    tps, fps = cm.tp_fp()
    np.testing.assert_array_equal(tps, np.diag(ref_m)[:3])
    np.testing.assert_array_equal(fps, ref_m.sum(1)[:3] - np.diag(ref_m)[:3])
    cm.process_batch(None, torch.tensor([0, 2, 2]))
    assert cm.matrix[3, 2] == ref_m[3, 2] + 2 and cm.matrix[3, 0] == ref_m[3, 0] + 1


# ====================================================================== tests: yolov5 losses
_HYP = dict(box=0.05, obj=1.0, cls=0.5, cls_pw=1.0, obj_pw=1.0, anchor_t=4.0, fl_gamma=0.0, label_smoothing=0.1)
_ANCHORS5 = ((4, 5, 8, 10, 12, 6), (16, 20, 24, 14, 30, 30))


def _v5_targets():
    # (image, class, x, y, w, h), normalized; the last one is centred on the right edge (x = 1), so the
    # grid index is clamped and -- gi, gj being views of gij -- the clamped value reaches tbox too
    return np.array([[0, 0, 0.30, 0.40, 0.30, 0.25],
                     [0, 2, 0.72, 0.66, 0.55, 0.60],
                     [1, 1, 0.45, 0.20, 0.20, 0.30],
                     [1, 2, 1.00, 0.81, 0.25, 0.18]])


def _np_build_targets(shapes, targets, anchors, anchor_t):
    """build_targets by loops, rows in the page's order: offset, then anchor, then target."""
    off = [(0.0, 0.0), (0.5, 0.0), (0.0, 0.5), (-0.5, 0.0), (0.0, -0.5)]
    levels = []
    for (ny, nx), anc in zip(shapes, anchors):
        rows = []
        for o in range(5):
            for a in range(len(anc)):
                for b, c, x, y, w, h in targets:
                    gx, gy, gw, gh = x * nx, y * ny, w * nx, h * ny
                    rw, rh = gw / anc[a][0], gh / anc[a][1]
                    if max(rw, 1 / rw, rh, 1 / rh) >= anchor_t:
                        continue
                    ix, iy = nx - gx, ny - gy
                    ok = [True, gx % 1 < 0.5 and gx > 1, gy % 1 < 0.5 and gy > 1,
                          ix % 1 < 0.5 and ix > 1, iy % 1 < 0.5 and iy > 1][o]
                    if not ok:
                        continue
                    gi = min(max(int(gx - off[o][0]), 0), nx - 1)
                    gj = min(max(int(gy - off[o][1]), 0), ny - 1)
                    rows.append(dict(b=int(b), a=a, gj=gj, gi=gi, c=int(c), tbox=[gx - gi, gy - gj, gw, gh],
                                     anchor=list(anc[a])))
        levels.append(rows)
    return levels


def _np_v5_loss(ps, levels, hyp, nc, balance, frozen=None, gr=1.0):
    """ComputeLoss written again; ``frozen``: the CIoU alphas and objectness targets (detached in the page)."""
    cp, cn = 1.0 - 0.5 * hyp["label_smoothing"], 0.5 * hyp["label_smoothing"]
    lbox = lobj = lcls = 0.0
    keep = []
    for i, (pi, rows) in enumerate(zip(ps, levels)):
        tobj = np.zeros(pi.shape[:4])
        alpha = tio = None
        if rows:
            sub = np.array([pi[r["b"], r["a"], r["gj"], r["gi"]] for r in rows])
            pxy = _sig(sub[:, :2]) * 2 - 0.5
            pwh = (_sig(sub[:, 2:4]) * 2) ** 2 * np.array([r["anchor"] for r in rows])
            res = _np_ious(np.concatenate([pxy, pwh], 1), np.array([r["tbox"] for r in rows]),
                           alpha=None if frozen is None else frozen[i][0])
            alpha = res["alpha"]
            lbox += (1.0 - res["ciou"]).mean()
            tio = (1.0 - gr) + gr * np.maximum(res["ciou"], 0) if frozen is None else frozen[i][1]
            for r, v in zip(rows, tio):
                tobj[r["b"], r["a"], r["gj"], r["gi"]] = v
            t = np.full((len(rows), nc), cn)
            t[np.arange(len(rows)), [r["c"] for r in rows]] = cp
            lcls += _bce(sub[:, 5:], t).mean()
        keep.append((alpha, tio))
        lobj += _bce(pi[..., 4], tobj).mean() * balance[i]
    total = (lbox * hyp["box"] + lobj * hyp["obj"] + lcls * hyp["cls"]) * ps[0].shape[0]
    return total, np.array([lbox * hyp["box"], lobj * hyp["obj"], lcls * hyp["cls"]]), keep


def _v5_model(torch, hyp=_HYP, seed=5):
    cp = common_page(torch)
    torch.manual_seed(0)
    model = cp.TinyDetectionModel(nc=3, anchors=_ANCHORS5, hyp=dict(hyp))
    _load(torch, model, seed)
    return model


def test_smooth_bce_focal_and_quality_focal_losses_against_numpy():
    torch = lucid
    lp = loss5_page(torch)
    assert lp.smooth_BCE(0.1) == (0.95, 0.05) and lp.smooth_BCE(0.0) == (1.0, 0.0)
    rng = np.random.default_rng(4)
    x, t = rng.normal(0, 2, (5, 3)), (rng.uniform(size=(5, 3)) > 0.6) * 1.0
    tq = rng.uniform(size=(5, 3))  # QFocal's soft (quality) targets
    p = _sig(x)
    bce = _bce(x, t)
    fl = bce * (t * 0.25 + (1 - t) * 0.75) * (1 - (t * p + (1 - t) * (1 - p))) ** 1.5
    qfl = _bce(x, tq) * (tq * 0.25 + (1 - tq) * 0.75) * np.abs(tq - p) ** 1.5
    for red, f in (("mean", np.mean), ("sum", np.sum), ("none", lambda z: z)):
        got = lp.FocalLoss(torch.nn.BCEWithLogitsLoss(reduction=red))(torch.tensor(x), torch.tensor(t))
        np.testing.assert_allclose(_np(got), f(fl), rtol=1e-12)
        got = lp.QFocalLoss(torch.nn.BCEWithLogitsLoss(reduction=red))(torch.tensor(x), torch.tensor(tq))
        np.testing.assert_allclose(_np(got), f(qfl), rtol=1e-12)
    fn = lp.FocalLoss(torch.nn.BCEWithLogitsLoss(), gamma=2.0, alpha=0.4)
    assert fn.loss_fcn.reduction == "none" and fn.reduction == "mean"
    tx = torch.tensor(x, requires_grad=True)
    fn(tx, torch.tensor(t)).backward()

    def ref(z):
        q = _sig(z)
        return (_bce(z, t) * (t * 0.4 + (1 - t) * 0.6) * (1 - (t * q + (1 - t) * (1 - q))) ** 2.0).mean()

    np.testing.assert_allclose(_np(tx.grad), _fd_grad(ref, x), rtol=1e-6, atol=1e-10)


def test_build_targets_and_compute_loss_against_numpy_and_finite_differences():
    torch = lucid
    lp = loss5_page(torch)
    model = _v5_model(torch)
    m = model.model[-1]
    np.testing.assert_allclose(_np(m.anchors), np.array(_ANCHORS5, float).reshape(2, 3, 2) / [[[4.0]], [[8.0]]])
    rng = np.random.default_rng(6)
    shapes = [(8, 8), (4, 4)]
    ps = [rng.normal(0, 1.0, (2, 3, ny, nx, 8)) for ny, nx in shapes]
    targets = _v5_targets()
    anchors = _np(m.anchors)
    levels = _np_build_targets(shapes, targets, anchors, _HYP["anchor_t"])
    assert len(levels[0]) > 4 and len(levels[1]) > 4
    assert any(r["tbox"][0] == 1.0 for r in levels[0])  # the clamped edge row

    cl = lp.ComputeLoss(model)
    assert cl.balance[:2] == [4.0, 1.0] and (cl.cp, cl.cn) == (0.95, 0.05)
    tcls, tbox, indices, anch = cl.build_targets([torch.tensor(p) for p in ps], torch.tensor(targets))
    for i, rows in enumerate(levels):
        np.testing.assert_array_equal(np.stack([x.cpu().numpy() for x in indices[i]], 1),
                                      [[r["b"], r["a"], r["gj"], r["gi"]] for r in rows])
        np.testing.assert_allclose(_np(tbox[i]), [r["tbox"] for r in rows], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(_np(anch[i]), [r["anchor"] for r in rows], rtol=1e-7)
        np.testing.assert_array_equal(tcls[i].cpu().numpy(), [r["c"] for r in rows])

    # the loss without the edge target, whose clamped row lands on the cell of its own +x offset row (two
    # writes into one tobj cell: which one wins is left open by PyTorch)
    targets = targets[:3]
    levels = _np_build_targets(shapes, targets, anchors, _HYP["anchor_t"])
    for rows in levels:
        cells = [(r["b"], r["a"], r["gj"], r["gi"]) for r in rows]
        assert len(set(cells)) == len(cells) > 4
    tp = [torch.tensor(p, requires_grad=True) for p in ps]
    loss, items = cl(tp, torch.tensor(targets))
    ref, ref_items, frozen = _np_v5_loss(ps, levels, _HYP, 3, cl.balance)
    np.testing.assert_allclose(_np(loss), [ref], rtol=2e-6)  # the page's loss buffers are float32
    np.testing.assert_allclose(_np(items), ref_items, rtol=2e-6)
    loss.backward()
    for i in range(2):
        at = _some(rng, ps[i].shape, 10)
        at += [(r["b"], r["a"], r["gj"], r["gi"], k) for r in levels[i][:3] for k in range(8)]

        def f(z, i=i):
            q = list(ps)
            q[i] = z
            return _np_v5_loss(q, levels, _HYP, 3, cl.balance, frozen)[0]

        fd = _fd_grad(f, ps[i], at=at)
        got = _np(tp[i].grad)
        sel = tuple(np.array(at).T)
        np.testing.assert_allclose(got[sel], fd[sel], rtol=1e-4, atol=1e-7)

    # the objectness target blended towards 1 (gr < 1), the targets sorted by IoU first (sort_obj_iou)
    cl.gr, cl.sort_obj_iou = 0.4, True
    loss, items = cl([torch.tensor(p) for p in ps], torch.tensor(targets))
    ref, ref_items, _ = _np_v5_loss(ps, levels, _HYP, 3, cl.balance, gr=0.4)
    np.testing.assert_allclose(_np(items), ref_items, rtol=2e-6)
    assert abs(ref_items[1] - _np_v5_loss(ps, levels, _HYP, 3, cl.balance)[1][1]) > 1e-3

    # focal variant (fl_gamma > 0 wraps both criteria), no targets at all (the empty branch)
    hyp = dict(_HYP, fl_gamma=1.5)
    model.hyp = hyp
    cl = lp.ComputeLoss(model)
    assert isinstance(cl.BCEcls, lp.FocalLoss) and isinstance(cl.BCEobj, lp.FocalLoss)
    loss0, items0 = cl([torch.tensor(p) for p in ps], torch.zeros((0, 6), dtype=torch.float64))
    lobj = sum(((_bce(p[..., 4], 0.0) * 0.75 * _sig(p[..., 4]) ** 1.5).mean() * w) for p, w in zip(ps, [4.0, 1.0]))
    np.testing.assert_allclose(_np(items0), [0.0, lobj, 0.0], rtol=2e-6)
    np.testing.assert_allclose(_np(loss0), [2 * lobj], rtol=2e-6)


# ====================================================================== tests: yolov5 modules
def test_yolov5_sppf_equals_spp_fused_conv_detect_decode_and_bias_init():
    torch = lucid
    cp = common_page(torch)
    rng = np.random.default_rng(7)
    x = torch.tensor(rng.normal(size=(2, 8, 9, 9)), dtype=torch.float32)
    assert cp.autopad(3) == 1 and cp.autopad((3, 5)) == [1, 2] and cp.autopad(3, d=2) == 2
    # SPPF's three chained 5x5 max pools are SPP's parallel 5, 9 and 13 (the module's stated equivalence)
    sppf, spp = cp.SPPF(8, 6, 5).eval(), cp.SPP(8, 6, (5, 9, 13)).eval()
    _load(torch, sppf, 8)
    spp.load_state_dict(sppf.state_dict())
    np.testing.assert_allclose(_np(sppf(x)), _np(spp(x)), rtol=1e-6, atol=1e-6)

    # fuse_conv_and_bn: one conv with the eval-mode batch norm folded in
    conv = cp.Conv(8, 6, 3, 2).eval()
    _load(torch, conv, 9)
    fused = cp.fuse_conv_and_bn(conv.conv, conv.bn)
    assert tuple(fused.bias.shape) == (6,) and fused.kernel_size == (3, 3) and fused.stride == (2, 2)
    np.testing.assert_allclose(_np(conv(x)), _np(torch.nn.functional.silu(fused(x))), rtol=1e-5, atol=1e-5)
    conv.conv = fused
    conv.forward = conv.forward_fuse
    np.testing.assert_allclose(_np(conv(x)), _np(cp.Conv.default_act(fused(x))), rtol=0, atol=0)

    # C3 = cv3(cat(Bottleneck(cv1(x)), cv2(x))) with the residual inside the bottleneck
    c3 = cp.C3(8, 8, 1).eval()
    _load(torch, c3, 10)
    h = c3.cv1(x)
    np.testing.assert_allclose(_np(c3(x)), _np(c3.cv3(torch.cat((h + c3.m[0].cv2(c3.m[0].cv1(h)), c3.cv2(x)), 1))),
                               rtol=1e-6, atol=1e-6)
    assert c3.m[0].add and not cp.Bottleneck(8, 4).add

    model = _v5_model(torch).eval()
    m = model.model[-1]
    before = [_np(mi.bias).reshape(3, 8) for mi in m.m]
    model._initialize_biases()
    for mi, b0, s in zip(m.m, before, (4.0, 8.0)):
        b = _np(mi.bias).reshape(3, 8)
        np.testing.assert_allclose(b[:, 4] - b0[:, 4], math.log(8 / (640 / s) ** 2), rtol=1e-5)
        np.testing.assert_allclose(b[:, 5:] - b0[:, 5:], math.log(0.6 / (3 - 0.99999)), rtol=1e-5)
        np.testing.assert_array_equal(b[:, :4], b0[:, :4])
        assert isinstance(mi.bias, torch.nn.Parameter)

    img = torch.tensor(rng.uniform(0, 1, (2, 3, 32, 32)), dtype=torch.float32)
    y, raw = model(img)
    assert tuple(y.shape) == (2, 3 * 64 + 3 * 16, 8)
    assert [tuple(r.shape) for r in raw] == [(2, 3, 8, 8, 8), (2, 3, 4, 4, 8)]
    assert tuple(m.grid[0].shape) == (1, 3, 8, 8, 2) and tuple(m.anchor_grid[1].shape) == (1, 3, 4, 4, 2)
    ref = []
    for r, s, anc in zip(raw, (4.0, 8.0), np.array(_ANCHORS5, float).reshape(2, 3, 2)):
        sg = _sig(_np(r))
        ny, nx = sg.shape[2:4]
        gy, gx = np.meshgrid(np.arange(ny), np.arange(nx), indexing="ij")
        xy = (sg[..., :2] * 2 + np.stack([gx, gy], -1)[None, None] - 0.5) * s
        wh = (sg[..., 2:4] * 2) ** 2 * anc[None, :, None, None, :]
        ref.append(np.concatenate([xy, wh, sg[..., 4:]], -1).reshape(2, -1, 8))
    np.testing.assert_allclose(_np(y), np.concatenate(ref, 1), rtol=1e-5, atol=1e-4)
    model.train()
    assert isinstance(model(img), list)


def test_yolov5_tiny_model_trains_with_compute_loss():
    torch = lucid
    lp = loss5_page(torch)
    model = _v5_model(torch, seed=11)
    cl = lp.ComputeLoss(model)
    rng = np.random.default_rng(12)
    img = torch.tensor(rng.uniform(0, 1, (2, 3, 32, 32)), dtype=torch.float32)
    targets = torch.tensor(_v5_targets()[:3], dtype=torch.float32)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    losses = []
    for _ in range(8):
        loss, items = cl(model(img), targets)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.item()))
        np.testing.assert_allclose(float(items.sum()) * 2, losses[-1], rtol=1e-5)
    assert all(np.isfinite(losses))
    assert losses[-1] < 0.5 * losses[0], losses  # 8.9 -> 3.9 here


# ====================================================================== tests: ultralytics tal.py, v8 head and loss
def _np_make_anchors(shapes, strides, off=0.5):
    pts, st = [], []
    for (h, w), s in zip(shapes, strides):
        for y in range(h):
            for x in range(w):
                pts.append([x + off, y + off])
                st.append([s])
    return np.array(pts), np.array(st, dtype=np.float64)


def _np_tal(pd_scores, pd_bboxes, anc, gt_labels, gt_bboxes, mask_gt, topk, nc, alpha=0.5, beta=6.0, eps=1e-9):
    """TaskAlignedAssigner by loops over images, gts and anchors."""
    bs, na = pd_scores.shape[:2]
    nm = gt_bboxes.shape[1]
    labels, boxes = np.zeros((bs, na), int), np.zeros((bs, na, 4))
    scores, fg, gt_idx = np.zeros((bs, na, nc)), np.zeros((bs, na), bool), np.zeros((bs, na), int)
    for b in range(bs):
        ov, al, pos = np.zeros((nm, na)), np.zeros((nm, na)), np.zeros((nm, na))
        for g in range(nm):
            if not mask_gt[b, g]:
                continue
            x1, y1, x2, y2 = gt_bboxes[b, g]
            for a in range(na):
                if min(anc[a, 0] - x1, anc[a, 1] - y1, x2 - anc[a, 0], y2 - anc[a, 1]) > eps:
                    ov[g, a] = max(_np_ious(gt_bboxes[b, g], pd_bboxes[b, a], xywh=False, v8=True)["ciou"][0], 0.0)
                    al[g, a] = pd_scores[b, a, int(gt_labels[b, g])] ** alpha * ov[g, a] ** beta
            srt = np.sort(al[g])[::-1]
            assert srt[topk - 1] > srt[topk], "a tie at the top-k boundary: pick other data"
            for a in np.argsort(-al[g])[:topk]:
                inside = min(anc[a, 0] - x1, anc[a, 1] - y1, x2 - anc[a, 0], y2 - anc[a, 1]) > eps
                pos[g, a] = 1.0 if inside else 0.0
        for a in range(na):
            if pos[:, a].sum() > 1:
                best = int(np.argmax(ov[:, a]))
                pos[:, a] = 0
                pos[best, a] = 1
        al = al * pos
        pos_al = al.max(1)
        pos_ov = (ov * pos).max(1)
        for a in range(na):
            g = int(np.argmax(pos[:, a]))
            gt_idx[b, a], fg[b, a] = g, pos[:, a].sum() > 0
            labels[b, a], boxes[b, a] = int(gt_labels[b, g]), gt_bboxes[b, g]
            if fg[b, a]:
                scores[b, a, labels[b, a]] = max(al[k, a] * pos_ov[k] / (pos_al[k] + eps) for k in range(nm))
    return labels, boxes, scores, fg, gt_idx


_ARGS8 = SimpleNamespace(box=7.5, cls=0.5, dfl=1.5)


def _v8_model(torch, seed=13):
    vp = v8_page(torch)
    torch.manual_seed(0)
    model = vp.TinyDetectionModel(nc=2, args=_ARGS8)
    _load(torch, model, seed)
    return model


def _v8_batch():
    # YOLO-format normalized xywh; image 0 holds two objects, image 1 one (preprocess pads to two)
    return dict(batch_idx=np.array([0.0, 0.0, 1.0]), cls=np.array([1.0, 0.0, 1.0]),
                bboxes=np.array([[0.35, 0.40, 0.45, 0.50], [0.70, 0.65, 0.40, 0.45], [0.50, 0.45, 0.60, 0.55]]))


def _np_v8_loss(feats, nc, strides, batch, topk, frozen=None):
    """v8DetectionLoss written again; ``frozen``: the assignment and CIoU alphas (detached in the page)."""
    bs, reg = feats[0].shape[0], 16
    no = nc + 4 * reg
    xc = np.concatenate([f.reshape(bs, no, -1) for f in feats], 2)
    pd, ps = xc[:, :4 * reg].transpose(0, 2, 1), xc[:, 4 * reg:].transpose(0, 2, 1)
    anc, st = _np_make_anchors([f.shape[2:] for f in feats], strides)
    h, w = feats[0].shape[2] * strides[0], feats[0].shape[3] * strides[0]
    logits = pd.reshape(bs, -1, 4, reg)
    e = np.exp(logits - logits.max(-1, keepdims=True))
    sm = e / e.sum(-1, keepdims=True)
    dist = sm @ np.arange(reg)
    pbox = np.concatenate([anc - dist[..., :2], anc + dist[..., 2:]], -1)
    if frozen is None:
        nmax = max(int((batch["batch_idx"] == b).sum()) for b in range(bs))
        gl, gb = np.zeros((bs, nmax)), np.zeros((bs, nmax, 4))
        for b in range(bs):
            sel = np.where(batch["batch_idx"] == b)[0]
            for k, i in enumerate(sel):
                x, y, bw, bh = batch["bboxes"][i] * [w, h, w, h]
                gl[b, k], gb[b, k] = batch["cls"][i], [x - bw / 2, y - bh / 2, x + bw / 2, y + bh / 2]
        mask = gb.sum(-1) > 0
        _, tb, ts, fg, _ = _np_tal(_sig(ps), pbox * st, anc * st, gl, gb, mask, topk, nc)
        tb = tb / st
        alpha = _np_ious(pbox[fg], tb[fg], xywh=False, v8=True)["alpha"] if fg.any() else None
        frozen = (tb, ts, fg, alpha)
    tb, ts, fg, alpha = frozen
    tss = max(ts.sum(), 1)
    lcls = _bce(ps, ts).sum() / tss
    lbox = ldfl = 0.0
    if fg.any():
        wgt = ts.sum(-1)[fg]
        lbox = ((1 - _np_ious(pbox[fg], tb[fg], xywh=False, v8=True, alpha=alpha)["ciou"]) * wgt).sum() / tss
        ltrb = np.clip(np.concatenate([anc[None] - tb[..., :2], tb[..., 2:] - anc[None]], -1), 0, reg - 1 - 0.01)[fg]
        tl = np.floor(ltrb).astype(int)
        wl = tl + 1 - ltrb
        lsm = np.log(sm[fg])  # (n, 4, reg)
        n_ = np.arange(len(tl))[:, None]
        s_ = np.arange(4)[None]
        ce_l, ce_r = -lsm[n_, s_, tl], -lsm[n_, s_, tl + 1]
        ldfl = ((ce_l * wl + ce_r * (1 - wl)).mean(-1) * wgt).sum() / tss
    items = np.array([lbox * 7.5, lcls * 0.5, ldfl * 1.5])
    return items.sum() * bs, items, frozen


def test_make_anchors_dist2bbox_bbox2dist_dfl_and_c2f():
    torch = lucid
    tp, vp = tal_page(torch), v8_page(torch)
    feats = [torch.zeros(1, 2, 3, 4, dtype=torch.float64), torch.zeros(1, 2, 2, 2, dtype=torch.float64)]
    pts, st = tp.make_anchors(feats, torch.tensor([8.0, 16.0]), 0.5)
    rp, rs = _np_make_anchors([(3, 4), (2, 2)], [8.0, 16.0])
    np.testing.assert_array_equal(_np(pts), rp)
    np.testing.assert_array_equal(_np(st), rs)
    assert pts.dtype == torch.float64

    rng = np.random.default_rng(14)
    anc, d = rng.uniform(0, 10, (6, 2)), rng.uniform(0, 4, (6, 4))
    xyxy = np.concatenate([anc - d[:, :2], anc + d[:, 2:]], 1)
    np.testing.assert_allclose(_np(tp.dist2bbox(torch.tensor(d), torch.tensor(anc), xywh=False)), xyxy, rtol=1e-14)
    xywh = np.concatenate([(xyxy[:, :2] + xyxy[:, 2:]) / 2, xyxy[:, 2:] - xyxy[:, :2]], 1)
    np.testing.assert_allclose(_np(tp.dist2bbox(torch.tensor(d), torch.tensor(anc))), xywh, rtol=1e-14)
    # channel-first layout (the head's dim=1)
    np.testing.assert_allclose(_np(tp.dist2bbox(torch.tensor(d.T[None]), torch.tensor(anc.T[None]), dim=1))[0].T,
                               xywh, rtol=1e-14)
    # bbox2dist inverts it, clamped to [0, reg_max - 0.01]
    np.testing.assert_allclose(_np(tp.bbox2dist(torch.tensor(anc), torch.tensor(xyxy), 15)), d, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(_np(tp.bbox2dist(torch.tensor(anc), torch.tensor(xyxy * 3 - 5), 3)),
                               np.clip(np.concatenate([anc - (xyxy[:, :2] * 3 - 5), xyxy[:, 2:] * 3 - 5 - anc], 1), 0, 2.99),
                               rtol=1e-12)
    yx = tp.xywh2xyxy(torch.tensor(xywh))
    np.testing.assert_allclose(_np(yx), xyxy, rtol=1e-12)

    dfl = vp.DFL(16)
    assert not dfl.conv.weight.requires_grad
    x = rng.normal(0, 1.5, (2, 64, 5))
    e = np.exp(x.reshape(2, 4, 16, 5))
    np.testing.assert_allclose(_np(dfl(torch.tensor(x, dtype=torch.float32))),
                               (e / e.sum(2, keepdims=True) * np.arange(16)[None, None, :, None]).sum(2), rtol=1e-5)

    c2f = vp.C2f(8, 8, 2, True).eval()
    _load(torch, c2f, 15)
    xi = torch.tensor(rng.normal(size=(2, 8, 6, 6)), dtype=torch.float32)
    y0, y1 = c2f.cv1(xi).chunk(2, 1)
    y2 = y1 + c2f.m[0].cv2(c2f.m[0].cv1(y1))
    y3 = y2 + c2f.m[1].cv2(c2f.m[1].cv1(y2))
    ref = _np(c2f.cv2(torch.cat((y0, y1, y2, y3), 1)))
    np.testing.assert_allclose(_np(c2f(xi)), ref, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(_np(c2f.forward_split(xi)), ref, rtol=1e-6, atol=1e-6)


def _tal_inputs(rng):
    shapes, strides = [(8, 8), (4, 4)], [4.0, 8.0]
    anc, st = _np_make_anchors(shapes, strides)
    na = len(anc)
    scores = rng.uniform(0.05, 0.95, (2, na, 3))
    gt = np.array([[[3.0, 4.0, 20.0, 18.0], [14.0, 12.0, 30.0, 31.0]], [[6.0, 2.0, 26.0, 22.0], [0.0, 0.0, 0.0, 0.0]]])
    labels = np.array([[2.0, 0.0], [1.0, 0.0]])
    # predicted boxes: jittered copies of the gt each anchor sits in (so CIoU > 0 inside the gts)
    centre = anc * st
    pb = np.zeros((2, na, 4))
    for b in range(2):
        for a in range(na):
            g = gt[b, (a + b) % (1 if b else 2)]
            pb[b, a] = g + rng.normal(0, 3.0, 4) + np.r_[centre[a] - (g[:2] + g[2:]) / 2, centre[a] - (g[:2] + g[2:]) / 2] * 0.3
    return scores, pb, anc * st, labels, gt


def test_task_aligned_assigner_against_numpy_loops():
    torch = lucid
    tp = tal_page(torch)
    rng = np.random.default_rng(16)
    scores, pb, anc, labels, gt = _tal_inputs(rng)
    mask = (gt.sum(-1) > 0)
    ref = _np_tal(scores, pb, anc, labels, gt, mask, 5, 3)
    assigner = tp.TaskAlignedAssigner(topk=5, num_classes=3, alpha=0.5, beta=6.0)
    out = assigner(torch.tensor(scores), torch.tensor(pb), torch.tensor(anc), torch.tensor(labels[..., None]),
                   torch.tensor(gt), torch.tensor(mask[..., None] * 1.0))
    t_labels, t_boxes, t_scores, fg, idx = out
    assert fg.dtype == torch.bool and t_labels.dtype == torch.int64
    np.testing.assert_array_equal(fg.cpu().numpy(), ref[3])
    assert ref[3].sum() >= 10 and (ref[3].sum(1) > 0).all()
    np.testing.assert_array_equal(idx.cpu().numpy()[ref[3]], ref[4][ref[3]])
    np.testing.assert_array_equal(t_labels.cpu().numpy(), ref[0])
    np.testing.assert_allclose(_np(t_boxes), ref[1], rtol=0, atol=0)
    np.testing.assert_allclose(_np(t_scores), ref[2], rtol=1e-10, atol=1e-12)
    # an anchor inside two gts goes to the one it overlaps most (select_highest_overlaps)
    mp = torch.tensor([[[1.0, 1.0, 0.0], [1.0, 0.0, 1.0]]])
    ov = torch.tensor([[[0.2, 0.9, 0.0], [0.7, 0.0, 0.3]]])
    gi, fgm, mpos = tp.TaskAlignedAssigner.select_highest_overlaps(mp, ov, 2)
    assert gi.tolist() == [[1, 0, 1]] and fgm.tolist() == [[1.0, 1.0, 1.0]]
    assert mpos.tolist() == [[[0.0, 1.0, 0.0], [1.0, 0.0, 1.0]]]
    # no gts at all: the early return
    empty = assigner(torch.tensor(scores), torch.tensor(pb), torch.tensor(anc), torch.zeros(2, 0, 1),
                     torch.zeros(2, 0, 4), torch.zeros(2, 0, 1))
    assert (empty[0] == 3).all() and not empty[3].any() and float(empty[2].sum()) == 0.0


def test_v8_detection_loss_against_numpy_and_finite_differences():
    torch = lucid
    vp = v8_page(torch)
    model = _v8_model(torch)
    crit = vp.v8DetectionLoss(model, tal_topk=5)
    rng = np.random.default_rng(17)
    feats = [rng.normal(0, 1.0, (2, 66, 8, 8)), rng.normal(0, 1.0, (2, 66, 4, 4))]
    for f in feats:  # distances around 2-4 cells: the gts' scale here
        f[:, :64] += np.tile(np.r_[np.zeros(2), np.linspace(0, 2.0, 14)], 4)[None, :, None, None]
    batch = _v8_batch()
    tb = {k: torch.tensor(v) for k, v in batch.items()}
    tf = [torch.tensor(f, requires_grad=True) for f in feats]
    loss, items = crit(tf, tb)
    ref, ref_items, frozen = _np_v8_loss(feats, 2, [4.0, 8.0], batch, 5)
    assert frozen[2].sum() >= 6
    np.testing.assert_allclose(_np(items), ref_items, rtol=2e-6)  # the page's loss buffer is float32
    np.testing.assert_allclose(float(loss.item()), ref, rtol=2e-6)
    loss.backward()
    for i in range(2):
        fgpos = np.argwhere(frozen[2].reshape(2, -1)[:, (0 if i == 0 else 64):(64 if i == 0 else 80)])
        hw = feats[i].shape[3]
        at = _some(rng, feats[i].shape, 8)
        at += [(int(b), c, int(a) // hw, int(a) % hw) for b, a in fgpos[:2] for c in (0, 5, 20, 63, 64, 65)]

        def f(z, i=i):
            q = list(feats)
            q[i] = z
            return _np_v8_loss(q, 2, [4.0, 8.0], batch, 5, frozen)[0]

        fd = _fd_grad(f, feats[i], at=at)
        sel = tuple(np.array(at).T)
        np.testing.assert_allclose(_np(tf[i].grad)[sel], fd[sel], rtol=1e-4, atol=1e-7)


def test_arange_takes_end_as_a_keyword():
    # Fixed on the way: lucid.arange(end=n) (make_anchors' spelling) raised "missing argument 'start'"
    torch = lucid
    assert torch.arange(end=4).tolist() == [0, 1, 2, 3] and torch.arange(end=4).dtype == torch.int64
    assert torch.arange(end=3, dtype=torch.float64).tolist() == [0.0, 1.0, 2.0]
    assert torch.arange(end=7, step=3).tolist() == [0, 3, 6]
    assert torch.arange(5).tolist() == [0, 1, 2, 3, 4] and torch.arange(1, 7, 2).tolist() == [1, 3, 5]
    with pytest.raises(TypeError, match="arange"):
        torch.arange()


def test_v8_detect_head_decode_bias_init_and_training():
    torch = lucid
    model = _v8_model(torch).eval()
    m = model.model[-1]
    assert m.no == 66 and m.cv2[0][0].conv.out_channels == 64 and m.cv3[0][0].conv.out_channels == 16
    rng = np.random.default_rng(18)
    img = torch.tensor(rng.uniform(0, 1, (2, 3, 32, 32)), dtype=torch.float32)
    y, raw = model(img)
    assert tuple(y.shape) == (2, 6, 80) and [tuple(r.shape) for r in raw] == [(2, 66, 8, 8), (2, 66, 4, 4)]
    xc = np.concatenate([_np(r).reshape(2, 66, -1) for r in raw], 2)
    e = np.exp(xc[:, :64].reshape(2, 4, 16, -1))
    dist = (e / e.sum(2, keepdims=True) * np.arange(16)[None, None, :, None]).sum(2)  # (2, 4, 80)
    anc, st = _np_make_anchors([(8, 8), (4, 4)], [4.0, 8.0])
    x1y1, x2y2 = anc.T[None] - dist[:, :2], anc.T[None] + dist[:, 2:]
    box = np.concatenate([(x1y1 + x2y2) / 2, x2y2 - x1y1], 1) * st.T[None]
    np.testing.assert_allclose(_np(y), np.concatenate([box, _sig(xc[:, 64:])], 1), rtol=1e-5, atol=1e-4)
    assert m.shape == raw[0].shape and tuple(m.anchors.shape) == (2, 80)

    m.bias_init()
    for a, b, s in zip(m.cv2, m.cv3, (4.0, 8.0)):
        assert (_np(a[-1].bias) == 1.0).all()
        np.testing.assert_allclose(_np(b[-1].bias), math.log(5 / 2 / (640 / s) ** 2), rtol=1e-6)

    model = _v8_model(torch, seed=19).train()
    crit = v8_page(torch).v8DetectionLoss(model, tal_topk=5)
    batch = {k: torch.tensor(v, dtype=torch.float32) for k, v in _v8_batch().items()}
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    losses = []
    for _ in range(6):
        loss, items = crit(model(img), batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.item()))
        np.testing.assert_allclose(float(items.sum()) * 2, losses[-1], rtol=1e-5)
    assert all(np.isfinite(losses))
    assert losses[-1] < 0.5 * losses[0], losses  # 229 -> 73 here


# ====================================================================== parity with PyTorch
def _compare(a, b, rtol, atol):
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=rtol, atol=atol, err_msg=k)


def _boxes_run(torch):
    gp, mp, tp = general_page(torch), metrics_page(torch), tal_page(torch)
    rng = np.random.default_rng(21)
    a, b = _rand_xyxy(rng, 6), _rand_xyxy(rng, 6)
    out = {}
    for name, fn in (("v5", mp.bbox_iou), ("v8", tp.bbox_iou)):
        ta = torch.tensor(a, requires_grad=True)
        total = 0
        for kind in ("GIoU", "DIoU", "CIoU"):
            r = fn(ta, torch.tensor(b), xywh=False, **{kind: True})
            out[f"{name}_{kind}"] = _np(r)
            total = total + r.sum()
        total.backward()
        out[f"{name}_grad"] = _np(ta.grad)
    out["box_iou"] = _np(mp.box_iou(torch.tensor(a), torch.tensor(b)))
    pred = _nms_inputs(rng)
    for k, kw in enumerate((dict(), dict(multi_label=True), dict(agnostic=True, classes=[1, 2]))):
        res = gp.non_max_suppression(torch.tensor(pred, dtype=torch.float32), 0.2, 0.4, **kw)
        out[f"nms{k}"] = np.concatenate([_np(r) for r in res])
    tb = torch.tensor(a * 3 - 4)
    out["scaled"] = _np(gp.scale_boxes((32, 48), tb, (64, 80)))
    det, lab = _metrics_inputs(rng)
    out["correct"] = mp.process_batch(torch.tensor(det), torch.tensor(lab), torch.tensor(np.linspace(0.5, 0.95, 10))).cpu().numpy() * 1.0
    cm = mp.ConfusionMatrix(nc=3, conf=0.4, iou_thres=0.3)
    cm.process_batch(torch.tensor(det), torch.tensor(lab))
    out["cm"] = cm.matrix
    return out


def test_boxes_nms_and_metrics_torch_parity():
    torch = pytest.importorskip("torch")
    # float64 boxes: only summation order differs; NMS outputs are float32 in both
    _compare(_boxes_run(lucid), _boxes_run(torch), rtol=1e-10, atol=1e-12)


def _v5_run(torch):
    lp = loss5_page(torch)
    out = {}
    model = _v5_model(torch, seed=22)
    model._initialize_biases()
    rng = np.random.default_rng(23)
    img = torch.tensor(rng.uniform(0, 1, (2, 3, 32, 32)), dtype=torch.float32)
    cl = lp.ComputeLoss(model)
    shapes = [(2, 3, 8, 8, 8), (2, 3, 4, 4, 8)]
    tcls, tbox, indices, anch = cl.build_targets([torch.zeros(s) for s in shapes], torch.tensor(_v5_targets()))
    for i in range(2):  # the edge target included: the clamped gij reaches tbox in both
        out[f"indices{i}"] = np.stack([x.cpu().numpy() for x in indices[i]], 1) * 1.0
        out[f"tbox{i}"] = _np(tbox[i])
    loss, items = cl(model(img), torch.tensor(_v5_targets()[:3], dtype=torch.float32))
    loss.backward()
    out["loss"], out["items"] = _np(loss), _np(items)
    for name, p in model.named_parameters():
        if name.startswith(("model.5.", "b4.", "b0.conv")):
            out["grad_" + name] = _np(p.grad)
    model.eval()
    out["y"] = _np(model(img)[0])
    return out


def test_yolov5_build_targets_compute_loss_and_detect_torch_parity():
    torch = pytest.importorskip("torch")
    # float32 convolutions: summation order differs
    _compare(_v5_run(lucid), _v5_run(torch), rtol=2e-4, atol=2e-5)


def _v8_run(torch):
    vp = v8_page(torch)
    out = {}
    rng = np.random.default_rng(24)
    scores, pb, anc, labels, gt = _tal_inputs(rng)
    assigner = vp.TaskAlignedAssigner(topk=5, num_classes=3, alpha=0.5, beta=6.0)
    res = assigner(torch.tensor(scores), torch.tensor(pb), torch.tensor(anc), torch.tensor(labels[..., None]),
                   torch.tensor(gt), torch.tensor((gt.sum(-1) > 0)[..., None] * 1.0))
    for k, r in zip(("labels", "boxes", "scores", "fg", "idx"), res):
        out["tal_" + k] = _np(r * 1)
    model = _v8_model(torch, seed=25)
    crit = vp.v8DetectionLoss(model, tal_topk=5)
    feats = [rng.normal(0, 1.0, (2, 66, 8, 8)), rng.normal(0, 1.0, (2, 66, 4, 4))]
    tf = [torch.tensor(f, requires_grad=True) for f in feats]
    loss, items = crit(tf, {k: torch.tensor(v) for k, v in _v8_batch().items()})
    loss.backward()
    out["loss"], out["items"] = _np(loss), _np(items)
    out["g0"], out["g1"] = _np(tf[0].grad), _np(tf[1].grad)
    img = torch.tensor(rng.uniform(0, 1, (2, 3, 32, 32)), dtype=torch.float32)
    batch = {k: torch.tensor(v, dtype=torch.float32) for k, v in _v8_batch().items()}
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    for step in range(3):
        loss, _ = crit(model(img), batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        out[f"train{step}"] = _np(loss)
    model.eval()
    out["y"] = _np(model(img)[0])
    return out


def test_task_aligned_assigner_v8_loss_and_head_torch_parity():
    torch = pytest.importorskip("torch")
    # float32 model and loss buffer; three Adam steps amplify summation-order differences
    _compare(_v8_run(lucid), _v8_run(torch), rtol=1e-3, atol=1e-4)
