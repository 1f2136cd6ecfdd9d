"""The by-hand module sweep (scripts/module_diff.py): its tree, sampling and comparison helpers
(run with Lucid on both sides, no torch needed), and a small sweep against PyTorch's ModuleInfo
database when torch is installed."""
import argparse
import collections
import importlib.util
import pathlib
import types

import numpy as np
import pytest

import lucid

_PATH = pathlib.Path(__file__).resolve().parents[1] / "scripts" / "module_diff.py"


@pytest.fixture(scope="module")
def md():
    spec = importlib.util.spec_from_file_location("module_diff", _PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_tree_map_keeps_structure_and_visits_leaves_in_order(md):
    Pt = collections.namedtuple("Pt", "x y")
    tree = ([1, (2, Pt(3, 4))], {"a": 5, "b": None})
    is_int = lambda o: isinstance(o, int)
    out = md.tree_map(lambda v: v * 10, tree, is_int)
    assert out == ([10, (20, Pt(30, 40))], {"a": 50, "b": None})
    assert isinstance(out[0][1][1], Pt)
    assert md.tree_leaves(tree, is_int) == [1, 2, 3, 4, 5]


def test_pick_spreads_samples_and_keeps_short_lists(md):
    assert md.pick(list("abc"), 5) == [(0, "a"), (1, "b"), (2, "c")]
    got = md.pick(list(range(100)), 5)
    assert [k for k, _ in got] == [0, 25, 50, 74, 99]  # first, last and evenly between
    assert all(k == v for k, v in got)
    assert len(md.pick(list(range(10)), None)) == 10


def test_modes_of(md):
    same, differ = types.SimpleNamespace(train_and_eval_differ=False), types.SimpleNamespace(train_and_eval_differ=True)
    assert md.modes_of(same, "auto") == (True,)
    assert md.modes_of(differ, "auto") == (True, False)
    assert md.modes_of(same, "eval") == (False,)
    assert md.modes_of(same, "train,eval") == (True, False)


def test_shapes_describes_nested_inputs(md):
    x = lucid.zeros((2, 3), dtype=lucid.float64)
    assert md.shapes(((x, None), {"h": x})) == "(((2, 3) float64, None), {h=(2, 3) float64})"


def _pair(md, training=True, perturb=0.0):
    """A fake sample: Lucid's BatchNorm1d on both sides (``torch`` played by ``lucid``), the
    second one's weight optionally perturbed."""
    lucid.manual_seed(1)  # not 0: the sweep's cotangent comes from numpy's default_rng(0)
    x = lucid.randn(4, 3, dtype=lucid.float64)
    mods = [lucid.nn.BatchNorm1d(3).double() for _ in range(2)]
    mods[1].load_state_dict(mods[0].state_dict())
    with lucid.no_grad():
        mods[1].weight.add_(perturb)
    # ``torch`` is Lucid too (from_numpy -> lucid.tensor: on the default device, as the rest)
    fake_torch = types.SimpleNamespace(from_numpy=lucid.tensor, autograd=lucid.autograd, no_grad=lucid.no_grad)
    p = types.SimpleNamespace(torch=fake_torch, lucid=lucid, random=False, t_mod=mods[0], l_mod=mods[1])
    ins = [x.detach().clone().requires_grad_(True) for _ in range(2)]
    p.t_in, p.l_in = ((ins[0],), {}), ((ins[1],), {})
    for m in mods:
        m.train(training)
    p.t_out, p.l_out = mods[0](ins[0]), mods[1](ins[1])
    return p


def test_checks_agree_on_identical_modules(md):
    p = _pair(md)
    assert md.check_forward(p) is None
    assert md.check_buffers(p) is None
    assert md.check_grad(p) is None


def test_checks_see_a_perturbed_weight(md):
    p = _pair(md, perturb=1e-4)
    assert md.check_forward(p).startswith("out:")
    assert md.check_grad(p).startswith("grad[input 0]")  # dL/dx scales with the weight
    assert md.check_buffers(p) is None  # running stats do not read the weight


def test_check_grad_compares_parameter_gradients(md):
    p = _pair(md)
    p.l_mod.eps = 1e-1  # changes x_hat, hence d/dweight; inputs not differentiated here
    for t in (p.t_in[0][0], p.l_in[0][0]):
        t.requires_grad_(False)
    p.t_out, p.l_out = p.t_mod(p.t_in[0][0]), p.l_mod(p.l_in[0][0])
    assert md.check_grad(p).startswith("grad[weight]")
    p = _pair(md)
    p.l_mod.bias.requires_grad_(False)
    p.l_out = p.l_mod(p.l_in[0][0])
    assert "bias" in md.check_grad(p)


def test_check_buffers_sees_running_stats(md):
    p = _pair(md)
    with lucid.no_grad():
        p.l_mod.running_mean.add_(1e-3)
    assert md.check_buffers(p).startswith("buffer running_mean")


def test_compare_factor_scales_the_tolerance(md):
    a = np.array([1.0, -2.0])
    b = a * (1 + 5e-7)  # 5x float64's rtol of 1e-7 (atol is 1e-7 x the largest entry)
    assert md.compare(a, b).startswith("out: ")
    assert md.compare(a, b, factor=2) is not None
    assert md.compare(a, b, factor=10) is None
    assert md.compare(a, b[:1], factor=10) is not None  # shapes are never loosened


def test_known_matches_module_check_and_message(md):
    msg = "grad[input 1]: 3/120 differ, e.g. at (0,) np.float64(0.1) vs np.float64(nan)"
    assert "NaN gradient" in md.known("nn.PoissonNLLLoss", "grad", msg)
    assert md.known("nn.PoissonNLLLoss", "forward", msg) is None
    assert md.known("nn.MSELoss", "grad", msg) is None
    assert md.known("nn.PoissonNLLLoss", "grad", msg.replace("nan", "0.2")) is None
    assert "RNN" in md.known("nn.GRU", "errors", "lucid accepts ... /RNN input dtype .* does not match/")


def test_gradgrad_and_nograd_checks(md):
    p = _pair(md)
    p.t_call, p.l_call = p.t_in, p.l_in
    assert md.check_grad(p, order=2) is None
    assert md.check_nograd(p) is None
    p = _pair(md, perturb=1e-3)
    p.t_call, p.l_call = p.t_in, p.l_in
    assert md.check_grad(p, order=2).startswith("gradgrad[input 0]")
    assert md.check_nograd(p).startswith("no_grad out")


def test_translate_and_small_sweep_against_pytorch(md, capsys):
    torch = pytest.importorskip("torch")
    pytest.importorskip("expecttest")  # torch's test database imports it
    t = torch.arange(6, dtype=torch.float64).reshape(2, 3)
    got = md.translate(torch, lucid, (t, torch.float32, torch.Size([2]), torch.nn.functional.gelu))
    lucid.testing.assert_close(got[0], lucid.arange(6, dtype=lucid.float64).reshape(2, 3))
    assert got[1] is lucid.float32 and got[2] == (2,) and got[3] is lucid.nn.functional.gelu
    layer = torch.nn.TransformerEncoderLayer(4, 2, 8, 0.0, batch_first=True, norm_first=True)
    l_layer = md.translate(torch, lucid, layer)
    assert isinstance(l_layer, lucid.nn.TransformerEncoderLayer)
    assert set(l_layer.state_dict()) == set(layer.state_dict())
    assert l_layer.norm_first and l_layer.self_attn.batch_first and l_layer.linear1.out_features == 8
    packed = torch.nn.utils.rnn.pack_padded_sequence(torch.ones(3, 2, 1), torch.tensor([3, 2]))
    l_packed = md.translate(torch, lucid, packed)
    assert isinstance(l_packed, lucid.nn.utils.rnn.PackedSequence)
    assert l_packed.data.cpu().numpy().shape == (5, 1)

    tally = md.main(["--modules", "nn.Linear,nn.BatchNorm1d,nn.LSTMCell", "--dtypes", "float64,float32"])
    out = capsys.readouterr().out
    assert tally.problems == [], out
    assert tally.counts["forward:ok"] >= 20 and tally.counts["grad:ok"] >= 20 and tally.counts["buffers:ok"] >= 4, out
