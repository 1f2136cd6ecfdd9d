#!/usr/bin/env python
"""Differential sweep: Lucid against PyTorch's own OpInfo database (run by hand, needs torch).

PyTorch ships its operator test database (``torch.testing._internal.common_methods_invocations
.op_db``: ~700 OpInfos, each with sample inputs). This script runs every sample through the
PyTorch op and through the Lucid function of the same name (``lucid.<name>``, ``lucid.linalg.*``,
``lucid.nn.functional.*`` ..., or the Tensor method) and compares, per check:

- ``forward``: values, dtypes and shapes at each ``--dtypes`` (or which side raised);
- ``grad``: ``autograd.grad`` of the outputs with a fixed random cotangent, w.r.t. every
  floating tensor argument (float64/complex128 samples only);
- ``jvp``: ``func.jvp`` with random tangents (PyTorch: ``torch.func.jvp``);
- ``vmap``: ``func.vmap`` over a batch of two perturbed copies of every tensor argument, at
  batch dim 0 (PyTorch: ``torch.vmap``; a sample PyTorch cannot batch is skipped);
- ``gradgrad``: the gradient of the gradient, as ``grad`` but through ``create_graph=True``.

Only disagreements are printed, one line per (op, variant, check) with its first example, and
a table of counts at the end; ``--json`` writes every disagreement. Random and uninitialised
ops are compared by shape and dtype only. What a difference means is for a person to judge:
PyTorch's own bugs (e.g. triangular_solve's jvp ignoring the triangle its forward reads) and
deliberate differences (README "Differences from PyTorch") show up too.

Examples
--------
    .venv/bin/python -m pip install torch==2.13.0 expecttest
    .venv/bin/python scripts/torch_diff.py --ops 'linalg.*' --checks forward,grad
    .venv/bin/python scripts/torch_diff.py --checks forward --dtypes float32,int64,bool,complex64
    .venv/bin/python scripts/torch_diff.py --ops 'nn.functional.*' --checks vmap,jvp --json /tmp/diff.json
"""
from __future__ import annotations

import argparse
import collections
import fnmatch
import json
import signal
import sys
import traceback
import types
import warnings

import numpy as np

RANDOM_WORDS = ("rand", "normal", "bernoulli", "multinomial", "dropout", "uniform", "exponential",
                "geometric", "cauchy", "log_normal", "empty", "rrelu", "sample", "poisson", "fractional", "lowrank")
# eigenvectors are defined up to a phase: compared after fixing it (largest entry real, positive)
PHASE_FREE = {"linalg.eig": 1, "linalg.eigh": 1, "eig": 1}
CHECKS = ("forward", "grad", "jvp", "vmap", "gradgrad")
# ops whose result depends on the storage behind a view: samples are translated by value
STORAGE_OPS = ("as_strided", "as_strided_copy", "as_strided_scatter", "as_strided_partial_views")


class Skip(Exception):
    """A sample the sweep cannot translate (sparse layouts, generators, callables ...)."""


class Timeout(Exception):
    pass


# ----------------------------------------------------------------------------- translation

def _lucid_dtype(lucid, dtype):
    name = str(dtype).split(".")[-1]
    got = getattr(lucid, name, None)
    if got is None:
        raise Skip(f"no lucid dtype {name}")
    return got


