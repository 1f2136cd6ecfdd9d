"""Regressions from the second distributed sweep against PyTorch 2.13 (gloo): when DDP broadcasts
BatchNorm buffers, FSDP's parameter names and local state-dict keys, and what the other ranks say
when one rank dies.

The buffer scenario runs twice with the same weights and per-rank data: as Lucid ranks under
``lucid-run -n 2`` (this file as a script) and, when torch is installed, as torch gloo ranks; the
per-rank buffers after every step must agree. Without torch the Lucid run is checked against a
single-process simulation of PyTorch's rule (buffers from rank 0 before each synchronized forward).
"""
import importlib.util
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

HERE = os.path.abspath(__file__)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))

# what each step does: (mode, grad enabled, backward + SGD step)
STEPS = [("train", True, True), ("train", True, True), ("eval", True, False), ("train", True, True),
         ("train", False, False), ("train", True, True), ("eval", False, False), ("train", True, True)]


def _data(step, r):
    return np.random.default_rng(10 * step + r).standard_normal((5, 2)) * (r + 1) + r


def _init_weights(r):
    """Different on every rank (DDP must broadcast rank 0's at construction)."""
    w = np.arange(6, dtype=np.float64).reshape(3, 2) / 7 - 0.3 + r
    return w, np.array([0.1, -0.2, 0.3]) * (r + 1)


def _lucid_model(r):
    import lucid
    import lucid.nn as nn

    net = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3)).double()
    w, b = _init_weights(r)
    net.load_state_dict({**net.state_dict(), "0.weight": lucid.tensor(w), "0.bias": lucid.tensor(b),
                         "1.running_mean": lucid.tensor(np.full(3, 0.5 * r)),
                         "1.running_var": lucid.tensor(np.full(3, 1.0 + r))})
    return net


def _run_scenario(lib, ddp, opt, r, step_fn):
    """``[[running_mean, running_var, output-sum] per step]`` on this rank."""
    rows = []
    for step, (mode, grad, backward) in enumerate(STEPS):
        getattr(ddp, mode)()
        opt.zero_grad()
        with lib.set_grad_enabled(grad):
            out = ddp(lib.tensor(_data(step, r)))
        if backward:
            (out * out).sum().backward()
            opt.step()
        bn = ddp.module[1]
        rows.append([bn.running_mean.detach().numpy().tolist(), bn.running_var.detach().numpy().tolist(),
                     float(out.detach().sum())])
    return rows


def _lucid_rank(out_dir):
    import lucid
    import lucid.distributed as dist
    from lucid.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("mpi")
    r = dist.get_rank()
    ddp = DDP(_lucid_model(r))
    rows = _run_scenario(lucid, ddp, lucid.optim.SGD(ddp.parameters(), lr=0.05), r, None)
    with open(os.path.join(out_dir, f"lucid{r}.json"), "w") as f:
        json.dump(rows, f)
    res = {}
    try:
        _ddp_init_options(r)
        res["ddp_init_options"] = "ok"
    except Exception:  # noqa: BLE001  (reported by the test)
        import traceback

        res["ddp_init_options"] = traceback.format_exc()
    dist.barrier()
    for strategy in ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD"):
        for nested in (False, True):
            try:
                _fsdp_names(strategy, nested)
                res[f"{strategy}/{nested}"] = "ok"
            except Exception:  # noqa: BLE001  (reported by the test, per case)
                import traceback

                res[f"{strategy}/{nested}"] = traceback.format_exc()
            dist.barrier()
    with open(os.path.join(out_dir, f"fsdp{r}.json"), "w") as f:
        json.dump(res, f)


