"""TFRecord framing, CRC32C and the few protocol buffers an event file needs, by hand.

NOTE [Event files without protobuf]
TensorBoard reads a directory of ``events.out.tfevents.*`` files. Each is a sequence of
TFRecords (``uint64 length``, masked CRC32C of those 8 bytes, the data, masked CRC32C of the
data; little-endian), and each record's data is one serialized ``tensorboard.Event``. We write
them with no protobuf, TensorFlow or tensorboard import: the messages below are encoded with
the protobuf wire format directly, following proto3's rules so that the bytes are the ones the
official encoder gives for the same message (what the tests check against torch's writer):

* fields go out in field-number order;
* a scalar field without presence (not in a ``oneof``) is left out when it holds its default
  (0, 0.0 — but not -0.0, whose bits differ —, "" or b""); a ``oneof`` member and a set
  sub-message are always written, even when empty;
* repeated numbers are packed (one length-delimited field), repeated strings are not;
* negative int32/int64/enum values are varints of their 64-bit two's complement (10 bytes).

Field numbers are those of tensorboard's ``event.proto``, ``summary.proto``, ``histogram.proto``,
``tensor.proto``, ``tensor_shape.proto``, ``types.proto``, the hparams plugin's ``api.proto`` and
``plugin_data.proto``, and ``google/protobuf/struct.proto``; each builder names its message.
"""
from __future__ import annotations

import struct


class InputError(ValueError, AssertionError):
    """Input of the wrong shape or size: PyTorch's writer asserts (AssertionError); Lucid raised
    ValueError, so both still catch it."""


class InputTypeError(TypeError, ValueError):
    """A value that is not a number where PyTorch's ``float(value)`` raises ValueError (Lucid
    raised TypeError)."""


# ----------------------------------------------------------------------------- CRC32C
# The Castagnoli polynomial, reflected (what TFRecords use; zlib's CRC-32 is another one).
_CRC32C_POLY = 0x82F63B78


def _crc_tables():
    t0 = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ _CRC32C_POLY if c & 1 else c >> 1
        t0.append(c)
    # Slicing-by-4: table k advances a byte k more positions, so each step eats four bytes.
    tables = [t0]
    for _ in range(3):
        prev = tables[-1]
        tables.append([(prev[n] >> 8) ^ t0[prev[n] & 0xFF] for n in range(256)])
    return tables


_T0, _T1, _T2, _T3 = _crc_tables()


