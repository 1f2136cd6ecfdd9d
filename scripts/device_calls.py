"""Count the device calls of one W2 and one W5 training step on the strict stand-in device.

On a GPU a Lucid step is bound by host time per kernel launch (README "GPU", measured), so the
number of device calls a step makes is the figure to cut; the stand-in counts them on any
machine, in seconds. Counts every ufunc, NumPy function, array method, indexing and namespace
call that reaches a device array (some, like reshape or transpose, launch no kernel).

    python scripts/device_calls.py [--top 25] [--where]

``--where`` also lists the lucid source lines the calls come from (the nearest frame in
``lucid/`` outside the stand-in), to find what to fuse next.
"""
from __future__ import annotations

import argparse
import collections
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from lucid import nn  # noqa: E402
from lucid.testing import strict_device as sd  # noqa: E402

CALLS = collections.Counter()
SITES = collections.Counter()  # (call, "file:line function") with --where
WHERE = [False]
_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "lucid")) + os.sep
_SKIP = os.path.join(_ROOT, "testing") + os.sep


class _Calls(collections.Counter):
    """CALLS: counts each call and, with --where, the lucid line that made it."""

    def __missing__(self, key):
        return 0

    def __setitem__(self, key, value):
        if WHERE[0] and value > self.get(key, 0):
            frame = sys._getframe(1)
            while frame is not None:
                path = os.path.abspath(frame.f_code.co_filename)
                if path.startswith(_ROOT) and not path.startswith(_SKIP):
                    break
                frame = frame.f_back
            if frame is not None:
                site = f"{path[len(_ROOT):]}:{frame.f_lineno} {frame.f_code.co_name}"
                SITES[(key, site)] += value - self.get(key, 0)
        super().__setitem__(key, value)


CALLS = _Calls()
# Calls that launch no kernel on CuPy (a view, or memory from its pool); they still cost host time.
NO_KERNEL = {"getitem (view)", ".reshape() (view)", ".transpose()", ".swapaxes()", "xp.empty", "xp.as_strided"}


_PAUSED = [0]


def _counted(name, fn):
    def call(*args, **kwargs):
        if not _PAUSED[0]:
            CALLS[name] += 1
        return fn(*args, **kwargs)
    return call


class _uncounted:
    """Inside the block, array calls are not counted (the emulated cuDNN's own arithmetic)."""

    def __enter__(self):
        _PAUSED[0] += 1

    def __exit__(self, *exc):
        _PAUSED[0] -= 1


def instrument():
    """Wrap the stand-in's entry points so that each device call is counted by name."""
    arr = sd.StrictArray
    ufunc, function, getattr_ = arr.__array_ufunc__, arr.__array_function__, arr.__getattr__

    def array_ufunc(self, uf, method, *inputs, **kwargs):
        CALLS[f"ufunc {uf.__name__}" + ("" if method == "__call__" else f".{method}")] += 1
        return ufunc(self, uf, method, *inputs, **kwargs)

    def array_function(self, func, types, args, kwargs):
        CALLS[f"np.{func.__name__}"] += 1
        return function(self, func, types, args, kwargs)

    def attribute(self, name):
        value = getattr_(self, name)
        if name == "reshape":  # a view, or a copy (one kernel) where the layout does not allow a view
            def reshape(*args, **kwargs):
                out = value(*args, **kwargs)
                CALLS[".reshape() (view)" if sd.np.may_share_memory(self._a, out._a) else ".reshape() (copy)"] += 1
                return out
            return reshape
        return _counted(f".{name}()", value) if callable(value) else value

    arr.__array_ufunc__, arr.__array_function__, arr.__getattr__ = array_ufunc, array_function, attribute
    getitem = arr.__getitem__

    def item_access(self, key):
        basic = all(k is None or k is Ellipsis or isinstance(k, (int, slice))
                    for k in (key if isinstance(key, tuple) else (key,)))
        CALLS["getitem (view)" if basic else "getitem (gather)"] += 1
        return getitem(self, key)

    arr.__getitem__ = item_access
    arr.__setitem__ = _counted("setitem", arr.__setitem__)
    namespace = sd._Namespace.__getattr__

    def module_attribute(self, name):
        value = namespace(self, name)
        if callable(value) and not isinstance(value, (sd._Namespace, sd._Ufunc)):
            return _counted(f"xp.{name}", value)
        return value

    sd._Namespace.__getattr__ = module_attribute
    call = sd._Ufunc.__call__
    factory = sd._backend._BACKENDS["strict"].kernels
    if factory is not None:  # fused kernels (NOTE [Fused device kernels]): one launch each
        def counted_factory(kernel, dtypes):
            return _counted(f"kernel {kernel.name}", factory(kernel, dtypes))

        sd._backend._BACKENDS["strict"].kernels = counted_factory
    dnn = sd._backend._BACKENDS["strict"].cudnn()
    if dnn is not None:  # cuDNN (NOTE [cuDNN convolutions]): one call each on a GPU; the stand-in's
        # emulation computes on host views of its arrays, which must not count as device calls
        lib = dnn.lib
        for name in ("cudnnConvolutionForward", "cudnnConvolutionBackwardData", "cudnnConvolutionBackwardFilter",
                     "cudnnAddTensor"):
            def cudnn_call(*args, fn=getattr(lib, name), name=name):
                CALLS[f"cudnn {name[5:]}"] += 1
                with _uncounted():
                    return fn(*args)
            setattr(lib, name, cudnn_call)
    sd._Ufunc.__call__ = lambda self, *a, **k: (CALLS.update([f"xp.{self.__name__}"]), call(self, *a, **k))[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--where", action="store_true", help="also list the lucid lines that make the calls")
    args = ap.parse_args()
    WHERE[0] = args.where
    from bench_gpu import _cnn, _data, _lucid_step, _mlp

    sd.enable()
    instrument()
    for name, make, shape in (("W2 MLP", _mlp, (128, 784)), ("W5 CNN", _cnn, (64, 1, 28, 28))):
        step = _lucid_step(make(nn), *_data(shape), device="strict")  # bench_gpu.py's step
        step()  # the first step makes optimizer state and caches
        CALLS.clear()
        SITES.clear()
        step()
        views = sum(v for k, v in CALLS.items() if k in NO_KERNEL)
        print(f"{name}: {sum(CALLS.values())} device calls per step, {views} of them views or "
              "allocations that launch no kernel")
        for k, v in CALLS.most_common(args.top):
            print(f"  {v:4d}  {k}")
        if args.where:
            print("  by source line:")
            for (k, site), v in SITES.most_common(args.top):
                print(f"  {v:4d}  {k:24s} {site}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
