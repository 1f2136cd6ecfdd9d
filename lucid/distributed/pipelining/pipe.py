"""The tracer front end: ``pipeline(module, mb_args, split_spec=...)`` cuts a whole model into
stages with ``lucid.fx`` and returns a :class:`Pipe`; ``pipe.build_stage(i, device)`` wraps
stage ``i`` for a schedule.

NOTE [Pipe splitting]
The model is traced with ``lucid.fx`` (the submodules named in ``split_spec`` kept as single
``call_module`` nodes). Walking the graph in order, a stage ends at every ``pipe_split()`` call,
before a ``SplitPoint.BEGINNING`` submodule and after a ``SplitPoint.END`` one. A parameter or
buffer read directly (``get_attr``) goes to the stage that uses it (one stage only: weights are
not shared between ranks). Stages only talk to their neighbours, so a value made by stage ``a``
and used by stage ``b > a + 1`` is passed through every stage between: stage ``k``'s inputs are
the values made before it and used by it or later, in graph order; stage 0 takes the model's
own arguments. Each stage is a ``GraphModule`` over the original module: the parameters are the
same objects, with the same qualified names.
"""
from __future__ import annotations

import enum
import operator

__all__ = ["Pipe", "SplitPoint", "pipe_split", "pipeline", "PipeInfo"]

_ACTIVE = [None]  # the _PipeTracer running, so that pipe_split() can record itself


class SplitPoint(enum.Enum):
    """Where ``split_spec`` cuts at a submodule: before it (``BEGINNING``) or after it (``END``)."""

    BEGINNING = 1
    END = 2


def pipe_split():
    """Mark a stage boundary in a model's ``forward`` (does nothing when the model runs eagerly).

    Examples
    --------
    >>> import lucid
    >>> from lucid import nn
    >>> from lucid.distributed.pipelining import pipe_split, pipeline
    >>> class Two(nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.a, self.b = nn.Linear(2, 2), nn.Linear(2, 1)
    ...     def forward(self, x):
    ...         x = self.a(x)
    ...         pipe_split()
    ...         return self.b(x)
    >>> pipeline(Two(), (lucid.randn(3, 2),)).num_stages
    2
    """
    tracer = _ACTIVE[0]
    if tracer is not None:
        tracer.create_node("call_function", pipe_split, (), {})


class PipeInfo:
    """What a stage needs to know about its pipeline."""

    def __init__(self, graph, num_stages, has_loss_and_backward=False):
        self.graph, self.num_stages, self.has_loss_and_backward = graph, num_stages, has_loss_and_backward


def _tracer_class(split_spec):
    from ...fx import Tracer

    class _PipeTracer(Tracer):
        def is_leaf_module(self, m, module_qualified_name):
            return module_qualified_name in split_spec or super().is_leaf_module(m, module_qualified_name)

    return _PipeTracer


def _trace(module, split_spec, concrete_args):
    tracer = _tracer_class(split_spec)()
    if _ACTIVE[0] is not None:
        raise RuntimeError("pipeline: already tracing a model for a pipeline")
    _ACTIVE[0] = tracer
    try:
        return tracer.trace(module, concrete_args)
    finally:
        _ACTIVE[0] = None


def _assign_stages(graph, split_spec):
    """``{node: stage}`` for every computing node, and the number of stages (NOTE [Pipe splitting])."""
    stage_of, current, busy, seen, marks = {}, 0, False, set(), []
    for node in graph.nodes:
        if node.op in ("placeholder", "get_attr", "output"):
            continue
        if node.op == "call_function" and node.target is pipe_split:
            current, busy = current + 1, False
            marks.append(node)
            continue
        point = split_spec.get(node.target) if node.op == "call_module" else None
        seen.add(node.target if point is not None else None)
        if point is SplitPoint.BEGINNING and busy:
            current += 1
        stage_of[node], busy = current, True
        if point is SplitPoint.END:
            current, busy = current + 1, False
    for node in marks:
        graph.erase_node(node)
    missing = sorted(set(split_spec) - seen)
    if missing:
        raise ValueError(f"pipeline: split_spec names {missing}, which the traced forward never calls as a "
                         "submodule")
    for node in graph.nodes:
        if node.op == "get_attr":
            stages = sorted({stage_of[u] for u in node.users if u in stage_of})
            if len(stages) > 1:
                raise NotImplementedError(f"pipeline: {node.target} is used by stages {stages}; a parameter "
                                          "or buffer must belong to one stage")
            stage_of[node] = stages[0] if stages else 0
    return stage_of, max(current + 1 if busy else current, 1)  # a split at the very end adds no stage


