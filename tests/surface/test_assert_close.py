"""lucid.testing.assert_close and make_tensor (PyTorch's torch.testing), NOTE [assert_close]."""
import math
import subprocess
import sys

import numpy as np
import pytest

import lucid
from lucid.testing import assert_close, make_tensor

ULP32 = 2.0 ** -23  # float32 spacing at 1.0


def fails(actual, expected, error=AssertionError, **kw):
    with pytest.raises(error) as info:
        assert_close(actual, expected, **kw)
    return str(info.value)


# ------------------------------------------------------------- default tolerances at the boundary


@pytest.mark.parametrize("dtype, inside, outside", [
    # |a - e| <= atol + rtol * |e| with e = 1: float64 2e-7, float32 1.13e-5, float16 1.01e-3
    (lucid.float64, 1.9e-7, 2.1e-7),
    (lucid.float32, 94 * ULP32, 96 * ULP32),
    (lucid.float16, 2.0 ** -10, 2.0 ** -9),
    (lucid.complex128, 1.9e-7, 2.1e-7),
    (lucid.complex64, 94 * ULP32, 96 * ULP32),
])
def test_default_tolerances_at_the_boundary(dtype, inside, outside):
    e = lucid.tensor([1.0, 2.0], dtype=dtype)
    assert_close(lucid.tensor([1.0 + inside, 2.0], dtype=dtype), e)
    fails(lucid.tensor([1.0 + outside, 2.0], dtype=dtype), e)
    fails(lucid.tensor([1.0 - outside, 2.0], dtype=dtype), e)


def test_complex_tolerance_is_on_the_modulus():
    e = lucid.tensor([1.0 + 1.0j], dtype=lucid.complex128)
    d = 1.9e-7 / math.sqrt(2) * 0.99  # |d + d j| just inside atol + rtol * |e| (> 2e-7 here)
    assert_close(lucid.tensor([1.0 + d + (1.0 + d) * 1j], dtype=lucid.complex128), e)
    fails(lucid.tensor([1.0 + 2.0j], dtype=lucid.complex128), e)


def test_integers_and_bools_compare_exactly():
    fails(lucid.tensor([2 ** 60]), lucid.tensor([2 ** 60 + 1]))  # equal in float64, not in int64
    assert_close(lucid.tensor([2 ** 60]), lucid.tensor([2 ** 60]))
    msg = fails(lucid.tensor([True, False]), lucid.tensor([True, True]))
    assert msg.startswith("Tensor-likes are not equal!")
    assert_close(lucid.tensor([3]), lucid.tensor([4]), rtol=0, atol=1)  # explicit tolerances apply


def test_explicit_tolerances_replace_the_defaults():
    assert_close(lucid.tensor([1.0]), lucid.tensor([1.5]), rtol=0.0, atol=0.5)
    fails(lucid.tensor([1.0]), lucid.tensor([1.5]), rtol=0.0, atol=0.49)
    assert_close(lucid.tensor([1.0]), lucid.tensor([2.0]), rtol=0.5, atol=0.0)  # relative to expected
    fails(lucid.tensor([2.0]), lucid.tensor([1.0]), rtol=0.5, atol=0.0)


@pytest.mark.parametrize("kw, missing", [({"rtol": 1e-3}, "atol"), ({"atol": 1e-3}, "rtol")])
def test_rtol_and_atol_come_together(kw, missing):
    for a, e in ((lucid.tensor([1.0]), lucid.tensor([1.0])), (1.0, 1.0)):
        msg = fails(a, e, ValueError, **kw)
        assert msg == f"Both 'rtol' and 'atol' must be either specified or omitted, but got no {missing}."


def test_nan_and_inf():
    nan, inf = float("nan"), float("inf")
    msg = fails(lucid.tensor([1.0, nan]), lucid.tensor([1.0, nan]))
    assert "Greatest absolute difference: nan at index (1,)" in msg
    assert_close(lucid.tensor([1.0, nan]), lucid.tensor([1.0, nan]), equal_nan=True)
    assert_close(lucid.tensor([inf, -inf]), lucid.tensor([inf, -inf]))
    fails(lucid.tensor([inf]), lucid.tensor([-inf]))
    fails(lucid.tensor([1e38]), lucid.tensor([inf]))
    assert_close(nan, nan, equal_nan=True)
    fails(nan, nan)


# ------------------------------------------------------------------------------ messages