def _ddp_init_options(r):
    """PyTorch 2.13: the deprecated ``broadcast_buffers=False`` keeps each rank's buffers at construction,
    ``forward_sync_buffers=False`` still broadcasts them there, ``init_sync=False`` broadcasts nothing."""
    import warnings

    import lucid
    from lucid.nn.parallel import DistributedDataParallel as DDP

    w0, _ = _init_weights(0)
    cases = [({"broadcast_buffers": False}, w0, 0.5 * r, FutureWarning),
             ({"forward_sync_buffers": False}, w0, 0.0, None),
             ({"init_sync": False}, _init_weights(r)[0], 0.5 * r, None),
             ({}, w0, 0.0, None)]
    for kw, weight, mean, warning in cases:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ddp = DDP(_lucid_model(r), **kw)
        assert any(issubclass(c.category, FutureWarning) for c in caught) == (warning is not None), (kw, caught)
        np.testing.assert_array_equal(ddp.module[0].weight.numpy(), weight, err_msg=str(kw))
        np.testing.assert_array_equal(ddp.module[1].running_mean.numpy(), np.full(3, mean), err_msg=str(kw))
        assert ddp.broadcast_buffers == ddp.forward_sync_buffers == ("forward_sync_buffers" not in kw
                                                                     and "broadcast_buffers" not in kw), kw
        ddp.eval()
        with lucid.no_grad():
            ddp(lucid.tensor(_data(0, r)))  # broadcasts rank 0's buffers unless the option says not to
        want = 0.0 if ddp.forward_sync_buffers else mean
        np.testing.assert_array_equal(ddp.module[1].running_mean.numpy(), np.full(3, want), err_msg=str(kw))


W = "_fsdp_wrapped_module."
# PyTorch 2.13 (gloo, use_orig_params=False) on Sequential(Linear, BatchNorm1d, Sequential(Linear, Tanh),
# Linear) wrapped with ModuleWrapPolicy({Sequential, Linear}) (nested) or as one unit
TORCH_NAMES = {True: [f"{W}_flat_param", f"{W}0.{W}_flat_param", f"{W}2.{W}0.{W}_flat_param", f"{W}3.{W}_flat_param"],
               False: [f"{W}_flat_param"]}
TORCH_LOCAL = {True: ["_flat_param", "0._flat_param", "1.running_mean", "1.running_var", "1.num_batches_tracked",
                      "2.0._flat_param", "3._flat_param"],
               False: ["_flat_param", "1.running_mean", "1.running_var", "1.num_batches_tracked"]}
FULL_KEYS = ["0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean", "1.running_var", "1.num_batches_tracked",
             "2.0.weight", "2.0.bias", "3.weight", "3.bias"]


def _fsdp_names(strategy, nested):
    import warnings

    import lucid
    import lucid.nn as nn
    from lucid.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy, StateDictType
    from lucid.distributed.fsdp.wrap import ModuleWrapPolicy

    lucid.manual_seed(0)
    plain = nn.Sequential(nn.Linear(5, 7), nn.BatchNorm1d(7), nn.Sequential(nn.Linear(7, 3), nn.Tanh()),
                          nn.Linear(3, 2)).double()
    want = [(k, tuple(p.shape)) for k, p in plain.named_parameters()]
    kw = {"auto_wrap_policy": ModuleWrapPolicy({nn.Sequential, nn.Linear})} if nested else {}
    m = FSDP(plain, sharding_strategy=getattr(ShardingStrategy, strategy), **kw)
    m(lucid.tensor(np.ones((4, 5)))).sum().backward()
    assert [k for k, _ in m.named_parameters()] == TORCH_NAMES[nested], list(m.named_parameters())
    assert [k for k, _ in m.named_buffers()] == [W + k for k in TORCH_LOCAL[False][1:]], list(m.named_buffers())
    assert [p for p in m.parameters()] == [p for _, p in m.named_parameters()]
    with FSDP.summon_full_params(m):  # the original parameters, names without the prefix
        assert [(k, tuple(p.shape)) for k, p in m.named_parameters()] == want, list(m.named_parameters())
        assert [tuple(p.shape) for p in m.parameters()] == [s for _, s in want]
        assert [k for k, _ in m.named_buffers()] == TORCH_LOCAL[False][1:]
    assert [k for k, _ in m.named_parameters()] == TORCH_NAMES[nested]  # back outside
    assert list(m.state_dict()) == FULL_KEYS
    with FSDP.state_dict_type(m, StateDictType.LOCAL_STATE_DICT), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        local = m.state_dict()
        m.load_state_dict(local)
    if strategy == "NO_SHARD":  # PyTorch returns the full state dict here, with a warning
        assert list(local) == FULL_KEYS, list(local)
        assert any("full_state_dict will be returned" in str(w.message) for w in caught), caught
    else:
        assert list(local) == TORCH_LOCAL[nested], list(local)


