"""Third-party PyTorch code run on Lucid (``import lucid as torch``), thirteenth batch: Ben Trevett's
bentrevett/pytorch-sentiment-analysis and bentrevett/pytorch-image-classification (his seq2seq
notebooks are in ``test_tutorials_batch13_thirdparty.py``).

- Sentiment analysis: notebook 2's packed bidirectional ``LSTM`` classifier (``BCEWithLogitsLoss``,
  ``binary_accuracy``, the ``<unk>``/``<pad>`` embedding rows zeroed through ``weight.data[...]``,
  ``predict_sentiment``), notebook 3's FastText (``generate_bigrams``, ``F.avg_pool2d`` over the
  sentence), notebooks 4 and 5's CNN with several filter sizes (``Conv2d`` and ``Conv1d`` versions,
  ``F.max_pool1d(conv, conv.shape[2])``, ``categorical_accuracy``) and the ``nn.EmbeddingBag`` NBOW of
  ``experimental/a_nbow-bag`` with its ``Collator`` (offsets from ``torch.cumsum``).
- Image classification: ``MLP``/``LeNet`` with ``calculate_accuracy``, the learning-rate finder
  (``LRFinder`` with an ``ExponentialLR(_LRScheduler)`` subclass, the ``IteratorWrapper``,
  ``torch.save``/``torch.load`` of the initial state), AlexNet's ``initialize_parameters``
  (``kaiming_normal_``, ``xavier_normal_`` with ``calculate_gain('relu')``), ResNet's
  ``calculate_topk_accuracy``, VGG's ``get_vgg_layers`` with discriminative learning rates under
  ``OneCycleLR(max_lr=[...])`` and ResNet's ``BasicBlock``/``Bottleneck``/``ResNetConfig`` with the
  in-place residual ``x += i`` (gradchecked in float64).

IMDB and MNIST/CIFAR are replaced by small synthetic reviews and images (the label is a function of
the input); sizes and epochs are shrunk (learning rates raised to fit; VGG's 4096-wide classifier and
ResNet's channels are narrow); ``device`` is the default device. The assertions without PyTorch
recompute in NumPy (BCE with logits, the EmbeddingBag means, top-k accuracy, the OneCycle learning
rates and momenta, the exponential schedule), check the initialisations' statistics and that the
Conv2d and Conv1d CNNs agree, and require losses to fall by a stated margin; the parity tests run the
same text on PyTorch from the same NumPy-drawn weights with dropout off.
"""
import math
from collections import namedtuple
from importlib import import_module

import numpy as np
import pytest

import lucid
import lucid.nn  # noqa: F401
import lucid.nn.functional  # noqa: F401
import lucid.nn.utils.rnn  # noqa: F401
import lucid.optim  # noqa: F401
import lucid.optim.lr_scheduler  # noqa: F401
import lucid.utils.data  # noqa: F401
from test_tutorials_batch13_thirdparty import _reference_torch, _set_params


# ----------------------------------------------------- pytorch-sentiment-analysis --------------------
def _reviews(n, seed, vocab=20):
    """'Reviews' of words 2..vocab-1: positive when words >= 11 outnumber the rest."""
    rng = np.random.RandomState(seed)
    data = []
    for _ in range(n):
        words = list(rng.randint(2, vocab, rng.randint(4, 9)))
        data.append((words, float(sum(w >= 11 for w in words) > len(words) / 2)))
    return data


