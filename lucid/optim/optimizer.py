"""The Optimizer base: parameter groups, per-parameter state, state_dict round trips.

NOTE [Optimizer updates]
Updates run on the parameters' ndarrays in place (``p._data``) — never through the
autograd graph — and bump each parameter's version counter, as PyTorch does. State
(momentum buffers, moments) is kept as Tensors, as PyTorch's (``opt.state[p]["exp_avg"]`` is a
Tensor a user may read, log or reset in place): the update rules run on their arrays
(``_state_arrays``), changing them in place, and ``_store_state`` wraps any new array a rule
made and bumps the version of the ones it changed (so a graph that saved one raises on
backward, as in PyTorch). Numbers (step counts, ASGD's ``eta``/``mu``) stay Python numbers:
PyTorch's float32 step tensor would put ``1 - b2 ** step`` in float32. A complex parameter's
state is a complex Tensor of its shape; the rules see its (re, im) pairs (NOTE [Complex
optimizer state]). ``state_dict`` hands out Tensor copies, so a saved checkpoint resumes
training exactly. LBFGS keeps its own flat vectors as arrays (``_tensor_state = False``).

NOTE [Differentiable steps]
With ``differentiable=True`` the very same update rule runs on Tensors instead, under
grad mode: each rule takes its array functions from ``_ops(p)`` (NumPy for arrays,
``_TensorOps`` for Tensors) and uses only operators and in-place operators, which lucid
records in the graph. The parameter is changed in place inside the graph, as in PyTorch, so
it must not be a leaf that requires grad: optimize a non-leaf copy (``p = w.clone()``) and
the new ``p`` is a differentiable function of ``w``, of ``p.grad`` (built with
``create_graph=True``) and of the state. ``foreach``, ``capturable`` and ``fused`` are
accepted and change nothing: updates are already whole-array NumPy operations on the CPU.

NOTE [Fused updates on a device]
On a device (a GPU, or the strict stand-in) an optimizer that defines ``_fused_kernel`` updates
up to ``_SLOTS`` parameters in one kernel launch (NOTE [Fused device kernels]; PyTorch's
foreach/multi-tensor apply): the kernel takes each parameter's, gradient's and state's
pointers as arguments, and each index finds its parameter from the running element counts.
A parameter goes this way when it is a real float32/float64, C-contiguous array of a device
with kernels, its gradient and state arrays are too, and the group is not differentiable;
the rest take ``_update``. The values are those of ``_update``: bit for bit on the stand-in,
to rounding on a GPU (its compiler fuses multiply-adds). SGD, Adam and AdamW define kernels;
a subclass that overrides ``_update`` does not inherit its parent's (``_kernel_fits_update``).
Host-side state (Adam's step count, new state arrays) is stored after the launches
(``_fused_next``/``_fused_commit``); parameters whose counts differ go in different launches.
"""
from __future__ import annotations

import collections
import copy
import numbers

import numpy as np

from .._core import backend
from .._core import dtypes as _dtypes
from .._core.kernels import Kernel, kernel_for
from .._core.grad_mode import SUBCLASS_DISPATCH
from .._core.tensor import Tensor, WrapperValues, _wrap
from ..ops._family import quiet_call
from ._hooks import (HOOK_DICTS, OptimizerHooks, register_optimizer_step_post_hook,  # noqa: F401
                     register_optimizer_step_pre_hook)

_ARRAY_TYPES = backend._BY_TYPE  # every backend's array type (NOTE [Backends]): updates run in place


def _is_array(x):
    return type(x) is np.ndarray or type(x) in _ARRAY_TYPES


class _TensorOps:
    """The array functions the update rules use, on lucid Tensors. See NOTE [Differentiable steps]."""

    @staticmethod
    def zeros_like(x):
        from ..ops.creation import zeros_like

        return zeros_like(x)

    @staticmethod
    def full_like(x, v):
        from ..ops.creation import full_like

        return full_like(x, v)

    @staticmethod
    def copy(x):
        return x.clone()

    def __getattr__(self, name):  # sqrt, abs, sign, maximum, minimum, where, clip
        import lucid

        return lucid.clamp if name == "clip" else getattr(lucid, name)


_TENSOR_OPS = _TensorOps()


def _ops(x):
    """NumPy for arrays, Tensor functions for Tensors. See NOTE [Differentiable steps]."""
    return np if _is_array(x) else _TENSOR_OPS


def _sub(p, x):
    """``p - x``: in place on the parameter's array (the fast path), a new Tensor in the graph
    with differentiable=True. See NOTE [Differentiable steps]."""
    if _is_array(p):
        p -= x
        return p
    return p - x


def _scale(p, f):
    """``p * f``, in place on arrays (as :func:`_sub`)."""
    if _is_array(p):
        p *= f
        return p
    return p * f


def _in_graph(t):
    return t.grad_fn is not None or t._rg


def _state_arrays(p, state):
    """The update rules' view of ``p``'s ``state`` (NOTE [Optimizer updates]): each Tensor as its
    array ((re, im) pairs for a complex ``p``), numbers as they are; and ``live``, the arrays
    that are the Tensors' own memory, to tell a rule's in-place change from a new array."""
    arrays, live = {}, {}
    for k, v in state.items():
        if not isinstance(v, Tensor):
            arrays[k] = v
            continue
        a = v._data
        shared = not _in_graph(v)  # a Tensor a graph holds (differentiable steps) is never changed in place
        if a.dtype.kind == "c":
            shared = shared and (not a.ndim or a.strides[-1] == a.itemsize)
            a = _real_view(a)
        elif not shared:
            with backend.on_device(a):
                a = a.copy()
        arrays[k] = a
        if shared:
            live[k] = a
    return arrays, live


