"""PyTorch's distributed recipes run on Lucid (``import lucid as torch``), eighth batch: "Getting
Started with Distributed Data Parallel" (the basic demo, the checkpoint demo with ``torch.save`` on
rank 0, ``barrier`` and ``map_location``, DDP over a model split in two), "Shard Optimizer States
with ZeroRedundancyOptimizer" (DDP + ``ZeroRedundancyOptimizer(optimizer_class=Adam)`` against plain
``Adam``, the page's ``sum(model.parameters()).sum()``), "Getting Started with Distributed
Checkpoint (DCP)" (the ``AppState(Stateful)`` wrapper over ``get_state_dict``/``set_state_dict``,
``dcp.save``/``dcp.load`` of an FSDP model, then of a ``fully_shard`` one; the non-distributed load
and the ``format_utils`` converters run here, in one process) and "Asynchronous Saving with
Distributed Checkpoint (DCP)" (``async_save`` once per step, waiting on the previous future; the
pinned-memory variant with one ``FileSystemWriter(cache_staged_state_dict=True)`` reused with a
new ``checkpoint_id`` per step), plus the "State Dict with DCP APIs" section of "Getting Started
with Fully Sharded Data Parallel (FSDP2)" (a meta-device model, ``to_empty``, full state dicts with
``broadcast_from_rank0`` and ``cpu_offload``).

The pages run on two ranks launched by ``python -m lucid.distributed.run`` (this file as a script);
``cuda``/``nccl`` become ``cpu``/MPI, models are shrunk, the random inputs come from NumPy per rank
and the weights are set from NumPy (rank-dependent where the page relies on DDP's broadcast from
rank 0). Every number is checked against a single-process NumPy/Lucid replay; where PyTorch is
installed the same text runs on two gloo ranks and must agree. Skipped without mpi4py and mpiexec;
the ranks start from a fresh interpreter with stdin closed, never forked from a pytest-xdist worker.

Found here: a storage writer handed to ``dcp.save``/``async_save`` together with a
``checkpoint_id`` wrote into the writer's old directory (PyTorch resets the writer to the id, so
the pinned-memory loop wrote every step over the last); ``torch.distributed.checkpoint.stateful``
/ ``state_dict_saver.AsyncCheckpointerType`` (the pages' imports) did not exist; for ``fully_shard``
models ``get_optimizer_state_dict`` handed out the local pieces as plain tensors (DCP kept rank 0's
only) and ``load_state_dict`` refused them; for FSDP models the optimizer state was named
``_flat_param`` and ``set_state_dict`` silently loaded no weights. Focused tests:
``test_tutorials_batch8_fixes.py``.
"""
import importlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.abspath(__file__)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))


def _w(shape, seed):
    return np.random.default_rng(seed).uniform(-0.5, 0.5, shape).astype(np.float32)


def _set(torch, lin, seed):
    with torch.no_grad():
        lin.weight.copy_(torch.tensor(_w(tuple(lin.weight.shape), seed)))
        lin.bias.copy_(torch.tensor(_w(tuple(lin.bias.shape), seed + 100)))


def _data(shape, seed):
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


