"""The ``*_with_indices`` pools, ``native_channel_shuffle`` and ``grouped_mm``: closed forms,
errors, and PyTorch parity where torch is installed (values and indices)."""
import numpy as np
import pytest

import lucid
import lucid.nn.functional as F


def test_with_indices_always_return_pairs():
    x = lucid.arange(16.0).reshape(1, 1, 4, 4)
    for out in (F.adaptive_max_pool2d_with_indices(x, 2), F.adaptive_max_pool2d_with_indices(x, 2, False),
                F.max_pool2d_with_indices(x, 2, return_indices=False)):
        v, i = out
        assert v.tolist() == [[[[5.0, 7.0], [13.0, 15.0]]]] and i.tolist() == [[[[5, 7], [13, 15]]]]
    v, i = F.max_pool3d_with_indices(lucid.arange(27.0).reshape(1, 1, 3, 3, 3), 2, stride=1)
    assert v.reshape(-1).tolist() == [13.0, 14.0, 16.0, 17.0, 22.0, 23.0, 25.0, 26.0]
    assert i.reshape(-1).tolist() == [13, 14, 16, 17, 22, 23, 25, 26] and i.dtype == lucid.int64
    v, i = F.adaptive_max_pool1d_with_indices(lucid.tensor([[4.0, 1.0, 3.0, 9.0, 2.0]]), 2)  # unbatched
    assert v.tolist() == [[4.0, 9.0]] and i.tolist() == [[0, 3]]
    v, i = F.adaptive_max_pool3d_with_indices(lucid.arange(8.0).reshape(1, 2, 2, 2), (1, 2, 1))
    assert v.reshape(-1).tolist() == [5.0, 7.0] and i.reshape(-1).tolist() == [5, 7]


def test_with_indices_unpool_round_trip():
    x = lucid.tensor(np.random.default_rng(0).permutation(64).astype(np.float64).reshape(1, 1, 4, 4, 4))
    v, i = F.max_pool3d_with_indices(x, 2)
    back = F.max_unpool3d(v, i, 2).numpy()
    kept = back != 0
    assert kept.sum() == 8 and np.array_equal(back[kept], x.numpy()[kept])


def test_fractional_with_indices_fixed_samples():
    x = lucid.arange(36.0).reshape(1, 1, 6, 6)
    u = lucid.zeros(1, 1, 2)
    # u = 0: starts int(i * a) with a = (6 - 2) / (3 - 1) = 2 and the last flush: 0, 2, 4
    v, i = F.fractional_max_pool2d_with_indices(x, 2, output_size=3, _random_samples=u)
    assert i.tolist() == [[[[7, 9, 11], [19, 21, 23], [31, 33, 35]]]]
    assert v.tolist() == [[[[7.0, 9.0, 11.0], [19.0, 21.0, 23.0], [31.0, 33.0, 35.0]]]]
    v, i = F.fractional_max_pool3d_with_indices(lucid.arange(8.0).reshape(1, 1, 2, 2, 2), 1, output_size=2,
                                                _random_samples=lucid.zeros(1, 1, 3))
    assert i.reshape(-1).tolist() == list(range(8))


def test_fractional_with_indices_under_vmap():
    xs = lucid.tensor(np.random.default_rng(2).standard_normal((3, 1, 2, 5, 5)))
    u = lucid.tensor(np.random.default_rng(3).uniform(size=(1, 2, 2)))
    f = lambda x: F.fractional_max_pool2d_with_indices(x, 2, output_size=3, _random_samples=u)  # noqa: E731
    vv, ii = lucid.func.vmap(f)(xs)
    for b in range(3):
        v, i = f(xs[b])
        np.testing.assert_array_equal(vv[b].numpy(), v.numpy())
        np.testing.assert_array_equal(ii[b].numpy(), i.numpy())


def test_with_indices_errors_name_the_function():
    with pytest.raises(RuntimeError, match="^adaptive_max_pool2d_with_indices: expected a 3-D"):
        F.adaptive_max_pool2d_with_indices(lucid.zeros(2, 2), 1)
    with pytest.raises(RuntimeError, match="^max_pool3d: expected a 4-D"):
        F.max_pool3d_with_indices(lucid.zeros(2, 2), 1)
    with pytest.raises(RuntimeError, match="^fractional_max_pool2d_with_indices: output size"):
        F.fractional_max_pool2d_with_indices(lucid.zeros(1, 1, 3, 3), 2, output_size=3)


