"""pytorch/examples scripts run on Lucid (``import lucid as torch``), ninth batch, and the "How to use
TensorBoard with PyTorch" recipe:

- ``differentiable_physics/mass_spring.py``: a mass-spring system integrated by semi-implicit Euler
  inside ``forward``, with in-place indexed updates on tensors that need gradients (``forces[i] +=
  force``, ``forces[:, 1] -= ...``, ``positions[0] = ...``, ``velocities[0] = ...``), trained
  through 50 steps of simulation by ``Adam``; checked against a NumPy simulation and float64 finite
  differences of the loss.
- ``distributed/ddp-tutorial-series/single_gpu.py`` + ``datautils.py``: the ``Trainer`` over
  ``MyTrainDataset`` (a list of ``(torch.rand(20), torch.rand(1))``), ``_save_checkpoint`` every
  ``save_every`` epochs, run on ``device="cpu"`` (the script's ``device = 0`` is ``cuda:0``).
- ``distributed/minGPT-ddp/mingpt``: ``model.py`` (``GPT`` from ``GPTConfig``, the GPT-2 init with
  the scaled ``c_proj`` weights, ``nn.MultiheadAttention(batch_first=True)`` fed the example's
  float ``attn_mask``, ``create_optimizer``'s decay/no-decay parameter groups for ``AdamW``,
  ``generate`` with ``topk``), ``char_dataset.py`` (``CharDataset`` over a small text file, read
  through a stand-in for ``fsspec.open``) and ``trainer.py``'s ``Trainer`` (the methods as written;
  ``__init__`` is replaced by one that skips torchrun's environment, DDP and CUDA, with a
  one-replica ``DistributedSampler``), including the ``Snapshot`` save and resume.
- The TensorBoard recipe: ``SummaryWriter.add_scalar("Loss/train", loss, epoch)`` with the loss
  tensor itself, ``flush``, ``close``; the event file is read back with the independent reader of
  ``tests/data/test_tensorboard.py``.

Each script is a function of the module it is handed as ``torch``; the parity tests run the same
text on PyTorch where installed, from the same NumPy-drawn weights.

Found here (and fixed in the engine, NOTE [Version checks of unread inputs]): the tape
version-checked every saved tensor argument, also one that no gradient needs, so
``y = v * 0.01; v[0] = 0.0; y.sum().backward()`` raised where PyTorch, whose ``mul`` by a number
saves nothing of ``v``, does not. The mass-spring tests match PyTorch to 1e-8.
"""
import importlib.util
import io
import os
from contextlib import redirect_stdout

import numpy as np
import pytest

import lucid
import lucid.nn  # noqa: F401
import lucid.nn.functional  # noqa: F401
import lucid.optim  # noqa: F401
import lucid.utils.data  # noqa: F401
import lucid.utils.data.distributed  # noqa: F401


def _reference_torch():
    """PyTorch for the parity runs, on one thread: these models are tiny, and PyTorch's thread pool
    only contends with the other processes on a shared machine (ten times slower there)."""
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    return torch


def _set_params(torch, model, seed, scale=0.1):
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for _, p in sorted(model.named_parameters()):
            p.copy_(torch.tensor(rng.normal(scale=scale, size=tuple(p.shape)), dtype=p.dtype))
    return model


def _needs_cpu_default(why):
    if lucid.get_default_device().type != "cpu":
        pytest.skip(why + "; the default device is " + str(lucid.get_default_device()))


# ------------------------------------------------------------------ differentiable_physics/mass_spring.py