def pages(torch, rank, world_size, out_dir, fsdp1=True):
    """The four pages, per rank; returns what they print or leave behind, as plain lists."""
    dist = importlib.import_module(f"{torch.__name__}.distributed")
    dcp = importlib.import_module(f"{torch.__name__}.distributed.checkpoint")
    nn = torch.nn
    optim = torch.optim
    DDP = importlib.import_module(f"{torch.__name__}.nn.parallel").DistributedDataParallel
    ZeroRedundancyOptimizer = importlib.import_module(f"{torch.__name__}.distributed.optim").ZeroRedundancyOptimizer
    fsdp = importlib.import_module(f"{torch.__name__}.distributed.fsdp")
    FSDP, fully_shard = fsdp.FullyShardedDataParallel, fsdp.fully_shard
    sd_mod = importlib.import_module(f"{torch.__name__}.distributed.checkpoint.state_dict")
    get_state_dict, set_state_dict = sd_mod.get_state_dict, sd_mod.set_state_dict
    Stateful = importlib.import_module(f"{torch.__name__}.distributed.checkpoint.stateful").Stateful
    AsyncCheckpointerType = importlib.import_module(
        f"{torch.__name__}.distributed.checkpoint.state_dict_saver").AsyncCheckpointerType
    StorageWriter = dcp.FileSystemWriter
    out = {}

    # ---------------------------------------------------------------- Getting Started with DDP
    class ToyModel(nn.Module):
        def __init__(self):
            super(ToyModel, self).__init__()
            self.net1 = nn.Linear(10, 10)
            self.relu = nn.ReLU()
            self.net2 = nn.Linear(10, 5)

        def forward(self, x):
            return self.net2(self.relu(self.net1(x)))

    def demo_basic(rank, world_size):
        model = ToyModel()
        _set(torch, model.net1, 10 + rank)  # different on each rank: DDP starts from rank 0's
        _set(torch, model.net2, 20 + rank)
        ddp_model = DDP(model)
        out["basic_after_ctor"] = [p.detach().numpy().ravel().tolist() for p in model.parameters()]
        loss_fn = nn.MSELoss()
        optimizer = optim.SGD(ddp_model.parameters(), lr=0.001)
        optimizer.zero_grad()
        outputs = ddp_model(torch.tensor(_data((20, 10), 30 + rank)))
        labels = torch.tensor(_data((20, 5), 40 + rank))
        loss_fn(outputs, labels).backward()
        optimizer.step()
        out["basic"] = [p.detach().numpy().ravel().tolist() for p in model.parameters()]

    def demo_checkpoint(rank, world_size):
        model = ToyModel()
        _set(torch, model.net1, 50 + rank)
        _set(torch, model.net2, 60 + rank)
        ddp_model = DDP(model)
        CHECKPOINT_PATH = os.path.join(out_dir, f"{torch.__name__}_model.checkpoint")
        if rank == 0:
            torch.save(ddp_model.state_dict(), CHECKPOINT_PATH)
        dist.barrier()
        map_location = {"cpu": "cpu"}
        ddp_model.load_state_dict(torch.load(CHECKPOINT_PATH, map_location=map_location))
        out["ckpt_keys"] = sorted(ddp_model.state_dict())
        loss_fn = nn.MSELoss()
        optimizer = optim.SGD(ddp_model.parameters(), lr=0.001)
        optimizer.zero_grad()
        outputs = ddp_model(torch.tensor(_data((20, 10), 70 + rank)))
        labels = torch.tensor(_data((20, 5), 80 + rank))
        loss_fn(outputs, labels).backward()
        optimizer.step()
        out["ckpt"] = [p.detach().numpy().ravel().tolist() for p in model.parameters()]
        dist.barrier()
        if rank == 0:
            os.remove(CHECKPOINT_PATH)

    class ToyMpModel(nn.Module):
        def __init__(self, dev0, dev1):
            super(ToyMpModel, self).__init__()
            self.dev0 = dev0
            self.dev1 = dev1
            self.net1 = torch.nn.Linear(10, 10).to(dev0)
            self.relu = torch.nn.ReLU()
            self.net2 = torch.nn.Linear(10, 5).to(dev1)

        def forward(self, x):
            x = x.to(self.dev0)
            x = self.relu(self.net1(x))
            x = x.to(self.dev1)
            return self.net2(x)

    def demo_model_parallel(rank, world_size):
        dev0, dev1 = "cpu", "cpu"  # the page's two GPUs per process
        mp_model = ToyMpModel(dev0, dev1)
        _set(torch, mp_model.net1, 10)
        _set(torch, mp_model.net2, 20)
        ddp_mp_model = DDP(mp_model)
        loss_fn = nn.MSELoss()
        optimizer = optim.SGD(ddp_mp_model.parameters(), lr=0.001)
        optimizer.zero_grad()
        outputs = ddp_mp_model(torch.tensor(_data((20, 10), 30 + rank)))
        labels = torch.tensor(_data((20, 5), 40 + rank)).to(dev1)
        loss_fn(outputs, labels).backward()
        optimizer.step()
        out["mp"] = [p.detach().numpy().ravel().tolist() for p in mp_model.parameters()]

    demo_basic(rank, world_size)
    demo_checkpoint(rank, world_size)
    demo_model_parallel(rank, world_size)

    # ---------------------------------------------------------------- ZeroRedundancyOptimizer
    def example(rank, world_size, use_zero):
        torch.manual_seed(0)
        model = nn.Sequential(*[nn.Linear(12, 12) for _ in range(4)])
        for i, lin in enumerate(model):
            _set(torch, lin, 200 + i)
        ddp_model = DDP(model)
        loss_fn = nn.MSELoss()
        if use_zero:
            optimizer = ZeroRedundancyOptimizer(ddp_model.parameters(), optimizer_class=torch.optim.Adam, lr=0.01)
        else:
            optimizer = torch.optim.Adam(ddp_model.parameters(), lr=0.01)
        outputs = ddp_model(torch.tensor(_data((20, 12), 300 + rank)))
        labels = torch.tensor(_data((20, 12), 400 + rank))
        loss_fn(outputs, labels).backward()
        optimizer.step()
        n_state = sum(len(s) > 0 for s in optimizer.state.values()) if not use_zero else \
            sum(len(s) > 0 for s in optimizer.optim.state.values())
        return float(f"{sum(model.parameters()).sum()}"), [p.detach().numpy().ravel().tolist() for p in
                                                       model.parameters()], n_state

    out["zero"] = example(rank, world_size, True)
    out["adam"] = example(rank, world_size, False)

    # ---------------------------------------------------------------- Distributed Checkpoint (DCP)
    CHECKPOINT_DIR = os.path.join(out_dir, f"{torch.__name__}_checkpoint")

    class AppState(Stateful):
        def __init__(self, model, optimizer=None):
            self.model = model
            self.optimizer = optimizer

        def state_dict(self):
            model_state_dict, optimizer_state_dict = get_state_dict(self.model, self.optimizer)
            return {"model": model_state_dict, "optim": optimizer_state_dict}

        def load_state_dict(self, state_dict):
            set_state_dict(self.model, self.optimizer, model_state_dict=state_dict["model"],
                           optim_state_dict=state_dict["optim"])

    class ToyModel16(nn.Module):
        def __init__(self):
            super(ToyModel16, self).__init__()
            self.net1 = nn.Linear(16, 16)
            self.relu = nn.ReLU()
            self.net2 = nn.Linear(16, 8)

        def forward(self, x):
            return self.net2(self.relu(self.net1(x)))

    def fresh(seed):
        model = ToyModel16()
        _set(torch, model.net1, seed)
        _set(torch, model.net2, seed + 1)
        return model

    def full_params(model, optimizer):
        full = sd_mod.StateDictOptions(full_state_dict=True)
        if optimizer is None:
            return {k: v.numpy().ravel().tolist() for k, v in
                    sorted(sd_mod.get_model_state_dict(model, options=full).items())}, None
        msd, osd = get_state_dict(model, optimizer, options=full)
        return ({k: v.numpy().ravel().tolist() for k, v in sorted(msd.items())},
                {k: {n: (v.numpy().ravel().tolist() if hasattr(v, "numpy") else v) for n, v in sorted(st.items())}
                 for k, st in sorted(osd["state"].items())})

    def run_checkpoint_save_example(rank, world_size, wrap, tag):
        model = wrap(fresh(500))
        optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
        optimizer.zero_grad()
        model(torch.tensor(_data((8, 16), 600 + rank))).sum().backward()
        optimizer.step()
        state_dict = {"app": AppState(model, optimizer)}
        dcp.save(state_dict, checkpoint_id=f"{CHECKPOINT_DIR}_{tag}")
        out[f"saved_{tag}"] = full_params(model, optimizer)

    def run_checkpoint_load_example(rank, world_size, wrap, tag):
        model = wrap(fresh(700))
        optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
        state_dict = {"app": AppState(model, optimizer)}
        dcp.load(state_dict=state_dict, checkpoint_id=f"{CHECKPOINT_DIR}_{tag}")
        out[f"loaded_{tag}"] = full_params(model, optimizer)

    if fsdp1:  # PyTorch's FSDP (1) needs an accelerator
        run_checkpoint_save_example(rank, world_size, FSDP, "fsdp")
        run_checkpoint_load_example(rank, world_size, FSDP, "fsdp")
    run_checkpoint_save_example(rank, world_size, fully_shard, "fsdp2")
    run_checkpoint_load_example(rank, world_size, fully_shard, "fsdp2")

    # ---------------------------------------------------------------- Asynchronous saving
    def run_async_save_example(rank, world_size, pinned):
        model = fully_shard(fresh(800))
        optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
        # PyTorch's cached staging pins memory, which needs an accelerator; Lucid accepts the flag
        cached = torch.__name__ == "lucid"
        writer = StorageWriter(cache_staged_state_dict=cached, path=CHECKPOINT_DIR) if pinned else None
        tag = "pinned" if pinned else "async"
        checkpoint_future = None
        per_step = []
        for step in range(3):
            optimizer.zero_grad()
            model(torch.tensor(_data((8, 16), 900 + 10 * step + rank))).sum().backward()
            optimizer.step()
            if checkpoint_future is not None:
                checkpoint_future.result()
            state_dict = {"app": AppState(model, optimizer)}
            if pinned:
                checkpoint_future = dcp.async_save(state_dict, storage_writer=writer,
                                                   checkpoint_id=f"{CHECKPOINT_DIR}_{tag}_step{step}")
            else:
                checkpoint_future = dcp.async_save(state_dict, checkpoint_id=f"{CHECKPOINT_DIR}_{tag}_step{step}",
                                                   async_checkpointer_type=AsyncCheckpointerType.THREAD)
            if torch.__name__ == "torch":
                # PyTorch writes in a background thread whose collectives on the default gloo group
                # must not interleave with fully_shard's; Lucid's future is already done
                checkpoint_future.result()
            per_step.append(full_params(model, optimizer)[0])
        checkpoint_future.result()
        out[tag] = per_step
        # each step's checkpoint holds that step's weights
        for step in range(3):
            target = fresh(0)
            sd = {"app": AppState(fully_shard(target), torch.optim.Adam(target.parameters(), lr=0.1))}
            dcp.load(sd, checkpoint_id=f"{CHECKPOINT_DIR}_{tag}_step{step}")
            out[f"{tag}_reload{step}"] = full_params(target, None)[0]

    run_async_save_example(rank, world_size, False)
    run_async_save_example(rank, world_size, True)

    # ---------------------------------------------------------------- FSDP2 "State Dict with DCP APIs"
    SO = sd_mod.StateDictOptions

    def build():
        with torch.device("meta"):
            model = ToyModel16()
        for layer in (model.net1, model.net2):
            fully_shard(layer)
        fully_shard(model)
        model.to_empty(device="cpu")
        return model

    def full_sd_from_numpy():
        return {n: torch.tensor(w) for n, w in zip(["net1.weight", "net1.bias", "net2.weight", "net2.bias"],
                                                   [_w((16, 16), 1000), _w((16,), 1100), _w((8, 16), 1001),
                                                    _w((8,), 1101)])}

    model = build()
    full_sd = full_sd_from_numpy() if rank == 0 else {}  # only rank 0 holds the full state dict
    sd_mod.set_model_state_dict(model=model, model_state_dict=full_sd,
                                options=SO(full_state_dict=True, broadcast_from_rank0=True))
    optim_ = torch.optim.Adam(model.parameters(), lr=1e-2)
    optim_.zero_grad()
    model(torch.tensor(_data((8, 16), 1200 + rank))).pow(2).sum().backward()
    optim_.step()
    model_state_dict = sd_mod.get_model_state_dict(model=model, options=SO(full_state_dict=True, cpu_offload=True))
    optim_state_dict = sd_mod.get_optimizer_state_dict(model=model, optimizers=optim_,
                                                       options=SO(full_state_dict=True, cpu_offload=True))
    out["fsdp2_api_saved"] = (len(model_state_dict), len(optim_state_dict)) if rank else (
        {k: v.numpy().ravel().tolist() for k, v in sorted(model_state_dict.items())},
        {k: {n: (v.numpy().ravel().tolist() if hasattr(v, "numpy") else v) for n, v in sorted(st.items())}
         for k, st in sorted(optim_state_dict["state"].items())})
    model2 = build()
    sd_mod.set_model_state_dict(model=model2, model_state_dict=model_state_dict,
                                options=SO(full_state_dict=True, broadcast_from_rank0=True))
    optim2 = torch.optim.Adam(model2.parameters(), lr=1e-2)
    sd_mod.set_optimizer_state_dict(model=model2, optimizers=optim2, optim_state_dict=optim_state_dict,
                                    options=SO(full_state_dict=True, broadcast_from_rank0=True))
    out["fsdp2_api_loaded"] = full_params(model2, optim2)
    return out


