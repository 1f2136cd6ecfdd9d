"""Tensor-parallel styles: how one module's parameters, inputs and outputs are laid out.

``ColwiseParallel`` shards a Linear's weight by rows (its output features, ``Shard(0)``) and
gives a ``Shard(-1)`` output; ``RowwiseParallel`` shards it by columns (``Shard(1)``), reads a
``Shard(-1)`` input and all-reduces its ``Partial`` output to ``Replicate``. Colwise then
rowwise is Megatron's MLP: one all-reduce forward, one backward. ``SequenceParallel`` runs a
norm on sequence pieces; ``PrepareModuleInput``/``PrepareModuleOutput`` only move layouts.
"""
from __future__ import annotations

import functools

from .._api import DTensor, _as_parameter, _param_value, distribute_module, distribute_tensor
from ..placement_types import Placement, Replicate, Shard

__all__ = ["ParallelStyle", "ColwiseParallel", "RowwiseParallel", "PrepareModuleInput", "PrepareModuleOutput",
           "PrepareModuleInputOutput", "SequenceParallel"]


class ParallelStyle:
    """The base of the styles :func:`parallelize_module` applies."""

    def _apply(self, module, device_mesh):  # pragma: no cover - abstract
        raise NotImplementedError


def _layout(api, name, value, default):
    if value is None:
        return (default,)
    if not isinstance(value, Placement):
        raise TypeError(f"{api}: {name} must be a Placement (Shard(d), Replicate()), got {value!r}")
    return (value,)


def _shard_params(module, mesh, placements):
    """``module``'s parameters named in ``placements`` become DTensor parameters placed so."""
    for name, placement in placements.items():
        p = module._parameters.get(name)
        if p is not None and not isinstance(p, DTensor):
            module.register_parameter(name, _as_parameter(distribute_tensor(_param_value(p), mesh, [placement])))


def _input_fn(input_layouts, desired, in_features, mod, inputs, device_mesh):
    x = inputs[0]
    if not isinstance(x, DTensor):
        shape = None
        if input_layouts[0].is_shard() and in_features is not None and input_layouts[0].dim % x.ndim == x.ndim - 1:
            shape = tuple(x.shape[:-1]) + (in_features,)  # exact even when the features don't split evenly
        x = DTensor.from_local(x, device_mesh, input_layouts, run_check=False, shape=shape)
    if x.placements != desired:
        x = x.redistribute(placements=desired)
    return (x,) + tuple(inputs[1:])


def _output_fn(output_layouts, use_local_output, mod, outputs, device_mesh):
    if outputs.placements != output_layouts:
        outputs = outputs.redistribute(placements=output_layouts)
    return outputs.to_local() if use_local_output else outputs


class ColwiseParallel(ParallelStyle):
    """Shard an ``nn.Linear`` (weight and bias ``Shard(0)``) or ``nn.Embedding`` (weight ``Shard(1)``) colwise.

    Parameters
    ----------
    input_layouts : Placement, optional
        How a plain input tensor is laid out (default ``Replicate()``); it is made ``Replicate``.
    output_layouts : Placement, optional
        The output's layout (default ``Shard(-1)``).
    use_local_output : bool
        Return the local piece (default) instead of the DTensor.

    Examples
    --------
    >>> from lucid.distributed.tensor.parallel import ColwiseParallel, parallelize_module
    >>> parallelize_module(lucid.nn.Linear(4, 6), mesh, ColwiseParallel()).weight.placements  # doctest: +SKIP
    (Shard(dim=0),)
    """

    def __init__(self, *, input_layouts=None, output_layouts=None, use_local_output=True):
        api = "ColwiseParallel"
        self.input_layouts = _layout(api, "input_layouts", input_layouts, Replicate())
        self.output_layouts = _layout(api, "output_layouts", output_layouts, Shard(-1))
        self.desired_input_layouts = (Replicate(),)
        self.use_local_output = bool(use_local_output)

    def _apply(self, module, device_mesh):
        from ....nn import Embedding, Linear

        if isinstance(module, Linear):
            placements = {"weight": Shard(0), "bias": Shard(0)}
        elif isinstance(module, Embedding):
            placements = {"weight": Shard(1)}
        else:
            raise NotImplementedError(f"ColwiseParallel: only nn.Linear and nn.Embedding are supported, got "
                                      f"{type(module).__name__}")
        return distribute_module(
            module, device_mesh, lambda name, mod, mesh: _shard_params(mod, mesh, placements) if mod is module else None,
            functools.partial(_input_fn, self.input_layouts, self.desired_input_layouts, None),
            functools.partial(_output_fn, self.output_layouts, self.use_local_output))

    def __repr__(self):
        return (f"ColwiseParallel(input_layouts={self.input_layouts[0]!r}, output_layouts={self.output_layouts[0]!r}, "
                f"use_local_output={self.use_local_output})")


