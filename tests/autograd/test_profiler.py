"""lucid.profiler: events, tables, chrome traces, and nothing left behind (issue 8)."""
import json
import os
import re

import numpy as np
import pytest

import lucid
from lucid._core import primitive
from lucid._core.grad_mode import PROFILING
from lucid.autograd.engine import Node
from lucid.autograd.function import FunctionNode
from lucid.profiler import profile, record_function


def t64(a, rg=True):
    return lucid.tensor(np.asarray(a, dtype=np.float64), requires_grad=rg)


def counts(prof):
    return {e.key: e.count for e in prof.key_averages()}


def test_forward_and_backward_events_with_shapes_and_memory():
    x = t64([1.0, 2.0, 3.0])
    with profile(record_shapes=True, profile_memory=True) as prof:
        (x * x).sum().backward()
    assert counts(prof) == {"lucid::mul": 1, "lucid::sum": 1, "MulBackward0": 1, "SumBackward0": 1}
    by_name = {e.name: e for e in prof.events()}
    assert by_name["lucid::mul"].input_shapes == [[3], [3]]
    assert by_name["lucid::mul"].cpu_memory_usage == 3 * 8
    assert by_name["lucid::sum"].cpu_memory_usage == 8
    assert by_name["MulBackward0"].cpu_memory_usage == 2 * 3 * 8  # one gradient per operand
    for e in prof.events():
        assert 0 <= e.self_cpu_time_total <= e.cpu_time_total
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 4.0, 6.0])


def test_record_function_ranges_nest_and_self_time():
    x = t64([1.0, 2.0])
    with profile() as prof:
        with record_function("outer"):
            with record_function("inner"):
                y = x.exp()
            y.sum().backward()
    evs = {e.name: e for e in prof.events()}
    assert [e.name for e in prof.events()][:3] == ["outer", "inner", "lucid::exp"]
    outer, inner, exp = evs["outer"], evs["inner"], evs["lucid::exp"]
    assert inner.start_us >= outer.start_us
    assert inner.start_us + inner.cpu_time_total <= outer.start_us + outer.cpu_time_total + 1e-3
    # self time = total minus the children's totals
    children = inner.cpu_time_total + evs["lucid::sum"].cpu_time_total + evs["ExpBackward0"].cpu_time_total \
        + evs["SumBackward0"].cpu_time_total
    assert outer.self_cpu_time_total == pytest.approx(outer.cpu_time_total - children, abs=1e-3)
    assert inner.self_cpu_time_total == pytest.approx(inner.cpu_time_total - exp.cpu_time_total, abs=1e-3)


def test_record_function_as_decorator_and_when_off():
    @record_function("fn_range")
    def f(t):
        return t * 2

    f(t64([1.0]))  # no profiler: nothing happens
    with profile() as prof:
        f(t64([1.0]))
    assert counts(prof) == {"fn_range": 1, "lucid::mul": 1}


def test_table_sort_and_row_limit():
    x = t64(np.ones((8, 8)))
    with profile(record_shapes=True, profile_memory=True) as prof:
        for _ in range(3):
            (x @ x).tanh().sum().backward()
    avg = prof.key_averages()
    table = avg.table(sort_by="self_cpu_time_total", row_limit=3)
    lines = table.splitlines()
    assert "Self CPU %" in lines[1] and "# of Calls" in lines[1] and "CPU Mem" in lines[1]
    rows = lines[3:6]
    top = sorted(avg, key=lambda e: e.self_cpu_time_total, reverse=True)[:3]
    assert [r.split()[0] for r in rows] == [e.key for e in top]
    assert lines[6].startswith("---") and lines[7].startswith("Self CPU time total")
    by_count = avg.table(sort_by="count", row_limit=1).splitlines()[3]
    assert re.split(r"\s{2,}", by_count.strip())[6] == "3"  # the "# of Calls" column: every op ran 3 times
    grouped = prof.key_averages(group_by_input_shape=True).table(sort_by="cpu_time_total")
    assert "Input Shapes" in grouped and "[[8, 8], [8, 8]]" in grouped
    with pytest.raises(ValueError, match="sort_by"):
        avg.table(sort_by="speed")


def test_export_chrome_trace_is_valid_trace_event_json(tmp_path):
    x = t64([1.0, 2.0])
    with profile(record_shapes=True) as prof:
        with record_function("block"):
            x.sin().sum().backward()
    path = prof.export_chrome_trace(str(tmp_path / "trace.json"))
    data = json.loads(open(path).read())
    events = data["traceEvents"]
    assert {e["name"] for e in events} == {"block", "lucid::sin", "lucid::sum", "SinBackward0", "SumBackward0"}
    for e in events:
        assert e["ph"] == "X" and isinstance(e["ts"], float) and e["dur"] >= 0
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
    sin = next(e for e in events if e["name"] == "lucid::sin")
    assert sin["args"]["Input Dims"] == [[2]] and sin["cat"] == "cpu_op"


def test_nothing_left_behind_even_after_an_error():
    impls = {name: p.impl for name, p in primitive.REGISTRY.items()}
    applies = (Node.__dict__["apply"], FunctionNode.__dict__["apply"])
    with pytest.raises(ZeroDivisionError):
        with profile():
            1 / 0
    assert PROFILING[0] == 0
    assert all(p.impl is impls[n] for n, p in primitive.REGISTRY.items())
    assert (Node.__dict__["apply"], FunctionNode.__dict__["apply"]) == applies
    with profile(enabled=False) as prof:
        (t64([1.0]) * 2).sum().backward()
    assert len(prof.events()) == 0


