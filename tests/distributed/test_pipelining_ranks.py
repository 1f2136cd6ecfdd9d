"""The rank body of test_pipelining.py (run under ``lucid-run -n N``, the rankchecks.py protocol;
pytest collects no test here).

Every rank builds the same small Transformer-like model (float64, a seed), keeps a copy as the
one-process reference, and runs its own stage of the pipeline. After ``step`` each stage's
parameter gradients must equal the reference's (the whole model on the whole batch) to 1e-12.
"""
import copy
import math
import os
import sys

import numpy as np

import lucid
import lucid.distributed as dist
import lucid.nn as nn
import lucid.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rankchecks import rank_main  # noqa: E402

CHECKS = {}
BATCH, TOKENS, DIM, OUT, BLOCKS = 6, 3, 4, 2, 6


def check(fn):
    CHECKS[fn.__name__] = fn
    return fn


class Block(nn.Module):
    """Pre-norm self-attention over the tokens, then an MLP; both residual."""

    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(DIM)
        self.qkv = nn.Linear(DIM, 3 * DIM, bias=False)  # a key bias has a zero gradient: Adam would amplify rounding
        self.mlp = nn.Sequential(nn.Linear(DIM, 2 * DIM), nn.Tanh(), nn.Linear(2 * DIM, DIM))

    def forward(self, x):
        q, k, v = lucid.split(self.qkv(self.norm(x)), DIM, -1)
        att = F.softmax(q @ k.transpose(-2, -1) / math.sqrt(DIM), -1)
        x = x + att @ v
        return x + self.mlp(x)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(DIM, DIM)
        self.blocks = nn.ModuleList([Block() for _ in range(BLOCKS)])
        self.head = nn.Linear(DIM, OUT)

    def forward(self, x):
        h = self.embed(x)
        for block in self.blocks:
            h = block(h)
        return self.head(h).sum(1)


def make_net(seed=0):
    lucid.manual_seed(seed)
    return Net().double()


def batch(step=0, rows=BATCH):
    rng = np.random.default_rng(100 + step)
    x = lucid.tensor(rng.standard_normal((rows, TOKENS, DIM)), dtype=lucid.float64)
    return x, lucid.tensor(rng.standard_normal((rows, OUT)), dtype=lucid.float64)


def bounds(n_stages):
    """Block ranges of each stage: the embedding goes with stage 0, the head with the last."""
    cuts = np.linspace(0, BLOCKS, n_stages + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:])]


