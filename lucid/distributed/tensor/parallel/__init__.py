"""``lucid.distributed.tensor.parallel`` (PyTorch's tensor parallelism): styles and ``parallelize_module``.

Examples
--------
>>> from lucid.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel
>>> RowwiseParallel().output_layouts
(Replicate(),)
"""
from .api import parallelize_module
from .loss import loss_parallel
from .style import (ColwiseParallel, ParallelStyle, PrepareModuleInput, PrepareModuleInputOutput, PrepareModuleOutput,
                    RowwiseParallel, SequenceParallel)

__all__ = ["parallelize_module", "ParallelStyle", "ColwiseParallel", "RowwiseParallel", "PrepareModuleInput",
           "PrepareModuleOutput", "PrepareModuleInputOutput", "SequenceParallel", "loss_parallel"]
