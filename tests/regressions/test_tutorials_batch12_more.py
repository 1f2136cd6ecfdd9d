"""PyTorch tutorials and pytorch/examples code run on Lucid (``import lucid as torch``), twelfth batch:

- "Fusing Convolution and Batch Norm using Custom Function" (intermediate): the ``Conv2D``,
  ``BatchNorm`` and ``FusedConvBN2DFunction`` custom Functions (``once_differentiable``, hand-written
  backward through ``conv2d``/``conv_transpose2d``, in-place ``+=``/``*=``/``/=`` on the gradient
  buffers), ``gradcheck`` in float64 on each, then the MNIST ``Net`` fused and unfused trained with
  ``Adadelta`` and ``StepLR`` (sizes shrunk: 10x10 images, 4/6 channels; dropout set to 0 so the
  two libraries' random streams do not enter).
- "(beta) Explicit horizontal fusion with foreach_map and torch.compile" (recipe): Adam written with
  ``torch._higher_order_ops.foreach_map`` and ``torch._foreach_copy_``, run (under
  ``torch.compile`` on Lucid, eagerly on PyTorch's CPU) against ``torch.optim.Adam``.
- "Implementing a Keras Progress Bar" (recipe), its PyTorch part: the FashionMNIST-shaped
  ``NeuralNetwork`` (``Flatten`` and a ``Linear``/``ReLU`` stack, shrunk to 4x4 inputs), the
  traditional ``train_loop``/``test_loop`` with their printed report (``(pred.argmax(1) ==
  y).type(torch.float).sum().item()``), and the 80/20 ``random_split`` with its loaders; the
  ``keras.utils.Progbar`` half needs Keras and is left out.
- "(beta) Running the compiled optimizer with an LR Scheduler" (recipe): ``Adam`` with
  ``lr=torch.tensor(0.01)`` and ``LinearLR`` stepped inside a ``torch.compile(fullgraph=False)``
  function, then with a float lr under ``torch._logging.set_logs(recompiles=True)``.
- pytorch/examples' legacy ``OpenNMT/onmt/Models.py`` with ``modules/GlobalAttention.py`` and ``Optim.py``: a
  bidirectional ``nn.LSTM`` encoder, the ``StackedLSTM`` of ``LSTMCell``s with input feeding,
  global attention through ``bmm``, ``_fix_enc_hidden``'s view/transpose, ``Variable`` and
  ``tensor.data.new(...).zero_()``; trained a few SGD steps in float64 with ``NLLLoss(ignore_index=PAD)``
  through ``Optim`` (its gradient-norm clipping by ``math.pow(param.grad.data.norm(), 2)`` and
  ``grad.data.mul_``, learning-rate decay on perplexity).
  Its ``onmt/Dataset.py``: ``tensor.new(n, m).fill_(PAD)``, ``out[i].narrow(0, offset, n).copy_``
  (sources aligned right, targets left), ``.t().contiguous()``, ``Variable(out, volatile=...)``,
  ``torch.LongTensor(list)``, and ``shuffle`` through Python's ``random``.
  And its ``onmt/Beam.py``: beam search with ``torch.FloatTensor(size).zero_()``,
  ``torch.LongTensor(size).fill_``, ``topk(k, 0, True, True)`` over the flattened beam, back
  pointers, ``index_select``, ``sort`` and the walk back in ``getHyp``, driven by a toy decoder
  whose next-word log-probabilities depend on the current word.
- "Using Variable Length Attention in PyTorch": ``create_varlen_metadata`` (``nonzero(as_tuple=True)``,
  ``unique_consecutive``, ``diff``, int32 cumulative boundaries) and the ``SimpleVarlenTransformer``
  calling ``torch.nn.attention.varlen.varlen_attn`` on the packed ``(tokens, heads, head_dim)``
  q/k/v, forward and backward in float64 (PyTorch's kernel is CUDA-only: the parity test stands
  per-sequence causal SDPA in for it on PyTorch's side).

Data are synthetic and sizes tiny. Each page is a function of the module it is handed as
``torch``; the parity tests run the same text on PyTorch where it is installed.

Adapted where the original does not run on PyTorch 2.13 either or where Lucid differs on purpose:
the legacy ``Beam`` divides ``bestScoresId // numWords`` (its ``/`` is a true division since PyTorch 1.5, and ``index_select``
refuses the float result); the toy decoder's table has no tied scores, where PyTorch orders tied
``topk``/``sort`` entries as its kernel happens to (Lucid's are stable); the legacy
``GlobalAttention`` is its later version (``self.`` attributes, returning ``attn``,
``Softmax(dim=1)``) and ``context.t()`` on the 3-D context is ``context.transpose(0, 1)``; the
foreach_map page's ``get_inputs`` wraps Lucid's int ``state["step"]`` in a tensor (README
"Differences from PyTorch": Lucid keeps an int step) and passes ``lr=0.01`` to match the eager
optimizer (the page compares against ``lr=1e-3``); the varlen page's ``is_causal=True`` (a
nightly's keyword) is ``window_size=(-1, 0)``, the spelling of PyTorch 2.13, which refuses ``is_causal``.

Fixed on the way: ``torch._higher_order_ops.foreach_map`` did not exist
(``from lucid._higher_order_ops.foreach_map import foreach_map`` raised ``ModuleNotFoundError``;
as in eager PyTorch its keyword arguments are options of the higher-order op, not passed to ``op``);
``torch.nn.attention.varlen`` (``varlen_attn``, ``AuxRequest``) did not exist; ``torch._logging``
did not exist (``torch._logging.set_logs(recompiles=True)`` raised ``AttributeError``).
"""
import io
import math
import random
import re
import warnings
from contextlib import redirect_stdout
from importlib import import_module
from types import SimpleNamespace

import numpy as np
import pytest

import lucid
import lucid.nn  # noqa: F401
import lucid.optim  # noqa: F401
import lucid.utils.data  # noqa: F401
from lucid._higher_order_ops.foreach_map import foreach_map
from lucid.nn.attention.varlen import AuxRequest, varlen_attn


