"""Suite-wide options. ``--fuzz-long``: run the differential fuzzer (tests/fuzz) with a large
budget instead of CI's small fixed one (see README, "Fuzzing")."""
import contextlib
import sys
import signal


def pytest_addoption(parser):
    parser.addoption("--fuzz-long", action="store_true", default=False,
                     help="run tests/fuzz with a large example budget (by hand; minutes)")
    parser.addoption("--fuzz-examples", type=int, default=None,
                     help="examples per fuzz test (overrides the CI and --fuzz-long budgets)")
    parser.addoption("--lucid-device", default="cpu",
                     help="the default device for the run: 'cpu', 'strict' (the CPU stand-in that "
                          "behaves like CuPy, NOTE [Strict stand-in device]) or 'cuda'")
    parser.addoption("--lucid-torch-function", action="store_true", default=False,
                     help="run with the __torch_function__ dispatchers switched on for every test, as in a "
                          "program that defines a Tensor subclass (NOTE [Torch function])")
    parser.addoption("--lucid-inputs", default=None,
                     help="make the op database's samples on this device ('strict' or 'cuda') while "
                          "the default device stays the CPU (NOTE [Device inputs, CPU default])")


# NOTE [Device inputs, CPU default]
# ``--lucid-device=strict`` makes the stand-in the default device, so an op that makes a tensor
# on the default device beside its inputs (a mask, a zero state) passes there and fails for a
# user whose default stays the CPU while the data is on a GPU. ``--lucid-inputs=strict`` runs
# the op database that way (the test command's third pass uses ``strict:1``, the device that is
# not current, NOTE [Several devices]); tests/gpu/test_device_sweep.py does the same for layers.
def pytest_configure(config):
    if config.getoption("--lucid-torch-function"):
        import lucid.overrides  # noqa: F401  (importing it switches the dispatchers on)
    import os

    inputs = config.getoption("--lucid-inputs", default=None)
    if inputs:
        os.environ["LUCID_OPDB_INPUTS"] = inputs  # read by tests/ops/test_opdb.py (and its workers)
        if inputs.startswith("strict"):
            from lucid.testing import strict_device

            strict_device.enable()
        elif inputs.startswith("cuda"):
            from lucid._core.backend import check_device
            from lucid.testing import strict_device

            check_device(inputs)  # loads the CUDA backend
            strict_device.allow_test_host_reads("cuda")
    dev = config.getoption("--lucid-device", default="cpu")
    if dev == "cpu" and not (inputs or "").startswith("cuda"):
        return
    import lucid

    from lucid.testing import strict_device

    if dev.startswith("strict"):  # "strict:1": the device that is not current (NOTE [Several devices])
        strict_device.enable()
    lucid.set_default_device(dev)
    if dev.startswith("cuda"):  # the suites check values through .numpy(), as on "strict"
        strict_device.allow_test_host_reads("cuda")
    if dev.startswith("cuda") or (inputs or "").startswith("cuda"):
        # float32 convolutions in full precision: the tolerances are float32's, not TF32's (as
        # PyTorch's own test suite runs cuDNN; NOTE [cuDNN convolutions])
        lucid.backends.cudnn.allow_tf32 = False


# NOTE [Strict-device gaps]
# Op-database checks known to fail on the strict device (an op still making a host array, or
# reading back) are listed in tests/ops/strict_gaps.txt, one test id per line. On that device
# they are expected failures, *strictly*: one that starts passing fails the run until its line
# is deleted, so the list can only shrink. The list is the open work of issue 13.
def pytest_collection_modifyitems(config, items):
    if not config.getoption("--lucid-device", default="cpu").startswith("strict"):
        return
    import os

    import pytest

    path = os.path.join(os.path.dirname(__file__), "ops", "strict_gaps.txt")
    if not os.path.exists(path):
        return
    with open(path) as fh:
        gaps = {ln.strip() for ln in fh if ln.strip() and not ln.startswith("#")}
    for item in items:
        if item.nodeid.endswith(tuple("::" + g for g in gaps)):
            item.add_marker(pytest.mark.xfail(strict=True, reason="a known strict-device gap "
                                                                  "(tests/ops/strict_gaps.txt)"))


