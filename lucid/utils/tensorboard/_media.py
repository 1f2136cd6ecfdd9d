"""Audio (WAV), video (GIF), matplotlib figures and boxes drawn on images, for ``SummaryWriter``.

Host NumPy and the standard library only: WAV through ``wave``, GIF through the LZW encoder
below (PyTorch needs moviepy for video), figures through matplotlib's own Agg canvas.
"""
from __future__ import annotations

import io
import struct
import sys
import wave

import numpy as np

from . import _records as rec


# ---------------------------------------------------------------------------------- audio
def audio_summary_value(tag, array, sample_rate, fname) -> bytes:
    """``Summary.Value{audio}``: one channel of 16-bit PCM in a WAV file, as torch writes it
    (values clipped to [-1, 1], scaled by 32767 and truncated)."""
    array = np.squeeze(array)
    if array.ndim != 1:
        raise rec.InputError(f"{fname}: expected a one-dimensional sound (after squeezing), got "
                             f"shape {array.shape}")
    if array.dtype.kind not in "biuf":
        raise TypeError(f"{fname}: expected real samples, got dtype {array.dtype}")
    if array.size and np.abs(array).max() > 1:
        array = array.clip(-1, 1)
    pcm = (array * np.iinfo(np.int16).max).astype("<i2")
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sample_rate)
        w.writeframes(pcm.tobytes())
    return rec.summary_value(tag, audio=rec.audio(sample_rate, 1, pcm.shape[-1], buf.getvalue()))