def mass_spring(torch, epochs=30, steps=50, num_particles=2, seed=0, dtype=None, start=None):
    nn, optim = torch.nn, torch.optim

    class MassSpringSystem(nn.Module):
        def __init__(self, num_particles, springs, mass=1.0, dt=0.01, gravity=9.81, device="cpu"):
            super().__init__()
            self.device = device
            self.mass = mass
            self.springs = springs
            self.dt = dt
            self.gravity = gravity
            # Particle 0 is fixed at the origin
            self.initial_position_0 = torch.tensor([0.0, 0.0], device=device)
            # Remaining particles are trainable
            self.initial_positions_rest = nn.Parameter(torch.randn(num_particles - 1, 2, device=device))
            # Velocities
            self.velocities = torch.zeros(num_particles, 2, device=device)

        def forward(self, steps):
            positions = torch.cat([self.initial_position_0.unsqueeze(0), self.initial_positions_rest], dim=0)
            velocities = self.velocities
            for _ in range(steps):
                forces = torch.zeros_like(positions)
                # Compute spring forces
                for (i, j, rest_length, stiffness) in self.springs:
                    xi, xj = positions[i], positions[j]
                    dir_vec = xj - xi
                    dist = dir_vec.norm()
                    force = stiffness * (dist - rest_length) * dir_vec / (dist + 1e-6)
                    forces[i] += force
                    forces[j] -= force
                # Apply gravity
                forces[:, 1] -= self.gravity * self.mass
                # Semi-implicit Euler integration
                acceleration = forces / self.mass
                velocities = velocities + acceleration * self.dt
                positions = positions + velocities * self.dt
                # Fix particle 0 at origin
                positions[0] = self.initial_position_0
                velocities[0] = torch.tensor([0.0, 0.0], device=positions.device)
            return positions

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    springs = [(0, 1, 1.0, 10.0)] if num_particles == 2 else [(0, 1, 1.0, 10.0), (1, 2, 0.5, 5.0)]
    system = MassSpringSystem(num_particles=num_particles, springs=springs, mass=1.0, dt=0.01, gravity=9.81,
                              device=device)
    start = np.random.default_rng(seed).normal(size=(num_particles - 1, 2)) if start is None else start
    with torch.no_grad():
        system.initial_positions_rest.copy_(torch.tensor(start))
    if dtype is not None:
        system = system.to(dtype)
        system.initial_position_0 = system.initial_position_0.to(dtype)
        system.velocities = system.velocities.to(dtype)
    optimizer = optim.Adam(system.parameters(), lr=0.05)
    target_positions = torch.tensor([[0.0, 0.0], [1.0, 0.0]] + [[1.5, 0.0]] * (num_particles - 2), device=device,
                                    dtype=dtype)
    losses, first_grad = [], None
    for epoch in range(epochs):
        optimizer.zero_grad()
        final_positions = system(steps)
        loss = (final_positions - target_positions).pow(2).mean()
        loss.backward()
        if first_grad is None:
            first_grad = system.initial_positions_rest.grad.detach().cpu().numpy().copy()
        optimizer.step()
        losses.append(loss.item())
    with torch.no_grad():
        evaluated = system(steps).cpu().numpy()
    return dict(losses=losses, first_grad=first_grad, start=start, final=evaluated,
                learned=system.initial_positions_rest.detach().cpu().numpy())


def _numpy_mass_spring(rest, steps, springs, num_particles):
    pos = np.concatenate([np.zeros((1, 2)), rest])
    vel = np.zeros((num_particles, 2))
    for _ in range(steps):
        forces = np.zeros_like(pos)
        for i, j, rest_length, k in springs:
            d = pos[j] - pos[i]
            dist = np.linalg.norm(d)
            f = k * (dist - rest_length) * d / (dist + 1e-6)
            forces[i] += f
            forces[j] -= f
        forces[:, 1] -= 9.81
        vel = vel + forces * 0.01
        pos = pos + vel * 0.01
        pos[0] = 0.0
        vel[0] = 0.0
    return pos


# The script saves ``velocities * self.dt`` and then writes ``velocities[0] = ...``: PyTorch's
# ``mul`` by a Python number saves nothing of ``velocities``; Lucid's tape refused the backward
# until NOTE [Version checks of unread inputs] (lucid/autograd/engine.py).


def test_mass_spring():
    out = mass_spring(lucid, epochs=1, steps=50, dtype=lucid.float64)
    springs = [(0, 1, 1.0, 10.0)]
    target = np.array([[0.0, 0.0], [1.0, 0.0]])

    def loss(rest):
        return ((_numpy_mass_spring(rest, 50, springs, 2) - target) ** 2).mean()

    start = out["start"]
    assert out["losses"][0] == pytest.approx(loss(start), rel=1e-7)
    eps, fd = 1e-6, np.zeros_like(start)
    for idx in np.ndindex(*start.shape):
        d = np.zeros_like(start)
        d[idx] = eps
        fd[idx] = (loss(start + d) - loss(start - d)) / (2 * eps)
    np.testing.assert_allclose(out["first_grad"], fd, rtol=1e-6, atol=1e-9)
    # training (float32, as the script): the hanging mass is moved to where it ends near the target
    out = mass_spring(lucid, epochs=40, steps=20)
    assert out["losses"][-1] < 0.05 * out["losses"][0]
    np.testing.assert_allclose(out["final"], _numpy_mass_spring(out["learned"], 20, springs, 2), rtol=1e-4, atol=1e-5)


def test_mass_spring_chain_of_three():
    out = mass_spring(lucid, epochs=1, steps=10, num_particles=3, dtype=lucid.float64)
    springs = [(0, 1, 1.0, 10.0), (1, 2, 0.5, 5.0)]
    target = np.array([[0.0, 0.0], [1.0, 0.0], [1.5, 0.0]])

    def loss(rest):
        return ((_numpy_mass_spring(rest, 10, springs, 3) - target) ** 2).mean()

    start, eps = out["start"], 1e-6
    fd = np.zeros_like(start)
    for idx in np.ndindex(*start.shape):
        d = np.zeros_like(start)
        d[idx] = eps
        fd[idx] = (loss(start + d) - loss(start - d)) / (2 * eps)
    np.testing.assert_allclose(out["first_grad"], fd, rtol=1e-6, atol=1e-9)


