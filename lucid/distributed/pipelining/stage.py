"""``PipelineStage``: one rank's piece of a model, with the point-to-point traffic around it.

NOTE [Stage messages]
Stage ``s`` lives on group rank ``s % group_size``. Each ``step``, once, a stage that has a
next stage sends it the *structure* of its outputs (how many tensors, their dtypes, ranks and
whether they require grad) with ``send_object_list``, right after the forward of microbatch 0;
the next stage waits for it before its first forward (in every schedule the receiver gets
there without waiting on anything the sender does later, so the blocking object send always
meets its receive: NOTE [Schedule orders] in schedules.py). Then for every microbatch the sender
``isend``s a small int64 header with the shapes, then the tensors; the receiver reads the
header, allocates, and receives (so uneven microbatches work). Gradients go back with the
shapes the receiving stage already knows. All sends are non-blocking and waited on at the end
of the step, so a schedule blocks only on receives, in an order that has no cycle.
"""
from __future__ import annotations

import lucid

from .. import collectives as _c
from ..p2p import recv_object_list, send_object_list
from ..process_group import _resolve

__all__ = ["PipelineStage", "PipeliningShapeError", "build_stage"]

_FORWARD, _BACKWARD = 0, 1


class PipeliningShapeError(RuntimeError):
    """A tensor a stage received or produced has another shape or dtype than declared
    (``input_args``/``output_args``) (PyTorch's name)."""


def _as_tuple(value, api, what):
    values = value if isinstance(value, (tuple, list)) else (value,)
    for i, v in enumerate(values):
        if not isinstance(v, lucid.Tensor):
            raise TypeError(f"{api}: {what}[{i}] is a {type(v).__name__}; a pipeline stage passes tensors only")
    return tuple(values)


def _declared(args, api, what):
    """``input_args``/``output_args`` as a tuple of example tensors (or None)."""
    return None if args is None else _as_tuple(args, api, what)


def _check_declared(declared, tensors, stage, what):
    """Raise PipeliningShapeError when ``tensors`` do not match the example tensors declared."""
    if declared is None:
        return
    got = [(tuple(t.shape), t.dtype) for t in tensors]
    want = [(tuple(t.shape), t.dtype) for t in declared]
    if got != want:
        raise PipeliningShapeError(f"PipelineStage: stage {stage} {what}: expected (shape, dtype) {want}, "
                                   f"got {got}")


