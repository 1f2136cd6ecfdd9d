"""Sparse tensors on the strict stand-in device (CuPy's rules on the CPU): every component
stays on the values' device, products and gradients run there, and mixing devices fails."""
import numpy as np
import pytest

import lucid
from lucid.testing import strict_device

strict_device.enable()

IDX = [[0, 1, 1, 2], [1, 0, 2, 1]]
VAL = [1.0, -2.0, 3.0, 0.5]


@pytest.mark.parametrize("dev", ["strict:0", "strict:1"])
def test_construction_and_conversions_stay_on_the_device(dev):
    v = lucid.tensor(VAL, dtype=lucid.float64, device=dev)
    s = lucid.sparse_coo_tensor(lucid.tensor(IDX, device=dev), v)  # size inferred: an explicit read
    assert s.device == lucid.device(dev) and s._indices().device == s.device
    assert tuple(s.shape) == (3, 3)
    ref = np.zeros((3, 3))
    np.add.at(ref, tuple(np.array(IDX)), VAL)
    dense = s.to_dense()
    assert dense.device == s.device
    np.testing.assert_array_equal(dense.numpy(), ref)
    c = s.coalesce()
    assert c.indices().device == s.device
    back = dense.to_sparse()
    assert back.device == s.device and back._nnz() == 4
    csr = s.to_sparse_csr()
    assert csr.crow_indices().device == s.device
    np.testing.assert_array_equal(csr.to_dense().numpy(), ref)
    assert "device='" + str(s.device) + "'" in repr(s)


@pytest.mark.parametrize("dev", ["strict:0", "strict:1"])
def test_ops_and_gradients_on_the_device(dev):
    s = lucid.sparse_coo_tensor(lucid.tensor(IDX, device=dev), lucid.tensor(VAL, dtype=lucid.float64, device=dev),
                                (3, 3), requires_grad=True)
    d = lucid.tensor(np.arange(6.0).reshape(3, 2), device=dev, requires_grad=True)
    out = s @ d
    assert out.device == s.device
    lucid.sparse.sum(lucid.sparse.softmax(s, 1) * 2.0).backward()
    (out.sum() + (s.to_sparse_csr() @ d).sum()).backward()
    assert s.grad.device == s.device and d.grad.device == s.device
    np.testing.assert_allclose(d.grad.numpy(), 2 * np.array([[-2.0, -2.0], [1.5, 1.5], [3.0, 3.0]]))
    for r in (s + s, s * s, s * 3, lucid.sparse.sum(s, 0), s.t(), s.to(lucid.float32)):
        assert r.device == s.device
    moved = s.detach().to("cpu")
    assert moved.device == lucid.device("cpu") and moved._indices().device == lucid.device("cpu")


def test_mixing_devices_fails_naming_the_op():
    s = lucid.sparse_coo_tensor(lucid.tensor(IDX, device="strict"), lucid.tensor(VAL, device="strict"), (3, 3))
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        s @ lucid.ones(3, 2, device="cpu")
    with pytest.raises(RuntimeError, match="^sparse_coo_tensor: indices are on"):
        lucid.sparse_coo_tensor(lucid.tensor(IDX, device="cpu"), lucid.tensor(VAL, device="strict"))


def test_a_sparse_training_step_reads_nothing_back():
    s = lucid.sparse_coo_tensor(lucid.tensor(IDX, device="strict"), lucid.tensor(VAL, device="strict"), (3, 3))
    w = lucid.ones(3, 2, device="strict", requires_grad=True)
    reads = strict_device.HOST_READS[0]
    for _ in range(2):
        loss = lucid.sparse.mm(s, w).pow(2).mean()
        loss.backward()
        with lucid.no_grad():
            w -= 0.1 * w.grad
        w.grad = None
    assert strict_device.HOST_READS[0] == reads
