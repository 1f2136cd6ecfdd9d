"""Strides and storage, Python protocols (__format__, __complex__, __index__), DLPack,
predicates, legacy typed constructors and Tensor.type()."""
import operator

import numpy as np
import pytest

import lucid
from lucid.utils.benchmark import Timer


def test_strides_offsets_and_contiguity():
    x = lucid.arange(24).reshape(2, 3, 4)
    assert x.stride() == (12, 4, 1) and x.stride(0) == 12 and x.stride(-1) == 1
    t = x.transpose(0, 2)
    assert t.stride() == (1, 4, 12) and not t.is_contiguous() and x.is_contiguous()
    s = x[1, 1:]
    assert s.storage_offset() == 16 and s.stride() == (4, 1)
    assert s.data_ptr() == x.data_ptr() + 16 * 8
    assert x[:, :, ::2].stride() == (12, 4, 2)
    assert lucid.zeros(3).expand(2, 3).stride() == (0, 1)
    with pytest.raises(IndexError, match="stride: dimension 3 out of range"):
        x.stride(3)
    assert (x.nbytes, x.itemsize, x.element_size()) == (24 * 8, 8, 8)
    assert lucid.zeros(2, dtype=lucid.float16).nbytes == 4


def test_strides_match_torch():
    torch = pytest.importorskip("torch")
    a = np.arange(60).reshape(3, 4, 5)
    x, tx = lucid.tensor(a), torch.tensor(a)
    for f in (lambda v: v, lambda v: v.transpose(0, 1), lambda v: v[1:, ::2], lambda v: v[:, 2],
              lambda v: v.permute(2, 0, 1)[1:]):
        lv, tv = f(x), f(tx)
        assert lv.stride() == tv.stride() and lv.storage_offset() == tv.storage_offset()
        assert lv.is_contiguous() == tv.is_contiguous()


def test_format_complex_index():
    t = lucid.tensor(3.14159)
    assert f"{t:.2f}" == "3.14" and f"{t:+.1e}" == "+3.1e+00" and "{:>8.3f}".format(t) == "   3.142"
    assert f"{lucid.tensor([2.5]):.1f}" == "2.5" and f"{lucid.tensor(7):04d}" == "0007"
    assert f"{lucid.tensor([1.0, 2.0])}" == str(lucid.tensor([1.0, 2.0]))
    assert f"{lucid.tensor(0.5)}" == "0.5" and f"{lucid.tensor([0.5])}" == str(lucid.tensor([0.5]))
    with pytest.raises(TypeError, match="only one-element tensors take a format spec"):
        f"{lucid.tensor([1.0, 2.0]):.2f}"
    assert complex(lucid.tensor(1.5)) == 1.5 + 0j and complex(lucid.tensor([2.0])) == 2 + 0j
    with pytest.raises(RuntimeError, match="complex: only one-element"):
        complex(lucid.ones(2))
    assert [10, 20, 30][lucid.tensor(2)] == 30 and operator.index(lucid.tensor([1])) == 1
    with pytest.raises(TypeError, match="only integer tensors"):
        operator.index(lucid.tensor(1.0))


def test_format_matches_torch():
    torch = pytest.importorskip("torch")
    for v, spec in [(3.14159, ".3f"), (2.0, ""), (7, "04d"), (True, "")]:
        assert format(lucid.tensor(v), spec) == format(torch.tensor(v), spec)
    assert format(lucid.tensor([1.5, 2.0]), "") == str(lucid.tensor([1.5, 2.0]))


def test_dlpack_with_numpy_shares_memory():
    x = lucid.arange(4.0, device="cpu")  # NumPy imports host memory only
    a = np.from_dlpack(x)
    a[0] = 9.0
    assert x.tolist() == [9.0, 1.0, 2.0, 3.0]
    b = np.arange(3, dtype=np.int32)
    t = lucid.from_dlpack(b)
    b[1] = 5
    assert t.dtype is lucid.int32 and t.tolist() == [0, 5, 2]
    assert x.__dlpack_device__() == (1, 0)
    with pytest.raises(RuntimeError, match="__dlpack__: can't export a tensor that requires grad"):
        np.from_dlpack(lucid.ones(2, requires_grad=True, device="cpu"))
    u = np.zeros(2, np.uint16)  # the unsigned dtypes come across too, sharing memory
    t = lucid.from_dlpack(u)
    u[0] = 7
    assert t.dtype is lucid.uint16 and t.tolist() == [7, 0]
    cap = lucid.to_dlpack(lucid.ones(2, device="cpu"))
    assert lucid.from_dlpack(cap).tolist() == [1.0, 1.0]


