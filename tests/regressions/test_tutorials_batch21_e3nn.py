"""e3nn (``e3nn/e3nn``: ``e3nn/o3``, ``e3nn/nn``, ``e3nn/math``) run on Lucid (``import lucid as torch``):

- ``o3/_irreps.py``: ``Irrep``/``Irreps`` (pure Python bookkeeping: parsing, ``simplify``, ``sort``
  through ``math/perm.inverse``, ``slices``, ``randn(normalization='norm')``, ``D_from_angles`` /
  ``D_from_matrix`` through ``math/_linalg.direct_sum``);
- ``o3/_rotation.py``: Euler angles (Y-X-Y), matrices, quaternions, axis-angle and points on the
  sphere, each conversion and its inverse;
- ``o3/_wigner.py``: ``su2_generators`` and ``change_basis_real_to_complex`` (complex128 tensors,
  ``1j * m``, ``(-1j) ** l * q``, ``torch.conj(Q.T)``), ``so3_generators``, ``wigner_D`` as a product of
  three batched ``matrix_exp``, and ``wigner_3j`` from QuTiP's SU(2) Clebsch-Gordan (``Fraction``) changed
  to the real basis by a complex ``einsum``;
- ``o3/_spherical_harmonics.py``: the explicit polynomials up to ``l = 4`` (``@torch.jit.script``,
  ``sh.div_`` normalizations); ``o3/_angular_spherical_harmonics.py``: ``Legendre`` (an ``fx.GraphModule``
  subclass generating its own code from ``fx.Proxy`` arithmetic and ``narrow(...).copy_``),
  ``spherical_harmonics_alpha``, ``_mul_m_lm``, ``spherical_harmonics_alpha_beta``;
- ``o3/_s2grid.py``: ``_quadrature_weights`` (a list of 0-d tensors from iterating ``torch.arange``),
  ``rfft``/``irfft`` (``torch.fft``, ``.imag.flip``, ``torch.complex``), ``ToS2Grid``/``FromS2Grid`` with
  and without the FFT; ``o3/_so3grid.py``: ``flat_wigner`` on a broadcast 8 x 4 x 8 grid and ``SO3Grid``;
- ``math``: ``soft_unit_step`` (a custom ``autograd.Function`` with masked writes), every basis of
  ``soft_one_hot_linspace``, ``normalize2mom`` (a seeded ``torch.Generator`` drawing 1 000 000 samples),
  ``orthonormalize`` and ``complete_basis`` (in-place Gram-Schmidt on rows of ``torch.eye``,
  ``x[x.abs() < eps] = 0``, ``x[x.nonzero()[0, 0]]``);
- ``o3.TensorProduct``: its forward built by ``_codegen.py``'s ``torch.fx`` code generation
  (``GraphAppendingTracer``, ``fx.Proxy`` through ``torch.broadcast_tensors``/``einsum``/``cross``,
  ``graph.get_attr`` of the Wigner 3j buffers, ``erase_node`` of unused ones, ``graph.lint``,
  ``GraphModule(constants_root, graph, class_name=...)``), specialized and general einsums, for the
  ``uvw``, ``uuu`` and ``uvuv`` modes, with ``ElementwiseTensorProduct``, ``FullyConnectedTensorProduct``,
  ``FullTensorProduct`` and ``o3.Norm`` on top; ``o3/_reduce.py``: ``ReducedTensorProducts`` (``_wigner_nj``,
  null spaces by ``torch.linalg.eigh``, ``orthonormalize``) with ``math/_reduce.py``'s
  ``germinate_formulas``/``reduce_permutation``;
- ``nn``: ``Extract`` (its fx-generated forward), ``Activation``, ``Gate`` (``_Sortcut``), ``NormActivation``, ``BatchNorm``
  (``torch.cat(..., out=self.running_mean)``, ``max(1).values``, instance mode) and ``S2Activation``;
- the pattern of the interatomic potentials built on e3nn (NequIP, MACE): forces ``-dE/dpos`` with
  ``create_graph=True`` through spherical harmonics, a radial basis and a per-edge tensor product, and a
  loss on the forces differentiated again.

Every test checks numbers without PyTorch: NumPy recomputations (Rodrigues' formula, ``expm`` of the
generators by an eigen-decomposition, ``scipy.special``'s spherical harmonics turned real, the S2 grids and
their quadrature, batch norm), the defining identities (``D(R1 R2) = D(R1) D(R2)``, ``D D^T = I``,
``C = C D D D``, ``Y(R x) = D(R) Y(x)``, orthonormality by Gauss-Legendre quadrature, Driscoll-Healy
exactness, ``[X_x, X_y] = X_z``) and float64 finite differences; the ``*_torch_parity`` tests run the same
text on PyTorch (where each library's own seeded generator enters, ``normalize2mom``'s constants, the
comparison is to Monte Carlo precision).

Adapted: ``@compile_mode`` decorators and ``CodeGenMixin`` are e3nn's TorchScript helpers and are left
out (a generated ``GraphModule`` is kept as an attribute); ``opt_einsum_fx``'s contraction reordering of the
tensor product's graph is left out; ``ReducedTensorProducts`` evaluates its path graph eagerly instead of
recording it with ``fx``; ``Legendre``'s polynomial coefficients, which e3nn expands with sympy, come from
the same formula in ``Fraction`` arithmetic (sympy is not a Lucid dependency); ``util._argtools._get_device`` is the default device; the ported spherical harmonics stop at
``l = 4``. ``NormActivation(..., normalize=False)`` without ``epsilon`` raises ``TypeError`` in this e3nn
version (``not None > 0``), so its bias is tested with ``normalize=True``. The forces are taken with
``autograd.grad(-E, [pos])``: Lucid's ``grad`` returns a bare tensor for a bare input (README
"Differences from PyTorch").

Fixed on the way: ``x[i] = 1j`` into a real tensor raised NumPy's bare ``TypeError: float() argument must
be a string or a real number, not 'complex'``; it is now PyTorch's ``RuntimeError`` ("value cannot be
converted to type ... without overflow"), naming ``setitem``.
"""
import collections
import functools
import itertools
import math
from collections import OrderedDict
from fractions import Fraction
from math import sqrt
from types import SimpleNamespace
from typing import List, Tuple, Union

import numpy as np
import pytest

import lucid
import lucid.nn  # noqa: F401


