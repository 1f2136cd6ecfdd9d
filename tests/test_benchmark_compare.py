"""``lucid.utils.benchmark``: ``Compare`` tables (layout, merging, trimming, colours, warnings),
``Measurement``'s statistics, and the ``Fuzzer`` (seeded parameters, constraints, layouts).
PyTorch parity (byte-identical tables, identical fuzzed parameters) where torch is installed."""
import random
import re

import numpy as np
import pytest

import lucid
from lucid.utils.benchmark import (Colorize, Compare, FuzzedParameter, FuzzedTensor, Fuzzer, Measurement,
                                   ParameterAlias, Timer)


def _m(times, label="add", sub_label=None, description=None, num_threads=1, env=None, number=1, stmt="x + y"):
    return Measurement(number, [t * number for t in times], stmt, label=label, sub_label=sub_label,
                       description=description, num_threads=num_threads, env=env)


def test_compare_layout_rows_columns_threads():
    ms = [_m([2e-6], sub_label="[1, 2]", description="lucid"),
          _m([1.5e-6], sub_label="[1, 2]", description="numpy"),
          _m([40e-6], sub_label="[64, 64]", description="lucid"),
          _m([1e-6], sub_label="[1, 2]", description="lucid", num_threads=4)]
    text = str(Compare(ms))
    assert text == (
        "[------------- add --------------]\n"
        "                |  lucid  |  numpy\n"
        "1 threads: -----------------------\n"
        "      [1, 2]    |    2.0  |   1.5 \n"
        "      [64, 64]  |   40.0  |       \n"
        "4 threads: -----------------------\n"
        "      [1, 2]    |    1.0  |       \n"
        "\n"
        "Times are in microseconds (us).\n")


def test_compare_one_table_per_label_and_env_column():
    ms = [_m([3e-3], label="mm", sub_label="a", env="old", description="t"),
          _m([1e-3], label="mm", sub_label="a", env="new", description="t"),
          _m([5e-9], label="add", stmt="x+1", description="t")]
    assert str(Compare(ms)) == (
        "[------ mm ------]\n"
        "            |   t \n"
        "1 threads: -------\n"
        "  (new)  a  |  1.0\n"  # rows sort by (threads, env), as PyTorch's
        "  (old)  a  |  3.0\n"
        "\n"
        "Times are in milliseconds (ms).\n"
        "\n"
        "[----- add -----]\n"
        "           |   t \n"
        "1 threads: ------\n"
        "      x+1  |  5.0\n"
        "\n"
        "Times are in nanoseconds (ns).\n")


def test_compare_merges_replicates():
    a = _m([1e-6, 3e-6], sub_label="r", number=10)
    b = _m([2e-6], sub_label="r", number=1)
    merged = Measurement.merge([a, b])
    assert len(merged) == 1 and merged[0].number_per_run == 1
    assert sorted(merged[0].times) == pytest.approx([1e-6, 2e-6, 3e-6])
    assert merged[0].median == pytest.approx(2e-6)
    assert "2.0" in str(Compare([a, b]))
    # different descriptions are different tasks
    assert len(Measurement.merge([a, _m([1e-6], sub_label="r", description="d")])) == 2


def test_significant_figures_and_trim():
    # a 90% CI under 25 ns counts as 25 ns: log10(1 ms / 25 ns) = 4.6, capped at 4
    tight = _m([1.0e-3 + i * 1e-12 for i in range(20)])
    assert tight.significant_figures == 4
    assert _m([1.0e-6 + i * 1e-12 for i in range(20)]).significant_figures == 1  # log10(40) = 1.6
    noisy = _m([1e-6, 2e-6, 1.5e-6, 1.2e-6, 1.8e-6])
    # IQR points [1.2, 1.5, 1.8] us: std 0.245 us, ci = 1.645 * std / sqrt(3) = 0.233 us,
    # log10(1.5 / 0.233) = 0.81 -> floor 0, clipped to 1
    assert noisy.significant_figures == 1
    c = Compare([_m([1.23456e-3] * 9, sub_label="a"), _m([2.5e-3] * 9, sub_label="b")])
    assert str(c).splitlines()[3].endswith("1.2")  # untrimmed: one decimal
    c.trim_significant_figures()  # 4 figures each: 3 decimals
    rows = str(c).splitlines()
    assert rows[3].endswith("1.235") and rows[4].endswith("2.500")
    c = Compare([_m([1.23456e-3] * 9, sub_label="a"), _m([2e-3, 2.6e-3, 2.1e-3, 2.4e-3], sub_label="b")])
    c.trim_significant_figures()  # the noisy cell supports one figure: no decimals in the column
    rows = str(c).splitlines()
    assert rows[3].endswith("  1") and rows[4].endswith("  2")


