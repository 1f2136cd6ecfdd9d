"""lucid.diffeq (Lucid 3's torchdiffeq-shaped ODE solvers; NOTE [ODE solvers]).

Every check is against a closed form, a NumPy recomputation, published coefficients or float64
finite differences: exponential decay, the harmonic oscillator, a linear system (e^{At} in
closed form and ``lucid.linalg.matrix_exp``), a stiff problem, measured convergence orders of
the fixed-step, Adams and implicit methods, the adaptive solvers' error, step counts and dense
output, gradients (y0, t, parameters; grad/jvp/hessian transforms), the adjoint method against
direct backprop, events (falling body, with implicit-function gradients), tuple states, vmap,
and the error messages. torchdiffeq is not installed, so there is no torch-parity test.
"""
import math
import os
import subprocess
import sys

import numpy as np
import pytest

import lucid
import lucid.diffeq as diffeq

F64 = lucid.float64
FIXED = ["euler", "midpoint", "heun2", "heun3", "rk4", "rk4_classic"]
ADAPTIVE = ["dopri5", "tsit5", "bosh3", "fehlberg2", "adaptive_heun"]
IMPLICIT = {"implicit_euler": 1, "implicit_midpoint": 2, "trapezoid": 2, "radauIIA3": 3,
            "radauIIA5": 5, "gl4": 4, "gl6": 6, "sdirk2": 2, "trbdf2": 2}
TABLEAU = {tab.name: tab for tab in (diffeq.EULER, diffeq.MIDPOINT, diffeq.HEUN2, diffeq.HEUN3,
                                     diffeq.RK4, diffeq.RK4_CLASSIC, diffeq.DOPRI5, diffeq.TSIT5,
                                     diffeq.BOSH3, diffeq.FEHLBERG2, diffeq.ADAPTIVE_HEUN,
                                     diffeq.IMPLICIT_EULER, diffeq.IMPLICIT_MIDPOINT,
                                     diffeq.TRAPEZOID, diffeq.RADAU_IIA3, diffeq.RADAU_IIA5,
                                     diffeq.GL4, diffeq.GL6, diffeq.SDIRK2, diffeq.TRBDF2)}


def T(x, **kw):
    return lucid.tensor(x, dtype=F64, **kw)


def host(x):
    return np.array(x.detach().cpu().tolist(), dtype=np.float64)


class Counted:
    """``y' = -y`` that counts its evaluations."""

    def __init__(self, rate=1.0):
        self.n, self.rate = 0, rate

    def __call__(self, t, y):
        self.n += 1
        return -self.rate * y


# ---------------------------------------------------------------- closed forms

@pytest.mark.parametrize("method", ADAPTIVE)
def test_decay_adaptive_error_and_steps(method):
    # (rtol, global-error factor, evaluation budget); the second-order pairs get looser rtols to
    # keep the test fast, and fehlberg2's estimate (k3 - k1)/512 undershoots its true error
    rtol, factor, budget = {"dopri5": (1e-6, 10, 120), "tsit5": (1e-6, 10, 120),
                            "bosh3": (1e-6, 10, 400), "fehlberg2": (1e-5, 200, 1000),
                            "adaptive_heun": (3e-4, 10, 300)}[method]
    f = Counted()
    t = [0.0, 0.3, 1.0, 2.0]
    ys = diffeq.odeint(f, T([1.0, -2.0]), t, method=method, rtol=rtol, atol=1e-9)
    exact = np.exp(-np.array(t))[:, None] * np.array([1.0, -2.0])
    assert ys.shape == (4, 2)
    assert host(ys)[0].tolist() == [1.0, -2.0]  # index 0 is y0 itself
    # t=2 is a step end; 0.3 and 1.0 are interpolated, and the low-order pairs' midpoint
    # anchors (torchdiffeq's c_mid) are only second-order accurate
    np.testing.assert_allclose(host(ys)[3], exact[3], rtol=factor * rtol)
    interp = factor if method in ("dopri5", "tsit5", "bosh3") else 30 * factor
    np.testing.assert_allclose(host(ys)[1:3], exact[1:3], rtol=interp * rtol)
    assert 6 < f.n < budget
    # tighter tolerance: smaller error, more evaluations
    g = Counted()
    ys2 = diffeq.odeint(g, T([1.0, -2.0]), t, method=method, rtol=rtol / 10, atol=1e-10)
    err1, err2 = np.abs(host(ys) - exact).max(), np.abs(host(ys2) - exact).max()
    assert err2 < err1 / 1.5 and g.n > f.n


def test_decay_default_method_and_tolerances():
    f = Counted()
    ys = diffeq.odeint(f, T([1.0]), T([0.0, 1.0]))  # dopri5, rtol=1e-7, atol=1e-9
    assert abs(ys[-1].item() - math.exp(-1.0)) < 1e-7
    assert f.n < 120


