"""lucid.utils.tensorboard: the event files are decoded here by an independent reader (TFRecord
CRCs, protobuf wire format, PNG chunks and filters) and checked value by value; where
tensorboard / torch are installed, also read by TensorBoard and compared with torch's files."""
import gc
import glob
import math
import os
import re
import socket
import struct
import subprocess
import sys
import time
import zlib

import numpy as np
import pytest

import lucid
from lucid.utils.tensorboard import SummaryWriter


# ------------------------------------------------------------------ an independent reader
def _crc_table():
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc_table()


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked(data):
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) % 2**32


def _varint(buf, i):
    shift = n = 0
    while True:
        b = buf[i]
        i += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return n, i


class Msg:
    """A decoded protobuf message: field number -> list of (wire type, raw value)."""

    def __init__(self, buf):
        self.fields, i = {}, 0
        while i < len(buf):
            key, i = _varint(buf, i)
            wire = key & 7
            if wire == 0:
                v, i = _varint(buf, i)
            elif wire in (1, 5):
                size = 8 if wire == 1 else 4
                v, i = buf[i:i + size], i + size
            else:
                assert wire == 2, f"unexpected wire type {wire}"
                n, i = _varint(buf, i)
                v, i = buf[i:i + n], i + n
            self.fields.setdefault(key >> 3, []).append((wire, v))
        assert i == len(buf)

    def __contains__(self, field):
        return field in self.fields

    def all(self, field, wire):
        vals = self.fields.get(field, [])
        assert all(w == wire for w, _ in vals)
        return [v for _, v in vals]

    def one(self, field, wire):
        vals = self.all(field, wire)
        assert len(vals) == 1, f"field {field}: {len(vals)} values"
        return vals[0]

    def int(self, field):
        n = self.one(field, 0)
        return n - 2**64 if n >= 2**63 else n

    def double(self, field):
        return struct.unpack("<d", self.one(field, 1))[0]

    def float(self, field):
        return struct.unpack("<f", self.one(field, 5))[0]

    def str(self, field):
        return self.one(field, 2).decode("utf-8")

    def msg(self, field):
        return Msg(self.one(field, 2))

    def msgs(self, field):
        return [Msg(b) for b in self.all(field, 2)]

    def doubles(self, field):  # packed
        b = self.one(field, 2)
        return list(struct.unpack(f"<{len(b) // 8}d", b))


def read_records(path):
    data, out, i = open(path, "rb").read(), [], 0
    while i < len(data):
        header = data[i:i + 8]
        (n,) = struct.unpack("<Q", header)
        assert struct.unpack("<I", data[i + 8:i + 12])[0] == masked(header)
        body = data[i + 12:i + 12 + n]
        assert struct.unpack("<I", data[i + 12 + n:i + 16 + n])[0] == masked(body)
        out.append(body)
        i += 16 + n
    assert i == len(data)
    return out


def event_files(d):
    return sorted(glob.glob(os.path.join(str(d), "events.out.tfevents.*")))


def read_events(d):
    """Every Event of the one event file in ``d``; the first (file_version) checked and dropped."""
    (path,) = event_files(d)
    events = [Msg(r) for r in read_records(path)]
    assert events[0].str(3) == "brain.Event:2"
    return events[1:]


def values(event):
    """(tag, Value) pairs of an Event's summary."""
    return [(v.str(1), v) for v in event.msg(5).msgs(1)]