def to_lucid(torch, lucid, obj):
    """PyTorch sample arguments -> Lucid ones (tensors by value, dtypes and devices by name)."""
    if isinstance(obj, torch.Tensor):
        if obj.layout != torch.strided or obj.is_quantized:
            raise Skip(f"tensor of layout {obj.layout} / dtype {obj.dtype}")
        t = obj.detach().resolve_conj().resolve_neg()
        # bfloat16 goes by way of float32 (exact both ways): PyTorch's .numpy() refuses it
        arr = (t.float() if t.dtype == torch.bfloat16 else t).numpy().copy()
        return lucid.tensor(arr, dtype=_lucid_dtype(lucid, obj.dtype))
    if isinstance(obj, torch.dtype):
        return _lucid_dtype(lucid, obj)
    if isinstance(obj, torch.device):
        return "cpu"
    if isinstance(obj, torch.Size):
        return tuple(obj)
    if isinstance(obj, torch.memory_format):
        got = getattr(lucid, str(obj).split(".")[-1], None)
        if got is None:
            raise Skip(f"memory format {obj}")
        return got
    if isinstance(obj, torch.layout):
        return getattr(lucid, str(obj).split(".")[-1])
    if isinstance(obj, torch.Generator):
        raise Skip("generator argument")
    if isinstance(obj, (list, tuple)):
        out = [to_lucid(torch, lucid, o) for o in obj]
        return type(obj)(out) if type(obj) in (list, tuple) else tuple(out)
    if isinstance(obj, dict):
        return {k: to_lucid(torch, lucid, v) for k, v in obj.items()}
    if callable(obj) and not isinstance(obj, type):
        raise Skip("callable argument")
    return obj


def to_numpy(obj):
    """Outputs of either library -> nested lists of arrays (tensors), or plain values."""
    if hasattr(obj, "detach") and hasattr(obj, "shape"):
        t = obj.detach()
        if getattr(t, "_is_zerotensor", lambda: False)():  # PyTorch's symbolic zeros
            return np.zeros(tuple(t.shape), dtype=str(t.dtype).split(".")[-1])
        if hasattr(t, "resolve_conj"):
            t = t.resolve_conj().resolve_neg()
        if getattr(t, "layout", None) is not None and "strided" not in str(t.layout):
            t = t.to_dense()
        if hasattr(t, "cpu"):
            t = t.cpu()
        if str(t.dtype).endswith("bfloat16") and type(t).__module__.startswith("torch"):
            import ml_dtypes

            return t.float().numpy().astype(ml_dtypes.bfloat16)  # as Lucid's .numpy() gives it
        return np.asarray(t.numpy())
    if isinstance(obj, (list, tuple)):
        return [to_numpy(o) for o in obj]
    if isinstance(obj, (bool, int, float, complex, np.generic, np.ndarray)):
        return np.asarray(obj)
    return obj


def tolerance(dtype):
    kind, size = np.dtype(dtype).kind, np.dtype(dtype).itemsize
    if kind in "biu":
        return 0.0, 0.0
    if kind == "V":  # bfloat16: PyTorch's assert_close tolerance for it
        return 1.6e-2, 1e-2
    single = size <= (8 if kind == "c" else 4)
    half = size <= (4 if kind == "c" else 2)
    return (1e-2, 1e-2) if half else (2e-5, 2e-5) if single else (1e-7, 1e-7)


def compare(want, got, path="out"):
    """None when ``got`` matches ``want`` (values, shape, dtype), else a short message."""
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return f"{path}: structure {type(got).__name__} of {len(got) if isinstance(got, list) else '-'} vs {len(want)}"
        for i, (w, g) in enumerate(zip(want, got)):
            msg = compare(w, g, f"{path}[{i}]")
            if msg:
                return msg
        return None
    if isinstance(want, np.ndarray):
        if not isinstance(got, np.ndarray):
            return f"{path}: got {type(got).__name__}, want an array"
        if want.dtype != got.dtype and not (want.dtype.kind == got.dtype.kind == "b"):
            return f"{path}: dtype {got.dtype}, want {want.dtype}"
        if want.shape != got.shape:
            return f"{path}: shape {got.shape}, want {want.shape}"
        rtol, atol = tolerance(want.dtype)
        if want.dtype.kind == "V":  # bfloat16 values compared as float32 (exact)
            want, got = want.astype(np.float32), got.astype(np.float32)
        finite = np.abs(want[np.isfinite(want)]) if want.size and want.dtype.kind in "fc" else np.zeros(0)
        atol = atol * max(1.0, float(finite.max()) if finite.size else 1.0)  # relative to the largest finite entry
        if not np.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True):
            bad = ~np.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
            idx = tuple(np.argwhere(bad)[0]) if bad.ndim else ()
            return f"{path}: {np.count_nonzero(bad)}/{want.size} differ, e.g. at {idx} {got[idx]!r} vs {want[idx]!r}"
        return None
    if want != got and not (isinstance(want, float) and np.isnan(want) and np.isnan(got)):
        return f"{path}: {got!r}, want {want!r}"
    return None