def sentiment_rnn_page(torch, weights_seed=None, dropout=0.2, epochs=4, lr=0.04):
    """Notebook 2 ("Upgraded Sentiment Analysis"): packed bidirectional LSTM, BCEWithLogitsLoss."""
    nn, optim = torch.nn, torch.optim
    device = torch.empty(0).device  # the notebook: cuda if available else cpu

    class RNN(nn.Module):
        def __init__(self, vocab_size, embedding_dim, hidden_dim, output_dim, n_layers,
                     bidirectional, dropout, pad_idx):
            super().__init__()
            self.embedding = nn.Embedding(vocab_size, embedding_dim, padding_idx = pad_idx)
            self.rnn = nn.LSTM(embedding_dim,
                               hidden_dim,
                               num_layers=n_layers,
                               bidirectional=bidirectional,
                               dropout=dropout)
            self.fc = nn.Linear(hidden_dim * 2, output_dim)
            self.dropout = nn.Dropout(dropout)

        def forward(self, text, text_lengths):
            embedded = self.dropout(self.embedding(text))
            #pack sequence
            # lengths need to be on CPU!
            packed_embedded = nn.utils.rnn.pack_padded_sequence(embedded, text_lengths.to('cpu'))
            packed_output, (hidden, cell) = self.rnn(packed_embedded)
            #unpack sequence
            output, output_lengths = nn.utils.rnn.pad_packed_sequence(packed_output)
            hidden = self.dropout(torch.cat((hidden[-2,:,:], hidden[-1,:,:]), dim = 1))
            return self.fc(hidden)

    torch.manual_seed(1234)
    INPUT_DIM, EMBEDDING_DIM, HIDDEN_DIM, OUTPUT_DIM = 20, 8, 8, 1
    PAD_IDX, UNK_IDX = 1, 0
    model = RNN(INPUT_DIM, EMBEDDING_DIM, HIDDEN_DIM, OUTPUT_DIM, 2, True, dropout, PAD_IDX)
    if weights_seed is not None:
        _set_params(torch, model, weights_seed, scale=0.3)
    model.embedding.weight.data[UNK_IDX] = torch.zeros(EMBEDDING_DIM)
    model.embedding.weight.data[PAD_IDX] = torch.zeros(EMBEDDING_DIM)
    optimizer = optim.Adam(model.parameters(), lr=lr)
    criterion = nn.BCEWithLogitsLoss()
    model = model.to(device)
    criterion = criterion.to(device)

    def binary_accuracy(preds, y):
        rounded_preds = torch.round(torch.sigmoid(preds))
        correct = (rounded_preds == y).float() #convert into float for division
        acc = correct.sum() / len(correct)
        return acc

    def batches(data):
        out = []
        for i in range(0, len(data), 8):
            chunk = sorted(data[i:i + 8], key=lambda d: -len(d[0]))  # sort_within_batch = True
            L = len(chunk[0][0])
            text = np.array([w + [PAD_IDX] * (L - len(w)) for w, _ in chunk]).T
            out.append((torch.tensor(text).to(device), torch.tensor([len(w) for w, _ in chunk]),
                        torch.tensor([y for _, y in chunk], dtype=torch.float32).to(device)))
        return out

    train_iterator = batches(_reviews(32, 0))
    out = dict(loss=[], acc=[])
    for epoch in range(epochs):
        epoch_loss = epoch_acc = 0
        model.train()
        for text, text_lengths, label in train_iterator:
            optimizer.zero_grad()
            predictions = model(text, text_lengths).squeeze(1)
            loss = criterion(predictions, label)
            acc = binary_accuracy(predictions, label)
            if "first" not in out:
                out["first"] = (predictions.detach().cpu().numpy(), label.cpu().numpy(), loss.item(), acc.item())
            loss.backward()
            optimizer.step()
            epoch_loss += loss.item()
            epoch_acc += acc.item()
        out["loss"].append(epoch_loss / len(train_iterator))
        out["acc"].append(epoch_acc / len(train_iterator))
    def predict_sentiment(model, indexed):
        model.eval()
        length = [len(indexed)]
        tensor = torch.LongTensor(indexed).to(device)
        tensor = tensor.unsqueeze(1)
        length_tensor = torch.LongTensor(length)
        prediction = torch.sigmoid(model(tensor, length_tensor))
        return prediction.item()

    text, text_lengths, label = train_iterator[0]
    model.eval()
    with torch.no_grad():
        batch_pred = torch.sigmoid(model(text, text_lengths)).squeeze(1).cpu().numpy()
    out["alone"] = [(predict_sentiment(model, text[:n, i].tolist()), float(batch_pred[i]))
                    for i, n in enumerate(text_lengths.tolist())]
    out["pad_row"] = model.embedding.weight[PAD_IDX].detach().cpu().numpy()
    out["params"] = [p.detach().cpu().numpy().copy() for p in model.parameters()]
    return out


def test_sentiment_packed_bidirectional_lstm():
    out = sentiment_rnn_page(lucid)
    x, y, loss, acc = out["first"]
    x64 = x.astype(np.float64)
    want = np.mean(np.maximum(x64, 0) - x64 * y + np.log1p(np.exp(-np.abs(x64))))
    assert loss == pytest.approx(want, rel=1e-5) and acc == np.mean((x > 0) == (y == 1))
    assert (out["pad_row"] == 0).all()  # padding_idx: zeroed and never updated
    for alone, in_batch in out["alone"]:  # predict_sentiment on one review = its row of a packed batch
        assert alone == pytest.approx(in_batch, rel=1e-5, abs=1e-6)
    assert out["loss"][-1] < out["loss"][0] - 0.2 and out["acc"][-1] >= 0.8, (out["loss"], out["acc"])


