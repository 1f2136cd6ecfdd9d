"""Each test starts as a program that imported lucid.masked does: with the __torch_function__
dispatchers on (defining MaskedTensor switched them on; tests/conftest.py turns them off after
every test, and ``lucid.mean(masked_tensor(...))`` reads ``lucid.mean`` before the argument
is made)."""
import pytest

from lucid import overrides


@pytest.fixture(autouse=True)
def _dispatchers_on():
    overrides._activate()
    yield
