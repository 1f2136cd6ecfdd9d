""""Dive into Deep Learning" (d2l-ai/d2l-en, the 1.0 book's PyTorch tab) run on Lucid, thirteenth
batch, second half (the ``d2l.torch`` library core is in ``test_tutorials_batch13_d2l_a.py``):

- "Recurrent Neural Network Implementation from Scratch": ``RNNScratch`` (``state, = state``
  unpacking a (1, h) tensor), ``RNNLMScratch`` (``F.one_hot(X.T, ...)``, ``output_layer``'s
  ``stack``, perplexity plots, ``predict`` with ``int(Y.argmax(axis=2).reshape(1))``), trained
  through ``Trainer(gradient_clip_val=1)`` on a periodic text read by ``TimeMachine``'s
  ``Vocab``/``build``; the concise ``RNN``/``RNNLM`` against it with the same weights;
- "Gated Recurrent Units" / "Long Short-Term Memory" from scratch against ``nn.GRU``/``nn.LSTM``;
  "Deep Recurrent Neural Networks" (``StackedRNNScratch``) and "Bidirectional Recurrent Neural
  Networks" (``BiRNNScratch``, ``reversed(inputs)``) against ``nn.RNN(num_layers=2)`` and
  ``nn.RNN(bidirectional=True)``;
- attention: ``masked_softmax`` (``X[~mask] = value``, ``repeat_interleave``), ``AdditiveAttention``,
  ``DotProductAttention``, ``MultiHeadAttention`` (``transpose_qkv``/``transpose_output``) against
  ``nn.MultiheadAttention``, ``PositionalEncoding`` (``torch.pow(10000, ...)``),
  ``TransformerEncoderBlock`` against ``nn.TransformerEncoderLayer``, ``TransformerDecoderBlock``
  (training-mode causal ``dec_valid_lens`` against step-by-step decoding with cached keys), the
  gradients through ``masked_softmax``'s in-place write (float64 ``gradcheck``), and the GRU
  ``Seq2Seq`` (``init_seq2seq`` through ``_flat_weights_names``, int32 embedding indices, its
  masked loss, ``predict_step``, ``bleu``);
- BERT: ``get_tokens_and_segments``, ``BERTEncoder``, ``MaskLM`` (``X[batch_idx,
  pred_positions]`` with ``repeat_interleave``), ``NextSentencePred``, ``BERTModel`` and
  ``_get_batch_loss_bert`` trained a few Adam steps;
- optimisation algorithms from scratch (momentum, AdaGrad, RMSProp, Adadelta, Adam with the
  ``p[:] -=`` updates under ``no_grad``) run by ``train_ch11`` against ``torch.optim``;
- "Multilayer Perceptrons" (the activations' derivatives through ``y.backward(torch.ones_like(x),
  retain_graph=True)`` and ``x.grad.data.zero_()``), "Working with Sequences" (one-step,
  multi-step predictions fed back by ``multistep_preds[i] = model(...)``, ``k_step_pred``),
  "Attention Pooling by Similarity" (Nadaraya-Watson with four kernels, a bool one cast by
  ``.type``), "Transformers for Vision" (``PatchEmbedding``'s ``flatten(2).transpose(1, 2)``, the
  cls token's ``expand``, ``ViTBlock``, ``ViT`` trained).

Adapted as in the first half; in addition ``load_array`` reads the (synthetic) airfoil batches
in order so that the scratch and ``torch.optim`` runs see the same ones, ``train_ch11``
keeps its losses instead of animating them, ``train_concise_ch11`` gives momentum SGD half the
scratch rate and ``Adadelta`` the scratch ``eps=1e-5`` (its ``MSELoss`` doubles the gradient, to
which momentum SGD is not scale-free and Adadelta's default ``eps`` is not small), and the
sequence page reads predictions back by ``.detach().cpu().numpy()`` (``.cpu()`` added, for the
device runs).

Left as is: ``arange(-8.0, 8.0, 0.1)`` holds ``start + i * step`` rounded from float64 (element
80 is 0.0); PyTorch's vectorised CPU kernel rounds its chunk bases first and lands 1 ulp off in
some elements (there 4.4e-16), so ReLU's derivative at that point is 0 on Lucid, 1 on PyTorch.
"""
import collections
import math
import re

import numpy as np
import pytest

import lucid
import lucid.nn  # noqa: F401
import lucid.optim  # noqa: F401
import lucid.utils.data  # noqa: F401
from test_tutorials_batch13_d2l_a import _copy, _np, make_d2l


def _flat(x):
    if isinstance(x, (list, tuple)):
        return [a for v in x for a in _flat(v)]
    return [np.asarray(x, dtype=np.float64)]


def _sigmoid(a):
    return 1 / (1 + np.exp(-a))


# --------------------------------------------------------------------------- RNN from scratch


def _rnn_scratch(torch, d2l):
    nn = torch.nn

    class RNNScratch(d2l.Module):  #@save
        """The RNN model implemented from scratch."""
        def __init__(self, num_inputs, num_hiddens, sigma=0.01):
            super().__init__()
            self.save_hyperparameters()
            self.W_xh = nn.Parameter(
                torch.randn(num_inputs, num_hiddens) * sigma)
            self.W_hh = nn.Parameter(
                torch.randn(num_hiddens, num_hiddens) * sigma)
            self.b_h = nn.Parameter(torch.zeros(num_hiddens))

        def forward(self, inputs, state=None):
            if state is None:
                # Initial state with shape: (batch_size, num_hiddens)
                state = torch.zeros((inputs.shape[1], self.num_hiddens),
                                  device=inputs.device)
            else:
                state, = state
            outputs = []
            for X in inputs:  # Shape of inputs: (num_steps, batch_size, num_inputs)
                state = torch.tanh(torch.matmul(X, self.W_xh) +
                                 torch.matmul(state, self.W_hh) + self.b_h)
                outputs.append(state)
            return outputs, state

    return RNNScratch


def rnn_pages(torch, d2l, text, W, epochs=8, clip=1):
    nn = torch.nn
    F = torch.nn.functional
    out = {}

    class Vocab:  #@save
        """Vocabulary for text."""
        def __init__(self, tokens=[], min_freq=0, reserved_tokens=[]):
            # Flatten a 2D list if needed
            if tokens and isinstance(tokens[0], list):
                tokens = [token for line in tokens for token in line]
            # Count token frequencies
            counter = collections.Counter(tokens)
            self.token_freqs = sorted(counter.items(), key=lambda x: x[1],
                                      reverse=True)
            # The list of unique tokens
            self.idx_to_token = list(sorted(set(['<unk>'] + reserved_tokens + [
                token for token, freq in self.token_freqs if freq >= min_freq])))
            self.token_to_idx = {token: idx
                                 for idx, token in enumerate(self.idx_to_token)}

        def __len__(self):
            return len(self.idx_to_token)

        def __getitem__(self, tokens):
            if not isinstance(tokens, (list, tuple)):
                return self.token_to_idx.get(tokens, self.unk)
            return [self.__getitem__(token) for token in tokens]

        @property
        def unk(self):  # Index for the unknown token
            return self.token_to_idx['<unk>']

    class TimeMachine(d2l.DataModule):  #@save
        """The Time Machine dataset (here: a given text)."""
        def _preprocess(self, text):
            return re.sub('[^A-Za-z]+', ' ', text).lower()

        def _tokenize(self, text):
            return list(text)

        def build(self, raw_text, vocab=None):
            tokens = self._tokenize(self._preprocess(raw_text))
            if vocab is None: vocab = Vocab(tokens)
            corpus = [vocab[token] for token in tokens]
            return corpus, vocab

        def __init__(self, batch_size, num_steps, num_train=10000, num_val=5000):
            super(TimeMachine, self).__init__()
            self.save_hyperparameters()
            corpus, self.vocab = self.build(text)
            array = torch.tensor([corpus[i:i+num_steps+1]
                                for i in range(len(corpus)-num_steps)])
            self.X, self.Y = array[:,:-1], array[:,1:]

        def get_dataloader(self, train):
            idx = slice(0, self.num_train) if train else slice(
                self.num_train, self.num_train + self.num_val)
            return self.get_tensorloader([self.X, self.Y], train, idx)

    RNNScratch = _rnn_scratch(torch, d2l)

    def check_len(a, n):  #@save
        """Check the length of a list."""
        assert len(a) == n, f'list\'s length {len(a)} != expected length {n}'

    def check_shape(a, shape):  #@save
        """Check the shape of a tensor."""
        assert a.shape == shape, \
                f'tensor\'s shape {a.shape} != expected shape {shape}'

    batch_size, num_inputs, num_hiddens, num_steps = 2, 16, 32, 100
    rnn = RNNScratch(num_inputs, num_hiddens)
    X = torch.ones((num_steps, batch_size, num_inputs))
    outputs, state = rnn(X)
    check_len(outputs, num_steps)
    check_shape(outputs[0], (batch_size, num_hiddens))
    check_shape(state, (batch_size, num_hiddens))

    class RNNLMScratch(d2l.Classifier):  #@save
        """The RNN-based language model implemented from scratch."""
        def __init__(self, rnn, vocab_size, lr=0.01):
            super().__init__()
            self.save_hyperparameters()
            self.init_params()

        def init_params(self):
            self.W_hq = nn.Parameter(
                torch.randn(
                    self.rnn.num_hiddens, self.vocab_size) * self.rnn.sigma)
            self.b_q = nn.Parameter(torch.zeros(self.vocab_size))

        def training_step(self, batch):
            l = self.loss(self(*batch[:-1]), batch[-1])
            self.plot('ppl', torch.exp(l), train=True)
            return l

        def validation_step(self, batch):
            l = self.loss(self(*batch[:-1]), batch[-1])
            self.plot('ppl', torch.exp(l), train=False)

        def one_hot(self, X):
            # Output shape: (num_steps, batch_size, vocab_size)
            return F.one_hot(X.T, self.vocab_size).type(torch.float32)

        def output_layer(self, rnn_outputs):
            outputs = [torch.matmul(H, self.W_hq) + self.b_q for H in rnn_outputs]
            return torch.stack(outputs, 1)

        def forward(self, X, state=None):
            embs = self.one_hot(X)
            rnn_outputs, _ = self.rnn(embs, state)
            return self.output_layer(rnn_outputs)

        def predict(self, prefix, num_preds, vocab, device=None):
            state, outputs = None, [vocab[prefix[0]]]
            for i in range(len(prefix) + num_preds - 1):
                X = torch.tensor([[outputs[-1]]], device=device)
                embs = self.one_hot(X)
                rnn_outputs, state = self.rnn(embs, state)
                if i < len(prefix) - 1:  # Warm-up period
                    outputs.append(vocab[prefix[i + 1]])
                else:  # Predict num_preds steps
                    Y = self.output_layer(rnn_outputs)
                    outputs.append(int(Y.argmax(axis=2).reshape(1)))
            return ''.join([vocab.idx_to_token[i] for i in outputs])

    model = RNNLMScratch(rnn, num_inputs)
    outputs = model(torch.ones((batch_size, num_steps), dtype=torch.int64))
    check_shape(outputs, (batch_size, num_steps, num_inputs))

    class RNN(d2l.Module):  #@save
        """The RNN model implemented with high-level APIs."""
        def __init__(self, num_inputs, num_hiddens):
            super().__init__()
            self.save_hyperparameters()
            self.rnn = nn.RNN(num_inputs, num_hiddens)

        def forward(self, inputs, H=None):
            return self.rnn(inputs, H)

    class RNNLM(RNNLMScratch):  #@save
        """The RNN-based language model implemented with high-level APIs."""
        def init_params(self):
            self.linear = nn.LazyLinear(self.vocab_size)

        def output_layer(self, hiddens):
            return self.linear(hiddens).swapaxes(0, 1)

    data = TimeMachine(batch_size=8, num_steps=6, num_train=48, num_val=16)
    V = len(data.vocab)
    out['vocab'] = data.vocab.idx_to_token
    out['X0'] = data.X[0].tolist(), data.Y[0].tolist()
    rnn = RNNScratch(num_inputs=V, num_hiddens=W['h'])
    model = RNNLMScratch(rnn, vocab_size=V, lr=1)
    _copy(torch, [rnn.W_xh, rnn.W_hh, rnn.b_h, model.W_hq, model.b_q], W['w'])
    Xb, Yb = data.X[:4], data.Y[:4]
    out['onehot'] = _np(model.one_hot(Xb))
    out['logits0'] = _np(model(Xb))
    out['loss0'] = model.loss(model(Xb), Yb).item()
    out['pred0'] = model.predict('it has', 6, data.vocab)
    trainer = d2l.Trainer(max_epochs=epochs, gradient_clip_val=clip, num_gpus=1)
    trainer.fit(model, data)
    out['ppl'] = [float(p.y) for p in model.board.data['train_ppl']]
    out['val_ppl'] = [float(p.y) for p in model.board.data['val_ppl']]
    out['pred'] = model.predict('it has', 12, data.vocab)
    out['params'] = [_np(p) for p in (rnn.W_xh, rnn.W_hh, rnn.b_h, model.W_hq, model.b_q)]
    # the concise model with the same weights computes the same logits
    concise = RNNLM(RNN(num_inputs=V, num_hiddens=W['h']), vocab_size=V, lr=1)
    concise(Xb)
    _copy(torch, concise.parameters(), [W['w'][0].T, W['w'][1].T, W['w'][2], np.zeros(W['h']),
                                         W['w'][3].T, W['w'][4]])
    rnn = RNNScratch(num_inputs=V, num_hiddens=W['h'])
    model = RNNLMScratch(rnn, vocab_size=V, lr=1)
    _copy(torch, [rnn.W_xh, rnn.W_hh, rnn.b_h, model.W_hq, model.b_q], W['w'])
    out['concise'] = _np(concise(Xb)), _np(model(Xb))
    out['concise_pred'] = concise.predict('it has', 6, data.vocab), model.predict('it has', 6, data.vocab)
    return out


