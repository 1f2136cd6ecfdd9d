"""``fuse_fx`` and ``prepare_fx``'s graph work: trace, fuse module chains, give each node its
qconfig, swap QAT modules in, and insert observers (see NOTE [FX quantization patterns])."""
from __future__ import annotations

import copy

from lucid.fx import GraphModule, Tracer

from ..fake_quantize import FakeQuantizeBase
from ..observer import ObserverBase
from . import _patterns as P

OBSERVER_PREFIX = "activation_post_process_"


class QuantizationTracer(Tracer):
    """``symbolic_trace``'s tracer that also keeps quantization's own modules (fused, QAT,
    quantized, observers) as ``call_module`` leaves."""

    def is_leaf_module(self, m, module_qualified_name):
        from ..fuse_modules import _FusedModule

        return super().is_leaf_module(m, module_qualified_name) or isinstance(m, _FusedModule) or \
            type(m).__module__.startswith("lucid.ao")


def trace(model):
    if isinstance(model, GraphModule):
        return model
    graph = QuantizationTracer().trace(model)
    return GraphModule(model, graph, type(model).__name__)


def fuse(model, is_qat):
    """The traced ``model`` with each fusable module chain replaced by its fused module (at
    the first module's name; the others are dropped)."""
    gm = trace(model)
    modules = dict(gm.named_modules())
    for node in list(gm.graph.nodes):
        if node.graph is None or node.op != "call_module":
            continue
        chain = P.fusion_chain(node, modules, is_qat)
        if len(chain) == 1:
            continue
        fused = P.fused_module(chain, modules, is_qat)
        _replace_module(gm, node.target, fused)
        modules[node.target] = fused
        chain[-1].replace_all_uses_with(node)
        for n in reversed(chain[1:]):
            gm.graph.erase_node(n)
    gm.graph.lint()
    gm.delete_all_unused_submodules()
    gm.recompile()
    return gm


def _replace_module(gm, target, new):
    *parent, name = target.split(".")
    owner = gm.get_submodule(".".join(parent)) if parent else gm
    setattr(owner, name, new)


def is_observer(mod):
    return isinstance(mod, (ObserverBase, FakeQuantizeBase))


def is_dynamic(qconfig):
    act = qconfig.activation()
    return bool(getattr(act, "is_dynamic", False))


def _node_qconfigs(gm, qconfig_mapping):
    modules = dict(gm.named_modules())
    out, counts = {}, {}
    for node in gm.graph.nodes:
        if node.op == "call_module":
            out[node.name] = qconfig_mapping._qconfig_for(type(modules[node.target]), module_name=node.target)
        elif node.op in ("call_function", "call_method"):
            idx = counts.setdefault(node.target, 0) if P._hashable(node.target) else 0
            if P._hashable(node.target):
                counts[node.target] += 1
            out[node.name] = qconfig_mapping._qconfig_for(node.target, parent_name="", index=idx)
    return out


def _swap_qat(gm, qconfigs):
    from ..quantize import get_default_qat_module_mappings

    mapping = get_default_qat_module_mappings()
    modules = dict(gm.named_modules())
    for node in gm.graph.nodes:
        mod = modules.get(node.target) if node.op == "call_module" else None
        qconfig = qconfigs.get(node.name)
        if mod is None or qconfig is None or type(mod) not in mapping:
            continue
        mod.qconfig = qconfig
        _replace_module(gm, node.target, mapping[type(mod)].from_float(mod))


class _Inserter:
    """Adds observer modules and their ``call_module`` nodes to one GraphModule."""

    def __init__(self, gm):
        self.gm, self.count = gm, 0
        self.weight_observers = set()

    def node(self, mod, arg):
        """A new observer node right after ``arg`` (where PyTorch puts it)."""
        name = f"{OBSERVER_PREFIX}{self.count}"
        self.count += 1
        setattr(self.gm, name, mod)
        with self.gm.graph.inserting_after(arg):
            return self.gm.graph.call_module(name, (arg,))

    def observed(self, arg):
        """The observer node already watching ``arg`` (or ``arg`` itself when it is one)."""
        if self.is_obs_node(arg):
            return arg
        for user in arg.users:
            if self.is_obs_node(user) and user.args[0] is arg and user.target not in self.weight_observers:
                return user
        return None

    def is_obs_node(self, n):
        return getattr(n, "op", None) == "call_module" and n.target.startswith(OBSERVER_PREFIX) and \
            is_observer(self.gm.get_submodule(n.target))


def _set_arg(node, pos, value):
    i, j = pos
    if j is None:
        node.update_arg(i, value)
    else:
        seq = list(node.args[i])
        seq[j] = value
        node.update_arg(i, type(node.args[i])(seq))


