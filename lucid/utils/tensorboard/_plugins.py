"""Summaries of TensorBoard's plugins: tensors, PR curves, meshes, custom scalar layouts and the
embedding projector's files, as ``torch.utils.tensorboard`` writes them."""
from __future__ import annotations

import json
import math
import os

import numpy as np

from . import _records as rec
from ._png import encode_png

# NumPy dtype -> (tensorboard.DataType, how the values are listed).
_DTYPES = {
    "float32": (rec.DT_FLOAT, None), "float64": (rec.DT_DOUBLE, None),
    "float16": (rec.DT_HALF, "bits"), "int8": (rec.DT_INT8, None),
    "int16": (rec.DT_INT16, None), "int32": (rec.DT_INT32, None),
    "int64": (rec.DT_INT64, None), "uint8": (rec.DT_UINT8, None),
    "uint16": (rec.DT_UINT16, None), "uint32": (rec.DT_UINT32, None),
    "uint64": (rec.DT_UINT64, None), "bool": (rec.DT_BOOL, None),
    "complex64": (rec.DT_COMPLEX64, "complex"), "complex128": (rec.DT_COMPLEX128, "complex"),
}


def tensor_summary_value(tag, array, fname) -> bytes:
    """``Summary.Value`` of the ``tensor`` plugin holding the whole array."""
    kind = _DTYPES.get(array.dtype.name)
    if kind is None:
        raise ValueError(f"{fname}: {tag} has unsupported tensor dtype {array.dtype}")
    if array.nbytes >= 1 << 31:
        raise ValueError(f"{fname}: tensor is bigger than protocol buffer's hard limit of 2GB "
                         "in size")
    dtype, how = kind
    flat = array.reshape(-1)
    if how == "bits":  # the float16 bit patterns, which TensorBoard reads back as halves
        values = flat.view(np.uint16).tolist()
    elif how == "complex":  # interleaved real and imaginary parts
        values = flat.view(flat.real.dtype).tolist()
    else:
        values = flat.tolist()
    return rec.summary_value(tag, tensor=rec.tensor_values(dtype, array.shape, values),
                             metadata=rec.plugin_metadata("tensor"))


# ------------------------------------------------------------------------------ PR curves
def compute_curve(labels, predictions, num_thresholds, weights=None):
    """(6, num_thresholds) rows TP, FP, TN, FN, precision, recall: predictions are bucketed
    by ``floor(p * (num_thresholds - 1))``, counts summed from each threshold up."""
    weights = 1.0 if weights is None else weights
    buckets = np.int32(np.floor(predictions * (num_thresholds - 1)))
    labels = labels.astype(np.float64)
    rng = (0, num_thresholds - 1)
    tp_b, _ = np.histogram(buckets, bins=num_thresholds, range=rng, weights=labels * weights)
    fp_b, _ = np.histogram(buckets, bins=num_thresholds, range=rng,
                           weights=(1.0 - labels) * weights)
    tp, fp = np.cumsum(tp_b[::-1])[::-1], np.cumsum(fp_b[::-1])[::-1]
    tn, fn = fp[0] - fp, tp[0] - tp
    precision = tp / np.maximum(1e-7, tp + fp)
    recall = tp / np.maximum(1e-7, tp + fn)
    return np.stack((tp, fp, tn, fn, precision, recall))


def pr_curve_summary_value(tag, data, num_thresholds) -> bytes:
    """``Summary.Value`` of the ``pr_curves`` plugin: a (6, T) float tensor."""
    meta = rec.plugin_metadata("pr_curves", rec.pr_curve_plugin_data(num_thresholds))
    tensor = rec.tensor_values(rec.DT_FLOAT, data.shape, data.reshape(-1).tolist())
    return rec.summary_value(tag, tensor=tensor, metadata=meta)


# ---------------------------------------------------------------------------------- meshes
MESH_VERTEX, MESH_FACE, MESH_COLOR = 1, 2, 3  # tensorboard.mesh.MeshPluginData.ContentType
_MESH_NAMES = {MESH_VERTEX: "VERTEX", MESH_FACE: "FACE", MESH_COLOR: "COLOR"}


def mesh_summary_values(tag, parts, config_dict, fname):
    """One ``Summary.Value`` per present part (``[(array, content type), ...]``), tagged
    ``<tag>_VERTEX``/``_FACE``/``_COLOR``; each a (B, N, 3) float tensor."""
    json_config = "{}" if config_dict is None else json.dumps(config_dict, sort_keys=True)
    components = 0
    for _, kind in parts:
        components |= 1 << kind
    out = []
    for array, kind in parts:
        if array.ndim != 3:
            raise ValueError(f"{fname}: Tensor shape should be of shape BxNx3, but got "
                             f"{tuple(array.shape)}.")
        content = rec.mesh_plugin_data(tag, kind, json_config, array.shape, components)
        tensor = rec.tensor_values(rec.DT_FLOAT, array.shape, array.reshape(-1).tolist())
        out.append(rec.summary_value(f"{tag}_{_MESH_NAMES[kind]}", tensor=tensor,
                                     metadata=rec.plugin_metadata("mesh", content)))
    return out