def _torch_rank(r, out_dir, port):
    import torch
    import torch.distributed as tdist

    tdist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=r, world_size=2)
    net = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.BatchNorm1d(3)).double()
    w, b = _init_weights(r)
    with torch.no_grad():
        net[0].weight.copy_(torch.tensor(w))
        net[0].bias.copy_(torch.tensor(b))
        net[1].running_mean.fill_(0.5 * r)
        net[1].running_var.fill_(1.0 + r)
    ddp = torch.nn.parallel.DistributedDataParallel(net)
    rows = _run_scenario(torch, ddp, torch.optim.SGD(ddp.parameters(), lr=0.05), r, None)
    with open(os.path.join(out_dir, f"torch{r}.json"), "w") as f:
        json.dump(rows, f)
    tdist.destroy_process_group()


def _simulate():
    """PyTorch's rule on one process: before each forward that follows a synchronized one, every rank
    takes rank 0's buffers; gradients are the average of the ranks'."""
    import lucid

    nets = [_lucid_model(0), _lucid_model(0)]  # DDP broadcasts rank 0's state at construction
    opts = [lucid.optim.SGD(m.parameters(), lr=0.05) for m in nets]
    rows, sync = [[], []], True
    for step, (mode, grad, backward) in enumerate(STEPS):
        if sync:
            state = {k: v.clone() for k, v in nets[0].state_dict().items() if "running" in k or "batches" in k}
            nets[1].load_state_dict({**nets[1].state_dict(), **state})
        outs = []
        for r, (m, o) in enumerate(zip(nets, opts)):
            getattr(m, mode)()
            o.zero_grad()
            with lucid.set_grad_enabled(grad):
                outs.append(m(lucid.tensor(_data(step, r))))
            if backward:
                (outs[-1] * outs[-1]).sum().backward()
        if backward:
            for ps in zip(nets[0].parameters(), nets[1].parameters()):
                avg = (ps[0].grad + ps[1].grad) / 2
                for p in ps:
                    p.grad = avg.clone()
            for o in opts:
                o.step()
        sync = grad
        for r, m in enumerate(nets):
            rows[r].append([m[1].running_mean.numpy().tolist(), m[1].running_var.numpy().tolist(),
                            float(outs[r].detach().sum())])
    return rows


def _have_mpi():
    from lucid.distributed.run import find_mpiexec

    return importlib.util.find_spec("mpi4py") is not None and find_mpiexec() is not None


def _env():
    return dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
                OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")


def _lucid_run(n, script, *args, timeout=60):
    cmd = [sys.executable, "-m", "lucid.distributed.run", "-n", str(n), "--timeout", str(timeout), script, *args]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout + 30,
                       env=_env(), cwd=ROOT)
    return p.returncode, p.stdout + p.stderr, time.perf_counter() - t0


@pytest.fixture(scope="module")
def lucid_buffers(tmp_path_factory):
    if not _have_mpi():
        pytest.skip("needs mpi4py and mpiexec (pip install -e '.[distributed]')")
    out = tmp_path_factory.mktemp("ddp_buffers")
    rc, log, _ = _lucid_run(2, HERE, "ranks", str(out))
    assert rc == 0, log[-3000:]
    return [json.loads((out / f"lucid{r}.json").read_text()) for r in range(2)] + [out]


def _compare(got, want, who):
    for r in range(2):
        for step, (g, w) in enumerate(zip(got[r], want[r])):
            for k, what in enumerate(("running_mean", "running_var", "output sum")):
                np.testing.assert_allclose(g[k], w[k], rtol=1e-10, atol=1e-10,
                                           err_msg=f"rank {r} step {step} {STEPS[step]}: {what} vs {who}")


@pytest.mark.parametrize("strategy", ["FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD"])
def test_fsdp_names_state_dict_keys_and_summon_follow_torch(lucid_buffers, strategy):
    failures = []
    for r in range(2):
        res = json.loads((lucid_buffers[2] / f"fsdp{r}.json").read_text())
        assert any(k.startswith(strategy) for k in res), list(res)
        failures += [f"{k} on rank {r}:\n{tb}" for k, tb in res.items() if k.startswith(strategy) and tb != "ok"]
    assert not failures, "\n".join(failures)


def test_ddp_init_sync_and_buffer_options(lucid_buffers):
    for r in range(2):
        res = json.loads((lucid_buffers[2] / f"fsdp{r}.json").read_text())
        assert res["ddp_init_options"] == "ok", f"rank {r}:\n{res['ddp_init_options']}"


