"""lucid.utils.tensorboard beyond scalars/images: graphs, embeddings, PR curves, tensors, audio,
video, figures, boxes, meshes, custom scalars. Files are decoded by the independent reader of
test_tensorboard.py; where tensorboard / torch are installed, read by TensorBoard's own readers
and compared with what torch's SummaryWriter writes for the same call."""
import io
import os
import struct
import wave

import numpy as np
import pytest

import lucid
import lucid.nn as nn
from lucid.utils.tensorboard import SummaryWriter
from test_tensorboard import Msg, event_files, image_of, read_events, read_records, values


def _acc(d):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    return EventAccumulator(str(d), size_guidance={"tensors": 0, "images": 0,
                                                   "audio": 0}).Reload()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 2, 3)
        self.block = nn.Sequential(nn.Linear(8, 4), nn.ReLU())
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        x = lucid.relu(self.conv1(x))
        return self.fc(self.block(x.flatten(1))) * 2


def _graph_nodes(d):
    events = read_events(d)
    assert len(events) == 2 and 5 not in events[0]
    gd = Msg(events[0].one(4, 2))
    assert gd.msg(4).int(1) == 22  # VersionDef.producer, as torch writes
    meta = events[1].msg(8)
    assert meta.str(1) == "step1"
    assert Msg(meta.one(2, 2)).msg(1).msg(1).str(1) == "/device:CPU:0"
    nodes = {}
    for n in gd.msgs(1):
        attrs = {e.str(1): e.msg(2) for e in n.msgs(5)} if 5 in n else {}
        shapes = ([[d.int(1) for d in s.msgs(2)] for s in attrs["_output_shapes"].msg(1).msgs(7)]
                  if "_output_shapes" in attrs else None)
        inputs = [x.decode() for x in n.all(3, 2)]
        nodes[n.str(1)] = (n.str(2), inputs, shapes)
    return nodes, events[0].one(4, 2)


def test_add_graph_small_cnn(tmp_path):
    model = Net()
    x = lucid.randn(2, 1, 4, 4)
    before = [p.detach().clone() for p in model.parameters()]
    model.train()
    with SummaryWriter(tmp_path) as w:
        w.add_graph(model, x)
    nodes, raw = _graph_nodes(tmp_path)
    assert nodes["input/x"] == ("IO Node", [], [[2, 1, 4, 4]])
    assert nodes["Net/conv1/weight"] == ("Parameter", [], [[2, 1, 3, 3]])
    assert nodes["Net/conv1/conv"] == (
        "lucid::conv", ["input/x", "Net/conv1/weight", "Net/conv1/bias"], [[2, 2, 2, 2]])
    assert nodes["Net/relu"] == ("lucid::relu", ["Net/conv1/conv"], [[2, 2, 2, 2]])
    assert nodes["Net/reshape"][1] == ["Net/relu"]
    assert nodes["Net/block/0/linear"] == (
        "lucid::linear", ["Net/reshape", "Net/block/0/weight", "Net/block/0/bias"], [[2, 4]])
    assert nodes["Net/block/1/relu"][:2] == ("lucid::relu", ["Net/block/0/linear"])
    assert nodes["Net/fc/linear"][1] == ["Net/block/1/relu", "Net/fc/weight", "Net/fc/bias"]
    (mul,) = [k for k, v in nodes.items() if v[0] == "lucid::mul"]
    assert mul.startswith("Net/") and nodes[mul][1] == ["Net/fc/linear"]
    assert nodes["output/output.0"] == ("IO Node", [mul], [[2, 3]])
    assert len(nodes) == 15  # 1 input, 6 parameters, 7 ops, 1 output
    # nothing left behind: hooks, grads, training flag, the input
    assert model.training and all(p.grad is None for p in model.parameters())
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
    assert not x.requires_grad and x.grad_fn is None
    for p, q in zip(before, model.parameters()):
        np.testing.assert_array_equal(p.numpy(), q.detach().numpy())
    tb = pytest.importorskip("tensorboard")  # noqa: F841
    from tensorboard.compat.proto import graph_pb2

    gd = graph_pb2.GraphDef.FromString(raw)
    by_name = {n.name: n for n in gd.node}
    assert list(by_name["Net/conv1/conv"].input) == ["input/x", "Net/conv1/weight",
                                                      "Net/conv1/bias"]
    assert [d.size for d in by_name["Net/relu"].attr["_output_shapes"].list.shape[0].dim] == [
        2, 2, 2, 2]
    acc = _acc(tmp_path)
    assert {n.name for n in acc.Graph().node} == set(nodes)
    assert acc.RunMetadata("step1").step_stats.dev_stats[0].device == "/device:CPU:0"