# ---------------------------------------------------------------------------------- video
def prepare_video(v):
    """(N, T, C, H, W) -> (T, H', W', C): the N clips tiled in a grid of a power of two,
    as torch's ``_prepare_video`` (uint8 scaled to [0, 1] first)."""
    b, t, c, h, w = v.shape
    if v.dtype == np.uint8:
        v = np.float32(v) / 255.0
    if b & (b - 1):  # pad the batch to the next power of two
        v = np.concatenate((v, np.zeros((2 ** b.bit_length() - b, t, c, h, w))), axis=0)
    n_rows = 2 ** ((b.bit_length() - 1) // 2)
    n_cols = v.shape[0] // n_rows
    v = v.reshape(n_rows, n_cols, t, c, h, w).transpose(2, 0, 4, 1, 5, 3)
    return v.reshape(t, n_rows * h, n_cols * w, c)


def _lzw(indices: bytes, min_code_size: int) -> bytes:
    """GIF's variable-width LZW of the colour indices, packed into 255-byte sub-blocks."""
    clear, end = 1 << min_code_size, (1 << min_code_size) + 1
    width, next_code, table = min_code_size + 1, end + 1, {}
    acc = nbits = 0
    out = bytearray()

    def emit(code):
        nonlocal acc, nbits
        acc |= code << nbits
        nbits += width
        while nbits >= 8:
            out.append(acc & 0xFF)
            acc >>= 8
            nbits -= 8

    emit(clear)
    prefix = None
    for k in indices:
        if prefix is None:
            prefix = k
            continue
        code = table.get((prefix, k))
        if code is not None:
            prefix = code
            continue
        emit(prefix)
        if next_code < 4096:
            table[(prefix, k)] = next_code
            next_code += 1
            if next_code > (1 << width) and width < 12:
                width += 1
        else:  # the table is full: start again
            emit(clear)
            table, next_code, width = {}, end + 1, min_code_size + 1
        prefix = k
    if prefix is not None:
        emit(prefix)
    emit(end)
    if nbits:
        out.append(acc & 0xFF)
    return b"".join(bytes((len(out[i:i + 255]),)) + out[i:i + 255]
                    for i in range(0, len(out), 255)) + b"\0"


def _palette(frame):
    """(palette (256, 3) uint8, indices (H, W)): exact when the frame has at most 256 colours,
    else the 6x7x6 colour cube (nearest level per channel)."""
    flat = frame.reshape(-1, 3)
    colors, inverse = np.unique(flat, axis=0, return_inverse=True)
    if len(colors) > 256:
        levels = np.array([5, 6, 5])
        q = np.rint(flat.astype(np.float64) * levels / 255).astype(np.int64)
        inverse = (q[:, 0] * 7 + q[:, 1]) * 6 + q[:, 2]
        grid = np.stack(np.meshgrid(np.arange(6), np.arange(7), np.arange(6), indexing="ij"), -1)
        colors = np.rint(grid.reshape(-1, 3) * 255 / levels).astype(np.uint8)
    palette = np.zeros((256, 3), np.uint8)
    palette[:len(colors)] = colors
    return palette, inverse.reshape(frame.shape[:2]).astype(np.uint8)


def encode_gif(frames, fps) -> bytes:
    """An endlessly looping GIF89a of ``(T, H, W, 3)`` uint8 frames, one colour table each."""
    t, h, w, _ = frames.shape
    delay = max(int(round(100 / fps)), 1)  # hundredths of a second
    out = [b"GIF89a", struct.pack("<HHBBB", w, h, 0, 0, 0),
           b"\x21\xff\x0bNETSCAPE2.0\x03\x01\x00\x00\x00"]
    for frame in frames:
        palette, idx = _palette(frame)
        out.append(b"\x21\xf9\x04\x04" + struct.pack("<H", delay) + b"\x00\x00")
        out.append(b"\x2c" + struct.pack("<HHHHB", 0, 0, w, h, 0x87) + palette.tobytes())
        out.append(b"\x08" + _lzw(idx.tobytes(), 8))
    out.append(b"\x3b")
    return b"".join(out)


def video_image(vid, fps, fname) -> bytes:
    """``Summary.Image`` holding the GIF of a ``(N, T, C, H, W)`` video batch."""
    if vid.ndim != 5:
        raise ValueError(f"{fname}: expected a video batch of shape (N, T, C, H, W), got "
                         f"shape {vid.shape}")
    if vid.dtype.kind not in "biuf":
        raise TypeError(f"{fname}: expected real pixel values, got dtype {vid.dtype}")
    if fps <= 0:
        raise ValueError(f"{fname}: fps must be positive, got {fps}")
    v = prepare_video(vid)
    scale = 1 if v.dtype == np.uint8 else 255
    v = (v.astype(np.float32) * scale).clip(0, 255).astype(np.uint8)
    t, h, w, c = v.shape
    if c not in (1, 3, 4) or 0 in v.shape:
        raise ValueError(f"{fname}: cannot encode frames of {h}x{w} pixels with {c} channels")
    rgb = np.concatenate([v] * 3, axis=3) if c == 1 else v[..., :3]
    return rec.image(h, w, c, encode_gif(rgb, fps))


# -------------------------------------------------------------------------------- figures
def figure_to_image(figure, close):
    """(3, H, W) uint8 pixels of a matplotlib figure, drawn on its Agg canvas."""
    canvas = figure.canvas
    if not hasattr(canvas, "buffer_rgba"):  # a GUI canvas: draw on an Agg one instead
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        canvas = FigureCanvasAgg(figure)
    canvas.draw()
    w, h = canvas.get_width_height()
    data = np.frombuffer(canvas.buffer_rgba(), dtype=np.uint8)
    image = data.reshape(h, w, 4)[:, :, :3].transpose(2, 0, 1)
    plt = sys.modules.get("matplotlib.pyplot")  # only loaded when figures came from pyplot
    if close and plt is not None:
        plt.close(figure)
    return image


# ---------------------------------------------------------------------------------- boxes
def draw_boxes(pixels, boxes, labels, thickness=2):
    """Red ``(xmin, ymin, xmax, ymax)`` rectangles of ``thickness`` pixels on an (H, W, C)
    uint8 image; labels in black on red above each box's bottom-left (needs Pillow)."""
    out = pixels.copy()
    h, w = out.shape[:2]
    red = np.array([255, 0, 0, 255][:out.shape[2]], np.uint8)
    half = thickness // 2
    for x0, y0, x1, y1 in np.rint(boxes).astype(np.int64):
        for a, b, c0, c1 in ((y0, y0, x0, x1), (y1, y1, x0, x1)):  # horizontal edges
            out[max(a - half, 0):max(min(b - half + thickness, h), 0),
                max(c0 - half, 0):max(min(c1 - half + thickness, w), 0)] = red
        for a, b in ((x0, x0), (x1, x1)):  # vertical edges
            out[max(y0 - half, 0):max(min(y1 - half + thickness, h), 0),
                max(a - half, 0):max(min(b - half + thickness, w), 0)] = red
    if labels is not None:
        out = _draw_labels(out, boxes, labels)
    return out


def _draw_labels(pixels, boxes, labels):
    try:
        from PIL import Image, ImageDraw, ImageFont
    except ImportError:
        raise ImportError("add_image_with_boxes: drawing labels needs Pillow "
                          "(pip install pillow); pass labels=None to draw the boxes only") from None
    image = Image.fromarray(pixels)
    draw, font = ImageDraw.Draw(image), ImageFont.load_default()
    for (left, _, _, bottom), text in zip(boxes, labels):
        x0, y0, x1, y1 = font.getbbox(text)
        tw, th = x1 - x0, y1 - y0
        margin = np.ceil(0.05 * th)
        draw.rectangle([(left, bottom - th - 2 * margin), (left + tw, bottom)], fill="Red")
        draw.text((left + margin, bottom - th - margin), text, fill="black", font=font)
    return np.asarray(image)


def resize_nearest(pixels, rescale):
    """Nearest-neighbour resize of an (H, W, C) image by ``rescale`` (torch: Lanczos)."""
    h, w = pixels.shape[:2]
    nh, nw = int(h * rescale), int(w * rescale)
    if (nh, nw) == (h, w):
        return pixels
    rows = np.minimum((np.arange(nh) + 0.5) * h / nh, h - 1).astype(np.int64)
    cols = np.minimum((np.arange(nw) + 0.5) * w / nw, w - 1).astype(np.int64)
    return pixels[rows][:, cols]
