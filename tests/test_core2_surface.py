"""PyTorch surface found missing or wrong by the subclass and storage work: ``is_storage``,
``Tensor.numpy(force=True)`` on a device, the legacy ``autograd.NestedIOFunction`` and
``optim.swap_in_optimizer_params_and_state`` (NOTE [Swapped-in optimizer state])."""
import warnings

import numpy as np
import pytest

import lucid
from lucid.testing import strict_device


# ------------------------------------------------------------------ is_storage

def test_is_storage():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # TypedStorage's deprecation warning
        typed = lucid.FloatStorage(1)
        legacy_view = lucid.zeros(2).storage()
    assert lucid.is_storage(typed) and lucid.is_storage(legacy_view)
    assert lucid.is_storage(lucid.zeros(2).untyped_storage()) and lucid.is_storage(lucid.UntypedStorage(3))
    assert not lucid.is_storage(lucid.zeros(2)) and not lucid.is_storage(np.zeros(2)) and not lucid.is_storage(None)


def test_is_storage_matches_pytorch():
    torch = pytest.importorskip("torch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert lucid.is_storage(lucid.FloatStorage(1)) == torch.is_storage(torch.FloatStorage(1))


# ------------------------------------------------------------------ numpy(force=True)

def test_numpy_force_copies_a_device_tensor_to_the_host():
    strict_device.enable()
    t = lucid.tensor([1.0, 2.0], device="strict:1", requires_grad=True)
    host = t.numpy(force=True)
    assert type(host) is np.ndarray and host.flags.writeable and host.tolist() == [1.0, 2.0]
    host[0] = 9.0  # a copy, as PyTorch's t.detach().cpu().numpy(): the device tensor keeps its values
    assert t.tolist() == [1.0, 2.0]
    with strict_device.user_host_rules("strict"):  # what a CUDA user sees (CuPy refuses)
        with pytest.raises(TypeError, match=r"can't convert strict:1 device type tensor to numpy\. Use Tensor\.cpu"):
            t.detach().numpy()
        with pytest.raises(TypeError, match="Use Tensor.cpu"):
            np.asarray(t.detach())
        assert t.numpy(force=True).tolist() == [1.0, 2.0]


def test_numpy_force_on_the_cpu_shares_memory():
    t = lucid.tensor([1.0, 2.0], device="cpu", requires_grad=True)
    assert not t.numpy().flags.writeable  # Lucid's read-only view (README: Differences)
    shared = t.numpy(force=True)
    shared[0] = 5.0  # PyTorch: force=True on the CPU is t.detach().numpy(), the same memory
    assert t.tolist() == [5.0, 2.0]


# ------------------------------------------------------------------ NestedIOFunction

def _mul_add_pair():
    """A NestedIOFunction: (a, (b, c)) -> [a * b, b + c]; saves a nest."""

    class MulAddPair(lucid.autograd.NestedIOFunction):
        def forward_extended(self, a, bc):
            b, c = bc
            self.save_for_backward(a, (b,))
            return [a * b, b + c]

        def backward_extended(self, g_prod, g_sum):
            a, (b,) = self.saved_tensors
            return g_prod * b, (g_prod * a + g_sum, g_sum)

    return MulAddPair()


def test_nested_io_function_gradients():
    rng = np.random.default_rng(0)
    a, b, c = (lucid.tensor(rng.normal(size=3), requires_grad=True) for _ in range(3))
    prod, total = _mul_add_pair()(a, (b, c))
    np.testing.assert_allclose(prod.detach().numpy(), a.detach().numpy() * b.detach().numpy())
    np.testing.assert_allclose(total.detach().numpy(), b.detach().numpy() + c.detach().numpy())
    (2 * prod + 3 * total).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), 2 * b.detach().numpy())
    np.testing.assert_allclose(b.grad.numpy(), 2 * a.detach().numpy() + 3)
    np.testing.assert_allclose(c.grad.numpy(), np.full(3, 3.0))


def test_nested_io_function_checks_saved_versions_and_inputs():
    a = lucid.tensor([1.0, 2.0], requires_grad=True)
    b = lucid.tensor([3.0, 4.0], requires_grad=True)
    c = lucid.tensor([0.0, 0.0])
    prod, _ = _mul_add_pair()(a, (b, c))
    with lucid.no_grad():
        b.detach().add_(1.0)  # the saved b changed in place
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        prod.sum().backward()
    with pytest.raises(ValueError, match="doesn't know how to process an input object of type str"):
        _mul_add_pair()(a, (b, "c"))
    assert "NestedIOFunction" in lucid.autograd.__all__


# ------------------------------------------------------------------ swap_in_optimizer_params_and_state

def _trained_adam():
    w = lucid.tensor([1.0, -2.0], dtype=lucid.float64, requires_grad=True)
    v = lucid.tensor([0.5], dtype=lucid.float64, requires_grad=True)
    opt = lucid.optim.Adam([{"params": [w]}, {"params": [v], "lr": 0.2}], lr=0.1)
    ((w * w).sum() + (v * v * v).sum()).backward()
    opt.step()
    return w, v, opt


