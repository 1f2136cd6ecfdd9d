"""pytorch/examples scripts run on Lucid, image models: ``vae/main.py``, ``super_resolution``
(``model.py`` + the training step of ``main.py``), ``fast_neural_style`` (``transformer_net.py``,
``utils.gram_matrix``/``normalize_batch`` and the content + style loss of ``neural_style.py``,
a small random VGG-like network in place of the pretrained VGG16), ``mnist/main.py``,
``siamese_network/main.py`` (a small CNN in place of torchvision's resnet18, synthetic pairs) and
``mnist_forward_forward/main.py``. MNIST and COCO are replaced by random tensors of their shapes
and dtypes; epochs are cut to a few steps.
"""
import collections
import random

import numpy as np
import pytest

import lucid as torch
import lucid.nn as nn
import lucid.nn.functional as F
import lucid.optim as optim
from lucid.optim.lr_scheduler import StepLR
from lucid.utils.data import DataLoader, Dataset, TensorDataset


def _needs_cpu_default(why="the script pins device='cpu' / builds its data with NumPy (torch.from_numpy), "
                           "as the example does; with another default device PyTorch mixes devices too"):
    """These scripts are host-bound as written: the strict stand-in passes run the others."""
    if torch.get_default_device().type != "cpu":
        pytest.skip(why + "; the default device is " + str(torch.get_default_device()))



