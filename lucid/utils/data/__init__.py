"""lucid.utils.data: datasets, samplers and DataLoader (with real worker processes)."""
from .dataloader import DataLoader, WorkerInfo, default_collate, default_convert, get_worker_info
from .distributed import DistributedSampler
from .dataset import (ChainDataset, ConcatDataset, Dataset, IterableDataset, StackDataset, Subset, TensorDataset,
                      random_split)
from .sampler import (BatchSampler, RandomSampler, Sampler, SequentialSampler, SubsetRandomSampler,
                      WeightedRandomSampler)

__all__ = ["Dataset", "IterableDataset", "TensorDataset", "Subset", "ConcatDataset", "ChainDataset",
           "StackDataset", "random_split",
           "DataLoader", "default_collate", "default_convert", "get_worker_info", "WorkerInfo", "Sampler",
           "SequentialSampler", "RandomSampler", "SubsetRandomSampler", "WeightedRandomSampler", "BatchSampler",
           "DistributedSampler"]

# DataPipes load on first use (``import lucid`` stays light): see lucid/utils/data/datapipes.
_DATAPIPE_NAMES = ("DFIterDataPipe", "DataChunk", "IterDataPipe", "MapDataPipe", "argument_validation",
                   "functional_datapipe", "guaranteed_datapipes_determinism", "non_deterministic",
                   "runtime_validation", "runtime_validation_disabled")
_LAZY_SUBMODULES = ("datapipes", "graph", "graph_settings")
__all__ += list(_DATAPIPE_NAMES)


def __getattr__(name):
    import importlib

    if name in _DATAPIPE_NAMES:
        return getattr(importlib.import_module(".datapipes", __name__), name)
    if name in _LAZY_SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_DATAPIPE_NAMES) | set(_LAZY_SUBMODULES))