def test_highlight_warnings_marks_noisy_cells():
    noisy = _m([1e-6, 3e-6, 1e-6, 3e-6], sub_label="n")
    assert noisy.has_warnings and not _m([1e-6] * 4).has_warnings
    c = Compare([noisy, _m([1e-6] * 4, sub_label="q")])
    c.highlight_warnings()
    text = str(c)
    assert "(! 100%)" in text and "Measurement has high variance" in text
    assert "(!" not in str(Compare([noisy]))


def test_colorize_best_and_worst():
    ms = [_m([1e-6], sub_label="a", description="x"), _m([6e-6], sub_label="a", description="y"),
          _m([1.05e-6], sub_label="b", description="x"), _m([2.5e-6], sub_label="b", description="y")]
    c = Compare(ms)
    c.colorize()  # columnwise: best in each column
    text = str(c)
    assert "\033[92m\033[1m" in text and "\033[31m\033[1m" not in text
    c.colorize(rowwise=True)  # 6.0 is 6x the row's best: very bad; 2.5 is 2.4x: bad
    text = str(c)
    assert "\033[31m\033[1m" in text and "\033[2m\033[91m" in text
    assert c._colorize is Colorize.ROWWISE


def test_compare_rejects_non_measurements_and_prints(capsys):
    with pytest.raises(ValueError, match="^Compare: expected an instance of `Measurement`"):
        Compare([1.0])
    c = Compare([])
    c.extend_results([_m([1e-6], sub_label="s")])
    c.print()
    assert capsys.readouterr().out == str(c) + "\n"


def test_compare_real_timer_results():
    x = lucid.ones(8)
    results = [Timer("x + x", globals={"x": x}, label="add", sub_label=str(n), description="lucid").timeit(20)
               for n in (1, 2)]
    lines = str(Compare(results)).splitlines()
    assert lines[1].strip() == "|  lucid" and lines[3].strip().startswith("1  |")
    assert re.match(r"Times are in (nano|micro|milli)seconds", lines[-1])


def test_measurement_repr_gross_warning_threshold():
    # IQR / median = 0.5 / 1.5 = 33%: over PyTorch's 25% "gross" threshold
    assert "significant environmental influence" in repr(_m([1e-6, 2e-6]))
    assert "could indicate system fluctuation" in repr(_m([1e-6, 1.1e-6, 1.2e-6, 1.25e-6]))


def test_compare_matches_torch_byte_for_byte():
    pytest.importorskip("torch")
    import torch.utils.benchmark as TB
    from torch.utils.benchmark.utils.common import TaskSpec

    rng = random.Random(0)
    tm, lm = [], []
    for label in ("add", "mul"):
        for threads in (4, 1):
            for sub in ("[1, 2]", "[64, 64]"):
                for desc in (("lucid", "numpy") if label == "add" else ("lucid",)):
                    for env in (("A", "Bxx") if label == "mul" else (None,)):
                        scale = 10 if sub == "[64, 64]" else 1
                        times = [rng.uniform(1, 1.4) * 1e-6 * scale for _ in range(rng.choice([1, 2, 5, 9]))]
                        n = rng.choice([1, 10])
                        tm.append(TB.Measurement(n, [t * n for t in times], TaskSpec(
                            "x+y", "pass", label=label, sub_label=sub, description=desc, env=env,
                            num_threads=threads)))
                        lm.append(_m(times, label, sub, desc, threads, env, number=n, stmt="x+y"))
    for opts in [(), ("trim_significant_figures",), ("colorize",), ("highlight_warnings",),
                 ("highlight_warnings", "trim_significant_figures", "colorize")]:
        tc, lc = TB.Compare(tm), Compare(lm)
        for o in opts:
            getattr(tc, o)()
            getattr(lc, o)()
        assert str(lc) == str(tc), opts
    for a, b in zip(TB.Measurement.merge(tm), Measurement.merge(lm)):
        assert (a.significant_figures, a.has_warnings) == (b.significant_figures, b.has_warnings)