def _lucid_rank(out_dir):
    import lucid
    import lucid.distributed as dist
    import lucid.nn.parallel  # noqa: F401
    import lucid.optim  # noqa: F401

    dist.init_process_group("mpi")
    r, n = dist.get_rank(), dist.get_world_size()
    res = pages(lucid, r, n, out_dir)
    with open(os.path.join(out_dir, f"lucid{r}.json"), "w") as f:
        json.dump(res, f)
    dist.destroy_process_group()


def _torch_rank(rank, out_dir, port):
    import torch
    import torch.distributed as dist

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    res = pages(torch, rank, 2, out_dir, fsdp1=False)
    with open(os.path.join(out_dir, f"torch{rank}.json"), "w") as f:
        json.dump(res, f)
    dist.destroy_process_group()


def _have_mpi():
    import importlib.util

    from lucid.distributed.run import find_mpiexec

    return importlib.util.find_spec("mpi4py") is not None and find_mpiexec() is not None


@pytest.fixture(scope="module")
def lucid_ranks(tmp_path_factory):
    if not _have_mpi():
        pytest.skip("needs mpi4py and mpiexec (pip install -e '.[distributed]')")
    out = tmp_path_factory.mktemp("dist_pages8")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "lucid.distributed.run", "-n", "2", "--timeout", "120", HERE, str(out)]
    p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=180, env=env, cwd=ROOT)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    return out, [json.loads((out / f"lucid{r}.json").read_text()) for r in range(2)]


