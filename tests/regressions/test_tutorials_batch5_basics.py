"""PyTorch's basics pages run on Lucid (``import lucid as torch``): "Datasets & DataLoaders"
(a custom image Dataset over an annotations file, ``DataLoader`` batches), "Transforms"
(``ToTensor`` and a ``Lambda`` one-hot target transform), "Automatic Differentiation with
torch.autograd" (the quickstart page with its Jacobian-product section), "Save and Load the
Model" and "Introduction to PyTorch Tensors" (creation, math, broadcasting, in-place, copying,
shapes, the NumPy bridge). Without torchvision or pandas: images are ``.npy`` files listed in a
CSV read by the ``csv`` module, and ``ToTensor``/``Lambda`` are the few lines torchvision's are.
A VGG-like small net stands in for ``models.vgg16``.

Each page is a function of the module it is handed as ``torch``; the parity tests run the same
text on PyTorch where it is installed and compare what the page prints.
"""
import csv
import math
import os

import numpy as np
import pytest

import lucid
import lucid.nn  # noqa: F401
import lucid.serialization  # noqa: F401
import lucid.nn.functional  # noqa: F401
import lucid.utils.data  # noqa: F401


def _data_mod(torch):
    from importlib import import_module
    return import_module(torch.__name__ + ".utils.data")


def _needs_cpu_default(why):
    if lucid.get_default_device().type != "cpu":
        pytest.skip(why + "; the default device is " + str(lucid.get_default_device()))


# ------------------------------------------------------------- Datasets & DataLoaders, Transforms

labels_map = {0: "T-Shirt", 1: "Trouser", 2: "Pullover", 3: "Dress", 4: "Coat", 5: "Sandal", 6: "Shirt",
              7: "Sneaker", 8: "Bag", 9: "Ankle Boot"}


def _write_images(root, n=20):
    """A FashionMNIST-shaped folder: uint8 (1, 28, 28) images (as read_image returns them) + a CSV."""
    rng = np.random.default_rng(0)
    os.makedirs(os.path.join(root, "img"), exist_ok=True)
    with open(os.path.join(root, "labels.csv"), "w", newline="") as fh:
        w = csv.writer(fh)
        for i in range(n):
            name = f"img_{i}.npy"
            np.save(os.path.join(root, "img", name), rng.integers(0, 256, (1, 28, 28), dtype=np.uint8))
            w.writerow([name, i % 10])
    return os.path.join(root, "labels.csv"), os.path.join(root, "img")


