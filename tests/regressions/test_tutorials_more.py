"""PyTorch tutorials run unmodified on Lucid (``import lucid as torch``), datasets replaced by
small synthetic data and epochs cut to a few steps: "Learning PyTorch with Examples", "Deep
Learning for NLP" (N-gram, LSTM tagger, BiLSTM-CRF), "Pruning", "Parametrizations", "Spatial
Transformer Networks", "Adversarial Example Generation", "DCGAN" and "Classifying Names with a
Character-Level RNN". The autograd ones (forward AD, double backward, fusing conv+bn) and the
function-transform ones (jacobians, ensembling, per-sample gradients, NTK) are in
``test_tutorials_more_autograd.py``.

Each tutorial is a function of the module it is handed as ``torch``, so the same text runs on
Lucid and, where PyTorch is installed, on PyTorch for the parity checks (which start from the
same weights, set from NumPy, since the two random streams differ). Each test asserts numbers:
losses that fall, gradients against closed forms, pruned fractions, exact masks.
"""
import math
import random
import string
import unicodedata

import numpy as np
import pytest

import lucid as torch  # noqa: F401  (the tutorials' spelling; each one also takes the module)
import lucid
import lucid.nn as nn  # noqa: F401
import lucid.nn.functional as F  # noqa: F401
import lucid.nn.utils.parametrize  # noqa: F401  (makes torch.nn.utils.parametrize reachable)
import lucid.nn.utils.prune  # noqa: F401
import lucid.optim as optim  # noqa: F401
import lucid.utils.data  # noqa: F401


def npy(t):
    return t.detach().cpu().numpy()


def _set_params(model, seed, scale=0.3):
    """Give every parameter of ``model`` values drawn by NumPy: the same start on both libraries."""
    rng = np.random.default_rng(seed)
    mod = lucid if isinstance(model, lucid.nn.Module) else __import__("torch")
    with mod.no_grad():
        for p in model.parameters():
            p.copy_(mod.tensor(rng.normal(scale=scale, size=tuple(p.shape)), dtype=p.dtype))
    return model


def _torch():
    return pytest.importorskip("torch")


# --------------------------------------------------------------- Learning PyTorch with Examples

def polynomial_fits(torch, steps=300):
    """The tutorial's fits of sin(x) by a cubic; every variant starts from fixed numbers."""
    dtype = torch.float
    device = torch.empty(0).device  # the tutorial's torch.device("cpu"): the default device here
    x = torch.linspace(-math.pi, math.pi, 2000, device=device, dtype=dtype)
    y = torch.sin(x)
    out = {}

    # Tensors: gradients by hand.
    a, b, c, d = (torch.full((), v, device=device, dtype=dtype) for v in (0.1, -0.2, 0.3, 0.05))
    learning_rate = 1e-6
    hand = []
    for t in range(steps):
        y_pred = a + b * x + c * x ** 2 + d * x ** 3
        loss = (y_pred - y).pow(2).sum().item()
        hand.append(loss)
        grad_y_pred = 2.0 * (y_pred - y)
        grad_a = grad_y_pred.sum()
        grad_b = (grad_y_pred * x).sum()
        grad_c = (grad_y_pred * x ** 2).sum()
        grad_d = (grad_y_pred * x ** 3).sum()
        a -= learning_rate * grad_a
        b -= learning_rate * grad_b
        c -= learning_rate * grad_c
        d -= learning_rate * grad_d
    out["tensors"] = hand

    # Autograd.
    a, b, c, d = (torch.full((), v, dtype=dtype, requires_grad=True) for v in (0.1, -0.2, 0.3, 0.05))
    auto = []
    for t in range(steps):
        y_pred = a + b * x + c * x ** 2 + d * x ** 3
        loss = (y_pred - y).pow(2).sum()
        auto.append(loss.item())
        loss.backward()
        with torch.no_grad():
            a -= learning_rate * a.grad
            b -= learning_rate * b.grad
            c -= learning_rate * c.grad
            d -= learning_rate * d.grad
            a.grad = None
            b.grad = None
            c.grad = None
            d.grad = None
    out["autograd"] = auto

    # A custom autograd.Function.
    class LegendrePolynomial3(torch.autograd.Function):
        @staticmethod
        def forward(ctx, input):
            ctx.save_for_backward(input)
            return 0.5 * (5 * input ** 3 - 3 * input)

        @staticmethod
        def backward(ctx, grad_output):
            input, = ctx.saved_tensors
            return grad_output * 1.5 * (5 * input ** 2 - 1)

    a = torch.full((), 0.0, device=device, dtype=dtype, requires_grad=True)
    b = torch.full((), -1.0, device=device, dtype=dtype, requires_grad=True)
    c = torch.full((), 0.0, device=device, dtype=dtype, requires_grad=True)
    d = torch.full((), 0.3, device=device, dtype=dtype, requires_grad=True)
    learning_rate = 5e-6
    legendre, first_grads = [], None
    for t in range(steps):
        P3 = LegendrePolynomial3.apply
        y_pred = a + b * P3(c + d * x)
        loss = (y_pred - y).pow(2).sum()
        legendre.append(loss.item())
        loss.backward()
        if first_grads is None:
            first_grads = [v.grad.item() for v in (a, b, c, d)]
        with torch.no_grad():
            a -= learning_rate * a.grad
            b -= learning_rate * b.grad
            c -= learning_rate * c.grad
            d -= learning_rate * d.grad
            a.grad = None
            b.grad = None
            c.grad = None
            d.grad = None
    out["legendre"], out["legendre_grads"] = legendre, first_grads

    # nn: Linear over (x, x^2, x^3), then optim (RMSprop).
    p = torch.tensor([1, 2, 3])
    xx = x.unsqueeze(-1).pow(p)
    for name, opt in (("nn", None), ("optim", "rmsprop")):
        model = torch.nn.Sequential(torch.nn.Linear(3, 1), torch.nn.Flatten(0, 1))
        with torch.no_grad():
            model[0].weight.copy_(torch.tensor([[0.5, -0.1, 0.02]]))
            model[0].bias.fill_(0.1)
        loss_fn = torch.nn.MSELoss(reduction='sum')
        optimizer = torch.optim.RMSprop(model.parameters(), lr=1e-3) if opt else None
        losses = []
        for t in range(steps):
            y_pred = model(xx)
            loss = loss_fn(y_pred, y)
            losses.append(loss.item())
            if optimizer is None:
                model.zero_grad()
                loss.backward()
                with torch.no_grad():
                    for param in model.parameters():
                        param -= 1e-6 * param.grad
            else:
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        linear_layer = model[0]
        out[name] = losses
        out[name + "_coef"] = [linear_layer.bias.item()] + [linear_layer.weight[:, i].item() for i in range(3)]

    # Custom nn.Module with SGD, and the dynamic net (SGD with momentum).
    class DynamicNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Parameter(torch.tensor(0.1))
            self.b = torch.nn.Parameter(torch.tensor(0.5))
            self.c = torch.nn.Parameter(torch.tensor(-0.1))
            self.d = torch.nn.Parameter(torch.tensor(0.02))
            self.e = torch.nn.Parameter(torch.tensor(0.001))

        def forward(self, x):
            y = self.a + self.b * x + self.c * x ** 2 + self.d * x ** 3
            for exp in range(4, random.randint(4, 6)):
                y = y + self.e * x ** exp
            return y

        def string(self):
            return f'y = {self.a.item()} + {self.b.item()} x + {self.c.item()} x^2 + {self.d.item()} x^3 + ' \
                   f'{self.e.item()} x^4 ? + {self.e.item()} x^5 ?'

    random.seed(0)
    model = DynamicNet()
    criterion = torch.nn.MSELoss(reduction='sum')
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-8, momentum=0.9)
    dyn = []
    for t in range(steps):
        y_pred = model(x)
        loss = criterion(y_pred, y)
        dyn.append(loss.item())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    out["dynamic"], out["dynamic_string"] = dyn, model.string()
    return out


