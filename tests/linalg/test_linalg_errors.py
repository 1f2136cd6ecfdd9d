"""lucid.linalg.LinAlgError: what singular and indefinite matrices raise (torch.linalg.LinAlgError)."""
import pytest

import lucid
from lucid.linalg import LinAlgError


def test_singular_and_indefinite_matrices_raise_linalg_error():
    assert issubclass(LinAlgError, RuntimeError) and LinAlgError.__module__ == "lucid.linalg"
    with pytest.raises(LinAlgError, match="linalg_inv: the input is singular"):
        lucid.linalg.inv(lucid.zeros(2, 2, device="cpu"))
    with pytest.raises(LinAlgError, match="not positive-definite"):
        lucid.linalg.cholesky(-lucid.eye(2, device="cpu"))
    with pytest.raises(LinAlgError, match="linalg.inv_ex: The diagonal element 2 is zero"):
        lucid.linalg.inv_ex(lucid.tensor([[1.0, 2.0], [2.0, 4.0]], device="cpu"), check_errors=True)
    with pytest.raises(RuntimeError, match="linalg_solve: the input is singular") as e:  # a RuntimeError too
        lucid.linalg.solve(lucid.zeros(2, 2, device="cpu"), lucid.ones(2, device="cpu"))
    assert e.type is LinAlgError



def test_cross_refuses_a_size_one_vector_dim():
    with pytest.raises(RuntimeError, match="linalg.cross: inputs dimension -1 must have length 3, got 1 and 3"):
        lucid.linalg.cross(lucid.ones(1), lucid.ones(3))
    assert lucid.linalg.cross(lucid.ones(2, 1, 3), lucid.ones(1, 4, 3)).shape == (2, 4, 3)  # batch dims broadcast
