"""Layers and functions fed device tensors while the default device stays the CPU (the usual
setup: ``model.to("cuda")``, data ``.to("cuda")``): nothing may be made on the default device
beside them (an initial state, a mask, noise), so each output is on the device and its backward
runs. Found by this sweep: LSTM/GRU zero states, attention masks, rrelu/gumbel noise, the causal
mask of ``generate_square_subsequent_mask(device=)``.
"""
import os

import numpy as np
import pytest

import lucid
import lucid.nn as nn
import lucid.nn.functional as F
from lucid.testing import strict_device

strict_device.enable()
# LUCID_SWEEP_DEVICE=cuda runs the sweep on a GPU (scripts/gpu_check.sh). On the stand-in it runs
# on strict:1 while strict:0 stays current (NOTE [Several devices]).
D = os.environ.get("LUCID_SWEEP_DEVICE", "strict:1")
AVAILABLE = D.startswith("strict") or lucid.cuda.is_available()
WHERE = None
if AVAILABLE:
    from lucid._core.backend import check_device

    WHERE = check_device(D)  # (loads the CUDA backend)
    if not D.startswith("strict"):
        strict_device.allow_test_host_reads("cuda")  # the test reads nothing back itself; backward may need it


def x(*s):
    return lucid.tensor(np.random.default_rng(0).standard_normal(s).astype(np.float32), device=D, requires_grad=True)


def _padding_mask(rows):
    return lucid.tensor(np.array(rows, bool), device=D)


