"""PyTorch tutorials and recipes run on Lucid (``import lucid as torch``), tenth batch:

- "Deep Learning for NLP with PyTorch", its first two pages: "Introduction to Torch's tensor
  library" (creation from nested lists, indexing, ``cat`` on both axes, ``view(2, -1)``, ``grad_fn``
  names, ``requires_grad_``, ``detach``, ``no_grad``) and "Deep Learning Building Blocks: Affine
  maps, non-linearities and objectives" (``nn.Linear``, ``relu``, ``softmax``/``log_softmax``, the
  bag-of-words ``BoWClassifier`` trained by ``SGD`` on ``NLLLoss``, ``make_bow_vector``'s ``vec[i] +=
  1``, ``torch.LongTensor``; checked against a float64 NumPy replay of the same SGD).
- "Learn the Basics": "Tensors" (``from_numpy``, ``*_like``, ``tensor[..., -1]``, the three spellings
  of matmul and mul with ``out=``, ``item``, in-place ``add_``, the NumPy bridge both ways) and
  "Quickstart" (``NeuralNetwork`` with ``nn.Flatten``, the ``train``/``test`` loops and their printed
  lines, the ``torch.accelerator`` device pick, ``state_dict`` save/load with ``weights_only=True``,
  ``classes[pred[0].argmax(0)]`` indexing a list with a 0-d tensor).
- "Profiling your PyTorch Module": ``MyModule`` with ``profiler.record_function`` labels, the
  ``np.argwhere`` / ``from_numpy`` version and the improved ``nonzero(as_tuple=True)`` one,
  ``profile(with_stack=True, profile_memory=True)``, ``key_averages(group_by_stack_n=5).table``.
- "Saving and loading models for inference" and "Saving and loading models across devices"
  (recipes): the CIFAR ``Net``, ``state_dict`` round trip, ``map_location`` as a device and a string.
- The FlexAttention blog post ("FlexAttention: The Flexibility of PyTorch with the Performance of
  FlashAttention"), run eagerly: the ``score_mod``s (relative position, ALiBi through
  ``torch.exp2`` of a captured per-head tensor, tanh soft-capping, causal through ``torch.where``)
  and the ``mask_mod``s through ``create_block_mask`` (causal, sliding window, ``and_masks``,
  prefix-LM with ``or_masks`` over a captured per-batch tensor, document masking by a captured
  ``document_id``), each against a float64 NumPy attention with the equivalent dense bias.
- "Weight Averaging (SWA and EMA)" of the ``torch.optim`` docs: ``AveragedModel`` (plain mean,
  ``get_ema_multi_avg_fn(0.999)``, a custom ``avg_fn``), ``CosineAnnealingLR`` handing over to
  ``SWALR`` (cosine and linear annealing) and ``update_bn``'s cumulative batch statistics, each
  against a NumPy replay.

FashionMNIST becomes random tensors of its shapes whose class is readable from the image; sizes are
shrunk. Each page is a function of the module it is handed as ``torch``; the parity tests run the
same text on PyTorch where it is installed, from the same NumPy-drawn weights (the two random
streams differ) and compare what the page prints.

All of these ran as written. Noticed, left as they are: ``print(z.grad_fn)`` reads
``<AddBackward0 object at ...>`` as in PyTorch, but ``type(z.grad_fn).__name__`` is ``Node`` (one
engine class; PyTorch has a class per backward formula), so the page's grad_fn names are compared
in their printed form; shapes print as tuples and dtypes as ``lucid.int64`` (README "Differences
from PyTorch"), so those lines are compared by value.
"""
import io
import os
from contextlib import redirect_stdout

import numpy as np
import pytest

import lucid
import lucid.autograd.profiler  # noqa: F401
import lucid.nn  # noqa: F401
import lucid.optim  # noqa: F401
import lucid.utils.data  # noqa: F401


def _reference_torch():
    """PyTorch for the parity runs, on one thread (tiny models; its thread pool only contends)."""
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    return torch


def _set_from_numpy(torch, model, seed, scale=0.1):
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for _, p in model.named_parameters():
            p.copy_(torch.tensor(rng.normal(scale=scale, size=tuple(p.shape)), dtype=p.dtype))


def _cpu_only(why):
    if lucid.get_default_device().type != "cpu":
        pytest.skip(why + "; the default device is " + str(lucid.get_default_device()))


# ------------------------------------------------ Deep Learning for NLP: the tensor library page
def nlp_tensor_library(torch):
    out = {}
    torch.manual_seed(1)
    V_data = [1., 2., 3.]
    V = torch.tensor(V_data)
    M_data = [[1., 2., 3.], [4., 5., 6]]
    M = torch.tensor(M_data)
    T_data = [[[1., 2.], [3., 4.]],
              [[5., 6.], [7., 8.]]]
    T = torch.tensor(T_data)
    out["V0"], out["V0_item"], out["M0"], out["T0"] = V[0], V[0].item(), M[0], T[0]
    x = torch.randn((3, 4, 5))
    out["randn_shape"] = tuple(x.shape)

    x = torch.tensor([1., 2., 3.])
    y = torch.tensor([4., 5., 6.])
    z = x + y
    out["z"] = z
    x_1 = torch.randn(2, 5)
    y_1 = torch.randn(3, 5)
    z_1 = torch.cat([x_1, y_1])
    x_2 = torch.randn(2, 3)
    y_2 = torch.randn(2, 5)
    z_2 = torch.cat([x_2, y_2], 1)
    out["cat"] = (x_1, y_1, z_1, x_2, y_2, z_2)
    x = torch.randn(2, 3, 4)
    out["views"] = (x, x.view(2, 12), x.view(2, -1))

    x = torch.tensor([1., 2., 3], requires_grad=True)
    y = torch.tensor([4., 5., 6], requires_grad=True)
    z = x + y
    out["z_grad_fn"] = repr(z.grad_fn).split(" object at 0x")[0]  # print(z.grad_fn)
    s = z.sum()
    out["s_grad_fn"] = repr(s.grad_fn).split(" object at 0x")[0]
    s.backward()
    out["x_grad"] = x.grad

    x = torch.randn(2, 2)
    y = torch.randn(2, 2)
    out["rg_before"] = (x.requires_grad, y.requires_grad)
    z = x + y
    out["grad_fn_none"] = z.grad_fn
    x = x.requires_grad_()
    y = y.requires_grad_()
    z = x + y
    out["grad_fn_after"] = repr(z.grad_fn).split(" object at 0x")[0]
    out["z_requires_grad"] = z.requires_grad
    new_z = z.detach()
    out["detached_grad_fn"] = new_z.grad_fn
    out["sq_rg"] = (x ** 2).requires_grad
    with torch.no_grad():
        out["sq_rg_no_grad"] = (x ** 2).requires_grad
    return out


