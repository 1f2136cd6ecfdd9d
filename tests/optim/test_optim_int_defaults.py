"""Optimizer defaults spelled as PyTorch's signatures spell them (``weight_decay=0``, not ``0.0``),
so ``print(optimizer)`` shows the same lines as PyTorch's (tutorials print them)."""
import pytest

import lucid

# PyTorch 2.13's documented integer defaults
_INT_DEFAULTS = {
    "SGD": {"momentum": 0, "dampening": 0, "weight_decay": 0},
    "Adam": {"weight_decay": 0}, "NAdam": {"weight_decay": 0}, "RAdam": {"weight_decay": 0},
    "Adamax": {"weight_decay": 0}, "RMSprop": {"weight_decay": 0, "momentum": 0},
    "Adagrad": {"lr_decay": 0, "weight_decay": 0, "initial_accumulator_value": 0},
    "Adadelta": {"weight_decay": 0}, "ASGD": {"weight_decay": 0}, "LBFGS": {"lr": 1},
}


@pytest.mark.parametrize("name", sorted(_INT_DEFAULTS))
def test_defaults_are_pytorchs_ints(name):
    opt = getattr(lucid.optim, name)([lucid.zeros(2, requires_grad=True)])
    for key, value in _INT_DEFAULTS[name].items():
        got = opt.defaults[key]
        assert type(got) is int and got == value, (name, key, got)
    assert f"    {next(iter(_INT_DEFAULTS[name]))}: {next(iter(_INT_DEFAULTS[name].values()))}\n" in repr(opt)


def test_sgd_step_with_default_int_options_is_plain_sgd():
    w = lucid.tensor([1.0, -2.0], requires_grad=True)
    opt = lucid.optim.SGD([w], lr=0.5)
    (w * w).sum().backward()
    opt.step()
    assert w.tolist() == [0.0, 0.0] and w.dtype == lucid.float32  # w - 0.5 * 2w


def test_reprs_match_torch():
    torch = pytest.importorskip("torch")
    for name in ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam", "RAdam", "ASGD",
                 "Rprop", "LBFGS"]:
        ours = repr(getattr(lucid.optim, name)([lucid.zeros(2, requires_grad=True)]))
        theirs = repr(getattr(torch.optim, name)([torch.zeros(2, requires_grad=True)]))
        assert ours.replace("lucid", "torch") == theirs, name
