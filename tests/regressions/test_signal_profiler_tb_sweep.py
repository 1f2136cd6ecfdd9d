"""Regressions from the differential sweep of lucid.signal / window factories, lucid.profiler and
lucid.utils.tensorboard against PyTorch 2.13 (session 14, "sigprof")."""
import json
import warnings

import numpy as np
import pytest

import lucid
from lucid.profiler import profile, record_function


# ------------------------------------------------------------------ window factories


@pytest.mark.parametrize("name", ["hann_window", "hamming_window", "blackman_window", "bartlett_window",
                                  "kaiser_window"])
def test_window_length_bool_is_refused(name):
    # torch: "argument 'window_length' (position 1) must be int, not bool"
    with pytest.raises(TypeError, match=name):
        getattr(lucid, name)(True)


@pytest.mark.parametrize("name", ["hann_window", "kaiser_window", "bartlett_window"])
def test_complex_windows_as_pytorch(name):
    fn = getattr(lucid, name)
    one = fn(1, dtype=lucid.complex64)
    assert one.dtype == lucid.complex64 and one.numpy().tolist() == [1 + 0j]
    empty = fn(0, dtype=lucid.complex128)
    assert empty.dtype == lucid.complex128 and tuple(empty.shape) == (0,)
    with pytest.raises(NotImplementedError, match=name):  # PyTorch's arange refuses complex
        fn(4, dtype=lucid.complex64)
    with pytest.raises(RuntimeError, match="floating point"):  # still refused: integers
        fn(4, dtype=lucid.int64)


# --------------------------------------------------------------------------- profiler


def _profiled():
    x = lucid.tensor(np.ones(3), requires_grad=True)
    with profile(record_shapes=True, profile_memory=True) as prof:
        with record_function("outer"):
            y = (x * 2).sum()
        y.backward()
    return prof


def test_events_link_parents_children_and_ids():
    prof = _profiled()
    evs = {e.name: e for e in prof.events()}
    outer, mul, total = evs["outer"], evs["lucid::mul"], evs["lucid::sum"]
    assert [c.name for c in outer.cpu_children] == ["lucid::mul", "lucid::sum"]
    assert mul.cpu_parent is outer and outer.cpu_parent is None
    assert evs["MulBackward0"].cpu_parent is None
    assert sorted(e.id for e in prof.events()) == list(range(1, 6))
    assert outer.is_user_annotation and not mul.is_user_annotation
    assert outer.time_range.elapsed_us() == pytest.approx(outer.cpu_time_total)
    assert outer.time_range.start <= mul.time_range.start <= mul.time_range.end <= outer.time_range.end
    assert mul.device_time_total == 0 and total.self_device_time_total == 0


def test_memory_is_inclusive_with_self_memory_apart():
    prof = _profiled()
    evs = {e.name: e for e in prof.events()}
    # float64: mul makes 3 * 8 bytes, sum 8; the range made nothing itself
    assert (evs["lucid::mul"].cpu_memory_usage, evs["lucid::mul"].self_cpu_memory_usage) == (24, 24)
    assert (evs["outer"].cpu_memory_usage, evs["outer"].self_cpu_memory_usage) == (32, 0)
    avg = {e.key: e for e in prof.key_averages()}
    assert (avg["outer"].cpu_memory_usage, avg["outer"].self_cpu_memory_usage) == (32, 0)
    trace_bytes = {e.name: e.cpu_memory_usage for e in prof.events()}
    assert trace_bytes["outer"] == 32


def test_table_sorts_by_device_fields_and_unknown_keys_raise_attribute_error():
    avg = _profiled().key_averages()
    for key in ("cuda_time_total", "device_time_total", "self_cpu_memory_usage", "cpu_time"):
        assert "Self CPU %" in avg.table(sort_by=key, row_limit=2)
    with pytest.raises(AttributeError, match="sort_by"):
        avg.table(sort_by="bogus")
    with pytest.raises(ValueError, match="sort_by"):  # what Lucid raised before
        avg.table(sort_by="bogus")


