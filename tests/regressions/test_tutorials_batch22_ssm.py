"""State-space-model reference code run on Lucid (``import lucid as torch``), twenty-second batch.

Ported, text kept (each source a function of the module handed in as ``torch``; the einops
``rearrange``/``repeat`` are handed in too: ``lucid.einops`` on Lucid, ``functorch.einops`` plus a
three-line ``repeat`` on PyTorch, where the ``einops`` package is not installed):

- state-spaces/s4 ``models/s4/s4d.py``: ``S4DKernel`` (complex ``C`` kept as a
  ``view_as_real`` parameter, ``view_as_complex`` in forward, ``A = -exp(log_A_real) + 1j * A_imag``,
  the Vandermonde product through ``einsum('hn, hnl -> hl', ...)`` of complex tensors, ``.real``)
  and ``S4D`` (``fft.rfft``/``irfft`` convolution at ``n=2*L``, the ``D`` skip, ``GELU``,
  ``DropoutNd``, a 1x1 ``Conv1d`` with ``GLU(dim=-2)``).
- state-spaces/s4 ``models/s4/s4.py``, its pure-PyTorch pieces: ``_conj``/``_c2r``/``_r2c``/
  ``_resolve_conj`` (with its ``torch.__version__`` test), ``cauchy_naive``,
  ``log_vandermonde_naive``, ``log_vandermonde_transpose_naive``, ``Activation``, ``DropoutNd``
  (``torch.distributions.binomial.Binomial`` built, a tied mask from ``torch.rand(...) < 1-p``),
  ``power`` (square-and-multiply with the reverse divide-and-conquer scan), the HiPPO
  ``transition`` (NumPy), ``rank_correction``, ``nplr`` (``linalg.eigh`` of the complex Hermitian
  ``AP*-1j``, ``sort`` of the imaginary parts, ``diag_embed``, ``clamp`` of ``B.imag``) and ``dplr``.
- state-spaces/s4 ``models/s4/s4.py``'s kernels and layers: ``ssm``/``combination``, ``inv_transform``/
  ``param_transform``, ``Kernel``/``SSMKernel`` (``defaultdict`` learning-rate registry, ``init_dt``,
  ``init_ssm_dplr``, the generic ``forward_state`` through ``power``), ``SSMKernelDiag`` (``zoh``,
  ``bilinear`` and ``dss`` discretisations, a kernel for an initial state, ``step``,
  ``forward_state``), ``SSMKernelDPLR`` (``_setup_C``'s ``self.C.copy_`` of a ``view_as_real``
  parameter, FFT nodes ``omega ** torch.arange(...)``, ``cauchy_naive`` resolvents with the rank-1
  Woodbury correction, ``fft.irfft``; the dense, linear and diagonal step modes through
  ``linalg.solve``/``linalg.eig``/``linalg.inv``; length doubling), ``LinearActivation``, ``FFTConv``
  (one- and two-sided kernels, channels) and ``S4Block`` (``lengths`` masking, ``setup_step``/``step``;
  the gate and bottleneck options are left out).
- state-spaces/mamba ``mamba_ssm/ops/selective_scan_interface.py``: ``selective_scan_ref`` (real
  and complex ``A``; a complex variable ``B``/``C`` through ``view_as_complex(rearrange(..., "...
  (L two) -> ... L two"))``; grouped ``B G N L``) and ``mamba_inner_ref`` with
  Dao-AILab/causal-conv1d's ``causal_conv1d_ref`` (``F.conv1d`` with ``groups=dim``) for
  ``causal_conv1d_fn`` and ``selective_scan_ref`` for the CUDA ``selective_scan_fn``.
- state-spaces/mamba ``mamba_ssm/modules/mamba_simple.py``: ``Mamba`` (``dt_proj`` initialisation
  through ``-torch.expm1``, ``A_log``, the slow path with ``conv1d(x)[..., :seqlen]``, the fast path
  through ``mamba_inner_ref``; ``allocate_inference_cache`` and ``step``: ``torch.roll``,
  ``copy_`` and setitem into the conv state).
- state-spaces/mamba ``mamba_ssm/modules/ssd_minimal.py``: ``segsum_unstable``, ``segsum``
  (``masked_fill`` with ``-torch.inf``, ``tril`` of a bool ``ones``) and ``ssd_minimal_discrete``
  (four-operand ``einsum``s, ``F.pad`` of the chunk sums).

Checks without PyTorch: the S4D kernel against the impulse response of the zero-order-hold
recurrence run in NumPy (with ``B`` from a quadrature of ``exp(A s)``), the S4D layer (FFT
convolution) against a direct causal convolution in NumPy, S4D gradients with respect to the
``view_as_real`` complex ``C``, ``log_dt``, ``log_A_real``, ``A_imag`` and ``D`` against float64
central differences of that NumPy layer; ``cauchy_naive`` / the Vandermonde products against
NumPy sums and the complex gradients of ``cauchy_naive`` (PyTorch's convention, dL/dRe + i dL/dIm)
against central differences; ``power`` against ``numpy.linalg.matrix_power``; ``nplr``'s
eigenpairs against the HiPPO-LegS matrix; ``selective_scan_ref`` against a NumPy recurrence loop
(real and complex ``A``, grouped ``B``/``C``) and its gradients against central differences of
that loop in float64; ``Mamba``'s two paths against each other and a NumPy forward, its
token-by-token ``step`` against the full forward; ``ssd_minimal_discrete`` against the sequential
scan and its ``dt``/``A`` gradients against central differences; training steps lowering losses
by stated margins. The ``*_torch_parity`` tests run the same text on PyTorch (same weights and
inputs).

More checks: the Diag and DPLR kernels against powers of their discretised ``dA`` (the source's
``_check``), their step modes and ``forward_state`` against the same recurrences, the DPLR
kernel's gradients (all six parameters, float64) against central differences, ``S4Block``'s
recurrent steps against its convolution, ``lengths`` against a zeroed suffix, and the two-sided
``FFTConv`` against a circular convolution written out in NumPy.

Adapted: ``mamba_simple.py``'s ``MAX_SAFE_D_INNER`` clamp (a fork's addition, not upstream) is
left out, and so are ``step``'s ``causal_conv1d_update``/``selective_state_update`` branches (the
kernels are absent, as on a CPU install); ``selective_scan_ref`` is the version without
``cu_seqlens``; the complex scan's ``A`` is complex64 as in mamba's tests (PyTorch's ``einsum``
refuses a float32 ``delta`` with a complex128 ``A``; Lucid promotes, README "Differences from
PyTorch"). The S4 kernels use ``l_max=8``: at ``L`` = 6, 12 or 24, ``omega ** torch.arange(...)``
hits -1 exactly on Lucid (NumPy multiplies out small integer powers; PyTorch's ``cpow`` is
``exp(y log x)`` and misses by an ulp), so ``_omega``'s ``2 * (1 - omega) / (1 + omega)`` is
infinite and the DPLR kernel NaN (left as is).

Fixed on the way: a float fill value for an integer tensor was cast by NumPy instead of checked:
``torch.full((2,), float('inf'), dtype=torch.int64)`` gave ``-2**63``, ``300.0`` into int8 gave 44,
``-1.0`` into uint8 gave 255 (``full``, ``masked_fill_``, ``index_fill``; ``fill_`` raised NumPy's
``OverflowError``); now PyTorch's "value cannot be converted to type ... without overflow".
"""
import logging
import math
import warnings
from collections import defaultdict
from functools import partial

import numpy as np
import pytest

import lucid
import lucid.distributions  # noqa: F401
import lucid.einops
import lucid.fft  # noqa: F401
import lucid.nn  # noqa: F401
import lucid.nn.functional  # noqa: F401
import lucid.optim  # noqa: F401
from lucid.einops import _sides


def _np(t):
    return np.array(t.detach().cpu().numpy())  # a copy: .grad buffers accumulate in place


def _lucid_einops():
    return lucid.einops.rearrange, lucid.einops.repeat


def _torch_einops():
    from importlib import import_module

    rearrange = import_module("functorch.einops.rearrange").rearrange  # the function, not its module

    def repeat(tensor, pattern, **axes_lengths):
        left, right, latoms, ratoms = _sides("repeat", pattern)
        new = [a for a in ratoms if a not in latoms]
        placed = rearrange(tensor, f"{left} -> {' '.join('1' if a in new else a for a in ratoms)}",
                           **{a: n for a, n in axes_lengths.items() if a in latoms})
        n_ell = placed.ndim - (len(ratoms) - (1 if "..." in ratoms else 0))
        sizes = []
        for a in ratoms:
            sizes.extend([-1] * n_ell if a == "..." else [axes_lengths[a] if a in new else -1])
        return rearrange(placed.expand(*sizes), f"{' '.join(ratoms)} -> {right}")
    return rearrange, repeat


def _einops(torch):
    return _lucid_einops() if torch is lucid else _torch_einops()