def decode_png(png):
    """Pixels (H, W, C) of an 8-bit, non-interlaced PNG; every chunk CRC checked."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    i, idat, header = 8, b"", None
    while i < len(png):
        (n,) = struct.unpack(">I", png[i:i + 4])
        kind, body = png[i + 4:i + 8], png[i + 8:i + 8 + n]
        assert struct.unpack(">I", png[i + 8 + n:i + 12 + n])[0] == zlib.crc32(kind + body)
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        i += 12 + n
        if kind == b"IEND":
            break
    w, h, depth, ctype, _, _, interlace = header
    assert depth == 8 and interlace == 0
    c = {0: 1, 4: 2, 2: 3, 6: 4}[ctype]
    raw = zlib.decompress(idat)
    stride = w * c
    out = np.zeros((h, stride), np.int64)
    prev = np.zeros(stride, np.int64)
    for y in range(h):
        f, line = raw[y * (stride + 1)], list(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            a = line[x - c] if x >= c else 0
            b, cc = prev[x], prev[x - c] if x >= c else 0
            if f == 1:
                line[x] = (line[x] + a) % 256
            elif f == 2:
                line[x] = (line[x] + b) % 256
            elif f == 3:
                line[x] = (line[x] + (a + b) // 2) % 256
            elif f == 4:
                p = a + b - cc
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - cc)
                pred = a if pa <= pb and pa <= pc else b if pb <= pc else cc
                line[x] = (line[x] + pred) % 256
        out[y] = prev = np.array(line)
    return out.reshape(h, w, c).astype(np.uint8)


def image_of(value):
    img = value.msg(4)
    pixels = decode_png(img.one(4, 2))
    assert (img.int(1), img.int(2), img.int(3)) == pixels.shape
    return pixels


# ------------------------------------------------------------------------------ framing
def test_crc32c_known_vectors():
    from lucid.utils.tensorboard import _records

    # RFC 3720 (iSCSI) appendix B.4 and the classic check value.
    cases = {b"123456789": 0xE3069283, bytes(32): 0x8A9136AA, b"\xff" * 32: 0x62A8AB43,
             bytes(range(32)): 0x46DD794E, bytes(range(31, -1, -1)): 0x113FDB5C, b"": 0}
    for data, crc in cases.items():
        assert _records.crc32c(data) == crc32c(data) == crc
    rng = np.random.default_rng(0)
    for n in (1, 3, 4, 5, 7, 8, 1000, 1003):
        data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        assert _records.masked_crc32c(data) == masked(data)
        rec = _records.frame_record(data)
        assert rec[:8] == struct.pack("<Q", n) and rec[12:-4] == data


def test_event_file_name_and_header(tmp_path):
    before = time.time()
    with SummaryWriter(tmp_path, filename_suffix=".v1") as w:
        assert w.get_logdir() == tmp_path
    (path,) = event_files(tmp_path)
    name = os.path.basename(path)
    m = re.fullmatch(r"events\.out\.tfevents\.(\d{10})\.(.+)\.(\d+)\.(\d+)\.v1", name)
    assert m and m.group(2) == socket.gethostname() and int(m.group(3)) == os.getpid()
    assert before - 1 <= int(m.group(1)) <= time.time()
    (first,) = [Msg(r) for r in read_records(path)]
    assert first.str(3) == "brain.Event:2" and 2 not in first and 5 not in first
    assert before <= first.double(1) <= time.time()
    assert first.msg(10).str(1) == "lucid.utils.tensorboard"
    with SummaryWriter(tmp_path) as w2:  # a second writer gets a file of its own
        w2.add_scalar("x", 1.0)
    assert len(event_files(tmp_path)) == 2


def test_default_log_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    w = SummaryWriter(comment="_lr0.1")
    w.close()
    (d,) = os.listdir(tmp_path / "runs")
    assert re.fullmatch(r"[A-Z][a-z]{2}\d{2}_\d{2}-\d{2}-\d{2}_" + re.escape(socket.gethostname())
                        + r"_lr0\.1", d)
    assert w.get_logdir() == os.path.join("runs", d)
    assert len(event_files(tmp_path / "runs" / d)) == 1


# ----------------------------------------------------------------------------- scalars
def test_add_scalar_values_steps_walltimes(tmp_path):
    t = lucid.tensor(2.5, requires_grad=True) * 2  # on the default device; read with .item()
    cases = [(1.25, 0), (3, 1), (True, 2), (np.float32(0.1), np.int64(3)), (t, 4),
             (lucid.tensor([[-7.0]]), 5), (np.array([4.0]), -2), (lucid.tensor(9), None),
             (0.0, 7), (1e300, 8), (float("nan"), 9)]
    with SummaryWriter(tmp_path) as w:
        for i, (v, step) in enumerate(cases):
            w.add_scalar("loss", v, step, walltime=1000.0 + i)
    events = read_events(tmp_path)
    assert len(events) == len(cases)
    expect = [1.25, 3.0, 1.0, np.float32(0.1), 5.0, -7.0, 4.0, 9.0, 0.0, math.inf, math.nan]
    for i, (ev, exp, (_, step)) in enumerate(zip(events, expect, cases)):
        assert ev.double(1) == 1000.0 + i
        assert (ev.int(2) if 2 in ev else None) == (None if step in (None, 0) else int(step))
        ((tag, val),) = values(ev)
        assert tag == "loss" and 8 not in val
        got = val.float(2)
        assert (math.isnan(got) and math.isnan(exp)) or got == np.float32(exp)


def test_add_scalar_new_style(tmp_path):
    with SummaryWriter(tmp_path) as w:
        w.add_scalar("f", 0.1, 1, new_style=True)
        w.add_scalar("d", 0.1, 2, new_style=True, double_precision=True)
    (tag1, v1), (tag2, v2) = [values(e)[0] for e in read_events(tmp_path)]
    assert (tag1, tag2) == ("f", "d") and 2 not in v1
    for v, dtype, field, fmt in ((v1, 1, 5, "<f"), (v2, 2, 6, "<d")):
        tensor = v.msg(8)
        assert tensor.int(1) == dtype and 2 not in tensor  # DT_FLOAT / DT_DOUBLE, scalar shape
        (got,) = struct.unpack(fmt, tensor.one(field, 2))
        assert got == (np.float32(0.1) if fmt == "<f" else 0.1)
        assert v.msg(9).msg(1).str(1) == "scalars"


def test_add_scalar_bad_input_writes_nothing(tmp_path):
    w = SummaryWriter(tmp_path, max_queue=100)
    with pytest.raises(ValueError, match="^add_scalar: expected a single value"):
        w.add_scalar("x", lucid.tensor([1.0, 2.0]))
    with pytest.raises(TypeError, match="^add_scalar: expected a real number"):
        w.add_scalar("x", "3.0")
    with pytest.raises(TypeError, match="^add_scalar"):
        w.add_scalar("x", 1 + 2j)
    with pytest.raises(ValueError, match="out of the 64-bit range"):
        w.add_scalar("x", 1.0, global_step=2**64)
    w.add_scalar("ok", 1.0, 1)
    w.close()
    (ev,) = read_events(tmp_path)
    assert values(ev)[0][0] == "ok"


def test_add_scalars_sub_runs(tmp_path):
    with SummaryWriter(tmp_path) as w:
        w.add_scalars("a/loss", {"train": 0.5, "val": lucid.tensor(0.75)}, 3)
        w.add_scalars("a/loss", {"train": 0.25}, 4, walltime=5.0)
    assert event_files(tmp_path) and read_events(tmp_path) == []
    train, val = read_events(tmp_path / "a_loss_train"), read_events(tmp_path / "a_loss_val")
    assert [(e.int(2), values(e)[0][0], values(e)[0][1].float(2)) for e in train] == [
        (3, "a/loss", 0.5), (4, "a/loss", 0.25)]
    assert train[1].double(1) == 5.0 and train[0].double(1) == val[0].double(1)
    assert values(val[0])[0][1].float(2) == 0.75


# -------------------------------------------------------------------------- histograms
def _histo(tmp_path, *args, **kwargs):
    with SummaryWriter(tmp_path) as w:
        w.add_histogram("h", *args, global_step=1, **kwargs)
    ((tag, v),) = values(read_events(tmp_path)[0])
    h = v.msg(5)
    stats = [h.double(k) if k in h else 0.0 for k in (1, 2, 3, 4, 5)]
    return stats, h.doubles(6), h.doubles(7)


def test_histogram_numpy_bins(tmp_path):
    # edges 0, 1, 2, 3 and counts 1, 2, 1: the support starts at bucket 0, so an empty bucket
    # ending at the lowest edge goes first.
    stats, limits, counts = _histo(tmp_path, lucid.tensor([0.0, 1.0, 1.0, 3.0]), bins=3)
    assert stats == [0.0, 3.0, 4.0, 5.0, 11.0]
    assert limits == [0.0, 1.0, 2.0, 3.0] and counts == [0.0, 1.0, 2.0, 1.0]


def test_histogram_trims_to_support(tmp_path):
    values_ = np.array([[5.0, 5.5], [7.9, 7.0]])
    stats, limits, counts = _histo(tmp_path, values_, bins=[0, 2, 4, 6, 8, 10, 12])
    # buckets [4,6) and [6,8) hold 2 each; kept: the empty [2,4) on the left, then those two.
    assert limits == [4.0, 6.0, 8.0] and counts == [0.0, 2.0, 2.0]
    # the sum of squares is a BLAS dot product: its last bit depends on the build's summation order
    assert stats[:4] == [5.0, 7.9, 4.0, 25.4] and stats[4] == pytest.approx(25 + 30.25 + 7.9**2 + 49, rel=1e-15)


def test_histogram_max_bins(tmp_path):
    # 10 unit buckets on [0, 10), merged 10 // 3 = 3 by 3 (the last one padded): edges 0, 3,
    # 6, 9, 10 (four buckets: like torch, max_bins bounds the merge factor, not the result).
    _, limits, counts = _histo(tmp_path, np.arange(10.0) + 0.5, bins=np.arange(11.0), max_bins=3)
    assert limits == [0.0, 3.0, 6.0, 9.0, 10.0] and counts == [0.0, 3.0, 3.0, 3.0, 1.0]


def test_histogram_tensorflow_bins(tmp_path):
    edges = [1e-12]
    while edges[-1] * 1.1 < 1e20:
        edges.append(edges[-1] * 1.1)
    data = np.array([1.0, 1.0, -2.0, 0.0])
    _, limits, counts = _histo(tmp_path, data)
    k = max(i for i, e in enumerate(edges) if e <= 1.0)  # 1.0 in [edges[k], edges[k+1])
    j = max(i for i, e in enumerate(edges) if e <= 2.0)  # -2.0 in [-edges[j+1], -edges[j])
    assert limits[:2] == [-edges[j + 1], -edges[j]] and limits[-2:] == [edges[k], edges[k + 1]]
    assert counts[:2] == [0.0, 1.0] and counts[-1] == 2.0 and sum(counts) == 4.0
    assert 0.0 in limits and len(limits) == len(counts) == j + k + 5


def test_histogram_errors(tmp_path):
    w = SummaryWriter(tmp_path)
    with pytest.raises(ValueError, match="^add_histogram: the input has no element"):
        w.add_histogram("h", np.zeros(0))
    with pytest.raises(ValueError, match="^add_histogram: no value falls inside"):
        w.add_histogram("h", np.array([5.0]), bins=[0.0, 1.0])
    with pytest.raises(TypeError, match="^add_histogram: complex"):
        w.add_histogram("h", np.array([1j]))
    with pytest.raises(ValueError, match="^add_histogram_raw: len"):
        w.add_histogram_raw("r", 0, 1, 2, 1, 1, [1.0, 2.0], [2.0])
    w.add_histogram_raw("r", 0, 3, 6, 9, 17, [1, 2, 3], [2, 2, 2], 5)
    w.close()
    (ev,) = read_events(tmp_path)
    h = values(ev)[0][1].msg(5)
    assert 1 not in h and [h.double(k) for k in (2, 3, 4, 5)] == [3.0, 6.0, 9.0, 17.0]
    assert h.doubles(6) == [1.0, 2.0, 3.0] and h.doubles(7) == [2.0, 2.0, 2.0]


# ------------------------------------------------------------------------------ images
def test_add_image_formats(tmp_path):
    rng = np.random.default_rng(1)
    chw = rng.random((3, 5, 7)).astype(np.float32) * 1.2 - 0.1  # some values to clip
    rgba = rng.integers(0, 256, (4, 6, 4), dtype=np.uint8)
    grey = rng.random((4, 3))
    with SummaryWriter(tmp_path) as w:
        w.add_image("chw", lucid.tensor(chw), 0)
        w.add_image("rgba", rgba, 1, dataformats="HWC")
        w.add_image("grey", grey, 2, dataformats="WH")
        w.add_image("one", lucid.tensor(grey[None]), 3)  # (1, H, W) is stored as RGB
    imgs = [image_of(values(e)[0][1]) for e in read_events(tmp_path)]
    np.testing.assert_array_equal(
        imgs[0], (chw.transpose(1, 2, 0) * np.float32(255)).clip(0, 255).astype(np.uint8))
    np.testing.assert_array_equal(imgs[1], rgba)
    g = (grey.T.astype(np.float32) * 255).astype(np.uint8)
    np.testing.assert_array_equal(imgs[2], np.stack([g] * 3, axis=2))
    np.testing.assert_array_equal(imgs[3], np.stack([g.T] * 3, axis=2))


def test_add_images_grid(tmp_path):
    rng = np.random.default_rng(2)
    batch = rng.integers(0, 256, (10, 1, 2, 3), dtype=np.uint8)
    with SummaryWriter(tmp_path) as w:
        w.add_images("b", lucid.tensor(batch), 0)
        w.add_images("nhwc", batch[:3].transpose(0, 2, 3, 1).repeat(3, axis=3), 1,
                     dataformats="NHWC")
    img, img3 = [image_of(values(e)[0][1]) for e in read_events(tmp_path)]
    assert img.shape == (4, 24, 3) and img3.shape == (2, 9, 3)  # 8 per row, then the rest
    for n in range(16):
        r, c = divmod(n, 8)
        tile = img[2 * r:2 * r + 2, 3 * c:3 * c + 3]
        np.testing.assert_array_equal(tile, np.stack([batch[n, 0]] * 3, axis=2) if n < 10 else 0)
    np.testing.assert_array_equal(img3[:, 6:9, 1], batch[2, 0])


def test_image_errors(tmp_path):
    w = SummaryWriter(tmp_path)
    with pytest.raises(ValueError, match="^add_image: dataformats 'CCH' uses"):
        w.add_image("x", np.zeros((3, 2, 2)), dataformats="CCH")
    with pytest.raises(ValueError, match="^add_image: an image of shape"):
        w.add_image("x", np.zeros((2, 2)))
    with pytest.raises(ValueError, match="^add_image: dataformats must"):
        w.add_image("x", np.zeros((3, 2, 2)), dataformats="CHX")
    with pytest.raises(ValueError, match="^add_image: cannot encode"):
        w.add_image("x", np.zeros((5, 2, 2)))
    with pytest.raises(ValueError, match="^add_images: batched images need 1 or 3"):
        w.add_images("x", np.zeros((2, 4, 2, 2)))
    w.close()
    assert read_events(tmp_path) == []


# --------------------------------------------------------------------------- text, hparams
def test_add_text(tmp_path):
    with SummaryWriter(tmp_path) as w:
        w.add_text("notes", "héllo **bold** ✓", 3)
    (ev,) = read_events(tmp_path)
    ((tag, v),) = values(ev)
    assert tag == "notes/text_summary" and ev.int(2) == 3
    plugin = v.msg(9).msg(1)
    assert plugin.str(1) == "text" and 2 not in plugin
    tensor = v.msg(8)
    assert tensor.int(1) == 7 and tensor.msg(2).msg(2).int(1) == 1  # DT_STRING, shape [1]
    assert tensor.one(8, 2).decode("utf-8") == "héllo **bold** ✓"
    with pytest.raises(TypeError, match="^add_text"):
        SummaryWriter(tmp_path / "x").add_text("t", 3)


def _struct_value(m):
    if 2 in m:
        return m.double(2)
    if 3 in m:
        return m.str(3)
    return bool(m.int(4))


def _hparams_data(ev):
    ((tag, v),) = values(ev)
    plugin = v.msg(9).msg(1)
    assert plugin.str(1) == "hparams" and 8 not in v and 2 not in v
    data = Msg(plugin.one(2, 2))
    assert 1 not in data  # plugin data version 0
    return tag, data


def test_add_hparams(tmp_path):
    with SummaryWriter(tmp_path) as w:
        w.add_hparams({"lr": 0.1, "bs": 32, "opt": "sgd", "nesterov": True, "skip": None,
                       "wd": lucid.tensor(1e-4, dtype=lucid.float64)},
                      {"hparam/acc": 0.9, "hparam/loss": lucid.tensor(0.25)},
                      hparam_domain_discrete={"opt": ["sgd", "adam"], "bs": [16, 32]},
                      run_name="run0", global_step=2)
    run = tmp_path / "run0"
    exp, start, end, *metrics = read_events(run)
    tag, data = _hparams_data(exp)
    assert tag == "_hparams_/experiment" and exp.int(2) == 2
    infos = data.msg(2).msgs(4)
    assert [(i.str(1), i.int(4)) for i in infos] == [("lr", 3), ("bs", 3), ("opt", 1),
                                                     ("nesterov", 2), ("wd", 3)]
    assert [_struct_value(x) for x in infos[1].msg(5).msgs(1)] == [16.0, 32.0]
    assert [_struct_value(x) for x in infos[2].msg(5).msgs(1)] == ["sgd", "adam"]
    assert 5 not in infos[0]
    assert [m.msg(1).str(2) for m in data.msg(2).msgs(5)] == ["hparam/acc", "hparam/loss"]
    tag, data = _hparams_data(start)
    assert tag == "_hparams_/session_start_info"
    hp = {e.str(1): _struct_value(e.msg(2)) for e in data.msg(3).msgs(1)}
    assert hp == {"lr": 0.1, "bs": 32.0, "opt": "sgd", "nesterov": True, "wd": 1e-4}
    tag, data = _hparams_data(end)
    assert tag == "_hparams_/session_end_info" and data.msg(4).int(1) == 1  # STATUS_SUCCESS
    assert [(values(m)[0][0], values(m)[0][1].float(2)) for m in metrics] == [
        ("hparam/acc", np.float32(0.9)), ("hparam/loss", 0.25)]


def test_add_hparams_errors(tmp_path):
    w = SummaryWriter(tmp_path)
    with pytest.raises(TypeError, match="^add_hparams: hparam_dict"):
        w.add_hparams([("lr", 0.1)], {})
    with pytest.raises(TypeError, match=r"^add_hparams: hparam_domain_discrete\['lr'\]"):
        w.add_hparams({"lr": 0.1}, {}, hparam_domain_discrete={"lr": ["a"]})
    with pytest.raises(ValueError, match="^add_hparams: a hyperparameter"):
        w.add_hparams({"lr": [0.1]}, {})
    with pytest.raises(TypeError, match="^add_hparams: expected a real number"):
        w.add_hparams({"lr": 0.1}, {"acc": "high"}, run_name="r")
    w.close()
    assert os.listdir(tmp_path) == [os.path.basename(event_files(tmp_path)[0])]


# ------------------------------------------------------------------- buffering, lifetime
def test_queue_flush_and_close(tmp_path):
    w = SummaryWriter(tmp_path, max_queue=3)
    (path,) = event_files(tmp_path)
    w.add_scalar("a", 1.0, 1)
    w.add_scalar("a", 2.0, 2)
    assert len(read_records(path)) == 1  # only the file_version record so far
    w.add_scalar("a", 3.0, 3)  # the third pending record triggers the write
    assert len(read_records(path)) == 4
    w.add_scalar("a", 4.0, 4)
    w.flush()
    assert len(read_records(path)) == 5
    w.add_scalar("a", 5.0, 5)
    w.close()
    w.close()  # a second close does nothing
    assert [values(Msg(r))[0][1].float(2) for r in read_records(path)[1:]] == [1, 2, 3, 4, 5]
    w.add_scalar("a", 6.0, 6)  # after close a new event file is opened, as in PyTorch
    w.flush()
    assert len(event_files(tmp_path)) == 2
    w.close()


def test_flush_secs_and_garbage_collection(tmp_path):
    w = SummaryWriter(tmp_path / "a", flush_secs=0)
    w.add_scalar("a", 1.0)
    assert len(read_records(event_files(tmp_path / "a")[0])) == 2
    w2 = SummaryWriter(tmp_path / "b")
    w2.add_scalar("b", 2.0)
    (path,) = event_files(tmp_path / "b")
    assert len(read_records(path)) == 1
    del w2
    gc.collect()
    assert len(read_records(path)) == 2
    w.close()


def test_purge_step(tmp_path):
    with SummaryWriter(tmp_path, purge_step=7) as w:
        w.add_scalar("a", 1.0, 7)
    version, start, scalar = read_events(tmp_path)
    assert version.int(2) == 7 and version.str(3) == "brain.Event:2"
    assert start.int(2) == 7 and start.msg(7).int(1) == 1  # SessionLog.START
    assert scalar.int(2) == 7 and w.purge_step is None


def test_import_is_lazy_and_dependency_free():
    code = ("import sys, lucid, lucid.utils\n"
            "assert 'lucid.utils.tensorboard' not in sys.modules\n"
            "from lucid.utils.tensorboard import SummaryWriter\n"
            "assert lucid.utils.tensorboard.SummaryWriter is SummaryWriter\n"
            "bad = [m for m in sys.modules if m.split('.')[0] in "
            "('tensorboard', 'google', 'tensorflow', 'PIL', 'torch')]\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_device_tensors(tmp_path):
    from lucid.testing import strict_device

    strict_device.enable()
    x = lucid.tensor([[0.0, 0.5], [1.0, 0.25]], device="strict")
    with SummaryWriter(tmp_path) as w:
        w.add_scalar("s", x.sum(), 1)
        w.add_histogram("h", x, 1, bins=2)
        w.add_image("i", x, 1, dataformats="HW")
    s, h, i = [values(e)[0][1] for e in read_events(tmp_path)]
    assert s.float(2) == 1.75 and h.msg(5).doubles(7) == [0.0, 2.0, 2.0]
    np.testing.assert_array_equal(image_of(i)[..., 0], [[0, 127], [255, 63]])


# ------------------------------------------------------------- TensorBoard and PyTorch
def _log_everything(writer_cls, d, rng_seed=0):
    rng = np.random.default_rng(rng_seed)
    vals = rng.normal(size=500)
    with writer_cls(d) as w:
        w.add_scalar("a/b", 3.5, 7, walltime=100.0)
        w.add_scalar("neg", -1e300, -3, walltime=-0.0)
        w.add_scalar("ns", 2.25, 1, walltime=1.5, new_style=True)
        w.add_scalar("nsd", 2.25, 1, walltime=1.5, new_style=True, double_precision=True)
        w.add_histogram("h", vals, 3, walltime=2.0)
        w.add_histogram("h_auto", vals, 3, walltime=2.0, bins="auto")
        w.add_histogram("h_max", vals, 3, walltime=2.0, bins=100, max_bins=7)
        w.add_histogram("h_pos", np.abs(vals), 3, walltime=2.0)
        w.add_histogram_raw("hr", 0, 3, 6, 9, 17, [1, 2, 3], [2, 2, 2], 5, walltime=4.0)
        w.add_text("t", "héllo **x**", 4, walltime=3.0)
        w.add_image("img", rng.random((3, 5, 7)).astype(np.float32), 5, walltime=6.0)
        w.add_image("rgba", rng.integers(0, 256, (4, 6, 4), dtype=np.uint8), 5, walltime=6.0,
                    dataformats="HWC")
        w.add_images("imgs", rng.random((10, 1, 4, 6)), 5, walltime=6.0)
        w.add_hparams({"lr": 0.1, "bs": 32, "opt": "sgd"}, {"hp/acc": 0.5},
                      hparam_domain_discrete={"opt": ["sgd", "adam"]}, run_name="hp")


def test_tensorboard_reads_the_files(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    _log_everything(SummaryWriter, tmp_path)
    acc = EventAccumulator(str(tmp_path), size_guidance={"images": 0, "histograms": 0}).Reload()
    (ev,) = acc.Scalars("a/b")
    assert (ev.wall_time, ev.step, ev.value) == (100.0, 7, 3.5)
    assert acc.Scalars("neg")[0].value == -math.inf and acc.Scalars("neg")[0].step == -3
    h = acc.Histograms("h_max")[0].histogram_value
    assert h.num == 500 and len(h.bucket) == len(h.bucket_limit) and sum(h.bucket) == 500
    img = acc.Images("img")[0]
    assert (img.width, img.height, img.step) == (7, 5, 5)
    assert acc.Images("imgs")[0].width == 48
    text = acc.Tensors("t/text_summary")[0].tensor_proto
    assert text.string_val == ["héllo **x**".encode()]
    assert acc.SummaryMetadata("t/text_summary").plugin_data.plugin_name == "text"
    assert acc.Tensors("nsd")[0].tensor_proto.double_val == [2.25]
    hp = EventAccumulator(str(tmp_path / "hp")).Reload()
    content = hp.PluginTagToContent("hparams")
    start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"])
    assert start.session_start_info.hparams["opt"].string_value == "sgd"
    assert start.session_start_info.hparams["bs"].number_value == 32
    exp = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/experiment"]).experiment
    assert [i.name for i in exp.hparam_infos] == ["lr", "bs", "opt"]
    assert [v.string_value for v in exp.hparam_infos[2].domain_discrete.values] == ["sgd", "adam"]
    assert hp.Scalars("hp/acc")[0].value == 0.5


def _all_records(d):
    out = {}
    for path in glob.glob(os.path.join(str(d), "**", "events.out.tfevents.*"), recursive=True):
        run = os.path.relpath(os.path.dirname(path), str(d))
        run = "hp" if run.startswith("hp") else run
        out.setdefault(run, []).extend(read_records(path)[1:])  # the header names its writer
    return out


def test_same_files_as_torch(tmp_path):
    pytest.importorskip("tensorboard")
    pytest.importorskip("PIL")
    torch_tb = pytest.importorskip("torch.utils.tensorboard")

    _log_everything(SummaryWriter, tmp_path / "lucid")
    _log_everything(torch_tb.SummaryWriter, tmp_path / "torch")
    ours, theirs = _all_records(tmp_path / "lucid"), _all_records(tmp_path / "torch")
    assert sorted(ours) == sorted(theirs) == [".", "hp"]
    for run in ours:
        assert len(ours[run]) == len(theirs[run])
        for a, b in zip(ours[run], theirs[run]):
            ea, eb = Msg(a), Msg(b)
            (tag, va), (tag_b, vb) = values(ea)[0], values(eb)[0]
            assert tag == tag_b
            if 4 in va:  # PNG bytes differ (Pillow filters rows); the pixels do not
                np.testing.assert_array_equal(image_of(va), image_of(vb))
                assert ea.double(1) == eb.double(1) and ea.int(2) == eb.int(2)
            elif tag == "_hparams_/session_start_info":
                hp = [{e.str(1): _struct_value(e.msg(2))
                       for e in _hparams_data(x)[1].msg(3).msgs(1)} for x in (ea, eb)]
                assert hp[0] == hp[1]
            elif run == ".":  # byte for byte, wall times included
                assert a == b, tag
            else:
                assert Msg(a).fields.get(5) == Msg(b).fields.get(5), tag
