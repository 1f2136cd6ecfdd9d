"""``convert_fx`` / ``convert_to_reference_fx``'s graph work.

NOTE [Lowering an observed graph]
PyTorch converts to the reference form (quantize / dequantize around floating-point ops) and
then pattern-matches ``dequantize -> op -> quantize`` into quantized kernels. Lucid lowers in
one pass over the observed graph, in order, tracking which values are quantized tensors:
- an activation observer on a float value becomes ``quantize_per_tensor`` with its observed
  scale and zero point (``get_attr`` buffers, named as PyTorch names them); on a value that is
  already quantized (a quantized op's output, or a SHARE op's) it is dropped;
- a WEIGHTED / BINARY / REQUANT node with quantized inputs becomes its quantized module
  (``from_float`` with the output observer as ``activation_post_process``) or function, with
  the output observer's parameters, and its output is quantized;
- a SHARE node with a quantized input runs on it unchanged (Lucid's quantized tensors
  dispatch pooling, ReLU, clamp, flatten, views and ``cat``);
- any other node gets ``x.dequantize()`` for each quantized argument, as does the output.
The reference form keeps every op in floating point: each activation observer becomes a
quantize / dequantize pair, each weight is replaced by its quantized-then-dequantized value.
"""
from __future__ import annotations

import lucid
from lucid import nn

from . import _patterns as P
from .prepare import OBSERVER_PREFIX, _replace_module, is_observer

__all__ = ["quantized_add", "quantized_add_relu", "quantized_mul", "quantized_mul_relu", "quantized_linear",
           "quantized_linear_relu", "quantized_conv", "quantized_conv_relu"]


# ------------------------------------------------------------------ lowered kernels
def _qfunctional(scale, zero_point):
    from lucid.ao.nn.quantized import QFunctional

    q = QFunctional()
    q.scale, q.zero_point = float(scale), int(zero_point)
    return q


def quantized_add(x, y, scale, zero_point):
    """``x + y`` of quantized tensors, requantized to ``scale`` / ``zero_point``
    (PyTorch's ``quantized.add``)."""
    return _qfunctional(scale, zero_point).add(x, y)


def quantized_add_relu(x, y, scale, zero_point):
    """``relu(x + y)`` of quantized tensors (PyTorch's ``quantized.add_relu``)."""
    return _qfunctional(scale, zero_point).add_relu(x, y)


def quantized_mul(x, y, scale, zero_point):
    """``x * y`` of quantized tensors (PyTorch's ``quantized.mul``)."""
    return _qfunctional(scale, zero_point).mul(x, y)


def quantized_mul_relu(x, y, scale, zero_point):
    """``relu(x * y)`` of quantized tensors (PyTorch's ``quantized.mul_relu``)."""
    from lucid.ao.nn.quantized._qops import relu

    return relu(quantized_mul(x, y, scale, zero_point))


def quantized_linear(x, weight, bias, scale, zero_point):
    """``F.linear`` on a quantized input with a qint8 weight (PyTorch's ``quantized.linear``)."""
    from lucid.ao.nn.quantized.functional import linear

    return linear(x, weight, bias, float(scale), int(zero_point))


def quantized_linear_relu(x, weight, bias, scale, zero_point):
    """``relu(F.linear(...))`` in one requantization (PyTorch's ``quantized.linear_relu``)."""
    from lucid.ao.nn.quantized import LinearReLU

    m = LinearReLU(weight.shape[1], weight.shape[0], bias is not None)
    m.set_weight_bias(weight, bias)
    m.scale, m.zero_point = float(scale), int(zero_point)
    return m(x)


def quantized_conv(x, weight, bias, stride, padding, dilation, groups, scale, zero_point):
    """``F.conv{1,2,3}d`` on a quantized input (PyTorch's ``quantized.conv2d`` ...)."""
    from lucid.ao.nn.quantized import functional as qF

    conv = getattr(qF, f"conv{weight.ndim - 2}d")
    return conv(x, weight, bias, stride, padding, dilation, groups, scale=float(scale),
                zero_point=int(zero_point))