def crc32c(data: bytes, crc: int = 0) -> int:
    """The CRC-32C (Castagnoli) of ``data``, continuing from ``crc``."""
    t0, t1, t2, t3 = _T0, _T1, _T2, _T3
    crc ^= 0xFFFFFFFF
    data = memoryview(data).cast("B")
    n4 = len(data) // 4 * 4
    for (w,) in struct.iter_unpack("<I", data[:n4]):
        w ^= crc
        crc = t3[w & 0xFF] ^ t2[(w >> 8) & 0xFF] ^ t1[(w >> 16) & 0xFF] ^ t0[w >> 24]
    for b in data[n4:]:
        crc = t0[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC: rotate right by 15 bits and add a constant, modulo 2**32."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame_record(data: bytes) -> bytes:
    """One whole TFRecord around ``data``: length, its masked CRC, data, the data's masked CRC."""
    header = struct.pack("<Q", len(data))
    return b"".join((header, struct.pack("<I", masked_crc32c(header)),
                     data, struct.pack("<I", masked_crc32c(data))))


# ------------------------------------------------------------------- protobuf wire format
_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5


def _varint(n: int) -> bytes:
    if n < 0:
        n += 1 << 64  # two's complement over 64 bits, as for int32/int64/enum
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _key(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _f32(x: float) -> bytes:
    try:
        return struct.pack("<f", x)
    except OverflowError:  # a finite double past float32's range rounds to inf, as protobuf does
        return struct.pack("<f", float("inf") if x > 0 else float("-inf"))


def _is_default(x) -> bool:
    if isinstance(x, float):
        return x == 0.0 and struct.pack("<d", x) == b"\0" * 8  # -0.0 is written
    return not x


def varint_field(field: int, n: int, keep: bool = False) -> bytes:
    """An int32/int64/uint/enum/bool field; left out at 0 unless ``keep`` (a ``oneof`` member)."""
    n = int(n)
    if not -(1 << 63) <= n < (1 << 64):
        raise ValueError(f"protobuf: integer {n} is out of the 64-bit range")
    return _key(field, _VARINT) + _varint(n) if keep or n else b""


def double_field(field: int, x: float, keep: bool = False) -> bytes:
    x = float(x)
    return _key(field, _I64) + struct.pack("<d", x) if keep or not _is_default(x) else b""


def float_field(field: int, x: float, keep: bool = False) -> bytes:
    x = float(x)
    return _key(field, _I32) + _f32(x) if keep or not _is_default(x) else b""


def bytes_field(field: int, b, keep: bool = False) -> bytes:
    """A string (encoded as UTF-8) or bytes field."""
    if isinstance(b, str):
        b = b.encode("utf-8")
    return _key(field, _LEN) + _varint(len(b)) + b if keep or b else b""


def message_field(field: int, payload: bytes | None) -> bytes:
    """A sub-message: written whenever set (``payload`` not None), even when empty."""
    return b"" if payload is None else _key(field, _LEN) + _varint(len(payload)) + payload


def packed_doubles(field: int, xs) -> bytes:
    xs = [float(x) for x in xs]
    return bytes_field(field, struct.pack(f"<{len(xs)}d", *xs))


def packed_floats(field: int, xs) -> bytes:
    return bytes_field(field, b"".join(_f32(float(x)) for x in xs))


# ------------------------------------------------------------------------- messages
DT_FLOAT, DT_DOUBLE, DT_STRING = 1, 2, 7  # tensorboard.DataType (types.proto)
SESSION_LOG_START = 1  # tensorboard.SessionLog.SessionStatus.START


def event(wall_time: float, step: int | None = None, *, file_version: str | None = None,
          summary: bytes | None = None, session_log_status: int | None = None,
          source_writer: str | None = None) -> bytes:
    """``tensorboard.Event``: wall_time 1, step 2, oneof what {file_version 3, summary 5,
    session_log 7}, source_metadata 10 (``SourceMetadata{writer 1}``)."""
    return b"".join((
        double_field(1, wall_time),
        varint_field(2, 0 if step is None else step),
        b"" if file_version is None else bytes_field(3, file_version, keep=True),
        message_field(5, summary),
        message_field(7, None if session_log_status is None
                      else varint_field(1, session_log_status)),  # SessionLog{status 1}
        message_field(10, None if source_writer is None else bytes_field(1, source_writer)),
    ))


def summary(*values: bytes) -> bytes:
    """``tensorboard.Summary``: repeated Value value = 1."""
    return b"".join(message_field(1, v) for v in values)


def summary_value(tag: str, *, simple_value: float | None = None, image: bytes | None = None,
                  histo: bytes | None = None, audio: bytes | None = None,
                  tensor: bytes | None = None, metadata: bytes | None = None) -> bytes:
    """``Summary.Value``: tag 1, oneof value {simple_value 2 (float), image 4, histo 5,
    audio 6, tensor 8}, metadata 9."""
    return b"".join((
        bytes_field(1, tag),
        b"" if simple_value is None else float_field(2, simple_value, keep=True),
        message_field(4, image),
        message_field(5, histo),
        message_field(6, audio),
        message_field(8, tensor),
        message_field(9, metadata),
    ))


def image(height: int, width: int, colorspace: int, encoded: bytes) -> bytes:
    """``Summary.Image``: height 1, width 2, colorspace 3 (int32), encoded_image_string 4."""
    return b"".join((varint_field(1, height), varint_field(2, width), varint_field(3, colorspace),
                     bytes_field(4, encoded)))


def histogram(min, max, num, sum, sum_squares, bucket_limit, bucket) -> bytes:  # noqa: A002
    """``tensorboard.HistogramProto``: min 1, max 2, num 3, sum 4, sum_squares 5 (doubles),
    packed bucket_limit 6 and bucket 7 (doubles)."""
    return b"".join((double_field(1, min), double_field(2, max), double_field(3, num),
                     double_field(4, sum), double_field(5, sum_squares),
                     packed_doubles(6, bucket_limit), packed_doubles(7, bucket)))


def tensor(dtype: int, *, shape=None, float_val=(), double_val=(), string_val=()) -> bytes:
    """``tensorboard.TensorProto``: dtype 1, tensor_shape 2 (``TensorShapeProto{repeated Dim
    dim 2}``, ``Dim{size 1}``), packed float_val 5, packed double_val 6, string_val 8."""
    shape_msg = None if shape is None else b"".join(
        message_field(2, varint_field(1, d)) for d in shape)
    return b"".join((varint_field(1, dtype), message_field(2, shape_msg),
                     packed_floats(5, float_val), packed_doubles(6, double_val),
                     b"".join(bytes_field(8, s, keep=True) for s in string_val)))


def plugin_metadata(plugin_name: str, content: bytes = b"") -> bytes:
    """``SummaryMetadata{plugin_data 1}`` with ``PluginData{plugin_name 1, content 2}``."""
    return message_field(1, bytes_field(1, plugin_name) + bytes_field(2, content))


# ------------------------------------------------------------------ hparams plugin
HPARAMS_TYPE = {str: 1, bool: 2, float: 3}  # tensorboard.hparams.DataType (api.proto)
HPARAMS_STATUS_SUCCESS = 1  # tensorboard.hparams.Status


def struct_value(v) -> bytes:
    """``google.protobuf.Value``: oneof kind {number_value 2, string_value 3, bool_value 4}."""
    if isinstance(v, bool):
        return varint_field(4, v, keep=True)
    if isinstance(v, str):
        return bytes_field(3, v, keep=True)
    return double_field(2, v, keep=True)


def hparam_info(name: str, kind: type, domain=None) -> bytes:
    """``HParamInfo``: name 1, type 4, domain_discrete 5 (``ListValue{repeated Value
    values 1}``)."""
    listed = None if domain is None else b"".join(message_field(1, struct_value(d)) for d in domain)
    return bytes_field(1, name) + varint_field(4, HPARAMS_TYPE[kind]) + message_field(5, listed)


def hparams_experiment(hparam_infos, metric_tags) -> bytes:
    """``HParamsPluginData{experiment 2}``; ``Experiment{hparam_infos 4, metric_infos 5}``,
    ``MetricInfo{name 1}``, ``MetricName{tag 2}`` (plugin data version 0 is left out)."""
    metrics = (message_field(5, message_field(1, bytes_field(2, t))) for t in metric_tags)
    exp = b"".join(message_field(4, h) for h in hparam_infos) + b"".join(metrics)
    return message_field(2, exp)


def hparams_session_start(values: dict) -> bytes:
    """``HParamsPluginData{session_start_info 3}``; ``SessionStartInfo{map<string, Value>
    hparams 1}``, each entry a message ``{key 1, value 2}``."""
    entries = (message_field(1, bytes_field(1, k, keep=True) + message_field(2, struct_value(v)))
               for k, v in values.items())
    return message_field(3, b"".join(entries))


def hparams_session_end(status: int = HPARAMS_STATUS_SUCCESS) -> bytes:
    """``HParamsPluginData{session_end_info 4}``; ``SessionEndInfo{status 1}``."""
    return message_field(4, varint_field(1, status))


# ------------------------------------------------- more messages (see the NOTE at the top)
def packed_varints(field: int, ns) -> bytes:
    """Packed repeated int32/int64/uint32/uint64/bool/enum."""
    return bytes_field(field, b"".join(_varint(int(n)) for n in ns))


def graph_event(wall_time: float, graph_def: bytes) -> bytes:
    """``Event{wall_time 1, graph_def 4 (bytes)}``: the serialized ``GraphDef``."""
    return double_field(1, wall_time) + bytes_field(4, graph_def, keep=True)


def run_metadata_event(wall_time: float, tag: str, run_metadata: bytes) -> bytes:
    """``Event{wall_time 1, tagged_run_metadata 8}``; ``TaggedRunMetadata{tag 1,
    run_metadata 2 (bytes)}``."""
    return double_field(1, wall_time) + message_field(
        8, bytes_field(1, tag) + bytes_field(2, run_metadata))


def cpu_run_metadata() -> bytes:
    """``RunMetadata{step_stats 1}``, ``StepStats{dev_stats 1}``, ``DeviceStepStats{device 1}``
    naming ``/device:CPU:0``, as torch writes it next to a graph."""
    return message_field(1, message_field(1, bytes_field(1, "/device:CPU:0")))


def shape_proto(shape) -> bytes:
    """``TensorShapeProto{repeated Dim dim 2}``, ``Dim{size 1}`` (-1: unknown)."""
    return b"".join(message_field(2, varint_field(1, d)) for d in shape)


def attr_string(s) -> bytes:
    """``AttrValue{s 2}`` (a ``oneof`` member: written even when empty)."""
    return bytes_field(2, s, keep=True)


def attr_shapes(shapes) -> bytes:
    """``AttrValue{list 1}``, ``ListValue{repeated TensorShapeProto shape 7}``."""
    return message_field(1, b"".join(message_field(7, shape_proto(s)) for s in shapes))


def node_def(name: str, op: str, inputs=(), attrs=None) -> bytes:
    """``NodeDef``: name 1, op 2, repeated input 3, ``map<string, AttrValue> attr 5`` (entries
    ``{key 1, value 2}``, written in key order as protobuf's deterministic output does)."""
    entries = b"".join(message_field(5, bytes_field(1, k, keep=True) + message_field(2, v))
                       for k, v in sorted((attrs or {}).items()))
    return (bytes_field(1, name) + bytes_field(2, op)
            + b"".join(bytes_field(3, i, keep=True) for i in inputs) + entries)


def graph_def(nodes, producer: int = 22) -> bytes:
    """``GraphDef{repeated NodeDef node 1, versions 4}``; ``VersionDef{producer 1}``."""
    return b"".join(message_field(1, n) for n in nodes) + message_field(4, varint_field(1, producer))


def audio(sample_rate: float, num_channels: int, length_frames: int, encoded: bytes,
          content_type: str = "audio/wav") -> bytes:
    """``Summary.Audio``: sample_rate 1 (float), num_channels 2, length_frames 3,
    encoded_audio_string 4, content_type 5."""
    return b"".join((float_field(1, sample_rate), varint_field(2, num_channels),
                     varint_field(3, length_frames), bytes_field(4, encoded),
                     bytes_field(5, content_type)))


# tensorboard.DataType -> the TensorProto field its values go to, for ``add_tensor``.
DT_INT32, DT_UINT8, DT_INT16, DT_INT8, DT_COMPLEX64, DT_INT64, DT_BOOL = 3, 4, 5, 6, 8, 9, 10
DT_UINT16, DT_COMPLEX128, DT_HALF, DT_UINT32, DT_UINT64 = 17, 18, 19, 22, 23


def tensor_values(dtype: int, shape, values) -> bytes:
    """``TensorProto`` of any dtype: dtype 1, tensor_shape 2, then the values in the field
    the dtype uses (float_val 5, double_val 6, int_val 7, scomplex_val 9, int64_val 10,
    bool_val 11, dcomplex_val 12, half_val 13 (the float16 bits), uint32_val 16,
    uint64_val 17), all packed."""
    head = varint_field(1, dtype) + message_field(2, shape_proto(shape))
    if dtype in (DT_FLOAT, DT_COMPLEX64):
        return head + packed_floats(5 if dtype == DT_FLOAT else 9, values)
    if dtype in (DT_DOUBLE, DT_COMPLEX128):
        return head + packed_doubles(6 if dtype == DT_DOUBLE else 12, values)
    field = {DT_INT32: 7, DT_UINT8: 7, DT_INT16: 7, DT_INT8: 7, DT_UINT16: 7, DT_INT64: 10,
             DT_BOOL: 11, DT_HALF: 13, DT_UINT32: 16, DT_UINT64: 17}[dtype]
    return head + packed_varints(field, values)


def summary_metadata(plugin_name: str, content: bytes = b"", display_name: str = "",
                     description: str = "") -> bytes:
    """``SummaryMetadata{plugin_data 1, display_name 2, summary_description 3}``."""
    return (plugin_metadata(plugin_name, content) + bytes_field(2, display_name)
            + bytes_field(3, description))


def pr_curve_plugin_data(num_thresholds: int) -> bytes:
    """``PrCurvePluginData{version 1 (0, left out), num_thresholds 2}``."""
    return varint_field(2, num_thresholds)


def mesh_plugin_data(name: str, content_type: int, json_config: str, shape,
                     components: int) -> bytes:
    """``tensorboard.mesh.MeshPluginData``: version 1 (0), name 2, content_type 3,
    json_config 5, packed shape 6, components 7."""
    return b"".join((bytes_field(2, name), varint_field(3, content_type),
                     bytes_field(5, json_config), packed_varints(6, shape),
                     varint_field(7, components)))


def custom_scalar_layout(layout) -> bytes:
    """``tensorboard.Layout{repeated Category category 2}``: ``Category{title 1, chart 2}``,
    ``Chart{title 1, oneof {multiline 2, margin 3}}``, ``MultilineChartContent{repeated tag 1}``,
    ``MarginChartContent{repeated Series series 1}``, ``Series{value 1, lower 2, upper 3}``.
    ``layout``: ``[(category, [(title, "Multiline" or "Margin", tags), ...]), ...]``."""
    cats = []
    for title, charts in layout:
        body = b""
        for chart_title, kind, tags in charts:
            if kind == "Margin":
                series = b"".join(bytes_field(k + 1, t) for k, t in enumerate(tags))
                content = message_field(3, message_field(1, series))
            else:
                content = message_field(2, b"".join(bytes_field(1, t, keep=True) for t in tags))
            body += message_field(2, bytes_field(1, chart_title) + content)
        cats.append(message_field(2, bytes_field(1, title) + body))
    return b"".join(cats)
