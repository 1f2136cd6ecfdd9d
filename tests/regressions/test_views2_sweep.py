"""Views and in-place changes, second sweep against PyTorch 2.13: outputs of multi-output view
functions (NOTE [Multi-output views], ops/shape/slicing.py) and hooks / retained gradients of a
view changed in place (NOTE [Changed views are fresh views], ops/inplace.py)."""
import numpy as np
import pytest

import lucid

MULTI = {
    "split": lambda x: x.split(1),
    "split_list": lambda x: x.split([1, 1]),
    "chunk": lambda x: x.chunk(2),
    "unbind": lambda x: x.unbind(0),
    "unbind_last": lambda x: x.unbind(-1),
    "split_with_sizes": lambda x: lucid.split_with_sizes(x, [1, 1]),
}
SLICED = {
    "tensor_split": lambda x: x.tensor_split(2),
    "tensor_split_idx": lambda x: lucid.tensor_split(x, [1]),
    "hsplit": lambda x: x.hsplit(3),
    "vsplit": lambda x: x.vsplit(2),
    "dsplit": lambda x: x.reshape(2, 3, 1).dsplit(1),
}


def _w():
    return lucid.tensor(np.arange(1.0, 7.0).reshape(2, 3), requires_grad=True)


@pytest.mark.parametrize("name", sorted(MULTI))
def test_inplace_on_multi_output_view_raises(name):
    x = _w() * 1
    out = MULTI[name](x)[0]
    with pytest.raises(RuntimeError, match="^mul_: output 0 of (split|split_with_sizes|unbind) "):
        out.mul_(2)
    with pytest.raises(RuntimeError, match="^add_: output 0 of"):  # a view of an output too
        out.reshape(-1)[:1].add_(1)
    assert x.tolist() == [[1, 2, 3], [4, 5, 6]]  # refused before writing


def test_multi_output_view_with_grad_operand_and_setitem_raise():
    a = lucid.ones(2, 3).split(1)[0]
    with pytest.raises(RuntimeError, match="^add_: output 0 of split"):
        a.add_(_w()[:1])
    with pytest.raises(RuntimeError, match="^setitem: output 1 of unbind"):
        (_w() * 1).unbind()[1][0] = 5.0


def test_multi_output_view_without_graph_is_changed():
    x = lucid.tensor(np.arange(6.0).reshape(2, 3))
    x.split(1)[1].mul_(2)  # nothing requires grad: an ordinary write through the view
    assert x.tolist() == [[0, 1, 2], [6, 8, 10]] and x._version[0] == 1
    y = _w() * 1
    with lucid.no_grad():
        y.unbind(1)[0].zero_()
    assert y.tolist() == [[0, 2, 3], [0, 5, 6]]


@pytest.mark.parametrize("name", sorted(SLICED))
def test_sliced_split_outputs_may_change_in_place(name):
    w = _w()
    x = w * 1
    out = SLICED[name](x)[0]
    out.mul_(3)
    (x * x).sum().backward()
    expect = 2 * np.arange(1.0, 7.0).reshape(2, 3)
    changed = np.array(x.tolist()) != np.arange(1.0, 7.0).reshape(2, 3)
    np.testing.assert_allclose(w.grad.numpy(), np.where(changed, 9 * expect, expect))


def test_base_changed_while_split_outputs_live():
    w = _w()
    x = w * 1
    a, b = x.split(1)
    x[1].add_(1)  # another view of the base changes
    with pytest.raises(RuntimeError, match="^backward: output 0 of split"):
        (a * a).sum().backward()
    w2 = _w()
    x2 = w2 * 1
    c = x2.chunk(2)[0]  # noqa: F841  (alive, unused: the base itself stays differentiable)
    x2.mul_(2)
    (x2 * x2).sum().backward()
    np.testing.assert_allclose(w2.grad.numpy(), 8 * np.arange(1.0, 7.0).reshape(2, 3))


def test_hook_on_view_does_not_see_its_own_inplace_change():
    w = _w()
    x = w * 1
    v = x[0]
    seen = []
    v.register_hook(lambda g: seen.append(g.tolist()))
    v.mul_(3)
    (x * x).sum().backward()
    assert seen == []  # PyTorch: the change goes through the base, not the view's old node
    np.testing.assert_allclose(w.grad.numpy(), [[18, 36, 54], [8, 10, 12]])


def test_hook_on_view_sees_other_uses_of_old_value():
    w = _w()
    x = w * 1
    v = x[0]
    seen = []
    v.register_hook(lambda g: seen.append(g.tolist()))
    y = v.sum() * 5
    v.mul_(3)
    (y + x.sum()).backward()
    assert seen == [[5.0, 5.0, 5.0]]
    np.testing.assert_allclose(w.grad.numpy(), [[8, 8, 8], [1, 1, 1]])


