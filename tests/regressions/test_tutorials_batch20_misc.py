"""Three small repositories' self-contained pieces run on Lucid (``import lucid as torch``):

- rosinality/vq-vae-2-pytorch ``vqvae.py``: ``Quantize`` (the Sonnet EMA codebook: ``one_hot`` of the
  nearest code, ``cluster_size``/``embed_avg`` buffers updated through ``.data.mul_().add_(alpha=)``,
  Laplace smoothing of the counts, ``embed.data.copy_``; the straight-through estimator
  ``input + (quantize - input).detach()``), ``ResBlock``, ``Encoder``/``Decoder`` and ``VQVAE``
  (``forward``/``encode``/``decode``/``decode_code``) at a tiny size. ``dist_fn.all_reduce`` is the
  single-process identity.
- davidtvs/pytorch-lr-finder ``torch_lr_finder/lr_finder.py``: ``LRFinder`` (``range_test`` with its
  own ``ExponentialLR``/``LinearLR`` ``_LRScheduler`` subclasses, the loss smoothing and divergence
  stop, ``StateCacher`` in memory through ``copy.deepcopy`` of the state dicts, ``reset``), the
  ``DataLoaderIter``/``TrainDataLoaderIter`` wrappers and ``plot``'s steepest-gradient suggestion
  (``np.gradient(...).argmin()``) without the figure. ``tqdm`` is ``range``; no AMP backend.
- mosaicml/composer ``composer/algorithms``: ``blurpool/blurpool_layers.py`` (``blur_2d``,
  ``blurmax_pool2d``, ``BlurMaxPool2d``, ``BlurConv2d.from_conv2d``, ``BlurPool2d``),
  ``mixup/mixup.py`` ``mixup_batch``, ``label_smoothing`` ``smooth_labels`` (with
  ``ensure_targets_one_hot`` cut to its class-index case), ``ema/ema.py`` ``compute_ema`` (parameters
  and buffers) and ``_copy_params``, and ``sam/sam.py`` ``SAMOptimizer`` (``first_step``/``second_step``
  inside ``step(closure)``, ``torch.enable_grad()(closure)``, ``scale.to(p)``),
  ``cutmix/cutmix.py`` (``cutmix_batch``, ``_rand_bbox`` with NumPy integer box corners used as slice
  bounds, ``_adjust_lambda``), ``squeeze_excite`` (``SqueezeExcite2d``, ``SqueezeExciteConv2d.from_conv2d``;
  ``module_surgery`` left out), ``layer_freezing`` (``freeze_layers``: parameters filtered out of
  ``param_groups`` and ``requires_grad = False``), ``stochastic_depth/stochastic_layers.py``
  (``block_stochastic_forward``/``sample_stochastic_forward`` bound onto torchvision's ``Bottleneck``,
  written out here, through ``__get__``; ``_sample_drop``; ``BlockStochasticModule`` with a
  ``Sequential`` for the traced ``GraphModule``) and ``channels_last`` (``model.to(memory_format=)``).

Checks without PyTorch: the EMA codebook update, distances and commitment loss recomputed in NumPy,
the straight-through gradient equal to the upstream gradient, the learning-rate schedules and the
whole momentum-SGD range test recomputed in float64 NumPy (losses, smoothing, early stop), ``reset``
restoring the exact parameters and a repeated test reproducing the history, blur filters against a
NumPy cross-correlation, mixup/label-smoothing targets in closed form, EMA weights in closed form and
SAM's two steps recomputed in float64, cutmix boxes and areas from NumPy's own draws, the SE block in
NumPy with a float64 finite difference, the freezing schedule in closed form, the stochastic-depth
scalings, channels-last strides. The ``*_torch_parity`` tests run the same text on PyTorch with the
same weights.

Fixed on the way (``lucid/optim/optimizer.py``): ``add_param_group`` copied the caller's group dict, so
``SAMOptimizer(base.param_groups)`` held copies and an lr set through the wrapper never reached the base
optimizer (PyTorch keeps the caller's dicts); ``load_state_dict`` merged the saved group into the live
one, keeping a scheduler's ``initial_lr`` added after the save, so ``LRFinder.reset`` followed by a
second ``range_test`` raised "Optimizer already has a scheduler attached to it".
"""
import copy
import itertools
from types import SimpleNamespace

import numpy as np
import pytest

import lucid
import lucid.nn  # noqa: F401
import lucid.nn.functional  # noqa: F401
import lucid.optim.lr_scheduler  # noqa: F401
import lucid.utils.data  # noqa: F401


def _np(t):
    return np.asarray(t.detach().cpu().numpy())


def _load(torch, module, arrays):
    """Load a dict of NumPy arrays into ``module`` (same weights under both frameworks)."""
    module.load_state_dict({k: torch.tensor(v) for k, v in arrays.items()})


def _random_state(module, seed):
    rng = np.random.default_rng(seed)
    out = {}
    for k, v in module.state_dict().items():
        shape = tuple(v.shape)
        out[k] = (rng.standard_normal(shape) * 0.4).astype(np.float32)
    return out


# --------------------------------------------------------------------------- vq-vae-2

