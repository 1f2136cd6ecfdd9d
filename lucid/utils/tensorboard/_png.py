"""A PNG encoder on zlib alone, for TensorBoard image summaries (no Pillow needed)."""
from __future__ import annotations

import struct
import zlib

import numpy as np

_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# PNG colour types by channel count: grey, grey + alpha, RGB, RGBA (8 bits per sample).
_COLOR_TYPE = {1: 0, 2: 4, 3: 2, 4: 6}


def _chunk(kind: bytes, data: bytes) -> bytes:
    return b"".join((struct.pack(">I", len(data)), kind, data,
                     struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)))


def encode_png(pixels: np.ndarray, level: int = 6) -> bytes:
    """The PNG file of an ``(H, W, C)`` uint8 host array, ``C`` in 1..4.

    Every scanline uses filter type 0 (None); the pixels round-trip exactly.

    Examples
    --------
    >>> import numpy as np
    >>> from lucid.utils.tensorboard._png import encode_png
    >>> png = encode_png(np.zeros((2, 3, 3), dtype=np.uint8))
    >>> png[:8], png[12:16]
    (b'\\x89PNG\\r\\n\\x1a\\n', b'IHDR')
    """
    if pixels.dtype != np.uint8 or pixels.ndim != 3 or pixels.shape[2] not in _COLOR_TYPE:
        raise ValueError(f"encode_png: expected an (H, W, C) uint8 array with C in 1..4, got "
                         f"shape {pixels.shape} and dtype {pixels.dtype}")
    height, width, channels = pixels.shape
    if height < 1 or width < 1:
        raise ValueError(f"encode_png: an image needs at least one pixel, got {height}x{width}")
    rows = np.ascontiguousarray(pixels).reshape(height, width * channels)
    raw = np.concatenate([np.zeros((height, 1), np.uint8), rows], axis=1)  # filter byte 0 per row
    header = struct.pack(">IIBBBBB", width, height, 8, _COLOR_TYPE[channels], 0, 0, 0)
    return b"".join((_SIGNATURE, _chunk(b"IHDR", header),
                     _chunk(b"IDAT", zlib.compress(raw.tobytes(), level)), _chunk(b"IEND", b"")))
