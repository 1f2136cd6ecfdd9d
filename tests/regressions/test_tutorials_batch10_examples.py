"""pytorch/examples scripts run on Lucid (``import lucid as torch``), tenth batch:

- ``legacy/snli`` (``model.py`` + the loop of ``train.py``): ``Bottle``/``Linear`` (a mixin whose
  ``forward`` calls ``super().forward`` on the flattened ``(T*B, -1)`` input and views it back),
  ``Encoder`` (a bidirectional ``nn.LSTM`` started from ``inputs.new_zeros(state_shape)``, the two
  last directions' ``ht[-2:].transpose(0, 1).contiguous().view(batch_size, -1)``),
  ``SNLIClassifier`` (``nn.Embedding``, the projection, ``torch.cat`` of premise and hypothesis, the
  MLP ``nn.Sequential`` that reuses one ``ReLU``/``Dropout`` module three times), ``Adam`` with
  ``CrossEntropyLoss``, ``torch.max(answer, 1)[1].view(batch.label.size())`` accuracy and the
  rolling snapshot files (the script's whole-model ``torch.save(model, snapshot_path)`` becomes
  ``model.state_dict()``: Lucid refuses to pickle modules, README "Differences from PyTorch").
- ``dcgan/main.py``: ``Generator``/``Discriminator`` (``input.is_cuda and self.ngpu > 1`` dispatch,
  ``output.view(-1, 1).squeeze(1)``), ``weights_init`` applied through ``Module.apply`` (class-name
  matching, ``nn.init.normal_``/``zeros_``), ``torch.full((batch_size,), real_label,
  dtype=real_cpu.dtype)``, ``label.fill_``, the two-phase D/G update with ``BCELoss`` and
  ``Adam(betas=(beta1, 0.999))``, the printed log line and the per-epoch ``state_dict`` checkpoints.

SNLI (torchtext) becomes a synthetic batch stream whose label is readable from the first premise
token; LSUN/CIFAR images become random 64x64 tensors; sizes and epochs are shrunk.
Each script is a function of the module it is handed as ``torch``; the parity tests run the same
text on PyTorch where it is installed, from the same NumPy-drawn weights and (for DCGAN) the same
NumPy-drawn noise, handed to the script through a ``torch`` stand-in whose ``randn`` draws from
NumPy (the two libraries' random streams differ).
"""
import glob
import io
import os
import types
from contextlib import redirect_stdout

import numpy as np
import pytest

import lucid
import lucid.nn  # noqa: F401
import lucid.optim  # noqa: F401
import lucid.utils.data  # noqa: F401


def _reference_torch():
    """PyTorch for the parity runs, on one thread (tiny models; its thread pool only contends)."""
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    return torch


def _set_from_numpy(torch, model, seed, scale=0.3):
    """Every parameter drawn by NumPy (same start on both libraries), in ``named_parameters`` order."""
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for _, p in model.named_parameters():
            p.copy_(torch.tensor(rng.normal(scale=scale, size=tuple(p.shape)), dtype=p.dtype))