def test_return_trajectory_false():
    """Lucid 3's extension (its Flow Matching sampler calls it): only the final state."""
    t = np.linspace(0.0, 1.0, 6)
    for method in ("dopri5", "euler", "implicit_adams"):
        last = diffeq.odeint(lambda s, y: -y, T([1.0, 2.0]), t, method=method,
                             return_trajectory=False)
        full = diffeq.odeint(lambda s, y: -y, T([1.0, 2.0]), t, method=method)
        assert last.shape == (2,)
        np.testing.assert_array_equal(host(last), host(full[-1]))
    x, v = diffeq.odeint(lambda s, st: (st[1], -st[0]), (T(1.0), T(0.0)), [0.0, 1.0],
                         return_trajectory=False, options={"dtype": lucid.float32})
    assert x.shape == () and abs(x.item() - math.cos(1.0)) < 1e-6


def test_backward_in_time():
    ys = diffeq.odeint(lambda t, y: -y, T([math.exp(-1.0)]), [1.0, 0.5, 0.0])
    np.testing.assert_allclose(host(ys)[:, 0], np.exp(-np.array([1.0, 0.5, 0.0])), rtol=1e-6)
    ys = diffeq.odeint(lambda t, y: -y, T([math.exp(-1.0)]), [1.0, 0.0], method="rk4",
                       options={"step_size": 0.05})
    assert abs(ys[-1].item() - 1.0) < 1e-6


def test_harmonic_oscillator_tuple_state():
    t = np.linspace(0.0, 2 * math.pi, 5)
    x0, v0 = T([1.0, 0.0]), T(0.5)

    def f(t, state):
        x, v = state
        return v * lucid.ones_like(x) * lucid.tensor([1.0, 0.0], dtype=F64), -x[0]

    xs, vs = diffeq.odeint(f, (x0, v0), t, rtol=1e-8, atol=1e-10)
    assert xs.shape == (5, 2) and vs.shape == (5,)
    # x'' = -x with x(0)=1, x'(0)=0.5
    np.testing.assert_allclose(host(xs)[:, 0], np.cos(t) + 0.5 * np.sin(t), atol=1e-6)
    np.testing.assert_allclose(host(vs), -np.sin(t) + 0.5 * np.cos(t), atol=1e-6)
    np.testing.assert_array_equal(host(xs)[:, 1], 0.0)


def test_tuple_state_mixed_norm():
    """A tuple state's error norm is the max of per-element rms norms (torchdiffeq): a constant
    99-element companion does not dilute the error of the moving element."""
    alone, pair, flat = Counted(), Counted(), Counted()
    diffeq.odeint(alone, T([1.0]), [0.0, 1.0], rtol=1e-6, atol=1e-6)
    diffeq.odeint(lambda t, s: (pair(t, s[0]), s[1] * 0.0), (T([1.0]), lucid.zeros(99, dtype=F64)),
                  [0.0, 1.0], rtol=1e-6, atol=1e-6)
    rate = T([1.0] + [0.0] * 99)
    diffeq.odeint(lambda t, y: flat(t, y) * rate, T([1.0] + [0.0] * 99), [0.0, 1.0], rtol=1e-6,
                  atol=1e-6)
    assert pair.n == alone.n and flat.n < alone.n


def test_linear_system_matrix_exp():
    A = T([[0.0, 1.0], [-2.0, -3.0]])  # eigenvalues -1, -2
    y0 = T([1.0, 1.0])
    t = [0.0, 0.5, 1.5]
    ys = diffeq.odeint(lambda t, y: A @ y, y0, t, method="tsit5", rtol=1e-9, atol=1e-12)
    for i, s in enumerate(t):
        # e^{As} = (2e^{-s} - e^{-2s}) I + (e^{-s} - e^{-2s}) A  (Cayley-Hamilton)
        closed = (2 * math.exp(-s) - math.exp(-2 * s)) * np.eye(2) + \
            (math.exp(-s) - math.exp(-2 * s)) * host(A)
        np.testing.assert_allclose(host(ys[i]), closed @ host(y0), atol=1e-8)
        np.testing.assert_allclose(host(ys[i]), host(lucid.linalg.matrix_exp(A * s) @ y0),
                                   atol=1e-8)


# ---------------------------------------------------------------- tableaux and fixed steps

def _numpy_step(tab, f, t, y, h):
    ks = []
    for i in range(tab.stages):
        yi = y + h * sum(a * k for a, k in zip(tab.a[i], ks))
        ks.append(f(t + tab.c[i] * h, yi))
    return y + h * sum(b * k for b, k in zip(tab.b, ks))


@pytest.mark.parametrize("method", FIXED)
def test_fixed_step_matches_numpy_recomputation(method):
    """Non-autonomous, one step per interval of a non-uniform grid."""
    t = [0.0, 0.1, 0.35, 0.4]
    f_np = lambda s, y: np.array([y[1], -np.sin(y[0]) + s])  # noqa: E731
    ys = diffeq.odeint(lambda s, y: lucid.stack([y[1], -lucid.sin(y[0]) + s]),
                       T([0.3, -0.2]), T(t), method=method)
    y, ref = np.array([0.3, -0.2]), [np.array([0.3, -0.2])]
    for a, b in zip(t, t[1:]):
        y = _numpy_step(TABLEAU[method], f_np, a, y, b - a)
        ref.append(y)
    np.testing.assert_allclose(host(ys), np.stack(ref), rtol=1e-13, atol=1e-15)


