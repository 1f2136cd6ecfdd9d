"""Full backward hooks for Modules, built from two identity custom Functions.

NOTE [Full backward hooks]
The module's Tensor inputs pass through an identity Function before ``forward`` and its
outputs through another after it. ``grad_input`` has one entry per positional argument (None
for a non-Tensor or one that needs no gradient); the hooks are skipped when the gradient
reaches the inputs without passing through the outputs (PyTorch's rule). In the backward the output identity sees the gradients
w.r.t. the outputs (``grad_output``) first; the input identity then sees the gradients
w.r.t. the inputs (``grad_input``), calls the hooks with both and passes on whatever they
return. When no input requires grad the hooks run from the output side with
``grad_input`` all ``None`` (PyTorch does the same).
"""
from __future__ import annotations

from .._core.grad_mode import STATE
from .._core.tensor import Tensor
from ..autograd.function import Function


class _State:
    def __init__(self, module, hooks, pre_hooks=()):
        self.module, self.hooks, self.pre_hooks = module, hooks, list(pre_hooks)
        self.grad_output = None
        self.n_inputs = 0
        self.input_mask = ()

    def run(self, grad_input):
        for hook in self.hooks:
            res = hook(self.module, grad_input, self.grad_output)
            if res is not None:
                res = tuple(res) if isinstance(res, (tuple, list)) else (res,)
                if len(res) != len(grad_input):
                    raise RuntimeError(
                        f"backward hook returned an invalid number of grad_input, got "
                        f"{len(res)}, but expected {len(grad_input)}"
                    )
                grad_input = res
        return grad_input


class _InputIdentity(Function):
    @staticmethod
    def forward(ctx, state, *xs):
        ctx.state = state
        return xs if len(xs) != 1 else xs[0]

    @staticmethod
    def backward(ctx, *grads):
        st = ctx.state
        if st.grad_output is None:  # reached without passing the module's outputs: PyTorch skips
            return (None,) + grads
        full, it = [], iter(grads)
        for m in st.input_mask:
            full.append(next(it) if m else None)
        full = st.run(tuple(full))
        return (None,) + tuple(g for g, m in zip(full, st.input_mask) if m)


class _OutputIdentity(Function):
    @staticmethod
    def forward(ctx, state, *xs):
        ctx.state = state
        ctx.set_materialize_grads(False)  # an output no loss reached has grad_output None, as PyTorch
        return xs if len(xs) != 1 else xs[0]

    @staticmethod
    def backward(ctx, *grads):
        st = ctx.state
        for hook in st.pre_hooks:  # full backward pre-hooks may replace grad_output
            res = hook(st.module, grads)
            if res is not None:
                res = tuple(res) if isinstance(res, (tuple, list)) else (res,)
                if len(res) != len(grads):
                    raise RuntimeError(f"backward pre hook returned an invalid number of grad_output, got "
                                       f"{len(res)}, but expected {len(grads)}")
                grads = res
        st.grad_output = grads
        if st.n_inputs == 0:
            st.run((None,) * len(st.input_mask))
        return (None,) + grads


class BackwardHook:
    """Wires a module call's inputs and outputs to its full backward hooks."""

    def __init__(self, module, hooks, pre_hooks=()):
        self.state = _State(module, hooks, pre_hooks)

    def setup_input_hook(self, args):
        st = self.state
        mask = tuple(isinstance(a, Tensor) and a.requires_grad and STATE.grad_enabled for a in args)
        st.input_mask = mask  # grad_input has one entry per positional argument, as PyTorch's
        st.n_inputs = sum(mask)
        if not st.n_inputs:
            return args
        picked = [a for a, m in zip(args, mask) if m]
        res = _InputIdentity.apply(st, *picked)
        res = iter(res if isinstance(res, tuple) else (res,))
        return tuple(next(res) if m else a for a, m in zip(args, mask))

    def setup_output_hook(self, out):
        single = isinstance(out, Tensor)
        outs = (out,) if single else out
        if not isinstance(outs, tuple):
            return out
        mask = [isinstance(o, Tensor) and o.requires_grad for o in outs]
        if not any(mask):
            return out
        res = _OutputIdentity.apply(self.state, *[o for o, m in zip(outs, mask) if m])
        res = iter(res if isinstance(res, tuple) else (res,))
        new = tuple(next(res) if m else o for o, m in zip(outs, mask))
        return new[0] if single else new