_TEXT = 'It has a bag. ' * 12


def _rnn_weights(V=9, h=16):
    rng = np.random.default_rng(31)
    return {'h': h, 'w': [0.3 * rng.standard_normal((V, h)), 0.3 * rng.standard_normal((h, h)),
                          0.1 * rng.standard_normal(h), 0.3 * rng.standard_normal((h, V)),
                          0.1 * rng.standard_normal(V)]}


def _np_rnn_logits(X, w):
    Wxh, Whh, bh, Whq, bq = w
    V = Wxh.shape[0]
    H = np.zeros((X.shape[0], Whh.shape[0]))
    outs = []
    for t in range(X.shape[1]):
        H = np.tanh(np.eye(V)[X[:, t]] @ Wxh + H @ Whh + bh)
        outs.append(H @ Whq + bq)
    return np.stack(outs, 1)


def test_rnn_from_scratch():
    lucid.manual_seed(0)
    W = _rnn_weights()
    r = rnn_pages(lucid, make_d2l(lucid, shuffle=False), _TEXT, W)
    assert r['vocab'] == [' ', '<unk>', 'a', 'b', 'g', 'h', 'i', 's', 't']
    assert r['X0'] == ([6, 8, 0, 5, 2, 7], [8, 0, 5, 2, 7, 0])  # 'it has' -> 't has '
    X = np.array([[6, 8, 0, 5, 2, 7], [8, 0, 5, 2, 7, 0], [0, 5, 2, 7, 0, 2], [5, 2, 7, 0, 2, 0]])
    Y = np.array([r[1:] + [n] for r, n in zip(X.tolist(), [0, 2, 0, 3])])
    assert (r['onehot'] == np.eye(9)[X.T]).all()
    logits = _np_rnn_logits(X, W['w'])
    np.testing.assert_allclose(r['logits0'], logits, rtol=1e-4, atol=1e-5)
    z = logits.reshape(-1, 9)
    ref = (np.log(np.exp(z).sum(1)) - z[np.arange(24), Y.ravel()]).mean()
    assert r['loss0'] == pytest.approx(ref, rel=1e-5)
    assert r['pred0'][:6] == 'it has' and len(r['pred0']) == 12
    # 8 epochs of 6 clipped SGD steps at lr 1: the periodic text becomes nearly predictable
    assert r['ppl'][-1] < 0.3 * r['ppl'][0] and r['val_ppl'][-1] < 2.0
    assert r['pred'] == 'it has a bag it ha'
    np.testing.assert_allclose(*r['concise'], rtol=1e-4, atol=1e-5)
    assert r['concise_pred'][0] == r['concise_pred'][1]


def test_rnn_gradient_clipping_bounds_the_step():
    lucid.manual_seed(0)
    W = _rnn_weights()
    W['w'] = [10 * w for w in W['w']]  # large weights: large gradients, always clipped
    d2l = make_d2l(lucid, shuffle=False)
    r = rnn_pages(lucid, d2l, _TEXT, W, epochs=1, clip=0.5)
    moved = math.sqrt(sum(((a - b) ** 2).sum() for a, b in zip(r['params'], W['w'])))
    assert moved <= 6 * 0.5 * (1 + 1e-5)  # 6 steps of lr 1 with |g| <= 0.5


def test_rnn_from_scratch_torch_parity():
    torch = pytest.importorskip("torch")
    W = _rnn_weights()
    r = rnn_pages(lucid, make_d2l(lucid, shuffle=False), _TEXT, W)
    t = rnn_pages(torch, make_d2l(torch, shuffle=False), _TEXT, W)
    for k in ('vocab', 'X0', 'pred0', 'pred', 'concise_pred'):
        assert r[k] == t[k], k
    for k in ('onehot', 'logits0', 'loss0', 'ppl', 'val_ppl'):
        np.testing.assert_allclose(r[k], t[k], rtol=1e-4, atol=1e-5)
    for a, b in zip(r['params'], t['params']):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


# --------------------------------------------------------------------------- GRU, LSTM


def gated_pages(torch, d2l, W, X):
    nn = torch.nn
    out = {}

    class GRUScratch(d2l.Module):
        def __init__(self, num_inputs, num_hiddens, sigma=0.01):
            super().__init__()
            self.save_hyperparameters()

            init_weight = lambda *shape: nn.Parameter(torch.randn(*shape) * sigma)
            triple = lambda: (init_weight(num_inputs, num_hiddens),
                              init_weight(num_hiddens, num_hiddens),
                              nn.Parameter(torch.zeros(num_hiddens)))
            self.W_xz, self.W_hz, self.b_z = triple()  # Update gate
            self.W_xr, self.W_hr, self.b_r = triple()  # Reset gate
            self.W_xh, self.W_hh, self.b_h = triple()  # Candidate hidden state

        def forward(self, inputs, H=None):
            if H is None:
                # Initial state with shape: (batch_size, num_hiddens)
                H = torch.zeros((inputs.shape[1], self.num_hiddens),
                              device=inputs.device)
            outputs = []
            for X in inputs:
                Z = torch.sigmoid(torch.matmul(X, self.W_xz) +
                                torch.matmul(H, self.W_hz) + self.b_z)
                R = torch.sigmoid(torch.matmul(X, self.W_xr) +
                                torch.matmul(H, self.W_hr) + self.b_r)
                H_tilde = torch.tanh(torch.matmul(X, self.W_xh) +
                                   torch.matmul(R * H, self.W_hh) + self.b_h)
                H = Z * H + (1 - Z) * H_tilde
                outputs.append(H)
            return outputs, H

    class LSTMScratch(d2l.Module):
        def __init__(self, num_inputs, num_hiddens, sigma=0.01):
            super().__init__()
            self.save_hyperparameters()

            init_weight = lambda *shape: nn.Parameter(torch.randn(*shape) * sigma)
            triple = lambda: (init_weight(num_inputs, num_hiddens),
                              init_weight(num_hiddens, num_hiddens),
                              nn.Parameter(torch.zeros(num_hiddens)))
            self.W_xi, self.W_hi, self.b_i = triple()  # Input gate
            self.W_xf, self.W_hf, self.b_f = triple()  # Forget gate
            self.W_xo, self.W_ho, self.b_o = triple()  # Output gate
            self.W_xc, self.W_hc, self.b_c = triple()  # Input node

        def forward(self, inputs, H_C=None):
            if H_C is None:
                # Initial state with shape: (batch_size, num_hiddens)
                H = torch.zeros((inputs.shape[1], self.num_hiddens),
                              device=inputs.device)
                C = torch.zeros((inputs.shape[1], self.num_hiddens),
                              device=inputs.device)
            else:
                H, C = H_C
            outputs = []
            for X in inputs:
                I = torch.sigmoid(torch.matmul(X, self.W_xi) +
                                torch.matmul(H, self.W_hi) + self.b_i)
                F = torch.sigmoid(torch.matmul(X, self.W_xf) +
                                torch.matmul(H, self.W_hf) + self.b_f)
                O = torch.sigmoid(torch.matmul(X, self.W_xo) +
                                torch.matmul(H, self.W_ho) + self.b_o)
                C_tilde = torch.tanh(torch.matmul(X, self.W_xc) +
                                   torch.matmul(H, self.W_hc) + self.b_c)
                C = F * C + I * C_tilde
                H = O * torch.tanh(C)
                outputs.append(H)
            return outputs, (H, C)

    class GRU(d2l.Module):  #@save
        """The multilayer GRU model."""
        def __init__(self, num_inputs, num_hiddens, num_layers=1, dropout=0):
            d2l.Module.__init__(self)
            self.save_hyperparameters()
            self.rnn = nn.GRU(num_inputs, num_hiddens, num_layers,
                              dropout=dropout)

        def forward(self, inputs, H=None):
            return self.rnn(inputs, H)

    class LSTM(d2l.Module):
        def __init__(self, num_inputs, num_hiddens):
            d2l.Module.__init__(self)
            self.save_hyperparameters()
            self.rnn = nn.LSTM(num_inputs, num_hiddens)

        def forward(self, inputs, H_C=None):
            return self.rnn(inputs, H_C)

    X = torch.tensor(X)
    gru = GRUScratch(4, 5)
    _copy(torch, gru.parameters(), W['gru'])
    outs, H = gru(X)
    out['gru'] = np.stack([_np(o) for o in outs]), _np(H)
    lstm = LSTMScratch(4, 5)
    _copy(torch, lstm.parameters(), W['lstm'])
    outs, (H, C) = lstm(X)
    out['lstm'] = np.stack([_np(o) for o in outs]), _np(H), _np(C)
    # concise: PyTorch's gates are stacked (i, f, g, o) for LSTM, (r, z, n) for GRU
    L = W['lstm']
    concise = LSTM(4, 5)
    _copy(torch, concise.parameters(), [np.concatenate([L[0].T, L[3].T, L[9].T, L[6].T]),
                                        np.concatenate([L[1].T, L[4].T, L[10].T, L[7].T]),
                                        np.concatenate([L[2], L[5], L[11], L[8]]), np.zeros(20)])
    o, (H, C) = concise(X)
    out['lstm_concise'] = _np(o), _np(H[0]), _np(C[0])
    G = W['gru']
    concise = GRU(4, 5)
    _copy(torch, concise.parameters(), [np.concatenate([G[3].T, G[0].T, G[6].T]),
                                        np.concatenate([G[4].T, G[1].T, G[7].T]),
                                        np.concatenate([G[5], G[2], G[8]]), W['gru_bhh']])
    o, H = concise(X)
    out['gru_concise'] = _np(o), _np(H[0])
    return out


def _gated_data():
    rng = np.random.default_rng(41)
    shapes = [(4, 5), (5, 5), (5,)]
    gru = [0.5 * rng.standard_normal(s) for s in shapes * 3]
    lstm = [0.5 * rng.standard_normal(s) for s in shapes * 4]
    return {'gru': gru, 'lstm': lstm, 'gru_bhh': 0.3 * rng.standard_normal(15)}, \
        rng.standard_normal((6, 3, 4)).astype(np.float32)