def test_nlp_tensor_library():
    out = nlp_tensor_library(lucid)
    assert out["V0"].item() == 1.0 and out["V0_item"] == 1.0 and isinstance(out["V0_item"], float)
    assert out["M0"].tolist() == [1., 2., 3.] and out["T0"].tolist() == [[1., 2.], [3., 4.]]
    assert out["randn_shape"] == (3, 4, 5) and out["z"].tolist() == [5., 7., 9.]
    x_1, y_1, z_1, x_2, y_2, z_2 = (t.numpy() for t in out["cat"])
    np.testing.assert_array_equal(z_1, np.concatenate([x_1, y_1]))
    np.testing.assert_array_equal(z_2, np.concatenate([x_2, y_2], 1))
    x, v12, v = (t.numpy() for t in out["views"])
    np.testing.assert_array_equal(v12, x.reshape(2, 12)); np.testing.assert_array_equal(v, v12)
    assert (out["z_grad_fn"], out["s_grad_fn"]) == ("<AddBackward0", "<SumBackward0")
    assert out["x_grad"].tolist() == [1., 1., 1.]  # d(sum(x + y))/dx
    assert out["rg_before"] == (False, False) and out["grad_fn_none"] is None
    assert out["grad_fn_after"] == "<AddBackward0" and out["z_requires_grad"]
    assert out["detached_grad_fn"] is None and out["sq_rg"] and not out["sq_rg_no_grad"]


def test_nlp_tensor_library_torch_parity():
    torch = _reference_torch()
    lo, to = nlp_tensor_library(lucid), nlp_tensor_library(torch)
    for k in ("V0_item", "randn_shape", "z_grad_fn", "s_grad_fn", "rg_before", "grad_fn_after",
              "z_requires_grad", "sq_rg", "sq_rg_no_grad"):
        assert lo[k] == to[k], k
    assert lo["x_grad"].tolist() == to["x_grad"].tolist()


# --------------------------------------------- Deep Learning for NLP: Deep Learning Building Blocks
def deep_learning_building_blocks(torch, epochs=100, numpy_weights=False):
    nn, F, optim = torch.nn, torch.nn.functional, torch.optim
    out = {}
    torch.manual_seed(1)
    lin = nn.Linear(5, 3)  # maps from R^5 to R^3, parameters A, b
    # data is 2x5.  A maps from 5 to 3... can we map "data" under A?
    data = torch.randn(2, 5)
    out["lin"] = (lin, data, lin(data))
    data = torch.randn(2, 2)
    out["relu"] = (data, F.relu(data))
    data = torch.randn(5)
    out["softmax"] = (data, F.softmax(data, dim=0), F.softmax(data, dim=0).sum(), F.log_softmax(data, dim=0))

    data = [("me gusta comer en la cafeteria".split(), "SPANISH"),
            ("Give it to me".split(), "ENGLISH"),
            ("No creo que sea una buena idea".split(), "SPANISH"),
            ("No it is not a good idea to get lost at sea".split(), "ENGLISH")]

    test_data = [("Yo creo que si".split(), "SPANISH"),
                 ("it is lost on me".split(), "ENGLISH")]

    # word_to_ix maps each word in the vocab to a unique integer, which will be its
    # index into the Bag of words vector
    word_to_ix = {}
    for sent, _ in data + test_data:
        for word in sent:
            if word not in word_to_ix:
                word_to_ix[word] = len(word_to_ix)

    VOCAB_SIZE = len(word_to_ix)
    NUM_LABELS = 2

    class BoWClassifier(nn.Module):  # inheriting from nn.Module!

        def __init__(self, num_labels, vocab_size):
            super(BoWClassifier, self).__init__()
            self.linear = nn.Linear(vocab_size, num_labels)

        def forward(self, bow_vec):
            return F.log_softmax(self.linear(bow_vec), dim=1)

    def make_bow_vector(sentence, word_to_ix):
        vec = torch.zeros(len(word_to_ix))
        for word in sentence:
            vec[word_to_ix[word]] += 1
        return vec.view(1, -1)

    def make_target(label, label_to_ix):
        return torch.LongTensor([label_to_ix[label]])

    model = BoWClassifier(NUM_LABELS, VOCAB_SIZE)
    if numpy_weights:
        _set_from_numpy(torch, model, 0)
    out["initial"] = [p.detach().numpy().copy() for p in model.parameters()]

    with torch.no_grad():
        sample = data[0]
        bow_vector = make_bow_vector(sample[0], word_to_ix)
        out["bow0"] = bow_vector.numpy().copy()
        log_probs = model(bow_vector)
        out["log_probs0"] = log_probs.numpy().copy()

    label_to_ix = {"SPANISH": 0, "ENGLISH": 1}

    with torch.no_grad():
        out["test_before"] = [model(make_bow_vector(instance, word_to_ix)).numpy().copy()
                              for instance, label in test_data]
    out["creo_before"] = next(model.parameters())[:, word_to_ix["creo"]].detach().numpy().copy()

    loss_function = nn.NLLLoss()
    optimizer = optim.SGD(model.parameters(), lr=0.1)

    for epoch in range(epochs):
        for instance, label in data:
            model.zero_grad()
            bow_vec = make_bow_vector(instance, word_to_ix)
            target = make_target(label, label_to_ix)
            log_probs = model(bow_vec)
            loss = loss_function(log_probs, target)
            loss.backward()
            optimizer.step()

    with torch.no_grad():
        out["test_after"] = [model(make_bow_vector(instance, word_to_ix)).numpy().copy()
                             for instance, label in test_data]
    out["creo_after"] = next(model.parameters())[:, word_to_ix["creo"]].detach().numpy().copy()
    out["final"] = [p.detach().numpy().copy() for p in model.parameters()]
    out["word_to_ix"], out["data"], out["label_to_ix"] = word_to_ix, data, label_to_ix
    return out


