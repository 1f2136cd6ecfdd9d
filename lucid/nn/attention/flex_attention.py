"""``lucid.nn.attention.flex_attention`` (``torch.nn.attention.flex_attention``).

:func:`flex_attention` is scaled dot-product attention with two user hooks: a ``score_mod``
that rewrites each score from its value and its (batch, head, query, key) position, and a
``mask_mod`` (carried by a :class:`BlockMask`) that says which positions may attend.

NOTE [Mods on broadcast indices]
PyTorch writes both hooks for scalars and ``vmap``s them over the four index dims. Lucid
calls each hook once, on the whole (B, H, Q, KV) score tensor, with index tensors
``b = arange(B)[:, None, None, None]``, ``h = arange(H)[None, :, None, None]``,
``q_idx = arange(Q)[:, None]`` (as 4-D) and ``kv_idx = arange(KV)`` (as 4-D): for the
elementwise hooks flex_attention is documented for this is what the vmap computes, and a
captured tensor indexed by the indices (a bias table ``bias[h, q_idx - kv_idx]``, ALiBi
slopes ``alibi[h]``, document ids ``doc[b, q_idx] == doc[b, kv_idx]``) becomes an advanced
index whose index tensors broadcast to the same grid. The result is broadcast to the full
grid. Everything is composed from Lucid ops, so gradients reach ``query``, ``key``,
``value`` and any tensor a ``score_mod`` captures, and jvp and vmap come for free. A hook
with Python control flow on an index (``if q_idx > 3``) does not vectorize (nor does it
under PyTorch's vmap).

NOTE [Block masks as the kernel reads them]
A :class:`BlockMask` stores, per (batch, head, query block), the key blocks that are
*partial* (``kv_num_blocks``/``kv_indices``: ``mask_mod`` decides each element) and
*full* (``full_kv_*``: every element attends, ``mask_mod`` is not called); every other
block is skipped. :func:`flex_attention` applies exactly that rule on the element grid, as
PyTorch's compiled kernels do, with the mask's (batch, head) dims read modulo their size.
For a mask from :func:`create_block_mask` this is ``mask_mod`` on the whole grid (what
PyTorch's eager CPU path computes); for one assembled with :meth:`BlockMask.from_kv_blocks`
the block structure counts too, as on a GPU.
"""
from __future__ import annotations

import enum
import functools
import inspect
import itertools
import math
import operator
import warnings
from typing import NamedTuple, TypedDict

__all__ = ["BlockMask", "flex_attention", "AuxOutput", "AuxRequest", "FlexKernelOptions", "create_block_mask",
           "create_mask", "or_masks", "and_masks", "noop_mask"]

_DEFAULT_SPARSE_BLOCK_SIZE = 128
_LARGE_SPARSE_BLOCK_SIZE = 1 << 30
_BACKENDS = ("AUTO", "TRITON", "FLASH", "TRITON_DECODE")


def _lucid():
    import lucid

    return lucid


class FlexKernelOptions(TypedDict, total=False):
    """Kernel tuning options (PyTorch's Triton knobs). Lucid has one exact eager implementation,
    so these are accepted for compatibility and, except for ``BACKEND``'s validation, ignored."""

    num_warps: int
    num_stages: int
    BLOCK_M: int
    BLOCK_N: int
    BLOCK_M1: int
    BLOCK_N1: int
    BLOCK_M2: int
    BLOCK_N2: int
    PRESCALE_QK: bool
    ROWS_GUARANTEED_SAFE: bool
    BLOCKS_ARE_CONTIGUOUS: bool
    WRITE_DQ: bool
    FORCE_USE_FLEX_ATTENTION: bool
    USE_TMA: bool
    kpack: int
    matrix_instr_nonkdim: int
    waves_per_eu: int
    BACKEND: str


class AuxRequest(NamedTuple):
    """Which auxiliary outputs :func:`flex_attention` should return."""

    lse: bool = False
    max_scores: bool = False


class AuxOutput(NamedTuple):
    """Auxiliary outputs of :func:`flex_attention`; None where not requested."""

    lse: object = None
    max_scores: object = None


class _ModificationType(enum.Enum):
    SCORE_MOD = 1
    MASK_MOD = 2
    UNKNOWN = 3


def _get_mod_type(fn):
    """SCORE_MOD for 5 positional parameters without defaults, MASK_MOD for 4 (PyTorch's rule)."""
    if hasattr(fn, "__code__"):
        n = fn.__code__.co_argcount - len(getattr(fn, "__defaults__", None) or ())
    else:
        n = sum(1 for p in inspect.signature(fn).parameters.values() if p.default is inspect.Parameter.empty)
    if n not in (4, 5):
        raise AssertionError(f"Expected 4 or 5 positional args, got {n}")
    return _ModificationType.SCORE_MOD if n == 5 else _ModificationType.MASK_MOD


def _identity(score, batch, head, token_q, token_kv):
    return score


def noop_mask(batch, head, token_q, token_kv):
    """The mask_mod that allows every position.

    Examples
    --------
    >>> import lucid
    >>> from lucid.nn.attention.flex_attention import noop_mask
    >>> i = lucid.arange(2)
    >>> noop_mask(i, i, i, i)
    tensor(True)
    """
    return batch.new_ones((), dtype=_lucid().bool)


def _sliced_mask_mod_error(batch, head, token_q, token_kv):
    raise RuntimeError(
        "Cannot use mask_mod from a sliced BlockMask. When you slice a BlockMask using [], the mask_mod attribute "
        "is reset. You must set it from the original BlockMask's mask_mod.")