def test_with_indices_match_torch():
    torch = pytest.importorskip("torch")
    TF = torch.nn.functional
    rng = np.random.default_rng(0)
    x2, x3 = rng.standard_normal((2, 3, 7, 5)), rng.standard_normal((1, 2, 5, 4, 6))
    u2, u3 = rng.uniform(size=(2, 3, 2)), rng.uniform(size=(1, 2, 3))
    cases = [
        ("adaptive_max_pool1d_with_indices", (x2[:, :, 0], 3), {}),
        ("adaptive_max_pool2d_with_indices", (x2, (3, 2)), {}),
        ("adaptive_max_pool3d_with_indices", (x3, (2, 3, 4)), {}),
        ("max_pool3d_with_indices", (x3, 2), {"stride": 1, "padding": 1, "ceil_mode": True}),
        ("fractional_max_pool2d_with_indices", (x2, 2), {"output_size": (4, 3), "_random_samples": u2}),
        ("fractional_max_pool3d_with_indices", (x3, (2, 1, 2)), {"output_ratio": 0.5, "_random_samples": u3}),
    ]
    for name, args, kw in cases:
        lkw = {k: lucid.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
        tkw = {k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
        lv, li = getattr(F, name)(lucid.tensor(args[0]), *args[1:], **lkw)
        tv, ti = getattr(TF, name)(torch.tensor(args[0]), *args[1:], **tkw)
        np.testing.assert_array_equal(lv.numpy(), tv.numpy(), err_msg=name)
        np.testing.assert_array_equal(li.numpy(), ti.numpy(), err_msg=name)


# ------------------------------------------------------------------ native_channel_shuffle


def test_native_channel_shuffle():
    x = lucid.arange(16.0).reshape(1, 4, 2, 2)
    got = F.native_channel_shuffle(x, 2)
    assert got.numpy()[0, :, 0, 0].tolist() == [0.0, 8.0, 4.0, 12.0]
    np.testing.assert_array_equal(got.numpy(), F.channel_shuffle(x, 2).numpy())
    x = lucid.tensor(np.arange(6.0).reshape(1, 6, 1), requires_grad=True)
    F.native_channel_shuffle(x, 3).backward(lucid.tensor(np.arange(6.0).reshape(1, 6, 1)))
    # the gradient is the output gradient shuffled back: the inverse permutation
    assert x.grad.reshape(-1).tolist() == [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]


def test_native_channel_shuffle_errors():
    with pytest.raises(RuntimeError, match=r"^native_channel_shuffle: expects input with > 2 dims"):
        F.native_channel_shuffle(lucid.zeros(2, 4), 2)
    with pytest.raises(RuntimeError, match=r"^native_channel_shuffle: number of channels must be divisible"):
        F.native_channel_shuffle(lucid.zeros(1, 3, 2), 2)
    with pytest.raises(RuntimeError, match=r"^native_channel_shuffle: number of groups"):
        F.native_channel_shuffle(lucid.zeros(1, 4, 2), 0)


# ------------------------------------------------------------------ grouped_mm


def test_grouped_mm_2d_3d_is_per_group_products():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((7, 3)), rng.standard_normal((3, 3, 2))
    offs = lucid.tensor([2, 2, 6], dtype=lucid.int32)  # group 1 is empty, row 6 is in no group
    got = F.grouped_mm(lucid.tensor(a), lucid.tensor(b), offs=offs).numpy()
    want = np.concatenate([a[:2] @ b[0], a[2:6] @ b[2], np.zeros((1, 2))])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_grouped_mm_other_layouts():
    rng = np.random.default_rng(1)
    a3, b2 = rng.standard_normal((2, 3, 4)), rng.standard_normal((4, 5))
    offs = lucid.tensor([2, 5])
    got = F.grouped_mm(lucid.tensor(a3), lucid.tensor(b2), offs=offs).numpy()
    np.testing.assert_allclose(got, np.concatenate([a3[0] @ b2[:, :2], a3[1] @ b2[:, 2:]], 1), rtol=1e-12)
    a2 = rng.standard_normal((3, 4))
    got = F.grouped_mm(lucid.tensor(a2), lucid.tensor(b2), offs=lucid.tensor([1, 4])).numpy()
    np.testing.assert_allclose(got, np.stack([a2[:, :1] @ b2[:1], a2[:, 1:] @ b2[1:]]), rtol=1e-12)
    b3 = rng.standard_normal((2, 4, 2))
    np.testing.assert_allclose(F.grouped_mm(lucid.tensor(a3), lucid.tensor(b3)).numpy(), a3 @ b3, rtol=1e-12)


def test_grouped_mm_gradient_is_per_group():
    a = lucid.tensor(np.ones((3, 2)), requires_grad=True)
    b = lucid.tensor(np.stack([np.ones((2, 1)), 2 * np.ones((2, 1))]), requires_grad=True)
    out = F.grouped_mm(a, b, offs=lucid.tensor([1, 2], dtype=lucid.int32))
    out.sum().backward()
    # row 0 uses b[0] (ones), row 1 b[1] (twos), row 2 no group: no gradient
    assert a.grad.tolist() == [[1.0, 1.0], [2.0, 2.0], [0.0, 0.0]]
    assert b.grad.reshape(2, 2).tolist() == [[1.0, 1.0], [1.0, 1.0]]


def test_grouped_mm_out_dtype_and_errors():
    a, b = lucid.ones(2, 2, dtype=lucid.float32), lucid.ones(1, 2, 3, dtype=lucid.float32)
    offs = lucid.tensor([2], dtype=lucid.int32)
    assert F.grouped_mm(a, b, offs=offs, out_dtype=lucid.float64).dtype == lucid.float64
    with pytest.raises(RuntimeError, match="^grouped_mm: have to provide offsets"):
        F.grouped_mm(a, b)
    with pytest.raises(RuntimeError, match="^grouped_mm: have to provide offsets"):
        F.grouped_mm(b.transpose(1, 2), b, offs=offs)
    with pytest.raises(RuntimeError, match="^grouped_mm: offs must be a 1-D integer"):
        F.grouped_mm(a, b, offs=lucid.tensor([2.0]))
    with pytest.raises(RuntimeError, match="^grouped_mm: contraction dimension"):
        F.grouped_mm(lucid.ones(2, 3), b, offs=offs)
    with pytest.raises(RuntimeError, match="^grouped_mm: matrix batch sizes"):
        F.grouped_mm(a, b, offs=lucid.tensor([1, 2], dtype=lucid.int32))
    with pytest.raises(RuntimeError, match="^grouped_mm: bias"):
        F.grouped_mm(a, b, offs=offs, bias=lucid.zeros(3))
    with pytest.raises(RuntimeError, match="^grouped_mm: expected mat_a and mat_b of one floating dtype"):
        F.grouped_mm(a, b.double(), offs=offs)
    with pytest.raises(RuntimeError, match="^grouped_mm: mat_a and mat_b must be 2-D or 3-D"):
        F.grouped_mm(lucid.ones(2), b, offs=offs)


def test_grouped_mm_matches_torch():
    torch = pytest.importorskip("torch")
    if not hasattr(torch.nn.functional, "grouped_mm"):
        pytest.skip("torch without grouped_mm")
    rng = np.random.default_rng(3)
    offs = np.array([3, 3, 8], dtype=np.int32)
    # PyTorch's CPU kernel wants float32 operands whose rows are 16-byte aligned
    cases = [(rng.standard_normal((8, 8)), rng.standard_normal((3, 8, 4)), offs),
             (rng.standard_normal((3, 5, 8)), rng.standard_normal((8, 8)), offs),
             (rng.standard_normal((4, 8)), rng.standard_normal((8, 4)), offs),
             (rng.standard_normal((3, 4, 8)), rng.standard_normal((3, 8, 4)), None)]
    for a, b, o in cases:
        a, b = a.astype(np.float32), b.astype(np.float32)
        got = F.grouped_mm(lucid.tensor(a), lucid.tensor(b), offs=None if o is None else lucid.tensor(o)).numpy()
        want = torch.nn.functional.grouped_mm(torch.tensor(a), torch.tensor(b),
                                              offs=None if o is None else torch.tensor(o)).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
