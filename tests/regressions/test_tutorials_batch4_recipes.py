"""PyTorch recipes run on Lucid (``import lucid as torch``), fourth batch: "How to save memory by
fusing the optimizer step into the backward pass" (``register_post_accumulate_grad_hook``),
"Custom Python Operators" (``lucid.library.custom_op``/``register_fake``/``register_autograd``/
``opcheck``, a mutating op with no return), "Extension points in nn.Module for load_state_dict
and tensor subclasses" (``lucid.utils.swap_tensors``), "Introduction to torch.compile" and
"torch.export Tutorial" (Lucid's eager ``compile`` and its ``export``), and "Dynamic
Quantization on an LSTM Word Language Model" (``quantize_dynamic`` of ``nn.LSTM``/``nn.Linear``).
Models are shrunk; the parity tests run the same text on PyTorch where it is installed.
"""
import os
import sys
from typing import Sequence  # noqa: F401

import numpy as np
import pytest

import lucid
import lucid.export  # noqa: F401
import lucid.library  # noqa: F401
import lucid.nn  # noqa: F401
import lucid.optim  # noqa: F401
import lucid.quantization  # noqa: F401
import lucid.utils  # noqa: F401


def npy(t):
    return t.detach().cpu().numpy()


def _needs_cpu_default(why):
    if lucid.get_default_device().type != "cpu":
        pytest.skip(why + "; the default device is " + str(lucid.get_default_device()))


def _set_params(model, seed, scale=0.3):
    rng = np.random.default_rng(seed)
    mod = lucid if isinstance(model, lucid.nn.Module) else __import__("torch")
    with mod.no_grad():
        for p in model.parameters():
            p.copy_(mod.tensor(rng.normal(scale=scale, size=tuple(p.shape)), dtype=p.dtype))
    return model


# ---------------------------------------------------------------- optimizer step in backward

def optimizer_in_backward(torch, steps=4):
    nn = torch.nn
    device = torch.empty(0).device

    def make():
        return _set_params(nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.Linear(16, 16), nn.GELU(),
                                         nn.Linear(16, 3)), 0).to(device)

    model, reference = make(), make()
    optimizer_dict = {p: torch.optim.Adam([p], foreach=False) for p in model.parameters()}

    def optimizer_hook(parameter) -> None:
        optimizer_dict[parameter].step()
        optimizer_dict[parameter].zero_grad()

    for p in model.parameters():
        p.register_post_accumulate_grad_hook(optimizer_hook)

    ref_opt = torch.optim.Adam(reference.parameters(), foreach=False)
    rng = np.random.default_rng(1)
    losses = []
    for _ in range(steps):
        fake_image = torch.tensor(rng.normal(size=(4, 6)), dtype=torch.float32).to(device)
        loss = model.forward(fake_image)
        loss.sum().backward()
        # optimizer update --> no longer needed!
        ref_opt.zero_grad()
        reference(fake_image).sum().backward()
        ref_opt.step()
        losses.append(loss.sum().item())
    return dict(params=[npy(p) for p in model.parameters()], ref=[npy(p) for p in reference.parameters()],
                grads=[p.grad for p in model.parameters()], losses=losses,
                steps=[int(o.state[p]["step"]) for p, o in optimizer_dict.items()])


def test_optimizer_step_in_backward():
    out = optimizer_in_backward(lucid)
    assert all(g is None for g in out["grads"])  # each hook zeroed its own grad
    assert out["steps"] == [4] * 6
    for a, b in zip(out["params"], out["ref"]):
        np.testing.assert_array_equal(a, b)  # the same updates as one optimizer after backward
    assert out["losses"][-1] < out["losses"][0]