def test_dlpack_with_torch_both_ways():
    torch = pytest.importorskip("torch")
    x = lucid.arange(3.0, device="cpu")  # torch here is a CPU build: DLPack shares host memory
    tx = torch.from_dlpack(x)
    tx[1] = 7.0
    assert x.tolist() == [0.0, 7.0, 2.0]
    t = torch.arange(4, dtype=torch.int64)
    y = lucid.from_dlpack(t)
    t[0] = -1
    assert y.tolist() == [-1, 1, 2, 3] and y.dtype is lucid.int64


def test_predicates():
    x, i = lucid.zeros(2), lucid.arange(2)
    assert lucid.is_tensor(x) and not lucid.is_tensor(np.zeros(2))
    assert lucid.is_floating_point(x) and not lucid.is_floating_point(i)
    assert lucid.is_complex(lucid.zeros(1, dtype=lucid.complex64)) and not lucid.is_complex(x)
    assert lucid.is_nonzero(lucid.tensor([3])) and not lucid.is_nonzero(lucid.tensor(0.0))
    assert lucid.tensor(1.0).is_nonzero()
    with pytest.raises(RuntimeError, match="more than one value is ambiguous"):
        lucid.is_nonzero(x)
    with pytest.raises(RuntimeError, match="no values is ambiguous"):
        lucid.is_nonzero(lucid.zeros(0))
    assert lucid.is_same_size(x, i) and not lucid.is_same_size(x, lucid.zeros(3)) and x.is_same_size(i)
    assert lucid.numel(lucid.zeros(2, 5)) == 10
    with pytest.raises(TypeError, match="is_floating_point: expected a Tensor"):
        lucid.is_floating_point([1.0])


@pytest.mark.parametrize("cls,dt", [("FloatTensor", "float32"), ("DoubleTensor", "float64"),
                                    ("HalfTensor", "float16"), ("LongTensor", "int64"),
                                    ("IntTensor", "int32"), ("ShortTensor", "int16"),
                                    ("CharTensor", "int8"), ("ByteTensor", "uint8"), ("BoolTensor", "bool")])
def test_legacy_typed_constructors(cls, dt):
    C = getattr(lucid, cls)
    a = C([1, 0, 1])
    assert a.dtype == dt and a.tolist() == np.array([1, 0, 1], dtype=dt).tolist()
    b = C(2, 3)
    assert b.shape == (2, 3) and b.dtype == dt and not b.numpy().any()
    assert C(lucid.Size([4])).shape == (4,) and C().shape == (0,)
    assert isinstance(a, C) and not isinstance(lucid.zeros(1, dtype=lucid.complex64), C)
    assert a.type() == f"lucid.{cls}"


def test_legacy_constructor_errors_and_type_conversion():
    with pytest.raises(TypeError, match="FloatTensor: expected data"):
        lucid.FloatTensor(2, 2.5)
    with pytest.raises(RuntimeError, match="LongTensor: negative dimension"):
        lucid.LongTensor(-1)
    x = lucid.FloatTensor(np.array([1.5, 2.5]))
    assert x.type(lucid.LongTensor).tolist() == [1, 2] and x.type("lucid.DoubleTensor").dtype is lucid.float64
    assert x.type(lucid.int32).dtype is lucid.int32
    with pytest.raises(TypeError, match="type: unknown tensor type"):
        x.type("lucid.NopeTensor")


