"""Regressions from the save/load sweep against torch.save/torch.load (PyTorch 2.13 semantics).

Tests that need real ``torch.save`` files skip cleanly without torch; the rest build their
archives with ``save_for_torch`` or ``pickle`` + ``zipfile``."""
import io
import json
import pickle
import struct
import zipfile
from collections import OrderedDict

import numpy as np
import pytest

import lucid
from lucid.serialization import save_for_torch

pytestmark = pytest.mark.filterwarnings("ignore:.*quantize_per:UserWarning")


def _archive(obj, raw=None):
    """A torch.save-layout zip whose data.pkl is ``pickle.dumps(obj, protocol=2)`` (no tensors)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("archive/data.pkl", raw if raw is not None else pickle.dumps(obj, protocol=2))
        zf.writestr("archive/byteorder", b"little")
        zf.writestr("archive/version", b"3\n")
    return buf.getvalue()


def _roundtrip(obj, writer=lucid.save):
    buf = io.BytesIO()
    writer(obj, buf)
    buf.seek(0)
    return lucid.load(buf)


# ------------------------------------------------------------ containers and globals
def test_frozenset_loads_as_frozenset():
    got = lucid.load(io.BytesIO(_archive({"fs": frozenset({1, 2}), "s": {3}})))
    assert type(got["fs"]) is frozenset and got["fs"] == frozenset({1, 2})
    assert type(got["s"]) is set and got["s"] == {3}


def test_torch_device_loads_as_a_device():
    got = _roundtrip({"d": lucid.device("cpu"), "c": lucid.device("cuda", 1), "m": lucid.device("meta")},
                     save_for_torch)
    assert all(isinstance(v, lucid.device) for v in got.values())
    assert (str(got["d"]), got["c"].type, got["c"].index, str(got["m"])) == ("cpu", "cuda", 1, "meta")
    assert got["d"] == "cpu"  # still equal to its string, as before


def test_lucid_save_keeps_state_dict_metadata():
    net = lucid.nn.Sequential(lucid.nn.BatchNorm1d(3), lucid.nn.Linear(3, 2))
    sd = net.state_dict()
    assert sd._metadata["0"]["version"] == 2
    got = _roundtrip({"model": sd})
    assert type(got["model"]) is OrderedDict and got["model"]._metadata == sd._metadata
    assert list(got["model"]) == list(sd)
    for k in sd:
        np.testing.assert_array_equal(got["model"][k].numpy(), sd[k].numpy())
    net2 = lucid.nn.Sequential(lucid.nn.BatchNorm1d(3), lucid.nn.Linear(3, 2))
    net2.load_state_dict(got["model"])
    assert net2[0].num_batches_tracked.item() == 0


def test_lucid_save_bad_metadata_is_refused():
    structure = {"odict": [["a", 1]], "meta": {"list": [1]}}  # _metadata must be a dict
    header = json.dumps({"__metadata__": {"format": "lucid", "lucid.structure": json.dumps(structure)}}).encode()
    with pytest.raises(ValueError, match="_metadata"):
        lucid.load(io.BytesIO(struct.pack("<Q", len(header)) + header))


def test_views_of_one_storage_stay_distinct_tensors():
    r = lucid.randn(2, requires_grad=True)
    p = lucid.nn.Parameter(lucid.ones(3))
    got = _roundtrip([r, r.detach(), r, p, p.detach()])
    assert [(type(t).__name__, t.requires_grad) for t in got] == [
        ("Tensor", True), ("Tensor", False), ("Tensor", True), ("Parameter", True), ("Tensor", False)]
    assert got[0] is got[2] and got[0] is not got[1] and got[3] is not got[4]
    got[1][0] = 7.0  # still one storage, as torch.load gives
    assert got[0][0].item() == 7.0
    np.testing.assert_array_equal(got[4].numpy(), np.ones(3, np.float32))


# ------------------------------------------------------------ error types
def test_truncated_torch_checkpoint_raises_runtime_error():
    buf = io.BytesIO()
    save_for_torch({"w": lucid.arange(300.0)}, buf)
    full = buf.getvalue()
    for cut in (8, 100, len(full) // 2, len(full) - 1):
        with pytest.raises(RuntimeError, match="not a valid PyTorch checkpoint") as e:
            lucid.load(io.BytesIO(full[:cut]))
        assert isinstance(e.value, ValueError)  # what lucid.load raised before


def test_empty_file_raises_eof_error(tmp_path):
    path = tmp_path / "empty.pt"
    path.write_bytes(b"")
    with pytest.raises(EOFError, match="0 bytes"):
        lucid.load(path)
    with pytest.raises(ValueError):
        lucid.load(io.BytesIO(b""))


def test_corrupt_data_pkl_raises_unpickling_error():
    bad = _archive(None, raw=pickle.dumps([1, 2, 3], protocol=2)[:-1] + b"\xff.")  # an unknown opcode
    with pytest.raises(pickle.UnpicklingError, match="data.pkl can't be read") as e:
        lucid.load(io.BytesIO(bad))
    assert isinstance(e.value, ValueError)


# ------------------------------------------------------------ what torch.save writes
def _from_torch(obj):
    torch = pytest.importorskip("torch")
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return lucid.load(buf)


def test_quantized_tensors_from_torch():
    torch = pytest.importorskip("torch")
    x = torch.tensor([[1.0, 2.0, -3.0], [0.25, 7.0, -1.0]])
    qt = torch.quantize_per_tensor(x, 0.5, 1, torch.qint8)
    qc = torch.quantize_per_channel(x, torch.tensor([0.1, 0.2], dtype=torch.float64), torch.tensor([0, 3]), 0,
                                    torch.quint8)
    q32 = torch.quantize_per_tensor(x, 0.25, 3, torch.qint32)
    got = _from_torch({"t": qt, "c": qc, "c2": qc, "cv": qc[:, 1:], "i": q32, "dt": torch.quint8})
    assert got["t"].dtype == lucid.qint8 and (got["t"].q_scale(), got["t"].q_zero_point()) == (0.5, 1)
    np.testing.assert_array_equal(got["t"].int_repr().numpy(), qt.int_repr().numpy())
    assert got["c"].dtype == lucid.quint8 and got["c"].q_per_channel_axis() == 0 and got["c"] is got["c2"]
    np.testing.assert_array_equal(got["c"].int_repr().numpy(), qc.int_repr().numpy())
    np.testing.assert_array_equal(got["c"].q_per_channel_scales().numpy(), [0.1, 0.2])
    np.testing.assert_array_equal(got["c"].q_per_channel_zero_points().numpy(), [0, 3])
    np.testing.assert_allclose(got["cv"].dequantize().numpy(), qc[:, 1:].dequantize().numpy())
    np.testing.assert_array_equal(got["i"].int_repr().numpy(), q32.int_repr().numpy())
    assert got["i"].dtype == lucid.qint32 and got["dt"] is lucid.quint8


def test_quantized_linear_state_dict_from_torch():
    torch = pytest.importorskip("torch")
    m = torch.ao.nn.quantized.Linear(3, 2)
    w = torch.quantize_per_tensor(torch.tensor([[1.0, -2.0, 3.0], [0.5, 0.0, -1.5]]), 0.5, 0, torch.qint8)
    m.set_weight_bias(w, torch.tensor([0.25, -0.75]))
    got = _from_torch(m.state_dict())
    assert list(got) == ["scale", "zero_point", "_packed_params.dtype", "_packed_params._packed_params"]
    qw, b = got["_packed_params._packed_params"]
    assert got["_packed_params.dtype"] is lucid.qint8 and qw.q_scale() == 0.5
    np.testing.assert_array_equal(qw.int_repr().numpy(), [[2, -4, 6], [1, 0, -3]])
    np.testing.assert_array_equal(b.numpy(), [0.25, -0.75])


def test_meta_tensors_and_layouts_from_torch():
    torch = pytest.importorskip("torch")
    got = _from_torch({"m": torch.empty(2, 3, device="meta", dtype=torch.float64, requires_grad=True),
                       "mt": torch.empty(3, 2, device="meta").t(),
                       "layouts": [torch.strided, torch.sparse_coo, torch.sparse_csr]})
    m = got["m"]
    assert (m.device.type, m.dtype, tuple(m.shape), m.requires_grad) == ("meta", lucid.float64, (2, 3), True)
    assert tuple(got["mt"].shape) == (2, 3) and got["mt"].device.type == "meta"
    assert got["layouts"] == [lucid.strided, lucid.sparse_coo, lucid.sparse_csr]


def test_unsafe_globals_scan_knows_the_new_names():
    torch = pytest.importorskip("torch")
    from lucid.serialization import get_unsafe_globals_in_checkpoint

    buf = io.BytesIO()
    torch.save({"q": torch.quantize_per_tensor(torch.ones(2), 0.5, 0, torch.qint8), "l": torch.strided,
                "m": torch.empty(1, device="meta")}, buf)
    buf.seek(0)
    assert get_unsafe_globals_in_checkpoint(buf) == []


def test_state_dict_round_trip_torch_lucid_torch_is_bit_exact():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.BatchNorm1d(3), torch.nn.Linear(3, 2))
    opt = torch.optim.Adam(net.parameters(), lr=0.1, amsgrad=True)
    for _ in range(2):
        opt.zero_grad()
        (net(torch.randn(4, 3)) ** 2).sum().backward()
        opt.step()
    special = torch.tensor([0.0, -0.0, float("inf"), 1e-45]).view(torch.int32)
    special = torch.cat([special, torch.tensor([0x7FC00001], dtype=torch.int32)]).view(torch.float32)
    ckpt = {"model": net.state_dict(), "opt": opt.state_dict(), "special": special}
    mid = _from_torch(ckpt)
    buf = io.BytesIO()
    save_for_torch(_roundtrip(mid), buf)  # lucid.save and save_for_torch on the way back
    buf.seek(0)
    back = torch.load(buf)
    assert back["model"]._metadata == ckpt["model"]._metadata
    for k, v in ckpt["model"].items():
        assert back["model"][k].dtype == v.dtype and torch.equal(back["model"][k], v), k
    assert torch.equal(back["special"].view(torch.int32), special.view(torch.int32))
    assert back["opt"]["param_groups"] == ckpt["opt"]["param_groups"]
    for i, st in ckpt["opt"]["state"].items():
        for k, v in st.items():
            assert torch.equal(back["opt"]["state"][i][k], v), (i, k)
    opt2 = torch.optim.Adam(net.parameters(), lr=0.1, amsgrad=True)
    opt2.load_state_dict(back["opt"])


# ------------------------------------------------------------ torch.save / torch.load's options
def test_save_accepts_torch_save_options():
    import pickle as pk

    buf = io.BytesIO()
    lucid.save({"w": lucid.ones(2)}, buf, pk, 4, _use_new_zipfile_serialization=False,
               _disable_byteorder_record=True)
    buf.seek(0)
    assert lucid.load(buf)["w"].tolist() == [1.0, 1.0]
    with pytest.raises(ValueError, match="lucid.save: pickle protocol must be <= 5"):
        lucid.save(1, io.BytesIO(), pickle_protocol=6)
    with pytest.raises(TypeError, match="lucid.save: pickle_protocol must be an int"):
        lucid.save(1, io.BytesIO(), pickle_protocol="4")


def test_load_takes_torch_loads_arguments():
    import pickle as pk

    buf = io.BytesIO()
    lucid.save({"w": lucid.ones(2)}, buf)
    for args, kw in (((None, pk), {}), ((), {"pickle_module": pk, "weights_only": False, "encoding": "latin1"}),
                     (("cpu",), {"weights_only": True, "errors": "strict"}), ((None, False), {})):
        buf.seek(0)
        assert lucid.load(buf, *args, **kw)["w"].tolist() == [1.0, 1.0]
    buf.seek(0)
    with pytest.raises(RuntimeError, match="load: Can not safely load weights when explicit pickle_module"):
        lucid.load(buf, pickle_module=pk, weights_only=True)
    with pytest.raises(TypeError, match="load: got an unexpected keyword argument 'foo'"):
        lucid.load(buf, foo=1)


def test_untyped_storage_views_keep_sharing_when_saved_again():
    # uint16/32/64 live in an UntypedStorage of bytes; lucid.load -> save_for_torch keeps one storage
    base = lucid.arange(6, dtype=lucid.uint32)
    loaded = _roundtrip([base, base[1:].reshape(1, 5), base[::2]], save_for_torch)
    buf = io.BytesIO()
    save_for_torch(loaded, buf)
    records = [n for n in zipfile.ZipFile(io.BytesIO(buf.getvalue())).namelist() if "/data/" in n]
    assert len(records) == 1
    again = lucid.load(io.BytesIO(buf.getvalue()))
    assert [t.tolist() for t in again] == [[0, 1, 2, 3, 4, 5], [[1, 2, 3, 4, 5]], [0, 2, 4]]
    assert all(t.dtype == lucid.uint32 for t in again)
    again[0][2] = 9
    assert again[1][0, 1].item() == 9 and again[2][1].item() == 9


def test_float_qparams_quantized_tensor_keeps_its_float_zero_points():
    torch = pytest.importorskip("torch")
    x = torch.tensor([[0.3, -0.1, 0.9], [1.1, 0.0, -0.4]])
    q = torch.quantize_per_channel(x, torch.tensor([0.1, 0.2]), torch.tensor([0.5, 1.0]), 0, torch.quint8)
    assert q.qscheme() == torch.per_channel_affine_float_qparams
    got = _from_torch([q, torch.per_tensor_symmetric])
    assert got[0].qscheme() is lucid.per_channel_affine_float_qparams and got[1] is lucid.per_tensor_symmetric
    np.testing.assert_array_equal(got[0].q_per_channel_zero_points().numpy(), [0.5, 1.0])
    np.testing.assert_array_equal(got[0].dequantize().numpy(), q.dequantize().numpy())


def test_tensors_with_python_attributes_from_torch():
    torch = pytest.importorskip("torch")
    x = torch.arange(3.0)
    x.note = "kept"
    p = torch.nn.Parameter(torch.ones(2), requires_grad=False)
    p.tag = 7
    got = _from_torch({"x": x, "p": p})
    assert type(got["x"]) is lucid.Tensor and got["x"].note == "kept" and got["x"].tolist() == [0.0, 1.0, 2.0]
    assert type(got["p"]) is lucid.nn.Parameter and got["p"].tag == 7 and not got["p"].requires_grad
    y = torch.ones(1)
    y._hidden = 1  # private attributes stay refused, as for Parameters
    with pytest.raises(ValueError, match="_hidden"):
        _from_torch(y)


def test_save_for_torch_of_mapped_tensors_writes_only_their_bytes(tmp_path):
    path = tmp_path / "m.safetensors"
    lucid.save({"a": lucid.arange(6, dtype=lucid.uint16), "b": lucid.ones(3)}, path)
    mapped = lucid.load(path, mmap=True)
    buf = io.BytesIO()
    save_for_torch(mapped, buf)
    sizes = sorted(i.file_size for i in zipfile.ZipFile(io.BytesIO(buf.getvalue())).infolist() if "/data/" in i.filename)
    assert sizes == [12, 12]  # each tensor's own bytes, never the whole mapped file
    got = lucid.load(io.BytesIO(buf.getvalue()))
    assert got["a"].tolist() == list(range(6)) and got["b"].tolist() == [1.0, 1.0, 1.0]