def or_masks(*mask_mods):
    """The mask_mod allowing a position where any of ``mask_mods`` does.

    Examples
    --------
    >>> import lucid
    >>> from lucid.nn.attention.flex_attention import create_mask, or_masks
    >>> first = lambda b, h, q, kv: kv == 0
    >>> diag = lambda b, h, q, kv: q == kv
    >>> create_mask(or_masks(first, diag), 1, 1, 3, 3, device="cpu")[0, 0]
    tensor([[ True, False, False],
            [ True,  True, False],
            [ True, False,  True]])
    """
    if not all(callable(m) for m in mask_mods):
        raise RuntimeError(f"or_masks: all inputs should be callable mask_mods: {mask_mods}")

    def or_mask(b, h, q_idx, kv_idx):
        result = b.new_zeros((), dtype=_lucid().bool)
        for mask in mask_mods:
            result = result | mask(b, h, q_idx, kv_idx)
        return result

    return or_mask


def and_masks(*mask_mods):
    """The mask_mod allowing a position where all of ``mask_mods`` do.

    Examples
    --------
    >>> import lucid
    >>> from lucid.nn.attention.flex_attention import and_masks, create_mask
    >>> causal = lambda b, h, q, kv: q >= kv
    >>> window = lambda b, h, q, kv: q - kv <= 1
    >>> create_mask(and_masks(causal, window), 1, 1, 3, 3, device="cpu")[0, 0]
    tensor([[ True, False, False],
            [ True,  True, False],
            [False,  True,  True]])
    """
    if not all(callable(m) for m in mask_mods):
        raise RuntimeError(f"and_masks: all inputs should be callable mask_mods: {mask_mods}")

    def and_mask(b, h, q_idx, kv_idx):
        result = b.new_ones((), dtype=_lucid().bool)
        for mask in mask_mods:
            result = result & mask(b, h, q_idx, kv_idx)
        return result

    return and_mask


def _grid_indices(B, H, Q, KV, device):
    """The four broadcast index tensors of NOTE [Mods on broadcast indices]."""
    lucid = _lucid()
    return (lucid.arange(B, device=device).reshape(B, 1, 1, 1), lucid.arange(H, device=device).reshape(1, H, 1, 1),
            lucid.arange(Q, device=device).reshape(1, 1, Q, 1), lucid.arange(KV, device=device).reshape(1, 1, 1, KV))


def _on_grid(out, shape, device, what):
    """A hook's result as a tensor broadcast to the (B, H, Q, KV) grid."""
    lucid = _lucid()
    out = out if isinstance(out, lucid.Tensor) else lucid.tensor(out, device=device)
    try:
        return lucid.broadcast_to(out, shape)
    except Exception as exc:
        raise RuntimeError(f"flex_attention: {what} returned shape {tuple(out.shape)}, which does not broadcast to "
                           f"the (B, H, Q, KV) grid {shape}; see NOTE [Mods on broadcast indices]") from exc


def _default_device():
    lucid = _lucid()
    return lucid.accelerator.current_accelerator() or lucid.get_default_device()


# -------------------------------------------------------------------- block-sparse layout helpers

def _ordered_to_dense(num_blocks_in_row, col_indices, num_cols):
    """(…, R) counts and (…, R, E) column lists -> the dense (…, R, num_cols) int32 block mask."""
    lucid = _lucid()
    dev = col_indices.device
    entries = col_indices.shape[-1]
    valid = lucid.arange(entries, device=dev) < num_blocks_in_row.unsqueeze(-1)
    hit = (col_indices.unsqueeze(-1) == lucid.arange(num_cols, device=dev)) & valid.unsqueeze(-1)
    return hit.any(dim=-2).to(lucid.int32)


def _dense_to_ordered(dense_mask):
    """Dense (…, R, C) block mask -> (counts, column lists); the listed columns come first, in order."""
    lucid = _lucid()
    dense_mask = dense_mask.to(lucid.int32)
    num = dense_mask.sum(dim=-1).to(lucid.int32)
    cols = lucid.argsort(dense_mask, dim=-1, descending=True, stable=True).to(lucid.int32)
    return num, cols


def _transpose_ordered(num_blocks_in_row, col_indices):
    dense = _ordered_to_dense(num_blocks_in_row, col_indices, col_indices.shape[-1])
    return _dense_to_ordered(dense.transpose(-2, -1))


def _adjust_num_blocks_and_indices(num_blocks, indices, new_num_rows, new_num_cols):
    lucid = _lucid()
    indices = indices[:, :, :new_num_rows, :new_num_cols]
    num_blocks = num_blocks[:, :, :new_num_rows]
    num_blocks = lucid.where(num_blocks < new_num_cols, num_blocks, new_num_cols)
    num_blocks = (indices < num_blocks[:, :, :, None]).sum(dim=-1).to(lucid.int32)
    return num_blocks, indices


