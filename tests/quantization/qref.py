"""NumPy references of PyTorch's quantization integer math (NOTE [Quantized tensors],
[Dynamic quantized linear], [Static quantized linear]), written independently of Lucid."""
import numpy as np

RANGES = {"qint8": (-128, 127), "quint8": (0, 255), "qint32": (-2 ** 31, 2 ** 31 - 1)}


def inv32(scale):
    return np.float32(1.0) / np.float32(scale)


def quantize_per_tensor(x, scale, zp, dtype):
    lo, hi = RANGES[dtype]
    x = np.asarray(x, np.float32)
    if dtype == "qint32":  # rint(zp + x * inv), each step in float32
        r = np.rint(np.float32(zp) + x * inv32(scale))
    else:  # rint(fma(x, inv, zp)): the product is exact in float64
        r = np.rint((x.astype(np.float64) * np.float64(inv32(scale)) + zp).astype(np.float32))
    return np.clip(r.astype(np.float64), lo, hi).astype(np.int64)


def quantize_per_channel(x, scales, zps, axis, dtype):
    lo, hi = RANGES[dtype]
    shape = [1] * x.ndim
    shape[axis] = -1
    inv = (np.float32(1) / np.asarray(scales, np.float32)).reshape(shape)
    r = np.rint(np.asarray(x, np.float32) * inv).astype(np.float64) + np.asarray(zps).reshape(shape)
    return np.clip(r, lo, hi).astype(np.int64)


def dequantize_per_tensor(q, scale, zp):
    return (q - zp).astype(np.float32) * np.float32(scale)


def choose_qparams(lo, hi, qmin, qmax, reduce_range):
    """fbgemm's ChooseQuantizationParams, transcribed."""
    f = np.float32
    lo, hi = f(lo), f(hi)
    if reduce_range:
        qmin, qmax = int(qmin / 2), int(qmax / 2)
    lo, hi = min(lo, f(0)), max(hi, f(0))
    scale = (float(hi) - float(lo)) / (qmax - qmin)
    if f(scale) == 0 or np.isinf(f(1) / f(scale)):
        scale = 0.1
    small = f(6.1e-5)
    if scale < small:
        org = f(scale)
        scale = float(small)
        if lo == 0:
            hi = f(small * (qmax - qmin))
        elif hi == 0:
            lo = f(-small * (qmax - qmin))
        else:
            amp = f(small / org)
            lo, hi = f(lo * amp), f(hi * amp)
    zmin, zmax = qmin - float(lo) / scale, qmax - float(hi) / scale
    emin, emax = abs(qmin) - abs(float(lo) / scale), abs(qmax) - abs(float(hi) / scale)
    z = zmin if emin < emax else zmax
    z = qmin if z < qmin else qmax if z > qmax else int(np.rint(z))
    return scale, z


def symmetric_weight(w):
    """default_weight_observer + quantize_per_tensor: (int8 values, float32 scale)."""
    w = np.asarray(w, np.float32)
    mx = max(-min(float(w.min()), 0.0), max(float(w.max()), 0.0))
    scale = max(np.float32(np.float32(mx) / np.float32(127.5)), np.finfo(np.float32).eps)
    return quantize_per_tensor(w, scale, 0, "qint8"), np.float32(scale)


def linear_dynamic(x, wq, wscale, bias, reduce_range=True):
    """fbgemm's dynamic linear: integer products, one fused multiply-add to float32."""
    x = np.asarray(x, np.float32)
    xs, xz = choose_qparams(x.min(), x.max(), 0, 255, reduce_range) if x.size else (0.1, 0)
    xq = np.clip(xz + np.rint(x * inv32(xs)).astype(np.float64), 0, 255).astype(np.int64)
    acc = (xq - xz).reshape(-1, x.shape[-1]) @ wq.T.astype(np.int64)
    out = acc.astype(np.float64) * np.float64(np.float32(np.float32(xs) * wscale))
    if bias is not None:
        out = out + np.asarray(bias, np.float64)
    return out.astype(np.float32).reshape(x.shape[:-1] + (-1,))


def sigmoid(v):
    return (1 / (1 + np.exp(-v.astype(np.float64)))).astype(np.float32)


def lstm_dynamic(x, layers, h0=None, c0=None):
    """One-direction multi-layer dynamic quantized LSTM; ``layers`` = [(w_ih, w_hh, b_ih, b_hh)] float."""
    T, B, _ = x.shape
    hs, cs = [], []
    for k, (w_ih, w_hh, b_ih, b_hh) in enumerate(layers):
        H = w_hh.shape[1]
        (qi, si), (qh, sh) = symmetric_weight(w_ih), symmetric_weight(w_hh)
        gi = linear_dynamic(x, qi, si, b_ih)
        h = np.zeros((B, H), np.float32) if h0 is None else h0[k]
        c = np.zeros((B, H), np.float32) if c0 is None else c0[k]
        outs = []
        for t in range(T):
            g = linear_dynamic(h, qh, sh, b_hh) + gi[t]
            i, f, gg, o = np.split(g, 4, axis=1)
            c = sigmoid(f) * c + sigmoid(i) * np.tanh(gg)
            h = sigmoid(o) * np.tanh(c)
            outs.append(h)
        x = np.stack(outs)
        hs.append(h)
        cs.append(c)
    return x, np.stack(hs), np.stack(cs)


def fake_quantize(x, scale, zp, qmin, qmax, per_tensor=True):
    """PyTorch's fake quantize value and straight-through mask (float32 math per tensor)."""
    dt = x.dtype
    xx = x.astype(np.float32) if dt == np.float16 else x
    inv = (np.float32(1) / np.asarray(scale, np.float32)).astype(xx.dtype)
    q = zp + np.rint(xx * inv)
    mask = (q >= qmin) & (q <= qmax)
    steps = np.clip(q, qmin, qmax) - zp
    if per_tensor:
        val = steps.astype(np.float32) * np.float32(scale)
    else:
        val = steps * np.asarray(scale, np.float32).astype(xx.dtype)
    return val.astype(dt), mask.astype(dt)
