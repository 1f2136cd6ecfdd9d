"""Regressions from a differential sweep of ``lucid.nn.utils`` (prune, parametrize,
parametrizations, legacy weight/spectral norm, fusion, convert_parameters) against PyTorch 2.13.

Each test pins a behaviour where Lucid used to differ (a wrong value, a silently accepted bad
argument, another exception type); the optional parity tests skip cleanly without torch.
"""
import numpy as np
import pytest

import lucid
import lucid.nn as nn
from lucid.nn.utils import parametrize, prune
from lucid.nn.utils.fusion import fuse_linear_bn_eval, fuse_linear_bn_weights
from lucid.nn.utils.parametrizations import orthogonal, spectral_norm, weight_norm


def _npy(t):
    return np.asarray(t.detach().cpu().numpy())


class _Holder(nn.Module):
    def __init__(self, value):
        super().__init__()
        self.weight = nn.Parameter(lucid.tensor(value))


def _complex(shape, seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


# ------------------------------------------------------------------ complex weights
def test_spectral_norm_of_a_complex_weight_is_one():
    w = _complex((3, 4), 0)
    m = spectral_norm(_Holder(w), n_power_iterations=30)  # u^H W v with W^H in the power method
    got = _npy(m.weight)
    np.testing.assert_allclose(np.linalg.svd(got, compute_uv=False)[0], 1.0, rtol=1e-8)
    np.testing.assert_allclose(got, w / np.linalg.svd(w, compute_uv=False)[0], rtol=1e-8)


@pytest.mark.parametrize("omap", ["matrix_exp", "cayley"])
@pytest.mark.parametrize("shape", [(3, 3), (4, 2), (2, 4)])
@pytest.mark.parametrize("triv", [True, False])
def test_orthogonal_of_a_complex_weight_is_unitary(omap, shape, triv):
    m = orthogonal(_Holder(_complex(shape, 1)), orthogonal_map=omap, use_trivialization=triv)
    with lucid.no_grad():  # a non-trivial point of the map: A = X - X^H must be skew-Hermitian
        m.parametrizations.weight.original.copy_(lucid.tensor(_complex(shape, 2)))
    q = _npy(m.weight)
    gram = q.conj().T @ q if shape[0] >= shape[1] else q @ q.conj().T
    np.testing.assert_allclose(gram, np.eye(min(shape)), atol=1e-10)


# ------------------------------------------------------------------ weight_norm dims
@pytest.mark.parametrize("dim", [2, -3, 5])
def test_weight_norm_refuses_a_dim_out_of_range(dim):
    with pytest.raises(IndexError, match="Dimension out of range"):
        weight_norm(nn.Linear(3, 2), dim=dim)
    lin = nn.Linear(3, 2)
    with pytest.raises(IndexError, match="Dimension out of range"):
        nn.utils.weight_norm(lin, dim=dim)
    assert sorted(n for n, _ in lin.named_parameters()) == ["bias", "weight"]  # left as it was


def test_weight_norm_dim_minus_two_is_the_first_dim():
    lin = nn.Linear(3, 2).double()
    w = _npy(lin.weight)
    weight_norm(lin, dim=-2)
    np.testing.assert_allclose(_npy(lin.parametrizations.weight.original0),
                               np.linalg.norm(w, axis=1, keepdims=True), rtol=1e-12)


# ------------------------------------------------------------------ parametrize
class _Flat(nn.Module):
    def forward(self, x):
        return x.reshape(4, 4)

    def right_inverse(self, x):
        return x.reshape(-1)


class _Half(nn.Module):
    def forward(self, x):
        return x * 2

    def right_inverse(self, x):
        return x / 2


class _ToDouble(nn.Module):
    def forward(self, x):
        return x * 3

    def right_inverse(self, x):
        return x.double()


def test_right_inverse_may_change_the_stored_shape():
    lin = nn.Linear(4, 4)
    w = _npy(lin.weight)
    parametrize.register_parametrization(lin, "weight", _Flat())  # safe: the weight keeps its shape
    assert tuple(lin.parametrizations.weight.original.shape) == (16,)
    np.testing.assert_array_equal(_npy(lin.weight), w)


@pytest.mark.parametrize("unsafe", [False, True])
def test_right_inverse_may_not_change_the_dtype_of_one_tensor(unsafe):
    lin = nn.Linear(3, 2)
    with pytest.raises(ValueError, match="may not change the dtype"):
        parametrize.register_parametrization(lin, "weight", _ToDouble(), unsafe=unsafe)


def test_assignment_checks_dtype_and_does_not_broadcast():
    lin = parametrize.register_parametrization(nn.Linear(4, 4), "weight", _Half())
    with pytest.raises(ValueError, match="dtype"), lucid.no_grad():
        lin.weight = lucid.zeros(4, 4, dtype=lucid.float64)
    with lucid.no_grad():  # PyTorch's set_: the original takes the new shape (4,), not a broadcast
        lin.weight = lucid.tensor([2.0, 4.0, 6.0, 8.0])
    np.testing.assert_array_equal(_npy(lin.parametrizations.weight.original), [1.0, 2.0, 3.0, 4.0])
    np.testing.assert_array_equal(_npy(lin.weight), [2.0, 4.0, 6.0, 8.0])


# ------------------------------------------------------------------ fusion
def test_fuse_linear_bn_weights_keeps_the_linear_dtypes():
    w, b = fuse_linear_bn_weights(lucid.ones(2, 3), lucid.ones(2), lucid.zeros(2, dtype=lucid.float64),
                                  lucid.full((2,), 3.0, dtype=lucid.float64), 1.0,
                                  lucid.full((2,), 2.0, dtype=lucid.float64), lucid.ones(2, dtype=lucid.float64))
    assert w.dtype == lucid.float32 and b.dtype == lucid.float32
    np.testing.assert_allclose(_npy(w), np.ones((2, 3)))  # 2 / sqrt(3 + 1)
    np.testing.assert_allclose(_npy(b), [2.0, 2.0])


def test_fuse_linear_bn_eval_needs_running_stats():
    lin, bn = nn.Linear(3, 2).eval(), nn.BatchNorm1d(2, track_running_stats=False).eval()
    with pytest.raises(AssertionError, match="running"):
        fuse_linear_bn_eval(lin, bn)


# ------------------------------------------------------------------ convert_parameters
def test_parameters_to_vector_errors():
    with pytest.raises(ValueError, match="non-empty"):
        nn.utils.parameters_to_vector([])
    with pytest.raises(RuntimeError):  # the old type still works
        nn.utils.parameters_to_vector([])


def test_parameters_on_two_devices_are_refused():
    from lucid.testing import strict_device

    strict_device.enable()
    a, b = lucid.ones(2, device="cpu"), lucid.ones(2, device="strict:0")
    with pytest.raises(TypeError, match="parameters_to_vector: found two parameters on different devices"):
        nn.utils.parameters_to_vector([a, b])
    with pytest.raises(TypeError, match="vector_to_parameters: found two parameters on different devices"):
        nn.utils.vector_to_parameters(lucid.zeros(4, device="cpu"), [a, b])
    np.testing.assert_array_equal(_npy(a), [1.0, 1.0])  # nothing copied


# ------------------------------------------------------------------ clip_grad
def test_clip_grad_value_of_complex_gradients_raises_not_implemented():
    p = lucid.zeros(2, dtype=lucid.complex64, requires_grad=True)
    p.grad = lucid.tensor([3 + 4j, 1j], dtype=lucid.complex64)
    with pytest.raises(NotImplementedError, match="clip_grad_value_: complex"):
        nn.utils.clip_grad_value_([p], 1.0)
    np.testing.assert_array_equal(_npy(p.grad), [3 + 4j, 1j])  # unchanged


@pytest.mark.parametrize("dtype", [lucid.int64, lucid.bool])
def test_get_total_norm_refuses_integer_tensors(dtype):
    with pytest.raises(RuntimeError, match="get_total_norm: expected floating point"):
        nn.utils.get_total_norm([lucid.ones(3), lucid.ones(2, dtype=dtype)])


# ------------------------------------------------------------------ prune
def test_ln_structured_checks_the_norm_even_for_amount_zero():
    with pytest.raises(RuntimeError):  # PyTorch computes the norms first: 'nuc' needs two dims
        prune.ln_structured(nn.Linear(3, 2), "weight", amount=0, n="nuc", dim=0)


def test_pruning_container_from_a_sequence_takes_the_methods_tensor_name():
    a, b = prune.L1Unstructured(1), prune.L1Unstructured(2)
    a._tensor_name = b._tensor_name = "weight"
    container = prune.PruningContainer((a, b))
    assert container._tensor_name == "weight" and list(container) == [a, b]
    other = prune.L1Unstructured(1)
    other._tensor_name = "bias"
    with pytest.raises(ValueError, match="acting on the parameter named 'weight'"):
        container.add_pruning_method(other)


# ------------------------------------------------------------------ PyTorch parity (optional)
def _pair(shape_in=5, shape_out=4):
    torch = pytest.importorskip("torch")
    tm = torch.nn.Linear(shape_in, shape_out).double()
    lm = nn.Linear(shape_in, shape_out).double()
    with lucid.no_grad():
        lm.weight.copy_(lucid.tensor(tm.weight.detach().numpy()))
        lm.bias.copy_(lucid.tensor(tm.bias.detach().numpy()))
    return torch, tm, lm


@pytest.mark.parametrize("steps", [[("l1", 3)], [("l1", 0.3), ("ln", 1, 2, 0)], [("ln", 2, float("inf"), -1), ("l1", 4)],
                                   [("ln", 1, 1, 1), ("ln", 1, 2, 0), ("l1", 0.5)]])
def test_prune_masks_match_torch(steps):
    torch, tm, lm = _pair()
    import torch.nn.utils.prune as tp
    for s in steps:
        if s[0] == "l1":
            tp.l1_unstructured(tm, "weight", s[1])
            prune.l1_unstructured(lm, "weight", s[1])
        else:
            tp.ln_structured(tm, "weight", *s[1:])
            prune.ln_structured(lm, "weight", *s[1:])
    assert list(lm.state_dict()) == list(tm.state_dict())
    np.testing.assert_array_equal(_npy(lm.weight_mask), tm.weight_mask.numpy())
    x = np.random.default_rng(0).standard_normal((2, 5))
    np.testing.assert_allclose(_npy(lm(lucid.tensor(x))), tm(torch.tensor(x)).detach().numpy(), rtol=1e-12)


@pytest.mark.parametrize("dim", [None, 0, 1, -1, -2])
def test_weight_norm_matches_torch_after_steps(dim):
    torch, tm, lm = _pair()
    import torch.nn.utils.parametrizations as tz

    tz.weight_norm(tm, dim=dim)
    weight_norm(lm, dim=dim)
    assert list(lm.state_dict()) == list(tm.state_dict())
    to, lo = torch.optim.SGD(tm.parameters(), lr=0.1), lucid.optim.SGD(lm.parameters(), lr=0.1)
    x = np.random.default_rng(1).standard_normal((3, 5))
    for _ in range(2):
        tm(torch.tensor(x)).square().sum().backward()
        lm(lucid.tensor(x)).square().sum().backward()
        to.step()
        lo.step()
        to.zero_grad()
        lo.zero_grad()
    np.testing.assert_allclose(_npy(lm.weight), tm.weight.detach().numpy(), rtol=1e-10)
