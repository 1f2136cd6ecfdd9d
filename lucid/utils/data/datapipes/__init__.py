"""DataPipes: composable iterable (``iter``) and map-style (``map``) datasets, as PyTorch's
``torch.utils.data.datapipes``. Loaded on first use (``import lucid`` does not import it)."""
from . import iter, map  # noqa: A004  (PyTorch's submodule names)
from ._decorator import (argument_validation, functional_datapipe, guaranteed_datapipes_determinism,
                         non_deterministic, runtime_validation, runtime_validation_disabled)
from .datapipe import DataChunk, DFIterDataPipe, IterDataPipe, MapDataPipe

__all__ = ["DataChunk", "DFIterDataPipe", "IterDataPipe", "MapDataPipe", "argument_validation",
           "functional_datapipe", "guaranteed_datapipes_determinism", "iter", "map", "non_deterministic",
           "runtime_validation", "runtime_validation_disabled"]
