"""Thread-local switches: grad recording, anomaly detection, and the transform stack.

All mutable interpreter state lives in one ``threading.local`` (``STATE``) so that
every thread has its own grad mode and its own stack of active transforms.
"""
from __future__ import annotations

import functools
import inspect
import threading


# Number of transforms active in any thread: ``bind`` reads this plain global first, so
# the eager path skips the thread-local transform stack when no transform runs anywhere.
ACTIVE_TRACES = [0]

# True once a Tensor subclass with its own ``__torch_dispatch__`` is defined (it then also holds one
# permanent count in ACTIVE_TRACES): ``Tensor.backward`` and ``__torch_function__`` look for such
# subclasses only then. NOTE [Tensor subclass dispatch] in lucid/utils/_python_dispatch.py.
SUBCLASS_DISPATCH = [False]

# Non-zero while lucid.profiler records: the backward engine then leaves its inlined fast
# path (read once per backward). See NOTE [Profiler costs nothing when off] in lucid/profiler.py.
PROFILING = [0]


class _TraceStack(list):
    """The per-thread transform stack; keeps ACTIVE_TRACES in step with every push/pop."""

    def append(self, trace):
        ACTIVE_TRACES[0] += 1
        super().append(trace)

    def pop(self, index=-1):
        item = super().pop(index)
        ACTIVE_TRACES[0] -= 1
        return item

    def remove(self, trace):
        super().remove(trace)
        ACTIVE_TRACES[0] -= 1


def push_trace(trace):
    """Put ``trace`` on this thread's transform stack; returns its level (1 = outermost)."""
    traces = STATE.traces
    list.append(traces, trace)
    ACTIVE_TRACES[0] += 1
    return len(traces)


def pop_trace(trace):
    """Take ``trace`` off this thread's transform stack (normally the top)."""
    traces = STATE.traces
    if traces[-1] is trace:
        list.pop(traces)
        ACTIVE_TRACES[0] -= 1
    else:
        traces.remove(trace)


class _State(threading.local):
    def __init__(self):
        self.grad_enabled = True
        self.inference = False
        self.anomaly = False
        self.anomaly_check_nan = True
        # Active transforms (func.grad / jvp / vmap), innermost last. See NOTE [Levels].
        self.traces = _TraceStack()
        # autograd.graph.saved_tensors_hooks: (pack, unpack) pairs, innermost last, and the
        # message of an active disable_saved_tensors_hooks (None when enabled).
        self.saved_hooks = []
        self.saved_hooks_disabled = None
        # utils._python_dispatch.TorchDispatchMode instances, innermost last (NOTE [Dispatch modes]).
        self.dispatch_modes = []


STATE = _State()


def is_grad_enabled() -> bool:
    """Whether operations are currently recorded for reverse-mode autograd."""
    return STATE.grad_enabled


def is_inference_mode_enabled() -> bool:
    return STATE.inference


class _GradModeContext:
    """Base for context managers that are also decorators (with or without parentheses)."""

    def __new__(cls, *args, **kwargs):
        # ``@lucid.no_grad`` without parentheses: the class is called on the function itself.
        if len(args) == 1 and not kwargs and callable(args[0]) and not isinstance(args[0], bool):
            return cls()(args[0])
        return super().__new__(cls)

    def __call__(self, fn):
        if inspect.isgeneratorfunction(fn):
            return self._wrap_generator(fn)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.__class__(*self._args):
                return fn(*args, **kwargs)

        return wrapper

    def _wrap_generator(self, fn):
        """A decorated generator runs each step of its body in the mode, and the caller's code
        between steps in its own (PyTorch's rule; a plain wrapper would only cover creation)."""
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            gen = fn(*args, **kwargs)
            try:
                with self.__class__(*self._args):
                    response = gen.send(None)
                while True:
                    try:
                        request = yield response
                    except GeneratorExit:
                        with self.__class__(*self._args):
                            gen.close()
                        raise
                    except BaseException as e:
                        with self.__class__(*self._args):
                            response = gen.throw(e)
                    else:
                        with self.__class__(*self._args):
                            response = gen.send(request)
            except StopIteration as stop:
                return stop.value

        return wrapper

    _args = ()


class no_grad(_GradModeContext):
    """Context manager / decorator that disables graph recording.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([1.0], requires_grad=True)
    >>> with lucid.no_grad():
    ...     y = x * 2
    >>> y.requires_grad
    False
    """

    def __enter__(self):
        self._prev = STATE.grad_enabled
        STATE.grad_enabled = False
        return self

    def __exit__(self, *exc):
        STATE.grad_enabled = self._prev
        return False


class enable_grad(_GradModeContext):
    """Context manager / decorator that enables graph recording (e.g. inside ``no_grad``)."""

    def __enter__(self):
        self._prev = STATE.grad_enabled
        STATE.grad_enabled = not STATE.inference  # inference mode wins: nothing is recorded there
        return self

    def __exit__(self, *exc):
        STATE.grad_enabled = self._prev
        return False


class set_grad_enabled(_GradModeContext):
    """Set grad mode; works as a function call, a context manager and a decorator.

    Examples
    --------
    >>> import lucid
    >>> _ = lucid.set_grad_enabled(False)
    >>> lucid.is_grad_enabled()
    False
    >>> _ = lucid.set_grad_enabled(True)
    """

    def __init__(self, mode: bool):
        if not isinstance(mode, bool):  # PyTorch refuses 1, "yes" ...
            raise TypeError(f"set_grad_enabled(): argument 'mode' must be bool, not {type(mode).__name__}")
        self._args = (mode,)
        self._prev = STATE.grad_enabled
        STATE.grad_enabled = mode and not STATE.inference

    def __call__(self, fn):
        # Used as a decorator: undo the switch __init__ made at decoration time.
        STATE.grad_enabled = self._prev
        return super().__call__(fn)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        STATE.grad_enabled = self._prev
        return False


class inference_mode(_GradModeContext):
    """Like ``no_grad``; tensors made inside are plain data (no graph, no versions checked)."""

    def __init__(self, mode: bool = True):
        self._args = (mode,)
        self._mode = mode

    def __enter__(self):
        self._prev = (STATE.grad_enabled, STATE.inference)
        if self._mode:
            STATE.grad_enabled = False
            STATE.inference = True
        return self

    def __exit__(self, *exc):
        STATE.grad_enabled, STATE.inference = self._prev
        return False
