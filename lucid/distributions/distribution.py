"""The ``Distribution`` base class (PyTorch's interface and semantics)."""
from __future__ import annotations

import warnings

import numpy as np

import lucid
from . import constraints
from .utils import concrete, lazy_property

__all__ = ["Distribution"]

# NOTE [Distributions on a device]
# A distribution lives where its parameters are, whatever the default device (PyTorch's rule):
# every tensor it makes from nothing is made beside a parameter or an operand. Noise is drawn
# with ``device=param.device`` (so on a GPU it comes from that device's generator, NOTE [Random
# numbers on devices], and need not equal the CPU's draw); numbers given as parameters become
# tensors on the first tensor parameter's device (``broadcast_all``, ``as_float``); constants
# (``arange``/``eye``/``full``, index and offset tensors) take ``device=`` of the tensor they
# meet. sample/rsample, log_prob, cdf/icdf, entropy, the moments, the KL closed forms and the
# transforms read nothing back. The reads that remain are explicit (``.item()``/``.tolist()``)
# and are PyTorch's too: validation (``_holds``: a constraint is checked on the device and its
# one verdict read), the size of a Binomial's support (enumerate_support, entropy; Multinomial's
# entropy), Wishart's test for singular draws, the Binomial KL's total-count check and the
# comparison of transform parameters (``_eq_params``). Samplers with no device kernel (Poisson,
# Binomial, NegativeBinomial quantiles, VonMises's rejection loop) copy to the host and back
# explicitly (NOTE [Host fallback]). tests/distributions/test_on_a_device.py checks every
# exported distribution and transform on the strict stand-in against the CPU.


def _shape(s, what):
    try:
        return tuple(int(d) for d in s)
    except TypeError:
        raise TypeError(f"{what} must be a tuple of ints, got {s!r}") from None


def _holds(constraint, value):
    """Whether every entry of ``value`` satisfies ``constraint``. See NOTE [Validation through transforms].

    The check runs on ``value``'s device; its one-element verdict is then read back explicitly
    (``item``): validation reads a value, as PyTorch's does (NOTE [Distributions on a device])."""
    with lucid.no_grad():
        valid = constraint.check(value)
    return bool(concrete(valid).all().item())


