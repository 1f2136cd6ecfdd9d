"""lucid.set_printoptions / get_printoptions and how tensors print (NOTE [Printing tensors])."""
import doctest
import math

import numpy as np
import pytest

import lucid
from lucid._core import printing

DEFAULTS = {"precision": 8, "threshold": 1000, "edgeitems": 3, "linewidth": 75, "sci_mode": None}


@pytest.fixture(autouse=True)
def restore_options():
    saved = lucid.get_printoptions()
    yield
    lucid.set_printoptions(**saved)


def cpu(values, **kw):
    return lucid.tensor(values, device="cpu", **kw)


def old_repr(arr):
    """How Lucid printed tensor values before print options existed (NumPy's defaults)."""
    return np.array2string(arr, separator=", ", prefix="tensor(", threshold=1000, precision=8,
                           max_line_width=75, edgeitems=3, suppress_small=False, floatmode="maxprec")


def test_defaults_are_lucids_long_standing_ones():
    assert lucid.get_printoptions() == DEFAULTS
    opts = lucid.get_printoptions()
    opts["precision"] = 1  # a copy: changing it changes nothing
    assert lucid.get_printoptions() == DEFAULTS


@pytest.mark.parametrize("arr", [
    np.array([1.12345, 2.5], np.float32), np.array([1.0, 2.0], np.float32), np.array(3.5, np.float32),
    np.array([1e-5, 2.5], np.float32), np.array([0.1, 2.25]), np.arange(2000.0, dtype=np.float32),
    np.random.default_rng(0).standard_normal((4, 7)), np.arange(12).reshape(3, 4),
    np.array([True, False]), np.array([1 + 2j, 3.5 - 1j], np.complex64), np.array([np.nan, -np.inf, 1.5]),
    np.zeros((0, 3), np.float32), np.random.default_rng(1).standard_normal((40, 40)).astype(np.float32),
], ids=lambda a: f"{a.dtype}{a.shape}")
def test_default_printing_is_unchanged(arr):
    assert repr(cpu(arr)).startswith("tensor(" + old_repr(arr))


def test_numpys_global_options_do_not_reach_tensors():
    t = cpu([1.12345, 2.5, 1e-7])
    before = repr(t)
    with np.printoptions(precision=2, suppress=True, linewidth=20):
        assert repr(t) == before
    assert before == "tensor([1.12345e+00, 2.50000e+00, 1.00000e-07])"


def test_precision():
    lucid.set_printoptions(precision=2)
    assert repr(cpu([1.12345, 2.5])) == "tensor([1.12, 2.5 ])"
    assert lucid.get_printoptions()["precision"] == 2


def test_threshold_and_edgeitems_summarise():
    lucid.set_printoptions(threshold=5)
    assert repr(cpu(list(range(10)))) == "tensor([0, 1, 2, ..., 7, 8, 9])"
    assert repr(cpu([0, 1, 2, 3, 4])) == "tensor([0, 1, 2, 3, 4])"  # 5 elements: not above 5
    lucid.set_printoptions(edgeitems=1)
    assert repr(cpu(list(range(10)))) == "tensor([0, ..., 9])"
    assert repr(cpu(np.arange(12).reshape(3, 4))) == "tensor([[ 0, ...,  3],\n        ...,\n        [ 8, ..., 11]])"


def test_linewidth_wraps_lines():
    t = cpu(list(range(30)))
    assert repr(t).count("\n") == 1  # the default 75 characters: two lines
    lucid.set_printoptions(linewidth=20)
    lines = repr(t).split("\n")
    assert len(lines) > 4 and all(len(ln) <= 20 for ln in lines[:-1])


def test_profiles():
    lucid.set_printoptions(profile="short")
    assert lucid.get_printoptions() == {"precision": 2, "threshold": 1000, "edgeitems": 2, "linewidth": 75,
                                        "sci_mode": None}
    assert repr(cpu([1.12345, 2.5])) == "tensor([1.12, 2.5 ])"
    assert repr(cpu(list(range(2000)))).startswith("tensor([   0,    1, ..., 1998, 1999])")
    lucid.set_printoptions(profile="full")
    assert lucid.get_printoptions()["threshold"] == math.inf
    body = repr(cpu(list(range(2000))))
    assert "..." not in body and body.count(",") == 1999
    lucid.set_printoptions(profile="full", precision=3)  # a profile, then the other arguments
    assert lucid.get_printoptions()["precision"] == 3
    lucid.set_printoptions(profile="default")
    assert lucid.get_printoptions() == DEFAULTS


def test_sci_mode_true_is_torchs_fixed_scientific_format():
    lucid.set_printoptions(sci_mode=True, precision=4)
    assert repr(cpu([1.0, 2.0])) == "tensor([1.0000e+00, 2.0000e+00])"
    assert repr(cpu(2.0)) == "tensor(2.0000e+00)"
    assert repr(cpu([1 + 2j, -3.5 - 1j])) == \
        "tensor([ 1.0000e+00+2.0000e+00j, -3.5000e+00-1.0000e+00j], dtype=lucid.complex64)"
    assert repr(cpu([1, 2])) == "tensor([1, 2])"  # integers are never scientific


