"""A view op whose arguments change nothing (``x[:]``, ``x.view(x.shape)``, ``x.permute(0, 1)``,
``x.squeeze()`` without size-1 dims...) returns a new view, as PyTorch does, not ``x`` itself.

Returning ``x`` was a wrong answer: a hook on the "view" also saw every other use of ``x``, and
``requires_grad_`` on it changed ``x``.
"""
import numpy as np
import pytest

import lucid

IDENTITY_VIEWS = {
    "slice": lambda t: t[:],
    "ellipsis": lambda t: t[...],
    "all_slices": lambda t: t[:, :],
    "reshape": lambda t: t.reshape(2, 3),
    "view": lambda t: t.view(2, 3),
    "view_as": lambda t: t.view_as(t),
    "reshape_as": lambda t: t.reshape_as(t),
    "permute": lambda t: t.permute(0, 1),
    "swapaxes": lambda t: t.swapaxes(1, 1),
    "movedim": lambda t: t.movedim(0, 0),
    "expand": lambda t: t.expand(2, 3),
    "expand_as": lambda t: t.expand_as(t),
    "broadcast_to": lambda t: lucid.broadcast_to(t, (2, 3)),
    "squeeze": lambda t: t.squeeze(),
    "squeeze_dim": lambda t: t.squeeze(0),
    "unflatten": lambda t: t.unflatten(1, (3,)),
}


@pytest.mark.parametrize("name", sorted(IDENTITY_VIEWS))
def test_identity_view_is_a_new_view_with_its_own_hook(name):
    make = IDENTITY_VIEWS[name]
    x = lucid.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    y = make(x)
    assert y is not x and not y.is_leaf and y.grad_fn is not None
    y.register_hook(lambda g: g * 10)
    (y.sum() + (x * x).sum()).backward()
    # the hook scales only the gradient that flows through the view: 10 + 2x, not 10 * (1 + 2x)
    np.testing.assert_allclose(x.grad.numpy(), 10 + 2 * np.arange(6.0).reshape(2, 3))


@pytest.mark.parametrize("name", sorted(IDENTITY_VIEWS))
def test_identity_view_shares_memory_and_flags_stay_apart(name):
    x = lucid.zeros(2, 3)
    y = IDENTITY_VIEWS[name](x)
    if name not in ("expand", "expand_as", "broadcast_to"):  # expanded views are read-only
        y.add_(1)
        np.testing.assert_array_equal(x.numpy(), np.ones((2, 3)))
    y.requires_grad_()
    assert y.requires_grad and not x.requires_grad


def test_zero_d_transpose_t_and_one_d_t_are_new_views():
    z = lucid.tensor(2.0, requires_grad=True)
    for make in (lambda t: t.t(), lambda t: t.transpose(0, 0)):
        y = make(z)
        assert y is not z and y.grad_fn is not None
    v = lucid.ones(3)
    assert v.t() is not v and v.flatten() is not v


def test_copies_that_changed_nothing_are_still_copies():
    x = lucid.tensor([1.0, 2.0, 3.0])
    d = lucid.diff(x, n=0)
    d[0] = 9.0
    assert x.tolist() == [1.0, 2.0, 3.0]
    z = lucid.tensor(4.0)
    g = lucid.gather(z, 0, lucid.tensor(0))
    g.fill_(0.0)
    assert z.item() == 4.0


def test_ops_pytorch_returns_unchanged_still_return_the_tensor():
    x = lucid.ones(2, 3)
    assert x.contiguous() is x and x.flatten(1, 1) is x and x.float() is x


def test_in_place_through_identity_view_of_a_leaf_is_refused():
    x = lucid.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="view of a leaf"):
        x[:].add_(1)