def test_rk4_is_the_three_eighths_rule():
    f = lambda t, y: y * lucid.cos(t)  # noqa: E731
    a = diffeq.odeint(f, T([1.0]), [0.0, 0.5], method="rk4")[-1].item()
    b = diffeq.odeint(f, T([1.0]), [0.0, 0.5], method=diffeq.RK4_CLASSIC)[-1].item()
    fn = lambda s, y: y * np.cos(s)  # noqa: E731
    assert abs(a - _numpy_step(diffeq.RK4, fn, 0.0, 1.0, 0.5)) < 1e-15
    assert abs(b - _numpy_step(diffeq.RK4_CLASSIC, fn, 0.0, 1.0, 0.5)) < 1e-15
    assert abs(a - b) > 1e-9  # the two fourth-order rules differ at fifth order


@pytest.mark.parametrize("method,order", [("euler", 1), ("midpoint", 2), ("heun2", 2),
                                          ("heun3", 3), ("rk4", 4), ("rk4_classic", 4)])
def test_convergence_order(method, order):
    """Halving the step divides the global error by ~2**order (y' = y cos t, y = e^{sin t})."""
    f = lambda t, y: y * lucid.cos(t)  # noqa: E731
    errs = []
    for n in (16, 32):
        ys = diffeq.odeint(f, T([1.0]), np.linspace(0.0, 1.0, n + 1), method=method)
        errs.append(abs(ys[-1].item() - math.exp(math.sin(1.0))))
    measured = math.log2(errs[0] / errs[1])
    # (the 3/8 rule's leading error constant is small, so it nears 4 from below: 3.84 here)
    assert order - 0.3 < measured < order + 0.3, (method, measured)


def test_custom_tableau_ralston():
    ralston = diffeq.ButcherTableau(a=((), (2 / 3,)), b=(0.25, 0.75), c=(0.0, 2 / 3), order=2,
                                    name="ralston")
    f = lambda t, y: y * lucid.cos(t)  # noqa: E731
    errs = [abs(diffeq.odeint(f, T([1.0]), np.linspace(0, 1, n + 1), method=ralston)[-1].item()
                - math.exp(math.sin(1.0))) for n in (16, 32)]
    assert 1.7 < math.log2(errs[0] / errs[1]) < 2.5
    assert ralston.stages == 2 and not ralston.is_adaptive and diffeq.DOPRI5.is_adaptive


def test_tableau_validation():
    with pytest.raises(ValueError, match="must sum to 1"):
        diffeq.ButcherTableau(a=((), (0.5,)), b=(0.5, 0.6), c=(0.0, 0.5), order=2, name="x")
    with pytest.raises(ValueError, match=r"c\[1\]=0.4 but sum\(a\[1\]\)=0.5"):
        diffeq.ButcherTableau(a=((), (0.5,)), b=(0.0, 1.0), c=(0.0, 0.4), order=2, name="x")
    with pytest.raises(ValueError, match=r"ragged .* or square .* got row widths \[2, 1\]"):
        diffeq.ButcherTableau(a=((0.5, 0.0), (0.5,)), b=(0.5, 0.5), c=(0.5, 0.5), order=2,
                              name="x")
    with pytest.raises(ValueError, match="also needs mid"):
        diffeq.ButcherTableau(a=((), (1.0,)), b=(0.5, 0.5), c=(0.0, 1.0), order=2, name="x",
                              b_error=(0.5, -0.5))
    for tab in TABLEAU.values():  # every built-in: order conditions up to order 3 hold
        b, c = np.array(tab.b), np.array(tab.c)
        assert abs(b.sum() - 1) < 1e-12
        if tab.order >= 2:
            assert abs(b @ c - 0.5) < 1e-12, tab.name
        if tab.order >= 3:
            assert abs(b @ c ** 2 - 1 / 3) < 1e-12, tab.name
        for q in range(min(tab.order, 4)):  # quadrature conditions: sum b c^q = 1 / (q + 1)
            assert abs(b @ c ** q - 1 / (q + 1)) < 1e-12, (tab.name, q)
        if tab.is_adaptive:  # y(t + h/2) = y + h sum(mid k): quadrature conditions at 1/2
            mid, err = np.array(tab.mid), np.array(tab.b_error)
            assert abs(err.sum()) < 1e-12 and abs(mid.sum() - 0.5) < 1e-12, tab.name
            assert abs(mid @ c - 1 / 8) < 1e-12, tab.name
            if tab.order >= 3:
                assert abs(mid @ c ** 2 - 1 / 24) < 1e-12, tab.name
            if tab.order >= 5:
                assert abs(mid @ c ** 3 - 1 / 64) < 1e-12, tab.name


# ---------------------------------------------------------------- implicit Runge-Kutta

@pytest.mark.parametrize("method", sorted(IMPLICIT))
def test_implicit_convergence_order(method):
    f = lambda t, y: y * lucid.cos(t)  # noqa: E731
    order = IMPLICIT[method]
    with lucid.no_grad():  # (no graph: no exact-Jacobian Newton step for the derivative)
        errs = [abs(diffeq.odeint(f, T([1.0]), np.linspace(0.0, 1.0, n + 1), method=method,
                                  rtol=1e-12, atol=1e-14)[-1].item() - math.exp(math.sin(1.0)))
                for n in ((6, 12) if order == 3 else (4, 8))]
    assert order - 0.3 < math.log2(errs[0] / errs[1]) < order + 0.3, method