def datasets_and_transforms(torch, root):
    Dataset, DataLoader = _data_mod(torch).Dataset, _data_mod(torch).DataLoader

    def read_image(path):  # torchvision.io.read_image: a uint8 CHW tensor
        return torch.from_numpy(np.load(path))

    class ToTensor:  # torchvision.transforms.ToTensor for a uint8 CHW tensor: float in [0, 1]
        def __call__(self, pic):
            return pic.to(torch.float32).div(255)

    class Lambda:  # torchvision.transforms.Lambda
        def __init__(self, lambd):
            self.lambd = lambd

        def __call__(self, img):
            return self.lambd(img)

    class CustomImageDataset(Dataset):
        def __init__(self, annotations_file, img_dir, transform=None, target_transform=None):
            with open(annotations_file) as fh:  # pd.read_csv(annotations_file) (no header)
                self.img_labels = [(r[0], int(r[1])) for r in csv.reader(fh)]
            self.img_dir = img_dir
            self.transform = transform
            self.target_transform = target_transform

        def __len__(self):
            return len(self.img_labels)

        def __getitem__(self, idx):
            img_path = os.path.join(self.img_dir, self.img_labels[idx][0])
            image = read_image(img_path)
            label = self.img_labels[idx][1]
            if self.transform:
                image = self.transform(image)
            if self.target_transform:
                label = self.target_transform(label)
            return image, label

    annotations, img_dir = _write_images(root)
    out = {}
    training_data = CustomImageDataset(annotations, img_dir)
    img, label = training_data[3]
    out["raw"] = (len(training_data), tuple(img.shape), str(img.dtype).split(".")[-1], label, labels_map[label])
    torch.manual_seed(0)
    sample_idx = torch.randint(len(training_data), size=(1,)).item()
    out["sample_idx_ok"] = isinstance(sample_idx, int) and 0 <= sample_idx < len(training_data)

    train_dataloader = DataLoader(training_data, batch_size=8, shuffle=True)
    train_features, train_labels = next(iter(train_dataloader))
    out["batch"] = (tuple(train_features.size()), tuple(train_labels.size()), str(train_labels.dtype).split(".")[-1])
    img = train_features[0].squeeze()
    out["squeezed"] = tuple(img.shape)
    out["epoch_labels"] = sorted(int(v) for _, y in train_dataloader for v in y)

    ds = CustomImageDataset(
        annotations, img_dir, transform=ToTensor(),
        target_transform=Lambda(lambda y: torch.zeros(10, dtype=torch.float).scatter_(0, torch.tensor(y), value=1)))
    x, y = ds[3]
    out["transformed"] = (str(x.dtype).split(".")[-1], float(x.min()) >= 0.0, float(x.max()) <= 1.0, y.tolist())
    out["pixels"] = np.asarray(x.cpu().numpy()).copy()
    loader = DataLoader(ds, batch_size=8)
    xb, yb = next(iter(loader))
    out["transformed_batch"] = (tuple(xb.shape), tuple(yb.shape), yb.sum(1).tolist(), yb.argmax(1).tolist())
    return out


def test_datasets_dataloaders_and_transforms(tmp_path):
    out = datasets_and_transforms(lucid, str(tmp_path))
    assert out["raw"] == (20, (1, 28, 28), "uint8", 3, "Dress")
    assert out["sample_idx_ok"]
    assert out["batch"] == ((8, 1, 28, 28), (8,), "int64")
    assert out["squeezed"] == (28, 28)
    assert out["epoch_labels"] == sorted(list(range(10)) * 2)  # shuffled, each sample once
    assert out["transformed"] == ("float32", True, True, [0.0, 0.0, 0.0, 1.0] + [0.0] * 6)
    raw = np.load(os.path.join(str(tmp_path), "img", "img_3.npy"))
    np.testing.assert_allclose(out["pixels"], raw / 255.0, rtol=1e-6)
    assert out["transformed_batch"] == ((8, 1, 28, 28), (8, 10), [1.0] * 8, list(range(8)))


def test_datasets_and_transforms_torch_parity(tmp_path):
    torch = pytest.importorskip("torch")
    lo = datasets_and_transforms(lucid, str(tmp_path / "l"))
    to = datasets_and_transforms(torch, str(tmp_path / "t"))
    for k in ("raw", "batch", "squeezed", "epoch_labels", "transformed", "transformed_batch"):
        assert lo[k] == to[k], k
    np.testing.assert_allclose(lo["pixels"], to["pixels"], rtol=1e-6)


def test_one_hot_target_transform_with_a_0d_index():  # a 0-d index broadcast over the input before (fixed)
    # The Transforms page, verbatim: PyTorch reads the 0-d index as one index, giving a one-hot.
    target_transform = lambda y: lucid.zeros(10, dtype=lucid.float).scatter_(0, lucid.tensor(y), value=1)  # noqa: E731
    assert target_transform(3).tolist() == [0.0, 0.0, 0.0, 1.0] + [0.0] * 6


# ------------------------------------------------------- Automatic Differentiation with torch.autograd

