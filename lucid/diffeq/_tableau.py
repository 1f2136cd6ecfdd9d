"""Butcher tableaux of the explicit Runge-Kutta methods (See NOTE [ODE solvers])."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["ButcherTableau", "EULER", "MIDPOINT", "HEUN2", "HEUN3", "RK4", "RK4_CLASSIC",
           "ADAPTIVE_HEUN", "FEHLBERG2", "BOSH3", "DOPRI5", "TSIT5", "IMPLICIT_EULER",
           "IMPLICIT_MIDPOINT", "TRAPEZOID", "RADAU_IIA3", "RADAU_IIA5", "GL4", "GL6", "SDIRK2",
           "TRBDF2"]

_TOL = 1e-10  # hand-entered decimals (Tsit5) sum to their stage times only to ~1e-15


@dataclass(frozen=True)
class ButcherTableau:
    r"""Coefficients of one explicit Runge-Kutta method.

    A step of size ``h`` from ``(t, y)`` evaluates ``k_i = f(t + c_i h, y + h sum_j a_ij k_j)``
    and returns ``y + h sum_i b_i k_i``.

    Parameters
    ----------
    a : sequence of sequences of float
        Stage matrix. An explicit method is written ragged: row ``i`` holds the ``i`` entries
        left of the diagonal, so ``a[0]`` is empty. An implicit method is written square (every
        row holds all ``s`` entries); its steps solve the stage equations by Newton's method.
    b : sequence of float
        Solution weights, one per stage, summing to 1.
    c : sequence of float
        Stage times as fractions of the step; ``c[i]`` must equal ``sum(a[i])``.
    order : int
        Order of the propagated solution (the step-size controller's exponent is ``1/order``).
    name : str
        Method name used in messages.
    b_error : sequence of float, optional
        ``b - b_hat``, the weights of the embedded error estimate. Its presence makes the
        method adaptive; it must sum to 0.
    mid : sequence of float, optional
        Weights giving the state at the middle of a step, ``y + h sum_i mid_i k_i``; anchors
        the quartic dense-output interpolant. Required with ``b_error``.

    Examples
    --------
    >>> import lucid.diffeq as diffeq
    >>> tab = diffeq.ButcherTableau(a=((), (0.5,)), b=(0.0, 1.0), c=(0.0, 0.5), order=2,
    ...                             name="my_midpoint")
    >>> tab.stages, tab.is_adaptive
    (2, False)

    Limitations
    -----------
    An implicit tableau cannot carry ``b_error`` (no adaptive implicit solver), and a square
    ``a`` that is strictly lower triangular is still run by the Newton solver.
    """

    a: tuple
    b: tuple
    c: tuple
    order: int
    name: str
    b_error: tuple | None = None
    mid: tuple | None = None

    def __post_init__(self):
        fl = lambda seq: tuple(float(v) for v in seq)  # noqa: E731
        object.__setattr__(self, "a", tuple(fl(row) for row in self.a))
        object.__setattr__(self, "b", fl(self.b))
        object.__setattr__(self, "c", fl(self.c))
        for field in ("b_error", "mid"):
            if getattr(self, field) is not None:
                object.__setattr__(self, field, fl(getattr(self, field)))
        self._validate()

    def _validate(self):
        n, msg = len(self.b), f"ButcherTableau({self.name!r}): "
        if not self.name or not isinstance(self.name, str):
            raise ValueError("ButcherTableau: name must be a non-empty string")
        if n == 0 or len(self.a) != n or len(self.c) != n:
            raise ValueError(msg + f"stage counts disagree: len(a)={len(self.a)}, len(b)={n}, "
                             f"len(c)={len(self.c)}")
        widths = [len(row) for row in self.a]
        if widths != list(range(n)) and widths != [n] * n:
            raise ValueError(msg + f"rows of a must be ragged (row i holds i entries: an explicit "
                             f"method) or square ({n} entries each: an implicit one), got row "
                             f"widths {widths}")
        if abs(sum(self.b) - 1.0) > _TOL:
            raise ValueError(msg + f"weights b must sum to 1, got {sum(self.b)!r}")
        for i, row in enumerate(self.a):
            if abs(sum(row) - self.c[i]) > _TOL:
                raise ValueError(msg + f"c[{i}]={self.c[i]!r} but sum(a[{i}])={sum(row)!r}")
        if int(self.order) < 1:
            raise ValueError(msg + f"order must be >= 1, got {self.order}")
        for field in ("b_error", "mid"):
            value = getattr(self, field)
            if value is not None and len(value) != n:
                raise ValueError(msg + f"{field} must hold {n} entries, got {len(value)}")
        if self.b_error is not None:
            if abs(sum(self.b_error)) > _TOL:
                raise ValueError(msg + f"b_error must sum to 0, got {sum(self.b_error)!r}")
            if self.mid is None:
                raise ValueError(msg + "an adaptive tableau (b_error given) also needs mid")
            if self.is_implicit:
                raise ValueError(msg + "an implicit tableau cannot be adaptive (b_error given)")

    @property
    def stages(self) -> int:
        """int: right-hand-side evaluations per step."""
        return len(self.b)

    @property
    def is_adaptive(self) -> bool:
        """bool: whether the tableau carries an embedded error estimate."""
        return self.b_error is not None

    @property
    def is_implicit(self) -> bool:
        """bool: whether ``a`` is written square (stages solved by Newton's method)."""
        return any(len(row) == len(self.b) for row in self.a)

    @property
    def is_fsal(self) -> bool:
        """bool: whether the last stage is evaluated at the new state ("first same as last")."""
        return (not self.is_implicit and self.b[-1] == 0.0 and self.a[-1] == self.b[:-1]
                and self.c[-1] == 1.0)


EULER = ButcherTableau(a=((),), b=(1.0,), c=(0.0,), order=1, name="euler")
MIDPOINT = ButcherTableau(a=((), (0.5,)), b=(0.0, 1.0), c=(0.0, 0.5), order=2, name="midpoint")
HEUN2 = ButcherTableau(a=((), (1.0,)), b=(0.5, 0.5), c=(0.0, 1.0), order=2, name="heun2")
HEUN3 = ButcherTableau(a=((), (1 / 3,), (0.0, 2 / 3)), b=(0.25, 0.0, 0.75),
                       c=(0.0, 1 / 3, 2 / 3), order=3, name="heun3")
# "rk4" is Kutta's 3/8 rule, as in torchdiffeq; the textbook method is "rk4_classic".
RK4 = ButcherTableau(a=((), (1 / 3,), (-1 / 3, 1.0), (1.0, -1.0, 1.0)),
                     b=(1 / 8, 3 / 8, 3 / 8, 1 / 8), c=(0.0, 1 / 3, 2 / 3, 1.0), order=4,
                     name="rk4")
RK4_CLASSIC = ButcherTableau(a=((), (0.5,), (0.0, 0.5), (0.0, 0.0, 1.0)),
                             b=(1 / 6, 1 / 3, 1 / 3, 1 / 6), c=(0.0, 0.5, 0.5, 1.0), order=4,
                             name="rk4_classic")

# Embedded pairs. ``b_error = b - b_hat``. ``mid`` as in torchdiffeq for Dormand-Prince
# (Shampine's weights) and Tsit5 (Tsitouras' interpolant at 1/2). The low-order pairs differ on
# purpose: torchdiffeq's midpoints for them are only first-order estimates of y(t + h/2)
# (sum(mid * c) != 1/8), which made the dense output far less accurate than the steps. Here:
# Bosh3 uses the cubic Hermite value at 1/2 (b/2 + (k1 - k4)/8, Bosh3 being FSAL; third order),
# Fehlberg2 the weights exact for quadrature to third order, Heun-Euler (3/8, 1/8) (second).
ADAPTIVE_HEUN = ButcherTableau(a=((), (1.0,)), b=(0.5, 0.5), c=(0.0, 1.0), order=2,
                               name="adaptive_heun", b_error=(-0.5, 0.5), mid=(3 / 8, 1 / 8))
FEHLBERG2 = ButcherTableau(a=((), (0.5,), (1 / 256, 255 / 256)),
                           b=(1 / 512, 255 / 256, 1 / 512), c=(0.0, 0.5, 1.0), order=2,
                           name="fehlberg2", b_error=(-1 / 512, 0.0, 1 / 512),
                           mid=(5 / 24, 1 / 3, -1 / 24))
BOSH3 = ButcherTableau(a=((), (0.5,), (0.0, 0.75), (2 / 9, 1 / 3, 4 / 9)),
                       b=(2 / 9, 1 / 3, 4 / 9, 0.0), c=(0.0, 0.5, 0.75, 1.0), order=3,
                       name="bosh3", b_error=(2 / 9 - 7 / 24, 1 / 3 - 1 / 4, 4 / 9 - 1 / 3, -1 / 8),
                       mid=(17 / 72, 1 / 6, 2 / 9, -1 / 8))
_DP_B = (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84)
_DP_BHAT = (5179 / 57600, 0.0, 7571 / 16695, 393 / 640, -92097 / 339200, 187 / 2100, 1 / 40)
DOPRI5 = ButcherTableau(
    a=((), (1 / 5,), (3 / 40, 9 / 40), (44 / 45, -56 / 15, 32 / 9),
       (19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729),
       (9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656), _DP_B),
    b=_DP_B + (0.0,), c=(0.0, 1 / 5, 3 / 10, 4 / 5, 8 / 9, 1.0, 1.0), order=5, name="dopri5",
    b_error=tuple(x - y for x, y in zip(_DP_B + (0.0,), _DP_BHAT)),
    mid=(6025192743 / 60171106304, 0.0, 51252292925 / 130801643196,
         -2691868925 / 90256659456, 187940372067 / 3189068634112,
         -1776094331 / 39487288512, 11237099 / 470086768))
_TS_B = (0.09646076681806523, 0.01, 0.4798896504144996, 1.379008574103742,
         -3.290069515436081, 2.324710524099774)
_TS_BHAT = (0.09468075576583946, 0.009183565540343253, 0.4877705284247616, 1.234297566930479,
            -2.707712349983526, 1.866628418170587, 1 / 66)
TSIT5 = ButcherTableau(
    a=((), (0.161,), (-0.008480655492356989, 0.335480655492356989),
       (2.897153057105493, -6.359448489975075, 4.362295432869581),
       (5.325864828439257, -11.748883564062828, 7.495539342889836, -0.09249506636175525),
       (5.86145544294642, -12.92096931784711, 8.159367898576159, -0.071584973281401,
        -0.028269050394068383), _TS_B),
    b=_TS_B + (0.0,), c=(0.0, 0.161, 0.327, 0.9, 0.9800255409045097, 1.0, 1.0), order=5,
    name="tsit5", b_error=tuple(x - y for x, y in zip(_TS_B + (0.0,), _TS_BHAT)),
    mid=(0.10741235230100377, 0.01135625, 0.39560903056045305, -0.34475214352593553,
         1.3161853649581645, -1.0170608542936508, 0.031249999999999993))



def _collocation(nodes, order, name):
    """The collocation method on ``nodes``: ``a_ij = int_0^{c_i} l_j``, ``b_j = int_0^1 l_j``
    (``l_j`` the Lagrange basis on the nodes); checked to integrate polynomials to ``order``."""
    c = np.array(nodes, dtype=np.float64)
    a, b = np.zeros((len(c), len(c))), np.zeros(len(c))
    for j in range(len(c)):
        basis = np.poly1d([1.0])
        for i in range(len(c)):
            if i != j:
                basis = basis * np.poly1d([1.0, -c[i]]) / (c[j] - c[i])
        prim = basis.integ()
        b[j] = prim(1.0) - prim(0.0)
        a[:, j] = prim(c) - prim(0.0)
    for q in range(order):  # sum_j b_j c_j^q = 1 / (q + 1)
        assert abs(b @ c ** q - 1.0 / (q + 1)) < 1e-12, (name, q)
    return ButcherTableau(a=a.tolist(), b=b.tolist(), c=c.tolist(), order=order, name=name)


_S3, _S6, _S15 = math.sqrt(3.0), math.sqrt(6.0), math.sqrt(15.0)
IMPLICIT_EULER = _collocation([1.0], 1, "implicit_euler")  # Radau IIA, 1 stage
IMPLICIT_MIDPOINT = _collocation([0.5], 2, "implicit_midpoint")  # Gauss-Legendre, 1 stage
TRAPEZOID = _collocation([0.0, 1.0], 2, "trapezoid")  # Lobatto IIIA, 2 stages
RADAU_IIA3 = _collocation([1 / 3, 1.0], 3, "radauIIA3")
RADAU_IIA5 = _collocation([(4 - _S6) / 10, (4 + _S6) / 10, 1.0], 5, "radauIIA5")
GL4 = _collocation([0.5 - _S3 / 6, 0.5 + _S3 / 6], 4, "gl4")
GL6 = _collocation([0.5 - _S15 / 10, 0.5, 0.5 + _S15 / 10], 6, "gl6")
_G = 1.0 - math.sqrt(2.0) / 2.0  # SDIRK2 (L-stable, Alexander 1977)
SDIRK2 = ButcherTableau(a=((_G, 0.0), (1.0 - _G, _G)), b=(1.0 - _G, _G), c=(_G, 1.0), order=2,
                        name="sdirk2")
_GT, _W = 2.0 - math.sqrt(2.0), math.sqrt(2.0) / 4.0  # TR-BDF2 (Bank et al. 1985)
TRBDF2 = ButcherTableau(a=((0.0, 0.0, 0.0), (_GT / 2, _GT / 2, 0.0), (_W, _W, 1.0 - 2 * _W)),
                        b=(_W, _W, 1.0 - 2 * _W), c=(0.0, _GT, 1.0), order=2, name="trbdf2")

_METHODS = {tab.name: tab for tab in (EULER, MIDPOINT, HEUN2, HEUN3, RK4, RK4_CLASSIC,
                                      ADAPTIVE_HEUN, FEHLBERG2, BOSH3, DOPRI5, TSIT5,
                                      IMPLICIT_EULER, IMPLICIT_MIDPOINT, TRAPEZOID, RADAU_IIA3,
                                      RADAU_IIA5, GL4, GL6, SDIRK2, TRBDF2)}
_DEFAULT_METHOD = "dopri5"