def test_add_graph_multi_output_and_errors(tmp_path, capsys):
    class Two(nn.Module):
        def forward(self, a, b):
            u, v = (a * b).split([1, 2])
            return u.exp(), v, b

    with SummaryWriter(tmp_path) as w:
        w.add_graph(Two(), (lucid.randn(3), lucid.randn(3)), verbose=True)
        with pytest.raises(TypeError, match="^add_graph: expected a lucid.nn.Module"):
            w.add_graph(lambda x: x, lucid.randn(2))
        with pytest.raises(NotImplementedError, match="^add_onnx_graph: Lucid has no ONNX"):
            w.add_onnx_graph("model.onnx")
    assert "Two/mul = lucid::mul(input/a, input/b)" in capsys.readouterr().out
    nodes, _ = _graph_nodes(tmp_path)
    split = [k for k, v in nodes.items() if v[1] == ["Two/mul"]]
    assert len(split) in (1, 2)  # one multi-output split, or one getitem per piece
    outs = [nodes[f"output/output.{i}"][1] for i in range(3)]
    assert outs[2] == ["input/b"] and nodes[outs[0][0]][0] == "lucid::exp"
    assert nodes["output/output.1"][2] == [[2]]


def _read_sound(value):
    audio = value.msg(6)
    wav = audio.one(4, 2)
    with wave.open(io.BytesIO(wav)) as r:
        assert (r.getnchannels(), r.getsampwidth()) == (1, 2)
        rate, frames = r.getframerate(), np.frombuffer(r.readframes(r.getnframes()), "<i2")
    assert audio.float(1) == rate and audio.int(2) == 1 and audio.int(3) == frames.size
    assert audio.str(5) == "audio/wav"
    return rate, frames


def test_add_audio(tmp_path):
    snd = np.array([[0.0, 0.5, -0.5, 1.0, -1.0, 2.0, -3.0, 0.25]])
    with SummaryWriter(tmp_path) as w:
        w.add_audio("a", lucid.tensor(snd), 3, sample_rate=8000)
        with pytest.raises(ValueError, match="^add_audio: expected a one-dimensional"):
            w.add_audio("bad", np.zeros((2, 3)))
    (ev,) = read_events(tmp_path)
    rate, frames = _read_sound(values(ev)[0][1])
    expect = (np.clip(snd[0], -1, 1) * 32767).astype(np.int16)
    assert rate == 8000 and ev.int(2) == 3
    np.testing.assert_array_equal(frames, expect)


def _gif_frames(gif):
    Image = pytest.importorskip("PIL.Image")
    im = Image.open(io.BytesIO(gif))
    frames = []
    for k in range(im.n_frames):
        im.seek(k)
        frames.append((np.asarray(im.convert("RGB")), im.info.get("duration")))
    return frames


