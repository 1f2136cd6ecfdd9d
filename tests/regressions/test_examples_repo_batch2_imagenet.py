"""pytorch/examples ``imagenet/main.py`` run on Lucid (``import lucid as torch``), single process:
its ``train``/``validate`` loops with ``AverageMeter``/``ProgressMeter``/``Summary`` (meters fed
0-d tensors, as the script does with ``acc1[0]``, and formatted with ``'{val:6.2f}'``),
``accuracy(output, target, topk=(1, 5))``, ``SGD(momentum=0.9, weight_decay=1e-4)`` with
``StepLR``, and ``save_checkpoint(..., is_best)`` / ``--resume`` (``torch.load`` of the checkpoint,
``load_state_dict`` of model, optimizer and scheduler). ``datasets.FakeData`` (the script's
``--dummy``) becomes small random 16x16 images whose class is readable from them, resnet18 a small
CNN. Checks: ``accuracy`` against a NumPy top-k, the printed meters against NumPy averages, the
checkpoint files and that a resumed run continues exactly where the first one stopped.
"""
import os
import re
import shutil
import time
from enum import Enum

import numpy as np
import pytest

import lucid


def imagenet(torch, workdir, epochs, resume="", start_epoch=0, print_freq=2, seed=0):
    """main.py's main_worker for one process on the CPU; returns (best_acc1, model, printed lines)."""
    nn = torch.nn
    lines = []
    print = lines.append  # noqa: A001  (the script prints; the test reads the lines)

    class Summary(Enum):
        NONE = 0
        AVERAGE = 1
        SUM = 2
        COUNT = 3

    class AverageMeter(object):
        """Computes and stores the average and current value"""
        def __init__(self, name, fmt=':f', summary_type=Summary.AVERAGE):
            self.name = name
            self.fmt = fmt
            self.summary_type = summary_type
            self.reset()

        def reset(self):
            self.val = 0
            self.avg = 0
            self.sum = 0
            self.count = 0

        def update(self, val, n=1):
            self.val = val
            self.sum += val * n
            self.count += n
            self.avg = self.sum / self.count

        def __str__(self):
            fmtstr = '{name} {val' + self.fmt + '} ({avg' + self.fmt + '})'
            return fmtstr.format(**self.__dict__)

        def summary(self):
            fmtstr = ''
            if self.summary_type is Summary.NONE:
                fmtstr = ''
            elif self.summary_type is Summary.AVERAGE:
                fmtstr = '{name} {avg:.3f}'
            elif self.summary_type is Summary.SUM:
                fmtstr = '{name} {sum:.3f}'
            elif self.summary_type is Summary.COUNT:
                fmtstr = '{name} {count:.3f}'
            else:
                raise ValueError('invalid summary type %r' % self.summary_type)
            return fmtstr.format(**self.__dict__)

    class ProgressMeter(object):
        def __init__(self, num_batches, meters, prefix=""):
            self.batch_fmtstr = self._get_batch_fmtstr(num_batches)
            self.meters = meters
            self.prefix = prefix

        def display(self, batch):
            entries = [self.prefix + self.batch_fmtstr.format(batch)]
            entries += [str(meter) for meter in self.meters]
            print('\t'.join(entries))

        def display_summary(self):
            entries = [" *"]
            entries += [meter.summary() for meter in self.meters]
            print(' '.join(entries))

        def _get_batch_fmtstr(self, num_batches):
            num_digits = len(str(num_batches // 1))
            fmt = '{:' + str(num_digits) + 'd}'
            return '[' + fmt + '/' + fmt.format(num_batches) + ']'

    def accuracy(output, target, topk=(1,)):
        """Computes the accuracy over the k top predictions for the specified values of k"""
        with torch.no_grad():
            maxk = max(topk)
            batch_size = target.size(0)
            _, pred = output.topk(maxk, 1, True, True)
            pred = pred.t()
            correct = pred.eq(target.view(1, -1).expand_as(pred))
            res = []
            for k in topk:
                correct_k = correct[:k].reshape(-1).float().sum(0, keepdim=True)
                res.append(correct_k.mul_(100.0 / batch_size))
            return res

    def train(train_loader, model, criterion, optimizer, epoch, device):
        batch_time = AverageMeter('Time', ':6.3f')
        data_time = AverageMeter('Data', ':6.3f')
        losses = AverageMeter('Loss', ':.4e')
        top1 = AverageMeter('Acc@1', ':6.2f')
        top5 = AverageMeter('Acc@5', ':6.2f')
        progress = ProgressMeter(len(train_loader), [batch_time, data_time, losses, top1, top5],
                                 prefix="Epoch: [{}]".format(epoch))
        model.train()
        end = time.time()
        for i, (images, target) in enumerate(train_loader):
            data_time.update(time.time() - end)
            images = images.to(device, non_blocking=True)
            target = target.to(device, non_blocking=True)
            output = model(images)
            loss = criterion(output, target)
            acc1, acc5 = accuracy(output, target, topk=(1, 5))
            losses.update(loss.item(), images.size(0))
            top1.update(acc1[0], images.size(0))
            top5.update(acc5[0], images.size(0))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            batch_time.update(time.time() - end)
            end = time.time()
            if i % print_freq == 0:
                progress.display(i + 1)

    def validate(val_loader, model, criterion):
        def run_validate(loader, base_progress=0):
            with torch.no_grad():
                end = time.time()
                for i, (images, target) in enumerate(loader):
                    i = base_progress + i
                    output = model(images)
                    loss = criterion(output, target)
                    acc1, acc5 = accuracy(output, target, topk=(1, 5))
                    losses.update(loss.item(), images.size(0))
                    top1.update(acc1[0], images.size(0))
                    top5.update(acc5[0], images.size(0))
                    batch_time.update(time.time() - end)
                    end = time.time()
                    if i % print_freq == 0:
                        progress.display(i + 1)

        batch_time = AverageMeter('Time', ':6.3f', Summary.NONE)
        losses = AverageMeter('Loss', ':.4e', Summary.NONE)
        top1 = AverageMeter('Acc@1', ':6.2f', Summary.AVERAGE)
        top5 = AverageMeter('Acc@5', ':6.2f', Summary.AVERAGE)
        progress = ProgressMeter(len(val_loader), [batch_time, losses, top1, top5], prefix='Test: ')
        model.eval()
        run_validate(val_loader)
        progress.display_summary()
        return top1.avg

    def save_checkpoint(state, is_best, filename=os.path.join(workdir, 'checkpoint.pth.tar')):
        torch.save(state, filename)
        if is_best:
            shutil.copyfile(filename, os.path.join(workdir, 'model_best.pth.tar'))

    # ---- main_worker
    rng = np.random.default_rng(seed)

    def fake_data(n):  # datasets.FakeData stand-in: class c brightens row c
        y = rng.integers(0, 12, n)
        x = rng.normal(size=(n, 3, 16, 16)) * 0.5
        x[np.arange(n), :, y, :] += 2.0
        return torch.utils.data.TensorDataset(torch.tensor(x, dtype=torch.float32), torch.tensor(y))

    torch.manual_seed(seed)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d((4, 1)),
                          nn.Flatten(), nn.Linear(64, 12))
    device = torch.device("cpu")
    criterion = nn.CrossEntropyLoss().to(device)
    optimizer = torch.optim.SGD(model.parameters(), 0.1, momentum=0.9, weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    best_acc1 = 0
    if resume:
        if os.path.isfile(resume):
            print("=> loading checkpoint '{}'".format(resume))
            checkpoint = torch.load(resume)
            start_epoch = checkpoint['epoch']
            best_acc1 = checkpoint['best_acc1']
            model.load_state_dict(checkpoint['state_dict'])
            optimizer.load_state_dict(checkpoint['optimizer'])
            scheduler.load_state_dict(checkpoint['scheduler'])
            print("=> loaded checkpoint '{}' (epoch {})".format(resume, checkpoint['epoch']))
        else:
            print("=> no checkpoint found at '{}'".format(resume))
    train_dataset, val_dataset = fake_data(96), fake_data(40)
    train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=16, shuffle=False)
    val_loader = torch.utils.data.DataLoader(val_dataset, batch_size=16, shuffle=False)
    for epoch in range(start_epoch, epochs):
        train(train_loader, model, criterion, optimizer, epoch, device)
        acc1 = validate(val_loader, model, criterion)
        scheduler.step()
        is_best = acc1 > best_acc1
        best_acc1 = max(acc1, best_acc1)
        save_checkpoint({
            'epoch': epoch + 1,
            'arch': 'small_cnn',
            'state_dict': model.state_dict(),
            'best_acc1': best_acc1,
            'optimizer': optimizer.state_dict(),
            'scheduler': scheduler.state_dict()
        }, is_best)
    return best_acc1, model, lines, accuracy, (val_dataset, AverageMeter, Summary)


_TRAIN = re.compile(r"^Epoch: \[(\d)\]\[(\d)/6\]\tTime +[\d.]+ \( *[\d.]+\)\tData +[\d.]+ \( *[\d.]+\)\t"
                    r"Loss (\d\.\d{4}e[+-]\d\d) \((\d\.\d{4}e[+-]\d\d)\)\tAcc@1 +([\d.]+) \( *([\d.]+)\)\t"
                    r"Acc@5 +([\d.]+) \( *([\d.]+)\)$")
_SUMMARY = re.compile(r"^ \*   Acc@1 ([\d.]+) Acc@5 ([\d.]+)$")


def _np_accuracy(logits, y, k):
    top = np.argsort(-logits, axis=1, kind="stable")[:, :k]
    return 100.0 * (top == y[:, None]).any(1).mean()


def test_accuracy_topk_matches_numpy():
    *_, accuracy, _ = imagenet(lucid, "/nonexistent", epochs=0)
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(10, 7))
    y = rng.integers(0, 7, 10)
    acc1, acc5 = accuracy(lucid.tensor(logits), lucid.tensor(y), topk=(1, 5))
    assert acc1.shape == (1,) and acc1.dtype == lucid.float32
    np.testing.assert_allclose([acc1.item(), acc5.item()], [_np_accuracy(logits, y, 1), _np_accuracy(logits, y, 5)],
                               rtol=1e-6)


