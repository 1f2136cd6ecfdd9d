"""Observers: calculate_qparams as PyTorch's formulas (closed forms; bit-exact against torch)."""
import warnings

import numpy as np
import pytest

import lucid
from lucid.ao.quantization import (MinMaxObserver, MovingAverageMinMaxObserver, MovingAveragePerChannelMinMaxObserver,
                                   PerChannelMinMaxObserver, default_dynamic_qconfig, get_default_qconfig)
from lucid.ao.quantization.utils import calculate_qmin_qmax


def test_closed_forms():
    obs = MinMaxObserver()
    obs(lucid.tensor([-1.0, 2.0, 3.0]))
    scale, zp = obs.calculate_qparams()
    assert scale.tolist() == [float(np.float32(4.0) / np.float32(255.0))]  # (3 - -1) / 255
    assert zp.tolist() == [64] and zp.dtype == lucid.int32  # 0 - round(-1 / scale) = round(63.75)
    sym = MinMaxObserver(dtype=lucid.qint8, qscheme=lucid.per_tensor_symmetric)
    sym(lucid.tensor([-2.0, 1.0]))
    scale, zp = sym.calculate_qparams()
    assert scale.tolist() == [float(np.float32(2.0) / np.float32(127.5))] and zp.tolist() == [0]
    assert calculate_qmin_qmax(None, None, False, lucid.qint8, True) == (-64, 63)
    assert calculate_qmin_qmax(0, 255, True, lucid.quint8, True) == (0, 127)
    with pytest.warns(UserWarning, match="must run observer"):
        assert [t.tolist() for t in MinMaxObserver().calculate_qparams()] == [[1.0], [0]]
    assert default_dynamic_qconfig.weight().qscheme is lucid.per_tensor_symmetric
    assert get_default_qconfig("fbgemm").weight().qscheme is lucid.per_channel_symmetric


CASES = [
    (MinMaxObserver, {}, (7,)),
    (MinMaxObserver, {"dtype": "qint8", "qscheme": "per_tensor_symmetric"}, (3, 4)),
    (MinMaxObserver, {"reduce_range": True}, (5,)),
    (MinMaxObserver, {"quant_min": 0, "quant_max": 15}, (6,)),
    (MinMaxObserver, {"dtype": "quint8", "qscheme": "per_tensor_symmetric", "quant_min": 0, "quant_max": 100}, (6,)),
    (MovingAverageMinMaxObserver, {"averaging_constant": 0.3}, (4, 2)),
    (MovingAverageMinMaxObserver, {"dtype": "qint8", "qscheme": "per_tensor_symmetric", "eps": 2 ** -12}, (4,)),
    (PerChannelMinMaxObserver, {"ch_axis": 1, "dtype": "qint8", "qscheme": "per_channel_symmetric"}, (3, 4, 2)),
    (PerChannelMinMaxObserver, {"ch_axis": 0}, (3, 5)),
    (PerChannelMinMaxObserver, {"ch_axis": 0, "qscheme": "per_channel_affine_float_qparams"}, (3, 5)),
    (MovingAveragePerChannelMinMaxObserver, {"ch_axis": 0, "reduce_range": True}, (2, 5)),
]


@pytest.mark.parametrize("cls,kwargs,shape", CASES, ids=lambda c: getattr(c, "__name__", str(c)))
def test_matches_torch(cls, kwargs, shape):
    torch = pytest.importorskip("torch")
    warnings.filterwarnings("ignore", category=UserWarning)
    mine = cls(**{k: getattr(lucid, v) if isinstance(v, str) else v for k, v in kwargs.items()})
    theirs = getattr(torch.ao.quantization, cls.__name__)(
        **{k: getattr(torch, v) if isinstance(v, str) else v for k, v in kwargs.items()})
    rng = np.random.default_rng(0)
    for step in range(3):
        x = (rng.normal(size=shape) * (step + 1) + 0.4 * step).astype(np.float32)
        mine(lucid.tensor(x))
        theirs(torch.tensor(x))
        for a, b in zip(mine.calculate_qparams(), theirs.calculate_qparams()):
            assert str(a.dtype).split(".")[1] == str(b.dtype).split(".")[1]
            np.testing.assert_array_equal(a.numpy(), b.numpy())
    # tiny ranges hit the eps floor
    small = cls(**{k: getattr(lucid, v) if isinstance(v, str) else v for k, v in kwargs.items()})
    small(lucid.zeros(shape))
    assert float(small.calculate_qparams()[0].min()) > 0


def test_state_dict_round_trip_resizes_per_channel_buffers():
    a = PerChannelMinMaxObserver(ch_axis=0)
    a(lucid.tensor([[1.0, -1.0], [3.0, 2.0]]))
    b = PerChannelMinMaxObserver(ch_axis=0)
    b.load_state_dict(a.state_dict())
    assert b.min_val.tolist() == [-1.0, 2.0] and b.max_val.tolist() == [1.0, 3.0]