# ------------------------------------------------------------------ Fuzzer


def test_fuzzed_parameter_distributions():
    state = np.random.RandomState(0)
    ints = [FuzzedParameter("n", 3, 5, distribution="uniform").sample(state) for _ in range(200)]
    assert set(ints) == {3, 4, 5} and all(isinstance(v, int) for v in ints)
    floats = [FuzzedParameter("f", 0, 1.0, distribution="uniform").sample(state) for _ in range(50)]
    assert all(0 <= v <= 1 for v in floats) and not all(float(v).is_integer() for v in floats)
    logs = [FuzzedParameter("l", 1, 1024, distribution="loguniform").sample(state) for _ in range(2000)]
    assert min(logs) >= 1 and max(logs) <= 1024
    # uniform in log2: as many draws in [1, 32) as in [32, 1024]
    assert abs(sum(v < 32 for v in logs) / len(logs) - 0.5) < 0.05
    choice = FuzzedParameter("c", distribution={"a": 0.25, "b": 0.75})
    picks = [choice.sample(state) for _ in range(2000)]
    assert abs(picks.count("a") / 2000 - 0.25) < 0.04


def test_fuzzed_parameter_validation():
    with pytest.raises(ValueError, match="^FuzzedParameter: unknown distribution"):
        FuzzedParameter("x", 1, 2, distribution="normal")
    with pytest.raises(ValueError, match="not normalized"):
        FuzzedParameter("x", distribution={1: 0.5, 2: 0.4})
    with pytest.raises(ValueError, match="negative"):
        FuzzedParameter("x", distribution={1: 1.5, 2: -0.5})
    with pytest.raises(ValueError, match="minval and maxval must be None"):
        FuzzedParameter("x", 1, None, distribution={1: 1.0})


def test_fuzzer_is_seeded_and_respects_constraints():
    def make(seed):
        return Fuzzer(parameters=[FuzzedParameter("n", 1, 64, distribution="loguniform"),
                                  FuzzedParameter("m", 1, 8, distribution="uniform")],
                      tensors=[FuzzedTensor("x", size=("n", "m"), max_elements=100, dtype=lucid.float64)],
                      constraints=[lambda p: p["m"] % 2 == 0], seed=seed)

    f = make(7)
    a = [(p, t["x"].numpy().copy()) for t, _, p in f.take(10)]
    b = [(p, t["x"].numpy().copy()) for t, _, p in make(7).take(10)]
    for (pa, xa), (pb, xb) in zip(a, b):
        assert pa == pb and np.array_equal(xa, xb)
    assert all(p["m"] % 2 == 0 and p["n"] * p["m"] <= 100 for p, _ in a)
    assert all(x.shape == (p["n"], p["m"]) and x.dtype == np.float64 and ((x >= 0) & (x < 1)).all() for p, x in a)
    assert 0 < f.rejection_rate < 1
    assert [p for p, _ in a] != [p for _, _, p in make(8).take(10)]


