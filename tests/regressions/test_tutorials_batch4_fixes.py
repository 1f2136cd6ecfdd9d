"""Focused tests of what the fourth batch of tutorials fixed: ``lucid.utils.swap_tensors``
(missing) and the generated fake kernel of a custom op that mutates its arguments and returns
nothing (``opcheck`` ran the real, host-only kernel on the meta device)."""
import numpy as np
import pytest

import lucid
import lucid.library
import lucid.nn as nn
import lucid.utils


def test_swap_tensors_swaps_data_class_and_attributes():
    p = nn.Parameter(lucid.tensor([1.0, 2.0]))
    t = lucid.tensor([[3, 4, 5]])
    p.tag = "param"
    lucid.utils.swap_tensors(p, t)
    assert type(p) is lucid.Tensor and type(t) is nn.Parameter
    assert p.tolist() == [[3, 4, 5]] and p.dtype == lucid.int64 and not p.requires_grad
    assert t.tolist() == [1.0, 2.0] and t.requires_grad and t.tag == "param"
    assert not hasattr(p, "tag")
    (t * t).sum().backward()  # the swapped-in parameter is a working leaf
    assert t.grad.tolist() == [2.0, 4.0]


def test_swap_tensors_keeps_references_seeing_the_new_contents():
    m = nn.Linear(2, 1, bias=False)
    with lucid.no_grad():
        m.weight.copy_(lucid.tensor([[1.0, 1.0]]))
    w = m.weight
    new = nn.Parameter(lucid.tensor([[2.0, -1.0]]))
    lucid.utils.swap_tensors(m.weight, new)
    assert m.weight is w and w.tolist() == [[2.0, -1.0]]
    assert m(lucid.tensor([[3.0, 1.0]])).item() == 5.0


@pytest.mark.skipif("lucid.get_default_device().type != 'cpu'", reason="the kernel computes on the host")
def test_mutating_custom_op_without_return_needs_no_fake():
    calls = []

    @lucid.library.custom_op("b4fix::host_sin_out", mutates_args={"output"}, device_types="cpu")
    def host_sin_out(input: lucid.Tensor, output: lucid.Tensor) -> None:
        calls.append(input.device.type)
        np.sin(input.numpy(), out=output.numpy())

    x = lucid.tensor([0.0, 0.5, 1.0])
    out = lucid.empty(3)
    assert host_sin_out(x, out) is None
    np.testing.assert_allclose(out.numpy(), np.sin([0.0, 0.5, 1.0]), rtol=1e-6)
    # On the meta device the generated fake runs: no data, nothing to compute, no kernel call.
    calls.clear()
    assert host_sin_out(x.to("meta"), out.to("meta")) is None
    assert calls == []
    result = lucid.library.opcheck(host_sin_out, (lucid.randn(2, 3), lucid.empty(2, 3)))
    assert set(result.values()) == {"SUCCESS"}


def test_op_that_returns_something_still_needs_a_fake():
    @lucid.library.custom_op("b4fix::host_twice", mutates_args=(), device_types="cpu")
    def host_twice(x: lucid.Tensor) -> lucid.Tensor:
        return lucid.from_numpy(x.numpy() * 2)

    with pytest.raises(NotImplementedError, match="no kernel registered for device type 'meta'"):
        host_twice(lucid.empty(2, device="meta"))
