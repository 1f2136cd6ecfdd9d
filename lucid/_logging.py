"""``lucid._logging`` (``torch._logging``): ``set_logs``, for a compiler Lucid lacks.

PyTorch's ``torch._logging.set_logs`` turns on the logs of its compiler stack (Dynamo's
recompiles, Inductor's output code, ...). Lucid compiles nothing (NOTE [No graph compiler],
``lucid/compiler.py``), so there is never anything to log; ``set_logs`` exists so scripts that
call it (``torch._logging.set_logs(recompiles=True)``) run unchanged. It takes PyTorch's keywords,
checks their values as PyTorch does (a log level for a component, a bool for an artifact) and
keeps the last settings in :data:`settings`; each call resets what it does not name, as PyTorch's.

Examples
--------
>>> import lucid
>>> lucid._logging.set_logs(recompiles=True, dynamo=20)
>>> lucid._logging.settings["recompiles"], lucid._logging.settings["dynamo"]
(True, 20)
>>> lucid._logging.set_logs()
>>> lucid._logging.settings["recompiles"]
False
"""
from __future__ import annotations

import logging

__all__ = ["set_logs"]

# torch 2.13's keywords: components take a logging level (or None), artifacts a bool.
_COMPONENTS = ("all", "dynamo", "aot", "autograd", "dynamic", "inductor", "distributed", "c10d", "ddp", "fsdp",
               "dtensor", "onnx", "export")
_ARTIFACTS = ("bytecode", "aot_graphs", "aot_joint_graph", "ddp_graphs", "graph", "graph_code", "graph_code_verbose",
              "graph_breaks", "side_effects", "graph_sizes", "guards", "recompiles", "recompiles_verbose",
              "trace_source", "trace_call", "trace_bytecode", "output_code", "kernel_code", "schedule", "perf_hints",
              "pre_grad_graphs", "post_grad_graphs", "ir_pre_fusion", "ir_post_fusion", "onnx_diagnostics", "fusion",
              "overlap", "cudagraphs", "sym_node", "compiled_autograd", "compiled_autograd_verbose",
              "cudagraph_static_inputs", "benchmarking", "autotuning", "incremental", "graph_region_expansion",
              "inductor_metrics", "hierarchical_compile", "compute_dependencies", "caching")
_LEVELS = (logging.CRITICAL, logging.ERROR, logging.WARNING, logging.INFO, logging.DEBUG, logging.NOTSET)


def _defaults():
    return {**dict.fromkeys(_COMPONENTS), **dict.fromkeys(_ARTIFACTS, False), "modules": None}


settings = _defaults()


def set_logs(**kwargs):
    """Set the compiler logs as ``torch._logging.set_logs`` (keywords only; nothing is logged in Lucid).

    Parameters
    ----------
    **kwargs
        PyTorch's keywords: a component (``dynamo``, ``inductor``, ``all``, ...) takes a logging
        level (``logging.DEBUG``, ...) or None; an artifact (``recompiles``, ``output_code``,
        ``graph_breaks``, ...) a bool; ``modules`` a dict of names to levels/bools.

    Raises
    ------
    TypeError
        An unknown keyword.
    ValueError
        A level that is not a logging level, an artifact that is not a bool.

    Examples
    --------
    >>> import lucid
    >>> lucid._logging.set_logs(output_code=True)
    """
    new = _defaults()
    for name, value in kwargs.items():
        if name in _COMPONENTS:
            if value is not None and value not in _LEVELS:
                raise ValueError(f"Unrecognized log level for log {name}: {value}, valid level values are: "
                                 f"{','.join(str(v) for v in _LEVELS)}")
        elif name in _ARTIFACTS:
            if not isinstance(value, bool):
                raise ValueError(f"Expected bool to enable artifact {name}, received {value}")
        elif name == "modules":
            if value is not None and not isinstance(value, dict):
                raise ValueError(f"set_logs: modules must be a dict of module names to levels, got {value!r}")
        else:
            raise TypeError(f"set_logs() got an unexpected keyword argument '{name}'")
        new[name] = value
    settings.clear()
    settings.update(new)
