"""PyTorch tutorials and recipes run on Lucid (``import lucid as torch``), eleventh batch, recipes and
advanced topics:

- "Tutorial of control flow operators": ``cond`` (a data-dependent branch; NaN/inf filtering),
  ``while_loop``, ``scan``, ``associative_scan`` (``combine_mode="generic"``; the page's pointwise
  mode needs CUDA) and ``map`` imported from ``torch._higher_order_ops.<name>``, with
  ``torch._dynamo.config.capture_scalar_outputs = True``; the LSTM written four ways (an
  ``LSTMCell`` loop, ``nn.LSTM`` loaded from the renamed state dict, ``scan`` over the
  ``torch.chunk``-ed weights, ``scan`` over the cell; ``torch.compile(fullgraph=True)``) and the S5
  state-space kernel. Gradients through ``scan`` match the loop's, and ``gradcheck``/
  ``gradgradcheck`` pass through ``scan``, ``cond`` and ``associative_scan`` in float64.
- "Customizing Data Loading" (the ANI-1 example): a ``TensorDataset`` per molecule, ``ConcatDataset``
  and its ``cumulative_sizes``, a custom batch sampler, a collate through ``default_collate`` and
  ``DataLoader(batch_sampler=..., collate_fn=...)``. The ``.npy`` files are synthetic.
- "Classifying an imbalanced dataset": CIFAR-shaped synthetic images behind torchvision's old
  ``train_data``/``train_labels`` interface, the undersampled classes, ``WeightedRandomSampler`` from
  reciprocal class counts, then ``NLLLoss(weight=...)``, the confusion-matrix evaluation.
- "Data Loading Optimization in PyTorch": the ``SyntheticDataset``/``SyntheticDatasetBatched``
  (``__getitems__``) datasets, the conv + ``TransformerEncoder`` model, ``num_workers``,
  ``prefetch_factor``, ``persistent_workers`` and ``in_order=False`` loaders.
- "Calculating Output Dimensions for Convolutional and Pooling Layers": the mismatched
  ``Linear`` raising ``RuntimeError``, the page's ``calc_shape`` against the layers, the printed shapes.
- "(beta) Compiling the optimizer with torch.compile": ``Adam.step`` inside ``torch.compile`` and
  ``utils.benchmark.Timer.blocked_autorange`` (sizes shrunk, on the CPU).
- "nn package" and "Autograd" of "PyTorch for former Torch users": the MNIST ConvNet, a forward
  hook and the legacy ``register_backward_hook`` on ``conv2`` (printing ``grad_input[0]``), the RNN
  that reuses one ``nn.Linear`` over five steps; ``grad_fn``, ``retain_graph``, a second
  ``backward`` with a gradient, ``Tensor.to(requires_grad=True)`` refused (``TypeError``) as in PyTorch.
- The ``torch.optim`` docs page: per-parameter options (also from ``named_parameters``), biases
  without weight decay, ``step(closure)`` with ``LBFGS``, ``ExponentialLR`` chained with
  ``MultiStepLR``, and "How to utilize named parameters to load optimizer state dict": the
  ``adapt_state_dict_ids``, ``adapt_state_dict_missing_param`` and ``names_matching`` hooks through
  ``register_load_state_dict_pre_hook`` and a file written by ``torch.save``.
- functorch's examples ``maml_regression/evjang_transforms.py`` (MAML on sine tasks: ``func.grad``
  inside ``func.vmap`` over the tasks, ``torch.Tensor(n, m).uniform_`` parameters, ``Adam``, then
  test-time adaptation through ``autograd.grad(create_graph=True)``) and
  ``lennard_jones/lennard_jones.py`` (forces as ``vmap(jacrev(model))``, ``backward(retain_graph=True)``),
  written with ``torch.func`` for ``functorch``; checked against a loop of
  ``autograd.grad(create_graph=True)``, the closed-form energies and forces, and autograd.

Data sets are synthetic and sizes shrunk. Each page is a function of the module it is handed as
``torch``; the parity tests run the same text on PyTorch where it is installed, from the same
NumPy-drawn weights (the two random streams differ).

Fixed on the way: ``torch._higher_order_ops.<op>`` module paths did not exist (``from
lucid._higher_order_ops.scan import scan`` raised ``ModuleNotFoundError``); ``lucid._dynamo`` was
missing (``torch._dynamo.config.capture_scalar_outputs = True`` raised ``AttributeError``); the
optimizers had none of PyTorch's hooks (``register_step_pre_hook``/``post``,
``register_state_dict_pre_hook``/``post``, ``register_load_state_dict_pre_hook``/``post``, the global
``lucid.optim.optimizer.register_optimizer_step_pre_hook``/``post``): the docs page's
``optimizer2.register_load_state_dict_pre_hook(...)`` raised ``AttributeError``.
Noticed, left for ``lucid/nn``: ``adaptive_avg_pool2d`` to a size that does not divide the input
returns a non-contiguous tensor (PyTorch's is contiguous), so the page's ``x.view(B, C, H * W)``
after ``AdaptiveAvgPool2d((7, 7))`` fails on inputs smaller than the page's; the data-loading
page runs here at 52x52 (a 7x7 map before the pool), where the pool is a plain block mean. The
legacy ``Module.register_backward_hook`` is Lucid's full backward hook (with a ``FutureWarning``):
its ``grad_input`` holds the module input's gradient only, where PyTorch's holds those of the last
node's inputs (for a conv: input, weight, bias); the page reads ``grad_input[0]``, which agrees.
Where this port calls ``autograd.grad`` it passes the inputs as a list, ``grad(y, [x])[0]`` (README
"Differences from PyTorch": a bare input gives a bare gradient).
"""
import importlib
import io
import math
import os
import time
from contextlib import redirect_stdout
from copy import deepcopy
from itertools import islice
from math import ceil

import numpy as np
import pytest

import lucid
import lucid.nn  # noqa: F401
import lucid.optim  # noqa: F401
import lucid.utils.benchmark  # noqa: F401
import lucid.utils.data  # noqa: F401


def _reference_torch():
    """PyTorch for the parity runs, on one thread (tiny models; its thread pool only contends)."""
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    return torch


def _no_compile(model=None, **kwargs):
    """``torch.compile`` for the parity runs without Inductor's compile time: the model itself."""
    return model if model is not None else (lambda f: f)


def _np(t):
    return t.detach().cpu().numpy()


# ----------------------------------------------------------- Tutorial of control flow operators