def test_gru_lstm_scratch_and_concise():
    lucid.manual_seed(0)
    W, X = _gated_data()
    r = gated_pages(lucid, make_d2l(lucid), W, X)
    g = W['gru']
    H, outs = np.zeros((3, 5)), []
    for x in X.astype(np.float64):
        Z = _sigmoid(x @ g[0] + H @ g[1] + g[2])
        R = _sigmoid(x @ g[3] + H @ g[4] + g[5])
        H = Z * H + (1 - Z) * np.tanh(x @ g[6] + (R * H) @ g[7] + g[8])
        outs.append(H)
    np.testing.assert_allclose(r['gru'][0], np.stack(outs), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(r['gru'][1], H, rtol=1e-4, atol=1e-5)
    # nn.GRU applies the reset gate after the recurrent matmul: r * (W_hn h + b_hn)
    H, outs, bh = np.zeros((3, 5)), [], W['gru_bhh']
    for x in X.astype(np.float64):
        R = _sigmoid(x @ g[3] + g[5] + H @ g[4] + bh[:5])
        Z = _sigmoid(x @ g[0] + g[2] + H @ g[1] + bh[5:10])
        N = np.tanh(x @ g[6] + g[8] + R * (H @ g[7] + bh[10:]))
        H = (1 - Z) * N + Z * H
        outs.append(H)
    np.testing.assert_allclose(r['gru_concise'][0], np.stack(outs), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(r['gru_concise'][1], H, rtol=1e-4, atol=1e-5)
    l = W['lstm']
    H, C, outs = np.zeros((3, 5)), np.zeros((3, 5)), []
    for x in X.astype(np.float64):
        I, Fg, O = (_sigmoid(x @ l[k] + H @ l[k + 1] + l[k + 2]) for k in (0, 3, 6))
        C = Fg * C + I * np.tanh(x @ l[9] + H @ l[10] + l[11])
        H = O * np.tanh(C)
        outs.append(H)
    for got, ref in zip(r['lstm'], (np.stack(outs), H, C)):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
    for got, ref in zip(r['lstm_concise'], r['lstm']):  # from scratch equals nn.LSTM
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def test_gru_lstm_torch_parity():
    torch = pytest.importorskip("torch")
    W, X = _gated_data()
    r, t = gated_pages(lucid, make_d2l(lucid), W, X), gated_pages(torch, make_d2l(torch), W, X)
    for k in r:
        for a, b in zip(r[k], t[k]):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------- attention


def attention_pages(torch, d2l, W):
    nn = torch.nn
    out = {}

    def masked_softmax(X, valid_lens):  #@save
        """Perform softmax operation by masking elements on the last axis."""
        # X: 3D tensor, valid_lens: 1D or 2D tensor
        def _sequence_mask(X, valid_len, value=0):
            maxlen = X.size(1)
            mask = torch.arange((maxlen), dtype=torch.float32,
                                device=X.device)[None, :] < valid_len[:, None]
            X[~mask] = value
            return X

        if valid_lens is None:
            return nn.functional.softmax(X, dim=-1)
        else:
            shape = X.shape
            if valid_lens.dim() == 1:
                valid_lens = torch.repeat_interleave(valid_lens, shape[1])
            else:
                valid_lens = valid_lens.reshape(-1)
            # On the last axis, replace masked elements with a very large negative
            # value, whose exponentiation outputs 0
            X = _sequence_mask(X.reshape(-1, shape[-1]), valid_lens, value=-1e6)
            return nn.functional.softmax(X.reshape(shape), dim=-1)

    S = torch.tensor(W['S'])
    out['ms'] = [_np(masked_softmax(S.clone(), torch.tensor([2, 3]))),
                 _np(masked_softmax(S.clone(), torch.tensor([[1, 3], [2, 4]]))),
                 _np(masked_softmax(S.clone(), None))]

    class DotProductAttention(nn.Module):  #@save
        """Scaled dot product attention."""
        def __init__(self, dropout):
            super().__init__()
            self.dropout = nn.Dropout(dropout)

        # Shape of queries: (batch_size, no. of queries, d)
        # Shape of keys: (batch_size, no. of key-value pairs, d)
        # Shape of values: (batch_size, no. of key-value pairs, value dimension)
        # Shape of valid_lens: (batch_size,) or (batch_size, no. of queries)
        def forward(self, queries, keys, values, valid_lens=None):
            d = queries.shape[-1]
            # Swap the last two dimensions of keys with keys.transpose(1, 2)
            scores = torch.bmm(queries, keys.transpose(1, 2)) / math.sqrt(d)
            self.attention_weights = masked_softmax(scores, valid_lens)
            return torch.bmm(self.dropout(self.attention_weights), values)

    class AdditiveAttention(nn.Module):  #@save
        """Additive attention."""
        def __init__(self, num_hiddens, dropout, **kwargs):
            super(AdditiveAttention, self).__init__(**kwargs)
            self.W_k = nn.LazyLinear(num_hiddens, bias=False)
            self.W_q = nn.LazyLinear(num_hiddens, bias=False)
            self.w_v = nn.LazyLinear(1, bias=False)
            self.dropout = nn.Dropout(dropout)

        def forward(self, queries, keys, values, valid_lens):
            queries, keys = self.W_q(queries), self.W_k(keys)
            # After dimension expansion, shape of queries: (batch_size, no. of
            # queries, 1, num_hiddens) and shape of keys: (batch_size, 1, no. of
            # key-value pairs, num_hiddens). Sum them up with broadcasting
            features = queries.unsqueeze(2) + keys.unsqueeze(1)
            features = torch.tanh(features)
            # There is only one output of self.w_v, so we remove the last
            # one-dimensional entry from the shape. Shape of scores: (batch_size,
            # no. of queries, no. of key-value pairs)
            scores = self.w_v(features).squeeze(-1)
            self.attention_weights = masked_softmax(scores, valid_lens)
            # Shape of values: (batch_size, no. of key-value pairs, value
            # dimension)
            return torch.bmm(self.dropout(self.attention_weights), values)

    queries, keys, values = (torch.tensor(W[k]) for k in ('q', 'k', 'v'))
    valid_lens = torch.tensor([2, 6])
    attention = DotProductAttention(dropout=0.5)
    attention.eval()
    out['dot'] = _np(attention(queries[:, :, :2], keys, values, valid_lens)), _np(attention.attention_weights)
    attention = AdditiveAttention(num_hiddens=8, dropout=0.1)
    attention.eval()
    attention(queries, keys, values, valid_lens)
    _copy(torch, [attention.W_k.weight, attention.W_q.weight, attention.w_v.weight], [W['Wk'], W['Wq'], W['wv']])
    out['add'] = _np(attention(queries, keys, values, valid_lens)), _np(attention.attention_weights)

    class MultiHeadAttention(d2l.Module):  #@save
        """Multi-head attention."""
        def __init__(self, num_hiddens, num_heads, dropout, bias=False, **kwargs):
            super().__init__()
            self.num_heads = num_heads
            self.attention = DotProductAttention(dropout)
            self.W_q = nn.LazyLinear(num_hiddens, bias=bias)
            self.W_k = nn.LazyLinear(num_hiddens, bias=bias)
            self.W_v = nn.LazyLinear(num_hiddens, bias=bias)
            self.W_o = nn.LazyLinear(num_hiddens, bias=bias)

        def forward(self, queries, keys, values, valid_lens):
            # Shape of queries, keys, or values:
            # (batch_size, no. of queries or key-value pairs, num_hiddens)
            # Shape of valid_lens: (batch_size,) or (batch_size, no. of queries)
            # After transposing, shape of output queries, keys, or values:
            # (batch_size * num_heads, no. of queries or key-value pairs,
            # num_hiddens / num_heads)
            queries = self.transpose_qkv(self.W_q(queries))
            keys = self.transpose_qkv(self.W_k(keys))
            values = self.transpose_qkv(self.W_v(values))

            if valid_lens is not None:
                # On axis 0, copy the first item (scalar or vector) for num_heads
                # times, then copy the next item, and so on
                valid_lens = torch.repeat_interleave(
                    valid_lens, repeats=self.num_heads, dim=0)

            # Shape of output: (batch_size * num_heads, no. of queries,
            # num_hiddens / num_heads)
            output = self.attention(queries, keys, values, valid_lens)
            # Shape of output_concat: (batch_size, no. of queries, num_hiddens)
            output_concat = self.transpose_output(output)
            return self.W_o(output_concat)

        def transpose_qkv(self, X):
            """Transposition for parallel computation of multiple attention heads."""
            # Shape of input X: (batch_size, no. of queries or key-value pairs,
            # num_hiddens). Shape of output X: (batch_size, no. of queries or
            # key-value pairs, num_heads, num_hiddens / num_heads)
            X = X.reshape(X.shape[0], X.shape[1], self.num_heads, -1)
            # Shape of output X: (batch_size, num_heads, no. of queries or key-value
            # pairs, num_hiddens / num_heads)
            X = X.permute(0, 2, 1, 3)
            # Shape of output: (batch_size * num_heads, no. of queries or key-value
            # pairs, num_hiddens / num_heads)
            return X.reshape(-1, X.shape[2], X.shape[3])

        def transpose_output(self, X):
            """Reverse the operation of transpose_qkv."""
            X = X.reshape(-1, self.num_heads, X.shape[1], X.shape[2])
            X = X.permute(0, 2, 1, 3)
            return X.reshape(X.shape[0], X.shape[1], -1)

    # (#@save: the ViT page and the gradient checks use them)
    d2l.MultiHeadAttention, d2l.AdditiveAttention = MultiHeadAttention, AdditiveAttention
    num_hiddens, num_heads = 8, 2
    attention = MultiHeadAttention(num_hiddens, num_heads, 0.5)
    attention.eval()
    X, Y = torch.tensor(W['X']), torch.tensor(W['Y'])
    valid_lens = torch.tensor([3, 2])
    attention(X, Y, Y, valid_lens)
    _copy(torch, attention.parameters(), W['mha'])
    out['mha'] = _np(attention(X, Y, Y, valid_lens))
    ref = nn.MultiheadAttention(num_hiddens, num_heads, bias=False, batch_first=True)
    _copy(torch, ref.parameters(), [np.concatenate(W['mha'][:3]), W['mha'][3]])
    ref.eval()
    key_padding_mask = torch.arange(6)[None, :] >= valid_lens[:, None]
    out['mha_nn'] = _np(ref(X, Y, Y, key_padding_mask=key_padding_mask, need_weights=False)[0])

    class PositionalEncoding(nn.Module):  #@save
        """Positional encoding."""
        def __init__(self, num_hiddens, dropout, max_len=1000):
            super().__init__()
            self.dropout = nn.Dropout(dropout)
            # Create a long enough P
            self.P = torch.zeros((1, max_len, num_hiddens))
            X = torch.arange(max_len, dtype=torch.float32).reshape(
                -1, 1) / torch.pow(10000, torch.arange(
                0, num_hiddens, 2, dtype=torch.float32) / num_hiddens)
            self.P[:, :, 0::2] = torch.sin(X)
            self.P[:, :, 1::2] = torch.cos(X)

        def forward(self, X):
            X = X + self.P[:, :X.shape[1], :].to(X.device)
            return self.dropout(X)

    encoding_dim, num_steps = 8, 12
    pos_encoding = PositionalEncoding(encoding_dim, 0)
    X = pos_encoding(torch.zeros((1, num_steps, encoding_dim)))
    out['pe'] = _np(X), _np(pos_encoding.P[:, :X.shape[1], :])

    class PositionWiseFFN(nn.Module):  #@save
        """The positionwise feed-forward network."""
        def __init__(self, ffn_num_hiddens, ffn_num_outputs):
            super().__init__()
            self.dense1 = nn.LazyLinear(ffn_num_hiddens)
            self.relu = nn.ReLU()
            self.dense2 = nn.LazyLinear(ffn_num_outputs)

        def forward(self, X):
            return self.dense2(self.relu(self.dense1(X)))

    class AddNorm(nn.Module):  #@save
        """The residual connection followed by layer normalization."""
        def __init__(self, norm_shape, dropout):
            super().__init__()
            self.dropout = nn.Dropout(dropout)
            self.ln = nn.LayerNorm(norm_shape)

        def forward(self, X, Y):
            return self.ln(self.dropout(Y) + X)

    class TransformerEncoderBlock(nn.Module):  #@save
        """The Transformer encoder block."""
        def __init__(self, num_hiddens, ffn_num_hiddens, num_heads, dropout,
                     use_bias=False):
            super().__init__()
            self.attention = MultiHeadAttention(num_hiddens, num_heads,
                                                    dropout, use_bias)
            self.addnorm1 = AddNorm(num_hiddens, dropout)
            self.ffn = PositionWiseFFN(ffn_num_hiddens, num_hiddens)
            self.addnorm2 = AddNorm(num_hiddens, dropout)

        def forward(self, X, valid_lens):
            Y = self.addnorm1(X, self.attention(X, X, X, valid_lens))
            return self.addnorm2(Y, self.ffn(Y))

    d2l.TransformerEncoderBlock = TransformerEncoderBlock  # (#@save: BERT uses it)
    X = torch.tensor(W['Y'][:, :5])
    valid_lens = torch.tensor([3, 2])
    encoder_blk = TransformerEncoderBlock(8, 16, 2, 0.0)
    encoder_blk(X, valid_lens)
    _copy(torch, encoder_blk.parameters(), W['enc'])
    ps = W['enc']
    out['enc'] = _np(encoder_blk(X, valid_lens))
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    layer.train()  # (the eval fast path is another kernel; dropout is 0 anyway)
    named = dict(layer.named_parameters())
    _copy(torch, [named[k] for k in ('self_attn.in_proj_weight', 'self_attn.in_proj_bias', 'self_attn.out_proj.weight',
                                     'self_attn.out_proj.bias', 'linear1.weight', 'linear1.bias', 'linear2.weight',
                                     'linear2.bias', 'norm1.weight', 'norm1.bias', 'norm2.weight', 'norm2.bias')],
          [np.concatenate(ps[:3]), np.zeros(24), ps[3], np.zeros(8), ps[6], ps[7], ps[8], ps[9], ps[4], ps[5],
           ps[10], ps[11]])
    out['enc_nn'] = _np(layer(X, src_key_padding_mask=torch.arange(5)[None, :] >= valid_lens[:, None]))

    class TransformerDecoderBlock(nn.Module):
        # The i-th block in the Transformer decoder
        def __init__(self, num_hiddens, ffn_num_hiddens, num_heads, dropout, i):
            super().__init__()
            self.i = i
            self.attention1 = MultiHeadAttention(num_hiddens, num_heads,
                                                     dropout)
            self.addnorm1 = AddNorm(num_hiddens, dropout)
            self.attention2 = MultiHeadAttention(num_hiddens, num_heads,
                                                     dropout)
            self.addnorm2 = AddNorm(num_hiddens, dropout)
            self.ffn = PositionWiseFFN(ffn_num_hiddens, num_hiddens)
            self.addnorm3 = AddNorm(num_hiddens, dropout)

        def forward(self, X, state):
            enc_outputs, enc_valid_lens = state[0], state[1]
            # During training, all the tokens of any output sequence are processed
            # at the same time, so state[2][self.i] is None as initialized. When
            # decoding any output sequence token by token during prediction,
            # state[2][self.i] contains representations of the decoded output at
            # the i-th block up to the current time step
            if state[2][self.i] is None:
                key_values = X
            else:
                key_values = torch.cat((state[2][self.i], X), dim=1)
            state[2][self.i] = key_values
            if self.training:
                batch_size, num_steps, _ = X.shape
                # Shape of dec_valid_lens: (batch_size, num_steps), where every
                # row is [1, 2, ..., num_steps]
                dec_valid_lens = torch.arange(
                    1, num_steps + 1, device=X.device).repeat(batch_size, 1)
            else:
                dec_valid_lens = None
            # Self-attention
            X2 = self.attention1(X, key_values, key_values, dec_valid_lens)
            Y = self.addnorm1(X, X2)
            # Encoder-decoder attention. Shape of enc_outputs:
            # (batch_size, num_steps, num_hiddens)
            Y2 = self.attention2(Y, enc_outputs, enc_outputs, enc_valid_lens)
            Z = self.addnorm2(Y, Y2)
            return self.addnorm3(Z, self.ffn(Z)), state

    decoder_blk = TransformerDecoderBlock(8, 16, 2, 0.0, 0)
    X = torch.tensor(W['X'])
    enc_outputs = torch.tensor(W['Y'][:, :5])
    decoder_blk(X, [enc_outputs, valid_lens, [None]])
    rng = np.random.default_rng(53)
    _copy(torch, decoder_blk.parameters(), [(1.0 if len(p.shape) == 1 and 'ln' in n and n.endswith('weight') else 0.0)
                                            + 0.3 * rng.standard_normal(tuple(p.shape))
                                            for n, p in decoder_blk.named_parameters()])
    state = [enc_outputs, valid_lens, [None]]
    out['dec'] = _np(decoder_blk(X, state)[0])  # training mode: causal through 2-D valid_lens
    decoder_blk.eval()
    state, steps = [enc_outputs, valid_lens, [None]], []
    for t in range(X.shape[1]):  # prediction: one token at a time, keys cached in state[2]
        Y, state = decoder_blk(X[:, t:t + 1], state)
        steps.append(_np(Y))
    out['dec_steps'] = np.concatenate(steps, 1), tuple(state[2][0].shape)
    return out


def _attention_data():
    rng = np.random.default_rng(51)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)
    return {'S': f(2, 2, 4), 'q': f(2, 1, 20), 'k': f(2, 10, 2), 'v': f(2, 10, 4), 'Wk': 0.5 * f(8, 2),
            'Wq': 0.5 * f(8, 20), 'wv': 0.5 * f(1, 8), 'X': f(2, 4, 8), 'Y': f(2, 6, 8),
            'mha': [0.4 * f(8, 8) for _ in range(4)],
            'enc': [0.4 * f(8, 8) for _ in range(4)] + [1 + 0.2 * f(8), 0.2 * f(8), 0.3 * f(16, 8), 0.2 * f(16),
                                                        0.3 * f(8, 16), 0.2 * f(8), 1 + 0.2 * f(8), 0.2 * f(8)]}


def _np_softmax(z):
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _np_masked_softmax(S, lens):
    lens = np.broadcast_to(np.asarray(lens).reshape(S.shape[0], -1), S.shape[:2])
    return _np_softmax(np.where(np.arange(S.shape[-1]) < lens[..., None], S, -1e6))


def _np_mha(X, Y, lens, Wq, Wk, Wv, Wo, h=2):
    def split(A):
        b, n, d = A.shape
        return A.reshape(b, n, h, d // h).transpose(0, 2, 1, 3)
    q, k, v = split(X @ Wq.T), split(Y @ Wk.T), split(Y @ Wv.T)
    s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1])
    s = np.where(np.arange(Y.shape[1]) < np.asarray(lens)[:, None, None, None], s, -1e6)
    o = (_np_softmax(s) @ v).transpose(0, 2, 1, 3).reshape(X.shape[0], X.shape[1], -1)
    return o @ Wo.T


