"""The top-level autocast state functions (torch.set_autocast_enabled ...) drive real casts.

The state is per device type; these tests drive the "cpu" one, so their tensors are made on
the CPU whatever ``--lucid-device`` is."""
import threading

import pytest

import lucid

F16, F32 = lucid.float16, lucid.float32


@pytest.fixture(autouse=True)
def _restore_state():
    saved = (lucid.is_autocast_enabled("cpu"), lucid.get_autocast_dtype("cpu"), lucid.is_autocast_cache_enabled())
    yield
    lucid.set_autocast_enabled("cpu", saved[0])
    lucid.set_autocast_dtype("cpu", saved[1])
    lucid.set_autocast_cache_enabled(saved[2])


def _mm_dtype():
    a = lucid.ones(2, 2, device="cpu")
    return (a @ a).dtype


def test_set_enabled_and_dtype_cast_ops_outside_a_region():
    assert lucid.get_autocast_dtype("cpu") == "bfloat16" and not lucid.is_autocast_enabled("cpu")
    lucid.set_autocast_enabled("cpu", True)
    assert lucid.is_autocast_enabled("cpu")
    pytest.importorskip("ml_dtypes")  # the bfloat16 extra: without it, bfloat16 is recorded but not cast to
    assert _mm_dtype() is lucid.bfloat16
    lucid.set_autocast_dtype("cpu", F16)
    assert _mm_dtype() is F16
    x = lucid.ones(3, dtype=F16, device="cpu")
    assert x.prod().dtype is F32  # the CPU's float32 list, as in a region
    lucid.set_autocast_enabled("cpu", False)
    assert _mm_dtype() is F32 and x.prod().dtype is F16


def test_region_saves_and_restores_the_state():
    lucid.set_autocast_dtype("cpu", F16)
    with lucid.autocast("cpu"):  # takes the set dtype: no bfloat16 warning
        assert lucid.is_autocast_enabled("cpu") and _mm_dtype() is F16
        lucid.set_autocast_enabled("cpu", False)
        assert _mm_dtype() is F32
    assert not lucid.is_autocast_enabled("cpu") and lucid.get_autocast_dtype("cpu") is F16
    lucid.set_autocast_enabled("cpu", True)
    with lucid.autocast("cpu", dtype=F32):
        assert lucid.get_autocast_dtype("cpu") is F32 and _mm_dtype() is F32
    assert lucid.is_autocast_enabled("cpu") and _mm_dtype() is F16


def test_state_is_per_thread():
    lucid.set_autocast_dtype("cpu", F16)
    lucid.set_autocast_enabled("cpu", True)
    seen = []
    t = threading.Thread(target=lambda: seen.append((lucid.is_autocast_enabled("cpu"), _mm_dtype())))
    t.start()
    t.join()
    assert seen == [(False, F32)] and _mm_dtype() is F16


def test_deprecated_cpu_and_gpu_spellings():
    with pytest.warns(DeprecationWarning, match="set_autocast_cpu_dtype"):
        lucid.set_autocast_cpu_dtype(F16)
    with pytest.warns(DeprecationWarning):
        lucid.set_autocast_cpu_enabled(True)
    with pytest.warns(DeprecationWarning):
        assert lucid.is_autocast_cpu_enabled() and lucid.get_autocast_cpu_dtype() is F16
    assert _mm_dtype() is F16
    gpu = lucid.get_autocast_dtype("cuda")
    with pytest.warns(DeprecationWarning):
        lucid.set_autocast_gpu_dtype(F32)
    with pytest.warns(DeprecationWarning):
        assert lucid.get_autocast_gpu_dtype() is F32
    lucid.set_autocast_dtype("cuda", gpu)
    assert lucid.get_autocast_dtype("cuda") is F16


