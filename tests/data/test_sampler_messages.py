"""Samplers refuse a zero sample count with PyTorch's wording, prefixed by the sampler's name."""
import pytest

from lucid.utils.data import RandomSampler, WeightedRandomSampler


def test_zero_samples_are_refused_with_pytorchs_wording():
    with pytest.raises(ValueError, match=r"^RandomSampler: num_samples should be a positive integer value, "
                                         r"but got num_samples=0$"):
        RandomSampler([])
    with pytest.raises(ValueError, match=r"^WeightedRandomSampler: num_samples should be a positive integer "
                                         r"value, but got num_samples=0$"):
        WeightedRandomSampler([1.0], 0)
