"""lucid.accelerator (torch.accelerator), lucid.Stream / lucid.Event, and lucid.backends' CPU answers."""
import subprocess
import sys

import numpy as np
import pytest

import lucid

acc = lucid.accelerator
NO_GPU = not lucid.cuda.is_available()
needs_no_gpu = pytest.mark.skipif(not NO_GPU, reason="checks the behaviour without an accelerator")
pytestmark = pytest.mark.filterwarnings("ignore:Use `:FutureWarning")
NEEDS_DEVICE = ["current_device_index", "current_device_idx", "current_stream", "synchronize", "empty_cache",
                "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved", "memory_stats",
                "reset_peak_memory_stats", "reset_accumulated_memory_stats", "get_memory_info",
                "get_device_capability"]


def test_quickstart_line_picks_a_device():
    device = acc.current_accelerator().type if acc.is_available() else "cpu"
    x = lucid.ones(3, device=device)
    assert x.device.type == device and (x * 2).sum().item() == 6.0


@needs_no_gpu
def test_without_an_accelerator_as_torch():
    assert acc.is_available() is False and acc.device_count() == 0
    assert acc.current_accelerator(check_available=True) is None
    for name in NEEDS_DEVICE:
        with pytest.raises(RuntimeError, match="Cannot access accelerator device when none is available"):
            getattr(acc, name)()
    with pytest.raises(RuntimeError, match="synchronize: Cannot access"):
        acc.synchronize()
    for name in ("set_device_index", "set_device_idx"):
        with pytest.raises(RuntimeError, match="Cannot access accelerator"):
            getattr(acc, name)(0)
    with acc.device_index(None):  # None: no switching, allowed without a device
        pass
    with pytest.raises(RuntimeError, match="Cannot access accelerator"):
        with acc.device_index(0):
            pass
    with pytest.raises(TypeError, match="set_stream: expected a lucid.Stream"):
        acc.set_stream(None)


@needs_no_gpu
def test_torch_agrees_without_an_accelerator():
    torch = pytest.importorskip("torch")
    if torch.accelerator.is_available():
        pytest.skip("torch sees an accelerator")
    assert torch.accelerator.device_count() == acc.device_count() == 0
    for name in NEEDS_DEVICE:
        with pytest.raises(RuntimeError, match="Cannot access accelerator device when none is available"):
            getattr(torch.accelerator, name)()


def test_the_strict_stand_in_is_not_an_accelerator():
    from lucid._core import backend
    from lucid.testing import strict_device

    had = "strict" in backend._BACKENDS
    strict_device.enable()
    try:
        assert lucid.zeros(1, device="strict").device.type == "strict"
        assert acc.is_available() is lucid.cuda.is_available()
        assert acc.device_count() == lucid.cuda.device_count()
        got = acc.current_accelerator()
        assert got is None or got.type == "cuda"
        assert lucid.Stream(device="strict").query()  # a host device: the synchronous stream
    finally:
        if not had:
            strict_device.disable()


def test_current_accelerator_follows_cupy():
    import importlib.util

    has_cupy = importlib.util.find_spec("cupy") is not None
    assert (acc.current_accelerator() is not None) == has_cupy


def test_import_lucid_does_not_import_cuda_or_cupy():
    code = ("import sys, lucid; lucid.accelerator.is_available(); import lucid.cuda; "
            "print('lucid.cuda.amp' in sys.modules, 'cupy' in sys.modules and not lucid.cuda.is_available())")
    out = subprocess.run([sys.executable, "-c", "import sys, lucid; print('lucid.cuda' in sys.modules)"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False"]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]


# ---------------------------------------------------------------------- Stream, Event

@needs_no_gpu
def test_generic_stream_and_event_on_the_cpu_as_torch():
    s, e = lucid.Stream(), lucid.Event()
    assert s.device == lucid.device("cpu") and e.device == lucid.device("cpu")
    assert s.query() and e.query() and s.device_index == -1 and s.device_type == "cpu"
    s.synchronize()
    e.synchronize()
    e.wait()
    s.wait_event(e)
    assert lucid.Stream("cpu") == s
    with s as entered:
        assert entered is s
    with pytest.raises(RuntimeError, match="Event.record: the cpu backend doesn't support events"):
        e.record()
    with pytest.raises(RuntimeError, match="doesn't support events"):
        s.record_event()
    with pytest.raises(ValueError, match="enable_timing=True"):
        e.elapsed_time(lucid.Event())
    with pytest.raises(RuntimeError, match="Stream: Cannot access accelerator device"):
        lucid.Stream(device="cuda")


def test_torch_generic_stream_on_the_cpu():
    torch = pytest.importorskip("torch")
    if torch.accelerator.is_available():
        pytest.skip("torch sees an accelerator")
    with pytest.raises(RuntimeError, match="doesn't support events"):
        torch.Event(device="cpu").record()
    assert torch.Stream(device="cpu").query() and lucid.Stream(device="cpu").query()


# ---------------------------------------------------------------------- backends

def test_backends_answer_for_numpy():
    b = lucid.backends
    blas = str(np.show_config(mode="dicts")["Build Dependencies"]["blas"]["name"]).lower()
    assert b.mkl.is_available() is ("mkl" in blas)
    assert b.mkldnn.is_available() is False
    assert isinstance(b.openmp.is_available(), bool)
    simd = np.show_config(mode="dicts")["SIMD Extensions"]
    found = set(simd["baseline"]) | set(simd["found"])
    cap = b.cpu.get_cpu_capability()
    assert cap in ("AVX512", "AVX2", "DEFAULT")
    if cap == "AVX512":
        assert any("AVX512" in t or t == "X86_V4" for t in found)
    if "X86_V3" in found or "AVX2" in found:
        assert cap in ("AVX512", "AVX2")


def test_opt_einsum_reports_numpys_greedy_path_and_flags_round_trip():
    oe = lucid.backends.opt_einsum
    assert oe.is_available() and oe.enabled and oe.strategy == "greedy" and oe.get_opt_einsum() is None
    with oe.flags(enabled=False, strategy="optimal"):
        assert oe.enabled is False and oe.strategy == "optimal"
    assert oe.enabled is True and oe.strategy == "greedy"
    with pytest.raises(ValueError, match="set_flags: `strategy` must be one of"):
        oe.set_flags(None, "fastest")
    # the greedy path is what lucid.einsum computes with: the chain's value agrees with NumPy's
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal((3, 3)) for _ in range(3))
    got = lucid.einsum("ij,jk,kl->il", *(lucid.tensor(m) for m in (a, b, c)))
    np.testing.assert_allclose(got.numpy(), a @ b @ c, rtol=1e-12)
