"""The "meta" device: shapes and dtypes without values (NOTE [Meta device])."""
import copy
import pickle

import pytest

import lucid
from lucid import nn

NO_DATA = "meta tensors have no data"


def test_tensors_and_modules_move_there_without_values():
    m = nn.Linear(3, 2)
    t = copy.deepcopy(m).to("meta")
    assert t.weight.device == lucid.device("meta") and str(t.weight.device) == "meta"
    assert t.weight.shape == (2, 3) and t.weight.dtype is lucid.float32 and t.weight.requires_grad
    assert isinstance(t.weight, nn.Parameter) and m.weight.device != t.weight.device  # the original stays
    assert repr(t.bias) == "Parameter containing:\ntensor(..., device='meta', size=(2,), requires_grad=True)"
    z = lucid.zeros(2, 3, device="meta", dtype=lucid.float64)
    assert repr(z) == "tensor(..., device='meta', size=(2, 3), dtype=lucid.float64)"
    assert lucid.empty(4, device="meta").numel() == 4 and lucid.randn(5, device="meta").shape == (5,)
    assert z.to(lucid.float32).dtype is lucid.float32 and z.to(lucid.float32).device == z.device
    state = t.state_dict()
    assert list(state) == ["weight", "bias"] and state["weight"].device == lucid.device("meta")
    for copied in (copy.deepcopy(t.weight), pickle.loads(pickle.dumps(t.weight)), pickle.loads(pickle.dumps(z))):
        assert copied.device == lucid.device("meta") and copied.shape in ((2, 3),)


def test_reading_values_raises():
    t = nn.Linear(3, 2).to("meta")
    with pytest.raises(NotImplementedError, match="Cannot copy out of meta tensor; no data!"):
        t.weight.cpu()
    with pytest.raises(NotImplementedError, match="Cannot copy out of meta tensor; no data!"):
        t.weight.detach().numpy()
    for read in (lambda: t.weight.tolist(), lambda: t.bias[0].item(), lambda: bool(t.bias.sum() > 0),
                 lambda: float(t.bias.sum())):
        with pytest.raises(NotImplementedError, match=NO_DATA):
            read()
    with pytest.raises(RuntimeError, match="^linear: Expected all tensors to be on the same device"):
        t(lucid.ones(1, 3, device="cpu"))


def test_ops_whose_shape_depends_on_values_raise_naming_the_op():
    x = lucid.ones(2, 3, device="meta")
    for op, fn in [("nonzero", lambda: x.nonzero()), ("getitem", lambda: x[x > 0]),
                   ("getitem", lambda: lucid.masked_select(x, x > 0)), ("unique", lambda: x.unique())]:
        with pytest.raises(NotImplementedError, match=f"^{op}: .*depends on the input's values"):
            fn()


def test_moving_to_meta_reads_nothing_from_a_device():
    from lucid.testing import strict_device

    strict_device.enable()
    before = strict_device.HOST_READS[0]
    x = lucid.ones(3, 4, device="strict").to("meta")
    assert x.shape == (3, 4) and strict_device.HOST_READS[0] == before


def test_to_empty_materialises_a_meta_module():
    m = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2)).to("meta")
    assert m.to_empty(device="cpu") is m
    assert m[0].weight.device == lucid.device("cpu") and isinstance(m[0].weight, nn.Parameter)
    assert m[1].num_batches_tracked.dtype is lucid.int64 and m[1].running_mean.shape == (2,)
    for layer in m:
        layer.reset_parameters()
    assert m[1].running_var.tolist() == [1.0, 1.0] and m(lucid.ones(4, 3, device="cpu")).shape == (4, 2)
    lin = nn.Linear(3, 2, device="cpu")
    lin.weight.grad = lucid.ones(2, 3, device="cpu")
    lin.to_empty(device="meta")
    assert lin.weight.device == lucid.device("meta") and lin.weight.grad is None
    outer = nn.Sequential(nn.Linear(2, 2, device="cpu"))
    outer.to_empty(device="meta", recurse=False)  # no parameters of its own: nothing moves
    assert outer[0].weight.device == lucid.device("cpu")


def test_device_block_builds_a_model_without_memory():
    before = lucid.get_default_device()
    with lucid.device("meta"):
        model = nn.Sequential(nn.Linear(4000, 4000), nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.LSTM(4, 4))
        assert lucid.zeros(2).device == lucid.device("meta")
    assert lucid.get_default_device() == before
    assert all(p.device == lucid.device("meta") for p in model.parameters())
    assert sum(p._data.__class__.__name__ == "MetaArray" for p in model.parameters()) == len(list(model.parameters()))
    with pytest.raises(KeyError):
        with lucid.device("meta"):
            raise KeyError("inside")
    assert lucid.get_default_device() == before  # restored after an exception too
    if not lucid.cuda.is_available():
        with pytest.raises(RuntimeError, match=r"^device.__enter__: device 'cuda' is not available"):
            with lucid.device("cuda"):
                pass
        assert lucid.get_default_device() == before