def quantized_conv_relu(x, weight, bias, stride, padding, dilation, groups, scale, zero_point):
    """``relu(F.conv...)``: ReLU after requantization equals ReLU before it (rounding is
    monotone and 0 maps to the zero point)."""
    from lucid.ao.nn.quantized._qops import relu

    return relu(quantized_conv(x, weight, bias, stride, padding, dilation, groups, scale, zero_point))


_BINARY_KERNELS = {("add", False): quantized_add, ("add", True): quantized_add_relu,
                   ("mul", False): quantized_mul, ("mul", True): quantized_mul_relu}


# ------------------------------------------------------------------ the pass
class _Converter:
    def __init__(self, gm, reference):
        self.gm, self.graph, self.reference = gm, gm.graph, reference
        self.modules = _Modules(gm)
        self.qconfigs = gm.__dict__.get("_fxq_qconfigs", {})
        self.weight_obs = gm.__dict__.get("_fxq_weight_observers", set())
        self.quantized, self.dq = set(), {}

    def run(self):
        for node in list(self.graph.nodes):
            if node.graph is None:
                continue
            if self.is_obs(node):
                self.observer(node)
            elif node.op == "output" or not self.lower(node):
                self.float_op(node)
        for node in list(self.graph.nodes):  # weight observers of ops left in float
            if self.is_obs(node):
                node.replace_all_uses_with(node.args[0])
                self.graph.erase_node(node)
        for name in [n for n in self.gm._modules if n.startswith(OBSERVER_PREFIX)]:
            del self.gm._modules[name]
        self.graph.eliminate_dead_code()
        self.graph.lint()
        self.gm.delete_all_unused_submodules()
        for key in ("_fxq_qconfigs", "_fxq_weight_observers", "_fxq_is_qat"):
            self.gm.__dict__.pop(key, None)
        self.gm.recompile()
        return self.gm

    # ---------------------------------------------------------------- helpers
    def is_obs(self, n):
        return getattr(n, "op", None) == "call_module" and n.target.startswith(OBSERVER_PREFIX) and \
            is_observer(self.modules.get(n.target))

    def out_obs(self, node):
        users = [u for u in node.users if self.is_obs(u) and u.target not in self.weight_obs]
        return self.modules[users[0].target] if users else None

    def buffer(self, prefix, kind, value, before):
        i = 0
        while hasattr(self.gm, f"{prefix}_{kind}_{i}"):
            i += 1
        name = f"{prefix}_{kind}_{i}"
        self.gm.register_buffer(name, value)
        with self.graph.inserting_before(before):
            return self.graph.get_attr(name)

    def qparam_nodes(self, obs, prefix, before):
        scale, zp = obs.calculate_qparams()
        return (self.buffer(prefix, "scale", lucid.tensor(float(scale)), before),
                self.buffer(prefix, "zero_point", lucid.tensor(int(zp)), before))

    def prefix_for(self, obs_node):
        src = obs_node.args[0]
        if src.op == "call_module":
            return src.target.replace(".", "_")
        if src.op == "placeholder":
            users = [u for u in obs_node.users if u.op == "call_module"]
            return (users[0].target.replace(".", "_") if users else "") + "_input"
        return ""

    def dequantized(self, arg):
        if arg not in self.dq:
            with self.graph.inserting_after(arg):
                self.dq[arg] = self.graph.call_method("dequantize", (arg,))
        return self.dq[arg]

    # ---------------------------------------------------------------- observers
    def observer(self, node):
        obs, src = self.modules[node.target], node.args[0]
        if node.target in self.weight_obs:
            return  # its consumer quantizes the weight
        if self.reference and getattr(obs, "is_dynamic", False) and obs.dtype in (lucid.quint8, lucid.qint8):
            with self.graph.inserting_before(node):  # PyTorch's reference form of dynamic quantization
                q = self.graph.call_function(lucid.quantize_per_tensor_dynamic, (src, obs.dtype, True))
                out = self.graph.call_method("dequantize", (q,))
            node.replace_all_uses_with(out)
            self.graph.erase_node(node)
            return
        if src in self.quantized or obs.dtype not in (lucid.quint8, lucid.qint8, lucid.qint32) or \
                getattr(obs, "is_dynamic", False):
            node.replace_all_uses_with(src)
            self.graph.erase_node(node)
            return
        scale, zp = self.qparam_nodes(obs, self.prefix_for(node), node)
        with self.graph.inserting_before(node):
            q = self.graph.call_function(lucid.quantize_per_tensor, (src, scale, zp, obs.dtype))
            out = self.graph.call_method("dequantize", (q,)) if self.reference else q
        node.replace_all_uses_with(out)
        self.graph.erase_node(node)
        if not self.reference:
            self.quantized.add(q)

    def float_op(self, node):
        if _reads_metadata(node):
            return  # ``q.shape``, ``q.size(0)``: the same on the quantized tensor, as in PyTorch

        def swap(a):
            return self.dequantized(a) if a in self.quantized else a

        from lucid.fx.node import map_arg

        node.args = map_arg(node.args, swap)
        node.kwargs = map_arg(node.kwargs, swap)

    # ---------------------------------------------------------------- quantized ops
    def lower(self, node):
        kind, tail = P.classify(node, self.modules)
        if self.qconfigs.get(node.name) is None or self.qconfigs.get((tail or node).name) is None:
            return self.reference and self.reference_weights(node)
        if self.reference:
            return self.reference_weights(node, kind)
        if kind is None:
            return self.lower_dynamic(node)
        inputs = [P.get_arg(node, pos) for pos in P.activation_inputs(node, kind)]
        if not inputs or not all(a in self.quantized for a in inputs):
            return self.lower_dynamic(node) if kind == P.WEIGHTED else False
        if kind == P.FIXED:
            return self.lower_fixed(node)
        if kind in (P.SHARE, P.REUSE):
            if node.op == "call_function" and P.orig(node.target) in P.BINARY_FUNCS:
                return self.lower_scalar(node)
            if node.op == "call_function":
                node.target = P.public(node.target)
            elif node.op == "call_module" and type(self.modules[node.target]) is nn.Dropout:
                from lucid.ao.nn.quantized import Dropout  # PyTorch swaps it for its placeholder

                qmod = Dropout.from_float(self.modules[node.target])
                _replace_module(self.gm, node.target, qmod)
                self.modules[node.target] = qmod
            self.quantized.add(node)
            return True
        last = tail or node
        obs = self.out_obs(last)
        if obs is None:
            return False
        if node.op == "call_module":
            if type(self.modules[node.target]) in P.FLOAT_REQUANT_MODULES:
                return False
            return self.lower_module(node, obs)
        return self.lower_function(node, tail, obs, kind)

    def lower_fixed(self, node):
        """A fixed-qparams op on its quantized input: the quantized kernel picks the output's
        parameters, so its (fixed) output observer goes away."""
        name = P.fixed_name(node, self.modules)
        obs = self.out_obs(node)
        if obs is None or not P.fixed_observer_ok(obs, name):
            return False
        if node.op == "call_function" or (node.op == "call_method" and not node.target.endswith("_")):
            if node.op == "call_function":
                node.target = P.public(node.target)
            self.quantized.add(node)
            return True
        # a module (or an in-place method) becomes the public function
        fn = {"sigmoid": lucid.sigmoid, "tanh": lucid.tanh, "hardsigmoid": P.F.hardsigmoid}[name]
        node.op, node.target, node.args, node.kwargs = "call_function", P.public(fn), node.args[:1], {}
        self.quantized.add(node)
        return True

    def lower_module(self, node, obs):
        mod = self.modules[node.target]
        qcls = P._static_mapping()[type(mod)]
        mod.activation_post_process = obs
        if getattr(mod, "qconfig", None) is None:
            mod.qconfig = self.qconfigs[node.name]
        qmod = qcls.from_float(mod)
        _replace_module(self.gm, node.target, qmod)
        self.modules[node.target] = qmod
        self.quantized.add(node)
        return True

    def lower_scalar(self, node):
        from lucid.ao.nn.quantized.functional_modules import add_scalar, mul_scalar

        x, c = node.args[0], node.args[1]
        if c in self.quantized or not isinstance(c, (int, float)):
            x, c = c, x
        if not isinstance(c, (int, float)):
            return False
        node.target = add_scalar if P.BINARY_FUNCS[P.orig(node.target)] == "add" else mul_scalar
        node.args, node.kwargs = (x, c), {}
        self.quantized.add(node)
        return True

    def lower_function(self, node, tail, obs, kind):
        obs_node = next(u for u in (tail or node).users if self.is_obs(u))
        prefix = tail.target.replace(".", "_") if tail is not None and tail.op == "call_module" else ""
        scale, zp = self.qparam_nodes(obs, prefix, obs_node)
        if kind == P.BINARY:
            fn = _BINARY_KERNELS[(P.BINARY_FUNCS[P.orig(node.target)], tail is not None)]
            args = (node.args[0], node.args[1], scale, zp)
        else:
            args, fn = self.weighted_args(node, tail is not None)
            args = args + (scale, zp)
        with self.graph.inserting_before(obs_node):
            new = self.graph.call_function(fn, args)
        (tail or node).replace_all_uses_with(new)
        for n in (tail, node):
            if n is not None:
                self.graph.erase_node(n)
        self.quantized.add(new)
        return True

    def weighted_args(self, node, relu):
        from lucid.ao.nn.quantized.dynamic.modules import _quantize_weight

        name = P.WEIGHTED_FUNCS[P.orig(node.target)]
        a = list(node.args) + [None] * 7
        x, wobs_node = a[0], a[1]
        bias = a[2] if len(node.args) > 2 else node.kwargs.get("bias")
        wobs = self.modules[wobs_node.target]  # calibrated already: not run again (a QAT one would move)
        weight = _weight_value(self.gm, wobs_node.args[0])
        qweight = _quantize_weight(weight, wobs)
        i = 0
        while hasattr(self.gm, f"_packed_weight_{i}"):
            i += 1
        setattr(self.gm, f"_packed_weight_{i}", qweight)
        with self.graph.inserting_before(node):
            w = self.graph.get_attr(f"_packed_weight_{i}")
        if name == "linear":
            return (x, w, bias), (quantized_linear_relu if relu else quantized_linear)
        kw = node.kwargs
        stride = a[3] if len(node.args) > 3 else kw.get("stride", 1)
        padding = a[4] if len(node.args) > 4 else kw.get("padding", 0)
        dilation = a[5] if len(node.args) > 5 else kw.get("dilation", 1)
        groups = a[6] if len(node.args) > 6 else kw.get("groups", 1)
        return (x, w, bias, stride, padding, dilation, groups), (quantized_conv_relu if relu else quantized_conv)

    def lower_dynamic(self, node):
        qconfig = self.qconfigs.get(node.name)
        act = qconfig.activation() if qconfig is not None else None
        if not getattr(act, "is_dynamic", False) or act.dtype not in (lucid.quint8, lucid.qint8):
            return False
        if node.op == "call_module":
            from ..quantize import get_default_dynamic_quant_module_mappings

            mod = self.modules[node.target]
            qcls = get_default_dynamic_quant_module_mappings().get(type(mod))
            if qcls is None:
                return False
            mod.qconfig = qconfig
            _replace_module(self.gm, node.target, qcls.from_float(mod))
            return True
        if node.op == "call_function" and P.orig(node.target) is P.orig(P.F.linear) and self.is_obs(node.args[1]):
            from lucid.ao.nn.quantized._dynamic_ops import linear_dynamic
            from lucid.ao.nn.quantized.dynamic.modules import _quantize_weight

            wobs_node = node.args[1]
            wobs = self.modules[wobs_node.target]
            weight = _weight_value(self.gm, wobs_node.args[0])
            setattr(self.gm, f"_packed_weight_{node.name}", _quantize_weight(weight, wobs))
            with self.graph.inserting_before(node):
                w = self.graph.get_attr(f"_packed_weight_{node.name}")
            bias = node.args[2] if len(node.args) > 2 else node.kwargs.get("bias")
            node.target, node.args, node.kwargs = linear_dynamic, (node.args[0], w, bias), {}
            return True
        return False

    # ---------------------------------------------------------------- reference form
    def reference_weights(self, node, kind=None):
        """Reference form: weights quantized then dequantized, the op itself in float."""
        if node.op == "call_module" and kind == P.WEIGHTED and \
                getattr(self.modules[node.target], "qconfig", None) is not None:
            mod = self.modules[node.target]
            if hasattr(mod, "to_float"):
                mod_f = mod.to_float()
                wfq = getattr(mod, "weight_fake_quant", None)
                _replace_module(self.gm, node.target, mod_f)
                self.modules[node.target] = mod = mod_f
            else:
                wfq = None
            base = mod[0] if isinstance(mod, nn.Sequential) else mod
            wobs = wfq if wfq is not None else mod.qconfig.weight()
            wobs(base.weight)
            from lucid.ao.nn.quantized.dynamic.modules import _quantize_weight

            base.weight = nn.Parameter(_quantize_weight(base.weight, wobs).dequantize())
            return True
        if node.op == "call_function" and kind == P.WEIGHTED and self.is_obs(node.args[1]):
            wobs_node = node.args[1]
            wobs = self.modules[wobs_node.target]
            weight = _weight_value(self.gm, wobs_node.args[0])
            scale, zp = wobs.calculate_qparams()
            with self.graph.inserting_before(node):
                if wobs.qscheme in (lucid.per_channel_affine, lucid.per_channel_symmetric):
                    s = self.buffer("", "scale", scale.double(), node)
                    z = self.buffer("", "zero_point", zp.long(), node)
                    q = self.graph.call_function(lucid.quantize_per_channel,
                                                 (wobs_node.args[0], s, z, wobs.ch_axis, lucid.qint8))
                else:
                    s, z = self.qparam_nodes(wobs, "", node)
                    q = self.graph.call_function(lucid.quantize_per_tensor, (wobs_node.args[0], s, z, lucid.qint8))
                dq = self.graph.call_method("dequantize", (q,))
            node.update_arg(1, dq)
            self.graph.erase_node(wobs_node)
        return False


_METADATA_METHODS = frozenset(("size", "dim", "numel", "nelement"))


def _reads_metadata(node):
    import builtins

    if node.op == "call_function" and node.target is builtins.getattr:
        return len(node.args) > 1 and node.args[1] in ("shape", "ndim", "device", "dtype")
    return node.op == "call_method" and node.target in _METADATA_METHODS


class _Modules:
    """Submodules by qualified name, shared ones under each of their names (an observer shared
    by several ops is called under several names; ``named_modules`` lists it once)."""

    def __init__(self, gm):
        self.gm, self.swapped = gm, {}

    def get(self, target, default=None):
        if target in self.swapped:
            return self.swapped[target]
        try:
            return self.gm.get_submodule(target)
        except AttributeError:
            return default

    def __getitem__(self, target):
        return self.get(target)

    def __setitem__(self, target, mod):
        self.swapped[target] = mod


def _weight_value(gm, node):
    if node.op != "get_attr":
        raise NotImplementedError("convert_fx: a functional linear / conv weight must be a parameter or buffer "
                                  f"of the model (got the value of node {node.name!r})")
    value = gm
    for part in node.target.split("."):
        value = getattr(value, part)
    return value.detach()


def convert(gm, reference=False):
    return _Converter(gm, reference).run()
