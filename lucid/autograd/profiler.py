"""``lucid.autograd.profiler``: the same objects as :mod:`lucid.profiler` (PyTorch's older spelling)."""
from ..profiler import (EventList, FunctionEvent, FunctionEventAvg, ProfilerActivity, profile,  # noqa: F401
                        record_function)

__all__ = ["profile", "record_function", "ProfilerActivity", "EventList", "FunctionEvent",
           "FunctionEventAvg"]
