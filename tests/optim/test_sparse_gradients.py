"""Sparse (COO) gradients in optimizers, as PyTorch: SGD, Adagrad, SparseAdam and LBFGS take
them; every other optimizer refuses them before changing any parameter or state."""
import numpy as np
import pytest

import lucid
from lucid._core.backend import host as _host_array


def host(v):  # optimizer state is Tensors (NOTE [Optimizer updates]), on the run's device
    return _host_array(v._data if isinstance(v, lucid.Tensor) else v)

ROWS = [[1.0, 2.0], [3.0, 4.0], [1.0, 1.0]]  # at rows 0, 2, 0 (uncoalesced: row 0 sums to [2, 3])


def _sparse_grad(lib=lucid):
    return lib.sparse_coo_tensor(lib.tensor([[0, 2, 0]]), lib.tensor(ROWS, dtype=lib.float64), (4, 2))


def _dense_grad():
    return np.array([[2.0, 3.0], [0.0, 0.0], [3.0, 4.0], [0.0, 0.0]])


def _two_steps(make, lib=lucid):
    p = lib.nn.Parameter(lib.ones(4, 2, dtype=lib.float64))
    opt = make(lib, [p])
    for _ in range(2):
        p.grad = _sparse_grad(lib)
        opt.step()
    return p.detach().numpy()


def test_sgd_momentum_with_a_sparse_gradient_is_the_dense_update():
    g = _dense_grad()
    got = _two_steps(lambda L, ps: L.optim.SGD(ps, lr=0.1, momentum=0.9))
    buf = g * 0.9 + g  # the buffer after the second step
    np.testing.assert_allclose(got, 1 - 0.1 * g - 0.1 * buf)


def test_adagrad_with_a_sparse_gradient_leaves_absent_rows_alone():
    g = _dense_grad()
    got = _two_steps(lambda L, ps: L.optim.Adagrad(ps, lr=0.1, initial_accumulator_value=0.5))
    s1 = 0.5 + g * g
    p1 = 1 - 0.1 * g / (np.sqrt(s1) + 1e-10)
    want = p1 - 0.1 * g / (np.sqrt(s1 + g * g) + 1e-10)
    np.testing.assert_allclose(got, want)
    assert (got[[1, 3]] == 1).all()


def test_sparse_adam_updates_exactly_the_entries_a_sparse_gradient_holds():
    p = lucid.nn.Parameter(lucid.ones(3, dtype=lucid.float64))
    opt = lucid.optim.SparseAdam([p], lr=0.1)
    p.grad = lucid.sparse_coo_tensor(lucid.tensor([[0, 1]]), lucid.tensor([2.0, 5.0], dtype=lucid.float64), (3,))
    opt.step()
    np.testing.assert_allclose(p.detach().numpy(), [0.9, 0.9, 1.0])
    # an entry present with the value 0 still decays its moments and moves (PyTorch's sparse_mask)
    p.grad = lucid.sparse_coo_tensor(lucid.tensor([[0]]), lucid.tensor([0.0], dtype=lucid.float64), (3,))
    opt.step()
    b1, b2 = 0.9, 0.999
    m, v = 0.1 * 2 * b1, 0.001 * 4 * b2
    step = 0.1 * np.sqrt(1 - b2 ** 2) / (1 - b1 ** 2)
    np.testing.assert_allclose(p.detach().numpy(), [0.9 - step * m / (np.sqrt(v) + 1e-8), 0.9, 1.0])
    np.testing.assert_allclose(host(opt.state[p]["exp_avg"]), [m, 0.1 * 5, 0.0])


def test_lbfgs_takes_a_sparse_gradient():
    p = lucid.nn.Parameter(lucid.ones(4, 2, dtype=lucid.float64))
    opt = lucid.optim.LBFGS([p], lr=0.1, max_iter=1)

    def closure():
        p.grad = _sparse_grad()
        return (p * 0).sum()

    opt.step(closure)
    np.testing.assert_allclose(p.detach().numpy(), 1 - 0.1 * _dense_grad() / np.abs(_dense_grad()).sum())


@pytest.mark.parametrize("name", ["Adam", "AdamW", "RMSprop", "Adadelta", "Adamax", "NAdam", "RAdam", "ASGD",
                                  "Rprop", "Adafactor"])
def test_other_optimizers_refuse_sparse_gradients_before_changing_anything(name):
    first = lucid.nn.Parameter(lucid.ones(3))
    second = lucid.nn.Parameter(lucid.ones(4, 2, dtype=lucid.float64))
    opt = getattr(lucid.optim, name)([first, second], lr=0.1)
    first.grad = lucid.ones(3)
    second.grad = _sparse_grad()
    with pytest.raises(RuntimeError, match=f"^{name}.step: {name} does not support sparse gradients"):
        opt.step()
    assert first.tolist() == [1.0, 1.0, 1.0] and len(opt.state) == 0


@pytest.mark.parametrize("name", ["SGD", "Adagrad"])
def test_weight_decay_with_sparse_gradients_is_refused(name):
    p = lucid.nn.Parameter(lucid.ones(4, 2, dtype=lucid.float64))
    opt = getattr(lucid.optim, name)([p], lr=0.1, weight_decay=0.1)
    p.grad = _sparse_grad()
    with pytest.raises(RuntimeError, match="weight_decay option is not compatible with sparse gradients"):
        opt.step()
    assert (p.detach().numpy() == 1).all()


@pytest.mark.parametrize("make", [
    lambda L, ps: L.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True),
    lambda L, ps: L.optim.SGD(ps, lr=0.1, maximize=True),
    lambda L, ps: L.optim.Adagrad(ps, lr=0.1, lr_decay=0.1),
    lambda L, ps: L.optim.Adagrad(ps, lr=0.1, maximize=True),
    lambda L, ps: L.optim.SparseAdam(ps, lr=0.1),
    lambda L, ps: L.optim.SparseAdam(ps, lr=0.1, maximize=True),
])
def test_sparse_steps_match_torch(make):
    torch = pytest.importorskip("torch")
    np.testing.assert_allclose(_two_steps(make), _two_steps(make, torch), rtol=1e-12)