# ------------------------------------------------------------------ NumPy references

def _toy_grads(params, x, y=None):
    """Gradients of ``MSELoss(net2(relu(net1(x))), y)`` (or of the output's sum when y is None)."""
    w1, b1, w2, b2 = params
    h = x @ w1.T + b1
    a = np.maximum(h, 0)
    z = a @ w2.T + b2
    dz = np.ones_like(z) if y is None else 2 * (z - y) / z.size
    da = dz @ w2
    dh = da * (h > 0)
    return [dh.T @ x, dh.sum(0), dz.T @ a, dz.sum(0)]


def _toy_grads_sq(params, x):
    """Gradients of ``net2(relu(net1(x))).pow(2).sum()``."""
    w1, b1, w2, b2 = params
    h = x @ w1.T + b1
    a = np.maximum(h, 0)
    dz = 2 * (a @ w2.T + b2)
    dh = (dz @ w2) * (h > 0)
    return [dh.T @ x, dh.sum(0), dz.T @ a, dz.sum(0)]


def _toy_init(s1, s2, n_in=10, n_hidden=10, n_out=5):
    return [_w((n_hidden, n_in), s1).astype(np.float64), _w((n_hidden,), s1 + 100).astype(np.float64),
            _w((n_out, n_hidden), s2).astype(np.float64), _w((n_out,), s2 + 100).astype(np.float64)]