def control_flow(torch, compile=None, scan_lstms=True):  # noqa: A002
    """The control flow operators tutorial, parts 1 and 2 (the CUDA-only pointwise mode left out).

    ``compile`` stands in for ``torch.compile`` (the parity run skips Inductor's compile time);
    ``scan_lstms=False`` skips the two scan LSTMs (seconds each in PyTorch, which traces their
    bodies), leaving the loop and ``nn.LSTM`` that they are checked against.
    """
    compile = compile or torch.compile
    hop = lambda name: importlib.import_module(torch.__name__ + "._higher_order_ops." + name)  # noqa: E731
    map, cond, scan = hop("map").map, hop("cond").cond, hop("scan").scan  # noqa: A001
    associative_scan, while_loop = hop("associative_scan").associative_scan, hop("while_loop").while_loop
    torch._dynamo.config.capture_scalar_outputs = True
    out = {}

    class CondExample(torch.nn.Module):
        def forward(self, x):
            pred = (x.sum() > 0).unsqueeze(0)

            def true_fn(t):
                return (t.cos(),)

            def false_fn(t):
                return (t.sin(),)

            return cond(pred, true_fn, false_fn, (x,))[0]

    xs = torch.tensor(np.random.default_rng(0).normal(size=(3, 3)), dtype=torch.float32)
    result = CondExample()(xs)
    result_pytorch = xs.cos() if xs.sum() > 0 else xs.sin()
    torch.testing.assert_close(result_pytorch, result)
    out["cond"] = result.cpu().numpy()

    class CumulativeSumWithWhileLoopExample(torch.nn.Module):
        def forward(self, cnt, s):
            def cond_fn(i, s):
                return i < 5

            def body_fn(i, s):
                return (i + 1, s + i)

            return while_loop(cond_fn, body_fn, (cnt, s))[1]

    result = CumulativeSumWithWhileLoopExample()(torch.tensor(0), torch.tensor(0))
    torch.testing.assert_close(torch.cumsum(torch.arange(5), 0)[-1], result)
    out["while_loop"] = result.item()

    class ScanExample(torch.nn.Module):
        def forward(self, init, xs):
            def combine(carry, x):
                new_carry = carry + x
                return new_carry, new_carry * 2.

            cumsum_final, _ = scan(combine, init, xs, dim=0)
            return cumsum_final

    result = ScanExample()(torch.tensor(0), torch.arange(1, 5))
    torch.testing.assert_close(torch.cumsum(torch.arange(5), 0)[-1], result)
    out["scan"] = result.item()

    def sum(a, b):  # noqa: A001  (the page's name)
        return a + b

    res_generic = associative_scan(combine_fn=sum, xs=torch.arange(5), dim=0, combine_mode="generic")[-1]
    torch.testing.assert_close(torch.cumsum(torch.arange(5), 0)[-1], res_generic)
    out["associative_scan"] = res_generic.item()

    def body_fn(x, y):
        return x ** y

    xs, y = torch.arange(5), torch.tensor(2)
    result = map(body_fn, xs, y)
    torch.testing.assert_close(xs ** y, result)
    out["map"] = result.tolist()

    max_allowed_value, min_allowed_value = 4, -7

    class AdvancedCondExample(torch.nn.Module):
        def forward(self, xs):
            def pred(x):
                return torch.isinf(x).any() or torch.isnan(x).any()

            def true_fn(x):
                no_nans_and_infs = torch.nan_to_num(x, nan=0.0, posinf=100, neginf=-100)
                return torch.clamp(no_nans_and_infs, min=min_allowed_value, max=max_allowed_value)

            def false_fn(x):
                return x.clone()

            return cond(pred(xs), true_fn, false_fn, (xs,))

    out["filtered"] = AdvancedCondExample()(torch.tensor([-10., -4, torch.nan, 1, torch.inf])).tolist()

    # RNNs implemented with scan: an LSTMCell loop, nn.LSTM, scan over the chunked weights, scan over the cell
    class LSTM_forloop(torch.nn.Module):
        def __init__(self, input_size, hidden_size):
            super().__init__()
            self.lstm_cell = torch.nn.LSTMCell(input_size, hidden_size)

        def forward(self, init, xs):
            output = []
            for i in range(xs.size()[0]):
                hx, cx = self.lstm_cell(xs[i], init)
                init = (hx, cx)
                output.append(hx)
            return torch.stack(output, dim=0)

    class LSTM_scan(torch.nn.Module):
        def __init__(self, Wii, bii, Whi, bhi, Wif, bif, Whf, bhf, Wig, big, Whg, bhg, Wio, bio, Who, bho):
            super().__init__()
            self.Wii, self.bii, self.Whi, self.bhi = Wii.clone(), bii.clone(), Whi.clone(), bhi.clone()
            self.Wif, self.bif, self.Whf, self.bhf = Wif.clone(), bif.clone(), Whf.clone(), bhf.clone()
            self.Wig, self.big, self.Whg, self.bhg = Wig.clone(), big.clone(), Whg.clone(), bhg.clone()
            self.Wio, self.bio, self.Who, self.bho = Wio.clone(), bio.clone(), Who.clone(), bho.clone()

        def forward(self, init, xs):
            def lstm_combine(carry, x):
                h, c = carry
                i = torch.sigmoid(x @ self.Wii + self.bii + h @ self.Whi + self.bhi)
                f = torch.sigmoid(x @ self.Wif + self.bif + h @ self.Whf + self.bhf)
                g = torch.tanh(x @ self.Wig + self.big + h @ self.Whg + self.bhg)
                o = torch.sigmoid(x @ self.Wio + self.bio + h @ self.Who + self.bho)
                c_new = f * c + i * g
                h_new = o * torch.tanh(c_new)
                return (h_new, c_new.clone()), h_new.clone()

            return scan(lstm_combine, init, xs, dim=0)

    class LSTM_scan_cell(torch.nn.Module):
        def __init__(self, state_dict):
            super().__init__()
            self.lstm_cell = torch.nn.LSTMCell(input_size, hidden_size)
            self.lstm_cell.load_state_dict(state_dict)

        def forward(self, init, xs):
            def lstm_combine(carry, x):
                hx, cx = self.lstm_cell(x, carry)
                return (hx, cx.clone()), hx.clone()

            return scan(lstm_combine, init, xs, dim=0)

    time_steps, input_size, hidden_size = 3, 3, 4
    rng = np.random.default_rng(1)
    xs = torch.tensor(rng.normal(size=(time_steps, input_size)), dtype=torch.float32, requires_grad=True)
    h = torch.tensor(rng.normal(size=hidden_size), dtype=torch.float32)
    c = torch.tensor(rng.normal(size=hidden_size), dtype=torch.float32)
    init = (h, c)
    lstm_forloop = LSTM_forloop(input_size, hidden_size)
    with torch.no_grad():
        for p in lstm_forloop.parameters():
            p.copy_(torch.tensor(rng.normal(scale=0.5, size=tuple(p.shape)), dtype=torch.float32))
    lstm_forloop_comp = compile(lstm_forloop, fullgraph=True)
    lstm_forloop_state_dict = lstm_forloop.state_dict()
    lstm_cuda_state_dict = {}
    for key, value in lstm_forloop_state_dict.items():
        new_key = key.replace('lstm_cell.', '') + '_l0'
        lstm_cuda_state_dict[new_key] = value.clone()
    lstm_cuda = torch.nn.LSTM(input_size, hidden_size)
    lstm_cuda.load_state_dict(lstm_cuda_state_dict)
    Wii, Wif, Wig, Wio = torch.chunk(lstm_cuda.weight_ih_l0, 4)
    Whi, Whf, Whg, Who = torch.chunk(lstm_cuda.weight_hh_l0, 4)
    bii, bif, big, bio = torch.chunk(lstm_cuda.bias_ih_l0, 4)
    bhi, bhf, bhg, bho = torch.chunk(lstm_cuda.bias_hh_l0, 4)
    lstm_scan = LSTM_scan(Wii.T, bii, Whi.T, bhi, Wif.T, bif, Whf.T, bhf,
                          Wig.T, big, Whg.T, bhg, Wio.T, bio, Who.T, bho)
    lstm_scan_comp = compile(lstm_scan, fullgraph=True)
    rnn_scan_cell_state_dict = {}
    for key, value in lstm_forloop_state_dict.items():
        rnn_scan_cell_state_dict[key.replace('lstm_cell.', '')] = value.clone()
    lstm_scan_cell = LSTM_scan_cell(rnn_scan_cell_state_dict)

    result_forloop = lstm_forloop(init, xs)
    result_forloop_comp = lstm_forloop_comp(init, xs)
    result_cuda = lstm_cuda(xs.clone(), (init[0].clone().unsqueeze(0), init[1].clone().unsqueeze(0)))
    torch.testing.assert_close(result_forloop, result_forloop_comp)
    torch.testing.assert_close(result_forloop, result_cuda[0])
    results = [result_forloop, result_cuda[0]]
    if scan_lstms:
        result_scan = lstm_scan((init[0].clone().unsqueeze(0), init[1].clone().unsqueeze(0)), xs.clone())
        result_scan_comp = lstm_scan_comp((init[0].clone().unsqueeze(0), init[1].clone().unsqueeze(0)), xs.clone())
        result_scan_cell = lstm_scan_cell((init[0].clone(), init[1].clone()), xs.clone())
        torch.testing.assert_close(result_forloop, result_scan[1][:, 0, :])
        torch.testing.assert_close(result_forloop, result_scan_comp[1][:, 0, :])
        torch.testing.assert_close(result_forloop, result_scan_cell[1])
        results += [result_scan[1][:, 0, :], result_scan_cell[1]]
    out["lstm"] = result_forloop.detach().cpu().numpy()
    # the operators are differentiable: the gradient through scan is the for-loop's
    out["lstm_grads"] = [torch.autograd.grad(r.square().sum(), [xs])[0].cpu().numpy() for r in results]
    # the S5 state-space kernel (the page runs it on CUDA in pointwise mode; generic mode on the CPU)
    def s5_operator(x, y):
        A_i, Bu_i = x
        A_j, Bu_j = y
        return A_j * A_i, A_j * Bu_i + Bu_j

    A = torch.tensor(rng.normal(size=3), dtype=torch.float32)
    B = torch.tensor(rng.normal(size=(4, 3)), dtype=torch.float32)
    result = associative_scan(s5_operator, (A.repeat((4, 1)), B), dim=0, combine_mode="generic")
    out["s5"] = [r.cpu().numpy() for r in result]
    out["s5_inputs"] = (A.cpu().numpy(), B.cpu().numpy())
    return out


def _hop(name):
    return getattr(importlib.import_module("lucid._higher_order_ops." + name), name)


def test_control_flow_operators():
    out = control_flow(lucid)
    assert out["while_loop"] == out["scan"] == out["associative_scan"] == 10
    assert out["map"] == [0, 1, 4, 9, 16]
    assert out["filtered"] == [-7.0, -4.0, 0.0, 1.0, 4.0]
    # every LSTM gives the loop's gradient
    for g in out["lstm_grads"][1:]:
        np.testing.assert_allclose(g, out["lstm_grads"][0], rtol=1e-5, atol=1e-6)
    # the S5 kernel: A**(t+1) and the recurrence x_t = A x_{t-1} + B_t
    A, B = out["s5_inputs"]
    powers = np.stack([A ** (t + 1) for t in range(4)])
    rec, x = [], np.zeros(3, dtype=np.float64)
    for t in range(4):
        x = A * x + B[t]
        rec.append(x)
    np.testing.assert_allclose(out["s5"][0], powers, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["s5"][1], np.stack(rec), rtol=1e-5, atol=1e-6)


def test_control_flow_operators_differentiate_in_float64():
    scan, cond, associative_scan = _hop("scan"), _hop("cond"), _hop("associative_scan")
    rng = np.random.default_rng(0)
    xs = lucid.tensor(rng.normal(size=(4, 3)), dtype=lucid.float64, requires_grad=True)
    w = lucid.tensor(rng.normal(size=(3, 3)) * 0.5, dtype=lucid.float64, requires_grad=True)

    def rnn(xs, w):
        def step(h, x):
            h = lucid.tanh(h @ w + x)
            return h, h * 2.0
        carry, ys = scan(step, lucid.zeros(3, dtype=lucid.float64), xs)
        return carry, ys

    assert lucid.autograd.gradcheck(rnn, (xs, w))
    assert lucid.autograd.gradgradcheck(lambda xs, w: rnn(xs, w)[1], (xs, w))
    branch = lambda x: cond(x.sum() > 0, lambda t: t.sin() * t, lambda t: t.cos(), (x,))  # noqa: E731
    assert lucid.autograd.gradcheck(branch, (xs,))
    prod = lambda x: associative_scan(lambda a, b: a * b, x, dim=0, combine_mode="generic")  # noqa: E731
    assert lucid.autograd.gradcheck(prod, (xs,))
    # the scan's derivative by hand: d(sum of carry)/dxs by float64 finite differences
    f = lambda a: float(rnn(lucid.tensor(a, dtype=lucid.float64), w.detach())[0].sum())  # noqa: E731
    (g,) = lucid.autograd.grad(rnn(xs, w)[0].sum(), [xs])
    base, eps = _np(xs), 1e-6
    fd = np.zeros_like(base)
    for idx in np.ndindex(base.shape):
        d = np.zeros_like(base)
        d[idx] = eps
        fd[idx] = (f(base + d) - f(base - d)) / (2 * eps)
    np.testing.assert_allclose(_np(g), fd, rtol=1e-7, atol=1e-9)


