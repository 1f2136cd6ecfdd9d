"""A 0-d CPU tensor meets tensors of any device in an op, as in PyTorch (NOTE [CPU numbers on
a device] in lucid/_core/primitive.py); the strict stand-in plays the GPU."""
import pytest

import lucid
from lucid.testing import strict_device


@pytest.fixture(autouse=True)
def _strict():
    strict_device.enable()


@pytest.mark.parametrize("dev", ["strict", "strict:1"])
def test_cpu_numbers_join_device_ops_with_their_gradient(dev):
    x = lucid.tensor([1.0, 2.0, 3.0], device=dev, requires_grad=True)
    scale = lucid.tensor(2.0, device="cpu", requires_grad=True)
    y = (x * scale + lucid.tensor(1.0, device="cpu")).sum()
    assert y.device == lucid.device(dev if dev != "strict" else "strict:0") and y.cpu().item() == 15.0
    y.backward()
    assert x.grad.cpu().tolist() == [2.0, 2.0, 2.0] and x.grad.device == x.device
    assert scale.grad.item() == 6.0 and scale.grad.device == lucid.device("cpu")
    mask = x.detach() > 1.5
    assert lucid.where(mask, lucid.tensor(9.0, device="cpu"), x.detach()).cpu().tolist() == [1.0, 9.0, 9.0]


def test_in_place_ops_take_cpu_numbers_too():
    x = lucid.ones(3, device="strict")
    x.add_(lucid.tensor(2.0, device="cpu")).mul_(lucid.tensor(2.0, device="cpu"))  # the direct write path
    assert x.device == lucid.device("strict:0") and x.cpu().tolist() == [6.0, 6.0, 6.0]
    w = lucid.ones(2, device="strict", requires_grad=True)
    y = w * 1
    y.mul_(lucid.tensor(3.0, device="cpu"))  # the graph path
    y.sum().backward()
    assert w.grad.cpu().tolist() == [3.0, 3.0]
    with pytest.raises(RuntimeError, match="^add_: "):
        x.add_(lucid.ones(3, device="cpu"))


def test_only_numbers_move():
    x = lucid.ones(3, device="strict")
    with pytest.raises(RuntimeError, match="^add: Expected all tensors to be on the same device, but found at "
                                           "least two devices, strict:0 and cpu"):
        x + lucid.ones(3, device="cpu")  # a CPU vector does not move, as in PyTorch
    with pytest.raises(ValueError, match="^add: operands could not be broadcast"):
        lucid.ones(2, 3, device="strict") + lucid.ones(4, device="strict") + lucid.tensor(1.0, device="cpu")


def test_meta_too():
    m = lucid.ones(2, 3, device="meta")
    out = m * lucid.tensor(2.0, device="cpu")
    assert out.device == lucid.device("meta") and out.shape == (2, 3)
