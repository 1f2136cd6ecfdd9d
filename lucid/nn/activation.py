"""Activation modules: thin wrappers over ``lucid.nn.functional``."""
from __future__ import annotations

from . import functional as F
from ._functional_ref import functional_ref
from .module import Module

__all__ = [
    "ReLU", "ReLU6", "LeakyReLU", "ELU", "SELU", "CELU", "GELU", "SiLU", "Mish", "Tanh", "Sigmoid",
    "Softplus", "Softmax", "LogSoftmax", "Softmin", "Hardtanh", "Hardsigmoid", "Hardswish",
    "Softsign", "LogSigmoid", "Tanhshrink", "Threshold", "GLU", "PReLU", "RReLU", "Hardshrink", "Softshrink",
    "Softmax2d",
]


class ReLU(Module):
    """``max(x, 0)``.

    Parameters
    ----------
    inplace : bool
        Change the input in place and return it (default False).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.ReLU()(lucid.tensor([-1.0, 1.0]))
    tensor([0., 1.])
    """

    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return F.relu(input, inplace=self.inplace)

    def extra_repr(self):
        return "inplace=True" if self.inplace else ""


class LeakyReLU(Module):
    """``x`` for ``x > 0`` else ``negative_slope * x``.

    Parameters
    ----------
    negative_slope : float
        Slope for negative inputs (default 0.01).
    inplace : bool
        Change the input in place and return it (default False).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.LeakyReLU(0.5)(lucid.tensor([-2.0, 3.0])).tolist()
    [-1.0, 3.0]
    """
    def __init__(self, negative_slope=0.01, inplace=False):
        super().__init__()
        self.negative_slope, self.inplace = negative_slope, inplace

    def forward(self, input):
        return F.leaky_relu(input, negative_slope=self.negative_slope, inplace=self.inplace)

    def extra_repr(self):
        return f"negative_slope={self.negative_slope}" + (", inplace=True" if self.inplace else "")


class _AlphaUnit(Module):
    """What ELU and CELU share (PyTorch derives both from Module: neither is the other)."""

    def __init__(self, alpha=1.0, inplace=False):
        super().__init__()
        self.alpha, self.inplace = alpha, inplace

    def extra_repr(self):
        return f"alpha={self.alpha}" + (", inplace=True" if self.inplace else "")


class ELU(_AlphaUnit):
    """``x`` for ``x > 0`` else ``alpha * (exp(x) - 1)``.

    Parameters
    ----------
    alpha : float
        Scale of the negative branch.
    inplace : bool
        Change the input in place and return it (default False).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.ELU()(lucid.tensor([0.0, 2.0])).tolist()
    [0.0, 2.0]
    """

    def forward(self, input):
        return F.elu(input, alpha=self.alpha, inplace=self.inplace)