def test_control_flow_operators_torch_parity():
    torch = _reference_torch()
    lo, to = control_flow(lucid), control_flow(torch, compile=_no_compile, scan_lstms=False)
    for k in ("while_loop", "scan", "associative_scan", "map", "filtered"):
        assert lo[k] == to[k], k
    for k in ("cond", "lstm"):
        np.testing.assert_allclose(lo[k], to[k], rtol=1e-5, atol=1e-6)
    for a, b in zip(lo["lstm_grads"][:2] + lo["s5"], to["lstm_grads"] + to["s5"]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------- Customizing Data Loading
def write_ani(root_dir, n_molecules=6, seed=0):
    rng = np.random.default_rng(seed)
    sizes = []
    for i in range(n_molecules):
        n, atoms = int(rng.integers(3, 11)), int(rng.integers(2, 6))
        np.save(os.path.join(root_dir, f"{i}.xyz.npy"), rng.normal(size=(n, atoms, 3)))
        np.save(os.path.join(root_dir, f"{i}.energy.npy"), rng.normal(size=n))
        sizes.append(n)
    return sizes


def customize_data_loading(torch, root_dir, n_molecules=6, chunk=4, per_batch=2):
    """'Customizing Data Loading': TensorDataset per molecule, ConcatDataset, a batch sampler, a collate."""
    data = importlib.import_module(torch.__name__ + ".utils.data")
    TensorDataset, ConcatDataset = data.TensorDataset, data.ConcatDataset
    dl = importlib.import_module(torch.__name__ + ".utils.data.dataloader")
    default_collate, DataLoader = dl.default_collate, dl.DataLoader
    tensor, full_like, long = torch.tensor, torch.full_like, torch.long
    from os.path import join
    from numpy import load

    def load_dataset(root_dir):
        molecules = []
        for i in range(n_molecules):
            xyz = tensor(load(join(root_dir, '{}.xyz.npy'.format(i))))
            energy = tensor(load(join(root_dir, '{}.energy.npy'.format(i))))
            molecule_id = full_like(energy, i).type(long)
            molecules.append(TensorDataset(molecule_id, xyz, energy))
        return ConcatDataset(molecules)

    out = {}
    dataset = load_dataset(root_dir)
    out["len"] = len(dataset)
    out["first"] = [(m.item(), tuple(x.shape), tuple(e.shape)) for m, x, e in islice(dataset, 5)]

    class ANIBatchSampler(object):
        def __init__(self, concat_source):
            self.concat_source = concat_source

        def _concated_index(self, molecule, conformation):
            cumulative_sizes = [0] + self.concat_source.cumulative_sizes
            return cumulative_sizes[molecule] + conformation

        def __iter__(self):
            sizes = [len(x) for x in self.concat_source.datasets]
            unfinished = list(zip(range(n_molecules), [0] * n_molecules))
            batch, batch_molecules = [], 0
            while len(unfinished) > 0:
                new_unfinished = []
                for molecule, progress in unfinished:
                    size = sizes[molecule]
                    end = min(progress + chunk, size)
                    if end < size:
                        new_unfinished.append((molecule, end))
                    batch += [self._concated_index(molecule, x) for x in range(progress, end)]
                    batch_molecules += 1
                    if batch_molecules >= per_batch:
                        yield batch
                        batch, batch_molecules = [], 0
                unfinished = new_unfinished
            if len(batch) > 0:
                yield batch

        def __len__(self):
            sizes = [len(x) for x in self.concat_source.datasets]
            return ceil(sum(ceil(x / chunk) for x in sizes) / per_batch)

    batch_sampler = ANIBatchSampler(dataset)
    out["batches"] = [list(b) for b in batch_sampler]
    out["n_batches"] = len(batch_sampler)

    def collate(batch):
        by_molecules = {}
        for molecule_id, xyz, energy in batch:
            molecule_id = molecule_id.item()
            if molecule_id not in by_molecules:
                by_molecules[molecule_id] = []
            by_molecules[molecule_id].append((xyz, energy))
        for i in by_molecules:
            by_molecules[i] = default_collate(by_molecules[i])
        return by_molecules

    dataloader = DataLoader(dataset, batch_sampler=batch_sampler, collate_fn=collate)
    out["loader_len"] = len(dataloader)
    out["loaded"] = [{j: (tuple(i[j][0].shape), tuple(i[j][1].shape), i[j][0].cpu().numpy(), i[j][1].cpu().numpy())
                      for j in i} for i in islice(dataloader, 3)]
    return out

def write_ani(root_dir, n_molecules=6, seed=0):
    rng = np.random.default_rng(seed)
    sizes = []
    for i in range(n_molecules):
        n, atoms = int(rng.integers(3, 11)), int(rng.integers(2, 6))
        np.save(os.path.join(root_dir, f"{i}.xyz.npy"), rng.normal(size=(n, atoms, 3)))
        np.save(os.path.join(root_dir, f"{i}.energy.npy"), rng.normal(size=n))
        sizes.append(n)
    return sizes


def test_customize_data_loading(tmp_path):
    sizes = write_ani(str(tmp_path))
    out = customize_data_loading(lucid, str(tmp_path))
    assert out["len"] == sum(sizes)
    assert out["first"][0][1:] == ((np.load(tmp_path / "0.xyz.npy").shape[1], 3), ())
    # the sampler's batches, by hand: chunks of 4 per molecule, two molecules per batch, round by round
    starts = np.cumsum([0] + sizes)
    chunks, progress = [], [0] * len(sizes)
    while any(p < s for p, s in zip(progress, sizes)):
        for m, s in enumerate(sizes):
            if progress[m] < s:
                end = min(progress[m] + 4, s)
                chunks.append(list(range(starts[m] + progress[m], starts[m] + end)))
                progress[m] = end
    expected = [sum(chunks[i:i + 2], []) for i in range(0, len(chunks), 2)]
    assert out["batches"] == expected
    assert out["n_batches"] == out["loader_len"] == math.ceil(sum(math.ceil(s / 4) for s in sizes) / 2)
    # the collate groups by molecule and stacks each molecule's conformations
    first = out["loaded"][0]
    for j, (xyz_shape, e_shape, xyz, energy) in first.items():
        take = [i - starts[j] for i in expected[0] if starts[j] <= i < starts[j + 1]]
        np.testing.assert_array_equal(xyz, np.load(tmp_path / f"{j}.xyz.npy")[take])
        np.testing.assert_array_equal(energy, np.load(tmp_path / f"{j}.energy.npy")[take])
        assert xyz_shape[0] == e_shape[0] == len(take)


def test_customize_data_loading_torch_parity(tmp_path):
    torch = _reference_torch()
    write_ani(str(tmp_path))
    lo, to = customize_data_loading(lucid, str(tmp_path)), customize_data_loading(torch, str(tmp_path))
    for k in ("len", "first", "batches", "n_batches", "loader_len"):
        assert lo[k] == to[k], k
    for lb, tb in zip(lo["loaded"], to["loaded"]):
        assert list(lb) == list(tb)
        for j in lb:
            assert lb[j][:2] == tb[j][:2]
            np.testing.assert_array_equal(lb[j][2], tb[j][2])
            assert lb[j][3].dtype == tb[j][3].dtype == np.float64


# ------------------------------------------------------------ Classifying an imbalanced dataset
class FakeCIFAR:
    """CIFAR10's old interface (train_data uint8 HWC, train_labels) over synthetic images."""
    def __init__(self, torch, n_per_class, seed, transform):
        rng = np.random.default_rng(seed)
        labels = np.repeat(np.arange(10), n_per_class)
        imgs = rng.integers(0, 256, size=(labels.size, 32, 32, 3)).astype(np.uint8)
        for c in range(10):  # each class brightens its own patch
            imgs[labels == c, 3 * c:3 * c + 3, :, c % 3] = 255
        self.train_data, self.train_labels = imgs, labels
        self.transform, self.torch = transform, torch
    def __len__(self):
        return len(self.train_labels)
    def __getitem__(self, i):
        return self.transform(self.train_data[i]), int(self.train_labels[i])

def imbalanced_data(torch, epochs=1, batch_size=16, n_per_class=6):
    nn = torch.nn
    F = torch.nn.functional
    optim = torch.optim
    DataLoader = torch.utils.data.DataLoader
    WeightedRandomSampler = importlib.import_module(torch.__name__ + ".utils.data.sampler").WeightedRandomSampler
    SEED = 2809
    torch.manual_seed(SEED)
    np.random.seed(SEED)
    device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')

    def transform(img):  # ToTensor (a CPU tensor, from NumPy) + Normalize((0.5,)*3, (0.5,)*3)
        t = torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1))).float().div(255)
        return (t - 0.5) / 0.5

    train_dataset = FakeCIFAR(torch, n_per_class, 0, transform)
    test_dataset = FakeCIFAR(torch, 2, 1, transform)
    class_names = ('plane', 'car', 'bird', 'cat', 'deer', 'dog', 'frog', 'horse', 'ship', 'truck')
    nb_classes = len(class_names)
    out = {}

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
            return F.log_softmax(self.fc3(x), dim=1)

    def new_model():
        model = Net().to(device)
        rng = np.random.default_rng(5)
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(torch.tensor(rng.normal(scale=0.1, size=tuple(p.shape)), dtype=torch.float32))
        return model

    state = {}
    def train(epoch):
        model, optimizer, criterion = state["model"], state["optimizer"], state["criterion"]
        model.train()
        running_loss = 0.0
        for batch_idx, (data, target) in enumerate(train_loader):
            data, target = data.to(device), target.to(device)
            optimizer.zero_grad()
            output = model(data)
            loss = criterion(output, target)
            loss.backward()
            optimizer.step()
            running_loss += loss.item()
            state.setdefault("losses", []).append(loss.item())

    def evaluate():
        model = state["model"]
        model.eval()
        correct = total = 0
        confusion_matrix = torch.zeros(nb_classes, nb_classes)
        with torch.no_grad():
            for data, target in test_loader:
                output = model(data)
                _, preds = torch.max(output, 1)
                correct += (preds == target).sum().item()
                total += target.size(0)
                for t, p in zip(target, preds):
                    confusion_matrix[t, p] += 1
        class_correct = confusion_matrix.diag()
        class_total = confusion_matrix.sum(1)
        class_accuracies = class_correct / class_total
        for i in range(nb_classes):
            confusion_matrix[i] = confusion_matrix[i] / confusion_matrix[i].sum()
        return 100 * correct / total, class_accuracies.cpu().numpy(), confusion_matrix.cpu().numpy()

    # the imbalanced resampling: the first five classes keep 1 in 3 (the page keeps 1 in 10)
    train_targets = np.array(train_dataset.train_labels)
    test_targets = np.array(test_dataset.train_labels)
    _, train_class_counts = np.unique(train_targets, return_counts=True)
    imbal_class_prop = np.hstack(([1 / 3] * 5, [1.0] * 5))
    train_class_indices = [np.where(train_targets == i)[0] for i in range(nb_classes)]
    train_class_counts = [int(count * prop + 1e-9) for count, prop in zip(train_class_counts, imbal_class_prop)]
    train_imbal_class_indices = np.hstack([train_class_indices[i][:train_class_counts[i]] for i in range(nb_classes)])
    train_dataset.train_labels = train_targets[train_imbal_class_indices]
    train_dataset.train_data = train_dataset.train_data[train_imbal_class_indices]
    assert len(train_dataset.train_labels) == len(train_dataset.train_data)
    test_loader = DataLoader(dataset=test_dataset, batch_size=batch_size, shuffle=False, num_workers=0)

    # WeightedRandomSampler: reciprocal class counts as per-sample weights
    train_targets = train_dataset.train_labels
    _, train_class_counts = np.unique(train_targets, return_counts=True)
    weights = 1. / train_class_counts
    samples_weights = torch.from_numpy(weights[train_targets])
    out["samples_weights"] = samples_weights.cpu().numpy()
    sampler = WeightedRandomSampler(weights=samples_weights, num_samples=len(samples_weights), replacement=True)
    out["sampler_len"] = len(sampler)
    train_loader = DataLoader(train_dataset, batch_size=batch_size, num_workers=0, sampler=sampler)
    drawn = [t for _ in range(20) for _, t in train_loader]
    out["drawn_labels"] = np.concatenate([t.cpu().numpy() for t in drawn])
    state.update(model=new_model(), criterion=nn.NLLLoss())
    state["optimizer"] = optim.SGD(state["model"].parameters(), lr=1e-2, momentum=0.9)
    for epoch in range(epochs):
        train(epoch)
    out["sampler_eval"] = evaluate()

    # a weighted criterion (10 for the minority classes), shuffle off so both frameworks see one order
    train_loader = DataLoader(train_dataset, batch_size=batch_size, num_workers=0, shuffle=False)
    state.clear()
    state.update(model=new_model())
    state["optimizer"] = optim.SGD(state["model"].parameters(), lr=1e-2, momentum=0.9)
    weight = torch.cat((torch.tensor([10.] * 5), torch.tensor([1.] * 5)))
    weight = weight.to(device)
    state["criterion"] = nn.NLLLoss(weight=weight)
    for epoch in range(epochs + 1):
        train(epoch)
    out["weighted_losses"] = state["losses"]
    out["weighted_eval"] = evaluate()
    out["fc3_grad"] = state["model"].fc3.weight.grad.cpu().numpy()
    return out


