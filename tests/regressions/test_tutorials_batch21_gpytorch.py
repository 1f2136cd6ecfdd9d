"""GPyTorch and linear_operator code run on Lucid (``import lucid as torch``), twenty-first batch.

Ported (trimmed: no priors, no lazy tensors, no pyro/keops) from ``cornellius-gp/gpytorch`` and
``cornellius-gp/linear_operator``:

- ``gpytorch/constraints/constraints.py`` with ``utils/transforms.py``: ``Interval`` (sigmoid and its
  inverse), ``GreaterThan``, ``Positive``, ``LessThan`` (a module-level ``torch.nn.Softplus()`` and
  ``inv_softplus``), the bounds as float32 buffers (``torch.as_tensor(b).float()``), ``check_raw``,
  ``intersect``, the ``TRANSFORM_REGISTRY`` keyed by ``torch.exp``/``F.softplus``/``F.sigmoid`` and the
  ``__repr__`` that formats 0-d tensors with ``f"{t:.3E}"``.
- ``gpytorch/module.py``: ``register_constraint`` and ``initialize`` (``.data.copy_(val.expand_as(p))``,
  ``.data.fill_``), ``constraint_for_parameter_name``.
- ``gpytorch/kernels/kernel.py``: ``Distance._sq_dist`` (the ``x1 - x1.mean(-2)`` centring, the padded
  quadratic expansion, ``res.diagonal(dim1=-2, dim2=-1).fill_(0)``, ``clamp_min_``), ``_dist``
  (``clamp_min_(1e-30).sqrt_()``) and ``covar_dist`` (``diag=True``, ``last_dim_is_batch``,
  ``torch.equal``, ``postprocess = torch.tensor(postprocess)``); ``RBFKernel``, ``MaternKernel``
  (nu = 0.5, 1.5, 2.5), ``PeriodicKernel``, ``ScaleKernel``; and ``gpytorch/functions``'
  ``RBFCovariance``/``MaternCovariance`` custom Functions (the fast path taken when the inputs need no
  gradient: in-place ``div_``/``exp_``/``neg_``/``pow_`` in forward, a lengthscale gradient returned
  with the kernel matrix's shape, which autograd sums down to the lengthscale's ``1 x 1``).
- ``gpytorch/likelihoods/noise_models.py`` (``HomoskedasticNoise``, ``GreaterThan(1e-4)``) with a
  ``GaussianLikelihood``, the "Simple GP Regression" tutorial's ``ExactGPModel`` (``ConstantMean``,
  ``ScaleKernel(RBFKernel())``) and ``ExactMarginalLogLikelihood`` over ``MultivariateNormal.log_prob``'s
  Cholesky path (linear_operator's ``CholLinearOperator.inv_quad_logdet``), trained a few Adam steps
  with the tutorial's printed line.
- linear_operator's ``utils/cholesky.py`` (``psd_safe_cholesky``: ``torch.linalg.cholesky_ex`` with
  ``out=(L, info)``, the jitter retried only where ``info > 0``, ``NotPSDError``/``NanError``,
  ``upper=True`` through ``out.transpose_``), ``utils/linear_cg.py`` (``@torch.jit.script`` updates
  written with ``out=`` into views of ``t_mat``, ``resize_as_``, ``masked_fill_`` through ``narrow``
  views, the preconditioned branch, the Lanczos tridiagonal matrices from the CG coefficients),
  ``utils/lanczos.py`` (``lanczos_tridiag`` with full reorthogonalisation, ``squeeze_``,
  ``lanczos_tridiag_to_diag``), ``functions/_pivoted_cholesky.py`` (the ``PivotedCholesky`` Function:
  ``gather``/``scatter_`` on integer permutations, in-place writes through row views, a ``backward``
  defined without ``@staticmethod`` that rebuilds the factor under ``torch.enable_grad()`` and calls
  ``res.backward(gradient=...)``) and ``utils/permutation.py`` (``apply_permutation``,
  ``inverse_permutation``).
- linear_operator's ``utils/toeplitz.py`` (``toeplitz`` built element by element, ``toeplitz_matmul`` through
  ``torch.fft.fft``/``ifft`` on zero-padded columns, Levinson-Durbin ``toeplitz_solve_ld``,
  ``sym_toeplitz_derivative_quadratic_form``), ``utils/minres.py`` (shifted MINRES: Givens rotations
  written with ``out=``, ``addcmul_`` chains, buffers swapped each step) and gpytorch's
  ``functions/_log_normal_cdf.py`` (``masked_select``/``masked_scatter_``, iterating a tensor,
  ``torch.distributions.Normal(0., 1.).cdf``, boolean-mask writes in backward).
- gpytorch's ``utils/interpolation.py`` (Keys' cubic ``Interpolation`` with its boundary fix-ups) and
  linear_operator's ``left_interp``/``left_t_interp`` with ``functions/_dsmm.py`` and ``utils/sparse.py``
  (``torch.sparse_coo_tensor``, the legacy ``torch.sparse.DoubleTensor(indices, values, size)``,
  ``_indices()``/``_values()``, ``torch.dsmm``, ``bdsmm``'s block-diagonal batch, ``sparse_repeat``,
  ``sparse_getitem`` with ``match``/``case``, ``to_sparse``, ``sparse_eye``; ``DSMM.backward`` uses
  ``sparse.mT``); gpytorch's ``utils/grid.py`` (``ScaleToBounds``, ``create_grid``,
  ``create_data_from_grid`` through ``torch.meshgrid`` and ``torch.stack(..., axis=-1)``) and
  linear_operator's ``StochasticLQ.to_dense``.

Kept as the originals behave (also on PyTorch): a float set through a setter goes through
``torch.as_tensor(value)`` (float32) first; ``Interval.intersect`` compares bound methods, so only a
constraint intersected with itself passes; ``Interpolation``'s out-of-bounds message repeats ``{0}``;
``toeplitz_matmul`` refuses a vector right-hand side (its ``expand`` of the n x 1 tensor to ``(n,)``).

Fixed on the way: ``nn.Module._apply(fn)`` handed ``fn`` raw arrays (PyTorch hands Tensors), so an
override calling ``fn`` on its own tensors, as GPyTorch's ``Interval._apply`` does with its bounds,
failed in ``.double()`` with ``AttributeError: 'Tensor' object has no attribute 'astype'``;
``linalg.cholesky_ex`` returned ``info = 0`` (and ``linalg.cholesky`` a NaN factor) for a matrix whose
factorization meets a NaN pivot, where LAPACK (and PyTorch) report that column, so
``psd_safe_cholesky`` never reached its ``NanError``; sparse tensors had no ``mT``/``mH`` (``DSMM``'s
backward raised "transpose: sparse tensors are not supported here").

Everything is checked without PyTorch against NumPy closed forms (kernel matrices, the exact GP
marginal log likelihood with ``numpy.linalg``, ``numpy.linalg.solve``, eigenvalues, a NumPy greedy
pivoted Cholesky) and float64 central differences; the ``*_torch_parity`` tests run the same text on
PyTorch. Data are synthetic and sizes tiny.
"""
import io
import math
import re
import warnings
from collections import OrderedDict
from contextlib import redirect_stdout
from types import SimpleNamespace

import numpy as np
import pytest

import lucid
import lucid.nn  # noqa: F401
import lucid.optim  # noqa: F401

_LIBS = {}


