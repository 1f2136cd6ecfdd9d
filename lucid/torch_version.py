"""``lucid.torch_version`` (``torch.torch_version``): :class:`TorchVersion`, a version string
that compares with strings, tuples and ``packaging`` versions.

Examples
--------
>>> from lucid.torch_version import TorchVersion
>>> v = TorchVersion("2.13.0")
>>> v >= (2, 1), v < "2.13.1", v == "2.13", v > "2.13.0rc1"
(True, True, True, True)
"""
from __future__ import annotations

import re

__all__ = ["TorchVersion"]

# release, then an optional pre-release (a/b/rc), post, dev and a local "+..." part (ignored)
_PATTERN = re.compile(r"^\s*v?(\d+(?:\.\d+)*)(?:[-_.]?(a|alpha|b|beta|rc|c)[-_.]?(\d*))?"
                      r"(?:[-_.]?post[-_.]?(\d*))?(?:[-_.]?dev[-_.]?(\d*))?(?:\+[\w.]*)?\s*$", re.IGNORECASE)
_PRE_RANK = {"a": 0, "alpha": 0, "b": 1, "beta": 1, "rc": 2, "c": 2}


class InvalidVersion(ValueError):
    """A string or object that is not a version."""


def _key(text):
    """A sort key for version ``text``, PEP 440's order for release/pre/post/dev."""
    m = _PATTERN.match(text)
    if m is None:
        raise InvalidVersion(f"TorchVersion: invalid version {text!r}")
    release, pre, pre_n, post, dev = m.groups()
    parts = [int(p) for p in release.split(".")]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()  # "2.13.0" == "2.13"
    pre_key = (_PRE_RANK[pre.lower()], int(pre_n or 0)) if pre else (3, 0)
    if dev is not None and not pre and post is None:
        pre_key = (-1, 0)  # "1.0.dev1" sorts before "1.0a1"
    post_key = -1 if post is None else int(post or 0)
    dev_key = float("inf") if dev is None else int(dev or 0)
    return tuple(parts), pre_key, post_key, dev_key


def _as_text(other):
    if isinstance(other, str):
        return other
    if isinstance(other, (tuple, list)):
        return ".".join(str(p) for p in other)
    if type(other).__name__ == "Version":  # packaging.version.Version, without importing packaging
        return str(other)
    raise InvalidVersion(f"TorchVersion: cannot compare with {other!r}")


class TorchVersion(str):
    """A ``str`` (``lucid.__version__`` style) whose comparisons follow version order.

    ``==``, ``<``, ``<=``, ``>``, ``>=`` accept another string, a tuple such as ``(2, 1)`` or
    a ``packaging.version.Version``; an unparsable operand raises :class:`InvalidVersion`
    (``==`` and ``!=`` fall back to string comparison then, as a ``str`` does).
    """

    __slots__ = ()

    def _compare(self, other, op):
        try:
            return op(_key(str(self)), _key(_as_text(other)))
        except InvalidVersion:
            if op in (_eq, _ne):
                return op(str(self), other)
            raise

    def __eq__(self, other):
        return self._compare(other, _eq)

    def __ne__(self, other):
        return self._compare(other, _ne)

    def __lt__(self, other):
        return self._compare(other, _lt)

    def __le__(self, other):
        return self._compare(other, _le)

    def __gt__(self, other):
        return self._compare(other, _gt)

    def __ge__(self, other):
        return self._compare(other, _ge)

    __hash__ = str.__hash__


def _eq(a, b):
    return a == b


def _ne(a, b):
    return a != b


def _lt(a, b):
    return a < b


def _le(a, b):
    return a <= b


def _gt(a, b):
    return a > b


def _ge(a, b):
    return a >= b
