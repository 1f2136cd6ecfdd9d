"""The quantizable LSTM (PyTorch's ``torch.ao.nn.quantizable.LSTM``): ``nn.LSTM`` taken apart
into observable pieces (two ``Linear`` gate projections, ``FloatFunctional`` adds and
multiplies, ``Sigmoid``/``Tanh`` gates) so that eager ``prepare`` can observe every
intermediate and ``convert`` can quantize each piece; the quantized form is
``lucid.ao.nn.quantized.LSTM``."""
from __future__ import annotations

import numbers
import warnings

import lucid
from lucid import nn
from lucid._core.quantized import QuantizedTensor, quantize_per_tensor

__all__ = ["LSTMCell", "LSTM"]


def _stack(tensors, dim=0):
    # stacking quantized tensors goes through cat (which keeps the first one's qparams, as
    # PyTorch's quantized cat does)
    if isinstance(tensors[0], QuantizedTensor):
        return lucid.cat([t.unsqueeze(dim) for t in tensors], dim)
    return lucid.stack(tensors, dim)


def _functional():
    from lucid.ao.nn.quantized import FloatFunctional

    return FloatFunctional()


class LSTMCell(nn.Module):
    """A quantizable LSTM cell (the arguments of :class:`lucid.nn.LSTMCell`).

    ``split_gates=True`` keeps one ``Linear`` / ``FloatFunctional`` per gate instead of one
    projection that is chunked in four.

    Examples
    --------
    >>> import lucid
    >>> from lucid.ao.nn.quantizable import LSTMCell
    >>> cell = LSTMCell(4, 3)
    >>> h, c = cell(lucid.randn(2, 4))
    >>> tuple(h.shape), tuple(c.shape)
    ((2, 3), (2, 3))
    """

    _FLOAT_MODULE = nn.LSTMCell

    def __init__(self, input_dim, hidden_dim, bias=True, device=None, dtype=None, *, split_gates=False):
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        self.input_size, self.hidden_size, self.bias, self.split_gates = input_dim, hidden_dim, bias, split_gates
        if not split_gates:
            self.igates = nn.Linear(input_dim, 4 * hidden_dim, bias=bias, **kw)
            self.hgates = nn.Linear(hidden_dim, 4 * hidden_dim, bias=bias, **kw)
            self.gates = _functional()
        else:
            self.igates, self.hgates, self.gates = nn.ModuleDict(), nn.ModuleDict(), nn.ModuleDict()
            for g in ("input", "forget", "cell", "output"):
                self.igates[g] = nn.Linear(input_dim, hidden_dim, bias=bias, **kw)
                self.hgates[g] = nn.Linear(hidden_dim, hidden_dim, bias=bias, **kw)
                self.gates[g] = _functional()
        self.input_gate, self.forget_gate = nn.Sigmoid(), nn.Sigmoid()
        self.cell_gate, self.output_gate = nn.Tanh(), nn.Sigmoid()
        self.fgate_cx, self.igate_cgate = _functional(), _functional()
        self.fgate_cx_igate_cgate, self.ogate_cy = _functional(), _functional()
        self.initial_hidden_state_qparams = (1.0, 0)
        self.initial_cell_state_qparams = (1.0, 0)
        self.hidden_state_dtype = lucid.quint8
        self.cell_state_dtype = lucid.quint8

    def forward(self, x, hidden=None):
        if hidden is None or hidden[0] is None or hidden[1] is None:
            hidden = self.initialize_hidden(x.shape[0], isinstance(x, QuantizedTensor))
        hx, cx = hidden
        if not self.split_gates:
            gates = self.gates.add(self.igates(x), self.hgates(hx))
            input_gate, forget_gate, cell_gate, out_gate = gates.chunk(4, 1)
        else:
            gate = {key: g.add(ig(x), hg(hx)) for (key, g), ig, hg in
                    zip(self.gates.items(), self.igates.values(), self.hgates.values())}
            input_gate, forget_gate, cell_gate, out_gate = (gate[k] for k in ("input", "forget", "cell", "output"))
        input_gate, forget_gate = self.input_gate(input_gate), self.forget_gate(forget_gate)
        cell_gate, out_gate = self.cell_gate(cell_gate), self.output_gate(out_gate)
        fgate_cx = self.fgate_cx.mul(forget_gate, cx)
        igate_cgate = self.igate_cgate.mul(input_gate, cell_gate)
        cy = self.fgate_cx_igate_cgate.add(fgate_cx, igate_cgate)
        hy = self.ogate_cy.mul(out_gate, lucid.tanh(cy))
        return hy, cy

    def initialize_hidden(self, batch_size, is_quantized=False):
        h, c = lucid.zeros((batch_size, self.hidden_size)), lucid.zeros((batch_size, self.hidden_size))
        if is_quantized:
            (h_scale, h_zp), (c_scale, c_zp) = self.initial_hidden_state_qparams, self.initial_cell_state_qparams
            h = quantize_per_tensor(h, h_scale, h_zp, self.hidden_state_dtype)
            c = quantize_per_tensor(c, c_scale, c_zp, self.cell_state_dtype)
        return h, c

    def _get_name(self):
        return "QuantizableLSTMCell"

    @classmethod
    def from_params(cls, wi, wh, bi=None, bh=None, split_gates=False):
        """A cell whose gate projections hold ``wi``/``wh`` (and biases ``bi``/``bh``)."""
        if (bi is None) != (bh is None):
            raise AssertionError("bi and bh must both be None or both have values")
        cell = cls(input_dim=wi.shape[1], hidden_dim=wh.shape[1], bias=bi is not None, split_gates=split_gates)
        if not split_gates:
            cell.igates.weight = nn.Parameter(wi.detach().clone())
            cell.hgates.weight = nn.Parameter(wh.detach().clone())
            if bi is not None:
                cell.igates.bias = nn.Parameter(bi.detach().clone())
                cell.hgates.bias = nn.Parameter(bh.detach().clone())
        else:
            for w, b, gates in ((wi, bi, cell.igates), (wh, bh, cell.hgates)):
                for w_chunk, gate in zip(w.chunk(4, 0), gates.values()):
                    gate.weight = nn.Parameter(w_chunk.detach().clone())
                if b is not None:
                    for b_chunk, gate in zip(b.chunk(4, 0), gates.values()):
                        gate.bias = nn.Parameter(b_chunk.detach().clone())
        return cell

    @classmethod
    def from_float(cls, other, use_precomputed_fake_quant=False, split_gates=False):
        if type(other) is not cls._FLOAT_MODULE:
            raise AssertionError(f"Expected module type {cls._FLOAT_MODULE}, got {type(other)}")
        if not hasattr(other, "qconfig"):
            raise AssertionError("The float module must have 'qconfig'")
        observed = cls.from_params(other.weight_ih, other.weight_hh, other.bias_ih, other.bias_hh,
                                   split_gates=split_gates)
        observed.qconfig = other.qconfig
        observed.igates.qconfig = other.qconfig
        observed.hgates.qconfig = other.qconfig
        if split_gates:
            for g in (*observed.igates.values(), *observed.hgates.values()):
                g.qconfig = other.qconfig
        return observed


