"""Pipeline schedules: ``ScheduleGPipe`` and ``Schedule1F1B`` (one stage per rank),
``ScheduleLoopedBFS`` and ``ScheduleInterleaved1F1B`` (several stages per rank).

NOTE [Schedule orders]
A schedule is, for each rank, an order of actions ``(local stage, "F" or "B", microbatch)``:
- GPipe: every forward, then every backward (same microbatch order).
- 1F1B: ``num_stages - stage_index - 1`` forwards first (the warm-up), then one forward and one
  backward in turn, then the backwards left: stage ``s`` holds at most ``num_stages - s``
  microbatches' activations.
- LoopedBFS: rank ``r`` holds stages ``r, r + W, ...`` (``W`` ranks); every forward of its first
  stage, then of the next, ...; then the backwards, last stage first.
- Interleaved 1F1B (Megatron-LM's order): microbatches go in rounds of ``W``; the ``k``-th
  forward is microbatch ``(k // (W V)) W + k % W`` of local stage ``(k // W) % V`` (``V``
  stages per rank), backwards likewise with the local stages reversed; ``2 (W - r - 1) +
  (V - 1) W`` forwards warm up, then one forward and one backward in turn.
Sends never block (NOTE [Stage messages] in stage.py) and every receive waits on an action
that comes earlier in the sender's order with no cycle between ranks (checked for these orders
by simulation, in the tests), so no step can deadlock.
"""
from __future__ import annotations

import lucid

from .microbatch import merge_chunks, split_args_kwargs_into_chunks, split_tensor
from .stage import PipelineStage

__all__ = ["PipelineScheduleSingle", "PipelineScheduleMulti", "ScheduleGPipe", "Schedule1F1B",
           "ScheduleLoopedBFS", "ScheduleInterleaved1F1B"]


class _PipelineSchedule:
    """Runs this rank's stages over the microbatches of one batch, in the order of :meth:`_order`.

    ``scale_grads=True`` divides the gradients by ``n_microbatches`` after the backwards: right
    for a ``loss_fn`` that averages (NOTE [Microbatch split] in microbatch.py).
    """

    def __init__(self, stages, n_microbatches, loss_fn, args_chunk_spec, kwargs_chunk_spec, output_merge_spec,
                 scale_grads):
        api = type(self).__name__
        if isinstance(n_microbatches, bool) or not isinstance(n_microbatches, int) or n_microbatches < 1:
            raise ValueError(f"{api}: n_microbatches must be a positive int, got {n_microbatches!r}")
        for s in stages:
            if not isinstance(s, PipelineStage):
                raise TypeError(f"{api}: stages must be PipelineStage objects, got {type(s).__name__}")
        self._stages, self._n_microbatches, self._loss_fn = list(stages), n_microbatches, loss_fn
        self._num_stages = self._stages[0].num_stages
        self._args_chunk_spec, self._kwargs_chunk_spec = args_chunk_spec, kwargs_chunk_spec
        self._output_merge_spec, self.scale_grads = output_merge_spec, scale_grads
        self._has_backward = loss_fn is not None

    def _order(self):
        """This rank's actions: ``(index into self._stages, "F"/"B", microbatch)``."""
        raise NotImplementedError

    def eval(self, *args, target=None, losses=None, return_outputs=True, loss_kwargs=None, **kwargs):
        """:meth:`step` without the backwards: outputs (and, with ``target``, the losses) only."""
        has_backward, self._has_backward = self._has_backward, False
        try:
            return self.step(*args, target=target, losses=losses, return_outputs=return_outputs,
                             loss_kwargs=loss_kwargs, **kwargs)
        finally:
            self._has_backward = has_backward

    def step(self, *args, target=None, losses=None, return_outputs=True, loss_kwargs=None, **kwargs):
        """Run one iteration on a whole batch: the rank of the first stage passes the model's
        inputs, the rank of the last ``target`` (and a ``losses`` list to receive each
        microbatch's loss), the others nothing. Returns the merged outputs on the last stage's
        rank, None elsewhere."""
        api = f"{type(self).__name__}.step"
        n, first, last = self._n_microbatches, self._stage(0), self._stage(self._num_stages - 1)
        if self._has_backward and not lucid.is_grad_enabled():
            raise RuntimeError(f"{api}: step() requires gradients to be enabled for backward computation; "
                               "it should not be used under lucid.no_grad()")
        if losses is not None and not isinstance(losses, list):
            raise TypeError(f"losses must be a list but got a {type(losses)}")
        if last is not None and self._has_backward and target is None:
            raise ValueError(f"{api}: the last stage computes the loss: pass target=")
        # split everything first: a bad batch raises before any message is sent
        args_mbs, kwargs_mbs = split_args_kwargs_into_chunks(args, kwargs, n, self._args_chunk_spec,
                                                             self._kwargs_chunk_spec)
        targets = split_tensor(target, n, "target") if target is not None and last is not None else [None] * n
        for s in self._stages:
            s.has_backward = self._has_backward
            s.clear_runtime_states()
        loss_fn = self._loss_fn
        if loss_fn is not None and loss_kwargs:
            def loss_fn(out, tgt, fn=self._loss_fn):
                return fn(out, tgt, **loss_kwargs)
        sends = []
        for i, kind, mb in self._order():
            if not self._has_backward and kind == "B":
                continue
            stage = self._stages[i]
            if kind == "F":
                fwd_args = args_mbs[mb] if stage.is_first else ()
                # step's keyword arguments go to this rank's stage: the first one where it holds several
                fwd_kwargs = kwargs_mbs[mb] if stage.is_first or len(self._stages) == 1 else {}
                sends += stage.forward_one_chunk(mb, fwd_args, fwd_kwargs, targets[mb], loss_fn)
            else:
                sends += stage.backward_one_chunk(mb)
        for work in sends:
            work.wait()
        return self._finish(last, losses, return_outputs)

    def _finish(self, last, losses, return_outputs):
        if self._has_backward and self.scale_grads:
            for s in self._stages:
                s.scale_grads(self._n_microbatches)
        if last is None:
            return None
        if losses is not None and last._losses:
            losses[:] = [last._losses[m] for m in range(self._n_microbatches)]
        outputs = merge_chunks(last.output_chunks) if return_outputs else None
        last.output_chunks = []
        return outputs

    def _stage(self, index):
        return next((s for s in self._stages if s.stage_index == index), None)


