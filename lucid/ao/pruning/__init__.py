"""Sparsity (PyTorch's ``torch.ao.pruning``): sparsifiers that put a mask on chosen tensors
of a model (``BaseSparsifier``, ``WeightNormSparsifier``, ``NearlyDiagonalSparsifier``),
schedulers of their sparsity level (``BaseScheduler``, ``LambdaSL``, ``CubicSL``), the
``FakeSparsity`` mask parametrization and the fqn helpers. ``lucid.ao.pruning._experimental``
holds the data sparsifiers and their scheduler. Loaded on first use of ``lucid.ao.pruning``.

Examples
--------
>>> import lucid, lucid.nn as nn
>>> from lucid.ao.pruning import WeightNormSparsifier
>>> model = nn.Sequential(nn.Linear(8, 4))
>>> sparsifier = WeightNormSparsifier(sparsity_level=0.5, sparse_block_shape=(1, 4))
>>> sparsifier.prepare(model, config=[{"tensor_fqn": "0.weight"}])
>>> sparsifier.step()
>>> float(model[0].parametrizations.weight[0].mask.mean())
0.5
"""
from ._mappings import get_dynamic_sparse_quantized_mapping, get_static_sparse_quantized_mapping
from .scheduler.base_scheduler import BaseScheduler
from .scheduler.cubic_scheduler import CubicSL
from .scheduler.lambda_scheduler import LambdaSL
from .sparsifier.base_sparsifier import BaseSparsifier
from .sparsifier.nearly_diagonal_sparsifier import NearlyDiagonalSparsifier
from .sparsifier.utils import FakeSparsity, fqn_to_module, get_arg_info_from_tensor_fqn, module_to_fqn
from .sparsifier.weight_norm_sparsifier import WeightNormSparsifier

__all__ = ["get_dynamic_sparse_quantized_mapping", "get_static_sparse_quantized_mapping", "BaseScheduler",
           "CubicSL", "LambdaSL", "BaseSparsifier", "NearlyDiagonalSparsifier", "FakeSparsity", "fqn_to_module",
           "get_arg_info_from_tensor_fqn", "module_to_fqn", "WeightNormSparsifier"]
