"""Focused tests of what the second batch of tutorials fixed: feature-dropout ranks as PyTorch,
``load(mmap=True)``, views that keep sharing through save/load, ``lucid.__future__``'s module
conversion flags, the profiler's ``with_stack``/``group_by_stack_n`` and ``Timer.adaptive_autorange``."""
import io
import json
import struct

import numpy as np
import pytest

import lucid
import lucid.__future__
import lucid.nn as nn
import lucid.nn.functional as F

def _needs_cpu_default():
    """These checks are about the CPU (host memory maps and views, "cpu" autocast, the default
    device): the strict stand-in passes run them elsewhere."""
    if lucid.get_default_device().type != "cpu":
        pytest.skip("checks host (CPU) behaviour; the default device is " + str(lucid.get_default_device()))



# ------------------------------------------------------------------ feature dropout ranks

def _mask_groups(out):
    """Which elements were dropped together: the zero pattern of a dropout of ones."""
    return (out.numpy() == 0)


def test_dropout2d_reads_3d_input_as_ncl_and_warns():
    lucid.manual_seed(0)
    with pytest.warns(UserWarning, match="Received a 3D input to dropout2d"):
        out = F.dropout2d(lucid.ones(4, 5, 6), 0.5)
    z = _mask_groups(out)
    assert (z == z[:, :, :1]).all()  # one decision per (n, c): constant along L
    assert 0 < z.sum() < z.size
    kept = out.numpy()[~z]
    assert np.allclose(kept, 2.0)


def test_dropout2d_other_ranks_warn_and_drop_along_dims_0_and_1():
    lucid.manual_seed(1)
    with pytest.warns(UserWarning, match="Received a 2-D input to dropout2d"):
        out = F.dropout2d(lucid.ones(8, 16), 0.5)
    z = _mask_groups(out)
    assert 0 < z.sum() < z.size  # per element (dims 0 and 1 are N and C)
    with pytest.warns(UserWarning, match="Received a 5-D input to dropout2d"):
        out = F.dropout2d(lucid.ones(2, 3, 2, 2, 2), 0.5)
    z = _mask_groups(out)
    assert (z == z[:, :, :1, :1, :1]).all()
    with pytest.warns(UserWarning), pytest.raises(RuntimeError, match="^dropout2d: Feature dropout requires at least 2"):
        F.dropout2d(lucid.ones(3), 0.5)
    with pytest.warns(UserWarning, match="Received a 2-D input to dropout3d"):
        out = F.dropout3d(lucid.ones(6, 4), 0.5)  # unbatched (C, ...): one decision per row
    z = _mask_groups(out)
    assert (z == z[:, :1]).all()


def test_dropout1d_refuses_other_ranks_even_in_eval():
    with pytest.raises(RuntimeError, match=r"^dropout1d: Expected 2D or 3D input, but received a 1D input"):
        F.dropout1d(lucid.ones(3), 0.5)
    with pytest.raises(RuntimeError, match="received a 4D input"):
        F.dropout1d(lucid.ones(1, 2, 3, 4), 0.5, training=False)
    assert F.dropout1d(lucid.ones(2, 3), 0.5, training=False).shape == (2, 3)


def test_dropout_ranks_parity():
    torch = pytest.importorskip("torch")
    import warnings

    for shape, fn in [((4, 5, 6), "dropout2d"), ((8, 16), "dropout2d"), ((6, 4), "dropout3d"), ((3, 4), "dropout1d")]:
        with warnings.catch_warnings(record=True) as wt:
            warnings.simplefilter("always")
            t = getattr(torch.nn.functional, fn)(torch.ones(shape), 0.5)
        with warnings.catch_warnings(record=True) as wl:
            warnings.simplefilter("always")
            out = getattr(F, fn)(lucid.ones(*shape), 0.5)
        assert [str(w.message) for w in wl] == [str(w.message) for w in wt]
        assert out.shape == tuple(t.shape)


# ------------------------------------------------------------------ serialization

def test_views_keep_sharing_through_save_and_load(tmp_path):  # on a device too: stored once, viewed there
    x = lucid.arange(12.0).reshape(3, 4)
    obj = {"x": x, "row": x[1], "col": x[:, 2], "t": x.t(), "other": lucid.ones(2)}
    lucid.save(obj, tmp_path / "v.pt")
    out = lucid.load(tmp_path / "v.pt")
    for k in obj:
        assert out[k].tolist() == obj[k].tolist()
    out["row"].fill_(-1)
    assert out["x"][1].tolist() == [-1.0] * 4 and out["col"].tolist() == [2.0, -1.0, 10.0]
    assert out["t"][:, 1].tolist() == [-1.0] * 4 and out["other"].tolist() == [1.0, 1.0]
    assert out["x"]._version is out["row"]._version  # one version counter, as views have
    header = json.loads(open(tmp_path / "v.pt", "rb").read()[8:8 + struct.unpack("<Q", open(tmp_path / "v.pt", "rb").read(8))[0]])
    assert sorted(k for k in header if k != "__metadata__") == ["other", "x.storage"]