def test_fuzzed_tensor_layouts_steps_and_dims():
    f = Fuzzer(parameters=[FuzzedParameter("d", 1, 3, distribution="uniform")],
               tensors=[FuzzedTensor("x", size=(4, 5, 6), steps=(2, 1, 3), dim_parameter="d",
                                     probability_contiguous=0.0),
                        FuzzedTensor("i", size=(3,), dtype=lucid.int32)], seed=1)
    for tensors, props, params in f.take(8):
        x, d = tensors["x"], params["d"]
        assert tuple(x.shape) == (4, 5, 6)[:d] and props["x"]["steps"] == (2, 1, 3)[:d]
        assert props["x"]["numel"] == x.numel() and props["x"]["is_contiguous"] == x.is_contiguous()
        if d > 1:  # probability_contiguous=0: a non-identity memory order
            assert sorted(props["x"]["order"]) == list(range(d)) and list(props["x"]["order"]) != list(range(d))
            assert not x.is_contiguous()
        i = tensors["i"]
        assert i.dtype == lucid.int32 and ((i.numpy() >= 1) & (i.numpy() < 127)).all()


def test_fuzzer_aliases_constructor_and_errors():
    f = Fuzzer(parameters=[FuzzedParameter("x_len", 4, 16, distribution="uniform"),
                           FuzzedParameter("y_len", distribution={1: 0.5, ParameterAlias("x_len"): 0.5})],
               tensors=[FuzzedTensor("y", size=("y_len",),
                                     tensor_constructor=lambda size, dtype, **kw: lucid.full(size, 7.0, dtype=dtype))],
               seed=0)
    seen = set()
    for tensors, _, p in f.take(30):
        assert p["y_len"] in (1, p["x_len"]) and tensors["y"].tolist() == [7.0] * p["y_len"]
        seen.add(p["y_len"] == 1)
    assert seen == {True, False}
    with pytest.raises(ValueError, match="cycle"):
        next(Fuzzer(parameters=[FuzzedParameter("a", distribution={ParameterAlias("b"): 1.0}),
                                FuzzedParameter("b", distribution={ParameterAlias("a"): 1.0})], tensors=[],
                    seed=0).take(1))
    with pytest.raises(ValueError, match="^Fuzzer: duplicate names"):
        Fuzzer(parameters=[FuzzedParameter("x", 1, 2, distribution="uniform")], tensors=[FuzzedTensor("x", (1,))])
    with pytest.raises(ValueError, match="^Fuzzer: failed to generate"):
        next(Fuzzer(parameters=[FuzzedParameter("n", 1, 4, distribution="uniform")],
                    tensors=[FuzzedTensor("x", size=("n",), min_elements=10)], seed=0).take(1))


def test_fuzzer_parameters_match_torch():
    torch = pytest.importorskip("torch")
    import torch.utils.benchmark as TB

    def make(M, dt):
        return M.Fuzzer(parameters=[M.FuzzedParameter("n", 1, 1024, distribution="loguniform"),
                                    M.FuzzedParameter("m", 2, 9, distribution="uniform"),
                                    M.FuzzedParameter("d", 1, 3, distribution="uniform", strict=True),
                                    M.FuzzedParameter("s", 1, 3, distribution="uniform")],
                        tensors=[M.FuzzedTensor("x", size=("n", "m", "m"), steps=("s", 1, "s"), dim_parameter="d",
                                                max_elements=5000, dtype=dt),
                                 M.FuzzedTensor("y", size=("m",), probability_contiguous=0.2)],
                        constraints=[lambda params: params["m"] != 5], seed=3)

    import lucid.utils.benchmark as LB

    ft, fl = make(TB, torch.float64), make(LB, lucid.float64)
    for (t1, p1, q1), (t2, p2, q2) in zip(ft.take(15), fl.take(15)):
        assert q1 == q2
        for k in t1:
            assert tuple(t1[k].shape) == tuple(t2[k].shape)
            assert (p1[k]["numel"], p1[k]["steps"], p1[k]["is_contiguous"]) == \
                (p2[k]["numel"], p2[k]["steps"], p2[k]["is_contiguous"])
            assert list(p1[k]["order"]) == list(p2[k]["order"])
    assert ft.rejection_rate == fl.rejection_rate
