"""Wrong answers and error types the session's PyTorch sweeps found outside their own files:
negative pads in reflect/replicate/circular modes (PyTorch crops, then pads), negative conv
padding (silently cropped), ``flatten(start > end)`` (silently added a dim), gather/scatter's
out-of-bounds index (PyTorch: RuntimeError). Expected values are written out; torch optional."""
import numpy as np
import pytest

import lucid
import lucid.nn as nn
import lucid.nn.functional as F

X = lucid.arange(5.0)


@pytest.mark.parametrize("mode,want", [
    ("reflect", [1.0, 2.0, 3.0, 4.0, 3.0, 2.0]),
    ("replicate", [1.0, 2.0, 3.0, 4.0, 4.0, 4.0]),
    ("circular", [1.0, 2.0, 3.0, 4.0, 1.0, 2.0]),
    ("constant", [1.0, 2.0, 3.0, 4.0, 0.0, 0.0]),
])
def test_negative_pads_crop_then_pad_in_every_mode(mode, want):
    x = X.reshape(1, 1, 5)
    assert F.pad(x, (-1, 2), mode=mode).reshape(-1).tolist() == want


def test_negative_pad_modules_and_gradient():
    x = X.reshape(1, 1, 5).clone().requires_grad_()
    y = nn.ReflectionPad1d((-1, 2))(x)
    assert y.reshape(-1).tolist() == [1.0, 2.0, 3.0, 4.0, 3.0, 2.0]
    y.sum().backward()
    # x0 is cropped; x2 and x3 also appear once more each in the reflection
    assert x.grad.reshape(-1).tolist() == [0.0, 1.0, 2.0, 2.0, 1.0]
    with pytest.raises(RuntimeError, match="crops more than"):
        F.pad(x, (-3, -3), mode="replicate")


def test_negative_conv_padding_raises():
    with pytest.raises(RuntimeError, match="^conv1d: negative padding is not supported"):
        F.conv1d(lucid.randn(1, 2, 7), lucid.randn(3, 2, 3), padding=-1)


def test_flatten_start_after_end_raises():
    with pytest.raises(RuntimeError, match="^flatten: start_dim cannot come after end_dim"):
        lucid.zeros(2, 3, 4).flatten(2, 1)
    assert lucid.zeros(2, 3, 4).flatten(1, 2).shape == (2, 12)


def test_gather_and_scatter_out_of_bounds_are_runtime_errors():
    t = lucid.ones(3)
    for call in (lambda: lucid.gather(t, 0, lucid.tensor([5])), lambda: t.scatter(0, lucid.tensor([5]), 1.0),
                 lambda: lucid.take_along_dim(t, lucid.tensor([5]))):
        with pytest.raises(RuntimeError, match="index 5 is out of bounds for dimension 0 with size 3") as info:
            call()
        assert isinstance(info.value, IndexError)  # what Lucid raised before
    with pytest.raises(IndexError):
        t.index_select(0, lucid.tensor([5]))  # PyTorch: IndexError here


def test_parity_with_pytorch():
    torch = pytest.importorskip("torch")
    x = np.arange(36.0).reshape(1, 1, 6, 6)
    for mode in ("reflect", "replicate", "circular"):
        for p in ((-1, 2, 1, -2), (-2, 0, 0, 3)):
            want = torch.nn.functional.pad(torch.tensor(x), p, mode=mode).numpy()
            np.testing.assert_array_equal(F.pad(lucid.tensor(x), p, mode=mode).numpy(), want)
    for exc_call in (lambda L: L.gather(L.ones(3), 0, L.tensor([5])), lambda L: L.zeros(2, 3, 4).flatten(2, 1)):
        with pytest.raises(RuntimeError):
            exc_call(torch)
        with pytest.raises(RuntimeError):
            exc_call(lucid)


