"""Grad modes: no_grad, enable_grad, set_grad_enabled, inference_mode; decorators; thread-locality."""
import threading

import numpy as np
import pytest

import lucid


def leaf():
    return lucid.tensor(np.array([1.0, 2.0]), requires_grad=True)


def test_no_grad_context_records_nothing():
    x = leaf()
    with lucid.no_grad():
        assert not lucid.is_grad_enabled()
        y = x * 2
    assert lucid.is_grad_enabled()
    assert not y.requires_grad and y.grad_fn is None and y.tolist() == [2.0, 4.0]


def test_enable_grad_inside_no_grad():
    x = leaf()
    with lucid.no_grad():
        with lucid.enable_grad():
            y = x * 2
        z = x * 2
    assert y.requires_grad and not z.requires_grad
    y.sum().backward()
    assert x.grad.tolist() == [2.0, 2.0]


def test_no_grad_and_enable_grad_as_decorators():
    x = leaf()

    @lucid.no_grad()
    def f(t):
        return t * 2

    @lucid.enable_grad()
    def g(t):
        return t * 2

    assert not f(x).requires_grad
    with lucid.no_grad():
        assert g(x).requires_grad
    assert lucid.is_grad_enabled()


def test_set_grad_enabled_as_function_context_and_decorator():
    x = leaf()
    lucid.set_grad_enabled(False)
    try:
        assert not lucid.is_grad_enabled()
        assert not (x * 2).requires_grad
    finally:
        lucid.set_grad_enabled(True)
    assert lucid.is_grad_enabled()
    with lucid.set_grad_enabled(False):
        assert not (x * 2).requires_grad
    assert lucid.is_grad_enabled()
    with lucid.no_grad():
        with lucid.set_grad_enabled(True):
            assert (x * 2).requires_grad
        assert not lucid.is_grad_enabled()

    @lucid.set_grad_enabled(False)
    def f(t):
        return t * 2

    assert lucid.is_grad_enabled()  # decorating does not switch the mode
    assert not f(x).requires_grad
    assert lucid.is_grad_enabled()


def test_modes_restore_on_exception():
    with pytest.raises(ValueError):
        with lucid.no_grad():
            raise ValueError
    assert lucid.is_grad_enabled()


def test_inference_mode():
    x = leaf()
    with lucid.inference_mode():
        assert not lucid.is_grad_enabled()
        assert lucid.is_inference_mode_enabled()
        y = x * 2
    assert not y.requires_grad
    assert lucid.is_grad_enabled() and not lucid.is_inference_mode_enabled()
    with lucid.inference_mode(False):
        assert (x * 2).requires_grad

    @lucid.inference_mode()
    def f(t):
        return t * 2

    assert not f(x).requires_grad


def test_grad_mode_is_thread_local():
    x = leaf()
    results = {}
    started, release = threading.Event(), threading.Event()

    def worker():
        # A new thread starts with grad enabled, whatever the main thread does.
        started.set()
        release.wait(5)
        results["enabled"] = lucid.is_grad_enabled()
        results["rg"] = (x * 2).requires_grad
        with lucid.no_grad():
            results["inner"] = lucid.is_grad_enabled()

    with lucid.no_grad():
        t = threading.Thread(target=worker)
        t.start()
        started.wait(5)
        release.set()
        t.join(5)
        assert not lucid.is_grad_enabled()  # the worker's no_grad did not leak here either
    assert results == {"enabled": True, "rg": True, "inner": False}


def test_backward_runs_without_recording_the_backward():
    x = leaf()
    y = (x.exp() * x).sum()
    y.backward()
    assert not x.grad.requires_grad and x.grad.grad_fn is None


def test_backward_works_inside_no_grad():
    x = leaf()
    y = (x * x).sum()
    with lucid.no_grad():
        y.backward()
    assert x.grad.tolist() == [2.0, 4.0]
