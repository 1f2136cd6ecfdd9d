#!/usr/bin/env python
"""Differential sweep: Lucid's nn modules against PyTorch's ModuleInfo database (run by hand, needs torch).

The sibling of ``torch_diff.py`` for modules. PyTorch ships its module test database
(``torch.testing._internal.common_modules.module_db``: ~110 ModuleInfos, each with a
``module_inputs_func`` giving constructor and forward arguments). For every sample, in train
mode (and in eval mode too where the ModuleInfo says the two differ), this script

1. builds the PyTorch module from the sample's constructor arguments and ``.to(dtype)``, and the
   Lucid module of the same name (``lucid.nn.<Name>``) from the same arguments translated as
   ``torch_diff`` translates op arguments (tensors by value, dtypes by name; functions such as
   ``F.gelu`` by name; a TransformerEncoderLayer instance rebuilt from its attributes);
2. copies PyTorch's ``state_dict()`` into the Lucid module (``load_state_dict``, strict), so both
   start from the same parameters and buffers (lazy modules are first materialised by a
   forward under ``no_grad`` on each side);
3. runs forward on the same inputs and compares, per check:

- ``forward``: the outputs' values, shapes and dtypes (nested tuples, PackedSequence, None);
- ``buffers``: every buffer after that forward (running statistics, ``num_batches_tracked``);
- ``grad``: ``autograd.grad`` of the floating outputs with a fixed random cotangent, w.r.t. every
  floating input tensor and every parameter (by name);
- ``gradgrad`` (not run by default): the gradient of those gradients (``create_graph=True``)
  against a second random cotangent, w.r.t. the same inputs and parameters;
- ``nograd`` (not run by default): a second forward under ``no_grad`` on both sides, compared
  (PyTorch's inference fast paths, e.g. TransformerEncoderLayer's, and Lucid's graph-free path);
- ``errors`` (not run by default): the ModuleInfo's ``module_error_inputs_func`` samples, which
  PyTorch refuses at construction or forward; Lucid must raise too (at either point).

Random modules (dropout with p > 0, RReLU, FractionalMaxPool without ``_random_samples``) are
compared in eval mode only. Only disagreements are printed, one line per (module, check) with
its first example and how many samples differ, then a table of counts, the skip reasons per
module, and the "known" differences (``KNOWN``: judged as PyTorch's own bugs or as deliberate
differences in README, counted apart); ``--json`` writes every differing sample (constructor
arguments, input shapes, message). The default run takes about a minute; all checks on the
whole database (train+eval, float64) several minutes.

Examples
--------
    .venv/bin/python scripts/module_diff.py
    .venv/bin/python scripts/module_diff.py --modules 'nn.BatchNorm*,nn.LSTM' --checks forward,buffers
    .venv/bin/python scripts/module_diff.py --dtypes float32,float64 --json /tmp/mdiff.json
    .venv/bin/python scripts/module_diff.py --checks forward,grad,buffers,gradgrad,nograd,errors \
        --modes train,eval --max-samples 1000
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import fnmatch
import inspect
import json
import os
import re
import signal
import sys
import traceback
import types
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_diff import Skip, Timeout, _lucid_dtype, compare as _compare, to_numpy, tolerance  # noqa: E402

CHECKS = ("forward", "grad", "buffers", "gradgrad", "nograd", "errors")
DEFAULT_CHECKS = "forward,grad,buffers"
RANDOM_MODULES = ("RReLU", "FractionalMaxPool2d", "FractionalMaxPool3d")
# NOTE [CTC gradient]: PyTorch's ctc_loss backward returns the gradient with respect to the
# logits *before* a log_softmax (pytorch/pytorch#52241, #82545), Lucid's the exact derivative
# with respect to log_probs (README "Differences from PyTorch"). The two agree once log_softmax
# is part of the graph, which is how PyTorch's own OpInfo checks ctc_loss (#154590): the grad
# check feeds ``log_softmax(leaf, -1)`` as forward argument 0 (the samples' log_probs are
# already normalised, so the forward values do not change).
LOG_SOFTMAX_INPUTS = {"CTCLoss": 0}
# Tolerance factors for single precision, where both libraries are about equally far from the
# float64 result: CTC's alpha-beta recursion over 50 steps (error up to 7e-5 on entries of 1 in
# both, measured against float64).
FLOAT32_SLACK = {"CTCLoss": 5}
# Differences already judged: (module pattern, check, regex on the message, why). They are
# counted as "known" and listed apart, not as disagreements.
KNOWN = (
    ("nn.PoissonNLLLoss", "grad,gradgrad", r"grad\[input 1\].* vs np\.float\d+\(nan\)",
     "PyTorch: full=True gives a NaN gradient w.r.t. target where target == 0 (its Stirling term is "
     "masked after log(target)); Lucid's is the finite derivative"),
    ("nn.RNN,nn.GRU,nn.LSTM", "errors", r"RNN input dtype",
     "README: RNN/LSTM/GRU accept an input dtype other than the weights' (promoted)"),
    ("nn.LinearCrossEntropyLoss", "gradgrad", r"once_differentiable",
     "README: the chunked backward (options=...) is once-differentiable and chunks label smoothing "
     "too (PyTorch falls back to its twice-differentiable composition there)"),
)


# ----------------------------------------------------------------------------- trees

def _is_namedtuple(obj):
    return isinstance(obj, tuple) and hasattr(type(obj), "_fields")


def tree_map(fn, obj, is_leaf):
    """``fn`` applied to every leaf of nested lists, tuples, namedtuples and dicts."""
    if is_leaf(obj):
        return fn(obj)
    if _is_namedtuple(obj):
        return type(obj)._make(tree_map(fn, o, is_leaf) for o in obj)
    if isinstance(obj, (list, tuple)):
        return type(obj)(tree_map(fn, o, is_leaf) for o in obj)
    if isinstance(obj, dict):
        return {k: tree_map(fn, v, is_leaf) for k, v in obj.items()}
    return obj


def tree_leaves(obj, is_leaf):
    """The leaves of ``obj`` in the order ``tree_map`` visits them."""
    out = []
    tree_map(out.append, obj, is_leaf)
    return out


def _is_tensor(obj):
    return hasattr(obj, "shape") and hasattr(obj, "detach") and hasattr(obj, "dtype")


def _is_float(t):
    return getattr(t.dtype, "is_floating_point", False) or getattr(t.dtype, "is_complex", False)


def shapes(obj):
    """A short description of the tensors in ``obj``: ``[(2, 3) float64, None, 4]``."""
    if _is_tensor(obj):
        return f"{tuple(obj.shape)} {str(obj.dtype).split('.')[-1]}"
    if isinstance(obj, (list, tuple)):
        return "(" + ", ".join(shapes(o) for o in obj) + ")"
    if isinstance(obj, dict):
        return "{" + ", ".join(f"{k}={shapes(v)}" for k, v in obj.items()) + "}"
    return repr(obj)[:40]


# ----------------------------------------------------------------------------- comparison

def _close(want, got, factor):
    """Whether every array in ``want`` matches ``got`` within ``factor`` times the tolerance."""
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(_close(w, g, factor) for w, g in zip(want, got))
    if not isinstance(want, np.ndarray) or want.dtype.kind not in "fc":
        return _compare(want, got) is None
    if not isinstance(got, np.ndarray) or got.shape != want.shape or got.dtype != want.dtype:
        return False
    rtol, atol = tolerance(want.dtype)
    finite = np.abs(want[np.isfinite(want)])
    atol = atol * max(1.0, float(finite.max()) if finite.size else 1.0)
    return bool(np.allclose(got, want, rtol=rtol * factor, atol=atol * factor, equal_nan=True))


def compare(want, got, path="out", factor=1):
    """``torch_diff.compare`` (None, or what differs), with the tolerance scaled by ``factor``."""
    msg = _compare(want, got, path)
    return None if msg and factor != 1 and _close(want, got, factor) else msg


# ----------------------------------------------------------------------------- translation

def _tensor(torch, lucid, t):
    if t.layout != torch.strided or t.is_quantized or t.dtype == torch.bfloat16:
        raise Skip(f"tensor of layout {t.layout} / dtype {t.dtype}")
    arr = t.detach().resolve_conj().resolve_neg().numpy().copy()
    return lucid.tensor(arr, dtype=_lucid_dtype(lucid, t.dtype), requires_grad=bool(t.requires_grad))


def _function(lucid, f):
    """A PyTorch function argument (``F.gelu``, ``torch.relu``) -> Lucid's of the same name."""
    name = getattr(f, "__name__", None)
    for ns in (lucid.nn.functional, lucid):
        got = getattr(ns, name or "", None)
        if callable(got):
            return got
    raise Skip(f"function argument {name}")