def _state_tensor(p, a):
    """A state array as the Tensor users see: complex of ``p``'s shape for a complex ``p``'s
    (re, im) pairs (a view, sharing the memory the rules update)."""
    if p.dtype.kind == "c" and a.dtype.kind == "f":
        shape = tuple(p.shape)
        if a.shape == (shape[:-1] + (2 * shape[-1],) if shape else (2,)) and a.flags["C_CONTIGUOUS"]:
            return _wrap(a.view(np.complex64 if a.dtype.itemsize <= 4 else np.complex128).reshape(shape))
    return _wrap(a)


def _store_state(p, state, arrays, live):
    """Write the rules' ``arrays`` back into ``state`` (see :func:`_state_arrays`)."""
    for k, a in arrays.items():
        if live.get(k) is a:
            state[k]._version[0] += 1  # changed in place, as PyTorch's in-place updates
        elif backend.is_array(a):
            state[k] = _state_tensor(p, a)
        else:
            state[k] = a


_FUSED_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_FITS = {}


def _kernel_fits_update(cls):
    """Whether ``cls``'s ``_fused_kernel`` was written for the ``_update`` it runs: a subclass
    that overrides ``_update`` (a user's variant) must not inherit the kernel."""
    fits = _FITS.get(cls)
    if fits is None:
        def owner(name):
            return next(k for k in cls.__mro__ if name in k.__dict__)

        fits = _FITS[cls] = issubclass(owner("_fused_kernel"), owner("_update"))
    return fits


_SLOTS = 16  # parameters per fused launch: 16 * (pointers + counts) stays far below CUDA's 4 KiB of arguments


def multi_tensor_kernel(name, state, scalars, body):
    """A :class:`~lucid._core.kernels.Kernel` updating ``_SLOTS`` parameters per launch.

    Each slot ``j`` takes ``T* p{j}, const T* g{j}``, one ``T* {s}{j}, int {s}_fresh{j}`` per
    name in ``state`` and ``long long end{j}`` (the running element count); ``body`` sees the
    index's slot as ``p``, ``g``, each state name and ``{s}_fresh``, and ``k``, its index in
    that parameter. See NOTE [Fused updates on a device].
    """
    per_slot = ["T* p", "const T* g"] + [f"T* {s}, int {s}_fresh" for s in state] + ["long long end"]
    params = ", ".join(", ".join(f"{q}{j}" for q in ", ".join(per_slot).split(", ")) for j in range(_SLOTS))
    names = ["p", "g"] + [n for s in state for n in (s, f"{s}_fresh")]
    decl = "T* p; const T* g; " + " ".join(f"T* {s}; int {s}_fresh;" for s in state) + " long long start = 0;"
    pick = []
    for j in range(_SLOTS):
        assign = " ".join(f"{n} = {n}{j};" for n in names)
        head = f"if (i < end{j})" if j == 0 else ("else" if j == _SLOTS - 1 else f"else if (i < end{j})")
        pick.append(f"    {head} {{ {assign}{'' if j == 0 else f' start = end{j - 1};'} }}")
    source = f"    {decl}\n" + "\n".join(pick) + "\n    const long long k = i - start;\n" + body
    return Kernel(name, params + ", " + scalars, source)


def _launch_slots(launch, items, scalars):
    """One launch over ``items`` (``(p, g array, [(state array, fresh)])``, at most ``_SLOTS``)."""
    args, end = [], 0
    for j in range(_SLOTS):
        p, g, state = items[min(j, len(items) - 1)]
        if j < len(items):
            end += p._data.size
        args += [p._data, g]
        for a, fresh in state:
            args += [a, fresh]
        args.append(end)
    launch(end, *args, *scalars)


def _decay_add(state, key, decay, x):
    """``state[key] = state[key] * decay + x``: in place for arrays, functional for Tensors
    (earlier steps' graphs saved the old Tensor)."""
    a = state[key]
    if _is_array(a):
        a *= decay
        a += x
        return a
    a = state[key] = a * decay + x
    return a


# Flags every optimizer accepts; a saved group that lacks them (an older checkpoint) is fine.
_NOT_COPIED = frozenset(("step", "_opt_called", "_optimizer_in_hooked_step") + HOOK_DICTS)
_FLAG_KEYS = frozenset({"foreach", "maximize", "capturable", "differentiable", "fused", "decoupled_weight_decay"})


def _resolve_tensor_lr(work):
    """``work`` with each group whose ``lr`` is a Tensor replaced by a copy holding its value
    as a number (read once per step), so the update rules and kernels see a number, as
    PyTorch's non-capturable steps do (``lr.item()``). A differentiable group keeps the Tensor:
    its update is recorded in the graph, so a gradient can reach ``lr``."""
    resolved = {}
    out = []
    for p, g, group in work:
        lr = group.get("lr")
        if isinstance(lr, Tensor) and not group.get("differentiable", False):
            key = id(group)
            if key not in resolved:
                resolved[key] = {**group, "lr": float(lr.detach().item())}
            group = resolved[key]
        out.append((p, g, group))
    return out


