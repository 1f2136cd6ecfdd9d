"""The rank body of test_tensor_parallel_extras.py: ``loss_parallel`` (NOTE [Loss parallel]) and
``PrepareModuleInputOutput`` on real MPI ranks (protocol in rankchecks.py). Every loss and
gradient is compared with the same call on the whole logits in one process (plain Lucid);
the all-gather collective is counted to show the logits are never gathered.
"""
import contextlib
import sys

import numpy as np

import lucid
import lucid.distributed as dist
import lucid.distributed.collectives as C
import lucid.nn as nn
import lucid.nn.functional as F
from lucid.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
from lucid.distributed.tensor.parallel import PrepareModuleInputOutput, loss_parallel, parallelize_module

CHECKS = {}
rng = np.random.default_rng(2)  # the same draws on every rank
X = rng.standard_normal((5, 7)) * 3
X3 = rng.standard_normal((3, 7, 2))
T = np.array([1, 6, 0, 3, 6])
W = np.linspace(0.5, 2.0, 7)


def check(fn):
    CHECKS[fn.__name__] = fn
    return fn


def mesh():
    return dist.init_device_mesh("cpu", (dist.get_world_size(),))


@contextlib.contextmanager
def no_gathers():
    calls = []
    real = C.all_gather, C.all_gather_into_tensor

    def spy(*a, **k):
        calls.append(1)
        return real[0](*a, **k)

    C.all_gather = spy
    try:
        yield calls
    finally:
        C.all_gather = real[0]
    assert not calls, f"the logits were gathered ({len(calls)} all_gather calls)"


def close(a, b, what):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12, atol=1e-12, err_msg=what)


def _reference(fn, x, **kw):
    leaf = lucid.tensor(x, requires_grad=True)
    out = fn(leaf, **kw)
    out.sum().backward() if out.ndim else out.backward()
    return out.detach().numpy(), leaf.grad.numpy()


def _sharded(fn, x, cdim, **kw):
    d = distribute_tensor(lucid.tensor(x), mesh(), [Shard(cdim)]).requires_grad_()
    with loss_parallel(), no_gathers():
        out = fn(d, **kw)
        assert isinstance(out, DTensor) and out.placements == (Replicate(),), out
        (out.sum() if out.ndim else out).backward()
    assert d.grad.placements == (Shard(cdim),)
    return out.full_tensor().detach().numpy(), d.grad.full_tensor().numpy()


@check
def cross_entropy_on_class_shards_matches_the_gathered_logits():
    t = lucid.tensor(T)
    cases = [dict(), dict(reduction="sum"), dict(reduction="none"), dict(weight=lucid.tensor(W)),
             dict(ignore_index=6), dict(ignore_index=6, weight=lucid.tensor(W), label_smoothing=0.2),
             dict(label_smoothing=0.1, reduction="none"), dict(weight=lucid.tensor(W), reduction="sum",
                                                                label_smoothing=0.3)]
    for kw in cases:
        want = _reference(F.cross_entropy, X, target=t, **kw)
        got = _sharded(F.cross_entropy, X, 1, target=t, **kw)
        close(got[0], want[0], f"loss {kw}")
        close(got[1], want[1], f"gradient {kw}")


@check
def cross_entropy_with_spatial_dims_and_a_replicated_target():
    t = lucid.tensor(np.array([[0, 6], [3, 3], [5, 1]]))
    want = _reference(F.cross_entropy, X3, target=t)
    got = _sharded(F.cross_entropy, X3, 1, target=distribute_tensor(t, mesh(), [Replicate()]))
    close(got[0], want[0], "3-d loss")
    close(got[1], want[1], "3-d gradient")


@check
def log_softmax_stays_sharded_and_nll_loss_reads_it():
    t = lucid.tensor(T)

    kept = []

    def composed(x, **kw):
        logp = F.log_softmax(x, dim=1)
        kept.append(logp)
        return F.nll_loss(logp, t, weight=lucid.tensor(W))

    want = _reference(composed, X)
    got = _sharded(composed, X, 1)
    close(got[0], want[0], "nll loss")
    close(got[1], want[1], "nll gradient")
    assert kept[1].placements == (Shard(1),)
    close(kept[1].full_tensor().detach().numpy(), kept[0].detach().numpy(), "log_softmax")
    # a sharded log_softmax output used on its own: every rank's columns feed the logsumexp
    c = rng.standard_normal(X.shape)
    leaf = lucid.tensor(X, requires_grad=True)
    (F.log_softmax(leaf, dim=1) * lucid.tensor(c)).sum().backward()
    d = distribute_tensor(lucid.tensor(X), mesh(), [Shard(1)]).requires_grad_()
    with loss_parallel(), no_gathers():
        logp = d.log_softmax(1)
        (logp * distribute_tensor(lucid.tensor(c), mesh(), [Shard(1)])).sum().backward()
    close(d.grad.full_tensor().numpy(), leaf.grad.numpy(), "log_softmax gradient")


@check
def outside_the_context_and_bad_layouts_behave_as_before():
    m = mesh()
    d = distribute_tensor(lucid.tensor(X), m, [Shard(1)])
    try:
        F.cross_entropy(d, lucid.tensor(T))
    except RuntimeError as e:
        assert "mixed Tensor and DTensor" in str(e)
    else:
        raise AssertionError("a plain target outside loss_parallel was accepted")
    rows = distribute_tensor(lucid.tensor(X), m, [Shard(0)])
    with loss_parallel():
        try:
            F.cross_entropy(rows, lucid.tensor(T))
        except ValueError as e:
            assert "sharded on the class dimension 1" in str(e), str(e)
        else:
            raise AssertionError("Shard(0) logits accepted")


@check
def prepare_module_input_output_moves_both_sides():
    m = mesh()
    n, r = m.size(), m.get_local_rank()
    seen = []

    class Probe(nn.Module):
        def forward(self, x):
            seen.append(x)
            return x * 2

    probe = parallelize_module(Probe(), m, PrepareModuleInputOutput(
        input_layouts=Shard(0), desired_input_layouts=Replicate(), output_layouts=Replicate(),
        desired_output_layouts=Shard(0), use_local_input=False, use_local_output=True))
    rows = np.arange(4.0 * n * 2).reshape(4 * n, 2)
    out = probe(lucid.tensor(rows[4 * r:4 * r + 4]))  # this rank's rows
    assert isinstance(seen[0], DTensor) and seen[0].placements == (Replicate(),)
    close(seen[0].to_local().numpy(), rows, "the gathered input")
    assert not isinstance(out, DTensor)
    close(out.numpy(), 2 * rows[4 * r:4 * r + 4], "this rank's rows of the output")


if __name__ == "__main__":
    from rankchecks import rank_main

    rank_main(CHECKS, sys.argv[1:])