# -------------------------------------------------------------------------- custom scalars
def custom_scalars_summary(layout, fname) -> bytes:
    """The ``custom_scalars__config__`` summary of a ``{category: {title: [kind, tags]}}``
    layout, ``kind`` ``"Multiline"`` or ``"Margin"`` (three tags: value, lower, upper)."""
    if not isinstance(layout, dict):
        raise TypeError(f"{fname}: layout should be a dict, got {type(layout).__name__}")
    cats = []
    for category, charts in layout.items():
        listed = []
        for title, spec in charts.items():
            kind, tags = spec[0], list(spec[1])
            if kind == "Margin" and len(tags) != 3:
                raise rec.InputError(f"{fname}: a Margin chart needs 3 tags (value, lower, upper), "
                                     f"got {len(tags)}")
            listed.append((title, kind, tags))
        cats.append((category, listed))
    tensor = rec.tensor(rec.DT_STRING, shape=[], string_val=[rec.custom_scalar_layout(cats)])
    return rec.summary(rec.summary_value("custom_scalars__config__", tensor=tensor,
                                         metadata=rec.plugin_metadata("custom_scalars")))


# ---------------------------------------------------------------------------- projector
def encode_tag(tag):
    """A tag as a directory name: ``%``, ``/`` and ``\\`` percent-encoded, as torch does."""
    return tag.replace("%", "%25").replace("/", "%2f").replace("\\", "%5c")


def _pbtxt_string(s):
    """A protobuf text-format string literal (C escapes, non-ASCII bytes in octal)."""
    out = []
    for b in s.encode("utf-8"):
        c = chr(b)
        if c in "\"'\\":
            out.append("\\" + c)
        elif c in "\n\r\t":
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t"}[c])
        elif b < 32 or b >= 127:
            out.append("\\%03o" % b)
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def projector_pbtxt(embeddings):
    """``projector_config.pbtxt`` (``ProjectorConfig`` in text format) for a list of dicts
    with ``tensor_name``, ``tensor_path`` and optional ``metadata_path``, ``sprite``."""
    lines = []
    for e in embeddings:
        lines.append("embeddings {")
        lines.append(f"  tensor_name: {_pbtxt_string(e['tensor_name'])}")
        if e.get("metadata_path"):
            lines.append(f"  metadata_path: {_pbtxt_string(e['metadata_path'])}")
        if e.get("sprite"):
            path, (w, h) = e["sprite"]
            lines += ["  sprite {", f"    image_path: {_pbtxt_string(path)}",
                      f"    single_image_dim: {w}", f"    single_image_dim: {h}", "  }"]
        lines.append(f"  tensor_path: {_pbtxt_string(e['tensor_path'])}")
        lines.append("}")
    return "".join(line + "\n" for line in lines)


def write_metadata_tsv(metadata, path, header, fname):
    if header:
        rows = [list(header)] + [list(m) for m in metadata]
        if any(len(r) != len(header) for r in rows):
            raise ValueError(f"{fname}: every metadata row needs one value per header column "
                             f"({len(header)})")
        lines = ["\t".join(str(e) for e in r) for r in rows]
    else:
        lines = [str(m) for m in metadata]
    with open(os.path.join(path, "metadata.tsv"), "wb") as f:
        f.write(("\n".join(lines) + "\n").encode("utf-8"))


def write_tensors_tsv(mat, path):
    with open(os.path.join(path, "tensors.tsv"), "wb") as f:
        for row in mat:
            f.write(("\t".join(str(x.item()) for x in row) + "\n").encode("utf-8"))


def write_sprite(label_img, path, grid, fname):
    """``sprite.png``: the (N, C, H, W) images, floats in [0, 1], in a square grid of
    ``ceil(sqrt(N))`` per row, padded with black to a square as torch pads it."""
    n, _, h, w = label_img.shape
    nrow = math.ceil(n ** 0.5)
    chw = grid(label_img, fname, ncols=nrow)
    side = chw.shape[2]
    square = np.zeros((max(side, chw.shape[1]), side, 3))
    square[:chw.shape[1]] = chw.transpose(1, 2, 0)
    pixels = (square * 255).clip(0, 255).astype(np.uint8)
    with open(os.path.join(path, "sprite.png"), "wb") as f:
        f.write(encode_png(pixels))
    return w, h
