"""``SummaryWriter``: TensorBoard logging with PyTorch's API and no TensorBoard dependency.

The event files are written by hand (NOTE [Event files without protobuf], ``_records.py``);
images are PNG-encoded with zlib (``_png.py``). Values are read back to the host explicitly
(``.item()`` for a scalar, ``.cpu()`` for an array), so device tensors log as CPU ones do.
"""
from __future__ import annotations

import functools
import itertools
import numbers
import os
import socket
import threading
import time
import weakref

import numpy as np

from ..._core.tensor import Tensor
from . import _records as rec
from ._more import MoreSummaries
from ._png import encode_png

__all__ = ["SummaryWriter"]

_SOURCE = "lucid.utils.tensorboard"
_FILE_IDS = itertools.count()  # the last part of an event file's name, as tensorboard's counter


# ---------------------------------------------------------------------------- event files
def _write_pending(file, pending):
    """Write the queued records in one piece; what was queued is whole records only."""
    if pending and not file.closed:
        data = b"".join(pending)
        pending.clear()
        file.write(data)
    if not file.closed:
        file.flush()


def _finish(file, pending, lock):
    with lock:
        _write_pending(file, pending)
        file.close()


class _EventFile:
    """One ``events.out.tfevents.*`` file. Records wait in memory and go to disk whole when
    ``max_queue`` of them are pending, when ``flush_secs`` have passed since the last write, on
    ``flush``/``close``, and when the writer is garbage collected or the interpreter exits."""

    def __init__(self, log_dir, max_queue=10, flush_secs=120, filename_suffix=""):
        self._log_dir = os.fspath(log_dir)
        os.makedirs(self._log_dir, exist_ok=True)
        name = "events.out.tfevents.%010d.%s.%s.%s" % (
            time.time(), socket.gethostname(), os.getpid(), next(_FILE_IDS))
        self.path = os.path.join(self._log_dir, name + filename_suffix)
        self._max_queue, self._flush_secs = max_queue, flush_secs
        self._pending, self._lock = [], threading.Lock()
        self._file = open(self.path, "wb")
        self._finalizer = weakref.finalize(self, _finish, self._file, self._pending, self._lock)
        self._last_write = time.monotonic()
        self.add_event(rec.event(time.time(), file_version="brain.Event:2", source_writer=_SOURCE))
        self.flush()

    def get_logdir(self):
        return self._log_dir

    def add_event(self, event: bytes):
        record = rec.frame_record(event)  # built whole before anything is queued
        with self._lock:
            self._pending.append(record)
            if (len(self._pending) >= self._max_queue > 0
                    or time.monotonic() - self._last_write >= self._flush_secs):
                self._write_locked()

    def add_summary(self, summary: bytes, global_step=None, walltime=None):
        wall = time.time() if walltime is None else float(walltime)
        step = None if global_step is None else int(global_step)
        self.add_event(rec.event(wall, step, summary=summary))

    def _write_locked(self):
        _write_pending(self._file, self._pending)
        self._last_write = time.monotonic()

    def flush(self):
        with self._lock:
            self._write_locked()

    def close(self):
        self._finalizer()


# ------------------------------------------------------------------------ value readers
def _host(x, fname):
    """``x`` as a host NumPy array; a tensor is copied off its device explicitly."""
    if isinstance(x, Tensor):
        return x.detach().cpu().numpy()
    if isinstance(x, np.ndarray):
        return x
    if isinstance(x, (numbers.Number, np.generic, list, tuple)) or hasattr(x, "__array__"):
        return np.asarray(x)
    raise TypeError(f"{fname}: expected a lucid Tensor, a NumPy array or numbers, "
                    f"got {type(x).__name__}")


