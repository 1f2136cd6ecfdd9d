"""Differential fuzzing of Lucid: random programs (programs.py) checked on forward, backward,
double backward, jvp and vmap against float64 finite differences and Python loops, and
against PyTorch when it is installed.

CI runs a small fixed budget (derandomized, so every run checks the same programs); run
``pytest tests/fuzz --fuzz-long`` (or ``--fuzz-examples N``) by hand for a long search with
fresh programs. A failure prints the program (``Program.describe``) and hypothesis shrinks it.
"""
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, note, settings
from hypothesis import strategies as st

import lucid
import lucid.func as F
from lucid.autograd import gradcheck, gradgradcheck

from programs import OP_NAMES, Program

CI_EXAMPLES = 15
LONG_EXAMPLES = 2000
MAX_ELEMENTS = 24
LIMIT = 1e4  # programs whose values leave [-LIMIT, LIMIT] are discarded (overflow is not a bug)
CHECKED = {}  # test name -> programs that ran to their checks (shown with -s)


def _budget(request):
    cfg = request.config
    if cfg.getoption("--fuzz-examples"):
        return cfg.getoption("--fuzz-examples"), False
    if cfg.getoption("--fuzz-long"):
        return LONG_EXAMPLES, True
    return CI_EXAMPLES, False


def _settings(request):
    n, long = _budget(request)
    return settings(max_examples=n, deadline=None, derandomize=not long, database=None,
                    suppress_health_check=list(HealthCheck), print_blob=True)


shapes = st.lists(st.integers(0, 3), min_size=0, max_size=3).map(tuple)


@st.composite
def programs(draw, max_steps=5, mixed_dtypes=False):
    base = draw(shapes.filter(lambda s: int(np.prod(s)) <= MAX_ELEMENTS))
    input_shapes = [base]
    if draw(st.booleans()):
        kind = draw(st.sampled_from(["same", "broadcast", "other"]))
        if kind == "same":
            input_shapes.append(base)
        elif kind == "broadcast":
            drop = draw(st.integers(0, len(base)))
            input_shapes.append(tuple(1 if draw(st.booleans()) else n for n in base[drop:]))
        else:
            input_shapes.append(draw(shapes.filter(lambda s: int(np.prod(s)) <= MAX_ELEMENTS)))
    dtypes = [np.float64] * len(input_shapes)
    if mixed_dtypes:
        dtypes = [draw(st.sampled_from([np.float64, np.float32])) for _ in input_shapes]
    picks = st.tuples(st.integers(0, 60), st.integers(0, 60))
    steps = draw(st.lists(st.tuples(st.sampled_from(OP_NAMES), picks, st.integers(0, 60)),
                          min_size=1, max_size=max_steps))
    return Program(input_shapes, dtypes, steps, draw(st.integers(0, 2 ** 31 - 1)))


def _leaves(arrays, requires_grad=True):
    return [lucid.tensor(a, requires_grad=requires_grad) for a in arrays]


def _torch_or_none():
    try:
        import torch
    except ImportError:
        return None
    return torch


