"""Device probes (NOTE [Devices]), threads (NOTE [Threads]) and the determinism flag."""
import pytest

import lucid
from lucid import nn

UNAVAILABLE = ["cuda", "cuda:0", "mps", "metal", lucid.device("cuda", 1)]
# These check what a machine without a GPU answers; on one with a GPU, tests/gpu checks the rest.
pytestmark = pytest.mark.skipif(lucid.cuda.is_available(), reason="a CUDA device is available here")


def test_cuda_and_backend_probes_answer_truthfully():
    assert lucid.cuda.is_available() is False and lucid.cuda.device_count() == 0
    assert lucid.cuda.is_initialized() is False
    lucid.cuda.manual_seed(0)
    lucid.cuda.manual_seed_all(0)
    lucid.cuda.empty_cache()
    with pytest.raises(RuntimeError, match=r"lucid.cuda.current_device: device 'cuda' is not available"):
        lucid.cuda.current_device()
    assert lucid.backends.mps.is_available() is False and lucid.backends.mps.is_built() is False
    assert lucid.backends.cudnn.is_available() is False
    old = lucid.backends.cudnn.benchmark
    lucid.backends.cudnn.benchmark, lucid.backends.cudnn.deterministic = True, True
    assert lucid.backends.cudnn.benchmark is True
    lucid.backends.cudnn.benchmark, lucid.backends.cudnn.deterministic = old, False
    lucid.backends.cuda.matmul.allow_tf32 = False


def test_device_objects():
    d = lucid.device("cuda:1")
    assert (d.type, d.index, str(d), repr(d)) == ("cuda", 1, "cuda:1", "device(type='cuda', index=1)")
    assert lucid.device("cuda", 1) == d and lucid.device(2) == lucid.device("cuda:2")
    assert lucid.device("cpu") == "cpu" and lucid.device("cpu") != lucid.device("cuda")
    assert hash(lucid.device("cpu")) == hash(lucid.device("cpu"))
    with pytest.raises(RuntimeError, match="expected one of cpu, cuda"):
        lucid.device("gpu0")
    run_default = lucid.get_default_device()  # the test command also runs this on the stand-in
    try:
        lucid.set_default_device("cpu")
        assert lucid.zeros(1).device == lucid.device("cpu") and str(lucid.zeros(1).device) == "cpu"
        lucid.set_default_device(None)  # None: back to the CPU, as in PyTorch
        assert lucid.get_default_device() == lucid.device("cpu")
        with pytest.raises(RuntimeError, match="set_default_device: device 'cuda' is not available"):
            lucid.set_default_device("cuda")
        assert lucid.get_default_device() == "cpu"  # the failed call changed nothing
    finally:
        lucid.set_default_device(run_default)


@pytest.mark.parametrize("dev", UNAVAILABLE, ids=str)
def test_moving_to_an_unavailable_device_names_it(dev):
    x = lucid.tensor([1.0, 2.0])
    name = str(dev)
    with pytest.raises(RuntimeError, match=rf"^to: device '{name}' is not available \(.*is_available\(\) is False.*\); run on 'cpu'"):
        x.to(dev)
    with pytest.raises(RuntimeError, match=rf"device '{name}' is not available"):
        x.to(dev, lucid.float64)
    with pytest.raises(RuntimeError, match=rf"^tensor: device '{name}' is not available"):
        lucid.tensor([1.0], device=dev)
    with pytest.raises(RuntimeError, match=rf"^zeros: device '{name}'|device '{name}' is not available"):
        lucid.zeros(2, device=dev)
    with pytest.raises(RuntimeError, match=rf"Module.to: device '{name}' is not available"):
        nn.Linear(2, 2).to(dev)
    assert x.dtype is lucid.float32  # nothing changed


def test_mps_and_metal_errors_point_at_the_mps_probe():
    with pytest.raises(RuntimeError, match=r"lucid.backends.mps.is_available\(\) is False"):
        lucid.ones(1).to("metal")
    with pytest.raises(RuntimeError, match=r"lucid.cuda.is_available\(\) is False"):
        lucid.ones(1).cuda()


def test_cpu_moves_are_identity_and_cuda_methods_raise():
    x = lucid.tensor([1.0, 2.0], requires_grad=True, device="cpu")
    assert x.cpu() is x and x.to("cpu") is x and x.to(lucid.device("cpu")) is x
    y = x.to("cpu", lucid.float64)
    assert y.dtype is lucid.float64 and y.requires_grad
    with pytest.raises(RuntimeError, match=r"^to: device 'cuda' is not available"):
        x.cuda()
    with pytest.raises(RuntimeError, match=r"^to: device 'cuda:1' is not available"):
        x.cuda(1)
    m = nn.Linear(2, 2)
    assert m.cpu() is m
    with pytest.raises(RuntimeError, match=r"^Module.to: device 'cuda' is not available"):
        m.cuda()


def test_threads_round_trip_with_threadpoolctl():
    pytest.importorskip("threadpoolctl")
    before = lucid.get_num_threads()
    try:
        lucid.set_num_threads(1)
        assert lucid.get_num_threads() == 1
    finally:
        lucid.set_num_threads(before)
    assert lucid.get_num_threads() == before
    with pytest.raises(ValueError, match="set_num_threads: expected a positive int"):
        lucid.set_num_threads(0)


def test_threads_fallback_without_threadpoolctl(monkeypatch):
    from lucid import _runtime

    monkeypatch.setattr(_runtime, "_threadpoolctl", lambda: None)
    monkeypatch.setattr(_runtime, "_threads", None)
    monkeypatch.setattr(_runtime, "_warned", False)
    with pytest.warns(RuntimeWarning, match="threadpoolctl is not installed"):
        lucid.set_num_threads(3)
    assert lucid.get_num_threads() == 3
    lucid.set_num_threads(2)  # warns once only
    assert lucid.get_num_threads() == 2
    assert lucid.get_num_interop_threads() == 1


def test_deterministic_flag():
    assert lucid.are_deterministic_algorithms_enabled() is False
    try:
        lucid.use_deterministic_algorithms(True, warn_only=True)
        assert lucid.are_deterministic_algorithms_enabled() and lucid.is_deterministic_algorithms_warn_only_enabled()
    finally:
        lucid.use_deterministic_algorithms(False)
    assert not lucid.are_deterministic_algorithms_enabled()
    with pytest.raises(TypeError, match="use_deterministic_algorithms: expected a bool"):
        lucid.use_deterministic_algorithms(1)


def test_import_does_not_load_cuda_or_backends():
    import subprocess
    import sys

    code = "import sys, lucid; print('lucid.cuda' in sys.modules, 'lucid.backends' in sys.modules, 'threadpoolctl' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False", "False"]