def autograd_quickstart(torch):
    out = {}
    x = torch.ones(5)  # input tensor
    y = torch.zeros(3)  # expected output
    w = torch.randn(5, 3, requires_grad=True)
    b = torch.randn(3, requires_grad=True)
    with torch.no_grad():  # same numbers on both libraries
        w.copy_(torch.tensor(np.random.default_rng(0).normal(size=(5, 3)), dtype=torch.float32))
        b.copy_(torch.tensor([0.5, -1.0, 0.25]))
    z = torch.matmul(x, w) + b
    loss = torch.nn.functional.binary_cross_entropy_with_logits(z, y)
    out["grad_fns"] = (z.grad_fn is not None, loss.grad_fn is not None, f"{z.grad_fn}".startswith("<AddBackward0"))
    out["loss"] = loss.item()
    out["z"] = z.detach().numpy().copy()
    loss.backward()
    out["w.grad"], out["b.grad"] = w.grad.numpy().copy(), b.grad.numpy().copy()

    z = torch.matmul(x, w) + b
    flags = [z.requires_grad]
    with torch.no_grad():
        z = torch.matmul(x, w) + b
    flags.append(z.requires_grad)
    z = torch.matmul(x, w) + b
    z_det = z.detach()
    flags.append(z_det.requires_grad)
    out["flags"] = flags

    # Optional reading: tensor gradients and Jacobian products
    inp = torch.eye(4, 5, requires_grad=True)
    out_ = (inp + 1).pow(2).t()
    out_.backward(torch.ones_like(out_), retain_graph=True)
    calls = [inp.grad.tolist()]
    out_.backward(torch.ones_like(out_), retain_graph=True)
    calls.append(inp.grad.tolist())
    inp.grad.zero_()
    out_.backward(torch.ones_like(out_), retain_graph=True)
    calls.append(inp.grad.tolist())
    out["calls"] = calls
    return out


def test_autograd_quickstart():
    out = autograd_quickstart(lucid)
    assert out["grad_fns"] == (True, True, True)
    assert out["flags"] == [True, False, False]
    # BCE-with-logits against target 0: loss = mean(softplus(z)), dloss/dz = sigmoid(z) / 3
    z = out["z"].astype(np.float64)
    w = np.random.default_rng(0).normal(size=(5, 3))
    np.testing.assert_allclose(z, w.sum(0) + [0.5, -1.0, 0.25], rtol=1e-5)
    assert out["loss"] == pytest.approx(np.log1p(np.exp(z)).mean(), rel=1e-5)
    dz = 1 / (1 + np.exp(-z)) / 3
    np.testing.assert_allclose(out["b.grad"], dz, rtol=1e-5)
    np.testing.assert_allclose(out["w.grad"], np.tile(dz, (5, 1)), rtol=1e-5)  # x is ones
    first = (2 * (np.eye(4, 5) + 1)).tolist()  # d/dinp sum((inp + 1)^2)
    assert out["calls"] == [first, (2 * np.array(first)).tolist(), first]  # accumulates, then zeroed


def test_autograd_quickstart_torch_parity():
    torch = pytest.importorskip("torch")
    lo, to = autograd_quickstart(lucid), autograd_quickstart(torch)
    for k in ("grad_fns", "flags", "calls"):
        assert lo[k] == to[k], k
    for k in ("loss", "z", "w.grad", "b.grad"):
        np.testing.assert_allclose(lo[k], to[k], rtol=1e-5, err_msg=k)


# ------------------------------------------------------------------------- Save and Load the Model

def _vgg_like(nn):
    """models.vgg16's layout, shrunk: features, adaptive pool, a dropout classifier."""
    return nn.Sequential(
        nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2, 2),
                      nn.Conv2d(4, 8, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2, 2)),
        nn.AdaptiveAvgPool2d((2, 2)), nn.Flatten(),
        nn.Sequential(nn.Linear(32, 16), nn.ReLU(True), nn.Dropout(), nn.Linear(16, 10)))