# ------------------------------------------------------------------------------------- legacy/snli
def snli_model(torch):
    """``snli/model.py`` as written, for the ``torch`` handed in."""
    nn = torch.nn

    class Bottle(nn.Module):

        def forward(self, input):
            if len(input.size()) <= 2:
                return super(Bottle, self).forward(input)
            size = input.size()[:2]
            out = super(Bottle, self).forward(input.view(size[0]*size[1], -1))
            return out.view(size[0], size[1], -1)

    class Linear(Bottle, nn.Linear):
        pass

    class Encoder(nn.Module):

        def __init__(self, config):
            super(Encoder, self).__init__()
            self.config = config
            input_size = config.d_proj if config.projection else config.d_embed
            dropout = 0 if config.n_layers == 1 else config.dp_ratio
            self.rnn = nn.LSTM(input_size=input_size, hidden_size=config.d_hidden,
                            num_layers=config.n_layers, dropout=dropout,
                            bidirectional=config.birnn)

        def forward(self, inputs):
            batch_size = inputs.size()[1]
            state_shape = self.config.n_cells, batch_size, self.config.d_hidden
            h0 = c0 =  inputs.new_zeros(state_shape)
            outputs, (ht, ct) = self.rnn(inputs, (h0, c0))
            return ht[-1] if not self.config.birnn else ht[-2:].transpose(0, 1).contiguous().view(batch_size, -1)

    class SNLIClassifier(nn.Module):

        def __init__(self, config):
            super(SNLIClassifier, self).__init__()
            self.config = config
            self.embed = nn.Embedding(config.n_embed, config.d_embed)
            self.projection = Linear(config.d_embed, config.d_proj)
            self.encoder = Encoder(config)
            self.dropout = nn.Dropout(p=config.dp_ratio)
            self.relu = nn.ReLU()
            seq_in_size = 2*config.d_hidden
            if self.config.birnn:
                seq_in_size *= 2
            lin_config = [seq_in_size]*2
            self.out = nn.Sequential(
                Linear(*lin_config),
                self.relu,
                self.dropout,
                Linear(*lin_config),
                self.relu,
                self.dropout,
                Linear(*lin_config),
                self.relu,
                self.dropout,
                Linear(seq_in_size, config.d_out))

        def forward(self, batch):
            prem_embed = self.embed(batch.premise)
            hypo_embed = self.embed(batch.hypothesis)
            if self.config.fix_emb:
                prem_embed =prem_embed.detach()
                hypo_embed =hypo_embed.detach()
            if self.config.projection:
                prem_embed = self.relu(self.projection(prem_embed))
                hypo_embed = self.relu(self.projection(hypo_embed))
            premise = self.encoder(prem_embed)
            hypothesis = self.encoder(hypo_embed)
            scores = self.out(torch.cat([premise, hypothesis], 1))
            return scores

    return types.SimpleNamespace(Bottle=Bottle, Linear=Linear, Encoder=Encoder,
                                 SNLIClassifier=SNLIClassifier)


def _snli_config(dp_ratio=0.2, birnn=True):
    """``util.get_args`` defaults, shrunk; ``train.py`` sets ``n_embed``/``d_out``/``n_cells``."""
    return types.SimpleNamespace(d_embed=8, d_proj=6, projection=True, d_hidden=8, n_layers=1,
                                 birnn=birnn, dp_ratio=dp_ratio, fix_emb=False, lr=0.01)


def _snli_batches(torch, n_batches, seed, vocab=12, batch_size=16):
    """torchtext's BucketIterator batches: ``(T, B)`` int64 premise/hypothesis; the label
    (entailment / neutral / contradiction) is ``premise[0] % 3``: the backward direction's last state
    has read that word last."""
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(n_batches):
        p = rng.integers(0, vocab, size=(5, batch_size))
        h = rng.integers(0, vocab, size=(4, batch_size))
        y = p[0] % 3
        batches.append(types.SimpleNamespace(premise=torch.tensor(p), hypothesis=torch.tensor(h),
                                             label=torch.tensor(y), batch_size=batch_size))
    return batches


def snli_train(torch, model_py, epochs, train_iter, save_path, seed=0, dp_ratio=0.2):
    """``train.py``'s loop (torchtext and ``.cuda`` left out; ``.item()`` for ``.data[0]``)."""
    nn, O = torch.nn, torch.optim
    config = _snli_config(dp_ratio)
    config.n_embed = 12
    config.d_out = 3
    config.n_cells = config.n_layers
    if config.birnn:
        config.n_cells *= 2
    torch.manual_seed(seed)
    model = model_py.SNLIClassifier(config)
    _set_from_numpy(torch, model, seed)

    criterion = nn.CrossEntropyLoss()
    opt = O.Adam(model.parameters(), lr=config.lr)
    iterations, losses, accs = 0, [], []
    for epoch in range(epochs):
        n_correct, n_total = 0, 0
        for batch_idx, batch in enumerate(train_iter):
            model.train(); opt.zero_grad()
            iterations += 1
            answer = model(batch)
            n_correct += (torch.max(answer, 1)[1].view(batch.label.size()) == batch.label).sum().item()
            n_total += batch.batch_size
            train_acc = 100. * n_correct/n_total
            loss = criterion(answer, batch.label)
            loss.backward(); opt.step()
            losses.append(loss.item())
            if iterations % 10 == 0:
                snapshot_prefix = os.path.join(save_path, 'snapshot')
                snapshot_path = snapshot_prefix + '_acc_{:.4f}_loss_{:.6f}_iter_{}_model.pt'.format(train_acc, loss.item(), iterations)
                # train.py saves the whole module (torch.save(model, snapshot_path)); Lucid refuses
                # that on purpose (README "Differences from PyTorch"): the state_dict it is
                torch.save(model.state_dict(), snapshot_path)
                for f in glob.glob(snapshot_prefix + '*'):
                    if f != snapshot_path:
                        os.remove(f)
        accs.append(train_acc)
    return model, losses, accs