def _run_checked(prog, *xs):
    """The program's output on Lucid; the example is skipped if its values overflow or if the
    program is invalid (Lucid raises a clear error and so does PyTorch, when installed)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            out = prog.run(lucid, *xs)
        except (RuntimeError, ValueError, IndexError) as err:
            torch = _torch_or_none()
            if torch is not None:
                try:
                    prog.run(torch, *[torch.tensor(x.detach().numpy()) for x in xs])
                except Exception:
                    assume(False)  # both refuse: an invalid program, not a bug
                raise AssertionError(f"Lucid raised but PyTorch did not: {err!r}") from err
            assume(False)
    vals = out.detach().numpy()
    assume(np.all(np.isfinite(vals)) and np.all(np.abs(vals) < LIMIT))
    assume(out.numel() <= 4 * MAX_ELEMENTS)
    return out


def _count(request):
    name = request.node.name
    CHECKED[name] = CHECKED.get(name, 0) + 1


def _report(request):
    print(f"\n{request.node.name}: {CHECKED.get(request.node.name, 0)} programs checked")


def _weights(prog, shape):
    return lucid.tensor(np.random.default_rng(prog.seed + 1).uniform(0.5, 1.5, size=shape))


def _scalar_program(prog, w):
    return lambda *xs: (prog.run(lucid, *xs) * w).sum()


def test_backward_and_double_backward_match_finite_differences(request):
    @_settings(request)
    @given(programs())
    def check(prog):
        note(prog.describe())
        xs = _leaves(prog.inputs())
        out = _run_checked(prog, *xs)
        _count(request)
        f = _scalar_program(prog, _weights(prog, tuple(out.shape)))
        assert gradcheck(f, xs, eps=1e-6, atol=1e-5, rtol=1e-4)
        if len(prog.steps) <= 2:
            assert gradgradcheck(f, xs, eps=1e-6, atol=1e-4, rtol=1e-3)

    check()
    _report(request)


def test_jvp_matches_finite_differences_and_vjp(request):
    @_settings(request)
    @given(programs())
    def check(prog):
        note(prog.describe())
        arrays = prog.inputs()
        out = _run_checked(prog, *_leaves(arrays, False))
        _count(request)
        rng = np.random.default_rng(prog.seed + 2)
        tangents = [rng.standard_normal(a.shape) for a in arrays]
        primal, tangent = F.jvp(lambda *xs: prog.run(lucid, *xs), tuple(_leaves(arrays, False)),
                                tuple(_leaves(tangents, False)))
        np.testing.assert_allclose(primal.numpy(), out.detach().numpy(), rtol=1e-12, atol=1e-12)
        h = 1e-6
        plus = prog.run(lucid, *_leaves([a + h * t for a, t in zip(arrays, tangents)], False)).numpy()
        minus = prog.run(lucid, *_leaves([a - h * t for a, t in zip(arrays, tangents)], False)).numpy()
        np.testing.assert_allclose(tangent.numpy(), (plus - minus) / (2 * h), rtol=1e-4, atol=1e-5)
        # <u, J t> == <J^T u, t>
        u = rng.standard_normal(tuple(out.shape))
        _, vjp_fn = F.vjp(lambda *xs: prog.run(lucid, *xs), *_leaves(arrays, False))
        cot = vjp_fn(lucid.tensor(u))
        cot = cot if isinstance(cot, tuple) else (cot,)
        lhs = float(np.sum(u * tangent.numpy()))
        rhs = sum(float(np.sum(c.numpy() * t)) for c, t in zip(cot, tangents) if c is not None)
        assert abs(lhs - rhs) <= 1e-8 * (1 + abs(lhs))

    check()
    _report(request)


def test_vmap_matches_a_loop(request):
    @_settings(request)
    @given(programs(), st.integers(0, 3))
    def check(prog, unbatched):
        note(prog.describe())
        batch = [Program(prog.shapes, prog.dtypes, prog.steps, prog.seed + b).inputs() for b in range(3)]
        for example in batch:
            _run_checked(prog, *_leaves(example, False))
        _count(request)
        n_in = len(prog.shapes)
        skip = unbatched % (n_in + 1) if n_in > 1 else n_in  # at most one input unbatched
        in_dims = tuple(None if i == skip else 0 for i in range(n_in))
        stacked = [batch[0][i] if d is None else np.stack([ex[i] for ex in batch]) for i, d in enumerate(in_dims)]
        try:
            got = F.vmap(lambda *xs: prog.run(lucid, *xs), in_dims=in_dims)(*_leaves(stacked, False))
        except RuntimeError as err:
            # An unbatched intermediate changed in place with a batched value: torch.func.vmap
            # refuses this too ("output with shape [] doesn't match the broadcast shape [3]").
            assume("in place" not in str(err) or None not in in_dims)
            raise
        loop = []
        for ex in batch:
            args = [batch[0][i] if d is None else ex[i] for i, d in enumerate(in_dims)]
            loop.append(prog.run(lucid, *_leaves(args, False)).numpy())
        np.testing.assert_allclose(got.numpy(), np.stack(loop), rtol=1e-12, atol=1e-12)

    check()
    _report(request)


def test_matches_pytorch(request):
    torch = pytest.importorskip("torch")

    @_settings(request)
    @given(programs(mixed_dtypes=True))
    def check(prog):
        note(prog.describe())
        arrays = prog.inputs()
        xs = _leaves(arrays)
        out = _run_checked(prog, *xs)
        _count(request)
        ts = [torch.tensor(a, requires_grad=True) for a in arrays]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                ref = prog.run(torch, *ts)
            except RuntimeError:
                # PyTorch's own failures on empty tensors (its MKL FFT refuses a zero-size
                # batch) leave no reference; anywhere else Lucid should have refused too.
                assume(not any(0 in shape for shape in prog.shapes))
                raise
        assert str(out.dtype).replace("lucid.", "") == str(ref.dtype).replace("torch.", "")
        mixed = any(dt == np.float32 for dt in prog.dtypes)  # float32 rounding somewhere inside
        tol = 1e-5 if mixed else 1e-10
        np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), rtol=tol, atol=tol)
        w = np.random.default_rng(prog.seed + 1).uniform(0.5, 1.5, size=tuple(out.shape))
        (out * lucid.tensor(w, dtype=out.dtype)).sum().backward()
        (ref * torch.tensor(w, dtype=ref.dtype)).sum().backward()
        for x, t in zip(xs, ts):
            if t.grad is None:
                assert x.grad is None or not np.any(x.grad.numpy())
                continue
            # A program that touches float32 anywhere may round in float32 somewhere in either
            # library (PyTorch's atan2 backward with a float32 operand does, into a float64 grad)
            gtol = 1e-4 if mixed else 1e-9
            np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=gtol, atol=gtol)

    check()
    _report(request)