class PipelineScheduleSingle(_PipelineSchedule):
    """The base of the schedules that run one :class:`PipelineStage` per rank."""

    def __init__(self, stage, n_microbatches, loss_fn=None, args_chunk_spec=None, kwargs_chunk_spec=None,
                 output_merge_spec=None, scale_grads=True):
        api = type(self).__name__
        if not isinstance(stage, PipelineStage):
            raise TypeError(f"{api}: stage must be a PipelineStage, got {type(stage).__name__}")
        if stage.group_size != stage.num_stages:
            raise ValueError(f"{api}: runs one stage per rank, but the pipeline has {stage.num_stages} stages "
                             f"on {stage.group_size} ranks")
        super().__init__([stage], n_microbatches, loss_fn, args_chunk_spec, kwargs_chunk_spec,
                         output_merge_spec, scale_grads)
        self._stage_obj = stage


class ScheduleGPipe(PipelineScheduleSingle):
    """Every forward, then every backward (NOTE [Schedule orders]).

    Examples
    --------
    >>> from lucid.distributed.pipelining import ScheduleGPipe
    >>> schedule = ScheduleGPipe(stage, n_microbatches=4, loss_fn=loss_fn)   # doctest: +SKIP
    >>> schedule.step(x)                           # first stage              # doctest: +SKIP
    >>> schedule.step(target=y, losses=losses)     # last stage               # doctest: +SKIP
    """

    def _order(self):
        mbs = range(self._n_microbatches)
        return [(0, "F", m) for m in mbs] + [(0, "B", m) for m in mbs]


class Schedule1F1B(PipelineScheduleSingle):
    """One forward, one backward in the steady state (NOTE [Schedule orders]); needs at least as
    many microbatches as stages.

    Examples
    --------
    >>> from lucid.distributed.pipelining import Schedule1F1B
    >>> schedule = Schedule1F1B(stage, n_microbatches=4, loss_fn=loss_fn)    # doctest: +SKIP
    """

    def __init__(self, stage, n_microbatches, loss_fn=None, args_chunk_spec=None, kwargs_chunk_spec=None,
                 output_merge_spec=None, scale_grads=True):
        super().__init__(stage, n_microbatches, loss_fn, args_chunk_spec, kwargs_chunk_spec, output_merge_spec,
                         scale_grads)
        if n_microbatches < self._num_stages:
            raise ValueError(f"Number of microbatches ({n_microbatches}) must be greater than or equal to the "
                             f"number of stages ({self._num_stages}).")

    def _order(self):
        return one_f_one_b_order(self._n_microbatches, self._num_stages, self._stage_obj.stage_index)


