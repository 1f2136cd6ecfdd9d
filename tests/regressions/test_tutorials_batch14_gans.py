"""eriklindernoren/PyTorch-GAN and kuangliu/pytorch-cifar run on Lucid (``import lucid as torch``),
fourteenth batch:

- PyTorch-GAN ``implementations/<name>/<name>.py`` (and ``models.py`` / ``utils.py``): GAN (MLP
  generator with ``BatchNorm1d(out_feat, 0.8)``, ``BCELoss``, Adam), DCGAN (``weights_init_normal``
  through ``m.apply`` and ``classname.find``, ``Upsample``, ``Dropout2d``), LSGAN (the DCGAN models
  without the sigmoid, ``MSELoss``), WGAN (RMSprop, weight clipping by ``p.data.clamp_``,
  ``n_critic``), WGAN-GP (``compute_gradient_penalty``: ``autograd.grad(create_graph=True,
  retain_graph=True, only_inputs=True, grad_outputs=...)``), ACGAN (``torch.mul`` of a label
  ``Embedding`` and the noise, the auxiliary ``Softmax`` head under ``CrossEntropyLoss``, the
  NumPy accuracy), CGAN (``torch.cat`` of an ``Embedding`` and the noise), InfoGAN
  (``to_categorical``, the information loss over ``itertools.chain`` of both networks), BEGAN (the
  auto-encoder discriminator and the ``k`` update), Pix2Pix (``GeneratorUNet``'s ``UNetDown`` /
  ``UNetUp`` with ``InstanceNorm2d`` and ``ConvTranspose2d``, the PatchGAN ``Discriminator``),
  CycleGAN (``GeneratorResNet`` with ``ReflectionPad2d`` and ``InstanceNorm2d``, ``ReplayBuffer``,
  ``torch.optim.lr_scheduler.LambdaLR`` driven by the page's own ``LambdaLR`` class), ESRGAN's
  ``DenseResidualBlock`` / ``GeneratorRRDB`` and SRGAN's ``ResidualBlock`` (``PReLU``,
  ``PixelShuffle``).
- kuangliu/pytorch-cifar ``models/*.py``: ResNet18 (``BasicBlock``), PreActResNet18, MobileNetV2,
  DenseNet (``Bottleneck``/``Transition``), ShuffleNetV2 (``ShuffleBlock``, ``SplitBlock``,
  ``BasicBlock``, ``DownBlock``), SENet (the squeeze-and-excitation ``PreActBlock``) and
  dla_simple.py's ``SimpleDLA`` (``Root``, the recursive ``Tree``), each trained two steps by
  main.py's ``train`` loop (SGD with momentum and weight decay, its printed progress line).

Each page is a function of the module it is handed as ``torch``; the parity tests run the same text
on PyTorch with the weights Lucid drew (loaded through ``load_state_dict``) and the same data.

Adapted, so that CI stays within seconds and both libraries see the same numbers: torchvision's
datasets are synthetic NumPy images and ``save_image``/``make_grid`` are left out (no file is
written); ``opt`` is a ``SimpleNamespace`` with tiny sizes (8x8 to 32x32 images, batch 1 to 4) and
the channel widths of the models are divided (GAN/DCGAN generators by 8: 128 -> 16, 64 -> 8, the
MLPs' 128/256/512/1024 -> 16/32/64/128; discriminators by 4: 16/32/64/128 -> 4/8/16/32 and
512/256 -> 64/32; Pix2Pix and CycleGAN by 16: 64 -> 4 ...; the CIFAR models' 64/128/256/512 ->
4/8/16/32, SENet's -> 16/32/64/128 so that ``planes // 16`` stays positive), and the Pix2Pix
U-Net has five levels instead of eight (32x32 images, the innermost one 1x1 and not normalised,
as the original's ``down8``); ``np.random.<draw>`` is a seeded ``np.random.RandomState``'s method;
dropout probabilities are 0 so that the two libraries' random streams do not enter (the layers
stay); BEGAN's ``(...).data[0]`` on a 0-d tensor (an IndexError since PyTorch 0.5) is ``.item()``;
``autograd.grad(..., inputs=interpolates, ...)[0]`` passes ``inputs=[interpolates]`` (README
"Differences from PyTorch": Lucid returns a bare gradient for a bare input, whose ``[0]`` would be
the first sample's); ``Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor`` is ``_typed(torch,
torch.FloatTensor)``, which makes the tensors on the default device (the CPU, or the tests' strict
stand-in device) and InfoGAN's ``labels.numpy()`` is ``labels.cpu().numpy()``; the WGAN-GP
discriminator is the DCGAN convolutional one without batch norm and sigmoid, so that
the penalty's double backward runs through ``conv2d`` (its float64 finite-difference check uses
``Tensor = torch.DoubleTensor``); MobileNetV2's ``cfg`` has three stages (out planes 4/6/8,
strides 1/2/2, for 8x8 inputs), its head 8 -> 32 channels; DenseNet is ``DenseNet(Bottleneck,
[1, 1, 1, 1], growth_rate=2)``, ShuffleNetV2 has a ``configs`` entry of its own (out channels
8/16/32/64, one block a stage), SENet one block a stage, and SimpleDLA's widths are divided by 8.

Differences from PyTorch met here: the gradient penalty does not depend on the
critic's biases (only through LeakyReLU's piecewise-constant slopes), and there Lucid leaves
``.grad`` None where PyTorch stores zeros (the parity test accepts either); a weight whose gradient
is zero up to rounding (a conv bias before a BatchNorm) takes Adam steps of up to ``lr`` of either
sign in both libraries, so the parity tests compare steps only where gradients are well above eps.

Fixed on the way: a convolution's output was a channel-major view (strides (H*W, O*H*W, W, 1)), so
``out.view(out.shape[0], -1)`` right after a conv, or after the BatchNorm/ReLU/LeakyReLU that keep
their input's order, raised "view size is not compatible" where PyTorch's conv output is
contiguous (the WGAN-GP critic, ``Discriminator.forward`` of most pages); ``conv2d`` and
``conv_transpose2d`` now return row-major outputs (NOTE [Conv layout]). Likewise advanced indexing
that does not lead (``x[:, :, idx]``) gave NumPy's index-dim-first copy, so the outputs of
``nn.Upsample``/``F.interpolate`` (nearest) and of reflect/replicate padding could not be viewed
either; getitem's copies are now row-major. ``x.type(torch.Tensor)``
(cyclegan.py's ``Tensor = torch.Tensor``) raised a TypeError; it casts to the default dtype.
"""
import itertools
import io
import math
import random
import re
from contextlib import redirect_stdout
from importlib import import_module
from types import SimpleNamespace

import numpy as np
import pytest

import lucid
import lucid.nn  # noqa: F401
import lucid.optim  # noqa: F401


# ----------------------------------------------------------------------------------------------
# NumPy references
# ----------------------------------------------------------------------------------------------

def np_conv2d(x, w, b=None, stride=1, pad=0, groups=1):
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    ho, wo = (h - kh) // stride + 1, (wd - kw) // stride + 1
    cols = np.stack([x[:, :, i:i + stride * ho:stride, j:j + stride * wo:stride]
                     for i in range(kh) for j in range(kw)], axis=2)  # n, c, k, ho, wo
    og = o // groups
    outs = [np.einsum("nckhw,ock->nohw", cols[:, g * cg:(g + 1) * cg],
                      w[g * og:(g + 1) * og].reshape(og, cg, kh * kw)) for g in range(groups)]
    out = np.concatenate(outs, axis=1)
    return out if b is None else out + b[None, :, None, None]


def np_conv_transpose2d(x, w, stride=2, pad=1):
    n, c, h, wd = x.shape
    _, o, kh, kw = w.shape
    full = np.zeros((n, o, (h - 1) * stride + kh, (wd - 1) * stride + kw))
    for i in range(h):
        for j in range(wd):
            full[:, :, i * stride:i * stride + kh, j * stride:j * stride + kw] += \
                np.einsum("nc,cokl->nokl", x[:, :, i, j], w)
    return full[:, :, pad:full.shape[2] - pad, pad:full.shape[3] - pad]