def test_implicit_stiff_problem_and_gradient():
    """y' = -L (y - cos t), L = 50, at h = 0.1 (h L = 5: outside RK4's stability region)."""
    L, t = 50.0, np.linspace(0.0, 2.0, 21)
    f = lambda s, y: -L * (y - lucid.cos(s))  # noqa: E731
    exact = (L * L * math.cos(2.0) + L * math.sin(2.0)) / (L * L + 1) + \
        (1 - L * L / (L * L + 1)) * math.exp(-2 * L)
    with lucid.no_grad():
        assert abs(diffeq.odeint(f, T([1.0]), t, method="rk4")[-1].item() - exact) > 1.0
        for method, tol in (("radauIIA5", 1e-5), ("implicit_euler", 2e-3), ("trbdf2", 2e-3)):
            assert abs(diffeq.odeint(f, T([1.0]), t, method=method)[-1].item() - exact) < tol

    def loss(y0, W):
        ys = diffeq.odeint(lambda s, y: lucid.tanh(W @ y) - y, y0, [0.0, 0.5, 1.0],
                           method="gl4", rtol=1e-10, atol=1e-12)
        return (ys[1] * T([1.0, -2.0])).sum() + (ys[2] ** 2).sum()

    y0, W = T([0.4, -0.3], requires_grad=True), T([[-0.5, 0.8], [-0.7, -0.2]], requires_grad=True)
    loss(y0, W).backward()
    np.testing.assert_allclose(host(y0.grad), _fd(lambda v: loss(v, W.detach()).item(), y0),
                               rtol=1e-6)
    np.testing.assert_allclose(host(W.grad), _fd(lambda v: loss(y0.detach(), v).item(), W),
                               rtol=1e-6)


def test_implicit_errors_and_warning():
    f = lambda t, y: -y * y  # noqa: E731
    with pytest.warns(RuntimeWarning, match="Newton iteration of 'gl6' did not converge in "
                                            "max_iters=1"):
        diffeq.odeint(f, T([1.0]), [0.0, 1.0], method="gl6", options={"max_iters": 1},
                      rtol=1e-14, atol=1e-14)
    with pytest.raises(ValueError, match="odeint_dense: the implicit method 'radauIIA5'"):
        diffeq.odeint_dense(f, T([1.0]), 0.0, 1.0, method="radauIIA5")
    with pytest.raises(ValueError, match="cannot be adaptive"):
        diffeq.ButcherTableau(a=((1.0,),), b=(1.0,), c=(1.0,), order=1, name="x",
                              b_error=(0.0,), mid=(0.5,))
    assert diffeq.GL4.is_implicit and not diffeq.RK4.is_implicit


# ---------------------------------------------------------------- Adams multistep

def test_adams_weights_match_the_classical_tables():
    from lucid.diffeq._multistep import weights
    assert [w * 24 for w in weights(4, False)] == [55.0, -59.0, 37.0, -9.0]
    assert [w * 24 for w in weights(4, True)] == [9.0, 19.0, -5.0, 1.0]
    assert [round(w * 720, 9) for w in weights(5, True)] == [251.0, 646.0, -264.0, 106.0, -19.0]
    assert weights(1, False) == (1.0,) and weights(2, True) == (0.5, 0.5)  # Euler, trapezoid


@pytest.mark.parametrize("method", ["explicit_adams", "implicit_adams", "fixed_adams"])
def test_adams_order_cost_and_rk4_start(method):
    f = lambda t, y: y * lucid.cos(t)  # noqa: E731
    errs = []
    for n in (32, 64):
        ys = diffeq.odeint(f, T([1.0]), np.linspace(0.0, 1.0, n + 1), method=method,
                           options={"max_order": 4})
        errs.append(abs(ys[-1].item() - math.exp(math.sin(1.0))))
    assert 3.7 < math.log2(errs[0] / errs[1]) < 4.4
    c = Counted()
    diffeq.odeint(c, T([1.0]), np.linspace(0.0, 1.0, 21), method=method)
    if method == "explicit_adams":  # 3 RK4 starting steps (4 evaluations), then 1 per step
        assert c.n == 3 * 4 + 17
    else:  # plus 1 to max_iters=4 corrector evaluations per Adams step
        assert 3 * 4 + 17 * 2 <= c.n <= 3 * 4 + 17 * 5
    # a non-uniform grid voids the weights: every step is then an RK4 (3/8) step
    t = [0.0, 0.1, 0.3, 0.35, 0.5, 0.9]
    np.testing.assert_array_equal(host(diffeq.odeint(f, T([1.0]), t, method=method)),
                                  host(diffeq.odeint(f, T([1.0]), t, method="rk4")))