# A test that puts a tensor on a device that is not current turns the device guard on for the
# process (NOTE [Several devices]). Off again after it, so the tests a worker runs next keep the
# one-device paths (the backward engine's inlined fast path) they would have in a user's
# program; not in a run whose default device is itself not current (``--lucid-device=strict:1``).
def pytest_collection_finish(session):
    # A test module that defines a Tensor subclass at import switched the dispatchers on while
    # being collected: off again before the first test (see pytest_runtest_teardown)
    import sys

    overrides = sys.modules.get("lucid.overrides")
    if overrides is not None and not session.config.getoption("--lucid-torch-function"):
        overrides._deactivate()


def pytest_runtest_setup(item):
    if _LEAK_LOG:  # NOTE [Global state leaks]
        item._lucid_state_before = _global_state()
    # tests/masked: each test starts as a program that imported lucid.masked does, with the
    # dispatchers on (defining MaskedTensor switched them on; ``lucid.mean(masked_tensor(...))``
    # reads ``lucid.mean`` before its argument exists). Not a tests/masked/conftest.py: test
    # modules import helpers with ``from conftest import ...``, which a second conftest shadows.
    if "masked" in item.path.parts:
        from lucid import overrides

        overrides._activate()


# NOTE [Global state leaks]: ``LUCID_LEAK_LOG=FILE`` makes every test compare the process-wide
# settings below before its setup and after its teardown (fixtures included) and append each
# change it left behind to FILE: a hunt for order-dependent results within a worker (the CI's
# minGPT loss once missed its bound). Off by default: it costs two snapshots per test.
_LEAK_LOG = __import__("os").environ.get("LUCID_LEAK_LOG")


def _global_state():
    """Process-wide settings a test may change: each test must leave them as it found them
    (a leak makes later tests in the same worker order-dependent)."""
    import lucid
    from lucid._core import primitive
    from lucid._core.grad_mode import ACTIVE_TRACES, STATE
    from lucid.nn._global_hooks import _GLOBAL_HOOKS

    amp = sys.modules.get("lucid.amp.autocast_mode")
    future = sys.modules.get("lucid.__future__")
    cudnn, matmul = lucid.backends.cudnn, lucid.backends.cuda.matmul
    return {
        "default dtype": lucid.get_default_dtype(),
        "default device": str(lucid.get_default_device()),
        "grad mode": (STATE.grad_enabled, STATE.inference, STATE.anomaly),
        # bfloat16's hook, once on, stays on by design (NOTE [bfloat16]): not a leak
        "active transforms": (len(STATE.traces), ACTIVE_TRACES[0] - (primitive.BFLOAT16_HOOK[0] is not None)),
        "saved tensor hooks": len(STATE.saved_hooks),
        "dispatch modes": len(STATE.dispatch_modes),
        "op hooks": tuple(getattr(primitive, h)[0] is not None for h in ("AUTOCAST_HOOK", "DISPATCH_MODE_HOOK")),
        "float32 matmul precision": lucid.get_float32_matmul_precision(),
        "deterministic algorithms": lucid.are_deterministic_algorithms_enabled(),
        "global module hooks": tuple(len(getattr(_GLOBAL_HOOKS, k)) for k in (
            "forward_pre", "forward", "backward", "backward_pre", "backward_non_full",
            "parameter_registration", "buffer_registration", "module_registration")),
        # (a module not imported yet holds its defaults: its first import is no leak)
        "autocast": ((False, lucid.bfloat16), (False, lucid.float16)) if amp is None else tuple(
            (amp.is_autocast_enabled(d), amp.get_autocast_dtype(d)) for d in ("cpu", "cuda")),
        "module conversion flags": {"overwrite": False, "swap": False} if future is None else dict(future._FLAGS),
        "print options": lucid.get_printoptions(),
        "default generator": id(lucid.default_generator),
        "backends flags": (cudnn.enabled, cudnn.benchmark, cudnn.deterministic, cudnn.allow_tf32,
                           matmul.allow_tf32),
    }