class _Required:
    def __repr__(self):
        return "<required parameter>"


required = _Required()


def check_options(name, *, betas=None, **values):
    """Validate hyperparameters: each of ``values`` a real number >= 0 (``required`` is
    skipped; ``lr`` may also be a one-element Tensor, as in PyTorch), ``betas`` a pair in
    ``[0, 1)``. Errors start with the optimizer's name."""
    for k, v in values.items():
        if v is required:
            continue
        if k == "lr" and isinstance(v, Tensor):
            if v.numel() != 1:
                raise ValueError(f"{name}: Tensor lr must be 1-element, got shape {tuple(v.shape)}")
            v = float(v.detach().item())
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not v >= 0:
            raise ValueError(f"{name}: invalid {k} {v!r} (expected a number >= 0)")
    if betas is not None:
        if len(betas) != 2 or not all(isinstance(b, numbers.Real) and 0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"{name}: invalid betas {betas!r} (expected two numbers in [0, 1))")


class Optimizer(OptimizerHooks):
    """Base class of all optimizers.

    Parameters
    ----------
    params : iterable of Tensor or of dict
        Parameters, or parameter groups (dicts with ``"params"`` and per-group options).
    defaults : dict
        Default options for groups that do not set them.

    Examples
    --------
    >>> import lucid
    >>> w = lucid.zeros(2, requires_grad=True)
    >>> opt = lucid.optim.SGD([{'params': [w], 'lr': 0.5}], lr=0.1)
    >>> opt.param_groups[0]['lr'], len(opt.state_dict()['param_groups'])
    (0.5, 1)
    """

    def __init__(self, params, defaults):
        self._init_hooks()  # See NOTE [Optimizer hooks] (lucid/optim/_hooks.py)
        self.defaults = defaults
        # a defaultdict, as PyTorch's: ``opt.state[p]`` is ``{}`` for a parameter without state
        self.state = collections.defaultdict(dict)
        self.param_groups = []
        if isinstance(params, Tensor):
            raise TypeError(
                f"{type(self).__name__}: params argument given to the optimizer should be an "
                "iterable of Tensors or dicts, but got a Tensor"
            )
        groups = list(params)
        if not groups:
            raise ValueError(f"{type(self).__name__}: got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for g in groups:
            self.add_param_group(g)

    def __getstate__(self):
        # a scheduler's wrapper of ``step`` (lr_scheduler._track_optimizer_steps) holds a weak
        # reference to this optimizer: a copy or a pickle leaves it behind, as PyTorch's does
        # and, as PyTorch's, its hooks (NOTE [Optimizer hooks])
        return {k: v for k, v in self.__dict__.items() if k not in _NOT_COPIED}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._init_hooks()

    def __repr__(self):
        lines = [f"{type(self).__name__} ("]
        for i, g in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            for k in sorted(g):
                if k != "params":
                    lines.append(f"    {k}: {g[k]}")
        lines.append(")")
        return "\n".join(lines)

    def add_param_group(self, param_group):
        """Add a group of parameters with its own options."""
        if not isinstance(param_group, dict):
            raise TypeError(f"{type(self).__name__}.add_param_group: param_group must be a dict, but got "
                            f"{type(param_group).__name__}")
        group = dict(param_group)  # checked on a copy: a failing call leaves the caller's dict as it was
        params = group["params"]
        if isinstance(params, (set, frozenset)):
            raise TypeError(f"{type(self).__name__}: optimizer parameters need to be organized in ordered "
                            "collections, but the ordering of tensors in sets will change between runs; use a list")
        params = [params] if isinstance(params, Tensor) else list(params)
        self._split_names(group, params)  # ``model.named_parameters()``: (name, tensor) pairs
        params = group.pop("_params")
        differentiable = group.get("differentiable", self.defaults.get("differentiable", False))
        for p in params:
            if not isinstance(p, Tensor):
                raise TypeError(f"{type(self).__name__}: can only optimize Tensors, got {type(p).__name__}")
            if not p.is_leaf and not differentiable:
                raise ValueError(f"{type(self).__name__}: can't optimize a non-leaf Tensor "
                                 "(only with differentiable=True)")
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in seen for p in params):
            raise ValueError(f"{type(self).__name__}: some parameters appear in more than one parameter group")
        group["params"] = params
        for k, v in self.defaults.items():
            if v is required and k not in group:
                raise ValueError(f"{type(self).__name__}: parameter group didn't specify a value of required option {k}")
            group.setdefault(k, v)
        # the caller's own dict becomes the group, as in PyTorch: a wrapper built on
        # ``base.param_groups`` (SAM, lookahead) shares them with ``base``
        param_group.update(group)
        self.param_groups.append(param_group)

    def _split_names(self, group, params):
        """PyTorch 2.13's named parameters: a group of ``(name, tensor)`` pairs keeps the names
        in ``group["param_names"]`` (saved in ``state_dict``); every parameter and every group
        must be named, or none."""
        named = [isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) for p in params]
        if any(named) and not all(named):
            raise ValueError(f"{type(self).__name__}: all optimizer params should be with/without names. Some "
                             "param names are missing")
        has_names = bool(params) and all(named)
        if self.param_groups and has_names != ("param_names" in self.param_groups[0]):
            raise ValueError(f"{type(self).__name__}: all optimizer param groups should be with/without names. "
                             f"cannot add param group {'with' if has_names else 'without'} names to the optimizer")
        if has_names:
            group["param_names"] = [n for n, _ in params]
            params = [p for _, p in params]
        group["_params"] = params

    def zero_grad(self, set_to_none: bool = True):
        """Reset the gradients of all optimized parameters (to None by default)."""
        for g in self.param_groups:
            for p in g["params"]:
                if p._grad is None:
                    continue
                if set_to_none:
                    p._grad = None
                elif p._grad._data.__class__ is WrapperValues:  # through its handler (NOTE [Subclass updates])
                    from .._core.grad_mode import no_grad

                    with no_grad():
                        p._grad.zero_()
                else:
                    with backend.on_device(p._grad):
                        p._grad._data[...] = 0
                    p._grad._version[0] += 1

    def step(self, closure=None):
        """One update. ``closure`` re-evaluates the loss (required by LBFGS).

        Every gradient is checked before any parameter or state changes, so a failing
        step leaves the optimizer and its parameters as they were.
        """
        loss = None
        if closure is not None:
            from .._core.grad_mode import enable_grad

            with enable_grad():
                loss = closure()
        work = _resolve_tensor_lr(self._gradients())
        if SUBCLASS_DISPATCH[0]:
            work = self._subclass_steps(work)  # See NOTE [Subclass updates]
        if work and self._fused_kernel is not None and work[0][0]._data.__class__ is not np.ndarray \
                and _kernel_fits_update(type(self)):
            work = self._fused_steps(work)  # See NOTE [Fused updates on a device]
        for p, grad, group in work:
            with backend.on_device(p):  # the update's array code runs on p's device (NOTE [Several devices])
                self._step_one(p, grad, group)
        return loss

    def _step_one(self, p, grad, group):
        if group.get("maximize", False):
            grad = -grad
        state = self.state[p]
        if group.get("differentiable", False):
            self._graph_update(p, grad, state, group)
        else:
            arr = _real_view(p._data)  # complex: re and im as two reals, as PyTorch's view_as_real
            # inf/nan gradients give inf/nan parameters silently, as in PyTorch
            # (NOTE [Silent floating-point errors]).
            arrays, live = _state_arrays(p, state)
            try:
                new = quiet_call(self._update, arr, _real_view(grad._data), arrays, group)
            finally:
                _store_state(p, state, arrays, live)
            if new is not None and new is not arr:
                np.copyto(arr, new, casting="same_kind")
            if arr is not p._data and not np.shares_memory(arr, p._data):  # a non-contiguous complex p
                p._data[...] = arr.view(p._data.dtype)
            p._version[0] += 1

    # ------------------------------------------------ NOTE [Subclass updates]
    # A parameter (or gradient) that is a wrapper subclass (``Tensor._make_wrapper_subclass``,
    # e.g. a TwoTensor made ``nn.Parameter``, NOTE [Subclass parameters]) has no array to update
    # in place. Its update runs the same rule on Tensors under ``no_grad`` (as NOTE
    # [Differentiable steps] runs it in the graph), so every op reaches its ``__torch_dispatch__``
    # and the state comes out of its class, then ``p.copy_(new)`` writes the result through the
    # handler, as PyTorch's in-place updates reach the inner tensors. Checked only once a
    # dispatch subclass exists (``SUBCLASS_DISPATCH``): plain steps pay one flag test.
    def _subclass_steps(self, work):
        """Update the wrapper-subclass parameters of ``work``; return the others."""
        rest, wrapped = [], []
        for item in work:
            p, grad, group = item
            if p._data.__class__ is WrapperValues or grad._data.__class__ is WrapperValues:
                if group.get("differentiable", False):  # refused before any parameter changes
                    raise NotImplementedError(f"{type(self).__name__}.step: differentiable=True is not supported "
                                              f"for a {type(p).__name__} parameter (a __torch_dispatch__ subclass)")
                wrapped.append(item)
            else:
                rest.append(item)
        for p, grad, group in wrapped:
            self._subclass_update(p, grad, group)
        return rest

    def _subclass_update(self, p, grad, group):
        from .._core.grad_mode import no_grad

        with no_grad():
            if group.get("maximize", False):
                grad = -grad
            new = self._update(p, grad, self.state[p], group)
            if new is not None and new is not p:
                p.copy_(new)

    # ------------------------------------------------ NOTE [Fused updates on a device]
    _fused_kernel = None  # a multi_tensor_kernel(...) of the subclass
    _fused_state = ()  # names of per-parameter state arrays the kernel updates, in its slot order
    _fused_options = ("lr",)  # group options the kernel takes as numbers (a Tensor lr: _update runs)

    def _fused_scalars(self, group, key):  # pragma: no cover - abstract
        """The kernel's scalar arguments (after the slots) for ``group`` and the ``key`` that
        ``_fused_next`` gave (e.g. Adam's step count)."""
        raise NotImplementedError

    def _fused_next(self, state, group):
        """The key of a parameter's next update (e.g. Adam's step count), read from its state
        without changing it; the parameters of one launch share a key."""
        return None

    def _fused_commit(self, state, key):
        """Store the host-side state of an update that was launched (e.g. the step count)."""

    def _fused_steps(self, work):
        """Update the parameters of ``work`` a kernel can take; return the others.

        Host-side state (new state arrays, step counts) is stored only once every launch is
        made, so a launch that fails leaves the optimizer's state as it was."""
        rest, batches = [], {}
        for item in work:
            p, grad, group = item
            arr, g = p._data, grad._data
            if group.get("differentiable", False) or arr.dtype not in _FUSED_DTYPES or g.dtype != arr.dtype \
                    or not (arr.flags["C_CONTIGUOUS"] and g.flags["C_CONTIGUOUS"]) \
                    or not all(isinstance(group[k], numbers.Real) for k in self._fused_options):
                rest.append(item)
                continue
            launch = kernel_for(arr, self._fused_kernel, arr.dtype)
            state = None if launch is None else self._fused_state_arrays(p, group)
            if state is None:
                rest.append(item)
                continue
            key = self._fused_next(self.state.get(p, {}), group)
            batches.setdefault((id(group), arr.dtype, arr.device.id, key), (launch, group, key, []))[3].append(
                (p, g, state))
        for launch, group, key, items in batches.values():
            scalars = self._fused_scalars(group, key)
            for start in range(0, len(items), _SLOTS):
                _launch_slots(launch, items[start:start + _SLOTS], scalars)
        for _, group, key, items in batches.values():
            for p, _, arrays in items:
                state = self.state[p]
                for name, (a, fresh) in zip(self._fused_state, arrays):
                    if fresh:
                        state[name] = _wrap(a)
                    elif a is not p._data:
                        state[name]._version[0] += 1
                self._fused_commit(state, key)
                p._version[0] += 1
        return rest

    def _fused_state_arrays(self, p, group):
        """``[(array, fresh)]`` for each of ``_fused_state``: made empty on the first step
        (``fresh`` tells the kernel to initialise it; stored by ``_fused_steps`` after the
        launch), the parameter itself where the group's update does not use it; None where a
        saved array can't be used (then ``_update`` runs)."""
        state = self.state.get(p, {})
        used = self._fused_state_names(group)
        out = []
        for name in self._fused_state:
            a = state.get(name)
            if isinstance(a, Tensor):
                if _in_graph(a):
                    return None
                a = a._data
            if name not in used:
                out.append((p._data, 0))
            elif a is None:
                out.append((backend.namespace_of(p._data).empty_like(p._data), 1))
            elif a.__class__ is p._data.__class__ and a.dtype == p._data.dtype and a.flags["C_CONTIGUOUS"] \
                    and a.shape == p._data.shape:
                out.append((a, 0))
            else:
                return None
        return out

    def _fused_state_names(self, group):
        """The names of ``_fused_state`` this group's update uses (e.g. no momentum buffer
        without momentum)."""
        return self._fused_state

    def _graph_update(self, p, grad, state, group):
        """The update rule on Tensors, recorded in the graph. See NOTE [Differentiable steps]."""
        from .._core.grad_mode import enable_grad

        if p.is_leaf and p.requires_grad:
            raise RuntimeError(
                f"{type(self).__name__}.step: differentiable=True changes the parameters in place inside "
                f"the graph, so a parameter (shape {tuple(p.shape)}) can't be a leaf that requires grad; "
                "optimize a non-leaf copy instead (e.g. p = w.clone())")
        complex_p = p.dtype.kind == "c"
        for k, v in state.items():
            if _is_array(v):  # an array a user put there
                state[k] = _wrap(v.copy())
            elif isinstance(v, Tensor) and complex_p and v.dtype.kind == "c":
                state[k] = _real_pairs(v)  # the layout the rules read (converted back below)
            elif isinstance(v, Tensor) and not _in_graph(v):
                # the rules may change state in place; an eager step's Tensor (which a user may
                # hold) keeps its values
                state[k] = v.clone()
        with enable_grad():
            # the rule reads a clone, so the graph it builds never sees ``p`` change
            if complex_p:  # re and im as two reals, in the layout of the eager path's _real_view
                new = self._update(_real_pairs(p.clone()), _real_pairs(grad), state, group)
                p.copy_(_from_real_pairs(new, tuple(p.shape)))
            else:
                p.copy_(self._update(p.clone(), grad, state, group))
        if complex_p:  # users see complex state, as in eager steps
            shape = tuple(p.shape)
            pairs = shape[:-1] + (2 * shape[-1],) if shape else (2,)
            for k, v in state.items():
                if isinstance(v, Tensor) and v.dtype.kind == "f" and tuple(v.shape) == pairs:
                    state[k] = _from_real_pairs(v, shape)

    def _gradients(self):
        """``(param, grad array, group)`` for every parameter that has a gradient, validated."""
        work = []
        for group in self.param_groups:
            for p in group["params"]:
                g = p._grad
                if g is None:
                    continue
                if tuple(g.shape) != tuple(p.shape):
                    raise RuntimeError(f"{type(self).__name__}.step: a gradient of shape {tuple(g.shape)} "
                                       f"doesn't match its parameter of shape {tuple(p.shape)}")
                if g.dtype.kind not in "fc":
                    raise RuntimeError(f"{type(self).__name__}.step: gradients must be floating point, got "
                                       f"dtype {g.dtype} for a parameter of shape {tuple(p.shape)}")
                if g.is_sparse:
                    g = self._sparse_gradient(g, p, group)
                work.append((p, g, group))
        return work

    # Whether ``step`` takes sparse gradients (PyTorch: SGD, Adagrad, SparseAdam, LBFGS). They are
    # checked with the others in ``_gradients``, before anything changes (a half-applied step is
    # what PyTorch avoids too).
    _takes_sparse = False
    _sparse_hint = ""

    def _sparse_gradient(self, g, p, group):
        """The gradient the update uses for a sparse ``g``: dense (the entries it lacks are zeros,
        which is what PyTorch's sparse SGD and Adagrad updates amount to)."""
        name = type(self).__name__
        if not self._takes_sparse:
            raise RuntimeError(f"{name}.step: {name} does not support sparse gradients{self._sparse_hint} "
                               f"(a parameter of shape {tuple(p.shape)})")
        if group.get("weight_decay", 0):
            raise RuntimeError(f"{name}.step: the weight_decay option is not compatible with sparse gradients")
        return g.to_dense()

    def _update(self, param, grad, state, group):  # pragma: no cover - abstract
        """The update rule: returns the new parameter value (``param`` itself when it changed
        the array in place, None for array-only rules). In-place changes go through ``_sub``,
        ``_scale`` and ``_decay_add``, which are in place on arrays and functional on Tensors,
        so the same rule runs inside the graph. See NOTE [Differentiable steps]."""
        raise NotImplementedError

    # ----------------------------------------------------------- checkpoints
    def state_dict(self):
        """``{"state": {index: {...}}, "param_groups": [...]}`` with parameters as indices (the
        ``register_state_dict_*_hook`` hooks run around it: NOTE [Optimizer hooks])."""
        return self._state_dict_with_hooks(self._packed_state_dict)

    def _packed_state_dict(self):
        index = {}
        groups = []
        for g in self.param_groups:
            packed = {k: v for k, v in g.items() if k != "params"}
            packed["params"] = []
            for p in g["params"]:
                index.setdefault(id(p), len(index))
                packed["params"].append(index[id(p)])
            groups.append(packed)
        state = {}
        for g in self.param_groups:
            for p in g["params"]:
                if p in self.state:
                    state[index[id(p)]] = {k: _export_for(p, v) for k, v in self.state[p].items()}
        return {"state": state, "param_groups": groups}

    # Whether every non-scalar Tensor in a parameter's state has the parameter's shape
    # (momentum buffers, moments); LBFGS keeps flat vectors instead.
    _state_like_params = True

    def _state_shape(self, p, name):
        """The shape state ``name`` of ``p`` must have when loaded (None: any)."""
        return _local_shape(p) if self._state_like_params and not self._own_step() else None

    def _own_step(self):
        """Whether this is a user's optimizer that writes its own ``step`` (no ``_update`` rule):
        its state is whatever that step keeps (Shampoo's preconditioner matrices, Adafactor's
        row and column factors, dicts of Tensors), loaded as PyTorch loads it: no shape checks,
        floating Tensors cast to the parameter's dtype, Tensors nested in lists and dicts kept
        as Tensors."""
        return self._tensor_state and type(self)._update is Optimizer._update

    # Whether state arrays are kept as Tensors (NOTE [Optimizer updates]); LBFGS keeps arrays.
    _tensor_state = True

    def _import_state(self, p, st, index=None):
        entry = self._import_arrays(p, st, index)
        if self._own_step():  # See Optimizer._own_step
            entry = {k: v if k == "step" else _nested_tensors(p, v) for k, v in entry.items()}
        if self._tensor_state:
            entry = {k: _state_tensor(p, v) if backend.is_array(v) else v for k, v in entry.items()}
        return entry

    def _import_arrays(self, p, st, index):
        entry = {}
        for name, v in st.items():
            if not isinstance(v, Tensor):
                entry[name] = _import(v)
                continue
            if v._data.__class__ is WrapperValues:  # a copy through its handler (NOTE [Subclass updates])
                if tuple(v.shape) != tuple(p.shape):
                    raise ValueError(f"{type(self).__name__}.load_state_dict: state {name!r} has shape "
                                     f"{tuple(v.shape)} but its parameter (index {index}) needs {tuple(p.shape)}")
                entry[name] = _wrapper_copy(v)
                continue
            own = self._own_step()  # a user's step reads its state as it saved it (Optimizer._own_step)
            if name == "step" and v.numel() == 1 and not own:
                # PyTorch saves the step count as a float32 tensor; kept as one, ``1 - b ** step``
                # would be computed in float32 (PyTorch's rules read it as a Python number)
                step = float(v.detach().item())
                entry[name] = int(step) if step.is_integer() else step
                continue
            # state follows its parameter's device (PyTorch's rule); the step count stays put
            src = v._data if name == "step" else backend.to_device(v._data, p.device)
            with backend.on_device(src):  # the copies run where the array is (NOTE [Several devices])
                arr = src.copy() if src is v._data else src
                if p.dtype.kind == "c" and arr.dtype.kind == "c" and arr.shape == tuple(p.shape) and not own:
                    entry[name] = _real_view(arr.astype(p.dtype)).copy()  # See NOTE [Complex optimizer state]
                    continue
                want = self._state_shape(p, name)
                if name != "step" and arr.ndim and want is not None and arr.shape != want:
                    raise ValueError(f"{type(self).__name__}.load_state_dict: state {name!r} has shape "
                                     f"{arr.shape} but its parameter (index {index}) needs {want}")
                if name != "step" and arr.ndim and arr.shape == want:
                    arr = arr.astype(p.dtype)
            entry[name] = arr
        return entry

    def load_state_dict(self, state_dict):
        """Restore options and state; validates everything before changing anything.

        The saved groups must carry this optimizer's options (so the state of another
        optimizer class is refused), each option must pass the constructor's own checks, and
        every state tensor must fit its parameter. Errors name the offending key.
        """
        name = f"{type(self).__name__}.load_state_dict"
        state_dict = self._load_state_dict_pre(state_dict)  # See NOTE [Optimizer hooks]
        if not isinstance(state_dict, dict) or not {"state", "param_groups"} <= set(state_dict):
            raise TypeError(f"{name}: expected a dict with 'state' and 'param_groups' (from state_dict()), "
                            f"got {type(state_dict).__name__}")
        groups = state_dict["param_groups"]
        if not isinstance(groups, (list, tuple)) or not all(isinstance(g, dict) and "params" in g for g in groups):
            raise TypeError(f"{name}: 'param_groups' must be a list of dicts with 'params'")
        if len(groups) != len(self.param_groups):
            raise ValueError(f"{name}: loaded state dict has {len(groups)} parameter groups but the optimizer "
                             f"has {len(self.param_groups)}")
        for i, (saved, mine) in enumerate(zip(groups, self.param_groups)):
            if len(saved["params"]) != len(mine["params"]):
                raise ValueError(f"{name}: param_groups[{i}] has {len(saved['params'])} parameters but the "
                                 f"optimizer's group has {len(mine['params'])}")
            self._check_group_options(name, i, saved)
        id_map = {}
        for saved, mine in zip(groups, self.param_groups):
            id_map.update(zip(saved["params"], mine["params"]))
        if not isinstance(state_dict["state"], dict):
            raise TypeError(f"{name}: 'state' must be a dict, got {type(state_dict['state']).__name__}")
        new_state = {}
        for k, st in state_dict["state"].items():
            if isinstance(k, bool) or not isinstance(k, (int, str)) or not str(k).isdigit() or int(k) not in id_map:
                raise ValueError(f"{name}: state for unknown parameter index {k!r}")
            if not isinstance(st, dict):
                raise TypeError(f"{name}: state[{k!r}] must be a dict, got {type(st).__name__}")
            new_state[id_map[int(k)]] = self._import_state(id_map[int(k)], st, int(k))
        # the saved group replaces the live one, as PyTorch's: a key the saved group lacks (a
        # scheduler's ``initial_lr`` set after the save) goes; the optimizer's own options stay
        new_groups = [{**{k: v for k, v in mine.items() if k in saved or k in self.defaults
                          or k in ("params", "param_names")},
                       **{k: copy.deepcopy(v) for k, v in saved.items() if k != "params"}}
                      for saved, mine in zip(groups, self.param_groups)]
        for mine, new in zip(self.param_groups, new_groups):
            mine.clear()
            mine.update(new)
        self.state = collections.defaultdict(dict, new_state)
        self._load_state_dict_post()

    def _check_group_options(self, name, i, saved):
        """The saved group's options are this optimizer's, and pass its constructor's checks."""
        missing = [k for k in self.defaults if k not in saved and k not in _FLAG_KEYS]
        if missing:
            raise ValueError(f"{name}: param_groups[{i}] lacks option(s) {missing} of {type(self).__name__} "
                             "(is this the state of a different optimizer?)")
        mine = self.param_groups[i]
        # Another optimizer's option (``betas`` in an SGD group) is refused; any other key is the
        # user's own (gsplat's and 3DGS's ``"name"``) and comes along, as PyTorch's
        foreign = [k for k in saved if k != "params" and k not in self.defaults and k not in mine
                   and k not in _SCHEDULER_KEYS and k != "param_names"]
        if foreign:
            options = _optimizer_option_names()
            foreign = [k for k in foreign if k in options]
        if foreign:
            raise ValueError(f"{name}: param_groups[{i}] has option(s) {foreign} that {type(self).__name__} "
                             "does not know (is this the state of a different optimizer?)")
        import inspect

        try:
            sig = inspect.signature(type(self).__init__)
        except (TypeError, ValueError):  # pragma: no cover - builtins only
            return
        kw = {k: saved[k] for k in self.defaults if k in sig.parameters and k in saved}
        if all(k in mine and _same_option(mine[k], v) for k, v in kw.items()):
            return  # the options this group already runs with (PyTorch checks no group's options)
        from ..ops.creation import zeros

        dummy = zeros(1, 1, requires_grad=True)  # 2-D: some optimizers (Muon) take only matrices
        try:
            sig.bind(None, [dummy], **kw)
        except TypeError:
            return  # a subclass whose constructor needs more: only the key checks apply
        try:
            type(self)([dummy], **kw)
        except (ValueError, TypeError) as e:
            raise ValueError(f"{name}: param_groups[{i}] has an invalid option: {e}") from None

