"""SyncBatchNorm in one process (the multi-rank checks are in tests/distributed/mpiworker.py,
``differentiable_all_reduce_and_sync_batch_norm``): BatchNorm's numbers, PyTorch's converter."""
import numpy as np
import pytest

import lucid
from lucid import nn


@pytest.mark.parametrize("shape", [(6, 3), (4, 3, 5), (2, 3, 4, 4), (2, 3, 2, 2, 3)])
def test_one_process_is_batch_norm(shape):
    rng = np.random.default_rng(0)
    x0, coef = rng.standard_normal(shape) * 2 + 1, rng.standard_normal(shape)
    sync, ref = nn.SyncBatchNorm(3, dtype=lucid.float64), nn.BatchNorm1d(3, dtype=lucid.float64)
    ref._check_input_dim = lambda x: None  # BatchNorm's arithmetic is the same for every rank of input
    outs = []
    for bn in (sync, ref):
        x = lucid.tensor(x0, requires_grad=True)
        y = bn(x)
        (y * lucid.tensor(coef)).sum().backward()
        outs.append((y.detach().cpu().numpy(), x.grad.cpu().numpy(), bn.weight.grad.cpu().numpy(),
                     bn.running_var.cpu().numpy()))
    for a, b in zip(*outs):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    sync.eval()
    assert sync(lucid.tensor(x0)).shape == shape


def test_convert_shares_parameters_and_statistics():
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.Sequential(nn.BatchNorm2d(4, affine=False)))
    model.eval()
    bn, inner = model[1], model[2][0]
    converted = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    assert converted is model  # children are replaced in place, as in PyTorch
    new, new_inner = converted[1], converted[2][0]
    assert type(new) is nn.SyncBatchNorm and type(new_inner) is nn.SyncBatchNorm
    assert new.weight is bn.weight and new.running_mean is bn.running_mean and not new.training
    assert new_inner.weight is None and new_inner.running_var is inner.running_var
    assert list(converted.state_dict()) == ["0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean",
                                            "1.running_var", "1.num_batches_tracked", "2.0.running_mean",
                                            "2.0.running_var", "2.0.num_batches_tracked"]
    lone = nn.SyncBatchNorm.convert_sync_batchnorm(nn.BatchNorm1d(2))
    assert type(lone) is nn.SyncBatchNorm


def test_bad_input_and_collectives_without_a_job():
    with pytest.raises(ValueError, match=r"SyncBatchNorm: expected at least 2D input \(got 1D input\)"):
        nn.SyncBatchNorm(3)(lucid.ones(3))
    with pytest.raises(ValueError, match="expected 3 channels at dim 1"):
        nn.SyncBatchNorm(3)(lucid.ones(2, 4))
    from lucid.distributed.nn.functional import all_reduce

    with pytest.raises(ValueError, match="all_reduce: default process group has not been initialized"):
        all_reduce(lucid.ones(2))
    with pytest.raises(RuntimeError, match="only ReduceOp.SUM and ReduceOp.AVG have a gradient"):
        import lucid.distributed as dist

        all_reduce(lucid.ones(2), op=dist.ReduceOp.MAX)


def test_a_batch_of_one_value_per_channel_changes_nothing():
    for bn in (nn.SyncBatchNorm(3), nn.BatchNorm1d(3)):
        with pytest.raises(ValueError, match="expected more than 1 value per channel when training"):
            bn(lucid.ones(1, 3))
        assert int(bn.num_batches_tracked.item()) == 0 and bn.running_var.tolist() == [1.0, 1.0, 1.0]