def test_imbalanced_data():
    out = imbalanced_data(lucid)
    counts = np.array([2] * 5 + [6] * 5)
    np.testing.assert_allclose(out["samples_weights"], np.repeat(1.0 / counts, counts))
    assert out["sampler_len"] == 40
    # reciprocal weights make every class equally likely: 800 draws, about 80 a class
    drawn = np.bincount(out["drawn_labels"], minlength=10)
    assert drawn.sum() == 800 and drawn.min() > 40 and drawn.max() < 130
    assert out["drawn_labels"][:40].tolist() != sorted(out["drawn_labels"][:40].tolist())
    losses = out["weighted_losses"]
    assert len(losses) == 6 and np.all(np.isfinite(losses)) and losses[-1] < losses[0]
    acc, class_acc, confusion = out["weighted_eval"]
    np.testing.assert_allclose(confusion.sum(1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(np.diag(confusion), class_acc)
    assert 0 <= acc <= 100


def test_imbalanced_data_torch_parity():
    torch = _reference_torch()
    lo, to = imbalanced_data(lucid), imbalanced_data(torch)
    np.testing.assert_allclose(lo["samples_weights"], to["samples_weights"])
    np.testing.assert_allclose(lo["weighted_losses"], to["weighted_losses"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(lo["fc3_grad"], to["fc3_grad"], rtol=1e-4, atol=1e-6)
    assert lo["weighted_eval"][0] == to["weighted_eval"][0]
    np.testing.assert_allclose(lo["weighted_eval"][2], to["weighted_eval"][2])


# -------------------------------------------------------------------- Data Loading Optimization
def data_loading_optimization(torch, feature_dim=52, size=24, batch_size=8, workers=2):
    nn = torch.nn
    DataLoader, Dataset = torch.utils.data.DataLoader, torch.utils.data.Dataset
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(42)
    calls = {"getitem": 0, "getitems": []}

    class SyntheticDataset(Dataset):
        def __init__(self, size=10000, feature_dim=224, transform_delay=0.001):
            self.size, self.feature_dim, self.transform_delay = size, feature_dim, transform_delay

        def __len__(self):
            return self.size

        def __getitem__(self, idx):
            calls["getitem"] += 1
            data = torch.randn(3, self.feature_dim, self.feature_dim)
            label = torch.randint(0, 10, (1,)).item()
            if self.transform_delay > 0:
                time.sleep(self.transform_delay)
            return data, label

    class SyntheticDatasetBatched(SyntheticDataset):
        def __getitems__(self, indices):
            calls["getitems"].append(list(indices))
            n = len(indices)
            data = torch.randn(n, 3, self.feature_dim, self.feature_dim)
            labels = torch.randint(0, 10, (n,))
            if self.transform_delay > 0:
                time.sleep(self.transform_delay)
            return [(data[i], labels[i].item()) for i in range(n)]

    class SmallTransformerModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(3, 32, kernel_size=7, stride=4, padding=3), nn.ReLU(),
                nn.Conv2d(32, 64, kernel_size=3, stride=2, padding=1), nn.ReLU(),
                nn.AdaptiveAvgPool2d((7, 7)))
            encoder_layer = nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, batch_first=True)
            self.transformer = nn.TransformerEncoder(encoder_layer, num_layers=2)
            self.classifier = nn.Linear(64, 10)

        def forward(self, x):
            x = self.features(x)
            B, C, H, W = x.shape
            x = x.view(B, C, H * W).permute(0, 2, 1)
            x = self.transformer(x)
            x = x.mean(dim=1)
            return self.classifier(x)

    def train_and_benchmark(loader, max_batches=4, epochs=2):
        model = SmallTransformerModel().to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        criterion = nn.CrossEntropyLoss()
        total_loss, num_batches, shapes = 0.0, 0, []
        for epoch in range(epochs):
            for data, labels in loader:
                data = data.to(device, non_blocking=True)
                labels = labels.to(device, non_blocking=True)
                shapes.append((tuple(data.shape), tuple(labels.shape)))
                output = model(data)
                loss = criterion(output, labels)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                total_loss += loss.item()
                num_batches += 1
                if num_batches >= max_batches:
                    break
            if num_batches >= max_batches:
                break
        return total_loss / num_batches, shapes

    out = {}
    benchmark_dataset = SyntheticDataset(size=size, feature_dim=feature_dim, transform_delay=0)
    baseline_loader = DataLoader(benchmark_dataset, batch_size=batch_size, shuffle=True, num_workers=0,
                                 pin_memory=False)
    out["baseline"] = train_and_benchmark(baseline_loader)
    out["baseline_getitem_calls"] = calls["getitem"]
    persistent_loader = DataLoader(benchmark_dataset, batch_size=batch_size, shuffle=True, num_workers=workers,
                                   prefetch_factor=2, pin_memory=torch.cuda.is_available(), persistent_workers=True)
    out["persistent"] = train_and_benchmark(persistent_loader, max_batches=5)
    out["persistent_len"] = len(persistent_loader)
    benchmark_dataset_batched = SyntheticDatasetBatched(size=size, feature_dim=feature_dim, transform_delay=0)
    batched_loader = DataLoader(benchmark_dataset_batched, batch_size=batch_size, shuffle=False, num_workers=0)
    calls["getitem"] = 0
    out["batched"] = train_and_benchmark(batched_loader, max_batches=3, epochs=1)
    out["batched_calls"] = (calls["getitem"], calls["getitems"])
    # in_order=False still yields every index once (here with sequential sampling)
    class Index(Dataset):
        def __len__(self):
            return 10
        def __getitem__(self, i):
            return i
    loader = DataLoader(Index(), batch_size=3, num_workers=workers, in_order=False)
    out["in_order_false"] = sorted(int(i) for b in loader for i in b)
    return out


def test_data_loading_optimization():
    out = data_loading_optimization(lucid)
    shape = ((8, 3, 52, 52), (8,))
    assert out["baseline"][1] == [shape] * 4 and out["baseline_getitem_calls"] == 32
    assert out["persistent"][1] == [shape] * 5 and out["persistent_len"] == 3
    # __getitems__ replaces the per-sample calls: one call per batch, with the batch's indices
    assert out["batched_calls"] == (0, [list(range(i, i + 8)) for i in (0, 8, 16)])
    assert out["in_order_false"] == list(range(10))
    for key in ("baseline", "persistent", "batched"):  # ten classes, near-uniform predictions
        assert abs(out[key][0] - math.log(10)) < 0.5


def test_data_loading_optimization_torch_parity():
    torch = _reference_torch()
    lo, to = data_loading_optimization(lucid), data_loading_optimization(torch)
    for k in ("baseline_getitem_calls", "persistent_len", "batched_calls", "in_order_false"):
        assert lo[k] == to[k], k
    for k in ("baseline", "persistent", "batched"):
        assert lo[k][1] == to[k][1], k


# ---------------------------------------------------------------- Calculating Output Dimensions
def layer_output_dimensions(torch):
    out = {"errors": []}

    class Net(torch.nn.Module):
        def __init__(self, in_features):
            super().__init__()
            self.conv1 = torch.nn.Conv2d(1, 32, 3)
            self.conv2 = torch.nn.Conv2d(32, 64, 3)
            self.pool = torch.nn.MaxPool2d(kernel_size=(2, 2))
            self.flatten = torch.nn.Flatten()
            self.fc1 = torch.nn.Linear(in_features, 128)
            self.relu = torch.nn.ReLU(inplace=True)

        def forward(self, x):
            x = self.relu(self.conv1(x))
            x = self.relu(self.conv2(x))
            x = self.pool(x)
            x = self.flatten(x)
            x = self.relu(self.fc1(x))
            return x

    x = torch.ones(1, 1, 28, 28)
    for in_features in (64 * 10 * 10, 64 * 12 * 12):
        model = Net(in_features)
        try:
            _ = model(x)
            out["errors"].append(None)
        except RuntimeError as e:
            out["errors"].append(str(e))

    def calc_shape(c_in, h_in, w_in, c_out=None, kernel=(3, 3), padding=(0, 0), dilation=(1, 1), stride=(1, 1)):
        c_out = c_in if c_out is None else c_out
        h_out = math.floor(((h_in + 2 * padding[0] - dilation[0] * (kernel[0] - 1) - 1) / stride[0]) + 1)
        w_out = math.floor(((w_in + 2 * padding[1] - dilation[1] * (kernel[1] - 1) - 1) / stride[1]) + 1)
        return c_out, h_out, w_out

    conv1_out = calc_shape(1, 28, 28, c_out=32)
    conv2_out = calc_shape(*conv1_out, c_out=64)
    out["calc"] = [conv1_out, conv2_out, calc_shape(*conv2_out, kernel=(2, 2), stride=(2, 2))]

    class DebugNet2(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.features = torch.nn.Sequential(
                torch.nn.Conv2d(1, 32, 3), torch.nn.ReLU(inplace=True),
                torch.nn.Conv2d(32, 64, 3), torch.nn.ReLU(inplace=True),
                torch.nn.MaxPool2d(kernel_size=(2, 2)))
            self.classifier = torch.nn.Sequential(
                torch.nn.Flatten(), torch.nn.Linear(64 * 12 * 12, 128),
                torch.nn.ReLU(inplace=True), torch.nn.Linear(128, 10))

        def forward(self, x):
            print(f"input shape: {x.shape}")
            x = self.features(x)
            print(f"post features shape: {x.shape}")
            return self.classifier(x)

    buf = io.StringIO()
    with redirect_stdout(buf):
        y = DebugNet2()(x)
    out["printed"] = buf.getvalue()
    out["out_shape"] = tuple(y.shape)
    return out


def test_layer_output_dimensions():
    out = layer_output_dimensions(lucid)
    assert out["errors"][0] is not None and "9216" in out["errors"][0] and out["errors"][1] is None
    assert out["calc"] == [(32, 26, 26), (64, 24, 24), (64, 12, 12)]
    assert out["printed"].splitlines()[1].endswith("(1, 64, 12, 12)")
    assert out["out_shape"] == (1, 10)


def test_layer_output_dimensions_torch_parity():
    torch = _reference_torch()
    lo, to = layer_output_dimensions(lucid), layer_output_dimensions(torch)
    assert lo["calc"] == to["calc"] and lo["out_shape"] == to["out_shape"]
    assert [e is None for e in lo["errors"]] == [e is None for e in to["errors"]]
    # shapes print as tuples in Lucid (README "Differences from PyTorch")
    assert lo["printed"].replace("(", "").replace(")", "") == \
        to["printed"].replace("torch.Size([", "").replace("])", "")


# ---------------------------------------------------------------------- Compiling the optimizer
def compiling_optimizer(torch, width=16, depth=3, compile=None):  # noqa: A002
    compile = compile or torch.compile
    torch.manual_seed(0)
    device = torch.get_default_device()  # the page's "cuda"
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width, False, device=device) for _ in range(depth)])
    rng = np.random.default_rng(3)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.tensor(rng.normal(scale=0.3, size=tuple(p.shape)), dtype=torch.float32))
    input = torch.tensor(rng.random(width), dtype=torch.float32)
    output = model(input)
    output.sum().backward()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)

    @compile()
    def fn():
        opt.step()

    import importlib as il
    benchmark = il.import_module(torch.__name__ + ".utils.benchmark")

    def benchmark_torch_function_in_microseconds(f, *args, **kwargs):
        t0 = benchmark.Timer(stmt="f(*args, **kwargs)", globals={"args": args, "kwargs": kwargs, "f": f})
        return t0.blocked_autorange(min_run_time=0.01).mean * 1e6

    for _ in range(5):
        fn()
    weights_after_5 = [p.detach().cpu().numpy().copy() for p in model.parameters()]
    eager_runtime = benchmark_torch_function_in_microseconds(opt.step)
    compiled_runtime = benchmark_torch_function_in_microseconds(fn)
    return {"after5": weights_after_5, "grads": [p.grad.cpu().numpy() for p in model.parameters()],
            "runtimes": (eager_runtime, compiled_runtime), "step": opt.state[next(iter(model.parameters()))]["step"]}


