"""The legacy ``size_average``/``reduce`` arguments warn naming the reduction they mean, as PyTorch."""
import pytest

import lucid
import lucid.nn.functional as F


@pytest.mark.parametrize("size_average,reduce,reduction,value", [
    (False, None, "sum", 5.0), (None, False, "none", [1.0, 4.0]), (True, True, "mean", 2.5),
    (False, False, "none", [1.0, 4.0])])
def test_legacy_arguments_name_their_reduction(size_average, reduce, reduction, value):
    with pytest.warns(UserWarning, match=rf"^size_average and reduce args will be deprecated, please use "
                                         rf"reduction='{reduction}' instead\.$"):
        out = F.mse_loss(lucid.tensor([1.0, 2.0]), lucid.zeros(2), size_average=size_average, reduce=reduce)
    assert out.tolist() == value