def test_mass_spring_torch_parity():
    torch = _reference_torch()
    if lucid.get_default_device().type != "cpu":
        pytest.skip("PyTorch runs on the CPU")
    lo, to = mass_spring(lucid, epochs=10, steps=30), mass_spring(torch, epochs=10, steps=30)
    np.testing.assert_allclose(lo["losses"], to["losses"], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(lo["learned"], to["learned"], rtol=1e-4, atol=1e-6)


# ------------------------------------------------------------------ ddp-tutorial-series/single_gpu.py

def single_gpu(torch, workdir, total_epochs=3, save_every=2, batch_size=32, seed=0, shuffle=True):
    F = torch.nn.functional
    Dataset, DataLoader = torch.utils.data.Dataset, torch.utils.data.DataLoader
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)

    class MyTrainDataset(Dataset):
        def __init__(self, size):
            self.size = size
            self.data = [(torch.rand(20), torch.rand(1)) for _ in range(size)]

        def __len__(self):
            return self.size

        def __getitem__(self, index):
            return self.data[index]

    class Trainer:
        def __init__(self, model: torch.nn.Module, train_data: DataLoader, optimizer: torch.optim.Optimizer,
                     gpu_id: int, save_every: int) -> None:
            self.gpu_id = gpu_id
            self.model = model.to(gpu_id)
            self.train_data = train_data
            self.optimizer = optimizer
            self.save_every = save_every

        def _run_batch(self, source, targets):
            self.optimizer.zero_grad()
            output = self.model(source)
            loss = F.cross_entropy(output, targets)
            loss.backward()
            self.optimizer.step()
            losses.append(loss.item())

        def _run_epoch(self, epoch):
            b_sz = len(next(iter(self.train_data))[0])
            print(f"[GPU{self.gpu_id}] Epoch {epoch} | Batch size: {b_sz} | Steps: {len(self.train_data)}")
            for source, targets in self.train_data:
                source = source.to(self.gpu_id)
                targets = targets.to(self.gpu_id)
                self._run_batch(source, targets)

        def _save_checkpoint(self, epoch):
            ckp = self.model.state_dict()
            PATH = os.path.join(workdir, "checkpoint.pt")
            torch.save(ckp, PATH)
            print(f"Epoch {epoch} | Training checkpoint saved at {PATH}")

        def train(self, max_epochs: int):
            for epoch in range(max_epochs):
                self._run_epoch(epoch)
                if epoch % self.save_every == 0:
                    self._save_checkpoint(epoch)

    def load_train_objs():
        train_set = MyTrainDataset(256)  # load your dataset (2048 in the script)
        model = torch.nn.Linear(20, 1)  # load your model
        with torch.no_grad():  # the same start on both libraries
            model.weight.copy_(torch.tensor(rng.normal(scale=0.2, size=(1, 20)), dtype=torch.float32))
            model.bias.copy_(torch.tensor([0.1]))
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
        return train_set, model, optimizer

    def prepare_dataloader(dataset: Dataset, batch_size: int):
        return DataLoader(dataset, batch_size=batch_size, pin_memory=True, shuffle=shuffle)

    losses = []

    def main(device, total_epochs, save_every, batch_size):
        dataset, model, optimizer = load_train_objs()
        train_data = prepare_dataloader(dataset, batch_size)
        trainer = Trainer(model, train_data, optimizer, device, save_every)
        trainer.train(total_epochs)
        return trainer, dataset

    with redirect_stdout(io.StringIO()) as printed:
        trainer, dataset = main("cpu", total_epochs, save_every, batch_size)
    saved = torch.load(os.path.join(workdir, "checkpoint.pt"), weights_only=True)
    return dict(printed=printed.getvalue().splitlines(), losses=losses,
                saved={k: v.cpu().numpy() for k, v in saved.items()},
                final={k: v.detach().cpu().numpy() for k, v in trainer.model.state_dict().items()},
                data=[(x.cpu().numpy(), y.cpu().numpy()) for x, y in dataset.data])


def test_single_gpu_trainer(tmp_path):
    out = single_gpu(lucid, str(tmp_path))
    assert out["printed"][0] == "[GPUcpu] Epoch 0 | Batch size: 32 | Steps: 8"
    assert out["printed"][1] == f"Epoch 0 | Training checkpoint saved at {tmp_path / 'checkpoint.pt'}"
    assert [line.split(" |")[0] for line in out["printed"]] == ["[GPUcpu] Epoch 0", "Epoch 0", "[GPUcpu] Epoch 1",
                                                                "[GPUcpu] Epoch 2", "Epoch 2"]
    xs = np.stack([x for x, _ in out["data"]])
    assert xs.shape == (256, 20) and xs.min() >= 0.0 and xs.max() < 1.0 and xs.dtype == np.float32
    # cross_entropy with one class and a probability target: -y * log_softmax(z) = 0 for every z
    assert out["losses"] == [0.0] * 24 and len(out["losses"]) == 24
    np.testing.assert_array_equal(out["saved"]["weight"], out["final"]["weight"])


