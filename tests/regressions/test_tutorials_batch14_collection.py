"""aladdinpersson/Machine-Learning-Collection (its PyTorch part) run on Lucid (``import lucid as torch``).

Object detection:

- ``object_detection/YOLO/utils.py``: ``intersection_over_union`` (midpoint and corners formats),
  ``non_max_suppression``, ``mean_average_precision`` (``Counter``, ``torch.zeros(val)`` per image,
  ``cumsum``, ``torch.divide``, ``cat`` of an int64 ``torch.tensor([1])`` with float32, ``trapz``),
  ``convert_cellboxes``/``cellboxes_to_boxes`` (``arange(7).repeat(...)``, ``argmax`` of stacked
  scores, ``converted_pred[..., 0] = converted_pred[..., 0].long()``), checked against hand-computed
  cases and NumPy; ``YOLO/loss.py``'s v1 ``YoloLoss`` (the in-place ``box_predictions[..., 2:4] =
  sign * sqrt(abs)`` on a graph tensor, ``torch.max(ious, dim=0)``, ``flatten(end_dim=-2)``) against a
  NumPy loss and its central differences; ``YOLO/model.py``'s ``Yolov1`` (channels of
  ``architecture_config`` divided by 32, ``Linear(1024 // 32 * S * S, 496)`` with it; 448x448 input so
  that the darknet still ends on the 7x7 grid); ``YOLO/dataset.py``'s ``VOCDataset`` cell encoding
  (``pd.read_csv`` and ``Image.open`` replaced by a CSV reader and a blank image).
- ``object_detection/YOLOv3``: ``iou_width_height``, ``cells_to_bboxes`` (in-place sigmoid/exp on the
  view ``predictions[..., 1:5]``), the v3 ``YoloLoss`` (boolean-mask indexing, in-place writes into
  ``predictions`` and ``target``, ``BCEWithLogitsLoss``, ``CrossEntropyLoss``, detached IoUs) and the
  ``YOLOv3`` model (its ``config`` channels divided by 32, 64x64 input, 3 classes).

Architectures (channel counts divided where stated, inputs small):

- ``CNN_architectures``: ``LeNet`` (the paper's 61,706 parameters), ResNet50 (``pytorch_resnet.py``,
  channels / 16; ``x.clone()`` and ``x += identity``), EfficientNet-b0 (channels / 8: squeeze-excitation,
  stochastic depth, depthwise convolutions), GoogLeNet's ``Inception_block``, VGG16
  (``pytorch_vgg_implementation.py``, channels / 32, with torchvision's ``features``/``avgpool``/
  ``classifier`` names) frozen and re-headed by ``Basics/pytorch_pretrain_finetune.py``
  (``requires_grad = False``, ``model.avgpool = Identity()``; it stands in for the pretrained vgg16).
- ``more_advanced``: the transformer from scratch (``SelfAttention`` with ``einsum`` and
  ``masked_fill``, source and causal masks), seq2seq with attention (bidirectional ``LSTM``
  encoder, ``einsum('snk,snl->knl')`` context, teacher forcing from Python's ``random``,
  ``clip_grad_norm_``; Multi30k/spacy replaced by a toy vocabulary), image captioning
  (``CNNtoRNN`` with ``caption_image``; ``inception_v3(pretrained=True)`` replaced by a small CNN).
- ``more_advanced/seq2seq_transformer``: ``nn.Transformer`` with ``src_key_padding_mask`` and
  ``generate_square_subsequent_mask`` (sizes 16/2 heads/2+2 layers; the page's
  ``forward_expansion`` lands in ``dim_feedforward`` as in the original).
- ``more_advanced/neuralstyle/nst.py``: Adam on the image itself, Gram matrices through
  ``view``/``mm``/``t`` (``vgg19(pretrained=True).features[:29]`` replaced by the same layer layout,
  channels / 32, random weights; 32x32 images, 4 steps).
- ``image_segmentation``: ``UNET`` (features 2..16, ``TF.resize`` of torchvision replaced by
  ``F.interpolate(mode="bilinear")``, which is what it does on a tensor that grows).
- ``GANs/StyleGAN``: ``WSLinear``, ``AdaIN`` (``InstanceNorm2d``), ``InjectNoise``, the mapping
  network and progressive generator (bilinear upsampling); ``GANs/SRGAN``'s generator
  (``PixelShuffle``, per-channel ``PReLU``); ``GANs/CycleGAN``'s generator (``padding_mode="reflect"``,
  ``InstanceNorm2d``, ``ConvTranspose2d(output_padding=1)``); ``GANs/3. WGAN``'s critic and generator
  (features 2, z 8) and one batch of its training loop (five critic steps with
  ``backward(retain_graph=True)``, ``RMSprop``, clipping through ``p.data.clamp_``; the noise is drawn
  once in NumPy so that both libraries see the same).
- ``GANs/ProGAN``: ``WSConv2d`` (``self.conv.bias = None`` after taking the parameter),
  ``PixelNorm``, minibatch std, the progressive ``Generator``/``Discriminator`` (256 -> 32 channels)
  and ``utils.py``'s ``gradient_penalty`` (double backward through ``autograd.grad(create_graph=True)``)
  and ``seed_everything``.

Basics: ``pytorch_tensorbasics.py`` (every printed line), ``pytorch_lr_ratescheduler.py``
(``ReduceLROnPlateau``), ``pytorch_mixed_precision_example.py`` (float16 ``autocast`` and
``GradScaler`` on the default device instead of ``torch.cuda.amp``), ``pytorch_loadsave.py``,
``pytorch_init_weights.py`` (``kaiming_uniform_``), ``pytorch_tensorboard_.py`` (the event files
read back by tests/data/test_tensorboard.py's reader), ``Imbalanced_classes/main.py``
(``WeightedRandomSampler``), ``pytorch_rnn_gru_lstm.py`` (the ``RNN``/``RNN_GRU``/``RNN_LSTM``
many-to-one models against NumPy recurrences), ``pytorch_std_mean.py`` (``get_mean_std``).

Every data set (PASCAL VOC, COCO, MNIST, Multi30k, ImageFolder ...) is replaced by synthetic tensors
and torchvision is not used. Each page is a function of the module it is handed as ``torch``; the
parity tests run the same text on PyTorch with the same weights where it is installed.

Adapted where the original does not run on PyTorch 2.13 either or where Lucid differs on purpose:
``ReduceLROnPlateau(..., verbose=True)`` lost ``verbose`` in both libraries; ProGAN's ``__main__``
builds ``Discriminator(Z_DIM, IN_CHANNELS, img_channels=3)`` (one argument too many);
``gradient_penalty`` passes ``inputs=[interpolated_images]`` because Lucid's ``autograd.grad`` returns
the gradient itself for a bare tensor input (README "Differences from PyTorch"), where the page's
``[0]`` would silently take its first row; the tensor-basics page takes the default device (not
``"cuda"``/``"cpu"``; its NumPy round trip runs on a CPU default only), and its printed shapes and dtypes are compared in PyTorch's spelling
(Lucid prints ``(2, 3)`` and ``lucid.float32`` on purpose); ``convert_cellboxes`` moves the
predictions to ``"cpu"`` and makes its ``arange`` on the default device, so the tests call it
under ``torch.device("cpu")``; the progress-bar page needs ``tqdm`` (not installed) and is left out.
"""
import math
import os
import re
from collections import Counter

import numpy as np
import pytest

import lucid
import lucid.nn  # noqa: F401
import lucid.optim  # noqa: F401


# ---------------------------------------------------------------------------------------------
# object_detection/YOLO/utils.py (v1) -- text of the original
# ---------------------------------------------------------------------------------------------

def yolo_utils_page(torch):
    def intersection_over_union(boxes_preds, boxes_labels, box_format="midpoint"):
        if box_format == "midpoint":
            box1_x1 = boxes_preds[..., 0:1] - boxes_preds[..., 2:3] / 2
            box1_y1 = boxes_preds[..., 1:2] - boxes_preds[..., 3:4] / 2
            box1_x2 = boxes_preds[..., 0:1] + boxes_preds[..., 2:3] / 2
            box1_y2 = boxes_preds[..., 1:2] + boxes_preds[..., 3:4] / 2
            box2_x1 = boxes_labels[..., 0:1] - boxes_labels[..., 2:3] / 2
            box2_y1 = boxes_labels[..., 1:2] - boxes_labels[..., 3:4] / 2
            box2_x2 = boxes_labels[..., 0:1] + boxes_labels[..., 2:3] / 2
            box2_y2 = boxes_labels[..., 1:2] + boxes_labels[..., 3:4] / 2

        if box_format == "corners":
            box1_x1 = boxes_preds[..., 0:1]
            box1_y1 = boxes_preds[..., 1:2]
            box1_x2 = boxes_preds[..., 2:3]
            box1_y2 = boxes_preds[..., 3:4]  # (N, 1)
            box2_x1 = boxes_labels[..., 0:1]
            box2_y1 = boxes_labels[..., 1:2]
            box2_x2 = boxes_labels[..., 2:3]
            box2_y2 = boxes_labels[..., 3:4]

        x1 = torch.max(box1_x1, box2_x1)
        y1 = torch.max(box1_y1, box2_y1)
        x2 = torch.min(box1_x2, box2_x2)
        y2 = torch.min(box1_y2, box2_y2)

        # .clamp(0) is for the case when they do not intersect
        intersection = (x2 - x1).clamp(0) * (y2 - y1).clamp(0)

        box1_area = abs((box1_x2 - box1_x1) * (box1_y2 - box1_y1))
        box2_area = abs((box2_x2 - box2_x1) * (box2_y2 - box2_y1))

        return intersection / (box1_area + box2_area - intersection + 1e-6)

    def non_max_suppression(bboxes, iou_threshold, threshold, box_format="corners"):
        assert type(bboxes) == list

        bboxes = [box for box in bboxes if box[1] > threshold]
        bboxes = sorted(bboxes, key=lambda x: x[1], reverse=True)
        bboxes_after_nms = []

        while bboxes:
            chosen_box = bboxes.pop(0)

            bboxes = [
                box
                for box in bboxes
                if box[0] != chosen_box[0]
                or intersection_over_union(
                    torch.tensor(chosen_box[2:]),
                    torch.tensor(box[2:]),
                    box_format=box_format,
                )
                < iou_threshold
            ]

            bboxes_after_nms.append(chosen_box)

        return bboxes_after_nms

    def mean_average_precision(
        pred_boxes, true_boxes, iou_threshold=0.5, box_format="midpoint", num_classes=20
    ):
        average_precisions = []
        epsilon = 1e-6

        for c in range(num_classes):
            detections = []
            ground_truths = []

            for detection in pred_boxes:
                if detection[1] == c:
                    detections.append(detection)

            for true_box in true_boxes:
                if true_box[1] == c:
                    ground_truths.append(true_box)

            amount_bboxes = Counter([gt[0] for gt in ground_truths])

            for key, val in amount_bboxes.items():
                amount_bboxes[key] = torch.zeros(val)

            detections.sort(key=lambda x: x[2], reverse=True)
            TP = torch.zeros((len(detections)))
            FP = torch.zeros((len(detections)))
            total_true_bboxes = len(ground_truths)

            if total_true_bboxes == 0:
                continue

            for detection_idx, detection in enumerate(detections):
                ground_truth_img = [
                    bbox for bbox in ground_truths if bbox[0] == detection[0]
                ]

                num_gts = len(ground_truth_img)  # noqa: F841
                best_iou = 0

                for idx, gt in enumerate(ground_truth_img):
                    iou = intersection_over_union(
                        torch.tensor(detection[3:]),
                        torch.tensor(gt[3:]),
                        box_format=box_format,
                    )

                    if iou > best_iou:
                        best_iou = iou
                        best_gt_idx = idx

                if best_iou > iou_threshold:
                    if amount_bboxes[detection[0]][best_gt_idx] == 0:
                        TP[detection_idx] = 1
                        amount_bboxes[detection[0]][best_gt_idx] = 1
                    else:
                        FP[detection_idx] = 1
                else:
                    FP[detection_idx] = 1

            TP_cumsum = torch.cumsum(TP, dim=0)
            FP_cumsum = torch.cumsum(FP, dim=0)
            recalls = TP_cumsum / (total_true_bboxes + epsilon)
            precisions = torch.divide(TP_cumsum, (TP_cumsum + FP_cumsum + epsilon))
            precisions = torch.cat((torch.tensor([1]), precisions))
            recalls = torch.cat((torch.tensor([0]), recalls))
            # torch.trapz for numerical integration
            average_precisions.append(torch.trapz(precisions, recalls))

        return sum(average_precisions) / len(average_precisions)

    def convert_cellboxes(predictions, S=7):
        predictions = predictions.to("cpu")
        batch_size = predictions.shape[0]
        predictions = predictions.reshape(batch_size, 7, 7, 30)
        bboxes1 = predictions[..., 21:25]
        bboxes2 = predictions[..., 26:30]
        scores = torch.cat(
            (predictions[..., 20].unsqueeze(0), predictions[..., 25].unsqueeze(0)), dim=0
        )
        best_box = scores.argmax(0).unsqueeze(-1)
        best_boxes = bboxes1 * (1 - best_box) + best_box * bboxes2
        cell_indices = torch.arange(7).repeat(batch_size, 7, 1).unsqueeze(-1)
        x = 1 / S * (best_boxes[..., :1] + cell_indices)
        y = 1 / S * (best_boxes[..., 1:2] + cell_indices.permute(0, 2, 1, 3))
        w_y = 1 / S * best_boxes[..., 2:4]
        converted_bboxes = torch.cat((x, y, w_y), dim=-1)
        predicted_class = predictions[..., :20].argmax(-1).unsqueeze(-1)
        best_confidence = torch.max(predictions[..., 20], predictions[..., 25]).unsqueeze(
            -1
        )
        converted_preds = torch.cat(
            (predicted_class, best_confidence, converted_bboxes), dim=-1
        )

        return converted_preds

    def cellboxes_to_boxes(out, S=7):
        converted_pred = convert_cellboxes(out).reshape(out.shape[0], S * S, -1)
        converted_pred[..., 0] = converted_pred[..., 0].long()
        all_bboxes = []

        for ex_idx in range(out.shape[0]):
            bboxes = []

            for bbox_idx in range(S * S):
                bboxes.append([x.item() for x in converted_pred[ex_idx, bbox_idx, :]])
            all_bboxes.append(bboxes)

        return all_bboxes

    return intersection_over_union, non_max_suppression, mean_average_precision, cellboxes_to_boxes


# ---------------------------------------------------------------------------------------------
# object_detection/YOLO/loss.py and model.py (v1)
# ---------------------------------------------------------------------------------------------