class RowwiseParallel(ParallelStyle):
    """Shard an ``nn.Linear`` rowwise: weight ``Shard(1)``, bias ``Replicate``, input ``Shard(-1)``.

    The local products are partial sums; the output is made ``output_layouts`` (default
    ``Replicate()``, one all-reduce). An input of uneven pieces gets its global shape from
    the layer's ``in_features``.

    Examples
    --------
    >>> from lucid.distributed.tensor.parallel import RowwiseParallel, parallelize_module
    >>> parallelize_module(lucid.nn.Linear(6, 4), mesh, RowwiseParallel()).weight.placements  # doctest: +SKIP
    (Shard(dim=1),)
    """

    def __init__(self, *, input_layouts=None, output_layouts=None, use_local_output=True):
        api = "RowwiseParallel"
        self.input_layouts = _layout(api, "input_layouts", input_layouts, Shard(-1))
        self.output_layouts = _layout(api, "output_layouts", output_layouts, Replicate())
        self.desired_input_layouts = (Shard(-1),)
        self.use_local_output = bool(use_local_output)

    def _apply(self, module, device_mesh):
        from ....nn import Linear

        if not isinstance(module, Linear):
            raise NotImplementedError(f"RowwiseParallel: only nn.Linear is supported, got {type(module).__name__}")
        placements = {"weight": Shard(1), "bias": Replicate()}
        return distribute_module(
            module, device_mesh, lambda name, mod, mesh: _shard_params(mod, mesh, placements) if mod is module else None,
            functools.partial(_input_fn, self.input_layouts, self.desired_input_layouts, module.in_features),
            functools.partial(_output_fn, self.output_layouts, self.use_local_output))

    def __repr__(self):
        return (f"RowwiseParallel(input_layouts={self.input_layouts[0]!r}, output_layouts={self.output_layouts[0]!r}, "
                f"use_local_output={self.use_local_output})")


def _layouts(api, name, value, allow_none=True):
    value = value if isinstance(value, tuple) else (value,)
    for v in value:
        if not (isinstance(v, Placement) or allow_none and v is None):
            raise TypeError(f"{api}: {name} must be Placements (or None for a non-tensor), got {value!r}")
    return value


def _prepare(api, value, layout, desired, mesh, use_local):
    if layout is None or not hasattr(value, "shape"):
        return value
    if not isinstance(value, DTensor):
        value = DTensor.from_local(value, mesh, (layout,), run_check=False)
    if desired is not None and value.placements != (desired,):
        value = value.redistribute(placements=(desired,))
    return value.to_local() if use_local else value


class PrepareModuleInput(ParallelStyle):
    """Lay out a module's positional (and keyword) inputs as DTensors before its forward.

    ``input_layouts[i]`` says how input ``i`` is laid out (None: leave it alone) and
    ``desired_input_layouts[i]`` how the module wants it; ``use_local_output`` hands the module
    local pieces instead.

    Examples
    --------
    >>> from lucid.distributed.tensor import Replicate, Shard
    >>> from lucid.distributed.tensor.parallel import PrepareModuleInput
    >>> style = PrepareModuleInput(input_layouts=(Shard(0), None), desired_input_layouts=(Replicate(), None))
    >>> style.desired_input_layouts
    (Replicate(), None)
    """

    def __init__(self, *, input_layouts=None, desired_input_layouts=None, input_kwarg_layouts=None,
                 desired_input_kwarg_layouts=None, use_local_output=False):
        api = "PrepareModuleInput"
        self.input_layouts = None if input_layouts is None else _layouts(api, "input_layouts", input_layouts)
        self.desired_input_layouts = None if desired_input_layouts is None else _layouts(
            api, "desired_input_layouts", desired_input_layouts)
        if (self.input_layouts is None) != (self.desired_input_layouts is None) or (
                self.input_layouts is not None and len(self.input_layouts) != len(self.desired_input_layouts)):
            raise ValueError(f"{api}: input_layouts and desired_input_layouts should have the same length!")
        self.input_kwarg_layouts = dict(input_kwarg_layouts or {})
        self.desired_input_kwarg_layouts = dict(desired_input_kwarg_layouts or {})
        self.use_local_output = bool(use_local_output)

    def _apply(self, module, device_mesh):
        def pre(mod, args, kwargs):
            if self.input_layouts is not None:
                if len(args) != len(self.input_layouts):
                    raise ValueError(f"PrepareModuleInput: module inputs and input_layouts should have the same "
                                     f"length! got {len(args)} inputs and {len(self.input_layouts)} layouts")
                args = tuple(_prepare("PrepareModuleInput", a, lay, want, device_mesh, self.use_local_output)
                             for a, lay, want in zip(args, self.input_layouts, self.desired_input_layouts))
            kwargs = {k: _prepare("PrepareModuleInput", v, self.input_kwarg_layouts.get(k),
                                  self.desired_input_kwarg_layouts.get(k), device_mesh, self.use_local_output)
                      for k, v in kwargs.items()}
            return args, kwargs

        module.register_forward_pre_hook(pre, with_kwargs=True)
        return module