def _optimizer_option_names():
    """The option names of every optimizer class (its constructor's parameters but ``params``)."""
    import inspect

    names, stack = set(), [Optimizer]
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        try:
            names.update(inspect.signature(cls.__init__).parameters)
        except (TypeError, ValueError):  # pragma: no cover - builtins only
            pass
    return names - {"self", "params", "args", "kwargs", "defaults"}


def _same_option(a, b):
    if isinstance(a, Tensor) or isinstance(b, Tensor):
        return a is b
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return False


# Keys that learning-rate schedulers add to parameter groups.
_SCHEDULER_KEYS = frozenset({"initial_lr", "max_lr", "min_lr", "base_lr", "max_momentum", "base_momentum",
                             "swa_lr"})


def _real_view(a):
    """A complex array as its interleaved (re, im) float view (shares memory), so every update
    rule treats the real and imaginary parts as independent real parameters (PyTorch does the
    same with view_as_real); other arrays unchanged. A 0-d complex array becomes shape (2,)."""
    if a.dtype.kind != "c":
        return a
    if a.ndim == 0:
        a = a.reshape(1)  # a view: NumPy changes the itemsize of a view only with a last dim
    elif a.strides[-1] != a.itemsize:
        a = a.copy()  # a (contiguous) copy: step() writes a parameter's copy back
    return a.view(a.real.dtype)