def test_nested_profile_raises():
    with profile():
        with pytest.raises(RuntimeError, match="already running"):
            with profile():
                pass


def test_custom_function_create_graph_and_same_gradients():
    class Cube(lucid.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 3 * x * x * g

    x = t64([1.0, 2.0])
    with profile() as prof:
        (g,) = lucid.autograd.grad(Cube.apply(x).sum(), [x], create_graph=True)
        g.sum().backward()
    c = counts(prof)
    assert c["CubeBackward"] == 1
    assert c["lucid::mul"] >= 2  # the backward's ops, recorded as children of CubeBackward
    np.testing.assert_allclose(g.detach().numpy(), [3.0, 12.0])
    np.testing.assert_allclose(x.grad.numpy(), [6.0, 12.0])


def test_autograd_profiler_alias():
    import lucid.autograd.profiler as ap

    assert ap.profile is profile and ap.record_function is record_function
    assert lucid.profiler.profile is profile


# ----------------------------------------------------------------- schedules


def _step_labels(prof):
    return sorted(e.key for e in prof.key_averages() if e.key.startswith("step"))


def test_schedule_actions_follow_wait_warmup_active_repeat():
    from lucid.profiler import ProfilerAction as A, schedule

    s = schedule(wait=1, warmup=1, active=2, repeat=2, skip_first=1)
    assert [s(i) for i in range(11)] == [A.NONE, A.NONE, A.WARMUP, A.RECORD, A.RECORD_AND_SAVE,
                                          A.NONE, A.WARMUP, A.RECORD, A.RECORD_AND_SAVE, A.NONE, A.NONE]
    forever = schedule(wait=2, warmup=0, active=1)
    assert [forever(i) for i in range(7)] == [A.NONE, A.NONE, A.RECORD_AND_SAVE] * 2 + [A.NONE]
    # skip_first_wait drops the wait of the first cycle only
    s = schedule(wait=2, warmup=1, active=1, skip_first_wait=1)
    assert [s(i) for i in range(6)] == [A.WARMUP, A.RECORD_AND_SAVE, A.NONE, A.NONE, A.WARMUP, A.RECORD_AND_SAVE]


@pytest.mark.parametrize("kwargs", [dict(wait=-1, warmup=0, active=1), dict(wait=0, warmup=0, active=0),
                                    dict(wait=0, warmup=0, active=1, repeat=-2)])
def test_schedule_rejects_bad_counts(kwargs):
    from lucid.profiler import schedule

    with pytest.raises(ValueError, match="schedule: invalid arguments"):
        schedule(**kwargs)


def test_scheduled_profile_hands_each_cycle_to_on_trace_ready():
    from lucid.profiler import schedule

    seen = []
    with profile(schedule=schedule(wait=1, warmup=1, active=2, repeat=2),
                 on_trace_ready=lambda p: seen.append((p.step_num, _step_labels(p)))) as prof:
        for i in range(10):
            with record_function(f"step{i}"):
                lucid.ones(2) + 1
            prof.step()
    # the same cycles PyTorch 2.13 reports for this schedule
    assert seen == [(4, ["step2", "step3"]), (8, ["step6", "step7"])]
    assert _step_labels(prof) == ["step6", "step7"]  # results are the last cycle's
    assert PROFILING[0] == 0 and not hasattr(Node.apply, "_lucid_untimed")


def test_scheduled_profile_reports_a_cycle_cut_short_at_exit():
    from lucid.profiler import schedule

    seen = []
    with profile(schedule=schedule(wait=0, warmup=0, active=3),
                 on_trace_ready=lambda p: seen.append((p.step_num, _step_labels(p)))) as prof:
        for i in range(4):
            with record_function(f"step{i}"):
                lucid.ones(2) * 3
            prof.step()
    assert seen == [(3, ["step0", "step1", "step2"]), (4, ["step3"])]


def test_profile_outside_a_recorded_step_records_nothing():
    from lucid.profiler import schedule

    with profile(schedule=schedule(wait=5, warmup=0, active=1)) as prof:
        for _ in range(3):
            lucid.ones(2) + 1
            prof.step()
    assert len(prof.events()) == 0 and prof.step_num == 3
    assert PROFILING[0] == 0


def test_tensorboard_trace_handler_writes_one_file_per_cycle(tmp_path):
    import gzip

    from lucid.profiler import schedule, tensorboard_trace_handler

    with profile(schedule=schedule(wait=0, warmup=0, active=1, repeat=2),
                 on_trace_ready=tensorboard_trace_handler(str(tmp_path / "tb"), worker_name="w", use_gzip=True)) as p:
        for _ in range(3):
            lucid.ones(2) + 1
            p.step()
    files = sorted(os.listdir(tmp_path / "tb"))
    assert len(files) == 2 and all(re.fullmatch(r"w\.\d+\.pt\.trace\.json\.gz", f) for f in files)
    trace = json.loads(gzip.decompress((tmp_path / "tb" / files[0]).read_bytes()))
    assert [e["name"] for e in trace["traceEvents"]] == ["lucid::add"]


def test_export_chrome_trace_leaves_no_partial_file(tmp_path, monkeypatch):
    x = t64([1.0, 2.0])
    with profile() as prof:
        x * 2
    target = tmp_path / "trace.json"
    target.write_text("old")

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        prof.export_chrome_trace(str(target))
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["trace.json"]