class _LSTMSingleLayer(nn.Module):
    """One direction of one layer: the cell run over the sequence (first) dimension."""

    def __init__(self, input_dim, hidden_dim, bias=True, device=None, dtype=None, *, split_gates=False):
        super().__init__()
        self.cell = LSTMCell(input_dim, hidden_dim, bias=bias, split_gates=split_gates, device=device, dtype=dtype)

    def forward(self, x, hidden=None):
        result = []
        for i in range(x.shape[0]):
            hidden = self.cell(x[i], hidden)
            result.append(hidden[0])
        return _stack(result, 0), hidden

    @classmethod
    def from_params(cls, *args, **kwargs):
        cell = LSTMCell.from_params(*args, **kwargs)
        layer = cls(cell.input_size, cell.hidden_size, cell.bias, split_gates=cell.split_gates)
        layer.cell = cell
        return layer


class _LSTMLayer(nn.Module):
    """One layer, both directions when ``bidirectional``."""

    def __init__(self, input_dim, hidden_dim, bias=True, batch_first=False, bidirectional=False, device=None,
                 dtype=None, *, split_gates=False):
        super().__init__()
        self.batch_first, self.bidirectional = batch_first, bidirectional
        kw = {"bias": bias, "split_gates": split_gates, "device": device, "dtype": dtype}
        self.layer_fw = _LSTMSingleLayer(input_dim, hidden_dim, **kw)
        if bidirectional:
            self.layer_bw = _LSTMSingleLayer(input_dim, hidden_dim, **kw)

    def forward(self, x, hidden=None):
        if self.batch_first:
            x = x.transpose(0, 1)
        hx_fw, cx_fw = (None, None) if hidden is None else hidden
        hidden_bw = None
        if self.bidirectional:
            hx_bw = None if hx_fw is None else hx_fw[1]
            hx_fw = None if hx_fw is None else hx_fw[0]
            cx_bw = None if cx_fw is None else cx_fw[1]
            cx_fw = None if cx_fw is None else cx_fw[0]
            if hx_bw is not None and cx_bw is not None:
                hidden_bw = hx_bw, cx_bw
        hidden_fw = None if hx_fw is None and cx_fw is None else (hx_fw, cx_fw)
        result_fw, hidden_fw = self.layer_fw(x, hidden_fw)
        if hasattr(self, "layer_bw") and self.bidirectional:
            result_bw, hidden_bw = self.layer_bw(x.flip(0), hidden_bw)
            result = lucid.cat([result_fw, result_bw.flip(0)], result_fw.dim() - 1)
            h = _stack([hidden_fw[0], hidden_bw[0]], 0)
            c = _stack([hidden_fw[1], hidden_bw[1]], 0)
        else:
            result, (h, c) = result_fw, hidden_fw
        if self.batch_first:
            result = result.transpose(0, 1)
        return result, (h, c)

    @classmethod
    def from_float(cls, other, layer_idx=0, qconfig=None, **kwargs):
        """Layer ``layer_idx`` of the float ``nn.LSTM`` ``other`` (there is no float layer
        class; this mirrors ``prepare``)."""
        if not hasattr(other, "qconfig") and qconfig is None:
            raise AssertionError("other must have qconfig or qconfig must be provided")
        opts = {k: kwargs.get(k, getattr(other, k)) for k in ("input_size", "hidden_size", "bias", "batch_first",
                                                              "bidirectional")}
        split_gates = kwargs.get("split_gates", False)
        layer = cls(opts["input_size"], opts["hidden_size"], opts["bias"], opts["batch_first"],
                    opts["bidirectional"], split_gates=split_gates)
        layer.qconfig = getattr(other, "qconfig", qconfig)
        for suffix, attr in (("", "layer_fw"), ("_reverse", "layer_bw")):
            if suffix and not other.bidirectional:
                break
            params = [getattr(other, f"{n}_l{layer_idx}{suffix}", None)
                      for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
            setattr(layer, attr, _LSTMSingleLayer.from_params(*params, split_gates=split_gates))
        return layer


class LSTM(nn.Module):
    """A quantizable LSTM (the arguments of :class:`lucid.nn.LSTM`; ``dropout`` is accepted
    but ignored, with a warning, as PyTorch does). The weights live in ``layers[i]``.

    Examples
    --------
    >>> import lucid
    >>> from lucid.ao.nn.quantizable import LSTM
    >>> rnn = LSTM(4, 3, num_layers=2)
    >>> out, (h, c) = rnn(lucid.randn(5, 2, 4))
    >>> tuple(out.shape), tuple(h.shape)
    ((5, 2, 3), (2, 2, 3))
    """

    _FLOAT_MODULE = nn.LSTM

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, device=None, dtype=None, *, split_gates=False):
        super().__init__()
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.bidirectional = bias, batch_first, bidirectional
        if not isinstance(dropout, numbers.Number) or isinstance(dropout, bool) or not 0 <= dropout <= 1:
            raise ValueError("dropout should be a number in range [0, 1] representing the probability of an "
                             "element being zeroed")
        self.dropout = float(dropout)
        self.training = False  # PyTorch's default: eval until asked to train
        if dropout > 0:
            warnings.warn("dropout option for quantizable LSTM is ignored. If you are training, please, use "
                          "nn.LSTM version followed by `prepare` step.", stacklevel=2)
            if num_layers == 1:
                warnings.warn("dropout option adds dropout after all but last recurrent layer, so non-zero "
                              f"dropout expects num_layers greater than 1, but got dropout={dropout} and "
                              f"num_layers={num_layers}", stacklevel=2)
        kw = {"batch_first": False, "bidirectional": bidirectional, "split_gates": split_gates, "device": device,
              "dtype": dtype}
        self.layers = nn.ModuleList([_LSTMLayer(input_size if i == 0 else hidden_size, hidden_size, bias, **kw)
                                     for i in range(num_layers)])

    def forward(self, x, hidden=None):
        if self.batch_first:
            x = x.transpose(0, 1)
        batch = x.size(1)
        num_directions = 2 if self.bidirectional else 1
        if hidden is None:
            zeros = lucid.zeros(num_directions, batch, self.hidden_size, dtype=lucid.float32, device=x.device)
            zeros = zeros.squeeze(0)
            if isinstance(x, QuantizedTensor):
                zeros = quantize_per_tensor(zeros, 1.0, 0, x.dtype)
            hxcx = [(zeros, zeros) for _ in range(self.num_layers)]
        elif isinstance(hidden[0], lucid.Tensor):
            hx = hidden[0].reshape(self.num_layers, num_directions, batch, self.hidden_size)
            cx = hidden[1].reshape(self.num_layers, num_directions, batch, self.hidden_size)
            hxcx = [(hx[i].squeeze(0), cx[i].squeeze(0)) for i in range(self.num_layers)]
        else:
            hxcx = hidden
        hx_list, cx_list = [], []
        for idx, layer in enumerate(self.layers):
            x, (h, c) = layer(x, hxcx[idx])
            hx_list.append(h)
            cx_list.append(c)
        hx_tensor, cx_tensor = _stack(hx_list), _stack(cx_list)
        hx_tensor = hx_tensor.reshape(-1, hx_tensor.shape[-2], hx_tensor.shape[-1])
        cx_tensor = cx_tensor.reshape(-1, cx_tensor.shape[-2], cx_tensor.shape[-1])
        if self.batch_first:
            x = x.transpose(0, 1)
        return x, (hx_tensor, cx_tensor)

    def _get_name(self):
        return "QuantizableLSTM"

    @classmethod
    def from_float(cls, other, qconfig=None, split_gates=False):
        """The observed (prepared) form of the float ``nn.LSTM`` ``other``."""
        from lucid.ao.quantization import prepare, prepare_qat

        if not isinstance(other, cls._FLOAT_MODULE):
            raise AssertionError(f"Expected module type {cls._FLOAT_MODULE}, got {type(other)}")
        if not hasattr(other, "qconfig") and not qconfig:
            raise AssertionError("other must have qconfig or qconfig must be provided")
        observed = cls(other.input_size, other.hidden_size, other.num_layers, other.bias, other.batch_first,
                       other.dropout, other.bidirectional, split_gates=split_gates)
        observed.qconfig = getattr(other, "qconfig", qconfig)
        for idx in range(other.num_layers):
            observed.layers[idx] = _LSTMLayer.from_float(other, idx, qconfig, batch_first=False,
                                                         split_gates=split_gates)
        if other.training:
            observed.train()
            return prepare_qat(observed, inplace=True)
        observed.eval()
        return prepare(observed, inplace=True)

    @classmethod
    def from_observed(cls, other):
        raise NotImplementedError("It looks like you are trying to convert a non-quantizable LSTM module. Please, "
                                  "see the examples on quantizable LSTMs.")