def test_single_gpu_trainer_torch_parity(tmp_path):
    torch = _reference_torch()
    _needs_cpu_default("PyTorch runs on the CPU")
    (tmp_path / "l").mkdir()
    (tmp_path / "t").mkdir()
    lo = single_gpu(lucid, str(tmp_path / "l"), shuffle=False)
    to = single_gpu(torch, str(tmp_path / "t"), shuffle=False)
    assert [line.replace(str(tmp_path / "l"), "") for line in lo["printed"]] == \
        [line.replace(str(tmp_path / "t"), "") for line in to["printed"]]
    assert lo["losses"] == to["losses"]
    for k in ("weight", "bias"):
        np.testing.assert_array_equal(lo["final"][k], to["final"][k])


# ------------------------------------------------------------------ distributed/minGPT-ddp/mingpt

class _FsspecStandIn:
    """``fsspec.open`` for local paths, as the example uses it (``.open()`` and ``with``)."""

    class _OpenFile:
        def __init__(self, path):
            self.path = path

        def open(self):
            return open(self.path, "rb")

        def __enter__(self):
            self._f = open(self.path, "rb")
            return self._f

        def __exit__(self, *exc):
            self._f.close()

    def open(self, path):
        if not os.path.exists(path):
            raise FileNotFoundError(path)
        return self._OpenFile(path)


