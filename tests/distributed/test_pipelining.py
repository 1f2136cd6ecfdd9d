"""``lucid.distributed.pipelining``: schedules on real MPI ranks (test_pipelining_ranks.py, on
1, 2 and 3 ranks; skipped without mpi4py/mpiexec), and the tracer front end, microbatch
splitting and argument checks in this process."""
import importlib.util
import os
import sys

import numpy as np
import pytest

import lucid
import lucid.nn as nn
from lucid.distributed.pipelining import (Pipe, SplitPoint, merge_chunks, pipe_split, pipeline,
                                          split_args_kwargs_into_chunks)

HERE = os.path.dirname(os.path.abspath(__file__))


def _mpi_ready():
    from lucid.distributed.run import find_mpiexec

    return importlib.util.find_spec("mpi4py") is not None and find_mpiexec() is not None


@pytest.mark.parametrize("n", [1, 2, 3], ids=lambda n: f"{n}ranks")
def test_every_pipelining_check_on_every_rank(n, tmp_path):
    if not _mpi_ready():
        pytest.skip("needs mpi4py and mpiexec (pip install -e '.[distributed]')")
    sys.path.insert(0, HERE)
    import test_pipelining_ranks
    from rankchecks import assert_checks_pass

    assert_checks_pass("test_pipelining_ranks.py", test_pipelining_ranks.CHECKS, n, tmp_path)


