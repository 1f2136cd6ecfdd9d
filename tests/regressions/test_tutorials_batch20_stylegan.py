"""NVlabs/stylegan2-ada-pytorch's pure-PyTorch (non-CUDA) paths run on Lucid (``import lucid as torch``):

- ``torch_utils/misc.py``: ``constant`` (cached constant tensors), ``assert_shape`` (with
  ``symbolic_assert = torch._assert``), ``suppress_tracer_warnings`` (``torch.jit.TracerWarning``),
  ``profiled_function`` (``torch.autograd.profiler.record_function``) and ``ddp_sync``.
- ``torch_utils/ops/upfirdn2d.py``: ``setup_filter`` (``ger``, normalise, flip, gain),
  ``_upfirdn2d_ref`` (zero insertion by ``pad`` of a 6-d reshape, pad/crop, depthwise ``conv2d`` with a
  2-D or separable filter, strided slicing), ``filter2d``/``upsample2d``/``downsample2d``.
- ``torch_utils/ops/bias_act.py``: ``_bias_act_ref`` and the ``activation_funcs`` table.
- ``torch_utils/ops/conv2d_resample.py`` (NVlabs/stylegan3's copy, the same text): every fast path
  (1x1 down/up, strided conv, transposed grouped conv for ``up``) and the generic fallback.
- ``torch_utils/ops/fma.py``: ``_FusedMultiplyAdd`` (``addcmul`` forward, ``_unbroadcast`` backward).
- ``training/networks.py``: ``normalize_2nd_moment``, ``modulated_conv2d`` (demodulation; fused grouped
  conv and the non-fused path with ``fma``), ``FullyConnectedLayer`` (``lr_multiplier``, ``addmm``),
  ``Conv2dLayer``, ``MappingNetwork`` (``w_avg`` EMA by ``lerp``/``copy_``, truncation with a cutoff by
  slice assignment), ``SynthesisLayer`` (noise inputs), ``ToRGBLayer`` and ``SynthesisBlock`` at 4 and 8
  ('skip' and 'resnet' architectures).
- ``training/loss.py``: ``StyleGAN2Loss.accumulate_gradients`` phases ``Dreg`` (R1 through
  ``autograd.grad(create_graph=True)``), ``Greg`` (path-length regulariser, double backward) and ``Dboth``;
  ``run_G``'s style mixing (0-dim int64 ``random_`` cutoff, ``torch.where``, ``ws[:, cutoff:] = ...``).

Checks without PyTorch: NumPy upsample-FIR-downsample and per-sample convolutions, the activation
table in NumPy, fused == non-fused modulated convolution, the mapping network, ``w_avg`` EMA and
truncation in closed form, the style-mixing structure, R1 gradients and the regularisers' parameter
gradients (second order) against float64 central differences. The ``*_torch_parity`` tests run the same text on PyTorch with
the same weights.

Adapted: ``conv2d_gradfix.conv2d``/``conv_transpose2d`` are ``torch.nn.functional``'s (what
conv2d_gradfix falls back to off CUDA) and ``no_weight_gradients`` a no-op context; ``training_stats.report``
is a no-op; ``@persistence.persistent_class`` is left out; ``dnnlib.EasyDict`` is a small dict class.
In the loss tests the generator's mapping is a float64 broadcast stand-in (``MappingNetwork`` casts to
float32) and the synthesis a const + one ``SynthesisLayer(up=2)`` + ``ToRGBLayer`` (``SynthesisBlock``
forces float32), so that finite differences run in float64; the discriminator is ``Conv2dLayer`` x2 +
``FullyConnectedLayer``. In float64 runs the loss's ``pl_mean`` is made float64 (``lerp`` wants one
dtype, on PyTorch too), and the parity test of the path-length term draws ``pl_noise`` in NumPy
(``torch.randn_like`` swapped for the call) since the two libraries' random streams differ.
"""
import contextlib
import math
from types import SimpleNamespace

import numpy as np
import pytest

import lucid
import lucid.nn  # noqa: F401
import lucid.nn.functional  # noqa: F401


def _np(t):
    return np.asarray(t.detach().cpu().numpy(), dtype=np.float64)


class EasyDict(dict):
    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name)


# --------------------------------------------------------------------------- torch_utils