def test_event_list_totals_and_autograd_profiler_names():
    prof = _profiled()
    assert prof.function_events is prof.events()
    total = prof.total_average()
    assert total.key == "Total" and total.count == 5
    assert prof.self_cpu_time_total == pytest.approx(sum(e.self_cpu_time_total for e in prof.events()))
    import lucid.autograd.profiler as ap

    with ap.profile(use_device=None, use_kineto=True, use_cpu=True) as p:
        _ = lucid.ones(2) * 3
    assert [e.name for e in p.function_events] == ["lucid::mul"]


def test_schedule_bad_arguments_raise_assertion_error():
    with pytest.raises(AssertionError, match="schedule: invalid arguments"):
        lucid.profiler.schedule(wait=0, warmup=0, active=0)
    with pytest.raises(ValueError):
        lucid.profiler.schedule(wait=-1, warmup=0, active=1)


def test_profiler_module_surface():
    P = lucid.profiler
    assert P.supported_activities() == {P.ProfilerActivity.CPU}
    assert P.kineto_available() is False
    assert {"CPU", "CUDA", "XPU", "MTIA", "HPU", "PrivateUse1"} <= set(P.ProfilerActivity.__members__)
    assert P.ProfilerAction.DEVICE_STOPPED.value == 4


def test_emit_nvtx_and_emit_itt():
    import lucid.autograd.profiler as ap

    with ap.emit_itt():
        y = lucid.ones(2) + 1
    assert y.numpy().tolist() == [2.0, 2.0]
    with ap.emit_nvtx(enabled=False):
        pass
    if not lucid.cuda.is_available():
        with pytest.raises(AssertionError, match="emit_nvtx"):  # PyTorch without CUDA
            with ap.emit_nvtx():
                pass


def test_chrome_trace_header(tmp_path):
    prof = _profiled()
    data = json.loads(open(prof.export_chrome_trace(str(tmp_path / "t.json"))).read())
    assert data["schemaVersion"] == 1 and data["deviceProperties"] == []
    assert data["record_shapes"] == 1 and data["profile_memory"] == 1
    assert data["traceName"] == str(tmp_path / "t.json") and isinstance(data["baseTimeNanoseconds"], int)
    ids = [e["args"]["External id"] for e in data["traceEvents"]]
    assert sorted(ids) == list(range(1, 6))


