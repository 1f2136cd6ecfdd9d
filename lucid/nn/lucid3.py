"""``lucid.nn`` layers of upstream Lucid 3 that PyTorch lacks (See NOTE [Lucid 3 names]).

``FusedLinear`` (a ``Linear`` followed by ReLU or tanh-GELU), the positional-encoding modules
(tables kept as non-persistent buffers, so they follow ``.to()`` and stay out of ``state_dict``),
the diffusion ``TimestepEmbedding`` and the ``MultilabelMarginLoss`` spelling.
"""
from __future__ import annotations

from . import functional as F
from .functional.lucid3 import _angles
from .activation import SiLU
from .linear import Linear
from .loss import MultiLabelMarginLoss
from .module import Module

__all__ = ["FusedLinear", "SinusoidalEmbedding", "SinusoidalEmbedding2D", "RotaryEmbedding", "TimestepEmbedding",
           "MultilabelMarginLoss"]

MultilabelMarginLoss = MultiLabelMarginLoss  # Lucid 3 exports both spellings


class FusedLinear(Linear):
    """``activation(x W^T + b)`` with ``activation`` ``"relu"`` or ``"gelu"`` (tanh form).

    Parameters and initialisation are :class:`Linear`'s (same ``state_dict`` keys).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.FusedLinear(3, 2, activation="gelu")(lucid.zeros(4, 3)).shape
    (4, 2)
    """

    def __init__(self, in_features, out_features, activation="relu", bias=True, device=None, dtype=None):
        if activation not in ("relu", "gelu"):
            raise ValueError(f"FusedLinear: unsupported activation {activation!r}; choose from ['gelu', 'relu']")
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.activation = activation

    def forward(self, input):
        out = F.linear(input, self.weight, self.bias)
        return F.relu(out) if self.activation == "relu" else F.gelu(out, approximate="tanh")

    def extra_repr(self):
        return super().extra_repr() + f", activation={self.activation!r}"


class SinusoidalEmbedding(Module):
    """Fixed sinusoidal position table (:func:`lucid.nn.functional.sinusoidal_embedding`);
    ``forward()`` returns the ``(num_positions, embedding_dim)`` buffer ``pe``.

    Examples
    --------
    >>> import lucid.nn as nn
    >>> nn.SinusoidalEmbedding(8, 4)().shape
    (8, 4)
    """

    def __init__(self, num_positions, embedding_dim, *, base=10_000.0, device=None, dtype=None):
        super().__init__()
        if embedding_dim % 2:
            raise ValueError(f"SinusoidalEmbedding requires an even embedding_dim, got {embedding_dim}")
        self.num_positions, self.embedding_dim, self.base = num_positions, embedding_dim, base
        self.register_buffer("pe", F.sinusoidal_embedding(num_positions, embedding_dim, base=base, device=device,
                                                           dtype=dtype),
                             persistent=False)

    def forward(self):
        return self.pe


class SinusoidalEmbedding2D(Module):
    """Fixed DETR 2-D position table (:func:`lucid.nn.functional.sinusoidal_embedding_2d`);
    ``forward()`` returns the ``(height * width, embedding_dim)`` buffer ``pe``.

    Examples
    --------
    >>> import lucid.nn as nn
    >>> nn.SinusoidalEmbedding2D(2, 3, 8)().shape
    (6, 8)
    """

    def __init__(self, height, width, embedding_dim, *, base=10_000.0, device=None, dtype=None):
        super().__init__()
        if embedding_dim % 4:
            raise ValueError(f"SinusoidalEmbedding2D requires embedding_dim divisible by 4, got {embedding_dim}")
        self.height, self.width, self.embedding_dim, self.base = height, width, embedding_dim, base
        self.register_buffer("pe", F.sinusoidal_embedding_2d(height, width, embedding_dim, base=base,
                                                              device=device, dtype=dtype),
                             persistent=False)

    def forward(self):
        return self.pe


class RotaryEmbedding(Module):
    """Cosine and sine tables of rotary position embedding (``forward()`` returns ``(cos, sin)``,
    each ``(max_position_embeddings, head_dim)``, for :func:`lucid.nn.functional.apply_rotary_emb`).

    ``theta[p, i] = p * base ** (-2 i / head_dim)`` for ``i < head_dim / 2``, repeated over the
    two halves of the head dim (the LLaMA / HF layout).

    Examples
    --------
    >>> import lucid.nn as nn
    >>> cos, sin = nn.RotaryEmbedding(4, 6)()
    >>> cos.shape
    (6, 4)
    """

    def __init__(self, head_dim, max_position_embeddings, base=10_000.0, *, device=None, dtype=None):
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"RotaryEmbedding requires an even head_dim, got {head_dim}")
        import lucid

        self.head_dim, self.max_position_embeddings, self.base = head_dim, max_position_embeddings, base
        freqs = _angles(max_position_embeddings, head_dim, base, device)  # p * base ** (-2i / head_dim)
        emb = lucid.cat([freqs, freqs], dim=-1)
        dtype = dtype if dtype is not None else lucid.get_default_dtype()
        self.register_buffer("cos_cached", lucid.cos(emb).to(dtype), persistent=False)
        self.register_buffer("sin_cached", lucid.sin(emb).to(dtype), persistent=False)

    def forward(self):
        return self.cos_cached, self.sin_cached


class TimestepEmbedding(Module):
    """Diffusion timestep embedding: ``[cos(t w), sin(t w)]`` (``[sin, cos]`` with
    ``flip_sin_to_cos=False``) then ``Linear -> SiLU -> Linear``, with
    ``w_i = base ** (-i / (in_dim/2 - 1))`` (Ho et al. 2020).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.TimestepEmbedding(4, 8)(lucid.tensor([0, 5])).shape
    (2, 8)
    """

    def __init__(self, in_dim, out_dim, *, base=10_000.0, flip_sin_to_cos=True, device=None, dtype=None):
        super().__init__()
        if in_dim % 2:
            raise ValueError(f"TimestepEmbedding requires an even in_dim, got {in_dim}")
        self.in_dim, self.out_dim, self.base = in_dim, out_dim, base
        self.flip_sin_to_cos = flip_sin_to_cos  # True: [cos, sin] halves; False: [sin, cos]
        self.linear_1 = Linear(in_dim, out_dim, device=device, dtype=dtype)
        self.act = SiLU()
        self.linear_2 = Linear(out_dim, out_dim, device=device, dtype=dtype)

    def _sinusoidal(self, timesteps):
        import lucid

        half = self.in_dim // 2
        denom = float(half - 1) if half > 1 else 1.0
        freqs = lucid.pow(float(self.base), lucid.arange(half, dtype=lucid.float64, device=timesteps.device)
                          * (-1.0 / denom))
        ang = timesteps.to(lucid.float64).unsqueeze(-1) * freqs
        halves = [lucid.cos(ang), lucid.sin(ang)] if self.flip_sin_to_cos else [lucid.sin(ang), lucid.cos(ang)]
        return lucid.cat(halves, dim=-1).to(self.linear_1.weight.dtype)

    def forward(self, timesteps):
        return self.linear_2(self.act(self.linear_1(self._sinusoidal(timesteps))))