def ops_page(torch):
    import warnings

    # ---- misc.py
    misc = SimpleNamespace()
    _constant_cache = dict()

    def constant(value, shape=None, dtype=None, device=None, memory_format=None):
        value = np.asarray(value)
        if shape is not None:
            shape = tuple(shape)
        if dtype is None:
            dtype = torch.get_default_dtype()
        if device is None:
            device = torch.device('cpu')
        if memory_format is None:
            memory_format = torch.contiguous_format

        key = (value.shape, value.dtype, value.tobytes(), shape, dtype, device, memory_format)
        tensor = _constant_cache.get(key, None)
        if tensor is None:
            tensor = torch.as_tensor(value.copy(), dtype=dtype, device=device)
            if shape is not None:
                tensor, _ = torch.broadcast_tensors(tensor, torch.empty(shape, device=device))
            tensor = tensor.contiguous(memory_format=memory_format)
            _constant_cache[key] = tensor
        return tensor

    symbolic_assert = torch._assert

    class suppress_tracer_warnings(warnings.catch_warnings):
        def __enter__(self):
            super().__enter__()
            warnings.simplefilter('ignore', category=torch.jit.TracerWarning)
            return self

    def assert_shape(tensor, ref_shape):
        if tensor.ndim != len(ref_shape):
            raise AssertionError(f'Wrong number of dimensions: got {tensor.ndim}, expected {len(ref_shape)}')
        for idx, (size, ref_size) in enumerate(zip(tensor.shape, ref_shape)):
            if ref_size is None:
                pass
            elif isinstance(ref_size, torch.Tensor):
                with suppress_tracer_warnings(): # as_tensor results are registered as constants
                    symbolic_assert(torch.equal(torch.as_tensor(size), ref_size), f'Wrong size for dimension {idx}')
            elif isinstance(size, torch.Tensor):
                with suppress_tracer_warnings(): # as_tensor results are registered as constants
                    symbolic_assert(torch.equal(size, torch.as_tensor(ref_size)), f'Wrong size for dimension {idx}: expected {ref_size}')
            elif size != ref_size:
                raise AssertionError(f'Wrong size for dimension {idx}: got {size}, expected {ref_size}')

    def profiled_function(fn):
        def decorator(*args, **kwargs):
            with torch.autograd.profiler.record_function(fn.__name__):
                return fn(*args, **kwargs)
        decorator.__name__ = fn.__name__
        return decorator

    @contextlib.contextmanager
    def ddp_sync(module, sync):
        assert isinstance(module, torch.nn.Module)
        if sync or not isinstance(module, torch.nn.parallel.DistributedDataParallel):
            yield
        else:
            with module.no_sync():
                yield

    misc.constant = constant
    misc.assert_shape = assert_shape
    misc.suppress_tracer_warnings = suppress_tracer_warnings
    misc.profiled_function = profiled_function
    misc.ddp_sync = ddp_sync

    # ---- conv2d_gradfix.py off CUDA: the plain functional ops
    conv2d_gradfix = SimpleNamespace(
        conv2d=lambda input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1:
            torch.nn.functional.conv2d(input=input, weight=weight, bias=bias, stride=stride, padding=padding, dilation=dilation, groups=groups),
        conv_transpose2d=lambda input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1:
            torch.nn.functional.conv_transpose2d(input=input, weight=weight, bias=bias, stride=stride, padding=padding, output_padding=output_padding, groups=groups, dilation=dilation),
        no_weight_gradients=contextlib.nullcontext,
    )

    # ---- upfirdn2d.py
    def _parse_scaling(scaling):
        if isinstance(scaling, int):
            scaling = [scaling, scaling]
        assert isinstance(scaling, (list, tuple))
        assert all(isinstance(x, int) for x in scaling)
        sx, sy = scaling
        assert sx >= 1 and sy >= 1
        return sx, sy

    def _parse_padding(padding):
        if isinstance(padding, int):
            padding = [padding, padding]
        assert isinstance(padding, (list, tuple))
        assert all(isinstance(x, int) for x in padding)
        if len(padding) == 2:
            padx, pady = padding
            padding = [padx, padx, pady, pady]
        padx0, padx1, pady0, pady1 = padding
        return padx0, padx1, pady0, pady1

    def _get_filter_size(f):
        if f is None:
            return 1, 1
        assert isinstance(f, torch.Tensor) and f.ndim in [1, 2]
        fw = f.shape[-1]
        fh = f.shape[0]
        with misc.suppress_tracer_warnings():
            fw = int(fw)
            fh = int(fh)
        misc.assert_shape(f, [fh, fw][:f.ndim])
        assert fw >= 1 and fh >= 1
        return fw, fh

    def setup_filter(f, device=torch.device('cpu'), normalize=True, flip_filter=False, gain=1, separable=None):
        # Validate.
        if f is None:
            f = 1
        f = torch.as_tensor(f, dtype=torch.float32)
        assert f.ndim in [0, 1, 2]
        assert f.numel() > 0
        if f.ndim == 0:
            f = f[np.newaxis]

        # Separable?
        if separable is None:
            separable = (f.ndim == 1 and f.numel() >= 8)
        if f.ndim == 1 and not separable:
            f = f.ger(f)
        assert f.ndim == (1 if separable else 2)

        # Apply normalize, flip, gain, and device.
        if normalize:
            f /= f.sum()
        if flip_filter:
            f = f.flip(list(range(f.ndim)))
        f = f * (gain ** (f.ndim / 2))
        f = f.to(device=device)
        return f

    def upfirdn2d(x, f, up=1, down=1, padding=0, flip_filter=False, gain=1, impl='cuda'):
        assert isinstance(x, torch.Tensor)
        assert impl in ['ref', 'cuda']
        return _upfirdn2d_ref(x, f, up=up, down=down, padding=padding, flip_filter=flip_filter, gain=gain)

    @misc.profiled_function
    def _upfirdn2d_ref(x, f, up=1, down=1, padding=0, flip_filter=False, gain=1):
        """Slow reference implementation of `upfirdn2d()` using standard PyTorch ops.
        """
        # Validate arguments.
        assert isinstance(x, torch.Tensor) and x.ndim == 4
        if f is None:
            f = torch.ones([1, 1], dtype=torch.float32, device=x.device)
        assert isinstance(f, torch.Tensor) and f.ndim in [1, 2]
        assert f.dtype == torch.float32 and not f.requires_grad
        batch_size, num_channels, in_height, in_width = x.shape
        upx, upy = _parse_scaling(up)
        downx, downy = _parse_scaling(down)
        padx0, padx1, pady0, pady1 = _parse_padding(padding)

        # Upsample by inserting zeros.
        x = x.reshape([batch_size, num_channels, in_height, 1, in_width, 1])
        x = torch.nn.functional.pad(x, [0, upx - 1, 0, 0, 0, upy - 1])
        x = x.reshape([batch_size, num_channels, in_height * upy, in_width * upx])

        # Pad or crop.
        x = torch.nn.functional.pad(x, [max(padx0, 0), max(padx1, 0), max(pady0, 0), max(pady1, 0)])
        x = x[:, :, max(-pady0, 0) : x.shape[2] - max(-pady1, 0), max(-padx0, 0) : x.shape[3] - max(-padx1, 0)]

        # Setup filter.
        f = f * (gain ** (f.ndim / 2))
        f = f.to(x.dtype)
        if not flip_filter:
            f = f.flip(list(range(f.ndim)))

        # Convolve with the filter.
        f = f[np.newaxis, np.newaxis].repeat([num_channels, 1] + [1] * f.ndim)
        if f.ndim == 4:
            x = conv2d_gradfix.conv2d(input=x, weight=f, groups=num_channels)
        else:
            x = conv2d_gradfix.conv2d(input=x, weight=f.unsqueeze(2), groups=num_channels)
            x = conv2d_gradfix.conv2d(input=x, weight=f.unsqueeze(3), groups=num_channels)

        # Downsample by throwing away pixels.
        x = x[:, :, ::downy, ::downx]
        return x

    def filter2d(x, f, padding=0, flip_filter=False, gain=1, impl='cuda'):
        padx0, padx1, pady0, pady1 = _parse_padding(padding)
        fw, fh = _get_filter_size(f)
        p = [
            padx0 + fw // 2,
            padx1 + (fw - 1) // 2,
            pady0 + fh // 2,
            pady1 + (fh - 1) // 2,
        ]
        return upfirdn2d(x, f, padding=p, flip_filter=flip_filter, gain=gain, impl=impl)

    def upsample2d(x, f, up=2, padding=0, flip_filter=False, gain=1, impl='cuda'):
        upx, upy = _parse_scaling(up)
        padx0, padx1, pady0, pady1 = _parse_padding(padding)
        fw, fh = _get_filter_size(f)
        p = [
            padx0 + (fw + upx - 1) // 2,
            padx1 + (fw - upx) // 2,
            pady0 + (fh + upy - 1) // 2,
            pady1 + (fh - upy) // 2,
        ]
        return upfirdn2d(x, f, up=up, padding=p, flip_filter=flip_filter, gain=gain*upx*upy, impl=impl)

    def downsample2d(x, f, down=2, padding=0, flip_filter=False, gain=1, impl='cuda'):
        downx, downy = _parse_scaling(down)
        padx0, padx1, pady0, pady1 = _parse_padding(padding)
        fw, fh = _get_filter_size(f)
        p = [
            padx0 + (fw - downx + 1) // 2,
            padx1 + (fw - downx) // 2,
            pady0 + (fh - downy + 1) // 2,
            pady1 + (fh - downy) // 2,
        ]
        return upfirdn2d(x, f, down=down, padding=p, flip_filter=flip_filter, gain=gain, impl=impl)

    upfirdn2d_mod = SimpleNamespace(setup_filter=setup_filter, upfirdn2d=upfirdn2d, _upfirdn2d_ref=_upfirdn2d_ref,
                                    filter2d=filter2d, upsample2d=upsample2d, downsample2d=downsample2d,
                                    _parse_padding=_parse_padding, _get_filter_size=_get_filter_size)

    # ---- bias_act.py
    activation_funcs = {
        'linear':   EasyDict(func=lambda x, **_:         x,                                          def_alpha=0,    def_gain=1,             cuda_idx=1, ref='',  has_2nd_grad=False),
        'relu':     EasyDict(func=lambda x, **_:         torch.nn.functional.relu(x),                def_alpha=0,    def_gain=np.sqrt(2),    cuda_idx=2, ref='y', has_2nd_grad=False),
        'lrelu':    EasyDict(func=lambda x, alpha, **_:  torch.nn.functional.leaky_relu(x, alpha),   def_alpha=0.2,  def_gain=np.sqrt(2),    cuda_idx=3, ref='y', has_2nd_grad=False),
        'tanh':     EasyDict(func=lambda x, **_:         torch.tanh(x),                              def_alpha=0,    def_gain=1,             cuda_idx=4, ref='y', has_2nd_grad=True),
        'sigmoid':  EasyDict(func=lambda x, **_:         torch.sigmoid(x),                           def_alpha=0,    def_gain=1,             cuda_idx=5, ref='y', has_2nd_grad=True),
        'elu':      EasyDict(func=lambda x, **_:         torch.nn.functional.elu(x),                 def_alpha=0,    def_gain=1,             cuda_idx=6, ref='y', has_2nd_grad=True),
        'selu':     EasyDict(func=lambda x, **_:         torch.nn.functional.selu(x),                def_alpha=0,    def_gain=1,             cuda_idx=7, ref='y', has_2nd_grad=True),
        'softplus': EasyDict(func=lambda x, **_:         torch.nn.functional.softplus(x),            def_alpha=0,    def_gain=1,             cuda_idx=8, ref='y', has_2nd_grad=True),
        'swish':    EasyDict(func=lambda x, **_:         torch.sigmoid(x) * x,                       def_alpha=0,    def_gain=np.sqrt(2),    cuda_idx=9, ref='x', has_2nd_grad=True),
    }

    def bias_act(x, b=None, dim=1, act='linear', alpha=None, gain=None, clamp=None, impl='cuda'):
        assert isinstance(x, torch.Tensor)
        assert impl in ['ref', 'cuda']
        return _bias_act_ref(x=x, b=b, dim=dim, act=act, alpha=alpha, gain=gain, clamp=clamp)

    @misc.profiled_function
    def _bias_act_ref(x, b=None, dim=1, act='linear', alpha=None, gain=None, clamp=None):
        """Slow reference implementation of `bias_act()` using standard TensorFlow ops.
        """
        assert isinstance(x, torch.Tensor)
        assert clamp is None or clamp >= 0
        spec = activation_funcs[act]
        alpha = float(alpha if alpha is not None else spec.def_alpha)
        gain = float(gain if gain is not None else spec.def_gain)
        clamp = float(clamp if clamp is not None else -1)

        # Add bias.
        if b is not None:
            assert isinstance(b, torch.Tensor) and b.ndim == 1
            assert 0 <= dim < x.ndim
            assert b.shape[0] == x.shape[dim]
            x = x + b.reshape([-1 if i == dim else 1 for i in range(x.ndim)])

        # Evaluate activation function.
        alpha = float(alpha)
        x = spec.func(x, alpha=alpha)

        # Scale by gain.
        gain = float(gain)
        if gain != 1:
            x = x * gain

        # Clamp.
        if clamp >= 0:
            x = x.clamp(-clamp, clamp) # pylint: disable=invalid-unary-operand-type
        return x

    bias_act_mod = SimpleNamespace(activation_funcs=activation_funcs, bias_act=bias_act, _bias_act_ref=_bias_act_ref)

    # ---- conv2d_resample.py
    def _get_weight_shape(w):
        with misc.suppress_tracer_warnings(): # this value will be treated as a constant
            shape = [int(sz) for sz in w.shape]
        misc.assert_shape(w, shape)
        return shape

    def _conv2d_wrapper(x, w, stride=1, padding=0, groups=1, transpose=False, flip_weight=True):
        """Wrapper for the underlying `conv2d()` and `conv_transpose2d()` implementations.
        """
        _out_channels, _in_channels_per_group, kh, kw = _get_weight_shape(w)

        # Flip weight if requested.
        # Note: conv2d() actually performs correlation (flip_weight=True) not convolution (flip_weight=False).
        if not flip_weight and (kw > 1 or kh > 1):
            w = w.flip([2, 3])

        # Execute using conv2d_gradfix.
        op = conv2d_gradfix.conv_transpose2d if transpose else conv2d_gradfix.conv2d
        return op(x, w, stride=stride, padding=padding, groups=groups)

    @misc.profiled_function
    def conv2d_resample(x, w, f=None, up=1, down=1, padding=0, groups=1, flip_weight=True, flip_filter=False):
        # Validate arguments.
        assert isinstance(x, torch.Tensor) and (x.ndim == 4)
        assert isinstance(w, torch.Tensor) and (w.ndim == 4) and (w.dtype == x.dtype)
        assert f is None or (isinstance(f, torch.Tensor) and f.ndim in [1, 2] and f.dtype == torch.float32)
        assert isinstance(up, int) and (up >= 1)
        assert isinstance(down, int) and (down >= 1)
        assert isinstance(groups, int) and (groups >= 1)
        out_channels, in_channels_per_group, kh, kw = _get_weight_shape(w)
        fw, fh = _get_filter_size(f)
        px0, px1, py0, py1 = _parse_padding(padding)

        # Adjust padding to account for up/downsampling.
        if up > 1:
            px0 += (fw + up - 1) // 2
            px1 += (fw - up) // 2
            py0 += (fh + up - 1) // 2
            py1 += (fh - up) // 2
        if down > 1:
            px0 += (fw - down + 1) // 2
            px1 += (fw - down) // 2
            py0 += (fh - down + 1) // 2
            py1 += (fh - down) // 2

        # Fast path: 1x1 convolution with downsampling only => downsample first, then convolve.
        if kw == 1 and kh == 1 and (down > 1 and up == 1):
            x = upfirdn2d(x=x, f=f, down=down, padding=[px0,px1,py0,py1], flip_filter=flip_filter)
            x = _conv2d_wrapper(x=x, w=w, groups=groups, flip_weight=flip_weight)
            return x

        # Fast path: 1x1 convolution with upsampling only => convolve first, then upsample.
        if kw == 1 and kh == 1 and (up > 1 and down == 1):
            x = _conv2d_wrapper(x=x, w=w, groups=groups, flip_weight=flip_weight)
            x = upfirdn2d(x=x, f=f, up=up, padding=[px0,px1,py0,py1], gain=up**2, flip_filter=flip_filter)
            return x

        # Fast path: downsampling only => use strided convolution.
        if down > 1 and up == 1:
            x = upfirdn2d(x=x, f=f, padding=[px0,px1,py0,py1], flip_filter=flip_filter)
            x = _conv2d_wrapper(x=x, w=w, stride=down, groups=groups, flip_weight=flip_weight)
            return x

        # Fast path: upsampling with optional downsampling => use transpose strided convolution.
        if up > 1:
            if groups == 1:
                w = w.transpose(0, 1)
            else:
                w = w.reshape(groups, out_channels // groups, in_channels_per_group, kh, kw)
                w = w.transpose(1, 2)
                w = w.reshape(groups * in_channels_per_group, out_channels // groups, kh, kw)
            px0 -= kw - 1
            px1 -= kw - up
            py0 -= kh - 1
            py1 -= kh - up
            pxt = max(min(-px0, -px1), 0)
            pyt = max(min(-py0, -py1), 0)
            x = _conv2d_wrapper(x=x, w=w, stride=up, padding=[pyt,pxt], groups=groups, transpose=True, flip_weight=(not flip_weight))
            x = upfirdn2d(x=x, f=f, padding=[px0+pxt,px1+pxt,py0+pyt,py1+pyt], gain=up**2, flip_filter=flip_filter)
            if down > 1:
                x = upfirdn2d(x=x, f=f, down=down, flip_filter=flip_filter)
            return x

        # Fast path: no up/downsampling, padding supported by the underlying implementation => use plain conv2d.
        if up == 1 and down == 1:
            if px0 == px1 and py0 == py1 and px0 >= 0 and py0 >= 0:
                return _conv2d_wrapper(x=x, w=w, padding=[py0,px0], groups=groups, flip_weight=flip_weight)

        # Fallback: Generic reference implementation.
        x = upfirdn2d(x=x, f=(f if up > 1 else None), up=up, padding=[px0,px1,py0,py1], gain=up**2, flip_filter=flip_filter)
        x = _conv2d_wrapper(x=x, w=w, groups=groups, flip_weight=flip_weight)
        if down > 1:
            x = upfirdn2d(x=x, f=f, down=down, flip_filter=flip_filter)
        return x

    conv2d_resample_mod = SimpleNamespace(conv2d_resample=conv2d_resample)

    # ---- fma.py
    def fma(a, b, c): # => a * b + c
        return _FusedMultiplyAdd.apply(a, b, c)

    class _FusedMultiplyAdd(torch.autograd.Function): # a * b + c
        @staticmethod
        def forward(ctx, a, b, c): # pylint: disable=arguments-differ
            out = torch.addcmul(c, a, b)
            ctx.save_for_backward(a, b)
            ctx.c_shape = c.shape
            return out

        @staticmethod
        def backward(ctx, dout): # pylint: disable=arguments-differ
            a, b = ctx.saved_tensors
            c_shape = ctx.c_shape
            da = None
            db = None
            dc = None

            if ctx.needs_input_grad[0]:
                da = _unbroadcast(dout * b, a.shape)

            if ctx.needs_input_grad[1]:
                db = _unbroadcast(dout * a, b.shape)

            if ctx.needs_input_grad[2]:
                dc = _unbroadcast(dout, c_shape)

            return da, db, dc

    def _unbroadcast(x, shape):
        extra_dims = x.ndim - len(shape)
        assert extra_dims >= 0
        dim = [i for i in range(x.ndim) if x.shape[i] > 1 and (i < extra_dims or shape[i - extra_dims] == 1)]
        if len(dim):
            x = x.sum(dim=dim, keepdim=True)
        if extra_dims:
            x = x.reshape(-1, *x.shape[extra_dims+1:])
        assert x.shape == shape
        return x

    fma_mod = SimpleNamespace(fma=fma)

    return SimpleNamespace(misc=misc, conv2d_gradfix=conv2d_gradfix, upfirdn2d=upfirdn2d_mod, bias_act=bias_act_mod,
                           conv2d_resample=conv2d_resample_mod, fma=fma_mod)


# --------------------------------------------------------------------------- training/networks.py

def networks_page(torch, ops):
    misc, upfirdn2d, bias_act, conv2d_resample, fma = ops.misc, ops.upfirdn2d, ops.bias_act, ops.conv2d_resample, ops.fma

    @misc.profiled_function
    def normalize_2nd_moment(x, dim=1, eps=1e-8):
        return x * (x.square().mean(dim=dim, keepdim=True) + eps).rsqrt()

    @misc.profiled_function
    def modulated_conv2d(
        x,                          # Input tensor of shape [batch_size, in_channels, in_height, in_width].
        weight,                     # Weight tensor of shape [out_channels, in_channels, kernel_height, kernel_width].
        styles,                     # Modulation coefficients of shape [batch_size, in_channels].
        noise           = None,     # Optional noise tensor to add to the output activations.
        up              = 1,        # Integer upsampling factor.
        down            = 1,        # Integer downsampling factor.
        padding         = 0,        # Padding with respect to the upsampled image.
        resample_filter = None,     # Low-pass filter to apply when resampling activations.
        demodulate      = True,     # Apply weight demodulation?
        flip_weight     = True,     # False = convolution, True = correlation (matches torch.nn.functional.conv2d).
        fused_modconv   = True,     # Perform modulation, convolution, and demodulation as a single fused operation?
    ):
        batch_size = x.shape[0]
        out_channels, in_channels, kh, kw = weight.shape
        misc.assert_shape(weight, [out_channels, in_channels, kh, kw]) # [OIkk]
        misc.assert_shape(x, [batch_size, in_channels, None, None]) # [NIHW]
        misc.assert_shape(styles, [batch_size, in_channels]) # [NI]

        # Pre-normalize inputs to avoid FP16 overflow.
        if x.dtype == torch.float16 and demodulate:
            weight = weight * (1 / np.sqrt(in_channels * kh * kw) / weight.norm(float('inf'), dim=[1,2,3], keepdim=True)) # max_Ikk
            styles = styles / styles.norm(float('inf'), dim=1, keepdim=True) # max_I

        # Calculate per-sample weights and demodulation coefficients.
        w = None
        dcoefs = None
        if demodulate or fused_modconv:
            w = weight.unsqueeze(0) # [NOIkk]
            w = w * styles.reshape(batch_size, 1, -1, 1, 1) # [NOIkk]
        if demodulate:
            dcoefs = (w.square().sum(dim=[2,3,4]) + 1e-8).rsqrt() # [NO]
        if demodulate and fused_modconv:
            w = w * dcoefs.reshape(batch_size, -1, 1, 1, 1) # [NOIkk]

        # Execute by scaling the activations before and after the convolution.
        if not fused_modconv:
            x = x * styles.to(x.dtype).reshape(batch_size, -1, 1, 1)
            x = conv2d_resample.conv2d_resample(x=x, w=weight.to(x.dtype), f=resample_filter, up=up, down=down, padding=padding, flip_weight=flip_weight)
            if demodulate and noise is not None:
                x = fma.fma(x, dcoefs.to(x.dtype).reshape(batch_size, -1, 1, 1), noise.to(x.dtype))
            elif demodulate:
                x = x * dcoefs.to(x.dtype).reshape(batch_size, -1, 1, 1)
            elif noise is not None:
                x = x.add_(noise.to(x.dtype))
            return x

        # Execute as one fused op using grouped convolution.
        with misc.suppress_tracer_warnings(): # this value will be treated as a constant
            batch_size = int(batch_size)
        misc.assert_shape(x, [batch_size, in_channels, None, None])
        x = x.reshape(1, -1, *x.shape[2:])
        w = w.reshape(-1, in_channels, kh, kw)
        x = conv2d_resample.conv2d_resample(x=x, w=w.to(x.dtype), f=resample_filter, up=up, down=down, padding=padding, groups=batch_size, flip_weight=flip_weight)
        x = x.reshape(batch_size, -1, *x.shape[2:])
        if noise is not None:
            x = x.add_(noise)
        return x

    class FullyConnectedLayer(torch.nn.Module):
        def __init__(self,
            in_features,                # Number of input features.
            out_features,               # Number of output features.
            bias            = True,     # Apply additive bias before the activation function?
            activation      = 'linear', # Activation function: 'relu', 'lrelu', etc.
            lr_multiplier   = 1,        # Learning rate multiplier.
            bias_init       = 0,        # Initial value for the additive bias.
        ):
            super().__init__()
            self.activation = activation
            self.weight = torch.nn.Parameter(torch.randn([out_features, in_features]) / lr_multiplier)
            self.bias = torch.nn.Parameter(torch.full([out_features], np.float32(bias_init))) if bias else None
            self.weight_gain = lr_multiplier / np.sqrt(in_features)
            self.bias_gain = lr_multiplier

        def forward(self, x):
            w = self.weight.to(x.dtype) * self.weight_gain
            b = self.bias
            if b is not None:
                b = b.to(x.dtype)
                if self.bias_gain != 1:
                    b = b * self.bias_gain

            if self.activation == 'linear' and b is not None:
                x = torch.addmm(b.unsqueeze(0), x, w.t())
            else:
                x = x.matmul(w.t())
                x = bias_act.bias_act(x, b, act=self.activation)
            return x

    class Conv2dLayer(torch.nn.Module):
        def __init__(self,
            in_channels,                    # Number of input channels.
            out_channels,                   # Number of output channels.
            kernel_size,                    # Width and height of the convolution kernel.
            bias            = True,         # Apply additive bias before the activation function?
            activation      = 'linear',     # Activation function: 'relu', 'lrelu', etc.
            up              = 1,            # Integer upsampling factor.
            down            = 1,            # Integer downsampling factor.
            resample_filter = [1,3,3,1],    # Low-pass filter to apply when resampling activations.
            conv_clamp      = None,         # Clamp the output to +-X, None = disable clamping.
            channels_last   = False,        # Expect the input to have memory_format=channels_last?
            trainable       = True,         # Update the weights of this layer during training?
        ):
            super().__init__()
            self.activation = activation
            self.up = up
            self.down = down
            self.conv_clamp = conv_clamp
            self.register_buffer('resample_filter', upfirdn2d.setup_filter(resample_filter))
            self.padding = kernel_size // 2
            self.weight_gain = 1 / np.sqrt(in_channels * (kernel_size ** 2))
            self.act_gain = bias_act.activation_funcs[activation].def_gain

            memory_format = torch.channels_last if channels_last else torch.contiguous_format
            weight = torch.randn([out_channels, in_channels, kernel_size, kernel_size]).to(memory_format=memory_format)
            bias = torch.zeros([out_channels]) if bias else None
            if trainable:
                self.weight = torch.nn.Parameter(weight)
                self.bias = torch.nn.Parameter(bias) if bias is not None else None
            else:
                self.register_buffer('weight', weight)
                if bias is not None:
                    self.register_buffer('bias', bias)
                else:
                    self.bias = None

        def forward(self, x, gain=1):
            w = self.weight * self.weight_gain
            b = self.bias.to(x.dtype) if self.bias is not None else None
            flip_weight = (self.up == 1) # slightly faster
            x = conv2d_resample.conv2d_resample(x=x, w=w.to(x.dtype), f=self.resample_filter, up=self.up, down=self.down, padding=self.padding, flip_weight=flip_weight)

            act_gain = self.act_gain * gain
            act_clamp = self.conv_clamp * gain if self.conv_clamp is not None else None
            x = bias_act.bias_act(x, b, act=self.activation, gain=act_gain, clamp=act_clamp)
            return x

    class MappingNetwork(torch.nn.Module):
        def __init__(self,
            z_dim,                      # Input latent (Z) dimensionality, 0 = no latent.
            c_dim,                      # Conditioning label (C) dimensionality, 0 = no label.
            w_dim,                      # Intermediate latent (W) dimensionality.
            num_ws,                     # Number of intermediate latents to output, None = do not broadcast.
            num_layers      = 8,        # Number of mapping layers.
            embed_features  = None,     # Label embedding dimensionality, None = same as w_dim.
            layer_features  = None,     # Number of intermediate features in the mapping layers, None = same as w_dim.
            activation      = 'lrelu',  # Activation function: 'relu', 'lrelu', etc.
            lr_multiplier   = 0.01,     # Learning rate multiplier for the mapping layers.
            w_avg_beta      = 0.995,    # Decay for tracking the moving average of W during training, None = do not track.
        ):
            super().__init__()
            self.z_dim = z_dim
            self.c_dim = c_dim
            self.w_dim = w_dim
            self.num_ws = num_ws
            self.num_layers = num_layers
            self.w_avg_beta = w_avg_beta

            if embed_features is None:
                embed_features = w_dim
            if c_dim == 0:
                embed_features = 0
            if layer_features is None:
                layer_features = w_dim
            features_list = [z_dim + embed_features] + [layer_features] * (num_layers - 1) + [w_dim]

            if c_dim > 0:
                self.embed = FullyConnectedLayer(c_dim, embed_features)
            for idx in range(num_layers):
                in_features = features_list[idx]
                out_features = features_list[idx + 1]
                layer = FullyConnectedLayer(in_features, out_features, activation=activation, lr_multiplier=lr_multiplier)
                setattr(self, f'fc{idx}', layer)

            if num_ws is not None and w_avg_beta is not None:
                self.register_buffer('w_avg', torch.zeros([w_dim]))

        def forward(self, z, c, truncation_psi=1, truncation_cutoff=None, skip_w_avg_update=False):
            # Embed, normalize, and concat inputs.
            x = None
            with torch.autograd.profiler.record_function('input'):
                if self.z_dim > 0:
                    misc.assert_shape(z, [None, self.z_dim])
                    x = normalize_2nd_moment(z.to(torch.float32))
                if self.c_dim > 0:
                    misc.assert_shape(c, [None, self.c_dim])
                    y = normalize_2nd_moment(self.embed(c.to(torch.float32)))
                    x = torch.cat([x, y], dim=1) if x is not None else y

            # Main layers.
            for idx in range(self.num_layers):
                layer = getattr(self, f'fc{idx}')
                x = layer(x)

            # Update moving average of W.
            if self.w_avg_beta is not None and self.training and not skip_w_avg_update:
                with torch.autograd.profiler.record_function('update_w_avg'):
                    self.w_avg.copy_(x.detach().mean(dim=0).lerp(self.w_avg, self.w_avg_beta))

            # Broadcast.
            if self.num_ws is not None:
                with torch.autograd.profiler.record_function('broadcast'):
                    x = x.unsqueeze(1).repeat([1, self.num_ws, 1])

            # Apply truncation.
            if truncation_psi != 1:
                with torch.autograd.profiler.record_function('truncate'):
                    assert self.w_avg_beta is not None
                    if self.num_ws is None or truncation_cutoff is None:
                        x = self.w_avg.lerp(x, truncation_psi)
                    else:
                        x[:, :truncation_cutoff] = self.w_avg.lerp(x[:, :truncation_cutoff], truncation_psi)
            return x

    class SynthesisLayer(torch.nn.Module):
        def __init__(self,
            in_channels,                    # Number of input channels.
            out_channels,                   # Number of output channels.
            w_dim,                          # Intermediate latent (W) dimensionality.
            resolution,                     # Resolution of this layer.
            kernel_size     = 3,            # Convolution kernel size.
            up              = 1,            # Integer upsampling factor.
            use_noise       = True,         # Enable noise input?
            activation      = 'lrelu',      # Activation function: 'relu', 'lrelu', etc.
            resample_filter = [1,3,3,1],    # Low-pass filter to apply when resampling activations.
            conv_clamp      = None,         # Clamp the output of convolution layers to +-X, None = disable clamping.
            channels_last   = False,        # Use channels_last format for the weights?
        ):
            super().__init__()
            self.resolution = resolution
            self.up = up
            self.use_noise = use_noise
            self.activation = activation
            self.conv_clamp = conv_clamp
            self.register_buffer('resample_filter', upfirdn2d.setup_filter(resample_filter))
            self.padding = kernel_size // 2
            self.act_gain = bias_act.activation_funcs[activation].def_gain

            self.affine = FullyConnectedLayer(w_dim, in_channels, bias_init=1)
            memory_format = torch.channels_last if channels_last else torch.contiguous_format
            self.weight = torch.nn.Parameter(torch.randn([out_channels, in_channels, kernel_size, kernel_size]).to(memory_format=memory_format))
            if use_noise:
                self.register_buffer('noise_const', torch.randn([resolution, resolution]))
                self.noise_strength = torch.nn.Parameter(torch.zeros([]))
            self.bias = torch.nn.Parameter(torch.zeros([out_channels]))

        def forward(self, x, w, noise_mode='random', fused_modconv=True, gain=1):
            assert noise_mode in ['random', 'const', 'none']
            in_resolution = self.resolution // self.up
            misc.assert_shape(x, [None, self.weight.shape[1], in_resolution, in_resolution])
            styles = self.affine(w)

            noise = None
            if self.use_noise and noise_mode == 'random':
                noise = torch.randn([x.shape[0], 1, self.resolution, self.resolution], device=x.device) * self.noise_strength
            if self.use_noise and noise_mode == 'const':
                noise = self.noise_const * self.noise_strength

            flip_weight = (self.up == 1) # slightly faster
            x = modulated_conv2d(x=x, weight=self.weight, styles=styles, noise=noise, up=self.up,
                padding=self.padding, resample_filter=self.resample_filter, flip_weight=flip_weight, fused_modconv=fused_modconv)

            act_gain = self.act_gain * gain
            act_clamp = self.conv_clamp * gain if self.conv_clamp is not None else None
            x = bias_act.bias_act(x, self.bias.to(x.dtype), act=self.activation, gain=act_gain, clamp=act_clamp)
            return x

    class ToRGBLayer(torch.nn.Module):
        def __init__(self, in_channels, out_channels, w_dim, kernel_size=1, conv_clamp=None, channels_last=False):
            super().__init__()
            self.conv_clamp = conv_clamp
            self.affine = FullyConnectedLayer(w_dim, in_channels, bias_init=1)
            memory_format = torch.channels_last if channels_last else torch.contiguous_format
            self.weight = torch.nn.Parameter(torch.randn([out_channels, in_channels, kernel_size, kernel_size]).to(memory_format=memory_format))
            self.bias = torch.nn.Parameter(torch.zeros([out_channels]))
            self.weight_gain = 1 / np.sqrt(in_channels * (kernel_size ** 2))

        def forward(self, x, w, fused_modconv=True):
            styles = self.affine(w) * self.weight_gain
            x = modulated_conv2d(x=x, weight=self.weight, styles=styles, demodulate=False, fused_modconv=fused_modconv)
            x = bias_act.bias_act(x, self.bias.to(x.dtype), clamp=self.conv_clamp)
            return x

    class SynthesisBlock(torch.nn.Module):
        def __init__(self,
            in_channels,                        # Number of input channels, 0 = first block.
            out_channels,                       # Number of output channels.
            w_dim,                              # Intermediate latent (W) dimensionality.
            resolution,                         # Resolution of this block.
            img_channels,                       # Number of output color channels.
            is_last,                            # Is this the last block?
            architecture        = 'skip',       # Architecture: 'orig', 'skip', 'resnet'.
            resample_filter     = [1,3,3,1],    # Low-pass filter to apply when resampling activations.
            conv_clamp          = None,         # Clamp the output of convolution layers to +-X, None = disable clamping.
            use_fp16            = False,        # Use FP16 for this block?
            fp16_channels_last  = False,        # Use channels-last memory format with FP16?
            **layer_kwargs,                     # Arguments for SynthesisLayer.
        ):
            assert architecture in ['orig', 'skip', 'resnet']
            super().__init__()
            self.in_channels = in_channels
            self.w_dim = w_dim
            self.resolution = resolution
            self.img_channels = img_channels
            self.is_last = is_last
            self.architecture = architecture
            self.use_fp16 = use_fp16
            self.channels_last = (use_fp16 and fp16_channels_last)
            self.register_buffer('resample_filter', upfirdn2d.setup_filter(resample_filter))
            self.num_conv = 0
            self.num_torgb = 0

            if in_channels == 0:
                self.const = torch.nn.Parameter(torch.randn([out_channels, resolution, resolution]))

            if in_channels != 0:
                self.conv0 = SynthesisLayer(in_channels, out_channels, w_dim=w_dim, resolution=resolution, up=2,
                    resample_filter=resample_filter, conv_clamp=conv_clamp, channels_last=self.channels_last, **layer_kwargs)
                self.num_conv += 1

            self.conv1 = SynthesisLayer(out_channels, out_channels, w_dim=w_dim, resolution=resolution,
                conv_clamp=conv_clamp, channels_last=self.channels_last, **layer_kwargs)
            self.num_conv += 1

            if is_last or architecture == 'skip':
                self.torgb = ToRGBLayer(out_channels, img_channels, w_dim=w_dim,
                    conv_clamp=conv_clamp, channels_last=self.channels_last)
                self.num_torgb += 1

            if in_channels != 0 and architecture == 'resnet':
                self.skip = Conv2dLayer(in_channels, out_channels, kernel_size=1, bias=False, up=2,
                    resample_filter=resample_filter, channels_last=self.channels_last)

        def forward(self, x, img, ws, force_fp32=False, fused_modconv=None, **layer_kwargs):
            misc.assert_shape(ws, [None, self.num_conv + self.num_torgb, self.w_dim])
            w_iter = iter(ws.unbind(dim=1))
            dtype = torch.float16 if self.use_fp16 and not force_fp32 else torch.float32
            memory_format = torch.channels_last if self.channels_last and not force_fp32 else torch.contiguous_format
            if fused_modconv is None:
                with misc.suppress_tracer_warnings(): # this value will be treated as a constant
                    fused_modconv = (not self.training) and (dtype == torch.float32 or int(x.shape[0]) == 1)

            # Input.
            if self.in_channels == 0:
                x = self.const.to(dtype=dtype, memory_format=memory_format)
                x = x.unsqueeze(0).repeat([ws.shape[0], 1, 1, 1])
            else:
                misc.assert_shape(x, [None, self.in_channels, self.resolution // 2, self.resolution // 2])
                x = x.to(dtype=dtype, memory_format=memory_format)

            # Main layers.
            if self.in_channels == 0:
                x = self.conv1(x, next(w_iter), fused_modconv=fused_modconv, **layer_kwargs)
            elif self.architecture == 'resnet':
                y = self.skip(x, gain=np.sqrt(0.5))
                x = self.conv0(x, next(w_iter), fused_modconv=fused_modconv, **layer_kwargs)
                x = self.conv1(x, next(w_iter), fused_modconv=fused_modconv, gain=np.sqrt(0.5), **layer_kwargs)
                x = y.add_(x)
            else:
                x = self.conv0(x, next(w_iter), fused_modconv=fused_modconv, **layer_kwargs)
                x = self.conv1(x, next(w_iter), fused_modconv=fused_modconv, **layer_kwargs)

            # ToRGB.
            if img is not None:
                misc.assert_shape(img, [None, self.img_channels, self.resolution // 2, self.resolution // 2])
                img = upfirdn2d.upsample2d(img, self.resample_filter)
            if self.is_last or self.architecture == 'skip':
                y = self.torgb(x, next(w_iter), fused_modconv=fused_modconv)
                y = y.to(dtype=torch.float32, memory_format=torch.contiguous_format)
                img = img.add_(y) if img is not None else y

            assert x.dtype == dtype
            assert img is None or img.dtype == torch.float32
            return x, img

    return SimpleNamespace(normalize_2nd_moment=normalize_2nd_moment, modulated_conv2d=modulated_conv2d,
                           FullyConnectedLayer=FullyConnectedLayer, Conv2dLayer=Conv2dLayer, MappingNetwork=MappingNetwork,
                           SynthesisLayer=SynthesisLayer, ToRGBLayer=ToRGBLayer, SynthesisBlock=SynthesisBlock)


# --------------------------------------------------------------------------- training/loss.py

def loss_page(torch, ops):
    misc, conv2d_gradfix = ops.misc, ops.conv2d_gradfix
    training_stats = SimpleNamespace(report=lambda name, value: None)

    class Loss:
        def accumulate_gradients(self, phase, real_img, real_c, gen_z, gen_c, sync, gain): # to be overridden by subclass
            raise NotImplementedError()

    class StyleGAN2Loss(Loss):
        def __init__(self, device, G_mapping, G_synthesis, D, augment_pipe=None, style_mixing_prob=0.9, r1_gamma=10, pl_batch_shrink=2, pl_decay=0.01, pl_weight=2):
            super().__init__()
            self.device = device
            self.G_mapping = G_mapping
            self.G_synthesis = G_synthesis
            self.D = D
            self.augment_pipe = augment_pipe
            self.style_mixing_prob = style_mixing_prob
            self.r1_gamma = r1_gamma
            self.pl_batch_shrink = pl_batch_shrink
            self.pl_decay = pl_decay
            self.pl_weight = pl_weight
            self.pl_mean = torch.zeros([], device=device)

        def run_G(self, z, c, sync):
            with misc.ddp_sync(self.G_mapping, sync):
                ws = self.G_mapping(z, c)
                if self.style_mixing_prob > 0:
                    with torch.autograd.profiler.record_function('style_mixing'):
                        cutoff = torch.empty([], dtype=torch.int64, device=ws.device).random_(1, ws.shape[1])
                        cutoff = torch.where(torch.rand([], device=ws.device) < self.style_mixing_prob, cutoff, torch.full_like(cutoff, ws.shape[1]))
                        ws[:, cutoff:] = self.G_mapping(torch.randn_like(z), c, skip_w_avg_update=True)[:, cutoff:]
            with misc.ddp_sync(self.G_synthesis, sync):
                img = self.G_synthesis(ws)
            return img, ws

        def run_D(self, img, c, sync):
            if self.augment_pipe is not None:
                img = self.augment_pipe(img)
            with misc.ddp_sync(self.D, sync):
                logits = self.D(img, c)
            return logits

        def accumulate_gradients(self, phase, real_img, real_c, gen_z, gen_c, sync, gain):
            assert phase in ['Gmain', 'Greg', 'Gboth', 'Dmain', 'Dreg', 'Dboth']
            do_Gmain = (phase in ['Gmain', 'Gboth'])
            do_Dmain = (phase in ['Dmain', 'Dboth'])
            do_Gpl   = (phase in ['Greg', 'Gboth']) and (self.pl_weight != 0)
            do_Dr1   = (phase in ['Dreg', 'Dboth']) and (self.r1_gamma != 0)

            # Gmain: Maximize logits for generated images.
            if do_Gmain:
                with torch.autograd.profiler.record_function('Gmain_forward'):
                    gen_img, _gen_ws = self.run_G(gen_z, gen_c, sync=(sync and not do_Gpl)) # May get synced by Gpl.
                    gen_logits = self.run_D(gen_img, gen_c, sync=False)
                    training_stats.report('Loss/scores/fake', gen_logits)
                    training_stats.report('Loss/signs/fake', gen_logits.sign())
                    loss_Gmain = torch.nn.functional.softplus(-gen_logits) # -log(sigmoid(gen_logits))
                    training_stats.report('Loss/G/loss', loss_Gmain)
                with torch.autograd.profiler.record_function('Gmain_backward'):
                    loss_Gmain.mean().mul(gain).backward()

            # Gpl: Apply path length regularization.
            if do_Gpl:
                with torch.autograd.profiler.record_function('Gpl_forward'):
                    batch_size = gen_z.shape[0] // self.pl_batch_shrink
                    gen_img, gen_ws = self.run_G(gen_z[:batch_size], gen_c[:batch_size], sync=sync)
                    pl_noise = torch.randn_like(gen_img) / np.sqrt(gen_img.shape[2] * gen_img.shape[3])
                    with torch.autograd.profiler.record_function('pl_grads'), conv2d_gradfix.no_weight_gradients():
                        pl_grads = torch.autograd.grad(outputs=[(gen_img * pl_noise).sum()], inputs=[gen_ws], create_graph=True, only_inputs=True)[0]
                    pl_lengths = pl_grads.square().sum(2).mean(1).sqrt()
                    pl_mean = self.pl_mean.lerp(pl_lengths.mean(), self.pl_decay)
                    self.pl_mean.copy_(pl_mean.detach())
                    pl_penalty = (pl_lengths - pl_mean).square()
                    training_stats.report('Loss/pl_penalty', pl_penalty)
                    loss_Gpl = pl_penalty * self.pl_weight
                    training_stats.report('Loss/G/reg', loss_Gpl)
                with torch.autograd.profiler.record_function('Gpl_backward'):
                    (gen_img[:, 0, 0, 0] * 0 + loss_Gpl).mean().mul(gain).backward()

            # Dmain: Minimize logits for generated images.
            loss_Dgen = 0
            if do_Dmain:
                with torch.autograd.profiler.record_function('Dgen_forward'):
                    gen_img, _gen_ws = self.run_G(gen_z, gen_c, sync=False)
                    gen_logits = self.run_D(gen_img, gen_c, sync=False) # Gets synced by loss_Dreal.
                    training_stats.report('Loss/scores/fake', gen_logits)
                    training_stats.report('Loss/signs/fake', gen_logits.sign())
                    loss_Dgen = torch.nn.functional.softplus(gen_logits) # -log(1 - sigmoid(gen_logits))
                with torch.autograd.profiler.record_function('Dgen_backward'):
                    loss_Dgen.mean().mul(gain).backward()

            # Dmain: Maximize logits for real images.
            # Dr1: Apply R1 regularization.
            if do_Dmain or do_Dr1:
                name = 'Dreal_Dr1' if do_Dmain and do_Dr1 else 'Dreal' if do_Dmain else 'Dr1'
                with torch.autograd.profiler.record_function(name + '_forward'):
                    real_img_tmp = real_img.detach().requires_grad_(do_Dr1)
                    real_logits = self.run_D(real_img_tmp, real_c, sync=sync)
                    training_stats.report('Loss/scores/real', real_logits)
                    training_stats.report('Loss/signs/real', real_logits.sign())

                    loss_Dreal = 0
                    if do_Dmain:
                        loss_Dreal = torch.nn.functional.softplus(-real_logits) # -log(sigmoid(real_logits))
                        training_stats.report('Loss/D/loss', loss_Dgen + loss_Dreal)

                    loss_Dr1 = 0
                    if do_Dr1:
                        with torch.autograd.profiler.record_function('r1_grads'), conv2d_gradfix.no_weight_gradients():
                            r1_grads = torch.autograd.grad(outputs=[real_logits.sum()], inputs=[real_img_tmp], create_graph=True, only_inputs=True)[0]
                        r1_penalty = r1_grads.square().sum([1,2,3])
                        loss_Dr1 = r1_penalty * (self.r1_gamma / 2)
                        training_stats.report('Loss/r1_penalty', r1_penalty)
                        training_stats.report('Loss/D/reg', loss_Dr1)

                with torch.autograd.profiler.record_function(name + '_backward'):
                    (real_logits * 0 + loss_Dreal + loss_Dr1).mean().mul(gain).backward()

    return SimpleNamespace(StyleGAN2Loss=StyleGAN2Loss)


# --------------------------------------------------------------------------- NumPy references

def np_upfirdn2d(x, f, up=1, down=1, padding=(0, 0, 0, 0), flip_filter=False, gain=1.0):
    """Zero insertion, pad/crop, true 2-D convolution with ``f`` (correlation if ``flip_filter``), decimation."""
    x = np.asarray(x, np.float64)
    f = np.asarray(f, np.float64)
    if f.ndim == 1:
        f = np.outer(f, f)
    n, c, h, w = x.shape
    y = np.zeros((n, c, h * up, w * up))
    y[:, :, ::up, ::up] = x
    px0, px1, py0, py1 = padding
    y = np.pad(y, ((0, 0), (0, 0), (max(py0, 0), max(py1, 0)), (max(px0, 0), max(px1, 0))))
    y = y[:, :, max(-py0, 0): y.shape[2] - max(-py1, 0), max(-px0, 0): y.shape[3] - max(-px1, 0)]
    k = f if flip_filter else f[::-1, ::-1]
    win = np.lib.stride_tricks.sliding_window_view(y, k.shape, axis=(2, 3))
    out = np.einsum('nchwab,ab->nchw', win, k) * gain
    return out[:, :, ::down, ::down]


def np_conv2d(x, w, padding=0):
    """Cross-correlation like ``F.conv2d`` (groups=1)."""
    x = np.pad(np.asarray(x, np.float64), ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    win = np.lib.stride_tricks.sliding_window_view(x, w.shape[2:], axis=(2, 3))
    return np.einsum('nihwab,oiab->nohw', win, np.asarray(w, np.float64))


def np_conv2d_resample(x, w, f, up=1, down=1, padding=0, flip_weight=True):
    """The generic definition: up-FIR (gain up**2) with the padding, convolution, then FIR-down."""
    f = np.asarray(f, np.float64)
    fh = f.shape[0] if f is not None else 1
    p = [padding] * 4
    if up > 1:
        p = [p[0] + (fh + up - 1) // 2, p[1] + (fh - up) // 2, p[2] + (fh + up - 1) // 2, p[3] + (fh - up) // 2]
    if down > 1:
        p = [p[0] + (fh - down + 1) // 2, p[1] + (fh - down) // 2, p[2] + (fh - down + 1) // 2, p[3] + (fh - down) // 2]
    x = np_upfirdn2d(x, f if up > 1 else np.ones((1, 1)), up=up, padding=p, gain=up ** 2)
    if not flip_weight:
        w = w[:, :, ::-1, ::-1]
    x = np_conv2d(x, w)
    if down > 1:
        x = np_upfirdn2d(x, f, down=down)
    return x


def _lrelu(x, a=0.2):
    return np.where(x >= 0, x, a * x)


def _sig(x):
    return 1 / (1 + np.exp(-x))


NP_ACTS = {
    'linear': (lambda x, a: x, 1.0),
    'relu': (lambda x, a: np.maximum(x, 0), math.sqrt(2)),
    'lrelu': (lambda x, a: _lrelu(x, a), math.sqrt(2)),
    'tanh': (lambda x, a: np.tanh(x), 1.0),
    'sigmoid': (lambda x, a: _sig(x), 1.0),
    'elu': (lambda x, a: np.where(x > 0, x, np.expm1(np.minimum(x, 0))), 1.0),
    'selu': (lambda x, a: 1.0507009873554805 * np.where(x > 0, x, 1.6732632423543772 * np.expm1(np.minimum(x, 0))), 1.0),
    'softplus': (lambda x, a: np.log1p(np.exp(x)), 1.0),
    'swish': (lambda x, a: x * _sig(x), math.sqrt(2)),
}


def _fill_params(torch, module, seed, scale=0.5, dtype=None):
    """Overwrite every parameter and ``noise_const`` buffer with seeded NumPy values (both libraries alike)."""
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for name, p in sorted(module.named_parameters()):
            v = rng.standard_normal(tuple(p.shape)) * scale
            if name.endswith('affine.bias'):
                v = 1 + 0.2 * v
            p.copy_(torch.as_tensor(v.astype(np.float32)))
        for name, b in sorted(module.named_buffers()):
            if name.endswith('noise_const'):
                b.copy_(torch.as_tensor(rng.standard_normal(tuple(b.shape)).astype(np.float32)))
    if dtype is not None:  # like ``module.to(dtype)`` but the FIR filters stay float32 (upfirdn2d asserts it)
        for p in module.parameters():
            p.data = p.data.to(dtype)
        for name, b in module.named_buffers():
            if name.endswith('noise_const'):
                b.data = b.data.to(dtype)
    return module


def _dev(torch):
    return torch.empty(0).device


# --------------------------------------------------------------------------- pages run by tests

def ops_checks_page(torch):
    ops = ops_page(torch)
    dev = _dev(torch)
    rng = np.random.default_rng(0)
    out = {}
    x_np = rng.standard_normal((2, 3, 5, 6)).astype(np.float32)
    x = torch.as_tensor(x_np, device=dev)
    f2 = ops.upfirdn2d.setup_filter(rng.standard_normal((3, 4)).astype(np.float32), device=dev, normalize=False)
    fsep = ops.upfirdn2d.setup_filter([1, 2, 3, 4, 4, 3, 2, 1], device=dev, gain=2.0)
    f4 = ops.upfirdn2d.setup_filter([1, 3, 3, 1], device=dev)
    out['filters'] = {'f2': _np(f2), 'fsep': _np(fsep), 'f4': _np(f4)}
    cases = [('f2', dict(up=2, down=1, padding=[1, 2, 0, 1])), ('f2', dict(up=1, down=2, padding=[-1, 2, 1, -1], flip_filter=True)),
             ('fsep', dict(up=2, down=3, padding=3, gain=0.5)), ('f4', dict(up=[2, 1], down=[1, 2], padding=[2, 1]))]
    for i, (fname, kw) in enumerate(cases):
        f = {'f2': f2, 'fsep': fsep, 'f4': f4}[fname]
        out[f'upfirdn{i}'] = _np(ops.upfirdn2d._upfirdn2d_ref(x, f, **kw))
    out['up2'] = _np(ops.upfirdn2d.upsample2d(x, f4))
    out['down2'] = _np(ops.upfirdn2d.downsample2d(x, f4))
    out['filt'] = _np(ops.upfirdn2d.filter2d(x, f4))

    xb = torch.as_tensor(rng.standard_normal((2, 3, 4)).astype(np.float32) * 2, device=dev)
    bb = torch.as_tensor(rng.standard_normal(3).astype(np.float32), device=dev)
    for act in ops.bias_act.activation_funcs:
        out[f'act_{act}'] = _np(ops.bias_act._bias_act_ref(xb, bb, dim=1, act=act))
    out['act_lrelu_clamp'] = _np(ops.bias_act._bias_act_ref(xb, bb, dim=1, act='lrelu', alpha=0.1, gain=3.0, clamp=1.5))
    out['act_dim2'] = _np(ops.bias_act._bias_act_ref(xb, torch.as_tensor(np.arange(4, dtype=np.float32), device=dev), dim=2, act='tanh'))

    w_np = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    w = torch.as_tensor(w_np, device=dev)
    w1 = torch.as_tensor(rng.standard_normal((4, 3, 1, 1)).astype(np.float32), device=dev)
    for name, ww, kw in [('plain', w, dict(padding=1)), ('up', w, dict(up=2, padding=1, flip_weight=False)),
                         ('down', w, dict(down=2, padding=1)), ('updown', w, dict(up=2, down=2, padding=1)),
                         ('up1x1', w1, dict(up=2)), ('down1x1', w1, dict(down=2)), ('fallback', w, dict(padding=[1, 0, 2, 1]))]:
        out[f'cr_{name}'] = _np(ops.conv2d_resample.conv2d_resample(x=x, w=ww, f=f4, **kw))

    # fma forward/backward with broadcasting
    a = torch.as_tensor(rng.standard_normal((2, 3, 1, 1)).astype(np.float32), device=dev).requires_grad_(True)
    b = torch.as_tensor(rng.standard_normal((2, 3, 5, 6)).astype(np.float32), device=dev).requires_grad_(True)
    c = torch.as_tensor(rng.standard_normal((5, 6)).astype(np.float32), device=dev).requires_grad_(True)
    y = ops.fma.fma(a, b, c)
    (y * y).sum().backward()
    out['fma'] = (_np(y), _np(a.grad), _np(b.grad), _np(c.grad), _np(a), _np(b), _np(c))

    # misc
    k1 = ops.misc.constant([1.0, 2.0], shape=[3, 2], device=dev)
    k2 = ops.misc.constant([1.0, 2.0], shape=[3, 2], device=dev)
    out['constant'] = (_np(k1), k1 is k2)
    ops.misc.assert_shape(x, [2, None, 5, 6])
    errs = []
    for ref in ([2, 3, 5], [2, 3, 5, 7]):
        try:
            ops.misc.assert_shape(x, ref)
        except AssertionError as e:
            errs.append(str(e))
    out['assert_shape'] = errs
    out['x'] = x_np
    out['w'] = w_np
    return out


def test_upfirdn2d_bias_act_conv2d_resample_against_numpy():
    out = ops_checks_page(lucid)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 5, 6)).astype(np.float32)
    fr = rng.standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose(out['filters']['f2'], fr, rtol=1e-6)
    t = np.array([1, 2, 3, 4, 4, 3, 2, 1.0])
    np.testing.assert_allclose(out['filters']['fsep'], t / t.sum() * math.sqrt(2.0), rtol=1e-6)  # separable: gain**(1/2)
    k = np.outer([1, 3, 3, 1], [1, 3, 3, 1]) / 64.0
    np.testing.assert_allclose(out['filters']['f4'], k, rtol=1e-6)
    f2 = out['filters']['f2']
    fsep = out['filters']['fsep']
    exp = [np_upfirdn2d(x, f2, up=2, padding=(1, 2, 0, 1)),
           np_upfirdn2d(x, f2, down=2, padding=(-1, 2, 1, -1), flip_filter=True),
           np_upfirdn2d(x, fsep, up=2, down=3, padding=(3, 3, 3, 3), gain=0.5)]
    for i, e in enumerate(exp):
        assert out[f'upfirdn{i}'].shape == e.shape
        np.testing.assert_allclose(out[f'upfirdn{i}'], e, rtol=1e-4, atol=1e-5)
    # anisotropic up=[2,1], down=[1,2] (x first): by hand
    y = np.zeros((2, 3, 5, 12))
    y[..., ::2] = x
    y = np.pad(y, ((0, 0), (0, 0), (1, 1), (2, 2)))
    win = np.lib.stride_tricks.sliding_window_view(y, (4, 4), axis=(2, 3))
    e3 = np.einsum('nchwab,ab->nchw', win, k[::-1, ::-1])[:, :, ::2, :]
    np.testing.assert_allclose(out['upfirdn3'], e3, rtol=1e-4, atol=1e-5)
    # helpers: shapes multiply/divide and DC is preserved (4*mean of zero-inserted = mean)
    np.testing.assert_allclose(out['up2'], np_upfirdn2d(x, k, up=2, padding=(2, 1, 2, 1), gain=4), rtol=1e-4, atol=1e-5)
    assert out['up2'].shape == (2, 3, 10, 12) and out['down2'].shape == (2, 3, 2, 3) and out['filt'].shape == x.shape
    np.testing.assert_allclose(out['down2'], np_upfirdn2d(x, k, down=2, padding=(1, 1, 1, 1)), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out['filt'], np_upfirdn2d(x, k, padding=(2, 1, 2, 1)), rtol=1e-4, atol=1e-5)

    xb = rng.standard_normal((2, 3, 4)).astype(np.float64) * 2
    bb = rng.standard_normal(3)
    for act, (fn, g) in NP_ACTS.items():
        a = 0.2 if act == 'lrelu' else 0.0
        np.testing.assert_allclose(out[f'act_{act}'], fn(xb + bb[None, :, None], a) * g, rtol=1e-5, atol=1e-6, err_msg=act)
    np.testing.assert_allclose(out['act_lrelu_clamp'], np.clip(_lrelu(xb + bb[None, :, None], 0.1) * 3, -1.5, 1.5), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out['act_dim2'], np.tanh(xb + np.arange(4.0)), rtol=1e-5, atol=1e-6)

    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    np.testing.assert_array_equal(out['w'], w)
    w1 = rng.standard_normal((4, 3, 1, 1)).astype(np.float32)
    for name, ww, kw in [('plain', w, dict(padding=1)), ('up', w, dict(up=2, padding=1, flip_weight=False)),
                         ('down', w, dict(down=2, padding=1)), ('updown', w, dict(up=2, down=2, padding=1)),
                         ('up1x1', w1, dict(up=2)), ('down1x1', w1, dict(down=2))]:
        e = np_conv2d_resample(x, ww, k, **kw)
        assert out[f'cr_{name}'].shape == e.shape, name
        np.testing.assert_allclose(out[f'cr_{name}'], e, rtol=1e-4, atol=1e-4, err_msg=name)
    xp = np.pad(x, ((0, 0), (0, 0), (2, 1), (1, 0)))
    np.testing.assert_allclose(out['cr_fallback'], np_conv2d(xp, w), rtol=1e-4, atol=1e-4)

    y, ga, gb, gc, a, b, c = out['fma']
    np.testing.assert_allclose(y, a * b + c, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ga, (2 * y * b).sum((2, 3), keepdims=True), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(gb, 2 * y * a, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gc, (2 * y).sum(0).sum(0), rtol=1e-5, atol=1e-5)

    kc, same = out['constant']
    assert same and kc.tolist() == [[1.0, 2.0]] * 3
    assert out['assert_shape'] == ['Wrong number of dimensions: got 4, expected 3', 'Wrong size for dimension 3: got 6, expected 7']


def test_ops_torch_parity():
    torch = pytest.importorskip("torch")
    a = ops_checks_page(lucid)
    b = ops_checks_page(torch)
    for key in a:
        if key in ('filters', 'fma', 'constant', 'assert_shape'):
            continue
        np.testing.assert_allclose(a[key], b[key], rtol=1e-5, atol=1e-5, err_msg=key)
    for u, v in zip(a['fma'], b['fma']):
        np.testing.assert_allclose(u, v, rtol=1e-5, atol=1e-5)
    assert a['assert_shape'] == b['assert_shape'] and a['constant'][1] == b['constant'][1]


# --------------------------------------------------------------------------- networks

def networks_checks_page(torch):
    ops = ops_page(torch)
    net = networks_page(torch, ops)
    dev = _dev(torch)
    rng = np.random.default_rng(1)
    out = {}
    N, I, O = 2, 3, 4
    x = torch.as_tensor(rng.standard_normal((N, I, 4, 4)).astype(np.float32), device=dev)
    weight = torch.as_tensor(rng.standard_normal((O, I, 3, 3)).astype(np.float32), device=dev)
    styles = torch.as_tensor((1 + 0.3 * rng.standard_normal((N, I))).astype(np.float32), device=dev)
    noise = torch.as_tensor(rng.standard_normal((N, 1, 4, 4)).astype(np.float32), device=dev)
    f = ops.upfirdn2d.setup_filter([1, 3, 3, 1], device=dev)
    for fused in (True, False):
        out[f'mod_{fused}'] = _np(net.modulated_conv2d(x, weight, styles, noise=noise, padding=1, fused_modconv=fused))
        out[f'mod_up_{fused}'] = _np(net.modulated_conv2d(x, weight, styles, up=2, padding=1, resample_filter=f, flip_weight=False, fused_modconv=fused))
        out[f'mod_nodemod_{fused}'] = _np(net.modulated_conv2d(x, weight, styles, demodulate=False, padding=1, fused_modconv=fused))

    mapping = _fill_params(torch, net.MappingNetwork(z_dim=4, c_dim=2, w_dim=5, num_ws=3, num_layers=2, w_avg_beta=0.9), 2, scale=50.0).to(dev)
    with torch.no_grad():
        mapping.w_avg.copy_(torch.as_tensor(rng.standard_normal(5).astype(np.float32)))
    z = torch.as_tensor(rng.standard_normal((3, 4)).astype(np.float32), device=dev)
    c = torch.as_tensor(np.eye(3, 2, dtype=np.float32), device=dev)
    out['w_avg0'] = _np(mapping.w_avg)
    mapping.train()
    out['ws'] = _np(mapping(z, c))
    out['w_avg1'] = _np(mapping.w_avg)
    mapping.eval()
    out['ws_trunc'] = _np(mapping(z, c, truncation_psi=0.7))
    out['ws_cut'] = _np(mapping(z, c, truncation_psi=0.5, truncation_cutoff=2))
    out['w_avg2'] = _np(mapping.w_avg)
    out['mapping_params'] = {k: _np(v) for k, v in mapping.state_dict().items()}

    torch.manual_seed(0)
    b4 = _fill_params(torch, net.SynthesisBlock(0, 4, w_dim=5, resolution=4, img_channels=3, is_last=False), 3).to(dev)
    b8 = _fill_params(torch, net.SynthesisBlock(4, 4, w_dim=5, resolution=8, img_channels=3, is_last=True), 4).to(dev)
    ws = torch.as_tensor(rng.standard_normal((2, 5, 5)).astype(np.float32), device=dev)
    res = {}
    for fused in (True, False):
        x4, img4 = b4(None, None, ws.narrow(1, 0, 2), fused_modconv=fused, noise_mode='const')
        x8, img8 = b8(x4, img4, ws.narrow(1, 1, 3), fused_modconv=fused, noise_mode='const')
        res[fused] = (_np(x4), _np(img4), _np(x8), _np(img8))
    out['blocks'] = res
    with torch.no_grad():
        b8.conv0.noise_strength.zero_()
        b8.conv1.noise_strength.zero_()
    _, img_none = b8(torch.as_tensor(res[True][0], dtype=torch.float32, device=dev), torch.as_tensor(res[True][1], dtype=torch.float32, device=dev), ws.narrow(1, 1, 3), noise_mode='none')
    _, img_rand = b8(torch.as_tensor(res[True][0], dtype=torch.float32, device=dev), torch.as_tensor(res[True][1], dtype=torch.float32, device=dev), ws.narrow(1, 1, 3), noise_mode='random')
    out['noise0'] = (_np(img_none), _np(img_rand))
    # the skip architecture: img8 = upsample2d(img4) + torgb(x8)
    out['torgb8'] = _np(b8.torgb(torch.as_tensor(res[True][2], dtype=torch.float32, device=dev), ws[:, 3]))
    out['up_img4'] = _np(ops.upfirdn2d.upsample2d(torch.as_tensor(res[True][1], dtype=torch.float32, device=dev), b8.resample_filter))
    # the resnet architecture: y = skip(x) (1x1 Conv2dLayer, up=2) added in place to the conv path
    br = _fill_params(torch, net.SynthesisBlock(4, 4, w_dim=5, resolution=8, img_channels=3, is_last=True, architecture='resnet'), 5).to(dev)
    x4 = torch.as_tensor(res[True][0], dtype=torch.float32, device=dev)
    rr = {}
    for fused in (True, False):
        xr, imgr = br(x4, None, ws.narrow(1, 1, 3), fused_modconv=fused, noise_mode='const')
        rr[fused] = (_np(xr), _np(imgr))
    out['resnet'] = rr
    out['resnet_skip_w'] = _np(br.skip.weight)
    out['resnet_convs'] = _np(br.conv1(br.conv0(x4, ws[:, 1], noise_mode='const'), ws[:, 2], noise_mode='const', gain=np.sqrt(0.5)))
    return out


def _np_mapping(p, z, c, lr=0.01, embed=True):
    def fc(x, name, act):
        w = p[name + '.weight'] * (lr / math.sqrt(x.shape[1]))
        b = p[name + '.bias'] * lr
        y = x @ w.T + b
        return _lrelu(y) * math.sqrt(2) if act else y

    def n2(x):
        return x / np.sqrt((x ** 2).mean(1, keepdims=True) + 1e-8)

    def fc_embed(x):
        w = p['embed.weight'] / math.sqrt(x.shape[1])
        return x @ w.T + p['embed.bias']

    x = np.concatenate([n2(z), n2(fc_embed(c))], 1) if embed else n2(z)
    return fc(fc(x, 'fc0', True), 'fc1', True)


def test_modulated_conv_mapping_truncation_and_synthesis_blocks():
    out = networks_checks_page(lucid)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
    weight = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    styles = (1 + 0.3 * rng.standard_normal((2, 3))).astype(np.float32)
    noise = rng.standard_normal((2, 1, 4, 4)).astype(np.float32)
    k = np.outer([1, 3, 3, 1], [1, 3, 3, 1]) / 64.0
    e, e_up, e_nd = [], [], []
    for n in range(2):
        wn = weight.astype(np.float64) * styles[n][None, :, None, None]
        e_nd.append(np_conv2d(x[n:n + 1], wn, padding=1)[0])
        wn = wn / np.sqrt((wn ** 2).sum((1, 2, 3), keepdims=True) + 1e-8)
        e.append(np_conv2d(x[n:n + 1], wn, padding=1)[0] + noise[n])
        e_up.append(np_conv2d_resample(x[n:n + 1], wn, k, up=2, padding=1, flip_weight=False)[0])
    for fused in (True, False):
        np.testing.assert_allclose(out[f'mod_{fused}'], np.stack(e), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(out[f'mod_up_{fused}'], np.stack(e_up), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(out[f'mod_nodemod_{fused}'], np.stack(e_nd), rtol=1e-4, atol=1e-5)
    assert out['mod_up_True'].shape == (2, 4, 8, 8)

    # mapping network: layers in NumPy, EMA of w_avg by lerp, truncation closed form
    p = out['mapping_params']
    rng.standard_normal(5)  # the page's w_avg start (read back as out['w_avg0'])
    z = rng.standard_normal((3, 4)).astype(np.float32)
    w = _np_mapping(p, z.astype(np.float64), np.eye(3, 2))
    np.testing.assert_allclose(out['ws'], np.repeat(w[:, None], 3, 1), rtol=1e-4, atol=1e-5)
    w_avg0 = out['w_avg0']
    w_avg1 = w.mean(0) + 0.9 * (w_avg0 - w.mean(0))
    np.testing.assert_allclose(out['w_avg1'], w_avg1, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out['w_avg2'], out['w_avg1'], rtol=0, atol=0)  # eval: no update
    np.testing.assert_allclose(out['ws_trunc'], np.repeat((w_avg1 + 0.7 * (w - w_avg1))[:, None], 3, 1), rtol=1e-4, atol=1e-5)
    cut = out['ws_cut']
    np.testing.assert_allclose(cut[:, :2], np.repeat((w_avg1 + 0.5 * (w - w_avg1))[:, None], 2, 1), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(cut[:, 2], w, rtol=1e-4, atol=1e-5)

    # synthesis blocks at 4 and 8: fused == non-fused, skip-architecture sum, zero noise strength
    fused, unfused = out['blocks'][True], out['blocks'][False]
    assert fused[1].shape == (2, 3, 4, 4) and fused[3].shape == (2, 3, 8, 8) and fused[2].shape == (2, 4, 8, 8)
    for u, v in zip(fused, unfused):
        np.testing.assert_allclose(u, v, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(fused[3], out['up_img4'] + out['torgb8'], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out['up_img4'], np_upfirdn2d(fused[1], k, up=2, padding=(2, 1, 2, 1), gain=4), rtol=1e-4, atol=1e-5)
    xr, imgr = out['resnet'][True]
    for u, v in zip(out['resnet'][True], out['resnet'][False]):
        np.testing.assert_allclose(u, v, rtol=1e-4, atol=1e-4)
    assert imgr.shape == (2, 3, 8, 8) and xr.shape == (2, 4, 8, 8)
    skip = np_conv2d_resample(fused[0], out['resnet_skip_w'] / 2.0, k, up=2) * np.sqrt(0.5)  # weight_gain 1/sqrt(4)
    np.testing.assert_allclose(xr, skip + out['resnet_convs'], rtol=1e-4, atol=1e-4)
    img_none, img_rand = out['noise0']
    np.testing.assert_array_equal(img_none, img_rand)
    assert np.abs(img_none - fused[3]).max() > 1e-3  # the const noise mattered before zeroing


def test_networks_torch_parity():
    torch = pytest.importorskip("torch")
    a = networks_checks_page(lucid)
    b = networks_checks_page(torch)
    for key in a:
        if key in ('blocks', 'noise0', 'mapping_params', 'resnet'):
            continue
        np.testing.assert_allclose(a[key], b[key], rtol=1e-4, atol=1e-5, err_msg=key)
    for fused in (True, False):
        for u, v in zip(a['blocks'][fused], b['blocks'][fused]):
            np.testing.assert_allclose(u, v, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(a['noise0'][0], b['noise0'][0], rtol=1e-4, atol=1e-4)
    for u, v in zip(a['resnet'][True], b['resnet'][True]):
        np.testing.assert_allclose(u, v, rtol=1e-4, atol=1e-4)


# --------------------------------------------------------------------------- loss: R1 and path length

def loss_setup(torch):
    ops = ops_page(torch)
    net = networks_page(torch, ops)
    lossmod = loss_page(torch, ops)
    dev = _dev(torch)

    class TinyD(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fromrgb = net.Conv2dLayer(2, 3, kernel_size=1, activation='lrelu')
            self.conv = net.Conv2dLayer(3, 3, kernel_size=3, activation='swish', down=2)
            self.fc = net.FullyConnectedLayer(3 * 4 * 4, 1, activation='softplus')

        def forward(self, img, c):
            x = self.conv(self.fromrgb(img))
            return self.fc(x.flatten(1))

    class BroadcastMapping(torch.nn.Module):  # float64 stand-in: ws[:, i] = z + shift (shift = 0)
        def __init__(self):
            super().__init__()
            self.shift = torch.nn.Parameter(torch.zeros([3], dtype=torch.float64))

        def forward(self, z, c, skip_w_avg_update=False):
            return (z + self.shift).unsqueeze(1).repeat([1, 2, 1])

    class TinySynthesis(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.const = torch.nn.Parameter(torch.randn([2, 4, 4]))
            self.layer = net.SynthesisLayer(2, 2, w_dim=3, resolution=8, up=2)
            self.torgb = net.ToRGBLayer(2, 2, w_dim=3)

        def forward(self, ws):
            x = self.const.unsqueeze(0).repeat([ws.shape[0], 1, 1, 1]).to(ws.dtype)
            x = self.layer(x, ws[:, 0], noise_mode='const')
            return self.torgb(x, ws[:, 1])

    D = _fill_params(torch, TinyD(), 5, scale=1.5, dtype=torch.float64).to(dev)
    G_synthesis = _fill_params(torch, TinySynthesis(), 6, dtype=torch.float64).to(dev)
    with torch.no_grad():
        G_synthesis.layer.noise_strength.fill_(0.3)
    G_mapping = BroadcastMapping().to(dev)
    loss = lossmod.StyleGAN2Loss(dev, G_mapping, G_synthesis, D, style_mixing_prob=0, r1_gamma=3.0, pl_batch_shrink=2, pl_weight=2)
    loss.pl_mean = loss.pl_mean.to(torch.float64)  # lerp wants one dtype (as PyTorch's): the float64 run's state
    return SimpleNamespace(loss=loss, D=D, G_synthesis=G_synthesis, G_mapping=G_mapping, dev=dev)


def r1_page(torch):
    s = loss_setup(torch)
    rng = np.random.default_rng(7)
    real_img = torch.as_tensor(rng.standard_normal((2, 2, 8, 8)), device=s.dev)
    s.loss.accumulate_gradients('Dreg', real_img, None, None, None, sync=True, gain=2.0)
    grads = {n: _np(p.grad) for n, p in s.D.named_parameters()}

    def penalty():  # the Dr1 forward of loss.py, returned instead of backpropagated
        real_img_tmp = real_img.detach().requires_grad_(True)
        real_logits = s.D(real_img_tmp, None)
        r1_grads = torch.autograd.grad(outputs=[real_logits.sum()], inputs=[real_img_tmp], create_graph=True, only_inputs=True)[0]
        return real_logits, r1_grads

    logits, r1 = penalty()
    return SimpleNamespace(s=s, grads=grads, penalty=penalty, logits=_np(logits), r1=_np(r1), real_img=_np(real_img))


def _nudged(torch, p, idx, v, fn, h=1e-5):
    vals = []
    for shift in (h, -h):
        with torch.no_grad():
            p[idx] = v + shift
        vals.append(fn())
    with torch.no_grad():
        p[idx] = v
    return vals


def test_r1_regularizer_against_float64_finite_differences():
    torch = lucid
    r = r1_page(torch)
    D, eps = r.s.D, 1e-5
    x0 = r.real_img

    def logits_of(xv):
        with torch.no_grad():
            return _np(D(torch.as_tensor(xv, device=r.s.dev), None)).sum()

    # r1_grads = d sum(logits) / d img, central differences at a few pixels
    for idx in [(0, 0, 0, 0), (0, 1, 2, 3), (1, 0, 3, 1), (1, 1, 1, 2)]:
        xp, xm = x0.copy(), x0.copy()
        xp[idx] += eps
        xm[idx] -= eps
        fd = (logits_of(xp) - logits_of(xm)) / (2 * eps)
        assert abs(fd - r.r1[idx]) < 1e-9 + 1e-6 * abs(fd), (idx, fd, r.r1[idx])
    assert np.abs(r.r1).max() > 1e-3

    # second order: d/dθ mean(r1_penalty * gamma/2) * gain, vs differences of the penalty itself
    def objective():
        _, g = r.penalty()
        return float(_np((g.square().sum([1, 2, 3]) * (3.0 / 2)).mean().mul(2.0)))

    params = dict(D.named_parameters())
    for name, idx in [('fromrgb.weight', (1, 0, 0, 0)), ('conv.weight', (2, 1, 1, 0)), ('conv.bias', (1,)),
                      ('fc.weight', (0, 5)), ('fc.bias', (0,)), ('fromrgb.bias', (2,))]:
        p = params[name]
        v = float(p.detach()[idx])
        fp, fm = _nudged(torch, p, idx, v, objective)
        fd = (fp - fm) / 2e-5
        an = r.grads[name][idx]
        assert abs(fd - an) < 1e-9 + 1e-5 * abs(fd), (name, fd, an)
    assert np.abs(r.grads['conv.weight']).max() > 1e-5


def pl_page(torch, fixed_noise=False):
    if fixed_noise:  # the two libraries' random streams differ: the parity test draws pl_noise in NumPy
        randn_like = torch.randn_like
        torch.randn_like = lambda t: torch.as_tensor(np.random.default_rng(3).standard_normal(tuple(t.shape)), dtype=t.dtype, device=t.device)
        try:
            return pl_page(torch)
        finally:
            torch.randn_like = randn_like
    s = loss_setup(torch)
    rng = np.random.default_rng(8)
    gen_z = torch.as_tensor(rng.standard_normal((4, 3)), device=s.dev)
    with torch.no_grad():
        s.loss.pl_mean.fill_(0.25)
    torch.manual_seed(11)
    s.loss.accumulate_gradients('Greg', None, None, gen_z, gen_z, sync=True, gain=1.5)
    grads = {n: _np(p.grad) for n, p in s.G_synthesis.named_parameters()}

    def objective(ws=None):  # the Gpl forward of loss.py with the same noise, returned
        torch.manual_seed(11)
        if ws is None:
            gen_img, gen_ws = s.loss.run_G(gen_z[:2], gen_z[:2], sync=False)
        else:
            gen_ws = ws
            gen_img = s.G_synthesis(gen_ws)
        pl_noise = torch.randn_like(gen_img) / np.sqrt(gen_img.shape[2] * gen_img.shape[3])
        return gen_img, gen_ws, pl_noise

    return SimpleNamespace(s=s, grads=grads, objective=objective, pl_mean=float(s.loss.pl_mean), gen_z=_np(gen_z))


def test_path_length_regularizer_against_float64_finite_differences():
    torch = lucid
    r = pl_page(torch)
    G = r.s.G_synthesis
    gen_img, gen_ws, pl_noise = r.objective()
    pl_grads = torch.autograd.grad(outputs=[(gen_img * pl_noise).sum()], inputs=[gen_ws], create_graph=False)[0]
    g = _np(pl_grads)
    ws0, noise = _np(gen_ws), _np(pl_noise)
    assert ws0.shape == (2, 2, 3)
    np.testing.assert_array_equal(ws0, np.repeat(r.gen_z[:2, None], 2, 1))

    def proj(wsv):
        with torch.no_grad():
            return float((_np(G(torch.as_tensor(wsv, device=r.s.dev))) * noise).sum())

    for idx in [(0, 0, 0), (0, 1, 2), (1, 0, 1), (1, 1, 0)]:
        wp, wm = ws0.copy(), ws0.copy()
        wp[idx] += 1e-5
        wm[idx] -= 1e-5
        fd = (proj(wp) - proj(wm)) / 2e-5
        assert abs(fd - g[idx]) < 1e-8 + 1e-6 * abs(fd), (idx, fd, g[idx])

    # pl_mean EMA: lerp(0.25, mean length, 0.01)
    lengths = np.sqrt((g ** 2).sum(2).mean(1))
    assert abs(r.pl_mean - (0.25 + 0.01 * (lengths.mean() - 0.25))) < 1e-12

    def loss_value():
        img, ws, nz = r.objective()
        pg = torch.autograd.grad(outputs=[(img * nz).sum()], inputs=[ws], create_graph=False)[0]
        pl = _np(pg.square().sum(2).mean(1).sqrt())
        pm = 0.25 + 0.01 * (pl.mean() - 0.25)
        return float(((pl - pm) ** 2 * 2).mean() * 1.5)

    params = dict(G.named_parameters())
    for name, idx in [('layer.weight', (1, 0, 2, 1)), ('layer.affine.weight', (0, 2)), ('layer.affine.bias', (1,)),
                      ('torgb.weight', (1, 1, 0, 0)), ('torgb.affine.weight', (1, 0)), ('layer.noise_strength', ()),
                      ('const', (1, 2, 3))]:
        p = params[name]
        v = float(p.detach()[idx])
        fp, fm = _nudged(torch, p, idx, v, loss_value)
        fd = (fp - fm) / 2e-5
        an = r.grads[name][idx]
        assert abs(fd - an) < 1e-7 + 1e-5 * abs(fd), (name, fd, an)
    assert np.abs(r.grads['layer.weight']).max() > 1e-4


def test_r1_and_path_length_torch_parity():
    torch = pytest.importorskip("torch")
    for page in (r1_page, lambda t: pl_page(t, fixed_noise=True)):
        a, b = page(lucid), page(torch)
        for name in a.grads:
            np.testing.assert_allclose(a.grads[name], b.grads[name], rtol=1e-8, atol=1e-10, err_msg=name)
    ra, rb = r1_page(lucid), r1_page(torch)
    np.testing.assert_allclose(ra.r1, rb.r1, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(ra.logits, rb.logits, rtol=1e-10, atol=1e-12)


def style_mixing_page(torch, seed):
    """``StyleGAN2Loss.run_G`` with ``style_mixing_prob=1``: a 0-dim int64 ``random_`` cutoff, ``torch.where``
    on 0-dim tensors and ``ws[:, cutoff:] = ...`` sliced by a tensor; the mixing call skips the w_avg update."""
    ops = ops_page(torch)
    net = networks_page(torch, ops)
    lossmod = loss_page(torch, ops)
    dev = _dev(torch)
    mapping = _fill_params(torch, net.MappingNetwork(z_dim=4, c_dim=0, w_dim=5, num_ws=4, num_layers=2), 9, scale=50.0).to(dev)
    mapping.train()

    class Identity(torch.nn.Module):
        def forward(self, ws):
            return ws * 1

    rng = np.random.default_rng(10)
    z = torch.as_tensor(rng.standard_normal((3, 4)).astype(np.float32), device=dev)
    out = {}
    for prob in (0.0, 1.0):
        with torch.no_grad():
            mapping.w_avg.fill_(0.5)
        loss = lossmod.StyleGAN2Loss(dev, mapping, Identity(), None, style_mixing_prob=prob)
        torch.manual_seed(seed)
        img, ws = loss.run_G(z, None, sync=True)
        out[prob] = (_np(img), _np(ws), _np(mapping.w_avg))
    out['params'] = {k: _np(v) for k, v in mapping.state_dict().items()}
    out['z'] = _np(z)
    return out


@pytest.mark.parametrize("seed", [0, 1])
def test_style_mixing_in_run_G(seed):
    out = style_mixing_page(lucid, seed)
    w = _np_mapping(out['params'], out['z'], None, embed=False)
    img0, ws0, avg0 = out[0.0]
    np.testing.assert_allclose(ws0, np.repeat(w[:, None], 4, 1), rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(img0, ws0)
    np.testing.assert_allclose(avg0, w.mean(0) + 0.995 * (0.5 - w.mean(0)), rtol=1e-5, atol=1e-6)
    _, ws1, avg1 = out[1.0]
    same = [np.allclose(ws1[:, j], w, rtol=1e-4, atol=1e-5) for j in range(4)]
    cutoff = same.index(False)
    assert 1 <= cutoff < 4 and all(same[:cutoff]) and not any(same[cutoff:]), same
    for j in range(cutoff + 1, 4):
        np.testing.assert_array_equal(ws1[:, j], ws1[:, cutoff])
    np.testing.assert_allclose(avg1, avg0, rtol=1e-6, atol=1e-7)  # one update: the mixing call skipped it


def test_style_mixing_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = style_mixing_page(lucid, 0), style_mixing_page(torch, 0)
    for prob in (0.0, 1.0):
        np.testing.assert_allclose(a[prob][1][:, 0], b[prob][1][:, 0], rtol=1e-5, atol=1e-6)  # the cutoff is random
        np.testing.assert_allclose(a[prob][2], b[prob][2], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(a[0.0][1], b[0.0][1], rtol=1e-5, atol=1e-6)


def dboth_page(torch):
    s = loss_setup(torch)
    rng = np.random.default_rng(12)
    real_img = torch.as_tensor(rng.standard_normal((2, 2, 8, 8)), device=s.dev)
    gen_z = torch.as_tensor(rng.standard_normal((2, 3)), device=s.dev)
    s.loss.accumulate_gradients('Dboth', real_img, None, gen_z, None, sync=True, gain=0.5)
    grads = {n: _np(p.grad) for n, p in s.D.named_parameters()}
    g_grads = {n: _np(p.grad) for n, p in s.G_synthesis.named_parameters()}

    def objective():  # Dgen + Dreal + Dr1 of loss.py, as one number
        gen_img, _ = s.loss.run_G(gen_z, None, sync=False)
        loss_Dgen = torch.nn.functional.softplus(s.D(gen_img, None))
        real_img_tmp = real_img.detach().requires_grad_(True)
        real_logits = s.D(real_img_tmp, None)
        r1_grads = torch.autograd.grad(outputs=[real_logits.sum()], inputs=[real_img_tmp], create_graph=True)[0]
        loss_Dr1 = r1_grads.square().sum([1, 2, 3]) * (3.0 / 2)
        loss_Dreal = torch.nn.functional.softplus(-real_logits)
        return float(_np(loss_Dgen.mean() * 0.5 + (loss_Dreal + loss_Dr1).mean() * 0.5))

    return SimpleNamespace(s=s, grads=grads, g_grads=g_grads, objective=objective)


def test_dboth_phase_gradients_against_float64_finite_differences():
    r = dboth_page(lucid)
    params = dict(r.s.D.named_parameters())
    for name, idx in [('fromrgb.weight', (0, 1, 0, 0)), ('conv.weight', (1, 2, 0, 2)), ('conv.bias', (0,)), ('fc.weight', (0, 7)), ('fc.bias', (0,))]:
        p = params[name]
        fp, fm = _nudged(lucid, p, idx, float(p.detach()[idx]), r.objective)
        fd = (fp - fm) / 2e-5
        assert abs(fd - r.grads[name][idx]) < 1e-9 + 1e-5 * abs(fd), (name, fd, r.grads[name][idx])
    # Dgen's backward also reaches G (the training loop zeroes it before the G phases)
    assert np.abs(r.g_grads['torgb.weight']).max() > 1e-4


def test_dboth_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = dboth_page(lucid), dboth_page(torch)
    for name in a.grads:
        np.testing.assert_allclose(a.grads[name], b.grads[name], rtol=1e-8, atol=1e-11, err_msg=name)
    for name in a.g_grads:
        np.testing.assert_allclose(a.g_grads[name], b.g_grads[name], rtol=1e-8, atol=1e-11, err_msg=name)