def test_swap_in_steps_the_given_tensors_and_state_then_restores():
    w, v, opt = _trained_adam()
    w_before, v_before = w.tolist(), v.tolist()
    groups_before = [dict(g) for g in opt.param_groups]
    params_list = opt.param_groups[0]["params"]
    live_state = opt.state
    saved = opt.state_dict()
    saved["param_groups"][0]["lr"] = 0.5  # the swapped-in options apply inside
    w2 = lucid.tensor([3.0, 4.0], dtype=lucid.float64)
    v2 = lucid.tensor([1.0], dtype=lucid.float64)
    w2.grad = lucid.tensor([1.0, -1.0], dtype=lucid.float64)
    v2.grad = lucid.tensor([2.0], dtype=lucid.float64)
    m_before = saved["state"][0]["exp_avg"].numpy().copy()
    with lucid.optim.swap_in_optimizer_params_and_state(opt, {"w": w2, "v": v2}, saved):
        assert opt.param_groups[0]["params"] == [w2] and opt.param_groups[0]["lr"] == 0.5
        opt.step()
    # Adam's second step by hand from the saved moments (step count 2); the caller's state
    # Tensors were updated in place
    m2 = 0.9 * m_before + 0.1 * np.array([1.0, -1.0])
    np.testing.assert_allclose(saved["state"][0]["exp_avg"].numpy(), m2, rtol=1e-12)
    s1 = 0.001 * np.array([2.0, -4.0]) ** 2  # the first step's second moment (gradient 2w)
    s2 = 0.999 * s1 + 0.001 * np.array([1.0, -1.0]) ** 2
    np.testing.assert_allclose(saved["state"][0]["exp_avg_sq"].numpy(), s2, rtol=1e-12)
    expect = np.array([3.0, 4.0]) - 0.5 / (1 - 0.9 ** 2) * m2 / (np.sqrt(s2) / np.sqrt(1 - 0.999 ** 2) + 1e-8)
    np.testing.assert_allclose(w2.numpy(), expect, rtol=1e-12)
    assert v2.tolist() != [1.0]  # the second group stepped too, with its own lr
    assert w.tolist() == w_before and v.tolist() == v_before  # the live parameters were not touched
    assert opt.state is live_state and opt.param_groups[0]["params"] is params_list
    assert [dict(g) for g in opt.param_groups] == groups_before


def test_swap_in_refuses_bad_arguments_and_changes_nothing():
    w, v, opt = _trained_adam()
    saved = opt.state_dict()
    swap = lucid.optim.swap_in_optimizer_params_and_state
    fresh = lucid.optim.SGD([lucid.zeros(1, requires_grad=True)], lr=0.1)
    with pytest.raises(RuntimeError, match="requires initialized optimizer state"):
        with swap(fresh, {}, fresh.state_dict()):
            pass
    bad_keys = {"state": saved["state"], "param_groups": [dict(saved["param_groups"][0], extra=1),
                                                         saved["param_groups"][1]]}
    with pytest.raises(RuntimeError, match=r"Keys only in swap-in: \['extra'\]"):
        with swap(opt, {"w": w, "v": v}, bad_keys):
            pass
    with pytest.raises(RuntimeError, match="different number of parameter groups"):
        with swap(opt, {"w": w}, {"state": saved["state"], "param_groups": saved["param_groups"][:1]}):
            pass
    with pytest.raises(RuntimeError, match="match optimizer.param_groups ordering"):
        with swap(opt, {"w": w}, saved):
            pass
    with pytest.raises(RuntimeError, match="extra keys \\[7\\]"):
        with swap(opt, {"w": w, "v": v}, {"state": {**saved["state"], 7: {}}, "param_groups": saved["param_groups"]}):
            pass
    assert opt.param_groups[0]["params"] == [w] and opt.param_groups[1]["params"] == [v]


def test_swap_in_restores_after_an_error_inside():
    w, v, opt = _trained_adam()
    saved = opt.state_dict()
    live_state = opt.state
    with pytest.raises(KeyError):
        with lucid.optim.swap_in_optimizer_params_and_state(opt, {"w": w.detach(), "v": v.detach()}, saved):
            raise KeyError("inside")
    assert opt.state is live_state and opt.param_groups[0]["params"] == [w]


def test_numpy_on_cuda_as_pytorch():
    pytest.importorskip("cupy")
    if not lucid.cuda.is_available():
        pytest.skip("no CUDA device")
    t = lucid.tensor([1.0, 2.0], device="cuda", requires_grad=True)
    with strict_device.user_host_rules("cuda"):  # a CUDA test run lets test code read values back
        with pytest.raises(TypeError, match=r"can't convert cuda:0 device type tensor to numpy\. Use Tensor\.cpu"):
            t.detach().numpy()
        host = t.numpy(force=True)
    assert type(host) is np.ndarray and host.flags.writeable and host.tolist() == [1.0, 2.0]
    host[0] = 9.0
    assert t.tolist() == [1.0, 2.0]