def test_add_video_gif(tmp_path):
    rng = np.random.default_rng(0)
    levels = np.array([0, 51, 102, 255], np.uint8)
    vid = levels[rng.integers(0, 4, (3, 5, 3, 4, 6))]  # few colours: an exact palette
    with SummaryWriter(tmp_path) as w:
        w.add_video("v", vid, 1, fps=5)
        w.add_video("noise", rng.random((1, 2, 3, 20, 20)), 2)  # > 256 colours: the cube
        with pytest.raises(ValueError, match="^add_video: expected a video batch"):
            w.add_video("x", np.zeros((2, 3, 4, 4)))
    ev, ev2 = read_events(tmp_path)
    img = values(ev)[0][1].msg(4)
    # 3 clips padded to 4, in 2 ** ((3).bit_length() - 1) // 2) = 1 row, as torch tiles them
    assert (img.int(1), img.int(2), img.int(3)) == (4, 24, 3)
    gif = img.one(4, 2)
    assert gif[:6] == b"GIF89a"
    frames = _gif_frames(gif)
    assert len(frames) == 5 and frames[0][1] == 200
    grid = np.zeros((5, 4, 24, 3), np.uint8)
    for n in range(3):
        grid[:, :, 6 * n:6 * n + 6] = vid[n].transpose(0, 2, 3, 1)
    np.testing.assert_array_equal(np.stack([f for f, _ in frames]), grid)
    noise = _gif_frames(values(ev2)[0][1].msg(4).one(4, 2))
    assert len(noise) == 2 and noise[0][0].shape == (20, 20, 3)


def test_add_video_cube_error_is_bounded(tmp_path):
    from lucid.utils.tensorboard._media import encode_gif

    rng = np.random.default_rng(3)
    frames = rng.integers(0, 256, (2, 16, 16, 3), dtype=np.uint8)
    decoded = np.stack([f for f, _ in _gif_frames(encode_gif(frames, 4))])
    step = 255 / np.array([5, 6, 5])
    assert np.all(np.abs(decoded.astype(float) - frames) <= step / 2 + 1)


class FakeCanvas:
    def __init__(self, pixels):
        self.pixels, self.drawn = pixels, False

    def draw(self):
        self.drawn = True

    def get_width_height(self):
        return self.pixels.shape[1], self.pixels.shape[0]

    def buffer_rgba(self):
        assert self.drawn
        return memoryview(self.pixels.tobytes())


class FakeFigure:
    def __init__(self, pixels):
        self.canvas = FakeCanvas(pixels)


def test_add_figure_fake(tmp_path):
    rng = np.random.default_rng(4)
    a, b = (rng.integers(0, 256, (3, 5, 4), dtype=np.uint8) for _ in range(2))
    with SummaryWriter(tmp_path) as w:
        w.add_figure("f", FakeFigure(a), 1)
        w.add_figure("fs", [FakeFigure(a), FakeFigure(b)], 2)
    one, two = [image_of(values(e)[0][1]) for e in read_events(tmp_path)]
    np.testing.assert_array_equal(one, a[..., :3])
    np.testing.assert_array_equal(two, np.concatenate([a[..., :3], b[..., :3]], axis=1))


def test_add_figure_matplotlib(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(2, 1), dpi=50)
    fig.add_subplot().imshow(np.zeros((2, 2)))
    with SummaryWriter(tmp_path) as w:
        w.add_figure("plt", fig, 0)
    (ev,) = read_events(tmp_path)
    pixels = image_of(values(ev)[0][1])
    assert pixels.shape == (50, 100, 3) and not plt.fignum_exists(fig.number)
    assert (pixels == 255).all(axis=2).any()  # the white background


def test_add_image_with_boxes(tmp_path):
    img = np.zeros((3, 10, 12), np.float32)
    with SummaryWriter(tmp_path) as w:
        w.add_image_with_boxes("b", img, np.array([[2.0, 3.0, 8.0, 7.0]]), 0)
        w.add_image_with_boxes("r", img, np.array([[2.0, 3.0, 8.0, 7.0]]), 0, rescale=2)
        with pytest.raises(ValueError, match="^add_image_with_boxes: box_tensor"):
            w.add_image_with_boxes("x", img, np.zeros(4))
    p, p2 = [image_of(values(e)[0][1]) for e in read_events(tmp_path)]
    red = (p == [255, 0, 0]).all(axis=2)
    expect = np.zeros((10, 12), bool)
    expect[2:4, 1:9] = expect[6:8, 1:9] = True  # 2-pixel edges on rows 2-3 and 6-7
    expect[2:8, 1:3] = expect[2:8, 7:9] = True  # and on columns 1-2 and 7-8
    np.testing.assert_array_equal(red, expect)
    assert p2.shape == (20, 24, 3)
    np.testing.assert_array_equal(p2[::2, ::2], p)