def test_snli_bottle_linear_and_encoder():
    m = snli_model(lucid)
    lin = m.Linear(6, 4)
    x = lucid.randn(5, 3, 6)
    # Bottle: a 3-d input is the 2-d Linear on each (t, b) position.
    ref = x.numpy() @ lin.weight.detach().numpy().T + lin.bias.detach().numpy()
    assert lin(x).shape == (5, 3, 4)
    np.testing.assert_allclose(lin(x).detach().numpy(), ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(lin(x[0]).detach().numpy(), ref[0], rtol=1e-5, atol=1e-6)

    config = _snli_config()
    config.n_cells = 2
    enc = m.Encoder(config)
    inputs = lucid.randn(7, 3, 6)
    out = enc(inputs)
    assert out.shape == (3, 2 * config.d_hidden)
    # The forward direction's last state is the output at t = T-1, the backward one's at t = 0.
    full, _ = enc.rnn(inputs)
    H = config.d_hidden
    np.testing.assert_allclose(out.detach().numpy()[:, :H], full.detach().numpy()[-1, :, :H], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out.detach().numpy()[:, H:], full.detach().numpy()[0, :, H:], rtol=1e-5, atol=1e-6)


def test_snli_training_and_snapshot(tmp_path):
    m = snli_model(lucid)
    batches = _snli_batches(lucid, 10, seed=1)
    model, losses, accs = snli_train(lucid, m, 8, batches, str(tmp_path))
    assert losses[0] > 0.9  # about log(3) at the start
    assert np.mean(losses[-10:]) < 0.5 * np.mean(losses[:10])
    assert accs[-1] > 80.0
    # Only the latest snapshot is kept; it loads back into a fresh model computing the same.
    snaps = glob.glob(str(tmp_path / "snapshot*"))
    assert len(snaps) == 1 and "_iter_80_" in snaps[0]
    config = model.config
    loaded = m.SNLIClassifier(config)
    loaded.load_state_dict(lucid.load(snaps[0]))
    with pytest.raises(TypeError, match="can't save an object of type SNLIClassifier"):
        lucid.save(model, str(tmp_path / "whole.pt"))
    model.eval(); loaded.eval()
    b = batches[0]
    np.testing.assert_array_equal(loaded(b).detach().numpy(), model(b).detach().numpy())
    # One ReLU / Dropout module in three places of the Sequential: ten entries, six children
    # (``children`` lists a shared module once, as PyTorch's does).
    assert len(model.out) == 10 and model.out[1] is model.out[4] is model.out[7] is model.relu
    assert len(list(model.out.children())) == 6
    assert sum(p.numel() for p in model.parameters()) == (
        12 * 8 + (8 * 6 + 6) + 2 * (4 * 8 * (6 + 8) + 2 * 4 * 8) + 3 * (32 * 32 + 32) + (32 * 3 + 3))


def test_snli_torch_parity(tmp_path):
    torch = _reference_torch()
    (tmp_path / "l").mkdir(); (tmp_path / "t").mkdir()
    _, lo, _ = snli_train(lucid, snli_model(lucid), 2, _snli_batches(lucid, 5, seed=3),
                          str(tmp_path / "l"), dp_ratio=0.0)
    _, to, _ = snli_train(torch, snli_model(torch), 2, _snli_batches(torch, 5, seed=3),
                          str(tmp_path / "t"), dp_ratio=0.0)
    np.testing.assert_allclose(lo, to, rtol=2e-4, atol=2e-5)
    config = _snli_config()
    config.n_embed, config.d_out, config.n_cells = 12, 3, 2
    assert repr(snli_model(lucid).SNLIClassifier(config)) == repr(snli_model(torch).SNLIClassifier(config))


# --------------------------------------------------------------------------------- dcgan/main.py
class _NumpyRandn:
    """The ``torch`` the script sees: everything of the real module, but ``randn`` draws from NumPy,
    so that PyTorch and Lucid get the same noise for the parity run."""

    def __init__(self, torch, seed):
        self._torch, self._rng = torch, np.random.default_rng(seed)

    def __getattr__(self, name):
        return getattr(self._torch, name)

    def randn(self, *size, device=None):
        return self._torch.tensor(self._rng.standard_normal(size), dtype=self._torch.float32, device=device)


def dcgan_main(torch, dataloader, outf, niter=1, nz=8, ngf=4, ndf=4, manualSeed=999):
    """``dcgan/main.py`` from ``torch.manual_seed`` on (argparse, torchvision and ``save_image``
    left out; ``opt`` fields are the shrunk defaults); returns the printed lines and the nets."""
    nn, optim = torch.nn, torch.optim
    lines = []
    print = lines.append  # noqa: A001  (the script prints; the test reads the lines)
    torch.manual_seed(manualSeed)
    device = torch.device("cpu")
    ngpu = 1
    nc = 3
    lr, beta1 = 0.0002, 0.5

    # custom weights initialization called on netG and netD
    def weights_init(m):
        classname = m.__class__.__name__
        if classname.find('Conv') != -1:
            torch.nn.init.normal_(m.weight, 0.0, 0.02)
        elif classname.find('BatchNorm') != -1:
            torch.nn.init.normal_(m.weight, 1.0, 0.02)
            torch.nn.init.zeros_(m.bias)

    class Generator(nn.Module):
        def __init__(self, ngpu):
            super(Generator, self).__init__()
            self.ngpu = ngpu
            self.main = nn.Sequential(
                # input is Z, going into a convolution
                nn.ConvTranspose2d(     nz, ngf * 8, 4, 1, 0, bias=False),
                nn.BatchNorm2d(ngf * 8),
                nn.ReLU(True),
                # state size. (ngf*8) x 4 x 4
                nn.ConvTranspose2d(ngf * 8, ngf * 4, 4, 2, 1, bias=False),
                nn.BatchNorm2d(ngf * 4),
                nn.ReLU(True),
                # state size. (ngf*4) x 8 x 8
                nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False),
                nn.BatchNorm2d(ngf * 2),
                nn.ReLU(True),
                # state size. (ngf*2) x 16 x 16
                nn.ConvTranspose2d(ngf * 2,     ngf, 4, 2, 1, bias=False),
                nn.BatchNorm2d(ngf),
                nn.ReLU(True),
                # state size. (ngf) x 32 x 32
                nn.ConvTranspose2d(    ngf,      nc, 4, 2, 1, bias=False),
                nn.Tanh()
                # state size. (nc) x 64 x 64
            )

        def forward(self, input):
            if input.is_cuda and self.ngpu > 1:
                output = nn.parallel.data_parallel(self.main, input, range(self.ngpu))
            else:
                output = self.main(input)
            return output

    netG = Generator(ngpu).to(device)
    netG.apply(weights_init)
    print(netG)

    class Discriminator(nn.Module):
        def __init__(self, ngpu):
            super(Discriminator, self).__init__()
            self.ngpu = ngpu
            self.main = nn.Sequential(
                # input is (nc) x 64 x 64
                nn.Conv2d(nc, ndf, 4, 2, 1, bias=False),
                nn.LeakyReLU(0.2, inplace=True),
                # state size. (ndf) x 32 x 32
                nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False),
                nn.BatchNorm2d(ndf * 2),
                nn.LeakyReLU(0.2, inplace=True),
                # state size. (ndf*2) x 16 x 16
                nn.Conv2d(ndf * 2, ndf * 4, 4, 2, 1, bias=False),
                nn.BatchNorm2d(ndf * 4),
                nn.LeakyReLU(0.2, inplace=True),
                # state size. (ndf*4) x 8 x 8
                nn.Conv2d(ndf * 4, ndf * 8, 4, 2, 1, bias=False),
                nn.BatchNorm2d(ndf * 8),
                nn.LeakyReLU(0.2, inplace=True),
                # state size. (ndf*8) x 4 x 4
                nn.Conv2d(ndf * 8, 1, 4, 1, 0, bias=False),
                nn.Sigmoid()
            )

        def forward(self, input):
            if input.is_cuda and self.ngpu > 1:
                output = nn.parallel.data_parallel(self.main, input, range(self.ngpu))
            else:
                output = self.main(input)

            return output.view(-1, 1).squeeze(1)

    netD = Discriminator(ngpu).to(device)
    netD.apply(weights_init)
    print(netD)
    initial = ({k: v.detach().numpy().copy() for k, v in netG.state_dict().items()},
               {k: v.detach().numpy().copy() for k, v in netD.state_dict().items()})
    if isinstance(torch, _NumpyRandn):  # the parity run: the same NumPy-drawn weights on both libraries
        _set_from_numpy(torch, netG, 1, scale=0.05)
        _set_from_numpy(torch, netD, 2, scale=0.05)

    criterion = nn.BCELoss()

    fixed_noise = torch.randn(4, nz, 1, 1, device=device)
    real_label = 1
    fake_label = 0

    # setup optimizer
    optimizerD = optim.Adam(netD.parameters(), lr=lr, betas=(beta1, 0.999))
    optimizerG = optim.Adam(netG.parameters(), lr=lr, betas=(beta1, 0.999))

    stats = []
    for epoch in range(niter):
        for i, data in enumerate(dataloader, 0):
            ############################
            # (1) Update D network: maximize log(D(x)) + log(1 - D(G(z)))
            ###########################
            # train with real
            netD.zero_grad()
            real_cpu = data[0].to(device)
            batch_size = real_cpu.size(0)
            label = torch.full((batch_size,), real_label,
                               dtype=real_cpu.dtype, device=device)

            output = netD(real_cpu)
            errD_real = criterion(output, label)
            errD_real.backward()
            D_x = output.mean().item()
            if i == 0:
                first_real = (output.detach().numpy().copy(), errD_real.item())

            # train with fake
            noise = torch.randn(batch_size, nz, 1, 1, device=device)
            fake = netG(noise)
            label.fill_(fake_label)
            output = netD(fake.detach())
            errD_fake = criterion(output, label)
            errD_fake.backward()
            D_G_z1 = output.mean().item()
            errD = errD_real + errD_fake
            optimizerD.step()

            ############################
            # (2) Update G network: maximize log(D(G(z)))
            ###########################
            netG.zero_grad()
            label.fill_(real_label)  # fake labels are real for generator cost
            output = netD(fake)
            errG = criterion(output, label)
            errG.backward()
            D_G_z2 = output.mean().item()
            optimizerG.step()

            print('[%d/%d][%d/%d] Loss_D: %.4f Loss_G: %.4f D(x): %.4f D(G(z)): %.4f / %.4f'
                  % (epoch, niter, i, len(dataloader),
                     errD.item(), errG.item(), D_x, D_G_z1, D_G_z2))
            stats.append((errD.item(), errG.item(), D_x, D_G_z1, D_G_z2))
            if i % 100 == 0:
                fake = netG(fixed_noise)
                fixed_fake = fake.detach().numpy().copy()

        # do checkpointing
        torch.save(netG.state_dict(), '%s/netG_epoch_%d.pth' % (outf, epoch))
        torch.save(netD.state_dict(), '%s/netD_epoch_%d.pth' % (outf, epoch))
    return types.SimpleNamespace(lines=lines, netG=netG, netD=netD, stats=stats, initial=initial,
                                 first_real=first_real, fixed_fake=fixed_fake)


