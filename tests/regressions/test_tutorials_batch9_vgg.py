"""PyTorch's "Pretraining VGG from scratch" run on Lucid (``import lucid as torch``): the VGG
configuration tables (model "A_lrn": ``nn.LocalResponseNorm`` after the first convolution),
``make_feature_extractor``, ``Model_vgg`` with its fully-convolutional head (``Dropout2d``,
``AdaptiveAvgPool2d``, ``flatten``) and its ``@torch.no_grad()`` ``_init_weights`` applied through
``Module.apply`` (xavier on the first and last layers, ``normal_(std=0.1)`` between, zero biases),
the top-k ``accuracy``, gradient accumulation over ``accum_step`` batches with ``clip_grad_norm_``
and ``zero_grad(set_to_none=True)``, losses summed as detached CPU tensors, the interleaved
evaluation on a ``val_iter`` that restarts at ``StopIteration``, and ``ReduceLROnPlateau('max')``
stepped on the top-5 accuracy (a one-element tensor).

CIFAR100 through albumentations becomes a small ``Dataset`` of random float32 HWC images (the
page's ``__getitem__`` transposes them to CHW NumPy arrays, which the ``DataLoader`` collates);
the channel counts, image size (32), classes (10), batch and accumulation sizes are shrunk, and the
head's 7x7 convolution becomes 1x1 (the 32-pixel input leaves a 1x1 map); ``num_workers=4`` /
``prefetch_factor=2`` become 0 / None. The parity test runs the same text on PyTorch where
installed, from the same NumPy-drawn weights, without dropout and shuffling.
"""
import io
from contextlib import redirect_stdout

import numpy as np
import pytest

import lucid
import lucid.nn  # noqa: F401
import lucid.optim  # noqa: F401
import lucid.optim.lr_scheduler  # noqa: F401
import lucid.utils.data  # noqa: F401


def _reference_torch():
    """PyTorch for the parity runs, on one thread: these models are tiny, and PyTorch's thread pool
    only contends with the other processes on a shared machine (ten times slower there)."""
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    return torch


