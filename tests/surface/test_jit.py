"""lucid.jit: PyTorch's TorchScript API as PyTorch runs it with PYTORCH_JIT=0 (NOTE [No TorchScript])."""
import warnings
from typing import Dict, List, Optional, Tuple

import numpy as np
import pytest

import lucid
import lucid.nn as nn


def test_script_and_trace_return_what_they_are_given_and_compute_eagerly():
    @lucid.jit.script
    def f(x):
        if bool(x.sum() > 0):  # data-dependent control flow stays right (a trace would freeze it)
            return x * 2
        return -x

    assert f(lucid.tensor([1.0])).tolist() == [2.0] and f(lucid.tensor([-1.0])).tolist() == [1.0]
    m = nn.Linear(2, 1)
    assert lucid.jit.script(m) is m and lucid.jit.trace(m, lucid.ones(1, 2)) is m
    assert lucid.jit.trace_module(m, {"forward": lucid.ones(1, 2)}) is m
    with pytest.raises(TypeError, match="^script: expected"):
        lucid.jit.script(3)


def test_decorators_flags_and_annotations():
    class Net(nn.Module):
        @lucid.jit.ignore
        def helper(self, x):
            return x + 1

        @lucid.jit.ignore(drop=True)
        def other(self, x):
            return x

        @lucid.jit.export
        def exported(self, x):
            return self.helper(x) * 3

    assert Net().exported(lucid.tensor(1.0)).item() == 6.0 and Net().other(2) == 2
    assert not lucid.jit.is_scripting() and not lucid.jit.is_tracing()
    assert lucid.jit.annotate(List[int], [1]) == [1] and lucid.jit.Attribute(5, int) == 5
    assert lucid.jit.isinstance([1, 2], List[int]) and not lucid.jit.isinstance([1, "a"], List[int])
    assert lucid.jit.isinstance({"a": [1.0]}, Dict[str, List[float]])
    assert lucid.jit.isinstance((1, "a"), Tuple[int, str]) and not lucid.jit.isinstance((1,), Tuple[int, str])
    assert lucid.jit.isinstance(None, Optional[int]) and lucid.jit.isinstance(lucid.ones(1), lucid.Tensor)
    assert isinstance(nn.Linear(1, 1), nn.Module) and issubclass(lucid.jit.ScriptModule, nn.Module)


def test_fork_wait_and_futures():
    fut = lucid.jit.fork(lambda a, b: a @ b, lucid.eye(2), lucid.tensor([[1.0], [2.0]]))
    assert fut.done()
    np.testing.assert_array_equal(lucid.jit.wait(fut).numpy(), [[1.0], [2.0]])
    chained = fut.then(lambda f: f.wait().sum())
    assert chained.wait().item() == 3.0
    bad = lucid.jit.fork(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        bad.wait()
    seen = []
    pending = lucid.jit.Future()
    pending.add_done_callback(lambda f: seen.append(f.value()))
    pending.set_result(7)
    assert seen == [7]
    with pytest.raises(RuntimeError, match="already been set"):
        pending.set_result(8)


def test_freeze_save_load_and_fusion_settings(tmp_path):
    m = nn.Linear(2, 2)
    with pytest.raises(RuntimeError, match="eval mode"):
        lucid.jit.freeze(m)
    assert lucid.jit.freeze(m.eval()) is m
    m.train()
    assert lucid.jit.optimize_for_inference(m) is m and not m.training
    with pytest.raises(NotImplementedError, match=r"^jit.save: .*lucid.save\(model.state_dict\(\), f\)"):
        lucid.jit.save(m, str(tmp_path / "m.pt"))
    assert not (tmp_path / "m.pt").exists()
    with pytest.raises(NotImplementedError, match="^jit.load: "):
        lucid.jit.load(str(tmp_path / "m.pt"))
    prev = lucid.jit.set_fusion_strategy([("DYNAMIC", 3)])
    assert lucid.jit.set_fusion_strategy(prev) == [("DYNAMIC", 3)]
    with lucid.jit.optimized_execution(False), lucid.jit.fuser("fuser1"), lucid.jit.strict_fusion():
        pass
    with pytest.raises(Exception, match="unrecognized fuser option"):
        with lucid.jit.fuser("nope"):
            pass


def test_pytorch_agrees_under_pytorch_jit_0():
    # The same calls in a PyTorch process with PYTORCH_JIT=0 (the mode lucid.jit follows).
    pytest.importorskip("torch")
    import subprocess
    import sys

    code = ("import torch\n"
            "def f(x): return x * 2\n"
            "m = torch.nn.Linear(2, 2)\n"
            "print(torch.jit.script(f) is f, torch.jit.trace(f, torch.ones(2)) is f, torch.jit.script(m) is m,\n"
            "      torch.jit.is_scripting(), torch.jit.annotate(int, 3), torch.jit.wait(torch.jit.fork(f, torch.ones(1))).item())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**__import__("os").environ, "PYTORCH_JIT": "0"}, timeout=120)
    assert out.stdout.split() == ["True", "True", "True", "False", "3", "2.0"], out.stderr[-2000:]