def _layer_kwargs(torch, lucid, m, attn):
    """Constructor arguments of a Transformer{Encoder,Decoder}Layer, read off the instance."""
    return dict(d_model=attn.embed_dim, nhead=attn.num_heads, dim_feedforward=m.linear1.out_features,
                dropout=m.dropout.p, activation=translate(torch, lucid, m.activation),
                layer_norm_eps=m.norm1.eps, batch_first=attn.batch_first, norm_first=m.norm_first,
                bias=m.linear1.bias is not None)


def _module(torch, lucid, m):
    """A PyTorch module passed as a constructor argument -> an equivalent Lucid one (its
    parameters are overwritten by the state dict later)."""
    name = type(m).__name__
    cls = getattr(lucid.nn, name, None)
    if cls is None:
        raise Skip(f"module argument {name}")
    if name in ("TransformerEncoderLayer", "TransformerDecoderLayer"):
        return cls(**_layer_kwargs(torch, lucid, m, m.self_attn))
    if name == "LayerNorm":
        return cls(tuple(m.normalized_shape), eps=m.eps, elementwise_affine=m.elementwise_affine,
                   bias=m.bias is not None)
    if not any(True for _ in m.parameters()) and not any(True for _ in m.buffers()):
        params = inspect.signature(type(m).__init__).parameters
        if all(p.default is not p.empty for k, p in params.items() if k != "self" and p.kind <= p.KEYWORD_ONLY):
            return cls()  # a parameterless activation with default settings (nn.ReLU())
    raise Skip(f"module argument {name}")