# ----------------------------------------------------------------------------------------------
# state-spaces/s4, models/s4/s4d.py (with s4.py's DropoutNd, which s4d.py imports)
# ----------------------------------------------------------------------------------------------
def s4d_source(torch):
    nn = torch.nn
    F = torch.nn.functional  # noqa: F841
    rearrange, repeat = _einops(torch)

    class DropoutNd(nn.Module):
        def __init__(self, p: float = 0.5, tie=True, transposed=True):
            """
            tie: tie dropout mask across sequence lengths (Dropout1d/2d/3d)
            """
            super().__init__()
            if p < 0 or p >= 1:
                raise ValueError("dropout probability has to be in [0, 1), " "but got {}".format(p))
            self.p = p
            self.tie = tie
            self.transposed = transposed
            self.binomial = torch.distributions.binomial.Binomial(probs=1-self.p)

        def forward(self, X):
            """X: (batch, dim, lengths...)."""
            if self.training:
                if not self.transposed: X = rearrange(X, 'b ... d -> b d ...')
                mask_shape = X.shape[:2] + (1,)*(X.ndim-2) if self.tie else X.shape
                mask = torch.rand(*mask_shape, device=X.device) < 1.-self.p
                X = X * mask * (1.0/(1-self.p))
                if not self.transposed: X = rearrange(X, 'b d ... -> b ... d')
                return X
            return X

    class S4DKernel(nn.Module):
        """Generate convolution kernel from diagonal SSM parameters."""

        def __init__(self, d_model, N=64, dt_min=0.001, dt_max=0.1, lr=None):
            super().__init__()
            # Generate dt
            H = d_model
            log_dt = torch.rand(H) * (
                math.log(dt_max) - math.log(dt_min)
            ) + math.log(dt_min)

            C = torch.randn(H, N // 2, dtype=torch.cfloat)
            self.C = nn.Parameter(torch.view_as_real(C))
            self.register("log_dt", log_dt, lr)

            log_A_real = torch.log(0.5 * torch.ones(H, N//2))
            A_imag = math.pi * repeat(torch.arange(N//2), 'n -> h n', h=H)
            self.register("log_A_real", log_A_real, lr)
            self.register("A_imag", A_imag, lr)

        def forward(self, L):
            """
            returns: (..., c, L) where c is number of channels (default 1)
            """

            # Materialize parameters
            dt = torch.exp(self.log_dt) # (H)
            C = torch.view_as_complex(self.C) # (H N)
            A = -torch.exp(self.log_A_real) + 1j * self.A_imag # (H N)

            # Vandermonde multiplication
            dtA = A * dt.unsqueeze(-1)  # (H N)
            K = dtA.unsqueeze(-1) * torch.arange(L, device=A.device) # (H N L)
            C = C * (torch.exp(dtA)-1.) / A
            K = 2 * torch.einsum('hn, hnl -> hl', C, torch.exp(K)).real

            return K

        def register(self, name, tensor, lr=None):
            """Register a tensor with a configurable learning rate and 0 weight decay"""

            if lr == 0.0:
                self.register_buffer(name, tensor)
            else:
                self.register_parameter(name, nn.Parameter(tensor))

                optim = {"weight_decay": 0.0}
                if lr is not None: optim["lr"] = lr
                setattr(getattr(self, name), "_optim", optim)

    class S4D(nn.Module):
        def __init__(self, d_model, d_state=64, dropout=0.0, transposed=True, **kernel_args):
            super().__init__()

            self.h = d_model
            self.n = d_state
            self.d_output = self.h
            self.transposed = transposed

            self.D = nn.Parameter(torch.randn(self.h))

            # SSM Kernel
            self.kernel = S4DKernel(self.h, N=self.n, **kernel_args)

            # Pointwise
            self.activation = nn.GELU()
            # dropout_fn = nn.Dropout2d # NOTE: bugged in PyTorch 1.11
            dropout_fn = DropoutNd
            self.dropout = dropout_fn(dropout) if dropout > 0.0 else nn.Identity()

            # position-wise output transform to mix features
            self.output_linear = nn.Sequential(
                nn.Conv1d(self.h, 2*self.h, kernel_size=1),
                nn.GLU(dim=-2),
            )

        def forward(self, u, **kwargs): # absorbs return_output and transformer src mask
            """ Input and output shape (B, H, L) """
            if not self.transposed: u = u.transpose(-1, -2)
            L = u.size(-1)

            # Compute SSM Kernel
            k = self.kernel(L=L) # (H L)

            # Convolution
            k_f = torch.fft.rfft(k, n=2*L) # (H L)
            u_f = torch.fft.rfft(u, n=2*L) # (B H L)
            y = torch.fft.irfft(u_f*k_f, n=2*L)[..., :L] # (B H L)

            # Compute D term in state space equation - essentially a skip connection
            y = y + u * self.D.unsqueeze(-1)

            y = self.dropout(self.activation(y))
            y = self.output_linear(y)
            if not self.transposed: y = y.transpose(-1, -2)
            return y, None # Return a dummy state to satisfy this repo's interface, but this can be modified

    return DropoutNd, S4DKernel, S4D


# ----------------------------------------------------------------------------------------------
# state-spaces/s4, models/s4/s4.py: the pure-PyTorch helpers
# ----------------------------------------------------------------------------------------------
def s4_source(torch):
    nn = torch.nn
    rearrange, repeat = _einops(torch)
    ns = {}

    # Function aliases
    contract = torch.einsum

    _conj = lambda x: torch.cat([x, x.conj()], dim=-1)
    _c2r = torch.view_as_real
    _r2c = torch.view_as_complex
    if tuple(map(int, torch.__version__.split('.')[:2])) >= (1, 10):
        _resolve_conj = lambda x: x.conj().resolve_conj()
    else:
        _resolve_conj = lambda x: x.conj()

    # Fallback versions
    def cauchy_naive(v, z, w):
        """
        v: (..., N)
        z: (..., L)
        w: (..., N)
        returns: (..., L) \\sum v/(z-w)
        """
        v = _conj(v)
        w = _conj(w)
        cauchy_matrix = v.unsqueeze(-1) / (z.unsqueeze(-2) - w.unsqueeze(-1)) # (... N L)
        return torch.sum(cauchy_matrix, dim=-2)

    def log_vandermonde_naive(v, x, L, conj=True):
        """
        v: (..., N)
        x: (..., N)
        returns: (..., L) \\sum v x^l
        """
        vandermonde_matrix = torch.exp(x.unsqueeze(-1) * torch.arange(L).to(x)) # (... N L)
        vandermonde_prod = contract('... n, ... n l -> ... l', v, vandermonde_matrix) # (... L)
        return 2*vandermonde_prod.real

    def log_vandermonde_transpose_naive(u, v, x, L):
        vandermonde_matrix = torch.exp(x.unsqueeze(-1) * torch.arange(L).to(x)) # (... N L)
        vandermonde_prod = contract('... l, ... n, ... n l -> ... n', u.to(x), v.to(x), vandermonde_matrix) # (... L)
        return vandermonde_prod

    def Activation(activation=None, dim=-1):
        if activation in [ None, 'id', 'identity', 'linear' ]:
            return nn.Identity()
        elif activation == 'tanh':
            return nn.Tanh()
        elif activation == 'relu':
            return nn.ReLU()
        elif activation == 'gelu':
            return nn.GELU()
        elif activation == 'elu':
            return nn.ELU()
        elif activation in ['swish', 'silu']:
            return nn.SiLU()
        elif activation == 'glu':
            return nn.GLU(dim=dim)
        elif activation == 'sigmoid':
            return nn.Sigmoid()
        elif activation == 'softplus':
            return nn.Softplus()
        else:
            raise NotImplementedError("hidden activation '{}' is not implemented".format(activation))

    def LinearActivation(
            d_input, d_output, bias=True,
            transposed=False,
            activation=None,
            activate=False, # Apply activation as part of this module
            **kwargs,
        ):
        """Returns a linear nn.Module with control over axes order, initialization, and activation."""

        # Construct core module
        linear_cls = partial(nn.Conv1d, kernel_size=1) if transposed else nn.Linear
        if activation is not None and activation == 'glu': d_output *= 2
        linear = linear_cls(d_input, d_output, bias=bias, **kwargs)

        if activate and activation is not None:
            activation = Activation(activation, dim=-2 if transposed else -1)
            linear = nn.Sequential(linear, activation)
        return linear

    def power(L, A, v=None):
        """Compute A^L and the scan sum_i A^i v_i.

        A: (..., N, N)
        v: (..., N, L)
        """

        I = torch.eye(A.shape[-1]).to(A) # , dtype=A.dtype, device=A.device)

        powers = [A]
        l = 1
        while True:
            if L % 2 == 1: I = powers[-1] @ I
            L //= 2
            if L == 0: break
            l *= 2
            if v is None:
                powers = [powers[-1] @ powers[-1]]
            else:
                powers.append(powers[-1] @ powers[-1])

        if v is None: return I

        # Take care of edge case for non-po2 arrays
        # Note that this initial step is a no-op for the case of power of 2 (l == L)
        k = v.size(-1) - l
        v_ = powers.pop() @ v[..., l:]
        v = v[..., :l]
        v[..., :k] = v[..., :k] + v_

        # Handle reduction for power of 2
        while v.size(-1) > 1:
            v = rearrange(v, '... (z l) -> ... z l', z=2)
            v = v[..., 0, :] + powers.pop() @ v[..., 1, :]
        return I, v.squeeze(-1)

    def transition(measure, N, **measure_args):
        """A, B transition matrices for different measures."""
        # Legendre (translated)
        if measure == 'legt':
            Q = np.arange(N, dtype=np.float64)
            R = (2*Q + 1) ** .5
            j, i = np.meshgrid(Q, Q)
            A = R[:, None] * np.where(i < j, (-1.)**(i-j), 1) * R[None, :]
            B = R[:, None]
            A = -A

            # Halve again for timescale correctness
            A *= 0.5
            B *= 0.5
        # Legendre (scaled)
        elif measure == 'legs':
            q = np.arange(N, dtype=np.float64)
            col, row = np.meshgrid(q, q)
            r = 2 * q + 1
            M = -(np.where(row >= col, r, 0) - np.diag(q))
            T = np.sqrt(np.diag(2 * q + 1))
            A = T @ M @ np.linalg.inv(T)
            B = np.diag(T)[:, None]
            B = B.copy() # Otherwise "UserWarning: given NumPY array is not writeable..." after torch.as_tensor(B)
        elif measure in ['fourier', 'fout']:
            freqs = np.arange(N//2)
            d = np.stack([np.zeros(N//2), freqs], axis=-1).reshape(-1)[1:]
            A = np.pi*(-np.diag(d, 1) + np.diag(d, -1))
            B = np.zeros(N)
            B[0::2] = 2**.5
            B[0] = 1

            # Subtract off rank correction - this corresponds to the other endpoint u(t-1) in this case
            A = A - B[:, None] * B[None, :]
            B = B[:, None]
        else:
            raise NotImplementedError

        return A, B

    def rank_correction(measure, N, rank=1, dtype=torch.float):
        """Return low-rank matrix L such that A + L is normal."""

        if measure == 'legs':
            assert rank >= 1
            P = torch.sqrt(.5+torch.arange(N, dtype=dtype)).unsqueeze(0) # (1 N)
        elif measure == 'legt':
            assert rank >= 2
            P = torch.sqrt(1+2*torch.arange(N, dtype=dtype)) # (N)
            P0 = P.clone()
            P0[0::2] = 0.
            P1 = P.clone()
            P1[1::2] = 0.
            P = torch.stack([P0, P1], dim=0) # (2 N)
            P *= 2**(-0.5) # Halve the rank correct just like the original matrix was halved
        elif measure in ['fourier', 'fout']:
            P = torch.zeros(N)
            P[0::2] = 2**.5
            P[0] = 1
            P = P.unsqueeze(0)
        else: raise NotImplementedError

        d = P.size(0)
        if rank > d:
            P = torch.cat([P, torch.zeros(rank-d, N, dtype=dtype)], dim=0) # (rank N)
        return P

    def nplr(measure, N, rank=1, dtype=torch.float, diagonalize_precision=True, B_clip=2.0):
        """Constructs NPLR form of HiPPO matrices."""

        assert dtype == torch.float or dtype == torch.double
        cdtype = torch.cfloat if dtype == torch.float else torch.cdouble

        A, B = transition(measure, N)
        A = torch.as_tensor(A, dtype=dtype) # (N, N)
        B = torch.as_tensor(B, dtype=dtype)[:, 0] # (N,)

        P = rank_correction(measure, N, rank=rank, dtype=dtype) # (r N)
        AP = A + torch.sum(P.unsqueeze(-2)*P.unsqueeze(-1), dim=-3)

        # We require AP to be nearly skew-symmetric
        _A = AP + AP.transpose(-1, -2)
        if (err := torch.sum((_A - _A[0,0]*torch.eye(N))**2) / N) > 1e-5: # if not torch.allclose(_A - _A[0,0]*torch.eye(N), torch.zeros(N, N), atol=1e-5):
            print("WARNING: HiPPO matrix not skew symmetric", err)

        # Take advantage of identity + skew-symmetric form to calculate real and imaginary parts separately
        # Imaginary part can use eigh instead of eig
        W_re = torch.mean(torch.diagonal(AP), -1, keepdim=True)

        # Diagonalize in double precision
        if diagonalize_precision: AP = AP.to(torch.double)
        # w, V = torch.linalg.eig(AP) # (..., N) (..., N, N)
        W_im, V = torch.linalg.eigh(AP*-1j) # (..., N) (..., N, N)
        if diagonalize_precision: W_im, V = W_im.to(cdtype), V.to(cdtype)
        W = W_re + 1j * W_im
        # Check: V W V^{-1} = A
        # print("check", V @ torch.diag_embed(W) @ V.conj().transpose(-1, -2))

        # Only keep half of each conjugate pair
        _, idx = torch.sort(W.imag)
        W_sorted = W[idx]
        V_sorted = V[:, idx]

        # There is an edge case when eigenvalues can be 0, which requires some machinery to handle
        # We use a huge hack here: Assume only one pair is 0, and that it is the first row/column of A (only happens in Fourier case)
        V = V_sorted[:, :N//2]
        W = W_sorted[:N//2]  # Only keep negative imaginary components
        assert W[-2].abs() > 1e-4, "Only 1 zero eigenvalue allowed in diagonal part of A"
        if W[-1].abs() < 1e-4:
            V[:, -1] = 0.
            V[0, -1] = 2**-0.5
            V[1, -1] = 2**-0.5 * 1j

        _AP = V @ torch.diag_embed(W) @ V.conj().transpose(-1, -2)
        if ((err := torch.sum((2*_AP.real-AP)**2)/N) > 1e-5):
            print("Warning: Diagonalization of A matrix not numerically precise - error", err)
        # print("check", V @ torch.diag_embed(W) @ V.conj().transpose(-1, -2))

        V_inv = V.conj().transpose(-1, -2)

        # C = initial_C(measure, N, dtype=dtype)
        B = contract('ij, j -> i', V_inv, B.to(V)) # V^* B
        # C = contract('ij, j -> i', V_inv, C.to(V)) # V^* C
        P = contract('ij, ...j -> ...i', V_inv, P.to(V)) # V^* P

        if B_clip is not None:
            B = B.real + 1j*torch.clamp(B.imag, min=-B_clip, max=B_clip)

        # W represents the imaginary part of the DPLR form: A = W - PP^*
        # Downstream classes just call this A for simplicity,
        # which is also more consistent with the diagonal case
        return W, P, B, V

    def dplr(
        init='hippo',
        N=64, rank=1, H=1,
        dtype=torch.float,
        real_random=False,
        real_scale=1.0,
        imag_random=False,
        imag_scale=1.0,
        B_random=False,
        B_init='constant',
        B_scale=1.0,
        P_scale=1.0,
        normalize=False,
    ):
        """Directly construct a DPLR matrix."""
        assert dtype == torch.float or dtype == torch.double
        dtype = torch.cfloat if dtype == torch.float else torch.cdouble

        pi = torch.tensor(math.pi)

        # Construct real part of diagonal A (must be non-negative)
        if real_random:
            real_part = torch.rand(H, N//2)
        else:
            real_part = .5 * torch.ones(H, N//2)
        real_part = real_scale * real_part

        # Construct imaginary part of diagonal A (must be non-negative)
        if imag_random:
            imag_part = N//2 * torch.rand(H, N//2)
        else:
            imag_part = repeat(torch.arange(N//2), 'n -> h n', h=H)

        if init in ['random', 'rand']:
            imag_part = torch.exp(torch.randn(H, N//2))
        elif init == 'real':
            imag_part = 0 * imag_part
            if real_random:
                real_part = torch.rand(H, N//2) * N//2
            else:
                # This is the S4D-Real method described in the S4D paper
                # The A matrix is diag(-1, -2, ..., -N), which are the eigenvalues of the HiPPO matrix
                real_part = 1 + repeat(torch.arange(N//2), 'n -> h n', h=H)
        elif init in ['linear', 'lin']:
            imag_part = pi * imag_part
        elif init in ['inverse', 'inv']: # Based on asymptotics of the default HiPPO matrix
            imag_part = 1/pi * N * (N/(1+2*imag_part)-1)
        elif init in ['inverse2', 'inv2']:
            imag_part = 1/pi * N * (N/(1+imag_part)-1)
        elif init in ['quadratic', 'quad']:
            imag_part = 1/pi * (1+2*imag_part)**2
        elif init in ['legs', 'hippo']:
            A, _, _, _ = nplr('legs', N)
            imag_part = -A.imag  # Positive
        else: raise NotImplementedError
        imag_part = imag_scale * imag_part

        # Construct diagonal A
        A = -real_part - 1j * imag_part  # Force negative real and imag
        assert torch.all(A.real < 1e-4) and torch.all(A.imag <= 0.0)  # Allow some tolerance for numerical precision on real part

        # Initialize B
        if init in ['legs', 'hippo']:
            # Special initialization using the HiPPO B matrix
            # Note that theory (from S4D paper) says that B should be halved
            # to match DPLR but we drop this 0.5 factor for simplicity
            _, P, B, _ = nplr('legs', N, B_clip=2.0)
            B = repeat(B, 'n -> h n', h=H).clone().contiguous()
        elif B_init == 'constant':
            B = torch.ones(H, N//2, dtype=dtype)
        elif B_init == 'random':
            B = torch.randn(H, N//2, dtype=dtype)
        elif B_init == 'alternating':  # Seems to track 'constant' exactly for some reason
            B = torch.ones(H, N//4, 2, dtype=dtype)
            B[:, :, 1] *= -1
            B = B.view(H, N//2)
        elif B_init == 'unit-cw':
            z = torch.tensor(torch.exp(-2j * pi / N), dtype=dtype)
            B = z ** torch.arange(0, N // 2)
            B = repeat(B, 'n -> h n', h=H).clone().contiguous()
        elif B_init == 'unit-ccw':
            z = torch.tensor(torch.exp(2j * pi / N), dtype=dtype)
            B = z ** torch.arange(0, N // 2)
            B = repeat(B, 'n -> h n', h=H).clone().contiguous()
        else: raise NotImplementedError
        B *= B_scale

        # Experimental feature that appeared in earlier versions of HTTYH (not extensively tested)
        # Seems more principled for normalization theoretically, but seemed to hurt on PathX
        if normalize:
            norm = -B/A # (H, N) # Result if you integrate the kernel with constant 1 function
            zeta = 2*torch.sum(torch.abs(norm)**2, dim=-1, keepdim=True) # Variance with a random C vector
            B = B / zeta**.5

        # Initialize P
        if B_init in ['legs', 'hippo']:
            # P constructed earlier
            P = repeat(P, 'r n -> r h n', h=H).clone().contiguous()
        else:
            P = torch.randn(rank, H, N//2, dtype=dtype)
            P = P * P_scale

        # Initialize V (only used in testing)
        V = torch.eye(N, dtype=dtype)[:, :N//2]
        V = repeat(V, 'n m -> h n m', h=H)

        return A, P, B, V

    ns.update(_conj=_conj, _c2r=_c2r, _r2c=_r2c, _resolve_conj=_resolve_conj, cauchy_naive=cauchy_naive,
              log_vandermonde_naive=log_vandermonde_naive,
              log_vandermonde_transpose_naive=log_vandermonde_transpose_naive, Activation=Activation,
              LinearActivation=LinearActivation,
              power=power, transition=transition, rank_correction=rank_correction, nplr=nplr, dplr=dplr)
    return ns


def s4_kernels_source(torch):
    """s4.py's kernel classes: Kernel, SSMKernel, SSMKernelDiag, SSMKernelDPLR (with ssm/combination)."""
    nn = torch.nn
    F = torch.nn.functional
    rearrange, repeat = _einops(torch)
    s4 = s4_source(torch)
    _conj, _c2r, _r2c, _resolve_conj = s4["_conj"], s4["_c2r"], s4["_r2c"], s4["_resolve_conj"]
    power, nplr, dplr = s4["power"], s4["nplr"], s4["dplr"]
    log_vandermonde_naive, cauchy_naive = s4["log_vandermonde_naive"], s4["cauchy_naive"]
    log_vandermonde_transpose_naive = s4["log_vandermonde_transpose_naive"]
    contract = torch.einsum
    has_cuda_extension = has_pykeops = False
    log = logging.getLogger("s4")

    def ssm(init, N, R, H, **ssm_args):
        """Dispatcher to create single SSM initialization"""
        if init.startswith("diag") or init.startswith("dplr"):
            if init.startswith("diag"):
                ssm_args["P_scale"] = 0.0
            args = init[4:].split("-")
            assert args[0] == ""
            if len(args) > 1:
                ssm_args["init"] = args[1]
            A, P, B, V = dplr(N=N, rank=R, H=H, **ssm_args)
        else:
            A, P, B, V = nplr(init, N, R, **ssm_args)
            A = repeat(A, 'n -> s n', s=H)
            P = repeat(P, 'r n -> r s n', s=H)
            B = repeat(B, 'n -> s n', s=H)
            V = repeat(V, 'n m -> s n m', s=H)
        return A, P, B, V

    combinations = {
        'hippo': ['legs', 'fourier'],
        'diag': ['diag-inv', 'diag-lin'],
        'all': ['legs', 'fourier', 'diag-inv', 'diag-lin'],
    }

    def combination(inits, N, R, S, **ssm_args):
        if isinstance(inits, str):
            inits = combinations[inits] if inits in combinations else [inits]

        assert S % len(inits) == 0, f"{S} independent trainable SSM copies must be multiple of {len(inits)} different inits"
        A, P, B, V = zip(
            *[ssm(init, N, R, S // len(inits), **ssm_args) for init in inits]
        )
        A = torch.cat(A, dim=0) # (S N)
        P = torch.cat(P, dim=1) # (R S N)
        B = torch.cat(B, dim=0) # (S N)
        V = torch.cat(V, dim=0) # (S N N)
        return A, P, B, V

    def inv_transform(param, transform='none'):
        """Initialize a (positive) parameter under a transform."""
        param = torch.clamp(param, min=1e-4)
        if transform == 'none':
            return param
        elif transform == 'exp':
            return torch.log(param) # Some of the HiPPO methods have real part 0
        elif transform == 'relu':
            return param
        elif transform == 'sigmoid':
            return torch.logit(param)
        elif transform == 'softplus':
            return torch.log(torch.exp(param)-1)
        else: raise NotImplementedError

    def param_transform(param, transform='none'):
        """Get a (positive) parameter under a transform."""
        if transform == 'none':
            p = param
        elif transform == 'exp':
            p = torch.exp(param)
        elif transform == 'relu':
            # JAX version seems to NaN if you allow 0's, although this code was fine without it
            p = F.relu(param)+1e-4
        elif transform == 'sigmoid':
            p = F.sigmoid(param)
        elif transform == 'softplus':
            p = F.softplus(param)
        else: raise NotImplementedError
        return p

    class Kernel(nn.Module):
        def __init__(self, d_model: int = 0, channels: int = 1, l_max=None, lr=None, wd=0.0, verbose=True,
                     **kwargs):
            super().__init__()
            assert d_model > 0
            self.H = self.d_model = d_model
            self.L = self.l_max = l_max
            self.channels = channels
            self.lr = lr
            self.wd = wd
            self.verbose = verbose

            if self.verbose and len(kwargs) > 0:
                log.info(f"{type(self)} extra kwargs: {kwargs}")

            if self.lr is None or isinstance(self.lr, float):
                self.lr_dict = defaultdict(lambda: self.lr)
            else:
                self.lr_dict = defaultdict(lambda: None)
                self.lr_dict.update(self.lr)

            # Same logic for weight decay
            # (but is always just set to 0.0 and hasn't been ablated)
            if self.wd is None or isinstance(self.wd, float):
                self.wd_dict = defaultdict(lambda: self.wd)
            else:
                self.wd_dict = defaultdict(lambda: None)
                self.wd_dict.update(self.wd)

        def register(self, name, tensor, lr=None, wd=0.0):
            """Register a tensor with a configurable learning rate and 0 weight decay"""

            if lr == 0.0:
                self.register_buffer(name, tensor)
            else:
                self.register_parameter(name, nn.Parameter(tensor))

                optim = {}
                if lr is not None: optim["lr"] = lr
                if wd is not None: optim["weight_decay"] = wd
                setattr(getattr(self, name), "_optim", optim)

    class SSMKernel(Kernel):
        def init_dt(self):
            # Generate dt
            if self.deterministic:  # Meant for debugging
                assert self.dt_tie, "Deterministic dt initialization is tied"
                assert self.dt_transform == 'exp', "Deterministic dt transform should be 'exp' for simplicity"
                inv_dt = torch.exp(torch.linspace(math.log(self.dt_min), math.log(self.dt_max), self.H)).unsqueeze(-1) # (H 1)
            else:
                shape = (self.H, 1) if self.dt_tie else (self.H, self.N//2)
                # Initialize log dt
                inv_dt = torch.rand(*shape, dtype=self.dtype) * (
                    math.log(self.dt_max) - math.log(self.dt_min)
                ) + math.log(self.dt_min)
                if self.dt_transform != 'exp':
                    inv_dt = inv_transform(torch.exp(inv_dt), self.dt_transform)

            return inv_dt

        def init_ssm_dplr(self):
            """Returns DPLR (A, P, B, C) parameters for init options."""
            A, P, B, V = combination(self.init, self.N, self.rank, self.n_ssm, **self.init_args)

            # Broadcast C to have H channels
            if self.deterministic:
                C = torch.zeros(self.channels, self.n_ssm, self.N, dtype=self.cdtype)
                C[:, :, :1] = 1.
                C = contract('hmn, chn -> chm', V.conj().transpose(-1, -2), C) # V^* C
                C = repeat(C, 'c t n -> c (v t) n', v=self.H // C.size(-2)).clone().contiguous()
            else:
                C = torch.randn(self.channels, self.H, self.N//2, dtype=self.cdtype)

            # Broadcast other parameters to have n_ssm copies
            assert self.n_ssm % B.size(-2) == 0 \
                    and self.n_ssm % P.size(-2) == 0 \
                    and self.n_ssm % A.size(-2) == 0

            # Broadcast tensors to n_ssm copies
            # These will be the parameters, so make sure tensors are materialized and contiguous
            B = repeat(B, 't n -> (v t) n', v=self.n_ssm // B.size(-2)).clone().contiguous()
            P = repeat(P, 'r t n -> r (v t) n', v=self.n_ssm // P.size(-2)).clone().contiguous()
            A = repeat(A, 't n -> (v t) n', v=self.n_ssm // A.size(-2)).clone().contiguous()

            # Because these complex parameterizations assume conjugate symmetry,
            # halve the value of self.N for convenience
            self.N //= 2

            return A, P, B, C

        def __init__(self, d_model: int = 0, channels: int = 1, l_max=None, lr=None, wd=0.0, verbose=True,
                     d_state: int = 64, deterministic: bool = False, dt_min: float = 0.001, dt_max: float = 0.1,
                     dt_tie: bool = True, dt_transform: str = 'exp', rank: int = 1, n_ssm=None, measure=None,
                     init="legs", **init_args):
            super().__init__(d_model=d_model, channels=channels, l_max=l_max, lr=lr, wd=wd, verbose=verbose)
            self.N = d_state
            self.dtype, self.cdtype = torch.float, torch.cfloat
            self.deterministic = deterministic
            # dt options
            self.dt_min = dt_min
            self.dt_max = dt_max
            self.dt_tie = dt_tie
            self.dt_transform = dt_transform
            # SSM options (A, B, C)
            self.rank = rank
            self.n_ssm = n_ssm if n_ssm is not None else self.H
            if measure is not None:
                log.warning("Warning: 'measure' option changed to 'init' and will be removed in a future version.")
                assert init is None, "'measure' and 'init' cannot both be passed into SSMKernel"
                init, measure = measure, init
            self.init = init
            self.init_args = init_args

        @torch.no_grad()
        def forward_state(self, u, state):
            """Forward the state through a sequence, i.e. computes the state after passing chunk through SSM"""

            # Construct dA, dB matrices
            dA, dB = self._setup_state() # (H N N) (H N)

            conj = state.size(-1) != dA.size(-1)
            if conj: state = _conj(state)

            v = contract('h n, b h l -> b h n l', dB, u.flip(-1))
            AL, v = power(u.size(-1), dA, v)
            next_state = contract("h m n, b h n -> b h m", AL, state)
            next_state = next_state + v

            if conj: next_state = next_state[..., : next_state.size(-1) // 2]
            return next_state

    class SSMKernelDiag(SSMKernel):
        def __init__(self, disc: str = 'zoh', dt_fast: bool = False, real_transform: str = 'exp',
                     imag_transform: str = 'none', bandlimit=None, backend: str = 'cuda', is_real: bool = False,
                     **kwargs):
            # Special case: for real-valued, d_state semantics change
            if is_real and 'd_state' in kwargs:
                kwargs['d_state'] = kwargs['d_state'] * 2
            super().__init__(**kwargs)
            self.disc = disc
            self.dt_fast = dt_fast
            self.real_transform = real_transform
            self.imag_transform = imag_transform
            self.bandlimit = bandlimit
            self.backend = backend
            self.is_real = is_real

            # Initialize dt, A, B, C
            inv_dt = self.init_dt()
            A, P, B, C = self.init_ssm_dplr()
            # Note that in the Diag case, P will be ignored
            # The DPLR case subclasses this and uses P
            self.register_params(A, B, C, inv_dt, P)

        def register_params(self, A, B, C, inv_dt, P):
            assert self.backend in ['cuda', 'keops', 'naive']

            if self.dt_fast: inv_dt = torch.asinh(inv_dt)

            # Rank of low-rank correction
            assert self.H == inv_dt.size(0)
            assert self.N == A.size(-1) == B.size(-1) == C.size(-1)
            assert self.n_ssm == A.size(-2) == B.size(-2) # Number of independent SSMs trained
            self.repeat = self.H // A.size(0)

            # Check that diagonal part has negative real and imag part
            # (allow some tolerance for numerical precision on real part
            # since it may be constructed by a diagonalization)
            assert torch.all(A.real < 1e-4) and torch.all(A.imag <= 0.0)

            # Broadcast everything to correct shapes
            C = C.expand(torch.broadcast_shapes(C.shape, (1, self.H, self.N))) # (C, H, N)  # TODO originally this was only in DPLR, check safe for Diag
            B = B.unsqueeze(0) # (1, H, N)
            assert self.channels == C.shape[0]

            # Register dt
            self.register("inv_dt", inv_dt, self.lr_dict['dt'], self.wd_dict['dt'])
            # Register ABC
            if self.is_real:
                self.register("C", C.real, self.lr_dict['C'], None)
                self.register("B", B.real, self.lr_dict['B'], self.wd_dict['B'])
                self.register("A_real", inv_transform(-A.real, self.real_transform), self.lr_dict['A'], self.wd_dict['A'])
            else:
                self.register("C", _c2r(_resolve_conj(C)), self.lr_dict['C'], None)
                self.register("B", _c2r(B), self.lr_dict['B'], self.wd_dict['B'])
                self.register("A_real", inv_transform(-A.real, self.real_transform), self.lr_dict['A'], self.wd_dict['A'])
                self.register("A_imag", inv_transform(-A.imag, self.imag_transform), self.lr_dict['A'], self.wd_dict['A'])

        def _get_params(self, rate=1.0):
            """Process the internal parameters."""

            # (S N) where S=n_ssm
            if self.is_real:
                A = -param_transform(self.A_real, self.real_transform)
                B = self.B # (1 S N)
                C = self.C # (C H N)
            else:
                A = -param_transform(self.A_real, self.real_transform) - 1j * param_transform(self.A_imag, self.imag_transform)
                B = _r2c(self.B) # (1 S N)
                C = _r2c(self.C) # (C H N)

            if self.dt_fast: inv_dt = torch.sinh(self.inv_dt)
            else: inv_dt = self.inv_dt
            dt = param_transform(inv_dt, self.dt_transform) * rate # (H N)

            if self.bandlimit is not None:
                freqs = dt / rate * A.imag.abs() / (2*math.pi) # (H N)
                mask = torch.where(freqs < self.bandlimit * .5, 1, 0)
                C = C * mask

            # Incorporate dt into A and B
            A = repeat(A, 't n -> (v t) n', v=self.repeat)  # (H N)
            B = repeat(B, 'b t n -> b (v t) n', v=self.repeat)  # (1 H N)

            # TODO: The downstream algorithm should only need to access dt*A
            # However the current DPLR kernel still uses dt and A separately
            # Once that is fixed, this should return dtA instead of dt and A
            dtA = dt * A  # (H N)

            return dt, A, B, C

        def forward(self, L, state=None, rate=1.0):
            """See Kernel.forward() for argument documentation."""

            dt, A, B, C = self._get_params(rate)
            dtA = dt * A

            # Augment B with state
            if state is not None:
                s = state / dt
                if self.disc == 'bilinear':
                    s = s * (1. + dtA/2)
                elif self.disc == 'zoh':
                    s = s * dtA * dtA.exp() / (dtA.exp() - 1.)
                B = torch.cat([s, B], dim=-3) # (1+B H N)


            # Combine B and C
            C = (B[:, None, :, :] * C).view(-1, self.H, self.N)

            # Dispatch which Vandermonde kernel to use
            if has_cuda_extension and C.dtype == torch.cfloat and C.device.type == 'cuda' and self.backend == 'cuda':
                log_vandermonde = log_vandermonde_cuda  # noqa: F821
            elif has_pykeops and self.backend in ['cuda', 'keops']:
                log_vandermonde = log_vandermonde_keops  # noqa: F821
            else:
                log_vandermonde = log_vandermonde_naive

            # Main kernel
            if self.disc == 'zoh':
                # Power up
                C = C * (torch.exp(dtA)-1.) / A
                K = log_vandermonde(C, dtA, L) # (H L)
            elif self.disc == 'bilinear':
                C = C * (1. - dtA/2).reciprocal() * dt # or * dtA / A
                dA = (1. + dtA/2) / (1. - dtA/2)
                K = log_vandermonde(C, dA.log(), L)
            elif self.disc == 'dss':
                # Implementation from DSS meant for case when real eigenvalues can be positive
                P = dtA.unsqueeze(-1) * torch.arange(L, device=C.device) # [H N L]
                A_gt_0 = A.real > 0                                      # [N]
                if A_gt_0.any():
                    with torch.no_grad():
                        P_max = dtA * (A_gt_0 * (L-1))                   # [H N]
                    P = P - P_max.unsqueeze(-1)                          # [H N L]
                S = P.exp()                                              # [H N L]

                dtA_neg = dtA * (1 - 2*A_gt_0)                           # [H N]
                num = dtA_neg.exp() - 1                                  # [H N]
                den = (dtA_neg * L).exp() - 1                            # [H N]

                # Inline reciprocal function for DSS logic
                x = den * A
                x_conj = _resolve_conj(x)
                r = x_conj / (x*x_conj + 1e-7)

                C = C * num * r             # [C H N]
                K = contract('chn,hnl->chl', C, S).float()
            else: raise ValueError(f"Discretization {self.disc} not supported")

            K = K.view(-1, self.channels, self.H, L) # (1+B C H L)

            if state is not None:
                K_state = K[:-1, :, :, :] # (B C H L)
            else:
                K_state = None
            K = K[-1, :, :, :] # (C H L)

            return K, K_state

        def _setup_step(self):
            """Set up dA, dB, dC discretized parameters for stepping."""

            dt, A, B, C, = self._get_params()
            # Incorporate dt into A
            dtA = dt * A  # (H N)

            if self.disc == 'zoh':
                self.dA = torch.exp(dtA) # (H N)
                self.dB = B * (torch.exp(dtA)-1.) / A # (C H N)
            elif self.disc == 'bilinear':
                self.dA = (1. + dtA/2) / (1. - dtA/2)
                self.dB = B * (1. - dtA/2).reciprocal() * dt # or * dtA / A
            self.dB = rearrange(self.dB, '1 h n -> h n')
            self.dC = C

        def default_state(self, *batch_shape):
            C = _r2c(self.C)
            state = torch.zeros(*batch_shape, self.H, self.N, dtype=C.dtype, device=C.device)
            return state

        def step(self, u, state):
            next_state = contract("h n, b h n -> b h n", self.dA, state) \
                    + contract("h n, b h -> b h n", self.dB, u)
            y = contract("c h n, b h n -> b c h", self.dC, next_state)
            return 2*y.real, next_state

        def forward_state(self, u, state):
            """Pass the state forward through an entire sequence."""
            self._setup_step()
            AL = self.dA ** u.size(-1)
            u = u.flip(-1).to(self.dA).contiguous() # (B H L)
            # Dispatch which Vandermonde kernel to use
            if has_pykeops and self.backend in ['cuda', 'keops']:
                log_vandermonde_transpose = log_vandermonde_transpose_keops  # noqa: F821
            else:
                log_vandermonde_transpose = log_vandermonde_transpose_naive
            v = log_vandermonde_transpose(u, self.dB, self.dA.log(), u.size(-1))
            next_state = AL * state + v
            return next_state

    class SSMKernelDPLR(SSMKernelDiag):
        """SSM kernel for diagonal + low rank (DPLR) state matrices, corresponding to the original S4 model."""

        @torch.no_grad()
        def _setup_C(self, L):
            """Construct C~ from C."""

            if self.l_kernel.item() == 0:
                if self.verbose: log.info(f"S4: Initializing kernel to length {L}")
                double_length = False
            elif L > self.l_kernel.item(): # 2*int(self.l_kernel) == L:
                if self.verbose: log.info(f"S4: Doubling length from L = {self.l_kernel.item()} to {2*self.l_kernel.item()}")
                double_length = True
                L = self.l_kernel.item() # Convenience for the math below
            else: return

            C = _r2c(self.C)
            dA, _ = self._setup_state()
            dA_L = power(L, dA)
            # Multiply C by I - dA_L
            C_ = _conj(C)
            prod = contract("h m n, c h n -> c h m", dA_L.transpose(-1, -2), C_)
            if double_length: prod = -prod # Multiply by I + dA_L instead
            C_ = C_ - prod
            C_ = C_[..., :self.N] # Take conjugate pairs again
            self.C.copy_(_c2r(C_))

            self.l_kernel = 2*self.l_kernel if double_length else self.l_kernel+L # Preserve type/device

        def _omega(self, L, dtype, device, cache=True):
            """Calculate (and cache) FFT nodes."""

            # Use cached if available
            if cache and hasattr(self, 'omega') and self.omega.size(-1) == L//2+1:
                return self.omega, self.z

            omega = torch.tensor(
                np.exp(-2j * np.pi / (L)), dtype=dtype, device=device
            )  # \omega_{2L}
            omega = omega ** torch.arange(0, L // 2 + 1, device=device)
            z = 2 * (1 - omega) / (1 + omega)

            # Cache if necessary
            if cache:
                self.omega = omega
                self.z = z
            return omega, z

        def register_params(self, A, B, C, inv_dt, P):
            # Print out kernel lengths; it can be tricky to make sure the length logic is correct
            if self.verbose:
                log.info(f"Constructing S4 (H, N, L) = ({self.H}, {self.N}, {self.l_max})")

            # Register the basic params for diagonal SSM (A, B, C, dt)
            super().register_params(A, B, C, inv_dt, P)

            # Check shapes
            assert self.rank == P.shape[-3]
            assert self.N == P.size(-1)
            assert self.n_ssm == P.size(-2)

            self.register('P', _c2r(P), self.lr_dict['A'], self.wd_dict['A'])

            # Track the current kernel length this is "attuned" to
            self.register_buffer('l_kernel', torch.tensor(0))

        def _get_params(self, rate=1.0):
            dt, A, B, C = super()._get_params(rate=rate)
            P = _r2c(self.P)  # (R S N)
            P = repeat(P, 'r t n -> r (v t) n', v=self.repeat)  # (R H N)
            Q = P.conj()

            return dt, A, B, C, P, Q

        def forward(self, state=None, rate=1.0, L=None):
            """See Kernel.forward() for argument documentation."""

            # Initialize C~ if necessary (done in forward pass so it's on the correct device)
            if self.l_kernel.item() == 0 and self.l_max is not None and self.l_max > 0:
                self._setup_C(self.l_max)

            # Handle sampling rate logic
            # The idea is that this kernel's length (in continuous units) is self.l_kernel, while we are asked to provide a kernel of length L at (relative) frequency rate
            if L is None:
                L = round(self.l_kernel.item() / rate)

            # Increase the internal length if needed
            continuous_L = round(rate*L)
            while continuous_L > self.l_kernel.item():
                self._setup_C(continuous_L)
            discrete_L = round(self.l_kernel.item()/rate)

            dt, A, B, C, P, Q = self._get_params(rate)

            # Get FFT nodes of right length
            omega, z = self._omega(discrete_L, dtype=A.dtype, device=A.device, cache=(rate==1.0))

            # Augment B
            if state is not None:
                # Have to "unbilinear" the state to put it into the same "type" as B
                # Compute 1/dt * (I + dt/2 A) @ state

                # Can do this without expanding (maybe minor speedup using conj symmetry in theory), but it's easier to read this way
                s = _conj(state) if state.size(-1) == self.N else state # (B H N)
                sA = (
                    s * _conj(A) # (B H N)
                    - contract('bhm, rhm, rhn -> bhn', s, _conj(Q), _conj(P))
                )
                s = s / dt + sA / 2
                s = s[..., :self.N]

                B = torch.cat([s, B], dim=-3)  # (B+1, H, N)

            # Incorporate dt into A
            A = A * dt  # (H N)

            # Stack B and p, C and q for convenient batching
            B = torch.cat([B, P], dim=-3) # (B+1+R, H, N)
            C = torch.cat([C, Q], dim=-3) # (C+R, H, N)

            # Incorporate B and C batch dimensions
            v = B.unsqueeze(-3) * C.unsqueeze(-4)  # (B+1+R, C+R, H, N)
            v = v * dt  # Incorporate dt into B

            # Dispatch which Cauchy kernel to use
            cauchy_mult = cauchy_naive
            # Calculate resolvent at omega
            r = cauchy_mult(v, z, A)

            # Low-rank Woodbury correction
            if self.rank == 1:
                k_f = r[:-1, :-1, :, :] - r[:-1, -1:, :, :] * r[-1:, :-1, :, :] / (1 + r[-1:, -1:, :, :])
            elif self.rank == 2:
                r00 = r[: -self.rank, : -self.rank, :, :]
                r01 = r[: -self.rank, -self.rank :, :, :]
                r10 = r[-self.rank :, : -self.rank, :, :]
                r11 = r[-self.rank :, -self.rank :, :, :]
                det = (1 + r11[:1, :1, :, :]) * (1 + r11[1:, 1:, :, :]) - r11[:1, 1:, :, :] * r11[1:, :1, :, :]
                s = (
                    r01[:, :1, :, :] * (1 + r11[1:, 1:, :, :]) * r10[:1, :, :, :]
                    + r01[:, 1:, :, :] * (1 + r11[:1, :1, :, :]) * r10[1:, :, :, :]
                    - r01[:, :1, :, :] * (r11[:1, 1:, :, :]) * r10[1:, :, :, :]
                    - r01[:, 1:, :, :] * (r11[1:, :1, :, :]) * r10[:1, :, :, :]
                )
                s = s / det
                k_f = r00 - s
            else:
                r00 = r[:-self.rank, :-self.rank, :, :]
                r01 = r[:-self.rank, -self.rank:, :, :]
                r10 = r[-self.rank:, :-self.rank, :, :]
                r11 = r[-self.rank:, -self.rank:, :, :]
                r11 = rearrange(r11, "a b h n -> h n a b")
                r11 = torch.linalg.inv(torch.eye(self.rank, device=r.device) + r11)
                r11 = rearrange(r11, "h n a b -> a b h n")
                k_f = r00 - torch.einsum("i j h n, j k h n, k l h n -> i l h n", r01, r11, r10)

            # Final correction for the bilinear transform
            k_f = k_f * 2 / (1 + omega)

            # Move from frequency to coefficients
            k = torch.fft.irfft(k_f, n=discrete_L)  # (B+1, C, H, L)

            # # Truncate to target length
            k = k[..., :L]

            if state is not None:
                k_state = k[:-1, :, :, :]  # (B, C, H, L)
            else:
                k_state = None
            k_B = k[-1, :, :, :] # (C H L)

            return k_B, k_state

        @torch.no_grad()
        def double_length(self):
            self._setup_C(2*self.l_kernel)

        @torch.no_grad()
        def _setup_linear(self):
            """Preprocessing that allows fast linear-time (in state dimension) stepping."""
            dt, A, B, C, P, Q = self._get_params()

            # Prepare Linear stepping
            D = (2.0 / dt - A).reciprocal()  # (H, N)
            R = (torch.eye(self.rank, dtype=A.dtype, device=A.device) + 2*contract('r h n, h n, s h n -> h r s', Q, D, P).real) # (H R R)
            Q_D = rearrange(Q*D, 'r h n -> h r n')
            try:
                R = torch.linalg.solve(R, Q_D) # (H R N)
            except:  # noqa: E722
                R = torch.tensor(np.linalg.solve(R.to(Q_D).contiguous().detach().cpu(), Q_D.contiguous().detach().cpu())).to(Q_D)
            R = rearrange(R, 'h r n -> r h n')

            self.step_params = {
                "D": D, # (H N)
                "R": R, # (R H N)
                "P": P, # (R H N)
                "Q": Q, # (R H N)
                "B": B, # (1 H N)
                "E": 2.0 / dt + A, # (H N)
            }

        def _step_state_linear(self, u=None, state=None):
            C = _r2c(self.C) # View used for dtype/device

            if u is None: # Special case used to find dA
                u = torch.zeros(self.H, dtype=C.dtype, device=C.device)
            if state is None: # Special case used to find dB
                state = torch.zeros(self.H, self.N, dtype=C.dtype, device=C.device)

            step_params = self.step_params.copy()
            if state.size(-1) == self.N: # Only store half of the conjugate pairs; should be true by default
                # There should be a slightly faster way using conjugate symmetry
                contract_fn = lambda p, x, y: contract('r h n, r h m, ... h m -> ... h n', _conj(p), _conj(x), _conj(y))[..., :self.N] # inner outer product
            else:
                assert state.size(-1) == 2*self.N
                step_params = {k: _conj(v) for k, v in step_params.items()}
                contract_fn = lambda p, x, y: contract('r h n, r h m, ... h m -> ... h n', p, x, y) # inner outer product
            D = step_params["D"]  # (H N)
            E = step_params["E"]  # (H N)
            R = step_params["R"]  # (R H N)
            P = step_params["P"]  # (R H N)
            Q = step_params["Q"]  # (R H N)
            B = step_params["B"]  # (1 H N)

            new_state = E * state - contract_fn(P, Q, state) # (B H N)
            new_state = new_state + 2.0 * B * u.unsqueeze(-1)  # (B H N)
            new_state = D * (new_state - contract_fn(P, R, new_state))

            return new_state

        def _setup_state(self):
            """Construct dA and dB for discretized state equation."""

            # Construct dA and dB by using the stepping
            self._setup_linear()
            C = _r2c(self.C) # Just returns a view that we use for finding dtype/device

            state = torch.eye(2*self.N, dtype=C.dtype, device=C.device).unsqueeze(-2) # (N 1 N)
            dA = self._step_state_linear(state=state)
            dA = rearrange(dA, "n h m -> h m n")

            u = C.new_ones(self.H)
            dB = self._step_state_linear(u=u)
            dB = _conj(dB)
            dB = rearrange(dB, '1 h n -> h n') # (H N)
            return dA, dB

        def _step_state(self, u, state):
            """Must be called after self.default_state() is used to construct an initial state!"""
            next_state = (torch.einsum(self.state_contraction, self.dA, state)
                         + torch.einsum(self.input_contraction, self.dB, u))
            return next_state

        def _setup_step(self, mode='dense'):
            """Set up dA, dB, dC discretized parameters for stepping."""
            self.dA, self.dB = self._setup_state()

            # Calculate original C
            C = _conj(_r2c(self.C)) # (H C N)
            if self.l_kernel.item() == 0:
                dC = C
            else:
                # self.C represents C_tilde
                dA_L = power(self.l_kernel.item(), self.dA)
                I = torch.eye(self.dA.size(-1)).to(dA_L)

                dC = torch.linalg.solve(
                    I - dA_L.transpose(-1, -2),
                    C.unsqueeze(-1),
                ).squeeze(-1)
            self.dC = dC

            # Do special preprocessing for different step modes

            self._step_mode = mode
            if mode == 'linear':
                # Linear case: special step function for the state, we need to handle output
                # use conjugate symmetry by default, which affects the output projection
                self.dC = 2*self.dC[:, :, :self.N]
            elif mode == 'diagonal':
                # Eigendecomposition of the A matrix
                L, V = torch.linalg.eig(self.dA)
                V_inv = torch.linalg.inv(V)
                # Check that the eigendedecomposition is correct
                if self.verbose:
                    print("Diagonalization error:", torch.dist(V @ torch.diag_embed(L) @ V_inv, self.dA))

                # Change the parameterization to diagonalize
                self.dA = L
                self.dB = contract('h n m, h m -> h n', V_inv, self.dB)
                self.dC = contract('h n m, c h n -> c h m', V, self.dC)

            elif mode == 'dense':
                pass
            else: raise NotImplementedError("DPLR Kernel step mode must be {'dense' | 'linear' | 'diagonal'}")

        def default_state(self, *batch_shape):
            C = _r2c(self.C)
            N = C.size(-1)
            H = C.size(-2)

            # Cache the tensor contractions we will later do, for efficiency
            # These are put in this function because they depend on the batch size
            step_mode = getattr(self, "_step_mode", "dense")  # Used in default_state, which is called without _setup_step() in forward_state()
            if step_mode != 'linear':
                N *= 2

                if step_mode == 'diagonal':
                    self.state_contraction = "h n, ... h n -> ... h n"
                else:
                    # Dense (quadratic) case: expand all terms
                    self.state_contraction = "h m n, ... h n -> ... h m"

                self.input_contraction = "h n, ... h -> ... h n"

            self.output_contraction = "c h n, ... h n -> ... c h"

            state = torch.zeros(*batch_shape, H, N, dtype=C.dtype, device=C.device)
            return state

        def step(self, u, state):
            """Must have called self._setup_step() and created state with self.default_state() before calling this."""

            if self._step_mode == 'linear':
                new_state = self._step_state_linear(u, state)
            else:
                new_state = self._step_state(u, state)
            y = torch.einsum(self.output_contraction, self.dC, new_state)
            return y.real, new_state

        def forward_state(self, *args, **kwargs):
            return SSMKernel.forward_state(self, *args, **kwargs)

    kernel_registry = {
        's4d': SSMKernelDiag,
        'diag': SSMKernelDiag,
        's4': SSMKernelDPLR,
        'nplr': SSMKernelDPLR,
        'dplr': SSMKernelDPLR,
    }
    Activation, LinearActivation = s4["Activation"], s4["LinearActivation"]
    DropoutNd = s4d_source(torch)[0]

    class FFTConv(nn.Module):
        """Implements an FFT Convolution around a convolution kernel."""

        def __init__(
            self,
            d_model,
            l_max=None,
            channels=1,
            swap_channels=False,
            bidirectional=False,
            activation='gelu', # Activation after layer
            transposed=True,
            dropout=0.0,
            tie_dropout=False,
            drop_kernel=0.0,
            mode='dplr',
            kernel=None,
            **kernel_args,  # Arguments passed into inner convolution kernel
        ):
            super().__init__()
            self.d_model = d_model
            self.L = self.l_max = l_max
            self.bidirectional = bidirectional
            self.channels = channels
            self.transposed = transposed
            self.swap_channels = swap_channels


            if activation is not None and activation.startswith('glu'):
                channels *= 2
            self.activation = Activation(activation, dim=1 if self.transposed else -1)

            self.D = nn.Parameter(torch.randn(channels, self.d_model))

            if self.bidirectional:
                channels *= 2

            # Inner convolution kernel
            if mode is not None:
                assert kernel is None, "Pass either mode or kernel but not both"
                kernel, mode = mode, kernel
            kernel_cls = kernel_registry[kernel]
            self.kernel = kernel_cls(
                d_model=self.d_model,
                l_max=self.l_max,
                channels=channels,
                **kernel_args,
            )

            dropout_fn = DropoutNd if tie_dropout else nn.Dropout
            self.drop = dropout_fn(dropout) if dropout > 0.0 else nn.Identity()
            self.drop_kernel = nn.Dropout(drop_kernel) if drop_kernel > 0.0 else nn.Identity()

        def forward(self, x, state=None, rate=1.0, **kwargs): # absorbs return_output and transformer src mask
            """
            x: (B D L) if self.transposed else (B L D)
            """

            # Always work with (B D L) dimension in this module
            if not self.transposed: x = x.transpose(-1, -2)
            L = x.size(-1)

            # Compute SS Kernel
            l_kernel = L if self.L is None else min(L, round(self.L / rate))
            k, k_state =  self.kernel(L=l_kernel, rate=rate, state=state) # (C H L) (B C H L)

            # Convolution
            if self.bidirectional:
                k0, k1 = rearrange(k, '(s c) h l -> s c h l', s=2)
                k = F.pad(k0, (0, L)) \
                        + F.pad(k1.flip(-1), (L, 0))

            # Kernel dropout
            k = self.drop_kernel(k)

            # In principle, we could pad to l_kernel+L-1 instead of l_kernel+L, but we choose the latter for
            # equational simplicity. Additionally, we have not experimented to compare the efficiency of the two.
            k_f = torch.fft.rfft(k, n=l_kernel+L) # (C H L)
            x_f = torch.fft.rfft(x, n=l_kernel+L) # (B H L)
            y_f = contract('bhl,chl->bchl', x_f, k_f)
            y = torch.fft.irfft(y_f, n=l_kernel+L)[..., :L] # (B C H L)


            # Compute D term in state space equation - essentially a skip connection
            y = y + contract('bhl,ch->bchl', x, self.D)

            # Compute state update
            if state is not None:
                assert not self.bidirectional, "Bidirectional not supported with state forwarding"
                y = y + k_state #
                next_state = self.kernel.forward_state(x, state)
            else:
                next_state = None


            # Reshape to flatten channels
            if self.swap_channels:
                y = rearrange(y, 'b c h l -> b (h c) l')
            else:
                y = rearrange(y, 'b c h l -> b (c h) l')

            y = self.drop(y)  # DropoutNd better with transposed=True

            if not self.transposed: y = y.transpose(-1, -2)
            y = self.activation(y)

            return y, next_state


        def setup_step(self, **kwargs):
            self.kernel._setup_step(**kwargs)

        def step(self, x, state):
            y, next_state = self.kernel.step(x, state) # (B C H)
            y = y + x.unsqueeze(-2) * self.D
            y = rearrange(y, 'b c h -> b (c h)')
            y = self.activation(y)
            return y, next_state

        def default_state(self, *batch_shape, device=None):
            return self.kernel.default_state(*batch_shape)

        @property
        def d_output(self):
            return self.d_model * self.channels

    class S4Block(nn.Module):
        def __init__(
            self,
            d_model,
            bottleneck=None,
            gate=None,
            gate_act=None,
            mult_act=None,
            final_act='glu',
            postact=None,
            initializer=None,
            weight_norm=False,
            dropout=0.0,
            tie_dropout=False,
            transposed=True,
            **layer_args,  # Arguments into inner layer (e.g. FFTConv)
        ):
            super().__init__()

            self.d_model = d_model
            self.transposed = transposed

            self.gate = gate
            self.bottleneck = bottleneck

            if bottleneck is not None:
                self.d_model = self.d_model // bottleneck
                self.input_linear = LinearActivation(
                    self.d_model,
                    self.d_model,
                    transposed=False,
                    activation=None,
                    activate=False,
                )

            # Currently this module only uses FFTConv for its inner module
            self.layer = FFTConv(d_model, transposed=False, dropout=dropout, tie_dropout=tie_dropout, **layer_args)

            # Pointwise operations

            # Activation after (optional) multiplication by gate branch
            self.mult_activation = Activation(mult_act)
            # dropout_fn = nn.Dropout2d if self.transposed else nn.Dropout # Broken in torch==1.11
            dropout_fn = partial(DropoutNd, transposed=False) if tie_dropout else nn.Dropout
            self.drop = dropout_fn(dropout) if dropout > 0.0 else nn.Identity()

            # position-wise output transform to mix features
            if final_act is None:
                self.output_linear = nn.Identity()
            else:
                self.output_linear = LinearActivation(
                    self.d_model*gate if gate is not None else self.layer.d_output,
                    self.d_model,
                    transposed=False,
                    activation=final_act,
                    activate=True,
                )

        def forward(self, x, lengths=None, **kwargs): # absorbs return_output and transformer src mask
            if self.transposed: x = rearrange(x, 'b d ... -> b ... d')
            L = x.size(1)

            # Mask out padding tokens
            # TODO handle option for mask - instead of lengths, which assumes suffix padding
            if isinstance(lengths, int):
                if lengths != L:
                    lengths = torch.tensor(lengths, dtype=torch.long, device=x.device)
                else:
                    lengths = None
            if lengths is not None:
                assert isinstance(lengths, torch.Tensor) and lengths.ndim == 1 and lengths.size(0) in [1, x.size(0)]
                mask = torch.where(torch.arange(L, device=lengths.device)[:, None] < lengths[:, None, None], 1., 0.)
                x = x * mask

            if self.bottleneck is not None:
                x = self.input_linear(x)

            y, state = self.layer(x, **kwargs)

            y = self.mult_activation(y)
            y = self.drop(y)
            y = self.output_linear(y)

            if self.transposed: y = rearrange(y, 'b d ... -> b ... d')

            return y, state

        def setup_step(self, **kwargs):
            self.layer.setup_step(**kwargs)

        def step(self, x, state):
            if self.bottleneck is not None:
                x = self.input_linear(x)
            y, next_state = self.layer.step(x, state) # (B C H)
            y = self.mult_activation(y)
            y = self.drop(y)
            y = self.output_linear(y)
            return y, next_state

        def default_state(self, *batch_shape, device=None):
            return self.layer.default_state(*batch_shape)

        @property
        def d_output(self):
            return self.d_model

    return dict(SSMKernelDiag=SSMKernelDiag, SSMKernelDPLR=SSMKernelDPLR, inv_transform=inv_transform,
                param_transform=param_transform, combination=combination, FFTConv=FFTConv, S4Block=S4Block)


# ----------------------------------------------------------------------------------------------
# state-spaces/mamba: selective_scan_interface.py (refs), causal_conv1d_ref, mamba_simple.py,
# ssd_minimal.py
# ----------------------------------------------------------------------------------------------
def mamba_source(torch, fast_path_conv=True):
    nn = torch.nn
    F = torch.nn.functional
    rearrange, repeat = _einops(torch)

    # Dao-AILab/causal-conv1d, causal_conv1d_interface.py
    def causal_conv1d_ref(x, weight, bias=None, initial_states=None, return_final_states=False,
                          final_states_out=None, activation=None):
        """
        x: (batch, dim, seqlen)
        weight: (dim, width)
        bias: (dim,)
        initial_states: (batch, dim, width - 1)
        final_states_out: (batch, dim, width - 1)

        out: (batch, dim, seqlen)
        """
        if activation not in [None, "silu", "swish"]:
            raise NotImplementedError("activation must be None, silu, or swish")
        dtype_in = x.dtype
        x = x.to(weight.dtype)
        seqlen = x.shape[-1]
        dim, width = weight.shape
        if initial_states is None:
            out = F.conv1d(x, weight.unsqueeze(1), bias, padding=width - 1, groups=dim)
        else:
            x = torch.cat([initial_states, x], dim=-1)
            out = F.conv1d(x, weight.unsqueeze(1), bias, padding=0, groups=dim)
        out = out[..., :seqlen]
        if return_final_states:
            final_states = F.pad(x, (width - 1 - x.shape[-1], 0)).to(
                dtype_in
            )  # (batch, dim, width - 1)
            if final_states_out is not None:
                final_states_out.copy_(final_states)
            else:
                final_states_out = final_states
        out = (out if activation is None else F.silu(out)).to(dtype=dtype_in)
        return out if not return_final_states else (out, final_states_out)

    def selective_scan_ref(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False,
                          return_last_state=False):
        """
        u: r(B D L)
        delta: r(B D L)
        A: c(D N) or r(D N)
        B: c(D N) or r(B N L) or r(B N 2L) or r(B G N L) or (B G N L)
        C: c(D N) or r(B N L) or r(B N 2L) or r(B G N L) or (B G N L)
        D: r(D)
        z: r(B D L)
        delta_bias: r(D), fp32

        out: r(B D L)
        last_state (optional): r(B D dstate) or c(B D dstate)
        """
        dtype_in = u.dtype
        u = u.float()
        delta = delta.float()
        if delta_bias is not None:
            delta = delta + delta_bias[..., None].float()
        if delta_softplus:
            delta = F.softplus(delta)
        batch, dim, dstate = u.shape[0], A.shape[0], A.shape[1]
        is_variable_B = B.dim() >= 3
        is_variable_C = C.dim() >= 3
        if A.is_complex():
            if is_variable_B:
                B = torch.view_as_complex(rearrange(B.float(), "... (L two) -> ... L two", two=2))
            if is_variable_C:
                C = torch.view_as_complex(rearrange(C.float(), "... (L two) -> ... L two", two=2))
        else:
            B = B.float()
            C = C.float()
        x = A.new_zeros((batch, dim, dstate))
        ys = []
        deltaA = torch.exp(torch.einsum('bdl,dn->bdln', delta, A))
        if not is_variable_B:
            deltaB_u = torch.einsum('bdl,dn,bdl->bdln', delta, B, u)
        else:
            if B.dim() == 3:
                deltaB_u = torch.einsum('bdl,bnl,bdl->bdln', delta, B, u)
            else:
                B = repeat(B, "B G N L -> B (G H) N L", H=dim // B.shape[1])
                deltaB_u = torch.einsum('bdl,bdnl,bdl->bdln', delta, B, u)
        if is_variable_C and C.dim() == 4:
            C = repeat(C, "B G N L -> B (G H) N L", H=dim // C.shape[1])
        last_state = None
        for i in range(u.shape[2]):
            x = deltaA[:, :, i] * x + deltaB_u[:, :, i]
            if not is_variable_C:
                y = torch.einsum('bdn,dn->bd', x, C)
            else:
                if C.dim() == 3:
                    y = torch.einsum('bdn,bn->bd', x, C[:, :, i])
                else:
                    y = torch.einsum('bdn,bdn->bd', x, C[:, :, :, i])
            if i == u.shape[2] - 1:
                last_state = x
            if y.is_complex():
                y = y.real * 2
            ys.append(y)
        y = torch.stack(ys, dim=2) # (batch dim L)
        out = y if D is None else y + u * rearrange(D, "d -> d 1")
        if z is not None:
            out = out * F.silu(z)
        out = out.to(dtype=dtype_in)
        return out if not return_last_state else (out, last_state)

    selective_scan_fn = selective_scan_ref
    causal_conv1d_fn = causal_conv1d_ref

    def mamba_inner_ref(
        xz, conv1d_weight, conv1d_bias, x_proj_weight, delta_proj_weight,
        out_proj_weight, out_proj_bias,
        A, B=None, C=None, D=None, delta_bias=None, B_proj_bias=None,
        C_proj_bias=None, delta_softplus=True
    ):
        assert causal_conv1d_fn is not None, "causal_conv1d_fn is not available. Please install causal-conv1d."
        L = xz.shape[-1]
        delta_rank = delta_proj_weight.shape[1]
        d_state = A.shape[-1] * (1 if not A.is_complex() else 2)
        x, z = xz.chunk(2, dim=1)
        x = causal_conv1d_fn(x, rearrange(conv1d_weight, "d 1 w -> d w"), conv1d_bias, activation="silu")
        # We're being very careful here about the layout, to avoid extra transposes.
        # We want delta to have d as the slowest moving dimension
        # and L as the fastest moving dimension, since those are what the ssm_scan kernel expects.
        x_dbl = F.linear(rearrange(x, 'b d l -> (b l) d'), x_proj_weight)  # (bl d)
        delta = delta_proj_weight @ x_dbl[:, :delta_rank].t()
        delta = rearrange(delta, "d (b l) -> b d l", l=L)
        if B is None:  # variable B
            B = x_dbl[:, delta_rank:delta_rank + d_state]  # (bl d)
            if B_proj_bias is not None:
                B = B + B_proj_bias.to(dtype=B.dtype)
            if not A.is_complex():
                B = rearrange(B, "(b l) dstate -> b dstate l", l=L).contiguous()
            else:
                B = rearrange(B, "(b l) (dstate two) -> b dstate (l two)", l=L, two=2).contiguous()
        if C is None:  # variable B
            C = x_dbl[:, -d_state:]  # (bl d)
            if C_proj_bias is not None:
                C = C + C_proj_bias.to(dtype=C.dtype)
            if not A.is_complex():
                C = rearrange(C, "(b l) dstate -> b dstate l", l=L).contiguous()
            else:
                C = rearrange(C, "(b l) (dstate two) -> b dstate (l two)", l=L, two=2).contiguous()
        y = selective_scan_fn(x, delta, A, B, C, D, z=z, delta_bias=delta_bias, delta_softplus=True)
        return F.linear(rearrange(y, "b d l -> b l d"), out_proj_weight, out_proj_bias)

    mamba_inner_fn = mamba_inner_ref
    # mamba_simple.py sees causal_conv1d_fn = None when causal-conv1d is not installed (the slow path)
    module_causal_conv1d_fn = causal_conv1d_ref if fast_path_conv else None
    causal_conv1d_update = None
    selective_state_update = None

    class Mamba(nn.Module):
        def __init__(
            self,
            d_model,
            d_state=16,
            d_conv=4,
            expand=2,
            dt_rank="auto",
            dt_min=0.001,
            dt_max=0.1,
            dt_init="random",
            dt_scale=1.0,
            dt_init_floor=1e-4,
            conv_bias=True,
            bias=False,
            use_fast_path=True,  # Fused kernel options
            layer_idx=None,
            device=None,
            dtype=None,
        ):
            factory_kwargs = {"device": device, "dtype": dtype}
            super().__init__()
            self.d_model = d_model
            self.d_state = d_state
            self.d_conv = d_conv
            self.expand = expand
            self.d_inner = int(self.expand * self.d_model)
            self.dt_rank = math.ceil(self.d_model / 16) if dt_rank == "auto" else dt_rank
            self.use_fast_path = use_fast_path
            self.layer_idx = layer_idx

            self.in_proj = nn.Linear(self.d_model, self.d_inner * 2, bias=bias, **factory_kwargs)

            self.conv1d = nn.Conv1d(
                in_channels=self.d_inner,
                out_channels=self.d_inner,
                bias=conv_bias,
                kernel_size=d_conv,
                groups=self.d_inner,
                padding=d_conv - 1,
                **factory_kwargs,
            )

            self.activation = "silu"
            self.act = nn.SiLU()

            self.x_proj = nn.Linear(
                self.d_inner, self.dt_rank + self.d_state * 2, bias=False, **factory_kwargs
            )
            self.dt_proj = nn.Linear(self.dt_rank, self.d_inner, bias=True, **factory_kwargs)

            # Initialize special dt projection to preserve variance at initialization
            dt_init_std = self.dt_rank**-0.5 * dt_scale
            if dt_init == "constant":
                nn.init.constant_(self.dt_proj.weight, dt_init_std)
            elif dt_init == "random":
                nn.init.uniform_(self.dt_proj.weight, -dt_init_std, dt_init_std)
            else:
                raise NotImplementedError

            # Initialize dt bias so that F.softplus(dt_bias) is between dt_min and dt_max
            dt = torch.exp(
                torch.rand(self.d_inner, **factory_kwargs) * (math.log(dt_max) - math.log(dt_min))
                + math.log(dt_min)
            ).clamp(min=dt_init_floor)
            # Inverse of softplus: https://github.com/pytorch/pytorch/issues/72759
            inv_dt = dt + torch.log(-torch.expm1(-dt))
            with torch.no_grad():
                self.dt_proj.bias.copy_(inv_dt)
            # Our initialization would set all Linear.bias to zero, need to mark this one as _no_reinit
            self.dt_proj.bias._no_reinit = True

            # S4D real initialization
            A = repeat(
                torch.arange(1, self.d_state + 1, dtype=torch.float32, device=device),
                "n -> d n",
                d=self.d_inner,
            ).contiguous()
            A_log = torch.log(A)  # Keep A_log in fp32
            self.A_log = nn.Parameter(A_log)
            self.A_log._no_weight_decay = True

            # D "skip" parameter
            self.D = nn.Parameter(torch.ones(self.d_inner, device=device))  # Keep in fp32
            self.D._no_weight_decay = True

            self.out_proj = nn.Linear(self.d_inner, self.d_model, bias=bias, **factory_kwargs)

        def forward(self, hidden_states, inference_params=None):
            """
            hidden_states: (B, L, D)
            Returns: same shape as hidden_states
            """
            batch, seqlen, dim = hidden_states.shape

            conv_state, ssm_state = None, None
            if inference_params is not None:
                conv_state, ssm_state = self._get_states_from_cache(inference_params, batch)
                if inference_params.seqlen_offset > 0:
                    # The states are updated inplace
                    out, _, _ = self.step(hidden_states, conv_state, ssm_state)
                    return out

            # We do matmul and transpose BLH -> HBL at the same time
            xz = rearrange(
                self.in_proj.weight @ rearrange(hidden_states, "b l d -> d (b l)"),
                "d (b l) -> b d l",
                l=seqlen,
            )
            if self.in_proj.bias is not None:
                xz = xz + rearrange(self.in_proj.bias.to(dtype=xz.dtype), "d -> d 1")

            A = -torch.exp(self.A_log.float())  # (d_inner, d_state)
            # In the backward pass we write dx and dz next to each other to avoid torch.cat
            if self.use_fast_path and module_causal_conv1d_fn is not None and inference_params is None:  # Doesn't support outputting the states
                out = mamba_inner_fn(
                    xz,
                    self.conv1d.weight,
                    self.conv1d.bias,
                    self.x_proj.weight,
                    self.dt_proj.weight,
                    self.out_proj.weight,
                    self.out_proj.bias,
                    A,
                    None,  # input-dependent B
                    None,  # input-dependent C
                    self.D.float(),
                    delta_bias=self.dt_proj.bias.float(),
                    delta_softplus=True,
                )
            else:
                x, z = xz.chunk(2, dim=1)
                # Compute short convolution
                if conv_state is not None:
                    # If we just take x[:, :, -self.d_conv :], it will error if seqlen < self.d_conv
                    # Instead F.pad will pad with zeros if seqlen < self.d_conv, and truncate otherwise.
                    conv_state.copy_(F.pad(x, (self.d_conv - x.shape[-1], 0)))  # Update state (B D W)
                if module_causal_conv1d_fn is None:
                    x = self.act(self.conv1d(x)[..., :seqlen])
                else:
                    assert self.activation in ["silu", "swish"]
                    x = module_causal_conv1d_fn(
                        x=x,
                        weight=rearrange(self.conv1d.weight, "d 1 w -> d w"),
                        bias=self.conv1d.bias,
                        activation=self.activation,
                    )

                # We're careful here about the layout, to avoid extra transposes.
                # We want dt to have d as the slowest moving dimension
                # and L as the fastest moving dimension, since those are what the ssm_scan kernel expects.
                x_dbl = self.x_proj(rearrange(x, "b d l -> (b l) d"))  # (bl d)
                dt, B, C = torch.split(x_dbl, [self.dt_rank, self.d_state, self.d_state], dim=-1)
                dt = self.dt_proj.weight @ dt.t()
                dt = rearrange(dt, "d (b l) -> b d l", l=seqlen)
                B = rearrange(B, "(b l) dstate -> b dstate l", l=seqlen).contiguous()
                C = rearrange(C, "(b l) dstate -> b dstate l", l=seqlen).contiguous()
                assert self.activation in ["silu", "swish"]
                y = selective_scan_fn(
                    x,
                    dt,
                    A,
                    B,
                    C,
                    self.D.float(),
                    z=z,
                    delta_bias=self.dt_proj.bias.float(),
                    delta_softplus=True,
                    return_last_state=ssm_state is not None,
                )
                if ssm_state is not None:
                    y, last_state = y
                    ssm_state.copy_(last_state)
                y = rearrange(y, "b d l -> b l d")
                out = self.out_proj(y)
            return out

        def step(self, hidden_states, conv_state, ssm_state):
            dtype = hidden_states.dtype
            assert hidden_states.shape[1] == 1, "Only support decoding with 1 token at a time for now"
            xz = self.in_proj(hidden_states.squeeze(1))  # (B 2D)
            x, z = xz.chunk(2, dim=-1)  # (B D)

            # Conv step
            if causal_conv1d_update is None:
                conv_state.copy_(torch.roll(conv_state, shifts=-1, dims=-1))  # Update state (B D W)
                conv_state[:, :, -1] = x
                x = torch.sum(conv_state * rearrange(self.conv1d.weight, "d 1 w -> d w"), dim=-1)  # (B D)
                if self.conv1d.bias is not None:
                    x = x + self.conv1d.bias
                x = self.act(x).to(dtype=dtype)

            x_db = self.x_proj(x)  # (B dt_rank+2*d_state)
            dt, B, C = torch.split(x_db, [self.dt_rank, self.d_state, self.d_state], dim=-1)
            # Don't add dt_bias here
            dt = F.linear(dt, self.dt_proj.weight)  # (B d_inner)
            A = -torch.exp(self.A_log.float())  # (d_inner, d_state)

            # SSM step
            if selective_state_update is None:
                # Discretize A and B
                dt = F.softplus(dt + self.dt_proj.bias.to(dtype=dt.dtype))
                dA = torch.exp(torch.einsum("bd,dn->bdn", dt, A))
                dB = torch.einsum("bd,bn->bdn", dt, B)
                ssm_state.copy_(ssm_state * dA + rearrange(x, "b d -> b d 1") * dB)
                y = torch.einsum("bdn,bn->bd", ssm_state.to(dtype), C)
                y = y + self.D.to(dtype) * x
                y = y * self.act(z)  # (B D)

            out = self.out_proj(y)
            return out.unsqueeze(1), conv_state, ssm_state

        def allocate_inference_cache(self, batch_size, max_seqlen, dtype=None, **kwargs):
            device = self.out_proj.weight.device
            conv_dtype = self.conv1d.weight.dtype if dtype is None else dtype
            conv_state = torch.zeros(
                batch_size, self.d_model * self.expand, self.d_conv, device=device, dtype=conv_dtype
            )
            ssm_dtype = self.dt_proj.weight.dtype if dtype is None else dtype
            # ssm_dtype = torch.float32
            ssm_state = torch.zeros(
                batch_size, self.d_model * self.expand, self.d_state, device=device, dtype=ssm_dtype
            )
            return conv_state, ssm_state

    # ssd_minimal.py
    def segsum_unstable(x):
        """Naive segment sum calculation."""
        T = x.size(-1)
        x_cumsum = torch.cumsum(x, dim=-1)
        x_segsum = x_cumsum[..., :, None] - x_cumsum[..., None, :]
        mask = torch.tril(torch.ones(T, T, device=x.device, dtype=bool), diagonal=0)
        x_segsum = x_segsum.masked_fill(~mask, -torch.inf)
        return x_segsum

    def segsum(x):
        """More stable segment sum calculation."""
        T = x.size(-1)
        x = repeat(x, "... d -> ... d e", e=T)
        mask = torch.tril(torch.ones(T, T, device=x.device, dtype=bool), diagonal=-1)
        x = x.masked_fill(~mask, 0)
        x_segsum = torch.cumsum(x, dim=-2)
        mask = torch.tril(torch.ones(T, T, device=x.device, dtype=bool), diagonal=0)
        x_segsum = x_segsum.masked_fill(~mask, -torch.inf)
        return x_segsum

    def ssd_minimal_discrete(X, A, B, C, block_len, initial_states=None):
        """
        Arguments:
            X: (batch, length, n_heads, d_head)
            A: (batch, length, n_heads)
            B: (batch, length, n_groups, d_state)
            C: (batch, length, n_groups, d_state)
        Return:
            Y: (batch, length, n_heads, d_head)
        """
        assert X.dtype == A.dtype == B.dtype == C.dtype
        assert X.shape[1] % block_len == 0

        # Rearrange into blocks/chunks
        X, A, B, C = [rearrange(x, "b (c l) ... -> b c l ...", l=block_len) for x in (X, A, B, C)]

        A = rearrange(A, "b c l h -> b h c l")
        A_cumsum = torch.cumsum(A, dim=-1)

        # 1. Compute the output for each intra-chunk (diagonal blocks)
        L = torch.exp(segsum(A))
        Y_diag = torch.einsum("bclgn,bcsgn,bhcls,bcshp->bclhp", C, B, L, X)

        # 2. Compute the state for each intra-chunk
        # (right term of low-rank factorization of off-diagonal blocks; B terms)
        decay_states = torch.exp((A_cumsum[:, :, :, -1:] - A_cumsum))
        states = torch.einsum("bclgn,bhcl,bclhp->bcghpn", B, decay_states, X)

        # 3. Compute the inter-chunk SSM recurrence; produces correct SSM states at chunk boundaries
        # (middle term of factorization of off-diag blocks; A terms)
        if initial_states is None:
            initial_states = torch.zeros_like(states[:, :1])
        states = torch.cat([initial_states, states], dim=1)
        decay_chunk = torch.exp(segsum(F.pad(A_cumsum[:, :, :, -1], (1, 0))))
        new_states = torch.einsum("bhzc,bcghpn->bzghpn", decay_chunk, states)
        states, final_state = new_states[:, :-1], new_states[:, -1]

        # 4. Compute state -> output conversion per chunk
        # (left term of low-rank factorization of off-diagonal blocks; C terms)
        state_decay_out = torch.exp(A_cumsum)
        Y_off = torch.einsum("bclgn,bcghpn,bhcl->bclhp", C, states, state_decay_out)

        # Add output of intra-chunk and inter-chunk terms (diagonal and off-diagonal blocks)
        Y = rearrange(Y_diag+Y_off, "b c l h p -> b (c l) h p")
        return Y, final_state

    return dict(causal_conv1d_ref=causal_conv1d_ref, selective_scan_ref=selective_scan_ref,
                mamba_inner_ref=mamba_inner_ref, Mamba=Mamba, segsum_unstable=segsum_unstable,
                segsum=segsum, ssd_minimal_discrete=ssd_minimal_discrete)


# ----------------------------------------------------------------------------------------------
# NumPy references
# ----------------------------------------------------------------------------------------------
_erf = np.vectorize(math.erf)


def _gelu(y):
    return 0.5 * y * (1 + _erf(y / math.sqrt(2)))


def _sigmoid(y):
    return 1 / (1 + np.exp(-y))


def _state(module):
    return {k: _np(v).copy() for k, v in module.state_dict().items()}


def _load(torch, module, state):
    module.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
    return module


def _fd(f, arrays, h=1e-6):
    """Central differences of the scalar f(*arrays) with respect to every real entry (real and
    imaginary parts of complex ones), in PyTorch's convention dL/dRe + i dL/dIm."""
    grads = []
    for k, a in enumerate(arrays):
        g = np.zeros(a.shape, dtype=a.dtype)
        for idx in np.ndindex(a.shape):
            for unit in ((1.0, 1j) if np.iscomplexobj(a) else (1.0,)):
                args = [b.copy() for b in arrays]
                args[k][idx] += unit * h
                fp = f(*args)
                args[k][idx] -= 2 * unit * h
                g[idx] += unit * (fp - f(*args)) / (2 * h)
        grads.append(g)
    return grads


def _np_s4d_kernel(C, log_dt, log_A_real, A_imag, L):
    dt = np.exp(log_dt)
    A = -np.exp(log_A_real) + 1j * A_imag
    dtA = A * dt[:, None]
    return 2 * np.einsum("hn,hnl->hl", C * (np.exp(dtA) - 1) / A, np.exp(dtA[..., None] * np.arange(L))).real


def _np_s4d(p, u):
    C = p["kernel.C"][..., 0] + 1j * p["kernel.C"][..., 1]
    K = _np_s4d_kernel(C, p["kernel.log_dt"], p["kernel.log_A_real"], p["kernel.A_imag"], u.shape[-1])
    y = np.zeros_like(u)
    for t in range(u.shape[-1]):  # direct causal convolution
        y[..., t] = np.einsum("hs,bhs->bh", K[:, :t + 1], u[..., t::-1])
    y = _gelu(y + u * p["D"][:, None])
    o = np.einsum("oh,bhl->bol", p["output_linear.0.weight"][..., 0], y) + p["output_linear.0.bias"][:, None]
    H = u.shape[1]
    return o[:, :H] * _sigmoid(o[:, H:])


def _np_selective_scan(u, delta, A, B, C, D=None, z=None, delta_bias=None, softplus=False):
    """The recurrence x_t = exp(delta_t A) x_{t-1} + delta_t B_t u_t, y_t = <C_t, x_t>, one step at a time."""
    b, d, L = u.shape
    cplx = np.iscomplexobj(A)

    def at(M, i):
        if M.ndim == 2:
            return M[None]
        if M.ndim == 3:
            return M[:, None, :, i]
        return np.repeat(M[..., i], d // M.shape[1], axis=1)
    if cplx:
        B, C = [M[..., 0::2] + 1j * M[..., 1::2] if M.ndim >= 3 else M for M in (B, C)]
    if delta_bias is not None:
        delta = delta + delta_bias[:, None]
    if softplus:
        delta = np.log1p(np.exp(delta))
    x = np.zeros((b, d, A.shape[1]), dtype=complex if cplx else float)
    ys = []
    for i in range(L):
        x = np.exp(delta[:, :, i, None] * A) * x + delta[:, :, i, None] * at(B, i) * u[:, :, i, None]
        y = (x * at(C, i)).sum(-1)
        ys.append(2 * y.real if cplx else y)
    out = np.stack(ys, 2)
    if D is not None:
        out = out + u * D[:, None]
    if z is not None:
        out = out * z * _sigmoid(z)
    return out, x


def _np_ssd_scan(X, A, B, C, h0=None):
    b, T, H, P = X.shape
    h = np.zeros((b, H, P, B.shape[-1])) if h0 is None else h0.copy()
    Y = np.zeros_like(X)
    for t in range(T):
        h = np.exp(A[:, t])[:, :, None, None] * h + X[:, t][..., None] * B[:, t, 0][:, None, None, :]
        Y[:, t] = np.einsum("bhpn,bn->bhp", h, C[:, t, 0])
    return Y, h


def _np_mamba(p, hs, d_state, dt_rank, d_conv):
    """Mamba's forward from its definition: projections, causal depthwise conv, the scan, gating."""
    Lq = hs.shape[1]
    xz = np.einsum("od,bld->bol", p["in_proj.weight"], hs)
    x, z = np.split(xz, 2, axis=1)
    w, cb = p["conv1d.weight"][:, 0], p["conv1d.bias"]
    xp = np.concatenate([np.zeros(x.shape[:2] + (d_conv - 1,)), x], -1)
    x = sum(w[None, :, k, None] * xp[..., k:k + Lq] for k in range(d_conv)) + cb[:, None]
    x = x * _sigmoid(x)
    dbl = np.einsum("rd,bdl->brl", p["x_proj.weight"], x)
    dt, B, C = dbl[:, :dt_rank], dbl[:, dt_rank:dt_rank + d_state], dbl[:, dt_rank + d_state:]
    dt = np.einsum("dr,brl->bdl", p["dt_proj.weight"], dt)
    y, _ = _np_selective_scan(x, dt, -np.exp(p["A_log"]), B, C, p["D"], z, p["dt_proj.bias"], True)
    return np.einsum("od,bdl->blo", p["out_proj.weight"], y)


# ----------------------------------------------------------------------------------------------
# pages (Lucid or PyTorch, same text)
# ----------------------------------------------------------------------------------------------
def _s4d_arrays():
    rng = np.random.default_rng(1)
    return rng.standard_normal((2, 3, 7)), rng.standard_normal((2, 3, 7))


def make_s4d(torch, state=None):
    torch.manual_seed(0)
    _, _, S4D = s4d_source(torch)
    m = S4D(3, d_state=4).double()
    if state is not None:
        _load(torch, m, state)
    return m


def s4d_page(torch, m, u, w):
    out = {}
    u = torch.tensor(u)
    K = m.kernel(L=u.shape[-1])
    out["K"] = _np(K)
    y, _ = m(u)
    out["y"] = _np(y)
    (y * torch.tensor(w)).sum().backward()
    for k, v in m.named_parameters():
        out["grad." + k] = _np(v.grad)
    return out


def s4d_training_page(torch, state, steps=12):
    m = make_s4d(torch, state)
    rng = np.random.default_rng(2)
    u = torch.tensor(rng.standard_normal((4, 3, 12)))
    target = torch.cat([torch.zeros(4, 3, 2, dtype=torch.float64), u[..., :-2]], -1) * 0.5  # a delay line
    opt = torch.optim.Adam(m.parameters(), lr=5e-2)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(m(u)[0], target)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _cauchy_arrays():
    rng = np.random.default_rng(3)
    c = lambda *s: rng.standard_normal(s) + 1j * rng.standard_normal(s)
    return dict(v=c(2, 3), z=c(4), w=c(2, 3) - 2.0, a=rng.standard_normal((2, 4)), b=rng.standard_normal((2, 4)),
                x=-0.3 + 1j * rng.standard_normal((2, 3)), u=rng.standard_normal((2, 5)),
                A=0.4 * rng.standard_normal((2, 3, 3)), V=rng.standard_normal((2, 3, 5)))


def s4_helpers_page(torch, arr):
    s4 = s4_source(torch)
    out = {}
    v, z, w = (torch.tensor(arr[k], requires_grad=True) for k in ("v", "z", "w"))
    r = s4["cauchy_naive"](v, z, w)
    out["cauchy"] = _np(r)
    (r.real * torch.tensor(arr["a"]) + r.imag * torch.tensor(arr["b"])).sum().backward()
    out.update(gv=_np(v.grad), gz=_np(z.grad), gw=_np(w.grad))
    out["vand"] = _np(s4["log_vandermonde_naive"](torch.tensor(arr["v"]), torch.tensor(arr["x"]), 5))
    out["vandT"] = _np(s4["log_vandermonde_transpose_naive"](torch.tensor(arr["u"]), torch.tensor(arr["v"]),
                                                             torch.tensor(arr["x"]), 5))
    out["resolve_conj"] = _np(s4["_resolve_conj"](torch.tensor(arr["v"])))
    I, s = s4["power"](5, torch.tensor(arr["A"]), torch.tensor(arr["V"]))
    out.update(power=_np(I), scan=_np(s), power6=_np(s4["power"](6, torch.tensor(arr["A"]))))
    W, P, B, V = s4["nplr"]("legs", 8, dtype=torch.double, B_clip=None)
    out.update(W=_np(W), P=_np(P), B=_np(B), absV=np.abs(_np(V)))
    Wc, Pc, Bc, _ = s4["nplr"]("legs", 8, dtype=torch.double)
    out["B_clipped"] = _np(Bc)
    for init in ("lin", "inv", "real", "hippo"):
        A, P, B, V = s4["dplr"](init, N=8, H=2, B_init="constant")
        out["dplr_A_" + init] = _np(A)
        out["dplr_B_" + init] = _np(B)
        out["dplr_V_" + init] = _np(V)
    return out


def _scan_arrays():
    rng = np.random.default_rng(4)
    b, d, n, L = 2, 4, 3, 5
    r = rng.standard_normal
    return dict(u=r((b, d, L)), delta=0.5 * r((b, d, L)), A=-np.exp(r((d, n))),
                Ac=-np.exp(r((d, n))) + 1j * r((d, n)), B=r((b, n, L)), C=r((b, n, L)), B2=r((b, n, 2 * L)),
                C2=r((b, n, 2 * L)), Bg=r((b, 2, n, L)), Cg=r((b, 2, n, L)), Bf=r((d, n)) + 1j * r((d, n)),
                Cf=r((d, n)) + 1j * r((d, n)), D=r(d), z=r((b, d, L)), bias=0.3 * r(d), W=r((b, d, L)))


def scan_page(torch, arr, dtype=None):
    ssm = mamba_source(torch)["selective_scan_ref"]
    dtype = dtype or torch.float32
    cdtype = torch.complex64 if dtype == torch.float32 else torch.complex128  # mamba's tests: A is cfloat
    T = {k: torch.tensor(v, dtype=(dtype if not np.iscomplexobj(v) else cdtype), requires_grad=True)
         for k, v in arr.items() if k != "W"}
    out = {}
    y, last = ssm(T["u"], T["delta"], T["A"], T["B"], T["C"], T["D"], z=T["z"], delta_bias=T["bias"],
                  delta_softplus=True, return_last_state=True)
    out.update(y_real=_np(y), last_real=_np(last))
    (y * torch.tensor(arr["W"], dtype=dtype)).sum().backward()
    for k in ("u", "delta", "A", "B", "C", "D", "z", "bias"):
        out["g_" + k] = _np(T[k].grad)
    yc, lastc = ssm(T["u"], T["delta"], T["Ac"], T["B2"], T["C2"], return_last_state=True)
    out.update(y_cplx=_np(yc), last_cplx=_np(lastc))
    (yc * torch.tensor(arr["W"], dtype=dtype)).sum().backward()
    for k in ("Ac", "B2", "C2"):
        out["g_" + k] = _np(T[k].grad)
    out["y_group"] = _np(ssm(T["u"], T["delta"], T["A"], T["Bg"], T["Cg"], T["D"]))
    out["y_fixed"] = _np(ssm(T["u"], T["delta"], T["Ac"], T["Bf"], T["Cf"], T["D"]))
    return out


def make_mamba(torch, state=None, fast_path_conv=True, use_fast_path=True):
    torch.manual_seed(0)
    m = mamba_source(torch, fast_path_conv)["Mamba"](4, d_state=3, d_conv=3, use_fast_path=use_fast_path)
    if state is not None:
        _load(torch, m, state)
    return m


def mamba_page(torch, state, hs, w):
    out = {}
    hs_t = torch.tensor(hs, dtype=torch.float32)
    for name, kw in (("fast", {}), ("slow_ref_conv", dict(use_fast_path=False)),
                     ("slow_conv1d", dict(fast_path_conv=False))):
        m = make_mamba(torch, state, **kw)
        y = m(hs_t)
        out["y_" + name] = _np(y)
        (y * torch.tensor(w, dtype=torch.float32)).sum().backward()
        for k, v in m.named_parameters():
            out[f"g_{name}.{k}"] = _np(v.grad)
    with torch.no_grad():
        conv_state, ssm_state = m.allocate_inference_cache(hs.shape[0], hs.shape[1])
        steps = [m.step(hs_t[:, i:i + 1], conv_state, ssm_state)[0] for i in range(hs.shape[1])]
    out["y_step"] = _np(torch.cat(steps, 1))
    out["ssm_state"] = _np(ssm_state)
    return out


def mamba_training_page(torch, state, steps=10):
    m = make_mamba(torch, state)
    rng = np.random.default_rng(5)
    hs = torch.tensor(rng.standard_normal((3, 6, 4)), dtype=torch.float32)
    target = torch.cumsum(hs, 1) / torch.arange(1, 7, dtype=torch.float32).reshape(1, 6, 1)  # running mean
    opt = torch.optim.AdamW(m.parameters(), lr=2e-2)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(m(hs), target)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _ssd_arrays():
    rng = np.random.default_rng(6)
    b, T, h, p, n = 2, 8, 2, 3, 4
    return dict(x=rng.standard_normal((b, T, h, p)), dt=np.log1p(np.exp(rng.standard_normal((b, T, h)) - 1)),
                A=-np.exp(rng.random(h)), B=rng.standard_normal((b, T, 1, n)), C=rng.standard_normal((b, T, 1, n)),
                h0=rng.standard_normal((b, 1, 1, h, p, n)), W=rng.standard_normal((b, T, h, p)),
                Wf=rng.standard_normal((b, 1, h, p, n)))


def ssd_page(torch, arr, block_len=4):
    src = mamba_source(torch)
    out = {}
    x, dt, A, B, C = (torch.tensor(arr[k], requires_grad=True) for k in ("x", "dt", "A", "B", "C"))
    Y, final = src["ssd_minimal_discrete"](x * dt.unsqueeze(-1), A * dt, B, C, block_len)
    out.update(Y=_np(Y), final=_np(final))
    ((Y * torch.tensor(arr["W"])).sum() + (final * torch.tensor(arr["Wf"])).sum()).backward()
    out.update(g_dt=_np(dt.grad), g_A=_np(A.grad), g_x=_np(x.grad), g_B=_np(B.grad), g_C=_np(C.grad))
    with torch.no_grad():
        Y0, f0 = src["ssd_minimal_discrete"](x * dt.unsqueeze(-1), A * dt, B, C, block_len,
                                             initial_states=torch.tensor(arr["h0"]))
        out.update(Y_init=_np(Y0), final_init=_np(f0))
        seg_in = A.unsqueeze(-1) * dt[0, :4].t()  # (h, 4)
        out["segsum"] = _np(src["segsum"](seg_in))
        out["segsum_unstable"] = _np(src["segsum_unstable"](seg_in))
    return out


def make_s4_kernel(torch, name, state=None, **kw):
    torch.manual_seed(0)
    k = s4_kernels_source(torch)[name](verbose=False, **kw)
    if state is not None:
        _load(torch, k, state)
    return k


_DIAG = dict(d_model=2, d_state=4, init="diag-lin", backend="naive")
_DPLR = dict(d_model=2, d_state=4, l_max=8, init="legs")


def s4_kernels_page(torch, states):
    out = {}
    for disc in ("zoh", "bilinear", "dss"):
        k = make_s4_kernel(torch, "SSMKernelDiag", states["diag_" + disc], disc=disc, **_DIAG)
        K, _ = k(L=6)
        out["diag_" + disc] = _np(K)
        K.sum().backward()
        for n, p in k.named_parameters():
            out[f"diag_{disc}.grad.{n}"] = _np(p.grad)
        if disc != "dss":
            _, K_state = k(L=6, state=torch.tensor(states["s0"], dtype=torch.complex64))
            out["diag_state_" + disc] = _np(K_state)
            with torch.no_grad():
                k._setup_step()
                out.update({f"diag_{disc}.{n}": _np(getattr(k, n)) for n in ("dA", "dB", "dC")})
                st, ys = k.default_state(1), []
                for i in range(6):
                    y, st = k.step(torch.tensor(states["u"][:, :, i]), st)
                    ys.append(y)
                out["diag_step_" + disc] = _np(torch.stack(ys, -1))
                out["diag_forward_state_" + disc] = _np(k.forward_state(torch.tensor(states["u"]),
                                                                        torch.tensor(states["s0"][:1])))
    k = make_s4_kernel(torch, "SSMKernelDPLR", states["dplr"], **_DPLR)
    K, _ = k(L=8)
    out["dplr"] = _np(K)
    (K * torch.tensor(states["w"])).sum().backward()
    for n, p in k.named_parameters():
        out["dplr.grad." + n] = _np(p.grad)
    out["dplr.C_tilde"] = _np(k.C)
    with torch.no_grad():
        for mode in ("dense", "linear", "diagonal"):
            k._setup_step(mode=mode)
            st, ys = k.default_state(1), []
            for i in range(8):
                y, st = k.step(torch.tensor(states["u8"][:, :, i]), st)
                ys.append(y)
            out["dplr_step_" + mode] = _np(torch.stack(ys, -1))
        k._setup_step(mode="dense")
        out.update({"dplr.dA": _np(k.dA), "dplr.dB": _np(k.dB), "dplr.dC": _np(k.dC)})
        out["dplr_forward_state"] = _np(k.forward_state(torch.tensor(states["u8"]), k.default_state(1)))
        out["dplr_doubled"] = _np(k(L=16)[0])
        out["dplr.l_kernel"] = np.array(k.l_kernel.item())
    return out


def _s4_kernel_states():
    states = {}
    for disc in ("zoh", "bilinear", "dss"):
        states["diag_" + disc] = _state(make_s4_kernel(lucid, "SSMKernelDiag", disc=disc, **_DIAG))
    states["dplr"] = _state(make_s4_kernel(lucid, "SSMKernelDPLR", **_DPLR))
    rng = np.random.default_rng(9)
    states.update(s0=rng.standard_normal((3, 2, 2)) + 1j * rng.standard_normal((3, 2, 2)),
                  u=rng.standard_normal((1, 2, 6)).astype(np.float32),
                  u8=rng.standard_normal((1, 2, 8)).astype(np.float32), w=rng.standard_normal((1, 2, 8)))
    return states


_BLOCKS = {"dplr": dict(mode="dplr", init="legs"), "diag": dict(mode="diag", init="diag-lin"),
           "bidirectional": dict(mode="s4d", bidirectional=True, init="diag-inv", activation=None),
           "channels": dict(mode="diag", channels=2, init="diag-lin")}


def make_s4block(torch, name, state=None):
    torch.manual_seed(0)
    blk = s4_kernels_source(torch)["S4Block"](3, d_state=4, l_max=8, verbose=False, **_BLOCKS[name])
    if state is not None:
        _load(torch, blk, state)
    return blk


def s4block_page(torch, states, x):
    out = {}
    x = torch.tensor(x, dtype=torch.float32)
    for name in _BLOCKS:
        blk = make_s4block(torch, name, states[name])
        y, _ = blk(x, lengths=torch.tensor([8, 5]))
        out[name] = _np(y)
        y.sum().backward()
        for n, p in blk.named_parameters():
            out[f"{name}.grad.{n}"] = _np(p.grad)
        with torch.no_grad():
            out[name + ".full"] = _np(blk(x)[0])
            out[name + ".kernel"] = _np(blk.layer.kernel(L=8)[0])
            if name in ("dplr", "diag"):
                blk.setup_step()
                st, ys = blk.default_state(2), []
                for i in range(8):
                    y, st = blk.step(x[:, :, i], st)
                    ys.append(y)
                out[name + ".step"] = _np(torch.stack(ys, -1))
            if name == "bidirectional":
                out[name + ".fftconv"] = _np(blk.layer(x.transpose(-1, -2))[0])
    return out


# ----------------------------------------------------------------------------------------------
# tests without PyTorch
# ----------------------------------------------------------------------------------------------
def _krylov(L, dA, dB, dC):
    """K_l = dC dA^l dB for diagonal (H N) or dense (H N N) dA."""
    x, ks = dB, []
    for _ in range(L):
        ks.append(np.einsum("chn,hn->ch", dC, x))
        x = dA * x if dA.ndim == 2 else np.einsum("hmn,hn->hm", dA, x)
    return np.stack(ks, -1)


def test_s4_diag_and_dplr_kernels_against_their_recurrences():
    states = _s4_kernel_states()
    out = s4_kernels_page(lucid, states)
    u, u8 = states["u"].astype(np.float64), states["u8"].astype(np.float64)
    for disc in ("zoh", "bilinear"):
        dA, dB, dC = (out[f"diag_{disc}.{n}"] for n in ("dA", "dB", "dC"))
        K = 2 * _krylov(6, dA, dB, dC).real
        np.testing.assert_allclose(out["diag_" + disc], K, rtol=1e-4, atol=1e-6, err_msg=disc)
        conv = np.stack([(K[0, :, :t + 1] * u[0, :, t::-1]).sum(-1) for t in range(6)], -1)
        np.testing.assert_allclose(out["diag_step_" + disc][:, 0], conv[None], rtol=1e-4, atol=1e-6)
        x = states["s0"][0]
        for t in range(6):
            x = dA * x + dB * u[0, :, t, None]
        np.testing.assert_allclose(out["diag_forward_state_" + disc][0], x, rtol=1e-4, atol=1e-5)
        # the kernel of an initial state s: y_l = 2 Re <dC, dA^(l+1) s>
        Ks = 2 * np.stack([_krylov(6, dA, dA * s, dC) for s in states["s0"]]).real
        np.testing.assert_allclose(out["diag_state_" + disc], Ks, rtol=1e-4, atol=1e-5, err_msg=disc)
    # DPLR: the Cauchy/Woodbury/irfft kernel against powers of the dense bilinear dA (the source's _check)
    dA, dB, dC = out["dplr.dA"], out["dplr.dB"], out["dplr.dC"]
    K = _krylov(16, dA, dB, dC).real
    np.testing.assert_allclose(out["dplr"], K[..., :8], rtol=1e-3, atol=1e-5)
    np.testing.assert_allclose(out["dplr_doubled"], K, rtol=1e-3, atol=1e-5)
    assert out["dplr.l_kernel"] == 16
    conv = np.stack([(K[0, :, :t + 1] * u8[0, :, t::-1]).sum(-1) for t in range(8)], -1)
    for mode in ("dense", "linear", "diagonal"):
        np.testing.assert_allclose(out["dplr_step_" + mode][:, 0], conv[None], rtol=1e-3, atol=1e-5, err_msg=mode)
    x = np.zeros((2, 4), complex)  # the dense state: both halves of the conjugate pairs
    for t in range(8):
        x = np.einsum("hmn,hn->hm", dA, x) + dB * u8[0, :, t, None]
    np.testing.assert_allclose(out["dplr_forward_state"][0], x, rtol=1e-3, atol=1e-5)


def test_s4block_recurrent_steps_lengths_and_bidirectional_fft_convolution():
    states = {name: _state(make_s4block(lucid, name)) for name in _BLOCKS}
    x = np.random.default_rng(10).standard_normal((2, 3, 8))
    out = s4block_page(lucid, states, x)
    for name in ("dplr", "diag"):  # the RNN view (setup_step, step) gives the CNN view's outputs
        np.testing.assert_allclose(out[name + ".step"], out[name + ".full"], rtol=1e-4, atol=1e-5, err_msg=name)
    masked = x.copy()
    masked[1, :, 5:] = 0
    for name in _BLOCKS:
        assert np.isfinite(out[name]).all()
        np.testing.assert_allclose(out[name][0], out[name + ".full"][0], rtol=1e-6, atol=1e-7, err_msg=name)
    m = make_s4block(lucid, "diag", states["diag"])
    with lucid.no_grad():
        np.testing.assert_allclose(out["diag"], _np(m(lucid.tensor(masked, dtype=lucid.float32))[0]), rtol=1e-6,
                                   atol=1e-7)
    # two-sided kernel k = pad(k0, (0, L)) + pad(k1.flip(-1), (L, 0)) and a circular convolution of size 2L
    k, L = out["bidirectional.kernel"].astype(np.float64), 8
    kk = np.concatenate([k[0], np.zeros((3, L))], -1) + np.concatenate([np.zeros((3, L)), k[1][:, ::-1]], -1)
    xp = np.concatenate([x, np.zeros((2, 3, L))], -1)
    conv = np.stack([(kk[None] * xp[..., (t - np.arange(2 * L)) % (2 * L)]).sum(-1) for t in range(L)], -1)
    D = states["bidirectional"]["layer.D"][0]
    np.testing.assert_allclose(out["bidirectional.fftconv"].transpose(0, 2, 1), conv + x * D[:, None], rtol=1e-4,
                               atol=1e-5)


def test_s4_dplr_kernel_gradients_by_finite_differences():
    states = _s4_kernel_states()
    k = make_s4_kernel(lucid, "SSMKernelDPLR", states["dplr"], **_DPLR).double()
    w = lucid.tensor(states["w"])
    k(L=8)  # sets up C~ (l_kernel = 8) first
    names = [n for n, _ in k.named_parameters()]
    params = dict(k.named_parameters())
    (k(L=8)[0] * w).sum().backward()

    def loss(*arrays):
        with lucid.no_grad():
            for n, a in zip(names, arrays):
                params[n].copy_(lucid.tensor(a))
            return float((k(L=8)[0] * w).sum().item())
    base = [_np(params[n]) for n in names]
    grads = [_np(params[n].grad) for n in names]
    for n, g, fd in zip(names, grads, _fd(loss, base)):
        np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-7, err_msg=n)
    assert set(names) == {"inv_dt", "C", "B", "A_real", "A_imag", "P"}


def test_s4d_kernel_is_the_impulse_response_of_the_zoh_recurrence():
    m = make_s4d(lucid)
    p = _state(m)
    L = 9
    K = _np(m.kernel(L=L))
    C = p["kernel.C"][..., 0] + 1j * p["kernel.C"][..., 1]
    dt = np.exp(p["kernel.log_dt"])[:, None]
    A = -np.exp(p["kernel.log_A_real"]) + 1j * p["kernel.A_imag"]
    # zero-order hold: B_bar = int_0^dt exp(A s) ds (Simpson's rule), A_bar = exp(dt A)
    s = np.linspace(0, 1, 65)[:, None, None] * dt
    wts = np.ones(65)
    wts[1:-1:2], wts[2:-1:2] = 4, 2
    B_bar = np.einsum("s,shn->hn", wts, np.exp(A * s)) * dt / (3 * 64)
    x, ref = B_bar, []
    for _ in range(L):
        ref.append(2 * (C * x).sum(-1).real)
        x = np.exp(dt * A) * x
    np.testing.assert_allclose(K, np.stack(ref, -1), rtol=1e-9, atol=1e-11)
    assert K.dtype == np.float64 and K.shape == (3, L)


def test_s4d_fft_convolution_matches_a_direct_causal_convolution_and_gradients():
    m = make_s4d(lucid)
    p = _state(m)
    u, w = _s4d_arrays()
    out = s4d_page(lucid, m, u, w)
    np.testing.assert_allclose(out["y"], _np_s4d(p, u), rtol=1e-10, atol=1e-12)
    names = ["kernel.C", "kernel.log_dt", "kernel.log_A_real", "kernel.A_imag", "D"]  # the SSM's own

    def loss(*arrays):
        return float((_np_s4d({**p, **dict(zip(names, arrays))}, u) * w).sum())
    for name, g in zip(names, _fd(loss, [p[k] for k in names])):
        np.testing.assert_allclose(out["grad." + name], g, rtol=1e-6, atol=1e-8, err_msg=name)
    assert {"grad.output_linear.0.weight", "grad.output_linear.0.bias"} <= set(out)
    # the complex C is a view_as_real parameter: its grad has the (H, N/2, 2) real layout
    assert out["grad.kernel.C"].shape == (3, 2, 2)


def test_s4d_trains():
    losses = s4d_training_page(lucid, _state(make_s4d(lucid)))
    assert losses[-1] < 0.75 * losses[0], losses  # 0.311 -> 0.208 on a delay line
    assert all(b < a for a, b in zip(losses, losses[1:])), losses


def test_s4d_dropout_nd_ties_its_mask_and_refuses_bad_p():
    DropoutNd, _, _ = s4d_source(lucid)
    lucid.manual_seed(3)
    d = DropoutNd(0.5)
    X = lucid.ones(4, 6, 5, dtype=lucid.float64)
    Y = _np(d(X))
    assert set(np.unique(Y)) <= {0.0, 2.0}
    assert (Y == Y[..., :1]).all()  # one draw per (batch, channel), tied along the length
    assert 0 < (Y[..., 0] == 0).sum() < 24
    d2 = DropoutNd(0.5, tie=False, transposed=False)
    Y2 = _np(d2(X))
    assert not (Y2 == Y2[..., :1]).all()
    d.eval()
    assert (_np(d(X)) == 1).all()
    with pytest.raises(ValueError, match=r"dropout probability has to be in \[0, 1\), but got 1"):
        DropoutNd(1)


def test_cauchy_vandermonde_power_against_numpy_and_complex_gradients():
    arr = _cauchy_arrays()
    out = s4_helpers_page(lucid, arr)
    v2 = np.concatenate([arr["v"], arr["v"].conj()], -1)
    w2 = np.concatenate([arr["w"], arr["w"].conj()], -1)

    def cauchy(v, z, w):
        v2 = np.concatenate([v, v.conj()], -1)
        w2 = np.concatenate([w, w.conj()], -1)
        return (v2[..., None] / (z[None, None] - w2[..., None])).sum(-2)
    ref = np.array([[sum(v2[h, n] / (arr["z"][l] - w2[h, n]) for n in range(6)) for l in range(4)] for h in range(2)])
    np.testing.assert_allclose(out["cauchy"], ref, rtol=1e-12)

    def loss(v, z, w):
        r = cauchy(v, z, w)
        return float((r.real * arr["a"] + r.imag * arr["b"]).sum())
    for k, g in zip(("gv", "gz", "gw"), _fd(loss, [arr["v"], arr["z"], arr["w"]])):
        np.testing.assert_allclose(out[k], g, rtol=1e-6, atol=1e-8, err_msg=k)
    assert out["gz"].dtype == np.complex128

    l = np.arange(5)
    np.testing.assert_allclose(out["vand"], 2 * (arr["v"][..., None] * np.exp(arr["x"][..., None] * l)).sum(-2).real,
                               rtol=1e-12)
    np.testing.assert_allclose(out["vandT"], (arr["u"][:, None, :] * arr["v"][..., None]
                                              * np.exp(arr["x"][..., None] * l)).sum(-1), rtol=1e-12)
    np.testing.assert_array_equal(out["resolve_conj"], arr["v"].conj())
    A, V = arr["A"], arr["V"]
    np.testing.assert_allclose(out["power"], np.linalg.matrix_power(A, 5), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(out["power6"], np.linalg.matrix_power(A, 6), rtol=1e-12, atol=1e-14)
    scan = sum(np.einsum("hij,hj->hi", np.linalg.matrix_power(A, i), V[..., i]) for i in range(5))
    np.testing.assert_allclose(out["scan"], scan, rtol=1e-12, atol=1e-14)


def test_nplr_and_dplr_against_the_hippo_legs_matrix():
    arr = _cauchy_arrays()
    out = s4_helpers_page(lucid, arr)
    N = 8
    q = np.arange(N)
    A = -np.where(q[:, None] > q[None, :], np.sqrt((2 * q[:, None] + 1) * (2 * q[None, :] + 1)), 0) - np.diag(q + 1)
    P0 = np.sqrt(q + 0.5)
    AP = A + np.outer(P0, P0)  # normal: -1/2 I + skew-symmetric
    W, P, B = out["W"], out["P"], out["B"]
    assert np.allclose(W.real, -0.5) and (np.diff(W.imag) >= 0).all() and (W.imag < 0).all()
    ev = np.linalg.eigvals(AP)
    np.testing.assert_allclose(np.sort(W.imag), np.sort(ev.imag[ev.imag < 0]), rtol=1e-10)
    _, Vs = np.linalg.eig(AP)  # eigenvectors, compared up to phase through |V|
    for j in range(N // 2):
        col = Vs[:, np.argmin(np.abs(ev - W[j]))]
        np.testing.assert_allclose(out["absV"][:, j], np.abs(col / np.linalg.norm(col)), atol=1e-9)
    # B = V^* B0 and P = V^* P0, so |B|, |P| are fixed by |<v_j, B0>|
    B0 = np.sqrt(2 * q + 1.0)
    Vcols = np.array([Vs[:, np.argmin(np.abs(ev - W[j]))] for j in range(N // 2)]).T
    Vcols /= np.linalg.norm(Vcols, axis=0)
    np.testing.assert_allclose(np.abs(B), np.abs(Vcols.conj().T @ B0), rtol=1e-9)
    np.testing.assert_allclose(np.abs(P[0]), np.abs(Vcols.conj().T @ P0), rtol=1e-9)
    Bc = out["B_clipped"]
    np.testing.assert_allclose(Bc.real, B.real)
    np.testing.assert_allclose(Bc.imag, np.clip(B.imag, -2, 2))
    n = np.arange(N // 2)
    np.testing.assert_allclose(out["dplr_A_lin"], np.tile(-0.5 - 1j * np.pi * n, (2, 1)), rtol=1e-6)
    np.testing.assert_allclose(out["dplr_A_inv"], np.tile(-0.5 - 1j / np.pi * N * (N / (1 + 2 * n) - 1), (2, 1)),
                               rtol=1e-6)
    np.testing.assert_allclose(out["dplr_A_real"], np.tile(-1.0 - n, (2, 1)) + 0j)
    np.testing.assert_allclose(out["dplr_A_hippo"].imag, np.tile(W.imag, (2, 1)), rtol=1e-5)
    np.testing.assert_allclose(out["dplr_B_lin"], np.ones((2, N // 2)))
    np.testing.assert_allclose(np.abs(out["dplr_B_hippo"]), np.tile(np.abs(Bc), (2, 1)), rtol=1e-5)
    np.testing.assert_array_equal(out["dplr_V_lin"], np.tile(np.eye(N)[:, :N // 2], (2, 1, 1)))
    assert out["dplr_A_lin"].dtype == np.complex64


def test_activation_factory():
    s4 = s4_source(lucid)
    x = lucid.tensor([[-1.5, 0.5], [2.0, -0.25]], dtype=lucid.float64)
    xn = _np(x)
    refs = {None: xn, "tanh": np.tanh(xn), "relu": np.maximum(xn, 0), "gelu": _gelu(xn),
            "elu": np.where(xn > 0, xn, np.expm1(xn)), "silu": xn * _sigmoid(xn), "sigmoid": _sigmoid(xn),
            "softplus": np.log1p(np.exp(xn)), "glu": xn[:, :1] * _sigmoid(xn[:, 1:])}
    for name, ref in refs.items():
        np.testing.assert_allclose(_np(s4["Activation"](name)(x)), ref, rtol=1e-12, err_msg=str(name))
    np.testing.assert_allclose(_np(s4["Activation"]("glu", dim=-2)(x)), xn[:1] * _sigmoid(xn[1:]), rtol=1e-12)
    with pytest.raises(NotImplementedError, match="hidden activation 'mish' is not implemented"):
        s4["Activation"]("mish")


def test_selective_scan_ref_matches_a_numpy_recurrence_and_finite_differences():
    arr = _scan_arrays()
    out = scan_page(lucid, arr)
    a = arr
    y, last = _np_selective_scan(a["u"], a["delta"], a["A"], a["B"], a["C"], a["D"], a["z"], a["bias"], True)
    np.testing.assert_allclose(out["y_real"], y, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["last_real"], last, rtol=1e-5, atol=1e-6)
    yc, lastc = _np_selective_scan(a["u"], a["delta"], a["Ac"], a["B2"], a["C2"])
    np.testing.assert_allclose(out["y_cplx"], yc, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["last_cplx"], lastc, rtol=1e-5, atol=1e-6)
    assert out["last_cplx"].dtype == np.complex64 and out["y_cplx"].dtype == np.float32
    np.testing.assert_allclose(out["y_group"], _np_selective_scan(a["u"], a["delta"], a["A"], a["Bg"], a["Cg"],
                                                                  a["D"])[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["y_fixed"], _np_selective_scan(a["u"], a["delta"], a["Ac"], a["Bf"], a["Cf"],
                                                                  a["D"])[0], rtol=1e-5, atol=1e-6)
    keys = ("u", "delta", "A", "B", "C", "D", "z", "bias")

    def loss(*xs):
        return float((_np_selective_scan(*xs[:6], z=xs[6], delta_bias=xs[7], softplus=True)[0] * a["W"]).sum())
    for k, g in zip(keys, _fd(loss, [a[k] for k in keys])):
        np.testing.assert_allclose(out["g_" + k], g, rtol=2e-4, atol=2e-4, err_msg=k)

    def loss_c(Ac, B2, C2):
        return float((_np_selective_scan(a["u"], a["delta"], Ac, B2, C2)[0] * a["W"]).sum())
    for k, g in zip(("Ac", "B2", "C2"), _fd(loss_c, [a["Ac"], a["B2"], a["C2"]])):
        np.testing.assert_allclose(out["g_" + k], g, rtol=2e-4, atol=2e-4, err_msg=k)
    assert out["g_Ac"].dtype == np.complex64


def test_mamba_paths_numpy_forward_and_step_decoding():
    m = make_mamba(lucid)
    state = _state(m)
    rng = np.random.default_rng(7)
    hs, w = rng.standard_normal((2, 5, 4)), rng.standard_normal((2, 5, 4))
    out = mamba_page(lucid, state, hs, w)
    ref = _np_mamba({k: v.astype(np.float64) for k, v in state.items()}, hs, 3, m.dt_rank, 3)
    for name in ("fast", "slow_ref_conv", "slow_conv1d"):
        np.testing.assert_allclose(out["y_" + name], ref, rtol=1e-4, atol=1e-5, err_msg=name)
        for k in state:
            np.testing.assert_allclose(out[f"g_{name}.{k}"], out[f"g_fast.{k}"], rtol=1e-4, atol=1e-5, err_msg=k)
    np.testing.assert_allclose(out["y_step"], ref, rtol=1e-4, atol=1e-5)
    # dt_proj.bias is softplus^-1 of a dt in [dt_min, dt_max]
    dt = np.log1p(np.exp(state["dt_proj.bias"]))
    assert ((dt >= 1e-3 - 1e-7) & (dt <= 0.1 + 1e-7)).all()
    np.testing.assert_allclose(state["A_log"], np.log(np.tile(np.arange(1, 4.0), (8, 1))), rtol=1e-6)
    assert m.dt_proj.bias._no_reinit and m.A_log._no_weight_decay


def test_mamba_parameter_gradients_by_finite_differences():
    m = make_mamba(lucid)
    state = _state(m)
    rng = np.random.default_rng(8)
    hs, w = rng.standard_normal((1, 4, 4)), rng.standard_normal((1, 4, 4))
    out = mamba_page(lucid, state, hs, w)
    p64 = {k: v.astype(np.float64) for k, v in state.items()}
    keys = ["A_log", "D", "dt_proj.bias", "conv1d.weight"]

    def loss(*xs):
        return float((_np_mamba({**p64, **dict(zip(keys, xs))}, hs, 3, m.dt_rank, 3) * w).sum())
    for k, g in zip(keys, _fd(loss, [p64[k] for k in keys])):
        np.testing.assert_allclose(out["g_fast." + k], g, rtol=1e-3, atol=1e-4, err_msg=k)


def test_mamba_trains():
    losses = mamba_training_page(lucid, _state(make_mamba(lucid)))
    assert losses[-1] < 0.75 * losses[0], losses  # 0.362 -> 0.250 on a running mean
    assert all(b < a for a, b in zip(losses, losses[1:])), losses


def test_ssd_minimal_matches_the_sequential_scan_and_finite_differences():
    a = _ssd_arrays()
    out = ssd_page(lucid, a)
    X, Adt = a["x"] * a["dt"][..., None], a["A"] * a["dt"]
    Y, h = _np_ssd_scan(X, Adt, a["B"], a["C"])
    np.testing.assert_allclose(out["Y"], Y, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(out["final"][:, 0], h, rtol=1e-10, atol=1e-12)
    Y0, h0 = _np_ssd_scan(X, Adt, a["B"], a["C"], a["h0"][:, 0, 0])
    np.testing.assert_allclose(out["Y_init"], Y0, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(out["final_init"][:, 0], h0, rtol=1e-10, atol=1e-12)
    seg, unst = out["segsum"], out["segsum_unstable"]
    low = np.tril(np.ones((4, 4), bool))
    assert np.isneginf(seg[:, ~low]).all() and np.isneginf(unst[:, ~low]).all()
    x = a["A"][:, None] * a["dt"][0, :4].T
    ref = np.array([[[x[k, j + 1:i + 1].sum() for j in range(4)] for i in range(4)] for k in range(2)])
    np.testing.assert_allclose(seg[:, low], ref[:, low], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(unst[:, low], ref[:, low], rtol=1e-10, atol=1e-14)

    def loss(x, dt, A, B, C):
        Y, h = _np_ssd_scan(x * dt[..., None], A * dt, B, C)
        return float((Y * a["W"]).sum() + (h * a["Wf"][:, 0]).sum())
    for k, g in zip(("x", "dt", "A", "B", "C"), _fd(loss, [a[k] for k in ("x", "dt", "A", "B", "C")])):
        np.testing.assert_allclose(out["g_" + k], g, rtol=1e-6, atol=1e-8, err_msg=k)


# ----------------------------------------------------------------------------------------------
# PyTorch parity (same text, same weights and inputs)
# ----------------------------------------------------------------------------------------------
def _compare(a, b, tol):
    assert set(a) == set(b)
    for k in a:
        assert np.asarray(a[k]).dtype == np.asarray(b[k]).dtype, k
        np.testing.assert_allclose(a[k], np.asarray(b[k]), rtol=tol, atol=tol, err_msg=k)


def test_s4d_torch_parity():
    torch = pytest.importorskip("torch")
    state = _state(make_s4d(lucid))
    u, w = _s4d_arrays()
    _compare(s4d_page(lucid, make_s4d(lucid, state), u, w), s4d_page(torch, make_s4d(torch, state), u, w), 1e-10)
    np.testing.assert_allclose(s4d_training_page(lucid, state), s4d_training_page(torch, state), rtol=1e-8)


def test_s4_helpers_torch_parity():
    torch = pytest.importorskip("torch")
    arr = _cauchy_arrays()
    a, b = s4_helpers_page(lucid, arr), s4_helpers_page(torch, arr)
    # eigenvectors (and so P, B) are fixed up to a phase per column: compare moduli there
    for k in ("P", "B", "B_clipped", "dplr_B_hippo"):
        a[k], b[k] = np.abs(a[k]), np.abs(b[k])
    _compare(a, b, 1e-5)  # dplr's tensors are complex64


def test_selective_scan_torch_parity():
    torch = pytest.importorskip("torch")
    arr = _scan_arrays()
    _compare(scan_page(lucid, arr), scan_page(torch, arr), 2e-5)  # the scan runs in float32


def test_mamba_torch_parity():
    torch = pytest.importorskip("torch")
    state = _state(make_mamba(lucid))
    rng = np.random.default_rng(7)
    hs, w = rng.standard_normal((2, 5, 4)), rng.standard_normal((2, 5, 4))
    _compare(mamba_page(lucid, state, hs, w), mamba_page(torch, state, hs, w), 2e-5)
    np.testing.assert_allclose(mamba_training_page(lucid, state), mamba_training_page(torch, state), rtol=1e-4)


def test_ssd_minimal_torch_parity():
    torch = pytest.importorskip("torch")
    arr = _ssd_arrays()
    _compare(ssd_page(lucid, arr), ssd_page(torch, arr), 1e-12)


def test_s4_kernels_torch_parity():
    torch = pytest.importorskip("torch")
    states = _s4_kernel_states()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # dss's .float() of a complex tensor warns on both sides
        _compare(s4_kernels_page(lucid, states), s4_kernels_page(torch, states), 2e-4)


# ----------------------------------------------------------------------------------------------
# fixed on the way: a float fill value for an integer tensor (segsum's masked_fill(-torch.inf) on
# an integer input) was cast by NumPy instead of range-checked
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["int64", "int8", "uint8"])
def test_float_fill_values_into_integer_tensors_are_range_checked(dtype):
    dt = getattr(lucid, dtype)
    mask = lucid.ones(2, dtype=lucid.bool)
    makers = {"full": lambda v: lucid.full((2,), v, dtype=dt), "fill_": lambda v: lucid.zeros(2, dtype=dt).fill_(v),
              "masked_fill_": lambda v: lucid.zeros(2, dtype=dt).masked_fill_(mask, v),
              "index_fill": lambda v: lucid.zeros(2, dtype=dt).index_fill(0, lucid.tensor([0, 1]), v)}
    bad = [float("inf"), -float("inf"), float("nan"), 1e30] + ([300.0, 255.9, -128.5] if dtype == "int8" else []) \
        + ([-1.0, -2.7, 255.9] if dtype == "uint8" else [])
    for op, make in makers.items():
        for v in bad:  # NumPy made these -2**63, 0, 44, 255 ...; PyTorch refuses them
            with pytest.raises(RuntimeError, match=f"{op}: value .* cannot be converted to type {dtype} without overflow"):
                make(v)
        assert make(2.7).tolist() == [2, 2] and make(np.float64(1.9)).tolist() == [1, 1]  # truncated, as PyTorch
        if dtype != "uint8":
            assert make(-2.7).tolist() == [-2, -2]
    assert lucid.full((1,), -2.0 ** 63, dtype=lucid.int64).tolist() == [-2 ** 63]
    if dtype == "uint8":  # a negative *int* still wraps (PyTorch's rule), a negative float does not
        assert lucid.zeros(1, dtype=dt).masked_fill_(mask[:1], -1).tolist() == [255]
        assert lucid.zeros(1, dtype=dt).index_fill_(0, lucid.tensor([0]), -255).tolist() == [1]
    with pytest.raises(RuntimeError, match="masked_fill_: value 300 cannot be converted"):
        lucid.zeros(1, dtype=lucid.int8).masked_fill_(mask[:1], 300)
    with pytest.raises(RuntimeError, match="index_fill: value cannot be converted to type int8"):
        lucid.zeros(1, dtype=lucid.int8).index_fill_(0, lucid.tensor([0]), 300)  # NumPy's cast gave 44


def test_s4block_torch_parity():
    torch = pytest.importorskip("torch")
    states = {name: _state(make_s4block(lucid, name)) for name in _BLOCKS}
    x = np.random.default_rng(10).standard_normal((2, 3, 8))
    _compare(s4block_page(lucid, states, x), s4block_page(torch, states, x), 1e-4)


def _fill_outcomes(torch):
    res = []
    for dtype in ("int64", "int8", "uint8"):
        dt = getattr(torch, dtype)
        mask = torch.ones(1, dtype=torch.bool)
        for v in (float("inf"), float("nan"), 1e30, 300.0, 255.9, -128.5, -2.7, 2.7, -1.0, 300, -1, -255, -256):
            for make in (lambda: torch.full((1,), v, dtype=dt), lambda: torch.zeros(1, dtype=dt).fill_(v),
                         lambda: torch.zeros(1, dtype=dt).masked_fill_(mask, v),
                         lambda: torch.zeros(1, dtype=dt).index_fill(0, torch.tensor([0]), v)):
                try:
                    res.append(make().item())
                except RuntimeError as e:
                    assert "cannot be converted to type" in str(e) and "without overflow" in str(e)
                    res.append("overflow")
    return res


def test_integer_fill_values_torch_parity():
    torch = pytest.importorskip("torch")
    assert _fill_outcomes(lucid) == _fill_outcomes(torch)