def test_sci_mode_false_is_torchs_fixed_format():
    lucid.set_printoptions(sci_mode=False, precision=4)
    assert repr(cpu([1e-5, 2.5])) == "tensor([0.0000, 2.5000])"
    assert repr(cpu([0.1, -2.5, 3.25])) == "tensor([ 0.1000, -2.5000,  3.2500])"
    assert repr(cpu([1.0, 2.0])) == "tensor([1., 2.])"  # whole numbers: PyTorch's int mode
    assert repr(cpu([1e-5, 1e9])) == "tensor([         0.0000, 1000000000.0000])"
    assert repr(cpu([float("nan"), 1.5, -float("inf")])) == "tensor([   nan, 1.5000,   -inf])"
    lucid.set_printoptions(precision=4)  # every call sets sci_mode: back to NumPy's choice
    assert lucid.get_printoptions()["sci_mode"] is None
    assert repr(cpu([1e-5, 2.5])) == "tensor([1.0e-05, 2.5e+00])"


def test_sci_mode_pads_only_over_the_values_shown():
    lucid.set_printoptions(sci_mode=False, precision=2, threshold=4, edgeitems=1)
    values = [1.5] + [123456.5] * 5 + [2.5]  # the wide middle values are not shown
    assert repr(cpu(values)) == "tensor([1.50, ..., 2.50])"


def test_printing_matches_torch_when_sci_mode_is_set():
    torch = pytest.importorskip("torch")
    saved = torch._tensor_str.get_printoptions()
    cases = [[0.1, -2.5, 3.25], [1e-5, 1e9], [1.0, 2.0], [float("nan"), 1.5, -float("inf")], [0.0, 0.0],
             [[1.5, -2.25], [1e3, 7.0]]]
    try:
        for sci in (True, False):
            for prec in (2, 4):
                torch.set_printoptions(sci_mode=sci, precision=prec)
                lucid.set_printoptions(sci_mode=sci, precision=prec)
                for c in cases:
                    assert repr(cpu(c)) == repr(torch.tensor(c)), (sci, prec, c)
    finally:
        torch.set_printoptions(**saved)


@pytest.mark.parametrize("kwargs, error, match", [
    ({"profile": "long"}, ValueError, r"^set_printoptions: profile must be one of 'default', 'short', 'full'"),
    ({"precision": -1}, ValueError, r"^set_printoptions: precision must be >= 0"),
    ({"precision": 2.5}, TypeError, r"^set_printoptions: precision must be an int"),
    ({"edgeitems": "3"}, TypeError, r"^set_printoptions: edgeitems must be an int"),
    ({"linewidth": 0}, ValueError, r"^set_printoptions: linewidth must be >= 1"),
    ({"threshold": "many"}, TypeError, r"^set_printoptions: threshold must be a number"),
    ({"sci_mode": 1}, TypeError, r"^set_printoptions: sci_mode must be a bool or None"),
])
def test_bad_options_raise_and_change_nothing(kwargs, error, match):
    lucid.set_printoptions(precision=3, sci_mode=True)
    before = lucid.get_printoptions()
    with pytest.raises(error, match=match):
        lucid.set_printoptions(**{"edgeitems": 5, **kwargs})  # a good option beside it is not applied
    assert lucid.get_printoptions() == before


def test_options_apply_to_device_and_grad_tensors():
    from lucid.testing import strict_device

    strict_device.enable()
    lucid.set_printoptions(precision=2)
    x = lucid.tensor([1.23456, 2.0], device="strict:1")
    assert repr(x) == "tensor([1.23, 2.  ], device='strict:1')"
    w = lucid.tensor([1.23456], dtype=lucid.float64, device="cpu", requires_grad=True)
    assert repr(w * 2) == "tensor([2.47], dtype=lucid.float64, grad_fn=<MulBackward0>)"
    assert str(w) == repr(w) == "tensor([1.23], dtype=lucid.float64, requires_grad=True)"
    assert repr(lucid.zeros(2, device="meta")) == "tensor(..., device='meta', size=(2,))"


def test_printing_module_examples_run():
    # lucid/_core is not a package the doctest collector walks into, so its examples run here.
    finder, runner = doctest.DocTestFinder(), doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    run_default = lucid.get_default_device()  # the examples show CPU tensors
    lucid.set_default_device("cpu")
    try:
        for test in finder.find(printing, "lucid._core.printing", globs={"lucid": lucid}):
            runner.run(test)
    finally:
        lucid.set_default_device(run_default)
    result = runner.summarize(verbose=False)
    assert result.attempted >= 8 and result.failed == 0