def test_optimizer_step_in_backward_torch_parity():
    torch = pytest.importorskip("torch")
    lo, to = optimizer_in_backward(lucid), optimizer_in_backward(torch)
    np.testing.assert_allclose(lo["losses"], to["losses"], rtol=1e-5)
    for a, b in zip(lo["params"], to["params"]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


# -------------------------------------------------------------------- Custom Python Operators

def test_custom_python_operators():
    _needs_cpu_default("the tutorial's kernels compute on the host (x.numpy(), device_types='cpu')")
    torch = lucid
    from lucid import Tensor

    @torch.library.custom_op("b4tut::numpy_sin", mutates_args=())
    def numpy_sin(x: Tensor) -> Tensor:
        x_np = x.cpu().numpy()
        y_np = np.sin(x_np)
        return torch.from_numpy(y_np).to(device=x.device)

    @numpy_sin.register_fake
    def _(x):
        return torch.empty_like(x)

    def setup_context(ctx, inputs, output):
        x, = inputs
        ctx.save_for_backward(x)

    def backward(ctx, grad):
        x, = ctx.saved_tensors
        return grad * x.cos()

    numpy_sin.register_autograd(backward, setup_context=setup_context)
    x = torch.randn(5, requires_grad=True, dtype=torch.float64)
    y = numpy_sin(x)
    y.sum().backward()
    np.testing.assert_allclose(npy(y), np.sin(npy(x)))
    np.testing.assert_allclose(npy(x.grad), np.cos(npy(x)))
    assert torch.library.opcheck(numpy_sin, (torch.randn(3),)) == {
        "test_schema": "SUCCESS", "test_autograd_registration": "SUCCESS", "test_faketensor": "SUCCESS",
        "test_aot_dispatch_dynamic": "SUCCESS"}

    @torch.compile(fullgraph=True)
    def f(x):
        return numpy_sin(x)

    x = torch.randn(3)
    assert torch.allclose(f(x), x.sin())

    # An operator that mutates its input and returns nothing: no fake kernel needed.
    @torch.library.custom_op("b4tut::numpy_sin_out", mutates_args={"output"}, device_types="cpu")
    def numpy_sin_out(input: Tensor, output: Tensor) -> None:
        assert input.device == output.device
        assert input.device.type == "cpu"
        input_np = input.numpy()
        output_np = output.numpy()
        np.sin(input_np, out=output_np)

    @torch.compile(fullgraph=True)
    def g(x):
        out = torch.empty(3)
        numpy_sin_out(x, out)
        return out

    x = torch.randn(3)
    y = g(x)
    assert torch.allclose(y, x.sin())
    example_inputs = [
        [torch.randn(3)],
        [torch.randn(0, 3)],
        [torch.randn(1, 2, 3, 4, dtype=torch.double)],
    ]
    for example in example_inputs:
        result = torch.library.opcheck(numpy_sin_out, [example[0], torch.empty_like(example[0])])
        assert set(result.values()) == {"SUCCESS"}


# ------------------------------------------------------------------------- swap_tensors

def swap_tensors_recipe(torch):
    nn = torch.nn
    out = {}
    t1 = torch.arange(2)
    t1.foo = "t1"
    t2 = torch.arange(3)
    t2.foo = "t2"
    torch.utils.swap_tensors(t1, t2)
    out["t1"], out["t2"] = (t1.tolist(), t1.foo), (t2.tolist(), t2.foo)

    p = nn.Parameter(torch.ones(2))
    t = torch.zeros(3)
    torch.utils.swap_tensors(p, t)
    out["classes"] = (type(p).__name__, type(t).__name__, p.requires_grad, t.requires_grad, t.tolist())

    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        m = nn.Linear(3, 5)
        weight, bias = m.weight, m.bias
        m.half()
        out["kept"] = (m.weight is weight, m.bias is bias, str(m.weight.dtype).split(".")[-1])
    finally:
        torch.__future__.set_swap_module_params_on_conversion(False)
    return out


def test_swap_tensors():
    out = swap_tensors_recipe(lucid)
    assert out["t1"] == ([0, 1, 2], "t2") and out["t2"] == ([0, 1], "t1")
    assert out["classes"] == ("Tensor", "Parameter", False, True, [1.0, 1.0])
    assert out["kept"] == (True, True, "float16")


def test_swap_tensors_refuses_weakrefs_and_non_tensors():
    import weakref

    a, b = lucid.ones(2), lucid.zeros(2)
    keep = weakref.ref(a)  # noqa: F841
    with pytest.raises(RuntimeError, match="^swap_tensors: cannot swap t1 because it has weakref"):
        lucid.utils.swap_tensors(a, b)
    with pytest.raises(TypeError, match="^swap_tensors: expected two Tensors"):
        lucid.utils.swap_tensors(b, np.zeros(2))
    assert b.tolist() == [0.0, 0.0]


def test_swap_tensors_moves_autograd_state_and_views():
    x = lucid.tensor([1.0, 2.0], requires_grad=True)
    y = x * 3  # a non-leaf with a grad_fn
    z = lucid.tensor([5.0, 6.0, 7.0])
    lucid.utils.swap_tensors(y, z)
    assert y.tolist() == [5.0, 6.0, 7.0] and y.grad_fn is None and not y.requires_grad
    assert z.grad_fn is not None
    z.sum().backward()
    assert x.grad.tolist() == [3.0, 3.0]
    base = lucid.zeros(4)
    v = base[1:3]
    other = lucid.ones(2)
    with pytest.raises(RuntimeError, match="^swap_tensors: cannot swap t1 because it is a view"):
        lucid.utils.swap_tensors(v, other)  # a limitation (see the docstring); PyTorch swaps views
    with pytest.raises(RuntimeError, match="^swap_tensors: cannot swap t2 because it is a view or has live"):
        lucid.utils.swap_tensors(other, base)
    del v
    lucid.utils.swap_tensors(other, base)  # no live view left
    assert other.tolist() == [0.0] * 4 and base.tolist() == [1.0, 1.0]


def test_swap_tensors_torch_parity():
    torch = pytest.importorskip("torch")
    assert swap_tensors_recipe(lucid) == swap_tensors_recipe(torch)


# ------------------------------------------------------------------- torch.compile intro

def compile_intro(torch):
    out = {}

    def foo(x, y):
        a = torch.sin(x)
        b = torch.cos(y)
        return a + b

    x, y = torch.linspace(-1, 1, 12).view(3, 4), torch.linspace(0, 2, 12).view(3, 4)
    opt_foo1 = torch.compile(foo)
    out["foo1"] = npy(opt_foo1(x, y))

    @torch.compile
    def opt_foo2(x, y):
        a = torch.sin(x)
        b = torch.cos(y)
        return a + b

    out["foo2"] = npy(opt_foo2(x, y))

    class MyModule(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 3)

        def forward(self, x):
            return torch.nn.functional.relu(self.lin(x))

    mod = _set_params(MyModule(), 3)
    opt_mod = torch.compile(mod)
    out["mod"] = npy(opt_mod(x))
    mod.compile()
    out["mod2"] = npy(mod(x))

    def bar(a, b):
        x = a / (torch.abs(a) + 1)
        if b.sum() < 0:
            b = b * -1
        return x * b

    opt_bar = torch.compile(bar)
    inp1 = torch.ones(10)
    inp2 = torch.ones(10)
    out["bar"] = (npy(opt_bar(inp1, inp2)), npy(opt_bar(inp1, -inp2)))
    out["compiling"] = torch.compiler.is_compiling()
    return out


def test_torch_compile_intro():
    out = compile_intro(lucid)
    x, y = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4), np.linspace(0, 2, 12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_allclose(out["foo1"], np.sin(x) + np.cos(y), rtol=1e-6)
    np.testing.assert_array_equal(out["foo1"], out["foo2"])
    np.testing.assert_array_equal(out["mod"], out["mod2"])
    np.testing.assert_array_equal(out["bar"][0], 0.5)
    np.testing.assert_array_equal(out["bar"][1], 0.5)
    assert out["compiling"] is False


def test_torch_compile_intro_torch_parity():
    torch = pytest.importorskip("torch")
    lo, to = compile_intro(lucid), compile_intro(torch)
    for k in ("foo1", "foo2", "mod", "mod2"):
        np.testing.assert_allclose(lo[k], to[k], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(lo["bar"], to["bar"])


# ------------------------------------------------------------------------ torch.export intro

def export_intro(torch, tmpdir):
    from importlib import import_module
    export_mod = import_module(torch.__name__ + ".export")
    export, Dim = export_mod.export, export_mod.Dim
    out = {}

    class MyModule(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(10, 4)

        def forward(self, x, y):
            return torch.nn.functional.relu(self.lin(x + y), inplace=True)

    mod = _set_params(MyModule(), 5)
    x, y = torch.linspace(-1, 1, 80).view(8, 10), torch.linspace(1, -0.5, 80).view(8, 10)
    exported_mod = torch.export.export(mod, (x, y))
    out["type"] = type(exported_mod).__name__
    out["run"] = npy(exported_mod.module()(x, y))
    out["eager"] = npy(mod(x, y))
    out["inputs"] = [(s.kind.name, s.target) for s in exported_mod.graph_signature.input_specs]

    class Bad1(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return torch.sin(x)
            return torch.cos(x)

    try:
        export(Bad1(), (torch.randn(3, 3),))
        out["bad1"] = None
    except Exception as e:
        out["bad1"] = "data-dependent" in str(e)

    class Cond(torch.nn.Module):
        def forward(self, x):
            def true_fn(x):
                return torch.sin(x)

            def false_fn(x):
                return torch.cos(x)

            return torch.cond(x.sum() > 0, true_fn, false_fn, [x])

    c = export(Cond(), (torch.ones(3, 3),)).module()
    out["cond"] = (npy(c(torch.full((3, 3), 0.5))), npy(c(torch.full((3, 3), -0.5))))

    class DynamicShapesExample1(torch.nn.Module):
        def forward(self, x):
            x = x[:, 2:]
            return torch.relu(x)

    inp1 = torch.randn(10, 10, 2)
    exported_mod1 = export(DynamicShapesExample1(), (inp1,))
    try:
        exported_mod1.module()(torch.randn(8, 7, 3))
        out["static_guard"] = None
    except Exception:
        out["static_guard"] = True
    inp1_dim0 = Dim("inp1_dim0")
    inp1_dim1 = Dim("inp1_dim1", min=4, max=18)
    dynamic_shapes1 = {"x": {0: inp1_dim0, 1: inp1_dim1}}
    ex = export(DynamicShapesExample1(), (inp1,), dynamic_shapes=dynamic_shapes1)
    out["dyn"] = tuple(ex.module()(torch.randn(5, 5, 2)).shape)
    refused = []
    for s in [(8, 1, 2), (8, 20, 2), (8, 8, 3)]:
        try:
            ex.module()(torch.randn(*s))
        except Exception:
            refused.append(s)
    out["refused"] = refused
    out["ranges"] = sorted((int(v.lower), int(v.upper) if v.upper < 10 ** 9 else None)
                           for v in ex.range_constraints.values())
    path = os.path.join(tmpdir, "exported_program.pt2")
    torch.export.save(ex, path)
    saved_exported_program = torch.export.load(path)
    out["loaded"] = npy(saved_exported_program.module()(torch.linspace(-1, 1, 50).view(5, 5, 2)))
    return out


def test_torch_export_intro(tmp_path):
    out = export_intro(lucid, str(tmp_path))
    assert out["type"] == "ExportedProgram"
    np.testing.assert_allclose(out["run"], out["eager"], rtol=1e-6)
    assert out["inputs"] == [("PARAMETER", "lin.weight"), ("PARAMETER", "lin.bias"), ("USER_INPUT", None),
                             ("USER_INPUT", None)]
    assert out["bad1"] is True and out["static_guard"] is True
    np.testing.assert_allclose(out["cond"][0], np.sin(0.5), rtol=1e-6)
    np.testing.assert_allclose(out["cond"][1], np.cos(-0.5), rtol=1e-6)
    assert out["dyn"] == (5, 3, 2)
    assert out["refused"] == [(8, 1, 2), (8, 20, 2), (8, 8, 3)]
    assert out["ranges"] == [(0, None), (4, 18)]
    x = np.linspace(-1, 1, 50, dtype=np.float32).reshape(5, 5, 2)
    np.testing.assert_allclose(out["loaded"], np.maximum(x[:, 2:], 0), rtol=1e-6)


def test_torch_export_intro_torch_parity(tmp_path):
    torch = pytest.importorskip("torch")
    (tmp_path / "l").mkdir()
    (tmp_path / "t").mkdir()
    lo, to = export_intro(lucid, str(tmp_path / "l")), export_intro(torch, str(tmp_path / "t"))
    for k in ("run", "eager", "loaded"):
        np.testing.assert_allclose(lo[k], to[k], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(lo["cond"], to["cond"], rtol=1e-6)
    for k in ("type", "inputs", "bad1", "static_guard", "dyn", "refused", "ranges"):
        assert lo[k] == to[k], k


# ----------------------------------------------- Dynamic quantization of an LSTM word language model

def dynamic_quantization_lstm(torch, seed=0):
    nn = torch.nn

    class LSTMModel(nn.Module):
        """Container module with an encoder, a recurrent module, and a decoder."""

        def __init__(self, ntoken, ninp, nhid, nlayers, dropout=0.5):
            super(LSTMModel, self).__init__()
            self.drop = nn.Dropout(dropout)
            self.encoder = nn.Embedding(ntoken, ninp)
            self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
            self.decoder = nn.Linear(nhid, ntoken)
            self.init_weights()
            self.nhid = nhid
            self.nlayers = nlayers

        def init_weights(self):
            initrange = 0.1
            self.encoder.weight.data.uniform_(-initrange, initrange)
            self.decoder.bias.data.zero_()
            self.decoder.weight.data.uniform_(-initrange, initrange)

        def forward(self, input, hidden):
            emb = self.drop(self.encoder(input))
            output, hidden = self.rnn(emb, hidden)
            output = self.drop(output)
            decoded = self.decoder(output)
            return decoded, hidden

        def init_hidden(self, bsz):
            weight = next(self.parameters())
            return (weight.new_zeros(self.nlayers, bsz, self.nhid),
                    weight.new_zeros(self.nlayers, bsz, self.nhid))

    ntokens = 20
    model = _set_params(LSTMModel(ntoken=ntokens, ninp=16, nhid=32, nlayers=2), seed)
    model.eval()
    rng = np.random.default_rng(seed + 1)
    test_data = torch.tensor(rng.integers(0, ntokens, 60)).view(-1, 1)
    bptt = 25
    criterion = nn.CrossEntropyLoss()
    eval_batch_size = 1

    def get_batch(source, i):
        seq_len = min(bptt, len(source) - 1 - i)
        data = source[i:i + seq_len]
        target = source[i + 1:i + 1 + seq_len].reshape(-1)
        return data, target

    def repackage_hidden(h):
        if isinstance(h, torch.Tensor):
            return h.detach()
        else:
            return tuple(repackage_hidden(v) for v in h)

    def evaluate(model_, data_source):
        model_.eval()
        total_loss = 0.
        hidden = model_.init_hidden(eval_batch_size)
        with torch.no_grad():
            for i in range(0, data_source.size(0) - 1, bptt):
                data, targets = get_batch(data_source, i)
                output, hidden = model_(data, hidden)
                hidden = repackage_hidden(hidden)
                output_flat = output.view(-1, ntokens)
                total_loss += len(data) * criterion(output_flat, targets).item()
        return total_loss / (len(data_source) - 1)

    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch's deprecation notices of torch.ao.quantization
        quantized_model = torch.quantization.quantize_dynamic(model, {nn.LSTM, nn.Linear}, dtype=torch.qint8)
        input_ = torch.tensor([[3]])
        with torch.no_grad():
            qout, qhidden = quantized_model(input_, quantized_model.init_hidden(1))
            fout, _ = model(input_, model.init_hidden(1))
        return dict(repr=repr(quantized_model), loss=evaluate(model, test_data),
                    qloss=evaluate(quantized_model, test_data), qout=npy(qout), fout=npy(fout),
                    qh=npy(qhidden[0]), keys=sorted(quantized_model.state_dict().keys()))


def test_dynamic_quantization_lstm():
    out = dynamic_quantization_lstm(lucid)
    assert "(rnn): DynamicQuantizedLSTM(16, 32, num_layers=2, dropout=0.5)" in out["repr"]
    assert "(decoder): DynamicQuantizedLinear(in_features=32, out_features=20, dtype=lucid.qint8" in out["repr"]
    assert out["qloss"] == pytest.approx(out["loss"], rel=1e-3) and out["qloss"] != out["loss"]
    assert out["qout"].shape == (1, 1, 20) and out["qh"].shape == (2, 1, 32)
    np.testing.assert_allclose(out["qout"], out["fout"], atol=0.02)


def test_dynamic_quantization_lstm_torch_parity():
    torch = pytest.importorskip("torch")
    lo, to = dynamic_quantization_lstm(lucid), dynamic_quantization_lstm(torch)
    assert lo["loss"] == pytest.approx(to["loss"], rel=1e-5)
    assert lo["qloss"] == pytest.approx(to["qloss"], rel=1e-5)
    np.testing.assert_allclose(lo["qout"], to["qout"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(lo["qh"], to["qh"], rtol=1e-4, atol=1e-5)
    assert lo["keys"] == to["keys"]
    assert lo["repr"].replace("lucid.", "torch.") == to["repr"]


def test_dynamic_quantization_state_dict_saves(tmp_path):
    # the tutorial's print_size_of_model: the int8 state dict is smaller, and it loads back
    nn = lucid.nn
    lucid.manual_seed(0)
    float_model = nn.Sequential(nn.Linear(64, 32))
    qm = lucid.quantization.quantize_dynamic(float_model, {nn.Linear}, dtype=lucid.qint8)
    qpath, fpath = str(tmp_path / "q.p"), str(tmp_path / "f.p")
    lucid.save(qm.state_dict(), qpath)
    lucid.save(float_model.state_dict(), fpath)
    assert os.path.getsize(qpath) < 0.5 * os.path.getsize(fpath)
    again = lucid.quantization.quantize_dynamic(nn.Sequential(nn.Linear(64, 32)), {nn.Linear}, dtype=lucid.qint8)
    again.load_state_dict(lucid.load(qpath))
    x = lucid.randn(3, 64)
    np.testing.assert_array_equal(again(x).numpy(), qm(x).numpy())