def insert_observers(gm, qconfigs):
    """Observe every quantizable node's inputs and output (see NOTE [FX quantization patterns])."""
    modules = dict(gm.named_modules())
    ins = _Inserter(gm)
    tails = set()
    for node in list(gm.graph.nodes):
        qconfig = qconfigs.get(node.name)
        if qconfig is None or ins.is_obs_node(node) or node in tails:
            continue
        kind, tail = P.classify(node, modules)
        if kind is None:
            continue
        if tail is not None:
            tails.add(tail)
            if qconfigs.get(tail.name) is None:  # a fused pattern is quantized only as a whole
                continue
        if is_dynamic(qconfig):
            _observe_dynamic(node, kind, qconfig, ins, modules)
            continue
        if kind == P.FIXED and not P.fixed_observer_ok(qconfig.activation(), P.fixed_name(node, modules)):
            continue  # PyTorch leaves a fixed-qparams op without a fixed-qparams qconfig in float
        inputs = _observe_inputs(node, kind, qconfig, ins)
        if kind == P.WEIGHTED and node.op == "call_function" and len(node.args) > 1:
            w = ins.node(qconfig.weight(), node.args[1])
            ins.weight_observers.add(w.target)
            node.update_arg(1, w)
        if kind == P.WEIGHTED and node.op == "call_module":
            modules[node.target].qconfig = qconfig
        _observe_output(tail or node, kind, qconfig, inputs, ins)
    gm.__dict__["_fxq_weight_observers"] = ins.weight_observers
    return gm


def _observe_inputs(node, kind, qconfig, ins):
    found = []
    for pos in P.activation_inputs(node, kind):
        arg = P.get_arg(node, pos)
        obs = ins.observed(arg)
        if obs is None and kind != P.REUSE:
            obs = ins.node(qconfig.activation(), arg)
        if obs is not None and obs is not arg:
            _set_arg(node, pos, obs)
        found.append(obs)
    if node.op == "call_function" and P.orig(node.target) is P.CAT and found and all(found):
        first = ins.gm.get_submodule(found[0].target)
        for obs in found[1:]:
            setattr(ins.gm, obs.target, first)
    return found


def _observe_output(last, kind, qconfig, inputs, ins):
    if kind in (P.SHARE, P.REUSE):
        if not inputs or inputs[0] is None:
            return
        mod = ins.gm.get_submodule(inputs[0].target)
    else:
        mod = qconfig.activation()
    obs = ins.node(mod, last)
    last.replace_all_uses_with(obs, delete_user_cb=lambda user: user is not obs)


def _observe_dynamic(node, kind, qconfig, ins, modules):
    """Dynamic quantization watches only weights (and marks Linear inputs, as PyTorch's
    placeholder observers do); the layers themselves are swapped at convert."""
    is_linear = (node.op == "call_module" and type(modules[node.target]) in _dynamic_types()) or \
        (node.op == "call_function" and P.orig(node.target) is P.orig(P.F.linear))
    if not is_linear:
        return
    if node.op == "call_module":
        modules[node.target].qconfig = qconfig
    arg = node.args[0]
    obs = ins.observed(arg) or ins.node(qconfig.activation(), arg)
    node.update_arg(0, obs)
    if node.op == "call_function":
        w = ins.node(qconfig.weight(), node.args[1])
        ins.weight_observers.add(w.target)
        node.update_arg(1, w)


def _dynamic_types():
    from ..quantize import get_default_dynamic_quant_module_mappings

    return tuple(get_default_dynamic_quant_module_mappings())


def prepare(model, qconfig_mapping, is_qat, example_inputs=None):
    """Trace, fuse, assign qconfigs, swap QAT modules, insert observers."""
    from ..qconfig_mapping import QConfigMapping

    if isinstance(qconfig_mapping, dict):
        qconfig_mapping = QConfigMapping.from_dict(qconfig_mapping)
    if not isinstance(qconfig_mapping, QConfigMapping):
        raise TypeError(f"prepare_fx: expected a QConfigMapping, got {type(qconfig_mapping).__name__}")
    gm = fuse(copy.deepcopy(model), is_qat)  # the caller's model keeps its modules
    qconfigs = _node_qconfigs(gm, qconfig_mapping)
    if is_qat:
        _swap_qat(gm, qconfigs)
    insert_observers(gm, qconfigs)
    gm.__dict__["_fxq_qconfigs"] = qconfigs
    gm.__dict__["_fxq_is_qat"] = is_qat
    gm.graph.lint()
    gm.recompile()
    return gm
