"""Regressions of three small gaps: ``lucid.multiprocessing.spawn`` as PyTorch's module (with the
``ProcessException`` base), BatchNorm modules on empty inputs and 0 channels, and
``DistributedDataParallel`` as a true ``Joinable``.

The MPI part runs this file as the rank body (``lucid-run``, protocol in
``tests/distributed/rankchecks.py``); rank ``r`` has ``r + 1`` iterations.
"""
import importlib.util
import os
import pickle
import subprocess
import sys
import types

import numpy as np
import pytest

import lucid
import lucid.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
DIST_TESTS = os.path.join(os.path.dirname(HERE), "distributed")
ROOT = os.path.dirname(os.path.dirname(HERE))

CHECKS = {}


def check(fn):
    CHECKS[fn.__name__] = fn
    return fn


def _fresh_python(code):
    """Run ``code`` in a new interpreter (import order matters here); returns its stdout."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               OPENBLAS_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


# ------------------------------------------------------------------ 1. lucid.multiprocessing.spawn


def _write_rank(i, folder):
    with open(os.path.join(folder, f"rank{i}"), "w") as f:
        f.write(str(i * 10))


def _raise_on_one(i):
    if i == 1:
        raise KeyError("rank one fails")


def _exit_three(i):
    os._exit(3)


def test_importing_the_spawn_module_keeps_the_spawn_function(tmp_path):
    out = _fresh_python(
        "import sys, types, lucid\n"
        "print('lucid.multiprocessing' in sys.modules)\n"  # import lucid stays lean
        "import lucid.multiprocessing.spawn\n"
        "import lucid.multiprocessing as mp\n"
        "module = sys.modules['lucid.multiprocessing.spawn']\n"
        "print(isinstance(mp.spawn, types.FunctionType), mp.spawn is module.spawn, callable(module))\n"
        f"print(lucid.multiprocessing.spawn(print, args=('child',), nprocs=2))\n")
    lines = out.split("\n")
    assert lines[0] == "False"
    assert lines[1] == "True True False"  # the function, and the module is a plain module again
    assert out.count("child") == 2 and "None" in lines[-2]


def test_spawn_names_live_in_the_spawn_module_with_a_common_base():
    import lucid.multiprocessing as mp

    module = sys.modules["lucid.multiprocessing.spawn"]
    assert isinstance(module, types.ModuleType) and type(module) is types.ModuleType
    for name in ("spawn", "start_processes", "ProcessContext", "ProcessException", "ProcessRaisedException",
                 "ProcessExitedException"):
        assert getattr(mp, name) is getattr(module, name), name
        assert getattr(module, name).__module__ == "lucid.multiprocessing.spawn", name
    assert module.SpawnContext is mp.ProcessContext
    assert issubclass(mp.ProcessRaisedException, mp.ProcessException)
    assert issubclass(mp.ProcessExitedException, mp.ProcessException)
    e = mp.ProcessExitedException("process 1 terminated with signal SIGKILL", 1, 4242, -9, "SIGKILL")
    back = pickle.loads(pickle.dumps(e))
    assert (type(back), back.msg, back.error_index, back.error_pid, back.exit_code, back.signal_name) == \
        (mp.ProcessExitedException, e.msg, 1, 4242, -9, "SIGKILL")
    assert back.pid == 4242  # Lucid's older name stays
    r = pickle.loads(pickle.dumps(mp.ProcessRaisedException("boom", 0, 7)))
    assert (type(r), str(r), r.error_index, r.error_pid) == (mp.ProcessRaisedException, "boom", 0, 7)


def test_process_exception_catches_a_raising_and_an_exiting_process(tmp_path):
    import lucid.multiprocessing.spawn  # noqa: F401  (the module import must not hide the function)
    import lucid.multiprocessing as mp
    from lucid.multiprocessing.spawn import ProcessException

    assert mp.spawn(_write_rank, args=(str(tmp_path),), nprocs=2) is None
    assert sorted((p.name, p.read_text()) for p in tmp_path.iterdir()) == [("rank0", "0"), ("rank1", "10")]
    caught = []
    for fn in (_raise_on_one, _exit_three):
        try:
            mp.spawn(fn, nprocs=2)
        except ProcessException as e:
            caught.append(e)
    raised, exited = caught
    assert type(raised) is mp.ProcessRaisedException and raised.error_index == 1
    assert "KeyError: 'rank one fails'" in str(raised) and raised.error_pid > 0
    assert type(exited) is mp.ProcessExitedException and exited.exit_code == 3 and exited.signal_name is None


# ------------------------------------------------------------------ 2. BatchNorm on empty inputs


def test_batch_norm_module_takes_an_empty_batch_of_zero_channels():
    bn = nn.BatchNorm1d(0, affine=False)
    x = lucid.randn(4, 0, requires_grad=True)
    y = bn(x)  # was ZeroDivisionError: numel() // shape[1]
    assert tuple(y.shape) == (4, 0) and int(bn.num_batches_tracked) == 1
    y.sum().backward()
    assert tuple(x.grad.shape) == (4, 0)
    bn.eval()
    assert tuple(bn(lucid.randn(4, 0, 5)).shape) == (4, 0, 5) and int(bn.num_batches_tracked) == 1


def test_batch_norm_module_empty_inputs_pass_through_and_count_the_batch():
    bn = nn.BatchNorm2d(3, momentum=None)
    with lucid.no_grad():
        bn.weight.copy_(lucid.tensor([2.0, 3.0, 4.0]))
        bn.bias.copy_(lucid.tensor([0.5, 0.0, 0.0]))
    for shape in [(0, 3, 2, 2), (2, 3, 0, 4)]:
        x = lucid.randn(*shape, requires_grad=True)
        y = bn(x)
        assert tuple(y.shape) == shape
        y.sum().backward()
        np.testing.assert_array_equal(bn.weight.grad.numpy(), np.zeros(3))
        np.testing.assert_array_equal(bn.bias.grad.numpy(), np.zeros(3))
    assert int(bn.num_batches_tracked) == 2
    np.testing.assert_array_equal(bn.running_mean.numpy(), np.zeros(3))
    np.testing.assert_array_equal(bn.running_var.numpy(), np.ones(3))
    # An empty input is answered before its channels are read (PyTorch): 0 channels for a 3-channel model
    assert tuple(nn.BatchNorm1d(3)(lucid.randn(4, 0)).shape) == (4, 0)


def test_batch_norm_module_counts_values_per_channel_without_dividing_by_channels():
    # (1, 0): one value per channel, as PyTorch counts it (N times the spatial sizes): an error in training
    with pytest.raises(ValueError, match=r"expected more than 1 value per channel when training, got input size "
                                         r"\(1, 0\)"):
        nn.BatchNorm1d(0, affine=False)(lucid.randn(1, 0))
    # 0 channels with affine parameters: PyTorch's IndexError (weight[0] of an empty weight), and
    # Lucid raises it before counting the batch
    bn = nn.BatchNorm1d(0)
    with pytest.raises(IndexError, match=r"BatchNorm1d: an empty input of shape \(4, 0\) needs num_features > 0"):
        bn(lucid.randn(4, 0))
    assert int(bn.num_batches_tracked) == 0


def test_batch_norm_module_empty_inputs_match_pytorch():
    torch = pytest.importorskip("torch")
    for C, shape, kwargs in [(0, (4, 0), {"affine": False}), (3, (0, 3, 5), {}), (3, (4, 0), {}),
                             (0, (1, 0), {"affine": False}), (0, (4, 0), {})]:
        for training in (True, False):
            outcome = []
            for lib, t in ((lucid, lucid.randn), (torch, torch.randn)):
                m = lib.nn.BatchNorm1d(C, **kwargs).train(training)
                try:
                    y = m(t(*shape))
                    outcome.append(("ok", tuple(y.shape), int(m.num_batches_tracked)))
                except (ValueError, IndexError) as e:
                    outcome.append((type(e).__name__,))
            assert outcome[0] == outcome[1], (C, shape, kwargs, training, outcome)


# ------------------------------------------------------------------ 3. DDP as a Joinable


def test_ddp_is_a_registered_joinable_without_importing_distributed_from_nn():
    from lucid.distributed.algorithms.join import Joinable
    from lucid.nn.parallel import DistributedDataParallel

    assert issubclass(DistributedDataParallel, Joinable)
    out = _fresh_python("import sys, lucid.nn, lucid.nn.parallel\nprint('lucid.distributed' in sys.modules)")
    assert out.strip() == "False"


def _model():
    lucid.manual_seed(0)
    return nn.Linear(2, 1).double()


def _loss(model, k, q):
    x = lucid.tensor([[1.0 + k, -q], [0.5 * q, 2.0 - k]], dtype=lucid.float64)
    return (model(x) ** 2).mean()


@check
def ddp_is_a_joinable_and_joins_through_its_own_hook():
    import lucid.distributed as dist
    from lucid.distributed.algorithms.join import Join, Joinable, JoinHook, _as_joinable
    from lucid.nn.parallel import DistributedDataParallel as DDP

    r, W = dist.get_rank(), dist.get_world_size()
    model = DDP(_model())
    assert isinstance(model, Joinable) and _as_joinable(model) is model
    assert not model._join_config.enable
    assert model.join_process_group is None and str(model.join_device) == str(model.module.weight.device)
    assert isinstance(model.join_hook(divide_by_initial_world_size=False), JoinHook) and not model._join_divide
    opt = lucid.optim.SGD(model.parameters(), lr=0.1)
    join = Join([model], divide_by_initial_world_size=False)
    with join:
        assert model._join_config == (True, False, True) and not model._join["divide_by_initial"]
        for k in range(r + 1):
            _loss(model, k, r).backward()
            opt.step()
            opt.zero_grad()
    assert model._join is None and model._divisor == W and not model._join_config.enable
    ref = _model()
    ref_opt = lucid.optim.SGD(ref.parameters(), lr=0.1)
    for k in range(W):  # divided by the ranks still active at iteration k
        active = [q for q in range(W) if k < q + 1]
        (sum(_loss(ref, k, q) for q in active) / len(active)).backward()
        ref_opt.step()
        ref_opt.zero_grad()
    for p, q in zip(model.module.parameters(), ref.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-12, atol=1e-12)


HAVE_MPI = False
if importlib.util.find_spec("mpi4py") is not None:
    from lucid.distributed.run import find_mpiexec

    HAVE_MPI = find_mpiexec() is not None


@pytest.mark.skipif(not HAVE_MPI, reason="needs mpi4py and mpiexec (pip install -e '.[distributed]')")
def test_ddp_joinable_on_uneven_inputs_on_every_rank(tmp_path):
    sys.path.insert(0, DIST_TESTS)
    from rankchecks import assert_checks_pass

    assert_checks_pass(os.path.abspath(__file__), CHECKS, 2, tmp_path, timeout=90)


if __name__ == "__main__":
    sys.path.insert(0, DIST_TESTS)
    from rankchecks import rank_main

    rank_main(CHECKS, sys.argv[1:])
