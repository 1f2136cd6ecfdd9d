"""``lucid.utils.checkpoint`` (``torch.utils.checkpoint``): :func:`checkpoint` (see
:mod:`lucid.autograd.checkpoint`), :func:`checkpoint_sequential` and PyTorch's helpers."""
from __future__ import annotations

import warnings

from ..autograd.checkpoint import CheckpointError, _Reentrant, _rng_state, checkpoint, noop_context_fn
from ..autograd.selective_checkpoint import (CheckpointPolicy, SelectiveCheckpointContext,
                                             create_selective_checkpoint_contexts)

__all__ = ["checkpoint", "checkpoint_sequential", "CheckpointError", "noop_context_fn", "detach_variable",
           "check_backward_validity", "get_device_states", "set_device_states", "DefaultDeviceType",
           "CheckpointPolicy", "SelectiveCheckpointContext", "create_selective_checkpoint_contexts",
           "set_checkpoint_early_stop", "set_checkpoint_debug_enabled", "CheckpointFunction"]


def checkpoint_sequential(functions, segments, input, use_reentrant=None, **kwargs):
    """Run ``functions`` (an ``nn.Sequential`` or a list of modules/functions, each taking one
    tensor) in ``segments`` chunks, checkpointing every chunk but the last, as PyTorch's.

    Parameters
    ----------
    functions : nn.Sequential or list of callables
        Run in order.
    segments : int
        How many chunks; each of the first ``segments - 1`` holds ``len // segments`` of them
        and keeps only its input for the backward, the last runs normally.
    input : Tensor
        The first function's input.
    use_reentrant : bool, optional
        As :func:`checkpoint`'s (default: non-reentrant).
    preserve_rng_state : bool, optional
        As :func:`checkpoint`'s (default True).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> from lucid.utils.checkpoint import checkpoint_sequential
    >>> net = nn.Sequential(nn.Linear(2, 4), nn.Tanh(), nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 1))
    >>> x = lucid.ones(3, 2, requires_grad=True)
    >>> out = checkpoint_sequential(net, 2, x, use_reentrant=False)
    >>> bool(lucid.allclose(out, net(x)))
    True
    """
    preserve = kwargs.pop("preserve_rng_state", True)
    if kwargs:
        raise ValueError("checkpoint_sequential: unexpected keyword arguments: " + ",".join(kwargs))
    from ..nn import Sequential

    if isinstance(functions, Sequential):
        functions = list(functions.children())
    functions = list(functions)
    if not isinstance(segments, int) or segments < 1:
        raise ValueError(f"checkpoint_sequential: segments must be a positive int, got {segments!r}")

    def run_function(start, end):
        def forward(x):
            for j in range(start, end + 1):
                x = functions[j](x)
            return x

        return forward

    size = len(functions) // segments
    end = -1
    for start in range(0, size * (segments - 1), size):
        end = start + size - 1
        input = checkpoint(run_function(start, end), input, use_reentrant=use_reentrant,
                           preserve_rng_state=preserve)
    return run_function(end + 1, len(functions) - 1)(input)


def detach_variable(inputs):
    """Each tensor of the tuple ``inputs`` detached, keeping its ``requires_grad`` (other values
    as they are), as PyTorch's reentrant checkpoint prepares its inputs."""
    if not isinstance(inputs, tuple):
        raise RuntimeError(f"detach_variable: only tuple of tensors is supported. Got Unsupported input "
                           f"type: {type(inputs).__name__}")
    from .._core.tensor import Tensor

    out = []
    for inp in inputs:
        if isinstance(inp, Tensor):
            x = inp.detach()
            x.requires_grad = inp.requires_grad
            out.append(x)
        else:
            out.append(inp)
    return tuple(out)


def check_backward_validity(inputs):
    """Warn, as PyTorch's reentrant checkpoint does, when no tensor input requires grad."""
    from .._core.tensor import Tensor

    if not any(isinstance(inp, Tensor) and inp.requires_grad for inp in inputs):
        warnings.warn("None of the inputs have requires_grad=True. Gradients will be None", stacklevel=2)


def get_device_states(*args):
    """``(device indices, RNG states)`` of the CUDA devices the tensors in ``args`` live on
    (what a checkpoint replays there); empty lists when none does."""
    from .._core.tensor import Tensor

    devices = sorted({a.device.index or 0 for a in args if isinstance(a, Tensor) and a.device.type == "cuda"})
    if not devices:
        return [], []
    import lucid.cuda

    return devices, [lucid.cuda.get_rng_state(d) for d in devices]


