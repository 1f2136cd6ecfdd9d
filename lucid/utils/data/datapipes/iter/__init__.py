"""The iterable DataPipes (``IterableWrapper``, ``Mapper``, ...), PyTorch's ``datapipes.iter``."""
from .callable import Collator, CollatorIterDataPipe, Mapper, MapperIterDataPipe
from .combinatorics import (InBatchShuffler, InBatchShufflerIterDataPipe, Sampler, SamplerIterDataPipe,
                            Shuffler, ShufflerIterDataPipe)
from .combining import (Concater, ConcaterIterDataPipe, Demultiplexer, DemultiplexerIterDataPipe, Forker,
                        ForkerIterDataPipe, Multiplexer, MultiplexerIterDataPipe, Zipper, ZipperIterDataPipe)
from .files import (FileLister, FileListerIterDataPipe, FileOpener, FileOpenerIterDataPipe, RoutedDecoder,
                    RoutedDecoderIterDataPipe, StreamReader, StreamReaderIterDataPipe)
from .grouping import (Batcher, BatcherIterDataPipe, Grouper, GrouperIterDataPipe, UnBatcher,
                       UnBatcherIterDataPipe)
from .selecting import Filter, FilterIterDataPipe
from .sharding import SHARDING_PRIORITIES, ShardingFilter, ShardingFilterIterDataPipe
from .utils import IterableWrapper, IterableWrapperIterDataPipe

__all__ = ["Batcher", "Collator", "Concater", "Demultiplexer", "FileLister", "FileOpener", "Filter", "Forker",
           "Grouper", "InBatchShuffler", "IterableWrapper", "Mapper", "Multiplexer", "RoutedDecoder", "Sampler",
           "ShardingFilter", "Shuffler", "StreamReader", "UnBatcher", "Zipper"]