def test_type_names_complex_and_device_tensors():
    from lucid.testing import strict_device

    strict_device.enable()
    z = lucid.zeros(2, dtype=lucid.complex64, device="cpu")
    assert z.type() == "lucid.ComplexFloatTensor" and lucid.typename(z) == "lucid.ComplexFloatTensor"
    assert z.type("torch.ComplexDoubleTensor").dtype is lucid.complex128
    d = lucid.zeros(2, device="strict")
    assert d.type() == "lucid.strict.FloatTensor"  # PyTorch: 'torch.cuda.FloatTensor'
    moved = d.type("lucid.DoubleTensor")  # a CPU type name moves to the CPU, as in PyTorch
    assert moved.device.type == "cpu" and moved.dtype is lucid.float64
    there = lucid.zeros(2, device="cpu").type("lucid.strict.LongTensor")
    assert there.device.type == "strict" and there.dtype is lucid.int64
    with pytest.raises(TypeError, match="type: unknown tensor type 'lucid.a.b.FloatTensor'"):
        d.type("lucid.a.b.FloatTensor")


def test_legacy_constructors_match_torch():
    torch = pytest.importorskip("torch")
    for name in ("FloatTensor", "LongTensor", "BoolTensor", "DoubleTensor"):
        ours, theirs = getattr(lucid, name)([[1, 2], [0, 3]]), getattr(torch, name)([[1, 2], [0, 3]])
        assert ours.tolist() == theirs.tolist() and str(ours.dtype).split(".")[1] == str(theirs.dtype).split(".")[1]
        assert tuple(getattr(lucid, name)(2, 3).shape) == tuple(getattr(torch, name)(2, 3).shape)


def test_timer_measurements():
    calls = []
    m = Timer("f()", globals={"f": lambda: calls.append(1)}, label="append").timeit(50)
    assert m.number_per_run == 50 and len(m.raw_times) == 1 and len(calls) == 50 + 2  # 2 warm-up runs
    text = repr(m)
    assert text.startswith("<lucid.utils.benchmark.Measurement object at 0x") and "\nappend\n" in text
    assert "1 measurement, 50 runs , 1 thread" in text and "Median" not in text
    # A clock that only the statement advances (1 ms a run): the timer's overhead is nothing,
    # so one run makes a block (a clock advanced by each *read* would look like pure overhead,
    # and the block size would grow to 10**9 runs of the statement, as in PyTorch).
    clock = [0.0]

    def tick():
        clock[0] += 1e-3

    fake = Timer("tick()", globals={"tick": tick}, timer=lambda: clock[0])
    b = fake.blocked_autorange(min_run_time=0.01)
    assert b.number_per_run == 1 and 10 <= len(b.times) <= 11 and b.median == pytest.approx(1e-3)
    text = repr(b)
    assert "Median: " in text and "IQR:    0.00" in text and "measurements," in text and "runs per measurement" in text
    with pytest.raises(ValueError, match="num_threads"):
        Timer("pass", num_threads=0)


def test_legacy_classes_belong_to_a_device_type():
    """``lucid.FloatTensor`` is the CPU's class and ``lucid.cuda.FloatTensor`` CUDA's, as in
    PyTorch: construction, ``isinstance``, ``x.type(cls)`` and ``set_default_tensor_type`` follow
    the class's device type. The CUDA classes are exercised here through the same factory on the
    strict stand-in device (tests/gpu/test_cuda.py runs the real ones on a GPU)."""
    import warnings

    from lucid.ops.legacy import _typed
    from lucid.testing import strict_device

    strict_device.enable()
    StrictFloat = _typed("FloatTensor", lucid.float32, "stand-in", device_type="strict")
    a = StrictFloat([1.5, 2.5])
    assert a.device.type == "strict" and a.dtype is lucid.float32 and a.cpu().tolist() == [1.5, 2.5]
    assert StrictFloat(2, 3).device.type == "strict" and StrictFloat(2, 3).cpu().numpy().sum() == 0
    assert isinstance(a, StrictFloat) and not isinstance(a, lucid.FloatTensor)
    assert not isinstance(lucid.zeros(2, device="cpu"), StrictFloat)
    assert isinstance(lucid.zeros(2, device="cpu"), lucid.FloatTensor)
    # the CPU class makes CPU tensors whatever the default device, and refuses another device
    assert lucid.FloatTensor([1.0]).device.type == "cpu"
    with pytest.raises(RuntimeError, match="legacy constructor expects device type: cpu but device type: strict"):
        lucid.FloatTensor([1.0], device="strict")
    # x.type(cls): the class's dtype and device type
    moved = lucid.tensor([1.25, -2.0], dtype=lucid.float64, device="cpu").type(StrictFloat)
    assert moved.device.type == "strict" and moved.dtype is lucid.float32 and moved.cpu().tolist() == [1.25, -2.0]
    back = moved.type(lucid.DoubleTensor)
    assert back.device.type == "cpu" and back.dtype is lucid.float64
    # set_default_tensor_type with a device class sets the default device; a CPU class after it resets it
    prev_dtype, prev_device = lucid.get_default_dtype(), lucid.get_default_device()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            lucid.set_default_dtype(lucid.float64)
            lucid.set_default_device("cpu")
            lucid.set_default_tensor_type(StrictFloat)
            z = lucid.zeros(2)
            assert z.device.type == "strict" and z.dtype is lucid.float32
            lucid.set_default_tensor_type(lucid.DoubleTensor)
            z = lucid.zeros(2)
            assert z.device.type == "cpu" and z.dtype is lucid.float64
            lucid.set_default_device("strict")  # set by hand: a CPU tensor type leaves it
            lucid.set_default_tensor_type(lucid.FloatTensor)
            assert lucid.zeros(1).device.type == "strict" and lucid.zeros(1).dtype is lucid.float32
    finally:
        lucid.set_default_dtype(prev_dtype)
        lucid.set_default_device(prev_device)