def _real(value, fname) -> float:
    """A Python float from a number, a NumPy scalar or a one-element array or tensor."""
    if isinstance(value, (Tensor, np.ndarray)):
        size = value.numel() if isinstance(value, Tensor) else value.size
        if size != 1:
            raise rec.InputError(f"{fname}: expected a single value, got a tensor of shape "
                                 f"{tuple(value.shape)}")
        value = value.item() if isinstance(value, Tensor) else value.reshape(()).item()
    if isinstance(value, (numbers.Real, np.bool_)):
        return float(value)
    error = rec.InputTypeError if isinstance(value, str) else TypeError
    raise error(f"{fname}: expected a real number or a one-element tensor, got {type(value).__name__}")


# ---------------------------------------------------------------------------- histograms
@functools.lru_cache(maxsize=1)
def _tensorflow_bins():
    """TensorBoard's default bucket edges: +-1e-12 growing by 1.1 up to 1e20, and 0.

    The edges are made by repeated multiplication, as torch and TensorFlow make them, so that
    the limits are the same doubles."""
    v, pos = 1e-12, []
    while v < 1e20:
        pos.append(v)
        v *= 1.1
    return np.array([-p for p in reversed(pos)] + [0.0] + pos)


def _histogram(values, bins, max_bins, fname) -> bytes:
    """``HistogramProto`` of ``values``, trimmed to its support as TensorBoard expects: bucket
    ``i`` counts the values up to ``bucket_limit[i]``, so one empty bucket is kept on the left
    to carry the lowest edge."""
    values = _host(values, fname)
    if values.dtype.kind == "c":
        raise TypeError(f"{fname}: complex values have no histogram")
    values = values.astype(np.float64).reshape(-1)
    if values.size == 0:
        raise ValueError(f"{fname}: the input has no element")
    if isinstance(bins, str) and bins == "tensorflow":
        bins = _tensorflow_bins()
    counts, limits = np.histogram(values, bins=bins)
    if max_bins is not None and counts.size > max_bins:
        group = counts.size // max_bins  # sum groups of adjacent buckets, the last one padded
        counts = np.pad(counts, (0, -counts.size % group)).reshape(-1, group).sum(axis=1)
        limits = np.append(limits[:-1:group], limits[-1])
    nonzero = np.flatnonzero(counts)
    if nonzero.size == 0:
        raise ValueError(f"{fname}: no value falls inside the bins")
    first, last = int(nonzero[0]), int(nonzero[-1])
    if first > 0:
        counts, limits = counts[first - 1:last + 1], limits[first:last + 2]
    else:
        counts, limits = np.concatenate([[0], counts[:last + 1]]), limits[:last + 2]
    return rec.histogram(values.min(), values.max(), values.size, values.sum(),
                         values.dot(values), limits.tolist(), counts.tolist())


# -------------------------------------------------------------------------------- images
_LAYOUTS = {4: "NCHW", 3: "HWC", 2: "HW"}