class Skip(nn.Module):
    """A value of stage 0 used by stage 2 (passed through stage 1) and a parameter read directly."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(3, 4), nn.Linear(4, 4), nn.Linear(4, 2)
        self.scale = nn.Parameter(lucid.tensor([2.0, -1.0]))

    def forward(self, x, bias):
        h = lucid.tanh(self.a(x))
        pipe_split()
        g = lucid.tanh(self.b(h))
        pipe_split()
        return self.c(g + h) * self.scale + bias


def _rows(t):
    return t.detach().numpy()


def test_pipe_split_cuts_forward_and_passes_values_through():
    lucid.manual_seed(0)
    net = Skip()
    x, bias = lucid.randn(5, 3), lucid.randn(5, 2)
    pipe = pipeline(net, (x, bias))
    assert isinstance(pipe, Pipe) and pipe.num_stages == 3
    s0, s1, s2 = (pipe.get_stage_module(k) for k in range(3))
    assert [n for n, _ in s0.named_parameters()] == ["a.weight", "a.bias"]
    assert [n for n, _ in s1.named_parameters()] == ["b.weight", "b.bias"]
    assert sorted(n for n, _ in s2.named_parameters()) == ["c.bias", "c.weight", "scale"]
    assert s2.get_parameter("scale") is net.scale  # the model's own parameters
    # stage 0 takes the model's arguments; bias and h go through stage 1 to stage 2
    h = lucid.tanh(net.a(x))
    out0 = s0(x, bias)
    assert len(out0) == 2
    out1 = s1(*out0)
    assert len(out1) == 3
    g = lucid.tanh(net.b(h))
    np.testing.assert_allclose(_rows(s2(*out1)), _rows(net.c(g + h) * net.scale + bias), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(_rows(pipe(x, bias)), _rows(net(x, bias)), rtol=1e-6, atol=1e-6)
    net(x, bias)  # pipe_split() does nothing eagerly


def test_split_spec_beginning_and_end():
    net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 2))
    x = lucid.randn(2, 3)
    pipe = pipeline(net, (x,), split_spec={"2": SplitPoint.BEGINNING, "3": SplitPoint.END})
    assert pipe.num_stages == 3
    assert [[n for n, _ in pipe.get_stage_module(k).named_children()] for k in range(3)] == [
        ["0", "1"], ["2", "3"], ["4"]]
    # a split before the first call or after the last adds no empty stage
    assert pipeline(net, (x,), split_spec={"0": SplitPoint.BEGINNING, "4": SplitPoint.END}).num_stages == 1
    np.testing.assert_allclose(_rows(pipe(x)), _rows(net(x)), rtol=1e-6, atol=1e-6)


def test_split_spec_keeps_a_user_block_whole():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            return x + lucid.tanh(self.lin(x))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([Block() for _ in range(4)])

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    net, x = Net(), lucid.randn(3, 4)
    pipe = pipeline(net, (x,), split_spec={"layers.2": SplitPoint.BEGINNING})
    assert pipe.num_stages == 2
    names = [sorted({n.split(".")[1] for n, _ in pipe.get_stage_module(k).named_parameters()}) for k in range(2)]
    assert names == [["0", "1"], ["2", "3"]]
    np.testing.assert_allclose(_rows(pipe(x)), _rows(net(x)), rtol=1e-6, atol=1e-6)


def test_pipeline_errors():
    net = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    x = lucid.randn(2, 3)
    with pytest.raises(ValueError, match=r"split_spec names \['5'\]"):
        pipeline(net, (x,), split_spec={"5": SplitPoint.BEGINNING})
    with pytest.raises(TypeError, match="must be a SplitPoint"):
        pipeline(net, (x,), split_spec={"1": "beginning"})
    with pytest.raises(NotImplementedError, match="split_policy"):
        pipeline(net, (x,), split_policy=lambda gm: gm)
    with pytest.raises(ValueError, match="stage index 2 is out of range of 2"):
        pipeline(net, (x,), split_spec={"1": SplitPoint.BEGINNING}).get_stage_module(2)

    class Tied(nn.Module):  # one weight in two stages: not supported (it would live on two ranks)
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(lucid.ones(3))

        def forward(self, x):
            x = x * self.w
            pipe_split()
            return x * self.w

    with pytest.raises(NotImplementedError, match=r"w is used by stages \[0, 1\]"):
        pipeline(Tied(), (x,))


def test_microbatch_split_and_merge():
    x = lucid.arange(14.0).reshape(7, 2)
    args, kwargs = split_args_kwargs_into_chunks((x, 3), {"y": x[:, :1], "flag": True}, 3)
    assert [a[0].shape for a in args] == [(3, 2), (2, 2), (2, 2)]  # uneven as tensor_split
    assert [a[1] for a in args] == [3, 3, 3] and [k["flag"] for k in kwargs] == [True] * 3
    assert [k["y"].shape for k in kwargs] == [(3, 1), (2, 1), (2, 1)]
    np.testing.assert_array_equal(_rows(merge_chunks([a[0] for a in args])), _rows(x))
    pair = merge_chunks([(a[0], a[0] * 2) for a in args])
    assert isinstance(pair, tuple) and pair[1].shape == (7, 2)
    with pytest.raises(AssertionError, match=r"batch size 2 \(shape \(2, 3\)\), smaller than the 3"):
        split_args_kwargs_into_chunks((lucid.zeros(2, 3),), {}, 3)
    with pytest.raises(ValueError, match="0-d tensor"):
        split_args_kwargs_into_chunks((lucid.tensor(1.0),), {}, 2)


def test_stage_needs_a_process_group():
    import lucid.distributed as dist
    from lucid.distributed.pipelining import PipelineStage

    if dist.is_initialized():
        pytest.skip("a process group is already up in this process")
    with pytest.raises(ValueError, match="default process group has not been initialized"):
        PipelineStage(nn.Linear(2, 2), 0, 2)
    with pytest.raises(ValueError, match="Stage index 2 is out of range of 2"):
        PipelineStage(nn.Linear(2, 2), 2, 2)  # checked before the group


def test_names_as_pytorch():
    from lucid.distributed import pipelining

    for name in ("Pipe", "pipe_split", "SplitPoint", "pipeline", "PipelineStage", "build_stage",
                 "Schedule1F1B", "ScheduleGPipe"):
        assert name in pipelining.__all__ and hasattr(pipelining, name)
    assert [p.name for p in SplitPoint] == ["BEGINNING", "END"]
    torch_pp = pytest.importorskip("torch.distributed.pipelining")
    import inspect

    for name in ("PipelineStage", "ScheduleGPipe", "Schedule1F1B", "ScheduleLoopedBFS", "ScheduleInterleaved1F1B",
                 "pipeline", "build_stage"):
        ours = list(inspect.signature(getattr(pipelining, name)).parameters)
        theirs = list(inspect.signature(getattr(torch_pp, name)).parameters)
        assert ours == theirs[:len(ours)], (name, ours, theirs)


def _runs_to_the_end(orders, ranks):
    """Play every rank's order: an action runs once what it receives has been sent (a forward
    needs the previous stage's forward, a backward the next stage's backward and its own
    forward); sends never block. False when every rank waits (a deadlock)."""
    n_local = max(a[0] for o in orders for a in o) + 1
    last = ranks * n_local - 1
    done, at = set(), [0] * ranks
    progressed = True
    while progressed:
        progressed = False
        for r in range(ranks):
            while at[r] < len(orders[r]):
                v, kind, mb = orders[r][at[r]]
                s = v * ranks + r
                needs = [(s - 1, "F", mb)] if kind == "F" and s > 0 else []
                if kind == "B":
                    needs = [(s, "F", mb)] + ([(s + 1, "B", mb)] if s < last else [])
                if not all(x in done for x in needs):
                    break
                done.add((s, kind, mb))
                at[r] += 1
                progressed = True
    return all(at[r] == len(orders[r]) for r in range(ranks))


def test_schedule_orders_cover_every_action_and_never_deadlock():
    from lucid.distributed.pipelining.schedules import interleaved_order, looped_bfs_order, one_f_one_b_order

    for ranks in (1, 2, 3, 4):
        for n in range(ranks, 4 * ranks + 1):
            one = [one_f_one_b_order(n, ranks, r) for r in range(ranks)]
            assert _runs_to_the_end(one, ranks)
            for r in range(ranks):  # 1F1B: stage r holds at most ranks - r microbatches
                live = peak = 0
                for _, kind, _ in one[r]:
                    live += 1 if kind == "F" else -1
                    peak = max(peak, live)
                assert peak == min(n, ranks - r)
            for local in (1, 2, 3):
                every = sorted((v, k, m) for v in range(local) for k in "FB" for m in range(n))
                schedules = [[looped_bfs_order(n, local) for _ in range(ranks)]]
                if n % ranks == 0:
                    schedules.append([interleaved_order(n, ranks, r, local) for r in range(ranks)])
                for orders in schedules:
                    assert all(sorted(o) == every for o in orders)
                    assert _runs_to_the_end(orders, ranks), (ranks, n, local)
    # a wrong order is caught: the last stage's first backward before its forward
    assert not _runs_to_the_end([[(0, "B", 0), (0, "F", 0)]], 1)


def test_pytorch_scales_uneven_microbatches_as_lucid_does(tmp_path):
    # the reference of test_pipelining_ranks.uneven_microbatches_are_scaled_as_pytorch, checked
    # on PyTorch itself (one gloo process, one stage): 7 rows in 3 microbatches of 3, 2, 2 rows
    # give the gradient of (sum of the microbatch mean losses) / 3, not of the whole-batch mean
    torch = pytest.importorskip("torch")
    import torch.distributed as tdist
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

    if tdist.is_initialized():
        pytest.skip("a torch process group is already up in this process")
    tdist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        lin = torch.nn.Linear(3, 2).double()
        x, y = torch.randn(7, 3, dtype=torch.float64), torch.randn(7, 2, dtype=torch.float64)
        losses = []
        stage = PipelineStage(lin, 0, 1, torch.device("cpu"))
        ScheduleGPipe(stage, 3, loss_fn=torch.nn.functional.mse_loss).step(x, target=y, losses=losses)
        got = [p.grad.clone() for p in lin.parameters()]
        lin.zero_grad()
        chunks = list(zip(torch.tensor_split(x, 3), torch.tensor_split(y, 3)))
        assert [loss.item() for loss in losses] == [torch.nn.functional.mse_loss(lin(a), b).item() for a, b in chunks]
        (sum(torch.nn.functional.mse_loss(lin(a), b) for a, b in chunks) / 3).backward()
        for g, p in zip(got, lin.parameters()):
            np.testing.assert_allclose(g.numpy(), p.grad.numpy(), rtol=1e-12, atol=1e-12)
    finally:
        tdist.destroy_process_group()
