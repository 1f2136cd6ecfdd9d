"""More of torch.cuda's surface: lucid.cuda.amp as a module, memory, RNG states, streams, nvtx.

Without a GPU (CI, this suite's usual home) the tests check PyTorch's answers for a machine
without CUDA; with one, the GPU tests at the end run the calls for real.
"""
import warnings

import pytest

import lucid
import lucid.cuda as cuda

HAS_GPU = cuda.is_available()
no_gpu = pytest.mark.skipif(HAS_GPU, reason="checks the behaviour without a GPU")
gpu = pytest.mark.skipif(not HAS_GPU, reason="no CUDA device (CuPy is not installed or sees no GPU)")


def test_cuda_amp_is_a_module_with_torchs_names():
    from lucid.cuda.amp import GradScaler, autocast, custom_bwd, custom_fwd  # noqa: F401

    import lucid.cuda.amp as amp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        region = amp.autocast()
        scaler = amp.GradScaler(init_scale=8.0)
    assert isinstance(region, lucid.amp.autocast) and region.device_type == "cuda"
    assert isinstance(scaler, lucid.amp.GradScaler)
    with pytest.warns(FutureWarning, match="lucid.cuda.amp.autocast.* is deprecated"):
        cuda.amp.autocast(enabled=False)
    with pytest.warns(FutureWarning, match="custom_fwd"):
        fwd = cuda.amp.custom_fwd(cast_inputs=lucid.float32)
    assert callable(fwd(lambda ctx, x: x))


def test_out_of_memory_error_is_a_runtime_error():
    assert issubclass(cuda.OutOfMemoryError, RuntimeError)
    with pytest.raises(RuntimeError):
        raise cuda.OutOfMemoryError("CUDA out of memory")


def test_bf16_is_never_supported():
    assert cuda.is_bf16_supported() is False and cuda.is_bf16_supported(including_emulation=False) is False


@no_gpu
def test_counters_and_lists_without_a_gpu_as_torch():
    assert cuda.memory_allocated() == cuda.max_memory_allocated() == 0
    assert cuda.memory_reserved() == cuda.max_memory_reserved() == 0
    assert dict(cuda.memory_stats()) == {} and cuda.get_rng_state_all() == []
    assert cuda.is_tf32_supported() is False and cuda.get_arch_list() == []
    cuda.set_rng_state_all([])
    cuda.set_rng_state(lucid.zeros(8, dtype=lucid.uint8))  # ignored, as PyTorch's
    cuda.reset_peak_memory_stats()
    cuda.reset_max_memory_allocated()
    # the deprecated "cached" names: the "reserved" figures, with PyTorch's FutureWarning
    with pytest.warns(FutureWarning, match="memory_cached` has been renamed to `lucid.cuda.memory_reserved"):
        assert cuda.memory_cached() == 0
    with pytest.warns(FutureWarning, match="max_memory_reserved"):
        assert cuda.max_memory_cached() == 0
    with pytest.warns(FutureWarning, match="reset_peak_memory_stats"):
        cuda.reset_max_memory_cached()
    cuda.reset_accumulated_memory_stats()
    cuda.empty_cache()
    cuda.set_stream(None)
    with cuda.stream(None) as s:
        assert s is None
    with cuda.StreamContext(None):
        pass


@no_gpu
@pytest.mark.parametrize("call", [
    lambda: cuda.get_rng_state(), lambda: cuda.initial_seed(), lambda: cuda.mem_get_info(),
    lambda: cuda.memory_summary(), lambda: cuda.default_stream(), lambda: cuda.can_device_access_peer(0, 1),
    lambda: cuda.init(), lambda: cuda.ipc_collect(), lambda: cuda.set_per_process_memory_fraction(0.5),
    lambda: cuda.get_per_process_memory_fraction(), lambda: cuda.current_stream(), lambda: cuda.Stream(),
])
def test_calls_that_need_a_gpu_say_why(call):
    with pytest.raises(RuntimeError, match="is not available"):
        call()