def _grid(batch, fname, ncols=8):
    """(N, C, H, W) images, C 1 or 3, tiled row by row into one (3, H', W') image."""
    n, c, h, w = batch.shape
    if n == 0:
        raise ValueError(f"{fname}: the batch holds no image")
    if c == 1:
        batch = np.concatenate([batch] * 3, axis=1)
    elif c != 3:
        raise rec.InputError(f"{fname}: batched images need 1 or 3 channels, got {c}")
    ncols = min(n, ncols)
    nrows = -(-n // ncols)
    batch = np.concatenate([batch, np.zeros((nrows * ncols - n, 3, h, w), batch.dtype)])
    return batch.reshape(nrows, ncols, 3, h, w).transpose(2, 0, 3, 1, 4).reshape(
        3, nrows * h, ncols * w)


def _to_hwc(arr, dataformats, fname):
    if len(set(dataformats)) != len(dataformats):
        raise ValueError(f"{fname}: dataformats {dataformats!r} uses a dimension twice")
    if arr.ndim != len(dataformats):
        raise rec.InputError(f"{fname}: an image of shape {arr.shape} does not match dataformats "
                             f"{dataformats!r}")
    fmt = dataformats.upper()
    target = _LAYOUTS.get(len(fmt))
    if target is None or sorted(fmt) != sorted(target):
        raise ValueError(f"{fname}: dataformats must order the letters NCHW, CHW or HW, "
                         f"got {dataformats!r}")
    arr = arr.transpose([fmt.index(d) for d in target])
    if arr.ndim == 4:
        return _grid(arr, fname).transpose(1, 2, 0)
    if arr.ndim == 2 or arr.shape[2] == 1:  # grey is stored as RGB, as torch stores it
        return np.concatenate([arr.reshape(arr.shape[:2] + (1,))] * 3, axis=2)
    return arr


def _pixels(img_tensor, dataformats, fname):
    """(H, W, C) uint8 pixels for ``Summary.Image``: floats are taken in [0, 1] and scaled by 255, uint8 kept; both
    clipped to [0, 255] and truncated to uint8, as torch does."""
    arr = _host(img_tensor, fname)
    if arr.dtype.kind == "c":
        raise TypeError(f"{fname}: complex values are not an image")
    hwc = _to_hwc(arr, dataformats, fname)
    height, width, channels = hwc.shape
    if channels > 4 or height == 0 or width == 0:
        raise ValueError(f"{fname}: cannot encode an image of {height}x{width} pixels with "
                         f"{channels} channels (1 to 4 channels, at least one pixel)")
    scale = 1 if hwc.dtype == np.uint8 else 255
    return (hwc.astype(np.float32) * scale).clip(0, 255).astype(np.uint8)


def _image(img_tensor, dataformats, fname) -> bytes:
    pixels = _pixels(img_tensor, dataformats, fname)
    return rec.image(*pixels.shape, encode_png(pixels))


# ------------------------------------------------------------------------------- hparams
def _hparam_kind(v, fname):
    """(kind, value) of one hyperparameter: a number, a string or a bool."""
    if isinstance(v, Tensor):
        v = _real(v, fname)
    if isinstance(v, (bool, np.bool_)):
        return bool, bool(v)
    if isinstance(v, str):
        return str, v
    if isinstance(v, numbers.Real):
        return float, float(v)
    raise ValueError(f"{fname}: a hyperparameter must be an int, float, str, bool or a "
                     f"one-element Tensor, got {type(v).__name__}")


def _hparams_summaries(hparam_dict, metric_dict, domains, fname):
    """The three summaries of the hparams plugin: experiment, session start, session end."""
    domains = domains or {}
    if not isinstance(domains, dict):
        raise TypeError(f"{fname}: hparam_domain_discrete should be a dictionary")
    for k, v in domains.items():
        if (k not in hparam_dict or not isinstance(v, list)
                or not all(isinstance(d, type(hparam_dict[k])) for d in v)):
            raise TypeError(f"{fname}: hparam_domain_discrete[{k!r}] should be a list of the "
                            f"type of hparam_dict[{k!r}]")
    infos, values = [], {}
    for k, v in hparam_dict.items():
        if v is None:
            continue
        kind, values[k] = _hparam_kind(v, fname)
        domain = domains.get(k) if not isinstance(v, Tensor) else None
        infos.append(rec.hparam_info(k, kind, domain))
    contents = (("_hparams_/experiment", rec.hparams_experiment(infos, list(metric_dict))),
                ("_hparams_/session_start_info", rec.hparams_session_start(values)),
                ("_hparams_/session_end_info", rec.hparams_session_end()))
    return [rec.summary(rec.summary_value(tag, metadata=rec.plugin_metadata("hparams", c)))
            for tag, c in contents]


# -------------------------------------------------------------------------------- writer
class SummaryWriter(MoreSummaries):
    """Write TensorBoard event files: scalars, histograms, images, text, hparams, graphs,
    embeddings, PR curves, audio, video, meshes and custom scalar layouts.

    The API and the files are PyTorch's (``torch.utils.tensorboard.SummaryWriter``); neither
    TensorBoard, protobuf nor Pillow is needed to write them (``pip install tensorboard`` to
    view them: ``tensorboard --logdir runs``).

    Parameters
    ----------
    log_dir : str or path-like, optional
        Directory of the event file. Default ``runs/<Mon><DD>_<HH>-<MM>-<SS>_<host><comment>``.
    comment : str
        Suffix of the default ``log_dir`` (ignored when ``log_dir`` is given).
    purge_step : int, optional
        On resuming a crashed run at step ``T``, hide the earlier run's events at steps ``>= T``.
    max_queue : int
        Records kept in memory before they are written (``<= 0``: no limit).
    flush_secs : float
        Seconds after which the next record triggers a write of all pending ones.
    filename_suffix : str
        Suffix of every event file name.

    Notes
    -----
    Records are written synchronously by the logging call that fills the queue (PyTorch uses
    a background thread); pending ones are also written on ``flush``, ``close`` and when the
    writer is garbage collected or the program exits. After ``close`` the next ``add_*`` opens
    a new event file, as in PyTorch. ``add_graph`` reads the graph off the autograd tape of one
    forward pass (PyTorch traces with TorchScript); ``add_video`` writes its GIF without
    moviepy; ``add_onnx_graph`` raises (Lucid has no ONNX support).

    Examples
    --------
    >>> import os, tempfile
    >>> from lucid.utils.tensorboard import SummaryWriter
    >>> with tempfile.TemporaryDirectory() as d:
    ...     with SummaryWriter(d) as writer:
    ...         for step in range(3):
    ...             writer.add_scalar("loss", 1.0 / (step + 1), step)
    ...     [f.startswith("events.out.tfevents.") for f in os.listdir(d)]
    [True]
    """

    def __init__(self, log_dir=None, comment="", purge_step=None, max_queue=10,
                 flush_secs=120, filename_suffix=""):
        if not log_dir:
            from datetime import datetime

            now = datetime.now().strftime("%b%d_%H-%M-%S")
            log_dir = os.path.join("runs", now + "_" + socket.gethostname() + comment)
        self.log_dir = log_dir
        self.purge_step = purge_step
        self.max_queue = max_queue
        self.flush_secs = flush_secs
        self.filename_suffix = filename_suffix
        self._file_writer = self._all_writers = None
        self._get_file_writer()

    def _get_file_writer(self):
        """The main event file, opened again after ``close``."""
        if self._file_writer is None:
            fw = _EventFile(self.log_dir, self.max_queue, self.flush_secs, self.filename_suffix)
            self._file_writer, self._all_writers = fw, {fw.get_logdir(): fw}
            if self.purge_step is not None:
                step, wall = int(self.purge_step), time.time()
                fw.add_event(rec.event(wall, step, file_version="brain.Event:2"))
                fw.add_event(rec.event(wall, step, session_log_status=rec.SESSION_LOG_START))
                self.purge_step = None
        return self._file_writer

    def get_logdir(self):
        """The directory the event files are written to."""
        return self.log_dir

    def _add(self, summary, global_step, walltime):
        self._get_file_writer().add_summary(summary, global_step, walltime)

    def add_scalar(self, tag, scalar_value, global_step=None, walltime=None, new_style=False,
                   double_precision=False):
        """Log one number under ``tag``.

        ``scalar_value`` is a Python or NumPy number or a one-element tensor (on any device;
        read with ``.item()``). ``new_style=True`` stores it as a float (``double_precision``:
        a double) tensor of the scalars plugin instead of a ``simple_value``.

        Examples
        --------
        >>> import tempfile, lucid
        >>> from lucid.utils.tensorboard import SummaryWriter
        >>> with tempfile.TemporaryDirectory() as d, SummaryWriter(d) as w:
        ...     w.add_scalar("acc", lucid.tensor(0.75), global_step=10)
        ...     w.add_scalar("lr", 1e-3, 10, new_style=True, double_precision=True)
        """
        value = _real(scalar_value, "add_scalar")
        if not new_style:
            val = rec.summary_value(tag, simple_value=value)
        elif double_precision:
            val = rec.summary_value(tag, tensor=rec.tensor(rec.DT_DOUBLE, double_val=[value]),
                                    metadata=rec.plugin_metadata("scalars"))
        else:
            val = rec.summary_value(tag, tensor=rec.tensor(rec.DT_FLOAT, float_val=[value]),
                                    metadata=rec.plugin_metadata("scalars"))
        self._add(rec.summary(val), global_step, walltime)

    def add_scalars(self, main_tag, tag_scalar_dict, global_step=None, walltime=None):
        """Log several numbers on one chart: each goes, under ``main_tag``, to its own run
        ``<log_dir>/<main_tag>_<tag>`` (``/`` in ``main_tag`` becomes ``_``), as in PyTorch.

        Examples
        --------
        >>> import os, tempfile
        >>> from lucid.utils.tensorboard import SummaryWriter
        >>> with tempfile.TemporaryDirectory() as d:
        ...     with SummaryWriter(d) as w:
        ...         w.add_scalars("loss", {"train": 0.5, "val": 0.7}, global_step=1)
        ...     sorted(n for n in os.listdir(d) if not n.startswith("events"))
        ['loss_train', 'loss_val']
        """
        values = {tag: _real(v, "add_scalars") for tag, v in tag_scalar_dict.items()}
        walltime = time.time() if walltime is None else walltime
        logdir = self._get_file_writer().get_logdir()
        for tag, value in values.items():
            sub = logdir + "/" + main_tag.replace("/", "_") + "_" + tag
            if sub not in self._all_writers:
                self._all_writers[sub] = _EventFile(sub, self.max_queue, self.flush_secs,
                                                    self.filename_suffix)
            summary = rec.summary(rec.summary_value(main_tag, simple_value=value))
            self._all_writers[sub].add_summary(summary, global_step, walltime)

    def add_histogram(self, tag, values, global_step=None, bins="tensorflow", walltime=None,
                      max_bins=None):
        """Log the histogram of ``values`` (any shape).

        ``bins="tensorflow"`` uses TensorBoard's exponential buckets; any other ``bins`` is
        NumPy's (``"auto"``, ``"fd"``, an int, edges). ``max_bins`` merges adjacent buckets.
        Empty input and input outside every bucket raise ``ValueError``.

        Examples
        --------
        >>> import tempfile, lucid
        >>> from lucid.utils.tensorboard import SummaryWriter
        >>> with tempfile.TemporaryDirectory() as d, SummaryWriter(d) as w:
        ...     w.add_histogram("weights", lucid.randn(100), global_step=0)
        ...     w.add_histogram("counts", lucid.tensor([0.0, 1.0, 1.0, 3.0]), 0, bins=3)
        """
        summary = rec.summary(rec.summary_value(
            tag, histo=_histogram(values, bins, max_bins, "add_histogram")))
        self._add(summary, global_step, walltime)

    def add_histogram_raw(self, tag, min, max, num, sum, sum_squares,  # noqa: A002
                          bucket_limits, bucket_counts, global_step=None, walltime=None):
        """Log a histogram given by its statistics and buckets (``bucket_limits[i]`` is the
        right edge of bucket ``i``), as PyTorch's ``add_histogram_raw``."""
        limits = _host(bucket_limits, "add_histogram_raw").reshape(-1).tolist()
        counts = _host(bucket_counts, "add_histogram_raw").reshape(-1).tolist()
        if len(limits) != len(counts):
            raise ValueError("add_histogram_raw: len(bucket_limits) != len(bucket_counts), "
                             "see the document.")
        stats = [_real(x, "add_histogram_raw") for x in (min, max, num, sum, sum_squares)]
        summary = rec.summary(rec.summary_value(tag, histo=rec.histogram(*stats, limits, counts)))
        self._add(summary, global_step, walltime)

    def add_image(self, tag, img_tensor, global_step=None, walltime=None, dataformats="CHW"):
        """Log one image, PNG-encoded.

        ``dataformats`` orders the axes: ``CHW`` (default), ``HWC``, ``HW``, ``WH``, ... with 1
        (grey, stored as RGB), 3 (RGB) or 4 (RGBA) channels. Floats are read in [0, 1], uint8
        in [0, 255]; values outside are clipped.

        Examples
        --------
        >>> import tempfile, lucid
        >>> from lucid.utils.tensorboard import SummaryWriter
        >>> with tempfile.TemporaryDirectory() as d, SummaryWriter(d) as w:
        ...     w.add_image("noise", lucid.rand(3, 8, 8), global_step=0)
        ...     w.add_image("grey", lucid.rand(8, 8), 0, dataformats="HW")
        """
        self._add(rec.summary(rec.summary_value(
            tag, image=_image(img_tensor, dataformats, "add_image"))), global_step, walltime)

    def add_images(self, tag, img_tensor, global_step=None, walltime=None, dataformats="NCHW"):
        """Log a batch of images as one grid image, 8 per row (``NCHW`` by default, 1 or 3
        channels).

        Examples
        --------
        >>> import tempfile, lucid
        >>> from lucid.utils.tensorboard import SummaryWriter
        >>> with tempfile.TemporaryDirectory() as d, SummaryWriter(d) as w:
        ...     w.add_images("batch", lucid.rand(10, 1, 4, 4), global_step=0)
        """
        self._add(rec.summary(rec.summary_value(
            tag, image=_image(img_tensor, dataformats, "add_images"))), global_step, walltime)

    def add_text(self, tag, text_string, global_step=None, walltime=None):
        """Log a (Markdown) string for the text plugin, under ``<tag>/text_summary``.

        Examples
        --------
        >>> import tempfile
        >>> from lucid.utils.tensorboard import SummaryWriter
        >>> with tempfile.TemporaryDirectory() as d, SummaryWriter(d) as w:
        ...     w.add_text("notes", "lr **1e-3**, batch 32", global_step=0)
        """
        if not isinstance(text_string, str):
            raise TypeError(f"add_text: expected a str, got {type(text_string).__name__}")
        tensor = rec.tensor(rec.DT_STRING, shape=[1], string_val=[text_string])
        summary = rec.summary(rec.summary_value(tag + "/text_summary", tensor=tensor,
                                                metadata=rec.plugin_metadata("text")))
        self._add(summary, global_step, walltime)

    def add_hparams(self, hparam_dict, metric_dict, hparam_domain_discrete=None, run_name=None,
                    global_step=None):
        """Log one set of hyperparameters and its metrics for the HParams dashboard.

        They go to a run ``<log_dir>/<run_name>`` (default: the current time), with the
        metrics as scalars there, as in PyTorch. Values are ints, floats, strings, bools
        (stored as bools; PyTorch stores them as numbers) or one-element tensors; ``None``
        is skipped. ``hparam_domain_discrete`` lists the values a hyperparameter can take.

        Examples
        --------
        >>> import tempfile
        >>> from lucid.utils.tensorboard import SummaryWriter
        >>> with tempfile.TemporaryDirectory() as d, SummaryWriter(d) as w:
        ...     w.add_hparams({"lr": 0.1, "optim": "sgd"}, {"hparam/acc": 0.9}, run_name="a")
        """
        if type(hparam_dict) is not dict or type(metric_dict) is not dict:
            raise TypeError("add_hparams: hparam_dict and metric_dict should be dictionaries")
        summaries = _hparams_summaries(hparam_dict, metric_dict, hparam_domain_discrete,
                                       "add_hparams")
        metrics = {k: _real(v, "add_hparams") for k, v in metric_dict.items()}
        logdir = os.path.join(self._get_file_writer().get_logdir(), run_name or str(time.time()))
        with SummaryWriter(log_dir=logdir) as w:
            for s in summaries:
                w._add(s, global_step, None)
            for k, v in metrics.items():
                w.add_scalar(k, v, global_step)

    def flush(self):
        """Write every pending record of every event file to disk."""
        for fw in (self._all_writers or {}).values():
            fw.flush()

    def close(self):
        """Write pending records and close the files (a second ``close`` does nothing)."""
        for fw in (self._all_writers or {}).values():
            fw.close()
        self._file_writer = self._all_writers = None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        self.close()
