"""``lucid.profiler.profiler`` (``torch.profiler.profiler``): the profiler classes under
PyTorch's module path. See NOTE [Submodules of file modules] (``lucid/_module_paths/__init__.py``).

Examples
--------
>>> import lucid
>>> from lucid.profiler.profiler import profile
>>> profile is lucid.profiler.profile
True
"""
from __future__ import annotations

# ProfilerActivity and kineto_available: names torch.profiler.profiler has too
from lucid.profiler import (ExecutionTraceObserver, ProfilerAction, ProfilerActivity, kineto_available, profile,
                            schedule, supported_activities, tensorboard_trace_handler)

__all__ = ["ExecutionTraceObserver", "ProfilerAction", "profile", "schedule", "supported_activities",
           "tensorboard_trace_handler"]