def test_adams_gradient_and_errors():
    def loss(y0):
        ys = diffeq.odeint(lambda t, y: lucid.tanh(y[[1, 0]]) * T([1.0, -1.0]), y0,
                           [0.0, 1.0], method="implicit_adams",
                           options={"step_size": 0.05, "max_order": 5}, rtol=1e-12, atol=1e-12)
        return (ys[-1] ** 2).sum()

    y0 = T([0.4, -0.3], requires_grad=True)
    loss(y0).backward()
    np.testing.assert_allclose(host(y0.grad), _fd(lambda v: loss(v).item(), y0), rtol=1e-6)
    f = lambda t, y: -y  # noqa: E731
    with pytest.raises(ValueError, match=r"options\['max_order'\] must be an int in \[1, 12\]"):
        diffeq.odeint(f, T([1.0]), [0.0, 1.0], method="explicit_adams",
                      options={"max_order": 13})
    with pytest.raises(ValueError, match="odeint_dense: the Adams method 'implicit_adams'"):
        diffeq.odeint_dense(f, T([1.0]), 0.0, 1.0, method="implicit_adams")
    with pytest.raises(ValueError, match="odeint_event: the Adams method"):
        diffeq.odeint_event(f, T([1.0]), 0.0, event_fn=lambda t, y: y - 0.5,
                            method="explicit_adams")


# ---------------------------------------------------------------- options and dense output

def test_fixed_step_size_and_interp():
    f = lambda t, y: -y  # noqa: E731
    t = [0.0, 0.25, 0.6, 1.0]
    lin = diffeq.odeint(f, T([1.0]), t, method="rk4", options={"step_size": 0.1})
    cub = diffeq.odeint(f, T([1.0]), t, method="rk4",
                        options={"step_size": 0.1, "interp": "cubic"})
    exact = np.exp(-np.array(t))
    # t=0.6 and t=1.0 lie on the grid: rk4's error only (~1e-7)
    np.testing.assert_allclose(host(lin)[[2, 3], 0], exact[[2, 3]], atol=1e-6)
    # t=0.25 is mid-interval: linear interpolation errs by ~h^2/8 y'' ~ 1e-3; cubic by ~1e-6
    assert 3e-4 < abs(host(lin)[1, 0] - exact[1]) < 2e-3
    assert abs(host(cub)[1, 0] - exact[1]) < 1e-5
    grid = lambda func, y0, t: lucid.linspace(0.0, 1.0, 21, dtype=F64)  # noqa: E731
    g = diffeq.odeint(f, T([1.0]), [0.0, 1.0], method="euler",
                      options={"grid_constructor": grid})
    assert abs(g[-1].item() - 0.95 ** 20) < 1e-14


def test_adaptive_options():
    f = Counted()
    diffeq.odeint(f, T([1.0]), [0.0, 1.0], options={"max_step": 0.05})
    assert f.n >= 20 * 6  # at least 20 steps of 6 new stages each
    # step_t: y' = relu(t - 0.5) has a kink at 0.5; stepping onto it leaves only steps on which
    # f is linear in t, which dopri5 integrates exactly: y(1) = 0.5**2 / 2
    kink = lambda t, y: lucid.relu(t - 0.5) * lucid.ones_like(y)  # noqa: E731
    y = diffeq.odeint(kink, T([0.0]), [0.0, 1.0], options={"step_t": [0.5]})
    assert abs(y[-1].item() - 0.125) < 1e-14
    with pytest.raises(RuntimeError, match="max_num_steps=3 exceeded"):
        diffeq.odeint(lambda t, y: -y, T([1.0]), [0.0, 10.0],
                      options={"max_num_steps": 3, "first_step": 0.01})


@pytest.mark.parametrize("method", ADAPTIVE)
def test_dense_output_interpolant(method):
    """The quartic anchored on each tableau's ``mid`` is accurate between steps."""
    rtol, tol = {"dopri5": (1e-10, 1e-8), "tsit5": (1e-10, 1e-8), "bosh3": (1e-7, 5e-6),
                 "fehlberg2": (1e-6, 3e-3), "adaptive_heun": (1e-4, 3e-3)}[method]
    dense = diffeq.odeint_dense(lambda t, y: y * lucid.cos(t), T([1.0]), 0.0, 3.0,
                                method=method, rtol=rtol, atol=rtol)
    q = np.linspace(0.0, 3.0, 23)
    got = np.array([dense(float(s)).item() for s in q])
    np.testing.assert_allclose(got, np.exp(np.sin(q)), atol=tol)
    with pytest.raises(ValueError, match="outside the solved interval"):
        dense(3.5)


def test_dense_backwards_tuple_and_fixed():
    dense = diffeq.odeint_dense(lambda t, s: (s[1], -s[0]), (T(0.0), T(1.0)), 2.0, 0.0)
    x, v = dense(T(1.0))
    assert abs(x.item() - math.sin(-1.0)) < 1e-7 and abs(v.item() - math.cos(-1.0)) < 1e-7
    d2 = diffeq.odeint_dense(lambda t, y: -y, T([1.0]), 0.0, 1.0, method="rk4",
                             options={"step_size": 0.25, "interp": "cubic"})
    assert abs(d2(0.5).item() - math.exp(-0.5)) < 3e-5  # cubic Hermite: ~h^4/384 |y''''|