def convbn_page(torch, seed_weights, gradchecks=True):
    nn = torch.nn
    F = torch.nn.functional
    once_differentiable = import_module(torch.__name__ + ".autograd.function").once_differentiable
    optim = torch.optim
    StepLR = import_module(torch.__name__ + ".optim.lr_scheduler").StepLR
    out = {}
    def convolution_backward(grad_out, X, weight):
        grad_input = F.conv2d(X.transpose(0, 1), grad_out.transpose(0, 1)).transpose(0, 1)
        grad_X = F.conv_transpose2d(grad_out, weight)
        return grad_X, grad_input

    class Conv2D(torch.autograd.Function):
        @staticmethod
        def forward(ctx, X, weight):
            ctx.save_for_backward(X, weight)
            return F.conv2d(X, weight)
        @staticmethod
        @once_differentiable
        def backward(ctx, grad_out):
            X, weight = ctx.saved_tensors
            return convolution_backward(grad_out, X, weight)

    weight = torch.rand(2, 3, 3, 3, requires_grad=True, dtype=torch.double)
    X = torch.rand(2, 3, 4, 4, requires_grad=True, dtype=torch.double)
    if gradchecks:
        out["gc_conv"] = torch.autograd.gradcheck(Conv2D.apply, (X, weight))

    def unsqueeze_all(t):
        return t[None, :, None, None]

    def batch_norm_backward(grad_out, X, sum, sqrt_var, N, eps):
        tmp = -((X - unsqueeze_all(sum) / N) * grad_out).sum(dim=(0, 2, 3))
        d_denom = tmp / (sqrt_var + eps)**2
        d_var = d_denom / (2 * sqrt_var)
        d_mean_dx = grad_out / unsqueeze_all(sqrt_var + eps)
        d_mean_dx = unsqueeze_all(-d_mean_dx.sum(dim=(0, 2, 3)) / N)
        grad_input = X * unsqueeze_all(d_var * N)
        grad_input += unsqueeze_all(-d_var * sum)
        grad_input *= 2 / ((N - 1) * N)
        grad_input += d_mean_dx
        grad_input *= unsqueeze_all(sqrt_var + eps)
        grad_input += grad_out
        grad_input /= unsqueeze_all(sqrt_var + eps)
        return grad_input

    class BatchNorm(torch.autograd.Function):
        @staticmethod
        def forward(ctx, X, eps=1e-3):
            sum = X.sum(dim=(0, 2, 3))
            var = X.var(unbiased=True, dim=(0, 2, 3))
            N = X.numel() / X.size(1)
            sqrt_var = torch.sqrt(var)
            ctx.save_for_backward(X)
            ctx.eps = eps
            ctx.sum = sum
            ctx.N = N
            ctx.sqrt_var = sqrt_var
            mean = sum / N
            denom = sqrt_var + eps
            return (X - unsqueeze_all(mean)) / unsqueeze_all(denom)
        @staticmethod
        @once_differentiable
        def backward(ctx, grad_out):
            X, = ctx.saved_tensors
            return batch_norm_backward(grad_out, X, ctx.sum, ctx.sqrt_var, ctx.N, ctx.eps)

    a = torch.rand(1, 2, 3, 4, requires_grad=True, dtype=torch.double)
    if gradchecks:
        out["gc_bn"] = torch.autograd.gradcheck(BatchNorm.apply, (a,), fast_mode=False)

    class FusedConvBN2DFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, X, conv_weight, eps=1e-3):
            assert X.ndim == 4
            ctx.save_for_backward(X, conv_weight)
            X = F.conv2d(X, conv_weight)
            sum = X.sum(dim=(0, 2, 3))
            var = X.var(unbiased=True, dim=(0, 2, 3))
            N = X.numel() / X.size(1)
            sqrt_var = torch.sqrt(var)
            ctx.eps = eps
            ctx.sum = sum
            ctx.N = N
            ctx.sqrt_var = sqrt_var
            mean = sum / N
            denom = sqrt_var + eps
            out = X - unsqueeze_all(mean)
            out /= unsqueeze_all(denom)
            return out
        @staticmethod
        def backward(ctx, grad_out):
            X, conv_weight, = ctx.saved_tensors
            X_conv_out = F.conv2d(X, conv_weight)
            grad_out = batch_norm_backward(grad_out, X_conv_out, ctx.sum, ctx.sqrt_var, ctx.N, ctx.eps)
            grad_X, grad_input = convolution_backward(grad_out, X, conv_weight)
            return grad_X, grad_input, None, None, None, None, None

    class FusedConvBN(nn.Module):
        def __init__(self, in_channels, out_channels, kernel_size, exp_avg_factor=0.1,
                     eps=1e-3, device=None, dtype=None):
            super(FusedConvBN, self).__init__()
            factory_kwargs = {'device': device, 'dtype': dtype}
            weight_shape = (out_channels, in_channels, kernel_size, kernel_size)
            self.conv_weight = nn.Parameter(torch.empty(*weight_shape, **factory_kwargs))
            self.num_features = out_channels
            self.eps = eps
            self.reset_parameters()
        def forward(self, X):
            return FusedConvBN2DFunction.apply(X, self.conv_weight, self.eps)
        def reset_parameters(self) -> None:
            nn.init.kaiming_uniform_(self.conv_weight, a=math.sqrt(5))

    weight = torch.rand(2, 3, 3, 3, requires_grad=True, dtype=torch.double)
    X = torch.rand(2, 3, 4, 4, requires_grad=True, dtype=torch.double)
    if gradchecks:
        out["gc_fused"] = torch.autograd.gradcheck(FusedConvBN2DFunction.apply, (X, weight))

    class Net(nn.Module):
        def __init__(self, fused=True):
            super(Net, self).__init__()
            self.fused = fused
            if fused:
                self.convbn1 = FusedConvBN(1, 4, 3)
                self.convbn2 = FusedConvBN(4, 6, 3)
            else:
                self.conv1 = nn.Conv2d(1, 4, 3, 1, bias=False)
                self.bn1 = nn.BatchNorm2d(4, affine=False, track_running_stats=False)
                self.conv2 = nn.Conv2d(4, 6, 3, 1, bias=False)
                self.bn2 = nn.BatchNorm2d(6, affine=False, track_running_stats=False)
            self.fc1 = nn.Linear(6 * 3 * 3, 16)
            self.dropout = nn.Dropout(0.5)
            self.fc2 = nn.Linear(16, 10)
        def forward(self, x):
            x = self.convbn1(x) if self.fused else self.bn1(self.conv1(x))
            x = F.relu(x)
            x = self.convbn2(x) if self.fused else self.bn2(self.conv2(x))
            x = F.relu(x)
            x = F.max_pool2d(x, 2)
            x = F.relu(x)
            x = x.flatten(1)
            x = self.fc1(x)
            x = self.dropout(x)
            x = F.relu(x)
            x = self.fc2(x)
            return F.log_softmax(x, dim=1)

    data = torch.tensor(seed_weights["data"])
    target = torch.tensor(seed_weights["target"])
    ds = torch.utils.data.TensorDataset(data, target)
    train_loader = torch.utils.data.DataLoader(ds, batch_size=8)
    losses = {}
    for fused in (True, False):
        torch.manual_seed(123456)
        model = Net(fused=fused)
        # same weights for both (fused names differ)
        sd = model.state_dict()
        keys = [k for k in sd]
        for k, v in zip([k for k in keys], ["w1", "w2", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]):
            sd[k] = torch.tensor(seed_weights[v])
        model.load_state_dict(sd)
        model.dropout.p = 0.0
        optimizer = optim.Adadelta(model.parameters(), lr=1.0)
        scheduler = StepLR(optimizer, step_size=1, gamma=0.7)
        ls = []
        for epoch in range(2):
            model.train()
            for batch_idx, (d, t) in enumerate(train_loader):
                optimizer.zero_grad()
                output = model(d)
                loss = F.nll_loss(output, t)
                loss.backward()
                optimizer.step()
                ls.append(loss.item())
            model.eval()
            test_loss = 0
            correct = 0
            with torch.inference_mode():
                for d, t in train_loader:
                    output = model(d)
                    test_loss += F.nll_loss(output, t, reduction='sum').item()
                    pred = output.argmax(dim=1, keepdim=True)
                    correct += pred.eq(t.view_as(pred)).sum().item()
            ls.append(test_loss)
            ls.append(correct)
            scheduler.step()
        losses[fused] = ls
    out["losses"] = losses
    return out

def make_weights():
    rng = np.random.default_rng(0)
    return {"data": rng.standard_normal((16, 1, 10, 10)).astype(np.float32),
            "target": rng.integers(0, 10, 16),
            "w1": (rng.standard_normal((4, 1, 3, 3)) * 0.3).astype(np.float32),
            "w2": (rng.standard_normal((6, 4, 3, 3)) * 0.3).astype(np.float32),
            "fc1.weight": (rng.standard_normal((16, 54)) * 0.1).astype(np.float32),
            "fc1.bias": np.zeros(16, np.float32),
            "fc2.weight": (rng.standard_normal((10, 16)) * 0.2).astype(np.float32),
            "fc2.bias": np.zeros(10, np.float32)}


