"""Bad input across the public API raises a clear error that starts with the op's name and
mentions the shapes (never a bare NumPy message), and a failing call changes nothing."""
import numpy as np
import pytest

import lucid
import lucid.nn as nn
import lucid.nn.functional as F


def _x(*shape):
    return lucid.ones(*shape)


CASES = [
    # binary elementwise ops: broadcasting
    ("add", lambda: lucid.add(_x(2, 3), _x(4)), RuntimeError, r"^add: .*\(2,3\) \(4,\)"),
    ("mul", lambda: _x(2, 3) * _x(2), RuntimeError, r"^mul: .*\(2,3\) \(2,\)"),
    ("where", lambda: lucid.where(_x(2) > 0, _x(3), _x(2)), RuntimeError, r"^where: .*\(3,\)"),
    ("maximum", lambda: lucid.maximum(_x(2, 3), _x(3, 2)), RuntimeError, r"^maximum: .*\(2,3\) \(3,2\)"),
    # matrix products
    ("matmul", lambda: lucid.matmul(_x(2, 3), _x(2, 3)), RuntimeError, r"^matmul: shapes \(2, 3\) and \(2, 3\)"),
    ("mm", lambda: lucid.mm(_x(2, 3), _x(2, 3)), RuntimeError, r"^mm: shapes \(2, 3\) and \(2, 3\)"),
    ("mm_1d", lambda: lucid.mm(_x(3), _x(3, 2)), RuntimeError, r"^mm: .*shape \(3,\)"),
    ("bmm", lambda: lucid.bmm(_x(2, 2, 3), _x(3, 3, 2)), RuntimeError, r"^bmm: .*\(2, 2, 3\) and \(3, 3, 2\)"),
    ("dot", lambda: lucid.dot(_x(2), _x(3)), RuntimeError, r"^dot: .*\(2,\) and \(3,\)"),
    ("einsum", lambda: lucid.einsum("ij,jk->ik", _x(2, 3), _x(2, 3)), RuntimeError, r"^einsum: .*\(2, 3\)"),
    # shape ops
    ("cat", lambda: lucid.cat([_x(2, 3), _x(2, 4)], 0), RuntimeError, r"^cat: .*\(2, 3\), \(2, 4\)"),
    ("stack", lambda: lucid.stack([_x(2), _x(3)]), RuntimeError, r"^stack: .*\(2,\), \(3,\)"),
    ("reshape", lambda: _x(2, 3).reshape(4), RuntimeError, r"^reshape: shape \(4,\) is invalid for input of size 6"),
    ("view", lambda: _x(2, 3).view(5), RuntimeError, r"^view: shape \(5,\) is invalid for input of size 6"),
    ("expand", lambda: _x(2, 3).expand(4, 3), RuntimeError, r"^expand: the shape \(2, 3\) can't be broadcast to \(4, 3\)"),
    ("broadcast_to", lambda: lucid.broadcast_to(_x(3), (1,)), RuntimeError, r"^broadcast_to: .*\(3,\).*\(1,\)"),
    ("permute", lambda: _x(2, 3).permute(0, 0), RuntimeError, r"^permute: "),
    ("transpose", lambda: _x(2, 3).transpose(0, 5), IndexError, r"^transpose: dimension 5 .* 2 dims"),
    ("split", lambda: lucid.split(_x(4), [1, 2]), RuntimeError, r"^split_with_sizes: .*4"),
    # reductions
    ("sum_dim", lambda: _x(2, 3).sum(dim=5), IndexError, r"^sum: dimension 5 .* 2 dims"),
    ("mean_repeated_dim", lambda: _x(2, 3).mean(dim=(0, 0)), RuntimeError, r"^mean: "),
    ("topk", lambda: lucid.topk(_x(3), 5), RuntimeError, r"^topk: .*\(3,\)"),
    # indexing
    ("getitem_float_index", lambda: _x(3)[lucid.tensor([0.0, 1.0])], IndexError, r"^getitem: .*float32"),
    ("getitem_out_of_bounds", lambda: _x(3)[5], IndexError, r"^getitem: index 5 .*\(3,\)"),
    ("index_select_float", lambda: lucid.index_select(_x(3), 0, lucid.tensor([0.5])), RuntimeError,
     r"^index_select: expected an integer index tensor"),
    ("gather_out_of_bounds", lambda: lucid.gather(_x(3), 0, lucid.tensor([5])), IndexError, r"^gather: index 5"),
    ("masked_fill_shape", lambda: _x(3).masked_fill(lucid.tensor([True, False]), 0.0), ValueError,
     r"^masked_fill: .*\(2,\)"),
    ("setitem_shape", lambda: _x(3).__setitem__(slice(0, 2), _x(3)), RuntimeError, r"^setitem: .*\(3,\).*\(2,\)"),
    # linalg
    ("linalg.inv", lambda: lucid.linalg.inv(_x(2, 3)), RuntimeError, r"^linalg.inv: .*\(2, 3\)"),
    ("linalg.solve", lambda: lucid.linalg.solve(lucid.eye(2), _x(3)), RuntimeError, r"^linalg.solve: .*\(2, 2\)"),
    ("linalg.vector_norm_ord", lambda: lucid.linalg.norm(_x(3), ord="fro"), RuntimeError,
     r"^linalg.vector_norm: ord .*\(3,\)"),
    ("linalg.vector_norm_dim", lambda: lucid.linalg.vector_norm(_x(2, 3), dim=5), IndexError,
     r"^linalg.vector_norm: dimension 5 .* 2 dims"),
    # creation, dtypes and devices
    ("zeros_device", lambda: lucid.zeros(2, device="cuda"), RuntimeError, r"^zeros: device 'cuda'"),
    ("tensor_device", lambda: lucid.tensor([1.0], device="cuda"), RuntimeError, r"^tensor: device 'cuda'"),
    ("randn_device", lambda: lucid.randn(2, device="cuda"), RuntimeError, r"^randn: device 'cuda'"),
    ("to_device", lambda: _x(2).to("cuda"), RuntimeError, r"^to: device 'cuda'"),
    ("module_to_device", lambda: nn.Linear(2, 2).to("cuda"), RuntimeError, r"^Module.to: device 'cuda'"),
    ("to_dtype", lambda: _x(2).to("float99"), TypeError, r"^to: "),
    ("zeros_negative", lambda: lucid.zeros(-1), RuntimeError, r"^zeros: negative dimension in size \(-1,\)"),
    ("full_fill_value", lambda: lucid.full((2,), "a"), TypeError, r"^full: fill_value must be a number"),
    ("arange_step", lambda: lucid.arange(0, 5, 0), RuntimeError, r"^arange: step must be nonzero"),
    ("tensor_ragged", lambda: lucid.tensor([[1, 2], [3]]), ValueError, r"^tensor: can't make a tensor"),
    # in-place ops
    ("add_", lambda: _x(2).add_(_x(3)), RuntimeError, r"^add_: .*\(2,\).*\(3,\)"),
    ("mul_broadcast", lambda: _x(3).mul_(_x(2, 3)), RuntimeError, r"^mul_: .*\(3,\).*\(2, ?3\)"),
    ("copy_", lambda: _x(3).copy_(_x(4)), RuntimeError, r"^copy_: .*\(4,\).*\(3,\)"),
    # nn and optim
    ("linear", lambda: nn.Linear(3, 2)(_x(4)), RuntimeError, r"^linear: .*\(4,\).*\(2, 3\)"),
    ("layer_norm", lambda: F.layer_norm(_x(2, 3), (4,)), RuntimeError, r"^layer_norm: .*\(2, 3\).*\(4,\)"),
    ("embedding_float", lambda: nn.Embedding(3, 2)(lucid.tensor([0.5])), RuntimeError, r"^embedding: .*float32"),
    ("optimizer_lr", lambda: lucid.optim.Adam([lucid.ones(2, requires_grad=True)], lr="a"), ValueError,
     r"^Adam: invalid lr 'a'"),
    ("optimizer_betas", lambda: lucid.optim.AdamW([lucid.ones(2, requires_grad=True)], betas=(0.9, 1.5)),
     ValueError, r"^AdamW: invalid betas"),
    ("optimizer_param", lambda: lucid.optim.SGD([1.0], lr=0.1), TypeError, r"^SGD: can only optimize Tensors"),
]