def test_tensor_mismatch_message():
    msg = fails(lucid.tensor([1.0, 2.0, 3.0]), lucid.tensor([1.0, 4.0, 3.5]))
    assert msg == ("Tensor-likes are not close!\n\n"
                   "Mismatched elements: 2 / 3 (66.7%)\n"
                   "Greatest absolute difference: 2.0 at index (1,) (up to 1e-05 allowed)\n"
                   "Greatest relative difference: 0.5 at index (1,) (up to 1.3e-06 allowed)")


def test_message_indices_are_multi_dimensional_and_skip_matches():
    a = lucid.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=lucid.float64)
    e = lucid.tensor([[1.0, 2.5], [3.0, 0.0]], dtype=lucid.float64)
    msg = fails(a, e)
    assert "Mismatched elements: 2 / 4 (50.0%)" in msg
    assert "Greatest absolute difference: 4.0 at index (1, 1) (up to 1e-07 allowed)" in msg
    assert "Greatest relative difference: inf at index (1, 1) (up to 1e-07 allowed)" in msg
    msg = fails(lucid.tensor([0.0, 5.0]), lucid.tensor([1e-4, 5.0]))  # float32 difference, as PyTorch's
    assert f"Greatest absolute difference: {float(np.float32(1e-4))} at index (0,)" in msg


def test_equality_message_drops_the_allowed_part():
    msg = fails(lucid.tensor([1, 2]), lucid.tensor([1, 3]))
    assert msg == ("Tensor-likes are not equal!\n\nMismatched elements: 1 / 2 (50.0%)\n"
                   "Greatest absolute difference: 1 at index (1,)\n"
                   "Greatest relative difference: 0.3333333432674408 at index (1,)")


def test_scalar_messages():
    assert fails(lucid.tensor(1.0), lucid.tensor(2.0)) == (
        "Scalars are not close!\n\nExpected 2.0 but got 1.0.\n"
        "Absolute difference: 1.0 (up to 1e-05 allowed)\nRelative difference: 0.5 (up to 1.3e-06 allowed)")
    assert fails(1, 2) == ("Scalars are not equal!\n\nExpected 2 but got 1.\nAbsolute difference: 1\n"
                           "Relative difference: 0.5")
    assert fails(1.0, 1.0 + 2.1e-7).startswith("Scalars are not close!\n\nExpected 1.00000021 but got 1.0.")
    assert_close(1.0, 1.0 + 1.9e-7)


def test_msg_replaces_or_wraps_the_message():
    assert fails(lucid.tensor([1.0]), lucid.tensor([2.0]), msg="boom") == "boom"
    msg = fails([lucid.tensor([1.0, 2.0])], [lucid.tensor([1.0, 3.0])], msg=lambda m: f"Header\n{m}\nFooter")
    assert msg.startswith("Header\nTensor-likes are not close!")
    assert msg.endswith("\n\nThe failure occurred for item [0]\nFooter")


def test_attribute_mismatches():
    assert fails(lucid.tensor([1, 2]), lucid.tensor([1.0, 2.0])) == \
        "The values for attribute 'dtype' do not match: lucid.int64 != lucid.float32."
    assert fails(lucid.zeros(2), lucid.zeros(3)) == "The values for attribute 'shape' do not match: (2,) != (3,)."
    assert fails(lucid.zeros(()), lucid.zeros(1)).startswith("The values for attribute 'shape'")
    x, y = lucid.zeros(2, 3), lucid.zeros(3, 2).t()
    assert_close(x, y)  # strides are not checked by default
    assert fails(x, y, check_stride=True) == "The values for attribute 'stride()' do not match: (3, 1) != (1, 2)."


def test_check_dtype_false_promotes():
    a, e = lucid.tensor([1.0]), lucid.tensor([1.0], dtype=lucid.float64)
    assert_close(a, e, check_dtype=False)
    msg = fails(lucid.tensor([1.0]), lucid.tensor([1.1], dtype=lucid.float64), check_dtype=False)
    assert "(up to 1e-05 allowed)" in msg and "(up to 1.3e-06 allowed)" in msg  # the looser dtype's
    assert "Greatest absolute difference: 0.10000000000000009" in msg
    assert_close(lucid.tensor([1, 2]), lucid.tensor([1.0, 2.0]), check_dtype=False)