def _ddp_sgd(s1, s2, xs, ys):
    """One SGD(lr=0.001) step of rank 0's model on the mean of the two ranks' gradients."""
    params = _toy_init(s1, s2)
    grads = [_toy_grads(params, _data((20, 10), xs + r).astype(np.float64), _data((20, 5), ys + r)) for r in range(2)]
    return [p - 0.001 * (g0 + g1) / 2 for p, g0, g1 in zip(params, *grads)]


def _adam1(p, g, lr):
    """One Adam step from zero state: the bias-corrected moments are g and g**2."""
    return p - lr * g / (np.abs(g) + 1e-8)


def _zero_reference():
    ws = [(_w((12, 12), 200 + i).astype(np.float64), _w((12,), 300 + i).astype(np.float64)) for i in range(4)]
    grads = [[np.zeros_like(w), np.zeros_like(b)] for w, b in ws]
    for r in range(2):
        acts = [_data((20, 12), 300 + r).astype(np.float64)]
        for w, b in ws:
            acts.append(acts[-1] @ w.T + b)
        d = 2 * (acts[-1] - _data((20, 12), 400 + r)) / acts[-1].size
        for i in reversed(range(4)):
            grads[i][0] += d.T @ acts[i] / 2
            grads[i][1] += d.sum(0) / 2
            d = d @ ws[i][0]
    return [_adam1(p, g, 0.01) for (w, b), (gw, gb) in zip(ws, grads) for p, g in ((w, gw), (b, gb))]


