"""Self-supervised learning code of facebookresearch run on Lucid (``import lucid as torch``), batch 16:

- facebookresearch/mae ``models_mae.py``: ``MaskedAutoencoderViT`` (``patchify``/``unpatchify`` through
  ``einsum``, ``random_masking`` with ``argsort``/``gather`` and the unshuffled binary mask,
  ``forward_encoder``/``forward_decoder`` with the mask tokens, ``forward_loss`` with
  ``norm_pix_loss``) and ``util/pos_embed.py`` (``get_2d_sincos_pos_embed`` in NumPy,
  ``interpolate_pos_embed`` through bicubic ``interpolate``). timm's ``PatchEmbed`` and ``Block``,
  which the model imports, are small local equivalents written after timm's text.
  Its ``util/misc.py`` ``NativeScalerWithGradNormCount`` and ``get_grad_norm_`` (``torch.cuda.amp.GradScaler``,
  disabled without CUDA as on PyTorch), ``util/lr_sched.py`` ``adjust_learning_rate`` and
  ``engine_pretrain.py``'s ``train_one_epoch`` with gradient accumulation (``accum_iter``; the
  ``MetricLogger`` left out).
- facebookresearch/dino: ``vision_transformer.py``'s ``DINOHead`` (its last layer under
  ``nn.utils.weight_norm``, ``weight_g`` filled with 1 and frozen), ``main_dino.py``'s ``DINOLoss``
  (teacher temperature warm-up, multi-crop cross-entropy loop, center EMA) and the teacher's EMA
  update, ``utils.py``'s ``cosine_scheduler``, ``clip_gradients``, ``cancel_gradients_last_layer``
  and ``MultiCropWrapper`` (``unique_consecutive(..., return_counts=True)`` + ``cumsum`` over the crop
  resolutions).
- facebookresearch/moco-v3 ``moco/builder.py``: ``MoCo``/``MoCo_ResNet`` (``_build_mlp`` with
  ``BatchNorm1d(affine=False)``, ``_build_projector_and_predictor_mlps``, the momentum encoder's
  update, ``contrastive_loss`` through ``einsum`` and ``CrossEntropyLoss``) and ``moco/optimizer.py``'s
  ``LARS`` (with its ``nesterov`` option); ``vits.py``'s ``build_2d_sincos_position_embedding``
  (``meshgrid`` without ``indexing=``), checked against MAE's NumPy embedding on the transposed grid.
- facebookresearch/barlowtwins ``main.py``: ``off_diagonal``, the ``BarlowTwins`` loss (in-place
  ``div_``/``add_``/``pow_`` on the cross-correlation and its diagonal view) and its ``LARS`` with
  ``exclude_bias_and_norm``.

Data are synthetic and sizes tiny. Each page is a function of the module it is handed as
``torch``; weights come from a seeded NumPy generator so the parity tests run the same text on
PyTorch with identical weights.

Adapted: ``concat_all_gather`` and the ranks (``torch.distributed.get_rank()``) need a process
group, and Barlow Twins' ``all_reduce`` too: without an initialised one they are their
single-process equivalents (the identity, rank 0), and ``labels`` are made on the logits' device
instead of ``.cuda()``; MAE's ``random_masking`` draws ``torch.rand`` noise unless the test fixed
``model.fixed_noise`` (the two libraries' random streams differ); DINO's own ``trunc_normal_`` is
``nn.init.trunc_normal_``; DINO's ``update_center`` all-reduces only under an initialised process
group; the ResNet/ViT backbones are tiny local networks; the MAE is its upstream text (the stored
fork's object-mask mode left out).

Fixed on the way: ``imgs.reshape(shape=(...))`` (MAE's ``patchify``) raised ``TypeError``; the
varargs-shape methods now take PyTorch's keyword spellings (``reshape(shape=)``, ``view(size=)``
and ``view(dtype=)``, ``permute(dims=)``, ``expand(size=)``, ``repeat(repeats=)``,
``new_zeros``/``new_ones``/``new_empty(size=)``).
"""
import io
import math
from contextlib import redirect_stdout
from functools import partial
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
    sd = module.state_dict()
    new = {}
    for k, v in sd.items():
        if "running_var" in k:
            new[k] = torch.tensor(rng.uniform(0.5, 1.5, tuple(v.shape)), dtype=v.dtype)
        elif "num_batches_tracked" in k or "pos_embed" in k or k.endswith("center"):
            new[k] = v
        elif "weight_g" in k:
            new[k] = v
        else:
            new[k] = torch.tensor(rng.uniform(-scale, scale, tuple(v.shape)), dtype=v.dtype)
    module.load_state_dict(new)


# ---------------------------------------------------------------- timm equivalents (local)
def timm_layers(torch):
    """Small local equivalents of timm's ``PatchEmbed`` and ``Block`` (``Attention``/``Mlp``)."""
    nn = torch.nn

    class PatchEmbed(nn.Module):
        def __init__(self, img_size=224, patch_size=16, in_chans=3, embed_dim=768):
            super().__init__()
            img_size = (img_size, img_size)
            patch_size = (patch_size, patch_size)
            self.img_size = img_size
            self.patch_size = patch_size
            self.grid_size = (img_size[0] // patch_size[0], img_size[1] // patch_size[1])
            self.num_patches = self.grid_size[0] * self.grid_size[1]
            self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)

        def forward(self, x):
            x = self.proj(x).flatten(2).transpose(1, 2)  # BCHW -> BNC
            return x

    class Mlp(nn.Module):
        def __init__(self, in_features, hidden_features=None, act_layer=nn.GELU):
            super().__init__()
            self.fc1 = nn.Linear(in_features, hidden_features)
            self.act = act_layer()
            self.fc2 = nn.Linear(hidden_features, in_features)

        def forward(self, x):
            return self.fc2(self.act(self.fc1(x)))

    class Attention(nn.Module):
        def __init__(self, dim, num_heads=8, qkv_bias=False, qk_scale=None):
            super().__init__()
            self.num_heads = num_heads
            head_dim = dim // num_heads
            self.scale = qk_scale or head_dim ** -0.5
            self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
            self.proj = nn.Linear(dim, dim)

        def forward(self, x):
            B, N, C = x.shape
            qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
            q, k, v = qkv[0], qkv[1], qkv[2]
            attn = (q @ k.transpose(-2, -1)) * self.scale
            attn = attn.softmax(dim=-1)
            x = (attn @ v).transpose(1, 2).reshape(B, N, C)
            return self.proj(x)

    class Block(nn.Module):
        def __init__(self, dim, num_heads, mlp_ratio=4., qkv_bias=False, qk_scale=None, norm_layer=nn.LayerNorm):
            super().__init__()
            self.norm1 = norm_layer(dim)
            self.attn = Attention(dim, num_heads=num_heads, qkv_bias=qkv_bias, qk_scale=qk_scale)
            self.norm2 = norm_layer(dim)
            self.mlp = Mlp(in_features=dim, hidden_features=int(dim * mlp_ratio))

        def forward(self, x):
            x = x + self.attn(self.norm1(x))
            x = x + self.mlp(self.norm2(x))
            return x

    return PatchEmbed, Block


# ---------------------------------------------------------------- MAE util/pos_embed.py
def get_2d_sincos_pos_embed(embed_dim, grid_size, cls_token=False):
    grid_h = np.arange(grid_size, dtype=np.float32)
    grid_w = np.arange(grid_size, dtype=np.float32)
    grid = np.meshgrid(grid_w, grid_h)  # here w goes first
    grid = np.stack(grid, axis=0)

    grid = grid.reshape([2, 1, grid_size, grid_size])
    pos_embed = get_2d_sincos_pos_embed_from_grid(embed_dim, grid)
    if cls_token:
        pos_embed = np.concatenate([np.zeros([1, embed_dim]), pos_embed], axis=0)
    return pos_embed