def yolo_v1_page(torch, intersection_over_union, div=32):
    nn = torch.nn

    class YoloLoss(nn.Module):
        def __init__(self, S=7, B=2, C=20):
            super(YoloLoss, self).__init__()
            self.mse = nn.MSELoss(reduction="sum")
            self.S = S
            self.B = B
            self.C = C
            self.lambda_noobj = 0.5
            self.lambda_coord = 5

        def forward(self, predictions, target):
            predictions = predictions.reshape(-1, self.S, self.S, self.C + self.B * 5)

            iou_b1 = intersection_over_union(predictions[..., 21:25], target[..., 21:25])
            iou_b2 = intersection_over_union(predictions[..., 26:30], target[..., 21:25])
            ious = torch.cat([iou_b1.unsqueeze(0), iou_b2.unsqueeze(0)], dim=0)

            iou_maxes, bestbox = torch.max(ious, dim=0)
            exists_box = target[..., 20].unsqueeze(3)  # in paper this is Iobj_i

            box_predictions = exists_box * (
                (
                    bestbox * predictions[..., 26:30]
                    + (1 - bestbox) * predictions[..., 21:25]
                )
            )

            box_targets = exists_box * target[..., 21:25]

            box_predictions[..., 2:4] = torch.sign(box_predictions[..., 2:4]) * torch.sqrt(
                torch.abs(box_predictions[..., 2:4] + 1e-6)
            )
            box_targets[..., 2:4] = torch.sqrt(box_targets[..., 2:4])

            box_loss = self.mse(
                torch.flatten(box_predictions, end_dim=-2),
                torch.flatten(box_targets, end_dim=-2),
            )

            pred_box = (
                bestbox * predictions[..., 25:26] + (1 - bestbox) * predictions[..., 20:21]
            )

            object_loss = self.mse(
                torch.flatten(exists_box * pred_box),
                torch.flatten(exists_box * target[..., 20:21] * iou_maxes),
            )

            no_object_loss = self.mse(
                torch.flatten((1 - exists_box) * predictions[..., 20:21], start_dim=1),
                torch.flatten((1 - exists_box) * target[..., 20:21], start_dim=1),
            )

            no_object_loss += self.mse(
                torch.flatten((1 - exists_box) * predictions[..., 25:26], start_dim=1),
                torch.flatten((1 - exists_box) * target[..., 20:21], start_dim=1)
            )

            class_loss = self.mse(
                torch.flatten(exists_box * predictions[..., :20], end_dim=-2,),
                torch.flatten(exists_box * target[..., :20], end_dim=-2,),
            )

            loss = (
                self.lambda_coord * box_loss  # first two rows in paper
                + object_loss  # third row in paper
                + self.lambda_noobj * no_object_loss  # forth row
                + class_loss  # fifth row
            )

            return loss

    # architecture_config with every filter count divided by `div` (the original's 64..1024)
    architecture_config = [
        (7, 64 // div, 2, 3),
        "M",
        (3, 192 // div, 1, 1),
        "M",
        (1, 128 // div, 1, 0),
        (3, 256 // div, 1, 1),
        (1, 256 // div, 1, 0),
        (3, 512 // div, 1, 1),
        "M",
        [(1, 256 // div, 1, 0), (3, 512 // div, 1, 1), 4],
        (1, 512 // div, 1, 0),
        (3, 1024 // div, 1, 1),
        "M",
        [(1, 512 // div, 1, 0), (3, 1024 // div, 1, 1), 2],
        (3, 1024 // div, 1, 1),
        (3, 1024 // div, 2, 1),
        (3, 1024 // div, 1, 1),
        (3, 1024 // div, 1, 1),
    ]

    class CNNBlock(nn.Module):
        def __init__(self, in_channels, out_channels, **kwargs):
            super(CNNBlock, self).__init__()
            self.conv = nn.Conv2d(in_channels, out_channels, bias=False, **kwargs)
            self.batchnorm = nn.BatchNorm2d(out_channels)
            self.leakyrelu = nn.LeakyReLU(0.1)

        def forward(self, x):
            return self.leakyrelu(self.batchnorm(self.conv(x)))

    class Yolov1(nn.Module):
        def __init__(self, in_channels=3, **kwargs):
            super(Yolov1, self).__init__()
            self.architecture = architecture_config
            self.in_channels = in_channels
            self.darknet = self._create_conv_layers(self.architecture)
            self.fcs = self._create_fcs(**kwargs)

        def forward(self, x):
            x = self.darknet(x)
            return self.fcs(torch.flatten(x, start_dim=1))

        def _create_conv_layers(self, architecture):
            layers = []
            in_channels = self.in_channels

            for x in architecture:
                if type(x) == tuple:
                    layers += [
                        CNNBlock(
                            in_channels, x[1], kernel_size=x[0], stride=x[2], padding=x[3],
                        )
                    ]
                    in_channels = x[1]

                elif type(x) == str:
                    layers += [nn.MaxPool2d(kernel_size=(2, 2), stride=(2, 2))]

                elif type(x) == list:
                    conv1 = x[0]
                    conv2 = x[1]
                    num_repeats = x[2]

                    for _ in range(num_repeats):
                        layers += [
                            CNNBlock(
                                in_channels,
                                conv1[1],
                                kernel_size=conv1[0],
                                stride=conv1[2],
                                padding=conv1[3],
                            )
                        ]
                        layers += [
                            CNNBlock(
                                conv1[1],
                                conv2[1],
                                kernel_size=conv2[0],
                                stride=conv2[2],
                                padding=conv2[3],
                            )
                        ]
                        in_channels = conv2[1]

            return nn.Sequential(*layers)

        def _create_fcs(self, split_size, num_boxes, num_classes):
            S, B, C = split_size, num_boxes, num_classes

            return nn.Sequential(
                nn.Flatten(),
                nn.Linear(1024 // div * S * S, 496),
                nn.Dropout(0.0),
                nn.LeakyReLU(0.1),
                nn.Linear(496, S * S * (C + B * 5)),
            )

    return YoloLoss, Yolov1


def _np_iou(a, b, fmt):
    """An independent NumPy IoU (corners from midpoints, interval overlaps)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if fmt == "midpoint":
        a = np.concatenate([a[..., :2] - a[..., 2:] / 2, a[..., :2] + a[..., 2:] / 2], -1)
        b = np.concatenate([b[..., :2] - b[..., 2:] / 2, b[..., :2] + b[..., 2:] / 2], -1)
    w = np.clip(np.minimum(a[..., 2], b[..., 2]) - np.maximum(a[..., 0], b[..., 0]), 0, None)
    h = np.clip(np.minimum(a[..., 3], b[..., 3]) - np.maximum(a[..., 1], b[..., 1]), 0, None)
    inter = w * h
    area = lambda z: np.abs((z[..., 2] - z[..., 0]) * (z[..., 3] - z[..., 1]))  # noqa: E731
    return (inter / (area(a) + area(b) - inter + 1e-6))[..., None]


def _boxes(seed, n):
    rng = np.random.default_rng(seed)
    xy = rng.uniform(0.2, 0.8, (n, 2))
    wh = rng.uniform(0.05, 0.5, (n, 2))
    return np.concatenate([xy, wh], 1).astype(np.float32)


def test_yolo_intersection_over_union_closed_forms():
    iou, _, _, _ = yolo_utils_page(lucid)
    # hand-computed: corners (0,0,2,2) and (1,1,3,3) overlap in a unit square, union 7
    got = iou(lucid.tensor([[0.0, 0.0, 2.0, 2.0]]), lucid.tensor([[1.0, 1.0, 3.0, 3.0]]), box_format="corners")
    assert got.shape == (1, 1)
    assert got.item() == pytest.approx(1 / (7 + 1e-6), rel=1e-6)
    # same boxes as midpoints: centre (1,1) size 2 and centre (2,2) size 2
    got = iou(lucid.tensor([1.0, 1.0, 2.0, 2.0]), lucid.tensor([2.0, 2.0, 2.0, 2.0]))
    assert got.shape == (1,) and got.item() == pytest.approx(1 / 7, rel=1e-5)
    # disjoint -> exactly 0 (the clamp); one box inside another -> small area / big area
    got = iou(lucid.tensor([[0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 4.0, 4.0]]),
              lucid.tensor([[2.0, 2.0, 3.0, 3.0], [1.0, 1.0, 2.0, 3.0]]), box_format="corners")
    assert got[0].item() == 0.0 and got[1].item() == pytest.approx(2 / 16, rel=1e-5)
    # a batch (2, 7, 7, 4) against NumPy, both formats
    a, b = _boxes(0, 98).reshape(2, 7, 7, 4), _boxes(1, 98).reshape(2, 7, 7, 4)
    for fmt in ("midpoint", "corners"):
        got = iou(lucid.tensor(a), lucid.tensor(b), box_format=fmt)
        assert got.shape == (2, 7, 7, 1)
        np.testing.assert_allclose(got.cpu().numpy(), _np_iou(a, b, fmt), rtol=1e-5, atol=1e-7)
    assert (_np_iou(a, b, "midpoint") > 0).mean() > 0.3  # the sample has overlaps and gaps
    assert (_np_iou(a, b, "midpoint") == 0).mean() > 0.1


def test_yolo_non_max_suppression_by_hand():
    _, nms, _, _ = yolo_utils_page(lucid)
    boxes = [
        [1, 0.9, 0.0, 0.0, 2.0, 2.0],   # kept (best of class 1)
        [1, 0.8, 0.1, 0.1, 2.1, 2.1],   # IoU with the first 3.61/4.39 = 0.82 -> removed
        [1, 0.7, 1.0, 1.0, 3.0, 3.0],   # IoU 1/7 with the first -> kept
        [2, 0.85, 0.1, 0.1, 2.1, 2.1],  # another class: kept although it overlaps
        [1, 0.1, 5.0, 5.0, 6.0, 6.0],   # under the score threshold -> dropped
        [2, 0.6, 0.0, 0.0, 2.0, 2.0],   # IoU 0.82 with the class-2 box -> removed
    ]
    out = nms(boxes, iou_threshold=0.5, threshold=0.2, box_format="corners")
    assert out == [boxes[0], boxes[3], boxes[2]]
    # a looser IoU threshold (0.9) keeps the near-duplicates, still ordered by score
    out = nms(boxes, iou_threshold=0.9, threshold=0.2, box_format="corners")
    assert out == [boxes[0], boxes[3], boxes[1], boxes[2], boxes[5]]
    with pytest.raises(AssertionError):
        nms(tuple(boxes), 0.5, 0.2)


def _map_case():
    # one class (0) with two ground truths in image 0 and one in image 1; class 1 with one
    true = [[0, 0, 1.0, 0.0, 0.0, 1.0, 1.0], [0, 0, 1.0, 2.0, 2.0, 3.0, 3.0],
            [1, 0, 1.0, 0.0, 0.0, 1.0, 1.0], [1, 1, 1.0, 5.0, 5.0, 6.0, 6.0]]
    preds = [
        [0, 0, 0.9, 0.0, 0.0, 1.0, 1.0],    # TP (IoU 1)
        [0, 0, 0.8, 0.05, 0.0, 1.05, 1.0],  # second hit on the same gt -> FP
        [1, 0, 0.7, 3.0, 3.0, 4.0, 4.0],    # no overlap -> FP
        [0, 0, 0.6, 2.0, 2.0, 3.0, 3.1],    # TP (IoU 1/1.1)
        [1, 1, 0.5, 5.0, 5.0, 6.0, 6.0],    # class 1 TP
    ]
    return preds, true


def _np_ap(flags, n_true, eps=1e-6):
    tp = np.cumsum(flags, dtype=np.float64)
    fp = np.cumsum(1 - np.asarray(flags), dtype=np.float64)
    rec = np.concatenate([[0.0], tp / (n_true + eps)])
    prec = np.concatenate([[1.0], tp / (tp + fp + eps)])
    return float(np.sum((rec[1:] - rec[:-1]) * (prec[1:] + prec[:-1]) / 2))


def test_yolo_mean_average_precision_by_hand():
    _, _, mAP, _ = yolo_utils_page(lucid)
    preds, true = _map_case()
    got = mAP(preds, true, iou_threshold=0.5, box_format="corners", num_classes=3)
    # class 0: TP FP FP TP over 3 ground truths; class 1: TP over 1; class 2 has none (skipped)
    ap0 = 1 / 3 * (1 + 1) / 2 + 1 / 3 * (1 / 3 + 2 / 4) / 2  # trapezoids of the (recall, precision) path
    assert _np_ap([1, 0, 0, 1], 3) == pytest.approx(ap0, rel=1e-5)
    expected = (_np_ap([1, 0, 0, 1], 3) + _np_ap([1], 1)) / 2
    assert got.dtype == lucid.float32 and got.shape == ()
    assert got.item() == pytest.approx(expected, rel=1e-6)
    assert expected == pytest.approx((ap0 + 1) / 2, rel=1e-5)
    # the same case in the default midpoint format (centres and sizes); class 1 has no ground truth
    mid = lambda b: b[:3] + [(b[3] + b[5]) / 2, (b[4] + b[6]) / 2, b[5] - b[3], b[6] - b[4]]  # noqa: E731
    got = mAP([mid(b) for b in preds if b[1] == 0], [mid(b) for b in true if b[1] == 0], num_classes=2)
    assert got.item() == pytest.approx(ap0, rel=1e-5)
    # the IoU threshold decides the last TP: at 0.95 the 1/1.1 match becomes an FP
    got = mAP(preds, true, iou_threshold=0.95, box_format="corners", num_classes=3)
    assert got.item() == pytest.approx((_np_ap([1, 0, 0, 0], 3) + _np_ap([1], 1)) / 2, rel=1e-6)


def _np_convert_cellboxes(p, S=7):
    p = p.reshape(p.shape[0], 7, 7, 30).astype(np.float64)
    best = (p[..., 25] > p[..., 20]).astype(np.float64)[..., None]
    bb = p[..., 21:25] * (1 - best) + best * p[..., 26:30]
    j = np.arange(7)[None, None, :, None]
    i = np.arange(7)[None, :, None, None]
    x = (bb[..., :1] + j) / S
    y = (bb[..., 1:2] + i) / S
    cls = p[..., :20].argmax(-1)[..., None]
    conf = np.maximum(p[..., 20], p[..., 25])[..., None]
    return np.concatenate([cls, conf, x, y, bb[..., 2:4] / S], -1).reshape(p.shape[0], 49, 6)


def test_yolo_cellboxes_to_boxes_against_numpy():
    _, _, _, cellboxes_to_boxes = yolo_utils_page(lucid)
    p = np.random.default_rng(3).uniform(0, 1, (2, 7 * 7 * 30)).astype(np.float32)
    with lucid.device("cpu"):  # the page moves the predictions to "cpu", its arange follows the default
        got = cellboxes_to_boxes(lucid.tensor(p))
    assert len(got) == 2 and all(len(b) == 49 and all(len(x) == 6 for x in b) for b in got)
    assert all(float(x[0]).is_integer() for b in got for x in b)  # the class column went through long()
    np.testing.assert_allclose(np.array(got), _np_convert_cellboxes(p), rtol=1e-6, atol=1e-7)


def _yolo_target(seed, N=2):
    rng = np.random.default_rng(seed)
    t = np.zeros((N, 7, 7, 30), np.float32)
    for n in range(N):
        for (i, j) in [(1, 2), (3, 3), (5, 0)][: 3 - n]:
            t[n, i, j, rng.integers(0, 20)] = 1.0
            t[n, i, j, 20] = 1.0
            t[n, i, j, 21:23] = rng.uniform(0.1, 0.9, 2)
            t[n, i, j, 23:25] = rng.uniform(0.1, 2.0, 2)
    return t


def _np_yolo_v1_loss(p, t):
    p = p.reshape(-1, 7, 7, 30).astype(np.float64)
    t = t.astype(np.float64)
    i1 = _np_iou(p[..., 21:25], t[..., 21:25], "midpoint")
    i2 = _np_iou(p[..., 26:30], t[..., 21:25], "midpoint")
    best = (i2 > i1).astype(np.float64)  # torch.max's first index on ties
    iou_max = np.maximum(i1, i2)
    e = t[..., 20:21]
    bp = e * (best * p[..., 26:30] + (1 - best) * p[..., 21:25])
    bt = e * t[..., 21:25]
    bp[..., 2:4] = np.sign(bp[..., 2:4]) * np.sqrt(np.abs(bp[..., 2:4] + 1e-6))
    bt[..., 2:4] = np.sqrt(bt[..., 2:4])
    box = ((bp - bt) ** 2).sum()
    pc = best * p[..., 25:26] + (1 - best) * p[..., 20:21]
    obj = ((e * pc - e * t[..., 20:21] * iou_max) ** 2).sum()
    noobj = (((1 - e) * p[..., 20:21] - (1 - e) * t[..., 20:21]) ** 2).sum()
    noobj += (((1 - e) * p[..., 25:26] - (1 - e) * t[..., 20:21]) ** 2).sum()
    cls = ((e * p[..., :20] - e * t[..., :20]) ** 2).sum()
    return 5 * box + obj + 0.5 * noobj + cls


def _yolo_pred(seed, N=2):
    p = np.random.default_rng(seed).uniform(-0.2, 1.0, (N, 7, 7, 30))
    t = _yolo_target(seed + 100, N)
    p[..., 21:25] = t[..., 21:25] + np.random.default_rng(seed + 1).normal(0, 0.1, (N, 7, 7, 4))
    p[..., 26:30] = t[..., 21:25] + np.random.default_rng(seed + 2).normal(0, 0.1, (N, 7, 7, 4))
    return p.reshape(N, -1), t


def test_yolo_v1_loss_against_numpy_and_finite_differences():
    iou = yolo_utils_page(lucid)[0]
    YoloLoss, _ = yolo_v1_page(lucid, iou)
    p, t = _yolo_pred(7)
    loss_fn = YoloLoss()
    pred = lucid.tensor(p, dtype=lucid.float64, requires_grad=True)
    loss = loss_fn(pred, lucid.tensor(t, dtype=lucid.float64))
    assert loss.item() == pytest.approx(_np_yolo_v1_loss(p, t), rel=1e-10)
    loss.backward()
    g = pred.grad.cpu().numpy()
    # the in-place sqrt on box_predictions' slice must reach the predictions' gradient:
    # directional derivatives against central differences of the NumPy loss
    rng = np.random.default_rng(11)
    for _ in range(3):
        v = rng.normal(size=p.shape)
        h = 1e-6
        fd = (_np_yolo_v1_loss(p + h * v, t) - _np_yolo_v1_loss(p - h * v, t)) / (2 * h)
        assert float((g * v).sum()) == pytest.approx(fd, rel=1e-6, abs=1e-8)
    # width/height entries of cells with an object get the sqrt's gradient, empty cells none
    gw = g.reshape(2, 7, 7, 30)[..., [23, 24, 28, 29]]
    assert np.abs(gw[0, 1, 2]).sum() > 0 and np.abs(gw[0, 0, 0]).sum() == 0


def test_yolo_v1_loss_torch_parity():
    torch = pytest.importorskip("torch")
    p, t = _yolo_pred(7)
    out = []
    for m in (lucid, torch):
        YoloLoss, _ = yolo_v1_page(m, yolo_utils_page(m)[0])
        pred = m.tensor(p, dtype=m.float32, requires_grad=True)
        loss = YoloLoss()(pred, m.tensor(t))
        loss.backward()
        out.append((loss.item(), pred.grad.cpu().numpy()))
    assert out[0][0] == pytest.approx(out[1][0], rel=1e-5)
    np.testing.assert_allclose(out[0][1], out[1][1], rtol=1e-4, atol=1e-5)


def _yolo_v1_train(torch, seed_state=None, steps=4, double=False):
    iou, _, _, cellboxes_to_boxes = yolo_utils_page(torch)
    YoloLoss, Yolov1 = yolo_v1_page(torch, iou)
    torch.manual_seed(0)
    model = Yolov1(split_size=7, num_boxes=2, num_classes=20)
    if seed_state is not None:
        model.load_state_dict({k: torch.tensor(v) for k, v in seed_state.items()})
    x = torch.tensor(np.random.default_rng(5).uniform(0, 1, (1, 3, 448, 448)).astype(np.float32))
    y = torch.tensor(_yolo_target(6, 1))
    if double:
        model, x, y = model.double(), x.double(), y.double()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = YoloLoss()
    losses, out = [], x
    for _ in range(steps):
        out = model(x)
        loss = loss_fn(out, y)
        losses.append(loss.item())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    # convert_cellboxes moves the predictions to "cpu" and makes its arange on the default device
    with torch.no_grad(), torch.device("cpu"):
        boxes = cellboxes_to_boxes(model(x))
    return model, out.shape, losses, boxes


def test_yolo_v1_model_tiny_trains():
    model, shape, losses, boxes = _yolo_v1_train(lucid)
    assert tuple(shape) == (1, 7 * 7 * 30)
    n_conv = sum(isinstance(m, lucid.nn.Conv2d) for m in model.modules())
    assert n_conv == 24  # 24 convolutional layers as in the paper
    assert losses[-1] < 0.8 * losses[0]
    assert len(boxes) == 1 and len(boxes[0]) == 49


def test_yolo_v1_model_torch_parity():
    torch = pytest.importorskip("torch")
    model, *_ = _yolo_v1_train(lucid, steps=0)
    sd = {k: v.cpu().numpy() for k, v in model.state_dict().items()}
    # float64: the loss's sqrt(|w| + 1e-6) makes float32 gradients differ by ~1% between libraries
    # (both agree to 1e-12 in float64), which Adam's sign-like first steps then amplify
    r = _yolo_v1_train(lucid, sd, steps=3, double=True)
    t = _yolo_v1_train(torch, sd, steps=3, double=True)
    np.testing.assert_allclose(r[2], t[2], rtol=1e-9)
    np.testing.assert_allclose(np.array(r[3]), np.array(t[3]), rtol=1e-8, atol=1e-10)


# ---------------------------------------------------------------------------------------------
# object_detection/YOLOv3: utils.py (iou_width_height, cells_to_bboxes), loss.py, model.py
# ---------------------------------------------------------------------------------------------

def yolo_v3_page(torch, intersection_over_union, div=32):
    nn = torch.nn

    def iou_width_height(boxes1, boxes2):
        intersection = torch.min(boxes1[..., 0], boxes2[..., 0]) * torch.min(
            boxes1[..., 1], boxes2[..., 1]
        )
        union = (
            boxes1[..., 0] * boxes1[..., 1] + boxes2[..., 0] * boxes2[..., 1] - intersection
        )
        return intersection / union

    def cells_to_bboxes(predictions, anchors, S, is_preds=True):
        BATCH_SIZE = predictions.shape[0]
        num_anchors = len(anchors)
        box_predictions = predictions[..., 1:5]
        if is_preds:
            anchors = anchors.reshape(1, len(anchors), 1, 1, 2)
            box_predictions[..., 0:2] = torch.sigmoid(box_predictions[..., 0:2])
            box_predictions[..., 2:] = torch.exp(box_predictions[..., 2:]) * anchors
            scores = torch.sigmoid(predictions[..., 0:1])
            best_class = torch.argmax(predictions[..., 5:], dim=-1).unsqueeze(-1)
        else:
            scores = predictions[..., 0:1]
            best_class = predictions[..., 5:6]

        cell_indices = (
            torch.arange(S)
            .repeat(predictions.shape[0], 3, S, 1)
            .unsqueeze(-1)
            .to(predictions.device)
        )
        x = 1 / S * (box_predictions[..., 0:1] + cell_indices)
        y = 1 / S * (box_predictions[..., 1:2] + cell_indices.permute(0, 1, 3, 2, 4))
        w_h = 1 / S * box_predictions[..., 2:4]
        converted_bboxes = torch.cat((best_class, scores, x, y, w_h), dim=-1).reshape(BATCH_SIZE, num_anchors * S * S, 6)
        return converted_bboxes.tolist()

    class YoloLoss(nn.Module):
        def __init__(self):
            super().__init__()
            self.mse = nn.MSELoss()
            self.bce = nn.BCEWithLogitsLoss()
            self.entropy = nn.CrossEntropyLoss()
            self.sigmoid = nn.Sigmoid()

            self.lambda_class = 1
            self.lambda_noobj = 10
            self.lambda_obj = 1
            self.lambda_box = 10

        def forward(self, predictions, target, anchors):
            obj = target[..., 0] == 1  # in paper this is Iobj_i
            noobj = target[..., 0] == 0  # in paper this is Inoobj_i

            no_object_loss = self.bce(
                (predictions[..., 0:1][noobj]), (target[..., 0:1][noobj]),
            )

            anchors = anchors.reshape(1, 3, 1, 1, 2)
            box_preds = torch.cat([self.sigmoid(predictions[..., 1:3]), torch.exp(predictions[..., 3:5]) * anchors], dim=-1)
            ious = intersection_over_union(box_preds[obj], target[..., 1:5][obj]).detach()
            object_loss = self.mse(self.sigmoid(predictions[..., 0:1][obj]), ious * target[..., 0:1][obj])

            predictions[..., 1:3] = self.sigmoid(predictions[..., 1:3])  # x,y coordinates
            target[..., 3:5] = torch.log(
                (1e-16 + target[..., 3:5] / anchors)
            )  # width, height coordinates
            box_loss = self.mse(predictions[..., 1:5][obj], target[..., 1:5][obj])

            class_loss = self.entropy(
                (predictions[..., 5:][obj]), (target[..., 5][obj].long()),
            )

            return (
                self.lambda_box * box_loss
                + self.lambda_obj * object_loss
                + self.lambda_noobj * no_object_loss
                + self.lambda_class * class_loss
            )

    # config with every filter count divided by `div` (the original's 32..1024)
    config = [
        (32 // div, 3, 1),
        (64 // div, 3, 2),
        ["B", 1],
        (128 // div, 3, 2),
        ["B", 2],
        (256 // div, 3, 2),
        ["B", 8],
        (512 // div, 3, 2),
        ["B", 8],
        (1024 // div, 3, 2),
        ["B", 4],  # To this point is Darknet-53
        (512 // div, 1, 1),
        (1024 // div, 3, 1),
        "S",
        (256 // div, 1, 1),
        "U",
        (256 // div, 1, 1),
        (512 // div, 3, 1),
        "S",
        (128 // div, 1, 1),
        "U",
        (128 // div, 1, 1),
        (256 // div, 3, 1),
        "S",
    ]

    class CNNBlock(nn.Module):
        def __init__(self, in_channels, out_channels, bn_act=True, **kwargs):
            super().__init__()
            self.conv = nn.Conv2d(in_channels, out_channels, bias=not bn_act, **kwargs)
            self.bn = nn.BatchNorm2d(out_channels)
            self.leaky = nn.LeakyReLU(0.1)
            self.use_bn_act = bn_act

        def forward(self, x):
            if self.use_bn_act:
                return self.leaky(self.bn(self.conv(x)))
            else:
                return self.conv(x)

    class ResidualBlock(nn.Module):
        def __init__(self, channels, use_residual=True, num_repeats=1):
            super().__init__()
            self.layers = nn.ModuleList()
            for repeat in range(num_repeats):
                self.layers += [
                    nn.Sequential(
                        CNNBlock(channels, channels // 2, kernel_size=1),
                        CNNBlock(channels // 2, channels, kernel_size=3, padding=1),
                    )
                ]

            self.use_residual = use_residual
            self.num_repeats = num_repeats

        def forward(self, x):
            for layer in self.layers:
                if self.use_residual:
                    x = x + layer(x)
                else:
                    x = layer(x)

            return x

    class ScalePrediction(nn.Module):
        def __init__(self, in_channels, num_classes):
            super().__init__()
            self.pred = nn.Sequential(
                CNNBlock(in_channels, 2 * in_channels, kernel_size=3, padding=1),
                CNNBlock(
                    2 * in_channels, (num_classes + 5) * 3, bn_act=False, kernel_size=1
                ),
            )
            self.num_classes = num_classes

        def forward(self, x):
            return (
                self.pred(x)
                .reshape(x.shape[0], 3, self.num_classes + 5, x.shape[2], x.shape[3])
                .permute(0, 1, 3, 4, 2)
            )

    class YOLOv3(nn.Module):
        def __init__(self, in_channels=3, num_classes=80):
            super().__init__()
            self.num_classes = num_classes
            self.in_channels = in_channels
            self.layers = self._create_conv_layers()

        def forward(self, x):
            outputs = []  # for each scale
            route_connections = []
            for layer in self.layers:
                if isinstance(layer, ScalePrediction):
                    outputs.append(layer(x))
                    continue

                x = layer(x)

                if isinstance(layer, ResidualBlock) and layer.num_repeats == 8:
                    route_connections.append(x)

                elif isinstance(layer, nn.Upsample):
                    x = torch.cat([x, route_connections[-1]], dim=1)
                    route_connections.pop()

            return outputs

        def _create_conv_layers(self):
            layers = nn.ModuleList()
            in_channels = self.in_channels

            for module in config:
                if isinstance(module, tuple):
                    out_channels, kernel_size, stride = module
                    layers.append(
                        CNNBlock(
                            in_channels,
                            out_channels,
                            kernel_size=kernel_size,
                            stride=stride,
                            padding=1 if kernel_size == 3 else 0,
                        )
                    )
                    in_channels = out_channels

                elif isinstance(module, list):
                    num_repeats = module[1]
                    layers.append(ResidualBlock(in_channels, num_repeats=num_repeats,))

                elif isinstance(module, str):
                    if module == "S":
                        layers += [
                            ResidualBlock(in_channels, use_residual=False, num_repeats=1),
                            CNNBlock(in_channels, in_channels // 2, kernel_size=1),
                            ScalePrediction(in_channels // 2, num_classes=self.num_classes),
                        ]
                        in_channels = in_channels // 2

                    elif module == "U":
                        layers.append(nn.Upsample(scale_factor=2),)
                        in_channels = in_channels * 3

            return layers

    return iou_width_height, cells_to_bboxes, YoloLoss, YOLOv3


_ANCHORS = np.array([[0.28, 0.22], [0.38, 0.48], [0.9, 0.78]], np.float32) * 4  # one scale, S = 4


def _v3_data(seed, N=2, S=4, C=3):
    rng = np.random.default_rng(seed)
    pred = rng.normal(0, 1, (N, 3, S, S, 5 + C)).astype(np.float32)
    tgt = np.zeros((N, 3, S, S, 6), np.float32)
    tgt[..., 0] = rng.choice([0.0, 1.0, -1.0], (N, 3, S, S), p=[0.6, 0.25, 0.15])
    tgt[..., 1:3] = rng.uniform(0.05, 0.95, (N, 3, S, S, 2))
    tgt[..., 3:5] = rng.uniform(0.3, 3.0, (N, 3, S, S, 2))
    tgt[..., 5] = rng.integers(0, C, (N, 3, S, S))
    return pred, tgt


def _np_sig(z):
    return 1 / (1 + np.exp(-z))


def _np_v3_loss(p, t, anchors, ious=None):
    p, t = p.astype(np.float64), t.astype(np.float64)
    a = anchors.astype(np.float64).reshape(1, 3, 1, 1, 2)
    obj, noobj = t[..., 0] == 1, t[..., 0] == 0
    z, y = p[..., 0][noobj], t[..., 0][noobj]
    no_object = np.mean(np.maximum(z, 0) - z * y + np.log1p(np.exp(-np.abs(z))))
    bp = np.concatenate([_np_sig(p[..., 1:3]), np.exp(p[..., 3:5]) * a], -1)
    if ious is None:  # the original detaches them: a finite difference passes them in fixed
        ious = _np_iou(bp[obj], t[..., 1:5][obj], "midpoint")[:, 0]
    object_loss = np.mean((_np_sig(p[..., 0][obj]) - ious * t[..., 0][obj]) ** 2)
    pb = np.concatenate([_np_sig(p[..., 1:3]), p[..., 3:5]], -1)[obj]
    tb = np.concatenate([t[..., 1:3], np.log(1e-16 + t[..., 3:5] / a)], -1)[obj]
    box = np.mean((pb - tb) ** 2)
    logits, cls = p[..., 5:][obj], t[..., 5][obj].astype(int)
    m = logits.max(1, keepdims=True)
    lse = (m + np.log(np.exp(logits - m).sum(1, keepdims=True)))[:, 0]
    class_loss = np.mean(lse - logits[np.arange(len(cls)), cls])
    return 10 * box + object_loss + 10 * no_object + class_loss


def test_yolo_v3_iou_width_height_closed_form():
    iou_wh, _, _, _ = yolo_v3_page(lucid, yolo_utils_page(lucid)[0])
    got = iou_wh(lucid.tensor([2.0, 3.0]), lucid.tensor([[1.0, 4.0], [2.0, 3.0], [4.0, 1.0]]))
    # min(w) * min(h) over the union of the two areas
    np.testing.assert_allclose(got.cpu().numpy(), [3 / (6 + 4 - 3), 1.0, 2 / (6 + 4 - 2)], rtol=1e-6)


def test_yolo_v3_loss_against_numpy():
    iou = yolo_utils_page(lucid)[0]
    _, _, YoloLoss, _ = yolo_v3_page(lucid, iou)
    p, t = _v3_data(0)
    leaf = lucid.tensor(p, dtype=lucid.float64, requires_grad=True)
    target = lucid.tensor(t, dtype=lucid.float64)
    loss = YoloLoss()(leaf * 1, target, lucid.tensor(_ANCHORS, dtype=lucid.float64))
    assert loss.item() == pytest.approx(_np_v3_loss(p, t, _ANCHORS), rel=1e-10)
    # the loss wrote log(w / anchor) into the target (in place), as the original does
    obj = t[..., 0] == 1
    a = _ANCHORS.astype(np.float64).reshape(1, 3, 1, 1, 2)
    ref = np.log(1e-16 + t[..., 3:5].astype(np.float64) / a)
    np.testing.assert_allclose(target.cpu().numpy()[..., 3:5][obj], ref[obj], rtol=1e-12)
    loss.backward()
    g = leaf.grad.cpu().numpy()
    v = np.random.default_rng(1).normal(size=p.shape)
    h = 1e-6
    obj_ = t[..., 0] == 1
    p64, a64 = p.astype(np.float64), _ANCHORS.astype(np.float64).reshape(1, 3, 1, 1, 2)
    bp = np.concatenate([_np_sig(p64[..., 1:3]), np.exp(p64[..., 3:5]) * a64], -1)
    ious = _np_iou(bp[obj_], t[..., 1:5][obj_], "midpoint")[:, 0]
    fd = (_np_v3_loss(p + h * v, t, _ANCHORS, ious) - _np_v3_loss(p - h * v, t, _ANCHORS, ious)) / (2 * h)
    assert float((g * v).sum()) == pytest.approx(fd, rel=1e-6)
    ignored = t[..., 0] == -1  # target -1: no term sees these cells
    assert np.abs(g[ignored]).sum() == 0 and np.abs(g[obj][:, 1:]).min() > 0


def test_yolo_v3_cells_to_bboxes_against_numpy():
    _, cells_to_bboxes, _, _ = yolo_v3_page(lucid, yolo_utils_page(lucid)[0])
    p, t = _v3_data(2)
    got = np.array(cells_to_bboxes(lucid.tensor(p), lucid.tensor(_ANCHORS), S=4, is_preds=True))
    S = 4
    pp = p.astype(np.float64)
    j = np.arange(S)[None, None, None, :, None]
    i = np.arange(S)[None, None, :, None, None]
    x = (_np_sig(pp[..., 1:2]) + j) / S
    y = (_np_sig(pp[..., 2:3]) + i) / S
    wh = np.exp(pp[..., 3:5]) * _ANCHORS.reshape(1, 3, 1, 1, 2) / S
    ref = np.concatenate([pp[..., 5:].argmax(-1)[..., None], _np_sig(pp[..., 0:1]), x, y, wh], -1)
    np.testing.assert_allclose(got, ref.reshape(2, 48, 6), rtol=1e-5, atol=1e-6)
    got = np.array(cells_to_bboxes(lucid.tensor(t), lucid.tensor(_ANCHORS), S=4, is_preds=False))
    assert got.shape == (2, 48, 6)
    np.testing.assert_allclose(got[..., 0], t[..., 5].reshape(2, 48))
    np.testing.assert_allclose(got[..., 2], ((t[..., 1] + np.arange(S)) / S).reshape(2, 48), rtol=1e-6)


def _v3_model(torch, sd=None, steps=2):
    iou = yolo_utils_page(torch)[0]
    _, _, YoloLoss, YOLOv3 = yolo_v3_page(torch, iou)
    torch.manual_seed(0)
    model = YOLOv3(num_classes=3)
    if sd is not None:
        model.load_state_dict({k: torch.tensor(v) for k, v in sd.items()})
    x = torch.tensor(np.random.default_rng(3).normal(0, 1, (2, 3, 64, 64)).astype(np.float32))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    anchors = [torch.tensor(_ANCHORS * s / 4) for s in (2, 4, 8)]
    targets = [torch.tensor(_v3_data(10 + s, S=s)[1]) for s in (2, 4, 8)]
    losses, shapes = [], None
    for _ in range(steps):
        out = model(x)
        shapes = shapes or [tuple(o.shape) for o in out]
        loss = sum(YoloLoss()(o, y.clone(), a) for o, y, a in zip(out, targets, anchors))
        losses.append(loss.item())
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model, shapes, losses


def test_yolo_v3_model_tiny():
    model, shapes, losses = _v3_model(lucid, steps=3)
    assert shapes == [(2, 3, 2, 2, 8), (2, 3, 4, 4, 8), (2, 3, 8, 8, 8)]
    assert sum(isinstance(m, lucid.nn.Conv2d) for m in model.modules()) == 75  # 52 darknet + 23 head
    assert losses[-1] < 0.9 * losses[0]


def test_yolo_v3_torch_parity():
    torch = pytest.importorskip("torch")
    p, t = _v3_data(0)
    out = []
    for m in (lucid, torch):
        _, cells_to_bboxes, YoloLoss, _ = yolo_v3_page(m, yolo_utils_page(m)[0])
        leaf = m.tensor(p, requires_grad=True)
        loss = YoloLoss()(leaf * 1, m.tensor(t), m.tensor(_ANCHORS))
        loss.backward()
        out.append((loss.item(), leaf.grad.numpy(), cells_to_bboxes(m.tensor(p), m.tensor(_ANCHORS), S=4)))
    assert out[0][0] == pytest.approx(out[1][0], rel=1e-5)
    np.testing.assert_allclose(out[0][1], out[1][1], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(np.array(out[0][2]), np.array(out[1][2]), rtol=1e-5, atol=1e-6)
    model, _, _ = _v3_model(lucid, steps=0)
    sd = {k: v.cpu().numpy() for k, v in model.state_dict().items()}
    np.testing.assert_allclose(_v3_model(lucid, sd)[2], _v3_model(torch, sd)[2], rtol=1e-4)


# ---------------------------------------------------------------------------------------------
# CNN_architectures: lenet5_pytorch.py, pytorch_resnet.py (channels / 16), pytorch_efficientnet.py
# (channels / 8), pytorch_inceptionet.py's Inception_block
# ---------------------------------------------------------------------------------------------

def lenet_page(torch):
    nn = torch.nn

    class LeNet(nn.Module):
        def __init__(self):
            super(LeNet, self).__init__()
            self.relu = nn.ReLU()
            self.pool = nn.AvgPool2d(kernel_size=2, stride=2)
            self.conv1 = nn.Conv2d(in_channels=1, out_channels=6, kernel_size=5, stride=1, padding=0,)
            self.conv2 = nn.Conv2d(in_channels=6, out_channels=16, kernel_size=5, stride=1, padding=0,)
            self.conv3 = nn.Conv2d(in_channels=16, out_channels=120, kernel_size=5, stride=1, padding=0,)
            self.linear1 = nn.Linear(120, 84)
            self.linear2 = nn.Linear(84, 10)

        def forward(self, x):
            x = self.relu(self.conv1(x))
            x = self.pool(x)
            x = self.relu(self.conv2(x))
            x = self.pool(x)
            x = self.relu(
                self.conv3(x)
            )  # num_examples x 120 x 1 x 1 --> num_examples x 120
            x = x.reshape(x.shape[0], -1)
            x = self.relu(self.linear1(x))
            x = self.linear2(x)
            return x

    return LeNet


def resnet_page(torch, div=16):
    nn = torch.nn

    class block(nn.Module):
        def __init__(
            self, in_channels, intermediate_channels, identity_downsample=None, stride=1
        ):
            super(block, self).__init__()
            self.expansion = 4
            self.conv1 = nn.Conv2d(
                in_channels, intermediate_channels, kernel_size=1, stride=1, padding=0, bias=False
            )
            self.bn1 = nn.BatchNorm2d(intermediate_channels)
            self.conv2 = nn.Conv2d(
                intermediate_channels,
                intermediate_channels,
                kernel_size=3,
                stride=stride,
                padding=1,
                bias=False
            )
            self.bn2 = nn.BatchNorm2d(intermediate_channels)
            self.conv3 = nn.Conv2d(
                intermediate_channels,
                intermediate_channels * self.expansion,
                kernel_size=1,
                stride=1,
                padding=0,
                bias=False
            )
            self.bn3 = nn.BatchNorm2d(intermediate_channels * self.expansion)
            self.relu = nn.ReLU()
            self.identity_downsample = identity_downsample
            self.stride = stride

        def forward(self, x):
            identity = x.clone()

            x = self.conv1(x)
            x = self.bn1(x)
            x = self.relu(x)
            x = self.conv2(x)
            x = self.bn2(x)
            x = self.relu(x)
            x = self.conv3(x)
            x = self.bn3(x)

            if self.identity_downsample is not None:
                identity = self.identity_downsample(identity)

            x += identity
            x = self.relu(x)
            return x

    class ResNet(nn.Module):
        def __init__(self, block, layers, image_channels, num_classes):
            super(ResNet, self).__init__()
            self.in_channels = 64 // div
            self.conv1 = nn.Conv2d(image_channels, 64 // div, kernel_size=7, stride=2, padding=3, bias=False)
            self.bn1 = nn.BatchNorm2d(64 // div)
            self.relu = nn.ReLU()
            self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)

            self.layer1 = self._make_layer(
                block, layers[0], intermediate_channels=64 // div, stride=1
            )
            self.layer2 = self._make_layer(
                block, layers[1], intermediate_channels=128 // div, stride=2
            )
            self.layer3 = self._make_layer(
                block, layers[2], intermediate_channels=256 // div, stride=2
            )
            self.layer4 = self._make_layer(
                block, layers[3], intermediate_channels=512 // div, stride=2
            )

            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(512 // div * 4, num_classes)

        def forward(self, x):
            x = self.conv1(x)
            x = self.bn1(x)
            x = self.relu(x)
            x = self.maxpool(x)
            x = self.layer1(x)
            x = self.layer2(x)
            x = self.layer3(x)
            x = self.layer4(x)

            x = self.avgpool(x)
            x = x.reshape(x.shape[0], -1)
            x = self.fc(x)

            return x

        def _make_layer(self, block, num_residual_blocks, intermediate_channels, stride):
            identity_downsample = None
            layers = []

            if stride != 1 or self.in_channels != intermediate_channels * 4:
                identity_downsample = nn.Sequential(
                    nn.Conv2d(
                        self.in_channels,
                        intermediate_channels * 4,
                        kernel_size=1,
                        stride=stride,
                        bias=False
                    ),
                    nn.BatchNorm2d(intermediate_channels * 4),
                )

            layers.append(
                block(self.in_channels, intermediate_channels, identity_downsample, stride)
            )

            self.in_channels = intermediate_channels * 4

            for i in range(num_residual_blocks - 1):
                layers.append(block(self.in_channels, intermediate_channels))

            return nn.Sequential(*layers)

    def ResNet50(img_channel=3, num_classes=1000):
        return ResNet(block, [3, 4, 6, 3], img_channel, num_classes)

    return ResNet50, block


def efficientnet_page(torch, div=8):
    nn = torch.nn
    ceil = math.ceil

    base_model = [
        # expand_ratio, channels, repeats, stride, kernel_size  (channels / div)
        [1, 16 // div, 1, 1, 3],
        [6, 24 // div, 2, 2, 3],
        [6, 40 // div, 2, 2, 5],
        [6, 80 // div, 3, 2, 3],
        [6, 112 // div, 3, 1, 5],
        [6, 192 // div, 4, 2, 5],
        [6, 320 // div, 1, 1, 3],
    ]

    phi_values = {
        # tuple of: (phi_value, resolution, drop_rate)
        "b0": (0, 224, 0.2),  # alpha, beta, gamma, depth = alpha ** phi
        "b1": (0.5, 240, 0.2),
        "b2": (1, 260, 0.3),
    }

    class CNNBlock(nn.Module):
        def __init__(
                self, in_channels, out_channels, kernel_size, stride, padding, groups=1
        ):
            super(CNNBlock, self).__init__()
            self.cnn = nn.Conv2d(
                in_channels,
                out_channels,
                kernel_size,
                stride,
                padding,
                groups=groups,
                bias=False,
            )
            self.bn = nn.BatchNorm2d(out_channels)
            self.silu = nn.SiLU() # SiLU <-> Swish

        def forward(self, x):
            return self.silu(self.bn(self.cnn(x)))

    class SqueezeExcitation(nn.Module):
        def __init__(self, in_channels, reduced_dim):
            super(SqueezeExcitation, self).__init__()
            self.se = nn.Sequential(
                nn.AdaptiveAvgPool2d(1), # C x H x W -> C x 1 x 1
                nn.Conv2d(in_channels, reduced_dim, 1),
                nn.SiLU(),
                nn.Conv2d(reduced_dim, in_channels, 1),
                nn.Sigmoid(),
            )

        def forward(self, x):
            return x * self.se(x)

    class InvertedResidualBlock(nn.Module):
        def __init__(
                self,
                in_channels,
                out_channels,
                kernel_size,
                stride,
                padding,
                expand_ratio,
                reduction=4, # squeeze excitation
                survival_prob=0.8, # for stochastic depth
        ):
            super(InvertedResidualBlock, self).__init__()
            self.survival_prob = 0.8
            self.use_residual = in_channels == out_channels and stride == 1
            hidden_dim = in_channels * expand_ratio
            self.expand = in_channels != hidden_dim
            reduced_dim = int(in_channels / reduction)

            if self.expand:
                self.expand_conv = CNNBlock(
                    in_channels, hidden_dim, kernel_size=3, stride=1, padding=1,
                )

            self.conv = nn.Sequential(
                CNNBlock(
                    hidden_dim, hidden_dim, kernel_size, stride, padding, groups=hidden_dim,
                ),
                SqueezeExcitation(hidden_dim, reduced_dim),
                nn.Conv2d(hidden_dim, out_channels, 1, bias=False),
                nn.BatchNorm2d(out_channels),
            )

        def stochastic_depth(self, x):
            if not self.training:
                return x

            binary_tensor = torch.rand(x.shape[0], 1, 1, 1, device=x.device) < self.survival_prob
            return torch.div(x, self.survival_prob) * binary_tensor

        def forward(self, inputs):
            x = self.expand_conv(inputs) if self.expand else inputs

            if self.use_residual:
                return self.stochastic_depth(self.conv(x)) + inputs
            else:
                return self.conv(x)

    class EfficientNet(nn.Module):
        def __init__(self, version, num_classes):
            super(EfficientNet, self).__init__()
            width_factor, depth_factor, dropout_rate = self.calculate_factors(version)
            last_channels = ceil(1280 // div * width_factor)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.features = self.create_features(width_factor, depth_factor, last_channels)
            self.classifier = nn.Sequential(
                nn.Dropout(dropout_rate),
                nn.Linear(last_channels, num_classes),
            )

        def calculate_factors(self, version, alpha=1.2, beta=1.1):
            phi, res, drop_rate = phi_values[version]
            depth_factor = alpha ** phi
            width_factor = beta ** phi
            return width_factor, depth_factor, drop_rate

        def create_features(self, width_factor, depth_factor, last_channels):
            channels = int(32 // div * width_factor)
            features = [CNNBlock(3, channels, 3, stride=2, padding=1)]
            in_channels = channels

            for expand_ratio, channels, repeats, stride, kernel_size in base_model:
                out_channels = 4*ceil(int(channels*width_factor) / 4)
                layers_repeats = ceil(repeats * depth_factor)

                for layer in range(layers_repeats):
                    features.append(
                        InvertedResidualBlock(
                            in_channels,
                            out_channels,
                            expand_ratio=expand_ratio,
                            stride = stride if layer == 0 else 1,
                            kernel_size=kernel_size,
                            padding=kernel_size//2, # if k=1:pad=0, k=3:pad=1, k=5:pad=2
                        )
                    )
                    in_channels = out_channels

            features.append(
                CNNBlock(in_channels, last_channels, kernel_size=1, stride=1, padding=0)
            )

            return nn.Sequential(*features)

        def forward(self, x):
            x = self.pool(self.features(x))
            return self.classifier(x.view(x.shape[0], -1))

    return EfficientNet, SqueezeExcitation, InvertedResidualBlock


def inception_block_page(torch):
    nn = torch.nn

    class Inception_block(nn.Module):
        def __init__(
            self, in_channels, out_1x1, red_3x3, out_3x3, red_5x5, out_5x5, out_1x1pool
        ):
            super(Inception_block, self).__init__()
            self.branch1 = conv_block(in_channels, out_1x1, kernel_size=(1, 1))

            self.branch2 = nn.Sequential(
                conv_block(in_channels, red_3x3, kernel_size=(1, 1)),
                conv_block(red_3x3, out_3x3, kernel_size=(3, 3), padding=(1, 1)),
            )

            self.branch3 = nn.Sequential(
                conv_block(in_channels, red_5x5, kernel_size=(1, 1)),
                conv_block(red_5x5, out_5x5, kernel_size=(5, 5), padding=(2, 2)),
            )

            self.branch4 = nn.Sequential(
                nn.MaxPool2d(kernel_size=(3, 3), stride=(1, 1), padding=(1, 1)),
                conv_block(in_channels, out_1x1pool, kernel_size=(1, 1)),
            )

        def forward(self, x):
            return torch.cat(
                [self.branch1(x), self.branch2(x), self.branch3(x), self.branch4(x)], 1
            )

    class conv_block(nn.Module):
        def __init__(self, in_channels, out_channels, **kwargs):
            super(conv_block, self).__init__()
            self.relu = nn.ReLU()
            self.conv = nn.Conv2d(in_channels, out_channels, **kwargs)
            self.batchnorm = nn.BatchNorm2d(out_channels)

        def forward(self, x):
            return self.relu(self.batchnorm(self.conv(x)))

    return Inception_block


def _n_params(model):
    return sum(p.numel() for p in model.parameters())


def _classify_steps(torch, model, x, y, steps, lr=0.05):
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    losses = []
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        losses.append(loss.item())
        opt.zero_grad()
        loss.backward()
        opt.step()
    return losses


def _images(seed, shape, classes):
    rng = np.random.default_rng(seed)
    return rng.normal(0, 1, shape).astype(np.float32), rng.integers(0, classes, shape[0])


def test_lenet_parameters_and_training():
    LeNet = lenet_page(lucid)
    lucid.manual_seed(0)
    model = LeNet()
    # 6*25+6 + 16*6*25+16 + 120*16*25+120 + 120*84+84 + 84*10+10, the paper's LeNet-5
    assert _n_params(model) == 156 + 2416 + 48120 + 10164 + 850 == 61706
    x, y = _images(0, (16, 1, 32, 32), 10)
    assert tuple(model(lucid.tensor(x)).shape) == (16, 10)
    losses = _classify_steps(lucid, model, lucid.tensor(x), lucid.tensor(y), 20, lr=0.1)
    assert losses[-1] < 0.9 * losses[0]


def _copy_state(src, dst, torch):
    dst.load_state_dict({k: torch.tensor(v.detach().cpu().numpy()) for k, v in src.state_dict().items()})


def test_lenet_torch_parity():
    torch = pytest.importorskip("torch")
    lucid.manual_seed(0)
    a = lenet_page(lucid)()
    b = lenet_page(torch)()
    _copy_state(a, b, torch)
    x, y = _images(0, (16, 1, 32, 32), 10)
    la = _classify_steps(lucid, a, lucid.tensor(x), lucid.tensor(y), 5)
    lb = _classify_steps(torch, b, torch.tensor(x), torch.tensor(y), 5)
    np.testing.assert_allclose(la, lb, rtol=1e-5)


def test_resnet_in_place_residual_against_finite_differences():
    ResNet50, block = resnet_page(lucid)
    lucid.manual_seed(0)
    # eval mode: train-mode BatchNorm over layer4's 1x1 maps of 2 examples amplifies rounding ~1e6x
    model = ResNet50(img_channel=3, num_classes=5).double().eval()
    assert len(model.layer1) == 3 and len(model.layer2) == 4 and len(model.layer3) == 6 and len(model.layer4) == 3
    x = np.random.default_rng(0).normal(0, 1, (2, 3, 32, 32))
    w = np.random.default_rng(1).normal(0, 1, (2, 5))
    xt = lucid.tensor(x, requires_grad=True)
    out = model(xt)
    assert tuple(out.shape) == (2, 5)
    (out * lucid.tensor(w)).sum().backward()  # `x += identity` on a graph tensor
    v = np.random.default_rng(2).normal(0, 1, x.shape)
    h = 1e-5
    with lucid.no_grad():
        f = lambda z: float((model(lucid.tensor(z)) * lucid.tensor(w)).sum())  # noqa: E731
        fd = (f(x + h * v) - f(x - h * v)) / (2 * h)
    assert float((xt.grad.cpu().numpy() * v).sum()) == pytest.approx(fd, rel=1e-5)
    # a block whose last BatchNorm scales by 0 is relu(identity): the skip path alone
    b = block(8, 2).double().eval()
    lucid.nn.init.zeros_(b.bn3.weight)
    lucid.nn.init.zeros_(b.bn3.bias)
    z = lucid.tensor(np.random.default_rng(3).normal(0, 1, (1, 8, 4, 4)))
    np.testing.assert_array_equal(b(z).detach().cpu().numpy(), np.maximum(z.cpu().numpy(), 0))


def test_resnet_torch_parity():
    torch = pytest.importorskip("torch")
    lucid.manual_seed(0)
    a = resnet_page(lucid)[0](num_classes=5)
    b = resnet_page(torch)[0](num_classes=5)
    _copy_state(a, b, torch)
    x, y = _images(4, (4, 3, 32, 32), 5)
    grads = []
    for m, model in ((lucid, a), (torch, b)):
        model.eval()  # see test_resnet_in_place_residual_against_finite_differences
        loss = m.nn.functional.cross_entropy(model(m.tensor(x)), m.tensor(y))
        loss.backward()
        grads.append([loss.item()] + [p.grad.numpy() for p in model.parameters()])
    assert grads[0][0] == pytest.approx(grads[1][0], rel=1e-5)
    for ga, gb in zip(grads[0][1:], grads[1][1:]):
        np.testing.assert_allclose(ga, gb, rtol=1e-3, atol=1e-5)


def test_efficientnet_squeeze_excitation_and_stochastic_depth():
    EfficientNet, SqueezeExcitation, InvertedResidualBlock = efficientnet_page(lucid)
    lucid.manual_seed(0)
    se = SqueezeExcitation(6, 2).double()
    x = np.random.default_rng(0).normal(0, 1, (2, 6, 3, 3))
    c1, c2 = se.se[1], se.se[3]
    W1, b1 = c1.weight.detach().cpu().numpy()[:, :, 0, 0], c1.bias.detach().cpu().numpy()
    W2, b2 = c2.weight.detach().cpu().numpy()[:, :, 0, 0], c2.bias.detach().cpu().numpy()
    s = x.mean((2, 3)) @ W1.T + b1
    s = s / (1 + np.exp(-s))  # SiLU
    gate = 1 / (1 + np.exp(-(s @ W2.T + b2)))
    np.testing.assert_allclose(se(lucid.tensor(x)).detach().cpu().numpy(), x * gate[:, :, None, None], rtol=1e-12)
    # stochastic depth: per example, the branch is dropped (0) or kept and divided by 0.8
    blk = InvertedResidualBlock(4, 4, kernel_size=3, stride=1, padding=1, expand_ratio=2).double()
    assert blk.use_residual and blk.expand
    z = lucid.tensor(np.random.default_rng(1).normal(0, 1, (64, 4, 1, 1)))
    branch = lucid.tensor(np.random.default_rng(2).normal(0, 1, (64, 4, 1, 1)))
    lucid.manual_seed(1)
    out = blk.stochastic_depth(branch).detach().cpu().numpy()
    br = branch.cpu().numpy()
    kept = np.all(np.isclose(out, br / 0.8, rtol=1e-12), axis=(1, 2, 3))
    dropped = np.all(out == 0, axis=(1, 2, 3))
    assert np.all(kept ^ dropped) and 0.6 < kept.mean() < 0.95  # Bernoulli(0.8) over 64 examples
    blk.eval()
    assert blk.stochastic_depth(branch) is branch
    # the block in eval mode: inputs + conv(expand_conv(inputs)), no scaling
    with lucid.no_grad():
        ref = blk.conv(blk.expand_conv(z)) + z
        np.testing.assert_allclose(blk(z).cpu().numpy(), ref.cpu().numpy(), rtol=1e-12)


def test_efficientnet_b0_tiny_trains():
    EfficientNet, _, InvertedResidualBlock = efficientnet_page(lucid)
    lucid.manual_seed(0)
    model = EfficientNet("b0", num_classes=4)
    blocks = [m for m in model.modules() if isinstance(m, InvertedResidualBlock)]
    assert len(blocks) == 1 + 2 + 2 + 3 + 3 + 4 + 1  # the b0 repeats (depth factor 1)
    assert model.classifier[0].p == 0.2 and model.classifier[1].in_features == 160
    x, y = _images(5, (2, 3, 64, 64), 4)
    model.classifier[0].p = 0.0
    for b in blocks:
        b.survival_prob = 1.0  # keep every branch: a deterministic loss curve
    losses = _classify_steps(lucid, model, lucid.tensor(x), lucid.tensor(y), 3, lr=0.05)
    assert losses[-1] < 0.8 * losses[0]


def test_efficientnet_torch_parity():
    torch = pytest.importorskip("torch")
    outs = []
    lucid.manual_seed(0)
    a = efficientnet_page(lucid)[0]("b0", num_classes=4)
    b = efficientnet_page(torch)[0]("b0", num_classes=4)
    _copy_state(a, b, torch)
    x, y = _images(5, (4, 3, 32, 32), 4)
    for m, model in ((lucid, a), (torch, b)):
        model.eval()
        outs.append(model(m.tensor(x)).detach().numpy())
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-4, atol=1e-5)


def test_inception_block_branches():
    Inception_block = inception_block_page(lucid)
    lucid.manual_seed(0)
    blk = Inception_block(6, 2, 3, 4, 2, 3, 5).eval()
    x = lucid.tensor(np.random.default_rng(6).normal(0, 1, (2, 6, 5, 5)).astype(np.float32))
    out = blk(x)
    assert tuple(out.shape) == (2, 2 + 4 + 3 + 5, 5, 5)
    # branch 4: a 3x3 stride-1 max pool (padding with -inf) then a 1x1 conv_block
    xp = np.pad(x.cpu().numpy(), ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    pooled = np.max([xp[:, :, i:i + 5, j:j + 5] for i in range(3) for j in range(3)], axis=0)
    conv = blk.branch4[1]
    W = conv.conv.weight.detach().cpu().numpy()[:, :, 0, 0]
    z = np.einsum("oc,nchw->nohw", W, pooled) + conv.conv.bias.detach().cpu().numpy()[:, None, None]
    bn = conv.batchnorm  # eval: running stats (0, 1)
    z = z / np.sqrt(1 + bn.eps)
    np.testing.assert_allclose(out[:, 9:].detach().cpu().numpy(), np.maximum(z, 0), rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# more_advanced/transformer_from_scratch/transformer_from_scratch.py
# ---------------------------------------------------------------------------------------------

def transformer_page(torch):
    nn = torch.nn

    class SelfAttention(nn.Module):
        def __init__(self, embed_size, heads):
            super(SelfAttention, self).__init__()
            self.embed_size = embed_size
            self.heads = heads
            self.head_dim = embed_size // heads

            assert (
                self.head_dim * heads == embed_size
            ), "Embedding size needs to be divisible by heads"

            self.values = nn.Linear(self.head_dim, self.head_dim, bias=False)
            self.keys = nn.Linear(self.head_dim, self.head_dim, bias=False)
            self.queries = nn.Linear(self.head_dim, self.head_dim, bias=False)
            self.fc_out = nn.Linear(heads * self.head_dim, embed_size)

        def forward(self, values, keys, query, mask):
            N = query.shape[0]

            value_len, key_len, query_len = values.shape[1], keys.shape[1], query.shape[1]

            values = values.reshape(N, value_len, self.heads, self.head_dim)
            keys = keys.reshape(N, key_len, self.heads, self.head_dim)
            query = query.reshape(N, query_len, self.heads, self.head_dim)

            values = self.values(values)  # (N, value_len, heads, head_dim)
            keys = self.keys(keys)  # (N, key_len, heads, head_dim)
            queries = self.queries(query)  # (N, query_len, heads, heads_dim)

            energy = torch.einsum("nqhd,nkhd->nhqk", [queries, keys])

            if mask is not None:
                energy = energy.masked_fill(mask == 0, float("-1e20"))

            attention = torch.softmax(energy / (self.embed_size ** (1 / 2)), dim=3)

            out = torch.einsum("nhql,nlhd->nqhd", [attention, values]).reshape(
                N, query_len, self.heads * self.head_dim
            )

            out = self.fc_out(out)

            return out

    class TransformerBlock(nn.Module):
        def __init__(self, embed_size, heads, dropout, forward_expansion):
            super(TransformerBlock, self).__init__()
            self.attention = SelfAttention(embed_size, heads)
            self.norm1 = nn.LayerNorm(embed_size)
            self.norm2 = nn.LayerNorm(embed_size)

            self.feed_forward = nn.Sequential(
                nn.Linear(embed_size, forward_expansion * embed_size),
                nn.ReLU(),
                nn.Linear(forward_expansion * embed_size, embed_size),
            )

            self.dropout = nn.Dropout(dropout)

        def forward(self, value, key, query, mask):
            attention = self.attention(value, key, query, mask)

            x = self.dropout(self.norm1(attention + query))
            forward = self.feed_forward(x)
            out = self.dropout(self.norm2(forward + x))
            return out

    class Encoder(nn.Module):
        def __init__(self,src_vocab_size, embed_size, num_layers, heads, forward_expansion, dropout, device, max_length,):

            super(Encoder, self).__init__()
            self.embed_size = embed_size
            self.device = device
            self.word_embedding = nn.Embedding(src_vocab_size, embed_size)
            self.position_embedding = nn.Embedding(max_length, embed_size)

            self.layers = nn.ModuleList(
                [TransformerBlock(embed_size, heads, dropout=dropout, forward_expansion=forward_expansion,)
                 for _ in range(num_layers)])

            self.dropout = nn.Dropout(dropout)

        def forward(self, x, mask):
            N, seq_length = x.shape
            positions = torch.arange(0, seq_length).expand(N, seq_length).to(self.device)
            out = self.dropout((self.word_embedding(x) + self.position_embedding(positions)))

            for layer in self.layers:
                out = layer(out, out, out, mask)

            return out

    class DecoderBlock(nn.Module):
        def __init__(self, embed_size, heads, forward_expansion, dropout, device):
            super(DecoderBlock, self).__init__()
            self.norm = nn.LayerNorm(embed_size)
            self.attention = SelfAttention(embed_size, heads=heads)
            self.transformer_block = TransformerBlock(
                embed_size, heads, dropout, forward_expansion
            )
            self.dropout = nn.Dropout(dropout)

        def forward(self, x, value, key, src_mask, trg_mask):
            attention = self.attention(x, x, x, trg_mask)
            query = self.dropout(self.norm(attention + x))
            out = self.transformer_block(value, key, query, src_mask)
            return out

    class Decoder(nn.Module):
        def __init__(self, trg_vocab_size, embed_size, num_layers, heads, forward_expansion,dropout, device, max_length,):
            super(Decoder, self).__init__()
            self.device = device
            self.word_embedding = nn.Embedding(trg_vocab_size, embed_size)
            self.position_embedding = nn.Embedding(max_length, embed_size)

            self.layers = nn.ModuleList(
                [DecoderBlock(embed_size, heads, forward_expansion, dropout, device)
                    for _ in range(num_layers)])
            self.fc_out = nn.Linear(embed_size, trg_vocab_size)
            self.dropout = nn.Dropout(dropout)

        def forward(self, x, enc_out, src_mask, trg_mask):
            N, seq_length = x.shape
            positions = torch.arange(0, seq_length).expand(N, seq_length).to(self.device)
            x = self.dropout((self.word_embedding(x) + self.position_embedding(positions)))

            for layer in self.layers:
                x = layer(x, enc_out, enc_out, src_mask, trg_mask)

            out = self.fc_out(x)

            return out

    class Transformer(nn.Module):
        def __init__(
            self,
            src_vocab_size,
            trg_vocab_size,
            src_pad_idx,
            trg_pad_idx,
            embed_size=512,
            num_layers=6,
            forward_expansion=4,
            heads=8,
            dropout=0,
            device="cpu",
            max_length=100,
        ):

            super(Transformer, self).__init__()
            self.encoder = Encoder(src_vocab_size, embed_size, num_layers, heads, forward_expansion, dropout, device, max_length,)
            self.decoder = Decoder(trg_vocab_size, embed_size, num_layers, heads, forward_expansion, dropout, device, max_length,)

            self.src_pad_idx = src_pad_idx
            self.trg_pad_idx = trg_pad_idx
            self.device = device

        def make_src_mask(self, src):
            src_mask = (src != self.src_pad_idx).unsqueeze(1).unsqueeze(2)
            # (N, 1, 1, src_len)
            return src_mask.to(self.device)

        def make_trg_mask(self, trg):
            N, trg_len = trg.shape
            trg_mask = torch.tril(torch.ones((trg_len, trg_len))).expand(N, 1, trg_len, trg_len)
            return trg_mask.to(self.device)

        def forward(self, src, trg):
            src_mask = self.make_src_mask(src)
            trg_mask = self.make_trg_mask(trg)
            enc_src = self.encoder(src, src_mask)
            out = self.decoder(trg, enc_src, src_mask, trg_mask)
            return out

    return SelfAttention, Transformer


def _main_tokens(torch):
    # the page's __main__ example
    x = torch.tensor([[1, 5, 6, 4, 3, 9, 5, 2, 0], [1, 8, 7, 3, 4, 5, 6, 7, 2]])
    trg = torch.tensor([[1, 7, 4, 3, 5, 9, 2, 0], [1, 5, 6, 2, 4, 7, 6, 2]])
    return x, trg


def test_self_attention_einsum_and_mask_against_numpy():
    SelfAttention, _ = transformer_page(lucid)
    lucid.manual_seed(0)
    att = SelfAttention(8, 2).double()
    rng = np.random.default_rng(0)
    v, k, q = rng.normal(size=(2, 5, 8)), rng.normal(size=(2, 5, 8)), rng.normal(size=(2, 3, 8))
    mask = np.ones((2, 1, 1, 5))
    mask[1, ..., 3:] = 0  # the second example's last two keys are padding
    out = att(lucid.tensor(v), lucid.tensor(k), lucid.tensor(q), lucid.tensor(mask)).detach().cpu().numpy()
    Wv, Wk, Wq = (m.weight.detach().cpu().numpy() for m in (att.values, att.keys, att.queries))
    Wo, bo = att.fc_out.weight.detach().cpu().numpy(), att.fc_out.bias.detach().cpu().numpy()
    vv = v.reshape(2, 5, 2, 4) @ Wv.T
    kk = k.reshape(2, 5, 2, 4) @ Wk.T
    qq = q.reshape(2, 3, 2, 4) @ Wq.T
    e = np.einsum("nqhd,nkhd->nhqk", qq, kk)
    e = np.where(mask == 0, -1e20, e) / math.sqrt(8)  # the page scales by sqrt(embed_size)
    a = np.exp(e - e.max(-1, keepdims=True))
    a /= a.sum(-1, keepdims=True)
    ref = np.einsum("nhql,nlhd->nqhd", a, vv).reshape(2, 3, 8) @ Wo.T + bo
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-12)
    assert np.all(a[1, :, :, 3:] == 0)  # masked keys get exactly zero weight (exp underflows)
    with pytest.raises(AssertionError, match="divisible by heads"):
        SelfAttention(10, 4)


def test_transformer_masks_and_training():
    _, Transformer = transformer_page(lucid)
    lucid.manual_seed(0)
    model = Transformer(10, 10, 0, 0, embed_size=16, num_layers=2, forward_expansion=2, heads=2, max_length=12,
                        device=lucid.get_default_device())
    x, trg = _main_tokens(lucid)
    out = model(x, trg[:, :-1])
    assert tuple(out.shape) == (2, 7, 10)
    assert model.make_src_mask(x).tolist()[0][0][0] == [True] * 8 + [False]
    with lucid.no_grad():
        # causality: changing the last target token changes no earlier position
        t2 = trg[:, :-1].clone()
        t2[:, -1] = 3
        o2 = model(x, t2)
        np.testing.assert_allclose(o2[:, :-1].cpu().numpy(), out[:, :-1].detach().cpu().numpy(), rtol=1e-6, atol=1e-6)
        assert np.abs(o2[:, -1].cpu().numpy() - out[:, -1].detach().cpu().numpy()).max() > 1e-3
        # a padded source position is invisible: the first example with its trailing pad gives
        # what the same sentence without the pad gives
        o3 = model(x[0:1, :8], trg[0:1, :-1])
        np.testing.assert_allclose(o3.cpu().numpy(), out[0:1].detach().cpu().numpy(), rtol=1e-5, atol=1e-6)
    # learn to copy the source (a shifted target), Adam 10 steps
    rng = np.random.default_rng(1)
    src = lucid.tensor(rng.integers(1, 10, (8, 6)))
    tgt = lucid.cat([lucid.ones(8, 1, dtype=lucid.int64), src], 1)
    opt = lucid.optim.Adam(model.parameters(), lr=2e-2)
    losses = []
    for _ in range(10):
        logits = model(src, tgt[:, :-1])
        loss = lucid.nn.functional.cross_entropy(logits.reshape(-1, 10), tgt[:, 1:].reshape(-1))
        losses.append(loss.item())
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert losses[-1] < 0.6 * losses[0]


def test_transformer_torch_parity():
    torch = pytest.importorskip("torch")
    outs = []
    lucid.manual_seed(0)
    kw = dict(embed_size=16, num_layers=2, forward_expansion=2, heads=2, max_length=12)
    a = transformer_page(lucid)[1](10, 10, 0, 0, device=lucid.get_default_device(), **kw)
    b = transformer_page(torch)[1](10, 10, 0, 0, **kw)
    _copy_state(a, b, torch)
    for m, model in ((lucid, a), (torch, b)):
        x, trg = _main_tokens(m)
        out = model(x, trg[:, :-1])
        out.square().sum().backward()
        outs.append([out.detach().numpy()] + [p.grad.numpy() for p in model.parameters()])
    for u, w in zip(*outs):
        np.testing.assert_allclose(u, w, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# more_advanced/Seq2Seq_attention/seq2seq_attention.py (Multi30k/spacy replaced by a toy vocabulary)
# ---------------------------------------------------------------------------------------------

def seq2seq_attention_page(torch, english, device):
    import random
    nn = torch.nn

    class Encoder(nn.Module):
        def __init__(self, input_size, embedding_size, hidden_size, num_layers, p):
            super(Encoder, self).__init__()
            self.hidden_size = hidden_size
            self.num_layers = num_layers

            self.embedding = nn.Embedding(input_size, embedding_size)
            self.rnn = nn.LSTM(embedding_size, hidden_size, num_layers, bidirectional=True)

            self.fc_hidden = nn.Linear(hidden_size * 2, hidden_size)
            self.fc_cell = nn.Linear(hidden_size * 2, hidden_size)
            self.dropout = nn.Dropout(p)

        def forward(self, x):
            embedding = self.dropout(self.embedding(x))
            encoder_states, (hidden, cell) = self.rnn(embedding)
            hidden = self.fc_hidden(torch.cat((hidden[0:1], hidden[1:2]), dim=2))
            cell = self.fc_cell(torch.cat((cell[0:1], cell[1:2]), dim=2))

            return encoder_states, hidden, cell

    class Decoder(nn.Module):
        def __init__(
                self, input_size, embedding_size, hidden_size, output_size, num_layers, p
        ):
            super(Decoder, self).__init__()
            self.hidden_size = hidden_size
            self.num_layers = num_layers

            self.embedding = nn.Embedding(input_size, embedding_size)
            self.rnn = nn.LSTM(hidden_size * 2 + embedding_size, hidden_size, num_layers)

            self.energy = nn.Linear(hidden_size * 3, 1)
            self.fc = nn.Linear(hidden_size, output_size)
            self.dropout = nn.Dropout(p)
            self.softmax = nn.Softmax(dim=0)
            self.relu = nn.ReLU()

        def forward(self, x, encoder_states, hidden, cell):
            x = x.unsqueeze(0)
            embedding = self.dropout(self.embedding(x))

            sequence_length = encoder_states.shape[0]
            h_reshaped = hidden.repeat(sequence_length, 1, 1)

            energy = self.relu(self.energy(torch.cat((h_reshaped, encoder_states), dim=2)))
            attention = self.softmax(energy)
            self.last_attention = attention  # kept for the test
            context_vector = torch.einsum('snk,snl->knl', attention, encoder_states)

            rnn_input = torch.cat((context_vector, embedding), dim=2)
            outputs, (hidden, cell) = self.rnn(rnn_input, (hidden, cell))
            predictions = self.fc(outputs).squeeze(0)

            return predictions, hidden, cell

    class Seq2Seq(nn.Module):
        def __init__(self, encoder, decoder):
            super(Seq2Seq, self).__init__()
            self.encoder = encoder
            self.decoder = decoder

        def forward(self, source, target, teacher_force_ratio=0.5):
            batch_size = source.shape[1]
            target_len = target.shape[0]
            target_vocab_size = len(english.vocab)

            outputs = torch.zeros(target_len, batch_size, target_vocab_size).to(device)
            encoder_states, hidden, cell = self.encoder(source)

            x = target[0]

            for t in range(1, target_len):
                output, hidden, cell = self.decoder(x, encoder_states, hidden, cell)
                outputs[t] = output
                best_guess = output.argmax(1)
                x = target[t] if random.random() < teacher_force_ratio else best_guess

            return outputs

    def train(src, trg, steps, hidden_size=8, emb=6, state=None):
        random.seed(0)
        V = len(english.vocab)
        encoder_net = Encoder(V, emb, hidden_size, 1, 0.0).to(device)
        decoder_net = Decoder(V, emb, hidden_size, V, 1, 0.0).to(device)
        model = Seq2Seq(encoder_net, decoder_net).to(device)
        if state is not None:
            model.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-2)
        pad_idx = english.vocab.stoi["<pad>"]
        criterion = nn.CrossEntropyLoss(ignore_index=pad_idx)
        losses, norms = [], []
        for _ in range(steps):
            output = model(src, trg)
            output = output[1:].reshape(-1, output.shape[2])
            target = trg[1:].reshape(-1)
            optimizer.zero_grad()
            loss = criterion(output, target)
            loss.backward()
            norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1)))
            after = math.sqrt(sum(float((p.grad ** 2).sum()) for p in model.parameters()))
            norms.append(after)
            optimizer.step()
            losses.append(loss.item())
        return model, losses, norms

    return train


class _Vocab:
    def __init__(self, words):
        self.itos = words
        self.stoi = {w: i for i, w in enumerate(words)}

    def __len__(self):
        return len(self.itos)


def _seq2seq_data(torch):
    english = type("Field", (), {"vocab": _Vocab(["<pad>", "<sos>", "<eos>"] + list("abcdefg"))})()
    rng = np.random.default_rng(0)
    src = rng.integers(3, 10, (5, 4))  # (seq_len, N)
    trg = np.concatenate([np.ones((1, 4), np.int64), src[::-1], np.full((1, 4), 2)], 0)  # reversed
    trg[-1, 3] = 0  # one pad, ignored by the loss
    return english, torch.tensor(src), torch.tensor(trg)


def test_seq2seq_attention_trains_with_clipping():
    english, src, trg = _seq2seq_data(lucid)
    train = seq2seq_attention_page(lucid, english, lucid.get_default_device())
    lucid.manual_seed(0)
    model, losses, norms = train(src, trg, 10)
    assert losses[-1] < 0.75 * losses[0]
    # clip_grad_norm_ returns the norm before clipping and leaves at most max_norm (1)
    before, after = norms[0::2], norms[1::2]
    for b, a in zip(before, after):
        assert a == pytest.approx(min(b, 1.0), rel=1e-5)
    grads = [p.grad * 10 for p in model.parameters()]  # a norm above 1 is scaled down to 1
    for p, g in zip(model.parameters(), grads):
        p.grad = g
    host = [g.cpu().numpy().astype(np.float64) for g in grads]  # clip_grad_norm_ scales p.grad in place
    total = math.sqrt(sum(float((g ** 2).sum()) for g in host))
    assert total > 1
    assert float(lucid.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1)) == pytest.approx(total, rel=1e-5)
    for p, g in zip(model.parameters(), host):
        np.testing.assert_allclose(p.grad.cpu().numpy(), g / (total + 1e-6), rtol=1e-5)
    att = model.decoder.last_attention
    assert tuple(att.shape) == (5, 4, 1)  # (seq_length, N, 1), softmax over the source positions
    np.testing.assert_allclose(att.sum(0).detach().cpu().numpy(), 1.0, rtol=1e-6)


def test_seq2seq_attention_torch_parity():
    torch = pytest.importorskip("torch")
    english, src, trg = _seq2seq_data(lucid)
    lucid.manual_seed(0)
    model, _, _ = seq2seq_attention_page(lucid, english, lucid.get_default_device())(src, trg, 0)
    sd = {k: v.detach().cpu().numpy() for k, v in model.state_dict().items()}
    out = []
    for m, dev in ((lucid, lucid.get_default_device()), (torch, "cpu")):
        english, src, trg = _seq2seq_data(m)
        out.append(seq2seq_attention_page(m, english, dev)(src, trg, 5, state=sd)[1:])
    np.testing.assert_allclose(out[0][0], out[1][0], rtol=1e-5)
    np.testing.assert_allclose(out[0][1], out[1][1], rtol=1e-5)


# ---------------------------------------------------------------------------------------------
# more_advanced/image_captioning/model.py (inception_v3 replaced by a small CNN stand-in)
# ---------------------------------------------------------------------------------------------

def captioning_page(torch):
    nn = torch.nn

    class _TinyInception(nn.Module):  # stands in for models.inception_v3(pretrained=True)
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, 2)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(4, 1000)

        def forward(self, x):
            return self.fc(self.pool(self.conv(x)).flatten(1))

    class EncoderCNN(nn.Module):
        def __init__(self, embed_size, train_CNN=False):
            super(EncoderCNN, self).__init__()
            self.train_CNN = train_CNN
            self.inception = _TinyInception()
            self.inception.fc = nn.Linear(self.inception.fc.in_features, embed_size)
            self.relu = nn.ReLU()
            self.times = []
            self.dropout = nn.Dropout(0.5)

        def forward(self, images):
            features = self.inception(images)
            return self.dropout(self.relu(features))

    class DecoderRNN(nn.Module):
        def __init__(self, embed_size, hidden_size, vocab_size, num_layers):
            super(DecoderRNN, self).__init__()
            self.embed = nn.Embedding(vocab_size, embed_size)
            self.lstm = nn.LSTM(embed_size, hidden_size, num_layers)
            self.linear = nn.Linear(hidden_size, vocab_size)
            self.dropout = nn.Dropout(0.5)

        def forward(self, features, captions):
            embeddings = self.dropout(self.embed(captions))
            embeddings = torch.cat((features.unsqueeze(0), embeddings), dim=0)
            hiddens, _ = self.lstm(embeddings)
            outputs = self.linear(hiddens)
            return outputs

    class CNNtoRNN(nn.Module):
        def __init__(self, embed_size, hidden_size, vocab_size, num_layers):
            super(CNNtoRNN, self).__init__()
            self.encoderCNN = EncoderCNN(embed_size)
            self.decoderRNN = DecoderRNN(embed_size, hidden_size, vocab_size, num_layers)

        def forward(self, images, captions):
            features = self.encoderCNN(images)
            outputs = self.decoderRNN(features, captions)
            return outputs

        def caption_image(self, image, vocabulary, max_length=50):
            result_caption = []

            with torch.no_grad():
                x = self.encoderCNN(image).unsqueeze(0)
                states = None

                for _ in range(max_length):
                    hiddens, states = self.decoderRNN.lstm(x, states)
                    output = self.decoderRNN.linear(hiddens.squeeze(0))
                    predicted = output.argmax(1)
                    result_caption.append(predicted.item())
                    x = self.decoderRNN.embed(predicted).unsqueeze(0)

                    if vocabulary.itos[predicted.item()] == "<EOS>":
                        break

            return [vocabulary.itos[idx] for idx in result_caption]

    return CNNtoRNN


def test_image_captioning_model():
    CNNtoRNN = captioning_page(lucid)
    vocab = _Vocab(["<PAD>", "<SOS>", "<EOS>", "<UNK>", "a", "dog", "runs"])
    lucid.manual_seed(0)
    model = CNNtoRNN(embed_size=6, hidden_size=8, vocab_size=7, num_layers=1)
    images = lucid.tensor(np.random.default_rng(0).normal(0, 1, (3, 3, 9, 9)).astype(np.float32))
    captions = lucid.tensor([[1, 1, 1], [4, 4, 5], [5, 6, 6], [2, 2, 2]])  # (seq_len, N)
    model.eval()
    out = model(images, captions[:-1])
    assert tuple(out.shape) == (4, 3, 7)  # the image feature is the first step
    # greedy captioning with the output layer forced to one word: stops at once on <EOS>,
    # otherwise runs max_length steps
    with lucid.no_grad():
        model.decoderRNN.linear.weight.zero_()
        model.decoderRNN.linear.bias.copy_(lucid.tensor([0.0, 0, 5, 0, 0, 0, 0]))
    assert model.caption_image(images[:1], vocab) == ["<EOS>"]
    with lucid.no_grad():
        model.decoderRNN.linear.bias.copy_(lucid.tensor([0.0, 0, 0, 0, 0, 5, 0]))
    assert model.caption_image(images[:1], vocab, max_length=4) == ["dog"] * 4
    # training on the page's loss (targets = captions, outputs of all steps but the last)
    lucid.manual_seed(1)
    model = CNNtoRNN(embed_size=6, hidden_size=8, vocab_size=7, num_layers=1)
    for m in model.modules():
        if isinstance(m, lucid.nn.Dropout):
            m.p = 0.0
    crit = lucid.nn.CrossEntropyLoss(ignore_index=vocab.stoi["<PAD>"])
    opt = lucid.optim.Adam(model.parameters(), lr=3e-2)
    losses = []
    for _ in range(10):
        outputs = model(images, captions[:-1])
        loss = crit(outputs.reshape(-1, outputs.shape[2]), captions.reshape(-1))
        losses.append(loss.item())
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert losses[-1] < 0.7 * losses[0]


def test_image_captioning_torch_parity():
    torch = pytest.importorskip("torch")
    lucid.manual_seed(0)
    a = captioning_page(lucid)(embed_size=6, hidden_size=8, vocab_size=7, num_layers=1).eval()
    b = captioning_page(torch)(embed_size=6, hidden_size=8, vocab_size=7, num_layers=1).eval()
    _copy_state(a, b, torch)
    vocab = _Vocab(["<PAD>", "<SOS>", "<EOS>", "<UNK>", "a", "dog", "runs"])
    images = np.random.default_rng(0).normal(0, 1, (3, 3, 9, 9)).astype(np.float32)
    caps = [[1, 1, 1], [4, 4, 5], [5, 6, 6]]
    oa = a(lucid.tensor(images), lucid.tensor(caps)).detach().numpy()
    ob = b(torch.tensor(images), torch.tensor(caps)).detach().numpy()
    np.testing.assert_allclose(oa, ob, rtol=1e-5, atol=1e-6)
    assert a.caption_image(lucid.tensor(images[:1]), vocab, 6) == b.caption_image(torch.tensor(images[:1]), vocab, 6)


# ---------------------------------------------------------------------------------------------
# image_segmentation/semantic_segmentation_unet/model.py (TF.resize -> F.interpolate bilinear)
# ---------------------------------------------------------------------------------------------

def unet_page(torch):
    nn = torch.nn

    class TF:  # torchvision.transforms.functional.resize on a tensor: bilinear, antialias only shrinks
        @staticmethod
        def resize(x, size):
            return torch.nn.functional.interpolate(x, size=tuple(size), mode="bilinear", align_corners=False)

    class DoubleConv(nn.Module):
        def __init__(self, in_channels, out_channels):
            super(DoubleConv, self).__init__()
            self.conv = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 3, 1, 1, bias=False),
                nn.BatchNorm2d(out_channels),
                nn.ReLU(inplace=True),
                nn.Conv2d(out_channels, out_channels, 3, 1, 1, bias=False),
                nn.BatchNorm2d(out_channels),
                nn.ReLU(inplace=True),
            )

        def forward(self, x):
            return self.conv(x)

    class UNET(nn.Module):
        def __init__(
                self, in_channels=3, out_channels=1, features=[64, 128, 256, 512],
        ):
            super(UNET, self).__init__()
            self.ups = nn.ModuleList()
            self.downs = nn.ModuleList()
            self.pool = nn.MaxPool2d(kernel_size=2, stride=2)

            for feature in features:
                self.downs.append(DoubleConv(in_channels, feature))
                in_channels = feature

            for feature in reversed(features):
                self.ups.append(
                    nn.ConvTranspose2d(
                        feature*2, feature, kernel_size=2, stride=2,
                    )
                )
                self.ups.append(DoubleConv(feature*2, feature))

            self.bottleneck = DoubleConv(features[-1], features[-1]*2)
            self.final_conv = nn.Conv2d(features[0], out_channels, kernel_size=1)

        def forward(self, x):
            skip_connections = []

            for down in self.downs:
                x = down(x)
                skip_connections.append(x)
                x = self.pool(x)

            x = self.bottleneck(x)
            skip_connections = skip_connections[::-1]

            for idx in range(0, len(self.ups), 2):
                x = self.ups[idx](x)
                skip_connection = skip_connections[idx//2]

                if x.shape != skip_connection.shape:
                    x = TF.resize(x, size=skip_connection.shape[2:])

                concat_skip = torch.cat((skip_connection, x), dim=1)
                x = self.ups[idx+1](concat_skip)

            return self.final_conv(x)

    return UNET


def test_unet_odd_size_and_training():
    UNET = unet_page(lucid)
    lucid.manual_seed(0)
    model = UNET(in_channels=1, out_channels=1, features=[2, 4, 8, 16])
    # the page's test(): an odd size goes through TF.resize and comes back to the input's shape
    x = lucid.tensor(np.random.default_rng(0).normal(0, 1, (2, 1, 17, 17)).astype(np.float32))
    preds = model(x)
    assert preds.shape == x.shape
    # the train.py loss: BCEWithLogits against a mask, Adam
    y = (x > 0.3).float()
    opt = lucid.optim.Adam(model.parameters(), lr=3e-2)
    loss_fn = lucid.nn.BCEWithLogitsLoss()
    losses = []
    for _ in range(8):
        loss = loss_fn(model(x), y)
        losses.append(loss.item())
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert losses[-1] < 0.85 * losses[0]


def test_unet_torch_parity():
    torch = pytest.importorskip("torch")
    lucid.manual_seed(0)
    a = unet_page(lucid)(in_channels=1, out_channels=1, features=[2, 4, 8, 16])
    b = unet_page(torch)(in_channels=1, out_channels=1, features=[2, 4, 8, 16])
    _copy_state(a, b, torch)
    x = np.random.default_rng(0).normal(0, 1, (2, 1, 17, 17)).astype(np.float32)
    out = []
    for m, model in ((lucid, a), (torch, b)):
        model.eval()
        xt = m.tensor(x, requires_grad=True)
        p = model(xt)
        p.square().sum().backward()
        out.append((p.detach().numpy(), xt.grad.numpy()))
    np.testing.assert_allclose(out[0][0], out[1][0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out[0][1], out[1][1], rtol=1e-3, atol=1e-4)


# ---------------------------------------------------------------------------------------------
# GANs/ProGAN/model.py: WSConv2d, PixelNorm, minibatch std, progressive Generator/Discriminator
# ---------------------------------------------------------------------------------------------

def progan_page(torch):
    nn = torch.nn
    F = torch.nn.functional

    factors = [1, 1, 1, 1, 1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32]

    class WSConv2d(nn.Module):
        def __init__(
            self, in_channels, out_channels, kernel_size=3, stride=1, padding=1, gain=2
        ):
            super(WSConv2d, self).__init__()
            self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding)
            self.scale = (gain / (in_channels * (kernel_size ** 2))) ** 0.5
            self.bias = self.conv.bias
            self.conv.bias = None

            nn.init.normal_(self.conv.weight)
            nn.init.zeros_(self.bias)

        def forward(self, x):
            return self.conv(x * self.scale) + self.bias.view(1, self.bias.shape[0], 1, 1)

    class PixelNorm(nn.Module):
        def __init__(self):
            super(PixelNorm, self).__init__()
            self.epsilon = 1e-8

        def forward(self, x):
            return x / torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + self.epsilon)

    class ConvBlock(nn.Module):
        def __init__(self, in_channels, out_channels, use_pixelnorm=True):
            super(ConvBlock, self).__init__()
            self.use_pn = use_pixelnorm
            self.conv1 = WSConv2d(in_channels, out_channels)
            self.conv2 = WSConv2d(out_channels, out_channels)
            self.leaky = nn.LeakyReLU(0.2)
            self.pn = PixelNorm()

        def forward(self, x):
            x = self.leaky(self.conv1(x))
            x = self.pn(x) if self.use_pn else x
            x = self.leaky(self.conv2(x))
            x = self.pn(x) if self.use_pn else x
            return x

    class Generator(nn.Module):
        def __init__(self, z_dim, in_channels, img_channels=3):
            super(Generator, self).__init__()

            self.initial = nn.Sequential(
                PixelNorm(),
                nn.ConvTranspose2d(z_dim, in_channels, 4, 1, 0),
                nn.LeakyReLU(0.2),
                WSConv2d(in_channels, in_channels, kernel_size=3, stride=1, padding=1),
                nn.LeakyReLU(0.2),
                PixelNorm(),
            )

            self.initial_rgb = WSConv2d(
                in_channels, img_channels, kernel_size=1, stride=1, padding=0
            )
            self.prog_blocks, self.rgb_layers = (
                nn.ModuleList([]),
                nn.ModuleList([self.initial_rgb]),
            )

            for i in range(
                len(factors) - 1
            ):  # -1 to prevent index error because of factors[i+1]
                conv_in_c = int(in_channels * factors[i])
                conv_out_c = int(in_channels * factors[i + 1])
                self.prog_blocks.append(ConvBlock(conv_in_c, conv_out_c))
                self.rgb_layers.append(
                    WSConv2d(conv_out_c, img_channels, kernel_size=1, stride=1, padding=0)
                )

        def fade_in(self, alpha, upscaled, generated):
            return torch.tanh(alpha * generated + (1 - alpha) * upscaled)

        def forward(self, x, alpha, steps):
            out = self.initial(x)

            if steps == 0:
                return self.initial_rgb(out)

            for step in range(steps):
                upscaled = F.interpolate(out, scale_factor=2, mode="nearest")
                out = self.prog_blocks[step](upscaled)

            final_upscaled = self.rgb_layers[steps - 1](upscaled)
            final_out = self.rgb_layers[steps](out)
            return self.fade_in(alpha, final_upscaled, final_out)

    class Discriminator(nn.Module):
        def __init__(self, in_channels, img_channels=3):
            super(Discriminator, self).__init__()
            self.prog_blocks, self.rgb_layers = nn.ModuleList([]), nn.ModuleList([])
            self.leaky = nn.LeakyReLU(0.2)

            for i in range(len(factors) - 1, 0, -1):
                conv_in = int(in_channels * factors[i])
                conv_out = int(in_channels * factors[i - 1])
                self.prog_blocks.append(ConvBlock(conv_in, conv_out, use_pixelnorm=False))
                self.rgb_layers.append(
                    WSConv2d(img_channels, conv_in, kernel_size=1, stride=1, padding=0)
                )

            self.initial_rgb = WSConv2d(
                img_channels, in_channels, kernel_size=1, stride=1, padding=0
            )
            self.rgb_layers.append(self.initial_rgb)
            self.avg_pool = nn.AvgPool2d(
                kernel_size=2, stride=2
            )  # down sampling using avg pool

            self.final_block = nn.Sequential(
                WSConv2d(in_channels + 1, in_channels, kernel_size=3, padding=1),
                nn.LeakyReLU(0.2),
                WSConv2d(in_channels, in_channels, kernel_size=4, padding=0, stride=1),
                nn.LeakyReLU(0.2),
                WSConv2d(
                    in_channels, 1, kernel_size=1, padding=0, stride=1
                ),  # we use this instead of linear layer
            )

        def fade_in(self, alpha, downscaled, out):
            return alpha * out + (1 - alpha) * downscaled

        def minibatch_std(self, x):
            batch_statistics = (
                torch.std(x, dim=0).mean().repeat(x.shape[0], 1, x.shape[2], x.shape[3])
            )
            return torch.cat([x, batch_statistics], dim=1)

        def forward(self, x, alpha, steps):
            cur_step = len(self.prog_blocks) - steps

            out = self.leaky(self.rgb_layers[cur_step](x))

            if steps == 0:  # i.e, image is 4x4
                out = self.minibatch_std(out)
                return self.final_block(out).view(out.shape[0], -1)

            downscaled = self.leaky(self.rgb_layers[cur_step + 1](self.avg_pool(x)))
            out = self.avg_pool(self.prog_blocks[cur_step](out))

            out = self.fade_in(alpha, downscaled, out)

            for step in range(cur_step + 1, len(self.prog_blocks)):
                out = self.prog_blocks[step](out)
                out = self.avg_pool(out)

            out = self.minibatch_std(out)
            return self.final_block(out).view(out.shape[0], -1)

    return WSConv2d, PixelNorm, Generator, Discriminator


def test_progan_pieces_closed_forms():
    WSConv2d, PixelNorm, Generator, Discriminator = progan_page(lucid)
    lucid.manual_seed(0)
    ws = WSConv2d(4, 3, kernel_size=1, padding=0).double()
    # the conv's bias moved out: one registered bias, the conv has none
    assert ws.conv.bias is None and [n for n, _ in ws.named_parameters()] == ["bias", "conv.weight"]
    assert ws.scale == pytest.approx(math.sqrt(2 / 4))
    with lucid.no_grad():
        ws.bias.copy_(lucid.tensor([0.5, -1.0, 2.0]))
    x = np.random.default_rng(0).normal(0, 1, (2, 4, 3, 3))
    W = ws.conv.weight.detach().cpu().numpy()[:, :, 0, 0]
    ref = np.einsum("oc,nchw->nohw", W, x * math.sqrt(0.5)) + np.array([0.5, -1.0, 2.0])[:, None, None]
    np.testing.assert_allclose(ws(lucid.tensor(x)).detach().cpu().numpy(), ref, rtol=1e-12)
    # PixelNorm: unit root-mean-square over channels at every pixel
    pn = PixelNorm()(lucid.tensor(x)).cpu().numpy()
    np.testing.assert_allclose(pn, x / np.sqrt((x ** 2).mean(1, keepdims=True) + 1e-8), rtol=1e-12)
    np.testing.assert_allclose((pn ** 2).mean(1), 1.0, rtol=1e-6)
    # minibatch std: one extra channel holding mean over (C, H, W) of the unbiased std over the batch
    D = Discriminator(32, img_channels=3)
    mb = D.minibatch_std(lucid.tensor(x)).cpu().numpy()
    assert mb.shape == (2, 5, 3, 3)
    np.testing.assert_allclose(mb[:, 4], x.std(0, ddof=1).mean(), rtol=1e-12)
    np.testing.assert_array_equal(mb[:, :4], x)


def test_progan_progressive_shapes_and_fade_in():
    _, _, Generator, Discriminator = progan_page(lucid)
    lucid.manual_seed(0)
    Z_DIM, IN_CHANNELS = 8, 32  # the page's 100 and 256, smaller
    gen = Generator(Z_DIM, IN_CHANNELS, img_channels=3)
    critic = Discriminator(IN_CHANNELS, img_channels=3)
    assert [b.conv1.conv.in_channels for b in gen.prog_blocks] == [32, 32, 32, 32, 16, 8, 4, 2]
    x = lucid.randn((2, Z_DIM, 1, 1))
    for img_size in [4, 8, 16]:
        num_steps = int(math.log2(img_size / 4))
        z = gen(x, 0.5, steps=num_steps)
        assert z.shape == (2, 3, img_size, img_size)
        out = critic(z, alpha=0.5, steps=num_steps)
        assert out.shape == (2, 1)
    # fade-in, alpha = 1: the generator's image is tanh of the new block's RGB, alpha = 0 the upscaled
    with lucid.no_grad():
        out = gen.initial(x)
        up = lucid.nn.functional.interpolate(out, scale_factor=2, mode="nearest")
        new = gen.rgb_layers[1](gen.prog_blocks[0](up))
        old = gen.rgb_layers[0](up)
        np.testing.assert_allclose(gen(x, 1.0, 1).cpu().numpy(), np.tanh(new.cpu().numpy()), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(gen(x, 0.0, 1).cpu().numpy(), np.tanh(old.cpu().numpy()), rtol=1e-5, atol=1e-6)
        # nearest upscaling repeats every pixel 2x2
        o = out.cpu().numpy()
        np.testing.assert_array_equal(up.cpu().numpy(), o.repeat(2, 2).repeat(2, 3))


def test_progan_torch_parity():
    torch = pytest.importorskip("torch")
    lucid.manual_seed(0)
    la = progan_page(lucid)
    ta = progan_page(torch)
    g, d = la[2](8, 32), la[3](32)
    tg, td = ta[2](8, 32), ta[3](32)
    _copy_state(g, tg, torch)
    _copy_state(d, td, torch)
    z = np.random.default_rng(0).normal(0, 1, (2, 8, 1, 1)).astype(np.float32)
    for steps in (0, 1, 2):
        a = d(g(lucid.tensor(z), 0.3, steps), 0.3, steps).detach().numpy()
        b = td(tg(torch.tensor(z), 0.3, steps), 0.3, steps).detach().numpy()
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# Basics: pytorch_tensorbasics.py
# ---------------------------------------------------------------------------------------------

def tensorbasics_page(torch, out):
    print = out.append  # noqa: A001 -- the page's prints, collected
    device = "cuda" if torch.cuda.is_available() else "cpu"  # Cuda to run on GPU!
    device = torch.get_default_device()  # (the test's default device: cpu, or the strict stand-in)
    r = {}

    my_tensor = torch.tensor(
        [[1, 2, 3], [4, 5, 6]], dtype=torch.float32, device=device, requires_grad=True
    )
    print(
        f"Information about tensor: {my_tensor}"
    )  # Prints data of the tensor, device and grad info
    print(
        "Type of Tensor {my_tensor.dtype}"
    )  # Prints dtype of the tensor (torch.float32, etc)
    print(
        f"Device Tensor is on {my_tensor.device}"
    )  # Prints cpu/cuda (followed by gpu number)
    print(f"Shape of tensor {my_tensor.shape}")
    print(f"Requires gradient: {my_tensor.requires_grad}")

    x = torch.empty(size=(3, 3))
    r["empty"] = x.shape
    r["zeros"] = torch.zeros((3, 3))
    r["rand"] = torch.rand((3, 3))
    r["ones"] = torch.ones((3, 3))
    r["eye"] = torch.eye(5, 5)
    r["arange"] = torch.arange(start=0, end=5, step=1)
    r["linspace"] = torch.linspace(start=0.1, end=1, steps=10)
    r["normal"] = torch.empty(size=(1, 5)).normal_(mean=0, std=1)
    r["uniform"] = torch.empty(size=(1, 5)).uniform_(0, 1)
    r["diag"] = torch.diag(torch.ones(3))

    tensor = torch.arange(4)
    print(f"Converted Boolean: {tensor.bool()}")
    print(f"Converted int16 {tensor.short()}")
    print(f"Converted int64 {tensor.long()}")
    print(f"Converted float16 {tensor.half()}")
    print(f"Converted float32 {tensor.float()}")
    print(f"Converted float64 {tensor.double()}")

    if device == "cpu" or str(device) == "cpu":
        np_array = np.zeros((5, 5))
        tensor = torch.from_numpy(np_array)
        np_array_again = tensor.numpy()
        r["numpy_roundtrip"] = np_array_again is not None and np.shares_memory(np_array, np_array_again)

    x = torch.tensor([1, 2, 3])
    y = torch.tensor([9, 8, 7])

    z1 = torch.empty(3)
    torch.add(x, y, out=z1)
    z2 = torch.add(x, y)
    z = x + y
    r["add"] = (z1, z2, z)
    r["sub"] = x - y
    r["true_divide"] = torch.true_divide(x, y)

    t = torch.zeros(3)
    t.add_(x)
    t += x
    r["inplace"] = t

    r["pow"] = (x.pow(2), x**2)
    r["cmp"] = (x > 0, x < 0)

    x1 = torch.rand((2, 5))
    x2 = torch.rand((5, 3))
    x3 = torch.mm(x1, x2)
    r["mm"] = (x1, x2, x3, x1.mm(x2))

    matrix_exp = torch.rand(5, 5)
    r["matrix_power"] = (matrix_exp, matrix_exp.matrix_power(3))

    r["mul"] = x * y
    r["dot"] = torch.dot(x, y)

    batch = 32
    n = 10
    m = 20
    p = 30
    tensor1 = torch.rand((batch, n, m))
    tensor2 = torch.rand((batch, m, p))
    out_bmm = torch.bmm(tensor1, tensor2)
    r["bmm"] = (tensor1, tensor2, out_bmm)

    x1 = torch.rand((5, 5))
    x2 = torch.ones((1, 5))
    r["bcast"] = (x1, x1 - x2, x1**x2)

    sum_x = torch.sum(x, dim=0)
    values, indices = torch.max(x, dim=0)
    r["max"] = (values, indices)
    values, indices = torch.min(x, dim=0)
    r["min"] = (values, indices)
    abs_x = torch.abs(x)
    r["argmax"] = torch.argmax(x, dim=0)
    r["argmin"] = torch.argmin(x, dim=0)
    mean_x = torch.mean(x.float(), dim=0)
    r["eq"] = torch.eq(x, y)
    sorted_y, indices = torch.sort(y, dim=0, descending=False)
    r["sort"] = (sorted_y, indices)
    r["clamp"] = torch.clamp(x, min=0)
    r["sum"], r["abs"], r["mean"] = sum_x, abs_x, mean_x

    x = torch.tensor([1, 0, 1, 1, 1], dtype=torch.bool)
    r["any_all"] = (torch.any(x), torch.all(x))

    batch_size = 10
    features = 25
    x = torch.rand((batch_size, features))
    print(x[0].shape)
    print(x[:, 0].shape)
    print(x[2, 0:10].shape)
    x[0, 0] = 100
    r["setitem"] = x

    x = torch.arange(10)
    indices = [2, 5, 8]
    print(x[indices])

    x = torch.rand((3, 5))
    rows = torch.tensor([1, 0])
    cols = torch.tensor([4, 0])
    r["fancy"] = (x, x[rows, cols])

    x = torch.arange(10)
    print(x[(x < 2) | (x > 8)])
    print(x[x.remainder(2) == 0])

    print(torch.where(x > 5, x, x * 2))
    x = torch.tensor([0, 0, 1, 2, 2, 3, 4]).unique()
    r["unique"] = x
    print(x.ndimension())
    x = torch.arange(10)
    print(x.numel())

    x = torch.arange(9)
    x_3x3 = x.view(3, 3)
    x_3x3 = x.reshape(3, 3)
    y = x_3x3.t()
    print(y.is_contiguous())
    try:
        y.view(9)
    except RuntimeError as e:
        r["view_error"] = str(e)
    print(y.contiguous().view(9))

    x1 = torch.rand(2, 5)
    x2 = torch.rand(2, 5)
    print(torch.cat((x1, x2), dim=0).shape)
    print(torch.cat((x1, x2), dim=1).shape)

    z = x1.view(-1)
    r["flat"] = (x1, z)

    batch = 64
    x = torch.rand((batch, 2, 5))
    z = x.view(batch, -1)
    r["view_batch"] = z.shape
    z = x.permute(0, 2, 1)
    r["permute"] = (x, z)

    z = torch.chunk(x, chunks=2, dim=1)
    print(z[0].shape)
    print(z[1].shape)

    x = torch.arange(10)
    print(x.unsqueeze(0).shape)
    print(x.unsqueeze(1).shape)

    x = torch.arange(10).unsqueeze(0).unsqueeze(1)
    z = x.squeeze(1)
    r["squeeze"] = z.shape
    return r


def _np(t):
    return t.detach().cpu().numpy()


def _basics_lines(out):
    """The printed lines with the device named neutrally (the test's default device may be the
    strict stand-in)."""
    dev = str(lucid.get_default_device())
    lines = [re.sub(r",\s*device='[^']+'", "", str(o)) for o in out]
    return [ln.replace(f"is on {dev}", "is on DEVICE").replace("is on cpu", "is on DEVICE") for ln in lines]


def _torch_style(line):
    """Lucid's printing differs on purpose in two spellings (README, "Differences from PyTorch"):
    a shape prints as a tuple, a dtype as ``lucid.<name>``; this writes PyTorch's spelling."""
    line = re.sub(r"(^|\s)\((\d+(?:, \d+)*),?\)$", lambda m: f"{m.group(1)}torch.Size([{m.group(2)}])", line)
    return line.replace("lucid.", "torch.")


def test_tensorbasics_values():
    out = []
    lucid.manual_seed(0)
    r = tensorbasics_page(lucid, out)
    lines = [_torch_style(ln) for ln in _basics_lines(out)]
    assert lines[:5] == [
        "Information about tensor: tensor([[1., 2., 3.],\n        [4., 5., 6.]], requires_grad=True)",
        "Type of Tensor {my_tensor.dtype}",  # the page forgot the f
        "Device Tensor is on DEVICE",
        "Shape of tensor torch.Size([2, 3])",
        "Requires gradient: True",
    ]
    assert lines[5:11] == [
        "Converted Boolean: tensor([False,  True,  True,  True])",
        "Converted int16 tensor([0, 1, 2, 3], dtype=torch.int16)",
        "Converted int64 tensor([0, 1, 2, 3])",
        "Converted float16 tensor([0., 1., 2., 3.], dtype=torch.float16)",
        "Converted float32 tensor([0., 1., 2., 3.])",
        "Converted float64 tensor([0., 1., 2., 3.], dtype=torch.float64)",
    ]
    assert lines[11:] == [
        "torch.Size([25])", "torch.Size([10])", "torch.Size([10])",
        "tensor([2, 5, 8])",
        "tensor([0, 1, 9])", "tensor([0, 2, 4, 6, 8])",
        "tensor([ 0,  2,  4,  6,  8, 10,  6,  7,  8,  9])",
        "1", "10", "False", "tensor([0, 3, 6, 1, 4, 7, 2, 5, 8])",
        "torch.Size([4, 5])", "torch.Size([2, 10])",
        "torch.Size([64, 1, 5])", "torch.Size([64, 1, 5])",
        "torch.Size([1, 10])", "torch.Size([10, 1])",
    ]
    assert r["empty"] == (3, 3)
    np.testing.assert_array_equal(_np(r["eye"]), np.eye(5))
    np.testing.assert_array_equal(_np(r["arange"]), [0, 1, 2, 3, 4])
    np.testing.assert_allclose(_np(r["linspace"]), np.arange(1, 11) / 10, rtol=1e-6)
    assert 0 <= _np(r["rand"]).min() and _np(r["rand"]).max() < 1 and 0 <= _np(r["uniform"]).min()
    np.testing.assert_array_equal(_np(r["diag"]), np.eye(3))
    z1, z2, z = r["add"]
    assert z1.dtype == lucid.float32 and z2.dtype == lucid.int64  # out= casts the int sum
    for t in (z1, z2, z):
        np.testing.assert_array_equal(_np(t), [10, 10, 10])
    np.testing.assert_array_equal(_np(r["sub"]), [-8, -6, -4])
    np.testing.assert_allclose(_np(r["true_divide"]), [1 / 9, 2 / 8, 3 / 7], rtol=1e-6)
    assert r["true_divide"].dtype == lucid.float32
    np.testing.assert_array_equal(_np(r["inplace"]), [2.0, 4.0, 6.0])
    assert [_np(t).tolist() for t in r["pow"]] == [[1, 4, 9]] * 2
    assert _np(r["cmp"][0]).tolist() == [True] * 3 and _np(r["cmp"][1]).tolist() == [False] * 3
    x1, x2, x3, x4 = (_np(t).astype(np.float64) for t in r["mm"])
    np.testing.assert_allclose(x3, x1 @ x2, rtol=1e-6)
    np.testing.assert_array_equal(x3, x4)
    a, a3 = (_np(t).astype(np.float64) for t in r["matrix_power"])
    np.testing.assert_allclose(a3, a @ a @ a, rtol=1e-5)
    np.testing.assert_array_equal(_np(r["mul"]), [9, 16, 21])
    assert r["dot"].item() == 1 * 9 + 2 * 8 + 3 * 7
    t1, t2, tb = (_np(t).astype(np.float64) for t in r["bmm"])
    assert tb.shape == (32, 10, 30)
    np.testing.assert_allclose(tb, t1 @ t2, rtol=1e-5)
    b, bs, bp = (_np(t) for t in r["bcast"])
    np.testing.assert_allclose(bs, b - 1, rtol=1e-6)
    np.testing.assert_array_equal(bp, b)
    assert (r["max"][0].item(), r["max"][1].item(), r["min"][0].item(), r["min"][1].item()) == (3, 2, 1, 0)
    assert (r["argmax"].item(), r["argmin"].item(), r["sum"].item(), r["mean"].item()) == (2, 0, 6, 2.0)
    assert _np(r["eq"]).tolist() == [False] * 3
    assert _np(r["sort"][0]).tolist() == [7, 8, 9] and _np(r["sort"][1]).tolist() == [2, 1, 0]
    assert _np(r["clamp"]).tolist() == [1, 2, 3] and _np(r["abs"]).tolist() == [1, 2, 3]
    assert (r["any_all"][0].item(), r["any_all"][1].item()) == (True, False)
    assert r["setitem"][0, 0].item() == 100
    xf, picked = (_np(t) for t in r["fancy"])
    np.testing.assert_array_equal(picked, [xf[1, 4], xf[0, 0]])
    assert _np(r["unique"]).tolist() == [0, 1, 2, 3, 4]
    assert "view" in r["view_error"]
    x1, z = (_np(t) for t in r["flat"])
    np.testing.assert_array_equal(z, x1.reshape(-1))
    assert r["view_batch"] == (64, 10)
    x, z = (_np(t) for t in r["permute"])
    np.testing.assert_array_equal(z, x.transpose(0, 2, 1))
    assert r["squeeze"] == (1, 10)
    if "numpy_roundtrip" in r:
        assert r["numpy_roundtrip"]  # from_numpy/.numpy() share the memory


def test_tensorbasics_torch_parity():
    torch = pytest.importorskip("torch")
    lo, to = [], []
    rl, rt = tensorbasics_page(lucid, lo), tensorbasics_page(torch, to)
    assert [_torch_style(ln) for ln in _basics_lines(lo)] == [str(o).replace("is on cpu", "is on DEVICE") for o in to]
    assert rl.keys() - {"numpy_roundtrip"} == rt.keys() - {"numpy_roundtrip"}
    for k in ("add", "sub", "true_divide", "inplace", "pow", "cmp", "mul", "dot", "max", "min", "argmax",
              "argmin", "eq", "sort", "clamp", "any_all", "unique", "sum", "abs", "mean"):
        a, b = rl[k], rt[k]
        for u, v in zip(a if isinstance(a, tuple) else (a,), b if isinstance(b, tuple) else (b,)):
            assert str(u.dtype).replace("lucid", "torch") == str(v.dtype)
            np.testing.assert_allclose(_np(u), v.detach().numpy(), rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# Basics: pytorch_lr_ratescheduler.py, pytorch_mixed_precision_example.py, pytorch_loadsave.py,
# pytorch_init_weights.py, pytorch_tensorboard_.py (MNIST -> synthetic 28x28 images)
# ---------------------------------------------------------------------------------------------

def _fake_mnist(torch, n, seed=0, side=28):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 10, n)
    x = rng.uniform(0, 0.3, (n, 1, side, side)).astype(np.float32)
    for i, c in enumerate(y):  # a class-dependent bright row makes the task learnable
        x[i, 0, 2 + 2 * c] += 0.7
    return torch.utils.data.TensorDataset(torch.tensor(x), torch.tensor(y))


def lr_scheduler_page(torch, W, num_epochs=8):
    nn = torch.nn
    optim = torch.optim
    DataLoader = torch.utils.data.DataLoader
    device = torch.get_default_device()
    out = []
    num_classes = 10
    learning_rate = 0.1
    batch_size = 128

    model = nn.Sequential(nn.Linear(784, 50), nn.ReLU(), nn.Linear(50, 10)).to(device)
    model.load_state_dict({k: torch.tensor(v) for k, v in W.items()})

    train_dataset = _fake_mnist(torch, 32)
    train_loader = DataLoader(dataset=train_dataset, batch_size=batch_size, shuffle=False)

    criterion = nn.CrossEntropyLoss()
    optimizer = optim.Adam(model.parameters(), lr=learning_rate)

    # (the page's verbose=True is gone from both libraries' ReduceLROnPlateau)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.1, patience=5)

    for epoch in range(1, num_epochs):
        losses = []

        for batch_idx, (data, targets) in enumerate(train_loader):
            data = data.reshape(data.shape[0], -1)
            data = data.to(device=device)
            targets = targets.to(device=device)

            scores = model(data)
            loss = criterion(scores, targets)

            losses.append(loss.item())

            loss.backward()

            optimizer.step()
            optimizer.zero_grad()

        mean_loss = sum(losses)/len(losses)

        scheduler.step(mean_loss)
        out.append(f'Cost at epoch {epoch} is {mean_loss}')

    def check_accuracy(loader, model):
        num_correct = 0
        num_samples = 0
        model.eval()

        with torch.no_grad():
            for x, y in loader:
                x = x.to(device=device)
                y = y.to(device=device)

                scores = model(x.reshape(x.shape[0], -1))
                _, predictions = scores.max(1)
                num_correct += (predictions == y).sum()
                num_samples += predictions.size(0)

            out.append(f'Got {num_correct} / {num_samples} with accuracy {float(num_correct)/float(num_samples)*100:.2f}')

        model.train()

    check_accuracy(train_loader, model)
    return out, optimizer, scheduler


def _mlp_weights():
    rng = np.random.default_rng(8)
    return {"0.weight": (rng.normal(0, 0.03, (50, 784))).astype(np.float32), "0.bias": np.zeros(50, np.float32),
            "2.weight": (rng.normal(0, 0.1, (10, 50))).astype(np.float32), "2.bias": np.zeros(10, np.float32)}


def test_lr_scheduler_reduce_on_plateau_page():
    out, optimizer, scheduler = lr_scheduler_page(lucid, _mlp_weights())
    costs = [float(re.match(r"Cost at epoch (\d+) is (.*)$", ln).group(2)) for ln in out[:-1]]
    assert [int(re.match(r"Cost at epoch (\d+)", ln).group(1)) for ln in out[:-1]] == list(range(1, 8))
    assert costs[-1] < 0.65 * costs[0]
    m = re.match(r"Got (\d+) / 32 with accuracy (\d+\.\d\d)$", out[-1])
    assert m and float(m.group(2)) == pytest.approx(int(m.group(1)) / 32 * 100, abs=0.005)
    # ReduceLROnPlateau's rule by hand: a plateau of more than `patience` (5) epochs divides by 10
    assert optimizer.param_groups[0]["lr"] == 0.1  # the loss kept falling
    for loss in [1.0] * 13:
        scheduler.step(loss)
    # epochs 2..7 at 1.0 are not better than 1.0 (first call): 6 bad epochs > 5 -> 0.01; 6 more -> 0.001
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.1 * 0.1 * 0.1)
    assert scheduler.get_last_lr() == [pytest.approx(1e-3)]


def test_lr_scheduler_torch_parity():
    torch = pytest.importorskip("torch")
    a = lr_scheduler_page(lucid, _mlp_weights())[0]
    b = lr_scheduler_page(torch, _mlp_weights())[0]
    assert a[-1] == b[-1]
    np.testing.assert_allclose([float(x.split()[-1]) for x in a[:-1]], [float(x.split()[-1]) for x in b[:-1]], rtol=1e-5)


def mixed_precision_page(torch, W, steps=4):
    nn = torch.nn
    optim = torch.optim
    F = torch.nn.functional

    class CNN(nn.Module):
        def __init__(self, in_channels=1, num_classes=10):
            super(CNN, self).__init__()
            self.conv1 = nn.Conv2d(in_channels=1, out_channels=4, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1),)
            self.pool = nn.MaxPool2d(kernel_size=(2, 2), stride=(2, 2))
            self.conv2 = nn.Conv2d(in_channels=4, out_channels=8, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1),)
            self.fc1 = nn.Linear(8 * 7 * 7, num_classes)

        def forward(self, x):
            x = F.relu(self.conv1(x))
            x = self.pool(x)
            x = F.relu(self.conv2(x))
            x = self.pool(x)
            x = x.reshape(x.shape[0], -1)
            x = self.fc1(x)

            return x

    device = torch.get_default_device()
    learning_rate = 3e-3
    train_dataset = _fake_mnist(torch, 16, seed=2)
    train_loader = torch.utils.data.DataLoader(dataset=train_dataset, batch_size=16, shuffle=False)

    model = CNN().to(device)
    model.load_state_dict({k: torch.tensor(v) for k, v in W.items()})
    criterion = nn.CrossEntropyLoss()
    optimizer = optim.Adam(model.parameters(), lr=learning_rate)

    # Necessary for FP16 (torch.cuda.amp.GradScaler(): the default device's here)
    scaler = torch.amp.GradScaler(device.type)
    log = []
    for epoch in range(steps):
        for batch_idx, (data, targets) in enumerate(train_loader):
            data = data.to(device=device)
            targets = targets.to(device=device)

            # forward (torch.cuda.amp.autocast(): float16 on the default device here)
            with torch.autocast(device.type, dtype=torch.float16):
                scores = model(data)
                loss = criterion(scores, targets)

            before = [p.detach().clone() for p in model.parameters()]
            scale = scaler.get_scale()
            optimizer.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            moved = any(bool((p.detach() != b).any()) for p, b in zip(model.parameters(), before))
            log.append((str(scores.dtype), str(loss.dtype), loss.item(), scale, scaler.get_scale(), moved))
    return log


def _mp_weights():
    rng = np.random.default_rng(12)
    return {"conv1.weight": rng.normal(0, 0.3, (4, 1, 3, 3)).astype(np.float32), "conv1.bias": np.zeros(4, np.float32),
            "conv2.weight": rng.normal(0, 0.2, (8, 4, 3, 3)).astype(np.float32), "conv2.bias": np.zeros(8, np.float32),
            "fc1.weight": rng.normal(0, 0.05, (10, 392)).astype(np.float32), "fc1.bias": np.zeros(10, np.float32)}


def test_mixed_precision_float16_autocast_and_grad_scaler():
    log = mixed_precision_page(lucid, _mp_weights())
    # under autocast the layers run in float16 and cross-entropy in float32
    assert {(a, b) for a, b, *_ in log} == {("lucid.float16", "lucid.float32")}
    for _, _, loss, before, after, moved in log:
        # GradScaler's rule: a step with inf/nan gradients is skipped and halves the scale,
        # a finite one steps (growth only after 2000 good steps)
        if moved:
            assert after == before
        else:
            assert after == before / 2
    assert log[0][3] == 65536.0 and sum(m for *_, m in log) >= 3
    finite = [x[2] for x in log]
    assert finite[-1] < 0.9 * finite[0]


def test_mixed_precision_torch_parity():
    torch = pytest.importorskip("torch")
    a = mixed_precision_page(lucid, _mp_weights())
    b = mixed_precision_page(torch, _mp_weights())
    assert [(x[3], x[4], x[5]) for x in a] == [(x[3], x[4], x[5]) for x in b]
    np.testing.assert_allclose([x[2] for x in a], [x[2] for x in b], rtol=2e-3)


def loadsave_page(torch, path, out):
    print = out.append  # noqa: A001
    nn = torch.nn
    optim = torch.optim

    def save_checkpoint(state, filename="my_checkpoint.pth.tar"):
        print("=> Saving checkpoint")
        torch.save(state, filename)

    def load_checkpoint(checkpoint, model, optimizer):
        print("=> Loading checkpoint")
        model.load_state_dict(checkpoint["state_dict"])
        optimizer.load_state_dict(checkpoint["optimizer"])

    # torchvision.models.vgg16(weights=None) -> a small conv net of the same kinds of layers
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                          nn.Linear(4 * 2 * 2, 5))
    optimizer = optim.Adam(model.parameters())
    x = torch.randn(2, 3, 4, 4)
    model(x).sum().backward()
    optimizer.step()  # (the page saves a fresh optimizer: one step gives it state to restore)

    checkpoint = {"state_dict": model.state_dict(), "optimizer": optimizer.state_dict()}
    save_checkpoint(checkpoint, path)
    saved = {k: v.detach().clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    optimizer2 = optim.Adam(model.parameters())
    load_checkpoint(torch.load(path), model, optimizer2)
    return model, saved, optimizer, optimizer2


def test_loadsave_checkpoint(tmp_path):
    out = []
    lucid.manual_seed(0)
    model, saved, opt, opt2 = loadsave_page(lucid, str(tmp_path / "my_checkpoint.pth.tar"), out)
    assert out == ["=> Saving checkpoint", "=> Loading checkpoint"]
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(_np(v), _np(saved[k]))
    s1, s2 = opt.state_dict(), opt2.state_dict()
    assert s1["param_groups"] == s2["param_groups"] and s1["state"].keys() == s2["state"].keys() == {0, 1, 2, 3}
    for i in s1["state"]:
        assert float(s2["state"][i]["step"]) == 1.0
        np.testing.assert_array_equal(_np(s1["state"][i]["exp_avg"]), _np(s2["state"][i]["exp_avg"]))
        np.testing.assert_array_equal(_np(s1["state"][i]["exp_avg_sq"]), _np(s2["state"][i]["exp_avg_sq"]))
        # after one Adam step exp_avg = 0.1 g and exp_avg_sq = 0.001 g^2
        g = _np(s2["state"][i]["exp_avg"]) / 0.1
        np.testing.assert_allclose(_np(s2["state"][i]["exp_avg_sq"]), 0.001 * g * g, rtol=1e-4, atol=1e-12)


def test_loadsave_torch_checkpoint_read_by_lucid(tmp_path):
    torch = pytest.importorskip("torch")
    out = []
    torch.manual_seed(0)
    path = str(tmp_path / "my_checkpoint.pth.tar")
    model, saved, opt, _ = loadsave_page(torch, path, out)  # written by torch.save
    assert out == ["=> Saving checkpoint", "=> Loading checkpoint"]
    ck = lucid.load(path)
    for k, v in saved.items():
        np.testing.assert_array_equal(_np(ck["state_dict"][k]), v.numpy())
    assert ck["optimizer"]["param_groups"][0]["lr"] == 1e-3
    for i, st in opt.state_dict()["state"].items():
        np.testing.assert_array_equal(_np(ck["optimizer"]["state"][i]["exp_avg"]), st["exp_avg"].numpy())


def init_weights_page(torch):
    nn = torch.nn
    F = torch.nn.functional

    class CNN(nn.Module):
        def __init__(self, in_channels, num_classes):
            super(CNN, self).__init__()
            self.conv1 = nn.Conv2d(in_channels=in_channels, out_channels=6, kernel_size=(3,3), stride=(1,1), padding=(1,1))
            self.pool = nn.MaxPool2d(kernel_size=(2,2), stride = (2,2))
            self.conv2 = nn.Conv2d(in_channels=6, out_channels=16, kernel_size=(3,3), stride=(1,1), padding=(1,1))
            self.fc1 = nn.Linear(16*7*7, num_classes)
            self.initialize_weights()

        def forward(self, x):
            x = F.relu(self.conv1(x))
            x = self.pool(x)
            x = F.relu(self.conv2(x))
            x = self.pool(x)
            x = x.reshape(x.shape[0], -1)
            x = self.fc1(x)

            return x

        def initialize_weights(self):
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_uniform_(m.weight)

                    if m.bias is not None:
                        nn.init.constant_(m.bias, 0)

                elif isinstance(m, nn.BatchNorm2d):
                    nn.init.constant_(m.weight, 1)
                    nn.init.constant_(m.bias, 0)

                elif isinstance(m, nn.Linear):
                    nn.init.kaiming_uniform_(m.weight)
                    nn.init.constant_(m.bias, 0)

    return CNN


def test_init_weights_kaiming_uniform():
    CNN = init_weights_page(lucid)
    lucid.manual_seed(0)
    model = CNN(in_channels=3, num_classes=10)
    # kaiming_uniform_ (a=0, fan_in, leaky_relu gain sqrt(2)): U(-b, b), b = sqrt(6 / fan_in)
    for m, fan_in in ((model.conv1, 27), (model.conv2, 54), (model.fc1, 784)):
        w = _np(m.weight).astype(np.float64)
        b = math.sqrt(6 / fan_in)
        assert np.abs(w).max() <= b and np.abs(w).max() > 0.9 * b
        assert w.std() == pytest.approx(b / math.sqrt(3), rel=0.12)  # a uniform's std
        assert np.all(_np(m.bias) == 0)
    assert tuple(model(lucid.zeros(2, 3, 28, 28)).shape) == (2, 10)
    np.testing.assert_array_equal(_np(model(lucid.zeros(2, 3, 28, 28))), 0.0)  # zero biases, zero input


def tensorboard_page(torch, SummaryWriter, root, W):
    nn = torch.nn
    optim = torch.optim
    F = torch.nn.functional
    DataLoader = torch.utils.data.DataLoader

    class CNN(nn.Module):
        def __init__(self, in_channels = 1, num_classes = 10):
            super(CNN, self).__init__()
            self.conv1 = nn.Conv2d(in_channels=in_channels, out_channels=8, kernel_size=3, stride=1, padding=1)
            self.pool = nn.MaxPool2d(kernel_size=(2,2), stride = (2,2))
            self.conv2 = nn.Conv2d(in_channels=8, out_channels=16, kernel_size=3, stride=1, padding=1)
            self.fc1 = nn.Linear(16*7*7, num_classes)

        def forward(self, x):
            x = F.relu(self.conv1(x))
            x = self.pool(x)
            x = F.relu(self.conv2(x))
            x = self.pool(x)
            x = x.reshape(x.shape[0], -1)
            x = self.fc1(x)
            return x

    device = torch.get_default_device()
    in_channels = 1
    num_classes = 10
    num_epochs = 1
    train_dataset = _fake_mnist(torch, 12, seed=4)
    batch_sizes = [4]
    learning_rates = [0.001]
    classes = ['0', '1', '2', '3', '4', '5', '6', '7', '8', '9']
    record = []

    for batch_size in batch_sizes:
        for learning_rate in learning_rates:
            step = 0
            model = CNN(in_channels=in_channels,num_classes=num_classes)
            model.load_state_dict({k: torch.tensor(v) for k, v in W.items()})
            model.to(device)
            model.train()
            criterion = nn.CrossEntropyLoss()
            train_loader = DataLoader(dataset=train_dataset, batch_size=batch_size, shuffle=False)
            optimizer = optim.Adam(model.parameters(), lr=learning_rate, weight_decay=0.0)
            writer = SummaryWriter(f'{root}/runs/MNIST/MiniBatchSize {batch_size} LR {learning_rate}')

            for epoch in range(num_epochs):
                losses = []
                accuracies = []

                for batch_idx, (data, targets) in enumerate(train_loader):
                    data = data.to(device=device)
                    targets = targets.to(device=device)

                    scores = model(data)
                    loss = criterion(scores, targets)
                    losses.append(loss.item())

                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()

                    features = data.reshape(data.shape[0], -1)  # noqa: F841
                    _, predictions = scores.max(1)
                    num_correct = (predictions == targets).sum()
                    running_train_acc = float(num_correct)/float(data.shape[0])
                    accuracies.append(running_train_acc)

                    class_labels = [classes[label] for label in predictions]
                    writer.add_histogram('fc1', model.fc1.weight)
                    writer.add_scalar('Training loss', loss, global_step=step)
                    writer.add_scalar('Training Accuracy', running_train_acc, global_step=step)
                    record.append((loss.item(), running_train_acc, _np(model.fc1.weight).copy(), class_labels))
                    step += 1

                writer.add_hparams({'lr': learning_rate, 'bsize': batch_size},
                       {'accuracy': sum(accuracies)/len(accuracies),
                        'loss': sum(losses)/len(losses)})
            writer.close()
    return record


def _tb_weights():
    rng = np.random.default_rng(21)
    return {"conv1.weight": rng.normal(0, 0.3, (8, 1, 3, 3)).astype(np.float32), "conv1.bias": np.zeros(8, np.float32),
            "conv2.weight": rng.normal(0, 0.15, (16, 8, 3, 3)).astype(np.float32), "conv2.bias": np.zeros(16, np.float32),
            "fc1.weight": rng.normal(0, 0.05, (10, 784)).astype(np.float32), "fc1.bias": np.zeros(10, np.float32)}


def _tb_reader():
    import importlib.util
    import os
    path = os.path.join(os.path.dirname(__file__), "..", "data", "test_tensorboard.py")
    spec = importlib.util.spec_from_file_location("_tb_reader_for_batch14", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tensorboard_page_event_files(tmp_path):
    from lucid.utils.tensorboard import SummaryWriter
    reader = _tb_reader()
    record = tensorboard_page(lucid, SummaryWriter, str(tmp_path), _tb_weights())
    assert len(record) == 3 and all(len(r[3]) == 4 and set(r[3]) <= set("0123456789") for r in record)
    run = tmp_path / "runs" / "MNIST" / "MiniBatchSize 4 LR 0.001"
    scalars, histos = {}, {}
    for event in reader.read_events(run):
        step = event.int(2) if 2 in event else 0  # protobuf leaves a zero step out
        for tag, value in reader.values(event):
            if 2 in value:
                scalars[tag, step] = value.float(2)
            elif 5 in value:  # the page gives add_histogram no step: all at 0, in order
                h = value.msg(5)
                histos.setdefault(tag, []).append((step, [h.double(k) if k in h else 0.0 for k in (1, 2, 3, 4, 5)]))
    assert [st for st, _ in histos["fc1"]] == [0, 0, 0]
    for step, (loss, acc, w, _) in enumerate(record):
        assert scalars["Training loss", step] == pytest.approx(loss, rel=1e-6)
        assert scalars["Training Accuracy", step] == pytest.approx(acc) and acc * 4 == round(acc * 4)
        w = w.astype(np.float64)
        np.testing.assert_allclose(histos["fc1"][step][1], [w.min(), w.max(), w.size, w.sum(), (w ** 2).sum()],
                                   rtol=1e-5, atol=1e-6)
    # add_hparams writes a sub-run (named by the time) holding the two metrics
    metrics = {}
    for sub in run.iterdir():
        if sub.is_dir():
            for event in reader.read_events(sub):
                for tag, value in reader.values(event):
                    if 2 in value:
                        metrics[tag] = value.float(2)
    assert metrics["loss"] == pytest.approx(sum(r[0] for r in record) / 3, rel=1e-6)
    assert metrics["accuracy"] == pytest.approx(sum(r[1] for r in record) / 3, rel=1e-6)


# ---------------------------------------------------------------------------------------------
# GANs/ProGAN/utils.py: gradient_penalty (double backward), seed_everything
# ---------------------------------------------------------------------------------------------

def progan_utils_page(torch):
    import os
    import random

    def gradient_penalty(critic, real, fake, alpha, train_step, device="cpu"):
        BATCH_SIZE, C, H, W = real.shape
        beta = torch.rand((BATCH_SIZE, 1, 1, 1)).repeat(1, C, H, W).to(device)
        interpolated_images = real * beta + fake.detach() * (1 - beta)
        interpolated_images.requires_grad_(True)

        mixed_scores = critic(interpolated_images, alpha, train_step)

        # `inputs=[...]`: Lucid's autograd.grad returns the gradient itself for a bare tensor
        # input (README "Differences from PyTorch", seed 004), where `[0]` would take its first row
        gradient = torch.autograd.grad(
            inputs=[interpolated_images],
            outputs=mixed_scores,
            grad_outputs=torch.ones_like(mixed_scores),
            create_graph=True,
            retain_graph=True,
        )[0]
        gradient = gradient.view(gradient.shape[0], -1)
        gradient_norm = gradient.norm(2, dim=1)
        gradient_penalty = torch.mean((gradient_norm - 1) ** 2)
        return gradient_penalty

    def seed_everything(seed=42):
        os.environ['PYTHONHASHSEED'] = str(seed)
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)
        torch.cuda.manual_seed(seed)
        torch.cuda.manual_seed_all(seed)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False

    return gradient_penalty, seed_everything


def test_progan_gradient_penalty_closed_form_and_double_backward(monkeypatch):
    import random
    gradient_penalty, seed_everything = progan_utils_page(lucid)
    # seed_everything changes process-wide state: restored after the test
    monkeypatch.setattr(lucid.backends.cudnn, "deterministic", lucid.backends.cudnn.deterministic)
    monkeypatch.setattr(lucid.backends.cudnn, "benchmark", lucid.backends.cudnn.benchmark)
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    py_state, np_state = random.getstate(), np.random.get_state()
    try:
        seed_everything(42)
        a = lucid.rand(3)
        seed_everything(42)
        assert lucid.rand(3).tolist() == a.tolist() and lucid.backends.cudnn.deterministic is True
        assert os.environ["PYTHONHASHSEED"] == "42" and np.random.rand() == np.random.RandomState(42).rand()
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)
    dev = lucid.get_default_device()
    # a linear critic: its input gradient is w for every example, the penalty (|w| - 1)^2,
    # and the penalty's gradient in w is 2 (|w| - 1) w / |w| (through create_graph=True)
    w = lucid.tensor(np.random.default_rng(0).normal(0, 0.4, (2, 3, 3)), requires_grad=True)
    critic = lambda x, alpha, step: (x * w).sum((1, 2, 3))  # noqa: E731
    real = lucid.tensor(np.random.default_rng(1).normal(size=(4, 2, 3, 3)))
    fake = lucid.tensor(np.random.default_rng(2).normal(size=(4, 2, 3, 3)), requires_grad=True)
    gp = gradient_penalty(critic, real, fake, 0.5, 0, device=dev)
    wn = _np(w)
    n = np.linalg.norm(wn)
    assert gp.item() == pytest.approx((n - 1) ** 2, rel=1e-12)
    gp.backward()
    np.testing.assert_allclose(_np(w.grad), 2 * (n - 1) * wn / n, rtol=1e-10)
    assert fake.grad is None  # fake.detach(): no gradient to the generator
    # the ProGAN critic (float64, step 1): the penalty's parameter gradient against central
    # differences along a random direction, the same beta drawn each time (seeded)
    _, _, Generator, Discriminator = progan_page(lucid)
    lucid.manual_seed(0)
    D = Discriminator(32, img_channels=3).double()
    real = lucid.tensor(np.random.default_rng(3).normal(size=(2, 3, 8, 8)))
    fake = lucid.tensor(np.random.default_rng(4).normal(size=(2, 3, 8, 8)))
    params = [p for p in D.parameters()]

    def penalty():
        lucid.manual_seed(7)
        return gradient_penalty(D, real, fake, 0.3, 1, device=dev)

    gp = penalty()
    gp.backward()
    used = [p for p in params if p.grad is not None]
    assert len(used) > 6
    rng = np.random.default_rng(5)
    vs = [rng.normal(size=tuple(p.shape)) for p in used]
    analytic = sum(float((_np(p.grad) * v).sum()) for p, v in zip(used, vs))
    h = 1e-5

    def shifted(sign):
        with lucid.no_grad():
            for p, v in zip(used, vs):
                p.add_(lucid.tensor(sign * h * v))
        val = penalty().item()
        with lucid.no_grad():
            for p, v in zip(used, vs):
                p.sub_(lucid.tensor(sign * h * v))
        return val

    fd = (shifted(1) - shifted(-1)) / (2 * h)
    assert analytic == pytest.approx(fd, rel=1e-5)


def test_progan_gradient_penalty_torch_parity():
    torch = pytest.importorskip("torch")
    beta = np.random.default_rng(6).uniform(size=(2, 1, 1, 1))

    class _FixedRand:  # the same beta on both sides (the libraries' streams differ)
        def __init__(self, mod):
            self._m = mod

        def __getattr__(self, name):
            return getattr(self._m, name)

        def rand(self, *shape):
            return self._m.tensor(beta)

    # float64: in float32 the penalty's parameter gradients of this critic (2 examples, minibatch
    # std) are ill-conditioned; both libraries then stray from the float64 values by up to ~20%
    lucid.manual_seed(0)
    D = progan_page(lucid)[3](32).double()
    Dt = progan_page(torch)[3](32).double()
    _copy_state(D, Dt, torch)
    real = np.random.default_rng(3).normal(size=(2, 3, 8, 8))
    fake = np.random.default_rng(4).normal(size=(2, 3, 8, 8))
    out = []
    for m, critic in ((lucid, D), (torch, Dt)):
        gp_fn = progan_utils_page(_FixedRand(m))[0]
        gp = gp_fn(critic, m.tensor(real), m.tensor(fake), 0.3, 1, device=m.get_default_device())
        gp.backward()
        out.append((gp.item(), {n: p.grad.detach().numpy() for n, p in critic.named_parameters() if p.grad is not None}))
    assert out[0][0] == pytest.approx(out[1][0], rel=1e-12)
    for name, g in out[1][1].items():
        if name in out[0][1]:
            np.testing.assert_allclose(out[0][1][name], g, rtol=1e-9, atol=1e-15)
        else:  # PyTorch materialises zeros where no path carries a gradient; Lucid leaves None
            assert name.endswith("bias") and not g.any()


# ---------------------------------------------------------------------------------------------
# object_detection/YOLO/dataset.py: VOCDataset's cell encoding (pandas/PIL replaced)
# ---------------------------------------------------------------------------------------------

def voc_dataset_page(torch):
    import os

    class _Annotations:  # pd.read_csv(csv_file) of the (image, label) file names
        def __init__(self, csv_file):
            with open(csv_file) as f:
                self.rows = [line.strip().split(",") for line in f.readlines()[1:]]

        def __len__(self):
            return len(self.rows)

        @property
        def iloc(self):
            return type("ILoc", (), {"__getitem__": lambda _, ij: self.rows[ij[0]][ij[1]]})()

    class VOCDataset(torch.utils.data.Dataset):
        def __init__(
            self, csv_file, img_dir, label_dir, S=7, B=2, C=20, transform=None,
        ):
            self.annotations = _Annotations(csv_file)
            self.img_dir = img_dir
            self.label_dir = label_dir
            self.transform = transform
            self.S = S
            self.B = B
            self.C = C

        def __len__(self):
            return len(self.annotations)

        def __getitem__(self, index):
            label_path = os.path.join(self.label_dir, self.annotations.iloc[index, 1])
            boxes = []
            with open(label_path) as f:
                for label in f.readlines():
                    class_label, x, y, width, height = [
                        float(x) if float(x) != int(float(x)) else int(x)
                        for x in label.replace("\n", "").split()
                    ]

                    boxes.append([class_label, x, y, width, height])

            img_path = os.path.join(self.img_dir, self.annotations.iloc[index, 0])  # noqa: F841
            image = torch.zeros(3, 8, 8)  # Image.open(img_path)
            boxes = torch.tensor(boxes)

            if self.transform:
                image, boxes = self.transform(image, boxes)

            label_matrix = torch.zeros((self.S, self.S, self.C + 5 * self.B))
            for box in boxes:
                class_label, x, y, width, height = box.tolist()
                class_label = int(class_label)

                i, j = int(self.S * y), int(self.S * x)
                x_cell, y_cell = self.S * x - j, self.S * y - i

                width_cell, height_cell = (
                    width * self.S,
                    height * self.S,
                )

                if label_matrix[i, j, 20] == 0:
                    label_matrix[i, j, 20] = 1

                    box_coordinates = torch.tensor(
                        [x_cell, y_cell, width_cell, height_cell]
                    )

                    label_matrix[i, j, 21:25] = box_coordinates

                    label_matrix[i, j, class_label] = 1

            return image, label_matrix

    return VOCDataset


def _voc_files(tmp_path):
    (tmp_path / "labels").mkdir()
    (tmp_path / "labels" / "000001.txt").write_text("3 0.5 0.3 0.2 0.1\n11 0.52 0.31 0.4 0.4\n0 0.05 0.95 0.1 0.1\n")
    (tmp_path / "labels" / "000002.txt").write_text("7 0.999 0.001 0.002 0.5\n")
    (tmp_path / "train.csv").write_text("image,text\n000001.jpg,000001.txt\n000002.jpg,000002.txt\n")


def test_yolo_voc_dataset_cells_and_a_perfect_prediction(tmp_path):
    _voc_files(tmp_path)
    VOCDataset = voc_dataset_page(lucid)
    ds = VOCDataset(str(tmp_path / "train.csv"), str(tmp_path), str(tmp_path / "labels"))
    loader = lucid.utils.data.DataLoader(ds, batch_size=2)
    _, labels = next(iter(loader))
    lab = _np(labels).astype(np.float64)
    assert lab.shape == (2, 7, 7, 30)
    # box (0.5, 0.3): row int(7 * 0.3) = 2, column int(3.5) = 3, offsets (0.5, 0.1), size 7 * (0.2, 0.1)
    np.testing.assert_allclose(lab[0, 2, 3, 20:25], [1, 0.5, 7 * 0.3 - 2, 1.4, 0.7], rtol=1e-6, atol=1e-6)
    assert lab[0, 2, 3, 3] == 1 and lab[0, 2, 3, 11] == 0  # the second box in that cell is dropped
    np.testing.assert_allclose(lab[0, 6, 0, 20:25], [1, 0.35, 7 * 0.95 - 6, 0.7, 0.7], rtol=1e-5, atol=1e-6)
    assert lab[0, 6, 0, 0] == 1 and lab[0, ..., 20].sum() == 2
    np.testing.assert_allclose(lab[1, 0, 6, 20:25], [1, 7 * 0.999 - 6, 0.007, 0.014, 3.5], rtol=1e-5, atol=1e-6)
    # a prediction equal to the target in both boxes: IoU 1, the loss is only the 1e-6 terms
    iou = yolo_utils_page(lucid)[0]
    YoloLoss, _ = yolo_v1_page(lucid, iou)
    pred = labels.clone()
    pred[..., 25:30] = labels[..., 20:25]
    loss = YoloLoss()(pred.reshape(2, -1).double(), labels.double()).item()
    assert 0 <= loss < 1e-4


class _ClassDataset:
    def __init__(self, labels):
        self.labels = labels

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return np.zeros(1, np.float32), int(self.labels[i])


def imbalanced_page(torch, counts):
    WeightedRandomSampler, DataLoader = torch.utils.data.WeightedRandomSampler, torch.utils.data.DataLoader

    def get_loader(root_dir, batch_size):
        # datasets.ImageFolder(root=root_dir, ...) -> labels 0 and 1, `counts` of each
        dataset = _ClassDataset([c for c, k in enumerate(counts) for _ in range(k)])
        subdirectories = ["golden_retriever", "swedish_elkhound"]
        class_weights = []

        for subdir in subdirectories:
            files = range(counts[subdirectories.index(subdir)])  # os.listdir(...)
            class_weights.append(1 / len(files))

        sample_weights = [0] * len(dataset)

        for idx, (data, label) in enumerate(dataset):
            class_weight = class_weights[label]
            sample_weights[idx] = class_weight

        sampler = WeightedRandomSampler(
            sample_weights, num_samples=len(sample_weights), replacement=True
        )

        loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler)
        return loader

    loader = get_loader(root_dir="dataset", batch_size=8)

    num_retrievers = 0
    num_elkhounds = 0
    for epoch in range(10):
        for data, labels in loader:
            num_retrievers += torch.sum(labels == 0)
            num_elkhounds += torch.sum(labels == 1)

    return num_retrievers.item(), num_elkhounds.item()


def test_imbalanced_classes_weighted_sampler():
    lucid.manual_seed(0)
    r, e = imbalanced_page(lucid, (45, 5))
    assert r + e == 500  # 10 epochs of len(dataset) draws
    # weights 1/45 and 1/5 make both classes equally likely: Binomial(500, 1/2), sd 11.2
    assert abs(e - 250) < 56
    lucid.manual_seed(0)
    assert imbalanced_page(lucid, (45, 5)) == (r, e)  # the generator's seed decides the draws


# ---------------------------------------------------------------------------------------------
# more_advanced/seq2seq_transformer/seq2seq_transformer.py: nn.Transformer with a key padding
# mask and generate_square_subsequent_mask (Multi30k replaced by toy sequences)
# ---------------------------------------------------------------------------------------------

def seq2seq_transformer_page(torch, device):
    nn = torch.nn

    class Transformer(nn.Module):
        def __init__(
            self,
            embedding_size,
            src_vocab_size,
            trg_vocab_size,
            src_pad_idx,
            num_heads,
            num_encoder_layers,
            num_decoder_layers,
            forward_expansion,
            dropout,
            max_len,
            device,
        ):
            super(Transformer, self).__init__()
            self.src_word_embedding = nn.Embedding(src_vocab_size, embedding_size)
            self.src_position_embedding = nn.Embedding(max_len, embedding_size)
            self.trg_word_embedding = nn.Embedding(trg_vocab_size, embedding_size)
            self.trg_position_embedding = nn.Embedding(max_len, embedding_size)

            self.device = device
            self.transformer = nn.Transformer(
                embedding_size,
                num_heads,
                num_encoder_layers,
                num_decoder_layers,
                forward_expansion,
                dropout,
            )
            self.fc_out = nn.Linear(embedding_size, trg_vocab_size)
            self.dropout = nn.Dropout(dropout)
            self.src_pad_idx = src_pad_idx

        def make_src_mask(self, src):
            src_mask = src.transpose(0, 1) == self.src_pad_idx

            # (N, src_len)
            return src_mask.to(self.device)

        def make_trg_mask(self, trg):
            trg_len, N = trg.shape

            trg_mask = torch.tril(torch.ones((trg_len, trg_len)))
            trg_mask = (
                trg_mask.float()
                .masked_fill(trg_mask == 0, float("-inf"))
                .masked_fill(trg_mask == 1, float(0.0))
            )
            return trg_mask.to(device)

        def forward(self, src, trg):
            src_seq_length, N = src.shape
            trg_seq_length, N = trg.shape

            src_positions = (
                torch.arange(0, src_seq_length)
                .unsqueeze(1)
                .expand(src_seq_length, N)
                .to(self.device)
            )

            trg_positions = (
                torch.arange(0, trg_seq_length)
                .unsqueeze(1)
                .expand(trg_seq_length, N)
                .to(self.device)
            )

            embed_src = self.dropout(
                (self.src_word_embedding(src) + self.src_position_embedding(src_positions))
            )
            embed_trg = self.dropout(
                (self.trg_word_embedding(trg) + self.trg_position_embedding(trg_positions))
            )

            src_padding_mask = self.make_src_mask(src)
            trg_mask = self.transformer.generate_square_subsequent_mask(trg_seq_length).to(
                self.device
            )

            out = self.transformer(
                embed_src,
                embed_trg,
                src_key_padding_mask=src_padding_mask,
                tgt_mask=trg_mask,
            )
            out = self.fc_out(out)
            return out

    def make(dropout=0.0):
        # embedding_size 512, 8 heads, 3 + 3 layers in the page; forward_expansion (4) is passed
        # where nn.Transformer takes dim_feedforward, as the page does
        return Transformer(16, 11, 11, 0, 2, 2, 2, 4, dropout, 20, device).to(device)

    return make


def _s2s_batch(torch):
    rng = np.random.default_rng(9)
    src = rng.integers(3, 11, (6, 4))  # (src_len, N)
    src[4:, 1] = 0  # the second sentence is two tokens shorter: padded
    trg = np.concatenate([np.ones((1, 4), np.int64), src[::-1] % 8 + 3, np.full((1, 4), 2)], 0)
    return torch.tensor(src), torch.tensor(trg)


def test_seq2seq_transformer_masks_and_training():
    dev = lucid.get_default_device()
    make = seq2seq_transformer_page(lucid, dev)
    lucid.manual_seed(0)
    model = make()
    src, trg = _s2s_batch(lucid)
    out = model(src, trg[:-1, :])
    assert tuple(out.shape) == (7, 4, 11)
    m = model.transformer.generate_square_subsequent_mask(3)
    np.testing.assert_array_equal(_np(m), [[0, -np.inf, -np.inf], [0, 0, -np.inf], [0, 0, 0]])
    np.testing.assert_array_equal(_np(model.make_trg_mask(trg[:3])), _np(m))  # the page's own version
    with lucid.no_grad():
        # causal: the last target token changes only the last position
        t2 = trg[:-1, :].clone()
        t2[-1] = 5
        o2 = model(src, t2)
        np.testing.assert_allclose(_np(o2[:-1]), _np(out[:-1]), rtol=1e-5, atol=1e-6)
        assert np.abs(_np(o2[-1]) - _np(out[-1])).max() > 1e-4
        # the encoder ignores pad keys: the padded sentence's memory at its 4 tokens is the memory
        # of the sentence alone ...
        def memory(s):
            pos = lucid.arange(0, s.shape[0]).unsqueeze(1).expand(s.shape[0], s.shape[1])
            emb = model.src_word_embedding(s) + model.src_position_embedding(pos)
            return model.transformer.encoder(emb, src_key_padding_mask=model.make_src_mask(s))
        np.testing.assert_allclose(_np(memory(src[:4, 1:2])[:, 0]), _np(memory(src)[:4, 1]), rtol=1e-4, atol=1e-5)
        # ... but the decoder attends to the pads' memory too (the page passes no
        # memory_key_padding_mask), so the two outputs differ
        o3 = model(src[:4, 1:2], trg[:-1, 1:2])
        assert np.abs(_np(o3[:, 0]) - _np(out[:, 1])).max() > 1e-3
    opt = lucid.optim.Adam(model.parameters(), lr=1e-2)
    criterion = lucid.nn.CrossEntropyLoss(ignore_index=0)
    losses = []
    for _ in range(12):
        output = model(src, trg[:-1, :])
        output = output.reshape(-1, output.shape[2])
        target = trg[1:].reshape(-1)
        opt.zero_grad()
        loss = criterion(output, target)
        losses.append(loss.item())
        loss.backward()
        lucid.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1)
        opt.step()
    assert losses[-1] < 0.6 * losses[0]


def test_seq2seq_transformer_torch_parity():
    torch = pytest.importorskip("torch")
    lucid.manual_seed(0)
    a = seq2seq_transformer_page(lucid, lucid.get_default_device())()
    b = seq2seq_transformer_page(torch, "cpu")()
    assert list(a.state_dict()) == list(b.state_dict())
    _copy_state(a, b, torch)
    res = []
    for m, model in ((lucid, a), (torch, b)):
        src, trg = _s2s_batch(m)
        out = model(src, trg[:-1, :])
        out.square().mean().backward()
        res.append([out.detach().numpy()] + [p.grad.numpy() for p in model.parameters()])
    for u, v in zip(*res):
        np.testing.assert_allclose(u, v, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# GANs/StyleGAN/model.py: mapping network, WSLinear, AdaIN, InjectNoise, progressive generator
# ---------------------------------------------------------------------------------------------

def stylegan_page(torch):
    nn = torch.nn
    F = torch.nn.functional

    factors = [1, 1, 1, 1, 1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32]

    class PixelNorm(nn.Module):
        def __init__(self):
            super(PixelNorm, self).__init__()
            self.epsilon = 1e-8

        def forward(self, x):
            return x / torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + self.epsilon)

    class MappingNetwork(nn.Module):
        def __init__(self, z_dim, w_dim):
            super().__init__()
            self.mapping = nn.Sequential(
                PixelNorm(),
                WSLinear(z_dim, w_dim),
                nn.ReLU(),
                WSLinear(w_dim, w_dim),
                nn.ReLU(),
                WSLinear(w_dim, w_dim),
                nn.ReLU(),
                WSLinear(w_dim, w_dim),
                nn.ReLU(),
                WSLinear(w_dim, w_dim),
                nn.ReLU(),
                WSLinear(w_dim, w_dim),
                nn.ReLU(),
                WSLinear(w_dim, w_dim),
                nn.ReLU(),
                WSLinear(w_dim, w_dim),
            )

        def forward(self, x):
            return self.mapping(x)

    class InjectNoise(nn.Module):
        def __init__(self, channels):
            super().__init__()
            self.weight = nn.Parameter(torch.zeros(1, channels, 1, 1))

        def forward(self, x):
            noise = torch.randn((x.shape[0], 1, x.shape[2], x.shape[3]), device=x.device)
            return x + self.weight * noise

    class AdaIN(nn.Module):
        def __init__(self, channels, w_dim):
            super().__init__()
            self.instance_norm = nn.InstanceNorm2d(channels)
            self.style_scale = WSLinear(w_dim, channels)
            self.style_bias = WSLinear(w_dim, channels)

        def forward(self, x, w):
            x = self.instance_norm(x)
            style_scale = self.style_scale(w).unsqueeze(2).unsqueeze(3)
            style_bias = self.style_bias(w).unsqueeze(2).unsqueeze(3)
            return style_scale * x + style_bias

    class WSConv2d(nn.Module):
        def __init__(
            self, in_channels, out_channels, kernel_size=3, stride=1, padding=1, gain=2,
        ):
            super(WSConv2d, self).__init__()
            self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding)
            self.scale = (gain / (in_channels * (kernel_size ** 2))) ** 0.5
            self.bias = self.conv.bias
            self.conv.bias = None

            nn.init.normal_(self.conv.weight)
            nn.init.zeros_(self.bias)

        def forward(self, x):
            return self.conv(x * self.scale) + self.bias.view(1, self.bias.shape[0], 1, 1)

    class WSLinear(nn.Module):
        def __init__(
            self, in_features, out_features, gain=2,
        ):
            super(WSLinear, self).__init__()
            self.linear = nn.Linear(in_features, out_features)
            self.scale = (gain / in_features)**0.5
            self.bias = self.linear.bias
            self.linear.bias = None

            nn.init.normal_(self.linear.weight)
            nn.init.zeros_(self.bias)

        def forward(self, x):
            return self.linear(x * self.scale) + self.bias

    class GenBlock(nn.Module):
        def __init__(self, in_channels, out_channels, w_dim):
            super(GenBlock, self).__init__()
            self.conv1 = WSConv2d(in_channels, out_channels)
            self.conv2 = WSConv2d(out_channels, out_channels)
            self.leaky = nn.LeakyReLU(0.2, inplace=True)
            self.inject_noise1 = InjectNoise(out_channels)
            self.inject_noise2 = InjectNoise(out_channels)
            self.adain1 = AdaIN(out_channels, w_dim)
            self.adain2 = AdaIN(out_channels, w_dim)

        def forward(self, x, w):
            x = self.adain1(self.leaky(self.inject_noise1(self.conv1(x))), w)
            x = self.adain2(self.leaky(self.inject_noise2(self.conv2(x))), w)
            return x

    class Generator(nn.Module):
        def __init__(self, z_dim, w_dim, in_channels, img_channels=3):
            super(Generator, self).__init__()
            self.starting_constant = nn.Parameter(torch.ones((1, in_channels, 4, 4)))
            self.map = MappingNetwork(z_dim, w_dim)
            self.initial_adain1 = AdaIN(in_channels, w_dim)
            self.initial_adain2 = AdaIN(in_channels, w_dim)
            self.initial_noise1 = InjectNoise(in_channels)
            self.initial_noise2 = InjectNoise(in_channels)
            self.initial_conv = nn.Conv2d(in_channels, in_channels, kernel_size=3, stride=1, padding=1)
            self.leaky = nn.LeakyReLU(0.2, inplace=True)

            self.initial_rgb = WSConv2d(
                in_channels, img_channels, kernel_size=1, stride=1, padding=0
            )
            self.prog_blocks, self.rgb_layers = (
                nn.ModuleList([]),
                nn.ModuleList([self.initial_rgb]),
            )

            for i in range(len(factors) - 1):  # -1 to prevent index error because of factors[i+1]
                conv_in_c = int(in_channels * factors[i])
                conv_out_c = int(in_channels * factors[i + 1])
                self.prog_blocks.append(GenBlock(conv_in_c, conv_out_c, w_dim))
                self.rgb_layers.append(
                    WSConv2d(conv_out_c, img_channels, kernel_size=1, stride=1, padding=0)
                )

        def fade_in(self, alpha, upscaled, generated):
            return torch.tanh(alpha * generated + (1 - alpha) * upscaled)

        def forward(self, noise, alpha, steps):
            w = self.map(noise)
            x = self.initial_adain1(self.initial_noise1(self.starting_constant), w)
            x = self.initial_conv(x)
            out = self.initial_adain2(self.leaky(self.initial_noise2(x)), w)

            if steps == 0:
                return self.initial_rgb(x)

            for step in range(steps):
                upscaled = F.interpolate(out, scale_factor=2, mode="bilinear")
                out = self.prog_blocks[step](upscaled, w)

            final_upscaled = self.rgb_layers[steps - 1](upscaled)
            final_out = self.rgb_layers[steps](out)
            return self.fade_in(alpha, final_upscaled, final_out)

    return WSLinear, AdaIN, InjectNoise, Generator


def test_stylegan_pieces_closed_forms():
    WSLinear, AdaIN, InjectNoise, Generator = stylegan_page(lucid)
    lucid.manual_seed(0)
    lin = WSLinear(6, 4).double()
    with lucid.no_grad():
        lin.bias.copy_(lucid.tensor([1.0, -1.0, 0.5, 0.0]))
    x = np.random.default_rng(0).normal(size=(3, 6))
    W = _np(lin.linear.weight)
    np.testing.assert_allclose(_np(lin(lucid.tensor(x))), (x * math.sqrt(2 / 6)) @ W.T + [1.0, -1.0, 0.5, 0.0], rtol=1e-12)
    # AdaIN: per-example, per-channel standardisation (biased variance, eps 1e-5), then the style
    ada = AdaIN(3, 6).double()
    h = np.random.default_rng(1).normal(2, 3, (3, 3, 4, 4))
    norm = (h - h.mean((2, 3), keepdims=True)) / np.sqrt(h.var((2, 3), keepdims=True) + 1e-5)
    ws = lambda m: (x * math.sqrt(2 / 6)) @ _np(m.linear.weight).T + _np(m.bias)  # noqa: E731
    ref = ws(ada.style_scale)[:, :, None, None] * norm + ws(ada.style_bias)[:, :, None, None]
    np.testing.assert_allclose(_np(ada(lucid.tensor(h), lucid.tensor(x))), ref, rtol=1e-10, atol=1e-12)
    # InjectNoise: zero-initialised weight (identity); with a weight, one noise map shared by channels
    inj = InjectNoise(3).double()
    assert np.all(_np(inj(lucid.tensor(h))) == h)
    with lucid.no_grad():
        inj.weight.copy_(lucid.tensor([1.0, 2.0, -3.0]).reshape(1, 3, 1, 1))
    d = (_np(inj(lucid.tensor(h))) - h) / np.array([1.0, 2.0, -3.0])[None, :, None, None]
    np.testing.assert_allclose(d[:, 1], d[:, 0], rtol=1e-12)
    np.testing.assert_allclose(d[:, 2], d[:, 0], rtol=1e-12)
    assert np.abs(d[0, 0] - d[1, 0]).max() > 0  # fresh noise per example


def test_stylegan_generator_steps():
    _, _, _, Generator = stylegan_page(lucid)
    lucid.manual_seed(0)
    gen = Generator(8, 8, 32, img_channels=3)
    assert sum(isinstance(m, lucid.nn.InstanceNorm2d) for m in gen.modules()) == 2 + 2 * 8
    x = lucid.randn((2, 8))
    for img_size in (4, 8, 16):
        num_steps = int(math.log2(img_size / 4))
        z = gen(x, 0.5, steps=num_steps)
        assert z.shape == (2, 3, img_size, img_size)
    # bilinear x2 upsampling (align_corners=False) of a 4x4 map against its closed form:
    # output pixel i samples input coordinate (i + 0.5) / 2 - 0.5, clamped at the borders
    a = np.random.default_rng(2).normal(size=(1, 1, 4, 4))
    up = _np(lucid.nn.functional.interpolate(lucid.tensor(a), scale_factor=2, mode="bilinear"))
    c = np.clip((np.arange(8) + 0.5) / 2 - 0.5, 0, 3)
    lo = np.floor(c).astype(int)
    hi = np.minimum(lo + 1, 3)
    f = c - lo
    rows = a[0, 0][lo] * (1 - f)[:, None] + a[0, 0][hi] * f[:, None]
    ref = rows[:, lo] * (1 - f)[None] + rows[:, hi] * f[None]
    np.testing.assert_allclose(up[0, 0], ref, rtol=1e-12)


def test_stylegan_torch_parity():
    torch = pytest.importorskip("torch")
    lucid.manual_seed(0)
    g = stylegan_page(lucid)[3](8, 8, 32)
    gt = stylegan_page(torch)[3](8, 8, 32)
    _copy_state(g, gt, torch)
    assert sum(p.numel() for p in g.parameters()) == sum(p.numel() for p in gt.parameters())
    z = np.random.default_rng(0).normal(size=(2, 8)).astype(np.float32)
    # InjectNoise's weights are zero: the noise streams (which differ) do not enter
    for steps in (0, 1, 2):
        a = g(lucid.tensor(z), 0.3, steps)
        b = gt(torch.tensor(z), 0.3, steps)
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# GANs/SRGAN/model.py (PixelShuffle, PReLU) and GANs/CycleGAN/generator_model.py (reflect padding,
# InstanceNorm2d, ConvTranspose2d with output_padding)
# ---------------------------------------------------------------------------------------------

def srgan_page(torch):
    nn = torch.nn

    class ConvBlock(nn.Module):
        def __init__(
            self,
            in_channels,
            out_channels,
            discriminator=False,
            use_act=True,
            use_bn=True,
            **kwargs,
        ):
            super().__init__()
            self.use_act = use_act
            self.cnn = nn.Conv2d(in_channels, out_channels, **kwargs, bias=not use_bn)
            self.bn = nn.BatchNorm2d(out_channels) if use_bn else nn.Identity()
            self.act = (
                nn.LeakyReLU(0.2, inplace=True)
                if discriminator
                else nn.PReLU(num_parameters=out_channels)
            )

        def forward(self, x):
            return self.act(self.bn(self.cnn(x))) if self.use_act else self.bn(self.cnn(x))

    class UpsampleBlock(nn.Module):
        def __init__(self, in_c, scale_factor):
            super().__init__()
            self.conv = nn.Conv2d(in_c, in_c * scale_factor ** 2, 3, 1, 1)
            self.ps = nn.PixelShuffle(scale_factor)  # in_c * 4, H, W --> in_c, H*2, W*2
            self.act = nn.PReLU(num_parameters=in_c)

        def forward(self, x):
            return self.act(self.ps(self.conv(x)))

    class ResidualBlock(nn.Module):
        def __init__(self, in_channels):
            super().__init__()
            self.block1 = ConvBlock(in_channels, in_channels, kernel_size=3, stride=1, padding=1)
            self.block2 = ConvBlock(in_channels, in_channels, kernel_size=3, stride=1, padding=1, use_act=False,)

        def forward(self, x):
            out = self.block1(x)
            out = self.block2(out)
            return out + x

    class Generator(nn.Module):
        def __init__(self, in_channels=3, num_channels=64, num_blocks=16):
            super().__init__()
            self.initial = ConvBlock(in_channels, num_channels, kernel_size=9, stride=1, padding=4, use_bn=False)
            self.residuals = nn.Sequential(*[ResidualBlock(num_channels) for _ in range(num_blocks)])
            self.convblock = ConvBlock(num_channels, num_channels, kernel_size=3, stride=1, padding=1, use_act=False)
            self.upsamples = nn.Sequential(UpsampleBlock(num_channels, 2), UpsampleBlock(num_channels, 2))
            self.final = nn.Conv2d(num_channels, in_channels, kernel_size=9, stride=1, padding=4)

        def forward(self, x):
            initial = self.initial(x)
            x = self.residuals(initial)
            x = self.convblock(x) + initial
            x = self.upsamples(x)
            return torch.tanh(self.final(x))

    return UpsampleBlock, Generator


def cyclegan_page(torch):
    nn = torch.nn

    class ConvBlock(nn.Module):
        def __init__(self, in_channels, out_channels, down=True, use_act=True, **kwargs):
            super().__init__()
            self.conv = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, padding_mode="reflect", **kwargs)
                if down
                else nn.ConvTranspose2d(in_channels, out_channels, **kwargs),
                nn.InstanceNorm2d(out_channels),
                nn.ReLU(inplace=True) if use_act else nn.Identity()
            )

        def forward(self, x):
            return self.conv(x)

    class ResidualBlock(nn.Module):
        def __init__(self, channels):
            super().__init__()
            self.block = nn.Sequential(
                ConvBlock(channels, channels, kernel_size=3, padding=1),
                ConvBlock(channels, channels, use_act=False, kernel_size=3, padding=1),
            )

        def forward(self, x):
            return x + self.block(x)

    class Generator(nn.Module):
        def __init__(self, img_channels, num_features = 64, num_residuals=9):
            super().__init__()
            self.initial = nn.Sequential(
                nn.Conv2d(img_channels, num_features, kernel_size=7, stride=1, padding=3, padding_mode="reflect"),
                nn.InstanceNorm2d(num_features),
                nn.ReLU(inplace=True),
            )
            self.down_blocks = nn.ModuleList(
                [
                    ConvBlock(num_features, num_features*2, kernel_size=3, stride=2, padding=1),
                    ConvBlock(num_features*2, num_features*4, kernel_size=3, stride=2, padding=1),
                ]
            )
            self.res_blocks = nn.Sequential(
                *[ResidualBlock(num_features*4) for _ in range(num_residuals)]
            )
            self.up_blocks = nn.ModuleList(
                [
                    ConvBlock(num_features*4, num_features*2, down=False, kernel_size=3, stride=2, padding=1, output_padding=1),
                    ConvBlock(num_features*2, num_features*1, down=False, kernel_size=3, stride=2, padding=1, output_padding=1),
                ]
            )

            self.last = nn.Conv2d(num_features*1, img_channels, kernel_size=7, stride=1, padding=3, padding_mode="reflect")

        def forward(self, x):
            x = self.initial(x)
            for layer in self.down_blocks:
                x = layer(x)
            x = self.res_blocks(x)
            for layer in self.up_blocks:
                x = layer(x)
            return torch.tanh(self.last(x))

    return Generator


def test_srgan_pixel_shuffle_prelu_and_generator():
    UpsampleBlock, Generator = srgan_page(lucid)
    lucid.manual_seed(0)
    up = UpsampleBlock(2, 2).double()
    with lucid.no_grad():
        up.act.weight.copy_(lucid.tensor([0.1, -0.5], dtype=lucid.float64))
    x = np.random.default_rng(0).normal(size=(1, 2, 3, 3))
    c = _np(up.conv(lucid.tensor(x)))  # (1, 8, 3, 3)
    # PixelShuffle(2): out[c, 2h + i, 2w + j] = in[4c + 2i + j, h, w]; PReLU per channel
    ps = c.reshape(1, 2, 2, 2, 3, 3).transpose(0, 1, 4, 2, 5, 3).reshape(1, 2, 6, 6)
    ref = np.where(ps > 0, ps, np.array([0.1, -0.5])[None, :, None, None] * ps)
    np.testing.assert_allclose(_np(up(lucid.tensor(x))), ref, rtol=1e-12)
    gen = Generator(in_channels=3, num_channels=4, num_blocks=2)
    lr = lucid.tensor(np.random.default_rng(1).normal(size=(2, 3, 6, 6)).astype(np.float32))
    out = gen(lr)
    assert tuple(out.shape) == (2, 3, 24, 24) and float(out.abs().max()) < 1  # 4x super-resolution, tanh


def test_cyclegan_generator_reflect_and_transpose():
    Generator = cyclegan_page(lucid)
    lucid.manual_seed(0)
    gen = Generator(3, num_features=4, num_residuals=2).double()
    x = np.random.default_rng(2).normal(size=(1, 3, 8, 8))
    out = gen(lucid.tensor(x))
    assert tuple(out.shape) == (1, 3, 8, 8)  # down 8 -> 4 -> 2, up with output_padding 2 -> 4 -> 8
    # the first convolution pads by reflection: the same as a valid conv of np.pad(mode="reflect")
    conv = gen.initial[0]
    xp = np.pad(x, ((0, 0), (0, 0), (3, 3), (3, 3)), mode="reflect")
    valid = lucid.nn.functional.conv2d(lucid.tensor(xp), conv.weight, conv.bias)
    np.testing.assert_allclose(_np(conv(lucid.tensor(x))), _np(valid), rtol=1e-12)
    # InstanceNorm2d (no affine, no running stats): each (example, channel) map has mean 0, var 1
    c = _np(conv(lucid.tensor(x)))
    h = _np(gen.initial[1](conv(lucid.tensor(x))))
    np.testing.assert_allclose(h.mean((2, 3)), 0, atol=1e-12)
    v = c.var((2, 3))
    np.testing.assert_allclose(h.var((2, 3)), v / (v + 1e-5), rtol=1e-10)  # biased variance, eps 1e-5


def test_srgan_and_cyclegan_torch_parity():
    torch = pytest.importorskip("torch")
    lucid.manual_seed(0)
    for build, args, shape in ((lambda m: srgan_page(m)[1], dict(in_channels=3, num_channels=4, num_blocks=2), (2, 3, 6, 6)),
                               (cyclegan_page, dict(img_channels=3, num_features=4, num_residuals=2), (2, 3, 8, 8))):
        a = build(lucid)(**args)
        b = build(torch)(**args)
        _copy_state(a, b, torch)
        x = np.random.default_rng(3).normal(size=shape).astype(np.float32)
        res = []
        for m, model in ((lucid, a), (torch, b)):
            out = model(m.tensor(x))
            out.square().mean().backward()
            # (the PReLUs of the use_act=False blocks are never called: no gradient on either side)
            res.append([out.detach().numpy()] + [None if p.grad is None else p.grad.numpy() for p in model.parameters()])
        assert [u is None for u in res[0]] == [v is None for v in res[1]]
        for u, v in zip(*res):
            if u is not None:
                np.testing.assert_allclose(u, v, rtol=1e-3, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# Basics: pytorch_rnn_gru_lstm.py (the three many-to-one models), pytorch_std_mean.py
# ---------------------------------------------------------------------------------------------

def rnn_page(torch, input_size=6, hidden_size=5, num_layers=2, num_classes=3, sequence_length=4):
    nn = torch.nn
    device = torch.get_default_device()

    class RNN(nn.Module):
        def __init__(self, input_size, hidden_size, num_layers, num_classes):
            super(RNN, self).__init__()
            self.hidden_size = hidden_size
            self.num_layers = num_layers
            self.rnn = nn.RNN(input_size, hidden_size, num_layers, batch_first=True)
            self.fc = nn.Linear(hidden_size * sequence_length, num_classes)

        def forward(self, x):
            h0 = torch.zeros(self.num_layers, x.size(0), self.hidden_size).to(device)
            out, _ = self.rnn(x, h0)
            out = out.reshape(out.shape[0], -1)
            out = self.fc(out)
            return out

    class RNN_GRU(nn.Module):
        def __init__(self, input_size, hidden_size, num_layers, num_classes):
            super(RNN_GRU, self).__init__()
            self.hidden_size = hidden_size
            self.num_layers = num_layers
            self.gru = nn.GRU(input_size, hidden_size, num_layers, batch_first=True)
            self.fc = nn.Linear(hidden_size * sequence_length, num_classes)

        def forward(self, x):
            h0 = torch.zeros(self.num_layers, x.size(0), self.hidden_size).to(device)
            out, _ = self.gru(x, h0)
            out = out.reshape(out.shape[0], -1)
            out = self.fc(out)
            return out

    class RNN_LSTM(nn.Module):
        def __init__(self, input_size, hidden_size, num_layers, num_classes):
            super(RNN_LSTM, self).__init__()
            self.hidden_size = hidden_size
            self.num_layers = num_layers
            self.lstm = nn.LSTM(input_size, hidden_size, num_layers, batch_first=True)
            self.fc = nn.Linear(hidden_size * sequence_length, num_classes)

        def forward(self, x):
            h0 = torch.zeros(self.num_layers, x.size(0), self.hidden_size).to(device)
            c0 = torch.zeros(self.num_layers, x.size(0), self.hidden_size).to(device)
            out, _ = self.lstm(
                x, (h0, c0)
            )  # out: tensor of shape (batch_size, seq_length, hidden_size)
            out = out.reshape(out.shape[0], -1)
            out = self.fc(out)
            return out

    return [cls(input_size, hidden_size, num_layers, num_classes) for cls in (RNN, RNN_GRU, RNN_LSTM)]


def _sig(z):
    return 1 / (1 + np.exp(-z))


def _np_recurrent(kind, mod, x):
    """The page's many-to-one models in NumPy (PyTorch's gate orders: GRU r z n, LSTM i f g o)."""
    cell = getattr(mod, {"RNN": "rnn", "RNN_GRU": "gru", "RNN_LSTM": "lstm"}[kind])
    seq = x
    for layer in range(cell.num_layers):
        W_ih, W_hh, b_ih, b_hh = (_np(getattr(cell, f"{n}_l{layer}")) for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"))
        H = W_hh.shape[1]
        h = np.zeros((x.shape[0], H))
        c = np.zeros_like(h)
        outs = []
        for t in range(seq.shape[1]):
            gi, gh = seq[:, t] @ W_ih.T + b_ih, h @ W_hh.T + b_hh
            if kind == "RNN":
                h = np.tanh(gi + gh)
            elif kind == "RNN_GRU":
                r, z = _sig(gi[:, :H] + gh[:, :H]), _sig(gi[:, H:2 * H] + gh[:, H:2 * H])
                n = np.tanh(gi[:, 2 * H:] + r * gh[:, 2 * H:])
                h = (1 - z) * n + z * h
            else:
                g = gi + gh
                i, f, gg, o = _sig(g[:, :H]), _sig(g[:, H:2 * H]), np.tanh(g[:, 2 * H:3 * H]), _sig(g[:, 3 * H:])
                c = f * c + i * gg
                h = o * np.tanh(c)
            outs.append(h)
        seq = np.stack(outs, 1)
    return seq.reshape(x.shape[0], -1) @ _np(mod.fc.weight).T + _np(mod.fc.bias)


def test_rnn_gru_lstm_many_to_one_against_numpy():
    lucid.manual_seed(0)
    models = rnn_page(lucid)  # float32: the page's h0/c0 are torch.zeros (float32) as the input must be
    x = np.random.default_rng(0).normal(size=(3, 4, 6)).astype(np.float32)
    for kind, mod in zip(("RNN", "RNN_GRU", "RNN_LSTM"), models):
        ref = _np_recurrent(kind, mod, x.astype(np.float64))
        np.testing.assert_allclose(_np(mod(lucid.tensor(x))), ref, rtol=2e-5, atol=2e-6)
    # the training step of the page (Adam, cross-entropy) lowers the loss of each model
    y = lucid.tensor([0, 2, 1])
    for mod in models:
        opt = lucid.optim.Adam(mod.parameters(), lr=0.05)
        losses = []
        for _ in range(6):
            loss = lucid.nn.functional.cross_entropy(mod(lucid.tensor(x)), y)
            losses.append(loss.item())
            opt.zero_grad()
            loss.backward()
            opt.step()
        assert losses[-1] < 0.8 * losses[0]


def test_rnn_gru_lstm_torch_parity():
    torch = pytest.importorskip("torch")
    lucid.manual_seed(0)
    x = np.random.default_rng(0).normal(size=(3, 4, 6)).astype(np.float32)
    for a, b in zip(rnn_page(lucid), rnn_page(torch)):
        _copy_state(a, b, torch)
        res = []
        for m, mod in ((lucid, a), (torch, b)):
            out = mod(m.tensor(x))
            out.square().sum().backward()
            res.append([out.detach().numpy()] + [p.grad.numpy() for p in mod.parameters()])
        for u, v in zip(*res):
            np.testing.assert_allclose(u, v, rtol=1e-4, atol=1e-6)


def std_mean_page(torch, loader):
    tqdm = iter  # the progress bar (tqdm is not installed) only wraps the loader

    def get_mean_std(loader):
        # var[X] = E[X**2] - E[X]**2
        channels_sum, channels_sqrd_sum, num_batches = 0, 0, 0

        for data, _ in tqdm(loader):
            channels_sum += torch.mean(data, dim=[0, 2, 3])
            channels_sqrd_sum += torch.mean(data ** 2, dim=[0, 2, 3])
            num_batches += 1

        mean = channels_sum / num_batches
        std = (channels_sqrd_sum / num_batches - mean ** 2) ** 0.5

        return mean, std

    return get_mean_std(loader)


def test_std_mean_per_channel():
    x = np.random.default_rng(1).uniform(0, 1, (12, 3, 4, 4)) * np.array([1.0, 2.0, 0.5])[None, :, None, None]
    ds = lucid.utils.data.TensorDataset(lucid.tensor(x), lucid.zeros(12))
    mean, std = std_mean_page(lucid, lucid.utils.data.DataLoader(ds, batch_size=4, shuffle=True))
    # equal batches: the mean of batch means is the data set's channel mean; std the population std
    np.testing.assert_allclose(_np(mean), x.mean((0, 2, 3)), rtol=1e-12)
    np.testing.assert_allclose(_np(std), x.std((0, 2, 3)), rtol=1e-10)


# ---------------------------------------------------------------------------------------------
# GANs/3. WGAN: model.py (DCGAN critic with InstanceNorm2d(affine=True), generator of
# ConvTranspose2d/BatchNorm2d, initialize_weights) and train.py's loop: 5 critic steps with
# backward(retain_graph=True), RMSprop, weight clipping through p.data.clamp_, then the generator
# ---------------------------------------------------------------------------------------------

def wgan_page(torch, data, noises, FEATURES=2, Z_DIM=8, init_state=None):
    nn = torch.nn
    optim = torch.optim

    class Discriminator(nn.Module):
        def __init__(self, channels_img, features_d):
            super(Discriminator, self).__init__()
            self.disc = nn.Sequential(
                nn.Conv2d(channels_img, features_d, kernel_size=4, stride=2, padding=1),
                nn.LeakyReLU(0.2),
                self._block(features_d, features_d * 2, 4, 2, 1),
                self._block(features_d * 2, features_d * 4, 4, 2, 1),
                self._block(features_d * 4, features_d * 8, 4, 2, 1),
                nn.Conv2d(features_d * 8, 1, kernel_size=4, stride=2, padding=0),
            )

        def _block(self, in_channels, out_channels, kernel_size, stride, padding):
            return nn.Sequential(
                nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding, bias=False,),
                nn.InstanceNorm2d(out_channels, affine=True),
                nn.LeakyReLU(0.2),
            )

        def forward(self, x):
            return self.disc(x)

    class Generator(nn.Module):
        def __init__(self, channels_noise, channels_img, features_g):
            super(Generator, self).__init__()
            self.net = nn.Sequential(
                self._block(channels_noise, features_g * 16, 4, 1, 0),  # img: 4x4
                self._block(features_g * 16, features_g * 8, 4, 2, 1),  # img: 8x8
                self._block(features_g * 8, features_g * 4, 4, 2, 1),  # img: 16x16
                self._block(features_g * 4, features_g * 2, 4, 2, 1),  # img: 32x32
                nn.ConvTranspose2d(features_g * 2, channels_img, kernel_size=4, stride=2, padding=1),
                nn.Tanh(),
            )

        def _block(self, in_channels, out_channels, kernel_size, stride, padding):
            return nn.Sequential(
                nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride, padding, bias=False,),
                nn.BatchNorm2d(out_channels),
                nn.ReLU(),
            )

        def forward(self, x):
            return self.net(x)

    def initialize_weights(model):
        for m in model.modules():
            if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d, nn.BatchNorm2d)):
                nn.init.normal_(m.weight.data, 0.0, 0.02)

    LEARNING_RATE = 5e-5
    CHANNELS_IMG = 1
    CRITIC_ITERATIONS = 5
    WEIGHT_CLIP = 0.01
    device = torch.get_default_device()

    gen = Generator(Z_DIM, CHANNELS_IMG, FEATURES).to(device)
    critic = Discriminator(CHANNELS_IMG, FEATURES).to(device)
    initialize_weights(gen)
    initialize_weights(critic)
    if init_state is not None:
        gen.load_state_dict({k: torch.tensor(v) for k, v in init_state["gen"].items()})
        critic.load_state_dict({k: torch.tensor(v) for k, v in init_state["critic"].items()})
    state = {"gen": {k: _np(v).copy() for k, v in gen.state_dict().items()},
             "critic": {k: _np(v).copy() for k, v in critic.state_dict().items()}}
    opt_gen = optim.RMSprop(gen.parameters(), lr=LEARNING_RATE)
    opt_critic = optim.RMSprop(critic.parameters(), lr=LEARNING_RATE)
    gen.train()
    critic.train()
    log = {"critic": [], "clipped_max": []}
    noises = iter(noises)
    for batch_idx, (data,) in enumerate([(data,)]):
        data = data.to(device)
        cur_batch_size = data.shape[0]

        for _ in range(CRITIC_ITERATIONS):
            noise = torch.tensor(next(noises)).to(device)  # torch.randn(cur_batch_size, Z_DIM, 1, 1)
            fake = gen(noise)
            critic_real = critic(data).reshape(-1)
            critic_fake = critic(fake).reshape(-1)
            loss_critic = -(torch.mean(critic_real) - torch.mean(critic_fake))
            critic.zero_grad()
            loss_critic.backward(retain_graph=True)
            opt_critic.step()

            for p in critic.parameters():
                p.data.clamp_(-WEIGHT_CLIP, WEIGHT_CLIP)
            log["critic"].append(loss_critic.item())
            log["clipped_max"].append(max(float(p.abs().max()) for p in critic.parameters()))

        gen_before = [_np(p).copy() for p in gen.parameters()]
        gen_fake = critic(fake).reshape(-1)
        loss_gen = -torch.mean(gen_fake)
        gen.zero_grad()
        loss_gen.backward()
        gen_grads = [_np(p.grad).copy() for p in gen.parameters()]
        opt_gen.step()
        log["gen"] = (loss_gen.item(), gen_before, gen_grads, [_np(p).copy() for p in gen.parameters()])
    return log, state


def _wgan_inputs(Z_DIM=8):
    rng = np.random.default_rng(13)
    data = rng.uniform(-1, 1, (4, 1, 64, 64)).astype(np.float32)
    noises = [rng.normal(size=(4, Z_DIM, 1, 1)).astype(np.float32) for _ in range(5)]
    return data, noises


def test_wgan_weight_clipping_and_retained_graph():
    data, noises = _wgan_inputs()
    lucid.manual_seed(0)
    log, _ = wgan_page(lucid, lucid.tensor(data), noises)
    assert all(m <= 0.01 for m in log["clipped_max"]) and log["clipped_max"][0] == pytest.approx(0.01)
    # the generator's loss backpropagates through the graph of the last fake, kept alive by the
    # critic's backward(retain_graph=True); RMSprop's first step: v = 0.01 g^2, so
    # p -= lr g / (sqrt(v) + 1e-8) = lr g / (0.1 |g| + 1e-8)
    loss_gen, before, grads, after = log["gen"]
    assert sum(float(np.abs(g).sum() > 0) for g in grads) == len(grads)
    for b, g, a in zip(before, grads, after):
        g64 = g.astype(np.float64)
        np.testing.assert_allclose(a, b - 5e-5 * g64 / (0.1 * np.abs(g64) + 1e-8), rtol=1e-5, atol=1e-9)


def test_wgan_torch_parity():
    torch = pytest.importorskip("torch")
    data, noises = _wgan_inputs()
    lucid.manual_seed(0)
    a, state = wgan_page(lucid, lucid.tensor(data), noises)
    b, _ = wgan_page(torch, torch.tensor(data), noises, init_state=state)  # from Lucid's initial weights
    np.testing.assert_allclose(a["critic"], b["critic"], rtol=1e-4, atol=1e-6)
    assert a["gen"][0] == pytest.approx(b["gen"][0], rel=1e-4, abs=1e-6)
    for u, v in zip(a["gen"][2], b["gen"][2]):
        np.testing.assert_allclose(u, v, rtol=1e-3, atol=1e-7)


# ---------------------------------------------------------------------------------------------
# CNN_architectures/pytorch_vgg_implementation.py (channels / 32) as the model that
# Basics/pytorch_pretrain_finetune.py freezes and re-heads (torchvision's pretrained vgg16 and
# CIFAR10 replaced by that VGG16 with torchvision's attribute names and synthetic 32x32 images)
# ---------------------------------------------------------------------------------------------

def vgg_finetune_page(torch, out, div=32, num_epochs=4):
    print = out.append  # noqa: A001
    nn = torch.nn
    optim = torch.optim

    VGG16 = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]

    class VGG_net(nn.Module):
        def __init__(self, in_channels=3, num_classes=1000):
            super(VGG_net, self).__init__()
            self.in_channels = in_channels
            self.features = self.create_conv_layers([x if x == "M" else x // div for x in VGG16])
            self.avgpool = nn.AdaptiveAvgPool2d((7, 7))  # torchvision's vgg16 has one
            self.classifier = nn.Sequential(
                nn.Linear(512 // div * 7 * 7, 4096 // div),
                nn.ReLU(),
                nn.Dropout(p=0.5),
                nn.Linear(4096 // div, 4096 // div),
                nn.ReLU(),
                nn.Dropout(p=0.5),
                nn.Linear(4096 // div, num_classes),
            )

        def forward(self, x):
            x = self.features(x)
            x = self.avgpool(x)
            x = x.reshape(x.shape[0], -1)
            x = self.classifier(x)
            return x

        def create_conv_layers(self, architecture):
            layers = []
            in_channels = self.in_channels

            for x in architecture:
                if type(x) == int:
                    out_channels = x

                    layers += [
                        nn.Conv2d(
                            in_channels=in_channels,
                            out_channels=out_channels,
                            kernel_size=(3, 3),
                            stride=(1, 1),
                            padding=(1, 1),
                        ),
                        nn.BatchNorm2d(x),
                        nn.ReLU(),
                    ]
                    in_channels = x
                elif x == "M":
                    layers += [nn.MaxPool2d(kernel_size=(2, 2), stride=(2, 2))]

            return nn.Sequential(*layers)

    device = torch.get_default_device()
    num_classes = 10
    learning_rate = 1e-3 * 10
    batch_size = 1024

    class Identity(nn.Module):
        def __init__(self):
            super(Identity, self).__init__()

        def forward(self, x):
            return x

    model = VGG_net()  # torchvision.models.vgg16(pretrained=True)
    frozen = {k: _np(v).copy() for k, v in model.state_dict().items()}

    for param in model.parameters():
        param.requires_grad = False

    model.avgpool = Identity()
    model.classifier = nn.Sequential(
        nn.Linear(512 // div, 100), nn.ReLU(), nn.Linear(100, num_classes)
    )
    model.to(device)

    rng = np.random.default_rng(17)
    train_dataset = torch.utils.data.TensorDataset(
        torch.tensor(rng.uniform(0, 1, (16, 3, 32, 32)).astype(np.float32)), torch.tensor(rng.integers(0, 10, 16)))
    train_loader = torch.utils.data.DataLoader(dataset=train_dataset, batch_size=batch_size, shuffle=True)

    criterion = nn.CrossEntropyLoss()
    optimizer = optim.Adam(model.parameters(), lr=learning_rate)

    for epoch in range(num_epochs):
        losses = []

        for batch_idx, (data, targets) in enumerate(train_loader):
            data = data.to(device=device)
            targets = targets.to(device=device)

            scores = model(data)
            loss = criterion(scores, targets)

            losses.append(loss.item())
            optimizer.zero_grad()
            loss.backward()

            optimizer.step()

        print(f"Cost at epoch {epoch} is {sum(losses)/len(losses):.5f}")
    return model, frozen, optimizer


def test_vgg_pretrain_finetune_freezes_the_base():
    out = []
    lucid.manual_seed(0)
    model, frozen, optimizer = vgg_finetune_page(lucid, out)
    costs = [float(re.match(r"Cost at epoch (\d) is (\d+\.\d{5})$", ln).group(2)) for ln in out]
    assert len(costs) == 4 and costs[-1] < 0.85 * costs[0]
    assert sum(isinstance(m, lucid.nn.Conv2d) for m in model.features) == 13  # VGG16's 13 convolutions
    sd = model.state_dict()
    for k, v in frozen.items():
        if k.startswith("features.") and k.endswith(("weight", "bias")):
            np.testing.assert_array_equal(_np(sd[k]), v)  # frozen: no gradient, Adam leaves them
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert len(trainable) == 4 and all(id(p) in {id(q) for q in model.classifier.parameters()} for p in trainable)
    assert len(optimizer.state) == 4  # state only for the parameters that got gradients
    # BatchNorm's running statistics still moved: the frozen model ran in train mode
    assert np.abs(_np(sd["features.1.running_mean"]) - frozen["features.1.running_mean"]).max() > 0


def test_vgg_pretrain_finetune_torch_parity():
    torch = pytest.importorskip("torch")
    lo, to = [], []
    lucid.manual_seed(0)
    a, frozen, _ = vgg_finetune_page(lucid, lo, num_epochs=0)
    b, _, _ = vgg_finetune_page(torch, to, num_epochs=0)
    _copy_state(a, b, torch)
    x = np.random.default_rng(3).uniform(0, 1, (4, 3, 32, 32)).astype(np.float32)
    res = []
    for m, model in ((lucid, a), (torch, b)):
        out = model(m.tensor(x))
        out.sum().backward()
        res.append([out.detach().numpy()] + [p.grad.numpy() for p in model.parameters() if p.requires_grad])
    for u, v in zip(*res):
        np.testing.assert_allclose(u, v, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# more_advanced/neuralstyle/nst.py: style transfer optimising the image itself (Adam on the input;
# vgg19(pretrained=True).features[:29] replaced by the same layer layout, channels / 32, random)
# ---------------------------------------------------------------------------------------------

def nst_page(torch, original_img, style_img, total_steps=4, learning_rate=0.001):
    nn = torch.nn
    optim = torch.optim

    def _vgg19_features(div=32):
        layers, c = [], 3
        for v in [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512]:
            if v == "M":
                layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
            else:
                layers += [nn.Conv2d(c, v // div, kernel_size=3, padding=1), nn.ReLU(inplace=True)]
                c = v // div
        return nn.Sequential(*layers)[:29]

    class VGG(nn.Module):
        def __init__(self):
            super(VGG, self).__init__()
            self.chosen_features = ["0", "5", "10", "19", "28"]
            self.model = _vgg19_features()  # models.vgg19(pretrained=True).features[:29]

        def forward(self, x):
            features = []
            for layer_num, layer in enumerate(self.model):
                x = layer(x)

                if str(layer_num) in self.chosen_features:
                    features.append(x)

            return features

    generated = original_img.clone().requires_grad_(True)
    model = VGG().eval()

    alpha = 1
    beta = 0.01
    optimizer = optim.Adam([generated], lr=learning_rate)
    log = []

    for step in range(total_steps):
        generated_features = model(generated)
        original_img_features = model(original_img)
        style_features = model(style_img)

        style_loss = original_loss = 0

        for gen_feature, orig_feature, style_feature in zip(
            generated_features, original_img_features, style_features
        ):
            batch_size, channel, height, width = gen_feature.shape
            original_loss += torch.mean((gen_feature - orig_feature) ** 2)
            G = gen_feature.view(channel, height * width).mm(
                gen_feature.view(channel, height * width).t()
            )
            A = style_feature.view(channel, height * width).mm(
                style_feature.view(channel, height * width).t()
            )
            style_loss += torch.mean((G - A) ** 2)

        total_loss = alpha * original_loss + beta * style_loss
        optimizer.zero_grad()
        total_loss.backward()
        optimizer.step()
        log.append((original_loss.item(), style_loss.item(), total_loss.item(),
                    [_np(f) for f in generated_features], [_np(f) for f in style_features]))
    return model, generated, log


def _nst_images(torch):
    rng = np.random.default_rng(23)
    return (torch.tensor(rng.uniform(0, 1, (1, 3, 32, 32)).astype(np.float32)),
            torch.tensor(rng.uniform(0, 1, (1, 3, 32, 32)).astype(np.float32)))


def test_neural_style_transfer_optimises_the_image():
    original, style = _nst_images(lucid)
    lucid.manual_seed(0)
    model, generated, log = nst_page(lucid, original, style)
    assert [type(model.model[int(i)]).__name__ for i in model.chosen_features] == ["Conv2d"] * 5  # conv1_1 .. conv5_1
    assert [f.shape for f in log[0][3]] == [(1, 2, 32, 32), (1, 4, 16, 16), (1, 8, 8, 8), (1, 16, 4, 4), (1, 16, 2, 2)]
    assert log[0][0] == 0.0  # the generated image starts as a clone of the content image
    # the style term by hand: Gram matrices F F^T of each chosen layer
    style = 0.0
    for g, s in zip(log[0][3], log[0][4]):
        c = g.shape[1]
        G, A = g.reshape(c, -1).astype(np.float64), s.reshape(c, -1).astype(np.float64)
        style += np.mean((G @ G.T - A @ A.T) ** 2)
    assert log[0][1] == pytest.approx(style, rel=1e-5)
    totals = [x[2] for x in log]
    assert totals[-1] < 0.6 * totals[0] and log[-1][0] > 0  # the image moved away from the content
    assert generated.grad is not None and all(p.grad is not None for p in model.parameters())


def test_neural_style_transfer_torch_parity():
    torch = pytest.importorskip("torch")
    lucid.manual_seed(0)
    a, _, la = nst_page(lucid, *_nst_images(lucid), total_steps=0)
    b, _, _ = nst_page(torch, *_nst_images(torch), total_steps=0)
    _copy_state(a, b, torch)
    ra = _nst_run_with(lucid, a)
    rb = _nst_run_with(torch, b)
    np.testing.assert_allclose(ra[0], rb[0], rtol=1e-4)
    np.testing.assert_allclose(ra[1], rb[1], rtol=1e-4, atol=1e-5)


def _nst_run_with(m, model, steps=3):
    original, style = _nst_images(m)
    generated = original.clone().requires_grad_(True)
    opt = m.optim.Adam([generated], lr=0.001)
    totals = []
    for _ in range(steps):
        loss = 0
        for g, o, s in zip(model(generated), model(original), model(style)):
            _, c, h, w = g.shape
            G = g.view(c, h * w).mm(g.view(c, h * w).t())
            A = s.view(c, h * w).mm(s.view(c, h * w).t())
            loss = loss + m.mean((g - o) ** 2) + 0.01 * m.mean((G - A) ** 2)
        totals.append(loss.item())
        opt.zero_grad()
        loss.backward()
        opt.step()
    return totals, generated.detach().numpy()