def _dcp_reference():
    """The DCP page's one Adam(lr=0.1) step on the sum of the outputs, gradients averaged."""
    params = _toy_init(500, 501, 16, 16, 8)
    g = [sum(gs) / 2 for gs in zip(*[_toy_grads(params, _data((8, 16), 600 + r).astype(np.float64))
                                     for r in range(2)])]
    names = ["net1.weight", "net1.bias", "net2.weight", "net2.bias"]
    return ({n: _adam1(p, gi, 0.1) for n, p, gi in zip(names, params, g)},
            {n: {"exp_avg": 0.1 * gi, "exp_avg_sq": 0.001 * gi * gi} for n, gi in zip(names, g)})


def _close(got, want, **kw):
    np.testing.assert_allclose(np.concatenate([np.ravel(x) for x in got]),
                               np.concatenate([np.ravel(x) for x in want]), **kw)


# ------------------------------------------------------------------ the checks

def test_ddp_page(lucid_ranks):
    _, res = lucid_ranks
    start = _toy_init(10, 20)
    for r in range(2):
        # DDP's constructor broadcast rank 0's weights over rank 1's
        _close(res[r]["basic_after_ctor"], start, rtol=0, atol=0)
        _close(res[r]["basic"], _ddp_sgd(10, 20, 30, 40), rtol=1e-5, atol=1e-7)
        # the checkpoint demo: rank 0's weights through torch.save / barrier / torch.load
        _close(res[r]["ckpt"], _ddp_sgd(50, 60, 70, 80), rtol=1e-5, atol=1e-7)
        # README "Differences from PyTorch": DDP's state_dict has no ``module.`` prefix
        assert res[r]["ckpt_keys"] == ["net1.bias", "net1.weight", "net2.bias", "net2.weight"]
        # the model split over two (here: the same) devices trains as the basic demo
        _close(res[r]["mp"], res[r]["basic"], rtol=0, atol=0)


def test_zero_redundancy_optimizer_page(lucid_ranks):
    _, res = lucid_ranks
    want = _zero_reference()
    for r in range(2):
        zsum, zparams, zstate = res[r]["zero"]
        asum, aparams, astate = res[r]["adam"]
        _close(zparams, want, rtol=1e-5, atol=1e-6)
        assert zparams == aparams and zsum == asum  # "the parameters sum is the same"
        # ``sum(model.parameters())`` broadcasts each (12,) bias over the rows of the (12, 12) weights
        np.testing.assert_allclose(zsum, sum(w.sum() for w in want[0::2]) + 12 * sum(b.sum() for b in want[1::2]),
                                   atol=2e-5)
        assert astate == 8
    # each rank keeps the state of its share only; together they cover every parameter
    assert res[0]["zero"][2] + res[1]["zero"][2] == 8 and 0 < res[0]["zero"][2] < 8
    assert res[0]["zero"] == res[1]["zero"]