def gpytorch_lib(torch):
    """The ported GPyTorch / linear_operator pieces, built on the module handed in as ``torch``."""
    if torch.__name__ in _LIBS:
        return _LIBS[torch.__name__]
    nn = torch.nn
    sigmoid = torch.sigmoid
    bool_compat = torch.bool

    # ---- settings (trimmed linear_operator/gpytorch settings: default values) -------------------
    class _value:
        def __init__(self, v):
            self.v = v

        def value(self, dtype=None):
            if isinstance(self.v, dict):
                return self.v[dtype]
            return self.v

        def on(self):
            return bool(self.v)

        def off(self):
            return not self.v

    settings = SimpleNamespace(
        verbose_linalg=_value(False), trace_mode=_value(False), debug=_value(True),
        cholesky_jitter=_value({torch.float32: 1e-6, torch.float64: 1e-8}),
        cholesky_max_tries=_value(3), max_cg_iterations=_value(1000),
        max_lanczos_quadrature_iterations=_value(20), cg_tolerance=_value(1),
        terminate_cg_by_size=_value(False), preconditioner_tolerance=_value(1e-3),
    )

    class NumericalWarning(RuntimeWarning):
        pass

    class NanError(RuntimeError):
        pass

    class NotPSDError(RuntimeError):
        pass

    # ---- gpytorch/utils/transforms.py -----------------------------------------------------------
    def inv_softplus(x):
        return torch.log(torch.exp(x) - 1)

    def inv_sigmoid(x):
        return torch.log(x / (1 - x))

    def _get_inv_param_transform(param_transform, inv_param_transform=None):
        reg_inv_tf = TRANSFORM_REGISTRY.get(param_transform, None)
        if reg_inv_tf is None:
            if inv_param_transform is None:
                raise RuntimeError("Must specify inv_param_transform for custom param_transforms")
            return inv_param_transform
        elif inv_param_transform is not None and reg_inv_tf != inv_param_transform:
            raise RuntimeError("TODO")
        return reg_inv_tf

    TRANSFORM_REGISTRY = {
        torch.exp: torch.log,
        torch.nn.functional.softplus: inv_softplus,
        torch.nn.functional.sigmoid: inv_sigmoid,
    }

    # ---- gpytorch/constraints/constraints.py ----------------------------------------------------
    softplus = torch.nn.Softplus()

    class Interval(nn.Module):
        def __init__(self, lower_bound, upper_bound, transform=sigmoid, inv_transform=inv_sigmoid, initial_value=None):
            lower_bound = torch.as_tensor(lower_bound).float()
            upper_bound = torch.as_tensor(upper_bound).float()

            if torch.any(torch.ge(lower_bound, upper_bound)):
                raise RuntimeError("Got parameter bounds with empty intervals.")

            super().__init__()

            self.register_buffer("lower_bound", lower_bound)
            self.register_buffer("upper_bound", upper_bound)

            self._transform = transform
            self._inv_transform = inv_transform

            if transform is not None and inv_transform is None:
                self._inv_transform = _get_inv_param_transform(transform)

            if initial_value is not None:
                if not isinstance(initial_value, torch.Tensor):
                    initial_value = torch.tensor(initial_value)
                self._initial_value = self.inverse_transform(initial_value)
            else:
                self._initial_value = None

        def _apply(self, fn):
            self.lower_bound = fn(self.lower_bound)
            self.upper_bound = fn(self.upper_bound)
            return super()._apply(fn)

        @property
        def enforced(self):
            return self._transform is not None

        def check(self, tensor):
            return bool(torch.all(tensor <= self.upper_bound) and torch.all(tensor >= self.lower_bound))

        def check_raw(self, tensor):
            return bool(
                torch.all((self.transform(tensor) <= self.upper_bound))
                and torch.all(self.transform(tensor) >= self.lower_bound)
            )

        def intersect(self, other):
            if self.transform != other.transform:
                raise RuntimeError("Cant intersect Interval constraints with conflicting transforms!")

            lower_bound = torch.max(self.lower_bound, other.lower_bound)
            upper_bound = torch.min(self.upper_bound, other.upper_bound)
            return Interval(lower_bound, upper_bound)

        def transform(self, tensor):
            if not self.enforced:
                return tensor

            if settings.debug.on():
                max_bound = torch.max(self.upper_bound)
                min_bound = torch.min(self.lower_bound)

                if max_bound == math.inf or min_bound == -math.inf:
                    raise RuntimeError(
                        "Cannot make an Interval directly with non-finite bounds. Use a derived class like "
                        "GreaterThan or LessThan instead."
                    )

            transformed_tensor = (self._transform(tensor) * (self.upper_bound - self.lower_bound)) + self.lower_bound

            return transformed_tensor

        def inverse_transform(self, transformed_tensor):
            if not self.enforced:
                return transformed_tensor

            if settings.debug.on():
                max_bound = torch.max(self.upper_bound)
                min_bound = torch.min(self.lower_bound)

                if max_bound == math.inf or min_bound == -math.inf:
                    raise RuntimeError(
                        "Cannot make an Interval directly with non-finite bounds. Use a derived class like "
                        "GreaterThan or LessThan instead."
                    )

            tensor = self._inv_transform((transformed_tensor - self.lower_bound) / (self.upper_bound - self.lower_bound))

            return tensor

        @property
        def initial_value(self):
            return self._initial_value

        def __repr__(self):
            if self.lower_bound.numel() == 1 and self.upper_bound.numel() == 1:
                return self._get_name() + f"({self.lower_bound:.3E}, {self.upper_bound:.3E})"
            else:
                return super().__repr__()

        def __iter__(self):
            yield self.lower_bound
            yield self.upper_bound

    class GreaterThan(Interval):
        def __init__(self, lower_bound, transform=softplus, inv_transform=inv_softplus, initial_value=None):
            super().__init__(
                lower_bound=lower_bound,
                upper_bound=math.inf,
                transform=transform,
                inv_transform=inv_transform,
                initial_value=initial_value,
            )

        def __repr__(self):
            if self.lower_bound.numel() == 1:
                return self._get_name() + f"({self.lower_bound:.3E})"
            else:
                return super().__repr__()

        def transform(self, tensor):
            transformed_tensor = self._transform(tensor) + self.lower_bound if self.enforced else tensor
            return transformed_tensor

        def inverse_transform(self, transformed_tensor):
            tensor = self._inv_transform(transformed_tensor - self.lower_bound) if self.enforced else transformed_tensor
            return tensor

    class Positive(GreaterThan):
        def __init__(self, transform=softplus, inv_transform=inv_softplus, initial_value=None):
            super().__init__(lower_bound=0.0, transform=transform, inv_transform=inv_transform, initial_value=initial_value)

        def __repr__(self):
            return self._get_name() + "()"

        def transform(self, tensor):
            transformed_tensor = self._transform(tensor) if self.enforced else tensor
            return transformed_tensor

        def inverse_transform(self, transformed_tensor):
            tensor = self._inv_transform(transformed_tensor) if self.enforced else transformed_tensor
            return tensor

    class LessThan(Interval):
        def __init__(self, upper_bound, transform=softplus, inv_transform=inv_softplus, initial_value=None):
            super().__init__(
                lower_bound=-math.inf,
                upper_bound=upper_bound,
                transform=transform,
                inv_transform=inv_transform,
                initial_value=initial_value,
            )

        def transform(self, tensor):
            transformed_tensor = -self._transform(-tensor) + self.upper_bound if self.enforced else tensor
            return transformed_tensor

        def inverse_transform(self, transformed_tensor):
            tensor = -self._inv_transform(-(transformed_tensor - self.upper_bound)) if self.enforced else transformed_tensor
            return tensor

        def __repr__(self):
            return self._get_name() + f"({self.upper_bound:.3E})"

    # ---- gpytorch/module.py (trimmed: parameters, constraints and initialize) -------------------------------
    class Module(nn.Module):
        def __init__(self):
            super().__init__()
            self._constraints = OrderedDict()
            self._strict_init = True

        def register_parameter(self, name, parameter):
            if "_parameters" not in self.__dict__:
                raise AttributeError("Cannot assign parameter before Module.__init__() call")
            super().register_parameter(name, parameter)

        def initialize(self, **kwargs):
            for name, val in kwargs.items():
                if isinstance(val, int):
                    val = float(val)
                if not hasattr(self, name):
                    raise AttributeError("Unknown parameter {p} for {c}".format(p=name, c=self.__class__.__name__))
                elif name not in self._parameters and name not in self._buffers:
                    setattr(self, name, val)
                elif torch.is_tensor(val):
                    constraint = self.constraint_for_parameter_name(name)
                    if constraint is not None and constraint.enforced and not constraint.check_raw(val):
                        raise RuntimeError(
                            "Attempting to manually set a parameter value that is out of bounds of "
                            f"its current constraints, {constraint}. "
                            "Most likely, you want to do the following:\n likelihood = GaussianLikelihood"
                            "(noise_constraint=gpytorch.constraints.GreaterThan(better_lower_bound))"
                        )
                    try:
                        self.__getattr__(name).data.copy_(val.expand_as(self.__getattr__(name)))
                    except RuntimeError:
                        if not self._strict_init:
                            self.__getattr__(name).data = val
                        else:
                            self.__getattr__(name).data.copy_(val.view_as(self.__getattr__(name)))
                elif isinstance(val, float):
                    constraint = self.constraint_for_parameter_name(name)
                    if constraint is not None and not constraint.check_raw(val):
                        raise RuntimeError(
                            "Attempting to manually set a parameter value that is out of bounds of "
                            f"its current constraints, {constraint}. "
                        )
                    self.__getattr__(name).data.fill_(val)
                else:
                    raise AttributeError("Type {t} not valid for initializing parameter {p}".format(t=type(val), p=name))
            return self

        def register_constraint(self, param_name, constraint, replace=True):
            if param_name not in self._parameters:
                raise RuntimeError("Attempting to register constraint for nonexistent parameter.")

            constraint_name = param_name + "_constraint"
            if constraint_name in self._constraints:
                current_constraint = self._constraints[constraint_name]
            else:
                current_constraint = None

            if isinstance(current_constraint, Interval) and not replace:
                new_constraint = constraint.intersect(current_constraint)
            else:
                new_constraint = constraint

            self.add_module(constraint_name, new_constraint)
            self._constraints[constraint_name] = new_constraint

            # re-initialize the parameter if the constraint specifies an initial value
            if new_constraint.initial_value is not None:
                self.initialize(**{param_name: new_constraint.initial_value})

        def constraint_for_parameter_name(self, param_name):
            base_module = self
            base_name = param_name

            while "." in base_name:
                components = base_name.split(".")
                submodule_name = components[0]
                submodule = getattr(base_module, submodule_name)

                base_module = submodule
                base_name = ".".join(components[1:])

            try:
                constraint_name = base_name + "_constraint"
                return base_module._constraints.get(constraint_name)
            except AttributeError:  # submodule may not always be a gpytorch module
                return None

    # ---- gpytorch/kernels/kernel.py -------------------------------------------------------------
    def default_postprocess_script(x):
        return x

    class Distance(torch.nn.Module):
        def __init__(self, postprocess_script=default_postprocess_script):
            super().__init__()
            self._postprocess = postprocess_script

        def _sq_dist(self, x1, x2, postprocess, x1_eq_x2=False):
            # TODO: use torch squared cdist once implemented: https://github.com/pytorch/pytorch/pull/25799
            adjustment = x1.mean(-2, keepdim=True)
            x1 = x1 - adjustment
            x2 = x2 - adjustment  # x1 and x2 should be identical in all dims except -2 at this point

            # Compute squared distance matrix using quadratic expansion
            x1_norm = x1.pow(2).sum(dim=-1, keepdim=True)
            x1_pad = torch.ones_like(x1_norm)
            if x1_eq_x2 and not x1.requires_grad and not x2.requires_grad:
                x2_norm, x2_pad = x1_norm, x1_pad
            else:
                x2_norm = x2.pow(2).sum(dim=-1, keepdim=True)
                x2_pad = torch.ones_like(x2_norm)
            x1_ = torch.cat([-2.0 * x1, x1_norm, x1_pad], dim=-1)
            x2_ = torch.cat([x2, x2_pad, x2_norm], dim=-1)
            res = x1_.matmul(x2_.transpose(-2, -1))

            if x1_eq_x2 and not x1.requires_grad and not x2.requires_grad:
                res.diagonal(dim1=-2, dim2=-1).fill_(0)

            # Zero out negative values
            res.clamp_min_(0)
            return self._postprocess(res) if postprocess else res

        def _dist(self, x1, x2, postprocess, x1_eq_x2=False):
            # TODO: use torch cdist once implementation is improved: https://github.com/pytorch/pytorch/pull/25799
            res = self._sq_dist(x1, x2, postprocess=False, x1_eq_x2=x1_eq_x2)
            res = res.clamp_min_(1e-30).sqrt_()
            return self._postprocess(res) if postprocess else res

    class Kernel(Module):
        has_lengthscale = False

        def __init__(self, ard_num_dims=None, batch_shape=torch.Size([]), active_dims=None,
                     lengthscale_constraint=None, eps=1e-6, **kwargs):
            super(Kernel, self).__init__()
            self._batch_shape = batch_shape
            if active_dims is not None and not torch.is_tensor(active_dims):
                active_dims = torch.tensor(active_dims, dtype=torch.long)
            self.register_buffer("active_dims", active_dims)
            self.ard_num_dims = ard_num_dims

            self.eps = eps

            if lengthscale_constraint is None:
                lengthscale_constraint = Positive()

            if self.has_lengthscale:
                lengthscale_num_dims = 1 if ard_num_dims is None else ard_num_dims
                self.register_parameter(
                    name="raw_lengthscale",
                    parameter=torch.nn.Parameter(torch.zeros(*self.batch_shape, 1, lengthscale_num_dims)),
                )
                self.register_constraint("raw_lengthscale", lengthscale_constraint)

            self.distance_module = None

        @property
        def batch_shape(self):
            return self._batch_shape

        @property
        def lengthscale(self):
            if self.has_lengthscale:
                return self.raw_lengthscale_constraint.transform(self.raw_lengthscale)
            else:
                return None

        @lengthscale.setter
        def lengthscale(self, value):
            self._set_lengthscale(value)

        def _set_lengthscale(self, value):
            if not self.has_lengthscale:
                raise RuntimeError("Kernel has no lengthscale.")

            if not torch.is_tensor(value):
                value = torch.as_tensor(value).to(self.raw_lengthscale)

            self.initialize(raw_lengthscale=self.raw_lengthscale_constraint.inverse_transform(value))

        def covar_dist(self, x1, x2, diag=False, last_dim_is_batch=False, square_dist=False,
                       dist_postprocess_func=default_postprocess_script, postprocess=True, **params):
            if last_dim_is_batch:
                x1 = x1.transpose(-1, -2).unsqueeze(-1)
                x2 = x2.transpose(-1, -2).unsqueeze(-1)

            x1_eq_x2 = torch.equal(x1, x2)

            # torch scripts expect tensors
            postprocess = torch.tensor(postprocess)

            res = None

            # Cache the Distance object or else JIT will recompile every time
            if not self.distance_module or self.distance_module._postprocess != dist_postprocess_func:
                self.distance_module = Distance(dist_postprocess_func)

            if diag:
                # Special case the diagonal because we can return all zeros most of the time.
                if x1_eq_x2:
                    res = torch.zeros(*x1.shape[:-2], x1.shape[-2], dtype=x1.dtype, device=x1.device)
                    if postprocess:
                        res = dist_postprocess_func(res)
                    return res
                else:
                    res = torch.norm(x1 - x2, p=2, dim=-1)
                    if square_dist:
                        res = res.pow(2)
                if postprocess:
                    res = dist_postprocess_func(res)
                return res

            elif square_dist:
                res = self.distance_module._sq_dist(x1, x2, postprocess, x1_eq_x2)
            else:
                res = self.distance_module._dist(x1, x2, postprocess, x1_eq_x2)

            return res

        def __call__(self, x1, x2=None, diag=False, last_dim_is_batch=False, **params):
            x1_, x2_ = x1, x2

            # Select the active dimensions
            if self.active_dims is not None:
                x1_ = x1_.index_select(-1, self.active_dims)
                if x2_ is not None:
                    x2_ = x2_.index_select(-1, self.active_dims)

            # Give x1_ and x2_ a last dimension, if necessary
            if x1_.ndimension() == 1:
                x1_ = x1_.unsqueeze(1)
            if x2_ is not None:
                if x2_.ndimension() == 1:
                    x2_ = x2_.unsqueeze(1)
                if not x1_.size(-1) == x2_.size(-1):
                    raise RuntimeError("x1_ and x2_ must have the same number of dimensions!")

            if x2_ is None:
                x2_ = x1_

            # Check that ard_num_dims matches the supplied number of dimensions
            if settings.debug.on():
                if self.ard_num_dims is not None and self.ard_num_dims != x1_.size(-1):
                    raise RuntimeError(
                        "Expected the input to have {} dimensionality "
                        "(based on the ard_num_dims argument). Got {}.".format(self.ard_num_dims, x1_.size(-1))
                    )
            return super(Kernel, self).__call__(x1_, x2_, diag=diag, last_dim_is_batch=last_dim_is_batch, **params)

    # ---- gpytorch/functions/rbf_covariance.py and matern_covariance.py -------------------------
    class RBFCovariance(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x1, x2, lengthscale, sq_dist_func):
            if any(ctx.needs_input_grad[:2]):
                raise RuntimeError("RBFCovariance cannot compute gradients with " "respect to x1 and x2")
            if lengthscale.size(-1) > 1:
                raise ValueError("RBFCovariance cannot handle multiple lengthscales")
            needs_grad = any(ctx.needs_input_grad)
            x1_ = x1.div(lengthscale)
            x2_ = x2.div(lengthscale)
            unitless_sq_dist = sq_dist_func(x1_, x2_)
            # clone because inplace operations will mess with what's saved for backward
            unitless_sq_dist_ = unitless_sq_dist.clone() if needs_grad else unitless_sq_dist
            covar_mat = unitless_sq_dist_.div_(-2.0).exp_()
            if needs_grad:
                d_output_d_input = unitless_sq_dist.mul_(covar_mat).div_(lengthscale)
                ctx.save_for_backward(d_output_d_input)
            return covar_mat

        @staticmethod
        def backward(ctx, grad_output):
            d_output_d_input = ctx.saved_tensors[0]
            lengthscale_grad = grad_output * d_output_d_input
            return None, None, lengthscale_grad, None

    class MaternCovariance(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x1, x2, lengthscale, nu, dist_func):
            if any(ctx.needs_input_grad[:2]):
                raise RuntimeError("MaternCovariance cannot compute gradients with " "respect to x1 and x2")
            if lengthscale.size(-1) > 1:
                raise ValueError("MaternCovariance cannot handle multiple lengthscales")
            # Subtract mean for numerical stability. Won't affect computations
            # because covariance matrix is stationary.
            needs_grad = any(ctx.needs_input_grad)
            mean = x1.reshape(-1, x1.size(-1)).mean(0)[(None,) * (x1.dim() - 1)]
            x1_ = (x1 - mean).div(lengthscale)
            x2_ = (x2 - mean).div(lengthscale)
            scaled_unitless_dist = dist_func(x1_, x2_).mul_(math.sqrt(2 * nu))
            if nu == 0.5:
                # 1 kernel sized Tensor if no grad else 2
                scaled_unitless_dist_ = scaled_unitless_dist.clone() if needs_grad else scaled_unitless_dist
                exp_component = scaled_unitless_dist_.neg_().exp_()
                covar_mat = exp_component
                if needs_grad:
                    d_output_d_input = scaled_unitless_dist.div_(lengthscale).mul_(exp_component)
            elif nu == 1.5:
                # 2 kernel sized Tensors if no grad else 3
                if needs_grad:
                    scaled_unitless_dist_ = scaled_unitless_dist.clone()
                linear_term = scaled_unitless_dist.clone().add_(1)
                exp_component = scaled_unitless_dist.neg_().exp_()
                covar_mat = linear_term.mul_(exp_component)
                if needs_grad:
                    d_output_d_input = scaled_unitless_dist_.pow_(2).div_(lengthscale).mul_(exp_component)
            elif nu == 2.5:
                # 3 kernel sized Tensors if no grad else 4
                linear_term = scaled_unitless_dist.clone().add_(1)
                quadratic_term = scaled_unitless_dist.clone().pow_(2).div_(3)
                exp_component = scaled_unitless_dist.neg_().exp_()
                if needs_grad:
                    covar_mat = (linear_term + quadratic_term).mul_(exp_component)
                    d_output_d_input = linear_term.mul_(quadratic_term).mul_(exp_component).div_(lengthscale)
                else:
                    covar_mat = exp_component.mul_(linear_term.add_(quadratic_term))
            if needs_grad:
                ctx.save_for_backward(d_output_d_input)
            return covar_mat

        @staticmethod
        def backward(ctx, grad_output):
            d_output_d_input = ctx.saved_tensors[0]
            lengthscale_grad = grad_output * d_output_d_input
            return None, None, lengthscale_grad, None, None

    # ---- gpytorch/kernels/{rbf,matern,periodic,scale}_kernel.py --------------------------------
    def postprocess_rbf(dist_mat):
        return dist_mat.div_(-2).exp_()

    class RBFKernel(Kernel):
        has_lengthscale = True

        def forward(self, x1, x2, diag=False, **params):
            if (
                x1.requires_grad
                or x2.requires_grad
                or (self.ard_num_dims is not None and self.ard_num_dims > 1)
                or diag
                or params.get("last_dim_is_batch", False)
                or settings.trace_mode.on()
            ):
                x1_ = x1.div(self.lengthscale)
                x2_ = x2.div(self.lengthscale)
                return self.covar_dist(
                    x1_, x2_, square_dist=True, diag=diag, dist_postprocess_func=postprocess_rbf, postprocess=True, **params
                )
            return RBFCovariance.apply(
                x1,
                x2,
                self.lengthscale,
                lambda x1, x2: self.covar_dist(
                    x1, x2, square_dist=True, diag=False, dist_postprocess_func=postprocess_rbf, postprocess=False, **params
                ),
            )

    class MaternKernel(Kernel):
        has_lengthscale = True

        def __init__(self, nu=2.5, **kwargs):
            if nu not in {0.5, 1.5, 2.5}:
                raise RuntimeError("nu expected to be 0.5, 1.5, or 2.5")
            super(MaternKernel, self).__init__(**kwargs)
            self.nu = nu

        def forward(self, x1, x2, diag=False, **params):
            if (
                x1.requires_grad
                or x2.requires_grad
                or (self.ard_num_dims is not None and self.ard_num_dims > 1)
                or diag
                or params.get("last_dim_is_batch", False)
                or settings.trace_mode.on()
            ):
                mean = x1.reshape(-1, x1.size(-1)).mean(0)[(None,) * (x1.dim() - 1)]

                x1_ = (x1 - mean).div(self.lengthscale)
                x2_ = (x2 - mean).div(self.lengthscale)
                distance = self.covar_dist(x1_, x2_, diag=diag, **params)
                exp_component = torch.exp(-math.sqrt(self.nu * 2) * distance)

                if self.nu == 0.5:
                    constant_component = 1
                elif self.nu == 1.5:
                    constant_component = (math.sqrt(3) * distance).add(1)
                elif self.nu == 2.5:
                    constant_component = (math.sqrt(5) * distance).add(1).add(5.0 / 3.0 * distance ** 2)
                return constant_component * exp_component
            return MaternCovariance.apply(
                x1, x2, self.lengthscale, self.nu, lambda x1, x2: self.covar_dist(x1, x2, **params)
            )

    class PeriodicKernel(Kernel):
        has_lengthscale = True

        def __init__(self, period_length_constraint=None, **kwargs):
            super(PeriodicKernel, self).__init__(**kwargs)
            if period_length_constraint is None:
                period_length_constraint = Positive()

            self.register_parameter(
                name="raw_period_length", parameter=torch.nn.Parameter(torch.zeros(*self.batch_shape, 1, 1))
            )
            self.register_constraint("raw_period_length", period_length_constraint)

        @property
        def period_length(self):
            return self.raw_period_length_constraint.transform(self.raw_period_length)

        @period_length.setter
        def period_length(self, value):
            self._set_period_length(value)

        def _set_period_length(self, value):
            if not torch.is_tensor(value):
                value = torch.as_tensor(value).to(self.raw_period_length)
            self.initialize(raw_period_length=self.raw_period_length_constraint.inverse_transform(value))

        def forward(self, x1, x2, diag=False, **params):
            x1_ = x1.div(self.period_length)
            x2_ = x2.div(self.period_length)
            diff = self.covar_dist(x1_, x2_, diag=diag, **params)
            res = torch.sin(diff.mul(math.pi)).pow(2).mul(-2 / self.lengthscale).exp_()
            if diag:
                res = res.squeeze(0)
            return res

    class ScaleKernel(Kernel):
        def __init__(self, base_kernel, outputscale_constraint=None, **kwargs):
            if base_kernel.active_dims is not None:
                kwargs["active_dims"] = base_kernel.active_dims
            super(ScaleKernel, self).__init__(**kwargs)
            if outputscale_constraint is None:
                outputscale_constraint = Positive()

            self.base_kernel = base_kernel
            outputscale = torch.zeros(*self.batch_shape) if len(self.batch_shape) else torch.tensor(0.0)
            self.register_parameter(name="raw_outputscale", parameter=torch.nn.Parameter(outputscale))
            self.register_constraint("raw_outputscale", outputscale_constraint)

        @property
        def outputscale(self):
            return self.raw_outputscale_constraint.transform(self.raw_outputscale)

        @outputscale.setter
        def outputscale(self, value):
            self._set_outputscale(value)

        def _set_outputscale(self, value):
            if not torch.is_tensor(value):
                value = torch.as_tensor(value).to(self.raw_outputscale)
            self.initialize(raw_outputscale=self.raw_outputscale_constraint.inverse_transform(value))

        def forward(self, x1, x2, last_dim_is_batch=False, diag=False, **params):
            orig_output = self.base_kernel.forward(x1, x2, diag=diag, last_dim_is_batch=last_dim_is_batch, **params)
            outputscales = self.outputscale
            if last_dim_is_batch:
                outputscales = outputscales.unsqueeze(-1)
            if diag:
                outputscales = outputscales.unsqueeze(-1)
                return orig_output * outputscales
            else:
                outputscales = outputscales.view(*outputscales.shape, 1, 1)
                return orig_output.mul(outputscales)

    # ---- linear_operator/utils/cholesky.py ------------------------------------------------------
    def _psd_safe_cholesky(A, out=None, jitter=None, max_tries=None):
        # Maybe log
        if settings.verbose_linalg.on():
            settings.verbose_linalg.logger.debug(f"Running Cholesky on a matrix of size {A.shape}.")

        if out is not None:
            out = (out, torch.empty(A.shape[:-2], dtype=torch.int32, device=out.device))

        L, info = torch.linalg.cholesky_ex(A, out=out)
        if settings.trace_mode.on() or not torch.any(info):
            return L

        isnan = torch.isnan(A)
        if isnan.any():
            raise NanError(f"cholesky_cpu: {isnan.sum().item()} of {A.numel()} elements of the {A.shape} tensor are NaN.")

        if jitter is None:
            jitter = settings.cholesky_jitter.value(A.dtype)
        if max_tries is None:
            max_tries = settings.cholesky_max_tries.value()
        Aprime = A.clone()
        jitter_prev = 0
        for i in range(max_tries):
            jitter_new = jitter * (10**i)
            # add jitter only where needed
            diag_add = ((info > 0) * (jitter_new - jitter_prev)).unsqueeze(-1).expand(*Aprime.shape[:-1])
            Aprime.diagonal(dim1=-1, dim2=-2).add_(diag_add)
            jitter_prev = jitter_new
            warnings.warn(
                f"A not p.d., added jitter of {jitter_new:.1e} to the diagonal",  # noqa: E231
                NumericalWarning,
            )
            L, info = torch.linalg.cholesky_ex(Aprime, out=out)
            if not torch.any(info):
                return L
        raise NotPSDError(
            f"Matrix not positive definite after repeatedly adding jitter up to {jitter_new:.1e}."  # noqa: E231
        )

    def psd_safe_cholesky(A, upper=False, out=None, jitter=None, max_tries=None):
        L = _psd_safe_cholesky(A, out=out, jitter=jitter, max_tries=max_tries)
        if upper:
            if out is not None:
                out = out.transpose_(-1, -2)
            else:
                L = L.mT
        return L

    # ---- linear_operator/utils/linear_cg.py -----------------------------------------------------
    def _default_preconditioner(x):
        return x.clone()

    @torch.jit.script
    def _jit_linear_cg_updates(
        result, alpha, residual_inner_prod, eps, beta, residual, precond_residual, mul_storage, is_zero, curr_conjugate_vec
    ):
        # # Update result
        # # result_{k} = result_{k-1} + alpha_{k} p_vec_{k-1}
        result = torch.addcmul(result, alpha, curr_conjugate_vec, out=result)

        # beta_{k} = (precon_residual{k}^T r_vec_{k}) / (precon_residual{k-1}^T r_vec_{k-1})
        beta.resize_as_(residual_inner_prod).copy_(residual_inner_prod)
        torch.mul(residual, precond_residual, out=mul_storage)
        torch.sum(mul_storage, -2, keepdim=True, out=residual_inner_prod)

        # Do a safe division here
        torch.lt(beta, eps, out=is_zero)
        beta.masked_fill_(is_zero, 1)
        torch.div(residual_inner_prod, beta, out=beta)
        beta.masked_fill_(is_zero, 0)

        # Update curr_conjugate_vec
        # curr_conjugate_vec_{k} = precon_residual{k} + beta_{k} curr_conjugate_vec_{k-1}
        curr_conjugate_vec.mul_(beta).add_(precond_residual)

    @torch.jit.script
    def _jit_linear_cg_updates_no_precond(
        mvms, result, has_converged, alpha, residual_inner_prod, eps, beta, residual, precond_residual,
        mul_storage, is_zero, curr_conjugate_vec,
    ):
        torch.mul(curr_conjugate_vec, mvms, out=mul_storage)
        torch.sum(mul_storage, dim=-2, keepdim=True, out=alpha)

        # Do a safe division here
        torch.lt(alpha, eps, out=is_zero)
        alpha.masked_fill_(is_zero, 1)
        torch.div(residual_inner_prod, alpha, out=alpha)
        alpha.masked_fill_(is_zero, 0)

        # We'll cancel out any updates by setting alpha=0 for any vector that has already converged
        alpha.masked_fill_(has_converged, 0)

        # Update residual
        # residual_{k} = residual_{k-1} - alpha_{k} mat p_vec_{k-1}
        torch.addcmul(residual, -alpha, mvms, out=residual)

        # Update precond_residual
        # precon_residual{k} = M^-1 residual_{k}
        precond_residual = residual.clone()

        _jit_linear_cg_updates(
            result, alpha, residual_inner_prod, eps, beta, residual, precond_residual, mul_storage, is_zero,
            curr_conjugate_vec,
        )

    def linear_cg(matmul_closure, rhs, n_tridiag=0, tolerance=None, eps=1e-10, stop_updating_after=1e-10,
                  max_iter=None, max_tridiag_iter=None, initial_guess=None, preconditioner=None):
        # Unsqueeze, if necesasry
        is_vector = rhs.ndimension() == 1
        if is_vector:
            rhs = rhs.unsqueeze(-1)

        # Some default arguments
        if max_iter is None:
            max_iter = settings.max_cg_iterations.value()
        if max_tridiag_iter is None:
            max_tridiag_iter = settings.max_lanczos_quadrature_iterations.value()
        if initial_guess is None:
            initial_guess = torch.zeros_like(rhs)
        if tolerance is None:
            tolerance = settings.cg_tolerance.value()
        if preconditioner is None:
            preconditioner = _default_preconditioner
            precond = False
        else:
            precond = True

        # If we are running m CG iterations, we obviously can't get more than m Lanczos coefficients
        if max_tridiag_iter > max_iter:
            raise RuntimeError("Getting a tridiagonalization larger than the number of CG iterations run is not possible!")

        # Check matmul_closure object
        if torch.is_tensor(matmul_closure):
            matmul_closure = matmul_closure.matmul
        elif not callable(matmul_closure):
            raise RuntimeError("matmul_closure must be a tensor, or a callable object!")

        # Get some constants
        num_rows = rhs.size(-2)
        n_iter = min(max_iter, num_rows) if settings.terminate_cg_by_size.on() else max_iter
        n_tridiag_iter = min(max_tridiag_iter, num_rows)
        eps = torch.tensor(eps, dtype=rhs.dtype, device=rhs.device)

        # Get the norm of the rhs - used for convergence checks
        # Here we're going to make almost-zero norms actually be 1 (so we don't get divide-by-zero issues)
        # But we'll store which norms were actually close to zero
        rhs_norm = rhs.norm(2, dim=-2, keepdim=True)
        rhs_is_zero = rhs_norm.lt(eps)
        rhs_norm = rhs_norm.masked_fill_(rhs_is_zero, 1)

        # Let's normalize. We'll un-normalize afterwards
        rhs = rhs.div(rhs_norm)

        # residual: residual_{0} = b_vec - lhs x_{0}
        residual = rhs - matmul_closure(initial_guess)
        batch_shape = residual.shape[:-2]

        # result <- x_{0}
        result = initial_guess.expand_as(residual).contiguous()

        # Check for NaNs
        if not torch.equal(residual, residual):
            raise RuntimeError("NaNs encountered when trying to perform matrix-vector multiplication")

        # Sometime we're lucky and the preconditioner solves the system right away
        # Check for convergence
        residual_norm = residual.norm(2, dim=-2, keepdim=True)
        has_converged = torch.lt(residual_norm, stop_updating_after)

        if has_converged.all() and not n_tridiag:
            n_iter = 0  # Skip the iteration!

        # Otherwise, let's define precond_residual and curr_conjugate_vec
        else:
            # precon_residual{0} = M^-1 residual_{0}
            precond_residual = preconditioner(residual)
            curr_conjugate_vec = precond_residual
            residual_inner_prod = precond_residual.mul(residual).sum(-2, keepdim=True)

            # Define storage matrices
            mul_storage = torch.empty_like(residual)
            alpha = torch.empty(*batch_shape, 1, rhs.size(-1), dtype=residual.dtype, device=residual.device)
            beta = torch.empty_like(alpha)
            is_zero = torch.empty(*batch_shape, 1, rhs.size(-1), dtype=bool_compat, device=residual.device)

        # Define tridiagonal matrices, if applicable
        if n_tridiag:
            t_mat = torch.zeros(
                n_tridiag_iter, n_tridiag_iter, *batch_shape, n_tridiag, dtype=alpha.dtype, device=alpha.device
            )
            alpha_tridiag_is_zero = torch.empty(*batch_shape, n_tridiag, dtype=bool_compat, device=t_mat.device)
            alpha_reciprocal = torch.empty(*batch_shape, n_tridiag, dtype=t_mat.dtype, device=t_mat.device)
            prev_alpha_reciprocal = torch.empty_like(alpha_reciprocal)
            prev_beta = torch.empty_like(alpha_reciprocal)

        update_tridiag = True
        last_tridiag_iter = 0

        # It's conceivable we reach the tolerance on the last iteration, so can't just check iteration number.
        tolerance_reached = False

        # Start the iteration
        for k in range(n_iter):
            # Get next alpha
            # alpha_{k} = (residual_{k-1}^T precon_residual{k-1}) / (p_vec_{k-1}^T mat p_vec_{k-1})
            mvms = matmul_closure(curr_conjugate_vec)
            if precond:
                torch.mul(curr_conjugate_vec, mvms, out=mul_storage)
                torch.sum(mul_storage, -2, keepdim=True, out=alpha)

                # Do a safe division here
                torch.lt(alpha, eps, out=is_zero)
                alpha.masked_fill_(is_zero, 1)
                torch.div(residual_inner_prod, alpha, out=alpha)
                alpha.masked_fill_(is_zero, 0)

                # We'll cancel out any updates by setting alpha=0 for any vector that has already converged
                alpha.masked_fill_(has_converged, 0)

                # Update residual
                # residual_{k} = residual_{k-1} - alpha_{k} mat p_vec_{k-1}
                residual = torch.addcmul(residual, alpha, mvms, value=-1, out=residual)

                # Update precond_residual
                # precon_residual{k} = M^-1 residual_{k}
                precond_residual = preconditioner(residual)

                _jit_linear_cg_updates(
                    result, alpha, residual_inner_prod, eps, beta, residual, precond_residual, mul_storage, is_zero,
                    curr_conjugate_vec,
                )
            else:
                _jit_linear_cg_updates_no_precond(
                    mvms, result, has_converged, alpha, residual_inner_prod, eps, beta, residual, precond_residual,
                    mul_storage, is_zero, curr_conjugate_vec,
                )

            torch.norm(residual, 2, dim=-2, keepdim=True, out=residual_norm)
            residual_norm.masked_fill_(rhs_is_zero, 0)
            torch.lt(residual_norm, stop_updating_after, out=has_converged)

            if (
                k >= min(10, max_iter - 1)
                and bool(residual_norm.mean() < tolerance)
                and not (n_tridiag and k < min(n_tridiag_iter, max_iter - 1))
            ):
                tolerance_reached = True
                break

            # Update tridiagonal matrices, if applicable
            if n_tridiag and k < n_tridiag_iter and update_tridiag:
                alpha_tridiag = alpha.squeeze(-2).narrow(-1, 0, n_tridiag)
                beta_tridiag = beta.squeeze(-2).narrow(-1, 0, n_tridiag)
                torch.eq(alpha_tridiag, 0, out=alpha_tridiag_is_zero)
                alpha_tridiag.masked_fill_(alpha_tridiag_is_zero, 1)
                torch.reciprocal(alpha_tridiag, out=alpha_reciprocal)
                alpha_tridiag.masked_fill_(alpha_tridiag_is_zero, 0)

                if k == 0:
                    t_mat[k, k].copy_(alpha_reciprocal)
                else:
                    torch.addcmul(alpha_reciprocal, prev_beta, prev_alpha_reciprocal, out=t_mat[k, k])
                    torch.mul(prev_beta.sqrt_(), prev_alpha_reciprocal, out=t_mat[k, k - 1])
                    t_mat[k - 1, k].copy_(t_mat[k, k - 1])

                    if t_mat[k - 1, k].max() < 1e-6:
                        update_tridiag = False

                last_tridiag_iter = k

                prev_alpha_reciprocal.copy_(alpha_reciprocal)
                prev_beta.copy_(beta_tridiag)

        # Un-normalize
        result = result.mul(rhs_norm)

        if not tolerance_reached and n_iter > 0:
            warnings.warn(
                "CG terminated in {} iterations with average residual norm {}"
                " which is larger than the tolerance of {} specified by"
                " linear_operator.settings.cg_tolerance.".format(k + 1, residual_norm.mean(), tolerance),
                NumericalWarning,
            )

        if is_vector:
            result = result.squeeze(-1)

        if n_tridiag:
            t_mat = t_mat[: last_tridiag_iter + 1, : last_tridiag_iter + 1]
            return result, t_mat.permute(-1, *range(2, 2 + len(batch_shape)), 0, 1).contiguous()
        else:
            return result

    # ---- linear_operator/utils/lanczos.py -------------------------------------------------------
    def lanczos_tridiag(matmul_closure, max_iter, dtype, device, matrix_shape, batch_shape=torch.Size(),
                        init_vecs=None, num_init_vecs=1, tol=1e-5):
        # Determine batch mode
        multiple_init_vecs = False

        if not callable(matmul_closure):
            raise RuntimeError(
                "matmul_closure should be a function callable object that multiples a (Lazy)Tensor "
                "by a vector. Got a {} instead.".format(matmul_closure.__class__.__name__)
            )

        # Get initial probe ectors - and define if not available
        if init_vecs is None:
            init_vecs = torch.randn(matrix_shape[-1], num_init_vecs, dtype=dtype, device=device)
            init_vecs = init_vecs.expand(*batch_shape, matrix_shape[-1], num_init_vecs)

        else:
            if settings.debug.on():
                if dtype != init_vecs.dtype:
                    raise RuntimeError(
                        "Supplied dtype {} and init_vecs.dtype {} do not agree!".format(dtype, init_vecs.dtype)
                    )
                if device != init_vecs.device:
                    raise RuntimeError(
                        "Supplied device {} and init_vecs.device {} do not agree!".format(device, init_vecs.device)
                    )
                if batch_shape != init_vecs.shape[:-2]:
                    raise RuntimeError(
                        "batch_shape {} and init_vecs.shape {} do not agree!".format(batch_shape, init_vecs.shape)
                    )
                if matrix_shape[-1] != init_vecs.size(-2):
                    raise RuntimeError(
                        "matrix_shape {} and init_vecs.shape {} do not agree!".format(matrix_shape, init_vecs.shape)
                    )

            num_init_vecs = init_vecs.size(-1)

        # Define some constants
        num_iter = min(max_iter, matrix_shape[-1])
        dim_dimension = -2

        # Create storage for q_mat, alpha,and beta
        # q_mat - batch version of Q - orthogonal matrix of decomp
        # alpha - batch version main diagonal of T
        # beta - batch version of off diagonal of T
        q_mat = torch.zeros(num_iter, *batch_shape, matrix_shape[-1], num_init_vecs, dtype=dtype, device=device)
        t_mat = torch.zeros(num_iter, num_iter, *batch_shape, num_init_vecs, dtype=dtype, device=device)

        # Begin algorithm
        # Initial Q vector: q_0_vec
        q_0_vec = init_vecs / torch.norm(init_vecs, 2, dim=dim_dimension).unsqueeze(dim_dimension)
        q_mat[0].copy_(q_0_vec)

        # Initial alpha value: alpha_0
        r_vec = matmul_closure(q_0_vec)
        alpha_0 = q_0_vec.mul(r_vec).sum(dim_dimension)

        # Initial beta value: beta_0
        r_vec.sub_(alpha_0.unsqueeze(dim_dimension).mul(q_0_vec))
        beta_0 = torch.norm(r_vec, 2, dim=dim_dimension)

        # Copy over alpha_0 and beta_0 to t_mat
        t_mat[0, 0].copy_(alpha_0)
        t_mat[0, 1].copy_(beta_0)
        t_mat[1, 0].copy_(beta_0)

        # Compute the first new vector
        q_mat[1].copy_(r_vec.div_(beta_0.unsqueeze(dim_dimension)))

        # Now we start the iteration
        for k in range(1, num_iter):
            # Get previous values
            q_prev_vec = q_mat[k - 1]
            q_curr_vec = q_mat[k]
            beta_prev = t_mat[k, k - 1].unsqueeze(dim_dimension)

            # Compute next alpha value
            r_vec = matmul_closure(q_curr_vec) - q_prev_vec.mul(beta_prev)
            alpha_curr = q_curr_vec.mul(r_vec).sum(dim_dimension, keepdim=True)
            # Copy over to t_mat
            t_mat[k, k].copy_(alpha_curr.squeeze(dim_dimension))

            # Copy over alpha_curr, beta_curr to t_mat
            if (k + 1) < num_iter:
                # Compute next residual value
                r_vec.sub_(alpha_curr.mul(q_curr_vec))
                # Full reorthogonalization: r <- r - Q (Q^T r)
                correction = r_vec.unsqueeze(0).mul(q_mat[: k + 1]).sum(dim_dimension, keepdim=True)
                correction = q_mat[: k + 1].mul(correction).sum(0)
                r_vec.sub_(correction)
                r_vec_norm = torch.norm(r_vec, 2, dim=dim_dimension, keepdim=True)
                r_vec.div_(r_vec_norm)

                # Get next beta value
                beta_curr = r_vec_norm.squeeze_(dim_dimension)
                # Update t_mat with new beta value
                t_mat[k, k + 1].copy_(beta_curr)
                t_mat[k + 1, k].copy_(beta_curr)

                # Run more reorthoganilzation if necessary
                inner_products = q_mat[: k + 1].mul(r_vec.unsqueeze(0)).sum(dim_dimension)
                could_reorthogonalize = False
                for _ in range(10):
                    if not torch.sum(inner_products > tol):
                        could_reorthogonalize = True
                        break
                    correction = r_vec.unsqueeze(0).mul(q_mat[: k + 1]).sum(dim_dimension, keepdim=True)
                    correction = q_mat[: k + 1].mul(correction).sum(0)
                    r_vec.sub_(correction)
                    r_vec_norm = torch.norm(r_vec, 2, dim=dim_dimension, keepdim=True)
                    r_vec.div_(r_vec_norm)
                    inner_products = q_mat[: k + 1].mul(r_vec.unsqueeze(0)).sum(dim_dimension)

                # Update q_mat with new q value
                q_mat[k + 1].copy_(r_vec)

                if torch.sum(beta_curr.abs() > 1e-6) == 0 or not could_reorthogonalize:
                    break

        # Now let's transpose q_mat, t_mat intot the correct shape
        num_iter = k + 1

        # num_init_vecs x batch_shape x matrix_shape[-1] x num_iter
        q_mat = q_mat[:num_iter].permute(-1, *range(1, 1 + len(batch_shape)), -2, 0).contiguous()
        # num_init_vecs x batch_shape x num_iter x num_iter
        t_mat = t_mat[:num_iter, :num_iter].permute(-1, *range(2, 2 + len(batch_shape)), 0, 1).contiguous()

        # If we weren't in batch mode, remove batch dimension
        if not multiple_init_vecs:
            q_mat.squeeze_(0)
            t_mat.squeeze_(0)

        # We're done!
        return q_mat, t_mat

    def lanczos_tridiag_to_diag(t_mat):
        orig_device = t_mat.device
        if t_mat.size(-1) < 32:
            retr = torch.linalg.eigh(t_mat.cpu())
        else:
            retr = torch.linalg.eigh(t_mat)

        evals, evecs = retr
        mask = evals.ge(0)
        evecs = evecs * mask.type_as(evecs).unsqueeze(-2)
        evals = evals.masked_fill_(~mask, 1)

        return evals.to(orig_device), evecs.to(orig_device)

    # ---- linear_operator/utils/permutation.py ---------------------------------------------------
    def delazify(matrix):
        return matrix

    def apply_permutation(matrix, left_permutation=None, right_permutation=None):
        if left_permutation is None and right_permutation is None:
            return delazify(matrix)

        # Create a set of index vectors for each batch dimension
        # This will ensure that the indexing operations with left_permutation and right_permutation
        # only select the elements from the appropriate batch
        batch_shape = matrix.shape[:-2]
        batch_idx = []
        for i, batch_size in enumerate(batch_shape):
            expanded_shape = [1 for _ in batch_shape] + [1, 1]
            expanded_shape[i] = batch_size
            sub_batch_idx = torch.arange(batch_size, device=matrix.device).view(*expanded_shape)
            batch_idx.append(sub_batch_idx)

        # If we don't have a left_permutation vector, we'll just use a slice
        if left_permutation is None:
            left_permutation = torch.arange(matrix.size(-2), device=matrix.device)
        if right_permutation is None:
            right_permutation = torch.arange(matrix.size(-1), device=matrix.device)

        # Apply permutations
        return delazify(matrix.__getitem__((*batch_idx, left_permutation.unsqueeze(-1), right_permutation.unsqueeze(-2))))

    def inverse_permutation(permutation):
        arange = torch.arange(permutation.size(-1), device=permutation.device)
        res = torch.zeros_like(permutation).scatter_(-1, permutation, arange.expand_as(permutation))
        return res

    # ---- linear_operator/functions/_pivoted_cholesky.py (a dense matrix: _approx_diagonal is its
    # diagonal, the representation tree the identity) ----------------------------------------------
    class PivotedCholesky(torch.autograd.Function):
        @staticmethod
        def forward(ctx, representation_tree, max_iter, error_tol, *matrix_args):
            ctx.representation_tree = representation_tree
            matrix = ctx.representation_tree(*matrix_args)
            batch_shape = matrix.shape[:-2]
            matrix_shape = matrix.shape[-2:]

            if error_tol is None:
                error_tol = settings.preconditioner_tolerance.value()

            # Need to get diagonals. This is easy if it's a LinearOperator, since
            # LinearOperator.diagonal() operates in batch mode.
            matrix_diag = matrix.diagonal(dim1=-2, dim2=-1)
            matrix_diag = matrix_diag.clone()

            # Make sure max_iter isn't bigger than the matrix
            max_iter = min(max_iter, matrix_shape[-1])

            # What we're returning
            L = torch.zeros(*batch_shape, max_iter, matrix_shape[-1], dtype=matrix.dtype, device=matrix.device)
            orig_error = torch.max(matrix_diag, dim=-1)[0]
            errors = torch.norm(matrix_diag, 1, dim=-1) / orig_error

            # The permutation
            permutation = torch.arange(0, matrix_shape[-1], dtype=torch.long, device=matrix_diag.device)
            permutation = permutation.repeat(*batch_shape, 1)

            m = 0
            while (m == 0) or (m < max_iter and torch.max(errors) > error_tol):
                # Get the maximum diagonal value and index
                # This will serve as the next diagonal entry of the Cholesky,
                # as well as the next entry in the permutation matrix
                permuted_diags = torch.gather(matrix_diag, -1, permutation[..., m:])
                max_diag_values, max_diag_indices = torch.max(permuted_diags, -1)
                max_diag_indices = max_diag_indices + m

                # Swap pi_m and pi_i in each row, where pi_i is the element of the permutation
                # corresponding to the max diagonal element
                old_pi_m = permutation[..., m].clone()
                permutation[..., m].copy_(permutation.gather(-1, max_diag_indices.unsqueeze(-1)).squeeze_(-1))
                permutation.scatter_(-1, max_diag_indices.unsqueeze(-1), old_pi_m.unsqueeze(-1))
                pi_m = permutation[..., m].contiguous()

                # Populate L[..., m, m] with the sqrt of the max diagonal element
                L_m = L[..., m, :]  # Will be all zeros -- should we use torch.zeros?
                L_m.scatter_(-1, pi_m.unsqueeze(-1), max_diag_values.sqrt().unsqueeze_(-1))

                # Populater L[... m:, m] with L[..., m:, m] * L[..., m, m].sqrt()
                if m + 1 < matrix_shape[-1]:
                    # Get next row of the permuted matrix
                    row = apply_permutation(matrix, pi_m.unsqueeze(-1), right_permutation=None).squeeze(-2)
                    pi_i = permutation[..., m + 1 :].contiguous()

                    L_m_new = row.gather(-1, pi_i)
                    if m > 0:
                        L_prev = L[..., :m, :].gather(-1, pi_i.unsqueeze(-2).repeat(*(1 for _ in batch_shape), m, 1))
                        update = L[..., :m, :].gather(
                            -1, pi_m.view(*pi_m.shape, 1, 1).repeat(*(1 for _ in batch_shape), m, 1)
                        )
                        L_m_new -= torch.sum(update * L_prev, dim=-2)

                    L_m_new /= L_m.gather(-1, pi_m.unsqueeze(-1))
                    L_m.scatter_(-1, pi_i, L_m_new)

                    matrix_diag_current = matrix_diag.gather(-1, pi_i)
                    matrix_diag.scatter_(-1, pi_i, matrix_diag_current - L_m_new**2)
                    L[..., m, :] = L_m

                    # Keep track of errors - for potential early stopping
                    errors = torch.norm(matrix_diag.gather(-1, pi_i), 1, dim=-1) / orig_error

                m = m + 1

            # Save items for backward pass, and return output
            ctx.save_for_backward(permutation, permutation[..., :m], *matrix_args)
            return L[..., :m, :].mT.contiguous(), permutation

        def backward(ctx, grad_output, _):
            full_permutation, short_permutation, *_matrix_args = ctx.saved_tensors
            _inverse_permutation = inverse_permutation(full_permutation)
            m = short_permutation.size(-1)  # The rank of the pivoted Cholesky factor

            with torch.enable_grad():
                # Create a new set of matrix args that we can backpropagate through
                matrix_args = []
                for matrix_arg in _matrix_args:
                    if matrix_arg.dtype in (torch.float, torch.double, torch.half):
                        matrix_arg = matrix_arg.detach().requires_grad_(True)
                    matrix_args.append(matrix_arg)

                # Create new linear operator using new matrix args
                matrix = ctx.representation_tree(*matrix_args)

                # Get Krows - rows of the matrix that were selected for pivoted Cholesky
                Krows = apply_permutation(matrix, full_permutation, short_permutation)

                # Get L - Cholesky factor of K[..., :m, :m]
                L = psd_safe_cholesky(Krows[..., :m, :])

                # Compute (Krows * L^{-T}) - the (pivoted) result of Pivoted Cholesky
                res_pivoted = torch.cat(
                    [L, torch.linalg.solve_triangular(L, Krows[..., m:, :].mT, upper=False).mT], dim=-2,
                )
                res = apply_permutation(res_pivoted, left_permutation=_inverse_permutation, right_permutation=None)

                # Now compute the backward pass of res
                res.backward(gradient=grad_output)

            # Define gradient placeholders
            return tuple([None, None, None] + [matrix_arg.grad for matrix_arg in matrix_args])

    def pivoted_cholesky(mat, rank, error_tol=None, return_pivots=False):
        res, pivots = PivotedCholesky.apply(lambda *args: args[0], rank, error_tol, mat)
        return (res, pivots) if return_pivots else res

    # ---- gpytorch/likelihoods/noise_models.py + gaussian_likelihood.py (dense diagonals) --------
    class HomoskedasticNoise(Module):
        def __init__(self, noise_constraint=None, batch_shape=torch.Size(), num_tasks=1):
            super().__init__()
            if noise_constraint is None:
                noise_constraint = GreaterThan(1e-4)

            self.register_parameter(name="raw_noise", parameter=nn.Parameter(torch.zeros(*batch_shape, num_tasks)))
            self.register_constraint("raw_noise", noise_constraint)

        @property
        def noise(self):
            return self.raw_noise_constraint.transform(self.raw_noise)

        @noise.setter
        def noise(self, value):
            self._set_noise(value)

        def _set_noise(self, value):
            if not torch.is_tensor(value):
                value = torch.as_tensor(value).to(self.raw_noise)
            self.initialize(raw_noise=self.raw_noise_constraint.inverse_transform(value))

        def forward(self, *params, shape=None, **kwargs):
            if shape is None:
                p = params[0] if torch.is_tensor(params[0]) else params[0][0]
                shape = p.shape if len(p.shape) == 1 else p.shape[:-1]
            noise = self.noise
            *batch_shape, n = shape
            noise_batch_shape = noise.shape[:-1] if noise.dim() > 1 else torch.Size()
            num_tasks = noise.shape[-1]
            batch_shape = torch.broadcast_shapes(noise_batch_shape, batch_shape)
            noise = noise.unsqueeze(-2)
            noise_diag = noise.expand(*batch_shape, 1, num_tasks).contiguous()
            if num_tasks == 1:
                noise_diag = noise_diag.view(*batch_shape, 1)
            # ConstantDiagLinearOperator(noise_diag, diag_shape=n), made dense
            return torch.diag_embed(noise_diag.expand(*batch_shape, n))

    class MultivariateNormal:
        def __init__(self, mean, covariance_matrix):
            self.loc, self.covariance_matrix = mean, covariance_matrix

        @property
        def mean(self):
            return self.loc

        def log_prob(self, value):
            # MultivariateNormal.log_prob's Cholesky path: CholLinearOperator.inv_quad_logdet
            mean, covar = self.loc, self.covariance_matrix
            diff = value - mean
            chol = psd_safe_cholesky(covar)
            inv_quad_rhs = diff.unsqueeze(-1)
            R = torch.linalg.solve_triangular(chol, inv_quad_rhs, upper=False)
            inv_quad = (R**2).sum(dim=-2)
            inv_quad = inv_quad.sum(-1)
            logdet = chol.diagonal(dim1=-2, dim2=-1).pow(2).log().sum(-1)
            res = -0.5 * sum([inv_quad, logdet, diff.size(-1) * math.log(2 * math.pi)])
            return res

    class GaussianLikelihood(Module):
        def __init__(self, noise_constraint=None, batch_shape=torch.Size()):
            super().__init__()
            self.noise_covar = HomoskedasticNoise(noise_constraint=noise_constraint, batch_shape=batch_shape)

        @property
        def noise(self):
            return self.noise_covar.noise

        @noise.setter
        def noise(self, value):
            self.noise_covar.initialize(noise=value)

        def marginal(self, function_dist, *params, **kwargs):
            mean, covar = function_dist.mean, function_dist.covariance_matrix
            noise_covar = self.noise_covar(*params, shape=mean.shape, **kwargs)
            full_covar = covar + noise_covar
            return function_dist.__class__(mean, full_covar)

        def __call__(self, input, *args, **kwargs):
            return self.marginal(input, *args, **kwargs)

    class ConstantMean(Module):
        def __init__(self, batch_shape=torch.Size()):
            super().__init__()
            self.batch_shape = batch_shape
            self.register_parameter(name="constant", parameter=torch.nn.Parameter(torch.zeros(batch_shape)))

        def forward(self, input):
            constant = self.constant.unsqueeze(-1)  # *batch_shape x 1
            return constant.expand(torch.broadcast_shapes(constant.shape, input.shape[:-1]))

    class ExactMarginalLogLikelihood(Module):
        def __init__(self, likelihood, model):
            if not isinstance(likelihood, GaussianLikelihood):
                raise RuntimeError("Likelihood must be Gaussian for exact inference")
            super().__init__()
            self.likelihood = likelihood
            self.model = model

        def forward(self, function_dist, target, *params):
            if not isinstance(function_dist, MultivariateNormal):
                raise RuntimeError("ExactMarginalLogLikelihood can only operate on Gaussian random variables")

            # Get the log prob of the marginal distribution
            output = self.likelihood(function_dist, *params)
            res = output.log_prob(target)

            # Scale by the amount of data we have
            num_data = target.size(-1)
            return res.div_(num_data)

    # the "Simple GP Regression" tutorial's model
    class ExactGPModel(Module):
        def __init__(self, train_x, train_y, likelihood):
            super(ExactGPModel, self).__init__()
            self.train_inputs, self.train_targets, self.likelihood = (train_x,), train_y, likelihood
            self.mean_module = ConstantMean()
            self.covar_module = ScaleKernel(RBFKernel())

        def __call__(self, *args, **kwargs):
            # ExactGP.__call__ (training mode): 1-d inputs become n x 1
            inputs = [i.unsqueeze(-1) if i.ndimension() == 1 else i for i in args]
            if self.training and not all(torch.equal(a, b) for a, b in zip(inputs, [self.train_inputs[0].unsqueeze(-1)])):
                raise RuntimeError("You must train on the training inputs!")
            return super().__call__(*inputs, **kwargs)

        def forward(self, x):
            mean_x = self.mean_module(x)
            covar_x = self.covar_module(x)
            return MultivariateNormal(mean_x, covar_x)

    lib = SimpleNamespace(**{k: v for k, v in locals().items() if not k.startswith("__")})
    _LIBS[torch.__name__] = lib
    return lib


