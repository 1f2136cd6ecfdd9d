"""An emulation of cuDNN's convolution API for the strict stand-in device (tests only).

CI has no GPU and no cuDNN, yet the conv primitives call cuDNN on a GPU (NOTE [cuDNN
convolutions] in ``lucid/_core/cudnn.py``). :class:`EmulatedCudnn` has the C functions that
module calls, taking the very ctypes arguments the real library takes (descriptor handles,
``int`` arrays, ``byref`` outputs, host addresses of alpha and beta, device addresses of the
data), and keeps cuDNN's contracts strictly:

- descriptors must be created before they are set and set before they are used; tensors are
  4-D or 5-D and packed; a convolution's descriptors must agree (channels, groups, the output
  size cuDNN computes) or the call answers ``CUDNN_STATUS_BAD_PARAM``;
- a handle is used on the device it was created on, after ``cudnnSetStream``;
- an algorithm must be one the heuristics offered for that direction, with at least the
  workspace ``Get...WorkspaceSize`` named for it, at a non-null address;
- its heuristics offer, in order, an unsupported algorithm, a TF32 tensor-core one (float32),
  a non-deterministic one and a deterministic one needing workspace, so the caller's choice
  under ``allow_tf32``/``deterministic`` is checked (:attr:`EmulatedCudnn.calls` logs each
  call's algorithm); ``Find`` writes NaN into the output it times on, as a real one leaves
  garbage there.

The arithmetic is Lucid's CPU convolution on the arrays read through the addresses: what is
checked is everything the binding does, not cuDNN's kernels.
"""
from __future__ import annotations

import ctypes

import numpy as np

from . import strict_device as _sd

SUCCESS, BAD_PARAM, NOT_SUPPORTED = 0, 2000, 3000
_DTYPES = {0: np.dtype(np.float32), 1: np.dtype(np.float64), 2: np.dtype(np.float16)}
_COUNT = {"forward": 8, "backward_data": 6, "backward_filter": 7}


class _Bad(Exception):
    pass


def _require(cond, what):
    if not cond:
        raise _Bad(what)


def _status(fn):
    def call(self, *args):
        try:
            fn(self, *args)
        except _Bad as e:
            self.errors.append(f"{fn.__name__}: {e}")
            return BAD_PARAM
        return SUCCESS
    call.__name__ = fn.__name__
    return call


def _out(ref, value):
    """Write ``value`` through a ``ctypes.byref`` argument."""
    ref._obj.value = value


def _array(ptr, dtype, shape):
    """The device array at address ``ptr`` (the stand-in's memory is host memory)."""
    _require(ptr, "a null data pointer")
    n = int(np.prod(shape)) * dtype.itemsize
    return np.frombuffer((ctypes.c_char * n).from_address(ptr), dtype=dtype).reshape(shape)