def test_dcp_page_save_then_load(lucid_ranks):
    _, res = lucid_ranks
    model, optim = _dcp_reference()
    for tag in ("fsdp", "fsdp2"):
        for r in range(2):
            saved_m, saved_o = res[r][f"saved_{tag}"]
            for name, want in model.items():
                np.testing.assert_allclose(saved_m[name], want.ravel(), rtol=1e-5, atol=1e-6, err_msg=f"{tag} {name}")
                for k in ("exp_avg", "exp_avg_sq"):
                    np.testing.assert_allclose(saved_o[name][k], optim[name][k].ravel(), rtol=1e-5, atol=1e-7,
                                               err_msg=f"{tag} {name} {k}")
            # the freshly made model and optimizer got everything back, every rank its own shard
            assert res[r][f"loaded_{tag}"] == res[r][f"saved_{tag}"], tag


def test_async_save_page(lucid_ranks):
    _, res = lucid_ranks
    for tag in ("async", "pinned"):
        for r in range(2):
            steps = res[r][tag]
            assert len(steps) == 3 and steps[0] != steps[1] != steps[2]
            for step in range(3):  # each step's directory holds that step's weights
                assert res[r][f"{tag}_reload{step}"] == steps[step], (tag, step)
    assert res[0]["pinned"] == res[0]["async"]


def test_dcp_page_load_without_process_group_and_format_utils(lucid_ranks, tmp_path):
    import lucid
    import lucid.distributed.checkpoint as dcp
    import lucid.nn as nn
    from lucid.distributed.checkpoint.format_utils import dcp_to_torch_save, torch_save_to_dcp

    out, res = lucid_ranks

    class ToyModel(nn.Module):
        def __init__(self):
            super(ToyModel, self).__init__()
            self.net1 = nn.Linear(16, 16)
            self.relu = nn.ReLU()
            self.net2 = nn.Linear(16, 8)

        def forward(self, x):
            return self.net2(self.relu(self.net1(x)))

    for tag in ("fsdp", "fsdp2"):
        CHECKPOINT_DIR = str(out / f"lucid_checkpoint_{tag}")
        model = ToyModel()
        state_dict = {"app": {"model": model.state_dict()}}  # the page's {"model": ...}, under AppState's key
        dcp.load(state_dict=state_dict, checkpoint_id=CHECKPOINT_DIR)
        model.load_state_dict(state_dict["app"]["model"])
        for name, p in model.state_dict().items():
            assert p.numpy().ravel().tolist() == res[0][f"saved_{tag}"][0][name], (tag, name)
        # Formats: to a torch.save file and back to DCP (the page calls dcp_to_torch_save twice,
        # a slip: the way back is torch_save_to_dcp)
        TORCH_SAVE_CHECKPOINT_DIR = str(tmp_path / f"torch_save_{tag}.pth")
        dcp_to_torch_save(CHECKPOINT_DIR, TORCH_SAVE_CHECKPOINT_DIR)
        whole = lucid.load(TORCH_SAVE_CHECKPOINT_DIR)
        # PyTorch rebuilds the nesting ({"app": {"optim": ...}}); Lucid keeps the dotted keys
        # (tests/distributed/test_dcp.py::test_format_utils_convert_both_ways asks for them)
        exp_avg = whole["app.optim.state.net1.weight.exp_avg"] if "app" not in whole else \
            whole["app"]["optim"]["state"]["net1.weight"]["exp_avg"]
        np.testing.assert_allclose(exp_avg.numpy().ravel(), res[1][f"saved_{tag}"][1]["net1.weight"]["exp_avg"])
        torch_save_to_dcp(TORCH_SAVE_CHECKPOINT_DIR, f"{CHECKPOINT_DIR}_new")
        again = ToyModel()
        sd = {"app": {"model": again.state_dict()}}
        dcp.load(sd, checkpoint_id=f"{CHECKPOINT_DIR}_new")
        assert all(bool((a == b).all()) for a, b in zip(again.parameters(), model.parameters()))