def _np(t):
    return t.detach().cpu().numpy()


def _data(seed=0):
    g = np.random.default_rng(seed)
    A = g.standard_normal((2, 6, 6))
    A = A @ A.transpose(0, 2, 1) + 0.5 * np.eye(6)  # two SPD matrices
    return SimpleNamespace(
        x1=g.uniform(-1, 1, (5, 2)), x2=g.uniform(-1, 1, (4, 2)), x3=g.uniform(-1, 1, (5, 2)),
        W=g.standard_normal((5, 4)), A=A, B=g.standard_normal((2, 6, 3)), S=g.standard_normal((2, 5, 5)),
        train_x=np.linspace(0, 1, 10), train_y=np.sin(np.linspace(0, 1, 10) * (2 * math.pi)) + 0.2 * g.standard_normal(10),
    )


# ------------------------------------------------------------------------------ kernels
def kernels_page(torch, D):
    G = gpytorch_lib(torch)
    t = lambda a: torch.tensor(a, dtype=torch.float64)  # noqa: E731
    x1, x2, x3, W = t(D.x1), t(D.x2), t(D.x3), t(D.W)
    out = {}
    rbf = G.RBFKernel().double()
    rbf.lengthscale = 0.7
    out["rbf_ls"] = _np(rbf.lengthscale)
    out["rbf"] = _np(rbf(x1, x2))  # RBFCovariance fast path
    out["rbf_same"] = _np(rbf(x1))  # x1_eq_x2: the diagonal is filled with 0 before exp
    out["rbf_diag_same"] = _np(rbf(x1, diag=True))
    out["rbf_diag"] = _np(rbf(x1, x3, diag=True))
    out["rbf_batch"] = _np(rbf(x1, x2, last_dim_is_batch=True))
    # lengthscale gradient: custom Function (grad of shape n x m summed to 1 x 1) vs autograd path
    (rbf(x1, x2) * W).sum().backward()
    out["rbf_grad_fn"] = _np(rbf.raw_lengthscale.grad).copy()
    rbf.raw_lengthscale.grad = None
    (rbf(x1.clone().requires_grad_(True), x2) * W).sum().backward()
    out["rbf_grad_ad"] = _np(rbf.raw_lengthscale.grad).copy()
    for nu in (0.5, 1.5, 2.5):
        mat = G.MaternKernel(nu=nu).double()
        mat.initialize(raw_lengthscale=torch.tensor(0.3, dtype=torch.float64))
        out[f"matern{nu}_ls"] = _np(mat.lengthscale)
        out[f"matern{nu}"] = _np(mat(x1, x2))
        out[f"matern{nu}_diag"] = _np(mat(x1, x3, diag=True))
        (mat(x1, x2) * W).sum().backward()
        out[f"matern{nu}_grad_fn"] = _np(mat.raw_lengthscale.grad).copy()
        mat.raw_lengthscale.grad = None
        K = mat(x1.clone().requires_grad_(True), x2)
        (K * W).sum().backward()
        out[f"matern{nu}_ad"] = _np(K)
        out[f"matern{nu}_grad_ad"] = _np(mat.raw_lengthscale.grad).copy()
    per = G.PeriodicKernel().double()
    per.period_length = 1.3
    per.lengthscale = 0.8
    out["per"] = _np(per(x1, x2))
    out["per_diag"] = _np(per(x1, x3, diag=True))
    out["per_diag_same"] = _np(per(x1, diag=True))
    sk = G.ScaleKernel(G.RBFKernel()).double()
    sk.outputscale = 1.7
    sk.base_kernel.lengthscale = 0.7
    out["scale_os"] = _np(sk.outputscale)
    out["scale"] = _np(sk(x1, x2))
    out["scale_diag"] = _np(sk(x1, x3, diag=True))
    out["scale_batch"] = _np(sk(x1, x2, last_dim_is_batch=True))
    sk_m = G.ScaleKernel(G.MaternKernel(nu=1.5, active_dims=(1,))).double()
    out["scale_active"] = _np(sk_m(x1, x2))
    try:
        G.MaternKernel(nu=1.0)
    except RuntimeError as e:
        out["nu_error"] = str(e)
    try:
        G.RBFKernel(ard_num_dims=3)(x1, x2)
    except RuntimeError as e:
        out["ard_error"] = str(e)
    return out