def test_cuda_legacy_classes_without_a_gpu():
    import warnings

    if lucid.cuda.is_available():
        pytest.skip("the machine has a GPU: tests/gpu/test_cuda.py covers the classes there")
    C = lucid.cuda.FloatTensor
    assert repr(C) == "<class 'lucid.cuda.FloatTensor'>" and C.dtype is lucid.float32 and C.is_cuda
    assert lucid.cuda.LongTensor.dtype is lucid.int64 and not lucid.FloatTensor.is_cuda
    assert lucid.cuda.FloatTensor is C  # made once
    assert not isinstance(lucid.zeros(2, device="cpu"), C)
    with pytest.raises(RuntimeError, match="FloatTensor: device 'cuda' is not available"):
        C([1.0, 2.0])
    with pytest.raises(RuntimeError, match="device 'cuda' is not available"):
        lucid.zeros(2, device="cpu").type(lucid.cuda.DoubleTensor)
    prev = lucid.get_default_dtype(), lucid.get_default_device()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lucid.set_default_dtype(lucid.float64)
        try:
            for t in ("torch.cuda.FloatTensor", C):
                with pytest.raises(TypeError, match="type lucid.cuda.FloatTensor not available"):
                    lucid.set_default_tensor_type(t)
                assert lucid.get_default_dtype() is lucid.float64  # nothing changed
            with pytest.raises(TypeError, match="invalid type string 'torch.cuda.NopeTensor'"):
                lucid.set_default_tensor_type("torch.cuda.NopeTensor")
        finally:
            lucid.set_default_dtype(prev[0])
            lucid.set_default_device(prev[1])
    with pytest.raises(AttributeError, match="has no attribute 'NopeTensor'"):
        lucid.cuda.NopeTensor


def test_cuda_legacy_classes_match_torch():
    torch = pytest.importorskip("torch")
    for name in ("FloatTensor", "LongTensor", "HalfTensor", "BoolTensor"):
        ours, theirs = getattr(lucid.cuda, name), getattr(torch.cuda, name)
        assert str(ours.dtype).split(".")[1] == str(theirs.dtype).split(".")[1]
        assert ours.is_cuda == theirs.is_cuda and getattr(lucid, name).is_cuda == getattr(torch, name).is_cuda
        assert isinstance(lucid.zeros(1, dtype=ours.dtype, device="cpu"), ours) == isinstance(
            torch.zeros(1, dtype=theirs.dtype), theirs)
    with pytest.raises(RuntimeError, match="legacy constructor expects device type: cpu but device type: meta"):
        torch.FloatTensor([1.0], device="meta")
    with pytest.raises(RuntimeError, match="legacy constructor expects device type: cpu but device type: meta"):
        lucid.FloatTensor([1.0], device="meta")
