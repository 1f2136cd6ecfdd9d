"""The ``SummaryWriter`` methods beyond scalars, histograms, images, text and hparams: graphs,
embeddings, PR curves, tensors, media, meshes and custom scalar layouts (a base class of
``SummaryWriter``, which supplies ``_add``, ``_get_file_writer`` and ``add_image``)."""
from __future__ import annotations

import os
import time

import numpy as np

from . import _media, _plugins
from . import _records as rec


def _w():
    """The writer module (it imports this one, so it is looked up when first needed)."""
    from . import writer

    return writer


class MoreSummaries:
    """Mixed into ``SummaryWriter``; see its docstring."""

    # ----------------------------------------------------------------------- graphs
    def add_graph(self, model, input_to_model=None, verbose=False, use_strict_trace=True):
        """Log the graph of ``model`` for TensorBoard's Graphs tab.

        The model runs once (in eval mode, restored afterwards) on a detached copy of
        ``input_to_model`` (a tensor or a tuple of arguments) and the graph is read off the
        autograd tape: one node per op, scoped by module path (``Net/conv1/conv``), plus
        ``input/...``, ``output/...`` and parameter nodes, with output shapes where known.
        No hook, tape or ``.grad`` is left behind. ``verbose`` prints the nodes;
        ``use_strict_trace`` is accepted for PyTorch compatibility and has no effect.

        Examples
        --------
        >>> import tempfile, lucid, lucid.nn as nn
        >>> from lucid.utils.tensorboard import SummaryWriter
        >>> with tempfile.TemporaryDirectory() as d, SummaryWriter(d) as w:
        ...     w.add_graph(nn.Sequential(nn.Linear(4, 2), nn.ReLU()), lucid.randn(3, 4))
        """
        from ._graph import graph_def

        gd = graph_def(model, input_to_model, verbose)
        fw, wall = self._get_file_writer(), time.time()
        fw.add_event(rec.graph_event(wall, gd))
        fw.add_event(rec.run_metadata_event(wall, "step1", rec.cpu_run_metadata()))

    def add_onnx_graph(self, prototxt):
        """Not supported: Lucid has no ONNX support to read ``prototxt`` with (PyTorch needs the
        ``onnx`` package here). Use :meth:`add_graph` on the model instead."""
        raise NotImplementedError(
            "add_onnx_graph: Lucid has no ONNX support (it cannot load an ONNX model); log the "
            "model's graph with add_graph(model, input_to_model) instead")

    # ------------------------------------------------------------------- embeddings
    def add_embedding(self, mat, metadata=None, label_img=None, global_step=None,
                      tag="default", metadata_header=None):
        """Write an embedding for the Projector tab: ``<log_dir>/<step:05d>/<tag>/`` gets
        ``tensors.tsv`` (the ``(N, D)`` rows), ``metadata.tsv`` (one label, or one row under
        ``metadata_header``, per point) and ``sprite.png`` (``label_img``, ``(N, C, H, W)``
        in [0, 1]); ``<log_dir>/projector_config.pbtxt`` lists every embedding written.

        Examples
        --------
        >>> import os, tempfile, lucid
        >>> from lucid.utils.tensorboard import SummaryWriter
        >>> with tempfile.TemporaryDirectory() as d:
        ...     with SummaryWriter(d) as w:
        ...         w.add_embedding(lucid.randn(4, 3), metadata=["a", "b", "c", "d"])
        ...     sorted(os.listdir(os.path.join(d, "00000", "default")))
        ['metadata.tsv', 'tensors.tsv']
        """
        fname, writer = "add_embedding", _w()
        mat = writer._host(mat, fname)
        if mat.ndim != 2:
            raise rec.InputError(f"{fname}: mat should be 2D (points, features), got shape "
                                 f"{mat.shape}")
        if metadata is not None and len(metadata) != mat.shape[0]:
            raise rec.InputError(f"{fname}: #labels ({len(metadata)}) should equal #data points "
                                 f"({mat.shape[0]})")
        if label_img is not None:
            label_img = writer._host(label_img, fname)
            if label_img.ndim != 4 or label_img.shape[0] != mat.shape[0]:
                raise rec.InputError(f"{fname}: label_img should be (N, C, H, W) with N = "
                                     f"{mat.shape[0]} data points, got shape {label_img.shape}")
        step = 0 if global_step is None else global_step
        subdir = f"{str(step).zfill(5)}/{_plugins.encode_tag(tag)}"
        logdir = self._get_file_writer().get_logdir()
        save_path = os.path.join(logdir, subdir)
        if os.path.exists(save_path) and not os.path.isdir(save_path):
            raise NotADirectoryError(f"{fname}: Path: `{save_path}` exists, but is a file. "
                                     "Cannot proceed.")
        os.makedirs(save_path, exist_ok=True)
        info = {"tensor_name": f"{tag}:{str(step).zfill(5)}",
                "tensor_path": os.path.join(subdir, "tensors.tsv")}
        if metadata is not None:
            _plugins.write_metadata_tsv(metadata, save_path, metadata_header, fname)
            info["metadata_path"] = os.path.join(subdir, "metadata.tsv")
        if label_img is not None:
            dims = _plugins.write_sprite(label_img, save_path, writer._grid, fname)
            info["sprite"] = (os.path.join(subdir, "sprite.png"), dims)
        _plugins.write_tensors_tsv(mat, save_path)
        # The config is rewritten whole each time: a file system need not support appending.
        self._projector_embeddings = getattr(self, "_projector_embeddings", []) + [info]
        with open(os.path.join(logdir, "projector_config.pbtxt"), "wb") as f:
            f.write(_plugins.projector_pbtxt(self._projector_embeddings).encode("utf-8"))

    # -------------------------------------------------------------------- PR curves
    def add_pr_curve(self, tag, labels, predictions, global_step=None, num_thresholds=127,
                     weights=None, walltime=None):
        """Log a precision-recall curve of binary ``labels`` against ``predictions`` in [0, 1]
        at ``num_thresholds`` (at most 127) evenly spaced thresholds.

        Examples
        --------
        >>> import tempfile, lucid
        >>> from lucid.utils.tensorboard import SummaryWriter
        >>> with tempfile.TemporaryDirectory() as d, SummaryWriter(d) as w:
        ...     w.add_pr_curve("pr", lucid.tensor([0, 1, 1, 0]),
        ...                    lucid.tensor([0.1, 0.8, 0.6, 0.4]), global_step=0)
        """
        fname, writer = "add_pr_curve", _w()
        labels, predictions = writer._host(labels, fname), writer._host(predictions, fname)
        if labels.shape != predictions.shape:
            raise ValueError(f"{fname}: labels {labels.shape} and predictions "
                             f"{predictions.shape} should have the same shape")
        if weights is not None:
            weights = writer._host(weights, fname)
        num_thresholds = min(int(num_thresholds), 127)
        data = _plugins.compute_curve(labels, predictions, num_thresholds, weights)
        self._add(rec.summary(_plugins.pr_curve_summary_value(tag, data, num_thresholds)),
                  global_step, walltime)

    def add_pr_curve_raw(self, tag, true_positive_counts, false_positive_counts,
                         true_negative_counts, false_negative_counts, precision, recall,
                         global_step=None, num_thresholds=127, weights=None, walltime=None):
        """Log a precision-recall curve given by its six per-threshold rows (TP, FP, TN, FN
        counts, precision, recall; equal lengths). ``weights`` is unused, as in PyTorch.

        Examples
        --------
        >>> import tempfile
        >>> from lucid.utils.tensorboard import SummaryWriter
        >>> with tempfile.TemporaryDirectory() as d, SummaryWriter(d) as w:
        ...     w.add_pr_curve_raw("pr", [2, 1], [2, 0], [0, 2], [0, 1], [0.5, 1.0],
        ...                        [1.0, 0.5], global_step=0, num_thresholds=2)
        """
        fname, writer = "add_pr_curve_raw", _w()
        rows = [writer._host(r, fname).reshape(-1) for r in (
            true_positive_counts, false_positive_counts, true_negative_counts,
            false_negative_counts, precision, recall)]
        if len({r.size for r in rows}) != 1:
            raise ValueError(f"{fname}: the six rows should have the same length, got "
                             f"{[r.size for r in rows]}")
        data = np.stack(rows)
        self._add(rec.summary(_plugins.pr_curve_summary_value(
            tag, data, min(int(num_thresholds), 127))), global_step, walltime)

    # ---------------------------------------------------------------------- tensors
    def add_tensor(self, tag, tensor, global_step=None, walltime=None):
        """Log a whole tensor (any shape; float, int, bool or complex) for the tensor plugin.

        Examples
        --------
        >>> import tempfile, lucid
        >>> from lucid.utils.tensorboard import SummaryWriter
        >>> with tempfile.TemporaryDirectory() as d, SummaryWriter(d) as w:
        ...     w.add_tensor("x", lucid.tensor([1, 2, 3]), global_step=0)
        """
        array = _w()._host(tensor, "add_tensor")
        self._add(rec.summary(_plugins.tensor_summary_value(tag, array, "add_tensor")),
                  global_step, walltime)

    # ------------------------------------------------------------------------ media
    def add_figure(self, tag, figure, global_step=None, close=True, walltime=None):
        """Log a matplotlib figure (or a list of them, as a grid) rendered as an image;
        ``close`` closes it in pyplot afterwards.

        Examples
        --------
        >>> import tempfile
        >>> from matplotlib.figure import Figure
        >>> from lucid.utils.tensorboard import SummaryWriter
        >>> fig = Figure(figsize=(2, 1), dpi=20)
        >>> _ = fig.add_subplot().plot([0, 1], [1, 0])
        >>> with tempfile.TemporaryDirectory() as d, SummaryWriter(d) as w:
        ...     w.add_figure("plot", fig, global_step=0)
        """
        if isinstance(figure, list):
            images = np.stack([_media.figure_to_image(f, close) for f in figure])
            self.add_image(tag, images, global_step, walltime, dataformats="NCHW")
        else:
            self.add_image(tag, _media.figure_to_image(figure, close), global_step, walltime,
                           dataformats="CHW")

    def add_image_with_boxes(self, tag, img_tensor, box_tensor, global_step=None,
                             walltime=None, rescale=1, dataformats="CHW", labels=None):
        """Log an image with red boxes drawn on it: ``box_tensor`` is ``(N, 4)`` rows
        ``(xmin, ymin, xmax, ymax)`` in pixels; ``labels`` (one per box, else ignored, as in
        PyTorch) are written on them (needs Pillow). ``rescale`` resizes the result
        (nearest neighbour).

        Examples
        --------
        >>> import tempfile, lucid
        >>> from lucid.utils.tensorboard import SummaryWriter
        >>> with tempfile.TemporaryDirectory() as d, SummaryWriter(d) as w:
        ...     w.add_image_with_boxes("det", lucid.zeros(3, 8, 8),
        ...                            lucid.tensor([[1.0, 1.0, 5.0, 6.0]]), global_step=0)
        """
        fname, writer = "add_image_with_boxes", _w()
        boxes = writer._host(box_tensor, fname)
        if boxes.ndim != 2 or boxes.shape[1] != 4:
            raise ValueError(f"{fname}: box_tensor should be (N, 4) rows (xmin, ymin, xmax, "
                             f"ymax), got shape {boxes.shape}")
        if labels is not None:
            labels = [labels] if isinstance(labels, str) else list(labels)
            if len(labels) != boxes.shape[0]:
                labels = None
        pixels = writer._pixels(img_tensor, dataformats, fname)
        pixels = _media.resize_nearest(_media.draw_boxes(pixels, boxes, labels), rescale)
        if 0 in pixels.shape:
            raise ValueError(f"{fname}: rescale={rescale} leaves no pixel")
        image = rec.image(*pixels.shape, writer.encode_png(pixels))
        self._add(rec.summary(rec.summary_value(tag, image=image)), global_step, walltime)

    def add_audio(self, tag, snd_tensor, global_step=None, sample_rate=44100, walltime=None):
        """Log a mono sound (``(1, L)`` or ``(L,)``, values in [-1, 1], clipped) as a 16-bit
        WAV file.

        Examples
        --------
        >>> import math, tempfile, lucid
        >>> from lucid.utils.tensorboard import SummaryWriter
        >>> tone = (lucid.arange(800) * (2 * math.pi * 440 / 8000)).sin()
        >>> with tempfile.TemporaryDirectory() as d, SummaryWriter(d) as w:
        ...     w.add_audio("tone", tone, global_step=0, sample_rate=8000)
        """
        array = _w()._host(snd_tensor, "add_audio")
        value = _media.audio_summary_value(tag, array, sample_rate, "add_audio")
        self._add(rec.summary(value), global_step, walltime)

    def add_video(self, tag, vid_tensor, global_step=None, fps=4, walltime=None):
        """Log a batch of clips ``(N, T, C, H, W)`` (floats in [0, 1] or uint8) as one
        looping GIF, the clips tiled in a grid. The GIF is encoded here (PyTorch needs
        moviepy); frames with more than 256 colours are mapped to a 6x7x6 colour cube.

        Examples
        --------
        >>> import tempfile, lucid
        >>> from lucid.utils.tensorboard import SummaryWriter
        >>> with tempfile.TemporaryDirectory() as d, SummaryWriter(d) as w:
        ...     w.add_video("clip", lucid.rand(1, 4, 3, 8, 8), global_step=0, fps=2)
        """
        vid = _w()._host(vid_tensor, "add_video")
        image = _media.video_image(vid, fps, "add_video")
        self._add(rec.summary(rec.summary_value(tag, image=image)), global_step, walltime)

    # ----------------------------------------------------------------------- meshes
    def add_mesh(self, tag, vertices, colors=None, faces=None, config_dict=None,
                 global_step=None, walltime=None):
        """Log a mesh or point cloud for the Mesh tab: ``vertices`` ``(B, N, 3)``, optional
        ``colors`` ``(B, N, 3)`` (0 to 255) and ``faces`` ``(B, F, 3)`` (vertex indices);
        ``config_dict`` holds three.js settings (camera, lights, material).

        Examples
        --------
        >>> import tempfile, lucid
        >>> from lucid.utils.tensorboard import SummaryWriter
        >>> v = lucid.tensor([[[1.0, 1, 1], [-1, -1, 1], [1, -1, -1], [-1, 1, -1]]])
        >>> f = lucid.tensor([[[0, 2, 3], [0, 3, 1], [0, 1, 2], [1, 3, 2]]])
        >>> with tempfile.TemporaryDirectory() as d, SummaryWriter(d) as w:
        ...     w.add_mesh("tetra", vertices=v, faces=f, global_step=0)
        """
        fname, writer = "add_mesh", _w()
        parts = [(writer._host(t, fname), kind) for t, kind in (
            (vertices, _plugins.MESH_VERTEX), (faces, _plugins.MESH_FACE),
            (colors, _plugins.MESH_COLOR)) if t is not None]
        values = _plugins.mesh_summary_values(tag, parts, config_dict, fname)
        self._add(rec.summary(*values), global_step, walltime)

    # --------------------------------------------------------------- custom scalars
    def add_custom_scalars(self, layout):
        """Lay out the Custom Scalars tab: ``{category: {title: ["Multiline", tags]}}`` draws
        the scalar ``tags`` on one chart; ``["Margin", [value, lower, upper]]`` draws a value
        with a band. Call it once per writer (only the layout is written, no data).

        Examples
        --------
        >>> import tempfile
        >>> from lucid.utils.tensorboard import SummaryWriter
        >>> layout = {"loss": {"both": ["Multiline", ["loss/train", "loss/val"]],
        ...                    "band": ["Margin", ["acc", "acc_lo", "acc_hi"]]}}
        >>> with tempfile.TemporaryDirectory() as d, SummaryWriter(d) as w:
        ...     w.add_custom_scalars(layout)
        """
        self._add(_plugins.custom_scalars_summary(layout, "add_custom_scalars"), None, None)

    def add_custom_scalars_multilinechart(self, tags, category="default", title="untitled"):
        """``add_custom_scalars({category: {title: ["Multiline", tags]}})``.

        Examples
        --------
        >>> import tempfile
        >>> from lucid.utils.tensorboard import SummaryWriter
        >>> with tempfile.TemporaryDirectory() as d, SummaryWriter(d) as w:
        ...     w.add_custom_scalars_multilinechart(["loss/train", "loss/val"])
        """
        self._add(_plugins.custom_scalars_summary(
            {category: {title: ["Multiline", tags]}}, "add_custom_scalars_multilinechart"),
            None, None)

    def add_custom_scalars_marginchart(self, tags, category="default", title="untitled"):
        """``add_custom_scalars({category: {title: ["Margin", tags]}})``, three tags: value,
        lower and upper bound.

        Examples
        --------
        >>> import tempfile
        >>> from lucid.utils.tensorboard import SummaryWriter
        >>> with tempfile.TemporaryDirectory() as d, SummaryWriter(d) as w:
        ...     w.add_custom_scalars_marginchart(["acc", "acc_lo", "acc_hi"])
        """
        self._add(_plugins.custom_scalars_summary(
            {category: {title: ["Margin", tags]}}, "add_custom_scalars_marginchart"),
            None, None)