def _local_shape(p):
    """The shape of the array an update of ``p`` works on: a DTensor parameter's (``fully_shard``,
    the parallel styles) state is its local piece's, as its gradient is."""
    local = getattr(p, "_local_tensor", None)
    return tuple((p if local is None else local).shape)


# NOTE [Complex optimizer state]
# The update rules see a complex parameter as its (re, im) pairs (_real_view), so its state
# (moments, momentum buffers) is kept in that real layout. state_dict hands it out as PyTorch
# keeps it, complex and of the parameter's shape, and load_state_dict converts back, so
# checkpoints of complex parameters round-trip and read like PyTorch's.
def _export_for(p, v):
    """:func:`_export` of one state entry of ``p``; pair-layout state of a complex ``p`` as complex."""
    if p.dtype.kind == "c":
        arr = v._data if isinstance(v, Tensor) else v
        shape = tuple(p.shape)
        pairs = shape[:-1] + (2 * shape[-1],) if shape else (2,)
        if backend.is_array(arr) and arr.dtype.kind == "f" and arr.shape == pairs:  # on any device
            cdt = np.complex64 if arr.dtype.itemsize <= 4 else np.complex128
            with backend.on_device(arr):
                return _wrap(backend.xp.ascontiguousarray(arr, dtype=np.float32 if cdt is np.complex64 else np.float64)
                             .view(cdt).reshape(shape).copy())
    return _export(v)


