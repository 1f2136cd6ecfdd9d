"""``lucid.testing.assert_allclose``, ``lucid.utils.checkpoint.CheckpointFunction``,
``lucid.overrides.get_testing_overrides`` and ``redispatch_function``."""
import inspect
import warnings

import pytest

import lucid
from lucid.overrides import get_testing_overrides, handle_torch_function, has_torch_function, redispatch_function
from lucid.utils.checkpoint import CheckpointFunction


# ---------------------------------------------------------------------------- assert_allclose
def _allclose(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        lucid.testing.assert_allclose(*args, **kwargs)


def test_assert_allclose_warns_and_uses_its_own_tolerances():
    with pytest.warns(FutureWarning, match="deprecated"):
        lucid.testing.assert_allclose(lucid.tensor([1.0]), [1.0])
    _allclose(lucid.tensor([1.0]), [1.0 + 9e-5])  # float32: rtol 1e-4, atol 1e-5
    with pytest.raises(AssertionError):
        _allclose(lucid.tensor([1.0]), [1.0 + 2e-4])
    x64 = lucid.tensor([1.0], dtype=lucid.float64)
    _allclose(x64, [1.0 + 9e-6])  # float64: rtol 1e-5 (assert_close's would be 1e-7)
    with pytest.raises(AssertionError):
        _allclose(x64, [1.0 + 2e-5])
    half = lucid.tensor([1.0], dtype=lucid.float16)
    _allclose(half, lucid.tensor([1.0], dtype=lucid.float16) + 0.0009765625)  # one float16 ulp: atol 1e-3
    with pytest.raises(AssertionError):
        _allclose(lucid.tensor([3]), [4])  # integers exactly


def test_assert_allclose_defaults():
    _allclose(lucid.tensor([float("nan")]), [float("nan")])  # equal_nan=True by default
    with pytest.raises(AssertionError):
        _allclose(lucid.tensor([float("nan")]), [float("nan")], equal_nan=False)
    _allclose(lucid.tensor([1], dtype=lucid.int64), lucid.tensor([1.0]))  # dtypes need not match
    _allclose([1.0, 2.0], [1.0, 2.0])  # non-tensors become tensors
    _allclose(lucid.tensor([1.0]), [1.5], rtol=0.0, atol=0.5)
    with pytest.raises(ValueError, match="rtol"):
        _allclose(lucid.tensor([1.0]), [1.0], atol=0.1)
    with pytest.raises(AssertionError, match="custom"):
        _allclose(lucid.tensor([1.0]), [2.0], msg="custom")


def test_assert_allclose_matches_torch():
    torch = pytest.importorskip("torch")
    for got, want in (([1.0], [1.0 + 9e-5]), ([1.0], [1.0 + 2e-4]), ([2.0], [2.00003])):
        outcomes = []
        for mod, make in ((torch, torch.tensor), (lucid, lucid.tensor)):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    mod.testing.assert_allclose(make(got), want)
                    outcomes.append(True)
                except AssertionError:
                    outcomes.append(False)
        assert outcomes[0] == outcomes[1]


# ---------------------------------------------------------------------------- CheckpointFunction
def test_checkpoint_function_gradients():
    x = lucid.tensor([1.0, 2.0], dtype=lucid.float64, requires_grad=True)
    w = lucid.tensor([3.0], dtype=lucid.float64, requires_grad=True)
    calls = []

    def segment(t, scale):
        calls.append(1)
        return (t ** 3 * w).sum() * scale

    y = CheckpointFunction.apply(segment, True, x, 2.0)
    assert "CheckpointFunctionBackward" in repr(y.grad_fn) and len(calls) == 1
    y.backward()
    assert len(calls) == 2  # recomputed in the backward
    assert x.grad.tolist() == [18.0, 72.0]  # d/dx 2 w x^3 = 6 w x^2, w = 3
    assert w.grad.tolist() == [18.0]  # 2 * (1 + 8): the leaf read inside the segment gets its gradient too


def test_checkpoint_function_replays_rng():
    x = lucid.ones(64, dtype=lucid.float64, requires_grad=True)

    def noisy(t):
        return (t * lucid.rand(64, dtype=lucid.float64)).sum()

    lucid.manual_seed(0)
    out = CheckpointFunction.apply(noisy, True, x)
    lucid.manual_seed(0)
    mask = lucid.rand(64, dtype=lucid.float64)
    out.backward()
    assert lucid.equal(x.grad, mask)  # the backward saw the forward's random numbers
    assert out.item() == pytest.approx(mask.sum().item())


def test_checkpoint_function_checks():
    with pytest.warns(UserWarning, match="requires_grad"):
        CheckpointFunction.apply(lambda t: t * 2, False, lucid.ones(2))
    with pytest.raises(TypeError, match="callable"):
        CheckpointFunction.apply(3, False, lucid.ones(2, requires_grad=True))


# ---------------------------------------------------------------------------- overrides
def test_get_testing_overrides_signatures():
    table = get_testing_overrides()
    assert lucid.add in table and lucid.Tensor.add in table and lucid.nn.functional.linear in table
    for fn in (lucid.add, lucid.nn.functional.linear, lucid.linalg.norm, lucid.sum):
        dummy = table[fn]
        assert inspect.signature(dummy) == inspect.signature(lucid.overrides.original(fn))
    assert table[lucid.add](1, 2) == -1
    assert all(callable(v) for v in table.values()) and len(table) > 500


def test_redispatch_function_skips_one_hop():
    class Logged(lucid.Tensor):
        calls = []

        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            cls.calls.append(func.__name__)
            return redispatch_function(func, types, args, kwargs)

    def scaled_mul(a, b):
        if has_torch_function((a, b)):
            return handle_torch_function(scaled_mul, (a, b), a, b)
        return a * b + 1

    x = lucid.tensor([3.0]).as_subclass(Logged)
    y = lucid.tensor([4.0]).as_subclass(Logged)
    out = scaled_mul(x, y)
    # PyTorch's example: scaled_mul and mul are seen; mul's result is a plain tensor, so + is not
    assert Logged.calls == ["scaled_mul", "mul"]
    assert type(out) is lucid.Tensor and out.tolist() == [13.0]