def test_average_meter_formats_zero_dim_tensors():
    *_, (_, AverageMeter, Summary) = imagenet(lucid, "/nonexistent", epochs=0)
    m = AverageMeter('Acc@1', ':6.2f')
    m.update(lucid.tensor([62.5])[0], 16)
    m.update(lucid.tensor([25.0])[0], 8)
    assert str(m) == "Acc@1  25.00 ( 50.00)" and m.summary() == "Acc@1 50.000"
    assert AverageMeter('Loss', ':.4e', Summary.NONE).summary() == ""


def _needs_cpu_default():
    """The script pins ``torch.device("cpu")`` when no GPU is found, as written; on another default
    device it mixes devices as PyTorch would (the strict passes run the other tests)."""
    if lucid.get_default_device().type != "cpu":
        pytest.skip("the script pins device='cpu'; the default device is " + str(lucid.get_default_device()))


def test_imagenet_train_validate_checkpoint_resume(tmp_path):
    _needs_cpu_default()
    torch = lucid
    best, model, lines, _, (val_dataset, *_) = imagenet(torch, str(tmp_path), epochs=2)
    train_lines = [_TRAIN.match(s) for s in lines if s.startswith("Epoch")]
    assert all(train_lines) and [(m.group(1), m.group(2).strip()) for m in train_lines] == \
        [(e, b) for e in "01" for b in ("1", "3", "5")]
    for m in train_lines:  # running averages never exceed 100 and Acc@5 >= Acc@1
        assert 0 <= float(m.group(6)) <= float(m.group(8)) <= 100
    summaries = [_SUMMARY.match(s) for s in lines if s.startswith(" *")]
    assert len(summaries) == 2 and all(summaries)
    # the last summary: top-1 / top-5 of the final model on the validation set, from NumPy
    x, y = (t.numpy() for t in val_dataset.tensors)
    with torch.no_grad():
        logits = model.eval()(torch.tensor(x)).numpy().astype(np.float64)
    assert float(summaries[-1].group(1)) == pytest.approx(_np_accuracy(logits, y, 1), abs=6e-4)
    assert float(summaries[-1].group(2)) == pytest.approx(_np_accuracy(logits, y, 5), abs=6e-4)
    ck = torch.load(str(tmp_path / "checkpoint.pth.tar"))
    assert ck["epoch"] == 2 and ck["arch"] == "small_cnn" and ck["scheduler"]["last_epoch"] == 2
    assert ck["optimizer"]["param_groups"][0]["lr"] == pytest.approx(0.025)
    accs = [float(s.group(1)) for s in summaries]
    assert float(ck["best_acc1"]) == pytest.approx(max(accs), abs=6e-4) and float(best) == float(ck["best_acc1"])
    assert (tmp_path / "model_best.pth.tar").exists()
    # --resume: one more epoch from the checkpoint equals a straight three-epoch run
    straight = tmp_path / "straight"
    straight.mkdir()
    _, m3, _, _, _ = imagenet(torch, str(straight), epochs=3)
    _, m_resumed, lines_r, _, _ = imagenet(torch, str(tmp_path), epochs=3, resume=str(tmp_path / "checkpoint.pth.tar"))
    assert lines_r[1] == f"=> loaded checkpoint '{tmp_path / 'checkpoint.pth.tar'}' (epoch 2)"
    assert [s[:10] for s in lines_r if s.startswith("Epoch")] == ["Epoch: [2]"] * 3
    for (k, a), b in zip(m3.state_dict().items(), m_resumed.state_dict().values()):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-7, err_msg=k)


def test_imagenet_loop_on_torch(tmp_path):
    _needs_cpu_default()
    torch = pytest.importorskip("torch")
    import torch.utils.data  # noqa: F401

    best, _, lines, _, _ = imagenet(torch, str(tmp_path), epochs=2)
    train_lines = [_TRAIN.match(s) for s in lines if s.startswith("Epoch")]
    assert all(train_lines) and len(train_lines) == 6
    assert all(_SUMMARY.match(s) for s in lines if s.startswith(" *"))
    ck = torch.load(str(tmp_path / "checkpoint.pth.tar"))
    assert ck["epoch"] == 2 and float(ck["best_acc1"]) == float(best)
