"""facebookresearch/segment-anything and meta-llama/llama (Llama 2), their pure-PyTorch code run on Lucid
(``import lucid as torch``):

- ``segment_anything/modeling/common.py``: ``MLPBlock`` and ``LayerNorm2d``.
- ``modeling/image_encoder.py``: ``ImageEncoderViT`` (``PatchEmbed``, the absolute ``pos_embed``, the
  neck of 1x1/3x3 convolutions and ``LayerNorm2d``), ``Block`` with ``window_partition`` (``F.pad`` of the
  token grid) / ``window_unpartition``, ``Attention`` with ``use_rel_pos``, ``get_rel_pos`` (the
  ``F.interpolate(mode="linear")`` resize of a relative-position table, the scaled coordinates when query
  and key sizes differ, indexing by ``relative_coords.long()``) and ``add_decomposed_rel_pos`` (``einsum``).
- ``modeling/prompt_encoder.py``: ``PositionEmbeddingRandom`` (the Gaussian-matrix buffer, the dense grid by
  ``cumsum``, ``forward_with_coords``) and ``PromptEncoder`` (``_embed_points`` with the padding point and
  the boolean-mask ``+=`` of the label embeddings, ``_embed_boxes``, ``_embed_masks``, the ``no_mask_embed``
  expanded when no mask is given).
- ``modeling/transformer.py``: ``TwoWayTransformer``, ``TwoWayAttentionBlock`` and ``Attention`` with
  ``downsample_rate``; ``modeling/mask_decoder.py``: ``MaskDecoder`` (``repeat_interleave`` of the image
  embedding per prompt, ``ConvTranspose2d`` upscaling, the hypernetwork ``MLP`` heads, multimask slicing).
- ``modeling/sam.py``: ``Sam`` (non-persistent ``pixel_mean``/``pixel_std`` buffers, ``preprocess`` by
  ``F.pad``, ``forward`` over a list of images with point, box and mask prompts, ``postprocess_masks`` by two
  bilinear ``F.interpolate``s around the crop of the padding); ``predictor.py``: ``SamPredictor``
  (``set_torch_image``, ``predict`` from NumPy prompts through ``torch.as_tensor``, the refinement round
  with the previous low-resolution logits as mask prompt, ``predict_torch``); ``utils/onnx.py``:
  ``SamOnnxModel`` (the traced ``_embed_points``/``_embed_masks`` by multiplications with boolean masks,
  ``resize_longest_image_size``, ``F.interpolate`` to a size given by 0-d tensors, ``select_masks`` by
  advanced indexing, stability scores and areas).
- ``utils/amg.py``: ``MaskData``, ``is_box_near_crop_edge``, ``box_xyxy_to_xywh``, ``batch_iterator``,
  ``mask_to_rle_pytorch`` / ``rle_to_mask`` / ``area_from_rle``, ``calculate_stability_score`` (sums
  with ``dtype=torch.int16``/``torch.int32``), ``build_point_grid``, ``uncrop_boxes_xyxy``,
  ``uncrop_points``, ``uncrop_masks`` and ``batched_mask_to_box``; ``utils/transforms.py``:
  ``ResizeLongestSide`` (``apply_coords``, ``apply_boxes``, their torch forms, ``apply_image_torch`` by
  antialiased bilinear ``F.interpolate``, ``get_preprocess_shape``).
- ``llama/model.py``: ``RMSNorm``, ``precompute_freqs_cis`` (``torch.polar``), ``reshape_for_broadcast``,
  ``apply_rotary_emb`` (``view_as_complex``/``view_as_real``), ``repeat_kv``, ``Attention`` with grouped
  key/value heads and its key/value cache written by slice assignment, ``FeedForward`` (``multiple_of``,
  ``ffn_dim_multiplier``), ``TransformerBlock`` and ``Transformer.forward`` under ``torch.inference_mode``
  (the ``triu`` mask with ``torch.hstack`` of zeros for the cached prefix); also in half precision
  (``model.half()``: float16 weights and cache, the ``.float()`` islands) and in bfloat16 (CPU only).
- ``llama/generation.py``: ``Llama.generate`` (the pad-filled token buffer, ``input_text_mask``, the
  ``torch.where`` that keeps prompt tokens, ``eos_reached``, log-probabilities by
  ``-F.cross_entropy(reduction="none", ignore_index=pad_id)``, ``echo``), ``text_completion`` and
  ``sample_top_p`` (``sort``, ``cumsum``, the boolean-mask write, ``div_``, ``multinomial``, ``gather``).

Sizes are tiny and data synthetic; each page is a function of the module handed to it as ``torch``.
Checks without PyTorch: NumPy recomputations of the whole image encoder (windows with padding, relative
positions), the prompt encoder, the two-way transformer and mask decoder (also with no sparse prompt), the
pre/post-processing (antialiased and plain bilinear resizes as matrices), the predictor and ONNX model, the
amg utilities, the Llama forward and its greedy decoding with log-probabilities; float64 central
differences through the mask decoder and a relative-position attention, closed-form gradients of the
label embeddings written by boolean-mask ``+=``; the complex rotary embedding against its
real-valued rotation form; cached decoding (prefix, a chunk of two, then one token) equal to the full
forward; RLE round trips; float64 central differences through ``get_rel_pos``'s interpolation; the
nucleus sampler's frequencies against the renormalised top-p distribution. The ``*_torch_parity``
tests run the same text on PyTorch with the same weights and data.

Adapted: fairscale's ``ColumnParallelLinear``/``RowParallelLinear``/``ParallelEmbedding`` are
``nn.Linear``/``nn.Embedding`` (their single-process behaviour) and ``get_model_parallel_world_size()``
is 1; the caches' ``.cuda()`` and ``device="cuda"`` are dropped (the default device is used);
``Transformer.forward`` is the latest Llama 2 text (mask ``triu(diagonal=1)`` then ``hstack`` with the
cached columns; the stored 2023-07 version builds a ``(1, 1, seqlen, seqlen)`` mask with
``diagonal=start_pos + 1``, which only works for one-token steps after a prefix); ``Llama.build``
(checkpoints, ``torch.distributed``) and ``chat_completion`` are left out and the SentencePiece
``Tokenizer`` is a letter-level stub with ``pad_id = -1``. ``LayerNorm2d`` is the upstream text (the
stored ``common.py`` is a fork hard-coding 256x64x64); ``ResizeLongestSide.apply_image`` (PIL via
torchvision), hence ``SamPredictor.set_image``, is left out, as are ``remove_small_regions`` (cv2),
``coco_encode_rle`` (pycocotools) and ``SamAutomaticMaskGenerator`` (torchvision's ``batched_nms``);
``apply_image_torch`` is the upstream text after its fix (the stored version passes ``image.shape[0],
image.shape[1]``, batch and channels, as the size to resize from). The SAM page functions drop the long
docstrings of the source; the code is its text.

Fixed on the way: nothing; Lucid ran all of it as PyTorch does.
"""
import math
from copy import deepcopy
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Dict, Generator, ItemsView, List, Optional, Tuple, Type

import numpy as np
import pytest

import lucid
import lucid.nn  # noqa: F401
import lucid.nn.functional  # noqa: F401


def _np(t):
    return np.asarray(t.detach().cpu().numpy())


# --------------------------------------------------------------------------- segment_anything/modeling/common.py

def sam_common_page(torch):
    nn = torch.nn

    class MLPBlock(nn.Module):
        def __init__(
            self,
            embedding_dim: int,
            mlp_dim: int,
            act: Type[nn.Module] = nn.GELU,
        ) -> None:
            super().__init__()
            self.lin1 = nn.Linear(embedding_dim, mlp_dim)
            self.lin2 = nn.Linear(mlp_dim, embedding_dim)
            self.act = act()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin2(self.act(self.lin1(x)))

    # From https://github.com/facebookresearch/detectron2/blob/main/detectron2/layers/batch_norm.py # noqa
    # Itself from https://github.com/facebookresearch/ConvNeXt/blob/d1fa8f6fef0a165b27399986cc2bdacc92777e40/models/convnext.py#L119  # noqa
    class LayerNorm2d(nn.Module):
        def __init__(self, num_channels: int, eps: float = 1e-6) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.ones(num_channels))
            self.bias = nn.Parameter(torch.zeros(num_channels))
            self.eps = eps

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            u = x.mean(1, keepdim=True)
            s = (x - u).pow(2).mean(1, keepdim=True)
            x = (x - u) / torch.sqrt(s + self.eps)
            x = self.weight[:, None, None] * x + self.bias[:, None, None]
            return x

    return SimpleNamespace(MLPBlock=MLPBlock, LayerNorm2d=LayerNorm2d)


# --------------------------------------------------------------------------- modeling/image_encoder.py