CASES = {
    "Transformer": lambda: nn.Transformer(8, 2, 1, 1, 16).to(D)(
        x(5, 2, 8), x(4, 2, 8), tgt_mask=nn.Transformer.generate_square_subsequent_mask(4, device=D),
        src_key_padding_mask=_padding_mask([[False] * 5, [False] * 4 + [True]])),
    "TransformerEncoder causal": lambda: nn.TransformerEncoder(
        nn.TransformerEncoderLayer(8, 2, 16, batch_first=True), 2).to(D)(
        x(2, 5, 8), mask=nn.Transformer.generate_square_subsequent_mask(5, device=D), is_causal=True),
    "sdpa causal": lambda: F.scaled_dot_product_attention(x(2, 3, 4), x(2, 3, 4), x(2, 3, 4), is_causal=True),
    "sdpa boolmask": lambda: F.scaled_dot_product_attention(
        x(2, 3, 4), x(2, 5, 4), x(2, 5, 4), attn_mask=_padding_mask(np.tri(3, 5, dtype=bool))),
    "MHA": lambda: nn.MultiheadAttention(8, 2).to(D)(
        x(5, 2, 8), x(5, 2, 8), x(5, 2, 8), key_padding_mask=_padding_mask(np.zeros((2, 5))))[0],
    "rrelu": lambda: F.rrelu(x(4, 3), training=True),
    "gumbel": lambda: F.gumbel_softmax(x(4, 3), hard=True),
    "dropout": lambda: nn.Dropout(0.3)(x(4, 3)),
    "dropout2d": lambda: nn.Dropout2d(0.3)(x(2, 3, 4, 4)),
    "alphadropout": lambda: nn.AlphaDropout(0.3)(x(4, 3)),
    "featurealpha": lambda: nn.FeatureAlphaDropout(0.3)(x(2, 3, 4)),
    "maxpool": lambda: nn.MaxPool2d(2)(x(2, 3, 4, 4)),
    "maxpool idx": lambda: F.max_pool2d(x(2, 3, 4, 4), 2, return_indices=True)[0],
    "avgpool": lambda: nn.AvgPool2d(2, ceil_mode=True, count_include_pad=False, padding=1)(x(2, 3, 5, 5)),
    "adaptivemax": lambda: nn.AdaptiveMaxPool2d((2, 3))(x(2, 3, 5, 7)),
    "adaptiveavg": lambda: nn.AdaptiveAvgPool2d((2, 3))(x(2, 3, 5, 7)),
    "lppool": lambda: nn.LPPool2d(2, 2)(x(2, 3, 4, 4)),
    "upsample bilinear": lambda: nn.Upsample(scale_factor=2, mode="bilinear")(x(1, 2, 3, 3)),
    "upsample nearest": lambda: F.interpolate(x(1, 2, 3, 3), size=(5, 4), mode="nearest"),
    "upsample bicubic": lambda: F.interpolate(x(1, 2, 3, 3), size=(5, 4), mode="bicubic", align_corners=True),
    "interp area": lambda: F.interpolate(x(1, 2, 4, 4), size=(2, 2), mode="area"),
    "pixelshuffle": lambda: nn.PixelShuffle(2)(x(1, 8, 2, 2)),
    "channel shuffle": lambda: nn.ChannelShuffle(2)(x(1, 4, 2, 2)),
    "pad reflect": lambda: F.pad(x(1, 2, 4, 4), (1, 2, 1, 1), mode="reflect"),
    "pad replicate": lambda: F.pad(x(1, 2, 4, 4), (1, 2, 1, 1), mode="replicate"),
    "pad circular": lambda: F.pad(x(1, 2, 4, 4), (1, 2, 1, 1), mode="circular"),
    "unfold": lambda: F.unfold(x(1, 2, 4, 4), 2),
    "fold": lambda: F.fold(x(1, 8, 9), (4, 4), 2),
    "grid_sample": lambda: F.grid_sample(x(1, 1, 3, 3), x(1, 2, 2, 2).tanh(), align_corners=False),
    "embedding maxnorm": lambda: nn.Embedding(5, 3, max_norm=1.0).to(D)(lucid.tensor([[1, 2], [2, 4]], device=D)),
    "one_hot": lambda: F.one_hot(lucid.tensor([1, 0, 2], device=D), 3).float() * 1.0,
    "cosine sim": lambda: F.cosine_similarity(x(3, 4), x(3, 4)),
    "normalize": lambda: F.normalize(x(3, 4)),
    "pdist": lambda: F.pdist(x(4, 3)),
    "cdist": lambda: lucid.cdist(x(4, 3), x(5, 3)),
    "triplet": lambda: nn.TripletMarginLoss()(x(3, 4), x(3, 4), x(3, 4)),
    "ctc": lambda: F.ctc_loss(x(6, 2, 4).log_softmax(2), lucid.tensor([[1, 2], [3, 1]], device=D), [6, 6], [2, 2]),
    "kldiv": lambda: F.kl_div(x(3, 4).log_softmax(1), x(3, 4).softmax(1), reduction="batchmean"),
    "huber": lambda: F.huber_loss(x(3, 4), x(3, 4)),
    "smoothl1": lambda: F.smooth_l1_loss(x(3, 4), x(3, 4)),
    "poissonnll": lambda: F.poisson_nll_loss(x(3, 4), x(3, 4).abs()),
    "bcelogits posw": lambda: F.binary_cross_entropy_with_logits(x(3, 4), x(3, 4).sigmoid(), pos_weight=x(4).abs()),
    "cross_entropy probs": lambda: F.cross_entropy(x(3, 4), x(3, 4).softmax(1), label_smoothing=0.1),
    "hinge": lambda: F.hinge_embedding_loss(x(3, 4), lucid.tensor(np.where(np.eye(3, 4) > 0, 1.0, -1.0), device=D)),
    "cosine emb": lambda: F.cosine_embedding_loss(x(3, 4), x(3, 4), lucid.tensor([1.0, -1.0, 1.0], device=D)),
    "margin ranking": lambda: F.margin_ranking_loss(x(3), x(3), lucid.tensor([1.0, -1.0, 1.0], device=D)),
    "softmin/logsigmoid": lambda: F.softmin(x(3, 4), 1) + F.logsigmoid(x(3, 4)),
    "glu/silu/mish/gelu": lambda: (F.glu(x(3, 4)).sum() + F.silu(x(3)).sum() + F.mish(x(3)).sum()
                                   + F.gelu(x(3), approximate="tanh").sum()),
    "hardtanh etc": lambda: (F.hardtanh(x(3)) + F.hardswish(x(3)) + F.elu(x(3)) + F.selu(x(3)) + F.celu(x(3))
                             + F.softplus(x(3)) + F.threshold(x(3), 0.1, 2.0)),
    "prelu": lambda: nn.PReLU(3).to(D)(x(2, 3, 4)),
    "batchnorm eval": lambda: nn.BatchNorm1d(3).to(D).eval()(x(4, 3)),
    "batchnorm mom None": lambda: nn.BatchNorm1d(3, momentum=None).to(D)(x(4, 3)),
    "instancenorm track": lambda: nn.InstanceNorm1d(3, track_running_stats=True).to(D)(x(2, 3, 4)),
    "layernorm/groupnorm/rms": lambda: (nn.LayerNorm(4).to(D)(x(2, 4)).sum()
                                        + nn.GroupNorm(2, 4).to(D)(x(2, 4, 3)).sum()
                                        + nn.RMSNorm(4).to(D)(x(2, 4)).sum()),
    "localresponse": lambda: nn.LocalResponseNorm(2)(x(2, 4, 3)),
    "conv3d/padding same": lambda: (nn.Conv3d(1, 2, 3, padding="same").to(D)(x(1, 1, 4, 4, 4)).sum()
                                    + nn.Conv1d(2, 2, 3, padding="same", padding_mode="reflect").to(D)(
                                        x(1, 2, 5)).sum()),
    "convT out pad": lambda: nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1, output_padding=1).to(D)(x(1, 2, 3, 3)),
    "bilinear": lambda: nn.Bilinear(3, 4, 2).to(D)(x(5, 3), x(5, 4)),
    "weight_norm": lambda: nn.utils.parametrizations.weight_norm(nn.Linear(3, 2)).to(D)(x(4, 3)),
}