def rebind(f, lucid):
    """An OpInfo's own wrapper function (``lambda x, n: torch.polygamma(n, x)``) with ``torch``
    meaning ``lucid``: argument reordering and method calls are kept as PyTorch's tests wrote them."""
    glob = dict(f.__globals__, torch=lucid, wrapper_set_seed=lambda fn, *a, **k: fn(*a, **k))
    return types.FunctionType(f.__code__, glob, f.__name__, f.__defaults__, f.__closure__)


def lucid_function(lucid, op):
    """The Lucid callable for an OpInfo: its wrapper rebound to Lucid, the same dotted name, or
    the Tensor method of that name."""
    name = op.name
    f = op.op
    if isinstance(f, types.FunctionType) and (f.__module__ or "").startswith("torch.testing"):
        return rebind(f, lucid)
    if name.startswith("_refs") or name.startswith("ops."):
        return None
    if name.startswith("__") and name.endswith("__"):
        return lambda x, *a, **k: getattr(x, name)(*a, **k)
    obj = lucid
    for part in name.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            break
    if obj is not None and callable(obj):
        return obj
    leaf = name.split(".")[-1]
    if op.method_variant is not None and hasattr(lucid.Tensor, leaf):
        return lambda x, *a, **k: getattr(x, leaf)(*a, **k)
    if hasattr(lucid.Tensor, leaf + "_"):  # random fills: OpInfo "cauchy" calls Tensor.cauchy_
        return lambda x, *a, **k: getattr(x.clone(), leaf + "_")(*a, **k)
    return None


def is_random(op):
    return any(w in op.name.split(".")[-1] for w in RANDOM_WORDS)


def fix_phase(v):
    """Eigenvector columns scaled so that each one's largest entry is real and positive."""
    if not isinstance(v, np.ndarray) or v.ndim < 2 or v.size == 0:
        return v
    idx = np.argmax(np.abs(v), axis=-2)[..., None, :]
    top = np.take_along_axis(v, idx, axis=-2)
    return v * (np.conj(top) / np.where(np.abs(top) == 0, 1, np.abs(top)))


# ----------------------------------------------------------------------------- the checks

class Sample:
    """One OpInfo sample in both libraries, with its tensor arguments listed by position."""

    def __init__(self, torch, lucid, sample):
        self.t_args = [sample.input, *sample.args]
        self.t_kwargs = dict(sample.kwargs)
        self.l_args = to_lucid(torch, lucid, self.t_args)
        self.l_kwargs = to_lucid(torch, lucid, self.t_kwargs)
        self.process_grad = sample.output_process_fn_grad
        # the differentiable arguments: top-level floating tensors
        self.slots = [i for i, a in enumerate(self.t_args)
                      if isinstance(a, torch.Tensor) and (a.is_floating_point() or a.is_complex())]

    def call(self, fn, lib_args, kwargs, replace=None):
        args = list(lib_args)
        for i, v in (replace or {}).items():
            args[i] = v
        return fn(*args, **kwargs)


def _float_outputs(outs):
    flat = outs if isinstance(outs, (list, tuple)) else [outs]
    return [o for o in flat if hasattr(o, "dtype") and hasattr(o, "shape") and o.numel() > 0 and
            (getattr(o.dtype, "is_floating_point", False) or getattr(o.dtype, "is_complex", False))]


def _cotangent(rng, arr):
    c = rng.standard_normal(arr.shape)
    if arr.dtype.kind == "c":
        c = c + 1j * rng.standard_normal(arr.shape)
    return np.asarray(c, dtype=arr.dtype)


def torch_side(compute):
    """Run PyTorch's half of a check; a failure there makes the sample one to skip."""
    try:
        return compute()
    except (Skip, Timeout):
        raise
    except Exception as e:
        raise Skip(f"torch: {type(e).__name__}") from None


def random_sample(op, s):
    """Random ops, and samples of attention ops that ask for dropout."""
    return is_random(op) or s.t_kwargs.get("dropout_p", 0) > 0 or (
        op.name.endswith("multi_head_attention_forward") and s.t_kwargs.get("training") and s.t_args[10] > 0)