def _convert_mask_to_block_mask(mask, Q_BLOCK_SIZE, KV_BLOCK_SIZE, separate_full_blocks):
    """Element mask (B, H, Q, KV) -> int8 (partial, full or None) block masks (B, H, Q/QBS, KV/KVBS)."""
    lucid = _lucid()
    from ..functional import pad

    while mask.ndim < 4:
        mask = mask.unsqueeze(0)
    count = mask.to(lucid.int32)  # padding is False, as in PyTorch: a ragged edge block is never full
    count = pad(count, (0, -mask.shape[-1] % KV_BLOCK_SIZE, 0, -mask.shape[-2] % Q_BLOCK_SIZE))
    B, H, Q, KV = count.shape
    count = count.reshape(B, H, Q // Q_BLOCK_SIZE, Q_BLOCK_SIZE, KV // KV_BLOCK_SIZE, KV_BLOCK_SIZE)
    sums = count.sum(dim=(3, 5))
    if not separate_full_blocks:
        return (sums > 0).to(lucid.int8), None
    whole = Q_BLOCK_SIZE * KV_BLOCK_SIZE
    return ((sums > 0) & (sums < whole)).to(lucid.int8), (sums == whole).to(lucid.int8)


def _block_sizes(BLOCK_SIZE):
    return (BLOCK_SIZE, BLOCK_SIZE) if isinstance(BLOCK_SIZE, int) else tuple(BLOCK_SIZE)


# -------------------------------------------------------------------- BlockMask

class BlockMask:
    """A block-sparse attention mask in PyTorch's layout (a cross of BCSR and dense).

    Per (batch, head) and per ``BLOCK_SIZE[0]`` query rows, ``kv_num_blocks`` counts the
    partial key blocks (where ``mask_mod`` decides per element) and ``kv_indices`` lists them
    first; ``full_kv_num_blocks``/``full_kv_indices`` do the same for blocks that attend
    everywhere; ``q_*`` are the transposes (PyTorch's backward reads them). Entries past a
    row's count are unspecified. Build one with :func:`create_block_mask` or
    :meth:`from_kv_blocks`; see NOTE [Block masks as the kernel reads them].

    Examples
    --------
    >>> from lucid.nn.attention.flex_attention import create_block_mask
    >>> bm = create_block_mask(lambda b, h, q, kv: q >= kv, None, None, 4, 4, device="cpu", BLOCK_SIZE=2)
    >>> bm.kv_num_blocks, bm.full_kv_num_blocks
    (tensor([[[1, 1]]], dtype=lucid.int32), tensor([[[0, 1]]], dtype=lucid.int32))
    >>> print(bm)
    BlockMask(shape=(1, 1, 4, 4), sparsity=25.00%,
    (0, 0)
    ██
    ████
    )
    """

    _TENSOR_ATTRS = ["kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices", "q_num_blocks",
                     "q_indices", "full_q_num_blocks", "full_q_indices", "dq_write_order", "dq_write_order_full",
                     "dq_kv_order"]

    def __init__(self, seq_lengths, kv_num_blocks, kv_indices, full_kv_num_blocks, full_kv_indices, q_num_blocks,
                 q_indices, full_q_num_blocks, full_q_indices, BLOCK_SIZE=(_DEFAULT_SPARSE_BLOCK_SIZE,) * 2,
                 mask_mod=noop_mask, *, dq_write_order=None, dq_write_order_full=None, dq_kv_order=None,
                 dq_kv_order_spt=None):
        if kv_num_blocks is None or kv_indices is None:
            raise AssertionError("BlockMask: kv_num_blocks and kv_indices must be provided")
        if kv_indices.ndim < 2:
            raise RuntimeError("BlockMask must have at least 2 dimensions")
        if (full_kv_num_blocks is None) != (full_kv_indices is None):
            raise AssertionError("BlockMask: full_kv_num_blocks and full_kv_indices must be both provided or omitted")
        if (full_q_num_blocks is None) != (full_q_indices is None):
            raise AssertionError("BlockMask: full_q_num_blocks and full_q_indices must be both provided or omitted")
        if dq_write_order_full is not None and dq_write_order is None:
            raise ValueError("BlockMask: dq_write_order_full requires dq_write_order")
        self.seq_lengths = tuple(seq_lengths)
        self.kv_num_blocks, self.kv_indices = kv_num_blocks, kv_indices
        self.full_kv_num_blocks, self.full_kv_indices = full_kv_num_blocks, full_kv_indices
        self.q_num_blocks, self.q_indices = q_num_blocks, q_indices
        self.full_q_num_blocks, self.full_q_indices = full_q_num_blocks, full_q_indices
        self.dq_write_order, self.dq_write_order_full = dq_write_order, dq_write_order_full
        self.dq_kv_order, self.dq_kv_order_spt = dq_kv_order, dq_kv_order_spt
        self.BLOCK_SIZE = _block_sizes(BLOCK_SIZE)
        self.mask_mod = mask_mod

    @classmethod
    def from_kv_blocks(cls, kv_num_blocks, kv_indices, full_kv_num_blocks=None, full_kv_indices=None,
                       BLOCK_SIZE=_DEFAULT_SPARSE_BLOCK_SIZE, mask_mod=None, seq_lengths=None, compute_q_blocks=True,
                       *, dq_write_order=None, dq_write_order_full=None, dq_kv_order=None):
        """A BlockMask from its key-block lists; the ``q_*`` transposes are derived.

        ``seq_lengths`` defaults to the block grid times ``BLOCK_SIZE``; ``mask_mod`` to
        :func:`noop_mask`.

        Examples
        --------
        >>> import lucid
        >>> from lucid.nn.attention.flex_attention import BlockMask
        >>> bm = BlockMask.from_kv_blocks(lucid.tensor([[[1, 1]]], dtype=lucid.int32),
        ...                               lucid.tensor([[[[1, 0], [0, 1]]]], dtype=lucid.int32), BLOCK_SIZE=2)
        >>> bm.shape, bm.q_indices
        ((1, 1, 4, 4), tensor([[[[1, 0],
                  [0, 1]]]], dtype=lucid.int32))
        """
        lucid = _lucid()
        if kv_indices.ndim < 2:
            raise RuntimeError("BlockMask must have at least 2 dimensions")
        if (full_kv_num_blocks is None) != (full_kv_indices is None):
            raise AssertionError("BlockMask.from_kv_blocks: full_kv_num_blocks and full_kv_indices must be both "
                                 "provided or omitted")
        q_num_blocks = q_indices = full_q_num_blocks = full_q_indices = None
        if compute_q_blocks:
            q_num_blocks, q_indices = _transpose_ordered(kv_num_blocks, kv_indices)
            if full_kv_num_blocks is not None:
                full_q_num_blocks, full_q_indices = _transpose_ordered(full_kv_num_blocks, full_kv_indices)
        BLOCK_SIZE = _block_sizes(BLOCK_SIZE)
        if seq_lengths is None:
            seq_lengths = (kv_indices.shape[-2] * BLOCK_SIZE[0], kv_indices.shape[-1] * BLOCK_SIZE[1])
        if dq_kv_order is not None and not isinstance(dq_kv_order, (bool, lucid.Tensor)):
            raise ValueError("BlockMask.from_kv_blocks: dq_kv_order must be a bool, Tensor, or None")
        return cls(seq_lengths, kv_num_blocks, kv_indices, full_kv_num_blocks, full_kv_indices, q_num_blocks,
                   q_indices, full_q_num_blocks, full_q_indices, BLOCK_SIZE,
                   mask_mod if mask_mod is not None else noop_mask, dq_write_order=dq_write_order,
                   dq_write_order_full=dq_write_order_full,
                   dq_kv_order=dq_kv_order if isinstance(dq_kv_order, lucid.Tensor) else None,
                   dq_kv_order_spt=dq_kv_order if isinstance(dq_kv_order, bool) else None)

    def as_tuple(self, flatten=True):
        """The fields in PyTorch's order; ``flatten`` spreads ``seq_lengths`` and ``BLOCK_SIZE``."""
        seq_lengths = tuple(self.seq_lengths) if flatten else (self.seq_lengths,)
        block_size = tuple(self.BLOCK_SIZE) if flatten else (self.BLOCK_SIZE,)
        return (*seq_lengths, *(getattr(self, a) for a in self._TENSOR_ATTRS), self.dq_kv_order_spt, *block_size,
                self.mask_mod)

    @property
    def shape(self):
        return tuple(self.kv_indices.shape[:-2]) + tuple(self.seq_lengths)

    def numel(self):
        """The number of elements of the mask, sparsity not counted."""
        return functools.reduce(operator.mul, self.shape, 1)

    def sparsity(self):
        """The percentage of the mask's area in blocks that are skipped."""
        computed = self.kv_num_blocks.sum().item()
        if self.full_kv_num_blocks is not None:
            computed += self.full_kv_num_blocks.sum().item()
        return 100 * (1 - computed * self.BLOCK_SIZE[0] * self.BLOCK_SIZE[1] / self.numel())

    def to_dense(self):
        """The dense (…, query blocks, key blocks) int32 mask: 1 where a block is computed."""
        dense = _ordered_to_dense(self.kv_num_blocks, self.kv_indices, self.kv_indices.shape[-1])
        if self.full_kv_num_blocks is not None:
            dense = dense | _ordered_to_dense(self.full_kv_num_blocks, self.full_kv_indices,
                                              self.full_kv_indices.shape[-1])
        return dense

    def to_string(self, grid_size=(20, 20), limit=4):
        """A picture of the block mask per (batch, head): █ computed, ░ partly, blank skipped.

        ``grid_size`` caps the rows and columns drawn (-1: every block); ``limit`` the number
        of (batch, head) pictures.
        """
        dense = self.to_dense().to("cpu").numpy()  # a rendering, read on the host once
        *batch_dims, num_rows, num_cols = dense.shape
        if isinstance(grid_size, int) and grid_size != -1:
            max_rows = max_cols = grid_size
        elif grid_size == -1:
            max_rows, max_cols = num_rows, num_cols
        else:
            max_rows, max_cols = grid_size
        row_step = max(1, -(-num_rows // max_rows))
        col_step = max(1, -(-num_cols // max_cols))

        def picture(idx):
            cur = dense[idx]
            vis = f"{idx}\n"
            for r in range(0, num_rows, row_step):
                for c in range(0, num_cols, col_step):
                    frac = cur[r:r + row_step, c:c + col_step].mean()
                    vis += ("█" if frac == 1 else " " if frac == 0 else "░") * 2
                vis += "\n"
            return vis

        parts = []
        for n, idx in enumerate(itertools.product(*[range(i) for i in batch_dims])):
            if n == limit:
                parts += ["...", "To print out more, set BlockMask.to_string(limit=N)",
                          "You can also index (BlockMask[batch, head]) to choose a specific batch or head"]
                break
            parts.append(picture(idx))
        return "\n".join(parts)

    def __str__(self):
        return f"BlockMask(shape={self.shape}, sparsity={self.sparsity():.2f}%, \n{self.to_string().strip()}\n)"

    def __repr__(self):
        def shape_or_none(x):
            return tuple(x.shape) if x is not None else None

        name = getattr(self.mask_mod, "__name__", self.mask_mod)
        return (f"BlockMask(\n    kv_num_blocks={tuple(self.kv_num_blocks.shape)},\n"
                f"    kv_indices={tuple(self.kv_indices.shape)},\n"
                f"    full_kv_num_blocks={shape_or_none(self.full_kv_num_blocks)},\n"
                f"    full_kv_indices={shape_or_none(self.full_kv_indices)},\n"
                f"    q_num_blocks={shape_or_none(self.q_num_blocks)},\n"
                f"    q_indices={shape_or_none(self.q_indices)},\n"
                f"    full_q_num_blocks={shape_or_none(self.full_q_num_blocks)},\n"
                f"    full_q_indices={shape_or_none(self.full_q_indices)},\n"
                f"    BLOCK_SIZE={self.BLOCK_SIZE},\n    shape={self.shape},\n"
                f"    sparsity={self.sparsity():.2f}%,\n    mask_mod={name}\n)")

    def __getitem__(self, index):
        """The mask of some batches, heads and query blocks (ints keep their dim, as in PyTorch).

        The result's ``mask_mod`` raises: set it from the original mask's if needed.
        """
        if self.dq_kv_order is not None:
            raise NotImplementedError("BlockMask.__getitem__: slicing with a tensor dq_kv_order is not supported")
        index = index if isinstance(index, tuple) else (index,)
        padded = (*index, slice(None), slice(None), slice(None))[:3]
        sizes = self.kv_num_blocks.shape[:3]
        index = tuple(((slice(i + n, i + n + 1) if -n <= i < 0 else slice(i, i + 1)) if isinstance(i, int) else i)
                      for i, n in zip(padded, sizes))
        full = (self.full_kv_num_blocks[index], self.full_kv_indices[index]) if self.full_kv_num_blocks is not None \
            else (None, None)
        out = BlockMask.from_kv_blocks(self.kv_num_blocks[index], self.kv_indices[index], *full,
                                       BLOCK_SIZE=self.BLOCK_SIZE, mask_mod=_sliced_mask_mod_error,
                                       seq_lengths=self.seq_lengths, compute_q_blocks=self.q_indices is not None)
        out.dq_kv_order_spt = self.dq_kv_order_spt
        if self.dq_write_order is not None:
            out.dq_write_order, out.dq_write_order_full = _compute_dq_write_order(out, self.dq_kv_order_spt)
        return out

    def _adjust(self, new_q_len, new_kv_len):
        """The mask cropped (or its block grid cut) to ``new_q_len x new_kv_len``, from the upper left."""
        if self.dq_kv_order is not None:
            raise NotImplementedError("BlockMask._adjust: a tensor dq_kv_order is not supported")
        rows = -(-new_q_len // self.BLOCK_SIZE[0])
        cols = -(-new_kv_len // self.BLOCK_SIZE[1])
        kv = _adjust_num_blocks_and_indices(self.kv_num_blocks, self.kv_indices, rows, cols)
        full = (_adjust_num_blocks_and_indices(self.full_kv_num_blocks, self.full_kv_indices, rows, cols)
                if self.full_kv_num_blocks is not None else (None, None))
        out = self.from_kv_blocks(*kv, *full, BLOCK_SIZE=self.BLOCK_SIZE, mask_mod=self.mask_mod,
                                  seq_lengths=(new_q_len, new_kv_len), compute_q_blocks=self.q_indices is not None)
        out.dq_kv_order_spt = self.dq_kv_order_spt
        if self.dq_write_order is not None:
            out.dq_write_order, out.dq_write_order_full = _compute_dq_write_order(out, self.dq_kv_order_spt)
        return out

    def to(self, device):
        """A BlockMask with every tensor field on ``device``."""
        moved = {a: (None if getattr(self, a) is None else getattr(self, a).to(device)) for a in self._TENSOR_ATTRS}
        return BlockMask(self.seq_lengths, BLOCK_SIZE=self.BLOCK_SIZE, mask_mod=self.mask_mod,
                         dq_kv_order_spt=self.dq_kv_order_spt, **moved)

    def _element_mask(self, B, H, Q, KV, device):
        """The bool (B, H, Q, KV) grid this mask allows; see NOTE [Block masks as the kernel reads them]."""
        lucid = _lucid()
        if self.mask_mod is _sliced_mask_mod_error:
            raise RuntimeError("flex_attention: Cannot use mask_mod from a sliced BlockMask")
        b, h, m, n = _grid_indices(B, H, Q, KV, device)
        if self.BLOCK_SIZE == (_LARGE_SPARSE_BLOCK_SIZE, _LARGE_SPARSE_BLOCK_SIZE) and self.mask_mod is noop_mask:
            return None
        bm, hm = self.kv_num_blocks.shape[0], self.kv_num_blocks.shape[1]
        at = (b % bm, h % hm, m // self.BLOCK_SIZE[0], n // self.BLOCK_SIZE[1])
        cols = self.kv_indices.shape[-1]
        partial = _ordered_to_dense(self.kv_num_blocks, self.kv_indices, cols)[at].to(lucid.bool)
        allowed = partial & _on_grid(self.mask_mod(b, h, m, n), (B, H, Q, KV), device, "mask_mod").to(lucid.bool)
        if self.full_kv_num_blocks is not None:
            full = _ordered_to_dense(self.full_kv_num_blocks, self.full_kv_indices, cols)[at].to(lucid.bool)
            allowed = allowed | full
        return allowed


def _compute_dq_write_order(block_mask, dq_kv_order=False):
    """PyTorch's deterministic-dQ write order: each (m, n) block's rank among row m's computed blocks."""
    lucid = _lucid()
    if block_mask.q_indices is None:
        raise ValueError("BlockMask must have q_num_blocks and q_indices to compute dq_write_order")
    shapes = [block_mask.kv_indices.shape[:2], block_mask.q_indices.shape[:2]]
    B, H = max(s[0] for s in shapes), max(s[1] for s in shapes)

    def expand(t):
        return t.expand(B, H, *t.shape[2:])

    num_m = block_mask.kv_indices.shape[2]
    num_n = block_mask.q_indices.shape[2]
    dense = _ordered_to_dense(expand(block_mask.kv_num_blocks), expand(block_mask.kv_indices), num_n)
    if block_mask.full_kv_num_blocks is not None:
        dense = dense | _ordered_to_dense(expand(block_mask.full_kv_num_blocks), expand(block_mask.full_kv_indices),
                                          num_n)
    cumsum = dense.cumsum(dim=-1)
    rank = cumsum - dense
    if dq_kv_order:
        rank = cumsum[:, :, :, -1:] - 1 - rank
    dev = dense.device

    def gather(bwd_idx):
        b = lucid.arange(B, device=dev).reshape(B, 1, 1, 1)
        h = lucid.arange(H, device=dev).reshape(1, H, 1, 1)
        n = lucid.arange(bwd_idx.shape[2], device=dev).reshape(1, 1, -1, 1)
        return rank[b, h, bwd_idx.to(lucid.int64).clamp(0, num_m - 1), n].to(lucid.int32)

    full = gather(block_mask.full_q_indices) if block_mask.full_q_indices is not None else None
    return gather(block_mask.q_indices), full


# -------------------------------------------------------------------- mask construction

def create_mask(mod_fn, B, H, Q_LEN, KV_LEN, device=None):
    """The dense bool (B, H, Q_LEN, KV_LEN) mask of a mask_mod, or of a score_mod (False where it gives -inf).

    ``B``/``H`` of None mean 1; ``device`` defaults to the accelerator, else Lucid's default device.

    Examples
    --------
    >>> from lucid.nn.attention.flex_attention import create_mask
    >>> create_mask(lambda b, h, q, kv: q >= kv, 1, 1, 2, 3, device="cpu")
    tensor([[[[ True, False, False],
              [ True,  True, False]]]])
    """
    lucid = _lucid()
    device = _default_device() if device is None else device
    B, H = 1 if B is None else B, 1 if H is None else H
    b, h, m, n = _grid_indices(B, H, Q_LEN, KV_LEN, device)
    shape = (B, H, Q_LEN, KV_LEN)
    if _get_mod_type(mod_fn) == _ModificationType.SCORE_MOD:
        out = _on_grid(mod_fn(lucid.zeros(*shape, device=device), b, h, m, n), shape, device, "score_mod")
        return lucid.logical_not(lucid.isneginf(out))
    return _on_grid(mod_fn(b, h, m, n), shape, device, "mask_mod")


def create_block_mask(mask_mod, B, H, Q_LEN, KV_LEN, device=None, BLOCK_SIZE=_DEFAULT_SPARSE_BLOCK_SIZE,
                      _compile=False, separate_full_blocks=True, compute_dq_write_order=False, dq_kv_order=True):
    """The :class:`BlockMask` of ``mask_mod(b, h, q_idx, kv_idx)`` (True: may attend).

    ``mask_mod`` is called once on broadcast index tensors (NOTE [Mods on broadcast
    indices]); its dense mask is cut into ``BLOCK_SIZE`` tiles (an int, or (Q, KV) sizes),
    each empty, partial or (with ``separate_full_blocks``) full. ``B``/``H`` of None give a
    mask shared by all batches/heads. ``_compile`` is deprecated and does nothing here.

    Examples
    --------
    >>> import lucid
    >>> from lucid.nn.attention.flex_attention import create_block_mask, flex_attention
    >>> def causal(b, h, q_idx, kv_idx):
    ...     return q_idx >= kv_idx
    >>> bm = create_block_mask(causal, None, None, 4, 4, device="cpu", BLOCK_SIZE=2)
    >>> bm.kv_indices
    tensor([[[[0, 1],
              [1, 0]]]], dtype=lucid.int32)
    >>> q = k = lucid.zeros(1, 1, 4, 2)
    >>> v = lucid.arange(4.).reshape(1, 1, 4, 1)
    >>> flex_attention(q, k, v, block_mask=bm).flatten()
    tensor([0. , 0.5, 1. , 1.5])
    """
    if _get_mod_type(mask_mod) != _ModificationType.MASK_MOD:
        raise AssertionError(f"create_block_mask: requires a mask_mod function (4 arguments), got {mask_mod}")
    if _compile:
        warnings.warn("create_block_mask: _compile is deprecated (and Lucid has no compiler); building eagerly",
                      DeprecationWarning, stacklevel=2)
    if not isinstance(dq_kv_order, bool):
        raise ValueError("create_block_mask: dq_kv_order must be a bool when using create_block_mask")
    lucid = _lucid()
    device = _default_device() if device is None else device
    q_bs, kv_bs = _block_sizes(BLOCK_SIZE)
    mask = create_mask(mask_mod, B, H, Q_LEN, KV_LEN, device)
    if mask.dtype != lucid.bool:
        raise TypeError(f"create_block_mask: mask_mod must return a bool tensor, got {mask.dtype}")
    partial, full = _convert_mask_to_block_mask(mask, q_bs, kv_bs, separate_full_blocks)
    full = _dense_to_ordered(full) if full is not None else (None, None)
    bm = BlockMask.from_kv_blocks(*_dense_to_ordered(partial), *full, BLOCK_SIZE=(q_bs, kv_bs), mask_mod=mask_mod,
                                  seq_lengths=(Q_LEN, KV_LEN))
    if compute_dq_write_order:
        bm.dq_write_order, bm.dq_write_order_full = _compute_dq_write_order(bm, dq_kv_order)
        bm.dq_kv_order_spt = dq_kv_order
    return bm


def _create_empty_block_mask(query):
    lucid = _lucid()
    return BlockMask.from_kv_blocks(lucid.ones(1, 1, 1, dtype=lucid.int32, device=query.device),
                                    lucid.zeros(1, 1, 1, 1, dtype=lucid.int32, device=query.device),
                                    BLOCK_SIZE=_LARGE_SPARSE_BLOCK_SIZE, seq_lengths=(1, 1))


# -------------------------------------------------------------------- flex_attention

def _check_inputs(q, k, v, block_mask, enable_gqa):
    if q.device != k.device or q.device != v.device:
        raise ValueError(f"flex_attention: expected query, key, and value to have the same device type, but got "
                         f"query.device: {q.device}, key.device: {k.device}, and value.device: {v.device} instead.")
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise NotImplementedError("flex_attention: NYI: query, key, and value must be 4D tensors")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"flex_attention: expect query and key/value to have the same embedding dimension but got "
                         f"E={q.shape[-1]} and E={k.shape[-1]}.")
    if k.shape[:3] != v.shape[:3]:
        raise ValueError(f"flex_attention: key {tuple(k.shape)} and value {tuple(v.shape)} must agree in (B, H, S)")
    Hq, Hkv = q.shape[1], k.shape[1]
    if not enable_gqa and Hq != Hkv:
        raise ValueError(f"flex_attention: expect query and key/value to have the same number of heads but got "
                         f"Hq={Hq} and Hkv={Hkv}. Try setting enable_gqa=True for GQA.")
    if enable_gqa and Hq % Hkv:
        raise ValueError(f"flex_attention: expect number of query heads to be a multiple of kv heads for GQA but "
                         f"got Hq={Hq} and Hkv={Hkv}.")
    if q.shape[0] != k.shape[0]:
        if block_mask is None:
            raise ValueError(f"flex_attention: expect query and key/value to have the same batch size, or non-none "
                             f"block_mask, but got block_mask=None, Bq={q.shape[0]}, and Bkv={k.shape[0]}.")
        if block_mask.kv_num_blocks.shape[0] != q.shape[0]:
            raise ValueError(f"flex_attention: expect query and key/value to have the same batch size, or "
                             f"block_mask and query to have the same batch size, but got Bq={q.shape[0]}, "
                             f"Bkv={k.shape[0]}, B_block_mask={block_mask.kv_num_blocks.shape[0]}.")
        if k.shape[0] != 1:
            raise RuntimeError(f"flex_attention: Bq and Bkv must broadcast. Got Bq={q.shape[0]} and Bkv={k.shape[0]}")


def _check_block_mask(block_mask, q, k):
    if block_mask.BLOCK_SIZE == (_LARGE_SPARSE_BLOCK_SIZE, _LARGE_SPARSE_BLOCK_SIZE):
        return  # PyTorch's "no-op" mask, made for any length
    bq, bkv = block_mask.shape[-2], block_mask.shape[-1]
    L, S = q.shape[-2], k.shape[-2]
    if L > bq or S > bkv:
        raise ValueError(f"flex_attention: block_mask was created for block_mask.shape={block_mask.shape} but got "
                         f"q_len={L} and kv_len={S}. As the block mask was created for a smaller length than you're "
                         "using it for, you likely need to create a new block mask.")
    if L != bq or S != bkv:
        raise ValueError(f"flex_attention: block_mask was created for block_mask.shape={block_mask.shape} but got "
                         f"q_len={L} and kv_len={S}. As the block mask was created for a larger length than you're "
                         "using it for, you can either 1. create a new block mask with the correct length, or 2. "
                         "'adjust' the existing block mask to the correct length by calling "
                         "block_mask._adjust(q_len, kv_len).")
    if block_mask.kv_num_blocks.device != q.device:
        raise RuntimeError(f"flex_attention: expect q/k/v and block_mask to be on the same device but got "
                           f"{q.device} and {block_mask.kv_num_blocks.device}.")


def _check_kernel_options(kernel_options):
    if kernel_options is None:
        return
    if "BACKEND" in kernel_options and kernel_options.get("FORCE_USE_FLEX_ATTENTION", False):
        raise RuntimeError("flex_attention: BACKEND cannot be combined with legacy FORCE_USE_FLEX_ATTENTION.")
    if "BACKEND" in kernel_options and kernel_options["BACKEND"] not in _BACKENDS:
        raise ValueError(f"flex_attention: invalid BACKEND value '{kernel_options['BACKEND']}'. "
                         f"Must be one of {_BACKENDS}")


def _attend(q, k, v, score_mod, block_mask, scale):
    """(out, lse, max_scores) of PyTorch's math path, in Lucid ops; see the module NOTEs."""
    lucid = _lucid()
    from ..functional.activation import softmax
    from ..functional.attention import _repeat_heads

    r = q.shape[1] // k.shape[1]
    k, v = _repeat_heads(k, r), _repeat_heads(v, r)
    B, H, L, S = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    if k.shape[0] != B:
        k, v = k.expand(B, *k.shape[1:]), v.expand(B, *v.shape[1:])
    wp = lucid.float64 if q.dtype == lucid.float64 else lucid.float32
    scores = (q.to(wp) @ k.to(wp).transpose(-2, -1)) * scale
    grid = (B, H, L, S)
    if score_mod is not None:
        b, h, m, n = _grid_indices(B, H, L, S, q.device)
        scores = _on_grid(score_mod(scores, b, h, m, n), grid, q.device, "score_mod").to(wp)
    allowed = block_mask._element_mask(B, H, L, S, q.device) if block_mask is not None else None
    if allowed is not None:
        scores = lucid.where(allowed, scores, -math.inf)
    # A row with every score -inf attends to nothing: output 0 and lse -inf (PyTorch's safe softmax);
    # its scores are zeroed first so neither softmax nor its gradient sees -inf - -inf.
    dead = lucid.isneginf(scores).all(dim=-1, keepdim=True)
    safe = lucid.where(dead, 0.0, scores)
    probs = lucid.where(dead, 0.0, softmax(safe, dim=-1))
    out = probs.to(q.dtype) @ v.to(q.dtype)
    lse = lucid.where(dead.squeeze(-1), -math.inf, lucid.logsumexp(safe, dim=-1))
    return out, lse, scores.detach().amax(dim=-1)


def flex_attention(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False,
                   return_lse=False, kernel_options=None, *, return_aux=None):
    """Scaled dot-product attention with a ``score_mod`` and a block-sparse ``mask_mod``.

    Computes ``softmax(mod(q k^T * scale)) v`` where ``score_mod(score, b, h, q_idx, kv_idx)``
    rewrites each score and positions that ``block_mask`` excludes get ``-inf``. Eager and
    exact (PyTorch's math path): the whole score matrix is formed. A query row with nothing
    to attend to gives 0 and an lse of ``-inf``. Differentiable in ``query``, ``key``,
    ``value`` and in tensors ``score_mod`` captures. Nested (jagged) inputs raise
    ``NotImplementedError``, as in PyTorch 2.13.

    Parameters
    ----------
    query : Tensor
        (B, Hq, L, E).
    key, value : Tensor
        (B, Hkv, S, E) and (B, Hkv, S, Ev); B may be 1 with a ``block_mask`` of batch B.
    score_mod : callable, optional
        ``(score, b, h, q_idx, kv_idx) -> score``, written as for scalars; Lucid calls it
        once on broadcast index tensors (NOTE [Mods on broadcast indices]).
    block_mask : BlockMask, optional
        Which positions may attend (default all); it must be made for (L, S).
    scale : float, optional
        Default ``1 / sqrt(E)``.
    enable_gqa : bool
        Share each key/value head among ``Hq // Hkv`` query heads.
    return_lse : bool
        Deprecated: also return the (B, Hq, L) log-sum-exp of the scores.
    kernel_options : dict, optional
        PyTorch's kernel knobs; accepted and ignored.
    return_aux : AuxRequest, optional
        Return ``(out, AuxOutput(lse, max_scores))`` with the requested fields (natural-log
        lse; ``max_scores`` is the row maximum of the modified scores, no gradient).

    Returns
    -------
    Tensor
        (B, Hq, L, Ev), or a tuple as above.

    Examples
    --------
    >>> import lucid
    >>> from lucid.nn.attention.flex_attention import AuxRequest, flex_attention
    >>> q = k = lucid.zeros(1, 1, 3, 2)
    >>> v = lucid.arange(3.).reshape(1, 1, 3, 1)
    >>> def causal(score, b, h, q_idx, kv_idx):
    ...     return lucid.where(q_idx >= kv_idx, score, float("-inf"))
    >>> out, aux = flex_attention(q, k, v, score_mod=causal, return_aux=AuxRequest(lse=True))
    >>> out.flatten()
    tensor([0. , 0.5, 1. ])
    >>> aux.lse
    tensor([[[0.       , 0.6931472, 1.0986123]]])
    """
    lucid = _lucid()
    if any(getattr(t, "is_nested", False) for t in (query, key, value)):  # PyTorch 2.13 dropped NJT support
        raise NotImplementedError("flex_attention does not support NestedTensor inputs, including "
                                  "torch.compile(flex_attention) with jagged NestedTensor inputs. Convert inputs to "
                                  "dense tensors before calling flex_attention.")
    q, k, v = (lucid.as_tensor(t) for t in (query, key, value))
    _check_inputs(q, k, v, block_mask, enable_gqa)
    if block_mask is not None:
        if block_mask.mask_mod is _sliced_mask_mod_error:
            raise RuntimeError("flex_attention: Cannot use mask_mod from a sliced BlockMask")
        _check_block_mask(block_mask, q, k)
    if return_lse and return_aux is not None:
        raise ValueError("flex_attention: Cannot specify both return_lse and return_aux. return_lse is deprecated, "
                         "please use return_aux=AuxRequest(lse=True) instead.")
    if return_lse:
        warnings.warn("flex_attention: return_lse is deprecated; please use return_aux=AuxRequest(lse=True) "
                      "instead.", FutureWarning, stacklevel=2)
    _check_kernel_options(kernel_options)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    out, lse, max_scores = _attend(q, k, v, score_mod, block_mask, scale)
    if return_aux is not None:
        return out, AuxOutput(lse=lse if return_aux.lse else None,
                              max_scores=max_scores if return_aux.max_scores else None)
    if return_lse:
        return out, lse
    return out