def get_2d_sincos_pos_embed_from_grid(embed_dim, grid):
    assert embed_dim % 2 == 0

    # use half of dimensions to encode grid_h
    emb_h = get_1d_sincos_pos_embed_from_grid(embed_dim // 2, grid[0])  # (H*W, D/2)
    emb_w = get_1d_sincos_pos_embed_from_grid(embed_dim // 2, grid[1])  # (H*W, D/2)

    emb = np.concatenate([emb_h, emb_w], axis=1)  # (H*W, D)
    return emb


def get_1d_sincos_pos_embed_from_grid(embed_dim, pos):
    assert embed_dim % 2 == 0
    omega = np.arange(embed_dim // 2, dtype=np.float32)
    omega /= embed_dim / 2.
    omega = 1. / 10000**omega  # (D/2,)

    pos = pos.reshape(-1)  # (M,)
    out = np.einsum('m,d->md', pos, omega)  # (M, D/2), outer product

    emb_sin = np.sin(out)  # (M, D/2)
    emb_cos = np.cos(out)  # (M, D/2)

    emb = np.concatenate([emb_sin, emb_cos], axis=1)  # (M, D)
    return emb


def interpolate_pos_embed_fn(torch):
    def interpolate_pos_embed(model, checkpoint_model):
        if 'pos_embed' in checkpoint_model:
            pos_embed_checkpoint = checkpoint_model['pos_embed']
            embedding_size = pos_embed_checkpoint.shape[-1]
            num_patches = model.patch_embed.num_patches
            num_extra_tokens = model.pos_embed.shape[-2] - num_patches
            # height (== width) for the checkpoint position embedding
            orig_size = int((pos_embed_checkpoint.shape[-2] - num_extra_tokens) ** 0.5)
            # height (== width) for the new position embedding
            new_size = int(num_patches ** 0.5)
            # class_token and dist_token are kept unchanged
            if orig_size != new_size:
                print("Position interpolate from %dx%d to %dx%d" % (orig_size, orig_size, new_size, new_size))
                extra_tokens = pos_embed_checkpoint[:, :num_extra_tokens]
                # only the position tokens are interpolated
                pos_tokens = pos_embed_checkpoint[:, num_extra_tokens:]
                pos_tokens = pos_tokens.reshape(-1, orig_size, orig_size, embedding_size).permute(0, 3, 1, 2)
                pos_tokens = torch.nn.functional.interpolate(
                    pos_tokens, size=(new_size, new_size), mode='bicubic', align_corners=False)
                pos_tokens = pos_tokens.permute(0, 2, 3, 1).flatten(1, 2)
                new_pos_embed = torch.cat((extra_tokens, pos_tokens), dim=1)
                checkpoint_model['pos_embed'] = new_pos_embed
    return interpolate_pos_embed


# ---------------------------------------------------------------- MAE models_mae.py
def mae_classes(torch):
    nn = torch.nn
    PatchEmbed, Block = timm_layers(torch)

    class MaskedAutoencoderViT(nn.Module):
        """ Masked Autoencoder with VisionTransformer backbone
        """
        def __init__(self, img_size=224, patch_size=16, in_chans=3,
                     embed_dim=1024, depth=24, num_heads=16,
                     decoder_embed_dim=512, decoder_depth=8, decoder_num_heads=16,
                     mlp_ratio=4., norm_layer=nn.LayerNorm, norm_pix_loss=False):
            super().__init__()

            # --------------------------------------------------------------------------
            # MAE encoder specifics
            self.patch_embed = PatchEmbed(img_size, patch_size, in_chans, embed_dim)
            num_patches = self.patch_embed.num_patches

            self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
            self.pos_embed = nn.Parameter(torch.zeros(1, num_patches + 1, embed_dim), requires_grad=False)  # fixed sin-cos embedding

            self.blocks = nn.ModuleList([
                Block(embed_dim, num_heads, mlp_ratio, qkv_bias=True, qk_scale=None, norm_layer=norm_layer)
                for i in range(depth)])
            self.norm = norm_layer(embed_dim)
            # --------------------------------------------------------------------------

            # --------------------------------------------------------------------------
            # MAE decoder specifics
            self.decoder_embed = nn.Linear(embed_dim, decoder_embed_dim, bias=True)

            self.mask_token = nn.Parameter(torch.zeros(1, 1, decoder_embed_dim))

            self.decoder_pos_embed = nn.Parameter(torch.zeros(1, num_patches + 1, decoder_embed_dim), requires_grad=False)  # fixed sin-cos embedding

            self.decoder_blocks = nn.ModuleList([
                Block(decoder_embed_dim, decoder_num_heads, mlp_ratio, qkv_bias=True, qk_scale=None, norm_layer=norm_layer)
                for i in range(decoder_depth)])

            self.decoder_norm = norm_layer(decoder_embed_dim)
            self.decoder_pred = nn.Linear(decoder_embed_dim, patch_size**2 * in_chans, bias=True)  # decoder to patch
            # --------------------------------------------------------------------------

            self.norm_pix_loss = norm_pix_loss
            self.fixed_noise = None  # test hook (see the module docstring)

            self.initialize_weights()

        def initialize_weights(self):
            # initialization
            # initialize (and freeze) pos_embed by sin-cos embedding
            pos_embed = get_2d_sincos_pos_embed(self.pos_embed.shape[-1], int(self.patch_embed.num_patches**.5), cls_token=True)
            self.pos_embed.data.copy_(torch.from_numpy(pos_embed).float().unsqueeze(0))

            decoder_pos_embed = get_2d_sincos_pos_embed(self.decoder_pos_embed.shape[-1], int(self.patch_embed.num_patches**.5), cls_token=True)
            self.decoder_pos_embed.data.copy_(torch.from_numpy(decoder_pos_embed).float().unsqueeze(0))

            # initialize patch_embed like nn.Linear (instead of nn.Conv2d)
            w = self.patch_embed.proj.weight.data
            torch.nn.init.xavier_uniform_(w.view([w.shape[0], -1]))

            # timm's trunc_normal_(std=.02) is effectively normal_(std=0.02) as cutoff is too big (2.)
            torch.nn.init.normal_(self.cls_token, std=.02)
            torch.nn.init.normal_(self.mask_token, std=.02)

            # initialize nn.Linear and nn.LayerNorm
            self.apply(self._init_weights)

        def _init_weights(self, m):
            if isinstance(m, nn.Linear):
                # we use xavier_uniform following official JAX ViT:
                torch.nn.init.xavier_uniform_(m.weight)
                if isinstance(m, nn.Linear) and m.bias is not None:
                    nn.init.constant_(m.bias, 0)
            elif isinstance(m, nn.LayerNorm):
                nn.init.constant_(m.bias, 0)
                nn.init.constant_(m.weight, 1.0)

        def patchify(self, imgs):
            """
            imgs: (N, 3, H, W)
            x: (N, L, patch_size**2 *3)
            """
            p = self.patch_embed.patch_size[0]
            assert imgs.shape[2] == imgs.shape[3] and imgs.shape[2] % p == 0

            h = w = imgs.shape[2] // p
            x = imgs.reshape(shape=(imgs.shape[0], 3, h, p, w, p))
            x = torch.einsum('nchpwq->nhwpqc', x)
            x = x.reshape(shape=(imgs.shape[0], h * w, p**2 * 3))
            return x

        def unpatchify(self, x):
            """
            x: (N, L, patch_size**2 *3)
            imgs: (N, 3, H, W)
            """
            p = self.patch_embed.patch_size[0]
            h = w = int(x.shape[1]**.5)
            assert h * w == x.shape[1]

            x = x.reshape(shape=(x.shape[0], h, w, p, p, 3))
            x = torch.einsum('nhwpqc->nchpwq', x)
            imgs = x.reshape(shape=(x.shape[0], 3, h * p, h * p))
            return imgs

        def random_masking(self, x, mask_ratio):
            """
            Perform per-sample random masking by per-sample shuffling.
            Per-sample shuffling is done by argsort random noise.
            x: [N, L, D], sequence
            """
            N, L, D = x.shape  # batch, length, dim
            len_keep = int(L * (1 - mask_ratio))

            noise = torch.rand(N, L, device=x.device)  # noise in [0, 1]
            if self.fixed_noise is not None:
                noise = self.fixed_noise

            # sort noise for each sample
            ids_shuffle = torch.argsort(noise, dim=1)  # ascend: small is keep, large is remove
            ids_restore = torch.argsort(ids_shuffle, dim=1)

            # keep the first subset
            ids_keep = ids_shuffle[:, :len_keep]
            x_masked = torch.gather(x, dim=1, index=ids_keep.unsqueeze(-1).repeat(1, 1, D))

            # generate the binary mask: 0 is keep, 1 is remove
            mask = torch.ones([N, L], device=x.device)
            mask[:, :len_keep] = 0
            # unshuffle to get the binary mask
            mask = torch.gather(mask, dim=1, index=ids_restore)

            return x_masked, mask, ids_restore

        def forward_encoder(self, x, mask_ratio):
            # embed patches
            x = self.patch_embed(x)

            # add pos embed w/o cls token
            x = x + self.pos_embed[:, 1:, :]

            # masking: length -> length * mask_ratio
            x, mask, ids_restore = self.random_masking(x, mask_ratio)

            # append cls token
            cls_token = self.cls_token + self.pos_embed[:, :1, :]
            cls_tokens = cls_token.expand(x.shape[0], -1, -1)
            x = torch.cat((cls_tokens, x), dim=1)

            # apply Transformer blocks
            for blk in self.blocks:
                x = blk(x)
            x = self.norm(x)

            return x, mask, ids_restore

        def forward_decoder(self, x, ids_restore):
            # embed tokens
            x = self.decoder_embed(x)

            # append mask tokens to sequence
            mask_tokens = self.mask_token.repeat(x.shape[0], ids_restore.shape[1] + 1 - x.shape[1], 1)
            x_ = torch.cat([x[:, 1:, :], mask_tokens], dim=1)  # no cls token
            x_ = torch.gather(x_, dim=1, index=ids_restore.unsqueeze(-1).repeat(1, 1, x.shape[2]))  # unshuffle
            x = torch.cat([x[:, :1, :], x_], dim=1)  # append cls token

            # add pos embed
            x = x + self.decoder_pos_embed

            # apply Transformer blocks
            for blk in self.decoder_blocks:
                x = blk(x)
            x = self.decoder_norm(x)

            # predictor projection
            x = self.decoder_pred(x)

            # remove cls token
            x = x[:, 1:, :]

            return x

        def forward_loss(self, imgs, pred, mask):
            """
            imgs: [N, 3, H, W]
            pred: [N, L, p*p*3]
            mask: [N, L], 0 is keep, 1 is remove,
            """
            target = self.patchify(imgs)
            if self.norm_pix_loss:
                mean = target.mean(dim=-1, keepdim=True)
                var = target.var(dim=-1, keepdim=True)
                target = (target - mean) / (var + 1.e-6)**.5

            loss = (pred - target) ** 2
            loss = loss.mean(dim=-1)  # [N, L], mean loss per patch

            loss = (loss * mask).sum() / mask.sum()  # mean loss on removed patches
            return loss

        def forward(self, imgs, mask_ratio=0.75):
            latent, mask, ids_restore = self.forward_encoder(imgs, mask_ratio)
            pred = self.forward_decoder(latent, ids_restore)  # [N, L, p*p*3]
            loss = self.forward_loss(imgs, pred, mask)
            return loss, pred, mask

    def mae_vit_tiny(**kwargs):  # shrunk from mae_vit_base_patch16_dec512d8b
        model = MaskedAutoencoderViT(
            patch_size=2, embed_dim=8, depth=1, num_heads=2,
            decoder_embed_dim=8, decoder_depth=1, decoder_num_heads=2,
            mlp_ratio=2, norm_layer=partial(nn.LayerNorm, eps=1e-6), **kwargs)
        return model

    return MaskedAutoencoderViT, mae_vit_tiny


def mae_page(torch, steps=8):
    out = {}
    _, mae_vit_tiny = mae_classes(torch)
    model = mae_vit_tiny(img_size=8, norm_pix_loss=True)
    _load(torch, model, 0)
    rng = np.random.default_rng(1)
    imgs = torch.tensor(rng.standard_normal((2, 3, 8, 8)), dtype=torch.float32)
    noise = torch.tensor(rng.uniform(size=(2, 16)), dtype=torch.float32)
    out["pos_embed"] = _np(model.pos_embed)
    out["patches"] = _np(model.patchify(imgs))
    out["round_trip"] = _np(model.unpatchify(model.patchify(imgs)))
    x = torch.tensor(rng.standard_normal((2, 16, 3)), dtype=torch.float32)
    model.fixed_noise = noise
    x_masked, mask, ids_restore = model.random_masking(x, 0.75)
    out["x"], out["noise"] = _np(x), _np(noise)
    out["x_masked"], out["mask"], out["ids_restore"] = _np(x_masked), _np(mask), _np(ids_restore)
    loss, pred, mask = model(imgs, mask_ratio=0.75)
    out["loss0"], out["pred"], out["mask_fwd"] = loss.item(), _np(pred), _np(mask)
    out["imgs"] = _np(imgs)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-2, betas=(0.9, 0.95))
    losses = []
    for _ in range(steps):
        loss, _, _ = model(imgs, mask_ratio=0.75)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    out["losses"] = losses
    # interpolate_pos_embed: a 2x2-grid checkpoint into the 4x4-grid model
    small = mae_vit_tiny(img_size=4, norm_pix_loss=True)
    checkpoint_model = {"pos_embed": small.pos_embed.detach().clone(), "other": 1}
    buf = io.StringIO()
    with redirect_stdout(buf):
        interpolate_pos_embed_fn(torch)(model, checkpoint_model)
    out["printed"] = buf.getvalue()
    out["ckpt_small"] = _np(small.pos_embed)
    out["ckpt_interp"] = _np(checkpoint_model["pos_embed"])
    const = {"pos_embed": torch.full((1, 5, 8), 0.25)}
    with redirect_stdout(io.StringIO()):
        interpolate_pos_embed_fn(torch)(model, const)
    out["const_interp"] = _np(const["pos_embed"])
    return out


def test_mae_pos_embed_patchify_masking_and_training():
    out = mae_page(lucid)
    # sin-cos closed form: row 1 + r*g + c; first half encodes c (w goes first), second half r
    D, g = 8, 4
    pe = out["pos_embed"][0]
    assert np.all(pe[0] == 0)
    for r in range(g):
        for c in range(g):
            want = []
            for pos in (c, r):
                om = 1.0 / 10000 ** (np.arange(D // 4) / (D / 4))
                want += list(np.sin(pos * om)) + list(np.cos(pos * om))
            np.testing.assert_allclose(pe[1 + r * g + c], want, atol=1e-6)
    # patchify: (n, c, h*p+i, w*p+j) -> (n, h*g+w, (i*p+j)*3+c)
    imgs = out["imgs"]
    p = 2
    want = imgs.reshape(2, 3, 4, p, 4, p).transpose(0, 2, 4, 3, 5, 1).reshape(2, 16, 12)
    np.testing.assert_allclose(out["patches"], want, rtol=0, atol=0)
    assert out["patches"][1, 4 + 2, (1 * p + 0) * 3 + 2] == imgs[1, 2, 1 * p + 1, 2 * p + 0]
    np.testing.assert_array_equal(out["round_trip"], imgs)
    # random_masking keeps int(16 * 0.25) = 4 tokens of smallest noise, ids_restore inverts the shuffle
    noise, x = out["noise"], out["x"]
    ids_shuffle = np.argsort(noise, axis=1)
    np.testing.assert_array_equal(out["ids_restore"], np.argsort(ids_shuffle, axis=1))
    for n in range(2):
        np.testing.assert_array_equal(ids_shuffle[n][out["ids_restore"][n].astype(int)], np.arange(16))
        np.testing.assert_array_equal(out["x_masked"][n], x[n][ids_shuffle[n, :4]])
        np.testing.assert_array_equal(out["mask"][n], (np.argsort(np.argsort(noise[n])) >= 4).astype(float))
    assert out["x_masked"].shape == (2, 4, 3) and out["mask"].sum() == 24
    np.testing.assert_array_equal(out["mask_fwd"], out["mask"])
    # forward_loss with norm_pix_loss, recomputed in NumPy from the prediction
    t = out["patches"]
    t = (t - t.mean(-1, keepdims=True)) / np.sqrt(t.var(-1, ddof=1, keepdims=True) + 1e-6)
    per = ((out["pred"] - t) ** 2).mean(-1)
    np.testing.assert_allclose(out["loss0"], (per * out["mask"]).sum() / out["mask"].sum(), rtol=1e-5)
    losses = out["losses"]
    assert losses[-1] < 0.9 * losses[0], losses
    # interpolate_pos_embed
    assert out["printed"] == "Position interpolate from 2x2 to 4x4\n" * 1
    ck = out["ckpt_interp"]
    assert ck.shape == (1, 17, 8)
    np.testing.assert_array_equal(ck[0, 0], out["ckpt_small"][0, 0])  # cls token kept
    np.testing.assert_allclose(out["const_interp"][0, 1:], 0.25, atol=1e-6)  # bicubic weights sum to 1
    # first-coordinate channel 0 is sin(c): the 2-grid's c in {0, 1} spreads monotonically across 4 columns
    col = ck[0, 1:, 0].reshape(4, 4)
    np.testing.assert_allclose(col, col[:1].repeat(4, 0), atol=1e-6)  # independent of the row
    assert np.all(np.diff(col[0]) >= 0)


def test_mae_float64_gradients_by_finite_differences():
    _, mae_vit_tiny = mae_classes(lucid)
    model = mae_vit_tiny(img_size=4, norm_pix_loss=False)
    _load(lucid, model, 3)
    model.double()
    rng = np.random.default_rng(4)
    imgs = lucid.tensor(rng.standard_normal((1, 3, 4, 4)))
    model.fixed_noise = lucid.tensor(rng.uniform(size=(1, 4)))
    loss, _, _ = model(imgs, mask_ratio=0.5)
    loss.backward()
    for name, idx in (("cls_token", (0, 0, 3)), ("mask_token", (0, 0, 1)), ("decoder_pred.weight", (5, 2)),
                      ("blocks.0.attn.qkv.weight", (17, 4)), ("patch_embed.proj.weight", (2, 1, 0, 1))):
        prm = dict(model.named_parameters())[name]
        g = prm.grad[idx].item()
        eps = 1e-6
        with lucid.no_grad():
            base = prm[idx].item()
            prm[idx] = base + eps
            lp = model(imgs, mask_ratio=0.5)[0].item()
            prm[idx] = base - eps
            lm = model(imgs, mask_ratio=0.5)[0].item()
            prm[idx] = base
        assert abs(g - (lp - lm) / (2 * eps)) < 1e-6 + 1e-5 * abs(g), (name, g, (lp - lm) / (2 * eps))
        assert abs(g) > 1e-6, name


def test_mae_engine_pretrain_accumulation_and_lr_schedule():
    log = mae_engine_page(lucid)
    # per-iteration schedule set every accum_iter=2 steps: warm-up epoch 0 -> 0, 0.025; then cosine
    cos = 0.01 + 0.04 * 0.5 * (1 + math.cos(math.pi * 0.5))
    np.testing.assert_allclose(log["lr"], [0.0, 0.0, 0.025, 0.025, 0.05, 0.05, cos, cos], rtol=1e-12)
    # parameters move only on every 2nd micro-batch (lr 0 at the very first update)
    assert log["frozen"] == [True, True, True, False, True, False, True, False], log["frozen"]
    assert [n is None for n in log["norm"]] == [True, False] * 4
    for n, g in zip(log["norm"][1::2], log["grad_norm"][1::2]):
        np.testing.assert_allclose(n, g, rtol=1e-5)
    assert all(0 < i <= g for i, g in zip(log["inf"], log["grad_norm"]))
    first, last = np.mean(log["loss"][:4]), np.mean(log["loss"][4:])
    assert last < 0.95 * first, log["loss"]


def test_mae_torch_parity():
    torch = pytest.importorskip("torch")
    ea, eb = mae_engine_page(lucid), mae_engine_page(torch)
    for k in ea:
        if k == "norm":
            assert [n is None for n in ea[k]] == [n is None for n in eb[k]]
            np.testing.assert_allclose([n for n in ea[k] if n is not None], [n for n in eb[k] if n is not None], rtol=1e-4)
        else:
            np.testing.assert_allclose(np.array(ea[k], dtype=float), np.array(eb[k], dtype=float), rtol=1e-4, atol=1e-6, err_msg=k)
    a, b = mae_page(lucid), mae_page(torch)
    for k in a:
        if k == "printed":
            assert a[k] == b[k]
        else:
            np.testing.assert_allclose(a[k], b[k], rtol=2e-4, atol=2e-5, err_msg=k)


# ---------------------------------------------------------------- MAE util/misc.py, util/lr_sched.py, engine_pretrain.py
def mae_engine_page(torch, epochs=2):
    import sys
    import warnings
    from math import inf

    class NativeScalerWithGradNormCount:
        state_dict_key = "amp_scaler"

        def __init__(self):
            self._scaler = torch.cuda.amp.GradScaler()

        def __call__(self, loss, optimizer, clip_grad=None, parameters=None, create_graph=False, update_grad=True):
            self._scaler.scale(loss).backward(create_graph=create_graph)
            if update_grad:
                if clip_grad is not None:
                    assert parameters is not None
                    self._scaler.unscale_(optimizer)  # unscale the gradients of optimizer's assigned params in-place
                    norm = torch.nn.utils.clip_grad_norm_(parameters, clip_grad)
                else:
                    self._scaler.unscale_(optimizer)
                    norm = get_grad_norm_(parameters)
                self._scaler.step(optimizer)
                self._scaler.update()
            else:
                norm = None
            return norm

        def state_dict(self):
            return self._scaler.state_dict()

        def load_state_dict(self, state_dict):
            self._scaler.load_state_dict(state_dict)

    def get_grad_norm_(parameters, norm_type: float = 2.0) -> torch.Tensor:
        if isinstance(parameters, torch.Tensor):
            parameters = [parameters]
        parameters = [p for p in parameters if p.grad is not None]
        norm_type = float(norm_type)
        if len(parameters) == 0:
            return torch.tensor(0.)
        device = parameters[0].grad.device
        if norm_type == inf:
            total_norm = max(p.grad.detach().abs().max().to(device) for p in parameters)
        else:
            total_norm = torch.norm(torch.stack([torch.norm(p.grad.detach(), norm_type).to(device) for p in parameters]), norm_type)
        return total_norm

    def adjust_learning_rate(optimizer, epoch, args):
        """Decay the learning rate with half-cycle cosine after warmup"""
        if epoch < args.warmup_epochs:
            lr = args.lr * epoch / args.warmup_epochs
        else:
            lr = args.min_lr + (args.lr - args.min_lr) * 0.5 * \
                (1. + math.cos(math.pi * (epoch - args.warmup_epochs) / (args.epochs - args.warmup_epochs)))
        for param_group in optimizer.param_groups:
            if "lr_scale" in param_group:
                param_group["lr"] = lr * param_group["lr_scale"]
            else:
                param_group["lr"] = lr
        return lr

    log = {"lr": [], "norm": [], "grad_norm": [], "loss": [], "frozen": [], "inf": []}

    def train_one_epoch(model, data_loader, optimizer, device, epoch, loss_scaler, args=None):
        model.train(True)
        accum_iter = args.accum_iter
        optimizer.zero_grad()
        for data_iter_step, (samples, _) in enumerate(data_loader):
            # we use a per iteration (instead of per epoch) lr scheduler
            if data_iter_step % accum_iter == 0:
                adjust_learning_rate(optimizer, data_iter_step / len(data_loader) + epoch, args)
            samples = samples.to(device, non_blocking=True)
            before = [_np(p) for p in model.parameters()]
            with torch.cuda.amp.autocast():
                loss, _, _ = model(samples, mask_ratio=args.mask_ratio)
            loss_value = loss.item()
            if not math.isfinite(loss_value):
                print("Loss is {}, stopping training".format(loss_value))
                sys.exit(1)
            loss /= accum_iter
            norm = loss_scaler(loss, optimizer, parameters=model.parameters(),
                               update_grad=(data_iter_step + 1) % accum_iter == 0)
            log["lr"].append(optimizer.param_groups[0]["lr"])
            log["norm"].append(None if norm is None else norm.item())
            log["grad_norm"].append(math.sqrt(sum(float((p.grad.double() ** 2).sum()) for p in model.parameters() if p.grad is not None)))
            log["inf"].append(get_grad_norm_(list(model.parameters()), inf).item())
            log["frozen"].append(all(np.array_equal(b, _np(p)) for b, p in zip(before, model.parameters())))
            log["loss"].append(loss_value)
            if (data_iter_step + 1) % accum_iter == 0:
                optimizer.zero_grad()

    _, mae_vit_tiny = mae_classes(torch)
    model = mae_vit_tiny(img_size=4, norm_pix_loss=False)
    _load(torch, model, 31)
    rng = np.random.default_rng(32)
    data_loader = [(torch.tensor(rng.standard_normal((2, 3, 4, 4)), dtype=torch.float32), None) for _ in range(4)]
    args = SimpleNamespace(accum_iter=2, warmup_epochs=1, epochs=epochs, lr=0.05, min_lr=0.01, mask_ratio=0.5)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95))
    model.fixed_noise = torch.tensor(rng.uniform(size=(2, 4)), dtype=torch.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.cuda.amp.* deprecation; no CUDA: scaler and autocast disabled
        loss_scaler = NativeScalerWithGradNormCount()
        for epoch in range(epochs):
            train_one_epoch(model, data_loader, optimizer, torch.get_default_device(), epoch, loss_scaler, args=args)
    return log


# ---------------------------------------------------------------- DINO
def dino_classes(torch):
    nn = torch.nn
    F = torch.nn.functional
    trunc_normal_ = nn.init.trunc_normal_

    class DINOHead(nn.Module):
        def __init__(self, in_dim, out_dim, use_bn=False, norm_last_layer=True, nlayers=3, hidden_dim=2048, bottleneck_dim=256):
            super().__init__()
            nlayers = max(nlayers, 1)
            if nlayers == 1:
                self.mlp = nn.Linear(in_dim, bottleneck_dim)
            else:
                layers = [nn.Linear(in_dim, hidden_dim)]
                if use_bn:
                    layers.append(nn.BatchNorm1d(hidden_dim))
                layers.append(nn.GELU())
                for _ in range(nlayers - 2):
                    layers.append(nn.Linear(hidden_dim, hidden_dim))
                    if use_bn:
                        layers.append(nn.BatchNorm1d(hidden_dim))
                    layers.append(nn.GELU())
                layers.append(nn.Linear(hidden_dim, bottleneck_dim))
                self.mlp = nn.Sequential(*layers)
            self.apply(self._init_weights)
            self.last_layer = nn.utils.weight_norm(nn.Linear(bottleneck_dim, out_dim, bias=False))
            self.last_layer.weight_g.data.fill_(1)
            if norm_last_layer:
                self.last_layer.weight_g.requires_grad = False

        def _init_weights(self, m):
            if isinstance(m, nn.Linear):
                trunc_normal_(m.weight, std=.02)
                if isinstance(m, nn.Linear) and m.bias is not None:
                    nn.init.constant_(m.bias, 0)

        def forward(self, x):
            x = self.mlp(x)
            x = nn.functional.normalize(x, dim=-1, p=2)
            x = self.last_layer(x)
            return x

    class MultiCropWrapper(nn.Module):
        """
        Perform forward pass separately on each resolution input.
        The inputs corresponding to a single resolution are clubbed and single
        forward is run on the same resolution inputs. Hence we do several
        forward passes = number of different resolutions used. We then
        concatenate all the output features and run the head forward on these
        concatenated features.
        """
        def __init__(self, backbone, head):
            super(MultiCropWrapper, self).__init__()
            # disable layers dedicated to ImageNet labels classification
            backbone.fc, backbone.head = nn.Identity(), nn.Identity()
            self.backbone = backbone
            self.head = head

        def forward(self, x):
            # convert to list
            if not isinstance(x, list):
                x = [x]
            idx_crops = torch.cumsum(torch.unique_consecutive(
                torch.tensor([inp.shape[-1] for inp in x]),
                return_counts=True,
            )[1], 0)
            start_idx, output = 0, torch.empty(0).to(x[0].device)
            for end_idx in idx_crops:
                _out = self.backbone(torch.cat(x[start_idx: end_idx]))
                # The output is a tuple with XCiT model. See:
                # https://github.com/facebookresearch/xcit/blob/master/xcit.py#L404-L405
                if isinstance(_out, tuple):
                    _out = _out[0]
                # accumulate outputs
                output = torch.cat((output, _out))
                start_idx = end_idx
            # Run the head forward on the concatenated features.
            return self.head(output)

    class DINOLoss(nn.Module):
        def __init__(self, out_dim, ncrops, warmup_teacher_temp, teacher_temp,
                     warmup_teacher_temp_epochs, nepochs, student_temp=0.1,
                     center_momentum=0.9):
            super().__init__()
            self.student_temp = student_temp
            self.center_momentum = center_momentum
            self.ncrops = ncrops
            self.register_buffer("center", torch.zeros(1, out_dim))
            # we apply a warm up for the teacher temperature because
            # a too high temperature makes the training instable at the beginning
            self.teacher_temp_schedule = np.concatenate((
                np.linspace(warmup_teacher_temp,
                            teacher_temp, warmup_teacher_temp_epochs),
                np.ones(nepochs - warmup_teacher_temp_epochs) * teacher_temp
            ))

        def forward(self, student_output, teacher_output, epoch):
            """
            Cross-entropy between softmax outputs of the teacher and student networks.
            """
            student_out = student_output / self.student_temp
            student_out = student_out.chunk(self.ncrops)

            # teacher centering and sharpening
            temp = self.teacher_temp_schedule[epoch]
            teacher_out = F.softmax((teacher_output - self.center) / temp, dim=-1)
            teacher_out = teacher_out.detach().chunk(2)

            total_loss = 0
            n_loss_terms = 0
            for iq, q in enumerate(teacher_out):
                for v in range(len(student_out)):
                    if v == iq:
                        # we skip cases where student and teacher operate on the same view
                        continue
                    loss = torch.sum(-q * F.log_softmax(student_out[v], dim=-1), dim=-1)
                    total_loss += loss.mean()
                    n_loss_terms += 1
            total_loss /= n_loss_terms
            self.update_center(teacher_output)
            return total_loss

        @torch.no_grad()
        def update_center(self, teacher_output):
            """
            Update center used for teacher output.
            """
            batch_center = torch.sum(teacher_output, dim=0, keepdim=True)
            world_size = 1  # single process: dist.all_reduce(batch_center) is the identity
            if torch.distributed.is_available() and torch.distributed.is_initialized():
                torch.distributed.all_reduce(batch_center)
                world_size = torch.distributed.get_world_size()
            batch_center = batch_center / (len(teacher_output) * world_size)

            # ema update
            self.center = self.center * self.center_momentum + batch_center * (1 - self.center_momentum)

    def cosine_scheduler(base_value, final_value, epochs, niter_per_ep, warmup_epochs=0, start_warmup_value=0):
        warmup_schedule = np.array([])
        warmup_iters = warmup_epochs * niter_per_ep
        if warmup_epochs > 0:
            warmup_schedule = np.linspace(start_warmup_value, base_value, warmup_iters)

        iters = np.arange(epochs * niter_per_ep - warmup_iters)
        schedule = final_value + 0.5 * (base_value - final_value) * (1 + np.cos(np.pi * iters / len(iters)))

        schedule = np.concatenate((warmup_schedule, schedule))
        assert len(schedule) == epochs * niter_per_ep
        return schedule

    def clip_gradients(model, clip):
        norms = []
        for name, p in model.named_parameters():
            if p.grad is not None:
                param_norm = p.grad.data.norm(2)
                norms.append(param_norm.item())
                clip_coef = clip / (param_norm + 1e-6)
                if clip_coef < 1:
                    p.grad.data.mul_(clip_coef)
        return norms

    def cancel_gradients_last_layer(epoch, model, freeze_last_layer):
        if epoch >= freeze_last_layer:
            return
        for n, p in model.named_parameters():
            if "last_layer" in n:
                p.grad = None

    class TinyBackbone(nn.Module):  # stands in for the ViT: any resolution -> (N, 4)
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.head = nn.Linear(4, 7)

        def forward(self, x):
            self.calls = getattr(self, "calls", 0) + 1
            return self.head(self.pool(torch.relu(self.conv(x))).flatten(1))

    return SimpleNamespace(DINOHead=DINOHead, MultiCropWrapper=MultiCropWrapper, DINOLoss=DINOLoss,
                           cosine_scheduler=cosine_scheduler, clip_gradients=clip_gradients,
                           cancel_gradients_last_layer=cancel_gradients_last_layer, TinyBackbone=TinyBackbone)


def dino_page(torch, epochs=3, niter_per_ep=3):
    out = {}
    d = dino_classes(torch)
    student = d.MultiCropWrapper(d.TinyBackbone(), d.DINOHead(4, 10, hidden_dim=8, bottleneck_dim=5))
    teacher = d.MultiCropWrapper(d.TinyBackbone(), d.DINOHead(4, 10, hidden_dim=8, bottleneck_dim=5))
    _load(torch, student, 0, scale=0.6)
    # teacher and student start with the same weights
    teacher.load_state_dict(student.state_dict())
    for p in teacher.parameters():
        p.requires_grad = False
    out["g_requires_grad"] = student.head.last_layer.weight_g.requires_grad
    out["weight_g"] = _np(student.head.last_layer.weight_g)
    out["weight_v"] = _np(student.head.last_layer.weight_v)
    dino_loss = d.DINOLoss(10, 6, 0.04, 0.07, 2, epochs)
    rng = np.random.default_rng(5)
    images = [torch.tensor(rng.standard_normal((2, 3, 6, 6)), dtype=torch.float32) for _ in range(2)]
    images += [torch.tensor(rng.standard_normal((2, 3, 3, 3)), dtype=torch.float32) for _ in range(4)]
    params_groups = [{"params": [p for n, p in student.named_parameters() if p.requires_grad and not n.endswith(".bias")]},
                     {"params": [p for n, p in student.named_parameters() if p.requires_grad and n.endswith(".bias")],
                      "weight_decay": 0.}]
    optimizer = torch.optim.SGD(params_groups, lr=0, momentum=0.9)
    lr_schedule = d.cosine_scheduler(0.3, 1e-3, epochs, niter_per_ep, warmup_epochs=1)
    wd_schedule = d.cosine_scheduler(0.04, 0.4, epochs, niter_per_ep)
    momentum_schedule = d.cosine_scheduler(0.9, 1, epochs, niter_per_ep)
    out["lr_schedule"], out["wd_schedule"], out["momentum_schedule"] = lr_schedule, wd_schedule, momentum_schedule
    losses, centers, teacher_outs, student_outs, norms, last_grads = [], [], [], [], [], []
    for epoch in range(epochs):
        for it in range(niter_per_ep):
            it = niter_per_ep * epoch + it  # global training iteration
            for i, param_group in enumerate(optimizer.param_groups):
                param_group["lr"] = lr_schedule[it]
                if i == 0:  # only the first group is regularized
                    param_group["weight_decay"] = wd_schedule[it]
            student.backbone.calls = 0
            teacher_output = teacher(images[:2])  # only the 2 global views pass through the teacher
            student_output = student(images)
            out.setdefault("backbone_calls", student.backbone.calls)
            out.setdefault("weight", _np(student.head.last_layer.weight))  # recomputed by the forward pre-hook
            if "single" not in out:  # the third crop alone through backbone and head
                with torch.no_grad():
                    out["single"] = _np(student.head(student.backbone(images[2])))
            centers.append(_np(dino_loss.center))
            teacher_outs.append(_np(teacher_output))
            student_outs.append(_np(student_output))
            loss = dino_loss(student_output, teacher_output, epoch)
            optimizer.zero_grad()
            loss.backward()
            norms.append(d.clip_gradients(student, 0.5))
            out.setdefault("clipped", [p.grad.norm().item() for p in student.parameters() if p.grad is not None])
            d.cancel_gradients_last_layer(epoch, student, 1)
            last_grads.append(student.head.last_layer.weight_v.grad is None)
            before = {n: _np(p) for n, p in teacher.named_parameters()}
            optimizer.step()
            # EMA update for the teacher
            with torch.no_grad():
                m = momentum_schedule[it]  # momentum parameter
                for param_q, param_k in zip(student.parameters(), teacher.parameters()):
                    param_k.data.mul_(m).add_((1 - m) * param_q.detach().data)
            losses.append(loss.item())
    out["ema_check"] = max(np.abs(_np(pk) - (momentum_schedule[-1] * before[n] + (1 - momentum_schedule[-1]) * _np(pq))).max()
                           for (n, pk), pq in zip(teacher.named_parameters(), student.parameters()))
    out["losses"], out["centers"], out["teacher_outs"], out["student_outs"] = losses, centers, teacher_outs, student_outs
    out["norms"], out["last_grads"], out["final_center"] = norms, last_grads, _np(dino_loss.center)
    return out


def _softmax(z):
    z = z - z.max(-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(-1, keepdims=True)


def test_dino_head_loss_schedules_and_multicrop():
    out = dino_page(lucid)
    # weight_norm: weight = g * v / ||v|| row-wise, g filled with 1 and frozen
    assert out["g_requires_grad"] is False
    np.testing.assert_array_equal(out["weight_g"], np.ones((10, 1)))
    v = out["weight_v"]
    np.testing.assert_allclose(out["weight"], v / np.linalg.norm(v, axis=1, keepdims=True), rtol=1e-6)
    # cosine_scheduler closed form with a linear warm-up epoch
    lr = out["lr_schedule"]
    np.testing.assert_allclose(lr[:3], [0, 0.15, 0.3])
    np.testing.assert_allclose(lr[3:], [1e-3 + 0.5 * (0.3 - 1e-3) * (1 + math.cos(math.pi * i / 6)) for i in range(6)])
    np.testing.assert_allclose(out["momentum_schedule"], [1 - 0.05 * (1 + math.cos(math.pi * i / 9)) for i in range(9)])
    # MultiCropWrapper: two resolutions -> two backbone passes; crops in order
    assert out["backbone_calls"] == 2
    np.testing.assert_allclose(out["single"], out["student_outs"][0][4:6], rtol=1e-5, atol=1e-6)
    # DINO loss and center update recomputed in NumPy
    temps = [0.04, 0.07, 0.07]
    center = np.zeros((1, 10))
    for step, (s, t, c, loss) in enumerate(zip(out["student_outs"], out["teacher_outs"], out["centers"], out["losses"])):
        np.testing.assert_allclose(c, center, rtol=1e-5, atol=1e-7)
        q = _softmax((t - center) / temps[step // 3])
        ls = np.log(_softmax(s / 0.1))
        terms = [(-q[2 * iq:2 * iq + 2] * ls[2 * v:2 * v + 2]).sum(-1).mean() for iq in range(2) for v in range(6) if v != iq]
        assert len(terms) == 10
        np.testing.assert_allclose(loss, np.mean(terms), rtol=1e-5)
        center = center * 0.9 + t.sum(0, keepdims=True) / 4 * 0.1
    np.testing.assert_allclose(out["final_center"], center, rtol=1e-5, atol=1e-7)
    # clip_gradients returns per-parameter norms (before clipping); the last layer is frozen in epoch 0 only
    assert all(len(n) == 9 for n in out["norms"])  # weight_g has no gradient
    n0 = np.array(out["norms"][0])
    assert (n0 > 0.5).sum() >= 2 and (n0 < 0.5).sum() >= 2, n0
    np.testing.assert_allclose(out["clipped"], np.where(n0 > 0.5, n0 * 0.5 / (n0 + 1e-6), n0), rtol=1e-5)
    assert out["last_grads"] == [True] * 3 + [False] * 6
    assert out["ema_check"] < 1e-6
    assert out["losses"][-1] < out["losses"][0] - 0.1, out["losses"]


def test_dino_weight_norm_gradients_in_float64():
    d = dino_classes(lucid)
    head = d.DINOHead(3, 4, norm_last_layer=False, nlayers=1, bottleneck_dim=3).double()
    _load(lucid, head, 7)
    rng = np.random.default_rng(8)
    with lucid.no_grad():
        head.last_layer.weight_g.copy_(lucid.tensor(rng.uniform(0.5, 2, (4, 1))))
    x = lucid.tensor(rng.standard_normal((5, 3)))
    r = rng.standard_normal((5, 4))
    (head(x) * lucid.tensor(r)).sum().backward()
    g, v = _np(head.last_layer.weight_g), _np(head.last_layer.weight_v)
    h = _np(lucid.nn.functional.normalize(head.mlp(x), dim=-1))
    dW = r.T @ h
    nv = np.linalg.norm(v, axis=1, keepdims=True)
    np.testing.assert_allclose(_np(head.last_layer.weight_g.grad), (dW * v).sum(1, keepdims=True) / nv, rtol=1e-10)
    want_v = g / nv * (dW - (dW * v).sum(1, keepdims=True) * v / nv**2)
    np.testing.assert_allclose(_np(head.last_layer.weight_v.grad), want_v, rtol=1e-9, atol=1e-12)
    # finite differences through the whole head (mlp weight)
    prm = head.mlp.weight
    eps = 1e-6
    with lucid.no_grad():
        base = prm[1, 2].item()
        prm[1, 2] = base + eps
        lp = (head(x) * lucid.tensor(r)).sum().item()
        prm[1, 2] = base - eps
        lm = (head(x) * lucid.tensor(r)).sum().item()
        prm[1, 2] = base
    np.testing.assert_allclose(prm.grad[1, 2].item(), (lp - lm) / (2 * eps), rtol=1e-6)


def test_dino_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = dino_page(lucid), dino_page(torch)
    for k in a:
        if k in ("g_requires_grad", "last_grads", "backbone_calls"):
            assert a[k] == b[k], k
        elif k == "norms":
            np.testing.assert_allclose(np.array(a[k]), np.array(b[k]), rtol=1e-4)
        else:
            np.testing.assert_allclose(np.array(a[k], dtype=float), np.array(b[k], dtype=float), rtol=1e-4, atol=1e-6, err_msg=k)


# ---------------------------------------------------------------- MoCo v3
def moco_classes(torch):
    nn = torch.nn

    class MoCo(nn.Module):
        """
        Build a MoCo model with a base encoder, a momentum encoder, and two MLPs
        https://arxiv.org/abs/1911.05722
        """
        def __init__(self, base_encoder, dim=256, mlp_dim=4096, T=1.0):
            """
            dim: feature dimension (default: 256)
            mlp_dim: hidden dimension in MLPs (default: 4096)
            T: softmax temperature (default: 1.0)
            """
            super(MoCo, self).__init__()

            self.T = T

            # build encoders
            self.base_encoder = base_encoder(num_classes=mlp_dim)
            self.momentum_encoder = base_encoder(num_classes=mlp_dim)

            self._build_projector_and_predictor_mlps(dim, mlp_dim)

            for param_b, param_m in zip(self.base_encoder.parameters(), self.momentum_encoder.parameters()):
                param_m.data.copy_(param_b.data)  # initialize
                param_m.requires_grad = False  # not update by gradient

        def _build_mlp(self, num_layers, input_dim, mlp_dim, output_dim, last_bn=True):
            mlp = []
            for l in range(num_layers):
                dim1 = input_dim if l == 0 else mlp_dim
                dim2 = output_dim if l == num_layers - 1 else mlp_dim

                mlp.append(nn.Linear(dim1, dim2, bias=False))

                if l < num_layers - 1:
                    mlp.append(nn.BatchNorm1d(dim2))
                    mlp.append(nn.ReLU(inplace=True))
                elif last_bn:
                    # follow SimCLR's design: https://github.com/google-research/simclr/blob/master/model_util.py#L157
                    # for simplicity, we further removed gamma in BN
                    mlp.append(nn.BatchNorm1d(dim2, affine=False))

            return nn.Sequential(*mlp)

        def _build_projector_and_predictor_mlps(self, dim, mlp_dim):
            pass

        @torch.no_grad()
        def _update_momentum_encoder(self, m):
            """Momentum update of the momentum encoder"""
            for param_b, param_m in zip(self.base_encoder.parameters(), self.momentum_encoder.parameters()):
                param_m.data = param_m.data * m + param_b.data * (1. - m)

        def contrastive_loss(self, q, k):
            # normalize
            q = nn.functional.normalize(q, dim=1)
            k = nn.functional.normalize(k, dim=1)
            # gather all targets
            k = concat_all_gather(k)
            # Einstein sum is more intuitive
            logits = torch.einsum('nc,mc->nm', [q, k]) / self.T
            N = logits.shape[0]  # batch size per GPU
            labels = (torch.arange(N, dtype=torch.long) + N * _get_rank()).to(logits.device)
            return nn.CrossEntropyLoss()(logits, labels) * (2 * self.T)

        def forward(self, x1, x2, m):
            """
            Input:
                x1: first views of images
                x2: second views of images
                m: moco momentum
            Output:
                loss
            """

            # compute features
            q1 = self.predictor(self.base_encoder(x1))
            q2 = self.predictor(self.base_encoder(x2))

            with torch.no_grad():  # no gradient
                self._update_momentum_encoder(m)  # update the momentum encoder

                # compute momentum features as targets
                k1 = self.momentum_encoder(x1)
                k2 = self.momentum_encoder(x2)

            return self.contrastive_loss(q1, k2) + self.contrastive_loss(q2, k1)

    class MoCo_ResNet(MoCo):
        def _build_projector_and_predictor_mlps(self, dim, mlp_dim):
            hidden_dim = self.base_encoder.fc.weight.shape[1]
            del self.base_encoder.fc, self.momentum_encoder.fc  # remove original fc layer

            # projectors
            self.base_encoder.fc = self._build_mlp(2, hidden_dim, mlp_dim, dim)
            self.momentum_encoder.fc = self._build_mlp(2, hidden_dim, mlp_dim, dim)

            # predictor
            self.predictor = self._build_mlp(2, dim, mlp_dim, dim, False)

    def _get_rank():
        # single process without a process group: rank 0
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            return torch.distributed.get_rank()
        return 0

    # utils
    @torch.no_grad()
    def concat_all_gather(tensor):
        """
        Performs all_gather operation on the provided tensors.
        *** Warning ***: torch.distributed.all_gather has no gradient.
        """
        if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
            return tensor  # single-process equivalent: the world is this process
        tensors_gather = [torch.ones_like(tensor)
            for _ in range(torch.distributed.get_world_size())]
        torch.distributed.all_gather(tensors_gather, tensor, async_op=False)

        output = torch.cat(tensors_gather, dim=0)
        return output

    class LARS(torch.optim.Optimizer):
        """
        LARS optimizer, no rate scaling or weight decay for normalization layers and biases.
        """
        def __init__(self, params, lr=0, weight_decay=0, momentum=0.9, nesterov=False, trust_coefficient=0.001):
            defaults = dict(lr=lr, weight_decay=weight_decay,
                            momentum=momentum, nesterov=nesterov,
                            trust_coefficient=trust_coefficient)
            super().__init__(params, defaults)

        @torch.no_grad()
        def step(self):
            for g in self.param_groups:
                for p in g['params']:
                    dp = p.grad

                    if dp is None:
                        continue

                    if p.ndim > 1:  # if not normalization gamma/beta or bias
                        dp = dp.add(p, alpha=g['weight_decay'])
                        param_norm = torch.norm(p)
                        update_norm = torch.norm(dp)
                        one = torch.ones_like(param_norm)
                        q = torch.where(param_norm > 0.,
                                        torch.where(update_norm > 0,
                                        (g['trust_coefficient'] * param_norm / update_norm), one),
                                        one)
                        dp = dp.mul(q)

                    param_state = self.state[p]
                    if 'mu' not in param_state:
                        param_state['mu'] = torch.zeros_like(p)
                    mu = param_state['mu']
                    mu.mul_(g['momentum']).add_(dp)
                    if g['nesterov']:
                        dp = dp.add(mu, alpha=g['momentum'])
                    else:
                        dp = mu
                    p.add_(dp, alpha=-g['lr'])

    class TinyResNet(nn.Module):  # stands in for torchvision's resnet: keeps an ``fc``
        def __init__(self, num_classes=1000):
            super().__init__()
            self.body = nn.Linear(6, 5)
            self.fc = nn.Linear(5, num_classes)

        def forward(self, x):
            return self.fc(torch.relu(self.body(x)))

    return MoCo_ResNet, LARS, TinyResNet


def mocov3_vits_pos_embed(torch, embed_dim=8, grid=3):
    """moco-v3 ``vits.py``: ``VisionTransformerMoCo.build_2d_sincos_position_embedding`` in torch ops."""
    import warnings

    nn = torch.nn

    class VisionTransformerMoCo(nn.Module):  # only what the method reads
        def __init__(self):
            super().__init__()
            self.patch_embed = SimpleNamespace(grid_size=(grid, grid))
            self.embed_dim = embed_dim
            self.num_tokens = 1

        def build_2d_sincos_position_embedding(self, temperature=10000.):
            h, w = self.patch_embed.grid_size
            grid_w = torch.arange(w, dtype=torch.float32)
            grid_h = torch.arange(h, dtype=torch.float32)
            grid_w, grid_h = torch.meshgrid(grid_w, grid_h)
            assert self.embed_dim % 4 == 0, 'Embed dimension must be divisible by 4 for 2D sin-cos position embedding'
            pos_dim = self.embed_dim // 4
            omega = torch.arange(pos_dim, dtype=torch.float32) / pos_dim
            omega = 1. / (temperature**omega)
            out_w = torch.einsum('m,d->md', [grid_w.flatten(), omega])
            out_h = torch.einsum('m,d->md', [grid_h.flatten(), omega])
            pos_emb = torch.cat([torch.sin(out_w), torch.cos(out_w), torch.sin(out_h), torch.cos(out_h)], dim=1)[None, :, :]

            assert self.num_tokens == 1, 'Assuming one and only one token, [cls]'
            pe_token = torch.zeros([1, 1, self.embed_dim], dtype=torch.float32)
            self.pos_embed = nn.Parameter(torch.cat([pe_token, pos_emb], dim=1))
            self.pos_embed.requires_grad = False

    vit = VisionTransformerMoCo()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        vit.build_2d_sincos_position_embedding()
    return _np(vit.pos_embed), vit.pos_embed.requires_grad, any("indexing" in str(w.message) for w in caught)


def test_mocov3_sincos_pos_embed_is_maes_transposed():
    pe, requires_grad, warned = mocov3_vits_pos_embed(lucid)
    assert not requires_grad and warned  # meshgrid without indexing= warns, as PyTorch's
    mae = get_2d_sincos_pos_embed(8, 3, cls_token=True)
    # moco-v3's meshgrid(grid_w, grid_h) is 'ij': token k has w = k // 3; MAE's token r * 3 + c has w = c
    perm = [0] + [1 + (k % 3) * 3 + k // 3 for k in range(9)]
    np.testing.assert_allclose(pe[0], mae[perm], atol=1e-6)


def test_mocov3_sincos_pos_embed_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = mocov3_vits_pos_embed(lucid), mocov3_vits_pos_embed(torch)
    np.testing.assert_allclose(a[0], b[0], rtol=1e-6, atol=1e-7)
    # PyTorch's meshgrid warning is TORCH_WARN_ONCE (once per process, so absent when an earlier
    # test in this worker called it); Lucid's warning is checked in the test above
    assert a[1] == b[1]


def moco_page(torch, steps=6):
    out = {}
    MoCo_ResNet, LARS, TinyResNet = moco_classes(torch)
    model = MoCo_ResNet(TinyResNet, dim=4, mlp_dim=8, T=0.2)
    _load(torch, model, 11, scale=0.8)
    with torch.no_grad():  # the momentum encoder starts as a copy
        for param_b, param_m in zip(model.base_encoder.parameters(), model.momentum_encoder.parameters()):
            param_m.data.copy_(param_b.data)
    out["names"] = [n for n, _ in model.named_parameters()]
    out["momentum_requires_grad"] = [p.requires_grad for p in model.momentum_encoder.parameters()]
    rng = np.random.default_rng(12)
    x1 = torch.tensor(rng.standard_normal((6, 6)), dtype=torch.float32)
    x2 = x1 + 0.1 * torch.tensor(rng.standard_normal((6, 6)), dtype=torch.float32)
    q = torch.tensor(rng.standard_normal((6, 4)), dtype=torch.float32)
    k = torch.tensor(rng.standard_normal((6, 4)), dtype=torch.float32)
    out["q"], out["k"], out["ctr"] = _np(q), _np(k), model.contrastive_loss(q, k).item()
    optimizer = LARS(model.parameters(), lr=0.5, weight_decay=1e-2, momentum=0.9, trust_coefficient=0.05)
    losses, steps_log = [], []
    for step in range(steps):
        prev_m = [_np(p) for p in model.momentum_encoder.parameters()]
        prev_b = [_np(p) for p in model.base_encoder.parameters()]
        loss = model(x1, x2, 0.9)
        m_after = [_np(p) for p in model.momentum_encoder.parameters()]
        out.setdefault("momentum_err", max(np.abs(a - (0.9 * pm + 0.1 * pb)).max() for a, pm, pb in zip(m_after, prev_m, prev_b)))
        optimizer.zero_grad()
        loss.backward()
        if step == 0:
            p = model.base_encoder.body.weight
            b = model.base_encoder.body.bias
            steps_log = [_np(p), _np(p.grad), _np(b), _np(b.grad)]
        optimizer.step()
        if step == 0:
            steps_log += [_np(p), _np(b)]
        losses.append(loss.item())
    out["losses"], out["lars0"] = losses, steps_log
    out["bn_last"] = (model.base_encoder.fc[-1].weight is None, model.base_encoder.fc[-1].affine, len(model.predictor))
    return out


def test_moco_v3_contrastive_loss_momentum_and_lars():
    out = moco_page(lucid)
    # MoCo_ResNet: fc = Linear, BN, ReLU, Linear, BN(affine=False); predictor without the last BN
    assert out["bn_last"] == (True, False, 4)
    assert "base_encoder.fc.4.weight" not in out["names"] and "momentum_encoder.fc.1.weight" in out["names"]
    assert out["momentum_requires_grad"] == [False] * 6
    # InfoNCE with the diagonal as positives, times 2T
    q, k = out["q"], out["k"]
    qn = q / np.linalg.norm(q, axis=1, keepdims=True)
    kn = k / np.linalg.norm(k, axis=1, keepdims=True)
    logits = qn @ kn.T / 0.2
    ce = -(np.log(_softmax(logits))[np.arange(6), np.arange(6)]).mean()
    np.testing.assert_allclose(out["ctr"], ce * 0.4, rtol=1e-5)
    assert out["momentum_err"] < 1e-6
    # LARS first step: matrices scaled by the trust ratio, vectors plain momentum SGD without decay
    p0, g0, b0, gb0, p1, b1 = out["lars0"]
    dp = g0 + 1e-2 * p0
    q_ = 0.05 * np.linalg.norm(p0) / np.linalg.norm(dp)
    np.testing.assert_allclose(p1, p0 - 0.5 * q_ * dp, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(b1, b0 - 0.5 * gb0, rtol=1e-5, atol=1e-7)
    assert out["losses"][-1] < out["losses"][0] - 0.3, out["losses"]


@pytest.mark.parametrize("nesterov", [False, True])
def test_lars_recurrence_over_steps(nesterov):
    _, LARS, _ = moco_classes(lucid)
    w = lucid.nn.Parameter(lucid.tensor([[1.0, -2.0], [0.5, 3.0]], dtype=lucid.float64))
    b = lucid.nn.Parameter(lucid.tensor([0.3, -0.1], dtype=lucid.float64))
    z = lucid.nn.Parameter(lucid.zeros(2, 2, dtype=lucid.float64))  # zero norm: trust ratio 1
    opt = LARS([w, b, z], lr=0.1, weight_decay=0.1, momentum=0.8, nesterov=nesterov, trust_coefficient=0.02)
    W, B, Z = _np(w), _np(b), _np(z)
    mw, mb, mz = np.zeros_like(W), np.zeros_like(B), np.zeros_like(Z)
    for t in range(4):
        opt.zero_grad()
        ((w ** 2).sum() * 0.5 + (b ** 3).sum() + (z - 1).pow(2).sum()).backward()
        opt.step()
        gw, gb, gz = W + 0.1 * W, 3 * B ** 2, 2 * (Z - 1) + 0.1 * Z
        qw = 0.02 * np.linalg.norm(W) / np.linalg.norm(gw)
        qz = 1.0 if np.linalg.norm(Z) == 0 else 0.02 * np.linalg.norm(Z) / np.linalg.norm(gz)
        dw, db, dz = qw * gw, gb, qz * gz
        mw, mb, mz = 0.8 * mw + dw, 0.8 * mb + db, 0.8 * mz + dz
        if nesterov:
            W, B, Z = W - 0.1 * (dw + 0.8 * mw), B - 0.1 * (db + 0.8 * mb), Z - 0.1 * (dz + 0.8 * mz)
        else:
            W, B, Z = W - 0.1 * mw, B - 0.1 * mb, Z - 0.1 * mz
        np.testing.assert_allclose(_np(w), W, rtol=1e-12)
        np.testing.assert_allclose(_np(b), B, rtol=1e-12)
        np.testing.assert_allclose(_np(z), Z, rtol=1e-12)


def test_moco_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = moco_page(lucid), moco_page(torch)
    for k in a:
        if k in ("names", "momentum_requires_grad", "bn_last"):
            assert a[k] == b[k], k
        elif k == "lars0":
            for x, y in zip(a[k], b[k]):
                np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-6)
        else:
            np.testing.assert_allclose(np.array(a[k]), np.array(b[k]), rtol=1e-4, atol=1e-6, err_msg=k)


# ---------------------------------------------------------------- Barlow Twins
def barlow_classes(torch):
    nn = torch.nn
    optim = torch.optim

    def off_diagonal(x):
        # return a flattened view of the off-diagonal elements of a square matrix
        n, m = x.shape
        assert n == m
        return x.flatten()[:-1].view(n - 1, n + 1)[:, 1:].flatten()

    class BarlowTwins(nn.Module):
        def __init__(self, args):
            super().__init__()
            self.args = args
            self.backbone = nn.Sequential(nn.Linear(6, 5), nn.ReLU())  # stands in for resnet50
            self.backbone.fc = nn.Identity()

            # projector
            sizes = [5] + list(map(int, args.projector.split('-')))
            layers = []
            for i in range(len(sizes) - 2):
                layers.append(nn.Linear(sizes[i], sizes[i + 1], bias=False))
                layers.append(nn.BatchNorm1d(sizes[i + 1]))
                layers.append(nn.ReLU(inplace=True))
            layers.append(nn.Linear(sizes[-2], sizes[-1], bias=False))
            self.projector = nn.Sequential(*layers)

            # normalization layer for the representations z1 and z2
            self.bn = nn.BatchNorm1d(sizes[-1], affine=False)

        def forward(self, y1, y2):
            z1 = self.projector(self.backbone(y1))
            z2 = self.projector(self.backbone(y2))

            # empirical cross-correlation matrix
            c = self.bn(z1).T @ self.bn(z2)

            # sum the cross-correlation matrix between all gpus
            c.div_(self.args.batch_size)
            if torch.distributed.is_available() and torch.distributed.is_initialized():
                torch.distributed.all_reduce(c)  # single process: the identity

            on_diag = torch.diagonal(c).add_(-1).pow_(2).sum()
            off_diag = off_diagonal(c).pow_(2).sum()
            loss = on_diag + self.args.lambd * off_diag
            return loss

    class LARS(optim.Optimizer):
        def __init__(self, params, lr, weight_decay=0, momentum=0.9, eta=0.001,
                     weight_decay_filter=False, lars_adaptation_filter=False):
            defaults = dict(lr=lr, weight_decay=weight_decay, momentum=momentum,
                            eta=eta, weight_decay_filter=weight_decay_filter,
                            lars_adaptation_filter=lars_adaptation_filter)
            super().__init__(params, defaults)

        def exclude_bias_and_norm(self, p):
            return p.ndim == 1

        @torch.no_grad()
        def step(self):
            for g in self.param_groups:
                for p in g['params']:
                    dp = p.grad

                    if dp is None:
                        continue

                    if not g['weight_decay_filter'] or not self.exclude_bias_and_norm(p):
                        dp = dp.add(p, alpha=g['weight_decay'])

                    if not g['lars_adaptation_filter'] or not self.exclude_bias_and_norm(p):
                        param_norm = torch.norm(p)
                        update_norm = torch.norm(dp)
                        one = torch.ones_like(param_norm)
                        q = torch.where(param_norm > 0.,
                                        torch.where(update_norm > 0,
                                                    (g['eta'] * param_norm / update_norm), one), one)
                        dp = dp.mul(q)

                    param_state = self.state[p]
                    if 'mu' not in param_state:
                        param_state['mu'] = torch.zeros_like(p)
                    mu = param_state['mu']
                    mu.mul_(g['momentum']).add_(dp)

                    p.add_(mu, alpha=-g['lr'])

    return off_diagonal, BarlowTwins, LARS


def barlow_page(torch, steps=6):
    out = {}
    off_diagonal, BarlowTwins, LARS = barlow_classes(torch)
    out["offdiag"] = _np(off_diagonal(torch.arange(16.).view(4, 4)))
    args = SimpleNamespace(projector="6-4", batch_size=8, lambd=0.05)
    model = BarlowTwins(args)
    _load(torch, model, 21, scale=0.8)
    rng = np.random.default_rng(22)
    y1 = torch.tensor(rng.standard_normal((8, 6)), dtype=torch.float32)
    y2 = y1 + 0.3 * torch.tensor(rng.standard_normal((8, 6)), dtype=torch.float32)
    with torch.no_grad():
        z1, z2 = model.projector(model.backbone(y1)), model.projector(model.backbone(y2))
    out["z1"], out["z2"] = _np(z1), _np(z2)
    param_weights = []
    param_biases = []
    for param in model.parameters():
        if param.ndim == 1:
            param_biases.append(param)
        else:
            param_weights.append(param)
    parameters = [{'params': param_weights}, {'params': param_biases}]
    optimizer = LARS(parameters, lr=0, weight_decay=1e-2,
                     weight_decay_filter=True,
                     lars_adaptation_filter=True)
    optimizer.param_groups[0]['lr'] = 0.5
    optimizer.param_groups[1]['lr'] = 0.05
    losses = []
    for step in range(steps):
        loss = model(y1, y2)
        optimizer.zero_grad()
        loss.backward()
        if step == 0:
            b = model.backbone[0].bias
            w = model.backbone[0].weight
            snap = [_np(w), _np(w.grad), _np(b), _np(b.grad)]
        optimizer.step()
        if step == 0:
            snap += [_np(w), _np(b)]
        losses.append(loss.item())
    out["losses"], out["lars0"] = losses, snap
    return out


def test_barlow_twins_loss_off_diagonal_and_lars():
    out = barlow_page(lucid)
    a = np.arange(16.).reshape(4, 4)
    np.testing.assert_array_equal(out["offdiag"], a[~np.eye(4, dtype=bool)])
    z1, z2 = out["z1"], out["z2"]
    n1 = (z1 - z1.mean(0)) / np.sqrt(z1.var(0) + 1e-5)
    n2 = (z2 - z2.mean(0)) / np.sqrt(z2.var(0) + 1e-5)
    c = n1.T @ n2 / 8
    want = ((np.diag(c) - 1) ** 2).sum() + 0.05 * (c[~np.eye(4, dtype=bool)] ** 2).sum()
    np.testing.assert_allclose(out["losses"][0], want, rtol=1e-5)
    w0, gw0, b0, gb0, w1, b1 = out["lars0"]
    dp = gw0 + 1e-2 * w0
    np.testing.assert_allclose(w1, w0 - 0.5 * (0.001 * np.linalg.norm(w0) / np.linalg.norm(dp)) * dp, rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(b1, b0 - 0.05 * gb0, rtol=1e-5, atol=1e-8)  # bias: no decay, no adaptation
    assert out["losses"][-1] < out["losses"][0] - 0.02, out["losses"]


def test_barlow_twins_float64_gradient_through_inplace_diagonal():
    off_diagonal, BarlowTwins, _ = barlow_classes(lucid)
    model = BarlowTwins(SimpleNamespace(projector="6-4", batch_size=8, lambd=0.05)).double()
    _load(lucid, model, 23, scale=0.8)
    rng = np.random.default_rng(24)
    y1 = lucid.tensor(rng.standard_normal((8, 6)))
    y2 = lucid.tensor(rng.standard_normal((8, 6)))
    model(y1, y2).backward()
    prm = model.projector[0].weight
    for idx in ((0, 1), (3, 4), (5, 2)):
        eps = 1e-6
        with lucid.no_grad():
            base = prm[idx].item()
            prm[idx] = base + eps
            lp = model(y1, y2).item()
            prm[idx] = base - eps
            lm = model(y1, y2).item()
            prm[idx] = base
        np.testing.assert_allclose(prm.grad[idx].item(), (lp - lm) / (2 * eps), rtol=1e-5, atol=1e-8)


def test_barlow_twins_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = barlow_page(lucid), barlow_page(torch)
    for k in a:
        if k == "lars0":
            for x, y in zip(a[k], b[k]):
                np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-6)
        else:
            np.testing.assert_allclose(np.array(a[k]), np.array(b[k]), rtol=1e-4, atol=1e-6, err_msg=k)


def test_varargs_shape_methods_take_pytorchs_keywords():
    # MAE's ``imgs.reshape(shape=(...))`` raised TypeError; the other varargs-shape methods took
    # no keyword spelling either (PyTorch: reshape(shape=), view(size=/dtype=), permute(dims=),
    # expand(size=), repeat(repeats=), new_zeros/new_ones/new_empty(size=)).
    a = np.arange(6.0)
    x = lucid.tensor(a)
    np.testing.assert_array_equal(x.reshape(shape=(2, 3)).cpu().numpy(), a.reshape(2, 3))
    np.testing.assert_array_equal(lucid.reshape(x, shape=[3, 2]).cpu().numpy(), a.reshape(3, 2))
    np.testing.assert_array_equal(x.view(size=(3, -1)).cpu().numpy(), a.reshape(3, 2))
    assert x.view(dtype=lucid.int64).dtype == lucid.int64
    np.testing.assert_array_equal(x.view(2, 3).permute(dims=(1, 0)).cpu().numpy(), a.reshape(2, 3).T)
    np.testing.assert_array_equal(lucid.permute(x.view(2, 3), dims=(1, 0)).cpu().numpy(), a.reshape(2, 3).T)
    np.testing.assert_array_equal(x.view(1, 6).expand(size=(2, -1)).cpu().numpy(), np.tile(a, (2, 1)))
    np.testing.assert_array_equal(x.repeat(repeats=(2, 2)).cpu().numpy(), np.tile(a, (2, 2)))
    z = x.new_zeros(size=(2, 2))
    assert tuple(z.shape) == (2, 2) and z.dtype == x.dtype and tuple(x.new_ones(size=[3]).shape) == (3,)
    assert tuple(x.new_empty(size=(1, 2)).shape) == (1, 2)
    for call, msg in ((lambda: x.reshape(2, shape=(3,)), "reshape() got an unexpected keyword argument 'shape'"),
                      (lambda: x.view(size=(6,), dim=0), "view() got an unexpected keyword argument 'dim'"),
                      (lambda: x.permute(dim=(0,)), "permute() got an unexpected keyword argument 'dim'"),
                      (lambda: x.new_zeros(2, size=3), "new_zeros() got an unexpected keyword argument 'size'")):
        with pytest.raises(TypeError) as info:
            call()
        assert msg in str(info.value)
