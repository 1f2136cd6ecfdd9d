"""lucid.utils.flop_counter and module_tracker (NOTE [FLOP counting], NOTE [Module tracker])."""
import pytest

import lucid
from lucid import nn
from lucid.utils.flop_counter import FlopCounterMode, register_flop_formula
from lucid.utils.module_tracker import ModuleTracker


def _cnn():
    lucid.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, groups=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 6 * 6, 10))


def test_closed_forms_forward_and_backward_per_module():
    model = _cnn()
    x = lucid.randn(4, 3, 8, 8, requires_grad=True)
    with FlopCounterMode(display=False) as counter:
        model(x).sum().backward()
    conv = 2 * 4 * 6 * 6 * 8 * 3 * 3 * 3  # N * out positions * C_out * C_in * kernel, times 2
    linear = 2 * 4 * 10 * 288
    counts = counter.get_flop_counts()
    assert counts["Sequential.0"] == {"lucid.conv": conv, "lucid.conv_transpose": conv, "lucid.conv_weight": conv}
    assert counts["Sequential.3"] == {"lucid.linear": linear, "lucid.matmul": 2 * linear}
    assert counter.get_total_flops() == 3 * conv + 3 * linear == sum(counts["Sequential"].values())
    with FlopCounterMode(display=False) as counter:  # no input gradient: no conv_transpose
        model(x.detach()).sum().backward()
    assert counter.get_flop_counts()["Sequential.0"] == {"lucid.conv": conv, "lucid.conv_weight": conv}


def test_matmul_einsum_grouped_and_transposed_convs():
    a = lucid.randn(3, 4, 5, requires_grad=True)
    b = lucid.randn(5, 6, requires_grad=True)
    with FlopCounterMode(display=False) as counter:
        (a @ b).sum().backward()
        lucid.einsum("bij,jk->bik", a, b)
        lucid.einsum("i,j", lucid.ones(3), lucid.ones(4))  # implicit output "ij": an outer product
        lucid.nn.functional.conv2d(lucid.ones(2, 4, 5, 5), lucid.ones(6, 2, 3, 3), groups=2)
        lucid.nn.functional.conv_transpose2d(lucid.ones(1, 4, 3, 3), lucid.ones(4, 2, 2, 2), stride=2)
    counts = counter.get_flop_counts()["Global"]
    assert counts["lucid.matmul"] == 3 * 2 * 12 * 5 * 6
    assert counts["lucid.einsum"] == 2 * 12 * 5 * 6 + 2 * 3 * 4
    assert counts["lucid.conv"] == 2 * 2 * 3 * 3 * 6 * 2 * 3 * 3
    assert counts["lucid.conv_transpose"] == 2 * 1 * 3 * 3 * 4 * 2 * 2 * 2


def test_counts_a_model_on_the_meta_device_without_computing():
    with lucid.device("meta"):
        model = nn.Sequential(nn.Linear(4096, 4096), nn.GELU(), nn.Linear(4096, 1024))
        x = lucid.randn(512, 4096)
    with FlopCounterMode(display=False) as counter:
        model(x).sum().backward()
    forward = 2 * 512 * 4096 * 4096 + 2 * 512 * 4096 * 1024
    assert counter.get_total_flops() == 3 * forward - 2 * 512 * 4096 * 4096  # x needs no gradient


def test_transforms_count_the_batched_work():
    w = lucid.randn(5, 3)
    xs = lucid.randn(7, 5)
    with FlopCounterMode(display=False) as counter:
        lucid.func.vmap(lucid.func.grad(lambda w, x: (x @ w).tanh().sum()), in_dims=(None, 0))(w, xs)
    # per example: x @ w (2*5*3) forward, and the gradient's outer product x^T g (2*5*3)
    assert counter.get_total_flops() == 7 * 2 * (2 * 5 * 3)


def test_table_matches_pytorchs_layout():
    model = nn.Sequential(nn.Linear(3, 2))
    with FlopCounterMode(display=False, depth=1) as counter:
        model(lucid.ones(4, 3))
        lucid.ones(2, 2) @ lucid.ones(2, 2)  # outside every module: Global is shown
    assert counter.get_table().splitlines() == [
        "Module              FLOP    % Total",
        "----------------  ------  ---------",
        "Global            64.000    100.00%",
        " - lucid.linear   48.000     75.00%",
        " - lucid.matmul   16.000     25.00%",
        " Sequential       48.000     75.00%",
        "  - lucid.linear  48.000     75.00%",
    ]


def test_custom_formulas_and_restoring_the_primitives(capsys):
    from lucid._core.primitive import AN, REGISTRY

    before = (REGISTRY["matmul"].impl, AN.matmul)
    with FlopCounterMode(display=True, custom_mapping={"exp": lambda x, out_shape=None: 7}) as counter:
        lucid.ones(3).exp()
        with pytest.raises(RuntimeError, match="not reentrant"):
            counter.__enter__()
    assert counter.get_total_flops() == 7 and "lucid.exp" in capsys.readouterr().out
    assert (REGISTRY["matmul"].impl, AN.matmul) == before

    @register_flop_formula("lucid.sin")
    def sin_flop(x_shape, out_shape=None, **params):
        return 3 * x_shape[0]

    try:
        with FlopCounterMode(display=False) as counter:
            lucid.ones(5).sin()
        assert counter.get_flop_counts()["Global"] == {"lucid.sin": 15}
    finally:
        del lucid.utils.flop_counter._FORMULAS["sin"]


def test_module_tracker_follows_forward_and_backward():
    seen = []

    class Probe(nn.Module):
        def forward(self, x):
            seen.append(("forward", sorted(tracker.parents), tracker.is_bw))
            return x * 2

    model = nn.Sequential(nn.Linear(2, 2), Probe(), nn.Linear(2, 1))
    with ModuleTracker() as tracker:
        out = model(lucid.ones(1, 2, requires_grad=True))
        lucid.autograd.graph.register_multi_grad_hook(
            [out], lambda grads: seen.append(("backward", sorted(tracker.parents), tracker.is_bw)))
        out.sum().backward()
        assert tracker.parents == {"Global"}  # reset when the backward ends
    assert seen == [("forward", ["Global", "Sequential", "Sequential.1"], False),
                    ("backward", ["Global", "Sequential", "Sequential.2"], True)]


def test_matches_pytorch_when_installed():
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode as TorchCounter

    def totals(counter):
        return {k: sum(v.values()) for k, v in counter.get_flop_counts().items()}

    for lib, Counter in ((torch, TorchCounter), (lucid, FlopCounterMode)):
        lib.manual_seed(0)
        model = lib.nn.Sequential(lib.nn.Conv2d(3, 6, 3, stride=2, padding=1), lib.nn.ReLU(),
                                  lib.nn.ConvTranspose2d(6, 4, 2, stride=2), lib.nn.Flatten(),
                                  lib.nn.Linear(4 * 8 * 8, 5))
        with Counter(display=False) as counter:
            model(lib.randn(2, 3, 8, 8, requires_grad=True)).sum().backward()
        if lib is torch:
            want = totals(counter)
    assert totals(counter) == want