def translate(torch, lucid, obj):
    """Sample arguments of a ModuleInfo -> Lucid ones (see the module docstring)."""
    if isinstance(obj, torch.Tensor):
        return _tensor(torch, lucid, obj)
    if isinstance(obj, torch.nn.utils.rnn.PackedSequence):
        fields = [translate(torch, lucid, o) for o in obj]
        return lucid.nn.utils.rnn.PackedSequence._make(fields)
    if isinstance(obj, torch.nn.Module):
        return _module(torch, lucid, obj)
    if isinstance(obj, torch.dtype):
        return _lucid_dtype(lucid, obj)
    if isinstance(obj, torch.device):
        return "cpu"
    if isinstance(obj, torch.Size):
        return tuple(obj)
    if isinstance(obj, torch.Generator):
        raise Skip("generator argument")
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        cls = getattr(lucid.nn, type(obj).__name__, None)
        if cls is None:
            raise Skip(f"argument of type {type(obj).__name__}")
        return cls(**{f.name: translate(torch, lucid, getattr(obj, f.name)) for f in dataclasses.fields(obj)})
    if _is_namedtuple(obj):
        return type(obj)._make(translate(torch, lucid, o) for o in obj)
    if isinstance(obj, (list, tuple)):
        return type(obj)(translate(torch, lucid, o) for o in obj)
    if isinstance(obj, dict):
        return {k: translate(torch, lucid, v) for k, v in obj.items()}
    if callable(obj) and not isinstance(obj, type):
        return _function(lucid, obj)
    return obj


# ----------------------------------------------------------------------------- one sample

def is_random(torch, t_mod, ctor_kwargs):
    """Whether a module in train mode draws random numbers (dropout p > 0 anywhere inside, RReLU,
    FractionalMaxPool without fixed ``_random_samples``)."""
    for m in t_mod.modules():
        name = type(m).__name__
        if name in RANDOM_MODULES and not (name.startswith("Fractional") and ctor_kwargs.get("_random_samples") is not None):
            return True
        p = getattr(m, "p", None) if isinstance(m, torch.nn.modules.dropout._DropoutNd) else getattr(m, "dropout", None)
        if isinstance(p, float) and p > 0:
            return True
    return False


def _replace(call, k, value):
    """``(args, kwargs)`` with positional argument ``k`` replaced."""
    args = list(call[0])
    args[k] = value
    return tuple(args), call[1]