def _bow_sgd_numpy(W, b, data, word_to_ix, label_to_ix, epochs):
    """The page's training loop in float64 NumPy: softmax regression, one SGD step per sentence."""
    W, b = W.astype(np.float64), b.astype(np.float64)
    for _ in range(epochs):
        for sent, label in data:
            x = np.zeros(len(word_to_ix))
            for w in sent:
                x[word_to_ix[w]] += 1
            z = W @ x + b
            p = np.exp(z - z.max()); p /= p.sum()
            g = p.copy(); g[label_to_ix[label]] -= 1.0  # d(-log p_y)/dz
            W -= 0.1 * np.outer(g, x); b -= 0.1 * g
    return W, b


def test_deep_learning_building_blocks():
    _cpu_only("the page's targets are torch.LongTensor, a CPU tensor whatever the default device")
    out = deep_learning_building_blocks(lucid)
    lin, data, y = out["lin"]
    np.testing.assert_allclose(y.detach().numpy(), data.numpy() @ lin.weight.detach().numpy().T
                               + lin.bias.detach().numpy(), rtol=1e-5, atol=1e-6)
    d, r = (t.numpy() for t in out["relu"]); np.testing.assert_array_equal(r, np.maximum(d, 0))
    d, sm, total, lsm = out["softmax"]
    e = np.exp(d.numpy().astype(np.float64))
    np.testing.assert_allclose(sm.numpy(), e / e.sum(), rtol=1e-5)
    np.testing.assert_allclose(lsm.numpy(), np.log(e / e.sum()), rtol=1e-5, atol=1e-6)
    assert abs(total.item() - 1.0) < 1e-6
    w2i = out["word_to_ix"]
    assert len(w2i) == 26
    bow = np.zeros((1, 26)); bow[0, [w2i[w] for w in "me gusta comer en la cafeteria".split()]] = 1
    np.testing.assert_array_equal(out["bow0"], bow)
    # The training against the same SGD in float64 NumPy.
    W, b = _bow_sgd_numpy(*out["initial"], out["data"], w2i, out["label_to_ix"], 100)
    np.testing.assert_allclose(out["final"][0], W, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out["final"][1], b, rtol=1e-4, atol=1e-5)
    # As the page says: after training the Spanish log-probability is higher for the Spanish test
    # sentence and the English one for the English one; "creo" now leans Spanish.
    spanish, english = out["test_after"]
    assert spanish[0, 0] > spanish[0, 1] and english[0, 1] > english[0, 0]
    before, after = out["creo_before"], out["creo_after"]
    assert after[0] > before[0] and after[1] < before[1]