def test_save_and_load_the_model(tmp_path):
    torch, nn = lucid, lucid.nn
    model = _vgg_like(nn)
    torch.save(model.state_dict(), tmp_path / "model_weights.pth")

    x = torch.randn(2, 3, 16, 16)
    ref = model.eval()(x)
    model = _vgg_like(nn)  # untrained: different weights
    assert not torch.allclose(model.eval()(x), ref)
    res = model.load_state_dict(torch.load(tmp_path / "model_weights.pth", weights_only=True))
    assert list(res.missing_keys) == [] and list(res.unexpected_keys) == []
    model.eval()
    assert torch.equal(model(x), ref)
    assert not model.training and not model[3][2].training

    # "Saving and Loading Models with Shapes": torch.save(model) pickles the module. Lucid's
    # format stores no pickle (ARCHITECTURE.md, serialization.py: NOTE [Safe save]) and refuses
    # the module clearly, before touching the file; the state dict is the way round.
    with pytest.raises(TypeError, match="save: can't save an object of type Sequential"):
        torch.save(model, tmp_path / "model.pth")
    assert not (tmp_path / "model.pth").exists()


def test_save_and_load_the_model_torch_parity(tmp_path):
    _needs_cpu_default("copies weights between the libraries on the host")
    torch = pytest.importorskip("torch")
    tm = _vgg_like(torch.nn).eval()
    torch.save(tm.state_dict(), tmp_path / "model_weights.pth")  # PyTorch's checkpoint, read by Lucid
    lm = _vgg_like(lucid.nn)
    lm.load_state_dict(lucid.load(tmp_path / "model_weights.pth", weights_only=True))
    lm.eval()
    x = np.random.default_rng(0).normal(size=(2, 3, 16, 16)).astype(np.float32)
    np.testing.assert_allclose(lm(lucid.tensor(x)).detach().numpy(), tm(torch.tensor(x)).detach().numpy(),
                               rtol=1e-5, atol=1e-6)
    lucid.serialization.save_for_torch(lm.state_dict(), tmp_path / "back.pth")  # and back: PyTorch's weights_only load
    tm2 = _vgg_like(torch.nn).eval()
    tm2.load_state_dict(torch.load(tmp_path / "back.pth", weights_only=True))
    for (k, a), (k2, b) in zip(tm.state_dict().items(), tm2.state_dict().items()):
        assert k == k2 and torch.equal(a, b)


# -------------------------------------------------------------- Introduction to PyTorch Tensors