@no_gpu
def test_nvtx_without_a_gpu():
    for call in (lambda: cuda.nvtx.range_push("a"), cuda.nvtx.range_pop, lambda: cuda.nvtx.mark("a")):
        with pytest.raises(RuntimeError, match="NVTX functions not installed"):
            call()
    region = cuda.nvtx.range("step {}", 1)  # made without error; entering it needs NVTX
    with pytest.raises(RuntimeError, match="NVTX functions not installed"):
        with region:
            pass


def test_rng_state_encoding_round_trip_and_checks():
    from lucid.cuda import random as cr

    for seed in (0, 1, 2 ** 64 - 1, 67280421310721):
        state = cr._encode(seed)
        assert state.dtype == lucid.uint8 and tuple(state.shape) == (8,)
        assert cr._decode(state, "t") == seed
    with pytest.raises(RuntimeError, match="set_rng_state: expected a uint8 tensor of shape"):
        cuda.set_rng_state(lucid.zeros(4))


def test_rng_state_take_and_restore_follow_the_device_generator_rule(monkeypatch):
    """NOTE [Device generator states]: a take reseeds with the next seed and restoring it makes a
    generator from the same seed. The CuPy generator is replaced by a recorder (no GPU here)."""
    from lucid.cuda import random as cr
    from lucid.ops import random as r

    made = []
    monkeypatch.setattr(r, "_make_device_rng", lambda dev, seed: made.append((dev, seed)) or ("rng", seed))
    monkeypatch.setattr(r, "_DEVICE_RNG", {})
    monkeypatch.setattr(r, "_DEVICE_STATES_TAKEN", [0])
    monkeypatch.setattr(r, "_DEVICE_SEED", [123])
    dev = lucid.device("cuda", 0)
    state = cr._take_state(dev)
    first_seed = cr._decode(state, "t")
    assert made[0] == (dev, 123) and r._DEVICE_RNG[dev] == ("rng", first_seed) and first_seed != 123
    cr._take_state(dev)  # moves on
    assert r._DEVICE_RNG[dev][1] != first_seed
    cr._restore_state(dev, state, "t")
    assert r._DEVICE_RNG[dev] == ("rng", first_seed)


# --------------------------------------------------------------------------- on a GPU

@gpu
def test_memory_figures_on_the_gpu():
    x = lucid.ones(1024, device="cuda")
    stats = cuda.memory_stats()
    assert stats["allocated_bytes.all.current"] >= x.numel() * 4
    assert cuda.max_memory_reserved() >= cuda.memory_reserved() >= cuda.memory_allocated()
    free, total = cuda.mem_get_info()
    assert 0 < free <= total
    assert "allocated_bytes.all.current" in cuda.memory_summary()
    cuda.reset_peak_memory_stats()
    with pytest.warns(FutureWarning):
        assert cuda.memory_cached() == cuda.memory_reserved() and cuda.max_memory_cached() >= cuda.memory_cached()
    cuda.set_per_process_memory_fraction(0.5)
    try:
        assert abs(cuda.get_per_process_memory_fraction() - 0.5) < 1e-6
    finally:
        cuda.set_per_process_memory_fraction(1.0)


@gpu
def test_rng_state_round_trip_on_the_gpu():
    lucid.manual_seed(0)
    state = cuda.get_rng_state()
    a = lucid.rand(5, device="cuda")
    cuda.set_rng_state(state)
    assert lucid.equal(a, lucid.rand(5, device="cuda"))
    assert cuda.initial_seed() == 0 and len(cuda.get_rng_state_all()) == cuda.device_count()


@gpu
def test_streams_on_the_gpu():
    s = cuda.Stream()
    with cuda.stream(s):
        assert cuda.current_stream() == s
        y = lucid.ones(8, device="cuda") * 2
    assert cuda.current_stream() != s
    e = s.record_event()
    e.synchronize()
    assert s.query() and y.sum().item() == 16.0
    assert cuda.default_stream().cuda_stream == 0
    assert cuda.is_tf32_supported() == (cuda.get_device_capability()[0] >= 8)
    assert all(a.startswith("sm_") for a in cuda.get_arch_list())
    with cuda.nvtx.range("block"):
        cuda.nvtx.mark("inside")
    g = lucid.Stream()  # device-generic: CUDA here
    assert g.device.type == "cuda" and lucid.accelerator.current_stream().device.type == "cuda"
