"""labmlai/annotated_deep_learning_paper_implementations (``labml_nn``) run on Lucid (``import lucid as torch``),
fifteenth batch:

- ``capsule_networks``: ``Squash``, ``Router`` (dynamic routing through three ``einsum``s) and
  ``MarginLoss`` (``torch.eye(n)[labels]``), and ``mnist.py``'s ``MNISTCapsuleNetworkModel`` shrunk
  (11x11 images, 16/32 channels, 64 primary capsules) trained a few Adam steps.
- ``diffusion/ddpm``: ``unet.py``'s ``UNet`` (``TimeEmbedding``, ``ResidualBlock`` with its in-place
  ``h += ...``, ``AttentionBlock`` with ``permute(...).view(...)``, ``Down/Upsample``) and
  ``DenoiseDiffusion`` (``q_xt_x0``, ``q_sample``, ``p_sample``, ``loss``) with ``utils.gather``.
- ``normalization``: ``batch_channel_norm`` (``EstimatedBatchNorm`` reassigning its buffers,
  ``ChannelNorm``), ``weight_standardization`` (``torch.var_mean``) and its ``Conv2d``,
  ``group_norm``, ``instance_norm``, ``layer_norm``.
- ``graphs/gat`` and ``graphs/gatv2``: ``GraphAttentionLayer``/``GraphAttentionV2Layer``
  (``repeat``/``repeat_interleave``, ``masked_fill`` with ``-inf``) and ``gat/experiment.py``'s
  ``GAT`` and training loop on a synthetic graph (dropout 0: the experiment's 0.6 would tie the
  run to each library's random stream).
- ``transformers``: ``mha.py``'s ``MultiHeadAttention`` (``scores *= self.scale`` on an ``einsum``),
  ``rope`` (``RotaryPositionalEmbeddings``, ``RotaryPEMultiHeadAttention``) and ``alibi``
  (``get_slopes``, ``get_biases``, ``AlibiMultiHeadAttention``).
- ``optimizers``: ``GenericAdaptiveOptimizer`` and ``WeightDecay``, ``Adam``, ``AMSGrad``
  (``torch.maximum(..., out=)``), ``RAdam``, ``AdaBelief`` and ``Noam``.
- ``sampling``: ``GreedySampler``, ``TemperatureSampler`` (``Categorical``), ``TopKSampler``
  (``scatter_``) and ``NucleusSampler`` (``sorted_log_probs[~nucleus] = -inf``).
- ``rl/ppo``: ``gae.GAE``, ``ClippedPPOLoss``, ``ClippedValueFunctionLoss`` and ``experiment.py``'s
  ``Trainer.sample``/``train``/``_calc_loss`` with a small MLP ``Model`` on a NumPy toy game
  (learning rate 3e-2 instead of 2.5e-4, for 6 updates instead of 10000).
- ``lora`` (``Linear``, ``Embedding``) and ``gan/wasserstein`` (``DiscriminatorLoss``,
  ``GeneratorLoss``, ``gradient_penalty.GradientPenalty`` through ``autograd.grad(create_graph=True)``),
  with ``gan/dcgan``'s ``Generator``/``Discriminator`` (shrunk channels; ``Module.apply`` of
  ``_weights_init``; in-place ``LeakyReLU`` after training-mode ``BatchNorm2d``) under
  ``gradient_penalty/experiment.py``'s critic loss: a double backward through all of them.
- ``lstm`` (``LSTMCell``, ``LSTM``) and ``hypernetworks/hyper_lstm.py`` (``HyperLSTMCell``,
  ``HyperLSTM``: ``nn.ParameterList``, ``chunk``, ``torch.unbind`` of a carried state).
- ``transformers/switch`` (``SwitchFeedForward``: ``torch.max`` routing, ``nonzero(as_tuple=True)``,
  ``x.new_tensor``, token dropping over capacity through ``randperm``, ``final_output[idx, :] = ...``;
  the switch transformer and ``experiment.py``'s load-balancing loss) with ``feed_forward.FeedForward``.
- ``transformers/xl/relative_mha.py`` (``shift_right``'s ``view`` of a ``cat``,
  ``RelativeMultiHeadAttention``) and ``transformers/feedback`` (``FeedbackTransformer``, and
  ``FeedbackTransformerKV`` with the custom ``StackFunction``: a view of shared memory returned from
  ``forward``, gradients accumulated in place in ``backward``, ``memory.data[n] = ...``).
- ``sketch_rnn``: ``StrokesDataset``, ``BivariateGaussianMixture`` (``MultivariateNormal`` from a
  covariance matrix, in-place ``set_temperature``), ``EncoderRNN`` (bidirectional ``nn.LSTM``;
  ``einops.rearrange(hidden, 'fb b h -> b (fb h)')`` written as ``permute``/``reshape``),
  ``DecoderRNN``, ``ReconstructionLoss``, ``KLDivLoss``, ``Sampler._sample_step`` and the training step.

Data are synthetic and sizes tiny. Each page is a function of the module it is handed as
``torch``; the parity tests run the same text on PyTorch with the same weights, set from NumPy
through ``_set_params`` (in ``named_parameters()`` order, identical in both libraries).

Adapted: ``labml_helpers.module.Module`` is ``nn.Module`` (the pages that override ``__call__``
keep doing so), ``labml.tracker``/``monit``/``experiment`` calls and configs are dropped; the
capsule model and the U-Net are shrunk (the hard-coded ``32 * 6 * 6`` capsule count and the
28x28 decoder follow the smaller sizes); the GAT trainer uses a synthetic graph and the
experiment's ``Adam`` with ``weight_decay=5e-4`` at ``lr=2e-2`` (4x its 5e-3, for 30 epochs); the PPO
``Model`` is a two-layer MLP on a 4-state game played by NumPy in-process instead of Atari workers.
``GradientPenalty`` passes ``inputs=[x]`` where the page passes a bare ``x`` (Lucid's
``autograd.grad`` returns a bare gradient for a bare input, README "Differences from PyTorch",
which the page's ``gradients, *_ = ...`` would unpack into its first row: see
``test_gradient_penalty_with_a_bare_input``). The DCGAN critic's loss is the experiment's in
training mode; the sketch sampler stops before plotting; the encoder's ``z`` is
``mu + sigma * noise`` with a fixed noise where both libraries must agree (the page draws it with
``torch.normal``). ``AdaBelief`` hands its arguments to ``RAdam.__init__`` positionally one place
off (``amsgrad`` lands in ``optimized_update``, ``degenerate_to_sgd`` in ``amsgrad``, ``defaults``
in ``degenerated_to_sgd``); kept as written: the NumPy reference follows those effective settings.
Two slips of the pages themselves, the same on PyTorch: ``shift_right``'s docstring example ends
in ``[9, 0, 7]`` where the code gives ``[6, 0, 7]``, and ``rope``'s ``_test_rotary`` (``d=3`` on
4 features) cannot broadcast. The U-Net's ``AttentionBlock`` runs here with ``n_heads=2`` (its
``res.view`` after an ``einsum``); PyTorch's ``einsum`` returns a permuted, non-contiguous result
there and that ``view`` fails on PyTorch (the page only uses one head).

Found on the way and fixed: ``x[basic index] = cpu_tensor`` on a tensor of another device (the
strict stand-in, CuPy) failed where PyTorch copies (``StrokesDataset`` writes ``torch.from_numpy``
rows into a default-device tensor; ``test_setitem_copies_a_tensor_from_another_device``).
"""
import math
from importlib import import_module

import numpy as np
import pytest

import lucid
import lucid.nn  # noqa: F401
import lucid.optim  # noqa: F401


def _np(t):
    return t.detach().cpu().numpy().copy()


def _set_params(torch, module, seed, scale=1.0, dtype=None):
    """Deterministic weights from NumPy, the same in both libraries: matrices ~ N(0, 1/fan_in),
    1-D weights/scales/gains ~ 1 + 0.1 N, other 1-D parameters ~ 0.1 N."""
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            shape = tuple(p.shape)
            if len(shape) > 1:
                fan_in = int(np.prod(shape[1:]))
                v = rng.standard_normal(shape) * scale / math.sqrt(fan_in)
            elif name.split(".")[-1] in ("weight", "scale", "gain"):
                v = 1 + 0.1 * rng.standard_normal(shape)
            else:
                v = 0.1 * rng.standard_normal(shape)
            p.copy_(torch.tensor(v, dtype=dtype or p.dtype))


# ---------------------------------------------------------------------------------------------
# capsule_networks/__init__.py and mnist.py


def capsule_page(torch, data, target, steps=12, seed=0):
    nn = torch.nn
    F = torch.nn.functional

    class Squash(nn.Module):
        def __init__(self, epsilon=1e-8):
            super().__init__()
            self.epsilon = epsilon

        def __call__(self, s: torch.Tensor):
            s2 = (s ** 2).sum(dim=-1, keepdims=True)
            return (s2 / (1 + s2)) * (s / torch.sqrt(s2 + self.epsilon))

    class Router(nn.Module):
        def __init__(self, in_caps: int, out_caps: int, in_d: int, out_d: int, iterations: int):
            super().__init__()
            self.in_caps = in_caps
            self.out_caps = out_caps
            self.iterations = iterations
            self.softmax = nn.Softmax(dim=1)
            self.squash = Squash()
            self.weight = nn.Parameter(torch.randn(in_caps, out_caps, in_d, out_d), requires_grad=True)

        def __call__(self, u: torch.Tensor):
            u_hat = torch.einsum('ijnm,bin->bijm', self.weight, u)
            b = u.new_zeros(u.shape[0], self.in_caps, self.out_caps)
            v = None
            for i in range(self.iterations):
                c = self.softmax(b)
                s = torch.einsum('bij,bijm->bjm', c, u_hat)
                v = self.squash(s)
                a = torch.einsum('bjm,bijm->bij', v, u_hat)
                b = b + a
            return v

    class MarginLoss(nn.Module):
        def __init__(self, *, n_labels: int, lambda_: float = 0.5, m_positive: float = 0.9, m_negative: float = 0.1):
            super().__init__()
            self.m_negative = m_negative
            self.m_positive = m_positive
            self.lambda_ = lambda_
            self.n_labels = n_labels

        def __call__(self, v: torch.Tensor, labels: torch.Tensor):
            v_norm = torch.sqrt((v ** 2).sum(dim=-1))
            labels = torch.eye(self.n_labels, device=labels.device)[labels]
            loss = labels * F.relu(self.m_positive - v_norm) + \
                   self.lambda_ * (1.0 - labels) * F.relu(v_norm - self.m_negative)
            return loss.sum(dim=-1).mean()

    # mnist.py's model, shrunk: 11x11 images, conv1 1->16 (3x3), conv2 16->4*8 (3x3, stride 2)
    # giving 4 * 4 * 4 primary capsules of 8 features; decoder 160 -> 32 -> 64 -> 121
    class MNISTCapsuleNetworkModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(in_channels=1, out_channels=16, kernel_size=3, stride=1)
            self.conv2 = nn.Conv2d(in_channels=16, out_channels=4 * 8, kernel_size=3, stride=2, padding=0)
            self.squash = Squash()
            self.digit_capsules = Router(4 * 4 * 4, 10, 8, 16, 3)
            self.decoder = nn.Sequential(
                nn.Linear(16 * 10, 32),
                nn.ReLU(),
                nn.Linear(32, 64),
                nn.ReLU(),
                nn.Linear(64, 121),
                nn.Sigmoid()
            )

        def forward(self, data: torch.Tensor):
            x = F.relu(self.conv1(data))
            x = self.conv2(x)
            caps = x.view(x.shape[0], 8, 4 * 4 * 4).permute(0, 2, 1)
            caps = self.squash(caps)
            caps = self.digit_capsules(caps)
            with torch.no_grad():
                pred = (caps ** 2).sum(-1).argmax(-1)
                mask = torch.eye(10, device=data.device)[pred]
            reconstructions = self.decoder((caps * mask[:, :, None]).view(x.shape[0], -1))
            reconstructions = reconstructions.view(-1, 1, 11, 11)
            return caps, reconstructions, pred

    out = {}
    rng = np.random.default_rng(seed + 1)
    # the modules on their own, float64
    s = torch.tensor(rng.standard_normal((2, 5, 4)) * 2, dtype=torch.float64)
    out["squash"] = _np(Squash()(s))
    router = Router(3, 2, 4, 3, 3).double()
    _set_params(torch, router, seed + 2)
    u = torch.tensor(rng.standard_normal((2, 3, 4)), dtype=torch.float64)
    out["router_w"] = _np(router.weight)
    out["router_u"] = _np(u)
    out["router"] = _np(router(u))
    v = torch.tensor(rng.standard_normal((4, 10, 16)) * 0.2, dtype=torch.float64)
    lab = torch.tensor([0, 3, 9, 3])
    out["margin_v"] = _np(v)
    out["margin"] = MarginLoss(n_labels=10)(v, lab).item()
    if torch.__name__ == "lucid":
        functional_call = import_module(torch.__name__ + ".func").functional_call
        uu = u.clone().requires_grad_()
        ww = router.weight.detach().clone().requires_grad_()
        out["gc_router"] = torch.autograd.gradcheck(lambda x, w: MarginLoss(n_labels=2)(
            functional_call(router, {"weight": w}, (x,)), torch.tensor([1, 0])), (uu, ww))

    # mnist.py's step with the model shrunk
    model = MNISTCapsuleNetworkModel()
    _set_params(torch, model, seed + 3)
    with torch.no_grad():  # the Router's weight at the scale of the page's torch.randn
        model.digit_capsules.weight.copy_(torch.tensor(
            np.random.default_rng(seed + 4).standard_normal((64, 10, 8, 16)) * 0.5, dtype=torch.float32))
    reconstruction_loss = nn.MSELoss()
    margin_loss = MarginLoss(n_labels=10)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    data, target = torch.tensor(data), torch.tensor(target)
    losses, correct = [], []
    for _ in range(steps):
        model.train(True)
        caps, reconstructions, pred = model(data)
        loss = margin_loss(caps, target) + 0.0005 * reconstruction_loss(reconstructions, data)
        losses.append(loss.item())
        correct.append(pred.eq(target).sum().item())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    out["losses"] = losses
    out["correct"] = correct
    out["caps_norm_max"] = float(_np(caps).__pow__(2).sum(-1).max() ** 0.5)
    out["recon_shape"] = tuple(reconstructions.shape)
    return out


def _capsule_data():
    rng = np.random.default_rng(11)
    return (rng.random((8, 1, 11, 11)).astype(np.float32), rng.integers(0, 10, 8))


def _np_squash(s, eps=1e-8):
    s2 = (s ** 2).sum(-1, keepdims=True)
    return s2 / (1 + s2) * s / np.sqrt(s2 + eps)


def _np_router(w, u, iters=3):
    u_hat = np.einsum('ijnm,bin->bijm', w, u)
    b = np.zeros(u.shape[:2] + (w.shape[1],))
    for _ in range(iters):
        c = np.exp(b - b.max(1, keepdims=True))
        c = c / c.sum(1, keepdims=True)
        v = _np_squash(np.einsum('bij,bijm->bjm', c, u_hat))
        b = b + np.einsum('bjm,bijm->bij', v, u_hat)
    return v


def test_capsule_networks():
    data, target = _capsule_data()
    r = capsule_page(lucid, data, target)
    s = np.random.default_rng(1).standard_normal((2, 5, 4)) * 2
    np.testing.assert_allclose(r["squash"], _np_squash(s), rtol=1e-12)
    # squash keeps the direction and maps the length |s| to |s|^2 / (1 + |s|^2) < 1
    n = np.linalg.norm(s, axis=-1)
    np.testing.assert_allclose(np.linalg.norm(r["squash"], axis=-1), n ** 2 / (1 + n ** 2), rtol=1e-7)
    assert np.linalg.norm(r["squash"], axis=-1).max() < 1
    np.testing.assert_allclose(r["router"], _np_router(r["router_w"], r["router_u"]), rtol=1e-10, atol=1e-12)
    vn = np.linalg.norm(r["margin_v"], axis=-1)
    T = np.eye(10)[[0, 3, 9, 3]]
    expect = (T * np.maximum(0, 0.9 - vn) + 0.5 * (1 - T) * np.maximum(0, vn - 0.1)).sum(-1).mean()
    assert r["margin"] == pytest.approx(expect, rel=1e-12)
    assert r["gc_router"]
    # the shrunk model: 10 digit capsules of 16 features, lengths below 1, loss down by 10%
    assert r["recon_shape"] == (8, 1, 11, 11) and r["caps_norm_max"] < 1
    assert r["losses"][-1] < 0.94 * r["losses"][0]  # 12 Adam steps at the page's lr=1e-3


def test_capsule_networks_torch_parity():
    torch = pytest.importorskip("torch")
    data, target = _capsule_data()
    r, t = capsule_page(lucid, data, target), capsule_page(torch, data, target)
    for k in ("squash", "router"):
        np.testing.assert_allclose(r[k], t[k], rtol=1e-10, atol=1e-12)
    assert r["margin"] == pytest.approx(t["margin"], rel=1e-12)
    np.testing.assert_allclose(r["losses"], t["losses"], rtol=2e-4, atol=1e-5)
    assert r["correct"] == t["correct"]


# ---------------------------------------------------------------------------------------------
# diffusion/ddpm/unet.py, utils.py and __init__.py


