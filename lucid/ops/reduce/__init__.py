"""Reductions and scans, by family.

- ``sums``: sum, mean, prod, norm, any/all;
- ``extrema``: amax/amin, max/min with indices, argmax/argmin, sort, argsort, topk;
- ``scans``: cumsum, cumprod, cummax, cummin;
- ``statistics``: var, std, var_mean, std_mean;
- ``log_domain``: logsumexp, softmax, log_softmax;
- ``_common``: axis helpers, named results and ``pick_along``.

NOTE [Selecting values by index]
Value-selecting ops (max/min with ``dim``, sort, topk, cummax) are composites of two
primitives: a non-differentiable one that computes integer indices, and ``pick_along``
(``take_along_axis``, in ``_common.py``) that selects the values, so the gradient flows to
the selected positions only.
"""
from . import _common, extrema, log_domain, robust, scans, statistics, sums
from ._common import *  # noqa: F401,F403
from ._common import expand_reduced, keep_shape, norm_axes  # noqa: F401  (used across lucid.ops)
from .extrema import *  # noqa: F401,F403
from .scans import *  # noqa: F401,F403
from .log_domain import *  # noqa: F401,F403
from .statistics import *  # noqa: F401,F403
from .sums import *  # noqa: F401,F403
from .robust import *  # noqa: F401,F403

__all__ = (_common.__all__ + sums.__all__ + extrema.__all__ + scans.__all__ + statistics.__all__
           + log_domain.__all__ + robust.__all__)