def test_odeint_matches_ode_at_output_times_exactly_for_adaptive_ends():
    ys = diffeq.odeint(lambda t, y: -y, T([2.0]), [0.0, 1.0], method="bosh3")
    dense = diffeq.odeint_dense(lambda t, y: -y, T([2.0]), 0.0, 1.0, method="bosh3")
    assert abs(ys[-1].item() - dense(1.0).item()) < 1e-13


# ---------------------------------------------------------------- gradients

def _fd(fn, x, eps=1e-6):
    x = host(x)
    out = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        hi, lo = x.copy(), x.copy()
        hi[i] += eps
        lo[i] -= eps
        out[i] = (fn(T(hi.tolist())) - fn(T(lo.tolist()))) / (2 * eps)
    return out


@pytest.mark.parametrize("method", ["rk4", "dopri5"])
def test_grad_y0_t_params_vs_finite_differences(method):
    W0 = [[-0.5, 0.8], [-0.7, -0.2]]

    def solve(y0, t, W):
        return diffeq.odeint(lambda s, y: lucid.tanh(W @ y) + 0.1 * s, y0, t, method=method,
                             rtol=1e-8, atol=1e-10)

    def loss(y0, t, W):
        ys = solve(y0, t, W)
        return (ys[1] * T([1.0, -2.0])).sum() + (ys[2] ** 2).sum()

    y0, t, W = T([0.4, -0.3], requires_grad=True), T([0.0, 0.4, 1.0], requires_grad=True), \
        T(W0, requires_grad=True)
    loss(y0, t, W).backward()
    checks = [(y0, lambda v: loss(v, t.detach(), W.detach()).item()),
              (t, lambda v: loss(y0.detach(), v, W.detach()).item()),
              (W, lambda v: loss(y0.detach(), t.detach(), v).item())]
    # (dopri5's parameter gradient is checked against the adjoint's in the adjoint test)
    for x, fn in checks[:2] if method == "dopri5" else checks:
        np.testing.assert_allclose(host(x.grad), _fd(fn, x), rtol=1e-5, atol=1e-7)


def test_grad_t_closed_form():
    """y = y0 exp(-k (T - t0)): dy/dT = -k y, dy/dt0 = k y, dy/dk = -(T - t0) y."""
    k, t = T(0.7, requires_grad=True), T([0.2, 1.5], requires_grad=True)
    y = diffeq.odeint(lambda s, y: -k * y, T([3.0]), t, rtol=1e-10, atol=1e-12)[-1, 0]
    y.backward()
    exact = 3.0 * math.exp(-0.7 * 1.3)
    assert abs(y.item() - exact) < 1e-9
    np.testing.assert_allclose(host(t.grad), [0.7 * exact, -0.7 * exact], rtol=1e-7)
    assert abs(k.grad.item() + 1.3 * exact) < 1e-8


def test_vmap_and_func_grad_fixed_step():
    W = T([[-0.5, 0.8], [-0.7, -0.2]])
    f = lambda t, y: lucid.tanh(W @ y)  # noqa: E731
    solve = lambda y0: diffeq.odeint(f, y0, [0.0, 0.5, 1.0], method="rk4")[-1]  # noqa: E731
    batch = T([[0.4, -0.3], [1.0, 2.0], [-0.5, 0.0]])
    got = lucid.func.vmap(solve)(batch)
    np.testing.assert_allclose(host(got), np.stack([host(solve(b)) for b in batch]), rtol=1e-14)
    g = lucid.func.grad(lambda y0: solve(y0).sum())(batch[0])
    np.testing.assert_allclose(host(g), _fd(lambda v: solve(v).sum().item(), batch[0]),
                               rtol=1e-6)


def test_func_transforms_through_adaptive_and_second_order():
    """grad and jvp through dopri5 (the host reads are of detached values), and a hessian
    through rk4: y(1) = 3 e^{-k}, so d/dk = -3 e^{-k} and d2/dk2 = 3 e^{-k}."""
    y0, k = T([1.0, 2.0]), T(0.5)

    def solve(k, **kw):
        return diffeq.odeint(lambda t, y: -k * y, y0, [0.0, 1.0], **kw)[-1].sum()

    exact = 3 * math.exp(-0.5)
    assert abs(lucid.func.grad(solve)(k).item() + exact) < 1e-6
    _, tangent = lucid.func.jvp(solve, (k,), (T(1.0),))
    assert abs(tangent.item() + exact) < 1e-6
    hess = lucid.func.hessian(lambda k: solve(k, method="rk4", options={"step_size": 0.05}))(k)
    assert abs(hess.item() - exact) < 1e-6


# ---------------------------------------------------------------- adjoint

def test_adjoint_equals_backprop():
    W0, b0 = [[-0.5, 0.8], [-0.7, -0.2]], [0.1, -0.3]
    grads = []
    for solver in (diffeq.odeint, diffeq.odeint_adjoint):
        W, b = T(W0, requires_grad=True), T(b0, requires_grad=True)
        y0, t = T([0.4, -0.3], requires_grad=True), T([0.0, 0.5, 1.2], requires_grad=True)
        kw = {"adjoint_params": [W, b]} if solver is diffeq.odeint_adjoint else {}
        ys = solver(lambda s, y: lucid.tanh(W @ y + b) * lucid.cos(s), y0, t, rtol=1e-9,
                    atol=1e-11, **kw)
        ((ys[1] ** 2).sum() + (ys[2] * T([1.0, 3.0])).sum()).backward()
        grads.append([host(x.grad) for x in (y0, t, W, b)] + [host(ys)])
    for direct, adjoint in zip(*grads):
        np.testing.assert_allclose(adjoint, direct, rtol=1e-6, atol=1e-8)