def test_attention_mechanisms():
    W = _attention_data()
    r = attention_pages(lucid, make_d2l(lucid), W)
    S = W['S'].astype(np.float64)
    np.testing.assert_allclose(r['ms'][0], _np_masked_softmax(S, [2, 3]), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(r['ms'][1], _np_masked_softmax(S, [[1, 3], [2, 4]]), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(r['ms'][2], _np_softmax(S), rtol=1e-5)
    assert (r['ms'][0][0, :, 2:] == 0).all() and (r['ms'][1][0, 0, 1:] == 0).all()
    q, k, v = (W[n].astype(np.float64) for n in ('q', 'k', 'v'))
    a = _np_masked_softmax(q[:, :, :2] @ k.transpose(0, 2, 1) / math.sqrt(2), [2, 6])
    np.testing.assert_allclose(r['dot'][1], a, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(r['dot'][0], a @ v, rtol=1e-5, atol=1e-6)
    feats = np.tanh((q @ W['Wq'].T)[:, :, None, :] + (k @ W['Wk'].T)[:, None, :, :])
    a = _np_masked_softmax((feats @ W['wv'].T)[..., 0], [2, 6])
    np.testing.assert_allclose(r['add'][1], a, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(r['add'][0], a @ v, rtol=1e-5, atol=1e-6)
    ref = _np_mha(W['X'].astype(np.float64), W['Y'].astype(np.float64), [3, 2], *W['mha'])
    np.testing.assert_allclose(r['mha'], ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(r['mha_nn'], r['mha'], rtol=1e-4, atol=1e-5)  # from scratch equals nn
    pe, P = r['pe']
    pos = np.arange(12)[:, None] / 10000 ** (np.arange(0, 8, 2) / 8)
    np.testing.assert_allclose(pe[0, :, 0::2], np.sin(pos), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(pe[0, :, 1::2], np.cos(pos), rtol=1e-5, atol=1e-6)
    assert (pe == P).all()
    e = W['enc']
    ln = lambda A, g, b: (A - A.mean(-1, keepdims=True)) / np.sqrt(A.var(-1, keepdims=True) + 1e-5) * g + b
    X = W['Y'][:, :5].astype(np.float64)
    Y = ln(X + _np_mha(X, X, [3, 2], *e[:4]), e[4], e[5])
    ref = ln(Y + np.maximum(Y @ e[6].T + e[7], 0) @ e[8].T + e[9], e[10], e[11])
    np.testing.assert_allclose(r['enc'], ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(r['enc_nn'], r['enc'], rtol=1e-4, atol=1e-5)
    # the decoder block trained on whole sequences (causal masks [1..t]) gives, at each position,
    # what step-by-step prediction with cached keys gives
    steps, cache_shape = r['dec_steps']
    assert r['dec'].shape == (2, 4, 8) and cache_shape == (2, 4, 8)
    np.testing.assert_allclose(steps, r['dec'], rtol=1e-4, atol=1e-5)


def test_attention_gradients_through_the_in_place_mask():
    # masked_softmax writes -1e6 into a view of the scores in place (X[~mask] = value); the
    # gradients through it, checked in float64 against central differences
    d2l = make_d2l(lucid)
    attention_pages(lucid, d2l, _attention_data())
    rng = np.random.default_rng(52)
    q, k, v = (lucid.tensor(rng.standard_normal(s), requires_grad=True) for s in ((2, 2, 3), (2, 4, 2), (2, 4, 1)))
    add = d2l.AdditiveAttention(num_hiddens=3, dropout=0.0)
    add(q.float(), k.float(), v.float(), lucid.tensor([2, 4]))
    add.double()
    assert lucid.autograd.gradcheck(lambda q, k, v: add(q, k, v, lucid.tensor([[1, 3], [4, 2]])), (q, k, v))
    mha = d2l.MultiHeadAttention(4, 2, 0.0)
    X = lucid.tensor(rng.standard_normal((2, 2, 4)), requires_grad=True)
    Y = lucid.tensor(rng.standard_normal((2, 3, 4)), requires_grad=True)
    mha(X.float(), Y.float(), Y.float(), lucid.tensor([3, 2]))
    mha.double()
    assert lucid.autograd.gradcheck(lambda X, Y: mha(X, Y, Y, lucid.tensor([2, 1])), (X, Y))
    out = mha(X, Y, Y, lucid.tensor([2, 1]))
    (g,) = lucid.autograd.grad(out.sum(), [Y])
    assert (g[1, 1:] == 0).all() and (g[0, 2:] == 0).all() and (g[0, :2] != 0).all()  # masked keys get none


def test_attention_mechanisms_torch_parity():
    torch = pytest.importorskip("torch")
    W = _attention_data()
    r, t = attention_pages(lucid, make_d2l(lucid), W), attention_pages(torch, make_d2l(torch), W)
    for k in r:
        for a, b in zip(r[k] if isinstance(r[k], (list, tuple)) else [r[k]],
                        t[k] if isinstance(t[k], (list, tuple)) else [t[k]]):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


# --------------------------------------------------------------------------- seq2seq


def seq2seq_page(torch, d2l, data_arrays, weights=None, epochs=4):
    nn = torch.nn
    out = {}

    class Encoder(nn.Module):  #@save
        """The base encoder interface for the encoder--decoder architecture."""
        def __init__(self):
            super().__init__()

    class Decoder(nn.Module):  #@save
        """The base decoder interface for the encoder--decoder architecture."""
        def __init__(self):
            super().__init__()

    class EncoderDecoder(d2l.Classifier):  #@save
        """The base class for the encoder--decoder architecture."""
        def __init__(self, encoder, decoder):
            super().__init__()
            self.encoder = encoder
            self.decoder = decoder

        def forward(self, enc_X, dec_X, *args):
            enc_all_outputs = self.encoder(enc_X, *args)
            dec_state = self.decoder.init_state(enc_all_outputs, *args)
            # Return decoder output only
            return self.decoder(dec_X, dec_state)[0]

        def predict_step(self, batch, device, num_steps,
                         save_attention_weights=False):
            batch = [d2l.to(a, device) for a in batch]
            src, tgt, src_valid_len, _ = batch
            enc_all_outputs = self.encoder(src, src_valid_len)
            dec_state = self.decoder.init_state(enc_all_outputs, src_valid_len)
            outputs, attention_weights = [torch.unsqueeze(tgt[:, 0], 1), ], []
            for _ in range(num_steps):
                Y, dec_state = self.decoder(outputs[-1], dec_state)
                outputs.append(Y.argmax(2))
                # Save attention weights (to be covered later)
                if save_attention_weights:
                    attention_weights.append(self.decoder.attention_weights)
            return torch.cat(outputs[1:], 1), attention_weights

    def bleu(pred_seq, label_seq, k):  #@save
        """Compute the BLEU."""
        pred_tokens, label_tokens = pred_seq.split(' '), label_seq.split(' ')
        len_pred, len_label = len(pred_tokens), len(label_tokens)
        score = math.exp(min(0, 1 - len_label / len_pred))
        for n in range(1, min(k, len_pred) + 1):
            num_matches, label_subs = 0, collections.defaultdict(int)
            for i in range(len_label - n + 1):
                label_subs[' '.join(label_tokens[i: i + n])] += 1
            for i in range(len_pred - n + 1):
                if label_subs[' '.join(pred_tokens[i: i + n])] > 0:
                    num_matches += 1
                    label_subs[' '.join(pred_tokens[i: i + n])] -= 1
            score *= math.pow(num_matches / (len_pred - n + 1), math.pow(0.5, n))
        return score

    class GRU(d2l.Module):  #@save
        """The multilayer GRU model."""
        def __init__(self, num_inputs, num_hiddens, num_layers, dropout=0):
            super().__init__()
            self.save_hyperparameters()
            self.rnn = nn.GRU(num_inputs, num_hiddens, num_layers,
                              dropout=dropout)

        def forward(self, inputs, H=None):
            return self.rnn(inputs, H)

    def init_seq2seq(module):  #@save
        """Initialize weights for sequence-to-sequence learning."""
        if type(module) == nn.Linear:
             nn.init.xavier_uniform_(module.weight)
        if type(module) == nn.GRU:
            for param in module._flat_weights_names:
                if "weight" in param:
                    nn.init.xavier_uniform_(module._parameters[param])

    class Seq2SeqEncoder(Encoder):  #@save
        """The RNN encoder for sequence-to-sequence learning."""
        def __init__(self, vocab_size, embed_size, num_hiddens, num_layers,
                     dropout=0):
            super().__init__()
            self.embedding = nn.Embedding(vocab_size, embed_size)
            self.rnn = GRU(embed_size, num_hiddens, num_layers, dropout)
            self.apply(init_seq2seq)

        def forward(self, X, *args):
            # X shape: (batch_size, num_steps)
            embs = self.embedding(X.t().type(torch.int64))
            # embs shape: (num_steps, batch_size, embed_size)
            outputs, state = self.rnn(embs)
            # outputs shape: (num_steps, batch_size, num_hiddens)
            # state shape: (num_layers, batch_size, num_hiddens)
            return outputs, state

    class Seq2SeqDecoder(Decoder):
        """The RNN decoder for sequence to sequence learning."""
        def __init__(self, vocab_size, embed_size, num_hiddens, num_layers,
                     dropout=0):
            super().__init__()
            self.embedding = nn.Embedding(vocab_size, embed_size)
            self.rnn = GRU(embed_size+num_hiddens, num_hiddens,
                               num_layers, dropout)
            self.dense = nn.LazyLinear(vocab_size)
            self.apply(init_seq2seq)

        def init_state(self, enc_all_outputs, *args):
            return enc_all_outputs

        def forward(self, X, state):
            # X shape: (batch_size, num_steps)
            # embs shape: (num_steps, batch_size, embed_size)
            embs = self.embedding(X.t().type(torch.int32))
            enc_output, hidden_state = state
            # context shape: (batch_size, num_hiddens)
            context = enc_output[-1]
            # Broadcast context to (num_steps, batch_size, num_hiddens)
            context = context.repeat(embs.shape[0], 1, 1)
            # Concat at the feature dimension
            embs_and_context = torch.cat((embs, context), -1)
            outputs, hidden_state = self.rnn(embs_and_context, hidden_state)
            outputs = self.dense(outputs).swapaxes(0, 1)
            # outputs shape: (batch_size, num_steps, vocab_size)
            # hidden_state shape: (num_layers, batch_size, num_hiddens)
            return outputs, [enc_output, hidden_state]

    class Seq2Seq(EncoderDecoder):  #@save
        """The RNN encoder--decoder for sequence to sequence learning."""
        def __init__(self, encoder, decoder, tgt_pad, lr):
            super().__init__(encoder, decoder)
            self.save_hyperparameters()

        def validation_step(self, batch):
            Y_hat = self(*batch[:-1])
            self.plot('loss', self.loss(Y_hat, batch[-1]), train=False)

        def configure_optimizers(self):
            # Adam optimizer is used here
            return torch.optim.Adam(self.parameters(), lr=self.lr)

        def loss(self, Y_hat, Y):
            l = super(Seq2Seq, self).loss(Y_hat, Y, averaged=False)
            mask = (Y.reshape(-1) != self.tgt_pad).type(torch.float32)
            return (l * mask).sum() / mask.sum()

    class Data(d2l.DataModule):  # the book's MTFraEng batches: (src, tgt_in, src_valid_len, label)
        def __init__(self, arrays, num_train, batch_size):
            super().__init__()
            self.save_hyperparameters(ignore=['arrays'])
            self.arrays = [torch.tensor(a) for a in arrays]

        def get_dataloader(self, train):
            idx = slice(0, self.num_train) if train else slice(self.num_train, None)
            return self.get_tensorloader(self.arrays, train, idx)

    data = Data(data_arrays, num_train=24, batch_size=8)
    embed_size, num_hiddens, num_layers, dropout = 6, 12, 2, 0.0
    encoder = Seq2SeqEncoder(9, embed_size, num_hiddens, num_layers, dropout)
    decoder = Seq2SeqDecoder(9, embed_size, num_hiddens, num_layers, dropout)
    model = Seq2Seq(encoder, decoder, tgt_pad=0, lr=0.02)
    src, tgt_in, lens, label = next(iter(data.val_dataloader()))
    model(src, tgt_in, lens)  # materialises the decoder's LazyLinear
    out['shapes'] = [tuple(p.shape) for p in model.parameters()]
    out['xavier'] = [_np(encoder.rnn.rnn.weight_ih_l0), _np(encoder.rnn.rnn.bias_ih_l0)]
    if weights is not None:
        _copy(torch, model.parameters(), weights)
    Y_hat = model(src, tgt_in, lens)
    out['Y_hat'], out['loss0'] = _np(Y_hat), model.loss(Y_hat, label).item()
    if epochs:
        d2l.Trainer(max_epochs=epochs, gradient_clip_val=1).fit(model, data)
        out['train'] = [float(p.y) for p in model.board.data['train_loss']]
        out['val'] = [float(p.y) for p in model.board.data['val_loss']]
    model.eval()
    batch = next(iter(data.val_dataloader()))
    preds, _ = model.predict_step(batch, d2l.cpu(), 6)
    out['preds'] = preds.tolist()
    out['first'] = model(*batch[:-1]).argmax(2)[:, 0].tolist()  # teacher forcing's first step: <bos> too
    label = batch[-1].tolist()
    out['bleu'] = [bleu(' '.join(map(str, p[:p.index(2)] if 2 in p else p)),
                        ' '.join(map(str, l[:l.index(2)])), k=2) for p, l in zip(out['preds'], label)]
    out['bleu_cases'] = [bleu('a b c d', 'a b c d', 2), bleu('a b', 'a b c d', 2), bleu('a x c d', 'a b c d', 2)]
    return out


def _seq2seq_data(n=32, T=6, seed=61):
    rng = np.random.default_rng(seed)
    src, tgt, lens = np.zeros((n, T), np.int64), np.zeros((n, T), np.int64), np.zeros(n, np.int64)
    for i in range(n):
        k = rng.integers(2, 5)
        toks = rng.integers(3, 9, k)
        src[i, :k + 1] = list(toks) + [2]
        tgt[i, :k + 1] = list(toks[::-1]) + [2]  # <eos> = 2, <pad> = 0
        lens[i] = k + 1
    tgt_in = np.concatenate([np.ones((n, 1), np.int64), tgt[:, :-1]], 1)  # <bos> = 1
    return src, tgt_in, lens, tgt


def test_seq2seq_masked_loss_and_training():
    lucid.manual_seed(0)
    arrays = _seq2seq_data()
    r = seq2seq_page(lucid, make_d2l(lucid, shuffle=False), arrays)
    z = r['Y_hat'].reshape(-1, 9)
    label = arrays[3][24:32].ravel()
    l = np.log(np.exp(z).sum(1)) - z[np.arange(len(label)), label]
    mask = label != 0
    assert r['loss0'] == pytest.approx((l * mask).sum() / mask.sum(), rel=1e-5)
    assert r['loss0'] != pytest.approx(l.mean(), rel=1e-3)  # the padding really is left out
    w, b = r['xavier']  # init_seq2seq: Xavier on the GRU weights (3*12 x 6), biases kept
    assert np.abs(w).max() <= math.sqrt(6 / (36 + 6)) and np.abs(b).max() <= 1 / math.sqrt(12)
    assert np.abs(b).max() > 1.0 / math.sqrt(12) * 0.5
    assert r['train'][-1] < 0.8 * r['train'][0] and all(b < a for a, b in zip(r['val'], r['val'][1:]))
    assert np.array(r['preds']).shape == (8, 6) and [p[0] for p in r['preds']] == r['first']
    assert r['bleu_cases'] == [1.0, pytest.approx(math.exp(-1)), pytest.approx(math.sqrt(0.75) * (1 / 3) ** 0.25)]
    assert all(0 <= b <= 1 for b in r['bleu'])


def test_seq2seq_torch_parity():
    torch = pytest.importorskip("torch")
    arrays = _seq2seq_data()
    r = seq2seq_page(lucid, make_d2l(lucid, shuffle=False), arrays, epochs=0)
    rng = np.random.default_rng(62)
    weights = [0.3 * rng.standard_normal(s) for s in r['shapes']]
    r = seq2seq_page(lucid, make_d2l(lucid, shuffle=False), arrays, weights, epochs=3)
    t = seq2seq_page(torch, make_d2l(torch, shuffle=False), arrays, weights, epochs=3)
    assert r['shapes'] == t['shapes']
    for k in ('Y_hat', 'loss0', 'train', 'val', 'bleu'):
        np.testing.assert_allclose(r[k], t[k], rtol=1e-4, atol=1e-5)
    assert r['preds'] == t['preds'] and r['first'] == t['first']


# --------------------------------------------------------------------------- optimisation algorithms


def optimization_pages(torch, d2l, X, y, w0, which):
    nn = torch.nn

    def linreg(X, w, b):  #@save
        """The linear regression model."""
        return torch.matmul(X, w) + b

    def squared_loss(y_hat, y):  #@save
        """Squared loss."""
        return (y_hat - y.reshape(y_hat.shape)) ** 2 / 2

    class Accumulator:  #@save
        """For accumulating sums over `n` variables."""
        def __init__(self, n):
            self.data = [0.0] * n

        def add(self, *args):
            self.data = [a + float(b) for a, b in zip(self.data, args)]

        def __getitem__(self, idx):
            return self.data[idx]

    def evaluate_loss(net, data_iter, loss):  #@save
        """Evaluate the loss of a model on the given dataset."""
        metric = Accumulator(2)  # Sum of losses, no. of examples
        for X, y in data_iter:
            out = net(X)
            y = y.reshape(out.shape)
            l = loss(out, y)
            metric.add(l.sum(), l.numel())
        return metric[0] / metric[1]

    def load_array(data_arrays, batch_size, is_train=True):  #@save
        """Construct a PyTorch data iterator."""
        dataset = torch.utils.data.TensorDataset(*data_arrays)
        return torch.utils.data.DataLoader(dataset, batch_size, shuffle=False)  # (in order)

    data_iter = load_array((torch.tensor(X), torch.tensor(y)), 10)

    def train_ch11(trainer_fn, states, hyperparams, data_iter,
                   feature_dim, num_epochs=2):
        # Initialization
        w = torch.normal(mean=0.0, std=0.01, size=(feature_dim, 1),
                         requires_grad=True)
        b = torch.zeros((1), requires_grad=True)
        with torch.no_grad():
            w.copy_(torch.tensor(w0))
        net, loss = lambda X: linreg(X, w, b), squared_loss
        losses = []
        n = 0
        for _ in range(num_epochs):
            for X, y in data_iter:
                l = loss(net(X), y).mean()
                l.backward()
                trainer_fn([w, b], states, hyperparams)
                n += X.shape[0]
                if n % 20 == 0:
                    losses.append(evaluate_loss(net, data_iter, loss))
        return [_np(w), _np(b)], losses

    def train_concise_ch11(trainer_fn, hyperparams, data_iter, num_epochs=2):
        # Initialization
        net = nn.Sequential(nn.Linear(5, 1))

        def init_weights(module):
            if type(module) == nn.Linear:
                torch.nn.init.normal_(module.weight, std=0.01)

        net.apply(init_weights)
        with torch.no_grad():
            net[0].weight.copy_(torch.tensor(w0.T))
            net[0].bias.zero_()
        optimizer = trainer_fn(net.parameters(), **hyperparams)
        loss = nn.MSELoss(reduction='none')
        losses = []
        n = 0
        for _ in range(num_epochs):
            for X, y in data_iter:
                optimizer.zero_grad()
                out = net(X)
                y = y.reshape(out.shape)
                l = loss(out, y)
                l.mean().backward()
                optimizer.step()
                n += X.shape[0]
                if n % 20 == 0:
                    # `MSELoss` computes squared error without the 1/2 factor
                    losses.append(evaluate_loss(net, data_iter, loss) / 2)
        return [_np(net[0].weight).T, _np(net[0].bias)], losses

    def init_momentum_states(feature_dim):
        v_w = torch.zeros((feature_dim, 1))
        v_b = torch.zeros(1)
        return (v_w, v_b)

    def sgd_momentum(params, states, hyperparams):
        for p, v in zip(params, states):
            with torch.no_grad():
                v[:] = hyperparams['momentum'] * v + p.grad
                p[:] -= hyperparams['lr'] * v
            p.grad.data.zero_()

    def init_adagrad_states(feature_dim):
        s_w = torch.zeros((feature_dim, 1))
        s_b = torch.zeros(1)
        return (s_w, s_b)

    def adagrad(params, states, hyperparams):
        eps = 1e-6
        for p, s in zip(params, states):
            with torch.no_grad():
                s[:] += torch.square(p.grad)
                p[:] -= hyperparams['lr'] * p.grad / torch.sqrt(s + eps)
            p.grad.data.zero_()

    def init_rmsprop_states(feature_dim):
        s_w = torch.zeros((feature_dim, 1))
        s_b = torch.zeros(1)
        return (s_w, s_b)

    def rmsprop(params, states, hyperparams):
        gamma, eps = hyperparams['gamma'], 1e-6
        for p, s in zip(params, states):
            with torch.no_grad():
                s[:] = gamma * s + (1 - gamma) * torch.square(p.grad)
                p[:] -= hyperparams['lr'] * p.grad / torch.sqrt(s + eps)
            p.grad.data.zero_()

    def init_adadelta_states(feature_dim):
        s_w, s_b = torch.zeros((feature_dim, 1)), torch.zeros(1)
        delta_w, delta_b = torch.zeros((feature_dim, 1)), torch.zeros(1)
        return ((s_w, delta_w), (s_b, delta_b))

    def adadelta(params, states, hyperparams):
        rho, eps = hyperparams['rho'], 1e-5
        for p, (s, delta) in zip(params, states):
            with torch.no_grad():
                # In-place updates via [:]
                s[:] = rho * s + (1 - rho) * torch.square(p.grad)
                g = (torch.sqrt(delta + eps) / torch.sqrt(s + eps)) * p.grad
                p[:] -= g
                delta[:] = rho * delta + (1 - rho) * g * g
            p.grad.data.zero_()

    def init_adam_states(feature_dim):
        v_w, v_b = torch.zeros((feature_dim, 1)), torch.zeros(1)
        s_w, s_b = torch.zeros((feature_dim, 1)), torch.zeros(1)
        return ((v_w, s_w), (v_b, s_b))

    def adam(params, states, hyperparams):
        beta1, beta2, eps = 0.9, 0.999, 1e-6
        for p, (v, s) in zip(params, states):
            with torch.no_grad():
                v[:] = beta1 * v + (1 - beta1) * p.grad
                s[:] = beta2 * s + (1 - beta2) * torch.square(p.grad)
                v_bias_corr = v / (1 - beta1 ** hyperparams['t'])
                s_bias_corr = s / (1 - beta2 ** hyperparams['t'])
                p[:] -= hyperparams['lr'] * v_bias_corr / (torch.sqrt(s_bias_corr)
                                                           + eps)
            p.grad.data.zero_()
        hyperparams['t'] += 1

    # (scratch fn, its states, its hyperparameters, torch.optim class, its hyperparameters): the
    # concise loop's MSELoss doubles the gradient, so momentum SGD gets half the rate there; the
    # other methods are scale-free up to eps (Adadelta is given the scratch eps explicitly)
    runs = {'momentum': (sgd_momentum, init_momentum_states(5), {'lr': 0.02, 'momentum': 0.5},
                         torch.optim.SGD, {'lr': 0.01, 'momentum': 0.5}),
            'adagrad': (adagrad, init_adagrad_states(5), {'lr': 0.1}, torch.optim.Adagrad, {'lr': 0.1}),
            'rmsprop': (rmsprop, init_rmsprop_states(5), {'lr': 0.01, 'gamma': 0.9},
                        torch.optim.RMSprop, {'lr': 0.01, 'alpha': 0.9}),
            'adadelta': (adadelta, init_adadelta_states(5), {'rho': 0.9},
                         torch.optim.Adadelta, {'rho': 0.9, 'eps': 1e-5}),
            'adam': (adam, init_adam_states(5), {'lr': 0.01, 't': 1}, torch.optim.Adam, {'lr': 0.01})}
    fn, states, hp, opt, ohp = runs[which]
    return train_ch11(fn, states, hp, data_iter, 5), train_concise_ch11(opt, ohp, data_iter)


def _airfoil():
    rng = np.random.default_rng(71)
    X = rng.standard_normal((40, 5)).astype(np.float32)
    y = (X @ np.array([1.0, -2.0, 0.5, 0.0, 1.5]) + 0.3 + 0.1 * rng.standard_normal(40)).astype(np.float32)
    return X, y, (0.01 * rng.standard_normal((5, 1))).astype(np.float32)


# momentum is exact; the others see eps against a doubled gradient (Adadelta's eps, inside both
# square roots next to states of size 1e-5, moves its steps by ~0.1%)
_OPT_TOL = {'momentum': 1e-5, 'adagrad': 1e-4, 'rmsprop': 1e-4, 'adadelta': 3e-3, 'adam': 1e-4}


def test_optimization_algorithms_scratch_vs_optim():
    X, y, w0 = _airfoil()
    for which, tol in _OPT_TOL.items():
        (ps, ls), (pc, lc) = optimization_pages(lucid, make_d2l(lucid), X, y, w0, which)
        for a, b in zip(ps, pc):
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol, err_msg=which)
        np.testing.assert_allclose(ls, lc, rtol=10 * tol, err_msg=which)
        assert len(ls) == 4 and all(b < a for a, b in zip(ls, ls[1:])) and ls[-1] < 0.95 * ls[0], which
    # momentum, replayed in float64: v = m v + g; w -= lr v
    (ps, ls), _ = optimization_pages(lucid, make_d2l(lucid), X, y, w0, 'momentum')
    w, b, vw, vb = w0.astype(np.float64), 0.0, 0.0, 0.0
    for _ in range(2):
        for i in range(0, 40, 10):
            r = X[i:i + 10] @ w + b - y[i:i + 10, None]
            vw = 0.5 * vw + X[i:i + 10].T @ r / 10
            vb = 0.5 * vb + r.mean()
            w, b = w - 0.02 * vw, b - 0.02 * vb
    np.testing.assert_allclose(ps[0], w, rtol=1e-5)
    np.testing.assert_allclose(ps[1], [b], rtol=1e-5)


def test_optimization_algorithms_torch_parity():
    torch = pytest.importorskip("torch")
    X, y, w0 = _airfoil()
    for which in _OPT_TOL:
        r = optimization_pages(lucid, make_d2l(lucid), X, y, w0, which)
        t = optimization_pages(torch, make_d2l(torch), X, y, w0, which)
        for (rp, rl), (tp, tl) in zip(r, t):
            for a, b in zip(rp, tp):
                np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=which)
            np.testing.assert_allclose(rl, tl, rtol=1e-5, err_msg=which)


# --------------------------------------------------------------------------- more pages


def more_pages(torch, d2l, x_seq, x_train, y_train):
    out = {}
    # "Multilayer Perceptrons": the activation functions' derivatives
    x = torch.arange(-8.0, 8.0, 0.1, requires_grad=True)
    y = torch.relu(x)
    y.backward(torch.ones_like(x), retain_graph=True)
    out['relu'] = _np(x), _np(y), _np(x.grad)
    y = torch.sigmoid(x)
    # Clear out previous gradients
    x.grad.data.zero_()
    y.backward(torch.ones_like(x),retain_graph=True)
    out['sigmoid'] = _np(y), _np(x.grad)
    y = torch.tanh(x)
    # Clear out previous gradients
    x.grad.data.zero_()
    y.backward(torch.ones_like(x),retain_graph=True)
    out['tanh'] = _np(y), _np(x.grad)

    # "Working with Sequences": autoregressive one-step, multi-step and k-step predictions
    class Data(d2l.DataModule):
        def __init__(self, batch_size=16, T=1000, num_train=600, tau=4):
            self.save_hyperparameters()
            self.time = torch.arange(1, T + 1, dtype=torch.float32)
            self.x = torch.sin(0.01 * self.time) + torch.randn(T) * 0.2

        def get_dataloader(self, train):
            features = [self.x[i : self.T-self.tau+i] for i in range(self.tau)]
            self.features = torch.stack(features, 1)
            self.labels = self.x[self.tau:].reshape((-1, 1))
            i = slice(0, self.num_train) if train else slice(self.num_train, None)
            return self.get_tensorloader([self.features, self.labels], train, i)

    data = Data(batch_size=8, T=60, num_train=32, tau=4)
    data.x = torch.tensor(x_seq)
    model = d2l.LinearRegression(lr=0.05)
    model(torch.zeros(1, 4))
    _copy(torch, model.parameters(), [np.full((1, 4), 0.25), [0.0]])
    trainer = d2l.Trainer(max_epochs=4)
    trainer.fit(model, data)
    out['wb'] = [_np(a) for a in model.get_w_b()]
    onestep_preds = model(data.features).detach().cpu().numpy()
    multistep_preds = torch.zeros(data.T)
    multistep_preds[:] = data.x
    for i in range(data.num_train + data.tau, data.T):
        multistep_preds[i] = model(
            multistep_preds[i - data.tau:i].reshape((1, -1)))
    multistep_preds = multistep_preds.detach().cpu().numpy()
    out['onestep'], out['multistep'] = onestep_preds, multistep_preds

    def k_step_pred(k):
        features = []
        for i in range(data.tau):
            features.append(data.x[i : i+data.T-data.tau-k+1])
        # The (i+tau)-th element stores the (i+1)-step-ahead predictions
        for i in range(k):
            preds = model(torch.stack(features[i : i+data.tau], 1))
            features.append(preds.reshape(-1))
        return features[data.tau:]

    steps = (1, 4, 16)
    preds = k_step_pred(steps[-1])
    out['kstep'] = [_np(preds[k - 1]) for k in steps]

    # "Attention Pooling by Similarity": Nadaraya-Watson regression with four kernels
    def nadaraya_watson(x_train, y_train, x_val, kernel):
        dists = x_train.reshape((-1, 1)) - x_val.reshape((1, -1))
        # Each column/row corresponds to each query/key
        k = kernel(dists).type(torch.float32)
        # Normalization over keys for each query
        attention_w = k / k.sum(0)
        y_hat = y_train@attention_w
        return y_hat, attention_w

    def gaussian(x):
        return torch.exp(-x**2 / 2)

    def boxcar(x):
        return torch.abs(x) < 1.0

    def constant(x):
        return 1.0 + 0 * x

    def epanechikov(x):
        return torch.max(1 - torch.abs(x), torch.zeros_like(x))

    x_train, y_train = torch.tensor(x_train), torch.tensor(y_train)
    x_val = torch.arange(0, 5, 0.1)
    out['nw'] = [[_np(v) for v in nadaraya_watson(x_train, y_train, x_val, kernel)]
                 for kernel in (gaussian, boxcar, constant, epanechikov)]
    return out


def _more_data():
    rng = np.random.default_rng(81)
    t = np.arange(1, 61)
    x_seq = (np.sin(0.1 * t) + 0.1 * rng.standard_normal(60)).astype(np.float32)
    x_train = np.sort(rng.random(20) * 5).astype(np.float32)
    y_train = (2 * np.sin(x_train) + x_train + rng.standard_normal(20)).astype(np.float32)
    return x_seq, x_train, y_train


def test_activations_sequences_attention_pooling():
    x_seq, x_train, y_train = _more_data()
    r = more_pages(lucid, make_d2l(lucid, shuffle=False), x_seq, x_train, y_train)
    x, y, g = r['relu']
    assert len(x) == 160 and (y == np.maximum(x, 0)).all() and (g == (x > 0)).all()
    s = 1 / (1 + np.exp(-x))
    np.testing.assert_allclose(r['sigmoid'][0], s, rtol=1e-6)
    # (the zeroed grad; float32 y * (1 - y) loses bits where y is near 1, as PyTorch's does)
    np.testing.assert_allclose(r['sigmoid'][1], s * (1 - s), rtol=1e-5, atol=2e-7)
    np.testing.assert_allclose(r['tanh'][1], 1 - np.tanh(x) ** 2, rtol=1e-5, atol=1e-7)
    w, b = (a.astype(np.float64) for a in r['wb'])
    feats = np.stack([x_seq[i:56 + i] for i in range(4)], 1).astype(np.float64)
    np.testing.assert_allclose(r['onestep'].ravel(), feats @ w.ravel() + b, rtol=1e-5, atol=1e-6)
    mp = x_seq.astype(np.float64).copy()
    for i in range(36, 60):  # each prediction fed back through the tensor's item assignment
        mp[i] = mp[i - 4:i] @ w.ravel() + b[0]
    np.testing.assert_allclose(r['multistep'], mp, rtol=1e-4, atol=1e-5)
    f = [x_seq[i:i + 60 - 4 - 16 + 1].astype(np.float64) for i in range(4)]
    for i in range(16):
        f.append(np.stack(f[i:i + 4], 1) @ w.ravel() + b[0])
    for k, got in zip((1, 4, 16), r['kstep']):
        np.testing.assert_allclose(got, f[4 + k - 1], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(r['kstep'][0], r['onestep'].ravel()[:41], rtol=1e-5, atol=1e-6)
    d = x_train[:, None].astype(np.float64) - np.arange(0, 5, 0.1)[None, :]
    for (y_hat, aw), k in zip(r['nw'], (np.exp(-d ** 2 / 2), np.abs(d) < 1.0, np.ones_like(d),
                                        np.maximum(1 - np.abs(d), 0))):
        k = k.astype(np.float64)
        np.testing.assert_allclose(aw, k / k.sum(0), rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(y_hat, y_train @ (k / k.sum(0)), rtol=1e-5, atol=1e-5)
    assert np.allclose(r['nw'][2][0], y_train.mean(), rtol=1e-5)  # the constant kernel averages


def vit_page(torch, d2l, X_img, y_img, W=None, epochs=2):
    nn = torch.nn
    attention_pages(torch, d2l, _attention_data())  # defines d2l.MultiHeadAttention

    class PatchEmbedding(nn.Module):
        def __init__(self, img_size=96, patch_size=16, num_hiddens=512):
            super().__init__()
            def _make_tuple(x):
                if not isinstance(x, (list, tuple)):
                    return (x, x)
                return x
            img_size, patch_size = _make_tuple(img_size), _make_tuple(patch_size)
            self.num_patches = (img_size[0] // patch_size[0]) * (
                img_size[1] // patch_size[1])
            self.conv = nn.LazyConv2d(num_hiddens, kernel_size=patch_size,
                                      stride=patch_size)

        def forward(self, X):
            # Output shape: (batch size, no. of patches, no. of channels)
            return self.conv(X).flatten(2).transpose(1, 2)

    class ViTMLP(nn.Module):
        def __init__(self, mlp_num_hiddens, mlp_num_outputs, dropout=0.5):
            super().__init__()
            self.dense1 = nn.LazyLinear(mlp_num_hiddens)
            self.gelu = nn.GELU()
            self.dropout1 = nn.Dropout(dropout)
            self.dense2 = nn.LazyLinear(mlp_num_outputs)
            self.dropout2 = nn.Dropout(dropout)

        def forward(self, x):
            return self.dropout2(self.dense2(self.dropout1(self.gelu(
                self.dense1(x)))))

    class ViTBlock(nn.Module):
        def __init__(self, num_hiddens, norm_shape, mlp_num_hiddens,
                     num_heads, dropout, use_bias=False):
            super().__init__()
            self.ln1 = nn.LayerNorm(norm_shape)
            self.attention = d2l.MultiHeadAttention(num_hiddens, num_heads,
                                                    dropout, use_bias)
            self.ln2 = nn.LayerNorm(norm_shape)
            self.mlp = ViTMLP(mlp_num_hiddens, num_hiddens, dropout)

        def forward(self, X, valid_lens=None):
            X = X + self.attention(*([self.ln1(X)] * 3), valid_lens)
            return X + self.mlp(self.ln2(X))

    class ViT(d2l.Classifier):
        """Vision Transformer."""
        def __init__(self, img_size, patch_size, num_hiddens, mlp_num_hiddens,
                     num_heads, num_blks, emb_dropout, blk_dropout, lr=0.1,
                     use_bias=False, num_classes=10):
            super().__init__()
            self.save_hyperparameters()
            self.patch_embedding = PatchEmbedding(
                img_size, patch_size, num_hiddens)
            self.cls_token = nn.Parameter(torch.zeros(1, 1, num_hiddens))
            num_steps = self.patch_embedding.num_patches + 1  # Add the cls token
            # Positional embeddings are learnable
            self.pos_embedding = nn.Parameter(
                torch.randn(1, num_steps, num_hiddens) * 0.02)
            self.dropout = nn.Dropout(emb_dropout)
            self.blks = nn.Sequential()
            for i in range(num_blks):
                self.blks.add_module(f"{i}", ViTBlock(
                    num_hiddens, num_hiddens, mlp_num_hiddens,
                    num_heads, blk_dropout, use_bias))
            self.head = nn.Sequential(nn.LayerNorm(num_hiddens),
                                      nn.Linear(num_hiddens, num_classes))

        def forward(self, X):
            X = self.patch_embedding(X)
            X = torch.cat((self.cls_token.expand(X.shape[0], -1, -1), X), 1)
            X = self.dropout(X + self.pos_embedding)
            for blk in self.blks:
                X = blk(X)
            return self.head(X[:, 0])

    img_size, patch_size = 12, 4
    num_hiddens, mlp_num_hiddens, num_heads, num_blks = 8, 16, 2, 1
    emb_dropout, blk_dropout, lr = 0.0, 0.0, 0.1
    model = ViT(img_size, patch_size, num_hiddens, mlp_num_hiddens, num_heads,
                num_blks, emb_dropout, blk_dropout, lr, num_classes=4)
    data = d2l.FashionMNIST(X_img, y_img, num_train=32, batch_size=8)
    X_val = next(iter(data.val_dataloader()))[0]
    model(X_val)
    if W is not None:
        _copy(torch, model.parameters(), W)
    out = {'names': [n for n, _ in model.named_parameters()], 'shapes': [tuple(p.shape) for p in model.parameters()],
           'patches': _np(model.patch_embedding(X_val)), 'logits': _np(model(X_val)),
           'W': [_np(p) for p in model.parameters()]}
    if epochs:
        d2l.Trainer(max_epochs=epochs).fit(model, data)
        out['train'] = [float(p.y) for p in model.board.data['train_loss']]
    return out


def test_vision_transformer():
    from test_tutorials_batch13_d2l_a import _images
    lucid.manual_seed(0)
    X_img, y_img = _images()
    r = vit_page(lucid, make_d2l(lucid, shuffle=False), X_img, y_img)
    assert r['shapes'][:3] == [(1, 1, 8), (1, 10, 8), (8, 1, 4, 4)]  # cls token, 9 patches + 1, the patch conv
    assert r['names'][:3] == ['cls_token', 'pos_embedding', 'patch_embedding.conv.weight']
    w, b = r['W'][2], r['W'][3]
    patches = X_img[32:40].reshape(8, 1, 3, 4, 3, 4).transpose(0, 2, 4, 1, 3, 5).reshape(8, 9, 16)
    np.testing.assert_allclose(r['patches'], patches @ w.reshape(8, 16).T + b, rtol=1e-4, atol=1e-5)
    assert r['logits'].shape == (8, 4)
    assert r['train'][-1] < 0.8 * r['train'][0]


def test_more_pages_torch_parity():
    torch = pytest.importorskip("torch")
    from test_tutorials_batch13_d2l_a import _images
    args = _more_data()
    r = more_pages(lucid, make_d2l(lucid, shuffle=False), *args)
    t = more_pages(torch, make_d2l(torch, shuffle=False), *args)
    # arange(-8.0, 8.0, 0.1)[80] is 0.0 on Lucid (start + i * step in float64) and 4.4e-16 on
    # PyTorch's vectorised CPU kernel (values within 1 ulp): relu's derivative there is 0 vs 1
    np.testing.assert_allclose(r['relu'][0], t['relu'][0], rtol=0, atol=1e-6)
    assert r['relu'][0][80] == 0 and r['relu'][2][80] == 0 and t['relu'][2][80] == 1
    r['relu'] = t['relu'] = ()
    for k in r:
        for a, b in zip(_flat(r[k]), _flat(t[k])):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=k)
    X_img, y_img = _images()
    W = vit_page(lucid, make_d2l(lucid, shuffle=False), X_img, y_img, epochs=0)['W']
    r = vit_page(lucid, make_d2l(lucid, shuffle=False), X_img, y_img, W)
    t = vit_page(torch, make_d2l(torch, shuffle=False), X_img, y_img, W)
    assert r['names'] == t['names'] and r['shapes'] == t['shapes']
    for k in ('patches', 'logits', 'train'):
        np.testing.assert_allclose(r[k], t[k], rtol=1e-4, atol=1e-5)


# --------------------------------------------------------------------------- BERT


def bert_page(torch, d2l, data, W=None, steps=6):
    nn = torch.nn
    out = {}
    attention_pages(torch, d2l, _attention_data())  # defines d2l.TransformerEncoderBlock

    def get_tokens_and_segments(tokens_a, tokens_b=None):  #@save
        """Get tokens of the BERT input sequence and their segment IDs."""
        tokens = ['<cls>'] + tokens_a + ['<sep>']
        # 0 and 1 are marking segment A and B, respectively
        segments = [0] * (len(tokens_a) + 2)
        if tokens_b is not None:
            tokens += tokens_b + ['<sep>']
            segments += [1] * (len(tokens_b) + 1)
        return tokens, segments

    out['tokens'] = get_tokens_and_segments(['a', 'b'], ['c'])

    class BERTEncoder(nn.Module):  #@save
        """BERT encoder."""
        def __init__(self, vocab_size, num_hiddens, ffn_num_hiddens, num_heads,
                     num_blks, dropout, max_len=1000, **kwargs):
            super(BERTEncoder, self).__init__(**kwargs)
            self.token_embedding = nn.Embedding(vocab_size, num_hiddens)
            self.segment_embedding = nn.Embedding(2, num_hiddens)
            self.blks = nn.Sequential()
            for i in range(num_blks):
                self.blks.add_module(f"{i}", d2l.TransformerEncoderBlock(
                    num_hiddens, ffn_num_hiddens, num_heads, dropout, True))
            # In BERT, positional embeddings are learnable, thus we create a
            # parameter of positional embeddings that are long enough
            self.pos_embedding = nn.Parameter(torch.randn(1, max_len,
                                                          num_hiddens))

        def forward(self, tokens, segments, valid_lens):
            # Shape of `X` remains unchanged in the following code snippet:
            # (batch size, max sequence length, `num_hiddens`)
            X = self.token_embedding(tokens) + self.segment_embedding(segments)
            X = X + self.pos_embedding[:, :X.shape[1], :]
            for blk in self.blks:
                X = blk(X, valid_lens)
            return X

    class MaskLM(nn.Module):  #@save
        """The masked language model task of BERT."""
        def __init__(self, vocab_size, num_hiddens, **kwargs):
            super(MaskLM, self).__init__(**kwargs)
            self.mlp = nn.Sequential(nn.LazyLinear(num_hiddens),
                                     nn.ReLU(),
                                     nn.LayerNorm(num_hiddens),
                                     nn.LazyLinear(vocab_size))

        def forward(self, X, pred_positions):
            num_pred_positions = pred_positions.shape[1]
            pred_positions = pred_positions.reshape(-1)
            batch_size = X.shape[0]
            batch_idx = torch.arange(0, batch_size)
            # Suppose that `batch_size` = 2, `num_pred_positions` = 3, then
            # `batch_idx` is `torch.tensor([0, 0, 0, 1, 1, 1])`
            batch_idx = torch.repeat_interleave(batch_idx, num_pred_positions)
            masked_X = X[batch_idx, pred_positions]
            masked_X = masked_X.reshape((batch_size, num_pred_positions, -1))
            mlm_Y_hat = self.mlp(masked_X)
            return mlm_Y_hat

    class NextSentencePred(nn.Module):  #@save
        """The next sentence prediction task of BERT."""
        def __init__(self, **kwargs):
            super(NextSentencePred, self).__init__(**kwargs)
            self.output = nn.LazyLinear(2)

        def forward(self, X):
            # `X` shape: (batch size, `num_hiddens`)
            return self.output(X)

    class BERTModel(nn.Module):  #@save
        """The BERT model."""
        def __init__(self, vocab_size, num_hiddens, ffn_num_hiddens,
                     num_heads, num_blks, dropout, max_len=1000):
            super(BERTModel, self).__init__()
            self.encoder = BERTEncoder(vocab_size, num_hiddens, ffn_num_hiddens,
                                       num_heads, num_blks, dropout,
                                       max_len=max_len)
            self.hidden = nn.Sequential(nn.LazyLinear(num_hiddens),
                                        nn.Tanh())
            self.mlm = MaskLM(vocab_size, num_hiddens)
            self.nsp = NextSentencePred()

        def forward(self, tokens, segments, valid_lens=None, pred_positions=None):
            encoded_X = self.encoder(tokens, segments, valid_lens)
            if pred_positions is not None:
                mlm_Y_hat = self.mlm(encoded_X, pred_positions)
            else:
                mlm_Y_hat = None
            # The hidden layer of the MLP classifier for next sentence prediction.
            # 0 is the index of the '<cls>' token
            nsp_Y_hat = self.nsp(self.hidden(encoded_X[:, 0, :]))
            return encoded_X, mlm_Y_hat, nsp_Y_hat

    def _get_batch_loss_bert(net, loss, vocab_size, tokens_X,
                             segments_X, valid_lens_x,
                             pred_positions_X, mlm_weights_X,
                             mlm_Y, nsp_y):
        # Forward pass
        _, mlm_Y_hat, nsp_Y_hat = net(tokens_X, segments_X,
                                      valid_lens_x.reshape(-1),
                                      pred_positions_X)
        # Compute masked language model loss
        mlm_l = loss(mlm_Y_hat.reshape(-1, vocab_size), mlm_Y.reshape(-1)) *\
        mlm_weights_X.reshape(-1, 1)
        mlm_l = mlm_l.sum() / (mlm_weights_X.sum() + 1e-8)
        # Compute next sentence prediction loss
        nsp_l = loss(nsp_Y_hat, nsp_y)
        l = mlm_l + nsp_l
        return mlm_l, nsp_l, l

    tokens, segments, valid_lens, pred_positions, mlm_weights, mlm_Y, nsp_y = (torch.tensor(a) for a in data)
    vocab_size = 10
    net = BERTModel(vocab_size, num_hiddens=8, ffn_num_hiddens=16, num_heads=2, num_blks=1, dropout=0.0, max_len=16)
    net(tokens, segments, valid_lens, pred_positions)
    if W is not None:
        _copy(torch, net.parameters(), W)
    out['names'] = [n for n, _ in net.named_parameters()]
    out['W'] = [_np(p) for p in net.parameters()]
    encoded_X, mlm_Y_hat, nsp_Y_hat = net(tokens, segments, valid_lens, pred_positions)
    out['encoded'], out['mlm'], out['nsp'] = _np(encoded_X), _np(mlm_Y_hat), _np(nsp_Y_hat)
    out['masked_X'] = _np(net.mlm.mlp[0](encoded_X[torch.repeat_interleave(torch.arange(0, 4), 3),
                                                     pred_positions.reshape(-1)]))
    loss = nn.CrossEntropyLoss()
    trainer = torch.optim.Adam(net.parameters(), lr=0.01)
    losses = []
    for _ in range(steps):
        trainer.zero_grad()
        mlm_l, nsp_l, l = _get_batch_loss_bert(net, loss, vocab_size, tokens, segments, valid_lens,
                                               pred_positions, mlm_weights, mlm_Y, nsp_y)
        l.backward()
        trainer.step()
        losses.append((mlm_l.item(), nsp_l.item(), l.item()))
    out['losses'] = losses
    return out


def _bert_data():
    rng = np.random.default_rng(91)
    tokens = rng.integers(1, 10, (4, 8))
    segments = np.array([[0] * 4 + [1] * 4] * 4)
    valid_lens = np.array([8, 6, 7, 5])
    pred_positions = np.array([[1, 5, 2], [6, 1, 0], [3, 4, 0], [2, 1, 3]])
    mlm_weights = np.array([[1, 1, 1], [1, 1, 0], [1, 1, 0], [1, 1, 1]], np.float32)
    mlm_Y = rng.integers(1, 10, (4, 3))
    nsp_y = np.array([0, 1, 1, 0])
    return tokens, segments, valid_lens, pred_positions, mlm_weights, mlm_Y, nsp_y


def test_bert_masked_lm_and_pretraining_loss():
    lucid.manual_seed(0)
    data = _bert_data()
    r = bert_page(lucid, make_d2l(lucid), data)
    assert r['tokens'] == (['<cls>', 'a', 'b', '<sep>', 'c', '<sep>'], [0, 0, 0, 0, 1, 1])
    assert r['encoded'].shape == (4, 8, 8) and r['mlm'].shape == (4, 3, 10) and r['nsp'].shape == (4, 2)
    W = dict(zip(r['names'], r['W']))
    rows = r['encoded'][np.repeat(np.arange(4), 3), data[3].ravel()]  # X[batch_idx, pred_positions]
    np.testing.assert_allclose(r['masked_X'], rows @ W['mlm.mlp.0.weight'].T + W['mlm.mlp.0.bias'],
                               rtol=1e-5, atol=1e-6)
    h = np.tanh(r['encoded'][:, 0] @ W['hidden.0.weight'].T + W['hidden.0.bias'])
    np.testing.assert_allclose(r['nsp'], h @ W['nsp.output.weight'].T + W['nsp.output.bias'], rtol=1e-4, atol=1e-5)
    # the book's MLM loss multiplies the batch-mean cross-entropy by the weights and divides by
    # their sum: the (unweighted) mean itself
    z = r['mlm'].reshape(-1, 10).astype(np.float64)
    ce = np.log(np.exp(z).sum(1)) - z[np.arange(12), data[5].ravel()]
    zn = r['nsp'].astype(np.float64)
    nsp = (np.log(np.exp(zn).sum(1)) - zn[np.arange(4), data[6]]).mean()
    mlm_l, nsp_l, l = r['losses'][0]
    assert mlm_l == pytest.approx(ce.mean() * 10 / (10 + 1e-8), rel=1e-5)
    assert nsp_l == pytest.approx(nsp, rel=1e-5) and l == pytest.approx(mlm_l + nsp_l, rel=1e-6)
    assert r['losses'][-1][2] < 0.8 * r['losses'][0][2]


def test_bert_torch_parity():
    torch = pytest.importorskip("torch")
    data = _bert_data()
    W = bert_page(lucid, make_d2l(lucid), data, steps=0)['W']
    r, t = bert_page(lucid, make_d2l(lucid), data, W), bert_page(torch, make_d2l(torch), data, W)
    assert r['names'] == t['names']
    for k in ('encoded', 'mlm', 'nsp', 'masked_X', 'losses'):
        np.testing.assert_allclose(r[k], t[k], rtol=1e-4, atol=1e-5)


# --------------------------------------------------------------------------- deep and bidirectional RNNs


def deep_bi_rnn_page(torch, d2l, W, X):
    nn = torch.nn
    RNNScratch = _rnn_scratch(torch, d2l)
    d2l.RNNScratch = RNNScratch

    class StackedRNNScratch(d2l.Module):
        def __init__(self, num_inputs, num_hiddens, num_layers, sigma=0.01):
            super().__init__()
            self.save_hyperparameters()
            self.rnns = nn.Sequential(*[d2l.RNNScratch(
                num_inputs if i==0 else num_hiddens, num_hiddens, sigma)
                                        for i in range(num_layers)])

        def forward(self, inputs, Hs=None):
            outputs = inputs
            if Hs is None: Hs = [None] * self.num_layers
            for i in range(self.num_layers):
                outputs, Hs[i] = self.rnns[i](outputs, Hs[i])
                outputs = torch.stack(outputs, 0)
            return outputs, Hs

    class BiRNNScratch(d2l.Module):
        def __init__(self, num_inputs, num_hiddens, sigma=0.01):
            super().__init__()
            self.save_hyperparameters()
            self.f_rnn = d2l.RNNScratch(num_inputs, num_hiddens, sigma)
            self.b_rnn = d2l.RNNScratch(num_inputs, num_hiddens, sigma)
            self.num_hiddens *= 2  # The output dimension will be doubled

        def forward(self, inputs, Hs=None):
            f_H, b_H = Hs if Hs is not None else (None, None)
            f_outputs, f_H = self.f_rnn(inputs, f_H)
            b_outputs, b_H = self.b_rnn(reversed(inputs), b_H)
            outputs = [torch.cat((f, b), -1) for f, b in zip(
                f_outputs, reversed(b_outputs))]
            return outputs, (f_H, b_H)

    X = torch.tensor(X)
    out = {}
    deep = StackedRNNScratch(3, 4, 2)
    _copy(torch, deep.parameters(), W[:6])
    outputs, Hs = deep(X)
    out['deep'] = _np(outputs), np.stack([_np(h) for h in Hs])
    concise = nn.RNN(3, 4, num_layers=2)  # (the book's concise GRU(num_layers=...) in its RNN form)
    _copy(torch, concise.parameters(), [W[0].T, W[1].T, W[2], np.zeros(4), W[3].T, W[4].T, W[5], np.zeros(4)])
    o, h = concise(X)
    out['deep_nn'] = _np(o), _np(h)
    bi = BiRNNScratch(3, 4)
    _copy(torch, bi.parameters(), W[6:12])
    outputs, (f_H, b_H) = bi(X)
    out['bi'] = np.stack([_np(o) for o in outputs]), _np(f_H), _np(b_H), bi.num_hiddens
    concise = nn.RNN(3, 4, bidirectional=True)
    _copy(torch, concise.parameters(), [W[6].T, W[7].T, W[8], np.zeros(4), W[9].T, W[10].T, W[11], np.zeros(4)])
    o, h = concise(X)
    out['bi_nn'] = _np(o), _np(h)
    return out


def _deep_bi_data():
    rng = np.random.default_rng(101)
    shapes = [(3, 4), (4, 4), (4,), (4, 4), (4, 4), (4,), (3, 4), (4, 4), (4,), (3, 4), (4, 4), (4,)]
    return [0.5 * rng.standard_normal(s) for s in shapes], rng.standard_normal((5, 2, 3)).astype(np.float32)


def test_deep_and_bidirectional_rnns():
    W, X = _deep_bi_data()
    r = deep_bi_rnn_page(lucid, make_d2l(lucid), W, X)

    def run(X, Wxh, Whh, b):
        H, outs = np.zeros((X.shape[1], Whh.shape[0])), []
        for x in X:
            H = np.tanh(x @ Wxh + H @ Whh + b)
            outs.append(H)
        return np.stack(outs), H

    X = X.astype(np.float64)
    o1, h1 = run(X, *W[:3])
    o2, h2 = run(o1, *W[3:6])
    for got, ref in zip(r['deep'], (o2, np.stack([h1, h2]))):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    for got, ref in zip(r['deep_nn'], r['deep']):  # from scratch equals nn.RNN(num_layers=2)
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    of, hf = run(X, *W[6:9])
    ob, hb = run(X[::-1], *W[9:12])  # reversed(inputs): the time steps backwards
    outs, f_H, b_H, nh = r['bi']
    np.testing.assert_allclose(outs, np.concatenate([of, ob[::-1]], -1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(f_H, hf, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b_H, hb, rtol=1e-5, atol=1e-6)
    assert nh == 8
    np.testing.assert_allclose(r['bi_nn'][0], outs, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(r['bi_nn'][1], np.stack([hf, hb]), rtol=1e-5, atol=1e-6)


def test_deep_and_bidirectional_rnns_torch_parity():
    torch = pytest.importorskip("torch")
    W, X = _deep_bi_data()
    r, t = deep_bi_rnn_page(lucid, make_d2l(lucid), W, X), deep_bi_rnn_page(torch, make_d2l(torch), W, X)
    for k in r:
        for a, b in zip(_flat(r[k]), _flat(t[k])):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=k)