def test_add_image_with_boxes_labels(tmp_path):
    pytest.importorskip("PIL")
    with SummaryWriter(tmp_path) as w:
        w.add_image_with_boxes("b", np.zeros((3, 40, 60)), np.array([[5, 5, 50, 35]]), 0,
                               labels=["cat"])
    pixels = image_of(values(read_events(tmp_path)[0])[0][1])
    inside = pixels[20:35, 7:40]
    assert (inside == [255, 0, 0]).all(axis=2).sum() > 20  # the label's red background


def test_add_tensor(tmp_path):
    cases = [lucid.tensor([[1.5, -2.0]]), lucid.tensor([1, -2, 3]), np.array(True),
             lucid.tensor([1.0, 2.5], dtype=lucid.float64), np.array([1 + 2j], np.complex64),
             np.array([0.5, -1.25], np.float16), np.array([7, 250], np.uint8)]
    with SummaryWriter(tmp_path) as w:
        for i, c in enumerate(cases):
            w.add_tensor(f"t{i}", c, i)
    evs = read_events(tmp_path)
    t0 = values(evs[0])[0][1]
    assert t0.msg(9).msg(1).str(1) == "tensor" and t0.msg(8).int(1) == 1
    tb = pytest.importorskip("tensorboard.util.tensor_util")
    acc = _acc(tmp_path)
    for i, c in enumerate(cases):
        got = tb.make_ndarray(acc.Tensors(f"t{i}")[0].tensor_proto)
        expect = c.numpy() if isinstance(c, lucid.Tensor) else c
        assert got.dtype == expect.dtype and got.shape == expect.shape
        np.testing.assert_array_equal(got, expect)


def test_add_pr_curve(tmp_path):
    labels = np.array([0, 1, 1, 0, 1])
    preds = np.array([0.1, 0.9, 0.6, 0.7, 0.3])
    with SummaryWriter(tmp_path) as w:
        w.add_pr_curve("pr", lucid.tensor(labels), lucid.tensor(preds), 1, num_thresholds=5)
        w.add_pr_curve_raw("raw", [2, 1], [2, 0], [0, 2], [0, 1], [0.5, 1.0], [1.0, 0.5], 2,
                           num_thresholds=2)
        with pytest.raises(ValueError, match="^add_pr_curve: labels"):
            w.add_pr_curve("x", labels, preds[:3])
    ev, raw = read_events(tmp_path)
    v = values(ev)[0][1]
    plugin = v.msg(9).msg(1)
    assert plugin.str(1) == "pr_curves" and Msg(plugin.one(2, 2)).int(2) == 5
    t = v.msg(8)
    assert [d.int(1) for d in t.msg(2).msgs(2)] == [6, 5]
    data = np.frombuffer(t.one(5, 2), "<f4").reshape(6, 5)
    # thresholds 0, .25, .5, .75, 1: buckets floor(p * 4) = 0, 3, 2, 2, 1
    tp = [3, 3, 2, 1, 0]
    fp = [2, 1, 1, 0, 0]
    expect = np.array([tp, fp, [0, 1, 1, 2, 2], [0, 0, 1, 2, 3],
                       [t_ / max(t_ + f_, 1e-7) for t_, f_ in zip(tp, fp)],
                       [t_ / 3 for t_ in tp]], np.float32)
    np.testing.assert_allclose(data, expect, rtol=1e-6)
    acc = _acc(tmp_path)
    from tensorboard.util import tensor_util

    got = tensor_util.make_ndarray(acc.Tensors("raw")[0].tensor_proto)
    np.testing.assert_array_equal(got, [[2, 1], [2, 0], [0, 2], [0, 1], [0.5, 1], [1, 0.5]])
    from tensorboard.plugins.pr_curve import plugin_data_pb2

    content = acc.PluginTagToContent("pr_curves")["pr"]
    assert plugin_data_pb2.PrCurvePluginData.FromString(content).num_thresholds == 5