def foreach_page(torch, W, compile=True):
    model = torch.nn.Sequential(*[torch.nn.Linear(6, 6, False) for _ in range(3)])
    model_copy = torch.nn.Sequential(*[torch.nn.Linear(6, 6, False) for _ in range(3)])
    with torch.no_grad():
        for i in range(3):
            model[i].weight.copy_(torch.tensor(W[i]))
            model_copy[i].weight.copy_(torch.tensor(W[i]))
    input = torch.tensor(W[3])
    output = model(input)
    output_copy = model_copy(input)
    output.sum().backward()
    output_copy.sum().backward()
    foreach_map = import_module(torch.__name__ + "._higher_order_ops.foreach_map").foreach_map
    def get_inputs(optim):
        steps = []
        params = []
        grads = []
        exp_avgs = []
        exp_avg_sqs = []
        for group in optim.param_groups:
            for p in group["params"]:
                params.append(p)
                grads.append(p.grad)
                state = optim.state[p]
                exp_avgs.append(state["exp_avg"])
                exp_avg_sqs.append(state["exp_avg_sq"])
                step = state["step"]
                steps.append(step if torch.is_tensor(step) else torch.tensor(float(step)))  # Lucid keeps an int step
        return steps, params, exp_avgs, exp_avg_sqs
    def update_exp_avg_sq(exp_avg_sq, grad, beta2):
        return exp_avg_sq.mul(beta2).addcmul(grad, grad, value=1 - beta2)
    def update_param(param, step, exp_avg, exp_avg_sq, beta1, beta2, lr, eps):
        bias_correction1 = 1 - torch.pow(beta1, step)
        bias_correction2 = (1 - torch.pow(beta2, step)).sqrt()
        step_size = (lr / bias_correction1).neg()
        denom = (exp_avg_sq.sqrt() / (bias_correction2 * step_size)).add(eps / step_size)
        return torch.add(param, torch.div(exp_avg, denom))
    def foreach_map_adam(steps, params, exp_avgs, exp_avg_sqs, weight_decay=0, beta1=0.9, beta2=0.999, lr=1e-3,
                         eps=1e-8):
        with torch.no_grad():
            grads = [param.grad for param in params]
            updated_steps = foreach_map(lambda x: x + 1, steps)
            torch._foreach_copy_(steps, updated_steps)
            if weight_decay != 0:
                foreach_map(torch.add, (grads,), alpha=weight_decay)
            exp_avgs_updated = foreach_map(torch.lerp, exp_avgs, grads, 1 - beta1)
            exp_avgs_sq_updated = foreach_map(update_exp_avg_sq, exp_avg_sqs, grads, beta2)
            params_updated = foreach_map(update_param, params, steps, exp_avgs_updated, exp_avgs_sq_updated,
                                         beta1, beta2, lr, eps)
            torch._foreach_copy_(exp_avgs, exp_avgs_updated)
            torch._foreach_copy_(exp_avg_sqs, exp_avgs_sq_updated)
            torch._foreach_copy_(params, params_updated)
        return
    opt_eager = torch.optim.Adam(model.parameters(), lr=torch.tensor(0.01))
    opt_eager_copy = torch.optim.Adam(model_copy.parameters(), lr=torch.tensor(0.01))
    opt_eager.step()
    opt_eager_copy.step()
    inputs = get_inputs(opt_eager_copy)
    compiled_adam = torch.compile(foreach_map_adam) if compile else foreach_map_adam
    if compile:
        torch._logging.set_logs(output_code=True)
    for _ in range(5):
        opt_eager.step()
        compiled_adam(*inputs, lr=0.01)
    if compile:
        torch._logging.set_logs()
    close = [bool(torch.allclose(e, c, atol=1e-6))
             for e, c in zip(opt_eager.param_groups[0]["params"], opt_eager_copy.param_groups[0]["params"])]
    return close, [p.detach().cpu().numpy().copy() for p in model_copy.parameters()], [float(s) for s in inputs[0]]