@pytest.mark.parametrize("call,exc,match", [pytest.param(c, e, m, id=n) for n, c, e, m in CASES])
def test_error_names_the_op_and_shapes(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


# ------------------------------------------------- a failing call changes nothing


def test_numpy_value_errors_are_runtime_errors_as_in_pytorch_and_still_value_errors():
    # PyTorch raises RuntimeError when operands do not broadcast; code written against
    # Lucid's earlier ValueError (NumPy's class) keeps working.
    from lucid._core.primitive import OpError

    for call in (lambda: _x(2, 3) + _x(4), lambda: lucid.where(_x(2) > 0, _x(3), _x(2))):
        with pytest.raises(RuntimeError) as info:
            call()
        assert isinstance(info.value, ValueError) and type(info.value) is OpError


def test_optimizer_step_with_a_bad_gradient_changes_nothing():
    good = lucid.tensor([1.0, 2.0], requires_grad=True)
    bad = lucid.tensor([3.0, 4.0], requires_grad=True)
    opt = lucid.optim.Adam([good, bad], lr=0.1)
    good.grad = lucid.ones(2)
    bad._grad = lucid.ones(3)  # bypasses the setter's check, as a buggy hook might
    versions = (good._version[0], bad._version[0])
    with pytest.raises(RuntimeError, match=r"^Adam.step: a gradient of shape \(3,\) .* shape \(2,\)"):
        opt.step()
    assert good.tolist() == [1.0, 2.0] and bad.tolist() == [3.0, 4.0]
    assert opt.state == {}
    assert (good._version[0], bad._version[0]) == versions
    bad._grad = lucid.ones(2)  # once fixed, the step works
    opt.step()
    np.testing.assert_allclose(good.tolist(), [0.9, 1.9], rtol=1e-6)


def test_optimizer_load_state_dict_wrong_shape_changes_nothing():
    a = lucid.tensor([1.0, 2.0], requires_grad=True)
    opt = lucid.optim.SGD([a], lr=0.1, momentum=0.9)
    a.grad = lucid.ones(2)
    opt.step()
    sd = opt.state_dict()
    sd["state"][0]["momentum_buffer"] = lucid.ones(5)
    sd["param_groups"][0]["lr"] = 0.5
    before = opt.state_dict()["state"][0]["momentum_buffer"].cpu().numpy().copy()
    with pytest.raises(ValueError, match=r"^SGD.load_state_dict: state 'momentum_buffer' has shape \(5,\)"):
        opt.load_state_dict(sd)
    assert opt.param_groups[0]["lr"] == 0.1
    np.testing.assert_array_equal(opt.state_dict()["state"][0]["momentum_buffer"].cpu().numpy(), before)


def test_module_load_state_dict_wrong_shape_changes_nothing():
    m = nn.Linear(2, 3)
    w0, b0 = m.weight.detach().numpy().copy(), m.bias.detach().numpy().copy()
    sd = m.state_dict()
    sd["bias"] = lucid.zeros(3)
    sd["weight"] = lucid.ones(4, 4)
    with pytest.raises(RuntimeError, match=r"size mismatch for weight.*\(4, 4\).*\(3, 2\)"):
        m.load_state_dict(sd)
    np.testing.assert_array_equal(m.weight.detach().numpy(), w0)
    np.testing.assert_array_equal(m.bias.detach().numpy(), b0)


@pytest.mark.parametrize("graph", [False, True])
def test_failing_inplace_op_changes_nothing(graph):
    x = lucid.tensor([1.0, 2.0, 3.0], requires_grad=True) * 1.0 if graph else lucid.tensor([1.0, 2.0, 3.0])
    version, grad_fn = x._version[0], x.grad_fn
    with pytest.raises(RuntimeError, match=r"^mul_: .*\(3,\)"):
        x.mul_(lucid.ones(2, 3))
    with pytest.raises(RuntimeError, match=r"^add_: .*\(3,\)"):
        x.add_(lucid.ones(2))
    assert x.tolist() == [1.0, 2.0, 3.0]
    assert x._version[0] == version and x.grad_fn is grad_fn


def test_failing_inplace_cast_changes_nothing():
    x = lucid.tensor([1, 2, 3])
    with pytest.raises(RuntimeError,
                       match=r"^add_: result type .*float32 can.t be cast to the desired output type .*int64"):
        x.add_(1.5)
    assert x.tolist() == [1, 2, 3] and x._version[0] == 0


def test_failing_setitem_changes_nothing():
    x = lucid.tensor([1.0, 2.0, 3.0])
    with pytest.raises(RuntimeError, match=r"^setitem: "):
        x[0:2] = lucid.ones(3)
    assert x.tolist() == [1.0, 2.0, 3.0] and x._version[0] == 0