def test_fsdp2_state_dict_with_dcp_apis(lucid_ranks):
    _, res = lucid_ranks
    params = _toy_init(1000, 1001, 16, 16, 8)
    grads = [sum(gs) / 2 for gs in zip(*[_toy_grads_sq(params, _data((8, 16), 1200 + r).astype(np.float64))
                                         for r in range(2)])]
    names = ["net1.weight", "net1.bias", "net2.weight", "net2.bias"]
    saved_m, saved_o = res[0]["fsdp2_api_saved"]
    for name, p, g in zip(names, params, grads):
        np.testing.assert_allclose(saved_m[name], _adam1(p, g, 1e-2).ravel(), rtol=1e-5, atol=1e-6, err_msg=name)
        np.testing.assert_allclose(saved_o[name]["exp_avg"], 0.1 * g.ravel(), rtol=1e-4, atol=1e-7, err_msg=name)
    # full_state_dict with cpu_offload: only rank 0 holds the state dicts
    assert res[1]["fsdp2_api_saved"] == [0, 0]
    for r in range(2):  # broadcast from rank 0 into every rank's shards
        assert res[r]["fsdp2_api_loaded"] == res[0]["fsdp2_api_saved"]


def test_pages_match_torch_gloo(lucid_ranks, tmp_path):
    torch = pytest.importorskip("torch")
    import socket

    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        pytest.skip("torch without gloo")
    _, res = lucid_ranks
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = (f"import sys; sys.path.insert(0, {os.path.dirname(HERE)!r}); "
            "import torch.multiprocessing as tmp, test_tutorials_batch8_distributed as t; "
            f"tmp.start_processes(t._torch_rank, args=({str(tmp_path)!r}, {port}), nprocs=2, join=True, "
            "start_method='fork')")
    done = subprocess.run([sys.executable, "-c", code], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=240, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    for r in range(2):
        lo, to = res[r], json.loads((tmp_path / f"torch{r}.json").read_text())
        assert set(lo) - set(to) == {"saved_fsdp", "loaded_fsdp"}  # PyTorch's FSDP(1) needs an accelerator
        assert [k.removeprefix("module.") for k in to["ckpt_keys"]] == lo["ckpt_keys"]
        for key in ("basic_after_ctor", "basic", "ckpt", "mp"):
            _close(lo[key], to[key], rtol=1e-5, atol=1e-7, err_msg=key)
        for key in ("zero", "adam"):
            _close(lo[key][1], to[key][1], rtol=1e-5, atol=1e-6, err_msg=key)
            np.testing.assert_allclose(lo[key][0], to[key][0], atol=1e-5)  # a float32 sum with cancellation
            assert lo[key][2] == to[key][2]
        for key in ("saved_fsdp2", "loaded_fsdp2"):
            assert lo[key][0].keys() == to[key][0].keys() and lo[key][1].keys() == to[key][1].keys()
            for name in lo[key][0]:
                _close([lo[key][0][name]], [to[key][0][name]], rtol=1e-5, atol=1e-6)
                for k in ("exp_avg", "exp_avg_sq", "step"):
                    _close([lo[key][1][name][k]], [to[key][1][name][k]], rtol=1e-5, atol=1e-7)  # float32 sums
        for tag in ("async", "pinned"):
            for step in range(3):
                for name in lo[tag][step]:
                    _close([lo[tag][step][name]], [to[tag][step][name]], rtol=1e-5, atol=1e-6)
        for key in ("fsdp2_api_saved", "fsdp2_api_loaded"):
            if r == 1 and key == "fsdp2_api_saved":
                assert lo[key] == to[key] == [0, 0]
                continue
            for name in lo[key][0]:
                _close([lo[key][0][name]], [to[key][0][name]], rtol=1e-5, atol=1e-6)
                for k in ("exp_avg", "exp_avg_sq"):
                    _close([lo[key][1][name][k]], [to[key][1][name][k]], rtol=1e-5, atol=1e-7)


if __name__ == "__main__":
    _lucid_rank(sys.argv[1])