def _sqd(a, b):
    return ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)


def _matern(r, nu):
    if nu == 0.5:
        return np.exp(-r)
    if nu == 1.5:
        return (1 + math.sqrt(3) * r) * np.exp(-math.sqrt(3) * r)
    return (1 + math.sqrt(5) * r + 5.0 / 3.0 * r**2) * np.exp(-math.sqrt(5) * r)


def test_gpytorch_kernels():
    D = _data()
    r = kernels_page(lucid, D)
    sp = lambda v: np.log1p(np.exp(v))  # noqa: E731
    # a float set through a setter goes through torch.as_tensor(value) (float32) first, as in PyTorch
    l7, p13, l8, o17 = (float(np.float32(v)) for v in (0.7, 1.3, 0.8, 1.7))
    np.testing.assert_allclose(r["rbf_ls"], [[l7]], rtol=1e-12)
    rbf = lambda a, b: np.exp(-_sqd(a, b) / l7**2 / 2)  # noqa: E731
    np.testing.assert_allclose(r["rbf"], rbf(D.x1, D.x2), rtol=1e-10)
    np.testing.assert_allclose(r["rbf_same"], rbf(D.x1, D.x1), rtol=1e-10)
    assert np.all(np.diag(r["rbf_same"]) == 1.0)  # the filled zero diagonal
    np.testing.assert_allclose(r["rbf_diag_same"], np.ones(5))
    np.testing.assert_allclose(r["rbf_diag"], np.exp(-((D.x1 - D.x3) ** 2).sum(-1) / l7**2 / 2), rtol=1e-10)
    want = np.stack([np.exp(-_sqd(D.x1[:, i:i + 1], D.x2[:, i:i + 1]) / l7**2 / 2) for i in range(2)])
    np.testing.assert_allclose(r["rbf_batch"], want, rtol=1e-10)
    # d/draw of sum(W * exp(-d2 / 2 l^2)), l = softplus(raw): sum(W K d2 / l^3) * sigmoid(raw)
    raw = np.log(np.expm1(l7))
    g = (D.W * rbf(D.x1, D.x2) * _sqd(D.x1, D.x2) / l7**3).sum() / (1 + np.exp(-raw))
    np.testing.assert_allclose(r["rbf_grad_fn"], [[g]], rtol=1e-10)
    np.testing.assert_allclose(r["rbf_grad_ad"], [[g]], rtol=1e-10)
    for nu in (0.5, 1.5, 2.5):
        ls = sp(0.3)
        np.testing.assert_allclose(r[f"matern{nu}_ls"], [[ls]], rtol=1e-12)
        f = lambda lv: D.W * _matern(np.sqrt(_sqd(D.x1, D.x2)) / lv, nu)  # noqa: E731
        K = _matern(np.sqrt(_sqd(D.x1, D.x2)) / ls, nu)
        np.testing.assert_allclose(r[f"matern{nu}"], K, rtol=1e-10)
        np.testing.assert_allclose(r[f"matern{nu}_ad"], K, rtol=1e-10)
        np.testing.assert_allclose(
            r[f"matern{nu}_diag"], _matern(np.sqrt(((D.x1 - D.x3) ** 2).sum(-1)) / ls, nu), rtol=1e-10)
        h = 1e-6  # central difference in the raw lengthscale
        fd = (f(sp(0.3 + h)).sum() - f(sp(0.3 - h)).sum()) / (2 * h)
        np.testing.assert_allclose(r[f"matern{nu}_grad_fn"], [[fd]], rtol=1e-6)
        np.testing.assert_allclose(r[f"matern{nu}_grad_ad"], [[fd]], rtol=1e-6)
    per = lambda a, b: np.exp(-2 * np.sin(math.pi * np.sqrt(a) / p13) ** 2 / l8)  # noqa: E731
    np.testing.assert_allclose(r["per"], per(_sqd(D.x1, D.x2), None), rtol=1e-10)
    np.testing.assert_allclose(r["per_diag"], per(((D.x1 - D.x3) ** 2).sum(-1), None), rtol=1e-10)
    np.testing.assert_allclose(r["per_diag_same"], np.ones(5))
    np.testing.assert_allclose(r["scale_os"], o17, rtol=1e-12)
    np.testing.assert_allclose(r["scale"], o17 * rbf(D.x1, D.x2), rtol=1e-10)
    np.testing.assert_allclose(r["scale_diag"], o17 * np.exp(-((D.x1 - D.x3) ** 2).sum(-1) / l7**2 / 2), rtol=1e-10)
    np.testing.assert_allclose(r["scale_batch"], o17 * want, rtol=1e-10)
    ls0 = sp(0.0)  # the defaults: raw zeros through softplus
    Km = _matern(np.abs(D.x1[:, 1:] - D.x2[:, 1].reshape(1, -1)) / ls0, 1.5)
    np.testing.assert_allclose(r["scale_active"], sp(0.0) * Km, rtol=1e-10)
    assert r["nu_error"] == "nu expected to be 0.5, 1.5, or 2.5"
    assert r["ard_error"] == "Expected the input to have 3 dimensionality (based on the ard_num_dims argument). Got 2."


def test_gpytorch_kernels_torch_parity():
    torch = pytest.importorskip("torch")
    D = _data()
    r, t = kernels_page(lucid, D), kernels_page(torch, D)
    assert r.keys() == t.keys()
    for k in r:
        if isinstance(r[k], str):
            assert r[k] == t[k], k
        else:
            assert r[k].shape == t[k].shape, k
            np.testing.assert_allclose(r[k], t[k], rtol=1e-10, atol=1e-12, err_msg=k)


# ------------------------------------------------------------------------------ constraints
def constraints_page(torch):
    G = gpytorch_lib(torch)
    out = {}
    raw = torch.tensor([-3.0, -0.5, 0.0, 0.7, 4.0], dtype=torch.float64)
    cons = {"positive": G.Positive(), "greater": G.GreaterThan(1e-4), "less": G.LessThan(2.0),
            "interval": G.Interval(-1.0, 3.0), "interval_exp": G.GreaterThan(0.5, transform=torch.exp, inv_transform=None)}
    for name, c in cons.items():
        val = c.transform(raw)
        out[name] = _np(val)
        out[name + "_inv"] = _np(c.inverse_transform(val))
        out[name + "_repr"] = repr(c)
        out[name + "_check"] = (c.check(val), c.check_raw(raw), c.check(val - 10.0))
    out["registry"] = (G.TRANSFORM_REGISTRY[torch.exp] is torch.log,
                       G._get_inv_param_transform(torch.nn.functional.sigmoid) is G.inv_sigmoid)
    a = G.Interval(torch.tensor([0.0, 1.0]), torch.tensor([2.0, 3.0]))
    both = a.intersect(a)  # bound methods of two instances never compare equal: only self-intersection passes
    out["intersect"] = (both.lower_bound.tolist(), both.upper_bound.tolist(), repr(both).splitlines()[0])
    try:
        a.intersect(G.Interval(1.0, 5.0))
    except RuntimeError as e:
        out["intersect_error"] = str(e)
    init = G.Positive(initial_value=2.0)
    out["initial"] = init.initial_value.item()
    iv = G.Interval(torch.tensor([0.0, 1.0]), torch.tensor([1.0, 4.0])).double()
    out["buffers"] = (str(iv.lower_bound.dtype).split(".")[-1], _np(iv.transform(torch.zeros(2, dtype=torch.float64))))
    try:
        G.Interval(1.0, 1.0)
    except RuntimeError as e:
        out["empty"] = str(e)
    try:
        G.Interval(0.0, math.inf).transform(raw)
    except RuntimeError as e:
        out["inf"] = str(e)
    noise = G.HomoskedasticNoise()
    try:
        noise.initialize(raw_noise=torch.tensor([float("nan")]))  # softplus never leaves the bounds: nan does
    except RuntimeError as e:
        out["oob"] = str(e).split(". ")[0]
    noise.noise = 0.25
    out["noise"] = noise.noise.item()
    try:
        noise.initialize(nosuch=1)
    except AttributeError as e:
        out["unknown"] = str(e)
    return out


def test_gpytorch_constraints():
    r = constraints_page(lucid)
    raw = np.array([-3.0, -0.5, 0.0, 0.7, 4.0])
    sp, sg = np.log1p(np.exp(raw)), 1 / (1 + np.exp(-raw))
    np.testing.assert_allclose(r["positive"], sp, rtol=1e-12)
    np.testing.assert_allclose(r["greater"], sp + np.float32(1e-4), rtol=1e-12)
    np.testing.assert_allclose(r["less"], 2.0 - np.log1p(np.exp(-raw)), rtol=1e-12)
    np.testing.assert_allclose(r["interval"], -1 + 4 * sg, rtol=1e-12)
    np.testing.assert_allclose(r["interval_exp"], np.exp(raw) + 0.5, rtol=1e-12)
    for name in ("positive", "greater", "less", "interval", "interval_exp"):
        np.testing.assert_allclose(r[name + "_inv"], raw, rtol=1e-7, atol=1e-9)
    assert r["positive_repr"] == "Positive()"
    assert r["greater_repr"] == "GreaterThan(1.000E-04)"
    assert r["less_repr"] == "LessThan(2.000E+00)"
    assert r["interval_repr"] == "Interval(-1.000E+00, 3.000E+00)"
    assert r["positive_check"] == (True, True, False)
    assert r["interval_check"] == (True, True, False)
    assert r["registry"] == (True, True)
    assert r["intersect"] == ([0.0, 1.0], [2.0, 3.0], "Interval()")  # two bounds each: nn.Module's repr
    assert r["intersect_error"] == "Cant intersect Interval constraints with conflicting transforms!"
    np.testing.assert_allclose(r["initial"], np.log(np.expm1(2.0)), rtol=1e-6)
    assert r["buffers"][0] == "float64"  # Interval._apply converts its bounds with fn(tensor)
    np.testing.assert_allclose(r["buffers"][1], [0.5, 2.5])
    assert r["empty"] == "Got parameter bounds with empty intervals."
    assert r["inf"].startswith("Cannot make an Interval directly with non-finite bounds.")
    assert r["oob"] == ("Attempting to manually set a parameter value that is out of bounds of its current "
                        "constraints, GreaterThan(1.000E-04)")
    np.testing.assert_allclose(r["noise"], 0.25, rtol=1e-6)
    assert r["unknown"] == "Unknown parameter nosuch for HomoskedasticNoise"


def test_gpytorch_constraints_torch_parity():
    torch = pytest.importorskip("torch")
    r, t = constraints_page(lucid), constraints_page(torch)
    assert r.keys() == t.keys()
    for k in r:
        if isinstance(r[k], np.ndarray):
            np.testing.assert_allclose(r[k], t[k], rtol=1e-12, atol=1e-15, err_msg=k)
        elif k == "buffers":
            assert r[k][0] == t[k][0]
        elif isinstance(r[k], float):  # float32 values: numpy's and PyTorch's libm may differ by 1 ulp
            assert r[k] == pytest.approx(t[k], rel=2e-7), k
        else:
            assert r[k] == t[k], k