def test_deep_learning_building_blocks_torch_parity():
    _cpu_only("the page's targets are torch.LongTensor, a CPU tensor whatever the default device")
    torch = _reference_torch()
    lo = deep_learning_building_blocks(lucid, epochs=20, numpy_weights=True)
    to = deep_learning_building_blocks(torch, epochs=20, numpy_weights=True)
    for k in ("log_probs0", "test_before", "test_after", "creo_after", "final"):
        np.testing.assert_allclose(np.concatenate([np.ravel(a) for a in lo[k]]),
                                   np.concatenate([np.ravel(a) for a in to[k]]), rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------ Learn the Basics: Tensors
def basics_tensors(torch):
    out = {}
    data = [[1, 2], [3, 4]]
    x_data = torch.tensor(data)
    np_array = np.array(data)
    x_np = torch.from_numpy(np_array)
    x_ones = torch.ones_like(x_data)  # retains the properties of x_data
    x_rand = torch.rand_like(x_data, dtype=torch.float)  # overrides the datatype of x_data
    out["creation"] = (x_data, x_np, x_ones, x_rand)

    shape = (2, 3,)
    rand_tensor = torch.rand(shape)
    ones_tensor = torch.ones(shape)
    zeros_tensor = torch.zeros(shape)
    out["shaped"] = (rand_tensor, ones_tensor, zeros_tensor)

    tensor = torch.rand(3, 4)
    out["attributes"] = (tuple(tensor.shape), str(tensor.dtype), tensor.device.type)

    # We move our tensor to the current accelerator if available
    if torch.accelerator.is_available():
        tensor = tensor.to(torch.accelerator.current_accelerator())

    tensor = torch.ones(4, 4)
    out["rows"] = (tensor[0].tolist(), tensor[:, 0].tolist(), tensor[..., -1].tolist())
    tensor[:, 1] = 0
    out["tensor"] = tensor.clone()

    t1 = torch.cat([tensor, tensor, tensor], dim=1)
    out["t1"] = t1

    # This computes the matrix multiplication between two tensors. y1, y2, y3 will have the same value
    y1 = tensor @ tensor.T
    y2 = tensor.matmul(tensor.T)
    y3 = torch.rand_like(y1)
    torch.matmul(tensor, tensor.T, out=y3)

    # This computes the element-wise product. z1, z2, z3 will have the same value
    z1 = tensor * tensor
    z2 = tensor.mul(tensor)
    z3 = torch.rand_like(tensor)
    torch.mul(tensor, tensor, out=z3)
    out["products"] = (y1, y2, y3, z1, z2, z3)

    agg = tensor.sum()
    agg_item = agg.item()
    out["agg"] = (agg_item, type(agg_item))

    tensor.add_(5)
    out["added"] = tensor

    t = torch.ones(5)
    n = t.numpy()
    t.add_(1)
    out["bridge_t2n"] = (t.tolist(), n.tolist())
    n = np.ones(5)
    t = torch.from_numpy(n)
    np.add(n, 1, out=n)
    out["bridge_n2t"] = (t.tolist(), n.tolist())
    return out


def test_basics_tensors():
    _cpu_only("the NumPy bridge shares host memory")
    out = basics_tensors(lucid)
    x_data, x_np, x_ones, x_rand = out["creation"]
    assert x_data.dtype == lucid.int64 and x_np.tolist() == [[1, 2], [3, 4]]
    assert x_ones.dtype == lucid.int64 and x_ones.tolist() == [[1, 1], [1, 1]]
    assert x_rand.dtype == lucid.float32 and ((x_rand.numpy() >= 0) & (x_rand.numpy() < 1)).all()
    assert [tuple(t.shape) for t in out["shaped"]] == [(2, 3)] * 3
    assert out["attributes"] == ((3, 4), "lucid.float32", "cpu")
    assert out["rows"] == ([1.] * 4, [1.] * 4, [1.] * 4)
    expect = np.ones((4, 4), np.float32); expect[:, 1] = 0
    np.testing.assert_array_equal(out["tensor"].numpy(), expect)
    np.testing.assert_array_equal(out["t1"].numpy(), np.concatenate([expect] * 3, axis=1))
    y1, y2, y3, z1, z2, z3 = (t.numpy() for t in out["products"])
    for y in (y1, y2, y3):
        np.testing.assert_array_equal(y, expect @ expect.T)  # 3 everywhere
    for z in (z1, z2, z3):
        np.testing.assert_array_equal(z, expect)
    assert out["agg"] == (12.0, float)
    np.testing.assert_array_equal(out["added"].numpy(), expect + 5)
    assert out["bridge_t2n"] == ([2.] * 5, [2.] * 5)  # the tensor's add_ shows in the array
    assert out["bridge_n2t"] == ([2.] * 5, [2.] * 5)  # and the array's np.add in the tensor


def test_basics_tensors_torch_parity():
    torch = _reference_torch()
    lo, to = basics_tensors(lucid), basics_tensors(torch)
    for k in ("rows", "agg", "bridge_t2n", "bridge_n2t"):
        assert lo[k] == to[k], k
    assert lo["attributes"][:1] == to["attributes"][:1]
    np.testing.assert_array_equal(lo["t1"].numpy(), to["t1"].numpy())


# --------------------------------------------------------------------- Learn the Basics: Quickstart
def _fashion_like(torch, n, seed):
    """Random 1x28x28 images in [0, 1]; class k brightens row band k (FashionMNIST's stand-in)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 10, n)
    x = rng.uniform(0, 0.3, size=(n, 1, 28, 28)).astype(np.float32)
    for i, k in enumerate(y):
        x[i, 0, 2 * k + 4:2 * k + 6, :] += 0.7
    return torch.utils.data.TensorDataset(torch.tensor(x), torch.tensor(y))


def quickstart(torch, tmpdir, epochs=3, hidden=32, numpy_weights=False):
    nn = torch.nn
    DataLoader = torch.utils.data.DataLoader
    lines = []
    print = lines.append  # noqa: A001  (the page prints; the test reads the lines)
    training_data = _fashion_like(torch, 1024, 0)
    test_data = _fashion_like(torch, 64, 1)

    batch_size = 64

    # Create data loaders.
    train_dataloader = DataLoader(training_data, batch_size=batch_size)
    test_dataloader = DataLoader(test_data, batch_size=batch_size)

    for X, y in test_dataloader:
        print(f"Shape of X [N, C, H, W]: {tuple(X.shape)}")
        print(f"Shape of y: {tuple(y.shape)} {y.dtype}")
        break

    device = torch.accelerator.current_accelerator().type if torch.accelerator.is_available() else "cpu"
    print(f"Using {device} device")

    # Define model
    class NeuralNetwork(nn.Module):
        def __init__(self):
            super().__init__()
            self.flatten = nn.Flatten()
            self.linear_relu_stack = nn.Sequential(
                nn.Linear(28*28, hidden),
                nn.ReLU(),
                nn.Linear(hidden, hidden),
                nn.ReLU(),
                nn.Linear(hidden, 10)
            )

        def forward(self, x):
            x = self.flatten(x)
            logits = self.linear_relu_stack(x)
            return logits

    model = NeuralNetwork().to(device)
    print(model)
    if numpy_weights:
        _set_from_numpy(torch, model, 0)

    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-1)

    def train(dataloader, model, loss_fn, optimizer):
        size = len(dataloader.dataset)
        model.train()
        for batch, (X, y) in enumerate(dataloader):
            X, y = X.to(device), y.to(device)

            # Compute prediction error
            pred = model(X)
            loss = loss_fn(pred, y)

            # Backpropagation
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()

            if batch % 2 == 0:
                loss, current = loss.item(), (batch + 1) * len(X)
                print(f"loss: {loss:>7f}  [{current:>5d}/{size:>5d}]")

    def test(dataloader, model, loss_fn):
        size = len(dataloader.dataset)
        num_batches = len(dataloader)
        model.eval()
        test_loss, correct = 0, 0
        with torch.no_grad():
            for X, y in dataloader:
                X, y = X.to(device), y.to(device)
                pred = model(X)
                test_loss += loss_fn(pred, y).item()
                correct += (pred.argmax(1) == y).type(torch.float).sum().item()
        test_loss /= num_batches
        correct /= size
        print(f"Test Error: \n Accuracy: {(100*correct):>0.1f}%, Avg loss: {test_loss:>8f} \n")
        return correct, test_loss

    results = []
    for t in range(epochs):
        print(f"Epoch {t+1}\n-------------------------------")
        train(train_dataloader, model, loss_fn, optimizer)
        results.append(test(test_dataloader, model, loss_fn))
    print("Done!")

    torch.save(model.state_dict(), os.path.join(tmpdir, "model.pth"))
    print("Saved PyTorch Model State to model.pth")

    model = NeuralNetwork().to(device)
    model.load_state_dict(torch.load(os.path.join(tmpdir, "model.pth"), weights_only=True))

    classes = [
        "T-shirt/top",
        "Trouser",
        "Pullover",
        "Dress",
        "Coat",
        "Sandal",
        "Shirt",
        "Sneaker",
        "Bag",
        "Ankle boot",
    ]

    model.eval()
    x, y = test_data[0][0], test_data[0][1]
    with torch.no_grad():
        x = x.to(device)
        pred = model(x)
        predicted, actual = classes[pred[0].argmax(0)], classes[y]
        print(f'Predicted: "{predicted}", Actual: "{actual}"')
    return lines, results, model, test_data


def test_quickstart(tmp_path):
    lines, results, model, test_data = quickstart(lucid, str(tmp_path))
    assert lines[0] == "Shape of X [N, C, H, W]: (64, 1, 28, 28)"
    assert lines[1] == "Shape of y: (64,) lucid.int64"
    assert lines[2] == f"Using {lucid.get_default_device().type if lucid.accelerator.is_available() else 'cpu'} device"
    assert str(lines[3]).startswith("NeuralNetwork(\n  (flatten): Flatten(start_dim=1, end_dim=-1)")
    assert lines[4] == "Epoch 1\n-------------------------------"
    assert lines[5].startswith("loss: ") and lines[5].endswith("[   64/ 1024]")
    # The test loop's numbers against NumPy on the reloaded model (the saved state).
    x = np.stack([test_data[i][0].numpy() for i in range(64)]).reshape(64, -1).astype(np.float64)
    y = np.array([int(test_data[i][1]) for i in range(64)])
    sd = {k: v.numpy().astype(np.float64) for k, v in model.state_dict().items()}
    h = np.maximum(x @ sd["linear_relu_stack.0.weight"].T + sd["linear_relu_stack.0.bias"], 0)
    h = np.maximum(h @ sd["linear_relu_stack.2.weight"].T + sd["linear_relu_stack.2.bias"], 0)
    logits = h @ sd["linear_relu_stack.4.weight"].T + sd["linear_relu_stack.4.bias"]
    logp = logits - logits.max(1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(1, keepdims=True))
    acc, loss = results[-1]
    assert acc == (logits.argmax(1) == y).mean()
    assert abs(loss - (-logp[np.arange(64), y].mean())) < 1e-5
    assert f" Accuracy: {(100*acc):>0.1f}%, Avg loss: {loss:>8f} \n" in lines[-4]
    assert results[-1][1] < results[0][1] and acc > 0.5
    classes_line = lines[-1]
    names = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker",
             "Bag", "Ankle boot"]
    assert classes_line == f'Predicted: "{names[logits[0].argmax()]}", Actual: "{names[y[0]]}"'


def test_quickstart_torch_parity(tmp_path):
    torch = _reference_torch()
    (tmp_path / "l").mkdir(); (tmp_path / "t").mkdir()
    ll, lr, _, _ = quickstart(lucid, str(tmp_path / "l"), epochs=2, numpy_weights=True)
    tl, tr, _, _ = quickstart(torch, str(tmp_path / "t"), epochs=2, numpy_weights=True)
    np.testing.assert_allclose(np.array(lr), np.array(tr), rtol=1e-5, atol=1e-6)
    # The printed losses to float32 rounding; the epoch headers and the prediction as they are
    # (not the dtype/shape lines: ``lucid.int64``, tuples).
    assert repr(ll[3]) == repr(tl[3])  # print(model)

    def same(line):
        return isinstance(line, str) and line.startswith(("Epoch", "Done", "Saved", "Predicted"))
    assert [l for l in ll if same(l)] == [l for l in tl if same(l)]
    l_loss = [float(l.split()[1]) for l in ll if isinstance(l, str) and l.startswith("loss")]
    t_loss = [float(l.split()[1]) for l in tl if isinstance(l, str) and l.startswith("loss")]
    assert len(l_loss) == 16
    np.testing.assert_allclose(l_loss, t_loss, atol=2e-6)


# --------------------------------------------------------------- Profiling your PyTorch Module
def profiler_tutorial(torch, improved=False):
    nn = torch.nn
    from importlib import import_module
    profiler = import_module(torch.__name__ + ".autograd.profiler")

    class MyModule(nn.Module):
        def __init__(self, in_features: int, out_features: int, bias: bool = True):
            super(MyModule, self).__init__()
            self.linear = nn.Linear(in_features, out_features, bias)

        def forward(self, input, mask):
            with profiler.record_function("LINEAR PASS"):
                out = self.linear(input)

            with profiler.record_function("MASK INDICES"):
                threshold = out.sum(axis=1).mean().item()
                if not improved:
                    hi_idx = np.argwhere(mask.cpu().numpy() > threshold)
                    hi_idx = torch.from_numpy(hi_idx)
                else:
                    hi_idx = (mask > threshold).nonzero(as_tuple=True)

            return out, hi_idx

    torch.manual_seed(0)
    model = MyModule(50, 10)
    _set_from_numpy(torch, model, 0)
    input = torch.tensor(np.random.default_rng(1).random((16, 50)), dtype=torch.float32)
    mask = torch.tensor(np.random.default_rng(2).uniform(-10, 10, (12, 12, 12)),
                        dtype=torch.float if improved else torch.double)

    # warm-up
    model(input, mask)

    with profiler.profile(with_stack=True, profile_memory=True) as prof:
        out, idx = model(input, mask)

    table = prof.key_averages(group_by_stack_n=5).table(sort_by='self_cpu_time_total', row_limit=5)
    averages = {e.key: e.count for e in prof.key_averages()}
    return out, idx, mask, table, averages


def test_profiler_tutorial():
    for improved in (False, True):
        out, idx, mask, table, averages = profiler_tutorial(lucid, improved)
        threshold = out.sum(axis=1).mean().item()
        expect = np.argwhere(mask.numpy() > threshold)
        assert 0 < len(expect) < mask.numel()
        if improved:
            assert isinstance(idx, tuple) and len(idx) == 3
            got = np.stack([i.numpy() for i in idx], axis=1)
        else:
            assert idx.dtype == lucid.int64
            got = idx.numpy()
        np.testing.assert_array_equal(got, expect)
        assert averages["LINEAR PASS"] == 1 and averages["MASK INDICES"] == 1
        assert "LINEAR PASS" in table and "MASK INDICES" in table and "Self CPU" in table


def test_profiler_tutorial_torch_parity():
    torch = _reference_torch()
    for improved in (False, True):
        lo, li, _, _, la = profiler_tutorial(lucid, improved)
        to, ti, _, _, ta = profiler_tutorial(torch, improved)
        np.testing.assert_allclose(lo.detach().numpy(), to.detach().numpy(), rtol=1e-5, atol=1e-6)
        li = li if improved else (li,)
        ti = ti if improved else (ti,)
        for a, b in zip(li, ti):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
        assert la["LINEAR PASS"] == ta["LINEAR PASS"] == 1


# ------------------------------------- Saving and loading models for inference / across devices
def save_load_for_inference(torch, tmpdir):
    nn, F, optim = torch.nn, torch.nn.functional, torch.optim

    class Net(nn.Module):
        def __init__(self):
            super(Net, self).__init__()
            self.conv1 = nn.Conv2d(3, 6, 5)
            self.pool = nn.MaxPool2d(2, 2)
            self.conv2 = nn.Conv2d(6, 16, 5)
            self.fc1 = nn.Linear(16 * 5 * 5, 120)
            self.fc2 = nn.Linear(120, 84)
            self.fc3 = nn.Linear(84, 10)

        def forward(self, x):
            x = self.pool(F.relu(self.conv1(x)))
            x = self.pool(F.relu(self.conv2(x)))
            x = x.view(-1, 16 * 5 * 5)
            x = F.relu(self.fc1(x))
            x = F.relu(self.fc2(x))
            x = self.fc3(x)
            return x

    net = Net()
    _set_from_numpy(torch, net, 3)
    optimizer = optim.SGD(net.parameters(), lr=0.001, momentum=0.9)
    images = torch.tensor(np.random.default_rng(4).normal(size=(2, 3, 32, 32)), dtype=torch.float32)
    reference = net(images).detach()

    # Specify a path
    PATH = os.path.join(tmpdir, "state_dict_model.pt")

    # Save
    torch.save(net.state_dict(), PATH)

    # Load
    model = Net()
    model.load_state_dict(torch.load(PATH))
    model.eval()
    loaded_out = model(images).detach()

    # Across devices: save on the CPU, load with map_location as a device and as a string.
    device = torch.device('cpu')
    model = Net()
    model.load_state_dict(torch.load(PATH, map_location=device))
    model.to(device)
    cpu_out = model(images).detach()
    model = Net()
    model.load_state_dict(torch.load(PATH, map_location="cpu"))
    string_out = model(images).detach()
    return reference, loaded_out, cpu_out, string_out, optimizer


def test_save_load_for_inference(tmp_path):
    _cpu_only("the recipe moves the model to torch.device('cpu') and feeds it the same inputs")
    reference, loaded, cpu, string, optimizer = save_load_for_inference(lucid, str(tmp_path))
    assert reference.shape == (2, 10)
    for t in (loaded, cpu, string):
        np.testing.assert_array_equal(t.numpy(), reference.numpy())
    assert sorted(lucid.load(str(tmp_path / "state_dict_model.pt"))) == sorted(
        f"{m}.{p}" for m in ("conv1", "conv2", "fc1", "fc2", "fc3") for p in ("weight", "bias"))
    assert optimizer.defaults["momentum"] == 0.9


def test_save_load_for_inference_torch_parity(tmp_path):
    _cpu_only("the recipe moves the model to torch.device('cpu') and feeds it the same inputs")
    torch = _reference_torch()
    (tmp_path / "l").mkdir(); (tmp_path / "t").mkdir()
    lo = save_load_for_inference(lucid, str(tmp_path / "l"))[0]
    to = save_load_for_inference(torch, str(tmp_path / "t"))[0]
    np.testing.assert_allclose(lo.numpy(), to.numpy(), rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------- FlexAttention (the PyTorch blog)
def flex_attention_blog(torch, S=256, B=2, H=4, D=8, seed=0):
    """The score_mods and mask_mods of "FlexAttention: The Flexibility of PyTorch with the
    Performance of FlashAttention", run eagerly (``torch.compile`` left out) on small shapes."""
    from importlib import import_module
    fa = import_module(torch.__name__ + ".nn.attention.flex_attention")
    flex_attention, create_block_mask = fa.flex_attention, fa.create_block_mask
    and_masks, or_masks = fa.and_masks, fa.or_masks
    rng = np.random.default_rng(seed)
    query, key, value = (torch.tensor(rng.normal(size=(B, H, S, D)), dtype=torch.float32) for _ in range(3))
    out = {}

    def noop(score, b, h, q_idx, kv_idx):
        return score
    out["noop"] = flex_attention(query, key, value, score_mod=noop)

    def relative_positional(score, b, h, q_idx, kv_idx):
        return score + (q_idx - kv_idx)
    out["relative_positional"] = flex_attention(query, key, value, score_mod=relative_positional)

    def generate_alibi_bias(H):
        alibi_bias = []
        for h in range(H):
            alibi_bias.append(-((h + 1) * 8.0 / H))
        alibi_bias = torch.tensor(alibi_bias)
        alibi_bias = torch.exp2(alibi_bias)
        return alibi_bias
    alibi_bias = generate_alibi_bias(H)

    def alibi(score, b, h, q_idx, kv_idx):
        bias = alibi_bias[h] * (kv_idx - q_idx)
        return score + bias
    out["alibi"] = flex_attention(query, key, value, score_mod=alibi)

    softcap = 2.0

    def tanh_softcap(score, b, h, q_idx, kv_idx):
        return softcap * torch.tanh(score / softcap)
    out["softcap"] = flex_attention(query, key, value, score_mod=tanh_softcap)

    def causal_mask(score, b, h, q_idx, kv_idx):
        return torch.where(q_idx >= kv_idx, score, -float("inf"))
    out["causal_score_mod"] = flex_attention(query, key, value, score_mod=causal_mask)

    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx
    block_mask = create_block_mask(causal, B=None, H=None, Q_LEN=S, KV_LEN=S)
    out["causal"] = flex_attention(query, key, value, block_mask=block_mask)
    out["causal_sparsity"] = block_mask.sparsity()

    SLIDING_WINDOW = 100

    def sliding_window_causal(b, h, q_idx, kv_idx):
        causal_mask = q_idx >= kv_idx
        window_mask = q_idx - kv_idx <= SLIDING_WINDOW
        return causal_mask & window_mask
    block_mask = create_block_mask(sliding_window_causal, B=None, H=None, Q_LEN=S, KV_LEN=S)
    out["sliding_window"] = flex_attention(query, key, value, block_mask=block_mask)

    def sliding_window(b, h, q_idx, kv_idx):
        return q_idx - kv_idx <= SLIDING_WINDOW
    block_mask = create_block_mask(and_masks(causal, sliding_window), B=None, H=None, Q_LEN=S, KV_LEN=S)
    out["sliding_window_and"] = flex_attention(query, key, value, block_mask=block_mask)

    prefix_length = torch.tensor([40, 150])

    def prefix_mask(b, h, q_idx, kv_idx):
        return kv_idx <= prefix_length[b]
    prefix_lm_causal = or_masks(prefix_mask, causal)
    block_mask = create_block_mask(prefix_lm_causal, B=B, H=None, Q_LEN=S, KV_LEN=S)
    out["prefix_lm"] = flex_attention(query, key, value, block_mask=block_mask)

    document_id = torch.tensor(np.repeat(np.arange(4), [50, 90, 16, 100]))

    def document_causal_mask(b, h, q_idx, kv_idx):
        causal_mask = q_idx >= kv_idx
        document_mask = document_id[q_idx] == document_id[kv_idx]
        return causal_mask & document_mask
    block_mask = create_block_mask(document_causal_mask, B=None, H=None, Q_LEN=S, KV_LEN=S)
    out["document"] = flex_attention(query, key, value, block_mask=block_mask)
    out["inputs"] = (query, key, value)
    return out


def _attention_numpy(q, k, v, bias):
    """softmax(q k^T / sqrt(d) + bias) v in float64; ``bias`` broadcast to (B, H, S, S)."""
    s = q.astype(np.float64) @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1]) + bias
    s = s - s.max(-1, keepdims=True)
    p = np.exp(s)
    return (p / p.sum(-1, keepdims=True)) @ v