def test_add_mesh(tmp_path):
    v = np.array([[[1.0, 1, 1], [-1, -1, 1], [1, -1, -1], [-1, 1, -1]]])
    f = np.array([[[0, 2, 3], [0, 3, 1], [0, 1, 2], [1, 3, 2]]])
    c = np.array([[[255, 0, 0], [0, 255, 0], [0, 0, 255], [255, 0, 255]]])
    with SummaryWriter(tmp_path) as w:
        w.add_mesh("m", lucid.tensor(v), colors=c, faces=f, config_dict={"camera": {"fov": 75}},
                   global_step=3)
        with pytest.raises(ValueError, match="^add_mesh: Tensor shape"):
            w.add_mesh("bad", np.zeros((4, 3)))
    (ev,) = read_events(tmp_path)
    assert [t for t, _ in values(ev)] == ["m_VERTEX", "m_FACE", "m_COLOR"]
    acc = _acc(tmp_path)
    from tensorboard.plugins.mesh import metadata
    from tensorboard.util import tensor_util

    for tag, arr, kind in (("m_VERTEX", v, 1), ("m_FACE", f, 2), ("m_COLOR", c, 3)):
        np.testing.assert_array_equal(tensor_util.make_ndarray(acc.Tensors(tag)[0].tensor_proto),
                                      arr)
        meta = metadata.parse_plugin_metadata(acc.PluginTagToContent("mesh")[tag])
        assert (meta.name, meta.content_type, meta.components) == ("m", kind, 0b1110)
        assert list(meta.shape) == list(arr.shape) and meta.json_config == '{"camera": {"fov": 75}}'


def test_add_custom_scalars(tmp_path):
    with SummaryWriter(tmp_path) as w:
        w.add_custom_scalars({"A": {"lines": ["Multiline", ["a/x", "a/y"]],
                                    "band": ["Margin", ["v", "lo", "hi"]]}})
        w.add_custom_scalars_multilinechart(["p", "q"], category="C", title="t")
        w.add_custom_scalars_marginchart(["v", "lo", "hi"])
        with pytest.raises(ValueError, match="^add_custom_scalars_marginchart: a Margin"):
            w.add_custom_scalars_marginchart(["v", "lo"])
    evs = read_events(tmp_path)
    assert len(evs) == 3
    tag, val = values(evs[0])[0]
    assert tag == "custom_scalars__config__" and val.msg(9).msg(1).str(1) == "custom_scalars"
    assert val.msg(8).int(1) == 7 and val.msg(8).one(2, 2) == b""
    pytest.importorskip("tensorboard")
    from tensorboard.plugins.custom_scalar import layout_pb2

    layouts = [layout_pb2.Layout.FromString(values(e)[0][1].msg(8).one(8, 2)) for e in evs]
    (cat,) = layouts[0].category
    assert cat.title == "A" and [c.title for c in cat.chart] == ["lines", "band"]
    assert list(cat.chart[0].multiline.tag) == ["a/x", "a/y"]
    s = cat.chart[1].margin.series[0]
    assert (s.value, s.lower, s.upper) == ("v", "lo", "hi")
    assert layouts[1].category[0].title == "C" and layouts[1].category[0].chart[0].title == "t"
    assert layouts[2].category[0].chart[0].margin.series[0].upper == "hi"


