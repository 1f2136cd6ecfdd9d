"""Single-process data parallelism: :class:`DataParallel` and the functions it is built from
(``scatter``, ``replicate``, ``parallel_apply``, ``gather``, ``data_parallel``), PyTorch's.

NOTE [DataParallel in one process]
A forward splits the inputs along ``dim`` into one chunk per device (``scatter``: ``chunk``
then ``.to(device)``), makes one replica of the module per device (``replicate``), runs each
replica on its chunk (``parallel_apply``) and concatenates the outputs on ``output_device``
(``gather``: ``.to`` then ``cat``). Every step is made of differentiable ops (``.to`` is the
``to_device`` primitive, NOTE [Moving between devices]), so the backward sends each replica's
gradients back through the copies and sums them into the ORIGINAL parameters' ``.grad``.

A replica is a shallow copy of each submodule whose ``_parameters`` is empty and whose
parameters are plain attributes holding ``param.to(device)`` (on ``device_ids[0]`` the
parameter itself), as PyTorch's ``replicate``. Buffers are copied without a graph, except on
``device_ids[0]``, where the replica holds the module's own buffer tensors: in-place updates
there (BatchNorm's running statistics, ``num_batches_tracked``) reach the module, and those
made on the other replicas are lost, as in PyTorch. Plain attributes changed in a replica's
forward are lost everywhere.

The replicas run one after another in the calling thread, each with its device made current
(PyTorch uses one thread per device); a device runs its kernels asynchronously, so the
devices still overlap where the host is not the bottleneck.

Devices: an int is an index of the device type named by the other arguments (e.g. the type
of ``device_ids``' first non-int entry, or of the tensors ``gather`` collects), else of the
accelerator (CUDA); ``lucid.device`` objects and strings such as ``"cuda:1"`` or
``"strict:1"`` (the tests' stand-in, NOTE [Strict stand-in device]) name themselves. With no
accelerator and no explicit device, ``DataParallel`` just calls its module, as PyTorch does.
"""
from __future__ import annotations

import contextlib
import warnings
from collections import OrderedDict
from itertools import chain

from ..._core import backend
from ..._core.grad_mode import STATE
from ..._core.tensor import Tensor
from ..module import Module

__all__ = ["DataParallel", "data_parallel", "replicate", "scatter", "scatter_kwargs", "gather", "parallel_apply"]


# ------------------------------------------------------------------------------ devices
def _accelerator_type():
    """The device type a bare int names when nothing else does: "cuda" if available, else None."""
    import lucid.cuda

    return "cuda" if lucid.cuda.is_available() else None


def _explicit_type(*groups):
    """The type of the first device given as a ``lucid.device`` or a string (CPU aside)."""
    for d in chain.from_iterable(groups):
        if isinstance(d, (str, backend.device)):
            try:
                kind = backend.device(d).type
            except RuntimeError:
                continue  # a bad name: _device reports it, naming the caller
            if kind not in ("cpu", "meta"):
                return kind
    return None


def _device(d, kind, what, allow_cpu=False):
    """A checked ``lucid.device`` from an int (an index of ``kind``), a device or a string."""
    if isinstance(d, bool) or not isinstance(d, (int, str, backend.device)):
        raise TypeError(f"{what}: expected a device index, a device or a device string, got {d!r}")
    if isinstance(d, int):
        if d == -1 and allow_cpu:
            return backend.CPU
        if kind is None:
            raise RuntimeError(f"{what}: device index {d} names no device: no accelerator is available "
                               "(pass a device such as 'cuda:0')")
        d = backend.device(kind, d)
    try:
        dev = backend.check_device(d)
    except RuntimeError as e:
        raise RuntimeError(f"{what}: {e}") from None
    if dev.type in ("cpu", "meta") and not (allow_cpu and dev.type == "cpu"):
        raise ValueError(f"{what}: expected an accelerator device, got {dev}")
    return dev


def _devices(ids, kind, what):
    devs = [_device(d, kind, what) for d in ids]
    if len({d.type for d in devs}) > 1:
        raise ValueError(f"{what}: devices must be of one type, got {[str(d) for d in devs]}")
    return devs


def _all_devices(kind):
    if kind == "cuda":
        import lucid.cuda

        n = lucid.cuda.device_count()
    else:
        backend.check_device(kind)  # registers the type's backend, or says why it can't
        n = backend._BACKENDS[kind].device_count()
    return list(range(n))