def pretraining_vgg(torch, epoch=2, seed=0, shuffle=True, dropout=True, n_train=96, n_val=32):
    nn, optim = torch.nn, torch.optim
    device = 'cuda' if torch.cuda.is_available() else 'cpu'
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)

    num_classes = 10
    batch_size = 8
    lr = 1e-2
    momentum = 0.9
    weight_decay = 5e-4
    clip = None
    update_count = int(32 / batch_size)
    accum_step = int(32 / batch_size)
    eval_step = 2 * accum_step
    xavier_count = 4
    last_xavier = -8
    except_xavier = None

    class Custom_Cifar(torch.utils.data.Dataset):
        """Random HWC float32 images whose class brightens one of ten stripes (CIFAR100's stand-in)."""

        def __init__(self, n, seed, train=True):
            r = np.random.default_rng(seed)
            self.targets = r.integers(0, num_classes, n).tolist()
            self.data = r.normal(scale=0.5, size=(n, 32, 32, 3)).astype(np.float32)
            for i, c in enumerate(self.targets):
                self.data[i, 3 * c:3 * c + 3, :, :] += 2.0
            self.transform = self.target_transform = None
            self.val = not train

        def __len__(self):
            return len(self.targets)

        def __getitem__(self, index: int):
            img, target = self.data[index], self.targets[index]
            img = np.array(img, dtype=np.float32)
            if self.target_transform is not None:
                target = self.target_transform(target)
            img = img.transpose((2, 0, 1))
            return img, target

    Config_channels = {"A_lrn": [4, "LRN", "M", 8, "M", 8, 8, "M", 16, 16, "M", 16, 16, "M"]}
    Config_kernel = {"A_lrn": [3, 2, 2, 3, 2, 3, 3, 2, 3, 3, 2, 3, 3, 2]}

    def make_feature_extractor(cfg_c, cfg_k):
        feature_extract = []
        in_channels = 3
        i = 1
        for out_channels, kernel in zip(cfg_c, cfg_k):
            if out_channels == "M":
                feature_extract += [nn.MaxPool2d(kernel, 2)]
            elif out_channels == "LRN":
                feature_extract += [nn.LocalResponseNorm(5, k=2), nn.ReLU()]
            elif out_channels == 1:
                feature_extract += [nn.Conv2d(in_channels, out_channels, kernel, stride=1), nn.ReLU()]
            else:
                feature_extract += [nn.Conv2d(in_channels, out_channels, kernel, stride=1, padding=1), nn.ReLU()]
            if isinstance(out_channels, int):
                in_channels = out_channels
            i += 1
        return nn.Sequential(*feature_extract)

    init_log = []

    class Model_vgg(nn.Module):
        def __init__(self, version, num_classes):
            conv_5_out_dim = 16
            conv_1_by_1_1_outchannel = 32
            conv_1_by_1_2_outchannel = 32
            self.num_classes = num_classes
            self.linear_out = 32
            self.xavier_count = xavier_count
            self.last_xavier = last_xavier
            self.except_xavier = except_xavier
            super().__init__()
            self.feature_extractor = make_feature_extractor(Config_channels[version], Config_kernel[version])
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.output_layer = nn.Sequential(
                nn.Conv2d(conv_5_out_dim, conv_1_by_1_1_outchannel, 1),
                nn.ReLU(),
                nn.Dropout2d(),
                nn.Conv2d(conv_1_by_1_1_outchannel, conv_1_by_1_2_outchannel, 1),
                nn.ReLU(),
                nn.Dropout2d(),
                nn.Conv2d(conv_1_by_1_2_outchannel, num_classes, 1)
            )
            self.apply(self._init_weights)

        def forward(self, x):
            x = self.feature_extractor(x)
            x = self.output_layer(x)
            x = self.avgpool(x)
            x = torch.flatten(x, start_dim=1)
            return x

        @torch.no_grad()
        def _init_weights(self, m):
            if isinstance(m, nn.Conv2d):
                if self.last_xavier > 0 and (self.except_xavier is None or self.last_xavier != self.except_xavier):
                    init_log.append('xavier')
                    nn.init.xavier_uniform_(m.weight)
                elif self.xavier_count > 0:
                    init_log.append('xavier')
                    nn.init.xavier_uniform_(m.weight)
                    self.xavier_count -= 1
                else:
                    std = 0.1
                    init_log.append('normal')
                    torch.nn.init.normal_(m.weight, std=std)
                self.last_xavier += 1
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    def accuracy(output, target, topk=(1,)):
        """Computes the precision@k for the specified values of k"""
        maxk = max(topk)
        batch_size = target.size(0)
        _, pred = output.topk(maxk, 1, True, True)
        pred = pred.t()
        correct = pred.eq(target.view(1, -1).expand_as(pred))
        res = []
        for k in topk:
            correct_k = correct[:k].reshape(-1).float().sum(0, keepdim=True)
            res.append(correct_k)
        return res

    model = Model_vgg("A_lrn", num_classes)
    out = dict(init_log=list(init_log), init_std={n: float(p.detach().std()) for n, p in model.named_parameters()
                                                  if n.endswith("weight")},
               biases_zero=all(float(p.detach().abs().sum()) == 0 for n, p in model.named_parameters()
                               if n.endswith("bias")))
    with torch.no_grad():  # the same start on both libraries
        for _, p in sorted(model.named_parameters()):
            p.copy_(torch.tensor(rng.normal(scale=0.3, size=tuple(p.shape)), dtype=p.dtype))
    if not dropout:
        for m in model.modules():
            if isinstance(m, nn.Dropout2d):
                m.p = 0.0
    criterion = nn.CrossEntropyLoss()
    optimizer = optim.SGD(model.parameters(), lr=lr, weight_decay=weight_decay, momentum=momentum)
    scheduler = optim.lr_scheduler.ReduceLROnPlateau(optimizer, 'max', patience=0, threshold=1e-3, eps=1e-5)

    train_data = Custom_Cifar(n_train, seed)
    val_data = Custom_Cifar(n_val, seed + 1, train=False)
    train_loader = torch.utils.data.DataLoader(train_data, batch_size=batch_size, shuffle=shuffle, num_workers=0,
                                               pin_memory=True, prefetch_factor=None, drop_last=True)
    val_loader = torch.utils.data.DataLoader(val_data, batch_size=batch_size, shuffle=shuffle, num_workers=0,
                                             pin_memory=True, prefetch_factor=None, drop_last=True)
    model = model.to(device)
    grad_clip = 1.0
    out.update(update_losses=[], val_losses=[], lrs=[], accs=[], batch_acc=None)

    printed = io.StringIO()
    with redirect_stdout(printed):
        for e in range(epoch):
            print(f'Training Epoch : {e}')
            total_loss = 0
            val_iter = iter(val_loader)
            train_acc = [0, 0]
            train_num = 0
            total_acc = [0, 0]
            count = 0
            for i, data in enumerate(train_loader):
                model.train()
                img, label = data
                img, label = img.to(device, non_blocking=True), label.to(device, non_blocking=True)
                output = model(img)
                loss = criterion(output, label) / accum_step
                temp_output, temp_label = output.detach().to('cpu'), label.detach().to('cpu')
                temp_acc = accuracy(temp_output, temp_label, (1, 5))
                if out["batch_acc"] is None:
                    out["batch_acc"] = (temp_output.numpy().copy(), temp_label.numpy().copy(),
                                        [a.numpy().copy() for a in temp_acc])
                train_acc = [train_acc[0] + temp_acc[0], train_acc[1] + temp_acc[1]]
                train_num += batch_size
                temp_output, temp_label, temp_acc = None, None, None
                loss.backward()
                total_loss += loss.detach().to('cpu')
                img, label = None, None
                torch.cuda.empty_cache()
                if i > 0 and i % update_count == 0:
                    print(f'Training steps : {i}  parameter update loss :{total_loss} ')
                    out["update_losses"].append(float(total_loss))
                    if grad_clip is not None:
                        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
                    if total_loss < 7.0:
                        grad_clip = clip
                    if i % eval_step != 0:
                        total_loss = 0
                    output, loss = None, None
                    torch.cuda.empty_cache()
                if i > 0 and i % eval_step == 0:
                    temp_loss = total_loss
                    total_loss = 0
                    val_loss = 0
                    torch.cuda.empty_cache()
                    for j in range(update_count):
                        loss = None
                        try:
                            img, label = next(val_iter)
                        except StopIteration:
                            val_iter = iter(val_loader)
                            img, label = next(val_iter)
                        with torch.no_grad():
                            model.eval()
                            img, label = img.to(device, non_blocking=True), label.to(device, non_blocking=True)
                            output = model(img)
                            temp_output, temp_label = output.detach().to('cpu'), label.detach().to('cpu')
                            temp_acc = accuracy(temp_output, temp_label, (1, 5))
                            total_acc = [total_acc[0] + temp_acc[0], total_acc[1] + temp_acc[1]]
                            count += batch_size
                            loss = criterion(output, label) / accum_step
                            val_loss += loss.detach().to('cpu')
                            torch.cuda.empty_cache()
                            img, label, output, loss = None, None, None, None
                        torch.cuda.empty_cache()
                    if abs(val_loss - temp_loss) > 0.03:
                        grad_clip = clip
                        best_val_loss = val_loss  # noqa: F841  (the page's)
                    out["val_losses"].append(float(val_loss))
                    val_loss = None
                img, label, output = None, None, None
            top_1_acc, top_5_acc = 100 * total_acc[0] / count, 100 * total_acc[1] / count
            top_1_train, top_5_train = 100 * train_acc[0] / train_num, 100 * train_acc[1] / train_num
            out["accs"].append((float(top_1_acc), float(top_5_acc), float(top_1_train), float(top_5_train), count))
            scheduler.step(top_5_acc)
            out["lrs"].append(optimizer.param_groups[0]["lr"])
    out["printed"] = printed.getvalue().splitlines()
    with torch.no_grad():
        model.eval()
        x = torch.tensor(np.stack([val_data[i][0] for i in range(4)])).to(device)
        out["features"] = model.feature_extractor[:3](x).cpu().numpy().copy()
        out["x"] = x.cpu().numpy().copy()
        conv1 = model.feature_extractor[0]
        out["conv1"] = (conv1.weight.cpu().numpy().copy(), conv1.bias.cpu().numpy().copy())
    return out