def tensors_intro(torch):
    """The page's cells in order (random operands fixed where it prints exact results)."""
    o = {}
    x = torch.empty(3, 4)
    o['type'] = type(x).__name__
    zeros = torch.zeros(2, 3)
    ones = torch.ones(2, 3)
    torch.manual_seed(1729)
    random = torch.rand(2, 3)
    torch.manual_seed(1729)
    r1 = torch.rand(2, 3)
    r2 = torch.rand(2, 3)
    torch.manual_seed(1729)
    r3 = torch.rand(2, 3)
    r4 = torch.rand(2, 3)
    o['factories'] = (zeros.sum().item(), ones.sum().item(), bool(((random >= 0) & (random < 1)).all()))
    o['repro'] = (torch.equal(r1, r3), torch.equal(r2, r4), torch.equal(r1, r2))
    x = torch.empty(2, 2, 3)
    e = torch.empty_like(x)
    z = torch.zeros_like(x)
    on = torch.ones_like(x)
    r = torch.rand_like(x)
    o['likes'] = [tuple(t.shape) for t in (e, z, on, r)]
    some_constants = torch.tensor([[3.1415926, 2.71828], [1.61803, 0.0072897]])
    some_integers = torch.tensor((2, 3, 5, 7, 11, 13, 17, 19))
    more_integers = torch.tensor(((2, 4, 6), [3, 6, 9]))
    o['literal'] = (str(some_constants.dtype), str(some_integers.dtype), more_integers.tolist())
    a = torch.ones((2, 3), dtype=torch.int16)
    b = torch.rand((2, 3), dtype=torch.float64) * 20.
    c = b.to(torch.int32)
    # (the device suffix dropped: the strict passes print one)
    o['dtypes'] = (str(a.dtype), str(b.dtype), str(c.dtype), repr(a).replace(f"device='{a.device}', ", ""))
    ones = torch.zeros(2, 2) + 1
    twos = torch.ones(2, 2) * 2
    threes = (torch.ones(2, 2) * 7 - 1) / 2
    fours = twos ** 2
    sqrt2s = twos ** 0.5
    o['math'] = [t.tolist() for t in (ones, twos, threes, fours, sqrt2s)]
    powers2 = twos ** torch.tensor([[1, 2], [3, 4]])
    fives = ones + fours
    dozens = threes * fours
    o['math2'] = [powers2.tolist(), str(powers2.dtype), fives.tolist(), dozens.tolist()]
    a = torch.rand(2, 3)
    b = torch.rand(3, 2)
    try:
        a * b
        o['mismatch'] = None
    except Exception as err:
        o['mismatch'] = isinstance(err, RuntimeError)
    rand = torch.rand(2, 4)
    doubled = rand * (torch.ones(1, 4) * 2)
    o['bcast0'] = torch.allclose(doubled, rand * 2)
    a = torch.ones(4, 3, 2)
    b = a * torch.rand(3, 2)
    c = a * torch.rand(3, 1)
    d = a * torch.rand(1, 2)
    o['bcast'] = [tuple(t.shape) for t in (b, c, d)] + [bool((c[:, :, 0] == c[:, :, 1]).all()),
                                                        bool((d[0] == d[3]).all())]
    errs = []
    for shape in ((4, 3), (2, 3), (0, )):
        try:
            a * torch.ones(*shape)
            errs.append(None)
        except Exception as err:
            errs.append(isinstance(err, RuntimeError))
    o['bcast_err'] = errs
    a = torch.tensor([[0.3, -0.7], [1.5, -2.1]])  # fixed numbers instead of rand()*2-1
    o['round'] = [torch.abs(a).tolist(), torch.ceil(a).tolist(), torch.floor(a).tolist(),
                  torch.clamp(a, -0.5, 0.5).tolist()]
    angles = torch.tensor([0, math.pi / 4, math.pi / 2, 3 * math.pi / 4])
    sines = torch.sin(angles)
    inverses = torch.asin(sines)
    o['trig'] = [sines.tolist(), inverses.tolist()]
    b = torch.tensor([1, 5, 11])
    c = torch.tensor([2, 7, 10])
    o['bits'] = torch.bitwise_xor(b, c).tolist()
    d = torch.tensor([[1., 2.], [3., 4.]])
    e = torch.ones(1, 2)
    o['eq'] = torch.eq(d, e).tolist()
    o['reduce'] = [torch.max(d).item(), torch.max(d).tolist(), torch.mean(d).item(), torch.std(d).item(),
                   torch.prod(d).item(),
                   torch.unique(torch.tensor([1, 2, 1, 2, 1, 2])).tolist()]
    v1 = torch.tensor([1., 0., 0.])
    v2 = torch.tensor([0., 1., 0.])
    m1 = torch.tensor([[1., 2.], [3., 4.]])
    m2 = torch.tensor([[3., 0.], [0., 3.]])
    m3 = torch.matmul(m1.T, m2 * 3)
    u, s, v = torch.svd(m3)
    o['lin'] = [torch.linalg.cross(v2, v1).tolist(), torch.cross(v2, v1, dim=0).tolist(), m3.tolist(), s.tolist(),
                (u @ torch.diag(s) @ v.T).tolist(), type(torch.svd(m3)).__name__, tuple(torch.svd(m3).V.shape)]
    a = torch.tensor([0, math.pi / 4, math.pi / 2, 3 * math.pi / 4])
    s1 = torch.sin(a).tolist()
    a0 = a.tolist()
    r = a.sin_()
    o['inplace'] = [s1, a0, a.tolist(), r is a]
    a = torch.ones(2, 2)
    b = torch.tensor([[0.5, 1.5], [2.5, 3.5]])
    o['add_'] = [a.add(b).tolist(), a.tolist(), a.add_(b).tolist(), a.tolist(), b.mul_(b).tolist()]
    a = torch.tensor([[1., 2.], [3., 4.]])
    b = torch.tensor([[0., 1.], [1., 0.]])
    c = torch.zeros(2, 2)
    old_id = id(c)
    d = torch.matmul(a, b, out=c)
    o['out'] = [c.tolist(), c is d, id(c) == old_id]
    torch.rand(2, 2, out=c)
    o['rand_out'] = [id(c) == old_id, bool(((c >= 0) & (c < 1)).all()), tuple(c.shape)]
    a = torch.ones(2, 2)
    b = a
    a[0][1] = 561
    o['alias'] = b.tolist()
    a = torch.ones(2, 2)
    b = a.clone()
    o['clone'] = [b is not a, torch.eq(a, b).tolist()]
    a[0][1] = 561
    o['clone2'] = b.tolist()
    a = torch.rand(2, 2, requires_grad=True)
    b = a.clone()
    c = a.detach().clone()
    o['detach'] = [a.requires_grad, b.requires_grad, b.grad_fn is not None, c.requires_grad,
                   repr(c).startswith('tensor(')]
    o['detach_names'] = [type(b.grad_fn).__name__, 'grad_fn=<CloneBackward0>' in repr(b)]
    a = torch.rand(3, 226, 226)
    b = a.unsqueeze(0)
    c = torch.rand(1, 1, 1, 1, 1)
    a2 = torch.rand(1, 20)
    b2 = a2.squeeze(0)
    c2 = torch.rand(2, 2)
    d2 = c2.squeeze(0)
    o['sq'] = [tuple(b.shape), tuple(c.shape), tuple(b2.shape), tuple(d2.shape)]
    a = torch.ones(4, 3, 2)
    b = torch.rand(3)
    c = b.unsqueeze(1)
    o['sq2'] = [tuple(c.shape), tuple((a * c).shape)]
    batch_me = torch.rand(3, 226, 226)
    batch_me.unsqueeze_(0)
    output3d = torch.rand(6, 20, 20)
    input1d = output3d.reshape(6 * 20 * 20)
    o['reshape'] = [tuple(batch_me.shape), tuple(input1d.shape), tuple(torch.reshape(output3d, (6 * 20 * 20,)).shape)]
    return o