def _real_pairs(t):
    """:func:`_real_view` for a Tensor in the graph (differentiable=True): ``view_as_real``, with
    the pair dim merged into the last one, so the state has the eager path's layout."""
    from ..ops.complex import view_as_real

    r = view_as_real(t.contiguous())
    shape = tuple(t.shape)
    return r.reshape(shape[:-1] + (2 * shape[-1],) if shape else (2,))


def _from_real_pairs(r, shape):
    """Inverse of :func:`_real_pairs`: the complex Tensor of ``shape``."""
    from ..ops.complex import view_as_complex

    return view_as_complex(r.reshape(tuple(shape) + (2,)).contiguous())


def _wrapper_copy(t):
    """A detached clone of a wrapper-subclass Tensor, made by its ``__torch_dispatch__``."""
    from .._core.grad_mode import no_grad

    with no_grad():
        return t.detach().clone()


def _nested_tensors(p, v):
    """A loaded state value of a user's optimizer (``Optimizer._own_step``): arrays, also inside
    lists, tuples and dicts, as Tensors, floating ones in ``p``'s floating dtype (PyTorch's
    ``_process_value_according_to_param_policy``)."""
    if backend.is_array(v):
        if _dtypes.is_floating(v.dtype) and p.dtype.is_floating_point and v.dtype != p.dtype.dtype:
            with backend.on_device(v):
                v = v.astype(p.dtype.dtype)
        return _wrap(v)
    if isinstance(v, (list, tuple)):
        return type(v)(_nested_tensors(p, x) for x in v)
    if isinstance(v, dict):
        return {k: _nested_tensors(p, x) for k, x in v.items()}
    return v


def _export(v):
    """State value -> checkpoint value: ndarrays (also inside lists, e.g. LBFGS history) become Tensor copies."""
    if isinstance(v, Tensor):  # differentiable=True keeps Tensors (in the graph): save their values
        if v._data.__class__ is WrapperValues:  # a wrapper subclass's state (NOTE [Subclass updates])
            return _wrapper_copy(v)
        v = v._data
    if _is_array(v):
        with backend.on_device(v):
            return _wrap(v.copy())
    if isinstance(v, (list, tuple)):
        return type(v)(_export(x) for x in v)
    if isinstance(v, dict):
        return {k: _export(x) for k, x in v.items()}
    return copy.deepcopy(v)


def _import(v):
    """Inverse of :func:`_export`: Tensors become private ndarray copies."""
    if isinstance(v, Tensor):
        with backend.on_device(v):
            return v._data.copy()
    if isinstance(v, (list, tuple)):
        return type(v)(_import(x) for x in v)
    if isinstance(v, dict):
        return {k: _import(x) for k, x in v.items()}
    return copy.deepcopy(v)