def _lrn(a, size=5, alpha=1e-4, beta=0.75, k=2.0):
    """LocalResponseNorm across channels: a / (k + alpha/size * sum of squares in the window)^beta."""
    c = a.shape[1]
    sq = np.pad(a ** 2, ((0, 0), (size // 2, (size - 1) // 2), (0, 0), (0, 0)))
    div = np.stack([sq[:, i:i + size].sum(1) for i in range(c)], 1)
    return a / (k + alpha / size * div) ** beta


def _conv(x, w, b):
    n, _, h, wd = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, w.shape[0], h, wd))
    for i in range(h):
        for j in range(wd):
            out[:, :, i, j] = np.einsum("ncuv,ocuv->no", xp[:, :, i:i + 3, j:j + 3], w)
    return out + b[None, :, None, None]


def test_pretraining_vgg():
    out = pretraining_vgg(lucid)
    # _init_weights over 8 + 3 convolutions: 4 front xavier, then normal(0.1) while last_xavier
    # (from -8, +1 per convolution) is not positive, then xavier for the last two
    assert out["init_log"] == ["xavier"] * 4 + ["normal"] * 5 + ["xavier"] * 2 and out["biases_zero"]
    assert 0.07 < out["init_std"]["feature_extractor.13.weight"] < 0.13
    # accuracy: top-1/top-5 counts against a NumPy ranking
    logits, labels, (top1, top5) = out["batch_acc"]
    rank = np.argsort(-logits, 1)
    assert top1.shape == (1,) and top1[0] == (rank[:, 0] == labels).sum()
    assert top5[0] == sum(labels[b] in rank[b, :5] for b in range(len(labels)))
    # conv -> ReLU -> the first LocalResponseNorm against its closed form
    w, b = out["conv1"]
    reference = _lrn(np.maximum(_conv(out["x"].astype(np.float64), w, b), 0))
    np.testing.assert_allclose(out["features"], reference, rtol=1e-4,
                               atol=1e-5)
    # training: accumulated updates every 4 batches (batches 4 and 8 of 12), evaluation every 8
    assert len(out["update_losses"]) == 2 * 2 and len(out["val_losses"]) == 2 * 1
    assert out["printed"][0] == "Training Epoch : 0" and out["printed"][1].startswith("Training steps : 4  ")
    for top1_v, top5_v, top1_t, top5_t, count in out["accs"]:
        assert count == 32 and 0 <= top1_v <= top5_v <= 100 and 0 <= top1_t <= top5_t <= 100
    # ReduceLROnPlateau('max', patience=0): the rate falls by 10x whenever top-5 stops rising
    top5s = [a[1] for a in out["accs"]]
    expected_lr = [1e-2, 1e-2 if top5s[1] > top5s[0] * (1 + 1e-3) else 1e-3]
    np.testing.assert_allclose(out["lrs"], expected_lr, rtol=1e-12)


def test_pretraining_vgg_torch_parity():
    torch = _reference_torch()
    if lucid.get_default_device().type != "cpu":
        pytest.skip("PyTorch runs on the CPU")
    lo = pretraining_vgg(lucid, shuffle=False, dropout=False)
    to = pretraining_vgg(torch, shuffle=False, dropout=False)
    assert lo["init_log"] == to["init_log"]
    np.testing.assert_allclose(lo["update_losses"], to["update_losses"], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(lo["val_losses"], to["val_losses"], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(np.array(lo["accs"]), np.array(to["accs"]), rtol=1e-6)
    np.testing.assert_allclose(lo["lrs"], to["lrs"], rtol=1e-12)
    np.testing.assert_allclose(lo["features"], to["features"], rtol=1e-3, atol=5e-4)  # after 4 float32 updates
    assert [line.split(":")[0] for line in lo["printed"]] == [line.split(":")[0] for line in to["printed"]]