def mingpt(torch, workdir, max_epochs=2, seed=0, dropout=0.1, shuffle=True):
    import math
    from collections import OrderedDict  # noqa: F401  (the Snapshot annotation)
    from dataclasses import asdict, dataclass
    from typing import Any, Dict, Optional
    nn, F = torch.nn, torch.nn.functional
    Dataset, DataLoader = torch.utils.data.Dataset, torch.utils.data.DataLoader
    DistributedSampler = torch.utils.data.distributed.DistributedSampler
    fsspec = _FsspecStandIn()
    torch.manual_seed(seed)

    # ---- model.py
    @dataclass
    class GPTConfig:
        model_type: str = 'gpt2'
        n_layer: int = None
        n_head: int = None
        n_embd: int = None
        vocab_size: int = 50257
        block_size: int = 1024
        embd_pdrop: float = 0.1
        resid_pdrop: float = 0.1
        attn_pdrop: float = 0.1

    @dataclass
    class OptimizerConfig:
        learning_rate: float = 3e-4
        weight_decay: float = 0.1

    class MultiheadAttentionLayer(nn.Module):
        def __init__(self, config, device="cpu", dtype=torch.float32):
            super().__init__()
            assert config.n_embd % config.n_head == 0
            self.resid_drop = nn.Dropout(config.resid_pdrop)
            self.c_proj = nn.Linear(config.n_embd, config.n_embd, device=device, dtype=dtype)
            self.register_buffer("mask", torch.tril(torch.ones(config.block_size, config.block_size))
                                 .view(1, 1, config.block_size, config.block_size))
            self.attn = torch.nn.MultiheadAttention(embed_dim=config.n_embd, num_heads=config.n_head,
                                                    dropout=config.attn_pdrop, batch_first=True, device=device,
                                                    dtype=dtype)

        def forward(self, x):
            _, seq_size, _ = x.size()
            y = self.attn(x, x, x, attn_mask=self.mask[0, 0, :seq_size, :seq_size])[0]
            y = self.resid_drop(self.c_proj(y))
            return y

    class Block(nn.Module):
        def __init__(self, config: GPTConfig):
            super().__init__()
            self.ln1 = nn.LayerNorm(config.n_embd)
            self.ln2 = nn.LayerNorm(config.n_embd)
            self.attn = MultiheadAttentionLayer(config)
            self.mlp = nn.Sequential(nn.Linear(config.n_embd, 4 * config.n_embd), nn.GELU(),
                                     nn.Linear(4 * config.n_embd, config.n_embd), nn.Dropout(config.resid_pdrop))

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            x = x + self.mlp(self.ln2(x))
            return x

    class EmbeddingStem(nn.Module):
        def __init__(self, config: GPTConfig, device="cpu", dtype=torch.float32):
            super().__init__()
            self.tok_emb = nn.Embedding(config.vocab_size, config.n_embd, device=device, dtype=dtype)
            self.pos_emb = nn.Parameter(torch.zeros(1, config.block_size, config.n_embd, device=device, dtype=dtype))
            self.drop = nn.Dropout(config.embd_pdrop)
            self.block_size = config.block_size

        def reset_parameters(self):
            self.tok_emb.reset_parameters()

        def forward(self, idx):
            b, t = idx.size()
            assert t <= self.block_size, f"Cannot forward sequence of length {t}, block size is only {self.block_size}"
            token_embeddings = self.tok_emb(idx)
            position_embeddings = self.pos_emb[:, :t, :]
            return self.drop(token_embeddings + position_embeddings)

    class GPT(nn.Module):
        def __init__(self, config: GPTConfig):
            super().__init__()
            self.block_size = config.block_size
            config = self._set_model_config(config)
            self.emb_stem = EmbeddingStem(config)
            self.blocks = nn.Sequential(*[Block(config) for _ in range(config.n_layer)])
            self.ln_f = nn.LayerNorm(config.n_embd)
            self.head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
            self.apply(self._init_weights)
            for pn, p in self.named_parameters():
                if pn.endswith('c_proj.weight'):
                    p.data.normal_(mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))
            n_params = sum(p.numel() for p in self.blocks.parameters())
            print("number of parameters: %.2fM" % (n_params / 1e6,))
            self.n_params = n_params

        def _set_model_config(self, config):
            type_given = config.model_type is not None
            params_given = all([config.n_layer is not None, config.n_head is not None, config.n_embd is not None])
            if type_given and not params_given:
                config.__dict__.update({
                    'gpt-nano': dict(n_layer=3, n_head=3, n_embd=48),
                }[config.model_type])
            return config

        def _init_weights(self, module):
            if isinstance(module, (nn.Linear, nn.Embedding)):
                module.weight.data.normal_(mean=0.0, std=0.02)
                if isinstance(module, nn.Linear) and module.bias is not None:
                    module.bias.data.zero_()
            elif isinstance(module, nn.LayerNorm):
                module.bias.data.zero_()
                module.weight.data.fill_(1.0)

        def forward(self, idx, targets=None):
            x = self.emb_stem(idx)
            x = self.blocks(x)
            x = self.ln_f(x)
            logits = self.head(x)
            loss = None
            if targets is not None:
                loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
            return logits, loss

        @torch.no_grad()
        def generate(self, idx, max_new_tokens, temperature=1.0, do_sample=False, top_k=None):
            for _ in range(max_new_tokens):
                idx_cond = idx if idx.size(1) <= self.block_size else idx[:, -self.block_size:]
                logits, _ = self(idx_cond)
                logits = logits[:, -1, :] / temperature
                if top_k is not None:
                    v, _ = torch.topk(logits, top_k)
                    logits[logits < v[:, [-1]]] = -float('Inf')
                probs = F.softmax(logits, dim=-1)
                if do_sample:
                    idx_next = torch.multinomial(probs, num_samples=1)
                else:
                    _, idx_next = torch.topk(probs, k=1, dim=-1)
                idx = torch.cat((idx, idx_next), dim=1)
            return idx

    def create_optimizer(model: torch.nn.Module, opt_config: OptimizerConfig):
        decay = set()
        no_decay = set()
        whitelist_weight_modules = (torch.nn.Linear, )
        blacklist_weight_modules = (torch.nn.LayerNorm, torch.nn.Embedding)
        for mn, m in model.named_modules():
            for pn, p in m.named_parameters():
                fpn = '%s.%s' % (mn, pn) if mn else pn  # full param name
                if pn.endswith('bias'):
                    no_decay.add(fpn)
                elif pn.endswith('weight') and isinstance(m, whitelist_weight_modules):
                    decay.add(fpn)
                elif pn.endswith('in_proj_weight'):
                    decay.add(fpn)
                elif pn.endswith('weight') and isinstance(m, blacklist_weight_modules):
                    no_decay.add(fpn)
                elif pn.endswith('pos_emb'):
                    no_decay.add(fpn)
        param_dict = {pn: p for pn, p in model.named_parameters()}
        inter_params = decay & no_decay
        union_params = decay | no_decay
        assert len(inter_params) == 0, "parameters %s made it into both decay/no_decay sets!" % (str(inter_params), )
        assert len(param_dict.keys() - union_params) == 0, \
            "parameters %s were not separated into either decay/no_decay set!" \
            % (str(param_dict.keys() - union_params), )
        optim_groups = [
            {"params": [param_dict[pn] for pn in sorted(list(decay))], "weight_decay": opt_config.weight_decay},
            {"params": [param_dict[pn] for pn in sorted(list(no_decay))], "weight_decay": 0.0},
        ]
        optimizer = torch.optim.AdamW(optim_groups, lr=opt_config.learning_rate, betas=(0.9, 0.95))
        return optimizer, sorted(decay), sorted(no_decay)

    # ---- char_dataset.py
    @dataclass
    class DataConfig:
        path: str = None
        block_size: int = None
        train_split: float = None
        truncate: float = 1.0

    class CharDataset(Dataset):
        def __init__(self, data_cfg: DataConfig):
            data = fsspec.open(data_cfg.path).open().read().decode('utf-8')
            data = data[: int(len(data) * data_cfg.truncate)]
            chars = sorted(list(set(data)))
            data_size, vocab_size = len(data), len(chars)
            print('Data has %d characters, %d unique.' % (data_size, vocab_size))
            self.stoi = {ch: i for i, ch in enumerate(chars)}
            self.itos = {i: ch for i, ch in enumerate(chars)}
            self.block_size = data_cfg.block_size
            self.vocab_size = vocab_size
            self.data = data

        def __len__(self):
            return len(self.data) - self.block_size

        def __getitem__(self, idx):
            chunk = self.data[idx:idx + self.block_size + 1]
            dix = [self.stoi[s] for s in chunk]
            x = torch.tensor(dix[:-1], dtype=torch.long)
            y = torch.tensor(dix[1:], dtype=torch.long)
            return x, y

    # ---- trainer.py
    @dataclass
    class TrainerConfig:
        max_epochs: int = None
        batch_size: int = None
        data_loader_workers: int = None
        grad_norm_clip: float = None
        snapshot_path: Optional[str] = None
        save_every: int = None
        use_amp: bool = None

    @dataclass
    class Snapshot:
        model_state: 'OrderedDict[str, torch.Tensor]'
        optimizer_state: Dict[str, Any]
        finished_epoch: int

    batch_losses = []

    class Trainer:
        def _prepare_dataloader(self, dataset: Dataset):
            return DataLoader(dataset, batch_size=self.config.batch_size, pin_memory=True, shuffle=False,
                              num_workers=self.config.data_loader_workers, sampler=DistributedSampler(dataset))

        def _load_snapshot(self):
            try:
                snapshot = fsspec.open(self.config.snapshot_path)
                with snapshot as f:
                    snapshot_data = torch.load(f, map_location="cpu")
            except FileNotFoundError:
                print("Snapshot not found. Training model from scratch")
                return
            snapshot = Snapshot(**snapshot_data)
            self.model.load_state_dict(snapshot.model_state)
            self.optimizer.load_state_dict(snapshot.optimizer_state)
            self.epochs_run = snapshot.finished_epoch
            print(f"Resuming training from snapshot at Epoch {self.epochs_run}")

        def _run_batch(self, source, targets, train: bool = True) -> float:
            with torch.set_grad_enabled(train), torch.amp.autocast(device_type="cuda", dtype=torch.float16,
                                                                   enabled=(self.config.use_amp)):
                _, loss = self.model(source, targets)
            if train:
                self.optimizer.zero_grad(set_to_none=True)
                if self.config.use_amp:
                    self.scaler.scale(loss).backward()
                    torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.grad_norm_clip)
                    self.scaler.step(self.optimizer)
                    self.scaler.update()
                else:
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.grad_norm_clip)
                    self.optimizer.step()
            batch_losses.append((train, loss.item()))
            return loss.item()

        def _run_epoch(self, epoch: int, dataloader: DataLoader, train: bool = True):
            dataloader.sampler.set_epoch(epoch)
            for iter, (source, targets) in enumerate(dataloader):
                step_type = "Train" if train else "Eval"
                source = source.to(self.local_rank)
                targets = targets.to(self.local_rank)
                batch_loss = self._run_batch(source, targets, train)
                if iter % 100 == 0:
                    print(f"[GPU{self.global_rank}] Epoch {epoch} | Iter {iter} | {step_type} Loss {batch_loss:.5f}")

        def _save_snapshot(self, epoch):
            model = self.model
            raw_model = model.module if hasattr(model, "module") else model
            snapshot = Snapshot(model_state=raw_model.state_dict(), optimizer_state=self.optimizer.state_dict(),
                                finished_epoch=epoch)
            snapshot = asdict(snapshot)
            torch.save(snapshot, self.config.snapshot_path)
            print(f"Snapshot saved at epoch {epoch}")

        def train(self):
            for epoch in range(self.epochs_run, self.config.max_epochs):
                epoch += 1
                self._run_epoch(epoch, self.train_loader, train=True)
                if self.local_rank == 0 and epoch % self.save_every == 0:
                    self._save_snapshot(epoch)
                if self.test_loader:
                    self._run_epoch(epoch, self.test_loader, train=False)

    class OneProcessTrainer(Trainer):
        """``Trainer.__init__`` without torchrun's environment, DDP and CUDA: one replica on the CPU."""

        def __init__(self, trainer_config: TrainerConfig, model, optimizer, train_dataset, test_dataset=None):
            self.config = trainer_config
            # the tensors' device: torchrun's LOCAL_RANK is a CUDA ordinal; ``train`` then leaves
            # the snapshot to rank 0, which the caller plays by calling ``_save_snapshot``
            self.local_rank, self.global_rank = str(torch.empty(0).device), 0
            self.train_dataset = train_dataset
            self.train_loader = self._prepare_dataloader(train_dataset)
            self.test_loader = self._prepare_dataloader(test_dataset) if test_dataset else None
            self.epochs_run = 0
            self.model = model.to(self.local_rank)
            self.optimizer = optimizer
            self.save_every = self.config.save_every
            if self.config.snapshot_path is None:
                self.config.snapshot_path = "snapshot.pt"
            self._load_snapshot()

        def _prepare_dataloader(self, dataset: Dataset):
            if shuffle:
                return DataLoader(dataset, batch_size=self.config.batch_size, pin_memory=True, shuffle=False,
                                  num_workers=self.config.data_loader_workers,
                                  sampler=DistributedSampler(dataset, num_replicas=1, rank=0))
            return DataLoader(dataset, batch_size=self.config.batch_size, shuffle=False,  # the parity runs
                              sampler=DistributedSampler(dataset, num_replicas=1, rank=0, shuffle=False))

    # ---- main.py, shrunk: a small text, a tiny GPT, two epochs, the tensor "device" the CPU
    text_path = os.path.join(workdir, "input.txt")
    with open(text_path, "w") as f:
        f.write("first citizen: we are accounted poor citizens, the patricians good.\n" * 6)
    with redirect_stdout(io.StringIO()) as printed:
        data_cfg = DataConfig(path=text_path, block_size=8, train_split=0.9, truncate=1.0)
        dataset = CharDataset(data_cfg)
        train_len = int(len(dataset) * data_cfg.train_split)
        train_set, test_set = (torch.utils.data.Subset(dataset, range(train_len)),
                               torch.utils.data.Subset(dataset, range(train_len, len(dataset))))
        gpt_cfg = GPTConfig(model_type=None, n_layer=2, n_head=2, n_embd=16, vocab_size=dataset.vocab_size,
                            block_size=dataset.block_size, embd_pdrop=dropout, resid_pdrop=dropout, attn_pdrop=dropout)
        model = GPT(gpt_cfg)
        init = {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}
        _set_params(torch, model, seed, scale=0.1)
        optimizer, decay, no_decay = create_optimizer(model, OptimizerConfig(learning_rate=2e-2, weight_decay=0.1))
        snapshot_path = os.path.join(workdir, "snapshot.pt")
        train_cfg = TrainerConfig(max_epochs=max_epochs, batch_size=32, data_loader_workers=0, grad_norm_clip=1.0,
                                  snapshot_path=snapshot_path, save_every=1, use_amp=False)
        trainer = OneProcessTrainer(train_cfg, model, optimizer, train_set, test_set)
        trainer.train()
        trainer._save_snapshot(max_epochs)
        # a second run resumes from the snapshot: nothing is left to train
        resumed_model = GPT(gpt_cfg)
        resumed_opt, _, _ = create_optimizer(resumed_model, OptimizerConfig(learning_rate=2e-2, weight_decay=0.1))
        resumed = OneProcessTrainer(TrainerConfig(**{**asdict(train_cfg), "max_epochs": max_epochs}), resumed_model,
                                    resumed_opt, train_set, test_set)
        model.eval()
        context = "first citizen"
        x = torch.tensor([dataset.stoi[s] for s in context], dtype=torch.long)[None, ...]
        y = model.generate(x, 12, top_k=3)[0]
        completion = ''.join([dataset.itos[int(i)] for i in y])
    return dict(printed=printed.getvalue().splitlines(), losses=batch_losses, decay=decay, no_decay=no_decay,
                n_params=model.n_params, init=init, completion=completion, resumed_epochs=resumed.epochs_run,
                same_weights=all(np.array_equal(a.detach().cpu().numpy(), b.detach().cpu().numpy())
                                 for a, b in zip(model.parameters(), resumed_model.parameters())),
                groups=[(g["weight_decay"], len(g["params"])) for g in optimizer.param_groups],
                vocab=dataset.vocab_size, first_item=[t.tolist() for t in dataset[0]], text=dataset.data)


