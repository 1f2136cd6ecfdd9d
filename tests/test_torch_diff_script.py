"""The by-hand differential sweep (scripts/torch_diff.py): its comparison helpers, and a small
sweep against PyTorch's OpInfo database when torch is installed."""
import importlib.util
import pathlib

import numpy as np
import pytest

_PATH = pathlib.Path(__file__).resolve().parents[1] / "scripts" / "torch_diff.py"


@pytest.fixture(scope="module")
def diff():
    spec = importlib.util.spec_from_file_location("torch_diff", _PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_compare_reports_values_shapes_dtypes_and_structure(diff):
    a = np.array([1.0, 2.0, np.nan])
    assert diff.compare(a, a.copy()) is None  # NaN matches NaN
    assert "differ" in diff.compare(a, a + [0, 1e-3, 0])
    assert diff.compare(a, a + [0, 1e-9, 0]) is None  # within float64's tolerance of the largest entry
    assert "shape" in diff.compare(a, a[:2])
    assert "dtype" in diff.compare(a, a.astype(np.float32))
    assert "structure" in diff.compare([a, a], [a])
    assert diff.compare(np.arange(3), np.arange(3)) is None
    assert "differ" in diff.compare(np.arange(3), np.arange(3) + [0, 0, 1])  # integers: exact
    # an infinite entry neither hides a difference nor breaks the report
    assert "1/2 differ" in diff.compare(np.array([np.inf, 1.0]), np.array([np.inf, 2.0]))


def test_fix_phase_makes_eigenvectors_comparable(diff):
    rng = np.random.default_rng(0)
    v = rng.standard_normal((3, 3)) + 1j * rng.standard_normal((3, 3))
    phases = np.exp(1j * np.array([0.3, -2.0, 1.1]))
    np.testing.assert_allclose(diff.fix_phase(v * phases), diff.fix_phase(v), atol=1e-12)
    top = np.take_along_axis(diff.fix_phase(v), np.argmax(np.abs(v), axis=0)[None], axis=0)
    np.testing.assert_allclose(top.imag, 0, atol=1e-12)
    assert (top.real > 0).all()


def test_small_sweep_agrees_with_pytorch(diff, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("expecttest")  # torch's OpInfo database imports it
    problems = diff.sweep(diff.argparse.Namespace(ops="abs,linalg.det,nn.functional.relu", checks="forward,grad,jvp,vmap",
                                                  dtypes="float64,float32", max_samples=4, timeout=30, lenient=False,
                                                  json=None, verbose=False))
    assert problems == [], capsys.readouterr().out
    assert "counts:" in capsys.readouterr().out
