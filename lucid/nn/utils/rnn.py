"""Variable-length sequences: ``PackedSequence``, ``pack_padded_sequence``,
``pad_packed_sequence``, ``pad_sequence``, ``pack_sequence``, ``unpad_sequence``,
``unpack_sequence``, as PyTorch's ``torch.nn.utils.rnn``.

NOTE [Packed layout]
A ``PackedSequence`` holds the steps of a batch of sequences sorted by decreasing length,
time-major: ``data`` is ``(sum(lengths), *)``, the first ``batch_sizes[0]`` rows are step 0
of every sequence, the next ``batch_sizes[1]`` rows step 1 of those still running, and so
on. ``sorted_indices[i]`` is the original batch index of the i-th sorted sequence;
``unsorted_indices`` is its inverse. Packing and padding are one ``getitem`` each with a
constant index array (differentiable through ``getitem``'s rules); the recurrent layers run
a packed batch one time step at a time on the first ``batch_sizes[t]`` rows of their state.

On a device, as in PyTorch, ``data`` and the index permutations live on the device and
``batch_sizes`` (and the lengths ``pack_padded_sequence`` takes and ``pad_packed_sequence``
returns) on the host: they are shapes, read by Python to lay out the steps.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from ..._core.backend import host, namespace_of, on_device_of, runs_on_operands_device
from ..._core.tensor import Tensor, _wrap
from ...ops._family import _as_tensor

__all__ = ["PackedSequence", "pack_padded_sequence", "pad_packed_sequence", "pad_sequence", "pack_sequence",
           "unpad_sequence", "unpack_sequence", "invert_permutation"]


def _lucid():
    import lucid

    return lucid


class _PackError(AssertionError, ValueError):
    """PyTorch asserts this; ValueError says what is wrong with the argument."""


class _LengthsError(RuntimeError, ValueError):
    """PyTorch raises RuntimeError where Lucid raised ValueError: both keep callers working."""


class PackedSequence(namedtuple("PackedSequence", ["data", "batch_sizes", "sorted_indices", "unsorted_indices"])):
    """A batch of variable-length sequences packed time-major (See NOTE [Packed layout]).

    Build it with :func:`pack_padded_sequence` or :func:`pack_sequence`; ``RNN``, ``LSTM`` and
    ``GRU`` accept it and return one.

    Examples
    --------
    >>> import lucid
    >>> from lucid.nn.utils.rnn import pack_sequence
    >>> p = pack_sequence([lucid.tensor([1.0, 2.0, 3.0]), lucid.tensor([4.0])])
    >>> p.data.tolist(), p.batch_sizes.tolist()
    ([1.0, 4.0, 2.0, 3.0], [2, 1, 1])
    """

    def __new__(cls, data, batch_sizes=None, sorted_indices=None, unsorted_indices=None):
        if batch_sizes is None:  # PyTorch's older form: PackedSequence((data, batch_sizes))
            if not isinstance(data, (list, tuple)) or len(data) != 2:
                raise _PackError("PackedSequence: expected data to be a list or tuple of length 2 "
                                 "(data, batch_sizes) when batch_sizes is not given")
            data, batch_sizes = data
        if unsorted_indices is None and sorted_indices is not None:
            unsorted_indices = invert_permutation(sorted_indices)
        return super().__new__(cls, data, batch_sizes, sorted_indices, unsorted_indices)

    def to(self, *args, **kwargs):
        """The same packing with ``data.to(*args, **kwargs)``; the permutations follow its
        device, ``batch_sizes`` stays on the host (PyTorch's rule)."""
        data = self.data.to(*args, **kwargs)
        if data is self.data:
            return self
        move = (lambda t: None if t is None else t.to(data.device))
        return type(self)(data, self.batch_sizes, move(self.sorted_indices), move(self.unsorted_indices))

    def cpu(self):
        return self.to("cpu")

    def cuda(self, device=None):
        return self.to("cuda" if device is None else device if not isinstance(device, int) else f"cuda:{device}")

    def _cast(self, name):
        import lucid  # (the dtype singletons; lucid is fully imported by the time this runs)

        return self.to(dtype=getattr(lucid, name))

    def double(self):
        return self._cast("float64")

    def float(self):
        return self._cast("float32")

    def half(self):
        return self._cast("float16")

    def long(self):
        return self._cast("int64")

    def int(self):
        return self._cast("int32")

    def short(self):
        return self._cast("int16")

    def char(self):
        return self._cast("int8")

    def byte(self):
        return self._cast("uint8")

    @property
    def is_cuda(self):
        return self.data.is_cuda

    def is_pinned(self):
        return False


@runs_on_operands_device
def invert_permutation(permutation):
    """The inverse of an index permutation (``None`` stays ``None``).

    Examples
    --------
    >>> import lucid
    >>> from lucid.nn.utils.rnn import invert_permutation
    >>> invert_permutation(lucid.tensor([2, 0, 1])).tolist()
    [1, 2, 0]
    """
    if permutation is None:
        return None
    p = _as_tensor(permutation)._data
    ns = namespace_of(p)  # on the permutation's device
    out = ns.empty_like(p)
    out[p] = ns.arange(len(p), dtype=p.dtype)
    return _wrap(out)


def _lengths_array(lengths, batch, op, host_only=False):
    """The lengths as a host int64 array, validated. ``host_only``: a device tensor is refused
    as PyTorch's ``pack_padded_sequence`` refuses it (lengths are read by Python)."""
    if isinstance(lengths, Tensor) and lengths._data.__class__ is not np.ndarray:
        if host_only:
            raise RuntimeError(f"'lengths' argument should be a 1D CPU int64 tensor, but got {lengths.ndim}D "
                               f"{lengths.device} {lengths.dtype} tensor")
        lengths = host(lengths._data)  # explicitly: each length slices on the host
    arr = np.asarray(lengths._data if isinstance(lengths, Tensor) else lengths)
    if arr.ndim != 1 or arr.dtype.kind not in "iu" and not (arr.dtype.kind == "f" and np.all(arr == arr.astype(int))):
        raise RuntimeError(f"{op}: lengths must be a 1-D sequence of integers, got {arr!r}")
    arr = arr.astype(np.int64)
    if len(arr) != batch:
        raise _LengthsError(f"{op}: expected {batch} lengths (the batch size), got {len(arr)}")
    if len(arr) and arr.min() <= 0:
        raise RuntimeError(f"{op}: every length must be positive (found {arr.min()}); "
                           "remove empty sequences first")
    return arr


def _packed_positions(sorted_lengths, batch):
    """Flat index ``t * batch + b`` of every packed row (time-major), and the batch sizes."""
    steps = int(sorted_lengths[0]) if len(sorted_lengths) else 0
    batch_sizes = (sorted_lengths[None, :] > np.arange(steps)[:, None]).sum(1)
    pos = np.concatenate([t * batch + np.arange(bs) for t, bs in enumerate(batch_sizes)]) if steps else \
        np.zeros(0, np.int64)
    return pos.astype(np.int64), batch_sizes.astype(np.int64)


def pack_padded_sequence(input, lengths, batch_first=False, enforce_sorted=True):
    """Pack a padded batch ``(T, B, *)`` (``(B, T, *)`` with ``batch_first``) of sequences of
    the given ``lengths``.

    With ``enforce_sorted=True`` the lengths must be in decreasing order; otherwise the batch
    is sorted here and the permutation kept in the result (``sorted_indices``).

    Examples
    --------
    >>> import lucid
    >>> from lucid.nn.utils.rnn import pack_padded_sequence
    >>> x = lucid.tensor([[1.0, 2.0], [3.0, 0.0]])  # batch first, lengths 2 and 1
    >>> pack_padded_sequence(x, [2, 1], batch_first=True).data.tolist()
    [1.0, 3.0, 2.0]
    """
    input = _as_tensor(input)
    if input.ndim < 2:
        raise ValueError(f"pack_padded_sequence: expected an input of at least 2 dims, got {tuple(input.shape)}")
    bdim = 0 if batch_first else 1
    B, T = input.shape[bdim], input.shape[1 - bdim]
    lens = _lengths_array(lengths, B, "pack_padded_sequence", host_only=True)
    if len(lens) and lens.max() > T:
        raise RuntimeError(f"pack_padded_sequence: a length ({lens.max()}) exceeds the padded length {T}")
    if enforce_sorted:
        if np.any(np.diff(lens) > 0):
            raise RuntimeError("pack_padded_sequence: `lengths` array must be sorted in decreasing order when "
                               "`enforce_sorted` is True. You can pass `enforce_sorted=False` to "
                               "pack_padded_sequence and/or pack_sequence to sidestep this requirement if you "
                               "do not need ONNX exportability.")
        sorted_idx = None
        order = np.arange(B)
    else:
        order = np.argsort(-lens, kind="stable")
        sorted_idx = _wrap(on_device_of(order.astype(np.int64), input._data))
    pos, batch_sizes = _packed_positions(lens[order], B)
    # row t * B + b of the time-major padded input is sequence order[b] at step t
    src = (pos // B) * (B if not batch_first else 1) + order[pos % B] * (1 if not batch_first else T)
    flat = input.reshape((B * T,) + tuple(input.shape[2:]))
    return PackedSequence(flat[_wrap(on_device_of(src, input._data))], _wrap(batch_sizes), sorted_idx, None)


def pad_packed_sequence(sequence, batch_first=False, padding_value=0.0, total_length=None):
    """Undo :func:`pack_padded_sequence`: ``(padded, lengths)`` in the original batch order.

    Examples
    --------
    >>> import lucid
    >>> from lucid.nn.utils.rnn import pack_sequence, pad_packed_sequence
    >>> p = pack_sequence([lucid.tensor([1.0]), lucid.tensor([2.0, 3.0])], enforce_sorted=False)
    >>> padded, lengths = pad_packed_sequence(p, batch_first=True)
    >>> padded.tolist(), lengths.tolist()
    ([[1.0, 0.0], [2.0, 3.0]], [1, 2])
    """
    data, batch_sizes = sequence.data, host(sequence.batch_sizes._data)  # on the host already (PyTorch's rule)
    T = len(batch_sizes)
    B = int(batch_sizes[0]) if T else 0
    if total_length is not None:
        if total_length < T:
            raise ValueError(f"pad_packed_sequence: expected total_length to be at least the length of the "
                             f"longest sequence ({T}), got {total_length}")
        T = total_length
    lens = (batch_sizes[None, :] > np.arange(B)[:, None]).sum(1)  # sorted lengths
    pos, _ = _packed_positions(lens, B)
    # every padded slot reads a packed row, or the extra padding row at the end
    gather = np.full(T * B, data.shape[0], np.int64)
    gather[pos] = np.arange(len(pos))
    pad_row = _lucid().full((1,) + tuple(data.shape[1:]), padding_value, dtype=data.dtype, device=data.device)
    ext = _lucid().cat([data, pad_row], 0)
    padded = ext[_wrap(on_device_of(gather, data._data))].reshape((T, B) + tuple(data.shape[1:]))
    if sequence.unsorted_indices is not None:
        padded = padded[:, sequence.unsorted_indices]
        lens = lens[host(sequence.unsorted_indices._data)]  # the lengths stay on the host, as PyTorch's
    if batch_first:
        padded = padded.transpose(0, 1)
    return padded, _wrap(lens.astype(np.int64))


class _SideError(RuntimeError, ValueError):
    """PyTorch raises RuntimeError where Lucid raised ValueError: both keep callers working."""


def pad_sequence(sequences, batch_first=False, padding_value=0.0, padding_side="right"):
    """Stack sequences ``(L_i, *)`` into ``(max L, B, *)`` (``(B, max L, *)`` with
    ``batch_first``), padding with ``padding_value`` on ``padding_side``.

    Examples
    --------
    >>> import lucid
    >>> from lucid.nn.utils.rnn import pad_sequence
    >>> pad_sequence([lucid.tensor([1.0, 2.0]), lucid.tensor([3.0])], batch_first=True).tolist()
    [[1.0, 2.0], [3.0, 0.0]]
    """
    if padding_side not in ("right", "left"):
        raise _SideError(f"pad_sequence: padding_side must be 'left' or 'right', got {padding_side!r}")
    seqs = [_as_tensor(s) for s in sequences]
    if not seqs:
        raise RuntimeError("pad_sequence: received an empty list of sequences")
    trailing = tuple(seqs[0].shape[1:])
    for s in seqs:
        if s.ndim == 0 or tuple(s.shape[1:]) != trailing:
            raise RuntimeError(f"pad_sequence: every sequence must have shape (L, {', '.join(map(str, trailing))})"
                               f"; got {tuple(s.shape)}")
    T = max(s.shape[0] for s in seqs)
    lucid = _lucid()
    out = []
    for s in seqs:
        extra = T - s.shape[0]
        spec = (0, 0) * len(trailing) + ((0, extra) if padding_side == "right" else (extra, 0))
        out.append(lucid.pad(s, spec, value=padding_value) if extra else s)
    return lucid.stack(out, 0 if batch_first else 1)


def pack_sequence(sequences, enforce_sorted=True):
    """Pack a list of sequences ``(L_i, *)`` (decreasing lengths unless ``enforce_sorted=False``).

    Examples
    --------
    >>> import lucid
    >>> from lucid.nn.utils.rnn import pack_sequence
    >>> pack_sequence([lucid.tensor([1.0, 2.0]), lucid.tensor([3.0])]).batch_sizes.tolist()
    [2, 1]
    """
    lengths = [int(_as_tensor(s).shape[0]) for s in sequences]
    return pack_padded_sequence(pad_sequence(sequences), lengths, enforce_sorted=enforce_sorted)


def unpad_sequence(padded_sequences, lengths, batch_first=False):
    """The list of sequences of a padded batch (the inverse of :func:`pad_sequence`).

    Examples
    --------
    >>> import lucid
    >>> from lucid.nn.utils.rnn import unpad_sequence
    >>> [s.tolist() for s in unpad_sequence(lucid.tensor([[1.0, 2.0], [3.0, 0.0]]), [2, 1], True)]
    [[1.0, 2.0], [3.0]]
    """
    x = padded_sequences if batch_first else padded_sequences.transpose(0, 1)
    lens = _lengths_array(lengths, x.shape[0], "unpad_sequence")
    return [x[i, : int(n)] for i, n in enumerate(lens)]


def unpack_sequence(packed_sequences):
    """The list of sequences of a ``PackedSequence`` (the inverse of :func:`pack_sequence`).

    Examples
    --------
    >>> import lucid
    >>> from lucid.nn.utils.rnn import pack_sequence, unpack_sequence
    >>> seqs = [lucid.tensor([1.0]), lucid.tensor([2.0, 3.0])]
    >>> [s.tolist() for s in unpack_sequence(pack_sequence(seqs, enforce_sorted=False))]
    [[1.0], [2.0, 3.0]]
    """
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)