class PipelineStage:
    """One stage of a pipeline: ``submodule`` run on this rank, fed by the previous stage's rank
    and feeding the next one (manual splitting: each rank builds its own piece).

    Parameters
    ----------
    submodule : Module
        This stage's part of the model.
    stage_index : int
        Its position, ``0 <= stage_index < num_stages``; stage ``s`` must run on group rank
        ``s % group_size`` (NOTE [Stage messages]).
    num_stages : int
        How many stages the pipeline has.
    device : device or str, optional
        Where received activations and gradients are allocated (default: the default device).
    input_args, output_args : Tensor or tuple of Tensors, optional
        Example tensors of one microbatch's inputs/outputs. When given, every microbatch is
        checked against them (PipeliningShapeError); shapes are otherwise sent along.
    output_grads, input_grads : optional
        Accepted for PyTorch's signature (its DTensor gradient layouts); gradients always have
        the shapes of the values they belong to.
    group : ProcessGroup, optional
        The ranks of the pipeline (default: the world).

    Examples
    --------
    >>> import lucid, lucid.distributed as dist
    >>> from lucid.distributed.pipelining import PipelineStage, ScheduleGPipe
    >>> dist.init_process_group("mpi")                                      # doctest: +SKIP
    >>> stage = PipelineStage(my_piece, dist.get_rank(), dist.get_world_size(), "cpu")  # doctest: +SKIP
    >>> ScheduleGPipe(stage, 4, loss_fn=lucid.nn.functional.mse_loss)       # doctest: +SKIP
    """

    def __init__(self, submodule, stage_index, num_stages, device=None, input_args=None, output_args=None,
                 output_grads=None, input_grads=None, group=None, dw_builder=None, get_mesh=None):
        api = "PipelineStage"
        for name, v in (("stage_index", stage_index), ("num_stages", num_stages)):
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"{api}: {name} must be an int, got {type(v).__name__}")
        if num_stages < 1:
            raise ValueError(f"{api}: num_stages must be at least 1, got {num_stages}")
        if not 0 <= stage_index < num_stages:
            raise ValueError(f"Stage index {stage_index} is out of range of {num_stages}")
        if dw_builder is not None or get_mesh is not None:
            raise NotImplementedError(f"{api}: dw_builder (zero-bubble schedules) and get_mesh (DTensor "
                                      "stages) are not supported by Lucid")
        pg = _resolve(group, api)
        self.group, self.group_rank, self.group_size = group, pg.rank(), pg.size()
        if self.group_size > num_stages:
            raise RuntimeError(f"Pipeline group size {self.group_size} cannot be larger than number of "
                               f"stages {num_stages}")
        if stage_index % self.group_size != self.group_rank:
            raise ValueError(f"{api}: stage {stage_index} runs on group rank {stage_index % self.group_size} "
                             f"(stage % group size), but this is group rank {self.group_rank}")
        self.submod, self.stage_index, self.num_stages, self.device = submodule, stage_index, num_stages, device
        self._input_args = _declared(input_args, api, "input_args")
        self._output_args = _declared(output_args, api, "output_args")
        self.has_backward = False
        self.clear_runtime_states()

    @property
    def is_first(self):
        return self.stage_index == 0

    @property
    def is_last(self):
        return self.stage_index == self.num_stages - 1

    def _peer(self, stage):
        return stage % self.group_size

    def _tag(self, receiving_stage, direction):
        # one tag per (receiving stage, direction): several stages per rank never mix messages
        return 2 * receiving_stage + direction

    def clear_runtime_states(self):
        """Forget the microbatches of the last step (their inputs, outputs, losses)."""
        self._inputs, self._outputs, self._losses = {}, {}, {}
        self.output_chunks = []
        self._in_structure = None   # [(dtype, ndim, requires_grad)] of the inputs from the previous stage
        self._out_structure = None  # the same for this stage's outputs, once sent

    def scale_grads(self, grad_scale_factor):
        """Divide every parameter gradient of the stage by ``grad_scale_factor`` (in place), as
        PyTorch: the whole ``.grad``, including what was there before the step."""
        if grad_scale_factor != 1:
            with lucid.no_grad():
                for p in self.submod.parameters():
                    if p.grad is not None:
                        p.grad.div_(grad_scale_factor)

    # ----- forward -----

    def forward_one_chunk(self, mb, args=(), kwargs=None, target=None, loss_fn=None):
        """Run microbatch ``mb`` through the stage: receive its inputs (not on the first stage),
        compute, then send the outputs on (not on the last) or compute the loss (on the last, with
        ``loss_fn``). Returns the send handles, to be waited on before the step ends."""
        inputs = tuple(args) if self.is_first else self._receive_activations(mb)
        with lucid.enable_grad() if self.has_backward else lucid.no_grad():
            out = self.submod(*inputs, **(kwargs or {}))
            outputs = _as_tuple(out, "PipelineStage", f"stage {self.stage_index} output")
            _check_declared(self._output_args, outputs, self.stage_index, f"microbatch {mb} outputs")
            if self.is_last:
                self.output_chunks.append(out)
                if loss_fn is not None and target is not None:
                    self._losses[mb] = loss_fn(out, target)
        if self.has_backward:
            self._inputs[mb], self._outputs[mb] = inputs, outputs
        return [] if self.is_last else self._send_activations(mb, outputs)

    def _send_activations(self, mb, outputs):
        nxt = self.stage_index + 1
        if self._out_structure is None:  # NOTE [Stage messages]
            self._out_structure = [(t.dtype, t.ndim, bool(t.requires_grad)) for t in outputs]
            send_object_list([self._out_structure], group=self.group, group_dst=self._peer(nxt))
        shapes = [d for t in outputs for d in t.shape]
        header = lucid.tensor(shapes, dtype=lucid.int64, device=self.device)
        tag = self._tag(nxt, _FORWARD)
        works = [_c.isend(header, group=self.group, tag=tag, group_dst=self._peer(nxt))]
        works += [_c.isend(t.detach(), group=self.group, tag=tag, group_dst=self._peer(nxt)) for t in outputs]
        return works

    def _receive_activations(self, mb):
        prev, tag = self._peer(self.stage_index - 1), self._tag(self.stage_index, _FORWARD)
        if self._in_structure is None:
            box = [None]
            recv_object_list(box, group=self.group, group_src=prev)
            self._in_structure = box[0]
        ndims = [nd for _, nd, _ in self._in_structure]
        header = lucid.empty((sum(ndims),), dtype=lucid.int64, device=self.device)
        _c.irecv(header, group=self.group, tag=tag, group_src=prev).wait()
        dims, buffers, at = header.tolist(), [], 0
        for dtype, nd, _ in self._in_structure:
            buffers.append(lucid.empty(tuple(dims[at:at + nd]), dtype=dtype, device=self.device))
            at += nd
        works = [_c.irecv(b, group=self.group, tag=tag, group_src=prev) for b in buffers]
        for w in works:
            w.wait()
        _check_declared(self._input_args, buffers, self.stage_index, f"microbatch {mb} inputs")
        return tuple(b.requires_grad_(rg and self.has_backward) for b, (_, _, rg) in zip(buffers, self._in_structure))

    # ----- backward -----

    def backward_one_chunk(self, mb):
        """Back-propagate microbatch ``mb``: from its loss on the last stage, else from the output
        gradients received from the next stage; parameter gradients accumulate, and the inputs'
        gradients go to the previous stage. Returns the send handles."""
        inputs, outputs = self._inputs.pop(mb), self._outputs.pop(mb)
        if self.is_last:
            lucid.autograd.backward(self._losses[mb])
        else:
            grads = self._receive_gradients(outputs)
            pairs = [(o, g) for o, g in zip(outputs, grads) if g is not None]
            if pairs:
                lucid.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
        return [] if self.is_first else self._send_gradients(inputs)

    def _receive_gradients(self, outputs):
        nxt, tag = self._peer(self.stage_index + 1), self._tag(self.stage_index, _BACKWARD)
        grads, works = [], []
        for o, (_, _, rg) in zip(outputs, self._out_structure):
            g = lucid.empty(tuple(o.shape), dtype=o.dtype, device=self.device) if rg else None
            if g is not None:
                works.append(_c.irecv(g, group=self.group, tag=tag, group_src=nxt))
            grads.append(g)
        for w in works:
            w.wait()
        return grads

    def _send_gradients(self, inputs):
        prev, tag = self._peer(self.stage_index - 1), self._tag(self.stage_index - 1, _BACKWARD)
        works = []
        for x in inputs:
            if x.requires_grad:  # the previous stage expects a gradient for exactly these
                g = x.grad if x.grad is not None else lucid.zeros_like(x)
                works.append(_c.isend(g.detach(), group=self.group, tag=tag, group_dst=prev))
        return works


def build_stage(stage_module, stage_index, pipe_info, device=None, group=None):
    """A :class:`PipelineStage` for one submodule of a :class:`~lucid.distributed.pipelining.Pipe`
    (``pipe.build_stage(stage_index, device)`` calls this)."""
    return PipelineStage(stage_module, stage_index, pipe_info.num_stages, device, group=group)