def test_flex_attention_blog():
    S, H = 256, 4
    out = flex_attention_blog(lucid, S=S, H=H)
    q, k, v = (t.numpy() for t in out["inputs"])
    i, j = np.arange(S)[:, None], np.arange(S)[None, :]
    neg = np.float64(-np.inf)
    slopes = 2.0 ** (-(np.arange(1, H + 1) * 8.0 / H))
    doc = np.repeat(np.arange(4), [50, 90, 16, 100])
    prefix = np.array([40, 150])[:, None, None, None]
    biases = {
        "noop": 0.0,
        "relative_positional": (i - j).astype(np.float64),
        "alibi": slopes[:, None, None] * (j - i),
        "causal_score_mod": np.where(i >= j, 0.0, neg),
        "causal": np.where(i >= j, 0.0, neg),
        "sliding_window": np.where((i >= j) & (i - j <= 100), 0.0, neg),
        "sliding_window_and": np.where((i >= j) & (i - j <= 100), 0.0, neg),
        "prefix_lm": np.where((j <= prefix) | (i >= j), 0.0, neg),
        "document": np.where((i >= j) & (doc[:, None] == doc[None, :]), 0.0, neg),
    }
    for name, bias in biases.items():
        np.testing.assert_allclose(out[name].numpy(), _attention_numpy(q, k, v, bias),
                                   rtol=1e-4, atol=1e-5, err_msg=name)
    # tanh soft-capping of the scaled scores.
    s = q.astype(np.float64) @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    capped = 2.0 * np.tanh(s / 2.0)
    np.testing.assert_allclose(out["softcap"].numpy(), _attention_numpy(q, k, v, capped - s),
                               rtol=1e-4, atol=1e-5)
    # Two 128-blocks, causal: the upper-right block is skipped (1 of 4), 25% sparse.
    assert out["causal_sparsity"] == 25.0