def test_sentiment_packed_bidirectional_lstm_torch_parity():
    torch = _reference_torch()
    r, t = sentiment_rnn_page(lucid, 3, 0.0, 2), sentiment_rnn_page(torch, 3, 0.0, 2)
    np.testing.assert_allclose(r["loss"] + r["acc"], t["loss"] + t["acc"], rtol=1e-5)
    for a, b in zip(r["params"], t["params"]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def sentiment_cnn_page(torch, weights_seed=None, dropout=0.5, epochs=4):
    """Notebooks 3 (FastText with bigrams), 4 (CNN, Conv2d and Conv1d) and 5 (multi-class CNN), and the
    EmbeddingBag NBOW of ``experimental/a_nbow-bag``."""
    nn, optim, F = torch.nn, torch.optim, torch.nn.functional
    device = torch.empty(0).device  # the notebooks: cuda if available else cpu

    def generate_bigrams(x):
        n_grams = set(zip(*[x[i:] for i in range(2)]))
        for n_gram in n_grams:
            x.append(' '.join(n_gram))
        return x

    class FastText(nn.Module):
        def __init__(self, vocab_size, embedding_dim, output_dim, pad_idx):
            super().__init__()
            self.embedding = nn.Embedding(vocab_size, embedding_dim, padding_idx=pad_idx)
            self.fc = nn.Linear(embedding_dim, output_dim)

        def forward(self, text):
            #text = [sent len, batch size]
            embedded = self.embedding(text)
            #embedded = [sent len, batch size, emb dim]
            embedded = embedded.permute(1, 0, 2)
            #embedded = [batch size, sent len, emb dim]
            pooled = F.avg_pool2d(embedded, (embedded.shape[1], 1)).squeeze(1)
            #pooled = [batch size, embedding_dim]
            return self.fc(pooled)

    class CNN(nn.Module):
        def __init__(self, vocab_size, embedding_dim, n_filters, filter_sizes, output_dim,
                     dropout, pad_idx):
            super().__init__()
            self.embedding = nn.Embedding(vocab_size, embedding_dim, padding_idx = pad_idx)
            self.convs = nn.ModuleList([
                                        nn.Conv2d(in_channels = 1,
                                                  out_channels = n_filters,
                                                  kernel_size = (fs, embedding_dim))
                                        for fs in filter_sizes
                                        ])
            self.fc = nn.Linear(len(filter_sizes) * n_filters, output_dim)
            self.dropout = nn.Dropout(dropout)

        def forward(self, text):
            #text = [batch size, sent len]
            embedded = self.embedding(text)
            embedded = embedded.unsqueeze(1)
            conved = [F.relu(conv(embedded)).squeeze(3) for conv in self.convs]
            pooled = [F.max_pool1d(conv, conv.shape[2]).squeeze(2) for conv in conved]
            cat = self.dropout(torch.cat(pooled, dim = 1))
            return self.fc(cat)

    class CNN1d(nn.Module):
        def __init__(self, vocab_size, embedding_dim, n_filters, filter_sizes, output_dim,
                     dropout, pad_idx):
            super().__init__()
            self.embedding = nn.Embedding(vocab_size, embedding_dim, padding_idx = pad_idx)
            self.convs = nn.ModuleList([
                                        nn.Conv1d(in_channels = embedding_dim,
                                                  out_channels = n_filters,
                                                  kernel_size = fs)
                                        for fs in filter_sizes
                                        ])
            self.fc = nn.Linear(len(filter_sizes) * n_filters, output_dim)
            self.dropout = nn.Dropout(dropout)

        def forward(self, text):
            embedded = self.embedding(text)
            embedded = embedded.permute(0, 2, 1)
            conved = [F.relu(conv(embedded)) for conv in self.convs]
            pooled = [F.max_pool1d(conv, conv.shape[2]).squeeze(2) for conv in conved]
            cat = self.dropout(torch.cat(pooled, dim = 1))
            return self.fc(cat)

    class NBOW(nn.Module):
        def __init__(self, input_dim, emb_dim, output_dim):
            super().__init__()
            self.embedding = nn.EmbeddingBag(input_dim, emb_dim)
            self.fc = nn.Linear(emb_dim, output_dim)

        def forward(self, text, offsets):
            # text = [seq len * batch size]
            # offsets = [batch size]
            embedded = self.embedding(text, offsets)
            # embedded = [batch size, emb dim]
            prediction = self.fc(embedded)
            return prediction

    class Collator:
        def collate(self, batch):
            labels, text = zip(*batch)
            labels = torch.LongTensor(labels)
            lengths = [len(x) for x in text]
            lengths = torch.LongTensor([0] + lengths[:-1])
            offsets = torch.cumsum(lengths, dim = 0)
            text = torch.cat(text)
            return labels, text, offsets

    def categorical_accuracy(preds, y):
        top_pred = preds.argmax(1, keepdim = True)
        correct = top_pred.eq(y.view_as(top_pred)).sum()
        acc = correct.float() / y.shape[0]
        return acc

    torch.manual_seed(1234)
    reviews = _reviews(48, 1)
    # three classes for the multi-class notebook: the count of high words, bucketed
    three = [(w, int(min(2, sum(v >= 11 for v in w) * 3 // (len(w) + 1)))) for w, _ in reviews]
    bigram_vocab = {}
    for w, _ in reviews:
        for tok in generate_bigrams([str(v) for v in w]):
            bigram_vocab.setdefault(tok, len(bigram_vocab) + 2)
    models = dict(fasttext=FastText(len(bigram_vocab) + 2, 8, 1, 1),
                  cnn=CNN(20, 8, 4, [2, 3, 4], 3, dropout, 1), cnn1d=CNN1d(20, 8, 4, [2, 3, 4], 3, dropout, 1),
                  nbow=NBOW(20, 8, 2))
    out = {"bigrams": generate_bigrams(['This', 'film', 'is', 'terrible'])}
    for k, (name, model) in enumerate(models.items()):
        if weights_seed is not None:
            _set_params(torch, model, weights_seed + k, scale=0.3)
        model.to(device)
    for k in ("cnn", "cnn1d"):  # CNN and CNN1d compute the same thing from the same weights
        if k == "cnn1d":
            with torch.no_grad():
                models[k].embedding.weight.copy_(models["cnn"].embedding.weight)
                models[k].fc.load_state_dict(models["cnn"].fc.state_dict())
                for c1, c2 in zip(models[k].convs, models["cnn"].convs):
                    c1.weight.copy_(c2.weight.squeeze(1).permute(0, 2, 1))
                    c1.bias.copy_(c2.bias)

    def padded(chunk, L=None, min_len=4):  # the CNN needs sentences at least as long as its largest filter
        L = max(max(len(w) for w in chunk), min_len)
        return torch.tensor(np.array([w + [1] * (L - len(w)) for w in chunk])).to(device)

    collator = Collator()
    losses = {name: [] for name in models}
    for name, model in models.items():
        optimizer = optim.Adam(model.parameters(), lr=0.05)
        for epoch in range(epochs):
            model.train()
            epoch_loss = 0
            for i in range(0, 48, 16):
                optimizer.zero_grad()
                if name == "fasttext":
                    toks = [[bigram_vocab[t] for t in generate_bigrams([str(v) for v in w])]
                            for w, _ in reviews[i:i + 16]]
                    y = torch.tensor([c for _, c in reviews[i:i + 16]], dtype=torch.float32).to(device)
                    pred = model(padded(toks).t()).squeeze(1)
                    loss = F.binary_cross_entropy_with_logits(pred, y)
                elif name == "nbow":
                    labels, text, offsets = collator.collate(
                        [(torch.tensor(int(c)), torch.tensor(w)) for w, c in reviews[i:i + 16]])
                    labels, text, offsets = labels.to(device), text.to(device), offsets.to(device)
                    pred = model(text, offsets)
                    loss = F.cross_entropy(pred, labels)
                    if "bag" not in out:
                        out["bag"] = (text.cpu().numpy(), offsets.cpu().numpy(),
                                      model.embedding(text, offsets).detach().cpu().numpy(),
                                      model.embedding.weight.detach().cpu().numpy().copy())
                else:
                    text = padded([w for w, _ in three[i:i + 16]])
                    y = torch.tensor([c for _, c in three[i:i + 16]]).to(device)
                    pred = model(text)
                    loss = nn.CrossEntropyLoss()(pred, y)
                    if epoch == 0 and i == 0:
                        out[name + "_first"] = (pred.detach().cpu().numpy(), categorical_accuracy(pred, y).item(),
                                                y.cpu().numpy())
                loss.backward()
                optimizer.step()
                epoch_loss += loss.item()
            losses[name].append(epoch_loss / 3)
    out["losses"] = losses
    out["params"] = {n: [p.detach().cpu().numpy().copy() for p in m.parameters()] for n, m in models.items()}
    return out


def test_sentiment_fasttext_cnn_embeddingbag():
    out = sentiment_cnn_page(lucid, dropout=0.0)
    b = out["bigrams"]
    assert b[:4] == ['This', 'film', 'is', 'terrible'] and sorted(b[4:]) == ['This film', 'film is', 'is terrible']
    text, offsets, bag, weight = out["bag"]
    ends = list(offsets[1:]) + [len(text)]
    want = np.stack([weight[text[s:e]].mean(0) for s, e in zip(offsets, ends)])  # mode='mean' bags
    np.testing.assert_allclose(bag, want, rtol=1e-6, atol=1e-7)
    # without dropout, the Conv2d and Conv1d CNNs are one function of the same weights
    np.testing.assert_allclose(out["cnn_first"][0], out["cnn1d_first"][0], rtol=1e-5, atol=1e-6)
    p, acc, y = out["cnn_first"]
    assert acc == np.mean(p.argmax(1) == y)
    for name, ls in out["losses"].items():  # 12 Adam steps; FastText's mean of bigrams learns slowest
        assert ls[-1] < ls[0] - (0.08 if name == "fasttext" else 0.15), (name, ls)


def test_sentiment_fasttext_cnn_embeddingbag_torch_parity():
    torch = _reference_torch()
    r, t = sentiment_cnn_page(lucid, 5, 0.0, 2), sentiment_cnn_page(torch, 5, 0.0, 2)
    assert r["bigrams"][:4] == t["bigrams"][:4]
    for k in ("cnn_first", "cnn1d_first"):
        np.testing.assert_allclose(r[k][0], t[k][0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(r["bag"][2], t["bag"][2], rtol=1e-6, atol=1e-7)
    for name in r["losses"]:
        np.testing.assert_allclose(r["losses"][name], t["losses"][name], rtol=1e-5, err_msg=name)
        for a, b in zip(r["params"][name], t["params"][name]):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5, err_msg=name)


# ----------------------------------------------------- pytorch-image-classification ------------------
def _images(n, seed, channels=1, size=28, classes=10):
    """Class k: a bright 6x6 square at one of ``classes`` positions, plus noise."""
    rng = np.random.RandomState(seed)
    y = rng.randint(0, classes, n)
    x = rng.normal(0, 0.3, (n, channels, size, size)).astype(np.float32)
    for i, k in enumerate(y):
        if classes == 4:  # one quadrant each
            h = size // 2
            x[i, :, k // 2 * h:k // 2 * h + h, k % 2 * h:k % 2 * h + h] += 1.5
        else:
            r, c = k // 4 * 7, k % 4 * 6
            x[i, :, r:r + 6, c:c + 6] += 1.5
    return x, y


def image_mlp_lenet_lrfinder_page(torch, tmp_path, weights_seed=None, epochs=3):
    """Notebooks 1 (MLP), 2 (LeNet) and 3's learning-rate finder."""
    nn, optim, F = torch.nn, torch.optim, torch.nn.functional
    _LRScheduler = import_module(torch.__name__ + ".optim.lr_scheduler")._LRScheduler
    device = torch.empty(0).device  # the notebooks: cuda if available else cpu

    class MLP(nn.Module):
        def __init__(self, input_dim, output_dim):
            super().__init__()
            self.input_fc = nn.Linear(input_dim, 250)
            self.hidden_fc = nn.Linear(250, 100)
            self.output_fc = nn.Linear(100, output_dim)

        def forward(self, x):
            batch_size = x.shape[0]
            x = x.view(batch_size, -1)
            h_1 = F.relu(self.input_fc(x))
            h_2 = F.relu(self.hidden_fc(h_1))
            y_pred = self.output_fc(h_2)
            return y_pred, h_2

    class LeNet(nn.Module):
        def __init__(self, output_dim):
            super().__init__()
            self.conv1 = nn.Conv2d(in_channels=1, out_channels=6, kernel_size=5)
            self.conv2 = nn.Conv2d(in_channels=6, out_channels=16, kernel_size=5)
            self.fc_1 = nn.Linear(16 * 4 * 4, 120)
            self.fc_2 = nn.Linear(120, 84)
            self.fc_3 = nn.Linear(84, output_dim)

        def forward(self, x):
            x = self.conv1(x)
            x = F.max_pool2d(x, kernel_size=2)
            x = F.relu(x)
            x = self.conv2(x)
            x = F.max_pool2d(x, kernel_size=2)
            x = F.relu(x)
            x = x.view(x.shape[0], -1)
            h = x
            x = self.fc_1(x)
            x = F.relu(x)
            x = self.fc_2(x)
            x = F.relu(x)
            x = self.fc_3(x)
            return x, h

    def calculate_accuracy(y_pred, y):
        top_pred = y_pred.argmax(1, keepdim=True)
        correct = top_pred.eq(y.view_as(top_pred)).sum()
        acc = correct.float() / y.shape[0]
        return acc

    class LRFinder:
        def __init__(self, model, optimizer, criterion, device):
            self.optimizer = optimizer
            self.model = model
            self.criterion = criterion
            self.device = device
            torch.save(model.state_dict(), str(tmp_path / 'init_params.pt'))

        def range_test(self, iterator, end_lr = 10, num_iter = 100, smooth_f = 0.05, diverge_th = 5):
            lrs = []
            losses = []
            best_loss = float('inf')
            lr_scheduler = ExponentialLR(self.optimizer, end_lr, num_iter)
            iterator = IteratorWrapper(iterator)
            for iteration in range(num_iter):
                loss = self._train_batch(iterator)
                lrs.append(lr_scheduler.get_last_lr()[0])
                #update lr
                lr_scheduler.step()
                if iteration > 0:
                    loss = smooth_f * loss + (1 - smooth_f) * losses[-1]
                if loss < best_loss:
                    best_loss = loss
                losses.append(loss)
                if loss > diverge_th * best_loss:
                    printed.append("Stopping early, the loss has diverged")
                    break
            #reset model to initial parameters
            self.model.load_state_dict(torch.load(str(tmp_path / 'init_params.pt')))
            return lrs, losses

        def _train_batch(self, iterator):
            self.model.train()
            self.optimizer.zero_grad()
            x, y = iterator.get_batch()
            x = x.to(self.device)
            y = y.to(self.device)
            y_pred, _ = self.model(x)
            loss = self.criterion(y_pred, y)
            loss.backward()
            self.optimizer.step()
            return loss.item()

    class ExponentialLR(_LRScheduler):
        def __init__(self, optimizer, end_lr, num_iter, last_epoch=-1):
            self.end_lr = end_lr
            self.num_iter = num_iter
            super(ExponentialLR, self).__init__(optimizer, last_epoch)

        def get_lr(self):
            curr_iter = self.last_epoch
            r = curr_iter / self.num_iter
            return [base_lr * (self.end_lr / base_lr) ** r for base_lr in self.base_lrs]

    class IteratorWrapper:
        def __init__(self, iterator):
            self.iterator = iterator
            self._iterator = iter(iterator)

        def __next__(self):
            try:
                inputs, labels = next(self._iterator)
            except StopIteration:
                self._iterator = iter(self.iterator)
                inputs, labels, *_ = next(self._iterator)
            return inputs, labels

        def get_batch(self):
            return next(self)

    torch.manual_seed(1234)
    x, y = _images(64, 0)
    train_data = torch.utils.data.TensorDataset(torch.tensor(x), torch.tensor(y))
    train_iterator = torch.utils.data.DataLoader(train_data, batch_size=16)
    printed, out = [], {}

    model = MLP(28 * 28, 10)
    if weights_seed is not None:
        _set_params(torch, model, weights_seed, scale=0.05)
    START_LR = 1e-4
    optimizer = optim.Adam(model.parameters(), lr=START_LR)
    criterion = nn.CrossEntropyLoss()
    model = model.to(device)
    criterion = criterion.to(device)
    init = [p.detach().cpu().numpy().copy() for p in model.parameters()]
    lr_finder = LRFinder(model, optimizer, criterion, device)
    lrs, losses = lr_finder.range_test(train_iterator, end_lr=100, num_iter=40)
    out["finder"] = (lrs, losses, list(printed))
    out["reset"] = all((a == p.detach().cpu().numpy()).all() for a, p in zip(init, model.parameters()))

    for name, model in (("mlp", model), ("lenet", LeNet(10).to(device))):
        if weights_seed is not None and name == "lenet":
            _set_params(torch, model, weights_seed, scale=0.1)
        optimizer = optim.Adam(model.parameters(), lr=3e-3)
        out[name] = []
        for epoch in range(epochs):
            epoch_loss = epoch_acc = 0
            model.train()
            for (x, y) in train_iterator:
                x, y = x.to(device), y.to(device)
                optimizer.zero_grad()
                y_pred, _ = model(x)
                loss = criterion(y_pred, y)
                acc = calculate_accuracy(y_pred, y)
                if name + "_first" not in out:
                    out[name + "_first"] = (y_pred.detach().cpu().numpy(), y.cpu().numpy(), acc.item())
                loss.backward()
                optimizer.step()
                epoch_loss += loss.item()
                epoch_acc += acc.item()
            out[name].append((epoch_loss / len(train_iterator), epoch_acc / len(train_iterator)))
    out["params"] = [p.detach().cpu().numpy().copy() for p in model.parameters()]

    def initialize_parameters(m):  # notebook 3 (AlexNet)
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight.data, nonlinearity = 'relu')
            nn.init.constant_(m.bias.data, 0)
        elif isinstance(m, nn.Linear):
            nn.init.xavier_normal_(m.weight.data, gain = nn.init.calculate_gain('relu'))
            nn.init.constant_(m.bias.data, 0)

    features = nn.Sequential(nn.Conv2d(64, 96, 3, 2, 1), nn.MaxPool2d(2), nn.ReLU(inplace = True),
                             nn.Linear(300, 500))
    features.apply(initialize_parameters)
    out["init"] = [(m.weight.detach().cpu().numpy(), m.bias.detach().cpu().numpy()) for m in features
                   if isinstance(m, (nn.Conv2d, nn.Linear))]

    def calculate_topk_accuracy(y_pred, y, k = 5):  # notebook 5 (ResNet)
        with torch.no_grad():
            batch_size = y.shape[0]
            _, top_pred = y_pred.topk(k, 1)
            top_pred = top_pred.t()
            correct = top_pred.eq(y.view(1, -1).expand_as(top_pred))
            correct_1 = correct[:1].reshape(-1).float().sum(0, keepdim = True)
            correct_k = correct[:k].reshape(-1).float().sum(0, keepdim = True)
            acc_1 = correct_1 / batch_size
            acc_k = correct_k / batch_size
        return acc_1, acc_k

    x, y = next(iter(train_iterator))
    y_pred, _ = model(x.to(device))
    out["topk"] = (y_pred.detach().cpu().numpy(), y.numpy(),
                   [a.cpu().numpy() for a in calculate_topk_accuracy(y_pred, y.to(device), k=3)])
    return out


def test_image_mlp_lenet_lr_finder_alexnet_init_topk(tmp_path):
    out = image_mlp_lenet_lrfinder_page(lucid, tmp_path)
    lrs, losses, printed = out["finder"]
    n = len(lrs)
    # ExponentialLR(_LRScheduler): lr_i = 1e-4 * (100 / 1e-4) ** (i / 40), until the loss diverges
    np.testing.assert_allclose(lrs, [1e-4 * (100 / 1e-4) ** (i / 40) for i in range(n)], rtol=1e-12)
    assert printed == ["Stopping early, the loss has diverged"] and 10 < n < 40 and losses[-1] > 5 * min(losses)
    assert out["reset"]  # load_state_dict(torch.load(...)) restored the initial weights
    for name in ("mlp", "lenet"):
        p, y, acc = out[name + "_first"]
        assert acc == np.mean(p.argmax(1) == y)
        (l0, a0), (l1, a1) = out[name][0], out[name][-1]
        # three epochs of 4 batches: the MLP fits the 64 images, LeNet is on its way
        assert (l1 < 0.1 * l0 if name == "mlp" else l1 < l0 - 0.3) and a1 >= min(1.0, a0 + 0.3), out[name]
    # AlexNet's initialize_parameters and ResNet's calculate_topk_accuracy
    (cw, cb), (lw, lb) = out["init"]
    assert (cb == 0).all() and (lb == 0).all()
    # kaiming_normal_(relu): std sqrt(2 / fan_in), fan_in = 64*3*3; xavier_normal_(gain sqrt 2):
    # std sqrt(2) sqrt(2 / (fan_in + fan_out)); 55k and 150k draws: 2% is over 6 standard errors
    assert cw.std() == pytest.approx(math.sqrt(2 / (64 * 9)), rel=0.02) and abs(cw.mean()) < 2e-3
    assert lw.std() == pytest.approx(math.sqrt(2) * math.sqrt(2 / 800), rel=0.02) and abs(lw.mean()) < 2e-3
    p, y, (acc1, acc3) = out["topk"]
    order = np.argsort(-p, 1)
    assert acc1.shape == (1,) and acc1[0] == pytest.approx(np.mean(order[:, 0] == y))
    assert acc3[0] == pytest.approx(np.mean((order[:, :3] == y[:, None]).any(1))) and acc3[0] >= acc1[0]


def test_image_mlp_lenet_lr_finder_alexnet_init_topk_torch_parity(tmp_path):
    torch = _reference_torch()
    r = image_mlp_lenet_lrfinder_page(lucid, tmp_path, 2, epochs=2)
    t = image_mlp_lenet_lrfinder_page(torch, tmp_path, 2, epochs=2)
    assert r["finder"][2] == t["finder"][2] and len(r["finder"][0]) == len(t["finder"][0])
    np.testing.assert_allclose(r["finder"][0], t["finder"][0], rtol=1e-12)
    # (the last steps run at learning rates near 1, where rounding differences grow fast)
    np.testing.assert_allclose(r["finder"][1][:20], t["finder"][1][:20], rtol=1e-4)
    np.testing.assert_allclose(r["finder"][1], t["finder"][1], rtol=1e-2)
    np.testing.assert_allclose(r["mlp"] + r["lenet"], t["mlp"] + t["lenet"], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(r["topk"][0], t["topk"][0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(r["topk"][2], t["topk"][2])
    for a, b in zip(r["params"], t["params"]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def image_vgg_resnet_page(torch, weights_seed=None, epochs=4, double=False):
    """Notebook 4 (VGG: ``get_vgg_layers``, discriminative learning rates, ``OneCycleLR``) and
    notebook 5 (ResNet's ``BasicBlock``, ``Bottleneck`` and ``ResNet`` with a ``ResNetConfig``).
    ``double`` runs the models and images in float64 (the parity test's harness, not the notebooks)."""
    nn, optim = torch.nn, torch.optim
    lr_scheduler = torch.optim.lr_scheduler
    device = torch.empty(0).device  # the notebooks: cuda if available else cpu

    class VGG(nn.Module):
        def __init__(self, features, output_dim):
            super().__init__()
            self.features = features
            self.avgpool = nn.AdaptiveAvgPool2d(2)
            self.classifier = nn.Sequential(
                nn.Linear(16 * 2 * 2, 32),
                nn.ReLU(inplace=True),
                nn.Dropout(0.5),
                nn.Linear(32, 32),
                nn.ReLU(inplace=True),
                nn.Dropout(0.5),
                nn.Linear(32, output_dim),
            )

        def forward(self, x):
            x = self.features(x)
            x = self.avgpool(x)
            h = x.view(x.shape[0], -1)
            x = self.classifier(h)
            return x, h

    def get_vgg_layers(config, batch_norm):
        layers = []
        in_channels = 3
        for c in config:
            assert c == 'M' or isinstance(c, int)
            if c == 'M':
                layers += [nn.MaxPool2d(kernel_size=2)]
            else:
                conv2d = nn.Conv2d(in_channels, c, kernel_size=3, padding=1)
                if batch_norm:
                    layers += [conv2d, nn.BatchNorm2d(c), nn.ReLU(inplace=True)]
                else:
                    layers += [conv2d, nn.ReLU(inplace=True)]
                in_channels = c
        return nn.Sequential(*layers)

    class BasicBlock(nn.Module):
        expansion = 1

        def __init__(self, in_channels, out_channels, stride = 1, downsample = False):
            super().__init__()
            self.conv1 = nn.Conv2d(in_channels, out_channels, kernel_size = 3, stride = stride, padding = 1,
                                   bias = False)
            self.bn1 = nn.BatchNorm2d(out_channels)
            self.conv2 = nn.Conv2d(out_channels, out_channels, kernel_size = 3, stride = 1, padding = 1,
                                   bias = False)
            self.bn2 = nn.BatchNorm2d(out_channels)
            self.relu = nn.ReLU(inplace = True)
            if downsample:
                conv = nn.Conv2d(in_channels, out_channels, kernel_size = 1, stride = stride, bias = False)
                bn = nn.BatchNorm2d(out_channels)
                downsample = nn.Sequential(conv, bn)
            else:
                downsample = None
            self.downsample = downsample

        def forward(self, x):
            i = x
            x = self.conv1(x)
            x = self.bn1(x)
            x = self.relu(x)
            x = self.conv2(x)
            x = self.bn2(x)
            if self.downsample is not None:
                i = self.downsample(i)
            x += i
            x = self.relu(x)
            return x

    class Bottleneck(nn.Module):
        expansion = 4

        def __init__(self, in_channels, out_channels, stride = 1, downsample = False):
            super().__init__()
            self.conv1 = nn.Conv2d(in_channels, out_channels, kernel_size = 1, stride = 1, bias = False)
            self.bn1 = nn.BatchNorm2d(out_channels)
            self.conv2 = nn.Conv2d(out_channels, out_channels, kernel_size = 3, stride = stride, padding = 1,
                                   bias = False)
            self.bn2 = nn.BatchNorm2d(out_channels)
            self.conv3 = nn.Conv2d(out_channels, self.expansion * out_channels, kernel_size = 1, stride = 1,
                                   bias = False)
            self.bn3 = nn.BatchNorm2d(self.expansion * out_channels)
            self.relu = nn.ReLU(inplace = True)
            if downsample:
                conv = nn.Conv2d(in_channels, self.expansion * out_channels, kernel_size = 1, stride = stride,
                                 bias = False)
                bn = nn.BatchNorm2d(self.expansion * out_channels)
                downsample = nn.Sequential(conv, bn)
            else:
                downsample = None
            self.downsample = downsample

        def forward(self, x):
            i = x
            x = self.conv1(x)
            x = self.bn1(x)
            x = self.relu(x)
            x = self.conv2(x)
            x = self.bn2(x)
            x = self.relu(x)
            x = self.conv3(x)
            x = self.bn3(x)
            if self.downsample is not None:
                i = self.downsample(i)
            x += i
            x = self.relu(x)
            return x

    class ResNet(nn.Module):
        def __init__(self, config, output_dim):
            super().__init__()
            block, n_blocks, channels = config
            self.in_channels = channels[0]
            assert len(n_blocks) == len(channels) == 4
            self.conv1 = nn.Conv2d(3, self.in_channels, kernel_size = 7, stride = 2, padding = 3, bias = False)
            self.bn1 = nn.BatchNorm2d(self.in_channels)
            self.relu = nn.ReLU(inplace = True)
            self.maxpool = nn.MaxPool2d(kernel_size = 3, stride = 2, padding = 1)
            self.layer1 = self.get_resnet_layer(block, n_blocks[0], channels[0])
            self.layer2 = self.get_resnet_layer(block, n_blocks[1], channels[1], stride = 2)
            self.layer3 = self.get_resnet_layer(block, n_blocks[2], channels[2], stride = 2)
            self.layer4 = self.get_resnet_layer(block, n_blocks[3], channels[3], stride = 2)
            self.avgpool = nn.AdaptiveAvgPool2d((1,1))
            self.fc = nn.Linear(self.in_channels, output_dim)

        def get_resnet_layer(self, block, n_blocks, channels, stride = 1):
            layers = []
            if self.in_channels != block.expansion * channels:
                downsample = True
            else:
                downsample = False
            layers.append(block(self.in_channels, channels, stride, downsample))
            for i in range(1, n_blocks):
                layers.append(block(block.expansion * channels, channels))
            self.in_channels = block.expansion * channels
            return nn.Sequential(*layers)

        def forward(self, x):
            x = self.conv1(x)
            x = self.bn1(x)
            x = self.relu(x)
            x = self.maxpool(x)
            x = self.layer1(x)
            x = self.layer2(x)
            x = self.layer3(x)
            x = self.layer4(x)
            x = self.avgpool(x)
            h = x.view(x.shape[0], -1)
            x = self.fc(h)
            return x, h

    ResNetConfig = namedtuple('ResNetConfig', ['block', 'n_blocks', 'channels'])
    torch.manual_seed(1234)
    x, y = _images(16, 1, channels=3, size=8, classes=4)
    x = x.astype(np.float64) if double else x
    iterator = [(torch.tensor(x[i:i + 8]).to(device), torch.tensor(y[i:i + 8]).to(device)) for i in range(0, 16, 8)]
    out = {}
    vgg = VGG(get_vgg_layers([8, 'M', 16, 'M'], batch_norm=True), 4).to(device)
    resnet = ResNet(ResNetConfig(block=Bottleneck, n_blocks=[1, 1, 1, 1], channels=[2, 3, 4, 5]), 4).to(device)
    resnet18ish = ResNet(ResNetConfig(block=BasicBlock, n_blocks=[1, 1, 1, 1], channels=[2, 4, 6, 8]), 4).to(device)
    models = dict(vgg=vgg, bottleneck=resnet, basic=resnet18ish)
    if double:
        for model in models.values():
            model.double()
    for k, (name, model) in enumerate(models.items()):
        if weights_seed is not None:
            for n, p in model.named_parameters():
                if "bn" in n or n.startswith("features.1") or ".downsample.1" in n:
                    continue
            _set_params(torch, model, weights_seed + k, scale=0.3)
            with torch.no_grad():  # BatchNorm scales at one, shifts at zero, as their initialisation
                for m in model.modules():
                    if isinstance(m, nn.BatchNorm2d):
                        m.weight.fill_(1.0)
                        m.bias.zero_()
    for name, model in models.items():
        if name == "vgg":
            for m in model.classifier:
                if isinstance(m, nn.Dropout):
                    m.p = 0.0 if weights_seed is not None else m.p
            FOUND_LR = 2e-2
            params = [
                      {'params': model.features.parameters(), 'lr': FOUND_LR / 10},
                      {'params': model.classifier.parameters()}
                     ]
        else:
            FOUND_LR = 5e-2
            params = [
                      {'params': [p for n, p in model.named_parameters() if not n.startswith('fc')], 'lr': FOUND_LR / 10},
                      {'params': model.fc.parameters()}
                     ]
        optimizer = optim.Adam(params, lr = FOUND_LR)
        EPOCHS = epochs
        STEPS_PER_EPOCH = len(iterator)
        TOTAL_STEPS = EPOCHS * STEPS_PER_EPOCH
        MAX_LRS = [p['lr'] for p in optimizer.param_groups]
        scheduler = lr_scheduler.OneCycleLR(optimizer,
                                            max_lr = MAX_LRS,
                                            total_steps = TOTAL_STEPS)
        criterion = nn.CrossEntropyLoss().to(device)
        out[name] = dict(lrs=[], betas=[], losses=[])
        for epoch in range(EPOCHS):
            model.train()
            for (x, y) in iterator:
                out[name]["lrs"].append([g["lr"] for g in optimizer.param_groups])
                out[name]["betas"].append([g["betas"][0] for g in optimizer.param_groups])
                optimizer.zero_grad()
                y_pred, _ = model(x)
                loss = criterion(y_pred, y)
                loss.backward()
                optimizer.step()
                scheduler.step()
                out[name]["losses"].append(loss.item())
        model.eval()
        with torch.no_grad():
            out[name]["eval"] = model(iterator[0][0])[0].cpu().numpy()
        out[name]["params"] = [p.detach().cpu().numpy().copy() for p in model.parameters()]
        out[name]["buffers"] = [b.detach().cpu().numpy().copy() for b in model.buffers()]
    out["shapes"] = [tuple(m(iterator[0][0])[1].shape) for m in models.values()]

    # one BasicBlock with downsampling, in float64: gradcheck through the in-place residual x += i
    block = BasicBlock(2, 3, stride=2, downsample=True).to(device).double()
    xb = torch.randn(2, 2, 4, 4, dtype=torch.float64, device=device, requires_grad=True)
    out["gradcheck"] = torch.autograd.gradcheck(lambda t: block(t), (xb,), fast_mode=True)
    return out


def _one_cycle_numpy(max_lr, total, pct_start=0.3, div=25.0, final_div=1e4):
    """OneCycleLR's cosine schedule (three_phase=False), step by step, with its momentum cycle."""
    end1, end2 = float(pct_start * total) - 1, total - 1
    lo, hi = max_lr / div, max_lr / div / final_div
    cos = lambda a, b, p: b + (a - b) / 2.0 * (math.cos(math.pi * p) + 1)  # noqa: E731
    lrs, moms = [], []
    for s in range(total):
        if s <= end1:
            lrs.append(cos(lo, max_lr, s / end1)), moms.append(cos(0.95, 0.85, s / end1))
        else:
            p = (s - end1) / (end2 - end1)
            lrs.append(cos(max_lr, hi, p)), moms.append(cos(0.85, 0.95, p))
    return lrs, moms


def test_image_vgg_resnet_one_cycle():
    out = image_vgg_resnet_page(lucid)
    assert out["gradcheck"] is True
    assert out["shapes"] == [(8, 64), (8, 20), (8, 8)]  # h: VGG 16*2*2, Bottleneck 4*5, BasicBlock 8
    for name, found in (("vgg", 2e-2), ("bottleneck", 5e-2), ("basic", 5e-2)):
        got = np.array(out[name]["lrs"])
        for g, max_lr in enumerate((found / 10, found)):  # discriminative: features at a tenth
            lrs, moms = _one_cycle_numpy(max_lr, 8)  # 4 epochs of 2 batches
            np.testing.assert_allclose(got[:, g], lrs, rtol=1e-10)
            np.testing.assert_allclose(np.array(out[name]["betas"])[:, g], moms, rtol=1e-10)
        ls = out[name]["losses"]  # the last epoch against the first (two batches each)
        assert np.mean(ls[-2:]) < np.mean(ls[:2]) - 0.3, (name, ls)


def test_image_vgg_resnet_one_cycle_torch_parity():
    torch = _reference_torch()
    # In float64: in float32 the Bottleneck net (BatchNorm over 8 values per channel at 1x1) and VGG's
    # conv biases before BatchNorm (zero gradient in exact arithmetic, which Adam turns into lr-sized
    # steps of rounding noise) amplify float32 rounding until the last losses differ by 10% between
    # two correct convolution algorithms (cuDNN-like vs im2col); in float64 they agree to 1e-8.
    r, t = image_vgg_resnet_page(lucid, 4, double=True), image_vgg_resnet_page(torch, 4, double=True)
    assert r["shapes"] == t["shapes"]
    for name in ("vgg", "bottleneck", "basic"):
        np.testing.assert_allclose(r[name]["lrs"], t[name]["lrs"], rtol=1e-12)
        np.testing.assert_allclose(r[name]["betas"], t[name]["betas"], rtol=1e-12)
        np.testing.assert_allclose(r[name]["losses"], t[name]["losses"], rtol=1e-7, err_msg=name)
        np.testing.assert_allclose(r[name]["eval"], t[name]["eval"], rtol=1e-6, atol=1e-8, err_msg=name)
        for a, b in zip(r[name]["params"] + r[name]["buffers"], t[name]["params"] + t[name]["buffers"]):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-8, err_msg=name)