def test_ddp_buffers_broadcast_before_forward(lucid_buffers):
    """Rank 1 keeps the buffers its own forward made until the next synchronized forward."""
    _compare(lucid_buffers, _simulate(), "the simulation")
    # after a training step the ranks differ (the old code broadcast again after backward)
    assert not np.allclose(lucid_buffers[0][0][0], lucid_buffers[1][0][0])


def test_ddp_buffers_match_torch_gloo(lucid_buffers, tmp_path):
    torch = pytest.importorskip("torch")
    import socket

    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        pytest.skip("torch without gloo")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # The ranks fork from a fresh interpreter, never from this pytest-xdist worker: a forked
    # worker's children share its stdin/stdout, which are xdist's channel (a full run hung).
    code = (f"import sys; sys.path.insert(0, {os.path.dirname(__file__)!r}); "
            "import torch.multiprocessing as tmp, test_distributed2_sweep as t; "
            f"tmp.start_processes(t._torch_rank, args=({str(tmp_path)!r}, {port}), nprocs=2, join=True, "
            "start_method='fork')")
    done = subprocess.run([sys.executable, "-c", code], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=180, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    want = [json.loads((tmp_path / f"torch{r}.json").read_text()) for r in range(2)]
    _compare(lucid_buffers, want, "torch gloo")


# ------------------------------------------------------------------ a rank that dies

DIE = r"""
import os, sys, time
import lucid, lucid.distributed as dist
dist.init_process_group("mpi")
r = dist.get_rank()
if sys.argv[1] == "collective":  # the survivors are blocked inside MPI
    for step in range(10000):
        if step == 3 and r == 1:
            os._exit(3)
        dist.all_reduce(lucid.ones(3))
else:  # the survivors run Python code: the exception reaches it
    if r == 1:
        time.sleep(0.3)
        os._exit(3)
    try:
        while True:
            time.sleep(0.01)
    except dist.RankDiedError as e:
        print(f"rank {r} caught {type(e).__name__}: {e}", flush=True)
        raise
print("rank", r, "never stopped")
"""


@pytest.fixture(scope="module")
def die_script(tmp_path_factory):
    if not _have_mpi():
        pytest.skip("needs mpi4py and mpiexec (pip install -e '.[distributed]')")
    path = tmp_path_factory.mktemp("die") / "die.py"
    path.write_text(DIE)
    return str(path)


@pytest.mark.parametrize("where", ["collective", "python"])
def test_a_dead_rank_is_named_by_the_others(die_script, where):
    rc, log, secs = _lucid_run(3, die_script, where, timeout=40)
    assert rc != 0 and "never stopped" not in log, log
    assert secs < 15, f"the job took {secs:.1f} s to end:\n{log}"
    for r in (0, 2):
        assert f"[rank {r}] lucid.distributed.RankDiedError: rank 1 (pid " in log, log
        if where == "python":
            assert f"rank {r} caught RankDiedError: rank 1 (pid " in log, log
    assert "lucid-run: rank 1 (pid " in log and "died without finishing" in log, log
    assert "rank 0 (pid" not in log.split("lucid-run:")[-1], log  # only the one that died


def test_dead_ranks_reads_the_status_folder(tmp_path):
    """A rank is dead when its pid is gone and it left no exit marker."""
    import socket

    from lucid.distributed._bootstrap import dead_ranks

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    host = socket.gethostname()
    (tmp_path / "rank0.pid").write_text(f"{os.getpid()} {host}")  # alive
    (tmp_path / "rank1.pid").write_text(f"{gone.pid} {host}")  # gone, no marker
    (tmp_path / "rank2.pid").write_text(f"{gone.pid} {host}")  # gone after finishing
    (tmp_path / "rank2.exit").write_text("0")
    (tmp_path / "rank3.pid").write_text(f"{gone.pid} elsewhere")  # another machine: not ours to judge
    assert dead_ranks(str(tmp_path), host) == [(1, gone.pid)]


def test_rank_died_error_is_a_runtime_error():
    import lucid.distributed as dist

    assert issubclass(dist.RankDiedError, RuntimeError)


if __name__ == "__main__":
    {"ranks": _lucid_rank}[sys.argv[1]](*sys.argv[2:])
