"""Python ints outside int64's range raise in lucid.tensor, as PyTorch's, instead of wrapping."""
import pytest

import lucid


def test_python_ints_beyond_int64_raise_instead_of_wrapping():
    # NumPy infers uint64 (or object) for them; a silent cast to int64 made 2**63 negative
    for data in ([2**64 - 1], [2**63], [[1], [2**63]], [-2**63 - 1], [2**70]):
        with pytest.raises(ValueError, match="^tensor: Overflow when unpacking long long"):
            lucid.tensor(data)
    assert lucid.tensor([2**63 - 1]).tolist() == [2**63 - 1]
    assert lucid.tensor([2**64 - 1], dtype=lucid.uint64).tolist() == [2**64 - 1]