def test_flex_attention_blog_torch_parity():
    torch = _reference_torch()
    import warnings
    lo = flex_attention_blog(lucid)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch warns that flex_attention runs uncompiled
        to = flex_attention_blog(torch)
    for name, t in lo.items():
        if name == "inputs":
            continue
        if name == "causal_sparsity":
            assert t == to[name]
            continue
        np.testing.assert_allclose(t.numpy(), to[name].numpy(), rtol=1e-4, atol=1e-5, err_msg=name)


# ------------------------------------------------ torch.optim docs: Weight Averaging (SWA and EMA)
def weight_averaging(torch, epochs=12, swa_start=6, seed=0):
    """The optim docs' SWA and EMA examples on a small regression net with a BatchNorm layer
    (``loader``/``model``/``loss_fn``/``optimizer`` are the docs' "..."), plus the custom
    ``avg_fn`` and the linear-annealing ``SWALR`` of the same page."""
    nn = torch.nn
    from importlib import import_module
    swa_utils = import_module(torch.__name__ + ".optim.swa_utils")
    SWALR = swa_utils.SWALR
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(64, 4)).astype(np.float32)
    y = (x @ np.array([[1.0], [-2.0], [0.5], [0.0]]) + 0.3).astype(np.float32)
    dataset = torch.utils.data.TensorDataset(torch.tensor(x), torch.tensor(y))
    loader = torch.utils.data.DataLoader(dataset, batch_size=16)
    test_input = torch.tensor(rng.normal(size=(8, 4)), dtype=torch.float32)

    def make_model():
        model = nn.Sequential(nn.Linear(4, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 1))
        _set_from_numpy(torch, model, seed, scale=0.3)
        return model

    loss_fn = nn.MSELoss()
    out = {"snapshots": [], "lrs": [], "losses": []}

    # SWA.
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    swa_model = torch.optim.swa_utils.AveragedModel(model)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=300)
    swa_scheduler = SWALR(optimizer, swa_lr=0.05)
    for epoch in range(epochs):
        for input, target in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(input), target)
            loss.backward()
            optimizer.step()
            out["losses"].append(loss.item())
        if epoch > swa_start:
            swa_model.update_parameters(model)
            out["snapshots"].append([p.detach().numpy().copy() for p in model.parameters()])
            swa_scheduler.step()
        else:
            scheduler.step()
        out["lrs"].append(optimizer.param_groups[0]["lr"])
    # Update bn statistics for the swa_model at the end
    torch.optim.swa_utils.update_bn(loader, swa_model)
    bn = swa_model.module[1]
    out["swa_bn"] = (bn.running_mean.numpy().copy(), bn.running_var.numpy().copy(), bn.momentum)
    # Use swa_model to make predictions on test data
    out["swa_preds"] = swa_model(test_input).detach()
    out["swa_model"], out["n_averaged"] = swa_model, swa_model.n_averaged.item()

    # EMA.
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    ema_model = torch.optim.swa_utils.AveragedModel(
        model, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(0.999))
    out["ema_snapshots"] = []
    for epoch in range(3):
        for input, target in loader:
            optimizer.zero_grad()
            loss_fn(model(input), target).backward()
            optimizer.step()
            ema_model.update_parameters(model)
            out["ema_snapshots"].append([p.detach().numpy().copy() for p in model.parameters()])
    # Update bn statistics for the ema_model at the end
    torch.optim.swa_utils.update_bn(loader, ema_model)
    bn = ema_model.module[1]
    out["ema_bn"] = (bn.running_mean.numpy().copy(), bn.running_var.numpy().copy(), bn.momentum)
    out["ema_preds"] = ema_model(test_input).detach()
    out["ema_model"] = ema_model

    # A custom averaging function, and SWALR's linear annealing.
    ema_avg = lambda averaged_model_parameter, model_parameter, num_averaged: \
        0.9 * averaged_model_parameter + 0.1 * model_parameter
    model = make_model()
    custom = torch.optim.swa_utils.AveragedModel(model, avg_fn=ema_avg)
    with torch.no_grad():
        custom.update_parameters(model)
        for p in model.parameters():
            p.add_(1.0)
        custom.update_parameters(model)
    out["custom"] = [p.detach().numpy().copy() for p in custom.module.parameters()]
    out["custom_base"] = [p.detach().numpy().copy() for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    swa_scheduler = torch.optim.swa_utils.SWALR(optimizer, anneal_strategy="linear", anneal_epochs=5,
                                                swa_lr=0.05)
    out["linear_lrs"] = [optimizer.param_groups[0]["lr"]]
    for _ in range(6):
        optimizer.step()
        swa_scheduler.step()
        out["linear_lrs"].append(optimizer.param_groups[0]["lr"])
    out["x"] = x
    return out


def _bn_input_stats(model, x):
    """The BatchNorm layer's input over the whole data set (``update_bn`` with ``momentum=None``
    averages the per-batch statistics; the batches here are of equal size)."""
    w, b = (t.detach().numpy().astype(np.float64) for t in (model.module[0].weight, model.module[0].bias))
    h = x.astype(np.float64) @ w.T + b
    batches = h.reshape(4, 16, -1)
    return batches.mean(1).mean(0), batches.var(1, ddof=1).mean(0)


def test_weight_averaging():
    out = weight_averaging(lucid)
    assert np.mean(out["losses"][-4:]) < 0.2 * np.mean(out["losses"][:4])
    # SWA: the plain mean of the snapshots taken after swa_start.
    assert out["n_averaged"] == len(out["snapshots"]) == 5
    swa_params = [p.detach().numpy() for p in out["swa_model"].module.parameters()]
    for i, p in enumerate(swa_params):
        np.testing.assert_allclose(p, np.mean([s[i] for s in out["snapshots"]], axis=0), rtol=1e-5, atol=1e-6)
    # The learning rate: cosine for the first epochs, then SWALR's cosine anneal towards 0.05.
    lrs = out["lrs"]
    for e in range(7):
        assert abs(lrs[e] - 0.05 * (1 + np.cos(np.pi * (e + 1) / 300)) / 2) < 1e-9
    assert all(abs(lr - 0.05) < 1e-4 for lr in lrs[7:])
    # update_bn: cumulative averages of the batch statistics of the averaged weights. (The docs'
    # prediction then runs the averaged model in training mode, which moves the statistics
    # again by momentum 0.1 towards the test batch's, in PyTorch as here.)
    for key in ("swa", "ema"):
        running_mean, running_var, momentum = out[key + "_bn"]
        mean, var = _bn_input_stats(out[key + "_model"], out["x"])
        np.testing.assert_allclose(running_mean, mean, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(running_var, var, rtol=1e-4, atol=1e-5)
        assert momentum == 0.1  # restored after update_bn
        assert out[key + "_model"].training
    # EMA: the first update copies, then ema = 0.999 ema + 0.001 p.
    snaps = out["ema_snapshots"]
    for i, p in enumerate(out["ema_model"].module.parameters()):
        ema = snaps[0][i].astype(np.float64)
        for s in snaps[1:]:
            ema = 0.999 * ema + 0.001 * s[i]
        np.testing.assert_allclose(p.detach().numpy(), ema, rtol=1e-5, atol=1e-6)
    # The custom avg_fn: first copy, then 0.9 * old + 0.1 * (old + 1).
    for c, base in zip(out["custom"], out["custom_base"]):
        np.testing.assert_allclose(c, base - 1.0 + 0.1, rtol=1e-5, atol=1e-6)
    # SWALR linear: from 0.5 to 0.05 in 5 steps, then flat.
    np.testing.assert_allclose(out["linear_lrs"], [0.5, 0.41, 0.32, 0.23, 0.14, 0.05, 0.05], atol=1e-9)


def test_weight_averaging_torch_parity():
    torch = _reference_torch()
    lo, to = weight_averaging(lucid), weight_averaging(torch)
    np.testing.assert_allclose(lo["losses"], to["losses"], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(lo["lrs"], to["lrs"], rtol=1e-12)
    np.testing.assert_allclose(lo["linear_lrs"], to["linear_lrs"], rtol=1e-12)
    for k in ("swa_preds", "ema_preds"):
        np.testing.assert_allclose(lo[k].numpy(), to[k].numpy(), rtol=1e-4, atol=1e-5, err_msg=k)
    for k in ("swa_model", "ema_model"):
        for (n, a), (_, b) in zip(lo[k].state_dict().items(), to[k].state_dict().items()):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-5, err_msg=k + " " + n)