def my_piece(net, stage, n_stages):
    a, b = bounds(n_stages)[stage]
    parts = ([net.embed] if stage == 0 else []) + list(net.blocks[a:b])

    class Piece(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(parts)
            self.head = net.head if stage == n_stages - 1 else None

        def forward(self, h):
            for layer in self.layers:
                h = layer(h)
            return self.head(h).sum(1) if self.head is not None else h

    return Piece()


def close(a, b, tol=1e-12):
    a = a.detach().numpy() if isinstance(a, lucid.Tensor) else np.asarray(a)
    b = b.detach().numpy() if isinstance(b, lucid.Tensor) else np.asarray(b)
    assert a.shape == b.shape, (a.shape, b.shape)
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


def whole_batch_grads(ref, x, y):
    ref.zero_grad()
    F.mse_loss(ref(x), y).backward()
    return {n: p.grad for n, p in ref.named_parameters()}


def run_step(schedule, stage, x, y, losses=None):
    if stage.is_first and stage.is_last:
        return schedule.step(x, target=y, losses=losses)
    if stage.is_first:
        return schedule.step(x)
    if stage.is_last:
        return schedule.step(target=y, losses=losses)
    return schedule.step()


def assert_stage_grads(net, ref_grads, piece):
    mine = {id(p) for p in piece.parameters()}
    checked = 0
    for name, p in net.named_parameters():
        if id(p) in mine:
            assert p.grad is not None, name
            close(p.grad, ref_grads[name])
            checked += 1
    assert checked == len(mine) > 0


def manual_pipeline(schedule_cls, n_microbatches=3):
    from lucid.distributed.pipelining import PipelineStage

    rank, n = dist.get_rank(), dist.get_world_size()
    net = make_net()
    ref = copy.deepcopy(net)
    piece = my_piece(net, rank, n)
    stage = PipelineStage(piece, rank, n, device=lucid.tensor(0.0).device)
    return net, ref, piece, stage, schedule_cls(stage, n_microbatches, loss_fn=F.mse_loss)


def grads_match(schedule_name):
    from lucid.distributed import pipelining

    net, ref, piece, stage, schedule = manual_pipeline(getattr(pipelining, schedule_name))
    x, y = batch()
    losses = []
    out = run_step(schedule, stage, x, y, losses)
    assert_stage_grads(net, whole_batch_grads(ref, x, y), piece)
    if stage.is_last:
        close(out, ref(x))
        assert len(losses) == 3
        for loss, xm, ym in zip(losses, lucid.chunk(x, 3), lucid.chunk(y, 3)):
            close(loss, F.mse_loss(ref(xm), ym))
        # the mean loss of each microbatch, summed and divided by 3: the whole batch's loss
        close(sum(loss.item() for loss in losses) / 3, F.mse_loss(ref(x), y))
    else:
        assert out is None and losses == []


@check
def gpipe_grads_equal_the_whole_model():
    grads_match("ScheduleGPipe")


@check
def one_f_one_b_grads_equal_the_whole_model():
    grads_match("Schedule1F1B")


# the actions of each stage in one step of 4 microbatches: 1F1B holds at most num_stages - stage
# microbatches' activations (NOTE [Schedule orders] in schedules.py)
ONE_F_ONE_B_ORDERS = {
    1: ["F0 B0 F1 B1 F2 B2 F3 B3"],
    2: ["F0 F1 B0 F2 B1 F3 B2 B3", "F0 B0 F1 B1 F2 B2 F3 B3"],
    3: ["F0 F1 F2 B0 F3 B1 B2 B3", "F0 F1 B0 F2 B1 F3 B2 B3", "F0 B0 F1 B1 F2 B2 F3 B3"],
}


def recorded_actions(schedule_name):
    from lucid.distributed import pipelining

    net, ref, piece, stage, schedule = manual_pipeline(getattr(pipelining, schedule_name), n_microbatches=4)
    actions, forward, backward = [], stage.forward_one_chunk, stage.backward_one_chunk

    def record_forward(mb, *args):
        actions.append(f"F{mb}")
        return forward(mb, *args)

    def record_backward(mb):
        actions.append(f"B{mb}")
        return backward(mb)

    stage.forward_one_chunk, stage.backward_one_chunk = record_forward, record_backward
    x, y = batch(rows=8)
    run_step(schedule, stage, x, y)
    assert_stage_grads(net, whole_batch_grads(ref, x, y), piece)
    return " ".join(actions)


@check
def schedules_run_their_orders():
    rank, n = dist.get_rank(), dist.get_world_size()
    assert recorded_actions("ScheduleGPipe") == "F0 F1 F2 F3 B0 B1 B2 B3"
    assert recorded_actions("Schedule1F1B") == ONE_F_ONE_B_ORDERS[n][rank]


@check
def looped_schedules_grads_equal_the_whole_model():
    # two stages per rank: rank r holds stages r and r + n
    from lucid.distributed.pipelining import PipelineStage, ScheduleInterleaved1F1B, ScheduleLoopedBFS

    rank, n = dist.get_rank(), dist.get_world_size()
    for schedule_cls in (ScheduleLoopedBFS, ScheduleInterleaved1F1B):
        net = make_net()
        ref = copy.deepcopy(net)
        pieces = [my_piece(net, s, 2 * n) for s in (rank, rank + n)]
        stages = [PipelineStage(p, s, 2 * n) for p, s in zip(pieces, (rank, rank + n))]
        if n == 1:
            try:
                schedule_cls(stages, 2, loss_fn=F.mse_loss)
            except ValueError as e:
                assert "need at least 2 ranks" in str(e)
            else:
                raise AssertionError("a multi-stage schedule accepted a pipeline on one rank")
            continue
        schedule = schedule_cls(stages, 2 * n, loss_fn=F.mse_loss)
        x, y = batch(rows=4 * n)
        losses = []
        if rank == 0:
            out = schedule.step(x)
        elif rank == n - 1:
            out = schedule.step(target=y, losses=losses)
        else:
            out = schedule.step()
        grads = whole_batch_grads(ref, x, y)
        for piece in pieces:
            assert_stage_grads(net, grads, piece)
        if rank == n - 1:
            close(out, ref(x))
            close(sum(loss.item() for loss in losses) / (2 * n), F.mse_loss(ref(x), y))
        else:
            assert out is None
    if n > 1:
        try:
            ScheduleInterleaved1F1B(stages, n + 1)
        except ValueError as e:
            assert f"n_microbatches ({n + 1}) must be a multiple of the number of ranks ({n})" in str(e)
        else:
            raise AssertionError("interleaved 1F1B accepted microbatches that are no multiple of the ranks")
        try:
            ScheduleLoopedBFS(stages[::-1], 2)
        except ValueError as e:
            assert f"must hold stages [{rank}, {rank + n}]" in str(e)
        else:
            raise AssertionError("stages out of order accepted")


@check
def training_matches_one_process():
    from lucid.distributed.pipelining import Schedule1F1B, ScheduleGPipe

    for schedule_cls, make_opt in ((ScheduleGPipe, lambda p: lucid.optim.SGD(p, lr=0.01, momentum=0.9)),
                                   (Schedule1F1B, lambda p: lucid.optim.Adam(p, lr=0.01))):
        net, ref, piece, stage, schedule = manual_pipeline(schedule_cls, n_microbatches=3)
        opt, ref_opt = make_opt(piece.parameters()), make_opt(ref.parameters())
        got, want = [], []  # compared after the loop: a rank that stops early leaves the others blocked
        for step in range(3):
            x, y = batch(step)
            opt.zero_grad()
            losses = []
            run_step(schedule, stage, x, y, losses)
            opt.step()
            ref_opt.zero_grad()
            ref_loss = F.mse_loss(ref(x), y)
            ref_loss.backward()
            ref_opt.step()
            got.append(sum(loss.item() for loss in losses) / 3 if stage.is_last else 0.0)
            want.append(ref_loss.item() if stage.is_last else 0.0)
        close(got, want)
        ref_params = dict(ref.named_parameters())
        mine = {id(p) for p in piece.parameters()}
        for name, p in net.named_parameters():
            if id(p) in mine:
                close(p, ref_params[name])


@check
def uneven_microbatches_are_scaled_as_pytorch():
    # 7 rows in 3 microbatches: 3, 2, 2 rows; the gradient is (sum of the microbatch means) / 3
    from lucid.distributed.pipelining import ScheduleGPipe

    net, ref, piece, stage, schedule = manual_pipeline(ScheduleGPipe, n_microbatches=3)
    x, y = batch(rows=7)
    losses = []
    run_step(schedule, stage, x, y, losses)
    ref.zero_grad()
    total = sum(F.mse_loss(ref(xm), ym) for xm, ym in zip(lucid.tensor_split(x, 3), lucid.tensor_split(y, 3)))
    (total / 3).backward()
    assert_stage_grads(net, {n: p.grad for n, p in ref.named_parameters()}, piece)
    if stage.is_last:
        assert [loss.item() for loss in losses] == [
            F.mse_loss(ref(xm), ym).item() for xm, ym in zip(lucid.tensor_split(x, 3), lucid.tensor_split(y, 3))]


@check
def tracer_front_end_splits_at_submodules():
    from lucid.distributed.pipelining import Schedule1F1B, SplitPoint, pipeline

    rank, n = dist.get_rank(), dist.get_world_size()
    net = make_net()
    ref = copy.deepcopy(net)
    x, y = batch()
    spec = {f"blocks.{a}": SplitPoint.BEGINNING for a, _ in bounds(n)[1:]}
    pipe = pipeline(net, (lucid.chunk(x, 3)[0],), split_spec=spec)
    assert pipe.num_stages == n
    stage = pipe.build_stage(rank, lucid.tensor(0.0).device)
    losses = []
    out = run_step(Schedule1F1B(stage, 3, loss_fn=F.mse_loss), stage, x, y, losses)
    assert_stage_grads(net, whole_batch_grads(ref, x, y), stage.submod)
    if stage.is_last:
        close(out, ref(x))


class SkipNet(nn.Module):
    """pipe_split() twice: stage 0's ``h`` and the input ``bias`` (no grad) reach stage 2 through
    stage 1, several tensors a message; ``scale`` is read directly (a get_attr)."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(DIM, DIM), nn.Linear(DIM, DIM), nn.Linear(DIM, OUT)
        self.scale = nn.Parameter(lucid.tensor([2.0, -1.0]))

    def forward(self, x, bias):
        from lucid.distributed.pipelining import pipe_split

        h = lucid.tanh(self.a(x))
        pipe_split()
        g = lucid.tanh(self.b(h))
        pipe_split()
        return self.c(g + h).sum(1) * self.scale + bias


@check
def pipe_split_values_pass_through_stages():
    from lucid.distributed.pipelining import ScheduleGPipe, pipeline

    rank, n = dist.get_rank(), dist.get_world_size()
    if n != 3:
        return
    lucid.manual_seed(1)
    net = SkipNet().double()
    ref = copy.deepcopy(net)
    x, y = batch()
    bias = lucid.tensor(np.random.default_rng(5).standard_normal((BATCH, OUT)), dtype=lucid.float64)
    pipe = pipeline(net, (x[:2], bias[:2]))
    stage = pipe.build_stage(rank)
    losses = []
    schedule = ScheduleGPipe(stage, 3, loss_fn=F.mse_loss)
    out = schedule.step(x, bias) if rank == 0 else schedule.step(target=y, losses=losses) if rank == 2 else \
        schedule.step()
    ref.zero_grad()
    F.mse_loss(ref(x, bias), y).backward()
    assert_stage_grads(net, {k: p.grad for k, p in ref.named_parameters()}, stage.submod)
    if rank == 2:
        close(out, ref(x, bias))


@check
def forward_only_schedule_returns_the_output():
    from lucid.distributed.pipelining import ScheduleGPipe

    net, ref, piece, stage, _ = manual_pipeline(ScheduleGPipe)
    x, y = batch()
    out = run_step(ScheduleGPipe(stage, 2), stage, x, y)
    assert all(p.grad is None for p in piece.parameters())
    if stage.is_last:
        close(out, ref(x))
    # eval(): forward only, with the losses of a loss_fn (here with loss_kwargs)
    schedule, losses = ScheduleGPipe(stage, 2, loss_fn=F.mse_loss), []
    args = (x,) if stage.is_first else ()
    out = schedule.eval(*args, target=y if stage.is_last else None, losses=losses,
                        loss_kwargs={"reduction": "sum"})
    assert all(p.grad is None for p in piece.parameters())
    if stage.is_last:
        close(out, ref(x))
        close([loss.item() for loss in losses],
              [F.mse_loss(ref(xm), ym, reduction="sum").item() for xm, ym in zip(lucid.chunk(x, 2), lucid.chunk(y, 2))])
        assert not losses[0].requires_grad


@check
def bad_arguments_raise_as_pytorch():
    from lucid.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    rank, n = dist.get_rank(), dist.get_world_size()
    net = make_net()
    piece = my_piece(net, rank, n)
    for index in (n, n + 3, -1):
        try:
            PipelineStage(piece, index, n)
        except ValueError as e:
            assert f"Stage index {index} is out of range of {n}" in str(e)
        else:
            raise AssertionError(f"stage index {index} accepted")
    if n > 1:
        try:  # stage 0 must run on group rank 0
            PipelineStage(piece, (rank + 1) % n, n)
        except ValueError as e:
            assert "runs on group rank" in str(e)
        else:
            raise AssertionError("a stage on the wrong rank was accepted")
        try:
            Schedule1F1B(PipelineStage(piece, rank, n), n - 1, loss_fn=F.mse_loss)
        except ValueError as e:
            assert f"Number of microbatches ({n - 1}) must be greater than or equal to the number of stages ({n})" \
                in str(e)
        else:
            raise AssertionError("1F1B accepted fewer microbatches than stages")
    stage = PipelineStage(piece, rank, n)
    schedule = ScheduleGPipe(stage, 4, loss_fn=F.mse_loss)
    x, y = batch(rows=3)  # fewer rows than microbatches: both ends raise before any message
    if stage.is_first or stage.is_last:
        try:
            run_step(schedule, stage, x, y)
        except AssertionError as e:
            assert "batch size 3" in str(e) and "4 microbatches" in str(e), e
        else:
            raise AssertionError("a batch of 3 was cut into 4 microbatches")
    with lucid.no_grad():
        if stage.is_first:
            try:
                schedule.step(x)
            except RuntimeError as e:
                assert "requires gradients to be enabled" in str(e)
            else:
                raise AssertionError("step ran under no_grad")
    assert all(p.grad is None for p in piece.parameters())  # nothing half-done


@check
def declared_shapes_are_checked():
    # the second stage declares inputs of another shape: it raises on the first message (a
    # forward-only step of one microbatch, so the first stage has nothing left to wait for)
    from lucid.distributed.pipelining import PipelineStage, PipeliningShapeError, ScheduleGPipe

    rank, n = dist.get_rank(), dist.get_world_size()
    pair = dist.new_group([0, 1]) if n > 1 else None  # every rank makes the group
    if n == 1 or rank > 1:
        return
    piece = nn.Linear(DIM, DIM).double() if rank == 0 else nn.Identity()
    declared = None if rank == 0 else lucid.zeros(2, TOKENS, DIM + 1, dtype=lucid.float64)
    stage = PipelineStage(piece, rank, 2, group=pair, input_args=declared)
    x = batch(rows=2)[0]
    try:
        run_step(ScheduleGPipe(stage, 1), stage, x, None)
    except PipeliningShapeError as e:
        assert rank == 1 and "expected (shape, dtype) [((2, 3, 5), lucid.float64)]" in str(e), e
        assert "got [((2, 3, 4), lucid.float64)]" in str(e), e
    else:
        assert rank == 0, "the second stage accepted inputs of another shape than declared"


if __name__ == "__main__":
    rank_main(CHECKS, sys.argv[1:])