def test_add_embedding_files(tmp_path):
    mat = np.array([[0.1, 2.0], [3.0, -4.5], [5.0, 6.0]], np.float32)
    imgs = np.linspace(0, 1, 3 * 3 * 2 * 4).reshape(3, 3, 2, 4)
    with SummaryWriter(tmp_path) as w:
        w.add_embedding(lucid.tensor(mat), metadata=["a", "b", "c"], label_img=imgs)
        w.add_embedding(mat, metadata=[["x", 1], ["y", 2], ["z", 3]], global_step=7,
                        tag="a/b", metadata_header=["name", "k"])
        with pytest.raises(ValueError, match="^add_embedding: #labels"):
            w.add_embedding(mat, metadata=["a"])
    d = tmp_path / "00000" / "default"
    assert (d / "tensors.tsv").read_text() == (
        f"{np.float32(0.1).item()}\t2.0\n3.0\t-4.5\n5.0\t6.0\n")
    assert (d / "metadata.tsv").read_text() == "a\nb\nc\n"
    d2 = tmp_path / "00007" / "a%2fb"
    assert (d2 / "metadata.tsv").read_text() == "name\tk\nx\t1\ny\t2\nz\t3\n"
    from test_tensorboard import decode_png

    sprite = decode_png((d / "sprite.png").read_bytes())
    assert sprite.shape == (8, 8, 3)  # 2 per row, 4 wide: padded to an 8x8 square
    np.testing.assert_array_equal(sprite[2:4, 0:4],
                                  (imgs[2].transpose(1, 2, 0) * 255).astype(np.uint8))
    assert (sprite[4:] == 0).all()
    pytest.importorskip("tensorboard")
    from google.protobuf import text_format
    from tensorboard.plugins.projector import projector_config_pb2

    cfg = text_format.Parse((tmp_path / "projector_config.pbtxt").read_text(),
                            projector_config_pb2.ProjectorConfig())
    e0, e1 = cfg.embeddings
    assert (e0.tensor_name, e0.tensor_path, e0.metadata_path) == (
        "default:00000", "00000/default/tensors.tsv", "00000/default/metadata.tsv")
    assert e0.sprite.image_path == "00000/default/sprite.png"
    assert list(e0.sprite.single_image_dim) == [4, 2]
    assert e1.tensor_name == "a/b:00007" and not e1.HasField("sprite")


# --------------------------------------------------------------------------- vs PyTorch
def _log_more(writer_cls, d, to_tensor):
    rng = np.random.default_rng(5)
    labels = rng.integers(0, 2, 50)
    preds = rng.random(50)
    with writer_cls(d) as w:
        w.add_pr_curve("pr", labels, preds, 3, walltime=1.0)
        w.add_pr_curve("pr_w", labels, preds, 3, num_thresholds=300, weights=rng.random(50),
                       walltime=1.0)
        w.add_pr_curve_raw("raw", *rng.random((6, 9)), 4, num_thresholds=9, walltime=2.0)
        w.add_tensor("t", to_tensor(rng.random((2, 3)).astype(np.float32)), 5, walltime=3.0)
        w.add_tensor("ti", to_tensor(np.array([[1, -2], [3, 4]])), 5, walltime=3.0)
        w.add_audio("a", to_tensor(rng.random((1, 30)) * 2 - 1), 6, 16000, walltime=4.0)
        w.add_mesh("m", to_tensor(rng.random((1, 4, 3)).astype(np.float32)),
                   faces=to_tensor(np.array([[[0, 1, 2], [1, 2, 3]]])),
                   config_dict={"b": 1, "a": [2]}, global_step=7, walltime=5.0)
        w.add_custom_scalars({"c": {"m": ["Multiline", ["x", "y"]],
                                    "g": ["Margin", ["v", "l", "u"]]}})