def test_mingpt(tmp_path):
    out = mingpt(lucid, str(tmp_path))
    E, L = 16, 2
    per_block = 2 * 2 * E + (3 * E * E + 3 * E) + (E * E + E) + (E * E + E) + (4 * E * E + 4 * E) + (4 * E * E + E)
    assert out["n_params"] == L * per_block
    assert out["printed"][0] == "Data has %d characters, %d unique." % (6 * 68, out["vocab"])
    assert out["printed"][1] == "number of parameters: %.2fM" % (L * per_block / 1e6)
    # the GPT-2 init: LayerNorms at (1, 0), biases zero, N(0, 0.02) weights, c_proj at 0.02 / sqrt(2 L)
    init = out["init"]
    assert np.all(init["blocks.0.ln1.weight"] == 1) and np.all(init["blocks.1.mlp.0.bias"] == 0)
    assert 0.01 < init["head.weight"].std() < 0.03 and np.all(init["emb_stem.pos_emb"] == 0)
    c_proj = np.concatenate([init[f"blocks.{i}.attn.c_proj.weight"].ravel() for i in range(L)])
    assert 0.005 < c_proj.std() < 0.015
    # create_optimizer: Linear and in-projection weights decay; biases, LayerNorm, embeddings do not
    assert "blocks.0.attn.attn.in_proj_weight" in out["decay"] and "head.weight" in out["decay"]
    assert "emb_stem.pos_emb" in out["no_decay"] and "emb_stem.tok_emb.weight" in out["no_decay"]
    assert "blocks.0.attn.attn.out_proj.weight" in out["decay"] and not set(out["decay"]) & set(out["no_decay"])
    assert out["groups"] == [(0.1, len(out["decay"])), (0.0, len(out["no_decay"]))]
    # CharDataset: next-character pairs
    x, y = out["first_item"]
    assert x[1:] == y[:-1] and len(x) == 8
    # training: the train loss falls; the snapshot is written each epoch and resumed
    train = [loss for is_train, loss in out["losses"] if is_train]
    assert len(train) == 2 * 12 and np.mean(train[-4:]) < 0.8 * np.mean(train[:4])
    assert "Snapshot saved at epoch 2" in out["printed"] and out["resumed_epochs"] == 2
    assert out["printed"][2] == "Snapshot not found. Training model from scratch"
    assert "Resuming training from snapshot at Epoch 2" in out["printed"] and out["same_weights"]
    assert out["completion"].startswith("first citizen") and len(out["completion"]) == 13 + 12