def test_retained_grad_of_view_changed_in_place():
    x = _w() * 1
    v = x[0]
    v.retain_grad()
    v.mul_(3)
    (x * x).sum().backward()
    assert v.grad is None  # the view's new node is a view of the new base, not on this path
    x = _w() * 1
    v = x[0]
    v.retain_grad()
    v.mul_(3)
    (v * v).sum().backward()
    np.testing.assert_allclose(v.grad.numpy(), [6, 12, 18])


def test_chained_view_changed_in_place_gradient():
    w = _w()
    x = w * 1
    v = x[:, 1:].t()[1]  # column 2 through two views
    v.mul_(lucid.tensor([2.0, 3.0], dtype=lucid.float64))
    v.retain_grad()
    (x * x).sum().backward()
    np.testing.assert_allclose(x.tolist(), [[1, 2, 6], [4, 5, 18]])
    np.testing.assert_allclose(w.grad.numpy(), [[2, 4, 24], [8, 10, 108]])
    assert v.grad is None
    assert v.grad_fn is not None and v._version is x._version


# ---------------------------------------------------------------- options and shapes of views

ERRORS = [  # (call, PyTorch's exception type)
    (lambda: lucid.zeros(1, 3, 1).squeeze((0, -3)), RuntimeError),  # a dim named twice
    (lambda: lucid.tensor(3.0).squeeze((0, -1)), RuntimeError),
    (lambda: lucid.tensor(3.0).squeeze(1), IndexError),  # a 0-d tensor has dims 0 / -1 only
    (lambda: lucid.tensor(3.0).transpose(0, 1), IndexError),
    (lambda: lucid.tensor(3.0).flatten(1), IndexError),
    (lambda: lucid.tensor(3.0).movedim(0, 1), IndexError),
    (lambda: lucid.tensor(3.0).unflatten(0, (1,)), RuntimeError),
    (lambda: lucid.tensor(3.0).unbind(), IndexError),
    (lambda: lucid.zeros(2, 3).permute(), TypeError),
    (lambda: lucid.zeros(1, 3, 1).movedim((0, 1), (2, 2)), RuntimeError),  # was a silent wrong order
    (lambda: lucid.zeros(1, 3, 1).movedim((0, 0), (1, 2)), RuntimeError),
    (lambda: lucid.zeros(1, 3, 1).movedim((0, 1), (1,)), RuntimeError),
    (lambda: lucid.zeros(3).mT, RuntimeError),
]


@pytest.mark.parametrize("i", range(len(ERRORS)))
def test_view_option_errors(i):
    call, kind = ERRORS[i]
    with pytest.raises(kind, match=r"^(squeeze|transpose|flatten|moveaxis|movedim|unflatten|unbind|permute|mT): "):
        call()


def test_zero_d_views_pytorch_allows():
    s = lucid.tensor(3.0, requires_grad=True)
    for y in (s.movedim(0, -1), s.movedim((0,), (0,)), s.transpose(0, -1), s.squeeze((0,)), s.mT,
              s.flatten(-1), s.adjoint()):
        assert y.shape in ((), (1,)) and y.item() == 3.0
    assert lucid.tensor(1 + 2j).adjoint().item() == 1 - 2j
    s.movedim(0, -1).backward()
    assert s.grad.item() == 1.0


def test_view_options_match_torch():
    torch = pytest.importorskip("torch")
    import warnings

    cases = [lambda m: m.zeros(1, 3, 1).squeeze((0, 2)), lambda m: m.tensor(2.0).mT,
             lambda m: m.zeros(2, 3, 4).movedim((0, 2), (2, 0)), lambda m: m.tensor(2.0).squeeze(-1)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for case in cases:
            assert tuple(case(lucid).shape) == tuple(case(torch).shape)


def test_multi_output_views_under_transforms():
    from lucid.func import grad, jvp, vmap

    x = lucid.tensor(np.arange(1.0, 9.0).reshape(2, 4))

    def change(y, piece):
        piece.mul_(2)
        return y

    with pytest.raises(RuntimeError, match="^mul_: output 0 of split"):  # as torch.func.grad
        grad(lambda r: change(r * 1, (r * 1).split(2)[0]).sum())(x[0])
    # vmap and jvp allow it (as torch.func), and tensor_split's pieces are slices under grad too
    np.testing.assert_allclose(vmap(lambda r: change(r, r.split(2)[0]))(x.clone()).tolist(),
                               [[2, 4, 3, 4], [10, 12, 7, 8]])
    out, tangent = jvp(lambda r: (lambda y: change(y, y.split(2)[0]))(r * 1), (x[0],), (lucid.ones(4),))
    assert out.tolist() == [2, 4, 3, 4] and tangent.tolist() == [2, 2, 1, 1]
    g = grad(lambda r: (lambda y: change(y, y.tensor_split(2)[0]).sum())(r * 1))(x[0])
    assert g.tolist() == [2, 2, 1, 1]
