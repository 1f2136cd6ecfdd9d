"""Runtime settings (lucid/_runtime.py): matmul precision, warn-always, determinism debug mode,
flush-denormal, anomaly mode, typename / is_storage / init_num_threads."""
import threading
import warnings

import numpy as np
import pytest

import lucid
from lucid import _runtime


@pytest.fixture
def restore_runtime():
    saved = (lucid.get_float32_matmul_precision(), lucid.backends.cuda.matmul.allow_tf32,
             lucid.is_warn_always_enabled(), lucid.are_deterministic_algorithms_enabled(),
             lucid.is_deterministic_algorithms_warn_only_enabled(), lucid.is_anomaly_enabled(),
             lucid.is_anomaly_check_nan_enabled())
    yield
    prec, tf32, warn_always, det, warn_only, anomaly, check_nan = saved
    lucid.set_float32_matmul_precision(prec)
    lucid.backends.cuda.matmul.allow_tf32 = tf32
    lucid.set_warn_always(warn_always)
    lucid.use_deterministic_algorithms(det, warn_only=warn_only)
    lucid.set_anomaly_enabled(anomaly, check_nan)


# ------------------------------------------------------------------ matmul precision


def test_matmul_precision_round_trips_and_mirrors_allow_tf32(restore_runtime):
    assert lucid.get_float32_matmul_precision() == "highest"
    for p, tf32 in (("high", True), ("medium", True), ("highest", False)):
        lucid.set_float32_matmul_precision(p)
        assert lucid.get_float32_matmul_precision() == p
        assert lucid.backends.cuda.matmul.allow_tf32 is tf32
    lucid.backends.cuda.matmul.allow_tf32 = True  # the legacy flag set by hand, as in PyTorch
    assert lucid.get_float32_matmul_precision() == "high"


def test_matmul_precision_rejects_bad_values_as_torch(restore_runtime):
    lucid.set_float32_matmul_precision("medium")
    with pytest.warns(UserWarning, match=r"^set_float32_matmul_precision: low is not one of 'highest', "
                                         r"'high', or 'medium'; the call has no effect"):
        lucid.set_float32_matmul_precision("low")
    with pytest.warns(UserWarning, match="HIGH is not one of"):  # case matters, as in PyTorch
        lucid.set_float32_matmul_precision("HIGH")
    assert lucid.get_float32_matmul_precision() == "medium"
    with pytest.raises(RuntimeError, match=r"^set_float32_matmul_precision: expects a str, but got int"):
        lucid.set_float32_matmul_precision(1)
    assert lucid.get_float32_matmul_precision() == "medium"


