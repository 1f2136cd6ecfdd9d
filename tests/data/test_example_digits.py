"""The main job (examples/train_digits.py) on a device: one short epoch on the strict stand-in's
second device while the first is current, on synthetic digits (scikit-learn is an extra), with
its checkpoint round trip and its vmap(grad) / jvp(grad) demonstration."""
import argparse

import numpy as np
from _examples import load_example

import lucid
from lucid.testing import strict_device


def _synthetic_digits(seed=0, val_fraction=0.2):
    """Ten 8x8 class templates plus noise: learnable in one epoch."""
    rng = np.random.default_rng(seed)
    templates = rng.random((10, 1, 8, 8)).astype(np.float32)
    y = rng.integers(0, 10, 400)
    x = (templates[y] + 0.1 * rng.standard_normal((400, 1, 8, 8))).astype(np.float32)
    n_val = int(len(x) * val_fraction)
    return (x[n_val:], y[n_val:]), (x[:n_val], y[:n_val])


def test_the_main_job_runs_on_a_device_that_is_not_current(tmp_path, monkeypatch, capsys):
    mod = load_example("train_digits")
    monkeypatch.setattr(mod, "load_digits_split", _synthetic_digits)
    strict_device.enable()
    saved = lucid.get_default_device()
    lucid.set_default_device("strict:1")
    try:
        reads = strict_device.HOST_READS[0]
        args = argparse.Namespace(epochs=2, batch_size=32, lr=1e-2, seed=0)
        model, history, val = mod.train(args)
        assert all(p.device == lucid.device("strict", 1) for p in model.parameters())
        assert history["val_acc"][-1] > 0.8  # ten well-separated templates
        # a read per step (its loss.item()) and per evaluation (its loss): nothing hidden
        steps = 2 * -(-len(val[0]) * 4 // 32)
        assert strict_device.HOST_READS[0] - reads == steps + 2
        assert mod.checkpoint_roundtrip(model, val, str(tmp_path)) == history["val_acc"][-1]
        mod.what_makes_lucid_different(model, val)
    finally:
        lucid.set_default_device(saved)
    out = capsys.readouterr().out
    assert "per-sample gradient norms" in out and "forward-over-reverse" in out