def _math_sdpa(torch):
    """PyTorch's reference ("math") scaled_dot_product_attention: its fused CPU kernels have
    no double backward, so gradgrad of attention modules could not be checked otherwise."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:  # older PyTorch
        import contextlib
        return contextlib.nullcontext()
    return sdpa_kernel(SDPBackend.MATH)


class Known(Exception):
    """A difference already judged (torch's own inconsistency, or a documented one)."""


def known(module, check, msg):
    """Why ``msg`` is a known difference (see KNOWN), or None."""
    for pattern, c, regex, why in KNOWN:
        if check in c.split(",") and any(fnmatch.fnmatch(module, q) for q in pattern.split(",")) and re.search(regex, msg):
            return why
    return None


class Pair:
    """One ModuleInfo sample, built in both libraries with the same state."""

    def __init__(self, torch, lucid, info, sample, dtype, training, want_grad):
        self.torch, self.lucid = torch, lucid
        ctor = sample.constructor_input
        fwd = sample.forward_input
        self.desc = sample.desc
        self.ctor = f"{ctor.args!r:.120} {ctor.kwargs!r:.160}"
        self.ctor_kwargs = ctor.kwargs
        t_in = (fwd.args, fwd.kwargs)
        if want_grad:  # fresh leaves for every floating input tensor
            t_in = tree_map(lambda t: t.detach().clone().requires_grad_(_is_float(t)), t_in, _is_tensor)
        self.t_in = t_in
        self.l_in = translate(torch, lucid, t_in)
        self.t_call, self.l_call = self.t_in, self.l_in
        k = LOG_SOFTMAX_INPUTS.get(info.module_cls.__name__)
        if want_grad and k is not None and len(fwd.args) > k:  # See NOTE [CTC gradient]
            self.t_call = _replace(self.t_in, k, torch.log_softmax(self.t_in[0][k], -1))
            self.l_call = _replace(self.l_in, k, lucid.nn.functional.log_softmax(self.l_in[0][k], -1))
        l_ctor = translate(torch, lucid, (ctor.args, ctor.kwargs))
        try:
            self.t_mod = info.module_cls(*ctor.args, **ctor.kwargs).to(dtype)
        except Exception as e:
            raise Skip(f"torch constructor: {type(e).__name__}") from None
        self.l_cls = getattr(lucid.nn, info.module_cls.__name__)
        self.l_mod = self.l_cls(*l_ctor[0], **l_ctor[1]).to(_lucid_dtype(lucid, dtype))
        if info.is_lazy:  # materialise both before the state is copied
            with torch.no_grad():
                self.t_mod(*fwd.args, **fwd.kwargs)
            with lucid.no_grad():
                self.l_mod(*self.l_in[0], **self.l_in[1])
        self.t_mod.train(training)
        self.l_mod.train(training)
        self.random = training and is_random(torch, self.t_mod, ctor.kwargs)
        self.supports_gradgrad = info.supports_gradgrad
        self.factor = FLOAT32_SLACK.get(info.module_cls.__name__, 1) if dtype == torch.float32 else 1

    def copy_state(self):
        """None, or why Lucid's module cannot take PyTorch's state dict."""
        sd = self.t_mod.state_dict()
        l_keys = set(self.l_mod.state_dict())
        if set(sd) != l_keys:
            return (f"state_dict keys: lucid lacks {sorted(set(sd) - l_keys)}, "
                    f"has extra {sorted(l_keys - set(sd))}")
        self.l_mod.load_state_dict({k: _tensor(self.torch, self.lucid, v.detach()) for k, v in sd.items()})
        return None

    def forward(self):
        try:
            with _math_sdpa(self.torch):  # twice differentiable, unlike the fused CPU kernels
                self.t_out = self.t_mod(*self.t_call[0], **self.t_call[1])
        except Exception as e:
            if not self._first_leaf_only():
                raise Skip(f"torch forward: {type(e).__name__}") from None
            return self.forward()
        self.l_out = self.l_mod(*self.l_call[0], **self.l_call[1])

    def _first_leaf_only(self):
        """PyTorch refuses some leaves at forward time ("the derivative for 'target' is not
        implemented"): keep only the first input differentiable, on both sides. False when
        there is nothing left to drop."""
        t_leaves = [t for t in tree_leaves(self.t_in, _is_tensor) if t.requires_grad]
        l_leaves = [t for t in tree_leaves(self.l_in, _is_tensor) if t.requires_grad]
        if len(t_leaves) < 2:
            return False
        for t, l in zip(t_leaves[1:], l_leaves[1:]):
            t.requires_grad_(False)
            l.requires_grad_(False)
        return True


def check_forward(p):
    if p.random:
        shape_only = lambda v: [shape_only(x) for x in v] if isinstance(v, list) else (
            (v.shape, str(v.dtype)) if isinstance(v, np.ndarray) else v)
        want, got = shape_only(to_numpy(p.t_out)), shape_only(to_numpy(p.l_out))
        return None if want == got else f"random module: {got} vs {want}"
    return compare(to_numpy(p.t_out), to_numpy(p.l_out), "out", getattr(p, "factor", 1))


def check_buffers(p):
    want = {k: to_numpy(v) for k, v in p.t_mod.named_buffers()}
    got = {k: to_numpy(v) for k, v in p.l_mod.named_buffers()}
    if set(want) != set(got):
        return f"buffers: lucid has {sorted(got)}, torch {sorted(want)}"
    if not want:
        raise Skip("no buffers")
    if p.random:
        raise Skip("random in train mode")
    for k in want:
        msg = compare(want[k], got[k], f"buffer {k}", getattr(p, "factor", 1))
        if msg:
            return msg
    return None


def _grads(lib, outs, ins, cots, create_graph=False):
    g = lib.autograd.grad(outs, ins, grad_outputs=cots, allow_unused=True, retain_graph=True,
                          create_graph=create_graph)
    return list(g) if isinstance(g, (list, tuple)) else [g]


class _Mismatch(Exception):
    """The two sides cannot be differentiated alike (message in args[0])."""


def _differentiables(p):
    """(output pairs, torch wrt, lucid wrt, labels) of a sample: the floating outputs torch
    differentiates, and the differentiable inputs then parameters (by name)."""
    t_leaves, l_leaves = tree_leaves(p.t_out, _is_tensor), tree_leaves(p.l_out, _is_tensor)
    if len(t_leaves) != len(l_leaves):
        raise _Mismatch(f"lucid returns {len(l_leaves)} tensors, torch {len(t_leaves)}")
    pairs = [(t, l) for t, l in zip(t_leaves, l_leaves) if t.requires_grad and _is_float(t) and t.numel() > 0]
    if not pairs:
        raise Skip("no differentiable output")
    t_ins = [(f"input {i}", t) for i, t in enumerate(tree_leaves(p.t_in, _is_tensor)) if t.requires_grad]
    l_ins = [l for l in tree_leaves(p.l_in, _is_tensor) if l.requires_grad]
    if len(l_ins) != len(t_ins):
        raise _Mismatch(f"driver: {len(l_ins)} lucid input leaves, {len(t_ins)} torch")
    t_params, l_params = dict(p.t_mod.named_parameters()), dict(p.l_mod.named_parameters())
    names = [k for k, v in t_params.items() if v.requires_grad]
    if set(names) - set(l_params):
        raise _Mismatch(f"parameters: lucid lacks {sorted(set(names) - set(l_params))}")
    frozen = [k for k in names if not l_params[k].requires_grad]
    if frozen:
        raise _Mismatch(f"parameters {frozen} do not require grad in lucid")
    if any(not l.requires_grad for _, l in pairs):
        raise _Mismatch("an output torch differentiates has no graph in lucid")
    return (pairs, [t for _, t in t_ins] + [t_params[k] for k in names], l_ins + [l_params[k] for k in names],
            [n for n, _ in t_ins] + names)


def _compare_grads(p, labels, t_wrt, tg, lg, what):
    for label, like, a, b in zip(labels, t_wrt, tg, lg):  # None (unused) means zeros on either side
        zeros = np.zeros(tuple(like.shape), dtype=str(like.dtype).split(".")[-1])
        msg = compare(zeros if a is None else to_numpy(a), zeros if b is None else to_numpy(b), f"{what}[{label}]",
                      getattr(p, "factor", 1))
        if msg:
            return msg
    return None


def check_grad(p, order=1):
    """First gradients (``order=1``), or the gradient of their sum against a second random
    cotangent (``order=2``, through ``create_graph=True``)."""
    torch, lucid = p.torch, p.lucid
    if p.random:
        raise Skip("random in train mode")
    try:
        pairs, t_wrt, l_wrt, labels = _differentiables(p)
    except _Mismatch as e:
        return str(e)
    rng = np.random.default_rng(0)
    cots = [_cotangent(rng, to_numpy(t)) for t, _ in pairs]
    try:
        tg = _grads(torch, [t for t, _ in pairs], t_wrt, [torch.from_numpy(c) for c in cots], order == 2)
    except Exception as e:
        raise Skip(f"torch backward: {type(e).__name__}") from None
    lg = _grads(lucid, [l for _, l in pairs], l_wrt, [lucid.tensor(c) for c in cots], order == 2)
    if order == 2 and not getattr(p, "supports_gradgrad", True):
        raise Skip("no gradgrad (ModuleInfo)")
    if order == 1:
        return _compare_grads(p, labels, t_wrt, tg, lg, "grad")
    second = [(a, b) for a, b in zip(tg, lg) if a is not None and a.requires_grad]
    if not second:
        raise Skip("first gradient has no graph")
    if any(b is None or not b.requires_grad for _, b in second):
        return "lucid's first gradient has no graph where torch's has"
    cots2 = [_cotangent(rng, to_numpy(a)) for a, _ in second]
    try:
        tg2 = _grads(torch, [a for a, _ in second], t_wrt, [torch.from_numpy(c) for c in cots2])
    except Exception as e:
        raise Skip(f"torch double backward: {type(e).__name__}") from None
    lg2 = _grads(lucid, [b for _, b in second], l_wrt, [lucid.tensor(c) for c in cots2])
    return _compare_grads(p, labels, t_wrt, tg2, lg2, "gradgrad")


def _cotangent(rng, arr):
    c = rng.standard_normal(arr.shape)
    if arr.dtype.kind == "c":
        c = c + 1j * rng.standard_normal(arr.shape)
    return np.asarray(c, dtype=arr.dtype)


def check_nograd(p):
    """A forward under ``no_grad`` (run after the other checks: in train mode it updates the
    running statistics again, on both sides alike)."""
    if p.random:
        raise Skip("random in train mode")
    with p.torch.no_grad():
        try:
            want = to_numpy(p.t_mod(*p.t_call[0], **p.t_call[1]))
        except Exception as e:
            raise Skip(f"torch no_grad forward: {type(e).__name__}") from None
    with p.lucid.no_grad():
        got = to_numpy(p.l_mod(*p.l_call[0], **p.l_call[1]))
    msg = compare(want, got, "no_grad out", getattr(p, "factor", 1))
    if msg and not p.l_mod.training and compare(to_numpy(p.t_out), got, "out", getattr(p, "factor", 1)) is None:
        # Lucid's no_grad output is PyTorch's grad-mode one: PyTorch disagrees with itself
        raise Known("torch's no_grad fast path differs from its own grad mode (Lucid's no_grad output "
                    "is torch's grad-mode one)")
    return msg


CHECK_FUNCS = {"forward": check_forward, "buffers": check_buffers, "grad": check_grad,
               "gradgrad": lambda p: check_grad(p, order=2), "nograd": check_nograd}


def run_sample(torch, lucid, info, sample, dtype, training, checks):
    """{check: None (agree) | message | Skip instance} for one sample and mode."""
    pair = Pair(torch, lucid, info, sample, dtype, training, "grad" in checks or "gradgrad" in checks)
    if pair.random and training:
        raise Skip("random in train mode")
    msg = pair.copy_state()
    if msg:
        return {c: msg for c in checks}, pair
    pair.forward()
    out = {}
    for c in checks:
        try:
            out[c] = CHECK_FUNCS[c](pair)
        except (Skip, Known) as e:
            out[c] = e
        except Timeout:
            raise
        except Exception as e:  # this check only: the others keep their verdicts
            out[c] = f"lucid raises {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
    return out, pair


# ----------------------------------------------------------------------------- driver

def _alarm(signum, frame):
    raise Timeout()


def pick(samples, n):
    """At most ``n`` samples, evenly spread over the list (not only the first ``n``)."""
    if n is None or len(samples) <= n:
        return list(enumerate(samples))
    idx = np.unique(np.linspace(0, len(samples) - 1, n).round().astype(int))
    return [(int(i), samples[i]) for i in idx]


def modes_of(info, spec):
    """The ``training`` flags to run: ``auto`` is train, and eval too where the ModuleInfo says
    the two differ."""
    if spec == "auto":
        return (True, False) if info.train_and_eval_differ else (True,)
    return tuple(m == "train" for m in spec.split(","))


def samples_of(torch, info, dtype, training):
    func = info.module_inputs_func
    extra = {}
    try:
        if "with_packed_sequence" in inspect.signature(func).parameters:
            extra["with_packed_sequence"] = True
    except (TypeError, ValueError):
        pass
    return list(func(info, device="cpu", dtype=dtype, requires_grad=False, training=training, **extra))


class Tally:
    """Counts and first messages per (module, check)."""

    def __init__(self):
        self.counts = collections.Counter()
        self.reasons = collections.Counter()
        self.known = collections.Counter()
        self.problems = []


def _describe(info, k, sample, training, dname, pair):
    mode = "train" if training else "eval"
    return {"module": info.name, "sample": k, "desc": sample.desc, "mode": mode, "dtype": dname,
            "ctor": pair.ctor if pair else repr(sample.constructor_input.args)[:120],
            "inputs": shapes(pair.t_in) if pair else ""}


def check_errors(torch, lucid, info, dtype):
    """[(sample index, None | message)] for the ModuleInfo's error inputs (see the docstring)."""
    if info.module_error_inputs_func is None:
        return []
    out = []
    for k, err in enumerate(info.module_error_inputs_func(info, device="cpu", dtype=dtype, requires_grad=False,
                                                         training=True)):
        sample = err.module_error_input
        ctor = sample.constructor_input
        fwd = sample.forward_input or types.SimpleNamespace(args=(), kwargs={})  # construction errors
        try:
            l_ctor = translate(torch, lucid, (ctor.args, ctor.kwargs))
            l_fwd = translate(torch, lucid, (fwd.args, fwd.kwargs))
        except Skip:
            continue
        if not _raises(lambda: _build_and_call(info.module_cls, ctor, sample.forward_input)):
            continue  # PyTorch accepts it as built here: nothing to compare
        if _raises(lambda: _build_and_call(getattr(lucid.nn, info.module_cls.__name__), types.SimpleNamespace(
                args=l_ctor[0], kwargs=l_ctor[1]), sample.forward_input and types.SimpleNamespace(
                args=l_fwd[0], kwargs=l_fwd[1]))):
            out.append((k, None))
            continue
        out.append((k, f"lucid accepts what torch refuses with {err.error_type.__name__} "
                       f"/{err.error_regex}/ (ctor {ctor.args!r:.80} {ctor.kwargs!r:.80}, input {shapes(fwd.args)})"))
    return out


def _build_and_call(cls, ctor, fwd):
    """Construct as the sample says (no ``.to(dtype)``: the error samples mix dtypes on purpose)
    and call forward when the sample has forward arguments."""
    m = cls(*ctor.args, **ctor.kwargs)
    if fwd is not None:
        m(*fwd.args, **fwd.kwargs)


def _raises(f):
    try:
        f()
    except Exception:
        return True
    return False


def _sweep_errors(torch, lucid, info, args, tally, seen, first):
    for dname in args.dtypes.split(","):
        dtype = getattr(torch, dname)
        if dtype not in info.supported_dtypes("cpu"):
            continue
        for k, msg in check_errors(torch, lucid, info, dtype):
            why = msg and known(info.name, "errors", msg)
            seen["errors"]["known" if why else "diff" if msg else "ok"] += 1
            if why:
                tally.known[(info.name, "errors", why)] += 1
            elif msg:
                tally.problems.append({"module": info.name, "sample": k, "dtype": dname, "check": "errors", "what": msg})
                first.setdefault("errors", f"{dname} error sample {k}: {msg}")


def sweep_module(torch, lucid, info, args, tally):
    asked = args.checks.split(",")
    errors = "errors" in asked
    checks = [c for c in CHECKS if c in asked and c != "errors"]  # in CHECKS order: nograd last
    first = {}
    seen = {c: collections.Counter() for c in checks + ["errors"]}
    if getattr(lucid.nn, info.module_cls.__name__, None) is None:
        tally.problems.append({"module": info.name, "check": "lookup", "what": "no Lucid module"})
        print(f"{info.name:28s} lookup    : no Lucid module")
        return
    modes = modes_of(info, args.modes) if checks else ()
    for dname in args.dtypes.split(","):
        dtype = getattr(torch, dname)
        if dtype not in info.supported_dtypes("cpu"):
            continue
        for training in modes:
            try:
                samples = samples_of(torch, info, dtype, training)
            except Exception as e:
                tally.counts["samples:skip"] += 1
                tally.reasons[f"{info.name}: torch samples: {type(e).__name__}"] += 1
                continue
            for k, sample in pick(samples, args.max_samples):
                _run_one(torch, lucid, info, args, tally, checks, seen, first, k, sample, dtype, dname, training)
    if errors:
        _sweep_errors(torch, lucid, info, args, tally, seen, first)
        checks = checks + ["errors"]
    for c in checks:
        tally.counts.update({f"{c}:{key}": v for key, v in seen[c].items()})
        if c in first:
            n = seen[c]["diff"]
            print(f"{info.name:28s} {c:9s}: [{n} sample{'s' if n > 1 else ''}] {first[c][:240]}")
            sys.stdout.flush()


def _run_one(torch, lucid, info, args, tally, checks, seen, first, k, sample, dtype, dname, training):
    signal.alarm(args.timeout)
    pair = None
    try:
        try:
            results, pair = run_sample(torch, lucid, info, sample, dtype, training, checks)
        except (Skip, Timeout):
            raise
        except Exception as e:
            line = str(e).splitlines()[0][:160] if str(e) else ""
            results = {c: f"lucid raises {type(e).__name__}: {line}" for c in checks}
            if args.verbose:
                traceback.print_exc()
    except Skip as e:
        results = {c: e for c in checks}
    except Timeout:
        results = {c: Timeout() for c in checks}
    except Exception:  # the sweep itself
        results = {c: RuntimeError("driver-error") for c in checks}
        if args.verbose:
            traceback.print_exc()
    finally:
        signal.alarm(0)
    where = _describe(info, k, sample, training, dname, pair)
    for c, r in results.items():
        why = known(info.name, c, r) if isinstance(r, str) else str(r) if isinstance(r, Known) else None
        if why:
            seen[c]["known"] += 1
            tally.known[(info.name, c, why)] += 1
        elif isinstance(r, Skip):
            seen[c]["skip"] += 1
            tally.reasons[f"{info.name}: {r}"] += 1
        elif isinstance(r, Timeout):
            seen[c]["timeout"] += 1
        elif isinstance(r, RuntimeError):
            seen[c]["driver-error"] += 1
        elif r:
            seen[c]["diff"] += 1
            tally.problems.append(dict(where, check=c, what=r))
            first.setdefault(c, f"{dname} {where['mode']} sample {k} ({sample.desc or '-'}): {r}")
            if args.verbose:
                print(f"    {info.name} {c} sample {k} {where['mode']} ctor={where['ctor']} in={where['inputs']}: {r}")
        else:
            seen[c]["ok"] += 1


def sweep(args):
    warnings.filterwarnings("ignore")
    import torch
    from torch.testing._internal.common_modules import module_db

    import lucid

    torch.manual_seed(0)
    signal.signal(signal.SIGALRM, _alarm)
    patterns = args.modules.split(",")
    tally = Tally()
    for info in module_db:
        if any(fnmatch.fnmatch(info.name, p) or fnmatch.fnmatch(info.module_cls.__name__, p) for p in patterns):
            sweep_module(torch, lucid, info, args, tally)
    print("\ncounts:", dict(sorted(tally.counts.items())))
    reasons = collections.Counter()
    for reason, n in tally.reasons.items():  # modules without buffers: one entry, not one each
        reasons["(any module): no buffers" if reason.endswith(": no buffers") else reason] += n
    if reasons:
        print("skips:", dict(reasons.most_common()))
    for (module, c, why), n in sorted(tally.known.items()):
        print(f"known: {module} {c} [{n}]: {why[:300]}")
    pairs = {(p["module"], p["check"]) for p in tally.problems}
    print(f"{len(pairs)} (module, check) pairs differ, in {len(tally.problems)} samples")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(tally.problems, f, indent=1, default=str)
    return tally


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--modules", default="*", help="comma-separated fnmatch patterns of module names "
                   "('nn.Conv*' or 'Conv*'; default: all)")
    p.add_argument("--checks", default=DEFAULT_CHECKS,
                   help=f"comma-separated, of {','.join(CHECKS)} (default {DEFAULT_CHECKS})")
    p.add_argument("--dtypes", default="float64", help="comma-separated floating dtypes (e.g. float32,float64)")
    p.add_argument("--modes", default="auto", help="train, eval or train,eval (default auto: train, and "
                   "eval too where the ModuleInfo says they differ)")
    p.add_argument("--max-samples", type=int, default=128, help="samples per module, dtype and mode, evenly spread")
    p.add_argument("--timeout", type=int, default=30, help="seconds per sample")
    p.add_argument("--json", help="write every differing sample here")
    p.add_argument("--verbose", action="store_true", help="print every differing sample and the sweep's own errors")
    args = p.parse_args(argv)
    bad = set(args.checks.split(",")) - set(CHECKS)
    if bad:
        p.error(f"unknown checks {sorted(bad)}")
    return sweep(args)


if __name__ == "__main__":
    main()
