"""PyTorch tutorials run on Lucid, second batch, training: "Build the Neural Network" and
"Optimizing Model Parameters" (FashionMNIST replaced by random tensors of its shapes),
"Visualizing Models, Data, and Training with TensorBoard" (a ``SummaryWriter`` in a temporary
directory, synthetic images) and the model of "Text classification with the torchtext library"
(``nn.EmbeddingBag`` with offsets over a synthetic vocabulary, ``clip_grad_norm_``, ``StepLR``).
"""
import os

import numpy as np
import pytest

import lucid as torch
import lucid.nn as nn
import lucid.nn.functional as F  # noqa: F401
import lucid.optim as optim  # noqa: F401
from lucid.utils.data import DataLoader, TensorDataset


class NeuralNetwork(nn.Module):
    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()
        self.linear_relu_stack = nn.Sequential(
            nn.Linear(28 * 28, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))

    def forward(self, x):
        x = self.flatten(x)
        return self.linear_relu_stack(x)


def _fashion(n, seed):
    """Random 'images' whose class is readable from them (a learnable task of FashionMNIST's shapes)."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 10, (n,), generator=g)
    x = torch.rand(n, 1, 28, 28, generator=g) * 0.2
    x[torch.arange(n), 0, y, :] += 2.0  # row y lights up
    return x, y


def test_build_the_neural_network():
    torch.manual_seed(0)
    device = torch.accelerator.current_accelerator().type if torch.accelerator.is_available() else "cpu"
    model = NeuralNetwork().to(device)
    assert "(linear_relu_stack): Sequential(" in repr(model)
    X = torch.rand(1, 28, 28, device=device)
    logits = model(X)
    pred_probab = nn.Softmax(dim=1)(logits)
    y_pred = pred_probab.argmax(1)
    assert logits.shape == (1, 10) and abs(pred_probab.sum().item() - 1) < 1e-6 and y_pred.shape == (1,)

    input_image = torch.rand(3, 28, 28)
    flat_image = nn.Flatten()(input_image)
    assert flat_image.shape == (3, 784)
    layer1 = nn.Linear(in_features=28 * 28, out_features=20)
    hidden1 = layer1(flat_image)
    assert hidden1.shape == (3, 20)
    relu = nn.ReLU()(hidden1)
    assert torch.equal(relu, hidden1.clamp(min=0))
    seq_modules = nn.Sequential(nn.Flatten(), layer1, nn.ReLU(), nn.Linear(20, 10))
    logits = seq_modules(input_image)
    probs = nn.Softmax(dim=1)(logits)
    np.testing.assert_allclose(probs.sum(1).numpy(), np.ones(3), rtol=1e-6)
    params = list(model.named_parameters())
    assert [(n, tuple(p.size())) for n, p in params] == [
        ("linear_relu_stack.0.weight", (512, 784)), ("linear_relu_stack.0.bias", (512,)),
        ("linear_relu_stack.2.weight", (512, 512)), ("linear_relu_stack.2.bias", (512,)),
        ("linear_relu_stack.4.weight", (10, 512)), ("linear_relu_stack.4.bias", (10,))]
    assert sum(p.numel() for p in model.parameters()) == 669706


def _loops(torch, model, train_x, train_y, test_x, test_y, epochs=5):
    """The tutorial's train_loop/test_loop, returning (train losses, test accuracies)."""
    loader = DataLoader(TensorDataset(train_x, train_y), batch_size=64) if torch is not None else None
    loss_fn = nn.CrossEntropyLoss()
    optimizer = optim.SGD(model.parameters(), lr=1e-1)
    losses, accs = [], []
    for _ in range(epochs):
        model.train()
        for X, y in loader:
            loss = loss_fn(model(X), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
        model.eval()
        with torch.no_grad():
            pred = model(test_x)
            accs.append((pred.argmax(1) == test_y).float().mean().item())
    return losses, accs


def test_optimizing_model_parameters():
    torch.manual_seed(0)
    train_x, train_y = _fashion(512, 1)
    test_x, test_y = _fashion(128, 2)
    model = NeuralNetwork()
    losses, accs = _loops(torch, model, train_x, train_y, test_x, test_y)
    assert np.mean(losses[-4:]) < 0.5 * np.mean(losses[:4])
    assert accs[-1] > 0.8  # chance is 0.1


def test_tensorboard_tutorial(tmp_path):
    from lucid.utils.tensorboard import SummaryWriter

    torch.manual_seed(0)
    classes = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Boot")

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 6, 5)
            self.pool = nn.MaxPool2d(2, 2)
            self.conv2 = nn.Conv2d(6, 16, 5)
            self.fc1 = nn.Linear(16 * 4 * 4, 120)
            self.fc2 = nn.Linear(120, 84)
            self.fc3 = nn.Linear(84, 10)

        def forward(self, x):
            x = self.pool(F.relu(self.conv1(x)))
            x = self.pool(F.relu(self.conv2(x)))
            x = x.view(-1, 16 * 4 * 4)
            return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))

    net = Net()
    criterion = nn.CrossEntropyLoss()
    optimizer = optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    writer = SummaryWriter(str(tmp_path / "fashion_mnist_experiment_1"))
    x, y = _fashion(64, 3)
    img_grid = x[:4].expand(4, 3, 28, 28)  # torchvision.utils.make_grid's job: a 3-channel batch
    writer.add_image("four_fashion_mnist_images", img_grid[0])
    writer.add_images("batch", img_grid)
    writer.add_graph(net, x[:4])
    features = x[:16].view(-1, 28 * 28)
    writer.add_embedding(features, metadata=[classes[int(c)] for c in y[:16]], label_img=x[:16])
    loader = DataLoader(TensorDataset(x, y), batch_size=4, shuffle=True)
    running_loss, logged = 0.0, []
    for i, (inputs, labels) in enumerate(loader):
        optimizer.zero_grad()
        loss = criterion(net(inputs), labels)
        loss.backward()
        optimizer.step()
        running_loss += loss.item()
        if i % 4 == 3:
            writer.add_scalar("training loss", running_loss / 4, i)
            logged.append(running_loss / 4)
            running_loss = 0.0
    with torch.no_grad():
        probs = F.softmax(net(x), dim=1)
    for k in range(2):  # the tutorial's add_pr_curve_tensorboard
        writer.add_pr_curve(classes[k], y == k, probs[:, k], global_step=0)
        writer.add_histogram(f"class_{classes[k]}_probs", probs[:, k], 0)
    writer.add_hparams({"lr": 0.01, "momentum": 0.9}, {"final_loss": logged[-1]})
    writer.close()
    files = [f for _, _, fs in os.walk(tmp_path) for f in fs]
    assert any(f.startswith("events.out.tfevents") for f in files)
    assert len(logged) == 4 and all(np.isfinite(logged))
    assert any(f == "projector_config.pbtxt" for f in files)