class CELU(_AlphaUnit):
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``.

    Parameters
    ----------
    alpha : float
        Scale of the negative branch.
    inplace : bool
        Change the input in place and return it (default False).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.CELU()(lucid.tensor([0.0, 2.0])).tolist()
    [0.0, 2.0]
    """
    def forward(self, input):
        return F.celu(input, alpha=self.alpha, inplace=self.inplace)


class SELU(Module):
    """Scaled ELU with the self-normalising constants.

    Parameters
    ----------
    inplace : bool
        Change the input in place and return it (default False).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.SELU()(lucid.tensor([0.0])).tolist()
    [0.0]
    """
    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return F.selu(input, inplace=self.inplace)

    def extra_repr(self):
        return "inplace=True" if self.inplace else ""


class GELU(Module):
    """GELU, exact (``approximate='none'``) or with the tanh approximation.

    Parameters
    ----------
    approximate : {'none', 'tanh'}
        Exact (erf) or tanh approximation.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.GELU()(lucid.tensor([0.0])).tolist()
    [0.0]
    """

    def __init__(self, approximate="none"):
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, input):
        return F.gelu(input, approximate=self.approximate)

    def extra_repr(self):
        return f"approximate='{self.approximate}'"


def _simple(name, fn_name, doc, inplace_ok=False):
    # the functional is read at call time (functional_ref): F.sigmoid bound at import missed a
    # __torch_function__ dispatcher installed later (nn.Sigmoid()(quantized) raised)
    if inplace_ok:
        def forward(self, input):
            return self._fn(input, inplace=self.inplace)

        def __init__(self, inplace=False):
            Module.__init__(self)
            self.inplace = inplace

        def extra_repr(self):
            return "inplace=True" if self.inplace else ""

        doc += ("\n\nParameters\n----------\ninplace : bool\n    Change the input in place and "
                "return it (default False).")
        body = {"forward": forward, "__init__": __init__, "extra_repr": extra_repr}
    else:
        def forward(self, input):
            return self._fn(input)

        body = {"forward": forward}
    doc += (f"\n\nExamples\n--------\n>>> import lucid, lucid.nn as nn\n"
            f">>> nn.{name}()(lucid.zeros(2, 3)).shape\n(2, 3)\n")
    return type(name, (Module,), dict(body, _fn=functional_ref(fn_name), __doc__=doc, __module__=__name__))


SiLU = _simple("SiLU", "silu", "``x * sigmoid(x)``.", True)
Mish = _simple("Mish", "mish", "``x * tanh(softplus(x))``.", True)
Tanh = _simple("Tanh", "tanh", "Hyperbolic tangent.")
Sigmoid = _simple("Sigmoid", "sigmoid", "Logistic sigmoid ``1 / (1 + exp(-x))``.")
Hardsigmoid = _simple("Hardsigmoid", "hardsigmoid", "``clamp(x / 6 + 1/2, 0, 1)``.", True)
Hardswish = _simple("Hardswish", "hardswish", "``x * hardsigmoid(x)``.", True)
Softsign = _simple("Softsign", "softsign", "``x / (1 + |x|)``.")
LogSigmoid = _simple("LogSigmoid", "logsigmoid", "``log(sigmoid(x))``, stable.")
Tanhshrink = _simple("Tanhshrink", "tanhshrink", "``x - tanh(x)``.")


class Softplus(Module):
    """``log(1 + exp(beta x)) / beta``; linear above ``threshold``.

    Parameters
    ----------
    beta : float
        Sharpness.
    threshold : float
        Above ``beta * x > threshold`` the result is ``x``.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.Softplus()(lucid.tensor([30.0])).tolist()
    [30.0]
    """

    def __init__(self, beta=1.0, threshold=20.0):
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, input):
        return F.softplus(input, self.beta, self.threshold)

    def extra_repr(self):
        return f"beta={self.beta}, threshold={self.threshold}"


class _DimModule(Module):
    _fn = None

    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return type(self)._fn(input, dim=self.dim, _stacklevel=5, dtype=None)

    def extra_repr(self):
        return f"dim={self.dim}"


class Softmax(_DimModule):
    """Softmax along ``dim``.

    Parameters
    ----------
    dim : int
        The dimension that sums to one.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.Softmax(dim=0)(lucid.zeros(2)).tolist()
    [0.5, 0.5]
    """

    _fn = functional_ref("softmax")


class LogSoftmax(_DimModule):
    """Log-softmax along ``dim``.

    Parameters
    ----------
    dim : int
        The dimension that sums to one in probability space.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> [round(v, 4) for v in nn.LogSoftmax(dim=0)(lucid.zeros(2)).tolist()]
    [-0.6931, -0.6931]
    """

    _fn = functional_ref("log_softmax")


class Softmin(_DimModule):
    """Softmax of ``-input`` along ``dim``.

    Parameters
    ----------
    dim : int
        The dimension that sums to one.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.Softmin(dim=0)(lucid.zeros(2)).tolist()
    [0.5, 0.5]
    """
    _fn = functional_ref("softmin")


class Hardtanh(Module):
    """Clamp to ``[min_val, max_val]``.

    Parameters
    ----------
    min_val, max_val : float
        The clamp range.
    inplace : bool
        Change the input in place and return it (default False).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.Hardtanh()(lucid.tensor([-3.0, 0.5, 3.0])).tolist()
    [-1.0, 0.5, 1.0]
    """

    def __init__(self, min_val=-1.0, max_val=1.0, inplace=False):
        super().__init__()
        if min_val > max_val:
            raise ValueError(f"Hardtanh: min_val ({min_val}) cannot be greater than max_val ({max_val})")
        self.min_val, self.max_val, self.inplace = min_val, max_val, inplace

    def forward(self, input):
        return F.hardtanh(input, min_val=self.min_val, max_val=self.max_val, inplace=self.inplace)

    def extra_repr(self):
        return f"min_val={self.min_val}, max_val={self.max_val}" + (", inplace=True" if self.inplace else "")


class ReLU6(Hardtanh):
    """``min(max(0, x), 6)``.

    Parameters
    ----------
    inplace : bool
        Change the input in place and return it (default False).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.ReLU6()(lucid.tensor([-1.0, 9.0])).tolist()
    [0.0, 6.0]
    """

    def __init__(self, inplace=False):  # Hardtanh(0, 6), as PyTorch's (isinstance(m, nn.ReLU) is False)
        super().__init__(0.0, 6.0, inplace)  # forward is Hardtanh's: fx records hardtanh, as PyTorch

    def extra_repr(self):
        return "inplace=True" if self.inplace else ""


class Threshold(Module):
    """``x`` where ``x > threshold``, else ``value``.

    Parameters
    ----------
    threshold : float
        The cut-off.
    value : float
        The replacement at or below the cut-off.
    inplace : bool
        Change the input in place and return it (default False).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.Threshold(1.0, -1.0)(lucid.tensor([0.5, 2.0])).tolist()
    [-1.0, 2.0]
    """
    def __init__(self, threshold, value, inplace=False):
        super().__init__()
        self.threshold, self.value, self.inplace = threshold, value, inplace

    def forward(self, input):
        return F.threshold(input, self.threshold, self.value, inplace=self.inplace)

    def extra_repr(self):
        return f"threshold={self.threshold}, value={self.value}" + (", inplace=True" if self.inplace else "")


class GLU(Module):
    """Gated linear unit: ``a * sigmoid(b)`` for the two halves ``a, b`` of the input along ``dim``.

    Parameters
    ----------
    dim : int
        The dimension to split (its size must be even).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.GLU()(lucid.tensor([2.0, 0.0])).tolist()
    [1.0]
    """
    def __init__(self, dim=-1):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return F.glu(input, dim=self.dim)

    def extra_repr(self):
        return f"dim={self.dim}"


class PReLU(Module):
    """``x`` for ``x >= 0`` else ``a * x`` with a learned ``a`` (one, or one per channel).

    Parameters
    ----------
    num_parameters : int
        1, or the number of channels (dim 1 of the input).
    init : float
        The initial slope (default 0.25).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.PReLU()(lucid.tensor([-4.0, 1.0])).tolist()
    [-1.0, 1.0]
    """

    def __init__(self, num_parameters=1, init=0.25, device=None, dtype=None):
        import lucid

        from .parameter import Parameter

        super().__init__()
        self.num_parameters, self.init = num_parameters, init
        self.weight = Parameter(lucid.full((num_parameters,), float(init), dtype=dtype))

    def reset_parameters(self):
        from . import init as _init

        _init.constant_(self.weight, self.init)

    def forward(self, input):
        return F.prelu(input, self.weight)

    def extra_repr(self):
        return f"num_parameters={self.num_parameters}"


class RReLU(Module):
    """Randomized leaky ReLU: random slopes in ``[lower, upper]`` in training, their mean in eval.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.RReLU(0.25, 0.25)(lucid.tensor([-4.0, 1.0])).tolist()
    [-1.0, 1.0]
    """

    def __init__(self, lower=1.0 / 8, upper=1.0 / 3, inplace=False):
        super().__init__()
        self.lower, self.upper, self.inplace = lower, upper, inplace

    def forward(self, input):
        return F.rrelu(input, lower=self.lower, upper=self.upper, training=self.training, inplace=self.inplace)

    def extra_repr(self):
        return f"lower={self.lower}, upper={self.upper}" + (", inplace=True" if self.inplace else "")


class _Shrink(Module):
    """What Hardshrink and Softshrink share (PyTorch derives both from Module)."""

    def __init__(self, lambd=0.5):
        super().__init__()
        self.lambd = lambd

    def extra_repr(self):
        return f"{self.lambd}"


class Hardshrink(_Shrink):
    """``x`` where ``|x| > lambd``, else 0.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.Hardshrink(1.0)(lucid.tensor([-2.0, 0.5])).tolist()
    [-2.0, 0.0]
    """

    def forward(self, input):
        return F.hardshrink(input, self.lambd)


class Softshrink(_Shrink):
    """Shrink towards 0 by ``lambd`` (0 inside ``[-lambd, lambd]``).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.Softshrink(1.0)(lucid.tensor([-2.0, 0.5])).tolist()
    [-1.0, 0.0]
    """

    def forward(self, input):
        return F.softshrink(input, self.lambd)


class Softmax2d(Module):
    """Softmax over the channels of a (N, C, H, W) or (C, H, W) input (dim -3).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.Softmax2d()(lucid.zeros(1, 2, 1, 1)).reshape(-1).tolist()
    [0.5, 0.5]
    """

    def forward(self, input):
        if input.ndim not in (3, 4):
            raise ValueError(f"Softmax2d: expected a 3-D or 4-D input, got shape {tuple(input.shape)}")
        return F.softmax(input, -3)