def without_vectors(op, value):
    """A phase-free op's outputs without its eigenvectors (their tangents and batches depend on
    the phase each library picks)."""
    k = PHASE_FREE.get(op.name)
    return [v for i, v in enumerate(value) if i != k] if k is not None and isinstance(value, list) else value


def check_forward(torch, lucid, op, fn, s):
    t_out = s.call(op.op, s.t_args, s.t_kwargs)
    l_out = s.call(fn, s.l_args, s.l_kwargs)
    want, got = to_numpy(t_out), to_numpy(l_out)
    k = PHASE_FREE.get(op.name)
    if k is not None and isinstance(want, list) and isinstance(got, list) and len(got) > k:
        want[k], got[k] = fix_phase(want[k]), fix_phase(got[k])
    if random_sample(op, s):
        shape_only = lambda v: [shape_only(x) for x in v] if isinstance(v, list) else (v.shape, str(v.dtype)) if isinstance(v, np.ndarray) else v
        return None if shape_only(want) == shape_only(got) else f"random op: {shape_only(got)} vs {shape_only(want)}"
    return compare(want, got)


def _grads(lib, outs, ins, cots, create_graph=False):
    g = lib.autograd.grad(outs, ins, grad_outputs=cots, allow_unused=True, create_graph=create_graph)
    return list(g) if isinstance(g, (list, tuple)) else [g]


def _leaves(torch, lucid, s):
    t_in = {i: s.t_args[i].detach().clone().requires_grad_(True) for i in s.slots}
    l_in = {i: lucid.tensor(to_numpy(s.t_args[i]).copy(), requires_grad=True) for i in s.slots}
    return t_in, l_in


def _is_identity(process):
    """Whether an OpInfo's ``output_process_fn_grad`` is the default ``lambda x: x`` (probed with
    1: a real processing function, e.g. ``lambda x: x.to_dense()``, fails on it or changes it)."""
    try:
        return process(1) == 1
    except Exception:
        return False


def check_grad(torch, lucid, op, fn, s, order=1):
    if not op.supports_autograd or not s.slots or random_sample(op, s):
        raise Skip("no autograd")
    if getattr(s.process_grad, "__name__", "") != "<lambda>" or not _is_identity(s.process_grad):
        raise Skip("output_process_fn_grad")
    t_in, l_in = _leaves(torch, lucid, s)
    t_outs = torch_side(lambda: _float_outputs(s.call(op.op, s.t_args, s.t_kwargs, t_in)))
    l_outs = _float_outputs(s.call(fn, s.l_args, s.l_kwargs, l_in))
    t_outs = [o for o in t_outs if o.requires_grad]
    if not t_outs:
        raise Skip("no differentiable output")
    if len(l_outs) < len(t_outs):
        return f"lucid has {len(l_outs)} float outputs, torch {len(t_outs)}"
    l_outs = [o for o in l_outs if o.requires_grad][:len(t_outs)]
    rng = np.random.default_rng(0)
    cots = [_cotangent(rng, to_numpy(o)) for o in t_outs]
    tg = torch_side(lambda: _grads(torch, t_outs, list(t_in.values()), [torch.from_numpy(c) for c in cots],
                                   create_graph=order == 2))
    lg = _grads(lucid, l_outs, list(l_in.values()), [lucid.tensor(c) for c in cots], create_graph=order == 2)
    if order == 2:
        pairs = [(a, b) for a, b in zip(tg, lg) if a is not None and a.requires_grad]
        if not pairs:
            raise Skip("first gradient has no graph")
        cots2 = [_cotangent(rng, to_numpy(a)) for a, _ in pairs]
        tg = torch_side(lambda: _grads(torch, [a for a, _ in pairs], list(t_in.values()),
                                       [torch.from_numpy(c) for c in cots2]))
        if any(b is None or not b.requires_grad for _, b in pairs):
            return "lucid's first gradient has no graph where torch's has"
        lg = _grads(lucid, [b for _, b in pairs], list(l_in.values()), [lucid.tensor(c) for c in cots2])
    # None (an unused input) means zeros, on either side
    want, got = [], []
    for i, (a, b) in enumerate(zip(tg, lg)):
        like = to_numpy(l_in[list(l_in)[i]])
        want.append(np.zeros_like(like) if a is None else to_numpy(a))
        got.append(np.zeros_like(like) if b is None else to_numpy(b))
    return compare(want, got, "grad")