def test_text_classification_model():
    torch.manual_seed(0)
    vocab_size, emsize, num_class = 50, 16, 4

    class TextClassificationModel(nn.Module):
        def __init__(self, vocab_size, embed_dim, num_class):
            super().__init__()
            self.embedding = nn.EmbeddingBag(vocab_size, embed_dim, sparse=False)
            self.fc = nn.Linear(embed_dim, num_class)
            self.init_weights()

        def init_weights(self):
            initrange = 0.5
            self.embedding.weight.data.uniform_(-initrange, initrange)
            self.fc.weight.data.uniform_(-initrange, initrange)
            self.fc.bias.data.zero_()

        def forward(self, text, offsets):
            return self.fc(self.embedding(text, offsets))

    # synthetic "news": the label's own 10 words dominate each text
    rng = np.random.default_rng(0)
    samples = []
    for _ in range(256):
        label = int(rng.integers(num_class))
        n = int(rng.integers(3, 9))
        words = [int(w) for w in rng.integers(label * 10, label * 10 + 10, n)] + [int(rng.integers(40, 50))]
        samples.append((label, words))

    def collate_batch(batch):
        label_list, text_list, offsets = [], [], [0]
        for _label, _text in batch:
            label_list.append(_label)
            processed_text = torch.tensor(_text, dtype=torch.int64)
            text_list.append(processed_text)
            offsets.append(processed_text.size(0))
        label_list = torch.tensor(label_list, dtype=torch.int64)
        offsets = torch.tensor(offsets[:-1]).cumsum(dim=0)
        text_list = torch.cat(text_list)
        return label_list, text_list, offsets

    model = TextClassificationModel(vocab_size, emsize, num_class)
    label, text, offsets = collate_batch(samples[:2])
    assert offsets.tolist() == [0, len(samples[0][1])]
    bag0 = model.embedding.weight[torch.tensor(samples[0][1])].mean(0)
    assert torch.allclose(model.embedding(text, offsets)[0], bag0, atol=1e-6)

    criterion = torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=5.0)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1.0, gamma=0.1)
    loader = DataLoader(samples, batch_size=16, shuffle=True, collate_fn=collate_batch)
    accs, lrs = [], []
    for epoch in range(3):
        model.train()
        for label, text, offsets in loader:
            optimizer.zero_grad()
            loss = criterion(model(text, offsets), label)
            loss.backward()
            total = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
            assert total.item() > 0
            norm = sum(p.grad.pow(2).sum() for p in model.parameters()).sqrt().item()
            assert norm <= 0.1 + 1e-5
            optimizer.step()
        model.eval()
        with torch.no_grad():
            label, text, offsets = collate_batch(samples)
            accs.append((model(text, offsets).argmax(1) == label).float().mean().item())
        lrs.append(scheduler.get_last_lr()[0])
        scheduler.step()
    assert lrs == pytest.approx([5.0, 0.5, 0.05])
    assert accs[-1] > 0.9