class PrepareModuleOutput(ParallelStyle):
    """Redistribute a module's outputs (a tensor or a tuple) from ``output_layouts`` to ``desired_output_layouts``.

    Examples
    --------
    >>> from lucid.distributed.tensor import Replicate, Shard
    >>> from lucid.distributed.tensor.parallel import PrepareModuleOutput
    >>> PrepareModuleOutput(output_layouts=Shard(0), desired_output_layouts=Replicate()).use_local_output
    True
    """

    def __init__(self, *, output_layouts, desired_output_layouts, use_local_output=True):
        api = "PrepareModuleOutput"
        self.output_layouts = _layouts(api, "output_layouts", output_layouts)
        self.desired_output_layouts = _layouts(api, "desired_output_layouts", desired_output_layouts, False)
        if len(self.output_layouts) != len(self.desired_output_layouts):
            raise ValueError(f"{api}: output_layouts and desired_output_layouts should have the same length!")
        self.use_local_output = bool(use_local_output)

    def _apply(self, module, device_mesh):
        def post(mod, inputs, outputs):
            single = not isinstance(outputs, tuple)
            outs = (outputs,) if single else outputs
            if len(outs) != len(self.output_layouts):
                raise ValueError(f"PrepareModuleOutput: module outputs and output_layouts should have the same "
                                 f"length! got {len(outs)} outputs and {len(self.output_layouts)} layouts")
            outs = tuple(_prepare("PrepareModuleOutput", o, lay, want, device_mesh, self.use_local_output)
                         for o, lay, want in zip(outs, self.output_layouts, self.desired_output_layouts))
            return outs[0] if single else outs

        module.register_forward_hook(post)
        return module


class PrepareModuleInputOutput(ParallelStyle):
    """:class:`PrepareModuleInput` and :class:`PrepareModuleOutput` on one module.

    ``use_local_input`` is the input half's ``use_local_output``.

    Examples
    --------
    >>> from lucid.distributed.tensor import Replicate, Shard
    >>> from lucid.distributed.tensor.parallel import PrepareModuleInputOutput
    >>> style = PrepareModuleInputOutput(input_layouts=Shard(0), desired_input_layouts=Replicate(),
    ...                                  output_layouts=Replicate(), desired_output_layouts=Shard(0))
    >>> style.prepare_module_input.desired_input_layouts, style.prepare_module_output.use_local_output
    ((Replicate(),), True)
    """

    def __init__(self, *, input_layouts=None, desired_input_layouts=None, input_kwarg_layouts=None,
                 desired_input_kwarg_layouts=None, use_local_input=False, output_layouts,
                 desired_output_layouts, use_local_output=True):
        self.prepare_module_input = PrepareModuleInput(
            input_layouts=input_layouts, desired_input_layouts=desired_input_layouts,
            input_kwarg_layouts=input_kwarg_layouts, desired_input_kwarg_layouts=desired_input_kwarg_layouts,
            use_local_output=use_local_input)
        self.prepare_module_output = PrepareModuleOutput(
            output_layouts=output_layouts, desired_output_layouts=desired_output_layouts,
            use_local_output=use_local_output)

    def _apply(self, module, device_mesh):
        self.prepare_module_input._apply(module, device_mesh)
        return self.prepare_module_output._apply(module, device_mesh)


class SequenceParallel(ParallelStyle):
    """Run a norm (or dropout) layer on a ``Shard(sequence_dim)`` input; its parameters are replicated.

    A plain input is read as this rank's piece of the sequence; the output stays a
    ``Shard(sequence_dim)`` DTensor unless ``use_local_output``.

    Examples
    --------
    >>> from lucid.distributed.tensor.parallel import SequenceParallel
    >>> SequenceParallel().sequence_dim
    1
    """

    def __init__(self, *, sequence_dim=1, use_local_output=False):
        self.sequence_dim = int(sequence_dim)
        self.use_local_output = bool(use_local_output)

    def _apply(self, module, device_mesh):
        layout = (Shard(self.sequence_dim),)

        def input_fn(mod, inputs, mesh):
            x = inputs[0]
            if not isinstance(x, DTensor):
                x = DTensor.from_local(x, mesh, layout, run_check=False)
            elif x.placements != _norm_layout(layout, x.ndim):
                x = x.redistribute(placements=layout)
            return (x,) + tuple(inputs[1:])

        def output_fn(mod, outputs, mesh):
            return outputs.to_local() if self.use_local_output else outputs

        return distribute_module(module, device_mesh, None, input_fn, output_fn)


def _norm_layout(layout, ndim):
    return tuple(Shard(p.dim % ndim) if p.is_shard() else p for p in layout)