def test_float32_matmul_stays_full_precision_under_medium(restore_runtime):
    # "medium" permits bfloat16 internals (relative error ~4e-3); Lucid computes in float32.
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((64, 64)).astype(np.float32), rng.standard_normal((64, 64)).astype(np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    lucid.set_float32_matmul_precision("medium")
    got = (lucid.tensor(a) @ lucid.tensor(b)).cpu().numpy().astype(np.float64)
    err = np.abs(got - ref).max() / np.abs(ref).max()
    assert err < 64 * np.finfo(np.float32).eps, err


# ------------------------------------------------------------------------ warn always


def test_warn_always_repeats_warn_once_warnings(restore_runtime, monkeypatch):
    monkeypatch.setattr(_runtime, "_threadpoolctl", lambda: None)  # the path that warns once
    monkeypatch.setattr(_runtime, "_warned", False)
    monkeypatch.setattr(_runtime, "_threads", None)
    n = lucid.get_num_threads()

    def warnings_from_two_calls():
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            lucid.set_num_threads(n)
            lucid.set_num_threads(n)
        return [w for w in seen if "threadpoolctl is not installed" in str(w.message)]

    lucid.set_warn_always(False)
    assert len(warnings_from_two_calls()) == 1
    assert len(warnings_from_two_calls()) == 0  # once per process
    lucid.set_warn_always(True)
    assert lucid.is_warn_always_enabled() is True
    assert len(warnings_from_two_calls()) == 2
    lucid.set_warn_always(False)
    assert lucid.is_warn_always_enabled() is False


@pytest.mark.parametrize("bad", [1, "yes", None])
def test_warn_always_wants_a_bool(bad):
    with pytest.raises(RuntimeError, match=r"^set_warn_always: expects a bool"):
        lucid.set_warn_always(bad)


# ----------------------------------------------------------------- determinism debug mode


@pytest.mark.parametrize("mode, expect, flags", [
    (0, 0, (False, False)), ("default", 0, (False, False)), (1, 1, (True, True)),
    ("warn", 1, (True, True)), (2, 2, (True, False)), ("error", 2, (True, False)),
    (True, 1, (True, True)),  # a bool is an int (PyTorch: True is mode 1)
])
def test_deterministic_debug_mode_is_the_determinism_flag(restore_runtime, mode, expect, flags):
    lucid.set_deterministic_debug_mode(mode)
    assert lucid.get_deterministic_debug_mode() == expect
    assert (lucid.are_deterministic_algorithms_enabled(),
            lucid.is_deterministic_algorithms_warn_only_enabled()) == flags


def test_deterministic_debug_mode_reads_use_deterministic_algorithms(restore_runtime):
    lucid.use_deterministic_algorithms(True)
    assert lucid.get_deterministic_debug_mode() == 2
    lucid.use_deterministic_algorithms(True, warn_only=True)
    assert lucid.get_deterministic_debug_mode() == 1
    lucid.use_deterministic_algorithms(False, warn_only=True)
    assert lucid.get_deterministic_debug_mode() == 0


def test_deterministic_debug_mode_errors_as_torch(restore_runtime):
    lucid.set_deterministic_debug_mode(2)
    with pytest.raises(RuntimeError, match=r"^set_deterministic_debug_mode: invalid value of debug_mode, "
                                           r"expected 0, 1, or 2, but got 3"):
        lucid.set_deterministic_debug_mode(3)
    with pytest.raises(RuntimeError, match=r"expected one of `default`, `warn`, `error`, but got loud"):
        lucid.set_deterministic_debug_mode("loud")
    with pytest.raises(TypeError, match=r"^set_deterministic_debug_mode: debug_mode must be str or int, "
                                        r"but got <class 'float'>"):
        lucid.set_deterministic_debug_mode(1.0)
    assert lucid.get_deterministic_debug_mode() == 2  # the failed calls changed nothing


# ------------------------------------------------------------------------- denormals


def test_set_flush_denormal_reports_no_support_and_changes_nothing():
    assert lucid.set_flush_denormal(True) is False
    tiny = lucid.tensor([1e-310], dtype=lucid.float64)  # a float64 denormal survives
    assert tiny.cpu().numpy()[0] == 1e-310
    assert (tiny * 2).cpu().numpy()[0] == 2e-310
    assert lucid.set_flush_denormal(False) is False
    with pytest.raises(RuntimeError, match=r"^set_flush_denormal: expects a bool, but got int"):
        lucid.set_flush_denormal(1)


# ------------------------------------------------------------------------------ anomaly


def test_anomaly_flags_are_autograds_state(restore_runtime):
    assert lucid.is_anomaly_enabled() is False and lucid.is_anomaly_check_nan_enabled() is True
    lucid.set_anomaly_enabled(True, check_nan=False)
    assert lucid.autograd.is_anomaly_enabled() is True
    assert (lucid.is_anomaly_enabled(), lucid.is_anomaly_check_nan_enabled()) == (True, False)
    lucid.set_anomaly_enabled(False)
    assert (lucid.is_anomaly_enabled(), lucid.is_anomaly_check_nan_enabled()) == (False, True)
    with lucid.autograd.detect_anomaly(check_nan=False):
        assert (lucid.is_anomaly_enabled(), lucid.is_anomaly_check_nan_enabled()) == (True, False)
    assert lucid.is_anomaly_enabled() is False


def test_set_anomaly_enabled_turns_on_the_nan_check_in_backward(restore_runtime):
    x = lucid.tensor([0.0], requires_grad=True)
    (x.sqrt() * 0).sum().backward()  # off: nan gradient, no error
    assert np.isnan(x.grad.cpu().numpy()[0])
    lucid.set_anomaly_enabled(True)
    x.grad = None
    y = (x.sqrt() * 0).sum()
    with pytest.raises(RuntimeError, match=r"anomaly: function '.*' returned nan values"):
        y.backward()


@pytest.mark.parametrize("args", [(1,), (True, 1)])
def test_set_anomaly_enabled_wants_bools(args):
    with pytest.raises(TypeError, match=r"^set_anomaly_enabled: argument '(enabled|check_nan)' must be bool"):
        lucid.set_anomaly_enabled(*args)
    assert lucid.is_anomaly_enabled() is False


# ----------------------------------------------------------------- typename, storage, threads


@pytest.mark.parametrize("dtype, name", [
    (lucid.float32, "lucid.FloatTensor"), (lucid.float64, "lucid.DoubleTensor"),
    (lucid.int64, "lucid.LongTensor"), (lucid.bool, "lucid.BoolTensor"), (lucid.uint8, "lucid.ByteTensor"),
])
def test_typename_of_tensors(dtype, name):
    assert lucid.typename(lucid.zeros(2, dtype=dtype, device="cpu")) == name


def test_typename_of_other_objects():
    assert lucid.typename(3) == "int" and lucid.typename(int) == "int"
    assert lucid.typename(lucid.Tensor) == "lucid._core.tensor.Tensor"
    assert lucid.typename(lucid.nn.Parameter) == f"{lucid.nn.Parameter.__module__}.Parameter"
    lin = lucid.nn.Linear(2, 2)
    assert lucid.typename(lin) == f"{type(lin).__module__}.Linear"
    assert lucid.typename(np.zeros(2)) == "numpy.ndarray"
    assert lucid.typename(test_typename_of_other_objects) == f"{__name__}.test_typename_of_other_objects"


def test_typename_matches_torch():
    torch = pytest.importorskip("torch")
    for ld, td in ((lucid.float32, torch.float32), (lucid.int64, torch.int64), (lucid.bool, torch.bool),
                   (lucid.float16, torch.float16), (lucid.int8, torch.int8)):
        assert lucid.typename(lucid.zeros(1, dtype=ld, device="cpu")) == torch.typename(torch.zeros(1, dtype=td)).replace(
            "torch.", "lucid.")
    assert lucid.typename(3) == torch.typename(3)


def test_is_storage_is_false_for_everything_lucid_has():
    for obj in (lucid.zeros(2), lucid.zeros(2).data, np.zeros(2), [1, 2], None):
        assert lucid.is_storage(obj) is False


def test_init_num_threads_keeps_the_pool_size_in_a_new_thread():
    n = lucid.get_num_threads()
    seen = []

    def worker():
        assert lucid.init_num_threads() is None
        seen.append(lucid.get_num_threads())

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert seen == [n]


def test_torch_accepts_the_same_values():
    torch = pytest.importorskip("torch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for mode in (0, 1, 2, "default", "warn", "error"):
            torch.set_deterministic_debug_mode(mode)
            lucid.set_deterministic_debug_mode(mode)
            assert torch.get_deterministic_debug_mode() == lucid.get_deterministic_debug_mode()
        torch.set_deterministic_debug_mode(0)
        lucid.set_deterministic_debug_mode(0)
        for bad in (3, "loud"):
            with pytest.raises(RuntimeError):
                torch.set_deterministic_debug_mode(bad)
            with pytest.raises(RuntimeError):
                lucid.set_deterministic_debug_mode(bad)
