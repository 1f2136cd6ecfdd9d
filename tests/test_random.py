"""Random number generation: seeding, generators, distributions, dtypes and vmap randomness."""
import numpy as np
import pytest

import lucid
import lucid.func as F
from lucid.ops.random import bernoulli_mask, dropout_mask

N = 20000


# ---------------------------------------------------------------- reproducibility


def test_manual_seed_reproduces_every_sampler():
    def draw():
        return [lucid.rand(3), lucid.randn(2, 2), lucid.randint(0, 10, (4,)), lucid.randperm(5),
                lucid.normal(1.0, 2.0, (3,)), lucid.bernoulli(lucid.full((4,), 0.5)),
                lucid.multinomial(lucid.tensor([1.0, 2.0, 3.0]), 2)]

    lucid.manual_seed(123)
    a = draw()
    lucid.manual_seed(123)
    b = draw()
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x.numpy(), y.numpy())
    assert not np.array_equal(draw()[0].numpy(), a[0].numpy())


def test_generator_is_independent_of_default():
    g = lucid.Generator().manual_seed(7)
    x = lucid.rand(5, generator=g)
    lucid.manual_seed(0)
    lucid.rand(100)  # consuming the default stream does not touch g
    g2 = lucid.Generator().manual_seed(7)
    np.testing.assert_array_equal(x.numpy(), lucid.rand(5, generator=g2).numpy())
    assert g.initial_seed() == 7
    # PCG64 under the hood: same numbers as NumPy's Generator with that seed
    np.testing.assert_array_equal(lucid.randn(4, generator=lucid.Generator().manual_seed(3), dtype=lucid.float64).numpy(),
                                  np.random.Generator(np.random.PCG64(3)).standard_normal(4))


def test_get_set_state_roundtrip():
    g = lucid.Generator().manual_seed(11)
    lucid.rand(3, generator=g)
    state = g.get_state()
    assert state.dtype == np.uint8 and state.shape == (37,)
    a = lucid.randn(6, generator=g)
    g.set_state(state)
    np.testing.assert_array_equal(a.numpy(), lucid.randn(6, generator=g).numpy())
    s = lucid.get_rng_state()
    b = lucid.rand(4)
    lucid.set_rng_state(s)
    np.testing.assert_array_equal(b.numpy(), lucid.rand(4).numpy())
    with pytest.raises(RuntimeError, match="set_state"):
        g.set_state(lucid.zeros(3))


def test_seed_and_default_generator():
    assert lucid.manual_seed(5) is lucid.default_generator
    assert lucid.initial_seed() == 5
    s = lucid.seed()
    assert lucid.initial_seed() == s
    lucid.manual_seed(-1)  # negative seeds wrap like PyTorch
    assert lucid.initial_seed() == 2 ** 64 - 1
    with pytest.raises(TypeError, match="generator"):
        lucid.rand(2, generator=np.random.default_rng(0))


# ---------------------------------------------------------------- dtypes and shapes


def test_dtypes_and_shapes():
    assert lucid.rand(2, 3).dtype == lucid.float32 and lucid.rand(2, 3).shape == (2, 3)
    assert lucid.rand((2, 3)).shape == (2, 3) and lucid.rand(()).shape == ()
    assert lucid.randn(4, dtype=lucid.float64).dtype == lucid.float64
    assert lucid.randn(4, dtype=lucid.float16).dtype == lucid.float16
    assert lucid.randint(5, (2, 2)).dtype == lucid.int64
    assert lucid.randint(0, 5, (3,), dtype=lucid.int32).dtype == lucid.int32
    assert lucid.randperm(4).dtype == lucid.int64
    x = lucid.zeros(2, 3, dtype=lucid.float64)
    assert lucid.rand_like(x).dtype == lucid.float64 and lucid.randn_like(x).shape == (2, 3)
    i = lucid.zeros(4, dtype=lucid.int32)
    assert lucid.randint_like(i, 3).dtype == lucid.int32 and lucid.rand_like(i).dtype == lucid.float32
    assert lucid.bernoulli(lucid.full((3,), 0.5, dtype=lucid.float64)).dtype == lucid.float64
    assert lucid.multinomial(lucid.ones(2, 4), 3).shape == (2, 3)
    assert lucid.normal(lucid.zeros(2, 1), lucid.ones(3)).shape == (2, 3)
    assert lucid.uniform(1.0, 2.0, (3,)).shape == (3,)
    assert lucid.rand(3, requires_grad=True).requires_grad


def test_outputs_carry_no_gradient():
    m = lucid.zeros(3, requires_grad=True)
    assert not lucid.normal(m, 1.0).requires_grad
    assert not lucid.bernoulli(lucid.full((3,), 0.5, requires_grad=True)).requires_grad