def check_jvp(torch, lucid, op, fn, s):
    if not op.supports_forward_ad or not s.slots or random_sample(op, s):
        raise Skip("no forward AD")
    rng = np.random.default_rng(1)
    tans = {i: _cotangent(rng, to_numpy(s.t_args[i])) for i in s.slots}
    order = list(s.slots)

    def t_f(*xs):
        return s.call(op.op, s.t_args, s.t_kwargs, dict(zip(order, xs)))

    def l_f(*xs):
        return s.call(fn, s.l_args, s.l_kwargs, dict(zip(order, xs)))

    t_p, t_t = torch_side(lambda: torch.func.jvp(t_f, tuple(s.t_args[i].detach() for i in order),
                                                 tuple(torch.from_numpy(tans[i]) for i in order)))
    l_p, l_t = lucid.func.jvp(l_f, tuple(s.l_args[i] for i in order), tuple(lucid.tensor(tans[i]) for i in order))
    strip = lambda v: without_vectors(op, to_numpy(v))
    return compare(strip(t_p), strip(l_p), "primal") or compare(strip(t_t), strip(l_t), "tangent")


def check_vmap(torch, lucid, op, fn, s):
    if random_sample(op, s):
        raise Skip("random")
    rng = np.random.default_rng(2)
    tensor_slots = [i for i, a in enumerate(s.t_args) if isinstance(a, torch.Tensor)]
    if not tensor_slots:
        raise Skip("no tensor argument")
    batched = {}
    for i in tensor_slots:
        a = to_numpy(s.t_args[i])
        other = a + _cotangent(rng, a) * 0.1 if a.dtype.kind in "fc" else a[::-1].copy() if a.ndim else a.copy()
        batched[i] = np.stack([a, other.astype(a.dtype)])
    in_dims = tuple(0 if i in batched else None for i in range(len(s.t_args)))

    def t_f(*xs):
        return op.op(*xs, **s.t_kwargs)

    def l_f(*xs):
        return fn(*xs, **s.l_kwargs)

    t_args = [torch.from_numpy(batched[i]) if i in batched else a for i, a in enumerate(s.t_args)]
    l_args = [lucid.tensor(batched[i]) if i in batched else a for i, a in enumerate(s.l_args)]
    try:
        want = without_vectors(op, to_numpy(torch.vmap(t_f, in_dims=in_dims)(*t_args)))
    except Exception as e:  # PyTorch cannot batch it (data-dependent shapes, .item() ...)
        raise Skip(f"torch.vmap: {type(e).__name__}") from None
    got = without_vectors(op, to_numpy(lucid.func.vmap(l_f, in_dims=in_dims)(*l_args)))
    return compare(want, got, "vmap")


def run_check(check, torch, lucid, op, fn, s):
    if op.name in STORAGE_OPS:
        raise Skip("storage-dependent")
    if check == "forward":
        return check_forward(torch, lucid, op, fn, s)
    if check == "grad":
        return check_grad(torch, lucid, op, fn, s)
    if check == "gradgrad":
        if not op.supports_gradgrad:
            raise Skip("no gradgrad")
        return check_grad(torch, lucid, op, fn, s, order=2)
    if check == "jvp":
        return check_jvp(torch, lucid, op, fn, s)
    return check_vmap(torch, lucid, op, fn, s)


# ----------------------------------------------------------------------------- driver

def _alarm(signum, frame):
    raise Timeout()