def test_same_records_as_torch(tmp_path):
    pytest.importorskip("tensorboard")
    torch = pytest.importorskip("torch")
    torch_tb = pytest.importorskip("torch.utils.tensorboard")

    _log_more(SummaryWriter, tmp_path / "lucid", lucid.tensor)
    _log_more(torch_tb.SummaryWriter, tmp_path / "torch", torch.tensor)
    ours = read_records(event_files(tmp_path / "lucid")[0])[1:]
    theirs = read_records(event_files(tmp_path / "torch")[0])[1:]
    assert len(ours) == len(theirs) == 8
    for a, b in zip(ours[:-1], theirs[:-1]):
        assert a == b
    # the custom scalars event has the current wall time: compare its summary only
    assert Msg(ours[-1]).one(5, 2) == Msg(theirs[-1]).one(5, 2)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_graph_like_torch(tmp_path):
    """Same module scopes, op chain and shapes as torch's traced graph (names differ:
    torch writes ``Net/Conv2d[conv1]/...`` with TorchScript's ops and constants)."""
    pytest.importorskip("tensorboard")
    torch = pytest.importorskip("torch")
    from torch.utils.tensorboard._pytorch_graph import graph

    class TNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = torch.nn.Conv2d(1, 2, 3)
            self.fc = torch.nn.Linear(8, 3)

        def forward(self, x):
            return self.fc(torch.relu(self.conv1(x)).flatten(1))

    class LNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 2, 3)
            self.fc = nn.Linear(8, 3)

        def forward(self, x):
            return self.fc(lucid.relu(self.conv1(x)).flatten(1))

    tg, _ = graph(TNet(), (torch.randn(2, 1, 4, 4),))
    with SummaryWriter(tmp_path) as w:
        w.add_graph(LNet(), lucid.randn(2, 1, 4, 4))
    nodes, _ = _graph_nodes(tmp_path)

    t_ops = [(n.op.split("::")[-1], [d.size for d in n.attr["_output_shapes"].list.shape[0].dim])
             for n in tg.node if n.op.startswith("aten::")]
    l_ops = [(op.split("::")[-1], shapes[0]) for op, _, shapes in nodes.values()
             if op.startswith("lucid::")]
    assert [s for _, s in t_ops] == [s for _, s in l_ops]  # conv, relu, flatten, linear
    assert [o for o, _ in t_ops] == ["_convolution", "relu", "flatten", "linear"]
    assert [o for o, _ in l_ops] == ["conv", "relu", "reshape", "linear"]
    t_scopes = {n.name.rsplit("/", 1)[0] for n in tg.node if n.op.startswith("aten::")}
    l_scopes = {k.rsplit("/", 1)[0] for k, v in nodes.items() if v[0].startswith("lucid::")}
    assert t_scopes == {"TNet/Conv2d[conv1]", "TNet", "TNet/Linear[fc]"}
    assert l_scopes == {"LNet/conv1", "LNet", "LNet/fc"}


def test_embedding_files_like_torch(tmp_path):
    pytest.importorskip("tensorboard")
    pytest.importorskip("PIL")
    torch = pytest.importorskip("torch")
    torch_tb = pytest.importorskip("torch.utils.tensorboard")
    from test_tensorboard import decode_png

    rng = np.random.default_rng(6)
    mat = rng.normal(size=(5, 3)).astype(np.float32)
    imgs = rng.random((5, 1, 3, 4)).astype(np.float32)
    for cls, conv, sub in ((SummaryWriter, lucid.tensor, "l"), (torch_tb.SummaryWriter,
                                                                  torch.tensor, "t")):
        with cls(tmp_path / sub) as w:
            w.add_embedding(conv(mat), metadata=list("abcdé"), label_img=conv(imgs), tag="e/1")
            w.add_embedding(conv(mat), global_step=12)
    for rel in ("projector_config.pbtxt", "00000/e%2f1/tensors.tsv", "00000/e%2f1/metadata.tsv",
                "00012/default/tensors.tsv"):
        assert (tmp_path / "l" / rel).read_bytes() == (tmp_path / "t" / rel).read_bytes(), rel
    a, b = (decode_png((tmp_path / s / "00000/e%2f1/sprite.png").read_bytes()) for s in "lt")
    np.testing.assert_array_equal(a, b)