def _adam_numpy(w, g, steps, lr=0.01, b1=0.9, b2=0.999, eps=1e-8):
    m, v = np.zeros_like(w), np.zeros_like(w)
    for t in range(1, steps + 1):
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        w = w - lr * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)
    return w


def test_compiling_optimizer():
    out = compiling_optimizer(lucid)
    rng = np.random.default_rng(3)
    w0 = [rng.normal(scale=0.3, size=(16, 16)).astype(np.float32) for _ in range(3)]
    for w, g, after in zip(w0, out["grads"], out["after5"]):
        np.testing.assert_allclose(after, _adam_numpy(w.astype(np.float64), g.astype(np.float64), 5),
                                   rtol=1e-5, atol=1e-6)
    assert all(r > 0 for r in out["runtimes"]) and out["step"] > 5


def test_compiling_optimizer_torch_parity():
    torch = _reference_torch()
    lo, to = compiling_optimizer(lucid), compiling_optimizer(torch, compile=_no_compile)
    for a, b in zip(lo["grads"] + lo["after5"], to["grads"] + to["after5"]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)



# --------------------------------------- nn package / Autograd (PyTorch for former Torch users)
def nn_package(torch):
    """The "nn package" page (PyTorch for former Torch users): the ConvNet, module hooks, the RNN."""
    nn, F = torch.nn, torch.nn.functional
    out = {}

    class MNISTConvNet(nn.Module):
        def __init__(self):
            super(MNISTConvNet, self).__init__()
            self.conv1 = nn.Conv2d(1, 10, 5)
            self.pool1 = nn.MaxPool2d(2, 2)
            self.conv2 = nn.Conv2d(10, 20, 5)
            self.pool2 = nn.MaxPool2d(2, 2)
            self.fc1 = nn.Linear(320, 50)
            self.fc2 = nn.Linear(50, 10)

        def forward(self, input):
            x = self.pool1(F.relu(self.conv1(input)))
            x = self.pool2(F.relu(self.conv2(x)))
            x = x.flatten(start_dim=1)
            x = F.relu(self.fc1(x))
            x = F.relu(self.fc2(x))
            return x

    net = MNISTConvNet()
    rng = np.random.default_rng(0)
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.tensor(rng.normal(scale=0.2, size=tuple(p.shape)), dtype=torch.float32))
    out["repr"] = str(net)
    input = torch.tensor(rng.normal(size=(1, 1, 28, 28)), dtype=torch.float32)
    o = net(input)
    out["out_size"] = tuple(o.size())
    target = torch.tensor([3], dtype=torch.long)
    loss_fn = nn.CrossEntropyLoss()
    err = loss_fn(o, target)
    err.backward()
    out["err"] = err.item()
    out["conv1_grad_size"] = tuple(net.conv1.weight.grad.size())
    out["norms"] = (net.conv1.weight.data.norm().item(), net.conv1.weight.grad.data.norm().item())

    seen = {}

    def printnorm(self, input, output):
        print('Inside ' + self.__class__.__name__ + ' forward')
        print('input: ', type(input).__name__)
        print('input[0]: ', type(input[0]).__name__)
        print('output: ', type(output).__name__)
        print('input size:', tuple(input[0].size()))
        print('output size:', tuple(output.data.size()))
        seen["output_norm"] = output.data.norm().item()

    h1 = net.conv2.register_forward_hook(printnorm)
    buf = io.StringIO()
    with redirect_stdout(buf):
        o = net(input)
    out["forward_hook"] = buf.getvalue()

    def printgradnorm(self, grad_input, grad_output):
        print('Inside ' + self.__class__.__name__ + ' backward')
        print('grad_input: ', type(grad_input).__name__)
        print('grad_input[0]: ', type(grad_input[0]).__name__)
        print('grad_output: ', type(grad_output).__name__)
        print('grad_output[0]: ', type(grad_output[0]).__name__)
        print('grad_input size:', tuple(grad_input[0].size()))
        print('grad_output size:', tuple(grad_output[0].size()))
        seen["grad_input"] = [None if g is None else g.detach().cpu().numpy() for g in grad_input]
        seen["grad_output"] = grad_output[0].detach().cpu().numpy()

    h2 = net.conv2.register_backward_hook(printgradnorm)
    buf = io.StringIO()
    with redirect_stdout(buf):
        o = net(input)
        err = loss_fn(o, target)
        err.backward()
    out["backward_hook"] = buf.getvalue()
    out["seen"] = seen
    out["conv2_grads"] = (net.conv2.weight.grad.cpu().numpy(), net.conv2.bias.grad.cpu().numpy())
    h1.remove()
    h2.remove()
    # the gradient reaching conv2's input, from the graph itself
    net.zero_grad()
    x1 = net.pool1(F.relu(net.conv1(input)))
    x1.retain_grad()
    x = net.pool2(F.relu(net.conv2(x1))).flatten(start_dim=1)
    loss_fn(F.relu(net.fc2(F.relu(net.fc1(x)))), target).backward()
    out["conv2_input_grad"] = x1.grad.cpu().numpy()

    class RNN(nn.Module):
        def __init__(self, data_size, hidden_size, output_size):
            super(RNN, self).__init__()
            self.hidden_size = hidden_size
            input_size = data_size + hidden_size
            self.i2h = nn.Linear(input_size, hidden_size)
            self.h2o = nn.Linear(hidden_size, output_size)

        def forward(self, data, last_hidden):
            input = torch.cat((data, last_hidden), 1)
            hidden = self.i2h(input)
            output = self.h2o(hidden)
            return hidden, output

    rnn = RNN(50, 20, 10)
    with torch.no_grad():
        for p in rnn.parameters():
            p.copy_(torch.tensor(rng.normal(scale=0.1, size=tuple(p.shape)), dtype=torch.float32))
    loss_fn = nn.MSELoss()
    batch_size, TIMESTEPS = 10, 5
    batch = torch.tensor(rng.normal(size=(batch_size, 50)), dtype=torch.float32)
    hidden = torch.zeros(batch_size, 20)
    target = torch.zeros(batch_size, 10)
    loss = 0
    for t in range(TIMESTEPS):
        hidden, output = rnn(batch, hidden)
        loss += loss_fn(output, target)
    loss.backward()
    out["rnn_loss"] = loss.item()
    out["rnn_grads"] = [p.grad.cpu().numpy() for p in rnn.parameters()]
    return out


def former_torchies_autograd(torch):
    """The "Autograd" page (PyTorch for former Torch users), with a fixed ``gradient`` for ``torch.randn``."""
    out = {}
    x = torch.ones(2, 2, requires_grad=True)
    out["x_grad0"] = x.grad
    out["x_grad_fn"] = x.grad_fn
    y = x + 2
    out["y_grad_fn"] = str(y.grad_fn).split(" ")[0]
    z = y * y * 3
    o = z.mean()
    a = torch.tensor([[0.5, -1.0], [2.0, 3.0]])
    a = ((a * 3) / (a - 1))
    out["a_rg"] = [a.requires_grad]
    try:
        a = a.to(requires_grad=True)
        out["a_rg"].append(a.requires_grad)
    except TypeError as e:
        out["a_rg"].append(type(e).__name__)
    o.backward()
    out["x_grad"] = x.grad.cpu().numpy()
    x = torch.ones(2, 2, requires_grad=True)
    y = x + 2
    y.backward(torch.ones(2, 2), retain_graph=True)
    out["g1"] = x.grad.cpu().numpy().copy()
    gradient = torch.tensor([[0.5, -2.0], [1.5, 0.25]])
    y.backward(gradient)
    out["g2"] = x.grad.cpu().numpy()
    out["rg"] = [x.requires_grad, (x ** 2).requires_grad]
    with torch.no_grad():
        out["rg"].append((x ** 2).requires_grad)
    return out


def test_nn_package_for_former_torch_users():
    out = nn_package(lucid)
    assert out["out_size"] == (1, 10) and out["conv1_grad_size"] == (10, 1, 5, 5)
    assert "(conv1): Conv2d(1, 10, kernel_size=(5, 5), stride=(1, 1))" in out["repr"]
    assert out["forward_hook"].splitlines()[-2:] == ["input size: (1, 10, 12, 12)", "output size: (1, 20, 8, 8)"]
    lines = out["backward_hook"].splitlines()
    assert lines[0] == "Inside Conv2d forward" and "Inside Conv2d backward" in lines  # both hooks run
    assert lines[-2:] == ["grad_input size: (1, 10, 12, 12)", "grad_output size: (1, 20, 8, 8)"]
    # the backward hook's grad_input[0] is the gradient that reaches conv2's input
    np.testing.assert_allclose(out["seen"]["grad_input"][0], out["conv2_input_grad"], rtol=1e-5, atol=1e-7)
    assert out["seen"]["grad_output"].shape == (1, 20, 8, 8)
    # the RNN's loss: five identical steps of a linear recurrence from zero
    assert out["rnn_loss"] > 0 and all(np.isfinite(g).all() for g in out["rnn_grads"])


def test_nn_package_for_former_torch_users_torch_parity():
    torch = _reference_torch()
    lo, to = nn_package(lucid), nn_package(torch)
    assert lo["repr"] == to["repr"]
    for k in ("out_size", "conv1_grad_size", "forward_hook", "backward_hook"):
        assert lo[k] == to[k], k
    np.testing.assert_allclose(lo["err"], to["err"], rtol=1e-5)
    np.testing.assert_allclose(lo["norms"], to["norms"], rtol=1e-5)
    # PyTorch's legacy register_backward_hook hands over the grad_input of conv2's last node
    # (input, weight, bias); Lucid's is the full hook's (input only). The page reads [0].
    np.testing.assert_allclose(lo["seen"]["grad_input"][0], to["seen"]["grad_input"][0], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(lo["seen"]["grad_output"], to["seen"]["grad_output"], rtol=1e-4, atol=1e-6)
    for a, b in zip(lo["conv2_grads"] + tuple(lo["rnn_grads"]), to["conv2_grads"] + tuple(to["rnn_grads"])):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5 * np.abs(b).max())  # float32 sums
    np.testing.assert_allclose(lo["rnn_loss"], to["rnn_loss"], rtol=1e-5)


