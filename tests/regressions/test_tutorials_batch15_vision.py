"""Vision library code run on Lucid (``import lucid as torch``), fifteenth batch:

- huggingface/pytorch-image-models (timm): ``layers/drop.py`` (``drop_path``/``DropPath``,
  ``drop_block_2d``/``drop_block_fast_2d``/``DropBlock2d`` with ``clip_mask_2d`` and ``grid.ndgrid``),
  ``layers/weight_init.py`` (``trunc_normal_``, ``trunc_normal_tf_``, ``variance_scaling_``,
  ``lecun_normal_``), ``layers/activations.py`` (``hard_swish``, ``hard_sigmoid``, ``GELU``, with their
  in-place forms), ``layers/mlp.py`` (``Mlp``, ``GluMlp`` and its ``init_weights``), ``layers/norm.py``
  (``LayerNorm``, ``LayerNorm2d``), ``layers/patch_embed.py`` (``PatchEmbed`` with NLC output and
  ``set_input_size``, ``resample_patch_embed``: FlexiViT's pseudo-inverse of the bicubic antialiased
  resize), ``layers/pos_embed.py`` (``resample_abs_pos_embed``),
  ``layers/attention.py`` ``Attention`` (fused SDPA and the explicit path with
  ``resolve_self_attn_mask``), ``LayerScale`` and ``models/vision_transformer.py``'s ``Block`` (a
  two-block ViT trained a few steps), ``models/convnext.py``'s ``ConvNeXtBlock`` (both MLP layouts),
  ``loss/cross_entropy.py`` (``LabelSmoothingCrossEntropy``, ``SoftTargetCrossEntropy``),
  ``loss/asymmetric_loss.py`` (``AsymmetricLossMultiLabel``, ``AsymmetricLossSingleLabel``),
  ``data/mixup.py`` (``one_hot``, ``mixup_target``, ``rand_bbox``, ``cutmix_bbox_and_lam``, ``Mixup``
  in its batch/pair/elem modes), ``utils/model_ema.py`` (``ModelEmaV2``, ``ModelEmaV3`` with decay
  warmup and ``_foreach_lerp_``), ``scheduler/scheduler.py`` + ``scheduler/cosine_lr.py``
  (``CosineLRScheduler`` with warmup, restarts, k-decay and noise), ``optim/lion.py`` (``Lion``,
  single- and multi-tensor, with caution) and ``optim/lamb.py`` in its 2021 text (``Lamb``: global
  gradient norm in a float32 buffer, trust ratios through nested ``torch.where`` on device scalars).
- facebookresearch/detr: ``util/box_ops.py`` (``box_cxcywh_to_xyxy``, ``box_xyxy_to_cxcywh``,
  ``box_iou``, ``generalized_box_iou``, ``masks_to_boxes``; torchvision's ``box_area`` written out),
  ``models/matcher.py`` ``HungarianMatcher`` (``scipy.optimize.linear_sum_assignment`` on
  ``C.view(bs, num_queries, -1).cpu()`` split per image), ``models/detr.py`` (``SetCriterion`` with
  ``loss_labels``/``loss_cardinality``/``loss_boxes``, ``_get_src_permutation_idx``, ``MLP``, ``DETR``),
  ``models/transformer.py`` (encoder/decoder on ``nn.MultiheadAttention``, returning intermediate
  decoder states) and ``models/position_encoding.py`` (``PositionEmbeddingSine``), with
  ``util/misc.py``'s ``NestedTensor`` and ``accuracy``. A tiny synthetic batch; no torchvision
  backbone: a two-layer conv stack stands in for ``models/backbone.py`` (``Joiner``'s output is
  reproduced: the mask is interpolated to the feature size, the position encoding computed on it).
  Also an image without annotations (empty cost block, empty index tensors).

Each page is a function of the module it is handed as ``torch`` and returns the definitions; the
parity tests run the same text on PyTorch where it is installed, with weights drawn from NumPy.

Adapted: timm's registry and config helpers became plain code (``to_2tuple``, ``get_act_layer('gelu')``
is ``nn.GELU``, ``create_conv2d(..., depthwise=True)`` is a grouped ``nn.Conv2d`` with ``padding=k // 2``,
``use_fused_attn()`` is a constructor argument, ``_assert`` is ``assert``, ``Format``/``nchw_to`` are
left out as only NLC output is used, ``device``/``dtype`` keyword plumbing is dropped); the
``@torch.fx.wrap`` decorator on ``maybe_add_mask`` is dropped (both libraries accept it only at a
module's top level, and the page is a function); ``Block`` is the current one without the
``_create_attn`` indirection; ``CosineLRScheduler`` is paired with the ``Scheduler`` base of the same
era (``t_in_epochs``, ``_get_values``); ``Mixup``'s ``np.bool`` is ``bool`` as in timm's later text
(NumPy 1.24-1.26 have no ``np.bool``); ``Lamb`` is the 2021 text (the current one needs timm's
``optim/_helpers.py``); DETR's ``models/backbone.py`` (torchvision ResNet) is replaced as said. The
DETR runs are float64 (for finite differences), so ``SetCriterion`` is
cast with ``.double()`` like the model: its float32 ``empty_weight`` beside float64 logits is refused
by ``cross_entropy`` in both libraries.

Fixed on the way: ``F.cross_entropy``/``F.nll_loss`` took a class ``weight`` of another dtype than the
input and cast it silently (PyTorch: "expected scalar type Double but found Float"; DETR's float32
``empty_weight`` with float64 logits); ``torch.meshgrid`` without ``indexing=`` gave no warning
(PyTorch's UserWarning that the argument will be required; DETR's ``masks_to_boxes`` calls it so).
Also fixed: an in-place binary op (``add_``, ``sub_``, ``mul_``, ``div_``) whose operand is a 0-d
tensor of a wider dtype of the same kind computed in the wider dtype and rounded, where PyTorch
computes in ``self``'s dtype (timm's Lamb accumulates ``global_grad_norm.add_(grad.pow(2).sum())``
that way).
"""
import copy
import itertools
import logging
import math
import warnings
from types import SimpleNamespace
from typing import List, Optional, Tuple

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

import lucid
import lucid.nn  # noqa: F401
import lucid.optim  # noqa: F401


def _np(t):
    return t.detach().cpu().numpy()


def _fill(torch, model, seed, scale=0.3):
    """Give every floating entry of the state dict NumPy-drawn values (same in both libraries)."""
    rng = np.random.default_rng(seed)
    sd = model.state_dict()
    new = {}
    for k in sorted(sd):  # a fixed order: the same draws in both libraries
        v = sd[k]
        if v.is_floating_point():
            a = rng.normal(0.0, scale, tuple(v.shape))
            if "norm" in k and k.endswith("weight"):  # norm scales near one
                a = 1.0 + a / 3
            new[k] = torch.tensor(a, dtype=v.dtype)
        else:
            new[k] = v
    model.load_state_dict(new)
    return model