class EmulatedCudnn:
    """cuDNN's convolution C API over the stand-in's memory. See the module docstring."""

    def __init__(self):
        self._descs = {}
        self._handles = {}
        self._next = 1  # descriptor and handle values: never reused, as freed pointers may be
        self.calls = []  # (function, algo) of each convolution call
        self.errors = []  # what BAD_PARAM answers complained of

    # --------------------------------------------------------------- general
    def cudnnGetVersion(self):
        return 92800

    def cudnnGetErrorString(self, status):
        return {SUCCESS: b"CUDNN_STATUS_SUCCESS", BAD_PARAM: b"CUDNN_STATUS_BAD_PARAM",
                NOT_SUPPORTED: b"CUDNN_STATUS_NOT_SUPPORTED"}.get(status, b"CUDNN_STATUS_UNKNOWN")

    @_status
    def cudnnCreate(self, ref):
        key, self._next = self._next, self._next + 1
        self._handles[key] = {"device": _sd.current(), "stream": None}
        _out(ref, key)

    @_status
    def cudnnSetStream(self, handle, stream):
        _require(handle.value in self._handles, "an unknown handle")
        self._handles[handle.value]["stream"] = stream

    def _handle(self, handle):
        h = self._handles.get(handle.value)
        _require(h is not None, "an unknown handle")
        _require(h["stream"] is not None, "a handle whose stream was never set")
        _require(h["device"] == _sd.current(), f"the handle of device {h['device']} used while device "
                                               f"{_sd.current()} is current")

    # ----------------------------------------------------------- descriptors
    def _create(self, ref, kind):
        key, self._next = self._next, self._next + 1
        self._descs[key] = {"kind": kind}
        _out(ref, key)

    def _desc(self, handle, kind, complete=True):
        d = self._descs.get(handle.value if isinstance(handle, ctypes.c_void_p) else handle)
        _require(d is not None and d["kind"] == kind, f"not a {kind} descriptor")
        _require(not complete or len(d) > 1, f"a {kind} descriptor used before it was set")
        return d

    def _destroy(self, handle, kind):
        self._desc(handle, kind, complete=False)
        del self._descs[handle.value]

    @_status
    def cudnnCreateTensorDescriptor(self, ref):
        self._create(ref, "tensor")

    @_status
    def cudnnCreateFilterDescriptor(self, ref):
        self._create(ref, "filter")

    @_status
    def cudnnCreateConvolutionDescriptor(self, ref):
        self._create(ref, "conv")

    @_status
    def cudnnDestroyTensorDescriptor(self, handle):
        self._destroy(handle, "tensor")

    @_status
    def cudnnDestroyFilterDescriptor(self, handle):
        self._destroy(handle, "filter")

    @_status
    def cudnnDestroyConvolutionDescriptor(self, handle):
        self._destroy(handle, "conv")

    @_status
    def cudnnSetTensorNdDescriptor(self, handle, dtype, nd, dims, strides):
        d = self._desc(handle, "tensor", complete=False)
        dims, strides = tuple(dims[:nd]), tuple(strides[:nd])
        _require(4 <= nd <= 5 and dtype in _DTYPES and min(dims) > 0, f"tensor {dims} of type {dtype}")
        packed = tuple(int(np.prod(dims[i + 1:])) for i in range(nd))
        _require(strides == packed, f"strides {strides} of a tensor {dims} are not packed")
        d.update(dtype=_DTYPES[dtype], dims=dims)

    @_status
    def cudnnSetFilterNdDescriptor(self, handle, dtype, layout, nd, dims):
        d = self._desc(handle, "filter", complete=False)
        dims = tuple(dims[:nd])
        _require(4 <= nd <= 5 and dtype in _DTYPES and layout == 0 and min(dims) > 0, f"filter {dims}")
        d.update(dtype=_DTYPES[dtype], dims=dims)

    @_status
    def cudnnSetConvolutionNdDescriptor(self, handle, n, pad, stride, dilation, mode, compute):
        d = self._desc(handle, "conv", complete=False)
        pad, stride, dilation = tuple(pad[:n]), tuple(stride[:n]), tuple(dilation[:n])
        _require(2 <= n <= 3 and mode == 1 and compute in _DTYPES, f"conv mode {mode} compute {compute}")
        _require(min(pad) >= 0 and min(stride) > 0 and min(dilation) > 0, f"pad {pad} stride {stride}")
        d.update(pad=pad, stride=stride, dilation=dilation, compute=compute, groups=1, math=0)

    @_status
    def cudnnSetConvolutionGroupCount(self, handle, groups):
        _require(groups >= 1, f"groups {groups}")
        self._desc(handle, "conv")["groups"] = groups

    @_status
    def cudnnSetConvolutionMathType(self, handle, math):
        _require(math in (0, 1, 2, 3), f"math type {math}")
        self._desc(handle, "conv")["math"] = math

    def _out_dims(self, conv, x, w):
        c, xd, wd = self._desc(conv, "conv"), self._desc(x, "tensor"), self._desc(w, "filter")
        _require(len(xd["dims"]) == len(wd["dims"]) == len(c["pad"]) + 2, "descriptors of different ranks")
        _require(xd["dtype"] == wd["dtype"], "tensor and filter of different types")
        _require(xd["dims"][1] == wd["dims"][1] * c["groups"] and wd["dims"][0] % c["groups"] == 0,
                 f"channels: tensor {xd['dims']} filter {wd['dims']} groups {c['groups']}")
        sp = tuple((n + 2 * p - d * (k - 1) - 1) // s + 1 for n, k, p, s, d in
                   zip(xd["dims"][2:], wd["dims"][2:], c["pad"], c["stride"], c["dilation"]))
        return (xd["dims"][0], wd["dims"][0]) + sp

    @_status
    def cudnnGetConvolutionNdForwardOutputDim(self, conv, x, w, nd, out):
        dims = self._out_dims(conv, x, w)
        _require(nd == len(dims), f"{nd} output dims asked of a {len(dims)}-d convolution")
        for i, v in enumerate(dims):
            out[i] = v

    # ------------------------------------------------------------ algorithms
    def _offers(self, kind, conv):
        """(algo, status, time, memory, determinism, math) in the heuristics' order."""
        tf32 = self._desc(conv, "conv")["math"] != 3
        offers = [(_COUNT[kind] - 2, NOT_SUPPORTED, -1.0, 0, 1, 0)]
        if tf32:
            offers.append((1, SUCCESS, 0.5, 64, 1, 1))  # tensor cores (TF32 where float32)
        offers += [(0, SUCCESS, 1.0, 0, 0, 0), (_COUNT[kind] - 3, SUCCESS, 2.0, 256, 1, 0)]
        return offers

    def _check_descs(self, kind, conv, a, b, c):
        if kind == "forward":
            x, w, y = a, b, c
        elif kind == "backward_data":
            w, y, x = a, b, c
        else:
            x, y, w = a, b, c
        dims = self._out_dims(conv, x, w)
        _require(dims == self._desc(y, "tensor")["dims"], f"output {self._desc(y, 'tensor')['dims']} where the "
                                                          f"convolution gives {dims}")
        return x, w, y

    def _heuristic(self, kind, handle, a, b, conv, c, requested, returned, perfs):
        self._handle(handle)
        self._check_descs(kind, conv, a, b, c)
        offers = self._offers(kind, conv)[:requested]
        for i, (algo, status, time, memory, det, math) in enumerate(offers):
            p = perfs[i]
            p.algo, p.status, p.time, p.memory, p.determinism, p.mathType = algo, status, time, memory, det, math
        _out(returned, len(offers))

    @_status
    def cudnnGetConvolutionForwardAlgorithm_v7(self, *args):
        self._heuristic("forward", *args)

    @_status
    def cudnnGetConvolutionBackwardDataAlgorithm_v7(self, *args):
        self._heuristic("backward_data", *args)

    @_status
    def cudnnGetConvolutionBackwardFilterAlgorithm_v7(self, *args):
        self._heuristic("backward_filter", *args)

    def _find(self, kind, handle, a, pa, b, pb, conv, c, pc, requested, returned, perfs, ws, ws_size):
        self._heuristic(kind, handle, a, b, conv, c, requested, returned, perfs)
        usable = [o for o in self._offers(kind, conv) if o[1] == SUCCESS and o[3] <= ws_size]
        _require(ws or not ws_size, "a null workspace of non-zero size")
        usable.sort(key=lambda o: -o[2])  # "timed": the slowest in the heuristics first here
        for i, (algo, status, time, memory, det, math) in enumerate(usable[:requested]):
            p = perfs[i]
            p.algo, p.status, p.time, p.memory, p.determinism, p.mathType = algo, status, time, memory, det, math
        _out(returned, min(len(usable), requested))
        out_desc = self._desc(c, "filter" if kind == "backward_filter" else "tensor")
        _array(pc, out_desc["dtype"], out_desc["dims"])[...] = np.nan  # Find leaves its timing runs' output

    @_status
    def cudnnFindConvolutionForwardAlgorithmEx(self, *args):
        self._find("forward", *args)

    @_status
    def cudnnFindConvolutionBackwardDataAlgorithmEx(self, *args):
        self._find("backward_data", *args)

    @_status
    def cudnnFindConvolutionBackwardFilterAlgorithmEx(self, *args):
        self._find("backward_filter", *args)

    def _workspace(self, kind, handle, a, b, conv, c, algo, size):
        self._handle(handle)
        self._check_descs(kind, conv, a, b, c)
        offered = {o[0]: o for o in self._offers(kind, conv) if o[1] == SUCCESS}
        _require(algo in offered, f"{kind} algorithm {algo} was not offered")
        _out(size, offered[algo][3])

    @_status
    def cudnnGetConvolutionForwardWorkspaceSize(self, *args):
        self._workspace("forward", *args)

    @_status
    def cudnnGetConvolutionBackwardDataWorkspaceSize(self, *args):
        self._workspace("backward_data", *args)

    @_status
    def cudnnGetConvolutionBackwardFilterWorkspaceSize(self, *args):
        self._workspace("backward_filter", *args)

    # ----------------------------------------------------------------- calls
    def _run(self, kind, handle, alpha, a, pa, b, pb, conv, algo, ws, ws_size, beta, c, pc):
        from ..ops import conv as _conv

        self._handle(handle)
        x, w, y = self._check_descs(kind, conv, a, b, c)
        offered = {o[0]: o for o in self._offers(kind, conv) if o[1] == SUCCESS}
        _require(algo in offered, f"{kind} algorithm {algo} was not offered")
        _require(ws_size >= offered[algo][3] and (ws or not ws_size), f"workspace of {ws_size} bytes at {ws} for "
                                                                      f"algorithm {algo}")
        cd, xd, wd, yd = (self._desc(conv, "conv"), self._desc(x, "tensor"), self._desc(w, "filter"),
                          self._desc(y, "tensor"))
        scalar = ctypes.c_double if cd["compute"] == 1 else ctypes.c_float
        _require(alpha and beta, "null alpha or beta")
        alpha, beta = scalar.from_address(alpha).value, scalar.from_address(beta).value
        stride, dilation, groups = cd["stride"], cd["dilation"], cd["groups"]
        pairs = tuple((p, p) for p in cd["pad"])
        dtype = xd["dtype"]
        if kind == "forward":
            xa, wa = _array(pa, dtype, xd["dims"]), _array(pb, dtype, wd["dims"])
            res, out = _conv._conv_impl(xa, wa, stride=stride, padding=pairs, dilation=dilation,
                                        groups=groups), _array(pc, dtype, yd["dims"])
        elif kind == "backward_data":
            wa, dy = _array(pa, dtype, wd["dims"]), _array(pb, dtype, yd["dims"])
            res = _conv._conv_transpose_impl(dy, wa, stride, cd["pad"], dilation, groups, xd["dims"][2:])
            out = _array(pc, dtype, xd["dims"])
        else:
            xa, dy = _array(pa, dtype, xd["dims"]), _array(pb, dtype, yd["dims"])
            res = _conv._conv_weight_impl(xa, dy, stride, pairs, dilation, groups, wd["dims"][2:])
            out = _array(pc, dtype, wd["dims"])
        out[...] = alpha * res + (beta * out if beta else 0)
        self.calls.append((kind, algo))

    @_status
    def cudnnConvolutionForward(self, *args):
        self._run("forward", *args)

    @_status
    def cudnnConvolutionBackwardData(self, *args):
        self._run("backward_data", *args)

    @_status
    def cudnnConvolutionBackwardFilter(self, *args):
        self._run("backward_filter", *args)

    @_status
    def cudnnAddTensor(self, handle, alpha, a, pa, beta, c, pc):
        self._handle(handle)
        ad, cd = self._desc(a, "tensor"), self._desc(c, "tensor")
        _require(len(ad["dims"]) == len(cd["dims"]) and all(m in (1, n) for m, n in zip(ad["dims"], cd["dims"])),
                 f"bias {ad['dims']} does not broadcast to {cd['dims']}")
        scalar = ctypes.c_double if cd["dtype"] == np.float64 else ctypes.c_float
        alpha, beta = scalar.from_address(alpha).value, scalar.from_address(beta).value
        out = _array(pc, cd["dtype"], cd["dims"])
        out[...] = alpha * _array(pa, ad["dtype"], ad["dims"]) + beta * out
        self.calls.append(("add_tensor", None))


def make_cudnn():
    """The stand-in backend's ``cudnn`` loader: ``(Cudnn over EmulatedCudnn, None)``."""
    from .._core.cudnn import Cudnn

    return Cudnn(EmulatedCudnn(), _sd.xp, lambda a: a._a.ctypes.data, lambda: 0), None