def test_introduction_to_tensors():
    o = tensors_intro(lucid)
    assert o["type"] == "Tensor" and o["repro"] == (True, True, False) and o["factories"] == (0.0, 6.0, True)
    assert o["likes"] == [(2, 2, 3)] * 4
    assert o["literal"] == ("lucid.float32", "lucid.int64", [[2, 4, 6], [3, 6, 9]])
    assert o["dtypes"] == ("lucid.int16", "lucid.float64", "lucid.int32",
                           "tensor([[1, 1, 1],\n        [1, 1, 1]], dtype=lucid.int16)")
    assert o["math"][:4] == [[[1.0] * 2] * 2, [[2.0] * 2] * 2, [[3.0] * 2] * 2, [[4.0] * 2] * 2]
    np.testing.assert_allclose(o["math"][4], np.full((2, 2), math.sqrt(2)), rtol=1e-6)
    assert o["math2"] == [[[2.0, 4.0], [8.0, 16.0]], "lucid.float32", [[5.0] * 2] * 2, [[12.0] * 2] * 2]
    assert o["mismatch"] is True and o["bcast_err"] == [True, True, True]  # RuntimeError, as PyTorch
    assert o["bcast0"] and o["bcast"] == [(4, 3, 2)] * 3 + [True, True]
    np.testing.assert_allclose(o["round"][0], [[0.3, 0.7], [1.5, 2.1]], rtol=1e-6)
    np.testing.assert_allclose(o["round"][1:], [[[1, 0], [2, -2]], [[0, -1], [1, -3]], [[0.3, -0.5], [0.5, -0.5]]],
                               rtol=1e-6)
    angles = [0, math.pi / 4, math.pi / 2, 3 * math.pi / 4]
    np.testing.assert_allclose(o["trig"], [np.sin(angles), [0, math.pi / 4, math.pi / 2, math.pi / 4]], atol=1e-6)
    assert o["bits"] == [3, 2, 1] and o["eq"] == [[True, False], [False, False]]
    assert o["reduce"][:3] == [4.0, 4.0, 2.5] and o["reduce"][4:] == [24.0, [1, 2]]
    assert o["reduce"][3] == pytest.approx(np.std([1, 2, 3, 4], ddof=1), rel=1e-6)
    cross, cross2, m3, s, back, name, vshape = o["lin"]
    assert cross == cross2 == [0.0, 0.0, -1.0] and m3 == [[9.0, 27.0], [18.0, 36.0]]
    np.testing.assert_allclose(s, np.linalg.svd(np.array(m3), compute_uv=False), rtol=1e-5)
    np.testing.assert_allclose(back, m3, rtol=1e-5)
    assert name == "svd" and vshape == (2, 2)
    s1, a0, a1, same = o["inplace"]
    assert s1 == a1 and same and a0 != a1
    assert o["add_"] == [[[1.5, 2.5], [3.5, 4.5]], [[1.0, 1.0], [1.0, 1.0]], [[1.5, 2.5], [3.5, 4.5]],
                         [[1.5, 2.5], [3.5, 4.5]], [[0.25, 2.25], [6.25, 12.25]]]
    assert o["out"] == [[[2.0, 1.0], [4.0, 3.0]], True, True] and o["rand_out"] == [True, True, (2, 2)]
    assert o["alias"] == [[1.0, 561.0], [1.0, 1.0]]
    assert o["clone"] == [True, [[True, True], [True, True]]] and o["clone2"] == [[1.0, 1.0], [1.0, 1.0]]
    assert o["detach"] == [True, True, True, False, True] and o["detach_names"][1]
    assert o["sq"] == [(1, 3, 226, 226), (1, 1, 1, 1, 1), (20,), (2, 2)]
    assert o["sq2"] == [(3, 1), (4, 3, 2)]
    assert o["reshape"] == [(1, 3, 226, 226), (2400,), (2400,)]