def test_lone_views_and_complex_are_stored_compact(tmp_path):
    base = lucid.arange(100.0)
    lucid.save({"v": base[10:12]}, tmp_path / "a.pt")
    raw = open(tmp_path / "a.pt", "rb").read()
    header = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
    assert header["v"]["shape"] == [2]  # not the 100-element storage
    z = lucid.complex(lucid.ones(4), lucid.zeros(4))
    lucid.save([z, z[1:]], tmp_path / "c.pt")
    a, b = lucid.load(tmp_path / "c.pt")
    assert a.tolist() == z.tolist() and b.tolist() == z[1:].tolist()


def test_a_bad_view_is_refused(tmp_path):
    _needs_cpu_default()
    x = lucid.arange(4.0)
    buf = io.BytesIO()
    lucid.save([x, x[1:]], buf)
    raw = buf.getvalue().replace(b'view\\": [1, [3], [1]]', b'view\\": [2, [3], [1]]')
    assert raw != buf.getvalue()
    with pytest.raises(ValueError, match="bad view"):
        lucid.load(io.BytesIO(raw))


def test_load_mmap(tmp_path):
    sd = {"w": lucid.arange(6.0).reshape(2, 3), "m": lucid.tensor([True, False]), "e": lucid.zeros(0)}
    path = tmp_path / "m.pt"
    lucid.save(sd, path)
    out = lucid.load(path, mmap=True)
    assert out["w"].tolist() == sd["w"].tolist() and out["m"].tolist() == [True, False] and out["e"].shape == (0,)
    out["w"].add_(1.0)  # copy-on-write: the file keeps its values
    assert lucid.load(path)["w"].tolist() == sd["w"].tolist()
    with pytest.raises(ValueError, match="^load: f must be a file path in order to use the mmap argument"):
        lucid.load(io.BytesIO(open(path, "rb").read()), mmap=True)


# ------------------------------------------------------------------ module conversion flags

def test_overwrite_module_params_on_conversion():
    m = nn.Linear(2, 2)
    m(lucid.ones(2)).sum().backward()
    w = m.weight
    lucid.__future__.set_overwrite_module_params_on_conversion(True)
    try:
        assert lucid.__future__.get_overwrite_module_params_on_conversion()
        m.double()
        assert m.weight is not w and type(m.weight) is nn.Parameter and m.weight.requires_grad
        assert m.weight.dtype == lucid.float64 and m.weight.grad.dtype == lucid.float64
        assert m.weight.tolist() == w.tolist()
        lucid.__future__.set_swap_module_params_on_conversion(True)  # swapping wins, as in PyTorch
        w2 = m.weight
        m.float()
        assert m.weight is w2 and w2.dtype == lucid.float32
    finally:
        lucid.__future__.set_overwrite_module_params_on_conversion(False)
        lucid.__future__.set_swap_module_params_on_conversion(False)
    w3 = m.weight
    m.double()
    assert m.weight is w3


# ------------------------------------------------------------------ profiler, Timer

def test_profiler_with_stack_groups_by_frames():
    from lucid.profiler import profile

    x = lucid.ones(3)

    def first():
        return x + 1

    def second():
        return x + 2

    with profile(with_stack=True) as prof:
        first()
        second()
        second()
    plain = {e.key: e.count for e in prof.key_averages()}
    assert plain == {"lucid::add": 3}
    grouped = sorted((e.count, e.stack[0].split(": ")[1]) for e in prof.key_averages(group_by_stack_n=1))
    assert grouped == [(1, "first"), (2, "second")]
    assert all(e.stack and "lucid/" not in e.stack[0].split("(")[0][-20:] for e in prof.events())
    with profile() as prof:
        first()
    assert prof.events()[0].stack == [] and "Source Location" not in prof.key_averages().table()


def test_adaptive_autorange_stops_on_its_rules():
    from lucid.utils.benchmark import Timer

    # a clock the statement advances by exactly 0.1 ms: the rules are checked, not the machine's
    # jitter (a load spike in one of the first blocks made the real-clock version take a 5th)
    clock = [0.0]

    def tick():
        clock[0] += 1e-4

    def timer(stmt):
        return Timer(stmt, globals={"tick": tick}, timer=lambda: clock[0])

    calls = []
    m = timer("tick()").adaptive_autorange(threshold=10.0, min_run_time=0.0, max_run_time=5.0,
                                           callback=lambda n, t: calls.append(n))
    assert len(m.times) == 4 == len(calls)  # a wide threshold: stops as soon as 4 blocks are in
    m = timer("tick()").adaptive_autorange(threshold=0.0, max_run_time=0.05)
    total = sum(m.times) * m.number_per_run
    assert 0.05 < total < 0.05 + 2e-4  # no IQR meets 0: runs until just past max_run_time