class Distribution:
    """Base class of probability distributions.

    A distribution has a ``batch_shape`` (independent, not identically distributed
    copies) and an ``event_shape`` (the shape of one draw of one copy). ``sample`` and
    ``rsample`` return tensors of shape ``sample_shape + batch_shape + event_shape``;
    ``log_prob(value)`` reduces the event dims.

    Parameters
    ----------
    batch_shape, event_shape : tuple of int
    validate_args : bool, optional
        Check parameters (at construction) and values (in ``log_prob``, ``cdf``, ...)
        against ``arg_constraints`` and ``support``; a failure raises ``ValueError`` naming
        the parameter, the distribution and the constraint. Default: on (as in PyTorch
        with Python's ``__debug__``); see :meth:`set_default_validate_args`.

    Examples
    --------
    >>> import lucid
    >>> from lucid.distributions import Normal
    >>> d = Normal(lucid.zeros(3), 1.0)
    >>> d.batch_shape, d.event_shape, d.sample((2,)).shape
    ((3,), (), (2, 3))
    """

    has_rsample = False
    has_enumerate_support = False
    _validate_args = __debug__

    @staticmethod
    def set_default_validate_args(value):
        """Turn argument validation on or off for every distribution created afterwards."""
        if value is not True and value is not False:
            raise ValueError(f"set_default_validate_args: expected True or False, got {value!r}")
        Distribution._validate_args = value

    def __init__(self, batch_shape=(), event_shape=(), validate_args=None):
        self._batch_shape = _shape(batch_shape, f"{type(self).__name__}: batch_shape")
        self._event_shape = _shape(event_shape, f"{type(self).__name__}: event_shape")
        if validate_args is not None:
            self._validate_args = validate_args
        if self._validate_args:
            self._check_parameters()

    def _check_parameters(self):
        try:
            arg_constraints = self.arg_constraints
        except NotImplementedError:
            arg_constraints = {}
            warnings.warn(f"{type(self).__name__} does not define `arg_constraints`. Please set "
                          "`arg_constraints = {}` or initialize the distribution with "
                          "`validate_args=False` to turn off validation.", stacklevel=3)
        for param, constraint in arg_constraints.items():
            if constraints.is_dependent(constraint):
                continue
            if param not in self.__dict__ and isinstance(getattr(type(self), param, None), lazy_property):
                continue  # not given (e.g. logits when probs was)
            value = getattr(self, param)
            if isinstance(value, lucid.Tensor) and not _holds(constraint, value):
                raise ValueError(
                    f"Expected parameter {param} ({type(value).__name__} of shape {tuple(value.shape)}) "
                    f"of distribution {self!r} to satisfy the constraint {constraint!r}, but found "
                    f"invalid values:\n{concrete(value)}")

    def expand(self, batch_shape, _instance=None):
        """A new distribution with ``batch_shape`` (parameters broadcast as views, no copy).

        Parameters
        ----------
        batch_shape : tuple of int
            The new batch shape (the current one must broadcast to it).
        """
        batch_shape = _shape(batch_shape, f"{type(self).__name__}.expand: batch_shape")
        try:
            np.broadcast_shapes(self.batch_shape, batch_shape)
            if np.broadcast_shapes(self.batch_shape, batch_shape) != batch_shape:
                raise ValueError
        except ValueError:
            raise ValueError(f"{type(self).__name__}.expand: the batch shape {self.batch_shape} cannot be "
                             f"expanded to {batch_shape}") from None
        new = self._get_checked_instance(type(self), _instance)
        for name, value in self.__dict__.items():
            new.__dict__[name] = value
        for name, event_dim in self._param_event_dims().items():
            if name in self.__dict__ and isinstance(self.__dict__[name], lucid.Tensor):
                v = self.__dict__[name]
                tail = tuple(v.shape[v.ndim - event_dim:]) if event_dim else ()
                new.__dict__[name] = v.expand(batch_shape + tail)
        Distribution.__init__(new, batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def _param_event_dims(self):
        """``{attribute: event_dim}`` of the tensors :meth:`expand` broadcasts.

        By default the attributes named in ``arg_constraints`` with the constraint's event
        dim; subclasses with other state override this.
        """
        out = {}
        for name, c in self.arg_constraints.items():
            try:
                out[name] = c.event_dim
            except NotImplementedError:
                out[name] = 0
        return out

    def _get_checked_instance(self, cls, _instance=None):
        if _instance is None and type(self).__init__ != cls.__init__:
            raise NotImplementedError(
                f"Subclass {self.__class__.__name__} of {cls.__name__} that defines a custom __init__ "
                "method must also define a custom .expand() method.")
        return self.__new__(type(self)) if _instance is None else _instance

    @property
    def batch_shape(self):
        """The shape over which parameters are batched."""
        return self._batch_shape

    @property
    def event_shape(self):
        """The shape of a single sample (without batching)."""
        return self._event_shape

    @property
    def arg_constraints(self):
        """``{parameter name: Constraint}`` the parameters must satisfy."""
        raise NotImplementedError

    @property
    def support(self):
        """The :class:`Constraint` of this distribution's support."""
        raise NotImplementedError

    @property
    def mean(self):
        raise NotImplementedError(f"{type(self).__name__}: mean is not implemented")

    @property
    def mode(self):
        raise NotImplementedError(f"{type(self).__name__} does not implement mode")

    @property
    def variance(self):
        raise NotImplementedError(f"{type(self).__name__}: variance is not implemented")

    @property
    def stddev(self):
        """Standard deviation (square root of the variance)."""
        return self.variance.sqrt()

    def sample(self, sample_shape=()):
        """A sample (no gradient) of shape ``sample_shape + batch_shape + event_shape``.

        Under ``vmap`` the draw follows the ``randomness`` mode (NOTE [vmap randomness]).
        """
        with lucid.no_grad():
            return self.rsample(sample_shape).detach()

    def rsample(self, sample_shape=()):
        """A reparameterised sample: differentiable with respect to the parameters."""
        raise NotImplementedError(f"{type(self).__name__} has no reparameterised sampler (has_rsample=False)")

    def sample_n(self, n):
        warnings.warn("sample_n will be deprecated. Use .sample((n,)) instead", UserWarning, stacklevel=2)
        return self.sample((n,))

    def log_prob(self, value):
        """Log of the density (or mass) at ``value``."""
        raise NotImplementedError(f"{type(self).__name__}: log_prob is not implemented")

    def cdf(self, value):
        """Cumulative distribution function at ``value``."""
        raise NotImplementedError(f"{type(self).__name__}: cdf is not implemented")

    def icdf(self, value):
        """Inverse cumulative distribution function at ``value``."""
        raise NotImplementedError(f"{type(self).__name__}: icdf is not implemented")

    def enumerate_support(self, expand=True):
        """All values of a discrete support, along a new leading dim."""
        raise NotImplementedError(f"{type(self).__name__}: enumerate_support is not implemented")

    def entropy(self):
        """Entropy, of shape ``batch_shape``."""
        raise NotImplementedError(f"{type(self).__name__}: entropy is not implemented")

    def perplexity(self):
        """``exp(entropy)``."""
        return lucid.exp(self.entropy())

    def _extended_shape(self, sample_shape=()):
        if not isinstance(sample_shape, tuple):
            sample_shape = tuple(sample_shape) if hasattr(sample_shape, "__iter__") else (int(sample_shape),)
        return sample_shape + self._batch_shape + self._event_shape

    def _validate_sample(self, value):
        """Check ``value`` is a tensor whose shape fits and whose entries are in the support."""
        name = type(self).__name__
        if not isinstance(value, lucid.Tensor):
            raise ValueError(f"{name}: the value argument must be a lucid.Tensor, got {type(value).__name__}")
        event_dim_start = len(value.shape) - len(self._event_shape)
        if tuple(value.shape[event_dim_start:]) != self._event_shape:
            raise ValueError(f"{name}: the right-most size of value must match event_shape: "
                             f"{tuple(value.shape)} vs {self._event_shape}.")
        actual_shape = tuple(value.shape)
        expected_shape = self._batch_shape + self._event_shape
        for i, j in zip(reversed(actual_shape), reversed(expected_shape)):
            if i != 1 and j != 1 and i != j:
                raise ValueError(f"{name}: value with shape {actual_shape} is not broadcastable with "
                                 f"batch_shape+event_shape: {expected_shape}.")
        try:
            support = self.support
        except NotImplementedError:
            warnings.warn(f"{name} does not define `support` to enable sample validation. Please "
                          "initialize the distribution with `validate_args=False` to turn off validation.")
            return
        if not _holds(support, value):
            raise ValueError(f"Expected value argument ({type(value).__name__} of shape {actual_shape}) to be "
                             f"within the support ({support!r}) of the distribution {self!r}, but found "
                             f"invalid values:\n{concrete(value)}")

    def __repr__(self):
        names = [k for k in self.arg_constraints if k in self.__dict__]
        parts = []
        for p in names:
            v = self.__dict__[p]
            if isinstance(v, lucid.Tensor) and type(v) is lucid.Tensor and v.numel() == 1:
                parts.append(f"{p}: {v.detach()}")
            else:
                parts.append(f"{p}: {tuple(v.shape) if hasattr(v, 'shape') else v}")
        return f"{type(self).__name__}({', '.join(parts)})"
