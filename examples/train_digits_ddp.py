"""The main job, data-parallel: the digits CNN of train_digits.py trained on several processes.

Each process (rank) holds a replica of the model and trains on its own share of every
batch (``DistributedSampler``); ``DistributedDataParallel`` averages the gradients during
``backward()``, so every replica takes the same optimizer step. The global batch (the
``--batch-size`` images of a step, split between the ranks) and the learning rate are those
of train_digits.py, so it reaches the same accuracy.

Run: ``lucid-run -n 2 examples/train_digits_ddp.py`` (``--epochs 12`` by default). With plain
``python`` it runs as a world of one.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lucid  # noqa: E402
import lucid.distributed as dist  # noqa: E402
import lucid.nn.functional as Fn  # noqa: E402
from lucid.nn.parallel import DistributedDataParallel as DDP  # noqa: E402
from lucid.utils.data import DataLoader, TensorDataset  # noqa: E402
from lucid.utils.data.distributed import DistributedSampler  # noqa: E402
from train_digits import DigitsCNN, evaluate, load_digits_split  # noqa: E402


def train(args):
    rank, world = dist.get_rank(), dist.get_world_size()
    say = print if rank == 0 else (lambda *a, **k: None)
    if args.batch_size % world:
        raise SystemExit(f"--batch-size {args.batch_size} must be divisible by the {world} ranks")
    lucid.manual_seed(args.seed)
    (xtr, ytr), (xva, yva) = load_digits_split(args.seed)
    say(f"digits: {len(xtr)} train / {len(xva)} validation images; {world} rank(s), "
        f"{args.batch_size // world} images per rank and step")
    model = DDP(DigitsCNN())  # rank 0's initial weights are broadcast to every rank
    opt = lucid.optim.Adam(model.parameters(), lr=args.lr)
    sched = lucid.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.epochs)
    data = TensorDataset(lucid.tensor(xtr), lucid.tensor(ytr))
    sampler = DistributedSampler(data, seed=args.seed)
    loader = DataLoader(data, batch_size=args.batch_size // world, sampler=sampler)
    t0 = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        sampler.set_epoch(epoch)  # a new shuffle each epoch, the same on every rank
        total = lucid.zeros(2, dtype=lucid.float64)
        for xb, yb in loader:
            loss = Fn.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()  # gradients are averaged over the ranks here
            opt.step()
            total += lucid.tensor([loss.item() * len(yb), len(yb)], dtype=lucid.float64)
        sched.step()
        dist.all_reduce(total)  # the epoch's mean training loss over every rank's images
        val_loss, val_acc = evaluate(model.module, xva, yva)
        say(f"epoch {epoch:2d}/{args.epochs}  train loss {total[0].item() / total[1].item():.4f}  "
            f"val loss {val_loss:.4f}  val acc {val_acc:.2%}")
    say(f"training took {time.perf_counter() - t0:.1f} s on {world} rank(s)")
    return model, (xva, yva)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=32, help="global batch, split between the ranks")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs")
    args = parser.parse_args(argv)
    dist.init_process_group("mpi")
    model, val = train(args)
    # Every replica holds the same weights: check it, then save once (rank 0).
    flat = np.concatenate([p.detach().numpy().ravel() for p in model.parameters()])
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, flat)
    if any(not np.array_equal(everyone[0], f) for f in everyone):
        raise SystemExit("the replicas diverged")
    acc = evaluate(model.module, *val)[1]
    if dist.get_rank() == 0:
        os.makedirs(args.out, exist_ok=True)
        path = os.path.join(args.out, "digits_cnn_ddp.safetensors")
        lucid.save(model.state_dict(), path)  # the plain model's keys: loads into DigitsCNN()
        print(f"replicas identical; checkpoint {path}; final validation accuracy: {acc:.2%}")
    dist.destroy_process_group()
    if acc < 0.97:
        raise SystemExit(f"validation accuracy {acc:.2%} is below the 97% target")


if __name__ == "__main__":
    main()