def test_one_argument_form_is_cuda_and_bad_arguments():
    lucid.set_autocast_enabled(True)
    try:
        assert lucid.is_autocast_enabled() and lucid.is_autocast_enabled("cuda")
    finally:
        lucid.set_autocast_enabled(False)
    assert not lucid.is_autocast_enabled("cuda")
    with pytest.raises(TypeError, match="set_autocast_enabled: argument 'enabled' must be bool"):
        lucid.set_autocast_enabled("cpu", 1)
    with pytest.raises(RuntimeError, match="set_autocast_dtype: expected one of"):
        lucid.set_autocast_dtype("tpu", F16)
    with pytest.raises(TypeError, match="set_autocast_dtype: dtype must be a lucid.dtype"):
        lucid.set_autocast_dtype("cpu", "half")


def test_cast_cache_reuses_a_weights_cast_until_cleared():
    w = lucid.ones(2, 2, requires_grad=True, device="cpu")
    with lucid.autocast("cpu", dtype=F16):
        before = (w @ w).tolist()
        with lucid.no_grad():
            w.mul_(2.0)
        # as PyTorch: the cached float16 copy of w is reused, so the in-place change is not seen
        stale = (w @ w).tolist()
        lucid.clear_autocast_cache()
        fresh = (w @ w).tolist()
    assert before == stale == [[2.0, 2.0], [2.0, 2.0]]
    assert fresh == [[8.0, 8.0], [8.0, 8.0]]


def test_cache_disabled_casts_afresh_and_outermost_exit_clears():
    w = lucid.ones(2, 2, requires_grad=True, device="cpu")
    lucid.set_autocast_cache_enabled(False)
    assert not lucid.is_autocast_cache_enabled()
    with lucid.autocast("cpu", dtype=F16):  # takes the thread's cache setting
        (w @ w).sum()
        with lucid.no_grad():
            w.mul_(2.0)
        assert (w @ w).tolist() == [[8.0, 8.0], [8.0, 8.0]]
    lucid.set_autocast_cache_enabled(True)
    with lucid.autocast("cpu", dtype=F16):
        (w @ w).sum()
    with lucid.no_grad():
        w.mul_(0.5)
    with lucid.autocast("cpu", dtype=F16):  # the first region's exit dropped its cache
        assert (w @ w).tolist() == [[2.0, 2.0], [2.0, 2.0]]


def test_cached_cast_still_carries_gradients():
    w = lucid.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True, device="cpu")
    x = lucid.tensor([[1.0, 0.0], [0.0, 1.0]], device="cpu")
    with lucid.autocast("cpu", dtype=F16):
        y = (x @ w).float().sum() + (x @ w).float().sum()  # the second use hits the cache
    y.backward()
    assert w.grad.dtype is F32 and w.grad.tolist() == [[2.0, 2.0], [2.0, 2.0]]


def test_nesting_counter():
    assert lucid.autocast_increment_nesting() == 1
    assert lucid.autocast_increment_nesting() == 2
    assert lucid.autocast_decrement_nesting() == 1
    assert lucid.autocast_decrement_nesting() == 0
    with lucid.autocast("cpu", dtype=F16):
        assert lucid.autocast_increment_nesting() == 2
        assert lucid.autocast_decrement_nesting() == 1


def test_grad_scaler_and_names_at_top_level():
    assert lucid.GradScaler is lucid.amp.GradScaler
    for name in ("set_autocast_enabled", "clear_autocast_cache", "GradScaler", "Stream", "Event"):
        assert name in dir(lucid)


def test_torch_parity_of_region_restore():
    torch = pytest.importorskip("torch")
    torch.set_autocast_dtype("cpu", torch.float16)
    try:
        with torch.autocast("cpu"):
            assert torch.get_autocast_dtype("cpu") == torch.float16
        assert not torch.is_autocast_enabled("cpu")
    finally:
        torch.set_autocast_dtype("cpu", torch.bfloat16)
    lucid.set_autocast_dtype("cpu", F16)
    with lucid.autocast("cpu"):
        assert lucid.get_autocast_dtype("cpu") is F16
    assert not lucid.is_autocast_enabled("cpu")
