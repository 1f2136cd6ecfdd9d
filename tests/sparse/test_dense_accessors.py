"""A dense tensor's sparse accessors answer as PyTorch's (``sparse_dim`` 0, ``dense_dim`` ndim, the
layout-specific parts refuse naming the layout), while sparse tensors keep their own."""
import pytest

import lucid

_REFUSE = [("indices", "sparse coordinate"), ("values", "sparse"), ("coalesce", "sparse coordinate"),
           ("is_coalesced", "sparse coordinate"), ("crow_indices", "sparse row compressed"),
           ("col_indices", "sparse row compressed"), ("ccol_indices", "sparse column compressed"),
           ("row_indices", "sparse column compressed")]


def test_dense_tensor_has_no_sparse_dims():
    t = lucid.ones(2, 3, 4)
    assert (t.sparse_dim(), t.dense_dim()) == (0, 3)
    assert (lucid.tensor(1.0).sparse_dim(), lucid.tensor(1.0).dense_dim()) == (0, 0)


@pytest.mark.parametrize("name,layout", _REFUSE)
def test_dense_tensor_refuses_sparse_parts(name, layout):
    with pytest.raises(RuntimeError, match=f"^{name} expected {layout} tensor layout but got Strided$"):
        getattr(lucid.ones(2, 3), name)()


def test_sparse_tensors_keep_their_accessors():
    dense = lucid.tensor([[0.0, 2.0, 0.0], [3.0, 0.0, 4.0]])
    coo = dense.to_sparse()
    assert coo.indices().tolist() == [[0, 1, 1], [1, 0, 2]] and coo.values().tolist() == [2.0, 3.0, 4.0]
    assert (coo.sparse_dim(), coo.dense_dim()) == (2, 0)
    with pytest.raises(RuntimeError, match="crow_indices expected sparse row compressed tensor layout but got Sparse"):
        coo.crow_indices()
    csr = dense.to_sparse_csr()
    assert csr.crow_indices().tolist() == [0, 1, 3] and csr.col_indices().tolist() == [1, 0, 2]


def test_messages_match_torch():
    torch = pytest.importorskip("torch")
    for name, _ in _REFUSE:
        with pytest.raises(RuntimeError) as theirs:
            getattr(torch.ones(2, 3), name)()
        with pytest.raises(RuntimeError) as ours:
            getattr(lucid.ones(2, 3), name)()
        assert str(ours.value) == str(theirs.value)
    assert (torch.ones(2, 3).sparse_dim(), torch.ones(2, 3).dense_dim()) == (lucid.ones(2, 3).sparse_dim(),
                                                                           lucid.ones(2, 3).dense_dim())