def set_device_states(devices, states, *, device_type=None):
    """Restore RNG states taken by :func:`get_device_states`."""
    if len(devices) != len(states):
        raise ValueError(f"set_device_states: {len(devices)} devices but {len(states)} states")
    if not devices:
        return
    import lucid.cuda

    for d, st in zip(devices, states):
        lucid.cuda.set_rng_state(st, d)


class DefaultDeviceType:
    """The device type whose RNG state a checkpoint preserves besides the CPU's (PyTorch's
    ``DefaultDeviceType``; "cuda" unless set)."""

    _default_device_type = "cuda"

    @staticmethod
    def set_device_type(device="cuda"):
        DefaultDeviceType._default_device_type = device

    @staticmethod
    def get_device_type():
        return DefaultDeviceType._default_device_type


class _FlagContext:
    """A process-wide flag set while the context is entered (restored on exit), the shape of
    PyTorch's ``set_checkpoint_early_stop`` and ``set_checkpoint_debug_enabled``."""

    value = None

    def __init__(self, enable):
        self._value = enable

    def __enter__(self):
        self._prev = type(self).value
        type(self).value = self._value
        return self

    def __exit__(self, *exc):
        type(self).value = self._prev
        return False


class set_checkpoint_early_stop(_FlagContext):
    """Whether a non-reentrant recomputation may stop once it has what the backward needs
    (PyTorch's default True). Lucid always reruns the whole segment, so the gradients are the
    same either way; the flag is kept for code that sets it.

    Examples
    --------
    >>> import lucid
    >>> from lucid.utils.checkpoint import checkpoint, set_checkpoint_early_stop
    >>> x = lucid.tensor([1.0, 2.0], requires_grad=True)
    >>> with set_checkpoint_early_stop(False):
    ...     y = checkpoint(lambda t: (t * t).sum(), x, use_reentrant=False)
    >>> y.backward()
    >>> x.grad
    tensor([2., 4.])
    """

    value = True

    def __init__(self, enable):
        if not isinstance(enable, bool):
            raise TypeError(f"set_checkpoint_early_stop: expected a bool, got {type(enable).__name__}")
        super().__init__(enable)


class set_checkpoint_debug_enabled(_FlagContext):
    """Override every checkpoint's ``debug`` flag (None: each call's own). Accepted as PyTorch's;
    Lucid's checkpoint errors already name the mismatching op, so it adds no trace.

    Examples
    --------
    >>> from lucid.utils.checkpoint import set_checkpoint_debug_enabled
    >>> with set_checkpoint_debug_enabled(True):
    ...     pass
    """

    def __init__(self, enabled):
        if enabled is not None and not isinstance(enabled, bool):
            raise TypeError(f"set_checkpoint_debug_enabled: expected a bool or None, got {type(enabled).__name__}")
        super().__init__(enabled)


class CheckpointFunction(_Reentrant):
    """PyTorch's legacy reentrant checkpoint as a Function:
    ``CheckpointFunction.apply(run_function, preserve_rng_state, *args)`` is
    ``checkpoint(run_function, *args, use_reentrant=True, preserve_rng_state=...)``: the forward
    keeps only the inputs, the backward reruns ``run_function`` (replaying the RNG state when
    ``preserve_rng_state``) and backpropagates through it; gradients reach tensor arguments and
    every leaf the function reads (``.backward()`` only, as PyTorch's reentrant mode).

    Examples
    --------
    >>> import lucid
    >>> from lucid.utils.checkpoint import CheckpointFunction
    >>> x = lucid.tensor([1.0, 2.0], requires_grad=True)
    >>> CheckpointFunction.apply(lambda t: (t ** 3).sum(), True, x).backward()
    >>> x.grad
    tensor([ 3., 12.])
    """


_record_checkpoint = CheckpointFunction.apply.__func__  # the Function machinery's apply (FunctionMeta)


def _checkpoint_function_apply(cls, run_function, preserve_rng_state, *args):
    if not callable(run_function):
        raise TypeError(f"CheckpointFunction.apply: run_function must be callable, got {type(run_function).__name__}")
    check_backward_validity(args)
    return _record_checkpoint(cls, run_function, _rng_state() if preserve_rng_state else None, *args)


CheckpointFunction.apply = classmethod(_checkpoint_function_apply)