def _current(dev):
    """``with _current(dev):`` makes ``dev`` its type's current device (as ``torch.cuda.device``)."""
    b = backend._BACKENDS.get(dev.type)
    if b is None or b.use_device is None or dev.index is None:
        return contextlib.nullcontext()
    backend.note_device(b, dev.index)  # NOTE [Several devices]: the guard is on from here
    return b.use_device(dev.index)


def _check_placement(module, src, what):
    for t in chain(module.parameters(), module.buffers()):
        if t.device != src:
            raise RuntimeError(f"{what}: module must have its parameters and buffers on device {src} "
                               f"(device_ids[0]) but found one of them on device: {t.device}")


_IMBALANCE = """
    There is an imbalance between your GPUs. You may want to exclude GPU {} which
    has less than 75% of the memory or cores of GPU {}. You can do so by setting
    the device_ids argument to DataParallel, or by setting the CUDA_VISIBLE_DEVICES
    environment variable."""


def _check_balance(devs):
    """PyTorch's warning when a CUDA device has under 75% of another's memory or cores."""
    import lucid.cuda

    props = [lucid.cuda.get_device_properties(d.index) for d in devs]
    for key in ("totalGlobalMem", "multiProcessorCount"):
        values = [p[key] for p in props]
        lo = min(range(len(values)), key=values.__getitem__)
        hi = max(range(len(values)), key=values.__getitem__)
        if values[lo] / values[hi] < 0.75:
            warnings.warn(_IMBALANCE.format(devs[lo].index, devs[hi].index), stacklevel=3)
            return


def _is_namedtuple(obj):
    return isinstance(obj, tuple) and hasattr(obj, "_asdict") and hasattr(obj, "_fields")


# ------------------------------------------------------------------------------ scatter
def scatter(inputs, target_gpus, dim=0):
    """Split the tensors in ``inputs`` into one chunk per device along ``dim`` (``Tensor.chunk``,
    so there may be fewer chunks than devices) and move chunk ``i`` to ``target_gpus[i]``;
    tuples, lists, dicts and named tuples are split element by element, other objects are
    shared. Differentiable: gradients return to each tensor's own device.

    Returns a tuple of chunks for a tensor, else a list with one entry per chunk.

    Examples
    --------
    >>> import lucid
    >>> from lucid.testing import strict_device
    >>> from lucid.nn.parallel import scatter
    >>> strict_device.enable()
    >>> parts = scatter((lucid.arange(5), "tag"), ["strict:0", "strict:1"])
    >>> [(p[0].tolist(), str(p[0].device), p[1]) for p in parts]
    [([0, 1, 2], 'strict:0', 'tag'), ([3, 4], 'strict:1', 'tag')]
    """
    devs = _devices(target_gpus, _explicit_type(target_gpus) or _accelerator_type(), "scatter")

    def scatter_map(obj):
        if isinstance(obj, Tensor):
            return tuple(c.to(d) for c, d in zip(obj.chunk(len(devs), dim), devs))
        if _is_namedtuple(obj):
            return [type(obj)(*args) for args in zip(*map(scatter_map, obj))]
        if isinstance(obj, tuple) and len(obj) > 0:
            return list(zip(*map(scatter_map, obj)))
        if isinstance(obj, list) and len(obj) > 0:
            return [list(i) for i in zip(*map(scatter_map, obj))]
        if isinstance(obj, dict) and len(obj) > 0:
            return [type(obj)(i) for i in zip(*map(scatter_map, obj.items()))]
        return [obj for _ in devs]

    try:
        return scatter_map(inputs)
    finally:
        scatter_map = None  # break the closure's reference cycle, as PyTorch does


def scatter_kwargs(inputs, kwargs, target_gpus, dim=0):
    """:func:`scatter` of the positional and the keyword arguments: ``(inputs per device,
    kwargs per device)``, the shorter padded with empty ones (PyTorch's rule)."""
    scattered_inputs = scatter(inputs, target_gpus, dim) if inputs else []
    scattered_kwargs = scatter(kwargs, target_gpus, dim) if kwargs else []
    if len(scattered_inputs) < len(scattered_kwargs):
        scattered_inputs.extend(() for _ in range(len(scattered_kwargs) - len(scattered_inputs)))
    elif len(scattered_kwargs) < len(inputs):
        scattered_kwargs.extend({} for _ in range(len(scattered_inputs) - len(scattered_kwargs)))
    return tuple(scattered_inputs), tuple(scattered_kwargs)