def _stage_graphs(graph, stage_of, num_stages):
    """One ``Graph`` per stage, with the pass-through inputs and outputs (NOTE [Pipe splitting])."""
    from ...fx import Graph

    nodes = list(graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    out_node = next(n for n in nodes if n.op == "output")
    made = {n: (-1 if n.op == "placeholder" else stage_of[n]) for n in nodes if n.op != "output"}
    last_use = {n: max((num_stages - 1 if u is out_node else stage_of[u]) for u in n.users)
                for n in made if n.users}
    inputs = [placeholders] + [[n for n in made if made[n] < k <= last_use.get(n, -2)]
                               for k in range(1, num_stages)]
    graphs = []
    for k in range(num_stages):
        g, env = Graph(), {}
        for n in inputs[k]:
            env[n] = g.placeholder(n.name)
        for n in nodes:
            if stage_of.get(n) == k:
                env[n] = g.node_copy(n, lambda a: env[a])
        if k == num_stages - 1:
            from ...fx.node import map_arg

            g.output(map_arg(out_node.args[0], lambda a: env[a]))
        else:
            outs = tuple(env[n] for n in inputs[k + 1])
            g.output(outs[0] if len(outs) == 1 else outs)
        graphs.append(g)
    return graphs, [len(i) for i in inputs]


def _chain(submods, n_args, n_inputs):
    """The ``split_gm`` graph: ``submod_0(*args)``, its outputs into ``submod_1``, ..."""
    from ...fx import Graph

    g = Graph()
    values = [g.placeholder(f"arg{i}") for i in range(n_args)]
    for k in range(len(submods)):
        call = g.call_module(f"submod_{k}", tuple(values))
        nxt = n_inputs[k + 1] if k + 1 < len(submods) else None
        if nxt is None or nxt == 1:
            values = [call]
        else:
            values = [g.call_function(operator.getitem, (call, i)) for i in range(nxt)]
    g.output(values[0])
    return g


class Pipe:
    """A model cut into stages by :func:`pipeline`.

    ``split_gm`` runs the stages one after the other (the whole model, in one process);
    ``get_stage_module(i)`` is stage ``i`` (a ``GraphModule`` sharing the model's parameters);
    ``build_stage(i, device)`` makes its :class:`PipelineStage`.
    """

    def __init__(self, split_gm, num_stages, has_loss_and_backward=False):
        self.split_gm, self.num_stages = split_gm, num_stages
        self.has_loss_and_backward = has_loss_and_backward

    def __call__(self, *args, **kwargs):
        return self.split_gm(*args, **kwargs)

    def get_stage_module(self, stage_idx):
        if not 0 <= stage_idx < self.num_stages:
            raise ValueError(f"Pipe.get_stage_module: stage index {stage_idx} is out of range of "
                             f"{self.num_stages}")
        return getattr(self.split_gm, f"submod_{stage_idx}")

    def info(self):
        return PipeInfo(self.split_gm.graph, self.num_stages, self.has_loss_and_backward)

    def build_stage(self, stage_index, device=None, group=None):
        """The :class:`PipelineStage` of stage ``stage_index``, to run on this rank."""
        from .stage import build_stage

        return build_stage(self.get_stage_module(stage_index), stage_index, self.info(), device, group)

    def __repr__(self):
        return f"Pipe(num_stages={self.num_stages})"


def pipeline(module, mb_args, mb_kwargs=None, split_spec=None, split_policy=None):
    """Cut ``module`` into pipeline stages at its ``pipe_split()`` calls and at ``split_spec``
    (``{"layers.2": SplitPoint.BEGINNING}``) (NOTE [Pipe splitting]).

    Parameters
    ----------
    module : Module
        The whole model (the same on every rank).
    mb_args, mb_kwargs : tuple, dict
        One microbatch's arguments; the model is run on them once to check the split.
    split_spec : dict, optional
        Submodule qualified name -> :class:`SplitPoint`.
    split_policy : callable, optional
        Not supported by Lucid (NotImplementedError).

    Returns
    -------
    Pipe

    Examples
    --------
    >>> import lucid
    >>> from lucid import nn
    >>> from lucid.distributed.pipelining import SplitPoint, pipeline
    >>> net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    >>> pipe = pipeline(net, (lucid.randn(2, 3),), split_spec={"2": SplitPoint.BEGINNING})
    >>> pipe.num_stages, type(pipe.get_stage_module(1).get_submodule("2")).__name__
    (2, 'Linear')
    """
    from ...fx import GraphModule

    if split_policy is not None:
        raise NotImplementedError("pipeline: split_policy is not supported by Lucid; use split_spec or pipe_split()")
    split_spec = dict(split_spec or {})
    for name, point in split_spec.items():
        if not isinstance(point, SplitPoint):
            raise TypeError(f"pipeline: split_spec[{name!r}] must be a SplitPoint, got {type(point).__name__}")
    mb_args = mb_args if isinstance(mb_args, tuple) else (mb_args,)
    graph = _trace(module, split_spec, None)
    stage_of, num_stages = _assign_stages(graph, split_spec)
    graphs, n_inputs = _stage_graphs(graph, stage_of, num_stages)
    submods = {f"submod_{k}": GraphModule(module, g, f"PipeStage{k}") for k, g in enumerate(graphs)}
    split_gm = GraphModule(submods, _chain(submods, n_inputs[0], n_inputs), "PipeSplit")
    pipe = Pipe(split_gm, num_stages)
    import lucid

    with lucid.no_grad():  # the split must compute what the model computes
        pipe(*mb_args, **(mb_kwargs or {}))
    return pipe