def vqvae_page(torch):
    nn = torch.nn
    F = torch.nn.functional

    class dist_fn:  # distributed.py on one process
        @staticmethod
        def all_reduce(tensor):
            return tensor

    class Quantize(nn.Module):
        def __init__(self, dim, n_embed, decay=0.99, eps=1e-5):
            super().__init__()

            self.dim = dim
            self.n_embed = n_embed
            self.decay = decay
            self.eps = eps

            embed = torch.randn(dim, n_embed)
            self.register_buffer("embed", embed)
            self.register_buffer("cluster_size", torch.ones(n_embed))
            self.register_buffer("embed_avg", embed.clone())

        def forward(self, input):
            flatten = input.reshape(-1, self.dim)
            dist = (
                flatten.pow(2).sum(1, keepdim=True)
                - 2 * flatten @ self.embed
                + self.embed.pow(2).sum(0, keepdim=True)
            )
            _, embed_ind = (-dist).max(1)
            embed_onehot = F.one_hot(embed_ind, self.n_embed).type(flatten.dtype)
            embed_ind = embed_ind.view(*input.shape[:-1])
            quantize = self.embed_code(embed_ind)

            if self.training:
                embed_onehot_sum = embed_onehot.sum(0)
                embed_sum = flatten.transpose(0, 1) @ embed_onehot

                dist_fn.all_reduce(embed_onehot_sum)
                dist_fn.all_reduce(embed_sum)

                self.cluster_size.data.mul_(self.decay).add_(
                    embed_onehot_sum, alpha=1 - self.decay
                )
                self.embed_avg.data.mul_(self.decay).add_(embed_sum, alpha=1 - self.decay)
                n = self.cluster_size.sum()
                cluster_size = (
                    (self.cluster_size + self.eps) / (n + self.n_embed * self.eps) * n
                )
                embed_normalized = self.embed_avg / cluster_size.unsqueeze(0)
                self.embed.data.copy_(embed_normalized)

            diff = (quantize.detach() - input).pow(2).mean()
            quantize = input + (quantize - input).detach()

            return quantize, diff, embed_ind

        def embed_code(self, embed_id):
            return F.embedding(embed_id, self.embed.transpose(0, 1))

    class ResBlock(nn.Module):
        def __init__(self, in_channel, channel):
            super().__init__()

            self.conv = nn.Sequential(
                nn.ReLU(),
                nn.Conv2d(in_channel, channel, 3, padding=1),
                nn.ReLU(inplace=True),
                nn.Conv2d(channel, in_channel, 1),
            )

        def forward(self, input):
            out = self.conv(input)
            out += input

            return out

    class Encoder(nn.Module):
        def __init__(self, in_channel, channel, n_res_block, n_res_channel, stride):
            super().__init__()

            if stride == 4:
                blocks = [
                    nn.Conv2d(in_channel, channel // 2, 4, stride=2, padding=1),
                    nn.ReLU(inplace=True),
                    nn.Conv2d(channel // 2, channel, 4, stride=2, padding=1),
                    nn.ReLU(inplace=True),
                    nn.Conv2d(channel, channel, 3, padding=1),
                ]

            elif stride == 2:
                blocks = [
                    nn.Conv2d(in_channel, channel // 2, 4, stride=2, padding=1),
                    nn.ReLU(inplace=True),
                    nn.Conv2d(channel // 2, channel, 3, padding=1),
                ]

            for i in range(n_res_block):
                blocks.append(ResBlock(channel, n_res_channel))

            blocks.append(nn.ReLU(inplace=True))

            self.blocks = nn.Sequential(*blocks)

        def forward(self, input):
            return self.blocks(input)

    class Decoder(nn.Module):
        def __init__(
            self, in_channel, out_channel, channel, n_res_block, n_res_channel, stride
        ):
            super().__init__()

            blocks = [nn.Conv2d(in_channel, channel, 3, padding=1)]

            for i in range(n_res_block):
                blocks.append(ResBlock(channel, n_res_channel))

            blocks.append(nn.ReLU(inplace=True))

            if stride == 4:
                blocks.extend(
                    [
                        nn.ConvTranspose2d(channel, channel // 2, 4, stride=2, padding=1),
                        nn.ReLU(inplace=True),
                        nn.ConvTranspose2d(
                            channel // 2, out_channel, 4, stride=2, padding=1
                        ),
                    ]
                )

            elif stride == 2:
                blocks.append(
                    nn.ConvTranspose2d(channel, out_channel, 4, stride=2, padding=1)
                )

            self.blocks = nn.Sequential(*blocks)

        def forward(self, input):
            return self.blocks(input)

    class VQVAE(nn.Module):
        def __init__(
            self,
            in_channel=3,
            channel=128,
            n_res_block=2,
            n_res_channel=32,
            embed_dim=64,
            n_embed=512,
            decay=0.99,
        ):
            super().__init__()

            self.enc_b = Encoder(in_channel, channel, n_res_block, n_res_channel, stride=4)
            self.enc_t = Encoder(channel, channel, n_res_block, n_res_channel, stride=2)
            self.quantize_conv_t = nn.Conv2d(channel, embed_dim, 1)
            self.quantize_t = Quantize(embed_dim, n_embed)
            self.dec_t = Decoder(
                embed_dim, embed_dim, channel, n_res_block, n_res_channel, stride=2
            )
            self.quantize_conv_b = nn.Conv2d(embed_dim + channel, embed_dim, 1)
            self.quantize_b = Quantize(embed_dim, n_embed)
            self.upsample_t = nn.ConvTranspose2d(
                embed_dim, embed_dim, 4, stride=2, padding=1
            )
            self.dec = Decoder(
                embed_dim + embed_dim,
                in_channel,
                channel,
                n_res_block,
                n_res_channel,
                stride=4,
            )

        def forward(self, input):
            quant_t, quant_b, diff, _, _ = self.encode(input)
            dec = self.decode(quant_t, quant_b)

            return dec, diff

        def encode(self, input):
            enc_b = self.enc_b(input)
            enc_t = self.enc_t(enc_b)

            quant_t = self.quantize_conv_t(enc_t).permute(0, 2, 3, 1)
            quant_t, diff_t, id_t = self.quantize_t(quant_t)
            quant_t = quant_t.permute(0, 3, 1, 2)
            diff_t = diff_t.unsqueeze(0)

            dec_t = self.dec_t(quant_t)
            enc_b = torch.cat([dec_t, enc_b], 1)

            quant_b = self.quantize_conv_b(enc_b).permute(0, 2, 3, 1)
            quant_b, diff_b, id_b = self.quantize_b(quant_b)
            quant_b = quant_b.permute(0, 3, 1, 2)
            diff_b = diff_b.unsqueeze(0)

            return quant_t, quant_b, diff_t + diff_b, id_t, id_b

        def decode(self, quant_t, quant_b):
            upsample_t = self.upsample_t(quant_t)
            quant = torch.cat([upsample_t, quant_b], 1)
            dec = self.dec(quant)

            return dec

        def decode_code(self, code_t, code_b):
            quant_t = self.quantize_t.embed_code(code_t)
            quant_t = quant_t.permute(0, 3, 1, 2)
            quant_b = self.quantize_b.embed_code(code_b)
            quant_b = quant_b.permute(0, 3, 1, 2)

            dec = self.decode(quant_t, quant_b)

            return dec

    return SimpleNamespace(Quantize=Quantize, ResBlock=ResBlock, Encoder=Encoder, Decoder=Decoder, VQVAE=VQVAE)


_Q_EMBED = np.random.default_rng(3).standard_normal((3, 5)).astype(np.float32)
_Q_INPUT = np.random.default_rng(4).standard_normal((2, 4, 3)).astype(np.float32)
_Q_UP = np.random.default_rng(5).standard_normal((2, 4, 3)).astype(np.float32)
_VQ_X = np.random.default_rng(6).standard_normal((1, 3, 8, 8)).astype(np.float32)


def _np_quantize(x, embed, cluster, avg, decay=0.99, eps=1e-5, training=True):
    flat = x.reshape(-1, embed.shape[0]).astype(np.float64)
    e = embed.astype(np.float64)
    dist = (flat ** 2).sum(1, keepdims=True) - 2 * flat @ e + (e ** 2).sum(0, keepdims=True)
    ind = dist.argmin(1)
    q = e.T[ind].reshape(x.shape)
    if training:
        onehot = np.eye(e.shape[1])[ind]
        cluster = cluster * decay + (1 - decay) * onehot.sum(0)
        avg = avg * decay + (1 - decay) * flat.T @ onehot
        n = cluster.sum()
        cs = (cluster + eps) / (n + e.shape[1] * eps) * n
        embed = avg / cs[None, :]
    return q, ((q - x) ** 2).mean(), ind.reshape(x.shape[:-1]), cluster, avg, embed


def _quantize_run(torch):
    p = vqvae_page(torch)
    torch.manual_seed(0)
    qz = p.Quantize(3, 5)
    _load(torch, qz, {"embed": _Q_EMBED, "cluster_size": np.ones(5, np.float32), "embed_avg": _Q_EMBED})
    x = torch.tensor(_Q_INPUT, requires_grad=True)
    quantize, diff, ind = qz(x)
    (quantize * torch.tensor(_Q_UP)).sum().backward()
    after1 = {k: _np(v).copy() for k, v in qz.state_dict().items()}
    quantize2, diff2, ind2 = qz(x.detach() * 0.5)  # second EMA step from the updated buffers
    qz.eval()
    before_eval = {k: _np(v).copy() for k, v in qz.state_dict().items()}
    q_eval, _, ind_eval = qz(x.detach())
    return SimpleNamespace(quantize=quantize, diff=diff, ind=ind, grad=x.grad, after1=after1, quantize2=quantize2,
                           diff2=diff2, ind2=ind2, state=qz.state_dict(), before_eval=before_eval, q_eval=q_eval,
                           ind_eval=ind_eval)


def test_vqvae_quantize_ema_codebook():
    r = _quantize_run(lucid)
    q, diff, ind, cl, avg, emb = _np_quantize(_Q_INPUT, _Q_EMBED, np.ones(5), _Q_EMBED.astype(np.float64))
    assert r.ind.dtype == lucid.int64 and tuple(r.ind.shape) == (2, 4)
    np.testing.assert_array_equal(_np(r.ind), ind)
    assert len(set(ind.ravel().tolist())) >= 2  # more than one code is used
    np.testing.assert_allclose(_np(r.quantize), q, atol=1e-6)
    np.testing.assert_allclose(float(r.diff.item()), diff, rtol=1e-5)
    np.testing.assert_allclose(r.after1["cluster_size"], cl, rtol=1e-6)
    np.testing.assert_allclose(r.after1["embed_avg"], avg, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(r.after1["embed"], emb, rtol=1e-5, atol=1e-6)
    # straight-through: d(quantize)/d(input) is the identity
    np.testing.assert_allclose(_np(r.grad), _Q_UP, rtol=1e-6)
    q2, diff2, ind2, cl2, avg2, emb2 = _np_quantize(_Q_INPUT * 0.5, emb, cl, avg)
    np.testing.assert_array_equal(_np(r.ind2), ind2)
    np.testing.assert_allclose(float(r.diff2.item()), diff2, rtol=1e-5)
    np.testing.assert_allclose(_np(r.state["cluster_size"]), cl2, rtol=1e-6)
    np.testing.assert_allclose(_np(r.state["embed"]), emb2, rtol=1e-5, atol=1e-6)
    # eval mode: nearest code only, buffers untouched
    qe, _, inde, *_ = _np_quantize(_Q_INPUT, emb2, cl2, avg2, training=False)
    np.testing.assert_array_equal(_np(r.ind_eval), inde)
    np.testing.assert_allclose(_np(r.q_eval), qe, atol=1e-6)
    for k, v in r.state.items():
        np.testing.assert_array_equal(_np(v), r.before_eval[k])


def test_vqvae_quantize_ema_codebook_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = _quantize_run(lucid), _quantize_run(torch)
    for name in ("quantize", "grad", "quantize2", "q_eval"):
        np.testing.assert_allclose(_np(getattr(a, name)), getattr(b, name).detach().numpy(), atol=1e-6)
    for name in ("ind", "ind2", "ind_eval"):
        assert getattr(a, name).tolist() == getattr(b, name).tolist()
    for k in b.state:
        np.testing.assert_allclose(_np(a.state[k]), b.state[k].numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(a.diff2.item(), b.diff2.item(), rtol=1e-5)


def _vqvae_run(torch, arrays=None):
    p = vqvae_page(torch)
    torch.manual_seed(0)
    model = p.VQVAE(in_channel=3, channel=8, n_res_block=1, n_res_channel=4, embed_dim=4, n_embed=6)
    arrays = _random_state(model, 7) if arrays is None else arrays
    arrays = dict(arrays)
    for name in ("quantize_t", "quantize_b"):
        arrays[f"{name}.cluster_size"] = np.ones(6, np.float32)
        arrays[f"{name}.embed_avg"] = arrays[f"{name}.embed"]
    _load(torch, model, arrays)
    x = torch.tensor(_VQ_X)
    model.eval()
    with torch.no_grad():
        enc_b = model.enc_b(x)
        z_t = model.quantize_conv_t(model.enc_t(enc_b)).permute(0, 2, 3, 1)
    quant_t, quant_b, diff_e, id_t, id_b = model.encode(x)
    with torch.no_grad():
        z_b = model.quantize_conv_b(torch.cat([model.dec_t(quant_t), enc_b], 1)).permute(0, 2, 3, 1)
    from_codes = model.decode_code(id_t, id_b)
    direct = model.decode(quant_t, quant_b)
    model.train()
    dec, diff = model(x)
    loss = (dec - x).pow(2).mean() + 0.25 * diff.mean()
    loss.backward()
    return SimpleNamespace(model=model, arrays=arrays, z_t=z_t, z_b=z_b, quant_b=quant_b, quant_t=quant_t, id_t=id_t, id_b=id_b, diff_e=diff_e,
                           from_codes=from_codes, direct=direct, dec=dec, diff=diff, loss=loss,
                           state=model.state_dict())


def test_vqvae_tiny_forward_encode_decode_code():
    r = _vqvae_run(lucid)
    assert tuple(r.id_t.shape) == (1, 1, 1) and tuple(r.id_b.shape) == (1, 2, 2)
    assert tuple(r.dec.shape) == (1, 3, 8, 8) and tuple(r.diff.shape) == (1,)
    embed_t = r.arrays["quantize_t.embed"].astype(np.float64)
    q_np, d_np, ind_np, *_ = _np_quantize(_np(r.z_t), embed_t, None, None, training=False)
    np.testing.assert_array_equal(_np(r.id_t), ind_np)
    np.testing.assert_allclose(_np(r.quant_t).transpose(0, 2, 3, 1), q_np, atol=1e-5)
    # quant_b rows are codebook columns; decode_code(ids) equals decode(quantized) in eval mode
    np.testing.assert_allclose(_np(r.from_codes), _np(r.direct), atol=1e-5)
    embed_b = r.arrays["quantize_b.embed"].astype(np.float64)
    qb_np, db_np, indb_np, *_ = _np_quantize(_np(r.z_b), embed_b, None, None, training=False)
    np.testing.assert_array_equal(_np(r.id_b), indb_np)
    np.testing.assert_allclose(_np(r.quant_b).transpose(0, 2, 3, 1), qb_np, atol=1e-5)
    np.testing.assert_allclose(float(r.diff_e.item()), d_np + db_np, rtol=1e-5)  # top + bottom commitment
    # training forward: the EMA moved the codebooks, gradients reach the encoder through the
    # straight-through estimator (the loss has no other path to enc_b)
    assert not np.allclose(_np(r.state["quantize_b.embed"]), r.arrays["quantize_b.embed"])
    # counts decay from ones: 0.99 * 6 + 0.01 * (one top vector), 0.99 * 6 + 0.01 * (four bottom vectors)
    np.testing.assert_allclose(_np(r.state["quantize_t.cluster_size"]).sum(), 5.95, rtol=1e-6)
    np.testing.assert_allclose(_np(r.state["quantize_b.cluster_size"]).sum(), 5.98, rtol=1e-6)
    g = r.model.enc_b.blocks[0].weight.grad
    assert g is not None and float(g.abs().sum().item()) > 0
    assert r.model.quantize_t.embed.grad is None


def test_vqvae_tiny_forward_encode_decode_code_torch_parity():
    torch = pytest.importorskip("torch")
    a = _vqvae_run(lucid)
    b = _vqvae_run(torch, a.arrays)
    for name in ("quant_t", "from_codes", "dec"):
        np.testing.assert_allclose(_np(getattr(a, name)), getattr(b, name).detach().numpy(), atol=1e-4)
    assert a.id_b.tolist() == b.id_b.tolist()
    np.testing.assert_allclose(a.loss.item(), b.loss.item(), rtol=1e-4)
    for k in b.state:
        np.testing.assert_allclose(_np(a.state[k]), b.state[k].numpy(), rtol=1e-4, atol=1e-5)
    for (n, pa), pb in zip(a.model.named_parameters(), b.model.parameters()):
        np.testing.assert_allclose(_np(pa.grad), pb.grad.numpy(), rtol=1e-3, atol=1e-5, err_msg=n)


# --------------------------------------------------------------------------- lr finder

def lr_finder_page(torch):
    # ``from torch.optim.lr_scheduler import _LRScheduler`` / ``from torch.utils.data import DataLoader``
    _LRScheduler = torch.optim.lr_scheduler._LRScheduler
    DataLoader = torch.utils.data.DataLoader

    class DataLoaderIter(object):
        def __init__(self, data_loader):
            self.data_loader = data_loader
            self._iterator = iter(data_loader)

        @property
        def dataset(self):
            return self.data_loader.dataset

        def inputs_labels_from_batch(self, batch_data):
            if not isinstance(batch_data, list) and not isinstance(batch_data, tuple):
                raise ValueError(
                    "Your batch type is not supported: {}. Please inherit from "
                    "`TrainDataLoaderIter` or `ValDataLoaderIter` and override the "
                    "`inputs_labels_from_batch` method.".format(type(batch_data))
                )

            inputs, labels, *_ = batch_data

            return inputs, labels

        def __iter__(self):
            return self

        def __next__(self):
            batch = next(self._iterator)
            return self.inputs_labels_from_batch(batch)

    class TrainDataLoaderIter(DataLoaderIter):
        def __init__(self, data_loader, auto_reset=True):
            super().__init__(data_loader)
            self.auto_reset = auto_reset

        def __next__(self):
            try:
                batch = next(self._iterator)
                inputs, labels = self.inputs_labels_from_batch(batch)
            except StopIteration:
                if not self.auto_reset:
                    raise
                self._iterator = iter(self.data_loader)
                batch = next(self._iterator)
                inputs, labels = self.inputs_labels_from_batch(batch)

            return inputs, labels

    class LRFinder(object):
        def __init__(self, model, optimizer, criterion, device=None, memory_cache=True, cache_dir=None):
            # Check if the optimizer is already attached to a scheduler
            self.optimizer = optimizer
            self._check_for_scheduler()

            self.model = model
            self.criterion = criterion
            self.history = {"lr": [], "loss": []}
            self.best_loss = None
            self.memory_cache = memory_cache
            self.cache_dir = cache_dir

            # Save the original state of the model and optimizer so they can be restored if
            # needed
            self.model_device = next(self.model.parameters()).device
            self.state_cacher = StateCacher(memory_cache, cache_dir=cache_dir)
            self.state_cacher.store("model", self.model.state_dict())
            self.state_cacher.store("optimizer", self.optimizer.state_dict())

            # If device is None, use the same as the model
            if device:
                self.device = device
            else:
                self.device = self.model_device

        def reset(self):
            """Restores the model and optimizer to their initial states."""

            self.model.load_state_dict(self.state_cacher.retrieve("model"))
            self.optimizer.load_state_dict(self.state_cacher.retrieve("optimizer"))
            self.model.to(self.model_device)

        def range_test(self, train_loader, val_loader=None, start_lr=None, end_lr=10, num_iter=100,
                       step_mode="exp", smooth_f=0.05, diverge_th=5, accumulation_steps=1,
                       non_blocking_transfer=True):
            # Reset test results
            self.history = {"lr": [], "loss": []}
            self.best_loss = None

            # Move the model to the proper device
            self.model.to(self.device)

            # Check if the optimizer is already attached to a scheduler
            self._check_for_scheduler()

            # Set the starting learning rate
            if start_lr:
                self._set_learning_rate(start_lr)

            # Initialize the proper learning rate policy
            if step_mode.lower() == "exp":
                lr_schedule = ExponentialLR(self.optimizer, end_lr, num_iter)
            elif step_mode.lower() == "linear":
                lr_schedule = LinearLR(self.optimizer, end_lr, num_iter)
            else:
                raise ValueError("expected one of (exp, linear), got {}".format(step_mode))

            if smooth_f < 0 or smooth_f >= 1:
                raise ValueError("smooth_f is outside the range [0, 1[")

            # Create an iterator to get data batch by batch
            if isinstance(train_loader, DataLoader):
                train_iter = TrainDataLoaderIter(train_loader)
            elif isinstance(train_loader, TrainDataLoaderIter):
                train_iter = train_loader
            else:
                raise ValueError(
                    "`train_loader` has unsupported type: {}."
                    "Expected types are `torch.utils.data.DataLoader`"
                    "or child of `TrainDataLoaderIter`.".format(type(train_loader))
                )

            for iteration in range(num_iter):
                # Train on batch and retrieve loss
                loss = self._train_batch(
                    train_iter,
                    accumulation_steps,
                    non_blocking_transfer=non_blocking_transfer,
                )

                # Update the learning rate
                self.history["lr"].append(lr_schedule.get_lr()[0])
                lr_schedule.step()

                # Track the best loss and smooth it if smooth_f is specified
                if iteration == 0:
                    self.best_loss = loss
                else:
                    if smooth_f > 0:
                        loss = smooth_f * loss + (1 - smooth_f) * self.history["loss"][-1]
                    if loss < self.best_loss:
                        self.best_loss = loss

                # Check if the loss has diverged; if it has, stop the test
                self.history["loss"].append(loss)
                if loss > diverge_th * self.best_loss:
                    print("Stopping early, the loss has diverged")
                    break

            print("Learning rate search finished. See the graph with {finder_name}.plot()")

        def _set_learning_rate(self, new_lrs):
            if not isinstance(new_lrs, list):
                new_lrs = [new_lrs] * len(self.optimizer.param_groups)
            if len(new_lrs) != len(self.optimizer.param_groups):
                raise ValueError(
                    "Length of `new_lrs` is not equal to the number of parameter groups "
                    + "in the given optimizer"
                )

            for param_group, new_lr in zip(self.optimizer.param_groups, new_lrs):
                param_group["lr"] = new_lr

        def _check_for_scheduler(self):
            for param_group in self.optimizer.param_groups:
                if "initial_lr" in param_group:
                    raise RuntimeError("Optimizer already has a scheduler attached to it")

        def _train_batch(self, train_iter, accumulation_steps, non_blocking_transfer=True):
            self.model.train()
            total_loss = None  # for late initialization

            self.optimizer.zero_grad()
            for i in range(accumulation_steps):
                inputs, labels = next(train_iter)
                inputs, labels = self._move_to_device(
                    inputs, labels, non_blocking=non_blocking_transfer
                )

                # Forward pass
                outputs = self.model(inputs)
                loss = self.criterion(outputs, labels)

                # Loss should be averaged in each step
                loss /= accumulation_steps

                # Backward pass
                loss.backward()

                if total_loss is None:
                    total_loss = loss
                else:
                    total_loss += loss

            self.optimizer.step()

            return total_loss.item()

        def _move_to_device(self, inputs, labels, non_blocking=True):
            def move(obj, device, non_blocking=True):
                if hasattr(obj, "to"):
                    return obj.to(device, non_blocking=non_blocking)
                elif isinstance(obj, tuple):
                    return tuple(move(o, device, non_blocking) for o in obj)
                elif isinstance(obj, list):
                    return [move(o, device, non_blocking) for o in obj]
                elif isinstance(obj, dict):
                    return {k: move(o, device, non_blocking) for k, o in obj.items()}
                else:
                    return obj

            inputs = move(inputs, self.device, non_blocking=non_blocking)
            labels = move(labels, self.device, non_blocking=non_blocking)
            return inputs, labels

        def suggestion(self, skip_start=10, skip_end=5):
            """``plot``'s data trimming and steepest-gradient suggestion, without the figure."""
            lrs = self.history["lr"]
            losses = self.history["loss"]
            if skip_end == 0:
                lrs = lrs[skip_start:]
                losses = losses[skip_start:]
            else:
                lrs = lrs[skip_start:-skip_end]
                losses = losses[skip_start:-skip_end]
            print("LR suggestion: steepest gradient")
            min_grad_idx = None
            try:
                min_grad_idx = (np.gradient(np.array(losses))).argmin()
            except ValueError:
                print(
                    "Failed to compute the gradients, there might not be enough points."
                )
            if min_grad_idx is not None:
                print("Suggested LR: {:.2E}".format(lrs[min_grad_idx]))
                return lrs[min_grad_idx]

    class LinearLR(_LRScheduler):
        def __init__(self, optimizer, end_lr, num_iter, last_epoch=-1):
            self.end_lr = end_lr

            if num_iter <= 1:
                raise ValueError("`num_iter` must be larger than 1")
            self.num_iter = num_iter

            super(LinearLR, self).__init__(optimizer, last_epoch)

        def get_lr(self):
            r = self.last_epoch / (self.num_iter - 1)

            return [base_lr + r * (self.end_lr - base_lr) for base_lr in self.base_lrs]

    class ExponentialLR(_LRScheduler):
        def __init__(self, optimizer, end_lr, num_iter, last_epoch=-1):
            self.end_lr = end_lr

            if num_iter <= 1:
                raise ValueError("`num_iter` must be larger than 1")
            self.num_iter = num_iter

            super(ExponentialLR, self).__init__(optimizer, last_epoch)

        def get_lr(self):
            r = self.last_epoch / (self.num_iter - 1)

            return [base_lr * (self.end_lr / base_lr) ** r for base_lr in self.base_lrs]

    class StateCacher(object):
        def __init__(self, in_memory, cache_dir=None):
            self.in_memory = in_memory
            self.cache_dir = cache_dir
            self.cached = {}

        def store(self, key, state_dict):
            if self.in_memory:
                self.cached.update({key: copy.deepcopy(state_dict)})

        def retrieve(self, key):
            if key not in self.cached:
                raise KeyError("Target {} was not cached.".format(key))
            return self.cached.get(key)

    return SimpleNamespace(LRFinder=LRFinder, LinearLR=LinearLR, ExponentialLR=ExponentialLR,
                           TrainDataLoaderIter=TrainDataLoaderIter, DataLoader=DataLoader)


_LR_X = np.random.default_rng(10).standard_normal((12, 3)).astype(np.float32)
_LR_Y = (_LR_X @ np.array([[1.0], [-2.0], [0.5]]) + 0.3).astype(np.float32)
_LR_W = np.array([[0.1, 0.2, -0.3]], np.float32)
_LR_B = np.array([0.05], np.float32)


def _np_range_test(lrs_sched, momentum, smooth_f, diverge_th, batch=4):
    """Momentum SGD on the linear model in float64, batches in loader order, the finder's bookkeeping."""
    w, b = _LR_W.astype(np.float64).T.copy(), _LR_B.astype(np.float64).copy()
    bw, bb = None, None
    hist_lr, hist_loss, best = [], [], None
    for it, lr in enumerate(lrs_sched):
        s = (it * batch) % len(_LR_X)
        x, y = _LR_X[s:s + batch].astype(np.float64), _LR_Y[s:s + batch].astype(np.float64)
        r = x @ w + b - y
        loss = (r ** 2).mean()
        gw, gb = 2 * x.T @ r / r.size, 2 * r.sum(0) / r.size
        bw = gw if bw is None else momentum * bw + gw
        bb = gb if bb is None else momentum * bb + gb
        w, b = w - lr * bw, b - lr * bb
        hist_lr.append(lr)
        if it == 0:
            best = loss
        else:
            loss = smooth_f * loss + (1 - smooth_f) * hist_loss[-1]
            best = min(best, loss)
        hist_loss.append(loss)
        if loss > diverge_th * best:
            break
    return hist_lr, hist_loss


def _lr_run(torch, step_mode, end_lr, num_iter):
    p = lr_finder_page(torch)
    model = torch.nn.Linear(3, 1)
    _load(torch, model, {"weight": _LR_W, "bias": _LR_B})
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.5)
    ds = torch.utils.data.TensorDataset(torch.tensor(_LR_X), torch.tensor(_LR_Y))
    loader = p.DataLoader(ds, batch_size=4, shuffle=False)
    finder = p.LRFinder(model, optimizer, torch.nn.MSELoss())
    finder.range_test(loader, end_lr=end_lr, num_iter=num_iter, step_mode=step_mode, smooth_f=0.05,
                      diverge_th=5)
    hist = copy.deepcopy(finder.history)
    moved = _np(model.weight).copy()
    suggested = finder.suggestion(skip_start=1, skip_end=1)
    finder.reset()
    after_reset = (_np(model.weight).copy(), _np(model.bias).copy(), finder.optimizer.state_dict())
    finder.range_test(loader, end_lr=end_lr, num_iter=num_iter, step_mode=step_mode)  # again after reset
    return SimpleNamespace(hist=hist, moved=moved, suggested=suggested, after_reset=after_reset,
                           hist2=finder.history, p=p, optimizer=optimizer)


@pytest.mark.parametrize("step_mode,end_lr,num_iter", [("exp", 1.0, 8), ("linear", 0.05, 6), ("exp", 50.0, 12)])
def test_lr_finder_range_test(step_mode, end_lr, num_iter, capsys):
    r = _lr_run(lucid, step_mode, end_lr, num_iter)
    out = capsys.readouterr().out
    i = np.arange(num_iter) / (num_iter - 1)
    sched = 1e-3 * (end_lr / 1e-3) ** i if step_mode == "exp" else 1e-3 + i * (end_lr - 1e-3)
    lr_np, loss_np = _np_range_test(sched, 0.5, 0.05, 5)
    np.testing.assert_allclose(r.hist["lr"], lr_np, rtol=1e-9)
    np.testing.assert_allclose(r.hist["loss"], loss_np, rtol=2e-4)
    diverged = len(loss_np) < num_iter
    assert diverged == (end_lr == 50.0)  # the large range blows up and stops early
    assert out.count("Stopping early, the loss has diverged") == 2 * diverged
    assert out.count("Learning rate search finished.") == 2
    grads = np.gradient(np.array(loss_np[1:-1]))
    assert r.suggested == lr_np[1:-1][int(grads.argmin())]
    assert "Suggested LR: {:.2E}".format(r.suggested) in out
    # reset restores the exact initial parameters and the optimizer's lr (no 'initial_lr' left)
    assert not np.array_equal(r.moved, _LR_W)
    np.testing.assert_array_equal(r.after_reset[0], _LR_W)
    np.testing.assert_array_equal(r.after_reset[1], _LR_B)
    assert r.after_reset[2]["param_groups"][0]["lr"] == 1e-3 and not r.after_reset[2]["state"]
    assert "initial_lr" not in r.after_reset[2]["param_groups"][0]
    assert r.hist2 == r.hist  # the repeated test from the restored state reproduces the history


def test_lr_finder_scheduler_checks():
    p = lr_finder_page(lucid)
    model = lucid.nn.Linear(2, 1)
    opt = lucid.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="`num_iter` must be larger than 1"):
        p.LinearLR(opt, 1.0, 1)
    sched = p.LinearLR(opt, 1.1, 3)
    with pytest.raises(RuntimeError, match="already has a scheduler"):
        p.LRFinder(model, opt, lucid.nn.MSELoss())
    got = []
    for _ in range(3):
        got.append(opt.param_groups[0]["lr"])
        sched.step()
    np.testing.assert_allclose(got, [0.1, 0.6, 1.1], rtol=1e-12)


def test_lr_finder_range_test_torch_parity(capsys):
    torch = pytest.importorskip("torch")
    for args in [("exp", 1.0, 8), ("exp", 50.0, 12)]:
        a, b = _lr_run(lucid, *args), _lr_run(torch, *args)
        np.testing.assert_allclose(a.hist["lr"], b.hist["lr"], rtol=1e-12)
        np.testing.assert_allclose(a.hist["loss"], b.hist["loss"], rtol=1e-4)
        assert a.suggested == b.suggested


# --------------------------------------------------------------------------- composer algorithms

def composer_page(torch):
    nn = torch.nn
    F = torch.nn.functional

    # blurpool/blurpool_layers.py
    def _default_2d_filter():
        default_filter = torch.tensor([[[
            [1, 2, 1],
            [2, 4, 2],
            [1, 2, 1],
        ]]]) * 1 / 16.0

        return default_filter

    def _padding_for_filt_2d_same(filt):
        _, _, h, w = filt.shape
        if h % 2 == 0:
            raise IndexError(f"Filter must have odd height; got {h}")
        if w % 2 == 0:
            raise IndexError(f"Filter must have odd width; got {w}")
        return (h // 2, w // 2)

    def blur_2d(input, stride=1, filter=None):
        _, c, h, w = input.shape
        n_in_channels = c

        if filter is None:
            filter = _default_2d_filter()
        if (filter.shape[0] == 1) and (n_in_channels > 1):
            # filt is already a rank 4 tensor
            filter = filter.repeat((n_in_channels, 1, 1, 1))

        _, _, filter_h, filter_w = filter.shape
        padding = _padding_for_filt_2d_same(filter)

        if h + 2 * padding[0] < filter_h:
            return input
        if w + 2 * padding[1] < filter_w:
            return input

        return F.conv2d(input, filter, stride=stride, padding=padding, groups=n_in_channels, bias=None)

    def blurmax_pool2d(input, kernel_size=None, stride=2, padding=0, dilation=1, ceil_mode=False, filter=None):
        if kernel_size is None:
            kernel_size = (2, 2)

        maxs = F.max_pool2d(input,
                            kernel_size=kernel_size,
                            stride=1,
                            padding=padding,
                            dilation=dilation,
                            ceil_mode=ceil_mode)
        return blur_2d(maxs, stride=stride, filter=filter)

    class BlurMaxPool2d(nn.Module):
        def __init__(self, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
            super(BlurMaxPool2d, self).__init__()
            self.kernel_size = kernel_size
            self.stride = stride if (stride is not None) else kernel_size
            self.padding = padding
            self.dilation = dilation
            self.ceil_mode = ceil_mode

            # we don't need this as part of state_dict, but making it a buffer
            # ensures that module.cuda(), module.to(), etc work out of the box
            self.register_buffer('filt2d', _default_2d_filter())

        def extra_repr(self) -> str:
            return 'kernel_size={kernel_size}, stride={stride}, padding={padding}' \
                ', dilation={dilation}, ceil_mode={ceil_mode}'.format(
                    **self.__dict__)

        def forward(self, input):
            return blurmax_pool2d(input,
                                  kernel_size=self.kernel_size,
                                  stride=self.stride,
                                  padding=self.padding,
                                  dilation=self.dilation,
                                  ceil_mode=self.ceil_mode,
                                  filter=self.filt2d)

        @staticmethod
        def from_maxpool2d(module, module_index):
            return BlurMaxPool2d(kernel_size=module.kernel_size,
                                 stride=module.stride,
                                 padding=module.padding,
                                 dilation=module.dilation,
                                 ceil_mode=module.ceil_mode)

    class BlurConv2d(nn.Module):
        def __init__(self, in_channels, out_channels, kernel_size, stride=None, padding=0, dilation=1, groups=1,
                     bias=True, blur_first=True):

            super(BlurConv2d, self).__init__()
            self.blur_first = blur_first

            if self.blur_first:
                assert stride is not None
                conv_stride = stride
                self.blur_stride = 1
                blur_nchannels = in_channels
            else:
                conv_stride = 1
                self.blur_stride = kernel_size if (stride is None) else stride
                blur_nchannels = out_channels

            self.conv = torch.nn.Conv2d(in_channels=in_channels,
                                        out_channels=out_channels,
                                        kernel_size=kernel_size,
                                        stride=conv_stride,
                                        padding=padding,
                                        dilation=dilation,
                                        groups=groups,
                                        bias=bias)

            # this is the full 4d tensor we want; materialize it once, instead
            # of just-in-time during forward; we can do this in this class but
            # not the others because we know in_channels during __init__
            filt = _default_2d_filter().repeat(blur_nchannels, 1, 1, 1)
            self.register_buffer('blur_filter', filt)

        def forward(self, input):
            if self.blur_first:
                blurred = blur_2d(input, filter=self.blur_filter, stride=self.blur_stride)
                return self.conv.forward(blurred)
            else:
                activations = self.conv.forward(input)
                return blur_2d(activations, filter=self.blur_filter, stride=self.blur_stride)

        @staticmethod
        def from_conv2d(module, module_index=-1, blur_first=True):
            has_bias = module.bias is not None and module.bias is not False
            blurconv = BlurConv2d(in_channels=module.in_channels,
                                  out_channels=module.out_channels,
                                  kernel_size=module.kernel_size,
                                  stride=module.stride,
                                  padding=module.padding,
                                  dilation=module.dilation,
                                  groups=module.groups,
                                  bias=has_bias,
                                  blur_first=blur_first)

            with torch.no_grad():
                blurconv.conv.weight.copy_(module.weight)
                if has_bias:
                    blurconv.conv.bias.copy_(module.bias)

            return blurconv

    class BlurPool2d(nn.Module):
        def __init__(self, stride=2, padding=1) -> None:
            super(BlurPool2d, self).__init__()
            self.stride = stride
            self.padding = padding
            self.register_buffer('filt2d', _default_2d_filter())

        def forward(self, input):
            return blur_2d(input, stride=self.stride, filter=self.filt2d)

    # mixup/mixup.py
    def mixup_batch(input, target, mixing=None, alpha=0.2, indices=None):
        if mixing is None:
            mixing = _gen_mixing_coef(alpha)
        # Create permuted versions of x and y in preparation for interpolation
        # Use given indices if there are any.
        if indices is None:
            permuted_idx = _gen_indices(input.shape[0])
        else:
            permuted_idx = indices
        x_permuted = input[permuted_idx]
        permuted_target = target[permuted_idx]
        # Interpolate between the inputs
        x_mixup = (1 - mixing) * input + mixing * x_permuted

        return x_mixup, permuted_target, mixing

    def _gen_mixing_coef(alpha):
        """Samples ``max(z, 1-z), z ~ Beta(alpha, alpha)``."""
        assert alpha >= 0
        if alpha == 0:
            mixing_lambda = 0
        else:
            mixing_lambda = np.random.beta(alpha, alpha)
        return min(mixing_lambda, 1. - mixing_lambda)

    def _gen_indices(num_samples):
        """Generates a random permutation of the batch indices."""
        return torch.randperm(num_samples)

    # loss/utils.py ensure_targets_one_hot (class-index targets) and label_smoothing.py smooth_labels
    def ensure_targets_one_hot(input, targets, num_classes=None):
        if input.shape != targets.shape:
            if num_classes is None:
                num_classes = input.shape[1]
            targets = F.one_hot(targets, num_classes=num_classes).float()
        return targets

    def smooth_labels(logits, target, smoothing: float = 0.1):
        target = ensure_targets_one_hot(logits, target)
        n_classes = logits.shape[1]
        return (target * (1. - smoothing)) + (smoothing / n_classes)

    # ema/ema.py
    def compute_ema(model, ema_model, smoothing: float = 0.99):
        with torch.no_grad():
            model_params = itertools.chain(model.parameters(), model.buffers())
            ema_model_params = itertools.chain(ema_model.parameters(), ema_model.buffers())

            for ema_param, model_param in zip(ema_model_params, model_params):
                model_param = model_param.detach()
                ema_param.copy_(ema_param * smoothing + (1. - smoothing) * model_param)

    def _copy_params(source_model, destination_model):
        """Copies parameters and buffers from ``source_model`` to ``destination_model``."""
        with torch.no_grad():
            source_params = itertools.chain(source_model.parameters(), source_model.buffers())
            destination_params = itertools.chain(destination_model.parameters(), destination_model.buffers())

            for source_param, destination_param in zip(source_params, destination_params):
                destination_param.data = source_param.data

    # sam/sam.py
    class SAMOptimizer(torch.optim.Optimizer):
        def __init__(self, base_optimizer, rho: float = 0.05, epsilon: float = 1.0e-12, interval: int = 1, **kwargs):
            assert rho >= 0.0, f"Invalid rho, should be non-negative: {rho}"
            self.base_optimizer = base_optimizer
            self.global_step = 0
            self.interval = interval
            self._step_supports_amp_closure = True  # Flag for Composer trainer
            defaults = dict(rho=rho, epsilon=epsilon, **kwargs)
            super(SAMOptimizer, self).__init__(self.base_optimizer.param_groups, defaults)

        @torch.no_grad()
        def sub_e_w(self):
            for group in self.param_groups:
                for p in group["params"]:
                    if "e_w" not in self.state[p]:
                        continue
                    e_w = self.state[p]["e_w"]  # retrieve stale e(w)
                    p.sub_(e_w)  # get back to "w" from "w + e(w)"

        @torch.no_grad()
        def first_step(self):
            grad_norm = self._grad_norm()
            for group in self.param_groups:
                scale = group["rho"] / (grad_norm + group["epsilon"])
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    e_w = p.grad * scale.to(p)
                    p.add_(e_w)  # climb to the local maximum "w + e(w)"
                    self.state[p]["e_w"] = e_w

        @torch.no_grad()
        def second_step(self):
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is None or "e_w" not in self.state[p]:
                        continue
                    p.sub_(self.state[p]["e_w"])  # get back to "w" from "w + e(w)"
            self.base_optimizer.step()  # do the actual "sharpness-aware" update

        @torch.no_grad()
        def step(self, closure=None):
            assert closure is not None, "Sharpness Aware Minimization requires closure, but it was not provided"
            closure = torch.enable_grad()(closure)  # the closure should do a full forward-backward pass
            loss = None

            if (self.global_step + 1) % self.interval == 0:
                loss = closure(ddp_sync=False)  # Compute gradient at (w) per-GPU, and do not sync
                if loss:
                    self.first_step()  # Compute e(w) and set weights to (w + (e(w)) separately per-GPU
                    if closure():  # Compute gradient at (w + e(w))
                        self.second_step()  # Reset weights to (w) and step base optimizer
                    else:
                        self.sub_e_w()  # If second forward-backward closure fails, reset weights to (w)
            else:
                loss = closure()
                if loss:
                    self.base_optimizer.step()

            self.global_step += 1
            return loss

        def _grad_norm(self):
            norm = torch.norm(torch.stack(
                [p.grad.norm(p=2) for group in self.param_groups for p in group["params"] if p.grad is not None]),
                              p="fro")
            return norm

    return SimpleNamespace(blur_2d=blur_2d, blurmax_pool2d=blurmax_pool2d, BlurMaxPool2d=BlurMaxPool2d,
                           BlurConv2d=BlurConv2d, BlurPool2d=BlurPool2d, mixup_batch=mixup_batch,
                           smooth_labels=smooth_labels, compute_ema=compute_ema, _copy_params=_copy_params,
                           SAMOptimizer=SAMOptimizer, _default_2d_filter=_default_2d_filter)


_BLUR_K = np.array([[1, 2, 1], [2, 4, 2], [1, 2, 1]], np.float64) / 16


def _np_depthwise(x, k, stride, pad):
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    ho, wo = (h + 2 * pad - 3) // stride + 1, (w + 2 * pad - 3) // stride + 1
    out = np.zeros((n, c, ho, wo))
    for i in range(ho):
        for j in range(wo):
            out[:, :, i, j] = (xp[:, :, i * stride:i * stride + 3, j * stride:j * stride + 3] * k).sum((2, 3))
    return out


def _np_conv(x, w, b, stride, pad):
    n, c, h, ww = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    ho, wo = (h + 2 * pad - kh) // stride + 1, (ww + 2 * pad - kw) // stride + 1
    out = np.zeros((n, o, ho, wo))
    for i in range(ho):
        for j in range(wo):
            patch = xp[:, :, i * stride:i * stride + kh, j * stride:j * stride + kw]
            out[:, :, i, j] = np.einsum("nchw,ochw->no", patch, w) + b
    return out


_BP_X = np.random.default_rng(20).standard_normal((2, 3, 6, 6)).astype(np.float32)
_BP_W = np.random.default_rng(21).standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3
_BP_B = np.random.default_rng(22).standard_normal(4).astype(np.float32)


def _blur_run(torch):
    p = composer_page(torch)
    x = torch.tensor(_BP_X)
    conv = torch.nn.Conv2d(3, 4, 3, stride=2, padding=1)
    _load(torch, conv, {"weight": _BP_W, "bias": _BP_B})
    first = p.BlurConv2d.from_conv2d(conv, blur_first=True)
    last = p.BlurConv2d.from_conv2d(conv, blur_first=False)
    pool = p.BlurMaxPool2d.from_maxpool2d(torch.nn.MaxPool2d(2), 0)
    xg = torch.tensor(_BP_X, requires_grad=True)
    pooled = pool(xg)
    pooled.sum().backward()
    return SimpleNamespace(blur=p.blur_2d(x), blur_s2=p.BlurPool2d()(x), first=first(x), last=last(x),
                           pooled=pooled, pool_grad=xg.grad, pool_repr=repr(pool), first_mod=first,
                           tiny=p.blur_2d(x[:, :, :1, :1]), p=p)


def test_composer_blurpool():
    r = _blur_run(lucid)
    x = _BP_X.astype(np.float64)
    np.testing.assert_allclose(_np(r.p._default_2d_filter()), _BLUR_K[None, None], rtol=1e-7)
    np.testing.assert_allclose(_np(r.blur), _np_depthwise(x, _BLUR_K, 1, 1), atol=1e-6)
    np.testing.assert_allclose(_np(r.blur_s2), _np_depthwise(x, _BLUR_K, 2, 1), atol=1e-6)
    assert tuple(r.first_mod.blur_filter.shape) == (3, 1, 3, 3) and r.first_mod.blur_stride == 1
    assert r.first_mod.conv.stride == (2, 2)
    want_first = _np_conv(_np_depthwise(x, _BLUR_K, 1, 1), _BP_W, _BP_B, 2, 1)
    np.testing.assert_allclose(_np(r.first), want_first, atol=1e-5)
    want_last = _np_depthwise(_np_conv(x, _BP_W, _BP_B, 1, 1), _BLUR_K, 2, 1)
    np.testing.assert_allclose(_np(r.last), want_last, atol=1e-5)
    # max over 2x2 windows with stride 1 (5x5), then blur with stride 2 (3x3)
    maxs = np.stack([x[:, :, i:i + 5, j:j + 5] for i in (0, 1) for j in (0, 1)]).max(0)
    np.testing.assert_allclose(_np(r.pooled), _np_depthwise(maxs, _BLUR_K, 2, 1), atol=1e-6)
    # each output of the blur sums its weights onto the window's argmax: total gradient = sum of
    # blur weights landing inside the padded 5x5 map
    inside = _np_depthwise(np.ones((1, 1, 5, 5)), _BLUR_K, 2, 1).sum()
    np.testing.assert_allclose(_np(r.pool_grad).sum(axis=(1, 2, 3)), [inside * 3] * 2, rtol=1e-6)
    assert r.pool_repr == ("BlurMaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)")
    # a 1x1 map padded to 3x3 is still blurred: only the centre weight 4/16 meets data
    np.testing.assert_allclose(_np(r.tiny), 0.25 * _BP_X[:, :, :1, :1], rtol=1e-6)
    with pytest.raises(IndexError, match="odd height"):
        r.p.blur_2d(lucid.zeros(1, 1, 4, 4), filter=lucid.ones(1, 1, 2, 3))


def test_composer_blurpool_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = _blur_run(lucid), _blur_run(torch)
    for name in ("blur", "blur_s2", "first", "last", "pooled", "pool_grad", "tiny"):
        np.testing.assert_allclose(_np(getattr(a, name)), getattr(b, name).detach().numpy(), atol=1e-5,
                                   err_msg=name)
    assert a.pool_repr == b.pool_repr


def _mix_run(torch):
    p = composer_page(torch)
    x = torch.tensor(_BP_X[:, :, :2, :2].repeat(2, 0))  # 4 samples
    y = torch.tensor([0, 2, 1, 3])
    idx = torch.tensor([2, 3, 0, 1])
    x_mix, y_perm, mixing = p.mixup_batch(x, y, mixing=0.3, indices=idx)
    logits = torch.zeros(4, 5)
    smoothed = p.smooth_labels(logits, y, smoothing=0.1)
    mixed_target = (1 - mixing) * p.smooth_labels(logits, y, 0.0) + mixing * p.smooth_labels(logits, y_perm, 0.0)
    np.random.seed(0)
    torch.manual_seed(0)
    x_rand, y_rand, mix_rand = p.mixup_batch(x, y, alpha=0.2)
    return SimpleNamespace(x_mix=x_mix, y_perm=y_perm, mixing=mixing, smoothed=smoothed, mixed_target=mixed_target,
                           x_rand=x_rand, y_rand=y_rand, mix_rand=mix_rand, x=x, y=y)


def test_composer_mixup_and_label_smoothing():
    r = _mix_run(lucid)
    x = _np(r.x)
    idx = [2, 3, 0, 1]
    np.testing.assert_allclose(_np(r.x_mix), 0.7 * x + 0.3 * x[idx], rtol=1e-6)
    assert r.y_perm.tolist() == [1, 3, 0, 2] and r.mixing == 0.3
    y = [0, 2, 1, 3]
    want = np.full((4, 5), 0.02)
    want[np.arange(4), y] += 0.9
    np.testing.assert_allclose(_np(r.smoothed), want, rtol=1e-6)
    np.testing.assert_allclose(_np(r.smoothed).sum(1), 1.0, rtol=1e-6)
    mt = np.zeros((4, 5))
    mt[np.arange(4), y] += 0.7
    mt[np.arange(4), [1, 3, 0, 2]] += 0.3
    np.testing.assert_allclose(_np(r.mixed_target), mt, rtol=1e-6)
    # random draw: min(z, 1 - z) of NumPy's Beta(0.2, 0.2), a permutation of the batch
    np.random.seed(0)
    z = np.random.beta(0.2, 0.2)
    assert r.mix_rand == min(z, 1 - z) and 0 <= r.mix_rand <= 0.5
    perm = r.y_rand.tolist()
    assert sorted(perm) == sorted(y)
    src = [y.index(v) for v in perm]
    np.testing.assert_allclose(_np(r.x_rand), (1 - r.mix_rand) * x + r.mix_rand * x[src], rtol=1e-5, atol=1e-6)


def test_composer_mixup_and_label_smoothing_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = _mix_run(lucid), _mix_run(torch)
    for name in ("x_mix", "smoothed", "mixed_target"):
        np.testing.assert_allclose(_np(getattr(a, name)), getattr(b, name).numpy(), rtol=1e-6)
    assert a.y_perm.tolist() == b.y_perm.tolist() and a.mix_rand == b.mix_rand


def _ema_net(torch):
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2))


def _ema_states():
    rng = np.random.default_rng(30)
    shapes = {"0.weight": (4, 3), "0.bias": (4,), "1.weight": (4,), "1.bias": (4,), "1.running_mean": (4,),
              "1.running_var": (4,), "2.weight": (2, 4), "2.bias": (2,)}
    a = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    b = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    a["1.running_var"], b["1.running_var"] = np.abs(a["1.running_var"]) + 0.5, np.abs(b["1.running_var"]) + 0.5
    a["1.num_batches_tracked"] = np.array(4)
    b["1.num_batches_tracked"] = np.array(10)
    return a, b


def _ema_run(torch):
    p = composer_page(torch)
    sa, sb = _ema_states()
    model, ema = _ema_net(torch), _ema_net(torch)
    _load(torch, model, sa)
    _load(torch, ema, sb)
    p.compute_ema(model, ema, smoothing=0.9)
    once = {k: _np(v).copy() for k, v in ema.state_dict().items()}
    p.compute_ema(model, ema, smoothing=0.9)
    twice = ema.state_dict()
    swapped = _ema_net(torch)
    p._copy_params(source_model=ema, destination_model=swapped)
    out = swapped.eval()(torch.tensor(_LR_X[:2]))
    return SimpleNamespace(once=once, twice=twice, out=out, ema=ema)


def test_composer_compute_ema():
    r = _ema_run(lucid)
    sa, sb = _ema_states()
    for k in sa:
        a, b = sa[k].astype(np.float64), sb[k].astype(np.float64)
        if k.endswith("num_batches_tracked"):
            # integer buffer: copy_ casts 0.9 * 10 + 0.1 * 4 = 9.4 back to int64 (truncation)
            assert r.once[k] == 9 and int(r.twice[k].item()) == int(0.9 * 9 + 0.1 * 4)
            continue
        np.testing.assert_allclose(r.once[k], 0.9 * b + 0.1 * a, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(_np(r.twice[k]), 0.81 * b + 0.19 * a, rtol=1e-5, atol=1e-6)
    # the swapped-in EMA weights evaluate as the EMA model (BatchNorm with the averaged statistics)
    t = {k: _np(v).astype(np.float64) for k, v in r.twice.items()}
    h = _LR_X[:2].astype(np.float64) @ t["0.weight"].T + t["0.bias"]
    h = (h - t["1.running_mean"]) / np.sqrt(t["1.running_var"] + 1e-5) * t["1.weight"] + t["1.bias"]
    np.testing.assert_allclose(_np(r.out), h @ t["2.weight"].T + t["2.bias"], rtol=1e-5, atol=1e-5)


def test_composer_compute_ema_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = _ema_run(lucid), _ema_run(torch)
    for k in b.twice:
        np.testing.assert_allclose(_np(a.twice[k]), b.twice[k].numpy(), rtol=1e-6, err_msg=k)
    np.testing.assert_allclose(_np(a.out), b.out.detach().numpy(), rtol=1e-5)


_SAM_W1 = np.random.default_rng(40).standard_normal((4, 3)).astype(np.float32) * 0.5
_SAM_W2 = np.random.default_rng(41).standard_normal((1, 4)).astype(np.float32) * 0.5
_SAM_B2 = np.array([0.1], np.float32)


def _np_sam_grads(w1, w2, b2, x, y):
    h = np.tanh(x @ w1.T)
    out = h @ w2.T + b2
    r = out - y
    loss = (r ** 2).mean()
    go = 2 * r / r.size
    gw2, gb2 = go.T @ h, go.sum(0)
    gh = go @ w2 * (1 - h ** 2)
    return loss, gh.T @ x, gw2, gb2


def _sam_run(torch, interval=1, steps=3):
    p = composer_page(torch)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4, bias=False), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    _load(torch, model, {"0.weight": _SAM_W1, "2.weight": _SAM_W2, "2.bias": _SAM_B2})
    base = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
    opt = p.SAMOptimizer(base, rho=0.05, interval=interval)
    x, y = torch.tensor(_LR_X[:6]), torch.tensor(_LR_Y[:6])
    calls = []

    def closure(**kwargs):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        calls.append((kwargs, torch.is_grad_enabled()))
        return loss

    losses = [float(opt.step(closure).item()) for _ in range(steps)]
    params = [_np(q).copy() for q in model.parameters()]
    return SimpleNamespace(losses=losses, params=params, calls=calls, opt=opt, model=model)


def _np_sam(interval, steps, rho=0.05, lr=0.2, mom=0.9):
    P = [_SAM_W1.astype(np.float64), _SAM_W2.astype(np.float64), _SAM_B2.astype(np.float64)]
    x, y = _LR_X[:6].astype(np.float64), _LR_Y[:6].astype(np.float64)
    buf, losses = None, []
    for step in range(steps):
        loss, *g = _np_sam_grads(*P, x, y)
        losses.append(loss)
        if (step + 1) % interval == 0:
            norm = np.sqrt(sum((gi ** 2).sum() for gi in g))
            e = [gi * rho / (norm + 1e-12) for gi in g]
            _, *g = _np_sam_grads(*[pi + ei for pi, ei in zip(P, e)], x, y)
        buf = g if buf is None else [mom * bi + gi for bi, gi in zip(buf, g)]
        P = [pi - lr * bi for pi, bi in zip(P, buf)]
    return losses, P


@pytest.mark.parametrize("interval", [1, 2])
def test_composer_sam_optimizer(interval):
    r = _sam_run(lucid, interval=interval)
    losses, P = _np_sam(interval, 3)
    np.testing.assert_allclose(r.losses, losses, rtol=1e-5)
    for got, want in zip(r.params, P):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    # the SAM steps call the closure twice (first with ddp_sync=False), under enabled grad
    n_sam = sum((s + 1) % interval == 0 for s in range(3))
    assert len(r.calls) == 3 + n_sam
    assert [c[0] for c in r.calls].count({"ddp_sync": False}) == n_sam
    assert all(c[1] for c in r.calls)
    assert r.opt.global_step == 3 and r.opt.param_groups[0] is r.opt.base_optimizer.param_groups[0]
    # plain SGD on the same data ends elsewhere: the perturbed gradient matters
    if interval == 1:
        _, P_sgd = _np_sam(10, 3)
        assert not np.allclose(r.params[0], P_sgd[0], rtol=1e-4, atol=1e-6)


def test_composer_sam_optimizer_torch_parity():
    torch = pytest.importorskip("torch")
    for interval in (1, 2):
        a, b = _sam_run(lucid, interval), _sam_run(torch, interval)
        np.testing.assert_allclose(a.losses, b.losses, rtol=1e-5)
        for pa, pb in zip(a.params, b.params):
            np.testing.assert_allclose(pa, pb, rtol=1e-5, atol=1e-6)
        assert [c[0] for c in a.calls] == [c[0] for c in b.calls]


# --------------------------------------------------------------------------- cutmix, squeeze-excite, layer freezing

def composer_more_page(torch):
    Tensor = torch.Tensor

    # cutmix/cutmix.py
    def cutmix_batch(input, target, length=None, alpha=1., bbox=None, indices=None, uniform_sampling=False):
        if bbox is not None and length is not None:
            raise ValueError(f'Cannot provide both length and bbox; got {length} and {bbox}')

        # Create shuffled indicies across the batch in preparation for cutting and mixing.
        # Use given indices if there are any.
        if indices is None:
            shuffled_idx = _gen_indices(input)
        else:
            shuffled_idx = indices

        H, W = input.shape[-2], input.shape[-1]

        # figure out fraction of area to cut
        if length is None:
            cutmix_lambda = _gen_cutmix_coef(alpha)
        else:
            cut_w = int(length * W)
            cut_h = int(length * H)
            cutmix_lambda = (cut_w * cut_h) / (H * W)

        # Create the new inputs.
        X_cutmix = torch.clone(input)
        # Sample a rectangular box using lambda. Use variable names from the paper.
        if bbox:
            rx, ry, rw, rh = bbox[0], bbox[1], bbox[2], bbox[3]
            box_area = (rw - rx) * (rh - ry)
            cutmix_lambda = box_area / (H * W)
        else:
            rx, ry, rw, rh = _rand_bbox(input.shape[2], input.shape[3], cutmix_lambda,
                                        uniform_sampling=uniform_sampling)
            bbox = (rx, ry, rw, rh)

        # Fill in the box with a part of a random image.
        X_cutmix[:, :, rx:rw, ry:rh] = X_cutmix[shuffled_idx, :, rx:rw, ry:rh]
        # adjust lambda to exactly match pixel ratio. This is an implementation detail taken from
        # the original implementation, and implies lambda is not actually beta distributed.
        adjusted_lambda = _adjust_lambda(input, bbox)

        # Make a shuffled version of y for interpolation
        y_shuffled = target[shuffled_idx]

        return X_cutmix, y_shuffled, adjusted_lambda, bbox

    def _gen_indices(x: Tensor) -> Tensor:
        return torch.randperm(x.shape[0])

    def _gen_cutmix_coef(alpha: float) -> float:
        assert alpha >= 0
        if alpha == 0:
            cutmix_lambda = 0
        else:
            cutmix_lambda = np.random.beta(alpha, alpha)
        return cutmix_lambda

    def _rand_bbox(W, H, cutmix_lambda, cx=None, cy=None, uniform_sampling=False):
        cut_ratio = np.sqrt(1.0 - cutmix_lambda)
        cut_w = int(W * cut_ratio)
        cut_h = int(H * cut_ratio)

        # uniform
        if cx is None:
            if uniform_sampling is True:
                cx = np.random.randint(-cut_w // 2, high=W + cut_w // 2)
            else:
                cx = np.random.randint(W)
        if cy is None:
            if uniform_sampling is True:
                cy = np.random.randint(-cut_h // 2, high=H + cut_h // 2)
            else:
                cy = np.random.randint(H)

        bbx1 = np.clip(cx - cut_w // 2, 0, W)
        bby1 = np.clip(cy - cut_h // 2, 0, H)
        bbx2 = np.clip(cx + cut_w // 2, 0, W)
        bby2 = np.clip(cy + cut_h // 2, 0, H)

        return bbx1, bby1, bbx2, bby2

    def _adjust_lambda(x, bbox):
        rx, ry, rw, rh = bbox[0], bbox[1], bbox[2], bbox[3]
        adjusted_lambda = 1 - ((rw - rx) * (rh - ry) / (x.size()[-1] * x.size()[-2]))
        return adjusted_lambda

    # squeeze_excite/squeeze_excite.py
    class SqueezeExcite2d(torch.nn.Module):
        def __init__(self, num_features: int, latent_channels: float = .125):
            super().__init__()
            self.latent_channels = int(latent_channels if latent_channels >= 1 else latent_channels * num_features)
            flattened_dims = num_features

            self.pool_and_mlp = torch.nn.Sequential(
                torch.nn.AdaptiveAvgPool2d(1),
                torch.nn.Flatten(),
                torch.nn.Linear(flattened_dims, self.latent_channels, bias=False),
                torch.nn.ReLU(),
                torch.nn.Linear(self.latent_channels, num_features, bias=False),
                torch.nn.Sigmoid(),
            )

        def forward(self, input):
            n, c, _, _ = input.shape
            attention_coeffs = self.pool_and_mlp(input)
            return input * attention_coeffs.reshape(n, c, 1, 1)

    class SqueezeExciteConv2d(torch.nn.Module):
        def __init__(self, *args, latent_channels: float = 0.125, conv=None, **kwargs):
            super().__init__()
            self.conv = torch.nn.Conv2d(*args, **kwargs) if conv is None else conv
            self.conv._already_squeeze_excited = True  # Mark to avoid rewrapping on duplicate calls
            self.se = SqueezeExcite2d(num_features=self.conv.out_channels, latent_channels=latent_channels)

        def forward(self, input):
            return self.se(self.conv(input))

        @staticmethod
        def from_conv2d(module, module_index: int, latent_channels: float):
            return SqueezeExciteConv2d(conv=module, latent_channels=latent_channels)

    # layer_freezing/layer_freezing.py (``log.info`` left out)
    def ensure_tuple(x):
        return tuple(x) if isinstance(x, (list, tuple)) else (x,)

    def freeze_layers(model, optimizers, current_duration: float, freeze_start: float = 0.5,
                      freeze_level: float = 1.0):
        # Flatten out the layers
        flat_children = []
        _get_layers(model, flat_children)
        # Determine how many layers to freeze
        freeze_percentage = _freeze_schedule(
            current_duration=current_duration,
            freeze_start=freeze_start,
            freeze_level=freeze_level,
        )
        freeze_depth = int(freeze_percentage * len(flat_children[0:-1]))

        # Freeze the parameters in the chosen layers
        for i, child in enumerate(flat_children[0:-1]):
            if i < freeze_depth:
                for p in child.parameters():
                    _remove_param_from_optimizers(p, optimizers)
                    # Do not compute gradients for this param.
                    p.requires_grad = False

        return freeze_depth, freeze_percentage

    def _freeze_schedule(current_duration: float, freeze_start: float, freeze_level: float) -> float:
        # No freezing if the current epoch is less than this
        if current_duration <= freeze_start:
            return 0.0
        # `Calculate the total time for freezing to occur
        total_freezing_time = 1.0 - freeze_start
        # Calculate the amount of freezing time that has elapsed
        freezing_time_elapsed = current_duration - freeze_start
        # Calculate the fraction of the freezing time elapsed.
        freezing_time_elapsed_frac = freezing_time_elapsed / total_freezing_time
        # Scale this fraction by the amount of freezing to do.
        return freeze_level * freezing_time_elapsed_frac

    def _get_layers(module, flat_children):
        # Check if given module has no children and parameters.
        if (len(list(module.children())) == 0 and len(list(module.parameters())) > 0):
            flat_children.append(module)
        else:
            # Otherwise, continue the search over its children.
            for child in module.children():
                _get_layers(child, flat_children)

    def _remove_param_from_optimizers(p, optimizers):
        for optimizer in ensure_tuple(optimizers):
            for group in optimizer.param_groups:
                group['params'] = list(filter(lambda x: id(x) != id(p), group['params']))

    return SimpleNamespace(cutmix_batch=cutmix_batch, _rand_bbox=_rand_bbox, _adjust_lambda=_adjust_lambda,
                           SqueezeExcite2d=SqueezeExcite2d, SqueezeExciteConv2d=SqueezeExciteConv2d,
                           freeze_layers=freeze_layers, _freeze_schedule=_freeze_schedule)


_CM_X = np.random.default_rng(50).standard_normal((3, 2, 6, 5)).astype(np.float32)


def _cutmix_run(torch):
    p = composer_more_page(torch)
    x, y = torch.tensor(_CM_X), torch.tensor([4, 0, 2])
    idx = torch.tensor([1, 2, 0])
    fixed = p.cutmix_batch(x, y, bbox=(1, 2, 4, 5), indices=idx)
    np.random.seed(1)
    by_len = p.cutmix_batch(x, y, length=0.5, indices=idx)  # the box's centre is drawn with NumPy's generator
    np.random.seed(3)
    torch.manual_seed(3)
    drawn = p.cutmix_batch(x, y, alpha=1.0)
    return SimpleNamespace(fixed=fixed, by_len=by_len, drawn=drawn, p=p, x=x)


def test_composer_cutmix():
    r = _cutmix_run(lucid)
    idx = [1, 2, 0]
    xm, yp, lam, bbox = r.fixed
    want = _CM_X.copy()
    want[:, :, 1:4, 2:5] = _CM_X[idx][:, :, 1:4, 2:5]
    np.testing.assert_array_equal(_np(xm), want)
    assert yp.tolist() == [0, 2, 4] and bbox == (1, 2, 4, 5)
    assert lam == pytest.approx(1 - 9 / 30)  # the unmixed fraction of the 6x5 image
    np.testing.assert_array_equal(_np(r.x), _CM_X)  # the input is cloned, not written
    # closed form of the drawn box: NumPy's Beta(1, 1) then two integer centres, clipped
    np.random.seed(3)
    lam0 = np.random.beta(1.0, 1.0)
    cut = np.sqrt(1 - lam0)
    cw, ch = int(6 * cut), int(5 * cut)
    cx, cy = np.random.randint(6), np.random.randint(5)
    box = (np.clip(cx - cw // 2, 0, 6), np.clip(cy - ch // 2, 0, 5), np.clip(cx + cw // 2, 0, 6),
           np.clip(cy + ch // 2, 0, 5))
    xd, yd, lamd, bboxd = r.drawn
    assert tuple(int(v) for v in bboxd) == tuple(int(v) for v in box)
    area = (box[2] - box[0]) * (box[3] - box[1])
    assert lamd == pytest.approx(1 - area / 30)
    perm = yd.tolist()
    src = [[4, 0, 2].index(v) for v in perm]
    want = _CM_X.copy()
    want[:, :, box[0]:box[2], box[1]:box[3]] = _CM_X[src][:, :, box[0]:box[2], box[1]:box[3]]
    np.testing.assert_array_equal(_np(xd), want)
    # the box from ``length``: lambda = (3 * 2) / 30, then _rand_bbox cuts sqrt(1 - lambda) of each
    # side (int(6 * 0.894) = 5, int(5 * 0.894) = 4): the mixed pixels are exactly the box's, 4x4 at most
    xl, _, laml, bboxl = r.by_len
    changed = (_np(xl) != _CM_X).any(axis=(0, 1))
    x1, y1, x2, y2 = (int(v) for v in bboxl)
    inside = np.zeros((6, 5), bool)
    inside[x1:x2, y1:y2] = True
    assert not changed[~inside].any() and (x2 - x1) <= 4 and (y2 - y1) <= 4
    assert laml == pytest.approx(1 - (x2 - x1) * (y2 - y1) / 30)
    with pytest.raises(ValueError, match="Cannot provide both length and bbox"):
        r.p.cutmix_batch(lucid.tensor(_CM_X), lucid.tensor([0, 1, 2]), length=0.5, bbox=(0, 0, 1, 1))


def test_composer_cutmix_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = _cutmix_run(lucid), _cutmix_run(torch)
    np.testing.assert_array_equal(_np(a.fixed[0]), b.fixed[0].numpy())
    assert a.fixed[2] == b.fixed[2]
    assert tuple(map(int, a.drawn[3])) == tuple(map(int, b.drawn[3])) and a.drawn[2] == b.drawn[2]


def _se_run(torch, arrays=None):
    p = composer_more_page(torch)
    conv = torch.nn.Conv2d(3, 8, 3, padding=1)
    block = p.SqueezeExciteConv2d.from_conv2d(conv, 0, latent_channels=0.25)
    arrays = _random_state(block, 60) if arrays is None else arrays
    _load(torch, block, arrays)
    x = torch.tensor(_BP_X, requires_grad=True)
    out = block(x)
    out.sum().backward()
    return SimpleNamespace(block=block, arrays=arrays, out=out, grad=x.grad)


def test_composer_squeeze_excite():
    r = _se_run(lucid)
    assert r.block.se.latent_channels == 2 and r.block.conv._already_squeeze_excited is True
    A = {k: v.astype(np.float64) for k, v in r.arrays.items()}
    c = _np_conv(_BP_X.astype(np.float64), A["conv.weight"], A["conv.bias"], 1, 1)
    h = np.maximum(c.mean((2, 3)) @ A["se.pool_and_mlp.2.weight"].T, 0)
    s = 1 / (1 + np.exp(-(h @ A["se.pool_and_mlp.4.weight"].T)))
    np.testing.assert_allclose(_np(r.out), c * s[:, :, None, None], rtol=1e-5, atol=1e-5)
    # float64 finite difference of sum(out) along one input direction
    d = np.random.default_rng(61).standard_normal(_BP_X.shape)

    def f(x):
        c = _np_conv(x, A["conv.weight"], A["conv.bias"], 1, 1)
        h = np.maximum(c.mean((2, 3)) @ A["se.pool_and_mlp.2.weight"].T, 0)
        s = 1 / (1 + np.exp(-(h @ A["se.pool_and_mlp.4.weight"].T)))
        return (c * s[:, :, None, None]).sum()

    x0 = _BP_X.astype(np.float64)
    fd = (f(x0 + 1e-6 * d) - f(x0 - 1e-6 * d)) / 2e-6
    np.testing.assert_allclose((_np(r.grad) * d).sum(), fd, rtol=1e-4)


def test_composer_squeeze_excite_torch_parity():
    torch = pytest.importorskip("torch")
    a = _se_run(lucid)
    b = _se_run(torch, a.arrays)
    np.testing.assert_allclose(_np(a.out), b.out.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_np(a.grad), b.grad.numpy(), rtol=1e-4, atol=1e-6)


def _freeze_run(torch):
    p = composer_more_page(torch)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Sequential(
        torch.nn.Linear(4, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2)), torch.nn.Linear(2, 1))
    arrays = _random_state(model, 70)
    _load(torch, model, arrays)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = torch.tensor(_LR_X[:5]), torch.tensor(_LR_Y[:5])
    results = []
    for duration in (0.25, 0.625, 0.875):
        depth, pct = p.freeze_layers(model, opt, current_duration=duration, freeze_start=0.5, freeze_level=1.0)
        before = [_np(q).copy() for q in model.parameters()]
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        after = [_np(q).copy() for q in model.parameters()]
        results.append((depth, pct, [not np.array_equal(a, b) for a, b in zip(before, after)],
                        [q.requires_grad for q in model.parameters()], len(opt.param_groups[0]["params"])))
    return results


def test_composer_layer_freezing():
    res = _freeze_run(lucid)
    # 4 parametrised leaf layers, the last never frozen: depth = int(pct * 3)
    assert [(d, pytest.approx(p)) for d, p, *_ in res] == [(0, 0.0), (0, 0.25), (2, 0.75)]
    assert res[0][2] == [True] * 8 and res[0][4] == 8
    assert res[2][2] == [False] * 4 + [True] * 4  # frozen layers no longer move (no momentum either)
    assert res[2][3] == [False] * 4 + [True] * 4  # nor compute gradients
    assert res[2][4] == 4


def test_composer_layer_freezing_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = _freeze_run(lucid), _freeze_run(torch)
    assert [(r[0], r[2], r[3], r[4]) for r in a] == [(r[0], r[2], r[3], r[4]) for r in b]


# --------------------------------------------------------------------------- optimizer fixes found on the way

def test_optimizer_group_dict_shared_with_a_wrapper():
    """SAMOptimizer passes ``base_optimizer.param_groups`` to ``Optimizer.__init__``: as in PyTorch, the
    group dicts are the caller's own, so an lr set through the wrapper (a scheduler attached to it)
    is the lr the base optimizer steps with. Lucid used to copy each group."""
    p = composer_page(lucid)
    w = lucid.nn.Parameter(lucid.tensor([1.0, -2.0]))
    base = lucid.optim.SGD([w], lr=0.1)
    sam = p.SAMOptimizer(base, rho=0.05)
    assert sam.param_groups[0] is base.param_groups[0] and base.param_groups[0]["rho"] == 0.05
    sam.param_groups[0]["lr"] = 0.5
    w.grad = lucid.tensor([1.0, 3.0])
    base.step()
    np.testing.assert_allclose(_np(w), [1.0 - 0.5, -2.0 - 1.5], rtol=1e-6)
    group = {"params": [w], "lr": 0.2}
    opt = lucid.optim.SGD([group], lr=0.1, momentum=0.3)
    assert opt.param_groups[0] is group and group["momentum"] == 0.3


def test_optimizer_load_state_dict_drops_scheduler_keys():
    """``load_state_dict`` replaces the groups by the saved ones, as PyTorch's: the ``initial_lr`` a
    scheduler added after the save goes (LRFinder.reset then lets a new scheduler attach).
    Lucid used to merge the saved group into the live one, keeping ``initial_lr``."""
    model = lucid.nn.Linear(2, 1)
    opt = lucid.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
    saved = copy.deepcopy(opt.state_dict())
    sched = lucid.optim.lr_scheduler.ExponentialLR(opt, 0.5)
    opt.step()
    sched.step()
    assert opt.param_groups[0]["initial_lr"] == 0.1 and opt.param_groups[0]["lr"] == pytest.approx(0.05)
    group = opt.param_groups[0]
    opt.load_state_dict(saved)
    assert "initial_lr" not in opt.param_groups[0] and opt.param_groups[0]["lr"] == 0.1
    assert opt.param_groups[0]["momentum"] == 0.5 and opt.param_groups[0] is group
    assert opt.param_groups[0]["params"] == list(model.parameters())
    lucid.optim.lr_scheduler.ExponentialLR(opt, 0.5)  # attaches again: initial_lr is the restored lr
    assert opt.param_groups[0]["initial_lr"] == 0.1


# --------------------------------------------------------------------------- stochastic depth, channels_last

def composer_depth_page(torch):
    nn = torch.nn

    class Bottleneck(nn.Module):  # torchvision.models.resnet.Bottleneck's layers and forward
        expansion = 4

        def __init__(self, inplanes, planes, stride=1, downsample=None):
            super().__init__()
            self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.conv3 = nn.Conv2d(planes, planes * self.expansion, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(planes * self.expansion)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = downsample
            self.stride = stride

        def forward(self, x):
            identity = x

            out = self.conv1(x)
            out = self.bn1(out)
            out = self.relu(out)

            out = self.conv2(out)
            out = self.bn2(out)
            out = self.relu(out)

            out = self.conv3(out)
            out = self.bn3(out)

            if self.downsample is not None:
                identity = self.downsample(x)

            out += identity
            out = self.relu(out)

            return out

    # stochastic_depth/stochastic_layers.py
    def block_stochastic_forward(self, x):
        identity = x

        sample = (not self.training) or bool(torch.bernoulli(1 - self.drop_rate))

        if sample:
            out = self.conv1(x)
            out = self.bn1(out)
            out = self.relu(out)

            out = self.conv2(out)
            out = self.bn2(out)
            out = self.relu(out)

            out = self.conv3(out)
            out = self.bn3(out)

            if not self.training:
                out = out * (1 - self.drop_rate)

            if self.downsample is not None:
                identity = self.downsample(x)

            out += identity
            out = self.relu(out)
        else:
            if self.downsample is not None:
                out = self.relu(self.downsample(identity))
            else:
                out = identity
        return out

    def _sample_drop(x, sample_drop_rate: float, is_training: bool):
        keep_probability = (1 - sample_drop_rate)
        if not is_training:
            return x * keep_probability
        rand_dim = [x.shape[0]] + [1] * len(x.shape[1:])
        sample_mask = keep_probability + torch.rand(rand_dim, dtype=x.dtype, device=x.device)
        sample_mask.floor_()  # binarize
        x *= sample_mask
        return x

    def sample_stochastic_forward(self, x):
        identity = x

        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)

        out = self.conv2(out)
        out = self.bn2(out)
        out = self.relu(out)

        out = self.conv3(out)
        out = self.bn3(out)

        if self.downsample is not None:
            identity = self.downsample(x)

        if self.drop_rate:
            out = _sample_drop(out, self.drop_rate, self.training)
        out += identity

        return self.relu(out)

    def make_resnet_bottleneck_stochastic(module, module_index, module_count, drop_rate, drop_distribution,
                                          stochastic_method):
        if drop_distribution == 'linear':
            drop_rate = ((module_index + 1) / module_count) * drop_rate
        module.drop_rate = torch.tensor(drop_rate)

        stochastic_func = block_stochastic_forward if stochastic_method == 'block' else sample_stochastic_forward
        module.forward = stochastic_func.__get__(module)  # Bind new forward function to ResNet Bottleneck Module

        return module

    class BlockStochasticModule(nn.Module):
        def __init__(self, main, residual=None, drop_rate: float = 0.2):
            super().__init__()
            self.drop_rate = torch.tensor(drop_rate)
            self.main = main
            self.residual = residual

        def forward(self, x):
            sample = (not self.training) or bool(torch.bernoulli(1 - self.drop_rate))
            # main side is the non-residual connection
            residual_result = x
            # residual side may or may not have any operations
            if self.residual:
                residual_result = self.residual(x)

            if sample:
                main_result = self.main(x)
                if not self.training:
                    main_result = main_result * (1 - self.drop_rate)
                residual_result = torch.add(main_result, residual_result)
            return residual_result

    # channels_last/channels_last.py
    def apply_channels_last(model) -> None:
        model.to(memory_format=torch.channels_last)  # type: ignore

    return SimpleNamespace(Bottleneck=Bottleneck, make_resnet_bottleneck_stochastic=make_resnet_bottleneck_stochastic,
                           _sample_drop=_sample_drop, BlockStochasticModule=BlockStochasticModule,
                           apply_channels_last=apply_channels_last)


_SD_X = np.abs(np.random.default_rng(80).standard_normal((4, 8, 3, 3))).astype(np.float32)


def _depth_run(torch, arrays=None):
    p = composer_depth_page(torch)
    blocks = [p.Bottleneck(8, 2) for _ in range(3)]
    arrays = [_random_state(b, 81 + i) for i, b in enumerate(blocks)] if arrays is None else arrays
    for b, a in zip(blocks, arrays):
        a = dict(a)
        for k in a:
            if k.endswith("running_var"):
                a[k] = np.abs(a[k]) + 0.5
            if k.endswith("num_batches_tracked"):
                a[k] = np.array(0)
        _load(torch, b, a)
    x = torch.tensor(_SD_X)
    plain = [b.eval()(x) for b in blocks]
    block = p.make_resnet_bottleneck_stochastic(blocks[0], 1, 4, 0.4, "linear", "block")
    sample = p.make_resnet_bottleneck_stochastic(blocks[1], 0, 4, 0.5, "uniform", "sample")
    dropped = p.make_resnet_bottleneck_stochastic(blocks[2], 3, 4, 1.0, "linear", "block")
    out = SimpleNamespace(arrays=arrays, plain=plain, block_rate=block.drop_rate, eval_block=block(x),
                          eval_sample=sample(x))
    dropped.train()
    out.train_dropped = dropped(x)  # drop_rate 1: bernoulli(0) skips the block
    sample.train()
    torch.manual_seed(5)
    out.train_sample = sample(x)
    torch.manual_seed(5)
    out.rand = torch.rand([4, 1, 1, 1], dtype=x.dtype)
    main = torch.nn.Sequential(torch.nn.Conv2d(8, 8, 1), torch.nn.Tanh())
    _load(torch, main, {"0.weight": arrays[0]["conv1.weight"].repeat(4, 0), "0.bias": np.zeros(8, np.float32)})
    bsm = p.BlockStochasticModule(main, drop_rate=0.25)
    out.bsm_eval = bsm.eval()(x)
    bsm.drop_rate = torch.tensor(0.0)
    out.bsm_keep = bsm.train()(x)
    bsm.drop_rate = torch.tensor(1.0)
    out.bsm_drop = bsm(x)
    out.main = main(x)
    conv = torch.nn.Sequential(torch.nn.Conv2d(8, 4, 3, padding=1), torch.nn.BatchNorm2d(4))
    _load(torch, conv, {**{f"0.{k}": v for k, v in _random_state(torch.nn.Conv2d(8, 4, 3), 90).items()},
                        "1.weight": np.ones(4, np.float32), "1.bias": np.zeros(4, np.float32),
                        "1.running_mean": np.zeros(4, np.float32), "1.running_var": np.ones(4, np.float32),
                        "1.num_batches_tracked": np.array(0)})
    conv.eval()
    out.before_cl = conv(x)
    p.apply_channels_last(conv)
    out.weight_stride = conv[0].weight.stride()
    out.weight_cl = conv[0].weight.is_contiguous(memory_format=torch.channels_last)
    out.after_cl = conv(x.to(memory_format=torch.channels_last))
    return out


def test_composer_stochastic_depth_and_channels_last():
    r = _depth_run(lucid)
    x = _SD_X.astype(np.float64)
    assert float(r.block_rate.item()) == pytest.approx(0.2)  # linear: (1 + 1) / 4 * 0.4
    # eval: the block's residual branch is scaled by the keep probability: relu(keep * f(x) + x)
    p0 = _np(r.plain[0]).astype(np.float64)
    # recover f(x) where the plain output is positive, compare relu(0.8 f + x) there
    pos = p0 > 0
    fx = p0 - x
    np.testing.assert_allclose(_np(r.eval_block)[pos], np.maximum(0.8 * fx + x, 0)[pos], rtol=1e-5, atol=1e-5)
    p1 = _np(r.plain[1]).astype(np.float64)
    pos1 = p1 > 0
    np.testing.assert_allclose(_np(r.eval_sample)[pos1], np.maximum(0.5 * (p1 - x) + x, 0)[pos1], rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_array_equal(_np(r.train_dropped), _SD_X)  # skipped: the identity itself
    # sample drop in training: mask floor(keep + U) per sample, drawn with the same seed
    mask = np.floor(0.5 + _np(r.rand)).reshape(4)
    assert set(mask.tolist()) <= {0.0, 1.0}
    for i in range(4):
        got = _np(r.train_sample)[i]
        if mask[i] == 0:
            np.testing.assert_allclose(got, x[i], rtol=1e-6)  # relu(0 + x) = x for x >= 0
        else:
            assert not np.allclose(got, x[i])
    np.testing.assert_allclose(_np(r.bsm_eval), 0.75 * _np(r.main) + x, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_np(r.bsm_keep), _np(r.main) + x, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(_np(r.bsm_drop), _SD_X)
    assert r.weight_stride == (72, 1, 24, 8) and r.weight_cl is True
    np.testing.assert_allclose(_np(r.after_cl), _np(r.before_cl), rtol=1e-5, atol=1e-5)


def test_composer_stochastic_depth_and_channels_last_torch_parity():
    torch = pytest.importorskip("torch")
    a = _depth_run(lucid)
    b = _depth_run(torch, a.arrays)
    for name in ("eval_block", "eval_sample", "train_dropped", "bsm_eval", "bsm_keep", "before_cl", "after_cl"):
        np.testing.assert_allclose(_np(getattr(a, name)), getattr(b, name).detach().numpy(), rtol=1e-5,
                                   atol=1e-5, err_msg=name)
    assert a.weight_stride == b.weight_stride and a.weight_cl == b.weight_cl