def test_profiler_field_names_match_torch():
    torch = pytest.importorskip("torch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.profiler.profile(record_shapes=True) as tp:
            with torch.profiler.record_function("outer"):
                torch.ones(3) * 2
    fields = ["name", "key", "id", "count", "cpu_time_total", "self_cpu_time_total", "input_shapes",
              "cpu_memory_usage", "self_cpu_memory_usage", "cpu_parent", "cpu_children", "time_range",
              "is_user_annotation", "device_time_total", "self_device_time_total", "thread", "stack"]
    tev, lev = tp.events()[0], _profiled().events()[0]
    for f in fields:
        assert hasattr(tev, f) and hasattr(lev, f), f
    avg_fields = ["key", "count", "cpu_time", "cpu_time_total", "self_cpu_time_total", "cpu_memory_usage",
                  "self_cpu_memory_usage", "device_time_total", "input_shapes"]
    for f in avg_fields:
        assert hasattr(tp.key_averages()[0], f) and hasattr(_profiled().key_averages()[0], f), f


# ------------------------------------------------------------------------ tensorboard


@pytest.fixture
def writer(tmp_path):
    from lucid.utils.tensorboard import SummaryWriter

    w = SummaryWriter(log_dir=str(tmp_path))
    yield w
    w.close()


@pytest.mark.parametrize("call", [
    lambda w: w.add_scalar("s", lucid.tensor([1.0, 2.0])),
    lambda w: w.add_scalar("s", np.ones(2)),
    lambda w: w.add_scalars("s", {"a": lucid.tensor([1.0, 2.0])}),
    lambda w: w.add_image("i", lucid.zeros(3, 4), dataformats="CHW"),
    lambda w: w.add_image("i", lucid.zeros(1, 3, 4, 4)),
    lambda w: w.add_images("i", lucid.zeros(2, 2, 4, 4)),
    lambda w: w.add_audio("a", lucid.zeros(2, 100)),
    lambda w: w.add_embedding(lucid.zeros(2, 3, 4)),
    lambda w: w.add_embedding(lucid.zeros(3, 4), metadata=["a"]),
    lambda w: w.add_embedding(lucid.zeros(3, 4), label_img=lucid.zeros(2, 3, 4, 4)),
    lambda w: w.add_custom_scalars({"c": {"x": ["Margin", ["a", "b"]]}}),
], ids=["scalar_vec", "scalar_np", "scalars_vec", "image_ndim", "image_4d", "images_2ch", "audio_2d",
        "emb_3d", "emb_labels", "emb_images", "margin_tags"])
def test_tensorboard_shape_errors_are_assertion_errors(writer, call):
    # PyTorch's writer asserts; Lucid raised ValueError before, so both types catch them
    with pytest.raises(AssertionError):
        call(writer)
    with pytest.raises(ValueError):
        call(writer)


def test_tensorboard_scalar_string_raises_value_error(writer):
    with pytest.raises(ValueError, match="add_scalar"):  # torch: float("abc")
        writer.add_scalar("s", "abc")
    with pytest.raises(TypeError, match="add_scalar"):
        writer.add_scalar("s", "abc")


def test_execution_trace_observer_records_the_op_graph(tmp_path):
    from lucid.profiler import ExecutionTraceObserver

    path = tmp_path / "et.json"
    et = ExecutionTraceObserver().register_callback(str(path))
    assert et.is_registered and et.get_output_file_path() == str(path)
    x = lucid.tensor(np.ones((3, 4)), requires_grad=True)
    with profile(execution_trace_observer=et) as prof:
        with record_function("block"):
            y = (x * 2).sum()
        y.backward()
    assert not et.is_registered and not et.is_running  # finalised on exit, as PyTorch's
    data = json.loads(path.read_text())
    assert data["schema"] == "1.1.1-chakra.0.0.4" and data["finish_ts"] >= data["start_ts"]
    nodes = {n["name"]: n for n in data["nodes"]}
    block, mul, total = nodes["block"], nodes["lucid::mul"], nodes["lucid::sum"]
    assert nodes["[pytorch|profiler|execution_trace|thread]"]["ctrl_deps"] == 1
    assert block["ctrl_deps"] == 2 and mul["ctrl_deps"] == block["id"] == total["ctrl_deps"]
    assert mul["inputs"]["shapes"] == [[3, 4], []] and mul["inputs"]["types"] == ["Tensor(float64)", "Int"]
    assert mul["inputs"]["values"][0][3:5] == [12, 8] and mul["inputs"]["values"][1] == 2
    # the graph: sum reads the very array mul wrote
    assert total["inputs"]["values"][0][0] == mul["outputs"]["values"][0][0]
    assert "autograd::engine::evaluate_function: MulBackward0" in nodes
    assert len(prof.events()) == 5  # the profiler recorded alongside
    assert lucid.profiler._USERS[0] == 0 and lucid._core.grad_mode.PROFILING[0] == 0


def test_execution_trace_observer_alone_and_gzipped(tmp_path):
    import gzip

    from lucid.profiler import ExecutionTraceObserver

    path = tmp_path / "et.json.gz"
    et = ExecutionTraceObserver().register_callback(str(path))
    et.start()
    lucid.ones(2).exp()
    et.stop()
    lucid.ones(2).exp()  # after stop: not recorded
    assert not path.exists()  # written only when unregistered
    et.unregister_callback()
    names = [n["name"] for n in json.loads(gzip.decompress(path.read_bytes()))["nodes"]]
    assert names.count("lucid::exp") == 1
