"""PyTorch's "(beta) Building a Convolution/Batch Norm fuser in FX" run on Lucid (``import lucid as
torch``, ``lucid.fx`` for ``torch.fx``): ``fuse_conv_bn_eval``/``fuse_conv_bn_weights``, the
``fuse`` pass over ``symbolic_trace``'s graph (``named_modules``, ``node.args[0].users``,
``replace_all_uses_with``, ``erase_node``, ``lint``, ``recompile``), the page's test model ``M``
(a BatchNorm with no conv before it, one wrapped in a submodule) and a ResNet-18-shaped net
(torchvision's BasicBlock layout, shrunk) whose fused copy computes the same outputs.

The page is a function of the module it is handed as ``torch``; the parity test runs it on
PyTorch where it is installed, from the same NumPy-drawn weights and running statistics.
"""
import copy
from typing import Any, Dict, Tuple

import numpy as np
import pytest

import lucid
import lucid.fx  # noqa: F401
import lucid.nn  # noqa: F401
import lucid.testing  # noqa: F401


def _set_state(torch, model, seed):
    """Parameters and BatchNorm running statistics from NumPy (variances positive)."""
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for name, t in list(model.named_parameters()) + list(model.named_buffers()):
            if t.dtype == torch.int64:
                continue
            vals = rng.normal(scale=0.3, size=tuple(t.shape))
            if name.endswith("running_var"):
                vals = rng.uniform(0.5, 1.5, size=tuple(t.shape))
            t.copy_(torch.tensor(vals, dtype=t.dtype))
    return model