def _shapes_on(device, build, inputs, seed=0):
    """Output shape/dtype and every parameter gradient's shape, for ``build()`` on ``device``."""
    lucid.manual_seed(seed)
    model = build().to(device)
    out = model(*[x.to(device) for x in inputs])
    out = out[0] if isinstance(out, tuple) else out
    out.float().sum().backward()
    assert out.device.type == device
    return tuple(out.shape), out.dtype, [tuple(p.grad.shape) for p in model.parameters() if p.grad is not None]


class _Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb, self.norm, self.out = nn.Embedding(5, 8), nn.LayerNorm(8), nn.Linear(8, 5)

    def forward(self, tokens):
        return lucid.nn.functional.log_softmax(self.out(self.norm(self.emb(tokens))), -1)


@pytest.mark.parametrize("build,shapes", [
    (lambda: nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                           nn.Conv2d(8, 4, 3, stride=2), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2)),
     [(2, 3, 16, 16)]),
    (lambda: nn.LSTM(4, 6, num_layers=2, batch_first=True, bidirectional=True), [(2, 5, 4)]),
    (lambda: nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 4, 32, batch_first=True), 2), [(2, 7, 16)]),
    (lambda: nn.Sequential(nn.ConvTranspose2d(4, 2, 4, 2, 1), nn.GroupNorm(1, 2), nn.Upsample(scale_factor=2)),
     [(1, 4, 5, 5)]),
    (_Tagger, "tokens"),
], ids=["cnn", "lstm", "transformer", "conv_transpose", "embedding"])
def test_models_infer_shapes_forward_and_backward(build, shapes):
    lucid.manual_seed(1)
    inputs = [lucid.randint(0, 5, (3, 4))] if shapes == "tokens" else [lucid.randn(*s) for s in shapes]
    want = _shapes_on("cpu", build, inputs)
    assert _shapes_on("meta", build, inputs) == want


def test_reasoning_about_shapes_recipe():
    # PyTorch's recipe "Reasoning about Shapes in PyTorch", on Lucid
    t = lucid.rand(2, 3, 10, 10, device="meta")
    conv = nn.Conv2d(3, 5, 2, device="meta")
    assert conv(t).shape == (2, 5, 9, 9) and conv(t).device == lucid.device("meta")
    x = lucid.ones(3, 4, device="meta", dtype=lucid.float64)
    y = lucid.einsum("ij,jk->ik", x, lucid.ones(4, 2, device="meta"))
    assert y.shape == (3, 2) and y.dtype is lucid.float64
    with pytest.raises(RuntimeError, match=r"^matmul: .*\(3, 4\).*\(3, 4\)|^matmul: .*mismatch"):
        x @ x
    assert (x.int() + 2).dtype is lucid.int32 and (x.half() * 0.5).dtype is lucid.float16


def test_views_and_in_place_ops_check_shapes_and_share_versions():
    x = lucid.zeros(3, 4, device="meta")
    row = x[1]
    x.add_(1)
    assert row._version is x._version and x._version[0] == 1
    x[:, 0] = lucid.ones(3, device="meta")
    with pytest.raises(Exception, match="broadcast"):
        x.add_(lucid.ones(5, device="meta"))
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long|cast"):
        lucid.zeros(2, dtype=lucid.int64, device="meta").add_(lucid.ones(2, device="meta"))
    assert x.stride() == (4, 1) and x.t().stride() == (3, 1)  # contiguous strides (README "Differences")


def test_transforms_run_on_the_meta_device():
    import lucid.func as F

    w = lucid.ones(4, 3, device="meta")
    per_example = F.vmap(F.grad(lambda w, x: (x @ w).tanh().sum()), in_dims=(None, 0))(w, lucid.ones(5, 4, device="meta"))
    assert per_example.shape == (5, 4, 3) and per_example.device == lucid.device("meta")
    hess = F.hessian(lambda v: (v ** 3).sum())(lucid.ones(3, device="meta"))
    assert hess.shape == (3, 3) and hess.device == lucid.device("meta")


def test_initialising_on_meta_draws_nothing_and_allocates_nothing():
    import tracemalloc

    lucid.manual_seed(0)
    expected = lucid.rand(3).tolist()
    lucid.manual_seed(0)
    tracemalloc.start()
    try:
        with lucid.device("meta"):
            model = nn.Sequential(nn.Linear(4096, 4096), nn.Embedding(20000, 512), nn.Conv2d(64, 64, 3))
        for init in (nn.init.orthogonal_, nn.init.trunc_normal_, nn.init.eye_, nn.init.zeros_,
                     lambda w: nn.init.sparse_(w, 0.5), nn.init.xavier_normal_):
            init(model[0].weight)
        nn.init.dirac_(model[2].weight)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 ** 20, peak  # the Linear's weight alone would be 64 MB of host values
    assert lucid.rand(3).tolist() == expected  # the generator was not advanced, as in PyTorch
    with pytest.raises(ValueError, match="eye_: only tensors with 2 dimensions"):
        nn.init.eye_(model[2].weight)  # arguments are still checked