def ddpm_classes(torch):
    nn = torch.nn
    F = torch.nn.functional

    class Swish(nn.Module):
        def forward(self, x):
            return x * torch.sigmoid(x)

    class TimeEmbedding(nn.Module):
        def __init__(self, n_channels: int):
            super().__init__()
            self.n_channels = n_channels
            self.lin1 = nn.Linear(self.n_channels // 4, self.n_channels)
            self.act = Swish()
            self.lin2 = nn.Linear(self.n_channels, self.n_channels)

        def forward(self, t: torch.Tensor):
            half_dim = self.n_channels // 8
            emb = math.log(10_000) / (half_dim - 1)
            emb = torch.exp(torch.arange(half_dim, device=t.device) * -emb)
            emb = t[:, None] * emb[None, :]
            emb = torch.cat((emb.sin(), emb.cos()), dim=1)
            emb = self.act(self.lin1(emb))
            emb = self.lin2(emb)
            return emb

    class ResidualBlock(nn.Module):
        def __init__(self, in_channels: int, out_channels: int, time_channels: int, n_groups: int = 32):
            super().__init__()
            self.norm1 = nn.GroupNorm(n_groups, in_channels)
            self.act1 = Swish()
            self.conv1 = nn.Conv2d(in_channels, out_channels, kernel_size=(3, 3), padding=(1, 1))
            self.norm2 = nn.GroupNorm(n_groups, out_channels)
            self.act2 = Swish()
            self.conv2 = nn.Conv2d(out_channels, out_channels, kernel_size=(3, 3), padding=(1, 1))
            if in_channels != out_channels:
                self.shortcut = nn.Conv2d(in_channels, out_channels, kernel_size=(1, 1))
            else:
                self.shortcut = nn.Identity()
            self.time_emb = nn.Linear(time_channels, out_channels)

        def forward(self, x: torch.Tensor, t: torch.Tensor):
            h = self.conv1(self.act1(self.norm1(x)))
            h += self.time_emb(t)[:, :, None, None]
            h = self.conv2(self.act2(self.norm2(h)))
            return h + self.shortcut(x)

    class AttentionBlock(nn.Module):
        def __init__(self, n_channels: int, n_heads: int = 1, d_k: int = None, n_groups: int = 32):
            super().__init__()
            if d_k is None:
                d_k = n_channels
            self.norm = nn.GroupNorm(n_groups, n_channels)
            self.projection = nn.Linear(n_channels, n_heads * d_k * 3)
            self.output = nn.Linear(n_heads * d_k, n_channels)
            self.scale = d_k ** -0.5
            self.n_heads = n_heads
            self.d_k = d_k

        def forward(self, x: torch.Tensor, t=None):
            _ = t
            batch_size, n_channels, height, width = x.shape
            x = x.view(batch_size, n_channels, -1).permute(0, 2, 1)
            qkv = self.projection(x).view(batch_size, -1, self.n_heads, 3 * self.d_k)
            q, k, v = torch.chunk(qkv, 3, dim=-1)
            attn = torch.einsum('bihd,bjhd->bijh', q, k) * self.scale
            attn = attn.softmax(dim=1)
            res = torch.einsum('bijh,bjhd->bihd', attn, v)
            res = res.view(batch_size, -1, self.n_heads * self.d_k)
            res = self.output(res)
            res += x
            res = res.permute(0, 2, 1).view(batch_size, n_channels, height, width)
            return res

    class DownBlock(nn.Module):
        def __init__(self, in_channels: int, out_channels: int, time_channels: int, has_attn: bool):
            super().__init__()
            self.res = ResidualBlock(in_channels, out_channels, time_channels)
            if has_attn:
                self.attn = AttentionBlock(out_channels)
            else:
                self.attn = nn.Identity()

        def forward(self, x: torch.Tensor, t: torch.Tensor):
            x = self.res(x, t)
            x = self.attn(x)
            return x

    class UpBlock(nn.Module):
        def __init__(self, in_channels: int, out_channels: int, time_channels: int, has_attn: bool):
            super().__init__()
            self.res = ResidualBlock(in_channels + out_channels, out_channels, time_channels)
            if has_attn:
                self.attn = AttentionBlock(out_channels)
            else:
                self.attn = nn.Identity()

        def forward(self, x: torch.Tensor, t: torch.Tensor):
            x = self.res(x, t)
            x = self.attn(x)
            return x

    class MiddleBlock(nn.Module):
        def __init__(self, n_channels: int, time_channels: int):
            super().__init__()
            self.res1 = ResidualBlock(n_channels, n_channels, time_channels)
            self.attn = AttentionBlock(n_channels)
            self.res2 = ResidualBlock(n_channels, n_channels, time_channels)

        def forward(self, x: torch.Tensor, t: torch.Tensor):
            x = self.res1(x, t)
            x = self.attn(x)
            x = self.res2(x, t)
            return x

    class Upsample(nn.Module):
        def __init__(self, n_channels):
            super().__init__()
            self.conv = nn.ConvTranspose2d(n_channels, n_channels, (4, 4), (2, 2), (1, 1))

        def forward(self, x: torch.Tensor, t: torch.Tensor):
            _ = t
            return self.conv(x)

    class Downsample(nn.Module):
        def __init__(self, n_channels):
            super().__init__()
            self.conv = nn.Conv2d(n_channels, n_channels, (3, 3), (2, 2), (1, 1))

        def forward(self, x: torch.Tensor, t: torch.Tensor):
            _ = t
            return self.conv(x)

    class UNet(nn.Module):
        def __init__(self, image_channels: int = 3, n_channels: int = 64,
                     ch_mults=(1, 2, 2, 4),
                     is_attn=(False, False, True, True),
                     n_blocks: int = 2):
            super().__init__()
            n_resolutions = len(ch_mults)
            self.image_proj = nn.Conv2d(image_channels, n_channels, kernel_size=(3, 3), padding=(1, 1))
            self.time_emb = TimeEmbedding(n_channels * 4)
            down = []
            out_channels = in_channels = n_channels
            for i in range(n_resolutions):
                out_channels = in_channels * ch_mults[i]
                for _ in range(n_blocks):
                    down.append(DownBlock(in_channels, out_channels, n_channels * 4, is_attn[i]))
                    in_channels = out_channels
                if i < n_resolutions - 1:
                    down.append(Downsample(in_channels))
            self.down = nn.ModuleList(down)
            self.middle = MiddleBlock(out_channels, n_channels * 4, )
            up = []
            in_channels = out_channels
            for i in reversed(range(n_resolutions)):
                out_channels = in_channels
                for _ in range(n_blocks):
                    up.append(UpBlock(in_channels, out_channels, n_channels * 4, is_attn[i]))
                out_channels = in_channels // ch_mults[i]
                up.append(UpBlock(in_channels, out_channels, n_channels * 4, is_attn[i]))
                in_channels = out_channels
                if i > 0:
                    up.append(Upsample(in_channels))
            self.up = nn.ModuleList(up)
            self.norm = nn.GroupNorm(8, n_channels)
            self.act = Swish()
            self.final = nn.Conv2d(in_channels, image_channels, kernel_size=(3, 3), padding=(1, 1))

        def forward(self, x: torch.Tensor, t: torch.Tensor):
            t = self.time_emb(t)
            x = self.image_proj(x)
            h = [x]
            for m in self.down:
                x = m(x, t)
                h.append(x)
            x = self.middle(x, t)
            for m in self.up:
                if isinstance(m, Upsample):
                    x = m(x, t)
                else:
                    s = h.pop()
                    x = torch.cat((x, s), dim=1)
                    x = m(x, t)
            return self.final(self.act(self.norm(x)))

    def gather(consts: torch.Tensor, t: torch.Tensor):
        c = consts.gather(-1, t)
        return c.reshape(-1, 1, 1, 1)

    class DenoiseDiffusion:
        def __init__(self, eps_model: nn.Module, n_steps: int, device: torch.device):
            super().__init__()
            self.eps_model = eps_model
            self.beta = torch.linspace(0.0001, 0.02, n_steps).to(device)
            self.alpha = 1. - self.beta
            self.alpha_bar = torch.cumprod(self.alpha, dim=0)
            self.n_steps = n_steps
            self.sigma2 = self.beta

        def q_xt_x0(self, x0: torch.Tensor, t: torch.Tensor):
            mean = gather(self.alpha_bar, t) ** 0.5 * x0
            var = 1 - gather(self.alpha_bar, t)
            return mean, var

        def q_sample(self, x0: torch.Tensor, t: torch.Tensor, eps=None):
            if eps is None:
                eps = torch.randn_like(x0)
            mean, var = self.q_xt_x0(x0, t)
            return mean + (var ** 0.5) * eps

        def p_sample(self, xt: torch.Tensor, t: torch.Tensor):
            eps_theta = self.eps_model(xt, t)
            alpha_bar = gather(self.alpha_bar, t)
            alpha = gather(self.alpha, t)
            eps_coef = (1 - alpha) / (1 - alpha_bar) ** .5
            mean = 1 / (alpha ** 0.5) * (xt - eps_coef * eps_theta)
            var = gather(self.sigma2, t)
            eps = torch.randn(xt.shape, device=xt.device)
            return mean + (var ** .5) * eps

        def loss(self, x0: torch.Tensor, noise=None):
            batch_size = x0.shape[0]
            t = torch.randint(0, self.n_steps, (batch_size,), device=x0.device, dtype=torch.long)
            if noise is None:
                noise = torch.randn_like(x0)
            xt = self.q_sample(x0, t, eps=noise)
            eps_theta = self.eps_model(xt, t)
            return F.mse_loss(noise, eps_theta)

    return dict(TimeEmbedding=TimeEmbedding, ResidualBlock=ResidualBlock, AttentionBlock=AttentionBlock,
                UNet=UNet, DenoiseDiffusion=DenoiseDiffusion, gather=gather, F=F)


_DDPM_T = 50


def _ddpm_unet(torch, C):
    # the U-Net shrunk: one image channel, 32 base channels (GroupNorm's 32 groups still divide
    # every block), two resolutions with attention at the second, one block per resolution
    unet = C["UNet"](image_channels=1, n_channels=32, ch_mults=(1, 2), is_attn=(False, True), n_blocks=1)
    _set_params(torch, unet, 20)
    return unet


def _ddpm_data():
    rng = np.random.default_rng(21)
    x0 = np.tanh(rng.standard_normal((4, 1, 4, 4))).astype(np.float32)
    noise = rng.standard_normal((4, 1, 4, 4)).astype(np.float32)
    t = np.array([3, 17, 30, 49])
    return x0, noise, t


def ddpm_page(torch, train_steps=0):
    C = ddpm_classes(torch)
    out = {}
    x0n, noisen, tn = _ddpm_data()
    unet = _ddpm_unet(torch, C)
    diffusion = C["DenoiseDiffusion"](eps_model=unet, n_steps=_DDPM_T, device=torch.get_default_device())
    x0, noise, t = torch.tensor(x0n), torch.tensor(noisen), torch.tensor(tn)
    out["alpha_bar"] = _np(diffusion.alpha_bar)
    mean, var = diffusion.q_xt_x0(x0, t)
    out["mean"], out["var"] = _np(mean), _np(var)
    xt = diffusion.q_sample(x0, t, eps=noise)
    out["xt"] = _np(xt)
    with torch.no_grad():
        out["eps_theta"] = _np(unet(xt, t))
    # the time embedding's sinusoid and MLP, and the attention block, for a NumPy recomputation
    out["temb"] = _np(unet.time_emb(t.float()))
    out["temb_params"] = {k: _np(v) for k, v in unet.time_emb.state_dict().items()}
    F = C["F"]
    # the loss with t fixed (the page draws it with randint) and its gradient
    unet.zero_grad()
    fixed = F.mse_loss(noise, unet(diffusion.q_sample(x0, t, eps=noise), t))
    fixed.backward()
    out["fixed_loss"] = fixed.item()
    out["grad_norms"] = [float(np.linalg.norm(_np(p.grad))) for p in unet.parameters() if p.grad is not None]
    out["no_grad"] = sorted(n for n, p in unet.named_parameters() if p.grad is None)
    if train_steps:
        opt = torch.optim.Adam(unet.parameters(), lr=2e-3)
        torch.manual_seed(0)
        for _ in range(train_steps):
            opt.zero_grad()
            loss = diffusion.loss(x0, noise=noise)
            loss.backward()
            opt.step()
        with torch.no_grad():
            out["fixed_loss_after"] = F.mse_loss(noise, unet(diffusion.q_sample(x0, t, eps=noise), t)).item()
            # p_sample: its noise is the next randn draw after the model (which draws none)
            torch.manual_seed(5)
            out["p_sample"] = _np(diffusion.p_sample(xt, t))
            out["eps_theta_after"] = _np(unet(xt, t))
            torch.manual_seed(5)
            out["p_noise"] = _np(torch.randn(xt.shape))
            # q_sample's own noise: mean and variance of 16000 draws at t = 30
            big = torch.full((4000, 1, 2, 2), 0.7)
            draws = _np(diffusion.q_sample(big, torch.full((4000,), 30, dtype=torch.long)))
            out["q_stats"] = (float(draws.mean()), float(draws.var()))
    return out, C


def _np_ddpm_schedule():
    beta = np.linspace(0.0001, 0.02, _DDPM_T, dtype=np.float32).astype(np.float64)
    alpha = 1 - beta
    return beta, alpha, np.cumprod(alpha)


def test_ddpm_unet_and_denoise_diffusion():
    r, C = ddpm_page(lucid, train_steps=5)
    x0, noise, t = _ddpm_data()
    beta, alpha, ab = _np_ddpm_schedule()
    np.testing.assert_allclose(r["alpha_bar"], ab, rtol=1e-5)
    # q(x_t|x_0) = N(sqrt(abar_t) x_0, (1 - abar_t) I)
    np.testing.assert_allclose(r["mean"], np.sqrt(ab[t])[:, None, None, None] * x0, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(r["var"].reshape(-1), 1 - ab[t], rtol=1e-5)
    np.testing.assert_allclose(r["xt"], np.sqrt(ab[t])[:, None, None, None] * x0
                               + np.sqrt(1 - ab[t])[:, None, None, None] * noise, rtol=1e-5, atol=1e-5)
    m, v = r["q_stats"]  # 16000 draws: 5-sigma bounds on the sample mean and variance
    assert abs(m - math.sqrt(ab[30]) * 0.7) < 5 * math.sqrt((1 - ab[30]) / 16000)
    assert abs(v / (1 - ab[30]) - 1) < 5 * math.sqrt(2 / 16000)
    # p_sample: mean 1/sqrt(alpha_t) (x_t - beta_t / sqrt(1 - abar_t) eps_theta), std sqrt(beta_t)
    b = lambda a: a[t][:, None, None, None]  # noqa: E731
    expect = 1 / np.sqrt(b(alpha)) * (r["xt"] - b(beta) / np.sqrt(1 - b(ab)) * r["eps_theta_after"]) \
        + np.sqrt(b(beta)) * r["p_noise"]
    np.testing.assert_allclose(r["p_sample"], expect, rtol=1e-4, atol=1e-5)
    # the time embedding: sin/cos of t / 10000^(i / (half_dim - 1)) through Linear-Swish-Linear
    P = r["temb_params"]
    half = 32 * 4 // 8
    f = np.exp(np.arange(half) * -(math.log(10_000) / (half - 1)))
    e = t[:, None] * f[None, :]
    e = np.concatenate([np.sin(e), np.cos(e)], 1)
    h = e @ P["lin1.weight"].T + P["lin1.bias"]
    h = h / (1 + np.exp(-h))
    np.testing.assert_allclose(r["temb"], h @ P["lin2.weight"].T + P["lin2.bias"], rtol=1e-4, atol=1e-5)
    assert r["eps_theta"].shape == (4, 1, 4, 4) and all(np.isfinite(r["grad_norms"]))
    assert min(r["grad_norms"]) > 0
    # the page's AttentionBlock builds a GroupNorm it never calls: those alone get no gradient
    assert r["no_grad"] == sorted(f"{m}.attn.norm.{w}" for m in ("down.2", "middle", "up.0", "up.1")
                                  for w in ("bias", "weight"))
    # 5 Adam steps on the page's loss (random t, fixed noise): the fixed-t loss falls by a third
    assert r["fixed_loss_after"] < 0.67 * r["fixed_loss"]


def _np_group_norm(x, G, w, b, eps=1e-5):
    B, Cn = x.shape[:2]
    xs = x.reshape(B, G, -1)
    y = (xs - xs.mean(-1, keepdims=True)) / np.sqrt(xs.var(-1, keepdims=True) + eps)
    return y.reshape(x.shape) * w.reshape(1, Cn, *([1] * (x.ndim - 2))) + b.reshape(1, Cn, *([1] * (x.ndim - 2)))


def test_ddpm_blocks_numpy_and_gradcheck():
    C = ddpm_classes(lucid)
    att = C["AttentionBlock"](4, n_heads=2, d_k=3, n_groups=2).double()
    _set_params(lucid, att, 22)
    x = np.random.default_rng(23).standard_normal((2, 4, 2, 3))
    got = _np(att(lucid.tensor(x)))
    P = {k: _np(v) for k, v in att.state_dict().items()}
    # NumPy: the block as written, without GroupNorm (the page's AttentionBlock never calls self.norm)
    xs = x.reshape(2, 4, -1).transpose(0, 2, 1)
    qkv = (xs @ P["projection.weight"].T + P["projection.bias"]).reshape(2, 6, 2, 9)
    q, k, v = qkv[..., :3], qkv[..., 3:6], qkv[..., 6:]
    a = np.einsum('bihd,bjhd->bijh', q, k) * 3 ** -0.5
    a = np.exp(a - a.max(1, keepdims=True))
    a = a / a.sum(1, keepdims=True)  # softmax over i, the query axis, as written (dim=1)
    res = np.einsum('bijh,bjhd->bihd', a, v).reshape(2, 6, 6) @ P["output.weight"].T + P["output.bias"] + xs
    np.testing.assert_allclose(got, res.transpose(0, 2, 1).reshape(2, 4, 2, 3), rtol=1e-10, atol=1e-12)
    rb = C["ResidualBlock"](4, 6, 8, n_groups=2).double()
    _set_params(lucid, rb, 24)
    xr = lucid.tensor(np.random.default_rng(25).standard_normal((1, 4, 3, 3)), requires_grad=True)
    tr = lucid.tensor(np.random.default_rng(26).standard_normal((1, 8)), requires_grad=True)
    assert lucid.autograd.gradcheck(rb, (xr, tr))
    xa = lucid.tensor(x, requires_grad=True)
    assert lucid.autograd.gradcheck(att, (xa,))


def test_ddpm_unet_and_denoise_diffusion_torch_parity():
    torch = pytest.importorskip("torch")
    r, _ = ddpm_page(lucid)
    t, _ = ddpm_page(torch)
    for k in ("alpha_bar", "mean", "var", "xt"):
        np.testing.assert_allclose(r[k], t[k], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(r["eps_theta"], t["eps_theta"], rtol=1e-4, atol=2e-5)
    np.testing.assert_allclose(r["temb"], t["temb"], rtol=1e-5, atol=1e-6)
    assert r["fixed_loss"] == pytest.approx(t["fixed_loss"], rel=1e-5)
    np.testing.assert_allclose(r["grad_norms"], t["grad_norms"], rtol=1e-3, atol=1e-6)
    assert r["no_grad"] == t["no_grad"]


# ---------------------------------------------------------------------------------------------
# normalization: batch_channel_norm, weight_standardization (and its conv2d.py), group_norm,
# instance_norm, layer_norm


def norm_classes(torch):
    nn = torch.nn
    F = torch.nn.functional

    class EstimatedBatchNorm(nn.Module):
        def __init__(self, channels: int,
                     eps: float = 1e-5, momentum: float = 0.1, affine: bool = True):
            super().__init__()
            self.eps = eps
            self.momentum = momentum
            self.affine = affine
            self.channels = channels
            if self.affine:
                self.scale = nn.Parameter(torch.ones(channels))
                self.shift = nn.Parameter(torch.zeros(channels))
            self.register_buffer('exp_mean', torch.zeros(channels))
            self.register_buffer('exp_var', torch.ones(channels))

        def __call__(self, x: torch.Tensor):
            x_shape = x.shape
            batch_size = x_shape[0]
            assert self.channels == x.shape[1]
            x = x.view(batch_size, self.channels, -1)
            if self.training:
                with torch.no_grad():
                    mean = x.mean(dim=[0, 2])
                    mean_x2 = (x ** 2).mean(dim=[0, 2])
                    var = mean_x2 - mean ** 2
                    self.exp_mean = (1 - self.momentum) * self.exp_mean + self.momentum * mean
                    self.exp_var = (1 - self.momentum) * self.exp_var + self.momentum * var
            x_norm = (x - self.exp_mean.view(1, -1, 1)) / torch.sqrt(self.exp_var + self.eps).view(1, -1, 1)
            if self.affine:
                x_norm = self.scale.view(1, -1, 1) * x_norm + self.shift.view(1, -1, 1)
            return x_norm.view(x_shape)

    class ChannelNorm(nn.Module):
        def __init__(self, channels, groups,
                     eps: float = 1e-5, affine: bool = True):
            super().__init__()
            self.channels = channels
            self.groups = groups
            self.eps = eps
            self.affine = affine
            if self.affine:
                self.scale = nn.Parameter(torch.ones(groups))
                self.shift = nn.Parameter(torch.zeros(groups))

        def __call__(self, x: torch.Tensor):
            x_shape = x.shape
            batch_size = x_shape[0]
            assert self.channels == x.shape[1]
            x = x.view(batch_size, self.groups, -1)
            mean = x.mean(dim=[-1], keepdim=True)
            mean_x2 = (x ** 2).mean(dim=[-1], keepdim=True)
            var = mean_x2 - mean ** 2
            x_norm = (x - mean) / torch.sqrt(var + self.eps)
            if self.affine:
                x_norm = self.scale.view(1, -1, 1) * x_norm + self.shift.view(1, -1, 1)
            return x_norm.view(x_shape)

    class BatchChannelNorm(nn.Module):
        def __init__(self, channels: int, groups: int,
                     eps: float = 1e-5, momentum: float = 0.1, estimate: bool = True):
            super().__init__()
            if estimate:
                self.batch_norm = EstimatedBatchNorm(channels,
                                                     eps=eps, momentum=momentum)
            else:  # the page's own BatchNorm (normalization/batch_norm) stands as nn.BatchNorm2d here
                self.batch_norm = nn.BatchNorm2d(channels,
                                                 eps=eps, momentum=momentum)
            self.channel_norm = ChannelNorm(channels, groups, eps)

        def __call__(self, x):
            x = self.batch_norm(x)
            return self.channel_norm(x)

    def weight_standardization(weight: torch.Tensor, eps: float):
        c_out, c_in, *kernel_shape = weight.shape
        weight = weight.view(c_out, -1)
        var, mean = torch.var_mean(weight, dim=1, keepdim=True)
        weight = (weight - mean) / (torch.sqrt(var + eps))
        return weight.view(c_out, c_in, *kernel_shape)

    class Conv2d(nn.Conv2d):
        def __init__(self, in_channels, out_channels, kernel_size,
                     stride=1,
                     padding=0,
                     dilation=1,
                     groups: int = 1,
                     bias: bool = True,
                     padding_mode: str = 'zeros',
                     eps: float = 1e-5):
            super(Conv2d, self).__init__(in_channels, out_channels, kernel_size,
                                         stride=stride,
                                         padding=padding,
                                         dilation=dilation,
                                         groups=groups,
                                         bias=bias,
                                         padding_mode=padding_mode)
            self.eps = eps

        def forward(self, x: torch.Tensor):
            return F.conv2d(x, weight_standardization(self.weight, self.eps), self.bias, self.stride,
                            self.padding, self.dilation, self.groups)

    class GroupNorm(nn.Module):
        def __init__(self, groups: int, channels: int, *,
                     eps: float = 1e-5, affine: bool = True):
            super().__init__()
            assert channels % groups == 0, "Number of channels should be evenly divisible by the number of groups"
            self.groups = groups
            self.channels = channels
            self.eps = eps
            self.affine = affine
            if self.affine:
                self.scale = nn.Parameter(torch.ones(channels))
                self.shift = nn.Parameter(torch.zeros(channels))

        def forward(self, x: torch.Tensor):
            x_shape = x.shape
            batch_size = x_shape[0]
            assert self.channels == x.shape[1]
            x = x.view(batch_size, self.groups, -1)
            mean = x.mean(dim=[-1], keepdim=True)
            mean_x2 = (x ** 2).mean(dim=[-1], keepdim=True)
            var = mean_x2 - mean ** 2
            x_norm = (x - mean) / torch.sqrt(var + self.eps)
            if self.affine:
                x_norm = x_norm.view(batch_size, self.channels, -1)
                x_norm = self.scale.view(1, -1, 1) * x_norm + self.shift.view(1, -1, 1)
            return x_norm.view(x_shape)

    class InstanceNorm(nn.Module):
        def __init__(self, channels: int, *,
                     eps: float = 1e-5, affine: bool = True):
            super().__init__()
            self.channels = channels
            self.eps = eps
            self.affine = affine
            if self.affine:
                self.scale = nn.Parameter(torch.ones(channels))
                self.shift = nn.Parameter(torch.zeros(channels))

        def forward(self, x: torch.Tensor):
            x_shape = x.shape
            batch_size = x_shape[0]
            assert self.channels == x.shape[1]
            x = x.view(batch_size, self.channels, -1)
            mean = x.mean(dim=[-1], keepdim=True)
            mean_x2 = (x ** 2).mean(dim=[-1], keepdim=True)
            var = mean_x2 - mean ** 2
            x_norm = (x - mean) / torch.sqrt(var + self.eps)
            x_norm = x_norm.view(batch_size, self.channels, -1)
            if self.affine:
                x_norm = self.scale.view(1, -1, 1) * x_norm + self.shift.view(1, -1, 1)
            return x_norm.view(x_shape)

    class LayerNorm(nn.Module):
        def __init__(self, normalized_shape, *,
                     eps: float = 1e-5,
                     elementwise_affine: bool = True):
            super().__init__()
            self.normalized_shape = normalized_shape
            self.eps = eps
            self.elementwise_affine = elementwise_affine
            if self.elementwise_affine:
                self.gain = nn.Parameter(torch.ones(normalized_shape))
                self.bias = nn.Parameter(torch.zeros(normalized_shape))

        def forward(self, x: torch.Tensor):
            assert self.normalized_shape == x.shape[-len(self.normalized_shape):]
            dims = [-(i + 1) for i in range(len(self.normalized_shape))]
            mean = x.mean(dim=dims, keepdims=True)
            mean_x2 = (x ** 2).mean(dim=dims, keepdims=True)
            var = mean_x2 - mean ** 2
            x_norm = (x - mean) / torch.sqrt(var + self.eps)
            if self.elementwise_affine:
                x_norm = self.gain * x_norm + self.bias
            return x_norm

    return dict(BatchChannelNorm=BatchChannelNorm, EstimatedBatchNorm=EstimatedBatchNorm, ChannelNorm=ChannelNorm,
                weight_standardization=weight_standardization, Conv2d=Conv2d, GroupNorm=GroupNorm,
                InstanceNorm=InstanceNorm, LayerNorm=LayerNorm)


def _norm_data():
    rng = np.random.default_rng(31)
    return (rng.standard_normal((3, 6, 2, 4)) * 2 + 1, rng.standard_normal((3, 6, 2, 4)) - 0.5,
            rng.standard_normal((4, 6, 3, 3)), rng.integers(0, 3, 8), rng.standard_normal((8, 3, 6, 6)))


def norm_page(torch, train_steps=10):
    C = norm_classes(torch)
    x1, x2, w, y, img = _norm_data()
    out = {}
    x1t, x2t = torch.tensor(x1), torch.tensor(x2)
    for name, mod in (("group", C["GroupNorm"](2, 6)), ("instance", C["InstanceNorm"](6)),
                      ("layer", C["LayerNorm"](x1t.shape[2:])), ("channel", C["ChannelNorm"](6, 3))):
        mod = mod.double()
        _set_params(torch, mod, 32)
        out[name] = _np(mod(x1t))
        out[name + "_p"] = [_np(p) for p in mod.parameters()]
    bcn = C["BatchChannelNorm"](6, 3).double()
    _set_params(torch, bcn, 33)
    out["bcn_train"] = [_np(bcn(x1t)), _np(bcn(x2t))]
    out["bcn_buffers"] = {k: _np(v) for k, v in bcn.state_dict().items()}
    out["bcn_param_names"] = sorted(n for n, _ in bcn.named_parameters())
    bcn.eval()
    out["bcn_eval"] = _np(bcn(x1t))
    out["ws"] = _np(C["weight_standardization"](torch.tensor(w), 1e-5))
    # a small network of the page's parts: weight-standardized convolutions with batch-channel norm
    nn = torch.nn
    model = nn.Sequential(C["Conv2d"](3, 6, 3, padding=1), C["BatchChannelNorm"](6, 3), nn.ReLU(),
                          C["Conv2d"](6, 6, 3, stride=2), C["GroupNorm"](2, 6), nn.ReLU(),
                          nn.Flatten(), nn.Linear(24, 3))
    _set_params(torch, model, 34)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    imgt, yt = torch.tensor(img, dtype=torch.float32), torch.tensor(y)
    losses = []
    for _ in range(train_steps):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(imgt), yt)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    out["losses"] = losses
    out["net_exp_mean"] = _np(model[1].batch_norm.exp_mean)
    return out, C


def _np_norm(x, axes, eps=1e-5):
    m = x.mean(axes, keepdims=True)
    return (x - m) / np.sqrt((x ** 2).mean(axes, keepdims=True) - m ** 2 + eps)


def test_normalization_pages():
    r, C = norm_page(lucid)
    x1, x2, w, y, img = _norm_data()
    gs, gb = r["group_p"]
    np.testing.assert_allclose(r["group"], _np_group_norm(x1, 2, gs, gb), rtol=1e-9, atol=1e-10)
    s, b = r["instance_p"]
    np.testing.assert_allclose(r["instance"], _np_norm(x1, (2, 3)) * s[:, None, None] + b[:, None, None],
                               rtol=1e-9, atol=1e-10)
    g, b = r["layer_p"]
    np.testing.assert_allclose(r["layer"], _np_norm(x1, (2, 3)) * g + b, rtol=1e-9, atol=1e-10)
    s, b = r["channel_p"]  # ChannelNorm: group norm with one scale and shift per group
    cn = _np_norm(x1.reshape(3, 3, -1), (2,)) * s[:, None] + b[:, None]
    np.testing.assert_allclose(r["channel"], cn.reshape(x1.shape), rtol=1e-9, atol=1e-10)
    # EstimatedBatchNorm: the running mean/variance after two batches, each step
    # (1 - r) * old + r * batch statistic with r = 0.1, then normalization by the running values
    em, ev = np.zeros(6), np.ones(6)
    for x in (x1, x2):
        xs = x.reshape(3, 6, -1)
        m = xs.mean((0, 2))
        em, ev = 0.9 * em + 0.1 * m, 0.9 * ev + 0.1 * ((xs ** 2).mean((0, 2)) - m ** 2)
    B = r["bcn_buffers"]
    np.testing.assert_allclose(B["batch_norm.exp_mean"], em, rtol=1e-12)
    np.testing.assert_allclose(B["batch_norm.exp_var"], ev, rtol=1e-12)
    # the reassigned buffers stay buffers: in state_dict, not parameters
    assert r["bcn_param_names"] == ["batch_norm.scale", "batch_norm.shift", "channel_norm.scale", "channel_norm.shift"]
    bn = (x1.reshape(3, 6, -1) - em[:, None]) / np.sqrt(ev[:, None] + 1e-5)
    bn = bn * B["batch_norm.scale"][:, None] + B["batch_norm.shift"][:, None]
    cn = _np_norm(bn.reshape(3, 3, -1), (2,)) * B["channel_norm.scale"][:, None] + B["channel_norm.shift"][:, None]
    np.testing.assert_allclose(r["bcn_eval"], cn.reshape(x1.shape), rtol=1e-9, atol=1e-10)
    # weight standardization: each output channel's weights to mean 0 and (unbiased) variance
    # var / (var + eps), the code's torch.var_mean being unbiased (the docstring writes 1/I)
    ws = r["ws"].reshape(4, -1)
    wf = w.reshape(4, -1)
    np.testing.assert_allclose(ws.mean(1), 0, atol=1e-6)
    np.testing.assert_allclose(ws.var(1, ddof=1), wf.var(1, ddof=1) / (wf.var(1, ddof=1) + 1e-5), rtol=1e-5)
    np.testing.assert_allclose(r["ws"], ((wf - wf.mean(1, keepdims=True)) / np.sqrt(
        wf.var(1, ddof=1, keepdims=True) + 1e-5)).reshape(w.shape), rtol=1e-5, atol=1e-6)
    assert r["losses"][-1] < 0.5 * r["losses"][0]
    assert np.abs(r["net_exp_mean"]).max() > 0  # the running mean moved from its zeros


def test_normalization_gradchecks():
    C = norm_classes(lucid)
    x = lucid.tensor(np.random.default_rng(35).standard_normal((2, 4, 3)), requires_grad=True)
    w = lucid.tensor(np.random.default_rng(36).standard_normal((3, 2, 2, 2)), requires_grad=True)
    for mod in (C["GroupNorm"](2, 4), C["InstanceNorm"](4), C["LayerNorm"](x.shape[1:]), C["ChannelNorm"](4, 2)):
        mod = mod.double()
        _set_params(lucid, mod, 37)
        assert lucid.autograd.gradcheck(mod, (x,))
    assert lucid.autograd.gradcheck(lambda v: C["weight_standardization"](v, 1e-5), (w,))


def test_normalization_pages_torch_parity():
    torch = pytest.importorskip("torch")
    r, _ = norm_page(lucid)
    t, _ = norm_page(torch)
    for k in ("group", "instance", "layer", "channel", "bcn_eval", "ws"):
        np.testing.assert_allclose(r[k], t[k], rtol=1e-6, atol=1e-7)
    for k in r["bcn_buffers"]:
        np.testing.assert_allclose(r["bcn_buffers"][k], t["bcn_buffers"][k], rtol=1e-12)
    np.testing.assert_allclose(r["losses"], t["losses"], rtol=2e-4, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# graphs/gat/__init__.py, graphs/gat/experiment.py and graphs/gatv2/__init__.py


def gat_classes(torch):
    nn = torch.nn

    class GraphAttentionLayer(nn.Module):
        def __init__(self, in_features: int, out_features: int, n_heads: int,
                     is_concat: bool = True,
                     dropout: float = 0.6,
                     leaky_relu_negative_slope: float = 0.2):
            super().__init__()
            self.is_concat = is_concat
            self.n_heads = n_heads
            if is_concat:
                assert out_features % n_heads == 0
                self.n_hidden = out_features // n_heads
            else:
                self.n_hidden = out_features
            self.linear = nn.Linear(in_features, self.n_hidden * n_heads, bias=False)
            self.attn = nn.Linear(self.n_hidden * 2, 1, bias=False)
            self.activation = nn.LeakyReLU(negative_slope=leaky_relu_negative_slope)
            self.softmax = nn.Softmax(dim=1)
            self.dropout = nn.Dropout(dropout)

        def __call__(self, h: torch.Tensor, adj_mat: torch.Tensor):
            n_nodes = h.shape[0]
            g = self.linear(h).view(n_nodes, self.n_heads, self.n_hidden)
            g_repeat = g.repeat(n_nodes, 1, 1)
            g_repeat_interleave = g.repeat_interleave(n_nodes, dim=0)
            g_concat = torch.cat([g_repeat_interleave, g_repeat], dim=-1)
            g_concat = g_concat.view(n_nodes, n_nodes, self.n_heads, 2 * self.n_hidden)
            e = self.activation(self.attn(g_concat))
            e = e.squeeze(-1)
            assert adj_mat.shape[0] == 1 or adj_mat.shape[0] == n_nodes
            assert adj_mat.shape[1] == 1 or adj_mat.shape[1] == n_nodes
            assert adj_mat.shape[2] == 1 or adj_mat.shape[2] == self.n_heads
            e = e.masked_fill(adj_mat == 0, float('-inf'))
            a = self.softmax(e)
            a = self.dropout(a)
            attn_res = torch.einsum('ijh,jhf->ihf', a, g)
            if self.is_concat:
                return attn_res.reshape(n_nodes, self.n_heads * self.n_hidden)
            else:
                return attn_res.mean(dim=1)

    class GraphAttentionV2Layer(nn.Module):
        def __init__(self, in_features: int, out_features: int, n_heads: int,
                     is_concat: bool = True,
                     dropout: float = 0.6,
                     leaky_relu_negative_slope: float = 0.2,
                     share_weights: bool = False):
            super().__init__()
            self.is_concat = is_concat
            self.n_heads = n_heads
            self.share_weights = share_weights
            if is_concat:
                assert out_features % n_heads == 0
                self.n_hidden = out_features // n_heads
            else:
                self.n_hidden = out_features
            self.linear_l = nn.Linear(in_features, self.n_hidden * n_heads, bias=False)
            if share_weights:
                self.linear_r = self.linear_l
            else:
                self.linear_r = nn.Linear(in_features, self.n_hidden * n_heads, bias=False)
            self.attn = nn.Linear(self.n_hidden, 1, bias=False)
            self.activation = nn.LeakyReLU(negative_slope=leaky_relu_negative_slope)
            self.softmax = nn.Softmax(dim=1)
            self.dropout = nn.Dropout(dropout)

        def __call__(self, h: torch.Tensor, adj_mat: torch.Tensor):
            n_nodes = h.shape[0]
            g_l = self.linear_l(h).view(n_nodes, self.n_heads, self.n_hidden)
            g_r = self.linear_r(h).view(n_nodes, self.n_heads, self.n_hidden)
            g_l_repeat = g_l.repeat(n_nodes, 1, 1)
            g_r_repeat_interleave = g_r.repeat_interleave(n_nodes, dim=0)
            g_sum = g_l_repeat + g_r_repeat_interleave
            g_sum = g_sum.view(n_nodes, n_nodes, self.n_heads, self.n_hidden)
            e = self.attn(self.activation(g_sum))
            e = e.squeeze(-1)
            assert adj_mat.shape[0] == 1 or adj_mat.shape[0] == n_nodes
            assert adj_mat.shape[1] == 1 or adj_mat.shape[1] == n_nodes
            assert adj_mat.shape[2] == 1 or adj_mat.shape[2] == self.n_heads
            e = e.masked_fill(adj_mat == 0, float('-inf'))
            a = self.softmax(e)
            a = self.dropout(a)
            attn_res = torch.einsum('ijh,jhf->ihf', a, g_r)
            if self.is_concat:
                return attn_res.reshape(n_nodes, self.n_heads * self.n_hidden)
            else:
                return attn_res.mean(dim=1)

    def make_gat(layer):
        class GAT(nn.Module):
            def __init__(self, in_features: int, n_hidden: int, n_classes: int, n_heads: int, dropout: float):
                super().__init__()
                self.layer1 = layer(in_features, n_hidden, n_heads, is_concat=True, dropout=dropout)
                self.activation = nn.ELU()
                self.output = layer(n_hidden, n_classes, 1, is_concat=False, dropout=dropout)
                self.dropout = nn.Dropout(dropout)

            def __call__(self, x: torch.Tensor, adj_mat: torch.Tensor):
                x = self.dropout(x)
                x = self.layer1(x, adj_mat)
                x = self.activation(x)
                x = self.dropout(x)
                return self.output(x, adj_mat)
        return GAT

    def accuracy(output: torch.Tensor, labels: torch.Tensor):
        return output.argmax(dim=-1).eq(labels).sum().item() / len(labels)

    return dict(GraphAttentionLayer=GraphAttentionLayer, GraphAttentionV2Layer=GraphAttentionV2Layer,
                make_gat=make_gat, accuracy=accuracy)


def _graph_data(n=14, f=6):
    rng = np.random.default_rng(41)
    labels = rng.integers(0, 3, n)
    centers = rng.standard_normal((3, f))
    features = np.abs(centers[labels] + 0.8 * rng.standard_normal((n, f)))
    adj = np.eye(n, dtype=bool)
    for _ in range(2 * n):  # edges mostly within a class, as citations
        i, j = rng.integers(0, n, 2)
        if labels[i] == labels[j] or rng.random() < 0.2:
            adj[i, j] = adj[j, i] = True
    return features.astype(np.float32), labels, adj


def gat_page(torch, v2=False, epochs=30, dropout=0.0):
    C = gat_classes(torch)
    nn = torch.nn
    featuresn, labelsn, adjn = _graph_data()
    # CoraDataset's steps: features normalized by their row sums, a boolean adjacency from eye
    features = torch.tensor(featuresn)
    features = features / features.sum(dim=1, keepdim=True)
    labels = torch.tensor(labelsn, dtype=torch.long)
    adj_mat = torch.eye(len(labels), dtype=torch.bool)
    for i, j in zip(*np.nonzero(np.triu(adjn, 1))):
        adj_mat[int(i)][int(j)] = True
        adj_mat[int(j)][int(i)] = True
    edges_adj = adj_mat.unsqueeze(-1)
    model = C["make_gat"](C["GraphAttentionV2Layer"] if v2 else C["GraphAttentionLayer"])(6, 8, 3, 2, dropout)
    _set_params(torch, model, 42, scale=2.0)
    out = {"params0": {k: _np(v) for k, v in model.state_dict().items()}, "features": _np(features),
           "adj": _np(edges_adj)}
    idx_train = torch.arange(10)  # the experiment's randperm split, fixed here
    idx_valid = torch.arange(10, 14)
    loss_func = nn.CrossEntropyLoss()
    torch.manual_seed(0)
    model.eval()
    with torch.no_grad():
        out["output0"] = _np(model(features, edges_adj))
        out["eval_train_loss0"] = loss_func(model(features, edges_adj)[idx_train], labels[idx_train]).item()
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3 * 4, weight_decay=5e-4)
    losses, accs = [], []
    for epoch in range(epochs):
        model.train()
        optimizer.zero_grad()
        output = model(features, edges_adj)
        loss = loss_func(output[idx_train], labels[idx_train])
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        accs.append(C["accuracy"](output[idx_train], labels[idx_train]))
        model.eval()
        with torch.no_grad():
            output = model(features, edges_adj)
            out["valid_loss"] = loss_func(output[idx_valid], labels[idx_valid]).item()
            out["eval_train_loss"] = loss_func(output[idx_train], labels[idx_train]).item()
    out["losses"], out["accs"] = losses, accs
    out["n_params"] = sum(p.numel() for p in model.parameters())
    return out, C


def _np_gat_layer(h, adj, W, a, heads, hidden, concat, v2=False, Wr=None, slope=0.2):
    n = h.shape[0]
    lrelu = lambda z: np.where(z > 0, z, slope * z)  # noqa: E731
    if v2:
        gl = (h @ W.T).reshape(n, heads, hidden)
        gr = (h @ Wr.T).reshape(n, heads, hidden)
        # g_sum[i, j] = g_l[j] + g_r[i]: the page's repeat / repeat_interleave order
        e = lrelu(gl[None, :] + gr[:, None]) @ a.reshape(-1)
        g = gr
    else:
        g = (h @ W.T).reshape(n, heads, hidden)
        # a . (g_i || g_j) = a_1 . g_i + a_2 . g_j
        e = lrelu(np.einsum('ihf,f->ih', g, a.reshape(-1)[:hidden])[:, None]
                  + np.einsum('jhf,f->jh', g, a.reshape(-1)[hidden:])[None, :])
    e = np.where(adj, e, -np.inf)
    p = np.exp(e - e.max(1, keepdims=True))
    p = p / p.sum(1, keepdims=True)
    res = np.einsum('ijh,jhf->ihf', p, g)
    return res.reshape(n, heads * hidden) if concat else res.mean(1)


def _np_gat(r, v2):
    P, x, adj = r["params0"], r["features"], r["adj"]
    if v2:
        h = _np_gat_layer(x, adj, P["layer1.linear_l.weight"], P["layer1.attn.weight"], 2, 4, True, True,
                          P["layer1.linear_r.weight"])
    else:
        h = _np_gat_layer(x, adj, P["layer1.linear.weight"], P["layer1.attn.weight"], 2, 4, True)
    h = np.where(h > 0, h, np.expm1(h))
    if v2:
        return _np_gat_layer(h, adj, P["output.linear_l.weight"], P["output.attn.weight"], 1, 3, False, True,
                             P["output.linear_r.weight"])
    return _np_gat_layer(h, adj, P["output.linear.weight"], P["output.attn.weight"], 1, 3, False)


@pytest.mark.parametrize("v2", [False, True])
def test_graph_attention_networks(v2):
    r, C = gat_page(lucid, v2=v2)
    np.testing.assert_allclose(r["output0"], _np_gat(r, v2), rtol=1e-5, atol=1e-6)
    # linear (6 -> 2 heads x 4) and attention for each layer; GATv2 has a second linear per layer
    assert r["n_params"] == (6 * 8 + 8 + 8 * 3 + 6 if not v2 else 2 * 6 * 8 + 4 + 2 * 8 * 3 + 3)
    # 30 full-batch Adam epochs (dropout 0): the training loss falls by 40%, accuracy >= 80%
    assert r["eval_train_loss"] < 0.6 * r["eval_train_loss0"] and r["accs"][-1] >= 0.8
    if v2:  # share_weights=True: one Linear serves both sides
        layer = C["GraphAttentionV2Layer"](6, 8, 2, share_weights=True)
        assert layer.linear_r is layer.linear_l and len(list(layer.parameters())) == 2


def test_graph_attention_layers_gradcheck():
    C = gat_classes(lucid)
    _, _, adj = _graph_data(5, 3)
    adj = lucid.tensor(adj[:, :, None])
    h = lucid.tensor(np.random.default_rng(43).standard_normal((5, 3)), requires_grad=True)
    for layer in (C["GraphAttentionLayer"](3, 4, 2, dropout=0.0), C["GraphAttentionV2Layer"](3, 4, 2, dropout=0.0),
                  C["GraphAttentionLayer"](3, 2, 2, is_concat=False, dropout=0.0)):
        layer = layer.double()
        _set_params(lucid, layer, 44)
        assert lucid.autograd.gradcheck(lambda x: layer(x, adj), (h,))


@pytest.mark.parametrize("v2", [False, True])
def test_graph_attention_networks_torch_parity(v2):
    torch = pytest.importorskip("torch")
    r, _ = gat_page(lucid, v2=v2)
    t, _ = gat_page(torch, v2=v2)
    np.testing.assert_allclose(r["output0"], t["output0"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(r["losses"], t["losses"], rtol=1e-4, atol=1e-5)
    assert r["accs"] == t["accs"]
    assert r["valid_loss"] == pytest.approx(t["valid_loss"], rel=1e-4)


# ---------------------------------------------------------------------------------------------
# transformers/mha.py, transformers/rope/__init__.py and transformers/alibi/__init__.py


def transformer_classes(torch):
    nn = torch.nn

    class PrepareForMultiHeadAttention(nn.Module):
        def __init__(self, d_model: int, heads: int, d_k: int, bias: bool):
            super().__init__()
            self.linear = nn.Linear(d_model, heads * d_k, bias=bias)
            self.heads = heads
            self.d_k = d_k

        def forward(self, x: torch.Tensor):
            head_shape = x.shape[:-1]
            x = self.linear(x)
            x = x.view(*head_shape, self.heads, self.d_k)
            return x

    class MultiHeadAttention(nn.Module):
        def __init__(self, heads: int, d_model: int, dropout_prob: float = 0.1, bias: bool = True):
            super().__init__()
            self.d_k = d_model // heads
            self.heads = heads
            self.query = PrepareForMultiHeadAttention(d_model, heads, self.d_k, bias=bias)
            self.key = PrepareForMultiHeadAttention(d_model, heads, self.d_k, bias=bias)
            self.value = PrepareForMultiHeadAttention(d_model, heads, self.d_k, bias=True)
            self.softmax = nn.Softmax(dim=1)
            self.output = nn.Linear(d_model, d_model)
            self.dropout = nn.Dropout(dropout_prob)
            self.scale = 1 / math.sqrt(self.d_k)
            self.attn = None

        def get_scores(self, query: torch.Tensor, key: torch.Tensor):
            return torch.einsum('ibhd,jbhd->ijbh', query, key)

        def forward(self, *,
                    query: torch.Tensor,
                    key: torch.Tensor,
                    value: torch.Tensor,
                    mask=None):
            seq_len, batch_size, _ = query.shape
            if mask is not None:
                assert mask.shape[0] == 1 or mask.shape[0] == query.shape[0]
                assert mask.shape[1] == key.shape[0]
                assert mask.shape[2] == 1 or mask.shape[2] == query.shape[1]
                mask = mask.unsqueeze(-1)
            query = self.query(query)
            key = self.key(key)
            value = self.value(value)
            scores = self.get_scores(query, key)
            scores *= self.scale
            if mask is not None:
                scores = scores.masked_fill(mask == 0, float('-inf'))
            attn = self.softmax(scores)
            attn = self.dropout(attn)
            x = torch.einsum("ijbh,jbhd->ibhd", attn, value)
            self.attn = attn.detach()
            x = x.reshape(seq_len, batch_size, -1)
            return self.output(x)

    class RotaryPositionalEmbeddings(nn.Module):
        def __init__(self, d: int, base: int = 10_000):
            super().__init__()
            self.base = base
            self.d = d
            self.cos_cached = None
            self.sin_cached = None

        def _build_cache(self, x: torch.Tensor):
            if self.cos_cached is not None and x.shape[0] <= self.cos_cached.shape[0]:
                return
            seq_len = x.shape[0]
            theta = 1. / (self.base ** (torch.arange(0, self.d, 2).float() / self.d)).to(x.device)
            seq_idx = torch.arange(seq_len, device=x.device).float().to(x.device)
            idx_theta = torch.einsum('n,d->nd', seq_idx, theta)
            idx_theta2 = torch.cat([idx_theta, idx_theta], dim=1)
            self.cos_cached = idx_theta2.cos()[:, None, None, :]
            self.sin_cached = idx_theta2.sin()[:, None, None, :]

        def _neg_half(self, x: torch.Tensor):
            d_2 = self.d // 2
            return torch.cat([-x[:, :, :, d_2:], x[:, :, :, :d_2]], dim=-1)

        def forward(self, x: torch.Tensor):
            self._build_cache(x)
            x_rope, x_pass = x[..., :self.d], x[..., self.d:]
            neg_half_x = self._neg_half(x_rope)
            x_rope = (x_rope * self.cos_cached[:x.shape[0]]) + (neg_half_x * self.sin_cached[:x.shape[0]])
            return torch.cat((x_rope, x_pass), dim=-1)

    class RotaryPEMultiHeadAttention(MultiHeadAttention):
        def __init__(self, heads: int, d_model: int, rope_percentage: float = 0.5, dropout_prob: float = 0.0):
            super().__init__(heads, d_model, dropout_prob)
            d_rope = int(self.d_k * rope_percentage)
            self.query_rotary_pe = RotaryPositionalEmbeddings(d_rope)
            self.key_rotary_pe = RotaryPositionalEmbeddings(d_rope)

        def get_scores(self, query: torch.Tensor, key: torch.Tensor):
            return torch.einsum('ibhd,jbhd->ijbh', self.query_rotary_pe(query), self.key_rotary_pe(key))

    def get_slopes(n_heads: int):
        s = (2 ** (-2 ** -(math.log2(n_heads) - 3)))
        return [s * (s ** i) for i in range(n_heads)]

    def get_biases(n_heads: int, max_len: int):
        slopes = torch.tensor(get_slopes(n_heads))
        distance = torch.arange(max_len).to(torch.float)
        return distance[:, None] * slopes[None, :]

    class AlibiMultiHeadAttention(MultiHeadAttention):
        def __init__(self, heads: int, d_model: int, dropout_prob: float = 0.1, max_len: int = 5_000):
            super().__init__(heads, d_model, dropout_prob)
            self.bias = nn.Parameter(get_biases(heads, max_len), requires_grad=False)

        def get_scores(self, query: torch.Tensor, key: torch.Tensor):
            scores = super().get_scores(query, key)
            key_seq_len = scores.shape[1]
            return scores + self.bias[None, :key_seq_len, None, :]

    return dict(MultiHeadAttention=MultiHeadAttention, RotaryPositionalEmbeddings=RotaryPositionalEmbeddings,
                RotaryPEMultiHeadAttention=RotaryPEMultiHeadAttention, get_slopes=get_slopes,
                get_biases=get_biases, AlibiMultiHeadAttention=AlibiMultiHeadAttention)


def _attn_data():
    rng = np.random.default_rng(51)
    return rng.standard_normal((5, 2, 16)).astype(np.float32), rng.standard_normal((6, 1, 2, 4))


def transformer_page(torch):
    C = transformer_classes(torch)
    x, q = _attn_data()
    xt = torch.tensor(x)
    mask = torch.tril(torch.ones(5, 5)).unsqueeze(-1)  # causal, [seq_q, seq_k, 1]
    out = {}
    for name, mha in (("mha", C["MultiHeadAttention"](4, 16, dropout_prob=0.0)),
                      ("rope", C["RotaryPEMultiHeadAttention"](4, 16)),
                      ("alibi", C["AlibiMultiHeadAttention"](4, 16, dropout_prob=0.0, max_len=8))):
        _set_params(torch, mha, 52)
        out[name] = _np(mha(query=xt, key=xt, value=xt, mask=mask))
        out[name + "_attn"] = _np(mha.attn)
        out[name + "_params"] = {k: _np(v) for k, v in mha.state_dict().items()}
        out[name + "_trainable"] = sorted(n for n, p in mha.named_parameters() if p.requires_grad)
    rope = C["RotaryPositionalEmbeddings"](4)
    qt = torch.tensor(q)
    out["rope_q"] = _np(rope(qt))
    # the cache is built once for 6 positions and sliced for 3
    out["rope_q3"] = _np(rope(qt[:3]))
    out["rope_cache_len"] = rope.cos_cached.shape[0]
    out["slopes8"], out["slopes4"] = C["get_slopes"](8), C["get_slopes"](4)
    out["biases"] = _np(C["get_biases"](4, 6))
    return out, C


def _np_mha(x, P, heads, mask, rope_d=0, bias=None):
    S, B, D = x.shape
    dk = D // heads
    lin = lambda n, v: v @ P[n + ".weight"].T + P[n + ".bias"]  # noqa: E731
    q = lin("query.linear", x).reshape(S, B, heads, dk)
    k = lin("key.linear", x).reshape(S, B, heads, dk)
    v = lin("value.linear", x).reshape(S, B, heads, dk)
    if rope_d:
        q, k = _np_rope(q, rope_d), _np_rope(k, rope_d)
    s = np.einsum('ibhd,jbhd->ijbh', q, k)
    if bias is not None:
        s = s + bias[None, :S, None, :]
    s = s / math.sqrt(dk)
    s = np.where(mask[:, :, None, None] == 0, -np.inf, s)
    a = np.exp(s - s.max(1, keepdims=True))
    a = a / a.sum(1, keepdims=True)
    o = np.einsum('ijbh,jbhd->ibhd', a, v).reshape(S, B, D)
    return o @ P["output.weight"].T + P["output.bias"], a


def _np_rope(x, d, base=10_000):
    # pairs (i, i + d/2) rotated by m * theta_i, theta_i = base^(-2i/d); features beyond d pass
    m = np.arange(x.shape[0])[:, None, None, None]
    th = base ** (-np.arange(0, d, 2) / d)
    x1, x2, rest = x[..., :d // 2], x[..., d // 2:d], x[..., d:]
    c, s = np.cos(m * th), np.sin(m * th)
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s, rest], -1)


def test_transformer_attention_rope_alibi():
    r, C = transformer_page(lucid)
    x, q = _attn_data()
    mask = np.tril(np.ones((5, 5)))
    o, a = _np_mha(x.astype(np.float64), r["mha_params"], 4, mask)
    np.testing.assert_allclose(r["mha"], o, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(r["mha_attn"], a, rtol=1e-4, atol=1e-6)
    assert np.all(r["mha_attn"][np.triu_indices(5, 1)] == 0)  # causal: no weight on later keys
    # RoPE on half of each head's 4 features (rope_percentage 0.5)
    o, a = _np_mha(x.astype(np.float64), r["rope_params"], 4, mask, rope_d=2)
    np.testing.assert_allclose(r["rope"], o, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(r["rope_q"], _np_rope(q, 4), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(r["rope_q3"], r["rope_q"][:3], rtol=1e-6)
    assert r["rope_cache_len"] == 6
    # a rotation: each pair keeps its length, and <RoPE(q, m), RoPE(k, n)> depends on m - n only
    for pair in ([0, 2], [1, 3]):
        np.testing.assert_allclose(np.linalg.norm(r["rope_q"][..., pair], axis=-1),
                                   np.linalg.norm(q[..., pair], axis=-1), rtol=1e-5)
    rope = C["RotaryPositionalEmbeddings"](4)
    same_q = lucid.tensor(np.repeat(q[:1], 6, 0))
    same_k = lucid.tensor(np.repeat(q[1:2], 6, 0))
    S = _np(lucid.einsum('ibhd,jbhd->ij', rope(same_q), rope(same_k)))
    for d in range(-5, 6):
        np.testing.assert_allclose(np.diagonal(S, d), np.diagonal(S, d)[0], rtol=1e-5, atol=1e-6)
    # ALiBi: slopes 2^(-8/n), a geometric sequence; biases distance * slope
    assert r["slopes8"] == [2.0 ** -i for i in range(1, 9)]
    assert r["slopes4"] == [4.0 ** -i for i in range(1, 5)]
    np.testing.assert_allclose(r["biases"], np.arange(6)[:, None] * np.array(r["slopes4"])[None], rtol=1e-7)
    o, a = _np_mha(x.astype(np.float64), r["alibi_params"], 4, mask, bias=r["alibi_params"]["bias"])
    np.testing.assert_allclose(r["alibi"], o, rtol=1e-4, atol=1e-5)
    assert "bias" not in r["alibi_trainable"] and "bias" in r["alibi_params"]


def test_transformer_attention_gradcheck():
    C = transformer_classes(lucid)
    x = lucid.tensor(np.random.default_rng(53).standard_normal((3, 2, 4)), requires_grad=True)
    mask = lucid.tril(lucid.ones(3, 3)).unsqueeze(-1)
    for mha in (C["MultiHeadAttention"](2, 4, dropout_prob=0.0), C["RotaryPEMultiHeadAttention"](2, 4, 1.0),
                C["AlibiMultiHeadAttention"](2, 4, dropout_prob=0.0, max_len=4)):
        mha = mha.double()
        _set_params(lucid, mha, 54)
        assert lucid.autograd.gradcheck(lambda v: mha(query=v, key=v, value=v, mask=mask), (x,))


def test_rope_page_test_with_d_3_fails_in_both():
    # the page's own _test_rotary uses RotaryPositionalEmbeddings(3) on 4 features: the cache has
    # 2 * ceil(3 / 2) = 4 angles against 3 rotated features, so the product cannot broadcast
    C = transformer_classes(lucid)
    x = lucid.tensor([[1, 2, 3, 4], [4, 5, 6, 7], [7, 8, 9, 10]], dtype=lucid.float)[:, None, None, :]
    with pytest.raises(RuntimeError, match=r"mul: .*\(3, ?1, ?1, ?3\).*\(3, ?1, ?1, ?4\)"):
        C["RotaryPositionalEmbeddings"](3)(x)


def test_transformer_attention_rope_alibi_torch_parity():
    torch = pytest.importorskip("torch")
    r, _ = transformer_page(lucid)
    t, _ = transformer_page(torch)
    for k in ("mha", "rope", "alibi", "mha_attn", "rope_attn", "alibi_attn", "rope_q", "rope_q3", "biases"):
        np.testing.assert_allclose(r[k], t[k], rtol=1e-5, atol=1e-6)
    assert r["slopes8"] == t["slopes8"] and r["alibi_trainable"] == t["alibi_trainable"]
    C = transformer_classes(torch)
    x = torch.tensor([[1, 2, 3, 4], [4, 5, 6, 7], [7, 8, 9, 10]], dtype=torch.float)[:, None, None, :]
    with pytest.raises(RuntimeError, match="size of tensor a .3. must match the size of tensor b .4."):
        C["RotaryPositionalEmbeddings"](3)(x)


# ---------------------------------------------------------------------------------------------
# optimizers/__init__.py, adam.py, amsgrad.py, radam.py, ada_belief.py and noam.py


def optimizer_classes(torch):
    nn = torch.nn
    Optimizer = import_module(torch.__name__ + ".optim.optimizer").Optimizer

    class GenericAdaptiveOptimizer(Optimizer):
        def __init__(self, params, defaults, lr: float, betas, eps: float):
            if not 0.0 <= lr:
                raise ValueError(f"Invalid learning rate: {lr}")
            if not 0.0 <= eps:
                raise ValueError(f"Invalid epsilon value: {eps}")
            if not 0.0 <= betas[0] < 1.0:
                raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
            if not 0.0 <= betas[1] < 1.0:
                raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
            defaults.update(dict(lr=lr, betas=betas, eps=eps))
            super().__init__(params, defaults)

        def init_state(self, state, group, param: nn.Parameter):
            pass

        def step_param(self, state, group, grad: torch.Tensor, param: torch.Tensor):
            pass

        @torch.no_grad()
        def step(self, closure=None):
            loss = None
            if closure is not None:
                with torch.enable_grad():
                    loss = closure()
            for group in self.param_groups:
                for param in group['params']:
                    if param.grad is None:
                        continue
                    grad = param.grad.data
                    if grad.is_sparse:
                        raise RuntimeError('GenericAdaptiveOptimizer does not support sparse gradients,'
                                           ' please consider SparseAdam instead')
                    state = self.state[param]
                    if len(state) == 0:
                        self.init_state(state, group, param)
                    self.step_param(state, group, grad, param)
            return loss

    class WeightDecay:
        def __init__(self, weight_decay: float = 0., weight_decouple: bool = True, absolute: bool = False):
            if not 0.0 <= weight_decay:
                raise ValueError(f"Invalid weight_decay value: {weight_decay}")
            self.absolute = absolute
            self.weight_decouple = weight_decouple
            self.weight_decay = weight_decay

        def defaults(self):
            return dict(weight_decay=self.weight_decay)

        def __call__(self, param: torch.nn.Parameter, grad: torch.Tensor, group):
            if self.weight_decouple:
                if self.absolute:
                    param.data.mul_(1.0 - group['weight_decay'])
                else:
                    param.data.mul_(1.0 - group['lr'] * group['weight_decay'])
                return grad
            else:
                if group['weight_decay'] != 0:
                    return grad.add(param.data, alpha=group['weight_decay'])
                else:
                    return grad

    class Adam(GenericAdaptiveOptimizer):
        def __init__(self, params,
                     lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-16,
                     weight_decay: WeightDecay = WeightDecay(),
                     optimized_update: bool = True,
                     defaults=None):
            defaults = {} if defaults is None else defaults
            defaults.update(weight_decay.defaults())
            super().__init__(params, defaults, lr, betas, eps)
            self.weight_decay = weight_decay
            self.optimized_update = optimized_update

        def init_state(self, state, group, param: nn.Parameter):
            state['step'] = 0
            state['exp_avg'] = torch.zeros_like(param, memory_format=torch.preserve_format)
            state['exp_avg_sq'] = torch.zeros_like(param, memory_format=torch.preserve_format)

        def get_mv(self, state, group, grad: torch.Tensor):
            beta1, beta2 = group['betas']
            m, v = state['exp_avg'], state['exp_avg_sq']
            m.mul_(beta1).add_(grad, alpha=1 - beta1)
            v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            return m, v

        def get_lr(self, state, group):
            return group['lr']

        def adam_update(self, state, group, param: torch.nn.Parameter,
                        m: torch.Tensor, v: torch.Tensor):
            beta1, beta2 = group['betas']
            bias_correction1 = 1 - beta1 ** state['step']
            bias_correction2 = 1 - beta2 ** state['step']
            lr = self.get_lr(state, group)
            if self.optimized_update:
                denominator = v.sqrt().add_(group['eps'])
                step_size = lr * math.sqrt(bias_correction2) / bias_correction1
                param.data.addcdiv_(m, denominator, value=-step_size)
            else:
                denominator = (v.sqrt() / math.sqrt(bias_correction2)).add_(group['eps'])
                step_size = lr / bias_correction1
                param.data.addcdiv_(m, denominator, value=-step_size)

        def step_param(self, state, group, grad: torch.Tensor, param: torch.nn.Parameter):
            grad = self.weight_decay(param, grad, group)
            m, v = self.get_mv(state, group, grad)
            state['step'] += 1
            self.adam_update(state, group, param, m, v)

    class AMSGrad(Adam):
        def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-16,
                     weight_decay: WeightDecay = WeightDecay(),
                     optimized_update: bool = True,
                     amsgrad=True, defaults=None):
            defaults = {} if defaults is None else defaults
            defaults.update(dict(amsgrad=amsgrad))
            super().__init__(params, lr, betas, eps, weight_decay, optimized_update, defaults)

        def init_state(self, state, group, param: nn.Parameter):
            super().init_state(state, group, param)
            if group['amsgrad']:
                state['max_exp_avg_sq'] = torch.zeros_like(param, memory_format=torch.preserve_format)

        def get_mv(self, state, group, grad: torch.Tensor):
            m, v = super().get_mv(state, group, grad)
            if group['amsgrad']:
                v_max = state['max_exp_avg_sq']
                torch.maximum(v_max, v, out=v_max)
                return m, v_max
            else:
                return m, v

    class RAdam(AMSGrad):
        def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                     weight_decay: WeightDecay = WeightDecay(),
                     optimized_update: bool = True,
                     amsgrad=False,
                     degenerated_to_sgd=True, defaults=None):
            self.degenerated_to_sgd = degenerated_to_sgd
            super().__init__(params, lr, betas, eps, weight_decay, optimized_update, amsgrad, defaults)

        def step_param(self, state, group, grad: torch.Tensor, param: torch.nn.Parameter):
            grad = self.weight_decay(param, grad, group)
            m, v = self.get_mv(state, group, grad)
            state['step'] += 1
            self.r_adam_update(state, group, param, m, v)

        @staticmethod
        def calc_rectification_term(beta2: float, step: int):
            beta2_t = beta2 ** step
            rho_inf = 2 / (1 - beta2) - 1
            rho = rho_inf - 2 * step * beta2_t / (1 - beta2_t)
            if rho >= 5:
                r2 = (rho - 4) / (rho_inf - 4) * (rho - 2) / rho * rho_inf / (rho_inf - 2)
                return math.sqrt(r2)
            else:
                return None

        def r_adam_update(self, state, group, param: torch.nn.Parameter,
                          m: torch.Tensor, v: torch.Tensor):
            beta1, beta2 = group['betas']
            bias_correction1 = 1 - beta1 ** state['step']
            bias_correction2 = 1 - beta2 ** state['step']
            r = self.calc_rectification_term(beta2, state['step'])
            lr = self.get_lr(state, group)
            if r is not None:
                if self.optimized_update:
                    denominator = v.sqrt().add_(group['eps'])
                    step_size = lr * math.sqrt(bias_correction2) * r / bias_correction1
                    param.data.addcdiv_(m, denominator, value=-step_size)
                else:
                    denominator = (v.sqrt() / math.sqrt(bias_correction2)).add_(group['eps'])
                    step_size = lr * r / bias_correction1
                    param.data.addcdiv_(m, denominator, value=-step_size)
            elif self.degenerated_to_sgd:
                step_size = lr / bias_correction1
                param.data.add_(m, alpha=-step_size)

    class AdaBelief(RAdam):
        def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-16,
                     weight_decay: WeightDecay = WeightDecay(), amsgrad=False,
                     degenerate_to_sgd=True,
                     rectify=True, defaults=None):
            defaults = {} if defaults is None else defaults
            super().__init__(params, lr, betas, eps, weight_decay, amsgrad, degenerate_to_sgd, defaults)
            self.rectify = rectify

        def init_state(self, state, group, param: nn.Parameter):
            state['step'] = 0
            state['exp_avg'] = torch.zeros_like(param, memory_format=torch.preserve_format)
            state['exp_avg_var'] = torch.zeros_like(param, memory_format=torch.preserve_format)
            if group['amsgrad']:
                state['max_exp_avg_var'] = torch.zeros_like(param, memory_format=torch.preserve_format)

        def get_ms(self, state, group, grad: torch.Tensor):
            beta1, beta2 = group['betas']
            m, s = state['exp_avg'], state['exp_avg_var']
            m.mul_(beta1).add_(grad, alpha=1 - beta1)
            grad_residual = grad - m
            s.mul_(beta2).addcmul_(grad_residual, grad_residual, value=1 - beta2)
            if group['amsgrad']:
                s_max = state['max_exp_avg_var']
                torch.maximum(s_max, s, out=s_max)
                return m, s_max
            else:
                return m, s

        def step_param(self, state, group, grad: torch.Tensor, param: torch.nn.Parameter):
            grad = self.weight_decay(param, grad, group)
            m, s = self.get_ms(state, group, grad)
            state['step'] += 1
            if not self.rectify:
                self.adam_update(state, group, param, m, s + group['eps'])
            else:
                self.r_adam_update(state, group, param, m, s + group['eps'])

    class Noam(AMSGrad):
        def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-16,
                     weight_decay: WeightDecay = WeightDecay(),
                     optimized_update: bool = True,
                     amsgrad=False,
                     warmup=0, d_model=512, defaults=None):
            defaults = {} if defaults is None else defaults
            defaults.update(dict(warmup=warmup))
            super().__init__(params, lr, betas, eps, weight_decay, optimized_update, amsgrad, defaults)
            self.d_model = d_model

        def get_lr(self, state, group):
            factor = min(state['step'] ** (-0.5), state['step'] * group['warmup'] ** (-1.5))
            return group['lr'] * self.d_model ** (-0.5) * factor

    return dict(WeightDecay=WeightDecay, Adam=Adam, AMSGrad=AMSGrad, RAdam=RAdam, AdaBelief=AdaBelief, Noam=Noam)


def _opt_data():
    rng = np.random.default_rng(61)
    return (rng.standard_normal((8, 3)), rng.standard_normal((8, 2)), rng.standard_normal((2, 3)) * 0.5,
            rng.standard_normal(2) * 0.1)


_OPT_CONFIGS = {
    "adam": ("Adam", dict(lr=0.05)),
    "adam_l2": ("Adam", dict(lr=0.05, weight_decay=("WD", dict(weight_decay=0.1, weight_decouple=False)))),
    "adam_decoupled": ("Adam", dict(lr=0.05, weight_decay=("WD", dict(weight_decay=0.1)))),
    "adam_plain": ("Adam", dict(lr=0.05, eps=1e-8, optimized_update=False)),
    "amsgrad": ("AMSGrad", dict(lr=0.05)),
    "amsgrad_plain": ("AMSGrad", dict(lr=0.05, eps=1e-8, optimized_update=False)),
    "radam": ("RAdam", dict(lr=0.05)),
    "adabelief": ("AdaBelief", dict(lr=0.05)),
    "noam": ("Noam", dict(lr=1.0, warmup=4, d_model=16)),
}


def optimizer_page(torch, steps=12):
    C = optimizer_classes(torch)
    X, Y, W0, b0 = _opt_data()
    out = {}
    for key, (cls, kw) in _OPT_CONFIGS.items():
        kw = dict(kw)
        if "weight_decay" in kw:
            kw["weight_decay"] = C["WeightDecay"](**kw["weight_decay"][1])
        model = torch.nn.Linear(3, 2).double()
        with torch.no_grad():
            model.weight.copy_(torch.tensor(W0))
            model.bias.copy_(torch.tensor(b0))
        opt = C[cls](model.parameters(), **kw)
        Xt, Yt = torch.tensor(X), torch.tensor(Y)
        traj, losses = [], []
        for _ in range(steps):
            def closure():
                opt.zero_grad()
                loss = torch.nn.functional.mse_loss(model(Xt), Yt)
                loss.backward()
                return loss
            losses.append(opt.step(closure).item())
            traj.append(np.concatenate([_np(model.weight).ravel(), _np(model.bias)]))
        out[key] = np.array(traj)
        out[key + "_losses"] = losses
        out[key + "_group"] = {k: v for k, v in opt.param_groups[0].items() if k != "params"}
        out[key + "_state"] = sorted(opt.state[model.weight].keys())
    return out, C


def _np_opt(key, steps=12):
    X, Y, W, b = _opt_data()
    cls, kw = _OPT_CONFIGS[key]
    lr = kw.get("lr")
    b1, b2 = 0.9, 0.999
    eps = kw.get("eps", 1e-8 if cls == "RAdam" else 1e-16)
    p = np.concatenate([W.ravel(), b])
    m, v, vmax = np.zeros_like(p), np.zeros_like(p), np.zeros_like(p)
    traj = []
    for t in range(1, steps + 1):
        W, b = p[:6].reshape(2, 3), p[6:]
        d = 2 * (X @ W.T + b - Y) / Y.size  # d mse / d prediction
        g = np.concatenate([(d.T @ X).ravel(), d.sum(0)])
        if key == "adam_l2":
            g = g + 0.1 * p
        if key == "adam_decoupled":
            p = p * (1 - lr * 0.1)
        m = b1 * m + (1 - b1) * g
        if cls == "AdaBelief":
            v = b2 * v + (1 - b2) * (g - m) ** 2
        else:
            v = b2 * v + (1 - b2) * g * g
        vmax = np.maximum(vmax, v)
        # AdaBelief's effective settings (see the module docstring): amsgrad on, plain update,
        # no SGD fallback, and s + eps in place of v
        use_max = cls == "AMSGrad" or cls == "AdaBelief"
        vv = (vmax if use_max else v) + (eps if cls == "AdaBelief" else 0)
        optimized = not (key.endswith("_plain") or cls == "AdaBelief")
        bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
        step_lr = lr
        if cls == "Noam":
            step_lr = lr * 16 ** -0.5 * min(t ** -0.5, t * 4 ** -1.5)
        r = 1.0
        if cls in ("RAdam", "AdaBelief"):
            rho_inf = 2 / (1 - b2) - 1
            rho = rho_inf - 2 * t * b2 ** t / (1 - b2 ** t)
            if rho < 5:
                if cls == "RAdam":  # SGD with momentum while r_t is intractable
                    p = p - lr / bc1 * m
                traj.append(p)
                continue
            r = math.sqrt((rho - 4) * (rho - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho))
        if optimized:  # eps added to sqrt(v_t) before the bias correction
            p = p - step_lr * r * math.sqrt(bc2) / bc1 * m / (np.sqrt(vv) + eps)
        else:
            p = p - step_lr * r / bc1 * m / (np.sqrt(vv) / math.sqrt(bc2) + eps)
        traj.append(p)
    return np.array(traj)


def test_optimizers():
    r, C = optimizer_page(lucid)
    for key in _OPT_CONFIGS:
        np.testing.assert_allclose(r[key], _np_opt(key), rtol=1e-9, atol=1e-12, err_msg=key)
        assert r[key + "_losses"][-1] < r[key + "_losses"][0], key
    assert r["adam_losses"][-1] < 0.5 * r["adam_losses"][0]
    # the hyper-parameters land in the parameter groups through the defaults
    assert r["noam_group"] == dict(warmup=4, amsgrad=False, weight_decay=0.0, lr=1.0, betas=(0.9, 0.999), eps=1e-16)
    assert r["adabelief_group"]["amsgrad"] is True  # AdaBelief's positional hand-off (module docstring)
    assert r["adabelief_state"] == ["exp_avg", "exp_avg_var", "max_exp_avg_var", "step"]
    assert r["amsgrad_state"] == ["exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step"]
    # the r_t of RAdam: intractable below rho_t = 5 (the first five steps for beta2 = 0.999)
    rt = [C["RAdam"].calc_rectification_term(0.999, t) for t in range(1, 8)]
    assert rt[:5] == [None] * 5 and 0 < rt[5] < rt[6] < 1
    with pytest.raises(ValueError, match="Invalid learning rate: -1"):
        C["Adam"]([lucid.zeros(1, requires_grad=True)], lr=-1)
    with pytest.raises(ValueError, match="Invalid beta parameter at index 1: 1.0"):
        C["Adam"]([lucid.zeros(1, requires_grad=True)], betas=(0.9, 1.0))


def test_optimizers_match_lucid_optim():
    # Adam and AMSGrad without the optimized update are torch.optim.Adam's formulas; RAdam with it
    # is torch.optim.RAdam's
    r, _ = optimizer_page(lucid)
    X, Y, W0, b0 = _opt_data()
    for key, make in (("adam_plain", lambda ps: lucid.optim.Adam(ps, lr=0.05, eps=1e-8)),
                      ("amsgrad_plain", lambda ps: lucid.optim.Adam(ps, lr=0.05, eps=1e-8, amsgrad=True)),
                      ("radam", lambda ps: lucid.optim.RAdam(ps, lr=0.05, eps=1e-8))):
        model = lucid.nn.Linear(3, 2).double()
        with lucid.no_grad():
            model.weight.copy_(lucid.tensor(W0))
            model.bias.copy_(lucid.tensor(b0))
        opt = make(model.parameters())
        traj = []
        for _ in range(12):
            opt.zero_grad()
            lucid.nn.functional.mse_loss(model(lucid.tensor(X)), lucid.tensor(Y)).backward()
            opt.step()
            traj.append(np.concatenate([_np(model.weight).ravel(), _np(model.bias)]))
        np.testing.assert_allclose(r[key], np.array(traj), rtol=1e-9, atol=1e-12, err_msg=key)


def amsgrad_synthetic_page(torch, is_adam, steps):
    C = optimizer_classes(torch)
    nn = torch.nn
    x = nn.Parameter(torch.tensor([.0]))
    x_star = nn.Parameter(torch.tensor([-1]), requires_grad=False)

    def func(t: int, x_: nn.Parameter):
        if t % 101 == 1:
            return (1010 * x_).sum()
        else:
            return (-10 * x_).sum()

    if is_adam:
        optimizer = C["Adam"]([x], lr=1e-2, betas=(0.9, 0.99))
    else:
        optimizer = C["AMSGrad"]([x], lr=1e-2, betas=(0.9, 0.99))
    total_regret = 0
    for step in range(steps):
        regret = func(step, x) - func(step, x_star)
        total_regret += regret.item()
        regret.backward()
        optimizer.step()
        optimizer.zero_grad()
        x.data.clamp_(-1., +1.)
    return x.item(), total_regret / steps


def test_amsgrad_synthetic_experiment():
    # the page's experiment cut to 404 steps (4 periods of 101): Adam already drifts towards the
    # wrong end x = +1 while AMSGrad stays put (the page runs 10^7 steps to see both converge)
    xa, ra = amsgrad_synthetic_page(lucid, True, 404)
    xm, rm = amsgrad_synthetic_page(lucid, False, 404)
    assert xa > 0.08 and abs(xm) < 0.025 and xa > 4 * abs(xm)
    # a NumPy replay of both runs
    for is_adam, (x_got, r_got) in ((True, (xa, ra)), (False, (xm, rm))):
        x, m, v, vm, reg = 0.0, 0.0, 0.0, 0.0, 0.0
        for step in range(404):
            g = 1010.0 if step % 101 == 1 else -10.0
            reg += np.float32(g * np.float32(x)) + g
            m, v = 0.9 * m + 0.1 * g, 0.99 * v + 0.01 * g * g
            vm = v if is_adam else max(vm, v)
            t = step + 1
            x = min(1.0, max(-1.0, x - 1e-2 * math.sqrt(1 - 0.99 ** t) / (1 - 0.9 ** t) * m / (math.sqrt(vm) + 1e-16)))
        assert x_got == pytest.approx(x, abs=1e-4) and r_got == pytest.approx(reg / 404, rel=1e-4)


def test_optimizers_torch_parity():
    torch = pytest.importorskip("torch")
    r, _ = optimizer_page(lucid)
    t, _ = optimizer_page(torch)
    for key in _OPT_CONFIGS:
        np.testing.assert_allclose(r[key], t[key], rtol=1e-9, atol=1e-12, err_msg=key)
        assert r[key + "_group"] == t[key + "_group"] and r[key + "_state"] == t[key + "_state"]
    for is_adam in (True, False):
        a, b = amsgrad_synthetic_page(lucid, is_adam, 202), amsgrad_synthetic_page(torch, is_adam, 202)
        assert a == pytest.approx(b, rel=1e-5, abs=1e-6)


# ---------------------------------------------------------------------------------------------
# sampling/__init__.py, greedy.py, temperature.py, top_k.py and nucleus.py


def sampling_classes(torch):
    nn = torch.nn
    Categorical = import_module(torch.__name__ + ".distributions").Categorical

    class Sampler:
        def __call__(self, logits: torch.Tensor) -> torch.Tensor:
            raise NotImplementedError()

    class GreedySampler(Sampler):
        def __call__(self, logits: torch.Tensor):
            return logits.argmax(dim=-1)

    class TemperatureSampler(Sampler):
        def __init__(self, temperature: float = 1.0):
            self.temperature = temperature

        def __call__(self, logits: torch.Tensor):
            dist = Categorical(logits=logits / self.temperature)
            return dist.sample()

    class TopKSampler(Sampler):
        def __init__(self, k: int, sampler: Sampler):
            self.k = k
            self.sampler = sampler

        def __call__(self, logits: torch.Tensor):
            zeros = logits.new_ones(logits.shape) * float('-inf')
            values, indices = torch.topk(logits, self.k, dim=-1)
            zeros.scatter_(-1, indices, values)
            return self.sampler(zeros)

    class NucleusSampler(Sampler):
        def __init__(self, p: float, sampler: Sampler):
            self.p = p
            self.sampler = sampler
            self.softmax = nn.Softmax(dim=-1)

        def __call__(self, logits: torch.Tensor):
            probs = self.softmax(logits)
            sorted_probs, indices = torch.sort(probs, dim=-1, descending=True)
            cum_sum_probs = torch.cumsum(sorted_probs, dim=-1)
            nucleus = cum_sum_probs < self.p
            nucleus = torch.cat([nucleus.new_ones(nucleus.shape[:-1] + (1,)), nucleus[..., :-1]], dim=-1)
            sorted_log_probs = torch.log(sorted_probs)
            sorted_log_probs[~nucleus] = float('-inf')
            sampled_sorted_indexes = self.sampler(sorted_log_probs)
            res = indices.gather(-1, sampled_sorted_indexes.unsqueeze(-1))
            return res.squeeze(-1)

    class Recorder(Sampler):  # not on the page: hands on to a sampler and keeps what it was given
        def __init__(self, sampler):
            self.sampler, self.seen = sampler, []

        def __call__(self, logits):
            self.seen.append(logits)
            return self.sampler(logits)

    return dict(GreedySampler=GreedySampler, TemperatureSampler=TemperatureSampler, TopKSampler=TopKSampler,
                NucleusSampler=NucleusSampler, Recorder=Recorder)


_LOGITS = np.array([1.5, -0.3, 0.9, 2.2, -1.1, 0.1], dtype=np.float32)


def sampling_page(torch, n=6000):
    C = sampling_classes(torch)
    logits = torch.tensor(np.tile(_LOGITS, (n, 1)))
    out = {}
    torch.manual_seed(0)
    out["greedy"] = C["GreedySampler"]()(logits[:3]).tolist()
    out["temperature"] = np.bincount(_np(C["TemperatureSampler"](0.7)(logits)), minlength=6)
    rec = C["Recorder"](C["TemperatureSampler"](1.0))
    out["top_k"] = np.bincount(_np(C["TopKSampler"](3, rec)(logits)), minlength=6)
    out["top_k_logits"] = _np(rec.seen[0][0])
    rec = C["Recorder"](C["TemperatureSampler"](1.0))
    out["nucleus"] = np.bincount(_np(C["NucleusSampler"](0.8, rec)(logits)), minlength=6)
    out["nucleus_logits"] = _np(rec.seen[0][0])
    # deterministic: greedy inside top-k / nucleus on a batch of different rows
    rows = torch.tensor(np.random.default_rng(71).standard_normal((5, 3, 7)).astype(np.float32))
    out["top_k_greedy"] = _np(C["TopKSampler"](2, C["GreedySampler"]())(rows))
    rec = C["Recorder"](C["GreedySampler"]())
    out["nucleus_greedy"] = _np(C["NucleusSampler"](0.5, rec)(rows))
    out["nucleus_rows"] = _np(rec.seen[0])
    return out


def _chi2_ok(counts, probs):
    # each count within 5 standard deviations of its binomial mean; zero-probability tokens never drawn
    n = counts.sum()
    for c, p in zip(counts, probs):
        if p == 0:
            assert c == 0
        else:
            assert abs(c - n * p) < 5 * math.sqrt(n * p * (1 - p)) + 1, (counts, probs)


def test_sampling():
    r = sampling_page(lucid)
    z = _LOGITS.astype(np.float64)
    softmax = lambda v: np.exp(v - v.max()) / np.exp(v - v.max()).sum()  # noqa: E731
    assert r["greedy"] == [3, 3, 3]
    _chi2_ok(r["temperature"], softmax(z / 0.7))
    top = np.argsort(-z)[:3]
    expect = np.full(6, -np.inf)
    expect[top] = z[top]
    np.testing.assert_array_equal(r["top_k_logits"], expect.astype(np.float32))
    _chi2_ok(r["top_k"], softmax(expect))
    # nucleus p = 0.8: the tokens whose preceding sorted cumulative probability is below 0.8
    ps = softmax(z)
    order = np.argsort(-ps)
    keep = np.concatenate([[True], np.cumsum(ps[order])[:-1] < 0.8])
    want = np.where(keep, np.log(ps[order]), -np.inf)
    np.testing.assert_allclose(r["nucleus_logits"], want, rtol=1e-6)
    nuc = np.zeros(6)
    nuc[order[keep]] = ps[order[keep]]
    _chi2_ok(r["nucleus"], nuc / nuc.sum())
    assert keep.sum() == 3 and (r["nucleus"] > 0).sum() == 3
    rows = np.random.default_rng(71).standard_normal((5, 3, 7))
    np.testing.assert_array_equal(r["top_k_greedy"], rows.argmax(-1))  # greedy of the top-k is the argmax
    np.testing.assert_array_equal(r["nucleus_greedy"], rows.argmax(-1))
    # the first sorted entry always stays in the nucleus, whatever p
    assert np.isfinite(r["nucleus_rows"][..., 0]).all() and np.isinf(r["nucleus_rows"]).any()


def test_sampling_torch_parity():
    torch = pytest.importorskip("torch")
    r, t = sampling_page(lucid), sampling_page(torch)
    assert r["greedy"] == t["greedy"]
    for k in ("top_k_logits", "nucleus_logits", "nucleus_rows"):
        np.testing.assert_allclose(r[k], t[k], rtol=1e-6)
    for k in ("top_k_greedy", "nucleus_greedy"):
        np.testing.assert_array_equal(r[k], t[k])
    for k in ("temperature", "top_k", "nucleus"):  # different random streams: the same support
        np.testing.assert_array_equal(r[k] > 0, t[k] > 0)


# ---------------------------------------------------------------------------------------------
# rl/ppo/gae.py, rl/ppo/__init__.py and rl/ppo/experiment.py


class GAE:
    def __init__(self, n_workers: int, worker_steps: int, gamma: float, lambda_: float):
        self.lambda_ = lambda_
        self.gamma = gamma
        self.worker_steps = worker_steps
        self.n_workers = n_workers

    def __call__(self, done: np.ndarray, rewards: np.ndarray, values: np.ndarray) -> np.ndarray:
        advantages = np.zeros((self.n_workers, self.worker_steps), dtype=np.float32)
        last_advantage = 0
        last_value = values[:, -1]
        for t in reversed(range(self.worker_steps)):
            mask = 1.0 - done[:, t]
            last_value = last_value * mask
            last_advantage = last_advantage * mask
            delta = rewards[:, t] + self.gamma * last_value - values[:, t]
            last_advantage = delta + self.gamma * self.lambda_ * last_advantage
            advantages[:, t] = last_advantage
            last_value = values[:, t]
        return advantages


class _ToyGame:
    """Stands in for the page's Atari ``Worker``: 4 states shown one-hot (as uint8 frames 0/255),
    reward 1 when the action equals the state, an episode is 8 steps; ``step`` returns
    ``(obs, reward, done, info)`` with the episode's total reward in ``info`` when it ends."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.reset()

    def _obs(self):
        o = np.zeros(4, np.uint8)
        o[self.s] = 255
        return o

    def reset(self):
        self.s, self.t, self.total = int(self.rng.integers(4)), 0, 0.0
        return self._obs()

    def step(self, a):
        r = float(a == self.s)
        self.total += r
        self.t += 1
        self.s = int(self.rng.integers(4))
        if self.t == 8:
            info = {"reward": self.total, "length": 8}
            return self.reset(), r, True, info
        return self._obs(), r, False, None


def ppo_classes(torch):
    nn = torch.nn
    Categorical = import_module(torch.__name__ + ".distributions").Categorical
    device = torch.get_default_device()

    class ClippedPPOLoss(nn.Module):
        def __init__(self):
            super().__init__()

        def __call__(self, log_pi: torch.Tensor, sampled_log_pi: torch.Tensor,
                     advantage: torch.Tensor, clip: float) -> torch.Tensor:
            ratio = torch.exp(log_pi - sampled_log_pi)
            clipped_ratio = ratio.clamp(min=1.0 - clip,
                                        max=1.0 + clip)
            policy_reward = torch.min(ratio * advantage,
                                      clipped_ratio * advantage)
            self.clip_fraction = (abs((ratio - 1.0)) > clip).to(torch.float).mean()
            return -policy_reward.mean()

    class ClippedValueFunctionLoss(nn.Module):
        def __call__(self, value: torch.Tensor, sampled_value: torch.Tensor, sampled_return: torch.Tensor, clip: float):
            clipped_value = sampled_value + (value - sampled_value).clamp(min=-clip, max=clip)
            vf_loss = torch.max((value - sampled_return) ** 2, (clipped_value - sampled_return) ** 2)
            return 0.5 * vf_loss.mean()

    class Model(nn.Module):  # the page's conv net on 84x84 frames, as a small MLP on 4 features
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(in_features=4, out_features=16)
            self.pi_logits = nn.Linear(in_features=16, out_features=4)
            self.value = nn.Linear(in_features=16, out_features=1)
            self.activation = nn.ReLU()

        def __call__(self, obs: torch.Tensor):
            h = self.activation(self.lin(obs))
            pi = Categorical(logits=self.pi_logits(h))
            value = self.value(h).reshape(-1)
            return pi, value

    def obs_to_torch(obs: np.ndarray) -> torch.Tensor:
        return torch.tensor(obs, dtype=torch.float32, device=device) / 255.

    class Trainer:
        def __init__(self, updates=6, lr=3e-2):
            self.updates = updates
            self.epochs = 4
            self.n_workers = 4
            self.worker_steps = 16
            self.n_mini_batch = 4
            self.batch_size = self.n_workers * self.worker_steps
            self.mini_batch_size = self.batch_size // self.n_mini_batch
            assert (self.batch_size % self.n_mini_batch == 0)
            self.lr = lr
            self.workers = [_ToyGame(47 + i) for i in range(self.n_workers)]
            self.obs = np.zeros((self.n_workers, 4), dtype=np.uint8)
            for i, worker in enumerate(self.workers):
                self.obs[i] = worker.reset()
            self.model = Model().to(device)
            _set_params(torch, self.model, 81)
            self.optimizer = torch.optim.Adam(self.model.parameters(), lr=lr)
            self.gae = GAE(self.n_workers, self.worker_steps, 0.99, 0.95)
            self.ppo_loss = ClippedPPOLoss()
            self.value_loss = ClippedValueFunctionLoss()
            self.episode_rewards = []

        def sample(self):
            rewards = np.zeros((self.n_workers, self.worker_steps), dtype=np.float32)
            actions = np.zeros((self.n_workers, self.worker_steps), dtype=np.int32)
            done = np.zeros((self.n_workers, self.worker_steps), dtype=bool)  # np.bool: not in NumPy 1.24-1.26
            obs = np.zeros((self.n_workers, self.worker_steps, 4), dtype=np.uint8)
            log_pis = np.zeros((self.n_workers, self.worker_steps), dtype=np.float32)
            values = np.zeros((self.n_workers, self.worker_steps + 1), dtype=np.float32)
            with torch.no_grad():
                for t in range(self.worker_steps):
                    obs[:, t] = self.obs
                    pi, v = self.model(obs_to_torch(self.obs))
                    values[:, t] = v.cpu().numpy()
                    a = pi.sample()
                    actions[:, t] = a.cpu().numpy()
                    log_pis[:, t] = pi.log_prob(a).cpu().numpy()
                    for w, worker in enumerate(self.workers):
                        self.obs[w], rewards[w, t], done[w, t], info = worker.step(actions[w, t])
                        if info:
                            self.episode_rewards.append(info['reward'])
                _, v = self.model(obs_to_torch(self.obs))
                values[:, self.worker_steps] = v.cpu().numpy()
            advantages = self.gae(done, rewards, values)
            samples = {
                'obs': obs,
                'actions': actions,
                'values': values[:, :-1],
                'log_pis': log_pis,
                'advantages': advantages
            }
            samples_flat = {}
            for k, v in samples.items():
                v = v.reshape(v.shape[0] * v.shape[1], *v.shape[2:])
                if k == 'obs':
                    samples_flat[k] = obs_to_torch(v)
                else:
                    samples_flat[k] = torch.tensor(v, device=device)
            return samples_flat

        def train(self, samples, learning_rate: float, clip_range: float):
            for _ in range(self.epochs):
                indexes = torch.randperm(self.batch_size)
                for start in range(0, self.batch_size, self.mini_batch_size):
                    end = start + self.mini_batch_size
                    mini_batch_indexes = indexes[start: end]
                    mini_batch = {}
                    for k, v in samples.items():
                        mini_batch[k] = v[mini_batch_indexes]
                    loss = self._calc_loss(clip_range=clip_range,
                                           samples=mini_batch)
                    for pg in self.optimizer.param_groups:
                        pg['lr'] = learning_rate
                    self.optimizer.zero_grad()
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm=0.5)
                    self.optimizer.step()

        @staticmethod
        def _normalize(adv: torch.Tensor):
            return (adv - adv.mean()) / (adv.std() + 1e-8)

        def _calc_loss(self, samples, clip_range: float) -> torch.Tensor:
            sampled_return = samples['values'] + samples['advantages']
            sampled_normalized_advantage = self._normalize(samples['advantages'])
            pi, value = self.model(samples['obs'])
            log_pi = pi.log_prob(samples['actions'])
            policy_loss = self.ppo_loss(log_pi, samples['log_pis'], sampled_normalized_advantage, clip_range)
            entropy_bonus = pi.entropy()
            entropy_bonus = entropy_bonus.mean()
            value_loss = self.value_loss(value, samples['values'], sampled_return, clip_range)
            loss = policy_loss + 0.5 * value_loss - 0.01 * entropy_bonus
            self.approx_kl_divergence = .5 * ((samples['log_pis'] - log_pi) ** 2).mean()
            return loss

        def run_training_loop(self):
            for update in range(self.updates):
                progress = update / self.updates
                learning_rate = self.lr * (1 - progress)
                clip_range = 0.1 * (1 - progress)
                samples = self.sample()
                self.train(samples, learning_rate, clip_range)

        def p_correct(self):  # not on the page: the policy's chance of the rewarded action
            with torch.no_grad():
                pi, _ = self.model(obs_to_torch(np.eye(4, dtype=np.uint8) * 255))
                return float(_np(pi.probs).diagonal().mean())

    return dict(ClippedPPOLoss=ClippedPPOLoss, ClippedValueFunctionLoss=ClippedValueFunctionLoss,
                Trainer=Trainer, obs_to_torch=obs_to_torch)


def _np_gae(done, rewards, values, gamma, lam):
    # A_t = sum_k (gamma lambda)^k delta_{t+k}, stopping after the step whose episode ends, with
    # delta_t = r_t + gamma V(s_{t+1}) (1 - done_t) - V(s_t)
    W, T = rewards.shape
    adv = np.zeros((W, T))
    for w in range(W):
        delta = [rewards[w, t] + gamma * values[w, t + 1] * (1 - done[w, t]) - values[w, t] for t in range(T)]
        for t in range(T):
            acc, f = 0.0, 1.0
            for k in range(t, T):
                acc += f * delta[k]
                if done[w, k]:
                    break
                f *= gamma * lam
            adv[w, t] = acc
    return adv


def _ppo_samples(seed=82):
    rng = np.random.default_rng(seed)
    n = 16
    obs = np.eye(4, dtype=np.uint8)[rng.integers(0, 4, n)] * 255
    done = rng.random((2, 8)) < 0.2
    rewards = rng.standard_normal((2, 8)).astype(np.float32)
    values = rng.standard_normal((2, 9)).astype(np.float32)
    adv = GAE(2, 8, 0.99, 0.95)(done, rewards, values)
    return dict(obs=obs, actions=rng.integers(0, 4, n), values=values[:, :-1].reshape(-1),
                log_pis=(np.log(0.25) + 0.3 * rng.standard_normal(n)).astype(np.float32),
                advantages=adv.reshape(-1)), (done, rewards, values, adv)


def ppo_page(torch, train=True):
    C = ppo_classes(torch)
    out = {}
    trainer = C["Trainer"]()
    raw, _ = _ppo_samples()
    samples = {k: (C["obs_to_torch"](v) if k == "obs" else torch.tensor(v)) for k, v in raw.items()}
    loss = trainer._calc_loss(samples, clip_range=0.1)
    loss.backward()
    out["loss"] = loss.item()
    out["kl"] = trainer.approx_kl_divergence.item()
    out["clip_fraction"] = trainer.ppo_loss.clip_fraction.item()
    out["grads"] = [_np(p.grad) for p in trainer.model.parameters()]
    # the two losses on their own, float64, for a NumPy recomputation and their gradients
    rng = np.random.default_rng(83)
    lp = torch.tensor(rng.standard_normal(12) * 0.3, requires_grad=True)
    slp, adv = torch.tensor(np.zeros(12)), torch.tensor(rng.standard_normal(12))
    pl = C["ClippedPPOLoss"]()
    ppo = pl(lp, slp, adv, 0.2)
    ppo.backward()
    out["ppo"], out["ppo_grad"], out["ppo_clip_fraction"] = ppo.item(), _np(lp.grad), pl.clip_fraction.item()
    val = torch.tensor(rng.standard_normal(12), requires_grad=True)
    sv, sr = torch.tensor(rng.standard_normal(12)), torch.tensor(rng.standard_normal(12))
    vl = C["ClippedValueFunctionLoss"]()(val, sv, sr, 0.2)
    vl.backward()
    out["vf"], out["vf_grad"] = vl.item(), _np(val.grad)
    out["ppo_inputs"] = (_np(lp), _np(adv), _np(val), _np(sv), _np(sr))
    if train:
        torch.manual_seed(0)
        trainer = C["Trainer"]()
        out["p_correct0"] = trainer.p_correct()
        trainer.run_training_loop()
        out["p_correct"] = trainer.p_correct()
        out["episode_rewards"] = trainer.episode_rewards
    return out


def test_ppo_gae_and_losses():
    _, (done, rewards, values, adv) = _ppo_samples()
    np.testing.assert_allclose(adv, _np_gae(done, rewards, values, 0.99, 0.95), rtol=1e-5, atol=1e-5)
    r = ppo_page(lucid)
    lp, a, v, sv, sr = r["ppo_inputs"]
    ratio = np.exp(lp)
    pr = np.minimum(ratio * a, np.clip(ratio, 0.8, 1.2) * a)
    assert r["ppo"] == pytest.approx(-pr.mean(), rel=1e-12)
    assert r["ppo_clip_fraction"] == pytest.approx(np.mean(np.abs(ratio - 1) > 0.2))
    # d/dlog_pi: -ratio * A / n where the unclipped term is the minimum, 0 where the clip took over
    unclipped = ratio * a <= np.clip(ratio, 0.8, 1.2) * a
    np.testing.assert_allclose(r["ppo_grad"], np.where(unclipped, -ratio * a / 12, 0), rtol=1e-10, atol=1e-15)
    assert (~unclipped).any() and unclipped.any()
    cv = sv + np.clip(v - sv, -0.2, 0.2)
    assert r["vf"] == pytest.approx(0.5 * np.maximum((v - sr) ** 2, (cv - sr) ** 2).mean(), rel=1e-12)
    assert r["kl"] > 0 and all(np.isfinite(g).all() for g in r["grads"])
    # 6 updates of 4 epochs x 4 mini-batches on the toy game: the policy's chance of the rewarded
    # action doubles, and the last episodes score well above a random policy's expected 2 of 8
    assert r["p_correct"] > 2 * r["p_correct0"]
    assert np.mean(r["episode_rewards"][-4:]) > 3.5


def test_ppo_gae_and_losses_torch_parity():
    torch = pytest.importorskip("torch")
    r, t = ppo_page(lucid, train=False), ppo_page(torch, train=False)
    for k in ("loss", "kl", "clip_fraction", "ppo", "ppo_clip_fraction", "vf"):
        assert r[k] == pytest.approx(t[k], rel=1e-5, abs=1e-7), k
    for k in ("ppo_grad", "vf_grad"):
        np.testing.assert_allclose(r[k], t[k], rtol=1e-10, atol=1e-15)
    for a, b in zip(r["grads"], t["grads"]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# lora/__init__.py and gan/wasserstein (__init__.py and gradient_penalty/__init__.py)


def lora_classes(torch):
    nn = torch.nn

    class Linear(nn.Module):
        def __init__(self, in_features: int, out_features: int, bias: bool,
                     r: int, alpha: int = None):
            super().__init__()
            if alpha is None:
                alpha = r
            self.weight = nn.Parameter(torch.empty((out_features, in_features)))
            self.weight.requires_grad = False
            if bias:
                self.bias = nn.Parameter(torch.empty(out_features))
                self.bias.requires_grad = False
            else:
                self.bias = None
            self.scaling = alpha / r
            self.lora_a = nn.Parameter(torch.empty((r, in_features)))
            self.lora_b = nn.Parameter(torch.empty((out_features, r)))
            with torch.no_grad():
                nn.init.kaiming_uniform_(self.lora_a, a=5 ** 0.5)
                nn.init.zeros_(self.lora_b)

        def forward(self, x: torch.Tensor):
            result = nn.functional.linear(x, self.weight, bias=self.bias)
            result += (x @ self.lora_a.T @ self.lora_b.T) * self.scaling
            return result

    class Embedding(nn.Module):
        def __init__(self, num_embeddings: int, embedding_dim: int,
                     r: int, alpha: int = None):
            super().__init__()
            if alpha is None:
                alpha = r
            self.weight = nn.Parameter(torch.empty((num_embeddings, embedding_dim)))
            self.weight.requires_grad = False
            self.scaling = alpha / r
            self.lora_a = nn.Parameter(torch.empty((r, num_embeddings)))
            self.lora_b = nn.Parameter(torch.empty((embedding_dim, r)))
            with torch.no_grad():
                nn.init.normal_(self.lora_a)
                nn.init.zeros_(self.lora_b)

        def forward(self, x: torch.Tensor):
            result = nn.functional.embedding(x, self.weight)
            result += (nn.functional.embedding(x, self.lora_a.T) @ self.lora_b.T) * self.scaling
            return result

    return dict(Linear=Linear, Embedding=Embedding)


def wgan_classes(torch):
    F = torch.nn.functional
    nn = torch.nn

    class DiscriminatorLoss(nn.Module):
        def __call__(self, f_real: torch.Tensor, f_fake: torch.Tensor):
            return F.relu(1 - f_real).mean(), F.relu(1 + f_fake).mean()

    class GeneratorLoss(nn.Module):
        def __call__(self, f_fake: torch.Tensor):
            return -f_fake.mean()

    class GradientPenalty(nn.Module):
        def __call__(self, x: torch.Tensor, f: torch.Tensor):
            batch_size = x.shape[0]
            # inputs=[x], not the page's bare x: Lucid's grad returns a bare gradient for a bare
            # input (README "Differences from PyTorch"), which ``gradients, *_ =`` would unpack
            gradients, *_ = torch.autograd.grad(outputs=f,
                                                inputs=[x],
                                                grad_outputs=f.new_ones(f.shape),
                                                create_graph=True)
            gradients = gradients.reshape(batch_size, -1)
            norm = gradients.norm(2, dim=-1)
            return torch.mean((norm - 1) ** 2)

    return dict(DiscriminatorLoss=DiscriminatorLoss, GeneratorLoss=GeneratorLoss, GradientPenalty=GradientPenalty)


def _lora_data():
    rng = np.random.default_rng(91)
    W, b = rng.standard_normal((4, 6)) * 0.4, rng.standard_normal(4) * 0.1
    dW = rng.standard_normal((4, 2)) @ rng.standard_normal((2, 6)) * 0.3  # a rank-2 change
    X = rng.standard_normal((32, 6))
    return W, b, dW, X, rng.standard_normal((10, 5)), rng.standard_normal((5, 2)), rng.standard_normal((2, 10))


def lora_page(torch, steps=40):
    C = lora_classes(torch)
    W, b, dW, X, E, B, A = _lora_data()
    out = {}
    lin = C["Linear"](6, 4, bias=True, r=2, alpha=4)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor(W, dtype=torch.float32))
        lin.bias.copy_(torch.tensor(b, dtype=torch.float32))
    out["a_init_absmax"] = float(np.abs(_np(lin.lora_a)).max())
    out["b_init"] = _np(lin.lora_b)
    Xt = torch.tensor(X, dtype=torch.float32)
    out["y_init"] = _np(lin(Xt))
    out["trainable"] = sorted(n for n, p in lin.named_parameters() if p.requires_grad)
    with torch.no_grad():  # the same starting A in both libraries
        lin.lora_a.copy_(torch.tensor(np.random.default_rng(92).uniform(-0.4, 0.4, (2, 6)), dtype=torch.float32))
    target = torch.tensor(X @ (W + dW).T + b, dtype=torch.float32)
    opt = torch.optim.Adam([p for p in lin.parameters() if p.requires_grad], lr=0.05)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(lin(Xt), target)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    out["losses"] = losses
    out["weight_after"], out["weight_grad"] = _np(lin.weight), lin.weight.grad
    out["lora_after"] = (_np(lin.lora_a), _np(lin.lora_b))
    out["y_after"] = _np(lin(Xt))
    emb = C["Embedding"](10, 5, r=2)
    with torch.no_grad():
        emb.weight.copy_(torch.tensor(E, dtype=torch.float32))
        emb.lora_b.copy_(torch.tensor(B, dtype=torch.float32))
        emb.lora_a.copy_(torch.tensor(A, dtype=torch.float32))
    out["emb"] = _np(emb(torch.tensor([[1, 4, 4], [9, 0, 2]])))
    return out, C


def test_lora():
    r, C = lora_page(lucid)
    W, b, dW, X, E, B, A = _lora_data()
    # at initialization B = 0: the layer is the pre-trained linear; A ~ kaiming_uniform(a=sqrt(5)),
    # bound 1 / sqrt(fan_in)
    assert not r["b_init"].any() and 0 < r["a_init_absmax"] <= 1 / math.sqrt(6)
    np.testing.assert_allclose(r["y_init"], X @ W.T + b, rtol=1e-5, atol=1e-6)
    assert r["trainable"] == ["lora_a", "lora_b"]
    # training moves only A and B, and fits the rank-2 change: the loss falls by 95%
    np.testing.assert_array_equal(r["weight_after"], W.astype(np.float32))
    assert r["weight_grad"] is None
    assert r["losses"][-1] < 0.05 * r["losses"][0]
    a, bb = r["lora_after"]
    np.testing.assert_allclose(r["y_after"], X @ W.T + b + 2.0 * X @ a.T @ bb.T, rtol=1e-4, atol=1e-5)
    idx = np.array([[1, 4, 4], [9, 0, 2]])
    np.testing.assert_allclose(r["emb"], E[idx] + A.T[idx] @ B.T, rtol=1e-5, atol=1e-6)
    # float64 gradient check of the LoRA linear in x, A and B
    lin = C["Linear"](3, 2, bias=True, r=2).double()
    _set_params(lucid, lin, 93)
    x = lucid.tensor(np.random.default_rng(94).standard_normal((4, 3)), requires_grad=True)
    fc = import_module("lucid.func").functional_call
    assert lucid.autograd.gradcheck(lambda v, la, lb: fc(lin, {"lora_a": la, "lora_b": lb}, (v,)),
                                    (x, lin.lora_a.detach().clone().requires_grad_(),
                                     lin.lora_b.detach().clone().requires_grad_()))


def wgan_page(torch):
    C = wgan_classes(torch)
    nn = torch.nn
    rng = np.random.default_rng(95)
    out = {}
    fr, ff = torch.tensor(rng.standard_normal(8)), torch.tensor(rng.standard_normal(8))
    out["d_loss"] = [v.item() for v in C["DiscriminatorLoss"]()(fr, ff)]
    out["g_loss"] = C["GeneratorLoss"]()(ff).item()
    out["f"] = (_np(fr), _np(ff))
    gp = C["GradientPenalty"]()
    # a linear critic: grad_x D(x) = w for every sample, so the penalty is (|w| - 1)^2
    lin = nn.Sequential(nn.Flatten(), nn.Linear(6, 1)).double()
    _set_params(torch, lin, 96)
    x = torch.tensor(rng.standard_normal((5, 3, 2)), requires_grad=True)
    pen = gp(x, lin(x))
    pen.backward()
    out["lin_pen"], out["lin_w"], out["lin_w_grad"] = pen.item(), _np(lin[1].weight), _np(lin[1].weight.grad)
    out["lin_b_grad"] = None if lin[1].bias.grad is None else _np(lin[1].bias.grad)
    # a small tanh critic trained a few steps on the penalty alone
    critic = nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 1)).double()
    _set_params(torch, critic, 97, scale=3.0)
    opt = torch.optim.SGD(critic.parameters(), lr=0.05)
    xs = torch.tensor(rng.standard_normal((16, 2)), requires_grad=True)
    pens = []
    for _ in range(15):
        opt.zero_grad()
        pen = gp(xs, critic(xs))
        pen.backward()
        opt.step()
        pens.append(pen.item())
    out["pens"] = pens
    return out, C


def test_wgan_losses_and_gradient_penalty():
    r, C = wgan_page(lucid)
    fr, ff = r["f"]
    assert r["d_loss"] == pytest.approx([np.maximum(0, 1 - fr).mean(), np.maximum(0, 1 + ff).mean()], rel=1e-12)
    assert r["g_loss"] == pytest.approx(-ff.mean(), rel=1e-12)
    w = r["lin_w"].ravel()
    nw = np.linalg.norm(w)
    assert r["lin_pen"] == pytest.approx((nw - 1) ** 2, rel=1e-12)
    # d/dw (|w| - 1)^2 = 2 (|w| - 1) w / |w|, through the double backward; the bias never enters
    np.testing.assert_allclose(r["lin_w_grad"].ravel(), 2 * (nw - 1) * w / nw, rtol=1e-10)
    assert r["lin_b_grad"] is None or not r["lin_b_grad"].any()
    assert r["pens"][-1] < 0.5 * r["pens"][0]
    # float64 finite differences of the penalty of a tanh critic, in x and in its first weight
    critic = lucid.nn.Sequential(lucid.nn.Linear(2, 3), lucid.nn.Tanh(), lucid.nn.Linear(3, 1)).double()
    _set_params(lucid, critic, 98, scale=2.0)
    fc = import_module("lucid.func").functional_call
    gp = C["GradientPenalty"]()
    x = lucid.tensor(np.random.default_rng(99).standard_normal((4, 2)), requires_grad=True)
    w0 = critic[0].weight.detach().clone().requires_grad_()
    assert lucid.autograd.gradcheck(lambda v, w: gp(v, fc(critic, {"0.weight": w}, (v,))), (x, w0))


def test_lora_and_wgan_torch_parity():
    torch = pytest.importorskip("torch")
    (r, _), (t, _) = lora_page(lucid), lora_page(torch)
    assert r["trainable"] == t["trainable"] and t["weight_grad"] is None
    for k in ("y_init", "y_after", "emb"):
        np.testing.assert_allclose(r[k], t[k], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(r["losses"], t["losses"], rtol=1e-3, atol=1e-6)
    (r, _), (t, _) = wgan_page(lucid), wgan_page(torch)
    assert r["d_loss"] == pytest.approx(t["d_loss"], rel=1e-12) and r["g_loss"] == pytest.approx(t["g_loss"])
    assert r["lin_pen"] == pytest.approx(t["lin_pen"], rel=1e-12)
    np.testing.assert_allclose(r["lin_w_grad"], t["lin_w_grad"], rtol=1e-10)
    np.testing.assert_allclose(r["pens"], t["pens"], rtol=1e-9)


def test_gradient_penalty_with_a_bare_input():
    # the page's text as written: on Lucid ``gradients, *_ = grad(..., inputs=x)`` takes the first
    # sample's gradient (README "Differences from PyTorch"); [x] gives every sample's
    x = lucid.tensor(np.random.default_rng(100).standard_normal((5, 3)), requires_grad=True)
    f = (x * lucid.tensor([1.0, 2.0, 2.0], dtype=lucid.float64)).sum(-1, keepdim=True) * lucid.arange(1, 6)[:, None]
    bare, *_ = lucid.autograd.grad(outputs=f, inputs=x, grad_outputs=f.new_ones(f.shape), create_graph=True)
    listed, *_ = lucid.autograd.grad(outputs=f, inputs=[x], grad_outputs=f.new_ones(f.shape), create_graph=True)
    np.testing.assert_allclose(_np(listed), np.arange(1, 6)[:, None] * [1.0, 2.0, 2.0])
    np.testing.assert_allclose(_np(bare), [1.0, 2.0, 2.0])


# ---------------------------------------------------------------------------------------------
# lstm/__init__.py and hypernetworks/hyper_lstm.py


def lstm_classes(torch):
    nn = torch.nn

    class LSTMCell(nn.Module):
        def __init__(self, input_size: int, hidden_size: int, layer_norm: bool = False):
            super().__init__()
            self.hidden_lin = nn.Linear(hidden_size, 4 * hidden_size)
            self.input_lin = nn.Linear(input_size, 4 * hidden_size, bias=False)
            if layer_norm:
                self.layer_norm = nn.ModuleList([nn.LayerNorm(hidden_size) for _ in range(4)])
                self.layer_norm_c = nn.LayerNorm(hidden_size)
            else:
                self.layer_norm = nn.ModuleList([nn.Identity() for _ in range(4)])
                self.layer_norm_c = nn.Identity()

        def __call__(self, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor):
            ifgo = self.hidden_lin(h) + self.input_lin(x)
            ifgo = ifgo.chunk(4, dim=-1)
            ifgo = [self.layer_norm[i](ifgo[i]) for i in range(4)]
            i, f, g, o = ifgo
            c_next = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h_next = torch.sigmoid(o) * torch.tanh(self.layer_norm_c(c_next))
            return h_next, c_next

    class LSTM(nn.Module):
        def __init__(self, input_size: int, hidden_size: int, n_layers: int):
            super().__init__()
            self.n_layers = n_layers
            self.hidden_size = hidden_size
            self.cells = nn.ModuleList([LSTMCell(input_size, hidden_size)] +
                                       [LSTMCell(hidden_size, hidden_size) for _ in range(n_layers - 1)])

        def __call__(self, x: torch.Tensor, state=None):
            n_steps, batch_size = x.shape[:2]
            if state is None:
                h = [x.new_zeros(batch_size, self.hidden_size) for _ in range(self.n_layers)]
                c = [x.new_zeros(batch_size, self.hidden_size) for _ in range(self.n_layers)]
            else:
                (h, c) = state
                h, c = list(torch.unbind(h)), list(torch.unbind(c))
            out = []
            for t in range(n_steps):
                inp = x[t]
                for layer in range(self.n_layers):
                    h[layer], c[layer] = self.cells[layer](inp, h[layer], c[layer])
                    inp = h[layer]
                out.append(h[-1])
            out = torch.stack(out)
            h = torch.stack(h)
            c = torch.stack(c)
            return out, (h, c)

    class HyperLSTMCell(nn.Module):
        def __init__(self, input_size: int, hidden_size: int, hyper_size: int, n_z: int):
            super().__init__()
            self.hyper = LSTMCell(hidden_size + input_size, hyper_size, layer_norm=True)
            self.z_h = nn.Linear(hyper_size, 4 * n_z)
            self.z_x = nn.Linear(hyper_size, 4 * n_z)
            self.z_b = nn.Linear(hyper_size, 4 * n_z, bias=False)
            d_h = [nn.Linear(n_z, hidden_size, bias=False) for _ in range(4)]
            self.d_h = nn.ModuleList(d_h)
            d_x = [nn.Linear(n_z, hidden_size, bias=False) for _ in range(4)]
            self.d_x = nn.ModuleList(d_x)
            d_b = [nn.Linear(n_z, hidden_size) for _ in range(4)]
            self.d_b = nn.ModuleList(d_b)
            self.w_h = nn.ParameterList([nn.Parameter(torch.zeros(hidden_size, hidden_size)) for _ in range(4)])
            self.w_x = nn.ParameterList([nn.Parameter(torch.zeros(hidden_size, input_size)) for _ in range(4)])
            self.layer_norm = nn.ModuleList([nn.LayerNorm(hidden_size) for _ in range(4)])
            self.layer_norm_c = nn.LayerNorm(hidden_size)

        def __call__(self, x: torch.Tensor,
                     h: torch.Tensor, c: torch.Tensor,
                     h_hat: torch.Tensor, c_hat: torch.Tensor):
            x_hat = torch.cat((h, x), dim=-1)
            h_hat, c_hat = self.hyper(x_hat, h_hat, c_hat)
            z_h = self.z_h(h_hat).chunk(4, dim=-1)
            z_x = self.z_x(h_hat).chunk(4, dim=-1)
            z_b = self.z_b(h_hat).chunk(4, dim=-1)
            ifgo = []
            for i in range(4):
                d_h = self.d_h[i](z_h[i])
                d_x = self.d_x[i](z_x[i])
                y = d_h * torch.einsum('ij,bj->bi', self.w_h[i], h) + \
                    d_x * torch.einsum('ij,bj->bi', self.w_x[i], x) + \
                    self.d_b[i](z_b[i])
                ifgo.append(self.layer_norm[i](y))
            i, f, g, o = ifgo
            c_next = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h_next = torch.sigmoid(o) * torch.tanh(self.layer_norm_c(c_next))
            return h_next, c_next, h_hat, c_hat

    class HyperLSTM(nn.Module):
        def __init__(self, input_size: int, hidden_size: int, hyper_size: int, n_z: int, n_layers: int):
            super().__init__()
            self.n_layers = n_layers
            self.hidden_size = hidden_size
            self.hyper_size = hyper_size
            self.cells = nn.ModuleList([HyperLSTMCell(input_size, hidden_size, hyper_size, n_z)] +
                                       [HyperLSTMCell(hidden_size, hidden_size, hyper_size, n_z) for _ in
                                        range(n_layers - 1)])

        def __call__(self, x: torch.Tensor, state=None):
            n_steps, batch_size = x.shape[:2]
            if state is None:
                h = [x.new_zeros(batch_size, self.hidden_size) for _ in range(self.n_layers)]
                c = [x.new_zeros(batch_size, self.hidden_size) for _ in range(self.n_layers)]
                h_hat = [x.new_zeros(batch_size, self.hyper_size) for _ in range(self.n_layers)]
                c_hat = [x.new_zeros(batch_size, self.hyper_size) for _ in range(self.n_layers)]
            else:
                (h, c, h_hat, c_hat) = state
                h, c = list(torch.unbind(h)), list(torch.unbind(c))
                h_hat, c_hat = list(torch.unbind(h_hat)), list(torch.unbind(c_hat))
            out = []
            for t in range(n_steps):
                inp = x[t]
                for layer in range(self.n_layers):
                    h[layer], c[layer], h_hat[layer], c_hat[layer] = \
                        self.cells[layer](inp, h[layer], c[layer], h_hat[layer], c_hat[layer])
                    inp = h[layer]
                out.append(h[-1])
            out = torch.stack(out)
            h = torch.stack(h)
            c = torch.stack(c)
            h_hat = torch.stack(h_hat)
            c_hat = torch.stack(c_hat)
            return out, (h, c, h_hat, c_hat)

    return dict(LSTM=LSTM, LSTMCell=LSTMCell, HyperLSTM=HyperLSTM)


def _seq_data():
    rng = np.random.default_rng(111)
    x = rng.standard_normal((5, 3, 4))
    return x, np.cumsum(x[..., :2], 0) * 0.3  # a running sum of two features to predict


def hyper_lstm_page(torch, steps=3):
    C = lstm_classes(torch)
    x, y = _seq_data()
    xt = torch.tensor(x, dtype=torch.float32)
    out = {}
    lstm = C["LSTM"](4, 6, 2)
    _set_params(torch, lstm, 112)
    o, (h, c) = lstm(xt)
    out["lstm"], out["lstm_h"], out["lstm_c"] = _np(o), _np(h), _np(c)
    out["lstm_params"] = {k: _np(v) for k, v in lstm.state_dict().items()}
    o2, _ = lstm(xt[3:], (h, c))
    out["lstm_resumed"] = _np(o2)
    hyper = C["HyperLSTM"](4, 6, 5, 3, 2)
    _set_params(torch, hyper, 113)
    head = torch.nn.Linear(6, 2)
    _set_params(torch, head, 114)
    o, state = hyper(xt)
    out["hyper"] = _np(o)
    out["hyper_state_shapes"] = [tuple(s.shape) for s in state]
    o_a, st = hyper(xt[:2])
    o_b, _ = hyper(xt[2:], st)
    out["hyper_split"] = np.concatenate([_np(o_a), _np(o_b)])
    opt = torch.optim.Adam(list(hyper.parameters()) + list(head.parameters()), lr=0.02)
    yt = torch.tensor(y, dtype=torch.float32)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        o, _ = hyper(xt)
        loss = torch.nn.functional.mse_loss(head(o), yt)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    out["losses"] = losses
    return out, C


def _np_lstm(x, P, n_layers, H):
    sig = lambda z: 1 / (1 + np.exp(-z))  # noqa: E731
    T, B, _ = x.shape
    h, c = [np.zeros((B, H)) for _ in range(n_layers)], [np.zeros((B, H)) for _ in range(n_layers)]
    out = []
    for t in range(T):
        inp = x[t]
        for ly in range(n_layers):
            p = f"cells.{ly}."
            z = h[ly] @ P[p + "hidden_lin.weight"].T + P[p + "hidden_lin.bias"] + inp @ P[p + "input_lin.weight"].T
            i, f, g, o = np.split(z, 4, -1)
            c[ly] = sig(f) * c[ly] + sig(i) * np.tanh(g)
            h[ly] = sig(o) * np.tanh(c[ly])
            inp = h[ly]
        out.append(h[-1])
    return np.stack(out), np.stack(h), np.stack(c)


def test_lstm_and_hyper_lstm():
    r, C = hyper_lstm_page(lucid)
    x, y = _seq_data()
    o, h, c = _np_lstm(x, r["lstm_params"], 2, 6)
    np.testing.assert_allclose(r["lstm"], o, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(r["lstm_h"], h, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(r["lstm_c"], c, rtol=1e-5, atol=1e-6)
    # the page's LSTM is nn.LSTM's gates (i, f, g, o) with the bias on the hidden side
    P = r["lstm_params"]
    ref = lucid.nn.LSTM(4, 6, 2)
    with lucid.no_grad():
        for ly in range(2):
            getattr(ref, f"weight_ih_l{ly}").copy_(lucid.tensor(P[f"cells.{ly}.input_lin.weight"]))
            getattr(ref, f"weight_hh_l{ly}").copy_(lucid.tensor(P[f"cells.{ly}.hidden_lin.weight"]))
            getattr(ref, f"bias_hh_l{ly}").copy_(lucid.tensor(P[f"cells.{ly}.hidden_lin.bias"]))
            getattr(ref, f"bias_ih_l{ly}").zero_()
    np.testing.assert_allclose(_np(ref(lucid.tensor(x, dtype=lucid.float32))[0]), r["lstm"], rtol=1e-5, atol=1e-6)
    assert r["hyper_state_shapes"] == [(2, 3, 6), (2, 3, 6), (2, 3, 5), (2, 3, 5)]
    # running in two pieces with the state handed on (torch.unbind of the stacked state) is the same
    np.testing.assert_allclose(r["hyper_split"], r["hyper"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(r["lstm_resumed"], _np_lstm_resumed(x, P), rtol=1e-5, atol=1e-6)
    assert r["losses"][-1] < 0.6 * r["losses"][0]
    hyper = C["HyperLSTM"](2, 3, 2, 2, 1).double()
    _set_params(lucid, hyper, 115)
    xs = lucid.tensor(np.random.default_rng(116).standard_normal((2, 2, 2)), requires_grad=True)
    assert lucid.autograd.gradcheck(lambda v: hyper(v)[0], (xs,))


def _np_lstm_resumed(x, P):
    _, h, c = _np_lstm(x, P, 2, 6)
    sig = lambda z: 1 / (1 + np.exp(-z))  # noqa: E731
    h, c = list(h), list(c)
    out = []
    for t in range(3, 5):
        inp = x[t]
        for ly in range(2):
            p = f"cells.{ly}."
            z = h[ly] @ P[p + "hidden_lin.weight"].T + P[p + "hidden_lin.bias"] + inp @ P[p + "input_lin.weight"].T
            i, f, g, o = np.split(z, 4, -1)
            c[ly] = sig(f) * c[ly] + sig(i) * np.tanh(g)
            h[ly] = sig(o) * np.tanh(c[ly])
            inp = h[ly]
        out.append(h[-1])
    return np.stack(out)


def test_lstm_and_hyper_lstm_torch_parity():
    torch = pytest.importorskip("torch")
    (r, _), (t, _) = hyper_lstm_page(lucid), hyper_lstm_page(torch)
    for k in ("lstm", "lstm_h", "lstm_c", "lstm_resumed", "hyper", "hyper_split"):
        np.testing.assert_allclose(r[k], t[k], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(r["losses"], t["losses"], rtol=1e-3, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# transformers/switch/__init__.py and experiment.py (with feed_forward.py, utils.subsequent_mask
# and utils.clone_module_list)


def switch_classes(torch):
    import copy
    nn = torch.nn
    MultiHeadAttention = transformer_classes(torch)["MultiHeadAttention"]

    def clone_module_list(module: nn.Module, n: int):
        return nn.ModuleList([copy.deepcopy(module) for _ in range(n)])

    def subsequent_mask(seq_len):
        mask = torch.tril(torch.ones(seq_len, seq_len)).to(torch.bool).unsqueeze(-1)
        return mask

    class FeedForward(nn.Module):
        def __init__(self, d_model: int, d_ff: int,
                     dropout: float = 0.1,
                     activation=nn.ReLU(),
                     is_gated: bool = False,
                     bias1: bool = True,
                     bias2: bool = True,
                     bias_gate: bool = True):
            super().__init__()
            self.layer1 = nn.Linear(d_model, d_ff, bias=bias1)
            self.layer2 = nn.Linear(d_ff, d_model, bias=bias2)
            self.dropout = nn.Dropout(dropout)
            self.activation = activation
            self.is_gated = is_gated
            if is_gated:
                self.linear_v = nn.Linear(d_model, d_ff, bias=bias_gate)

        def forward(self, x: torch.Tensor):
            g = self.activation(self.layer1(x))
            if self.is_gated:
                x = g * self.linear_v(x)
            else:
                x = g
            x = self.dropout(x)
            return self.layer2(x)

    class SwitchFeedForward(nn.Module):
        def __init__(self, *,
                     capacity_factor: float,
                     drop_tokens: bool,
                     is_scale_prob: bool,
                     n_experts: int,
                     expert: FeedForward,
                     d_model: int):
            super().__init__()
            self.capacity_factor = capacity_factor
            self.is_scale_prob = is_scale_prob
            self.n_experts = n_experts
            self.drop_tokens = drop_tokens
            self.experts = clone_module_list(expert, n_experts)
            self.switch = nn.Linear(d_model, n_experts)
            self.softmax = nn.Softmax(dim=-1)

        def forward(self, x: torch.Tensor):
            seq_len, batch_size, d_model = x.shape
            x = x.view(-1, d_model)
            route_prob = self.softmax(self.switch(x))
            route_prob_max, routes = torch.max(route_prob, dim=-1)
            if self.is_scale_prob:
                factor = route_prob_max
            else:
                factor = route_prob_max / route_prob_max.detach()
            x = x * factor.view(-1, 1)
            indexes_list = [torch.eq(routes, i).nonzero(as_tuple=True)[0] for i in range(self.n_experts)]
            final_output = x.new_zeros(x.shape)
            capacity = int(self.capacity_factor * len(x) / self.n_experts)
            counts = x.new_tensor([len(indexes_list[i]) for i in range(self.n_experts)])
            dropped = []
            if self.drop_tokens:
                for i in range(self.n_experts):
                    if len(indexes_list[i]) <= capacity:
                        continue
                    indexes_list[i] = indexes_list[i][torch.randperm(len(indexes_list[i]))]
                    dropped.append(indexes_list[i][capacity:])
                    indexes_list[i] = indexes_list[i][:capacity]
            route_outputs = [self.experts[i](x[indexes_list[i], :]) for i in range(self.n_experts)]
            for i in range(self.n_experts):
                final_output[indexes_list[i], :] = route_outputs[i]
            if dropped:
                dropped = torch.cat(dropped)
                final_output[dropped, :] = x[dropped, :]
            final_output = final_output.view(seq_len, batch_size, d_model)
            return final_output, counts, route_prob.sum(0), len(dropped)

    class SwitchTransformerLayer(nn.Module):
        def __init__(self, *,
                     d_model: int,
                     attn: MultiHeadAttention,
                     feed_forward: SwitchFeedForward,
                     dropout_prob: float):
            super().__init__()
            self.size = d_model
            self.attn = attn
            self.feed_forward = feed_forward
            self.dropout = nn.Dropout(dropout_prob)
            self.norm_self_attn = nn.LayerNorm([d_model])
            self.norm_ff = nn.LayerNorm([d_model])

        def forward(self, *,
                    x: torch.Tensor,
                    mask: torch.Tensor):
            z = self.norm_self_attn(x)
            self_attn = self.attn(query=z, key=z, value=z, mask=mask)
            x = x + self.dropout(self_attn)
            z = self.norm_ff(x)
            ff, counts, route_prob, n_dropped = self.feed_forward(z)
            x = x + self.dropout(ff)
            return x, counts, route_prob, n_dropped

    class SwitchTransformer(nn.Module):
        def __init__(self, layer: SwitchTransformerLayer, n_layers: int):
            super().__init__()
            self.layers = clone_module_list(layer, n_layers)
            self.norm = nn.LayerNorm([layer.size])

        def forward(self, x: torch.Tensor, mask: torch.Tensor):
            counts, route_prob, n_dropped = [], [], []
            for layer in self.layers:
                x, f, p, n_d = layer(x=x, mask=mask)
                counts.append(f)
                route_prob.append(p)
                n_dropped.append(n_d)
            x = self.norm(x)
            return x, torch.stack(counts), torch.stack(route_prob), n_dropped

    class AutoregressiveModel(nn.Module):
        def __init__(self, n_vocab: int, d_model: int, transformer: nn.Module):
            super().__init__()
            self.src_embed = nn.Embedding(n_vocab, d_model)
            self.transformer = transformer
            self.generator = nn.Linear(d_model, n_vocab)
            self.mask = None

        def forward(self, x: torch.Tensor):
            if self.mask is None or self.mask.size(0) != len(x):
                self.mask = subsequent_mask(len(x)).to(x.device)
            x = self.src_embed(x)
            res, counts, route_prob, n_dropped = self.transformer(x, self.mask)
            res = self.generator(res)
            return res, counts, route_prob, n_dropped

    def make_model(n_vocab=8, d_model=8, heads=2, d_ff=16, n_layers=2, n_experts=4, drop_tokens=True,
                   capacity_factor=1.2, is_scale_prob=False):
        return AutoregressiveModel(n_vocab, d_model, SwitchTransformer(
            SwitchTransformerLayer(d_model=d_model,
                                   attn=MultiHeadAttention(heads, d_model, 0.0),
                                   feed_forward=SwitchFeedForward(capacity_factor=capacity_factor,
                                                                  drop_tokens=drop_tokens,
                                                                  is_scale_prob=is_scale_prob,
                                                                  n_experts=n_experts,
                                                                  expert=FeedForward(d_model, d_ff, 0.0),
                                                                  d_model=d_model),
                                   dropout_prob=0.0),
            n_layers))

    def step(model, optimizer, data, target, n_experts=4, load_balancing_loss_ceof=0.01, train=True):
        output, counts, route_prob, n_dropped = model(data)
        cross_entropy_loss = nn.CrossEntropyLoss()(output.view(-1, output.shape[-1]), target.view(-1))
        total = counts.sum(dim=-1, keepdims=True)
        route_frac = counts / total
        route_prob = route_prob / total
        load_balancing_loss = n_experts * (route_frac * route_prob).sum()
        loss = cross_entropy_loss + load_balancing_loss_ceof * load_balancing_loss
        if train:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
            optimizer.step()
            optimizer.zero_grad()
        return dict(ce=cross_entropy_loss.item(), lb=load_balancing_loss.item(), counts=_np(counts),
                    dropped=list(n_dropped), route_frac_std=route_frac.std().item())

    return dict(SwitchFeedForward=SwitchFeedForward, FeedForward=FeedForward, make_model=make_model, step=step,
                subsequent_mask=subsequent_mask)


def _switch_data():
    rng = np.random.default_rng(121)
    seq = np.array([rng.permutation(8) for _ in range(6)]).T  # [seq_len 8, batch 6]
    return np.ascontiguousarray(seq[:-1]), np.ascontiguousarray(seq[1:])


def switch_page(torch, drop_tokens, steps=10):
    C = switch_classes(torch)
    out = {}
    torch.manual_seed(0)
    ff = C["SwitchFeedForward"](capacity_factor=1.0, drop_tokens=drop_tokens, is_scale_prob=False, n_experts=3,
                                expert=C["FeedForward"](4, 6, 0.0), d_model=4)
    _set_params(torch, ff, 122)
    x = torch.tensor(np.random.default_rng(123).standard_normal((5, 2, 4)), dtype=torch.float32, requires_grad=True)
    y, counts, prob_sum, n_dropped = ff(x)
    y.sum().backward()
    out["ff"] = (_np(y), _np(counts), _np(prob_sum), n_dropped)
    out["ff_params"] = {k: _np(v) for k, v in ff.state_dict().items()}
    out["switch_grad"] = _np(ff.switch.weight.grad)
    out["x_grad"] = _np(x.grad)
    model = C["make_model"](drop_tokens=drop_tokens)
    _set_params(torch, model, 124)
    out["n_experts_params"] = len(list(model.transformer.layers[0].feed_forward.experts.parameters()))
    out["mask"] = _np(C["subsequent_mask"](3)).tolist()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    data, target = (torch.tensor(a) for a in _switch_data())
    out["steps"] = [C["step"](model, opt, data, target) for _ in range(steps)]
    out["eval"] = C["step"](model, opt, data, target, train=False)
    return out


def test_switch_transformer():
    for drop in (False, True):
        r = switch_page(lucid, drop)
        y, counts, prob_sum, n_dropped = r["ff"]
        P = r["ff_params"]
        x = np.random.default_rng(123).standard_normal((5, 2, 4)).astype(np.float32).reshape(10, 4)
        logits = x @ P["switch.weight"].T + P["switch.bias"]
        p = np.exp(logits - logits.max(-1, keepdims=True))
        p = p / p.sum(-1, keepdims=True)
        routes = p.argmax(-1)
        np.testing.assert_allclose(prob_sum, p.sum(0), rtol=1e-5)
        assert counts.tolist() == np.bincount(routes, minlength=3).tolist()
        yf = y.reshape(10, 4)
        expert = lambda e, v: np.maximum(0, v @ P[f"experts.{e}.layer1.weight"].T + P[f"experts.{e}.layer1.bias"]) \
            @ P[f"experts.{e}.layer2.weight"].T + P[f"experts.{e}.layer2.bias"]  # noqa: E731
        # each token is its expert's output, or (dropped, over the capacity int(1.0 * 10 / 3) = 3) itself
        kept = [np.allclose(yf[n], expert(routes[n], x[n]), rtol=1e-4, atol=1e-5) for n in range(10)]
        passed = [np.allclose(yf[n], x[n], rtol=1e-6) for n in range(10)]
        assert all(k or q for k, q in zip(kept, passed))
        expect_dropped = int(np.maximum(0, np.bincount(routes, minlength=3) - 3).sum()) if drop else 0
        assert n_dropped == expect_dropped == sum(not k for k in kept)
        # is_scale_prob=False multiplies by p / p.detach(): 1 in value, a gradient path to the router
        assert np.abs(r["switch_grad"]).sum() > 0
        assert r["n_experts_params"] == 4 * 4 and r["mask"] == [[[True], [False], [False]], [[True], [True], [False]],
                                                                [[True], [True], [True]]]
        s = r["steps"]
        # every one of the 7 x 6 tokens routed once in each of the 2 layers
        assert all(v["counts"].shape == (2, 4) and (v["counts"].sum(-1) == 42).all() for v in s)
        assert all(len(v["dropped"]) == 2 and (drop or v["dropped"] == [0, 0]) for v in s)
        # 10 Adam steps (lr 1e-2, for the experiment's Noam): cross entropy down by 30%
        assert r["eval"]["ce"] < 0.7 * s[0]["ce"]
        # the load-balancing loss N sum_i f_i P_i is 1 for a uniform router and at most N
        assert all(0 < v["lb"] <= 4 for v in s)
    assert expect_dropped > 0  # the dropping branch ran


def test_switch_transformer_torch_parity():
    torch = pytest.importorskip("torch")
    r, t = switch_page(lucid, False), switch_page(torch, False)
    for a, b in zip(r["ff"][:3], t["ff"][:3]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(r["switch_grad"], t["switch_grad"], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(r["x_grad"], t["x_grad"], rtol=1e-4, atol=1e-6)
    for a, b in zip(r["steps"] + [r["eval"]], t["steps"] + [t["eval"]]):
        assert a["ce"] == pytest.approx(b["ce"], rel=1e-4) and a["lb"] == pytest.approx(b["lb"], rel=1e-4)
        np.testing.assert_array_equal(a["counts"], b["counts"])


# ---------------------------------------------------------------------------------------------
# transformers/xl/relative_mha.py and transformers/feedback/__init__.py


def relative_classes(torch):
    nn = torch.nn
    T = transformer_classes(torch)
    MultiHeadAttention = T["MultiHeadAttention"]

    def shift_right(x: torch.Tensor):
        zero_pad = x.new_zeros(x.shape[0], 1, *x.shape[2:])
        x_padded = torch.cat([x, zero_pad], dim=1)
        x_padded = x_padded.view(x.shape[1] + 1, x.shape[0], *x.shape[2:])
        x = x_padded[:-1].view_as(x)
        return x

    class RelativeMultiHeadAttention(MultiHeadAttention):
        def __init__(self, heads: int, d_model: int, dropout_prob: float = 0.1):
            super().__init__(heads, d_model, dropout_prob, bias=False)
            self.P = 2 ** 12
            self.key_pos_embeddings = nn.Parameter(torch.zeros((self.P * 2, heads, self.d_k)), requires_grad=True)
            self.key_pos_bias = nn.Parameter(torch.zeros((self.P * 2, heads)), requires_grad=True)
            self.query_pos_bias = nn.Parameter(torch.zeros((heads, self.d_k)), requires_grad=True)

        def get_scores(self, query: torch.Tensor, key: torch.Tensor):
            key_pos_emb = self.key_pos_embeddings[self.P - key.shape[0]:self.P + query.shape[0]]
            key_pos_bias = self.key_pos_bias[self.P - key.shape[0]:self.P + query.shape[0]]
            query_pos_bias = self.query_pos_bias[None, None, :, :]
            ac = torch.einsum('ibhd,jbhd->ijbh', query + query_pos_bias, key)
            b = torch.einsum('ibhd,jhd->ijbh', query, key_pos_emb)
            d = key_pos_bias[None, :, None, :]
            bd = shift_right(b + d)
            bd = bd[:, -key.shape[0]:]
            return ac + bd

    return dict(shift_right=shift_right, RelativeMultiHeadAttention=RelativeMultiHeadAttention)


def feedback_classes(torch):
    nn = torch.nn
    T = transformer_classes(torch)
    S = switch_classes(torch)
    FeedForward = S["FeedForward"]
    import copy

    def clone_module_list(module, n):
        return nn.ModuleList([copy.deepcopy(module) for _ in range(n)])

    class PrepareForMultiHeadAttention(nn.Module):  # mha.py's, as in transformer_classes
        def __init__(self, d_model: int, heads: int, d_k: int, bias: bool):
            super().__init__()
            self.linear = nn.Linear(d_model, heads * d_k, bias=bias)
            self.heads = heads
            self.d_k = d_k

        def forward(self, x: torch.Tensor):
            head_shape = x.shape[:-1]
            x = self.linear(x)
            x = x.view(*head_shape, self.heads, self.d_k)
            return x

    class FeedbackAttention(nn.Module):
        def __init__(self, heads: int, d_model: int, dropout_prob: float = 0.1, *,
                     is_kv_precomputed: bool = False):
            super().__init__()
            self.d_k = d_model // heads
            self.heads = heads
            self.query = PrepareForMultiHeadAttention(d_model, heads, self.d_k, bias=False)
            if not is_kv_precomputed:
                self.key = PrepareForMultiHeadAttention(d_model, heads, self.d_k, bias=False)
                self.value = PrepareForMultiHeadAttention(d_model, heads, self.d_k, bias=True)
            else:
                self.key = None
                self.value = None
            self.output = nn.Linear(d_model, d_model)
            self.dropout = nn.Dropout(dropout_prob)
            self.scale = 1 / math.sqrt(self.d_k)
            self.softmax = nn.Softmax(dim=0)
            self.P = 2 ** 12
            self.key_pos_embeddings = nn.Parameter(torch.zeros((self.P, heads, self.d_k)), requires_grad=True)
            self.key_pos_bias = nn.Parameter(torch.zeros((self.P, heads)), requires_grad=True)
            self.query_pos_bias = nn.Parameter(torch.zeros((heads, self.d_k)), requires_grad=True)
            self.attn = None

        def get_scores(self, query: torch.Tensor, key: torch.Tensor):
            key_pos_emb = self.key_pos_embeddings[-key.shape[0]:]
            query_pos_bias = self.query_pos_bias[None, :, :]
            key_pos_bias = self.key_pos_bias[-key.shape[0]:]
            ac = torch.einsum('bhd,jbhd->jbh', query + query_pos_bias, key)
            bd = torch.einsum('bhd,jhd->jbh', query, key_pos_emb) + key_pos_bias[:, None, :]
            return ac + bd

        def forward(self, *,
                    query: torch.Tensor,
                    key: torch.Tensor,
                    value: torch.Tensor):
            query = self.query(query)
            if self.key:
                key = self.key(key)
            if self.value:
                value = self.value(value)
            scores = self.get_scores(query, key)
            scores *= self.scale
            attn = self.softmax(scores)
            attn = self.dropout(attn)
            x = torch.einsum("jbh,jbhd->bhd", attn, value)
            x = x.reshape(x.shape[0], -1)
            return self.output(x)

    class FeedbackTransformerLayer(nn.Module):
        def __init__(self, *,
                     d_model: int,
                     attn: FeedbackAttention,
                     feed_forward: FeedForward,
                     dropout_prob: float):
            super().__init__()
            self.size = d_model
            self.attn = attn
            self.feed_forward = feed_forward
            self.dropout = nn.Dropout(dropout_prob)
            self.norm_self_attn = nn.LayerNorm([d_model])
            self.norm_ff = nn.LayerNorm([d_model])

        def forward(self, *,
                    x: torch.Tensor,
                    key,
                    value):
            if key is not None:
                z = self.norm_self_attn(x)
                self_attn = self.attn(query=z, key=key, value=value)
                x = x + self.dropout(self_attn)
            z = self.norm_ff(x)
            ff = self.feed_forward(z)
            x = x + self.dropout(ff)
            return x

    class FeedbackTransformer(nn.Module):
        def __init__(self, layer: FeedbackTransformerLayer, n_layers: int):
            super().__init__()
            self.layers = clone_module_list(layer, n_layers)
            self.norm = nn.LayerNorm([layer.size])
            self.weights = nn.Parameter(torch.ones(n_layers + 1), requires_grad=True)
            self.softmax = nn.Softmax(0)

        def forward(self, x_seq: torch.Tensor):
            x_seq = torch.unbind(x_seq, dim=0)
            res = []
            mem = []
            for x in x_seq:
                layer_outputs = [x]
                mem_tensor = torch.stack(mem) if mem else None
                for layer in self.layers:
                    x = layer(x=x, key=mem_tensor, value=mem_tensor)
                    layer_outputs.append(x)
                layer_outputs = torch.stack(layer_outputs)
                mem.append(torch.einsum('lbd,l->bd', layer_outputs, self.softmax(self.weights)))
                res.append(x)
            res = torch.stack(res)
            return self.norm(res)

    class StackFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, memory, memory_grad, last, n):
            ctx._mem_grad = memory_grad
            ctx._n = n
            return memory[:n + 1]

        @staticmethod
        def backward(ctx, grad_output):
            n = ctx._n
            memory_grad = ctx._mem_grad
            memory_grad[:n + 1] += grad_output
            return None, None, memory_grad[n], None

    class Stack:
        def __init__(self, max_len: int):
            self.max_len = max_len
            self.memory = None
            self.memory_grad = None
            self.last = None
            self.n = -1
            self.last_get_n = -1

        def append(self, n: int, value: torch.Tensor):
            assert n == 0 or self.last_get_n == n - 1, f"{n}, {self.last_get_n}"
            with torch.no_grad():
                if self.memory is None or self.memory.shape[1:] != value.shape:
                    assert n == 0
                    self.memory = value.new_zeros(self.max_len, *value.shape, requires_grad=False)
                    self.memory_grad = value.new_zeros(self.memory.shape, requires_grad=False)
                elif n == 0:
                    self.memory_grad.fill_(0.)
                self.memory.data[n] = value.detach()
                self.n = n
            self.last = value

        def get(self):
            self.last_get_n = self.n
            return StackFunction.apply(self.memory, self.memory_grad, self.last, self.n)

    class FeedbackTransformerKV(nn.Module):
        def __init__(self, layer: FeedbackTransformerLayer, n_layers: int, d_model: int, heads: int, stack=Stack):
            super().__init__()
            self.layers = clone_module_list(layer, n_layers)
            self.norm = nn.LayerNorm([layer.size])
            self.weights = nn.Parameter(torch.ones(n_layers + 1), requires_grad=True)
            self.softmax = nn.Softmax(0)
            d_k = d_model // heads
            self.key = PrepareForMultiHeadAttention(d_model, heads, d_k, bias=False)
            self.value = PrepareForMultiHeadAttention(d_model, heads, d_k, bias=False)
            self.mem_key = stack(512)
            self.mem_value = stack(512)

        def forward(self, x_seq: torch.Tensor):
            x_seq = torch.unbind(x_seq, dim=0)
            res = []
            for step, x in enumerate(x_seq):
                layer_outputs = [x]
                key_tensor = None
                value_tensor = None
                if step > 0:
                    key_tensor = self.mem_key.get()
                    value_tensor = self.mem_value.get()
                for layer in self.layers:
                    x = layer(x=x, key=key_tensor, value=value_tensor)
                    layer_outputs.append(x)
                layer_outputs = torch.stack(layer_outputs)
                mem = torch.einsum('lbd,l->bd', layer_outputs, self.softmax(self.weights))
                self.mem_key.append(step, self.key(mem))
                self.mem_value.append(step, self.value(mem))
                res.append(x)
            res = torch.stack(res)
            return self.norm(res)

    class ListStack:  # not on the page: the plain torch.stack of a list that StackFunction replaces
        def __init__(self, max_len):
            self.items = []

        def append(self, n, value):
            if n == 0:
                self.items = []
            self.items.append(value)

        def get(self):
            return torch.stack(self.items)

    def make(kv, d_model=8, heads=2, n_layers=2, stack=Stack):
        attn = FeedbackAttention(heads, d_model, 0.0, is_kv_precomputed=kv)
        layer = FeedbackTransformerLayer(d_model=d_model, attn=attn, feed_forward=FeedForward(d_model, 16, 0.0),
                                         dropout_prob=0.0)
        if kv:
            return FeedbackTransformerKV(layer, n_layers, d_model, heads, stack=stack)
        return FeedbackTransformer(layer, n_layers)

    return dict(make=make, Stack=Stack, ListStack=ListStack)


def _set_pos_params(torch, module, seed):
    # the relative-position tables are 2^12 rows of zeros: fill the few rows used
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if "pos_" in name:
                p.copy_(torch.tensor(rng.standard_normal(tuple(p.shape)) * 0.3, dtype=p.dtype))


def relative_page(torch):
    C = relative_classes(torch)
    out = {}
    x = torch.tensor([[1, 2, 3], [4, 5, 6], [7, 8, 9]])
    out["shift3"] = C["shift_right"](x).tolist()
    x = torch.arange(1, 6)[None, :, None, None].repeat(5, 1, 1, 1)
    out["shift5"] = C["shift_right"](x)[:, :, 0, 0].tolist()
    x = torch.arange(1, 6)[None, :, None, None].repeat(3, 1, 1, 1)
    out["shift35"] = C["shift_right"](x)[:, :, 0, 0].tolist()
    mha = C["RelativeMultiHeadAttention"](2, 8, 0.0)
    _set_params(torch, mha, 131)
    _set_pos_params(torch, mha, 132)
    q = torch.tensor(np.random.default_rng(133).standard_normal((3, 2, 8)), dtype=torch.float32)
    kv = torch.tensor(np.random.default_rng(134).standard_normal((5, 2, 8)), dtype=torch.float32, requires_grad=True)
    y = mha(query=q, key=kv, value=kv)
    y.pow(2).sum().backward()
    out["rel"], out["rel_grad"] = _np(y), _np(kv.grad)
    out["rel_params"] = {k: _np(v) for k, v in mha.state_dict().items()}
    out["rel_pos_grad"] = _np(mha.key_pos_embeddings.grad[4096 - 5:4096 + 3])
    return out


def feedback_page(torch, kv, stack="Stack", steps=3):
    C = feedback_classes(torch)
    model = C["make"](kv, stack=C[stack])
    _set_params(torch, model, 141)
    _set_pos_params(torch, model, 142)
    x = torch.tensor(np.random.default_rng(143).standard_normal((5, 2, 8)), dtype=torch.float32)
    target = torch.tensor(np.random.default_rng(144).standard_normal((5, 2, 8)), dtype=torch.float32)
    out = {}
    y = model(x)
    loss = torch.nn.functional.mse_loss(y, target)
    loss.backward()
    out["y"], out["loss"] = _np(y), loss.item()
    out["grads"] = {n: _np(p.grad) for n, p in model.named_parameters() if p.grad is not None}
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(steps):
        opt.step()
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), target)
        loss.backward()
        losses.append(loss.item())
    out["losses"] = losses
    return out


def _np_shift_right(x):
    rows, cols = x.shape[:2]
    flat = np.concatenate([x, np.zeros((rows, 1) + x.shape[2:], x.dtype)], 1).reshape(-1, *x.shape[2:])
    return flat[:rows * cols].reshape(x.shape)


def test_relative_attention_and_feedback_transformer():
    r = relative_page(lucid)
    # the docstring's example (whose last row reads [9, 0, 7]: the code gives [6, 0, 7], on PyTorch too)
    assert r["shift3"] == [[1, 2, 3], [0, 4, 5], [6, 0, 7]] == _np_shift_right(np.arange(1, 10).reshape(3, 3)).tolist()
    a5 = np.tile(np.arange(1, 6)[None, :, None, None], (5, 1, 1, 1))
    assert r["shift5"] == _np_shift_right(a5)[:, :, 0, 0].tolist()
    assert r["shift35"] == _np_shift_right(a5[:3])[:, :, 0, 0].tolist()
    # relative attention: A + C from (Q + v) K, B + D from Q R_{i-j} + S_{i-j}, shifted
    P = r["rel_params"]
    q = np.random.default_rng(133).standard_normal((3, 2, 8)).astype(np.float32)
    kv = np.random.default_rng(134).standard_normal((5, 2, 8)).astype(np.float32)
    Q = (q @ P["query.linear.weight"].T).reshape(3, 2, 2, 4)
    K = (kv @ P["key.linear.weight"].T).reshape(5, 2, 2, 4)
    V = (kv @ P["value.linear.weight"].T + P["value.linear.bias"]).reshape(5, 2, 2, 4)
    R = P["key_pos_embeddings"][4096 - 5:4096 + 3]
    Sb = P["key_pos_bias"][4096 - 5:4096 + 3]
    ac = np.einsum('ibhd,jbhd->ijbh', Q + P["query_pos_bias"], K)
    bd = _np_shift_right(np.einsum('ibhd,jhd->ijbh', Q, R) + Sb[None, :, None, :])[:, -5:]
    s = (ac + bd) / 2
    a = np.exp(s - s.max(1, keepdims=True))
    a = a / a.sum(1, keepdims=True)
    y = np.einsum('ijbh,jbhd->ibhd', a, V).reshape(3, 2, 8) @ P["output.weight"].T + P["output.bias"]
    np.testing.assert_allclose(r["rel"], y, rtol=1e-4, atol=1e-5)
    assert np.abs(r["rel_pos_grad"]).sum() > 0
    # the feedback transformer with shared keys and values: StackFunction's shared memory and
    # hand-written backward give the gradients of the plain torch.stack of a list
    f = feedback_page(lucid, kv=True)
    g = feedback_page(lucid, kv=True, stack="ListStack")
    np.testing.assert_allclose(f["y"], g["y"], rtol=1e-6, atol=1e-6)
    assert f["grads"].keys() == g["grads"].keys()
    for k in f["grads"]:
        np.testing.assert_allclose(f["grads"][k], g["grads"][k], rtol=1e-4, atol=1e-6, err_msg=k)
    np.testing.assert_allclose(f["losses"], g["losses"], rtol=1e-5)
    assert f["losses"][-1] < 0.9 * f["loss"]
    h = feedback_page(lucid, kv=False)
    assert h["losses"][-1] < 0.9 * h["loss"] and "weights" in h["grads"]


def test_relative_attention_and_feedback_transformer_torch_parity():
    torch = pytest.importorskip("torch")
    r, t = relative_page(lucid), relative_page(torch)
    for k in ("shift3", "shift5", "shift35"):
        assert r[k] == t[k]
    for k in ("rel", "rel_grad", "rel_pos_grad"):
        np.testing.assert_allclose(r[k], t[k], rtol=1e-4, atol=1e-5)
    for kv in (False, True):
        r, t = feedback_page(lucid, kv), feedback_page(torch, kv)
        np.testing.assert_allclose(r["y"], t["y"], rtol=1e-5, atol=1e-6)
        assert r["grads"].keys() == t["grads"].keys()
        for k in r["grads"]:
            np.testing.assert_allclose(r["grads"][k], t["grads"][k], rtol=1e-3, atol=1e-6, err_msg=k)
        np.testing.assert_allclose(r["losses"], t["losses"], rtol=1e-4)


# ---------------------------------------------------------------------------------------------
# sketch_rnn/__init__.py


def sketch_classes(torch):
    nn = torch.nn
    Dataset = import_module(torch.__name__ + ".utils.data").Dataset
    distributions = import_module(torch.__name__ + ".distributions")

    class StrokesDataset(Dataset):
        def __init__(self, dataset: np.array, max_seq_length: int, scale=None):
            data = []
            for seq in dataset:
                if 10 < len(seq) <= max_seq_length:
                    seq = np.minimum(seq, 1000)
                    seq = np.maximum(seq, -1000)
                    seq = np.array(seq, dtype=np.float32)
                    data.append(seq)
            if scale is None:
                scale = np.std(np.concatenate([np.ravel(s[:, 0:2]) for s in data]))
            self.scale = scale
            longest_seq_len = max([len(seq) for seq in data])
            self.data = torch.zeros(len(data), longest_seq_len + 2, 5, dtype=torch.float)
            self.mask = torch.zeros(len(data), longest_seq_len + 1)
            for i, seq in enumerate(data):
                seq = torch.from_numpy(seq)
                len_seq = len(seq)
                self.data[i, 1:len_seq + 1, :2] = seq[:, :2] / scale
                self.data[i, 1:len_seq + 1, 2] = 1 - seq[:, 2]
                self.data[i, 1:len_seq + 1, 3] = seq[:, 2]
                self.data[i, len_seq + 1:, 4] = 1
                self.mask[i, :len_seq + 1] = 1
            self.data[:, 0, 2] = 1

        def __len__(self):
            return len(self.data)

        def __getitem__(self, idx: int):
            return self.data[idx], self.mask[idx]

    class BivariateGaussianMixture:
        def __init__(self, pi_logits: torch.Tensor, mu_x: torch.Tensor, mu_y: torch.Tensor,
                     sigma_x: torch.Tensor, sigma_y: torch.Tensor, rho_xy: torch.Tensor):
            self.pi_logits = pi_logits
            self.mu_x = mu_x
            self.mu_y = mu_y
            self.sigma_x = sigma_x
            self.sigma_y = sigma_y
            self.rho_xy = rho_xy

        @property
        def n_distributions(self):
            return self.pi_logits.shape[-1]

        def set_temperature(self, temperature: float):
            self.pi_logits /= temperature
            self.sigma_x *= math.sqrt(temperature)
            self.sigma_y *= math.sqrt(temperature)

        def get_distribution(self):
            sigma_x = torch.clamp_min(self.sigma_x, 1e-5)
            sigma_y = torch.clamp_min(self.sigma_y, 1e-5)
            rho_xy = torch.clamp(self.rho_xy, -1 + 1e-5, 1 - 1e-5)
            mean = torch.stack([self.mu_x, self.mu_y], -1)
            cov = torch.stack([
                sigma_x * sigma_x, rho_xy * sigma_x * sigma_y,
                rho_xy * sigma_x * sigma_y, sigma_y * sigma_y
            ], -1)
            cov = cov.view(*sigma_y.shape, 2, 2)
            multi_dist = distributions.MultivariateNormal(mean, covariance_matrix=cov)
            cat_dist = distributions.Categorical(logits=self.pi_logits)
            return cat_dist, multi_dist

    class EncoderRNN(nn.Module):
        def __init__(self, d_z: int, enc_hidden_size: int):
            super().__init__()
            self.lstm = nn.LSTM(5, enc_hidden_size, bidirectional=True)
            self.mu_head = nn.Linear(2 * enc_hidden_size, d_z)
            self.sigma_head = nn.Linear(2 * enc_hidden_size, d_z)

        def __call__(self, inputs: torch.Tensor, state=None):
            _, (hidden, cell) = self.lstm(inputs.float(), state)
            # einops.rearrange(hidden, 'fb b h -> b (fb h)') as plain tensor ops
            hidden = hidden.permute(1, 0, 2).reshape(hidden.shape[1], -1)
            mu = self.mu_head(hidden)
            sigma_hat = self.sigma_head(hidden)
            sigma = torch.exp(sigma_hat / 2.)
            z = mu + sigma * torch.normal(mu.new_zeros(mu.shape), mu.new_ones(mu.shape))
            return z, mu, sigma_hat

    class DecoderRNN(nn.Module):
        def __init__(self, d_z: int, dec_hidden_size: int, n_distributions: int):
            super().__init__()
            self.lstm = nn.LSTM(d_z + 5, dec_hidden_size)
            self.init_state = nn.Linear(d_z, 2 * dec_hidden_size)
            self.mixtures = nn.Linear(dec_hidden_size, 6 * n_distributions)
            self.q_head = nn.Linear(dec_hidden_size, 3)
            self.q_log_softmax = nn.LogSoftmax(-1)
            self.n_distributions = n_distributions
            self.dec_hidden_size = dec_hidden_size

        def __call__(self, x: torch.Tensor, z: torch.Tensor, state):
            if state is None:
                h, c = torch.split(torch.tanh(self.init_state(z)), self.dec_hidden_size, 1)
                state = (h.unsqueeze(0).contiguous(), c.unsqueeze(0).contiguous())
            outputs, state = self.lstm(x, state)
            q_logits = self.q_log_softmax(self.q_head(outputs))
            pi_logits, mu_x, mu_y, sigma_x, sigma_y, rho_xy = \
                torch.split(self.mixtures(outputs), self.n_distributions, 2)
            dist = BivariateGaussianMixture(pi_logits, mu_x, mu_y,
                                            torch.exp(sigma_x), torch.exp(sigma_y), torch.tanh(rho_xy))
            return dist, q_logits, state

    class ReconstructionLoss(nn.Module):
        def __call__(self, mask: torch.Tensor, target: torch.Tensor,
                     dist: 'BivariateGaussianMixture', q_logits: torch.Tensor):
            pi, mix = dist.get_distribution()
            xy = target[:, :, 0:2].unsqueeze(-2).expand(-1, -1, dist.n_distributions, -1)
            probs = torch.sum(pi.probs * torch.exp(mix.log_prob(xy)), 2)
            loss_stroke = -torch.mean(mask * torch.log(1e-5 + probs))
            loss_pen = -torch.mean(target[:, :, 2:] * q_logits)
            return loss_stroke + loss_pen

    class KLDivLoss(nn.Module):
        def __call__(self, sigma_hat: torch.Tensor, mu: torch.Tensor):
            return -0.5 * torch.mean(1 + sigma_hat - mu ** 2 - torch.exp(sigma_hat))

    def _sample_step(dist: 'BivariateGaussianMixture', q_logits: torch.Tensor, temperature: float):
        dist.set_temperature(temperature)
        pi, mix = dist.get_distribution()
        idx = pi.sample()[0, 0]
        q = distributions.Categorical(logits=q_logits / temperature)
        q_idx = q.sample()[0, 0]
        xy = mix.sample()[0, 0, idx]
        stroke = q_logits.new_zeros(5)
        stroke[:2] = xy
        stroke[q_idx + 2] = 1
        return stroke

    def sample(encoder, decoder, data: torch.Tensor, temperature: float):  # Sampler.sample without plot
        longest_seq_len = len(data)
        z, _, _ = encoder(data)
        s = data.new_tensor([0, 0, 1, 0, 0])
        seq = [s]
        state = None
        with torch.no_grad():
            for i in range(longest_seq_len):
                data = torch.cat([s.view(1, 1, -1), z.unsqueeze(0)], 2)
                dist, q_logits, state = decoder(data, z, state)
                s = _sample_step(dist, q_logits, temperature)
                seq.append(s)
                if s[4] == 1:
                    break
        seq = torch.stack(seq)
        # plot's first steps: cumulative (x, y) and the pen-up column
        seq[:, 0:2] = torch.cumsum(seq[:, 0:2], dim=0)
        seq[:, 2] = seq[:, 3]
        return seq[:, 0:3].detach().cpu().numpy()

    return dict(StrokesDataset=StrokesDataset, BivariateGaussianMixture=BivariateGaussianMixture,
                EncoderRNN=EncoderRNN, DecoderRNN=DecoderRNN, ReconstructionLoss=ReconstructionLoss,
                KLDivLoss=KLDivLoss, sample=sample)


def _strokes():
    rng = np.random.default_rng(151)
    seqs = []
    for n in (12, 14, 9, 16, 13):  # 9 and 16 are filtered out (10 < len <= 15)
        s = np.zeros((n, 3), np.int64)
        s[:, :2] = rng.integers(-30, 31, (n, 2))
        s[3::4, 2] = 1
        s[0, 0] = 2000  # clamped to 1000
        seqs.append(s)
    return seqs


def sketch_page(torch, steps=5, fixed_z=True):
    C = sketch_classes(torch)
    out = {}
    ds = C["StrokesDataset"](_strokes(), 15)
    out["scale"], out["data"], out["mask"] = float(ds.scale), _np(ds.data), _np(ds.mask)
    DataLoader = import_module(torch.__name__ + ".utils.data").DataLoader
    batch = next(iter(DataLoader(ds, 3)))
    data, mask = batch[0].transpose(0, 1), batch[1].transpose(0, 1)
    encoder, decoder = C["EncoderRNN"](4, 6), C["DecoderRNN"](4, 8, 3)
    _set_params(torch, encoder, 152)
    _set_params(torch, decoder, 153)
    params = list(encoder.parameters()) + list(decoder.parameters())
    opt = torch.optim.Adam(params, lr=1e-2)
    kl_div_loss, reconstruction_loss = C["KLDivLoss"](), C["ReconstructionLoss"]()
    z_noise = torch.tensor(np.random.default_rng(154).standard_normal((3, 4)), dtype=torch.float32)
    losses = []
    torch.manual_seed(0)
    for step in range(steps + 1):
        z, mu, sigma_hat = encoder(data)
        if fixed_z:  # the same z in both libraries: mu + sigma * a fixed draw
            z = mu + torch.exp(sigma_hat / 2.) * z_noise
        z_stack = z.unsqueeze(0).expand(data.shape[0] - 1, -1, -1)
        inputs = torch.cat([data[:-1], z_stack], 2)
        dist, q_logits, _ = decoder(inputs, z, None)
        kl_loss = kl_div_loss(sigma_hat, mu)
        rec = reconstruction_loss(mask, data[1:], dist, q_logits)
        loss = rec + 0.5 * kl_loss
        if step == 0:
            out["kl"], out["rec"] = kl_loss.item(), rec.item()
            out["mix"] = [_np(t) for t in (dist.pi_logits, dist.mu_x, dist.mu_y, dist.sigma_x, dist.sigma_y,
                                           dist.rho_xy, q_logits)]
            out["mu"], out["sigma_hat"] = _np(mu), _np(sigma_hat)
            out["batch"] = (_np(data), _np(mask))
        losses.append(loss.item())
        if step < steps:
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(encoder.parameters(), 1.)
            torch.nn.utils.clip_grad_norm_(decoder.parameters(), 1.)
            opt.step()
    out["losses"] = losses
    # _sample_step's temperature: pi / tau, sigma * sqrt(tau), in place on the decoder's outputs
    with torch.no_grad():
        dist, q_logits, _ = decoder(inputs[:1, :1], z[:1], None)
        before = [_np(dist.pi_logits), _np(dist.sigma_x)]
        dist.set_temperature(0.4)
        out["temperature"] = (before, [_np(dist.pi_logits), _np(dist.sigma_x)])
    torch.manual_seed(1)
    out["sampled"] = C["sample"](encoder, decoder, data[:, :1], 0.4)
    return out, C


def _np_sketch_loss(mix, data, mask):
    pil, mx, my, sx, sy, rho, q = (m.astype(np.float64) for m in mix)
    target = data[1:]
    x, y = target[..., :1], target[..., 1:2]
    sx, sy = np.maximum(sx, 1e-5), np.maximum(sy, 1e-5)
    rho = np.clip(rho, -1 + 1e-5, 1 - 1e-5)
    zx, zy = (x - mx) / sx, (y - my) / sy
    # the bivariate normal density
    pdf = np.exp(-(zx ** 2 - 2 * rho * zx * zy + zy ** 2) / (2 * (1 - rho ** 2))) / (
        2 * np.pi * sx * sy * np.sqrt(1 - rho ** 2))
    pi = np.exp(pil - pil.max(-1, keepdims=True))
    pi = pi / pi.sum(-1, keepdims=True)
    probs = (pi * pdf).sum(2)
    return -np.mean(mask * np.log(1e-5 + probs)) - np.mean(target[:, :, 2:] * q)


def test_setitem_copies_a_tensor_from_another_device():
    if lucid.get_default_device().type == "cpu":
        pytest.skip("needs a default device other than the CPU")
    a = lucid.zeros(3, 4)
    a[0, 1:3] = lucid.from_numpy(np.array([1.0, 2.0], np.float32))  # basic slicing: copy_ semantics
    a[1] = lucid.tensor(5.0, device="cpu")  # a 0-dim CPU tensor, allowed anywhere in PyTorch
    assert a.device == lucid.get_default_device()
    assert a.tolist() == [[0, 1, 2, 0], [5, 5, 5, 5], [0, 0, 0, 0]]


def test_sketch_rnn():
    r, C = sketch_page(lucid)
    seqs = [s for s in _strokes() if 10 < len(s) <= 15]
    clipped = [np.clip(s, -1000, 1000).astype(np.float32) for s in seqs]
    scale = np.std(np.concatenate([s[:, :2].ravel() for s in clipped]))
    assert r["scale"] == pytest.approx(scale, rel=1e-6)
    d, m = r["data"], r["mask"]
    L = max(len(s) for s in clipped)  # the 9- and 16-stroke drawings are filtered out
    assert len(clipped) == 3 and d.shape == (3, L + 2, 5) and m.shape == (3, L + 1)
    for i, s in enumerate(clipped):
        n = len(s)
        np.testing.assert_allclose(d[i, 1:n + 1, :2], s[:, :2] / scale, rtol=1e-6)
        np.testing.assert_array_equal(d[i, 1:n + 1, 2:4], np.stack([1 - s[:, 2], s[:, 2]], 1))
        assert (d[i, n + 1:, 4] == 1).all() and (d[i, :n + 1, 4] == 0).all()
        assert m[i].tolist() == [1.0] * (n + 1) + [0.0] * (L - n)
    assert (d[:, 0, :] == [0, 0, 1, 0, 0]).all()
    data, mask = r["batch"]
    assert r["rec"] == pytest.approx(_np_sketch_loss(r["mix"], data, mask), rel=1e-4)
    mu, sh = r["mu"].astype(np.float64), r["sigma_hat"].astype(np.float64)
    assert r["kl"] == pytest.approx(-0.5 * np.mean(1 + sh - mu ** 2 - np.exp(sh)), rel=1e-5)
    assert r["losses"][-1] < r["losses"][0] - 0.2
    (pi0, sx0), (pi1, sx1) = r["temperature"]
    np.testing.assert_allclose(pi1, pi0 / 0.4, rtol=1e-6)
    np.testing.assert_allclose(sx1, sx0 * math.sqrt(0.4), rtol=1e-6)
    s = r["sampled"]
    assert s.shape[1] == 3 and 2 <= len(s) <= 17 and np.isfinite(s).all()
    assert set(np.unique(s[1:, 2]).tolist()) <= {0.0, 1.0}


def test_sketch_rnn_mixture_log_prob_gradcheck():
    C = sketch_classes(lucid)
    rng = np.random.default_rng(155)
    params = [lucid.tensor(rng.standard_normal((2, 1, 3)) * s, requires_grad=True)
              for s in (1, 0.5, 0.5, 0.3, 0.3, 0.5)]
    target = lucid.tensor(rng.standard_normal((2, 1, 5)))
    mask = lucid.ones(2, 1, dtype=lucid.float64)
    q = lucid.log_softmax(lucid.tensor(rng.standard_normal((2, 1, 3))), -1)

    def loss(pl, mx, my, sx, sy, rho):
        dist = C["BivariateGaussianMixture"](pl, mx, my, lucid.exp(sx), lucid.exp(sy), lucid.tanh(rho))
        return C["ReconstructionLoss"]()(mask, target, dist, q)
    assert lucid.autograd.gradcheck(loss, tuple(params))


def test_sketch_rnn_torch_parity():
    torch = pytest.importorskip("torch")
    (r, _), (t, _) = sketch_page(lucid), sketch_page(torch)
    assert r["scale"] == pytest.approx(t["scale"], rel=1e-7)
    np.testing.assert_array_equal(r["data"], t["data"])
    np.testing.assert_array_equal(r["mask"], t["mask"])
    for a, b in zip(r["mix"], t["mix"]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    assert r["rec"] == pytest.approx(t["rec"], rel=1e-5) and r["kl"] == pytest.approx(t["kl"], rel=1e-5)
    np.testing.assert_allclose(r["losses"], t["losses"], rtol=1e-3)


# ---------------------------------------------------------------------------------------------
# gan/dcgan/__init__.py with gan/wasserstein/gradient_penalty/experiment.py's critic loss


def dcgan_classes(torch):
    nn = torch.nn
    C = wgan_classes(torch)

    # the page's channels 100/1024/512/256 (generator) and 256/512/1024 (critic) shrunk to 8/16/8/4 and 4/6/8
    class Generator(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.Sequential(
                nn.ConvTranspose2d(8, 16, 3, 1, 0, bias=False),
                nn.BatchNorm2d(16),
                nn.ReLU(True),
                nn.ConvTranspose2d(16, 8, 3, 2, 0, bias=False),
                nn.BatchNorm2d(8),
                nn.ReLU(True),
                nn.ConvTranspose2d(8, 4, 4, 2, 1, bias=False),
                nn.BatchNorm2d(4),
                nn.ReLU(True),
                nn.ConvTranspose2d(4, 1, 4, 2, 1, bias=False),
                nn.Tanh()
            )
            self.apply(_weights_init)

        def __call__(self, x):
            x = x.unsqueeze(-1).unsqueeze(-1)
            x = self.layers(x)
            return x

    class Discriminator(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.Sequential(
                nn.Conv2d(1, 4, 4, 2, 1, bias=False),
                nn.LeakyReLU(0.2, inplace=True),
                nn.Conv2d(4, 6, 4, 2, 1, bias=False),
                nn.BatchNorm2d(6),
                nn.LeakyReLU(0.2, inplace=True),
                nn.Conv2d(6, 8, 3, 2, 0, bias=False),
                nn.BatchNorm2d(8),
                nn.LeakyReLU(0.2, inplace=True),
                nn.Conv2d(8, 1, 3, 1, 0, bias=False),
            )
            self.apply(_weights_init)

        def forward(self, x):
            x = self.layers(x)
            return x.view(x.shape[0], -1)

    def _weights_init(m):
        classname = m.__class__.__name__
        if classname.find('Conv') != -1:
            nn.init.normal_(m.weight.data, 0.0, 0.02)
        elif classname.find('BatchNorm') != -1:
            nn.init.normal_(m.weight.data, 1.0, 0.02)
            nn.init.constant_(m.bias.data, 0)

    def calc_discriminator_loss(discriminator, generator, data, latent, gradient_penalty_coefficient=10.0):
        # gradient_penalty/experiment.py's Configs.calc_discriminator_loss in training mode
        data.requires_grad_()
        f_real = discriminator(data)
        f_fake = discriminator(generator(latent).detach())
        loss_true, loss_false = C["DiscriminatorLoss"]()(f_real, f_fake)
        gradient_penalty = C["GradientPenalty"]()(data, f_real)
        loss = loss_true + loss_false + gradient_penalty_coefficient * gradient_penalty
        return loss, gradient_penalty

    return dict(Generator=Generator, Discriminator=Discriminator, calc_discriminator_loss=calc_discriminator_loss)


def _dcgan_data():
    rng = np.random.default_rng(161)
    yy, xx = np.mgrid[:28, :28]
    centers = rng.uniform(8, 20, (4, 2))
    blobs = np.exp(-((yy - centers[:, :1, None]) ** 2 + (xx - centers[:, 1:, None]) ** 2) / 18.0)
    return (2 * blobs - 1)[:, None].astype(np.float32), rng.standard_normal((4, 8)).astype(np.float32)


def dcgan_page(torch, steps=4):
    C = dcgan_classes(torch)
    torch.manual_seed(0)
    generator, discriminator = C["Generator"](), C["Discriminator"]()
    out = {"bn_init": [(float(_np(m.weight).mean()), float(np.abs(_np(m.bias)).max()))
                       for m in discriminator.modules() if "BatchNorm" in type(m).__name__]}
    out["conv_init_std"] = float(np.std(np.concatenate([_np(m.weight).ravel() for m in generator.modules()
                                                        if "Conv" in type(m).__name__])))
    _set_params(torch, generator, 162)
    _set_params(torch, discriminator, 163)
    data, latent = (torch.tensor(a) for a in _dcgan_data())
    out["fake_shape"] = tuple(generator(latent).shape)
    opt = torch.optim.Adam(discriminator.parameters(), lr=1e-3, betas=(0.5, 0.999))
    losses, gps = [], []
    for _ in range(steps):
        opt.zero_grad()
        loss, gp = C["calc_discriminator_loss"](discriminator, generator, data.detach().clone(), latent)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        gps.append(gp.item())
    out["losses"], out["gps"] = losses, gps
    return out, C


def test_dcgan_critic_with_gradient_penalty():
    r, C = dcgan_page(lucid)
    # _weights_init through Module.apply on the .data of each weight: BatchNorm ~ N(1, 0.02), bias 0
    assert all(abs(m - 1) < 0.05 and b == 0 for m, b in r["bn_init"])
    assert 0.01 < r["conv_init_std"] < 0.03
    assert r["fake_shape"] == (4, 1, 28, 28)
    assert r["losses"][-1] < r["losses"][0] and all(np.isfinite(r["gps"]))
    # float64 finite differences of the penalty through in-place LeakyReLU, training-mode BatchNorm
    # and strided convolutions (a double backward), in the first BatchNorm's weight
    D = C["Discriminator"]().double()
    _set_params(lucid, D, 164)
    fc = import_module("lucid.func").functional_call
    gp = wgan_classes(lucid)["GradientPenalty"]()
    x = lucid.tensor(_dcgan_data()[0][:2].astype(np.float64), requires_grad=True)
    w = D.layers[3].weight.detach().clone().requires_grad_()
    assert lucid.autograd.gradcheck(lambda v: gp(x, fc(D, {"layers.3.weight": v}, (x,))), (w,))


def test_dcgan_critic_with_gradient_penalty_torch_parity():
    torch = pytest.importorskip("torch")
    (r, _), (t, _) = dcgan_page(lucid), dcgan_page(torch)
    assert r["fake_shape"] == t["fake_shape"]
    np.testing.assert_allclose(r["gps"], t["gps"], rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(r["losses"], t["losses"], rtol=1e-4, atol=1e-6)