def np_bn(x, g, b, eps=1e-5):
    axes = (0,) if x.ndim == 2 else (0, 2, 3)
    shape = (1, -1) if x.ndim == 2 else (1, -1, 1, 1)
    m, v = x.mean(axes, keepdims=True), x.var(axes, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * g.reshape(shape) + b.reshape(shape)


def np_instance_norm(x, eps=1e-5):
    m, v = x.mean((2, 3), keepdims=True), x.var((2, 3), keepdims=True)
    return (x - m) / np.sqrt(v + eps)


def leaky(x, s=0.2):
    return np.where(x > 0, x, s * x)


def relu(x):
    return np.maximum(x, 0)


def np_softmax(x):
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def np_cross_entropy(logits, y):
    lp = logits - logits.max(1, keepdims=True)
    lp = lp - np.log(np.exp(lp).sum(1, keepdims=True))
    return -lp[np.arange(len(y)), y].mean()


def np_bce(p, t):
    return -(t * np.log(p) + (1 - t) * np.log(1 - p)).mean()


def np_pixel_shuffle(x, r):
    n, c, h, w = x.shape
    return x.reshape(n, c // (r * r), r, r, h, w).transpose(0, 1, 4, 2, 5, 3).reshape(n, c // (r * r), h * r, w * r)


def _np(t):
    return t.detach().cpu().numpy().copy()


def _state(**models):
    return {f"{name}.{k}": _np(v) for name, m in models.items() for k, v in m.state_dict().items()}


def _load(torch, state, **models):
    for name, m in models.items():
        sd = {k[len(name) + 1:]: torch.tensor(v) for k, v in state.items() if k.startswith(name + ".")}
        m.load_state_dict(sd)


def _setup(torch, init, seed, **models):
    """The page's models keep Lucid's draws (``init`` None) or take the given ones."""
    if init is not None:
        _load(torch, init, **models)
    return _state(**models)


def _typed(torch, cls):
    """``torch.cuda.FloatTensor if cuda else torch.FloatTensor``: the legacy constructors make CPU
    tensors, so on another default device (the tests' strict stand-in) the pages get a class that
    makes them there, as ``torch.cuda.FloatTensor`` does; ``x.type(it)`` casts to its dtype."""
    dev = torch.get_default_device()
    if dev.type == "cpu":
        return cls

    class OnDevice:
        dtype = cls.dtype

        def __new__(k, *args):
            return cls(*args).to(dev)

    return OnDevice


def _images(seed, shape):
    return np.tanh(np.random.default_rng(seed).standard_normal(shape)).astype(np.float32)


def _assert_step(after, before, delta):
    """``after == before + delta`` up to float32 rounding of ``before``'s magnitude."""
    err = np.abs(after.astype(np.float64) - (before.astype(np.float64) + delta))
    big = np.maximum(np.abs(before), np.abs(after)).astype(np.float32)
    assert (err <= 2 * np.spacing(big) + 1e-6 * np.abs(delta)).all(), err.max()


def _same_text(a, b, atol=2e-6):
    """The same printed lines up to the last printed digit of each number."""
    assert re.sub(r"\d+\.\d+", "#", a) == re.sub(r"\d+\.\d+", "#", b)
    np.testing.assert_allclose(_numbers(a), _numbers(b), atol=atol)


def _numbers(text):
    return [float(v) for v in re.findall(r"-?\d+\.\d+", text)]


# ----------------------------------------------------------------------------------------------
# GAN (implementations/gan/gan.py)
# ----------------------------------------------------------------------------------------------

def gan_page(torch, batches, init=None, seed=0):
    nn = torch.nn
    Variable = import_module(torch.__name__ + ".autograd").Variable
    opt = SimpleNamespace(n_epochs=1, lr=0.0002, b1=0.5, b2=0.999, latent_dim=8, img_size=8, channels=1)
    img_shape = (opt.channels, opt.img_size, opt.img_size)
    random_state = np.random.RandomState(seed)

    class Generator(nn.Module):
        def __init__(self):
            super(Generator, self).__init__()

            def block(in_feat, out_feat, normalize=True):
                layers = [nn.Linear(in_feat, out_feat)]
                if normalize:
                    layers.append(nn.BatchNorm1d(out_feat, 0.8))
                layers.append(nn.LeakyReLU(0.2, inplace=True))
                return layers

            self.model = nn.Sequential(
                *block(opt.latent_dim, 16, normalize=False),
                *block(16, 32),
                *block(32, 64),
                *block(64, 128),
                nn.Linear(128, int(np.prod(img_shape))),
                nn.Tanh()
            )

        def forward(self, z):
            img = self.model(z)
            img = img.view(img.size(0), *img_shape)
            return img

    class Discriminator(nn.Module):
        def __init__(self):
            super(Discriminator, self).__init__()

            self.model = nn.Sequential(
                nn.Linear(int(np.prod(img_shape)), 64),
                nn.LeakyReLU(0.2, inplace=True),
                nn.Linear(64, 32),
                nn.LeakyReLU(0.2, inplace=True),
                nn.Linear(32, 1),
                nn.Sigmoid(),
            )

        def forward(self, img):
            img_flat = img.view(img.size(0), -1)
            validity = self.model(img_flat)

            return validity

    # Loss function
    adversarial_loss = torch.nn.BCELoss()

    # Initialize generator and discriminator
    torch.manual_seed(seed)
    generator = Generator()
    discriminator = Discriminator()
    rec = {"init": _setup(torch, init, seed, G=generator, D=discriminator), "steps": []}

    # Optimizers
    optimizer_G = torch.optim.Adam(generator.parameters(), lr=opt.lr, betas=(opt.b1, opt.b2))
    optimizer_D = torch.optim.Adam(discriminator.parameters(), lr=opt.lr, betas=(opt.b1, opt.b2))

    Tensor = _typed(torch, torch.FloatTensor)  # torch.cuda.FloatTensor if cuda else torch.FloatTensor
    dataloader = [(torch.tensor(b), None) for b in batches]
    text = io.StringIO()
    for epoch in range(opt.n_epochs):
        for i, (imgs, _) in enumerate(dataloader):

            # Adversarial ground truths
            valid = Variable(Tensor(imgs.size(0), 1).fill_(1.0), requires_grad=False)
            fake = Variable(Tensor(imgs.size(0), 1).fill_(0.0), requires_grad=False)

            # Configure input
            real_imgs = Variable(imgs.type(Tensor))

            # -----------------
            #  Train Generator
            # -----------------

            optimizer_G.zero_grad()

            # Sample noise as generator input
            z = Variable(Tensor(random_state.normal(0, 1, (imgs.shape[0], opt.latent_dim))))

            # Generate a batch of images
            gen_imgs = generator(z)

            # Loss measures generator's ability to fool the discriminator
            g_loss = adversarial_loss(discriminator(gen_imgs), valid)

            g_loss.backward()
            s = {"z": _np(z), "gen": _np(gen_imgs), "D": _state(D=discriminator),
                 "G_before": [_np(p) for p in generator.parameters()],
                 "G_grad": [_np(p.grad) for p in generator.parameters()]}
            optimizer_G.step()
            s["G_after"] = [_np(p) for p in generator.parameters()]

            # ---------------------
            #  Train Discriminator
            # ---------------------

            optimizer_D.zero_grad()

            # Measure discriminator's ability to classify real from generated samples
            real_loss = adversarial_loss(discriminator(real_imgs), valid)
            fake_loss = adversarial_loss(discriminator(gen_imgs.detach()), fake)
            d_loss = (real_loss + fake_loss) / 2

            d_loss.backward()
            optimizer_D.step()

            with redirect_stdout(text):
                print(
                    "[Epoch %d/%d] [Batch %d/%d] [D loss: %f] [G loss: %f]"
                    % (epoch, opt.n_epochs, i, len(dataloader), d_loss.item(), g_loss.item())
                )
            s.update(g_loss=g_loss.item(), real_loss=real_loss.item(), fake_loss=fake_loss.item(),
                     d_loss=d_loss.item())
            rec["steps"].append(s)
    rec["text"] = text.getvalue()
    return rec


def np_gan_generator(W, z):
    h = z
    for lin, bn in (("0", None), ("2", "3"), ("5", "6"), ("8", "9")):
        h = h @ W[f"G.model.{lin}.weight"].T + W[f"G.model.{lin}.bias"]
        if bn:
            h = np_bn(h, W[f"G.model.{bn}.weight"], W[f"G.model.{bn}.bias"], eps=0.8)
        h = leaky(h)
    h = np.tanh(h @ W["G.model.11.weight"].T + W["G.model.11.bias"])
    return h.reshape(len(z), 1, 8, 8)


def np_gan_discriminator(W, img):
    h = img.reshape(len(img), -1)
    h = leaky(h @ W["D.model.0.weight"].T + W["D.model.0.bias"])
    h = leaky(h @ W["D.model.2.weight"].T + W["D.model.2.bias"])
    return 1 / (1 + np.exp(-(h @ W["D.model.4.weight"].T + W["D.model.4.bias"])))


def _gan_batches():
    return [_images(s, (4, 1, 8, 8)) for s in (1, 2, 3)]


def test_gan():
    batches = _gan_batches()
    r = gan_page(lucid, batches)
    W = {k: v.astype(np.float64) for k, v in r["init"].items()}
    s0 = r["steps"][0]
    # the whole generator and discriminator recomputed in NumPy (BatchNorm1d with eps 0.8)
    np.testing.assert_allclose(s0["gen"], np_gan_generator(W, s0["z"].astype(np.float64)), atol=2e-6)
    p = np_gan_discriminator(W, s0["gen"].astype(np.float64))
    assert s0["g_loss"] == pytest.approx(np_bce(p, np.ones_like(p)), rel=1e-5)
    for s in r["steps"]:
        assert s["d_loss"] == pytest.approx((s["real_loss"] + s["fake_loss"]) / 2, rel=1e-6)
        # Adam's first step of a fresh optimizer moves by lr * g / (|g| + eps): only step 0
    for b, a, g in zip(s0["G_before"], s0["G_after"], s0["G_grad"]):
        _assert_step(a, b, -0.0002 * g / (np.abs(g) + 1e-8))
    # the discriminator trained after step 0: its real loss at step 1 is the NumPy one with its new weights
    D1 = {k: v.astype(np.float64) for k, v in r["steps"][1]["D"].items()}
    p = np_gan_discriminator(D1, batches[1].astype(np.float64))
    assert r["steps"][1]["real_loss"] == pytest.approx(np_bce(p, np.ones_like(p)), rel=1e-5)
    lines = r["text"].splitlines()
    assert len(lines) == 3 and lines[2].startswith("[Epoch 0/1] [Batch 2/3] [D loss: ")
    np.testing.assert_allclose(_numbers(lines[1]), [r["steps"][1]["d_loss"], r["steps"][1]["g_loss"]], atol=1e-6)


def test_gan_torch_parity():
    torch = pytest.importorskip("torch")
    batches = _gan_batches()
    r = gan_page(lucid, batches)
    t = gan_page(torch, batches, init=r["init"])
    for a, b in zip(r["steps"], t["steps"]):
        for k in ("g_loss", "real_loss", "fake_loss", "d_loss"):
            assert a[k] == pytest.approx(b[k], rel=1e-5, abs=1e-6)
        np.testing.assert_allclose(a["gen"], b["gen"], atol=1e-5)
    _same_text(r["text"], t["text"])


# ----------------------------------------------------------------------------------------------
# DCGAN (implementations/dcgan/dcgan.py) and LSGAN (implementations/lsgan/lsgan.py)
# ----------------------------------------------------------------------------------------------

def dcgan_page(torch, batches, init=None, seed=0, least_squares=False):
    nn = torch.nn
    Variable = import_module(torch.__name__ + ".autograd").Variable
    opt = SimpleNamespace(n_epochs=1, lr=0.0002, b1=0.5, b2=0.999, latent_dim=8, img_size=16, channels=1)
    random_state = np.random.RandomState(seed)

    def weights_init_normal(m):
        classname = m.__class__.__name__
        if classname.find("Conv") != -1:
            torch.nn.init.normal_(m.weight.data, 0.0, 0.02)
        elif classname.find("BatchNorm2d") != -1:
            torch.nn.init.normal_(m.weight.data, 1.0, 0.02)
            torch.nn.init.constant_(m.bias.data, 0.0)

    class Generator(nn.Module):
        def __init__(self):
            super(Generator, self).__init__()

            self.init_size = opt.img_size // 4
            self.l1 = nn.Sequential(nn.Linear(opt.latent_dim, 16 * self.init_size ** 2))

            self.conv_blocks = nn.Sequential(
                nn.BatchNorm2d(16),
                nn.Upsample(scale_factor=2),
                nn.Conv2d(16, 16, 3, stride=1, padding=1),
                nn.BatchNorm2d(16, 0.8),
                nn.LeakyReLU(0.2, inplace=True),
                nn.Upsample(scale_factor=2),
                nn.Conv2d(16, 8, 3, stride=1, padding=1),
                nn.BatchNorm2d(8, 0.8),
                nn.LeakyReLU(0.2, inplace=True),
                nn.Conv2d(8, opt.channels, 3, stride=1, padding=1),
                nn.Tanh(),
            )

        def forward(self, z):
            out = self.l1(z)
            out = out.view(out.shape[0], 16, self.init_size, self.init_size)
            img = self.conv_blocks(out)
            return img

    class Discriminator(nn.Module):
        def __init__(self):
            super(Discriminator, self).__init__()

            def discriminator_block(in_filters, out_filters, bn=True):
                block = [nn.Conv2d(in_filters, out_filters, 3, 2, 1), nn.LeakyReLU(0.2, inplace=True), nn.Dropout2d(0.0)]
                if bn:
                    block.append(nn.BatchNorm2d(out_filters, 0.8))
                return block

            self.model = nn.Sequential(
                *discriminator_block(opt.channels, 4, bn=False),
                *discriminator_block(4, 8),
                *discriminator_block(8, 16),
                *discriminator_block(16, 32),
            )

            # The height and width of downsampled image
            ds_size = opt.img_size // 2 ** 4
            if least_squares:  # lsgan.py: self.adv_layer = nn.Linear(out_filters*ds_size**2, 1)
                self.adv_layer = nn.Linear(32 * ds_size ** 2, 1)
            else:
                self.adv_layer = nn.Sequential(nn.Linear(32 * ds_size ** 2, 1), nn.Sigmoid())

        def forward(self, img):
            out = self.model(img)
            out = out.view(out.shape[0], -1)
            validity = self.adv_layer(out)

            return validity

    # Loss function
    adversarial_loss = torch.nn.MSELoss() if least_squares else torch.nn.BCELoss()

    # Initialize generator and discriminator
    torch.manual_seed(seed)
    generator = Generator()
    discriminator = Discriminator()
    rec = {"linear_default": _state(G=generator)["G.l1.0.weight"]}

    # Initialize weights
    generator.apply(weights_init_normal)
    discriminator.apply(weights_init_normal)
    rec["init"] = _setup(torch, init, seed, G=generator, D=discriminator)
    rec["steps"] = []

    # Optimizers
    optimizer_G = torch.optim.Adam(generator.parameters(), lr=opt.lr, betas=(opt.b1, opt.b2))
    optimizer_D = torch.optim.Adam(discriminator.parameters(), lr=opt.lr, betas=(opt.b1, opt.b2))

    Tensor = _typed(torch, torch.FloatTensor)  # torch.cuda.FloatTensor if cuda else torch.FloatTensor
    dataloader = [(torch.tensor(b), None) for b in batches]
    for epoch in range(opt.n_epochs):
        for i, (imgs, _) in enumerate(dataloader):

            # Adversarial ground truths
            valid = Variable(Tensor(imgs.shape[0], 1).fill_(1.0), requires_grad=False)
            fake = Variable(Tensor(imgs.shape[0], 1).fill_(0.0), requires_grad=False)

            # Configure input
            real_imgs = Variable(imgs.type(Tensor))

            # -----------------
            #  Train Generator
            # -----------------

            optimizer_G.zero_grad()

            # Sample noise as generator input
            z = Variable(Tensor(random_state.normal(0, 1, (imgs.shape[0], opt.latent_dim))))

            # Generate a batch of images
            gen_imgs = generator(z)

            # Loss measures generator's ability to fool the discriminator
            validity = discriminator(gen_imgs)
            g_loss = adversarial_loss(validity, valid)

            g_loss.backward()
            optimizer_G.step()

            # ---------------------
            #  Train Discriminator
            # ---------------------

            optimizer_D.zero_grad()

            # Measure discriminator's ability to classify real from generated samples
            real_pred = discriminator(real_imgs)
            real_loss = adversarial_loss(real_pred, valid)
            fake_loss = adversarial_loss(discriminator(gen_imgs.detach()), fake)
            d_loss = (real_loss + fake_loss) / 2

            d_loss.backward()
            optimizer_D.step()
            rec["steps"].append({"z": _np(z), "gen": _np(gen_imgs), "validity": _np(validity),
                                 "real_pred": _np(real_pred), "g_loss": g_loss.item(),
                                 "real_loss": real_loss.item(), "fake_loss": fake_loss.item(),
                                 "d_loss": d_loss.item()})
    rec["running_mean"] = _np(generator.conv_blocks[0].running_mean)
    return rec


def np_dcgan_generator(W, z):
    up = lambda x: x.repeat(2, axis=2).repeat(2, axis=3)  # noqa: E731
    h = (z @ W["G.l1.0.weight"].T + W["G.l1.0.bias"]).reshape(len(z), 16, 4, 4)
    h = up(np_bn(h, W["G.conv_blocks.0.weight"], W["G.conv_blocks.0.bias"]))
    h = np_conv2d(h, W["G.conv_blocks.2.weight"], W["G.conv_blocks.2.bias"], pad=1)
    h = up(leaky(np_bn(h, W["G.conv_blocks.3.weight"], W["G.conv_blocks.3.bias"], eps=0.8)))
    h = np_conv2d(h, W["G.conv_blocks.6.weight"], W["G.conv_blocks.6.bias"], pad=1)
    h = leaky(np_bn(h, W["G.conv_blocks.7.weight"], W["G.conv_blocks.7.bias"], eps=0.8))
    return np.tanh(np_conv2d(h, W["G.conv_blocks.9.weight"], W["G.conv_blocks.9.bias"], pad=1))


def _dcgan_batches():
    return [_images(s, (4, 1, 16, 16)) for s in (4, 5)]


@pytest.mark.parametrize("least_squares", [False, True], ids=["dcgan", "lsgan"])
def test_dcgan_and_lsgan(least_squares):
    r = dcgan_page(lucid, _dcgan_batches(), least_squares=least_squares)
    W = r["init"]
    convs = np.concatenate([v.ravel() for k, v in W.items() if k.endswith("weight") and v.ndim == 4])
    assert convs.size == 16 * 16 * 9 + 16 * 8 * 9 + 8 * 9 + 4 * 9 + 8 * 4 * 9 + 16 * 8 * 9 + 32 * 16 * 9
    assert abs(convs.std() / 0.02 - 1) < 0.1 and abs(convs.mean()) < 0.003  # normal_(0.0, 0.02)
    bn_w = np.concatenate([W[k].ravel() for k in W if k.endswith("weight") and W[k].ndim == 1])
    bn_b = np.concatenate([W[k].ravel() for k in W if k.endswith("bias") and k.replace("bias", "weight") in W
                           and W[k.replace("bias", "weight")].ndim == 1])
    assert bn_w.size == 16 + 16 + 8 + 8 + 16 + 32 and abs(bn_w.mean() - 1) < 0.01 and 0.01 < bn_w.std() < 0.03
    assert not bn_b.any()  # constant_(bias, 0.0)
    # "Linear" does not contain "Conv": nn.Linear keeps its default U(-1/sqrt(8), 1/sqrt(8))
    np.testing.assert_array_equal(W["G.l1.0.weight"], r["linear_default"])
    assert 0.3 < np.abs(W["G.l1.0.weight"]).max() <= 1 / math.sqrt(8)
    s0 = r["steps"][0]
    assert s0["gen"].shape == (4, 1, 16, 16) and s0["validity"].shape == (4, 1)
    Wd = {k: v.astype(np.float64) for k, v in W.items()}
    np.testing.assert_allclose(s0["gen"], np_dcgan_generator(Wd, s0["z"].astype(np.float64)), atol=3e-6)
    for s in r["steps"]:
        v, rp = s["validity"].astype(np.float64), s["real_pred"].astype(np.float64)
        if least_squares:
            assert s["g_loss"] == pytest.approx(((v - 1) ** 2).mean(), rel=1e-5)
            assert s["real_loss"] == pytest.approx(((rp - 1) ** 2).mean(), rel=1e-5)
        else:
            assert ((v > 0) & (v < 1)).all()
            assert s["g_loss"] == pytest.approx(np_bce(v, 1.0), rel=1e-5)
            assert s["real_loss"] == pytest.approx(np_bce(rp, 1.0), rel=1e-5)
        assert s["d_loss"] == pytest.approx((s["real_loss"] + s["fake_loss"]) / 2, rel=1e-6)


@pytest.mark.parametrize("least_squares", [False, True], ids=["dcgan", "lsgan"])
def test_dcgan_and_lsgan_torch_parity(least_squares):
    torch = pytest.importorskip("torch")
    b = _dcgan_batches()
    r = dcgan_page(lucid, b, least_squares=least_squares)
    t = dcgan_page(torch, b, init=r["init"], least_squares=least_squares)
    for a, c in zip(r["steps"], t["steps"]):
        for k in ("g_loss", "real_loss", "fake_loss", "d_loss"):
            assert a[k] == pytest.approx(c[k], rel=1e-5, abs=1e-6)
        np.testing.assert_allclose(a["gen"], c["gen"], atol=1e-5)
    np.testing.assert_allclose(r["running_mean"], t["running_mean"], atol=1e-6)


# ----------------------------------------------------------------------------------------------
# WGAN (implementations/wgan/wgan.py)
# ----------------------------------------------------------------------------------------------

def wgan_page(torch, batches, init=None, seed=0):
    nn = torch.nn
    Variable = import_module(torch.__name__ + ".autograd").Variable
    opt = SimpleNamespace(n_epochs=1, lr=0.00005, latent_dim=8, img_size=8, channels=1, n_critic=2,
                          clip_value=0.01)
    img_shape = (opt.channels, opt.img_size, opt.img_size)
    random_state = np.random.RandomState(seed)

    class Generator(nn.Module):
        def __init__(self):
            super(Generator, self).__init__()

            def block(in_feat, out_feat, normalize=True):
                layers = [nn.Linear(in_feat, out_feat)]
                if normalize:
                    layers.append(nn.BatchNorm1d(out_feat, 0.8))
                layers.append(nn.LeakyReLU(0.2, inplace=True))
                return layers

            self.model = nn.Sequential(
                *block(opt.latent_dim, 16, normalize=False),
                *block(16, 32),
                *block(32, 64),
                *block(64, 128),
                nn.Linear(128, int(np.prod(img_shape))),
                nn.Tanh()
            )

        def forward(self, z):
            img = self.model(z)
            img = img.view(img.shape[0], *img_shape)
            return img

    class Discriminator(nn.Module):
        def __init__(self):
            super(Discriminator, self).__init__()

            self.model = nn.Sequential(
                nn.Linear(int(np.prod(img_shape)), 64),
                nn.LeakyReLU(0.2, inplace=True),
                nn.Linear(64, 32),
                nn.LeakyReLU(0.2, inplace=True),
                nn.Linear(32, 1),
            )

        def forward(self, img):
            img_flat = img.view(img.shape[0], -1)
            validity = self.model(img_flat)
            return validity

    # Initialize generator and discriminator
    torch.manual_seed(seed)
    generator = Generator()
    discriminator = Discriminator()
    rec = {"init": _setup(torch, init, seed, G=generator, D=discriminator), "steps": []}

    # Optimizers
    optimizer_G = torch.optim.RMSprop(generator.parameters(), lr=opt.lr)
    optimizer_D = torch.optim.RMSprop(discriminator.parameters(), lr=opt.lr)

    Tensor = _typed(torch, torch.FloatTensor)  # torch.cuda.FloatTensor if cuda else torch.FloatTensor
    dataloader = [(torch.tensor(b), None) for b in batches]
    batches_done = 0
    for epoch in range(opt.n_epochs):

        for i, (imgs, _) in enumerate(dataloader):

            # Configure input
            real_imgs = Variable(imgs.type(Tensor))

            # ---------------------
            #  Train Discriminator
            # ---------------------

            optimizer_D.zero_grad()

            # Sample noise as generator input
            z = Variable(Tensor(random_state.normal(0, 1, (imgs.shape[0], opt.latent_dim))))

            # Generate a batch of images
            fake_imgs = generator(z).detach()
            # Adversarial loss
            loss_D = -torch.mean(discriminator(real_imgs)) + torch.mean(discriminator(fake_imgs))

            s = {"D_before": _state(D=discriminator), "fake": _np(fake_imgs), "loss_D": loss_D.item()}
            loss_D.backward()
            optimizer_D.step()

            # Clip weights of discriminator
            for p in discriminator.parameters():
                p.data.clamp_(-opt.clip_value, opt.clip_value)
            s["D_after"] = _state(D=discriminator)

            # Train the generator every n_critic iterations
            if i % opt.n_critic == 0:

                # -----------------
                #  Train Generator
                # -----------------

                optimizer_G.zero_grad()

                # Generate a batch of images
                gen_imgs = generator(z)
                # Adversarial loss
                loss_G = -torch.mean(discriminator(gen_imgs))

                loss_G.backward()
                s["G_before"] = [_np(p) for p in generator.parameters()]
                s["G_grad"] = [_np(p.grad) for p in generator.parameters()]
                optimizer_G.step()
                s["G_after"] = [_np(p) for p in generator.parameters()]
                s["loss_G"] = loss_G.item()

            batches_done += 1
            rec["steps"].append(s)
    return rec


def np_wgan_critic(W, img):
    h = img.reshape(len(img), -1)
    h = leaky(h @ W["D.model.0.weight"].T + W["D.model.0.bias"])
    h = leaky(h @ W["D.model.2.weight"].T + W["D.model.2.bias"])
    return h @ W["D.model.4.weight"].T + W["D.model.4.bias"]


def _wgan_batches():
    return [_images(s, (4, 1, 8, 8)) for s in (6, 7, 8)]


def test_wgan_rmsprop_and_weight_clipping():
    batches = _wgan_batches()
    r = wgan_page(lucid, batches)
    assert [("loss_G" in s) for s in r["steps"]] == [True, False, True]  # n_critic = 2
    for s, real in zip(r["steps"], batches):
        Wd = {k: v.astype(np.float64) for k, v in s["D_before"].items()}
        loss = (-np_wgan_critic(Wd, real.astype(np.float64)).mean()
                + np_wgan_critic(Wd, s["fake"].astype(np.float64)).mean())
        assert s["loss_D"] == pytest.approx(loss, rel=1e-5, abs=1e-7)
        after = np.concatenate([v.ravel() for v in s["D_after"].values()])
        assert np.abs(after).max() == np.float32(0.01)  # clamp_(-0.01, 0.01), and some weights reach it
    # the first RMSprop step (alpha 0.99): v = 0.01 g^2, so p -= lr * g / (0.1 |g| + eps)
    s0 = r["steps"][0]
    for b, a, g in zip(s0["G_before"], s0["G_after"], s0["G_grad"]):
        _assert_step(a, b, -0.00005 * g / (np.sqrt(0.01 * g.astype(np.float64) ** 2) + 1e-8))
    # the default init (|w| up to 1/sqrt(fan_in)) is clipped at once: the first step's 10 lr = 0.0005
    # cannot bring a weight from beyond 0.0105 back inside, so those sit at exactly +-0.01
    w0, w1 = r["init"]["D.model.0.weight"], r["steps"][0]["D_after"]["D.model.0.weight"]
    far = np.abs(w0) > 0.0106
    assert far.mean() > 0.9
    np.testing.assert_array_equal(w1[far], np.float32(0.01) * np.sign(w0[far]))


def test_wgan_torch_parity():
    torch = pytest.importorskip("torch")
    b = _wgan_batches()
    r = wgan_page(lucid, b)
    t = wgan_page(torch, b, init=r["init"])
    for a, c in zip(r["steps"], t["steps"]):
        assert a["loss_D"] == pytest.approx(c["loss_D"], rel=1e-5, abs=1e-7)
        assert ("loss_G" in a) == ("loss_G" in c)
        if "loss_G" in a:
            assert a["loss_G"] == pytest.approx(c["loss_G"], rel=1e-5, abs=1e-7)
        for k in a["D_after"]:
            np.testing.assert_allclose(a["D_after"][k], c["D_after"][k], atol=1e-7)


# ----------------------------------------------------------------------------------------------
# WGAN-GP (implementations/wgan_gp/wgan_gp.py), its critic convolutional
# ----------------------------------------------------------------------------------------------

def wgan_gp_page(torch, batches, init=None, seed=0, tensor_type="FloatTensor"):
    nn = torch.nn
    autograd = torch.autograd
    Variable = import_module(torch.__name__ + ".autograd").Variable
    opt = SimpleNamespace(n_epochs=1, lr=0.0002, b1=0.5, b2=0.999, latent_dim=8, img_size=8, channels=1, n_critic=2)
    img_shape = (opt.channels, opt.img_size, opt.img_size)
    random_state = np.random.RandomState(seed)

    class Generator(nn.Module):
        def __init__(self):
            super(Generator, self).__init__()

            def block(in_feat, out_feat, normalize=True):
                layers = [nn.Linear(in_feat, out_feat)]
                if normalize:
                    layers.append(nn.BatchNorm1d(out_feat, 0.8))
                layers.append(nn.LeakyReLU(0.2, inplace=True))
                return layers

            self.model = nn.Sequential(
                *block(opt.latent_dim, 16, normalize=False),
                *block(16, 32),
                *block(32, 64),
                nn.Linear(64, int(np.prod(img_shape))),
                nn.Tanh()
            )

        def forward(self, z):
            img = self.model(z)
            img = img.view(img.shape[0], *img_shape)
            return img

    class Discriminator(nn.Module):
        def __init__(self):
            super(Discriminator, self).__init__()

            def discriminator_block(in_filters, out_filters):
                return [nn.Conv2d(in_filters, out_filters, 3, 2, 1), nn.LeakyReLU(0.2, inplace=True)]

            self.model = nn.Sequential(*discriminator_block(opt.channels, 4), *discriminator_block(4, 8))
            ds_size = opt.img_size // 2 ** 2
            self.adv_layer = nn.Linear(8 * ds_size ** 2, 1)

        def forward(self, img):
            out = self.model(img)
            out = out.view(out.shape[0], -1)
            validity = self.adv_layer(out)
            return validity

    # Loss weight for gradient penalty
    lambda_gp = 10

    # Initialize generator and discriminator
    torch.manual_seed(seed)
    generator = Generator()
    discriminator = Discriminator()
    rec = {"init": _setup(torch, init, seed, G=generator, D=discriminator), "steps": []}

    # Optimizers
    optimizer_G = torch.optim.Adam(generator.parameters(), lr=opt.lr, betas=(opt.b1, opt.b2))
    optimizer_D = torch.optim.Adam(discriminator.parameters(), lr=opt.lr, betas=(opt.b1, opt.b2))

    Tensor = _typed(torch, getattr(torch, tensor_type))  # torch.cuda.FloatTensor if cuda else ...

    def compute_gradient_penalty(D, real_samples, fake_samples):
        """Calculates the gradient penalty loss for WGAN GP"""
        # Random weight term for interpolation between real and fake samples
        alpha = Tensor(random_state.random((real_samples.size(0), 1, 1, 1)))
        # Get random interpolation between real and fake samples
        interpolates = (alpha * real_samples + ((1 - alpha) * fake_samples)).requires_grad_(True)
        d_interpolates = D(interpolates)
        fake = Variable(Tensor(real_samples.shape[0], 1).fill_(1.0), requires_grad=False)
        # Get gradient w.r.t. interpolates
        gradients = autograd.grad(
            outputs=d_interpolates,
            inputs=[interpolates],  # a list: Lucid returns a bare gradient for a bare tensor (README)
            grad_outputs=fake,
            create_graph=True,
            retain_graph=True,
            only_inputs=True,
        )[0]
        gradients = gradients.view(gradients.size(0), -1)
        gradient_penalty = ((gradients.norm(2, dim=1) - 1) ** 2).mean()
        return gradient_penalty

    def penalty(D, real, fake, alpha_seed=7):  # the same alpha on each call (finite differences)
        random_state.seed(alpha_seed)
        return compute_gradient_penalty(D, real, fake)

    rec["Discriminator"], rec["penalty"] = Discriminator, penalty
    dataloader = [(torch.tensor(b), None) for b in batches]
    batches_done = 0
    for epoch in range(opt.n_epochs):
        for i, (imgs, _) in enumerate(dataloader):

            # Configure input
            real_imgs = Variable(imgs.type(Tensor))

            # ---------------------
            #  Train Discriminator
            # ---------------------

            optimizer_D.zero_grad()

            # Sample noise as generator input
            z = Variable(Tensor(random_state.normal(0, 1, (imgs.shape[0], opt.latent_dim))))

            # Generate a batch of images
            fake_imgs = generator(z)

            # Real images
            real_validity = discriminator(real_imgs)
            # Fake images
            fake_validity = discriminator(fake_imgs)
            # Gradient penalty
            gradient_penalty = compute_gradient_penalty(discriminator, real_imgs.data, fake_imgs.data)
            # Adversarial loss
            d_loss = -torch.mean(real_validity) + torch.mean(fake_validity) + lambda_gp * gradient_penalty

            d_loss.backward()
            optimizer_D.step()
            s = {"d_loss": d_loss.item(), "gp": gradient_penalty.item(), "real_v": _np(real_validity),
                 "fake_v": _np(fake_validity)}

            optimizer_G.zero_grad()

            # Train the generator every n_critic steps
            if i % opt.n_critic == 0:

                # -----------------
                #  Train Generator
                # -----------------

                # Generate a batch of images
                fake_imgs = generator(z)
                # Loss measures generator's ability to fool the discriminator
                # Train on fake images
                fake_validity = discriminator(fake_imgs)
                g_loss = -torch.mean(fake_validity)

                g_loss.backward()
                optimizer_G.step()
                s["g_loss"] = g_loss.item()

                batches_done += opt.n_critic
            rec["steps"].append(s)
    rec["batches_done"] = batches_done
    return rec


def _wgan_gp_batches():
    return [_images(s, (3, 1, 8, 8)) for s in (9, 10, 11)]


def test_wgan_gp_training_and_linear_critic_closed_form():
    r = wgan_gp_page(lucid, _wgan_gp_batches())
    assert r["batches_done"] == 4 and [("g_loss" in s) for s in r["steps"]] == [True, False, True]
    for s in r["steps"]:
        assert s["gp"] > 0
        assert s["d_loss"] == pytest.approx(-s["real_v"].mean() + s["fake_v"].mean() + 10 * s["gp"], rel=1e-5)
    # a linear critic D(x) = w . x + b has gradient w at every interpolate: penalty (|w| - 1)^2
    lin = lucid.nn.Sequential(lucid.nn.Flatten(), lucid.nn.Linear(64, 1))
    real, fake = lucid.tensor(_images(12, (3, 1, 8, 8))), lucid.tensor(_images(13, (3, 1, 8, 8)))
    gp = r["penalty"](lin, real, fake)
    w = _np(lin[1].weight).astype(np.float64)
    assert gp.item() == pytest.approx((np.linalg.norm(w) - 1) ** 2, rel=1e-5)
    gp.backward()  # d/dw (|w| - 1)^2 = 2 (|w| - 1) w / |w|: the double backward through grad
    np.testing.assert_allclose(_np(lin[1].weight.grad), 2 * (np.linalg.norm(w) - 1) * w / np.linalg.norm(w), rtol=1e-4)
    assert lin[1].bias.grad is None or not _np(lin[1].bias.grad).any()


def test_wgan_gp_penalty_gradient_through_convolutions_by_finite_differences():
    r = wgan_gp_page(lucid, [], tensor_type="DoubleTensor")  # no training: its float32 models
    lucid.manual_seed(3)
    D = r["Discriminator"]().double()
    real = lucid.tensor(_images(14, (2, 1, 8, 8)), dtype=lucid.float64)
    fake = lucid.tensor(_images(15, (2, 1, 8, 8)), dtype=lucid.float64)
    gp = r["penalty"](D, real, fake)
    gp.backward()
    h = 1e-6
    for p, idx in ((D.model[0].weight, (1, 0, 1, 2)), (D.model[2].weight, (3, 2, 0, 1)),
                   (D.model[2].bias, (5,)), (D.adv_layer.weight, (0, 9)),
                   (D.model[0].bias, (2,))):
        with lucid.no_grad():
            p[idx] += h
        up = r["penalty"](D, real, fake).item()
        with lucid.no_grad():
            p[idx] -= 2 * h
        down = r["penalty"](D, real, fake).item()
        with lucid.no_grad():
            p[idx] += h
        got = 0.0 if p.grad is None else p.grad[idx].item()
        assert got == pytest.approx((up - down) / (2 * h), rel=1e-6, abs=1e-9)
    # the penalty does not depend on the biases (only through LeakyReLU's piecewise-constant
    # slopes): Lucid leaves their .grad None where PyTorch stores zeros (see the parity test)
    assert D.adv_layer.bias.grad is None and D.model[2].bias.grad is None


def test_wgan_gp_torch_parity():
    torch = pytest.importorskip("torch")
    b = _wgan_gp_batches()
    r = wgan_gp_page(lucid, b)
    t = wgan_gp_page(torch, b, init=r["init"])
    for a, c in zip(r["steps"], t["steps"]):
        for k in ("d_loss", "gp"):
            assert a[k] == pytest.approx(c[k], rel=1e-5, abs=1e-6)
        if "g_loss" in a:
            assert a["g_loss"] == pytest.approx(c["g_loss"], rel=1e-5, abs=1e-6)
    torch.manual_seed(3)
    D = t["Discriminator"]().double()
    state = {k: v.detach().numpy() for k, v in D.state_dict().items()}
    lucid.manual_seed(3)
    Dl = r["Discriminator"]().double()
    Dl.load_state_dict({k: lucid.tensor(v) for k, v in state.items()})
    real, fake = _images(14, (2, 1, 8, 8)).astype(np.float64), _images(15, (2, 1, 8, 8)).astype(np.float64)
    gl = r["penalty"](Dl, lucid.tensor(real), lucid.tensor(fake))
    gt = t["penalty"](D, torch.tensor(real), torch.tensor(fake))
    gl.backward(), gt.backward()
    assert gl.item() == pytest.approx(gt.item(), rel=1e-12)
    for pl, pt in zip(Dl.parameters(), D.parameters()):
        want = np.zeros(tuple(pt.shape)) if pt.grad is None else pt.grad.numpy()
        if pl.grad is None:  # only where PyTorch's is zeros (connected through a zero derivative)
            assert not want.any()
        else:
            np.testing.assert_allclose(_np(pl.grad), want, rtol=1e-10, atol=1e-12)


def test_conv_outputs_are_row_major_so_view_works_after_them():
    # a conv returned a channel-major view (strides (H*W, O*H*W, W, 1)): ``out.view(out.shape[0], -1)``
    # after a conv, or after the BatchNorm/ReLU that keep their input's order, raised
    x = lucid.randn(3, 4, 6, 6)
    conv = lucid.nn.Conv2d(4, 8, 3, 2, 1)
    for out in (conv(x), lucid.relu(conv(x)), lucid.nn.BatchNorm2d(8)(conv(x)),
                lucid.nn.functional.conv_transpose2d(x, lucid.randn(4, 2, 4, 4), stride=2, padding=1),
                lucid.nn.functional.conv_transpose2d(x, lucid.randn(4, 2, 3, 3), padding=1)):
        n, c, h, w = out.shape
        assert out.stride() == (c * h * w, h * w, w, 1) and out.is_contiguous()
        flat = out.view(out.shape[0], -1)
        np.testing.assert_array_equal(_np(flat), _np(out).reshape(n, -1))
    y = conv(x)
    v = y.view(3, -1)
    with lucid.no_grad():
        v[1, 0] = 7.0  # a view: the write reaches the conv's output
    assert y[1, 0, 0, 0].item() == 7.0
    np.testing.assert_allclose(_np(conv(x)), np_conv2d(_np(x), _np(conv.weight), _np(conv.bias), 2, 1), atol=1e-5)


def test_advanced_indexing_upsample_and_reflect_pad_are_row_major():
    # NumPy's copy for x[:, :, i] is laid out index-dim first: nn.Upsample (nearest) and
    # ReflectionPad2d outputs had other strides than PyTorch's, and ``.view`` after them raised
    F = lucid.nn.functional
    x = lucid.arange(2 * 3 * 4 * 4.0).view(2, 3, 4, 4)
    i = lucid.tensor([0, 2, 2])
    for out, want in ((x[:, :, i], _np(x)[:, :, [0, 2, 2]]), (x[..., i], _np(x)[..., [0, 2, 2]]),
                      (F.interpolate(x, scale_factor=2), _np(x).repeat(2, 2).repeat(2, 3)),
                      (lucid.nn.Upsample(scale_factor=2)(x), _np(x).repeat(2, 2).repeat(2, 3)),
                      (F.pad(x, (1, 1, 1, 1), mode="reflect"), np.pad(_np(x), ((0, 0), (0, 0), (1, 1), (1, 1)), "reflect")),
                      (lucid.nn.ReplicationPad2d(1)(x), np.pad(_np(x), ((0, 0), (0, 0), (1, 1), (1, 1)), "edge"))):
        assert out.shape == want.shape and out.is_contiguous()
        assert out.stride() == tuple(int(np.prod(want.shape[d + 1:])) for d in range(4))
        np.testing.assert_array_equal(_np(out.view(2, -1)), want.reshape(2, -1))
    assert x[0, 1, i].shape == (3, 4) and x[0, 1, i].is_contiguous()
    assert x[lucid.tensor([1, 0]), 0, 0, 0].tolist() == [48.0, 0.0] and x[0, 0, 0, i].shape == (3,)


# ----------------------------------------------------------------------------------------------
# ACGAN (implementations/acgan/acgan.py)
# ----------------------------------------------------------------------------------------------

def acgan_page(torch, batches, init=None, seed=0):
    nn = torch.nn
    Variable = import_module(torch.__name__ + ".autograd").Variable
    opt = SimpleNamespace(n_epochs=1, lr=0.0002, b1=0.5, b2=0.999, latent_dim=8, n_classes=3, img_size=16, channels=1)
    random_state = np.random.RandomState(seed)

    def weights_init_normal(m):
        classname = m.__class__.__name__
        if classname.find("Conv") != -1:
            torch.nn.init.normal_(m.weight.data, 0.0, 0.02)
        elif classname.find("BatchNorm2d") != -1:
            torch.nn.init.normal_(m.weight.data, 1.0, 0.02)
            torch.nn.init.constant_(m.bias.data, 0.0)

    class Generator(nn.Module):
        def __init__(self):
            super(Generator, self).__init__()

            self.label_emb = nn.Embedding(opt.n_classes, opt.latent_dim)

            self.init_size = opt.img_size // 4  # Initial size before upsampling
            self.l1 = nn.Sequential(nn.Linear(opt.latent_dim, 16 * self.init_size ** 2))

            self.conv_blocks = nn.Sequential(
                nn.BatchNorm2d(16),
                nn.Upsample(scale_factor=2),
                nn.Conv2d(16, 16, 3, stride=1, padding=1),
                nn.BatchNorm2d(16, 0.8),
                nn.LeakyReLU(0.2, inplace=True),
                nn.Upsample(scale_factor=2),
                nn.Conv2d(16, 8, 3, stride=1, padding=1),
                nn.BatchNorm2d(8, 0.8),
                nn.LeakyReLU(0.2, inplace=True),
                nn.Conv2d(8, opt.channels, 3, stride=1, padding=1),
                nn.Tanh(),
            )

        def forward(self, noise, labels):
            gen_input = torch.mul(self.label_emb(labels), noise)
            out = self.l1(gen_input)
            out = out.view(out.shape[0], 16, self.init_size, self.init_size)
            img = self.conv_blocks(out)
            return img

    class Discriminator(nn.Module):
        def __init__(self):
            super(Discriminator, self).__init__()

            def discriminator_block(in_filters, out_filters, bn=True):
                """Returns layers of each discriminator block"""
                block = [nn.Conv2d(in_filters, out_filters, 3, 2, 1), nn.LeakyReLU(0.2, inplace=True), nn.Dropout2d(0.0)]
                if bn:
                    block.append(nn.BatchNorm2d(out_filters, 0.8))
                return block

            self.conv_blocks = nn.Sequential(
                *discriminator_block(opt.channels, 4, bn=False),
                *discriminator_block(4, 8),
                *discriminator_block(8, 16),
                *discriminator_block(16, 32),
            )

            # The height and width of downsampled image
            ds_size = opt.img_size // 2 ** 4

            # Output layers
            self.adv_layer = nn.Sequential(nn.Linear(32 * ds_size ** 2, 1), nn.Sigmoid())
            self.aux_layer = nn.Sequential(nn.Linear(32 * ds_size ** 2, opt.n_classes), nn.Softmax())

        def forward(self, img):
            out = self.conv_blocks(img)
            out = out.view(out.shape[0], -1)
            validity = self.adv_layer(out)
            label = self.aux_layer(out)

            return validity, label

    # Loss functions
    adversarial_loss = torch.nn.BCELoss()
    auxiliary_loss = torch.nn.CrossEntropyLoss()

    # Initialize generator and discriminator
    torch.manual_seed(seed)
    generator = Generator()
    discriminator = Discriminator()

    # Initialize weights
    generator.apply(weights_init_normal)
    discriminator.apply(weights_init_normal)
    rec = {"init": _setup(torch, init, seed, G=generator, D=discriminator), "steps": []}

    # Optimizers
    optimizer_G = torch.optim.Adam(generator.parameters(), lr=opt.lr, betas=(opt.b1, opt.b2))
    optimizer_D = torch.optim.Adam(discriminator.parameters(), lr=opt.lr, betas=(opt.b1, opt.b2))

    FloatTensor = _typed(torch, torch.FloatTensor)  # torch.cuda.FloatTensor if cuda else ...
    LongTensor = _typed(torch, torch.LongTensor)
    dataloader = [(torch.tensor(b), torch.tensor(y)) for b, y in batches]
    text = io.StringIO()
    for epoch in range(opt.n_epochs):
        for i, (imgs, labels) in enumerate(dataloader):

            batch_size = imgs.shape[0]

            # Adversarial ground truths
            valid = Variable(FloatTensor(batch_size, 1).fill_(1.0), requires_grad=False)
            fake = Variable(FloatTensor(batch_size, 1).fill_(0.0), requires_grad=False)

            # Configure input
            real_imgs = Variable(imgs.type(FloatTensor))
            labels = Variable(labels.type(LongTensor))

            # -----------------
            #  Train Generator
            # -----------------

            optimizer_G.zero_grad()

            # Sample noise and labels as generator input
            z = Variable(FloatTensor(random_state.normal(0, 1, (batch_size, opt.latent_dim))))
            gen_labels = Variable(LongTensor(random_state.randint(0, opt.n_classes, batch_size)))

            # Generate a batch of images
            gen_imgs = generator(z, gen_labels)

            # Loss measures generator's ability to fool the discriminator
            validity, pred_label = discriminator(gen_imgs)
            g_loss = 0.5 * (adversarial_loss(validity, valid) + auxiliary_loss(pred_label, gen_labels))

            g_loss.backward()
            optimizer_G.step()

            # ---------------------
            #  Train Discriminator
            # ---------------------

            optimizer_D.zero_grad()

            # Loss for real images
            real_pred, real_aux = discriminator(real_imgs)
            d_real_loss = (adversarial_loss(real_pred, valid) + auxiliary_loss(real_aux, labels)) / 2

            # Loss for fake images
            fake_pred, fake_aux = discriminator(gen_imgs.detach())
            d_fake_loss = (adversarial_loss(fake_pred, fake) + auxiliary_loss(fake_aux, gen_labels)) / 2

            # Total discriminator loss
            d_loss = (d_real_loss + d_fake_loss) / 2

            # Calculate discriminator accuracy
            pred = np.concatenate([real_aux.data.cpu().numpy(), fake_aux.data.cpu().numpy()], axis=0)
            gt = np.concatenate([labels.data.cpu().numpy(), gen_labels.data.cpu().numpy()], axis=0)
            d_acc = np.mean(np.argmax(pred, axis=1) == gt)

            d_loss.backward()
            optimizer_D.step()

            with redirect_stdout(text):
                print(
                    "[Epoch %d/%d] [Batch %d/%d] [D loss: %f, acc: %d%%] [G loss: %f]"
                    % (epoch, opt.n_epochs, i, len(dataloader), d_loss.item(), 100 * d_acc, g_loss.item())
                )
            rec["steps"].append({"z": _np(z), "gen_labels": _np(gen_labels), "gen": _np(gen_imgs),
                                 "validity": _np(validity), "pred_label": _np(pred_label), "g_loss": g_loss.item(),
                                 "real_pred": _np(real_pred), "real_aux": _np(real_aux), "fake_pred": _np(fake_pred),
                                 "fake_aux": _np(fake_aux), "d_loss": d_loss.item(), "d_acc": d_acc})
    rec["text"] = text.getvalue()
    return rec


def _acgan_batches():
    return [(_images(s, (4, 1, 16, 16)), np.random.default_rng(s).integers(0, 3, 4)) for s in (16, 17)]


def test_acgan():
    batches = _acgan_batches()
    r = acgan_page(lucid, batches)
    W = {k: v.astype(np.float64) for k, v in r["init"].items()}
    s0 = r["steps"][0]
    assert s0["gen_labels"].dtype == np.int64 and s0["pred_label"].shape == (4, 3)
    # torch.mul(label_emb(labels), noise) feeds the DCGAN generator: recomputed in NumPy
    gen_input = W["G.label_emb.weight"][s0["gen_labels"]] * s0["z"]
    np.testing.assert_allclose(s0["gen"], np_dcgan_generator(W, gen_input), atol=3e-6)
    for s, (_, labels) in zip(r["steps"], batches):
        np.testing.assert_allclose(s["pred_label"].sum(1), 1, rtol=1e-6)  # the Softmax head
        # CrossEntropyLoss of the softmax probabilities (a second log-softmax, as the page does)
        f = {k: v.astype(np.float64) for k, v in s.items() if isinstance(v, np.ndarray) and v.dtype == np.float32}
        g = 0.5 * (np_bce(f["validity"], 1.0) + np_cross_entropy(f["pred_label"], s["gen_labels"]))
        assert s["g_loss"] == pytest.approx(g, rel=1e-5)
        d_real = (np_bce(f["real_pred"], 1.0) + np_cross_entropy(f["real_aux"], labels)) / 2
        d_fake = (np_bce(f["fake_pred"], 0.0) + np_cross_entropy(f["fake_aux"], s["gen_labels"])) / 2
        assert s["d_loss"] == pytest.approx((d_real + d_fake) / 2, rel=1e-5)
        acc = np.mean(np.concatenate([s["real_aux"].argmax(1), s["fake_aux"].argmax(1)])
                      == np.concatenate([labels, s["gen_labels"]]))
        assert s["d_acc"] == acc
    lines = r["text"].splitlines()
    assert re.fullmatch(r"\[Epoch 0/1\] \[Batch 1/2\] \[D loss: \d\.\d{6}, acc: \d+%\] \[G loss: \d\.\d{6}\]", lines[1])
    assert f"acc: {int(100 * r['steps'][1]['d_acc'])}%" in lines[1]


def test_acgan_torch_parity():
    torch = pytest.importorskip("torch")
    b = _acgan_batches()
    r = acgan_page(lucid, b)
    t = acgan_page(torch, b, init=r["init"])
    for a, c in zip(r["steps"], t["steps"]):
        for k in ("g_loss", "d_loss", "d_acc"):
            assert a[k] == pytest.approx(c[k], rel=1e-5, abs=1e-6)
        np.testing.assert_allclose(a["pred_label"], c["pred_label"], atol=1e-6)
    _same_text(r["text"], t["text"])


# ----------------------------------------------------------------------------------------------
# CGAN (implementations/cgan/cgan.py)
# ----------------------------------------------------------------------------------------------

def cgan_page(torch, batches, init=None, seed=0):
    nn = torch.nn
    Variable = import_module(torch.__name__ + ".autograd").Variable
    opt = SimpleNamespace(n_epochs=1, lr=0.0002, b1=0.5, b2=0.999, latent_dim=8, n_classes=3, img_size=8, channels=1)
    img_shape = (opt.channels, opt.img_size, opt.img_size)
    random_state = np.random.RandomState(seed)

    class Generator(nn.Module):
        def __init__(self):
            super(Generator, self).__init__()

            self.label_emb = nn.Embedding(opt.n_classes, opt.n_classes)

            def block(in_feat, out_feat, normalize=True):
                layers = [nn.Linear(in_feat, out_feat)]
                if normalize:
                    layers.append(nn.BatchNorm1d(out_feat, 0.8))
                layers.append(nn.LeakyReLU(0.2, inplace=True))
                return layers

            self.model = nn.Sequential(
                *block(opt.latent_dim + opt.n_classes, 16, normalize=False),
                *block(16, 32),
                *block(32, 64),
                *block(64, 128),
                nn.Linear(128, int(np.prod(img_shape))),
                nn.Tanh()
            )

        def forward(self, noise, labels):
            # Concatenate label embedding and image to produce input
            gen_input = torch.cat((self.label_emb(labels), noise), -1)
            img = self.model(gen_input)
            img = img.view(img.size(0), *img_shape)
            return img

    class Discriminator(nn.Module):
        def __init__(self):
            super(Discriminator, self).__init__()

            self.label_embedding = nn.Embedding(opt.n_classes, opt.n_classes)

            self.model = nn.Sequential(
                nn.Linear(opt.n_classes + int(np.prod(img_shape)), 64),
                nn.LeakyReLU(0.2, inplace=True),
                nn.Linear(64, 64),
                nn.Dropout(0.0),
                nn.LeakyReLU(0.2, inplace=True),
                nn.Linear(64, 64),
                nn.Dropout(0.0),
                nn.LeakyReLU(0.2, inplace=True),
                nn.Linear(64, 1),
            )

        def forward(self, img, labels):
            # Concatenate label embedding and image to produce input
            d_in = torch.cat((img.view(img.size(0), -1), self.label_embedding(labels)), -1)
            validity = self.model(d_in)
            return validity

    # Loss functions
    adversarial_loss = torch.nn.MSELoss()

    # Initialize generator and discriminator
    torch.manual_seed(seed)
    generator = Generator()
    discriminator = Discriminator()
    rec = {"init": _setup(torch, init, seed, G=generator, D=discriminator), "steps": []}

    # Optimizers
    optimizer_G = torch.optim.Adam(generator.parameters(), lr=opt.lr, betas=(opt.b1, opt.b2))
    optimizer_D = torch.optim.Adam(discriminator.parameters(), lr=opt.lr, betas=(opt.b1, opt.b2))

    FloatTensor = _typed(torch, torch.FloatTensor)  # torch.cuda.FloatTensor if cuda else ...
    LongTensor = _typed(torch, torch.LongTensor)
    dataloader = [(torch.tensor(b), torch.tensor(y)) for b, y in batches]
    for epoch in range(opt.n_epochs):
        for i, (imgs, labels) in enumerate(dataloader):

            batch_size = imgs.shape[0]

            # Adversarial ground truths
            valid = Variable(FloatTensor(batch_size, 1).fill_(1.0), requires_grad=False)
            fake = Variable(FloatTensor(batch_size, 1).fill_(0.0), requires_grad=False)

            # Configure input
            real_imgs = Variable(imgs.type(FloatTensor))
            labels = Variable(labels.type(LongTensor))

            # -----------------
            #  Train Generator
            # -----------------

            optimizer_G.zero_grad()

            # Sample noise and labels as generator input
            z = Variable(FloatTensor(random_state.normal(0, 1, (batch_size, opt.latent_dim))))
            gen_labels = Variable(LongTensor(random_state.randint(0, opt.n_classes, batch_size)))

            # Generate a batch of images
            gen_imgs = generator(z, gen_labels)

            # Loss measures generator's ability to fool the discriminator
            validity = discriminator(gen_imgs, gen_labels)
            g_loss = adversarial_loss(validity, valid)

            g_loss.backward()
            optimizer_G.step()

            # ---------------------
            #  Train Discriminator
            # ---------------------

            optimizer_D.zero_grad()

            # Loss for real images
            validity_real = discriminator(real_imgs, labels)
            d_real_loss = adversarial_loss(validity_real, valid)

            # Loss for fake images
            validity_fake = discriminator(gen_imgs.detach(), gen_labels)
            d_fake_loss = adversarial_loss(validity_fake, fake)

            # Total discriminator loss
            d_loss = (d_real_loss + d_fake_loss) / 2

            d_loss.backward()
            optimizer_D.step()
            rec["steps"].append({"z": _np(z), "gen_labels": _np(gen_labels), "gen": _np(gen_imgs),
                                 "validity": _np(validity), "g_loss": g_loss.item(), "d_loss": d_loss.item(),
                                 "validity_real": _np(validity_real), "validity_fake": _np(validity_fake),
                                 "D_emb_grad": _np(discriminator.label_embedding.weight.grad)})
    return rec


def _cgan_batches():
    return [(_images(s, (4, 1, 8, 8)), np.array([0, 2, 2, 0])) for s in (18, 19)]


def test_cgan():
    batches = _cgan_batches()
    r = cgan_page(lucid, batches)
    W = {k: v.astype(np.float64) for k, v in r["init"].items()}
    s0 = r["steps"][0]
    # the generator's input is cat(label_emb(labels), noise); rows of the embedding, then z
    gen_input = np.concatenate([W["G.label_emb.weight"][s0["gen_labels"]], s0["z"]], -1)
    np.testing.assert_allclose(s0["gen"], np_gan_generator(W, gen_input), atol=2e-6)  # gan.py's generator
    # the discriminator's input is cat(flattened image, label_embedding(labels)); dropout p = 0
    d_in = np.concatenate([s0["gen"].reshape(4, -1), W["D.label_embedding.weight"][s0["gen_labels"]]], -1)
    h = leaky(d_in @ W["D.model.0.weight"].T + W["D.model.0.bias"])
    h = leaky(h @ W["D.model.2.weight"].T + W["D.model.2.bias"])
    h = leaky(h @ W["D.model.5.weight"].T + W["D.model.5.bias"])
    np.testing.assert_allclose(s0["validity"], h @ W["D.model.8.weight"].T + W["D.model.8.bias"], rtol=1e-5, atol=1e-6)
    for s in r["steps"]:
        assert s["g_loss"] == pytest.approx(((s["validity"].astype(np.float64) - 1) ** 2).mean(), rel=1e-5)
        d = (((s["validity_real"] - 1.0) ** 2).mean() + (s["validity_fake"].astype(np.float64) ** 2).mean()) / 2
        assert s["d_loss"] == pytest.approx(d, rel=1e-5)
        # the embedding's gradient reaches only the rows of labels used (real [0, 2, 2, 0] and generated)
        used = set(batches[0][1]) | set(s["gen_labels"].tolist())
        assert [bool(s["D_emb_grad"][k].any()) for k in range(3)] == [k in used for k in range(3)]


def test_cgan_torch_parity():
    torch = pytest.importorskip("torch")
    b = _cgan_batches()
    r = cgan_page(lucid, b)
    t = cgan_page(torch, b, init=r["init"])
    for a, c in zip(r["steps"], t["steps"]):
        for k in ("g_loss", "d_loss"):
            assert a[k] == pytest.approx(c[k], rel=1e-5, abs=1e-6)
        np.testing.assert_allclose(a["D_emb_grad"], c["D_emb_grad"], rtol=1e-4, atol=1e-7)


# ----------------------------------------------------------------------------------------------
# InfoGAN (implementations/infogan/infogan.py)
# ----------------------------------------------------------------------------------------------

def infogan_page(torch, batches, init=None, seed=0):
    nn = torch.nn
    Variable = import_module(torch.__name__ + ".autograd").Variable
    opt = SimpleNamespace(n_epochs=1, lr=0.0002, b1=0.5, b2=0.999, latent_dim=6, code_dim=2, n_classes=3,
                          img_size=16, channels=1)
    random_state = np.random.RandomState(seed)

    def weights_init_normal(m):
        classname = m.__class__.__name__
        if classname.find("Conv") != -1:
            torch.nn.init.normal_(m.weight.data, 0.0, 0.02)
        elif classname.find("BatchNorm") != -1:
            torch.nn.init.normal_(m.weight.data, 1.0, 0.02)
            torch.nn.init.constant_(m.bias.data, 0.0)

    def to_categorical(y, num_columns):
        """Returns one-hot encoded Variable"""
        y_cat = np.zeros((y.shape[0], num_columns))
        y_cat[range(y.shape[0]), y] = 1.0

        return Variable(FloatTensor(y_cat))

    class Generator(nn.Module):
        def __init__(self):
            super(Generator, self).__init__()
            input_dim = opt.latent_dim + opt.n_classes + opt.code_dim

            self.init_size = opt.img_size // 4  # Initial size before upsampling
            self.l1 = nn.Sequential(nn.Linear(input_dim, 16 * self.init_size ** 2))

            self.conv_blocks = nn.Sequential(
                nn.BatchNorm2d(16),
                nn.Upsample(scale_factor=2),
                nn.Conv2d(16, 16, 3, stride=1, padding=1),
                nn.BatchNorm2d(16, 0.8),
                nn.LeakyReLU(0.2, inplace=True),
                nn.Upsample(scale_factor=2),
                nn.Conv2d(16, 8, 3, stride=1, padding=1),
                nn.BatchNorm2d(8, 0.8),
                nn.LeakyReLU(0.2, inplace=True),
                nn.Conv2d(8, opt.channels, 3, stride=1, padding=1),
                nn.Tanh(),
            )

        def forward(self, noise, labels, code):
            gen_input = torch.cat((noise, labels, code), -1)
            out = self.l1(gen_input)
            out = out.view(out.shape[0], 16, self.init_size, self.init_size)
            img = self.conv_blocks(out)
            return img

    class Discriminator(nn.Module):
        def __init__(self):
            super(Discriminator, self).__init__()

            def discriminator_block(in_filters, out_filters, bn=True):
                """Returns layers of each discriminator block"""
                block = [nn.Conv2d(in_filters, out_filters, 3, 2, 1), nn.LeakyReLU(0.2, inplace=True), nn.Dropout2d(0.0)]
                if bn:
                    block.append(nn.BatchNorm2d(out_filters, 0.8))
                return block

            self.conv_blocks = nn.Sequential(
                *discriminator_block(opt.channels, 4, bn=False),
                *discriminator_block(4, 8),
                *discriminator_block(8, 16),
                *discriminator_block(16, 32),
            )

            # The height and width of downsampled image
            ds_size = opt.img_size // 2 ** 4

            # Output layers
            self.adv_layer = nn.Sequential(nn.Linear(32 * ds_size ** 2, 1))
            self.aux_layer = nn.Sequential(nn.Linear(32 * ds_size ** 2, opt.n_classes), nn.Softmax())
            self.latent_layer = nn.Sequential(nn.Linear(32 * ds_size ** 2, opt.code_dim))

        def forward(self, img):
            out = self.conv_blocks(img)
            out = out.view(out.shape[0], -1)
            validity = self.adv_layer(out)
            label = self.aux_layer(out)
            latent_code = self.latent_layer(out)

            return validity, label, latent_code

    # Loss functions
    adversarial_loss = torch.nn.MSELoss()
    categorical_loss = torch.nn.CrossEntropyLoss()
    continuous_loss = torch.nn.MSELoss()

    # Loss weights
    lambda_cat = 1
    lambda_con = 0.1

    # Initialize generator and discriminator
    torch.manual_seed(seed)
    generator = Generator()
    discriminator = Discriminator()

    # Initialize weights
    generator.apply(weights_init_normal)
    discriminator.apply(weights_init_normal)
    rec = {"init": _setup(torch, init, seed, G=generator, D=discriminator), "steps": []}

    # Optimizers
    optimizer_G = torch.optim.Adam(generator.parameters(), lr=opt.lr, betas=(opt.b1, opt.b2))
    optimizer_D = torch.optim.Adam(discriminator.parameters(), lr=opt.lr, betas=(opt.b1, opt.b2))
    optimizer_info = torch.optim.Adam(
        itertools.chain(generator.parameters(), discriminator.parameters()), lr=opt.lr, betas=(opt.b1, opt.b2)
    )

    FloatTensor = _typed(torch, torch.FloatTensor)  # torch.cuda.FloatTensor if cuda else ...
    LongTensor = _typed(torch, torch.LongTensor)

    # Static generator inputs for sampling
    static_label = to_categorical(
        np.array([num for _ in range(opt.n_classes) for num in range(opt.n_classes)]), num_columns=opt.n_classes
    )
    rec["static_label"] = _np(static_label)

    dataloader = [(torch.tensor(b), torch.tensor(y)) for b, y in batches]
    for epoch in range(opt.n_epochs):
        for i, (imgs, labels) in enumerate(dataloader):

            batch_size = imgs.shape[0]

            # Adversarial ground truths
            valid = Variable(FloatTensor(batch_size, 1).fill_(1.0), requires_grad=False)
            fake = Variable(FloatTensor(batch_size, 1).fill_(0.0), requires_grad=False)

            # Configure input
            real_imgs = Variable(imgs.type(FloatTensor))
            labels = to_categorical(labels.cpu().numpy(), num_columns=opt.n_classes)

            # -----------------
            #  Train Generator
            # -----------------

            optimizer_G.zero_grad()

            # Sample noise and labels as generator input
            z = Variable(FloatTensor(random_state.normal(0, 1, (batch_size, opt.latent_dim))))
            label_input = to_categorical(random_state.randint(0, opt.n_classes, batch_size), num_columns=opt.n_classes)
            code_input = Variable(FloatTensor(random_state.uniform(-1, 1, (batch_size, opt.code_dim))))

            # Generate a batch of images
            gen_imgs = generator(z, label_input, code_input)

            # Loss measures generator's ability to fool the discriminator
            validity, _, _ = discriminator(gen_imgs)
            g_loss = adversarial_loss(validity, valid)

            g_loss.backward()
            optimizer_G.step()

            # ---------------------
            #  Train Discriminator
            # ---------------------

            optimizer_D.zero_grad()

            # Loss for real images
            real_pred, _, _ = discriminator(real_imgs)
            d_real_loss = adversarial_loss(real_pred, valid)

            # Loss for fake images
            fake_pred, _, _ = discriminator(gen_imgs.detach())
            d_fake_loss = adversarial_loss(fake_pred, fake)

            # Total discriminator loss
            d_loss = (d_real_loss + d_fake_loss) / 2

            d_loss.backward()
            optimizer_D.step()

            # ------------------
            # Information Loss
            # ------------------

            optimizer_info.zero_grad()

            # Sample labels
            sampled_labels = random_state.randint(0, opt.n_classes, batch_size)

            # Ground truth labels
            gt_labels = Variable(LongTensor(sampled_labels), requires_grad=False)

            # Sample noise, labels and code as generator input
            z = Variable(FloatTensor(random_state.normal(0, 1, (batch_size, opt.latent_dim))))
            label_input = to_categorical(sampled_labels, num_columns=opt.n_classes)
            code_input = Variable(FloatTensor(random_state.normal(-1, 1, (batch_size, opt.code_dim))))

            gen_imgs = generator(z, label_input, code_input)
            _, pred_label, pred_code = discriminator(gen_imgs)

            info_loss = lambda_cat * categorical_loss(pred_label, gt_labels) + lambda_con * continuous_loss(
                pred_code, code_input
            )

            info_loss.backward()
            s = {"labels": _np(labels), "label_input": _np(label_input), "sampled": sampled_labels,
                 "pred_label": _np(pred_label), "pred_code": _np(pred_code), "code_input": _np(code_input),
                 "info_loss": info_loss.item(), "g_loss": g_loss.item(), "d_loss": d_loss.item(),
                 "before": [_np(p) for p in optimizer_info.param_groups[0]["params"]],
                 "grads": [None if p.grad is None else _np(p.grad) for p in optimizer_info.param_groups[0]["params"]]}
            optimizer_info.step()
            s["after"] = [_np(p) for p in optimizer_info.param_groups[0]["params"]]
            rec["steps"].append(s)
    return rec


def _infogan_batches():
    return [(_images(s, (4, 1, 16, 16)), np.array([2, 0, 1, 2])) for s in (20, 21)]


def test_infogan():
    batches = _infogan_batches()
    r = infogan_page(lucid, batches)
    np.testing.assert_array_equal(r["static_label"], np.eye(3)[[0, 1, 2] * 3])
    s0 = r["steps"][0]
    np.testing.assert_array_equal(s0["labels"], np.eye(3)[[2, 0, 1, 2]])  # to_categorical(labels.numpy())
    np.testing.assert_array_equal(s0["label_input"], np.eye(3)[s0["sampled"]])
    for s in r["steps"]:
        info = np_cross_entropy(s["pred_label"].astype(np.float64), s["sampled"]) + \
            0.1 * ((s["pred_code"].astype(np.float64) - s["code_input"]) ** 2).mean()
        assert s["info_loss"] == pytest.approx(info, rel=1e-5)
    # optimizer_info steps both networks (itertools.chain of their parameters): 14 + 20 tensors
    assert len(s0["before"]) == 14 + 20
    for b, a, g in zip(s0["before"], s0["after"], s0["grads"]):  # its first Adam step, closed form
        if g is None:  # the adversarial head is not in the information loss: left alone
            np.testing.assert_array_equal(a, b)
        else:
            _assert_step(a, b, -0.0002 * g / (np.abs(g) + 1e-8))
    assert [g is None for g in s0["grads"]] == [False] * 28 + [True] * 2 + [False] * 4  # adv_layer.0


def test_infogan_torch_parity():
    torch = pytest.importorskip("torch")
    b = _infogan_batches()
    r = infogan_page(lucid, b)
    t = infogan_page(torch, b, init=r["init"])
    for a, c in zip(r["steps"], t["steps"]):
        for k in ("info_loss", "g_loss", "d_loss"):
            assert a[k] == pytest.approx(c[k], rel=1e-5, abs=1e-6)
        # the information step of each parameter where its gradient is well above Adam's eps (a
        # conv bias before a BatchNorm has a zero gradient up to rounding, which g / (|g| + eps)
        # turns into a step of up to lr in either library, and the weights drift apart by that)
        for x, xb, y, yb, g in zip(a["after"], a["before"], c["after"], c["before"], a["grads"]):
            if g is not None:
                big = np.abs(g) > 1e-5
                np.testing.assert_allclose((x - xb)[big], (y - yb)[big], rtol=1e-3, atol=1e-9)


# ----------------------------------------------------------------------------------------------
# BEGAN (implementations/began/began.py)
# ----------------------------------------------------------------------------------------------

def began_page(torch, batches, init=None, seed=0, lambda_k=0.001):
    nn = torch.nn
    Variable = import_module(torch.__name__ + ".autograd").Variable
    opt = SimpleNamespace(n_epochs=1, lr=0.0002, b1=0.5, b2=0.999, latent_dim=8, img_size=16, channels=1)
    random_state = np.random.RandomState(seed)

    def weights_init_normal(m):
        classname = m.__class__.__name__
        if classname.find("Conv") != -1:
            torch.nn.init.normal_(m.weight.data, 0.0, 0.02)
        elif classname.find("BatchNorm2d") != -1:
            torch.nn.init.normal_(m.weight.data, 1.0, 0.02)
            torch.nn.init.constant_(m.bias.data, 0.0)

    class Generator(nn.Module):
        def __init__(self):
            super(Generator, self).__init__()

            self.init_size = opt.img_size // 4
            self.l1 = nn.Sequential(nn.Linear(opt.latent_dim, 16 * self.init_size ** 2))

            self.conv_blocks = nn.Sequential(
                nn.BatchNorm2d(16),
                nn.Upsample(scale_factor=2),
                nn.Conv2d(16, 16, 3, stride=1, padding=1),
                nn.BatchNorm2d(16, 0.8),
                nn.LeakyReLU(0.2, inplace=True),
                nn.Upsample(scale_factor=2),
                nn.Conv2d(16, 8, 3, stride=1, padding=1),
                nn.BatchNorm2d(8, 0.8),
                nn.LeakyReLU(0.2, inplace=True),
                nn.Conv2d(8, opt.channels, 3, stride=1, padding=1),
                nn.Tanh(),
            )

        def forward(self, noise):
            out = self.l1(noise)
            out = out.view(out.shape[0], 16, self.init_size, self.init_size)
            img = self.conv_blocks(out)
            return img

    class Discriminator(nn.Module):
        def __init__(self):
            super(Discriminator, self).__init__()

            # Upsampling
            self.down = nn.Sequential(nn.Conv2d(opt.channels, 8, 3, 2, 1), nn.ReLU())
            # Fully-connected layers
            self.down_size = opt.img_size // 2
            down_dim = 8 * (opt.img_size // 2) ** 2
            self.fc = nn.Sequential(
                nn.Linear(down_dim, 32),
                nn.BatchNorm1d(32, 0.8),
                nn.ReLU(inplace=True),
                nn.Linear(32, down_dim),
                nn.BatchNorm1d(down_dim),
                nn.ReLU(inplace=True),
            )
            # Upsampling
            self.up = nn.Sequential(nn.Upsample(scale_factor=2), nn.Conv2d(8, opt.channels, 3, 1, 1))

        def forward(self, img):
            out = self.down(img)
            out = self.fc(out.view(out.size(0), -1))
            out = self.up(out.view(out.size(0), 8, self.down_size, self.down_size))
            return out

    # Initialize generator and discriminator
    torch.manual_seed(seed)
    generator = Generator()
    discriminator = Discriminator()

    # Initialize weights
    generator.apply(weights_init_normal)
    discriminator.apply(weights_init_normal)
    rec = {"init": _setup(torch, init, seed, G=generator, D=discriminator), "steps": []}

    # Optimizers
    optimizer_G = torch.optim.Adam(generator.parameters(), lr=opt.lr, betas=(opt.b1, opt.b2))
    optimizer_D = torch.optim.Adam(discriminator.parameters(), lr=opt.lr, betas=(opt.b1, opt.b2))

    Tensor = _typed(torch, torch.FloatTensor)  # torch.cuda.FloatTensor if cuda else torch.FloatTensor

    # BEGAN hyper parameters
    gamma = 0.75
    k = 0.0

    dataloader = [(torch.tensor(b), None) for b in batches]
    for epoch in range(opt.n_epochs):
        for i, (imgs, _) in enumerate(dataloader):

            # Configure input
            real_imgs = Variable(imgs.type(Tensor))

            # -----------------
            #  Train Generator
            # -----------------

            optimizer_G.zero_grad()

            # Sample noise as generator input
            z = Variable(Tensor(random_state.normal(0, 1, (imgs.shape[0], opt.latent_dim))))

            # Generate a batch of images
            gen_imgs = generator(z)

            # Loss measures generator's ability to fool the discriminator
            g_loss = torch.mean(torch.abs(discriminator(gen_imgs) - gen_imgs))

            g_loss.backward()
            optimizer_G.step()

            # ---------------------
            #  Train Discriminator
            # ---------------------

            optimizer_D.zero_grad()

            # Measure discriminator's ability to classify real from generated samples
            d_real = discriminator(real_imgs)
            d_fake = discriminator(gen_imgs.detach())

            d_loss_real = torch.mean(torch.abs(d_real - real_imgs))
            d_loss_fake = torch.mean(torch.abs(d_fake - gen_imgs.detach()))
            d_loss = d_loss_real - k * d_loss_fake

            d_loss.backward()
            optimizer_D.step()

            # ----------------
            # Update weights
            # ----------------

            diff = torch.mean(gamma * d_loss_real - d_loss_fake)

            # Update weight term for fake samples
            k_before = k
            k = k + lambda_k * diff.item()
            k = min(max(k, 0), 1)  # Constraint to interval [0, 1]

            # Update convergence metric
            M = (d_loss_real + torch.abs(diff)).item()

            rec["steps"].append({"d_real": _np(d_real), "real": _np(real_imgs), "d_loss_real": d_loss_real.item(),
                                 "d_loss_fake": d_loss_fake.item(), "d_loss": d_loss.item(), "g_loss": g_loss.item(),
                                 "k_before": k_before, "k": k, "M": M})
    return rec


def _began_batches():
    return [_images(s, (4, 1, 16, 16)) for s in (22, 23, 24)]


@pytest.mark.parametrize("lambda_k", [0.001, 50.0])
def test_began_k_update(lambda_k):
    r = began_page(lucid, _began_batches(), lambda_k=lambda_k)
    s0 = r["steps"][0]
    assert s0["d_real"].shape == (4, 1, 16, 16)  # the discriminator is an auto-encoder
    assert s0["d_loss_real"] == pytest.approx(np.abs(s0["d_real"].astype(np.float64) - s0["real"]).mean(), rel=1e-5)
    for s in r["steps"]:
        assert s["d_loss"] == pytest.approx(s["d_loss_real"] - s["k_before"] * s["d_loss_fake"], rel=1e-5, abs=1e-7)
        diff = 0.75 * s["d_loss_real"] - s["d_loss_fake"]
        assert s["k"] == pytest.approx(min(max(s["k_before"] + lambda_k * diff, 0), 1), abs=1e-7)
        assert s["M"] == pytest.approx(s["d_loss_real"] + abs(diff), rel=1e-5)
    ks = [s["k"] for s in r["steps"]]
    if lambda_k == 50.0:  # large steps reach the clip at 0 or 1, or move by |50 diff|
        assert r["steps"][1]["k_before"] == ks[0] and any(k in (0.0, 1.0) or k > 0.1 for k in ks)


def test_began_torch_parity():
    torch = pytest.importorskip("torch")
    b = _began_batches()
    r = began_page(lucid, b, lambda_k=50.0)
    t = began_page(torch, b, init=r["init"], lambda_k=50.0)
    for a, c in zip(r["steps"], t["steps"]):
        for k in ("d_loss_real", "d_loss_fake", "d_loss", "g_loss", "k", "M"):
            assert a[k] == pytest.approx(c[k], rel=1e-5, abs=1e-6)


# ----------------------------------------------------------------------------------------------
# Pix2Pix (implementations/pix2pix/models.py and pix2pix.py), five U-Net levels for 32x32 images
# ----------------------------------------------------------------------------------------------

def pix2pix_page(torch, batches, init=None, seed=0):
    nn = torch.nn
    Variable = import_module(torch.__name__ + ".autograd").Variable
    opt = SimpleNamespace(epoch=0, n_epochs=1, lr=0.0002, b1=0.5, b2=0.999, img_height=32, img_width=32, channels=3)

    def weights_init_normal(m):
        classname = m.__class__.__name__
        if classname.find('Conv') != -1:
            torch.nn.init.normal_(m.weight.data, 0.0, 0.02)
        elif classname.find('BatchNorm2d') != -1:
            torch.nn.init.normal_(m.weight.data, 1.0, 0.02)
            torch.nn.init.constant_(m.bias.data, 0.0)

    class UNetDown(nn.Module):
        def __init__(self, in_size, out_size, normalize=True, dropout=0.0):
            super(UNetDown, self).__init__()
            layers = [nn.Conv2d(in_size, out_size, 4, 2, 1, bias=False)]
            if normalize:
                layers.append(nn.InstanceNorm2d(out_size))
            layers.append(nn.LeakyReLU(0.2))
            if dropout:
                layers.append(nn.Dropout(dropout))
            self.model = nn.Sequential(*layers)

        def forward(self, x):
            return self.model(x)

    class UNetUp(nn.Module):
        def __init__(self, in_size, out_size, dropout=0.0):
            super(UNetUp, self).__init__()
            layers = [nn.ConvTranspose2d(in_size, out_size, 4, 2, 1, bias=False),
                      nn.InstanceNorm2d(out_size),
                      nn.ReLU(inplace=True)]
            if dropout:
                layers.append(nn.Dropout(dropout))

            self.model = nn.Sequential(*layers)

        def forward(self, x, skip_input):
            x = self.model(x)
            x = torch.cat((x, skip_input), 1)

            return x

    class GeneratorUNet(nn.Module):
        def __init__(self, in_channels=3, out_channels=3):
            super(GeneratorUNet, self).__init__()

            self.down1 = UNetDown(in_channels, 4, normalize=False)
            self.down2 = UNetDown(4, 8)
            self.down3 = UNetDown(8, 16)
            self.down4 = UNetDown(16, 32, dropout=0.0)
            self.down5 = UNetDown(32, 32, normalize=False, dropout=0.0)

            self.up1 = UNetUp(32, 32, dropout=0.0)
            self.up2 = UNetUp(64, 16)
            self.up3 = UNetUp(32, 8)
            self.up4 = UNetUp(16, 4)

            self.final = nn.Sequential(
                nn.Upsample(scale_factor=2),
                nn.ZeroPad2d((1, 0, 1, 0)),
                nn.Conv2d(8, out_channels, 4, padding=1),
                nn.Tanh()
            )

        def forward(self, x):
            # U-Net generator with skip connections from encoder to decoder
            d1 = self.down1(x)
            d2 = self.down2(d1)
            d3 = self.down3(d2)
            d4 = self.down4(d3)
            d5 = self.down5(d4)
            u1 = self.up1(d5, d4)
            u2 = self.up2(u1, d3)
            u3 = self.up3(u2, d2)
            u4 = self.up4(u3, d1)

            return self.final(u4)

    class Discriminator(nn.Module):
        def __init__(self, in_channels=3):
            super(Discriminator, self).__init__()

            def discriminator_block(in_filters, out_filters, normalization=True):
                """Returns downsampling layers of each discriminator block"""
                layers = [nn.Conv2d(in_filters, out_filters, 4, stride=2, padding=1)]
                if normalization:
                    layers.append(nn.InstanceNorm2d(out_filters))
                layers.append(nn.LeakyReLU(0.2, inplace=True))
                return layers

            self.model = nn.Sequential(
                *discriminator_block(in_channels * 2, 4, normalization=False),
                *discriminator_block(4, 8),
                *discriminator_block(8, 16),
                *discriminator_block(16, 32),
                nn.ZeroPad2d((1, 0, 1, 0)),
                nn.Conv2d(32, 1, 4, padding=1, bias=False)
            )

        def forward(self, img_A, img_B):
            # Concatenate image and condition image by channels to produce input
            img_input = torch.cat((img_A, img_B), 1)
            return self.model(img_input)

    # Loss functions
    criterion_GAN = torch.nn.MSELoss()
    criterion_pixelwise = torch.nn.L1Loss()

    # Loss weight of L1 pixel-wise loss between translated image and real image
    lambda_pixel = 100

    # Calculate output of image discriminator (PatchGAN)
    patch = (1, opt.img_height // 2 ** 4, opt.img_width // 2 ** 4)

    # Initialize generator and discriminator
    torch.manual_seed(seed)
    generator = GeneratorUNet()
    discriminator = Discriminator()
    generator.apply(weights_init_normal)
    discriminator.apply(weights_init_normal)
    rec = {"init": _setup(torch, init, seed, G=generator, D=discriminator), "steps": [], "patch": patch}

    # single blocks at the initial weights, for the NumPy recomputations
    probe = np.random.default_rng(seed + 100)
    x_down, x_up = (torch.tensor(probe.standard_normal(s).astype(np.float32)) for s in ((2, 4, 16, 16), (2, 32, 4, 4)))
    skip = torch.tensor(probe.standard_normal((2, 8, 8, 8)).astype(np.float32))
    rec["down2"], rec["up3"] = _np(generator.down2(x_down)), _np(generator.up3(x_up, skip))
    rec["x_down"], rec["x_up"], rec["skip"] = _np(x_down), _np(x_up), _np(skip)

    # Optimizers
    optimizer_G = torch.optim.Adam(generator.parameters(), lr=opt.lr, betas=(opt.b1, opt.b2))
    optimizer_D = torch.optim.Adam(discriminator.parameters(), lr=opt.lr, betas=(opt.b1, opt.b2))

    # Tensor type
    Tensor = _typed(torch, torch.FloatTensor)  # torch.cuda.FloatTensor if cuda else torch.FloatTensor
    dataloader = [{"A": torch.tensor(a), "B": torch.tensor(b)} for a, b in batches]

    for epoch in range(opt.epoch, opt.n_epochs):
        for i, batch in enumerate(dataloader):

            # Model inputs
            real_A = Variable(batch['B'].type(Tensor))
            real_B = Variable(batch['A'].type(Tensor))

            # Adversarial ground truths
            valid = Variable(Tensor(np.ones((real_A.size(0), *patch))), requires_grad=False)
            fake = Variable(Tensor(np.zeros((real_A.size(0), *patch))), requires_grad=False)

            # ------------------
            #  Train Generators
            # ------------------

            optimizer_G.zero_grad()

            # GAN loss
            fake_B = generator(real_A)
            pred_fake = discriminator(fake_B, real_A)
            loss_GAN = criterion_GAN(pred_fake, valid)
            # Pixel-wise loss
            loss_pixel = criterion_pixelwise(fake_B, real_B)

            # Total loss
            loss_G = loss_GAN + lambda_pixel * loss_pixel

            loss_G.backward()

            optimizer_G.step()

            # ---------------------
            #  Train Discriminator
            # ---------------------

            optimizer_D.zero_grad()

            # Real loss
            pred_real = discriminator(real_B, real_A)
            loss_real = criterion_GAN(pred_real, valid)

            # Fake loss
            pred_fake2 = discriminator(fake_B.detach(), real_A)
            loss_fake = criterion_GAN(pred_fake2, fake)

            # Total loss
            loss_D = 0.5 * (loss_real + loss_fake)

            loss_D.backward()
            optimizer_D.step()
            rec["steps"].append({"fake_B": _np(fake_B), "real_B": _np(real_B), "pred_fake": _np(pred_fake),
                                 "pred_real": _np(pred_real), "pred_fake2": _np(pred_fake2),
                                 "loss_GAN": loss_GAN.item(), "loss_pixel": loss_pixel.item(), "loss_G": loss_G.item(),
                                 "loss_D": loss_D.item()})
    return rec


def _pix2pix_batches():
    return [(_images(s, (1, 3, 32, 32)), _images(s + 50, (1, 3, 32, 32))) for s in (25, 26)]


def test_pix2pix_unet_and_patchgan():
    r = pix2pix_page(lucid, _pix2pix_batches())
    W = {k: v.astype(np.float64) for k, v in r["init"].items()}
    assert r["patch"] == (1, 2, 2)
    # UNetDown: Conv2d(4, 2, 1, bias=False) -> InstanceNorm2d -> LeakyReLU(0.2)
    want = leaky(np_instance_norm(np_conv2d(r["x_down"], W["G.down2.model.0.weight"], stride=2, pad=1)))
    np.testing.assert_allclose(r["down2"], want, atol=2e-5)
    # UNetUp: ConvTranspose2d(4, 2, 1, bias=False) -> InstanceNorm2d -> ReLU, then cat with the skip
    up = relu(np_instance_norm(np_conv_transpose2d(r["x_up"].astype(np.float64), W["G.up3.model.0.weight"])))
    assert r["up3"].shape == (2, 16, 8, 8)
    np.testing.assert_allclose(r["up3"], np.concatenate([up, r["skip"]], 1), atol=2e-5)
    for s in r["steps"]:
        assert s["fake_B"].shape == (1, 3, 32, 32) and s["pred_fake"].shape == (1, 1, 2, 2)
        assert np.abs(s["fake_B"]).max() < 1
        l1 = np.abs(s["fake_B"].astype(np.float64) - s["real_B"]).mean()
        assert s["loss_pixel"] == pytest.approx(l1, rel=1e-5)
        assert s["loss_GAN"] == pytest.approx(((s["pred_fake"] - 1.0) ** 2).mean(), rel=1e-5)
        assert s["loss_G"] == pytest.approx(s["loss_GAN"] + 100 * s["loss_pixel"], rel=1e-6)
        d = 0.5 * (((s["pred_real"] - 1.0) ** 2).mean() + (s["pred_fake2"].astype(np.float64) ** 2).mean())
        assert s["loss_D"] == pytest.approx(d, rel=1e-5)


def test_pix2pix_torch_parity():
    torch = pytest.importorskip("torch")
    b = _pix2pix_batches()
    r = pix2pix_page(lucid, b)
    t = pix2pix_page(torch, b, init=r["init"])
    np.testing.assert_allclose(r["down2"], t["down2"], atol=1e-5)
    np.testing.assert_allclose(r["up3"], t["up3"], atol=1e-5)
    for a, c in zip(r["steps"], t["steps"]):
        for k in ("loss_GAN", "loss_pixel", "loss_G", "loss_D"):
            assert a[k] == pytest.approx(c[k], rel=1e-4, abs=1e-6)
        np.testing.assert_allclose(a["fake_B"], c["fake_B"], atol=1e-4)


# ----------------------------------------------------------------------------------------------
# CycleGAN (implementations/cyclegan/models.py, utils.py and cyclegan.py)
# ----------------------------------------------------------------------------------------------

def cyclegan_page(torch, batches, init=None, seed=0):
    nn = torch.nn
    Variable = import_module(torch.__name__ + ".autograd").Variable
    opt = SimpleNamespace(epoch=0, n_epochs=3, lr=0.0002, b1=0.5, b2=0.999, decay_epoch=1, img_height=32,
                          img_width=32, channels=3, n_residual_blocks=1, lambda_cyc=10.0, lambda_id=5.0)

    def weights_init_normal(m):
        classname = m.__class__.__name__
        if classname.find("Conv") != -1:
            torch.nn.init.normal_(m.weight.data, 0.0, 0.02)
            if hasattr(m, "bias") and m.bias is not None:
                torch.nn.init.constant_(m.bias.data, 0.0)
        elif classname.find("BatchNorm2d") != -1:
            torch.nn.init.normal_(m.weight.data, 1.0, 0.02)
            torch.nn.init.constant_(m.bias.data, 0.0)

    class ResidualBlock(nn.Module):
        def __init__(self, in_features):
            super(ResidualBlock, self).__init__()

            self.block = nn.Sequential(
                nn.ReflectionPad2d(1),
                nn.Conv2d(in_features, in_features, 3),
                nn.InstanceNorm2d(in_features),
                nn.ReLU(inplace=True),
                nn.ReflectionPad2d(1),
                nn.Conv2d(in_features, in_features, 3),
                nn.InstanceNorm2d(in_features),
            )

        def forward(self, x):
            return x + self.block(x)

    class GeneratorResNet(nn.Module):
        def __init__(self, input_shape, num_residual_blocks):
            super(GeneratorResNet, self).__init__()

            channels = input_shape[0]

            # Initial convolution block
            out_features = 4
            model = [
                nn.ReflectionPad2d(channels),
                nn.Conv2d(channels, out_features, 7),
                nn.InstanceNorm2d(out_features),
                nn.ReLU(inplace=True),
            ]
            in_features = out_features

            # Downsampling
            for _ in range(2):
                out_features *= 2
                model += [
                    nn.Conv2d(in_features, out_features, 3, stride=2, padding=1),
                    nn.InstanceNorm2d(out_features),
                    nn.ReLU(inplace=True),
                ]
                in_features = out_features

            # Residual blocks
            for _ in range(num_residual_blocks):
                model += [ResidualBlock(out_features)]

            # Upsampling
            for _ in range(2):
                out_features //= 2
                model += [
                    nn.Upsample(scale_factor=2),
                    nn.Conv2d(in_features, out_features, 3, stride=1, padding=1),
                    nn.InstanceNorm2d(out_features),
                    nn.ReLU(inplace=True),
                ]
                in_features = out_features

            # Output layer
            model += [nn.ReflectionPad2d(channels), nn.Conv2d(out_features, channels, 7), nn.Tanh()]

            self.model = nn.Sequential(*model)

        def forward(self, x):
            return self.model(x)

    class Discriminator(nn.Module):
        def __init__(self, input_shape):
            super(Discriminator, self).__init__()

            channels, height, width = input_shape

            # Calculate output shape of image discriminator (PatchGAN)
            self.output_shape = (1, height // 2 ** 4, width // 2 ** 4)

            def discriminator_block(in_filters, out_filters, normalize=True):
                """Returns downsampling layers of each discriminator block"""
                layers = [nn.Conv2d(in_filters, out_filters, 4, stride=2, padding=1)]
                if normalize:
                    layers.append(nn.InstanceNorm2d(out_filters))
                layers.append(nn.LeakyReLU(0.2, inplace=True))
                return layers

            self.model = nn.Sequential(
                *discriminator_block(channels, 4, normalize=False),
                *discriminator_block(4, 8),
                *discriminator_block(8, 16),
                *discriminator_block(16, 32),
                nn.ZeroPad2d((1, 0, 1, 0)),
                nn.Conv2d(32, 1, 4, padding=1)
            )

        def forward(self, img):
            return self.model(img)

    class ReplayBuffer():
        def __init__(self, max_size=50):
            assert (max_size > 0), 'Empty buffer or trying to create a black hole. Be careful.'
            self.max_size = max_size
            self.data = []

        def push_and_pop(self, data):
            to_return = []
            for element in data.data:
                element = torch.unsqueeze(element, 0)
                if len(self.data) < self.max_size:
                    self.data.append(element)
                    to_return.append(element)
                else:
                    if random.uniform(0, 1) > 0.5:
                        i = random.randint(0, self.max_size - 1)
                        to_return.append(self.data[i].clone())
                        self.data[i] = element
                    else:
                        to_return.append(element)
            return Variable(torch.cat(to_return))

    class LambdaLR():
        def __init__(self, n_epochs, offset, decay_start_epoch):
            assert ((n_epochs - decay_start_epoch) > 0), "Decay must start before the training session ends!"
            self.n_epochs = n_epochs
            self.offset = offset
            self.decay_start_epoch = decay_start_epoch

        def step(self, epoch):
            return 1.0 - max(0, epoch + self.offset - self.decay_start_epoch) / (self.n_epochs - self.decay_start_epoch)

    # Losses
    criterion_GAN = torch.nn.MSELoss()
    criterion_cycle = torch.nn.L1Loss()
    criterion_identity = torch.nn.L1Loss()

    input_shape = (opt.channels, opt.img_height, opt.img_width)

    # Initialize generator and discriminator
    torch.manual_seed(seed)
    G_AB = GeneratorResNet(input_shape, opt.n_residual_blocks)
    G_BA = GeneratorResNet(input_shape, opt.n_residual_blocks)
    D_A = Discriminator(input_shape)
    D_B = Discriminator(input_shape)

    # Initialize weights
    G_AB.apply(weights_init_normal)
    G_BA.apply(weights_init_normal)
    D_A.apply(weights_init_normal)
    D_B.apply(weights_init_normal)
    rec = {"init": _setup(torch, init, seed, G_AB=G_AB, G_BA=G_BA, D_A=D_A, D_B=D_B), "steps": [],
           "ReplayBuffer": ReplayBuffer, "output_shape": D_A.output_shape}
    x_res = torch.tensor(np.random.default_rng(seed + 200).standard_normal((2, 16, 6, 6)).astype(np.float32))
    rec["x_res"], rec["res"] = _np(x_res), _np(G_AB.model[10](x_res))

    # Optimizers
    optimizer_G = torch.optim.Adam(
        itertools.chain(G_AB.parameters(), G_BA.parameters()), lr=opt.lr, betas=(opt.b1, opt.b2)
    )
    optimizer_D_A = torch.optim.Adam(D_A.parameters(), lr=opt.lr, betas=(opt.b1, opt.b2))
    optimizer_D_B = torch.optim.Adam(D_B.parameters(), lr=opt.lr, betas=(opt.b1, opt.b2))

    # Learning rate update schedulers
    lr_scheduler_G = torch.optim.lr_scheduler.LambdaLR(
        optimizer_G, lr_lambda=LambdaLR(opt.n_epochs, opt.epoch, opt.decay_epoch).step
    )
    lr_scheduler_D_A = torch.optim.lr_scheduler.LambdaLR(
        optimizer_D_A, lr_lambda=LambdaLR(opt.n_epochs, opt.epoch, opt.decay_epoch).step
    )
    lr_scheduler_D_B = torch.optim.lr_scheduler.LambdaLR(
        optimizer_D_B, lr_lambda=LambdaLR(opt.n_epochs, opt.epoch, opt.decay_epoch).step
    )

    Tensor = torch.Tensor

    # Buffers of previously generated samples
    fake_A_buffer = ReplayBuffer()
    fake_B_buffer = ReplayBuffer()

    dataloader = [{"A": torch.tensor(a), "B": torch.tensor(b)} for a, b in batches]
    for epoch in range(opt.epoch, opt.n_epochs):
        for i, batch in enumerate(dataloader):

            # Set model input
            real_A = Variable(batch["A"].type(Tensor))
            real_B = Variable(batch["B"].type(Tensor))

            # Adversarial ground truths
            valid = Variable(Tensor(np.ones((real_A.size(0), *D_A.output_shape))), requires_grad=False)
            fake = Variable(Tensor(np.zeros((real_A.size(0), *D_A.output_shape))), requires_grad=False)

            # ------------------
            #  Train Generators
            # ------------------

            G_AB.train()
            G_BA.train()

            optimizer_G.zero_grad()

            # Identity loss
            loss_id_A = criterion_identity(G_BA(real_A), real_A)
            loss_id_B = criterion_identity(G_AB(real_B), real_B)

            loss_identity = (loss_id_A + loss_id_B) / 2

            # GAN loss
            fake_B = G_AB(real_A)
            loss_GAN_AB = criterion_GAN(D_B(fake_B), valid)
            fake_A = G_BA(real_B)
            loss_GAN_BA = criterion_GAN(D_A(fake_A), valid)

            loss_GAN = (loss_GAN_AB + loss_GAN_BA) / 2

            # Cycle loss
            recov_A = G_BA(fake_B)
            loss_cycle_A = criterion_cycle(recov_A, real_A)
            recov_B = G_AB(fake_A)
            loss_cycle_B = criterion_cycle(recov_B, real_B)

            loss_cycle = (loss_cycle_A + loss_cycle_B) / 2

            # Total loss
            loss_G = loss_GAN + opt.lambda_cyc * loss_cycle + opt.lambda_id * loss_identity

            loss_G.backward()
            optimizer_G.step()

            # -----------------------
            #  Train Discriminator A
            # -----------------------

            optimizer_D_A.zero_grad()

            # Real loss
            loss_real = criterion_GAN(D_A(real_A), valid)
            # Fake loss (on batch of previously generated samples)
            fake_A_ = fake_A_buffer.push_and_pop(fake_A)
            loss_fake = criterion_GAN(D_A(fake_A_.detach()), fake)
            # Total loss
            loss_D_A = (loss_real + loss_fake) / 2

            loss_D_A.backward()
            optimizer_D_A.step()

            # -----------------------
            #  Train Discriminator B
            # -----------------------

            optimizer_D_B.zero_grad()

            # Real loss
            loss_real = criterion_GAN(D_B(real_B), valid)
            # Fake loss (on batch of previously generated samples)
            fake_B_ = fake_B_buffer.push_and_pop(fake_B)
            loss_fake = criterion_GAN(D_B(fake_B_.detach()), fake)
            # Total loss
            loss_D_B = (loss_real + loss_fake) / 2

            loss_D_B.backward()
            optimizer_D_B.step()

            loss_D = (loss_D_A + loss_D_B) / 2
            rec["steps"].append({k: v.item() for k, v in dict(
                loss_identity=loss_identity, loss_GAN=loss_GAN, loss_cycle=loss_cycle, loss_G=loss_G,
                loss_D=loss_D, loss_id_A=loss_id_A, loss_cycle_A=loss_cycle_A).items()})
            rec["steps"][-1].update(lr=optimizer_G.param_groups[0]["lr"], fake_B=_np(fake_B), recov_A=_np(recov_A),
                                    real_A=_np(real_A), buffered=_np(fake_B_), n_buffer=len(fake_B_buffer.data))

        # Update learning rates
        lr_scheduler_G.step()
        lr_scheduler_D_A.step()
        lr_scheduler_D_B.step()
    rec["final_lrs"] = [lr_scheduler_G.get_last_lr()[0], optimizer_D_A.param_groups[0]["lr"]]
    return rec


def _cyclegan_batches():
    return [(_images(27, (1, 3, 32, 32)), _images(28, (1, 3, 32, 32)))]


def test_cyclegan():
    r = cyclegan_page(lucid, _cyclegan_batches())
    W = {k: v.astype(np.float64) for k, v in r["init"].items()}
    assert r["output_shape"] == (1, 2, 2)
    convs = [k for k in W if k.endswith(".bias")]
    assert convs and all(not W[k].any() for k in convs)  # weights_init_normal zeroes every conv bias
    assert not any(k.startswith("G_AB.model.2.") for k in W)  # InstanceNorm2d: affine=False, no parameters
    # ResidualBlock: x + IN(conv(reflect(ReLU(IN(conv(reflect(x)))))))
    x = r["x_res"].astype(np.float64)
    pad = lambda a: np.pad(a, ((0, 0), (0, 0), (1, 1), (1, 1)), mode="reflect")  # noqa: E731
    h = relu(np_instance_norm(np_conv2d(pad(x), W["G_AB.model.10.block.1.weight"], W["G_AB.model.10.block.1.bias"])))
    h = np_instance_norm(np_conv2d(pad(h), W["G_AB.model.10.block.5.weight"], W["G_AB.model.10.block.5.bias"]))
    np.testing.assert_allclose(r["res"], x + h, atol=2e-5)
    # LambdaLR(3, 0, 1).step(epoch) = 1 - max(0, epoch - 1) / 2 multiplies the learning rate
    assert [s["lr"] for s in r["steps"]] == pytest.approx([0.0002, 0.0002, 0.0001], rel=1e-12)
    assert r["final_lrs"] == pytest.approx([0.0, 0.0], abs=1e-20)
    for k, s in enumerate(r["steps"]):
        assert s["fake_B"].shape == s["recov_A"].shape == (1, 3, 32, 32)
        assert s["loss_G"] == pytest.approx(s["loss_GAN"] + 10 * s["loss_cycle"] + 5 * s["loss_identity"], rel=1e-6)
        assert s["loss_cycle_A"] == pytest.approx(np.abs(s["recov_A"].astype(np.float64) - s["real_A"]).mean(), rel=1e-5)
        # the buffer (max 50) is not full: each push returns the pushed sample and keeps it
        np.testing.assert_array_equal(s["buffered"], s["fake_B"])
        assert s["n_buffer"] == k + 1


def test_cyclegan_replay_buffer_when_full():
    ReplayBuffer = cyclegan_page(lucid, [])["ReplayBuffer"]
    with pytest.raises(AssertionError, match="black hole"):
        ReplayBuffer(0)
    buf = ReplayBuffer(max_size=2)
    random.seed(5)
    pushed, out = [], []
    for k in range(4):
        batch = lucid.full((2, 1, 2, 2), float(k)) + lucid.arange(2.0).view(2, 1, 1, 1) / 10
        pushed.append(_np(batch))
        out.append(_np(buf.push_and_pop(batch)))
    assert [o.shape for o in out] == [(2, 1, 2, 2)] * 4 and len(buf.data) == 2
    np.testing.assert_array_equal(out[0], pushed[0])  # filling the buffer returns the batch
    seen = {float(v) for p in pushed for v in p[:, 0, 0, 0]}
    # afterwards each row is the pushed one or an older one it replaced (with probability 1/2)
    swapped = 0
    for p, o in zip(pushed[1:], out[1:]):
        for row_p, row_o in zip(p[:, 0, 0, 0], o[:, 0, 0, 0]):
            assert row_o in seen and row_o <= row_p
            swapped += row_o != row_p
    assert 0 < swapped < 6  # random.seed(5): both branches taken
    random.seed(5)  # the same draws, the same choices
    buf2 = ReplayBuffer(max_size=2)
    again = [_np(buf2.push_and_pop(lucid.tensor(p))) for p in pushed]
    for a, b in zip(again, out):
        np.testing.assert_array_equal(a, b)


def test_cyclegan_torch_parity():
    torch = pytest.importorskip("torch")
    b = _cyclegan_batches()
    r = cyclegan_page(lucid, b)
    t = cyclegan_page(torch, b, init=r["init"])
    np.testing.assert_allclose(r["res"], t["res"], atol=1e-5)
    for a, c in zip(r["steps"], t["steps"]):
        for k in ("loss_identity", "loss_GAN", "loss_cycle", "loss_G", "loss_D", "lr"):
            assert a[k] == pytest.approx(c[k], rel=1e-4, abs=1e-7)
    assert r["final_lrs"] == pytest.approx(t["final_lrs"], abs=1e-20)


def test_type_with_the_tensor_class_casts_to_the_default_dtype():
    # cyclegan.py's ``Tensor = torch.Tensor`` then ``batch["A"].type(Tensor)`` raised a TypeError
    x = lucid.tensor([1, 2])
    assert x.type(lucid.Tensor).dtype == lucid.float32 and x.type(lucid.Tensor).tolist() == [1.0, 2.0]
    assert lucid.ones(2, dtype=lucid.float64).type(lucid.Tensor).dtype == lucid.float32
    with _dd(lucid.float64):
        assert x.type(lucid.Tensor).dtype == lucid.float64
    assert x.type(lucid.DoubleTensor).dtype == lucid.float64 and x.type().endswith(".LongTensor")


class _dd:
    def __init__(self, dt):
        self.dt = dt

    def __enter__(self):
        self.old = lucid.get_default_dtype()
        lucid.set_default_dtype(self.dt)

    def __exit__(self, *a):
        lucid.set_default_dtype(self.old)


# ----------------------------------------------------------------------------------------------
# ESRGAN (implementations/esrgan/models.py) and SRGAN's ResidualBlock (implementations/srgan/models.py)
# ----------------------------------------------------------------------------------------------

def esrgan_page(torch, lr_imgs, hr_imgs, init=None, seed=0, steps=3):
    nn = torch.nn

    class DenseResidualBlock(nn.Module):
        """
        The core module of paper: (Residual Dense Network for Image Super-Resolution, CVPR 18)
        """

        def __init__(self, filters, res_scale=0.2):
            super(DenseResidualBlock, self).__init__()
            self.res_scale = res_scale

            def block(in_features, non_linearity=True):
                layers = [nn.Conv2d(in_features, filters, 3, 1, 1, bias=True)]
                if non_linearity:
                    layers += [nn.LeakyReLU()]
                return nn.Sequential(*layers)

            self.b1 = block(in_features=1 * filters)
            self.b2 = block(in_features=2 * filters)
            self.b3 = block(in_features=3 * filters)
            self.b4 = block(in_features=4 * filters)
            self.b5 = block(in_features=5 * filters, non_linearity=False)
            self.blocks = [self.b1, self.b2, self.b3, self.b4, self.b5]

        def forward(self, x):
            inputs = x
            for block in self.blocks:
                out = block(inputs)
                inputs = torch.cat([inputs, out], 1)
            return out.mul(self.res_scale) + x

    class ResidualInResidualDenseBlock(nn.Module):
        def __init__(self, filters, res_scale=0.2):
            super(ResidualInResidualDenseBlock, self).__init__()
            self.res_scale = res_scale
            self.dense_blocks = nn.Sequential(
                DenseResidualBlock(filters), DenseResidualBlock(filters), DenseResidualBlock(filters)
            )

        def forward(self, x):
            return self.dense_blocks(x).mul(self.res_scale) + x

    class GeneratorRRDB(nn.Module):
        def __init__(self, channels, filters=64, num_res_blocks=16, num_upsample=2):
            super(GeneratorRRDB, self).__init__()

            # First layer
            self.conv1 = nn.Conv2d(channels, filters, kernel_size=3, stride=1, padding=1)
            # Residual blocks
            self.res_blocks = nn.Sequential(*[ResidualInResidualDenseBlock(filters) for _ in range(num_res_blocks)])
            # Second conv layer post residual blocks
            self.conv2 = nn.Conv2d(filters, filters, kernel_size=3, stride=1, padding=1)
            # Upsampling layers
            upsample_layers = []
            for _ in range(num_upsample):
                upsample_layers += [
                    nn.Conv2d(filters, filters * 4, kernel_size=3, stride=1, padding=1),
                    nn.LeakyReLU(),
                    nn.PixelShuffle(upscale_factor=2),
                ]
            self.upsampling = nn.Sequential(*upsample_layers)
            # Final output block
            self.conv3 = nn.Sequential(
                nn.Conv2d(filters, filters, kernel_size=3, stride=1, padding=1),
                nn.LeakyReLU(),
                nn.Conv2d(filters, channels, kernel_size=3, stride=1, padding=1),
            )

        def forward(self, x):
            out1 = self.conv1(x)
            out = self.res_blocks(out1)
            out2 = self.conv2(out)
            out = torch.add(out1, out2)
            out = self.upsampling(out)
            out = self.conv3(out)
            return out

    class ResidualBlock(nn.Module):  # srgan/models.py
        def __init__(self, in_features):
            super(ResidualBlock, self).__init__()
            self.conv_block = nn.Sequential(
                nn.Conv2d(in_features, in_features, kernel_size=3, stride=1, padding=1),
                nn.BatchNorm2d(in_features, 0.8),
                nn.PReLU(),
                nn.Conv2d(in_features, in_features, kernel_size=3, stride=1, padding=1),
                nn.BatchNorm2d(in_features, 0.8),
            )

        def forward(self, x):
            return x + self.conv_block(x)

    torch.manual_seed(seed)
    generator = GeneratorRRDB(3, filters=4, num_res_blocks=1, num_upsample=1)
    srgan_block = ResidualBlock(4)
    rec = {"init": _setup(torch, init, seed, G=generator, S=srgan_block)}
    probe = torch.tensor(np.random.default_rng(seed + 300).standard_normal((2, 4, 5, 5)).astype(np.float32))
    rec["probe"] = _np(probe)
    rec["dense"] = _np(generator.res_blocks[0].dense_blocks[0](probe))
    rec["srgan_block"] = _np(srgan_block(probe))
    rec["shuffled"] = _np(generator.upsampling(probe))

    criterion_pixel = torch.nn.L1Loss()
    optimizer_G = torch.optim.Adam(generator.parameters(), lr=0.01, betas=(0.9, 0.999))
    imgs_lr, imgs_hr = torch.tensor(lr_imgs), torch.tensor(hr_imgs)
    losses = []
    for _ in range(steps):
        optimizer_G.zero_grad()
        gen_hr = generator(imgs_lr)
        loss_pixel = criterion_pixel(gen_hr, imgs_hr)
        loss_pixel.backward()
        optimizer_G.step()
        losses.append(loss_pixel.item())
        rec.setdefault("gen_hr0", _np(gen_hr))
    rec["gen_hr"], rec["losses"] = _np(gen_hr), losses
    return rec


def _esrgan_data():
    hr = _images(29, (2, 3, 16, 16))
    return hr.reshape(2, 3, 8, 2, 8, 2).mean((3, 5)), hr


def test_esrgan_dense_blocks_pixel_shuffle_and_srgan_block():
    lr, hr = _esrgan_data()
    r = esrgan_page(lucid, lr, hr)
    W = {k: v.astype(np.float64) for k, v in r["init"].items()}
    x = r["probe"].astype(np.float64)
    # DenseResidualBlock: each conv sees the concatenation of the input and all earlier outputs
    inputs = x
    for j in range(1, 6):
        out = np_conv2d(inputs, W[f"G.res_blocks.0.dense_blocks.0.b{j}.0.weight"],
                        W[f"G.res_blocks.0.dense_blocks.0.b{j}.0.bias"], pad=1)
        out = leaky(out, 0.01) if j < 5 else out
        inputs = np.concatenate([inputs, out], 1)
    np.testing.assert_allclose(r["dense"], out * 0.2 + x, atol=1e-5)
    # PixelShuffle(2) after Conv2d(4, 16) and LeakyReLU: (2, 16, 5, 5) -> (2, 4, 10, 10)
    h = leaky(np_conv2d(x, W["G.upsampling.0.weight"], W["G.upsampling.0.bias"], pad=1), 0.01)
    assert r["shuffled"].shape == (2, 4, 10, 10)
    np.testing.assert_allclose(r["shuffled"], np_pixel_shuffle(h, 2), atol=1e-5)
    # SRGAN's ResidualBlock: BatchNorm2d(eps 0.8) in training mode and PReLU (slope 0.25)
    h = np_bn(np_conv2d(x, W["S.conv_block.0.weight"], W["S.conv_block.0.bias"], pad=1), W["S.conv_block.1.weight"],
              W["S.conv_block.1.bias"], eps=0.8)
    h = np.where(h > 0, h, W["S.conv_block.2.weight"] * h)
    h = np_bn(np_conv2d(h, W["S.conv_block.3.weight"], W["S.conv_block.3.bias"], pad=1), W["S.conv_block.4.weight"],
              W["S.conv_block.4.bias"], eps=0.8)
    np.testing.assert_allclose(r["srgan_block"], x + h, atol=1e-5)
    assert r["gen_hr"].shape == (2, 3, 16, 16)
    # the L1 pixel loss falls at each of the three Adam steps (lr 0.01), by 0.5% in all
    assert r["losses"][0] > r["losses"][1] > r["losses"][2] and r["losses"][2] < 0.995 * r["losses"][0]
    assert r["losses"][0] == pytest.approx(np.abs(r["gen_hr0"].astype(np.float64) - hr).mean(), rel=1e-6)


def test_esrgan_torch_parity():
    torch = pytest.importorskip("torch")
    lr, hr = _esrgan_data()
    r = esrgan_page(lucid, lr, hr)
    t = esrgan_page(torch, lr, hr, init=r["init"])
    for k in ("dense", "srgan_block", "shuffled", "gen_hr0"):
        np.testing.assert_allclose(r[k], t[k], atol=1e-5)
    np.testing.assert_allclose(r["losses"], t["losses"], rtol=1e-5)
    # Adam's sign-like steps on gradients that are sums of +-1/N (L1) drift by a part of lr
    np.testing.assert_allclose(r["gen_hr"], t["gen_hr"], atol=3e-3)


# ----------------------------------------------------------------------------------------------
# kuangliu/pytorch-cifar models/*.py
# ----------------------------------------------------------------------------------------------

def cifar_models(torch):
    """The model files' classes (widths divided, as the module docstring says)."""
    nn = torch.nn
    F = torch.nn.functional

    # models/resnet.py
    class BasicBlock(nn.Module):
        expansion = 1

        def __init__(self, in_planes, planes, stride=1):
            super(BasicBlock, self).__init__()
            self.conv1 = nn.Conv2d(in_planes, planes, kernel_size=3, stride=stride, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=1, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)

            self.shortcut = nn.Sequential()
            if stride != 1 or in_planes != self.expansion*planes:
                self.shortcut = nn.Sequential(
                    nn.Conv2d(in_planes, self.expansion*planes, kernel_size=1, stride=stride, bias=False),
                    nn.BatchNorm2d(self.expansion*planes)
                )

        def forward(self, x):
            out = F.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            out += self.shortcut(x)
            out = F.relu(out)
            return out

    class ResNet(nn.Module):
        def __init__(self, block, num_blocks, num_classes=10):
            super(ResNet, self).__init__()
            self.in_planes = 4

            self.conv1 = nn.Conv2d(3, 4, kernel_size=3, stride=1, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(4)
            self.layer1 = self._make_layer(block, 4, num_blocks[0], stride=1)
            self.layer2 = self._make_layer(block, 8, num_blocks[1], stride=2)
            self.layer3 = self._make_layer(block, 16, num_blocks[2], stride=2)
            self.layer4 = self._make_layer(block, 32, num_blocks[3], stride=2)
            self.linear = nn.Linear(32*block.expansion, num_classes)

        def _make_layer(self, block, planes, num_blocks, stride):
            strides = [stride] + [1]*(num_blocks-1)
            layers = []
            for stride in strides:
                layers.append(block(self.in_planes, planes, stride))
                self.in_planes = planes * block.expansion
            return nn.Sequential(*layers)

        def forward(self, x):
            out = F.relu(self.bn1(self.conv1(x)))
            out = self.layer1(out)
            out = self.layer2(out)
            out = self.layer3(out)
            out = self.layer4(out)
            out = F.avg_pool2d(out, 4)
            out = out.view(out.size(0), -1)
            out = self.linear(out)
            return out

    def ResNet18():
        return ResNet(BasicBlock, [2, 2, 2, 2])

    # models/preact_resnet.py
    class PreActBlock(nn.Module):
        '''Pre-activation version of the BasicBlock.'''
        expansion = 1

        def __init__(self, in_planes, planes, stride=1):
            super(PreActBlock, self).__init__()
            self.bn1 = nn.BatchNorm2d(in_planes)
            self.conv1 = nn.Conv2d(in_planes, planes, kernel_size=3, stride=stride, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=1, padding=1, bias=False)

            if stride != 1 or in_planes != self.expansion*planes:
                self.shortcut = nn.Sequential(
                    nn.Conv2d(in_planes, self.expansion*planes, kernel_size=1, stride=stride, bias=False)
                )

        def forward(self, x):
            out = F.relu(self.bn1(x))
            shortcut = self.shortcut(out) if hasattr(self, 'shortcut') else x
            out = self.conv1(out)
            out = self.conv2(F.relu(self.bn2(out)))
            out += shortcut
            return out

    class PreActResNet(nn.Module):
        def __init__(self, block, num_blocks, num_classes=10):
            super(PreActResNet, self).__init__()
            self.in_planes = 4

            self.conv1 = nn.Conv2d(3, 4, kernel_size=3, stride=1, padding=1, bias=False)
            self.layer1 = self._make_layer(block, 4, num_blocks[0], stride=1)
            self.layer2 = self._make_layer(block, 8, num_blocks[1], stride=2)
            self.layer3 = self._make_layer(block, 16, num_blocks[2], stride=2)
            self.layer4 = self._make_layer(block, 32, num_blocks[3], stride=2)
            self.linear = nn.Linear(32*block.expansion, num_classes)

        def _make_layer(self, block, planes, num_blocks, stride):
            strides = [stride] + [1]*(num_blocks-1)
            layers = []
            for stride in strides:
                layers.append(block(self.in_planes, planes, stride))
                self.in_planes = planes * block.expansion
            return nn.Sequential(*layers)

        def forward(self, x):
            out = self.conv1(x)
            out = self.layer1(out)
            out = self.layer2(out)
            out = self.layer3(out)
            out = self.layer4(out)
            out = F.avg_pool2d(out, 4)
            out = out.view(out.size(0), -1)
            out = self.linear(out)
            return out

    def PreActResNet18():
        return PreActResNet(PreActBlock, [2, 2, 2, 2])

    # models/mobilenetv2.py
    class Block(nn.Module):
        '''expand + depthwise + pointwise'''
        def __init__(self, in_planes, out_planes, expansion, stride):
            super(Block, self).__init__()
            self.stride = stride

            planes = expansion * in_planes
            self.conv1 = nn.Conv2d(in_planes, planes, kernel_size=1, stride=1, padding=0, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=stride, padding=1, groups=planes, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.conv3 = nn.Conv2d(planes, out_planes, kernel_size=1, stride=1, padding=0, bias=False)
            self.bn3 = nn.BatchNorm2d(out_planes)

            self.shortcut = nn.Sequential()
            if stride == 1 and in_planes != out_planes:
                self.shortcut = nn.Sequential(
                    nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=1, padding=0, bias=False),
                    nn.BatchNorm2d(out_planes),
                )

        def forward(self, x):
            out = F.relu(self.bn1(self.conv1(x)))
            out = F.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            out = out + self.shortcut(x) if self.stride == 1 else out
            return out

    class MobileNetV2(nn.Module):
        # (expansion, out_planes, num_blocks, stride)
        cfg = [(1, 4, 1, 1),
               (6, 6, 2, 2),
               (6, 8, 2, 2)]

        def __init__(self, num_classes=10):
            super(MobileNetV2, self).__init__()
            # NOTE: change conv1 stride 2 -> 1 for CIFAR10
            self.conv1 = nn.Conv2d(3, 4, kernel_size=3, stride=1, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(4)
            self.layers = self._make_layers(in_planes=4)
            self.conv2 = nn.Conv2d(8, 32, kernel_size=1, stride=1, padding=0, bias=False)
            self.bn2 = nn.BatchNorm2d(32)
            self.linear = nn.Linear(32, num_classes)

        def _make_layers(self, in_planes):
            layers = []
            for expansion, out_planes, num_blocks, stride in self.cfg:
                strides = [stride] + [1]*(num_blocks-1)
                for stride in strides:
                    layers.append(Block(in_planes, out_planes, expansion, stride))
                    in_planes = out_planes
            return nn.Sequential(*layers)

        def forward(self, x):
            out = F.relu(self.bn1(self.conv1(x)))
            out = self.layers(out)
            out = F.relu(self.bn2(self.conv2(out)))
            # NOTE: change pooling kernel_size 7 -> 2 for CIFAR10
            out = F.avg_pool2d(out, 2)
            out = out.view(out.size(0), -1)
            out = self.linear(out)
            return out

    # models/densenet.py
    class Bottleneck(nn.Module):
        def __init__(self, in_planes, growth_rate):
            super(Bottleneck, self).__init__()
            self.bn1 = nn.BatchNorm2d(in_planes)
            self.conv1 = nn.Conv2d(in_planes, 4*growth_rate, kernel_size=1, bias=False)
            self.bn2 = nn.BatchNorm2d(4*growth_rate)
            self.conv2 = nn.Conv2d(4*growth_rate, growth_rate, kernel_size=3, padding=1, bias=False)

        def forward(self, x):
            out = self.conv1(F.relu(self.bn1(x)))
            out = self.conv2(F.relu(self.bn2(out)))
            out = torch.cat([out, x], 1)
            return out

    class Transition(nn.Module):
        def __init__(self, in_planes, out_planes):
            super(Transition, self).__init__()
            self.bn = nn.BatchNorm2d(in_planes)
            self.conv = nn.Conv2d(in_planes, out_planes, kernel_size=1, bias=False)

        def forward(self, x):
            out = self.conv(F.relu(self.bn(x)))
            out = F.avg_pool2d(out, 2)
            return out

    class DenseNet(nn.Module):
        def __init__(self, block, nblocks, growth_rate=12, reduction=0.5, num_classes=10):
            super(DenseNet, self).__init__()
            self.growth_rate = growth_rate

            num_planes = 2*growth_rate
            self.conv1 = nn.Conv2d(3, num_planes, kernel_size=3, padding=1, bias=False)

            self.dense1 = self._make_dense_layers(block, num_planes, nblocks[0])
            num_planes += nblocks[0]*growth_rate
            out_planes = int(math.floor(num_planes*reduction))
            self.trans1 = Transition(num_planes, out_planes)
            num_planes = out_planes

            self.dense2 = self._make_dense_layers(block, num_planes, nblocks[1])
            num_planes += nblocks[1]*growth_rate
            out_planes = int(math.floor(num_planes*reduction))
            self.trans2 = Transition(num_planes, out_planes)
            num_planes = out_planes

            self.dense3 = self._make_dense_layers(block, num_planes, nblocks[2])
            num_planes += nblocks[2]*growth_rate
            out_planes = int(math.floor(num_planes*reduction))
            self.trans3 = Transition(num_planes, out_planes)
            num_planes = out_planes

            self.dense4 = self._make_dense_layers(block, num_planes, nblocks[3])
            num_planes += nblocks[3]*growth_rate

            self.bn = nn.BatchNorm2d(num_planes)
            self.linear = nn.Linear(num_planes, num_classes)

        def _make_dense_layers(self, block, in_planes, nblock):
            layers = []
            for i in range(nblock):
                layers.append(block(in_planes, self.growth_rate))
                in_planes += self.growth_rate
            return nn.Sequential(*layers)

        def forward(self, x):
            out = self.conv1(x)
            out = self.trans1(self.dense1(out))
            out = self.trans2(self.dense2(out))
            out = self.trans3(self.dense3(out))
            out = self.dense4(out)
            out = F.avg_pool2d(F.relu(self.bn(out)), 4)
            out = out.view(out.size(0), -1)
            out = self.linear(out)
            return out

    # models/shufflenetv2.py
    class ShuffleBlock(nn.Module):
        def __init__(self, groups=2):
            super(ShuffleBlock, self).__init__()
            self.groups = groups

        def forward(self, x):
            '''Channel shuffle: [N,C,H,W] -> [N,g,C/g,H,W] -> [N,C/g,g,H,w] -> [N,C,H,W]'''
            N, C, H, W = x.size()
            g = self.groups
            return x.view(N, g, int(C/g), H, W).permute(0, 2, 1, 3, 4).reshape(N, C, H, W)

    class SplitBlock(nn.Module):
        def __init__(self, ratio):
            super(SplitBlock, self).__init__()
            self.ratio = ratio

        def forward(self, x):
            c = int(x.size(1) * self.ratio)
            return x[:, :c, :, :], x[:, c:, :, :]

    class ShuffleBasicBlock(nn.Module):  # shufflenetv2.py's BasicBlock
        def __init__(self, in_channels, split_ratio=0.5):
            super(ShuffleBasicBlock, self).__init__()
            self.split = SplitBlock(split_ratio)
            in_channels = int(in_channels * split_ratio)
            self.conv1 = nn.Conv2d(in_channels, in_channels,
                                   kernel_size=1, bias=False)
            self.bn1 = nn.BatchNorm2d(in_channels)
            self.conv2 = nn.Conv2d(in_channels, in_channels,
                                   kernel_size=3, stride=1, padding=1, groups=in_channels, bias=False)
            self.bn2 = nn.BatchNorm2d(in_channels)
            self.conv3 = nn.Conv2d(in_channels, in_channels,
                                   kernel_size=1, bias=False)
            self.bn3 = nn.BatchNorm2d(in_channels)
            self.shuffle = ShuffleBlock()

        def forward(self, x):
            x1, x2 = self.split(x)
            out = F.relu(self.bn1(self.conv1(x2)))
            out = self.bn2(self.conv2(out))
            out = F.relu(self.bn3(self.conv3(out)))
            out = torch.cat([x1, out], 1)
            out = self.shuffle(out)
            return out

    class DownBlock(nn.Module):
        def __init__(self, in_channels, out_channels):
            super(DownBlock, self).__init__()
            mid_channels = out_channels // 2
            # left
            self.conv1 = nn.Conv2d(in_channels, in_channels,
                                   kernel_size=3, stride=2, padding=1, groups=in_channels, bias=False)
            self.bn1 = nn.BatchNorm2d(in_channels)
            self.conv2 = nn.Conv2d(in_channels, mid_channels,
                                   kernel_size=1, bias=False)
            self.bn2 = nn.BatchNorm2d(mid_channels)
            # right
            self.conv3 = nn.Conv2d(in_channels, mid_channels,
                                   kernel_size=1, bias=False)
            self.bn3 = nn.BatchNorm2d(mid_channels)
            self.conv4 = nn.Conv2d(mid_channels, mid_channels,
                                   kernel_size=3, stride=2, padding=1, groups=mid_channels, bias=False)
            self.bn4 = nn.BatchNorm2d(mid_channels)
            self.conv5 = nn.Conv2d(mid_channels, mid_channels,
                                   kernel_size=1, bias=False)
            self.bn5 = nn.BatchNorm2d(mid_channels)

            self.shuffle = ShuffleBlock()

        def forward(self, x):
            # left
            out1 = self.bn1(self.conv1(x))
            out1 = F.relu(self.bn2(self.conv2(out1)))
            # right
            out2 = F.relu(self.bn3(self.conv3(x)))
            out2 = self.bn4(self.conv4(out2))
            out2 = F.relu(self.bn5(self.conv5(out2)))
            # concat
            out = torch.cat([out1, out2], 1)
            out = self.shuffle(out)
            return out

    configs = {0.1: {'out_channels': (8, 16, 32, 64), 'num_blocks': (1, 1, 1)}}

    class ShuffleNetV2(nn.Module):
        def __init__(self, net_size):
            super(ShuffleNetV2, self).__init__()
            out_channels = configs[net_size]['out_channels']
            num_blocks = configs[net_size]['num_blocks']

            self.conv1 = nn.Conv2d(3, 4, kernel_size=3,
                                   stride=1, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(4)
            self.in_channels = 4
            self.layer1 = self._make_layer(out_channels[0], num_blocks[0])
            self.layer2 = self._make_layer(out_channels[1], num_blocks[1])
            self.layer3 = self._make_layer(out_channels[2], num_blocks[2])
            self.conv2 = nn.Conv2d(out_channels[2], out_channels[3],
                                   kernel_size=1, stride=1, padding=0, bias=False)
            self.bn2 = nn.BatchNorm2d(out_channels[3])
            self.linear = nn.Linear(out_channels[3], 10)

        def _make_layer(self, out_channels, num_blocks):
            layers = [DownBlock(self.in_channels, out_channels)]
            for i in range(num_blocks):
                layers.append(ShuffleBasicBlock(out_channels))
                self.in_channels = out_channels
            return nn.Sequential(*layers)

        def forward(self, x):
            out = F.relu(self.bn1(self.conv1(x)))
            # out = F.max_pool2d(out, 3, stride=2, padding=1)
            out = self.layer1(out)
            out = self.layer2(out)
            out = self.layer3(out)
            out = F.relu(self.bn2(self.conv2(out)))
            out = F.avg_pool2d(out, 4)
            out = out.view(out.size(0), -1)
            out = self.linear(out)
            return out

    # models/senet.py
    class SEPreActBlock(nn.Module):  # senet.py's PreActBlock
        def __init__(self, in_planes, planes, stride=1):
            super(SEPreActBlock, self).__init__()
            self.bn1 = nn.BatchNorm2d(in_planes)
            self.conv1 = nn.Conv2d(in_planes, planes, kernel_size=3, stride=stride, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=1, padding=1, bias=False)

            if stride != 1 or in_planes != planes:
                self.shortcut = nn.Sequential(
                    nn.Conv2d(in_planes, planes, kernel_size=1, stride=stride, bias=False)
                )

            # SE layers
            self.fc1 = nn.Conv2d(planes, planes//16, kernel_size=1)
            self.fc2 = nn.Conv2d(planes//16, planes, kernel_size=1)

        def forward(self, x):
            out = F.relu(self.bn1(x))
            shortcut = self.shortcut(out) if hasattr(self, 'shortcut') else x
            out = self.conv1(out)
            out = self.conv2(F.relu(self.bn2(out)))

            # Squeeze
            w = F.avg_pool2d(out, out.size(2))
            w = F.relu(self.fc1(w))
            w = F.sigmoid(self.fc2(w))
            # Excitation
            out = out * w

            out += shortcut
            return out

    class SENet(nn.Module):
        def __init__(self, block, num_blocks, num_classes=10):
            super(SENet, self).__init__()
            self.in_planes = 16

            self.conv1 = nn.Conv2d(3, 16, kernel_size=3, stride=1, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(16)
            self.layer1 = self._make_layer(block, 16, num_blocks[0], stride=1)
            self.layer2 = self._make_layer(block, 32, num_blocks[1], stride=2)
            self.layer3 = self._make_layer(block, 64, num_blocks[2], stride=2)
            self.layer4 = self._make_layer(block, 128, num_blocks[3], stride=2)
            self.linear = nn.Linear(128, num_classes)

        def _make_layer(self, block, planes, num_blocks, stride):
            strides = [stride] + [1]*(num_blocks-1)
            layers = []
            for stride in strides:
                layers.append(block(self.in_planes, planes, stride))
                self.in_planes = planes
            return nn.Sequential(*layers)

        def forward(self, x):
            out = F.relu(self.bn1(self.conv1(x)))
            out = self.layer1(out)
            out = self.layer2(out)
            out = self.layer3(out)
            out = self.layer4(out)
            out = F.avg_pool2d(out, 4)
            out = out.view(out.size(0), -1)
            out = self.linear(out)
            return out

    # models/dla_simple.py (its BasicBlock is resnet.py's)
    class Root(nn.Module):
        def __init__(self, in_channels, out_channels, kernel_size=1):
            super(Root, self).__init__()
            self.conv = nn.Conv2d(
                in_channels, out_channels, kernel_size,
                stride=1, padding=(kernel_size - 1) // 2, bias=False)
            self.bn = nn.BatchNorm2d(out_channels)

        def forward(self, xs):
            x = torch.cat(xs, 1)
            out = F.relu(self.bn(self.conv(x)))
            return out

    class Tree(nn.Module):
        def __init__(self, block, in_channels, out_channels, level=1, stride=1):
            super(Tree, self).__init__()
            self.root = Root(2*out_channels, out_channels)
            if level == 1:
                self.left_tree = block(in_channels, out_channels, stride=stride)
                self.right_tree = block(out_channels, out_channels, stride=1)
            else:
                self.left_tree = Tree(block, in_channels,
                                      out_channels, level=level-1, stride=stride)
                self.right_tree = Tree(block, out_channels,
                                       out_channels, level=level-1, stride=1)

        def forward(self, x):
            out1 = self.left_tree(x)
            out2 = self.right_tree(out1)
            out = self.root([out1, out2])
            return out

    class SimpleDLA(nn.Module):
        def __init__(self, block=BasicBlock, num_classes=10):
            super(SimpleDLA, self).__init__()
            self.base = nn.Sequential(
                nn.Conv2d(3, 2, kernel_size=3, stride=1, padding=1, bias=False),
                nn.BatchNorm2d(2),
                nn.ReLU(True)
            )

            self.layer1 = nn.Sequential(
                nn.Conv2d(2, 2, kernel_size=3, stride=1, padding=1, bias=False),
                nn.BatchNorm2d(2),
                nn.ReLU(True)
            )

            self.layer2 = nn.Sequential(
                nn.Conv2d(2, 4, kernel_size=3, stride=1, padding=1, bias=False),
                nn.BatchNorm2d(4),
                nn.ReLU(True)
            )

            self.layer3 = Tree(block,  4,  8, level=1, stride=1)
            self.layer4 = Tree(block,  8, 16, level=2, stride=2)
            self.layer5 = Tree(block, 16, 32, level=2, stride=2)
            self.layer6 = Tree(block, 32, 64, level=1, stride=2)
            self.linear = nn.Linear(64, num_classes)

        def forward(self, x):
            out = self.base(x)
            out = self.layer1(out)
            out = self.layer2(out)
            out = self.layer3(out)
            out = self.layer4(out)
            out = self.layer5(out)
            out = self.layer6(out)
            out = F.avg_pool2d(out, 4)
            out = out.view(out.size(0), -1)
            out = self.linear(out)
            return out

    return SimpleNamespace(
        SimpleDLA=SimpleDLA, Tree=Tree,
        ResNet18=ResNet18, BasicBlock=BasicBlock, PreActResNet18=PreActResNet18, PreActBlock=PreActBlock,
        MobileNetV2=MobileNetV2, DenseNet=lambda: DenseNet(Bottleneck, [1, 1, 1, 1], growth_rate=2),
        ShuffleBlock=ShuffleBlock, SplitBlock=SplitBlock, ShuffleNetV2=lambda: ShuffleNetV2(0.1),
        SENet=lambda: SENet(SEPreActBlock, [1, 1, 1, 1]), SEPreActBlock=SEPreActBlock)


def cifar_train_page(torch, name, x, y, init=None, steps=2, seed=0):
    """main.py's ``train(epoch)`` on one synthetic batch, ``steps`` times: SGD(lr 0.1, momentum 0.9,
    weight_decay 5e-4) and CrossEntropyLoss, its running loss and accuracy as the progress bar shows them."""
    nn = torch.nn
    optim = torch.optim
    torch.manual_seed(seed)
    net = getattr(cifar_models(torch), name)()
    rec = {"init": _setup(torch, init, seed, net=net),
           "n_params": sum(p.numel() for p in net.parameters())}
    criterion = nn.CrossEntropyLoss()
    optimizer = optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    trainloader = [(torch.tensor(x), torch.tensor(y))] * steps
    net.train()
    train_loss = 0
    correct = 0
    total = 0
    text = io.StringIO()
    losses = []
    for batch_idx, (inputs, targets) in enumerate(trainloader):
        optimizer.zero_grad()
        outputs = net(inputs)
        loss = criterion(outputs, targets)
        loss.backward()
        optimizer.step()

        train_loss += loss.item()
        _, predicted = outputs.max(1)
        total += targets.size(0)
        correct += predicted.eq(targets).sum().item()
        with redirect_stdout(text):
            print('Loss: %.3f | Acc: %.3f%% (%d/%d)' % (train_loss/(batch_idx+1), 100.*correct/total, correct, total))
        losses.append(loss.item())
        if batch_idx == 0:
            rec["logits"] = _np(outputs)
    net.eval()
    with torch.no_grad():
        rec["eval_logits"] = _np(net(torch.tensor(x)))
    rec.update(losses=losses, text=text.getvalue(), net=net)
    return rec


def _cifar_data(n=2, size=32):
    rng = np.random.default_rng(30)
    return rng.standard_normal((n, 3, size, size)).astype(np.float32), rng.integers(0, 10, n)


def _resnet18_params(w):
    def basic(cin, cout, stride):
        return 9 * cin * cout + 9 * cout * cout + 4 * cout + (cin * cout + 2 * cout if stride != 1 or cin != cout else 0)
    total, cin = 27 * w + 2 * w, w
    for cout, stride in ((w, 1), (2 * w, 2), (4 * w, 2), (8 * w, 2)):
        total += basic(cin, cout, stride) + basic(cout, cout, 1)
        cin = cout
    return total + 8 * w * 10 + 10


def _preact18_params(w):
    def block(cin, cout, stride):
        return 2 * cin + 9 * cin * cout + 2 * cout + 9 * cout * cout + (cin * cout if stride != 1 or cin != cout else 0)
    total, cin = 27 * w, w
    for cout, stride in ((w, 1), (2 * w, 2), (4 * w, 2), (8 * w, 2)):
        total += block(cin, cout, stride) + block(cout, cout, 1)
        cin = cout
    return total + 8 * w * 10 + 10


def _mobilenetv2_params():
    def block(cin, cout, e, s):
        p = e * cin
        shortcut = cin * cout + 2 * cout if s == 1 and cin != cout else 0
        return cin * p + 2 * p + 9 * p + 2 * p + p * cout + 2 * cout + shortcut
    total, cin = 27 * 4 + 8, 4
    for e, cout, n, s in ((1, 4, 1, 1), (6, 6, 2, 2), (6, 8, 2, 2)):
        for stride in [s] + [1] * (n - 1):
            total += block(cin, cout, e, stride)
            cin = cout
    return total + 8 * 32 + 64 + 32 * 10 + 10


def _densenet_params(g=2):
    def bottleneck(cin):
        return 2 * cin + cin * 4 * g + 8 * g + 4 * g * 9 * g
    total, planes = 27 * 2 * g, 2 * g
    for stage in range(4):
        total += bottleneck(planes)
        planes += g
        if stage < 3:
            out = planes // 2
            total += 2 * planes + planes * out
            planes = out
    return total + 2 * planes + planes * 10 + 10


def _simple_dla_params():
    def basic(cin, cout, stride):
        return 9 * cin * cout + 9 * cout * cout + 4 * cout + (cin * cout + 2 * cout if stride != 1 or cin != cout else 0)

    def tree(cin, cout, level, stride):  # a Root (1x1 conv of 2 cout -> cout, BatchNorm) over two subtrees
        root = 2 * cout * cout + 2 * cout
        if level == 1:
            return root + basic(cin, cout, stride) + basic(cout, cout, 1)
        return root + tree(cin, cout, level - 1, stride) + tree(cout, cout, level - 1, 1)
    convs = 27 * 2 + 4 + 9 * 2 * 2 + 4 + 9 * 2 * 4 + 8
    return convs + tree(4, 8, 1, 1) + tree(8, 16, 2, 2) + tree(16, 32, 2, 2) + tree(32, 64, 1, 2) + 64 * 10 + 10


@pytest.mark.parametrize("name,size,count", [
    ("ResNet18", 32, lambda: _resnet18_params(4)), ("PreActResNet18", 32, lambda: _preact18_params(4)),
    ("MobileNetV2", 8, _mobilenetv2_params), ("DenseNet", 32, _densenet_params),
    ("ShuffleNetV2", 32, None), ("SENet", 32, None), ("SimpleDLA", 32, lambda: _simple_dla_params())])
def test_cifar_models_train(name, size, count):
    x, y = _cifar_data(size=size)
    r = cifar_train_page(lucid, name, x, y)
    assert r["logits"].shape == r["eval_logits"].shape == (2, 10)
    if count is not None:
        assert r["n_params"] == count()
    assert r["losses"][0] == pytest.approx(np_cross_entropy(r["logits"].astype(np.float64), y), rel=1e-5)
    assert r["losses"][1] < r["losses"][0]  # one SGD step on the batch lowers its loss
    lines = r["text"].splitlines()
    assert len(lines) == 2 and re.fullmatch(r"Loss: \d+\.\d{3} \| Acc: \d+\.\d{3}% \(\d/2\)", lines[0])
    assert float(lines[1].split()[1]) == pytest.approx(sum(r["losses"]) / 2, abs=6e-4)


@pytest.mark.parametrize("name,size", [("ResNet18", 32), ("PreActResNet18", 32), ("MobileNetV2", 8),
                                       ("DenseNet", 32), ("ShuffleNetV2", 32), ("SENet", 32), ("SimpleDLA", 32)])
def test_cifar_models_train_torch_parity(name, size):
    torch = pytest.importorskip("torch")
    x, y = _cifar_data(size=size)
    r = cifar_train_page(lucid, name, x, y)
    t = cifar_train_page(torch, name, x, y, init=r["init"])
    assert r["n_params"] == t["n_params"]
    np.testing.assert_allclose(r["logits"], t["logits"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(r["losses"], t["losses"], rtol=1e-4)
    np.testing.assert_allclose(r["eval_logits"], t["eval_logits"], rtol=1e-3, atol=1e-4)
    _same_text(r["text"], t["text"], atol=1.5e-3)


def test_cifar_blocks_against_numpy():
    m = cifar_models(lucid)
    rng = np.random.default_rng(31)
    x = rng.standard_normal((2, 4, 8, 8)).astype(np.float32)
    W = lambda mod: {k: _np(v).astype(np.float64) for k, v in mod.state_dict().items()}  # noqa: E731
    lucid.manual_seed(1)
    # resnet.py's BasicBlock with its projection shortcut (stride 2, 4 -> 8 planes), training mode
    blk = m.BasicBlock(4, 8, stride=2)
    P, xd = W(blk), x.astype(np.float64)
    h = relu(np_bn(np_conv2d(xd, P["conv1.weight"], stride=2, pad=1), P["bn1.weight"], P["bn1.bias"]))
    h = np_bn(np_conv2d(h, P["conv2.weight"], pad=1), P["bn2.weight"], P["bn2.bias"])
    h = h + np_bn(np_conv2d(xd, P["shortcut.0.weight"], stride=2), P["shortcut.1.weight"], P["shortcut.1.bias"])
    np.testing.assert_allclose(_np(blk(lucid.tensor(x))), relu(h), atol=2e-5)
    # preact_resnet.py's PreActBlock: the shortcut takes relu(bn1(x))
    blk = m.PreActBlock(4, 8, stride=2)
    P = W(blk)
    a = relu(np_bn(xd, P["bn1.weight"], P["bn1.bias"]))
    h = np_conv2d(relu(np_bn(np_conv2d(a, P["conv1.weight"], stride=2, pad=1), P["bn2.weight"], P["bn2.bias"])),
                  P["conv2.weight"], pad=1)
    np.testing.assert_allclose(_np(blk(lucid.tensor(x))), h + np_conv2d(a, P["shortcut.0.weight"], stride=2), atol=2e-5)
    # senet.py's PreActBlock: squeeze (global average), excite (two 1x1 convs, sigmoid), rescale
    x16 = rng.standard_normal((2, 16, 4, 4)).astype(np.float32)
    blk = m.SEPreActBlock(16, 16)
    P, xd = W(blk), x16.astype(np.float64)
    a = relu(np_bn(xd, P["bn1.weight"], P["bn1.bias"]))
    out = np_conv2d(relu(np_bn(np_conv2d(a, P["conv1.weight"], pad=1), P["bn2.weight"], P["bn2.bias"])),
                    P["conv2.weight"], pad=1)
    s = out.mean((2, 3), keepdims=True)
    s = relu(np_conv2d(s, P["fc1.weight"], P["fc1.bias"]))
    s = 1 / (1 + np.exp(-np_conv2d(s, P["fc2.weight"], P["fc2.bias"])))
    assert P["fc1.weight"].shape == (1, 16, 1, 1)  # planes // 16
    np.testing.assert_allclose(_np(blk(lucid.tensor(x16))), out * s + xd, atol=2e-5)
    # shufflenetv2.py: the channel shuffle interleaves the two halves; the split is a view
    t = lucid.arange(2 * 6 * 2 * 2.0).view(2, 6, 2, 2)
    got = _np(m.ShuffleBlock(groups=2)(t))
    np.testing.assert_array_equal(got, _np(t)[:, [0, 3, 1, 4, 2, 5]])
    np.testing.assert_array_equal(_np(m.ShuffleBlock(groups=3)(t)), _np(t)[:, [0, 2, 4, 1, 3, 5]])
    x1, x2 = m.SplitBlock(0.5)(t)
    assert x1.shape == x2.shape == (2, 3, 2, 2) and x1._base is not None