def _images(torch, n, seed):
    """LSUN/CIFAR's stand-in: 64x64 RGB in [-1, 1] (the ``Normalize((0.5,)*3, (0.5,)*3)`` range)."""
    x = np.random.default_rng(seed).uniform(-1, 1, size=(n, 3, 64, 64)).astype(np.float32)
    ds = torch.utils.data.TensorDataset(torch.tensor(x), torch.zeros(n, dtype=torch.int64))
    return torch.utils.data.DataLoader(ds, batch_size=4, shuffle=False)


def test_dcgan_main(tmp_path):
    out = dcgan_main(lucid, _images(lucid, 12, 0), str(tmp_path), niter=2)
    # weights_init: conv weights N(0, 0.02), BatchNorm weights N(1, 0.02), biases zero.
    g0, d0 = out.initial
    conv_w = np.concatenate([v.ravel() for k, v in g0.items() if k.endswith("weight") and v.ndim == 4])
    bn_w = np.concatenate([v.ravel() for k, v in d0.items() if k.endswith("weight") and v.ndim == 1])
    assert abs(conv_w.std() - 0.02) < 0.002 and abs(conv_w.mean()) < 0.002
    assert abs(bn_w.mean() - 1.0) < 0.02 and bn_w.std() < 0.05
    assert all((v == 0).all() for k, v in g0.items() if k.endswith("bias"))
    # The log: one line per batch, as main.py formats it.
    log = [line for line in out.lines if isinstance(line, str) and line.startswith("[")]
    assert [line[:10] for line in log] == ["[0/2][0/3]", "[0/2][1/3]", "[0/2][2/3]",
                                          "[1/2][0/3]", "[1/2][1/3]", "[1/2][2/3]"]
    errD, errG, D_x, D_G_z1, D_G_z2 = out.stats[0]
    assert log[0].endswith("D(x): %.4f D(G(z)): %.4f / %.4f" % (D_x, D_G_z1, D_G_z2))
    # BCELoss against labels of ones is -mean(log D(x)); the sigmoid outputs are (B,) after squeeze.
    d_real, err_real = out.first_real
    assert d_real.shape == (4,)
    assert abs(err_real - float(-np.log(d_real.astype(np.float64)).mean())) < 1e-5
    assert errD > err_real and 0 < D_x < 1
    assert out.fixed_fake.shape == (4, 3, 64, 64) and np.abs(out.fixed_fake).max() <= 1.0
    # Checkpoints per epoch, loadable into fresh networks.
    files = sorted(os.listdir(tmp_path))
    assert files == ["netD_epoch_0.pth", "netD_epoch_1.pth", "netG_epoch_0.pth", "netG_epoch_1.pth"]
    sd = lucid.load(str(tmp_path / "netG_epoch_1.pth"))
    for k, v in out.netG.state_dict().items():
        np.testing.assert_array_equal(sd[k].numpy(), v.numpy())


def test_dcgan_main_torch_parity(tmp_path):
    torch = _reference_torch()
    (tmp_path / "l").mkdir(); (tmp_path / "t").mkdir()
    lo = dcgan_main(_NumpyRandn(lucid, 5), _images(lucid, 8, 1), str(tmp_path / "l"))
    to = dcgan_main(_NumpyRandn(torch, 5), _images(torch, 8, 1), str(tmp_path / "t"))
    np.testing.assert_allclose(np.array(lo.stats), np.array(to.stats), rtol=1e-4, atol=1e-5)
    assert [l for l in lo.lines if isinstance(l, str)] == [l for l in to.lines if isinstance(l, str)]
    np.testing.assert_allclose(lo.fixed_fake, to.fixed_fake, rtol=1e-4, atol=1e-5)
    # print(netG) / print(netD): the module trees print as PyTorch's do.
    assert [repr(m) for m in lo.lines[:2]] == [repr(m) for m in to.lines[:2]]