def test_introduction_to_tensors_torch_parity():
    torch = pytest.importorskip("torch")
    lo, to = tensors_intro(lucid), tensors_intro(torch)
    for k in to:
        if k in ("literal", "dtypes", "math2", "lin", "trig", "detach_names"):
            continue  # names spelled "lucid.", floats: compared below
        assert lo[k] == to[k], k
    assert [v.replace("lucid", "torch") for v in lo["dtypes"]] == list(to["dtypes"])
    assert lo["literal"][2] == to["literal"][2] and lo["math2"][0] == to["math2"][0]
    np.testing.assert_allclose(lo["trig"], to["trig"], atol=1e-6)
    np.testing.assert_allclose(lo["lin"][3], to["lin"][3], rtol=1e-5)


def test_tensors_numpy_bridge():
    _needs_cpu_default("from_numpy and .numpy() share host memory")
    torch = lucid
    numpy_array = np.ones((2, 3))
    pytorch_tensor = torch.from_numpy(numpy_array)
    assert pytorch_tensor.dtype == torch.float64
    numpy_array[1, 1] = 23
    assert pytorch_tensor.tolist() == [[1.0, 1.0, 1.0], [1.0, 23.0, 1.0]]  # the same memory
    pytorch_rand = torch.rand(2, 3)
    numpy_rand = pytorch_rand.numpy()
    pytorch_rand[1, 1] = 17
    assert numpy_rand[1, 1] == 17.0 and numpy_rand.dtype == np.float32