def onmt_page(torch, W):
    nn = torch.nn
    PAD = 0

    class GlobalAttention(nn.Module):
        def __init__(self, dim):
            super(GlobalAttention, self).__init__()
            self.linear_in = nn.Linear(dim, dim, bias=False)
            self.sm = nn.Softmax(dim=1)
            self.linear_out = nn.Linear(dim * 2, dim, bias=False)
            self.tanh = nn.Tanh()
        def forward(self, input, context):
            targetT = self.linear_in(input).unsqueeze(2)
            attn = torch.bmm(context, targetT).squeeze(2)
            attn = self.sm(attn)
            attn3 = attn.view(attn.size(0), 1, attn.size(1))
            weightedContext = torch.bmm(attn3, context).squeeze(1)
            contextCombined = torch.cat((weightedContext, input), 1)
            contextOutput = self.tanh(self.linear_out(contextCombined))
            return contextOutput, attn

    class Encoder(nn.Module):
        def __init__(self, opt, vocab):
            self.layers = opt.layers
            self.num_directions = 2 if opt.brnn else 1
            assert opt.rnn_size % self.num_directions == 0
            self.hidden_size = opt.rnn_size // self.num_directions
            super(Encoder, self).__init__()
            self.word_lut = nn.Embedding(vocab, opt.word_vec_size, padding_idx=PAD)
            self.rnn = nn.LSTM(opt.word_vec_size, self.hidden_size, num_layers=opt.layers,
                               dropout=opt.dropout, bidirectional=opt.brnn)
        def forward(self, input, hidden=None):
            emb = self.word_lut(input)
            if hidden is None:
                batch_size = emb.size(1)
                h_size = (self.layers * self.num_directions, batch_size, self.hidden_size)
                h_0 = torch.autograd.Variable(emb.data.new(*h_size).zero_(), requires_grad=False)
                c_0 = torch.autograd.Variable(emb.data.new(*h_size).zero_(), requires_grad=False)
                hidden = (h_0, c_0)
            outputs, hidden_t = self.rnn(emb, hidden)
            return hidden_t, outputs

    class StackedLSTM(nn.Module):
        def __init__(self, num_layers, input_size, rnn_size, dropout):
            super(StackedLSTM, self).__init__()
            self.dropout = nn.Dropout(dropout)
            self.num_layers = num_layers
            self.layers = nn.ModuleList()
            for i in range(num_layers):
                self.layers.append(nn.LSTMCell(input_size, rnn_size))
                input_size = rnn_size
        def forward(self, input, hidden):
            h_0, c_0 = hidden
            h_1, c_1 = [], []
            for i, layer in enumerate(self.layers):
                h_1_i, c_1_i = layer(input, (h_0[i], c_0[i]))
                input = h_1_i
                if i != self.num_layers:
                    input = self.dropout(input)
                h_1 += [h_1_i]
                c_1 += [c_1_i]
            return input, (torch.stack(h_1), torch.stack(c_1))

    class Decoder(nn.Module):
        def __init__(self, opt, vocab):
            self.layers = opt.layers
            self.input_feed = opt.input_feed
            input_size = opt.word_vec_size
            if self.input_feed:
                input_size += opt.rnn_size
            super(Decoder, self).__init__()
            self.word_lut = nn.Embedding(vocab, opt.word_vec_size, padding_idx=PAD)
            self.rnn = StackedLSTM(opt.layers, input_size, opt.rnn_size, opt.dropout)
            self.attn = GlobalAttention(opt.rnn_size)
            self.dropout = nn.Dropout(opt.dropout)
            self.hidden_size = opt.rnn_size
        def forward(self, input, hidden, context, init_output):
            emb = self.word_lut(input)
            outputs = []
            output = init_output
            for emb_t in emb.split(1):
                emb_t = emb_t.squeeze(0)
                if self.input_feed:
                    emb_t = torch.cat([emb_t, output], 1)
                output, hidden = self.rnn(emb_t, hidden)
                output, attn = self.attn(output, context.transpose(0, 1))  # legacy: context.t()
                output = self.dropout(output)
                outputs += [output]
            return torch.stack(outputs), hidden, attn

    class NMTModel(nn.Module):
        def __init__(self, encoder, decoder, generator):
            super(NMTModel, self).__init__()
            self.encoder = encoder
            self.decoder = decoder
            self.generator = generator
            self.generate = False
        def set_generate(self, enabled):
            self.generate = enabled
        def make_init_decoder_output(self, context):
            batch_size = context.size(1)
            h_size = (batch_size, self.decoder.hidden_size)
            return torch.autograd.Variable(context.data.new(*h_size).zero_(), requires_grad=False)
        def _fix_enc_hidden(self, h):
            if self.encoder.num_directions == 2:
                return h.view(h.size(0) // 2, 2, h.size(1), h.size(2)) \
                        .transpose(1, 2).contiguous() \
                        .view(h.size(0) // 2, h.size(1), h.size(2) * 2)
            return h
        def forward(self, input):
            src = input[0]
            tgt = input[1][:-1]
            enc_hidden, context = self.encoder(src)
            init_output = self.make_init_decoder_output(context)
            enc_hidden = (self._fix_enc_hidden(enc_hidden[0]), self._fix_enc_hidden(enc_hidden[1]))
            out, dec_hidden, _attn = self.decoder(tgt, enc_hidden, context, init_output)
            if self.generate:
                out = self.generator(out)
            return out

    opt = SimpleNamespace(layers=2, brnn=True, rnn_size=6, word_vec_size=5, dropout=0.0, input_feed=1)
    V = 9
    model = NMTModel(Encoder(opt, V), Decoder(opt, V), nn.Sequential(nn.Linear(opt.rnn_size, V), nn.LogSoftmax(dim=-1)))
    model.double()
    sd = model.state_dict()
    rng = np.random.default_rng(3)
    model.load_state_dict({k: torch.tensor(rng.uniform(-0.3, 0.3, tuple(v.shape))) for k, v in sd.items()})
    model.set_generate(True)
    src = torch.tensor(W["src"])
    tgt = torch.tensor(W["tgt"])
    optim = torch.optim

    class Optim(object):  # onmt/Optim.py
        def _makeOptimizer(self):
            if self.method == 'sgd':
                self.optimizer = optim.SGD(self.params, lr=self.lr)
            else:
                raise RuntimeError("Invalid optim method: " + self.method)

        def __init__(self, params, method, lr, max_grad_norm, lr_decay=1, start_decay_at=None):
            self.params = list(params)
            self.last_ppl = None
            self.lr = lr
            self.max_grad_norm = max_grad_norm
            self.method = method
            self.lr_decay = lr_decay
            self.start_decay_at = start_decay_at
            self.start_decay = False
            self._makeOptimizer()

        def step(self):
            grad_norm = 0
            for param in self.params:
                grad_norm += math.pow(param.grad.data.norm(), 2)
            grad_norm = math.sqrt(grad_norm)
            shrinkage = self.max_grad_norm / grad_norm
            for param in self.params:
                if shrinkage < 1:
                    param.grad.data.mul_(shrinkage)
            self.optimizer.step()
            return grad_norm

        def updateLearningRate(self, ppl, epoch):
            if self.start_decay_at is not None and epoch >= self.start_decay_at:
                self.start_decay = True
            if self.last_ppl is not None and ppl > self.last_ppl:
                self.start_decay = True
            if self.start_decay:
                self.lr = self.lr * self.lr_decay
            self.last_ppl = ppl
            self._makeOptimizer()

    crit = nn.NLLLoss(ignore_index=PAD, reduction="sum")
    optimizer = Optim(model.parameters(), "sgd", 1.0, max_grad_norm=1, lr_decay=0.5, start_decay_at=3)
    losses, norms, lrs = [], [], []
    n_words = int(tgt[1:].ne(PAD).sum())
    for epoch in range(1, 5):
        model.zero_grad()
        out = model((src, tgt))
        loss = crit(out.view(-1, V), tgt[1:].reshape(-1))
        loss.backward()
        norms.append(optimizer.step())
        losses.append(loss.item())
        optimizer.updateLearningRate(math.exp(loss.item() / n_words), epoch)
        lrs.append(optimizer.lr)
    grads = {k: p.grad.cpu().numpy().copy() for k, p in model.named_parameters()}
    return losses, grads, list(sd.keys()), norms, lrs


def varlen_page(torch, varlen_attn, tokens, W):
    nn = torch.nn
    def create_varlen_metadata(input_batch, eos_id: int):
        batch_size, seq_len = input_batch.shape
        device = input_batch.device
        cu_seqlens_list, all_seq_lengths = [], []
        offset = 0
        for b in range(batch_size):
            tokens = input_batch[b]
            eos_positions = (tokens == eos_id).nonzero(as_tuple=True)[0].to(torch.int32)
            sample_cu_seqlens = torch.cat([
                torch.tensor([0], dtype=torch.int32, device=device),
                eos_positions + 1,
                torch.tensor([seq_len], dtype=torch.int32, device=device)])
            sample_cu_seqlens = torch.unique_consecutive(sample_cu_seqlens)
            seq_lengths = torch.diff(sample_cu_seqlens)
            all_seq_lengths.append(seq_lengths)
            cu_seqlens_adjusted = sample_cu_seqlens[:-1] + offset
            cu_seqlens_list.append(cu_seqlens_adjusted)
            offset += seq_len
        packed_cu_seqlens = torch.cat(cu_seqlens_list + [torch.tensor([offset], dtype=torch.int32, device=device)])
        max_seqlen = 0
        if len(all_seq_lengths) > 0:
            all_seq_lengths = torch.cat(all_seq_lengths)
            max_seqlen = all_seq_lengths.max().item()
        return packed_cu_seqlens, max_seqlen

    class SimpleVarlenAttention(nn.Module):
        def __init__(self, embed_dim: int, num_heads: int):
            super().__init__()
            self.embed_dim = embed_dim
            self.num_heads = num_heads
            self.head_dim = embed_dim // num_heads
            self.qkv_proj = nn.Linear(embed_dim, 3 * embed_dim, bias=False)
            self.out_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        def forward(self, x, cu_seq, max_len: int):
            batch_size, seq_len, _ = x.shape
            x_packed = x.view(batch_size * seq_len, -1)
            qkv = self.qkv_proj(x_packed)
            q, k, v = qkv.chunk(3, dim=-1)
            q = q.view(-1, self.num_heads, self.head_dim)
            k = k.view(-1, self.num_heads, self.head_dim)
            v = v.view(-1, self.num_heads, self.head_dim)
            attn_out = varlen_attn(query=q, key=k, value=v, cu_seq_q=cu_seq, cu_seq_k=cu_seq,
                                   max_q=max_len, max_k=max_len, window_size=(-1, 0))  # page: is_causal=True
            attn_out = attn_out.view(-1, self.embed_dim)
            attn_out = self.out_proj(attn_out)
            return attn_out.view(batch_size, seq_len, self.embed_dim)

    class SimpleVarlenTransformer(nn.Module):
        def __init__(self, vocab_size: int, embed_dim: int, num_heads: int):
            super().__init__()
            self.tok_embeddings = nn.Embedding(vocab_size, embed_dim)
            self.attention = SimpleVarlenAttention(embed_dim, num_heads)
            self.norm = nn.LayerNorm(embed_dim)
        def forward(self, tokens, cu_seq, max_len: int):
            x = self.tok_embeddings(tokens)
            x = x + self.attention(x, cu_seq, max_len)
            x = self.norm(x)
            return x

    torch.manual_seed(42)
    vocab_size, embed_dim, num_heads, eos_id = 50, 8, 2, 2
    model = SimpleVarlenTransformer(vocab_size, embed_dim, num_heads).to(dtype=torch.float64)
    sd = model.state_dict()
    model.load_state_dict({k: torch.tensor(W[k]) for k in sd})
    input_batch = torch.tensor(tokens)
    cu_seq, max_len = create_varlen_metadata(input_batch, eos_id)
    output = model(input_batch, cu_seq, max_len)
    loss = output.mean()
    loss.backward()
    grads = {k: p.grad.cpu().numpy().copy() for k, p in model.named_parameters()}
    return cu_seq.tolist(), max_len, output.detach().cpu().numpy(), grads


def _varlen_tokens_and_weights():
    rng = np.random.default_rng(7)
    tok = rng.integers(3, 50, (3, 12))
    tok[0, [3, 7]] = 2
    tok[1, [5]] = 2
    tok[2, [4, 5]] = 2
    tok[:, -1] = 2
    W = {"tok_embeddings.weight": rng.standard_normal((50, 8)),
         "attention.qkv_proj.weight": rng.standard_normal((24, 8)) * 0.3,
         "attention.out_proj.weight": rng.standard_normal((8, 8)) * 0.3,
         "norm.weight": 1 + 0.1 * rng.standard_normal(8), "norm.bias": 0.1 * rng.standard_normal(8)}
    return tok, W


def _torch_varlen_reference(torch):
    """PyTorch's varlen_attn needs CUDA: per-sequence causal SDPA on the CPU stands in for it."""
    def varlen(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, window_size=(-1, -1)):
        assert window_size == (-1, 0) and cu_seq_q is cu_seq_k
        b = cu_seq_q.tolist()
        outs = [torch.nn.functional.scaled_dot_product_attention(
            query[s:e].transpose(0, 1), key[s:e].transpose(0, 1), value[s:e].transpose(0, 1),
            is_causal=True).transpose(0, 1) for s, e in zip(b, b[1:])]
        return torch.cat(outs)
    return varlen


def beam_page(torch, table, attn_table):
    Constants = type("Constants", (), {"PAD": 0, "BOS": 2, "EOS": 3})

    class Beam(object):
        def __init__(self, size, cuda=False):
            self.size = size
            self.done = False
            self.tt = torch.cuda if cuda else torch
            self.scores = self.tt.FloatTensor(size).zero_()
            self.prevKs = []
            self.nextYs = [self.tt.LongTensor(size).fill_(Constants.PAD)]
            self.nextYs[0][0] = Constants.BOS
            self.attn = []
        def getCurrentState(self):
            return self.nextYs[-1]
        def getCurrentOrigin(self):
            return self.prevKs[-1]
        def advance(self, wordLk, attnOut):
            numWords = wordLk.size(1)
            if len(self.prevKs) > 0:
                beamLk = wordLk + self.scores.unsqueeze(1).expand_as(wordLk)
            else:
                beamLk = wordLk[0]
            flatBeamLk = beamLk.view(-1)
            bestScores, bestScoresId = flatBeamLk.topk(self.size, 0, True, True)
            self.scores = bestScores
            prevK = bestScoresId // numWords  # legacy: `/`, a true division on PyTorch 2.x
            self.prevKs.append(prevK)
            self.nextYs.append(bestScoresId - prevK * numWords)
            self.attn.append(attnOut.index_select(0, prevK))
            if self.nextYs[-1][0] == Constants.EOS:
                self.done = True
            return self.done
        def sortBest(self):
            return torch.sort(self.scores, 0, True)
        def getBest(self):
            scores, ids = self.sortBest()
            return scores[1], ids[1]
        def getHyp(self, k):
            hyp, attn = [], []
            for j in range(len(self.prevKs) - 1, -1, -1):
                hyp.append(self.nextYs[j+1][k])
                attn.append(self.attn[j][k])
                k = self.prevKs[j][k]
            return hyp[::-1], torch.stack(attn[::-1])

    # a toy "decoder": next-word log-probs and attention depend on the current word only
    logp = torch.log_softmax(torch.tensor(table, dtype=torch.float32), dim=1)
    attn = torch.softmax(torch.tensor(attn_table, dtype=torch.float32), dim=1)
    beam = Beam(3)
    steps = 0
    while not beam.done and steps < 8:
        state = beam.getCurrentState()
        beam.advance(logp.index_select(0, state), attn.index_select(0, state))
        steps += 1
    scores, ks = beam.sortBest()
    hyps = []
    for k in ks.tolist():
        hyp, a = beam.getHyp(k)
        hyps.append(([int(h) for h in hyp], a.cpu().numpy().copy()))
    best = beam.getBest()
    return steps, beam.done, scores.cpu().numpy(), hyps, float(best[0]), int(best[1])

def _beam_tables():
    rng = np.random.default_rng(11)
    t = rng.standard_normal((7, 7)) * 2
    t[:, 3] += 0.0  # no ties: PyTorch orders tied topk/sort entries as its kernel happens to
    return t, rng.standard_normal((7, 4))


def compiled_opt_lr_sched_page(torch, W, compile=True):
    model = torch.nn.Sequential(*[torch.nn.Linear(6, 6, False) for _ in range(3)])
    with torch.no_grad():
        for m, w in zip(model, W[:3]):
            m.weight.copy_(torch.tensor(w))
    input = torch.tensor(W[3])
    output = model(input)
    output.sum().backward()
    maybe_compile = torch.compile(fullgraph=False) if compile else (lambda f: f)
    opt = torch.optim.Adam(model.parameters(), lr=torch.tensor(0.01))
    sched = torch.optim.lr_scheduler.LinearLR(opt, total_iters=5)

    @maybe_compile
    def fn():
        opt.step()
        sched.step()

    lrs = []
    for _ in range(5):
        fn()
        lr = opt.param_groups[0]["lr"]
        lrs.append((torch.is_tensor(lr), float(lr)))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.LinearLR(opt, total_iters=5)

    @maybe_compile
    def fn():
        opt.step()
        sched.step()

    if compile:
        torch._logging.set_logs(recompiles=True)
    for _ in range(5):
        fn()
        lr = opt.param_groups[0]["lr"]
        lrs.append((torch.is_tensor(lr), float(lr)))
    if compile:
        torch._logging.set_logs(recompiles=False)
    return lrs, [p.detach().cpu().numpy().copy() for p in model.parameters()]


def onmt_dataset_page(torch, seqs_src, seqs_tgt):
    Variable = torch.autograd.Variable
    PAD = 0

    class Dataset(object):
        def __init__(self, srcData, tgtData, batchSize, cuda, volatile=False):
            self.src = srcData
            if tgtData:
                self.tgt = tgtData
                assert(len(self.src) == len(self.tgt))
            else:
                self.tgt = None
            self.cuda = cuda
            self.batchSize = batchSize
            self.numBatches = math.ceil(len(self.src)/batchSize)
            self.volatile = volatile
        def _batchify(self, data, align_right=False):
            max_length = max(x.size(0) for x in data)
            out = data[0].new(len(data), max_length).fill_(PAD)
            for i in range(len(data)):
                data_length = data[i].size(0)
                offset = max_length - data_length if align_right else 0
                out[i].narrow(0, offset, data_length).copy_(data[i])
            out = out.t().contiguous()
            if self.cuda:
                out = out.cuda()
            v = Variable(out, volatile=self.volatile)
            return v
        def __getitem__(self, index):
            assert index < self.numBatches, "%d > %d" % (index, self.numBatches)
            srcBatch = self._batchify(self.src[index*self.batchSize:(index+1)*self.batchSize], align_right=True)
            if self.tgt:
                tgtBatch = self._batchify(self.tgt[index*self.batchSize:(index+1)*self.batchSize])
            else:
                tgtBatch = None
            return srcBatch, tgtBatch
        def __len__(self):
            return self.numBatches
        def shuffle(self):
            zipped = list(zip(self.src, self.tgt))
            random.shuffle(zipped)
            self.src, self.tgt = [x[0] for x in zipped], [x[1] for x in zipped]

    src = [torch.LongTensor(s) for s in seqs_src]
    tgt = [torch.LongTensor(s) for s in seqs_tgt]
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch: "volatile was removed and now has no effect"
        for volatile in (False, True):
            data = Dataset(src, tgt, 3, cuda=False, volatile=volatile)
            random.seed(5)
            data.shuffle()
            batches = [(s.tolist(), t.tolist(), s.dtype == torch.int64, s.requires_grad)
                       for s, t in (data[i] for i in range(len(data)))]
            out.append((len(data), batches))
    return out


def _onmt_sequences():
    rng = np.random.default_rng(2)
    return ([rng.integers(1, 9, rng.integers(1, 6)).tolist() for _ in range(7)],
            [rng.integers(1, 9, rng.integers(2, 5)).tolist() for _ in range(7)])


def keras_pbar_traditional_page(torch, X, Y, W):
    nn = torch.nn
    DataLoader = torch.utils.data.DataLoader
    BATCH_SIZE = 8
    training_data = torch.utils.data.TensorDataset(torch.tensor(X), torch.tensor(Y))
    test_data = torch.utils.data.TensorDataset(torch.tensor(X[:12]), torch.tensor(Y[:12]))
    train_dataloader = DataLoader(training_data, batch_size=BATCH_SIZE)
    test_dataloader = DataLoader(test_data, batch_size=BATCH_SIZE)

    class NeuralNetwork(nn.Module):
        def __init__(self):
            super().__init__()
            self.flatten = nn.Flatten()
            self.linear_relu_stack = nn.Sequential(
                nn.Linear(4 * 4, 12), nn.ReLU(), nn.Linear(12, 12), nn.ReLU(), nn.Linear(12, 10))
        def forward(self, x):
            x = self.flatten(x)
            logits = self.linear_relu_stack(x)
            return logits

    def train_loop(dataloader, model, batch_size, loss_fn, optimizer):
        size = len(dataloader.dataset)
        model.train()
        for batch, (X, y) in enumerate(dataloader):
            pred = model(X)
            loss = loss_fn(pred, y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            if batch % 2 == 0:
                loss, current = loss.item(), batch * batch_size + len(X)
                print(f"loss: {loss:>7f}  [{current:>5d}/{size:>5d}]")

    def test_loop(dataloader, model, loss_fn):
        model.eval()
        size = len(dataloader.dataset)
        num_batches = len(dataloader)
        test_loss, correct = 0, 0
        with torch.no_grad():
            for X, y in dataloader:
                pred = model(X)
                test_loss += loss_fn(pred, y).item()
                correct += (pred.argmax(1) == y).type(torch.float).sum().item()
        test_loss /= num_batches
        correct /= size
        print(f"Test Error: \n Accuracy: {(100*correct):>0.1f}%, Avg loss: {test_loss:>8f} \n")

    model = NeuralNetwork()
    sd = model.state_dict()
    model.load_state_dict({k: torch.tensor(W[k]) for k in sd})
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    buf = io.StringIO()
    with redirect_stdout(buf):
        for t in range(3):
            print(f"Epoch {t+1}\n-------------------------------")
            train_loop(train_dataloader, model, BATCH_SIZE, loss_fn, optimizer)
            test_loop(test_dataloader, model, loss_fn)
        print("Done!")
    new_train_set, val_set = torch.utils.data.random_split(
        training_data, [int(len(training_data) * 0.8), int(len(training_data) * 0.2)])
    new_train_dataloader = DataLoader(new_train_set, batch_size=BATCH_SIZE)
    val_dataloader = DataLoader(val_set, batch_size=BATCH_SIZE)
    sizes = (len(train_dataloader), len(train_dataloader.dataset), len(new_train_dataloader),
             len(new_train_dataloader.dataset), len(val_dataloader), len(val_dataloader.dataset))
    split = sorted(new_train_set.indices + val_set.indices)
    return buf.getvalue(), sizes, split

def _keras_data():
    rng = np.random.default_rng(9)
    X = rng.standard_normal((30, 1, 4, 4)).astype(np.float32)
    Y = rng.integers(0, 10, 30)
    W = {"linear_relu_stack.0.weight": rng.standard_normal((12, 16)) * 0.3, "linear_relu_stack.0.bias": np.zeros(12),
         "linear_relu_stack.2.weight": rng.standard_normal((12, 12)) * 0.3, "linear_relu_stack.2.bias": np.zeros(12),
         "linear_relu_stack.4.weight": rng.standard_normal((10, 12)) * 0.3, "linear_relu_stack.4.bias": np.zeros(10)}
    return X, Y, {k: v.astype(np.float32) for k, v in W.items()}

def _numbers(text):
    return [float(x) for x in re.findall(r"-?\d+\.\d+", text)]


def _fmap_weights():
    rng = np.random.default_rng(1)
    W = [rng.standard_normal((6, 6)) * 0.4 for _ in range(3)] + [rng.random(6)]
    return [w.astype(np.float32) for w in W]


_ONMT_DATA = {"src": np.random.default_rng(4).integers(1, 9, (5, 3)),
              "tgt": np.random.default_rng(5).integers(1, 9, (4, 3))}
_ONMT_DATA["tgt"][-1, 0] = 0


def test_custom_function_conv_bn():
    r = convbn_page(lucid, make_weights())
    assert r["gc_conv"] and r["gc_bn"] and r["gc_fused"]
    for fused in (True, False):
        ls = r["losses"][fused]
        assert ls[6] < ls[2]  # summed eval loss after epoch 2 below epoch 1
    # fused and unfused differ only by where eps enters the normalisation
    np.testing.assert_allclose(r["losses"][True], r["losses"][False], rtol=1e-3)


def test_custom_function_conv_bn_torch_parity():
    torch = pytest.importorskip("torch")
    w = make_weights()
    r, t = convbn_page(lucid, w), convbn_page(torch, w, gradchecks=False)  # PyTorch checks its own conv
    for fused in (True, False):
        np.testing.assert_allclose(r["losses"][fused], t["losses"][fused], rtol=1e-5, atol=1e-5)


def test_foreach_map_adam():
    close, params, steps = foreach_page(lucid, _fmap_weights())
    assert close == [True, True, True] and steps == [6.0, 6.0, 6.0]


def test_foreach_map_adam_torch_parity():
    torch = pytest.importorskip("torch")
    W = _fmap_weights()
    r, t = foreach_page(lucid, W), foreach_page(torch, W, compile=False)
    assert t[0] == [True, True, True] and t[2] == r[2]
    for a, b in zip(r[1], t[1]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_foreach_map_zips_repeats_and_keeps_kwargs_out_of_op():
    xs = [lucid.tensor([1.0, 2.0]), lucid.tensor([3.0])]
    ys = [lucid.tensor([10.0, 20.0]), lucid.tensor([30.0]), lucid.tensor([99.0])]
    got = foreach_map(lucid.add, xs, ys)  # zipped to the shorter list
    assert [g.tolist() for g in got] == [[11.0, 22.0], [33.0]]
    got = foreach_map(lambda a, s, t: a * s + t, xs, 2.0, lucid.tensor(1.0))  # non-lists repeat
    assert [g.tolist() for g in got] == [[3.0, 5.0], [7.0]]
    # kwargs are options of the higher-order op: as eager PyTorch, op does not see them
    assert [g.tolist() for g in foreach_map(lucid.add, xs, ys, alpha=5)] == [[11.0, 22.0], [33.0]]
    assert foreach_map(lambda a: a + 1, lucid.tensor(1.0)).item() == 2.0  # no list: one call
    with pytest.raises(TypeError, match="foreach_map"):
        foreach_map(3, xs)


def test_foreach_map_is_differentiable():
    a = lucid.tensor([0.5, -1.0], dtype=lucid.float64, requires_grad=True)
    b = lucid.tensor([2.0], dtype=lucid.float64, requires_grad=True)
    outs = foreach_map(lambda x, w: lucid.lerp(x, x * x, w), [a, b], 0.25)
    (outs[0].sum() + outs[1].sum()).backward()
    # d/dx (x + w (x^2 - x)) = 1 + w (2x - 1)
    lucid.testing.assert_close(a.grad, 1 + 0.25 * (2 * a.detach() - 1))
    lucid.testing.assert_close(b.grad, 1 + 0.25 * (2 * b.detach() - 1))


def test_keras_progress_bar_traditional_loops():
    X, Y, W = _keras_data()
    text, sizes, split = keras_pbar_traditional_page(lucid, X, Y, W)
    assert sizes == (4, 30, 3, 24, 1, 6) and split == list(range(30))
    assert text.count("Epoch ") == 3 and text.rstrip().endswith("Done!") and "[    8/   30]" in text
    acc = [float(a) for a in re.findall(r"Accuracy: ([\d.]+)%", text)]
    avg = [float(a) for a in re.findall(r"Avg loss: +([\d.]+)", text)]
    assert len(acc) == len(avg) == 3 and avg[0] > avg[1] > avg[2] and acc[2] > acc[0]
    assert all(round(a * 12 / 100) * 100 / 12 == pytest.approx(a, abs=0.05) for a in acc)  # k/12 correct


def test_keras_progress_bar_traditional_loops_torch_parity():
    torch = pytest.importorskip("torch")
    X, Y, W = _keras_data()
    r, t = keras_pbar_traditional_page(lucid, X, Y, W), keras_pbar_traditional_page(torch, X, Y, W)
    assert r[1] == t[1] and r[2] == t[2]
    np.testing.assert_allclose(_numbers(r[0]), _numbers(t[0]), atol=2e-6)


def test_compiled_optimizer_with_lr_scheduler():
    lrs, params = compiled_opt_lr_sched_page(lucid, _fmap_weights())
    # LinearLR from start_factor 1/3 to 1 over 5 steps; the tensor lr stays a tensor
    expected = [0.01 * (1 / 3 + (2 / 3) * i / 5) for i in range(1, 6)]
    assert [t for t, _ in lrs] == [True] * 5 + [False] * 5
    np.testing.assert_allclose([v for _, v in lrs[:5]], expected, rtol=1e-6)
    np.testing.assert_allclose([v for _, v in lrs[5:]], expected, rtol=1e-12)
    assert lucid._logging.settings["recompiles"] is False  # the page's set_logs was undone


def test_compiled_optimizer_with_lr_scheduler_torch_parity():
    torch = pytest.importorskip("torch")
    W = _fmap_weights()
    r, t = compiled_opt_lr_sched_page(lucid, W), compiled_opt_lr_sched_page(torch, W, compile=False)
    assert [x for x, _ in r[0]] == [x for x, _ in t[0]]
    np.testing.assert_allclose([v for _, v in r[0]], [v for _, v in t[0]], rtol=1e-7)
    for a, b in zip(r[1], t[1]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_set_logs_checks_its_keywords_as_pytorch():
    lucid._logging.set_logs(recompiles=True, dynamo=10)
    assert lucid._logging.settings["recompiles"] is True and lucid._logging.settings["dynamo"] == 10
    lucid._logging.set_logs(output_code=True)  # a call resets what it does not name
    assert lucid._logging.settings["recompiles"] is False and lucid._logging.settings["output_code"] is True
    with pytest.raises(TypeError, match="unexpected keyword argument 'foo'"):
        lucid._logging.set_logs(foo=True)
    with pytest.raises(ValueError, match="Unrecognized log level for log dynamo"):
        lucid._logging.set_logs(dynamo="x")
    with pytest.raises(ValueError, match="Expected bool to enable artifact recompiles"):
        lucid._logging.set_logs(recompiles=1)
    lucid._logging.set_logs()
    assert lucid._logging.settings["output_code"] is False


def test_legacy_opennmt_models():
    losses, grads, keys, norms, lrs = onmt_page(lucid, _ONMT_DATA)
    assert all(b < a for a, b in zip(losses, losses[1:]))
    assert "decoder.rnn.layers.1.weight_hh" in keys and "encoder.rnn.weight_ih_l1_reverse" in keys
    assert np.abs(grads["decoder.word_lut.weight"][0]).max() == 0.0  # padding_idx row gets no gradient
    assert norms[0] > 1 and lrs == [1.0, 1.0, 0.5, 0.25]  # clipped to max_grad_norm; decay from epoch 3


def test_legacy_opennmt_models_torch_parity():
    torch = pytest.importorskip("torch")
    r, t = onmt_page(lucid, _ONMT_DATA), onmt_page(torch, _ONMT_DATA)
    assert r[2] == t[2]
    np.testing.assert_allclose(r[0], t[0], rtol=1e-12)
    np.testing.assert_allclose(r[3], t[3], rtol=1e-12)
    assert r[4] == t[4]
    for k in t[1]:
        np.testing.assert_allclose(r[1][k], t[1][k], rtol=1e-9, atol=1e-12)


def test_legacy_opennmt_dataset():
    S, T = _onmt_sequences()
    (n, batches), (n_v, batches_v) = onmt_dataset_page(lucid, S, T)
    assert n == n_v == 3 and batches == batches_v
    random.seed(5)
    order = list(zip(S, T))
    random.shuffle(order)
    for b, (src, tgt, is_long, rg) in enumerate(batches):
        assert is_long and not rg
        chunk = order[3 * b:3 * b + 3]
        width = max(len(x) for x, _ in chunk)
        assert np.array(src).T.tolist() == [[0] * (width - len(x)) + x for x, _ in chunk]  # right-aligned
        width = max(len(y) for _, y in chunk)
        assert np.array(tgt).T.tolist() == [y + [0] * (width - len(y)) for _, y in chunk]  # left-aligned


def test_legacy_opennmt_dataset_torch_parity():
    torch = pytest.importorskip("torch")
    S, T = _onmt_sequences()
    assert onmt_dataset_page(lucid, S, T) == onmt_dataset_page(torch, S, T)


def test_legacy_opennmt_beam():
    table, attn_table = _beam_tables()
    steps, done, scores, hyps, best_score, best_id = beam_page(lucid, table, attn_table)
    assert done and steps == 4 and hyps[0][0][-1] == 3  # the top hypothesis ends with EOS
    assert list(scores) == sorted(scores, reverse=True) and best_score == scores[1] and best_id == 1
    logp = table - np.log(np.exp(table).sum(1, keepdims=True))
    att = np.exp(attn_table) / np.exp(attn_table).sum(1, keepdims=True)
    for score, (hyp, a) in zip(scores, hyps):  # each score is the path's summed log-probability from BOS
        path = [2] + hyp
        np.testing.assert_allclose(score, sum(logp[u, w] for u, w in zip(path, path[1:])), rtol=1e-5)
        np.testing.assert_allclose(a, att[path[:-1]], rtol=1e-5)


def test_legacy_opennmt_beam_torch_parity():
    torch = pytest.importorskip("torch")
    table, attn_table = _beam_tables()
    r, t = beam_page(lucid, table, attn_table), beam_page(torch, table, attn_table)
    assert r[:2] == t[:2] and r[4:] == pytest.approx(t[4:], rel=1e-6)
    np.testing.assert_allclose(r[2], t[2], rtol=1e-6)
    for (hr, ar), (ht, at) in zip(r[3], t[3]):
        assert hr == ht
        np.testing.assert_allclose(ar, at, rtol=1e-5, atol=1e-7)


def test_variable_length_attention():
    tok, W = _varlen_tokens_and_weights()
    cu, max_len, out, grads = varlen_page(lucid, varlen_attn, tok, W)
    assert cu == [0, 4, 8, 12, 18, 24, 29, 30, 36] and max_len == 6 and type(max_len) is int
    assert out.shape == (3, 12, 8)
    # LayerNorm output: per-token mean is the bias mean when the weight is folded out
    normed = (out - W["norm.bias"]) / W["norm.weight"]
    np.testing.assert_allclose(normed.mean(-1), 0.0, atol=1e-12)
    assert set(grads) == set(W) and all(np.isfinite(g).all() for g in grads.values())


def test_variable_length_attention_torch_parity():
    torch = pytest.importorskip("torch")
    tok, W = _varlen_tokens_and_weights()
    r = varlen_page(lucid, varlen_attn, tok, W)
    t = varlen_page(torch, _torch_varlen_reference(torch), tok, W)
    assert r[0] == t[0] and r[1] == t[1]
    np.testing.assert_allclose(r[2], t[2], rtol=1e-12, atol=1e-12)
    for k in t[3]:
        np.testing.assert_allclose(r[3][k], t[3][k], rtol=1e-9, atol=1e-13)


def _varlen_loop(q, k, v, bq, bk, window, scale):
    """Reference: one SDPA per sequence with an explicit bottom-right-aligned window mask, and the
    log-sum-exp of the masked scores."""
    outs, lses = [], []
    hq, hk = q.shape[1], k.shape[1]
    for (a, b), (c, d) in zip(zip(bq, bq[1:]), zip(bk, bk[1:])):
        lq, lk = b - a, d - c
        allowed = [[(window[0] < 0 or s >= t + lk - lq - window[0]) and (window[1] < 0 or s <= t + lk - lq + window[1])
                    for s in range(lk)] for t in range(lq)]
        mask = lucid.tensor(allowed, dtype=lucid.bool)
        kk = k[c:d].repeat_interleave(hq // hk, dim=1)
        vv = v[c:d].repeat_interleave(hq // hk, dim=1)
        sc = (q[a:b].transpose(0, 1) @ kk.transpose(0, 1).transpose(1, 2)) * scale
        sc = sc.masked_fill(~mask, -math.inf)
        p = lucid.softmax(sc, dim=-1).nan_to_num(0.0)
        outs.append((p @ vv.transpose(0, 1)).transpose(0, 1))
        lses.append(lucid.logsumexp(sc, dim=-1).transpose(0, 1))
    return lucid.cat(outs), lucid.cat(lses)


def test_varlen_attn_windows_gqa_and_lse_against_a_loop():
    g = lucid.Generator().manual_seed(0)
    q = lucid.randn(9, 4, 3, dtype=lucid.float64, generator=g)
    k = lucid.randn(11, 2, 3, dtype=lucid.float64, generator=g)
    v = lucid.randn(11, 2, 5, dtype=lucid.float64, generator=g)
    bq, bk = [0, 2, 6, 9], [0, 4, 5, 11]
    cq, ck = lucid.tensor(bq, dtype=lucid.int32), lucid.tensor(bk, dtype=lucid.int32)
    for window in [(-1, -1), (-1, 0), (1, 0), (2, 1)]:
        out, lse = varlen_attn(q, k, v, cq, ck, 4, 6, window_size=window, enable_gqa=True, scale=0.7,
                               return_aux=AuxRequest(lse=True))
        ref, ref_lse = _varlen_loop(q, k, v, bq, bk, window, 0.7)
        lucid.testing.assert_close(out, ref)
        lucid.testing.assert_close(lse, ref_lse)
    # window (2, 1), sequence 1 (4 queries, 1 key, aligned to the last query): its first two
    # queries have no key in reach, give 0 and an lse of -inf; the other two see the key
    assert bool(lucid.isneginf(lse[2:4]).all()) and float(out[2:4].abs().sum()) == 0.0
    assert bool(lucid.isfinite(lse[4:6]).all())


def test_varlen_attn_gradcheck_and_errors():
    g = lucid.Generator().manual_seed(1)
    q, k, v = (lucid.randn(5, 2, 3, dtype=lucid.float64, generator=g, requires_grad=True) for _ in range(3))
    cu = lucid.tensor([0, 2, 5], dtype=lucid.int32)
    assert lucid.autograd.gradcheck(lambda q, k, v: varlen_attn(q, k, v, cu, cu, 3, 3, window_size=(-1, 0)),
                                    (q, k, v))
    with pytest.raises(ValueError, match="max_q=2"):
        varlen_attn(q, k, v, cu, cu, 2, 3)
    with pytest.raises(ValueError, match="cu_seq_k must start at 0"):
        varlen_attn(q, k, v, cu, lucid.tensor([0, 4, 2], dtype=lucid.int32), 3, 3)
    with pytest.raises(ValueError, match="query heads"):
        varlen_attn(q, k[:, :1], v[:, :1], cu, cu, 3, 3)
    with pytest.raises(NotImplementedError, match="paged KV cache"):
        varlen_attn(q, k, v, cu, cu, 3, 3, seqused_k=lucid.tensor([2, 3], dtype=lucid.int32))


def test_varlen_attn_under_vmap_and_forward_mode():
    cu = lucid.tensor([0, 2, 5], dtype=lucid.int32)

    def f(q):
        return varlen_attn(q, q, q, cu, cu, 3, 3, window_size=(-1, 0))

    g = lucid.Generator().manual_seed(2)
    Q = lucid.randn(2, 5, 2, 3, dtype=lucid.float64, generator=g)
    lucid.testing.assert_close(lucid.func.vmap(f)(Q), lucid.stack([f(Q[0]), f(Q[1])]))
    t = lucid.randn(5, 2, 3, dtype=lucid.float64, generator=g)
    _, tangent = lucid.func.jvp(f, (Q[0],), (t,))
    fd = (f(Q[0] + 1e-6 * t) - f(Q[0] - 1e-6 * t)) / 2e-6
    lucid.testing.assert_close(tangent, fd, rtol=1e-6, atol=1e-8)
