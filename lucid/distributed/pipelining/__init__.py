"""Pipeline parallelism (``torch.distributed.pipelining``): a model cut into stages, one per
rank, fed microbatches by a schedule.

Manual splitting: each rank builds its own piece and wraps it in a :class:`PipelineStage`;
the tracer front end :func:`pipeline` cuts a whole model at ``pipe_split()`` calls or at the
submodules named in ``split_spec`` (with ``lucid.fx``) and gives a :class:`Pipe` whose
``build_stage`` makes the stage. :class:`ScheduleGPipe` and :class:`Schedule1F1B` run a step
(one stage per rank); :class:`ScheduleLoopedBFS` and :class:`ScheduleInterleaved1F1B` several.

Examples
--------
>>> import lucid.distributed as dist
>>> from lucid.distributed.pipelining import PipelineStage, ScheduleGPipe
>>> dist.init_process_group("mpi")                                           # doctest: +SKIP
>>> stage = PipelineStage(piece, dist.get_rank(), dist.get_world_size(), "cpu")   # doctest: +SKIP
>>> schedule = ScheduleGPipe(stage, 4, loss_fn=loss_fn)                     # doctest: +SKIP
>>> schedule.step(x) if stage.is_first else schedule.step(target=y, losses=losses)  # doctest: +SKIP
"""
from .microbatch import TensorChunkSpec, merge_chunks, split_args_kwargs_into_chunks
from .schedules import (PipelineScheduleMulti, PipelineScheduleSingle, Schedule1F1B, ScheduleGPipe,
                        ScheduleInterleaved1F1B, ScheduleLoopedBFS)
from .stage import PipelineStage, PipeliningShapeError, build_stage
from .pipe import Pipe, SplitPoint, pipe_split, pipeline

__all__ = ["Pipe", "pipe_split", "SplitPoint", "pipeline", "PipelineStage", "build_stage", "Schedule1F1B",
           "ScheduleGPipe", "ScheduleLoopedBFS", "ScheduleInterleaved1F1B", "PipelineScheduleSingle",
           "PipelineScheduleMulti", "TensorChunkSpec", "split_args_kwargs_into_chunks",
           "merge_chunks", "PipeliningShapeError"]
