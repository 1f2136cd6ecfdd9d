"""lucid.nn.attention: sdpa_kernel restricts scaled_dot_product_attention's backends."""
import numpy as np
import pytest

import lucid
import lucid.nn.functional as F
from lucid.nn.attention import SDPBackend, can_use_efficient_attention, can_use_flash_attention, sdpa_kernel


def test_math_backend_runs_and_others_raise():
    q = lucid.randn(1, 2, 3, 4)
    expected = F.scaled_dot_product_attention(q, q, q)
    with sdpa_kernel([SDPBackend.MATH, SDPBackend.FLASH_ATTENTION]):
        np.testing.assert_array_equal(F.scaled_dot_product_attention(q, q, q).numpy(), expected.numpy())
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        with pytest.raises(RuntimeError, match="no available kernel: sdpa_kernel allows FLASH_ATTENTION"):
            F.scaled_dot_product_attention(q, q, q)
        with sdpa_kernel(SDPBackend.MATH):  # nested regions restore the outer choice
            F.scaled_dot_product_attention(q, q, q)
        with pytest.raises(RuntimeError, match="no available kernel"):
            F.scaled_dot_product_attention(q, q, q)
    with pytest.raises(RuntimeError, match="no available kernel"):
        with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]):
            F.scaled_dot_product_attention(q, q, q)
    F.scaled_dot_product_attention(q, q, q)  # restored after an error too


def test_bad_backends_and_fused_checks():
    with pytest.raises(TypeError, match="sdpa_kernel: expected SDPBackend values"):
        with sdpa_kernel(["math"]):
            pass
    assert can_use_flash_attention() is False and can_use_efficient_attention() is False
    assert int(SDPBackend.MATH) == 0 and int(SDPBackend.CUDNN_ATTENTION) == 3