def sam_image_encoder_page(torch, common):
    nn = torch.nn
    F = torch.nn.functional
    LayerNorm2d, MLPBlock = common.LayerNorm2d, common.MLPBlock

    # This class and its supporting functions below lightly adapted from the ViTDet backbone available at: https://github.com/facebookresearch/detectron2/blob/main/detectron2/modeling/backbone/vit.py # noqa
    class ImageEncoderViT(nn.Module):
        def __init__(
            self,
            img_size: int = 1024,
            patch_size: int = 16,
            in_chans: int = 3,
            embed_dim: int = 768,
            depth: int = 12,
            num_heads: int = 12,
            mlp_ratio: float = 4.0,
            out_chans: int = 256,
            qkv_bias: bool = True,
            norm_layer: Type[nn.Module] = nn.LayerNorm,
            act_layer: Type[nn.Module] = nn.GELU,
            use_abs_pos: bool = True,
            use_rel_pos: bool = False,
            rel_pos_zero_init: bool = True,
            window_size: int = 0,
            global_attn_indexes: Tuple[int, ...] = (),
        ) -> None:
            super().__init__()
            self.img_size = img_size

            self.patch_embed = PatchEmbed(
                kernel_size=(patch_size, patch_size),
                stride=(patch_size, patch_size),
                in_chans=in_chans,
                embed_dim=embed_dim,
            )

            self.pos_embed: Optional[nn.Parameter] = None
            if use_abs_pos:
                # Initialize absolute positional embedding with pretrain image size.
                self.pos_embed = nn.Parameter(
                    torch.zeros(1, img_size // patch_size, img_size // patch_size, embed_dim)
                )

            self.blocks = nn.ModuleList()
            for i in range(depth):
                block = Block(
                    dim=embed_dim,
                    num_heads=num_heads,
                    mlp_ratio=mlp_ratio,
                    qkv_bias=qkv_bias,
                    norm_layer=norm_layer,
                    act_layer=act_layer,
                    use_rel_pos=use_rel_pos,
                    rel_pos_zero_init=rel_pos_zero_init,
                    window_size=window_size if i not in global_attn_indexes else 0,
                    input_size=(img_size // patch_size, img_size // patch_size),
                )
                self.blocks.append(block)

            self.neck = nn.Sequential(
                nn.Conv2d(
                    embed_dim,
                    out_chans,
                    kernel_size=1,
                    bias=False,
                ),
                LayerNorm2d(out_chans),
                nn.Conv2d(
                    out_chans,
                    out_chans,
                    kernel_size=3,
                    padding=1,
                    bias=False,
                ),
                LayerNorm2d(out_chans),
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.patch_embed(x)
            if self.pos_embed is not None:
                x = x + self.pos_embed

            for blk in self.blocks:
                x = blk(x)

            x = self.neck(x.permute(0, 3, 1, 2))

            return x

    class Block(nn.Module):
        """Transformer blocks with support of window attention and residual propagation blocks"""

        def __init__(
            self,
            dim: int,
            num_heads: int,
            mlp_ratio: float = 4.0,
            qkv_bias: bool = True,
            norm_layer: Type[nn.Module] = nn.LayerNorm,
            act_layer: Type[nn.Module] = nn.GELU,
            use_rel_pos: bool = False,
            rel_pos_zero_init: bool = True,
            window_size: int = 0,
            input_size: Optional[Tuple[int, int]] = None,
        ) -> None:
            super().__init__()
            self.norm1 = norm_layer(dim)
            self.attn = Attention(
                dim,
                num_heads=num_heads,
                qkv_bias=qkv_bias,
                use_rel_pos=use_rel_pos,
                rel_pos_zero_init=rel_pos_zero_init,
                input_size=input_size if window_size == 0 else (window_size, window_size),
            )

            self.norm2 = norm_layer(dim)
            self.mlp = MLPBlock(embedding_dim=dim, mlp_dim=int(dim * mlp_ratio), act=act_layer)

            self.window_size = window_size

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            shortcut = x
            x = self.norm1(x)
            # Window partition
            if self.window_size > 0:
                H, W = x.shape[1], x.shape[2]
                x, pad_hw = window_partition(x, self.window_size)

            x = self.attn(x)
            # Reverse window partition
            if self.window_size > 0:
                x = window_unpartition(x, self.window_size, pad_hw, (H, W))

            x = shortcut + x
            x = x + self.mlp(self.norm2(x))

            return x

    class Attention(nn.Module):
        """Multi-head Attention block with relative position embeddings."""

        def __init__(
            self,
            dim: int,
            num_heads: int = 8,
            qkv_bias: bool = True,
            use_rel_pos: bool = False,
            rel_pos_zero_init: bool = True,
            input_size: Optional[Tuple[int, int]] = None,
        ) -> None:
            super().__init__()
            self.num_heads = num_heads
            head_dim = dim // num_heads
            self.scale = head_dim**-0.5

            self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
            self.proj = nn.Linear(dim, dim)

            self.use_rel_pos = use_rel_pos
            if self.use_rel_pos:
                assert (
                    input_size is not None
                ), "Input size must be provided if using relative positional encoding."
                # initialize relative positional embeddings
                self.rel_pos_h = nn.Parameter(torch.zeros(2 * input_size[0] - 1, head_dim))
                self.rel_pos_w = nn.Parameter(torch.zeros(2 * input_size[1] - 1, head_dim))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            B, H, W, _ = x.shape
            # qkv with shape (3, B, nHead, H * W, C)
            qkv = self.qkv(x).reshape(B, H * W, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
            # q, k, v with shape (B * nHead, H * W, C)
            q, k, v = qkv.reshape(3, B * self.num_heads, H * W, -1).unbind(0)

            attn = (q * self.scale) @ k.transpose(-2, -1)

            if self.use_rel_pos:
                attn = add_decomposed_rel_pos(attn, q, self.rel_pos_h, self.rel_pos_w, (H, W), (H, W))

            attn = attn.softmax(dim=-1)
            x = (attn @ v).view(B, self.num_heads, H, W, -1).permute(0, 2, 3, 1, 4).reshape(B, H, W, -1)
            x = self.proj(x)

            return x

    def window_partition(x: torch.Tensor, window_size: int) -> Tuple[torch.Tensor, Tuple[int, int]]:
        B, H, W, C = x.shape

        pad_h = (window_size - H % window_size) % window_size
        pad_w = (window_size - W % window_size) % window_size
        if pad_h > 0 or pad_w > 0:
            x = F.pad(x, (0, 0, 0, pad_w, 0, pad_h))
        Hp, Wp = H + pad_h, W + pad_w

        x = x.view(B, Hp // window_size, window_size, Wp // window_size, window_size, C)
        windows = x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, window_size, window_size, C)
        return windows, (Hp, Wp)

    def window_unpartition(
        windows: torch.Tensor, window_size: int, pad_hw: Tuple[int, int], hw: Tuple[int, int]
    ) -> torch.Tensor:
        Hp, Wp = pad_hw
        H, W = hw
        B = windows.shape[0] // (Hp * Wp // window_size // window_size)
        x = windows.view(B, Hp // window_size, Wp // window_size, window_size, window_size, -1)
        x = x.permute(0, 1, 3, 2, 4, 5).contiguous().view(B, Hp, Wp, -1)

        if Hp > H or Wp > W:
            x = x[:, :H, :W, :].contiguous()
        return x

    def get_rel_pos(q_size: int, k_size: int, rel_pos: torch.Tensor) -> torch.Tensor:
        max_rel_dist = int(2 * max(q_size, k_size) - 1)
        # Interpolate rel pos if needed.
        if rel_pos.shape[0] != max_rel_dist:
            # Interpolate rel pos.
            rel_pos_resized = F.interpolate(
                rel_pos.reshape(1, rel_pos.shape[0], -1).permute(0, 2, 1),
                size=max_rel_dist,
                mode="linear",
            )
            rel_pos_resized = rel_pos_resized.reshape(-1, max_rel_dist).permute(1, 0)
        else:
            rel_pos_resized = rel_pos

        # Scale the coords with short length if shapes for q and k are different.
        q_coords = torch.arange(q_size)[:, None] * max(k_size / q_size, 1.0)
        k_coords = torch.arange(k_size)[None, :] * max(q_size / k_size, 1.0)
        relative_coords = (q_coords - k_coords) + (k_size - 1) * max(q_size / k_size, 1.0)

        return rel_pos_resized[relative_coords.long()]

    def add_decomposed_rel_pos(
        attn: torch.Tensor,
        q: torch.Tensor,
        rel_pos_h: torch.Tensor,
        rel_pos_w: torch.Tensor,
        q_size: Tuple[int, int],
        k_size: Tuple[int, int],
    ) -> torch.Tensor:
        q_h, q_w = q_size
        k_h, k_w = k_size
        Rh = get_rel_pos(q_h, k_h, rel_pos_h)
        Rw = get_rel_pos(q_w, k_w, rel_pos_w)

        B, _, dim = q.shape
        r_q = q.reshape(B, q_h, q_w, dim)
        rel_h = torch.einsum("bhwc,hkc->bhwk", r_q, Rh)
        rel_w = torch.einsum("bhwc,wkc->bhwk", r_q, Rw)

        attn = (
            attn.view(B, q_h, q_w, k_h, k_w) + rel_h[:, :, :, :, None] + rel_w[:, :, :, None, :]
        ).view(B, q_h * q_w, k_h * k_w)

        return attn

    class PatchEmbed(nn.Module):
        """
        Image to Patch Embedding.
        """

        def __init__(
            self,
            kernel_size: Tuple[int, int] = (16, 16),
            stride: Tuple[int, int] = (16, 16),
            padding: Tuple[int, int] = (0, 0),
            in_chans: int = 3,
            embed_dim: int = 768,
        ) -> None:
            super().__init__()

            self.proj = nn.Conv2d(
                in_chans, embed_dim, kernel_size=kernel_size, stride=stride, padding=padding
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.proj(x)
            # B C H W -> B H W C
            x = x.permute(0, 2, 3, 1)
            return x

    return SimpleNamespace(**{k: v for k, v in locals().items() if k[0].isupper() or k.startswith(
        ("window_", "get_rel", "add_dec"))})


# --------------------------------------------------------------------------- modeling/prompt_encoder.py

def sam_prompt_encoder_page(torch, common):
    nn = torch.nn
    LayerNorm2d = common.LayerNorm2d

    class PromptEncoder(nn.Module):
        def __init__(
            self,
            embed_dim: int,
            image_embedding_size: Tuple[int, int],
            input_image_size: Tuple[int, int],
            mask_in_chans: int,
            activation: Type[nn.Module] = nn.GELU,
        ) -> None:
            super().__init__()
            self.embed_dim = embed_dim
            self.input_image_size = input_image_size
            self.image_embedding_size = image_embedding_size
            self.pe_layer = PositionEmbeddingRandom(embed_dim // 2)

            self.num_point_embeddings: int = 4  # pos/neg point + 2 box corners
            point_embeddings = [nn.Embedding(1, embed_dim) for i in range(self.num_point_embeddings)]
            self.point_embeddings = nn.ModuleList(point_embeddings)
            self.not_a_point_embed = nn.Embedding(1, embed_dim)

            self.mask_input_size = (4 * image_embedding_size[0], 4 * image_embedding_size[1])
            self.mask_downscaling = nn.Sequential(
                nn.Conv2d(1, mask_in_chans // 4, kernel_size=2, stride=2),
                LayerNorm2d(mask_in_chans // 4),
                activation(),
                nn.Conv2d(mask_in_chans // 4, mask_in_chans, kernel_size=2, stride=2),
                LayerNorm2d(mask_in_chans),
                activation(),
                nn.Conv2d(mask_in_chans, embed_dim, kernel_size=1),
            )
            self.no_mask_embed = nn.Embedding(1, embed_dim)

        def get_dense_pe(self) -> torch.Tensor:
            return self.pe_layer(self.image_embedding_size).unsqueeze(0)

        def _embed_points(
            self,
            points: torch.Tensor,
            labels: torch.Tensor,
            pad: bool,
        ) -> torch.Tensor:
            """Embeds point prompts."""
            points = points + 0.5  # Shift to center of pixel
            if pad:
                padding_point = torch.zeros((points.shape[0], 1, 2), device=points.device)
                padding_label = -torch.ones((labels.shape[0], 1), device=labels.device)
                points = torch.cat([points, padding_point], dim=1)
                labels = torch.cat([labels, padding_label], dim=1)
            point_embedding = self.pe_layer.forward_with_coords(points, self.input_image_size)
            point_embedding[labels == -1] = 0.0
            point_embedding[labels == -1] += self.not_a_point_embed.weight
            point_embedding[labels == 0] += self.point_embeddings[0].weight
            point_embedding[labels == 1] += self.point_embeddings[1].weight
            return point_embedding

        def _embed_boxes(self, boxes: torch.Tensor) -> torch.Tensor:
            """Embeds box prompts."""
            boxes = boxes + 0.5  # Shift to center of pixel
            coords = boxes.reshape(-1, 2, 2)
            corner_embedding = self.pe_layer.forward_with_coords(coords, self.input_image_size)
            corner_embedding[:, 0, :] += self.point_embeddings[2].weight
            corner_embedding[:, 1, :] += self.point_embeddings[3].weight
            return corner_embedding

        def _embed_masks(self, masks: torch.Tensor) -> torch.Tensor:
            """Embeds mask inputs."""
            mask_embedding = self.mask_downscaling(masks)
            return mask_embedding

        def _get_batch_size(
            self,
            points: Optional[Tuple[torch.Tensor, torch.Tensor]],
            boxes: Optional[torch.Tensor],
            masks: Optional[torch.Tensor],
        ) -> int:
            if points is not None:
                return points[0].shape[0]
            elif boxes is not None:
                return boxes.shape[0]
            elif masks is not None:
                return masks.shape[0]
            else:
                return 1

        def _get_device(self) -> torch.device:
            return self.point_embeddings[0].weight.device

        def forward(
            self,
            points: Optional[Tuple[torch.Tensor, torch.Tensor]],
            boxes: Optional[torch.Tensor],
            masks: Optional[torch.Tensor],
        ) -> Tuple[torch.Tensor, torch.Tensor]:
            bs = self._get_batch_size(points, boxes, masks)
            sparse_embeddings = torch.empty((bs, 0, self.embed_dim), device=self._get_device())
            if points is not None:
                coords, labels = points
                point_embeddings = self._embed_points(coords, labels, pad=(boxes is None))
                sparse_embeddings = torch.cat([sparse_embeddings, point_embeddings], dim=1)
            if boxes is not None:
                box_embeddings = self._embed_boxes(boxes)
                sparse_embeddings = torch.cat([sparse_embeddings, box_embeddings], dim=1)

            if masks is not None:
                dense_embeddings = self._embed_masks(masks)
            else:
                dense_embeddings = self.no_mask_embed.weight.reshape(1, -1, 1, 1).expand(
                    bs, -1, self.image_embedding_size[0], self.image_embedding_size[1]
                )

            return sparse_embeddings, dense_embeddings

    class PositionEmbeddingRandom(nn.Module):
        """
        Positional encoding using random spatial frequencies.
        """

        def __init__(self, num_pos_feats: int = 64, scale: Optional[float] = None) -> None:
            super().__init__()
            if scale is None or scale <= 0.0:
                scale = 1.0
            self.register_buffer(
                "positional_encoding_gaussian_matrix",
                scale * torch.randn((2, num_pos_feats)),
            )

        def _pe_encoding(self, coords: torch.Tensor) -> torch.Tensor:
            """Positionally encode points that are normalized to [0,1]."""
            # assuming coords are in [0, 1]^2 square and have d_1 x ... x d_n x 2 shape
            coords = 2 * coords - 1
            coords = coords @ self.positional_encoding_gaussian_matrix
            coords = 2 * np.pi * coords
            # outputs d_1 x ... x d_n x C shape
            return torch.cat([torch.sin(coords), torch.cos(coords)], dim=-1)

        def forward(self, size: Tuple[int, int]) -> torch.Tensor:
            """Generate positional encoding for a grid of the specified size."""
            h, w = size
            device: Any = self.positional_encoding_gaussian_matrix.device
            grid = torch.ones((h, w), device=device, dtype=torch.float32)
            y_embed = grid.cumsum(dim=0) - 0.5
            x_embed = grid.cumsum(dim=1) - 0.5
            y_embed = y_embed / h
            x_embed = x_embed / w

            pe = self._pe_encoding(torch.stack([x_embed, y_embed], dim=-1))
            return pe.permute(2, 0, 1)  # C x H x W

        def forward_with_coords(
            self, coords_input: torch.Tensor, image_size: Tuple[int, int]
        ) -> torch.Tensor:
            """Positionally encode points that are not normalized to [0,1]."""
            coords = coords_input.clone()
            coords[:, :, 0] = coords[:, :, 0] / image_size[1]
            coords[:, :, 1] = coords[:, :, 1] / image_size[0]
            return self._pe_encoding(coords.to(torch.float))  # B x N x C

    return SimpleNamespace(PromptEncoder=PromptEncoder, PositionEmbeddingRandom=PositionEmbeddingRandom)


# --------------------------------------------------------------------------- modeling/transformer.py

def sam_transformer_page(torch, common):
    nn = torch.nn
    Tensor = torch.Tensor
    MLPBlock = common.MLPBlock

    class TwoWayTransformer(nn.Module):
        def __init__(
            self,
            depth: int,
            embedding_dim: int,
            num_heads: int,
            mlp_dim: int,
            activation: Type[nn.Module] = nn.ReLU,
            attention_downsample_rate: int = 2,
        ) -> None:
            super().__init__()
            self.depth = depth
            self.embedding_dim = embedding_dim
            self.num_heads = num_heads
            self.mlp_dim = mlp_dim
            self.layers = nn.ModuleList()

            for i in range(depth):
                self.layers.append(
                    TwoWayAttentionBlock(
                        embedding_dim=embedding_dim,
                        num_heads=num_heads,
                        mlp_dim=mlp_dim,
                        activation=activation,
                        attention_downsample_rate=attention_downsample_rate,
                        skip_first_layer_pe=(i == 0),
                    )
                )

            self.final_attn_token_to_image = Attention(
                embedding_dim, num_heads, downsample_rate=attention_downsample_rate
            )
            self.norm_final_attn = nn.LayerNorm(embedding_dim)

        def forward(
            self,
            image_embedding: Tensor,
            image_pe: Tensor,
            point_embedding: Tensor,
        ) -> Tuple[Tensor, Tensor]:
            # BxCxHxW -> BxHWxC == B x N_image_tokens x C
            bs, c, h, w = image_embedding.shape
            image_embedding = image_embedding.flatten(2).permute(0, 2, 1)
            image_pe = image_pe.flatten(2).permute(0, 2, 1)

            # Prepare queries
            queries = point_embedding
            keys = image_embedding

            # Apply transformer blocks and final layernorm
            for layer in self.layers:
                queries, keys = layer(
                    queries=queries,
                    keys=keys,
                    query_pe=point_embedding,
                    key_pe=image_pe,
                )

            # Apply the final attenion layer from the points to the image
            q = queries + point_embedding
            k = keys + image_pe
            attn_out = self.final_attn_token_to_image(q=q, k=k, v=keys)
            queries = queries + attn_out
            queries = self.norm_final_attn(queries)

            return queries, keys

    class TwoWayAttentionBlock(nn.Module):
        def __init__(
            self,
            embedding_dim: int,
            num_heads: int,
            mlp_dim: int = 2048,
            activation: Type[nn.Module] = nn.ReLU,
            attention_downsample_rate: int = 2,
            skip_first_layer_pe: bool = False,
        ) -> None:
            super().__init__()
            self.self_attn = Attention(embedding_dim, num_heads)
            self.norm1 = nn.LayerNorm(embedding_dim)

            self.cross_attn_token_to_image = Attention(
                embedding_dim, num_heads, downsample_rate=attention_downsample_rate
            )
            self.norm2 = nn.LayerNorm(embedding_dim)

            self.mlp = MLPBlock(embedding_dim, mlp_dim, activation)
            self.norm3 = nn.LayerNorm(embedding_dim)

            self.norm4 = nn.LayerNorm(embedding_dim)
            self.cross_attn_image_to_token = Attention(
                embedding_dim, num_heads, downsample_rate=attention_downsample_rate
            )

            self.skip_first_layer_pe = skip_first_layer_pe

        def forward(
            self, queries: Tensor, keys: Tensor, query_pe: Tensor, key_pe: Tensor
        ) -> Tuple[Tensor, Tensor]:
            # Self attention block
            if self.skip_first_layer_pe:
                queries = self.self_attn(q=queries, k=queries, v=queries)
            else:
                q = queries + query_pe
                attn_out = self.self_attn(q=q, k=q, v=queries)
                queries = queries + attn_out
            queries = self.norm1(queries)

            # Cross attention block, tokens attending to image embedding
            q = queries + query_pe
            k = keys + key_pe
            attn_out = self.cross_attn_token_to_image(q=q, k=k, v=keys)
            queries = queries + attn_out
            queries = self.norm2(queries)

            # MLP block
            mlp_out = self.mlp(queries)
            queries = queries + mlp_out
            queries = self.norm3(queries)

            # Cross attention block, image embedding attending to tokens
            q = queries + query_pe
            k = keys + key_pe
            attn_out = self.cross_attn_image_to_token(q=k, k=q, v=queries)
            keys = keys + attn_out
            keys = self.norm4(keys)

            return queries, keys

    class Attention(nn.Module):
        """
        An attention layer that allows for downscaling the size of the embedding
        after projection to queries, keys, and values.
        """

        def __init__(
            self,
            embedding_dim: int,
            num_heads: int,
            downsample_rate: int = 1,
        ) -> None:
            super().__init__()
            self.embedding_dim = embedding_dim
            self.internal_dim = embedding_dim // downsample_rate
            self.num_heads = num_heads
            assert self.internal_dim % num_heads == 0, "num_heads must divide embedding_dim."

            self.q_proj = nn.Linear(embedding_dim, self.internal_dim)
            self.k_proj = nn.Linear(embedding_dim, self.internal_dim)
            self.v_proj = nn.Linear(embedding_dim, self.internal_dim)
            self.out_proj = nn.Linear(self.internal_dim, embedding_dim)

        def _separate_heads(self, x: Tensor, num_heads: int) -> Tensor:
            b, n, c = x.shape
            x = x.reshape(b, n, num_heads, c // num_heads)
            return x.transpose(1, 2)  # B x N_heads x N_tokens x C_per_head

        def _recombine_heads(self, x: Tensor) -> Tensor:
            b, n_heads, n_tokens, c_per_head = x.shape
            x = x.transpose(1, 2)
            return x.reshape(b, n_tokens, n_heads * c_per_head)  # B x N_tokens x C

        def forward(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
            # Input projections
            q = self.q_proj(q)
            k = self.k_proj(k)
            v = self.v_proj(v)

            # Separate into heads
            q = self._separate_heads(q, self.num_heads)
            k = self._separate_heads(k, self.num_heads)
            v = self._separate_heads(v, self.num_heads)

            # Attention
            _, _, _, c_per_head = q.shape
            attn = q @ k.permute(0, 1, 3, 2)  # B x N_heads x N_tokens x N_tokens
            attn = attn / math.sqrt(c_per_head)
            attn = torch.softmax(attn, dim=-1)

            # Get output
            out = attn @ v
            out = self._recombine_heads(out)
            out = self.out_proj(out)

            return out

    return SimpleNamespace(TwoWayTransformer=TwoWayTransformer, TwoWayAttentionBlock=TwoWayAttentionBlock,
                           Attention=Attention)


# --------------------------------------------------------------------------- modeling/mask_decoder.py

def sam_mask_decoder_page(torch, common):
    nn = torch.nn
    F = torch.nn.functional
    LayerNorm2d = common.LayerNorm2d

    class MaskDecoder(nn.Module):
        def __init__(
            self,
            *,
            transformer_dim: int,
            transformer: nn.Module,
            num_multimask_outputs: int = 3,
            activation: Type[nn.Module] = nn.GELU,
            iou_head_depth: int = 3,
            iou_head_hidden_dim: int = 256,
        ) -> None:
            super().__init__()
            self.transformer_dim = transformer_dim
            self.transformer = transformer

            self.num_multimask_outputs = num_multimask_outputs

            self.iou_token = nn.Embedding(1, transformer_dim)
            self.num_mask_tokens = num_multimask_outputs + 1
            self.mask_tokens = nn.Embedding(self.num_mask_tokens, transformer_dim)

            self.output_upscaling = nn.Sequential(
                nn.ConvTranspose2d(transformer_dim, transformer_dim // 4, kernel_size=2, stride=2),
                LayerNorm2d(transformer_dim // 4),
                activation(),
                nn.ConvTranspose2d(transformer_dim // 4, transformer_dim // 8, kernel_size=2, stride=2),
                activation(),
            )
            self.output_hypernetworks_mlps = nn.ModuleList(
                [
                    MLP(transformer_dim, transformer_dim, transformer_dim // 8, 3)
                    for i in range(self.num_mask_tokens)
                ]
            )

            self.iou_prediction_head = MLP(
                transformer_dim, iou_head_hidden_dim, self.num_mask_tokens, iou_head_depth
            )

        def forward(
            self,
            image_embeddings: torch.Tensor,
            image_pe: torch.Tensor,
            sparse_prompt_embeddings: torch.Tensor,
            dense_prompt_embeddings: torch.Tensor,
            multimask_output: bool,
        ) -> Tuple[torch.Tensor, torch.Tensor]:
            masks, iou_pred = self.predict_masks(
                image_embeddings=image_embeddings,
                image_pe=image_pe,
                sparse_prompt_embeddings=sparse_prompt_embeddings,
                dense_prompt_embeddings=dense_prompt_embeddings,
            )

            # Select the correct mask or masks for outptu
            if multimask_output:
                mask_slice = slice(1, None)
            else:
                mask_slice = slice(0, 1)
            masks = masks[:, mask_slice, :, :]
            iou_pred = iou_pred[:, mask_slice]

            # Prepare output
            return masks, iou_pred

        def predict_masks(
            self,
            image_embeddings: torch.Tensor,
            image_pe: torch.Tensor,
            sparse_prompt_embeddings: torch.Tensor,
            dense_prompt_embeddings: torch.Tensor,
        ) -> Tuple[torch.Tensor, torch.Tensor]:
            """Predicts masks. See 'forward' for more details."""
            # Concatenate output tokens
            output_tokens = torch.cat([self.iou_token.weight, self.mask_tokens.weight], dim=0)
            output_tokens = output_tokens.unsqueeze(0).expand(sparse_prompt_embeddings.size(0), -1, -1)
            tokens = torch.cat((output_tokens, sparse_prompt_embeddings), dim=1)

            # Expand per-image data in batch direction to be per-mask
            src = torch.repeat_interleave(image_embeddings, tokens.shape[0], dim=0)
            src = src + dense_prompt_embeddings
            pos_src = torch.repeat_interleave(image_pe, tokens.shape[0], dim=0)
            b, c, h, w = src.shape

            # Run the transformer
            hs, src = self.transformer(src, pos_src, tokens)
            iou_token_out = hs[:, 0, :]
            mask_tokens_out = hs[:, 1 : (1 + self.num_mask_tokens), :]

            # Upscale mask embeddings and predict masks using the mask tokens
            src = src.transpose(1, 2).view(b, c, h, w)
            upscaled_embedding = self.output_upscaling(src)
            hyper_in_list: List[torch.Tensor] = []
            for i in range(self.num_mask_tokens):
                hyper_in_list.append(self.output_hypernetworks_mlps[i](mask_tokens_out[:, i, :]))
            hyper_in = torch.stack(hyper_in_list, dim=1)
            b, c, h, w = upscaled_embedding.shape
            masks = (hyper_in @ upscaled_embedding.view(b, c, h * w)).view(b, -1, h, w)

            # Generate mask quality predictions
            iou_pred = self.iou_prediction_head(iou_token_out)

            return masks, iou_pred

    # Lightly adapted from
    # https://github.com/facebookresearch/MaskFormer/blob/main/mask_former/modeling/transformer/transformer_predictor.py # noqa
    class MLP(nn.Module):
        def __init__(
            self,
            input_dim: int,
            hidden_dim: int,
            output_dim: int,
            num_layers: int,
            sigmoid_output: bool = False,
        ) -> None:
            super().__init__()
            self.num_layers = num_layers
            h = [hidden_dim] * (num_layers - 1)
            self.layers = nn.ModuleList(
                nn.Linear(n, k) for n, k in zip([input_dim] + h, h + [output_dim])
            )
            self.sigmoid_output = sigmoid_output

        def forward(self, x):
            for i, layer in enumerate(self.layers):
                x = F.relu(layer(x)) if i < self.num_layers - 1 else layer(x)
            if self.sigmoid_output:
                x = F.sigmoid(x)
            return x

    return SimpleNamespace(MaskDecoder=MaskDecoder, MLP=MLP)


# --------------------------------------------------------------------------- modeling/sam.py

def sam_page(torch):
    nn = torch.nn
    F = torch.nn.functional

    class Sam(nn.Module):
        mask_threshold: float = 0.0
        image_format: str = "RGB"

        def __init__(
            self,
            image_encoder,
            prompt_encoder,
            mask_decoder,
            pixel_mean: List[float] = [123.675, 116.28, 103.53],
            pixel_std: List[float] = [58.395, 57.12, 57.375],
        ) -> None:
            super().__init__()
            self.image_encoder = image_encoder
            self.prompt_encoder = prompt_encoder
            self.mask_decoder = mask_decoder
            self.register_buffer("pixel_mean", torch.Tensor(pixel_mean).view(-1, 1, 1), False)
            self.register_buffer("pixel_std", torch.Tensor(pixel_std).view(-1, 1, 1), False)

        @property
        def device(self) -> Any:
            return self.pixel_mean.device

        @torch.no_grad()
        def forward(
            self,
            batched_input: List[Dict[str, Any]],
            multimask_output: bool,
        ) -> List[Dict[str, torch.Tensor]]:
            input_images = torch.stack([self.preprocess(x["image"]) for x in batched_input], dim=0)
            image_embeddings = self.image_encoder(input_images)

            outputs = []
            for image_record, curr_embedding in zip(batched_input, image_embeddings):
                if "point_coords" in image_record:
                    points = (image_record["point_coords"], image_record["point_labels"])
                else:
                    points = None
                sparse_embeddings, dense_embeddings = self.prompt_encoder(
                    points=points,
                    boxes=image_record.get("boxes", None),
                    masks=image_record.get("mask_inputs", None),
                )
                low_res_masks, iou_predictions = self.mask_decoder(
                    image_embeddings=curr_embedding.unsqueeze(0),
                    image_pe=self.prompt_encoder.get_dense_pe(),
                    sparse_prompt_embeddings=sparse_embeddings,
                    dense_prompt_embeddings=dense_embeddings,
                    multimask_output=multimask_output,
                )
                masks = self.postprocess_masks(
                    low_res_masks,
                    input_size=image_record["image"].shape[-2:],
                    original_size=image_record["original_size"],
                )
                masks = masks > self.mask_threshold
                outputs.append(
                    {
                        "masks": masks,
                        "iou_predictions": iou_predictions,
                        "low_res_logits": low_res_masks,
                    }
                )
            return outputs

        def postprocess_masks(
            self,
            masks: torch.Tensor,
            input_size: Tuple[int, ...],
            original_size: Tuple[int, ...],
        ) -> torch.Tensor:
            masks = F.interpolate(
                masks,
                (self.image_encoder.img_size, self.image_encoder.img_size),
                mode="bilinear",
                align_corners=False,
            )
            masks = masks[..., : input_size[0], : input_size[1]]
            masks = F.interpolate(masks, original_size, mode="bilinear", align_corners=False)
            return masks

        def preprocess(self, x: torch.Tensor) -> torch.Tensor:
            """Normalize pixel values and pad to a square input."""
            # Normalize colors
            x = (x - self.pixel_mean) / self.pixel_std

            # Pad
            h, w = x.shape[-2:]
            padh = self.image_encoder.img_size - h
            padw = self.image_encoder.img_size - w
            x = F.pad(x, (0, padw, 0, padh))
            return x

    return SimpleNamespace(Sam=Sam)


# --------------------------------------------------------------------------- predictor.py

def sam_predictor_page(torch, ResizeLongestSide):
    class SamPredictor:
        def __init__(
            self,
            sam_model,
        ) -> None:
            super().__init__()
            self.model = sam_model
            self.transform = ResizeLongestSide(sam_model.image_encoder.img_size)
            self.reset_image()

        @torch.no_grad()
        def set_torch_image(
            self,
            transformed_image: torch.Tensor,
            original_image_size: Tuple[int, ...],
        ) -> None:
            assert (
                len(transformed_image.shape) == 4
                and transformed_image.shape[1] == 3
                and max(*transformed_image.shape[2:]) == self.model.image_encoder.img_size
            ), f"set_torch_image input must be BCHW with long side {self.model.image_encoder.img_size}."
            self.reset_image()

            self.original_size = original_image_size
            self.input_size = tuple(transformed_image.shape[-2:])
            input_image = self.model.preprocess(transformed_image)
            self.features = self.model.image_encoder(input_image)
            self.is_image_set = True

        def predict(
            self,
            point_coords: Optional[np.ndarray] = None,
            point_labels: Optional[np.ndarray] = None,
            box: Optional[np.ndarray] = None,
            mask_input: Optional[np.ndarray] = None,
            multimask_output: bool = True,
            return_logits: bool = False,
        ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            if not self.is_image_set:
                raise RuntimeError("An image must be set with .set_image(...) before mask prediction.")

            # Transform input prompts
            coords_torch, labels_torch, box_torch, mask_input_torch = None, None, None, None
            if point_coords is not None:
                assert (
                    point_labels is not None
                ), "point_labels must be supplied if point_coords is supplied."
                point_coords = self.transform.apply_coords(point_coords, self.original_size)
                coords_torch = torch.as_tensor(point_coords, dtype=torch.float, device=self.device)
                labels_torch = torch.as_tensor(point_labels, dtype=torch.int, device=self.device)
                coords_torch, labels_torch = coords_torch[None, :, :], labels_torch[None, :]
            if box is not None:
                box = self.transform.apply_boxes(box, self.original_size)
                box_torch = torch.as_tensor(box, dtype=torch.float, device=self.device)
                box_torch = box_torch[None, :]
            if mask_input is not None:
                mask_input_torch = torch.as_tensor(mask_input, dtype=torch.float, device=self.device)
                mask_input_torch = mask_input_torch[None, :, :, :]

            masks, iou_predictions, low_res_masks = self.predict_torch(
                coords_torch,
                labels_torch,
                box_torch,
                mask_input_torch,
                multimask_output,
                return_logits=return_logits,
            )

            masks = masks[0].detach().cpu().numpy()
            iou_predictions = iou_predictions[0].detach().cpu().numpy()
            low_res_masks = low_res_masks[0].detach().cpu().numpy()
            return masks, iou_predictions, low_res_masks

        @torch.no_grad()
        def predict_torch(
            self,
            point_coords: Optional[torch.Tensor],
            point_labels: Optional[torch.Tensor],
            boxes: Optional[torch.Tensor] = None,
            mask_input: Optional[torch.Tensor] = None,
            multimask_output: bool = True,
            return_logits: bool = False,
        ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            if not self.is_image_set:
                raise RuntimeError("An image must be set with .set_image(...) before mask prediction.")

            if point_coords is not None:
                points = (point_coords, point_labels)
            else:
                points = None

            # Embed prompts
            sparse_embeddings, dense_embeddings = self.model.prompt_encoder(
                points=points,
                boxes=boxes,
                masks=mask_input,
            )

            # Predict masks
            low_res_masks, iou_predictions = self.model.mask_decoder(
                image_embeddings=self.features,
                image_pe=self.model.prompt_encoder.get_dense_pe(),
                sparse_prompt_embeddings=sparse_embeddings,
                dense_prompt_embeddings=dense_embeddings,
                multimask_output=multimask_output,
            )

            # Upscale the masks to the original image resolution
            masks = self.model.postprocess_masks(low_res_masks, self.input_size, self.original_size)

            if not return_logits:
                masks = masks > self.model.mask_threshold

            return masks, iou_predictions, low_res_masks

        def get_image_embedding(self) -> torch.Tensor:
            if not self.is_image_set:
                raise RuntimeError(
                    "An image must be set with .set_image(...) to generate an embedding."
                )
            assert self.features is not None, "Features must exist if an image has been set."
            return self.features

        @property
        def device(self) -> torch.device:
            return self.model.device

        def reset_image(self) -> None:
            """Resets the currently set image."""
            self.is_image_set = False
            self.features = None
            self.orig_h = None
            self.orig_w = None
            self.input_h = None
            self.input_w = None

    return SimpleNamespace(SamPredictor=SamPredictor)


# --------------------------------------------------------------------------- utils/onnx.py

def sam_onnx_page(torch, calculate_stability_score):
    nn = torch.nn
    F = torch.nn.functional

    class SamOnnxModel(nn.Module):
        """
        This model should not be called directly, but is used in ONNX export.
        It combines the prompt encoder, mask decoder, and mask postprocessing of Sam,
        with some functions modified to enable model tracing. Also supports extra
        options controlling what information. See the ONNX export script for details.
        """

        def __init__(
            self,
            model,
            return_single_mask: bool,
            use_stability_score: bool = False,
            return_extra_metrics: bool = False,
        ) -> None:
            super().__init__()
            self.mask_decoder = model.mask_decoder
            self.model = model
            self.img_size = model.image_encoder.img_size
            self.return_single_mask = return_single_mask
            self.use_stability_score = use_stability_score
            self.stability_score_offset = 1.0
            self.return_extra_metrics = return_extra_metrics

        @staticmethod
        def resize_longest_image_size(
            input_image_size: torch.Tensor, longest_side: int
        ) -> torch.Tensor:
            input_image_size = input_image_size.to(torch.float32)
            scale = longest_side / torch.max(input_image_size)
            transformed_size = scale * input_image_size
            transformed_size = torch.floor(transformed_size + 0.5).to(torch.int64)
            return transformed_size

        def _embed_points(self, point_coords: torch.Tensor, point_labels: torch.Tensor) -> torch.Tensor:
            point_coords = point_coords + 0.5
            point_coords = point_coords / self.img_size
            point_embedding = self.model.prompt_encoder.pe_layer._pe_encoding(point_coords)
            point_labels = point_labels.unsqueeze(-1).expand_as(point_embedding)

            point_embedding = point_embedding * (point_labels != -1)
            point_embedding = point_embedding + self.model.prompt_encoder.not_a_point_embed.weight * (
                point_labels == -1
            )

            for i in range(self.model.prompt_encoder.num_point_embeddings):
                point_embedding = point_embedding + self.model.prompt_encoder.point_embeddings[
                    i
                ].weight * (point_labels == i)

            return point_embedding

        def _embed_masks(self, input_mask: torch.Tensor, has_mask_input: torch.Tensor) -> torch.Tensor:
            mask_embedding = has_mask_input * self.model.prompt_encoder.mask_downscaling(input_mask)
            mask_embedding = mask_embedding + (
                1 - has_mask_input
            ) * self.model.prompt_encoder.no_mask_embed.weight.reshape(1, -1, 1, 1)
            return mask_embedding

        def mask_postprocessing(self, masks: torch.Tensor, orig_im_size: torch.Tensor) -> torch.Tensor:
            masks = F.interpolate(
                masks,
                size=(self.img_size, self.img_size),
                mode="bilinear",
                align_corners=False,
            )

            prepadded_size = self.resize_longest_image_size(orig_im_size, self.img_size)
            masks = masks[..., : int(prepadded_size[0]), : int(prepadded_size[1])]

            orig_im_size = orig_im_size.to(torch.int64)
            h, w = orig_im_size[0], orig_im_size[1]
            masks = F.interpolate(masks, size=(h, w), mode="bilinear", align_corners=False)
            return masks

        def select_masks(
            self, masks: torch.Tensor, iou_preds: torch.Tensor, num_points: int
        ) -> Tuple[torch.Tensor, torch.Tensor]:
            # Determine if we should return the multiclick mask or not from the number of points.
            # The reweighting is used to avoid control flow.
            score_reweight = torch.tensor(
                [[1000] + [0] * (self.model.mask_decoder.num_mask_tokens - 1)]
            ).to(iou_preds.device)
            score = iou_preds + (num_points - 2.5) * score_reweight
            best_idx = torch.argmax(score, dim=1)
            masks = masks[torch.arange(masks.shape[0]), best_idx, :, :].unsqueeze(1)
            iou_preds = iou_preds[torch.arange(masks.shape[0]), best_idx].unsqueeze(1)

            return masks, iou_preds

        @torch.no_grad()
        def forward(
            self,
            image_embeddings: torch.Tensor,
            point_coords: torch.Tensor,
            point_labels: torch.Tensor,
            mask_input: torch.Tensor,
            has_mask_input: torch.Tensor,
            orig_im_size: torch.Tensor,
        ):
            sparse_embedding = self._embed_points(point_coords, point_labels)
            dense_embedding = self._embed_masks(mask_input, has_mask_input)

            masks, scores = self.model.mask_decoder.predict_masks(
                image_embeddings=image_embeddings,
                image_pe=self.model.prompt_encoder.get_dense_pe(),
                sparse_prompt_embeddings=sparse_embedding,
                dense_prompt_embeddings=dense_embedding,
            )

            if self.use_stability_score:
                scores = calculate_stability_score(
                    masks, self.model.mask_threshold, self.stability_score_offset
                )

            if self.return_single_mask:
                masks, scores = self.select_masks(masks, scores, point_coords.shape[1])

            upscaled_masks = self.mask_postprocessing(masks, orig_im_size)

            if self.return_extra_metrics:
                stability_scores = calculate_stability_score(
                    upscaled_masks, self.model.mask_threshold, self.stability_score_offset
                )
                areas = (upscaled_masks > self.model.mask_threshold).sum(-1).sum(-1)
                return upscaled_masks, scores, stability_scores, areas, masks

            return upscaled_masks, scores, masks

    return SimpleNamespace(SamOnnxModel=SamOnnxModel)


# --------------------------------------------------------------------------- utils/amg.py and utils/transforms.py

def sam_amg_page(torch):
    F = torch.nn.functional

    class MaskData:
        """
        A structure for storing masks and their related data in batched format.
        Implements basic filtering and concatenation.
        """

        def __init__(self, **kwargs) -> None:
            for v in kwargs.values():
                assert isinstance(
                    v, (list, np.ndarray, torch.Tensor)
                ), "MaskData only supports list, numpy arrays, and torch tensors."
            self._stats = dict(**kwargs)

        def __setitem__(self, key: str, item: Any) -> None:
            assert isinstance(
                item, (list, np.ndarray, torch.Tensor)
            ), "MaskData only supports list, numpy arrays, and torch tensors."
            self._stats[key] = item

        def __delitem__(self, key: str) -> None:
            del self._stats[key]

        def __getitem__(self, key: str) -> Any:
            return self._stats[key]

        def items(self) -> ItemsView[str, Any]:
            return self._stats.items()

        def filter(self, keep: torch.Tensor) -> None:
            for k, v in self._stats.items():
                if v is None:
                    self._stats[k] = None
                elif isinstance(v, torch.Tensor):
                    self._stats[k] = v[torch.as_tensor(keep, device=v.device)]
                elif isinstance(v, np.ndarray):
                    self._stats[k] = v[keep.detach().cpu().numpy()]
                elif isinstance(v, list) and keep.dtype == torch.bool:
                    self._stats[k] = [a for i, a in enumerate(v) if keep[i]]
                elif isinstance(v, list):
                    self._stats[k] = [v[i] for i in keep]
                else:
                    raise TypeError(f"MaskData key {k} has an unsupported type {type(v)}.")

        def cat(self, new_stats: "MaskData") -> None:
            for k, v in new_stats.items():
                if k not in self._stats or self._stats[k] is None:
                    self._stats[k] = deepcopy(v)
                elif isinstance(v, torch.Tensor):
                    self._stats[k] = torch.cat([self._stats[k], v], dim=0)
                elif isinstance(v, np.ndarray):
                    self._stats[k] = np.concatenate([self._stats[k], v], axis=0)
                elif isinstance(v, list):
                    self._stats[k] = self._stats[k] + deepcopy(v)
                else:
                    raise TypeError(f"MaskData key {k} has an unsupported type {type(v)}.")

        def to_numpy(self) -> None:
            for k, v in self._stats.items():
                if isinstance(v, torch.Tensor):
                    self._stats[k] = v.detach().cpu().numpy()

    def is_box_near_crop_edge(
        boxes: torch.Tensor, crop_box: List[int], orig_box: List[int], atol: float = 20.0
    ) -> torch.Tensor:
        """Filter masks at the edge of a crop, but not at the edge of the original image."""
        crop_box_torch = torch.as_tensor(crop_box, dtype=torch.float, device=boxes.device)
        orig_box_torch = torch.as_tensor(orig_box, dtype=torch.float, device=boxes.device)
        boxes = uncrop_boxes_xyxy(boxes, crop_box).float()
        near_crop_edge = torch.isclose(boxes, crop_box_torch[None, :], atol=atol, rtol=0)
        near_image_edge = torch.isclose(boxes, orig_box_torch[None, :], atol=atol, rtol=0)
        near_crop_edge = torch.logical_and(near_crop_edge, ~near_image_edge)
        return torch.any(near_crop_edge, dim=1)

    def box_xyxy_to_xywh(box_xyxy: torch.Tensor) -> torch.Tensor:
        box_xywh = deepcopy(box_xyxy)
        box_xywh[2] = box_xywh[2] - box_xywh[0]
        box_xywh[3] = box_xywh[3] - box_xywh[1]
        return box_xywh

    def batch_iterator(batch_size: int, *args) -> Generator[List[Any], None, None]:
        assert len(args) > 0 and all(
            len(a) == len(args[0]) for a in args
        ), "Batched iteration must have inputs of all the same size."
        n_batches = len(args[0]) // batch_size + int(len(args[0]) % batch_size != 0)
        for b in range(n_batches):
            yield [arg[b * batch_size: (b + 1) * batch_size] for arg in args]

    def mask_to_rle_pytorch(tensor: torch.Tensor) -> List[Dict[str, Any]]:
        """
        Encodes masks to an uncompressed RLE, in the format expected by
        pycoco tools.
        """
        # Put in fortran order and flatten h,w
        b, h, w = tensor.shape
        tensor = tensor.permute(0, 2, 1).flatten(1)

        # Compute change indices
        diff = tensor[:, 1:] ^ tensor[:, :-1]
        change_indices = diff.nonzero()

        # Encode run length
        out = []
        for i in range(b):
            cur_idxs = change_indices[change_indices[:, 0] == i, 1]
            cur_idxs = torch.cat(
                [
                    torch.tensor([0], dtype=cur_idxs.dtype, device=cur_idxs.device),
                    cur_idxs + 1,
                    torch.tensor([h * w], dtype=cur_idxs.dtype, device=cur_idxs.device),
                ]
            )
            btw_idxs = cur_idxs[1:] - cur_idxs[:-1]
            counts = [] if tensor[i, 0] == 0 else [0]
            counts.extend(btw_idxs.detach().cpu().tolist())
            out.append({"size": [h, w], "counts": counts})
        return out

    def rle_to_mask(rle: Dict[str, Any]) -> np.ndarray:
        """Compute a binary mask from an uncompressed RLE."""
        h, w = rle["size"]
        mask = np.empty(h * w, dtype=bool)
        idx = 0
        parity = False
        for count in rle["counts"]:
            mask[idx: idx + count] = parity
            idx += count
            parity ^= True
        mask = mask.reshape(w, h)
        return mask.transpose()  # Put in C order

    def area_from_rle(rle: Dict[str, Any]) -> int:
        return sum(rle["counts"][1::2])

    def calculate_stability_score(
        masks: torch.Tensor, mask_threshold: float, threshold_offset: float
    ) -> torch.Tensor:
        # One mask is always contained inside the other.
        # Save memory by preventing unnecessary cast to torch.int64
        intersections = (
            (masks > (mask_threshold + threshold_offset))
            .sum(-1, dtype=torch.int16)
            .sum(-1, dtype=torch.int32)
        )
        unions = (
            (masks > (mask_threshold - threshold_offset))
            .sum(-1, dtype=torch.int16)
            .sum(-1, dtype=torch.int32)
        )
        return intersections / unions

    def build_point_grid(n_per_side: int) -> np.ndarray:
        """Generates a 2D grid of points evenly spaced in [0,1]x[0,1]."""
        offset = 1 / (2 * n_per_side)
        points_one_side = np.linspace(offset, 1 - offset, n_per_side)
        points_x = np.tile(points_one_side[None, :], (n_per_side, 1))
        points_y = np.tile(points_one_side[:, None], (1, n_per_side))
        points = np.stack([points_x, points_y], axis=-1).reshape(-1, 2)
        return points

    def uncrop_boxes_xyxy(boxes: torch.Tensor, crop_box: List[int]) -> torch.Tensor:
        x0, y0, _, _ = crop_box
        offset = torch.tensor([[x0, y0, x0, y0]], device=boxes.device)
        # Check if boxes has a channel dimension
        if len(boxes.shape) == 3:
            offset = offset.unsqueeze(1)
        return boxes + offset

    def uncrop_points(points: torch.Tensor, crop_box: List[int]) -> torch.Tensor:
        x0, y0, _, _ = crop_box
        offset = torch.tensor([[x0, y0]], device=points.device)
        # Check if points has a channel dimension
        if len(points.shape) == 3:
            offset = offset.unsqueeze(1)
        return points + offset

    def uncrop_masks(
        masks: torch.Tensor, crop_box: List[int], orig_h: int, orig_w: int
    ) -> torch.Tensor:
        x0, y0, x1, y1 = crop_box
        if x0 == 0 and y0 == 0 and x1 == orig_w and y1 == orig_h:
            return masks
        # Coordinate transform masks
        pad_x, pad_y = orig_w - (x1 - x0), orig_h - (y1 - y0)
        pad = (x0, pad_x - x0, y0, pad_y - y0)
        return torch.nn.functional.pad(masks, pad, value=0)

    def batched_mask_to_box(masks: torch.Tensor) -> torch.Tensor:
        """
        Calculates boxes in XYXY format around masks. Return [0,0,0,0] for
        an empty mask. For input shape C1xC2x...xHxW, the output shape is C1xC2x...x4.
        """
        # torch.max below raises an error on empty inputs, just skip in this case
        if torch.numel(masks) == 0:
            return torch.zeros(*masks.shape[:-2], 4, device=masks.device)

        # Normalize shape to CxHxW
        shape = masks.shape
        h, w = shape[-2:]
        if len(shape) > 2:
            masks = masks.flatten(0, -3)
        else:
            masks = masks.unsqueeze(0)

        # Get top and bottom edges
        in_height, _ = torch.max(masks, dim=-1)
        in_height_coords = in_height * torch.arange(h, device=in_height.device)[None, :]
        bottom_edges, _ = torch.max(in_height_coords, dim=-1)
        in_height_coords = in_height_coords + h * (~in_height)
        top_edges, _ = torch.min(in_height_coords, dim=-1)

        # Get left and right edges
        in_width, _ = torch.max(masks, dim=-2)
        in_width_coords = in_width * torch.arange(w, device=in_width.device)[None, :]
        right_edges, _ = torch.max(in_width_coords, dim=-1)
        in_width_coords = in_width_coords + w * (~in_width)
        left_edges, _ = torch.min(in_width_coords, dim=-1)

        # If the mask is empty the right edge will be to the left of the left edge.
        # Replace these boxes with [0, 0, 0, 0]
        empty_filter = (right_edges < left_edges) | (bottom_edges < top_edges)
        out = torch.stack([left_edges, top_edges, right_edges, bottom_edges], dim=-1)
        out = out * (~empty_filter).unsqueeze(-1)

        # Return to original shape
        if len(shape) > 2:
            out = out.reshape(*shape[:-2], 4)
        else:
            out = out[0]

        return out

    class ResizeLongestSide:
        """
        Resizes images to the longest side 'target_length', as well as provides
        methods for resizing coordinates and boxes. Provides methods for
        transforming both numpy array and batched torch tensors.
        """

        def __init__(self, target_length: int) -> None:
            self.target_length = target_length

        def apply_coords(self, coords: np.ndarray, original_size: Tuple[int, ...]) -> np.ndarray:
            old_h, old_w = original_size
            new_h, new_w = self.get_preprocess_shape(
                original_size[0], original_size[1], self.target_length
            )
            coords = deepcopy(coords).astype(float)
            coords[..., 0] = coords[..., 0] * (new_w / old_w)
            coords[..., 1] = coords[..., 1] * (new_h / old_h)
            return coords

        def apply_boxes(self, boxes: np.ndarray, original_size: Tuple[int, ...]) -> np.ndarray:
            boxes = self.apply_coords(boxes.reshape(-1, 2, 2), original_size)
            return boxes.reshape(-1, 4)

        def apply_coords_torch(
            self, coords: torch.Tensor, original_size: Tuple[int, ...]
        ) -> torch.Tensor:
            old_h, old_w = original_size
            new_h, new_w = self.get_preprocess_shape(
                original_size[0], original_size[1], self.target_length
            )
            coords = deepcopy(coords).to(torch.float)
            coords[..., 0] = coords[..., 0] * (new_w / old_w)
            coords[..., 1] = coords[..., 1] * (new_h / old_h)
            return coords

        def apply_image_torch(self, image: torch.Tensor) -> torch.Tensor:
            """
            Expects batched images with shape BxCxHxW and float format. This
            transformation may not exactly match apply_image. apply_image is
            the transformation expected by the model.
            """
            # Expects an image in BCHW format. May not exactly match apply_image.
            target_size = self.get_preprocess_shape(image.shape[2], image.shape[3], self.target_length)
            return F.interpolate(
                image, target_size, mode="bilinear", align_corners=False, antialias=True
            )

        def apply_boxes_torch(
            self, boxes: torch.Tensor, original_size: Tuple[int, ...]
        ) -> torch.Tensor:
            boxes = self.apply_coords_torch(boxes.reshape(-1, 2, 2), original_size)
            return boxes.reshape(-1, 4)

        @staticmethod
        def get_preprocess_shape(oldh: int, oldw: int, long_side_length: int) -> Tuple[int, int]:
            scale = long_side_length * 1.0 / max(oldh, oldw)
            newh, neww = oldh * scale, oldw * scale
            neww = int(neww + 0.5)
            newh = int(newh + 0.5)
            return (newh, neww)

    return SimpleNamespace(**{k: v for k, v in locals().items() if not k.startswith("torch")})


# --------------------------------------------------------------------------- llama/model.py

@dataclass
class ModelArgs:
    dim: int = 4096
    n_layers: int = 32
    n_heads: int = 32
    n_kv_heads: Optional[int] = None
    vocab_size: int = -1  # defined later by tokenizer
    multiple_of: int = 256  # make SwiGLU hidden layer size multiple of large power of 2
    ffn_dim_multiplier: Optional[float] = None
    norm_eps: float = 1e-5

    max_batch_size: int = 32
    max_seq_len: int = 2048


def llama_model_page(torch):
    nn = torch.nn
    F = torch.nn.functional

    class fs_init:  # fairscale.nn.model_parallel.initialize, one process
        @staticmethod
        def get_model_parallel_world_size():
            return 1

    def ColumnParallelLinear(in_features, out_features, bias=True, gather_output=True, init_method=None):
        return nn.Linear(in_features, out_features, bias=bias)

    def RowParallelLinear(in_features, out_features, bias=True, input_is_parallel=False, init_method=None):
        return nn.Linear(in_features, out_features, bias=bias)

    def ParallelEmbedding(num_embeddings, embedding_dim, init_method=None):
        return nn.Embedding(num_embeddings, embedding_dim)

    class RMSNorm(torch.nn.Module):
        def __init__(self, dim: int, eps: float = 1e-6):
            super().__init__()
            self.eps = eps
            self.weight = nn.Parameter(torch.ones(dim))

        def _norm(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

        def forward(self, x):
            output = self._norm(x.float()).type_as(x)
            return output * self.weight

    def precompute_freqs_cis(dim: int, end: int, theta: float = 10000.0):
        freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
        t = torch.arange(end, device=freqs.device)  # type: ignore
        freqs = torch.outer(t, freqs).float()  # type: ignore
        freqs_cis = torch.polar(torch.ones_like(freqs), freqs)  # complex64
        return freqs_cis

    def reshape_for_broadcast(freqs_cis: torch.Tensor, x: torch.Tensor):
        ndim = x.ndim
        assert 0 <= 1 < ndim
        assert freqs_cis.shape == (x.shape[1], x.shape[-1])
        shape = [d if i == 1 or i == ndim - 1 else 1 for i, d in enumerate(x.shape)]
        return freqs_cis.view(*shape)

    def apply_rotary_emb(
        xq: torch.Tensor,
        xk: torch.Tensor,
        freqs_cis: torch.Tensor,
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
        xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
        freqs_cis = reshape_for_broadcast(freqs_cis, xq_)
        xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)
        xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3)
        return xq_out.type_as(xq), xk_out.type_as(xk)

    def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
        """torch.repeat_interleave(x, dim=2, repeats=n_rep)"""
        bs, slen, n_kv_heads, head_dim = x.shape
        if n_rep == 1:
            return x
        return (
            x[:, :, :, None, :]
            .expand(bs, slen, n_kv_heads, n_rep, head_dim)
            .reshape(bs, slen, n_kv_heads * n_rep, head_dim)
        )

    class Attention(nn.Module):
        """Multi-head attention module."""
        def __init__(self, args: ModelArgs):
            super().__init__()
            self.n_kv_heads = args.n_heads if args.n_kv_heads is None else args.n_kv_heads
            model_parallel_size = fs_init.get_model_parallel_world_size()
            self.n_local_heads = args.n_heads // model_parallel_size
            self.n_local_kv_heads = self.n_kv_heads // model_parallel_size
            self.n_rep = self.n_local_heads // self.n_local_kv_heads
            self.head_dim = args.dim // args.n_heads

            self.wq = ColumnParallelLinear(
                args.dim,
                args.n_heads * self.head_dim,
                bias=False,
                gather_output=False,
                init_method=lambda x: x,
            )
            self.wk = ColumnParallelLinear(
                args.dim,
                self.n_kv_heads * self.head_dim,
                bias=False,
                gather_output=False,
                init_method=lambda x: x,
            )
            self.wv = ColumnParallelLinear(
                args.dim,
                self.n_kv_heads * self.head_dim,
                bias=False,
                gather_output=False,
                init_method=lambda x: x,
            )
            self.wo = RowParallelLinear(
                args.n_heads * self.head_dim,
                args.dim,
                bias=False,
                input_is_parallel=True,
                init_method=lambda x: x,
            )

            self.cache_k = torch.zeros(
                (
                    args.max_batch_size,
                    args.max_seq_len,
                    self.n_local_kv_heads,
                    self.head_dim,
                )
            )
            self.cache_v = torch.zeros(
                (
                    args.max_batch_size,
                    args.max_seq_len,
                    self.n_local_kv_heads,
                    self.head_dim,
                )
            )

        def forward(
            self,
            x: torch.Tensor,
            start_pos: int,
            freqs_cis: torch.Tensor,
            mask: Optional[torch.Tensor],
        ):
            bsz, seqlen, _ = x.shape
            xq, xk, xv = self.wq(x), self.wk(x), self.wv(x)

            xq = xq.view(bsz, seqlen, self.n_local_heads, self.head_dim)
            xk = xk.view(bsz, seqlen, self.n_local_kv_heads, self.head_dim)
            xv = xv.view(bsz, seqlen, self.n_local_kv_heads, self.head_dim)

            xq, xk = apply_rotary_emb(xq, xk, freqs_cis=freqs_cis)

            self.cache_k = self.cache_k.to(xq)
            self.cache_v = self.cache_v.to(xq)

            self.cache_k[:bsz, start_pos : start_pos + seqlen] = xk
            self.cache_v[:bsz, start_pos : start_pos + seqlen] = xv

            keys = self.cache_k[:bsz, : start_pos + seqlen]
            values = self.cache_v[:bsz, : start_pos + seqlen]

            # repeat k/v heads if n_kv_heads < n_heads
            keys = repeat_kv(keys, self.n_rep)  # (bs, seqlen, n_local_heads, head_dim)
            values = repeat_kv(values, self.n_rep)  # (bs, seqlen, n_local_heads, head_dim)

            xq = xq.transpose(1, 2)  # (bs, n_local_heads, seqlen, head_dim)
            keys = keys.transpose(1, 2)
            values = values.transpose(1, 2)
            scores = torch.matmul(xq, keys.transpose(2, 3)) / math.sqrt(self.head_dim)
            if mask is not None:
                scores = scores + mask  # (bs, n_local_heads, seqlen, cache_len + seqlen)
            scores = F.softmax(scores.float(), dim=-1).type_as(xq)
            output = torch.matmul(scores, values)  # (bs, n_local_heads, seqlen, head_dim)
            output = output.transpose(1, 2).contiguous().view(bsz, seqlen, -1)
            return self.wo(output)

    class FeedForward(nn.Module):
        def __init__(
            self,
            dim: int,
            hidden_dim: int,
            multiple_of: int,
            ffn_dim_multiplier: Optional[float],
        ):
            super().__init__()
            hidden_dim = int(2 * hidden_dim / 3)
            # custom dim factor multiplier
            if ffn_dim_multiplier is not None:
                hidden_dim = int(ffn_dim_multiplier * hidden_dim)
            hidden_dim = multiple_of * ((hidden_dim + multiple_of - 1) // multiple_of)

            self.w1 = ColumnParallelLinear(
                dim, hidden_dim, bias=False, gather_output=False, init_method=lambda x: x
            )
            self.w2 = RowParallelLinear(
                hidden_dim, dim, bias=False, input_is_parallel=True, init_method=lambda x: x
            )
            self.w3 = ColumnParallelLinear(
                dim, hidden_dim, bias=False, gather_output=False, init_method=lambda x: x
            )

        def forward(self, x):
            return self.w2(F.silu(self.w1(x)) * self.w3(x))

    class TransformerBlock(nn.Module):
        def __init__(self, layer_id: int, args: ModelArgs):
            super().__init__()
            self.n_heads = args.n_heads
            self.dim = args.dim
            self.head_dim = args.dim // args.n_heads
            self.attention = Attention(args)
            self.feed_forward = FeedForward(
                dim=args.dim,
                hidden_dim=4 * args.dim,
                multiple_of=args.multiple_of,
                ffn_dim_multiplier=args.ffn_dim_multiplier,
            )
            self.layer_id = layer_id
            self.attention_norm = RMSNorm(args.dim, eps=args.norm_eps)
            self.ffn_norm = RMSNorm(args.dim, eps=args.norm_eps)

        def forward(
            self,
            x: torch.Tensor,
            start_pos: int,
            freqs_cis: torch.Tensor,
            mask: Optional[torch.Tensor],
        ):
            h = x + self.attention.forward(
                self.attention_norm(x), start_pos, freqs_cis, mask
            )
            out = h + self.feed_forward.forward(self.ffn_norm(h))
            return out

    class Transformer(nn.Module):
        def __init__(self, params: ModelArgs):
            super().__init__()
            self.params = params
            self.vocab_size = params.vocab_size
            self.n_layers = params.n_layers

            self.tok_embeddings = ParallelEmbedding(
                params.vocab_size, params.dim, init_method=lambda x: x
            )

            self.layers = torch.nn.ModuleList()
            for layer_id in range(params.n_layers):
                self.layers.append(TransformerBlock(layer_id, params))

            self.norm = RMSNorm(params.dim, eps=params.norm_eps)
            self.output = ColumnParallelLinear(
                params.dim, params.vocab_size, bias=False, init_method=lambda x: x
            )

            self.freqs_cis = precompute_freqs_cis(
                # Note that self.params.max_seq_len is multiplied by 2 because the token limit for the Llama 2 generation of models is 4096.
                # Adding this multiplier instead of using 4096 directly allows for dynamism of token lengths while training or fine-tuning.
                self.params.dim // self.params.n_heads, self.params.max_seq_len * 2
            )

        @torch.inference_mode()
        def forward(self, tokens: torch.Tensor, start_pos: int):
            _bsz, seqlen = tokens.shape
            h = self.tok_embeddings(tokens)
            self.freqs_cis = self.freqs_cis.to(h.device)
            freqs_cis = self.freqs_cis[start_pos : start_pos + seqlen]

            mask = None
            if seqlen > 1:
                mask = torch.full(
                    (seqlen, seqlen), float("-inf"), device=tokens.device
                )

                mask = torch.triu(mask, diagonal=1)

                # When performing key-value caching, we compute the attention scores
                # only for the new sequence. Thus, the matrix of scores is of size
                # (seqlen, cache_len + seqlen), and the only masked entries are (i, j) for
                # j > cache_len + i, since row i corresponds to token cache_len + i.
                mask = torch.hstack([
                    torch.zeros((seqlen, start_pos), device=tokens.device),
                    mask
                ]).type_as(h)

            for layer in self.layers:
                h = layer(h, start_pos, freqs_cis, mask)
            h = self.norm(h)
            output = self.output(h).float()
            return output

    return SimpleNamespace(**{k: v for k, v in locals().items() if k not in ("torch", "nn", "F")})


# --------------------------------------------------------------------------- llama/generation.py

def llama_generation_page(torch):
    F = torch.nn.functional

    class Llama:
        def __init__(self, model, tokenizer):
            self.model = model
            self.tokenizer = tokenizer

        @torch.inference_mode()
        def generate(
            self,
            prompt_tokens: List[List[int]],
            max_gen_len: int,
            temperature: float = 0.6,
            top_p: float = 0.9,
            logprobs: bool = False,
            echo: bool = False,
        ) -> Tuple[List[List[int]], Optional[List[List[float]]]]:
            params = self.model.params
            bsz = len(prompt_tokens)
            assert bsz <= params.max_batch_size, (bsz, params.max_batch_size)

            min_prompt_len = min(len(t) for t in prompt_tokens)
            max_prompt_len = max(len(t) for t in prompt_tokens)
            assert max_prompt_len <= params.max_seq_len
            total_len = min(params.max_seq_len, max_gen_len + max_prompt_len)

            pad_id = self.tokenizer.pad_id
            tokens = torch.full((bsz, total_len), pad_id, dtype=torch.long)
            for k, t in enumerate(prompt_tokens):
                tokens[k, : len(t)] = torch.tensor(t, dtype=torch.long)
            if logprobs:
                token_logprobs = torch.zeros_like(tokens, dtype=torch.float)

            prev_pos = 0
            eos_reached = torch.tensor([False] * bsz)
            input_text_mask = tokens != pad_id
            if min_prompt_len == total_len:
                logits = self.model.forward(tokens, prev_pos)
                token_logprobs = -F.cross_entropy(
                    input=logits.transpose(1, 2),
                    target=tokens,
                    reduction="none",
                    ignore_index=pad_id,
                )

            for cur_pos in range(min_prompt_len, total_len):
                logits = self.model.forward(tokens[:, prev_pos:cur_pos], prev_pos)
                if temperature > 0:
                    probs = torch.softmax(logits[:, -1] / temperature, dim=-1)
                    next_token = sample_top_p(probs, top_p)
                else:
                    next_token = torch.argmax(logits[:, -1], dim=-1)

                next_token = next_token.reshape(-1)
                # only replace token if prompt has already been generated
                next_token = torch.where(
                    input_text_mask[:, cur_pos], tokens[:, cur_pos], next_token
                )
                tokens[:, cur_pos] = next_token
                if logprobs:
                    token_logprobs[:, prev_pos + 1 : cur_pos + 1] = -F.cross_entropy(
                        input=logits.transpose(1, 2),
                        target=tokens[:, prev_pos + 1 : cur_pos + 1],
                        reduction="none",
                        ignore_index=pad_id,
                    )
                eos_reached |= (~input_text_mask[:, cur_pos]) & (
                    next_token == self.tokenizer.eos_id
                )
                prev_pos = cur_pos
                if all(eos_reached):
                    break

            if logprobs:
                token_logprobs = token_logprobs.tolist()
            out_tokens, out_logprobs = [], []
            for i, toks in enumerate(tokens.tolist()):
                # cut to max gen len
                start = 0 if echo else len(prompt_tokens[i])
                toks = toks[start : len(prompt_tokens[i]) + max_gen_len]
                probs = None
                if logprobs:
                    probs = token_logprobs[i][start : len(prompt_tokens[i]) + max_gen_len]
                # cut to eos tok if any
                if self.tokenizer.eos_id in toks:
                    eos_idx = toks.index(self.tokenizer.eos_id)
                    toks = toks[:eos_idx]
                    probs = probs[:eos_idx] if logprobs else None
                out_tokens.append(toks)
                out_logprobs.append(probs)
            return (out_tokens, out_logprobs if logprobs else None)

        def text_completion(
            self,
            prompts: List[str],
            temperature: float = 0.6,
            top_p: float = 0.9,
            max_gen_len: Optional[int] = None,
            logprobs: bool = False,
            echo: bool = False,
        ):
            if max_gen_len is None:
                max_gen_len = self.model.params.max_seq_len - 1
            prompt_tokens = [self.tokenizer.encode(x, bos=True, eos=False) for x in prompts]
            generation_tokens, generation_logprobs = self.generate(
                prompt_tokens=prompt_tokens,
                max_gen_len=max_gen_len,
                temperature=temperature,
                top_p=top_p,
                logprobs=logprobs,
                echo=echo,
            )
            if logprobs:
                return [
                    {
                        "generation": self.tokenizer.decode(t),
                        "tokens": [self.tokenizer.decode(x) for x in t],
                        "logprobs": logprobs_i,
                    }
                    for t, logprobs_i in zip(generation_tokens, generation_logprobs)
                ]
            return [{"generation": self.tokenizer.decode(t)} for t in generation_tokens]

    def sample_top_p(probs, p):
        probs_sort, probs_idx = torch.sort(probs, dim=-1, descending=True)
        probs_sum = torch.cumsum(probs_sort, dim=-1)
        mask = probs_sum - probs_sort > p
        probs_sort[mask] = 0.0
        probs_sort.div_(probs_sort.sum(dim=-1, keepdim=True))
        next_token = torch.multinomial(probs_sort, num_samples=1)
        next_token = torch.gather(probs_idx, -1, next_token)
        return next_token

    return SimpleNamespace(Llama=Llama, sample_top_p=sample_top_p)


class _Tokenizer:  # stands in for the SentencePiece ``Tokenizer``: bos 1, eos 2, letters a.. from 3, pad -1
    bos_id, pad_id = 1, -1

    def __init__(self, eos_id=2):
        self.eos_id = eos_id

    def encode(self, s, bos, eos):
        t = [ord(c) - ord("a") + 3 for c in s]
        return ([self.bos_id] if bos else []) + t + ([self.eos_id] if eos else [])

    def decode(self, t):
        if isinstance(t, int):
            t = [t]
        return "".join(chr(ord("a") + i - 3) for i in t if i >= 3)


# --------------------------------------------------------------------------- NumPy references

_ERF = np.vectorize(math.erf)


def _gelu(x):
    return 0.5 * x * (1.0 + _ERF(x / math.sqrt(2.0)))


def _lin(x, sd, p):
    y = x @ sd[p + ".weight"].T
    return y + sd[p + ".bias"] if p + ".bias" in sd else y


def _ln(x, sd, p, eps=1e-5):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * sd[p + ".weight"] + sd[p + ".bias"]


def _ln2d(x, sd, p, eps=1e-6):
    m = x.mean(1, keepdims=True)
    v = ((x - m) ** 2).mean(1, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * sd[p + ".weight"][:, None, None] + sd[p + ".bias"][:, None, None]


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _conv_s_np(x, w, b=None):  # a convolution whose stride equals its kernel (patchify)
    B, C, H, W = x.shape
    k = w.shape[-1]
    y = np.einsum("bciqjr,ocqr->boij", x.reshape(B, C, H // k, k, W // k, k), w)
    return y if b is None else y + b[:, None, None]


def _conv3_np(x, w):  # 3x3, padding 1, no bias
    B, C, H, W = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    return sum(np.einsum("bchw,oc->bohw", xp[:, :, dy:dy + H, dx:dx + W], w[:, :, dy, dx])
               for dy in range(3) for dx in range(3))


def _convT2_np(x, w, b):  # ConvTranspose2d(kernel 2, stride 2): each pixel paints a 2x2 block
    B, C, H, W = x.shape
    y = np.einsum("bchw,coij->bohiwj", x, w).reshape(B, w.shape[1], 2 * H, 2 * W)
    return y + b[:, None, None]


def _rel_pos_np(q, k, rel):
    m = 2 * max(q, k) - 1
    n = rel.shape[0]
    if n != m:  # linear interpolation, align_corners=False
        src = np.maximum((np.arange(m) + 0.5) * n / m - 0.5, 0.0)
        i0 = np.floor(src).astype(int)
        i1 = np.minimum(i0 + 1, n - 1)
        lam = (src - i0)[:, None]
        rel = rel[i0] * (1 - lam) + rel[i1] * lam
    out = np.empty((q, k, rel.shape[1]))
    for i in range(q):
        for j in range(k):
            out[i, j] = rel[int(i * max(k / q, 1.0) - j * max(q / k, 1.0) + (k - 1) * max(q / k, 1.0))]
    return out


def _vit_attn_np(x, sd, p, heads):
    B, H, W, C = x.shape
    hd = C // heads
    qkv = _lin(x.reshape(B, H * W, C), sd, p + "qkv").reshape(B, H * W, 3, heads, hd)
    q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))  # B, heads, HW, hd
    attn = np.einsum("bnqc,bnkc->bnqk", q, k) / math.sqrt(hd)
    if p + "rel_pos_h" in sd:
        rh, rw = _rel_pos_np(H, H, sd[p + "rel_pos_h"]), _rel_pos_np(W, W, sd[p + "rel_pos_w"])
        rq = q.reshape(B, heads, H, W, hd)
        bias = np.einsum("bnhwc,hkc->bnhwk", rq, rh)[..., None] + np.einsum("bnhwc,wkc->bnhwk", rq, rw)[..., None, :]
        attn = attn + bias.reshape(B, heads, H * W, H * W)
    out = np.einsum("bnqk,bnkc->bqnc", _softmax(attn), v).reshape(B, H, W, C)
    return _lin(out, sd, p + "proj")


def _vit_block_np(x, sd, p, heads, ws):
    y = _ln(x, sd, p + "norm1")
    if ws:  # each window of the zero-padded grid attends on its own
        B, H, W, C = y.shape
        hp, wp = -(-H // ws) * ws, -(-W // ws) * ws
        yp = np.zeros((B, hp, wp, C))
        yp[:, :H, :W] = y
        out = np.zeros_like(yp)
        for i in range(0, hp, ws):
            for j in range(0, wp, ws):
                out[:, i:i + ws, j:j + ws] = _vit_attn_np(yp[:, i:i + ws, j:j + ws], sd, p + "attn.", heads)
        y = out[:, :H, :W]
    else:
        y = _vit_attn_np(y, sd, p + "attn.", heads)
    x = x + y
    return x + _lin(_gelu(_lin(_ln(x, sd, p + "norm2"), sd, p + "mlp.lin1")), sd, p + "mlp.lin2")


def _encoder_np(img, sd, depth, heads, ws, global_idx):
    x = _conv_s_np(img, sd["patch_embed.proj.weight"], sd["patch_embed.proj.bias"]).transpose(0, 2, 3, 1)
    x = x + sd["pos_embed"]
    for i in range(depth):
        x = _vit_block_np(x, sd, f"blocks.{i}.", heads, 0 if i in global_idx else ws)
    x = np.einsum("bhwc,oc->bohw", x, sd["neck.0.weight"][:, :, 0, 0])
    x = _conv3_np(_ln2d(x, sd, "neck.1"), sd["neck.2.weight"])
    return _ln2d(x, sd, "neck.3")


def _pe_np(coords, g):
    c = 2 * np.pi * ((2 * coords - 1) @ g)
    return np.concatenate([np.sin(c), np.cos(c)], -1)


def _dense_pe_np(g, h, w):
    ys, xs = np.meshgrid((np.arange(h) + 0.5) / h, (np.arange(w) + 0.5) / w, indexing="ij")
    return _pe_np(np.stack([xs, ys], -1), g).transpose(2, 0, 1)[None]


def _prompt_np(sd, img_size, points=None, boxes=None, masks=None, emb_hw=(4, 4)):
    g = sd["pe_layer.positional_encoding_gaussian_matrix"]
    parts = []
    bs = 1 if masks is None else len(masks)
    if points is not None:
        pts, lab = points[0] + 0.5, np.asarray(points[1], dtype=np.float64)
        bs = len(pts)
        if boxes is None:
            pts = np.concatenate([pts, np.zeros((bs, 1, 2))], 1)
            lab = np.concatenate([lab, -np.ones((bs, 1))], 1)
        e = _pe_np(pts / [img_size[1], img_size[0]], g)
        for i in range(bs):
            for j in range(pts.shape[1]):
                if lab[i, j] == -1:
                    e[i, j] = sd["not_a_point_embed.weight"][0]
                elif lab[i, j] in (0, 1):
                    e[i, j] += sd[f"point_embeddings.{int(lab[i, j])}.weight"][0]
        parts.append(e)
    if boxes is not None:
        bs = len(boxes)
        e = _pe_np((boxes + 0.5).reshape(-1, 2, 2) / [img_size[1], img_size[0]], g)
        e[:, 0] += sd["point_embeddings.2.weight"][0]
        e[:, 1] += sd["point_embeddings.3.weight"][0]
        parts.append(e)
    sparse = np.concatenate(parts, 1) if parts else np.zeros((bs, 0, g.shape[1] * 2))
    if masks is not None:
        y = _gelu(_ln2d(_conv_s_np(masks, sd["mask_downscaling.0.weight"], sd["mask_downscaling.0.bias"]), sd,
                        "mask_downscaling.1"))
        y = _gelu(_ln2d(_conv_s_np(y, sd["mask_downscaling.3.weight"], sd["mask_downscaling.3.bias"]), sd,
                        "mask_downscaling.4"))
        dense = np.einsum("bchw,oc->bohw", y, sd["mask_downscaling.6.weight"][:, :, 0, 0]) + \
            sd["mask_downscaling.6.bias"][:, None, None]
    else:
        dense = np.broadcast_to(sd["no_mask_embed.weight"].reshape(1, -1, 1, 1), (bs, g.shape[1] * 2) + emb_hw)
    return sparse, dense


def _attn2_np(q, k, v, sd, p, heads):
    q, k, v = _lin(q, sd, p + "q_proj"), _lin(k, sd, p + "k_proj"), _lin(v, sd, p + "v_proj")
    b, n, c = q.shape
    sh = lambda t: t.reshape(t.shape[0], t.shape[1], heads, c // heads).transpose(0, 2, 1, 3)  # noqa: E731
    a = _softmax(sh(q) @ sh(k).transpose(0, 1, 3, 2) / math.sqrt(c // heads))
    return _lin((a @ sh(v)).transpose(0, 2, 1, 3).reshape(b, -1, c), sd, p + "out_proj")


def _two_way_np(img, pe, pts, sd, depth, heads):
    b, c = img.shape[:2]
    keys, kpe = img.reshape(b, c, -1).transpose(0, 2, 1), pe.reshape(b, c, -1).transpose(0, 2, 1)
    queries = pts
    for i in range(depth):
        p = f"layers.{i}."
        if i == 0:
            queries = _attn2_np(queries, queries, queries, sd, p + "self_attn.", heads)
        else:
            q = queries + pts
            queries = queries + _attn2_np(q, q, queries, sd, p + "self_attn.", heads)
        queries = _ln(queries, sd, p + "norm1")
        q, k = queries + pts, keys + kpe
        queries = _ln(queries + _attn2_np(q, k, keys, sd, p + "cross_attn_token_to_image.", heads), sd, p + "norm2")
        mlp = _lin(np.maximum(_lin(queries, sd, p + "mlp.lin1"), 0), sd, p + "mlp.lin2")
        queries = _ln(queries + mlp, sd, p + "norm3")
        q, k = queries + pts, keys + kpe
        keys = _ln(keys + _attn2_np(k, q, queries, sd, p + "cross_attn_image_to_token.", heads), sd, p + "norm4")
    q, k = queries + pts, keys + kpe
    queries = _ln(queries + _attn2_np(q, k, keys, sd, "final_attn_token_to_image.", heads), sd, "norm_final_attn")
    return queries, keys


def _mlp_np(x, sd, p, n):
    for i in range(n):
        x = _lin(x, sd, f"{p}layers.{i}")
        if i < n - 1:
            x = np.maximum(x, 0)
    return x


def _decoder_np(emb, pe, sparse, dense, sd, multimask, depth=2, heads=2):
    out_tok = np.concatenate([sd["iou_token.weight"], sd["mask_tokens.weight"]], 0)
    n, nm = len(sparse), len(sd["mask_tokens.weight"])
    tokens = np.concatenate([np.broadcast_to(out_tok, (n,) + out_tok.shape), sparse], 1)
    src = np.repeat(emb, n, 0) + dense
    tsd = {k[len("transformer."):]: v for k, v in sd.items() if k.startswith("transformer.")}
    hs, src = _two_way_np(src, np.repeat(pe, n, 0), tokens, tsd, depth, heads)
    b, c, h, w = (n,) + emb.shape[1:]
    src = src.transpose(0, 2, 1).reshape(b, c, h, w)
    up = _gelu(_ln2d(_convT2_np(src, sd["output_upscaling.0.weight"], sd["output_upscaling.0.bias"]), sd,
                     "output_upscaling.1"))
    up = _gelu(_convT2_np(up, sd["output_upscaling.3.weight"], sd["output_upscaling.3.bias"]))
    hyper = np.stack([_mlp_np(hs[:, 1 + i], sd, f"output_hypernetworks_mlps.{i}.", 3) for i in range(nm)], 1)
    masks = (hyper @ up.reshape(b, up.shape[1], -1)).reshape(b, nm, up.shape[2], up.shape[3])
    iou = _mlp_np(hs[:, 0], sd, "iou_prediction_head.", 3)
    sl = slice(1, None) if multimask else slice(0, 1)
    return masks[:, sl], iou[:, sl]


def _rms_np(x, w, eps):
    return x / np.sqrt((x ** 2).mean(-1, keepdims=True) + eps) * w


def _rope_complex_np(x, cis):  # x: B, S, H, hd; pairs (x0, x1) as x0 + i x1
    y = (x[..., 0::2] + 1j * x[..., 1::2]) * cis[None, :, None, :]
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = y.real, y.imag
    return out


def _llama_np(sd, a, tokens, keys_out=None):
    tokens = np.asarray(tokens)
    B, S = tokens.shape
    hd, nkv = a.dim // a.n_heads, a.n_kv_heads
    cis = np.exp(1j * np.outer(np.arange(S), 1.0 / 10000.0 ** (np.arange(0, hd, 2) / hd)))
    allowed = np.tril(np.ones((S, S), dtype=bool))
    h = sd["tok_embeddings.weight"][tokens]
    for i in range(a.n_layers):
        p = f"layers.{i}."
        x = _rms_np(h, sd[p + "attention_norm.weight"], a.norm_eps)
        q = _rope_complex_np((x @ sd[p + "attention.wq.weight"].T).reshape(B, S, a.n_heads, hd), cis)
        k = _rope_complex_np((x @ sd[p + "attention.wk.weight"].T).reshape(B, S, nkv, hd), cis)
        v = (x @ sd[p + "attention.wv.weight"].T).reshape(B, S, nkv, hd)
        if keys_out is not None:
            keys_out.append((k, v))
        k, v = np.repeat(k, a.n_heads // nkv, 2), np.repeat(v, a.n_heads // nkv, 2)
        s = np.where(allowed, np.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(hd), -np.inf)
        o = np.einsum("bhqk,bkhd->bqhd", _softmax(s), v).reshape(B, S, -1)
        h = h + o @ sd[p + "attention.wo.weight"].T
        x = _rms_np(h, sd[p + "ffn_norm.weight"], a.norm_eps)
        g = x @ sd[p + "feed_forward.w1.weight"].T
        h = h + ((g / (1 + np.exp(-g))) * (x @ sd[p + "feed_forward.w3.weight"].T)) @ sd[p + "feed_forward.w2.weight"].T
    return _rms_np(h, sd["norm.weight"], a.norm_eps) @ sd["output.weight"].T


def _log_softmax(x):
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def _greedy_np(sd, a, prompts, max_gen_len, eos_id):
    """The reference decoding: full forward at each step; returns tokens and per-position log-probabilities."""
    total = min(a.max_seq_len, max_gen_len + max(map(len, prompts)))
    toks = np.full((len(prompts), total), -1)
    for i, t in enumerate(prompts):
        toks[i, :len(t)] = t
    gap = np.inf  # the smallest margin of a greedy choice: float32 rounding cannot flip one
    for cur in range(min(map(len, prompts)), total):
        logits = _llama_np(sd, a, toks[:, :cur])[:, -1]
        nxt = logits.argmax(-1)
        top2 = np.sort(logits, -1)[:, -2:]
        free = toks[:, cur] == -1
        if free.any():
            gap = min(gap, (top2[:, 1] - top2[:, 0])[free].min())
        toks[:, cur] = np.where(toks[:, cur] != -1, toks[:, cur], nxt)
    assert gap > 1e-3
    lp = np.zeros(toks.shape)
    ls = _log_softmax(_llama_np(sd, a, toks))
    for i in range(len(prompts)):
        for j in range(1, total):
            lp[i, j] = ls[i, j - 1, toks[i, j]]
    outs, lps = [], []
    for i, t in enumerate(prompts):
        o, p = list(toks[i, len(t):len(t) + max_gen_len]), list(lp[i, len(t):len(t) + max_gen_len])
        if eos_id in o:
            o, p = o[:o.index(eos_id)], p[:o.index(eos_id)]
        outs.append([int(v) for v in o])
        lps.append(p)
    return toks, lp, outs, lps


def _weights(shapes, seed):
    """Synthetic weights: fan-in scaled normals for matrices, 1 + noise for 1-D weights, small biases."""
    rng = np.random.default_rng(seed)
    out = {}
    for k, shp in shapes.items():
        if len(shp) >= 2:
            out[k] = rng.normal(0, 1 / math.sqrt(max(1, int(np.prod(shp[1:])))), shp)
        elif k.endswith("weight"):
            out[k] = 1 + 0.2 * rng.normal(size=shp)
        else:
            out[k] = 0.1 * rng.normal(size=shp)
    return {k: v.astype(np.float32) for k, v in out.items()}


def _load(torch, module, w):
    module.load_state_dict({k: torch.tensor(v) for k, v in w.items()})
    return module


# --------------------------------------------------------------------------- SAM: runs and tests

def _sam_models(torch):
    common = sam_common_page(torch)
    enc_p = sam_image_encoder_page(torch, common)
    pe_p = sam_prompt_encoder_page(torch, common)
    tr_p = sam_transformer_page(torch, common)
    dec_p = sam_mask_decoder_page(torch, common)
    torch.manual_seed(0)
    enc = enc_p.ImageEncoderViT(img_size=16, patch_size=4, in_chans=3, embed_dim=8, depth=2, num_heads=2,
                                mlp_ratio=2.0, out_chans=16, use_rel_pos=True, window_size=3,
                                global_attn_indexes=(1,))
    pe = pe_p.PromptEncoder(embed_dim=16, image_embedding_size=(4, 4), input_image_size=(16, 16), mask_in_chans=8)
    dec = dec_p.MaskDecoder(transformer_dim=16,
                            transformer=tr_p.TwoWayTransformer(depth=2, embedding_dim=16, num_heads=2, mlp_dim=32),
                            num_multimask_outputs=3, iou_head_depth=3, iou_head_hidden_dim=16)
    ws = []
    for seed, m in enumerate((enc, pe, dec)):
        w = _weights({k: tuple(v.shape) for k, v in sorted(m.state_dict().items())}, seed + 1)
        ws.append(w)
        _load(torch, m, w)
    return SimpleNamespace(enc_p=enc_p, pe_p=pe_p, enc=enc, pe=pe, dec=dec, w_enc=ws[0], w_pe=ws[1], w_dec=ws[2])


def _sam_data():
    rng = np.random.default_rng(5)
    return SimpleNamespace(
        img=rng.normal(size=(1, 3, 16, 16)).astype(np.float32),
        coords=rng.uniform(0, 16, (2, 2, 2)).astype(np.float32),
        labels=np.array([[1, 0], [1, 1]], dtype=np.int32),
        boxes=np.array([[1, 2, 9, 12], [4, 0, 15, 7]], dtype=np.float32),
        masks=rng.normal(size=(2, 1, 16, 16)).astype(np.float32),
        grid=rng.normal(size=(2, 5, 4, 3)).astype(np.float32),
        rel=rng.normal(size=(5, 3)),
        rel7=rng.normal(size=(7, 3)),
    )


def _sam_run(torch):
    m, d = _sam_models(torch), _sam_data()
    T = lambda a: torch.tensor(a)  # noqa: E731
    r = SimpleNamespace(m=m)
    with torch.no_grad():
        r.emb = m.enc(T(d.img))
        r.dense_pe = m.pe.get_dense_pe()
        pts = (T(d.coords), T(d.labels))
        r.sp1, r.de1 = m.pe(pts, None, None)
        r.sp2, r.de2 = m.pe(pts, T(d.boxes), T(d.masks))
        r.sp3, r.de3 = m.pe(None, T(d.boxes), None)
        r.m1, r.i1 = m.dec(r.emb, r.dense_pe, r.sp1, r.de1, multimask_output=True)
        r.m2, r.i2 = m.dec(r.emb, r.dense_pe, r.sp2, r.de2, multimask_output=False)
        # no sparse prompt at all: (1, 0, C) with the no-mask embedding, then a mask alone (2, 0, C)
        r.sp4, r.de4 = m.pe(None, None, None)
        r.m4, r.i4 = m.dec(r.emb, r.dense_pe, r.sp4, r.de4, multimask_output=True)
        r.sp5, r.de5 = m.pe(None, None, T(d.masks))
        r.m5, r.i5 = m.dec(r.emb, r.dense_pe, r.sp5, r.de5, multimask_output=False)
    # gradients: the point embeddings' boolean-mask ``+=`` hands each label's weight the sum over its points
    pts = (T(d.coords), T(d.labels))
    sp, _ = m.pe(pts, None, None)
    cw = T(np.cos(np.arange(2 * 3 * 16.0)).reshape(2, 3, 16).astype(np.float32))
    r.pe_grads = torch.autograd.grad((sp * cw).sum(), [m.pe.not_a_point_embed.weight,
                                                       m.pe.point_embeddings[0].weight,
                                                       m.pe.point_embeddings[1].weight])
    # the mask decoder in float64: gradient by the image embedding against central differences
    dec = m.dec.double()
    emb = r.emb.double().requires_grad_()
    args = (r.dense_pe.double(), r.sp2.double(), r.de2.double())
    cm = T(np.sin(np.arange(2 * 3 * 16 * 16.0)).reshape(2, 3, 16, 16))
    ci = T(np.array([[0.5, -1.0, 2.0], [1.5, 0.3, -0.7]]))

    def loss(e):
        mk, io = dec(e, *args, multimask_output=True)
        return (mk * cm).sum() + (io * ci).sum()

    r.dec_grad, = torch.autograd.grad(loss(emb), [emb])
    fd = []
    with torch.no_grad():
        for idx in ((0, 0, 0, 0), (0, 5, 1, 2), (0, 11, 3, 3), (0, 15, 2, 0)):
            e = torch.zeros_like(emb)
            e[idx] = 1e-6
            fd.append((loss(emb + e).item() - loss(emb - e).item()) / 2e-6)
    r.dec_fd = np.array(fd)
    # window partition with padding (5x4 grid, windows of 3) and back
    r.windows, r.pad_hw = m.enc_p.window_partition(T(d.grid), 3)
    r.unpart = m.enc_p.window_unpartition(r.windows, 3, r.pad_hw, (5, 4))
    # relative positions: interpolated table (5 rows for 7 distances), q 4 / k 2; then q 2 / k 4 without resize
    rel = torch.tensor(d.rel, requires_grad=True)
    r.rel_q4k2 = m.enc_p.get_rel_pos(4, 2, rel)
    c = torch.tensor(np.linspace(-1, 1, 4 * 2 * 3).reshape(4, 2, 3))
    r.rel_grad, = torch.autograd.grad((r.rel_q4k2 * c).sum(), [rel])
    r.rel_q2k4 = m.enc_p.get_rel_pos(2, 4, torch.tensor(d.rel7))
    # the ViT attention with relative positions in float64, its gradient by the rel_pos_h table
    torch.manual_seed(3)
    att = m.enc_p.Attention(4, num_heads=2, use_rel_pos=True, input_size=(2, 3)).double()
    w = _weights({k: tuple(v.shape) for k, v in sorted(att.state_dict().items())}, 4)
    _load(torch, att, {k: v.astype(np.float64) for k, v in w.items()})
    with torch.no_grad():
        att.rel_pos_h.copy_(torch.tensor(np.linspace(-1, 1, 6).reshape(3, 2)))
        att.rel_pos_w.copy_(torch.tensor(np.cos(np.arange(10.0)).reshape(5, 2)))
    r.att_sd = {k: _np(v) for k, v in att.state_dict().items()}
    xa = torch.tensor(np.sin(np.arange(24.0)).reshape(1, 2, 3, 4))
    ca = torch.tensor(np.cos(np.arange(24.0) * 0.7).reshape(1, 2, 3, 4))

    def f():
        return (att(xa) * ca).sum()

    r.att_out = att(xa)
    r.att_grad, = torch.autograd.grad(f(), [att.rel_pos_h])
    fd = np.zeros((3, 2))
    with torch.no_grad():
        for i in range(3):
            for j in range(2):
                old = att.rel_pos_h[i, j].item()
                att.rel_pos_h[i, j] = old + 1e-6
                up = f().item()
                att.rel_pos_h[i, j] = old - 1e-6
                down = f().item()
                att.rel_pos_h[i, j] = old
                fd[i, j] = (up - down) / 2e-6
    r.att_fd = fd
    return r


def test_sam_image_encoder_and_prompts():
    r, d = _sam_run(lucid), _sam_data()
    m = r.m
    # window partition: 5x4 padded to 6x6, four windows per image, the windows are the padded grid's blocks
    assert r.pad_hw == (6, 6) and r.windows.shape == (8, 3, 3, 3)
    gp = np.zeros((2, 6, 6, 3), np.float32)
    gp[:, :5, :4] = d.grid
    want = np.stack([gp[b, i:i + 3, j:j + 3] for b in range(2) for i in (0, 3) for j in (0, 3)])
    np.testing.assert_array_equal(_np(r.windows), want)
    np.testing.assert_array_equal(_np(r.unpart), d.grid)
    # relative positions
    np.testing.assert_allclose(_np(r.rel_q4k2), _rel_pos_np(4, 2, d.rel), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(_np(r.rel_q2k4), _rel_pos_np(2, 4, d.rel7))
    c = np.linspace(-1, 1, 24).reshape(4, 2, 3)
    fd = np.zeros((5, 3))
    for i in range(5):
        for j in range(3):
            e = np.zeros((5, 3))
            e[i, j] = 1e-6
            fd[i, j] = ((_rel_pos_np(4, 2, d.rel + e) - _rel_pos_np(4, 2, d.rel - e)) * c).sum() / 2e-6
    np.testing.assert_allclose(_np(r.rel_grad), fd, rtol=1e-6, atol=1e-8)
    # the float64 attention with relative positions: NumPy forward and central differences
    xa = np.sin(np.arange(24.0)).reshape(1, 2, 3, 4)
    np.testing.assert_allclose(_np(r.att_out), _vit_attn_np(xa, r.att_sd, "", 2), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(_np(r.att_grad), r.att_fd, rtol=1e-6, atol=1e-8)
    assert np.abs(r.att_fd).max() > 1e-2
    # the whole encoder (two blocks: windows of 3 on the 4x4 grid with padding, then global attention)
    emb = _encoder_np(d.img.astype(np.float64), m.w_enc, 2, 2, 3, (1,))
    assert r.emb.shape == (1, 16, 4, 4)
    np.testing.assert_allclose(_np(r.emb), emb, rtol=1e-4, atol=1e-4)
    assert sorted(k for k in m.w_enc if "rel_pos" in k) == [
        "blocks.0.attn.rel_pos_h", "blocks.0.attn.rel_pos_w", "blocks.1.attn.rel_pos_h", "blocks.1.attn.rel_pos_w"]
    assert m.w_enc["blocks.0.attn.rel_pos_h"].shape == (5, 4) and m.w_enc["blocks.1.attn.rel_pos_h"].shape == (7, 4)
    # prompt encoder
    g = m.w_pe["pe_layer.positional_encoding_gaussian_matrix"]
    np.testing.assert_allclose(_np(r.dense_pe), _dense_pe_np(g.astype(np.float64), 4, 4), rtol=1e-5, atol=1e-5)
    sp, de = _prompt_np(m.w_pe, (16, 16), points=(d.coords, d.labels))
    assert r.sp1.shape == (2, 3, 16) and r.de1.shape == (2, 16, 4, 4)
    np.testing.assert_allclose(_np(r.sp1), sp, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(_np(r.sp1)[:, 2], np.broadcast_to(m.w_pe["not_a_point_embed.weight"], (2, 16)))
    np.testing.assert_array_equal(_np(r.de1), de)
    sp, de = _prompt_np(m.w_pe, (16, 16), points=(d.coords, d.labels), boxes=d.boxes, masks=d.masks)
    assert r.sp2.shape == (2, 4, 16) and r.de2.shape == (2, 16, 4, 4)
    np.testing.assert_allclose(_np(r.sp2), sp, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(_np(r.de2), de, rtol=1e-4, atol=1e-5)
    sp, de = _prompt_np(m.w_pe, (16, 16), boxes=d.boxes)
    np.testing.assert_allclose(_np(r.sp3), sp, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(_np(r.de3), de)


def test_sam_mask_decoder():
    r, d = _sam_run(lucid), _sam_data()
    emb, pe = _np(r.emb).astype(np.float64), _np(r.dense_pe).astype(np.float64)
    masks, iou = _decoder_np(emb, pe, _np(r.sp1).astype(np.float64), _np(r.de1).astype(np.float64), r.m.w_dec, True)
    assert r.m1.shape == (2, 3, 16, 16) and r.i1.shape == (2, 3)
    np.testing.assert_allclose(_np(r.m1), masks, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(_np(r.i1), iou, rtol=1e-4, atol=1e-5)
    masks, iou = _decoder_np(emb, pe, _np(r.sp2).astype(np.float64), _np(r.de2).astype(np.float64), r.m.w_dec, False)
    assert r.m2.shape == (2, 1, 16, 16) and r.i2.shape == (2, 1)
    np.testing.assert_allclose(_np(r.m2), masks, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(_np(r.i2), iou, rtol=1e-4, atol=1e-5)
    assert _np(r.m1).std() > 1e-2  # the masks are not constant
    assert r.sp4.shape == (1, 0, 16) and r.de4.shape == (1, 16, 4, 4) and r.sp5.shape == (2, 0, 16)
    for mk, io, kw, multi in ((r.m4, r.i4, {}, True), (r.m5, r.i5, dict(masks=d.masks), False)):
        sp, de = _prompt_np(r.m.w_pe, (16, 16), **kw)
        masks, iou = _decoder_np(emb, pe, sp, de, r.m.w_dec, multi)
        assert mk.shape == masks.shape
        np.testing.assert_allclose(_np(mk), masks, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(_np(io), iou, rtol=1e-4, atol=1e-5)
    g = _np(r.dec_grad)
    assert r.dec_grad.dtype == lucid.float64 and g.shape == (1, 16, 4, 4)
    np.testing.assert_allclose(g[0, [0, 5, 11, 15], [0, 1, 3, 2], [0, 2, 3, 0]], r.dec_fd, rtol=1e-5, atol=1e-6)
    assert np.abs(r.dec_fd).min() > 1e-3
    cw = np.cos(np.arange(2 * 3 * 16.0)).reshape(2, 3, 16).astype(np.float32)
    lab = np.concatenate([d.labels, -np.ones((2, 1))], 1)  # the padding point is labelled -1
    for g, k in zip(r.pe_grads, (-1, 0, 1)):
        np.testing.assert_allclose(_np(g), cw[lab == k].sum(0, keepdims=True), rtol=1e-5, atol=1e-6)


def test_sam_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = _sam_run(lucid), _sam_run(torch)
    for name in ("emb", "dense_pe", "sp1", "de1", "sp2", "de2", "sp3", "de3", "m1", "i1", "m2", "i2", "windows",
                 "sp4", "de4", "m4", "i4", "sp5", "de5", "m5", "i5",
                 "unpart", "rel_q4k2", "rel_grad", "rel_q2k4", "att_out", "att_grad", "dec_grad"):
        np.testing.assert_allclose(_np(getattr(a, name)), getattr(b, name).detach().numpy(), rtol=1e-5, atol=2e-5,
                                   err_msg=name)
    assert a.pad_hw == b.pad_hw
    for x, y in zip(a.pe_grads, b.pe_grads):
        np.testing.assert_allclose(_np(x), y.numpy(), rtol=1e-5, atol=1e-6)


def _sam_e2e_data():
    rng = np.random.default_rng(9)
    return SimpleNamespace(
        # two images already resized to a longest side of 16: 24x40 -> 10x16 and 32x24 -> 16x12
        img1=rng.uniform(0, 255, (3, 10, 16)).astype(np.float32), orig1=(24, 40),
        img2=rng.uniform(0, 255, (3, 16, 12)).astype(np.float32), orig2=(32, 24),
        coords=np.array([[[3.0, 4.0]], [[12.5, 7.0]]], np.float32), labels=np.array([[1], [0]], np.int64),
        boxes=np.array([[1.0, 2.0, 10.0, 14.0]], np.float32),
        mask_in=rng.normal(size=(1, 1, 16, 16)).astype(np.float32),
        orig_image=rng.uniform(0, 255, (3, 24, 40)).astype(np.float32),
    )


def _sam_e2e_run(torch):
    m, d = _sam_models(torch), _sam_e2e_data()
    T = lambda a: torch.tensor(a)  # noqa: E731
    sam = sam_page(torch).Sam(m.enc, m.pe, m.dec)
    r = SimpleNamespace(m=m, buffers=sorted(k for k, _ in sam.named_buffers()), state=sorted(sam.state_dict()))
    r.out = sam([{"image": T(d.img1), "original_size": d.orig1, "point_coords": T(d.coords),
                  "point_labels": T(d.labels)},
                 {"image": T(d.img2), "original_size": d.orig2, "boxes": T(d.boxes), "mask_inputs": T(d.mask_in)}],
                multimask_output=True)
    return r


def _bilinear_matrix(n_in, n_out):  # F.interpolate(mode="bilinear", align_corners=False) along one axis
    m = np.zeros((n_out, n_in))
    for i in range(n_out):
        src = max((i + 0.5) * n_in / n_out - 0.5, 0.0)
        i0 = min(int(src), n_in - 1)
        i1, lam = min(i0 + 1, n_in - 1), src - i0
        m[i, i0] += 1 - lam
        m[i, i1] += lam
    return m


def test_sam_end_to_end():
    r, d = _sam_e2e_run(lucid), _sam_e2e_data()
    m = r.m
    assert "pixel_mean" in r.buffers and not any(k.startswith("pixel_") for k in r.state)  # persistent=False
    mean, std = np.array([123.675, 116.28, 103.53])[:, None, None], np.array([58.395, 57.12, 57.375])[:, None, None]
    x = np.zeros((2, 3, 16, 16))
    x[0, :, :10, :16] = (d.img1 - mean) / std
    x[1, :, :16, :12] = (d.img2 - mean) / std
    emb = _encoder_np(x, m.w_enc, 2, 2, 3, (1,))
    pe = _dense_pe_np(m.w_pe["pe_layer.positional_encoding_gaussian_matrix"].astype(np.float64), 4, 4)
    prompts = [dict(points=(d.coords, d.labels)), dict(boxes=d.boxes, masks=d.mask_in)]
    for i, (out, img, orig, kw) in enumerate(zip(r.out, (d.img1, d.img2), (d.orig1, d.orig2), prompts)):
        sp, de = _prompt_np(m.w_pe, (16, 16), **kw)
        low, iou = _decoder_np(emb[i:i + 1], pe, sp, de, m.w_dec, True)
        n = len(low)
        assert out["low_res_logits"].shape == (n, 3, 16, 16) and out["iou_predictions"].shape == (n, 3)
        np.testing.assert_allclose(_np(out["low_res_logits"]), low, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(_np(out["iou_predictions"]), iou, rtol=1e-4, atol=1e-4)
        h, w = img.shape[1:]
        big = np.einsum("oh,bchw,pw->bcop", _bilinear_matrix(h, orig[0]), low[..., :h, :w],
                        _bilinear_matrix(w, orig[1]))
        got = _np(out["masks"])
        assert out["masks"].dtype == lucid.bool and got.shape == (n, 3) + orig
        sure = np.abs(big) > 2e-4  # away from the threshold by more than float32 rounding
        assert sure.mean() > 0.97 and 0.05 < (big > 0).mean() < 0.95
        np.testing.assert_array_equal(got[sure], big[sure] > 0)


def test_sam_end_to_end_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = _sam_e2e_run(lucid), _sam_e2e_run(torch)
    assert a.buffers == b.buffers and a.state == b.state
    for x, y in zip(a.out, b.out):
        for k in ("low_res_logits", "iou_predictions"):
            np.testing.assert_allclose(_np(x[k]), y[k].numpy(), rtol=1e-5, atol=2e-5, err_msg=k)
        assert (_np(x["masks"]) != y["masks"].numpy()).mean() < 1e-3


def _predictor_run(torch):
    m, d = _sam_models(torch), _sam_e2e_data()
    sam = sam_page(torch).Sam(m.enc, m.pe, m.dec)
    a = sam_amg_page(torch)
    pred = sam_predictor_page(torch, a.ResizeLongestSide).SamPredictor(sam)
    r = SimpleNamespace(m=m)
    try:
        pred.predict(np.array([[1.0, 2.0]]), np.array([1]))
    except RuntimeError as e:
        r.unset = str(e)
    image = torch.tensor(d.orig_image)[None]  # 1x3x24x40 -> 1x3x10x16
    pred.set_torch_image(pred.transform.apply_image_torch(image), (24, 40))
    r.input_size, r.emb = pred.input_size, pred.get_image_embedding()
    r.first = pred.predict(np.array([[5.0, 7.0], [30.0, 20.0]]), np.array([1, 0]), return_logits=True)
    # the refinement round: the best low-resolution logits back in as the mask prompt, with a box
    best = int(np.argmax(r.first[1]))
    r.second = pred.predict(np.array([[5.0, 7.0]]), np.array([1]), box=np.array([2.0, 3.0, 33.0, 21.0]),
                            mask_input=r.first[2][best:best + 1], multimask_output=False)
    r.best = best
    return r


def test_sam_predictor():
    r, d = _predictor_run(lucid), _sam_e2e_data()
    m = r.m
    assert r.unset == "An image must be set with .set_image(...) before mask prediction."
    assert r.input_size == (10, 16)
    resized = np.einsum("oh,chw,pw->cop", _aa_matrix(24, 10), d.orig_image.astype(np.float64), _aa_matrix(40, 16))
    mean, std = np.array([123.675, 116.28, 103.53])[:, None, None], np.array([58.395, 57.12, 57.375])[:, None, None]
    x = np.zeros((1, 3, 16, 16))
    x[0, :, :10] = (resized - mean) / std
    emb = _encoder_np(x, m.w_enc, 2, 2, 3, (1,))
    np.testing.assert_allclose(_np(r.emb), emb, rtol=1e-4, atol=1e-4)
    pe = _dense_pe_np(m.w_pe["pe_layer.positional_encoding_gaussian_matrix"].astype(np.float64), 4, 4)
    post = lambda low: np.einsum("oh,bchw,pw->bcop", _bilinear_matrix(10, 24), low[..., :10, :16],  # noqa: E731
                                 _bilinear_matrix(16, 40))
    scale = np.array([16 / 40, 10 / 24])  # apply_coords: 24x40 -> 10x16
    sp, de = _prompt_np(m.w_pe, (16, 16), points=(np.array([[[5.0, 7.0], [30.0, 20.0]]]) * scale, np.array([[1, 0]])))
    low, iou = _decoder_np(emb, pe, sp, de, m.w_dec, True)
    masks, ious, lows = r.first
    assert isinstance(masks, np.ndarray) and masks.shape == (3, 24, 40) and masks.dtype == np.float32
    np.testing.assert_allclose(lows, low[0], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ious, iou[0], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(masks, post(low)[0], rtol=1e-4, atol=1e-4)
    assert r.best == int(np.argmax(iou[0]))
    sp, de = _prompt_np(m.w_pe, (16, 16), points=(np.array([[[5.0, 7.0]]]) * scale, np.array([[1]])),
                        boxes=np.array([[2.0, 3.0, 33.0, 21.0]]) * np.tile(scale, 2),
                        masks=lows[r.best][None, None].astype(np.float64))
    low, iou = _decoder_np(emb, pe, sp, de, m.w_dec, False)
    masks, ious, lows = r.second
    assert masks.dtype == np.bool_ and masks.shape == (1, 24, 40) and lows.shape == (1, 16, 16)
    np.testing.assert_allclose(lows, low[0], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ious, iou[0], rtol=1e-4, atol=1e-4)
    big = post(low)[0]
    sure = np.abs(big) > 2e-4
    assert sure.mean() > 0.97
    np.testing.assert_array_equal(masks[sure], big[sure] > 0)


def test_sam_predictor_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = _predictor_run(lucid), _predictor_run(torch)
    assert a.unset == b.unset and a.input_size == b.input_size and a.best == b.best
    np.testing.assert_allclose(_np(a.emb), b.emb.numpy(), rtol=1e-5, atol=2e-5)
    for x, y in zip(a.first + a.second[1:], b.first + b.second[1:]):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=2e-5)
    assert (a.second[0] != b.second[0]).mean() < 1e-3


def _onnx_run(torch):
    m, d = _sam_models(torch), _sam_e2e_data()
    sam = sam_page(torch).Sam(m.enc, m.pe, m.dec)
    a = sam_amg_page(torch)
    op = sam_onnx_page(torch, a.calculate_stability_score)
    r = SimpleNamespace(m=m)
    with torch.no_grad():
        r.emb = m.enc(torch.tensor(np.random.default_rng(4).normal(size=(1, 3, 16, 16)).astype(np.float32)))
    # the ONNX demo's prompt: the clicks plus a padding point (0, 0) labelled -1, no mask
    coords = torch.tensor([[[3.0, 4.0], [0.0, 0.0]]])
    labels = torch.tensor([[1.0, -1.0]])
    size = torch.tensor([24.0, 40.0])
    no_mask, has_mask = torch.zeros(1, 1, 16, 16), torch.tensor([0.0])
    r.size = op.SamOnnxModel.resize_longest_image_size(size, 16)
    r.multi = op.SamOnnxModel(sam, return_single_mask=False)(r.emb, coords, labels, no_mask, no_mask.new_zeros(1),
                                                             size)
    r.single = op.SamOnnxModel(sam, return_single_mask=True, return_extra_metrics=True)(
        r.emb, coords, labels, no_mask, has_mask, size)
    # three points (two clicks and the pad): the single-mask output is taken; with the mask prompt
    coords3 = torch.tensor([[[3.0, 4.0], [12.0, 2.0], [0.0, 0.0]]])
    labels3 = torch.tensor([[1.0, 0.0, -1.0]])
    r.single3 = op.SamOnnxModel(sam, return_single_mask=True, use_stability_score=True)(
        r.emb, coords3, labels3, torch.tensor(d.mask_in), torch.tensor([1.0]), size)
    return r


def test_sam_onnx_model():
    r, d = _onnx_run(lucid), _sam_e2e_data()
    m = r.m
    assert _np(r.size).tolist() == [10, 16] and r.size.dtype == lucid.int64
    emb = _np(r.emb).astype(np.float64)
    pe = _dense_pe_np(m.w_pe["pe_layer.positional_encoding_gaussian_matrix"].astype(np.float64), 4, 4)
    post = lambda low: np.einsum("oh,bchw,pw->bcop", _bilinear_matrix(10, 24), low[..., :10, :16],  # noqa: E731
                                 _bilinear_matrix(16, 40))
    # the traced point embedding equals PromptEncoder's padded one
    sp, de = _prompt_np(m.w_pe, (16, 16), points=(np.array([[[3.0, 4.0]]]), np.array([[1]])))
    low, iou = _decoder_np(emb, pe, sp, de, m.w_dec, True)
    low4 = np.concatenate([_decoder_np(emb, pe, sp, de, m.w_dec, False)[0], low], 1)
    iou4 = np.concatenate([_decoder_np(emb, pe, sp, de, m.w_dec, False)[1], iou], 1)
    up, scores, lows = r.multi
    assert up.shape == (1, 4, 24, 40) and lows.shape == (1, 4, 16, 16)
    np.testing.assert_allclose(_np(lows), low4, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(_np(scores), iou4, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(_np(up), post(low4), rtol=1e-4, atol=1e-4)
    # two points: the best of the three multimask outputs, plus stability and areas of the upscaled mask
    up, scores, stab, areas, lows = r.single
    best = 1 + int(np.argmax(iou4[0, 1:]))
    np.testing.assert_allclose(_np(scores), iou4[:, best:best + 1], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(_np(up), post(low4[:, best:best + 1]), rtol=1e-4, atol=1e-4)
    u = _np(up)
    np.testing.assert_array_equal(_np(areas), (u > 0).sum((-1, -2)))
    np.testing.assert_allclose(_np(stab), (u > 1).sum((-1, -2)) / (u > -1).sum((-1, -2)), rtol=1e-6)
    # three points and the mask prompt: index 0, scored by stability
    sp, de = _prompt_np(m.w_pe, (16, 16), points=(np.array([[[3.0, 4.0], [12.0, 2.0]]]), np.array([[1, 0]])),
                        masks=d.mask_in.astype(np.float64))
    low, _ = _decoder_np(emb, pe, sp, de, m.w_dec, False)
    up, scores, lows = r.single3
    np.testing.assert_allclose(_np(lows), low, rtol=1e-4, atol=1e-4)
    lw = _np(lows)
    np.testing.assert_allclose(_np(scores), (lw > 1).sum((-1, -2)) / (lw > -1).sum((-1, -2)), rtol=1e-6)
    np.testing.assert_allclose(_np(up), post(low), rtol=1e-4, atol=1e-4)


def test_sam_onnx_model_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = _onnx_run(lucid), _onnx_run(torch)
    assert _np(a.size).tolist() == b.size.tolist()
    for x, y in zip(a.multi + a.single + a.single3, b.multi + b.single + b.single3):
        assert tuple(x.shape) == tuple(y.shape)
        np.testing.assert_allclose(_np(x), y.numpy(), rtol=1e-5, atol=2e-5)


def _amg_data():
    rng = np.random.default_rng(7)
    masks = rng.uniform(size=(2, 3, 6, 7)) > 0.7
    masks[0, 1] = False  # an empty mask
    masks[1, 2] = False
    masks[1, 2, 2, 3] = True  # a single pixel
    rle = rng.uniform(size=(3, 5, 6)) > 0.5
    rle[0, 0, 0], rle[1, 0, 0] = True, False  # a mask that starts inside and one that starts outside
    rle[2] = True
    return SimpleNamespace(masks=masks, rle=rle, logits=rng.normal(size=(2, 3, 8, 8)).astype(np.float32),
                           small=rng.uniform(size=(2, 4, 5)) > 0.5)


def _amg_run(torch):
    a, d = sam_amg_page(torch), _amg_data()
    r = SimpleNamespace(a=a)
    r.boxes = a.batched_mask_to_box(torch.tensor(d.masks))
    r.box2d = a.batched_mask_to_box(torch.tensor(d.masks[1, 0]))
    r.box_empty = a.batched_mask_to_box(torch.zeros((0, 5, 5), dtype=torch.bool))
    r.rles = a.mask_to_rle_pytorch(torch.tensor(d.rle))
    r.stab = a.calculate_stability_score(torch.tensor(d.logits), 0.0, 0.5)
    box = torch.tensor([2.0, 3.0, 7.0, 11.0])
    r.xywh, r.box_after = a.box_xyxy_to_xywh(box), box
    boxes = torch.tensor([[0, 2, 5, 9], [2, 2, 5, 5], [0, 0, 10, 10], [3, 1, 9, 10]])
    r.near = a.is_box_near_crop_edge(boxes, [4, 4, 14, 14], [0, 0, 20, 20], atol=1.0)
    r.near_orig = a.is_box_near_crop_edge(torch.tensor([[0, 0, 3, 3], [0, 0, 10, 3]]), [0, 0, 10, 10],
                                          [0, 0, 20, 20], atol=1.0)
    r.uncrop_b3 = a.uncrop_boxes_xyxy(boxes[None].float(), [4, 5, 14, 15])
    r.uncrop_pts = a.uncrop_points(torch.tensor([[1.5, 2.0], [0.0, 7.0]]), [3, 4, 9, 9])
    r.uncrop_masks = a.uncrop_masks(torch.tensor(d.small), [2, 1, 7, 5], 8, 9)
    r.uncrop_same = a.uncrop_masks(torch.tensor(d.small), [0, 0, 5, 4], 4, 5)
    # MaskData: filter by a boolean tensor, then cat
    md = a.MaskData(masks=torch.tensor(d.masks[0]), iou=np.array([0.5, 0.7, 0.9]), names=["a", "b", "c"])
    md.filter(torch.tensor([True, False, True]))
    md2 = a.MaskData(masks=torch.tensor(d.masks[1, :1]), iou=np.array([0.1]), names=["d"], extra=[1])
    md.cat(md2)
    md3 = a.MaskData(idx=torch.tensor([10, 11, 12, 13]), names=["w", "x", "y", "z"])
    md3.filter(torch.tensor([3, 1]))
    r.md_masks, r.md_iou, r.md_names, r.md_extra = md["masks"], md["iou"], md["names"], md["extra"]
    r.md3 = (md3["idx"], md3["names"])
    md.to_numpy()
    r.md_np_type = type(md["masks"])
    r.batches = [[b[0], b[1]] for b in a.batch_iterator(2, torch.arange(5), list("vwxyz"))]
    # ResizeLongestSide on a point grid and boxes of a 12x20 image, to a longest side of 32
    t = a.ResizeLongestSide(32)
    r.shape = t.get_preprocess_shape(12, 20, 32)
    pts = a.build_point_grid(3) * np.array([20, 12])
    r.grid = pts
    r.coords_np = t.apply_coords(pts, (12, 20))
    src = torch.tensor([[[4, 6], [10, 3]]])
    r.coords_t, r.coords_src = t.apply_coords_torch(src, (12, 20)), src
    r.boxes_t = t.apply_boxes_torch(torch.tensor([[1, 2, 19, 11], [0, 0, 5, 5]]), (12, 20))
    r.boxes_np = t.apply_boxes(np.array([[1, 2, 19, 11], [0, 0, 5, 5]]), (12, 20))
    image = torch.tensor(np.random.default_rng(8).normal(size=(1, 3, 12, 20)).astype(np.float32))
    r.images = [a.ResizeLongestSide(n).apply_image_torch(image) for n in (14, 10, 32)]
    return r


def _aa_matrix(n_in, n_out):  # antialiased bilinear resize along one axis: a triangle filter widened by the scale
    scale = n_in / n_out
    support, inv = (scale, 1.0 / scale) if scale > 1 else (1.0, 1.0)
    m = np.zeros((n_out, n_in))
    for i in range(n_out):
        center = scale * (i + 0.5)
        lo, hi = max(int(center - support + 0.5), 0), min(int(center + support + 0.5), n_in)
        ws = np.array([max(0.0, 1 - abs((j - center + 0.5) * inv)) for j in range(lo, hi)])
        m[i, lo:hi] = ws / ws.sum()
    return m


def _box_np(m):
    ys, xs = np.nonzero(m)
    return [0, 0, 0, 0] if len(xs) == 0 else [xs.min(), ys.min(), xs.max(), ys.max()]


def _rle_np(m):  # runs of the column-major flattening, starting with a run of zeros
    f = m.T.reshape(-1).astype(int)
    edges = np.flatnonzero(np.diff(f)) + 1
    runs = np.diff(np.concatenate([[0], edges, [f.size]])).tolist()
    return runs if f[0] == 0 else [0] + runs


def test_sam_amg_and_transforms():
    r, d = _amg_run(lucid), _amg_data()
    a = r.a
    want = np.array([[_box_np(m) for m in row] for row in d.masks])
    assert r.boxes.shape == (2, 3, 4)
    np.testing.assert_array_equal(_np(r.boxes), want)
    assert want[0, 1].tolist() == [0, 0, 0, 0] and want[1, 2].tolist() == [3, 2, 3, 2]
    np.testing.assert_array_equal(_np(r.box2d), _box_np(d.masks[1, 0]))
    assert r.box_empty.shape == (0, 4)
    # RLE: the counts, the round trip and the area
    for rle, m in zip(r.rles, d.rle):
        assert rle["size"] == [5, 6]
        assert rle["counts"] == _rle_np(m) and sum(rle["counts"]) == 30
        np.testing.assert_array_equal(a.rle_to_mask(rle), m)
        assert a.area_from_rle(rle) == m.sum()
    assert r.rles[0]["counts"][0] == 0 and r.rles[1]["counts"][0] > 0 and r.rles[2]["counts"] == [0, 30]
    # stability score: IoU of the masks thresholded at +0.5 and -0.5
    hi, lo = (d.logits > 0.5).sum((-1, -2)), (d.logits > -0.5).sum((-1, -2))
    assert r.stab.dtype == lucid.float32
    np.testing.assert_allclose(_np(r.stab), hi / lo, rtol=1e-6)
    assert np.all(hi <= lo)
    np.testing.assert_array_equal(_np(r.xywh), [2.0, 3.0, 5.0, 8.0])
    np.testing.assert_array_equal(_np(r.box_after), [2.0, 3.0, 7.0, 11.0])  # deepcopy: the input is left alone
    # near a crop edge (at 4 or 14) but not an image edge (at 0 or 20), in image coordinates
    bx = np.array([[0, 2, 5, 9], [2, 2, 5, 5], [0, 0, 10, 10], [3, 1, 9, 10]]) + [4, 4, 4, 4]
    near = np.isclose(bx, [4, 4, 14, 14], atol=1, rtol=0) & ~np.isclose(bx, [0, 0, 20, 20], atol=1, rtol=0)
    np.testing.assert_array_equal(_np(r.near), near.any(1))
    assert _np(r.near).tolist() == [True, False, True, True]
    assert _np(r.near_orig).tolist() == [False, True]
    np.testing.assert_array_equal(_np(r.uncrop_b3)[0], np.array([[0, 2, 5, 9], [2, 2, 5, 5], [0, 0, 10, 10],
                                                                 [3, 1, 9, 10]]) + [4, 5, 4, 5])
    np.testing.assert_array_equal(_np(r.uncrop_pts), [[4.5, 6.0], [3.0, 11.0]])
    full = np.zeros((2, 8, 9), bool)
    full[:, 1:5, 2:7] = d.small
    assert r.uncrop_masks.dtype == lucid.bool
    np.testing.assert_array_equal(_np(r.uncrop_masks), full)
    np.testing.assert_array_equal(_np(r.uncrop_same), d.small)
    # MaskData
    np.testing.assert_array_equal(_np(r.md_masks), np.concatenate([d.masks[0, [0, 2]], d.masks[1, :1]]))
    np.testing.assert_array_equal(r.md_iou, [0.5, 0.9, 0.1])
    assert r.md_names == ["a", "c", "d"] and r.md_extra == [1] and r.md_np_type is np.ndarray
    assert _np(r.md3[0]).tolist() == [13, 11] and r.md3[1] == ["z", "x"]
    assert [(_np(b[0]).tolist(), b[1]) for b in r.batches] == [([0, 1], ["v", "w"]), ([2, 3], ["x", "y"]),
                                                               ([4], ["z"])]
    # ResizeLongestSide: 12x20 -> 19x32 (scale 1.6, rounded)
    assert r.shape == (19, 32)
    np.testing.assert_allclose(r.grid[:3], [[20 / 6, 2], [10, 2], [50 / 3, 2]])
    np.testing.assert_allclose(r.coords_np, r.grid * [32 / 20, 19 / 12])
    assert r.coords_t.dtype == lucid.float32 and r.coords_src.dtype == lucid.int64
    np.testing.assert_allclose(_np(r.coords_t), [[[4 * 1.6, 6 * 19 / 12], [10 * 1.6, 3 * 19 / 12]]], rtol=1e-6)
    np.testing.assert_array_equal(_np(r.coords_src), [[[4, 6], [10, 3]]])
    np.testing.assert_allclose(_np(r.boxes_t), np.array([[1, 2, 19, 11], [0, 0, 5, 5]]) * [1.6, 19 / 12, 1.6, 19 / 12],
                               rtol=1e-6)
    np.testing.assert_allclose(r.boxes_np, _np(r.boxes_t), rtol=1e-6)
    # apply_image_torch: antialiased bilinear to 8x14 and 6x10, plain bilinear (upsampling) to 19x32
    image = np.random.default_rng(8).normal(size=(1, 3, 12, 20)).astype(np.float32).astype(np.float64)
    for got, size in zip(r.images, ((8, 14), (6, 10), (19, 32))):
        want = np.einsum("oh,bchw,pw->bcop", _aa_matrix(12, size[0]), image, _aa_matrix(20, size[1]))
        assert got.shape == (1, 3) + size
        np.testing.assert_allclose(_np(got), want, rtol=1e-5, atol=1e-5)


def test_sam_amg_and_transforms_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = _amg_run(lucid), _amg_run(torch)
    for name in ("boxes", "box2d", "box_empty", "stab", "xywh", "near", "near_orig", "uncrop_b3", "uncrop_pts",
                 "uncrop_masks", "uncrop_same", "md_masks", "coords_t", "boxes_t", 0, 1, 2):
        x, y = (a.images[name], b.images[name]) if isinstance(name, int) else (getattr(a, name), getattr(b, name))
        assert tuple(x.shape) == tuple(y.shape), name
        assert str(x.dtype).split(".")[-1] == str(y.dtype).split(".")[-1], name
        np.testing.assert_allclose(_np(x), y.numpy(), rtol=1e-5, atol=1e-5, err_msg=name)
    assert a.rles == b.rles
    assert [(_np(x[0]).tolist(), x[1]) for x in a.batches] == [(x[0].tolist(), x[1]) for x in b.batches]
    assert a.md_names == b.md_names and _np(a.md3[0]).tolist() == b.md3[0].tolist()


# --------------------------------------------------------------------------- Llama: runs and tests

LLAMA_ARGS = dict(dim=16, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=13, multiple_of=8, norm_eps=1e-5,
                  max_batch_size=3, max_seq_len=10)
LLAMA_TOKENS = [[1, 5, 9, 3, 12, 7, 4], [1, 8, 8, 2, 6, 11, 10]]
PROMPTS = [[1, 5, 6, 7], [1, 8], [1, 3, 4]]


def _llama_model(torch):
    mp = llama_model_page(torch)
    torch.manual_seed(0)
    args = ModelArgs(**LLAMA_ARGS)
    model = mp.Transformer(args)
    w = _weights({k: tuple(v.shape) for k, v in sorted(model.state_dict().items())}, 11)
    _load(torch, model, w)
    return mp, args, model, w


def _llama_run(torch):
    mp, args, model, w = _llama_model(torch)
    r = SimpleNamespace(args=args, w=w)
    rng = np.random.default_rng(2)
    r.x = rng.normal(size=(2, 5, 3, 8)).astype(np.float32)
    r.freqs = mp.precompute_freqs_cis(8, 5)
    xq, xk = torch.tensor(r.x), torch.tensor(r.x[:, :, :1] * 2)
    r.xq, r.xk = mp.apply_rotary_emb(xq, xk, r.freqs)
    r.bcast = tuple(mp.reshape_for_broadcast(r.freqs, torch.zeros(2, 5, 3, 4)).shape)
    r.kv = mp.repeat_kv(torch.tensor(r.x), 3)
    r.kv1 = mp.repeat_kv(torch.tensor(r.x), 1)
    r.rms = mp.RMSNorm(8, eps=1e-5)(torch.tensor(r.x).double())
    r.hidden = [tuple(mp.FeedForward(16, 64, 8, m).w1.weight.shape) for m in (None, 1.3)]
    tokens = torch.tensor(LLAMA_TOKENS)
    r.full = model.forward(tokens, 0)
    r.full_grad = r.full.requires_grad
    # the cache: a prefix of 3, a chunk of 2 (mask with the cached columns), then one token at a time
    steps = [model.forward(tokens[:, 0:3], 0), model.forward(tokens[:, 3:5], 3), model.forward(tokens[:, 5:6], 5),
             model.forward(tokens[:, 6:7], 6)]
    r.steps = torch.cat(steps, 1)
    r.cache_k0 = model.layers[0].attention.cache_k
    r.cache_v1 = model.layers[1].attention.cache_v
    # Llama.build runs the model in half precision (set_default_tensor_type(torch.cuda.HalfTensor))
    model.half()
    r.half = model.forward(tokens, 0)
    r.half_cache = model.layers[0].attention.cache_k
    return r


def test_llama_model():
    r = _llama_run(lucid)
    a, w = r.args, {k: v.astype(np.float64) for k, v in r.w.items()}
    # rotary frequencies: e^{i t theta_j}, complex64
    cis = np.exp(1j * np.outer(np.arange(5), 1.0 / 10000.0 ** (np.arange(0, 8, 2) / 8)))
    assert r.freqs.dtype == lucid.complex64 and r.freqs.shape == (5, 4)
    np.testing.assert_allclose(_np(r.freqs), cis, rtol=1e-6, atol=1e-6)
    assert r.bcast == (1, 5, 1, 4)
    # the complex product against the real rotation of each (x_2j, x_2j+1) pair
    x = r.x.astype(np.float64)
    c, s = np.cos(np.angle(cis))[None, :, None], np.sin(np.angle(cis))[None, :, None]
    rot = np.empty_like(x)
    rot[..., 0::2] = x[..., 0::2] * c - x[..., 1::2] * s
    rot[..., 1::2] = x[..., 0::2] * s + x[..., 1::2] * c
    assert r.xq.dtype == lucid.float32 and r.xq.shape == (2, 5, 3, 8) and r.xk.shape == (2, 5, 1, 8)
    np.testing.assert_allclose(_np(r.xq), rot, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_np(r.xk), rot[:, :, :1] * 2, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_np(r.xq)[:, 0], x[:, 0], rtol=1e-6)  # position 0 is not rotated
    np.testing.assert_allclose(np.linalg.norm(_np(r.xq), axis=-1), np.linalg.norm(x, axis=-1), rtol=1e-5)
    np.testing.assert_array_equal(_np(r.kv), np.repeat(r.x, 3, axis=2))
    np.testing.assert_array_equal(_np(r.kv1), r.x)
    assert r.rms.dtype == lucid.float64
    np.testing.assert_allclose(_np(r.rms), x / np.sqrt((x ** 2).mean(-1, keepdims=True) + 1e-5), rtol=1e-6)
    assert r.hidden == [(48, 16), (56, 16)]  # int(2*64/3)=42 -> 48; int(1.3*42)=54 -> 56
    # the whole model, and its cached decoding
    keys = []
    want = _llama_np(w, a, LLAMA_TOKENS, keys)
    assert r.full.shape == (2, 7, 13) and r.full.dtype == lucid.float32 and not r.full_grad
    np.testing.assert_allclose(_np(r.full), want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(_np(r.steps), want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(_np(r.steps), _np(r.full), rtol=1e-5, atol=1e-5)
    assert r.cache_k0.shape == (3, 10, 2, 4)
    np.testing.assert_allclose(_np(r.cache_k0)[:2, :7], keys[0][0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(_np(r.cache_v1)[:2, :7], keys[1][1], rtol=1e-4, atol=1e-5)
    assert not _np(r.cache_k0)[2].any() and not _np(r.cache_k0)[:, 7:].any()
    # half precision: float32 logits (``.float()``), a float16 cache (``cache_k.to(xq)``)
    assert r.half.dtype == lucid.float32 and r.half_cache.dtype == lucid.float16
    np.testing.assert_allclose(_np(r.half), want, rtol=0, atol=3e-2)
    assert np.abs(_np(r.half) - want).max() > 1e-5  # it did round


def test_llama_model_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = _llama_run(lucid), _llama_run(torch)
    np.testing.assert_allclose(_np(a.half), b.half.numpy(), rtol=0, atol=2e-2)
    assert str(a.half_cache.dtype).split(".")[-1] == str(b.half_cache.dtype).split(".")[-1]
    for name in ("freqs", "xq", "xk", "kv", "rms", "full", "steps", "cache_k0", "cache_v1"):
        np.testing.assert_allclose(_np(getattr(a, name)), getattr(b, name).detach().numpy(), rtol=1e-5, atol=1e-5,
                                   err_msg=name)
    assert a.bcast == b.bcast and a.hidden == b.hidden and a.full_grad == b.full_grad


def _generate_run(torch, eos_id):
    mp, args, model, w = _llama_model(torch)
    gp = llama_generation_page(torch)
    gen = gp.Llama(model, _Tokenizer(eos_id))
    r = SimpleNamespace(w=w, args=args)
    r.out, r.lps = gen.generate(PROMPTS, max_gen_len=4, temperature=0, logprobs=True)
    r.out_echo, r.lps_echo = gen.generate(PROMPTS, max_gen_len=4, temperature=0, logprobs=True, echo=True)
    r.plain = gen.generate(PROMPTS, max_gen_len=2, temperature=0)
    # every prompt as long as the total: one forward, log-probabilities of each token at its own position
    r.same, r.same_lps = gen.generate([[1, 4, 5], [1, 9, 3]], max_gen_len=0, temperature=0, logprobs=True, echo=True)
    r.text = gen.text_completion(["abc", "ef"], temperature=0, max_gen_len=3, logprobs=True)
    # the log-probability formula with pad targets, which ignore_index zeroes
    logits = torch.tensor(np.linspace(-2, 2, 2 * 3 * 13).reshape(2, 3, 13).astype(np.float32))
    target = torch.tensor([[4, -1, 7], [-1, -1, 0]])
    r.ce = -torch.nn.functional.cross_entropy(input=logits.transpose(1, 2), target=target, reduction="none",
                                              ignore_index=-1)
    # nucleus sampling: deterministic when p keeps one token; frequencies of the kept tokens otherwise
    probs = torch.tensor([[0.05, 0.4, 0.12, 0.3, 0.09, 0.04], [0.02, 0.03, 0.05, 0.1, 0.2, 0.6]])
    r.top1 = gp.sample_top_p(probs, 0.1)
    torch.manual_seed(0)
    r.samples = gp.sample_top_p(probs.repeat_interleave(3000, dim=0), 0.75)
    return r


def test_llama_generate():
    r = _generate_run(lucid, eos_id=99)
    w = {k: v.astype(np.float64) for k, v in r.w.items()}
    toks, lp, outs, lps = _greedy_np(w, r.args, PROMPTS, 4, 99)
    assert toks.shape == (3, 8)
    assert r.out == outs and [len(o) for o in r.out] == [4, 4, 4]
    for got, want in zip(r.lps, lps):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert r.out_echo == [toks[i, :len(p) + 4].tolist() for i, p in enumerate(PROMPTS)]
    for i, p in enumerate(PROMPTS):
        assert r.lps_echo[i][0] == 0.0
        np.testing.assert_allclose(r.lps_echo[i], lp[i, :len(p) + 4], rtol=1e-4, atol=1e-4)
    assert r.plain == ([o[:2] for o in outs], None)
    ls = _log_softmax(_llama_np(w, r.args, [[1, 4, 5], [1, 9, 3]]))
    assert r.same == [[1, 4, 5], [1, 9, 3]]
    np.testing.assert_allclose(r.same_lps, [[ls[i, j, t] for j, t in enumerate(row)]
                                            for i, row in enumerate([[1, 4, 5], [1, 9, 3]])], rtol=1e-4, atol=1e-4)
    # text completion through the letter tokenizer: "abc" -> [1, 3, 4, 5]
    _, _, touts, tlps = _greedy_np(w, r.args, [[1, 3, 4, 5], [1, 7, 8]], 3, 99)
    tok = _Tokenizer()
    assert [t["generation"] for t in r.text] == [tok.decode(o) for o in touts]
    assert [t["tokens"] for t in r.text] == [[tok.decode(x) for x in o] for o in touts]
    np.testing.assert_allclose(np.array([t["logprobs"] for t in r.text]), np.array(tlps), rtol=1e-4, atol=1e-4)
    # ignore_index
    logits = np.linspace(-2, 2, 2 * 3 * 13).reshape(2, 3, 13)
    ls = _log_softmax(logits)
    np.testing.assert_allclose(_np(r.ce), [[ls[0, 0, 4], 0, ls[0, 2, 7]], [0, 0, ls[1, 2, 0]]], rtol=1e-5, atol=1e-6)
    # nucleus sampling
    assert _np(r.top1).tolist() == [[1], [5]] and r.top1.dtype == lucid.int64
    s = _np(r.samples)[:, 0]
    assert r.samples.shape == (6000, 1)
    assert set(s[:3000]) == {1, 3, 2} and set(s[3000:]) == {5, 4}
    f1 = np.array([(s[:3000] == k).mean() for k in (1, 3, 2)])
    f2 = np.array([(s[3000:] == k).mean() for k in (5, 4)])
    np.testing.assert_allclose(f1, np.array([0.4, 0.3, 0.12]) / 0.82, atol=0.04)
    np.testing.assert_allclose(f2, [0.75, 0.25], atol=0.04)


def test_llama_generate_eos():
    # eos is the second token row 1 generates greedily: its row stops there, the others run to max_gen_len
    w = {k: v.astype(np.float64) for k, v in _weights(
        {k: tuple(v.shape) for k, v in sorted(_llama_model(lucid)[2].state_dict().items())}, 11).items()}
    args = ModelArgs(**LLAMA_ARGS)
    eos = _greedy_np(w, args, PROMPTS, 4, 99)[2][1][1]
    _, _, outs, lps = _greedy_np(w, args, PROMPTS, 4, eos)
    r = _generate_run(lucid, eos_id=eos)
    assert len(outs[1]) <= 1
    assert r.out == outs
    for got, want in zip(r.lps, lps):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_llama_generate_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = _generate_run(lucid, 99), _generate_run(torch, 99)
    assert a.out == b.out and a.out_echo == b.out_echo and a.plain == b.plain and a.same == b.same
    for x, y in ((a.lps, b.lps), (a.lps_echo, b.lps_echo), (a.same_lps, b.same_lps)):
        for u, v in zip(x, y):
            np.testing.assert_allclose(u, v, rtol=1e-5, atol=1e-5)
    assert [t["generation"] for t in a.text] == [t["generation"] for t in b.text]
    np.testing.assert_allclose(_np(a.ce), b.ce.numpy(), rtol=1e-6, atol=1e-6)
    assert _np(a.top1).tolist() == b.top1.tolist()
    for lo, hi in ((0, 3000), (3000, 6000)):  # different random streams: the same kept set
        assert set(_np(a.samples)[lo:hi, 0]) == set(b.samples.numpy()[lo:hi, 0])


def _llama_bf16_run(torch):
    mp, args, model, w = _llama_model(torch)
    model.to(torch.bfloat16)
    tokens = torch.tensor(LLAMA_TOKENS)
    full = model.forward(tokens, 0)
    steps = torch.cat([model.forward(tokens[:, :4], 0), model.forward(tokens[:, 4:7], 4)], 1)
    return SimpleNamespace(w=w, args=args, full=full, steps=steps, cache=model.layers[1].attention.cache_v)


def _needs_bfloat16_device(torch):
    if torch is lucid and lucid.get_default_device().type != "cpu":
        pytest.skip("bfloat16 exists on the CPU only (CuPy and the strict stand-in have none)")


def test_llama_bfloat16():
    _needs_bfloat16_device(lucid)
    r = _llama_bf16_run(lucid)
    want = _llama_np({k: v.astype(np.float64) for k, v in r.w.items()}, r.args, LLAMA_TOKENS)
    assert r.full.dtype == lucid.float32 and r.cache.dtype == lucid.bfloat16
    err = np.abs(_np(r.full) - want).max()
    assert 1e-3 < err < 0.1  # rounded to bfloat16's 8 bits, but close
    np.testing.assert_allclose(_np(r.steps), _np(r.full), rtol=0, atol=0.05)


def test_llama_bfloat16_torch_parity():
    torch = pytest.importorskip("torch")
    _needs_bfloat16_device(lucid)
    a, b = _llama_bf16_run(lucid), _llama_bf16_run(torch)
    np.testing.assert_allclose(_np(a.full), b.full.numpy(), rtol=0, atol=1e-2)
    np.testing.assert_allclose(_np(a.steps), b.steps.numpy(), rtol=0, atol=1e-2)