@pytest.mark.skipif(not AVAILABLE, reason=f"no {D} device")
@pytest.mark.parametrize("name", sorted(CASES))
def test_device_inputs_give_device_outputs(name):
    out = CASES[name]()
    assert out.device == WHERE
    if out.requires_grad:
        out.float().sum().backward()


def _transform_cases():
    import lucid.func as func
    from lucid.autograd.functional import hessian, hvp, jacobian
    from lucid.utils.checkpoint import checkpoint

    xs = np.linspace(-1, 1, 4)
    w = lucid.tensor(np.arange(12.0).reshape(3, 4) / 10, device=D)

    def f(t):
        return (w @ t.sin()).tanh()

    def g(t):
        return (t.exp() * t).sum()

    def arg(rg=False):
        return lucid.tensor(xs, device=D, requires_grad=rg)

    ones = lucid.ones(4, device=D, dtype=lucid.float64)
    return {
        "jacrev": lambda: func.jacrev(f)(arg()),
        "jacrev chunked": lambda: func.jacrev(f, chunk_size=1)(arg()),
        "jacfwd": lambda: func.jacfwd(f)(arg()),
        "hessian": lambda: func.hessian(g)(arg()),
        "vmap(grad)": lambda: func.vmap(func.grad(g))(arg().reshape(2, 2)),
        "vjp": lambda: func.vjp(f, arg())[1](lucid.ones(3, device=D, dtype=lucid.float64))[0],
        "jvp": lambda: func.jvp(f, (arg(),), (ones,))[1],
        "linearize": lambda: func.linearize(f, arg())[1](ones),
        "vmap randomness": lambda: func.vmap(lambda t: t + lucid.randn(4, device=D, dtype=lucid.float64),
                                             randomness="different")(arg().expand(3, 4)),
        "autograd.jacobian": lambda: jacobian(f, arg()),
        "autograd.jacobian vectorized": lambda: jacobian(f, arg(), vectorize=True),
        "autograd.hessian": lambda: hessian(g, arg()),
        "autograd.hvp": lambda: hvp(g, arg(), ones)[1],
        "checkpoint": lambda: checkpoint(f, arg(True), use_reentrant=False),
    }


@pytest.mark.skipif(not AVAILABLE, reason=f"no {D} device")
@pytest.mark.parametrize("name", sorted(_transform_cases()))
def test_transforms_of_device_inputs_stay_on_the_device(name):
    out = _transform_cases()[name]()
    outs = out if isinstance(out, (tuple, list)) else (out,)
    assert {o.device for o in outs if isinstance(o, lucid.Tensor)} == {WHERE}
