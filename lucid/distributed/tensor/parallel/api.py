"""``parallelize_module``: apply tensor-parallel styles to a module or its submodules by name."""
from __future__ import annotations

import fnmatch

from .style import ParallelStyle

__all__ = ["parallelize_module"]


def parallelize_module(module, device_mesh=None, parallelize_plan=None, *, src_data_rank=0):
    """Apply ``parallelize_plan`` to ``module`` on a 1-D ``device_mesh``; returns ``module``.

    Parameters
    ----------
    module : Module
    device_mesh : DeviceMesh
        A 1-D mesh (the tensor-parallel ranks).
    parallelize_plan : ParallelStyle or dict
        A style for ``module`` itself, or ``{"name.of.submodule": style}`` (``*`` matches any
        one name, as ``fnmatch``).

    Examples
    --------
    >>> from lucid.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    >>> mlp = lucid.nn.Sequential(lucid.nn.Linear(4, 8), lucid.nn.ReLU(), lucid.nn.Linear(8, 4))
    >>> mlp = parallelize_module(mlp, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})  # doctest: +SKIP
    """
    api = "parallelize_module"
    from ...device_mesh import DeviceMesh

    if not isinstance(device_mesh, DeviceMesh):
        raise TypeError(f"{api}: device_mesh must be a DeviceMesh, got {type(device_mesh).__name__}")
    if device_mesh.ndim != 1:
        raise ValueError(f"{api}: Tensor Parallel only accepts a 1D DeviceMesh, but found {device_mesh.ndim}D! "
                         "Slice the tensor-parallel dimension out of it (mesh['tp'])")
    if parallelize_plan is None:
        return module
    if isinstance(parallelize_plan, ParallelStyle):
        return parallelize_plan._apply(module, device_mesh)
    if not isinstance(parallelize_plan, dict):
        raise TypeError(f"{api}: expect a ParallelStyle or a dict of them, got {type(parallelize_plan).__name__}")
    for path, style in parallelize_plan.items():
        if not path:
            raise ValueError(f"{api}: an empty module name in the plan {list(parallelize_plan)}")
        matched = _find(module, path.split("."))
        if not matched:
            raise ValueError(f"{api}: no submodule matches {path!r} in the plan")
        for sub in matched:
            parallelize_module(sub, device_mesh, style)
    return module


def _find(module, atoms):
    if not atoms:
        return [module]
    out = []
    for name, child in module.named_children():
        if fnmatch.fnmatch(name, atoms[0]):
            out += _find(child, atoms[1:])
    return out