def _mnist(n, seed):
    """Random 'digits' of MNIST's shape whose class is readable from them, normalized as the
    examples' transform does (``Normalize((0.1307,), (0.3081,))``)."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 10, (n,), generator=g)
    x = torch.rand(n, 1, 28, 28, generator=g) * 0.3
    x[torch.arange(n), 0, 2 * y + 4, 4:24] = 1.0  # a bar whose height is the class
    return (x - 0.1307) / 0.3081, y


# ---------------------------------------------------------------------------------- vae/main.py
class VAE(nn.Module):
    def __init__(self):
        super(VAE, self).__init__()
        self.fc1 = nn.Linear(784, 400)
        self.fc21 = nn.Linear(400, 20)
        self.fc22 = nn.Linear(400, 20)
        self.fc3 = nn.Linear(20, 400)
        self.fc4 = nn.Linear(400, 784)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(std)
        return mu + eps * std

    def decode(self, z):
        h3 = F.relu(self.fc3(z))
        return torch.sigmoid(self.fc4(h3))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, 784))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


def vae_loss_function(recon_x, x, mu, logvar):
    BCE = F.binary_cross_entropy(recon_x, x.view(-1, 784), reduction='sum')
    KLD = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return BCE + KLD


def test_vae_main():
    _needs_cpu_default()
    torch.manual_seed(1)
    device = torch.device("cpu")
    x, y = _mnist(64, 0)
    data01 = (x * 0.3081 + 0.1307).clamp(0, 1)  # ToTensor() images in [0, 1]
    train_loader = DataLoader(TensorDataset(data01, y), batch_size=16, shuffle=True)
    model = VAE().to(device)
    optimizer = optim.Adam(model.parameters(), lr=1e-3)
    epoch_losses = []
    for epoch in range(1, 4):
        model.train()
        train_loss = 0
        for batch_idx, (data, _) in enumerate(train_loader):
            data = data.to(device)
            optimizer.zero_grad()
            recon_batch, mu, logvar = model(data)
            loss = vae_loss_function(recon_batch, data, mu, logvar)
            loss.backward()
            train_loss += loss.item()
            optimizer.step()
        epoch_losses.append(train_loss / len(train_loader.dataset))
    assert epoch_losses[-1] < epoch_losses[0] * 0.9, epoch_losses
    model.eval()
    with torch.no_grad():
        data = data01[:16]
        recon_batch, mu, logvar = model(data)
        n = min(data.size(0), 8)
        comparison = torch.cat([data[:n], recon_batch.view(16, 1, 28, 28)[:n]])
        assert comparison.shape == (16, 1, 28, 28)
        sample = torch.randn(64, 20).to(device)
        sample = model.decode(sample).cpu()
        assert sample.view(64, 1, 28, 28).shape == (64, 1, 28, 28)
        assert 0 < sample.min().item() and sample.max().item() < 1

    # the loss against its closed form (NumPy), and its gradient against finite differences
    rng = np.random.RandomState(0)
    r, d = rng.uniform(0.05, 0.95, (3, 784)), rng.uniform(0, 1, (3, 784))
    m, lv = rng.randn(3, 20), rng.randn(3, 20) * 0.3
    want = (-(d * np.log(r) + (1 - d) * np.log(1 - r)).sum()
            - 0.5 * np.sum(1 + lv - m ** 2 - np.exp(lv)))
    mu_t, lv_t = torch.tensor(m, requires_grad=True), torch.tensor(lv, requires_grad=True)
    got = vae_loss_function(torch.tensor(r), torch.tensor(d), mu_t, lv_t)
    np.testing.assert_allclose(got.item(), want, rtol=1e-12)
    got.backward()
    np.testing.assert_allclose(mu_t.grad.numpy(), m, rtol=1e-12)  # dKLD/dmu = mu
    np.testing.assert_allclose(lv_t.grad.numpy(), -0.5 * (1 - np.exp(lv)), rtol=1e-12)
    # reparameterize: z = mu + eps * std carries d z / d mu = 1, d z / d logvar = eps * std / 2
    torch.manual_seed(3)
    z = model.reparameterize(mu_t, lv_t)
    torch.manual_seed(3)
    eps = torch.randn_like(lv_t)
    gm, gl = torch.autograd.grad(z.sum(), [mu_t, lv_t])
    np.testing.assert_allclose(gm.numpy(), np.ones((3, 20)))
    np.testing.assert_allclose(gl.numpy(), (eps * torch.exp(0.5 * lv_t.detach()) / 2).numpy(), rtol=1e-12)


# ----------------------------------------------------------------------------- super_resolution
class SuperResolutionNet(nn.Module):
    def __init__(self, upscale_factor):
        super(SuperResolutionNet, self).__init__()
        init = nn.init
        self.relu = nn.ReLU()
        self.conv1 = nn.Conv2d(1, 64, (5, 5), (1, 1), (2, 2))
        self.conv2 = nn.Conv2d(64, 64, (3, 3), (1, 1), (1, 1))
        self.conv3 = nn.Conv2d(64, 32, (3, 3), (1, 1), (1, 1))
        self.conv4 = nn.Conv2d(32, upscale_factor ** 2, (3, 3), (1, 1), (1, 1))
        self.pixel_shuffle = nn.PixelShuffle(upscale_factor)
        init.orthogonal_(self.conv1.weight, init.calculate_gain('relu'))
        init.orthogonal_(self.conv2.weight, init.calculate_gain('relu'))
        init.orthogonal_(self.conv3.weight, init.calculate_gain('relu'))
        init.orthogonal_(self.conv4.weight)

    def forward(self, x):
        x = self.relu(self.conv1(x))
        x = self.relu(self.conv2(x))
        x = self.relu(self.conv3(x))
        x = self.pixel_shuffle(self.conv4(x))
        return x


def test_super_resolution():
    torch.manual_seed(123)
    model = SuperResolutionNet(upscale_factor=3)
    # orthogonal init: the flattened weight has orthonormal rows or columns, scaled by the gain
    for conv, gain in [(model.conv1, 2 ** 0.5), (model.conv2, 2 ** 0.5), (model.conv4, 1.0)]:
        w = conv.weight.detach().reshape(conv.weight.shape[0], -1).double().numpy()
        gram = w.T @ w if w.shape[0] >= w.shape[1] else w @ w.T
        np.testing.assert_allclose(gram, gain ** 2 * np.eye(len(gram)), atol=1e-5)
    # PixelShuffle against its definition: out[c, h*r+i, w*r+j] = in[c*r*r + i*r + j, h, w]
    t = torch.arange(2 * 9 * 2 * 2.).reshape(1, 18, 2, 2)
    ps = nn.PixelShuffle(3)(t)
    want = t.numpy().reshape(1, 2, 3, 3, 2, 2).transpose(0, 1, 4, 2, 5, 3).reshape(1, 2, 6, 6)
    np.testing.assert_array_equal(ps.numpy(), want)
    np.testing.assert_array_equal(nn.PixelUnshuffle(3)(ps).numpy(), t.numpy())

    # main.py: (low-res input, high-res target) pairs, Adam, MSE, PSNR
    g = torch.Generator().manual_seed(0)
    target = F.avg_pool2d(torch.rand(8, 1, 24, 24, generator=g), 3, 1, 1)  # smooth images
    inputs = F.avg_pool2d(target, 3)                                          # 8x8 low-res
    training_data_loader = DataLoader(TensorDataset(inputs, target), batch_size=4, shuffle=True)
    criterion = nn.MSELoss()
    optimizer = optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for epoch in range(1, 6):
        epoch_loss = 0
        for iteration, batch in enumerate(training_data_loader, 1):
            input, tgt = batch[0], batch[1]
            optimizer.zero_grad()
            loss = criterion(model(input), tgt)
            epoch_loss += loss.item()
            loss.backward()
            optimizer.step()
        losses.append(epoch_loss / len(training_data_loader))
    assert losses[-1] < losses[0] / 2, losses
    avg_psnr = 0
    with torch.no_grad():
        for batch in training_data_loader:
            prediction = model(batch[0])
            mse = criterion(prediction, batch[1])
            psnr = 10 * np.log10(1 / mse.item())
            avg_psnr += psnr
    assert avg_psnr / len(training_data_loader) > 10 * np.log10(1 / losses[0])

    torch_ = pytest.importorskip("torch")
    tmodel = torch_.nn.Sequential(
        torch_.nn.Conv2d(1, 64, 5, 1, 2), torch_.nn.ReLU(), torch_.nn.Conv2d(64, 64, 3, 1, 1),
        torch_.nn.ReLU(), torch_.nn.Conv2d(64, 32, 3, 1, 1), torch_.nn.ReLU(),
        torch_.nn.Conv2d(32, 9, 3, 1, 1), torch_.nn.PixelShuffle(3))
    sd = {k: v.numpy() for k, v in model.state_dict().items()}
    tmodel.load_state_dict({f"{i}.{n}": torch_.from_numpy(sd[f"conv{j}.{n}"].copy())
                            for i, j in [(0, 1), (2, 2), (4, 3), (6, 4)] for n in ("weight", "bias")})
    with torch.no_grad():
        np.testing.assert_allclose(model(inputs).numpy(), tmodel(torch_.from_numpy(inputs.numpy())).detach().numpy(),
                                   rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------------------ fast_neural_style
class ConvLayer(torch.nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride):
        super(ConvLayer, self).__init__()
        reflection_padding = kernel_size // 2
        self.reflection_pad = torch.nn.ReflectionPad2d(reflection_padding)
        self.conv2d = torch.nn.Conv2d(in_channels, out_channels, kernel_size, stride)

    def forward(self, x):
        return self.conv2d(self.reflection_pad(x))


class ResidualBlock(torch.nn.Module):
    def __init__(self, channels):
        super(ResidualBlock, self).__init__()
        self.conv1 = ConvLayer(channels, channels, kernel_size=3, stride=1)
        self.in1 = torch.nn.InstanceNorm2d(channels, affine=True)
        self.conv2 = ConvLayer(channels, channels, kernel_size=3, stride=1)
        self.in2 = torch.nn.InstanceNorm2d(channels, affine=True)
        self.relu = torch.nn.ReLU()

    def forward(self, x):
        residual = x
        out = self.relu(self.in1(self.conv1(x)))
        out = self.in2(self.conv2(out))
        return out + residual


class UpsampleConvLayer(torch.nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, upsample=None):
        super(UpsampleConvLayer, self).__init__()
        self.upsample = upsample
        if upsample:
            self.upsample_layer = torch.nn.Upsample(mode='nearest', scale_factor=upsample)
        reflection_padding = kernel_size // 2
        self.reflection_pad = torch.nn.ReflectionPad2d(reflection_padding)
        self.conv2d = torch.nn.Conv2d(in_channels, out_channels, kernel_size, stride)

    def forward(self, x):
        x_in = x
        if self.upsample:
            x_in = self.upsample_layer(x_in)
        return self.conv2d(self.reflection_pad(x_in))


class TransformerNet(torch.nn.Module):
    def __init__(self):
        super(TransformerNet, self).__init__()
        self.conv1 = ConvLayer(3, 32, kernel_size=9, stride=1)
        self.in1 = torch.nn.InstanceNorm2d(32, affine=True)
        self.conv2 = ConvLayer(32, 64, kernel_size=3, stride=2)
        self.in2 = torch.nn.InstanceNorm2d(64, affine=True)
        self.conv3 = ConvLayer(64, 128, kernel_size=3, stride=2)
        self.in3 = torch.nn.InstanceNorm2d(128, affine=True)
        self.res1 = ResidualBlock(128)
        self.res2 = ResidualBlock(128)
        self.res3 = ResidualBlock(128)
        self.res4 = ResidualBlock(128)
        self.res5 = ResidualBlock(128)
        self.deconv1 = UpsampleConvLayer(128, 64, kernel_size=3, stride=1, upsample=2)
        self.in4 = torch.nn.InstanceNorm2d(64, affine=True)
        self.deconv2 = UpsampleConvLayer(64, 32, kernel_size=3, stride=1, upsample=2)
        self.in5 = torch.nn.InstanceNorm2d(32, affine=True)
        self.deconv3 = ConvLayer(32, 3, kernel_size=9, stride=1)
        self.relu = torch.nn.ReLU()

    def forward(self, X):
        y = self.relu(self.in1(self.conv1(X)))
        y = self.relu(self.in2(self.conv2(y)))
        y = self.relu(self.in3(self.conv3(y)))
        y = self.res5(self.res4(self.res3(self.res2(self.res1(y)))))
        y = self.relu(self.in4(self.deconv1(y)))
        y = self.relu(self.in5(self.deconv2(y)))
        return self.deconv3(y)


class SmallVgg(torch.nn.Module):
    """vgg.py's Vgg16 (slices ending at relu1_2, relu2_2, relu3_3, relu4_3), with few channels and
    random weights instead of the pretrained ones."""

    def __init__(self, requires_grad=False):
        super(SmallVgg, self).__init__()
        c = torch.nn.Conv2d
        self.slice1 = torch.nn.Sequential(c(3, 8, 3, padding=1), torch.nn.ReLU(inplace=True))
        self.slice2 = torch.nn.Sequential(torch.nn.MaxPool2d(2, 2), c(8, 8, 3, padding=1), torch.nn.ReLU(inplace=True))
        self.slice3 = torch.nn.Sequential(torch.nn.MaxPool2d(2, 2), c(8, 16, 3, padding=1), torch.nn.ReLU(inplace=True))
        self.slice4 = torch.nn.Sequential(torch.nn.MaxPool2d(2, 2), c(16, 16, 3, padding=1), torch.nn.ReLU(inplace=True))
        if not requires_grad:
            for param in self.parameters():
                param.requires_grad = False

    def forward(self, X):
        h = self.slice1(X)
        h_relu1_2 = h
        h = self.slice2(h)
        h_relu2_2 = h
        h = self.slice3(h)
        h_relu3_3 = h
        h = self.slice4(h)
        h_relu4_3 = h
        vgg_outputs = collections.namedtuple("VggOutputs", ['relu1_2', 'relu2_2', 'relu3_3', 'relu4_3'])
        return vgg_outputs(h_relu1_2, h_relu2_2, h_relu3_3, h_relu4_3)


def gram_matrix(y):
    (b, ch, h, w) = y.size()
    features = y.view(b, ch, w * h)
    features_t = features.transpose(1, 2)
    gram = features.bmm(features_t) / (ch * h * w)
    return gram


def normalize_batch(batch):
    mean = batch.new_tensor([0.485, 0.456, 0.406]).view(-1, 1, 1)
    std = batch.new_tensor([0.229, 0.224, 0.225]).view(-1, 1, 1)
    batch = batch.div_(255.0)
    return (batch - mean) / std


def test_repeat_is_a_writeable_copy():
    s = torch.rand(1, 3, 2)
    r = s.repeat(2, 1, 1)
    r.div_(2.0)  # PyTorch: a fresh tensor, writeable, the input unchanged
    assert torch.equal(r[0], s[0] / 2) and torch.equal(r[1], s[0] / 2)


def test_fast_neural_style(tmp_path):
    _needs_cpu_default()
    import re
    torch.manual_seed(42)
    np.random.seed(42)
    # gram_matrix and normalize_batch against NumPy
    y = torch.rand(2, 3, 4, 5, dtype=torch.float64)
    f = y.numpy().reshape(2, 3, 20)
    np.testing.assert_allclose(gram_matrix(y).numpy(), f @ f.transpose(0, 2, 1) / 60, rtol=1e-12)
    b = torch.rand(2, 3, 4, 4) * 255
    want = (b.numpy() / 255 - np.array([0.485, 0.456, 0.406]).reshape(3, 1, 1)) / np.array(
        [0.229, 0.224, 0.225]).reshape(3, 1, 1)
    np.testing.assert_allclose(normalize_batch(b.clone()).numpy(), want, rtol=1e-5, atol=1e-5)

    transformer = TransformerNet()
    assert transformer(torch.rand(1, 3, 16, 16)).shape == (1, 3, 16, 16)
    optimizer = optim.Adam(transformer.parameters(), 1e-3)
    mse_loss = torch.nn.MSELoss()
    vgg = SmallVgg(requires_grad=False)
    assert all(not p.requires_grad for p in vgg.parameters())
    content_weight, style_weight, batch_size = 1e5, 1e10, 2
    style = torch.rand(1, 3, 16, 16) * 255
    # the example's ``style.repeat(batch_size, 1, 1, 1).to(device)``; Lucid's repeat along a leading
    # dim returns a read-only view (see test_repeat_is_a_writeable_copy), which div_ refuses
    style = style.repeat(batch_size, 1, 1, 1).clone()
    features_style = vgg(normalize_batch(style))
    gram_style = [gram_matrix(y) for y in features_style]
    assert [tuple(g.shape) for g in gram_style] == [(2, 8, 8), (2, 8, 8), (2, 16, 16), (2, 16, 16)]
    x = torch.rand(batch_size, 3, 16, 16) * 255
    totals = []
    for step in range(4):
        n_batch = len(x)
        optimizer.zero_grad()
        y = transformer(x)
        y = normalize_batch(y)
        xn = normalize_batch(x.clone())
        features_y = vgg(y)
        features_x = vgg(xn)
        content_loss = content_weight * mse_loss(features_y.relu2_2, features_x.relu2_2)
        style_loss = 0.
        for ft_y, gm_s in zip(features_y, gram_style):
            gm_y = gram_matrix(ft_y)
            style_loss += mse_loss(gm_y, gm_s[:n_batch, :, :])
        style_loss *= style_weight
        total_loss = content_loss + style_loss
        total_loss.backward()
        optimizer.step()
        totals.append(total_loss.item())
    assert totals[-1] < totals[0], totals
    assert all(p.grad is None for p in vgg.parameters())

    # neural_style.py's save + stylize: drop the InstanceNorm running stats keys, reload, run
    transformer.eval().cpu()
    save_model_path = tmp_path / "model.pth"
    torch.save(transformer.state_dict(), save_model_path)
    with torch.no_grad():
        style_model = TransformerNet()
        state_dict = torch.load(save_model_path)
        for k in list(state_dict.keys()):
            if re.search(r'in\d+\.running_(mean|var)$', k):
                del state_dict[k]
        style_model.load_state_dict(state_dict)
        content_image = torch.rand(1, 3, 16, 16) * 255
        output = style_model(content_image).cpu()
        np.testing.assert_array_equal(output.numpy(), transformer(content_image).numpy())
    img = output[0].clone().clamp(0, 255).numpy()
    img = img.transpose(1, 2, 0).astype("uint8")
    assert img.shape == (16, 16, 3) and img.dtype == np.uint8


# -------------------------------------------------------------------------------- mnist/main.py
class MnistNet(nn.Module):
    def __init__(self):
        super(MnistNet, self).__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.relu(x)
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.dropout2(x)
        x = self.fc2(x)
        output = F.log_softmax(x, dim=1)
        return output


def _mnist_test(model, device, test_loader):
    model.eval()
    test_loss = 0
    correct = 0
    with torch.no_grad():
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction='sum').item()
            pred = output.argmax(dim=1, keepdim=True)
            correct += pred.eq(target.view_as(pred)).sum().item()
    return test_loss / len(test_loader.dataset), correct


def test_mnist_main(tmp_path):
    _needs_cpu_default()
    torch.manual_seed(1)
    use_accel = torch.accelerator.is_available()
    device = torch.accelerator.current_accelerator() if use_accel else torch.device("cpu")
    train_kwargs = {'batch_size': 16}
    test_kwargs = {'batch_size': 32}
    x, y = _mnist(48, 0)
    train_loader = DataLoader(TensorDataset(x, y), shuffle=True, **train_kwargs)
    test_loader = DataLoader(TensorDataset(x, y), **test_kwargs)
    model = MnistNet().to(device)
    optimizer = optim.Adadelta(model.parameters(), lr=1.0)
    scheduler = StepLR(optimizer, step_size=1, gamma=0.7)
    loss0, _ = _mnist_test(model, device, test_loader)
    lrs = []
    for epoch in range(1, 3):
        model.train()
        for batch_idx, (data, target) in enumerate(train_loader):
            data, target = data.to(device), target.to(device)
            optimizer.zero_grad()
            output = model(data)
            loss = F.nll_loss(output, target)
            loss.backward()
            optimizer.step()
        lrs.append(scheduler.get_last_lr()[0])
        scheduler.step()
    assert lrs == [1.0, 0.7] and abs(optimizer.param_groups[0]["lr"] - 0.49) < 1e-12
    loss1, correct = _mnist_test(model, device, test_loader)
    assert loss1 < loss0, (loss0, loss1)
    torch.save(model.state_dict(), tmp_path / "mnist_cnn.pt")
    model2 = MnistNet()
    model2.load_state_dict(torch.load(tmp_path / "mnist_cnn.pt"))
    assert _mnist_test(model2, device, test_loader) == (loss1, correct)
    # nll_loss(log_softmax) against NumPy
    z = torch.randn(5, 10, dtype=torch.float64)
    t = torch.tensor([0, 3, 9, 2, 2])
    zz = z.numpy()
    lsm = zz - np.log(np.exp(zz).sum(1, keepdims=True))
    np.testing.assert_allclose(F.nll_loss(F.log_softmax(z, dim=1), t).item(),
                               -lsm[np.arange(5), t.numpy()].mean(), rtol=1e-12)


# ----------------------------------------------------------------------- siamese_network/main.py
class SiameseNetwork(nn.Module):
    def __init__(self):
        super(SiameseNetwork, self).__init__()
        # a small stand-in for torchvision's resnet18, ending with avgpool + fc as resnet does
        self.resnet = nn.Sequential(collections.OrderedDict([
            ("conv1", nn.Conv2d(1, 8, kernel_size=(7, 7), stride=(2, 2), padding=(3, 3), bias=False)),
            ("bn1", nn.BatchNorm2d(8)), ("relu", nn.ReLU(inplace=True)),
            ("maxpool", nn.MaxPool2d(kernel_size=3, stride=2, padding=1)),
            ("layer1", nn.Conv2d(8, 16, 3, padding=1)),
            ("avgpool", nn.AdaptiveAvgPool2d((1, 1))), ("fc", nn.Linear(16, 1000))]))
        self.fc_in_features = self.resnet.fc.in_features
        self.resnet = torch.nn.Sequential(*(list(self.resnet.children())[:-1]))
        self.fc = nn.Sequential(
            nn.Linear(self.fc_in_features * 2, 256),
            nn.ReLU(inplace=True),
            nn.Linear(256, 1),
        )
        self.sigmoid = nn.Sigmoid()
        self.resnet.apply(self.init_weights)
        self.fc.apply(self.init_weights)

    def init_weights(self, m):
        if isinstance(m, nn.Linear):
            torch.nn.init.xavier_uniform(m.weight)
            m.bias.data.fill_(0.01)

    def forward_once(self, x):
        output = self.resnet(x)
        output = output.view(output.size()[0], -1)
        return output

    def forward(self, input1, input2):
        output1 = self.forward_once(input1)
        output2 = self.forward_once(input2)
        output = torch.cat((output1, output2), 1)
        output = self.fc(output)
        output = self.sigmoid(output)
        return output


class APP_MATCHER(Dataset):
    def __init__(self, n, seed):
        super(APP_MATCHER, self).__init__()
        x, targets = _mnist(n, seed)
        self.data = (x[:, 0] * 80 + 40).clamp(0, 255).to(torch.uint8).unsqueeze(1).clone()
        self.targets = targets
        np_arr = np.array(self.targets.clone())
        self.grouped_examples = {}
        for i in range(0, 10):
            self.grouped_examples[i] = np.where((np_arr == i))[0]

    def __len__(self):
        return self.data.shape[0]

    def __getitem__(self, index):
        selected_class = random.randint(0, 9)
        random_index_1 = random.randint(0, self.grouped_examples[selected_class].shape[0] - 1)
        index_1 = self.grouped_examples[selected_class][random_index_1]
        image_1 = self.data[index_1].clone().float()
        if index % 2 == 0:
            random_index_2 = random.randint(0, self.grouped_examples[selected_class].shape[0] - 1)
            while random_index_2 == random_index_1:
                random_index_2 = random.randint(0, self.grouped_examples[selected_class].shape[0] - 1)
            index_2 = self.grouped_examples[selected_class][random_index_2]
            image_2 = self.data[index_2].clone().float()
            target = torch.tensor(1, dtype=torch.float)
        else:
            other_selected_class = random.randint(0, 9)
            while other_selected_class == selected_class:
                other_selected_class = random.randint(0, 9)
            random_index_2 = random.randint(0, self.grouped_examples[other_selected_class].shape[0] - 1)
            index_2 = self.grouped_examples[other_selected_class][random_index_2]
            image_2 = self.data[index_2].clone().float()
            target = torch.tensor(0, dtype=torch.float)
        return image_1, image_2, target


def test_siamese_network(tmp_path):
    _needs_cpu_default()
    random.seed(0)
    torch.manual_seed(1)
    device = torch.device("cpu")
    train_dataset = APP_MATCHER(200, 0)  # every class has at least two examples
    assert all(len(v) >= 2 for v in train_dataset.grouped_examples.values())
    train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=16)
    img1, img2, tgt = next(iter(train_loader))
    assert img1.shape == (16, 1, 28, 28) and img1.dtype == torch.float32
    assert tgt.dtype == torch.float32 and tgt.tolist() == [1.0, 0.0] * 8
    model = SiameseNetwork().to(device)
    lin = model.fc[0]
    assert torch.all(lin.bias == 0.01) and lin.weight.abs().max().item() <= (6 / (32 + 256)) ** 0.5
    optimizer = optim.Adadelta(model.parameters(), lr=1.0)
    scheduler = StepLR(optimizer, step_size=1, gamma=0.7)
    criterion = nn.BCELoss()
    fixed = [next(iter(train_loader)) for _ in range(2)]

    def evaluate():
        model.eval()
        test_loss, correct = 0, 0
        with torch.no_grad():
            for (images_1, images_2, targets) in fixed:
                outputs = model(images_1, images_2).squeeze()
                test_loss += criterion(outputs, targets).sum().item()
                pred = torch.where(outputs > 0.5, 1, 0)
                correct += pred.eq(targets.view_as(pred)).sum().item()
        return test_loss, correct

    loss0, _ = evaluate()
    for epoch in range(1, 3):
        model.train()
        for batch_idx, (images_1, images_2, targets) in enumerate(train_loader):
            optimizer.zero_grad()
            outputs = model(images_1, images_2).squeeze()
            loss = criterion(outputs, targets)
            loss.backward()
            optimizer.step()
            if batch_idx == 5:
                break
        scheduler.step()
    loss1, correct = evaluate()
    assert loss1 < loss0 and 0 <= correct <= 32, (loss0, loss1)
    torch.save(model.state_dict(), tmp_path / "siamese_network.pt")
    assert set(torch.load(tmp_path / "siamese_network.pt")) == set(model.state_dict())


# ------------------------------------------------------------------ mnist_forward_forward/main.py
class _Args:
    lr, threshold, epochs, log_interval = 0.03, 2.0, 30, 10


args = _Args()
device = torch.device("cpu")


def get_y_neg(y):
    y_neg = y.clone()
    for idx, y_samp in enumerate(y):
        allowed_indices = list(range(10))
        allowed_indices.remove(y_samp.item())
        y_neg[idx] = torch.tensor(allowed_indices)[
            torch.randint(len(allowed_indices), size=(1,))
        ].item()
    return y_neg.to(device)


def overlay_y_on_x(x, y, classes=10):
    x_ = x.clone()
    x_[:, :classes] *= 0.0
    x_[range(x.shape[0]), y] = x.max()
    return x_


class FFNet(torch.nn.Module):
    def __init__(self, dims):
        super().__init__()
        self.layers = []
        for d in range(len(dims) - 1):
            self.layers = self.layers + [FFLayer(dims[d], dims[d + 1]).to(device)]

    def predict(self, x):
        goodness_per_label = []
        for label in range(10):
            h = overlay_y_on_x(x, label)
            goodness = []
            for layer in self.layers:
                h = layer(h)
                goodness = goodness + [h.pow(2).mean(1)]
            goodness_per_label += [sum(goodness).unsqueeze(1)]
        goodness_per_label = torch.cat(goodness_per_label, 1)
        return goodness_per_label.argmax(1)

    def train(self, x_pos, x_neg):
        h_pos, h_neg = x_pos, x_neg
        for i, layer in enumerate(self.layers):
            h_pos, h_neg = layer.train(h_pos, h_neg)


class FFLayer(nn.Linear):
    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__(in_features, out_features, bias, device, dtype)
        self.relu = torch.nn.ReLU()
        self.opt = optim.Adam(self.parameters(), lr=args.lr)
        self.threshold = args.threshold
        self.num_epochs = args.epochs
        self.losses = []

    def forward(self, x):
        x_direction = x / (x.norm(2, 1, keepdim=True) + 1e-4)
        return self.relu(torch.mm(x_direction, self.weight.T) + self.bias.unsqueeze(0))

    def train(self, x_pos, x_neg):
        for i in range(self.num_epochs):
            g_pos = self.forward(x_pos).pow(2).mean(1)
            g_neg = self.forward(x_neg).pow(2).mean(1)
            loss = torch.log1p(
                torch.exp(
                    torch.cat([-g_pos + self.threshold, g_neg - self.threshold])
                )
            ).mean()
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            self.losses.append(loss.item())
        return self.forward(x_pos).detach(), self.forward(x_neg).detach()


def test_mnist_forward_forward(tmp_path):
    _needs_cpu_default()
    torch.manual_seed(1)
    x, y = _mnist(64, 2)
    x = torch.flatten(x, 1)  # the transform's Lambda(lambda x: torch.flatten(x))
    x_pos = overlay_y_on_x(x, y)
    assert torch.equal(x_pos[torch.arange(64), y], x.max().expand(64))
    assert (x_pos[:, :10] != 0).sum().item() == 64
    y_neg = get_y_neg(y)
    assert (y_neg != y).all() and 0 <= y_neg.min().item() and y_neg.max().item() <= 9
    x_neg = overlay_y_on_x(x, y_neg)
    net = FFNet([784, 50, 50])
    assert len(net.state_dict()) == 0  # the layers live in a plain list, as in the example
    net.train(x_pos, x_neg)
    for layer in net.layers:
        assert layer.losses[-1] < layer.losses[0], layer.losses
    pred = net.predict(x)
    assert pred.shape == (64,) and pred.dtype == torch.int64
    err = 1.0 - net.predict(x).eq(y).float().mean().item()
    assert 0.0 <= err < 0.9
    torch.save(net.state_dict(), tmp_path / "mnist_ff.pt")
    assert torch.load(tmp_path / "mnist_ff.pt") == collections.OrderedDict()