def test_learning_pytorch_with_examples():
    out = polynomial_fits(lucid, steps=200)
    for key in ("tensors", "autograd", "legendre", "nn", "optim", "dynamic"):
        assert out[key][-1] < 0.8 * out[key][0], key
    # Gradients by hand and by autograd are the same numbers.
    np.testing.assert_allclose(out["tensors"], out["autograd"], rtol=2e-5)
    # The first step's gradients of the Legendre fit, in closed form (float64 NumPy).
    x = np.linspace(-np.pi, np.pi, 2000).astype(np.float32).astype(np.float64)
    u = 0.3 * x
    p3 = 0.5 * (5 * u ** 3 - 3 * u)
    r = 2 * (-p3 - np.sin(x))
    dp = 1.5 * (5 * u ** 2 - 1)
    want = [r.sum(), (r * p3).sum(), (-r * dp).sum(), (-r * dp * x).sum()]
    np.testing.assert_allclose(out["legendre_grads"], want, rtol=1e-4, atol=1e-2)  # a, c: 0 by symmetry
    assert out["dynamic_string"].startswith("y = ")


def test_learning_pytorch_with_examples_torch_parity():
    torch = _torch()
    lo, to = polynomial_fits(lucid, steps=60), polynomial_fits(torch, steps=60)
    for key in ("tensors", "autograd", "legendre", "legendre_grads", "nn", "nn_coef", "optim", "optim_coef",
                "dynamic"):
        np.testing.assert_allclose(lo[key], to[key], rtol=1e-4, atol=1e-3, err_msg=key)  # grads ~1e3


# ------------------------------------------------------------------ Deep Learning for NLP

TEST_SENTENCE = """When forty winters shall besiege thy brow,
And dig deep trenches in thy beauty's field,
Thy youth's proud livery so gazed on now,
Will be a totter'd weed of small worth held:""".split()


def ngram_language_model(torch, epochs=4, seed=None):
    nn, F, optim = torch.nn, torch.nn.functional, torch.optim
    CONTEXT_SIZE = 2
    EMBEDDING_DIM = 10
    ngrams = [([TEST_SENTENCE[i - j - 1] for j in range(CONTEXT_SIZE)], TEST_SENTENCE[i])
              for i in range(CONTEXT_SIZE, len(TEST_SENTENCE))]
    vocab = sorted(set(TEST_SENTENCE))  # sorted: the same indices on both libraries
    word_to_ix = {word: i for i, word in enumerate(vocab)}

    class NGramLanguageModeler(nn.Module):
        def __init__(self, vocab_size, embedding_dim, context_size):
            super(NGramLanguageModeler, self).__init__()
            self.embeddings = nn.Embedding(vocab_size, embedding_dim)
            self.linear1 = nn.Linear(context_size * embedding_dim, 128)
            self.linear2 = nn.Linear(128, vocab_size)

        def forward(self, inputs):
            embeds = self.embeddings(inputs).view((1, -1))
            out = F.relu(self.linear1(embeds))
            out = self.linear2(out)
            log_probs = F.log_softmax(out, dim=1)
            return log_probs

    losses = []
    loss_function = nn.NLLLoss()
    model = NGramLanguageModeler(len(vocab), EMBEDDING_DIM, CONTEXT_SIZE)
    if seed is not None:
        _set_params(model, seed)
    optimizer = optim.SGD(model.parameters(), lr=0.001)
    first = None
    for epoch in range(epochs):
        total_loss = 0
        for context, target in ngrams:
            context_idxs = torch.tensor([word_to_ix[w] for w in context], dtype=torch.long)
            model.zero_grad()
            log_probs = model(context_idxs)
            if first is None:
                first = (npy(log_probs), word_to_ix[target])
            loss = loss_function(log_probs, torch.tensor([word_to_ix[target]], dtype=torch.long))
            loss.backward()
            optimizer.step()
            total_loss += loss.item()
        losses.append(total_loss)
    return losses, first, npy(model.embeddings.weight[word_to_ix["beauty's"]])


def lstm_tagger(torch, epochs=60, seed=None):
    nn, F, optim = torch.nn, torch.nn.functional, torch.optim

    def prepare_sequence(seq, to_ix):
        idxs = [to_ix[w] for w in seq]
        return torch.tensor(idxs, dtype=torch.long)

    training_data = [
        ("The dog ate the apple".split(), ["DET", "NN", "V", "DET", "NN"]),
        ("Everybody read that book".split(), ["NN", "V", "DET", "NN"])
    ]
    word_to_ix = {}
    for sent, tags in training_data:
        for word in sent:
            if word not in word_to_ix:
                word_to_ix[word] = len(word_to_ix)
    tag_to_ix = {"DET": 0, "NN": 1, "V": 2}

    class LSTMTagger(nn.Module):
        def __init__(self, embedding_dim, hidden_dim, vocab_size, tagset_size):
            super(LSTMTagger, self).__init__()
            self.hidden_dim = hidden_dim
            self.word_embeddings = nn.Embedding(vocab_size, embedding_dim)
            self.lstm = nn.LSTM(embedding_dim, hidden_dim)
            self.hidden2tag = nn.Linear(hidden_dim, tagset_size)

        def forward(self, sentence):
            embeds = self.word_embeddings(sentence)
            lstm_out, _ = self.lstm(embeds.view(len(sentence), 1, -1))
            tag_space = self.hidden2tag(lstm_out.view(len(sentence), -1))
            tag_scores = F.log_softmax(tag_space, dim=1)
            return tag_scores

    model = LSTMTagger(6, 6, len(word_to_ix), len(tag_to_ix))
    if seed is not None:
        _set_params(model, seed)
    loss_function = nn.NLLLoss()
    optimizer = optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for epoch in range(epochs):
        total = 0.0
        for sentence, tags in training_data:
            model.zero_grad()
            sentence_in = prepare_sequence(sentence, word_to_ix)
            targets = prepare_sequence(tags, tag_to_ix)
            tag_scores = model(sentence_in)
            loss = loss_function(tag_scores, targets)
            loss.backward()
            optimizer.step()
            total += loss.item()
        losses.append(total)
    with torch.no_grad():
        tag_scores = model(prepare_sequence(training_data[0][0], word_to_ix))
    want = [tag_to_ix[t] for t in training_data[0][1]]
    return losses, tag_scores.argmax(dim=1).tolist(), want


