"""``lucid.nn.common_types`` (``torch.nn.common_types``): the type aliases layers annotate with.

``_size_2_t`` is "an int, or a tuple of two ints", and so on; they are ``typing`` unions.

Examples
--------
>>> import typing
>>> from lucid.nn.common_types import _size_2_t
>>> typing.get_args(_size_2_t)
(<class 'int'>, tuple[int, int])
"""
from __future__ import annotations

from typing import Optional, TypeVar, Union

from .._core.tensor import Tensor

T = TypeVar("T")

_scalar_or_tuple_any_t = Union[T, tuple[T, ...]]
_scalar_or_tuple_1_t = Union[T, tuple[T]]
_scalar_or_tuple_2_t = Union[T, tuple[T, T]]
_scalar_or_tuple_3_t = Union[T, tuple[T, T, T]]
_scalar_or_tuple_4_t = Union[T, tuple[T, T, T, T]]
_scalar_or_tuple_5_t = Union[T, tuple[T, T, T, T, T]]
_scalar_or_tuple_6_t = Union[T, tuple[T, T, T, T, T, T]]

_size_any_t = Union[int, tuple[int, ...]]
_size_1_t = Union[int, tuple[int]]
_size_2_t = Union[int, tuple[int, int]]
_size_3_t = Union[int, tuple[int, int, int]]
_size_4_t = Union[int, tuple[int, int, int, int]]
_size_5_t = Union[int, tuple[int, int, int, int, int]]
_size_6_t = Union[int, tuple[int, int, int, int, int, int]]

_size_any_opt_t = Union[int, None, tuple[Optional[int], ...]]
_size_2_opt_t = Union[int, None, tuple[Optional[int], Optional[int]]]
_size_3_opt_t = Union[int, None, tuple[Optional[int], Optional[int], Optional[int]]]

_ratio_2_t = Union[float, tuple[float, float]]
_ratio_3_t = Union[float, tuple[float, float, float]]
_ratio_any_t = Union[float, tuple[float, ...]]

_tensor_list_t = Union[Tensor, tuple[Tensor, ...]]
_maybe_indices_t = Union[Tensor, tuple[Tensor, Tensor]]