# ---------------------------------------------------------------- distributions


def _moments(t):
    a = t.numpy().astype(np.float64)
    return a.mean(), a.var()


def test_continuous_moments():
    lucid.manual_seed(0)
    m, v = _moments(lucid.rand(N))
    assert abs(m - 0.5) < 0.01 and abs(v - 1 / 12) < 0.005
    m, v = _moments(lucid.randn(N))
    assert abs(m) < 0.03 and abs(v - 1) < 0.04
    m, v = _moments(lucid.normal(2.0, 3.0, (N,)))
    assert abs(m - 2) < 0.1 and abs(v - 9) < 0.4
    m, v = _moments(lucid.normal(lucid.full((N,), -1.0), lucid.full((N,), 0.5)))
    assert abs(m + 1) < 0.02 and abs(v - 0.25) < 0.015
    m, v = _moments(lucid.uniform(-2.0, 2.0, (N,)))
    assert abs(m) < 0.05 and abs(v - 16 / 12) < 0.06


def test_discrete_distributions():
    lucid.manual_seed(1)
    x = lucid.randint(2, 6, (N,)).numpy()
    assert x.min() == 2 and x.max() == 5
    np.testing.assert_allclose(np.bincount(x - 2) / N, [0.25] * 4, atol=0.015)
    b = lucid.bernoulli(lucid.full((N,), 0.3)).numpy()
    assert set(np.unique(b)) <= {0.0, 1.0} and abs(b.mean() - 0.3) < 0.015
    assert abs(lucid.bernoulli(lucid.zeros(N), 0.8).numpy().mean() - 0.8) < 0.015
    p = np.array([0.1, 0.2, 0.3, 0.4])
    s = lucid.multinomial(lucid.tensor(p), N, replacement=True).numpy()
    np.testing.assert_allclose(np.bincount(s, minlength=4) / N, p, atol=0.015)
    rows = lucid.multinomial(lucid.tensor(np.tile(p, (N // 4, 1))), 2).numpy()
    assert (rows[:, 0] != rows[:, 1]).all()  # without replacement
    np.testing.assert_allclose(np.bincount(rows[:, 0], minlength=4) / len(rows), p, atol=0.03)
    first = np.array([lucid.randperm(4).numpy()[0] for _ in range(2000)])
    np.testing.assert_allclose(np.bincount(first, minlength=4) / 2000, [0.25] * 4, atol=0.04)


def test_zero_weight_categories_never_drawn():
    w = lucid.tensor([0.0, 1.0, 0.0, 2.0])
    assert set(lucid.multinomial(w, 500, replacement=True).tolist()) <= {1, 3}
    assert sorted(lucid.multinomial(w, 2).tolist()) == [1, 3]


def test_masks():
    lucid.manual_seed(2)
    m = bernoulli_mask((N,), 0.25, lucid.float64)
    assert m.dtype == lucid.float64 and abs(m.numpy().mean() - 0.25) < 0.015
    d = dropout_mask((N,), 0.2).numpy()
    assert set(np.unique(d)) <= {0.0, np.float32(1.25)} and abs(d.mean() - 1.0) < 0.03
    assert dropout_mask((3,), 1.0).tolist() == [0.0, 0.0, 0.0]


def test_errors_name_the_op():
    with pytest.raises(RuntimeError, match="randint: expected low < high"):
        lucid.randint(5, 5, (2,))
    with pytest.raises(RuntimeError, match="multinomial: cannot sample"):
        lucid.multinomial(lucid.ones(3), 4)
    # fewer non-zero weights than draws without replacement: not an error in PyTorch 2.x (its
    # p / Exp(1) top-k puts the zero-weight categories after the others)
    assert lucid.multinomial(lucid.tensor([1.0, 0.0, 0.0]), 2).tolist()[0] == 0
    with pytest.raises(RuntimeError, match="multinomial: weights"):
        lucid.multinomial(lucid.tensor([1.0, -1.0]), 1)
    with pytest.raises(RuntimeError, match="bernoulli: expected all probabilities"):
        lucid.bernoulli(lucid.tensor([1.5]))
    with pytest.raises(RuntimeError, match="rand: negative dimension"):
        lucid.rand(-1)
    with pytest.raises(RuntimeError, match="rand: expected a floating point dtype"):
        lucid.rand(2, dtype=lucid.int64)
    with pytest.raises(TypeError, match="normal: with float mean and std, size is required"):
        lucid.normal(0.0, 1.0)


# ---------------------------------------------------------------- vmap randomness

X = lucid.zeros(4, 3)


@pytest.mark.parametrize("name,fn", [
    ("rand", lambda x: lucid.rand(3)),
    ("randn", lambda x: lucid.randn_like(x)),
    ("randint", lambda x: lucid.randint(0, 5, (3,))),
    ("randperm", lambda x: lucid.randperm(3)),
    ("normal", lambda x: lucid.normal(x, 1.0)),
    ("bernoulli", lambda x: lucid.bernoulli(x + 0.5)),
    ("multinomial", lambda x: lucid.multinomial(x + 1.0, 2)),
    ("bernoulli_mask", lambda x: bernoulli_mask((3,), 0.5)),
])
def test_vmap_error_mode_names_the_op(name, fn):
    with pytest.raises(RuntimeError, match=f"^{name}: random operations are not allowed inside vmap"):
        F.vmap(fn)(X)


def test_vmap_different_gives_independent_rows_matching_a_batched_draw():
    lucid.manual_seed(3)
    got = F.vmap(lambda x: x + lucid.rand(3, dtype=lucid.float64), randomness="different")(lucid.zeros(4, 3, dtype=lucid.float64))
    lucid.manual_seed(3)
    np.testing.assert_array_equal(got.numpy(), lucid.rand(4, 3, dtype=lucid.float64).numpy())
    assert len({tuple(r) for r in got.numpy()}) == 4


def test_vmap_same_shares_one_draw():
    lucid.manual_seed(4)
    got = F.vmap(lambda x: x + lucid.randn(3), randomness="same")(X).numpy()
    assert got.shape == (4, 3) and (got == got[0]).all()
    lucid.manual_seed(4)
    np.testing.assert_array_equal(got[0], lucid.randn(3).numpy())


def test_vmap_in_dims_other_than_zero_and_out_dims():
    got = F.vmap(lambda x: x + lucid.rand(3), in_dims=1, out_dims=1, randomness="different")(lucid.zeros(3, 4))
    assert got.shape == (3, 4) and len({tuple(c) for c in got.numpy().T}) == 4


@pytest.mark.parametrize("op", [lambda: lucid.randint(0, 1000, (5,)), lambda: lucid.randperm(5),
                                lambda: lucid.normal(0.0, 1.0, (5,)), lambda: bernoulli_mask((20,), 0.5),
                                lambda: lucid.multinomial(lucid.ones(50), 5)])
def test_vmap_modes_for_samplers_without_tensor_inputs(op):
    diff = F.vmap(lambda x: op(), randomness="different")(X).numpy()
    same = F.vmap(lambda x: op(), randomness="same")(X).numpy()
    assert diff.shape[0] == 4 and same.shape[0] == 4
    assert (same == same[0]).all()
    assert len({tuple(r) for r in diff}) > 1


def test_vmap_same_still_batches_over_tensor_inputs():
    p = lucid.tensor([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0], [0.5, 0.5, 0.5]])
    got = F.vmap(lucid.bernoulli, randomness="same")(p).numpy()
    assert got[0].tolist() == [0, 0, 0] and got[1].tolist() == [1, 1, 1]
    mean = lucid.tensor([[0.0], [100.0]])
    lucid.manual_seed(5)
    out = F.vmap(lambda m: lucid.normal(m, 1.0), randomness="same")(mean).numpy()
    np.testing.assert_allclose(out[1] - out[0], [100.0], rtol=1e-6)  # one shared noise, batched mean
    w = lucid.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    assert F.vmap(lambda q: lucid.multinomial(q, 1), randomness="same")(w).tolist() == [[0], [2]]


def test_vmap_different_with_batched_probabilities():
    lucid.manual_seed(6)
    p = lucid.tensor(np.tile([[0.2], [0.9]], (1, N)))
    got = F.vmap(lucid.bernoulli, randomness="different")(p).numpy()
    np.testing.assert_allclose(got.mean(1), [0.2, 0.9], atol=0.015)


def test_nested_vmap_randomness():
    x = lucid.zeros(2, 3, 1)

    def f(mode_outer, mode_inner):
        return F.vmap(F.vmap(lambda t: t + lucid.rand(()), randomness=mode_inner), randomness=mode_outer)(x).numpy()[..., 0]

    dd = f("different", "different")
    assert dd.shape == (2, 3) and len(np.unique(dd)) == 6
    ds = f("different", "same")  # inner examples share, outer differ
    assert (ds == ds[:, :1]).all() and ds[0, 0] != ds[1, 0]
    sd = f("same", "different")  # outer examples share, inner differ
    assert (sd == sd[:1]).all() and len(np.unique(sd[0])) == 3
    ss = f("same", "same")
    assert len(np.unique(ss)) == 1
    # an inner randomness= overrides an enclosing "error" for the inner body
    ed = f("error", "different")
    assert ed.shape == (2, 3) and len(np.unique(ed)) == 6
    es = f("error", "same")
    assert len(np.unique(es)) == 1
    with pytest.raises(RuntimeError, match="rand: random operations are not allowed"):
        f("different", "error")
    with pytest.raises(RuntimeError, match="rand: random operations are not allowed"):
        F.vmap(lambda t: t + lucid.rand(()))(x)


def test_nested_vmap_matches_batched_draw():
    lucid.manual_seed(8)
    got = F.vmap(F.vmap(lambda t: t + lucid.randn(2, dtype=lucid.float64), randomness="different"),
                 randomness="different")(lucid.zeros(2, 3, 2, dtype=lucid.float64))
    lucid.manual_seed(8)
    np.testing.assert_array_equal(got.numpy(), lucid.randn(2, 3, 2, dtype=lucid.float64).numpy())


def test_random_inside_grad_and_vmap_of_grad():
    def loss(w):
        noise = lucid.randn(3, dtype=lucid.float64)
        return (w * noise).sum()

    lucid.manual_seed(9)
    g = F.grad(loss)(lucid.ones(3, dtype=lucid.float64))
    lucid.manual_seed(9)
    np.testing.assert_allclose(g.numpy(), lucid.randn(3, dtype=lucid.float64).numpy())
    lucid.manual_seed(10)
    per = F.vmap(F.grad(loss), randomness="different")(lucid.ones(4, 3, dtype=lucid.float64))
    lucid.manual_seed(10)
    np.testing.assert_allclose(per.numpy(), lucid.randn(4, 3, dtype=lucid.float64).numpy())


def test_device_generator_states_repeat_the_draws_after_them(monkeypatch):
    # NOTE [Device generator states], with NumPy generators standing in for CuPy's (CI has no
    # GPU; tests/gpu/test_cuda.py and the autograd suite on --lucid-device=cuda run the real ones).
    from lucid.ops import random as R

    monkeypatch.setattr(R, "_make_device_rng", lambda dev, seed: np.random.default_rng(seed))
    monkeypatch.setattr(R, "_DEVICE_RNG", {})
    gpu0, gpu1 = lucid.device("cuda", 0), lucid.device("cuda", 1)
    before = R._device_rng(gpu0).random(3)
    states = R.device_rng_states()
    after = R._device_rng(gpu0).random(3)
    made_later = R._device_rng(gpu1).random(2)  # a generator made after the states were taken
    R.set_device_rng_states(states)
    np.testing.assert_array_equal(R._device_rng(gpu0).random(3), after)
    np.testing.assert_array_equal(R._device_rng(gpu1).random(2), made_later)  # restarts from its seed
    assert not np.array_equal(before, after)
    again = R.device_rng_states()  # each take moves on to a new seed of the sequence
    assert again[gpu0] != states[gpu0] and set(again) == {gpu0, gpu1}


# ---------------------------------------------------------------- lucid.random


def test_random_module_is_torch_random():
    import lucid.random as R

    assert R.manual_seed is lucid.manual_seed and R.default_generator is lucid.default_generator
    R.manual_seed(3)
    assert R.initial_seed() == 3


def test_fork_rng_restores_the_generators_even_after_an_error():
    lucid.manual_seed(5)
    expected = lucid.rand(4)
    lucid.manual_seed(5)
    with lucid.random.fork_rng():
        inside = lucid.rand(4)
        lucid.randn(100)  # draws inside the block leave no trace after it
    np.testing.assert_array_equal(inside.numpy(), expected.numpy())
    np.testing.assert_array_equal(lucid.rand(4).numpy(), expected.numpy())
    lucid.manual_seed(5)
    with pytest.raises(KeyError):
        with lucid.random.fork_rng(devices=[0]):
            lucid.rand(7)
            raise KeyError("boom")
    np.testing.assert_array_equal(lucid.rand(4).numpy(), expected.numpy())


def test_fork_rng_disabled_and_bad_devices():
    lucid.manual_seed(5)
    expected = lucid.rand(8).numpy()
    lucid.manual_seed(5)
    with lucid.random.fork_rng(enabled=False):
        first = lucid.rand(4).numpy()
    np.testing.assert_array_equal(np.concatenate([first, lucid.rand(4).numpy()]), expected)
    with pytest.raises(TypeError, match="fork_rng: devices must be device indices"):
        with lucid.random.fork_rng(devices=["cuda:0"]):
            pass
