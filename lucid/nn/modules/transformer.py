"""``lucid.nn.modules.transformer``: PyTorch's module path for the Transformer layers and the
private helpers code copied from PyTorch imports (``_get_clones``, ``_get_activation_fn``,
``_generate_square_subsequent_mask``, ``_detect_is_causal_mask``)."""
import copy

from .. import functional as F
from ..containers import ModuleList
from ..transformer import (Transformer, TransformerDecoder, TransformerDecoderLayer,  # noqa: F401
                           TransformerEncoder, TransformerEncoderLayer, _detect_is_causal_mask,
                           generate_square_subsequent_mask as _generate_square_subsequent_mask)

__all__ = ["Transformer", "TransformerEncoder", "TransformerDecoder", "TransformerEncoderLayer",
           "TransformerDecoderLayer"]


def _get_clones(module, N):
    """A ``ModuleList`` of ``N`` independent deep copies of ``module``."""
    return ModuleList([copy.deepcopy(module) for _ in range(N)])


def _get_activation_fn(activation):
    """``F.relu`` or ``F.gelu`` by name, as PyTorch's Transformer layers resolve ``activation``."""
    if activation == "relu":
        return F.relu
    if activation == "gelu":
        return F.gelu
    raise RuntimeError(f"activation should be relu/gelu, not {activation}")