def test_devices(request):
    from lucid.testing import strict_device

    strict_device.enable()
    a = lucid.tensor([1.0, 2.0], device="strict:1")
    assert fails(a, lucid.tensor([1.0, 2.0], device="cpu")) == \
        "The values for attribute 'device' do not match: strict:1 != cpu."
    assert_close(a, lucid.tensor([1.0, 2.0], device="cpu"), check_device=False)
    fails(a, lucid.tensor([1.0, 2.5], device="cpu"), check_device=False)
    reads = strict_device.HOST_READS[0]
    assert_close(a, lucid.tensor([1.0, 2.0 + 1e-6], device="strict:1"))
    assert strict_device.HOST_READS[0] - reads == 1  # the verdict only; statistics only on failure
    msg = fails(a, lucid.tensor([1.0, 4.0], device="strict:1"))
    assert "Greatest absolute difference: 2.0 at index (1,)" in msg
    assert_close(lucid.zeros(2, device="meta"), lucid.ones(2, device="meta"))  # no values to compare


# ---------------------------------------------------------------------- pairing of inputs


def test_python_and_numpy_scalars():
    assert_close(np.float32(1.0), 1.0)
    assert fails(1, 1.0) == "The (d)types do not match: <class 'int'> != <class 'float'>."
    assert_close(1, 1.0, check_dtype=False)
    assert_close(1 + 2j, 1 + 2j)
    assert fails(True, False) == "Booleans mismatch: True is not False"
    assert_close(np.bool_(True), True)
    assert_close(None, None)
    assert fails(None, 1) == "None mismatch: None is not 1"


def test_numpy_arrays_pair_with_numpy_arrays():
    assert_close(np.array([1.0, 2.0]), np.array([1.0, 2.0 + 1e-8]))
    msg = fails(np.array([1.0, 2.0]), np.array([1.0, 2.5]))
    assert "Greatest relative difference: 0.2 at index (1,) (up to 1e-07 allowed)" in msg
    assert_close(np.array([1, 2], np.uint16), np.array([1, 2], np.uint16))


@pytest.mark.parametrize("actual, expected", [
    (lucid.tensor([1.0]), np.array([1.0])), (lucid.tensor(1.0), 1.0), ("a", "a"), (object(), object()),
])
def test_unpairable_inputs_are_a_type_error(actual, expected):
    assert fails(actual, expected, TypeError) == (
        f"No comparison pair was able to handle inputs of type {type(actual)} and {type(expected)}.")


def test_sequences_and_mappings_recurse():
    t = lucid.tensor
    assert_close([1, (t([1.0]), {"a": 2.0})], [1, (t([1.0]), {"a": 2.0})])
    msg = fails([1, (t([1.0]), {"a": 2.0})], [1, (t([1.0]), {"a": 3.0})])
    assert msg.endswith("\n\nThe failure occurred for item [1][1]['a']")
    assert fails([1, 2], [1]) == "The length of the sequences mismatch: 2 != 1"
    assert fails({"a": 1}, {"b": 1}) == ("The keys of the mappings do not match:\n"
                                         "Missing keys in the actual mapping: ['b']\n"
                                         "Additional keys in the actual mapping: ['a']")
    assert_close(lucid.zeros(2, 3).shape, (2, 3))  # a Size is a sequence of ints
    assert fails(lucid.Size([2, 3]), lucid.Size([2, 4])).endswith("The failure occurred for item [1]")


def test_allow_subclasses():
    p = lucid.nn.Parameter(lucid.tensor([1.0]))
    assert_close(p, lucid.tensor([1.0]))  # requires_grad does not matter
    assert fails(p, lucid.tensor([1.0]), TypeError, allow_subclasses=False).startswith(
        "No comparison pair was able to handle inputs of type")


def test_messages_match_torch():
    torch = pytest.importorskip("torch")
    cases = [([1.0, 2.0, 3.0], [1.0, 4.0, 3.5], "float32"), ([[1.0, 2.0], [3.0, 4.0]], [[1.0, 2.5], [3.0, 0.0]],
             "float64"), ([1, 2, 5], [1, 3, 9], "int64"), ([0.0, 5.0], [1e-4, 5.0], "float32"),
             ([1.0, float("nan")], [1.0, 1.0], "float32"), (3.5, 4.0, "float16"), ([1 + 1j, 2], [1 + 1j, 2 + 1j],
                                                                                    "complex64")]
    for a, e, dt in cases:
        with pytest.raises(AssertionError) as want:
            torch.testing.assert_close(torch.tensor(a, dtype=getattr(torch, dt)),
                                       torch.tensor(e, dtype=getattr(torch, dt)))
        got = fails(lucid.tensor(a, dtype=getattr(lucid, dt)), lucid.tensor(e, dtype=getattr(lucid, dt)))
        assert got == str(want.value), (a, e, dt)
    for a, e in ((1, 2), (1.0, 1.0 + 2.1e-7), (1, 1.0), ([1, 2], [1]), ({"a": 1}, {"b": 1})):
        with pytest.raises(AssertionError) as want:
            torch.testing.assert_close(a, e)
        assert fails(a, e) == str(want.value)