def conv_bn_fuser(torch, seed=0):
    nn = torch.nn
    from importlib import import_module
    fx = import_module(torch.__name__ + ".fx")
    out = {}

    def fuse_conv_bn_eval(conv, bn):
        """Given a conv Module `A` and an batch_norm module `B`, returns a conv module `C` such
        that C(x) == B(A(x)) in inference mode."""
        assert (not (conv.training or bn.training)), "Fusion only for eval!"
        fused_conv = copy.deepcopy(conv)

        fused_conv.weight, fused_conv.bias = \
            fuse_conv_bn_weights(fused_conv.weight, fused_conv.bias,
                                 bn.running_mean, bn.running_var, bn.eps, bn.weight, bn.bias)

        return fused_conv

    def fuse_conv_bn_weights(conv_w, conv_b, bn_rm, bn_rv, bn_eps, bn_w, bn_b):
        if conv_b is None:
            conv_b = torch.zeros_like(bn_rm)
        bn_var_rsqrt = torch.rsqrt(bn_rv + bn_eps)

        conv_w = conv_w * (bn_w * bn_var_rsqrt).reshape([-1] + [1] * (len(conv_w.shape) - 1))
        conv_b = (conv_b - bn_rm) * bn_var_rsqrt * bn_w + bn_b

        return torch.nn.Parameter(conv_w), torch.nn.Parameter(conv_b)

    def _parent_name(target: str) -> Tuple[str, str]:
        """Splits a qualname into parent path and last atom. For example, `foo.bar.baz` -> (`foo.bar`, `baz`)"""
        *parent, name = target.rsplit('.', 1)
        return parent[0] if parent else '', name

    def replace_node_module(node, modules: Dict[str, Any], new_module: torch.nn.Module):
        assert (isinstance(node.target, str))
        parent_name, name = _parent_name(node.target)
        setattr(modules[parent_name], name, new_module)

    def fuse(model: torch.nn.Module) -> torch.nn.Module:
        model = copy.deepcopy(model)
        # The first step of most FX passes is to symbolically trace our model to obtain a
        # `GraphModule`. This is a representation of our original model that is functionally
        # identical to our original model, except that we now also have a graph representation
        # of our forward pass.
        fx_model = fx.symbolic_trace(model)
        modules = dict(fx_model.named_modules())

        # The primary API for FX graphs is the nodes of the graph.
        for node in fx_model.graph.nodes:
            # The FX IR contains several types of nodes, which generally represent call sites to
            # modules, functions, or methods. The type of node is determined by `Node.op`.
            if node.op != 'call_module':  # If our current node isn't calling a Module then we can ignore it.
                continue
            # For call sites, `Node.target` represents the module/function/method that's being
            # called. Here, we check `Node.target` to see if it's a batch norm module, and then
            # check `Node.args[0].target` to see if the input `Node` is a convolution.
            if type(modules[node.target]) is nn.BatchNorm2d and type(modules[node.args[0].target]) is nn.Conv2d:
                if len(node.args[0].users) > 1:  # Output of conv is used by other nodes
                    continue
                conv = modules[node.args[0].target]
                bn = modules[node.target]
                fused_conv = fuse_conv_bn_eval(conv, bn)
                replace_node_module(node.args[0], modules, fused_conv)
                # As we've folded the batch nor into the conv, we need to replace all uses
                # of the batch norm with the conv.
                node.replace_all_uses_with(node.args[0])
                # Now that all uses of the batch norm have been replaced, we can
                # safely remove the batch norm.
                fx_model.graph.erase_node(node)
        fx_model.graph.lint()
        # After we've modified our graph, we need to recompile our graph in order
        # to keep the generated code in sync.
        fx_model.recompile()
        return fx_model

    # Testing out our Fusion Pass
    class WrappedBatchNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.mod = nn.BatchNorm2d(1)

        def forward(self, x):
            return self.mod(x)

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 1, 1)
            self.bn1 = nn.BatchNorm2d(1)
            self.conv2 = nn.Conv2d(1, 1, 1)
            self.nested = nn.Sequential(
                nn.BatchNorm2d(1),
                nn.Conv2d(1, 1, 1),
            )
            self.wrapped = WrappedBatchNorm()

        def forward(self, x):
            x = self.conv1(x)
            x = self.bn1(x)
            x = self.conv2(x)
            x = self.nested(x)
            x = self.wrapped(x)
            return x

    model = _set_state(torch, M(), seed)
    model.eval()

    fused_model = fuse(model)
    out["code"] = fused_model.code
    out["targets"] = [n.target for n in fused_model.graph.nodes if n.op == "call_module"]
    inp = torch.tensor(np.random.default_rng(seed + 1).normal(size=(5, 1, 1, 1)).astype(np.float32))
    torch.testing.assert_close(fused_model(inp), model(inp))
    out["m"] = (fused_model(inp).detach().numpy(), model(inp).detach().numpy())
    out["m_fused"] = tuple(t.detach().numpy().copy() for t in (fused_model.conv1.weight, fused_model.conv1.bias))
    out["m_parts"] = tuple(t.detach().numpy().astype(np.float64) for t in (
        model.conv1.weight, model.conv1.bias, model.bn1.weight, model.bn1.bias, model.bn1.running_mean,
        model.bn1.running_var)) + (model.bn1.eps,)

    # Benchmarking our Fusion on ResNet18 (torchvision's BasicBlock layout, shrunk)
    class BasicBlock(nn.Module):
        expansion = 1

        def __init__(self, inplanes, planes, stride=1, downsample=None):
            super().__init__()
            self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.downsample = downsample
            self.stride = stride

        def forward(self, x):
            identity = x
            out = self.conv1(x)
            out = self.bn1(out)
            out = self.relu(out)
            out = self.conv2(out)
            out = self.bn2(out)
            if self.downsample is not None:
                identity = self.downsample(x)
            out += identity
            out = self.relu(out)
            return out

    class ResNet(nn.Module):
        def __init__(self, layers=(1, 1, 1, 1), widths=(4, 8, 8, 16), num_classes=10):
            super().__init__()
            self.inplanes = widths[0]
            self.conv1 = nn.Conv2d(3, self.inplanes, kernel_size=7, stride=2, padding=3, bias=False)
            self.bn1 = nn.BatchNorm2d(self.inplanes)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
            self.layer1 = self._make_layer(widths[0], layers[0])
            self.layer2 = self._make_layer(widths[1], layers[1], stride=2)
            self.layer3 = self._make_layer(widths[2], layers[2], stride=2)
            self.layer4 = self._make_layer(widths[3], layers[3], stride=2)
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(widths[3], num_classes)

        def _make_layer(self, planes, blocks, stride=1):
            downsample = None
            if stride != 1 or self.inplanes != planes:
                downsample = nn.Sequential(nn.Conv2d(self.inplanes, planes, 1, stride, bias=False),
                                           nn.BatchNorm2d(planes))
            layers = [BasicBlock(self.inplanes, planes, stride, downsample)]
            self.inplanes = planes
            for _ in range(1, blocks):
                layers.append(BasicBlock(self.inplanes, planes))
            return nn.Sequential(*layers)

        def forward(self, x):
            x = self.conv1(x)
            x = self.bn1(x)
            x = self.relu(x)
            x = self.maxpool(x)
            x = self.layer1(x)
            x = self.layer2(x)
            x = self.layer3(x)
            x = self.layer4(x)
            x = self.avgpool(x)
            x = torch.flatten(x, 1)
            x = self.fc(x)
            return x

    rn18 = _set_state(torch, ResNet(), seed + 2)
    rn18.eval()
    inp = torch.tensor(np.random.default_rng(seed + 3).normal(size=(2, 3, 32, 32)).astype(np.float32))
    output = rn18(inp)
    fused_rn18 = fuse(rn18)
    out["rn_code"] = fused_rn18.code
    out["rn_counts"] = (sum(isinstance(m, nn.BatchNorm2d) for m in rn18.modules()),
                        sum(n.op == "call_module" and "bn" in n.target for n in fused_rn18.graph.nodes),
                        sum(n.op == "call_module" and n.target.endswith("downsample.1")
                            for n in fused_rn18.graph.nodes))
    out["rn"] = (output.detach().numpy(), fused_rn18(inp).detach().numpy())
    return out