# ------------------------------------------------------------------------------ gather
def _gather_tensors(ts, dev, dim):
    import lucid

    if dim == 0 and all(t.ndim == 0 for t in ts):
        warnings.warn("Was asked to gather along dimension 0, but all input tensors were scalars; will instead "
                      "unsqueeze and return a vector.", stacklevel=4)
        ts = [t.reshape(1) for t in ts]
    return lucid.cat([t.to(dev) for t in ts], dim)


def gather(outputs, target_device, dim=0):
    """Concatenate the per-device ``outputs`` (tensors, or equally shaped tuples, lists, dicts
    and named tuples of them) along ``dim`` on ``target_device`` (an int, a device, ``"cpu"``,
    or -1 for the CPU, deprecated as in PyTorch). 0-d tensors are stacked into a vector (with
    PyTorch's warning); any other object becomes the list of its per-replica values.
    Differentiable: each gradient slice returns to its replica's device.

    Examples
    --------
    >>> import lucid
    >>> from lucid.nn.parallel import gather
    >>> gather([lucid.tensor([1.0]), lucid.tensor([2.0, 3.0])], "cpu")
    tensor([1., 2., 3.])
    """
    first = next((t for t in _tensors(outputs)), None)
    kind = _explicit_type([target_device]) or (first.device.type if first is not None else None)
    if kind in (None, "cpu"):
        kind = _accelerator_type()
    if target_device == -1:
        warnings.warn('Using -1 to represent CPU tensor is deprecated. Please use a device object or string '
                      'instead, e.g., "cpu".', FutureWarning, stacklevel=2)
    dev = _device(target_device, kind, "gather", allow_cpu=True)

    def gather_map(outputs):
        out = outputs[0]
        if isinstance(out, Tensor):
            return _gather_tensors(outputs, dev, dim)
        if out is None:
            return None
        if isinstance(out, dict):
            if not all(len(out) == len(d) for d in outputs):
                raise ValueError("gather: All dicts must have the same number of keys")
            return type(out)((k, gather_map([d[k] for d in outputs])) for k in out)
        if _is_namedtuple(out):
            return type(out)._make(map(gather_map, zip(*outputs, strict=True)))
        if isinstance(out, (list, tuple)):
            return type(out)(map(gather_map, zip(*outputs, strict=True)))
        return list(outputs)  # another object: one per replica (PyTorch would call its type on a map)

    try:
        return gather_map(outputs)
    finally:
        gather_map = None