def test_nlp_ngram_and_lstm_tagger():
    lucid.manual_seed(1)
    losses, (log_probs, target), beauty = ngram_language_model(lucid)
    assert all(b < a for a, b in zip(losses, losses[1:])) and beauty.shape == (10,)
    np.testing.assert_allclose(np.exp(log_probs).sum(), 1.0, rtol=1e-5)
    # NLL of the first step is -log p(target) under the first forward's log-probabilities.
    assert -log_probs[0, target] > 0 and np.isfinite(log_probs).all()
    lucid.manual_seed(1)
    losses, predicted, want = lstm_tagger(lucid, epochs=150)
    assert losses[-1] < 0.5 * losses[0] and predicted == want


def test_nlp_ngram_and_lstm_tagger_torch_parity():
    torch = _torch()
    for fn, kw in ((ngram_language_model, {"epochs": 2}), (lstm_tagger, {"epochs": 5})):
        lo, to = fn(lucid, seed=3, **kw), fn(torch, seed=3, **kw)
        np.testing.assert_allclose(lo[0], to[0], rtol=1e-4, err_msg=fn.__name__)


START_TAG = "<START>"
STOP_TAG = "<STOP>"


def bilstm_crf(torch):
    """The tutorial's BiLSTM-CRF classes, as written (module-level tags, as there)."""
    nn = torch.nn

    def argmax(vec):
        _, idx = torch.max(vec, 1)
        return idx.item()

    def log_sum_exp(vec):
        max_score = vec[0, argmax(vec)]
        max_score_broadcast = max_score.view(1, -1).expand(1, vec.size()[1])
        return max_score + torch.log(torch.sum(torch.exp(vec - max_score_broadcast)))

    class BiLSTM_CRF(nn.Module):
        def __init__(self, vocab_size, tag_to_ix, embedding_dim, hidden_dim):
            super(BiLSTM_CRF, self).__init__()
            self.embedding_dim = embedding_dim
            self.hidden_dim = hidden_dim
            self.vocab_size = vocab_size
            self.tag_to_ix = tag_to_ix
            self.tagset_size = len(tag_to_ix)
            self.word_embeds = nn.Embedding(vocab_size, embedding_dim)
            self.lstm = nn.LSTM(embedding_dim, hidden_dim // 2, num_layers=1, bidirectional=True)
            self.hidden2tag = nn.Linear(hidden_dim, self.tagset_size)
            self.transitions = nn.Parameter(torch.randn(self.tagset_size, self.tagset_size))
            self.transitions.data[tag_to_ix[START_TAG], :] = -10000
            self.transitions.data[:, tag_to_ix[STOP_TAG]] = -10000
            self.hidden = self.init_hidden()

        def init_hidden(self):
            return (torch.randn(2, 1, self.hidden_dim // 2), torch.randn(2, 1, self.hidden_dim // 2))

        def _forward_alg(self, feats):
            init_alphas = torch.full((1, self.tagset_size), -10000.)
            init_alphas[0][self.tag_to_ix[START_TAG]] = 0.
            forward_var = init_alphas
            for feat in feats:
                alphas_t = []
                for next_tag in range(self.tagset_size):
                    emit_score = feat[next_tag].view(1, -1).expand(1, self.tagset_size)
                    trans_score = self.transitions[next_tag].view(1, -1)
                    next_tag_var = forward_var + trans_score + emit_score
                    alphas_t.append(log_sum_exp(next_tag_var).view(1))
                forward_var = torch.cat(alphas_t).view(1, -1)
            terminal_var = forward_var + self.transitions[self.tag_to_ix[STOP_TAG]]
            alpha = log_sum_exp(terminal_var)
            return alpha

        def _get_lstm_features(self, sentence):
            self.hidden = self.init_hidden()
            embeds = self.word_embeds(sentence).view(len(sentence), 1, -1)
            lstm_out, self.hidden = self.lstm(embeds, self.hidden)
            lstm_out = lstm_out.view(len(sentence), self.hidden_dim)
            lstm_feats = self.hidden2tag(lstm_out)
            return lstm_feats

        def _score_sentence(self, feats, tags):
            score = torch.zeros(1)
            tags = torch.cat([torch.tensor([self.tag_to_ix[START_TAG]], dtype=torch.long), tags])
            for i, feat in enumerate(feats):
                score = score + self.transitions[tags[i + 1], tags[i]] + feat[tags[i + 1]]
            score = score + self.transitions[self.tag_to_ix[STOP_TAG], tags[-1]]
            return score

        def _viterbi_decode(self, feats):
            backpointers = []
            init_vvars = torch.full((1, self.tagset_size), -10000.)
            init_vvars[0][self.tag_to_ix[START_TAG]] = 0
            forward_var = init_vvars
            for feat in feats:
                bptrs_t = []
                viterbivars_t = []
                for next_tag in range(self.tagset_size):
                    next_tag_var = forward_var + self.transitions[next_tag]
                    best_tag_id = argmax(next_tag_var)
                    bptrs_t.append(best_tag_id)
                    viterbivars_t.append(next_tag_var[0][best_tag_id].view(1))
                forward_var = (torch.cat(viterbivars_t) + feat).view(1, -1)
                backpointers.append(bptrs_t)
            terminal_var = forward_var + self.transitions[self.tag_to_ix[STOP_TAG]]
            best_tag_id = argmax(terminal_var)
            path_score = terminal_var[0][best_tag_id]
            best_path = [best_tag_id]
            for bptrs_t in reversed(backpointers):
                best_tag_id = bptrs_t[best_tag_id]
                best_path.append(best_tag_id)
            start = best_path.pop()
            assert start == self.tag_to_ix[START_TAG]
            best_path.reverse()
            return path_score, best_path

        def neg_log_likelihood(self, sentence, tags):
            feats = self._get_lstm_features(sentence)
            forward_score = self._forward_alg(feats)
            gold_score = self._score_sentence(feats, tags)
            return forward_score - gold_score

        def forward(self, sentence):
            lstm_feats = self._get_lstm_features(sentence)
            score, tag_seq = self._viterbi_decode(lstm_feats)
            return score, tag_seq

    return BiLSTM_CRF


def _paths_brute_force(feats, trans, start, stop, ntags):
    """Every tag path's score (real tags only): the CRF's partition function and best path."""
    import itertools

    scores = {}
    for path in itertools.product(range(ntags), repeat=len(feats)):
        s, prev = 0.0, start
        for f, tag in zip(feats, path):
            s += trans[tag, prev] + f[tag]
            prev = tag
        scores[path] = s + trans[stop, prev]
    vals = np.array(list(scores.values()))
    return np.log(np.exp(vals - vals.max()).sum()) + vals.max(), max(scores, key=scores.get), max(vals)


def test_nlp_bilstm_crf():
    lucid.manual_seed(1)
    BiLSTM_CRF = bilstm_crf(lucid)
    training_data = [(
        "the wall street journal reported today that apple corporation made money".split(),
        "B I I I O O O B I O O".split()
    ), (
        "georgia tech is a university in georgia".split(),
        "B I O O O O B".split()
    )]
    word_to_ix = {}
    for sentence, tags in training_data:
        for word in sentence:
            if word not in word_to_ix:
                word_to_ix[word] = len(word_to_ix)
    tag_to_ix = {"B": 0, "I": 1, "O": 2, START_TAG: 3, STOP_TAG: 4}
    model = BiLSTM_CRF(len(word_to_ix), tag_to_ix, 5, 4)
    optimizer = lucid.optim.SGD(model.parameters(), lr=0.01, weight_decay=1e-4)

    # The forward algorithm is the log partition function and Viterbi the best path: both
    # against enumerating all 3^4 tag paths of a short sentence.
    sent = lucid.tensor([word_to_ix[w] for w in "georgia tech is a".split()], dtype=lucid.long)
    with lucid.no_grad():
        feats = model._get_lstm_features(sent)
        alpha = model._forward_alg(feats)
        score, path = model._viterbi_decode(feats)
    log_z, best, best_score = _paths_brute_force(npy(feats).astype(np.float64), npy(model.transitions).astype(
        np.float64), 3, 4, 3)
    np.testing.assert_allclose(alpha.item(), log_z, rtol=1e-5)
    assert path == list(best)
    np.testing.assert_allclose(score.item(), best_score, rtol=1e-5)

    losses = []
    for epoch in range(25):
        total = 0.0
        for sentence, tags in training_data:
            model.zero_grad()
            sentence_in = lucid.tensor([word_to_ix[w] for w in sentence], dtype=lucid.long)
            targets = lucid.tensor([tag_to_ix[t] for t in tags], dtype=lucid.long)
            loss = model.neg_log_likelihood(sentence_in, targets)
            loss.backward()
            optimizer.step()
            total += loss.item()
        losses.append(total)
    assert losses[-1] < 0.9 * losses[0]
    assert model.transitions.grad is not None and model.word_embeds.weight.grad is not None


# ------------------------------------------------------------------------------ Pruning

def _lenet(torch):
    nn, F = torch.nn, torch.nn.functional

    class LeNet(nn.Module):
        def __init__(self):
            super(LeNet, self).__init__()
            self.conv1 = nn.Conv2d(1, 6, 3)
            self.conv2 = nn.Conv2d(6, 16, 3)
            self.fc1 = nn.Linear(16 * 5 * 5, 120)
            self.fc2 = nn.Linear(120, 84)
            self.fc3 = nn.Linear(84, 10)

        def forward(self, x):
            x = F.max_pool2d(F.relu(self.conv1(x)), (2, 2))
            x = F.max_pool2d(F.relu(self.conv2(x)), 2)
            x = x.view(-1, int(x.nelement() / x.shape[0]))
            x = F.relu(self.fc1(x))
            x = F.relu(self.fc2(x))
            x = self.fc3(x)
            return x

    return LeNet


def pruning_tutorial(torch, seed=0):
    """The tutorial's calls in order; returns what it prints (as numbers)."""
    prune = torch.nn.utils.prune
    LeNet = _lenet(torch)
    out = {}
    model = _set_params(LeNet(), seed)
    module = model.conv1
    out["params0"] = [n for n, _ in module.named_parameters()]
    prune.random_unstructured(module, name="weight", amount=0.3)
    out["params1"] = [n for n, _ in module.named_parameters()]
    out["buffers1"] = [n for n, _ in module.named_buffers()]
    out["random_zeros"] = int((module.weight_mask == 0).sum().item())
    out["weight_is_masked"] = bool((module.weight == module.weight_orig * module.weight_mask).all())
    prune.l1_unstructured(module, name="bias", amount=3)
    out["bias_mask"] = npy(module.bias_mask)
    out["nhooks"] = len(module._forward_pre_hooks)
    prune.ln_structured(module, name="weight", amount=0.5, n=2, dim=0)
    for hook in module._forward_pre_hooks.values():
        if hook._tensor_name == "weight":
            break
    out["history"] = [type(h).__name__ for h in hook]
    out["weight_mask"] = npy(module.weight_mask)
    out["weight_orig"] = npy(module.weight_orig)
    out["state_dict"] = list(model.state_dict().keys())
    prune.remove(module, 'weight')
    out["params2"] = [n for n, _ in module.named_parameters()]
    out["buffers2"] = [n for n, _ in module.named_buffers()]
    out["removed_weight"] = npy(module.weight)

    new_model = _set_params(LeNet(), seed + 1)
    for name, module in new_model.named_modules():
        if isinstance(module, torch.nn.Conv2d):
            prune.l1_unstructured(module, name='weight', amount=0.2)
        elif isinstance(module, torch.nn.Linear):
            prune.l1_unstructured(module, name='weight', amount=0.4)
    out["new_buffers"] = list(dict(new_model.named_buffers()).keys())
    out["new_sparsity"] = {n: float((m.weight == 0).sum()) / m.weight.nelement()
                           for n, m in new_model.named_children()}

    model = _set_params(LeNet(), seed + 2)
    parameters_to_prune = (
        (model.conv1, 'weight'),
        (model.conv2, 'weight'),
        (model.fc1, 'weight'),
        (model.fc2, 'weight'),
        (model.fc3, 'weight'),
    )
    prune.global_unstructured(parameters_to_prune, pruning_method=prune.L1Unstructured, amount=0.2)
    zeros = [float(torch.sum(m.weight == 0)) for m, _ in parameters_to_prune]
    sizes = [float(m.weight.nelement()) for m, _ in parameters_to_prune]
    out["global_zeros"], out["global_sparsity"] = zeros, sum(zeros) / sum(sizes)
    out["global_masks"] = [npy(m.weight_mask) for m, _ in parameters_to_prune]

    class FooBarPruningMethod(prune.BasePruningMethod):
        """Prune every other entry in a tensor"""
        PRUNING_TYPE = 'unstructured'

        def compute_mask(self, t, default_mask):
            mask = default_mask.clone()
            mask.view(-1)[::2] = 0
            return mask

    def foobar_unstructured(module, name):
        FooBarPruningMethod.apply(module, name)
        return module

    model = _set_params(LeNet(), seed + 3)
    foobar_unstructured(model.fc3, name='bias')
    out["foobar"] = npy(model.fc3.bias_mask)
    x = torch.tensor(np.random.default_rng(seed).normal(size=(2, 1, 28, 28)), dtype=torch.float)
    out["logits"] = npy(model(x))
    return out


def test_pruning_tutorial():
    out = pruning_tutorial(lucid)
    assert out["params0"] == ["weight", "bias"]
    assert out["params1"] == ["bias", "weight_orig"] and out["buffers1"] == ["weight_mask"]
    assert out["random_zeros"] == round(0.3 * 54) and out["weight_is_masked"]
    assert out["nhooks"] == 2
    b = npy(_set_params(_lenet(lucid)(), 0).conv1.bias)
    want = np.ones(6, np.float32)
    want[np.argsort(np.abs(b))[:3]] = 0
    np.testing.assert_array_equal(out["bias_mask"], want)
    # ln_structured ranks channels by the L2 norm of the *pruned* weight and keeps the random mask.
    assert out["history"] == ["RandomUnstructured", "LnStructured"]
    mask, orig = out["weight_mask"], out["weight_orig"]
    kept = (mask.reshape(6, -1).sum(1) > 0)
    assert kept.sum() == 3
    assert out["state_dict"][:4] == ["conv1.weight_orig", "conv1.bias_orig", "conv1.weight_mask", "conv1.bias_mask"]
    assert out["params2"] == ["bias_orig", "weight"] and out["buffers2"] == ["bias_mask"]
    np.testing.assert_array_equal(out["removed_weight"], orig * mask)
    assert out["new_buffers"] == [f"{n}.weight_mask" for n in ("conv1", "conv2", "fc1", "fc2", "fc3")]
    for name, frac in out["new_sparsity"].items():
        n = {"conv1": 54, "conv2": 864, "fc1": 48000, "fc2": 10080, "fc3": 840}[name]
        assert frac == round((0.2 if name.startswith("conv") else 0.4) * n) / n, name
    assert out["global_sparsity"] == round(0.2 * 59838) / 59838
    np.testing.assert_array_equal(out["foobar"], np.tile([0.0, 1.0], 5))


def test_pruning_ln_structured_scores_the_pruned_weight():
    """A channel whose large entries were pruned before counts only what is left of it."""
    m = nn.Linear(3, 2, bias=False)
    with lucid.no_grad():
        m.weight.copy_(lucid.tensor([[10.0, 0.1, 0.1], [1.0, 1.0, 1.0]]))
    lucid.nn.utils.prune.custom_from_mask(m, "weight", lucid.tensor([[0.0, 1.0, 1.0], [1.0, 1.0, 1.0]]))
    lucid.nn.utils.prune.ln_structured(m, "weight", amount=1, n=2, dim=0)
    np.testing.assert_array_equal(npy(m.weight_mask), [[0, 0, 0], [1, 1, 1]])
    # Structured pruning again ranks only the channels still kept.
    m = nn.Linear(2, 4, bias=False)
    with lucid.no_grad():
        m.weight.copy_(lucid.tensor([[4.0, 0.0], [1.0, 0.0], [3.0, 0.0], [2.0, 0.0]]))
    lucid.nn.utils.prune.ln_structured(m, "weight", amount=0.5, n=1, dim=0)
    lucid.nn.utils.prune.ln_structured(m, "weight", amount=0.5, n=1, dim=0)  # half of the 2 left
    np.testing.assert_array_equal(npy(m.weight_mask)[:, 0], [1, 0, 0, 0])


def test_pruning_tutorial_torch_parity():
    torch = _torch()
    import torch.nn.utils.prune  # noqa: F401

    lo, to = pruning_tutorial(lucid), pruning_tutorial(torch)
    for key in ("params0", "params1", "buffers1", "random_zeros", "nhooks", "history", "state_dict", "params2",
                "buffers2", "new_buffers", "new_sparsity", "global_zeros", "global_sparsity"):
        assert lo[key] == to[key], key
    for key in ("bias_mask", "foobar"):
        np.testing.assert_array_equal(lo[key], to[key], err_msg=key)
    for a, b in zip(lo["global_masks"], to["global_masks"]):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(lo["logits"], to["logits"], rtol=1e-4, atol=1e-6)


# --------------------------------------------------------------------- Parametrizations

def parametrizations_tutorial(torch):
    nn = torch.nn
    parametrize = torch.nn.utils.parametrize
    out = {}

    class Symmetric(nn.Module):
        def forward(self, X):
            return X.triu() + X.triu(1).transpose(-1, -2)

    class Skew(nn.Module):
        def forward(self, X):
            A = X.triu(1)
            return A - A.transpose(-1, -2)

    class MatrixExponential(nn.Module):
        def forward(self, X):
            return torch.matrix_exp(X)

    class CayleyMap(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.register_buffer("Id", torch.eye(n))

        def forward(self, X):
            return torch.linalg.solve(self.Id - X, self.Id + X)

    layer = _set_params(nn.Linear(3, 3), 0)
    parametrize.register_parametrization(layer, "weight", Symmetric())
    A = layer.weight
    out["symmetric"] = npy(A)
    out["original"] = npy(layer.parametrizations.weight.original)
    out["names"] = sorted(dict(layer.named_parameters()))
    out["repr"] = repr(layer)
    A.pow(2).sum().backward()
    out["grad_original"] = npy(layer.parametrizations.weight.original.grad)

    cnn = _set_params(nn.Conv2d(in_channels=5, out_channels=8, kernel_size=3), 1)
    parametrize.register_parametrization(cnn, "weight", Skew())
    out["skew"] = npy(cnn.weight[0, 1])

    calls = []

    class NoisyParametrization(nn.Module):
        def forward(self, X):
            calls.append("forward")
            return X

        def right_inverse(self, X):
            calls.append("right_inverse")
            return X

    layer = nn.Linear(4, 4)
    parametrize.register_parametrization(layer, "weight", NoisyParametrization())
    del calls[:]
    foo = layer.weight + layer.weight.T
    bar = layer.weight.sum()
    out["calls_uncached"] = len(calls)
    with parametrize.cached():
        foo = layer.weight + layer.weight.T  # noqa: F841
        bar = layer.weight.sum()  # noqa: F841
    out["calls_cached"] = len(calls) - out["calls_uncached"]
    del calls[:]
    layer.weight = torch.tensor(np.eye(4) * 2.0, dtype=torch.float)
    out["assign_calls"] = list(calls)
    out["assigned"] = npy(layer.parametrizations.weight.original)

    for first, second, key in ((Skew, lambda: CayleyMap(3), "cayley"), (Skew, MatrixExponential, "orthogonal"),
                               (Symmetric, MatrixExponential, "spd")):
        layer = _set_params(nn.Linear(3, 3), 2)
        parametrize.register_parametrization(layer, "weight", first())
        parametrize.register_parametrization(layer, "weight", second())
        out[key] = npy(layer.weight)

    class SymmetricInv(Symmetric):
        def right_inverse(self, A):
            return A.triu()

    layer = nn.Linear(3, 3)
    parametrize.register_parametrization(layer, "weight", SymmetricInv())
    X = torch.tensor([[1.0, 2.0, 3.0], [2.0, 4.0, 5.0], [3.0, 5.0, 6.0]])
    layer.weight = X
    out["right_inverse"] = (npy(layer.weight), npy(layer.parametrizations.weight.original))

    for leave in (True, False):
        layer = _set_params(nn.Linear(3, 3), 3)
        before = npy(layer.weight)
        parametrize.register_parametrization(layer, "weight", Skew())
        skew = npy(layer.weight)
        parametrize.remove_parametrizations(layer, "weight", leave_parametrized=leave)
        out[f"removed_{leave}"] = (before, skew, npy(layer.weight), type(layer.weight).__name__,
                                   parametrize.is_parametrized(layer))
    return out


def test_parametrizations_tutorial():
    out = parametrizations_tutorial(lucid)
    S, X = out["symmetric"], out["original"]
    np.testing.assert_array_equal(S, S.T)
    np.testing.assert_array_equal(np.triu(S), np.triu(X))
    assert out["names"] == ["bias", "parametrizations.weight.original"]
    assert "ParametrizedLinear" in out["repr"] and "(0): Symmetric()" in out["repr"]
    # d/dX sum(S(X)^2) = 2 S on the diagonal, 4 S above it, 0 below.
    want = np.triu(4 * S) - np.diag(np.diag(2 * S))
    np.testing.assert_allclose(out["grad_original"], want, rtol=1e-6)
    K = out["skew"]
    np.testing.assert_array_equal(K, -K.T)
    assert out["calls_uncached"] == 3 and out["calls_cached"] == 1
    assert out["assign_calls"] == ["right_inverse"]
    np.testing.assert_array_equal(out["assigned"], np.eye(4) * 2)
    for key in ("cayley", "orthogonal"):
        Q = out[key].astype(np.float64)
        np.testing.assert_allclose(Q.T @ Q, np.eye(3), atol=1e-5, err_msg=key)
    spd = out["spd"].astype(np.float64)
    np.testing.assert_allclose(spd, spd.T, atol=1e-6)
    assert (np.linalg.eigvalsh(spd) > 0).all()
    W, orig = out["right_inverse"]
    np.testing.assert_allclose(W, [[1, 2, 3], [2, 4, 5], [3, 5, 6]])
    np.testing.assert_array_equal(orig, np.triu(W))
    before, skew, after, kind, still = out["removed_True"]
    np.testing.assert_array_equal(after, skew)
    assert kind == "Parameter" and not still
    before, skew, after, kind, still = out["removed_False"]
    np.testing.assert_array_equal(after, before)
    assert kind == "Parameter" and not still


def test_parametrizations_tutorial_torch_parity():
    torch = _torch()
    import torch.nn.utils.parametrize  # noqa: F401

    lo, to = parametrizations_tutorial(lucid), parametrizations_tutorial(torch)
    for key in ("symmetric", "original", "grad_original", "skew", "assigned", "cayley", "orthogonal", "spd"):
        np.testing.assert_allclose(lo[key], to[key], rtol=1e-4, atol=1e-5, err_msg=key)
    for key in ("names", "calls_uncached", "calls_cached", "assign_calls"):
        assert lo[key] == to[key], key
    assert lo["repr"] == to["repr"]
    for leave in (True, False):
        a, b = lo[f"removed_{leave}"], to[f"removed_{leave}"]
        np.testing.assert_allclose(a[2], b[2], rtol=1e-6)
        assert a[3:] == b[3:]


# ------------------------------------------------------------ Spatial Transformer Networks

def stn_net(torch):
    nn, F = torch.nn, torch.nn.functional

    class Net(nn.Module):
        def __init__(self):
            super(Net, self).__init__()
            self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
            self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
            self.conv2_drop = nn.Dropout2d()
            self.fc1 = nn.Linear(320, 50)
            self.fc2 = nn.Linear(50, 10)
            self.localization = nn.Sequential(
                nn.Conv2d(1, 8, kernel_size=7),
                nn.MaxPool2d(2, stride=2),
                nn.ReLU(True),
                nn.Conv2d(8, 10, kernel_size=5),
                nn.MaxPool2d(2, stride=2),
                nn.ReLU(True)
            )
            self.fc_loc = nn.Sequential(
                nn.Linear(10 * 3 * 3, 32),
                nn.ReLU(True),
                nn.Linear(32, 3 * 2)
            )
            self.fc_loc[2].weight.data.zero_()
            self.fc_loc[2].bias.data.copy_(torch.tensor([1, 0, 0, 0, 1, 0], dtype=torch.float))

        def stn(self, x):
            xs = self.localization(x)
            xs = xs.view(-1, 10 * 3 * 3)
            theta = self.fc_loc(xs)
            theta = theta.view(-1, 2, 3)
            grid = F.affine_grid(theta, x.size())
            x = F.grid_sample(x, grid)
            return x

        def forward(self, x):
            x = self.stn(x)
            x = F.relu(F.max_pool2d(self.conv1(x), 2))
            x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
            x = x.view(-1, 320)
            x = F.relu(self.fc1(x))
            x = F.dropout(x, training=self.training)
            x = self.fc2(x)
            return F.log_softmax(x, dim=1)

    return Net


@pytest.mark.filterwarnings("ignore:Default grid_sample and affine_grid:UserWarning")
def test_spatial_transformer_networks():
    F = lucid.nn.functional
    lucid.manual_seed(0)
    device = lucid.empty(0).device  # the tutorial's "cuda if available else cpu": the default device
    model = stn_net(lucid)().to(device)
    optimizer = lucid.optim.SGD(model.parameters(), lr=0.01)
    data_all, target_all = lucid.randn(32, 1, 28, 28), lucid.randint(0, 10, (32,))
    train_loader = lucid.utils.data.DataLoader(lucid.utils.data.TensorDataset(data_all, target_all),
                                               batch_size=16, shuffle=True)
    with lucid.no_grad(), pytest.warns(UserWarning, match="align_corners=False"):
        # Identity initialisation: affine_grid + grid_sample (align_corners=False) give the input back.
        model.eval()
        np.testing.assert_allclose(npy(model.stn(data_all[:4])), npy(data_all[:4]), atol=1e-5)
        before = F.nll_loss(model(data_all), target_all).item()
    model.train()
    for epoch in range(1, 4):
        for batch_idx, (data, target) in enumerate(train_loader):
            data, target = data.to(device), target.to(device)
            optimizer.zero_grad()
            output = model(data)
            loss = F.nll_loss(output, target)
            loss.backward()
            optimizer.step()
    assert model.fc_loc[2].weight.grad is not None and float(model.fc_loc[2].weight.grad.abs().sum()) > 0
    with lucid.no_grad():
        model.eval()
        test_loss, correct = 0, 0
        output = model(data_all)
        test_loss += F.nll_loss(output, target_all, reduction="sum").item()
        pred = output.max(1, keepdim=True)[1]
        correct += pred.eq(target_all.view_as(pred)).sum().item()
    assert test_loss / 32 < before and 0 <= correct <= 32


@pytest.mark.filterwarnings("ignore:Default grid_sample and affine_grid:UserWarning")
def test_stn_torch_parity():
    torch = _torch()
    x = np.random.default_rng(5).normal(size=(3, 1, 28, 28))
    outs = []
    for mod in (lucid, torch):
        net = _set_params(stn_net(mod)(), 7, scale=0.1).eval()
        with mod.no_grad():
            outs.append((npy(net.stn(mod.tensor(x, dtype=mod.float))), npy(net(mod.tensor(x, dtype=mod.float)))))
    for a, b in zip(*outs):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------- Adversarial Example Generation

def fgsm_net(torch):
    nn, F = torch.nn, torch.nn.functional

    class Net(nn.Module):
        def __init__(self):
            super(Net, self).__init__()
            self.conv1 = nn.Conv2d(1, 32, 3, 1)
            self.conv2 = nn.Conv2d(32, 64, 3, 1)
            self.dropout1 = nn.Dropout(0.25)
            self.dropout2 = nn.Dropout(0.5)
            self.fc1 = nn.Linear(9216, 128)
            self.fc2 = nn.Linear(128, 10)

        def forward(self, x):
            x = self.conv1(x)
            x = F.relu(x)
            x = self.conv2(x)
            x = F.relu(x)
            x = F.max_pool2d(x, 2)
            x = self.dropout1(x)
            x = torch.flatten(x, 1)
            x = self.fc1(x)
            x = F.relu(x)
            x = self.dropout2(x)
            x = self.fc2(x)
            output = F.log_softmax(x, dim=1)
            return output

    return Net


def fgsm_attack(image, epsilon, data_grad):
    sign_data_grad = data_grad.sign()
    perturbed_image = image + epsilon * sign_data_grad
    perturbed_image = lucid.clamp(perturbed_image, 0, 1) if isinstance(image, lucid.Tensor) else \
        __import__("torch").clamp(perturbed_image, 0, 1)
    return perturbed_image


def fgsm_run(torch, data, target, eps):
    F = torch.nn.functional
    model = _set_params(fgsm_net(torch)(), 11, scale=0.05)
    model.eval()
    data = torch.tensor(data, dtype=torch.float)
    target = torch.tensor(target)
    data.requires_grad = True
    output = model(data)
    init_pred = output.max(1, keepdim=True)[1]
    loss = F.nll_loss(output, target)
    model.zero_grad()
    loss.backward()
    data_grad = data.grad.data
    perturbed_data = fgsm_attack(data, eps, data_grad)
    output = model(perturbed_data)
    final_pred = output.max(1, keepdim=True)[1]
    return loss.item(), F.nll_loss(output, target).item(), npy(data_grad), npy(perturbed_data), \
        init_pred.tolist(), final_pred.tolist()


def test_adversarial_example_generation():
    rng = np.random.default_rng(3)
    data, target = rng.uniform(0.2, 0.8, size=(1, 1, 28, 28)), np.array([4])
    losses = [fgsm_run(lucid, data, target, eps) for eps in (0.0, 0.01, 0.05)]
    l0, l0_after, g, p, init_pred, _ = losses[0]
    assert l0 == pytest.approx(l0_after, rel=1e-6)
    np.testing.assert_array_equal(p, data.astype(np.float32))
    for eps, (l, l_after, g2, p2, _, _) in zip((0.01, 0.05), losses[1:]):
        np.testing.assert_allclose(p2, np.clip(data.astype(np.float32) + eps * np.sign(g2), 0, 1), atol=1e-7)
        assert l_after > l  # the attack climbs the loss
    # The input gradient against a central finite difference along it (float64 model).
    model = _set_params(fgsm_net(lucid)(), 11, scale=0.05).double().eval()
    x = lucid.tensor(data, requires_grad=True)
    lucid.nn.functional.nll_loss(model(x), lucid.tensor(target)).backward()
    d = npy(x.grad) / np.linalg.norm(npy(x.grad))
    with lucid.no_grad():
        f = [lucid.nn.functional.nll_loss(model(lucid.tensor(data + s * 1e-7 * d)), lucid.tensor(target)).item()
             for s in (1, -1)]
    np.testing.assert_allclose((f[0] - f[1]) / 2e-7, np.linalg.norm(npy(x.grad)), rtol=1e-5)


def test_adversarial_example_torch_parity():
    torch = _torch()
    rng = np.random.default_rng(3)
    data, target = rng.uniform(0.2, 0.8, size=(2, 1, 28, 28)), np.array([4, 1])
    lo, to = fgsm_run(lucid, data, target, 0.05), fgsm_run(torch, data, target, 0.05)
    np.testing.assert_allclose(lo[:2], to[:2], rtol=1e-5)
    np.testing.assert_allclose(lo[2], to[2], rtol=1e-3, atol=1e-9)
    assert lo[4:] == to[4:]


# ------------------------------------------------------------------------------- DCGAN

def dcgan(torch, nz=16, ngf=8, ndf=8, nc=3):
    nn = torch.nn

    def weights_init(m):
        classname = m.__class__.__name__
        if classname.find('Conv') != -1:
            nn.init.normal_(m.weight.data, 0.0, 0.02)
        elif classname.find('BatchNorm') != -1:
            nn.init.normal_(m.weight.data, 1.0, 0.02)
            nn.init.constant_(m.bias.data, 0)

    class Generator(nn.Module):
        def __init__(self, ngpu):
            super(Generator, self).__init__()
            self.ngpu = ngpu
            self.main = nn.Sequential(
                nn.ConvTranspose2d(nz, ngf * 8, 4, 1, 0, bias=False),
                nn.BatchNorm2d(ngf * 8),
                nn.ReLU(True),
                nn.ConvTranspose2d(ngf * 8, ngf * 4, 4, 2, 1, bias=False),
                nn.BatchNorm2d(ngf * 4),
                nn.ReLU(True),
                nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False),
                nn.BatchNorm2d(ngf * 2),
                nn.ReLU(True),
                nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False),
                nn.BatchNorm2d(ngf),
                nn.ReLU(True),
                nn.ConvTranspose2d(ngf, nc, 4, 2, 1, bias=False),
                nn.Tanh()
            )

        def forward(self, input):
            return self.main(input)

    class Discriminator(nn.Module):
        def __init__(self, ngpu):
            super(Discriminator, self).__init__()
            self.ngpu = ngpu
            self.main = nn.Sequential(
                nn.Conv2d(nc, ndf, 4, 2, 1, bias=False),
                nn.LeakyReLU(0.2, inplace=True),
                nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False),
                nn.BatchNorm2d(ndf * 2),
                nn.LeakyReLU(0.2, inplace=True),
                nn.Conv2d(ndf * 2, ndf * 4, 4, 2, 1, bias=False),
                nn.BatchNorm2d(ndf * 4),
                nn.LeakyReLU(0.2, inplace=True),
                nn.Conv2d(ndf * 4, ndf * 8, 4, 2, 1, bias=False),
                nn.BatchNorm2d(ndf * 8),
                nn.LeakyReLU(0.2, inplace=True),
                nn.Conv2d(ndf * 8, 1, 4, 1, 0, bias=False),
                nn.Sigmoid()
            )

        def forward(self, input):
            return self.main(input)

    return Generator(1), Discriminator(1), weights_init


def dcgan_step(torch, netG, netD, real, noise):
    """One D step and one G step of the tutorial's loop; returns errD, errG, D(x), D(G(z))."""
    nn, optim = torch.nn, torch.optim
    criterion = nn.BCELoss()
    real_label, fake_label = 1., 0.
    optimizerD = optim.Adam(netD.parameters(), lr=0.0002, betas=(0.5, 0.999))
    optimizerG = optim.Adam(netG.parameters(), lr=0.0002, betas=(0.5, 0.999))
    netD.zero_grad()
    b_size = real.size(0)
    label = torch.full((b_size,), real_label, dtype=torch.float)
    output = netD(real).view(-1)
    errD_real = criterion(output, label)
    errD_real.backward()
    D_x = output.mean().item()
    fake = netG(noise)
    label.fill_(fake_label)
    output = netD(fake.detach()).view(-1)
    errD_fake = criterion(output, label)
    errD_fake.backward()
    D_G_z1 = output.mean().item()
    errD = errD_real + errD_fake
    optimizerD.step()
    netG.zero_grad()
    label.fill_(real_label)
    output = netD(fake).view(-1)
    errG = criterion(output, label)
    errG.backward()
    D_G_z2 = output.mean().item()
    optimizerG.step()
    return [errD.item(), errG.item(), D_x, D_G_z1, D_G_z2], npy(output)


def test_dcgan():
    lucid.manual_seed(999)
    netG, netD, weights_init = dcgan(lucid)
    netG.apply(weights_init)
    netD.apply(weights_init)
    convs = [m.weight for m in netG.modules() if "Conv" in type(m).__name__]
    w = np.concatenate([npy(c).ravel() for c in convs])
    assert abs(w.mean()) < 2e-3 and abs(w.std() - 0.02) < 2e-3
    for m in netD.modules():
        if isinstance(m, lucid.nn.BatchNorm2d):
            assert (npy(m.bias) == 0).all() and abs(npy(m.weight).mean() - 1) < 0.02
    real = lucid.rand(4, 3, 64, 64) * 2 - 1
    noise = lucid.randn(4, 16, 1, 1)
    assert tuple(netG(noise).shape) == (4, 3, 64, 64)
    before = [p.detach().clone() for p in netG.parameters()]
    (errD, errG, D_x, D_G_z1, D_G_z2), out = dcgan_step(lucid, netG, netD, real, noise)
    np.testing.assert_allclose(errG, -np.log(out.astype(np.float64)).mean(), rtol=1e-5)  # BCE against ones
    assert 0 < D_x < 1 and 0 < D_G_z1 < 1 and errD > 0
    assert all(not np.array_equal(npy(b), npy(p)) for b, p in zip(before, netG.parameters()))


def test_dcgan_torch_parity():
    torch = _torch()
    rng = np.random.default_rng(0)
    real, noise = rng.uniform(-1, 1, size=(4, 3, 64, 64)), rng.normal(size=(4, 16, 1, 1))
    res = []
    for mod in (lucid, torch):
        netG, netD, _ = dcgan(mod)
        _set_params(netG, 1, scale=0.05), _set_params(netD, 2, scale=0.05)
        res.append((repr(netG), repr(netD)) + dcgan_step(mod, netG, netD, mod.tensor(real, dtype=mod.float),
                                                         mod.tensor(noise, dtype=mod.float)))
    (lg, ld, lnum, lout), (tg, td, tnum, tout) = res
    assert lg == tg and ld == td  # BatchNorm2d(..., affine=True, bias=True, ...) as PyTorch 2.13 prints it
    np.testing.assert_allclose(lnum, tnum, rtol=1e-4)
    np.testing.assert_allclose(lout, tout, rtol=1e-4)


# ------------------------------------------- Classifying Names with a Character-Level RNN

allowed_characters = string.ascii_letters + " .,;'" + "_"
n_letters = len(allowed_characters)


def unicodeToAscii(s):
    return ''.join(
        c for c in unicodedata.normalize('NFD', s)
        if unicodedata.category(c) != 'Mn'
        and c in allowed_characters
    )


def letterToIndex(letter):
    if letter not in allowed_characters:
        return allowed_characters.find("_")
    else:
        return allowed_characters.find(letter)


def char_rnn(torch, n_epoch=12, seed=None):
    nn = torch.nn

    def lineToTensor(line):
        tensor = torch.zeros(len(line), 1, n_letters)
        for li, letter in enumerate(line):
            tensor[li][0][letterToIndex(letter)] = 1
        return tensor

    raw = {"English": ["Smith", "Jones", "Brown", "Taylor", "Wilson", "Davies"],
           "Italian": ["Rossi", "Russo", "Ferrari", "Esposito", "Bianchi", "Romano"],
           "Japanese": ["Sato", "Suzuki", "Takahashi", "Tanaka", "Watanabe", "Ito"]}

    class NamesDataset(torch.utils.data.Dataset):
        def __init__(self):
            labels_set = set()
            self.data, self.data_tensors, self.labels, self.labels_tensors = [], [], [], []
            for label, lines in raw.items():
                labels_set.add(label)
                for name in lines:
                    self.data.append(name)
                    self.data_tensors.append(lineToTensor(name))
                    self.labels.append(label)
            self.labels_uniq = sorted(list(labels_set))
            for idx in range(len(self.labels)):
                temp_tensor = torch.tensor([self.labels_uniq.index(self.labels[idx])], dtype=torch.long)
                self.labels_tensors.append(temp_tensor)

        def __len__(self):
            return len(self.data)

        def __getitem__(self, idx):
            return self.labels_tensors[idx], self.data_tensors[idx], self.labels[idx], self.data[idx]

    class CharRNN(nn.Module):
        def __init__(self, input_size, hidden_size, output_size):
            super(CharRNN, self).__init__()
            self.rnn = nn.RNN(input_size, hidden_size)
            self.h2o = nn.Linear(hidden_size, output_size)
            self.softmax = nn.LogSoftmax(dim=1)

        def forward(self, line_tensor):
            rnn_out, hidden = self.rnn(line_tensor)
            output = self.h2o(hidden[0])
            output = self.softmax(output)
            return output

    def label_from_output(output, output_labels):
        top_n, top_i = output.topk(1)
        label_i = top_i[0].item()
        return output_labels[label_i], label_i

    alldata = NamesDataset()
    train_set, test_set = torch.utils.data.random_split(
        alldata, [.85, .15], generator=torch.Generator(device="cpu").manual_seed(2024))
    rnn = CharRNN(n_letters, 32, len(alldata.labels_uniq))
    if seed is not None:
        _set_params(rnn, seed, scale=0.2)
    criterion = nn.NLLLoss()
    optimizer = torch.optim.SGD(rnn.parameters(), lr=0.15)
    rng = random.Random(0)
    all_losses = []
    for it in range(n_epoch):
        rnn.zero_grad()
        batches = list(range(len(alldata)))
        rng.shuffle(batches)
        batches = np.array_split(batches, len(batches) // 6)
        current_loss = 0
        for batch in batches:
            batch_loss = 0
            for i in batch:
                (label_tensor, text_tensor, label, text) = alldata[i]
                output = rnn.forward(text_tensor)
                loss = criterion(output, label_tensor)
                batch_loss += loss
            batch_loss.backward()
            nn.utils.clip_grad_norm_(rnn.parameters(), 3)
            optimizer.step()
            optimizer.zero_grad()
            current_loss += batch_loss.item() / len(batch)
        all_losses.append(current_loss / len(batches))
    confusion = torch.zeros(len(alldata.labels_uniq), len(alldata.labels_uniq))
    rnn.eval()
    with torch.no_grad():
        for i in range(len(alldata)):
            (label_tensor, text_tensor, label, text) = alldata[i]
            guess, guess_i = label_from_output(rnn(text_tensor), alldata.labels_uniq)
            confusion[alldata.labels_uniq.index(label)][guess_i] += 1
    return {"ascii": unicodeToAscii('Ślusàrski'), "ahn": npy(lineToTensor('Ahn')),
            "split": (len(train_set), len(test_set), sorted(train_set.indices + test_set.indices)),
            "losses": all_losses, "confusion": npy(confusion)}


def test_char_rnn_classification():
    lucid.manual_seed(2024)
    out = char_rnn(lucid, n_epoch=25)
    assert out["ascii"] == "Slusarski"
    ahn = out["ahn"]
    assert ahn.shape == (3, 1, n_letters) and ahn.sum() == 3
    assert [int(np.argmax(ahn[i, 0])) for i in range(3)] == [allowed_characters.find(c) for c in "Ahn"]
    assert out["split"] == (16, 2, list(range(18)))
    assert out["losses"][-1] < 0.5 * out["losses"][0]
    assert np.trace(out["confusion"]) >= 12 and out["confusion"].sum() == 18


def test_char_rnn_torch_parity():
    torch = _torch()
    lo, to = char_rnn(lucid, n_epoch=3, seed=4), char_rnn(torch, n_epoch=3, seed=4)
    assert lo["split"][:2] == to["split"][:2]
    np.testing.assert_allclose(lo["losses"], to["losses"], rtol=1e-4)
    np.testing.assert_array_equal(lo["ahn"], to["ahn"])