# --------------------------------------------------------------------------------------------
# timm
# --------------------------------------------------------------------------------------------
def timm_layers(torch):
    nn = torch.nn
    F = torch.nn.functional
    from functools import partial
    _logger = logging.getLogger("timm")

    def to_2tuple(x):
        if isinstance(x, (list, tuple)):
            return tuple(x)
        return (x, x)

    # layers/grid.py
    def ndgrid(*tensors) -> Tuple[torch.Tensor, ...]:
        try:
            return torch.meshgrid(*tensors, indexing='ij')
        except TypeError:
            return torch.meshgrid(*tensors)

    # layers/drop.py
    def clip_mask_2d(h: int, w: int, kernel: int, device):
        assert kernel <= min(h, w), f"{kernel=} > min({h=}, {w=})"

        h_i, w_i = ndgrid(torch.arange(h, device=device), torch.arange(w, device=device))
        return (
            (h_i >= kernel // 2) &
            (h_i < h - (kernel - 1) // 2) &
            (w_i >= kernel // 2) &
            (w_i < w - (kernel - 1) // 2)
        ).reshape(h, w)

    def drop_block_2d(x, drop_prob: float = 0.1, block_size: int = 7, gamma_scale: float = 1.0,
                      with_noise: bool = False, inplace: bool = False, batchwise: bool = False):
        B, C, H, W = x.shape
        total_size = W * H

        # TODO: This behaves oddly when clipped_block_size < block_size, or block_size % 2 == 0.
        clipped_block_size = min(block_size, W, H)

        # seed_drop_rate, the gamma parameter
        gamma = gamma_scale * drop_prob * total_size / clipped_block_size ** 2 / (
                (W - block_size + 1) * (H - block_size + 1))

        # Forces the block to be inside the feature map.
        valid_block = clip_mask_2d(
            h=H,
            w=W,
            kernel=clipped_block_size,
            device=x.device,
        ).reshape((1, 1, H, W)).to(dtype=x.dtype)

        if batchwise:
            # one mask for whole batch, quite a bit faster
            uniform_noise = torch.rand((1, C, H, W), dtype=x.dtype, device=x.device)
        else:
            uniform_noise = torch.rand_like(x)
        block_mask = ((2 - gamma - valid_block + uniform_noise) >= 1).to(dtype=x.dtype)
        block_mask = -F.max_pool2d(
            -block_mask,
            kernel_size=clipped_block_size,  # block_size,
            stride=1,
            padding=clipped_block_size // 2)

        if with_noise:
            normal_noise = torch.randn((1, C, H, W), dtype=x.dtype, device=x.device) if batchwise else torch.randn_like(x)
            if inplace:
                x.mul_(block_mask).add_(normal_noise * (1 - block_mask))
            else:
                x = x * block_mask + normal_noise * (1 - block_mask)
        else:
            normalize_scale = (block_mask.numel() / block_mask.to(dtype=torch.float32).sum().add(1e-7)).to(x.dtype)
            if inplace:
                x.mul_(block_mask * normalize_scale)
            else:
                x = x * block_mask * normalize_scale
        return x

    def drop_block_fast_2d(x: torch.Tensor, drop_prob: float = 0.1, block_size: int = 7,
                           gamma_scale: float = 1.0, with_noise: bool = False, inplace: bool = False):
        B, C, H, W = x.shape
        total_size = W * H
        clipped_block_size = min(block_size, min(W, H))
        gamma = gamma_scale * drop_prob * total_size / clipped_block_size ** 2 / (
                (W - block_size + 1) * (H - block_size + 1))

        block_mask = torch.empty_like(x).bernoulli_(gamma)
        block_mask = F.max_pool2d(
            block_mask.to(x.dtype), kernel_size=clipped_block_size, stride=1, padding=clipped_block_size // 2)

        if with_noise:
            normal_noise = torch.empty_like(x).normal_()
            if inplace:
                x.mul_(1. - block_mask).add_(normal_noise * block_mask)
            else:
                x = x * (1. - block_mask) + normal_noise * block_mask
        else:
            block_mask = 1 - block_mask
            normalize_scale = (block_mask.numel() / block_mask.to(dtype=torch.float32).sum().add(1e-6)).to(dtype=x.dtype)
            if inplace:
                x.mul_(block_mask * normalize_scale)
            else:
                x = x * block_mask * normalize_scale
        return x

    class DropBlock2d(nn.Module):
        def __init__(self, drop_prob: float = 0.1, block_size: int = 7, gamma_scale: float = 1.0,
                     with_noise: bool = False, inplace: bool = False, batchwise: bool = False,
                     fast: bool = True):
            super(DropBlock2d, self).__init__()
            self.drop_prob = drop_prob
            self.gamma_scale = gamma_scale
            self.block_size = block_size
            self.with_noise = with_noise
            self.inplace = inplace
            self.batchwise = batchwise
            self.fast = fast  # FIXME finish comparisons of fast vs not

        def forward(self, x):
            if not self.training or not self.drop_prob:
                return x
            if self.fast:
                return drop_block_fast_2d(
                    x, self.drop_prob, self.block_size, self.gamma_scale, self.with_noise, self.inplace)
            else:
                return drop_block_2d(
                    x, self.drop_prob, self.block_size, self.gamma_scale, self.with_noise, self.inplace, self.batchwise)

    def drop_path(x, drop_prob: float = 0., training: bool = False, scale_by_keep: bool = True):
        if drop_prob == 0. or not training:
            return x
        keep_prob = 1 - drop_prob
        shape = (x.shape[0],) + (1,) * (x.ndim - 1)  # work with diff dim tensors, not just 2D ConvNets
        random_tensor = x.new_empty(shape).bernoulli_(keep_prob)
        if keep_prob > 0.0 and scale_by_keep:
            random_tensor.div_(keep_prob)
        return x * random_tensor

    class DropPath(nn.Module):
        def __init__(self, drop_prob: float = 0., scale_by_keep: bool = True):
            super(DropPath, self).__init__()
            self.drop_prob = drop_prob
            self.scale_by_keep = scale_by_keep

        def forward(self, x):
            return drop_path(x, self.drop_prob, self.training, self.scale_by_keep)

        def extra_repr(self):
            return f'drop_prob={round(self.drop_prob,3):0.3f}'

    # layers/weight_init.py
    _calculate_fan_in_and_fan_out = torch.nn.init._calculate_fan_in_and_fan_out

    def _trunc_normal_(tensor, mean, std, a, b):
        # Cut & paste from PyTorch official master until it's in a few official releases - RW
        # Method based on https://people.sc.fsu.edu/~jburkardt/presentations/truncated_normal.pdf
        def norm_cdf(x):
            # Computes standard normal cumulative distribution function
            return (1. + math.erf(x / math.sqrt(2.))) / 2.

        if (mean < a - 2 * std) or (mean > b + 2 * std):
            warnings.warn("mean is more than 2 std from [a, b] in nn.init.trunc_normal_. "
                          "The distribution of values may be incorrect.",
                          stacklevel=2)

        # Values are generated by using a truncated uniform distribution and
        # then using the inverse CDF for the normal distribution.
        # Get upper and lower cdf values
        l = norm_cdf((a - mean) / std)
        u = norm_cdf((b - mean) / std)

        # Uniformly fill tensor with values from [l, u], then translate to
        # [2l-1, 2u-1].
        tensor.uniform_(2 * l - 1, 2 * u - 1)

        # Use inverse cdf transform for normal distribution to get truncated
        # standard normal
        tensor.erfinv_()

        # Transform to proper mean, std
        tensor.mul_(std * math.sqrt(2.))
        tensor.add_(mean)

        # Clamp to ensure it's in the proper range
        tensor.clamp_(min=a, max=b)
        return tensor

    def trunc_normal_(tensor, mean=0., std=1., a=-2., b=2.):
        with torch.no_grad():
            return _trunc_normal_(tensor, mean, std, a, b)

    def trunc_normal_tf_(tensor, mean=0., std=1., a=-2., b=2.):
        with torch.no_grad():
            _trunc_normal_(tensor, 0, 1.0, a, b)
            tensor.mul_(std).add_(mean)
        return tensor

    def variance_scaling_(tensor, scale=1.0, mode='fan_in', distribution='normal'):
        fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
        if mode == 'fan_in':
            denom = fan_in
        elif mode == 'fan_out':
            denom = fan_out
        elif mode == 'fan_avg':
            denom = (fan_in + fan_out) / 2

        variance = scale / denom

        if distribution == "truncated_normal":
            # constant is stddev of standard normal truncated to (-2, 2)
            trunc_normal_tf_(tensor, std=math.sqrt(variance) / .87962566103423978)
        elif distribution == "normal":
            with torch.no_grad():
                tensor.normal_(std=math.sqrt(variance))
        elif distribution == "uniform":
            bound = math.sqrt(3 * variance)
            with torch.no_grad():
                tensor.uniform_(-bound, bound)
        else:
            raise ValueError(f"invalid distribution {distribution}")

    def lecun_normal_(tensor):
        variance_scaling_(tensor, mode='fan_in', distribution='truncated_normal')

    # layers/activations.py
    def hard_swish(x, inplace: bool = False):
        inner = F.relu6(x + 3.).div_(6.)
        return x.mul_(inner) if inplace else x.mul(inner)

    def hard_sigmoid(x, inplace: bool = False):
        if inplace:
            return x.add_(3.).clamp_(0., 6.).div_(6.)
        else:
            return F.relu6(x + 3.) / 6.

    class GELU(nn.Module):
        def __init__(self, inplace: bool = False):
            super(GELU, self).__init__()

        def forward(self, input: torch.Tensor) -> torch.Tensor:
            return F.gelu(input)

    # layers/mlp.py
    class Mlp(nn.Module):
        def __init__(self, in_features, hidden_features=None, out_features=None, act_layer=nn.GELU,
                     norm_layer=None, bias=True, drop=0., use_conv=False):
            super().__init__()
            out_features = out_features or in_features
            hidden_features = hidden_features or in_features
            bias = to_2tuple(bias)
            drop_probs = to_2tuple(drop)
            linear_layer = partial(nn.Conv2d, kernel_size=1) if use_conv else nn.Linear

            self.fc1 = linear_layer(in_features, hidden_features, bias=bias[0])
            self.act = act_layer()
            self.drop1 = nn.Dropout(drop_probs[0])
            self.norm = norm_layer(hidden_features) if norm_layer is not None else nn.Identity()
            self.fc2 = linear_layer(hidden_features, out_features, bias=bias[1])
            self.drop2 = nn.Dropout(drop_probs[1])

        def forward(self, x):
            x = self.fc1(x)
            x = self.act(x)
            x = self.drop1(x)
            x = self.norm(x)
            x = self.fc2(x)
            x = self.drop2(x)
            return x

    class GluMlp(nn.Module):
        def __init__(self, in_features, hidden_features=None, out_features=None, act_layer=nn.Sigmoid,
                     norm_layer=None, bias=True, drop=0., use_conv=False, gate_last=True):
            super().__init__()
            out_features = out_features or in_features
            hidden_features = hidden_features or in_features
            assert hidden_features % 2 == 0
            bias = to_2tuple(bias)
            drop_probs = to_2tuple(drop)
            linear_layer = partial(nn.Conv2d, kernel_size=1) if use_conv else nn.Linear
            self.chunk_dim = 1 if use_conv else -1
            self.gate_last = gate_last  # use second half of width for gate

            self.fc1 = linear_layer(in_features, hidden_features, bias=bias[0])
            self.act = act_layer()
            self.drop1 = nn.Dropout(drop_probs[0])
            self.norm = norm_layer(hidden_features // 2) if norm_layer is not None else nn.Identity()
            self.fc2 = linear_layer(hidden_features // 2, out_features, bias=bias[1])
            self.drop2 = nn.Dropout(drop_probs[1])

        def init_weights(self):
            # override init of fc1 w/ gate portion set to weight near zero, bias=1
            if self.fc1.bias is not None:
                nn.init.ones_(self.fc1.bias[self.fc1.bias.shape[0] // 2:])
            nn.init.normal_(self.fc1.weight[self.fc1.weight.shape[0] // 2:], std=1e-6)

        def forward(self, x):
            x = self.fc1(x)
            x1, x2 = x.chunk(2, dim=self.chunk_dim)
            x = x1 * self.act(x2) if self.gate_last else self.act(x1) * x2
            x = self.drop1(x)
            x = self.norm(x)
            x = self.fc2(x)
            x = self.drop2(x)
            return x

    # layers/norm.py (fast norm off)
    class LayerNorm(nn.LayerNorm):
        def __init__(self, num_channels: int, eps: float = 1e-6, affine: bool = True, **kwargs):
            super().__init__(num_channels, eps=eps, elementwise_affine=affine, **kwargs)
            self._fast_norm = False

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
            return x

    class LayerNorm2d(nn.LayerNorm):
        """ LayerNorm for channels of '2D' spatial NCHW tensors """
        def __init__(self, num_channels: int, eps: float = 1e-6, affine: bool = True, **kwargs):
            super().__init__(num_channels, eps=eps, elementwise_affine=affine, **kwargs)
            self._fast_norm = False

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = x.permute(0, 2, 3, 1)
            x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
            x = x.permute(0, 3, 1, 2)
            return x

    # layers/patch_embed.py (flatten=True, output_fmt=None)
    class PatchEmbed(nn.Module):
        def __init__(self, img_size=224, patch_size: int = 16, in_chans: int = 3, embed_dim: int = 768,
                     norm_layer=None, flatten: bool = True, bias: bool = True,
                     strict_img_size: bool = True, dynamic_img_pad: bool = False):
            super().__init__()
            self.patch_size = to_2tuple(patch_size)
            self.img_size, self.grid_size, self.num_patches = self._init_img_size(img_size)
            self.flatten = flatten
            self.strict_img_size = strict_img_size
            self.dynamic_img_pad = dynamic_img_pad

            self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size, bias=bias)
            self.norm = norm_layer(embed_dim) if norm_layer else nn.Identity()

        def _init_img_size(self, img_size):
            assert self.patch_size
            if img_size is None:
                return None, None, None
            img_size = to_2tuple(img_size)
            grid_size = tuple([s // p for s, p in zip(img_size, self.patch_size)])
            num_patches = grid_size[0] * grid_size[1]
            return img_size, grid_size, num_patches

        def set_input_size(self, img_size=None, patch_size=None):
            new_patch_size = None
            if patch_size is not None:
                new_patch_size = to_2tuple(patch_size)
            if new_patch_size is not None and new_patch_size != self.patch_size:
                with torch.no_grad():
                    new_proj = nn.Conv2d(
                        self.proj.in_channels,
                        self.proj.out_channels,
                        kernel_size=new_patch_size,
                        stride=new_patch_size,
                        bias=self.proj.bias is not None,
                        device=self.proj.weight.device,
                        dtype=self.proj.weight.dtype,
                    )
                    new_proj.weight.copy_(resample_patch_embed(self.proj.weight, new_patch_size, verbose=True))
                    if self.proj.bias is not None:
                        new_proj.bias.copy_(self.proj.bias)
                    self.proj = new_proj
                self.patch_size = new_patch_size
            img_size = img_size or self.img_size
            if img_size != self.img_size or new_patch_size is not None:
                self.img_size, self.grid_size, self.num_patches = self._init_img_size(img_size)

        def forward(self, x):
            B, C, H, W = x.shape
            if self.img_size is not None:
                if self.strict_img_size:
                    assert H == self.img_size[0], f"Input height ({H}) doesn't match model ({self.img_size[0]})."
                    assert W == self.img_size[1], f"Input width ({W}) doesn't match model ({self.img_size[1]})."
                elif not self.dynamic_img_pad:
                    assert H % self.patch_size[0] == 0, \
                        f"Input height ({H}) should be divisible by patch size ({self.patch_size[0]})."
                    assert W % self.patch_size[1] == 0, \
                        f"Input width ({W}) should be divisible by patch size ({self.patch_size[1]})."
            if self.dynamic_img_pad:
                pad_h = (self.patch_size[0] - H % self.patch_size[0]) % self.patch_size[0]
                pad_w = (self.patch_size[1] - W % self.patch_size[1]) % self.patch_size[1]
                x = F.pad(x, (0, pad_w, 0, pad_h))
            x = self.proj(x)
            if self.flatten:
                x = x.flatten(2).transpose(1, 2)  # NCHW -> NLC
            x = self.norm(x)
            return x

    DTYPE_INTERMEDIATE = torch.float32

    def _compute_resize_matrix(old_size, new_size, interpolation: str, antialias: bool, device,
                               dtype=DTYPE_INTERMEDIATE):
        """Computes the resize matrix basis vectors and interpolates them to new_size."""
        old_h, old_w = old_size
        new_h, new_w = new_size
        old_total = old_h * old_w
        new_total = new_h * new_w

        eye_matrix = torch.eye(old_total, device=device, dtype=dtype)
        basis_vectors_batch = eye_matrix.reshape(old_total, 1, old_h, old_w)
        resized_basis_vectors_batch = F.interpolate(
            basis_vectors_batch,
            size=new_size,
            mode=interpolation,
            antialias=antialias,
            align_corners=False
        ) # Output shape: (old_total, 1, new_h, new_w)
        resize_matrix = resized_basis_vectors_batch.squeeze(1).permute(1, 2, 0).reshape(new_total, old_total)
        return resize_matrix # Shape: (new_total, old_total)

    def _apply_resampling(patch_embed, pinv_matrix, new_size_tuple, orig_dtype,
                          intermediate_dtype=DTYPE_INTERMEDIATE):
        """ Simplified resampling w/o vmap use.
        As proposed by https://github.com/stas-sl
        """
        c_out, c_in, *_ = patch_embed.shape
        patch_embed = patch_embed.reshape(c_out, c_in, -1).to(dtype=intermediate_dtype)
        pinv_matrix = pinv_matrix.to(dtype=intermediate_dtype)
        resampled_patch_embed = patch_embed @ pinv_matrix  # (C_out, C_in, P_old * P_old) @ (P_old * P_old, P_new * P_new)
        resampled_patch_embed = resampled_patch_embed.reshape(c_out, c_in, *new_size_tuple).to(dtype=orig_dtype)
        return resampled_patch_embed

    def resample_patch_embed(patch_embed, new_size: List[int], interpolation: str = 'bicubic',
                             antialias: bool = True, verbose: bool = False):
        """ Standalone function (computes matrix on each call). """
        assert len(patch_embed.shape) == 4, "Input tensor should be 4D (out_ch, in_ch, h, w)"
        assert len(new_size) == 2, "New shape should only be hw (height, width)"

        old_size_tuple: Tuple[int, int] = tuple(patch_embed.shape[-2:])
        new_size_tuple: Tuple[int, int] = tuple(new_size)

        if old_size_tuple == new_size_tuple:
            return patch_embed

        device = patch_embed.device
        orig_dtype = patch_embed.dtype

        resize_mat = _compute_resize_matrix(
            old_size_tuple, new_size_tuple, interpolation, antialias, device, DTYPE_INTERMEDIATE
        )
        pinv_matrix = torch.linalg.pinv(resize_mat)  # Calculates the pseudoinverse matrix used for resampling
        resampled_patch_embed = _apply_resampling(
            patch_embed, pinv_matrix, new_size_tuple, orig_dtype, DTYPE_INTERMEDIATE
        )
        return resampled_patch_embed

    # layers/pos_embed.py
    def resample_abs_pos_embed(posemb, new_size: List[int], old_size: Optional[List[int]] = None,
                               num_prefix_tokens: int = 1, interpolation: str = 'bicubic',
                               antialias: bool = True, verbose: bool = False):
        # sort out sizes, assume square if old size not provided
        num_pos_tokens = posemb.shape[1]
        num_new_tokens = new_size[0] * new_size[1] + num_prefix_tokens
        if num_new_tokens == num_pos_tokens and new_size[0] == new_size[1]:
            return posemb

        if old_size is None:
            hw = int(math.sqrt(num_pos_tokens - num_prefix_tokens))
            old_size = hw, hw

        if num_prefix_tokens:
            posemb_prefix, posemb = posemb[:, :num_prefix_tokens], posemb[:, num_prefix_tokens:]
        else:
            posemb_prefix, posemb = None, posemb

        # do the interpolation
        embed_dim = posemb.shape[-1]
        orig_dtype = posemb.dtype
        posemb = posemb.float()  # interpolate needs float32
        posemb = posemb.reshape(1, old_size[0], old_size[1], -1).permute(0, 3, 1, 2)
        posemb = F.interpolate(posemb, size=new_size, mode=interpolation, antialias=antialias)
        posemb = posemb.permute(0, 2, 3, 1).reshape(1, -1, embed_dim)
        posemb = posemb.to(orig_dtype)

        # add back extra (class, etc) prefix tokens
        if posemb_prefix is not None:
            posemb = torch.cat([posemb_prefix, posemb], dim=1)

        if not torch.jit.is_scripting() and verbose:
            _logger.info(f'Resized position embedding: {old_size} to {new_size}.')

        return posemb

    # layers/attention.py
    def maybe_add_mask(scores: torch.Tensor, attn_mask: Optional[torch.Tensor] = None):
        return scores if attn_mask is None else scores + attn_mask

    def resolve_self_attn_mask(seq_len: int, attn: torch.Tensor, attn_mask: Optional[torch.Tensor] = None,
                               is_causal: bool = False) -> Optional[torch.Tensor]:
        # Build additive bias matching SDPA semantics for self-attention
        # is_causal and attn_mask are mutually exclusive (is_causal takes precedence)
        if is_causal:
            attn_bias = attn.new_full((seq_len, seq_len), float('-inf')).triu_(1)
        elif attn_mask is None:
            attn_bias = None
        elif attn_mask.dtype == torch.bool:
            attn_bias = torch.zeros_like(attn_mask, dtype=attn.dtype)
            attn_bias.masked_fill_(~attn_mask, float('-inf'))
        else:
            attn_bias = attn_mask
        return attn_bias

    class Attention(nn.Module):
        def __init__(self, dim: int, num_heads: int = 8, attn_head_dim: Optional[int] = None,
                     dim_out: Optional[int] = None, qkv_bias: bool = False, qk_norm: bool = False,
                     scale_norm: bool = False, proj_bias: bool = True, attn_drop: float = 0.,
                     proj_drop: float = 0., norm_layer=None, fused_attn: bool = True) -> None:
            super().__init__()
            dim_out = dim_out or dim
            head_dim = attn_head_dim
            if head_dim is None:
                assert dim % num_heads == 0, 'dim should be divisible by num_heads'
                head_dim = dim // num_heads
            if qk_norm or scale_norm:
                assert norm_layer is not None, 'norm_layer must be provided if qk_norm or scale_norm is True'

            self.num_heads = num_heads
            self.head_dim = head_dim
            self.attn_dim = num_heads * head_dim
            self.scale = head_dim ** -0.5
            self.fused_attn = fused_attn

            self.qkv = nn.Linear(dim, self.attn_dim * 3, bias=qkv_bias)
            self.q_norm = norm_layer(head_dim) if qk_norm else nn.Identity()
            self.k_norm = norm_layer(head_dim) if qk_norm else nn.Identity()
            self.attn_drop = nn.Dropout(attn_drop)
            self.norm = norm_layer(self.attn_dim) if scale_norm else nn.Identity()
            self.proj = nn.Linear(self.attn_dim, dim_out, bias=proj_bias)
            self.proj_drop = nn.Dropout(proj_drop)

        def forward(self, x: torch.Tensor, attn_mask: Optional[torch.Tensor] = None,
                    is_causal: bool = False) -> torch.Tensor:
            B, N, C = x.shape
            qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
            q, k, v = qkv.unbind(0)
            q, k = self.q_norm(q), self.k_norm(k)

            if self.fused_attn:
                x = F.scaled_dot_product_attention(
                    q, k, v,
                    attn_mask=attn_mask,
                    dropout_p=self.attn_drop.p if self.training else 0.,
                    is_causal=is_causal,
                )
            else:
                q = q * self.scale
                attn = q @ k.transpose(-2, -1)
                attn_bias = resolve_self_attn_mask(N, attn, attn_mask, is_causal)
                attn = maybe_add_mask(attn, attn_bias)
                attn = attn.softmax(dim=-1)
                attn = self.attn_drop(attn)
                x = attn @ v

            x = x.transpose(1, 2).reshape(B, N, self.attn_dim)
            x = self.norm(x)
            x = self.proj(x)
            x = self.proj_drop(x)
            return x

    # layers/layer_scale.py
    class LayerScale(nn.Module):
        def __init__(self, dim: int, init_values: float = 1e-5, inplace: bool = False) -> None:
            super().__init__()
            self.inplace = inplace
            self.gamma = nn.Parameter(init_values * torch.ones(dim))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.mul_(self.gamma) if self.inplace else x * self.gamma

    # models/vision_transformer.py
    class Block(nn.Module):
        """Transformer block with pre-normalization."""

        def __init__(self, dim: int, num_heads: int, mlp_ratio: float = 4., qkv_bias: bool = False,
                     qk_norm: bool = False, scale_attn_norm: bool = False, scale_mlp_norm: bool = False,
                     proj_bias: bool = True, proj_drop: float = 0., attn_drop: float = 0.,
                     init_values: Optional[float] = None, drop_path: float = 0., act_layer=nn.GELU,
                     norm_layer=LayerNorm, mlp_layer=Mlp, attn_layer=Attention, fused_attn=True) -> None:
            super().__init__()
            self.norm1 = norm_layer(dim)
            self.attn = attn_layer(
                dim,
                num_heads=num_heads,
                qkv_bias=qkv_bias,
                qk_norm=qk_norm,
                scale_norm=scale_attn_norm,
                proj_bias=proj_bias,
                attn_drop=attn_drop,
                proj_drop=proj_drop,
                norm_layer=norm_layer,
                fused_attn=fused_attn,
            )
            self.ls1 = LayerScale(dim, init_values=init_values) if init_values else nn.Identity()
            self.drop_path1 = DropPath(drop_path) if drop_path > 0. else nn.Identity()

            self.norm2 = norm_layer(dim)
            self.mlp = mlp_layer(
                in_features=dim,
                hidden_features=int(dim * mlp_ratio),
                act_layer=act_layer,
                norm_layer=norm_layer if scale_mlp_norm else None,
                bias=proj_bias,
                drop=proj_drop,
            )
            self.ls2 = LayerScale(dim, init_values=init_values) if init_values else nn.Identity()
            self.drop_path2 = DropPath(drop_path) if drop_path > 0. else nn.Identity()

        def forward(self, x: torch.Tensor, attn_mask: Optional[torch.Tensor] = None,
                    is_causal: bool = False) -> torch.Tensor:
            x = x + self.drop_path1(self.ls1(self.attn(self.norm1(x), attn_mask=attn_mask, is_causal=is_causal)))
            x = x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))
            return x

    # models/convnext.py
    class ConvNeXtBlock(nn.Module):
        def __init__(self, in_chs: int, out_chs: Optional[int] = None, kernel_size: int = 7, stride: int = 1,
                     dilation=(1, 1), mlp_ratio: float = 4, conv_mlp: bool = False, conv_bias: bool = True,
                     use_grn: bool = False, ls_init_value: Optional[float] = 1e-6, act_layer='gelu',
                     norm_layer=None, drop_path: float = 0.):
            super().__init__()
            out_chs = out_chs or in_chs
            dilation = to_2tuple(dilation)
            act_layer = nn.GELU  # get_act_layer('gelu')
            if not norm_layer:
                norm_layer = LayerNorm2d if conv_mlp else LayerNorm
            mlp_layer = partial(Mlp, use_conv=conv_mlp)
            self.use_conv_mlp = conv_mlp
            self.conv_dw = nn.Conv2d(  # create_conv2d(..., depthwise=True)
                in_chs,
                out_chs,
                kernel_size=kernel_size,
                stride=stride,
                dilation=dilation[0],
                padding=((stride - 1) + dilation[0] * (kernel_size - 1)) // 2,
                groups=in_chs,
                bias=conv_bias,
            )
            self.norm = norm_layer(out_chs)
            self.mlp = mlp_layer(out_chs, int(mlp_ratio * out_chs), act_layer=act_layer)
            self.gamma = nn.Parameter(ls_init_value * torch.ones(out_chs)) if ls_init_value is not None else None
            self.shortcut = nn.Identity()
            self.drop_path = DropPath(drop_path) if drop_path > 0. else nn.Identity()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            shortcut = x
            x = self.conv_dw(x)
            if self.use_conv_mlp:
                x = self.norm(x)
                x = self.mlp(x)
            else:
                x = x.permute(0, 2, 3, 1)
                x = self.norm(x)
                x = self.mlp(x)
                x = x.permute(0, 3, 1, 2)
            if self.gamma is not None:
                x = x.mul(self.gamma.reshape(1, -1, 1, 1))

            x = self.drop_path(x) + self.shortcut(shortcut)
            return x

    return SimpleNamespace(**{k: v for k, v in locals().items() if not k.startswith("__")})


def timm_train(torch):
    nn = torch.nn
    F = torch.nn.functional
    from copy import deepcopy
    from importlib import import_module
    Optimizer = import_module(torch.__name__ + ".optim.optimizer").Optimizer

    # loss/cross_entropy.py
    class LabelSmoothingCrossEntropy(nn.Module):
        """ NLL loss with label smoothing.
        """
        def __init__(self, smoothing=0.1):
            super(LabelSmoothingCrossEntropy, self).__init__()
            assert smoothing < 1.0
            self.smoothing = smoothing
            self.confidence = 1. - smoothing

        def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
            logprobs = F.log_softmax(x, dim=-1)
            nll_loss = -logprobs.gather(dim=-1, index=target.unsqueeze(1))
            nll_loss = nll_loss.squeeze(1)
            smooth_loss = -logprobs.mean(dim=-1)
            loss = self.confidence * nll_loss + self.smoothing * smooth_loss
            return loss.mean()

    class SoftTargetCrossEntropy(nn.Module):

        def __init__(self):
            super(SoftTargetCrossEntropy, self).__init__()

        def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
            loss = torch.sum(-target * F.log_softmax(x, dim=-1), dim=-1)
            return loss.mean()

    # loss/asymmetric_loss.py
    class AsymmetricLossMultiLabel(nn.Module):
        def __init__(self, gamma_neg: float = 4, gamma_pos: float = 1, clip: Optional[float] = 0.05,
                     eps: float = 1e-8, disable_torch_grad_focal_loss: bool = False, smoothing: float = 0.,
                     reduction: str = 'batchmean', weight: Optional[torch.Tensor] = None, pos_weight=None):
            super(AsymmetricLossMultiLabel, self).__init__()
            assert 0. <= smoothing < 1.
            if reduction not in ('batchmean', 'sum', 'mean', 'none'):
                raise ValueError(f"Unknown reduction '{reduction}', expected one of 'batchmean', 'sum', 'mean', 'none'.")

            self.gamma_neg = gamma_neg
            self.gamma_pos = gamma_pos
            self.clip = clip
            self.disable_torch_grad_focal_loss = disable_torch_grad_focal_loss
            self.eps = eps
            self.smoothing = smoothing
            self.reduction = reduction
            if pos_weight is not None and not isinstance(pos_weight, torch.Tensor):
                pos_weight = torch.tensor(pos_weight)
            self.register_buffer('weight', weight)
            self.register_buffer('pos_weight', pos_weight)

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            # Compute in float32, low precision (fp16) probabilities underflow the eps clamp and produce NaN.
            x = x.float()
            y = y.float()
            if self.smoothing:
                y = y * (1. - self.smoothing) + 0.5 * self.smoothing

            # Calculating Probabilities
            x_sigmoid = torch.sigmoid(x)
            xs_pos = x_sigmoid
            xs_neg = 1 - x_sigmoid

            # Asymmetric Clipping
            if self.clip is not None and self.clip > 0:
                xs_neg = (xs_neg + self.clip).clamp(max=1)

            # Basic CE calculation
            los_pos = y * torch.log(xs_pos.clamp(min=self.eps))
            if self.pos_weight is not None:
                los_pos = los_pos * self.pos_weight
            los_neg = (1 - y) * torch.log(xs_neg.clamp(min=self.eps))
            loss = los_pos + los_neg

            # Asymmetric Focusing
            if self.gamma_neg > 0 or self.gamma_pos > 0:
                with torch.set_grad_enabled(torch.is_grad_enabled() and not self.disable_torch_grad_focal_loss):
                    pt0 = xs_pos * y
                    pt1 = xs_neg * (1 - y)  # pt = p if t > 0 else 1-p
                    pt = pt0 + pt1
                    one_sided_gamma = self.gamma_pos * y + self.gamma_neg * (1 - y)
                    one_sided_w = torch.pow(1 - pt, one_sided_gamma)
                loss *= one_sided_w

            loss = -loss
            if self.weight is not None:
                loss = loss * self.weight
            if self.reduction == 'batchmean':
                return loss.sum() / x.shape[0]
            if self.reduction == 'sum':
                return loss.sum()
            if self.reduction == 'mean':
                return loss.mean()
            return loss

    class AsymmetricLossSingleLabel(nn.Module):
        def __init__(self, gamma_pos=1, gamma_neg=4, eps: float = 0.1, reduction='mean'):
            super(AsymmetricLossSingleLabel, self).__init__()

            self.eps = eps
            self.logsoftmax = nn.LogSoftmax(dim=-1)
            self.targets_classes = []  # prevent gpu repeated memory allocation
            self.gamma_pos = gamma_pos
            self.gamma_neg = gamma_neg
            self.reduction = reduction

        def forward(self, inputs, target, reduction=None):
            num_classes = inputs.size()[-1]
            log_preds = self.logsoftmax(inputs)
            self.targets_classes = torch.zeros_like(inputs).scatter_(1, target.long().unsqueeze(1), 1)

            # ASL weights
            targets = self.targets_classes
            anti_targets = 1 - targets
            xs_pos = torch.exp(log_preds)
            xs_neg = 1 - xs_pos
            xs_pos = xs_pos * targets
            xs_neg = xs_neg * anti_targets
            asymmetric_w = torch.pow(
                1 - xs_pos - xs_neg,
                self.gamma_pos * targets + self.gamma_neg * anti_targets,
            )
            log_preds = log_preds * asymmetric_w

            if self.eps > 0:  # label smoothing
                self.targets_classes = self.targets_classes.mul(1 - self.eps).add(self.eps / num_classes)

            # loss calculation
            loss = - self.targets_classes.mul(log_preds)

            loss = loss.sum(dim=-1)
            if self.reduction == 'mean':
                loss = loss.mean()

            return loss

    # data/mixup.py
    def one_hot(x, num_classes, on_value=1., off_value=0., device='cuda'):
        x = x.long().view(-1, 1)
        return torch.full((x.size()[0], num_classes), off_value, device=device).scatter_(1, x, on_value)

    def mixup_target(target, num_classes, lam=1., smoothing=0.0, device='cuda'):
        off_value = smoothing / num_classes
        on_value = 1. - smoothing + off_value
        y1 = one_hot(target, num_classes, on_value=on_value, off_value=off_value, device=device)
        y2 = one_hot(target.flip(0), num_classes, on_value=on_value, off_value=off_value, device=device)
        return y1 * lam + y2 * (1. - lam)

    def rand_bbox(img_shape, lam, margin=0., count=None):
        ratio = np.sqrt(1 - lam)
        img_h, img_w = img_shape[-2:]
        cut_h, cut_w = int(img_h * ratio), int(img_w * ratio)
        margin_y, margin_x = int(margin * cut_h), int(margin * cut_w)
        cy = np.random.randint(0 + margin_y, img_h - margin_y, size=count)
        cx = np.random.randint(0 + margin_x, img_w - margin_x, size=count)
        yl = np.clip(cy - cut_h // 2, 0, img_h)
        yh = np.clip(cy + cut_h // 2, 0, img_h)
        xl = np.clip(cx - cut_w // 2, 0, img_w)
        xh = np.clip(cx + cut_w // 2, 0, img_w)
        return yl, yh, xl, xh

    def rand_bbox_minmax(img_shape, minmax, count=None):
        assert len(minmax) == 2
        img_h, img_w = img_shape[-2:]
        cut_h = np.random.randint(int(img_h * minmax[0]), int(img_h * minmax[1]), size=count)
        cut_w = np.random.randint(int(img_w * minmax[0]), int(img_w * minmax[1]), size=count)
        yl = np.random.randint(0, img_h - cut_h, size=count)
        xl = np.random.randint(0, img_w - cut_w, size=count)
        yu = yl + cut_h
        xu = xl + cut_w
        return yl, yu, xl, xu

    def cutmix_bbox_and_lam(img_shape, lam, ratio_minmax=None, correct_lam=True, count=None):
        if ratio_minmax is not None:
            yl, yu, xl, xu = rand_bbox_minmax(img_shape, ratio_minmax, count=count)
        else:
            yl, yu, xl, xu = rand_bbox(img_shape, lam, count=count)
        if correct_lam or ratio_minmax is not None:
            bbox_area = (yu - yl) * (xu - xl)
            lam = 1. - bbox_area / float(img_shape[-2] * img_shape[-1])
        return (yl, yu, xl, xu), lam

    class Mixup:
        def __init__(self, mixup_alpha=1., cutmix_alpha=0., cutmix_minmax=None, prob=1.0, switch_prob=0.5,
                     mode='batch', correct_lam=True, label_smoothing=0., num_classes=0):
            assert num_classes > 0, 'num_classes must be set for target generation'
            self.mixup_alpha = mixup_alpha
            self.cutmix_alpha = cutmix_alpha
            self.cutmix_minmax = cutmix_minmax
            if self.cutmix_minmax is not None:
                assert len(self.cutmix_minmax) == 2
                # force cutmix alpha == 1.0 when minmax active to keep logic simple & safe
                self.cutmix_alpha = 1.0
            self.mix_prob = prob
            self.switch_prob = switch_prob
            self.label_smoothing = label_smoothing
            self.num_classes = num_classes
            self.mode = mode
            self.correct_lam = correct_lam  # correct lambda based on clipped area for cutmix
            self.mixup_enabled = True  # set to false to disable mixing (intended tp be set by train loop)

        def _params_per_elem(self, batch_size):
            lam = np.ones(batch_size, dtype=np.float32)
            use_cutmix = np.zeros(batch_size, dtype=bool)
            if self.mixup_enabled:
                if self.mixup_alpha > 0. and self.cutmix_alpha > 0.:
                    use_cutmix = np.random.rand(batch_size) < self.switch_prob
                    lam_mix = np.where(
                        use_cutmix,
                        np.random.beta(self.cutmix_alpha, self.cutmix_alpha, size=batch_size),
                        np.random.beta(self.mixup_alpha, self.mixup_alpha, size=batch_size))
                elif self.mixup_alpha > 0.:
                    lam_mix = np.random.beta(self.mixup_alpha, self.mixup_alpha, size=batch_size)
                elif self.cutmix_alpha > 0.:
                    use_cutmix = np.ones(batch_size, dtype=bool)
                    lam_mix = np.random.beta(self.cutmix_alpha, self.cutmix_alpha, size=batch_size)
                else:
                    assert False, "One of mixup_alpha > 0., cutmix_alpha > 0., cutmix_minmax not None should be true."
                lam = np.where(np.random.rand(batch_size) < self.mix_prob, lam_mix.astype(np.float32), lam)
            return lam, use_cutmix

        def _params_per_batch(self):
            lam = 1.
            use_cutmix = False
            if self.mixup_enabled and np.random.rand() < self.mix_prob:
                if self.mixup_alpha > 0. and self.cutmix_alpha > 0.:
                    use_cutmix = np.random.rand() < self.switch_prob
                    lam_mix = np.random.beta(self.cutmix_alpha, self.cutmix_alpha) if use_cutmix else \
                        np.random.beta(self.mixup_alpha, self.mixup_alpha)
                elif self.mixup_alpha > 0.:
                    lam_mix = np.random.beta(self.mixup_alpha, self.mixup_alpha)
                elif self.cutmix_alpha > 0.:
                    use_cutmix = True
                    lam_mix = np.random.beta(self.cutmix_alpha, self.cutmix_alpha)
                else:
                    assert False, "One of mixup_alpha > 0., cutmix_alpha > 0., cutmix_minmax not None should be true."
                lam = float(lam_mix)
            return lam, use_cutmix

        def _mix_elem(self, x):
            batch_size = len(x)
            lam_batch, use_cutmix = self._params_per_elem(batch_size)
            x_orig = x.clone()  # need to keep an unmodified original for mixing source
            for i in range(batch_size):
                j = batch_size - i - 1
                lam = lam_batch[i]
                if lam != 1.:
                    if use_cutmix[i]:
                        (yl, yh, xl, xh), lam = cutmix_bbox_and_lam(
                            x[i].shape, lam, ratio_minmax=self.cutmix_minmax, correct_lam=self.correct_lam)
                        x[i][:, yl:yh, xl:xh] = x_orig[j][:, yl:yh, xl:xh]
                        lam_batch[i] = lam
                    else:
                        x[i] = x[i] * lam + x_orig[j] * (1 - lam)
            return torch.tensor(lam_batch, device=x.device, dtype=x.dtype).unsqueeze(1)

        def _mix_pair(self, x):
            batch_size = len(x)
            lam_batch, use_cutmix = self._params_per_elem(batch_size // 2)
            x_orig = x.clone()  # need to keep an unmodified original for mixing source
            for i in range(batch_size // 2):
                j = batch_size - i - 1
                lam = lam_batch[i]
                if lam != 1.:
                    if use_cutmix[i]:
                        (yl, yh, xl, xh), lam = cutmix_bbox_and_lam(
                            x[i].shape, lam, ratio_minmax=self.cutmix_minmax, correct_lam=self.correct_lam)
                        x[i][:, yl:yh, xl:xh] = x_orig[j][:, yl:yh, xl:xh]
                        x[j][:, yl:yh, xl:xh] = x_orig[i][:, yl:yh, xl:xh]
                        lam_batch[i] = lam
                    else:
                        x[i] = x[i] * lam + x_orig[j] * (1 - lam)
                        x[j] = x[j] * lam + x_orig[i] * (1 - lam)
            lam_batch = np.concatenate((lam_batch, lam_batch[::-1]))
            return torch.tensor(lam_batch, device=x.device, dtype=x.dtype).unsqueeze(1)

        def _mix_batch(self, x):
            lam, use_cutmix = self._params_per_batch()
            if lam == 1.:
                return 1.
            if use_cutmix:
                (yl, yh, xl, xh), lam = cutmix_bbox_and_lam(
                    x.shape, lam, ratio_minmax=self.cutmix_minmax, correct_lam=self.correct_lam)
                x[:, :, yl:yh, xl:xh] = x.flip(0)[:, :, yl:yh, xl:xh]
            else:
                x_flipped = x.flip(0).mul_(1. - lam)
                x.mul_(lam).add_(x_flipped)
            return lam

        def __call__(self, x, target):
            assert len(x) % 2 == 0, 'Batch size should be even when using this'
            if self.mode == 'elem':
                lam = self._mix_elem(x)
            elif self.mode == 'pair':
                lam = self._mix_pair(x)
            else:
                lam = self._mix_batch(x)
            target = mixup_target(target, self.num_classes, lam, self.label_smoothing, x.device)
            return x, target

    # utils/model_ema.py
    class ModelEmaV2(nn.Module):
        def __init__(self, model, decay=0.9999, device=None):
            super().__init__()
            # make a copy of the model for accumulating moving average of weights
            self.module = deepcopy(model)
            self.module.eval()
            self.decay = decay
            self.device = device  # perform ema on different device from model if set
            if self.device is not None:
                self.module.to(device=device)

        def _update(self, model, update_fn):
            with torch.no_grad():
                for ema_v, model_v in zip(self.module.state_dict().values(), model.state_dict().values()):
                    if self.device is not None:
                        model_v = model_v.to(device=self.device)
                    ema_v.copy_(update_fn(ema_v, model_v))

        def update(self, model):
            self._update(model, update_fn=lambda e, m: self.decay * e + (1. - self.decay) * m)

        def set(self, model):
            self._update(model, update_fn=lambda e, m: m)

        def forward(self, *args, **kwargs):
            return self.module(*args, **kwargs)

    class ModelEmaV3(nn.Module):
        def __init__(self, model, decay: float = 0.9999, min_decay: float = 0.0, update_after_step: int = 0,
                     use_warmup: bool = False, warmup_gamma: float = 1.0, warmup_power: float = 2/3,
                     device=None, foreach: bool = True, exclude_buffers: bool = False):
            super().__init__()
            # make a copy of the model for accumulating moving average of weights
            self.module = deepcopy(model)
            self.module.eval()
            self.decay = decay
            self.min_decay = min_decay
            self.update_after_step = update_after_step
            self.use_warmup = use_warmup
            self.warmup_gamma = warmup_gamma
            self.warmup_power = warmup_power
            self.foreach = foreach
            self.device = device  # perform ema on different device from model if set
            self.exclude_buffers = exclude_buffers
            if self.device is not None and device != next(model.parameters()).device:
                self.foreach = False  # cannot use foreach methods with different devices
                self.module.to(device=device)

        def get_decay(self, step: Optional[int] = None) -> float:
            """
            Compute the decay factor for the exponential moving average.
            """
            if step is None:
                return self.decay

            step = max(0, step - self.update_after_step - 1)
            if step <= 0:
                return 0.0

            if self.use_warmup:
                decay = 1 - (1 + step / self.warmup_gamma) ** -self.warmup_power
                decay = max(min(decay, self.decay), self.min_decay)
            else:
                decay = self.decay

            return decay

        @torch.no_grad()
        def update(self, model, step: Optional[int] = None):
            decay = self.get_decay(step)
            if self.exclude_buffers:
                self.apply_update_no_buffers_(model, decay)
            else:
                self.apply_update_(model, decay)

        def apply_update_(self, model, decay: float):
            # interpolate parameters and buffers
            if self.foreach:
                ema_lerp_values = []
                model_lerp_values = []
                for ema_v, model_v in zip(self.module.state_dict().values(), model.state_dict().values()):
                    if ema_v.is_floating_point():
                        ema_lerp_values.append(ema_v)
                        model_lerp_values.append(model_v)
                    else:
                        ema_v.copy_(model_v)

                if hasattr(torch, '_foreach_lerp_'):
                    torch._foreach_lerp_(ema_lerp_values, model_lerp_values, weight=1. - decay)
                else:
                    torch._foreach_mul_(ema_lerp_values, scalar=decay)
                    torch._foreach_add_(ema_lerp_values, model_lerp_values, alpha=1. - decay)
            else:
                for ema_v, model_v in zip(self.module.state_dict().values(), model.state_dict().values()):
                    if ema_v.is_floating_point():
                        ema_v.lerp_(model_v.to(device=self.device), weight=1. - decay)
                    else:
                        ema_v.copy_(model_v.to(device=self.device))

        def apply_update_no_buffers_(self, model, decay: float):
            # interpolate parameters, copy buffers
            ema_params = tuple(self.module.parameters())
            model_params = tuple(model.parameters())
            if self.foreach:
                if hasattr(torch, '_foreach_lerp_'):
                    torch._foreach_lerp_(ema_params, model_params, weight=1. - decay)
                else:
                    torch._foreach_mul_(ema_params, scalar=decay)
                    torch._foreach_add_(ema_params, model_params, alpha=1 - decay)
            else:
                for ema_p, model_p in zip(ema_params, model_params):
                    ema_p.lerp_(model_p.to(device=self.device), weight=1. - decay)

            for ema_b, model_b in zip(self.module.buffers(), model.buffers()):
                ema_b.copy_(model_b.to(device=self.device))

        @torch.no_grad()
        def set(self, model):
            for ema_v, model_v in zip(self.module.state_dict().values(), model.state_dict().values()):
                ema_v.copy_(model_v.to(device=self.device))

        def forward(self, *args, **kwargs):
            return self.module(*args, **kwargs)

    # scheduler/scheduler.py
    class Scheduler:
        def __init__(self, optimizer: torch.optim.Optimizer, param_group_field: str, t_in_epochs: bool = True,
                     noise_range_t=None, noise_type='normal', noise_pct=0.67, noise_std=1.0, noise_seed=None,
                     initialize: bool = True) -> None:
            self.optimizer = optimizer
            self.param_group_field = param_group_field
            self._initial_param_group_field = f"initial_{param_group_field}"
            if initialize:
                for i, group in enumerate(self.optimizer.param_groups):
                    if param_group_field not in group:
                        raise KeyError(f"{param_group_field} missing from param_groups[{i}]")
                    group.setdefault(self._initial_param_group_field, group[param_group_field])
            else:
                for i, group in enumerate(self.optimizer.param_groups):
                    if self._initial_param_group_field not in group:
                        raise KeyError(f"{self._initial_param_group_field} missing from param_groups[{i}]")
            self.base_values = [group[self._initial_param_group_field] for group in self.optimizer.param_groups]
            self.metric = None  # any point to having this for all?
            self.t_in_epochs = t_in_epochs
            self.noise_range_t = noise_range_t
            self.noise_pct = noise_pct
            self.noise_type = noise_type
            self.noise_std = noise_std
            self.noise_seed = noise_seed if noise_seed is not None else 42
            self.update_groups(self.base_values)

        def state_dict(self):
            return {key: value for key, value in self.__dict__.items() if key != 'optimizer'}

        def load_state_dict(self, state_dict) -> None:
            self.__dict__.update(state_dict)

        def _get_lr(self, t: int) -> List[float]:
            pass

        def _get_values(self, t: int, on_epoch: bool = True) -> Optional[List[float]]:
            proceed = (on_epoch and self.t_in_epochs) or (not on_epoch and not self.t_in_epochs)
            if not proceed:
                return None
            return self._get_lr(t)

        def step(self, epoch: int, metric: Optional[float] = None) -> None:
            self.metric = metric
            values = self._get_values(epoch, on_epoch=True)
            if values is not None:
                values = self._add_noise(values, epoch)
                self.update_groups(values)

        def step_update(self, num_updates: int, metric: Optional[float] = None) -> None:
            self.metric = metric
            values = self._get_values(num_updates, on_epoch=False)
            if values is not None:
                values = self._add_noise(values, num_updates)
                self.update_groups(values)

        def update_groups(self, values):
            if not isinstance(values, (list, tuple)):
                values = [values] * len(self.optimizer.param_groups)
            for param_group, value in zip(self.optimizer.param_groups, values):
                param_group[self.param_group_field] = value

        def _add_noise(self, lrs, t):
            if self.noise_range_t is not None:
                if isinstance(self.noise_range_t, (list, tuple)):
                    apply_noise = self.noise_range_t[0] <= t < self.noise_range_t[1]
                else:
                    apply_noise = t >= self.noise_range_t
                if apply_noise:
                    g = torch.Generator()
                    g.manual_seed(self.noise_seed + t)
                    if self.noise_type == 'normal':
                        while True:
                            # resample if noise out of percent limit, brute force but shouldn't spin much
                            noise = torch.randn(1, generator=g).item()
                            if abs(noise) < self.noise_pct:
                                break
                    else:
                        noise = 2 * (torch.rand(1, generator=g).item() - 0.5) * self.noise_pct
                    lrs = [v + v * noise for v in lrs]
            return lrs

    # scheduler/cosine_lr.py
    class CosineLRScheduler(Scheduler):
        def __init__(self, optimizer: torch.optim.Optimizer, t_initial: int, lr_min: float = 0.,
                     cycle_mul: float = 1., cycle_decay: float = 1., cycle_limit: int = 1, warmup_t=0,
                     warmup_lr_init=0, warmup_prefix=False, t_in_epochs=True, noise_range_t=None,
                     noise_pct=0.67, noise_std=1.0, noise_seed=42, k_decay=1.0, initialize=True) -> None:
            super().__init__(
                optimizer,
                param_group_field="lr",
                t_in_epochs=t_in_epochs,
                noise_range_t=noise_range_t,
                noise_pct=noise_pct,
                noise_std=noise_std,
                noise_seed=noise_seed,
                initialize=initialize,
            )

            assert t_initial > 0
            assert lr_min >= 0
            self.t_initial = t_initial
            self.lr_min = lr_min
            self.cycle_mul = cycle_mul
            self.cycle_decay = cycle_decay
            self.cycle_limit = cycle_limit
            self.warmup_t = warmup_t
            self.warmup_lr_init = warmup_lr_init
            self.warmup_prefix = warmup_prefix
            self.k_decay = k_decay
            if self.warmup_t:
                self.warmup_steps = [(v - warmup_lr_init) / self.warmup_t for v in self.base_values]
                super().update_groups(self.warmup_lr_init)
            else:
                self.warmup_steps = [1 for _ in self.base_values]

        def _get_lr(self, t):
            if t < self.warmup_t:
                lrs = [self.warmup_lr_init + t * s for s in self.warmup_steps]
            else:
                if self.warmup_prefix:
                    t = t - self.warmup_t

                if self.cycle_mul != 1:
                    i = math.floor(math.log(1 - t / self.t_initial * (1 - self.cycle_mul), self.cycle_mul))
                    t_i = self.cycle_mul ** i * self.t_initial
                    t_curr = t - (1 - self.cycle_mul ** i) / (1 - self.cycle_mul) * self.t_initial
                else:
                    i = t // self.t_initial
                    t_i = self.t_initial
                    t_curr = t - (self.t_initial * i)

                gamma = self.cycle_decay ** i
                lr_max_values = [v * gamma for v in self.base_values]
                k = self.k_decay

                if i < self.cycle_limit:
                    lrs = [
                        self.lr_min + 0.5 * (lr_max - self.lr_min) * (1 + math.cos(math.pi * t_curr ** k / t_i ** k))
                        for lr_max in lr_max_values
                    ]
                else:
                    lrs = [self.lr_min for _ in self.base_values]

            return lrs

        def get_cycle_length(self, cycles=0):
            cycles = max(1, cycles or self.cycle_limit)
            if self.cycle_mul == 1.0:
                return self.t_initial * cycles
            else:
                return int(math.floor(-self.t_initial * (self.cycle_mul ** cycles - 1) / (1 - self.cycle_mul)))

    # optim/lamb.py (the 2021 text: one loop, torch.where on device scalars)
    class Lamb(Optimizer):
        def __init__(
                self, params, lr=1e-3, bias_correction=True, betas=(0.9, 0.999), eps=1e-6,
                weight_decay=0.01, grad_averaging=True, max_grad_norm=1.0, trust_clip=False, always_adapt=False):
            defaults = dict(
                lr=lr, bias_correction=bias_correction, betas=betas, eps=eps, weight_decay=weight_decay,
                grad_averaging=grad_averaging, max_grad_norm=max_grad_norm,
                trust_clip=trust_clip, always_adapt=always_adapt)
            super().__init__(params, defaults)

        @torch.no_grad()
        def step(self, closure=None):
            loss = None
            if closure is not None:
                with torch.enable_grad():
                    loss = closure()

            device = self.param_groups[0]['params'][0].device
            one_tensor = torch.tensor(1.0, device=device)  # because torch.where doesn't handle scalars correctly
            global_grad_norm = torch.zeros(1, device=device)
            for group in self.param_groups:
                for p in group['params']:
                    if p.grad is None:
                        continue
                    grad = p.grad
                    if grad.is_sparse:
                        raise RuntimeError('Lamb does not support sparse gradients, consider SparseAdam instad.')
                    global_grad_norm.add_(grad.pow(2).sum())

            global_grad_norm = torch.sqrt(global_grad_norm)
            # FIXME it'd be nice to remove explicit tensor conversion of scalars when torch.where promotes
            # scalar types properly https://github.com/pytorch/pytorch/issues/9190
            max_grad_norm = torch.tensor(self.defaults['max_grad_norm'], device=device)
            clip_global_grad_norm = torch.where(
                global_grad_norm > max_grad_norm,
                global_grad_norm / max_grad_norm,
                one_tensor)

            for group in self.param_groups:
                bias_correction = 1 if group['bias_correction'] else 0
                beta1, beta2 = group['betas']
                grad_averaging = 1 if group['grad_averaging'] else 0
                beta3 = 1 - beta1 if grad_averaging else 1.0

                # assume same step across group now to simplify things
                # per parameter step can be easily support by making it tensor, or pass list into kernel
                if 'step' in group:
                    group['step'] += 1
                else:
                    group['step'] = 1

                if bias_correction:
                    bias_correction1 = 1 - beta1 ** group['step']
                    bias_correction2 = 1 - beta2 ** group['step']
                else:
                    bias_correction1, bias_correction2 = 1.0, 1.0

                for p in group['params']:
                    if p.grad is None:
                        continue
                    grad = p.grad.div_(clip_global_grad_norm)
                    state = self.state[p]

                    # State initialization
                    if len(state) == 0:
                        # Exponential moving average of gradient valuesa
                        state['exp_avg'] = torch.zeros_like(p)
                        # Exponential moving average of squared gradient values
                        state['exp_avg_sq'] = torch.zeros_like(p)

                    exp_avg, exp_avg_sq = state['exp_avg'], state['exp_avg_sq']

                    # Decay the first and second moment running average coefficient
                    exp_avg.mul_(beta1).add_(grad, alpha=beta3)  # m_t
                    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)  # v_t

                    denom = (exp_avg_sq.sqrt() / math.sqrt(bias_correction2)).add_(group['eps'])
                    update = (exp_avg / bias_correction1).div_(denom)

                    weight_decay = group['weight_decay']
                    if weight_decay != 0:
                        update.add_(p, alpha=weight_decay)

                    if weight_decay != 0 or group['always_adapt']:
                        # Layer-wise LR adaptation. By default, skip adaptation on parameters that are
                        # excluded from weight decay, unless always_adapt == True, then always enabled.
                        w_norm = p.norm(2.0)
                        g_norm = update.norm(2.0)
                        # FIXME nested where required since logical and/or not working in PT XLA
                        trust_ratio = torch.where(
                            w_norm > 0,
                            torch.where(g_norm > 0, w_norm / g_norm, one_tensor),
                            one_tensor,
                        )
                        if group['trust_clip']:
                            # LAMBC trust clipping, upper bound fixed at one
                            trust_ratio = torch.minimum(trust_ratio, one_tensor)
                        update.mul_(trust_ratio)

                    p.add_(update, alpha=-group['lr'])

            return loss

    # optim/lion.py
    class Lion(Optimizer):
        def __init__(self, params, lr: float = 1e-4, betas: Tuple[float, float] = (0.9, 0.99),
                     weight_decay: float = 0.0, caution: bool = False, maximize: bool = False,
                     foreach: Optional[bool] = None):
            if not 0.0 <= lr:
                raise ValueError('Invalid learning rate: {}'.format(lr))
            if not 0.0 <= betas[0] < 1.0:
                raise ValueError('Invalid beta parameter at index 0: {}'.format(betas[0]))
            if not 0.0 <= betas[1] < 1.0:
                raise ValueError('Invalid beta parameter at index 1: {}'.format(betas[1]))
            defaults = dict(
                lr=lr,
                betas=betas,
                weight_decay=weight_decay,
                caution=caution,
                foreach=foreach,
                maximize=maximize,
            )
            super().__init__(params, defaults)

        def __setstate__(self, state):
            super().__setstate__(state)
            for group in self.param_groups:
                group.setdefault('caution', False)
                group.setdefault('maximize', False)
                group.setdefault('foreach', None)

        @torch.no_grad()
        def step(self, closure=None):
            loss = None
            if closure is not None:
                with torch.enable_grad():
                    loss = closure()

            for group in self.param_groups:
                params_with_grad = []
                grads = []
                exp_avgs = []
                beta1, beta2 = group['betas']

                for p in group['params']:
                    if p.grad is None:
                        continue
                    params_with_grad.append(p)
                    if p.grad.is_sparse:
                        raise RuntimeError('Lion does not support sparse gradients')
                    grads.append(p.grad)

                    state = self.state[p]

                    # State initialization
                    if len(state) == 0:
                        state['exp_avg'] = torch.zeros_like(p, memory_format=torch.preserve_format)

                    exp_avgs.append(state['exp_avg'])

                lion(
                    params_with_grad,
                    grads,
                    exp_avgs,
                    beta1=beta1,
                    beta2=beta2,
                    lr=group['lr'],
                    weight_decay=group['weight_decay'],
                    caution=group['caution'],
                    maximize=group['maximize'],
                    foreach=group['foreach'],
                )

            return loss

    def lion(params: List[torch.Tensor], grads: List[torch.Tensor], exp_avgs: List[torch.Tensor],
             maximize: bool = False, foreach: bool = None, *, beta1: float, beta2: float, lr: float,
             weight_decay: float, caution: bool):
        if foreach is None:
            # Placeholder for more complex foreach logic to be added when value is not set
            foreach = True

        if foreach and torch.jit.is_scripting():
            raise RuntimeError('torch.jit.script not supported with foreach optimizers')

        if foreach and not torch.jit.is_scripting():
            func = _multi_tensor_lion
        else:
            func = _single_tensor_lion

        func(
            params,
            grads,
            exp_avgs,
            beta1=beta1,
            beta2=beta2,
            lr=lr,
            weight_decay=weight_decay,
            caution=caution,
            maximize=maximize,
        )

    def _single_tensor_lion(params, grads, exp_avgs, *, beta1: float, beta2: float, lr: float,
                            weight_decay: float, caution: bool, maximize: bool):
        for i, param in enumerate(params):
            grad = grads[i] if not maximize else -grads[i]
            exp_avg = exp_avgs[i]

            if torch.is_complex(param):
                grad = torch.view_as_real(grad)
                exp_avg = torch.view_as_real(exp_avg)
                param = torch.view_as_real(param)

            # Perform stepweight decay
            param.mul_(1 - lr * weight_decay)

            # Weight update
            update = exp_avg.mul(beta1).add_(grad, alpha=1 - beta1).sign_()

            if caution:
                # Apply caution as per 'Cautious Optimizers' - https://arxiv.org/abs/2411.16085
                mask = (update * grad > 0).to(grad.dtype)
                mask.div_(mask.mean().clamp_(min=1e-3))
                update.mul_(mask)

            param.add_(update, alpha=-lr)

            # Decay the momentum running average coefficient
            exp_avg.lerp_(grad, 1 - beta2)

    def _multi_tensor_lion(params, grads, exp_avgs, *, beta1: float, beta2: float, lr: float,
                           weight_decay: float, caution: bool, maximize: bool):
        if len(params) == 0:
            return

        if maximize:
            grads = torch._foreach_neg(tuple(grads))  # type: ignore[assignment]

        grads = [torch.view_as_real(x) if torch.is_complex(x) else x for x in grads]
        exp_avgs = [torch.view_as_real(x) if torch.is_complex(x) else x for x in exp_avgs]
        params = [torch.view_as_real(x) if torch.is_complex(x) else x for x in params]

        # Perform stepweight decay
        torch._foreach_mul_(params, 1 - lr * weight_decay)

        # Weight update
        updates = torch._foreach_mul(exp_avgs, beta1)
        torch._foreach_add_(updates, grads, alpha=1 - beta1)
        updates = [u.sign_() for u in updates]

        if caution:
            # Apply caution as per 'Cautious Optimizers' - https://arxiv.org/abs/2411.16085
            masks = torch._foreach_mul(updates, grads)
            masks = [(m > 0).to(g.dtype) for m, g in zip(masks, grads)]
            mask_scale = [m.mean() for m in masks]
            torch._foreach_maximum_(mask_scale, 1e-3)
            torch._foreach_div_(masks, mask_scale)
            torch._foreach_mul_(updates, masks)

        torch._foreach_add_(params, updates, alpha=-lr)

        # Decay the momentum running average coefficient
        torch._foreach_mul_(exp_avgs, beta2)
        torch._foreach_add_(exp_avgs, grads, alpha=1 - beta2)

    return SimpleNamespace(**{k: v for k, v in locals().items() if not k.startswith("__")})


# --------------------------------------------------------------------------------------------
# DETR
# --------------------------------------------------------------------------------------------
def detr_page(torch):
    nn = torch.nn
    F = torch.nn.functional
    Tensor = torch.Tensor

    # torchvision.ops.boxes.box_area
    def box_area(boxes: Tensor) -> Tensor:
        return (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])

    # util/box_ops.py
    def box_cxcywh_to_xyxy(x):
        x_c, y_c, w, h = x.unbind(-1)
        b = [(x_c - 0.5 * w), (y_c - 0.5 * h),
             (x_c + 0.5 * w), (y_c + 0.5 * h)]
        return torch.stack(b, dim=-1)

    def box_xyxy_to_cxcywh(x):
        x0, y0, x1, y1 = x.unbind(-1)
        b = [(x0 + x1) / 2, (y0 + y1) / 2,
             (x1 - x0), (y1 - y0)]
        return torch.stack(b, dim=-1)

    # modified from torchvision to also return the union
    def box_iou(boxes1, boxes2):
        area1 = box_area(boxes1)
        area2 = box_area(boxes2)

        lt = torch.max(boxes1[:, None, :2], boxes2[:, :2])  # [N,M,2]
        rb = torch.min(boxes1[:, None, 2:], boxes2[:, 2:])  # [N,M,2]

        wh = (rb - lt).clamp(min=0)  # [N,M,2]
        inter = wh[:, :, 0] * wh[:, :, 1]  # [N,M]

        union = area1[:, None] + area2 - inter

        iou = inter / union
        return iou, union

    def generalized_box_iou(boxes1, boxes2):
        """
        Generalized IoU from https://giou.stanford.edu/

        The boxes should be in [x0, y0, x1, y1] format

        Returns a [N, M] pairwise matrix, where N = len(boxes1)
        and M = len(boxes2)
        """
        # degenerate boxes gives inf / nan results
        # so do an early check
        assert (boxes1[:, 2:] >= boxes1[:, :2]).all()
        assert (boxes2[:, 2:] >= boxes2[:, :2]).all()
        iou, union = box_iou(boxes1, boxes2)

        lt = torch.min(boxes1[:, None, :2], boxes2[:, :2])
        rb = torch.max(boxes1[:, None, 2:], boxes2[:, 2:])

        wh = (rb - lt).clamp(min=0)  # [N,M,2]
        area = wh[:, :, 0] * wh[:, :, 1]

        return iou - (area - union) / area

    def masks_to_boxes(masks):
        """Compute the bounding boxes around the provided masks

        The masks should be in format [N, H, W] where N is the number of masks, (H, W) are the spatial dimensions.

        Returns a [N, 4] tensors, with the boxes in xyxy format
        """
        if masks.numel() == 0:
            return torch.zeros((0, 4), device=masks.device)

        h, w = masks.shape[-2:]

        y = torch.arange(0, h, dtype=torch.float)
        x = torch.arange(0, w, dtype=torch.float)
        y, x = torch.meshgrid(y, x)

        x_mask = (masks * x.unsqueeze(0))
        x_max = x_mask.flatten(1).max(-1)[0]
        x_min = x_mask.masked_fill(~(masks.bool()), 1e8).flatten(1).min(-1)[0]

        y_mask = (masks * y.unsqueeze(0))
        y_max = y_mask.flatten(1).max(-1)[0]
        y_min = y_mask.masked_fill(~(masks.bool()), 1e8).flatten(1).min(-1)[0]

        return torch.stack([x_min, y_min, x_max, y_max], 1)

    # util/misc.py
    class NestedTensor(object):
        def __init__(self, tensors, mask: Optional[Tensor]):
            self.tensors = tensors
            self.mask = mask

        def decompose(self):
            return self.tensors, self.mask

    def _max_by_axis(the_list):
        # type: (List[List[int]]) -> List[int]
        maxes = the_list[0]
        for sublist in the_list[1:]:
            for index, item in enumerate(sublist):
                maxes[index] = max(maxes[index], item)
        return maxes

    def nested_tensor_from_tensor_list(tensor_list: List[Tensor]):
        if tensor_list[0].ndim == 3:
            max_size = _max_by_axis([list(img.shape) for img in tensor_list])
            batch_shape = [len(tensor_list)] + max_size
            b, c, h, w = batch_shape
            dtype = tensor_list[0].dtype
            device = tensor_list[0].device
            tensor = torch.zeros(batch_shape, dtype=dtype, device=device)
            mask = torch.ones((b, h, w), dtype=torch.bool, device=device)
            for img, pad_img, m in zip(tensor_list, tensor, mask):
                pad_img[: img.shape[0], : img.shape[1], : img.shape[2]].copy_(img)
                m[: img.shape[1], :img.shape[2]] = False
        else:
            raise ValueError('not supported')
        return NestedTensor(tensor, mask)

    @torch.no_grad()
    def accuracy(output, target, topk=(1,)):
        """Computes the precision@k for the specified values of k"""
        if target.numel() == 0:
            return [torch.zeros([], device=output.device)]
        maxk = max(topk)
        batch_size = target.size(0)

        _, pred = output.topk(maxk, 1, True, True)
        pred = pred.t()
        correct = pred.eq(target.view(1, -1).expand_as(pred))

        res = []
        for k in topk:
            correct_k = correct[:k].view(-1).float().sum(0)
            res.append(correct_k.mul_(100.0 / batch_size))
        return res

    def is_dist_avail_and_initialized():
        return False

    def get_world_size():
        return 1

    # models/position_encoding.py
    class PositionEmbeddingSine(nn.Module):
        def __init__(self, num_pos_feats=64, temperature=10000, normalize=False, scale=None):
            super().__init__()
            self.num_pos_feats = num_pos_feats
            self.temperature = temperature
            self.normalize = normalize
            if scale is not None and normalize is False:
                raise ValueError("normalize should be True if scale is passed")
            if scale is None:
                scale = 2 * math.pi
            self.scale = scale

        def forward(self, tensor_list: NestedTensor):
            x = tensor_list.tensors
            mask = tensor_list.mask
            assert mask is not None
            not_mask = ~mask
            y_embed = not_mask.cumsum(1, dtype=torch.float32)
            x_embed = not_mask.cumsum(2, dtype=torch.float32)
            if self.normalize:
                eps = 1e-6
                y_embed = y_embed / (y_embed[:, -1:, :] + eps) * self.scale
                x_embed = x_embed / (x_embed[:, :, -1:] + eps) * self.scale

            dim_t = torch.arange(self.num_pos_feats, dtype=torch.float32, device=x.device)
            dim_t = self.temperature ** (2 * (dim_t // 2) / self.num_pos_feats)

            pos_x = x_embed[:, :, :, None] / dim_t
            pos_y = y_embed[:, :, :, None] / dim_t
            pos_x = torch.stack((pos_x[:, :, :, 0::2].sin(), pos_x[:, :, :, 1::2].cos()), dim=4).flatten(3)
            pos_y = torch.stack((pos_y[:, :, :, 0::2].sin(), pos_y[:, :, :, 1::2].cos()), dim=4).flatten(3)
            pos = torch.cat((pos_y, pos_x), dim=3).permute(0, 3, 1, 2)
            return pos

    # models/backbone.py, stand-in: a two-layer conv stack replaces the torchvision ResNet body
    class ConvStackBody(nn.Module):
        def __init__(self, num_channels):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 4, 3, stride=2, padding=1)
            self.conv2 = nn.Conv2d(4, num_channels, 3, stride=2, padding=1)

        def forward(self, x):
            return {"0": self.conv2(F.relu(self.conv1(x)))}

    class BackboneBase(nn.Module):
        def __init__(self, body, num_channels: int):
            super().__init__()
            self.body = body
            self.num_channels = num_channels

        def forward(self, tensor_list: NestedTensor):
            xs = self.body(tensor_list.tensors)
            out = {}
            for name, x in xs.items():
                m = tensor_list.mask
                assert m is not None
                mask = F.interpolate(m[None].float(), size=x.shape[-2:]).to(torch.bool)[0]
                out[name] = NestedTensor(x, mask)
            return out

    class Joiner(nn.Sequential):
        def __init__(self, backbone, position_embedding):
            super().__init__(backbone, position_embedding)

        def forward(self, tensor_list: NestedTensor):
            xs = self[0](tensor_list)
            out: List[NestedTensor] = []
            pos = []
            for name, x in xs.items():
                out.append(x)
                # position encoding
                pos.append(self[1](x).to(x.tensors.dtype))

            return out, pos

    # models/transformer.py
    class Transformer(nn.Module):

        def __init__(self, d_model=512, nhead=8, num_encoder_layers=6,
                     num_decoder_layers=6, dim_feedforward=2048, dropout=0.1,
                     activation="relu", normalize_before=False,
                     return_intermediate_dec=False):
            super().__init__()

            encoder_layer = TransformerEncoderLayer(d_model, nhead, dim_feedforward,
                                                    dropout, activation, normalize_before)
            encoder_norm = nn.LayerNorm(d_model) if normalize_before else None
            self.encoder = TransformerEncoder(encoder_layer, num_encoder_layers, encoder_norm)

            decoder_layer = TransformerDecoderLayer(d_model, nhead, dim_feedforward,
                                                    dropout, activation, normalize_before)
            decoder_norm = nn.LayerNorm(d_model)
            self.decoder = TransformerDecoder(decoder_layer, num_decoder_layers, decoder_norm,
                                              return_intermediate=return_intermediate_dec)

            self._reset_parameters()

            self.d_model = d_model
            self.nhead = nhead

        def _reset_parameters(self):
            for p in self.parameters():
                if p.dim() > 1:
                    nn.init.xavier_uniform_(p)

        def forward(self, src, mask, query_embed, pos_embed):
            # flatten NxCxHxW to HWxNxC
            bs, c, h, w = src.shape
            src = src.flatten(2).permute(2, 0, 1)
            pos_embed = pos_embed.flatten(2).permute(2, 0, 1)
            query_embed = query_embed.unsqueeze(1).repeat(1, bs, 1)
            mask = mask.flatten(1)

            tgt = torch.zeros_like(query_embed)
            memory = self.encoder(src, src_key_padding_mask=mask, pos=pos_embed)
            hs = self.decoder(tgt, memory, memory_key_padding_mask=mask,
                              pos=pos_embed, query_pos=query_embed)
            return hs.transpose(1, 2), memory.permute(1, 2, 0).view(bs, c, h, w)

    class TransformerEncoder(nn.Module):

        def __init__(self, encoder_layer, num_layers, norm=None):
            super().__init__()
            self.layers = _get_clones(encoder_layer, num_layers)
            self.num_layers = num_layers
            self.norm = norm

        def forward(self, src,
                    mask: Optional[Tensor] = None,
                    src_key_padding_mask: Optional[Tensor] = None,
                    pos: Optional[Tensor] = None):
            output = src

            for layer in self.layers:
                output = layer(output, src_mask=mask,
                               src_key_padding_mask=src_key_padding_mask, pos=pos)

            if self.norm is not None:
                output = self.norm(output)

            return output

    class TransformerDecoder(nn.Module):

        def __init__(self, decoder_layer, num_layers, norm=None, return_intermediate=False):
            super().__init__()
            self.layers = _get_clones(decoder_layer, num_layers)
            self.num_layers = num_layers
            self.norm = norm
            self.return_intermediate = return_intermediate

        def forward(self, tgt, memory,
                    tgt_mask: Optional[Tensor] = None,
                    memory_mask: Optional[Tensor] = None,
                    tgt_key_padding_mask: Optional[Tensor] = None,
                    memory_key_padding_mask: Optional[Tensor] = None,
                    pos: Optional[Tensor] = None,
                    query_pos: Optional[Tensor] = None):
            output = tgt

            intermediate = []

            for layer in self.layers:
                output = layer(output, memory, tgt_mask=tgt_mask,
                               memory_mask=memory_mask,
                               tgt_key_padding_mask=tgt_key_padding_mask,
                               memory_key_padding_mask=memory_key_padding_mask,
                               pos=pos, query_pos=query_pos)
                if self.return_intermediate:
                    intermediate.append(self.norm(output))

            if self.norm is not None:
                output = self.norm(output)
                if self.return_intermediate:
                    intermediate.pop()
                    intermediate.append(output)

            if self.return_intermediate:
                return torch.stack(intermediate)

            return output.unsqueeze(0)

    class TransformerEncoderLayer(nn.Module):

        def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1,
                     activation="relu", normalize_before=False):
            super().__init__()
            self.self_attn = nn.MultiheadAttention(d_model, nhead, dropout=dropout)
            # Implementation of Feedforward model
            self.linear1 = nn.Linear(d_model, dim_feedforward)
            self.dropout = nn.Dropout(dropout)
            self.linear2 = nn.Linear(dim_feedforward, d_model)

            self.norm1 = nn.LayerNorm(d_model)
            self.norm2 = nn.LayerNorm(d_model)
            self.dropout1 = nn.Dropout(dropout)
            self.dropout2 = nn.Dropout(dropout)

            self.activation = _get_activation_fn(activation)
            self.normalize_before = normalize_before

        def with_pos_embed(self, tensor, pos: Optional[Tensor]):
            return tensor if pos is None else tensor + pos

        def forward_post(self,
                         src,
                         src_mask: Optional[Tensor] = None,
                         src_key_padding_mask: Optional[Tensor] = None,
                         pos: Optional[Tensor] = None):
            q = k = self.with_pos_embed(src, pos)
            src2 = self.self_attn(q, k, value=src, attn_mask=src_mask,
                                  key_padding_mask=src_key_padding_mask)[0]
            src = src + self.dropout1(src2)
            src = self.norm1(src)
            src2 = self.linear2(self.dropout(self.activation(self.linear1(src))))
            src = src + self.dropout2(src2)
            src = self.norm2(src)
            return src

        def forward_pre(self, src,
                        src_mask: Optional[Tensor] = None,
                        src_key_padding_mask: Optional[Tensor] = None,
                        pos: Optional[Tensor] = None):
            src2 = self.norm1(src)
            q = k = self.with_pos_embed(src2, pos)
            src2 = self.self_attn(q, k, value=src2, attn_mask=src_mask,
                                  key_padding_mask=src_key_padding_mask)[0]
            src = src + self.dropout1(src2)
            src2 = self.norm2(src)
            src2 = self.linear2(self.dropout(self.activation(self.linear1(src2))))
            src = src + self.dropout2(src2)
            return src

        def forward(self, src,
                    src_mask: Optional[Tensor] = None,
                    src_key_padding_mask: Optional[Tensor] = None,
                    pos: Optional[Tensor] = None):
            if self.normalize_before:
                return self.forward_pre(src, src_mask, src_key_padding_mask, pos)
            return self.forward_post(src, src_mask, src_key_padding_mask, pos)

    class TransformerDecoderLayer(nn.Module):

        def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1,
                     activation="relu", normalize_before=False):
            super().__init__()
            self.self_attn = nn.MultiheadAttention(d_model, nhead, dropout=dropout)
            self.multihead_attn = nn.MultiheadAttention(d_model, nhead, dropout=dropout)
            # Implementation of Feedforward model
            self.linear1 = nn.Linear(d_model, dim_feedforward)
            self.dropout = nn.Dropout(dropout)
            self.linear2 = nn.Linear(dim_feedforward, d_model)

            self.norm1 = nn.LayerNorm(d_model)
            self.norm2 = nn.LayerNorm(d_model)
            self.norm3 = nn.LayerNorm(d_model)
            self.dropout1 = nn.Dropout(dropout)
            self.dropout2 = nn.Dropout(dropout)
            self.dropout3 = nn.Dropout(dropout)

            self.activation = _get_activation_fn(activation)
            self.normalize_before = normalize_before

        def with_pos_embed(self, tensor, pos: Optional[Tensor]):
            return tensor if pos is None else tensor + pos

        def forward_post(self, tgt, memory,
                         tgt_mask: Optional[Tensor] = None,
                         memory_mask: Optional[Tensor] = None,
                         tgt_key_padding_mask: Optional[Tensor] = None,
                         memory_key_padding_mask: Optional[Tensor] = None,
                         pos: Optional[Tensor] = None,
                         query_pos: Optional[Tensor] = None):
            q = k = self.with_pos_embed(tgt, query_pos)
            tgt2 = self.self_attn(q, k, value=tgt, attn_mask=tgt_mask,
                                  key_padding_mask=tgt_key_padding_mask)[0]
            tgt = tgt + self.dropout1(tgt2)
            tgt = self.norm1(tgt)
            tgt2 = self.multihead_attn(query=self.with_pos_embed(tgt, query_pos),
                                       key=self.with_pos_embed(memory, pos),
                                       value=memory, attn_mask=memory_mask,
                                       key_padding_mask=memory_key_padding_mask)[0]
            tgt = tgt + self.dropout2(tgt2)
            tgt = self.norm2(tgt)
            tgt2 = self.linear2(self.dropout(self.activation(self.linear1(tgt))))
            tgt = tgt + self.dropout3(tgt2)
            tgt = self.norm3(tgt)
            return tgt

        def forward_pre(self, tgt, memory,
                        tgt_mask: Optional[Tensor] = None,
                        memory_mask: Optional[Tensor] = None,
                        tgt_key_padding_mask: Optional[Tensor] = None,
                        memory_key_padding_mask: Optional[Tensor] = None,
                        pos: Optional[Tensor] = None,
                        query_pos: Optional[Tensor] = None):
            tgt2 = self.norm1(tgt)
            q = k = self.with_pos_embed(tgt2, query_pos)
            tgt2 = self.self_attn(q, k, value=tgt2, attn_mask=tgt_mask,
                                  key_padding_mask=tgt_key_padding_mask)[0]
            tgt = tgt + self.dropout1(tgt2)
            tgt2 = self.norm2(tgt)
            tgt2 = self.multihead_attn(query=self.with_pos_embed(tgt2, query_pos),
                                       key=self.with_pos_embed(memory, pos),
                                       value=memory, attn_mask=memory_mask,
                                       key_padding_mask=memory_key_padding_mask)[0]
            tgt = tgt + self.dropout2(tgt2)
            tgt2 = self.norm3(tgt)
            tgt2 = self.linear2(self.dropout(self.activation(self.linear1(tgt2))))
            tgt = tgt + self.dropout3(tgt2)
            return tgt

        def forward(self, tgt, memory,
                    tgt_mask: Optional[Tensor] = None,
                    memory_mask: Optional[Tensor] = None,
                    tgt_key_padding_mask: Optional[Tensor] = None,
                    memory_key_padding_mask: Optional[Tensor] = None,
                    pos: Optional[Tensor] = None,
                    query_pos: Optional[Tensor] = None):
            if self.normalize_before:
                return self.forward_pre(tgt, memory, tgt_mask, memory_mask,
                                        tgt_key_padding_mask, memory_key_padding_mask, pos, query_pos)
            return self.forward_post(tgt, memory, tgt_mask, memory_mask,
                                     tgt_key_padding_mask, memory_key_padding_mask, pos, query_pos)

    def _get_clones(module, N):
        return nn.ModuleList([copy.deepcopy(module) for i in range(N)])

    def _get_activation_fn(activation):
        """Return an activation function given a string"""
        if activation == "relu":
            return F.relu
        if activation == "gelu":
            return F.gelu
        if activation == "glu":
            return F.glu
        raise RuntimeError(F"activation should be relu/gelu, not {activation}.")

    # models/matcher.py
    class HungarianMatcher(nn.Module):
        def __init__(self, cost_class: float = 1, cost_bbox: float = 1, cost_giou: float = 1):
            super().__init__()
            self.cost_class = cost_class
            self.cost_bbox = cost_bbox
            self.cost_giou = cost_giou
            assert cost_class != 0 or cost_bbox != 0 or cost_giou != 0, "all costs cant be 0"

        @torch.no_grad()
        def forward(self, outputs, targets):
            bs, num_queries = outputs["pred_logits"].shape[:2]

            # We flatten to compute the cost matrices in a batch
            out_prob = outputs["pred_logits"].flatten(0, 1).softmax(-1)  # [batch_size * num_queries, num_classes]
            out_bbox = outputs["pred_boxes"].flatten(0, 1)  # [batch_size * num_queries, 4]

            # Also concat the target labels and boxes
            tgt_ids = torch.cat([v["labels"] for v in targets])
            tgt_bbox = torch.cat([v["boxes"] for v in targets])

            # Compute the classification cost. Contrary to the loss, we don't use the NLL,
            # but approximate it in 1 - proba[target class].
            # The 1 is a constant that doesn't change the matching, it can be ommitted.
            cost_class = -out_prob[:, tgt_ids]

            # Compute the L1 cost between boxes
            cost_bbox = torch.cdist(out_bbox, tgt_bbox, p=1)

            # Compute the giou cost betwen boxes
            cost_giou = -generalized_box_iou(box_cxcywh_to_xyxy(out_bbox), box_cxcywh_to_xyxy(tgt_bbox))

            # Final cost matrix
            C = self.cost_bbox * cost_bbox + self.cost_class * cost_class + self.cost_giou * cost_giou
            C = C.view(bs, num_queries, -1).cpu()

            sizes = [len(v["boxes"]) for v in targets]
            indices = [linear_sum_assignment(c[i]) for i, c in enumerate(C.split(sizes, -1))]
            return [(torch.as_tensor(i, dtype=torch.int64), torch.as_tensor(j, dtype=torch.int64)) for i, j in indices]

    # models/detr.py
    class DETR(nn.Module):
        """ This is the DETR module that performs object detection """
        def __init__(self, backbone, transformer, num_classes, num_queries, aux_loss=False):
            super().__init__()
            self.num_queries = num_queries
            self.transformer = transformer
            hidden_dim = transformer.d_model
            self.class_embed = nn.Linear(hidden_dim, num_classes + 1)
            self.bbox_embed = MLP(hidden_dim, hidden_dim, 4, 3)
            self.query_embed = nn.Embedding(num_queries, hidden_dim)
            self.input_proj = nn.Conv2d(backbone.num_channels, hidden_dim, kernel_size=1)
            self.backbone = backbone
            self.aux_loss = aux_loss

        def forward(self, samples: NestedTensor):
            if isinstance(samples, (list, torch.Tensor)):
                samples = nested_tensor_from_tensor_list(samples)
            features, pos = self.backbone(samples)

            src, mask = features[-1].decompose()
            assert mask is not None
            hs = self.transformer(self.input_proj(src), mask, self.query_embed.weight, pos[-1])[0]

            outputs_class = self.class_embed(hs)
            outputs_coord = self.bbox_embed(hs).sigmoid()
            out = {'pred_logits': outputs_class[-1], 'pred_boxes': outputs_coord[-1]}
            if self.aux_loss:
                out['aux_outputs'] = self._set_aux_loss(outputs_class, outputs_coord)
            return out

        @torch.jit.unused
        def _set_aux_loss(self, outputs_class, outputs_coord):
            # this is a workaround to make torchscript happy, as torchscript
            # doesn't support dictionary with non-homogeneous values, such
            # as a dict having both a Tensor and a list.
            return [{'pred_logits': a, 'pred_boxes': b}
                    for a, b in zip(outputs_class[:-1], outputs_coord[:-1])]

    class SetCriterion(nn.Module):
        def __init__(self, num_classes, matcher, weight_dict, eos_coef, losses):
            super().__init__()
            self.num_classes = num_classes
            self.matcher = matcher
            self.weight_dict = weight_dict
            self.eos_coef = eos_coef
            self.losses = losses
            empty_weight = torch.ones(self.num_classes + 1)
            empty_weight[-1] = self.eos_coef
            self.register_buffer('empty_weight', empty_weight)

        def loss_labels(self, outputs, targets, indices, num_boxes, log=True):
            """Classification loss (NLL)
            targets dicts must contain the key "labels" containing a tensor of dim [nb_target_boxes]
            """
            assert 'pred_logits' in outputs
            src_logits = outputs['pred_logits']

            idx = self._get_src_permutation_idx(indices)
            target_classes_o = torch.cat([t["labels"][J] for t, (_, J) in zip(targets, indices)])
            target_classes = torch.full(src_logits.shape[:2], self.num_classes,
                                        dtype=torch.int64, device=src_logits.device)
            target_classes[idx] = target_classes_o

            loss_ce = F.cross_entropy(src_logits.transpose(1, 2), target_classes, self.empty_weight)
            losses = {'loss_ce': loss_ce}

            if log:
                # TODO this should probably be a separate loss, not hacked in this one here
                losses['class_error'] = 100 - accuracy(src_logits[idx], target_classes_o)[0]
            return losses

        @torch.no_grad()
        def loss_cardinality(self, outputs, targets, indices, num_boxes):
            """ Compute the cardinality error, ie the absolute error in the number of predicted non-empty boxes
            This is not really a loss, it is intended for logging purposes only. It doesn't propagate gradients
            """
            pred_logits = outputs['pred_logits']
            device = pred_logits.device
            tgt_lengths = torch.as_tensor([len(v["labels"]) for v in targets], device=device)
            # Count the number of predictions that are NOT "no-object" (which is the last class)
            card_pred = (pred_logits.argmax(-1) != pred_logits.shape[-1] - 1).sum(1)
            card_err = F.l1_loss(card_pred.float(), tgt_lengths.float())
            losses = {'cardinality_error': card_err}
            return losses

        def loss_boxes(self, outputs, targets, indices, num_boxes):
            """Compute the losses related to the bounding boxes, the L1 regression loss and the GIoU loss
               targets dicts must contain the key "boxes" containing a tensor of dim [nb_target_boxes, 4]
               The target boxes are expected in format (center_x, center_y, w, h), normalized by the image size.
            """
            assert 'pred_boxes' in outputs
            idx = self._get_src_permutation_idx(indices)
            src_boxes = outputs['pred_boxes'][idx]
            target_boxes = torch.cat([t['boxes'][i] for t, (_, i) in zip(targets, indices)], dim=0)

            loss_bbox = F.l1_loss(src_boxes, target_boxes, reduction='none')

            losses = {}
            losses['loss_bbox'] = loss_bbox.sum() / num_boxes

            loss_giou = 1 - torch.diag(generalized_box_iou(
                box_cxcywh_to_xyxy(src_boxes),
                box_cxcywh_to_xyxy(target_boxes)))
            losses['loss_giou'] = loss_giou.sum() / num_boxes
            return losses

        def _get_src_permutation_idx(self, indices):
            # permute predictions following indices
            batch_idx = torch.cat([torch.full_like(src, i) for i, (src, _) in enumerate(indices)])
            src_idx = torch.cat([src for (src, _) in indices])
            return batch_idx, src_idx

        def _get_tgt_permutation_idx(self, indices):
            # permute targets following indices
            batch_idx = torch.cat([torch.full_like(tgt, i) for i, (_, tgt) in enumerate(indices)])
            tgt_idx = torch.cat([tgt for (_, tgt) in indices])
            return batch_idx, tgt_idx

        def get_loss(self, loss, outputs, targets, indices, num_boxes, **kwargs):
            loss_map = {
                'labels': self.loss_labels,
                'cardinality': self.loss_cardinality,
                'boxes': self.loss_boxes,
            }
            assert loss in loss_map, f'do you really want to compute {loss} loss?'
            return loss_map[loss](outputs, targets, indices, num_boxes, **kwargs)

        def forward(self, outputs, targets):
            outputs_without_aux = {k: v for k, v in outputs.items() if k != 'aux_outputs'}

            # Retrieve the matching between the outputs of the last layer and the targets
            indices = self.matcher(outputs_without_aux, targets)

            # Compute the average number of target boxes accross all nodes, for normalization purposes
            num_boxes = sum(len(t["labels"]) for t in targets)
            num_boxes = torch.as_tensor([num_boxes], dtype=torch.float, device=next(iter(outputs.values())).device)
            if is_dist_avail_and_initialized():
                torch.distributed.all_reduce(num_boxes)
            num_boxes = torch.clamp(num_boxes / get_world_size(), min=1).item()

            # Compute all the requested losses
            losses = {}
            for loss in self.losses:
                losses.update(self.get_loss(loss, outputs, targets, indices, num_boxes))

            # In case of auxiliary losses, we repeat this process with the output of each intermediate layer.
            if 'aux_outputs' in outputs:
                for i, aux_outputs in enumerate(outputs['aux_outputs']):
                    indices = self.matcher(aux_outputs, targets)
                    for loss in self.losses:
                        if loss == 'masks':
                            # Intermediate masks losses are too costly to compute, we ignore them.
                            continue
                        kwargs = {}
                        if loss == 'labels':
                            # Logging is enabled only for the last layer
                            kwargs = {'log': False}
                        l_dict = self.get_loss(loss, aux_outputs, targets, indices, num_boxes, **kwargs)
                        l_dict = {k + f'_{i}': v for k, v in l_dict.items()}
                        losses.update(l_dict)

            return losses

    class MLP(nn.Module):
        """ Very simple multi-layer perceptron (also called FFN)"""

        def __init__(self, input_dim, hidden_dim, output_dim, num_layers):
            super().__init__()
            self.num_layers = num_layers
            h = [hidden_dim] * (num_layers - 1)
            self.layers = nn.ModuleList(nn.Linear(n, k) for n, k in zip([input_dim] + h, h + [output_dim]))

        def forward(self, x):
            for i, layer in enumerate(self.layers):
                x = F.relu(layer(x)) if i < self.num_layers - 1 else layer(x)
            return x

    return SimpleNamespace(**{k: v for k, v in locals().items() if not k.startswith("__")})


# --------------------------------------------------------------------------------------------
# NumPy references
# --------------------------------------------------------------------------------------------
def _erode_dilate(dropped, k, border=True):
    """Morphological opening of a (H, W) bool map with a centred k x k square (odd k); ``border``:
    whether squares may reach past the edge."""
    H, W = dropped.shape
    r = k // 2

    def win(a, fill, red):
        p = np.pad(a, r, constant_values=fill)
        return red(np.stack([p[i:i + H, j:j + W] for i in range(k) for j in range(k)]), axis=0)

    return win(win(dropped, border, np.all), False, np.any)


def _np_layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def _np_gelu(x):
    from scipy.special import erf
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


def _trunc_moments(mean, std, a, b):
    from scipy.stats import truncnorm
    d = truncnorm((a - mean) / std, (b - mean) / std, loc=mean, scale=std)
    return d.mean(), d.std()


# --------------------------------------------------------------------------------------------
# timm tests
# --------------------------------------------------------------------------------------------
def test_timm_drop_path_and_drop_block():
    T = timm_layers(lucid)
    lucid.manual_seed(0)
    x = lucid.randn(400, 3, 2, requires_grad=True)
    y = T.drop_path(x, 0.25, training=True)
    ratio = _np(y) / _np(x)
    per_sample = ratio.reshape(400, -1)
    assert np.allclose(per_sample, per_sample[:, :1])  # one draw per sample
    kept = np.isclose(per_sample[:, 0], 1 / 0.75)
    assert np.all(kept | (per_sample[:, 0] == 0))
    assert abs(kept.mean() - 0.75) < 4 * math.sqrt(0.75 * 0.25 / 400)  # 4 sigma
    y.sum().backward()
    np.testing.assert_allclose(_np(x.grad), ratio, rtol=1e-6)
    assert T.drop_path(x, 0.25, training=False) is x
    dp = T.DropPath(0.5, scale_by_keep=False)
    assert repr(dp) == "DropPath(drop_prob=0.500)"
    r = _np(dp(lucid.ones(50, 4))) / 1.0
    assert set(np.unique(r)) <= {0.0, 1.0} and np.allclose(r, r[:, :1])
    dp.eval()
    assert float(dp(lucid.ones(3, 2)).sum()) == 6.0

    # DropBlock: the dropped set is a union of block_size x block_size squares and the rest is rescaled
    x = lucid.rand(2, 3, 12, 12) + 1.0
    for fast in (True, False):
        db = T.DropBlock2d(drop_prob=0.3, block_size=3, fast=fast)
        y = _np(db(x))
        ratio = y / _np(x)
        dropped = ratio == 0
        assert dropped.any() and (~dropped).any()
        scale = ratio[~dropped]
        np.testing.assert_allclose(scale, dropped.size / (~dropped).sum(), rtol=1e-5)
        for b in range(2):
            for c in range(3):
                # the fast form seeds anywhere (blocks cut by the border); the other one only where
                # clip_mask_2d allows a whole block
                assert np.array_equal(_erode_dilate(dropped[b, c], 3, border=fast), dropped[b, c])
        db.eval()
        assert db(x) is x
    # the fast form with noise: dropped places get noise, the others are untouched
    y = _np(T.drop_block_fast_2d(x.clone(), 0.3, 3, with_noise=True))
    same = np.isclose(y, _np(x))
    assert same.mean() > 0.3 and (~same).any()


def test_timm_weight_init_moments():
    T = timm_layers(lucid)
    lucid.manual_seed(1)
    n = 200_000
    for mean, std, a, b in [(0.0, 1.0, -2.0, 2.0), (0.5, 0.2, 0.2, 1.0), (0.0, 0.02, -0.04, 0.01)]:
        t = T.trunc_normal_(lucid.empty(n), mean, std, a, b)
        v = _np(t).astype(np.float64)
        assert v.min() >= a and v.max() <= b
        m_ref, s_ref = _trunc_moments(mean, std, a, b)
        se = s_ref / math.sqrt(n)
        assert abs(v.mean() - m_ref) < 5 * se  # 5 standard errors
        assert abs(v.std() - s_ref) < 0.01 * s_ref
    t = T.trunc_normal_tf_(lucid.empty(n), mean=1.0, std=0.5)
    v = _np(t).astype(np.float64)
    assert v.min() >= 0.0 and v.max() <= 2.0
    m_ref, s_ref = _trunc_moments(0.0, 1.0, -2.0, 2.0)
    assert abs(v.std() - 0.5 * s_ref) < 0.01 * 0.5 * s_ref and abs(v.mean() - 1.0) < 5 * 0.5 * s_ref / math.sqrt(n)
    with pytest.warns(UserWarning, match="more than 2 std"):
        T.trunc_normal_(lucid.empty(10), mean=5.0, std=1.0)
    # lecun_normal_: std sqrt(1/fan_in) once the (-2, 2) truncation is undone by .8796...
    w = lucid.empty(400, 50, 3, 3)  # fan_in 450
    T.lecun_normal_(w)
    v = _np(w).astype(np.float64)
    assert abs(v.std() - math.sqrt(1 / 450)) < 0.01 * math.sqrt(1 / 450)
    assert np.abs(v).max() <= 2 * math.sqrt(1 / 450) / .87962566103423978 + 1e-7
    T.variance_scaling_(w, scale=2.0, mode='fan_out', distribution='uniform')  # fan_out 3600
    v = _np(w).astype(np.float64)
    bound = math.sqrt(3 * 2.0 / 3600)
    assert np.abs(v).max() <= bound and abs(v.std() - bound / math.sqrt(3)) < 0.01 * bound
    T.variance_scaling_(w, mode='fan_avg', distribution='normal')
    assert abs(_np(w).std() - math.sqrt(1 / 2025)) < 0.01 * math.sqrt(1 / 2025)
    with pytest.raises(ValueError, match="invalid distribution"):
        T.variance_scaling_(w, distribution='cauchy')


def test_timm_activations_mlp_norms_patch_embed():
    T = timm_layers(lucid)
    xs = np.linspace(-5, 5, 41)
    x = lucid.tensor(xs)
    hs_ref = xs * np.clip(xs + 3, 0, 6) / 6
    np.testing.assert_allclose(_np(T.hard_swish(x)), hs_ref, atol=1e-12)
    np.testing.assert_allclose(_np(T.hard_sigmoid(x)), np.clip(xs + 3, 0, 6) / 6, atol=1e-12)
    xi = x.clone()
    assert T.hard_swish(xi, inplace=True) is xi
    np.testing.assert_allclose(_np(xi), hs_ref, atol=1e-12)
    xi = x.clone()
    assert T.hard_sigmoid(xi, inplace=True) is xi
    np.testing.assert_allclose(_np(xi), np.clip(xs + 3, 0, 6) / 6, atol=1e-12)
    np.testing.assert_allclose(_np(T.GELU(inplace=True)(x)), _np_gelu(xs), atol=1e-12)
    xg = lucid.tensor([-2.5, -1.2, 0.3, 1.7, 2.2], dtype=lucid.float64, requires_grad=True)  # off the kinks
    assert lucid.autograd.gradcheck(T.hard_swish, (xg,))
    assert lucid.autograd.gradcheck(T.hard_sigmoid, (xg,))

    rng = np.random.default_rng(0)
    xin = rng.normal(size=(2, 3, 6))
    mlp = _fill(lucid, T.Mlp(6, 8, 5).double(), 1)
    p = {k: _np(v) for k, v in mlp.state_dict().items()}
    ref = _np_gelu(xin @ p["fc1.weight"].T + p["fc1.bias"]) @ p["fc2.weight"].T + p["fc2.bias"]
    np.testing.assert_allclose(_np(mlp(lucid.tensor(xin))), ref, rtol=1e-12, atol=1e-12)

    glu = _fill(lucid, T.GluMlp(6, 8, 5).double(), 2)
    p = {k: _np(v) for k, v in glu.state_dict().items()}
    h = xin @ p["fc1.weight"].T + p["fc1.bias"]
    ref = (h[..., :4] / (1 + np.exp(-h[..., 4:]))) @ p["fc2.weight"].T + p["fc2.bias"]
    np.testing.assert_allclose(_np(glu(lucid.tensor(xin))), ref, rtol=1e-12, atol=1e-12)
    glu.init_weights()  # in-place init of the second half of fc1's parameters, through views
    b = _np(glu.fc1.bias)
    w = _np(glu.fc1.weight)
    assert np.array_equal(b[4:], np.ones(4)) and np.array_equal(b[:4], p["fc1.bias"][:4])
    assert np.abs(w[4:]).max() < 1e-5 and np.array_equal(w[:4], p["fc1.weight"][:4])
    assert glu.fc1.weight.requires_grad and glu.fc1.weight.grad_fn is None
    conv_glu = T.GluMlp(6, 8, 5, use_conv=True).double()
    with lucid.no_grad():
        conv_glu.fc1.weight.copy_(glu.fc1.weight[:, :, None, None])
        conv_glu.fc1.bias.copy_(glu.fc1.bias)
        conv_glu.fc2.weight.copy_(glu.fc2.weight[:, :, None, None])
        conv_glu.fc2.bias.copy_(glu.fc2.bias)
    img = rng.normal(size=(2, 6, 3, 2))
    np.testing.assert_allclose(_np(conv_glu(lucid.tensor(img))),
                               _np(glu(lucid.tensor(img.transpose(0, 2, 3, 1)))).transpose(0, 3, 1, 2), atol=1e-12)

    ln2d = _fill(lucid, T.LayerNorm2d(6).double(), 3)
    ref = _np_layer_norm(img.transpose(0, 2, 3, 1), _np(ln2d.weight), _np(ln2d.bias), 1e-6).transpose(0, 3, 1, 2)
    np.testing.assert_allclose(_np(ln2d(lucid.tensor(img))), ref, rtol=1e-10, atol=1e-12)
    assert lucid.autograd.gradcheck(ln2d, (lucid.tensor(img[:1, :, :2], requires_grad=True),))

    pe = _fill(lucid, T.PatchEmbed(img_size=(4, 6), patch_size=2, in_chans=3, embed_dim=5).double(), 4)
    assert pe.grid_size == (2, 3) and pe.num_patches == 6
    im = rng.normal(size=(2, 3, 4, 6))
    patches = im.reshape(2, 3, 2, 2, 3, 2).transpose(0, 2, 4, 1, 3, 5).reshape(2, 6, 12)
    ref = patches @ _np(pe.proj.weight).reshape(5, 12).T + _np(pe.proj.bias)
    np.testing.assert_allclose(_np(pe(lucid.tensor(im))), ref, rtol=1e-12, atol=1e-12)
    with pytest.raises(AssertionError, match=r"Input height \(6\) doesn't match model \(4\)"):
        pe(lucid.zeros(1, 3, 6, 6, dtype=lucid.float64))
    pe.strict_img_size, pe.dynamic_img_pad = False, True
    assert pe(lucid.tensor(im[:, :, :3, :5])).shape == (2, 6, 5)  # padded up to 4 x 6


def _tiny_vit(T, torch, fused, seed=5):
    nn = torch.nn

    class TinyViT(nn.Module):
        def __init__(self):
            super().__init__()
            self.patch_embed = T.PatchEmbed(img_size=4, patch_size=2, in_chans=2, embed_dim=8)
            self.cls_token = nn.Parameter(torch.zeros(1, 1, 8))
            self.pos_embed = nn.Parameter(torch.zeros(1, 5, 8))
            self.blocks = nn.Sequential(*[
                T.Block(8, num_heads=2, mlp_ratio=2., qkv_bias=True, init_values=0.5,
                        norm_layer=T.LayerNorm, fused_attn=fused) for _ in range(2)])
            self.norm = T.LayerNorm(8)
            self.head = nn.Linear(8, 3)

        def forward(self, x):
            x = self.patch_embed(x)
            x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1)
            x = x + self.pos_embed
            x = self.blocks(x)
            x = self.norm(x)
            return self.head(x[:, 0])

    return _fill(torch, TinyViT().double(), seed)


def _vit_data():
    rng = np.random.default_rng(7)
    X = rng.normal(size=(12, 2, 4, 4))
    y = (X[:, 0].mean((1, 2)) > 0).astype(np.int64) + (X[:, 1, :2].mean((1, 2)) > 0)
    return X, y


def vit_train(torch, T, fused, steps=10):
    model = _tiny_vit(T, torch, fused)
    X, y = _vit_data()
    X, y = torch.tensor(X), torch.tensor(y)
    opt = torch.optim.AdamW(model.parameters(), lr=0.02)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(X), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, {k: _np(v) for k, v in model.state_dict().items()}


def test_timm_vit_blocks():
    T = timm_layers(lucid)
    fused = _tiny_vit(T, lucid, True)
    plain = _tiny_vit(T, lucid, False)
    X, _ = _vit_data()
    np.testing.assert_allclose(_np(fused(lucid.tensor(X))), _np(plain(lucid.tensor(X))), rtol=1e-10, atol=1e-12)
    losses, _ = vit_train(lucid, T, True)
    assert losses[-1] < 0.6 * losses[0]  # stated margin: 40% down in 10 AdamW steps
    # one Block, float64 finite differences, through the explicit path with a boolean and a causal mask
    blk = _fill(lucid, T.Block(4, num_heads=2, mlp_ratio=1., qkv_bias=True, init_values=0.7, fused_attn=False).double(), 6)
    x = lucid.tensor(np.random.default_rng(8).normal(size=(1, 3, 4)), requires_grad=True)
    keep = lucid.tensor([[True, False, True], [True, True, False], [True, True, True]])
    assert lucid.autograd.gradcheck(lambda x: blk(x, attn_mask=keep), (x,))
    assert lucid.autograd.gradcheck(lambda x: blk(x, is_causal=True), (x,))
    blk.attn.fused_attn = True  # SDPA agrees with the explicit path under both masks
    a = _np(blk(x, attn_mask=keep))
    blk.attn.fused_attn = False
    np.testing.assert_allclose(a, _np(blk(x, attn_mask=keep)), atol=1e-12)
    # causal: the first token's output does not depend on the later ones
    x2 = x.detach().clone()
    x2[0, 1:] += 1.0
    np.testing.assert_allclose(_np(blk(x, is_causal=True))[0, 0], _np(blk(x2, is_causal=True))[0, 0], atol=1e-12)


def test_timm_convnext_block_layouts_agree():
    T = timm_layers(lucid)
    cl = _fill(lucid, T.ConvNeXtBlock(4, kernel_size=3, mlp_ratio=2, ls_init_value=0.5).double(), 9)
    cf = T.ConvNeXtBlock(4, kernel_size=3, mlp_ratio=2, ls_init_value=0.5, conv_mlp=True).double()
    sd = {k: (v[:, :, None, None] if k.startswith("mlp.fc") and k.endswith("weight") else v)
          for k, v in cl.state_dict().items()}
    cf.load_state_dict(sd)
    assert isinstance(cf.norm, T.LayerNorm2d) and isinstance(cl.norm, T.LayerNorm)
    x = lucid.tensor(np.random.default_rng(10).normal(size=(2, 4, 5, 5)), requires_grad=True)
    y = cl(x)
    np.testing.assert_allclose(_np(y), _np(cf(x)), rtol=1e-10, atol=1e-12)
    # NumPy: depthwise conv, LayerNorm over channels, MLP, gamma, residual
    p = {k: _np(v) for k, v in cl.state_dict().items()}
    xn = _np(x)
    pad = np.pad(xn, ((0, 0), (0, 0), (1, 1), (1, 1)))
    dw = sum(pad[:, :, i:i + 5, j:j + 5] * p["conv_dw.weight"][None, :, 0, i, j, None, None]
             for i in range(3) for j in range(3)) + p["conv_dw.bias"][None, :, None, None]
    h = _np_layer_norm(dw.transpose(0, 2, 3, 1), p["norm.weight"], p["norm.bias"], 1e-6)
    h = _np_gelu(h @ p["mlp.fc1.weight"].T + p["mlp.fc1.bias"]) @ p["mlp.fc2.weight"].T + p["mlp.fc2.bias"]
    ref = h.transpose(0, 3, 1, 2) * p["gamma"][None, :, None, None] + xn
    np.testing.assert_allclose(_np(y), ref, rtol=1e-10, atol=1e-12)
    small = lucid.tensor(np.random.default_rng(11).normal(size=(1, 4, 3, 3)), requires_grad=True)
    assert lucid.autograd.gradcheck(cf, (small,))


def _np_log_softmax(x):
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def test_timm_losses():
    L = timm_train(lucid)
    rng = np.random.default_rng(12)
    xs = rng.normal(size=(5, 4))
    tgt = np.array([0, 3, 1, 1, 2])
    lp = _np_log_softmax(xs)
    x = lucid.tensor(xs, requires_grad=True)
    t = lucid.tensor(tgt)
    ls = L.LabelSmoothingCrossEntropy(0.2)
    ref = np.mean(0.8 * -lp[np.arange(5), tgt] + 0.2 * -lp.mean(-1))
    np.testing.assert_allclose(ls(x, t).item(), ref, rtol=1e-12)
    np.testing.assert_allclose(ls(x, t).item(), lucid.nn.functional.cross_entropy(x, t, label_smoothing=0.2).item(),
                               rtol=1e-12)
    assert lucid.autograd.gradcheck(lambda x: ls(x, t), (x,))
    soft = rng.dirichlet(np.ones(4), size=5)
    st = L.SoftTargetCrossEntropy()
    np.testing.assert_allclose(st(x, lucid.tensor(soft)).item(), np.mean((-soft * lp).sum(-1)), rtol=1e-12)
    assert lucid.autograd.gradcheck(lambda x: st(x, lucid.tensor(soft)), (x,))

    # AsymmetricLossMultiLabel (computes in float32 by design)
    ys = (rng.random((5, 4)) > 0.5).astype(np.float64)
    p = 1 / (1 + np.exp(-xs))
    pn = np.minimum(1 - p + 0.05, 1)
    los = ys * np.log(np.maximum(p, 1e-8)) + (1 - ys) * np.log(np.maximum(pn, 1e-8))
    w = (1 - (p * ys + pn * (1 - ys))) ** (1 * ys + 4 * (1 - ys))
    per = -los * w
    asl = L.AsymmetricLossMultiLabel()
    out = asl(x, lucid.tensor(ys))
    assert out.dtype == lucid.float32
    np.testing.assert_allclose(out.item(), per.sum() / 5, rtol=1e-5)
    np.testing.assert_allclose(L.AsymmetricLossMultiLabel(reduction='none')(x, lucid.tensor(ys)).detach().cpu().numpy(),
                               per, rtol=1e-5)
    wts = np.array([1.0, 2.0, 0.5, 1.5])
    aslw = L.AsymmetricLossMultiLabel(reduction='mean', weight=lucid.tensor(wts, dtype=lucid.float32), pos_weight=2.0,
                                      smoothing=0.1)
    ysm = ys * 0.9 + 0.05
    los = 2.0 * ysm * np.log(p) + (1 - ysm) * np.log(pn)
    w = (1 - (p * ysm + pn * (1 - ysm))) ** (1 * ysm + 4 * (1 - ysm))
    np.testing.assert_allclose(aslw(x, lucid.tensor(ys)).item(), np.mean(-los * w * wts), rtol=1e-5)
    with pytest.raises(ValueError, match="Unknown reduction 'avg'"):
        L.AsymmetricLossMultiLabel(reduction='avg')
    # detached focusing weights: the gradient is that of -sum(w * los) / B with w held fixed
    x.grad = None
    L.AsymmetricLossMultiLabel(disable_torch_grad_focal_loss=True)(x, lucid.tensor(ys)).backward()
    w = (1 - (p * ys + pn * (1 - ys))) ** (1 * ys + 4 * (1 - ys))
    dpn = np.where(1 - p + 0.05 < 1, -p * (1 - p), 0.0)  # d pn / dx
    dlos = ys * (1 - p) + (1 - ys) * dpn / pn
    np.testing.assert_allclose(_np(x.grad), -w * dlos / 5, rtol=1e-4, atol=1e-7)

    asl1 = L.AsymmetricLossSingleLabel(eps=0.1)
    oh = np.eye(4)[tgt]
    e = np.exp(lp)
    w = (1 - e * oh - (1 - e) * (1 - oh)) ** (1 * oh + 4 * (1 - oh))
    ref = np.mean(-((oh * 0.9 + 0.025) * lp * w).sum(-1))
    np.testing.assert_allclose(asl1(x, t).item(), ref, rtol=1e-12)
    assert lucid.autograd.gradcheck(lambda x: asl1(x, t), (x,))


def test_timm_mixup():
    L = timm_train(lucid)
    t = lucid.tensor([0, 2, 1, 3])
    oh = _np(L.one_hot(t, 5, on_value=0.9, off_value=0.1, device=t.device))
    assert np.array_equal(oh, np.where(np.eye(5)[[0, 2, 1, 3]] == 1, 0.9, 0.1).astype(np.float32))
    mt = _np(L.mixup_target(t, 5, lam=0.7, smoothing=0.1, device=t.device))
    y1 = np.eye(5)[[0, 2, 1, 3]] * 0.9 + 0.02
    np.testing.assert_allclose(mt, 0.7 * y1 + 0.3 * y1[::-1], rtol=1e-6)
    np.testing.assert_allclose(mt.sum(1), 1.0, rtol=1e-6)

    np.random.seed(0)
    yl, yh, xl, xh = L.rand_bbox((3, 10, 8), 0.64)
    np.random.seed(0)
    cy, cx = np.random.randint(0, 10), np.random.randint(0, 8)
    assert (yl, yh, xl, xh) == (max(cy - 3, 0), min(cy + 3, 10), max(cx - 2, 0), min(cx + 2, 8))
    (yl, yh, xl, xh), lam = L.cutmix_bbox_and_lam((3, 10, 8), 0.64, ratio_minmax=(0.2, 0.5))
    assert 2 <= yh - yl < 5 and 1 <= xh - xl < 4 and lam == 1 - (yh - yl) * (xh - xl) / 80

    rng = np.random.default_rng(13)
    X0 = rng.normal(size=(4, 2, 6, 6)).astype(np.float32)
    # batch mode, mixup: x <- lam x + (1 - lam) x.flip(0) in place
    np.random.seed(3)
    mix = L.Mixup(mixup_alpha=1.0, num_classes=5, label_smoothing=0.0)
    x = lucid.tensor(X0.copy())
    xo, target = mix(x, t)
    np.random.seed(3)
    np.random.rand()
    lam = np.random.beta(1.0, 1.0)
    assert xo is x
    np.testing.assert_allclose(_np(x), lam * X0 + (1 - lam) * X0[::-1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_np(target), lam * np.eye(5)[[0, 2, 1, 3]] + (1 - lam) * np.eye(5)[[3, 1, 2, 0]],
                               rtol=1e-5)
    # batch mode, cutmix: the box comes from the flipped batch, lam is the kept area
    np.random.seed(4)
    x = lucid.tensor(X0.copy())
    _, target = L.Mixup(mixup_alpha=0., cutmix_alpha=1.0, num_classes=5)(x, t)
    np.random.seed(4)
    np.random.rand()
    (yl, yh, xl, xh), lam = L.cutmix_bbox_and_lam(X0.shape, np.random.beta(1.0, 1.0))
    ref = X0.copy()
    ref[:, :, yl:yh, xl:xh] = X0[::-1][:, :, yl:yh, xl:xh]
    assert np.array_equal(_np(x), ref)
    np.testing.assert_allclose(_np(target)[0], lam * np.eye(5)[0] + (1 - lam) * np.eye(5)[3], rtol=1e-6)
    # pair and elem modes write rows of x (and boxes of rows) through nested views
    for mode in ("pair", "elem"):
        np.random.seed(5)
        x = lucid.tensor(X0.copy())
        m = L.Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, switch_prob=0.5, mode=mode, num_classes=5)
        _, target = m(x, t)
        np.random.seed(5)
        n = 2 if mode == "pair" else 4
        lam_b, use_cut = m._params_per_elem(n)
        ref = X0.copy()
        for i in range(n):
            j = 3 - i
            if lam_b[i] != 1.:
                if use_cut[i]:
                    (yl, yh, xl, xh), lam = L.cutmix_bbox_and_lam(X0[i].shape, lam_b[i])
                    ref[i][:, yl:yh, xl:xh] = X0[j][:, yl:yh, xl:xh]
                    if mode == "pair":
                        ref[j][:, yl:yh, xl:xh] = X0[i][:, yl:yh, xl:xh]
                    lam_b[i] = lam
                else:
                    ref[i] = X0[i] * lam_b[i] + X0[j] * (1 - lam_b[i])
                    if mode == "pair":
                        ref[j] = X0[j] * lam_b[i] + X0[i] * (1 - lam_b[i])
        if mode == "elem":  # this seed mixes both ways within the batch
            assert use_cut.any() and (~use_cut).any()
        np.testing.assert_allclose(_np(x), ref, rtol=1e-6, atol=1e-6)
        lam_full = np.concatenate((lam_b, lam_b[::-1])) if mode == "pair" else lam_b
        np.testing.assert_allclose(_np(target)[np.arange(4), [0, 2, 1, 3]],
                                   lam_full + (1 - lam_full) * (np.array([0, 2, 1, 3]) == np.array([3, 1, 2, 0])),
                                   rtol=1e-6)


def _ema_model(torch):
    nn = torch.nn
    m = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2)).double()
    return _fill(torch, m, 14)


def ema_run(torch, L, version, steps=6):
    model = _ema_model(torch)
    if version == 2:
        ema = L.ModelEmaV2(model, decay=0.8)
    else:
        ema = L.ModelEmaV3(model, decay=0.9, use_warmup=True, warmup_gamma=1.0, warmup_power=0.75,
                           update_after_step=1, foreach=version != "3-loop", exclude_buffers=version == "3-params")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    X = torch.tensor(np.random.default_rng(15).normal(size=(8, 3)))
    hist = []
    for step in range(steps):
        opt.zero_grad()
        model(X).pow(2).mean().backward()
        opt.step()
        hist.append({k: _np(v).copy() for k, v in model.state_dict().items()})
        if version == 2:
            ema.update(model)
        else:
            ema.update(model, step=step)
    return hist, {k: _np(v) for k, v in ema.module.state_dict().items()}, _np(ema(X))


def test_timm_model_ema():
    L = timm_train(lucid)
    for version in (2, 3, "3-loop", "3-params"):
        hist, ema_sd, out = ema_run(lucid, L, version)
        init = {k: _np(v) for k, v in _ema_model(lucid).state_dict().items()}
        for k, v0 in init.items():
            e = v0.astype(np.float64)
            for step, h in enumerate(hist):
                if version == 2:
                    d = 0.8
                else:
                    s = max(0, step - 1 - 1)
                    d = 0.0 if s <= 0 else max(min(1 - (1 + s) ** -0.75, 0.9), 0.0)
                if version == "3-params" and ("running" in k or "num_batches" in k):
                    e = h[k]  # exclude_buffers: buffers are copied, parameters interpolated
                elif np.issubdtype(v0.dtype, np.floating):
                    e = d * e + (1 - d) * h[k]
                else:  # num_batches_tracked: V2 interpolates it too (int64 with a float -> float32, then
                    # copy_ truncates), V3 copies it
                    f32 = np.float32
                    e = h[k] if version != 2 else np.asarray(f32(d) * f32(e) + f32(1 - d) * f32(h[k])).astype(v0.dtype)
            np.testing.assert_allclose(ema_sd[k], e, rtol=1e-12, atol=1e-14, err_msg=f"{version} {k}")
        assert out.shape == (8, 2)
    # V3 decay schedule, closed form
    ema = L.ModelEmaV3(_ema_model(lucid), decay=0.999, min_decay=0.5, use_warmup=True, update_after_step=2)
    assert [ema.get_decay(s) for s in (0, 3)] == [0.0, 0.0]
    assert ema.get_decay(4) == 0.5 and ema.get_decay() == 0.999
    np.testing.assert_allclose(ema.get_decay(100), 1 - (1 + 97) ** (-2 / 3), rtol=1e-15)


def cosine_schedules(torch, L):
    p = [torch.nn.Parameter(torch.zeros(1))]
    out = {}
    opt = torch.optim.SGD([{"params": p}, {"params": [torch.nn.Parameter(torch.zeros(1))], "lr": 0.05}], lr=0.1)
    s = L.CosineLRScheduler(opt, t_initial=10, lr_min=1e-3, warmup_t=3, warmup_lr_init=1e-4, cycle_limit=2,
                            cycle_decay=0.5)
    out["warm"] = [[g["lr"] for g in opt.param_groups]]
    for e in range(1, 24):
        s.step(e)
        out["warm"].append([g["lr"] for g in opt.param_groups])
    opt = torch.optim.SGD(p, lr=0.2)
    s = L.CosineLRScheduler(opt, t_initial=4, cycle_mul=2., cycle_limit=3, k_decay=2.0, warmup_t=2,
                            warmup_prefix=True, t_in_epochs=False)
    out["mul"] = []
    for u in range(0, 32):
        s.step(u)  # ignored: t_in_epochs=False
        s.step_update(u)
        out["mul"].append(opt.param_groups[0]["lr"])
    out["cycle_len"] = s.get_cycle_length()
    opt = torch.optim.SGD(p, lr=0.1)
    s = L.CosineLRScheduler(opt, t_initial=8, noise_range_t=(2, 6), noise_pct=0.3, noise_seed=7)
    out["noise"] = []
    for e in range(8):
        s.step(e)
        out["noise"].append(opt.param_groups[0]["lr"])
    return out


def test_timm_cosine_scheduler():
    L = timm_train(lucid)
    out = cosine_schedules(lucid, L)
    for g, base in enumerate((0.1, 0.05)):
        got = [lrs[g] for lrs in out["warm"]]
        for t, lr in enumerate(got):
            if t < 3:
                ref = 1e-4 + t * (base - 1e-4) / 3
            elif t < 20:
                i, tc = t // 10, t % 10
                ref = 1e-3 + 0.5 * (base * 0.5 ** i - 1e-3) * (1 + math.cos(math.pi * tc / 10))
            else:
                ref = 1e-3
            assert lr == pytest.approx(ref, rel=1e-12), (g, t)
    for u, lr in enumerate(out["mul"]):
        if u < 2:
            ref = u * 0.2 / 2
        else:
            t = u - 2
            i = math.floor(math.log(1 + t / 4, 2))
            ti, tc = 4 * 2 ** i, t - (2 ** i - 1) * 4
            ref = 0.5 * 0.2 * (1 + math.cos(math.pi * tc ** 2 / ti ** 2)) if i < 3 else 0.0
        assert lr == pytest.approx(ref, rel=1e-12, abs=1e-15), u
    assert out["cycle_len"] == 28
    clean = [0.05 * (1 + math.cos(math.pi * e / 8)) for e in range(8)]
    for e, (lr, c) in enumerate(zip(out["noise"], clean)):
        if 2 <= e < 6:
            assert lr != c and abs(lr / c - 1) < 0.3
        else:
            assert lr == pytest.approx(c, rel=1e-12)


def lion_run(torch, L, foreach, caution, steps=12):
    nn = torch.nn
    model = _fill(torch, nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 1)).double(), 16)
    opt = L.Lion(model.parameters(), lr=0.02, betas=(0.9, 0.99), weight_decay=0.1, caution=caution, foreach=foreach)
    rng = np.random.default_rng(17)
    X = rng.normal(size=(16, 4))
    Y = np.sin(X.sum(1, keepdims=True))
    X, Y = torch.tensor(X), torch.tensor(Y)
    losses, grads = [], []
    for _ in range(steps):
        opt.zero_grad()
        loss = (model(X) - Y).pow(2).mean()
        loss.backward()
        grads.append([_np(p.grad).copy() for p in model.parameters()])
        opt.step()
        losses.append(loss.item())
    return losses, grads, [_np(p) for p in model.parameters()]


def test_timm_lion():
    L = timm_train(lucid)
    init = [_np(p) for p in _fill(lucid, lucid.nn.Sequential(lucid.nn.Linear(4, 6), lucid.nn.Tanh(),
                                                             lucid.nn.Linear(6, 1)).double(), 16).parameters()]
    for caution in (False, True):
        runs = [lion_run(lucid, L, foreach, caution) for foreach in (True, False)]
        for a, b in zip(runs[0][2], runs[1][2]):  # multi- and single-tensor agree
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
        losses, grads, final = runs[0]
        assert losses[-1] < 0.7 * losses[0]  # stated margin: 30% down in 12 steps
        for k, p0 in enumerate(init):  # NumPy recurrence from the recorded gradients
            p, m = p0.copy(), np.zeros_like(p0)
            for g in grads:
                g = g[k]
                p *= 1 - 0.02 * 0.1
                u = np.sign(0.9 * m + 0.1 * g)
                if caution:
                    mask = (u * g > 0).astype(np.float64)
                    u = u * mask / max(mask.mean(), 1e-3)
                p -= 0.02 * u
                m = 0.99 * m + 0.01 * g
            np.testing.assert_allclose(final[k], p, rtol=1e-12, atol=1e-14)
    with pytest.raises(ValueError, match="Invalid beta parameter at index 1: 1.0"):
        L.Lion([lucid.nn.Parameter(lucid.zeros(1))], betas=(0.9, 1.0))


# --------------------------------------------------------------------------------------------
# DETR tests
# --------------------------------------------------------------------------------------------
def _np_giou(b1, b2):
    out = np.zeros((len(b1), len(b2)))
    for i, a in enumerate(b1):
        for j, b in enumerate(b2):
            iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
            ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
            inter = iw * ih
            union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
            hull = (max(a[2], b[2]) - min(a[0], b[0])) * (max(a[3], b[3]) - min(a[1], b[1]))
            out[i, j] = inter / union - (hull - union) / hull
    return out


def _cxcywh(rng, n):
    c = rng.uniform(0.25, 0.75, size=(n, 2))
    wh = rng.uniform(0.1, 0.5, size=(n, 2))
    return np.concatenate([c, wh], 1)


def _xyxy(b):
    return np.concatenate([b[:, :2] - b[:, 2:] / 2, b[:, :2] + b[:, 2:] / 2], 1)


def test_detr_box_ops():
    D = detr_page(lucid)
    rng = np.random.default_rng(20)
    a, b = _cxcywh(rng, 5), _cxcywh(rng, 4)
    ta, tb = lucid.tensor(a, requires_grad=True), lucid.tensor(b)
    xa = D.box_cxcywh_to_xyxy(ta)
    np.testing.assert_allclose(_np(xa), _xyxy(a), atol=1e-15)
    np.testing.assert_allclose(_np(D.box_xyxy_to_cxcywh(xa)), a, atol=1e-15)
    g = D.generalized_box_iou(xa, D.box_cxcywh_to_xyxy(tb))
    ref = _np_giou(_xyxy(a), _xyxy(b))
    np.testing.assert_allclose(_np(g), ref, rtol=1e-12, atol=1e-14)
    assert (ref > 0).any() and (ref < 0).any()  # overlapping and disjoint pairs both present
    iou, union = D.box_iou(xa, D.box_cxcywh_to_xyxy(tb))
    assert bool((iou <= 1).all()) and bool((union > 0).all())
    assert lucid.autograd.gradcheck(lambda t: D.generalized_box_iou(D.box_cxcywh_to_xyxy(t), D.box_cxcywh_to_xyxy(tb)),
                                    (ta,))
    with pytest.raises(AssertionError):
        D.generalized_box_iou(lucid.tensor([[0.5, 0.5, 0.2, 0.9]]), lucid.tensor([[0.0, 0.0, 1.0, 1.0]]))
    masks = np.zeros((3, 7, 9), dtype=bool)
    masks[0, 1:4, 2:7] = True
    masks[1, 5, 0] = True
    masks[2, 0:7, 3:5] = True
    masks[2, 2, 8] = True
    with pytest.warns(UserWarning, match="required to pass the indexing argument"):  # as PyTorch's meshgrid
        boxes = _np(D.masks_to_boxes(lucid.tensor(masks)))
    ref = []
    for m in masks:
        ys, xs = np.nonzero(m)
        ref.append([xs.min(), ys.min(), xs.max(), ys.max()])
    assert np.array_equal(boxes, np.array(ref, dtype=np.float32))
    assert D.masks_to_boxes(lucid.zeros(0, 7, 9, dtype=lucid.bool)).shape == (0, 4)


def test_detr_position_embedding_sine_and_nested_tensor():
    D = detr_page(lucid)
    rng = np.random.default_rng(21)
    imgs = [lucid.tensor(rng.normal(size=(3, 5, 6)).astype(np.float32)),
            lucid.tensor(rng.normal(size=(3, 4, 3)).astype(np.float32))]
    nt = D.nested_tensor_from_tensor_list(imgs)
    t, mask = nt.decompose()
    assert t.shape == (2, 3, 5, 6) and mask.shape == (2, 5, 6)
    tn, mn = _np(t), _np(mask)
    assert np.array_equal(tn[1, :, :4, :3], _np(imgs[1])) and not tn[1, :, 4:].any() and not tn[1, :, :, 3:].any()
    assert not mn[0].any() and mn[1].sum() == 30 - 12 and not mn[1, :4, :3].any()
    for normalize in (False, True):
        pe = D.PositionEmbeddingSine(4, temperature=100, normalize=normalize)
        pos = _np(pe(nt))
        assert pos.shape == (2, 8, 5, 6)
        nm = ~mn
        ye, xe = nm.cumsum(1).astype(np.float64), nm.cumsum(2).astype(np.float64)
        if normalize:
            ye = ye / (ye[:, -1:, :] + 1e-6) * 2 * math.pi
            xe = xe / (xe[:, :, -1:] + 1e-6) * 2 * math.pi
        dim_t = 100.0 ** (2 * (np.arange(4) // 2) / 4)
        ref = np.zeros((2, 8, 5, 6))
        for half, e in ((0, ye), (1, xe)):
            for f in range(4):
                arg = e / dim_t[f]
                ref[:, half * 4 + f] = np.sin(arg) if f % 2 == 0 else np.cos(arg)
        np.testing.assert_allclose(pos, ref, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="normalize should be True"):
        D.PositionEmbeddingSine(4, scale=1.0)


def _detr_outputs(rng, bs=2, nq=4, nc=3):
    logits = rng.normal(size=(bs, nq, nc + 1))
    boxes = np.stack([_cxcywh(rng, nq) for _ in range(bs)])
    targets = [(np.array([1, 0]), _cxcywh(rng, 2)), (np.array([2, 2, 1]), _cxcywh(rng, 3))][:bs]
    return logits, boxes, targets


def _targets(torch, targets):
    return [{"labels": torch.tensor(l), "boxes": torch.tensor(b)} for l, b in targets]


def test_detr_matcher_against_brute_force():
    D = detr_page(lucid)
    rng = np.random.default_rng(22)
    logits, boxes, targets = _detr_outputs(rng)
    matcher = D.HungarianMatcher(cost_class=1, cost_bbox=5, cost_giou=2)
    out = {"pred_logits": lucid.tensor(logits), "pred_boxes": lucid.tensor(boxes)}
    indices = matcher(out, _targets(lucid, targets))
    prob = np.exp(_np_log_softmax(logits))
    for b, ((i, j), (labels, tboxes)) in enumerate(zip(indices, targets)):
        assert i.dtype == lucid.int64 and j.dtype == lucid.int64
        C = (5 * np.abs(boxes[b][:, None] - tboxes[None]).sum(-1) - prob[b][:, labels]
             - 2 * _np_giou(_xyxy(boxes[b]), _xyxy(tboxes)))
        best = min(itertools.permutations(range(4), len(labels)), key=lambda p: sum(C[q, t] for t, q in enumerate(p)))
        got = dict(zip(j.tolist(), i.tolist()))
        assert [got[t] for t in range(len(labels))] == list(best)
    with pytest.raises(AssertionError, match="all costs cant be 0"):
        D.HungarianMatcher(0, 0, 0)


def test_detr_set_criterion():
    D = detr_page(lucid)
    rng = np.random.default_rng(23)
    logits, boxes, targets = _detr_outputs(rng)
    crit = D.SetCriterion(3, D.HungarianMatcher(), {"loss_ce": 1}, eos_coef=0.1, losses=["labels", "boxes", "cardinality"])
    assert _np(crit.empty_weight).tolist() == [1.0, 1.0, 1.0, np.float32(0.1)]
    tl, tb = lucid.tensor(logits, requires_grad=True), lucid.tensor(boxes, requires_grad=True)
    tg = _targets(lucid, targets)
    out = {"pred_logits": tl, "pred_boxes": tb}
    # float64 logits with the float32 class weights: refused as PyTorch does ("expected scalar type
    # Double but found Float"); Lucid used to cast the weights silently
    with pytest.raises(RuntimeError, match="expected a weight of the input's dtype lucid.float64, got lucid.float32"):
        crit(out, tg)
    crit.double()
    losses = crit(out, tg)
    indices = crit.matcher(out, tg)
    bi, si = crit._get_src_permutation_idx(indices)
    assert bi.tolist() == [0] * len(indices[0][0]) + [1] * len(indices[1][0])
    # NumPy: weighted NLL over all queries, the unmatched ones as "no object"
    cls = np.full((2, 4), 3)
    src_b, tgt_b = [], []
    for b, (i, j) in enumerate(indices):
        cls[b, i.tolist()] = targets[b][0][j.tolist()]
        src_b.append(boxes[b][i.tolist()])
        tgt_b.append(targets[b][1][j.tolist()])
    lp = _np_log_softmax(logits)
    wt = _np(crit.empty_weight)[cls]  # 0.1 rounded to float32, then widened by .double()
    ce = -(lp[np.arange(2)[:, None], np.arange(4)[None], cls] * wt).sum() / wt.sum()
    np.testing.assert_allclose(losses["loss_ce"].item(), ce, rtol=1e-12)
    src_b, tgt_b = np.concatenate(src_b), np.concatenate(tgt_b)
    np.testing.assert_allclose(losses["loss_bbox"].item(), np.abs(src_b - tgt_b).sum() / 5, rtol=1e-12)
    np.testing.assert_allclose(losses["loss_giou"].item(),
                               (1 - np.diag(_np_giou(_xyxy(src_b), _xyxy(tgt_b)))).sum() / 5, rtol=1e-12)
    matched_pred = np.concatenate([logits[b][i.tolist()].argmax(-1) for b, (i, _) in enumerate(indices)])
    matched_tgt = np.concatenate([targets[b][0][j.tolist()] for b, (_, j) in enumerate(indices)])
    np.testing.assert_allclose(losses["class_error"].item(), 100 - 100 * np.mean(matched_pred == matched_tgt), rtol=1e-6)
    card = np.abs((logits.argmax(-1) != 3).sum(1) - np.array([2, 3])).mean()
    assert losses["cardinality_error"].item() == card and not losses["cardinality_error"].requires_grad
    # gradients of the matched losses, float64 finite differences (the matching held fixed)
    assert lucid.autograd.gradcheck(
        lambda b: sum(crit.loss_boxes({"pred_boxes": b}, tg, indices, 5.0).values()), (tb,))
    assert lucid.autograd.gradcheck(
        lambda l: crit.loss_labels({"pred_logits": l}, tg, indices, 5.0, log=False)["loss_ce"], (tl,))


def tiny_detr(torch, D, seed=24):
    # models/backbone.py build_backbone, with the conv stack standing in for the ResNet body
    position_embedding = D.PositionEmbeddingSine(4, normalize=True)
    body = D.BackboneBase(D.ConvStackBody(6), 6)
    backbone = D.Joiner(body, position_embedding)
    backbone.num_channels = body.num_channels
    transformer = D.Transformer(d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=2,
                                dim_feedforward=16, dropout=0.0, return_intermediate_dec=True)
    model = D.DETR(backbone, transformer, num_classes=3, num_queries=5, aux_loss=True).double()
    return _fill(torch, model, seed, scale=0.2)


def _detr_batch():
    rng = np.random.default_rng(25)
    imgs = [rng.normal(size=(3, 12, 16)), rng.normal(size=(3, 8, 12))]
    targets = [(np.array([1, 0]), np.array([[0.3, 0.4, 0.2, 0.3], [0.7, 0.6, 0.3, 0.2]])),
               (np.array([2]), np.array([[0.5, 0.5, 0.4, 0.4]]))]
    return imgs, targets


def detr_train(torch, D, steps=12):
    model = tiny_detr(torch, D)
    imgs, targets = _detr_batch()
    imgs = [torch.tensor(i) for i in imgs]
    tg = _targets(torch, targets)
    weight_dict = {'loss_ce': 1, 'loss_bbox': 5, 'loss_giou': 2}
    weight_dict.update({k + '_0': v for k, v in list(weight_dict.items())})
    crit = D.SetCriterion(3, D.HungarianMatcher(1, 5, 2), weight_dict, eos_coef=0.1,
                          losses=["labels", "boxes", "cardinality"]).double()  # the model runs in float64
    opt = torch.optim.AdamW(model.parameters(), lr=2e-2, weight_decay=1e-4)
    totals, first = [], None
    for _ in range(steps):
        out = model(imgs)
        loss_dict = crit(out, tg)
        losses = sum(loss_dict[k] * weight_dict[k] for k in loss_dict.keys() if k in weight_dict)
        opt.zero_grad()
        losses.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
        opt.step()
        totals.append(losses.item())
        if first is None:
            first = ({k: _np(v) for k, v in out.items() if k != "aux_outputs"},
                     {k: v.item() for k, v in loss_dict.items()})
    return totals, first


def test_detr_transformer_ignores_padding():
    D = detr_page(lucid)
    model = tiny_detr(lucid, D)
    model.eval()
    imgs, _ = _detr_batch()
    nt = D.nested_tensor_from_tensor_list([lucid.tensor(i) for i in imgs])
    out = model(nt)
    assert out["pred_logits"].shape == (2, 5, 4) and out["pred_boxes"].shape == (2, 5, 4)
    assert len(out["aux_outputs"]) == 1 and out["aux_outputs"][0]["pred_boxes"].shape == (2, 5, 4)
    pb = _np(out["pred_boxes"])
    assert ((pb > 0) & (pb < 1)).all()
    # the small image alone (no padding) gives the same outputs as inside the padded batch: padded
    # features are masked out of every attention through key_padding_mask
    alone = model([lucid.tensor(imgs[1])])
    np.testing.assert_allclose(_np(alone["pred_logits"])[0], _np(out["pred_logits"])[1], rtol=1e-9, atol=1e-12)
    # and changing the padded pixels changes nothing in the features that are kept
    t, m = nt.decompose()
    t2 = t.clone()
    t2[1, :, 8:, :] = 5.0
    out2 = model(D.NestedTensor(t2, m))
    np.testing.assert_allclose(_np(out2["pred_boxes"]), pb, rtol=1e-9, atol=1e-12)


def test_detr_tiny_training():
    D = detr_page(lucid)
    totals, _ = detr_train(lucid, D)
    assert totals[-1] < 0.75 * totals[0]  # stated margin: 25% down in 12 AdamW steps


# --------------------------------------------------------------------------------------------
# PyTorch parity (same text, same NumPy-drawn weights and data)
# --------------------------------------------------------------------------------------------
def _layers_outputs(torch):
    T = timm_layers(torch)
    rng = np.random.default_rng(30)
    out = {}
    x = torch.tensor(np.linspace(-5, 5, 21), requires_grad=True)
    y = T.hard_swish(x) + T.hard_sigmoid(x) * 2 + T.GELU()(x) * 3
    y.sum().backward()
    out["act"], out["act_grad"] = _np(y), _np(x.grad)
    img = torch.tensor(rng.normal(size=(2, 6, 3, 2)))
    seq = torch.tensor(rng.normal(size=(2, 3, 6)))
    out["mlp"] = _np(_fill(torch, T.Mlp(6, 8, 5).double(), 1)(seq))
    out["glu"] = _np(_fill(torch, T.GluMlp(6, 8, 5, gate_last=False).double(), 2)(seq))
    out["glu_conv"] = _np(_fill(torch, T.GluMlp(6, 8, 5, use_conv=True).double(), 2)(img))
    out["ln2d"] = _np(_fill(torch, T.LayerNorm2d(6).double(), 3)(img))
    out["pe"] = _np(_fill(torch, T.PatchEmbed(img_size=(4, 6), patch_size=2, in_chans=3, embed_dim=5).double(), 4)(
        torch.tensor(rng.normal(size=(2, 3, 4, 6)))))
    blk = _fill(torch, T.Block(4, num_heads=2, mlp_ratio=1., qkv_bias=True, init_values=0.7, fused_attn=False).double(), 6)
    xb = torch.tensor(rng.normal(size=(2, 3, 4)), requires_grad=True)
    keep = torch.tensor([[True, False, True], [True, True, False], [True, True, True]])
    yb = blk(xb, attn_mask=keep) + blk(xb, is_causal=True)
    yb.pow(2).sum().backward()
    out["block"], out["block_grad"] = _np(yb), _np(xb.grad)
    cx = _fill(torch, T.ConvNeXtBlock(4, kernel_size=3, mlp_ratio=2, ls_init_value=0.5).double(), 9)
    xc = torch.tensor(rng.normal(size=(2, 4, 5, 5)), requires_grad=True)
    yc = cx(xc)
    yc.pow(2).sum().backward()
    out["convnext"], out["convnext_grad"] = _np(yc), _np(xc.grad)
    out["convnext_wgrad"] = _np(cx.conv_dw.weight.grad)
    losses, sd = vit_train(torch, T, True)
    out["vit_losses"], out["vit_sd"] = np.array(losses), sd
    return out


def test_timm_layers_torch_parity():
    torch = pytest.importorskip("torch")
    r, t = _layers_outputs(lucid), _layers_outputs(torch)
    for k in t:
        if k == "vit_sd":
            for name in t[k]:  # after 10 AdamW steps
                np.testing.assert_allclose(r[k][name], t[k][name], rtol=1e-7, atol=1e-9, err_msg=name)
        else:
            np.testing.assert_allclose(r[k], t[k], rtol=1e-9, atol=1e-12, err_msg=k)
    T = timm_layers(torch)  # weight init on PyTorch: the same bounds and closed-form moments
    v = T.trunc_normal_(torch.empty(200_000), 0.5, 0.2, 0.2, 1.0).double().numpy()
    m_ref, s_ref = _trunc_moments(0.5, 0.2, 0.2, 1.0)
    assert v.min() >= 0.2 and v.max() <= 1.0 and abs(v.mean() - m_ref) < 5 * s_ref / math.sqrt(200_000)


def _train_outputs(torch):
    L = timm_train(torch)
    out = {}
    rng = np.random.default_rng(31)
    xs, tgt = rng.normal(size=(5, 4)), np.array([0, 3, 1, 1, 2])
    ys = (rng.random((5, 4)) > 0.5).astype(np.float64)
    soft = rng.dirichlet(np.ones(4), size=5)
    crits = [(L.LabelSmoothingCrossEntropy(0.2), tgt), (L.SoftTargetCrossEntropy(), soft),
             (L.AsymmetricLossMultiLabel(), ys), (L.AsymmetricLossMultiLabel(disable_torch_grad_focal_loss=True,
                                                                          smoothing=0.1, pos_weight=2.0), ys),
             (L.AsymmetricLossSingleLabel(), tgt)]
    for n, (crit, target) in enumerate(crits):
        x = torch.tensor(xs, requires_grad=True)
        loss = crit(x, torch.tensor(target))
        loss.backward()
        out[f"loss{n}"], out[f"grad{n}"] = loss.item(), _np(x.grad)
    X0 = rng.normal(size=(4, 2, 6, 6)).astype(np.float32)
    t = torch.tensor([0, 2, 1, 3])
    for n, kw in enumerate([dict(mixup_alpha=1.0), dict(mixup_alpha=0., cutmix_alpha=1.0),
                            dict(mixup_alpha=0.8, cutmix_alpha=1.0, mode="pair"),
                            dict(mixup_alpha=0.8, cutmix_alpha=1.0, mode="elem", label_smoothing=0.1),
                            dict(cutmix_minmax=(0.2, 0.6), mode="elem")]):
        np.random.seed(40 + n)
        x = torch.tensor(X0.copy())
        _, target = L.Mixup(num_classes=5, **kw)(x, t)
        out[f"mix{n}"], out[f"mixt{n}"] = _np(x), _np(target)
    for version in (2, 3, "3-loop", "3-params"):
        hist, ema_sd, y = ema_run(torch, L, version)
        out[f"ema{version}"] = np.concatenate([v.ravel().astype(np.float64) for v in ema_sd.values()] + [y.ravel()])
    sch = cosine_schedules(torch, L)
    out["warm"], out["mul"], out["cycle_len"] = np.array(sch["warm"]), np.array(sch["mul"]), sch["cycle_len"]
    noise = np.array(sch["noise"])
    out["noise_free"] = noise[[0, 1, 6, 7]]  # the noise itself comes from each library's generator
    for caution in (False, True):
        losses, _, final = lion_run(torch, L, True, caution)
        out[f"lion{caution}"] = np.concatenate([np.array(losses)] + [p.ravel() for p in final])
    return out


def test_timm_train_torch_parity():
    torch = pytest.importorskip("torch")
    r, t = _train_outputs(lucid), _train_outputs(torch)
    assert r.keys() == t.keys()
    for k in t:
        # AsymmetricLossMultiLabel computes in float32: float32 tolerance there
        tol = dict(rtol=2e-6, atol=1e-7) if k[-1] in "23" and k[:4] in ("loss", "grad") else dict(rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(r[k], t[k], err_msg=k, **tol)


def _detr_outputs_all(torch):
    D = detr_page(torch)
    out = {}
    rng = np.random.default_rng(32)
    a, b = _cxcywh(rng, 5), _cxcywh(rng, 4)
    ta = torch.tensor(a, requires_grad=True)
    g = D.generalized_box_iou(D.box_cxcywh_to_xyxy(ta), D.box_cxcywh_to_xyxy(torch.tensor(b)))
    g.sum().backward()
    out["giou"], out["giou_grad"] = _np(g), _np(ta.grad)
    masks = rng.random((3, 6, 7)) > 0.6
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch: meshgrid without indexing=
        out["m2b"] = _np(D.masks_to_boxes(torch.tensor(masks)))
    imgs, targets = _detr_batch()
    nt = D.nested_tensor_from_tensor_list([torch.tensor(i) for i in imgs])
    out["pos"] = _np(D.PositionEmbeddingSine(4, normalize=True)(nt))
    logits, boxes, tgts = _detr_outputs(rng)
    o = {"pred_logits": torch.tensor(logits), "pred_boxes": torch.tensor(boxes)}
    idx = D.HungarianMatcher(1, 5, 2)(o, _targets(torch, tgts))
    out["match"] = np.concatenate([np.concatenate([i.numpy(), j.numpy()]) for i, j in idx])
    totals, (first_out, first_losses) = detr_train(torch, D)
    out["totals"] = np.array(totals)
    out.update({"first_" + k: v for k, v in first_out.items()})
    out["first_losses"] = np.array([first_losses[k] for k in sorted(first_losses)])
    return out


def test_detr_torch_parity():
    torch = pytest.importorskip("torch")
    r, t = _detr_outputs_all(lucid), _detr_outputs_all(torch)
    assert r.keys() == t.keys()
    for k in t:
        # the sine embedding is float32 (its cumsum's dtype); sin/cos differ by an ulp between the
        # libraries' math libraries, and the float64 model downstream sees that
        tol = dict(rtol=1e-8, atol=1e-10) if k in ("giou", "giou_grad", "m2b", "match") else dict(rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(r[k], t[k], err_msg=k, **tol)


def detr_empty_targets(torch):
    """An image without annotations: the matcher splits off a (queries, 0) cost block, SetCriterion
    concatenates empty index tensors, and every query of that image is supervised as "no object"."""
    D = detr_page(torch)
    logits, boxes, tg = _detr_outputs(np.random.default_rng(26))
    tg = [tg[0], (np.zeros(0, dtype=np.int64), np.zeros((0, 4)))]
    crit = D.SetCriterion(3, D.HungarianMatcher(), {}, 0.1, ["labels", "boxes", "cardinality"]).double()
    tl, tb = torch.tensor(logits, requires_grad=True), torch.tensor(boxes, requires_grad=True)
    targets = _targets(torch, tg)
    indices = crit.matcher({"pred_logits": tl, "pred_boxes": tb}, targets)
    losses = crit({"pred_logits": tl, "pred_boxes": tb}, targets)
    sum(v for k, v in losses.items() if k.startswith("loss")).backward()
    return (logits, boxes, tg, [(i.tolist(), j.tolist(), i.dtype == torch.int64) for i, j in indices],
            {k: v.item() for k, v in losses.items()}, _np(tl.grad), _np(tb.grad))


def test_detr_image_without_boxes():
    logits, boxes, tg, indices, losses, gl, gb = detr_empty_targets(lucid)
    assert indices[1] == ([], [], True) and sorted(indices[0][1]) == [0, 1] and indices[0][2]
    src = boxes[0][indices[0][0]]
    tgt = tg[0][1][indices[0][1]]
    np.testing.assert_allclose(losses["loss_bbox"], np.abs(src - tgt).sum() / 2, rtol=1e-12)
    cls = np.full((2, 4), 3)
    cls[0, indices[0][0]] = tg[0][0][indices[0][1]]
    w = np.array([1, 1, 1, np.float32(0.1)])[cls]
    lp = _np_log_softmax(logits)
    np.testing.assert_allclose(losses["loss_ce"], -(np.take_along_axis(lp, cls[..., None], -1)[..., 0] * w).sum() / w.sum(),
                               rtol=1e-12)
    assert losses["cardinality_error"] == np.abs((logits.argmax(-1) != 3).sum(1) - [2, 0]).mean()
    assert not gb[1].any() and gb[0].any()  # the box heads of the empty image get no gradient


def test_detr_image_without_boxes_torch_parity():
    torch = pytest.importorskip("torch")
    r, t = detr_empty_targets(lucid), detr_empty_targets(torch)
    assert r[3] == t[3] and r[4].keys() == t[4].keys()
    for k in t[4]:
        assert r[4][k] == pytest.approx(t[4][k], rel=1e-12)
    np.testing.assert_allclose(r[5], t[5], rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(r[6], t[6], rtol=1e-10, atol=1e-13)


def patch_resample_page(torch):
    T = timm_layers(torch)
    rng = np.random.default_rng(27)
    out = {}
    pe = _fill(torch, T.PatchEmbed(img_size=8, patch_size=4, in_chans=2, embed_dim=3), 28)
    im = torch.tensor(rng.normal(size=(1, 2, 8, 8)).astype(np.float32))
    out["before"] = _np(pe(im))
    # FlexiViT: the resampled 6x6 kernel on each patch resized to 6x6 gives the 4x4 kernel's tokens
    pe.set_input_size(img_size=12, patch_size=6)
    assert pe.grid_size == (2, 2) and pe.proj.weight.shape == (3, 2, 6, 6) and pe.proj.weight.dtype == torch.float32
    patches = im.reshape(1, 2, 2, 4, 2, 4).permute(0, 2, 4, 1, 3, 5).reshape(4, 2, 4, 4)
    patches = torch.nn.functional.interpolate(patches, size=(6, 6), mode='bicubic', antialias=True, align_corners=False)
    big = patches.reshape(1, 2, 2, 2, 6, 6).permute(0, 3, 1, 4, 2, 5).reshape(1, 2, 12, 12)
    out["after"] = _np(pe(big))
    out["kernel"] = _np(pe.proj.weight)
    posemb = torch.tensor(rng.normal(size=(1, 1 + 9, 4)))  # a cls token and a 3x3 grid, float64
    new = T.resample_abs_pos_embed(posemb, new_size=(2, 4))
    out["posemb"] = _np(new)
    const = torch.cat([torch.zeros(1, 1, 4, dtype=torch.float64), torch.ones(1, 9, 4, dtype=torch.float64) * 2.5], 1)
    out["const"] = _np(T.resample_abs_pos_embed(const, new_size=(5, 5)))
    out["same"] = T.resample_abs_pos_embed(posemb, new_size=(3, 3)) is posemb
    out["dtype"] = str(new.dtype)
    return out


def test_timm_resample_patch_and_pos_embed():
    out = patch_resample_page(lucid)
    np.testing.assert_allclose(out["after"], out["before"], rtol=1e-5, atol=1e-5)  # float32 pinv
    assert out["posemb"].shape == (1, 9, 4) and out["dtype"] == "lucid.float64" and out["same"]
    np.testing.assert_allclose(out["const"][0, 0], 0.0)
    np.testing.assert_allclose(out["const"][0, 1:], 2.5, rtol=1e-6)  # bicubic (antialiased) keeps a constant


def test_timm_resample_patch_and_pos_embed_torch_parity():
    torch = pytest.importorskip("torch")
    r, t = patch_resample_page(lucid), patch_resample_page(torch)
    for k in ("before", "after", "kernel", "posemb", "const"):
        np.testing.assert_allclose(r[k], t[k], rtol=1e-5, atol=2e-6, err_msg=k)  # float32 pinv and resizing
    assert r["same"] and t["same"] and t["dtype"] == "torch.float64"


def lamb_run(torch, L, steps=10, **kw):
    nn = torch.nn
    model = _fill(torch, nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 1)).double(), 18, scale=0.5)
    with torch.no_grad():
        model[2].bias.zero_()  # a zero weight: its trust ratio falls back to one
    decay = [model[0].weight, model[2].weight]
    opt = L.Lamb([{"params": decay}, {"params": [model[0].bias, model[2].bias], "weight_decay": 0.0}],
                 lr=0.05, weight_decay=0.1, max_grad_norm=0.5, **kw)
    rng = np.random.default_rng(19)
    X = rng.normal(size=(16, 4))
    Y = np.sin(X.sum(1, keepdims=True))
    X, Y = torch.tensor(X), torch.tensor(Y)
    losses, grads = [], []
    for _ in range(steps):
        opt.zero_grad()
        loss = (model(X) - Y).pow(2).mean()
        loss.backward()
        grads.append([_np(p.grad).copy() for p in model.parameters()])
        opt.step()
        losses.append(loss.item())
    return losses, grads, [_np(p) for p in model.parameters()]


def _np_lamb(init, grads, wd_of, always_adapt=False, trust_clip=False, lr=0.05, b1=0.9, b2=0.999, eps=1e-6):
    ps = [p.copy() for p in init]
    m = [np.zeros_like(p) for p in ps]
    v = [np.zeros_like(p) for p in ps]
    for step, gs in enumerate(grads, 1):
        norm = np.float32(math.sqrt(np.float32(sum(np.float32((g ** 2).sum()) for g in gs))))  # a float32 buffer
        clip = norm / np.float32(0.5) if norm > 0.5 else 1.0
        for k, g in enumerate(gs):
            g = g / clip
            m[k] = b1 * m[k] + (1 - b1) * g
            v[k] = b2 * v[k] + (1 - b2) * g * g
            u = (m[k] / (1 - b1 ** step)) / (np.sqrt(v[k]) / math.sqrt(1 - b2 ** step) + eps)
            wd = wd_of[k]
            if wd:
                u = u + wd * ps[k]
            if wd or always_adapt:
                wn, un = np.linalg.norm(ps[k]), np.linalg.norm(u)
                r = wn / un if wn > 0 and un > 0 else 1.0
                u = u * (min(r, 1.0) if trust_clip else r)
            ps[k] = ps[k] - lr * u
    return ps


def test_timm_lamb():
    L = timm_train(lucid)
    init = [_np(p) for p in _fill(lucid, lucid.nn.Sequential(lucid.nn.Linear(4, 6), lucid.nn.Tanh(),
                                                             lucid.nn.Linear(6, 1)).double(), 18, scale=0.5).parameters()]
    init[3] = np.zeros_like(init[3])
    for kw in ({}, {"always_adapt": True, "trust_clip": True}):
        losses, grads, final = lamb_run(lucid, L, **kw)
        assert losses[-1] < 0.7 * losses[0]  # stated margin: 30% down in 10 steps
        # the recorded gradients are the raw ones: Lamb divides p.grad in place afterwards (div_)
        ref = _np_lamb(init, grads, [0.1, 0.0, 0.1, 0.0], **kw)
        for a, b in zip(final, ref):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-9)  # the clip factor is a float32 scalar


def test_timm_lamb_torch_parity():
    torch = pytest.importorskip("torch")
    for kw in ({}, {"always_adapt": True, "trust_clip": True}):
        r, t = lamb_run(lucid, timm_train(lucid), **kw), lamb_run(torch, timm_train(torch), **kw)
        # float64 training, but the global norm is a float32 buffer (``buf.add_(0-d float64)`` adds in
        # float32 in both libraries) whose float32 ``sqrt`` PyTorch's vectorised kernel does not
        # always round correctly (NumPy's does), so the clip factor may differ in its last float32 bit
        np.testing.assert_allclose(r[0], t[0], rtol=1e-7)
        for a, b in zip(r[2], t[2]):
            np.testing.assert_allclose(a, b, rtol=1e-7, atol=1e-10)