def _tensors(obj):
    if isinstance(obj, Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            yield from _tensors(o)
    elif isinstance(obj, dict):
        for o in obj.values():
            yield from _tensors(o)


# ------------------------------------------------------------------------------ replicate
def _replica(module):
    """A shallow copy of ``module`` without parameters of its own (PyTorch's
    ``_replicate_for_data_parallel``, which a module may define to add to it)."""
    own = getattr(module, "_replicate_for_data_parallel", None)
    if own is not None:
        return own()
    r = type(module).__new__(type(module))
    d = r.__dict__
    d.update(module.__dict__)
    d["_parameters"] = OrderedDict()
    d["_buffers"] = module._buffers.copy()
    d["_modules"] = module._modules.copy()
    d["_is_replica"] = True
    return r


def _copies(tensors, devs, detach):
    """One list per device of ``tensors`` there; a tensor already on a device is itself."""
    out = []
    for dev in devs:
        row = []
        for t in tensors:
            if t.device == dev and not (detach and t.requires_grad):
                row.append(t)
            else:
                row.append((t.detach() if detach or not t.requires_grad else t).to(dev))
        out.append(row)
    return out


def replicate(network, devices, detach=False):
    """One replica of ``network`` per device, whose parameters are differentiable copies of
    the network's (``detach=True``: copies without a graph). See NOTE [DataParallel in one
    process] for what replicas share with the network.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> from lucid.testing import strict_device
    >>> from lucid.nn.parallel import replicate
    >>> strict_device.enable()
    >>> net = nn.Linear(2, 1).to("strict:0")
    >>> r0, r1 = replicate(net, ["strict:0", "strict:1"])
    >>> r0.weight is net.weight, r1.weight.device, list(r1.parameters())
    (True, device(type='strict', index=1), [])
    """
    if not devices:
        return []
    devs = _devices(devices, _explicit_type(devices) or _accelerator_type(), "replicate")
    params = list(network.parameters())
    param_index = {id(p): i for i, p in enumerate(params)}
    param_copies = _copies(params, devs, detach)
    buffers = list(network.buffers())
    buffer_index = {id(b): i for i, b in enumerate(buffers)}
    buffer_copies = _copies(buffers, devs, detach)
    modules = list(network.modules())
    module_index = {id(m): i for i, m in enumerate(modules)}
    copies = [[_replica(m) for m in modules] for _ in devs]
    for i, m in enumerate(modules):
        for j in range(len(devs)):
            r = copies[j][i]
            r.__dict__["_former_parameters"] = OrderedDict()
            for key, child in m._modules.items():
                r._modules[key] = None if child is None else copies[j][module_index[id(child)]]
            for key, p in m._parameters.items():
                if p is None:
                    r._parameters[key] = None
                else:  # a plain attribute: the replica's parameters are not leaves (PyTorch's)
                    r.__dict__[key] = r._former_parameters[key] = param_copies[j][param_index[id(p)]]
            for key, b in m._buffers.items():
                r._buffers[key] = None if b is None else buffer_copies[j][buffer_index[id(b)]]
    return [c[0] for c in copies]


# ------------------------------------------------------------------------------ apply
def get_a_var(obj):
    """The first tensor found in ``obj`` (a tensor, or nested lists, tuples and dicts), or None."""
    return next(_tensors(obj), None)


def _reraise(e, where):
    msg = f"parallel_apply: caught {type(e).__name__} {where}: {e}"
    try:
        new = type(e)(msg)
    except Exception:
        new = RuntimeError(msg)
    raise new from e


def parallel_apply(modules, inputs, kwargs_tup=None, devices=None):
    """Call ``modules[i](*inputs[i], **kwargs_tup[i])`` with ``devices[i]`` current (an input
    that is not a list or tuple is the only argument; no device: the first tensor input's).

    The calls run one after another in this thread (PyTorch uses one thread per device); an
    exception is raised again naming the replica and its device.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> from lucid.nn.parallel import parallel_apply
    >>> [o.tolist() for o in parallel_apply([nn.Identity(), nn.Identity()], [lucid.tensor([1.0]), lucid.tensor([2.0])])]
    [[1.0], [2.0]]
    """
    n = len(modules)
    if len(inputs) != n:
        raise AssertionError(f"parallel_apply: The number of modules {n} is not equal to the number of inputs "
                             f"{len(inputs)}")
    if kwargs_tup is not None and len(kwargs_tup) != n:
        raise AssertionError(f"parallel_apply: The number of modules {n} is not equal to the number of "
                             f"kwargs_tup {len(kwargs_tup)}")
    if devices is not None and len(devices) != n:
        raise AssertionError(f"parallel_apply: The number of modules {n} is not equal to the number of devices "
                             f"{len(devices)}")
    kwargs_tup = kwargs_tup if kwargs_tup is not None else ({},) * n
    kind = _explicit_type(devices or ()) or _accelerator_type()
    outputs = []
    for i, (module, input, kwargs) in enumerate(zip(modules, inputs, kwargs_tup)):
        dev = None if devices is None or devices[i] is None else _device(devices[i], kind, "parallel_apply")
        if dev is None:
            t = get_a_var(input)
            if t is None:
                raise RuntimeError(f"parallel_apply: in replica {i}, no device was provided and no tensor input "
                                   "was found; device cannot be resolved")
            dev = t.device
        args = input if isinstance(input, (list, tuple)) else (input,)
        try:
            with _current(dev):
                outputs.append(module(*args, **kwargs))
        except Exception as e:
            _reraise(e, f"in replica {i} on device {dev}")
    return outputs


# ------------------------------------------------------------------------------ module
class DataParallel(Module):
    """Data parallelism over the devices of one process (``torch.nn.DataParallel``).

    Each forward scatters the inputs along ``dim`` over ``device_ids``, runs a replica of
    ``module`` on each part and gathers the outputs on ``output_device``; the backward sums
    the replicas' gradients into ``module``'s parameters. See NOTE [DataParallel in one
    process] (replicas, buffers, sequential execution, how ints name devices).

    Parameters
    ----------
    module : Module
        The module to run; its parameters and buffers must be on ``device_ids[0]``.
    device_ids : list of int, lucid.device or str, optional
        The devices (default: every accelerator device). Ints name devices of the type of
        the first non-int entry, else CUDA devices.
    output_device : int, lucid.device or str, optional
        Where outputs are gathered (default ``device_ids[0]``; ``"cpu"`` or -1: the CPU).
    dim : int
        The dimension inputs are split and outputs joined along.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> from lucid.testing import strict_device
    >>> strict_device.enable()
    >>> net = nn.DataParallel(nn.Linear(3, 2).to("strict:0"), device_ids=["strict:0", "strict:1"])
    >>> out = net(lucid.ones(5, 3, device="strict:0"))
    >>> out.shape, out.device, net.device_ids
    ((5, 2), device(type='strict', index=0), [0, 1])
    """

    def __init__(self, module, device_ids=None, output_device=None, dim=0):
        super().__init__()
        kind = _explicit_type(device_ids or (), () if output_device is None else (output_device,))
        kind = kind or _accelerator_type()
        if kind is None:  # no accelerator: the module is simply called, as in PyTorch
            self.module = module
            self.device_ids = []
            return
        if device_ids is None:
            device_ids = _all_devices(kind)
        if not device_ids:
            raise RuntimeError("DataParallel: no available devices were found")
        output_device = device_ids[0] if output_device is None else output_device
        self.dim = dim
        self.module = module
        self._devices = _devices(device_ids, kind, "DataParallel")
        self.device_ids = [d.index for d in self._devices]
        self._output = _device(output_device, kind, "DataParallel", allow_cpu=True)
        self.output_device = -1 if self._output.type == "cpu" else self._output.index
        self.src_device_obj = self._devices[0]
        if kind == "cuda":
            _check_balance(self._devices)
        if len(self._devices) == 1:
            self.module.to(self.src_device_obj)

    def forward(self, *inputs, **kwargs):
        if not self.device_ids:
            return self.module(*inputs, **kwargs)
        _check_placement(self.module, self.src_device_obj, "DataParallel")
        inputs, module_kwargs = self.scatter(inputs, kwargs, self._devices)
        if not inputs and not module_kwargs:  # no inputs: one call on device_ids[0]
            inputs, module_kwargs = ((),), ({},)
        if len(self._devices) == 1:
            return self.module(*inputs[0], **module_kwargs[0])
        replicas = self.replicate(self.module, self._devices[:len(inputs)])
        outputs = self.parallel_apply(replicas, inputs, module_kwargs)
        return self.gather(outputs, self._output)

    def replicate(self, module, device_ids):
        return replicate(module, device_ids, not STATE.grad_enabled)

    def scatter(self, inputs, kwargs, device_ids):
        return scatter_kwargs(inputs, kwargs, device_ids, dim=self.dim)

    def parallel_apply(self, replicas, inputs, kwargs):
        return parallel_apply(replicas, inputs, kwargs, self._devices[:len(replicas)])

    def gather(self, outputs, output_device):
        return gather(outputs, output_device, dim=self.dim)


def data_parallel(module, inputs, device_ids=None, output_device=None, dim=0, module_kwargs=None):
    """``module(*inputs, **module_kwargs)`` run as :class:`DataParallel` runs it, without
    keeping a wrapper (PyTorch's functional form; output_device -1 means the CPU).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> from lucid.testing import strict_device
    >>> from lucid.nn.parallel import data_parallel
    >>> strict_device.enable()
    >>> net = nn.Linear(3, 2).to("strict:0")
    >>> data_parallel(net, lucid.ones(4, 3, device="strict:0"), ["strict:0", "strict:1"], "cpu").device
    device(type='cpu')
    """
    if not isinstance(inputs, tuple):
        inputs = (inputs,) if inputs is not None else ()
    kind = _explicit_type(device_ids or (), () if output_device is None else (output_device,))
    kind = kind or _accelerator_type()
    if kind is None:
        raise RuntimeError("data_parallel: device type could not be determined")
    if device_ids is None:
        device_ids = _all_devices(kind)
    if not device_ids:
        raise RuntimeError("data_parallel: no available devices were found")
    output_device = device_ids[0] if output_device is None else output_device
    devs = _devices(device_ids, kind, "data_parallel")
    out_dev = _device(output_device, kind, "data_parallel", allow_cpu=True)
    _check_placement(module, devs[0], "data_parallel")
    inputs, module_kwargs = scatter_kwargs(inputs, module_kwargs, devs, dim)
    if not inputs and not module_kwargs:
        inputs, module_kwargs = ((),), ({},)
    if len(devs) == 1:
        return module(*inputs[0], **module_kwargs[0])
    used = devs[:len(inputs)]
    replicas = replicate(module, used)
    outputs = parallel_apply(replicas, inputs, module_kwargs, used)
    return gather(outputs, out_dev, dim)