# ----------------------------------------------------------------------------- make_tensor


@pytest.mark.parametrize("dtype, low, high", [
    (lucid.float32, -9, 9), (lucid.float64, -9, 9), (lucid.float16, -9, 9), (lucid.int64, -9, 9),
    (lucid.int8, -9, 9), (lucid.uint8, 0, 9), (lucid.bool, 0, 1),
])
def test_make_tensor_default_ranges(dtype, low, high):
    x = make_tensor(200, dtype=dtype, device=lucid.get_default_device())
    assert x.shape == (200,) and x.dtype == dtype and x.device == lucid.get_default_device()
    v = x.cpu().numpy().astype(np.float64)
    assert v.min() >= low and v.max() <= high and len(np.unique(v)) > 1


def test_make_tensor_complex_draws_both_parts():
    z = make_tensor(100, dtype=lucid.complex64, device="cpu", low=-1, high=1).numpy()
    for part in (z.real, z.imag):
        assert part.min() >= -1 and part.max() < 1 and part.std() > 0.3


def test_make_tensor_bounds_are_clamped_and_checked():
    x = make_tensor(100, dtype=lucid.int8, device="cpu", low=-1000, high=1000).numpy().astype(int)
    assert x.min() >= -128 and x.max() <= 127 and x.max() - x.min() > 100
    big = make_tensor(100, dtype=lucid.float64, device="cpu", low=-1e308, high=1e308).numpy()
    assert np.isfinite(big).all() and big.max() > 1e306
    i = make_tensor(100, dtype=lucid.int64, device="cpu", low=0.5, high=2.5).numpy()  # ceil'd: [1, 3)
    assert set(np.unique(i)) <= {1, 2}
    with pytest.raises(ValueError, match=r"^make_tensor: `low` must be less than `high`, but got 2 >= 1"):
        make_tensor(3, dtype=lucid.float32, device="cpu", low=2, high=1)
    with pytest.raises(ValueError, match=r"^make_tensor: `low` and `high` cannot be NaN"):
        make_tensor(3, dtype=lucid.float32, device="cpu", low=float("nan"))
    with pytest.raises(ValueError, match=r"only supports \[0, 256\)"):
        make_tensor(3, dtype=lucid.uint8, device="cpu", low=300, high=400)
    with pytest.warns(FutureWarning, match="low==high"):
        same = make_tensor(3, dtype=lucid.float32, device="cpu", low=2, high=2)
    assert same.tolist() == [2.0, 2.0, 2.0]


def test_make_tensor_noncontiguous_exclude_zero_and_grad():
    dev = lucid.get_default_device()
    x = make_tensor((3, 4), dtype=lucid.float32, device=dev, noncontiguous=True, requires_grad=True)
    assert x.shape == (3, 4) and not x.is_contiguous() and x.stride() == (8, 2) and x.storage_offset() == 1
    assert x.requires_grad and x.is_leaf
    assert make_tensor(1, dtype=lucid.float32, device=dev, noncontiguous=True).is_contiguous()  # 1 element
    z = make_tensor(500, dtype=lucid.int8, device=dev, low=0, high=2, exclude_zero=True).cpu().numpy()
    assert (z == 1).all()
    f = make_tensor(50, dtype=lucid.float16, device=dev, low=0, high=2 ** -20, exclude_zero=True).cpu().numpy()
    assert (f != 0).all()
    with pytest.raises(ValueError, match=r"^make_tensor: `requires_grad=True` is not supported"):
        make_tensor(3, dtype=lucid.int64, device="cpu", requires_grad=True)
    with pytest.raises(TypeError, match=r"^make_tensor: the requested dtype 'bad' is not supported"):
        make_tensor(3, dtype="bad", device="cpu")


def test_import_lucid_testing_is_cheap():
    code = ("import sys, lucid.testing; from lucid.testing import assert_close, make_tensor; "
            "print(sorted(m for m in ('lucid.nn', 'scipy', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