def test_module_apply_hands_fn_tensors():
    # PyTorch's Module._apply calls fn on Tensors: overrides (GPyTorch's Interval) rely on it
    class M(lucid.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("b", lucid.tensor([1.0, 2.0]))
            self.w = lucid.nn.Parameter(lucid.ones(2))
            self.extra = lucid.zeros(2)

        def _apply(self, fn):
            self.extra = fn(self.extra)
            return super()._apply(fn)

    m = M().double()
    assert (m.b.dtype, m.w.dtype, m.extra.dtype) == (lucid.float64,) * 3
    w = m.w
    m._apply(lambda t: t * 2)  # a user Tensor function, run under no_grad
    assert m.w is w and m.w.tolist() == [2.0, 2.0] and m.b.tolist() == [2.0, 4.0] and m.extra.tolist() == [0.0, 0.0]
    assert m.w.requires_grad and m.w.grad_fn is None


# ------------------------------------------------------------------------------ psd_safe_cholesky
def cholesky_page(torch):
    G = gpytorch_lib(torch)
    out = {}
    A = torch.tensor([[[4.0, 2.0, 0.0], [2.0, 3.0, 1.0], [0.0, 1.0, 2.0]],
                      [[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 1.0]]], dtype=torch.float64)  # PD, PSD singular
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        L = G.psd_safe_cholesky(A)
    out["L"] = _np(L)
    out["warn"] = [(type(x.message).__name__, str(x.message)) for x in w]
    buf = torch.empty(3, 3, dtype=torch.float64)
    U = G.psd_safe_cholesky(A[0], upper=True, out=buf)
    out["U"] = _np(U)
    out["U_is_out"] = U is buf
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        try:
            G.psd_safe_cholesky(-torch.eye(2, dtype=torch.float64))
        except G.NotPSDError as e:
            out["notpsd"] = str(e)
    out["notpsd_warn"] = [str(x.message) for x in w]
    bad = A[0].clone()
    bad[2, 1] = float("nan")  # (LAPACK reads the lower triangle)
    try:
        G.psd_safe_cholesky(bad)
    except G.NanError as e:
        out["nan"] = str(e)
    return out


def test_psd_safe_cholesky():
    r = cholesky_page(lucid)
    A = np.array([[[4.0, 2.0, 0.0], [2.0, 3.0, 1.0], [0.0, 1.0, 2.0]],
                  [[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 1.0]]])
    np.testing.assert_allclose(r["L"][0], np.linalg.cholesky(A[0]), rtol=1e-12)  # jitter only where info > 0
    np.testing.assert_allclose(r["L"][1], np.linalg.cholesky(A[1] + 1e-8 * np.eye(3)), rtol=1e-7)
    assert r["warn"] == [("NumericalWarning", "A not p.d., added jitter of 1.0e-08 to the diagonal")]
    np.testing.assert_allclose(r["U"], np.linalg.cholesky(A[0]).T, rtol=1e-12)
    assert r["U_is_out"] is True
    assert r["notpsd"] == "Matrix not positive definite after repeatedly adding jitter up to 1.0e-06."
    assert r["notpsd_warn"] == [f"A not p.d., added jitter of {j:.1e} to the diagonal" for j in (1e-8, 1e-7, 1e-6)]
    # (a Size prints as a tuple: README "Differences from PyTorch")
    assert r["nan"] == "cholesky_cpu: 1 of 9 elements of the (3, 3) tensor are NaN."


def test_psd_safe_cholesky_torch_parity():
    torch = pytest.importorskip("torch")
    r, t = cholesky_page(lucid), cholesky_page(torch)
    t["nan"] = t["nan"].replace("torch.Size([3, 3])", "(3, 3)")
    for k in r:
        if isinstance(r[k], np.ndarray):
            np.testing.assert_allclose(r[k], t[k], rtol=1e-12, atol=1e-15, err_msg=k)
        else:
            assert r[k] == t[k], k


# ------------------------------------------------------------------------------ linear_cg / Lanczos
def cg_page(torch, D):
    G = gpytorch_lib(torch)
    A, B = torch.tensor(D.A), torch.tensor(D.B)
    out = {}
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out["x"] = _np(G.linear_cg(A, B, tolerance=1e-9, max_iter=20))
        out["x_vec"] = _np(G.linear_cg(A[0].matmul, B[0, :, 0], tolerance=1e-9, max_iter=20))
        diag = A.diagonal(dim1=-2, dim2=-1).unsqueeze(-1)
        out["x_pre"] = _np(G.linear_cg(A.matmul, B, tolerance=1e-9, max_iter=20, preconditioner=lambda r: r / diag))
        x, t_mat = G.linear_cg(A, B, n_tridiag=2, tolerance=1e-9, max_iter=20)
        out["x_tri"], out["t_mat"] = _np(x), _np(t_mat)
        zero_col = B.clone()
        zero_col[..., 1] = 0  # a zero right-hand side stays zero (rhs_is_zero)
        out["x_zero"] = _np(G.linear_cg(A, zero_col, tolerance=1e-9, max_iter=20))
    out["warn"] = [str(x.message) for x in w]
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        G.linear_cg(A, B, tolerance=1e-9, max_iter=2, max_tridiag_iter=2)
    out["short"] = [(type(x.message).__name__, str(x.message)) for x in w]
    q_mat, t_lan = G.lanczos_tridiag(A.matmul, 6, dtype=A.dtype, device=A.device, matrix_shape=A.shape[-2:],
                                     batch_shape=A.shape[:-2], init_vecs=B[..., :1].contiguous())
    out["q_mat"], out["t_lan"] = _np(q_mat), _np(t_lan)
    evals, evecs = G.lanczos_tridiag_to_diag(t_lan)
    out["evals"], out["evecs"] = _np(evals), _np(evecs)
    _, t4 = G.lanczos_tridiag(A.matmul, 4, dtype=A.dtype, device=A.device, matrix_shape=A.shape[-2:],
                              batch_shape=A.shape[:-2], init_vecs=B[..., :1].contiguous())
    out["t4"] = _np(t4)
    try:
        G.lanczos_tridiag(A.matmul, 4, dtype=torch.float32, device=A.device, matrix_shape=A.shape[-2:],
                          batch_shape=A.shape[:-2], init_vecs=B[..., :1])
    except RuntimeError as e:
        out["dtype_error"] = str(e)
    return out


def test_linear_cg_and_lanczos():
    D = _data()
    r = cg_page(lucid, D)
    want = np.linalg.solve(D.A, D.B)
    for k in ("x", "x_pre", "x_tri"):
        np.testing.assert_allclose(r[k], want, rtol=1e-7, atol=1e-9, err_msg=k)
    np.testing.assert_allclose(r["x_vec"], want[0, :, 0], rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(r["x_zero"][..., 1], 0.0)
    np.testing.assert_allclose(r["x_zero"][..., [0, 2]], want[..., [0, 2]], rtol=1e-7, atol=1e-9)
    assert r["warn"] == []  # every solve reached the tolerance
    assert len(r["short"]) == 1 and r["short"][0][0] == "NumericalWarning"
    msg = r["short"][0][1]  # "{}".format of a 0-d tensor formats its item(), as PyTorch's __format__
    head = "CG terminated in 2 iterations with average residual norm "
    assert msg.startswith(head) and msg.endswith(" which is larger than the tolerance of 1e-09 specified by"
                                                 " linear_operator.settings.cg_tolerance.")
    assert float(msg[len(head):].split()[0]) > 1e-3
    # CG's tridiagonal matrices (2 rhs x 2 batch x 6 x 6) are Lanczos' from b / |b|: same eigenvalues as A
    evA = np.linalg.eigvalsh(D.A)
    assert r["t_mat"].shape == (2, 2, 6, 6)
    for j in range(2):
        for b in range(2):
            np.testing.assert_allclose(np.linalg.eigvalsh(r["t_mat"][j, b]), evA[b], rtol=1e-7)
    Q, T = r["q_mat"], r["t_lan"]
    assert Q.shape == (2, 6, 6) and T.shape == (2, 6, 6)
    for b in range(2):
        np.testing.assert_allclose(Q[b].T @ Q[b], np.eye(6), atol=1e-10)
        np.testing.assert_allclose(Q[b].T @ D.A[b] @ Q[b], T[b], atol=1e-8)
        np.testing.assert_allclose(Q[b][:, 0], D.B[b, :, 0] / np.linalg.norm(D.B[b, :, 0]), rtol=1e-12)
        np.testing.assert_allclose(T[b], r["t_mat"][0, b], rtol=1e-6, atol=1e-8)  # CG's T = Lanczos' T
        np.testing.assert_allclose(r["t4"][b], T[b, :4, :4], rtol=1e-10)  # Lanczos is a prefix
    np.testing.assert_allclose(r["evals"], evA, rtol=1e-8)
    for b in range(2):
        np.testing.assert_allclose(T[b] @ r["evecs"][b], r["evecs"][b] * r["evals"][b], atol=1e-8)
    assert r["dtype_error"] == "Supplied dtype lucid.float32 and init_vecs.dtype lucid.float64 do not agree!"


def test_linear_cg_and_lanczos_torch_parity():
    torch = pytest.importorskip("torch")
    D = _data()
    r, t = cg_page(lucid, D), cg_page(torch, D)
    assert r.keys() == t.keys()
    t["dtype_error"] = t["dtype_error"].replace("torch.", "lucid.")
    for k in r:
        if k == "evecs":  # eigenvectors up to sign: make each column's largest entry positive
            fix = lambda v: v * np.sign(np.take_along_axis(v, np.abs(v).argmax(-2)[..., None, :], -2))  # noqa: E731
            np.testing.assert_allclose(fix(r[k]), fix(t[k]), rtol=1e-9, atol=1e-11)
        elif isinstance(r[k], np.ndarray):
            np.testing.assert_allclose(r[k], t[k], rtol=1e-9, atol=1e-11, err_msg=k)
        elif k == "short":  # the residual norm's last digits may differ
            assert [m[1][:70] for m in r[k]] == [m[1][:70] for m in t[k]]
        else:
            assert r[k] == t[k], k


# ------------------------------------------------------------------------------ pivoted Cholesky
def pivoted_page(torch, D):
    G = gpytorch_lib(torch)
    out = {}
    K = torch.tensor(D.A[:, :5, :5])
    L, piv = G.pivoted_cholesky(K, rank=5, error_tol=1e-14, return_pivots=True)
    out["L"], out["piv"] = _np(L), piv.tolist()
    L3, piv3 = G.pivoted_cholesky(K, rank=3, error_tol=1e-14, return_pivots=True)
    out["L3"], out["piv3"] = _np(L3), piv3.tolist()
    out["early"] = tuple(G.pivoted_cholesky(K, rank=5, error_tol=10.0).shape)  # the loop stops after one step
    out["inv"] = G.inverse_permutation(torch.tensor([1, 3, 2, 4, 0])).tolist()
    out["perm"] = _np(G.apply_permutation(K, piv, piv3[..., :2]))
    # backward: rebuilt under enable_grad with psd_safe_cholesky and solve_triangular
    Kg = K.clone().requires_grad_(True)
    W = torch.tensor(D.S[:, :, :3])
    (G.pivoted_cholesky(Kg, rank=3, error_tol=1e-14) * W).sum().backward()
    out["grad"] = _np(Kg.grad)
    return out


def _np_pivoted(K, rank):
    """Greedy pivoted Cholesky (Harbrecht et al. 2012), one matrix."""
    n = K.shape[0]
    d, perm, L = np.diag(K).copy(), list(range(n)), np.zeros((rank, n))
    for m in range(rank):
        i = m + int(np.argmax(d[perm[m:]]))
        perm[m], perm[i] = perm[i], perm[m]
        p = perm[m]
        L[m, p] = np.sqrt(d[p])
        rest = perm[m + 1:]
        L[m, rest] = (K[p, rest] - L[:m, p] @ L[:m, rest]) / L[m, p]
        d[rest] -= L[m, rest] ** 2
    return L.T, perm


def test_pivoted_cholesky():
    D = _data()
    r = pivoted_page(lucid, D)
    K = D.A[:, :5, :5]
    for b in range(2):
        Lw, pw = _np_pivoted(K[b], 5)
        np.testing.assert_allclose(r["L"][b], Lw, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(r["L"][b] @ r["L"][b].T, K[b], rtol=1e-10)
        assert r["piv"][b] == pw
        L3, p3 = _np_pivoted(K[b], 3)
        np.testing.assert_allclose(r["L3"][b], L3, rtol=1e-10, atol=1e-12)
        assert r["piv3"][b][:3] == p3[:3] and sorted(r["piv3"][b]) == list(range(5))
        np.testing.assert_allclose(r["perm"][b], K[b][np.ix_(r["piv"][b], r["piv3"][b][:2])])
    assert r["early"] == (2, 5, 1)
    assert r["inv"] == [4, 0, 2, 1, 3]
    # the gradient against a central difference along symmetric directions (the factor reads both
    # triangles of K: the backward sees a symmetric K, so only symmetric parts can be compared)
    W = D.S[:, :, :3]
    f = lambda Km: sum((_np_pivoted(Km[b], 3)[0] * W[b]).sum() for b in range(2))  # noqa: E731
    g = np.random.default_rng(1)
    for _ in range(3):
        V = g.standard_normal(K.shape)
        V = V + V.transpose(0, 2, 1)
        h = 1e-6
        fd = (f(K + h * V) - f(K - h * V)) / (2 * h)
        np.testing.assert_allclose((r["grad"] * V).sum(), fd, rtol=1e-6)


def test_pivoted_cholesky_torch_parity():
    torch = pytest.importorskip("torch")
    D = _data()
    r, t = pivoted_page(lucid, D), pivoted_page(torch, D)
    for k in r:
        if isinstance(r[k], np.ndarray):
            np.testing.assert_allclose(r[k], t[k], rtol=1e-10, atol=1e-12, err_msg=k)
        else:
            assert r[k] == t[k], k


# ------------------------------------------------------------------------------ exact GP regression
def gp_page(torch, D, training_iter=4):
    G = gpytorch_lib(torch)
    out = {}
    train_x = torch.tensor(D.train_x)
    train_y = torch.tensor(D.train_y)
    likelihood = G.GaussianLikelihood().double()
    model = G.ExactGPModel(train_x, train_y, likelihood).double()
    mll = G.ExactMarginalLogLikelihood(likelihood, model)
    names = ["likelihood.noise_covar.raw_noise", "mean_module.constant", "covar_module.raw_outputscale",
             "covar_module.base_kernel.raw_lengthscale"]
    out["names"] = [n for n, _ in model.named_parameters()]
    params = dict(model.named_parameters())

    def loss_fn():
        output = model(train_x)
        return -mll(output, train_y)

    loss = loss_fn()
    loss.backward()
    out["loss0"] = loss.item()
    out["grads0"] = [params[n].grad.item() for n in names]
    fd = []
    with torch.no_grad():  # float64 central differences in each raw hyperparameter
        for n in names:
            p, h = params[n], 1e-6
            p.add_(h)
            up = loss_fn().item()
            p.sub_(2 * h)
            down = loss_fn().item()
            p.add_(h)
            fd.append((up - down) / (2 * h))
    out["fd0"] = fd

    # "Simple GP Regression": find optimal model hyperparameters
    model.train()
    likelihood.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)  # Includes GaussianLikelihood parameters
    buf = io.StringIO()
    with redirect_stdout(buf):
        for i in range(training_iter):
            # Zero gradients from previous iteration
            optimizer.zero_grad()
            # Output from model
            output = model(train_x)
            # Calc loss and backprop gradients
            loss = -mll(output, train_y)
            loss.backward()
            print('Iter %d/%d - Loss: %.3f   lengthscale: %.3f   noise: %.3f' % (
                i + 1, training_iter, loss.item(),
                model.covar_module.base_kernel.lengthscale.item(),
                model.likelihood.noise.item()
            ))
            optimizer.step()
    out["log"] = buf.getvalue()
    out["final"] = [params[n].item() for n in names]
    out["loss_end"] = loss_fn().item()
    return out


def _np_gp_loss(D, raw_noise, const, raw_os, raw_ls):
    sp = lambda v: np.log1p(np.exp(v))  # noqa: E731
    x, y = D.train_x, D.train_y
    K = sp(raw_os) * np.exp(-((x[:, None] - x[None]) ** 2) / sp(raw_ls) ** 2 / 2)
    K = K + (sp(raw_noise) + np.float32(1e-4)) * np.eye(len(x))
    r = y - const
    _, logdet = np.linalg.slogdet(K)
    return 0.5 * (r @ np.linalg.solve(K, r) + logdet + len(x) * math.log(2 * math.pi)) / len(x)


def test_exact_gp_marginal_log_likelihood_and_training():
    D = _data()
    r = gp_page(lucid, D)
    assert r["names"] == ["likelihood.noise_covar.raw_noise", "mean_module.constant",
                          "covar_module.raw_outputscale", "covar_module.base_kernel.raw_lengthscale"]
    np.testing.assert_allclose(r["loss0"], _np_gp_loss(D, 0.0, 0.0, 0.0, 0.0), rtol=1e-12)
    np.testing.assert_allclose(r["grads0"], r["fd0"], rtol=1e-6, atol=1e-9)
    h, fd = 1e-6, []
    for i in range(4):  # and against NumPy's own central differences
        e = np.eye(4)[i] * h
        fd.append((_np_gp_loss(D, *e) - _np_gp_loss(D, *-e)) / (2 * h))
    np.testing.assert_allclose(r["grads0"], fd, rtol=1e-6, atol=1e-9)
    lines = r["log"].splitlines()
    assert len(lines) == 4 and lines[0].startswith("Iter 1/4 - Loss: %.3f   lengthscale: 0.693   noise: 0.693" % r["loss0"])
    # the loss printed at each step is the NumPy loss at the parameters of that step (Adam moves each by lr)
    np.testing.assert_allclose(r["loss_end"], _np_gp_loss(D, *r["final"]), rtol=1e-12)
    assert r["loss_end"] < r["loss0"] - 0.1
    losses = [float(ln.split("Loss: ")[1].split()[0]) for ln in lines]
    assert all(b < a for a, b in zip(losses, losses[1:]))
    # Adam's first step moves every parameter by lr against its gradient's sign
    assert r["final"] != [0.0] * 4


def test_exact_gp_marginal_log_likelihood_and_training_torch_parity():
    torch = pytest.importorskip("torch")
    D = _data()
    r, t = gp_page(lucid, D), gp_page(torch, D)
    assert r["names"] == t["names"] and r["log"] == t["log"]
    for k in ("loss0", "grads0", "final", "loss_end"):
        np.testing.assert_allclose(r[k], t[k], rtol=1e-10, atol=1e-12, err_msg=k)
    np.testing.assert_allclose(r["fd0"], t["fd0"], rtol=1e-6)  # differences of rounded losses


def linop_lib(torch):
    """linear_operator's ``utils/toeplitz.py``, ``utils/minres.py``, ``utils/broadcasting.py`` and
    gpytorch's ``functions/_log_normal_cdf.py``, on the module handed in as ``torch``."""
    key = "linop:" + torch.__name__
    if key in _LIBS:
        return _LIBS[key]
    fft, ifft = torch.fft.fft, torch.fft.ifft
    Function = torch.autograd.Function
    Normal = torch.distributions.Normal
    settings = SimpleNamespace(max_cg_iterations=SimpleNamespace(value=lambda: 1000),
                               minres_tolerance=SimpleNamespace(value=lambda: 1e-4),
                               verbose_linalg=SimpleNamespace(on=lambda: False))

    # ---- linear_operator/utils/broadcasting.py --------------------------------------------------
    def _matmul_broadcast_shape(shape_a, shape_b, error_msg=None):
        """Compute dimension of matmul operation on shapes (supports broadcasting)"""
        m, n, p = shape_a[-2], shape_a[-1], shape_b[-1]

        if len(shape_b) == 1:
            if n != p:
                if error_msg is None:
                    raise RuntimeError(f"Incompatible dimensions for matmul: {shape_a} and {shape_b}")
                else:
                    raise RuntimeError(error_msg)
            return shape_a[:-1]

        if n != shape_b[-2]:
            if error_msg is None:
                raise RuntimeError(f"Incompatible dimensions for matmul: {shape_a} and {shape_b}")
            else:
                raise RuntimeError(error_msg)

        tail_shape = torch.Size([m, p])

        # Figure out batch shape
        bc_shape = torch.broadcast_shapes(shape_a[:-2], shape_b[:-2])
        return bc_shape + tail_shape

    def _pad_with_singletons(obj, num_singletons_before=0, num_singletons_after=0):
        new_shape = [1] * num_singletons_before + list(obj.shape) + [1] * num_singletons_after
        return obj.view(*new_shape)

    # ---- linear_operator/utils/toeplitz.py ------------------------------------------------------
    def toeplitz(toeplitz_column, toeplitz_row):
        if toeplitz_column.ndimension() != 1:
            raise RuntimeError("toeplitz_column must be a vector.")

        if toeplitz_row.ndimension() != 1:
            raise RuntimeError("toeplitz_row must be a vector.")

        if toeplitz_column[0] != toeplitz_row[0]:
            raise RuntimeError(
                "The first column and first row of the Toeplitz matrix should have "
                "the same first otherwise the value of T[0,0] is ambiguous. "
                "Got: c[0]={} and r[0]={}".format(toeplitz_column[0], toeplitz_row[0])
            )

        if len(toeplitz_column) != len(toeplitz_row):
            raise RuntimeError("c and r should have the same length " "(Toeplitz matrices are necessarily square).")

        if type(toeplitz_column) != type(toeplitz_row):
            raise RuntimeError("toeplitz_column and toeplitz_row should be the same type.")

        if len(toeplitz_column) == 1:
            return toeplitz_column.view(1, 1)

        res = torch.empty(
            len(toeplitz_column),
            len(toeplitz_column),
            dtype=toeplitz_column.dtype,
            device=toeplitz_column.device,
        )
        for i, val in enumerate(toeplitz_column):
            for j in range(len(toeplitz_column) - i):
                res[j + i, j] = val
        for i, val in list(enumerate(toeplitz_row))[1:]:
            for j in range(len(toeplitz_row) - i):
                res[j, j + i] = val
        return res

    def sym_toeplitz(toeplitz_column):
        return toeplitz(toeplitz_column, toeplitz_column)

    def toeplitz_getitem(toeplitz_column, toeplitz_row, i, j):
        index = i - j
        if index < 0:
            return toeplitz_row[abs(index)]
        else:
            return toeplitz_column[index]

    def toeplitz_matmul(toeplitz_column, toeplitz_row, tensor):
        if toeplitz_column.size() != toeplitz_row.size():
            raise RuntimeError("c and r should have the same length (Toeplitz matrices are necessarily square).")

        toeplitz_shape = torch.Size((*toeplitz_column.shape, toeplitz_row.size(-1)))
        output_shape = _matmul_broadcast_shape(toeplitz_shape, tensor.shape)
        broadcasted_t_shape = output_shape[:-1] if tensor.dim() > 1 else output_shape

        if tensor.ndimension() == 1:
            tensor = tensor.unsqueeze(-1)
        toeplitz_column = toeplitz_column.expand(*broadcasted_t_shape)
        toeplitz_row = toeplitz_row.expand(*broadcasted_t_shape)
        tensor = tensor.expand(*output_shape)

        if not torch.equal(toeplitz_column[..., 0], toeplitz_row[..., 0]):
            raise RuntimeError(
                "The first column and first row of the Toeplitz matrix should have "
                "the same first element, otherwise the value of T[0,0] is ambiguous. "
                "Got: c[0]={} and r[0]={}".format(toeplitz_column[0], toeplitz_row[0])
            )

        if type(toeplitz_column) != type(toeplitz_row) or type(toeplitz_column) != type(tensor):
            raise RuntimeError("The types of all inputs to ToeplitzMV must match.")

        *batch_shape, orig_size, num_rhs = tensor.size()
        r_reverse = toeplitz_row[..., 1:].flip(dims=(-1,))

        c_r_rev = torch.zeros(*batch_shape, orig_size + r_reverse.size(-1), dtype=tensor.dtype, device=tensor.device)
        c_r_rev[..., :orig_size] = toeplitz_column
        c_r_rev[..., orig_size:] = r_reverse

        temp_tensor = torch.zeros(
            *batch_shape, 2 * orig_size - 1, num_rhs, dtype=toeplitz_column.dtype, device=toeplitz_column.device
        )
        temp_tensor[..., :orig_size, :] = tensor

        fft_M = fft(temp_tensor.mT.contiguous())
        fft_c = fft(c_r_rev).unsqueeze(-2).expand_as(fft_M)
        fft_product = fft_M.mul_(fft_c)

        output = ifft(fft_product).real.mT
        output = output[..., :orig_size, :]
        return output

    def sym_toeplitz_matmul(toeplitz_column, tensor):
        return toeplitz_matmul(toeplitz_column, toeplitz_column, tensor)

    def sym_toeplitz_solve_ld(toeplitz_column, right_vectors):
        return toeplitz_solve_ld(toeplitz_column, toeplitz_column, right_vectors)

    def toeplitz_solve_ld(toeplitz_column, toeplitz_row, right_vectors):
        # f = forward vector , b = backward vector
        # xi = vector at iterator i, xim = vector at iteration i-1
        flipped_toeplitz_column = toeplitz_column[..., 1:].flip(dims=(-1,))
        N = toeplitz_row.size(-1)
        xi = torch.zeros(right_vectors.shape, device=right_vectors.device, dtype=right_vectors.dtype)
        fi = torch.zeros(right_vectors.shape, device=right_vectors.device, dtype=right_vectors.dtype)
        bi = torch.zeros(right_vectors.shape, device=right_vectors.device, dtype=right_vectors.dtype)
        bim = torch.zeros(right_vectors.shape, device=right_vectors.device, dtype=right_vectors.dtype)

        # iteration 0
        fi[..., 0, :] = 1 / toeplitz_column[..., 0]
        bi[..., N - 1, :] = 1 / toeplitz_column[..., 0]
        xi[..., 0, :] = right_vectors[..., 0, :] / toeplitz_column[..., 0]

        for i in range(1, len(toeplitz_column)):
            # update
            bim[:] = bi
            # compute the new forward and backward vector
            efi = torch.matmul(flipped_toeplitz_column[..., N - i - 1:N - 1], fi[..., :i, :])
            ebi = torch.matmul(toeplitz_row[..., 1:i + 1], bim[..., N - i:, :])
            bi[N - i - 1:] = 1 / (1 - ebi * efi) * (bim[N - i - 1:] - ebi * fi[:i + 1])
            fi[:i + 1] = 1 / (1 - ebi * efi) * (fi[:i + 1] - efi * bim[N - i - 1:])
            # update solution
            exim = torch.matmul(flipped_toeplitz_column[N - i - 1:N - 1], xi[:i])
            xi[:i + 1] += bi[N - i - 1:] * (right_vectors[..., i, :] - exim)

        return xi

    def sym_toeplitz_derivative_quadratic_form(left_vectors, right_vectors):
        if left_vectors.ndimension() == 1:
            left_vectors = left_vectors.unsqueeze(1)
            right_vectors = right_vectors.unsqueeze(1)

        batch_shape = left_vectors.shape[:-2]
        toeplitz_size = left_vectors.size(-2)
        num_vectors = left_vectors.size(-1)

        left_vectors = left_vectors.mT.contiguous()
        right_vectors = right_vectors.mT.contiguous()

        columns = torch.zeros_like(left_vectors)
        columns[..., 0] = left_vectors[..., 0]
        res = toeplitz_matmul(columns, left_vectors, right_vectors.unsqueeze(-1))
        rows = left_vectors.flip(dims=(-1,))
        columns[..., 0] = rows[..., 0]
        res += toeplitz_matmul(columns, rows, torch.flip(right_vectors, dims=(-1,)).unsqueeze(-1))

        res = res.reshape(*batch_shape, num_vectors, toeplitz_size).sum(-2)
        res[..., 0] -= (left_vectors * right_vectors).view(*batch_shape, -1).sum(-1)

        return res

    # ---- linear_operator/utils/minres.py --------------------------------------------------------
    def minres(matmul_closure, rhs, eps=1e-25, shifts=None, value=None, max_iter=None, preconditioner=None):
        # Default values
        if torch.is_tensor(matmul_closure):
            matmul_closure = matmul_closure.matmul
        mm_ = matmul_closure
        if preconditioner is None:
            preconditioner = lambda x: x.clone()  # noqa: E731

        if shifts is None:
            shifts = torch.tensor(0.0, dtype=rhs.dtype, device=rhs.device)

        # Scale the rhs
        squeeze = False
        if rhs.dim() == 1:
            rhs = rhs.unsqueeze(-1)
            squeeze = True

        rhs_norm = rhs.norm(2, dim=-2, keepdim=True)
        rhs_is_zero = rhs_norm.lt(1e-10)
        rhs_norm = rhs_norm.masked_fill_(rhs_is_zero, 1)
        rhs = rhs.div(rhs_norm)

        # Use the right number of iterations
        if max_iter is None:
            max_iter = settings.max_cg_iterations.value()
        max_iter = min(max_iter, rhs.size(-2) + 1)

        # Epsilon (to prevent nans)
        eps = torch.tensor(eps, dtype=rhs.dtype, device=rhs.device)

        # Create space for matmul product, solution
        prod = mm_(rhs)
        if value is not None:
            prod.mul_(value)

        # Resize shifts
        shifts = _pad_with_singletons(shifts, 0, prod.dim() - shifts.dim() + 1)
        solution = torch.zeros(shifts.shape[:1] + prod.shape, dtype=rhs.dtype, device=rhs.device)

        # Variables for Lanczos terms
        zvec_prev2 = torch.zeros_like(prod)
        zvec_prev1 = rhs.clone().expand_as(prod).contiguous()
        qvec_prev1 = preconditioner(zvec_prev1)
        alpha_curr = torch.empty(prod.shape[:-2] + (1, prod.size(-1)), dtype=rhs.dtype, device=rhs.device)
        alpha_shifted_curr = torch.empty(solution.shape[:-2] + (1, prod.size(-1)), dtype=rhs.dtype, device=rhs.device)
        beta_prev = (zvec_prev1 * qvec_prev1).sum(dim=-2, keepdim=True).sqrt_()
        beta_curr = torch.empty_like(beta_prev)
        tmpvec = torch.empty_like(qvec_prev1)

        # Divide by beta_prev
        zvec_prev1.div_(beta_prev)
        qvec_prev1.div_(beta_prev)

        # Variables for the QR rotation
        # 1) Components of the Givens rotations
        cos_prev2 = torch.ones(solution.shape[:-2] + (1, rhs.size(-1)), dtype=rhs.dtype, device=rhs.device)
        sin_prev2 = torch.zeros(solution.shape[:-2] + (1, rhs.size(-1)), dtype=rhs.dtype, device=rhs.device)
        cos_prev1 = torch.ones_like(cos_prev2)
        sin_prev1 = torch.zeros_like(sin_prev2)
        radius_curr = torch.empty_like(cos_prev1)
        cos_curr = torch.empty_like(cos_prev1)
        sin_curr = torch.empty_like(cos_prev1)
        # 2) Terms QR decomposition of T
        subsub_diag_term = torch.empty_like(alpha_shifted_curr)
        sub_diag_term = torch.empty_like(alpha_shifted_curr)
        diag_term = torch.empty_like(alpha_shifted_curr)

        # Variables for the solution updates
        # 1) The "search" vectors of the solution
        search_prev2 = torch.zeros_like(solution)
        search_prev1 = torch.zeros_like(solution)
        search_curr = torch.empty_like(search_prev1)
        search_update = torch.empty_like(search_prev1)
        # 2) The "scaling" terms of the search vectors
        scale_prev = beta_prev.repeat(shifts.size(0), *([1] * beta_prev.dim()))
        scale_curr = torch.empty_like(scale_prev)

        # Terms for checking for convergence
        solution_norm = torch.zeros(*solution.shape[:-2], solution.size(-1), dtype=solution.dtype, device=solution.device)
        search_update_norm = torch.zeros_like(solution_norm)

        # Perform iterations
        for i in range(max_iter + 2):
            # Perform matmul
            prod = mm_(qvec_prev1)
            if value is not None:
                prod.mul_(value)

            # Get next Lanczos terms
            # --> alpha_curr, beta_curr, qvec_curr
            torch.mul(prod, qvec_prev1, out=tmpvec)
            torch.sum(tmpvec, -2, keepdim=True, out=alpha_curr)

            zvec_curr = prod.addcmul_(alpha_curr, zvec_prev1, value=-1).addcmul_(beta_prev, zvec_prev2, value=-1)

            qvec_curr = preconditioner(zvec_curr)
            torch.mul(zvec_curr, qvec_curr, out=tmpvec)
            torch.sum(tmpvec, -2, keepdim=True, out=beta_curr)
            beta_curr.sqrt_()
            beta_curr.clamp_min_(eps)

            zvec_curr.div_(beta_curr)
            qvec_curr.div_(beta_curr)

            # Perform JIT-ted update
            conv = _jit_minres_updates(
                solution, shifts, eps, qvec_prev1, alpha_curr, alpha_shifted_curr, beta_prev, beta_curr, cos_prev2,
                cos_prev1, cos_curr, sin_prev2, sin_prev1, sin_curr, radius_curr, subsub_diag_term, sub_diag_term,
                diag_term, search_prev2, search_prev1, search_curr, search_update, scale_prev, scale_curr,
                search_update_norm, solution_norm,
            )

            # Check convergence criterion
            if (i + 1) % 10 == 0:
                torch.norm(search_update, dim=-2, out=search_update_norm)
                torch.norm(solution, dim=-2, out=solution_norm)
                conv = search_update_norm.div_(solution_norm).mean().item()
                if conv < settings.minres_tolerance.value():
                    break

            # Update terms for next iteration
            # Lanczos terms
            zvec_prev2, zvec_prev1 = zvec_prev1, prod
            qvec_prev1 = qvec_curr
            beta_prev, beta_curr = beta_curr, beta_prev
            # Givens rotations terms
            cos_prev2, cos_prev1, cos_curr = cos_prev1, cos_curr, cos_prev2
            sin_prev2, sin_prev1, sin_curr = sin_prev1, sin_curr, sin_prev2
            # Search vector terms)
            search_prev2, search_prev1, search_curr = (search_prev1, search_curr, search_prev2)
            scale_prev, scale_curr = scale_curr, scale_prev

        # For rhs-s that are close to zero, set them to zero
        solution.masked_fill_(rhs_is_zero, 0)

        if squeeze:
            solution = solution.squeeze(-1)
            rhs = rhs.squeeze(-1)
            rhs_norm = rhs_norm.squeeze(-1)

        if shifts.numel() == 1:
            # If we weren't shifting we shouldn't return a batch output
            solution = solution.squeeze(0)

        return solution.mul_(rhs_norm)

    def _jit_minres_updates(solution, shifts, eps, qvec_prev1, alpha_curr, alpha_shifted_curr, beta_prev, beta_curr,
                            cos_prev2, cos_prev1, cos_curr, sin_prev2, sin_prev1, sin_curr, radius_curr,
                            subsub_diag_term, sub_diag_term, diag_term, search_prev2, search_prev1, search_curr,
                            search_update, scale_prev, scale_curr, search_update_norm, solution_norm):
        # Start givens rotation
        # Givens rotation from 2 steps ago
        torch.mul(sin_prev2, beta_prev, out=subsub_diag_term)
        torch.mul(cos_prev2, beta_prev, out=sub_diag_term)

        # Compute shifted alpha
        torch.add(alpha_curr, shifts, out=alpha_shifted_curr)

        # Givens rotation from 1 step ago
        torch.mul(alpha_shifted_curr, cos_prev1, out=diag_term).addcmul_(sin_prev1, sub_diag_term, value=-1)
        sub_diag_term.mul_(cos_prev1).addcmul_(sin_prev1, alpha_shifted_curr)

        # 3) Compute next Givens terms
        torch.mul(diag_term, diag_term, out=radius_curr).addcmul_(beta_curr, beta_curr).sqrt_()
        cos_curr = torch.div(diag_term, radius_curr, out=cos_curr)
        sin_curr = torch.div(beta_curr, radius_curr, out=sin_curr)
        # 4) Apply current Givens rotation
        diag_term.mul_(cos_curr).addcmul_(sin_curr, beta_curr)

        # Update the solution
        # --> search_curr, scale_curr solution
        # 1) Apply the latest Givens rotation to the Lanczos-rhs ( ||rhs|| e_1 )
        # This is getting the scale terms for the "search" vectors
        torch.mul(scale_prev, sin_curr, out=scale_curr).mul_(-1)
        scale_prev.mul_(cos_curr)
        # 2) Get the new search vector
        torch.addcmul(qvec_prev1, sub_diag_term, search_prev1, value=-1, out=search_curr)
        search_curr.addcmul_(subsub_diag_term, search_prev2, value=-1)
        search_curr.div_(diag_term)

        # 3) Update the solution
        torch.mul(search_curr, scale_prev, out=search_update)
        solution.add_(search_update)

    # ---- gpytorch/functions/_log_normal_cdf.py --------------------------------------------------
    class LogNormalCDF(Function):
        @staticmethod
        def forward(ctx, z):
            c = torch.tensor(
                [
                    0.00048204, -0.00142906, 0.0013200243174, 0.0009461589032, -0.0045563339802, 0.00556964649138,
                    0.00125993961762116, -0.01621575378835404, 0.02629651521057465, -0.001829764677455021,
                    2 * (1 - math.pi / 3), (4 - math.pi) / 3, 1, 1,
                ],
                dtype=z.dtype,
                device=z.device,
            )

            r = torch.tensor(
                [
                    1.2753666447299659525, 5.019049726784267463450, 6.1602098531096305441, 7.409740605964741794425,
                    2.9788656263939928886,
                ],
                dtype=z.dtype,
                device=z.device,
            )

            q = torch.tensor(
                [
                    2.260528520767326969592, 9.3960340162350541504, 12.048951927855129036034, 17.081440747466004316,
                    9.608965327192787870698, 3.3690752069827527677,
                ],
                dtype=z.dtype,
                device=z.device,
            )

            log_phi_z = torch.zeros_like(z)

            # Three cases to handle: An entry of z is near zero, an entry of z is small, or an entry of z neither of these.
            z_near_zero = z.pow(2).lt(0.04)
            z_is_small = z.lt(-1)
            z_is_ordinary = ~(z_near_zero | z_is_small)

            # Case 1: Entries of z that are near zero
            if z_near_zero.sum() > 0:
                log_phi_first = -z.masked_select(z_near_zero).div_(math.sqrt(2 * math.pi))
                f = 0
                for c_i in c.tolist():
                    f = log_phi_first.mul(c_i + f)

                log_phi_z.masked_scatter_(z_near_zero, f.mul_(-2).sub_(math.log(2)))

            # Case 2: Entries of z that are very small
            if z_is_small.sum() > 0:
                z_where_z_is_small = z.masked_select(z_is_small)
                numerator = torch.tensor(0.5641895835477550741, dtype=z.dtype, device=z.device)
                numerator = numerator.expand_as(z_where_z_is_small)
                denominator = torch.tensor(1.0, dtype=z.dtype, device=z.device)
                denominator = denominator.expand_as(z_where_z_is_small)

                for r_i in r:
                    numerator = -z_where_z_is_small.mul(numerator.div(math.sqrt(2))) + r_i

                for q_i in q:
                    denominator = -z_where_z_is_small.mul(denominator.div(math.sqrt(2))) + q_i

                e = numerator.div(denominator)
                log_phi_z.masked_scatter_(z_is_small, torch.log(e / 2) - z_where_z_is_small.pow(2).div_(2))

                ctx.denominator = denominator
                ctx.numerator = numerator

            log_phi_z.masked_scatter_(z_is_ordinary, torch.log(Normal(0.0, 1.0).cdf(z.masked_select(z_is_ordinary))))

            ctx.save_for_backward(z, log_phi_z)
            return log_phi_z

        @staticmethod
        def backward(ctx, grad_output):
            z, log_phi_z = ctx.saved_tensors
            log_phi_z_grad = torch.zeros_like(z)

            z_is_small = z.lt(-1)
            z_is_not_small = ~z_is_small

            if z_is_small.sum() > 0:
                log_phi_z_grad[z_is_small] = torch.abs(ctx.denominator.div(ctx.numerator)).mul(math.sqrt(2 / math.pi))

            exp = z[z_is_not_small].pow(2).div(-2).sub(log_phi_z[z_is_not_small]).add(math.log(0.5))

            log_phi_z_grad[z_is_not_small] = torch.exp(exp).mul(math.sqrt(2 / math.pi))

            return log_phi_z_grad.mul(grad_output)

    lib = SimpleNamespace(**{k: v for k, v in locals().items() if not k.startswith("__")})
    _LIBS[key] = lib
    return lib


# ------------------------------------------------------------------------------ Toeplitz, MINRES, log Phi
def linop_page(torch, D):
    G = linop_lib(torch)
    out = {}
    c = torch.tensor([4.0, 1.0, 0.5, -0.3, 0.2], dtype=torch.float64)
    r = torch.tensor([4.0, -0.7, 0.4, 0.1, 0.3], dtype=torch.float64)
    M = torch.tensor(D.S[0, :, :3])
    out["T"] = _np(G.toeplitz(c, r))
    out["T_sym"] = _np(G.sym_toeplitz(c))
    out["getitem"] = [G.toeplitz_getitem(c, r, 1, 3).item(), G.toeplitz_getitem(c, r, 4, 2).item()]
    out["mm"] = _np(G.toeplitz_matmul(c, r, M))
    try:  # a vector right-hand side: the page's expand of the unsqueezed n x 1 tensor to (n,) fails
        G.toeplitz_matmul(c, r, M[:, 0])
    except RuntimeError as e:
        out["mm_vec"] = str(e).split("): ")[-1].split(": ")[-1]
    cb = torch.stack([c, c.flip(0) * 0 + c * 0.5])
    rb = torch.stack([r, r * 0.5])
    out["mm_batch"] = _np(G.toeplitz_matmul(cb, rb, M))  # batch of Toeplitz matrices times one matrix
    out["solve_ld"] = _np(G.toeplitz_solve_ld(c, r, M))
    out["sym_solve_ld"] = _np(G.sym_toeplitz_solve_ld(c, M))
    L, R = torch.tensor(D.S[1, :, :2]), torch.tensor(D.S[1, :, 2:4])
    out["dquad"] = _np(G.sym_toeplitz_derivative_quadratic_form(L, R))
    try:
        G.toeplitz(c, r + 1)
    except RuntimeError as e:
        out["t00"] = str(e)
    try:
        G.toeplitz_matmul(c, r, M[:4])
    except RuntimeError as e:
        out["shape_error"] = str(e)
    A, B = torch.tensor(D.A), torch.tensor(D.B)
    out["minres"] = _np(G.minres(A, B, max_iter=None))
    shifts = torch.tensor([0.0, 0.5, 2.0], dtype=torch.float64)
    out["minres_shift"] = _np(G.minres(A[0].matmul, B[0, :, 0], shifts=shifts, value=1.0))
    z = torch.tensor([-6.0, -2.5, -1.2, -0.9, -0.1, 0.0, 0.15, 0.5, 1.5, 4.0], dtype=torch.float64, requires_grad=True)
    lp = G.LogNormalCDF.apply(z)
    lp.sum().backward()
    out["log_cdf"], out["log_cdf_grad"] = _np(lp), _np(z.grad)
    return out


def _np_minres_shift(D):
    return np.stack([np.linalg.solve(D.A[0] + s * np.eye(6), D.B[0, :, 0]) for s in (0.0, 0.5, 2.0)])


def test_toeplitz_minres_log_normal_cdf():
    from scipy.linalg import solve_toeplitz, toeplitz
    from scipy.special import log_ndtr

    D = _data()
    r = linop_page(lucid, D)
    c, rr = np.array([4.0, 1.0, 0.5, -0.3, 0.2]), np.array([4.0, -0.7, 0.4, 0.1, 0.3])
    T = toeplitz(c, rr)
    np.testing.assert_array_equal(r["T"], T)
    np.testing.assert_array_equal(r["T_sym"], toeplitz(c))
    assert r["getitem"] == [0.4, 0.5]
    M = D.S[0, :, :3]
    np.testing.assert_allclose(r["mm"], T @ M, rtol=1e-12, atol=1e-12)
    assert r["mm_vec"] == "the number of sizes provided (1) must be greater or equal to the number of dimensions in the tensor (2)"
    np.testing.assert_allclose(r["mm_batch"], np.stack([T @ M, toeplitz(0.5 * c, 0.5 * rr) @ M]), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(r["solve_ld"], solve_toeplitz((c, rr), M), rtol=1e-10)
    np.testing.assert_allclose(r["sym_solve_ld"], np.linalg.solve(toeplitz(c), M), rtol=1e-10)
    # v' (dT/dc_i) w summed over the columns of L and R: ones on the i-th sub- and superdiagonal
    L, R = D.S[1, :, :2], D.S[1, :, 2:4]
    want = [sum(L[:, j] @ (np.eye(5, k=i) + np.eye(5, k=-i) if i else np.eye(5)) @ R[:, j] for j in range(2))
            for i in range(5)]
    np.testing.assert_allclose(r["dquad"], want, rtol=1e-10, atol=1e-12)
    assert r["t00"].startswith("The first column and first row of the Toeplitz matrix should have the same first")
    assert r["shape_error"] == "Incompatible dimensions for matmul: (5, 5) and (4, 3)"
    np.testing.assert_allclose(r["minres"], np.linalg.solve(D.A, D.B), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(r["minres_shift"], _np_minres_shift(D), rtol=1e-6, atol=1e-8)
    z = np.array([-6.0, -2.5, -1.2, -0.9, -0.1, 0.0, 0.15, 0.5, 1.5, 4.0])
    small = z < -1  # the page's rational approximation (about 1e-3 near z = -1) ...
    np.testing.assert_allclose(r["log_cdf"][small], log_ndtr(z[small]), rtol=1e-3)
    np.testing.assert_allclose(r["log_cdf"][~small], log_ndtr(z[~small]), rtol=1e-7)  # ... the series, Normal.cdf
    pdf_over_cdf = np.exp(-z**2 / 2 - log_ndtr(z)) / math.sqrt(2 * math.pi)
    np.testing.assert_allclose(r["log_cdf_grad"][small], pdf_over_cdf[small], rtol=1e-3)
    np.testing.assert_allclose(r["log_cdf_grad"][~small], pdf_over_cdf[~small], rtol=1e-7)


def test_toeplitz_minres_log_normal_cdf_torch_parity():
    torch = pytest.importorskip("torch")
    D = _data()
    r, t = linop_page(lucid, D), linop_page(torch, D)
    assert r.keys() == t.keys()
    t["shape_error"] = re.sub(r"torch\.Size\(\[([0-9, ]*)\]\)", r"(\1)", t["shape_error"])  # Sizes print as tuples
    for k in r:
        if isinstance(r[k], np.ndarray):
            np.testing.assert_allclose(r[k], t[k], rtol=1e-9, atol=1e-11, err_msg=k)
        else:
            assert r[k] == t[k], k


def test_cholesky_reports_a_nan_pivot_as_lapack():
    # psd_safe_cholesky's NanError path needs cholesky_ex to flag NaN: LAPACK's potrf stops at the
    # first NaN pivot (info = its 1-based column), NumPy's OpenBLAS kernel went on with info 0
    A = np.array([[4.0, 2.0, 0.0], [2.0, 3.0, 1.0], [0.0, 1.0, 2.0]])
    B = np.stack([A, A, A, np.eye(3), -np.eye(3)])
    B[0, 2, 1] = np.nan  # lower triangle: pivot 3
    B[1, 1, 1] = np.nan  # pivot 2
    B[2, 0, 2] = np.nan  # upper triangle: never read
    L, info = lucid.linalg.cholesky_ex(lucid.tensor(B))
    assert info.tolist() == [3, 2, 0, 0, 1]
    np.testing.assert_allclose(L[2].cpu().numpy(), np.linalg.cholesky(A), rtol=1e-12)
    assert lucid.linalg.cholesky_ex(lucid.tensor(B[0])).info.item() == 3
    if lucid.get_default_device().type == "cpu":
        with pytest.raises(RuntimeError, match="not positive-definite"):
            lucid.linalg.cholesky(lucid.tensor(B[1]))
    else:  # a device's factorization reads no status back (README "GPU"): its factor holds NaN
        assert np.isnan(lucid.linalg.cholesky(lucid.tensor(B[1])).cpu().numpy()).any()
    for shape in [(0, 0), (2, 0, 0), (0, 3, 3)]:  # empty matrices and batches: nothing to flag
        L, info = lucid.linalg.cholesky_ex(lucid.zeros(*shape))
        assert tuple(L.shape) == shape and tuple(info.shape) == shape[:-2] and info.dtype == lucid.int32
        assert tuple(lucid.linalg.cholesky(lucid.zeros(*shape)).shape) == shape


def interp_lib(torch):
    """gpytorch's ``utils/interpolation.py`` (cubic ``Interpolation``) and linear_operator's
    ``utils/interpolation.py``, ``utils/sparse.py`` and ``functions/_dsmm.py``."""
    key = "interp:" + torch.__name__
    if key in _LIBS:
        return _LIBS[key]
    from functools import reduce
    from operator import mul

    _matmul_broadcast_shape = linop_lib(torch)._matmul_broadcast_shape

    class Interpolation(object):
        def _cubic_interpolation_kernel(self, scaled_grid_dist):
            U = scaled_grid_dist.abs()
            res = torch.zeros(U.size(), dtype=U.dtype, device=U.device)

            U_lt_1 = 1 - U.floor().clamp(0, 1)  # U, if U < 1, 0 otherwise
            res = res + (((1.5 * U - 2.5).mul(U)).mul(U) + 1) * U_lt_1

            # u(s) = -0.5|s|^3 + 2.5|s|^2 - 4|s| + 2 when 1 < |s| < 2
            U_ge_1_le_2 = 1 - U_lt_1  # U, if U <= 1 <= 2, 0 otherwise
            res = res + (((-0.5 * U + 2.5).mul(U) - 4).mul(U) + 2) * U_ge_1_le_2
            return res

        def interpolate(self, x_grid, x_target, interp_points=range(-2, 2), eps=1e-10):
            num_target_points = x_target.size(0)
            num_dim = x_target.size(-1)
            assert num_dim == len(x_grid)

            grid_sizes = [len(x_grid[i]) for i in range(num_dim)]
            # Do some boundary checking, # min/max along each dimension
            x_target_max = x_target.max(0)[0]
            x_target_min = x_target.min(0)[0]
            grid_mins = torch.stack([x_grid[i].min() for i in range(num_dim)], dim=0).to(x_target_min)
            grid_maxs = torch.stack([x_grid[i].max() for i in range(num_dim)], dim=0).to(x_target_max)

            lt_min_mask = (x_target_min - grid_mins).lt(-1e-7)
            gt_max_mask = (x_target_max - grid_maxs).gt(1e-7)
            if lt_min_mask.sum().item():
                first_out_of_range = lt_min_mask.nonzero(as_tuple=False).squeeze(1)[0].item()
                raise RuntimeError(
                    (
                        "Received data that was out of bounds for the specified grid. "
                        "Grid bounds were ({0:.3f}, {0:.3f}), but min = {0:.3f}, "
                        "max = {0:.3f}"
                    ).format(
                        grid_mins[first_out_of_range].item(),
                        grid_maxs[first_out_of_range].item(),
                        x_target_min[first_out_of_range].item(),
                        x_target_max[first_out_of_range].item(),
                    )
                )
            if gt_max_mask.sum().item():
                first_out_of_range = gt_max_mask.nonzero(as_tuple=False).squeeze(1)[0].item()
                raise RuntimeError(
                    (
                        "Received data that was out of bounds for the specified grid. "
                        "Grid bounds were ({0:.3f}, {0:.3f}), but min = {0:.3f}, "
                        "max = {0:.3f}"
                    ).format(
                        grid_mins[first_out_of_range].item(),
                        grid_maxs[first_out_of_range].item(),
                        x_target_min[first_out_of_range].item(),
                        x_target_max[first_out_of_range].item(),
                    )
                )

            # Now do interpolation
            interp_points = torch.tensor(interp_points, dtype=x_grid[0].dtype, device=x_grid[0].device)
            interp_points_flip = interp_points.flip(0)  # [1, 0, -1, -2]

            num_coefficients = len(interp_points)

            interp_values = torch.ones(
                num_target_points, num_coefficients ** num_dim, dtype=x_grid[0].dtype, device=x_grid[0].device
            )
            interp_indices = torch.zeros(
                num_target_points, num_coefficients ** num_dim, dtype=torch.long, device=x_grid[0].device
            )

            for i in range(num_dim):
                num_grid_points = x_grid[i].size(0)
                grid_delta = (x_grid[i][1] - x_grid[i][0]).clamp_min_(eps)
                # left-bounding grid point in index space
                lower_grid_pt_idxs = torch.floor((x_target[:, i] - x_grid[i][0]) / grid_delta)
                # distance from that left-bounding grid point, again in index space
                lower_pt_rel_dists = (x_target[:, i] - x_grid[i][0]) / grid_delta - lower_grid_pt_idxs
                lower_grid_pt_idxs = lower_grid_pt_idxs - interp_points.max()  # ends up being the left-most (relevant) pt
                lower_grid_pt_idxs.detach_()

                if len(lower_grid_pt_idxs.shape) == 0:
                    lower_grid_pt_idxs = lower_grid_pt_idxs.unsqueeze(0)

                # get the interp. coeff. based on distances to interpolating points
                scaled_dist = lower_pt_rel_dists.unsqueeze(-1) + interp_points_flip.unsqueeze(-2)
                dim_interp_values = self._cubic_interpolation_kernel(scaled_dist)

                # Find points who's closest lower grid point is the first grid point
                # This corresponds to a boundary condition that we must fix manually.
                left_boundary_pts = (lower_grid_pt_idxs < 0).nonzero(as_tuple=False)
                num_left = len(left_boundary_pts)

                if num_left > 0:
                    left_boundary_pts.squeeze_(1)
                    x_grid_first = x_grid[i][:num_coefficients].unsqueeze(1).t().expand(num_left, num_coefficients)

                    grid_targets = x_target.select(1, i)[left_boundary_pts].unsqueeze(1).expand(num_left, num_coefficients)
                    dists = torch.abs(x_grid_first - grid_targets)
                    closest_from_first = torch.min(dists, 1)[1]

                    for j in range(num_left):
                        dim_interp_values[left_boundary_pts[j], :] = 0
                        dim_interp_values[left_boundary_pts[j], closest_from_first[j]] = 1
                        lower_grid_pt_idxs[left_boundary_pts[j]] = 0

                right_boundary_pts = (lower_grid_pt_idxs > num_grid_points - num_coefficients).nonzero(as_tuple=False)
                num_right = len(right_boundary_pts)

                if num_right > 0:
                    right_boundary_pts.squeeze_(1)
                    x_grid_last = x_grid[i][-num_coefficients:].unsqueeze(1).t().expand(num_right, num_coefficients)

                    grid_targets = x_target.select(1, i)[right_boundary_pts].unsqueeze(1)
                    grid_targets = grid_targets.expand(num_right, num_coefficients)
                    dists = torch.abs(x_grid_last - grid_targets)
                    closest_from_last = torch.min(dists, 1)[1]

                    for j in range(num_right):
                        dim_interp_values[right_boundary_pts[j], :] = 0
                        dim_interp_values[right_boundary_pts[j], closest_from_last[j]] = 1
                        lower_grid_pt_idxs[right_boundary_pts[j]] = num_grid_points - num_coefficients

                offset = (interp_points - interp_points.min()).long().unsqueeze(-2)
                dim_interp_indices = lower_grid_pt_idxs.long().unsqueeze(-1) + offset  # indices of corresponding ind. pts.

                n_inner_repeat = num_coefficients ** i
                n_outer_repeat = num_coefficients ** (num_dim - i - 1)
                index_coeff = reduce(mul, grid_sizes[i + 1:], 1)  # Think this is right...
                dim_interp_indices = dim_interp_indices.unsqueeze(-1).repeat(1, n_inner_repeat, n_outer_repeat)
                dim_interp_values = dim_interp_values.unsqueeze(-1).repeat(1, n_inner_repeat, n_outer_repeat)
                # compute the lexicographical position of the indices in the d-dimensional grid points
                interp_indices = interp_indices.add(dim_interp_indices.view(num_target_points, -1).mul(index_coeff))
                interp_values = interp_values.mul(dim_interp_values.view(num_target_points, -1))

            return interp_indices, interp_values

    # ---- linear_operator/utils/interpolation.py -------------------------------------------------
    def left_interp(interp_indices, interp_values, rhs):
        is_vector = rhs.ndimension() == 1

        if is_vector:
            res = rhs.index_select(0, interp_indices.view(-1)).view(*interp_values.size())
            res = res.mul(interp_values)
            res = res.sum(-1)
            return res

        else:
            num_rows, num_interp = interp_indices.shape[-2:]
            num_data, num_columns = rhs.shape[-2:]
            interp_shape = torch.Size((*interp_indices.shape[:-1], num_data))
            output_shape = _matmul_broadcast_shape(interp_shape, rhs.shape)
            batch_shape = output_shape[:-2]

            interp_indices_expanded = interp_indices.unsqueeze(-1).expand(*batch_shape, num_rows, num_interp, num_columns)
            interp_values_expanded = interp_values.unsqueeze(-1).expand(*batch_shape, num_rows, num_interp, num_columns)
            rhs_expanded = rhs.unsqueeze(-2).expand(*batch_shape, num_data, num_interp, num_columns)
            res = rhs_expanded.gather(-3, interp_indices_expanded).mul(interp_values_expanded)
            return res.sum(-2)

    def left_t_interp(interp_indices, interp_values, rhs, output_dim):
        is_vector = rhs.ndimension() == 1
        if is_vector:
            rhs = rhs.unsqueeze(-1)

        # Multiply the rhs by the interp_values
        # This multiplication here will give us the ability to perform backprop
        values = rhs.unsqueeze(-2) * interp_values.unsqueeze(-1)

        # Define a bunch of sizes
        num_data, num_interp = interp_values.shape[-2:]
        num_cols = rhs.size(-1)
        interp_shape = torch.Size((*interp_indices.shape[:-2], output_dim, num_data))
        output_shape = _matmul_broadcast_shape(interp_shape, rhs.shape)
        batch_shape = output_shape[:-2]
        batch_size = batch_shape.numel()

        # Using interp_indices, create a sparse matrix that will sum up the values
        interp_indices = interp_indices.expand(*batch_shape, *interp_indices.shape[-2:]).contiguous()
        batch_indices = torch.arange(0, batch_size, dtype=torch.long, device=values.device).unsqueeze_(1)
        batch_indices = batch_indices.repeat(1, num_data * num_interp)
        column_indices = torch.arange(0, num_data * num_interp, dtype=torch.long, device=values.device).unsqueeze_(1)
        column_indices = column_indices.repeat(batch_size, 1)
        summing_matrix_indices = torch.stack([batch_indices.view(-1), interp_indices.view(-1), column_indices.view(-1)], 0)
        summing_matrix_values = torch.ones(
            batch_size * num_data * num_interp,
            dtype=interp_values.dtype,
            device=interp_values.device,
        )
        size = torch.Size((batch_size, output_dim, num_data * num_interp))
        summing_matrix = torch.sparse_coo_tensor(
            summing_matrix_indices,
            summing_matrix_values,
            size,
            dtype=summing_matrix_values.dtype,
            device=summing_matrix_values.device,
        )

        # Sum up the values appropriately by performing sparse matrix multiplication
        values = values.reshape(batch_size, num_data * num_interp, num_cols)
        res = dsmm(summing_matrix, values)

        res = res.view(*batch_shape, *res.shape[-2:])
        if is_vector:
            res = res.squeeze(-1)
        return res

    # ---- linear_operator/functions/_dsmm.py and utils/sparse.py ---------------------------------
    class DSMM(torch.autograd.Function):
        @staticmethod
        def forward(ctx, sparse, dense):
            ctx.sparse = sparse
            return bdsmm(ctx.sparse, dense)

        @staticmethod
        def backward(ctx, grad_output):
            return None, bdsmm(ctx.sparse.mT, grad_output)

    def dsmm(sparse_mat, dense_mat):
        return DSMM.apply(sparse_mat, dense_mat)

    def make_sparse_from_indices_and_values(interp_indices, interp_values, num_rows):
        if not torch.is_tensor(interp_indices):
            raise RuntimeError("interp_indices and interp_values should be tensors")

        # Is it batch mode?
        batch_shape = interp_values.shape[:-2]
        n_target_points, n_coefficients = interp_values.shape[-2:]

        # Index tensor
        batch_tensors = []
        for i, batch_size in enumerate(batch_shape):
            batch_tensor = torch.arange(0, batch_size, dtype=torch.long, device=interp_values.device)
            batch_tensor = (
                batch_tensor.unsqueeze_(1)
                .repeat(
                    batch_shape[:i].numel(),
                    batch_shape[i + 1:].numel() * n_target_points * n_coefficients,
                )
                .view(-1)
            )
            batch_tensors.append(batch_tensor)

        row_tensor = torch.arange(0, n_target_points, dtype=torch.long, device=interp_values.device)
        row_tensor = row_tensor.unsqueeze_(1).repeat(batch_shape.numel(), n_coefficients).view(-1)
        index_tensor = torch.stack([*batch_tensors, interp_indices.reshape(-1), row_tensor], 0)

        # Value tensor
        value_tensor = interp_values.reshape(-1)
        nonzero_indices = value_tensor.nonzero(as_tuple=False)
        if nonzero_indices.storage():
            nonzero_indices.squeeze_()
            index_tensor = index_tensor.index_select(1, nonzero_indices)
            value_tensor = value_tensor.index_select(0, nonzero_indices)
        else:
            index_tensor = index_tensor.resize_(interp_indices.dim(), 1).zero_()
            value_tensor = value_tensor.resize_(1).zero_()

        # Make the sparse tensor
        type_name = value_tensor.type().split(".")[-1]  # e.g. FloatTensor
        interp_size = torch.Size((*batch_shape, num_rows, n_target_points))
        if index_tensor.is_cuda:
            cls = getattr(torch.cuda.sparse, type_name)
        else:
            cls = getattr(torch.sparse, type_name)
        res = cls(index_tensor, value_tensor, interp_size)

        # Wrap things as a variable, if necessary
        return res

    def bdsmm(sparse, dense):
        # Make the batch sparse matrix into a block-diagonal matrix
        if sparse.ndimension() > 2:
            # Expand the tensors to account for broadcasting
            output_shape = _matmul_broadcast_shape(sparse.shape, dense.shape)
            expanded_sparse_shape = output_shape[:-2] + sparse.shape[-2:]
            unsqueezed_sparse_shape = [1 for _ in range(len(output_shape) - sparse.dim())] + list(sparse.shape)
            repeat_sizes = tuple(
                output_size // sparse_size
                for output_size, sparse_size in zip(expanded_sparse_shape, unsqueezed_sparse_shape)
            )
            sparse = sparse_repeat(sparse, *repeat_sizes)
            dense = dense.expand(*output_shape[:-2], dense.size(-2), dense.size(-1))

            # Figure out how much need to be added to the row/column indices to create
            # a block-diagonal matrix
            *batch_shape, num_rows, num_cols = sparse.shape
            batch_size = torch.Size(batch_shape).numel()
            batch_multiplication_factor = torch.tensor(
                [torch.Size(batch_shape[i + 1:]).numel() for i in range(len(batch_shape))],
                dtype=torch.long,
                device=sparse.device,
            )
            if batch_multiplication_factor.is_cuda:
                batch_assignment = (sparse._indices()[:-2].float().t() @ batch_multiplication_factor.float()).long()
            else:
                batch_assignment = sparse._indices()[:-2].t() @ batch_multiplication_factor

            # Create block-diagonal sparse tensor
            indices = sparse._indices()[-2:].clone()
            indices[0].add_(batch_assignment, alpha=num_rows)
            indices[1].add_(batch_assignment, alpha=num_cols)
            sparse_2d = torch.sparse_coo_tensor(
                indices,
                sparse._values(),
                torch.Size((batch_size * num_rows, batch_size * num_cols)),
                dtype=sparse._values().dtype,
                device=sparse._values().device,
            )

            dense_2d = dense.reshape(batch_size * num_cols, -1)
            res = torch.dsmm(sparse_2d, dense_2d)
            res = res.view(*batch_shape, num_rows, -1)
            return res

        elif dense.dim() > 2:
            *batch_shape, num_rows, num_cols = dense.size()
            batch_size = torch.Size(batch_shape).numel()
            dense = dense.view(batch_size, num_rows, num_cols)
            res = torch.dsmm(sparse, dense.transpose(0, 1).reshape(-1, batch_size * num_cols))
            res = res.view(-1, batch_size, num_cols)
            res = res.transpose(0, 1).reshape(*batch_shape, -1, num_cols)
            return res

        else:
            return torch.dsmm(sparse, dense)

    def sparse_eye(size):
        indices = torch.arange(0, size).long().unsqueeze(0).expand(2, size)
        values = torch.tensor(1.0).expand(size)
        cls = getattr(torch.sparse, values.type().split(".")[-1])
        return cls(indices, values, torch.Size([size, size]))

    def sparse_getitem(sparse, idxs):
        if not isinstance(idxs, tuple):
            idxs = (idxs,)

        if not sparse.ndimension() <= 2:
            raise RuntimeError("Must be a 1d or 2d sparse tensor")

        if len(idxs) > sparse.ndimension():
            raise RuntimeError("Invalid index for %d-order tensor" % sparse.ndimension())

        indices = sparse._indices()
        values = sparse._values()
        size = list(sparse.size())

        for i, idx in list(enumerate(idxs))[::-1]:
            match idx:
                case int():
                    del size[i]
                    mask = indices[i].eq(idx)
                    if torch.any(mask):
                        new_indices = torch.zeros(
                            indices.size(0) - 1,
                            torch.sum(mask),
                            dtype=indices.dtype,
                            device=indices.device,
                        )
                        for j in range(indices.size(0)):
                            if i > j:
                                new_indices[j].copy_(indices[j][mask])
                            elif i < j:
                                new_indices[j - 1].copy_(indices[j][mask])
                        indices = new_indices
                        values = values[mask]
                    else:
                        indices.resize_(indices.size(0) - 1, 1).zero_()
                        values.resize_(1).zero_()

                    if not len(size):
                        return sum(values)

                case slice():
                    start, stop, step = idx.indices(size[i])
                    size = list(size[:i]) + [stop - start] + list(size[i + 1:])
                    if step != 1:
                        raise RuntimeError("Slicing with step is not supported")
                    mask = indices[i].lt(stop) & indices[i].ge(start)
                    if torch.any(mask):
                        new_indices = torch.zeros(
                            indices.size(0),
                            torch.sum(mask),
                            dtype=indices.dtype,
                            device=indices.device,
                        )
                        for j in range(indices.size(0)):
                            new_indices[j].copy_(indices[j][mask])
                        new_indices[i].sub_(start)
                        indices = new_indices
                        values = values[mask]
                    else:
                        indices.resize_(indices.size(0), 1).zero_()
                        values.resize_(1).zero_()

                case _:
                    raise RuntimeError("Unknown index type")

        return torch.sparse_coo_tensor(indices, values, torch.Size(size), dtype=values.dtype, device=values.device)

    def sparse_repeat(sparse, *repeat_sizes):
        if len(repeat_sizes) == 1 and isinstance(repeat_sizes, tuple):
            repeat_sizes = repeat_sizes[0]

        if len(repeat_sizes) > len(sparse.shape):
            num_new_dims = len(repeat_sizes) - len(sparse.shape)
            new_indices = sparse._indices()
            new_indices = torch.cat(
                [
                    torch.zeros(num_new_dims, new_indices.size(1), dtype=new_indices.dtype, device=new_indices.device),
                    new_indices,
                ],
                0,
            )
            sparse = torch.sparse_coo_tensor(
                new_indices,
                sparse._values(),
                torch.Size((*[1 for _ in range(num_new_dims)], *sparse.shape)),
                dtype=sparse.dtype,
                device=sparse.device,
            )

        for i, repeat_size in enumerate(repeat_sizes):
            if repeat_size > 1:
                new_indices = sparse._indices().repeat(1, repeat_size)
                adding_factor = torch.arange(0, repeat_size, dtype=new_indices.dtype, device=new_indices.device).unsqueeze_(
                    1
                )
                new_indices[i].view(repeat_size, -1).add_(adding_factor)
                sparse = torch.sparse_coo_tensor(
                    new_indices,
                    sparse._values().repeat(repeat_size),
                    torch.Size((*sparse.shape[:i], repeat_size * sparse.size(i), *sparse.shape[i + 1:])),
                    dtype=sparse.dtype,
                    device=sparse.device,
                )

        return sparse

    def to_sparse(dense):
        mask = dense.ne(0)
        indices = mask.nonzero(as_tuple=False)
        if indices.storage():
            values = dense[mask]
        else:
            indices = indices.resize_(1, dense.ndimension()).zero_()
            values = torch.tensor(0, dtype=dense.dtype, device=dense.device)

        # Construct sparse tensor
        klass = getattr(torch.sparse, dense.type().split(".")[-1])
        res = klass(indices.t(), values, dense.size())
        if dense.is_cuda:
            res = res.cuda()
        return res

    lib = SimpleNamespace(**{k: v for k, v in locals().items() if not k.startswith("__")})
    _LIBS[key] = lib
    return lib


# ------------------------------------------------------------------------------ interpolation, sparse
def interp_page(torch):
    G = interp_lib(torch)
    out = {}
    grid = torch.linspace(0, 1, 8, dtype=torch.float64)
    x = torch.tensor([[0.2], [0.31], [0.5], [0.64], [0.7]], dtype=torch.float64)
    idx, val = G.Interpolation().interpolate([grid], x)
    out["idx"], out["val"] = idx.tolist(), _np(val)
    xb = torch.tensor([[0.0], [0.02], [0.98], [1.0]], dtype=torch.float64)  # the boundary fix-ups
    bidx, bval = G.Interpolation().interpolate([grid], xb)
    out["bidx"], out["bval"] = bidx.tolist(), _np(bval)
    g2 = torch.linspace(-1, 1, 7, dtype=torch.float64)
    x2 = torch.tensor([[-0.5, 0.1], [0.2, -0.3], [0.0, 0.33]], dtype=torch.float64)
    idx2, val2 = G.Interpolation().interpolate([g2, g2], x2)
    out["idx2"], out["val2"] = idx2.tolist(), _np(val2)
    try:
        G.Interpolation().interpolate([grid], x + 1.0)
    except RuntimeError as e:
        out["oob"] = str(e)
    f = torch.tensor(np.random.default_rng(3).standard_normal((8, 2)))
    out["left"] = _np(G.left_interp(idx, val, f))
    out["left_vec"] = _np(G.left_interp(idx, val, f[:, 0]))
    out["left_batch"] = _np(G.left_interp(idx, val, torch.stack([f, 2 * f])))
    rhs = torch.tensor(np.random.default_rng(4).standard_normal((5, 2)), requires_grad=True)
    v = val.clone().requires_grad_(True)
    res = G.left_t_interp(idx, v, rhs, 8)
    W = torch.tensor(np.random.default_rng(5).standard_normal((8, 2)))
    (res * W).sum().backward()
    out["left_t"], out["left_t_grad_rhs"], out["left_t_grad_val"] = _np(res), _np(rhs.grad), _np(v.grad)
    out["left_t_vec"] = _np(G.left_t_interp(idx, val, rhs.detach()[:, 0], 8))
    idx_b, val_b = torch.stack([idx, idx.flip(0)]), torch.stack([val, val.flip(0)])
    out["left_t_batch"] = _np(G.left_t_interp(idx_b, val_b, rhs.detach(), 8))  # bdsmm's block diagonal
    S = G.make_sparse_from_indices_and_values(idx, val, 8)
    out["sparse"] = _np(S.to_dense())
    out["sparse_T"] = _np(G.bdsmm(S.mT, f))  # (5 x 8) times (8 x 2)
    out["sparse_getitem"] = _np(G.sparse_getitem(S, (slice(1, 6), 2)).to_dense())
    out["sparse_getitem_int"] = _np(G.sparse_getitem(S, (3, slice(0, 5))).to_dense())
    out["eye"] = _np(G.sparse_eye(4).to_dense())
    D = torch.tensor([[0.0, 1.5, 0.0], [2.0, 0.0, -1.0]])
    out["to_sparse"] = (_np(G.to_sparse(D).to_dense()), G.to_sparse(D)._nnz(), str(G.to_sparse(D).layout).split(".")[-1])
    return out


def _np_cubic(s):
    u = np.abs(s)
    return np.where(u < 1, (1.5 * u - 2.5) * u * u + 1, np.where(u < 2, ((-0.5 * u + 2.5) * u - 4) * u + 2, 0.0))


def _np_interp_matrix(grid, x):
    h = grid[1] - grid[0]
    return _np_cubic((x[:, None] - grid[None, :]) / h)


def test_cubic_interpolation_and_sparse_interp():
    r = interp_page(lucid)
    grid = np.linspace(0, 1, 8)
    x = np.array([0.2, 0.31, 0.5, 0.64, 0.7])
    Wd = np.zeros((5, 8))
    for i in range(5):
        for j, c in zip(r["idx"][i], r["val"][i]):
            Wd[i, j] += c
    np.testing.assert_allclose(Wd, _np_interp_matrix(grid, x), atol=1e-12)  # Keys' cubic kernel
    np.testing.assert_allclose(Wd.sum(1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(Wd @ (1 + 2 * grid - 3 * grid**2), 1 + 2 * x - 3 * x**2, rtol=1e-12)  # quadratics exact
    # boundary points take the nearest of the first / last four grid points with weight 1
    assert r["bidx"] == [[0, 1, 2, 3], [0, 1, 2, 3], [4, 5, 6, 7], [4, 5, 6, 7]]
    np.testing.assert_array_equal(r["bval"], [[1, 0, 0, 0], [1, 0, 0, 0], [0, 0, 0, 1], [0, 0, 0, 1]])
    g2 = np.linspace(-1, 1, 7)
    x2 = np.array([[-0.5, 0.1], [0.2, -0.3], [0.0, 0.33]])
    W2 = np.zeros((3, 49))
    for i in range(3):
        for j, c in zip(r["idx2"][i], r["val2"][i]):
            W2[i, j] += c
    want2 = np.einsum("na,nb->nab", _np_interp_matrix(g2, x2[:, 0]), _np_interp_matrix(g2, x2[:, 1])).reshape(3, 49)
    np.testing.assert_allclose(W2, want2, atol=1e-12)
    # (the page's format string repeats {0}: every number is the grid's minimum)
    assert r["oob"] == ("Received data that was out of bounds for the specified grid. Grid bounds were "
                        "(0.000, 0.000), but min = 0.000, max = 0.000")
    f = np.random.default_rng(3).standard_normal((8, 2))
    np.testing.assert_allclose(r["left"], Wd @ f, rtol=1e-12)
    np.testing.assert_allclose(r["left_vec"], Wd @ f[:, 0], rtol=1e-12)
    np.testing.assert_allclose(r["left_batch"], np.stack([Wd @ f, 2 * Wd @ f]), rtol=1e-12)
    rhs = np.random.default_rng(4).standard_normal((5, 2))
    Wg = np.random.default_rng(5).standard_normal((8, 2))
    np.testing.assert_allclose(r["left_t"], Wd.T @ rhs, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(r["left_t_grad_rhs"], Wd @ Wg, rtol=1e-12)  # DSMM.backward: sparse.mT
    want_gv = np.array([[Wg[j] @ rhs[i] for j in r["idx"][i]] for i in range(5)])
    np.testing.assert_allclose(r["left_t_grad_val"], want_gv, rtol=1e-12)
    np.testing.assert_allclose(r["left_t_vec"], Wd.T @ rhs[:, 0], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(r["left_t_batch"], np.stack([Wd.T @ rhs, Wd[::-1].T @ rhs]), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(r["sparse"], Wd.T, atol=1e-15)
    np.testing.assert_allclose(r["sparse_T"], Wd @ f, rtol=1e-12)
    np.testing.assert_allclose(r["sparse_getitem"], Wd.T[1:6, 2], atol=1e-15)
    np.testing.assert_allclose(r["sparse_getitem_int"], Wd.T[3, 0:5], atol=1e-15)
    np.testing.assert_array_equal(r["eye"], np.eye(4))
    dense, nnz, layout = r["to_sparse"]
    np.testing.assert_array_equal(dense, [[0.0, 1.5, 0.0], [2.0, 0.0, -1.0]])
    assert (nnz, layout) == (3, "sparse_coo")


def test_cubic_interpolation_and_sparse_interp_torch_parity():
    torch = pytest.importorskip("torch")
    r, t = interp_page(lucid), interp_page(torch)
    assert r.keys() == t.keys()
    for k in r:
        if isinstance(r[k], np.ndarray):
            np.testing.assert_allclose(r[k], t[k], rtol=1e-12, atol=1e-14, err_msg=k)
        elif k == "to_sparse":
            np.testing.assert_array_equal(r[k][0], t[k][0])
            assert r[k][1:] == t[k][1:]
        else:
            assert r[k] == t[k], k


def test_sparse_mT_and_mH():
    # DSMM.backward transposes its sparse matrix with .mT (was: "transpose: sparse tensors are not supported")
    s = lucid.sparse_coo_tensor([[0, 1, 1], [2, 0, 2]], [3.0, 4.0, 5.0], (2, 3))
    assert s.mT.layout == lucid.sparse_coo and s.mT.to_dense().tolist() == [[0.0, 4.0], [0.0, 0.0], [3.0, 5.0]]
    b = lucid.sparse_coo_tensor([[0, 1], [0, 1], [2, 0]], [3.0, 4.0], (2, 2, 3))
    np.testing.assert_array_equal(b.mT.to_dense().cpu().numpy(), b.to_dense().cpu().numpy().transpose(0, 2, 1))
    csr = lucid.eye(3)[:2].to_sparse_csr()
    assert csr.mT.layout == lucid.sparse_csc and csr.mT.to_dense().tolist() == [[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]
    c = lucid.sparse_coo_tensor([[0], [1]], [1 + 2j], (2, 2))
    assert c.mH.to_dense().tolist() == [[0j, 0j], [1 - 2j, 0j]]
    with pytest.raises(RuntimeError, match="tensor.mT is only supported on matrices or batches of matrices. Got 1-D"):
        lucid.sparse_coo_tensor([[0]], [1.0], (2,)).mT


def grid_lib(torch):
    """gpytorch's ``utils/grid.py`` and linear_operator's ``utils/stochastic_lq.py``."""
    key = "grid:" + torch.__name__
    if key in _LIBS:
        return _LIBS[key]

    class ScaleToBounds(torch.nn.Module):
        def __init__(self, lower_bound, upper_bound):
            super().__init__()
            self.lower_bound = float(lower_bound)
            self.upper_bound = float(upper_bound)
            self.register_buffer("min_val", torch.tensor(lower_bound))
            self.register_buffer("max_val", torch.tensor(upper_bound))

        def forward(self, x):
            if self.training:
                min_val = x.min()
                max_val = x.max()
                self.min_val.data = min_val
                self.max_val.data = max_val
            else:
                min_val = self.min_val
                max_val = self.max_val
                # Clamp extreme values
                x = x.clamp(min_val, max_val)

            diff = max_val - min_val
            x = (x - min_val) * (0.95 * (self.upper_bound - self.lower_bound) / diff) + 0.95 * self.lower_bound
            return x

    def choose_grid_size(train_inputs, ratio=1.0, kronecker_structure=True):
        # Scale features so they fit inside grid bounds
        num_data = train_inputs.numel() if train_inputs.dim() == 1 else train_inputs.size(-2)
        num_dim = 1 if train_inputs.dim() == 1 else train_inputs.size(-1)
        if kronecker_structure:
            return int(ratio * math.pow(num_data, 1.0 / num_dim))
        else:
            return ratio * num_data

    def convert_legacy_grid(grid):
        return [grid[:, i] for i in range(grid.size(-1))]

    def create_data_from_grid(grid):
        if torch.is_tensor(grid):
            grid = convert_legacy_grid(grid)
        ndims = len(grid)
        assert all(axis.dim() == 1 for axis in grid)
        projections = torch.meshgrid(*grid)
        grid_tensor = torch.stack(projections, axis=-1)
        grid_data = grid_tensor.permute(*(reversed(range(ndims + 1)))).reshape(ndims, -1).transpose(0, 1)
        return grid_data

    def create_grid(grid_sizes, grid_bounds, extend=True, device="cpu", dtype=torch.float):
        grid = []
        for i in range(len(grid_bounds)):
            grid_diff = float(grid_bounds[i][1] - grid_bounds[i][0]) / (grid_sizes[i] - 2)
            if extend:
                proj = torch.linspace(
                    grid_bounds[i][0] - grid_diff, grid_bounds[i][1] + grid_diff, grid_sizes[i], device=device, dtype=dtype,
                )
            else:
                proj = torch.linspace(grid_bounds[i][0], grid_bounds[i][1], grid_sizes[i], device=device, dtype=dtype,)
            grid.append(proj)
        return grid

    class StochasticLQ(object):
        def __init__(self, max_iter=15, num_random_probes=10):
            self.max_iter = max_iter
            self.num_random_probes = num_random_probes

        def to_dense(self, matrix_shape, eigenvalues, eigenvectors, funcs):
            batch_shape = torch.Size(eigenvalues.shape[1:-1])
            results = [torch.zeros(batch_shape, dtype=eigenvalues.dtype, device=eigenvalues.device) for _ in funcs]
            num_random_probes = eigenvalues.size(0)
            for j in range(num_random_probes):
                # These are (num_batch x k) and (num_batch x k x k)
                eigenvalues_for_probe = eigenvalues[j]
                eigenvectors_for_probe = eigenvectors[j]
                for i, func in enumerate(funcs):
                    # First component of eigenvecs is (num_batch x k)
                    eigenvecs_first_component = eigenvectors_for_probe[..., 0, :]
                    func_eigenvalues = func(eigenvalues_for_probe)

                    dot_products = (eigenvecs_first_component.pow(2) * func_eigenvalues).sum(-1)
                    results[i] = results[i] + matrix_shape[-1] / float(num_random_probes) * dot_products

            return results

    lib = SimpleNamespace(**{k: v for k, v in locals().items() if not k.startswith("__")})
    _LIBS[key] = lib
    return lib


def grid_page(torch, D):
    G, L = grid_lib(torch), gpytorch_lib(torch)
    out = {}
    x = torch.tensor(D.x1)
    sc = G.ScaleToBounds(-1.0, 1.0)
    out["scaled_train"] = _np(sc(x))
    out["buffers"] = (sc.min_val.item(), sc.max_val.item())
    sc.eval()
    out["scaled_eval"] = _np(sc(torch.tensor(D.x3) * 2))  # clamped to the training range first
    out["grid_size"] = (G.choose_grid_size(x), G.choose_grid_size(x[:, 0]), G.choose_grid_size(x, 2.0, False))
    grid = G.create_grid([5, 4], [(0.0, 1.0), (-1.0, 2.0)], dtype=torch.float64)
    out["grid"] = [_np(g) for g in grid]
    out["grid_noext"] = [_np(g) for g in G.create_grid([3], [(0.0, 1.0)], extend=False)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch asks for meshgrid's indexing= (the default is "ij")
        out["grid_data"] = _np(G.create_data_from_grid(grid))
        out["grid_data_legacy"] = _np(G.create_data_from_grid(torch.stack([grid[0][:4], grid[1]], -1)))
    # stochastic Lanczos quadrature from one probe with a full Lanczos run: n q0' f(A) q0 exactly
    A, B = torch.tensor(D.A), torch.tensor(D.B)
    q_mat, t_mat = L.lanczos_tridiag(A.matmul, 6, dtype=A.dtype, device=A.device, matrix_shape=A.shape[-2:],
                                     batch_shape=A.shape[:-2], init_vecs=B[..., :1].contiguous())
    evals, evecs = L.lanczos_tridiag_to_diag(t_mat)
    logdet, trinv = G.StochasticLQ().to_dense(A.shape[-2:], evals.unsqueeze(0), evecs.unsqueeze(0),
                                              [lambda x: x.log(), lambda x: x.reciprocal()])
    out["slq"] = (_np(logdet), _np(trinv))
    return out


def test_grid_utils_and_stochastic_lq():
    D = _data()
    r = grid_page(lucid, D)
    lo, hi = D.x1.min(), D.x1.max()
    np.testing.assert_allclose(r["scaled_train"], (D.x1 - lo) * (0.95 * 2 / (hi - lo)) - 0.95, rtol=1e-12)
    assert r["buffers"] == (lo, hi)
    np.testing.assert_allclose(r["scaled_eval"], (np.clip(2 * D.x3, lo, hi) - lo) * (0.95 * 2 / (hi - lo)) - 0.95,
                               rtol=1e-12)
    assert r["grid_size"] == (2, 5, 10.0)
    np.testing.assert_allclose(r["grid"][0], np.linspace(-1 / 3, 4 / 3, 5), rtol=1e-12)
    np.testing.assert_allclose(r["grid"][1], np.linspace(-2.5, 3.5, 4), rtol=1e-12)
    np.testing.assert_allclose(r["grid_noext"][0], [0.0, 0.5, 1.0])
    assert r["grid_noext"][0].dtype == np.float32
    g0, g1 = r["grid"]
    want = np.array([[a, b] for b in g1 for a in g0])  # the first dimension varies fastest
    np.testing.assert_allclose(r["grid_data"], want, rtol=1e-12)
    np.testing.assert_allclose(r["grid_data_legacy"], np.array([[a, b] for b in g1 for a in g0[:4]]), rtol=1e-12)
    logdet, trinv = r["slq"]
    for b in range(2):
        q0 = D.B[b, :, 0] / np.linalg.norm(D.B[b, :, 0])
        w, V = np.linalg.eigh(D.A[b])
        np.testing.assert_allclose(logdet[b], 6 * q0 @ V @ np.diag(np.log(w)) @ V.T @ q0, rtol=1e-8)
        np.testing.assert_allclose(trinv[b], 6 * q0 @ np.linalg.solve(D.A[b], q0), rtol=1e-8)


def test_grid_utils_and_stochastic_lq_torch_parity():
    torch = pytest.importorskip("torch")
    D = _data()
    r, t = grid_page(lucid, D), grid_page(torch, D)
    for k in r:
        if isinstance(r[k], (list, tuple)) and r[k] and isinstance(r[k][0], np.ndarray):
            for a, b in zip(r[k], t[k]):
                assert a.dtype == b.dtype
                np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12, err_msg=k)
        elif isinstance(r[k], np.ndarray):
            np.testing.assert_allclose(r[k], t[k], rtol=1e-12, atol=1e-14, err_msg=k)
        else:
            assert r[k] == t[k], k