def test_autograd_for_former_torch_users():
    out = former_torchies_autograd(lucid)
    assert out["x_grad0"] is None and out["x_grad_fn"] is None and out["y_grad_fn"] == "<AddBackward0"
    assert out["a_rg"] == [False, "TypeError"]  # Tensor.to takes no requires_grad, in PyTorch too
    np.testing.assert_allclose(out["x_grad"], np.full((2, 2), 4.5))  # d/dx mean(3 (x+2)^2) = 1.5 (x+2)
    np.testing.assert_allclose(out["g1"], np.ones((2, 2)))
    np.testing.assert_allclose(out["g2"], 1 + np.array([[0.5, -2.0], [1.5, 0.25]]))
    assert out["rg"] == [True, True, False]


def test_autograd_for_former_torch_users_torch_parity():
    torch = _reference_torch()
    lo, to = former_torchies_autograd(lucid), former_torchies_autograd(torch)
    for k in ("x_grad0", "x_grad_fn", "y_grad_fn", "a_rg", "rg"):
        assert lo[k] == to[k], k
    for k in ("x_grad", "g1", "g2"):
        np.testing.assert_allclose(lo[k], to[k])


# ------------------------------------------------------------------ torch.optim (the docs page)
def optim_docs(torch, path):
    """The ``torch.optim`` docs page's examples, on a small net and two batches."""
    nn, optim = torch.nn, torch.optim
    ExponentialLR, MultiStepLR = optim.lr_scheduler.ExponentialLR, optim.lr_scheduler.MultiStepLR
    out = {}
    rng = np.random.default_rng(0)

    def init(model, scale=0.5):
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(torch.tensor(rng.normal(scale=scale, size=tuple(p.shape)), dtype=torch.float32))
        return model

    X = torch.tensor(rng.normal(size=(6, 3)), dtype=torch.float32)
    Y = torch.tensor(rng.normal(size=(6, 4)), dtype=torch.float32)
    dataset = [(X[:3], Y[:3]), (X[3:], Y[3:])]
    loss_fn = nn.MSELoss()

    # per-parameter options and distinct penalization of the biases
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.base = nn.Linear(3, 5)
            self.classifier = nn.Linear(5, 4)

        def forward(self, x):
            return self.classifier(torch.tanh(self.base(x)))

    model = init(Net())
    start = deepcopy(model.state_dict())
    opt_a = optim.SGD([{'params': model.base.parameters(), 'lr': 1e-2},
                       {'params': model.classifier.parameters()}], lr=1e-3, momentum=0.9)
    opt_b = optim.SGD([{'params': model.base.named_parameters(), 'lr': 1e-2},
                       {'params': model.classifier.named_parameters()}], lr=1e-3, momentum=0.9)
    out["groups"] = [[(g['lr'], g['momentum'], g.get('param_names')) for g in o.param_groups] for o in (opt_a, opt_b)]
    bias_params = [p for name, p in model.named_parameters() if 'bias' in name]
    others = [p for name, p in model.named_parameters() if 'bias' not in name]
    optimizer = optim.SGD([{'params': others}, {'params': bias_params, 'weight_decay': 0}], weight_decay=1e-2, lr=1e-2)
    out["wd"] = [g['weight_decay'] for g in optimizer.param_groups]
    for input, target in dataset:
        optimizer.zero_grad()
        output = model(input)
        loss = loss_fn(output, target)
        loss.backward()
        optimizer.step()
    out["penalized"] = {k: v.cpu().numpy().copy() for k, v in model.state_dict().items()}
    out["start"] = {k: v.cpu().numpy().copy() for k, v in start.items()}

    # optimizer.step(closure) with LBFGS
    model.load_state_dict(start)
    optimizer = optim.LBFGS(model.parameters(), lr=0.5, max_iter=4)
    for input, target in dataset:
        def closure():
            optimizer.zero_grad()
            output = model(input)
            loss = loss_fn(output, target)
            loss.backward()
            return loss
        optimizer.step(closure)
    out["lbfgs"] = [loss_fn(model(x), y).item() for x, y in dataset]

    # chaining schedulers
    model.load_state_dict(start)
    optimizer = optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    scheduler1 = ExponentialLR(optimizer, gamma=0.9)
    scheduler2 = MultiStepLR(optimizer, milestones=[3, 5], gamma=0.1)
    lrs = []
    for epoch in range(7):
        for input, target in dataset:
            optimizer.zero_grad()
            output = model(input)
            loss = loss_fn(output, target)
            loss.backward()
            optimizer.step()
        scheduler1.step()
        scheduler2.step()
        lrs.append(optimizer.param_groups[0]['lr'])
    out["chained_lrs"] = lrs
    out["chained_loss"] = loss.item()

    # how to utilize named parameters to load an optimizer state dict
    class OneLayerModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 4)

        def forward(self, x):
            return self.fc(x)

    model = init(OneLayerModel())
    optimizer = optim.SGD(model.named_parameters(), lr=0.01, momentum=0.9)
    for input, target in dataset:
        optimizer.zero_grad()
        loss_fn(model(input), target).backward()
        optimizer.step()
    torch.save(optimizer.state_dict(), path)
    out["saved_names"] = optimizer.state_dict()['param_groups'][0]['param_names']
    out["fc_momentum"] = [optimizer.state[p]['momentum_buffer'].cpu().numpy().copy() for p in model.parameters()]

    class TwoLayerModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(3, 4)
            self.fc2 = nn.Linear(3, 4)

        def forward(self, x):
            return (self.fc1(x) + self.fc2(x)) / 2

    model2 = TwoLayerModel()
    model2.fc1.load_state_dict(model.fc.state_dict())
    model2.fc2.load_state_dict(model.fc.state_dict())
    optimizer2 = optim.SGD(model2.named_parameters(), lr=0.01, momentum=0.9)

    def adapt_state_dict_ids(optimizer, state_dict):
        adapted_state_dict = deepcopy(optimizer.state_dict())
        for k, v in state_dict['param_groups'][0].items():
            if k not in ['params', 'param_names']:
                adapted_state_dict['param_groups'][0][k] = v
        lookup_dict = {'fc1.weight': 'fc.weight', 'fc1.bias': 'fc.bias',
                       'fc2.weight': 'fc.weight', 'fc2.bias': 'fc.bias'}
        clone_deepcopy = lambda d: {k: (v.clone() if isinstance(v, torch.Tensor) else deepcopy(v))  # noqa: E731
                                    for k, v in d.items()}
        for param_id, param_name in zip(optimizer.state_dict()['param_groups'][0]['params'],
                                        optimizer.state_dict()['param_groups'][0]['param_names']):
            name_in_loaded = lookup_dict[param_name]
            index_in_loaded_list = state_dict['param_groups'][0]['param_names'].index(name_in_loaded)
            id_in_loaded = state_dict['param_groups'][0]['params'][index_in_loaded_list]
            if id_in_loaded in state_dict['state']:
                adapted_state_dict['state'][param_id] = clone_deepcopy(state_dict['state'][id_in_loaded])
        return adapted_state_dict

    optimizer2.register_load_state_dict_pre_hook(adapt_state_dict_ids)
    optimizer2.load_state_dict(torch.load(path))
    out["two_momentum"] = [optimizer2.state[p]['momentum_buffer'].cpu().numpy().copy() for p in model2.parameters()]
    # the two experts resume as one: a step of each equals a step of the original
    for m, o in ((model, optimizer), (model2, optimizer2)):
        o.zero_grad()
        loss_fn(m(X), Y).backward()
        o.step()
    out["resumed"] = (model.fc.weight.detach().cpu().numpy(), model2.fc1.weight.detach().cpu().numpy(),
                      model2.fc2.weight.detach().cpu().numpy())

    class Model1(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(5, 5)

        def forward(self, x):
            return self.fc(x) + x

    class Model_bypass(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(5, 5)
            self.bypass = nn.Linear(5, 5, bias=False)
            torch.nn.init.eye_(self.bypass.weight)

        def forward(self, x):
            return self.fc(x) + self.bypass(x)

    model = init(Model1())
    optimizer = optim.SGD(model.named_parameters(), lr=0.01, momentum=0.9)
    x5 = torch.tensor(rng.normal(size=(4, 5)), dtype=torch.float32)
    optimizer.zero_grad()
    model(x5).square().mean().backward()
    optimizer.step()
    torch.save(optimizer.state_dict(), path)
    model2 = Model_bypass()
    optimizer2 = optim.SGD(model2.named_parameters(), lr=0.01, momentum=0.9)

    def adapt_state_dict_missing_param(optimizer, state_dict):
        adapted_state_dict = deepcopy(optimizer.state_dict())
        for k, v in state_dict['param_groups'][0].items():
            if k not in ['params', 'param_names']:
                adapted_state_dict['param_groups'][0][k] = v
        lookup_dict = {'fc.weight': 'fc.weight', 'fc.bias': 'fc.bias', 'bypass.weight': None}
        clone_deepcopy = lambda d: {k: (v.clone() if isinstance(v, torch.Tensor) else deepcopy(v))  # noqa: E731
                                    for k, v in d.items()}
        for param_id, param_name in zip(optimizer.state_dict()['param_groups'][0]['params'],
                                        optimizer.state_dict()['param_groups'][0]['param_names']):
            name_in_loaded = lookup_dict[param_name]
            if name_in_loaded in state_dict['param_groups'][0]['param_names']:
                index_in_loaded_list = state_dict['param_groups'][0]['param_names'].index(name_in_loaded)
                id_in_loaded = state_dict['param_groups'][0]['params'][index_in_loaded_list]
                if id_in_loaded in state_dict['state']:
                    adapted_state_dict['state'][param_id] = clone_deepcopy(state_dict['state'][id_in_loaded])
        return adapted_state_dict

    # (the page registers adapt_state_dict_ids here, a slip: it is written for the other model)
    optimizer2.register_load_state_dict_pre_hook(adapt_state_dict_missing_param)
    optimizer2.load_state_dict(torch.load(path))
    out["bypass_state"] = {n: sorted(optimizer2.state[p]) for n, p in model2.named_parameters()}
    out["bypass_eye"] = model2.bypass.weight.detach().cpu().numpy()

    def names_matching(optimizer, state_dict):
        assert len(state_dict['param_groups']) == len(optimizer.state_dict()['param_groups'])
        adapted_state_dict = deepcopy(optimizer.state_dict())
        for g_ind in range(len(state_dict['param_groups'])):
            assert len(state_dict['param_groups'][g_ind]['params']) == len(
                optimizer.state_dict()['param_groups'][g_ind]['params'])
            for k, v in state_dict['param_groups'][g_ind].items():
                if k not in ['params', 'param_names']:
                    adapted_state_dict['param_groups'][g_ind][k] = v
            for param_id, param_name in zip(optimizer.state_dict()['param_groups'][g_ind]['params'],
                                            optimizer.state_dict()['param_groups'][g_ind]['param_names']):
                index_in_loaded_list = state_dict['param_groups'][g_ind]['param_names'].index(param_name)
                id_in_loaded = state_dict['param_groups'][g_ind]['params'][index_in_loaded_list]
                if id_in_loaded in state_dict['state']:
                    adapted_state_dict['state'][param_id] = deepcopy(state_dict['state'][id_in_loaded])
        return adapted_state_dict

    # the same parameters handed over in the other order: matched by name, not by position
    reordered = optim.SGD(list(model.named_parameters())[::-1], lr=0.05, momentum=0.5)
    reordered.register_load_state_dict_pre_hook(names_matching)
    reordered.load_state_dict(optimizer.state_dict())
    out["names_matching"] = (reordered.param_groups[0]['lr'], reordered.param_groups[0]['param_names'],
                             [reordered.state[p]['momentum_buffer'].cpu().numpy() for n, p in model.named_parameters()],
                             [optimizer.state[p]['momentum_buffer'].cpu().numpy() for n, p in model.named_parameters()])
    return out


def test_optim_docs(tmp_path):
    out = optim_docs(lucid, str(tmp_path / "optim.pt"))
    assert out["groups"][0] == [(1e-2, 0.9, None), (1e-3, 0.9, None)]
    assert out["groups"][1] == [(1e-2, 0.9, ["weight", "bias"]), (1e-3, 0.9, ["weight", "bias"])]
    assert out["wd"] == [1e-2, 0]
    assert out["lbfgs"][1] < 8 and all(np.isfinite(out["lbfgs"]))
    # ExponentialLR(0.9) chained with MultiStepLR([3, 5], 0.1)
    expect = [0.01 * 0.9 ** (e + 1) * 0.1 ** ((e + 1 >= 3) + (e + 1 >= 5)) for e in range(7)]
    np.testing.assert_allclose(out["chained_lrs"], expect, rtol=1e-12)
    assert out["saved_names"] == ["fc.weight", "fc.bias"]
    # both experts start from fc's momentum buffers, and stay equal
    for got, want in zip(out["two_momentum"], out["fc_momentum"] * 2):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(out["resumed"][1], out["resumed"][2])
    assert out["bypass_state"] == {"fc.weight": ["momentum_buffer"], "fc.bias": ["momentum_buffer"],
                                   "bypass.weight": []}
    np.testing.assert_array_equal(out["bypass_eye"], np.eye(5))
    lr, names, loaded, saved = out["names_matching"]
    assert lr == 0.01 and names == ["fc.bias", "fc.weight"]
    for a, b in zip(loaded, saved):
        np.testing.assert_array_equal(a, b)


def test_optim_docs_bias_group_is_not_decayed():
    """One step of the page's two groups against one step without decay: the biases agree, the
    weights differ by exactly ``lr * weight_decay * w``."""
    lin = lucid.nn.Linear(3, 2).double()
    x = lucid.randn(4, 3, dtype=lucid.float64)
    start = {k: v.clone() for k, v in lin.state_dict().items()}
    after = []
    for wd in (1e-2, 0.0):
        lin.load_state_dict(start)
        bias = [p for n, p in lin.named_parameters() if "bias" in n]
        others = [p for n, p in lin.named_parameters() if "bias" not in n]
        opt = lucid.optim.SGD([{"params": others}, {"params": bias, "weight_decay": 0}], weight_decay=wd, lr=1e-2)
        opt.zero_grad()
        lin(x).square().sum().backward()
        opt.step()
        after.append({k: _np(v).copy() for k, v in lin.state_dict().items()})
    np.testing.assert_array_equal(after[0]["bias"], after[1]["bias"])
    np.testing.assert_allclose(after[1]["weight"] - after[0]["weight"], 1e-2 * 1e-2 * _np(start["weight"]),
                               rtol=1e-9, atol=1e-15)


def test_optim_docs_torch_parity(tmp_path):
    torch = _reference_torch()
    lo, to = optim_docs(lucid, str(tmp_path / "l.pt")), optim_docs(torch, str(tmp_path / "t.pt"))
    for k in ("groups", "wd", "saved_names", "bypass_state"):
        assert lo[k] == to[k], k
    np.testing.assert_allclose(lo["chained_lrs"], to["chained_lrs"], rtol=1e-12)
    np.testing.assert_allclose(lo["chained_loss"], to["chained_loss"], rtol=1e-5)
    np.testing.assert_allclose(lo["lbfgs"], to["lbfgs"], rtol=1e-3)  # float32 LBFGS amplifies rounding
    for k in lo["penalized"]:
        np.testing.assert_allclose(lo["penalized"][k], to["penalized"][k], rtol=1e-5, atol=1e-7)
    for a, b in zip(lo["two_momentum"] + list(lo["resumed"]), to["two_momentum"] + list(to["resumed"])):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    assert lo["names_matching"][:2] == to["names_matching"][:2]


# ------------------------------------------- functorch examples: MAML regression, Lennard-Jones
def maml_regression(torch, iterations=3):
    """functorch's ``maml_regression/evjang_transforms.py``: MAML on sine tasks with ``grad`` inside
    ``vmap``, then five steps of test-time adaptation through ``autograd.grad(create_graph=True)``."""
    func = importlib.import_module(torch.__name__ + ".func")
    grad, vmap = func.grad, func.vmap
    F = torch.nn.functional

    def net(params, x):
        x = F.linear(x, params[0], params[1])
        x = F.relu(x)
        x = F.linear(x, params[2], params[3])
        x = F.relu(x)
        x = F.linear(x, params[4], params[5])
        return x

    params = [
        torch.Tensor(40, 1).uniform_(-1., 1.).requires_grad_(),
        torch.Tensor(40).zero_().requires_grad_(),
        torch.Tensor(40, 40).uniform_(-1. / math.sqrt(40), 1. / math.sqrt(40)).requires_grad_(),
        torch.Tensor(40).zero_().requires_grad_(),
        torch.Tensor(1, 40).uniform_(-1. / math.sqrt(40), 1. / math.sqrt(40)).requires_grad_(),
        torch.Tensor(1).zero_().requires_grad_(),
    ]
    out = {"zeros": [float(params[i].abs().sum()) for i in (1, 3, 5)],
           "ranges": [(float(params[i].min()), float(params[i].max())) for i in (0, 2, 4)]}
    rng = np.random.default_rng(0)  # then the same start for both libraries
    with torch.no_grad():
        for p in params:
            p.copy_(torch.tensor(rng.uniform(-0.5, 0.5, size=tuple(p.shape)), dtype=torch.float))

    def mse_loss(x, y):
        return torch.mean((x - y) ** 2)

    opt = torch.optim.Adam(params, lr=1e-3)
    alpha = 0.1
    K = 20
    losses = []
    num_tasks = 4
    np.random.seed(0)

    def sample_tasks(outer_batch_size, inner_batch_size):
        As, phases = [], []
        for _ in range(outer_batch_size):
            As.append(np.random.uniform(low=0.1, high=.5))
            phases.append(np.random.uniform(low=0., high=np.pi))

        def get_batch():
            xs, ys = [], []
            for A, phase in zip(As, phases):
                x = np.random.uniform(low=-5., high=5., size=(inner_batch_size, 1))
                y = A * np.sin(x + phase)
                xs.append(x)
                ys.append(y)
            return torch.tensor(np.array(xs), dtype=torch.float), torch.tensor(np.array(ys), dtype=torch.float)
        x1, y1 = get_batch()
        x2, y2 = get_batch()
        return x1, y1, x2, y2

    for it in range(iterations):
        opt.zero_grad()

        def get_loss_for_task(x1, y1, x2, y2):
            def inner_loss(params, x1, y1):
                f = net(params, x1)
                return mse_loss(f, y1)

            grads = grad(inner_loss)(tuple(params), x1, y1)
            new_params = [(params[i] - alpha * grads[i]) for i in range(len(params))]
            v_f = net(new_params, x2)
            return mse_loss(v_f, y2)

        task = sample_tasks(num_tasks, K)
        inner_losses = vmap(get_loss_for_task)(task[0], task[1], task[2], task[3])
        loss2 = sum(inner_losses) / len(inner_losses)
        loss2.backward()
        if it == 0:
            out["task"] = [t.cpu().numpy() for t in task]
            out["first_grads"] = [p.grad.cpu().numpy().copy() for p in params]
            out["first_inner"] = inner_losses.detach().cpu().numpy()
        opt.step()
        losses.append(loss2.detach())
    out["losses"] = [float(l) for l in losses]

    t_A, t_b = torch.tensor(0.3), torch.tensor(1.0)  # the page draws them with uniform_
    t_x = torch.tensor(np.linspace(-4, 4, 4).reshape(4, 1), dtype=torch.float)
    t_y = t_A * torch.sin(t_x + t_b)
    opt.zero_grad()
    t_params = params
    t_losses = []
    for k in range(5):
        t_f = net(t_params, t_x)
        t_loss = F.l1_loss(t_f, t_y)
        t_losses.append(float(t_loss))
        grads = torch.autograd.grad(t_loss, t_params, create_graph=True)
        t_params = [(t_params[i] - alpha * grads[i]) for i in range(len(params))]
    out["t_losses"] = t_losses
    test_x = torch.arange(-2 * math.pi, 2 * math.pi, step=0.5).unsqueeze(1)
    out["test_f"] = net(t_params, test_x).detach().cpu().numpy()
    # the adapted parameters are functions of the meta-parameters (create_graph=True)
    (g0,) = torch.autograd.grad(t_params[0].sum(), [params[2]])
    out["second_order"] = g0.cpu().numpy()
    return out


def lennard_jones_fit(torch, epochs=3, n=20):
    """functorch's ``lennard_jones/lennard_jones.py``: a net fit to LJ energies and to forces taken
    as ``vmap(jacrev(model))`` of the energy."""
    func = importlib.import_module(torch.__name__ + ".func")
    jacrev, vmap = func.jacrev, func.vmap
    nn = torch.nn
    mse_loss = torch.nn.functional.mse_loss
    sigma = 0.5
    epsilon = 4.

    def lennard_jones(r):
        return epsilon * ((sigma / r)**12 - (sigma / r)**6)

    def lennard_jones_force(r):
        return -epsilon * ((-12 * sigma**12 / r**13) + (6 * sigma**6 / r**7))

    r = torch.linspace(0.5, 2 * sigma, n, requires_grad=True)
    drs = torch.outer(r, torch.tensor([1.0, 0, 0]))
    norms = torch.norm(drs, dim=1).reshape(-1, 1)
    training_energies = torch.stack(list(map(lennard_jones, norms))).reshape(-1, 1)
    training_forces = torch.stack([force * dr for force, dr in zip(map(lennard_jones_force, norms), drs)])
    model = nn.Sequential(nn.Linear(1, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(),
                          nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 1))
    rng = np.random.default_rng(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.tensor(rng.normal(scale=0.4, size=tuple(p.shape)), dtype=torch.float))

    def make_prediction(model, drs):
        norms = torch.norm(drs, dim=1).reshape(-1, 1)
        energies = model(norms)
        network_derivs = vmap(jacrev(model))(norms).squeeze(-1)
        forces = -network_derivs * drs / norms
        return energies, forces

    def loss_fn(energies, forces, predicted_energies, predicted_forces):
        return mse_loss(energies, predicted_energies) + 0.01 * mse_loss(forces, predicted_forces) / 3

    optimiser = torch.optim.Adam(model.parameters(), lr=1e-3)
    out = {"losses": []}
    for epoch in range(epochs):
        optimiser.zero_grad()
        energies, forces = make_prediction(model, drs)
        loss = loss_fn(training_energies, training_forces, energies, forces)
        loss.backward(retain_graph=True)
        optimiser.step()
        out["losses"].append(loss.cpu().item())
        if epoch == 0:
            out["forces0"] = forces.detach().cpu().numpy()
            out["grads0"] = [p.grad.cpu().numpy().copy() for p in model.parameters()]
    out["training"] = (training_energies.detach().cpu().numpy(), training_forces.detach().cpu().numpy())
    out["r_grad"] = None if r.grad is None else r.grad.cpu().numpy()
    # the forces are the energy's derivative: compare with autograd through the norms directly
    x = norms.detach().clone().requires_grad_(True)
    (d,) = torch.autograd.grad(model(x).sum(), [x])
    out["deriv_check"] = (vmap(jacrev(model))(x.detach()).squeeze(-1).detach().cpu().numpy(), d.cpu().numpy())
    return out


def _maml_net(params, x):
    F = lucid.nn.functional
    x = F.relu(F.linear(x, params[0], params[1]))
    x = F.relu(F.linear(x, params[2], params[3]))
    return F.linear(x, params[4], params[5])


def test_maml_regression():
    out = maml_regression(lucid)
    assert out["zeros"] == [0.0, 0.0, 0.0]  # torch.Tensor(n).zero_()
    bounds = [1.0, 1 / math.sqrt(40), 1 / math.sqrt(40)]  # torch.Tensor(...).uniform_(-b, b)
    assert all(-b <= lo < hi <= b for (lo, hi), b in zip(out["ranges"], bounds))
    # vmap(grad(...)) over the tasks against a loop of autograd.grad(create_graph=True)
    rng = np.random.default_rng(0)
    shapes = [(40, 1), (40,), (40, 40), (40,), (1, 40), (1,)]
    params = [lucid.tensor(rng.uniform(-0.5, 0.5, size=s), dtype=lucid.float32, requires_grad=True) for s in shapes]
    x1, y1, x2, y2 = (lucid.tensor(a) for a in out["task"])
    losses = []
    for t in range(4):
        inner = ((_maml_net(params, x1[t]) - y1[t]) ** 2).mean()
        grads = lucid.autograd.grad(inner, params, create_graph=True)
        adapted = [p - 0.1 * g for p, g in zip(params, grads)]
        losses.append(((_maml_net(adapted, x2[t]) - y2[t]) ** 2).mean())
    (sum(losses) / 4).backward()
    np.testing.assert_allclose(out["first_inner"], [float(v) for v in losses], rtol=1e-5)
    for got, p in zip(out["first_grads"], params):
        np.testing.assert_allclose(got, _np(p.grad), rtol=1e-4, atol=1e-6)
    assert all(np.isfinite(out["losses"])) and np.abs(out["second_order"]).max() > 0
    assert out["test_f"].shape == (26, 1)


def test_maml_regression_torch_parity():
    torch = _reference_torch()
    lo, to = maml_regression(lucid), maml_regression(torch)
    assert lo["zeros"] == to["zeros"]
    for k in ("losses", "t_losses", "first_inner"):
        np.testing.assert_allclose(lo[k], to[k], rtol=1e-5, atol=1e-6)
    for a, b in zip(lo["first_grads"] + [lo["second_order"], lo["test_f"]],
                    to["first_grads"] + [to["second_order"], to["test_f"]]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5 * np.abs(b).max())


def test_lennard_jones():
    out = lennard_jones_fit(lucid)
    r = np.linspace(0.5, 1.0, 20)
    energies, forces = out["training"]
    np.testing.assert_allclose(energies.ravel(), 4 * ((0.5 / r) ** 12 - (0.5 / r) ** 6), rtol=1e-5)
    magnitude = -4 * (-12 * 0.5 ** 12 / r ** 13 + 6 * 0.5 ** 6 / r ** 7)
    np.testing.assert_allclose(forces[:, 0], magnitude * r, rtol=1e-5)  # times dr = (r, 0, 0), as the page
    np.testing.assert_array_equal(forces[:, 1:], 0)
    jac, grad = out["deriv_check"]  # vmap(jacrev(model)) is the energy's derivative
    np.testing.assert_allclose(jac, grad, rtol=1e-5, atol=1e-7)
    assert out["losses"][-1] < out["losses"][0]
    assert out["r_grad"] is not None and np.isfinite(out["r_grad"]).all()


def test_lennard_jones_torch_parity():
    torch = _reference_torch()
    lo, to = lennard_jones_fit(lucid), lennard_jones_fit(torch)
    np.testing.assert_allclose(lo["losses"], to["losses"], rtol=1e-5)
    for a, b in zip([lo["forces0"], lo["r_grad"], *lo["training"], *lo["grads0"]],
                    [to["forces0"], to["r_grad"], *to["training"], *to["grads0"]]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5 * np.abs(b).max())


# ---------------------------------------------------------------------- what this batch fixed
@pytest.mark.parametrize("name", ["cond", "while_loop", "scan", "associative_scan", "map"])
def test_higher_order_ops_module_paths(name):
    import lucid._higher_order_ops as hop

    module = importlib.import_module(f"lucid._higher_order_ops.{name}")
    assert module.__name__ == f"lucid._higher_order_ops.{name}"
    function = getattr(module, name)
    assert callable(function) and function is getattr(hop, name)  # the package keeps the function
    assert getattr(hop, name).__name__ == name


def test_dynamo_config_keeps_known_settings_and_refuses_others():
    config = lucid._dynamo.config
    before = config.capture_scalar_outputs
    try:
        config.capture_scalar_outputs = True
        assert config.capture_scalar_outputs is True
        with pytest.raises(AttributeError, match="torch._dynamo.config.no_such_setting does not exist"):
            config.no_such_setting = 1
        with pytest.raises(AttributeError, match="does not exist"):
            config.no_such_setting  # noqa: B018
        limit = config.recompile_limit
        with config.patch(cache_size_limit=limit + 3):  # the old name of the same setting
            assert config.recompile_limit == limit + 3

        @config.patch("suppress_errors", True)
        def inside():
            return config.suppress_errors

        assert inside() is True and config.suppress_errors is False and config.recompile_limit == limit
    finally:
        config.capture_scalar_outputs = before
    lucid._dynamo.reset()
    lucid._dynamo.mark_dynamic(lucid.zeros(2, 3), 0)
    assert lucid._dynamo.disable is lucid.compiler.disable


def test_optimizer_step_hooks_order_arguments_and_removal():
    from lucid.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    w = lucid.zeros(2, requires_grad=True)
    opt = lucid.optim.SGD([w], lr=0.5)
    calls = []

    def pre(o, args, kwargs):
        calls.append(("pre", o is opt, len(args), args[0] is opt, dict(kwargs)))

    def replace_closure(o, args, kwargs):  # a pre-hook may hand the step new arguments
        return args, {"closure": lambda: lucid.tensor(7.0)}

    h = [register_optimizer_step_pre_hook(lambda o, a, k: calls.append("global pre")),
         opt.register_step_pre_hook(pre), opt.register_step_pre_hook(replace_closure),
         opt.register_step_post_hook(lambda o, a, k: calls.append(("post", w.tolist()))),
         register_optimizer_step_post_hook(lambda o, a, k: calls.append("global post"))]
    try:
        w.grad = lucid.ones(2)
        loss = opt.step(closure=None)
        assert float(loss) == 7.0
        assert calls == ["global pre", ("pre", True, 1, True, {"closure": None}), ("post", [-0.5, -0.5]),
                         "global post"]
    finally:
        for handle in h:
            handle.remove()
    calls.clear()
    opt.step()
    assert calls == [] and w.tolist() == [-1.0, -1.0]
    opt.register_step_pre_hook(lambda o, a, k: 3)
    with pytest.raises(RuntimeError, match="must return None or a tuple of \\(new_args, new_kwargs\\)"):
        opt.step()
    with pytest.raises(TypeError, match="SGD.register_step_post_hook: hook must be callable"):
        opt.register_step_post_hook(None)


def test_optimizer_step_hooks_run_once_for_a_subclass_and_are_not_copied():
    import copy

    class Halving(lucid.optim.SGD):
        def step(self, closure=None):
            for group in self.param_groups:
                group["lr"] /= 2
            return super().step(closure)

    w = lucid.zeros(1, requires_grad=True)
    opt = Halving([w], lr=1.0)
    seen = []
    opt.register_step_pre_hook(lambda o, a, k: seen.append(o.param_groups[0]["lr"]))
    w.grad = lucid.ones(1)
    opt.step()
    assert seen == [1.0] and w.tolist() == [-0.5]  # once, before the subclass's own step
    twin = copy.deepcopy(opt)
    assert len(twin._optimizer_step_pre_hooks) == 0 and len(opt._optimizer_step_pre_hooks) == 1
    twin.step()
    assert seen == [1.0]


def test_optimizer_state_dict_hooks():
    w = lucid.zeros(2, requires_grad=True)
    opt = lucid.optim.SGD([w], lr=0.1, momentum=0.9)
    order = []
    opt.register_state_dict_pre_hook(lambda o: order.append("pre"))
    opt.register_state_dict_post_hook(lambda o, sd: dict(sd, note="hooked"))
    opt.register_state_dict_post_hook(lambda o, sd: order.append(sd.get("note", "first")), prepend=True)
    sd = opt.state_dict()
    assert sd["note"] == "hooked" and order == ["pre", "first"]

    given = opt.state_dict()
    del given["note"]
    loaded = []

    def pre(o, state_dict):
        loaded.append(state_dict is given)
        state_dict["param_groups"] = [dict(g, lr=0.25) for g in state_dict["param_groups"]]

    opt.register_load_state_dict_pre_hook(pre)
    opt.register_load_state_dict_post_hook(lambda o: loaded.append(o.param_groups[0]["lr"]))
    opt.load_state_dict(given)
    assert loaded == [False, 0.25]  # the hook got a shallow copy; the dict handed in is unchanged
    assert given["param_groups"][0]["lr"] == 0.1 and opt.param_groups[0]["lr"] == 0.25