def test_adjoint_module_params_and_tuple_state():
    lucid.manual_seed(0)
    net = lucid.nn.Linear(2, 2).to(F64)

    class Dyn(lucid.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, t, state):
            x, v = state
            return v, -lucid.tanh(self.net(x))

    losses = []
    for solver in (diffeq.odeint, diffeq.odeint_adjoint):
        net.zero_grad()
        x0 = T([0.3, -0.1], requires_grad=True)
        xs, vs = solver(Dyn(), (x0, T([0.0, 0.2])), [0.0, 1.0], method="rk4",
                        options={"step_size": 0.05})
        (xs[-1].sum() + (vs[-1] ** 2).sum()).backward()
        losses.append([host(x0.grad)] + [host(p.grad) for p in net.parameters()])
    for direct, adjoint in zip(*losses):
        # rk4 at h=0.05 in both directions: the continuous adjoint agrees to ~h^4
        np.testing.assert_allclose(adjoint, direct, rtol=1e-5, atol=1e-7)


def test_adjoint_gradient_closed_form_and_seminorm():
    grads, nfes = [], []
    for opts in (None, {"norm": "seminorm"}):
        k = T(0.5, requires_grad=True)
        f = lambda t, y: -k * y  # noqa: E731
        counted = Counted()
        ys = diffeq.odeint_adjoint(lambda t, y: (counted(t, y), f(t, y))[1], T([1.0]),
                                   [0.0, 1.0], adjoint_params=[k], adjoint_options=opts)
        counted.n = 0
        ys[-1].sum().backward()
        grads.append(k.grad.item())
        nfes.append(counted.n)
    assert abs(grads[0] + math.exp(-0.5)) < 1e-7 and abs(grads[1] + math.exp(-0.5)) < 1e-6
    assert nfes[1] <= nfes[0]  # seminorm: the gradient part does not shrink the steps


def test_norm_option_and_perturb():
    f = Counted()
    diffeq.odeint(f, T([1.0, 1e-3]), [0.0, 1.0], rtol=1e-6, atol=1e-9)
    g = Counted()  # a max-norm is stricter than rms: at least as many steps
    y = diffeq.odeint(g, T([1.0, 1e-3]), [0.0, 1.0], rtol=1e-6, atol=1e-9,
                      options={"norm": lambda x: x.abs().max()})
    assert g.n >= f.n and abs(y[-1, 0].item() - math.exp(-1)) < 1e-5
    y = diffeq.odeint(lambda t, y: -y, T([1.0]), [0.0, 1.0], method="euler",
                      options={"step_size": 0.5, "perturb": False})
    assert y[-1].item() == 0.25
    with pytest.raises(ValueError, match=r"options\['perturb'\]=True is not supported"):
        diffeq.odeint(lambda t, y: -y, T([1.0]), [0.0, 1.0], method="euler",
                      options={"perturb": True})


# ---------------------------------------------------------------- events

def _fall(t, y):
    return lucid.stack([y[1], lucid.tensor(-9.8, dtype=y.dtype, device=y.device)])


@pytest.mark.parametrize("method,options", [("dopri5", None), ("tsit5", None),
                                            ("rk4", {"step_size": 0.1, "interp": "cubic"})])
def test_event_falling_body_and_gradients(method, options):
    """h + v0 t - g t^2/2 = 0: t* = (v0 + r)/g, v* = -r with r = sqrt(v0^2 + 2 g h)."""
    g, h, v0 = 9.8, 10.0, 2.0
    r = math.sqrt(v0 ** 2 + 2 * g * h)
    y0 = T([h, v0], requires_grad=True)
    t0 = T(0.5, requires_grad=True)
    event_t, sol = diffeq.odeint_event(_fall, y0, t0, event_fn=lambda t, y: y[0],
                                       method=method, options=options)
    assert sol.shape == (2, 2) and host(sol)[0].tolist() == [h, v0]
    assert abs(event_t.item() - (0.5 + (v0 + r) / g)) < 1e-9
    np.testing.assert_allclose(host(sol)[1], [0.0, -r], atol=1e-9)
    dt_dy0, dt_dt0 = lucid.autograd.grad(event_t, [y0, t0], retain_graph=True)
    np.testing.assert_allclose(host(dt_dy0), [1 / r, (1 + v0 / r) / g], rtol=1e-7)
    assert abs(dt_dt0.item() - 1.0) < 1e-9  # autonomous: the event moves with the start
    (dv_dy0,) = lucid.autograd.grad(sol[1, 1], [y0])  # total derivative of the impact speed
    np.testing.assert_allclose(host(dv_dy0), [-g / r, -v0 / r], rtol=1e-7)