class PipelineScheduleMulti(_PipelineSchedule):
    """The base of the schedules that run several stages per rank: rank ``r`` of ``W`` holds
    stages ``r, r + W, r + 2W, ...`` (all of them, in this order); needs at least 2 ranks."""

    def __init__(self, stages, n_microbatches, loss_fn=None, args_chunk_spec=None, kwargs_chunk_spec=None,
                 output_merge_spec=None, scale_grads=True, backward_requires_autograd=True, defer_pp_recv=False):
        # defer_pp_recv (when receives are posted) changes no result: accepted and ignored
        api = type(self).__name__
        if not backward_requires_autograd:
            raise NotImplementedError(f"{api}: backward_requires_autograd=False (a custom backward) is not "
                                      "supported by Lucid")
        if not isinstance(stages, (list, tuple)) or not stages:
            raise TypeError(f"{api}: stages must be a non-empty list of PipelineStage")
        super().__init__(stages, n_microbatches, loss_fn, args_chunk_spec, kwargs_chunk_spec, output_merge_spec,
                         scale_grads)
        first = self._stages[0]
        ranks, rank = first.group_size, first.group_rank
        if ranks < 2:
            raise ValueError(f"{api}: Lucid's multi-stage schedules need at least 2 ranks (neighbouring stages "
                             "message each other), got 1")
        want = list(range(rank, first.num_stages, ranks))
        got = [s.stage_index for s in self._stages]
        if got != want or any(s.num_stages != first.num_stages or s.group is not first.group for s in self._stages):
            raise ValueError(f"{api}: group rank {rank} of {ranks} must hold stages {want} of {first.num_stages} "
                             f"(in this order, one group), got {got}")
        self.pp_group_size, self.rank = ranks, rank
        self._n_local = len(self._stages)


class ScheduleLoopedBFS(PipelineScheduleMulti):
    """Breadth first over this rank's stages: all forwards of one stage before the next's
    (NOTE [Schedule orders]).

    Examples
    --------
    >>> from lucid.distributed.pipelining import ScheduleLoopedBFS
    >>> schedule = ScheduleLoopedBFS([stage_a, stage_b], 4, loss_fn=loss_fn)   # doctest: +SKIP
    """

    def __init__(self, stages, n_microbatches, loss_fn=None, output_merge_spec=None, scale_grads=True,
                 backward_requires_autograd=True, defer_pp_recv=False):
        super().__init__(stages, n_microbatches, loss_fn, None, None, output_merge_spec, scale_grads,
                         backward_requires_autograd, defer_pp_recv)

    def _order(self):
        return looped_bfs_order(self._n_microbatches, self._n_local)


class ScheduleInterleaved1F1B(PipelineScheduleMulti):
    """1F1B over several stages per rank, microbatches in rounds of ``W`` (the number of ranks)
    (NOTE [Schedule orders]); ``n_microbatches`` must be a multiple of ``W``.

    Examples
    --------
    >>> from lucid.distributed.pipelining import ScheduleInterleaved1F1B
    >>> schedule = ScheduleInterleaved1F1B([stage_a, stage_b], 4, loss_fn=loss_fn)   # doctest: +SKIP
    """

    def __init__(self, stages, n_microbatches, loss_fn=None, args_chunk_spec=None, kwargs_chunk_spec=None,
                 output_merge_spec=None, scale_grads=True, backward_requires_autograd=True, defer_pp_recv=False):
        super().__init__(stages, n_microbatches, loss_fn, args_chunk_spec, kwargs_chunk_spec, output_merge_spec,
                         scale_grads, backward_requires_autograd, defer_pp_recv)
        if n_microbatches % self.pp_group_size:
            raise ValueError(f"ScheduleInterleaved1F1B: n_microbatches ({n_microbatches}) must be a multiple of "
                             f"the number of ranks ({self.pp_group_size}): they go in rounds of one per rank")

    def _order(self):
        return interleaved_order(self._n_microbatches, self.pp_group_size, self.rank, self._n_local)


# ----- the orders (NOTE [Schedule orders]): (local stage, "F"/"B", microbatch) -----

def one_f_one_b_order(n_microbatches, num_stages, stage_index):
    """Stage ``stage_index``'s 1F1B order."""
    n = n_microbatches
    warmup = min(n, num_stages - stage_index - 1)
    order = [(0, "F", m) for m in range(warmup)]
    for k in range(n - warmup):
        order += [(0, "F", warmup + k), (0, "B", k)]
    return order + [(0, "B", m) for m in range(n - warmup, n)]


def looped_bfs_order(n_microbatches, n_local):
    """A rank's LoopedBFS order over its ``n_local`` stages."""
    mbs, local = range(n_microbatches), range(n_local)
    return [(v, "F", m) for v in local for m in mbs] + [(v, "B", m) for v in reversed(local) for m in mbs]


def interleaved_order(n_microbatches, ranks, rank, n_local):
    """Rank ``rank``'s interleaved 1F1B order (``n_microbatches`` a multiple of ``ranks``)."""
    total = n_local * n_microbatches

    def action(k, kind):
        chunk = (k // ranks) % n_local
        return (chunk if kind == "F" else n_local - 1 - chunk, kind, (k // (ranks * n_local)) * ranks + k % ranks)

    warmup = min(total, 2 * (ranks - rank - 1) + (n_local - 1) * ranks)
    order = [action(k, "F") for k in range(warmup)]
    for k in range(total - warmup):
        order += [action(warmup + k, "F"), action(k, "B")]
    return order + [action(k, "B") for k in range(total - warmup, total)]