def test_logit_eps_selects_per_element_and_its_gradients():
    # PyTorch: x < eps ? eps : (x > 1 - eps ? 1 - eps : x), gradient 0 where replaced; without
    # eps the derivative is nan outside [0, 1]. A clamp gave 1 - eps everywhere for eps > 0.5.
    x = lucid.tensor([-0.1, 0.0, 0.3, 1.0, 1.2], dtype=lucid.float64, requires_grad=True)
    l6 = float(np.log(0.6 / 0.4))
    y = lucid.logit(x, 0.6)
    np.testing.assert_allclose(y.detach().numpy(), [l6, l6, l6, -l6, -l6], rtol=1e-12)
    (g,) = lucid.autograd.grad(y.sum(), [x])
    assert g.tolist() == [0.0] * 5
    y = lucid.logit(x, 0.1)
    (g,) = lucid.autograd.grad(y.sum(), [x])
    np.testing.assert_allclose(g.numpy(), [0.0, 0.0, 1 / (0.3 * 0.7), 0.0, 0.0], rtol=1e-12)
    (g,) = lucid.autograd.grad(lucid.logit(x).sum(), [x])
    got = g.numpy()
    assert np.isnan(got[[0, 4]]).all() and np.isinf(got[[1, 3]]).all()
    np.testing.assert_allclose(got[2], 1 / (0.3 * 0.7), rtol=1e-12)
    (t,) = lucid.func.jvp(lucid.logit, (x.detach(),), (lucid.ones(5, dtype=lucid.float64),))[1:]
    assert np.isnan(t.numpy()[[0, 4]]).all()


def test_tensor_split_takes_sections_and_indices_keywords():
    x = lucid.arange(6)
    assert [t.tolist() for t in lucid.tensor_split(x, sections=3)] == [[0, 1], [2, 3], [4, 5]]
    assert [t.tolist() for t in x.tensor_split(indices=[1, 4])] == [[0], [1, 2, 3], [4, 5]]
    with pytest.raises(TypeError, match="exactly one of"):
        lucid.tensor_split(x, 3, sections=3)
    with pytest.raises(TypeError, match="exactly one of"):
        lucid.tensor_split(x)


def test_pytorchs_conversion_warnings():
    import warnings

    p = lucid.ones(1, requires_grad=True)
    with pytest.warns(UserWarning, match="^Converting a tensor with requires_grad=True to a scalar"):
        assert float(p) == 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert p.item() == 1.0 and int(p) == 1 and float(p.detach()) == 1.0  # silent, as in PyTorch
        # LBFGS reads its closure's loss without the warning
        opt = lucid.optim.LBFGS([p], max_iter=2)

        def closure():
            opt.zero_grad()
            loss = ((p - 3) ** 2).sum()
            loss.backward()
            return loss

        opt.step(closure)
    with pytest.warns(UserWarning, match=r"^To copy construct from a tensor.*rather than lucid.tensor\(sourceTensor\)"):
        copy = lucid.tensor(lucid.ones(2))
    assert copy.tolist() == [1.0, 1.0]


@pytest.mark.parametrize("kwargs,reason", [
    ({}, r"encoder_layer\.self_attn\.batch_first was not True\(use batch_first"),
    ({"batch_first": True, "norm_first": True}, r"encoder_layer\.norm_first was True"),
    ({"batch_first": True, "activation": lambda x: x}, r"encoder_layer\.activation_relu_or_gelu was not True"),
    ({"batch_first": True, "nhead": 1}, r"encoder_layer\.self_attn\.num_heads is odd"),
])
def test_transformer_encoder_says_why_no_nested_fast_path(kwargs, reason):
    kwargs = {"d_model": 8, "nhead": 2, "dim_feedforward": 16, **kwargs}
    with pytest.warns(UserWarning, match="^enable_nested_tensor is True, but self.use_nested_tensor is False "
                                         "because " + reason):
        enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(**kwargs), 2)
    assert enc.enable_nested_tensor is True and enc.use_nested_tensor is False and enc.mask_check is True


def test_transformer_encoder_nested_flags_without_a_reason():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, batch_first=True), 2)
        off = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16), 2, enable_nested_tensor=False)
    assert enc.use_nested_tensor is True and off.use_nested_tensor is False
    assert enc.layers[0].activation_relu_or_gelu == 1
    assert nn.TransformerEncoderLayer(8, 2, 16, activation="gelu").activation_relu_or_gelu == 2


def test_in_place_ops_keep_pytorchs_error_classes():
    # an op with no kernel for a dtype raises NotImplementedError in place too (was RuntimeError)
    with pytest.raises(NotImplementedError, match="^bitwise_and_: not implemented"):
        lucid.tensor([1.0]).bitwise_and_(lucid.tensor([1.0]))
    with pytest.raises(NotImplementedError, match="^remainder_: "):
        lucid.tensor([True]).remainder_(lucid.tensor([True]))
    # float_power computes in double: PyTorch refuses to write it into a float32 tensor
    x = lucid.tensor([2.0])
    with pytest.raises(RuntimeError, match="^float_power_: the base given to float_power_ has dtype lucid.float32"):
        x.float_power_(2)
    assert x.tolist() == [2.0] and x._version[0] == 0
    assert lucid.tensor([2.0], dtype=lucid.float64).float_power_(2).tolist() == [4.0]