def sweep(args):
    warnings.filterwarnings("ignore")
    import torch
    from torch.testing._internal.common_methods_invocations import op_db

    import lucid

    torch.manual_seed(0)
    signal.signal(signal.SIGALRM, _alarm)
    patterns = args.ops.split(",")
    checks = args.checks.split(",")
    counts = collections.Counter()
    problems = []
    for op in op_db:
        if not any(fnmatch.fnmatch(op.name, p) for p in patterns):
            continue
        fn = lucid_function(lucid, op)
        if fn is None:
            counts["missing"] += 1
            problems.append({"op": op.name, "variant": op.variant_test_name, "check": "lookup", "what": "no Lucid function"})
            print(f"{op.name:32s} {'':10s} lookup    : no Lucid function")
            continue
        for check in checks:
            grad_dtypes = getattr(args, "grad_dtypes", "float64")  # a caller's Namespace may predate it
            dtypes = (args.dtypes if check == "forward" else grad_dtypes).split(",")
            first, seen = None, collections.Counter()
            for dname in dtypes:
                tdtype = getattr(torch, dname)
                if tdtype not in op.supported_dtypes("cpu"):
                    continue
                try:
                    samples = list(op.sample_inputs("cpu", tdtype, requires_grad=False))[:args.max_samples]
                except Exception:
                    continue
                for k, sample in enumerate(samples):
                    signal.alarm(args.timeout)
                    try:
                        s = Sample(torch, lucid, sample)
                        try:
                            msg = run_check(check, torch, lucid, op, fn, s)
                        except (Skip, Timeout):
                            raise
                        except Exception as e:
                            # which side raised decides the verdict
                            where = "torch" if _torch_raises(op, s) else "lucid"
                            if where == "torch":
                                msg = None if _lucid_raises(fn, s) else "lucid accepts what torch refuses"
                                seen["both-raise" if msg is None else "lucid-lenient"] += 1
                                if msg and not args.lenient:
                                    msg = None
                            else:
                                msg = f"lucid raises {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
                        seen["diff" if msg else "ok"] += 1
                        if msg and first is None:
                            first = f"{dname} sample {k}: {msg}"
                    except Skip:
                        seen["skip"] += 1
                    except Timeout:
                        seen["timeout"] += 1
                    except Exception as e:  # the sweep itself: translation of outputs etc.
                        seen["driver-error"] += 1
                        if args.verbose:
                            traceback.print_exc()
                    finally:
                        signal.alarm(0)
            counts.update({f"{check}:{k}": v for k, v in seen.items()})
            if first:
                problems.append({"op": op.name, "variant": op.variant_test_name, "check": check,
                                 "what": first, "counts": dict(seen)})
                print(f"{op.name:32s} {op.variant_test_name[:10]:10s} {check:10s}: {first[:220]}")
                sys.stdout.flush()
    print("\ncounts:", dict(sorted(counts.items())))
    print(f"{len(problems)} (op, check) pairs differ")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(problems, f, indent=1, default=str)
    return problems


def _torch_raises(op, s):
    try:
        op.op(*s.t_args, **s.t_kwargs)
        return False
    except Exception:
        return True


def _lucid_raises(fn, s):
    try:
        fn(*s.l_args, **s.l_kwargs)
        return False
    except Exception:
        return True


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", default="*", help="comma-separated fnmatch patterns of OpInfo names (default: all)")
    p.add_argument("--checks", default="forward,grad", help=f"comma-separated, of {','.join(CHECKS)}")
    p.add_argument("--dtypes", default="float64", help="dtypes of the forward check (e.g. float32,int64,bool,complex128)")
    p.add_argument("--grad-dtypes", default="float64",
                   help="dtypes of the other checks (float64, complex128: Wirtinger gradients as PyTorch's)")
    p.add_argument("--max-samples", type=int, default=12, help="samples per op and dtype")
    p.add_argument("--timeout", type=int, default=20, help="seconds per sample")
    p.add_argument("--lenient", action="store_true", help="also report inputs Lucid accepts and PyTorch refuses")
    p.add_argument("--json", help="write the disagreements here")
    p.add_argument("--verbose", action="store_true", help="print the sweep's own errors")
    args = p.parse_args(argv)
    bad = set(args.checks.split(",")) - set(CHECKS)
    if bad:
        p.error(f"unknown checks {sorted(bad)}")
    sweep(args)


if __name__ == "__main__":
    main()