@__import__("pytest").hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    from lucid._core import backend

    if backend.DEVICE_GUARD[0] and item.config.getoption("--lucid-device", default="cpu") != "strict:1":
        backend.reset_device_guard()
    # Likewise the __torch_function__ dispatchers a test switched on by defining a Tensor subclass
    # (NOTE [Torch function]): the next test starts on the plain path again.
    overrides = sys.modules.get("lucid.overrides")
    if overrides is not None and overrides._STATE.active and not item.config.getoption("--lucid-torch-function"):
        overrides._deactivate()
    yield  # the fixtures' teardowns (some restore what their test changed)
    before = getattr(item, "_lucid_state_before", None)
    if before is not None:
        after = _global_state()
        leaked = {k: (before[k], after[k]) for k in before if before[k] != after[k]}
        if leaked:
            with open(_LEAK_LOG, "a") as fh:
                fh.write(f"{item.nodeid}\t{leaked}\n")


# On a lent GPU machine a run may be cut off by its time limit before pytest prints its summary;
# LUCID_FAILURE_LOG names a file that gets each failing test id and its last error line as it
# happens (scripts/gpu_check.sh).
def pytest_runtest_logreport(report):
    import os

    path = os.environ.get("LUCID_FAILURE_LOG")
    if not path or not report.failed or os.environ.get("PYTEST_XDIST_WORKER"):
        return  # with xdist the controller writes each report once
    crash = getattr(report.longrepr, "reprcrash", None)
    why = crash.message.splitlines()[0][:300] if crash is not None and crash.message else str(report.longrepr)[-300:]
    with open(path, "a") as fh:
        fh.write(f"{report.nodeid}\t{report.when}\t{why}\n")


def assert_closed_form(got, want):
    """``got`` (array-like) equals the closed form ``want`` exactly on the CPU, and within 4 ulp
    on a device (a GPU's pow, exp and log are accurate to 1-2 ulp, not correctly rounded);
    infinities and NaNs must match either way."""
    import numpy as np

    import lucid

    if lucid.get_default_device().type == "cpu":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=4 * np.finfo(np.float64).eps, atol=0)



def assert_same_on_device(fn, x0, *, device="strict", reads_host=False, what=""):
    """``fn(dev, x)`` (a scalar loss of a tensor ``x`` made from ``x0``) on the CPU and on
    ``device`` with the CPU as default device: the value and ``x``'s gradient agree to ~1e-12,
    both stay on their device and, unless ``reads_host``, the device run reads nothing back."""
    import numpy as np

    import lucid
    from lucid.testing import strict_device

    strict_device.enable()
    got = {}
    for dev in ("cpu", device):
        x = lucid.tensor(x0, device=dev, requires_grad=True)
        reads = strict_device.HOST_READS[0]
        y = fn(dev, x)
        y.backward()
        assert reads_host or strict_device.HOST_READS[0] == reads, f"{what}: a hidden device-to-host read"
        assert y.device.type == dev and x.grad.device.type == dev, what
        got[dev] = y.detach().cpu().numpy(), x.grad.cpu().numpy()
    np.testing.assert_allclose(got[device][0], got["cpu"][0], rtol=1e-12, err_msg=what)
    np.testing.assert_allclose(got[device][1], got["cpu"][1], rtol=1e-12, atol=1e-15, err_msg=what)



@__import__("pytest").fixture
def cpu_default_device():
    """For comparisons with PyTorch *CPU* tensors (the optional torch parity tests): the CPU
    is the default device during the test, whatever ``--lucid-device`` says."""
    import lucid

    prev = lucid.get_default_device()
    lucid.set_default_device("cpu")
    try:
        yield
    finally:
        lucid.set_default_device(prev)


@contextlib.contextmanager
def deadline(seconds):
    """Fail a block that runs past ``seconds`` (SIGALRM; POSIX, main thread): a DataLoader hang
    becomes a test failure instead of a stuck suite."""
    def fire(*_):
        raise TimeoutError(f"the DataLoader did not return within {seconds} s (a hang)")

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
