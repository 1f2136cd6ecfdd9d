"""Scan the op database on the strict stand-in device (NOTE [Strict stand-in device]) in seconds.

Runs every op-database sample's forward (against its NumPy reference), a vjp, a jvp and a vmap
on device "strict", and prints the failures grouped by the innermost lucid source line, largest
group first. A quick way to find what escapes the backend; the op-database tests run with
``--lucid-device=strict`` are the real check.

usage: python scripts/strict_scan.py [op names ...]   (from the repository root)
"""
import collections, glob, importlib, os, sys, traceback
import numpy as np
sys.path.insert(0, "tests/ops")
import lucid, lucid.func as F
from lucid.testing import strict_device
strict_device.enable()
lucid.set_default_device("strict")
ALL = []
for path in sorted(glob.glob("tests/ops/db_*.py")):
    ALL.extend(importlib.import_module(os.path.basename(path)[:-3]).OPS)
only = sys.argv[1:] 
fails = collections.defaultdict(list)
def loc_of(e):
    while e.__cause__ is not None:  # bind re-raises impl errors naming the op: look inside
        e = e.__cause__
    loc = "?"
    for f in traceback.extract_tb(e.__traceback__):
        if "/lucid/" in f.filename and "strict_device" not in f.filename:
            loc = f"{f.filename.split('/lucid/')[-1]}:{f.lineno} {f.line.strip()[:80]}"
    return loc
n = 0
for info in ALL:
    if only and info.name not in only: continue
    for i, s in enumerate(info.samples(np.random.default_rng(0))[:2]):
        n += 1
        args = [lucid.tensor(a) if isinstance(a, np.ndarray) else a for a in s.args]
        stage = "forward"
        try:
            out = info.op(*args, **s.kwargs)
            outs = out if isinstance(out, (tuple, list)) else (out,)
            want = info.ref(*s.args, **s.kwargs) if info.ref is not None else None
            if want is not None:  # every output against the reference, as test_opdb does
                want = want if isinstance(want, (tuple, list)) else (want,)
                for o, w in zip(outs, want):
                    np.testing.assert_allclose(o.detach().numpy().astype(complex), np.asarray(w).astype(complex), rtol=max(info.rtol,1e-6), atol=max(info.atol,1e-8))
            pos = [k for k, a in enumerate(s.args) if isinstance(a, np.ndarray) and a.dtype.kind in "fc"]
            if info.grad and pos:
                stage = "vjp"
                xs = [lucid.tensor(s.args[k], requires_grad=True) for k in pos]
                def fn(*xs_):
                    a2 = list(args)
                    for k, x in zip(pos, xs_): a2[k] = x
                    o = info.op(*a2, **s.kwargs)
                    o = o if isinstance(o, (tuple, list)) else (o,)
                    if info.out_index is not None: o = (o[info.out_index],)
                    o = [t for t in o if isinstance(t, lucid.Tensor)]
                    return o[0]
                y = fn(*xs)
                yr = y.real if y.dtype.kind == "c" else y
                g = lucid.autograd.grad(yr.sum(), xs, allow_unused=True)
                stage = "jvp"
                F.jvp(fn, tuple(xs), tuple(lucid.ones_like(x) for x in xs))
            if info.vmap and pos:
                stage = "vmap"
                tpos = [k for k, a in enumerate(s.args) if isinstance(a, np.ndarray)]
                def f2(*xs_):
                    a2 = list(args)
                    for k, x in zip(tpos, xs_): a2[k] = x
                    o = info.op(*a2, **s.kwargs)
                    o = o if isinstance(o, (tuple, list)) else (o,)
                    if info.out_index is not None: o = (o[info.out_index],)
                    return [t for t in o if isinstance(t, lucid.Tensor)][0]
                F.vmap(f2)(*[lucid.tensor(np.stack([s.args[k]] * 2)) for k in tpos])
        except Exception as e:
            fails[(stage, loc_of(e), type(e).__name__ + ": " + str(e).split("(arguments")[0][:100])].append(f"{info.name}-{i}")
print("samples", n, "failing groups", len(fails), "failing samples", sum(len(v) for v in fails.values()))
for k, v in sorted(fails.items(), key=lambda kv: -len(kv[1])):
    print(len(v), k[0], k[1], "|", k[2], "|", " ".join(v[:6]))