def test_mingpt_torch_parity(tmp_path):
    torch = _reference_torch()
    _needs_cpu_default("PyTorch runs on the CPU")
    (tmp_path / "l").mkdir()
    (tmp_path / "t").mkdir()
    lo = mingpt(lucid, str(tmp_path / "l"), max_epochs=1, dropout=0.0, shuffle=False)
    to = mingpt(torch, str(tmp_path / "t"), max_epochs=1, dropout=0.0, shuffle=False)
    assert lo["decay"] == to["decay"] and lo["no_decay"] == to["no_decay"] and lo["n_params"] == to["n_params"]
    np.testing.assert_allclose([v for _, v in lo["losses"]], [v for _, v in to["losses"]], rtol=2e-4, atol=1e-5)
    assert lo["completion"] == to["completion"]


# ------------------------------------------------------------------ How to use TensorBoard with PyTorch

def _tb_reader():
    path = os.path.join(os.path.dirname(__file__), "..", "data", "test_tensorboard.py")
    spec = importlib.util.spec_from_file_location("_tb_reader_for_batch9", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tensorboard_recipe(torch, log_dir, seed=0):
    SummaryWriter = torch.utils.tensorboard.SummaryWriter
    torch.manual_seed(seed)
    writer = SummaryWriter(log_dir)
    x = torch.arange(-5, 5, 0.1).view(-1, 1)
    y = -5 * x + 0.1 * torch.tensor(np.random.default_rng(seed).normal(size=tuple(x.size())), dtype=torch.float32)
    model = torch.nn.Linear(1, 1)
    with torch.no_grad():
        model.weight.fill_(0.5)
        model.bias.fill_(-0.25)
    criterion = torch.nn.MSELoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []

    def train_model(iter):
        for epoch in range(iter):
            y1 = model(x)
            loss = criterion(y1, y)
            writer.add_scalar("Loss/train", loss, epoch)
            losses.append(loss.item())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

    train_model(10)
    writer.flush()
    writer.close()
    return dict(losses=losses, x=x.cpu().numpy(), y=y.cpu().numpy())


def test_tensorboard_recipe(tmp_path):
    import lucid.utils.tensorboard  # noqa: F401
    reader = _tb_reader()
    out = tensorboard_recipe(lucid, str(tmp_path))
    x, y = out["x"].astype(np.float64), out["y"].astype(np.float64)
    assert x.shape == (100, 1)
    w, b, expected = 0.5, -0.25, []
    for _ in range(10):  # gradient descent on the mean squared error, by hand
        r = w * x + b - y
        expected.append((r ** 2).mean())
        w, b = w - 0.1 * 2 * (r * x).mean(), b - 0.1 * 2 * r.mean()
    np.testing.assert_allclose(out["losses"], expected, rtol=1e-4)
    scalars = []
    for event in reader.read_events(tmp_path):
        for tag, value in reader.values(event):
            scalars.append((tag, event.int(2) if 2 in event else 0, value.float(2)))
    assert [(t, s) for t, s, _ in scalars] == [("Loss/train", e) for e in range(10)]
    np.testing.assert_allclose([v for _, _, v in scalars], out["losses"], rtol=1e-6)