def test_event_reverse_time_tuple_state_and_errors():
    # x' = 1 backwards from x(0) = 0: x = -1 at t = -1 (odeint with event_fn, tuple state)
    event_t, (xs, vs) = diffeq.odeint(lambda t, s: (lucid.ones_like(s[0]), s[1] * 0.0),
                                      (T(0.0), T([1.0, 2.0])), [0.0, -5.0],
                                      event_fn=lambda t, s: s[0] + 1.0)
    assert abs(event_t.item() + 1.0) < 1e-12 and abs(xs[1].item() + 1.0) < 1e-12
    assert vs.shape == (2, 2)
    et, sol = diffeq.odeint_event(lambda t, y: -y, T([1.0]), 0.0, reverse_time=True,
                                  event_fn=lambda t, y: y - math.e)  # y = e^{-t}: t* = -1
    assert abs(et.item() + 1.0) < 1e-7
    et, sol = diffeq.odeint_event(lambda t, y: -y, T([1.0]), 2.0, event_fn=lambda t, y: y - 1)
    assert et.item() == 2.0  # a zero at t0 is an event at t0
    with pytest.raises(ValueError, match="needs options\\['step_size'\\]"):
        diffeq.odeint_event(lambda t, y: -y, T([1.0]), 0.0, event_fn=lambda t, y: y - 0.5,
                            method="euler")
    with pytest.raises(ValueError, match=r"event_fn must return a single-element Tensor, "
                                         r"got \(2,\)"):
        diffeq.odeint_event(lambda t, y: -y, T([1.0, 2.0]), 0.0, event_fn=lambda t, y: y)
    with pytest.raises(NotImplementedError, match="odeint_interface"):
        diffeq.odeint_event(lambda t, y: -y, T([1.0]), 0.0, event_fn=lambda t, y: y - 0.5,
                            odeint_interface=diffeq.odeint_adjoint)


# ---------------------------------------------------------------- errors and surface

def test_errors():
    y0 = T([1.0])
    f = lambda t, y: -y  # noqa: E731
    with pytest.raises(ValueError, match=r"odeint: t must be strictly increasing or strictly "
                                         r"decreasing; t\[1\]=1.0, t\[2\]=0.5"):
        diffeq.odeint(f, y0, [0.0, 1.0, 0.5])
    with pytest.raises(ValueError, match="strictly increasing"):
        diffeq.odeint(f, y0, [0.0, 0.0, 1.0])
    with pytest.raises(ValueError, match=r"t must be 1-D, got shape \(1, 2\)"):
        diffeq.odeint(f, y0, T([[0.0, 1.0]]))
    with pytest.raises(ValueError, match="at least 2 time points"):
        diffeq.odeint(f, y0, [0.0])
    with pytest.raises(ValueError, match="odeint: unknown method 'rk5'"):
        diffeq.odeint(f, y0, [0.0, 1.0], method="rk5")
    with pytest.raises(ValueError, match="odeint_adjoint: unknown method 'rk5'"):
        diffeq.odeint_adjoint(f, y0, [0.0, 1.0], method="rk5")
    with pytest.raises(ValueError, match=r"odeint: func returned shape \(2,\) but y0 has "
                                         r"shape \(1,\)"):
        diffeq.odeint(lambda t, y: lucid.cat([y, y]), y0, [0.0, 1.0])
    with pytest.raises(TypeError, match="odeint: func must return a Tensor, got float"):
        diffeq.odeint(lambda t, y: 1.0, y0, [0.0, 1.0], method="euler")
    with pytest.raises(TypeError, match="floating dtype"):
        diffeq.odeint(f, lucid.tensor([1, 2]), [0.0, 1.0])
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['step_size'\] for method "
                                         r"'dopri5'"):
        diffeq.odeint(f, y0, [0.0, 1.0], options={"step_size": 0.1})
    with pytest.raises(ValueError, match="func must return a tuple of 2 Tensors"):
        diffeq.odeint(lambda t, s: s[0], (y0, y0), [0.0, 1.0])
    with pytest.raises(ValueError, match=r"func returned \(2,\) for state element 1"):
        diffeq.odeint(lambda t, s: (s[0], lucid.cat([s[1], s[1]])), (y0, y0), [0.0, 1.0])
    with pytest.raises(RuntimeError, match="odeint: the adaptive method 'dopri5' reads each "
                                           "step's error ratio to the host"):
        lucid.func.vmap(lambda y: diffeq.odeint(f, y, [0.0, 1.0]))(T([[1.0], [2.0]]))
    with pytest.raises(ValueError, match="step_size must be a positive"):
        diffeq.odeint(f, y0, [0.0, 1.0], method="euler", options={"step_size": -0.1})


def test_surface_and_lazy_import():
    for name in ("DOPRI8", "SDE", "sdeint"):  # not implemented: absent
        assert not hasattr(diffeq, name)
    assert "odeint" in diffeq.__all__ and diffeq.RK4.name == "rk4"
    env = dict(os.environ)
    env.pop("PYTHONUNBUFFERED", None)
    code = "import sys, lucid; print('lucid.diffeq' in sys.modules); lucid.diffeq.odeint; " \
           "print('lucid.diffeq' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert out.stdout.split() == ["False", "True"], out.stderr
