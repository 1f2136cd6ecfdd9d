"""``lucid.fx``: symbolic tracing and graph transformation (``torch.fx``).

``symbolic_trace(model)`` runs ``model.forward`` on ``Proxy`` values and records each
operation as a ``Node`` of a ``Graph``; the result is a ``GraphModule``, a Module whose
``forward`` is Python code generated from that graph (``.code``). Edit the graph (replace,
insert, erase nodes), call ``recompile()``, and the module runs the edited program. An
``Interpreter`` runs a graph node by node (``ShapeProp`` records shapes); a ``Transformer``
rewrites one.

Differences from torch.fx: see NOTE [Tracing without __torch_function__] in ``tracer.py``
(Lucid's namespaces are patched during a trace) and ``Tracer.is_leaf_module`` (``lucid.nn``
layers are leaves).

Examples
--------
>>> import lucid
>>> from lucid import nn
>>> import lucid.nn.functional as F
>>> import lucid.fx
>>> class Net(nn.Module):
...     def __init__(self):
...         super().__init__()
...         self.fc = nn.Linear(3, 2)
...     def forward(self, x):
...         return F.relu(self.fc(x)).sum(dim=1)
>>> gm = lucid.fx.symbolic_trace(Net())
>>> print(gm.code.strip())
def forward(self, x):
    fc = self.fc(x);  x = None
    relu = lucid.nn.functional.relu(fc);  fc = None
    sum_1 = relu.sum(dim = 1);  relu = None
    return sum_1
"""
from . import passes, subgraph_rewriter  # noqa: F401
from .graph import Graph, PythonCode
from .graph_module import GraphModule
from .interpreter import Interpreter, Transformer
from .node import Node, map_arg
from .proxy import Attribute, Proxy, TraceError
from .subgraph_rewriter import replace_pattern
from .node import has_side_effect
from .tracer import PH, Tracer, symbolic_trace, wrap

__all__ = ["Graph", "GraphModule", "Interpreter", "Node", "Proxy", "Attribute", "Tracer", "TraceError",
           "Transformer", "PythonCode", "symbolic_trace", "wrap", "map_arg", "replace_pattern", "PH",
           "subgraph_rewriter", "passes", "has_side_effect"]

