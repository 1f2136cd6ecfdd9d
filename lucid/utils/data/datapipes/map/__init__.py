"""The map-style DataPipes (``SequenceWrapper``, ``Mapper``, ...), PyTorch's ``datapipes.map``."""
from .pipes import (Batcher, BatcherMapDataPipe, Concater, ConcaterMapDataPipe, Mapper, MapperMapDataPipe,
                    SequenceWrapper, SequenceWrapperMapDataPipe, Zipper, ZipperMapDataPipe)
from .shuffler import Shuffler, ShufflerIterDataPipe

__all__ = ["Batcher", "Concater", "Mapper", "SequenceWrapper", "Shuffler", "Zipper"]