def e3nn_library(torch):
    """The e3nn sources, as text run on the module ``torch``."""
    ns = SimpleNamespace()

    # ---- e3nn/util ----
    def explicit_default_types(dtype, device):
        if dtype is None:
            dtype = torch.get_default_dtype()
        if device is None:
            device = torch.empty(0).device
        return dtype, device

    def prod(x):
        out = 1
        for a in x:
            out *= a
        return out

    # ---- e3nn/math/perm.py ----
    def perm_inverse(p):
        return tuple(p.index(i) for i in range(len(p)))

    # ---- e3nn/math/_linalg.py ----
    def direct_sum(*matrices):
        r"""Direct sum of matrices, put them in the diagonal"""
        front_indices = matrices[0].shape[:-2]
        m = sum(x.size(-2) for x in matrices)
        n = sum(x.size(-1) for x in matrices)
        total_shape = list(front_indices) + [m, n]
        out = matrices[0].new_zeros(total_shape)
        i, j = 0, 0
        for x in matrices:
            m, n = x.shape[-2:]
            out[..., i : i + m, j : j + n] = x
            i += m
            j += n
        return out

    # ---- e3nn/o3/_wigner.py ----
    def su2_generators(j: int):
        m = torch.arange(-j, j)
        raising = torch.diag(-torch.sqrt(j * (j + 1) - m * (m + 1)), diagonal=-1)

        m = torch.arange(-j + 1, j + 1)
        lowering = torch.diag(torch.sqrt(j * (j + 1) - m * (m - 1)), diagonal=1)

        m = torch.arange(-j, j + 1)
        return torch.stack(
            [
                0.5 * (raising + lowering),  # x (usually)
                torch.diag(1j * m),  # z (usually)
                -0.5j * (raising - lowering),  # -y (usually)
            ],
            dim=0,
        )

    def change_basis_real_to_complex(l: int, dtype=None, device=None):
        # https://en.wikipedia.org/wiki/Spherical_harmonics#Real_form
        q = torch.zeros((2 * l + 1, 2 * l + 1), dtype=torch.complex128)
        for m in range(-l, 0):
            q[l + m, l + abs(m)] = 1 / 2**0.5
            q[l + m, l - abs(m)] = -1j / 2**0.5
        q[l, l] = 1
        for m in range(1, l + 1):
            q[l + m, l + abs(m)] = (-1) ** m / 2**0.5
            q[l + m, l - abs(m)] = 1j * (-1) ** m / 2**0.5
        q = (-1j) ** l * q  # Added factor of 1j**l to make the Clebsch-Gordan coefficients real

        dtype, device = explicit_default_types(dtype, device)
        dtype = {
            torch.float32: torch.complex64,
            torch.float64: torch.complex128,
        }[dtype]
        # make sure we always get:
        # 1. a copy so mutation doesn't ruin the stored tensors
        # 2. a contiguous tensor, regardless of what transpositions happened above
        return q.to(dtype=dtype, device=device, copy=True, memory_format=torch.contiguous_format)

    def so3_generators(l):
        X = su2_generators(l)
        Q = change_basis_real_to_complex(l)
        X = torch.conj(Q.T) @ X @ Q
        assert torch.all(torch.abs(torch.imag(X)) < 1e-5)
        return torch.real(X)

    def wigner_D(l: int, alpha, beta, gamma):
        alpha, beta, gamma = torch.broadcast_tensors(alpha, beta, gamma)
        alpha = alpha[..., None, None] % (2 * math.pi)
        beta = beta[..., None, None] % (2 * math.pi)
        gamma = gamma[..., None, None] % (2 * math.pi)
        X = so3_generators(l)
        return torch.matrix_exp(alpha * X[1]) @ torch.matrix_exp(beta * X[0]) @ torch.matrix_exp(gamma * X[1])

    def wigner_3j(l1: int, l2: int, l3: int, dtype=None, device=None):
        assert abs(l2 - l3) <= l1 <= l2 + l3
        assert isinstance(l1, int) and isinstance(l2, int) and isinstance(l3, int)
        C = _so3_clebsch_gordan(l1, l2, l3)

        dtype, device = explicit_default_types(dtype, device)
        # make sure we always get:
        # 1. a copy so mutation doesn't ruin the stored tensors
        # 2. a contiguous tensor, regardless of what transpositions happened above
        return C.to(dtype=dtype, device=device, copy=True, memory_format=torch.contiguous_format)

    @functools.lru_cache(maxsize=None)
    def _so3_clebsch_gordan(l1: int, l2: int, l3: int):
        Q1 = change_basis_real_to_complex(l1, dtype=torch.float64)
        Q2 = change_basis_real_to_complex(l2, dtype=torch.float64)
        Q3 = change_basis_real_to_complex(l3, dtype=torch.float64)
        C = _su2_clebsch_gordan(l1, l2, l3).to(dtype=torch.complex128)
        C = torch.einsum("ij,kl,mn,ikn->jlm", Q1, Q2, torch.conj(Q3.T), C)

        # make it real
        assert torch.all(torch.abs(torch.imag(C)) < 1e-5)
        C = torch.real(C)

        # normalization
        C = C / torch.norm(C)
        return C

    # Taken from http://qutip.org/docs/3.1.0/modules/qutip/utilities.html (QuTiP, BSD-3-Clause)
    @functools.lru_cache(maxsize=None)
    def _su2_clebsch_gordan(j1: Union[int, float], j2: Union[int, float], j3: Union[int, float]):
        assert isinstance(j1, (int, float))
        assert isinstance(j2, (int, float))
        assert isinstance(j3, (int, float))
        mat = torch.zeros((int(2 * j1 + 1), int(2 * j2 + 1), int(2 * j3 + 1)), dtype=torch.float64)
        if int(2 * j3) in range(int(2 * abs(j1 - j2)), int(2 * (j1 + j2)) + 1, 2):
            for m1 in (x / 2 for x in range(-int(2 * j1), int(2 * j1) + 1, 2)):
                for m2 in (x / 2 for x in range(-int(2 * j2), int(2 * j2) + 1, 2)):
                    if abs(m1 + m2) <= j3:
                        mat[int(j1 + m1), int(j2 + m2), int(j3 + m1 + m2)] = _su2_clebsch_gordan_coeff(
                            (j1, m1), (j2, m2), (j3, m1 + m2)
                        )
        return mat

    def _su2_clebsch_gordan_coeff(idx1, idx2, idx3):
        from math import factorial

        j1, m1 = idx1
        j2, m2 = idx2
        j3, m3 = idx3

        if m3 != m1 + m2:
            return 0
        vmin = int(max([-j1 + j2 + m3, -j1 + m1, 0]))
        vmax = int(min([j2 + j3 + m1, j3 - j1 + j2, j3 + m3]))

        def f(n: int) -> int:
            assert n == round(n)
            return factorial(round(n))

        C = (
            (2.0 * j3 + 1.0)
            * Fraction(
                f(j3 + j1 - j2) * f(j3 - j1 + j2) * f(j1 + j2 - j3) * f(j3 + m3) * f(j3 - m3),
                f(j1 + j2 + j3 + 1) * f(j1 - m1) * f(j1 + m1) * f(j2 - m2) * f(j2 + m2),
            )
        ) ** 0.5

        S = 0
        for v in range(vmin, vmax + 1):
            S += (-1) ** int(v + j2 + m2) * Fraction(
                f(j2 + j3 + m1 - v) * f(j1 - m1 + v), f(v) * f(j3 - j1 + j2 - v) * f(j3 + m3 - v) * f(v + j1 - j2 - m3)
            )
        C = C * S
        return C

    # ---- e3nn/o3/_rotation.py ----
    def rand_angles(*shape, requires_grad: bool = False, dtype=None, device=None):
        alpha, gamma = 2 * math.pi * torch.rand(2, *shape, dtype=dtype, device=device)
        beta = torch.rand(shape, dtype=dtype, device=device).mul(2).sub(1).acos()
        alpha = alpha.detach().requires_grad_(requires_grad)
        beta = beta.detach().requires_grad_(requires_grad)
        gamma = gamma.detach().requires_grad_(requires_grad)
        return alpha, beta, gamma

    def identity_angles(*shape, requires_grad: bool = False, dtype=None, device=None):
        abc = torch.zeros(3, *shape, dtype=dtype, device=device)
        return abc[0].requires_grad_(requires_grad), abc[1].requires_grad_(requires_grad), abc[2].requires_grad_(requires_grad)

    def compose_angles(a1, b1, c1, a2, b2, c2):
        a1, b1, c1, a2, b2, c2 = torch.broadcast_tensors(a1, b1, c1, a2, b2, c2)
        return matrix_to_angles(angles_to_matrix(a1, b1, c1) @ angles_to_matrix(a2, b2, c2))

    def inverse_angles(a, b, c):
        return -c, -b, -a

    def identity_quaternion(*shape, requires_grad: bool = False, dtype=None, device=None):
        q = torch.zeros(*shape, 4, dtype=dtype, device=device)
        q[..., 0] = 1  # or -1...
        q = q.detach().requires_grad_(requires_grad)
        return q

    def compose_quaternion(q1, q2):
        q1, q2 = torch.broadcast_tensors(q1, q2)
        return torch.stack(
            [
                q1[..., 0] * q2[..., 0] - q1[..., 1] * q2[..., 1] - q1[..., 2] * q2[..., 2] - q1[..., 3] * q2[..., 3],
                q1[..., 1] * q2[..., 0] + q1[..., 0] * q2[..., 1] + q1[..., 2] * q2[..., 3] - q1[..., 3] * q2[..., 2],
                q1[..., 0] * q2[..., 2] - q1[..., 1] * q2[..., 3] + q1[..., 2] * q2[..., 0] + q1[..., 3] * q2[..., 1],
                q1[..., 0] * q2[..., 3] + q1[..., 1] * q2[..., 2] - q1[..., 2] * q2[..., 1] + q1[..., 3] * q2[..., 0],
            ],
            dim=-1,
        )

    def inverse_quaternion(q):
        q = q.clone()
        q[..., 1:].neg_()
        return q

    def compose_axis_angle(axis1, angle1, axis2, angle2):
        return quaternion_to_axis_angle(
            compose_quaternion(axis_angle_to_quaternion(axis1, angle1), axis_angle_to_quaternion(axis2, angle2))
        )

    def matrix_x(angle):
        c = angle.cos()
        s = angle.sin()
        o = torch.ones_like(angle)
        z = torch.zeros_like(angle)
        return torch.stack(
            [
                torch.stack([o, z, z], dim=-1),
                torch.stack([z, c, -s], dim=-1),
                torch.stack([z, s, c], dim=-1),
            ],
            dim=-2,
        )

    def matrix_y(angle):
        c = angle.cos()
        s = angle.sin()
        o = torch.ones_like(angle)
        z = torch.zeros_like(angle)
        return torch.stack(
            [
                torch.stack([c, z, s], dim=-1),
                torch.stack([z, o, z], dim=-1),
                torch.stack([-s, z, c], dim=-1),
            ],
            dim=-2,
        )

    def matrix_z(angle):
        c = angle.cos()
        s = angle.sin()
        o = torch.ones_like(angle)
        z = torch.zeros_like(angle)
        return torch.stack(
            [torch.stack([c, -s, z], dim=-1), torch.stack([s, c, z], dim=-1), torch.stack([z, z, o], dim=-1)], dim=-2
        )

    def angles_to_matrix(alpha, beta, gamma):
        alpha, beta, gamma = torch.broadcast_tensors(alpha, beta, gamma)
        return matrix_y(alpha) @ matrix_x(beta) @ matrix_y(gamma)

    def matrix_to_angles(R):
        assert torch.allclose(torch.det(R), R.new_tensor(1))
        x = R @ R.new_tensor([0.0, 1.0, 0.0])
        a, b = xyz_to_angles(x)
        R = angles_to_matrix(a, b, torch.zeros_like(a)).transpose(-1, -2) @ R
        c = torch.atan2(R[..., 0, 2], R[..., 0, 0])
        return a, b, c

    def angles_to_quaternion(alpha, beta, gamma):
        alpha, beta, gamma = torch.broadcast_tensors(alpha, beta, gamma)
        qa = axis_angle_to_quaternion(alpha.new_tensor([0.0, 1.0, 0.0]), alpha)
        qb = axis_angle_to_quaternion(beta.new_tensor([1.0, 0.0, 0.0]), beta)
        qc = axis_angle_to_quaternion(gamma.new_tensor([0.0, 1.0, 0.0]), gamma)
        return compose_quaternion(qa, compose_quaternion(qb, qc))

    def matrix_to_quaternion(R):
        return axis_angle_to_quaternion(*matrix_to_axis_angle(R))

    def axis_angle_to_quaternion(xyz, angle):
        xyz, angle = torch.broadcast_tensors(xyz, angle[..., None])
        xyz = torch.nn.functional.normalize(xyz, dim=-1)
        c = torch.cos(angle[..., :1] / 2)
        s = torch.sin(angle / 2)
        return torch.cat([c, xyz * s], dim=-1)

    def quaternion_to_axis_angle(q):
        angle = 2 * torch.acos(q[..., 0].clamp(-1, 1))
        axis = torch.nn.functional.normalize(q[..., 1:], dim=-1)
        return axis, angle

    def matrix_to_axis_angle(R):
        assert torch.allclose(torch.det(R), R.new_tensor(1))
        tr = R[..., 0, 0] + R[..., 1, 1] + R[..., 2, 2]
        angle = torch.acos(tr.sub(1).div(2).clamp(-1, 1))
        axis = torch.stack(
            [
                R[..., 2, 1] - R[..., 1, 2],
                R[..., 0, 2] - R[..., 2, 0],
                R[..., 1, 0] - R[..., 0, 1],
            ],
            dim=-1,
        )
        axis = torch.nn.functional.normalize(axis, dim=-1)
        return axis, angle

    def angles_to_axis_angle(alpha, beta, gamma):
        return matrix_to_axis_angle(angles_to_matrix(alpha, beta, gamma))

    def axis_angle_to_matrix(axis, angle):
        axis, angle = torch.broadcast_tensors(axis, angle[..., None])
        alpha, beta = xyz_to_angles(axis)
        R = angles_to_matrix(alpha, beta, torch.zeros_like(beta))
        Ry = matrix_y(angle[..., 0])
        return R @ Ry @ R.transpose(-2, -1)

    def quaternion_to_matrix(q):
        return axis_angle_to_matrix(*quaternion_to_axis_angle(q))

    def quaternion_to_angles(q):
        return matrix_to_angles(quaternion_to_matrix(q))

    def axis_angle_to_angles(axis, angle):
        return matrix_to_angles(axis_angle_to_matrix(axis, angle))

    def angles_to_xyz(alpha, beta):
        alpha, beta = torch.broadcast_tensors(alpha, beta)
        x = torch.sin(beta) * torch.sin(alpha)
        y = torch.cos(beta)
        z = torch.sin(beta) * torch.cos(alpha)
        return torch.stack([x, y, z], dim=-1)

    def xyz_to_angles(xyz):
        xyz = torch.nn.functional.normalize(xyz, p=2, dim=-1)  # forward 0's instead of nan for zero-radius
        xyz = xyz.clamp(-1, 1)

        beta = torch.acos(xyz[..., 1])
        alpha = torch.atan2(xyz[..., 0], xyz[..., 2])
        return alpha, beta

    # ---- e3nn/o3/_irreps.py ----
    class Irrep(tuple):
        def __new__(cls, l: Union[int, "Irrep", str, tuple], p=None):
            if p is None:
                if isinstance(l, Irrep):
                    return l

                if isinstance(l, str):
                    try:
                        name = l.strip()
                        l = int(name[:-1])
                        assert l >= 0
                        p = {
                            "e": 1,
                            "o": -1,
                            "y": (-1) ** l,
                        }[name[-1]]
                    except Exception:
                        raise ValueError(f'unable to convert string "{name}" into an Irrep')
                elif isinstance(l, tuple):
                    l, p = l

            if not isinstance(l, int) or l < 0:
                raise ValueError(f"l must be positive integer, got {l}")
            if p not in (-1, 1):
                raise ValueError(f"parity must be on of (-1, 1), got {p}")
            return super().__new__(cls, (l, p))

        @property
        def l(self) -> int:  # noqa: E743
            return self[0]

        @property
        def p(self) -> int:
            return self[1]

        def __repr__(self):
            p = {+1: "e", -1: "o"}[self.p]
            return f"{self.l}{p}"

        @classmethod
        def iterator(cls, lmax=None):
            for l in itertools.count():
                yield Irrep(l, (-1) ** l)
                yield Irrep(l, -((-1) ** l))

                if l == lmax:
                    break

        def D_from_angles(self, alpha, beta, gamma, k=None):
            if k is None:
                k = torch.zeros_like(alpha)

            alpha, beta, gamma, k = torch.broadcast_tensors(alpha, beta, gamma, k)
            return wigner_D(self.l, alpha, beta, gamma) * self.p ** k[..., None, None]

        def D_from_quaternion(self, q, k=None):
            return self.D_from_angles(*quaternion_to_angles(q), k)

        def D_from_matrix(self, R):
            d = torch.det(R).sign()
            R = d[..., None, None] * R
            k = (1 - d) / 2
            return self.D_from_angles(*matrix_to_angles(R), k)

        def D_from_axis_angle(self, axis, angle):
            return self.D_from_angles(*axis_angle_to_angles(axis, angle))

        @property
        def dim(self) -> int:
            return 2 * self.l + 1

        def is_scalar(self) -> bool:
            return self.l == 0 and self.p == 1

        def __mul__(self, other):
            other = Irrep(other)
            p = self.p * other.p
            lmin = abs(self.l - other.l)
            lmax = self.l + other.l
            for l in range(lmin, lmax + 1):
                yield Irrep(l, p)

        def count(self, _value):
            raise NotImplementedError

        def index(self, _value):
            raise NotImplementedError

        def __rmul__(self, other):
            assert isinstance(other, int)
            return Irreps([(other, self)])

        def __add__(self, other):
            return Irreps(self) + Irreps(other)

        def __contains__(self, _object):
            raise NotImplementedError

        def __len__(self):
            raise NotImplementedError

    class _MulIr(tuple):
        def __new__(cls, mul, ir=None):
            if ir is None:
                mul, ir = mul

            assert isinstance(mul, int)
            assert isinstance(ir, Irrep)
            return super().__new__(cls, (mul, ir))

        @property
        def mul(self) -> int:
            return self[0]

        @property
        def ir(self) -> Irrep:
            return self[1]

        @property
        def dim(self) -> int:
            return self.mul * self.ir.dim

        def __repr__(self):
            return f"{self.mul}x{self.ir}"

        def __getitem__(self, item):  # pylint: disable=useless-super-delegation
            return super().__getitem__(item)

        def count(self, _value):
            raise NotImplementedError

        def index(self, _value):
            raise NotImplementedError

    class Irreps(tuple):
        def __new__(cls, irreps=None):
            if isinstance(irreps, Irreps):
                return super().__new__(cls, irreps)

            out = []
            if isinstance(irreps, Irrep):
                out.append(_MulIr(1, Irrep(irreps)))
            elif isinstance(irreps, str):
                try:
                    if irreps.strip() != "":
                        for mul_ir in irreps.split("+"):
                            if "x" in mul_ir:
                                mul, ir = mul_ir.split("x")
                                mul = int(mul)
                                ir = Irrep(ir)
                            else:
                                mul = 1
                                ir = Irrep(mul_ir)

                            assert isinstance(mul, int) and mul >= 0
                            out.append(_MulIr(mul, ir))
                except Exception:
                    raise ValueError(f'Unable to convert string "{irreps}" into an Irreps')
            elif irreps is None:
                pass
            else:
                for mul_ir in irreps:
                    mul = None
                    ir = None

                    if isinstance(mul_ir, str):
                        mul = 1
                        ir = Irrep(mul_ir)
                    elif isinstance(mul_ir, Irrep):
                        mul = 1
                        ir = mul_ir
                    elif isinstance(mul_ir, _MulIr):
                        mul, ir = mul_ir
                    elif len(mul_ir) == 2:
                        mul, ir = mul_ir
                        ir = Irrep(ir)

                    if not (isinstance(mul, int) and mul >= 0 and ir is not None):
                        raise ValueError(f'Unable to interpret "{mul_ir}" as an irrep.')

                    out.append(_MulIr(mul, ir))
            return super().__new__(cls, out)

        @staticmethod
        def spherical_harmonics(lmax, p=-1):
            return Irreps([(1, (l, p**l)) for l in range(lmax + 1)])

        def slices(self):
            s = []
            i = 0
            for mul_ir in self:
                s.append(slice(i, i + mul_ir.dim))
                i += mul_ir.dim
            return s

        def randn(self, *size, normalization="component", requires_grad=False, dtype=None, device=None):
            di = size.index(-1)
            lsize = size[:di]
            rsize = size[di + 1 :]

            if normalization == "component":
                return torch.randn(*lsize, self.dim, *rsize, requires_grad=requires_grad, dtype=dtype, device=device)
            elif normalization == "norm":
                x = torch.zeros(*lsize, self.dim, *rsize, requires_grad=requires_grad, dtype=dtype, device=device)
                with torch.no_grad():
                    for s, (mul, ir) in zip(self.slices(), self):
                        r = torch.randn(*lsize, mul, ir.dim, *rsize, dtype=dtype, device=device)
                        r.div_(r.norm(2, dim=di + 1, keepdim=True))
                        x.narrow(di, s.start, mul * ir.dim).copy_(r.reshape(*lsize, -1, *rsize))
                return x
            else:
                raise ValueError("Normalization needs to be 'norm' or 'component'")

        def __getitem__(self, i):
            x = super().__getitem__(i)
            if isinstance(i, slice):
                return Irreps(x)
            return x

        def __contains__(self, ir) -> bool:
            ir = Irrep(ir)
            return ir in (irrep for _, irrep in self)

        def count(self, ir) -> int:
            ir = Irrep(ir)
            return sum(mul for mul, irrep in self if ir == irrep)

        def index(self, _object):
            raise NotImplementedError

        def __add__(self, irreps):
            irreps = Irreps(irreps)
            return Irreps(super().__add__(irreps))

        def __mul__(self, other):
            if isinstance(other, Irreps):
                raise NotImplementedError("Use o3.TensorProduct for this, see the documentation")
            return Irreps(super().__mul__(other))

        def __rmul__(self, other):
            return Irreps(super().__rmul__(other))

        def simplify(self) -> "Irreps":
            out = []
            for mul, ir in self:
                if out and out[-1][1] == ir:
                    out[-1] = (out[-1][0] + mul, ir)
                elif mul > 0:
                    out.append((mul, ir))
            return Irreps(out)

        def remove_zero_multiplicities(self):
            out = [(mul, ir) for mul, ir in self if mul > 0]
            return Irreps(out)

        def sort(self):
            Ret = collections.namedtuple("sort", ["irreps", "p", "inv"])
            out = [(ir, i, mul) for i, (mul, ir) in enumerate(self)]
            out = sorted(out)
            inv = tuple(i for _, i, _ in out)
            p = perm_inverse(inv)
            irreps = Irreps([(mul, ir) for ir, _, mul in out])
            return Ret(irreps, p, inv)

        @property
        def dim(self) -> int:
            return sum(mul * ir.dim for mul, ir in self)

        @property
        def num_irreps(self) -> int:
            return sum(mul for mul, _ in self)

        @property
        def ls(self) -> List[int]:
            return [l for mul, (l, p) in self for _ in range(mul)]

        @property
        def lmax(self) -> int:
            if len(self) == 0:
                raise ValueError("Cannot get lmax of empty Irreps")
            return max(self.ls)

        def __repr__(self):
            return "+".join(f"{mul_ir}" for mul_ir in self)

        def D_from_angles(self, alpha, beta, gamma, k=None):
            return direct_sum(*[ir.D_from_angles(alpha, beta, gamma, k) for mul, ir in self for _ in range(mul)])

        def D_from_quaternion(self, q, k=None):
            return self.D_from_angles(*quaternion_to_angles(q), k)

        def D_from_matrix(self, R):
            d = torch.det(R).sign()
            R = d[..., None, None] * R
            k = (1 - d) / 2
            return self.D_from_angles(*matrix_to_angles(R), k)

        def D_from_axis_angle(self, axis, angle):
            return self.D_from_angles(*axis_angle_to_angles(axis, angle))

    # ---- e3nn/o3/_spherical_harmonics.py (up to l = 4) ----
    class SphericalHarmonics(torch.nn.Module):
        def __init__(self, irreps_out, normalize: bool, normalization: str = "integral", irreps_in=None):
            super().__init__()
            self.normalize = normalize
            self.normalization = normalization
            assert normalization in ["integral", "component", "norm"]

            if isinstance(irreps_out, str):
                irreps_out = Irreps(irreps_out)
            if isinstance(irreps_out, Irreps) and irreps_in is None:
                for mul, (l, p) in irreps_out:
                    if l % 2 == 1 and p == 1:
                        irreps_in = Irreps("1e")
            if irreps_in is None:
                irreps_in = Irreps("1o")

            irreps_in = Irreps(irreps_in)
            if irreps_in not in (Irreps("1x1o"), Irreps("1x1e")):
                raise ValueError(f"irreps_in for SphericalHarmonics must be either a vector (`1x1o`) or a pseudovector (`1x1e`), not `{irreps_in}`")
            self.irreps_in = irreps_in
            input_p = irreps_in[0].ir.p  # pylint: disable=no-member

            if isinstance(irreps_out, Irreps):
                ls = []
                for mul, (l, p) in irreps_out:
                    if p != input_p**l:
                        raise ValueError(f"irreps_out `{irreps_out}` passed to SphericalHarmonics asked for an output of l = {l} with parity p = {p}, which is inconsistent with the input parity {input_p} — the output parity should have been p = {input_p**l}")
                    ls.extend([l] * mul)
            elif isinstance(irreps_out, int):
                ls = [irreps_out]
            else:
                ls = list(irreps_out)

            irreps_out = Irreps([(1, (l, input_p**l)) for l in ls]).simplify()
            self.irreps_out = irreps_out
            self._ls_list = ls
            self._lmax = max(ls)
            self._is_range_lmax = ls == list(range(max(ls) + 1))
            self._prof_str = f"spherical_harmonics({ls})"

            _lmax = 4  # e3nn: 11 (the ported polynomials stop at 4)
            if self._lmax > _lmax:
                raise NotImplementedError(f"spherical_harmonics maximum l implemented is {_lmax}, send us an email to ask for more")

        def forward(self, x):
            if self.normalize:
                x = torch.nn.functional.normalize(x, dim=-1)  # forward 0's instead of nan for zero-radius

            sh = _spherical_harmonics(self._lmax, x[..., 0], x[..., 1], x[..., 2])

            if not self._is_range_lmax:
                sh = torch.cat([sh[..., l * l : (l + 1) * (l + 1)] for l in self._ls_list], dim=-1)

            if self.normalization == "integral":
                sh.div_(math.sqrt(4 * math.pi))
            elif self.normalization == "norm":
                sh.div_(
                    torch.cat([math.sqrt(2 * l + 1) * torch.ones(2 * l + 1, dtype=sh.dtype, device=sh.device) for l in self._ls_list])
                )

            return sh

    def spherical_harmonics(l, x, normalize: bool, normalization: str = "integral"):
        sh = SphericalHarmonics(l, normalize, normalization)
        return sh(x)

    @torch.jit.script
    def _spherical_harmonics(lmax: int, x, y, z):
        sh_0_0 = torch.ones_like(x)
        if lmax == 0:
            return torch.stack([sh_0_0], dim=-1)

        sh_1_0 = math.sqrt(3) * x
        sh_1_1 = math.sqrt(3) * y
        sh_1_2 = math.sqrt(3) * z
        if lmax == 1:
            return torch.stack([sh_0_0, sh_1_0, sh_1_1, sh_1_2], dim=-1)

        sh_2_0 = math.sqrt(15) * x * z
        sh_2_1 = math.sqrt(15) * x * y
        y2 = y.pow(2)
        x2z2 = x.pow(2) + z.pow(2)
        sh_2_2 = math.sqrt(5) * (y2 - (1 / 2) * x2z2)
        sh_2_3 = math.sqrt(15) * y * z
        sh_2_4 = (1 / 2) * math.sqrt(15) * (z.pow(2) - x.pow(2))

        if lmax == 2:
            return torch.stack([sh_0_0, sh_1_0, sh_1_1, sh_1_2, sh_2_0, sh_2_1, sh_2_2, sh_2_3, sh_2_4], dim=-1)

        sh_3_0 = (1 / 6) * math.sqrt(42) * (sh_2_0 * z + sh_2_4 * x)
        sh_3_1 = math.sqrt(7) * sh_2_0 * y
        sh_3_2 = (1 / 8) * math.sqrt(168) * (4.0 * y2 - x2z2) * x
        sh_3_3 = (1 / 2) * math.sqrt(7) * y * (2.0 * y2 - 3.0 * x2z2)
        sh_3_4 = (1 / 8) * math.sqrt(168) * z * (4.0 * y2 - x2z2)
        sh_3_5 = math.sqrt(7) * sh_2_4 * y
        sh_3_6 = (1 / 6) * math.sqrt(42) * (sh_2_4 * z - sh_2_0 * x)

        if lmax == 3:
            return torch.stack([
                sh_0_0,
                sh_1_0, sh_1_1, sh_1_2,
                sh_2_0, sh_2_1, sh_2_2, sh_2_3, sh_2_4,
                sh_3_0, sh_3_1, sh_3_2, sh_3_3, sh_3_4, sh_3_5, sh_3_6,
            ], dim=-1)

        sh_4_0 = (3/4)*math.sqrt(2)*(sh_3_0*z + sh_3_6*x)
        sh_4_1 = (3/4)*sh_3_0*y + (3/8)*math.sqrt(6)*sh_3_1*z + (3/8)*math.sqrt(6)*sh_3_5*x
        sh_4_2 = -3/56*math.sqrt(14)*sh_3_0*z + (3/14)*math.sqrt(21)*sh_3_1*y + (3/56)*math.sqrt(210)*sh_3_2*z + (3/56)*math.sqrt(210)*sh_3_4*x + (3/56)*math.sqrt(14)*sh_3_6*x
        sh_4_3 = -3/56*math.sqrt(42)*sh_3_1*z + (3/28)*math.sqrt(105)*sh_3_2*y + (3/28)*math.sqrt(70)*sh_3_3*x + (3/56)*math.sqrt(42)*sh_3_5*x
        sh_4_4 = -3/28*math.sqrt(42)*sh_3_2*x + (3/7)*math.sqrt(7)*sh_3_3*y - 3/28*math.sqrt(42)*sh_3_4*z
        sh_4_5 = -3/56*math.sqrt(42)*sh_3_1*x + (3/28)*math.sqrt(70)*sh_3_3*z + (3/28)*math.sqrt(105)*sh_3_4*y - 3/56*math.sqrt(42)*sh_3_5*z
        sh_4_6 = -3/56*math.sqrt(14)*sh_3_0*x - 3/56*math.sqrt(210)*sh_3_2*x + (3/56)*math.sqrt(210)*sh_3_4*z + (3/14)*math.sqrt(21)*sh_3_5*y - 3/56*math.sqrt(14)*sh_3_6*z
        sh_4_7 = -3/8*math.sqrt(6)*sh_3_1*x + (3/8)*math.sqrt(6)*sh_3_5*z + (3/4)*sh_3_6*y
        sh_4_8 = (3/4)*math.sqrt(2)*(-sh_3_0*x + sh_3_6*z)
        return torch.stack([
            sh_0_0,
            sh_1_0, sh_1_1, sh_1_2,
            sh_2_0, sh_2_1, sh_2_2, sh_2_3, sh_2_4,
            sh_3_0, sh_3_1, sh_3_2, sh_3_3, sh_3_4, sh_3_5, sh_3_6,
            sh_4_0, sh_4_1, sh_4_2, sh_4_3, sh_4_4, sh_4_5, sh_4_6, sh_4_7, sh_4_8
        ], dim=-1)

    # ---- e3nn/math/_soft_unit_step.py ----
    class _SoftUnitStep(torch.autograd.Function):
        # pylint: disable=arguments-differ

        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            y = torch.zeros_like(x)
            m = x > 0.0
            y[m] = (-1 / x[m]).exp()
            return y

        @staticmethod
        def backward(ctx, dy):
            (x,) = ctx.saved_tensors
            dx = torch.zeros_like(x)
            m = x > 0.0
            xm = x[m]
            dx[m] = (-1 / xm).exp() / xm.pow(2)
            return dx * dy

    def soft_unit_step(x):
        return _SoftUnitStep.apply(x)

    # ---- e3nn/math/_soft_one_hot_linspace.py ----
    def soft_one_hot_linspace(x, start, end, number, basis=None, cutoff=None):
        # pylint: disable=misplaced-comparison-constant

        if cutoff not in [True, False]:
            raise ValueError("cutoff must be specified")

        if not cutoff:
            values = torch.linspace(start, end, number, dtype=x.dtype, device=x.device)
            step = values[1] - values[0]
        else:
            values = torch.linspace(start, end, number + 2, dtype=x.dtype, device=x.device)
            step = values[1] - values[0]
            values = values[1:-1]

        diff = (x[..., None] - values) / step

        if basis == "gaussian":
            return diff.pow(2).neg().exp().div(1.12)

        if basis == "cosine":
            return torch.cos(math.pi / 2 * diff) * (diff < 1) * (-1 < diff)

        if basis == "smooth_finite":
            return 1.14136 * torch.exp(torch.tensor(2.0)) * soft_unit_step(diff + 1) * soft_unit_step(1 - diff)

        if basis == "fourier":
            x = (x[..., None] - start) / (end - start)
            if not cutoff:
                i = torch.arange(0, number, dtype=x.dtype, device=x.device)
                return torch.cos(math.pi * i * x) / math.sqrt(0.25 + number / 2)
            else:
                i = torch.arange(1, number + 1, dtype=x.dtype, device=x.device)
                return torch.sin(math.pi * i * x) / math.sqrt(0.25 + number / 2) * (0 < x) * (x < 1)

        if basis == "bessel":
            x = x[..., None] - start
            c = end - start
            bessel_roots = torch.arange(1, number + 1, dtype=x.dtype, device=x.device) * math.pi
            out = math.sqrt(2 / c) * torch.sin(bessel_roots * x / c) / x

            if not cutoff:
                return out
            else:
                return out * ((x / c) < 1) * (0 < x)

        raise ValueError(f'basis="{basis}" is not a valid entry')

    # ---- e3nn/math/_normalize_activation.py ----
    def moment(f, n, dtype=None, device=None):
        dtype, device = explicit_default_types(dtype, device)
        gen = torch.Generator(device=device).manual_seed(0)
        z = torch.randn(1_000_000, generator=gen, dtype=torch.float64, device=device).to(dtype=dtype, device=device)
        return f(z).pow(n).mean()

    class normalize2mom(torch.nn.Module):
        def __init__(self, f, dtype=None, device=None):
            super().__init__()
            with torch.no_grad():
                cst = moment(f, 2, dtype=torch.float64, device=device).pow(-0.5).item()

            if abs(cst - 1) < 1e-4:
                self._is_id = True
            else:
                self._is_id = False

            self.f = f
            self.cst = cst

        def forward(self, x):
            if self._is_id:
                return self.f(x)
            else:
                return self.f(x).mul(self.cst)

    # ---- e3nn/o3/_tensor_product (the code _codegen.py generates, run eagerly) ----
    Instruction = collections.namedtuple(
        "Instruction", ["i_in1", "i_in2", "i_out", "connection_mode", "has_weight", "path_weight", "path_shape"]
    )

    def _sum_tensors(xs, shape, like):
        if len(xs) > 0:
            out = xs[0]
            for x in xs[1:]:
                out = out + x
            return out
        return like.new_zeros(shape)

    def codegen_tensor_product_left_right(irreps_in1, irreps_in2, irreps_out, instructions, shared_weights: bool = False,
                                          specialized_code: bool = True):
        fx = torch.fx
        graph = fx.Graph()

        # = Function definitions =
        tracer = fx.proxy.GraphAppendingTracer(graph)
        constants = OrderedDict()

        x1s = fx.Proxy(graph.placeholder("x1", torch.Tensor), tracer=tracer)
        x2s = fx.Proxy(graph.placeholder("x2", torch.Tensor), tracer=tracer)
        weights = fx.Proxy(graph.placeholder("w", torch.Tensor), tracer=tracer)

        empty = fx.Proxy(graph.call_function(torch.empty, ((),), dict(device="cpu")), tracer=tracer)
        if shared_weights:
            output_shape = torch.broadcast_tensors(empty.expand(x1s.shape[:-1]), empty.expand(x2s.shape[:-1]))[0].shape
        else:
            output_shape = torch.broadcast_tensors(
                empty.expand(x1s.shape[:-1]), empty.expand(x2s.shape[:-1]), empty.expand(weights.shape[:-1])
            )[0].shape
        del empty

        instructions = [ins for ins in instructions if 0 not in ins.path_shape]
        if len(instructions) == 0:
            outputs = x1s.new_zeros(output_shape + (irreps_out.dim,))

            graph.output(outputs.node, torch.Tensor)
            # Short circut
            return fx.GraphModule({}, graph, "tp_forward")

        bc_shape = output_shape + (-1,)
        x1s, x2s = x1s.expand(bc_shape), x2s.expand(bc_shape)
        if not shared_weights:
            weights = weights.expand(bc_shape)

        output_shape = output_shape + (irreps_out.dim,)

        x1s = x1s.reshape(-1, irreps_in1.dim)
        x2s = x2s.reshape(-1, irreps_in2.dim)

        batch_numel = x1s.shape[0]

        weight_numel = sum(prod(ins.path_shape) for ins in instructions if ins.has_weight)
        if weight_numel > 0:
            weights = weights.reshape(-1, weight_numel)
        del weight_numel

        if len(irreps_in1) == 1:
            x1_list = [x1s.reshape(batch_numel, irreps_in1[0].mul, irreps_in1[0].ir.dim)]
        else:
            x1_list = [x1s[:, i].reshape(batch_numel, mul_ir.mul, mul_ir.ir.dim) for i, mul_ir in zip(irreps_in1.slices(), irreps_in1)]

        x2_list = []
        if len(irreps_in2) == 1:
            x2_list.append(x2s.reshape(batch_numel, irreps_in2[0].mul, irreps_in2[0].ir.dim))
        else:
            for i, mul_ir in zip(irreps_in2.slices(), irreps_in2):
                x2_list.append(x2s[:, i].reshape(batch_numel, mul_ir.mul, mul_ir.ir.dim))

        z = "" if shared_weights else "z"
        xx_dict = dict()
        flat_weight_index = 0
        outputs = []

        for ins in instructions:
            mul_ir_in1 = irreps_in1[ins.i_in1]
            mul_ir_in2 = irreps_in2[ins.i_in2]
            mul_ir_out = irreps_out[ins.i_out]

            assert mul_ir_in1.ir.p * mul_ir_in2.ir.p == mul_ir_out.ir.p
            assert abs(mul_ir_in1.ir.l - mul_ir_in2.ir.l) <= mul_ir_out.ir.l <= mul_ir_in1.ir.l + mul_ir_in2.ir.l

            if mul_ir_in1.dim == 0 or mul_ir_in2.dim == 0 or mul_ir_out.dim == 0:
                continue

            x1 = x1_list[ins.i_in1]
            x2 = x2_list[ins.i_in2]

            if ins.has_weight:
                w = weights[:, flat_weight_index : flat_weight_index + prod(ins.path_shape)].reshape(
                    (() if shared_weights else (-1,)) + tuple(ins.path_shape)
                )
                flat_weight_index += prod(ins.path_shape)

            key = (ins.i_in1, ins.i_in2, ins.connection_mode[:2])
            if key not in xx_dict:
                if ins.connection_mode[:2] == "uu":
                    xx_dict[key] = torch.einsum("zui,zuj->zuij", x1, x2)
                else:
                    xx_dict[key] = torch.einsum("zui,zvj->zuvij", x1, x2)
            xx = xx_dict[key]
            del key

            # Create a proxy & request for the relevant wigner w3j
            # If not used (because of specialized code), will get removed later.
            w3j_name = f"_w3j_{mul_ir_in1.ir.l}_{mul_ir_in2.ir.l}_{mul_ir_out.ir.l}"
            w3j = fx.Proxy(graph.get_attr(w3j_name), tracer=tracer)

            l1l2l3 = (mul_ir_in1.ir.l, mul_ir_in2.ir.l, mul_ir_out.ir.l)

            if ins.connection_mode == "uvw":
                assert ins.has_weight
                if specialized_code and l1l2l3 == (0, 0, 0):
                    result = torch.einsum(
                        f"{z}uvw,zu,zv->zw", w, x1.reshape(batch_numel, mul_ir_in1.dim), x2.reshape(batch_numel, mul_ir_in2.dim)
                    )
                elif specialized_code and mul_ir_in1.ir.l == 0:
                    result = torch.einsum(f"{z}uvw,zu,zvj->zwj", w, x1.reshape(batch_numel, mul_ir_in1.dim), x2) / sqrt(
                        mul_ir_out.ir.dim
                    )
                elif specialized_code and mul_ir_in2.ir.l == 0:
                    result = torch.einsum(f"{z}uvw,zui,zv->zwi", w, x1, x2.reshape(batch_numel, mul_ir_in2.dim)) / sqrt(
                        mul_ir_out.ir.dim
                    )
                elif specialized_code and mul_ir_out.ir.l == 0:
                    result = torch.einsum(f"{z}uvw,zui,zvi->zw", w, x1, x2) / sqrt(mul_ir_in1.ir.dim)
                else:
                    result = torch.einsum(f"{z}uvw,ijk,zuvij->zwk", w, w3j, xx)
            if ins.connection_mode == "uuu":
                assert mul_ir_in1.mul == mul_ir_in2.mul == mul_ir_out.mul
                if ins.has_weight:
                    if specialized_code and l1l2l3 == (0, 0, 0):
                        result = torch.einsum(
                            f"{z}u,zu,zu->zu", w, x1.reshape(batch_numel, mul_ir_in1.dim), x2.reshape(batch_numel, mul_ir_in2.dim)
                        )
                    elif specialized_code and l1l2l3 == (1, 1, 1):
                        result = torch.einsum(f"{z}u,zui->zui", w, torch.cross(x1, x2, dim=2)) / sqrt(2 * 3)
                    elif specialized_code and mul_ir_in1.ir.l == 0:
                        result = torch.einsum(f"{z}u,zu,zuj->zuj", w, x1.reshape(batch_numel, mul_ir_in1.dim), x2) / sqrt(
                            mul_ir_out.ir.dim
                        )
                    elif specialized_code and mul_ir_in2.ir.l == 0:
                        result = torch.einsum(f"{z}u,zui,zu->zui", w, x1, x2.reshape(batch_numel, mul_ir_in2.dim)) / sqrt(
                            mul_ir_out.ir.dim
                        )
                    elif specialized_code and mul_ir_out.ir.l == 0:
                        result = torch.einsum(f"{z}u,zui,zui->zu", w, x1, x2) / sqrt(mul_ir_in1.ir.dim)
                    else:
                        result = torch.einsum(f"{z}u,ijk,zuij->zuk", w, w3j, xx)
                else:
                    if specialized_code and l1l2l3 == (0, 0, 0):
                        result = torch.einsum(
                            "zu,zu->zu", x1.reshape(batch_numel, mul_ir_in1.dim), x2.reshape(batch_numel, mul_ir_in2.dim)
                        )
                    elif specialized_code and l1l2l3 == (1, 1, 1):
                        result = torch.cross(x1, x2, dim=2) * (1.0 / sqrt(2 * 3))
                    elif specialized_code and mul_ir_in1.ir.l == 0:
                        result = torch.einsum("zu,zuj->zuj", x1.reshape(batch_numel, mul_ir_in1.dim), x2) / sqrt(mul_ir_out.ir.dim)
                    elif specialized_code and mul_ir_in2.ir.l == 0:
                        result = torch.einsum("zui,zu->zui", x1, x2.reshape(batch_numel, mul_ir_in2.dim)) / sqrt(mul_ir_out.ir.dim)
                    elif specialized_code and mul_ir_out.ir.l == 0:
                        result = torch.einsum("zui,zui->zu", x1, x2) / sqrt(mul_ir_in1.ir.dim)
                    else:
                        result = torch.einsum("ijk,zuij->zuk", w3j, xx)
            if ins.connection_mode == "uvuv":
                assert mul_ir_in1.mul * mul_ir_in2.mul == mul_ir_out.mul
                if ins.has_weight:
                    result = torch.einsum(f"{z}uv,ijk,zuvij->zuvk", w, w3j, xx)
                else:
                    result = torch.einsum("ijk,zuvij->zuvk", w3j, xx)

            result = ins.path_weight * result

            outputs += [result.reshape(batch_numel, mul_ir_out.dim)]

            # Remove unused w3js:
            if len(w3j.node.users) == 0:
                # The w3j nodes are reshapes, so we have to remove them from the graph
                # Although they are dead code, they try to reshape to dimensions that don't exist
                # (since the corresponding w3js are not in w3j)
                # so they screw up the shape propagation, even though they would be removed later as dead code by TorchScript.
                graph.erase_node(w3j.node)
            else:
                if w3j_name not in constants:
                    constants[w3j_name] = wigner_3j(mul_ir_in1.ir.l, mul_ir_in2.ir.l, mul_ir_out.ir.l)

        outputs = [
            _sum_tensors(
                [out for ins, out in zip(instructions, outputs) if ins.i_out == i_out],
                shape=(batch_numel, mul_ir_out.dim),
                like=x1s,
            )
            for i_out, mul_ir_out in enumerate(irreps_out)
            if mul_ir_out.mul > 0
        ]
        if len(outputs) > 1:
            outputs = torch.cat(outputs, dim=1)
        else:
            outputs = outputs[0]

        outputs = outputs.reshape(output_shape)

        graph.output(outputs.node, torch.Tensor)

        # check graphs
        graph.lint()

        # By putting the constants in a Module rather than a dict,
        # we force FX to copy them as buffers instead of as attributes.
        constants_root = torch.nn.Module()
        for key, value in constants.items():
            constants_root.register_buffer(key, value)
        graphmod = fx.GraphModule(constants_root, graph, class_name="tp_forward")
        # (e3nn then optimizes the einsums with opt_einsum_fx, which only reorders the contractions)
        return graphmod

    class TensorProduct(torch.nn.Module):
        def __init__(self, irreps_in1, irreps_in2, irreps_out, instructions, in1_var=None, in2_var=None,
                     out_var=None, irrep_normalization=None, path_normalization=None, internal_weights=None,
                     shared_weights=None, _specialized_code=None):
            super().__init__()

            if irrep_normalization is None:
                irrep_normalization = "component"

            if path_normalization is None:
                path_normalization = "element"

            assert irrep_normalization in ["component", "norm", "none"]
            assert path_normalization in ["element", "path", "none"]

            self.irreps_in1 = Irreps(irreps_in1)
            self.irreps_in2 = Irreps(irreps_in2)
            self.irreps_out = Irreps(irreps_out)
            del irreps_in1, irreps_in2, irreps_out

            instructions = [x if len(x) == 6 else x + (1.0,) for x in instructions]
            instructions = [
                Instruction(
                    i_in1=i_in1,
                    i_in2=i_in2,
                    i_out=i_out,
                    connection_mode=connection_mode,
                    has_weight=has_weight,
                    path_weight=path_weight,
                    path_shape={
                        "uvw": (self.irreps_in1[i_in1].mul, self.irreps_in2[i_in2].mul, self.irreps_out[i_out].mul),
                        "uvu": (self.irreps_in1[i_in1].mul, self.irreps_in2[i_in2].mul),
                        "uvv": (self.irreps_in1[i_in1].mul, self.irreps_in2[i_in2].mul),
                        "uuw": (self.irreps_in1[i_in1].mul, self.irreps_out[i_out].mul),
                        "uuu": (self.irreps_in1[i_in1].mul,),
                        "uvuv": (self.irreps_in1[i_in1].mul, self.irreps_in2[i_in2].mul),
                    }[connection_mode],
                )
                for i_in1, i_in2, i_out, connection_mode, has_weight, path_weight in instructions
            ]

            if in1_var is None:
                in1_var = [1.0 for _ in range(len(self.irreps_in1))]
            if in2_var is None:
                in2_var = [1.0 for _ in range(len(self.irreps_in2))]
            if out_var is None:
                out_var = [1.0 for _ in range(len(self.irreps_out))]

            def num_elements(ins):
                return {
                    "uvw": (self.irreps_in1[ins.i_in1].mul * self.irreps_in2[ins.i_in2].mul),
                    "uvu": self.irreps_in2[ins.i_in2].mul,
                    "uvv": self.irreps_in1[ins.i_in1].mul,
                    "uuw": self.irreps_in1[ins.i_in1].mul,
                    "uuu": 1,
                    "uvuv": 1,
                }[ins.connection_mode]

            normalization_coefficients = []
            for ins in instructions:
                mul_ir_in1 = self.irreps_in1[ins.i_in1]
                mul_ir_in2 = self.irreps_in2[ins.i_in2]
                mul_ir_out = self.irreps_out[ins.i_out]
                assert mul_ir_in1.ir.p * mul_ir_in2.ir.p == mul_ir_out.ir.p
                assert abs(mul_ir_in1.ir.l - mul_ir_in2.ir.l) <= mul_ir_out.ir.l <= mul_ir_in1.ir.l + mul_ir_in2.ir.l

                if irrep_normalization == "component":
                    alpha = mul_ir_out.ir.dim
                if irrep_normalization == "norm":
                    alpha = mul_ir_in1.ir.dim * mul_ir_in2.ir.dim
                if irrep_normalization == "none":
                    alpha = 1

                if path_normalization == "element":
                    x = sum(in1_var[i.i_in1] * in2_var[i.i_in2] * num_elements(i) for i in instructions if i.i_out == ins.i_out)
                if path_normalization == "path":
                    x = in1_var[ins.i_in1] * in2_var[ins.i_in2] * num_elements(ins)
                    x *= len([i for i in instructions if i.i_out == ins.i_out])
                if path_normalization == "none":
                    x = 1

                if x > 0.0:
                    alpha /= x

                alpha *= out_var[ins.i_out]
                alpha *= ins.path_weight

                normalization_coefficients += [sqrt(alpha)]

            self.instructions = [
                Instruction(ins.i_in1, ins.i_in2, ins.i_out, ins.connection_mode, ins.has_weight, alpha, ins.path_shape)
                for ins, alpha in zip(instructions, normalization_coefficients)
            ]

            if shared_weights is False and internal_weights is None:
                internal_weights = False

            if shared_weights is None:
                shared_weights = True

            if internal_weights is None:
                internal_weights = shared_weights and any(i.has_weight for i in self.instructions)

            assert shared_weights or not internal_weights
            self.internal_weights = internal_weights
            self.shared_weights = shared_weights
            self._specialized_code = True if _specialized_code is None else _specialized_code

            # Generate the actual tensor product code
            self._compiled_main_left_right = codegen_tensor_product_left_right(
                self.irreps_in1, self.irreps_in2, self.irreps_out, self.instructions, self.shared_weights,
                self._specialized_code)

            self.weight_numel = sum(prod(ins.path_shape) for ins in self.instructions if ins.has_weight)

            if internal_weights and self.weight_numel > 0:
                assert self.shared_weights, "Having internal weights impose shared weights"
                self.weight = torch.nn.Parameter(torch.randn(self.weight_numel))
            else:
                self.register_buffer("weight", torch.Tensor())

        def __repr__(self):
            npath = sum(prod(i.path_shape) for i in self.instructions)
            return (
                f"{self.__class__.__name__}"
                f"({self.irreps_in1.simplify()} x {self.irreps_in2.simplify()} "
                f"-> {self.irreps_out.simplify()} | {npath} paths | {self.weight_numel} weights)"
            )

        def _get_weights(self, weight):
            if weight is None:
                if self.weight_numel > 0 and not self.internal_weights:
                    raise RuntimeError("Weights must be provided when the TensorProduct does not have `internal_weights`")
                return self.weight
            else:
                if self.shared_weights:
                    assert weight.shape == (self.weight_numel,), "Invalid weight shape"
                else:
                    assert weight.shape[-1] == self.weight_numel, "Invalid weight shape"
                    assert weight.ndim > 1, "When shared weights is false, weights must have batch dimension"
            return weight

        def forward(self, x, y, weight=None):
            assert x.shape[-1] == self.irreps_in1.dim, "Incorrect last dimension for x"
            assert y.shape[-1] == self.irreps_in2.dim, "Incorrect last dimension for y"
            real_weight = self._get_weights(weight)
            return self._compiled_main_left_right(x, y, real_weight)

    class FullyConnectedTensorProduct(TensorProduct):
        def __init__(self, irreps_in1, irreps_in2, irreps_out, irrep_normalization: str = None,
                     path_normalization: str = None, **kwargs) -> None:
            irreps_in1 = Irreps(irreps_in1)
            irreps_in2 = Irreps(irreps_in2)
            irreps_out = Irreps(irreps_out)

            instr = [
                (i_1, i_2, i_out, "uvw", True, 1.0)
                for i_1, (_, ir_1) in enumerate(irreps_in1)
                for i_2, (_, ir_2) in enumerate(irreps_in2)
                for i_out, (_, ir_out) in enumerate(irreps_out)
                if ir_out in ir_1 * ir_2
            ]
            super().__init__(irreps_in1, irreps_in2, irreps_out, instr, irrep_normalization=irrep_normalization,
                             path_normalization=path_normalization, **kwargs)

    class ElementwiseTensorProduct(TensorProduct):
        def __init__(self, irreps_in1, irreps_in2, filter_ir_out=None, irrep_normalization: str = None, **kwargs) -> None:
            irreps_in1 = Irreps(irreps_in1).simplify()
            irreps_in2 = Irreps(irreps_in2).simplify()
            if filter_ir_out is not None:
                try:
                    filter_ir_out = [Irrep(ir) for ir in filter_ir_out]
                except ValueError:
                    raise ValueError(f"filter_ir_out (={filter_ir_out}) must be an iterable of e3nn.o3.Irrep")

            assert irreps_in1.num_irreps == irreps_in2.num_irreps

            irreps_in1 = list(irreps_in1)
            irreps_in2 = list(irreps_in2)

            i = 0
            while i < len(irreps_in1):
                mul_1, ir_1 = irreps_in1[i]
                mul_2, ir_2 = irreps_in2[i]

                if mul_1 < mul_2:
                    irreps_in2[i] = (mul_1, ir_2)
                    irreps_in2.insert(i + 1, (mul_2 - mul_1, ir_2))

                if mul_2 < mul_1:
                    irreps_in1[i] = (mul_2, ir_1)
                    irreps_in1.insert(i + 1, (mul_1 - mul_2, ir_1))
                i += 1

            out = []
            instr = []
            for i, ((mul, ir_1), (mul_2, ir_2)) in enumerate(zip(irreps_in1, irreps_in2)):
                assert mul == mul_2
                for ir in ir_1 * ir_2:
                    if filter_ir_out is not None and ir not in filter_ir_out:
                        continue

                    i_out = len(out)
                    out.append((mul, ir))
                    instr += [(i, i, i_out, "uuu", False)]

            super().__init__(irreps_in1, irreps_in2, out, instr, irrep_normalization=irrep_normalization, **kwargs)

    class FullTensorProduct(TensorProduct):
        def __init__(self, irreps_in1, irreps_in2, filter_ir_out=None, irrep_normalization: str = None, **kwargs) -> None:
            irreps_in1 = Irreps(irreps_in1).simplify()
            irreps_in2 = Irreps(irreps_in2).simplify()
            if filter_ir_out is not None:
                filter_ir_out = [Irrep(ir) for ir in filter_ir_out]

            out = []
            instr = []
            for i_1, (mul_1, ir_1) in enumerate(irreps_in1):
                for i_2, (mul_2, ir_2) in enumerate(irreps_in2):
                    for ir_out in ir_1 * ir_2:
                        if filter_ir_out is not None and ir_out not in filter_ir_out:
                            continue

                        i_out = len(out)
                        out.append((mul_1 * mul_2, ir_out))
                        instr += [(i_1, i_2, i_out, "uvuv", False)]

            out = Irreps(out)
            out, p, _ = out.sort()

            instr = [(i_1, i_2, p[i_out], mode, train) for i_1, i_2, i_out, mode, train in instr]

            super().__init__(irreps_in1, irreps_in2, out, instr, irrep_normalization=irrep_normalization, **kwargs)

    # ---- e3nn/o3/_norm.py ----
    class Norm(torch.nn.Module):
        def __init__(self, irreps_in, squared: bool = False) -> None:
            super().__init__()

            irreps_in = Irreps(irreps_in).simplify()
            irreps_out = Irreps([(mul, "0e") for mul, _ in irreps_in])

            instr = [(i, i, i, "uuu", False, ir.dim) for i, (mul, ir) in enumerate(irreps_in)]

            self.tp = TensorProduct(irreps_in, irreps_in, irreps_out, instr, irrep_normalization="component")

            self.irreps_in = irreps_in
            self.irreps_out = irreps_out.simplify()
            self.squared = squared

        def __repr__(self) -> str:
            return f"{self.__class__.__name__}({self.irreps_in})"

        def forward(self, features):
            out = self.tp(features, features)
            if self.squared:
                return out
            else:
                # ReLU fixes gradients at zero
                return out.relu().sqrt()

    # ---- e3nn/nn/_extract.py ----
    class Extract(torch.nn.Module):
        def __init__(self, irreps_in, irreps_outs, instructions, squeeze_out: bool = False) -> None:
            super().__init__()
            fx = torch.fx
            self.irreps_in = Irreps(irreps_in)
            self.irreps_outs = tuple(Irreps(irreps) for irreps in irreps_outs)
            self.instructions = instructions

            assert len(self.irreps_outs) == len(self.instructions)
            for irreps_out, ins in zip(self.irreps_outs, self.instructions):
                assert len(irreps_out) == len(ins)

            # == generate code ==
            graph = fx.Graph()
            x = fx.Proxy(graph.placeholder("x", torch.Tensor))
            torch._assert(x.shape[-1] == self.irreps_in.dim, "invalid input shape")

            out = []
            for irreps in self.irreps_outs:
                out.append(x.new_zeros(x.shape[:-1] + (irreps.dim,)))

            for i, (irreps_out, ins) in enumerate(zip(self.irreps_outs, self.instructions)):
                if ins == tuple(range(len(self.irreps_in))):
                    out[i].copy_(x)
                else:
                    for s_out, i_in in zip(irreps_out.slices(), ins):
                        i_start = self.irreps_in[:i_in].dim
                        i_len = self.irreps_in[i_in].dim
                        out[i].narrow(-1, s_out.start, s_out.stop - s_out.start).copy_(x.narrow(-1, i_start, i_len))

            out = tuple(e.node for e in out)
            if squeeze_out and len(out) == 1:
                graph.output(out[0], torch.Tensor)
            else:
                graph.output(out, Tuple[(torch.Tensor,) * len(self.irreps_outs)])

            self._compiled_forward = fx.GraphModule({}, graph)  # e3nn: CodeGenMixin._codegen_register

        def forward(self, x):
            return self._compiled_forward(x)

    # ---- e3nn/nn/_activation.py ----
    class Activation(torch.nn.Module):
        def __init__(self, irreps_in, acts) -> None:
            super().__init__()
            irreps_in = Irreps(irreps_in)
            if len(irreps_in) != len(acts):
                raise ValueError(f"Irreps in and number of activation functions does not match: {len(acts), (irreps_in, acts)}")

            # normalize the second moment
            acts = [normalize2mom(act) if act is not None else None for act in acts]

            irreps_out = []
            for (mul, (l_in, p_in)), act in zip(irreps_in, acts):
                if act is not None:
                    if l_in != 0:
                        raise ValueError("Activation: cannot apply an activation function to a non-scalar input.")

                    x = torch.linspace(0, 10, 256, device=torch.empty(0).device)

                    a1, a2 = act(x), act(-x)
                    if (a1 - a2).abs().max() < 1e-5:
                        p_act = 1
                    elif (a1 + a2).abs().max() < 1e-5:
                        p_act = -1
                    else:
                        p_act = 0

                    p_out = p_act if p_in == -1 else p_in
                    irreps_out.append((mul, (0, p_out)))

                    if p_out == 0:
                        raise ValueError(
                            "Activation: the parity is violated! The input scalar is odd but the activation is neither "
                            "even nor odd."
                        )
                else:
                    irreps_out.append((mul, (l_in, p_in)))

            self.irreps_in = irreps_in
            self.irreps_out = Irreps(irreps_out)
            self.acts = torch.nn.ModuleList(acts)
            assert len(self.irreps_in) == len(self.acts)

        def __repr__(self) -> str:
            acts = "".join(["x" if a is not None else " " for a in self.acts])
            return f"{self.__class__.__name__} [{acts}] ({self.irreps_in} -> {self.irreps_out})"

        def forward(self, features, dim: int = -1):
            output = []
            index = 0
            for (mul, ir), act in zip(self.irreps_in, self.acts):
                if act is not None:
                    output.append(act(features.narrow(dim, index, mul)))
                else:
                    output.append(features.narrow(dim, index, mul * ir.dim))
                index += mul * ir.dim

            if len(output) > 1:
                return torch.cat(output, dim=dim)
            elif len(output) == 1:
                return output[0]
            else:
                return torch.zeros_like(features)

    # ---- e3nn/nn/_gate.py ----
    class _Sortcut(torch.nn.Module):
        def __init__(self, *irreps_outs):
            super().__init__()
            self.irreps_outs = tuple(Irreps(irreps).simplify() for irreps in irreps_outs)
            irreps_in = sum(self.irreps_outs, Irreps([]))

            i = 0
            instructions = []
            for irreps_out in self.irreps_outs:
                instructions += [tuple(range(i, i + len(irreps_out)))]
                i += len(irreps_out)
            assert len(irreps_in) == i, (len(irreps_in), i)

            irreps_in, p, _ = irreps_in.sort()
            instructions = [tuple(p[i] for i in x) for x in instructions]

            self.cut = Extract(irreps_in, self.irreps_outs, instructions)
            self.irreps_in = irreps_in.simplify()

        def forward(self, x):
            return self.cut(x)

    class Gate(torch.nn.Module):
        def __init__(self, irreps_scalars, act_scalars, irreps_gates, act_gates, irreps_gated):
            super().__init__()
            irreps_scalars = Irreps(irreps_scalars)
            irreps_gates = Irreps(irreps_gates)
            irreps_gated = Irreps(irreps_gated)

            self.sc = _Sortcut(irreps_scalars, irreps_gates, irreps_gated)
            self.irreps_scalars, self.irreps_gates, self.irreps_gated = self.sc.irreps_outs
            self._irreps_in = self.sc.irreps_in

            self.act_scalars = Activation(irreps_scalars, act_scalars)
            irreps_scalars = self.act_scalars.irreps_out

            self.act_gates = Activation(irreps_gates, act_gates)
            irreps_gates = self.act_gates.irreps_out

            self.mul = ElementwiseTensorProduct(irreps_gated, irreps_gates)
            irreps_gated = self.mul.irreps_out

            self._irreps_out = irreps_scalars + irreps_gated

        def __repr__(self):
            return f"{self.__class__.__name__} ({self.irreps_in} -> {self.irreps_out})"

        def forward(self, features):
            with torch.autograd.profiler.record_function("Gate"):
                scalars, gates, gated = self.sc(features)

                scalars = self.act_scalars(scalars)
                if gates.shape[-1]:
                    gates = self.act_gates(gates)
                    gated = self.mul(gated, gates)
                    features = torch.cat([scalars, gated], dim=-1)
                else:
                    features = scalars
                return features

        @property
        def irreps_in(self):
            return self._irreps_in

        @property
        def irreps_out(self):
            return self._irreps_out

    # ---- e3nn/nn/_normact.py ----
    class NormActivation(torch.nn.Module):
        def __init__(self, irreps_in, scalar_nonlinearity, normalize: bool = True, epsilon=None, bias: bool = False) -> None:
            super().__init__()
            self.irreps_in = Irreps(irreps_in)
            self.irreps_out = Irreps(irreps_in)

            if epsilon is None and normalize:
                epsilon = 1e-8
            elif epsilon is not None and not normalize:
                raise ValueError("epsilon and normalize = False don't make sense together")
            elif not epsilon > 0:
                raise ValueError(f"epsilon {epsilon} is invalid, must be strictly positive.")
            self.epsilon = epsilon
            if self.epsilon is not None:
                self._eps_squared = epsilon * epsilon
            else:
                self._eps_squared = 0.0  # doesn't matter

            # if we have an epsilon, use squared and do the sqrt ourselves
            self.norm = Norm(irreps_in, squared=(epsilon is not None))
            self.scalar_nonlinearity = scalar_nonlinearity
            self.normalize = normalize
            self.bias = bias
            if self.bias:
                self.biases = torch.nn.Parameter(torch.zeros(self.irreps_in.num_irreps))

            self.scalar_multiplier = ElementwiseTensorProduct(
                irreps_in1=self.norm.irreps_out,
                irreps_in2=irreps_in,
            )

        def forward(self, features):
            norms = self.norm(features)
            if self._eps_squared > 0:
                # See TFN for the original version of this approach:
                # https://github.com/tensorfieldnetworks/tensorfieldnetworks/blob/master/tensorfieldnetworks/utils.py#L22
                norms[norms < self._eps_squared] = self._eps_squared
                norms = norms.sqrt()

            nonlin_arg = norms
            if self.bias:
                nonlin_arg = nonlin_arg + self.biases

            scalings = self.scalar_nonlinearity(nonlin_arg)
            if self.normalize:
                scalings = scalings / norms

            return self.scalar_multiplier(scalings, features)

    # ---- e3nn/o3/_angular_spherical_harmonics.py ----
    class SphericalHarmonicsAlphaBeta(torch.nn.Module):
        def __init__(self, l, normalization: str = "integral") -> None:
            super().__init__()

            if isinstance(l, Irreps):
                ls = [l for mul, (l, p) in l for _ in range(mul)]
            elif isinstance(l, int):
                ls = [l]
            else:
                ls = list(l)

            self._ls_list = ls
            self._lmax = max(ls)
            self.legendre = Legendre(ls)
            self.normalization = normalization

        def forward(self, alpha, beta):
            y, z = beta.cos(), beta.sin()
            sha = spherical_harmonics_alpha(self._lmax, alpha.flatten())  # [z, m]
            shy = self.legendre(y.flatten(), z.flatten())  # [z, l * m]
            out = _mul_m_lm([(1, l) for l in self._ls_list], sha, shy)

            if self.normalization == "norm":
                out.div_(
                    torch.cat(
                        [
                            (math.sqrt(2 * l + 1) / math.sqrt(4 * math.pi))
                            * torch.ones(2 * l + 1, dtype=out.dtype, device=out.device)
                            for l in self._ls_list
                        ]
                    )
                )
            elif self.normalization == "component":
                out.mul_(math.sqrt(4 * math.pi))

            return out.reshape(alpha.shape + (shy.shape[1],))

    def spherical_harmonics_alpha_beta(l, alpha, beta, *, normalization: str = "integral"):
        sh = SphericalHarmonicsAlphaBeta(l, normalization=normalization)
        return sh(alpha, beta)

    @torch.jit.script
    def spherical_harmonics_alpha(l: int, alpha):
        alpha = alpha.unsqueeze(-1)  # [..., 1]
        m = torch.arange(1, l + 1, dtype=alpha.dtype, device=alpha.device)  # [1, 2, 3, ..., l]
        cos = torch.cos(m * alpha)  # [..., m]

        m = torch.arange(l, 0, -1, dtype=alpha.dtype, device=alpha.device)  # [l, l-1, l-2, ..., 1]
        sin = torch.sin(m * alpha)  # [..., m]

        out = torch.cat(
            [
                math.sqrt(2) * sin,
                torch.ones_like(alpha),
                math.sqrt(2) * cos,
            ],
            dim=alpha.ndim - 1,
        )

        return out  # [..., m]

    class Legendre(torch.fx.GraphModule):
        # pylint: disable=abstract-method

        def __init__(self, ls) -> None:
            fx = torch.fx
            super().__init__(self, fx.Graph())

            # == generate code ==
            graph = self.graph
            z = fx.Proxy(graph.placeholder("z", torch.Tensor))
            y = fx.Proxy(graph.placeholder("y", torch.Tensor))

            out = z.new_zeros(z.shape + (sum(2 * l + 1 for l in ls),))

            i = 0
            for l in ls:
                leg = []
                for m in range(l + 1):
                    p = _poly_legendre(l, m)
                    p = list(p.items())

                    (zn, yn), c = p[0]
                    x = float(c) * z**zn * y**yn

                    for (zn, yn), c in p[1:]:
                        x += float(c) * z**zn * y**yn

                    leg.append(x.unsqueeze(-1))

                for m in range(-l, l + 1):
                    out.narrow(-1, i, 1).copy_(leg[abs(m)])
                    i += 1

            graph.output(out.node, torch.Tensor)

            self.recompile()

    def _poly_legendre(l, m):
        # e3nn expands 1 / (2^l l!) y^m d^(l+m)/dz^(l+m) (z^2 - 1)^l * sqrt((2l+1)/(4 pi) (l-m)!/(l+m)!) with sympy;
        # the same coefficients with Fractions (sympy is not a Lucid dependency)
        m = abs(m)
        out = {}
        for k in range(l + 1):
            if 2 * k < l + m:
                continue
            c = Fraction(math.comb(l, k) * (-1) ** (l - k) * math.factorial(2 * k), math.factorial(2 * k - l - m))
            out[(2 * k - l - m, m)] = c / (2**l * math.factorial(l))
        norm = math.sqrt((2 * l + 1) / (4 * math.pi) * math.factorial(l - m) / math.factorial(l + m))
        return {key: float(c) * norm for key, c in sorted(out.items(), reverse=True)}

    @torch.jit.script
    def _mul_m_lm(mul_l: List[Tuple[int, int]], x_m, x_lm):
        l_max = x_m.shape[-1] // 2
        out = []
        i = 0
        for mul, l in mul_l:
            d = mul * (2 * l + 1)
            x1 = x_lm[..., i : i + d]  # [..., mul * m]
            x1 = x1.reshape(x1.shape[:-1] + (mul, 2 * l + 1))  # [..., mul, m]
            x2 = x_m[..., l_max - l : l_max + l + 1]  # [..., m]
            x2 = x2.reshape(x2.shape[:-1] + (1, 2 * l + 1))  # [..., mul=1, m]
            x = x1 * x2
            x = x.reshape(x.shape[:-2] + (d,))
            out.append(x)
            i += d
        return torch.cat(out, dim=-1)

    # ---- e3nn/o3/_s2grid.py ----
    def _quadrature_weights(b, dtype=None, device=None):
        k = torch.arange(b, device=device)
        w = torch.tensor(
            [
                (
                    (2.0 / b)
                    * torch.sin(math.pi * (2.0 * j + 1.0) / (4.0 * b))
                    * ((1.0 / (2 * k + 1)) * torch.sin((2 * j + 1) * (2 * k + 1) * math.pi / (4.0 * b))).sum()
                )
                for j in torch.arange(2 * b, device=device)
            ],
            dtype=dtype,
            device=device,
        )

        w /= 2.0 * ((2 * b) ** 2)
        return w

    def s2_grid(res_beta, res_alpha, dtype=None, device=None):
        dtype, device = explicit_default_types(dtype, device)

        i = torch.arange(res_beta, dtype=dtype, device=device)
        betas = (i + 0.5) / res_beta * math.pi

        i = torch.arange(res_alpha, dtype=dtype, device=device)
        alphas = i / res_alpha * 2 * math.pi
        return betas, alphas

    def spherical_harmonics_s2_grid(lmax, res_beta, res_alpha, dtype=None, device=None):
        betas, alphas = s2_grid(res_beta, res_alpha, dtype=dtype, device=device)
        shb = Legendre(list(range(lmax + 1)))(betas.cos(), betas.sin().abs())  # [b, l * m]
        sha = spherical_harmonics_alpha(lmax, alphas)  # [a, m]
        return betas, alphas, shb, sha

    def _complete_lmax_res(lmax, res_beta, res_alpha):
        if res_beta is None:
            if lmax is not None:
                res_beta = 2 * (lmax + 1)  # minimum req. to go on sphere and back
            elif res_alpha is not None:
                res_beta = 2 * ((res_alpha + 1) // 2)
            else:
                raise ValueError("All the entries are None")

        if res_alpha is None:
            if lmax is not None:
                if res_beta is not None:
                    res_alpha = max(2 * lmax + 1, res_beta - 1)
                else:
                    res_alpha = 2 * lmax + 1  # minimum req. to go on sphere and back
            elif res_beta is not None:
                res_alpha = res_beta - 1

        if lmax is None:
            lmax = min(res_beta // 2 - 1, (res_alpha - 1) // 2)  # maximum possible to go on sphere and back

        assert res_beta % 2 == 0
        assert lmax + 1 <= res_beta // 2

        return lmax, res_beta, res_alpha

    def _expand_matrix(ls, like=None, dtype=None, device=None):
        lmax = max(ls)
        if like is None:
            m = torch.zeros(len(ls), 2 * lmax + 1, sum(2 * l + 1 for l in ls), dtype=dtype, device=device)
        else:
            m = like.new_zeros((len(ls), 2 * lmax + 1, sum(2 * l + 1 for l in ls)), dtype=dtype, device=device)
        i = 0
        for j, l in enumerate(ls):
            m[j, lmax - l : lmax + l + 1, i : i + 2 * l + 1] = torch.eye(2 * l + 1, dtype=dtype, device=device)
            i += 2 * l + 1
        return m

    def rfft(x, l):
        *size, res = x.shape
        x = x.reshape(-1, res)
        x = torch.fft.rfft(x, dim=1)
        x = torch.cat(
            [
                x[:, 1 : l + 1].imag.flip(1).mul(-math.sqrt(2)),
                x[:, :1].real,
                x[:, 1 : l + 1].real.mul(math.sqrt(2)),
            ],
            dim=1,
        )
        return x.reshape(*size, 2 * l + 1)

    def irfft(x, res):
        assert res % 2 == 1
        *size, sm = x.shape
        x = x.reshape(-1, sm)
        x = torch.cat(
            [
                x.new_zeros((x.shape[0], (res - sm) // 2)),
                x,
                x.new_zeros((x.shape[0], (res - sm) // 2)),
            ],
            dim=-1,
        )
        assert x.shape[1] == res
        l = res // 2
        x = torch.complex(
            torch.cat([x[:, l : l + 1], x[:, l + 1 :].div(math.sqrt(2))], dim=1),
            torch.cat(
                [
                    torch.zeros_like(x[:, :1]),
                    x[:, :l].flip(-1).div(-math.sqrt(2)),
                ],
                dim=1,
            ),
        )
        x = torch.fft.irfft(x, n=res, dim=1) * res
        return x.reshape(*size, res)

    class ToS2Grid(torch.nn.Module):
        def __init__(self, lmax=None, res=None, normalization: str = "component", fft=True, dtype=None, device=None) -> None:
            super().__init__()

            assert normalization in ["norm", "component", "integral"] or torch.is_tensor(
                normalization
            ), "normalization needs to be 'norm', 'component' or 'integral'"

            if isinstance(res, int) or res is None:
                lmax, res_beta, res_alpha = _complete_lmax_res(lmax, res, None)
            else:
                lmax, res_beta, res_alpha = _complete_lmax_res(lmax, *res)

            betas, alphas, shb, sha = spherical_harmonics_s2_grid(lmax, res_beta, res_alpha, dtype=dtype, device=device)

            n = None
            if normalization == "component":
                n = (
                    math.sqrt(4 * math.pi)
                    * betas.new_tensor([1 / math.sqrt(2 * l + 1) for l in range(lmax + 1)])
                    / math.sqrt(lmax + 1)
                )
            if normalization == "norm":
                n = math.sqrt(4 * math.pi) * betas.new_ones(lmax + 1) / math.sqrt(lmax + 1)
            if normalization == "integral":
                n = betas.new_ones(lmax + 1)
            if torch.is_tensor(normalization):
                n = normalization
            m = _expand_matrix(range(lmax + 1), dtype=dtype, device=device)  # [l, m, i]
            shb = torch.einsum("lmj,bj,lmi,l->mbi", m, shb, m, n)  # [m, b, i]

            self.lmax, self.res_beta, self.res_alpha, self.fft = lmax, res_beta, res_alpha, fft
            self.register_buffer("alphas", alphas)
            self.register_buffer("betas", betas)
            self.register_buffer("sha", sha)
            self.register_buffer("shb", shb)

        def __repr__(self) -> str:
            return f"{self.__class__.__name__}(lmax={self.lmax} res={self.res_beta}x{self.res_alpha} (beta x alpha))"

        @property
        def grid(self):
            beta, alpha = torch.meshgrid(self.betas, self.alphas, indexing="ij")
            return angles_to_xyz(alpha, beta)

        def forward(self, x):
            size = x.shape[:-1]
            x = x.reshape(-1, x.shape[-1])

            x = torch.einsum("mbi,zi->zbm", self.shb, x)  # [batch, beta, m]

            sa, sm = self.sha.shape
            if sa >= sm and sa % 2 == 1 and self.fft:
                x = irfft(x, sa)
            else:
                x = torch.einsum("am,zbm->zba", self.sha, x)
            return x.reshape(*size, *x.shape[1:])

    class FromS2Grid(torch.nn.Module):
        def __init__(self, res=None, lmax=None, normalization: str = "component", lmax_in=None, fft=True, dtype=None, device=None) -> None:
            super().__init__()

            assert normalization in ["norm", "component", "integral"] or torch.is_tensor(
                normalization
            ), "normalization needs to be 'norm', 'component' or 'integral'"

            if isinstance(res, int) or res is None:
                lmax, res_beta, res_alpha = _complete_lmax_res(lmax, res, None)
            else:
                lmax, res_beta, res_alpha = _complete_lmax_res(lmax, *res)

            if lmax_in is None:
                lmax_in = lmax

            betas, alphas, shb, sha = spherical_harmonics_s2_grid(lmax, res_beta, res_alpha, dtype=dtype, device=device)

            # normalize such that it is the inverse of ToS2Grid
            n = None
            if normalization == "component":
                n = (
                    math.sqrt(4 * math.pi)
                    * betas.new_tensor([math.sqrt(2 * l + 1) for l in range(lmax + 1)])
                    * math.sqrt(lmax_in + 1)
                )
            if normalization == "norm":
                n = math.sqrt(4 * math.pi) * betas.new_ones(lmax + 1) * math.sqrt(lmax_in + 1)
            if normalization == "integral":
                n = 4 * math.pi * betas.new_ones(lmax + 1)
            if torch.is_tensor(normalization):
                n = normalization
            m = _expand_matrix(range(lmax + 1), dtype=dtype, device=device)  # [l, m, i]
            assert res_beta % 2 == 0
            qw = _quadrature_weights(res_beta // 2, dtype=dtype, device=device) * res_beta**2 / res_alpha  # [b]
            shb = torch.einsum("lmj,bj,lmi,l,b->mbi", m, shb, m, n, qw)  # [m, b, i]

            self.lmax, self.res_beta, self.res_alpha, self.fft = lmax, res_beta, res_alpha, fft
            self.register_buffer("alphas", alphas)
            self.register_buffer("betas", betas)
            self.register_buffer("sha", sha)
            self.register_buffer("shb", shb)

        def __repr__(self) -> str:
            return f"{self.__class__.__name__}(lmax={self.lmax} res={self.res_beta}x{self.res_alpha} (beta x alpha))"

        @property
        def grid(self):
            beta, alpha = torch.meshgrid(self.betas, self.alphas, indexing="ij")
            return angles_to_xyz(alpha, beta)

        def forward(self, x):
            size = x.shape[:-2]
            res_beta, res_alpha = x.shape[-2:]
            x = x.reshape(-1, res_beta, res_alpha)

            sa, sm = self.sha.shape
            if sm <= sa and sa % 2 == 1 and self.fft:
                x = rfft(x, sm // 2)
            else:
                x = torch.einsum("am,zba->zbm", self.sha, x)
            x = torch.einsum("mbi,zbm->zi", self.shb, x)
            return x.reshape(*size, x.shape[1])

    # ---- e3nn/math/_linalg.py (without the TorchScript decorator) ----
    def orthonormalize(original, eps: float = 1e-9):
        assert original.dim() == 2
        dim = original.shape[1]

        final = []
        matrix = []

        for i, x in enumerate(original):
            # x = sum_i cx_i original_i
            cx = x.new_zeros(len(original))
            cx[i] = 1
            for j, y in enumerate(final):
                c = torch.dot(x, y)
                x = x - c * y
                cx = cx - c * matrix[j]
            if x.norm() > 2 * eps:
                c = 1 / x.norm()
                x = c * x
                cx = c * cx
                x[x.abs() < eps] = 0
                cx[cx.abs() < eps] = 0
                c = x[x.nonzero()[0, 0]].sign()
                x = c * x
                cx = c * cx
                final += [x]
                matrix += [cx]

        final = torch.stack(final) if len(final) > 0 else original.new_zeros((0, dim))
        matrix = torch.stack(matrix) if len(matrix) > 0 else original.new_zeros((0, len(original)))

        return final, matrix

    def complete_basis(vecs, eps: float = 1e-9):
        assert vecs.dim() == 2
        dim = vecs.shape[1]

        base = [x / x.norm() for x in vecs]

        expand = []
        for x in torch.eye(dim, device=vecs.device, dtype=vecs.dtype):
            for y in base + expand:
                x -= torch.dot(x, y) * y
            if x.norm() > 2 * eps:
                x /= x.norm()
                x[x.abs() < eps] = x.new_zeros(())
                x *= x[x.nonzero()[0, 0]].sign()
                expand += [x]

        expand = torch.stack(expand) if len(expand) > 0 else vecs.new_zeros(0, dim)

        return expand

    # ---- e3nn/nn/_batchnorm.py ----
    class BatchNorm(torch.nn.Module):
        def __init__(self, irreps, eps=1e-5, momentum=0.1, affine=True, reduce="mean", instance=False, normalization="component"):
            super().__init__()

            self.irreps = Irreps(irreps)
            self.eps = eps
            self.momentum = momentum
            self.affine = affine
            self.instance = instance

            num_scalar = sum(mul for mul, ir in self.irreps if ir.is_scalar())
            num_features = self.irreps.num_irreps
            self.features = []

            if self.instance:
                self.register_buffer("running_mean", None)
                self.register_buffer("running_var", None)
            else:
                self.register_buffer("running_mean", torch.zeros(num_scalar))
                self.register_buffer("running_var", torch.ones(num_features))

            if affine:
                self.weight = torch.nn.Parameter(torch.ones(num_features))
                self.bias = torch.nn.Parameter(torch.zeros(num_scalar))
            else:
                self.register_parameter("weight", None)
                self.register_parameter("bias", None)

            assert isinstance(reduce, str), "reduce should be passed as a string value"
            assert reduce in ["mean", "max"], "reduce needs to be 'mean' or 'max'"
            self.reduce = reduce
            irs = []
            for mul, ir in self.irreps:
                irs.append((mul, ir.dim, ir.is_scalar()))
            self.irs = irs

            assert normalization in ["norm", "component"], "normalization needs to be 'norm' or 'component'"
            self.normalization = normalization

        def __repr__(self):
            return f"{self.__class__.__name__} ({self.irreps}, eps={self.eps}, momentum={self.momentum})"

        def _roll_avg(self, curr, update):
            return (1 - self.momentum) * curr + self.momentum * update.detach()

        def forward(self, input):
            orig_shape = input.shape
            batch = input.shape[0]
            dim = input.shape[-1]
            input = input.reshape(batch, -1, dim)  # [batch, sample, stacked features]

            if self.training and not self.instance:
                new_means = []
                new_vars = []

            fields = []
            ix = 0
            irm = 0
            irv = 0
            iw = 0
            ib = 0

            for (mul, d, is_scalar) in self.irs:
                field = input[:, :, ix : ix + mul * d]  # [batch, sample, mul * repr]
                ix += mul * d

                # [batch, sample, mul, repr]
                field = field.reshape(batch, -1, mul, d)

                if is_scalar:
                    if self.training or self.instance:
                        if self.instance:
                            field_mean = field.mean(1).reshape(batch, mul)  # [batch, mul]
                        else:
                            field_mean = field.mean([0, 1]).reshape(mul)  # [mul]
                            new_means.append(self._roll_avg(self.running_mean[irm : irm + mul], field_mean))
                    else:
                        field_mean = self.running_mean[irm : irm + mul]
                    irm += mul

                    # [batch, sample, mul, repr]
                    field = field - field_mean.reshape(-1, 1, mul, 1)

                if self.training or self.instance:
                    if self.normalization == "norm":
                        field_norm = field.pow(2).sum(3)  # [batch, sample, mul]
                    elif self.normalization == "component":
                        field_norm = field.pow(2).mean(3)  # [batch, sample, mul]
                    else:
                        raise ValueError("Invalid normalization option {}".format(self.normalization))

                    if self.reduce == "mean":
                        field_norm = field_norm.mean(1)  # [batch, mul]
                    elif self.reduce == "max":
                        field_norm = field_norm.max(1).values  # [batch, mul]
                    else:
                        raise ValueError("Invalid reduce option {}".format(self.reduce))

                    if not self.instance:
                        field_norm = field_norm.mean(0)  # [mul]
                        new_vars.append(self._roll_avg(self.running_var[irv : irv + mul], field_norm))
                else:
                    field_norm = self.running_var[irv : irv + mul]
                irv += mul

                field_norm = (field_norm + self.eps).pow(-0.5)  # [(batch,) mul]

                if self.affine:
                    weight = self.weight[iw : iw + mul]  # [mul]
                    iw += mul

                    field_norm = field_norm * weight  # [(batch,) mul]

                field = field * field_norm.reshape(-1, 1, mul, 1)  # [batch, sample, mul, repr]

                if self.affine and is_scalar:
                    bias = self.bias[ib : ib + mul]  # [mul]
                    ib += mul
                    field += bias.reshape(mul, 1)  # [batch, sample, mul, repr]

                fields.append(field.reshape(batch, -1, mul * d))  # [batch, sample, mul * repr]

            if ix != dim:
                fmt = "`ix` should have reached input.size(-1) ({}), but it ended at {}"
                msg = fmt.format(dim, ix)
                raise AssertionError(msg)

            if self.training and not self.instance:
                assert irm == self.running_mean.numel()
                assert irv == self.running_var.size(0)
            if self.affine:
                assert iw == self.weight.size(0)
                assert ib == self.bias.numel()

            if self.training and not self.instance:
                if len(new_means) > 0:
                    torch.cat(new_means, out=self.running_mean)
                if len(new_vars) > 0:
                    torch.cat(new_vars, out=self.running_var)

            output = torch.cat(fields, dim=2)  # [batch, sample, stacked features]
            return output.reshape(orig_shape)

    # ---- e3nn/nn/_s2act.py ----
    class S2Activation(torch.nn.Module):
        def __init__(self, irreps, act, res, normalization="component", lmax_out=None, random_rot=False):
            super().__init__()

            irreps = Irreps(irreps).simplify()
            _, (_, p_val) = irreps[0]
            _, (lmax, _) = irreps[-1]
            assert all(mul == 1 for mul, _ in irreps)
            assert irreps.ls == [l for l in range(lmax + 1)]
            if all(p == p_val for _, (l, p) in irreps):
                p_arg = 1
            elif all(p == p_val * (-1) ** l for _, (l, p) in irreps):
                p_arg = -1
            else:
                assert False, "the parity of the input is not well defined"
            self.irreps_in = irreps
            # the input transforms as : A_l ---> p_val * (p_arg)^l * A_l
            # the sphere signal transforms as : f(r) ---> p_val * f(p_arg * r)
            if lmax_out is None:
                lmax_out = lmax

            if p_val == +1 or p_val == 0:
                self.irreps_out = Irreps([(1, (l, p_val * p_arg**l)) for l in range(lmax_out + 1)])
            if p_val == -1:
                x = torch.linspace(0, 10, 256)
                a1, a2 = act(x), act(-x)
                if (a1 - a2).abs().max() < a1.abs().max() * 1e-10:
                    # p_act = 1
                    self.irreps_out = Irreps([(1, (l, p_arg**l)) for l in range(lmax_out + 1)])
                elif (a1 + a2).abs().max() < a1.abs().max() * 1e-10:
                    # p_act = -1
                    self.irreps_out = Irreps([(1, (l, -(p_arg**l))) for l in range(lmax_out + 1)])
                else:
                    # p_act = 0
                    raise ValueError("warning! the parity is violated")

            self.to_s2 = ToS2Grid(lmax, res, normalization=normalization)
            self.from_s2 = FromS2Grid(res, lmax_out, normalization=normalization, lmax_in=lmax)
            self.act = normalize2mom(act)
            self.random_rot = random_rot

        def __repr__(self):
            return f"{self.__class__.__name__} ({self.irreps_in} -> {self.irreps_out})"

        def forward(self, features):
            assert features.shape[-1] == self.irreps_in.dim

            if self.random_rot:
                abc = rand_angles(dtype=features.dtype, device=features.device)
                features = torch.einsum("ij,...j->...i", self.irreps_in.D_from_angles(*abc), features)

            features = self.to_s2(features)  # [..., beta, alpha]
            features = self.act(features)
            features = self.from_s2(features)

            if self.random_rot:
                features = torch.einsum("ij,...j->...i", self.irreps_out.D_from_angles(*abc).T, features)
            return features

    # ---- e3nn/o3/_so3grid.py ----
    def flat_wigner(lmax, alpha, beta, gamma):
        return torch.cat([(2 * l + 1) ** 0.5 * wigner_D(l, alpha, beta, gamma).flatten(-2) for l in range(lmax + 1)], dim=-1)

    class SO3Grid(torch.nn.Module):  # pylint: disable=abstract-method
        def __init__(self, lmax, resolution, *, normalization="component", aspect_ratio=2):
            super().__init__()

            assert normalization == "component"

            nb = 2 * resolution
            na = round(2 * aspect_ratio * resolution)

            b, a = s2_grid(nb, na)
            self.register_buffer("D", flat_wigner(lmax, a[:, None, None], b[None, :, None], a[None, None, :]))
            qw = _quadrature_weights(nb // 2) * nb**2 / na**2
            self.register_buffer("qw", qw)

            self.register_buffer("alpha", a)
            self.register_buffer("beta", b)
            self.register_buffer("gamma", a)

            self.res_alpha = na
            self.res_beta = nb
            self.res_gamma = na

        def to_grid(self, features):
            return torch.einsum("...i,abci->...abc", features, self.D) / self.D.shape[-1] ** 0.5

        def from_grid(self, features):
            return torch.einsum("...abc,abci,b->...i", features, self.D, self.qw) * self.D.shape[-1] ** 0.5

    # ---- e3nn/math/perm.py, e3nn/math/_reduce.py ----
    def perm_compose(p1, p2):
        return tuple(p1[p2[i]] for i in range(len(p1)))

    def germinate_formulas(formula):
        formulas = [(-1 if f.startswith("-") else 1, f.replace("-", "")) for f in formula.split("=")]
        s0, f0 = formulas[0]
        assert s0 == 1

        for _s, f in formulas:
            if len(set(f)) != len(f) or set(f) != set(f0):
                raise RuntimeError(f"{f} is not a permutation of {f0}")
            if len(f0) != len(f):
                raise RuntimeError(f"{f0} and {f} don't have the same number of indices")

        # `formulas` is a list of (sign, permutation of indices)
        # each formula can be viewed as a permutation of the original formula
        formulas = {(s, tuple(f.index(i) for i in f0)) for s, f in formulas}  # set of generators (permutations)

        # they can be composed, for instance if you have ijk=jik=ikj
        # you also have ijk=jki
        # applying all possible compositions creates an entire group
        while True:
            n = len(formulas)
            formulas = formulas.union([(s, perm_inverse(p)) for s, p in formulas])
            formulas = formulas.union([(s1 * s2, perm_compose(p1, p2)) for s1, p1 in formulas for s2, p2 in formulas])
            if len(formulas) == n:
                break  # we break when the set is stable => it is now a group \o/

        return f0, formulas

    def reduce_permutation(f0, formulas, dtype=None, device=None, **dims):
        # here we check that each index has one and only one dimension
        for _s, p in formulas:
            f = "".join(f0[i] for i in p)
            for i, j in zip(f0, f):
                if i in dims and j in dims and dims[i] != dims[j]:
                    raise RuntimeError(f"dimension of {i} and {j} should be the same")
                if i in dims:
                    dims[j] = dims[i]
                if j in dims:
                    dims[i] = dims[j]

        for i in f0:
            if i not in dims:
                raise RuntimeError(f"index {i} has no dimension associated to it")

        dims = [dims[i] for i in f0]

        full_base = list(itertools.product(*(range(d) for d in dims)))  # (0, 0, 0), (0, 0, 1), (0, 0, 2), ... (3, 3, 3)

        base = set()
        for x in full_base:
            xs = {(s, tuple(x[i] for i in p)) for s, p in formulas}
            if not (-1, x) in xs:
                # the sign is arbitrary, put both possibilities
                base.add(frozenset({frozenset(xs), frozenset({(-s, x) for s, x in xs})}))

        base = sorted([sorted([sorted(xs) for xs in x]) for x in base])

        # First we compute the change of basis (projection) between full_base and base
        d_sym = len(base)
        Q = torch.zeros(d_sym, len(full_base), dtype=dtype, device=device)
        ret = []

        for i, x in enumerate(base):
            x = max(x, key=lambda xs: sum(s for s, x in xs))
            ret.append(x)
            for s, e in x:
                j = 0
                for k, d in zip(e, dims):
                    j *= d
                    j += k
                Q[i, j] = s / len(x) ** 0.5

        Q = Q.reshape(d_sym, *dims)
        return Q, ret

    # ---- e3nn/o3/_reduce.py (the fx graph it builds, evaluated eagerly) ----
    _TP = collections.namedtuple("tp", "op, args")
    _INPUT = collections.namedtuple("input", "tensor, start, stop")

    def _wigner_nj(*irrepss, normalization: str = "component", filter_ir_mid=None, dtype=None, device=None):
        irrepss = [Irreps(irreps) for irreps in irrepss]
        if filter_ir_mid is not None:
            filter_ir_mid = [Irrep(ir) for ir in filter_ir_mid]

        if len(irrepss) == 1:
            (irreps,) = irrepss
            ret = []
            e = torch.eye(irreps.dim, dtype=dtype, device=device)
            i = 0
            for mul, ir in irreps:
                for _ in range(mul):
                    sl = slice(i, i + ir.dim)
                    ret += [(ir, _INPUT(0, sl.start, sl.stop), e[sl])]
                    i += ir.dim
            return ret

        *irrepss_left, irreps_right = irrepss
        ret = []
        for ir_left, path_left, C_left in _wigner_nj(
            *irrepss_left, normalization=normalization, filter_ir_mid=filter_ir_mid, dtype=dtype, device=device
        ):
            i = 0
            for mul, ir in irreps_right:
                for ir_out in ir_left * ir:
                    if filter_ir_mid is not None and ir_out not in filter_ir_mid:
                        continue

                    C = wigner_3j(ir_out.l, ir_left.l, ir.l, dtype=dtype, device=device)
                    if normalization == "component":
                        C *= ir_out.dim**0.5
                    if normalization == "norm":
                        C *= ir_left.dim**0.5 * ir.dim**0.5

                    C = torch.einsum("jk,ijl->ikl", C_left.flatten(1), C)
                    C = C.reshape(ir_out.dim, *(irreps.dim for irreps in irrepss_left), ir.dim)
                    for u in range(mul):
                        E = torch.zeros(
                            ir_out.dim, *(irreps.dim for irreps in irrepss_left), irreps_right.dim, dtype=dtype, device=device
                        )
                        sl = slice(i + u * ir.dim, i + (u + 1) * ir.dim)
                        E[..., sl] = C
                        ret += [
                            (
                                ir_out,
                                _TP(op=(ir_left, ir, ir_out), args=(path_left, _INPUT(len(irrepss_left), sl.start, sl.stop))),
                                E,
                            )
                        ]
                i += mul * ir.dim

        return sorted(ret, key=lambda x: x[0])

    def _get_ops(path):
        if isinstance(path, _INPUT):
            return
        assert isinstance(path, _TP)
        yield path.op
        for op in _get_ops(path.args[0]):
            yield op

    class ReducedTensorProducts(torch.nn.Module):
        def __init__(self, formula, filter_ir_out=None, filter_ir_mid=None, eps: float = 1e-9, **irreps) -> None:
            super().__init__()

            if filter_ir_out is not None:
                filter_ir_out = [Irrep(ir) for ir in filter_ir_out]
            if filter_ir_mid is not None:
                filter_ir_mid = [Irrep(ir) for ir in filter_ir_mid]

            f0, formulas = germinate_formulas(formula)

            irreps = {i: Irreps(irs) for i, irs in irreps.items()}

            for i in irreps:
                if len(i) != 1:
                    raise TypeError(f"got an unexpected keyword argument '{i}'")

            for _sign, p in formulas:
                f = "".join(f0[i] for i in p)
                for i, j in zip(f0, f):
                    if i in irreps and j in irreps and irreps[i] != irreps[j]:
                        raise RuntimeError(f"irreps of {i} and {j} should be the same")
                    if i in irreps:
                        irreps[j] = irreps[i]
                    if j in irreps:
                        irreps[i] = irreps[j]

            for i in f0:
                if i not in irreps:
                    raise RuntimeError(f"index {i} has no irreps associated to it")

            for i in irreps:
                if i not in f0:
                    raise RuntimeError(f"index {i} has an irreps but does not appear in the fomula")

            base_perm, _ = reduce_permutation(f0, formulas, dtype=torch.float64, **{i: irs.dim for i, irs in irreps.items()})

            Ps = collections.defaultdict(list)

            for ir, path, base_o3 in _wigner_nj(*[irreps[i] for i in f0], filter_ir_mid=filter_ir_mid, dtype=torch.float64):
                if filter_ir_out is None or ir in filter_ir_out:
                    Ps[ir].append((path, base_o3))

            outputs = []
            change_of_basis = []
            irreps_out = []

            P = base_perm.flatten(1)  # [permutation basis, input basis] (a,omega)
            PP = P @ P.T  # (a,a)

            for ir in Ps:
                mul = len(Ps[ir])
                paths = [path for path, _ in Ps[ir]]
                base_o3 = torch.stack([R for _, R in Ps[ir]])

                R = base_o3.flatten(2)  # [multiplicity, ir, input basis] (u,j,omega)

                proj_s = []  # list of projectors into vector space
                for j in range(ir.dim):
                    # Solve X @ R[:, j] = Y @ P, but keep only X
                    RR = R[:, j] @ R[:, j].T  # (u,u)
                    RP = R[:, j] @ P.T  # (u,a)

                    prob = torch.cat([torch.cat([RR, -RP], dim=1), torch.cat([-RP.T, PP], dim=1)], dim=0)
                    eigenvalues, eigenvectors = torch.linalg.eigh(prob)
                    X = eigenvectors[:, eigenvalues < eps][:mul].T  # [solutions, multiplicity]
                    proj_s.append(X.T @ X)

                    break  # do not check all components because too time expensive

                for p in proj_s:
                    assert (p - proj_s[0]).abs().max() < eps, f"found different solutions for irrep {ir}"

                # look for an X such that X.T @ X = Projector
                X, _ = orthonormalize(proj_s[0], eps)

                for x in X:
                    C = torch.einsum("u,ui...->i...", x, base_o3)
                    correction = (ir.dim / C.pow(2).sum()) ** 0.5
                    C = correction * C

                    outputs.append([((correction * v).item(), p) for v, p in zip(x, paths) if v.abs() > eps])
                    change_of_basis.append(C)
                    irreps_out.append((1, ir))

            dtype, _ = explicit_default_types(None, None)
            self.register_buffer("change_of_basis", torch.cat(change_of_basis).to(dtype=dtype))

            tps = set()
            for vp_list in outputs:
                for v, p in vp_list:
                    for op in _get_ops(p):
                        tps.add(op)

            tps = list(tps)
            self.tps = torch.nn.ModuleList([TensorProduct(op[0], op[1], op[2], [(0, 0, 0, "uuu", False)]) for op in tps])
            self._ops, self._outputs, self._eps = tps, outputs, eps

            self.irreps_in = [irreps[i] for i in f0]
            self.irreps_out = Irreps(irreps_out).simplify()

        def __repr__(self) -> str:
            return (
                f"ReducedTensorProducts(\n"
                f"    in: {' times '.join(map(repr, self.irreps_in))}\n"
                f"    out: {self.irreps_out}\n"
                ")"
            )

        def forward(self, *inputs):
            values = {}
            eps = self._eps

            def evaluate(path):
                if path in values:
                    return values[path]

                if isinstance(path, _INPUT):
                    out = inputs[path.tensor]
                    if (path.start, path.stop) != (0, self.irreps_in[path.tensor].dim):
                        out = out.narrow(-1, path.start, path.stop - path.start)
                if isinstance(path, _TP):
                    x1 = evaluate(path.args[0])
                    x2 = evaluate(path.args[1])
                    out = self.tps[self._ops.index(path.op)](x1, x2)
                values[path] = out
                return out

            outs = []
            for vp_list in self._outputs:
                v, p = vp_list[0]
                out = evaluate(p)
                if abs(v - 1.0) > eps:
                    out = v * out
                for v, p in vp_list[1:]:
                    t = evaluate(p)
                    if abs(v - 1.0) > eps:
                        t = v * t
                    out = out + t
                outs.append(out)

            return torch.cat(outs, dim=-1)

    ns.__dict__.update({k: v for k, v in locals().items() if k != "ns"})
    return ns


# ----------------------------------------------------------------------------- pages

class _default_float64:
    """e3nn's own tests run with ``torch.set_default_dtype(torch.float64)``."""

    def __init__(self, torch):
        self.torch = torch

    def __enter__(self):
        self.old = self.torch.get_default_dtype()
        self.torch.set_default_dtype(self.torch.float64)

    def __exit__(self, *exc):
        self.torch.set_default_dtype(self.old)


def _np(t):
    return t.detach().cpu().numpy()


def irreps_page(torch):
    o3 = e3nn_library(torch)
    Irrep, Irreps = o3.Irrep, o3.Irreps
    out = {}
    out["irrep_reprs"] = [repr(Irrep(0, 1)), repr(Irrep(2, -1)), repr(Irrep("1y")), Irrep("2o").dim,
                          Irrep("2e") in Irrep("1o") * Irrep("1o"), repr(Irrep("1o") + Irrep("2o")),
                          repr(3 * Irrep("1e"))]
    it = Irrep.iterator()
    out["iterator"] = repr((next(it), next(it), next(it), next(it)))
    x = Irreps([(100, (0, 1)), (50, (1, 1))])
    out["irreps"] = [repr(x), x.dim, repr(Irreps("100x0e + 50x1e + 0x2e")), Irreps("100x0e + 50x1e + 0x2e").lmax,
                     Irrep("2e") in Irreps("0e + 2e"), repr((Irreps(), Irreps(""))),
                     repr(Irreps.spherical_harmonics(3)), repr(Irreps.spherical_harmonics(4, p=1)),
                     Irreps("2x0e + 1e").slices(), repr((Irreps("2x1e") * 3).simplify()), repr(2 * Irreps("0e + 1e")),
                     repr(Irreps("1e + 1e + 0e").simplify()), repr(Irreps("1e + 1e + 0e + 1e").simplify()),
                     repr(Irreps("4x0e + 0x1o + 2x3e").remove_zero_multiplicities()),
                     repr(Irreps("1e + 0e + 1e").sort().irreps), Irreps("2o + 1e + 0e + 1e").sort().p,
                     Irreps("2o + 1e + 0e + 1e").sort().inv, Irreps("3x1o + 2x0e + 1o").count("1o"),
                     Irreps("3x1o + 2x0e + 1o").num_irreps, Irreps("2x1o + 0e").ls]
    errors = []
    for bad in ("1z", "-1e", "x1e"):
        try:
            Irreps(bad)
        except ValueError as e:
            errors.append(str(e))
    out["errors"] = errors
    with _default_float64(torch):
        torch.manual_seed(0)
        out["randn_shape"] = tuple(Irreps("5x0e + 10x1o").randn(5, -1, 5, normalization="norm").shape)
        random_tensor = Irreps("2o").randn(2, -1, 3, normalization="norm")
        out["randn_norms"] = _np(random_tensor.norm(dim=1))
        m = Irrep(1, -1).D_from_matrix(-torch.eye(3))
        out["D_parity_long"] = m.long().tolist()
        out["D_parity_block"] = _np(Irreps("0e + 1o + 1e + 2o").D_from_matrix(-torch.eye(3)))
    return out


def rotation_page(torch, abc, abc2, axis, angle):
    o3 = e3nn_library(torch)
    out = {}
    with _default_float64(torch):
        a, b, c = (torch.tensor(v) for v in abc)
        a2, b2, c2 = (torch.tensor(v) for v in abc2)
        R = o3.angles_to_matrix(a, b, c)
        R2 = o3.angles_to_matrix(a2, b2, c2)
        out["R"] = _np(R)
        out["R_again"] = _np(o3.angles_to_matrix(*o3.matrix_to_angles(R)))
        out["abc_back"] = np.stack([_np(t) for t in o3.matrix_to_angles(R)])
        q = o3.angles_to_quaternion(a, b, c)
        out["q"] = _np(q)
        out["R_from_q"] = _np(o3.quaternion_to_matrix(q))
        out["R_from_q_angles"] = _np(o3.angles_to_matrix(*o3.quaternion_to_angles(q)))
        out["q_from_R"] = _np(o3.matrix_to_quaternion(R))
        ax, an = o3.matrix_to_axis_angle(R)
        out["axis"], out["angle"] = _np(ax), _np(an)
        out["R_from_axis_angle"] = _np(o3.axis_angle_to_matrix(torch.tensor(axis), torch.tensor(angle)))
        out["axis_angle_roundtrip"] = _np(o3.axis_angle_to_matrix(*o3.angles_to_axis_angle(a, b, c)))
        q2 = o3.angles_to_quaternion(a2, b2, c2)
        out["R_compose_q"] = _np(o3.quaternion_to_matrix(o3.compose_quaternion(q, q2)))
        out["R_compose_angles"] = _np(o3.angles_to_matrix(*o3.compose_angles(a, b, c, a2, b2, c2)))
        out["R_compose_axis_angle"] = _np(o3.axis_angle_to_matrix(*o3.compose_axis_angle(
            *o3.angles_to_axis_angle(a, b, c), *o3.angles_to_axis_angle(a2, b2, c2))))
        out["R_inverse_angles"] = _np(o3.angles_to_matrix(*o3.inverse_angles(a, b, c)))
        out["q_times_inverse"] = _np(o3.compose_quaternion(q, o3.inverse_quaternion(q)))
        out["identity_q"] = _np(o3.identity_quaternion(2, 3))
        out["identity_R"] = _np(o3.angles_to_matrix(*o3.identity_angles(2)))
        xyz = o3.angles_to_xyz(a, b)
        out["xyz"] = _np(xyz)
        out["xyz_angles"] = np.stack([_np(t) for t in o3.xyz_to_angles(xyz * 2.5)])
        out["zero_xyz_angles"] = np.stack([_np(t) for t in o3.xyz_to_angles(torch.zeros(2, 3))])
        out["Rz"] = _np(o3.matrix_z(a))
        a.requires_grad_(True)
        b.requires_grad_(True)
        q = o3.angles_to_quaternion(a, b, c)
        (q * torch.arange(1.0, 5.0)).sum().backward()
        out["q_grad_a"], out["q_grad_b"] = _np(a.grad), _np(b.grad)
        torch.manual_seed(3)
        Rr = o3.angles_to_matrix(*o3.rand_angles(5))
        out["rand_RtR"] = _np(Rr.transpose(-1, -2) @ Rr)
        out["rand_det"] = _np(torch.det(Rr))
    return out


def wigner_page(torch, abc, abc2, lmax=3):
    o3 = e3nn_library(torch)
    out = {}
    with _default_float64(torch):
        a, b, c = (torch.tensor(v) for v in abc)
        a2, b2, c2 = (torch.tensor(v) for v in abc2)
        for l in range(lmax + 1):
            out[f"J{l}"] = _np(o3.su2_generators(l))
            out[f"Q{l}"] = _np(o3.change_basis_real_to_complex(l))
            out[f"X{l}"] = _np(o3.so3_generators(l))
            out[f"D{l}"] = _np(o3.wigner_D(l, a, b, c))
            out[f"D{l}_2"] = _np(o3.wigner_D(l, a2, b2, c2))
            out[f"D{l}_comp"] = _np(o3.wigner_D(l, *o3.compose_angles(a, b, c, a2, b2, c2)))
            out[f"D{l}_inv"] = _np(o3.wigner_D(l, *o3.inverse_angles(a, b, c)))
        out["Q1_c64"] = str(o3.change_basis_real_to_complex(1, dtype=torch.float32).dtype)
        out["X_dtype"] = str(o3.so3_generators(2).dtype)
        for ls in [(1, 1, 1), (1, 1, 0), (0, 2, 2), (1, 1, 2), (2, 2, 2), (1, 2, 3), (2, 1, 1), (3, 2, 1)]:
            out["C%d%d%d" % ls] = _np(o3.wigner_3j(*ls))
            out["cg%d%d%d" % ls] = _np(o3._su2_clebsch_gordan(*ls))
        out["C_f32"] = str(o3.wigner_3j(1, 1, 1, dtype=torch.float32).dtype)
        try:
            o3.wigner_3j(1, 1, 3)
            out["C113"] = "no error"
        except AssertionError:
            out["C113"] = "AssertionError"
        bb = b.clone().requires_grad_(True)
        D = o3.wigner_D(2, a, bb, c)
        (D * torch.arange(25.0).reshape(5, 5)).sum().backward()
        out["dD_dbeta"] = _np(bb.grad)
        out["D_irreps"] = _np(o3.Irreps("2x0e + 1o + 2e").D_from_angles(a, b, c, torch.ones_like(a)))
        out["D_q"] = _np(o3.Irrep("2e").D_from_quaternion(o3.angles_to_quaternion(a, b, c)))
        out["D_axis_angle"] = _np(o3.Irrep("3o").D_from_axis_angle(*o3.angles_to_axis_angle(a, b, c)))
    return out


def sh_page(torch, xyz, abc):
    o3 = e3nn_library(torch)
    out = {}
    with _default_float64(torch):
        x = torch.tensor(xyz)
        irreps = o3.Irreps.spherical_harmonics(4)
        for norm in ("integral", "component", "norm"):
            out[norm] = _np(o3.spherical_harmonics(irreps, x, normalize=True, normalization=norm))
        out["raw"] = _np(o3.spherical_harmonics(irreps, x, normalize=False, normalization="component"))
        out["raw2"] = _np(o3.spherical_harmonics(irreps, 2 * x, normalize=False, normalization="component"))
        out["l2_only"] = _np(o3.spherical_harmonics(2, x, True, normalization="component"))
        out["l31"] = _np(o3.spherical_harmonics([3, 1], x, True, normalization="norm"))
        out["sh_1e"] = repr(o3.SphericalHarmonics("0e + 1e + 2e", True).irreps_out)
        out["zero"] = _np(o3.spherical_harmonics(2, torch.zeros(1, 3), normalize=True, normalization="component"))
        try:
            o3.SphericalHarmonics("0e + 1o + 2o", True)
        except ValueError as e:
            out["parity_error"] = str(e)
        a, b, c = (torch.tensor(v) for v in abc)
        R = o3.angles_to_matrix(a, b, c)[0]
        out["sh_rot"] = _np(o3.spherical_harmonics(irreps, x @ R.T, normalize=True))
        out["D"] = _np(irreps.D_from_matrix(R))
        out["D_parity"] = _np(irreps.D_from_matrix(-R))
        out["sh_neg"] = _np(o3.spherical_harmonics(irreps, -x, normalize=True))
        xg = x[:3].clone().requires_grad_(True)
        y = o3.spherical_harmonics(irreps, xg, normalize=True)
        (y * torch.linspace(-1.0, 1.0, 25)).sum().backward()
        out["grad"] = _np(xg.grad)
        # a Gauss-Legendre x uniform grid, exact for the products of two l <= 4 harmonics
        cb, wb = np.polynomial.legendre.leggauss(6)
        alpha = 2 * math.pi * np.arange(10) / 10
        A, CB = np.meshgrid(alpha, cb, indexing="ij")
        grid = o3.angles_to_xyz(torch.tensor(A.ravel()), torch.tensor(np.arccos(CB.ravel())))
        out["grid_sh"] = _np(o3.spherical_harmonics(irreps, grid, normalize=True))
        out["grid_w"] = np.tile(wb, 10) * (2 * math.pi / 10)
    return out


def soft_one_hot_page(torch, xs):
    o3 = e3nn_library(torch)
    out = {}
    with _default_float64(torch):
        x = torch.tensor(xs)
        for basis in ("gaussian", "cosine", "smooth_finite", "fourier", "bessel"):
            for cutoff in (True, False):
                out[basis, cutoff] = _np(o3.soft_one_hot_linspace(x, -0.5, 1.5, number=4, basis=basis, cutoff=cutoff))
        for bad in (dict(basis="gaussian", cutoff=None), dict(basis="nope", cutoff=True)):
            try:
                o3.soft_one_hot_linspace(x, -0.5, 1.5, number=4, **bad)
            except ValueError as e:
                out.setdefault("errors", []).append(str(e))
        xg = x.clone().requires_grad_(True)
        y = o3.soft_one_hot_linspace(xg, -0.5, 1.5, number=4, basis="smooth_finite", cutoff=True)
        (y * torch.arange(1.0, 5.0)).sum().backward()
        out["smooth_grad"] = _np(xg.grad)
        u = x.clone().requires_grad_(True)
        s = o3.soft_unit_step(u)
        s.sum().backward()
        out["step"], out["step_grad"] = _np(s), _np(u.grad)
    return out


def tp_page(torch, W):
    o3 = e3nn_library(torch)
    out = {}
    with _default_float64(torch):
        x1, x2 = torch.tensor(W["x1"]), torch.tensor(W["x2"])
        for spec in (True, False):
            tp = o3.ElementwiseTensorProduct("2x1o", "2x1o", _specialized_code=spec)
            out["ew_repr"] = repr(tp)
            out["ew", spec] = _np(tp(x1, x2))
        out["ew_filter"] = repr(o3.ElementwiseTensorProduct("5x1o + 5x1e", "10x1e", ["0e", "0o"]))
        R = torch.tensor(W["R"])
        x = torch.tensor(W["x"])
        y = torch.tensor(W["y"])
        for spec in (True, False):
            fc = o3.FullyConnectedTensorProduct("2x0e + 1x1o + 1x2e", "1x0e + 1x1o", "2x0e + 1x1o + 1x1e + 1x2e",
                                                _specialized_code=spec)
            with torch.no_grad():
                fc.weight.copy_(torch.tensor(W["fc_w"]))
            out["fc_repr"] = repr(fc)
            out["fc", spec] = _np(fc(x, y))
            # O(3): an improper rotation (-R) too
            for name, g in (("rot", R), ("improper", -R)):
                D1, D2, Do = (ir.D_from_matrix(g) for ir in (fc.irreps_in1, fc.irreps_in2, fc.irreps_out))
                out["fc_" + name, spec] = _np(fc(x @ D1.T, y @ D2.T) - fc(x, y) @ Do.T)
        full = o3.FullTensorProduct("2x1o", "1x1e + 1x0o")
        out["full_repr"] = repr(full)
        xf, yf = torch.tensor(W["xf"]), torch.tensor(W["yf"])
        out["full"] = _np(full(xf, yf))
        D1, D2, Do = (ir.D_from_matrix(-R) for ir in (full.irreps_in1, full.irreps_in2, full.irreps_out))
        out["full_equiv"] = _np(full(xf @ D1.T, yf @ D2.T) - full(xf, yf) @ Do.T)
        norm = o3.Norm("2x0e + 1x1o + 1x2e")
        out["norm_repr"] = repr(norm)
        out["norm"] = _np(norm(x))
        out["norm_sq"] = _np(o3.Norm("2x0e + 1x1o + 1x2e", squared=True)(x))
        xw = x.clone().requires_grad_(True)
        wg = torch.tensor(W["fc_w"]).requires_grad_(True)
        fc = o3.FullyConnectedTensorProduct("2x0e + 1x1o + 1x2e", "1x0e + 1x1o", "2x0e + 1x1o + 1x1e + 1x2e",
                                            internal_weights=False)
        loss = (fc(xw, y, wg) ** 2).sum()
        loss.backward()
        out["fc_loss"] = loss.item()
        out["fc_grad_x"], out["fc_grad_w"] = _np(xw.grad), _np(wg.grad)
        try:
            fc(xw, y)
        except RuntimeError as e:
            out["no_weight_error"] = str(e)
    return out


def gate_page(torch, W):
    o3 = e3nn_library(torch)
    out = {}
    out["doc_gate"] = repr(o3._Sortcut("16x0o", "32x0o", "16x1e+16x1o").irreps_in)
    out["doc_act"] = repr(o3.Activation("256x0o+16x1e", [None, None]).irreps_out)
    try:
        o3.Activation("4x0o", [torch.sigmoid])
    except ValueError as e:
        out["act_error"] = str(e)
    out["extract"] = [_np(t) for t in o3.Extract("1e + 0e + 0e", ["0e", "0e"], [(1,), (2,)])(
        torch.tensor([0.0, 0.0, 0.0, 1.0, 2.0]))]
    with _default_float64(torch):
        gate = o3.Gate("2x0e + 1x0o", [torch.nn.functional.silu, torch.tanh], "3x0e", [torch.sigmoid], "2x1o + 1x2e")
        out["gate_repr"] = repr(gate)
        out["csts"] = [gate.act_scalars.acts[0].cst, gate.act_scalars.acts[1].cst, gate.act_gates.acts[0].cst]
        f = torch.tensor(W["feat"])
        out["gate"] = _np(gate(f))
        R = torch.tensor(W["R"])
        for name, rot in (("rot", R), ("improper", -R)):
            Di, Do = gate.irreps_in.D_from_matrix(rot), gate.irreps_out.D_from_matrix(rot)
            out["gate_" + name] = _np(gate(f @ Di.T) - gate(f) @ Do.T)
        n = o3.NormActivation("2x1e", torch.sigmoid)
        feats = torch.ones(1, 2 * 3)
        out["doc_norms"] = _np(n(feats).reshape(1, 2, 3).norm(dim=-1))
        na = o3.NormActivation("1x0e + 2x1o + 1x2e", torch.sigmoid)
        v = torch.tensor(W["v"]).requires_grad_(True)
        y = na(v)
        out["normact"] = _np(y)
        (y * torch.linspace(-1.0, 1.0, 12)).sum().backward()
        out["normact_grad"] = _np(v.grad)
        nb = o3.NormActivation("2x1o", torch.tanh, bias=True)
        with torch.no_grad():
            nb.biases.copy_(torch.tensor([0.5, -0.25]))
        out["normact_bias"] = _np(nb(torch.tensor(W["v"][:, 1:7])))
        try:
            o3.NormActivation("2x1o", torch.tanh, normalize=False, epsilon=0.1)
        except ValueError as e:
            out["eps_error"] = str(e)
    return out



def s2_page(torch, W):
    o3 = e3nn_library(torch)
    out = {}
    with _default_float64(torch):
        out["qw"] = _np(o3._quadrature_weights(3))
        a, b = torch.tensor(W["alpha"]), torch.tensor(W["beta"])
        out["sh_ab"] = _np(o3.spherical_harmonics_alpha_beta([0, 1, 2, 3], a, b))
        out["sh_ab_norm"] = _np(o3.spherical_harmonics_alpha_beta([2, 1], a, b, normalization="norm"))
        out["sh_ab_comp"] = _np(o3.spherical_harmonics_alpha_beta(o3.Irreps("0e + 1o"), a, b, normalization="component"))
        betas, alphas, shb, sha = o3.spherical_harmonics_s2_grid(3, 9, 9)
        y, z = torch.tensor(W["y9"]), torch.tensor(W["z7"])
        out["rfft"], out["y_sha"] = _np(o3.rfft(y, 3)), _np(y @ sha)
        out["irfft"], out["sha_z"] = _np(o3.irfft(z, 9)), _np(z @ sha.T)
        to, frm = o3.ToS2Grid(3, (8, 9)), o3.FromS2Grid((8, 9), 3)
        out["reprs"] = [repr(to), repr(frm)]
        x = torch.tensor(W["x16"]).requires_grad_(True)
        grid = to(x)
        out["grid"], out["grid_xyz"] = _np(grid), _np(to.grid)
        out["grid_nofft"] = _np(o3.ToS2Grid(3, (8, 9), fft=False)(x))
        out["back"] = _np(frm(grid))
        out["back_nofft"] = _np(o3.FromS2Grid((8, 9), 3, fft=False)(grid))
        (grid * torch.tensor(W["G"])).sum().backward()
        out["grid_grad"] = _np(x.grad)
        f = torch.tensor(W["f"]).requires_grad_(True)
        c = frm(f)
        (c * torch.arange(16.0)).sum().backward()
        out["from"], out["from_grad"] = _np(c), _np(f.grad)
        s2 = o3.S2Activation("0e + 1o + 2e", torch.tanh, (8, 9))
        out["s2_repr"] = repr(s2)
        out["s2_cst"] = s2.act.cst
        out["s2_grid"] = _np(s2.to_s2.grid)
        out["s2"] = _np(s2(torch.tensor(W["x9"])))
        out["s2_odd_repr"] = repr(o3.S2Activation("0o + 1e + 2o", torch.tanh, (8, 9)))
        g = o3.SO3Grid(1, 2)
        xs = torch.tensor(W["x10"])
        out["so3_D"] = _np(g.D)
        out["so3_grid"] = _np(g.to_grid(xs))
        out["so3_back"] = _np(g.from_grid(g.to_grid(xs)))
    return out


def batchnorm_page(torch, W):
    o3 = e3nn_library(torch)
    out = {}
    with _default_float64(torch):
        bn = o3.BatchNorm("2x0e + 1x1o + 1x2e", momentum=0.25)
        out["repr"] = repr(bn)
        with torch.no_grad():
            bn.weight.copy_(torch.tensor([1.5, 0.5, 2.0, 0.75]))
            bn.bias.copy_(torch.tensor([0.1, -0.2]))
        x = torch.tensor(W["x"]).requires_grad_(True)
        y = bn(x)
        (y * torch.tensor(W["G"])).sum().backward()
        out["train"], out["grad"] = _np(y), _np(x.grad)
        bn(torch.tensor(W["x2"]))
        out["running"] = [_np(bn.running_mean), _np(bn.running_var)]
        bn.eval()
        out["eval"] = _np(bn(torch.tensor(W["x"])))
        out["eval_running"] = [_np(bn.running_mean), _np(bn.running_var)]
        bi = o3.BatchNorm("1x0e + 1x1o", instance=True, reduce="max", normalization="norm", affine=False)
        out["instance"] = _np(bi(torch.tensor(W["x"])[..., :4]))
        try:
            bn(torch.tensor(W["x"])[..., :9])
        except (AssertionError, RuntimeError) as e:
            out["short_error"] = type(e).__name__
        v = torch.tensor([[1.0, 1.0, 0.0], [2.0, 2.0, 0.0], [0.0, 0.0, 3.0], [1.0, 2.0, 3.0]])
        final, matrix = o3.orthonormalize(v)
        out["ortho"], out["ortho_matrix"] = _np(final), _np(matrix)
        out["complete"] = _np(o3.complete_basis(torch.tensor([[1.0, 1.0, 0.0]])))
        out["complete_full"] = tuple(o3.complete_basis(torch.eye(3)).shape)
        out["direct_sum"] = _np(o3.direct_sum(torch.ones(2, 1, 2), 2 * torch.ones(2, 2, 1)))
    return out



def forces_page(torch, W, o3=None):
    """The pattern of the interatomic potentials built on e3nn (NequIP, MACE): edge spherical harmonics, a
    radial basis weighting a tensor product per edge, forces as -dE/dpos with ``create_graph=True`` and a
    loss on the forces trained into the radial weights (a double backward through all of it)."""
    o3 = o3 or e3nn_library(torch)
    out = {}
    with _default_float64(torch):
        pos = torch.tensor(W["pos"], requires_grad=True)
        Wr = torch.tensor(W["w"], requires_grad=True)
        src, dst = torch.tensor([0, 0, 1, 2, 3, 1]), torch.tensor([1, 2, 3, 3, 0, 0])
        tp = o3.FullyConnectedTensorProduct("0e + 1o + 2e", "0e + 1o + 2e", "0e", internal_weights=False,
                                            shared_weights=False)
        r = pos[dst] - pos[src]
        sh = o3.spherical_harmonics([0, 1, 2], r, True, normalization="component")
        emb = o3.soft_one_hot_linspace(r.norm(dim=-1), 0.0, 4.0, 4, "smooth_finite", True)  # [edge, 4]
        e = tp(sh, sh, emb @ Wr.reshape(4, 3))  # [edge, 1]
        E = e.sum()
        (F,) = torch.autograd.grad(-E, [pos], create_graph=True)  # Lucid: a bare `pos` gives the tensor itself
        loss = (F ** 2).sum()
        loss.backward()
        out["E"], out["F"], out["loss"] = E.item(), _np(F), loss.item()
        out["w_grad"], out["pos_grad"] = _np(Wr.grad), _np(pos.grad)
    return out



def reduce_page(torch, W):
    o3 = e3nn_library(torch)
    out = {}
    with _default_float64(torch):
        tp = o3.ReducedTensorProducts("ij=-ji", i="1o")
        x = torch.tensor([1.0, 0.0, 0.0])
        y = torch.tensor([0.0, 1.0, 0.0])
        out["anti"] = [repr(tp.irreps_out), _np(tp(x, y) + tp(y, x)), _np(tp(x, y))]
        tp = o3.ReducedTensorProducts("ij=ji", i="1o")
        x, y = torch.tensor(W["xy"])
        out["sym"] = [repr(tp.irreps_out), _np(tp.change_of_basis), _np(tp(x, y)),
                      _np(torch.einsum("zij,i,j->z", tp.change_of_basis, x, y))]
        tp = o3.ReducedTensorProducts("ijkl=jikl=ikjl=ijlk", i="1e")
        out["sym4"] = [repr(tp.irreps_out), _np(tp.change_of_basis)]
        tp = o3.ReducedTensorProducts("ijk=jik", i="1o", k="1e", filter_ir_out=["1o", "2e"])
        out["filtered"] = [repr(tp), _np(tp.change_of_basis)]
        Q, ret = o3.reduce_permutation(*o3.germinate_formulas("ij=-ji"), i=2)
        out["perm"] = [tuple(Q.shape), len(ret), _np(Q)]
        out["germinate"] = sorted(o3.germinate_formulas("ijk=jki")[1])
        try:
            o3.germinate_formulas("ij=jk")
        except RuntimeError as e:
            out["germ_error"] = str(e)
    return out


# ----------------------------------------------------------------------------- data and NumPy references

def _angles(seed, n=4):
    rng = np.random.default_rng(seed)
    return (2 * math.pi * rng.random(n), np.arccos(rng.uniform(-1, 1, n)), 2 * math.pi * rng.random(n))


def _np_rx(t):
    c, s = np.cos(t), np.sin(t)
    return np.array([[1, 0, 0], [0, c, -s], [0, s, c]])


def _np_ry(t):
    c, s = np.cos(t), np.sin(t)
    return np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]])


def _np_matrix(a, b, c):
    return np.stack([_np_ry(x) @ _np_rx(y) @ _np_ry(z) for x, y, z in zip(a, b, c)])


def _np_quat_to_matrix(q):
    w, x, y, z = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    return np.stack([
        np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)], -1),
        np.stack([2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)], -1),
        np.stack([2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)], -1)], -2)


def _np_rodrigues(axis, angle):
    out = []
    for n, t in zip(axis, angle):
        n = n / np.linalg.norm(n)
        K = np.array([[0, -n[2], n[1]], [n[2], 0, -n[0]], [-n[1], n[0], 0]])
        out.append(np.eye(3) + np.sin(t) * K + (1 - np.cos(t)) * K @ K)
    return np.stack(out)


def _np_so3_generators(l):
    """The real-basis generators, rebuilt in NumPy from the ladder operators (no Lucid)."""
    m = np.arange(-l, l + 1)
    Jp = np.zeros((2 * l + 1, 2 * l + 1))
    for i in range(2 * l):  # <m+1| J+ |m>
        Jp[i + 1, i] = math.sqrt(l * (l + 1) - m[i] * (m[i] + 1))
    raising, lowering = -Jp, Jp.T
    J = np.stack([0.5 * (raising + lowering), np.diag(1j * m), -0.5j * (raising - lowering)])
    q = np.zeros((2 * l + 1, 2 * l + 1), complex)
    for mm in range(-l, 0):
        q[l + mm, l - mm], q[l + mm, l + mm] = 1 / math.sqrt(2), -1j / math.sqrt(2)
    q[l, l] = 1
    for mm in range(1, l + 1):
        q[l + mm, l + mm], q[l + mm, l - mm] = (-1) ** mm / math.sqrt(2), 1j * (-1) ** mm / math.sqrt(2)
    q = (-1j) ** l * q
    X = q.conj().T @ J @ q
    assert np.abs(X.imag).max() < 1e-12
    return J, q, X.real


def _np_expm(A):
    w, V = np.linalg.eig(A)
    return ((V * np.exp(w)) @ np.linalg.inv(V)).real


def _np_wigner_D(l, a, b, c):
    X = _np_so3_generators(l)[2]
    return np.stack([_np_expm(x * X[1]) @ _np_expm(y * X[0]) @ _np_expm(z * X[1]) for x, y, z in zip(a, b, c)])


def _np_real_sh(l, xyz):
    """Wikipedia's real spherical harmonics from SciPy's complex ones (Condon-Shortley phase), m = -l..l."""
    import scipy.special

    r = np.linalg.norm(xyz, axis=-1)
    theta = np.arccos(np.clip(xyz[:, 2] / r, -1, 1))
    phi = np.arctan2(xyz[:, 1], xyz[:, 0])

    def Y(m):
        if hasattr(scipy.special, "sph_harm_y"):
            return scipy.special.sph_harm_y(l, m, theta, phi)
        return scipy.special.sph_harm(m, l, phi, theta)

    cols = []
    for m in range(-l, l + 1):
        if m < 0:
            cols.append(math.sqrt(2) * (-1) ** m * Y(-m).imag)
        elif m == 0:
            cols.append(Y(0).real)
        else:
            cols.append(math.sqrt(2) * (-1) ** m * Y(m).real)
    return np.stack(cols, -1)


def _levi_civita():
    eps = np.zeros((3, 3, 3))
    for (i, j, k), s in (((0, 1, 2), 1), ((1, 2, 0), 1), ((2, 0, 1), 1), ((0, 2, 1), -1), ((2, 1, 0), -1), ((1, 0, 2), -1)):
        eps[i, j, k] = s
    return eps


def _gauss_hermite_cst(f):
    """1 / sqrt(E[f(z)^2]) for z ~ N(0, 1), by 120-point Gauss-Hermite quadrature."""
    z, w = np.polynomial.hermite_e.hermegauss(120)
    return (np.sum(w * f(z) ** 2) / math.sqrt(2 * math.pi)) ** -0.5


def _tp_data():
    rng = np.random.default_rng(7)
    a, b, c = _angles(11, 1)
    return dict(x1=rng.standard_normal((3, 6)), x2=rng.standard_normal((3, 6)), x=rng.standard_normal((4, 10)),
                y=rng.standard_normal((4, 4)), fc_w=rng.standard_normal(13),
                R=_np_matrix(a, b, c)[0], xf=rng.standard_normal((2, 6)), yf=rng.standard_normal((2, 4)))


def _gate_data():
    rng = np.random.default_rng(5)
    a, b, c = _angles(13, 1)
    v = rng.standard_normal((3, 12))
    v[2, 1:4] = 0.0  # a zero vector: NormActivation's epsilon branch
    return dict(feat=rng.standard_normal((3, 17)), R=_np_matrix(a, b, c)[0], v=v)



def _s2_data():
    rng = np.random.default_rng(21)
    return dict(alpha=2 * math.pi * rng.random(5), beta=math.pi * rng.random(5), y9=rng.standard_normal((2, 9)),
                z7=rng.standard_normal((2, 7)), x16=rng.standard_normal((2, 16)), G=rng.standard_normal((2, 8, 9)),
                f=rng.standard_normal((2, 8, 9)), x9=rng.standard_normal((2, 9)), x10=rng.standard_normal((2, 10)))


def _bn_data():
    rng = np.random.default_rng(17)
    return dict(x=rng.standard_normal((4, 3, 10)) + 0.5, x2=rng.standard_normal((4, 3, 10)), G=rng.standard_normal((4, 3, 10)))


def _np_s2_basis(lmax, betas, alphas):
    """Integral-normalized real spherical harmonics on the e3nn grid: e3nn's (alpha, beta) are the usual
    azimuth and polar angles of Wikipedia's harmonics. Shape (beta, alpha, (lmax+1)^2)."""
    B, A = np.meshgrid(betas, alphas, indexing="ij")
    pts = np.stack([np.sin(B) * np.cos(A), np.sin(B) * np.sin(A), np.cos(B)], -1).reshape(-1, 3)
    return np.concatenate([_np_real_sh(l, pts) for l in range(lmax + 1)], -1).reshape(len(betas), len(alphas), -1)


def _np_quadrature_weights(b):
    j, k = np.arange(2 * b)[:, None], np.arange(b)[None, :]
    w = (2.0 / b) * np.sin(math.pi * (2 * j[:, 0] + 1) / (4 * b)) * (
        np.sin((2 * j + 1) * (2 * k + 1) * math.pi / (4 * b)) / (2 * k + 1)).sum(1)
    return w / (2.0 * (2 * b) ** 2)


def _rot_inputs():
    rng = np.random.default_rng(3)
    return _angles(1), _angles(2), rng.standard_normal((4, 3)), 4 * rng.random(4) - 2


def _sh_inputs():
    return np.random.default_rng(9).standard_normal((5, 3)), _angles(4, 1)


_SOFT_X = np.array([-1.0, -0.6, -0.2, 0.05, 0.4, 0.9, 1.3, 1.6, 2.0])


def _same(a, b, rtol, atol, where=""):
    """Deep comparison of two page outputs (the parity tests)."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _same(a[k], b[k], rtol, atol, f"{where}/{k}")
    elif isinstance(a, (list, tuple)) and not isinstance(a, str):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, rtol, atol, f"{where}[{i}]")
    elif isinstance(a, np.ndarray):
        assert a.shape == b.shape, where
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=where)
    elif isinstance(a, float):
        assert a == pytest.approx(b, rel=rtol, abs=atol), where
    elif isinstance(a, str):
        assert a.replace("lucid.", "torch.") == b, where
    else:
        assert a == b, where


# ----------------------------------------------------------------------------- tests

def test_irreps_bookkeeping():
    out = irreps_page(lucid)
    # the docstring examples of e3nn/o3/_irreps.py
    assert out["irrep_reprs"] == ["0e", "2o", "1o", 5, True, "1x1o+1x2o", "3x1e"]
    assert out["iterator"] == "(0e, 0o, 1o, 1e)"
    assert out["irreps"] == [
        "100x0e+50x1e", 250, "100x0e+50x1e+0x2e", 1, True, "(, )", "1x0e+1x1o+1x2e+1x3o",
        "1x0e+1x1e+1x2e+1x3e+1x4e", [slice(0, 2), slice(2, 5)], "6x1e", "1x0e+1x1e+1x0e+1x1e", "2x1e+1x0e",
        "2x1e+1x0e+1x1e", "4x0e+2x3e", "1x0e+1x1e+1x1e", (3, 1, 0, 2), (2, 1, 3, 0), 4, 6, [1, 1, 0]]
    assert out["errors"] == [f'Unable to convert string "{s}" into an Irreps' for s in ("1z", "-1e", "x1e")]
    assert out["randn_shape"] == (5, 35, 5)
    np.testing.assert_allclose(out["randn_norms"], np.ones((2, 3)), atol=1e-12)
    assert out["D_parity_long"] == [[-1, 0, 0], [0, -1, 0], [0, 0, -1]]
    # parity of 0e + 1o + 1e + 2o under -I: + - - - + + + - - - - -
    np.testing.assert_allclose(out["D_parity_block"], np.diag([1.0] + [-1.0] * 3 + [1.0] * 3 + [-1.0] * 5), atol=1e-12)


def test_irreps_bookkeeping_torch_parity():
    torch = pytest.importorskip("torch")
    _same(irreps_page(lucid), irreps_page(torch), 1e-12, 1e-12)


def test_rotation_conversions():
    abc, abc2, axis, angle = _rot_inputs()
    out = rotation_page(lucid, abc, abc2, axis, angle)
    R, R2 = _np_matrix(*abc), _np_matrix(*abc2)
    tol = dict(atol=1e-12)
    np.testing.assert_allclose(out["R"], R, **tol)
    for k in ("R_again", "R_from_q", "R_from_q_angles", "axis_angle_roundtrip"):
        np.testing.assert_allclose(out[k], R, atol=1e-10, err_msg=k)
    np.testing.assert_allclose(out["abc_back"][1], abc[1], atol=1e-12)  # beta in [0, pi] is unique
    np.testing.assert_allclose(_np_quat_to_matrix(out["q"]), R, **tol)
    np.testing.assert_allclose(np.linalg.norm(out["q"], axis=-1), 1, **tol)
    np.testing.assert_allclose(_np_quat_to_matrix(out["q_from_R"]), R, atol=1e-10)
    np.testing.assert_allclose(_np_rodrigues(out["axis"], out["angle"]), R, atol=1e-10)
    np.testing.assert_allclose(out["R_from_axis_angle"], _np_rodrigues(axis, angle), atol=1e-12)
    for k in ("R_compose_q", "R_compose_angles", "R_compose_axis_angle"):
        np.testing.assert_allclose(out[k], R @ R2, atol=1e-10, err_msg=k)
    np.testing.assert_allclose(out["R_inverse_angles"], R.transpose(0, 2, 1), **tol)
    np.testing.assert_allclose(np.abs(out["q_times_inverse"]), np.tile([1.0, 0, 0, 0], (4, 1)), **tol)
    np.testing.assert_array_equal(out["identity_q"], np.tile([1.0, 0, 0, 0], (2, 3, 1)))
    np.testing.assert_allclose(out["identity_R"], np.tile(np.eye(3), (2, 1, 1)), **tol)
    # a point on the sphere is R(alpha, beta, 0) e_y
    np.testing.assert_allclose(out["xyz"], _np_matrix(abc[0], abc[1], 0 * abc[0])[:, :, 1], **tol)
    np.testing.assert_allclose(out["xyz_angles"], np.stack([np.angle(np.exp(1j * abc[0])), abc[1]]), atol=1e-10)
    np.testing.assert_allclose(out["zero_xyz_angles"], np.array([[0.0, 0.0], [math.pi / 2] * 2]), **tol)
    c, s = np.cos(abc[0]), np.sin(abc[0])
    np.testing.assert_allclose(out["Rz"][:, 0, :2], np.stack([c, -s], -1), **tol)
    # d/da sum_i (i+1) q_i: q = qa * (qb * qc), float64 central differences in NumPy
    def f(a, b):
        def qy(t):
            return np.array([np.cos(t / 2), 0, np.sin(t / 2), 0])

        def qmul(p, q):
            return np.array([p[0] * q[0] - p[1:] @ q[1:], *(p[0] * q[1:] + q[0] * p[1:] + np.cross(p[1:], q[1:]))])
        return [qmul(qy(x), qmul(np.array([np.cos(y / 2), np.sin(y / 2), 0, 0]), qy(z))) @ np.arange(1.0, 5.0)
                for x, y, z in zip(a, b, abc[2])]
    h = 1e-6
    np.testing.assert_allclose(out["q_grad_a"], (np.array(f(abc[0] + h, abc[1])) - f(abc[0] - h, abc[1])) / (2 * h), atol=1e-8)
    np.testing.assert_allclose(out["q_grad_b"], (np.array(f(abc[0], abc[1] + h)) - f(abc[0], abc[1] - h)) / (2 * h), atol=1e-8)
    np.testing.assert_allclose(out["rand_RtR"], np.tile(np.eye(3), (5, 1, 1)), atol=1e-12)
    np.testing.assert_allclose(out["rand_det"], np.ones(5), atol=1e-12)


def test_rotation_conversions_torch_parity():
    torch = pytest.importorskip("torch")
    args = _rot_inputs()
    lu, to = rotation_page(lucid, *args), rotation_page(torch, *args)
    # rand_angles draws from each library's own generator
    for k in ("rand_RtR", "rand_det"):
        lu.pop(k), to.pop(k)
    _same(lu, to, 1e-9, 1e-10)


def test_wigner_D_and_3j():
    abc, abc2 = _angles(1), _angles(2)
    out = wigner_page(lucid, abc, abc2)
    R = _np_matrix(*abc)
    for l in range(4):
        J, Q, X = _np_so3_generators(l)
        np.testing.assert_allclose(out[f"J{l}"], J, atol=1e-12)
        np.testing.assert_allclose(out[f"Q{l}"], Q, atol=1e-12)
        np.testing.assert_allclose(out[f"Q{l}"] @ out[f"Q{l}"].conj().T, np.eye(2 * l + 1), atol=1e-12)  # unitary
        np.testing.assert_allclose(out[f"X{l}"], X, atol=1e-12)
        D = out[f"D{l}"]
        np.testing.assert_allclose(D, _np_wigner_D(l, *abc), atol=1e-10)
        np.testing.assert_allclose(D @ D.transpose(0, 2, 1), np.tile(np.eye(2 * l + 1), (4, 1, 1)), atol=1e-10)
        np.testing.assert_allclose(out[f"D{l}_comp"], D @ out[f"D{l}_2"], atol=1e-10)  # a representation
        np.testing.assert_allclose(out[f"D{l}_inv"], D.transpose(0, 2, 1), atol=1e-10)
        # the so(3) algebra: [X_x, X_y] = X_z
        Xl = out[f"X{l}"]
        np.testing.assert_allclose(Xl[0] @ Xl[1] - Xl[1] @ Xl[0], Xl[2], atol=1e-12)
    np.testing.assert_allclose(out["D1"], R, atol=1e-10)  # l = 1 is the rotation itself
    assert out["Q1_c64"] == "lucid.complex64" and out["X_dtype"] == "lucid.float64" and out["C_f32"] == "lucid.float32"
    # QuTiP's Clebsch-Gordan: <1 1; 1 -1 | 0 0> = 1/sqrt(3), <1 0; 1 0 | 2 0> = sqrt(2/3), <1 1; 1 0 | 1 1> = 1/sqrt(2)
    assert out["cg110"][2, 0, 0] == pytest.approx(1 / math.sqrt(3), abs=1e-15)
    assert out["cg112"][1, 1, 2] == pytest.approx(math.sqrt(2 / 3), abs=1e-15)
    assert out["cg111"][2, 1, 2] == pytest.approx(1 / math.sqrt(2), abs=1e-15)
    np.testing.assert_allclose(out["C111"], _levi_civita() / math.sqrt(6), atol=1e-15)
    np.testing.assert_allclose(out["C110"][:, :, 0], np.eye(3) / math.sqrt(3), atol=1e-15)
    np.testing.assert_allclose(out["C022"][0], np.eye(5) / math.sqrt(5), atol=1e-15)
    Dn = [_np_wigner_D(l, *abc) for l in range(4)]
    for ls in [(1, 1, 2), (2, 2, 2), (1, 2, 3), (2, 1, 1), (3, 2, 1)]:
        C = out["C%d%d%d" % ls]
        assert np.linalg.norm(C) == pytest.approx(1.0, abs=1e-12)
        for i in range(4):  # invariant under the rotations
            np.testing.assert_allclose(np.einsum("ijk,il,jm,kn->lmn", C, Dn[ls[0]][i], Dn[ls[1]][i], Dn[ls[2]][i]), C,
                                       atol=1e-10)
    C222 = out["C222"]  # l1 = l2: symmetric (even l1 + l2 + l3) under swapping the first two
    np.testing.assert_allclose(C222, C222.transpose(1, 0, 2), atol=1e-12)
    assert out["C113"] == "AssertionError"
    # d/dbeta of sum(W * D(a, b, c)) with NumPy's generators: D_a X_x exp(b X_x) D_c
    X = _np_so3_generators(2)[2]
    Wt = np.arange(25.0).reshape(5, 5)
    want = [(Wt * (_np_expm(x * X[1]) @ X[0] @ _np_expm(y * X[0]) @ _np_expm(z * X[1]))).sum() for x, y, z in zip(*abc)]
    np.testing.assert_allclose(out["dD_dbeta"], want, atol=1e-9)
    # direct sums and the other parametrizations
    Di = out["D_irreps"]
    assert Di.shape == (4, 10, 10)
    np.testing.assert_allclose(Di[:, :2, :2], np.tile(np.eye(2), (4, 1, 1)), atol=1e-12)
    np.testing.assert_allclose(Di[:, 2:5, 2:5], -R, atol=1e-10)  # 1o with k = 1
    np.testing.assert_allclose(Di[:, 5:, 5:], out["D2"], atol=1e-10)
    np.testing.assert_allclose(Di[:, 2:5, 5:], 0, atol=0)
    np.testing.assert_allclose(out["D_q"], out["D2"], atol=1e-9)
    np.testing.assert_allclose(out["D_axis_angle"], out["D3"], atol=1e-9)


def test_wigner_D_and_3j_torch_parity():
    torch = pytest.importorskip("torch")
    abc, abc2 = _angles(1), _angles(2)
    # SciPy's expm (Lucid) and PyTorch's matrix_exp differ by ~1e-13 on these matrices
    _same(wigner_page(lucid, abc, abc2), wigner_page(torch, abc, abc2), 1e-9, 1e-10)


def test_spherical_harmonics():
    xyz, abc = _sh_inputs()
    out = sh_page(lucid, xyz, abc)
    unit = xyz / np.linalg.norm(xyz, axis=-1, keepdims=True)
    # e3nn's Y(x, y, z) is Wikipedia's real Y_lm at the point (z, x, y) -- "called with the order y, z, x"
    want = np.concatenate([_np_real_sh(l, unit[:, [2, 0, 1]]) for l in range(5)], -1)
    np.testing.assert_allclose(out["integral"], want, atol=1e-12)
    lsl = np.repeat(np.arange(5), 2 * np.arange(5) + 1)
    np.testing.assert_allclose(out["component"], want * math.sqrt(4 * math.pi), atol=1e-12)
    np.testing.assert_allclose(out["norm"], want * math.sqrt(4 * math.pi) / np.sqrt(2 * lsl + 1), atol=1e-12)
    for l in range(5):  # |Y^l| = sqrt(2l+1) ('component')
        np.testing.assert_allclose(np.linalg.norm(out["component"][:, l * l:(l + 1) ** 2], axis=-1), math.sqrt(2 * l + 1), atol=1e-12)
    # normalize=False: homogeneous polynomials of degree l
    np.testing.assert_allclose(out["raw2"], out["raw"] * 2.0 ** lsl, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out["raw"], out["component"] * np.linalg.norm(xyz, axis=-1, keepdims=True) ** lsl,
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out["l2_only"], out["component"][:, 4:9], atol=1e-15)
    np.testing.assert_allclose(out["l31"], np.concatenate([out["norm"][:, 9:16], out["norm"][:, 1:4]], -1), atol=1e-15)
    assert out["sh_1e"] == "1x0e+1x1e+1x2e"
    assert out["parity_error"].startswith("irreps_out `1x0e+1x1o+1x2o` passed to SphericalHarmonics asked for an "
                                          "output of l = 2 with parity p = -1")
    np.testing.assert_allclose(out["zero"], [[0.0, 0.0, 0.0, 0.0, 0.0]], atol=0)  # normalize(0) = 0
    # equivariance: Y(R x) = D(R) Y(x), and Y(-x) = D(-R)... parity (-1)^l
    np.testing.assert_allclose(out["sh_rot"], out["integral"] @ out["D"].T, atol=1e-10)
    np.testing.assert_allclose(out["sh_neg"], out["integral"] * (-1.0) ** lsl, atol=1e-12)
    np.testing.assert_allclose(out["D_parity"], out["D"] * (-1.0) ** lsl, atol=1e-12)
    # orthonormal on the sphere: sum_q w_q Y_i(q) Y_j(q) = delta_ij
    G = out["grid_sh"]
    np.testing.assert_allclose(G.T @ (G * out["grid_w"][:, None]), np.eye(25), atol=1e-12)

    # the gradient of sum(c * Y(x / |x|)) against float64 central differences of the SciPy form
    def f(p):
        u = p / np.linalg.norm(p)
        y = np.concatenate([_np_real_sh(l, u[None, [2, 0, 1]])[0] for l in range(5)])
        return y @ np.linspace(-1.0, 1.0, 25)
    h = 1e-6
    fd = np.array([[(f(p + h * e) - f(p - h * e)) / (2 * h) for e in np.eye(3)] for p in xyz[:3]])
    np.testing.assert_allclose(out["grad"], fd, atol=1e-7)


def test_spherical_harmonics_torch_parity():
    torch = pytest.importorskip("torch")
    args = _sh_inputs()
    _same(sh_page(lucid, *args), sh_page(torch, *args), 1e-9, 1e-11)


def test_soft_one_hot_linspace_and_soft_unit_step():
    out = soft_one_hot_page(lucid, _SOFT_X)
    x = _SOFT_X[:, None]
    for cutoff in (True, False):
        values = np.linspace(-0.5, 1.5, 6)[1:-1] if cutoff else np.linspace(-0.5, 1.5, 4)
        step = values[1] - values[0]
        d = (x - values) / step
        np.testing.assert_allclose(out["gaussian", cutoff], np.exp(-d ** 2) / 1.12, atol=1e-14)
        np.testing.assert_allclose(out["cosine", cutoff], np.where(np.abs(d) < 1, np.cos(math.pi / 2 * d), 0.0), atol=1e-14)

        def step_fn(t):
            return np.where(t > 0, np.exp(-1 / np.where(t > 0, t, 1.0)), 0.0)
        np.testing.assert_allclose(out["smooth_finite", cutoff], 1.14136 * math.e ** 2 * step_fn(d + 1) * step_fn(1 - d),
                                   atol=1e-14)
        u = (x - -0.5) / 2.0
        if cutoff:
            four = np.sin(math.pi * np.arange(1, 5) * u) / math.sqrt(0.25 + 2) * ((u > 0) & (u < 1))
        else:
            four = np.cos(math.pi * np.arange(4) * u) / math.sqrt(0.25 + 2)
        np.testing.assert_allclose(out["fourier", cutoff], four, atol=1e-14)
        t = x + 0.5
        bes = math.sqrt(2 / 2.0) * np.sin(np.arange(1, 5) * math.pi * t / 2.0) / t
        if cutoff:
            bes = bes * ((t / 2.0 < 1) & (t > 0))
        np.testing.assert_allclose(out["bessel", cutoff], bes, atol=1e-13)
    # outside (start, end) the cut-off bases vanish
    outside = (_SOFT_X <= -0.5) | (_SOFT_X >= 1.5)
    for basis in ("cosine", "smooth_finite", "fourier"):
        assert np.all(out[basis, True][outside] == 0), basis
    assert out["errors"] == ["cutoff must be specified", 'basis="nope" is not a valid entry']
    # soft_unit_step: theta(x) exp(-1/x) and its hand-written backward
    xs = _SOFT_X
    pos = np.where(xs > 0, xs, 1.0)
    np.testing.assert_allclose(out["step"], np.where(xs > 0, np.exp(-1 / pos), 0.0), atol=1e-15)
    np.testing.assert_allclose(out["step_grad"], np.where(xs > 0, np.exp(-1 / pos) / pos ** 2, 0.0), atol=1e-15)
    # d/dx sum_i (i+1) smooth_finite_i(x), central differences of the NumPy form
    values = np.linspace(-0.5, 1.5, 6)[1:-1]

    def g(xv):
        d = (xv[:, None] - values) / (values[1] - values[0])
        st = lambda t: np.where(t > 0, np.exp(-1 / np.where(t > 0, t, 1.0)), 0.0)  # noqa: E731
        return (1.14136 * math.e ** 2 * st(d + 1) * st(1 - d)) @ np.arange(1.0, 5.0)
    h = 1e-6
    np.testing.assert_allclose(out["smooth_grad"], (g(xs + h) - g(xs - h)) / (2 * h), atol=1e-7)


def test_soft_one_hot_linspace_torch_parity():
    torch = pytest.importorskip("torch")
    _same(soft_one_hot_page(lucid, _SOFT_X), soft_one_hot_page(torch, _SOFT_X), 1e-12, 1e-13)


def test_tensor_products():
    W = _tp_data()
    out = tp_page(lucid, W)
    assert out["ew_repr"] == "ElementwiseTensorProduct(2x1o x 2x1o -> 2x0e+2x1e+2x2e | 6 paths | 0 weights)"
    assert out["ew_filter"] == "ElementwiseTensorProduct(5x1o+5x1e x 10x1e -> 5x0o+5x0e | 10 paths | 0 weights)"
    assert out["fc_repr"] == ("FullyConnectedTensorProduct(2x0e+1x1o+1x2e x 1x0e+1x1o -> 2x0e+1x1o+1x1e+1x2e | "
                              "13 paths | 13 weights)")
    assert out["full_repr"] == "FullTensorProduct(2x1o x 1x1e+1x0o -> 2x0o+2x1o+2x1e+2x2o | 8 paths | 0 weights)"
    assert out["norm_repr"] == "Norm(2x0e+1x1o+1x2e)"
    # the specialized code (dot, cross) and the general Wigner-3j einsum give the same numbers
    np.testing.assert_allclose(out["ew", True], out["ew", False], atol=1e-12)
    np.testing.assert_allclose(out["fc", True], out["fc", False], atol=1e-12)
    # 'component' normalization: 1o x 1o -> 0e is x.y / sqrt(3), -> 1e is (x cross y) / sqrt(2)
    x1, x2 = W["x1"].reshape(3, 2, 3), W["x2"].reshape(3, 2, 3)
    ew = out["ew", True]
    np.testing.assert_allclose(ew[:, :2], (x1 * x2).sum(-1) / math.sqrt(3), atol=1e-12)
    np.testing.assert_allclose(ew[:, 2:8], np.cross(x1, x2).reshape(3, 6) / math.sqrt(2), atol=1e-12)
    for spec in (True, False):
        for name in ("fc_rot", "fc_improper"):
            np.testing.assert_allclose(out[name, spec], 0, atol=1e-10, err_msg=name)
    np.testing.assert_allclose(out["full_equiv"], 0, atol=1e-10)
    xf, yf = W["xf"].reshape(2, 2, 3), W["yf"]
    full = out["full"]  # 2x0o + 2x1o + 2x1e + 2x2o, u over x's multiplicity
    np.testing.assert_allclose(full[:, :2], (xf * yf[:, None, :3]).sum(-1) / math.sqrt(3), atol=1e-12)
    np.testing.assert_allclose(full[:, 2:8], np.cross(xf, yf[:, None, :3]).reshape(2, 6) / math.sqrt(2), atol=1e-12)
    np.testing.assert_allclose(full[:, 8:14], (xf * yf[:, None, 3:]).reshape(2, 6), atol=1e-12)
    x = W["x"]
    norms = np.stack([np.abs(x[:, 0]), np.abs(x[:, 1]), np.linalg.norm(x[:, 2:5], axis=-1),
                      np.linalg.norm(x[:, 5:], axis=-1)], -1)
    np.testing.assert_allclose(out["norm"], norms, atol=1e-12)
    np.testing.assert_allclose(out["norm_sq"], norms ** 2, atol=1e-12)
    # the gradients of sum(tp(x, y, w)^2) along random directions: quadratic in x and in w, so central
    # differences are exact up to rounding
    lo = lucid
    with _default_float64(lo):
        fc = e3nn_library(lo).FullyConnectedTensorProduct("2x0e + 1x1o + 1x2e", "1x0e + 1x1o",
                                                          "2x0e + 1x1o + 1x1e + 1x2e", internal_weights=False)
        y = lo.tensor(W["y"])

        def loss(xv, wv):
            return (fc(lo.tensor(xv), y, lo.tensor(wv)) ** 2).sum().item()
        rng = np.random.default_rng(0)
        dx, dw = rng.standard_normal(x.shape), rng.standard_normal(13)
        fdx = (loss(x + 1e-4 * dx, W["fc_w"]) - loss(x - 1e-4 * dx, W["fc_w"])) / 2e-4
        fdw = (loss(x, W["fc_w"] + 1e-4 * dw) - loss(x, W["fc_w"] - 1e-4 * dw)) / 2e-4
        assert (out["fc_grad_x"] * dx).sum() == pytest.approx(fdx, rel=1e-8)
        assert (out["fc_grad_w"] * dw).sum() == pytest.approx(fdw, rel=1e-8)
        assert out["fc_loss"] == pytest.approx(loss(x, W["fc_w"]), rel=1e-12)
    assert out["no_weight_error"] == "Weights must be provided when the TensorProduct does not have `internal_weights`"


def test_tensor_products_torch_parity():
    torch = pytest.importorskip("torch")
    W = _tp_data()
    _same(tp_page(lucid, W), tp_page(torch, W), 1e-10, 1e-11)


def test_gate_and_norm_activation():
    W = _gate_data()
    out = gate_page(lucid, W)
    assert out["doc_gate"] == "48x0o+16x1o+16x1e"  # Gate's docstring example, its input side
    assert out["doc_act"] == "256x0o+16x1e"
    assert out["act_error"].startswith("Activation: the parity is violated!")
    assert [e.tolist() for e in out["extract"]] == [[1.0], [2.0]]
    assert out["gate_repr"] == "Gate (1x0o+5x0e+2x1o+1x2e -> 2x0e+1x0o+2x1o+1x2e)"
    # normalize2mom: 1 / sqrt(E[f(z)^2]) from 10^6 seeded normal samples (Monte Carlo: ~1e-3)
    silu = lambda z: z / (1 + np.exp(-z))  # noqa: E731
    sig = lambda z: 1 / (1 + np.exp(-z))  # noqa: E731
    want = [_gauss_hermite_cst(silu), _gauss_hermite_cst(np.tanh), _gauss_hermite_cst(sig)]
    np.testing.assert_allclose(out["csts"], want, rtol=3e-3)
    c_silu, c_tanh, c_sig = out["csts"]
    f = W["feat"]  # sorted input: 0o | 2 scalars 0e | 3 gates 0e | 2x1o | 1x2e
    gates = sig(f[:, 3:6]) * c_sig
    want = np.concatenate([silu(f[:, 1:3]) * c_silu, np.tanh(f[:, :1]) * c_tanh, f[:, 6:9] * gates[:, :1],
                           f[:, 9:12] * gates[:, 1:2], f[:, 12:] * gates[:, 2:]], -1)
    np.testing.assert_allclose(out["gate"], want, atol=1e-12)
    np.testing.assert_allclose(out["gate_rot"], 0, atol=1e-10)
    np.testing.assert_allclose(out["gate_improper"], 0, atol=1e-10)
    # NormActivation: the docstring's 0.8497 = sigmoid(sqrt(3)), then sigmoid(|v|) v / |v| per irrep
    np.testing.assert_allclose(out["doc_norms"], np.full((1, 2), sig(math.sqrt(3))), atol=1e-12)
    v = W["v"]
    blocks = [slice(0, 1), slice(1, 4), slice(4, 7), slice(7, 12)]
    want = np.zeros_like(v)
    for s in blocks:
        n = np.maximum(np.linalg.norm(v[:, s], axis=-1, keepdims=True), 1e-8)
        want[:, s] = sig(n) * v[:, s] / n
    np.testing.assert_allclose(out["normact"], want, atol=1e-12)
    assert np.all(out["normact"][2, 1:4] == 0)  # the zero vector stays zero (epsilon branch)

    # the gradient of sum(c * NormActivation(v)) by central differences of the NumPy form
    def g(vv):
        o = np.zeros_like(vv)
        for s in blocks:
            n = np.maximum(np.linalg.norm(vv[:, s], axis=-1, keepdims=True), 1e-8)
            o[:, s] = sig(n) * vv[:, s] / n
        return (o * np.linspace(-1.0, 1.0, 12)).sum()
    h = 1e-6
    mask = np.ones_like(v, bool)
    mask[2, 1:4] = False  # at |v| = 0 the clamp makes the function flat in every direction but one-sided
    fd = np.array([(g(v + h * e.reshape(v.shape)) - g(v - h * e.reshape(v.shape))) / (2 * h) for e in np.eye(v.size)]).reshape(v.shape)
    np.testing.assert_allclose(out["normact_grad"][mask], fd[mask], atol=1e-7)
    assert np.all(np.isfinite(out["normact_grad"]))
    vb = v[:, 1:7].reshape(3, 2, 3)
    n = np.maximum(np.linalg.norm(vb, axis=-1, keepdims=True), 1e-8)
    want = (np.tanh(n + np.array([0.5, -0.25])[:, None]) * vb / n).reshape(3, 6)
    np.testing.assert_allclose(out["normact_bias"], want, atol=1e-12)
    assert out["eps_error"] == "epsilon and normalize = False don't make sense together"


def test_gate_and_norm_activation_torch_parity():
    torch = pytest.importorskip("torch")
    W = _gate_data()
    lu, to = gate_page(lucid, W), gate_page(torch, W)
    # the 10^6 samples of normalize2mom come from each library's own seeded generator
    np.testing.assert_allclose(lu.pop("csts"), to.pop("csts"), rtol=3e-3)
    for k in ("gate", "gate_rot", "gate_improper"):
        lu.pop(k), to.pop(k)
    _same(lu, to, 1e-10, 1e-11)


def _np_sha(lmax, alphas):
    m = np.arange(1, lmax + 1)
    return np.concatenate([math.sqrt(2) * np.sin(m[::-1] * alphas[:, None]), np.ones((len(alphas), 1)),
                           math.sqrt(2) * np.cos(m * alphas[:, None])], -1)


def test_s2_grid_and_so3_grid():
    W = _s2_data()
    out = s2_page(lucid, W)
    qw = _np_quadrature_weights(3)
    np.testing.assert_allclose(out["qw"], qw, atol=1e-15)
    betas6 = math.pi * (np.arange(6) + 0.5) / 6
    for n in range(6):  # Driscoll-Healy: exact for polynomials of cos(beta) of degree < 2b
        assert (qw * 2 * 36 * np.cos(betas6) ** n).sum() == pytest.approx(2 / (n + 1) if n % 2 == 0 else 0, abs=1e-13)
    a, b = W["alpha"], W["beta"]
    pts = np.stack([np.sin(b) * np.cos(a), np.sin(b) * np.sin(a), np.cos(b)], -1)
    Y = [_np_real_sh(l, pts) for l in range(4)]
    np.testing.assert_allclose(out["sh_ab"], np.concatenate(Y, -1), atol=1e-12)
    np.testing.assert_allclose(out["sh_ab_norm"], np.concatenate([Y[2] / math.sqrt(5), Y[1] / math.sqrt(3)], -1)
                               * math.sqrt(4 * math.pi), atol=1e-12)
    np.testing.assert_allclose(out["sh_ab_comp"], np.concatenate(Y[:2], -1) * math.sqrt(4 * math.pi), atol=1e-12)
    sha9 = _np_sha(3, 2 * math.pi * np.arange(9) / 9)
    np.testing.assert_allclose(out["y_sha"], W["y9"] @ sha9, atol=1e-12)
    np.testing.assert_allclose(out["rfft"], W["y9"] @ sha9, atol=1e-12)
    np.testing.assert_allclose(out["irfft"], W["z7"] @ sha9.T, atol=1e-12)
    assert out["reprs"] == ["ToS2Grid(lmax=3 res=8x9 (beta x alpha))", "FromS2Grid(lmax=3 res=8x9 (beta x alpha))"]
    betas, alphas = math.pi * (np.arange(8) + 0.5) / 8, 2 * math.pi * np.arange(9) / 9
    B, A = np.meshgrid(betas, alphas, indexing="ij")
    np.testing.assert_allclose(out["grid_xyz"], np.stack([np.sin(B) * np.sin(A), np.cos(B), np.sin(B) * np.cos(A)], -1),
                               atol=1e-15)
    basis = _np_s2_basis(3, betas, alphas)
    lsl = np.repeat(np.arange(4), 2 * np.arange(4) + 1)
    n_to = math.sqrt(4 * math.pi) / np.sqrt(2 * lsl + 1) / math.sqrt(4)  # 'component'
    np.testing.assert_allclose(out["grid"], np.einsum("bai,i,zi->zba", basis, n_to, W["x16"]), atol=1e-12)
    np.testing.assert_allclose(out["grid_nofft"], out["grid"], atol=1e-12)
    np.testing.assert_allclose(out["back"], W["x16"], atol=1e-12)
    np.testing.assert_allclose(out["back_nofft"], W["x16"], atol=1e-12)
    np.testing.assert_allclose(out["grid_grad"], np.einsum("zba,bai,i->zi", W["G"], basis, n_to), atol=1e-12)
    n_from = math.sqrt(4 * math.pi) * np.sqrt(2 * lsl + 1) * math.sqrt(4)
    qw8 = _np_quadrature_weights(4) * 64 / 9
    np.testing.assert_allclose(out["from"], np.einsum("zba,bai,i,b->zi", W["f"], basis, n_from, qw8), atol=1e-12)
    np.testing.assert_allclose(out["from_grad"], np.einsum("i,bai,i,b->ba", np.arange(16.0), basis, n_from, qw8)[None]
                               .repeat(2, 0), atol=1e-12)
    # S2Activation: to the grid, tanh (second moment normalized), back
    assert out["s2_repr"] == "S2Activation (1x0e+1x1o+1x2e -> 1x0e+1x1o+1x2e)"
    assert out["s2_odd_repr"] == "S2Activation (1x0o+1x1e+1x2o -> 1x0o+1x1e+1x2o)"
    assert out["s2_cst"] == pytest.approx(_gauss_hermite_cst(np.tanh), rel=3e-3)
    b2, l2 = basis[..., :9], lsl[:9]
    sig = np.tanh(np.einsum("bai,i,zi->zba", b2, math.sqrt(4 * math.pi) / np.sqrt(2 * l2 + 1) / math.sqrt(3), W["x9"]))
    want = np.einsum("zba,bai,i,b->zi", sig * out["s2_cst"], b2,
                     math.sqrt(4 * math.pi) * np.sqrt(2 * l2 + 1) * math.sqrt(3), qw8)
    np.testing.assert_allclose(out["s2"], want, atol=1e-12)
    # SO3Grid: sqrt(2l+1) D^l(alpha, beta, gamma) flattened, on an 8 x 4 x 8 grid; exact round trip for lmax = 1
    a8, b4 = 2 * math.pi * np.arange(8) / 8, math.pi * (np.arange(4) + 0.5) / 4
    D = []
    for l in range(2):
        X = _np_so3_generators(l)[2]
        Ea, Eb = [_np_expm(t * X[1]) for t in a8], [_np_expm(t * X[0]) for t in b4]
        D.append(math.sqrt(2 * l + 1) * np.einsum("aij,bjk,ckl->abcil", np.stack(Ea), np.stack(Eb), np.stack(Ea))
                 .reshape(8, 4, 8, -1))
    D = np.concatenate(D, -1)
    np.testing.assert_allclose(out["so3_D"], D, atol=1e-10)
    np.testing.assert_allclose(out["so3_grid"], np.einsum("zi,abci->zabc", W["x10"], D) / math.sqrt(10), atol=1e-10)
    np.testing.assert_allclose(out["so3_back"], W["x10"], atol=1e-10)


def test_s2_grid_and_so3_grid_torch_parity():
    torch = pytest.importorskip("torch")
    W = _s2_data()
    lu, to = s2_page(lucid, W), s2_page(torch, W)
    np.testing.assert_allclose(lu.pop("s2_cst"), to.pop("s2_cst"), rtol=3e-3)  # each library's own 10^6 samples
    lu.pop("s2"), to.pop("s2")
    _same(lu, to, 1e-9, 1e-10)


def _np_batchnorm(x, weight, bias, irs, eps, momentum, rm, rv):
    B, S, _ = x.shape
    out, means, vars_, ix, irm, irv, iw, ib = [], [], [], 0, 0, 0, 0, 0
    for mul, d, is_scalar in irs:
        field = x[:, :, ix:ix + mul * d].reshape(B, S, mul, d)
        ix += mul * d
        if is_scalar:
            mean = field.mean((0, 1)).reshape(mul)
            means.append((1 - momentum) * rm[irm:irm + mul] + momentum * mean)
            irm += mul
            field = field - mean[:, None]
        norm = (field ** 2).mean(3).mean(1).mean(0)
        vars_.append((1 - momentum) * rv[irv:irv + mul] + momentum * norm)
        irv += mul
        field = field * ((norm + eps) ** -0.5 * weight[iw:iw + mul])[:, None]
        iw += mul
        if is_scalar:
            field = field + bias[ib:ib + mul][:, None]
            ib += mul
        out.append(field.reshape(B, S, mul * d))
    return np.concatenate(out, -1), np.concatenate(means), np.concatenate(vars_)


def test_batchnorm_and_linalg():
    W = _bn_data()
    out = batchnorm_page(lucid, W)
    assert out["repr"] == "BatchNorm (2x0e+1x1o+1x2e, eps=1e-05, momentum=0.25)"
    w, bias = np.array([1.5, 0.5, 2.0, 0.75]), np.array([0.1, -0.2])
    irs = [(2, 1, True), (1, 3, False), (1, 5, False)]
    y, rm, rv = _np_batchnorm(W["x"], w, bias, irs, 1e-5, 0.25, np.zeros(2), np.ones(4))
    np.testing.assert_allclose(out["train"], y, atol=1e-12)
    _, rm, rv = _np_batchnorm(W["x2"], w, bias, irs, 1e-5, 0.25, rm, rv)
    np.testing.assert_allclose(out["running"][0], rm, atol=1e-14)
    np.testing.assert_allclose(out["running"][1], rv, atol=1e-14)
    np.testing.assert_allclose(out["eval_running"][0], rm, atol=0)  # eval leaves the statistics alone
    # eval: the running statistics in place of the batch's
    x = W["x"]
    want = np.concatenate([(x[..., :2] - rm) * (rv[:2] + 1e-5) ** -0.5 * w[:2] + bias,
                           x[..., 2:5] * ((rv[2] + 1e-5) ** -0.5 * w[2]), x[..., 5:] * ((rv[3] + 1e-5) ** -0.5 * w[3])], -1)
    np.testing.assert_allclose(out["eval"], want, atol=1e-12)
    # instance norm, 'norm' normalization, max over the samples, no affine
    s = x[..., :1] - x[..., :1].mean(1, keepdims=True)
    v = x[..., 1:4]
    want = np.concatenate([s * ((s ** 2).max(1, keepdims=True) + 1e-5) ** -0.5,
                           v * ((v ** 2).sum(-1, keepdims=True).max(1, keepdims=True) + 1e-5) ** -0.5], -1)
    np.testing.assert_allclose(out["instance"], want, atol=1e-12)
    assert out["short_error"] in ("RuntimeError", "AssertionError")

    # the gradient of sum(G * bn(x)) in training mode, along random directions, by central differences
    def loss(xx):
        return (_np_batchnorm(xx, w, bias, irs, 1e-5, 0.25, np.zeros(2), np.ones(4))[0] * W["G"]).sum()
    rng = np.random.default_rng(1)
    for _ in range(3):
        d = rng.standard_normal(x.shape)
        assert (out["grad"] * d).sum() == pytest.approx((loss(x + 1e-6 * d) - loss(x - 1e-6 * d)) / 2e-6, rel=1e-6, abs=1e-8)
    # orthonormalize / complete_basis (Gram-Schmidt with a sign convention: first nonzero entry positive)
    r = 1 / math.sqrt(2)
    np.testing.assert_allclose(out["ortho"], [[r, r, 0], [0, 0, 1], [r, -r, 0]], atol=1e-15)
    v = np.array([[1.0, 1.0, 0.0], [2.0, 2.0, 0.0], [0.0, 0.0, 3.0], [1.0, 2.0, 3.0]])
    np.testing.assert_allclose(out["ortho_matrix"] @ v, out["ortho"], atol=1e-14)
    np.testing.assert_allclose(out["ortho_matrix"][:, 1], 0, atol=0)  # the dependent row is not used
    np.testing.assert_allclose(out["complete"], [[r, -r, 0], [0, 0, 1]], atol=1e-15)
    assert out["complete_full"] == (0, 3)
    np.testing.assert_array_equal(out["direct_sum"], np.tile([[1, 1, 0], [0, 0, 2], [0, 0, 2]], (2, 1, 1)))


def test_batchnorm_and_linalg_torch_parity():
    torch = pytest.importorskip("torch")
    W = _bn_data()
    _same(batchnorm_page(lucid, W), batchnorm_page(torch, W), 1e-10, 1e-12)



def _forces_data():
    rng = np.random.default_rng(23)
    return dict(pos=rng.standard_normal((4, 3)), w=0.5 * rng.standard_normal(12))


def test_forces_double_backward():
    W = _forces_data()
    o3 = e3nn_library(lucid)
    out = forces_page(lucid, W, o3)

    def run(pos, w):
        o = forces_page(lucid, dict(pos=pos, w=w), o3)
        return o["E"], o["loss"]
    h = 1e-5
    pos, w = W["pos"], W["w"]
    rng = np.random.default_rng(2)
    d = rng.standard_normal((4, 3))  # F = -dE/dpos along a random direction, by central differences
    assert (out["F"] * d).sum() == pytest.approx(-(run(pos + h * d, w)[0] - run(pos - h * d, w)[0]) / (2 * h), rel=1e-7)
    np.testing.assert_allclose(out["F"].sum(0), 0, atol=1e-12)  # translation invariance: no net force
    assert out["loss"] == pytest.approx((out["F"] ** 2).sum(), rel=1e-14)
    d = rng.standard_normal(12)  # the double backward, along random directions
    fd = (run(pos, w + h * d)[1] - run(pos, w - h * d)[1]) / (2 * h)
    assert (out["w_grad"] * d).sum() == pytest.approx(fd, rel=1e-6)
    d = rng.standard_normal((4, 3))
    fd = (run(pos + h * d, w)[1] - run(pos - h * d, w)[1]) / (2 * h)
    assert (out["pos_grad"] * d).sum() == pytest.approx(fd, rel=1e-6)


def test_forces_double_backward_torch_parity():
    torch = pytest.importorskip("torch")
    W = _forces_data()
    _same(forces_page(lucid, W), forces_page(torch, W), 1e-10, 1e-11)


def _complex_into_real(torch):
    # change_basis_real_to_complex's writes, into a tensor made without dtype=torch.complex128
    q = torch.zeros((3, 3))
    try:
        q[0, 2] = -1j / 2**0.5
    except RuntimeError as e:
        return str(e)
    return "no error"


def test_complex_number_into_real_tensor_names_setitem():
    # was NumPy's bare "TypeError: float() argument must be a string or a real number, not 'complex'"
    assert _complex_into_real(lucid) == "setitem: value (-0-0.7071067811865475j) cannot be converted to type lucid.float32 without overflow"


def test_complex_number_into_real_tensor_torch_parity():
    torch = pytest.importorskip("torch")
    assert _complex_into_real(torch) == "value cannot be converted to type float without overflow"



def test_reduced_tensor_products():
    W = dict(xy=np.random.default_rng(31).standard_normal((2, 3)))
    out = reduce_page(lucid, W)
    # the docstring examples of o3/_reduce.py
    assert out["anti"][0] == "1x1e"
    np.testing.assert_array_equal(out["anti"][1], [0.0, 0.0, 0.0])
    np.testing.assert_allclose(out["anti"][2], [0.0, 0.0, 1 / math.sqrt(2)], atol=1e-12)  # (x cross y) / sqrt(2)
    assert out["sym"][0] == "1x0e+1x2e" and out["sym4"][0] == "1x0e+1x2e+1x4e"
    Q = out["sym"][1]
    np.testing.assert_allclose(out["sym"][2], out["sym"][3], atol=1e-12)
    np.testing.assert_allclose(Q, Q.transpose(0, 2, 1), atol=1e-12)
    np.testing.assert_allclose(Q.reshape(6, 9) @ Q.reshape(6, 9).T, np.eye(6), atol=1e-12)
    np.testing.assert_allclose(Q[0], np.eye(3) / math.sqrt(3), atol=1e-12)  # the trace
    # equivariance with NumPy's D: sum_ij Q_aij R_ik R_jl = sum_b D_ab Q_bkl
    abc = _angles(5, 1)
    R = _np_matrix(*abc)[0]
    D2 = _np_wigner_D(2, *abc)[0]
    Dout = np.zeros((6, 6))
    Dout[0, 0], Dout[1:, 1:] = 1.0, D2
    np.testing.assert_allclose(np.einsum("aij,ik,jl->akl", Q, R, R), np.einsum("ab,bkl->akl", Dout, Q), atol=1e-10)
    Q4 = out["sym4"][1]
    assert Q4.shape == (15, 3, 3, 3, 3)
    for p in [(0, 2, 1, 3, 4), (0, 1, 3, 2, 4), (0, 4, 2, 3, 1)]:
        np.testing.assert_allclose(Q4, Q4.transpose(p), atol=1e-12)
    np.testing.assert_allclose(Q4.reshape(15, 81) @ Q4.reshape(15, 81).T, np.eye(15), atol=1e-12)
    assert out["filtered"][0] == "ReducedTensorProducts(\n    in: 1x1o times 1x1o times 1x1e\n    out: 1x2e\n)"
    Qf = out["filtered"][1]
    np.testing.assert_allclose(Qf, Qf.transpose(0, 2, 1, 3), atol=1e-12)
    r = 1 / math.sqrt(2)
    assert out["perm"][:2] == [(1, 2, 2), 1]
    np.testing.assert_allclose(np.abs(out["perm"][2]), [[[0, r], [r, 0]]], atol=1e-15)
    assert out["perm"][2][0, 0, 1] == -out["perm"][2][0, 1, 0]
    assert out["germinate"] == [(1, (0, 1, 2)), (1, (1, 2, 0)), (1, (2, 0, 1))]
    assert out["germ_error"] == "jk is not a permutation of ij"


def test_reduced_tensor_products_torch_parity():
    torch = pytest.importorskip("torch")
    W = dict(xy=np.random.default_rng(31).standard_normal((2, 3)))
    _same(reduce_page(lucid, W), reduce_page(torch, W), 1e-9, 1e-10)