def test_conv_bn_fuser_in_fx():
    out = conv_bn_fuser(lucid)
    # M: the pass fuses every BatchNorm2d call whose input node is a Conv2d call, wherever the
    # modules live: bn1 into conv1, nested.0 into conv2, wrapped.mod into nested.1 (as on PyTorch).
    assert out["targets"] == ["conv1", "conv2", "nested.1"]
    assert "bn1" not in out["code"] and "nested_0" not in out["code"] and "wrapped_mod" not in out["code"]
    np.testing.assert_allclose(out["m"][0], out["m"][1], rtol=1e-5, atol=1e-6)
    # conv1's fused parameters by the closed form: w * g / sqrt(var + eps), (b - mean) * g / sqrt(var + eps) + beta
    w, b, g, beta, mean, var, eps = out["m_parts"]
    scale = g / np.sqrt(var + eps)
    np.testing.assert_allclose(out["m_fused"][0], w * scale.reshape(-1, 1, 1, 1), rtol=1e-5)
    np.testing.assert_allclose(out["m_fused"][1], (b - mean) * scale + beta, rtol=1e-5, atol=1e-7)
    # ResNet: every BatchNorm follows its conv, so all 12 go (the three downsample.1 included)
    assert out["rn_counts"] == (12, 0, 0)
    assert "bn" not in out["rn_code"] and "downsample_1" not in out["rn_code"]
    np.testing.assert_allclose(out["rn"][1], out["rn"][0], rtol=1e-4, atol=1e-5)
    assert np.abs(out["rn"][0]).max() > 1e-3


def test_conv_bn_fuser_in_fx_torch_parity():
    torch = pytest.importorskip("torch")
    lo, to = conv_bn_fuser(lucid), conv_bn_fuser(torch)
    assert lo["targets"] == to["targets"] and lo["rn_counts"] == to["rn_counts"]
    for k in ("m", "rn"):
        np.testing.assert_allclose(lo[k][0], to[k][0], rtol=1e-4, atol=1e-5, err_msg=k)
        np.testing.assert_allclose(lo[k][1], to[k][1], rtol=1e-4, atol=1e-5, err_msg=k)
    for a, b in zip(lo["m_fused"], to["m_fused"]):
        np.testing.assert_allclose(a, b, rtol=1e-5)
